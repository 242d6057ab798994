//! Enhanced connection establishment (ECE): the vendor options a QP
//! offers or agreed to (`ibv_query_ece`, `ibv_set_ece`).

use super::QueuePair;
use crate::{sys, Error, Result};

/// The ECE options of a connection (`ibv_ece`): the vendor (its IEEE
/// OUI) and that vendor's option bits. Exchanged in the CM's REQ and REP
/// so that both sides use only options both support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ece {
    /// The vendor, as an IEEE OUI (Mellanox: `0x15b3`).
    pub vendor_id: u32,
    /// The vendor's option bits.
    pub options: u32,
}

impl Ece {
    pub(crate) fn raw(self) -> sys::ibv_ece {
        sys::ibv_ece {
            vendor_id: self.vendor_id,
            options: self.options,
            comp_mask: 0,
        }
    }

    pub(crate) fn from_raw(e: &sys::ibv_ece) -> Ece {
        Ece {
            vendor_id: e.vendor_id,
            options: e.options,
        }
    }
}

impl QueuePair {
    /// The ECE options the QP offers, or agreed to once connected
    /// (`ibv_query_ece`). Providers without ECE (rxe and siw among them)
    /// fail with `EOPNOTSUPP`.
    pub fn query_ece(&self) -> Result<Ece> {
        let mut e = Ece::default().raw();
        // SAFETY: a live QP; `e` is a local the call fills.
        let rc = unsafe { sys::ibv_query_ece(self.raw.as_ptr(), &mut e) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_query_ece", rc));
        }
        Ok(Ece::from_raw(&e))
    }

    /// Sets the ECE options the QP is to use (`ibv_set_ece`), before it
    /// leaves INIT: what the peer's REQ or REP offered, narrowed to what
    /// this side supports. Providers without ECE (rxe and siw among them)
    /// fail with `EOPNOTSUPP`; the QP is unchanged then.
    pub fn set_ece(&self, ece: Ece) -> Result<()> {
        let mut e = ece.raw();
        // SAFETY: a live QP; `e` is complete (no comp_mask bits) and lives
        // for the call.
        let rc = unsafe { sys::ibv_set_ece(self.raw.as_ptr(), &mut e) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_set_ece", rc));
        }
        Ok(())
    }
}
