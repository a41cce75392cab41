//! The running ioctl as the method handlers see it: decoded attributes,
//! their inputs, and the caller's buffer that answers are written back to.

use super::spec::{AttrSpec, Kind};
use crate::kernel::abi::{self, IoctlAttr, ATTR_LEN, HDR_LEN, UVERBS_ATTR_F_VALID_OUTPUT};
use crate::kernel::sys::Errno;

/// An attribute as decoded from the caller's buffer.
pub(super) struct Decoded<'s> {
    pub(super) index: usize,
    pub(super) spec: &'s AttrSpec,
    pub(super) attr: IoctlAttr,
}

/// The running ioctl: attributes and where to write answers.
pub(super) struct Ctx<'a> {
    pub(super) attrs: Vec<IoctlAttr>,
    pub(super) decoded: Vec<Decoded<'static>>,
    pub(super) inputs: Vec<(u16, Vec<u8>)>,
    pub(super) buf: &'a mut [u8],
}

impl Ctx<'_> {
    pub(super) fn find(&self, id: u16) -> Option<&Decoded<'static>> {
        self.decoded.iter().find(|d| d.attr.attr_id == id)
    }

    pub(super) fn input(&self, id: u16) -> Option<&[u8]> {
        self.inputs
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.as_slice())
    }

    pub(super) fn input_u64(&self, id: u16) -> Option<u64> {
        self.input(id).map(|b| abi::ne64(b, 0))
    }

    pub(super) fn input_u32(&self, id: u16) -> Option<u32> {
        self.input(id).map(|b| abi::ne32(b, 0))
    }

    pub(super) fn obj_data(&self, id: u16) -> Option<u64> {
        self.find(id).map(|d| d.attr.data)
    }

    pub(super) fn out_len(&self, id: u16) -> usize {
        self.find(id).map_or(0, |d| d.attr.len as usize)
    }

    pub(super) fn set_data(&mut self, id: u16, value: u64) {
        if let Some(i) = self.find(id).map(|d| d.index) {
            self.attrs[i].data = value;
        }
    }

    /// Copies `bytes` to a PTR_OUT (at most its length) and marks it valid.
    pub(super) fn write_out(&mut self, id: u16, bytes: &[u8]) -> Result<(), Errno> {
        let Some(d) = self.find(id) else {
            return Ok(());
        };
        let (index, ptr, len) = (d.index, d.attr.data, d.attr.len as usize);
        let n = len.min(bytes.len());
        if n > 0 {
            if ptr == 0 {
                return Err(Errno::EFAULT);
            }
            // SAFETY: the Sys::ioctl contract makes every PTR_OUT valid for
            // writes of its `len` bytes during the call; `n <= len`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr as *mut u8, n) };
        }
        self.attrs[index].flags |= UVERBS_ATTR_F_VALID_OUTPUT;
        Ok(())
    }

    pub(super) fn garble_outputs(&mut self) {
        let outs: Vec<u16> = self
            .decoded
            .iter()
            .filter(|d| matches!(d.spec.kind, Kind::PtrOut(..)))
            .map(|d| d.attr.attr_id)
            .collect();
        for id in outs {
            let len = self.out_len(id);
            let _ = self.write_out(id, &vec![0xff; len]);
        }
    }

    /// Writes the (possibly updated) attributes back into the caller's buffer.
    pub(super) fn flush(&mut self) {
        for (i, a) in self.attrs.iter().enumerate() {
            let at = HDR_LEN + i * ATTR_LEN;
            if let Some(dst) = self.buf.get_mut(at..at + ATTR_LEN) {
                dst.copy_from_slice(&a.to_bytes());
            }
        }
    }
}
