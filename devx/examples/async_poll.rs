//! Asynchronous commands driven by a plain `poll(2)` loop: queue a batch of
//! capability queries on a completion channel, then sleep in `poll` on its
//! fd and drain whatever completed each time it wakes.
//!
//! `cargo run -p devx --example async_poll` (runs on the emulated `sim0`).

use std::os::fd::AsRawFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use prm_layouts::enums::Opcode;
use prm_layouts::{QueryHcaCapIn, QueryHcaCapOut};

fn main() -> devx::Result<()> {
    let ctx = devx::Device::by_name("sim0")?.open()?;
    let comp = devx::CmdComp::new(&ctx)?;
    let mut q = QueryHcaCapIn::new();
    q.set_opcode(Opcode::QueryHcaCap.raw());
    // General capabilities, current values (cap type 0 << 1 | 1).
    q.set_op_mod(1);
    let batch = 64u64;
    for wr_id in 0..batch {
        ctx.general_async(q.as_bytes(), QueryHcaCapOut::SIZE_BYTES, wr_id, &comp)?;
    }
    let mut done = 0;
    let mut wakeups = 0;
    while done < batch {
        // SAFETY: `comp` owns the fd and outlives this borrow.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(comp.as_raw_fd()) };
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::NONE).map_err(|e| devx::Error::os("poll", e as i32))?;
        wakeups += 1;
        while let Some((wr_id, out)) = comp.try_get()? {
            let out = out?;
            let caps = QueryHcaCapOut::from_slice(&out).expect("a full outbox");
            if wr_id == 0 {
                println!(
                    "log_max_qp = {}",
                    caps.capability().cmd_hca_cap().log_max_qp()
                );
            }
            done += 1;
        }
    }
    println!("{done} completions in {wakeups} wakeup(s) of poll(2)");
    Ok(())
}
