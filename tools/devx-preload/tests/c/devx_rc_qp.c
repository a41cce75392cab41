/* Brings two RC QPs up through DEVX alone, as a DEVX data-path program
 * does: UMEMs for the rings and doorbell records, a UAR, the EQ number, a
 * CQ per QP and the QPs created from PRM commands, RST->INIT->RTR->RTS with
 * mlx5dv_devx_obj_modify (each QP's peer is the other, over RoCE v2 on the
 * device's own GID). QP a sends one SEND_IMM: the WQE written into its SQ,
 * the doorbell record updated and the WQE's first 8 bytes stored into the
 * UAR. Both CQEs are polled by owner bit. QP b's CQ is armed and subscribed
 * with mlx5dv_devx_subscribe_devx_event, so its completion event is read
 * with mlx5dv_devx_get_event; QP a is queried with
 * mlx5dv_devx_obj_query_async and the answer read with
 * mlx5dv_devx_get_async_cmd_comp. The memory region is a verbs one (as in
 * rdma-core's own DEVX test): a DEVX MKEY would add nothing here. One line
 * per step; exit 0 when all worked. Every wait is bounded. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <endian.h>
#include <infiniband/mlx5dv.h>

/* PRM opcodes. */
#define CREATE_CQ 0x400
#define CREATE_QP 0x500
#define RST2INIT_QP 0x502
#define INIT2RTR_QP 0x503
#define RTR2RTS_QP 0x504
#define QUERY_QP 0x50b

/* Mailbox sizes (bytes). */
#define HDR_LEN 16
#define CREATE_CQ_IN_LEN 272
#define CREATE_QP_IN_LEN 272
#define MODIFY_QP_IN_LEN 272
#define QUERY_QP_OUT_LEN 272

/* Fields as (bit offset from the mailbox start, MSB first; width), the
 * PRM's (mlx5_ifc) layout. */
#define F(off, width) (off), (width)
#define IN_OPCODE F(0, 16)
#define OUT_STATUS F(0, 8)
#define OUT_ID F(72, 24) /* cqn / qpn of create outboxes */
#define QP_IN_QPN F(72, 24) /* modify / query inboxes */
/* create_cq_in: cq_context at byte 0x10. */
#define CQC (0x10 * 8)
#define CQ_DBR_UMEM_VALID F(CQC + 6, 1)
#define CQ_DBR_UMEM_ID F(CQC + 32, 32)
#define CQ_LOG_SIZE F(CQC + 99, 5)
#define CQ_UAR_PAGE F(CQC + 104, 24)
#define CQ_C_EQN F(CQC + 184, 8)
#define CQ_UMEM_ID F(0x58 * 8, 32)
#define CQ_UMEM_VALID F(0x5c * 8, 1)
/* create_qp_in / modify_qp_in / query_qp_out: qpc at byte 0x18. */
#define QPC (0x18 * 8)
#define QP_STATE F(QPC + 0, 4)
#define QP_ST F(QPC + 8, 8)
#define QP_PM_STATE F(QPC + 19, 2)
#define QP_PD F(QPC + 40, 24)
#define QP_MTU F(QPC + 64, 3)
#define QP_LOG_MSG_MAX F(QPC + 67, 5)
#define QP_LOG_RQ_SIZE F(QPC + 73, 4)
#define QP_LOG_RQ_STRIDE F(QPC + 77, 3)
#define QP_LOG_SQ_SIZE F(QPC + 81, 4)
#define QP_TS_FORMAT F(QPC + 88, 2)
#define QP_UAR_PAGE F(QPC + 104, 24)
#define QP_REMOTE_QPN F(QPC + 168, 24)
#define QP_LOG_SRA_MAX F(QPC + 904, 3)
#define QP_RETRY_COUNT F(QPC + 909, 3)
#define QP_RNR_RETRY F(QPC + 912, 3)
#define QP_NEXT_SEND_PSN F(QPC + 968, 24)
#define QP_CQN_SND F(QPC + 1000, 24)
#define QP_RRE F(QPC + 1168, 1)
#define QP_RWE F(QPC + 1169, 1)
#define QP_MIN_RNR_NAK F(QPC + 1187, 5)
#define QP_NEXT_RCV_PSN F(QPC + 1192, 24)
#define QP_CQN_RCV F(QPC + 1256, 24)
#define QP_DBR_UMEM_VALID F(QPC + 1667, 1)
#define QP_DBR_UMEM_ID F(QPC + 1824, 32)
#define QP_WQ_UMEM_ID F(0x108 * 8, 32)
#define QP_WQ_UMEM_VALID F(0x10c * 8, 1)
/* qpc.primary_address_path at qpc byte 0x18. */
#define ADS (QPC + 0x18 * 8)
#define ADS_ACK_TIMEOUT F(ADS + 64, 5)
#define ADS_SRC_ADDR_INDEX F(ADS + 72, 8)
#define ADS_HOP_LIMIT F(ADS + 88, 8)
#define ADS_RGID_BYTE ((ADS + 128) / 8)
#define ADS_UDP_SPORT F(ADS + 272, 16)
#define ADS_VHCA_PORT_NUM F(ADS + 296, 8)
#define ADS_RMAC_BYTE ((ADS + 304) / 8)

#define QPC_ST_RC 0
#define QPC_PM_STATE_MIGRATED 3
#define QPC_STATE_RTS 3
#define TS_FORMAT_FREE_RUNNING 1
#define PORT 1
/* The device's RoCE v2 link-local GID. */
#define GID_INDEX 1
#define MTU_1024 3
#define MSG_LEN 256
#define IMM 0x03020100u
#define EVENT_COOKIE 0xc0ffee
#define QUERY_WR_ID 42
#define COMP_EVENT 0 /* MLX5_EVENT_TYPE_COMP */
#define LOG_CQ_SIZE 4
#define LOG_RQ_SIZE 4
#define LOG_SQ_SIZE 4
/* One 16-byte data segment per receive WQE: stride 16 << 0. */
#define LOG_RQ_STRIDE 0
#define RQ_WQE_LEN 16
#define PAGE 4096
/* CQ doorbell record words: consumer index, then arm. */
#define CQ_SET_CI 0
#define CQ_ARM_DB 1
#define WAIT_MS 10000

static int fail(const char *what)
{
	printf("%s: FAILED errno %d (%s)\n", what, errno, strerror(errno));
	exit(1);
}

static void set(uint8_t *mbox, int off, int width, uint32_t v)
{
	for (int i = 0; i < width; i++) {
		int bit = off + width - 1 - i;
		uint8_t m = 0x80 >> (bit % 8);
		if ((v >> i) & 1)
			mbox[bit / 8] |= m;
		else
			mbox[bit / 8] &= ~m;
	}
}

static uint32_t get(const uint8_t *mbox, int off, int width)
{
	uint32_t v = 0;
	for (int i = 0; i < width; i++) {
		int bit = off + i;
		v = (v << 1) | ((mbox[bit / 8] >> (7 - bit % 8)) & 1);
	}
	return v;
}

static void *page_alloc(size_t len)
{
	void *p = aligned_alloc(PAGE, len);
	if (!p)
		fail("aligned_alloc");
	memset(p, 0, len);
	return p;
}

static struct mlx5dv_devx_umem *umem(struct ibv_context *ctx, void *buf, size_t len)
{
	struct mlx5dv_devx_umem *u = mlx5dv_devx_umem_reg(ctx, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!u)
		fail("mlx5dv_devx_umem_reg");
	return u;
}

struct cq {
	struct mlx5_cqe64 *ring;
	__be32 *dbr;
	struct mlx5dv_devx_umem *ring_umem, *dbr_umem;
	struct mlx5dv_devx_obj *obj;
	uint32_t cqn, ci;
};

struct qp {
	uint8_t *buf;
	__be32 *dbr;
	struct mlx5dv_devx_umem *buf_umem, *dbr_umem;
	struct mlx5dv_devx_obj *obj;
	uint32_t qpn, psn;
	struct cq cq;
};

static void create_cq(struct ibv_context *ctx, struct mlx5dv_devx_uar *uar, uint32_t eqn,
		      struct cq *cq)
{
	size_t n = 1 << LOG_CQ_SIZE;
	cq->ring = page_alloc(PAGE);
	cq->dbr = page_alloc(PAGE);
	/* Invalid CQEs owned by hardware on its first pass. */
	for (size_t i = 0; i < n; i++)
		cq->ring[i].op_own = MLX5_CQE_INVALID << 4;
	cq->ring_umem = umem(ctx, cq->ring, PAGE);
	cq->dbr_umem = umem(ctx, cq->dbr, PAGE);
	uint8_t in[CREATE_CQ_IN_LEN] = { 0 }, out[HDR_LEN] = { 0 };
	set(in, IN_OPCODE, CREATE_CQ);
	set(in, CQ_UMEM_ID, cq->ring_umem->umem_id);
	set(in, CQ_UMEM_VALID, 1);
	set(in, CQ_DBR_UMEM_VALID, 1);
	set(in, CQ_DBR_UMEM_ID, cq->dbr_umem->umem_id);
	set(in, CQ_LOG_SIZE, LOG_CQ_SIZE);
	set(in, CQ_UAR_PAGE, uar->page_id);
	set(in, CQ_C_EQN, eqn);
	cq->obj = mlx5dv_devx_obj_create(ctx, in, sizeof(in), out, sizeof(out));
	if (!cq->obj)
		fail("mlx5dv_devx_obj_create(CREATE_CQ)");
	cq->cqn = get(out, OUT_ID);
	cq->ci = 0;
}

static void create_qp(struct ibv_context *ctx, struct mlx5dv_devx_uar *uar, uint32_t eqn,
		      uint32_t pdn, struct qp *qp)
{
	create_cq(ctx, uar, eqn, &qp->cq);
	qp->buf = page_alloc(PAGE);
	qp->dbr = page_alloc(PAGE);
	qp->buf_umem = umem(ctx, qp->buf, PAGE);
	qp->dbr_umem = umem(ctx, qp->dbr, PAGE);
	uint8_t in[CREATE_QP_IN_LEN] = { 0 }, out[HDR_LEN] = { 0 };
	set(in, IN_OPCODE, CREATE_QP);
	set(in, QP_ST, QPC_ST_RC);
	set(in, QP_PM_STATE, QPC_PM_STATE_MIGRATED);
	set(in, QP_PD, pdn);
	set(in, QP_UAR_PAGE, uar->page_id);
	set(in, QP_LOG_RQ_SIZE, LOG_RQ_SIZE);
	set(in, QP_LOG_RQ_STRIDE, LOG_RQ_STRIDE);
	set(in, QP_LOG_SQ_SIZE, LOG_SQ_SIZE);
	set(in, QP_TS_FORMAT, TS_FORMAT_FREE_RUNNING);
	set(in, QP_CQN_SND, qp->cq.cqn);
	set(in, QP_CQN_RCV, qp->cq.cqn);
	set(in, QP_DBR_UMEM_VALID, 1);
	set(in, QP_DBR_UMEM_ID, qp->dbr_umem->umem_id);
	set(in, QP_WQ_UMEM_ID, qp->buf_umem->umem_id);
	set(in, QP_WQ_UMEM_VALID, 1);
	qp->obj = mlx5dv_devx_obj_create(ctx, in, sizeof(in), out, sizeof(out));
	if (!qp->obj)
		fail("mlx5dv_devx_obj_create(CREATE_QP)");
	qp->qpn = get(out, OUT_ID);
	qp->psn = qp->qpn & 0xffffff;
}

static void modify(struct qp *qp, uint8_t *in, uint16_t opcode, const char *what)
{
	uint8_t out[HDR_LEN] = { 0 };
	set(in, IN_OPCODE, opcode);
	set(in, QP_IN_QPN, qp->qpn);
	set(in, ADS_VHCA_PORT_NUM, PORT);
	if (mlx5dv_devx_obj_modify(qp->obj, in, MODIFY_QP_IN_LEN, out, sizeof(out)))
		fail(what);
}

static void to_rts(struct qp *qp, const struct qp *peer, const union ibv_gid *gid)
{
	uint8_t in[MODIFY_QP_IN_LEN] = { 0 };
	set(in, QP_RRE, 1);
	set(in, QP_RWE, 1);
	modify(qp, in, RST2INIT_QP, "RST2INIT_QP");

	memset(in, 0, sizeof(in));
	set(in, QP_MTU, MTU_1024);
	set(in, QP_LOG_MSG_MAX, 20);
	set(in, QP_REMOTE_QPN, peer->qpn);
	set(in, QP_MIN_RNR_NAK, 12);
	set(in, QP_NEXT_RCV_PSN, peer->psn);
	memcpy(in + ADS_RGID_BYTE, gid->raw, 16);
	set(in, ADS_SRC_ADDR_INDEX, GID_INDEX);
	set(in, ADS_HOP_LIMIT, 64);
	set(in, ADS_UDP_SPORT, 0xdcba);
	/* The emulated fabric routes by GID; rmac stays zero. */
	(void)ADS_RMAC_BYTE;
	modify(qp, in, INIT2RTR_QP, "INIT2RTR_QP");

	memset(in, 0, sizeof(in));
	set(in, QP_RETRY_COUNT, 7);
	set(in, QP_RNR_RETRY, 7);
	set(in, QP_NEXT_SEND_PSN, qp->psn);
	set(in, QP_LOG_SRA_MAX, 0);
	set(in, ADS_ACK_TIMEOUT, 14);
	modify(qp, in, RTR2RTS_QP, "RTR2RTS_QP");
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ms * 1000000L };
	nanosleep(&ts, NULL);
}

/* The next CQE, waited for by owner bit (bounded). */
static struct mlx5_cqe64 *poll_cq(struct cq *cq, const char *what)
{
	uint32_t n = 1 << LOG_CQ_SIZE;
	struct mlx5_cqe64 *cqe = &cq->ring[cq->ci & (n - 1)];
	uint8_t sw_owner = !!(cq->ci & n);
	for (int i = 0; i < WAIT_MS; i++) {
		uint8_t op_own = *(volatile uint8_t *)&cqe->op_own;
		if (mlx5dv_get_cqe_opcode(cqe) != MLX5_CQE_INVALID &&
		    (op_own & MLX5_CQE_OWNER_MASK) == sw_owner) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			cq->ci++;
			cq->dbr[CQ_SET_CI] = htobe32(cq->ci & 0xffffff);
			return cqe;
		}
		sleep_ms(1);
	}
	errno = ETIMEDOUT;
	fail(what);
	return NULL;
}

/* Asks for an event on the CQ's next completion: the arm doorbell record
 * and the UAR's CQ doorbell. */
static void arm_cq(struct cq *cq, struct mlx5dv_devx_uar *uar)
{
	uint32_t sn = 0, cmd = MLX5_CQ_DB_REQ_NOT;
	uint32_t v = sn << 28 | cmd | (cq->ci & 0xffffff);
	cq->dbr[CQ_ARM_DB] = htobe32(v);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	uint64_t db = htobe64((uint64_t)v << 32 | cq->cqn);
	*(volatile uint64_t *)((uint8_t *)uar->base_addr + MLX5_CQ_DOORBELL) = db;
}

static void wait_readable(int fd, const char *what)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, WAIT_MS);
	if (r != 1) {
		if (r == 0)
			errno = ETIMEDOUT;
		fail(what);
	}
}

int main(void)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0)
		fail("ibv_get_device_list");
	struct mlx5dv_context_attr attr = { .flags = MLX5DV_CONTEXT_FLAGS_DEVX };
	struct ibv_context *ctx = mlx5dv_open_device(list[0], &attr);
	if (!ctx)
		fail("mlx5dv_open_device");
	printf("open %s devx\n", ibv_get_device_name(list[0]));

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		fail("ibv_alloc_pd");
	struct mlx5dv_pd dvpd = { 0 };
	struct mlx5dv_obj dv = { .pd = { .in = pd, .out = &dvpd } };
	if (mlx5dv_init_obj(&dv, MLX5DV_OBJ_PD))
		fail("mlx5dv_init_obj(PD)");
	uint8_t *data = page_alloc(PAGE);
	struct ibv_mr *mr = ibv_reg_mr(pd, data, PAGE, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		fail("ibv_reg_mr");
	uint8_t *send_buf = data, *recv_buf = data + MSG_LEN;
	for (int i = 0; i < MSG_LEN; i++)
		send_buf[i] = (uint8_t)i;

	uint32_t eqn = 0;
	if (mlx5dv_devx_query_eqn(ctx, 0, &eqn))
		fail("mlx5dv_devx_query_eqn");
	struct mlx5dv_devx_uar *uar = mlx5dv_devx_alloc_uar(ctx, MLX5DV_UAR_ALLOC_TYPE_NC);
	if (!uar)
		fail("mlx5dv_devx_alloc_uar");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, PORT, GID_INDEX, &gid))
		fail("ibv_query_gid");

	struct qp a, b;
	create_qp(ctx, uar, eqn, dvpd.pdn, &a);
	create_qp(ctx, uar, eqn, dvpd.pdn, &b);
	printf("qps 0x%x 0x%x cqs 0x%x 0x%x\n", a.qpn, b.qpn, a.cq.cqn, b.cq.cqn);
	to_rts(&a, &b, &gid);
	to_rts(&b, &a, &gid);
	printf("rts\n");

	/* b's completion will raise an event on the channel. */
	struct mlx5dv_devx_event_channel *ch = mlx5dv_devx_create_event_channel(ctx, 0);
	if (!ch)
		fail("mlx5dv_devx_create_event_channel");
	uint16_t types[] = { COMP_EVENT };
	if (mlx5dv_devx_subscribe_devx_event(ch, b.cq.obj, sizeof(types), types, EVENT_COOKIE))
		fail("mlx5dv_devx_subscribe_devx_event");
	arm_cq(&b.cq, uar);

	/* One receive WQE on b (RQ at the buffer's start). */
	struct mlx5_wqe_data_seg *rwqe = (struct mlx5_wqe_data_seg *)b.buf;
	mlx5dv_set_data_seg(rwqe, MSG_LEN, mr->lkey, (uintptr_t)recv_buf);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	b.dbr[MLX5_RCV_DBR] = htobe32(1);

	/* One SEND_IMM on a: the SQ follows the RQ. */
	uint8_t *sq = a.buf + (RQ_WQE_LEN << LOG_RQ_SIZE);
	struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)sq;
	struct mlx5_wqe_data_seg *dseg = (struct mlx5_wqe_data_seg *)(ctrl + 1);
	uint8_t ds = (sizeof(*ctrl) + sizeof(*dseg)) / 16;
	mlx5dv_set_ctrl_seg(ctrl, 0, MLX5_OPCODE_SEND_IMM, 0, a.qpn, MLX5_WQE_CTRL_CQ_UPDATE, ds,
			    0, htobe32(IMM));
	mlx5dv_set_data_seg(dseg, MSG_LEN, mr->lkey, (uintptr_t)send_buf);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	a.dbr[MLX5_SND_DBR] = htobe32(1);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	*(volatile uint64_t *)uar->reg_addr = *(uint64_t *)ctrl;

	struct mlx5_cqe64 *cqe = poll_cq(&a.cq, "poll send CQE");
	printf("send cqe opcode %u wqe_counter %u\n", mlx5dv_get_cqe_opcode(cqe),
	       be16toh(cqe->wqe_counter));
	cqe = poll_cq(&b.cq, "poll receive CQE");
	printf("recv cqe opcode %u byte_cnt %u imm 0x%x data %s\n", mlx5dv_get_cqe_opcode(cqe),
	       be32toh(cqe->byte_cnt), be32toh(cqe->imm_inval_pkey),
	       memcmp(send_buf, recv_buf, MSG_LEN) ? "differs" : "matches");

	wait_readable(ch->fd, "wait for the completion event");
	struct {
		struct mlx5dv_devx_async_event_hdr hdr;
		uint8_t eqe[64];
	} ev;
	ssize_t n = mlx5dv_devx_get_event(ch, &ev.hdr, sizeof(ev));
	if (n < (ssize_t)sizeof(ev.hdr))
		fail("mlx5dv_devx_get_event");
	/* EQE: event_type at byte 1, the CQN in the low 24 bits of byte 0x38. */
	uint32_t ev_cqn = get(ev.eqe, F(0x38 * 8 + 8, 24));
	printf("event cookie 0x%llx bytes %zd type %u cqn 0x%x\n", (unsigned long long)ev.hdr.cookie,
	       n, ev.eqe[1], ev_cqn);

	struct mlx5dv_devx_cmd_comp *comp = mlx5dv_devx_create_cmd_comp(ctx);
	if (!comp)
		fail("mlx5dv_devx_create_cmd_comp");
	uint8_t qin[HDR_LEN] = { 0 };
	set(qin, IN_OPCODE, QUERY_QP);
	set(qin, QP_IN_QPN, a.qpn);
	if (mlx5dv_devx_obj_query_async(a.obj, qin, sizeof(qin), QUERY_QP_OUT_LEN, QUERY_WR_ID, comp))
		fail("mlx5dv_devx_obj_query_async");
	wait_readable(comp->fd, "wait for the async query");
	struct {
		struct mlx5dv_devx_async_cmd_hdr hdr;
		uint8_t out[QUERY_QP_OUT_LEN];
	} resp;
	int err = mlx5dv_devx_get_async_cmd_comp(comp, &resp.hdr, sizeof(resp));
	if (err) {
		errno = err;
		fail("mlx5dv_devx_get_async_cmd_comp");
	}
	printf("async query_qp wr_id %llu status %u state %u\n", (unsigned long long)resp.hdr.wr_id,
	       get(resp.out, OUT_STATUS), get(resp.out, QP_STATE));

	mlx5dv_devx_destroy_cmd_comp(comp);
	mlx5dv_devx_destroy_event_channel(ch);
	struct qp *qps[] = { &a, &b };
	for (int i = 0; i < 2; i++) {
		if (mlx5dv_devx_obj_destroy(qps[i]->obj) || mlx5dv_devx_obj_destroy(qps[i]->cq.obj))
			fail("mlx5dv_devx_obj_destroy");
		if (mlx5dv_devx_umem_dereg(qps[i]->buf_umem) ||
		    mlx5dv_devx_umem_dereg(qps[i]->dbr_umem) ||
		    mlx5dv_devx_umem_dereg(qps[i]->cq.ring_umem) ||
		    mlx5dv_devx_umem_dereg(qps[i]->cq.dbr_umem))
			fail("mlx5dv_devx_umem_dereg");
	}
	mlx5dv_devx_free_uar(uar);
	if (ibv_dereg_mr(mr) || ibv_dealloc_pd(pd))
		fail("ibv_dereg_mr / ibv_dealloc_pd");
	if (ibv_close_device(ctx))
		fail("ibv_close_device");
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
