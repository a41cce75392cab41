//! The emulated firmware: a command processor over per-device state.
//!
//! Every mailbox goes through the same gate before its handler runs: header
//! length, opcode known, inbox at least as long as the command's `*_in`
//! layout, outbox at least as long as the `*_out` header and top-level
//! fields (the rest is cut to fit), op_mod allowed, reserved header bits zero, uid alive. Then
//! the handler validates the command's own fields and references. A failure
//! is written to the outbox as status + syndrome, exactly as firmware
//! answers; nothing here panics on any input bytes.

pub(crate) mod cmd;
pub(crate) mod cq;
pub(crate) mod dispatch;
pub(crate) mod eq;
pub(crate) mod events;
pub(crate) mod ext;
pub(crate) mod general;
pub(crate) mod kind;
pub(crate) mod mkey;
pub(crate) mod pd;
pub(crate) mod qp;
pub(crate) mod qp_state;
pub(crate) mod state;
pub(crate) mod table;
pub(crate) mod uar;
pub(crate) mod umem;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use cmd::{fail, Cmd, FwError, FwResult};
use state::State;

use super::identity::Identity;
use super::profile::Profile;
use super::syndrome;

/// One device's firmware. All state sits behind one lock: commands from
/// many threads serialize as they do on the device's command queue.
pub(crate) struct Firmware {
    state: Mutex<State>,
    commands: AtomicU64,
}

impl Firmware {
    pub(crate) fn new(profile: Profile, ident: Identity) -> Firmware {
        let mut st = State::new(profile, ident);
        // The EQ table is sized from the profile, so this cannot fail for a
        // sane profile; a nonsense one just gets fewer vectors.
        let _ = eq::create_completion_eqs(&mut st);
        Firmware {
            state: Mutex::new(st),
            commands: AtomicU64::new(0),
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A handler never panics by design; if one did, the state it left is
        // still the best there is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state for a command or other control-path change: bumps the
    /// epoch, so the data path drops what it cached from the tables.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.lock_state();
        st.epoch = st.epoch.wrapping_add(1);
        st
    }

    /// Runs one command. The outbox is zeroed, then filled by the handler or
    /// with status and syndrome (as far as it reaches) on failure.
    pub(crate) fn execute(&self, inbox: &[u8], outbox: &mut [u8]) -> FwResult {
        self.commands.fetch_add(1, Ordering::Relaxed);
        outbox.fill(0);
        let r = self.run(inbox, outbox);
        if let Err(e) = r {
            write_status(outbox, e);
        }
        r
    }

    fn run(&self, inbox: &[u8], outbox: &mut [u8]) -> FwResult {
        let Some(hdr) = prm_layouts::GeneralObjInCmdHdr::from_slice(inbox) else {
            return fail(syndrome::INBOX_SHORT);
        };
        if outbox.len() < prm_layouts::MboxOut::SIZE_BYTES {
            return fail(syndrome::OUTBOX_SHORT);
        }
        // Every inbox starts like the general object header; bytes 4..6
        // (`vhca_tunnel_id` there) are reserved in the others.
        let (opcode, uid, op_mod) = (hdr.opcode(), hdr.uid(), hdr.obj_type());
        let Some(def) = dispatch::lookup(opcode) else {
            return fail(syndrome::UNKNOWN_OPCODE);
        };
        if inbox.len() < def.in_len {
            return fail(syndrome::INBOX_SHORT);
        }
        if outbox.len() < def.min_out_len {
            return fail(syndrome::OUTBOX_SHORT);
        }
        if !def.op_mods.allows(op_mod) {
            return fail(syndrome::BAD_OP_MOD);
        }
        if !def.general_header && hdr.vhca_tunnel_id() != 0 {
            return fail(syndrome::HEADER_RESERVED);
        }
        let mut st = self.lock();
        if uid != 0 && !st.uctx.contains(u32::from(uid)) {
            return fail(syndrome::BAD_UID);
        }
        let cmd = Cmd {
            inbox,
            opcode,
            op_mod,
            uid,
        };
        if outbox.len() >= def.out_len {
            return (def.handler)(&mut st, &cmd, outbox);
        }
        // A shorter outbox gets the answer's first bytes, as firmware
        // writes only as far as the caller's output length reaches.
        let mut full = vec![0u8; def.out_len];
        (def.handler)(&mut st, &cmd, &mut full)?;
        let n = outbox.len();
        outbox.copy_from_slice(&full[..n]);
        Ok(())
    }

    /// CREATE_UCTX: a new DEVX uid.
    pub(crate) fn create_uctx(&self) -> FwResult<u16> {
        let n = self.lock().uctx.insert(0, ())?;
        // Numbers come from 1..=0xfffe, so they fit.
        Ok(n as u16)
    }

    /// DESTROY_UCTX: refused while the uid still owns objects.
    pub(crate) fn destroy_uctx(&self, uid: u16) -> FwResult {
        let mut st = self.lock();
        if st.uid_objects(uid) > 0 {
            return fail(syndrome::UCTX_HAS_OBJECTS);
        }
        st.uctx.remove(u32::from(uid), 0).map(|_| ())
    }

    /// Removes whatever `uid` still owns; returns how many objects went.
    pub(crate) fn purge_uid(&self, uid: u16) -> usize {
        self.lock().purge_uid(uid)
    }

    /// CREATE_UMEM for a range the kernel layer has checked.
    pub(crate) fn create_umem(&self, uid: u16, region: umem::UmemObj) -> FwResult<u32> {
        let mut st = self.lock();
        if !st.uctx.contains(u32::from(uid)) {
            return fail(syndrome::BAD_UID);
        }
        umem::create(&mut st, uid, region)
    }

    /// Reads the state (introspection, data path).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock_state())
    }

    /// Changes the state outside a command (data path events: counters,
    /// CQ producer index, QP error state; never objects or their rings,
    /// keys and memory, so the epoch stays).
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.lock_state())
    }

    /// [`Firmware::with_mut`] if the state is free now; `None` (and `f` not
    /// run) if another thread holds it. For a thread that holds another
    /// device's state: it may try, never wait, so no two threads can wait
    /// for each other.
    pub(crate) fn try_with_mut<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        let mut st = match self.state.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(f(&mut st))
    }

    /// Commands executed since the device started.
    pub(crate) fn commands_executed(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }
}

/// Writes status (byte 0) and syndrome (bytes 4..8) as far as the outbox reaches.
pub(crate) fn write_status(outbox: &mut [u8], e: FwError) {
    if let Some(b) = outbox.first_mut() {
        *b = e.status;
    }
    for (i, b) in e.syndrome.to_be_bytes().iter().enumerate() {
        if let Some(o) = outbox.get_mut(4 + i) {
            *o = *b;
        }
    }
}
