//! Faults a program can raise on an emulated device it was shown, as an
//! operator would pull a cable or a card would fail: exported C functions
//! a test program finds with `dlsym` (rdma-core has no such call). Each
//! reaches the programs' async-event files (`ibv_get_async_event`) as the
//! kernel's would: PORT_ERR / PORT_ACTIVE, DEVICE_FATAL.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

use devx::sim::SimDevice;

use crate::state;

/// The shown device named `name`.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
unsafe fn device(name: *const c_char) -> Option<Arc<SimDevice>> {
    if name.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let name = unsafe { CStr::from_ptr(name) }.to_str().ok()?;
    state::get()
        .devices
        .iter()
        .find(|d| d.spec.ibdev == name)
        .map(|d| Arc::clone(&d.sim))
}

fn no_device() -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENODEV };
    -1
}

/// Takes the port link of device `name` down (`up` = 0) or up: 0, or -1
/// with errno ENODEV when no shown device has that name.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn devx_preload_set_link(name: *const c_char, up: c_int) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { device(name) } {
        Some(d) => {
            d.set_link(up != 0);
            0
        }
        None => no_device(),
    }
}

/// Puts device `name` in the fatal-error state (every context sees
/// DEVICE_FATAL; commands fail from then on): 0, or -1 with errno ENODEV.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn devx_preload_inject_fatal_error(name: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { device(name) } {
        Some(d) => {
            d.inject_fatal_error();
            0
        }
        None => no_device(),
    }
}
