//! `bench cmd`: per-command cost through the DEVX API on the emulated device,
//! with few and with many live objects.

use std::time::Instant;

use devx::{access, Context, Device, Uar, Umem};
use prm_layouts::{
    AllocPdIn, AllocPdOut, CreateCqIn, CreateCqOut, Opcode, QueryHcaCapIn, QueryHcaCapOut,
};

use crate::bench::{per_iter, Metric};
use crate::CliResult;

const LOG_CQ_SIZE: u8 = 6;

struct CqResources {
    uar: Uar,
    buf: Umem<Vec<u8>>,
    dbr: Umem<Vec<u8>>,
    eqn: u32,
}

fn cq_resources(ctx: &Context) -> devx::Result<CqResources> {
    let uar = Uar::alloc(ctx)?;
    let buf = Umem::register(ctx, vec![0u8; 64 << LOG_CQ_SIZE], access::LOCAL_WRITE)?;
    let dbr = Umem::register(ctx, vec![0u8; 64], access::LOCAL_WRITE)?;
    let eqn = ctx.query_eqn(0)?;
    Ok(CqResources { uar, buf, dbr, eqn })
}

fn create_cq_inbox(r: &CqResources) -> CreateCqIn {
    let mut m = CreateCqIn::new();
    m.set_opcode(Opcode::CreateCq as u16);
    m.set_cq_umem_valid(1);
    m.set_cq_umem_id(r.buf.id());
    let c = m.cq_context_mut();
    c.set_log_cq_size(LOG_CQ_SIZE);
    c.set_uar_page(r.uar.page_id());
    c.set_c_eqn_or_apu_element(r.eqn);
    c.set_dbr_umem_valid(1);
    c.set_dbr_umem_id(r.dbr.id());
    m
}

fn measure(ctx: &Context, r: &CqResources, n: u64) -> devx::Result<(f64, f64)> {
    let cq_in = create_cq_inbox(r);
    let start = Instant::now();
    for _ in 0..n {
        let cq = ctx.create(cq_in.as_bytes(), CreateCqOut::SIZE_BYTES)?;
        cq.destroy()?;
    }
    let pair = per_iter(start, n);
    let mut cap_in = QueryHcaCapIn::new();
    cap_in.set_opcode(Opcode::QueryHcaCap as u16);
    cap_in.set_op_mod(1);
    let mut out = vec![0u8; QueryHcaCapOut::SIZE_BYTES];
    let start = Instant::now();
    for _ in 0..n {
        ctx.general_cmd_into(cap_in.as_bytes(), &mut out)?;
    }
    Ok((pair, per_iter(start, n)))
}

pub fn cmd(n: u64) -> CliResult<Vec<Metric>> {
    let run = || -> devx::Result<Vec<Metric>> {
        let dev = Device::emulated("sim0")?;
        let ctx = dev.open()?;
        let r = cq_resources(&ctx)?;
        let mut pd_in = AllocPdIn::new();
        pd_in.set_opcode(Opcode::AllocPd as u16);
        let mut live = Vec::new();
        let mut metrics = Vec::new();
        for target in [1_000usize, 100_000] {
            while live.len() < target {
                live.push(ctx.create(pd_in.as_bytes(), AllocPdOut::SIZE_BYTES)?);
            }
            let (pair, cap) = measure(&ctx, &r, n)?;
            metrics.push(Metric {
                name: format!("cq_create_destroy_ns_{target}_live"),
                value: pair,
                unit: "ns per CREATE_CQ + DESTROY_CQ pair",
            });
            metrics.push(Metric {
                name: format!("query_hca_cap_ns_{target}_live"),
                value: cap,
                unit: "ns per QUERY_HCA_CAP",
            });
        }
        metrics.push(Metric {
            name: "iterations".into(),
            value: n as f64,
            unit: "per measurement",
        });
        Ok(metrics)
    };
    run().map_err(|e| e.to_string())
}
