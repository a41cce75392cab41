//! The provider's own cost per command, measured against [`InstantKernel`].

use std::sync::Arc;
use std::time::Instant;

use prm_layouts::{AllocPdIn, DeallocPdIn, Opcode, QueryHcaCapIn, QueryHcaCapOut};

use super::context::KernelContext;
use super::fake::InstantKernel;
use crate::provider::{DeviceInfo, ProviderContext};

/// Nanoseconds per command spent in the kernel provider itself (building the
/// ioctl, dispatching through [`super::Sys`], decoding the answer) when the
/// kernel answers at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchResult {
    pub iterations: u64,
    /// Per `ProviderContext::create` (DEVX_OBJ_CREATE of an ALLOC_PD inbox).
    pub create_ns: f64,
    /// Per `ProviderContext::destroy` (DEVX_OBJ_DESTROY).
    pub destroy_ns: f64,
    /// Per `ProviderContext::general` (DEVX_OTHER of a QUERY_HCA_CAP inbox).
    pub general_ns: f64,
}

impl BenchResult {
    /// `{"iterations":…,"create_ns":…,"destroy_ns":…,"general_ns":…}`.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"iterations\":{},\"create_ns\":{:.1},\"destroy_ns\":{:.1},\"general_ns\":{:.1}}}",
            self.iterations, self.create_ns, self.destroy_ns, self.general_ns
        )
    }
}

/// Runs `iterations` creates, destroys and general commands through a
/// [`KernelContext`] on an [`InstantKernel`] and reports the time per call.
pub fn bench_overhead(iterations: u64) -> BenchResult {
    let iterations = iterations.max(1);
    let info = DeviceInfo {
        name: "instant".into(),
        provider: "kernel".into(),
        emulated: true,
        location: "InstantKernel".into(),
        node_guid: 0,
        fw_version: String::new(),
        vendor_id: 0,
        vendor_part_id: 0,
        num_ports: 0,
    };
    let ctx = match KernelContext::open_path(
        Arc::new(InstantKernel::new()),
        std::path::Path::new("/dev/infiniband/uverbs-instant"),
        info,
    ) {
        Ok(c) => c,
        Err(_) => {
            return BenchResult {
                iterations: 0,
                create_ns: f64::NAN,
                destroy_ns: f64::NAN,
                general_ns: f64::NAN,
            }
        }
    };
    let ctx: &dyn ProviderContext = &ctx;
    let mut alloc_pd = AllocPdIn::new();
    alloc_pd.set_opcode(Opcode::AllocPd.raw());
    let alloc_pd = alloc_pd.as_bytes();
    let mut query_cap = QueryHcaCapIn::new();
    query_cap.set_opcode(Opcode::QueryHcaCap.raw());
    // General capabilities, current values.
    query_cap.set_op_mod(1);
    let query_cap = query_cap.as_bytes();
    let mut dealloc_pd = DeallocPdIn::new();
    dealloc_pd.set_opcode(Opcode::DeallocPd.raw());
    let dealloc_pd = dealloc_pd.as_bytes();
    let mut out = [0u8; 16];
    let mut cap_out = vec![0u8; QueryHcaCapOut::SIZE_BYTES];

    // Handles in chunks so destroys run against real (counter) handles
    // without the measurement touching the heap per call.
    const CHUNK: usize = 4096;
    let mut handles = vec![0u32; CHUNK];
    let (mut create_total, mut destroy_total) = (0u128, 0u128);
    let mut left = iterations;
    while left > 0 {
        let n = (left as usize).min(CHUNK);
        let t = Instant::now();
        for h in handles.iter_mut().take(n) {
            *h = std::hint::black_box(ctx.create(alloc_pd, &mut out)).unwrap_or(0);
        }
        create_total += t.elapsed().as_nanos();
        let t = Instant::now();
        for h in handles.iter().take(n) {
            let _ = std::hint::black_box(ctx.destroy(*h, dealloc_pd));
        }
        destroy_total += t.elapsed().as_nanos();
        left -= n as u64;
    }
    let t = Instant::now();
    for _ in 0..iterations {
        let _ = std::hint::black_box(ctx.general(query_cap, &mut cap_out));
    }
    let general_total = t.elapsed().as_nanos();
    let per = |total: u128| total as f64 / iterations as f64;
    BenchResult {
        iterations,
        create_ns: per(create_total),
        destroy_ns: per(destroy_total),
        general_ns: per(general_total),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_runs_and_reports_json() {
        let r = bench_overhead(100);
        assert_eq!(r.iterations, 100);
        assert!(r.create_ns.is_finite() && r.destroy_ns.is_finite());
        assert!(r.to_json().starts_with("{\"iterations\":100,"));
    }
}
