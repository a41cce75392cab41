//! The libc entry points the library replaces. Each one decides whether a
//! call is ours (a redirected path, an owned uverbs fd, RDMA netlink) and
//! otherwise calls the next definition of the symbol (libc's) unchanged.
//!
//! Every entry point runs its body under `catch_unwind`: a panic never
//! crosses into C; the call then fails with EIO.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr, CString};
use std::os::unix::ffi::OsStringExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use libc::{mode_t, off_t, size_t, ssize_t, DIR, FILE};

use crate::paths::{self, Route};
use crate::state::{self, log};
use crate::tree;
use crate::uverbs::UverbsFile;

/// The next definition of a libc symbol (`dlsym(RTLD_NEXT)`), resolved once.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static PTR: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = PTR.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            // SAFETY: the name is a NUL-terminated literal; RTLD_NEXT is a valid handle.
            p = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) }
                as usize;
            PTR.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        if p == 0 {
            None
        } else {
            // SAFETY: `p` is libc's definition of the symbol, whose C type is `$ty`.
            Some(unsafe { std::mem::transmute::<usize, $ty>(p) })
        }
    }};
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `body`, turning a panic into `fail` with errno EIO.
fn guard<R>(fail: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            fail
        }
    }
}

/// Where a C path goes.
enum Dest {
    Pass,
    /// The tree's copy of the path.
    Tree(CString),
    /// `/dev/infiniband/uverbsN` of a shown device, with its placeholder in the tree.
    Uverbs(u32, CString),
}

/// Routes a C path. Only prefix-matching paths touch the state, so the
/// tree builder's own file calls never recurse into set-up.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn dest(path: *const c_char) -> Dest {
    if path.is_null() {
        return Dest::Pass;
    }
    // SAFETY: non-null and NUL-terminated per the contract.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if !paths::may_route(bytes) {
        return Dest::Pass;
    }
    let st = state::get();
    let to_c = |p: std::path::PathBuf| CString::new(p.into_os_string().into_vec()).ok();
    match paths::route(bytes, &st.root) {
        Route::Pass => Dest::Pass,
        Route::Tree(p) => to_c(p).map_or(Dest::Pass, Dest::Tree),
        Route::Uverbs(n) => {
            let placeholder = st.root.join("dev/infiniband").join(format!("uverbs{n}"));
            match (st.device(n), to_c(placeholder)) {
                (Some(_), Some(c)) => Dest::Uverbs(n, c),
                // Not a shown device: the placeholder does not exist (ENOENT).
                (None, Some(c)) => Dest::Tree(c),
                _ => Dest::Pass,
            }
        }
    }
}

/// The path libc should see for a call that only reads metadata or names.
///
/// # Safety
/// As [`dest`].
unsafe fn plain_path(path: *const c_char) -> PathArg {
    // SAFETY: forwarded contract.
    match unsafe { dest(path) } {
        Dest::Pass => PathArg::Orig(path),
        Dest::Tree(c) | Dest::Uverbs(_, c) => PathArg::Owned(c),
    }
}

enum PathArg {
    Orig(*const c_char),
    Owned(CString),
}

impl PathArg {
    fn ptr(&self) -> *const c_char {
        match self {
            PathArg::Orig(p) => *p,
            PathArg::Owned(c) => c.as_ptr(),
        }
    }
}

/// Opens `uverbsN`: an eventfd stands in for the character device.
fn open_uverbs(n: u32, flags: c_int) -> c_int {
    if flags & libc::O_ACCMODE != libc::O_RDWR {
        // rdma-core opens O_RDWR; mmap of UAR pages needs it.
        log(|| format!("open uverbs{n}: flags {flags:#x} without O_RDWR"));
    }
    let mut efd_flags = 0;
    if flags & libc::O_CLOEXEC != 0 {
        efd_flags |= libc::EFD_CLOEXEC;
    }
    if flags & libc::O_NONBLOCK != 0 {
        efd_flags |= libc::EFD_NONBLOCK;
    }
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, efd_flags) };
    if fd < 0 {
        return fd;
    }
    state::register(fd, Arc::new(UverbsFile::new(n, fd)));
    log(|| format!("open /dev/infiniband/uverbs{n} -> fd {fd}"));
    fd
}

/// Makes a stat result describe the uverbs character device `n`.
fn as_uverbs_cdev(mode: &mut mode_t, rdev: &mut libc::dev_t, n: u32) {
    *mode = libc::S_IFCHR | 0o666;
    *rdev = libc::makedev(tree::UVERBS_MAJOR, tree::UVERBS_BASE_MINOR + n);
}

// ---------------------------------------------------------------- open

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;

/// # Safety
/// `path` is null or NUL-terminated; `mode` is read only with O_CREAT/O_TMPFILE
/// (the C variadic argument, passed in the same register).
unsafe fn do_open(real: Option<OpenFn>, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    guard(-1, || {
        // SAFETY: forwarded contract.
        let d = unsafe { dest(path) };
        let p = match d {
            Dest::Uverbs(n, _) => return open_uverbs(n, flags),
            Dest::Pass => PathArg::Orig(path),
            Dest::Tree(c) => PathArg::Owned(c),
        };
        match real {
            // SAFETY: libc's open with the caller's arguments (or the tree path).
            Some(f) => unsafe { f(p.ptr(), flags, mode) },
            None => {
                set_errno(libc::ENOSYS);
                -1
            }
        }
    })
}

/// # Safety
/// As [`do_open`]; `dirfd` applies to relative paths only, which always pass.
unsafe fn do_openat(
    real: Option<OpenatFn>,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    guard(-1, || {
        // SAFETY: forwarded contract.
        let d = unsafe { dest(path) };
        let p = match d {
            Dest::Uverbs(n, _) => return open_uverbs(n, flags),
            Dest::Pass => PathArg::Orig(path),
            Dest::Tree(c) => PathArg::Owned(c),
        };
        match real {
            // SAFETY: libc's openat with the caller's arguments (or the tree path).
            Some(f) => unsafe { f(dirfd, p.ptr(), flags, mode) },
            None => {
                set_errno(libc::ENOSYS);
                -1
            }
        }
    })
}

/// # Safety
/// C `open`.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let real = real!("open", OpenFn);
    // SAFETY: C contract of open.
    unsafe { do_open(real, path, flags, mode) }
}

/// # Safety
/// C `open64`.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let real = real!("open64", OpenFn);
    // SAFETY: C contract of open64.
    unsafe { do_open(real, path, flags, mode) }
}

/// # Safety
/// C `openat`.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let real = real!("openat", OpenatFn);
    // SAFETY: C contract of openat.
    unsafe { do_openat(real, dirfd, path, flags, mode) }
}

/// # Safety
/// C `openat64`.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    let real = real!("openat64", OpenatFn);
    // SAFETY: C contract of openat64.
    unsafe { do_openat(real, dirfd, path, flags, mode) }
}

type FopenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE;

/// # Safety
/// C `fopen`.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let real = real!("fopen", FopenFn);
    // SAFETY: C contract of fopen.
    unsafe { do_fopen(real, path, mode) }
}

/// # Safety
/// C `fopen64`.
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let real = real!("fopen64", FopenFn);
    // SAFETY: C contract of fopen64.
    unsafe { do_fopen(real, path, mode) }
}

/// # Safety
/// C `fopen`.
unsafe fn do_fopen(real: Option<FopenFn>, path: *const c_char, mode: *const c_char) -> *mut FILE {
    guard(std::ptr::null_mut(), || {
        // SAFETY: forwarded contract.
        let p = unsafe { plain_path(path) };
        match real {
            // SAFETY: libc's fopen.
            Some(f) => unsafe { f(p.ptr(), mode) },
            None => std::ptr::null_mut(),
        }
    })
}

/// # Safety
/// C `opendir`.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    guard(std::ptr::null_mut(), || {
        // SAFETY: C contract of opendir.
        let p = unsafe { plain_path(path) };
        match real!("opendir", unsafe extern "C" fn(*const c_char) -> *mut DIR) {
            // SAFETY: libc's opendir.
            Some(f) => unsafe { f(p.ptr()) },
            None => std::ptr::null_mut(),
        }
    })
}

// ---------------------------------------------------------------- stat

type StatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
type Stat64Fn = unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int;
type FstatatFn = unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
type Fstatat64Fn = unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;

/// Stat through the tree; the uverbs placeholder reads as the char device.
macro_rules! stat_entry {
    ($name:ident, $sym:literal, $fnty:ty, $st:ty) => {
        /// # Safety
        /// C contract of the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut $st) -> c_int {
            guard(-1, || {
                // SAFETY: C contract.
                let d = unsafe { dest(path) };
                let Some(f) = real!($sym, $fnty) else {
                    set_errno(libc::ENOSYS);
                    return -1;
                };
                match d {
                    // SAFETY: libc's function with the caller's arguments.
                    Dest::Pass => unsafe { f(path, buf) },
                    // SAFETY: as above, with the tree path.
                    Dest::Tree(c) => unsafe { f(c.as_ptr(), buf) },
                    Dest::Uverbs(n, c) => {
                        // SAFETY: as above; `buf` is valid per the C contract when it succeeds.
                        let r = unsafe { f(c.as_ptr(), buf) };
                        if r == 0 && !buf.is_null() {
                            // SAFETY: libc just filled `*buf`.
                            let b = unsafe { &mut *buf };
                            as_uverbs_cdev(&mut b.st_mode, &mut b.st_rdev, n);
                        }
                        r
                    }
                }
            })
        }
    };
}

stat_entry!(stat, "stat", StatFn, libc::stat);
stat_entry!(lstat, "lstat", StatFn, libc::stat);
stat_entry!(stat64, "stat64", Stat64Fn, libc::stat64);
stat_entry!(lstat64, "lstat64", Stat64Fn, libc::stat64);

macro_rules! fstatat_entry {
    ($name:ident, $sym:literal, $fnty:ty, $st:ty) => {
        /// # Safety
        /// C contract of the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            buf: *mut $st,
            flags: c_int,
        ) -> c_int {
            guard(-1, || {
                let Some(f) = real!($sym, $fnty) else {
                    set_errno(libc::ENOSYS);
                    return -1;
                };
                // An empty path with AT_EMPTY_PATH is fstat of `dirfd`.
                // SAFETY: C contract: `path` is NUL-terminated.
                let empty = !path.is_null() && unsafe { *path } == 0;
                if empty && flags & libc::AT_EMPTY_PATH != 0 {
                    // SAFETY: libc's function with the caller's arguments.
                    let r = unsafe { f(dirfd, path, buf, flags) };
                    if r == 0 && !buf.is_null() {
                        if let Some(file) = state::file(dirfd) {
                            // SAFETY: libc just filled `*buf`.
                            let b = unsafe { &mut *buf };
                            as_uverbs_cdev(&mut b.st_mode, &mut b.st_rdev, file.uverbs_index);
                        }
                    }
                    return r;
                }
                // SAFETY: C contract.
                match unsafe { dest(path) } {
                    // SAFETY: libc's function with the caller's arguments.
                    Dest::Pass => unsafe { f(dirfd, path, buf, flags) },
                    // SAFETY: as above, with the (absolute) tree path.
                    Dest::Tree(c) => unsafe { f(dirfd, c.as_ptr(), buf, flags) },
                    Dest::Uverbs(n, c) => {
                        // SAFETY: as above.
                        let r = unsafe { f(dirfd, c.as_ptr(), buf, flags) };
                        if r == 0 && !buf.is_null() {
                            // SAFETY: libc just filled `*buf`.
                            let b = unsafe { &mut *buf };
                            as_uverbs_cdev(&mut b.st_mode, &mut b.st_rdev, n);
                        }
                        r
                    }
                }
            })
        }
    };
}

fstatat_entry!(fstatat, "fstatat", FstatatFn, libc::stat);
fstatat_entry!(fstatat64, "fstatat64", Fstatat64Fn, libc::stat64);

macro_rules! fstat_entry {
    ($name:ident, $sym:literal, $st:ty) => {
        /// # Safety
        /// C contract of the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut $st) -> c_int {
            guard(-1, || {
                let Some(f) = real!($sym, unsafe extern "C" fn(c_int, *mut $st) -> c_int) else {
                    set_errno(libc::ENOSYS);
                    return -1;
                };
                // SAFETY: libc's function with the caller's arguments.
                let r = unsafe { f(fd, buf) };
                if r == 0 && !buf.is_null() {
                    if let Some(file) = state::file(fd) {
                        // SAFETY: libc just filled `*buf`.
                        let b = unsafe { &mut *buf };
                        as_uverbs_cdev(&mut b.st_mode, &mut b.st_rdev, file.uverbs_index);
                    }
                }
                r
            })
        }
    };
}

fstat_entry!(fstat, "fstat", libc::stat);
fstat_entry!(fstat64, "fstat64", libc::stat64);

/// # Safety
/// C `statx`.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    guard(-1, || {
        type F =
            unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
        let Some(f) = real!("statx", F) else {
            set_errno(libc::ENOSYS);
            return -1;
        };
        // SAFETY: C contract: `path` is NUL-terminated.
        let (p, uverbs) = match unsafe { dest(path) } {
            Dest::Pass => (PathArg::Orig(path), None),
            Dest::Tree(c) => (PathArg::Owned(c), None),
            Dest::Uverbs(n, c) => (PathArg::Owned(c), Some(n)),
        };
        // An empty path with AT_EMPTY_PATH is `dirfd` itself.
        // SAFETY: as above.
        let empty = !path.is_null() && unsafe { *path } == 0 && flags & libc::AT_EMPTY_PATH != 0;
        let uverbs = uverbs.or_else(|| {
            empty
                .then(|| state::file(dirfd).map(|f| f.uverbs_index))
                .flatten()
        });
        // SAFETY: libc's statx with the caller's arguments (or the tree path).
        let r = unsafe { f(dirfd, p.ptr(), flags, mask, buf) };
        if let (0, Some(n), false) = (r, uverbs, buf.is_null()) {
            // SAFETY: libc just filled `*buf`.
            let b = unsafe { &mut *buf };
            b.stx_mode = (libc::S_IFCHR | 0o666) as u16;
            b.stx_rdev_major = tree::UVERBS_MAJOR;
            b.stx_rdev_minor = tree::UVERBS_BASE_MINOR + n;
        }
        r
    })
}

/// # Safety
/// C `access`.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    guard(-1, || {
        // SAFETY: C contract of access.
        let p = unsafe { plain_path(path) };
        match real!(
            "access",
            unsafe extern "C" fn(*const c_char, c_int) -> c_int
        ) {
            // SAFETY: libc's access.
            Some(f) => unsafe { f(p.ptr(), mode) },
            None => -1,
        }
    })
}

/// # Safety
/// C `readlink`.
#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, len: size_t) -> ssize_t {
    guard(-1, || {
        // SAFETY: C contract of readlink.
        let p = unsafe { plain_path(path) };
        type F = unsafe extern "C" fn(*const c_char, *mut c_char, size_t) -> ssize_t;
        match real!("readlink", F) {
            // SAFETY: libc's readlink.
            Some(f) => unsafe { f(p.ptr(), buf, len) },
            None => -1,
        }
    })
}

/// # Safety
/// C `realpath`.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    guard(std::ptr::null_mut(), || {
        // SAFETY: C contract of realpath.
        let p = unsafe { plain_path(path) };
        type F = unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char;
        match real!("realpath", F) {
            // SAFETY: libc's realpath.
            Some(f) => unsafe { f(p.ptr(), resolved) },
            None => std::ptr::null_mut(),
        }
    })
}

// ---------------------------------------------------------------- sockets

/// # Safety
/// C `socket`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    guard(-1, || {
        if paths::refuse_socket(domain, protocol) {
            log(|| "RDMA netlink refused (sysfs discovery instead)".into());
            set_errno(libc::EPROTONOSUPPORT);
            return -1;
        }
        match real!("socket", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int) {
            // SAFETY: libc's socket.
            Some(f) => unsafe { f(domain, ty, protocol) },
            None => -1,
        }
    })
}

// ---------------------------------------------------------------- uverbs fds

/// # Safety
/// C `ioctl` (`arg` is the variadic pointer argument).
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    guard(-1, || {
        if let Some(file) = state::file(fd) {
            // SAFETY: the caller passes a pointer valid for the request.
            return match unsafe { file.ioctl(request, arg.cast()) } {
                Ok(r) => r,
                Err(e) => {
                    set_errno(e);
                    -1
                }
            };
        }
        type F = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;
        match real!("ioctl", F) {
            // SAFETY: libc's ioctl with the caller's arguments.
            Some(f) => unsafe { f(fd, request, arg) },
            None => -1,
        }
    })
}

/// # Safety
/// C `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    guard(-1, || {
        if let Some(file) = state::file(fd) {
            // SAFETY: the caller passes `count` readable bytes at `buf`.
            return match unsafe { file.write(buf.cast(), count) } {
                Ok(n) => n as ssize_t,
                Err(e) => {
                    set_errno(e);
                    -1
                }
            };
        }
        type F = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
        match real!("write", F) {
            // SAFETY: libc's write with the caller's arguments.
            Some(f) => unsafe { f(fd, buf, count) },
            None => -1,
        }
    })
}

/// # Safety
/// C `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    guard(-1, || {
        if fd >= 0 {
            // Dropping the file closes its context and objects.
            let gone = state::unregister(fd);
            if gone.is_some() {
                log(|| format!("close uverbs fd {fd}"));
            }
            drop(gone);
        }
        match real!("close", unsafe extern "C" fn(c_int) -> c_int) {
            // SAFETY: libc's close.
            Some(f) => unsafe { f(fd) },
            None => -1,
        }
    })
}

type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;

/// # Safety
/// C `mmap`.
unsafe fn do_mmap(
    real: Option<MmapFn>,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    guard(libc::MAP_FAILED, || {
        if let Some(file) = state::file(fd) {
            return match file.mmap(addr.cast(), len, prot, flags, off) {
                Ok(p) => p.cast(),
                Err(e) => {
                    set_errno(e);
                    libc::MAP_FAILED
                }
            };
        }
        match real {
            // SAFETY: libc's mmap with the caller's arguments.
            Some(f) => unsafe { f(addr, len, prot, flags, fd, off) },
            None => libc::MAP_FAILED,
        }
    })
}

/// # Safety
/// C `mmap`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let real = real!("mmap", MmapFn);
    // SAFETY: C contract of mmap.
    unsafe { do_mmap(real, addr, len, prot, flags, fd, off) }
}

/// # Safety
/// C `mmap64`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let real = real!("mmap64", MmapFn);
    // SAFETY: C contract of mmap64.
    unsafe { do_mmap(real, addr, len, prot, flags, fd, off) }
}

/// # Safety
/// C `munmap`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    guard(-1, || {
        if crate::uverbs::unmap(addr.cast(), len) {
            return 0;
        }
        match real!("munmap", unsafe extern "C" fn(*mut c_void, size_t) -> c_int) {
            // SAFETY: libc's munmap with the caller's arguments.
            Some(f) => unsafe { f(addr, len) },
            None => -1,
        }
    })
}
