//! libibmad's field accessors (`mad_get_field` and kin), the C reference for
//! the MAD codec's layouts, and the layout of any of its fields found by
//! probing: which bits of a buffer `mad_set_field` (or `mad_set_array`)
//! writes.
//!
//! Field offsets are libibmad's: relative to the start of the structure the
//! field belongs to (the MAD for `IB_MAD_*`, the attribute data for SMP and
//! PerfMgt attributes, the record for SA records).

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code
)]

/// The bindings (`MAD_FIELDS::*` and the accessors).
#[allow(missing_docs, clippy::all)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/libibmad.rs"));
}

pub use sys::MAD_FIELDS;

/// Bytes of the probe buffers: more than any libibmad structure.
pub const PROBE_LEN: usize = 2048;

/// Where a libibmad field lies: `bits` bits from bit `bit_offset`, bits
/// numbered from the most significant bit of byte 0 (the wire order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The first bit.
    pub bit_offset: usize,
    /// The width.
    pub bits: usize,
}

/// The field's name in libibmad's table (e.g. "Lid").
pub fn name(field: MAD_FIELDS::Type) -> String {
    // SAFETY: mad_field_name returns a pointer into libibmad's static table
    // (a NUL-terminated name) for any field below IB_FIELD_LAST_, and NULL
    // for others; the field is checked against that bound first.
    unsafe {
        if field == 0 || field >= MAD_FIELDS::IB_FIELD_LAST_ {
            return String::new();
        }
        let p = sys::mad_field_name(field);
        if p.is_null() {
            return String::new();
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// `mad_get_field` of `buf` (at least [`PROBE_LEN`] bytes, so that no field
/// reads past it).
pub fn get(buf: &[u8], field: MAD_FIELDS::Type) -> u32 {
    assert!(
        buf.len() >= PROBE_LEN,
        "libibmad probe buffers are {PROBE_LEN} bytes"
    );
    // SAFETY: every libibmad field lies within the first PROBE_LEN bytes
    // (its largest structure, an SA MAD, is 256 bytes), which `buf` holds;
    // mad_get_field only reads.
    unsafe { sys::mad_get_field(buf.as_ptr() as *mut _, 0, field) }
}

/// `mad_get_field64` (byte-aligned fields of up to 64 bits).
pub fn get64(buf: &[u8], field: MAD_FIELDS::Type) -> u64 {
    assert!(
        buf.len() >= PROBE_LEN,
        "libibmad probe buffers are {PROBE_LEN} bytes"
    );
    // SAFETY: as in `get`.
    unsafe { sys::mad_get_field64(buf.as_ptr() as *mut _, 0, field) }
}

/// `mad_set_field` into `buf` (at least [`PROBE_LEN`] bytes).
pub fn set(buf: &mut [u8], field: MAD_FIELDS::Type, v: u32) {
    assert!(
        buf.len() >= PROBE_LEN,
        "libibmad probe buffers are {PROBE_LEN} bytes"
    );
    // SAFETY: as in `get`; `buf` is writable for PROBE_LEN bytes.
    unsafe { sys::mad_set_field(buf.as_mut_ptr().cast(), 0, field, v) }
}

/// `mad_set_field64` into `buf`.
pub fn set64(buf: &mut [u8], field: MAD_FIELDS::Type, v: u64) {
    assert!(
        buf.len() >= PROBE_LEN,
        "libibmad probe buffers are {PROBE_LEN} bytes"
    );
    // SAFETY: as in `set`.
    unsafe { sys::mad_set_field64(buf.as_mut_ptr().cast(), 0, field, v) }
}

/// `mad_get_array`: the field's bytes (fields of whole bytes, such as GIDs
/// and NodeDescription), `len` of them.
pub fn get_array(buf: &[u8], field: MAD_FIELDS::Type, len: usize) -> Vec<u8> {
    assert!(
        buf.len() >= PROBE_LEN,
        "libibmad probe buffers are {PROBE_LEN} bytes"
    );
    let mut out = vec![0u8; PROBE_LEN];
    // SAFETY: mad_get_array copies the field's bytes (fewer than PROBE_LEN)
    // from `buf` (PROBE_LEN readable bytes) into `out` (PROBE_LEN writable).
    unsafe { sys::mad_get_array(buf.as_ptr() as *mut _, 0, field, out.as_mut_ptr().cast()) };
    out.truncate(len);
    out
}

/// The field's layout, probed: for fields under 32 bits, the bits
/// `mad_set_field` writes with all ones; for wider ones (whole bytes), the
/// bytes `mad_set_array` writes from a buffer of 0xff. Panics when the bits
/// written are not one contiguous run (no libibmad field is split).
pub fn layout(field: MAD_FIELDS::Type) -> Layout {
    let ones = vec![0xffu8; PROBE_LEN];
    let mut buf = vec![0u8; PROBE_LEN];
    let max = get(&ones, field);
    if max != u32::MAX {
        set(&mut buf, field, max);
    } else {
        // SAFETY: as in `get_array`, with `ones` as the source.
        unsafe { sys::mad_set_array(buf.as_mut_ptr().cast(), 0, field, ones.as_ptr() as *mut _) };
    }
    let set_bits: Vec<usize> = (0..PROBE_LEN * 8)
        .filter(|i| buf[i / 8] & (0x80 >> (i % 8)) != 0)
        .collect();
    let (first, last) = match (set_bits.first(), set_bits.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => panic!("libibmad field {field} ({}) writes no bits", name(field)),
    };
    assert_eq!(
        set_bits.len(),
        last - first + 1,
        "libibmad field {field} ({}) is not one run of bits",
        name(field)
    );
    Layout {
        bit_offset: first,
        bits: set_bits.len(),
    }
}

/// A field's value: a number (fields of up to 64 bits) or bytes (wider
/// fields, read with `mad_get_array`).
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum V {
    /// Up to 64 bits.
    N(u64),
    /// Whole bytes.
    B(Vec<u8>),
}

/// A number as a [`V`].
pub fn n(v: impl Into<u64>) -> V {
    V::N(v.into())
}

/// Bytes as a [`V`].
pub fn b(v: &[u8]) -> V {
    V::B(v.to_vec())
}

/// A libibmad field and the Rust value that holds it.
pub struct Field<T> {
    /// The libibmad field.
    pub id: MAD_FIELDS::Type,
    /// The Rust side's value of it.
    pub get: fn(&T) -> V,
}

/// `fields!(Type: IB_FIELD_F => |x| n(x.field), ...)`: a list of [`Field`]s.
#[macro_export]
macro_rules! libibmad_fields {
    ($t:ty: $($id:ident => $get:expr),* $(,)?) => {
        vec![$($crate::libibmad::Field::<$t> {
            id: $crate::libibmad::MAD_FIELDS::$id,
            get: $get,
        }),*]
    };
}

/// xorshift64*: reproducible pseudo-random bytes.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// `len` bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// Rounds of random content per layout check.
pub const ROUNDS: u64 = 64;

/// [`layout`], probed once per field.
pub fn cached_layout(id: MAD_FIELDS::Type) -> Layout {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CACHE: Mutex<Option<HashMap<MAD_FIELDS::Type, Layout>>> = Mutex::new(None);
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    *c.get_or_insert_with(HashMap::new)
        .entry(id)
        .or_insert_with(|| layout(id))
}

/// What libibmad reads for `id` from `buf` (at least [`PROBE_LEN`] bytes).
pub fn value(buf: &[u8], id: MAD_FIELDS::Type) -> V {
    let l = cached_layout(id);
    if l.bits <= 32 {
        V::N(get(buf, id).into())
    } else if l.bits == 64 {
        V::N(get64(buf, id))
    } else {
        V::B(get_array(buf, id, l.bits / 8))
    }
}

/// Writes a random value into field `id` of `buf` through libibmad (wide
/// fields: random bytes at the bits libibmad's layout gives them).
pub fn set_random(buf: &mut [u8], id: MAD_FIELDS::Type, rng: &mut Rng) {
    let l = cached_layout(id);
    if l.bits < 32 {
        set(buf, id, (rng.next_u64() as u32) & ((1u32 << l.bits) - 1));
    } else if l.bits == 32 {
        set(buf, id, rng.next_u64() as u32);
    } else if l.bits == 64 {
        set64(buf, id, rng.next_u64());
    } else {
        assert_eq!(l.bit_offset % 8, 0, "{} is not byte aligned", name(id));
        let start = l.bit_offset / 8;
        let bytes = rng.bytes(l.bits / 8);
        buf[start..start + bytes.len()].copy_from_slice(&bytes);
    }
}

/// The field's name and number, for messages.
pub fn field_name(id: MAD_FIELDS::Type) -> String {
    format!("{} ({id})", name(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_known_fields() {
        // PortInfo: LID at bytes 16-17; LinkWidthEnabled byte 29; a 4-bit
        // field (LinkSpeedSupported, the high nibble of byte 32).
        assert_eq!(
            layout(MAD_FIELDS::IB_PORT_LID_F),
            Layout {
                bit_offset: 128,
                bits: 16
            }
        );
        assert_eq!(
            layout(MAD_FIELDS::IB_PORT_LINK_WIDTH_ENABLED_F),
            Layout {
                bit_offset: 232,
                bits: 8
            }
        );
        assert_eq!(
            layout(MAD_FIELDS::IB_PORT_LINK_SPEED_SUPPORTED_F),
            Layout {
                bit_offset: 256,
                bits: 4
            }
        );
        // NodeInfo: NodeGUID, 64 bits at byte 12; NodeDescription 64 bytes.
        assert_eq!(
            layout(MAD_FIELDS::IB_NODE_GUID_F),
            Layout {
                bit_offset: 96,
                bits: 64
            }
        );
        assert_eq!(
            layout(MAD_FIELDS::IB_NODE_DESC_F),
            Layout {
                bit_offset: 0,
                bits: 512
            }
        );
        assert_eq!(name(MAD_FIELDS::IB_PORT_LID_F), "Lid");
    }
}
