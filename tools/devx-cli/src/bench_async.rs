//! `bench async`: asynchronous commands and events on the emulated device —
//! NOP throughput with 1, 32 and 1,000 commands in flight, the latency of
//! an awaited NOP (its outbox reused, as the blocking call's is) against
//! the blocking call, queued creates, and events
//! through an event channel.
//!
//! `sim0`'s profile gives commands no latency and this program submits
//! from one thread, so each command finds the command interface idle and
//! the submitting thread runs it (see the `devx::sim` module docs): the
//! numbers are the cost of the asynchronous path — queueing on the
//! `CmdComp`, the completion future, `block_on` — not of a hand-off to the
//! firmware thread, which commands with latency or submitted behind others
//! still take.

use std::time::Instant;

use devx::reactor::block_on;
use devx::{event_type, CmdComp, Context, Device, Events};
use prm_layouts::{AllocPdIn, AllocPdOut, NopIn, NopOut, Opcode};

use crate::bench::{per_iter, Metric};
use crate::CliResult;

/// The emulated device the event benchmark toggles the link of (its own,
/// so no other user of `sim0` sees the port go down).
const EVENT_DEVICE: &str = "sim4091";

/// Port changes raised before the channel is drained.
const EVENT_BATCH: u64 = 1_000;

fn nop() -> Vec<u8> {
    let mut m = NopIn::new();
    m.set_opcode(Opcode::Nop.raw());
    m.as_bytes().to_vec()
}

/// Commands per second with at most `depth` NOPs in flight.
fn throughput(ctx: &Context, comp: &CmdComp, depth: u64, n: u64) -> devx::Result<f64> {
    let nop = nop();
    let start = Instant::now();
    let (mut sent, mut done) = (0u64, 0u64);
    while done < n {
        while sent < n && sent - done < depth {
            ctx.general_async(&nop, NopOut::SIZE_BYTES, sent, comp)?;
            sent += 1;
        }
        comp.get()?.1?;
        done += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Nanoseconds per NOP: blocking, then submitted and awaited.
fn nop_latency(ctx: &Context, comp: &CmdComp, n: u64) -> devx::Result<(f64, f64)> {
    let nop = nop();
    let mut out = vec![0u8; NopOut::SIZE_BYTES];
    let start = Instant::now();
    for _ in 0..n {
        ctx.general_cmd_into(&nop, &mut out)?;
    }
    let blocking = per_iter(start, n);
    // One outbox, handed to each command and back by its completion, as
    // the blocking loop reuses `out`.
    let start = Instant::now();
    for wr_id in 0..n {
        ctx.general_async_into(&nop, out, wr_id, comp)?;
        out = block_on(comp.completion(wr_id))?;
    }
    Ok((blocking, per_iter(start, n)))
}

/// Nanoseconds per ALLOC_PD + DEALLOC_PD pair: blocking, then queued and
/// awaited.
fn pd_pair(ctx: &Context, comp: &CmdComp, n: u64) -> devx::Result<(f64, f64)> {
    let mut pd = AllocPdIn::new();
    pd.set_opcode(Opcode::AllocPd.raw());
    let start = Instant::now();
    for _ in 0..n {
        ctx.create(pd.as_bytes(), AllocPdOut::SIZE_BYTES)?
            .destroy()?;
    }
    let blocking = per_iter(start, n);
    let start = Instant::now();
    for i in 0..n {
        let obj = ctx
            .create_async(pd.as_bytes(), AllocPdOut::SIZE_BYTES, 2 * i, comp)?
            .wait()?;
        obj.destroy_async(2 * i + 1, comp).wait()?;
    }
    Ok((blocking, per_iter(start, n)))
}

/// Port-change events per second through one channel: a batch raised by
/// link toggles, then read.
fn events(n: u64) -> devx::Result<f64> {
    let sim = devx::sim::sim_device(EVENT_DEVICE)?;
    let ctx = Device::by_name(EVENT_DEVICE)?.open()?;
    let events = Events::new(&ctx, false)?;
    ctx.subscribe_unaffiliated(&events, &[event_type::PORT_CHANGE], 1)?;
    let mut up = true;
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        let batch = EVENT_BATCH.min(n - done);
        for _ in 0..batch {
            up = !up;
            sim.set_link(up);
        }
        for _ in 0..batch {
            events.get()?;
        }
        done += batch;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    sim.set_link(true);
    Ok(rate)
}

pub fn bench(n: u64) -> CliResult<Vec<Metric>> {
    let run = || -> devx::Result<Vec<Metric>> {
        let ctx = Device::emulated("sim0")?.open()?;
        let comp = CmdComp::new(&ctx)?;
        let mut metrics = Vec::new();
        for depth in [1u64, 32, 1_000] {
            metrics.push(Metric {
                name: format!("nop_per_s_{depth}_in_flight"),
                value: throughput(&ctx, &comp, depth, n)?,
                unit: "NOP commands per second",
            });
        }
        let (blocking, awaited) = nop_latency(&ctx, &comp, n)?;
        metrics.push(Metric {
            name: "nop_blocking_ns".into(),
            value: blocking,
            unit: "ns per blocking NOP",
        });
        metrics.push(Metric {
            name: "nop_awaited_ns".into(),
            value: awaited,
            unit: "ns per NOP submitted and awaited",
        });
        metrics.push(Metric {
            name: "nop_awaited_over_blocking".into(),
            value: awaited / blocking,
            unit: "ratio (target 1.5)",
        });
        let (blocking, awaited) = pd_pair(&ctx, &comp, n / 4)?;
        metrics.push(Metric {
            name: "pd_pair_blocking_ns".into(),
            value: blocking,
            unit: "ns per ALLOC_PD + DEALLOC_PD",
        });
        metrics.push(Metric {
            name: "pd_pair_awaited_ns".into(),
            value: awaited,
            unit: "ns per queued ALLOC_PD + DEALLOC_PD, awaited",
        });
        metrics.push(Metric {
            name: "events_per_s".into(),
            value: events(n)?,
            unit: "port-change events per second through a channel",
        });
        metrics.push(Metric {
            name: "iterations".into(),
            value: n as f64,
            unit: "per measurement",
        });
        Ok(metrics)
    };
    run().map_err(|e| e.to_string())
}
