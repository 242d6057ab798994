//! An asynchronous client of the subnet administrator (SA) on a tokio
//! [`AsyncPort`] (feature `tokio`), [`SaClient`]: PathRecord queries, multicast joins and
//! leaves (MCMemberRecord Set and Delete, as IPoIB joins its broadcast
//! group), any record by Get or GetTable, and subscriptions to the SA's
//! reports (InformInfo Set; Notices such as a GID going in or out of
//! service).
//!
//! The records and their component masks, and their encoding, are
//! [`crate::mad::sa`]'s (the codec, which an SA server uses too). Each
//! request has a TID of its own, so many may be in flight at once, from as
//! many tasks; each waits at most its timeout per attempt and is sent again
//! (same TID) up to its retries when no answer came or the SA said it was
//! busy. The SA's address is the port's SM LID and SL, read again after a
//! request that got no answer (the SM may have moved).
//!
//! Its errors are [`umad::Error`]s: those of the port and the agent, and
//! the SA's own ([`umad::Error::Sa`]: an error status, which
//! [`sa_status`](umad::Error::sa_status) gives, or an answer that does not
//! decode; [`umad::Error::NoSubnetManager`]).
//!
//! ```no_run
//! # async fn f() -> Result<(), rdma::umad::Error> {
//! use rdma::umad::{AsyncPort, Port, SaClient};
//! let port = AsyncPort::new(Port::open("mlx5_0", 1)?)?;
//! let sa = SaClient::new(&port)?;
//! let info = port.port().info()?;
//! let me = rdma::Gid::from_parts(info.gid_prefix, info.port_guid);
//! for path in sa.paths_between_gids(me, me).await? {
//!     println!("DLID {} SL {} MTU code {}", path.dlid, path.sl, path.mtu);
//! }
//! # Ok(()) }
//! ```

use std::sync::Mutex;
use std::time::Duration;

use crate::mad::sa::{
    self as records, InformInfo, McMemberRecord, McMemberRecordMask, PathRecord, PathRecordMask,
    SaError, SaRecord, SaRequest, SaStatusCode, SaTable,
};
use crate::mad::{class, Mad, Method, Notice};
use crate::umad::{self, Address, AsyncAgent, AsyncPort, Error, Received, Registration, Result};
use crate::Gid;

/// The QP of every SA client: the GSI.
const GSI_QPN: u32 = 1;

/// The default time an attempt waits for its answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1000);
/// The default number of resends after the first attempt.
pub const DEFAULT_RETRIES: u32 = 3;

/// A client of the SA on one port. Its methods take `&self`: share it
/// (an `Arc`) between tasks to have many requests in flight.
pub struct SaClient {
    agent: AsyncAgent,
    ca: String,
    port_num: u32,
    sm: Mutex<Address>,
    timeout: Duration,
    retries: u32,
}

impl std::fmt::Debug for SaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaClient")
            .field("agent", &self.agent.agent().id())
            .field("sm", &self.sm_address())
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

impl SaClient {
    /// Registers an SA agent on `port` (class 0x03 version 2, with the
    /// kernel's RMPP for GetTable answers longer than one MAD, and as the
    /// receiver of the SA's Reports) and reads the SM's address from the
    /// port.
    pub fn new(port: &AsyncPort) -> Result<SaClient> {
        let reg = Registration::new(class::SUBN_ADM, records::CLASS_VERSION)
            .rmpp(1)
            .method(Method::REPORT);
        let agent = port.register(&reg)?;
        let (ca, port_num) = (port.port().ca_name().to_string(), port.port().port_num());
        let sm = sm_address(&ca, port_num)?;
        Ok(SaClient {
            agent,
            ca,
            port_num,
            sm: Mutex::new(sm),
            timeout: DEFAULT_TIMEOUT,
            retries: DEFAULT_RETRIES,
        })
    }

    /// The same client with this timeout per attempt.
    pub fn with_timeout(mut self, timeout: Duration) -> SaClient {
        self.timeout = timeout;
        self
    }

    /// The same client with this many resends after the first attempt.
    pub fn with_retries(mut self, retries: u32) -> SaClient {
        self.retries = retries;
        self
    }

    /// Where requests go: the SM's LID and SL as the port last said.
    pub fn sm_address(&self) -> Address {
        *crate::os::lock(&self.sm)
    }

    /// The agent underneath (its ID and TIDs).
    pub fn agent(&self) -> &AsyncAgent {
        &self.agent
    }

    /// Sends `mad` (its TID replaced by a fresh one) and waits for the
    /// answer, resending on a timeout or a busy status.
    async fn exchange(&self, mut mad: Mad) -> Result<Received> {
        mad.set_tid(self.agent.agent().next_tid());
        let mut attempt = 0;
        loop {
            let addr = self.sm_address();
            match self.agent.request(&mad, &addr, self.timeout, 0).await {
                Ok(r) if r.mad.status().busy() && attempt < self.retries => {}
                Ok(r) => return Ok(r),
                Err(umad::Error::Timeout { .. }) if attempt < self.retries => {
                    if let Ok(a) = sm_address(&self.ca, self.port_num) {
                        *crate::os::lock(&self.sm) = a;
                    }
                }
                Err(e) => return Err(e),
            }
            attempt += 1;
        }
    }

    /// SubnAdmGet: the one record matching the fields of `mask` in
    /// `record`.
    pub async fn get<R: SaRecord>(&self, record: &R, mask: R::Mask) -> Result<R> {
        let mad = SaRequest::get(0)
            .record(record, mask)
            .map_err(SaError::from)?;
        let r = self.exchange(mad).await?;
        Ok(records::response::<R>(r.received_bytes())?)
    }

    /// SubnAdmGetTable: every record matching the fields of `mask` in
    /// `record` (none is an empty table, not an error). A table that
    /// arrived cut short (the first MAD of a longer transfer, as on a port
    /// without RMPP) is [`SaError::Truncated`], not the records of its
    /// first part.
    pub async fn get_table<R: SaRecord>(&self, record: &R, mask: R::Mask) -> Result<Vec<R>> {
        let mad = SaRequest::get_table(0)
            .record(record, mask)
            .map_err(SaError::from)?;
        let r = self.exchange(mad).await?;
        match SaTable::<R>::new(r.received_bytes()).and_then(SaTable::whole) {
            Ok(t) => Ok(t.collect::<Result<Vec<R>, _>>().map_err(SaError::from)?),
            Err(e) if e.code() == Some(SaStatusCode::NoRecords) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// SubnAdmSet of `record`, the fields of `mask` naming it (e.g. a
    /// ServiceRecord registration: its ServiceID and ServiceGID): the record
    /// as the SA keeps it.
    pub async fn set<R: SaRecord>(&self, record: &R, mask: R::Mask) -> Result<R> {
        let mad = SaRequest::set(0)
            .record(record, mask)
            .map_err(SaError::from)?;
        let r = self.exchange(mad).await?;
        Ok(records::response::<R>(r.received_bytes())?)
    }

    /// SubnAdmDelete of the record the fields of `mask` in `record` name:
    /// the record removed.
    pub async fn delete<R: SaRecord>(&self, record: &R, mask: R::Mask) -> Result<R> {
        let mad = SaRequest::delete(0)
            .record(record, mask)
            .map_err(SaError::from)?;
        let r = self.exchange(mad).await?;
        Ok(records::response::<R>(r.received_bytes())?)
    }

    /// The PathRecords matching `query` in the fields of `mask`
    /// (GetTable).
    pub async fn path_records(
        &self,
        query: &PathRecord,
        mask: PathRecordMask,
    ) -> Result<Vec<PathRecord>> {
        self.get_table(query, mask).await
    }

    /// The paths from `sgid` to `dgid` (one, reversible, as IPoIB and the
    /// CM ask: SGID, DGID, NumbPath 1).
    pub async fn paths_between_gids(&self, sgid: Gid, dgid: Gid) -> Result<Vec<PathRecord>> {
        let q = PathRecord {
            sgid,
            dgid,
            numb_path: 1,
            reversible: true,
            ..PathRecord::default()
        };
        let mask = PathRecordMask::SGID
            | PathRecordMask::DGID
            | PathRecordMask::NUMB_PATH
            | PathRecordMask::REVERSIBLE;
        self.path_records(&q, mask).await
    }

    /// The paths from LID `slid` to LID `dlid`.
    pub async fn paths_between_lids(&self, slid: u16, dlid: u16) -> Result<Vec<PathRecord>> {
        let q = PathRecord {
            slid,
            dlid,
            numb_path: 1,
            reversible: true,
            ..PathRecord::default()
        };
        let mask = PathRecordMask::SLID
            | PathRecordMask::DLID
            | PathRecordMask::NUMB_PATH
            | PathRecordMask::REVERSIBLE;
        self.path_records(&q, mask).await
    }

    /// Joins a multicast group (SubnAdmSet of an MCMemberRecord): `member`
    /// names the group (MGID; a zero MGID asks the SA to assign one), the
    /// port (PortGID) and the JoinState, and for a new group its Q_Key,
    /// P_Key, SL, FlowLabel, TClass and the rest, each field in `mask`.
    /// The answer is the group as the SA keeps it (its MLID, MTU, rate).
    pub async fn join_multicast(
        &self,
        member: &McMemberRecord,
        mask: McMemberRecordMask,
    ) -> Result<McMemberRecord> {
        let mad = SaRequest::set(0)
            .record(member, mask)
            .map_err(SaError::from)?;
        let r = self.exchange(mad).await?;
        Ok(records::response::<McMemberRecord>(r.received_bytes())?)
    }

    /// Leaves a multicast group (SubnAdmDelete of the MCMemberRecord with
    /// the MGID, PortGID and JoinState of the join).
    pub async fn leave_multicast(
        &self,
        member: &McMemberRecord,
        mask: McMemberRecordMask,
    ) -> Result<McMemberRecord> {
        let mad = SaRequest::delete(0)
            .record(member, mask)
            .map_err(SaError::from)?;
        let r = self.exchange(mad).await?;
        Ok(records::response::<McMemberRecord>(r.received_bytes())?)
    }

    /// Subscribes to (or, with `subscribe` false, unsubscribes from) the
    /// SA's Reports of `inform` (SubnAdmSet of InformInfo; its QPN is set to
    /// this agent's QP, the GSI's 1). The answer is the InformInfo as the SA took it. The
    /// Reports then come through [`SaClient::next_report`].
    pub async fn subscribe(&self, inform: &InformInfo) -> Result<InformInfo> {
        // The SA keeps the subscriber's QPN with the subscription, and an
        // unsubscription must name the same.
        let inform = InformInfo {
            qpn: GSI_QPN,
            ..*inform
        };
        let mad = SaRequest::set(0)
            .attribute(&inform, 0)
            .map_err(SaError::from)?;
        let r = self.exchange(mad).await?;
        Ok(records::response::<InformInfo>(r.received_bytes())?)
    }

    /// The next Report of a subscription, acknowledged to the SA
    /// (ReportResp) before it is returned. MADs to this agent that are not
    /// well-formed Reports are answered with nothing and skipped. `None`
    /// when the port's reader stopped.
    pub async fn next_report(&self) -> Option<Result<Notice>> {
        loop {
            let req = self.agent.next_request().await?;
            let (notice, resp) = match report_response(&req.mad) {
                None => continue,
                Some(Ok(r)) => r,
                Some(Err(e)) => return Some(Err(Error::Sa(SaError::Codec(e)))),
            };
            if let Err(e) = self.agent.respond(&req, &resp) {
                return Some(Err(e));
            }
            return Some(Ok(notice));
        }
    }
}

/// The Notice of `mad` if it is a SubnAdmReport, with its answer: a
/// ReportResp of the same TID carrying the Notice. `None` for another MAD;
/// an error for a Report whose attribute is not a Notice that decodes.
fn report_response(mad: &Mad) -> Option<std::result::Result<(Notice, Mad), crate::mad::Error>> {
    let h = mad.header();
    if h.mgmt_class != class::SUBN_ADM || h.method != Method::REPORT {
        return None;
    }
    Some((|| {
        let notice = mad.attribute::<Notice>()?;
        let mut resp = mad.response();
        resp.set_header(&crate::mad::MadHeader {
            method: Method::REPORT_RESP,
            ..resp.header()
        });
        resp.set_attribute(&notice)?;
        Ok((notice, resp))
    })())
}

/// The SM's address as port `port_num` of `ca` tells it: its LID and SL,
/// the GSI.
fn sm_address(ca: &str, port_num: u32) -> Result<Address> {
    let info = umad::CaPort::get(ca, port_num)?;
    let lid = u16::try_from(info.sm_lid).unwrap_or(0);
    if lid == 0 {
        return Err(Error::NoSubnetManager {
            ca: ca.to_string(),
            port: port_num,
        });
    }
    Ok(Address {
        sl: (info.sm_sl & 0xf) as u8,
        ..Address::gsi_lid(lid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{attr_id, MadHeader, Trap};

    fn report(attr: u16) -> Mad {
        let mut m = Mad::new(&MadHeader {
            base_version: 1,
            mgmt_class: class::SUBN_ADM,
            class_version: 2,
            method: Method::REPORT,
            tid: 0x1234_5678,
            ..MadHeader::default()
        });
        let gid = Gid([0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        let n = Notice::generic(3, Notice::PRODUCER_SM, 1, &Trap::McGroupCreated(gid));
        m.set_attribute(&n).unwrap();
        m.set_header(&MadHeader {
            attr_id: attr,
            ..m.header()
        });
        m
    }

    #[test]
    fn a_report_is_answered_with_its_notice_and_tid() {
        let m = report(attr_id::NOTICE);
        let (n, resp) = report_response(&m).unwrap().unwrap();
        assert_eq!(n, m.attribute::<Notice>().unwrap());
        assert!(matches!(n.trap(), Some(Trap::McGroupCreated(_))));
        let h = resp.header();
        assert_eq!(
            (h.method, h.tid, h.attr_id),
            (Method::REPORT_RESP, 0x1234_5678, attr_id::NOTICE)
        );
        assert_eq!(resp.attribute::<Notice>().unwrap(), n);
    }

    #[test]
    fn hostile_reports_are_errors_and_other_mads_are_not_reports() {
        // A Report of another attribute: an error, no answer.
        assert!(report_response(&report(attr_id::NODE_INFO))
            .unwrap()
            .is_err());
        // Not a Report: a Get, a ReportResp, another class.
        for (class, method) in [
            (class::SUBN_ADM, Method::GET),
            (class::SUBN_ADM, Method::REPORT_RESP),
            (class::PERF_MGT, Method::REPORT),
        ] {
            let mut m = report(attr_id::NOTICE);
            m.set_header(&MadHeader {
                mgmt_class: class,
                method,
                ..m.header()
            });
            assert!(report_response(&m).is_none(), "{class:#x} {method:?}");
        }
        // Random bytes in a Report's data and header fields: an answer or
        // an error, never a panic. Under Miri (undefined behaviour on the
        // decoder's paths) 50: there the 2000 took minutes.
        let rounds = if cfg!(miri) { 50 } else { 2000 };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..rounds {
            let mut m = report(attr_id::NOTICE);
            for b in m.as_bytes_mut()[24..].iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            if let Some(Ok((n, resp))) = report_response(&m) {
                assert_eq!(resp.attribute::<Notice>().unwrap(), n);
            }
        }
    }
}
