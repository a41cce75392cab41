//! The uverbs character device `/dev/infiniband/uverbsN` as Linux 6.1's
//! uverbs core and mlx5_ib answer it, served by the emulated device.
//!
//! [`Request`] is the kernel's framing (`ib_uverbs_ioctl_hdr` + attributes,
//! copied from and back to the caller's memory); [`UverbsFile::ioctl`]
//! dispatches on (object, method) to the handlers in `methods`.

use std::collections::HashMap;
use std::ffi::c_ulong;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use devx::kernel::abi::{
    self, IoctlAttr, IoctlHdr, ATTR_LEN, HDR_LEN, RDMA_DRIVER_MLX5, RDMA_VERBS_IOCTL,
    UVERBS_ATTR_F_MANDATORY, UVERBS_ATTR_F_VALID_OUTPUT,
};
use devx::UarPage;

use crate::methods::{self, Ucontext};
use crate::state::{self, Shown};
use crate::usermem;

/// Largest ioctl the kernel accepts (`hdr.length` ≤ PAGE_SIZE).
const MAX_IOCTL_LEN: usize = 4096;

/// errno, as the kernel returns it.
pub type Errno = i32;

/// One ioctl as read from the caller: header, attributes, and the address
/// they were read from (written back when outputs are set).
#[derive(Debug, Clone)]
pub struct Request {
    addr: u64,
    pub hdr: IoctlHdr,
    pub attrs: Vec<IoctlAttr>,
    changed: bool,
}

impl Request {
    /// Reads and frames the request at `addr` as the uverbs core does:
    /// length, reserved fields, driver id, then per-attribute rules.
    pub fn read(addr: u64) -> Result<Request, Errno> {
        let head = usermem::read(addr, HDR_LEN)?;
        let head: &[u8; HDR_LEN] = head.as_slice().try_into().map_err(|_| libc::EFAULT)?;
        let hdr = IoctlHdr::from_bytes(head);
        let length = usize::from(hdr.length);
        if length != HDR_LEN + ATTR_LEN * usize::from(hdr.num_attrs) || length > MAX_IOCTL_LEN {
            return Err(libc::EINVAL);
        }
        if hdr.reserved1 != 0 || hdr.reserved2 != 0 {
            return Err(libc::EPROTONOSUPPORT);
        }
        if hdr.driver_id != RDMA_DRIVER_MLX5 {
            return Err(libc::EINVAL);
        }
        let raw = usermem::read(addr + HDR_LEN as u64, length - HDR_LEN)?;
        let attrs: Vec<IoctlAttr> = raw
            .chunks_exact(ATTR_LEN)
            .filter_map(|c| c.try_into().ok().map(IoctlAttr::from_bytes))
            .collect();
        for (i, a) in attrs.iter().enumerate() {
            if attrs[..i].iter().any(|b| b.attr_id == a.attr_id) {
                return Err(libc::EINVAL);
            }
            if a.flags & !(UVERBS_ATTR_F_MANDATORY | UVERBS_ATTR_F_VALID_OUTPUT) != 0 {
                return Err(libc::EINVAL);
            }
            if a.attr_data != 0 {
                return Err(libc::EINVAL);
            }
        }
        Ok(Request {
            addr,
            hdr,
            attrs,
            changed: false,
        })
    }

    /// The method's readable name, for logs.
    pub fn name(&self) -> &'static str {
        abi::method_name(self.hdr.object_id, self.hdr.method_id)
    }

    /// Refuses attributes the method does not know that the caller marked
    /// mandatory (EPROTONOSUPPORT); unknown optional ones are ignored.
    pub fn known(&self, ids: &[u16]) -> Result<(), Errno> {
        match self
            .attrs
            .iter()
            .find(|a| a.flags & UVERBS_ATTR_F_MANDATORY != 0 && !ids.contains(&a.attr_id))
        {
            Some(a) => {
                state::log(|| format!("{}: unknown mandatory attr {:#x}", self.name(), a.attr_id));
                Err(libc::EPROTONOSUPPORT)
            }
            None => Ok(()),
        }
    }

    pub fn attr(&self, id: u16) -> Option<&IoctlAttr> {
        self.attrs.iter().find(|a| a.attr_id == id)
    }

    /// The attribute, which the kernel requires (EINVAL when missing).
    pub fn need(&self, id: u16) -> Result<&IoctlAttr, Errno> {
        self.attr(id).ok_or(libc::EINVAL)
    }

    /// A PTR_IN's bytes: inline up to 8 bytes, else read from the pointer.
    pub fn input(&self, id: u16) -> Result<Option<Vec<u8>>, Errno> {
        let Some(a) = self.attr(id) else {
            return Ok(None);
        };
        let len = usize::from(a.len);
        if len <= 8 {
            Ok(Some(a.data.to_ne_bytes()[..len].to_vec()))
        } else {
            usermem::read(a.data, len).map(Some)
        }
    }

    /// A CONST_IN / inline integer input (1 to 8 bytes, host-endian).
    pub fn const_in(&self, id: u16) -> Result<Option<u64>, Errno> {
        let Some(a) = self.attr(id) else {
            return Ok(None);
        };
        if a.len == 0 || a.len > 8 {
            return Err(libc::EINVAL);
        }
        let mut b = [0u8; 8];
        b[..usize::from(a.len)].copy_from_slice(&a.data.to_ne_bytes()[..usize::from(a.len)]);
        Ok(Some(u64::from_ne_bytes(b)))
    }

    /// A FLAGS_IN (4 or 8 bytes); `allowed` are the bits the method knows.
    pub fn flags_in(&self, id: u16, allowed: u64) -> Result<u64, Errno> {
        let Some(a) = self.attr(id) else {
            return Ok(0);
        };
        let v = match a.len {
            4 => u64::from(a.data as u32),
            8 => a.data,
            _ => return Err(libc::EINVAL),
        };
        if v & !allowed != 0 {
            return Err(libc::EINVAL);
        }
        Ok(v)
    }

    /// Byte length of a PTR_OUT, if the caller passed it.
    pub fn out_len(&self, id: u16) -> Option<usize> {
        self.attr(id).map(|a| usize::from(a.len))
    }

    /// Writes a PTR_OUT: `min(len, bytes)` bytes, then marks it valid.
    /// Absent outputs are skipped (the caller did not ask).
    pub fn output(&mut self, id: u16, bytes: &[u8]) -> Result<(), Errno> {
        let Some(a) = self.attrs.iter_mut().find(|a| a.attr_id == id) else {
            return Ok(());
        };
        let n = usize::from(a.len).min(bytes.len());
        usermem::write(a.data, &bytes[..n])?;
        a.flags |= UVERBS_ATTR_F_VALID_OUTPUT;
        self.changed = true;
        Ok(())
    }

    /// Sets the `data` of an IDR or FD NEW attribute (the new handle or fd).
    pub fn set_data(&mut self, id: u16, value: u64) {
        if let Some(a) = self.attrs.iter_mut().find(|a| a.attr_id == id) {
            a.data = value;
            self.changed = true;
        }
    }

    /// Copies changed attributes (flags, new handles) back to the caller.
    pub fn write_back(&self) -> Result<(), Errno> {
        if !self.changed {
            return Ok(());
        }
        let bytes: Vec<u8> = self.attrs.iter().flat_map(|a| a.to_bytes()).collect();
        usermem::write(self.addr + HDR_LEN as u64, &bytes)
    }
}

/// One open uverbs file.
pub struct UverbsFile {
    /// N of `uverbsN`.
    pub uverbs_index: u32,
    /// The eventfd the program holds for this file.
    pub fd: RawFd,
    ctx: Mutex<Option<Arc<Ucontext>>>,
}

impl UverbsFile {
    pub fn new(uverbs_index: u32, fd: RawFd) -> UverbsFile {
        UverbsFile {
            uverbs_index,
            fd,
            ctx: Mutex::new(None),
        }
    }

    /// The device this file was opened on.
    pub fn device(&self) -> Option<&'static Shown> {
        state::get().device(self.uverbs_index)
    }

    /// The ucontext, once GET_CONTEXT made it.
    pub fn ucontext(&self) -> Option<Arc<Ucontext>> {
        self.lock().clone()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Arc<Ucontext>>> {
        self.ctx.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `ioctl(fd, request, arg)` on this file: Ok(return value) or Err(errno).
    ///
    /// # Safety
    /// None beyond the C contract: `arg` is only accessed through checked
    /// copies ([`usermem`]).
    pub unsafe fn ioctl(&self, request: c_ulong, arg: *mut u8) -> Result<i32, Errno> {
        if c_ulong::try_from(RDMA_VERBS_IOCTL).ok() != Some(request) {
            state::log(|| format!("uverbs{}: unknown ioctl {request:#x}", self.uverbs_index));
            return Err(libc::ENOTTY);
        }
        self.ioctl_at(arg as usize as u64)
    }

    /// The uverbs ioctl whose header is at `addr`.
    pub fn ioctl_at(&self, addr: u64) -> Result<i32, Errno> {
        let mut req = Request::read(addr)?;
        let r = methods::dispatch(self, &mut req);
        // Outputs and new handles reach the caller even when the method
        // failed after writing them (EREMOTEIO with an outbox).
        let wb = req.write_back();
        match (&r, wb) {
            // An empty GID entry is an ordinary answer, not worth a line.
            (Err(e), _) if *e != libc::ENODATA => {
                state::log(|| format!("{}: errno {e}", req.name()));
            }
            (Ok(_), Err(e)) => return Err(e),
            _ => {}
        }
        r.map(|()| 0)
    }

    /// Legacy `write()` commands. rdma-core uses INVOKE_WRITE once the
    /// probe succeeds, so the write interface is not served.
    ///
    /// # Safety
    /// None: `buf` is not dereferenced.
    pub unsafe fn write(&self, buf: *const u8, count: usize) -> Result<usize, Errno> {
        let _ = buf;
        state::log(|| {
            format!(
                "uverbs{}: write() command of {count} bytes not supported (use INVOKE_WRITE)",
                self.uverbs_index
            )
        });
        Err(libc::EOPNOTSUPP)
    }

    /// `mmap` of this file: the UAR pages UAR_OBJ_ALLOC handed out and the
    /// clock pages.
    pub fn mmap(
        &self,
        addr: *mut u8,
        len: usize,
        prot: i32,
        flags: i32,
        off: i64,
    ) -> Result<*mut u8, Errno> {
        let Some(ctx) = self.ucontext() else {
            return Err(libc::EINVAL);
        };
        let off_u = u64::try_from(off).ok();
        let clock_page = off_u.and_then(|off| ctx.clock_page_at(off));
        if clock_page.is_some() && prot & (libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
            // mlx5_ib maps the clock pages read-only.
            return Err(libc::EPERM);
        }
        let page = clock_page
            .or_else(|| off_u.and_then(|off| ctx.page_at(off)))
            .ok_or_else(|| {
                state::log(|| format!("mmap at offset {off:#x}: no such entry"));
                libc::EINVAL
            })?;
        if len != page_size() || flags & libc::MAP_SHARED == 0 {
            return Err(libc::EINVAL);
        }
        if flags & libc::MAP_FIXED != 0 && addr != page.base() {
            state::log(|| "mmap of a UAR with MAP_FIXED is not supported".into());
            return Err(libc::EINVAL);
        }
        let base = page.base();
        let mut maps = mappings();
        maps.entry(base as usize).or_insert((page, 0)).1 += 1;
        MAPPED.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(base)
    }
}

/// System page size.
pub fn page_size() -> usize {
    static SIZE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf takes no pointers.
    *SIZE.get_or_init(|| {
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
    })
}

/// UAR pages mapped into the program, with their mapping counts; holding
/// the page keeps its memory valid while it is mapped.
type Mappings = HashMap<usize, (Arc<dyn UarPage>, usize)>;

/// Pages mapped right now: `munmap` of the program's own memory skips the
/// lock while none is.
static MAPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn mappings() -> MutexGuard<'static, Mappings> {
    static MAPS: OnceLock<Mutex<Mappings>> = OnceLock::new();
    MAPS.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// `munmap` of a page the library mapped: true when it was ours.
pub fn unmap(addr: *mut u8, len: usize) -> bool {
    let _ = len;
    if MAPPED.load(std::sync::atomic::Ordering::Acquire) == 0 {
        return false;
    }
    let mut maps = mappings();
    let key = addr as usize;
    let Some(entry) = maps.get_mut(&key) else {
        return false;
    };
    entry.1 -= 1;
    if entry.1 == 0 {
        maps.remove(&key);
    }
    MAPPED.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use devx::kernel::abi::{obj, IoctlCmd};

    fn addr<T>(cmd: &mut T) -> u64 {
        cmd as *mut T as usize as u64
    }

    #[test]
    fn framing_errors_are_the_kernels() {
        let mut ok = IoctlCmd::new(obj::DEVX, 0x1000, [IoctlAttr::new_obj(0x1000)]);
        assert!(Request::read(addr(&mut ok)).is_ok());

        let mut short = ok;
        short.hdr.length = 30;
        assert_eq!(Request::read(addr(&mut short)).unwrap_err(), libc::EINVAL);

        let mut reserved = ok;
        reserved.hdr.reserved1 = 1;
        assert_eq!(
            Request::read(addr(&mut reserved)).unwrap_err(),
            libc::EPROTONOSUPPORT
        );

        let mut driver = ok;
        driver.hdr.driver_id = 2;
        assert_eq!(Request::read(addr(&mut driver)).unwrap_err(), libc::EINVAL);

        let mut dup = IoctlCmd::new(
            obj::DEVX,
            0x1000,
            [IoctlAttr::new_obj(0x1000), IoctlAttr::new_obj(0x1000)],
        );
        assert_eq!(Request::read(addr(&mut dup)).unwrap_err(), libc::EINVAL);

        let mut bad_flags = ok;
        bad_flags.attrs[0].flags = 0x4;
        assert_eq!(
            Request::read(addr(&mut bad_flags)).unwrap_err(),
            libc::EINVAL
        );

        assert_eq!(Request::read(8).unwrap_err(), libc::EFAULT);
    }

    #[test]
    fn inputs_outputs_and_handles_round_trip() {
        let payload = [5u8; 20];
        let mut out = [0u8; 6];
        let mut cmd = IoctlCmd::new(
            obj::DEVX,
            0x1000,
            [
                IoctlAttr::u32_in(0x1000, 0xabcd),
                IoctlAttr::ptr_in(0x1001, &payload),
                IoctlAttr::ptr_out(0x1002, out.as_mut_ptr(), out.len()),
                IoctlAttr::new_obj(0x1003),
                IoctlAttr::u64_in(0x1004, 0x55),
            ],
        );
        let mut req = Request::read(addr(&mut cmd)).unwrap();
        assert_eq!(req.input(0x1000).unwrap().unwrap(), 0xabcdu32.to_ne_bytes());
        assert_eq!(req.input(0x1001).unwrap().unwrap(), payload);
        assert_eq!(req.const_in(0x1004).unwrap(), Some(0x55));
        assert_eq!(req.flags_in(0x1000, 0xffff).unwrap(), 0xabcd);
        assert_eq!(req.flags_in(0x1000, 0xff).unwrap_err(), libc::EINVAL);
        assert_eq!(req.input(0x2000).unwrap(), None);
        assert!(req.known(&[0x1000, 0x1001, 0x1002, 0x1003]).is_err());
        req.known(&[0x1000, 0x1001, 0x1002, 0x1003, 0x1004])
            .unwrap();
        req.output(0x1002, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        req.set_data(0x1003, 42);
        req.write_back().unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6]);
        assert!(cmd.attrs[2].valid_output());
        assert_eq!(cmd.attrs[3].data, 42);
        assert!(!cmd.attrs[0].valid_output());
    }
}
