//! The DEVX API in a few lines: open a device (a real mlx5 one if present,
//! else the emulated sim0), read a capability, create and query a firmware
//! object, and see a firmware error by name.
//!
//!     cargo run -p devx --example quickstart

use devx::Device;
use prm_layouts::{
    AllocPdIn, AllocPdOut, CreateCqIn, CreateCqOut, Opcode, QueryHcaCapIn, QueryHcaCapOut,
};

fn main() -> devx::Result<()> {
    // Die quietly when a pipe reader (`| head`) goes away, like other Unix tools.
    // SAFETY: first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let (dev, emulated) = Device::default_device()?;
    println!(
        "device {} ({})",
        dev.name(),
        if emulated { "emulated" } else { "mlx5" }
    );
    let ctx = dev.open()?;

    // General capabilities, current values (op_mod = cap type 0 << 1 | 1).
    let mut q = QueryHcaCapIn::new();
    q.set_opcode(Opcode::QueryHcaCap as u16);
    q.set_op_mod(1);
    let out = ctx.general_cmd(q.as_bytes(), QueryHcaCapOut::SIZE_BYTES)?;
    let caps = QueryHcaCapOut::from_slice(&out).expect("outbox has the requested length");
    let general = caps.capability().cmd_hca_cap();
    println!(
        "log_max_qp = {}, log_max_cq_sz = {}",
        general.log_max_qp(),
        general.log_max_cq_sz()
    );

    // A protection domain: destroyed when `pd` drops.
    let mut a = AllocPdIn::new();
    a.set_opcode(Opcode::AllocPd as u16);
    let pd = ctx.create(a.as_bytes(), AllocPdOut::SIZE_BYTES)?;
    println!("pd = {:#x}", pd.id());

    // A CQ without its memory: the device refuses, and says why by name.
    let mut c = CreateCqIn::new();
    c.set_opcode(Opcode::CreateCq as u16);
    c.cq_context_mut().set_log_cq_size(6);
    c.cq_context_mut()
        .set_c_eqn_or_apu_element(ctx.query_eqn(0)?);
    match ctx.create(c.as_bytes(), CreateCqOut::SIZE_BYTES) {
        Ok(_) => println!("unexpected: a CQ without memory was created"),
        Err(e) => println!("as expected: {e}"),
    }
    Ok(())
}
