/* Reads the device's free-running clock through libmlx5's mapped pages:
 * the raw counter twice (ibv_query_rt_values_ex), then the clock info
 * (mlx5dv_get_clock_info), converting both readings to nanoseconds
 * (mlx5dv_ts_to_ns). Prints one line per step; exit status 0 when the
 * counter advanced and converts to wall-clock time near the system's,
 * 1 otherwise. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

static int fail(const char *what, int err)
{
	printf("%s: FAILED errno %d (%s)\n", what, err, strerror(err));
	return 1;
}

static int raw_clock(struct ibv_context *ctx, uint64_t *cycles)
{
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	int err = ibv_query_rt_values_ex(ctx, &v);
	if (err)
		return err;
	if (!(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK))
		return EOPNOTSUPP;
	*cycles = (uint64_t)v.raw_clock.tv_sec * 1000000000ull + v.raw_clock.tv_nsec;
	return 0;
}

int main(void)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0)
		return fail("ibv_get_device_list", errno);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return fail("ibv_open_device", errno);
	printf("open %s\n", ibv_get_device_name(list[0]));

	struct ibv_device_attr_ex attr;
	int err = ibv_query_device_ex(ctx, NULL, &attr);
	if (err)
		return fail("ibv_query_device_ex", err);
	printf("hca_core_clock %" PRIu64 " kHz\n", attr.hca_core_clock);

	uint64_t raw1, raw2;
	err = raw_clock(ctx, &raw1);
	if (err)
		return fail("ibv_query_rt_values_ex", err);
	/* Far longer than the emulated counter's refresh period. */
	struct timespec pause = { .tv_nsec = 20 * 1000 * 1000 };
	nanosleep(&pause, NULL);
	err = raw_clock(ctx, &raw2);
	if (err)
		return fail("ibv_query_rt_values_ex", err);
	printf("raw %" PRIu64 " then %" PRIu64 "\n", raw1, raw2);
	if (raw2 <= raw1) {
		printf("raw clock did not advance\n");
		return 1;
	}

	struct mlx5dv_clock_info info;
	err = mlx5dv_get_clock_info(ctx, &info);
	if (err)
		return fail("mlx5dv_get_clock_info", err);
	printf("clock_info mult %u shift %u mask 0x%" PRIx64 "\n", info.mult, info.shift,
	       info.mask);
	uint64_t ns1 = mlx5dv_ts_to_ns(&info, raw1);
	uint64_t ns2 = mlx5dv_ts_to_ns(&info, raw2);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	uint64_t real = (uint64_t)now.tv_sec * 1000000000ull + now.tv_nsec;
	printf("ns %" PRIu64 " then %" PRIu64 " (delta %" PRIu64 ")\n", ns1, ns2, ns2 - ns1);
	if (ns2 <= ns1) {
		printf("converted time did not advance\n");
		return 1;
	}
	/* The device clock's wall time started at the system's; a minute
	 * apart is not plausible. */
	uint64_t off = real > ns2 ? real - ns2 : ns2 - real;
	if (off > 60ull * 1000000000ull) {
		printf("converted time %" PRIu64 " is far from the system's %" PRIu64 "\n", ns2,
		       real);
		return 1;
	}
	printf("plausible\n");

	if (ibv_close_device(ctx))
		return fail("ibv_close_device", errno);
	ibv_free_device_list(list);
	printf("done\n");
	return 0;
}
