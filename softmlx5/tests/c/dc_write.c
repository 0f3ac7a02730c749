/* A C program using rdma-core's verbs and mlx5dv calls for DC, as a user's middleware would:
 * a DC target on an SRQ and a DC initiator on one port, an RDMA WRITE and a SEND addressed with
 * mlx5dv_wr_set_dc_addr, both checked. Built against rdma-core's headers and linked with the
 * software device's libibverbs.so.1; it exits 0 when both arrived. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

#define CHECK(what, ok)                                                            \
	do {                                                                       \
		if (!(ok)) {                                                       \
			fprintf(stderr, "dc_write: %s failed: %s\n", what, strerror(errno)); \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static const uint64_t dc_key = 0xc0ffee;

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 5)
			return 0;
	}
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	struct ibv_qp *dct, *dci;
	struct ibv_qp_ex *qpx;
	struct mlx5dv_qp_ex *dv;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	union ibv_gid gid;
	static char buffer[3 * 64];
	int i;

	CHECK("ibv_get_device_list", list && list[0]);
	ctx = ibv_open_device(list[0]);
	CHECK("ibv_open_device", ctx);
	CHECK("ibv_query_gid", !ibv_query_gid(ctx, 1, 3, &gid));
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK("pd and cq", pd && cq);
	mr = ibv_reg_mr(pd, buffer, sizeof(buffer), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK("ibv_reg_mr", mr);
	memset(buffer, 0x5a, 64);

	/* The target: a DCT on an SRQ, at RTR. */
	{
		struct ibv_srq_init_attr srq_attr = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_sge sge = { (uintptr_t)buffer + 128, 64, mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 3, .sg_list = &sge, .num_sge = 1 }, *bad;
		struct ibv_qp_init_attr_ex attr = {
			.qp_type = IBV_QPT_DRIVER, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
			.send_cq = cq, .recv_cq = cq,
		};
		struct mlx5dv_qp_init_attr dv_attr = {
			.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
			.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = dc_key },
		};
		struct ibv_qp_attr init = {
			.qp_state = IBV_QPS_INIT, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
		};
		struct ibv_qp_attr rtr = {
			.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 64 } },
		};

		srq = ibv_create_srq(pd, &srq_attr);
		CHECK("ibv_create_srq", srq);
		CHECK("ibv_post_srq_recv", !ibv_post_srq_recv(srq, &wr, &bad));
		attr.srq = srq;
		dct = mlx5dv_create_qp(ctx, &attr, &dv_attr);
		CHECK("mlx5dv_create_qp (DCT)", dct);
		CHECK("DCT to INIT", !ibv_modify_qp(dct, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
		CHECK("DCT to RTR", !ibv_modify_qp(dct, &rtr, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU));
	}
	/* The initiator: a DCI at RTS. */
	{
		struct ibv_qp_init_attr_ex attr = {
			.qp_type = IBV_QPT_DRIVER, .send_cq = cq, .recv_cq = cq, .pd = pd,
			.cap = { .max_send_wr = 8, .max_send_sge = 1, .max_inline_data = 32 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND,
		};
		struct mlx5dv_qp_init_attr dv_attr = {
			.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
			.dc_init_attr = { .dc_type = MLX5DV_DCTYPE_DCI },
		};
		struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
		struct ibv_qp_attr rtr = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024 };
		struct ibv_qp_attr rts = {
			.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
			.max_rd_atomic = 1,
		};
		struct ibv_ah_attr ah_attr = {
			.is_global = 1, .port_num = 1, .grh = { .dgid = gid, .sgid_index = 3, .hop_limit = 64 },
		};

		dci = mlx5dv_create_qp(ctx, &attr, &dv_attr);
		CHECK("mlx5dv_create_qp (DCI)", dci);
		CHECK("DCI to INIT", !ibv_modify_qp(dci, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT));
		CHECK("DCI to RTR", !ibv_modify_qp(dci, &rtr, IBV_QP_STATE | IBV_QP_PATH_MTU));
		CHECK("DCI to RTS", !ibv_modify_qp(dci, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
							   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
		ah = ibv_create_ah(pd, &ah_attr);
		CHECK("ibv_create_ah", ah);
	}
	qpx = ibv_qp_to_qp_ex(dci);
	dv = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)buffer + 64);
	mlx5dv_wr_set_dc_addr(dv, ah, dct->qp_num, dc_key);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buffer, 64);
	qpx->wr_id = 2;
	ibv_wr_send(qpx);
	mlx5dv_wr_set_dc_addr(dv, ah, dct->qp_num, dc_key);
	ibv_wr_set_inline_data(qpx, "hello from C", 12);
	CHECK("ibv_wr_complete", !ibv_wr_complete(qpx));

	for (i = 0; i < 3; i++) {
		CHECK("a completion within 5 s", poll_one(cq, &wc) == 1);
		CHECK(ibv_wc_status_str(wc.status), wc.status == IBV_WC_SUCCESS);
	}
	CHECK("the WRITE landed", !memcmp(buffer + 64, buffer, 64));
	CHECK("the SEND arrived", !memcmp(buffer + 128, "hello from C", 12));
	printf("dc_write: %s: DC write and send from C checked\n", ibv_get_device_name(list[0]));
	return 0;
}
