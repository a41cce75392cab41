//! An RC pair under tokio: both ends are built concurrently (`.await` on
//! blocking setup moved off the runtime's thread), then messages go back
//! and forth with every wait an `.await` on the completion channel: arm the
//! CQ, await its event, then poll the CQE. tokio is only a dev-dependency;
//! the futures are the library's own, woken by the channel fd's readiness.
//!
//! `cargo run -p verbs --example tokio_rc` (runs on emulated `sim0`/`sim1`).

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
    ch: CompChannel,
    cq: Cq,
    qp: Qp,
    mr: Mr<Vec<u8>>,
    mac: [u8; 6],
    _pd: Pd,
}

fn end(name: &'static str) -> verbs::Result<End> {
    let dev = devx::Device::emulated(name).map_err(|source| verbs::Error::Device {
        verb: "open_device",
        source,
    })?;
    let ctx = Context::open(&dev)?;
    let ch = CompChannel::new(&ctx)?;
    let pd = ctx.alloc_pd()?;
    let cq = Cq::create(&ctx, &CqInit::new(16).channel(&ch))?;
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq).cap(cap))?;
    let mr = pd.reg_mr(vec![0u8; 2 * SIZE], AccessFlags::LOCAL_WRITE)?;
    let mac = devx::sim::sim_device(name)
        .map(|s| s.identity().mac)
        .unwrap_or_default();
    Ok(End {
        ctx,
        ch,
        cq,
        qp,
        mr,
        mac,
        _pd: pd,
    })
}

fn connect(me: &End, peer: &End) -> verbs::Result<()> {
    let gid = peer.ctx.query_gid(1, 1)?;
    let path = AhAttr::roce(1, gid.gid, 1, Some(peer.mac));
    me.qp.to_init(&InitAttr::new(1))?;
    me.qp
        .to_rtr(&RtrAttr::new(Mtu::Mtu1024, peer.qp.qpn(), 0, path).min_rnr_timer(12))?;
    me.qp
        .to_rts(&RtsAttr::new(0).timeout(14).retry_cnt(7).rnr_retry(7))
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
    let (a, b) = tokio::join!(
        tokio::task::spawn_blocking(|| end("sim0")),
        tokio::task::spawn_blocking(|| end("sim1")),
    );
    let mut a = a.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    let mut b = b.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    connect(&a, &b).map_err(|e| e.to_string())?;
    connect(&b, &a).map_err(|e| e.to_string())?;

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
