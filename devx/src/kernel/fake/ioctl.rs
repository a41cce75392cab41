//! The uverbs ioctl entry: header and attribute decoding, then the kernel's
//! framing checks (kinds, sizes, flags, reserved fields, mandatory
//! attributes, handle and fd types) before the method runs.

use std::os::fd::RawFd;

use super::ctx::{Ctx, Decoded};
use super::spec::{method_spec, FdType, Kind};
use super::state::{FdState, State};
use super::{Call, FakeKernel, Tamper};
use crate::kernel::abi::{
    self, obj, verbs, IoctlAttr, IoctlHdr, ATTR_LEN, HDR_LEN, RDMA_DRIVER_MLX5, RDMA_VERBS_IOCTL,
    UVERBS_ATTR_F_MANDATORY, UVERBS_ATTR_F_VALID_OUTPUT,
};
use crate::kernel::sys::{Errno, SysResult};

impl FakeKernel {
    /// Decodes and runs one uverbs ioctl.
    ///
    /// # Safety
    /// As [`Sys::ioctl`](crate::kernel::Sys::ioctl).
    pub(super) unsafe fn uverbs_ioctl(
        &self,
        fd: RawFd,
        request: u64,
        arg: *mut u8,
    ) -> SysResult<i32> {
        let mut s = self.lock();
        let file = match s.fds.get(&fd) {
            Some(FdState::Uverbs { file }) => *file,
            Some(_) => return Err(Errno::ENOTTY),
            None => return Err(Errno::EBADF),
        };
        if request != RDMA_VERBS_IOCTL {
            return Err(Errno::ENOTTY);
        }
        if arg.is_null() {
            return Err(Errno::EFAULT);
        }
        // SAFETY: the contract makes `arg` valid for at least the 24-byte header.
        let head: [u8; HDR_LEN] = unsafe { std::ptr::read_unaligned(arg.cast()) };
        let hdr = IoctlHdr::from_bytes(&head);
        let length = hdr.length as usize;
        let mut call = Call {
            fd,
            request,
            raw: head.to_vec(),
            hdr,
            attrs: Vec::new(),
            inputs: Vec::new(),
            errno: None,
        };
        if length != HDR_LEN + ATTR_LEN * hdr.num_attrs as usize || length > 4096 {
            call.errno = Some(libc::EINVAL);
            s.calls.push(call);
            return Err(Errno::EINVAL);
        }
        // SAFETY: the contract makes `arg` valid and writable for `hdr.length`
        // bytes, which was just checked to be the header plus its attributes.
        let buf = unsafe { std::slice::from_raw_parts_mut(arg, length) };
        call.raw = buf.to_vec();
        let attrs: Vec<IoctlAttr> = buf[HDR_LEN..]
            .chunks_exact(ATTR_LEN)
            .map(|c| IoctlAttr::from_bytes(c.try_into().unwrap_or(&[0; ATTR_LEN])))
            .collect();
        call.attrs = attrs.clone();
        let mut ctx = Ctx {
            attrs,
            decoded: Vec::new(),
            inputs: Vec::new(),
            buf,
        };
        // SAFETY: pointer attributes are valid per the contract.
        let r = unsafe { self.run(&mut s, file, &hdr, &mut ctx) };
        ctx.flush();
        call.inputs = std::mem::take(&mut ctx.inputs);
        call.errno = r.as_ref().err().map(|e| *e as i32);
        s.calls.push(call);
        drop(s);
        self.wake.notify_all();
        r
    }

    /// Framing checks, then the method.
    ///
    /// # Safety
    /// Pointer attributes in `ctx` are valid per [`Sys::ioctl`](crate::kernel::Sys::ioctl).
    unsafe fn run(
        &self,
        s: &mut State,
        file: u32,
        hdr: &IoctlHdr,
        ctx: &mut Ctx<'_>,
    ) -> SysResult<i32> {
        if hdr.reserved1 != 0 || hdr.reserved2 != 0 {
            return Err(Errno::EPROTONOSUPPORT);
        }
        if hdr.driver_id != RDMA_DRIVER_MLX5 {
            return Err(Errno::EINVAL);
        }
        let devx_object = (obj::DEVX..=obj::DEVX_ASYNC_EVENT_FD).contains(&hdr.object_id);
        let Some(spec) = method_spec(hdr.object_id, hdr.method_id) else {
            return Err(Errno::EPROTONOSUPPORT);
        };
        if devx_object && !s.cfg.devx {
            return Err(Errno::EPROTONOSUPPORT);
        }
        if hdr.object_id == verbs::UVERBS_OBJECT_DEVICE && !s.cfg.ioctl_get_context {
            return Err(Errno::EPROTONOSUPPORT);
        }
        // Attributes: kinds, sizes, reserved fields, duplicates.
        for i in 0..ctx.attrs.len() {
            let a = ctx.attrs[i];
            if ctx.attrs[..i].iter().any(|b| b.attr_id == a.attr_id) {
                return Err(Errno::EINVAL);
            }
            let Some(sp) = spec.iter().find(|sp| sp.id == a.attr_id) else {
                if a.flags & UVERBS_ATTR_F_MANDATORY != 0 {
                    return Err(Errno::EPROTONOSUPPORT);
                }
                s.violations
                    .push(format!("attr {:#x} unknown to the method", a.attr_id));
                continue;
            };
            let want = if sp.rdma_core_mandatory {
                UVERBS_ATTR_F_MANDATORY
            } else {
                0
            };
            if a.flags != want {
                s.violations.push(format!(
                    "{} attr {:#x}: flags {:#x}, rdma-core sends {want:#x}",
                    abi::method_name(hdr.object_id, hdr.method_id),
                    a.attr_id,
                    a.flags
                ));
            }
            if a.flags & !(UVERBS_ATTR_F_MANDATORY | UVERBS_ATTR_F_VALID_OUTPUT) != 0 {
                return Err(Errno::EINVAL);
            }
            if a.attr_data != 0 {
                return Err(Errno::EINVAL);
            }
            let len = a.len;
            match sp.kind {
                Kind::IdrNew | Kind::FdNew => {
                    if len != 0 {
                        return Err(Errno::EINVAL);
                    }
                    if a.data != 0 {
                        s.violations.push(format!(
                            "attr {:#x}: NEW object with data {:#x}",
                            a.attr_id, a.data
                        ));
                    }
                }
                Kind::IdrRead(_) | Kind::IdrDestroy(_) | Kind::FdRead(_) | Kind::RawFd => {
                    if len != 0 {
                        return Err(Errno::EINVAL);
                    }
                }
                Kind::PtrIn(min, max) => {
                    if len < min || len > max {
                        return Err(Errno::EINVAL);
                    }
                    let bytes = if len as usize <= 8 {
                        a.data.to_ne_bytes()[..len as usize].to_vec()
                    } else {
                        if a.data == 0 {
                            return Err(Errno::EFAULT);
                        }
                        // SAFETY: the contract makes a pointer PTR_IN valid
                        // for reads of its `len` bytes.
                        unsafe { std::slice::from_raw_parts(a.data as *const u8, len as usize) }
                            .to_vec()
                    };
                    ctx.inputs.push((a.attr_id, bytes));
                }
                Kind::ConstIn => {
                    if len != 8 {
                        return Err(Errno::EINVAL);
                    }
                    ctx.inputs.push((a.attr_id, a.data.to_ne_bytes().to_vec()));
                }
                Kind::FlagsIn(allowed) => {
                    let v = match len {
                        4 => u64::from(abi::ne32(&a.data.to_ne_bytes(), 0)),
                        8 => a.data,
                        _ => return Err(Errno::EINVAL),
                    };
                    if v & !allowed != 0 {
                        return Err(Errno::EINVAL);
                    }
                    ctx.inputs.push((a.attr_id, v.to_ne_bytes().to_vec()));
                }
                Kind::PtrOut(min, max) => {
                    if len < min || len > max {
                        return Err(Errno::EINVAL);
                    }
                }
            }
            ctx.decoded.push(Decoded {
                index: i,
                spec: sp,
                attr: a,
            });
        }
        for sp in spec.iter().filter(|sp| sp.mandatory) {
            if ctx.find(sp.id).is_none() {
                return Err(Errno::EINVAL);
            }
        }
        // Objects and fds named by the call must exist and be of the right type.
        for d in &ctx.decoded {
            let f = s.files.get(&file);
            match d.spec.kind {
                Kind::IdrRead(_) | Kind::IdrDestroy(_) => {
                    let want = match d.spec.kind {
                        Kind::IdrRead(t) => t,
                        Kind::IdrDestroy(t) => Some(t),
                        _ => None,
                    };
                    let found = u32::try_from(d.attr.data)
                        .ok()
                        .and_then(|h| f.and_then(|f| f.objects.get(&h)));
                    let Some(o) = found else {
                        return Err(Errno::ENOENT);
                    };
                    if want.is_some_and(|t| t != o.ty()) {
                        return Err(Errno::EINVAL);
                    }
                }
                Kind::FdRead(want) => {
                    let ok = i32::try_from(d.attr.data)
                        .ok()
                        .and_then(|fd| s.fds.get(&fd))
                        .is_some_and(|st| match (st, want) {
                            (FdState::AsyncCmd { file: f2, .. }, FdType::AsyncCmd) => *f2 == file,
                            (FdState::AsyncEvent { file: f2, .. }, FdType::AsyncEvent) => {
                                *f2 == file
                            }
                            _ => false,
                        });
                    if !ok {
                        return Err(Errno::EBADF);
                    }
                }
                _ => {}
            }
        }
        let tamper = Self::take_tamper(s, hdr.object_id, hdr.method_id);
        match tamper {
            Some(Tamper::Errno(e)) => return Err(Errno::from_raw(e)),
            Some(Tamper::SucceedSilently) => return Ok(0),
            _ => {}
        }
        // Everything but GET_CONTEXT needs the ucontext.
        let has_ctx = s.files.get(&file).is_some_and(|f| f.ctx.is_some());
        if hdr.object_id != verbs::UVERBS_OBJECT_DEVICE && !has_ctx {
            return Err(Errno::EINVAL);
        }
        let r = self.method(s, file, hdr, ctx, tamper);
        match (tamper, r) {
            (Some(Tamper::Handle(v)), Ok(n)) => {
                let ids: Vec<u16> = ctx
                    .decoded
                    .iter()
                    .filter(|d| matches!(d.spec.kind, Kind::IdrNew | Kind::FdNew))
                    .map(|d| d.attr.attr_id)
                    .collect();
                for id in ids {
                    ctx.set_data(id, v);
                }
                Ok(n)
            }
            (Some(Tamper::GarbageOutputs), Ok(n)) => {
                ctx.garble_outputs();
                Ok(n)
            }
            (Some(Tamper::ReturnValue(v)), Ok(_)) => Ok(v),
            (_, r) => r,
        }
    }
}
