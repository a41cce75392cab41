/*
 * Baseline for `devx-cli bench mailbox`: the same two mailboxes encoded the
 * way C drivers do it, with shift-and-mask macros at constant bit offsets.
 * Offsets come from `devx-cli layout --json`.
 *
 *   gcc -O2 -o /tmp/mailbox-c tools/bench-c/mailbox.c && /tmp/mailbox-c
 */
#include <endian.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define SET(buf, off, sz, v)                                                   \
	do {                                                                   \
		uint32_t *dw_ = (uint32_t *)(buf) + (off) / 32;                \
		uint32_t sh_ = 32 - (sz) - (off) % 32;                         \
		uint32_t m_ = (uint32_t)((((uint64_t)1 << (sz)) - 1) << sh_);  \
		*dw_ = htobe32((be32toh(*dw_) & ~m_) |                         \
			       (((uint32_t)(v) << sh_) & m_));                 \
	} while (0)
#define SET64(buf, off, v) (*(uint64_t *)((uint8_t *)(buf) + (off) / 8) = htobe64(v))

static void __attribute__((noinline)) create_cq(uint32_t *m, uint64_t i)
{
	memset(m, 0, 272);
	SET(m, 0, 16, 0x400);
	SET(m, 736, 1, 1);
	SET(m, 704, 32, (uint32_t)i);
	SET64(m, 640, 0);
	SET(m, 227, 5, 10);
	SET(m, 232, 24, (uint32_t)i);
	SET(m, 312, 8, 3);
	SET(m, 136, 3, 0);
	SET(m, 134, 1, 1);
	SET(m, 160, 32, (uint32_t)i + 1);
	SET64(m, 576, i << 6);
	SET(m, 260, 12, 16);
	SET(m, 272, 16, 32);
}

static void __attribute__((noinline)) create_qp(uint32_t *m, uint64_t i)
{
	memset(m, 0, 272);
	SET(m, 0, 16, 0x500);
	SET(m, 2144, 1, 1);
	SET(m, 2112, 32, (uint32_t)i);
	SET64(m, 2048, 0);
	SET(m, 200, 8, 0);
	SET(m, 211, 2, 3);
	SET(m, 232, 24, (uint32_t)i);
	SET(m, 296, 24, 7);
	SET(m, 265, 4, 8);
	SET(m, 269, 3, 2);
	SET(m, 273, 4, 8);
	SET(m, 280, 2, 1);
	SET(m, 1192, 24, (uint32_t)i);
	SET(m, 1448, 24, (uint32_t)i);
	SET(m, 1859, 1, 1);
	SET(m, 2016, 32, (uint32_t)i + 1);
	SET64(m, 1472, i << 6);
	SET(m, 328, 24, (uint32_t)i);
}

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void)
{
	static uint32_t m[68] __attribute__((aligned(8)));
	const uint64_t n = 5000000;
	double t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		create_cq(m, i);
		__asm__ volatile("" : : "r"(m) : "memory");
	}
	double cq = (now_ns() - t0) / n;
	t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		create_qp(m, i);
		__asm__ volatile("" : : "r"(m) : "memory");
	}
	double qp = (now_ns() - t0) / n;
	printf("{\"bench\": \"mailbox-c\", \"create_cq_in_ns\": %.2f, \"create_qp_in_ns\": %.2f}\n", cq, qp);
	return 0;
}
