/* Opens the first device and creates a PD, an MR and a CQ through
 * libibverbs + libmlx5, printing one line per step. Exit status: 0 when
 * every step worked, 1 otherwise (the failing step is printed with errno). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int fail(const char *what)
{
	printf("%s: FAILED errno %d (%s)\n", what, errno, strerror(errno));
	return 1;
}

int main(void)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0)
		return fail("ibv_get_device_list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return fail("ibv_open_device");
	printf("open %s\n", ibv_get_device_name(list[0]));

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		return fail("ibv_alloc_pd");
	printf("pd handle %u\n", pd->handle);

	size_t len = 1 << 16;
	void *buf = aligned_alloc(4096, len);
	if (!buf)
		return fail("aligned_alloc");
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_READ);
	if (!mr)
		return fail("ibv_reg_mr");
	printf("mr lkey 0x%x rkey 0x%x length %zu\n", mr->lkey, mr->rkey, mr->length);

	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!cq)
		return fail("ibv_create_cq");
	printf("cq cqe %d\n", cq->cqe);

	if (ibv_destroy_cq(cq))
		return fail("ibv_destroy_cq");
	if (ibv_dereg_mr(mr))
		return fail("ibv_dereg_mr");
	if (ibv_dealloc_pd(pd))
		return fail("ibv_dealloc_pd");
	if (ibv_close_device(ctx))
		return fail("ibv_close_device");
	ibv_free_device_list(list);
	free(buf);
	printf("done\n");
	return 0;
}
