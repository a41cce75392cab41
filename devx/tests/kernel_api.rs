//! The public devx API (`Device`, `Context`, `Obj`, `CmdComp`) served by the
//! kernel provider on a fake kernel: the layers above see the same objects
//! whatever the backend.

use std::sync::Arc;

use devx::kernel::fake::FakeKernel;
use devx::kernel::KernelDevice;
use devx::{CmdComp, Device, Error, FwReport};

fn inbox(opcode: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[0..2].copy_from_slice(&opcode.to_be_bytes());
    b
}

fn device(k: &Arc<FakeKernel>) -> Device {
    let dev = KernelDevice::new("mlx5_0", "/dev/infiniband/uverbs0").with_sys(k.clone());
    Device::from_provider(Arc::new(dev))
}

#[test]
fn objects_are_destroyed_by_the_kernel_when_dropped() {
    let k = Arc::new(FakeKernel::new());
    let dev = device(&k);
    assert_eq!(dev.name(), "mlx5_0");
    assert!(!dev.is_emulated());
    let ctx = dev.open().unwrap();
    let pd = ctx.create(&inbox(0x800, 16), 16).unwrap();
    assert_eq!(k.live_objects(), 1);
    let handle = pd.handle();
    drop(pd);
    assert_eq!(k.live_objects(), 0);
    let c = k.last_call().unwrap();
    assert_eq!(c.method_name(), "DEVX_OBJ_DESTROY");
    assert_eq!(c.attrs[0].data, u64::from(handle));
}

#[test]
fn firmware_errors_reach_the_caller_with_their_syndrome() {
    let k = Arc::new(FakeKernel::new());
    let ctx = device(&k).open().unwrap();
    k.fail_opcode(0x800, 0x8, 0xdead);
    let e = ctx.create(&inbox(0x800, 16), 16).unwrap_err();
    assert_eq!(
        e,
        Error::Firmware {
            opcode: 0x800,
            op_mod: 0,
            status: 0x8,
            syndrome: 0xdead,
            report: FwReport::Outbox
        }
    );
    assert!(e.to_string().contains("0xdead"), "{e}");
}

#[test]
fn general_commands_and_async_queries() {
    let k = Arc::new(FakeKernel::new());
    let ctx = device(&k).open().unwrap();
    let caps = ctx.general_cmd(&inbox(0x100, 16), 4112).unwrap();
    assert_eq!(caps.len(), 4112);
    assert_eq!(ctx.query_eqn(0).unwrap(), 7);

    let cq = ctx.create(&inbox(0x400, 272), 16).unwrap();
    let cqn = u32::from_be_bytes(cq.out()[8..12].try_into().unwrap());
    let mut q = inbox(0x402, 16);
    q[8..12].copy_from_slice(&cqn.to_be_bytes());
    let comp = CmdComp::new(&ctx).unwrap();
    cq.query_async(&q, 272, 41, &comp).unwrap();
    let (wr_id, out) = comp.get().unwrap();
    assert_eq!(wr_id, 41);
    assert_eq!(out.unwrap().len(), 272);
    let sync = cq.query(&q, 272).unwrap();
    assert_eq!(sync[0], 0);
}
