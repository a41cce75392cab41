//! The memory barriers of rdma-core's `util/udma_barrier.h` that the send
//! doorbell needs, per architecture. Each also keeps the compiler from
//! moving memory accesses across it (an `asm!` without `nomem` is a compiler
//! barrier). Targets other than x86_64 and aarch64 fall back to a full
//! sequentially consistent fence.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
use std::sync::atomic::{fence, Ordering};

/// `udma_to_device_barrier()`: stores to memory the device reads by DMA
/// (the WQE) are visible to it before the stores that follow (the doorbell
/// record).
#[inline(always)]
pub(crate) fn to_device() {
    // x86_64: stores are not reordered with stores and DMA snoops the
    // caches, so only the compiler must keep the order.
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    // aarch64: `dmb oshst` orders stores for every observer in the outer
    // shareable domain, the device included.
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory or register.
    unsafe {
        std::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// `mmio_flush_writes()`, which is also `mmio_wc_start()`: every store
/// before it (the doorbell record, an earlier write-combined doorbell) is
/// out of the CPU before any store after it, write-combining buffers
/// included.
#[inline(always)]
pub(crate) fn flush_writes() {
    // x86_64: `sfence` drains the write-combining buffers and orders all
    // earlier stores before later ones.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a fence instruction; it touches no memory or register.
    unsafe {
        std::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    // aarch64: `dsb st` completes every earlier store, device memory included.
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory or register.
    unsafe {
        std::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// `mmio_wc_start()` after taking a lock (`mmio_wc_spinlock`): on x86_64 the
/// lock's atomic read-modify-write (`lock cmpxchg`) already orders
/// write-combining stores after every earlier store, so nothing more is
/// needed; elsewhere it is [`flush_writes`].
#[inline(always)]
pub(crate) fn wc_start_locked() {
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(not(target_arch = "x86_64"))]
    flush_writes();
}

/// [`flush_writes`] before a store to a register in write-combining memory
/// (`wc`), else only a compiler barrier: stores to ordinary memory leave
/// in program order on x86_64, and the device that reads such a page (an
/// emulated one) runs after the store in the same thread or behind a lock.
#[inline(always)]
pub(crate) fn wc_start(wc: bool) {
    if wc {
        flush_writes();
    } else {
        ordinary_order();
    }
}

/// [`flush_writes`] after a store to write-combining memory (`wc`); see
/// [`wc_start`].
#[inline(always)]
pub(crate) fn wc_flush(wc: bool) {
    wc_start(wc);
}

/// Orders earlier stores to ordinary memory before later ones, for every
/// observer: a compiler barrier on x86_64 (TSO), a store barrier elsewhere.
#[inline(always)]
fn ordinary_order() {
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
}
