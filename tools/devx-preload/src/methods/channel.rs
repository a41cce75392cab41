//! Completion channels (`ibv_create_comp_channel`, CREATE_COMP_CHANNEL
//! through INVOKE_WRITE) and the completion events they carry.
//!
//! The kernel answers an fd that reads one `ib_uverbs_comp_event_desc` (the
//! CQ's user handle, 8 bytes) per event and polls readable while one
//! waits. Here the program gets one end of a stream socket pair, which
//! behaves so; behind it is a DEVX event channel of the emulated device,
//! each CQ created on the channel subscribed to its completion events
//! (cookie = CQN). The doorbell watch thread, which the device wakes on
//! every delivered message, forwards waiting events as the user handles.
//! CQ_DESTROY reports how many events of the CQ the program has read (the
//! kernel counts them as they are read, and `ibv_destroy_cq` waits until
//! the program has acknowledged that many): those forwarded less those
//! still unread in the socket, which the library peeks at.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::program_fd::ProgramFd;
use crate::doorbell::EventSource;
use crate::uverbs::Errno;

/// One completion channel.
pub struct CompChannel {
    events: devx::Events,
    /// The program's end of the channel, stream records of 8 bytes.
    pub(super) out: ProgramFd,
    /// The CQs on this channel by CQN: their user handle and the events
    /// delivered for them.
    cqs: Mutex<HashMap<u32, (u64, Arc<AtomicU32>)>>,
}

impl CompChannel {
    /// A channel on the context's device; the program's fd is `self.out.fd`.
    pub fn new(ctx: &devx::Context) -> Result<CompChannel, Errno> {
        let events = devx::Events::new(ctx, false).map_err(|e| e.errno())?;
        Ok(CompChannel {
            events,
            out: ProgramFd::new(libc::SOCK_STREAM)?,
            cqs: Mutex::new(HashMap::new()),
        })
    }

    fn cqs(&self) -> MutexGuard<'_, HashMap<u32, (u64, Arc<AtomicU32>)>> {
        self.cqs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `fd` is still this channel's fd in the program.
    pub fn is(&self, fd: RawFd) -> bool {
        self.out.is(fd)
    }

    /// Subscribes CQ `cq` to completion events; `user_handle` is what the
    /// program reads for them.
    pub fn attach(&self, cq: &devx::Obj, user_handle: u64) -> Result<(), Errno> {
        cq.subscribe(&self.events, &[devx::event_type::COMP], u64::from(cq.id()))
            .map_err(|e| e.errno())?;
        self.cqs()
            .insert(cq.id(), (user_handle, Arc::new(AtomicU32::new(0))));
        Ok(())
    }

    /// Stops forwarding CQ `cqn`'s events; returns how many of them the
    /// program has read.
    pub fn detach(&self, cqn: u32) -> u32 {
        // Under the lock `forward` holds while it sends and counts, so the
        // count and the socket agree.
        let mut cqs = self.cqs();
        let Some((handle, count)) = cqs.remove(&cqn) else {
            return 0;
        };
        count
            .load(Ordering::Acquire)
            .saturating_sub(self.unread(handle))
    }

    /// Events for `user_handle` forwarded but not yet read by the program.
    fn unread(&self, user_handle: u64) -> u32 {
        self.out
            .unread()
            .chunks_exact(8)
            .filter(|c| <[u8; 8]>::try_from(*c).map(u64::from_ne_bytes).ok() == Some(user_handle))
            .count() as u32
    }
}

impl EventSource for CompChannel {
    fn forward(&self) -> usize {
        let mut n = 0;
        // Bounded: at most what is queued now. A CQ raises one event per
        // arming, so the socket (hundreds of kilobytes) does not fill; an
        // event it refuses (the program closed its end) is dropped.
        while let Ok(Some(ev)) = self.events.try_get() {
            let Ok(cqn) = u32::try_from(ev.cookie) else {
                continue;
            };
            let cqs = self.cqs();
            let Some((handle, count)) = cqs.get(&cqn) else {
                continue;
            };
            if self.out.send(&handle.to_ne_bytes()) {
                count.fetch_add(1, Ordering::AcqRel);
                n += 1;
            } else {
                // The program closed its end or stopped reading.
                break;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi as uabi;
    use crate::methods::tests::{open_context, run};
    use crate::methods::Object;
    use crate::uverbs::UverbsFile;
    use devx::kernel::abi::{obj, uar as uar_ids, verbs as ids, IoctlAttr, IoctlCmd};
    use zerocopy::IntoBytes;

    fn leak(len: usize) -> u64 {
        Box::leak(vec![0u8; len].into_boxed_slice()).as_ptr() as u64
    }

    fn create_channel(file: &UverbsFile) -> RawFd {
        let core_in = [0u8; 8];
        let mut fd: RawFd = -1;
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_DEVICE,
            ids::UVERBS_METHOD_INVOKE_WRITE,
            [
                IoctlAttr::u64_in(
                    ids::UVERBS_ATTR_WRITE_CMD,
                    u64::from(ids::IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL),
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_CORE_IN, &core_in),
                IoctlAttr::ptr_out(ids::UVERBS_ATTR_CORE_OUT, (&mut fd as *mut RawFd).cast(), 4),
            ],
        );
        assert_eq!(run(file, &mut cmd), Ok(0));
        fd
    }

    /// A CQ on `channel` (an fd): its handle, or the errno.
    fn create_cq(file: &UverbsFile, channel: RawFd) -> Result<u32, Errno> {
        let (mut offset, mut length, mut page_id) = (0u64, 0u32, 0u32);
        let mut uar = IoctlCmd::new(
            obj::UAR,
            uar_ids::METHOD_ALLOC,
            [
                IoctlAttr::new_obj(uar_ids::HANDLE),
                IoctlAttr::u64_in(uar_ids::TYPE, 1),
                IoctlAttr::ptr_out(uar_ids::MMAP_OFFSET, (&mut offset as *mut u64).cast(), 8),
                IoctlAttr::ptr_out(uar_ids::MMAP_LENGTH, (&mut length as *mut u32).cast(), 4),
                IoctlAttr::ptr_out(uar_ids::PAGE_ID, (&mut page_id as *mut u32).cast(), 4),
            ],
        );
        assert_eq!(run(file, &mut uar), Ok(0));
        let ucmd = uabi::Mlx5CreateCq {
            buf_addr: leak(64 * 64),
            db_addr: leak(8),
            cqe_size: 64,
            flags: uabi::create_cq_flags::UAR_PAGE_INDEX,
            uar_page_index: page_id as u16,
            ..Default::default()
        };
        let mut cqe = 0u32;
        let mut resp = uabi::Mlx5CreateCqResp::default();
        let mut cmd = IoctlCmd::new(
            ids::UVERBS_OBJECT_CQ,
            ids::UVERBS_METHOD_CQ_CREATE,
            [
                IoctlAttr::new_obj(ids::UVERBS_ATTR_CREATE_CQ_HANDLE),
                IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_CQ_CQE, 63),
                IoctlAttr::u64_in(ids::UVERBS_ATTR_CREATE_CQ_USER_HANDLE, 0x77),
                IoctlAttr::u32_in(ids::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, 0),
                IoctlAttr::obj(ids::UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, channel as u64),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_CREATE_CQ_RESP_CQE,
                    (&mut cqe as *mut u32).cast(),
                    4,
                ),
                IoctlAttr::ptr_in(ids::UVERBS_ATTR_UHW_IN, ucmd.as_bytes()),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_UHW_OUT,
                    (&mut resp as *mut uabi::Mlx5CreateCqResp).cast(),
                    8,
                ),
            ],
        );
        run(file, &mut cmd).map(|_| cmd.attrs[0].data as u32)
    }

    #[test]
    fn cqs_attach_to_channels_by_their_fd_and_report_events_read() {
        let (file, _) = open_context();
        let fd = create_channel(&file);
        // The program's end is a socket it can poll and read.
        // SAFETY: a zeroed stat is a valid out-buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on an fd this test owns.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFSOCK);
        let cq = create_cq(&file, fd).unwrap();
        // An fd that is no channel of this context.
        assert_eq!(create_cq(&file, 0), Err(libc::EINVAL));

        let ctx = file.ucontext().unwrap();
        let ch = ctx
            .objects()
            .table
            .values()
            .find_map(|o| match o {
                Object::CompChannel(c) => Some(Arc::clone(c)),
                _ => None,
            })
            .unwrap();
        // The handle as the program reads it; one read, one still queued
        // when the CQ goes: the destroy reports one.
        let cqn = match ctx.objects().table.get(&cq) {
            Some(Object::Cq { obj, .. }) => obj.id(),
            _ => panic!("no CQ {cq}"),
        };
        let count = ch.cqs().get(&cqn).map(|(_, c)| Arc::clone(c)).unwrap();
        for _ in 0..2 {
            assert!(ch.out.send(&0x77u64.to_ne_bytes()));
            count.fetch_add(1, Ordering::AcqRel);
        }
        let mut got = [0u8; 8];
        // SAFETY: 8 writable bytes from the program's end.
        assert_eq!(unsafe { libc::read(fd, got.as_mut_ptr().cast(), 8) }, 8);
        assert_eq!(u64::from_ne_bytes(got), 0x77);
        drop(ctx);
        let mut resp = [0u32; 2];
        let mut d = IoctlCmd::new(
            ids::UVERBS_OBJECT_CQ,
            ids::UVERBS_METHOD_CQ_DESTROY,
            [
                IoctlAttr::obj(ids::UVERBS_ATTR_DESTROY_CQ_HANDLE, u64::from(cq)),
                IoctlAttr::ptr_out(
                    ids::UVERBS_ATTR_DESTROY_CQ_RESP,
                    resp.as_mut_ptr().cast(),
                    8,
                ),
            ],
        );
        assert_eq!(run(&file, &mut d), Ok(0));
        assert_eq!(resp, [1, 0]);
    }
}
