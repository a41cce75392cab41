//! Multicast group attachment: ATTACH_TO_MCG / DETACH_FROM_MCG. Each
//! (GID, QP) attachment is an object; it holds its QP.

use prm_layouts::{AttachToMcgIn, DetachFromMcgIn};

use crate::sim::fw::cmd::{ensure, Cmd, FwResult};
use crate::sim::fw::kind::ObjKind;
use crate::sim::fw::qp::st;
use crate::sim::fw::state::{Holder, State};
use crate::sim::fw::table::ObjRef;
use crate::sim::syndrome;

#[derive(Debug, Clone)]
pub(crate) struct McgAttach {
    /// The attached QP (the group's GID keys `State::mcg_index`).
    pub(crate) qpn: u32,
}

impl Holder for McgAttach {
    fn holds(&self) -> Vec<ObjRef> {
        vec![ObjRef::new(ObjKind::Qp, self.qpn)]
    }
}

/// IPv6 multicast (ff00::/8) or IPv4-mapped multicast (::ffff:224.0.0.0/4).
pub(crate) fn is_multicast(gid: &[u8; 16]) -> bool {
    let v4_mapped = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    gid[0] == 0xff || (v4_mapped && (gid[12] & 0xf0) == 0xe0)
}

pub(crate) fn attach(stt: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<AttachToMcgIn>()?;
    let (qpn, gid) = (inp.qpn(), *inp.multicast_gid());
    let qp = &stt.qp.owned(qpn, cmd.uid)?.obj;
    ensure(
        matches!(qp.service_type(), st::UD | st::RAW),
        syndrome::MCG_QP_TYPE,
    )?;
    ensure(is_multicast(&gid), syndrome::MCG_BAD_GID)?;
    ensure(
        !stt.mcg_index.contains_key(&(gid, qpn)),
        syndrome::MCG_ALREADY,
    )?;
    let members = stt.mcg_members.get(&gid).copied().unwrap_or(0);
    ensure(members < stt.profile.max_qp_mcg, syndrome::MCG_FULL)?;
    let groups_full = members == 0
        && stt.mcg_members.len() >= crate::sim::profile::Profile::count(stt.profile.log_max_mcg);
    ensure(!groups_full, syndrome::table_full(ObjKind::McgAttach))?;
    let n = stt.mcg.insert(cmd.uid, McgAttach { qpn })?;
    stt.hold(ObjRef::new(ObjKind::Qp, qpn));
    stt.mcg_index.insert((gid, qpn), n);
    *stt.mcg_members.entry(gid).or_insert(0) += 1;
    Ok(())
}

pub(crate) fn detach(stt: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<DetachFromMcgIn>()?;
    let (qpn, gid) = (inp.qpn(), *inp.multicast_gid());
    stt.qp.owned(qpn, cmd.uid)?;
    let n = stt
        .mcg_index
        .get(&(gid, qpn))
        .copied()
        .ok_or(syndrome::MCG_NOT_ATTACHED)?;
    let a = stt.mcg.remove(n, cmd.uid)?;
    stt.release_all(&a.holds());
    stt.mcg_index.remove(&(gid, qpn));
    drop_member(stt, &gid);
    Ok(())
}

fn drop_member(stt: &mut State, gid: &[u8; 16]) {
    if let Some(c) = stt.mcg_members.get_mut(gid) {
        *c -= 1;
        if *c == 0 {
            stt.mcg_members.remove(gid);
        }
    }
}

/// Rebuilds the attachment indexes after a uid's attachments were purged.
pub(crate) fn forget_uid(stt: &mut State) {
    let gone: Vec<([u8; 16], u32)> = stt
        .mcg_index
        .iter()
        .filter(|(_, n)| !stt.mcg.contains(**n))
        .map(|(k, _)| *k)
        .collect();
    for (gid, qpn) in gone {
        stt.mcg_index.remove(&(gid, qpn));
        drop_member(stt, &gid);
    }
}
