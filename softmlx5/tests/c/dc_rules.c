/* The device's control-path rules, each tried through the verbs calls a program makes and
 * checked against the answer the kernel or libmlx5 gives (the source function is named). A
 * kinder device would accept what is refused here. Prints one line a rule; exits 1 on the first
 * rule the device does not keep. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_srq *srq;
static union ibv_gid gid;
static int failures;

static void rule(const char *source, const char *what, int got, int expected)
{
	printf("%s %s: %s (got %d, expected %d)\n", got == expected ? "ok  " : "FAIL", source, what,
	       got, expected);
	if (got != expected)
		failures++;
}

static struct ibv_qp *create_dci(uint32_t max_recv_wr, uint64_t send_ops, uint64_t comp_mask,
				 struct mlx5dv_dci_streams *streams)
{
	struct ibv_qp_init_attr_ex attr = {
		.qp_type = IBV_QPT_DRIVER, .send_cq = cq, .recv_cq = cq, .pd = pd,
		.cap = { .max_send_wr = 8, .max_send_sge = 1, .max_recv_wr = max_recv_wr },
		.comp_mask = comp_mask, .send_ops_flags = send_ops,
	};
	struct mlx5dv_qp_init_attr dv = {
		.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
		.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCI },
	};

	if (streams) {
		dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
		dv.dc_init_attr.dci_streams = *streams;
	}
	return mlx5dv_create_qp(ctx, &attr, &dv);
}

static struct ibv_qp *dci(void)
{
	return create_dci(0, IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			  NULL);
}

static struct ibv_qp *create_dct(struct ibv_srq *with)
{
	struct ibv_qp_init_attr_ex attr = {
		.qp_type = IBV_QPT_DRIVER, .send_cq = cq, .recv_cq = cq, .srq = with, .pd = pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
	};
	struct mlx5dv_qp_init_attr dv = {
		.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
		.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = 1 },
	};

	return mlx5dv_create_qp(ctx, &attr, &dv);
}

static int modify(struct ibv_qp *qp, enum ibv_qp_state state, int mask)
{
	struct ibv_qp_attr attr = {
		.qp_state = state, .port_num = 1, .path_mtu = IBV_MTU_1024, .timeout = 14,
		.retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1, .min_rnr_timer = 12,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 64 } },
	};

	return ibv_modify_qp(qp, &attr, mask);
}

#define S IBV_QP_STATE
#define DCI_INIT (S | IBV_QP_PKEY_INDEX | IBV_QP_PORT)
#define DCI_RTR (S | IBV_QP_PATH_MTU)
#define DCI_RTS (S | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)
#define DCT_INIT (S | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT)
#define DCT_RTR (S | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU)

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct mlx5dv_context caps = { .comp_mask = MLX5DV_CONTEXT_MASK_DCI_STREAMS };
	struct ibv_qp *qp;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])))
		return 2;
	ibv_query_gid(ctx, 1, 3, &gid);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	{
		struct ibv_srq_init_attr srq_attr = { .attr = { .max_wr = 4, .max_sge = 1 } };

		srq = ibv_create_srq(pd, &srq_attr);
	}
	mlx5dv_query_device(ctx, &caps);

	/* Creation */
	rule("kernel check_qp_attr", "a DCI with a receive queue", !!create_dci(4, IBV_QP_EX_WITH_RDMA_WRITE,
	     IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, NULL), 0);
	rule("libmlx5 create_qp / mlx5_qp_fill_wr_pfns", "a DCI without send_ops_flags",
	     !!create_dci(0, 0, IBV_QP_INIT_ATTR_PD, NULL), 0);
	{
		struct mlx5dv_dci_streams beyond = {
			.log_num_concurent = caps.dci_streams_caps.max_log_num_concurent + 1,
			.log_num_errored = 0,
		};
		rule("libmlx5 create_qp", "DCI streams beyond dci_streams_caps",
		     !!create_dci(0, IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
				  &beyond), 0);
	}
	rule("kernel mlx5_ib_create_dct", "a DCT without an SRQ", !!create_dct(NULL), 0);

	/* DCI: kernel modify_dci_qp_is_ok */
	qp = dci();
	rule("kernel modify_dci_qp_is_ok", "DCI RESET to INIT with access flags", modify(qp, IBV_QPS_INIT, DCI_INIT | IBV_QP_ACCESS_FLAGS), EINVAL);
	rule("kernel modify_dci_qp_is_ok", "DCI RESET to INIT without the port", modify(qp, IBV_QPS_INIT, S | IBV_QP_PKEY_INDEX), EINVAL);
	rule("kernel modify_dci_qp_is_ok", "DCI RESET to RTR", modify(qp, IBV_QPS_RTR, DCI_RTR), EINVAL);
	rule("kernel modify_dci_qp_is_ok", "DCI RESET to INIT", modify(qp, IBV_QPS_INIT, DCI_INIT), 0);
	rule("kernel modify_dci_qp_is_ok", "DCI INIT to RTR without the path MTU", modify(qp, IBV_QPS_RTR, S), EINVAL);
	rule("kernel modify_dci_qp_is_ok", "DCI INIT to RTR with an address vector (Linux 5.0)", modify(qp, IBV_QPS_RTR, DCI_RTR | IBV_QP_AV), 0);
	rule("kernel modify_dci_qp_is_ok", "DCI RTR to RTS without the SQ PSN", modify(qp, IBV_QPS_RTS, DCI_RTS & ~IBV_QP_SQ_PSN), EINVAL);
	{
		struct ibv_qp_attr attr = {
			.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
			.max_rd_atomic = 255,
		};
		rule("kernel validate_rd_atomic", "DCI max_rd_atomic beyond log_max_ra_res_dc", ibv_modify_qp(qp, &attr, DCI_RTS), EINVAL);
	}
	rule("kernel modify_dci_qp_is_ok", "DCI RTR to RTS", modify(qp, IBV_QPS_RTS, DCI_RTS), 0);
	rule("kernel modify_dci_qp_is_ok", "DCI RTS to RESET", modify(qp, IBV_QPS_RESET, S), 0);
	rule("libmlx5 mlx5dv_dci_stream_id_reset", "stream reset outside RTS", mlx5dv_dci_stream_id_reset(qp, 0), EOPNOTSUPP);
	ibv_destroy_qp(qp);

	/* DCT: kernel mlx5_ib_modify_dct, rdma_check_ah_attr */
	qp = create_dct(srq);
	rule("kernel mlx5_ib_create_dct", "a DCT on an SRQ", !!qp, 1);
	rule("kernel mlx5_ib_modify_dct", "DCT RESET to INIT without access flags", modify(qp, IBV_QPS_INIT, DCI_INIT), EINVAL);
	rule("kernel mlx5_ib_modify_dct", "DCT RESET to INIT", modify(qp, IBV_QPS_INIT, DCT_INIT), 0);
	{
		struct ibv_qp_attr attr = {
			.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 0, .port_num = 1 },
		};
		rule("kernel rdma_check_ah_attr", "DCT RTR with an address vector without a GRH on RoCE", ibv_modify_qp(qp, &attr, DCT_RTR), EINVAL);
	}
	rule("kernel mlx5_ib_modify_dct", "DCT INIT to RTR without the minimum RNR timer", modify(qp, IBV_QPS_RTR, DCT_RTR & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
	rule("kernel mlx5_ib_modify_dct", "DCT INIT to RTR", modify(qp, IBV_QPS_RTR, DCT_RTR), 0);
	rule("kernel mlx5_ib_modify_dct", "DCT RTR to RTS", modify(qp, IBV_QPS_RTS, DCI_RTS), EINVAL);
	ibv_destroy_qp(qp);

	/* Address handles: libmlx5 mlx5_create_ah */
	{
		struct ibv_ah_attr local = { .is_global = 0, .port_num = 1, .dlid = 1 };

		errno = 0;
		rule("libmlx5 mlx5_create_ah", "an address handle without a GRH on RoCE", !!ibv_create_ah(pd, &local), 0);
	}
	printf("%d rules broken\n", failures);
	return failures ? 1 : 0;
}
