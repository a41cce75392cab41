/*
 * Baseline for `devx-cli bench datapath`: the post and poll loops as C
 * drivers write them with mlx5dv-style inline helpers (big-endian stores of
 * the ctrl, remote-address, data, inline and address-vector segments;
 * owner-bit polling; a QP table looked up when the QPN changes), on plain
 * memory with the doorbell going to a dummy page. Each point has a twin of
 * the same name in the Rust benchmark; `devx-cli bench datapath --compare-c`
 * builds this file, runs both alternately and prints the ratios.
 *
 *   cc -O2 -o /tmp/datapath-c tools/bench-c/datapath.c && /tmp/datapath-c
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOG_SQ 10
#define SQ_BBS (1u << LOG_SQ)
#define LOG_CQ 12
#define NCQE (1u << LOG_CQ)
#define BATCH 16
#define NQP 8

/* mlx5 WQE opcodes, ctrl flags and CQE opcodes (mlx5dv.h). */
#define OP_RDMA_WRITE 0x08
#define OP_SEND 0x0a
#define CE_CQE 0x08
#define INLINE_SEG 0x80000000u
#define CQE_REQ 0x0
#define CQE_INVALID 0xf

struct ctrl { uint32_t opmod_idx_opcode, qpn_ds; uint8_t sig, rsvd[2], fm_ce_se; uint32_t imm; };
struct raddr { uint64_t raddr; uint32_t rkey, rsvd; };
struct data { uint32_t byte_count, lkey; uint64_t addr; };
struct inl { uint32_t byte_count; };
struct av { uint32_t qkey, rsvd; uint32_t dqp_dct; uint8_t stat_rate_sl, fl_mlid; uint16_t rlid;
	    uint8_t rsvd0[4], rmac[6]; uint8_t tclass, hop_limit; uint32_t grh_gid_fl; uint8_t rgid[16]; };
struct cqe64 { uint8_t rsvd[44]; uint32_t byte_cnt; uint64_t ts; uint32_t sop_drop_qpn; uint16_t wqe_counter; uint8_t sig, op_own; };

struct qp {
	uint8_t *sq;
	uint32_t pi, qpn, bf;
	volatile uint32_t dbrec[2];
	uint64_t wr_ids[SQ_BBS];
};

static volatile uint64_t *uar;
/* The CQ's doorbell record (set_ci), which the device would read. */
static volatile uint32_t cq_dbrec[2];
static uint64_t sink;

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static inline void barrier(void) { __asm__ volatile("" ::: "memory"); }

/* A QP's posting state in locals while a loop posts, as a driver's
 * posting function keeps it (stores through byte pointers would otherwise
 * make the compiler reload it from the QP after each). */
struct sq_state { uint8_t *sq; uint64_t *wr_ids; uint32_t pi, qpn, bf; };

static inline struct sq_state sq_begin(struct qp *q)
{
	return (struct sq_state){ q->sq, q->wr_ids, q->pi, q->qpn, q->bf };
}

static inline void sq_end(struct qp *q, struct sq_state s) { q->pi = s.pi; q->bf = s.bf; }

static inline uint8_t *wqe_at(const struct sq_state *s, uint32_t bb) { return s->sq + ((bb & (SQ_BBS - 1)) << 6); }

static inline void set_ctrl(const struct sq_state *s, uint8_t opcode, uint32_t ds, int signaled)
{
	struct ctrl *c = (struct ctrl *)wqe_at(s, s->pi);
	c->opmod_idx_opcode = htobe32(((s->pi & 0xffff) << 8) | opcode);
	c->qpn_ds = htobe32((s->qpn << 8) | ds);
	c->sig = 0;
	c->fm_ce_se = signaled ? CE_CQE : 0;
	c->imm = 0;
}

/* Doorbell record, then the ctrl segment's first 8 bytes to the BlueFlame register. */
static inline void ring_db(struct qp *q, struct sq_state *s, uint32_t last_bb)
{
	barrier();
	q->dbrec[1] = htobe32(s->pi & 0xffff);
	barrier();
	uar[s->bf / 8] = *(uint64_t *)wqe_at(s, last_bb);
	s->bf ^= 0x100;
}

static struct qp *new_qp(uint32_t qpn)
{
	struct qp *q = aligned_alloc(64, sizeof(*q));
	memset(q, 0, sizeof(*q));
	q->sq = aligned_alloc(4096, 64u << LOG_SQ);
	memset(q->sq, 0, 64u << LOG_SQ);
	q->qpn = qpn;
	q->bf = 0x800;
	return q;
}

/* RDMA WRITE, 1 SGE, every 16th signaled, one doorbell per 16: the QP's
 * state in locals, as a driver's posting function keeps it. */
static double post_write(struct qp *q, uint64_t n)
{
	uint8_t *sq = q->sq;
	uint64_t *wr_ids = q->wr_ids;
	uint32_t pi = q->pi, qpn = q->qpn, bf = q->bf;
	double t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *w = sq + ((pi & (SQ_BBS - 1)) << 6);
		struct ctrl *c = (struct ctrl *)w;
		struct raddr *r = (struct raddr *)(w + 16);
		struct data *d = (struct data *)(w + 32);
		c->opmod_idx_opcode = htobe32(((pi & 0xffff) << 8) | OP_RDMA_WRITE);
		c->qpn_ds = htobe32((qpn << 8) | 3);
		c->sig = 0;
		c->fm_ce_se = (i % BATCH == BATCH - 1) ? CE_CQE : 0;
		c->imm = 0;
		r->raddr = htobe64(0x10000 + i * 64);
		r->rkey = htobe32(0x500);
		d->byte_count = htobe32(64);
		d->lkey = htobe32(0x400);
		d->addr = htobe64(0x20000 + i * 64);
		wr_ids[pi & (SQ_BBS - 1)] = i;
		pi++;
		if (pi % BATCH == 0) {
			barrier();
			q->dbrec[1] = htobe32(pi & 0xffff);
			barrier();
			uar[bf / 8] = *(uint64_t *)c;
			bf ^= 0x100;
		}
	}
	double ns = (now_ns() - t0) / n;
	q->pi = pi;
	q->bf = bf;
	return ns;
}

/* SEND with 64 bytes inline: ctrl + inline header + data, 2 WQEBBs. */
static double post_inline64(struct qp *q, uint64_t n)
{
	uint8_t payload[64];
	memset(payload, 0xab, sizeof(payload));
	struct sq_state st = sq_begin(q);
	double t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *w = wqe_at(&st, st.pi);
		/* 16 + 4 + 64 bytes: 6 DS units. */
		set_ctrl(&st, OP_SEND, 6, i % BATCH == BATCH - 1);
		struct inl *h = (struct inl *)(w + 16);
		h->byte_count = htobe32(INLINE_SEG | 64);
		/* 44 bytes fit in the first WQEBB, the rest wraps to the next. */
		memcpy(w + 20, payload, 44);
		memcpy(wqe_at(&st, st.pi + 1), payload + 44, 20);
		st.wr_ids[st.pi & (SQ_BBS - 1)] = i;
		uint32_t last = st.pi;
		st.pi += 2;
		if ((i + 1) % BATCH == 0)
			ring_db(q, &st, last);
	}
	double ns = (now_ns() - t0) / n;
	sq_end(q, st);
	return ns;
}

/* RDMA WRITE with 4 SGEs: ctrl + raddr + 4 data segments, 2 WQEBBs. */
static double post_sge4(struct qp *q, uint64_t n)
{
	struct sq_state st = sq_begin(q);
	double t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *w = wqe_at(&st, st.pi);
		set_ctrl(&st, OP_RDMA_WRITE, 6, i % BATCH == BATCH - 1);
		struct raddr *r = (struct raddr *)(w + 16);
		r->raddr = htobe64(0x10000 + i * 64);
		r->rkey = htobe32(0x500);
		for (int s = 0; s < 4; s++) {
			uint8_t *seg = s < 2 ? w + 32 + 16 * s : wqe_at(&st, st.pi + 1) + 16 * (s - 2);
			struct data *d = (struct data *)seg;
			d->byte_count = htobe32(16);
			d->lkey = htobe32(0x400);
			d->addr = htobe64(0x20000 + i * 64 + 16 * s);
		}
		st.wr_ids[st.pi & (SQ_BBS - 1)] = i;
		uint32_t last = st.pi;
		st.pi += 2;
		if ((i + 1) % BATCH == 0)
			ring_db(q, &st, last);
	}
	double ns = (now_ns() - t0) / n;
	sq_end(q, st);
	return ns;
}

/* UD SEND: ctrl + 48-byte address vector (from the AH, with Q_Key and
 * remote QPN set per request) + 1 data segment, 2 WQEBBs. */
static double post_ud(struct qp *q, uint64_t n)
{
	struct av ah;
	memset(&ah, 0, sizeof(ah));
	ah.rlid = htobe16(0xc000);
	ah.hop_limit = 64;
	ah.grh_gid_fl = htobe32(1u << 30);
	memset(ah.rmac, 0x02, 6);
	memset(ah.rgid, 0x11, 16);
	struct sq_state st = sq_begin(q);
	double t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *w = wqe_at(&st, st.pi);
		set_ctrl(&st, OP_SEND, 5, i % BATCH == BATCH - 1);
		struct av *a = (struct av *)(w + 16);
		memcpy(a, &ah, sizeof(*a));
		a->qkey = htobe32(0x1234);
		a->dqp_dct = htobe32((be32toh(ah.dqp_dct) & 0x80000000u) | 0x42);
		struct data *d = (struct data *)wqe_at(&st, st.pi + 1);
		d->byte_count = htobe32(64);
		d->lkey = htobe32(0x400);
		d->addr = htobe64(0x20000 + i * 64);
		st.wr_ids[st.pi & (SQ_BBS - 1)] = i;
		uint32_t last = st.pi;
		st.pi += 2;
		if ((i + 1) % BATCH == 0)
			ring_db(q, &st, last);
	}
	double ns = (now_ns() - t0) / n;
	sq_end(q, st);
	return ns;
}

/* The next NCQE requester CQEs from consumer counter `ci`, QPs taking turns. */
static void fill_cq(struct cqe64 *cq, uint32_t ci, struct qp **qps, int nqp)
{
	for (uint32_t k = 0; k < NCQE; k++) {
		struct cqe64 *e = &cq[(ci + k) & (NCQE - 1)];
		struct qp *q = qps[(ci + k) % nqp];
		memset(e, 0, sizeof(*e));
		e->byte_cnt = htobe32(64);
		e->sop_drop_qpn = htobe32(((uint32_t)OP_RDMA_WRITE << 24) | q->qpn);
		e->wqe_counter = htobe16((uint16_t)((ci + k) / nqp));
		e->op_own = (uint8_t)((CQE_REQ << 4) | (((ci + k) >> LOG_CQ) & 1));
	}
}

/* Poll full rings of CQEs from `nqp` QPs; the QP is looked up by QPN when it
 * changes, as mlx5's poll does. */
static double poll_cq(struct cqe64 *cq, struct qp **qps, int nqp, uint64_t n)
{
	struct qp *table[NQP * 2] = {0};
	for (int i = 0; i < nqp; i++)
		table[qps[i]->qpn & (NQP * 2 - 1)] = qps[i];
	uint32_t ci = 0;
	uint64_t polled = 0, sum = 0;
	double spent = 0;
	while (polled < n) {
		fill_cq(cq, ci, qps, nqp);
		double t0 = now_ns();
		struct qp *cur = NULL;
		for (;;) {
			struct cqe64 *e = &cq[ci & (NCQE - 1)];
			uint8_t op_own = e->op_own;
			if ((op_own >> 4) == CQE_INVALID || (op_own & 1) != ((ci >> LOG_CQ) & 1))
				break;
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			uint32_t qpn = be32toh(e->sop_drop_qpn) & 0xffffff;
			if (!cur || cur->qpn != qpn)
				cur = table[qpn & (NQP * 2 - 1)];
			uint16_t wc = be16toh(e->wqe_counter);
			sum += cur->wr_ids[wc & (SQ_BBS - 1)] + be32toh(e->byte_cnt) + qpn;
			ci++;
			polled++;
			if (polled % NCQE == 0)
				break;
		}
		cq_dbrec[0] = htobe32(ci & 0xffffff);
		spent += now_ns() - t0;
	}
	sink += sum;
	return spent / polled;
}

/* One signaled WQE posted and rung, its CQE written as the device would,
 * then polled: the host's part of a round trip. */
static double ping(struct qp *q, struct cqe64 *cq, uint64_t n)
{
	uint32_t ci = 0;
	uint64_t sum = 0;
	for (uint32_t k = 0; k < NCQE; k++)
		cq[k].op_own = CQE_INVALID << 4;
	struct sq_state st = sq_begin(q);
	double t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *w = wqe_at(&st, st.pi);
		set_ctrl(&st, OP_RDMA_WRITE, 3, 1);
		struct raddr *r = (struct raddr *)(w + 16);
		struct data *d = (struct data *)(w + 32);
		r->raddr = htobe64(0x10000);
		r->rkey = htobe32(0x500);
		d->byte_count = htobe32(64);
		d->lkey = htobe32(0x400);
		d->addr = htobe64(0x20000);
		st.wr_ids[st.pi & (SQ_BBS - 1)] = i;
		uint32_t last = st.pi++;
		ring_db(q, &st, last);

		/* The device. */
		struct cqe64 *e = &cq[ci & (NCQE - 1)];
		e->byte_cnt = htobe32(64);
		e->sop_drop_qpn = htobe32(((uint32_t)OP_RDMA_WRITE << 24) | st.qpn);
		e->wqe_counter = htobe16((uint16_t)last);
		__atomic_store_n(&e->op_own, (uint8_t)((CQE_REQ << 4) | ((ci >> LOG_CQ) & 1)), __ATOMIC_RELEASE);

		/* The poll. */
		uint8_t op_own = __atomic_load_n(&e->op_own, __ATOMIC_ACQUIRE);
		if ((op_own >> 4) == CQE_INVALID || (op_own & 1) != ((ci >> LOG_CQ) & 1))
			abort();
		uint16_t wc = be16toh(e->wqe_counter);
		sum += st.wr_ids[wc & (SQ_BBS - 1)] + be32toh(e->byte_cnt);
		ci++;
		cq_dbrec[0] = htobe32(ci & 0xffffff);
	}
	double ns = (now_ns() - t0) / n;
	sq_end(q, st);
	sink += sum;
	return ns;
}

int main(void)
{
	const uint64_t n = 1000000;
	uar = aligned_alloc(4096, 4096);
	struct cqe64 *cq = aligned_alloc(4096, 64u << LOG_CQ);
	struct qp *qps[NQP];
	for (int i = 0; i < NQP; i++)
		qps[i] = new_qp(0x123 + i);

	double post = post_write(qps[0], n);
	double poll = poll_cq(cq, qps, 1, n);
	/* The same loop: it reads only the fields it uses, as the lazy poll does. */
	double poll_lazy = poll_cq(cq, qps, 1, n);
	double inl = post_inline64(qps[1], n);
	double sge4 = post_sge4(qps[2], n);
	double ud = post_ud(qps[3], n);
	double poll8 = poll_cq(cq, qps, NQP, n);
	double pp = ping(qps[4], cq, n);
	printf("{\"bench\": \"datapath-c\", \"post_send_ns_per_wqe\": %.2f, \"poll_ns_per_cqe\": %.2f, \"poll_lazy_ns_per_cqe\": %.2f, "
	       "\"send_inline64_ns_per_wqe\": %.2f, \"sge4_ns_per_wqe\": %.2f, \"ud_send_ns_per_wqe\": %.2f, "
	       "\"poll_8qp_ns_per_cqe\": %.2f, \"ping_ns\": %.2f, \"check\": %llu}\n",
	       post, poll, poll_lazy, inl, sge4, ud, poll8, pp, (unsigned long long)(sink & 1));
	return 0;
}
