//! On a machine with an mlx5 device: the kernel provider against the real
//! kernel and firmware (set `DEVX_KERNEL_DEVICE=<ibdev>` to pick a device).
//! Without one every test is reported as ignored with the reason "no mlx5
//! device found", never as passed: the file is a `harness = false` test
//! driven by libtest-mimic, whose trials can decide at run time to be
//! ignored with a reason, which the built-in harness cannot.
//!
//! Mailboxes are built by hand: big-endian PRM fields at the bit offsets of
//! the PRM guide (`mlx5_ifc.h` numbering, MSB-first inside big-endian dwords).

use devx::kernel::{discover, KernelContext, KernelDevice};
use devx::{ProviderContext, UarKind};
use libtest_mimic::{Arguments, Completion, Trial};

/// The device to test, or why there is none.
fn device() -> Result<KernelDevice, String> {
    let devices = discover();
    let want = std::env::var("DEVX_KERNEL_DEVICE").ok();
    let dev = match &want {
        Some(name) => devices.into_iter().find(|d| d.ibdev() == name),
        None => devices.into_iter().next(),
    };
    dev.ok_or_else(|| match want {
        Some(w) => format!("no mlx5 device named {w} found"),
        None => "no mlx5 device found".to_string(),
    })
}

type HwTest = fn(KernelDevice);

const TESTS: [(&str, HwTest); 6] = [
    ("hw_list", hw_list),
    ("hw_open", hw_open),
    ("hw_query_hca_cap", hw_query_hca_cap),
    ("hw_pd_cq_qp_lifecycle", hw_pd_cq_qp_lifecycle),
    (
        "hw_firmware_error_carries_a_syndrome",
        hw_firmware_error_carries_a_syndrome,
    ),
    ("hw_async_query", hw_async_query),
];

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let trials = TESTS
        .into_iter()
        .map(|(name, test)| {
            Trial::ignorable_test(name, move || match device() {
                Ok(dev) => {
                    test(dev);
                    Ok(Completion::Completed)
                }
                Err(why) => Ok(Completion::ignored_with(why)),
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// `DEVX_SET`: `width` ≤ 32 bits at bit offset `bit`, big-endian dwords.
fn set(buf: &mut [u8], bit: usize, width: usize, value: u64) {
    if width == 64 {
        buf[bit / 8..bit / 8 + 8].copy_from_slice(&value.to_be_bytes());
        return;
    }
    let dw = bit / 32;
    let shift = 32 - width - bit % 32;
    let mask: u32 = (((1u64 << width) - 1) << shift) as u32;
    let at = dw * 4;
    let old = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap());
    let new = (old & !mask) | (((value << shift) as u32) & mask);
    buf[at..at + 4].copy_from_slice(&new.to_be_bytes());
}

/// `DEVX_GET`.
fn get(buf: &[u8], bit: usize, width: usize) -> u32 {
    let dw = bit / 32;
    let shift = 32 - width - bit % 32;
    let at = dw * 4;
    let v = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap());
    ((u64::from(v) >> shift) & ((1u64 << width) - 1)) as u32
}

fn mailbox(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    set(&mut b, 0x00, 16, u64::from(opcode));
    set(&mut b, 0x30, 16, u64::from(op_mod));
    b
}

/// A page-aligned, zeroed, registered buffer.
struct Mem {
    map: memmap2::MmapMut,
    handle: u32,
    id: u32,
}

fn umem(ctx: &KernelContext, len: usize) -> Mem {
    let map = memmap2::MmapMut::map_anon(len).expect("anonymous memory");
    let (handle, id) = ctx
        .umem_reg(map.as_ptr() as usize, len, 0x1)
        .expect("UMEM_REG");
    Mem { map, handle, id }
}

struct Cq {
    handle: u32,
    cqn: u32,
    buf: Mem,
    dbr: Mem,
}

fn create_cq(ctx: &KernelContext, uar_page: u32, log_size: u32) -> Cq {
    let eqn = ctx.query_eqn(0).expect("QUERY_EQN of vector 0");
    let buf = umem(ctx, 64 << log_size);
    let dbr = umem(ctx, 4096);
    let mut inb = mailbox(0x400, 0, 272);
    let cqc = 0x80;
    set(&mut inb, cqc + 0x06, 1, 1); // dbr_umem_valid
    set(&mut inb, cqc + 0x20, 32, u64::from(dbr.id)); // dbr_umem_id
    set(&mut inb, cqc + 0x63, 5, u64::from(log_size)); // log_cq_size
    set(&mut inb, cqc + 0x68, 24, u64::from(uar_page)); // uar_page
    set(&mut inb, cqc + 0xa0, 32, u64::from(eqn)); // c_eqn_or_apu_element
    set(&mut inb, 0x2c0, 32, u64::from(buf.id)); // cq_umem_id
    set(&mut inb, 0x2e0, 1, 1); // cq_umem_valid
    let mut out = vec![0u8; 16];
    let handle = ctx.create(&inb, &mut out).expect("CREATE_CQ");
    assert_eq!(out[0], 0);
    let cqn = get(&out, 0x48, 24);
    Cq {
        handle,
        cqn,
        buf,
        dbr,
    }
}

fn destroy_cq(ctx: &KernelContext, cq: Cq) {
    let mut d = mailbox(0x401, 0, 16);
    set(&mut d, 0x48, 24, u64::from(cq.cqn));
    ctx.destroy(cq.handle, &d).expect("DESTROY_CQ");
    ctx.umem_dereg(cq.buf.handle).expect("dereg CQ buffer");
    ctx.umem_dereg(cq.dbr.handle).expect("dereg CQ doorbell");
    drop((cq.buf.map, cq.dbr.map));
}

fn query_cq(ctx: &KernelContext, cq: &Cq) -> Vec<u8> {
    let mut q = mailbox(0x402, 0, 16);
    set(&mut q, 0x48, 24, u64::from(cq.cqn));
    let mut out = vec![0u8; 272];
    ctx.query(cq.handle, &q, &mut out).expect("QUERY_CQ");
    out
}

fn hw_list(_dev: KernelDevice) {
    let d = devx::kernel::discover_in(std::path::Path::new("/sys"), std::path::Path::new("/dev"));
    for s in &d.skipped {
        eprintln!("kernel_hw: skipped {s}");
    }
    for dev in &d.devices {
        eprintln!("kernel_hw: {dev:?}");
        assert!(!dev.ibdev().is_empty());
        assert!(dev.dev_path().exists());
        assert_ne!(dev.node_guid(), 0);
        assert!(!dev.fw_ver().is_empty());
        assert!(!dev.ports().is_empty());
    }
}

fn hw_open(dev: KernelDevice) {
    let ctx = KernelContext::open(&dev).expect("DEVX context");
    eprintln!("kernel_hw: {:?} via {:?}", ctx.ucontext(), ctx.alloc_path());
    assert!(ctx.ucontext().response_length > 0);
    assert!(ctx.num_comp_vectors() > 0);
    let second = KernelContext::open(&dev).expect("a second context on another fd");
    drop(second);
}

fn hw_query_hca_cap(dev: KernelDevice) {
    let ctx = KernelContext::open(&dev).unwrap();
    // op_mod = (GENERAL << 1) | CUR.
    let q = mailbox(0x100, 0x1, 16);
    let mut out = vec![0u8; 4112];
    ctx.general(&q, &mut out).expect("QUERY_HCA_CAP");
    assert_eq!(out[0], 0);
    let cap = &out[16..];
    let log_max_uctx = get(cap, 0x463, 5);
    let log_max_cq = get(cap, 0xdb, 5);
    let log_pg_sz = get(cap, 0x258, 8);
    eprintln!(
        "kernel_hw: log_max_uctx {log_max_uctx}, log_max_cq {log_max_cq}, log_pg_sz {log_pg_sz}"
    );
    assert!(
        log_max_uctx > 0,
        "a DEVX context exists, so the device has DEVX"
    );
    assert!(log_max_cq > 0);
    // An unknown op_mod is refused by firmware with a status and syndrome.
    let bad = mailbox(0x100, 0x7ffe, 16);
    match ctx.general(&bad, &mut out) {
        Err(e) => eprintln!("kernel_hw: bad op_mod -> {e}"),
        Ok(()) => eprintln!("kernel_hw: firmware accepted op_mod 0x7ffe"),
    }
}

fn hw_pd_cq_qp_lifecycle(dev: KernelDevice) {
    let ctx = KernelContext::open(&dev).unwrap();
    let uar = ctx.uar_alloc(UarKind::NonCached).expect("UAR");

    let mut pd_out = vec![0u8; 16];
    let pd = ctx
        .create(&mailbox(0x800, 0, 16), &mut pd_out)
        .expect("ALLOC_PD");
    let pdn = get(&pd_out, 0x48, 24);

    let cq = create_cq(&ctx, uar.page_id, 6);
    let q = query_cq(&ctx, &cq);
    assert_eq!(get(&q, 0x80 + 0x63, 5), 6, "log_cq_size reads back");
    assert_eq!(get(&q, 0x80 + 0x68, 24), uar.page_id, "uar_page reads back");

    // RC QP: 16 x 16-byte RQ WQEs, then 16 x 64-byte SQ WQEBBs, in one umem.
    let wq = umem(&ctx, 4096);
    let qp_dbr = umem(&ctx, 4096);
    let mut inb = mailbox(0x500, 0, 272);
    let qpc = 0xc0;
    set(&mut inb, qpc + 0x08, 8, 0); // st = RC
    set(&mut inb, qpc + 0x13, 2, 3); // pm_state = migrated
    set(&mut inb, qpc + 0x28, 24, u64::from(pdn));
    set(&mut inb, qpc + 0x49, 4, 4); // log_rq_size
    set(&mut inb, qpc + 0x4d, 3, 0); // log_rq_stride: 16 bytes
    set(&mut inb, qpc + 0x51, 4, 4); // log_sq_size
    set(&mut inb, qpc + 0x58, 2, 1); // ts_format = default
    set(&mut inb, qpc + 0x68, 24, u64::from(uar.page_id));
    set(&mut inb, qpc + 0x3e8, 24, u64::from(cq.cqn)); // cqn_snd
    set(&mut inb, qpc + 0x4e8, 24, u64::from(cq.cqn)); // cqn_rcv
    set(&mut inb, qpc + 0x683, 1, 1); // dbr_umem_valid
    set(&mut inb, qpc + 0x720, 32, u64::from(qp_dbr.id)); // dbr_umem_id
    set(&mut inb, 0x840, 32, u64::from(wq.id)); // wq_umem_id
    set(&mut inb, 0x860, 1, 1); // wq_umem_valid
    let mut out = vec![0u8; 16];
    let qp = ctx.create(&inb, &mut out).expect("CREATE_QP");
    let qpn = get(&out, 0x48, 24);

    let query_state = |ctx: &KernelContext| {
        let mut q = mailbox(0x50b, 0, 16);
        set(&mut q, 0x48, 24, u64::from(qpn));
        let mut out = vec![0u8; 1024];
        ctx.query(qp, &q, &mut out).expect("QUERY_QP");
        get(&out, 0xc0, 4)
    };
    assert_eq!(query_state(&ctx), 0, "RST");

    let mut m = mailbox(0x502, 0, 272);
    set(&mut m, 0x48, 24, u64::from(qpn));
    set(&mut m, qpc + 0x13, 2, 3); // pm_state
    set(&mut m, qpc + 0xc0 + 0x128, 8, 1); // primary_address_path.vhca_port_num
    set(&mut m, qpc + 0x490, 1, 1); // rre
    set(&mut m, qpc + 0x491, 1, 1); // rwe
    ctx.modify(qp, &m, &mut [0u8; 16]).expect("RST2INIT_QP");
    assert_eq!(query_state(&ctx), 1, "INIT");

    let mut dq = mailbox(0x501, 0, 16);
    set(&mut dq, 0x48, 24, u64::from(qpn));
    ctx.destroy(qp, &dq).expect("DESTROY_QP");
    ctx.umem_dereg(wq.handle).unwrap();
    ctx.umem_dereg(qp_dbr.handle).unwrap();
    destroy_cq(&ctx, cq);
    let mut dp = mailbox(0x801, 0, 16);
    set(&mut dp, 0x48, 24, u64::from(pdn));
    ctx.destroy(pd, &dp).expect("DEALLOC_PD");
    ctx.uar_free(uar.handle).unwrap();
}

fn hw_firmware_error_carries_a_syndrome(dev: KernelDevice) {
    let ctx = KernelContext::open(&dev).unwrap();
    let uar = ctx.uar_alloc(UarKind::NonCached).unwrap();
    let eqn = ctx.query_eqn(0).unwrap();
    // A CQ of 2^31 entries does not exist.
    let mut inb = mailbox(0x400, 0, 272);
    set(&mut inb, 0x80 + 0x63, 5, 31);
    set(&mut inb, 0x80 + 0x68, 24, u64::from(uar.page_id));
    set(&mut inb, 0x80 + 0xb8, 8, u64::from(eqn));
    let e = ctx.create(&inb, &mut [0u8; 16]).unwrap_err();
    eprintln!("kernel_hw: oversized CQ -> {e}");
    assert!(e.is_firmware() || e.is_os(), "{e:?}");
    ctx.uar_free(uar.handle).unwrap();
}

fn hw_async_query(dev: KernelDevice) {
    let ctx = KernelContext::open(&dev).unwrap();
    let uar = ctx.uar_alloc(UarKind::NonCached).unwrap();
    let cq = create_cq(&ctx, uar.page_id, 5);
    let sync = query_cq(&ctx, &cq);
    let ch = ctx.create_cmd_channel().expect("async cmd fd");
    let mut q = mailbox(0x402, 0, 16);
    set(&mut q, 0x48, 24, u64::from(cq.cqn));
    ctx.query_async(cq.handle, &q, 272, 0x1234, &*ch)
        .expect("ASYNC_QUERY");
    let (wr_id, res) = ch.get().expect("a completion");
    assert_eq!(wr_id, 0x1234);
    let out = res.expect("QUERY_CQ succeeded");
    assert_eq!(out.len(), 272);
    assert_eq!(get(&out, 0x80 + 0x63, 5), get(&sync, 0x80 + 0x63, 5));
    assert!(ch.try_get().unwrap().is_none());

    // Events: completion events of this CQ, and PORT_CHANGE device-wide.
    let ev = ctx.create_event_channel(false).expect("event channel");
    ctx.subscribe_event(&*ev, Some(cq.handle), &[0], 0xc0ffee)
        .expect("subscribe CQ completions");
    if let Err(e) = ctx.subscribe_event(&*ev, None, &[0x09], 1) {
        eprintln!("kernel_hw: PORT_CHANGE subscription -> {e}");
    }
    assert!(
        ev.try_get().unwrap().is_none(),
        "no event without an armed CQ"
    );
    drop(ev);
    destroy_cq(&ctx, cq);
    ctx.uar_free(uar.handle).unwrap();
}
