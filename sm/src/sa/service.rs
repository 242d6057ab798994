//! ServiceRecords (IBA 15.2.5.14): services that ports register with the
//! SA (SubnAdmSet), find (Get, GetTable) and remove (SubnAdmDelete), each
//! kept for its ServiceLease.
//!
//! A service is named by its ServiceID, ServiceGID and ServiceP_Key (a Set
//! of the same three replaces the record). Only the port of ServiceGID may
//! register or remove it. Leases run out lazily: every request first drops
//! the services whose lease ended before `now` (the clock is the caller's,
//! so that tests move it), and a record is answered with the seconds its
//! lease has left, as OpenSM answers it.

use std::time::{Duration, Instant};

use rdma::mad::sa::{ServiceRecord, ServiceRecordMask};

use super::*;

/// How many services the SA keeps at most: a Set past it is
/// ERR_NO_RESOURCES, so that no client can grow the SA without end.
pub(crate) const MAX_SERVICES: usize = 4096;

/// A registered service: the record as set, and when its lease ends
/// (`None`: never, a ServiceLease of 0xFFFFFFFF).
#[derive(Clone, Debug)]
pub struct Service {
    /// The record as the Set gave it (ServiceP_Key filled in).
    pub rec: ServiceRecord,
    /// The end of its lease.
    pub expires: Option<Instant>,
}

impl Service {
    /// The record with the seconds of lease left at `now` (rounded up).
    fn at(&self, now: Instant) -> ServiceRecord {
        let lease = match self.expires {
            None => ServiceRecord::INFINITE_LEASE,
            Some(end) => {
                let left = end.saturating_duration_since(now);
                let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
                u32::try_from(secs).unwrap_or(ServiceRecord::INFINITE_LEASE - 1)
            }
        };
        ServiceRecord {
            service_lease: lease,
            ..self.rec
        }
    }

    fn same(&self, q: &ServiceRecord) -> bool {
        self.rec.service_id == q.service_id
            && self.rec.service_gid == q.service_gid
            && self.rec.service_pkey == q.service_pkey
    }
}

/// Drops the services whose lease ended at or before `now`.
pub(super) fn expire(services: &mut Vec<Service>, now: Instant) {
    services.retain(|s| s.expires.is_none_or(|end| end > now));
}

/// The answer to a ServiceRecord request `req` at `now`.
pub(super) fn answer(req: &Received, subnet: &RwLock<Subnet>, now: Instant) -> Mad {
    let m = &req.mad;
    let h = m.header();
    let mask = m.sa_header().map_or(0, |sa| sa.comp_mask);
    let q = match super::tables::record_of::<ServiceRecord>(req) {
        Ok(q) => q,
        Err(code) => return error(m, code),
    };
    let r = match h.method {
        Method::GET | Method::GET_TABLE => {
            let all = {
                let mut s = lock_w(subnet);
                expire(&mut s.groups.services, now);
                s.groups.services.iter().map(|sv| sv.at(now)).collect()
            };
            return match matching(&q, mask, all) {
                Ok(hits) => reply(m, h.method, hits),
                Err(code) => error(m, code),
            };
        }
        Method::SET => register(&mut lock_w(subnet), &q, mask, req.addr.lid, now),
        Method::DELETE => remove(&mut lock_w(subnet), &q, mask, req.addr.lid, now),
        _ => {
            return general_error(
                m,
                Status::new(
                    false,
                    false,
                    rdma::mad::InvalidField::MethodAttributeNotSupported,
                    0,
                ),
            )
        }
    };
    match r {
        Ok(rec) => record_response(m, &rec),
        Err(code) => error(m, code),
    }
}

/// `q`'s name (ServiceID, ServiceGID, and ServiceP_Key, the default
/// partition's when the mask leaves it out), after checking that the
/// mask names the first two and that `requester` is the port of the GID.
fn named(
    s: &Subnet,
    q: &ServiceRecord,
    mask: u64,
    requester: u16,
) -> Result<ServiceRecord, SaStatusCode> {
    let m = ServiceRecordMask::from_bits_truncate(mask);
    if !m.contains(ServiceRecordMask::SERVICE_ID | ServiceRecordMask::SERVICE_GID) {
        return Err(SaStatusCode::ReqInsufficientComponents);
    }
    let Some((_, _, guid)) = end_port(s, requester) else {
        return Err(SaStatusCode::ReqDenied);
    };
    if Gid::from_parts(SUBNET_PREFIX, guid) != q.service_gid {
        return Err(SaStatusCode::ReqDenied);
    }
    let mut q = *q;
    if !m.contains(ServiceRecordMask::SERVICE_PKEY) {
        q.service_pkey = DEFAULT_PKEY;
    }
    Ok(q)
}

/// A registration (SubnAdmSet) of `q` by the port of LID `requester`: a
/// new service, or the same one's record and lease replaced.
pub(super) fn register(
    s: &mut Subnet,
    q: &ServiceRecord,
    mask: u64,
    requester: u16,
    now: Instant,
) -> Result<ServiceRecord, SaStatusCode> {
    let q = named(s, q, mask, requester)?;
    let services = &mut s.groups.services;
    expire(services, now);
    let expires = match q.service_lease {
        ServiceRecord::INFINITE_LEASE => None,
        secs => Some(now + Duration::from_secs(secs.into())),
    };
    let sv = Service { rec: q, expires };
    match services.iter().position(|x| x.same(&q)) {
        Some(i) => services[i] = sv.clone(),
        None if services.len() >= MAX_SERVICES => return Err(SaStatusCode::NoResources),
        None => services.push(sv.clone()),
    }
    Ok(sv.at(now))
}

/// A removal (SubnAdmDelete) of the service `q` names, by the port of
/// LID `requester`: the record removed.
pub(super) fn remove(
    s: &mut Subnet,
    q: &ServiceRecord,
    mask: u64,
    requester: u16,
    now: Instant,
) -> Result<ServiceRecord, SaStatusCode> {
    let q = named(s, q, mask, requester)?;
    let services = &mut s.groups.services;
    expire(services, now);
    let Some(i) = services.iter().position(|x| x.same(&q)) else {
        return Err(SaStatusCode::NoRecords);
    };
    Ok(services.remove(i).at(now))
}
