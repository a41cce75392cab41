/*
 * Baseline for `devx-cli bench datapath`: the post and poll loops as C
 * drivers write them with mlx5dv-style inline helpers (big-endian stores of
 * the ctrl, remote-address and data segments; owner-bit polling), on plain
 * memory with the doorbell going to a dummy page.
 *
 *   gcc -O2 -o /tmp/datapath-c tools/bench-c/datapath.c && /tmp/datapath-c
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOG_SQ 10
#define LOG_CQ 12
#define BATCH 16

struct ctrl { uint32_t opmod_idx_opcode, qpn_ds; uint8_t sig, rsvd[2], fm_ce_se; uint32_t imm; };
struct raddr { uint64_t raddr; uint32_t rkey, rsvd; };
struct data { uint32_t byte_count, lkey; uint64_t addr; };
struct cqe64 { uint8_t rsvd[44]; uint32_t byte_cnt; uint64_t ts; uint32_t sop_drop_qpn; uint16_t wqe_counter; uint8_t sig, op_own; };

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static inline void barrier(void) { __asm__ volatile("" ::: "memory"); }

int main(void)
{
	uint8_t *sq = aligned_alloc(4096, 64u << LOG_SQ);
	volatile uint64_t *uar = aligned_alloc(4096, 4096);
	volatile uint32_t dbrec[2] = {0, 0};
	struct cqe64 *cq = aligned_alloc(4096, 64u << LOG_CQ);
	uint64_t wr_ids[1 << LOG_SQ];
	const uint64_t n = 1000000;
	uint32_t pi = 0, qpn = 0x123, bf = 0x800;

	double t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		uint8_t *w = sq + ((pi & ((1u << LOG_SQ) - 1)) << 6);
		struct ctrl *c = (struct ctrl *)w;
		struct raddr *r = (struct raddr *)(w + 16);
		struct data *d = (struct data *)(w + 32);
		c->opmod_idx_opcode = htobe32(((pi & 0xffff) << 8) | 0x08);
		c->qpn_ds = htobe32((qpn << 8) | 3);
		c->sig = 0;
		c->fm_ce_se = (i % 16 == 15) ? 0x08 : 0;
		c->imm = 0;
		r->raddr = htobe64(0x10000 + i * 64);
		r->rkey = htobe32(0x500);
		d->byte_count = htobe32(64);
		d->lkey = htobe32(0x400);
		d->addr = htobe64(0x20000 + i * 64);
		wr_ids[pi & ((1u << LOG_SQ) - 1)] = i;
		pi++;
		if (pi % BATCH == 0) {
			barrier();
			dbrec[1] = htobe32(pi & 0xffff);
			barrier();
			uar[bf / 8] = *(uint64_t *)c;
			bf ^= 0x100;
		}
	}
	double post = (now_ns() - t0) / n;

	/* Poll: fill the ring with valid REQ CQEs for lap 0, poll them all, repeat. */
	const uint32_t ncqe = 1u << LOG_CQ;
	uint32_t ci = 0;
	uint64_t polled = 0, sum = 0;
	double spent = 0;
	while (polled < n) {
		for (uint32_t k = 0; k < ncqe; k++) {
			struct cqe64 *e = &cq[(ci + k) & (ncqe - 1)];
			memset(e, 0, sizeof(*e));
			e->byte_cnt = htobe32(64);
			e->sop_drop_qpn = htobe32((0x08u << 24) | qpn);
			e->wqe_counter = htobe16((uint16_t)(ci + k));
			e->op_own = (uint8_t)(((ci + k) >> LOG_CQ) & 1);
		}
		t0 = now_ns();
		for (;;) {
			struct cqe64 *e = &cq[ci & (ncqe - 1)];
			uint8_t op_own = e->op_own;
			if ((op_own >> 4) == 0xf || (op_own & 1) != ((ci >> LOG_CQ) & 1))
				break;
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			uint32_t q = be32toh(e->sop_drop_qpn) & 0xffffff;
			uint16_t wc = be16toh(e->wqe_counter);
			sum += wr_ids[wc & ((1u << LOG_SQ) - 1)] + be32toh(e->byte_cnt) + q;
			ci++;
			polled++;
			if (polled % ncqe == 0)
				break;
		}
		dbrec[0] = htobe32(ci & 0xffffff);
		spent += now_ns() - t0;
	}
	double poll = spent / polled;
	printf("{\"bench\": \"datapath-c\", \"post_send_ns_per_wqe\": %.2f, \"poll_ns_per_cqe\": %.2f, \"check\": %llu}\n",
	       post, poll, (unsigned long long)(sum & 1));
	return 0;
}
