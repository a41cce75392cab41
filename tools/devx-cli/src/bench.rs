//! `bench`: how fast the library is, printed as numbers (or JSON).

use std::hint::black_box;
use std::time::Instant;

use clap::ValueEnum;
use prm_layouts::{CreateCqIn, CreateQpIn, Opcode};

use crate::CliResult;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BenchKind {
    /// Encoding create_cq_in and create_qp_in mailboxes with typed setters.
    Mailbox,
    /// Commands through the DEVX API on the emulated device.
    Cmd,
    /// Kernel-provider overhead per command, against a kernel that answers at once
    /// (needs the `fake-kernel` feature).
    Kernel,
    /// The direct data path: post, poll, and RDMA WRITEs between emulated devices.
    Datapath,
    /// RC over RoCEv2 between two processes on loopback.
    Wire,
    /// Asynchronous commands and events on the emulated device.
    Async,
}

/// One measured quantity.
pub(crate) struct Metric {
    pub(crate) name: String,
    pub(crate) value: f64,
    pub(crate) unit: &'static str,
}

pub fn run(kind: BenchKind, json: bool, iterations: Option<u64>, depth: Option<u32>) -> CliResult {
    let (bench, metrics) = match kind {
        BenchKind::Mailbox => ("mailbox", mailbox(iterations.unwrap_or(5_000_000))),
        BenchKind::Cmd => ("cmd", crate::bench_cmd::cmd(iterations.unwrap_or(200_000))?),
        BenchKind::Kernel => ("kernel", kernel(iterations.unwrap_or(2_000_000))?),
        BenchKind::Datapath => (
            "datapath",
            crate::bench_datapath::datapath(iterations.unwrap_or(1_000_000))?,
        ),
        BenchKind::Async => (
            "async",
            crate::bench_async::bench(iterations.unwrap_or(100_000))?,
        ),
        BenchKind::Wire if crate::bench_wire::is_responder() => {
            return crate::bench_wire::responder();
        }
        // 200,000 messages last a fifth of a second or more, so the start
        // (first touch of the buffers, the peer's first batches, the window
        // opening) is a small part of what is timed.
        BenchKind::Wire => (
            "wire",
            crate::bench_wire::wire(iterations.unwrap_or(200_000), depth)?,
        ),
    };
    if json {
        let body: Vec<String> = metrics
            .iter()
            .map(|m| format!("\"{}\": {:.2}", m.name, m.value))
            .collect();
        println!("{{\"bench\": \"{bench}\", {}}}", body.join(", "));
    } else {
        for m in &metrics {
            println!("{:<40} {:>12.2} {}", m.name, m.value, m.unit);
        }
    }
    Ok(())
}

pub(crate) fn per_iter(start: Instant, n: u64) -> f64 {
    start.elapsed().as_nanos() as f64 / n as f64
}

/// 13 fields, the 64-bit `dbr_addr` among them.
#[inline(never)]
fn encode_create_cq(i: u64) -> CreateCqIn {
    let mut m = CreateCqIn::new();
    m.set_opcode(Opcode::CreateCq as u16);
    m.set_cq_umem_valid(1);
    m.set_cq_umem_id(i as u32);
    m.set_cq_umem_offset(0);
    let c = m.cq_context_mut();
    c.set_log_cq_size(10);
    c.set_uar_page(i as u32);
    c.set_c_eqn_or_apu_element(3);
    c.set_cqe_sz(0);
    c.set_dbr_umem_valid(1);
    c.set_dbr_umem_id(i as u32 + 1);
    c.set_dbr_addr(i << 6);
    c.set_cq_period(16);
    c.set_cq_max_count(32);
    m
}

/// 18 fields.
#[inline(never)]
fn encode_create_qp(i: u64) -> CreateQpIn {
    let mut m = CreateQpIn::new();
    m.set_opcode(Opcode::CreateQp as u16);
    m.set_wq_umem_valid(1);
    m.set_wq_umem_id(i as u32);
    m.set_wq_umem_offset(0);
    let q = m.qpc_mut();
    q.set_st(0);
    q.set_pm_state(3);
    q.set_pd(i as u32);
    q.set_uar_page(7);
    q.set_log_rq_size(8);
    q.set_log_rq_stride(2);
    q.set_log_sq_size(8);
    q.set_ts_format(1);
    q.set_cqn_snd(i as u32);
    q.set_cqn_rcv(i as u32);
    q.set_dbr_umem_valid(1);
    q.set_dbr_umem_id(i as u32 + 1);
    q.set_dbr_addr(i << 6);
    q.set_user_index(i as u32);
    m
}

fn mailbox(n: u64) -> Vec<Metric> {
    let start = Instant::now();
    for i in 0..n {
        black_box(encode_create_cq(black_box(i)));
    }
    let cq = per_iter(start, n);
    let start = Instant::now();
    for i in 0..n {
        black_box(encode_create_qp(black_box(i)));
    }
    let qp = per_iter(start, n);
    vec![
        Metric {
            name: "create_cq_in_ns".into(),
            value: cq,
            unit: "ns per mailbox (13 fields)",
        },
        Metric {
            name: "create_qp_in_ns".into(),
            value: qp,
            unit: "ns per mailbox (18 fields)",
        },
        Metric {
            name: "iterations".into(),
            value: n as f64,
            unit: "per mailbox kind",
        },
    ]
}

/// Without the fake kernel compiled in there is nothing to measure against.
#[cfg(not(feature = "fake-kernel"))]
fn kernel(_n: u64) -> Result<Vec<Metric>, String> {
    Err(
        "bench kernel runs the kernel provider against devx's fake kernel, \
         which this build leaves out; build with it: \
         cargo run --release -p devx-cli --features fake-kernel -- bench kernel"
            .into(),
    )
}

#[cfg(feature = "fake-kernel")]
fn kernel(n: u64) -> Result<Vec<Metric>, String> {
    let r = devx::kernel::bench_overhead(n);
    Ok(vec![
        Metric {
            name: "create_ns".into(),
            value: r.create_ns,
            unit: "ns per OBJ_CREATE",
        },
        Metric {
            name: "destroy_ns".into(),
            value: r.destroy_ns,
            unit: "ns per OBJ_DESTROY",
        },
        Metric {
            name: "general_ns".into(),
            value: r.general_ns,
            unit: "ns per OTHER",
        },
        Metric {
            name: "iterations".into(),
            value: n as f64,
            unit: "per method",
        },
    ])
}
