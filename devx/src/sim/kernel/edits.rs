//! The edits the kernel makes to its private copy of an inbox before the
//! firmware sees it (LNX-devx `devx_set_umem_valid`, `devx_handle_mkey_create`,
//! the uid stamp).

use prm_layouts::{
    CreateCqIn, CreateMkeyIn, CreateQpIn, CreateRmpIn, CreateRqIn, CreateSqIn, CreateXrcSrqIn,
    ModifyCqIn,
};

/// Overwrites the uid (bytes 2..4): whatever the caller put there is ignored.
pub fn stamp_uid(inbox: &mut [u8], uid: u16) {
    if let Some(b) = inbox.get_mut(2..4) {
        b.copy_from_slice(&uid.to_be_bytes());
    }
}

/// Forces the `*_umem_valid` bits so users cannot hand the device physical
/// addresses: the buffer and doorbell fields then mean UMEM id + offset.
/// Inboxes too short for the layout are left alone (firmware refuses them).
pub fn force_umem_valid(inbox: &mut [u8]) {
    let opcode = crate::admission::opcode_of(inbox);
    match opcode {
        0x400 => {
            if let Some(m) = CreateCqIn::from_slice_mut(inbox) {
                m.set_cq_umem_valid(1);
                m.cq_context_mut().set_dbr_umem_valid(1);
            }
        }
        0x403 => {
            if let Some(m) = ModifyCqIn::from_slice_mut(inbox) {
                m.set_cq_umem_valid(1);
            }
        }
        0x500 => {
            if let Some(m) = CreateQpIn::from_slice_mut(inbox) {
                m.set_wq_umem_valid(1);
                m.qpc_mut().set_dbr_umem_valid(1);
            }
        }
        0x904 => {
            if let Some(m) = CreateSqIn::from_slice_mut(inbox) {
                let wq = m.ctx_mut().wq_mut();
                wq.set_wq_umem_valid(1);
                wq.set_dbr_umem_valid(1);
            }
        }
        0x908 => {
            if let Some(m) = CreateRqIn::from_slice_mut(inbox) {
                let wq = m.ctx_mut().wq_mut();
                wq.set_wq_umem_valid(1);
                wq.set_dbr_umem_valid(1);
            }
        }
        0x90c => {
            if let Some(m) = CreateRmpIn::from_slice_mut(inbox) {
                let wq = m.ctx_mut().wq_mut();
                wq.set_wq_umem_valid(1);
                wq.set_dbr_umem_valid(1);
            }
        }
        0x705 => {
            if let Some(m) = CreateXrcSrqIn::from_slice_mut(inbox) {
                m.set_xrc_srq_umem_valid(1);
                m.xrc_srq_context_entry_mut().set_dbr_umem_valid(1);
            }
        }
        0x200 => {
            if let Some(m) = CreateMkeyIn::from_slice_mut(inbox) {
                let c = m.memory_key_mkey_entry();
                let mode = (c.access_mode_4_2() << 2) | c.access_mode_1_0();
                // KLM (2) and KSM (3) keys list other keys, not memory.
                if mode != 2 && mode != 3 {
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
        let mut b = vec![0u8; CreateCqIn::SIZE_BYTES];
        b[0..2].copy_from_slice(&0x400u16.to_be_bytes());
        b[2..4].copy_from_slice(&0xbeefu16.to_be_bytes());
        stamp_uid(&mut b, 7);
        force_umem_valid(&mut b);
        let m = CreateCqIn::from_slice(&b).unwrap();
        assert_eq!(m.cq_umem_valid(), 1);
        assert_eq!(m.cq_context().dbr_umem_valid(), 1);
        assert_eq!(&b[2..4], &[0, 7]);
    }

    #[test]
    fn klm_mkeys_keep_umem_valid_clear() {
        let mut b = vec![0u8; CreateMkeyIn::SIZE_BYTES];
        b[0..2].copy_from_slice(&0x200u16.to_be_bytes());
        CreateMkeyIn::from_slice_mut(&mut b)
            .unwrap()
            .memory_key_mkey_entry_mut()
            .set_access_mode_1_0(2);
        force_umem_valid(&mut b);
        assert_eq!(CreateMkeyIn::from_slice(&b).unwrap().mkey_umem_valid(), 0);
    }
}
