//! MAD agents: registrations for a management class on a umad port.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::addr::Address;
use super::port::{Port, PortInner};
use super::wire::{send_header, Received};
use super::{Error, Result};
use crate::mad::{class, Mad, Method, Oui};

/// What an [`Agent`] registers for: a management class and version, the
/// methods of unsolicited MADs it wants to receive, the OUI of a vendor
/// class of range 2, and RMPP.
///
/// Responses to the agent's own requests reach it whatever the method mask;
/// the mask is only for requests other nodes send it (a server).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The management class.
    pub class: u8,
    /// The class version.
    pub version: u8,
    /// The methods (bit n: method n) of unsolicited MADs to receive.
    pub method_mask: [u64; 2],
    /// The OUI, for vendor classes 0x30-0x4f (required there, refused
    /// elsewhere).
    pub oui: Option<Oui>,
    /// The RMPP version the kernel runs for this agent (0: none, 1: RMPP).
    pub rmpp_version: u8,
}

impl Registration {
    /// A registration for `class` version `version`, with no unsolicited
    /// methods (a client).
    pub fn new(class: u8, version: u8) -> Registration {
        Registration {
            class,
            version,
            method_mask: [0; 2],
            oui: None,
            rmpp_version: 0,
        }
    }
    /// Also receive unsolicited MADs of this method (a server).
    pub fn method(mut self, m: Method) -> Registration {
        let n = m.0 as usize;
        self.method_mask[n / 64] |= 1 << (n % 64);
        self
    }
    /// The OUI of a vendor class of range 2.
    pub fn oui(mut self, oui: Oui) -> Registration {
        self.oui = Some(oui);
        self
    }
    /// Let the kernel run RMPP (`version` 1) for this agent.
    pub fn rmpp(mut self, version: u8) -> Registration {
        self.rmpp_version = version;
        self
    }

    fn check(&self) -> Result<()> {
        match (class::is_vendor_range2(self.class), self.oui) {
            (true, None) => Err(Error::InvalidRegistration(
                "vendor classes 0x30-0x4f need an OUI",
            )),
            (false, Some(_)) => Err(Error::InvalidRegistration(
                "only vendor classes 0x30-0x4f take an OUI",
            )),
            _ => Ok(()),
        }
    }
}

/// A registered MAD agent, unregistered on drop. It keeps its port open.
///
/// Send unsolicited MADs and responses with [`Agent::send`] and
/// [`Agent::respond`]; send a request and wait for its response with
/// [`Agent::request`], or send it with [`Agent::send_request`] and collect
/// the response (or the timeout) with [`Agent::recv`].
///
/// What does not receive (its ID, its TIDs, sending and responding) is also
/// on the [`AgentView`] ([`Agent::view`]), what an `AsyncAgent` shares.
pub struct Agent {
    view: AgentView,
}

/// An agent without its receiving half: its ID and registration, fresh
/// TIDs, and the sends that expect no response to collect.
/// `AsyncAgent::agent` gives only this, since a
/// blocking receive there would race its port's reader task for MADs.
pub struct AgentView {
    port: Arc<PortInner>,
    id: u32,
    reg: Registration,
    next_tid: AtomicU32,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.view.fmt(f)
    }
}

impl std::fmt::Debug for AgentView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.id)
            .field("registration", &self.reg)
            .finish()
    }
}

fn refusal(class: u8, errno: i32) -> Error {
    let reason = match errno {
        libc::EPROTONOSUPPORT if class::is_smi(class) => {
            "subnet management classes need QP0 (SMI), which RoCE and iWARP ports lack"
        }
        libc::EPROTONOSUPPORT => "the port does not support this class",
        libc::EINVAL if class == class::CM => {
            "the kernel's connection manager owns the CM class's methods"
        }
        libc::EINVAL => "another agent owns these methods, or the class/version/RMPP is invalid",
        _ => return Error::io("umad_register2", errno),
    };
    Error::ClassRefused {
        class,
        reason,
        source: std::io::Error::from_raw_os_error(errno),
    }
}

impl Port {
    /// Registers an agent for a class (see [`Registration`]).
    pub fn register(&self, reg: &Registration) -> Result<Agent> {
        Agent::register(self.view().inner.clone(), reg)
    }
}

impl Agent {
    pub(crate) fn register(port: Arc<PortInner>, reg: &Registration) -> Result<Agent> {
        reg.check()?;
        let mut attr = umad_sys::umad_reg_attr {
            mgmt_class: reg.class,
            mgmt_class_version: reg.version,
            flags: 0,
            method_mask: reg.method_mask,
            oui: reg.oui.map_or(0, Oui::to_u32),
            rmpp_version: reg.rmpp_version,
        };
        let mut id = 0u32;
        // SAFETY: the fd is open (PortInner lives), `attr` and `id` are valid
        // for the call; the agent is unregistered in Drop.
        let rc = unsafe { umad_sys::umad_register2(port.fd(), &mut attr, &mut id) };
        if rc != 0 {
            return Err(refusal(reg.class, rc.abs()));
        }
        // Start TIDs somewhere else for each agent and run.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos())
            ^ id.rotate_left(16);
        Ok(Agent {
            view: AgentView {
                port,
                id,
                reg: *reg,
                next_tid: AtomicU32::new(seed | 1),
            },
        })
    }

    /// Sends a request that the kernel tracks: it resends it `retries` times
    /// every `timeout`, and hands back either the response or, when none
    /// came, a timeout notice ([`Received::is_timeout`]) through
    /// [`Agent::recv`].
    pub fn send_request(
        &self,
        mad: &Mad,
        addr: &Address,
        timeout: Duration,
        retries: u32,
    ) -> Result<()> {
        let ms = timeout.as_millis().clamp(1, u32::MAX as u128) as u32;
        self.view.write(mad, addr, ms, retries)
    }

    /// Sends a request and waits for its response: the MAD of this agent
    /// whose TID matches in its lower 32 bits. A request that got no answer
    /// after its retries is [`Error::Timeout`] with its TID.
    pub fn request(
        &self,
        mad: &Mad,
        addr: &Address,
        timeout: Duration,
        retries: u32,
    ) -> Result<Received> {
        self.send_request(mad, addr, timeout, retries)?;
        let r =
            self.view
                .port
                .await_response(self.view.id, mad.tid(), wait_limit(timeout, retries))?;
        check_status(r)
    }

    /// The next MAD for this agent (a request for a server, a response or
    /// timeout notice for a client), waiting up to `timeout`.
    pub fn recv(&self, timeout: Option<Duration>) -> Result<Received> {
        let id = self.view.id;
        self.view.port.recv_matching(timeout, |r| r.agent_id == id)
    }
}

/// How long to wait for the answer to a request sent with `timeout` and
/// `retries`: every try, and a second more, since the kernel reports the
/// timeout itself. Saturates rather than overflows.
pub(crate) fn wait_limit(timeout: Duration, retries: u32) -> Duration {
    timeout
        .saturating_mul(retries.saturating_add(1))
        .saturating_add(Duration::from_secs(1))
}

impl Agent {
    /// What the agent is without its receiving: the same view an
    /// `AsyncAgent` gives, for code that serves both.
    pub fn view(&self) -> &AgentView {
        &self.view
    }
    /// The agent ID the kernel gave.
    pub fn id(&self) -> u32 {
        self.view.id()
    }
    /// What the agent registered for.
    pub fn registration(&self) -> &Registration {
        self.view.registration()
    }
    /// A fresh transaction ID ([`AgentView::next_tid`]).
    pub fn next_tid(&self) -> u64 {
        self.view.next_tid()
    }
    /// Sends a MAD that expects no tracking ([`AgentView::send`]).
    pub fn send(&self, mad: &Mad, addr: &Address) -> Result<()> {
        self.view.send(mad, addr)
    }
    /// Answers a request with `resp` ([`AgentView::respond`]).
    pub fn respond(&self, req: &Received, resp: &Mad) -> Result<()> {
        self.view.respond(req, resp)
    }
}

impl AgentView {
    /// The agent ID the kernel gave.
    pub fn id(&self) -> u32 {
        self.id
    }
    /// What the agent registered for.
    pub fn registration(&self) -> &Registration {
        &self.reg
    }
    /// A fresh transaction ID (its lower 32 bits are what responses are
    /// matched on; the kernel writes the upper 32).
    pub fn next_tid(&self) -> u64 {
        u64::from(self.next_tid.fetch_add(1, Ordering::Relaxed))
    }

    fn check_addr(&self, addr: &Address) -> Result<()> {
        if self.port.is_ethernet() && addr.grh.is_none() {
            return Err(Error::GrhRequired);
        }
        Ok(())
    }

    fn write(&self, mad: &Mad, addr: &Address, timeout_ms: u32, retries: u32) -> Result<()> {
        self.check_addr(addr)?;
        let mut long = rmpp_send(mad.as_bytes(), &self.reg)?;
        if self.port.simulated {
            if let Some(v) = long.as_mut() {
                first_segment_only(v);
            }
        }
        let bytes = long.as_deref().unwrap_or(mad.as_bytes());
        let hdr = send_header(self.id, timeout_ms, retries, bytes.len(), addr);
        let tracked = timeout_ms > 0 && mad.method().expects_response();
        // Recorded before the write, so that a response another thread
        // reads at once is known as one (it bypasses the queue's bound).
        let fresh = tracked && self.port.add_outstanding(self.id, mad.tid());
        match self.port.write(&hdr, bytes) {
            Ok(()) => Ok(()),
            Err(libc::EINVAL) if tracked && !fresh => Err(Error::DuplicateTid { tid: mad.tid() }),
            Err(e) => {
                if fresh {
                    self.port.remove_outstanding(self.id, mad.tid());
                }
                Err(Error::io("write", e))
            }
        }
    }

    /// Sends a MAD that expects no tracking: a Send, a Trap, a response, or
    /// a request whose response the caller collects without a timeout.
    pub fn send(&self, mad: &Mad, addr: &Address) -> Result<()> {
        self.write(mad, addr, 0, 0)
    }

    /// Answers a request with `resp` (its TID should be the request's: see
    /// [`Mad::response`]), to the request's source with the GSI Q_Key.
    pub fn respond(&self, req: &Received, resp: &Mad) -> Result<()> {
        self.send(resp, &req.reply_address())
    }
}

/// Whether the kernel segments MADs of `class` with RMPP
/// (`ib_is_mad_class_rmpp`): SA, BM, device management and administration,
/// vendor range 2.
fn is_rmpp_class(c: u8) -> bool {
    matches!(c, class::SUBN_ADM | class::BM | class::DEV_MGT | 0x10) || class::is_vendor_range2(c)
}

/// The RMPP flags byte (RRespTime and RMPPFlags) of a MAD, and its Active
/// bit: the kernel sends a MAD as an RMPP transfer only with it set.
const RMPP_FLAGS_BYTE: usize = 26;
const RMPP_FLAG_ACTIVE: u8 = 0x01;

/// What to write for a MAD longer than 256 bytes (`None`: the MAD as it
/// is): an RMPP transfer, which the kernel segments, for an agent that
/// registered with RMPP on a class that has it; the copy returned has the
/// RMPP header's Active flag set, without which the kernel refuses
/// (EINVAL) a MAD that does not fit one. Anything else is
/// [`Error::MadTooLong`], with the reason.
///
/// A whole transfer in one buffer (RMPP Active, type DATA, FIRST and
/// LAST) from such an agent is written up to the end its PayloadLength
/// gives (the 36 bytes of MAD and RMPP headers, then PayloadLength bytes),
/// not with the padding after it: the kernel takes the write's length for
/// the transfer's (it computes PayloadLength from it), and a receiver
/// counts records by the length it gets, so padding would read as records
/// (an SA GetTable answer of one PathRecord padded to 256 bytes is three
/// records to `saquery`).
fn rmpp_send(bytes: &[u8], reg: &Registration) -> Result<Option<Vec<u8>>> {
    let len = bytes.len();
    let class = bytes.get(1).copied().unwrap_or(0);
    if reg.rmpp_version != 0 && is_rmpp_class(class) {
        if let Some(end) = rmpp_payload_end(bytes) {
            if end < len {
                let mut v = bytes[..end].to_vec();
                if end > Mad::SIZE {
                    v[RMPP_FLAGS_BYTE] |= RMPP_FLAG_ACTIVE;
                }
                return Ok(Some(v));
            }
        }
    }
    if len <= Mad::SIZE {
        return Ok(None);
    }
    if !is_rmpp_class(class) {
        return Err(Error::MadTooLong {
            len,
            reason: "its class has no RMPP (only SA, BM, device management and vendor range 2 classes do)",
        });
    }
    if reg.rmpp_version == 0 {
        return Err(Error::MadTooLong {
            len,
            reason: "the agent did not register with RMPP (Registration::rmpp(1))",
        });
    }
    let mut v = bytes.to_vec();
    v[RMPP_FLAGS_BYTE] |= RMPP_FLAG_ACTIVE;
    Ok(Some(v))
}

/// Makes an RMPP transfer that claims to be whole (an Active DATA segment
/// flagged FIRST and LAST) longer than one MAD into what a port without
/// RMPP carries of it, its first 256 bytes (ibsim's umad2sim passes no
/// more): the first segment, flagged FIRST and not LAST, its PayloadLength
/// still the whole transfer's, so that a receiver sees a table cut short
/// rather than a complete one of fewer records. Anything else is left as it
/// is.
fn first_segment_only(v: &mut Vec<u8>) {
    const LAST: u8 = 0x04;
    if v.len() > Mad::SIZE && rmpp_payload_end(v).is_some() {
        v.truncate(Mad::SIZE);
        v[RMPP_FLAGS_BYTE] &= !LAST;
    }
}

/// Where the payload of a whole RMPP transfer in `bytes` ends: 36 +
/// PayloadLength, for an Active DATA segment flagged FIRST and LAST whose
/// PayloadLength is not 0; `None` for anything else (no RMPP, a segment of
/// a longer transfer, no length given).
fn rmpp_payload_end(bytes: &[u8]) -> Option<usize> {
    let h = crate::mad::RmppHeader::decode(bytes.get(crate::mad::MadHeader::SIZE..)?).ok()?;
    let whole =
        crate::mad::RmppFlags::ACTIVE | crate::mad::RmppFlags::FIRST | crate::mad::RmppFlags::LAST;
    if h.rmpp_type != crate::mad::RmppType::Data || !h.flags.contains(whole) || h.data2 == 0 {
        return None;
    }
    let end = (crate::mad::MadHeader::SIZE + crate::mad::RmppHeader::SIZE)
        .checked_add(h.data2 as usize)?;
    (end <= bytes.len()).then_some(end)
}

/// Turns the kernel's status of a response into an error.
pub(crate) fn check_status(r: Received) -> Result<Received> {
    match r.status {
        0 => Ok(r),
        libc::ETIMEDOUT => Err(Error::Timeout { tid: r.tid() }),
        e => Err(Error::SendFailed {
            tid: r.tid(),
            source: std::io::Error::from_raw_os_error(e),
        }),
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let view = &self.view;
        // SAFETY: the fd is open (view.port lives) and `id` was registered on
        // it; unregistering once cannot affect memory.
        unsafe { umad_sys::umad_unregister(view.port.fd(), view.id as i32) };
        view.port.forget_agent(view.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_classes_need_an_oui_and_others_refuse_one() {
        assert!(Registration::new(0x32, 1).check().is_err());
        assert!(Registration::new(0x32, 1).oui(Oui::OPENIB).check().is_ok());
        assert!(Registration::new(0x04, 1).oui(Oui::OPENIB).check().is_err());
        assert!(Registration::new(0x04, 1).check().is_ok());
    }

    #[test]
    fn method_mask_sets_the_method_bit() {
        let r = Registration::new(0x32, 1)
            .method(Method::GET)
            .method(Method(0x41));
        assert_eq!(r.method_mask, [1 << 1, 1 << 1]);
    }

    #[test]
    fn request_wait_limits_saturate_instead_of_overflowing() {
        assert_eq!(
            wait_limit(Duration::from_millis(200), 1),
            Duration::from_millis(1400)
        );
        assert_eq!(wait_limit(Duration::MAX, 0), Duration::MAX);
        assert_eq!(
            wait_limit(Duration::from_secs(1), u32::MAX),
            Duration::from_secs(u64::from(u32::MAX) + 1)
        );
        assert_eq!(wait_limit(Duration::MAX, u32::MAX), Duration::MAX);
    }

    fn long_mad(class: u8, len: usize) -> Vec<u8> {
        let mut b = Mad::new(&crate::mad::MadHeader::request(
            class,
            2,
            Method::GET,
            9,
            0x11,
        ))
        .as_bytes()
        .to_vec();
        b.resize(len, 0xee);
        b
    }

    #[test]
    fn a_whole_rmpp_transfer_is_written_up_to_its_payload_length() {
        use crate::mad::sa::{table_response, PathRecord, PathRecordMask, SaRequest};
        let rmpp = Registration::new(class::SUBN_ADM, 2).rmpp(1);
        let req = SaRequest::get_table(5)
            .record(&PathRecord::default(), PathRecordMask::DLID)
            .unwrap();
        // One PathRecord: 56 bytes of headers and 64 of record, not 256.
        let one = table_response(&req, &[PathRecord::default()]).unwrap();
        assert_eq!(one.len(), Mad::SIZE);
        let sent = rmpp_send(one.as_bytes(), &rmpp).unwrap().unwrap();
        assert_eq!(sent.len(), 56 + 64);
        assert_eq!(sent[..], one.as_bytes()[..120]);
        // Five: longer than a MAD, the Active flag set.
        let five = table_response(&req, &[PathRecord::default(); 5]).unwrap();
        assert_eq!(five.len(), 56 + 5 * 64);
        assert_eq!(
            rmpp_send(five.as_bytes(), &rmpp).unwrap().unwrap().len(),
            376
        );
        // None: an empty table is its 56 bytes of headers.
        let none = table_response::<PathRecord>(&req, &[]).unwrap();
        assert_eq!(
            rmpp_send(none.as_bytes(), &rmpp).unwrap().unwrap().len(),
            56
        );
        // Not trimmed: an agent without RMPP, a PayloadLength past the end.
        assert_eq!(
            rmpp_send(one.as_bytes(), &Registration::new(class::SUBN_ADM, 2)).unwrap(),
            None
        );
        let mut lying = one.as_bytes().to_vec();
        lying[32..36].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(rmpp_send(&lying, &rmpp).unwrap(), None);
        assert_eq!(rmpp_payload_end(&lying[..30]), None);
    }

    /// A GetTableResp of `n` PathRecords (64 bytes each).
    fn table(n: usize) -> Mad {
        use crate::mad::sa::{table_response, PathRecord, PathRecordMask, SaRequest};
        let req = SaRequest::get_table(5)
            .record(&PathRecord::default(), PathRecordMask::DLID)
            .unwrap();
        table_response(&req, &vec![PathRecord::default(); n]).unwrap()
    }

    #[test]
    fn a_port_without_rmpp_gets_the_first_segment_flagged_as_such() {
        let rmpp = Registration::new(class::SUBN_ADM, 2).rmpp(1);
        // A whole five-record transfer: its first 256 bytes, FIRST and not
        // LAST, PayloadLength unchanged.
        let five = table(5);
        let mut sent = rmpp_send(five.as_bytes(), &rmpp).unwrap().unwrap();
        let whole = sent.clone();
        first_segment_only(&mut sent);
        assert_eq!(sent.len(), Mad::SIZE);
        let h = crate::mad::RmppHeader::decode(&sent[24..]).unwrap();
        assert_eq!(
            h.flags,
            crate::mad::RmppFlags::ACTIVE | crate::mad::RmppFlags::FIRST
        );
        assert_eq!(h.data2, 20 + 5 * 64);
        assert_eq!(sent[..26], whole[..26]);
        assert_eq!(sent[27..], whole[27..Mad::SIZE]);
        // One MAD, a transfer with no PayloadLength, a long MAD with no RMPP
        // header: as they were.
        let mut one = rmpp_send(table(1).as_bytes(), &rmpp).unwrap().unwrap();
        let before = one.clone();
        first_segment_only(&mut one);
        assert_eq!(one, before);
        let mut bare = long_mad(class::SUBN_ADM, 600);
        bare[RMPP_FLAGS_BYTE] |= RMPP_FLAG_ACTIVE;
        let before = bare.clone();
        first_segment_only(&mut bare);
        assert_eq!(bare, before);
        // Hostile: a PayloadLength past the end, a header on a short buffer.
        let mut lying = whole.clone();
        lying[32..36].copy_from_slice(&100_000u32.to_be_bytes());
        let before = lying.clone();
        first_segment_only(&mut lying);
        assert_eq!(lying, before);
        let mut short = whole[..30].to_vec();
        first_segment_only(&mut short);
        assert_eq!(short, whole[..30]);
    }

    #[test]
    fn mads_longer_than_256_bytes_go_as_rmpp_transfers_of_rmpp_agents() {
        let rmpp = Registration::new(class::SUBN_ADM, 2).rmpp(1);
        // One MAD goes as it is, RMPP agent or not.
        let one = long_mad(class::SUBN_ADM, Mad::SIZE);
        assert_eq!(rmpp_send(&one, &rmpp).unwrap(), None);
        assert_eq!(
            rmpp_send(&one, &Registration::new(class::SUBN_ADM, 2)).unwrap(),
            None
        );
        // A longer one gets the Active flag, the rest untouched.
        let long = long_mad(class::SUBN_ADM, 1000);
        let sent = rmpp_send(&long, &rmpp).unwrap().unwrap();
        assert_eq!(sent.len(), 1000);
        assert_eq!(
            sent[RMPP_FLAGS_BYTE],
            long[RMPP_FLAGS_BYTE] | RMPP_FLAG_ACTIVE
        );
        let mut rest = sent.clone();
        rest[RMPP_FLAGS_BYTE] = long[RMPP_FLAGS_BYTE];
        assert_eq!(rest, long);
        // Vendor range 2 has RMPP too.
        let vendor = Registration::new(0x32, 1).oui(Oui::OPENIB).rmpp(1);
        assert!(rmpp_send(&long_mad(0x32, 300), &vendor).unwrap().is_some());
        // Refused: no RMPP registration, or a class without RMPP.
        for (b, reg) in [
            (long.clone(), Registration::new(class::SUBN_ADM, 2)),
            (
                long_mad(class::PERF_MGT, 300),
                Registration::new(class::PERF_MGT, 1).rmpp(1),
            ),
            (
                long_mad(class::SUBN_LID_ROUTED, 257),
                Registration::new(class::SUBN_LID_ROUTED, 1),
            ),
        ] {
            match rmpp_send(&b, &reg) {
                Err(Error::MadTooLong { len, .. }) => assert_eq!(len, b.len()),
                other => panic!("{reg:?}: {other:?}"),
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a socket pair
    fn a_long_mad_is_written_whole_with_its_header() {
        let (port, r) = crate::umad::port::tests::fake_port();
        let agent = AgentView {
            port,
            id: 5,
            reg: Registration::new(class::SUBN_ADM, 2).rmpp(1),
            next_tid: AtomicU32::new(1),
        };
        let mad = Mad::decode(&long_mad(class::SUBN_ADM, 2000)).unwrap();
        agent.send(&mad, &Address::gsi_lid(1)).unwrap();
        let mut buf = vec![0u8; 4096];
        use std::os::fd::AsRawFd;
        // SAFETY: `buf` is writable for its length; the fd is open.
        let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(n, (HDR + 2000) as isize);
        assert_eq!(u32::from_ne_bytes(buf[16..20].try_into().unwrap()), 2000);
        assert_eq!(buf[HDR + RMPP_FLAGS_BYTE] & RMPP_FLAG_ACTIVE, 1);
        assert_eq!(&buf[HDR + 300..HDR + 2000], &mad.as_bytes()[300..]);
        // Without RMPP: refused before the write.
        let plain = AgentView {
            reg: Registration::new(class::SUBN_ADM, 2),
            port: agent.port.clone(),
            id: 6,
            next_tid: AtomicU32::new(1),
        };
        assert!(matches!(
            plain.send(&mad, &Address::gsi_lid(1)),
            Err(Error::MadTooLong { len: 2000, .. })
        ));
    }

    const HDR: usize = crate::umad::wire::HDR_SIZE;

    #[test]
    fn refusals_say_why() {
        let e = refusal(0x01, libc::EPROTONOSUPPORT);
        assert!(matches!(e, Error::ClassRefused { class: 1, .. }));
        assert_eq!(e.errno(), libc::EPROTONOSUPPORT);
        assert!(e.to_string().contains("QP0"));
        assert!(refusal(0x07, libc::EINVAL)
            .to_string()
            .contains("connection manager"));
        assert!(matches!(refusal(0x32, libc::ENOMEM), Error::Io { .. }));
    }
}
