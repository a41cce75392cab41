//! UAR_ALLOC: a UAR page and the mmap offset that maps it (destroy is the
//! shared path; the mapping itself is in `syscalls`).

use crate::kernel::abi::uar;
use crate::kernel::fake::ctx::Ctx;
use crate::kernel::fake::state::{FakeObj, State};
use crate::kernel::sys::{Errno, SysResult};

pub(super) fn alloc(s: &mut State, file: u32, ctx: &mut Ctx<'_>) -> SysResult<i32> {
    let ty = ctx.input_u64(uar::TYPE).unwrap_or(u64::MAX);
    if ty > 1 || (ty == 0 && !s.cfg.wc) {
        return Err(Errno::EOPNOTSUPP);
    }
    let page_id = s.next_uar;
    s.next_uar += 1;
    // Opaque offsets with a "command" byte of 9 and up, like the kernel's.
    let mmap_offset = ((9u64 << 8) | u64::from(page_id)) * s.cfg.page_size as u64;
    let page_size = s.cfg.page_size as u32;
    let f = s.files.entry(file).or_default();
    let h = f.next_handle;
    f.next_handle += 1;
    f.objects.insert(h, FakeObj::Uar { mmap_offset });
    ctx.set_data(uar::HANDLE, u64::from(h));
    ctx.write_out(uar::MMAP_OFFSET, &mmap_offset.to_ne_bytes())?;
    ctx.write_out(uar::MMAP_LENGTH, &page_size.to_ne_bytes())?;
    ctx.write_out(uar::PAGE_ID, &page_id.to_ne_bytes())?;
    Ok(0)
}
