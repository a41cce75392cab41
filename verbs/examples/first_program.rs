//! A first RDMA program: open the default device (a real mlx5 card, else the
//! emulated `sim0`), make two RC QPs, connect them to each other, RDMA-write
//! 4 KiB from one buffer into the other and check it arrived. README.md shows
//! `run` as it stands here (a test keeps the two the same).
//!
//! cargo run -p verbs --example first_program

// first program: begin
use std::time::Duration;
use verbs::{AccessFlags, Context, QpInit, QpType, SendWr, Sge};

pub fn run() -> verbs::Result<()> {
    let ctx = Context::open_default()?; // a real mlx5 card, else the emulated sim0
    let pd = ctx.alloc_pd()?;
    let mut cq = ctx.create_cq(16)?;
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let (mut a, b) = (pd.create_qp(&init)?, pd.create_qp(&init)?);
    a.connect(&b.endpoint()?)?; // endpoints travel as text or bytes between hosts
    b.connect(&a.endpoint()?)?;

    let src = pd.reg_mr(vec![0u8; 4096], AccessFlags::NONE)?;
    let dst = pd.reg_mr(
        vec![0u8; 4096],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    src.write_at(0, &[0xab; 4096])?;
    let sge = [Sge::from_mr(&src, 0, 4096)];
    a.post_send(&SendWr::rdma_write(1, &sge, dst.addr() as u64, dst.rkey()))?;

    let wc = cq.wait_one(Duration::from_secs(5))?;
    assert!(wc.is_ok(), "RDMA write failed: {}", wc.status);
    assert_eq!(dst.read_vec(0, 4096)?, [0xab; 4096]);
    println!("4 KiB written and checked on {}", ctx.device().name());
    Ok(())
}
// first program: end

// verbs/tests/first_program.rs includes this file and calls `run` only.
#[allow(dead_code)]
fn main() {
    if let Err(e) = run() {
        eprintln!("first_program: {e}");
        std::process::exit(1);
    }
}
