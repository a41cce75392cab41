//! Multicast membership of UD QPs: ATTACH_TO_MCG as a DEVX object whose
//! destroy is DETACH_FROM_MCG, so dropping the attachment detaches.

use std::fmt;
use std::sync::Arc;

use prm_layouts::enums::Opcode;
use prm_layouts::{AttachToMcgIn, AttachToMcgOut};

use crate::error::{DestroyError, Error, Result, VerbResult};
use crate::port::Gid;
use crate::qp::{Qp, QpShared, QpType};
use crate::util::Owned;

/// A QP's membership in a multicast group (`ibv_attach_mcast`). Keeps the QP
/// alive; dropping it (or `detach`) leaves the group.
pub struct McastAttachment {
    owned: Owned<Arc<QpShared>>,
    gid: Gid,
    lid: u16,
}

impl fmt::Debug for McastAttachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "McastAttachment(qp {:#x}, {})", self.qpn(), self.gid)
    }
}

impl McastAttachment {
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The multicast LID given at attach (InfiniBand; 0 on Ethernet).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    pub fn qpn(&self) -> u32 {
        self.owned.deps().qpn()
    }

    pub fn obj(&self) -> &devx::Obj {
        self.owned.obj()
    }

    /// `ibv_detach_mcast`: DETACH_FROM_MCG now, with its result.
    pub fn detach(self) -> Result<(), DestroyError<McastAttachment>> {
        let McastAttachment { owned, gid, lid } = self;
        owned.destroy().map_err(|refused| {
            let (owned, source) = *refused;
            DestroyError::new(
                McastAttachment { owned, gid, lid },
                Error::Device {
                    verb: "detach_mcast",
                    source,
                },
            )
        })
    }
}

impl Qp {
    /// `ibv_attach_mcast`: ATTACH_TO_MCG for this UD QP and `gid`.
    pub fn attach_mcast(&self, gid: &Gid, lid: u16) -> Result<McastAttachment> {
        const VERB: &str = "attach_mcast";
        if self.qp_type() != QpType::Ud {
            return Err(Error::argument(VERB, "only UD QPs join multicast groups"));
        }
        if !gid.is_multicast() {
            return Err(Error::argument(
                VERB,
                format!("{gid} is not a multicast GID (ff00::/8)"),
            ));
        }
        let mut inbox = AttachToMcgIn::new();
        inbox.set_opcode(Opcode::AttachToMcg.raw());
        inbox.set_qpn(self.qpn());
        inbox.set_multicast_gid(&gid.0);
        let obj = self
            .context()
            .devx()
            .create(inbox.as_bytes(), AttachToMcgOut::SIZE_BYTES)
            .verb(VERB)?;
        Ok(McastAttachment {
            owned: Owned::new(obj, self.shared().clone()),
            gid: *gid,
            lid,
        })
    }
}
