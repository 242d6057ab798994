//! IP over InfiniBand (RFC 4391, 4392; connected mode RFC 4755) in user
//! space, over the `rdma` crate's parts: what a program needs to carry IP
//! datagrams on a UD queue pair, without a kernel IPoIB device.
//!
//! - [`LinkAddr`]: the 20-byte link-layer address (flags, QPN, GID);
//! - [`mgid`]: the multicast GIDs of the broadcast groups and of IPv4 and
//!   IPv6 multicast addresses;
//! - [`encap`]: the 4-byte encapsulation header, and the classification of
//!   a received datagram (with the drops it counts);
//! - [`arp`]: ARP with hardware type 32 and 20-byte addresses;
//! - [`nd`]: IPv6 neighbour discovery with the IPoIB link-layer option;
//! - [`neigh`]: the bounded neighbour table that resolution fills;
//! - [`connected`]: connected mode (RFC 4755): the private data of its
//!   connections, their service IDs and ports, the table of connections;
//! - [`icmp`]: the "fragmentation needed" and "packet too big" answers to
//!   a packet too long for its path;
//! - [`sa`]: on InfiniBand, the MCMemberRecord joins and leaves and the
//!   PathRecords, through the subnet administrator.
//!
//! Everything here but [`sa`]'s queries is pure: no device, no clock
//! (callers pass the time), so that every rule is tested on any host.

#![warn(missing_docs)]

pub mod arp;
pub mod connected;
pub mod encap;
pub mod icmp;
pub mod mgid;
pub mod nd;
pub mod neigh;
pub mod sa;

mod lladdr;

pub use lladdr::{LinkAddr, ParseLinkAddrError};
