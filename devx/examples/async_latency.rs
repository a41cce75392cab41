//! Latency of one NOP command on the emulated device: the blocking call
//! against the same command submitted asynchronously and awaited (with no
//! latency in the profile and an idle command queue the submitting thread
//! runs it; its completion comes through the `CmdComp`), and throughput
//! with 1, 32 and 200 commands in flight.
//!
//! `cargo run --release -p devx --example async_latency`

use std::time::Instant;

use devx::reactor::block_on;
use prm_layouts::enums::Opcode;
use prm_layouts::{NopIn, NopOut};

fn main() -> devx::Result<()> {
    let ctx = devx::Device::by_name("sim0")?.open()?;
    let comp = devx::CmdComp::new(&ctx)?;
    let mut nop = NopIn::new();
    nop.set_opcode(Opcode::Nop.raw());
    let nop = nop.as_bytes().to_vec();
    let n = 20_000u64;

    let t = Instant::now();
    for _ in 0..n {
        ctx.general_cmd(&nop, NopOut::SIZE_BYTES)?;
    }
    let blocking = t.elapsed().as_secs_f64() / n as f64;

    let t = Instant::now();
    for wr_id in 0..n {
        ctx.general_async(&nop, NopOut::SIZE_BYTES, wr_id, &comp)?;
        block_on(comp.completion(wr_id))?;
    }
    let awaited = t.elapsed().as_secs_f64() / n as f64;
    println!(
        "NOP: blocking {:.2} us, awaited {:.2} us ({:.2}x)",
        blocking * 1e6,
        awaited * 1e6,
        awaited / blocking
    );

    for depth in [1u64, 32, 200] {
        let t = Instant::now();
        let mut sent = 0;
        let mut done = 0;
        while done < n {
            while sent < n && sent - done < depth {
                ctx.general_async(&nop, NopOut::SIZE_BYTES, sent, &comp)?;
                sent += 1;
            }
            block_on(comp.next())?.1?;
            done += 1;
        }
        println!(
            "{depth:>4} in flight: {:.0} commands/s",
            n as f64 / t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
