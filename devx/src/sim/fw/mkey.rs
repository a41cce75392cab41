//! Memory keys: CREATE / QUERY / DESTROY. UMEM-backed (MTT) keys map
//! `[start_addr, start_addr + len)` onto a UMEM at `mkey_umem_offset`;
//! indirect (KLM/KSM) keys list other keys. The access rights are kept for
//! the data path: key = `mkey_index << 8 | mkey_7_0`.

use prm_layouts::{CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, Mkc, QueryMkeyIn, QueryMkeyOut};

use super::cmd::{ensure, out_view, Cmd, FwResult};
use super::kind::ObjKind;
use super::state::{Holder, State};
use super::table::ObjRef;
use crate::sim::syndrome;

/// `mkc` access modes (`MLX5_MKC_ACCESS_MODE_*`).
#[allow(dead_code)] // The PRM's full list; not every value is read.
pub(crate) mod mode {
    pub(crate) const PA: u8 = 0x0;
    pub(crate) const MTT: u8 = 0x1;
    pub(crate) const KLMS: u8 = 0x2;
    pub(crate) const KSM: u8 = 0x3;
}

/// What a key lets the local and remote sides do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) local_read: bool,
    pub(crate) local_write: bool,
    pub(crate) remote_read: bool,
    pub(crate) remote_write: bool,
    pub(crate) atomic: bool,
}

/// One entry of an indirect key: `bytes` of `key` starting at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Klm {
    pub(crate) bytes: u32,
    pub(crate) key: u32,
    pub(crate) addr: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct MkeyObj {
    /// The context as created; QUERY_MKEY returns it.
    pub(crate) mkc: Mkc,
    pub(crate) key: u32,
    pub(crate) mode: u8,
    pub(crate) access: Access,
    pub(crate) pd: u32,
    pub(crate) start_addr: u64,
    pub(crate) len: u64,
    /// Backing UMEM and the offset of `start_addr` in it (MTT keys).
    pub(crate) umem: Option<(u32, u64)>,
    /// Entries of an indirect key.
    pub(crate) klms: Vec<Klm>,
    holds: Vec<ObjRef>,
}

impl Holder for MkeyObj {
    fn holds(&self) -> Vec<ObjRef> {
        self.holds.clone()
    }
}

fn access_mode(c: &Mkc) -> u8 {
    (c.access_mode_4_2() << 2) | c.access_mode_1_0()
}

fn parse_klms(st: &State, cmd: &Cmd, count: u32) -> FwResult<Vec<Klm>> {
    let tail = cmd.tail::<CreateMkeyIn>();
    let need = (count as usize)
        .checked_mul(prm_layouts::Klm::SIZE_BYTES)
        .ok_or(syndrome::MKEY_KLM)?;
    let bytes = tail.get(..need).ok_or(syndrome::INBOX_SHORT)?;
    let mut v = Vec::with_capacity(count as usize);
    for e in bytes.chunks_exact(prm_layouts::Klm::SIZE_BYTES) {
        let e = prm_layouts::Klm::from_slice(e).ok_or(syndrome::INBOX_SHORT)?;
        let klm = Klm {
            bytes: e.byte_count(),
            key: e.mkey(),
            addr: e.address(),
        };
        let target = st
            .mkey
            .usable(klm.key >> 8, cmd.uid)
            .map_err(|_| syndrome::MKEY_KLM)?;
        ensure(target.obj.key == klm.key, syndrome::MKEY_KLM)?;
        v.push(klm);
    }
    Ok(v)
}

pub(crate) fn create(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let inp = cmd.view::<CreateMkeyIn>()?;
    let c = inp.memory_key_mkey_entry();
    let mode = access_mode(c);
    let access = Access {
        local_read: c.lr() == 1,
        local_write: c.lw() == 1,
        remote_read: c.rr() == 1,
        remote_write: c.rw() == 1,
        atomic: c.a() == 1,
    };
    ensure(
        !(access.remote_write || access.atomic) || access.local_write,
        syndrome::MKEY_ACCESS_RIGHTS,
    )?;
    st.pd.usable(c.pd(), cmd.uid)?;
    if c.qpn() != 0x00ff_ffff {
        st.qp.usable(c.qpn(), cmd.uid)?;
    }
    let mut holds = vec![ObjRef::new(ObjKind::Pd, c.pd())];
    let (umem, klms) = match mode {
        mode::MTT => {
            ensure(inp.mkey_umem_valid() == 1, syndrome::NO_UMEM)?;
            ensure(c.length64() == 0, syndrome::MKEY_LENGTH64)?;
            let id = inp.mkey_umem_id();
            let offset = inp.mkey_umem_offset();
            let u = st.umem.usable(id, cmd.uid)?.obj;
            ensure(u.covers(offset, c.len()), syndrome::MKEY_OUT_OF_UMEM)?;
            let writes = access.local_write || access.remote_write || access.atomic;
            ensure(!writes || u.writable(), syndrome::UMEM_READ_ONLY)?;
            holds.push(ObjRef::new(ObjKind::Umem, id));
            (Some((id, offset)), Vec::new())
        }
        mode::KLMS | mode::KSM => {
            let n = inp.translations_octword_actual_size();
            (None, parse_klms(st, cmd, n)?)
        }
        _ => return Err(syndrome::MKEY_ACCESS_MODE.into()),
    };
    let obj = MkeyObj {
        mkc: *c,
        key: 0,
        mode,
        access,
        pd: c.pd(),
        start_addr: c.start_addr(),
        len: c.len(),
        umem,
        klms,
        holds: holds.clone(),
    };
    let index = st.mkey.insert(cmd.uid, obj)?;
    let key = (index << 8) | u32::from(c.mkey_7_0());
    if let Some(e) = st.mkey.peek_mut(index) {
        e.obj.key = key;
    }
    st.hold_all(&holds);
    out_view::<CreateMkeyOut>(out)?.set_mkey_index(index);
    Ok(())
}

pub(crate) fn query(st: &mut State, cmd: &Cmd, out: &mut [u8]) -> FwResult {
    let index = cmd.view::<QueryMkeyIn>()?.mkey_index();
    let mkc = st.mkey.owned(index, cmd.uid)?.obj.mkc;
    *out_view::<QueryMkeyOut>(out)?.memory_key_mkey_entry_mut() = mkc;
    Ok(())
}

pub(crate) fn destroy(st: &mut State, cmd: &Cmd, _out: &mut [u8]) -> FwResult {
    let index = cmd.view::<DestroyMkeyIn>()?.mkey_index();
    let obj = st.mkey.remove(index, cmd.uid)?;
    st.release_all(&obj.holds);
    Ok(())
}

/// The key `key` names, for the data path (variant byte included).
pub(crate) fn lookup(st: &State, key: u32) -> Option<&MkeyObj> {
    st.mkey
        .peek(key >> 8)
        .map(|e| &e.obj)
        .filter(|m| m.key == key)
}
