//! DEVX_UMEM_REG: registers user memory (deregistration is the shared
//! destroy path).

use crate::kernel::abi::umem;
use crate::kernel::fake::ctx::Ctx;
use crate::kernel::fake::state::{FakeObj, State};
use crate::kernel::sys::{Errno, SysResult};

pub(super) fn reg(s: &mut State, file: u32, ctx: &mut Ctx<'_>, devx_uid: bool) -> SysResult<i32> {
    if !devx_uid {
        return Err(Errno::EINVAL);
    }
    let addr = ctx.input_u64(umem::ADDR).unwrap_or(0);
    let len = ctx.input_u64(umem::LEN).unwrap_or(0);
    let access = ctx.input_u64(umem::ACCESS).unwrap_or(0);
    if access & 0x2 != 0 && access & 0x1 == 0 {
        return Err(Errno::EINVAL);
    }
    if len == 0 || addr.checked_add(len).is_none() {
        return Err(Errno::EINVAL);
    }
    let pgsz = ctx.input_u64(umem::PGSZ_BITMAP).unwrap_or(!0xfff);
    if pgsz & !0xfff == 0 {
        return Err(Errno::EINVAL);
    }
    let id = s.next_obj_id;
    s.next_obj_id += 1;
    let f = s.files.entry(file).or_default();
    let h = f.next_handle;
    f.next_handle += 1;
    f.objects.insert(h, FakeObj::Umem);
    ctx.set_data(umem::HANDLE, u64::from(h));
    ctx.write_out(umem::OUT_ID, &id.to_ne_bytes())?;
    Ok(0)
}
