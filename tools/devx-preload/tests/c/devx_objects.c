/* Opens the first device with DEVX and drives raw firmware commands through
 * libmlx5's mlx5dv_devx_* calls: a general command, an object create and
 * destroy, a refused create (EREMOTEIO with the firmware status), a UMEM,
 * an EQ number and a UAR. One line per step; exit 0 when all worked. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/mlx5dv.h>

/* PRM opcodes and mailbox sizes (bytes). */
#define QUERY_HCA_CAP 0x100
#define CREATE_CQ 0x400
#define ALLOC_PD 0x800
#define HDR_LEN 16
#define QUERY_HCA_CAP_OUT_LEN (16 + 4096)
#define CREATE_CQ_IN_LEN (16 + 256 + 16)
#define HCA_CAP_GENERAL_CURRENT 1
/* create_cq_in.cq_context.c_eqn: cq_context at byte 16, c_eqn at its byte 0x17. */
#define CREATE_CQ_C_EQN_BYTE (16 + 0x17)

static int fail(const char *what)
{
	printf("%s: FAILED errno %d (%s)\n", what, errno, strerror(errno));
	return 1;
}

static void set16(uint8_t *mbox, int at, uint16_t v)
{
	uint16_t be = htons(v);
	memcpy(mbox + at, &be, 2);
}

static uint32_t get32(const uint8_t *mbox, int at)
{
	uint32_t be;
	memcpy(&be, mbox + at, 4);
	return ntohl(be);
}

int main(void)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0)
		return fail("ibv_get_device_list");
	if (!mlx5dv_is_supported(list[0]))
		return fail("mlx5dv_is_supported");
	struct mlx5dv_context_attr attr = { .flags = MLX5DV_CONTEXT_FLAGS_DEVX };
	struct ibv_context *ctx = mlx5dv_open_device(list[0], &attr);
	if (!ctx)
		return fail("mlx5dv_open_device");
	printf("open %s devx\n", ibv_get_device_name(list[0]));

	uint8_t in[CREATE_CQ_IN_LEN] = { 0 };
	static uint8_t caps[QUERY_HCA_CAP_OUT_LEN];
	set16(in, 0, QUERY_HCA_CAP);
	set16(in, 6, HCA_CAP_GENERAL_CURRENT);
	if (mlx5dv_devx_general_cmd(ctx, in, HDR_LEN, caps, sizeof(caps)))
		return fail("mlx5dv_devx_general_cmd");
	printf("query_hca_cap status %u\n", caps[0]);

	uint8_t out[HDR_LEN] = { 0 };
	memset(in, 0, sizeof(in));
	set16(in, 0, ALLOC_PD);
	struct mlx5dv_devx_obj *pd = mlx5dv_devx_obj_create(ctx, in, HDR_LEN, out, sizeof(out));
	if (!pd)
		return fail("mlx5dv_devx_obj_create(ALLOC_PD)");
	printf("pd pdn 0x%x\n", get32(out, 8) & 0xffffff);

	uint32_t eqn = 0;
	if (mlx5dv_devx_query_eqn(ctx, 0, &eqn))
		return fail("mlx5dv_devx_query_eqn");
	printf("eqn %u\n", eqn);

	/* A CQ on a real EQ but with no ring or UAR: firmware refuses it. */
	memset(in, 0, sizeof(in));
	memset(out, 0, sizeof(out));
	set16(in, 0, CREATE_CQ);
	in[CREATE_CQ_C_EQN_BYTE] = (uint8_t)eqn;
	struct mlx5dv_devx_obj *cq = mlx5dv_devx_obj_create(ctx, in, sizeof(in), out, sizeof(out));
	if (cq)
		return fail("mlx5dv_devx_obj_create(bad CREATE_CQ) succeeded");
	printf("bad cq errno %d status 0x%x syndrome 0x%x\n", errno, out[0], get32(out, 4));

	size_t len = 1 << 14;
	void *buf = aligned_alloc(4096, len);
	if (!buf)
		return fail("aligned_alloc");
	memset(buf, 0, len);
	struct mlx5dv_devx_umem *umem = mlx5dv_devx_umem_reg(ctx, buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!umem)
		return fail("mlx5dv_devx_umem_reg");
	printf("umem id 0x%x\n", umem->umem_id);

	struct mlx5dv_devx_uar *uar = mlx5dv_devx_alloc_uar(ctx, MLX5DV_UAR_ALLOC_TYPE_NC);
	if (!uar)
		return fail("mlx5dv_devx_alloc_uar");
	printf("uar page_id 0x%x\n", uar->page_id);

	mlx5dv_devx_free_uar(uar);
	if (mlx5dv_devx_umem_dereg(umem))
		return fail("mlx5dv_devx_umem_dereg");
	if (mlx5dv_devx_obj_destroy(pd))
		return fail("mlx5dv_devx_obj_destroy");
	if (ibv_close_device(ctx))
		return fail("ibv_close_device");
	ibv_free_device_list(list);
	free(buf);
	printf("done\n");
	return 0;
}
