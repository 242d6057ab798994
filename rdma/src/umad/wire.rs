//! The `struct ib_user_mad` header that precedes every MAD on the umad fd:
//! building it for a send, and parsing what a read returned.

use super::addr::{Address, ADDR_SIZE};
use super::{Error, Result};
use crate::mad::Mad;

/// The size of `struct ib_user_mad` with P_Key support: five 32-bit words
/// and the 44-byte address.
pub(crate) const HDR_SIZE: usize = 64;
const _: () = assert!(std::mem::size_of::<umad_sys::ib_user_mad>() == HDR_SIZE);
const _: () = assert!(20 + ADDR_SIZE == HDR_SIZE);

/// A MAD read from a port: which agent it is for, the kernel's status, where
/// it came from, how long it was, and the MAD.
#[derive(Debug, Clone)]
pub struct Received {
    /// The ID of the agent it was delivered to.
    pub agent_id: u32,
    /// 0, or an errno: ETIMEDOUT (110) for a request that got no response
    /// (then `mad` holds only the request's header).
    pub status: i32,
    /// The source address (the GRH's GID is the sender's).
    pub addr: Address,
    /// How many bytes of MAD the read delivered after the umad header:
    /// 256 for a MAD off the wire, more for a reassembled RMPP transfer, 24
    /// for the kernel's notice that a request timed out (its header only),
    /// and whatever the sender wrote under ibsim's umad2sim, which passes
    /// on the length of the send (at most 256). `mad` is padded with zeros
    /// to 256 bytes when this is shorter: the bytes past `len` were not
    /// received.
    pub len: usize,
    /// The MAD.
    pub mad: Mad,
}

impl Received {
    /// The MAD's TID.
    pub fn tid(&self) -> u64 {
        self.mad.tid()
    }
    /// Whether this is the kernel's notice that a request timed out.
    pub fn is_timeout(&self) -> bool {
        self.status == libc::ETIMEDOUT
    }
    /// The address to reply to (GSI Q_Key set, as RoCE needs).
    pub fn reply_address(&self) -> Address {
        self.addr.reply()
    }
    /// The bytes of the MAD that were received (`len` of them; the padding
    /// of a short MAD left out).
    pub fn received_bytes(&self) -> &[u8] {
        let b = self.mad.as_bytes();
        &b[..self.len.min(b.len())]
    }
}

/// Builds the `struct ib_user_mad` header of a send.
pub(crate) fn send_header(
    agent_id: u32,
    timeout_ms: u32,
    retries: u32,
    len: usize,
    addr: &Address,
) -> [u8; HDR_SIZE] {
    let mut h = [0u8; HDR_SIZE];
    h[0..4].copy_from_slice(&agent_id.to_ne_bytes());
    h[8..12].copy_from_slice(&timeout_ms.to_ne_bytes());
    h[12..16].copy_from_slice(&retries.to_ne_bytes());
    h[16..20].copy_from_slice(&(len as u32).to_ne_bytes());
    let mut a = [0u8; ADDR_SIZE];
    addr.write(&mut a);
    h[20..].copy_from_slice(&a);
    h
}

/// Parses what `read` returned: the header, then the MAD.
pub(crate) fn parse(b: &[u8]) -> Result<Received> {
    let word = |o: usize| -> u32 {
        b.get(o..o + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_ne_bytes)
            .unwrap_or(0)
    };
    let addr: [u8; ADDR_SIZE] =
        b.get(20..HDR_SIZE)
            .and_then(|s| s.try_into().ok())
            .ok_or(Error::Mad(crate::mad::Error::Truncated {
                what: "umad header",
                need: HDR_SIZE,
                have: b.len(),
            }))?;
    // What the read delivered after the header is the MAD: the kernel's
    // length word counts the header too (and on a timeout notice still
    // holds the send's), so it says nothing the read's size does not.
    let len = b.len() - HDR_SIZE;
    let mad = Mad::decode(&b[HDR_SIZE..])?;
    Ok(Received {
        agent_id: word(0),
        status: word(4) as i32,
        addr: Address::read(&addr),
        len,
        mad,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{MadHeader, Method};

    #[test]
    fn a_timeout_notice_parses_with_its_tid() {
        let h = MadHeader::request(0x32, 1, Method::GET, 0x0000_0005_0000_0042, 0);
        let mut b = send_header(3, 0, 0, 24, &Address::gsi_lid(1)).to_vec();
        b[4..8].copy_from_slice(&(libc::ETIMEDOUT as u32).to_ne_bytes());
        b.extend_from_slice(&h.to_bytes());
        let r = parse(&b).unwrap();
        assert_eq!(r.agent_id, 3);
        assert!(r.is_timeout());
        assert_eq!(r.tid(), 0x0000_0005_0000_0042);
        assert_eq!(r.addr, Address::gsi_lid(1));
    }

    #[test]
    fn the_received_length_is_what_the_read_delivered() {
        let h = MadHeader::request(0x32, 1, Method::GET, 7, 0);
        // A timeout notice: the header only, the length word the send's.
        let mut b = send_header(3, 0, 0, Mad::SIZE, &Address::gsi_lid(1)).to_vec();
        b.extend_from_slice(&h.to_bytes());
        let r = parse(&b).unwrap();
        assert_eq!(r.len, MadHeader::SIZE);
        assert_eq!(r.mad.len(), Mad::SIZE, "padded for the codec");
        assert_eq!(r.received_bytes(), &h.to_bytes()[..]);
        // A short MAD (umad2sim passes on a sender's 100 bytes).
        let mut m = Mad::new(&h).as_bytes()[..100].to_vec();
        m[99] = 0xab;
        let mut b = send_header(3, 0, 0, HDR_SIZE + 100, &Address::gsi_lid(1)).to_vec();
        b.extend_from_slice(&m);
        let r = parse(&b).unwrap();
        assert_eq!((r.len, r.received_bytes()), (100, &m[..]));
        assert_eq!(
            r.mad.as_bytes()[99..],
            [[0xab].as_slice(), &[0; 156]].concat()
        );
        // A full MAD and a reassembled RMPP transfer.
        for n in [Mad::SIZE, 1000] {
            let mut b = send_header(3, 0, 0, HDR_SIZE + n, &Address::gsi_lid(1)).to_vec();
            b.extend_from_slice(Mad::new(&h).as_bytes());
            b.resize(HDR_SIZE + n, 0x5a);
            let r = parse(&b).unwrap();
            assert_eq!((r.len, r.mad.len()), (n, n));
            assert_eq!(r.received_bytes().len(), n);
        }
    }

    #[test]
    fn short_reads_are_errors() {
        assert!(parse(&[0u8; 10]).is_err());
        assert!(parse(&[0u8; 64]).is_err());
        let mut b = send_header(1, 0, 0, 1000, &Address::gsi_lid(1)).to_vec();
        b.extend_from_slice(&MadHeader::default().to_bytes());
        assert!(parse(&b).is_ok(), "a length past the data is clamped");
    }
}
