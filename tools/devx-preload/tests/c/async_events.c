/* Reads the device's async events with ibv_get_async_event, as a verbs
 * program does: a QP error (an RDMA write to a region that does not allow
 * remote writes: the responder QP reports an access error), the port going
 * down and up, and a device-fatal error. The link and the fatal error are
 * raised through the preload library's fault functions, found with dlsym
 * (rdma-core has no call for them). One line per event; exit 0 when all
 * came. Every wait is bounded. */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define PORT 1
/* The device's RoCE v2 link-local GID. */
#define GID_INDEX 1
#define LEN 4096
#define WAIT_MS 10000

static int fail(const char *what)
{
	printf("%s: FAILED errno %d (%s)\n", what, errno, strerror(errno));
	exit(1);
}

static void next_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	int r = poll(&p, 1, WAIT_MS);
	if (r != 1) {
		if (r == 0)
			errno = ETIMEDOUT;
		fail("poll async_fd");
	}
	if (ibv_get_async_event(ctx, ev))
		fail("ibv_get_async_event");
}

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (!qp)
		fail("ibv_create_qp");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t peer, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = PORT,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		fail("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = GID_INDEX;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = PORT;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		fail("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		fail("modify to RTS");
}

int main(void)
{
	int (*set_link)(const char *, int) = dlsym(RTLD_DEFAULT, "devx_preload_set_link");
	int (*inject_fatal)(const char *) = dlsym(RTLD_DEFAULT, "devx_preload_inject_fatal_error");
	if (!set_link || !inject_fatal) {
		errno = ENOSYS;
		fail("dlsym devx_preload_* (not under the preload library?)");
	}
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0)
		fail("ibv_get_device_list");
	const char *name = ibv_get_device_name(list[0]);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		fail("ibv_open_device");
	printf("open %s\n", name);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		fail("ibv_alloc_pd / ibv_create_cq");
	uint8_t *buf = calloc(1, 2 * LEN);
	if (!buf)
		fail("calloc");
	/* The target region allows local access only. */
	struct ibv_mr *src = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dst = ibv_reg_mr(pd, buf + LEN, LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!src || !dst)
		fail("ibv_reg_mr");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, PORT, GID_INDEX, &gid))
		fail("ibv_query_gid");
	struct ibv_qp *a = create_qp(pd, cq), *b = create_qp(pd, cq);
	connect_qp(a, b->qp_num, &gid);
	connect_qp(b, a->qp_num, &gid);

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = src->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)(buf + LEN), .rkey = dst->rkey },
	}, *bad;
	if (ibv_post_send(a, &wr, &bad))
		fail("ibv_post_send");
	struct ibv_wc wc;
	int got = 0;
	for (int i = 0; i < WAIT_MS && !got; i++) {
		got = ibv_poll_cq(cq, 1, &wc);
		if (!got) {
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
		}
	}
	if (got != 1)
		fail("ibv_poll_cq");
	printf("wc %s\n", ibv_wc_status_str(wc.status));

	struct ibv_async_event ev;
	next_event(ctx, &ev);
	printf("event %s qp %s\n", ibv_event_type_str(ev.event_type),
	       ev.element.qp == b ? "b" : ev.element.qp == a ? "a" : "?");
	ibv_ack_async_event(&ev);

	if (set_link(name, 0))
		fail("set_link down");
	next_event(ctx, &ev);
	printf("event %s port %d\n", ibv_event_type_str(ev.event_type), ev.element.port_num);
	ibv_ack_async_event(&ev);
	if (set_link(name, 1))
		fail("set_link up");
	next_event(ctx, &ev);
	printf("event %s port %d\n", ibv_event_type_str(ev.event_type), ev.element.port_num);
	ibv_ack_async_event(&ev);

	/* ibv_destroy_qp waits for the acknowledged events the library reports. */
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		fail("ibv_destroy_qp");
	printf("qps destroyed\n");

	if (inject_fatal(name))
		fail("inject_fatal_error");
	next_event(ctx, &ev);
	printf("event %s\n", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);

	ibv_dereg_mr(src);
	ibv_dereg_mr(dst);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	printf("done\n");
	return 0;
}
