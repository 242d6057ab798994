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
/// Send unsolicited MADs and responses with [`AgentView::send`] and
/// [`AgentView::respond`]; send a request and wait for its response with
/// [`Agent::request`], or send it with [`Agent::send_request`] and collect
/// the response (or the timeout) with [`Agent::recv`].
///
/// What does not receive (its ID, its TIDs, sending and responding) is on
/// [`AgentView`], which an `Agent` dereferences to.
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

impl std::ops::Deref for Agent {
    type Target = AgentView;
    fn deref(&self) -> &AgentView {
        &self.view
    }
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
        Agent::register(self.inner.clone(), reg)
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
        let r = self
            .port
            .await_response(self.id, mad.tid(), wait_limit(timeout, retries))?;
        check_status(r)
    }

    /// The next MAD for this agent (a request for a server, a response or
    /// timeout notice for a client), waiting up to `timeout`.
    pub fn recv(&self, timeout: Option<Duration>) -> Result<Received> {
        let id = self.id;
        self.port.recv_matching(timeout, |r| r.agent_id == id)
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
        let bytes = mad.as_bytes();
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
        // SAFETY: the fd is open (self.port lives) and `id` was registered on
        // it; unregistering once cannot affect memory.
        unsafe { umad_sys::umad_unregister(self.port.fd(), self.id as i32) };
        self.port.forget_agent(self.id);
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

    #[test]
    fn refusals_say_why() {
        let e = refusal(0x01, libc::EPROTONOSUPPORT);
        assert!(matches!(e, Error::ClassRefused { class: 1, .. }));
        assert_eq!(e.errno(), Some(libc::EPROTONOSUPPORT));
        assert!(e.to_string().contains("QP0"));
        assert!(refusal(0x07, libc::EINVAL)
            .to_string()
            .contains("connection manager"));
        assert!(matches!(refusal(0x32, libc::ENOMEM), Error::Io { .. }));
    }
}
