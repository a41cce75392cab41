//! An RC pair under tokio: both ends are built and connected concurrently,
//! every firmware command an `.await` (the verbs' `_async` forms, queued on
//! each context's command channel), then messages go back and forth with
//! every wait an `.await` on the completion channel: arm the CQ, await its
//! event, then poll the CQE. tokio is only a dev-dependency; the futures
//! are the library's own, woken by their channel fd's readiness.
//!
//! `cargo run -p verbs --example tokio_rc` (runs on emulated `sim0`/`sim1`).

use devx::CmdComp;
use verbs::{
    AccessFlags, AhAttr, CompChannel, Context, Cq, CqInit, InitAttr, Mr, Mtu, Pd, Qp, QpCap,
    QpInit, QpType, RecvWr, RtrAttr, RtsAttr, SendWr, Sge, Wc,
};

const SIZE: usize = 1024;
const ROUNDS: u64 = 100;

/// One end: its completion channel, CQ, QP and a buffer (send half, then
/// receive half).
struct End {
    ctx: Context,
    comp: CmdComp,
    ch: CompChannel,
    cq: Cq,
    qp: Qp,
    mr: Mr<Vec<u8>>,
    mac: [u8; 6],
    _pd: Pd,
}

async fn end(name: &'static str) -> verbs::Result<End> {
    let dev = devx::Device::emulated(name).map_err(|source| verbs::Error::Device {
        verb: "open_device",
        source,
    })?;
    let ctx = Context::open(&dev)?;
    let comp = ctx.cmd_comp()?;
    let ch = CompChannel::new(&ctx)?;
    let pd = ctx.alloc_pd_async(&comp).await?;
    let cq = Cq::create_async(&ctx, &CqInit::new(16).channel(&ch), &comp).await?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp_async(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap), &comp)
        .await?;
    let mr = pd
        .reg_mr_async(vec![0u8; 2 * SIZE], AccessFlags::LOCAL_WRITE, &comp)
        .await?;
    let mac = devx::sim::sim_device(name)
        .map(|s| s.identity().mac)
        .unwrap_or_default();
    Ok(End {
        ctx,
        comp,
        ch,
        cq,
        qp,
        mr,
        mac,
        _pd: pd,
    })
}

async fn connect(me: &End, peer: &End) -> verbs::Result<()> {
    let gid = peer.ctx.query_gid(1, 1)?;
    let path = AhAttr::roce(1, gid.gid, 1, Some(peer.mac));
    let rtr = RtrAttr::new(Mtu::Mtu1024, peer.qp.qpn(), 0, path).min_rnr_timer(12);
    let rts = RtsAttr::new(0).timeout(14).retry_cnt(7).rnr_retry(7);
    me.qp.to_init_async(&InitAttr::new(1), &me.comp).await?;
    me.qp.to_rtr_async(&rtr, &me.comp).await?;
    me.qp.to_rts_async(&rts, &me.comp).await
}

/// Awaits the next completion of `e`'s CQ: arm, check once (a CQE that came
/// before the arm raises no event), else await the channel's event.
async fn next_wc(e: &mut End) -> Result<Wc, String> {
    let mut wc = [Wc::default(); 1];
    loop {
        e.cq.req_notify(false).map_err(|x| x.to_string())?;
        if e.cq.poll(&mut wc) == 1 {
            break;
        }
        e.ch.next_cq_event().await.map_err(|x| x.to_string())?;
        e.cq.ack_events(1);
    }
    if !wc[0].is_ok() {
        return Err(format!("wr_id {}: {:?}", wc[0].wr_id, wc[0].status));
    }
    Ok(wc[0])
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let (a, b) = tokio::join!(end("sim0"), end("sim1"));
    let mut a = a.map_err(|e| e.to_string())?;
    let mut b = b.map_err(|e| e.to_string())?;
    let (ab, ba) = tokio::join!(connect(&a, &b), connect(&b, &a));
    ab.map_err(|e| e.to_string())?;
    ba.map_err(|e| e.to_string())?;

    let recv = |e: &End| Sge::from_mr(&e.mr, SIZE, SIZE as u32);
    let send = |e: &End| Sge::from_mr(&e.mr, 0, SIZE as u32);
    for round in 0..ROUNDS {
        let payload: Vec<u8> = (0..SIZE).map(|i| (i as u64 ^ round) as u8).collect();
        let (tx, rx) = if round % 2 == 0 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        rx.qp
            .post_recv(&RecvWr::new(round, &[recv(rx)]))
            .map_err(|e| e.to_string())?;
        tx.mr.write_at(0, &payload).map_err(|e| e.to_string())?;
        tx.qp
            .post_send(&SendWr::send(round, &[send(tx)]))
            .map_err(|e| e.to_string())?;
        let (s, r) = tokio::join!(next_wc(tx), next_wc(rx));
        let (s, r) = (s?, r?);
        let got = rx.mr.read_vec(SIZE, SIZE).map_err(|e| e.to_string())?;
        if (s.wr_id, r.wr_id) != (round, round) || got != payload {
            return Err(format!("round {round}: wrong completion or payload"));
        }
    }
    println!("{ROUNDS} messages of {SIZE} bytes, each wait an .await on a completion event");
    Ok(())
}
