//! The edits the kernel makes to its private copy of an inbox before the
//! firmware sees it (LNX-devx `devx_set_umem_valid`, `devx_handle_mkey_create`,
//! the uid stamp).

use crate::sim::fw::mkey;
use prm_layouts::{
    CreateCqIn, CreateMkeyIn, CreateQpIn, CreateRmpIn, CreateRqIn, CreateSqIn, CreateXrcSrqIn,
    ModifyCqIn, Opcode,
};

/// Overwrites the uid: whatever the caller put there is ignored.
/// An inbox too short for the header is left alone (admission refuses it).
pub(crate) fn stamp_uid(inbox: &mut [u8], uid: u16) {
    let _ = prm_layouts::commands::header::UID.set(inbox, uid.into());
}

/// Forces the `*_umem_valid` bits so users cannot hand the device physical
/// addresses: the buffer and doorbell fields then mean UMEM id + offset.
/// Inboxes too short for the layout are left alone (firmware refuses them).
pub(crate) fn force_umem_valid(inbox: &mut [u8]) {
    let Some(opcode) = Opcode::from_raw(crate::admission::opcode_of(inbox)) else {
        return;
    };
    match opcode {
        Opcode::CreateCq => {
            if let Some(m) = CreateCqIn::from_slice_mut(inbox) {
                m.set_cq_umem_valid(1);
                m.cq_context_mut().set_dbr_umem_valid(1);
            }
        }
        Opcode::ModifyCq => {
            if let Some(m) = ModifyCqIn::from_slice_mut(inbox) {
                m.set_cq_umem_valid(1);
            }
        }
        Opcode::CreateQp => {
            if let Some(m) = CreateQpIn::from_slice_mut(inbox) {
                m.set_wq_umem_valid(1);
                m.qpc_mut().set_dbr_umem_valid(1);
            }
        }
        Opcode::CreateSq => {
            if let Some(m) = CreateSqIn::from_slice_mut(inbox) {
                let wq = m.ctx_mut().wq_mut();
                wq.set_wq_umem_valid(1);
                wq.set_dbr_umem_valid(1);
            }
        }
        Opcode::CreateRq => {
            if let Some(m) = CreateRqIn::from_slice_mut(inbox) {
                let wq = m.ctx_mut().wq_mut();
                wq.set_wq_umem_valid(1);
                wq.set_dbr_umem_valid(1);
            }
        }
        Opcode::CreateRmp => {
            if let Some(m) = CreateRmpIn::from_slice_mut(inbox) {
                let wq = m.ctx_mut().wq_mut();
                wq.set_wq_umem_valid(1);
                wq.set_dbr_umem_valid(1);
            }
        }
        Opcode::CreateXrcSrq => {
            if let Some(m) = CreateXrcSrqIn::from_slice_mut(inbox) {
                m.set_xrc_srq_umem_valid(1);
                m.xrc_srq_context_entry_mut().set_dbr_umem_valid(1);
            }
        }
        Opcode::CreateMkey => {
            if let Some(m) = CreateMkeyIn::from_slice_mut(inbox) {
                let c = m.memory_key_mkey_entry();
                let mode = (c.access_mode_4_2() << 2) | c.access_mode_1_0();
                // KLM and KSM keys list other keys, not memory.
                if mode != mkey::mode::KLMS && mode != mkey::mode::KSM {
                    m.set_mkey_umem_valid(1);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_cq_gets_both_valid_bits_and_the_uid() {
        let mut m = CreateCqIn::new();
        m.set_opcode(Opcode::CreateCq.raw());
        m.set_uid(0xbeef);
        let b = m.as_mut_bytes();
        stamp_uid(b, 7);
        force_umem_valid(b);
        assert_eq!(m.cq_umem_valid(), 1);
        assert_eq!(m.cq_context().dbr_umem_valid(), 1);
        assert_eq!(m.uid(), 7);
    }

    #[test]
    fn klm_mkeys_keep_umem_valid_clear() {
        let mut m = CreateMkeyIn::new();
        m.set_opcode(Opcode::CreateMkey.raw());
        m.memory_key_mkey_entry_mut()
            .set_access_mode_1_0(mkey::mode::KLMS);
        force_umem_valid(m.as_mut_bytes());
        assert_eq!(m.mkey_umem_valid(), 0);
    }
}
