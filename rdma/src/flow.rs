//! Flow steering and counters: rules that steer packets matching typed
//! specifications (Ethernet, IPv4, IPv6, TCP, UDP) to a QP
//! (`ibv_create_flow`), and counters of the packets and bytes they match
//! (`ibv_create_counters`, `ibv_attach_counters_point_flow`,
//! `ibv_read_counters`).
//!
//! Neither soft device steers flows: rxe's and siw's providers have no
//! `create_flow` and no counters, and libibverbs answers for them
//! ("not supported by rxe0", [`Error::is_unsupported`]). mlx5 has both,
//! on raw-packet and UD QPs.

use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ptr::NonNull;
use std::sync::Arc;

use crate::sys;
use crate::{Context, Error, FlowActionEsp, QueuePair, Result};

/// What an Ethernet header is matched on. Values are in host order;
/// the crate writes them in network order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EthFilter {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// EtherType (0x0800 IPv4, 0x86dd IPv6).
    pub ether_type: u16,
    /// The VLAN tag (TCI).
    pub vlan_tag: u16,
}

/// What an IPv4 header is matched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Filter {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

impl Default for Ipv4Filter {
    fn default() -> Self {
        Ipv4Filter {
            src: Ipv4Addr::UNSPECIFIED,
            dst: Ipv4Addr::UNSPECIFIED,
        }
    }
}

/// What an IPv6 header is matched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Filter {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// The flow label (its low 20 bits).
    pub flow_label: u32,
    /// The next header (6 TCP, 17 UDP).
    pub next_hdr: u8,
    /// The traffic class.
    pub traffic_class: u8,
    /// The hop limit.
    pub hop_limit: u8,
}

impl Default for Ipv6Filter {
    fn default() -> Self {
        Ipv6Filter {
            src: Ipv6Addr::UNSPECIFIED,
            dst: Ipv6Addr::UNSPECIFIED,
            flow_label: 0,
            next_hdr: 0,
            traffic_class: 0,
            hop_limit: 0,
        }
    }
}

/// What a TCP or UDP header is matched on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PortFilter {
    /// Destination port.
    pub dst_port: u16,
    /// Source port.
    pub src_port: u16,
}

/// One layer of a flow's match: its values and the mask of the bits that
/// count (a mask of zeros matches every value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowSpec {
    /// `IBV_FLOW_SPEC_ETH`.
    Eth {
        /// The values.
        val: EthFilter,
        /// The bits that count.
        mask: EthFilter,
    },
    /// `IBV_FLOW_SPEC_IPV4`.
    Ipv4 {
        /// The values.
        val: Ipv4Filter,
        /// The bits that count.
        mask: Ipv4Filter,
    },
    /// `IBV_FLOW_SPEC_IPV6`.
    Ipv6 {
        /// The values.
        val: Ipv6Filter,
        /// The bits that count.
        mask: Ipv6Filter,
    },
    /// `IBV_FLOW_SPEC_TCP`.
    Tcp {
        /// The values.
        val: PortFilter,
        /// The bits that count.
        mask: PortFilter,
    },
    /// `IBV_FLOW_SPEC_UDP`.
    Udp {
        /// The values.
        val: PortFilter,
        /// The bits that count.
        mask: PortFilter,
    },
}

fn eth_filter(f: &EthFilter) -> sys::ibv_flow_eth_filter {
    sys::ibv_flow_eth_filter {
        dst_mac: f.dst_mac,
        src_mac: f.src_mac,
        ether_type: f.ether_type.to_be(),
        vlan_tag: f.vlan_tag.to_be(),
    }
}

fn ipv4_filter(f: &Ipv4Filter) -> sys::ibv_flow_ipv4_filter {
    sys::ibv_flow_ipv4_filter {
        src_ip: u32::from_ne_bytes(f.src.octets()),
        dst_ip: u32::from_ne_bytes(f.dst.octets()),
    }
}

fn ipv6_filter(f: &Ipv6Filter) -> sys::ibv_flow_ipv6_filter {
    sys::ibv_flow_ipv6_filter {
        src_ip: f.src.octets(),
        dst_ip: f.dst.octets(),
        flow_label: f.flow_label.to_be(),
        next_hdr: f.next_hdr,
        traffic_class: f.traffic_class,
        hop_limit: f.hop_limit,
    }
}

fn port_filter(f: &PortFilter) -> sys::ibv_flow_tcp_udp_filter {
    sys::ibv_flow_tcp_udp_filter {
        dst_port: f.dst_port.to_be(),
        src_port: f.src_port.to_be(),
    }
}

/// The `ibv_flow_attr` and its specs, laid end to end as libibverbs reads
/// them (each spec's `size` leads to the next).
pub(crate) struct FlowBuf {
    /// 8-byte units, so that the attribute at the start is aligned.
    words: Vec<u64>,
    len: usize,
}

impl FlowBuf {
    fn new(port: u8, priority: u16) -> FlowBuf {
        let mut b = FlowBuf {
            words: Vec::new(),
            len: 0,
        };
        b.push(sys::ibv_flow_attr {
            comp_mask: 0,
            type_: sys::IBV_FLOW_ATTR_NORMAL,
            size: 0,
            priority,
            num_of_specs: 0,
            port,
            flags: 0,
        });
        b
    }

    /// Appends `v`'s bytes.
    fn push<T: Copy>(&mut self, v: T) {
        let at = self.len;
        self.len += size_of::<T>();
        self.words.resize(self.len.div_ceil(8), 0);
        // SAFETY: `words` holds at least `len` bytes, so `at..at +
        // size_of::<T>()` is inside it; the write is unaligned-safe and `T`
        // is plain data (a bindgen struct of integers, arrays, pointers).
        unsafe {
            self.words
                .as_mut_ptr()
                .cast::<u8>()
                .add(at)
                .cast::<T>()
                .write_unaligned(v)
        };
    }

    fn push_spec(&mut self, spec: &FlowSpec) {
        match spec {
            FlowSpec::Eth { val, mask } => self.push(sys::ibv_flow_spec_eth {
                type_: sys::IBV_FLOW_SPEC_ETH,
                size: size_of::<sys::ibv_flow_spec_eth>() as u16,
                val: eth_filter(val),
                mask: eth_filter(mask),
            }),
            FlowSpec::Ipv4 { val, mask } => self.push(sys::ibv_flow_spec_ipv4 {
                type_: sys::IBV_FLOW_SPEC_IPV4,
                size: size_of::<sys::ibv_flow_spec_ipv4>() as u16,
                val: ipv4_filter(val),
                mask: ipv4_filter(mask),
            }),
            FlowSpec::Ipv6 { val, mask } => self.push(sys::ibv_flow_spec_ipv6 {
                type_: sys::IBV_FLOW_SPEC_IPV6,
                size: size_of::<sys::ibv_flow_spec_ipv6>() as u16,
                val: ipv6_filter(val),
                mask: ipv6_filter(mask),
            }),
            FlowSpec::Tcp { val, mask } | FlowSpec::Udp { val, mask } => {
                let type_ = if matches!(spec, FlowSpec::Tcp { .. }) {
                    sys::IBV_FLOW_SPEC_TCP
                } else {
                    sys::IBV_FLOW_SPEC_UDP
                };
                self.push(sys::ibv_flow_spec_tcp_udp {
                    type_,
                    size: size_of::<sys::ibv_flow_spec_tcp_udp>() as u16,
                    val: port_filter(val),
                    mask: port_filter(mask),
                })
            }
        }
    }

    fn push_counters(&mut self, counters: *mut sys::ibv_counters) {
        self.push(sys::ibv_flow_spec_counter_action {
            type_: sys::IBV_FLOW_SPEC_ACTION_COUNT,
            size: size_of::<sys::ibv_flow_spec_counter_action>() as u16,
            counters,
        });
    }

    /// Sets the attribute's total size and spec count.
    fn finish(&mut self, specs: u8) {
        let len = self.len as u16;
        let attr = self.attr();
        // SAFETY: the buffer starts with an `ibv_flow_attr` (`new`), and
        // `words` is 8-byte aligned, enough for it.
        unsafe {
            (*attr).size = len;
            (*attr).num_of_specs = specs;
        }
    }

    fn attr(&mut self) -> *mut sys::ibv_flow_attr {
        self.words.as_mut_ptr().cast()
    }

    /// The bytes, for tests.
    #[cfg(test)]
    fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }
}

/// How to steer packets to a QP; see [`Flow::builder`].
#[derive(Debug, Clone)]
pub struct FlowBuilder<'a> {
    port: u8,
    priority: u16,
    specs: Vec<FlowSpec>,
    counters: Option<&'a Counters>,
    esp: Vec<&'a FlowActionEsp>,
}

impl<'a> FlowBuilder<'a> {
    /// The rule's priority (0 is the highest).
    pub fn priority(mut self, priority: u16) -> Self {
        self.priority = priority;
        self
    }
    /// Adds a layer to the match, outermost first (Ethernet, then IP, then
    /// TCP or UDP).
    pub fn spec(mut self, spec: FlowSpec) -> Self {
        self.specs.push(spec);
        self
    }
    /// Counts the matched packets in `counters` (a counter action spec);
    /// the flow keeps them alive.
    pub fn counters(mut self, counters: &'a Counters) -> Self {
        self.counters = Some(counters);
        self
    }
    /// Applies the ESP action `action` to the matched packets (an action
    /// handle spec); the flow keeps it alive.
    pub fn esp(mut self, action: &'a FlowActionEsp) -> Self {
        self.esp.push(action);
        self
    }

    /// Creates the rule on `qp` (`ibv_create_flow`). Counters of another
    /// context, or more than 255 specs, are refused (`EINVAL`) before the
    /// provider sees them.
    pub fn build(self, qp: &QueuePair) -> Result<Flow<'_>> {
        const VERB: &str = "ibv_create_flow";
        if let Some(c) = self.counters {
            crate::pd::same_context(VERB, "QP", qp.context(), "counters", c.context())?;
        }
        for a in &self.esp {
            crate::pd::same_context(VERB, "QP", qp.context(), "ESP action", a.context())?;
        }
        let mut buf = self.buffer()?;
        // SAFETY: a live QP; `buf` is an `ibv_flow_attr` followed by its
        // specs, each of the size it states, as `size` and `num_of_specs`
        // say; the counters it names are live (held by the flow).
        let raw = unsafe { sys::ibv_create_flow(qp.as_raw(), buf.attr()) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last(VERB).unsupported_on(qp.context().name(), "flow steering")
        })?;
        Ok(Flow {
            raw,
            _counters: self.counters.cloned(),
            _esp: self.esp.iter().map(|a| (*a).clone()).collect(),
            _qp: PhantomData,
        })
    }

    pub(crate) fn buffer(&self) -> Result<FlowBuf> {
        let n = self.specs.len() + self.counters.is_some() as usize + self.esp.len();
        let n = u8::try_from(n)
            .map_err(|_| Error::invalid("ibv_create_flow", "a flow takes at most 255 specs"))?;
        let mut buf = FlowBuf::new(self.port, self.priority);
        for s in &self.specs {
            buf.push_spec(s);
        }
        if let Some(c) = self.counters {
            buf.push_counters(c.as_raw());
        }
        for a in &self.esp {
            buf.push(sys::ibv_flow_spec_action_handle {
                type_: sys::IBV_FLOW_SPEC_ACTION_HANDLE,
                size: size_of::<sys::ibv_flow_spec_action_handle>() as u16,
                action: a.as_raw(),
            });
        }
        buf.finish(n);
        Ok(buf)
    }
}

/// A steering rule (`ibv_flow`). It borrows its QP, so it is destroyed
/// (`ibv_destroy_flow`) before it; it keeps its counters alive.
pub struct Flow<'qp> {
    raw: NonNull<sys::ibv_flow>,
    _counters: Option<Counters>,
    _esp: Vec<FlowActionEsp>,
    _qp: PhantomData<&'qp QueuePair>,
}

// SAFETY: a flow is a kernel handle, never mutated after creation.
unsafe impl Send for Flow<'_> {}
// SAFETY: as above.
unsafe impl Sync for Flow<'_> {}

impl Drop for Flow<'_> {
    fn drop(&mut self) {
        // SAFETY: destroyed once, while its QP (borrowed), counters and
        // ESP actions (held) live.
        unsafe { sys::ibv_destroy_flow(self.raw.as_ptr()) };
    }
}

impl Flow<'_> {
    /// A builder for a rule that steers packets arriving on `port` (1 for
    /// the first).
    pub fn builder<'a>(port: u8) -> FlowBuilder<'a> {
        FlowBuilder {
            port,
            priority: 0,
            specs: Vec::new(),
            counters: None,
            esp: Vec::new(),
        }
    }

    /// The raw flow, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_flow {
        self.raw.as_ptr()
    }
}

impl fmt::Debug for Flow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flow").finish_non_exhaustive()
    }
}

/// What a counter point counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// Packets (`IBV_COUNTER_PACKETS`).
    Packets,
    /// Bytes (`IBV_COUNTER_BYTES`).
    Bytes,
}

/// A set of counters (`ibv_counters`), read with [`Counters::read`].
///
/// Cloning shares it; flows counting into it keep it alive.
#[derive(Clone)]
pub struct Counters {
    inner: Arc<CountersInner>,
}

struct CountersInner {
    ctx: Context,
    raw: NonNull<sys::ibv_counters>,
}

// SAFETY: a kernel handle; attach and read are commands (mlx5 reads the
// hardware through a command too).
unsafe impl Send for CountersInner {}
// SAFETY: as above.
unsafe impl Sync for CountersInner {}

impl Drop for CountersInner {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every flow counting into it (each
        // holds this Arc).
        unsafe { sys::ibv_destroy_counters(self.raw.as_ptr()) };
    }
}

impl Counters {
    /// Creates a set of counters on `ctx` (`ibv_create_counters`).
    pub fn new(ctx: &Context) -> Result<Counters> {
        let mut attr = sys::ibv_counters_init_attr { comp_mask: 0 };
        // SAFETY: a live context; `attr` is complete. ibv_create_counters is
        // verbs.h's static inline, EOPNOTSUPP where the provider has none.
        let raw = unsafe { sys::ibv_create_counters(ctx.as_raw(), &mut attr) };
        let raw = NonNull::new(raw).ok_or_else(|| {
            Error::last("ibv_create_counters").unsupported_on(ctx.name(), "counters")
        })?;
        Ok(Counters {
            inner: Arc::new(CountersInner {
                ctx: ctx.clone(),
                raw,
            }),
        })
    }

    /// Counts `kind` at `index` of the set for the flows created with it
    /// afterwards ([`FlowBuilder::counters`]): a static attach
    /// (`ibv_attach_counters_point_flow` with no flow). Attaching again
    /// at one index adds into it.
    pub fn attach_flow_point(&self, kind: CounterKind, index: u32) -> Result<()> {
        let mut attr = attach_attr(kind, index);
        // SAFETY: live counters; `attr` is complete; a NULL flow is the
        // static attach (ibv_attach_counters_point_flow(3)).
        let rc = unsafe {
            sys::ibv_attach_counters_point_flow(self.as_raw(), &mut attr, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::from_rc("ibv_attach_counters_point_flow", rc)
                .unsupported_on(self.context().name(), "flow counters"));
        }
        Ok(())
    }

    /// Reads the counters into `values`, index by index
    /// (`ibv_read_counters`); `cached` takes the provider's last values
    /// instead of asking the hardware.
    pub fn read(&self, values: &mut [u64], cached: bool) -> Result<()> {
        let n = u32::try_from(values.len())
            .map_err(|_| Error::invalid("ibv_read_counters", "more than 2^32 counters"))?;
        let flags = if cached {
            sys::IBV_READ_COUNTERS_ATTR_PREFER_CACHED
        } else {
            0
        };
        // SAFETY: live counters; `values` is writable for `n` u64s.
        let rc = unsafe { sys::ibv_read_counters(self.as_raw(), values.as_mut_ptr(), n, flags) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_read_counters", rc));
        }
        Ok(())
    }

    /// The context the counters belong to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw counters, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_counters {
        self.inner.raw.as_ptr()
    }
}

/// The `ibv_counter_attach_attr` of `kind` at `index`.
pub(crate) fn attach_attr(kind: CounterKind, index: u32) -> sys::ibv_counter_attach_attr {
    sys::ibv_counter_attach_attr {
        counter_desc: match kind {
            CounterKind::Packets => sys::IBV_COUNTER_PACKETS,
            CounterKind::Bytes => sys::IBV_COUNTER_BYTES,
        },
        index,
        comp_mask: 0,
    }
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counters")
            .field("device", &self.inner.ctx.name())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes([b[at], b[at + 1]])
    }

    #[test]
    fn specs_lie_end_to_end_after_the_attribute() {
        let b = Flow::builder(1)
            .priority(3)
            .spec(FlowSpec::Eth {
                val: EthFilter {
                    dst_mac: [2, 0, 0, 0, 0, 1],
                    ether_type: 0x0800,
                    ..Default::default()
                },
                mask: EthFilter {
                    dst_mac: [0xff; 6],
                    ether_type: 0xffff,
                    ..Default::default()
                },
            })
            .spec(FlowSpec::Ipv4 {
                val: Ipv4Filter {
                    src: Ipv4Addr::new(10, 0, 0, 1),
                    dst: Ipv4Addr::new(10, 0, 0, 2),
                },
                mask: Ipv4Filter {
                    src: Ipv4Addr::BROADCAST,
                    dst: Ipv4Addr::BROADCAST,
                },
            })
            .spec(FlowSpec::Udp {
                val: PortFilter {
                    dst_port: 4791,
                    src_port: 0,
                },
                mask: PortFilter {
                    dst_port: 0xffff,
                    src_port: 0,
                },
            });
        let buf = b.buffer().unwrap();
        let bytes = buf.bytes();
        let attr = size_of::<sys::ibv_flow_attr>();
        let eth = size_of::<sys::ibv_flow_spec_eth>();
        let ip = size_of::<sys::ibv_flow_spec_ipv4>();
        let udp = size_of::<sys::ibv_flow_spec_tcp_udp>();
        assert_eq!(bytes.len(), attr + eth + ip + udp);
        // The attribute: total size, priority, spec count, port.
        assert_eq!(usize::from(u16_at(bytes, 8)), bytes.len());
        assert_eq!(u16_at(bytes, 10), 3);
        assert_eq!((bytes[12], bytes[13]), (3, 1));
        // Each spec: its type and the size that leads to the next.
        let mut at = attr;
        for (ty, size) in [
            (sys::IBV_FLOW_SPEC_ETH, eth),
            (sys::IBV_FLOW_SPEC_IPV4, ip),
            (sys::IBV_FLOW_SPEC_UDP, udp),
        ] {
            let t = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
            assert_eq!(t, ty);
            assert_eq!(usize::from(u16_at(bytes, at + 4)), size);
            at += size;
        }
        // Network order: the EtherType's high byte first, the address's
        // octets in order, the port's high byte first.
        let e = attr + std::mem::offset_of!(sys::ibv_flow_spec_eth, val);
        assert_eq!(&bytes[e..e + 6], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&bytes[e + 12..e + 14], &[0x08, 0x00]);
        let i = attr + eth + std::mem::offset_of!(sys::ibv_flow_spec_ipv4, val);
        assert_eq!(&bytes[i..i + 8], &[10, 0, 0, 1, 10, 0, 0, 2]);
        let u = attr + eth + ip + std::mem::offset_of!(sys::ibv_flow_spec_tcp_udp, val);
        assert_eq!(&bytes[u..u + 2], &4791u16.to_be_bytes());
    }

    #[test]
    fn too_many_specs_are_refused() {
        let mut b = Flow::builder(1);
        for _ in 0..256 {
            b = b.spec(FlowSpec::Tcp {
                val: PortFilter::default(),
                mask: PortFilter::default(),
            });
        }
        let e = b.buffer().err().unwrap();
        assert_eq!(e.errno(), libc::EINVAL);
    }

    #[test]
    fn attach_attr_names_the_kind() {
        let a = attach_attr(CounterKind::Bytes, 7);
        assert_eq!(
            (a.counter_desc, a.index, a.comp_mask),
            (sys::IBV_COUNTER_BYTES, 7, 0)
        );
    }
}
