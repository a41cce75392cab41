//! Connecting an RC or UC QP in one call: [`Qp::endpoint`] describes this
//! end, the peer sends its own, and [`Qp::connect`] runs RESET→INIT→RTR→RTS
//! against it with the defaults `ibv_rc_pingpong` uses. [`ConnectOpts`]
//! reaches every attribute the three transitions take.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, OnceLock};

use devx::CmdComp;
use prm_layouts::enums::QpState;

use super::modify::{check_max, InitAttr, RtrAttr, RtsAttr};
use super::{Qp, QpType};
use crate::access::AccessFlags;
use crate::ah::{AhAttr, GlobalRoute};
use crate::context::LinkLayer;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::exec::{self, Exec};
use crate::port::{GidType, Mtu};

const VERB: &str = "connect";

/// Local choices and connection attributes for [`Qp::endpoint_with`] and
/// [`Qp::connect_with`]. Give both calls the same options: the endpoint
/// announces the port, GID and PSN that the connection then uses.
///
/// Every field left `None` takes the default documented on it.
///
/// ```
/// use verbs::{ConnectOpts, Mtu};
/// # fn main() -> verbs::Result<()> {
/// # let ctx = verbs::Context::open_by_name("sim0")?;
/// # let pd = ctx.alloc_pd()?;
/// # let cq = ctx.create_cq(16)?;
/// # let init = verbs::QpInit::new(verbs::QpType::Rc, &cq, &cq);
/// # let (qp, peer) = (pd.create_qp(&init)?, pd.create_qp(&init)?);
/// let opts = ConnectOpts::default()
///     .path_mtu(Mtu::Mtu1024)
///     .timeout(16)
///     .rnr_retry(3);
/// let mine = qp.endpoint_with(&opts)?; // goes to the peer
/// # let remote = peer.endpoint()?;
/// qp.connect_with(&remote, &opts)?; // with the peer's endpoint
/// # assert_eq!(mine.qpn, qp.qpn());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOpts {
    /// The port (default 1).
    pub port: u8,
    /// The source GID's index (default: [`Context::default_gid`](crate::Context::default_gid)).
    pub gid_index: Option<u8>,
    /// The first PSN this end sends (default: random, fixed per QP, so
    /// `endpoint` and `connect` agree).
    pub psn: Option<u32>,
    /// The path MTU (default: the smaller of both ends' active MTUs).
    pub path_mtu: Option<Mtu>,
    /// Remote access rights (default: RC remote read and write, plus atomics
    /// when the device has them; UC remote write).
    pub access: Option<AccessFlags>,
    pub pkey_index: u16,
    /// RC ACK timeout code, 4.096 µs · 2^timeout (default 14, about 67 ms).
    pub timeout: u8,
    /// RC retries on timeout (default 7).
    pub retry_cnt: u8,
    /// RC retries on RNR NAK (default 7: without limit).
    pub rnr_retry: u8,
    /// RC RNR NAK timer code this end sends (default 12, 0.64 ms).
    pub min_rnr_timer: u8,
    /// RC reads/atomics this end issues at once (default: the device's
    /// `max_qp_init_rd_atom`, at most what the peer answers).
    pub max_rd_atomic: Option<u8>,
    /// RC reads/atomics this end answers at once (default: the device's
    /// `max_qp_rd_atom`); announced to the peer in the endpoint.
    pub max_dest_rd_atomic: Option<u8>,
    /// Service level (IB) or 802.1p priority (RoCE, low 3 bits).
    pub sl: u8,
    pub traffic_class: u8,
    /// Default 64.
    pub hop_limit: u8,
    pub flow_label: u32,
    /// The destination MAC (RoCE). Default: the MAC the peer's endpoint
    /// carries, which is right when both ends share a link; across a router
    /// give the next hop's MAC here.
    pub dmac: Option<[u8; 6]>,
    /// RoCE v2 UDP source port (default: from the flow label or the QPNs).
    pub udp_sport: Option<u16>,
    /// InfiniBand: send a GRH even when the peer has a LID (default: only
    /// when it has none).
    pub ib_grh: bool,
}

impl Default for ConnectOpts {
    fn default() -> ConnectOpts {
        ConnectOpts {
            port: 1,
            gid_index: None,
            psn: None,
            path_mtu: None,
            access: None,
            pkey_index: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: None,
            max_dest_rd_atomic: None,
            sl: 0,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            dmac: None,
            udp_sport: None,
            ib_grh: false,
        }
    }
}

/// One builder method per field; `Option` fields take the bare value.
macro_rules! setters {
    ($($name:ident: $ty:ty;)*) => {
        impl ConnectOpts {
            $(pub fn $name(mut self, v: $ty) -> ConnectOpts {
                self.$name = v.into();
                self
            })*
        }
    };
}

setters! {
    port: u8;
    gid_index: u8;
    psn: u32;
    path_mtu: Mtu;
    access: AccessFlags;
    pkey_index: u16;
    timeout: u8;
    retry_cnt: u8;
    rnr_retry: u8;
    min_rnr_timer: u8;
    max_rd_atomic: u8;
    max_dest_rd_atomic: u8;
    sl: u8;
    traffic_class: u8;
    hop_limit: u8;
    flow_label: u32;
    dmac: [u8; 6];
    udp_sport: u16;
    ib_grh: bool;
}

/// A PSN for the QP `qpn` whose shared state is at `instance`: the same for every
/// call on one QP, random across processes and QP instances (a QPN reused
/// after a destroy gets another), as `ibv_rc_pingpong`'s
/// `lrand48() & 0xffffff` is per connection.
fn default_psn(qpn: u32, instance: usize) -> u32 {
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write_u64(seed);
    h.write_u32(qpn);
    h.write_usize(instance);
    (h.finish() & 0xff_ffff) as u32
}

fn clamp_u8(v: u32) -> u8 {
    v.min(u32::from(u8::MAX)) as u8
}

impl Qp {
    /// This end of a connection with default choices (port 1, the preferred
    /// GID, a random PSN), to send to the peer.
    ///
    /// ```
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_by_name("sim0")?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16)?;
    /// let qp = pd.create_qp(&verbs::QpInit::new(verbs::QpType::Rc, &cq, &cq))?;
    /// let text = qp.endpoint()?.to_string(); // send this to the peer
    /// let back: verbs::Endpoint = text.parse().expect("endpoint text");
    /// assert_eq!(back.qpn, qp.qpn());
    /// # Ok(()) }
    /// ```
    pub fn endpoint(&self) -> Result<Endpoint> {
        self.endpoint_with(&ConnectOpts::default())
    }

    /// This end of a connection with the port, GID index and PSN of `opts`.
    /// Reads the port attributes and the GID table.
    pub fn endpoint_with(&self, opts: &ConnectOpts) -> Result<Endpoint> {
        if self.qp_type() == QpType::Ud {
            return Err(Error::argument(
                VERB,
                "UD QPs have no peer: move them to RTS with to_init, to_rtr(RtrAttr::ud()) and to_rts",
            ));
        }
        let ctx = self.context();
        ctx.check_port(VERB, opts.port)?;
        let attr = ctx.query_port(opts.port)?;
        let gid = match opts.gid_index {
            Some(i) => {
                let e = ctx.query_gid(opts.port, u16::from(i))?;
                if e.gid.is_zero() {
                    return Err(Error::argument(
                        VERB,
                        format!(
                            "gid_index {i} is not in use in port {}'s GID table",
                            opts.port
                        ),
                    ));
                }
                e
            }
            None => ctx.default_gid(opts.port)?,
        };
        let gid_index = u8::try_from(gid.index).map_err(|_| {
            Error::argument(
                VERB,
                format!("GID index {} does not fit the 8-bit sgid_index", gid.index),
            )
        })?;
        let psn = opts
            .psn
            .unwrap_or_else(|| default_psn(self.qpn(), Arc::as_ptr(self.shared()) as usize));
        if psn > 0xff_ffff {
            return Err(Error::argument(
                VERB,
                format!("psn {psn:#x} exceeds 24 bits"),
            ));
        }
        Ok(Endpoint {
            qpn: self.qpn(),
            psn,
            port: opts.port,
            lid: attr.lid,
            mtu: attr.active_mtu,
            rd_atomic: opts
                .max_dest_rd_atomic
                .unwrap_or_else(|| clamp_u8(ctx.limits().max_qp_rd_atom)),
            gid: gid.gid,
            gid_index,
            gid_type: gid.gid_type,
            mac: gid.mac,
        })
    }

    /// Connects to `remote` with the default options: RESET (or INIT) →
    /// INIT → RTR → RTS. See [`Qp::connect_with`].
    ///
    /// ```
    /// # fn main() -> verbs::Result<()> {
    /// let ctx = verbs::Context::open_by_name("sim0")?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16)?;
    /// let init = verbs::QpInit::new(verbs::QpType::Rc, &cq, &cq);
    /// let (a, b) = (pd.create_qp(&init)?, pd.create_qp(&init)?);
    /// // Across machines the endpoints travel as text or bytes.
    /// a.connect(&b.endpoint()?)?;
    /// b.connect(&a.endpoint()?)?;
    /// assert_eq!(a.state(), verbs::QpState::Rts);
    /// # Ok(()) }
    /// ```
    pub fn connect(&self, remote: &Endpoint) -> Result<()> {
        self.connect_with(remote, &ConnectOpts::default())
    }

    /// Brings an RC or UC QP from RESET (or INIT) to RTS against `remote`:
    /// path MTU the smaller of both ends', the PSNs of both endpoints, the
    /// path to the remote GID (on RoCE to the MAC its endpoint carries
    /// unless `opts.dmac` says otherwise), RC read/atomic depths from the
    /// device capabilities. Everything is checked before the first command;
    /// if the device then refuses a transition the QP stays in the state it
    /// reached ([`Qp::state`]), and [`Qp::reset`] starts over.
    pub fn connect_with(&self, remote: &Endpoint, opts: &ConnectOpts) -> Result<()> {
        exec::now(self.connect_exec(remote, opts, Exec::Now))
    }

    /// [`Qp::connect`] with its transitions queued on `comp`.
    pub async fn connect_async(&self, remote: &Endpoint, comp: &CmdComp) -> Result<()> {
        self.connect_exec(remote, &ConnectOpts::default(), Exec::Queued(comp))
            .await
    }

    /// [`Qp::connect_with`] with its transitions queued on `comp`. The
    /// checks and the path resolution run during the call, before the first
    /// transition is queued.
    pub async fn connect_with_async(
        &self,
        remote: &Endpoint,
        opts: &ConnectOpts,
        comp: &CmdComp,
    ) -> Result<()> {
        self.connect_exec(remote, opts, Exec::Queued(comp)).await
    }

    /// The one description of `connect_with`, for both forms.
    async fn connect_exec(
        &self,
        remote: &Endpoint,
        opts: &ConnectOpts,
        exec: Exec<'_>,
    ) -> Result<()> {
        let start = self.state();
        if !matches!(start, QpState::Rst | QpState::Init) {
            return Err(Error::argument(
                VERB,
                format!(
                    "QP {:#x} is in {start}; connect starts from RESET or INIT (reset() it first)",
                    self.qpn()
                ),
            ));
        }
        let local = self.endpoint_with(opts)?;
        if local.gid_type != remote.gid_type {
            return Err(Error::argument(
                VERB,
                format!(
                    "this end's GID (index {}) is {}, the remote's is {}: both ends need the same type (set ConnectOpts::gid_index)",
                    local.gid_index,
                    local.gid_type.name(),
                    remote.gid_type.name()
                ),
            ));
        }
        if remote.qpn > 0xff_ffff || remote.psn > 0xff_ffff {
            return Err(Error::argument(
                VERB,
                "the remote QPN and PSN must fit 24 bits",
            ));
        }
        let ctx = self.context();
        let eth = ctx.link_layer() == LinkLayer::Ethernet;
        let grh = GlobalRoute {
            dgid: remote.gid,
            flow_label: opts.flow_label,
            sgid_index: local.gid_index,
            hop_limit: opts.hop_limit,
            traffic_class: opts.traffic_class,
        };
        let ah = AhAttr {
            port_num: opts.port,
            dlid: if eth { 0 } else { remote.lid },
            sl: opts.sl,
            src_path_bits: 0,
            static_rate: 0,
            grh: (eth || opts.ib_grh || remote.lid == 0).then_some(grh),
            dmac: if eth { opts.dmac.or(remote.mac) } else { None },
            udp_sport: opts.udp_sport,
        };
        // The path is the one thing INIT→RTR could still refuse after INIT.
        ah.resolve(ctx, VERB)?;
        let rc = self.qp_type() == QpType::Rc;
        let access = opts.access.unwrap_or(match self.qp_type() {
            QpType::Rc if ctx.caps().atomic() != 0 => {
                AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC
            }
            QpType::Rc => AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            _ => AccessFlags::REMOTE_WRITE,
        });
        let l = ctx.limits();
        let max_rd_atomic = opts
            .max_rd_atomic
            .unwrap_or_else(|| clamp_u8(l.max_qp_init_rd_atom).min(remote.rd_atomic.max(1)));
        let mut rtr = RtrAttr::new(
            opts.path_mtu.unwrap_or(local.mtu.min(remote.mtu)),
            remote.qpn,
            remote.psn,
            ah,
        );
        let mut rts = RtsAttr::new(local.psn);
        if rc {
            rtr = rtr
                .max_dest_rd_atomic(local.rd_atomic)
                .min_rnr_timer(opts.min_rnr_timer);
            rts = rts
                .timeout(opts.timeout)
                .retry_cnt(opts.retry_cnt)
                .rnr_retry(opts.rnr_retry)
                .max_rd_atomic(max_rd_atomic);
        }
        if rc {
            let checks = [
                (
                    "max_dest_rd_atomic",
                    u32::from(local.rd_atomic),
                    l.max_qp_rd_atom,
                ),
                (
                    "max_rd_atomic",
                    u32::from(max_rd_atomic),
                    l.max_qp_init_rd_atom,
                ),
                ("min_rnr_timer", u32::from(opts.min_rnr_timer), 31),
                ("timeout", u32::from(opts.timeout), 31),
                ("retry_cnt", u32::from(opts.retry_cnt), 7),
                ("rnr_retry", u32::from(opts.rnr_retry), 7),
            ];
            for (what, v, max) in checks {
                check_max(VERB, what, v, max)?;
            }
        }
        if start == QpState::Rst {
            let init = InitAttr::new(opts.port)
                .access(access)
                .pkey_index(opts.pkey_index);
            self.to_init_with(&init, exec).await?;
        } else if self.port() != opts.port {
            return Err(Error::argument(
                VERB,
                format!(
                    "the QP is in INIT on port {}, the options name port {}",
                    self.port(),
                    opts.port
                ),
            ));
        }
        self.to_rtr_with(&rtr, exec).await?;
        self.to_rts_with(&rts, exec).await
    }
}

/// The rank of a GID table entry for [`Context::default_gid`](crate::Context::default_gid): lower is
/// preferred.
pub(crate) fn gid_rank(e: &crate::port::GidEntry) -> u8 {
    let b = &e.gid.0;
    let v4_mapped = b[..10].iter().all(|&x| x == 0) && b[10] == 0xff && b[11] == 0xff;
    let link_local = b[0] == 0xfe && b[1] & 0xc0 == 0x80;
    match (e.gid_type, v4_mapped, link_local) {
        (GidType::RoceV2, true, _) => 0,
        (GidType::RoceV2, false, false) => 1,
        (GidType::RoceV2, false, true) => 2,
        (GidType::RoceV1 | GidType::Ib, _, _) => 3,
    }
}
