//! ESP flow actions (`ibv_create_flow_action_esp`): IPsec crypto offload
//! that a flow applies to the packets it matches
//! ([`FlowBuilder::esp`](crate::FlowBuilder::esp)).
//!
//! Neither soft device has them: libibverbs answers for rxe and siw
//! ("not supported by rxe0", [`Error::is_unsupported`]). mlx5 with IPsec
//! offload has them.

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::sys;
use crate::{Context, Error, Result};

/// Whether an ESP action encrypts (egress) or decrypts (ingress).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EspDirection {
    /// Decrypt matched packets.
    Decrypt,
    /// Encrypt matched packets.
    Encrypt,
}

/// ESP tunnel or transport mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EspMode {
    /// Tunnel mode.
    Tunnel,
    /// Transport mode.
    Transport,
}

/// An AES-GCM key of 128 or 256 bits, with its salt, IV and ICV length
/// (`ib_uverbs_flow_action_esp_keymat_aes_gcm`, IV algorithm "sequence").
#[derive(Clone, PartialEq, Eq)]
pub struct AesGcmKey {
    /// The key: 16 or 32 bytes.
    pub key: Vec<u8>,
    /// The salt.
    pub salt: u32,
    /// The initial IV.
    pub iv: u64,
    /// The ICV length, in bytes as the provider takes it (8, 12 or 16).
    pub icv_len: u32,
}

impl fmt::Debug for AesGcmKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs.
        f.debug_struct("AesGcmKey")
            .field("key_bits", &(self.key.len() * 8))
            .field("icv_len", &self.icv_len)
            .finish_non_exhaustive()
    }
}

/// What an ESP action does: its SA (SPI, sequence number, limits), its
/// key, its direction and mode, and the replay window of a decrypting
/// full offload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspAttr {
    /// The security parameter index.
    pub spi: u32,
    /// The initial sequence number.
    pub seq: u32,
    /// Traffic-flow-confidentiality padding.
    pub tfc_pad: u32,
    /// Packets after which the SA expires (0: no limit).
    pub hard_limit_pkts: u64,
    /// Encrypt or decrypt.
    pub direction: EspDirection,
    /// Tunnel or transport.
    pub mode: EspMode,
    /// Full offload (the device also handles the ESP headers) rather than
    /// inline crypto.
    pub full_offload: bool,
    /// The extended sequence number's high half, if used.
    pub esn: Option<u32>,
    /// The key.
    pub key: AesGcmKey,
    /// A replay-protection window of this many packets, if any.
    pub replay_window: Option<u32>,
}

/// The C attributes of an [`EspAttr`], and the structs they point to.
pub(crate) struct RawEsp {
    pub(crate) attr: sys::ibv_flow_action_esp_attr,
    _esp: Heap<sys::ib_uverbs_flow_action_esp>,
    keymat: Heap<sys::ib_uverbs_flow_action_esp_keymat_aes_gcm>,
    _replay: Heap<sys::ib_uverbs_flow_action_esp_replay_bmp>,
}

/// A heap value that `attr` points into, held by its raw pointer: moving a
/// `Box` would assert that it is the only way to the value, which the
/// pointers in `attr` are too.
struct Heap<T>(NonNull<T>);

impl<T> Heap<T> {
    fn new(v: T) -> Heap<T> {
        Heap(NonNull::from(Box::leak(Box::new(v))))
    }

    fn ptr(&self) -> *mut T {
        self.0.as_ptr()
    }
}

impl<T> Drop for Heap<T> {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `new`, freed once, here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl EspAttr {
    /// The C attributes; a key of another length than 16 or 32 bytes is
    /// refused (`EINVAL`).
    pub(crate) fn raw(&self, verb: &'static str) -> Result<RawEsp> {
        let n = self.key.key.len();
        if n != 16 && n != 32 {
            return Err(Error::invalid(
                verb,
                format!("an AES-GCM key has 16 or 32 bytes, not {n}"),
            ));
        }
        let mut flags = match self.direction {
            EspDirection::Decrypt => sys::IB_UVERBS_FLOW_ACTION_ESP_FLAGS_DECRYPT,
            EspDirection::Encrypt => sys::IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ENCRYPT,
        };
        flags |= match self.mode {
            EspMode::Tunnel => sys::IB_UVERBS_FLOW_ACTION_ESP_FLAGS_TUNNEL,
            EspMode::Transport => sys::IB_UVERBS_FLOW_ACTION_ESP_FLAGS_TRANSPORT,
        };
        if self.full_offload {
            flags |= sys::IB_UVERBS_FLOW_ACTION_ESP_FLAGS_FULL_OFFLOAD;
        }
        let esp = Heap::new(sys::ib_uverbs_flow_action_esp {
            spi: self.spi,
            seq: self.seq,
            tfc_pad: self.tfc_pad,
            flags,
            hard_limit_pkts: self.hard_limit_pkts,
        });
        let mut aes_key = [0u32; 8];
        for (i, c) in self.key.key.chunks(4).enumerate() {
            aes_key[i] = u32::from_ne_bytes(c.try_into().expect("16 or 32 bytes"));
        }
        let keymat = Heap::new(sys::ib_uverbs_flow_action_esp_keymat_aes_gcm {
            iv: self.key.iv,
            iv_algo: sys::IB_UVERBS_FLOW_ACTION_IV_ALGO_SEQ,
            salt: self.key.salt,
            icv_len: self.key.icv_len,
            key_len: n as u32,
            aes_key,
        });
        let replay = Heap::new(sys::ib_uverbs_flow_action_esp_replay_bmp {
            size: self.replay_window.unwrap_or(0),
        });
        let attr = sys::ibv_flow_action_esp_attr {
            esp_attr: esp.ptr(),
            keymat_proto: sys::IB_UVERBS_FLOW_ACTION_ESP_KEYMAT_AES_GCM,
            keymat_len: size_of_u16::<sys::ib_uverbs_flow_action_esp_keymat_aes_gcm>(),
            keymat_ptr: keymat.ptr().cast(),
            replay_proto: if self.replay_window.is_some() {
                sys::IB_UVERBS_FLOW_ACTION_ESP_REPLAY_BMP
            } else {
                sys::IB_UVERBS_FLOW_ACTION_ESP_REPLAY_NONE
            },
            replay_len: if self.replay_window.is_some() {
                size_of_u16::<sys::ib_uverbs_flow_action_esp_replay_bmp>()
            } else {
                0
            },
            replay_ptr: if self.replay_window.is_some() {
                replay.ptr().cast()
            } else {
                ptr::null_mut()
            },
            esp_encap: ptr::null_mut(),
            comp_mask: if self.esn.is_some() {
                sys::IBV_FLOW_ACTION_ESP_MASK_ESN
            } else {
                0
            },
            esn: self.esn.unwrap_or(0),
        };
        Ok(RawEsp {
            attr,
            _esp: esp,
            keymat,
            _replay: replay,
        })
    }
}

fn size_of_u16<T>() -> u16 {
    std::mem::size_of::<T>() as u16
}

impl RawEsp {
    /// Zeroes the key material before the boxes are freed.
    fn wipe(&mut self) {
        // SAFETY: a live heap value of plain data, freed only after this;
        // volatile so the store stays.
        unsafe { ptr::write_volatile(&raw mut (*self.keymat.ptr()).aes_key, [0; 8]) };
    }
}

impl Drop for RawEsp {
    fn drop(&mut self) {
        self.wipe();
    }
}

/// An ESP flow action (`ibv_flow_action`). Cloning shares it; flows that
/// apply it keep it alive; it is destroyed (`ibv_destroy_flow_action`)
/// after the last of them.
#[derive(Clone)]
pub struct FlowActionEsp {
    inner: Arc<ActionInner>,
}

struct ActionInner {
    ctx: Context,
    raw: NonNull<sys::ibv_flow_action>,
}

// SAFETY: a kernel handle; create, modify and destroy are commands on the
// uverbs file.
unsafe impl Send for ActionInner {}
// SAFETY: as above.
unsafe impl Sync for ActionInner {}

impl Drop for ActionInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every flow applying it (each holds
        // this Arc).
        unsafe { sys::ibv_destroy_flow_action(self.raw.as_ptr()) };
    }
}

impl FlowActionEsp {
    /// Creates an ESP action on `ctx` (`ibv_create_flow_action_esp`).
    pub fn new(ctx: &Context, attr: &EspAttr) -> Result<FlowActionEsp> {
        const VERB: &str = "ibv_create_flow_action_esp";
        let mut raw_attr = attr.raw(VERB)?;
        // SAFETY: a live context; `raw_attr.attr` and what it points to
        // (boxes held by `raw_attr`) are complete and live for the call.
        let raw = unsafe { sys::ibv_create_flow_action_esp(ctx.as_raw(), &mut raw_attr.attr) };
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::last(VERB).unsupported_on(ctx.name(), "ESP flow actions"))?;
        Ok(FlowActionEsp {
            inner: Arc::new(ActionInner {
                ctx: ctx.clone(),
                raw,
            }),
        })
    }

    /// Changes the action's SA, key or ESN (`ibv_modify_flow_action_esp`).
    pub fn modify(&self, attr: &EspAttr) -> Result<()> {
        const VERB: &str = "ibv_modify_flow_action_esp";
        let mut raw_attr = attr.raw(VERB)?;
        // SAFETY: a live action; the attributes are complete and live for
        // the call.
        let rc = unsafe { sys::ibv_modify_flow_action_esp(self.as_raw(), &mut raw_attr.attr) };
        if rc != 0 {
            return Err(Error::from_rc(VERB, rc));
        }
        Ok(())
    }

    /// The context the action belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw action, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_flow_action {
        self.inner.raw.as_ptr()
    }
}

impl fmt::Debug for FlowActionEsp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowActionEsp")
            .field("device", &self.inner.ctx.name())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(key: usize) -> EspAttr {
        EspAttr {
            spi: 0x1234,
            seq: 1,
            tfc_pad: 0,
            hard_limit_pkts: 0,
            direction: EspDirection::Encrypt,
            mode: EspMode::Transport,
            full_offload: false,
            esn: Some(7),
            key: AesGcmKey {
                key: (0..key as u8).collect(),
                salt: 9,
                iv: 3,
                icv_len: 16,
            },
            replay_window: None,
        }
    }

    #[test]
    fn keys_of_16_or_32_bytes_only() {
        for n in [0, 15, 24, 33] {
            let e = attr(n).raw("v").err().unwrap();
            assert_eq!(e.errno(), libc::EINVAL, "{n}");
        }
        let r = attr(32).raw("v").unwrap();
        // SAFETY: the pointer is the box `r` holds.
        let k = unsafe {
            &*(r.attr.keymat_ptr as *const sys::ib_uverbs_flow_action_esp_keymat_aes_gcm)
        };
        assert_eq!(k.key_len, 32);
        assert_eq!(k.aes_key[0].to_ne_bytes(), [0, 1, 2, 3]);
        assert_eq!(k.aes_key[7].to_ne_bytes(), [28, 29, 30, 31]);
    }

    #[test]
    fn flags_mask_and_pointers_follow_the_attr() {
        let r = attr(16).raw("v").unwrap();
        // SAFETY: the box `r` holds.
        let esp = unsafe { &*r.attr.esp_attr };
        assert_eq!(esp.spi, 0x1234);
        assert_eq!(
            esp.flags,
            sys::IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ENCRYPT
                | sys::IB_UVERBS_FLOW_ACTION_ESP_FLAGS_TRANSPORT
        );
        assert_eq!(
            (r.attr.comp_mask, r.attr.esn),
            (sys::IBV_FLOW_ACTION_ESP_MASK_ESN, 7)
        );
        assert!(r.attr.replay_ptr.is_null() && r.attr.replay_len == 0);
        let mut a = attr(16);
        a.replay_window = Some(64);
        a.esn = None;
        let r = a.raw("v").unwrap();
        assert_eq!(r.attr.comp_mask, 0);
        assert_eq!(
            r.attr.replay_proto,
            sys::IB_UVERBS_FLOW_ACTION_ESP_REPLAY_BMP
        );
        // SAFETY: the box `r` holds.
        assert_eq!(unsafe { *(r.attr.replay_ptr as *const u32) }, 64);
        assert!(!format!("{:?}", a.key).contains("0, 1, 2"));
    }
}
