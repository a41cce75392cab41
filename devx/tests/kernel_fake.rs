//! The kernel provider against a fake kernel: every DEVX method, the exact
//! ioctl bytes it sends, and how it reads every kind of answer.

use std::sync::Arc;

use devx::kernel::abi::{
    self, IoctlAttr, IoctlHdr, UcontextResp, ATTR_LEN, HDR_LEN, UVERBS_ATTR_F_MANDATORY as M,
};
use devx::kernel::fake::{Call, FakeKernel, Tamper};
use devx::kernel::{AllocPath, KernelContext, KernelDevice};
use devx::uar::BfHalf;
use devx::{BfStore, Error, FwReport, Provider, ProviderContext, UarKind};

const DEV: &str = "/dev/infiniband/uverbs0";

fn fake() -> Arc<FakeKernel> {
    Arc::new(FakeKernel::new())
}

fn device(k: &Arc<FakeKernel>) -> KernelDevice {
    KernelDevice::new("mlx5_0", DEV).with_sys(k.clone())
}

fn open(k: &Arc<FakeKernel>) -> KernelContext {
    KernelContext::open(&device(k)).expect("context opens on the fake kernel")
}

/// A big-endian PRM inbox of `len` bytes with this opcode / op_mod.
fn inbox(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[0..2].copy_from_slice(&opcode.to_be_bytes());
    b[6..8].copy_from_slice(&op_mod.to_be_bytes());
    b
}

/// The inbox naming a CQ (`cqn` at byte 8, low 24 bits).
fn cq_inbox(opcode: u16, cqn: u32, len: usize) -> Vec<u8> {
    let mut b = inbox(opcode, 0, len);
    b[8..12].copy_from_slice(&(cqn & 0xff_ffff).to_be_bytes());
    b
}

fn attr(id: u16, len: u16, flags: u16, data: u64) -> IoctlAttr {
    IoctlAttr {
        attr_id: id,
        len,
        flags,
        attr_data: 0,
        data,
    }
}

/// The exact bytes an ioctl must carry: header then attributes.
fn expect_raw(call: &Call, object: u16, method: u16, attrs: &[IoctlAttr]) {
    let hdr = IoctlHdr {
        length: (HDR_LEN + ATTR_LEN * attrs.len()) as u16,
        object_id: object,
        method_id: method,
        num_attrs: attrs.len() as u16,
        reserved1: 0,
        driver_id: 1,
        reserved2: 0,
    };
    let mut want = hdr.to_bytes().to_vec();
    for a in attrs {
        want.extend_from_slice(&a.to_bytes());
    }
    assert_eq!(call.request, 0xC018_1B01, "RDMA_VERBS_IOCTL");
    assert_eq!(
        call.raw,
        want,
        "{} bytes differ:\n got {:02x?}\nwant {:02x?}",
        call.method_name(),
        call.raw,
        want
    );
    assert_eq!(call.errno, None, "{} failed", call.method_name());
}

fn last(k: &FakeKernel) -> Call {
    k.last_call().expect("an ioctl was made")
}

fn no_violations(k: &FakeKernel) {
    assert!(
        k.violations().is_empty(),
        "departures from rdma-core: {:?}",
        k.violations()
    );
}

fn os_errno(e: &Error) -> (String, i32) {
    match e {
        Error::Os { op, errno } => (op.clone(), *errno),
        other => panic!("expected an OS error, got {other:?}"),
    }
}

// ---------------------------------------------------------------- context

/// The 32-byte `mlx5_ib_alloc_ucontext_req_v2` rdma-core sends, with DEVX:
/// 16 bfregs, 4 low-latency, DEVX flag, CQE version 1, 4K_UAR | DYN_UAR.
fn rdma_core_req() -> [u8; 32] {
    let mut req = [0u8; 32];
    req[0..4].copy_from_slice(&16u32.to_ne_bytes());
    req[4..8].copy_from_slice(&4u32.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = 1;
    req[24..32].copy_from_slice(&3u64.to_ne_bytes());
    req
}

#[test]
fn open_allocates_a_devx_context_through_the_ioctl() {
    let k = fake();
    let ctx = open(&k);
    let opened = k.opened();
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].0, std::path::Path::new(DEV));
    assert_eq!(opened[0].1, libc::O_RDWR | libc::O_CLOEXEC);

    // GET_CONTEXT, then the async-event file, as rdma-core allocates it.
    let calls = k.calls();
    assert_eq!(calls.len(), 2);
    expect_raw(
        &calls[1],
        abi::verbs::UVERBS_OBJECT_ASYNC_EVENT,
        abi::verbs::UVERBS_METHOD_ASYNC_EVENT_ALLOC,
        &[attr(
            abi::verbs::UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE,
            0,
            M,
            0,
        )],
    );
    let c = &calls[0];
    assert_eq!(c.hdr.object_id, 0);
    assert_eq!(c.hdr.method_id, 3);
    assert_eq!(c.hdr.length, 24 + 4 * 16);
    assert_eq!(c.hdr.driver_id, 1);
    let ids: Vec<(u16, u16, u16)> = c
        .attrs
        .iter()
        .map(|a| (a.attr_id, a.len, a.flags))
        .collect();
    assert_eq!(
        ids,
        vec![(0, 4, M), (1, 8, M), (0x1000, 32, M), (0x1001, 72, M)]
    );
    assert_eq!(c.input(0x1000), Some(&rdma_core_req()[..]));

    assert_eq!(ctx.alloc_path(), AllocPath::Ioctl);
    assert_eq!(ctx.num_comp_vectors(), 4);
    assert_eq!(ctx.core_support(), 1);
    let r = ctx.ucontext();
    assert_eq!(r.response_length, 72);
    assert_eq!(r.cqe_version, 1);
    assert_eq!(r.tot_bfregs, 0, "dynamic UARs: no static bfregs");
    assert_eq!(r.log_uar_size, 12);
    assert_eq!(r.dump_fill_mkey, 0x100);
    assert_eq!(ctx.info().name, "mlx5_0");
    no_violations(&k);
}

#[test]
fn open_falls_back_to_write_when_the_ioctl_method_is_missing() {
    let k = fake();
    k.set_ioctl_get_context(false);
    let ucontext = UcontextResp {
        qp_tab_size: 77,
        num_ports: 2,
        cqe_version: 1,
        ..Default::default()
    };
    k.set_ucontext(ucontext);
    let ctx = open(&k);
    assert_eq!(ctx.alloc_path(), AllocPath::Write);
    assert_eq!(k.calls()[0].errno, Some(libc::EPROTONOSUPPORT));
    let w = k.writes();
    assert_eq!(w.len(), 1);
    let b = &w[0];
    assert_eq!(b.len(), 48);
    assert_eq!(
        u32::from_ne_bytes(b[0..4].try_into().unwrap()),
        0,
        "IB_USER_VERBS_CMD_GET_CONTEXT"
    );
    assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 12, "in_words");
    assert_eq!(u16::from_ne_bytes([b[6], b[7]]), 20, "out_words");
    assert_ne!(
        u64::from_ne_bytes(b[8..16].try_into().unwrap()),
        0,
        "response pointer"
    );
    assert_eq!(&b[16..48], &rdma_core_req()[..]);
    assert_eq!(ctx.ucontext().qp_tab_size, 77);
    assert_eq!(ctx.ucontext().num_ports, 2);
    assert_eq!(ctx.num_comp_vectors(), 4);
    // The context works like any other.
    let mut out = [0u8; 16];
    ctx.create(&inbox(0x800, 0, 16), &mut out).unwrap();
    // The write path's verbs async fd is closed with the context.
    assert_eq!(k.open_fds(), 2);
    drop(ctx);
    assert_eq!(k.open_fds(), 0);
}

#[test]
fn open_falls_back_to_write_on_enotty() {
    let k = fake();
    k.tamper_next(0, 3, Tamper::Errno(libc::ENOTTY));
    let ctx = open(&k);
    assert_eq!(ctx.alloc_path(), AllocPath::Write);
}

#[test]
fn open_errors_are_reported_and_leak_nothing() {
    let k = fake();
    k.fail_open(libc::EPERM);
    let e = device(&k).open().err().unwrap();
    assert_eq!(os_errno(&e), (format!("open {DEV}"), libc::EPERM));

    // Firmware without DEVX: the kernel refuses the DEVX context with EINVAL.
    k.set_devx(false);
    let e = KernelContext::open(&device(&k)).unwrap_err();
    assert_eq!(
        os_errno(&e),
        ("GET_CONTEXT(DEVX)".to_string(), libc::EINVAL)
    );
    assert_eq!(k.open_fds(), 0, "the uverbs fd is closed again");

    // A kernel that does not know the DEVX flag.
    let k = fake();
    k.tamper_next(0, 3, Tamper::Errno(libc::EOPNOTSUPP));
    let e = KernelContext::open(&device(&k)).unwrap_err();
    assert!(e.is_unsupported(), "{e:?}");
    assert_eq!(k.open_fds(), 0);

    // Both interfaces refuse.
    let k = fake();
    k.set_ioctl_get_context(false);
    k.set_devx(false);
    let e = KernelContext::open(&device(&k)).unwrap_err();
    assert_eq!(os_errno(&e).1, libc::EINVAL);
    assert_eq!(k.open_fds(), 0);
}

#[test]
fn kernel_device_is_a_provider() {
    let k = fake();
    let dev = device(&k);
    let info = Provider::info(&dev);
    assert_eq!(info.name, "mlx5_0");
    assert_eq!(info.provider, "kernel");
    assert!(!info.emulated);
    assert_eq!(info.location, DEV);
    assert_eq!(
        info.vendor_id, 0x02c9,
        "the IEEE vendor id, as verbs reports it"
    );
    assert_eq!(dev.vendor_id(), 0x15b3, "the PCI vendor");
    let ctx: Arc<dyn ProviderContext> = dev.open().unwrap();
    assert_eq!(ctx.info(), info);
}

#[test]
fn garbage_context_response_does_not_panic() {
    let k = fake();
    k.tamper_next(0, 3, Tamper::GarbageOutputs);
    let ctx = open(&k);
    assert_eq!(ctx.ucontext().qp_tab_size, u32::MAX);
    assert_eq!(ctx.num_comp_vectors(), u32::MAX);
}

// ---------------------------------------------------------------- objects

#[test]
fn create_query_modify_destroy_send_the_exact_bytes() {
    let k = fake();
    let ctx = open(&k);
    k.clear_calls();

    let create_in = inbox(0x400, 0, 272);
    let mut create_out = vec![0u8; 16];
    let h = ctx.create(&create_in, &mut create_out).unwrap();
    let c = last(&k);
    // The handle attribute goes out empty; the kernel writes the handle back.
    expect_raw(
        &c,
        0x1001,
        0x1000,
        &[
            attr(0x1000, 0, M, 0),
            attr(0x1001, 272, M, create_in.as_ptr() as u64),
            attr(0x1002, 16, M, create_out.as_mut_ptr() as u64),
        ],
    );
    assert_eq!(c.input(0x1001), Some(&create_in[..]));
    assert_eq!(create_out[0], 0, "status OK");
    let cqn = u32::from_be_bytes(create_out[8..12].try_into().unwrap());
    assert_ne!(cqn, 0);

    let q_in = cq_inbox(0x402, cqn, 16);
    let mut q_out = vec![0u8; 272];
    ctx.query(h, &q_in, &mut q_out).unwrap();
    expect_raw(
        &last(&k),
        0x1001,
        0x1003,
        &[
            attr(0x1000, 0, M, u64::from(h)),
            attr(0x1001, 16, M, q_in.as_ptr() as u64),
            attr(0x1002, 272, M, q_out.as_mut_ptr() as u64),
        ],
    );

    let m_in = cq_inbox(0x403, cqn, 272);
    let mut m_out = vec![0u8; 16];
    ctx.modify(h, &m_in, &mut m_out).unwrap();
    expect_raw(
        &last(&k),
        0x1001,
        0x1002,
        &[
            attr(0x1000, 0, M, u64::from(h)),
            attr(0x1001, 272, M, m_in.as_ptr() as u64),
            attr(0x1002, 16, M, m_out.as_mut_ptr() as u64),
        ],
    );

    assert_eq!(k.live_objects(), 1);
    ctx.destroy(h, &cq_inbox(0x401, cqn, 16)).unwrap();
    expect_raw(
        &last(&k),
        0x1001,
        0x1001,
        &[attr(0x1000, 0, M, u64::from(h))],
    );
    assert_eq!(k.live_objects(), 0);
    no_violations(&k);
}

#[test]
fn handles_are_what_the_kernel_returned() {
    let k = fake();
    let ctx = open(&k);
    let mut out = [0u8; 16];
    let a = ctx.create(&inbox(0x800, 0, 16), &mut out).unwrap();
    let b = ctx.create(&inbox(0x800, 0, 16), &mut out).unwrap();
    assert_ne!(a, b);
    ctx.destroy(a, &inbox(0x801, 0, 16)).unwrap();
    ctx.destroy(b, &inbox(0x801, 0, 16)).unwrap();
}

#[test]
fn general_command_bytes_and_reply() {
    let k = fake();
    let mut reply = vec![0u8; 4112];
    reply[16..20].copy_from_slice(&0xfeed_beefu32.to_be_bytes());
    k.set_fw_reply(0x100, reply);
    let ctx = open(&k);
    let q = inbox(0x100, 1, 16);
    let mut out = vec![0u8; 4112];
    ctx.general(&q, &mut out).unwrap();
    expect_raw(
        &last(&k),
        0x1000,
        0x1000,
        &[
            attr(0x1000, 16, M, q.as_ptr() as u64),
            attr(0x1001, 4112, M, out.as_mut_ptr() as u64),
        ],
    );
    assert_eq!(out[0], 0);
    assert_eq!(&out[16..20], &0xfeed_beefu32.to_be_bytes());
    no_violations(&k);
}

#[test]
fn firmware_failures_carry_status_and_syndrome_from_the_outbox() {
    let k = fake();
    let ctx = open(&k);
    k.fail_opcode(0x400, 0x3, 0x1234_5678);
    let mut out = vec![0u8; 16];
    let e = ctx.create(&inbox(0x400, 0, 272), &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::Firmware {
            opcode: 0x400,
            op_mod: 0,
            status: 0x3,
            syndrome: 0x1234_5678,
            report: FwReport::Outbox
        }
    );
    assert_eq!(e.errno(), libc::EREMOTEIO);
    assert_eq!(out[0], 0x3, "the outbox came back");
    assert_eq!(k.live_objects(), 0, "no object on a failed create");
    assert_eq!(last(&k).errno, Some(libc::EREMOTEIO));

    k.fail_opcode(0x100, 0x5, 0xabc);
    let e = ctx
        .general(&inbox(0x100, 1, 16), &mut vec![0u8; 4112])
        .unwrap_err();
    assert_eq!(e.status(), Some(0x5));
    assert_eq!(e.syndrome(), Some(0xabc));
    assert!(matches!(
        e,
        Error::Firmware {
            opcode: 0x100,
            op_mod: 1,
            ..
        }
    ));

    k.clear_fw_failures();
    let mut out = vec![0u8; 16];
    let h = ctx.create(&inbox(0x400, 0, 272), &mut out).unwrap();
    let cqn = u32::from_be_bytes(out[8..12].try_into().unwrap());
    k.fail_opcode(0x402, 0x9, 7);
    let e = ctx
        .query(h, &cq_inbox(0x402, cqn, 16), &mut vec![0u8; 272])
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Firmware {
                opcode: 0x402,
                status: 9,
                syndrome: 7,
                ..
            }
        ),
        "{e:?}"
    );
    k.fail_opcode(0x403, 0x4, 8);
    let e = ctx
        .modify(h, &cq_inbox(0x403, cqn, 272), &mut out)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Firmware {
                opcode: 0x403,
                status: 4,
                syndrome: 8,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn eremoteio_without_an_outbox_is_an_os_error() {
    let k = fake();
    let ctx = open(&k);
    k.tamper_next(0x1001, 0x1000, Tamper::RemoteIoWithoutOutbox);
    let e = ctx
        .create(&inbox(0x800, 0, 16), &mut [0u8; 16])
        .unwrap_err();
    let (op, errno) = os_errno(&e);
    assert_eq!(errno, libc::EREMOTEIO);
    assert!(op.starts_with("DEVX_OBJ_CREATE("), "{op}");
}

#[test]
fn kernel_errnos_become_os_errors_named_by_method_and_command() {
    let k = fake();
    let ctx = open(&k);
    k.tamper_next(0x1001, 0x1000, Tamper::Errno(libc::EPERM));
    let e = ctx
        .create(&inbox(0x400, 0, 272), &mut [0u8; 16])
        .unwrap_err();
    let (op, errno) = os_errno(&e);
    assert_eq!(errno, libc::EPERM);
    assert_eq!(op, "DEVX_OBJ_CREATE(CREATE_CQ)");

    // A handle the kernel does not know.
    let e = ctx
        .query(4242, &cq_inbox(0x402, 1, 16), &mut [0u8; 272])
        .unwrap_err();
    let (op, errno) = os_errno(&e);
    assert_eq!(errno, libc::ENOENT);
    assert!(op.starts_with("DEVX_OBJ_QUERY("), "{op}");

    // An opcode outside the method's class: the kernel answers EINVAL.
    let mut out = [0u8; 16];
    let h = ctx.create(&inbox(0x800, 0, 16), &mut out).unwrap();
    let e = ctx
        .modify(h, &inbox(0x800, 0, 16), &mut [0u8; 16])
        .unwrap_err();
    assert_eq!(os_errno(&e).1, libc::EINVAL);
    let e = ctx
        .create(&inbox(0x402, 0, 16), &mut [0u8; 16])
        .unwrap_err();
    assert_eq!(os_errno(&e).1, libc::EINVAL);

    k.tamper_next(0x1000, 0x1000, Tamper::Errno(libc::EOPNOTSUPP));
    let e = ctx
        .general(&inbox(0x100, 0, 16), &mut [0u8; 16])
        .unwrap_err();
    let (op, errno) = os_errno(&e);
    assert_eq!(errno, libc::EOPNOTSUPP);
    assert!(op.starts_with("DEVX_OTHER("), "{op}");
}

#[test]
fn mailboxes_the_abi_cannot_carry_are_refused_before_the_kernel() {
    let k = fake();
    let ctx = open(&k);
    let n = k.calls().len();
    assert!(ctx
        .create(&[0u8; 8], &mut [0u8; 16])
        .unwrap_err()
        .is_argument());
    assert!(ctx
        .create(&[0u8; 16], &mut [0u8; 8])
        .unwrap_err()
        .is_argument());
    assert!(ctx
        .general(&vec![0u8; 70_000], &mut [0u8; 16])
        .unwrap_err()
        .is_argument());
    assert!(ctx
        .query(0, &[0u8; 16], &mut vec![0u8; 70_000])
        .unwrap_err()
        .is_argument());
    assert_eq!(k.calls().len(), n, "nothing reached the kernel");
}

#[test]
fn destroy_failures_are_errno_only() {
    let k = fake();
    let ctx = open(&k);
    let mut out = vec![0u8; 16];
    let h = ctx.create(&inbox(0x400, 0, 272), &mut out).unwrap();
    let cqn = u32::from_be_bytes(out[8..12].try_into().unwrap());
    let destroy_in = cq_inbox(0x401, cqn, 16);

    // Firmware refuses DESTROY_CQ: the kernel turns RES_BUSY into EBUSY and
    // keeps the handle.
    k.fail_opcode(0x401, 0x6, 0x99);
    let e = ctx.destroy(h, &destroy_in).unwrap_err();
    assert_eq!(
        e,
        Error::Firmware {
            opcode: 0x401,
            op_mod: 0,
            status: 0x6,
            syndrome: 0,
            report: FwReport::ErrnoOnly
        }
    );
    assert_eq!(k.live_objects(), 1);
    // Without a destroy command to name, only the errno is left.
    let e = ctx.destroy(h, &[]).unwrap_err();
    assert_eq!(os_errno(&e), ("DEVX_OBJ_DESTROY".to_string(), libc::EBUSY));
    k.clear_fw_failures();
    ctx.destroy(h, &destroy_in).unwrap();

    // Gone: ENOENT is not a firmware failure.
    let e = ctx.destroy(h, &destroy_in).unwrap_err();
    let (op, errno) = os_errno(&e);
    assert_eq!(errno, libc::ENOENT);
    assert!(op.starts_with("DEVX_OBJ_DESTROY("), "{op}");
}

#[test]
fn closing_the_context_releases_everything() {
    let k = fake();
    let ctx = open(&k);
    let mut out = [0u8; 16];
    for _ in 0..3 {
        ctx.create(&inbox(0x800, 0, 16), &mut out).unwrap();
    }
    let ch = ctx.create_cmd_channel().unwrap();
    let ev = ctx.create_event_channel(false).unwrap();
    // The uverbs file, its async-event file and the two channels.
    assert_eq!(k.open_fds(), 4);
    drop(ctx);
    assert_eq!(k.destroyed_on_close(), 3);
    drop((ch, ev));
    assert_eq!(k.open_fds(), 0);
}

// ---------------------------------------------------------------- async

#[test]
fn async_query_and_its_completion() {
    let k = fake();
    let ctx = open(&k);
    let mut out = vec![0u8; 16];
    let h = ctx.create(&inbox(0x400, 0, 272), &mut out).unwrap();
    let cqn = u32::from_be_bytes(out[8..12].try_into().unwrap());

    let ch = ctx.create_cmd_channel().unwrap();
    expect_raw(&last(&k), 0x1004, 0x1000, &[attr(0x1000, 0, M, 0)]);
    assert!(ch.fd() >= 0);
    assert!(ch.try_get().unwrap().is_none(), "nothing queued yet");

    let q = cq_inbox(0x402, cqn, 16);
    ctx.query_async(h, &q, 272, 0xabc, &*ch).unwrap();
    expect_raw(
        &last(&k),
        0x1001,
        0x1004,
        &[
            attr(0x1000, 0, M, u64::from(h)),
            attr(0x1001, 16, M, q.as_ptr() as u64),
            attr(0x1004, 8, M, 272),
            attr(0x1003, 8, M, 0xabc),
            attr(0x1002, 0, M, ch.fd() as u64),
        ],
    );
    let (wr_id, res) = ch.try_get().unwrap().expect("a completion");
    assert_eq!(wr_id, 0xabc);
    let outbox = res.unwrap();
    assert_eq!(outbox.len(), 272);
    assert_eq!(outbox[0], 0);

    // A firmware failure arrives as an error naming the query.
    k.fail_opcode(0x402, 0x5, 0x77);
    ctx.query_async(h, &q, 64, 9, &*ch).unwrap();
    let (wr_id, res) = ch.get().unwrap();
    assert_eq!(wr_id, 9);
    assert_eq!(
        res.unwrap_err(),
        Error::Firmware {
            opcode: 0x402,
            op_mod: 0,
            status: 5,
            syndrome: 0x77,
            report: FwReport::Outbox
        }
    );
    no_violations(&k);
}

#[test]
fn blocking_get_waits_for_a_completion_from_another_thread() {
    let k = fake();
    let ctx = Arc::new(open(&k));
    let mut out = vec![0u8; 16];
    let h = ctx.create(&inbox(0x400, 0, 272), &mut out).unwrap();
    let cqn = u32::from_be_bytes(out[8..12].try_into().unwrap());
    let ch = ctx.create_cmd_channel().unwrap();
    let waiter = {
        let ch = ch.clone();
        std::thread::spawn(move || ch.get())
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    ctx.query_async(h, &cq_inbox(0x402, cqn, 16), 32, 77, &*ch)
        .unwrap();
    let (wr_id, res) = waiter.join().unwrap().unwrap();
    assert_eq!(wr_id, 77);
    assert_eq!(res.unwrap().len(), 32);
}

#[test]
fn async_query_errors() {
    let k = fake();
    let ctx = open(&k);
    let mut out = vec![0u8; 16];
    let h = ctx.create(&inbox(0x400, 0, 272), &mut out).unwrap();
    let cqn = u32::from_be_bytes(out[8..12].try_into().unwrap());
    let q = cq_inbox(0x402, cqn, 16);
    let ch = ctx.create_cmd_channel().unwrap();

    // The kernel caps queued output at 1 MiB per channel.
    let mut queued = 0;
    let err = loop {
        match ctx.query_async(h, &q, 0xffff, queued, &*ch) {
            Ok(()) => queued += 1,
            Err(e) => break e,
        }
        assert!(queued < 100);
    };
    assert_eq!(queued, 16);
    let (op, errno) = os_errno(&err);
    assert_eq!(errno, libc::EAGAIN);
    assert!(op.starts_with("DEVX_OBJ_ASYNC_QUERY("), "{op}");
    for i in 0..queued {
        let (wr_id, res) = ch.get().unwrap();
        assert_eq!(wr_id, i);
        assert_eq!(res.unwrap().len(), 0xffff);
    }

    assert!(ctx
        .query_async(h, &q, 8, 0, &*ch)
        .unwrap_err()
        .is_argument());
    assert!(ctx
        .query_async(h, &q, 70_000, 0, &*ch)
        .unwrap_err()
        .is_argument());
    let e = ctx.query_async(h + 100, &q, 16, 0, &*ch).unwrap_err();
    assert_eq!(os_errno(&e).1, libc::ENOENT);

    // A channel of another provider is refused before the kernel.
    struct Foreign;
    impl devx::CmdChannel for Foreign {
        fn fd(&self) -> i32 {
            -1
        }
        fn try_get(&self) -> devx::Result<Option<devx::AsyncCompletion>> {
            Ok(None)
        }
        fn get(&self) -> devx::Result<devx::AsyncCompletion> {
            Ok((0, Ok(Vec::new())))
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }
    assert!(ctx
        .query_async(h, &q, 16, 0, &Foreign)
        .unwrap_err()
        .is_argument());
}

#[test]
fn odd_completion_reads_are_errors_not_panics() {
    let k = fake();
    let ctx = open(&k);
    let ch = ctx.create_cmd_channel().unwrap();
    let fd = ch.fd();
    k.push_read(fd, Ok(vec![1, 2, 3]));
    assert!(matches!(ch.try_get(), Err(Error::Provider { .. })));
    k.push_read(fd, Err(libc::EIO));
    assert_eq!(
        os_errno(&ch.try_get().unwrap_err()),
        ("read(DEVX async cmd fd)".into(), libc::EIO)
    );
    // Exactly a wr_id: an empty outbox, handed over as is.
    k.push_read(fd, Ok(5u64.to_ne_bytes().to_vec()));
    let (wr_id, res) = ch.try_get().unwrap().unwrap();
    assert_eq!((wr_id, res.unwrap()), (5, Vec::new()));
    // An unknown wr_id with a failed status still names the failure.
    let mut c = 6u64.to_ne_bytes().to_vec();
    c.extend_from_slice(&[0x2, 0, 0, 0, 0, 0, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 0]);
    k.push_read(fd, Ok(c));
    let (wr_id, res) = ch.try_get().unwrap().unwrap();
    assert_eq!(wr_id, 6);
    assert!(matches!(
        res,
        Err(Error::Firmware {
            status: 2,
            syndrome: 0x42,
            ..
        })
    ));
}

// ---------------------------------------------------------------- umem

#[test]
fn umem_register_and_deregister() {
    let k = fake();
    let ctx = open(&k);
    let buf = vec![0u8; 8192];
    let addr = buf.as_ptr() as usize;
    let (h, id) = ctx.umem_reg(addr, buf.len(), 0x7).unwrap();
    let c = last(&k);
    let out_ptr = c.attrs[5].data;
    expect_raw(
        &c,
        0x1002,
        0x1000,
        &[
            attr(0x1000, 0, M, 0),
            attr(0x1001, 8, M, addr as u64),
            attr(0x1002, 8, M, 8192),
            attr(0x1003, 4, M, 0x7),
            attr(0x1005, 8, 0, !0xfff),
            attr(0x1004, 4, M, out_ptr),
        ],
    );
    assert_ne!(id, 0);
    no_violations(&k);

    ctx.umem_dereg(h).unwrap();
    expect_raw(
        &last(&k),
        0x1002,
        0x1001,
        &[attr(0x1000, 0, M, u64::from(h))],
    );
    let e = ctx.umem_dereg(h).unwrap_err();
    assert_eq!(os_errno(&e), ("DEVX_UMEM_DEREG".into(), libc::ENOENT));

    // Remote write without local write is refused by the kernel.
    let e = ctx.umem_reg(addr, 4096, 0x2).unwrap_err();
    assert_eq!(os_errno(&e), ("DEVX_UMEM_REG".into(), libc::EINVAL));
    // Access bits the kernel does not know.
    let e = ctx.umem_reg(addr, 4096, 0x8).unwrap_err();
    assert_eq!(os_errno(&e).1, libc::EINVAL);
    assert!(ctx.umem_reg(addr, 0, 1).unwrap_err().is_argument());
    // Pinning beyond RLIMIT_MEMLOCK.
    k.tamper_next(0x1002, 0x1000, Tamper::Errno(libc::ENOMEM));
    assert_eq!(
        os_errno(&ctx.umem_reg(addr, 4096, 1).unwrap_err()).1,
        libc::ENOMEM
    );
}

#[test]
fn umem_without_its_id_is_rolled_back() {
    let k = fake();
    let ctx = open(&k);
    k.tamper_next(0x1002, 0x1000, Tamper::SucceedSilently);
    let e = ctx.umem_reg(0x10000, 4096, 1).unwrap_err();
    assert!(matches!(e, Error::Provider { .. }), "{e:?}");
}

// ---------------------------------------------------------------- uar

#[test]
fn uar_alloc_maps_the_page_and_rings_doorbells() {
    let k = fake();
    let ctx = open(&k);
    let uar = ctx.uar_alloc(UarKind::BlueFlame).unwrap();
    let c = last(&k);
    let ptrs: Vec<u64> = c.attrs[2..].iter().map(|a| a.data).collect();
    expect_raw(
        &c,
        0x1008,
        0x1000,
        &[
            attr(0x1000, 0, M, 0),
            attr(0x1001, 8, M, 0),
            attr(0x1002, 8, M, ptrs[0]),
            attr(0x1003, 4, M, ptrs[1]),
            attr(0x1004, 4, M, ptrs[2]),
        ],
    );
    assert_eq!(k.mappings(), 1);
    uar.page.write64(0x800, 0x1122_3344_5566_7788);
    assert_eq!(
        k.read_uar_u64(uar.page_id, 0x800),
        Some(0x1122_3344_5566_7788)
    );
    assert!(!uar.page.base().is_null());
    // The mapped page takes a send doorbell as the ringer's own store.
    assert!(matches!(uar.page.bf_store(), BfStore::Mmio));
    let second = BfHalf::FIRST.other().offset();
    // SAFETY: the second BlueFlame half lies inside the live 4 KiB mapping,
    // 8-byte aligned.
    unsafe { (uar.page.base().add(second) as *mut u64).write_volatile(0x99aa_bbcc_ddee_ff00) };
    assert_eq!(
        k.read_uar_u64(uar.page_id, second),
        Some(0x99aa_bbcc_ddee_ff00)
    );

    ctx.uar_free(uar.handle).unwrap();
    expect_raw(
        &last(&k),
        0x1008,
        0x1001,
        &[attr(0x1000, 0, M, u64::from(uar.handle))],
    );
    assert_eq!(
        k.mappings(),
        1,
        "the mapping lives until the page is dropped"
    );
    drop(uar);
    assert_eq!(k.mappings(), 0);

    let nc = ctx.uar_alloc(UarKind::NonCached).unwrap();
    assert_eq!(last(&k).attr(0x1001).unwrap().data, 1);
    ctx.uar_free(nc.handle).unwrap();
    no_violations(&k);
}

#[test]
fn doorbells_outside_the_page_are_dropped() {
    let k = fake();
    let ctx = open(&k);
    let uar = ctx.uar_alloc(UarKind::NonCached).unwrap();
    uar.page.write64(4096, 1);
    uar.page.write64(0x801, 1);
    uar.page.write64(usize::MAX - 3, 1);
    // SAFETY: the fake maps a whole readable page at base.
    let page = unsafe { std::slice::from_raw_parts(uar.page.base(), 4096) };
    assert!(
        page.iter().all(|&b| b == 0),
        "a dropped store reached the page"
    );
}

fn uar_err(ctx: &KernelContext, kind: UarKind) -> Error {
    match ctx.uar_alloc(kind) {
        Ok(_) => panic!("UAR allocation unexpectedly succeeded"),
        Err(e) => e,
    }
}

#[test]
fn uar_failures_leave_nothing_behind() {
    let k = fake();
    let ctx = open(&k);
    k.set_write_combining(false);
    assert!(uar_err(&ctx, UarKind::BlueFlame).is_unsupported());

    k.fail_mmap(libc::ENOMEM);
    let e = uar_err(&ctx, UarKind::NonCached);
    assert_eq!(os_errno(&e).1, libc::ENOMEM);
    assert_eq!(k.live_objects(), 0, "the UAR object was destroyed again");

    k.tamper_next(0x1008, 0x1000, Tamper::GarbageOutputs);
    let e = uar_err(&ctx, UarKind::NonCached);
    assert!(matches!(e, Error::Provider { .. }), "{e:?}");
    assert_eq!(k.live_objects(), 0);

    k.tamper_next(0x1008, 0x1000, Tamper::SucceedSilently);
    assert!(matches!(
        ctx.uar_alloc(UarKind::NonCached),
        Err(Error::Provider { .. })
    ));

    let e = ctx.uar_free(999).unwrap_err();
    assert_eq!(os_errno(&e), ("UAR_OBJ_DESTROY".into(), libc::ENOENT));
    assert_eq!(k.mappings(), 0);
}

// ---------------------------------------------------------------- eqn

#[test]
fn query_eqn_bytes_and_errors() {
    let k = fake();
    let ctx = open(&k);
    assert_eq!(ctx.query_eqn(2).unwrap(), 9);
    let c = last(&k);
    let out_ptr = c.attrs[1].data;
    expect_raw(
        &c,
        0x1000,
        0x1002,
        &[attr(0x1000, 4, M, 2), attr(0x1001, 4, M, out_ptr)],
    );
    let e = ctx.query_eqn(99).unwrap_err();
    assert_eq!(
        os_errno(&e),
        ("DEVX_QUERY_EQN(vector 99)".into(), libc::ENOENT)
    );
    k.tamper_next(0x1000, 0x1002, Tamper::SucceedSilently);
    assert!(matches!(ctx.query_eqn(0), Err(Error::Provider { .. })));
}

// ---------------------------------------------------------------- events

#[test]
fn event_channel_subscribe_and_read() {
    let k = fake();
    let ctx = open(&k);
    let ch = ctx.create_event_channel(false).unwrap();
    expect_raw(
        &last(&k),
        0x1005,
        0x1000,
        &[attr(0x1000, 0, M, 0), attr(0x1001, 4, M, 0)],
    );

    // Device-wide PORT_CHANGE: the one-entry list travels inline.
    ctx.subscribe_event(&*ch, None, &[0x09], 0x55).unwrap();
    expect_raw(
        &last(&k),
        0x1000,
        0x1003,
        &[
            attr(0x1000, 0, M, ch.fd() as u64),
            attr(0x1004, 8, M, 0x55),
            attr(0x1002, 2, M, 9),
        ],
    );
    assert!(ch.try_get().unwrap().is_none());
    let mut eqe = [0u8; 64];
    eqe[1] = 0x09;
    eqe[56] = 0xaa;
    assert_eq!(k.raise_event(0x09, None, &eqe), 1);
    let ev = ch.get().unwrap();
    assert_eq!(ev.cookie, 0x55);
    assert_eq!(ev.eqe, eqe.to_vec());

    // Object events: five types go by pointer.
    let mut out = [0u8; 16];
    let h = ctx.create(&inbox(0x400, 0, 272), &mut out).unwrap();
    let types = [0u16, 0x04, 0x13, 0x14, 0x05];
    ctx.subscribe_event(&*ch, Some(h), &types, 7).unwrap();
    let c = last(&k);
    assert_eq!(c.attrs.len(), 4);
    assert_eq!(c.attrs[2], attr(0x1001, 0, M, u64::from(h)));
    assert_eq!(c.attrs[3].len, 10);
    let want: Vec<u8> = types.iter().flat_map(|t| t.to_ne_bytes()).collect();
    assert_eq!(c.input(0x1002), Some(&want[..]));
    assert_eq!(k.raise_event(0x13, Some(h), &eqe), 1);
    assert_eq!(ch.try_get().unwrap().unwrap().cookie, 7);
    no_violations(&k);
}

/// A new eventfd with blocking reads.
fn eventfd() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd(2) takes no pointers; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: a descriptor just made, owned by nothing else.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

#[test]
fn an_eventfd_subscription_sends_fd_num_and_no_cookie() {
    use std::io::Read;
    use std::os::fd::{AsFd, AsRawFd};
    let k = fake();
    let ctx = open(&k);
    let ch = ctx.create_event_channel(false).unwrap();
    let efd = eventfd();
    ctx.subscribe_event_fd(&*ch, None, &[0x09], efd.as_fd())
        .unwrap();
    expect_raw(
        &last(&k),
        0x1000,
        0x1003,
        &[
            attr(0x1000, 0, M, ch.fd() as u64),
            attr(0x1003, 4, M, efd.as_raw_fd() as u64),
            attr(0x1002, 2, M, 9),
        ],
    );
    // The kernel signals the eventfd and queues nothing on the channel.
    assert_eq!(k.raise_event(0x09, None, &[0u8; 64]), 1);
    let mut count = [0u8; 8];
    std::fs::File::from(efd.try_clone().unwrap())
        .read_exact(&mut count)
        .unwrap();
    assert_eq!(u64::from_ne_bytes(count), 1);
    assert!(ch.try_get().unwrap().is_none());

    // A descriptor that is no eventfd: the kernel's EINVAL.
    let null = std::fs::File::open("/dev/null").unwrap();
    let e = ctx
        .subscribe_event_fd(&*ch, None, &[0x09], null.as_fd())
        .unwrap_err();
    assert_eq!(os_errno(&e), ("DEVX_SUBSCRIBE_EVENT".into(), libc::EINVAL));
    no_violations(&k);
}

#[test]
fn cookie_only_channels_collapse_repeated_events() {
    let k = fake();
    let ctx = open(&k);
    let ch = ctx.create_event_channel(true).unwrap();
    assert_eq!(last(&k).attr(0x1001).unwrap().data, 1, "OMIT_DATA flag");
    ctx.subscribe_event(&*ch, None, &[0x09], 3).unwrap();
    k.raise_event(0x09, None, &[0u8; 64]);
    k.raise_event(0x09, None, &[0u8; 64]);
    let ev = ch.try_get().unwrap().unwrap();
    assert_eq!(ev.cookie, 3);
    assert!(ev.eqe.is_empty());
    assert!(ch.try_get().unwrap().is_none());
}

#[test]
fn event_errors() {
    let k = fake();
    let ctx = open(&k);
    let ch = ctx.create_event_channel(false).unwrap();
    assert!(ctx
        .subscribe_event(&*ch, None, &[], 0)
        .unwrap_err()
        .is_argument());
    assert!(ctx
        .subscribe_event(&*ch, None, &[1; 17], 0)
        .unwrap_err()
        .is_argument());
    // Event numbers the device does not allow.
    let e = ctx.subscribe_event(&*ch, None, &[0x300], 0).unwrap_err();
    assert_eq!(os_errno(&e), ("DEVX_SUBSCRIBE_EVENT".into(), libc::EINVAL));
    let e = ctx.subscribe_event(&*ch, Some(12345), &[0], 0).unwrap_err();
    assert_eq!(os_errno(&e).1, libc::ENOENT);

    // The kernel dropped events: reported once, then reading goes on.
    k.push_read(ch.fd(), Err(libc::EOVERFLOW));
    assert_eq!(os_errno(&ch.try_get().unwrap_err()).1, libc::EOVERFLOW);
    assert!(ch.try_get().unwrap().is_none());
    k.push_read(ch.fd(), Ok(vec![0u8; 20]));
    assert!(matches!(ch.try_get(), Err(Error::Provider { .. })));

    k.tamper_next(0x1005, 0x1000, Tamper::Handle(u64::MAX));
    assert!(matches!(
        ctx.create_event_channel(false),
        Err(Error::Provider { .. })
    ));
}

// ---------------------------------------------------------------- garbage

#[test]
fn garbage_answers_never_panic() {
    let k = fake();
    let ctx = open(&k);
    let mut out = [0u8; 16];
    k.tamper_next(0x1001, 0x1000, Tamper::Handle(1 << 40));
    assert!(matches!(
        ctx.create(&inbox(0x800, 0, 16), &mut out),
        Err(Error::Provider { .. })
    ));
    k.tamper_next(0x1004, 0x1000, Tamper::Handle(u64::MAX));
    assert!(matches!(
        ctx.create_cmd_channel(),
        Err(Error::Provider { .. })
    ));
    k.tamper_next(0x1001, 0x1000, Tamper::ReturnValue(5));
    assert_eq!(
        os_errno(&ctx.create(&inbox(0x800, 0, 16), &mut out).unwrap_err()).1,
        libc::EPROTO
    );
    k.tamper_next(0x1001, 0x1000, Tamper::GarbageOutputs);
    // A garbage outbox on success is passed up; the caller checks the status.
    ctx.create(&inbox(0x800, 0, 16), &mut out).unwrap();
    assert_eq!(out, [0xff; 16]);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_completion_bytes_are_handled(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let k = fake();
            let ctx = open(&k);
            let ch = ctx.create_cmd_channel().unwrap();
            k.push_read(ch.fd(), Ok(bytes.clone()));
            match ch.try_get() {
                Ok(Some((wr_id, res))) => {
                    prop_assert!(bytes.len() >= 8);
                    prop_assert_eq!(wr_id, u64::from_ne_bytes(bytes[..8].try_into().unwrap()));
                    match res {
                        // Raw answers longer than the read buffer arrive cut to it.
                        Ok(out) => prop_assert_eq!(&out[..], &bytes[8..8 + out.len()]),
                        Err(e) => prop_assert!(e.is_firmware()),
                    }
                }
                Ok(None) => prop_assert!(false, "a queued answer was not read"),
                Err(e) => prop_assert!(bytes.len() < 8 && matches!(e, Error::Provider { .. }), "{:?}", e),
            }
        }

        #[test]
        fn any_event_bytes_are_handled(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let k = fake();
            let ctx = open(&k);
            let ch = ctx.create_event_channel(false).unwrap();
            k.push_read(ch.fd(), Ok(bytes.clone()));
            // A read never returns more than the 72 bytes asked for.
            let n = bytes.len().min(72);
            match ch.try_get() {
                Ok(Some(ev)) => {
                    prop_assert!(n == 8 || n == 72);
                    prop_assert_eq!(&ev.eqe[..], &bytes[8..n]);
                }
                Ok(None) => prop_assert!(false, "a queued answer was not read"),
                Err(_) => prop_assert!(n != 8 && n != 72),
            }
        }

        #[test]
        fn any_ucontext_response_parses(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let r = UcontextResp::from_bytes(&bytes);
            if bytes.len() >= 72 {
                prop_assert_eq!(r.to_bytes().to_vec(), bytes[..72].to_vec());
            }
        }

        #[test]
        fn any_inbox_is_sent_verbatim(body in proptest::collection::vec(any::<u8>(), 16..600)) {
            let k = fake();
            let ctx = open(&k);
            let mut out = vec![0u8; 64];
            // Whatever the kernel says about it, the bytes it saw are the caller's.
            let _ = ctx.general(&body, &mut out);
            let c = k.last_call().unwrap();
            prop_assert_eq!(c.input(0x1000), Some(&body[..]));
            prop_assert_eq!(c.attrs[0].data, body.as_ptr() as u64);
        }
    }

    #[test]
    fn ucontext_offsets_match_the_uapi() {
        let r = UcontextResp {
            num_ports: 0x0102,
            log_uar_size: 0x0a0b0c0d,
            ..Default::default()
        };
        let b = r.to_bytes();
        assert_eq!(&b[32..34], &0x0102u16.to_ne_bytes());
        assert_eq!(&b[56..60], &0x0a0b0c0du32.to_ne_bytes());
        let _ = abi::method_name(0x1001, 0x1000);
    }
}

// ---------------------------------------------------------------- GID table

#[test]
fn gid_table_through_the_uverbs_method() {
    let k = fake();
    let ctx = open(&k);
    let mut v4 = [0u8; 16];
    v4[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
    let mut ib = [0u8; 16];
    ib[..2].copy_from_slice(&[0xfe, 0x80]);
    ib[8..].copy_from_slice(&0x0c42_a1ff_fe00_0001u64.to_be_bytes());
    let table = vec![
        devx::GidTableEntry {
            gid: v4,
            index: 3,
            port: 1,
            gid_type: devx::GidType::RoceV2,
            netdev_ifindex: 7,
        },
        devx::GidTableEntry {
            gid: ib,
            index: 0,
            port: 2,
            gid_type: devx::GidType::Ib,
            netdev_ifindex: 0,
        },
    ];
    k.set_gid_table(table.clone());
    assert_eq!(ctx.query_gid_table().unwrap(), table);
    // As rdma-core's ibv_query_gid_table frames it: UVERBS_OBJECT_DEVICE,
    // QUERY_GID_TABLE, entry size, flags, the entries, their count.
    let c = last(&k);
    let (entries, n) = (c.attrs[2], c.attrs[3]);
    expect_raw(
        &c,
        0,
        5,
        &[
            attr(0, 8, M, 32),
            attr(1, 4, M, 0),
            attr(2, entries.len, M, entries.data),
            attr(3, 8, M, n.data),
        ],
    );
    assert_eq!(k.violations(), Vec::<String>::new());
    k.tamper_next(0, 5, Tamper::SucceedSilently);
    assert!(matches!(ctx.query_gid_table(), Err(Error::Provider { .. })));
    // More valid entries than room: the kernel's EINVAL, named.
    k.set_gid_table(vec![table[0]; 3000]);
    let e = ctx.query_gid_table().unwrap_err();
    assert_eq!(os_errno(&e), ("QUERY_GID_TABLE".into(), libc::EINVAL));
}

#[test]
fn an_async_general_command_runs_at_once_and_completes_on_the_channel() {
    let k = fake();
    let mut reply = vec![0u8; 4112];
    reply[16..20].copy_from_slice(&0xfeed_beefu32.to_be_bytes());
    k.set_fw_reply(0x100, reply);
    let ctx = open(&k);
    let ch = ctx.create_cmd_channel().unwrap();
    let outbox = vec![0u8; 4112];
    let buf = outbox.as_ptr();
    ctx.general_async(&inbox(0x100, 1, 16), outbox, 31, &*ch)
        .unwrap();
    // The kernel has no async method for it: the completion is there on return.
    let (wr_id, out) = ch.try_get().unwrap().expect("a completion at once");
    assert_eq!(wr_id, 31);
    let out = out.unwrap();
    assert_eq!(out[16..20], 0xfeed_beefu32.to_be_bytes());
    // The caller's outbox comes back filled.
    assert_eq!((out.as_ptr(), out.len()), (buf, 4112));
    assert!(ch.try_get().unwrap().is_none());
}

#[test]
fn async_creates_destroys_umems_and_uars_run_at_once_on_the_kernel() {
    let k = fake();
    let ctx = devx::Device::from_provider(Arc::new(device(&k)))
        .open()
        .unwrap();
    let comp = devx::CmdComp::new(&ctx).unwrap();
    let mut pd = prm_layouts::AllocPdIn::new();
    pd.set_opcode(prm_layouts::Opcode::AllocPd.raw());
    // DEVX has no asynchronous create: it ran during the call.
    let pending = ctx
        .create_async(pd.as_bytes(), prm_layouts::AllocPdOut::SIZE_BYTES, 1, &comp)
        .unwrap();
    assert!(!pending.is_queued());
    let obj = pending.wait().unwrap();
    let destroy = obj.destroy_async(2, &comp);
    assert!(!destroy.is_queued());
    destroy.wait().unwrap();
    let umem = devx::Umem::register_async(&ctx, vec![0u8; 4096], 1, 3, &comp).unwrap();
    assert!(!umem.is_queued());
    let umem = umem.wait().unwrap();
    let uar = devx::Uar::alloc_async(&ctx, UarKind::BlueFlame, 4, &comp).unwrap();
    assert!(!uar.is_queued());
    let uar = uar.wait().unwrap();
    drop((umem, uar));
    // None of them left a completion behind for `get`.
    assert!(comp.try_get().unwrap().is_none());
    no_violations(&k);
}

#[test]
fn the_async_event_file_delivers_port_and_fatal_events_on_either_open_path() {
    use devx::{ib_event, AsyncEventDesc};
    for ioctl in [true, false] {
        let k = fake();
        k.set_ioctl_get_context(ioctl);
        let ctx = open(&k);
        let file = ctx.async_event_file().unwrap();
        assert_eq!(file.try_get().unwrap(), None);
        assert_eq!(k.raise_async_event(ib_event::PORT_ERR, 1), 1);
        assert_eq!(k.raise_async_event(ib_event::DEVICE_FATAL, 0), 1);
        assert_eq!(
            file.try_get().unwrap(),
            Some(AsyncEventDesc {
                element: 1,
                event_type: ib_event::PORT_ERR
            })
        );
        assert_eq!(
            file.try_get().unwrap(),
            Some(AsyncEventDesc {
                element: 0,
                event_type: ib_event::DEVICE_FATAL
            })
        );
        assert_eq!(file.try_get().unwrap(), None);
        // A record of another size is the kernel's fault, named.
        k.push_read(file.fd(), Ok(vec![0u8; 8]));
        let e = file.try_get().unwrap_err();
        assert!(matches!(e, Error::Provider { .. }), "{e}");
        // The file outlives the context while someone holds it.
        drop(ctx);
        assert_eq!(k.open_fds(), 1);
        drop(file);
        assert_eq!(k.open_fds(), 0);
        no_violations(&k);
    }
}

#[test]
fn a_kernel_without_the_async_event_method_still_opens() {
    let k = fake();
    k.tamper_next(
        abi::verbs::UVERBS_OBJECT_ASYNC_EVENT,
        abi::verbs::UVERBS_METHOD_ASYNC_EVENT_ALLOC,
        Tamper::Errno(libc::EPROTONOSUPPORT),
    );
    let ctx = open(&k);
    let Err(e) = ctx.async_event_file() else {
        panic!("no async-event file was allocated");
    };
    assert_eq!(e.errno(), libc::EPROTONOSUPPORT, "{e}");
    assert_eq!(k.open_fds(), 1);
}
