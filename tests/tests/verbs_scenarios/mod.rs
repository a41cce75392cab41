//! Fixture scenarios of the verbs layer: each runs a verb's whole command
//! sequence through `verbs` over a `devx::Device`, so its fixture holds
//! exactly the mailboxes that verb sends (and a replay checks it still
//! does). The raw-DEVX scenarios are `devx::fixture::scenarios::ALL`.

use devx::fixture::scenarios::Scenario;
use devx::Device;
use std::os::fd::{FromRawFd, OwnedFd};

use memmap2::MmapMut;
use verbs::{
    AccessFlags, AhAttr, CompChannel, Context, Cq, CqInit, Gid, InitAttr, Mtu, MwType, Qp, QpInit,
    QpType, RecvWr, RtrAttr, RtsAttr, RtsModify, SendWr, Sge, SrqInit, Wc,
};

/// Every verbs scenario, in the order the fixtures README lists them.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "verbs_pd_cq",
        about: "verbs PD and TD, CQ create / query / moderation / resize / destroy",
        run: pd_cq,
    },
    Scenario {
        name: "verbs_rc_qp",
        about: "verbs RC QP pair RST→INIT→RTR→RTS, query, RTS→RTS, ERR, RST, destroy",
        run: rc_qp,
    },
    Scenario {
        name: "verbs_ud_qp_ah",
        about: "verbs UD QP RST→INIT→RTR→RTS, address handle, multicast attach / detach",
        run: ud_qp_ah,
    },
    Scenario {
        name: "verbs_mr_mw",
        about: "verbs MR register / query / rereg / deregister, memory windows type 1 and 2",
        run: mr_mw,
    },
    Scenario {
        name: "verbs_srq",
        about: "verbs SRQ create / limit / query, an RC QP receiving from it, destroy",
        run: srq,
    },
    Scenario {
        name: "verbs_completion_events",
        about: "completion channel, CQ armed with req_notify, a SEND between two RC QPs, its event",
        run: completion_events,
    },
    Scenario {
        name: "verbs_async_rc",
        about: "the tokio RC example's setup with async verbs: PD, CQ, two RC QPs, MR, each transition queued on a command channel with its completion, a SEND and its completion event",
        run: async_rc,
    },
];

/// A verbs failure as the scenario's error (the devx error when there is one).
fn v<T>(r: verbs::Result<T>) -> devx::Result<T> {
    r.map_err(|e| devx::Error::argument(e.to_string()))
}

/// The path to a peer on port 1: its RoCE v2 GID at index 1.
fn peer(ctx: &Context) -> devx::Result<AhAttr> {
    let g = v(ctx.query_gid(1, 1))?;
    Ok(AhAttr::roce(1, g.gid, 1, None))
}

/// `a` and `b` connected to each other, both in RTS.
fn connect_pair(ctx: &Context, a: &Qp, b: &Qp) -> devx::Result<()> {
    let path = peer(ctx)?;
    for (qp, remote) in [(a, b.qpn()), (b, a.qpn())] {
        v(qp.to_init(
            &InitAttr::new(1).access(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ),
        ))?;
        v(qp.to_rtr(&RtrAttr::new(Mtu::Mtu1024, remote, 0x123, path).max_dest_rd_atomic(4)))?;
        v(qp.to_rts(
            &RtsAttr::new(0x123)
                .timeout(14)
                .retry_cnt(7)
                .rnr_retry(7)
                .max_rd_atomic(4),
        ))?;
    }
    Ok(())
}

/// `n` zeroed pages: page-aligned, so the MKEY's translations (and the
/// fixture) do not depend on where the heap put a buffer.
fn pages(n: usize) -> devx::Result<MmapMut> {
    MmapMut::map_anon(n * 4096)
        .map_err(|e| devx::Error::os("mmap", e.raw_os_error().unwrap_or(libc::ENOMEM)))
}

fn pd_cq(dev: &Device) -> devx::Result<()> {
    let ctx = v(Context::open(dev))?;
    let pd = v(ctx.alloc_pd())?;
    let td = v(ctx.alloc_td())?;
    let mut cq = v(ctx.create_cq(64))?;
    v(cq.query())?;
    v(cq.modify_moderation(16, 8))?;
    v(cq.resize(256))?;
    v(cq.query())?;
    let second = v(Cq::create(&ctx, &CqInit::new(8).comp_vector(0)))?;
    v(second.destroy().map_err(|e| e.error))?;
    v(cq.destroy().map_err(|e| e.error))?;
    v(td.dealloc().map_err(|e| e.error))?;
    v(pd.dealloc().map_err(|e| e.error))?;
    Ok(())
}

fn rc_qp(dev: &Device) -> devx::Result<()> {
    let ctx = v(Context::open(dev))?;
    let pd = v(ctx.alloc_pd())?;
    let cq = v(ctx.create_cq(64))?;
    let init = QpInit::new(QpType::Rc, &cq, &cq)
        .max_send_wr(32)
        .max_recv_wr(16);
    let a = v(pd.create_qp(&init))?;
    let mut b = v(pd.create_qp(&init))?;
    connect_pair(&ctx, &a, &b)?;
    v(a.query())?;
    v(a.modify_rts(&RtsModify {
        min_rnr_timer: Some(12),
        ..RtsModify::default()
    }))?;
    v(b.to_err())?;
    v(b.reset())?;
    v(b.query())?;
    drop(b);
    drop(a);
    Ok(())
}

fn ud_qp_ah(dev: &Device) -> devx::Result<()> {
    let ctx = v(Context::open(dev))?;
    let pd = v(ctx.alloc_pd())?;
    let cq = v(ctx.create_cq(16))?;
    let qp = v(pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq)))?;
    v(qp.to_init(&InitAttr::new(1).qkey(0x1111_1111)))?;
    v(qp.to_rtr(&RtrAttr::ud()))?;
    v(qp.to_rts(&RtsAttr::new(0x42)))?;
    v(qp.query())?;
    let ah = v(pd.create_ah(&peer(&ctx)?))?;
    // A multicast GID (ff0e::/16, transient, global scope).
    let mut mgid = [0u8; 16];
    mgid[0] = 0xff;
    mgid[1] = 0x0e;
    mgid[15] = 0x01;
    let att = v(qp.attach_mcast(&Gid(mgid), 0))?;
    v(att.detach().map_err(|e| e.error))?;
    v(ah.destroy())?;
    Ok(())
}

fn mr_mw(dev: &Device) -> devx::Result<()> {
    let ctx = v(Context::open(dev))?;
    let pd = v(ctx.alloc_pd())?;
    let mut mr = v(pd.reg_mr(
        pages(2)?,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    ))?;
    v(mr.query())?;
    v(mr.rereg(
        Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        None,
    ))?;
    v(mr.query())?;
    let mw1 = v(pd.alloc_mw(MwType::Type1))?;
    let mw2 = v(pd.alloc_mw(MwType::Type2))?;
    v(mw2.query())?;
    v(mw2.dealloc().map_err(|e| e.error))?;
    v(mw1.dealloc().map_err(|e| e.error))?;
    v(mr.deregister().map_err(|e| e.error))?;
    Ok(())
}

/// A new eventfd (device-wide events are redirected to it).
fn eventfd() -> devx::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(devx::Error::os(
            "eventfd",
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    // SAFETY: a descriptor just made, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn completion_events(dev: &Device) -> devx::Result<()> {
    let ctx = v(Context::open(dev))?;
    let ch = v(CompChannel::new(&ctx))?;
    // Port changes go to an eventfd instead of the channel's queue.
    let port_events = eventfd()?;
    ctx.devx().subscribe_unaffiliated_fd(
        ch.events(),
        &[devx::event_type::PORT_CHANGE],
        &port_events,
    )?;
    let pd = v(ctx.alloc_pd())?;
    let mut cq = v(Cq::create(&ctx, &CqInit::new(16).channel(&ch)))?;
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let mut a = v(pd.create_qp(&init))?;
    let mut b = v(pd.create_qp(&init))?;
    connect_pair(&ctx, &a, &b)?;
    let mr = v(pd.reg_mr(pages(1)?, AccessFlags::LOCAL_WRITE))?;
    let sge = [Sge::new(mr.addr() as u64, 64, mr.lkey())];
    v(b.post_recv(&RecvWr::new(2, &sge)))?;
    v(cq.req_notify(false))?;
    v(a.post_send(&SendWr::send(1, &sge)))?;
    // The device raises the completion event; a replay hands back the recorded one.
    let cqn = v(ch.get_cq_event())?;
    if cqn != cq.cqn() {
        return Err(devx::Error::argument(format!(
            "completion event for CQ {cqn:#x}, expected {:#x}",
            cq.cqn()
        )));
    }
    cq.ack_events(1);
    // Polling sends no command (and finds nothing in a replay).
    let mut wc = [Wc::default(); 4];
    cq.poll(&mut wc);
    Ok(())
}

/// The RC pair of `verbs/examples/tokio_rc.rs`, built with the `_async`
/// verbs awaited in turn (so the order of the commands, and the fixture,
/// is fixed); then one message and its completion event.
fn async_rc(dev: &Device) -> devx::Result<()> {
    let ctx = v(Context::open(dev))?;
    let comp = v(ctx.cmd_comp())?;
    let ch = v(CompChannel::new(&ctx))?;
    devx::reactor::block_on(async {
        let pd = v(ctx.alloc_pd_async(&comp).await)?;
        let mut cq = v(Cq::create_async(&ctx, &CqInit::new(16).channel(&ch), &comp).await)?;
        let init = QpInit::new(QpType::Rc, &cq, &cq);
        let mut a = v(pd.create_qp_async(&init, &comp).await)?;
        let mut b = v(pd.create_qp_async(&init, &comp).await)?;
        let path = peer(&ctx)?;
        for (qp, remote) in [(&a, b.qpn()), (&b, a.qpn())] {
            v(qp.to_init_async(&InitAttr::new(1), &comp).await)?;
            let rtr = RtrAttr::new(Mtu::Mtu1024, remote, 0, path).min_rnr_timer(12);
            v(qp.to_rtr_async(&rtr, &comp).await)?;
            let rts = RtsAttr::new(0).timeout(14).retry_cnt(7).rnr_retry(7);
            v(qp.to_rts_async(&rts, &comp).await)?;
        }
        let mr = v(pd
            .reg_mr_async(pages(1)?, AccessFlags::LOCAL_WRITE, &comp)
            .await)?;
        let sge = [Sge::new(mr.addr() as u64, 64, mr.lkey())];
        v(b.post_recv(&RecvWr::new(2, &sge)))?;
        v(cq.req_notify(false))?;
        v(a.post_send(&SendWr::send(1, &sge)))?;
        // The device raises the completion event; a replay hands back the
        // recorded one.
        let cqn = v(ch.next_cq_event().await)?;
        if cqn != cq.cqn() {
            return Err(devx::Error::argument(format!(
                "completion event for CQ {cqn:#x}, expected {:#x}",
                cq.cqn()
            )));
        }
        cq.ack_events(1);
        let mut wc = [Wc::default(); 4];
        cq.poll(&mut wc);
        v(a.to_err_async(&comp).await)?;
        Ok(())
    })
}

fn srq(dev: &Device) -> devx::Result<()> {
    let ctx = v(Context::open(dev))?;
    let pd = v(ctx.alloc_pd())?;
    let cq = v(ctx.create_cq(16))?;
    let srq = v(pd.create_srq(&SrqInit::new(64, 2)))?;
    v(srq.modify_limit(8))?;
    v(srq.query())?;
    let qp = v(pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq).srq(&srq)))?;
    v(qp.query())?;
    drop(qp);
    v(srq.destroy().map_err(|e| e.error))?;
    Ok(())
}
