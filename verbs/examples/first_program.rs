//! A first RDMA program: open the default device (a real mlx5 card, else the
//! emulated `sim0`), make two RC QPs, connect them to each other, RDMA-write
//! 4 KiB from one buffer into the other and check it arrived.
//!
//! cargo run -p verbs --example first_program

use verbs::{AccessFlags, Context, QpInit, QpType, SendWr, Sge, Wc};

const LEN: usize = 4096;

/// The whole flow; `Ok` once the written bytes were read back.
pub fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::open_default()?;
    let pd = ctx.alloc_pd()?;
    let mut cq = ctx.create_cq(16)?;
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let (mut a, b) = (pd.create_qp(&init)?, pd.create_qp(&init)?);

    // Each side sends its endpoint to the other (here: in-process; across
    // machines as `to_string()`/`parse()` or `to_bytes()`/`from_bytes()`).
    a.connect(&b.endpoint()?)?;
    b.connect(&a.endpoint()?)?;

    let src = pd.reg_mr(vec![0xab_u8; LEN], AccessFlags::NONE)?;
    let dst = pd.reg_mr(
        vec![0_u8; LEN],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    let sge = [Sge::from_mr(&src, 0, LEN as u32)];
    a.post_send(&SendWr::rdma_write(1, &sge, dst.addr() as u64, dst.rkey()))?;

    let mut wc = [Wc::default()];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cq.poll(&mut wc) == 0 {
        if std::time::Instant::now() > deadline {
            return Err("no completion within 10 s".into());
        }
    }
    if !wc[0].is_ok() {
        return Err(format!("RDMA write failed: {}", wc[0].status).into());
    }
    // check: dst.read_vec(0, LEN) once the MR buffer API has it.
    if dst.memory().iter().any(|&byte| byte != 0xab) {
        return Err("the destination does not hold the written bytes".into());
    }
    println!("{LEN} bytes written and checked on {}", ctx.device().name());
    Ok(())
}

// verbs/tests/first_program.rs includes this file and calls `run` only.
#[allow(dead_code)]
fn main() {
    if let Err(e) = run() {
        eprintln!("first_program: {e}");
        std::process::exit(1);
    }
}
