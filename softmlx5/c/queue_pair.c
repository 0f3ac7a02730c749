/* DC initiators and targets as libmlx5's create_qp / create_dct lay them out, by the kernel's
 * and libmlx5's rules; their state machines (mlx5_ib's modify_dci_qp_is_ok and
 * mlx5_ib_modify_dct); address handles (mlx5_create_ah); mlx5dv_init_obj's view of them; and
 * DCI stream reset. RC and UD stay rxe's: other queue pair types are EOPNOTSUPP. */
#include "softmlx5.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

int soft_srq_take(struct ibv_srq *ibsrq);

static struct soft_qp *soft_qp_of(struct ibv_qp *qp)
{
	return container_of(qp, struct soft_qp, mqp.verbs_qp.qp);
}

struct soft_qp *soft_qp_find(uint32_t qpn)
{
	struct soft_qp *qp;

	for (qp = soft_qps; qp; qp = qp->next)
		if (qp->mqp.verbs_qp.qp.qp_num == qpn)
			return qp;
	return NULL;
}

/* ---- creation ---- */

/* libmlx5 MLX5_SUPPORTED_SEND_OPS_FLAGS_DCI (qp.c): those of RC. */
#define SUPPORTED_SEND_OPS_DCI                                                              \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_SEND_WITH_IMM |  \
	 IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |                     \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |                       \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |                     \
	 IBV_QP_EX_WITH_BIND_MW)

/* verbs.c: _sq_overhead for a DCI: the control segment, grown to the largest operation's
 * segments, and the datagram segment. */
static uint32_t dci_overhead(uint64_t ops)
{
	uint32_t size = sizeof(struct mlx5_wqe_ctrl_seg);

	if (ops & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		   IBV_QP_EX_WITH_RDMA_READ))
		size = sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_raddr_seg);
	if (ops & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD))
		size = sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_raddr_seg) +
		       sizeof(struct mlx5_wqe_atomic_seg);
	return size + sizeof(struct mlx5_wqe_datagram_seg);
}

/* verbs.c: mlx5_calc_send_wqe and mlx5_calc_sq_size for a DCI. 0 or an errno. */
static int size_dci_send_queue(struct mlx5_context *ctx, struct ibv_qp_init_attr_ex *attr,
			       struct mlx5_qp *qp, uint32_t *queue_bytes)
{
	uint32_t overhead = dci_overhead(attr->send_ops_flags);
	uint32_t inline_size = 0, size, wqe_size, max_gather;
	uint64_t wq_size;

	if (attr->cap.max_inline_data)
		inline_size = overhead + align(sizeof(struct mlx5_wqe_inl_data_seg) +
					       attr->cap.max_inline_data, 16);
	max_gather = ((uint32_t)ctx->max_sq_desc_sz - overhead) / sizeof(struct mlx5_wqe_data_seg);
	if (attr->cap.max_send_sge > max_gather)
		return EINVAL;
	size = overhead + attr->cap.max_send_sge * sizeof(struct mlx5_wqe_data_seg);
	if (inline_size > size)
		size = inline_size;
	if (size > (uint32_t)ctx->max_sq_desc_sz)
		return EINVAL;
	wqe_size = align(size, MLX5_SEND_WQE_BB);
	qp->max_inline_data = (int)(wqe_size - overhead - sizeof(struct mlx5_wqe_inl_data_seg));
	attr->cap.max_inline_data = (uint32_t)qp->max_inline_data;
	if (attr->cap.max_send_wr > (uint32_t)ctx->max_send_wqebb || !attr->cap.max_send_wr)
		return EINVAL;
	wq_size = 1;
	while (wq_size < (uint64_t)attr->cap.max_send_wr * wqe_size)
		wq_size <<= 1;
	qp->sq.wqe_cnt = (unsigned)(wq_size / MLX5_SEND_WQE_BB);
	if (qp->sq.wqe_cnt > (unsigned)ctx->max_send_wqebb)
		return EINVAL;
	qp->sq.wqe_shift = STATIC_ILOG_32(MLX5_SEND_WQE_BB) - 1;
	qp->sq.max_gs = (int)attr->cap.max_send_sge;
	qp->sq.max_post = (int)(wq_size / wqe_size);
	*queue_bytes = (uint32_t)wq_size;
	return 0;
}

/* The register a new QP rings (verbs.c create_qp): its thread domain's own
 * (mlx5_attach_dedicated_uar); on a kernel with dynamic UAR and MLX5_SHUT_UP_BF the
 * doorbell-only one (mlx5_get_qp_uar: nc_uar); else one of the shared BlueFlame registers, with
 * a lock (the kernel's medium-latency bfregs), MLX5_SHUT_UP_BF or not on a kernel without
 * dynamic UAR, whose registers all have halves (mlx5_set_context). */
static struct mlx5_bf *choose_register(struct soft_context *ctx, struct ibv_pd *pd)
{
	struct mlx5_parent_domain *parent = to_mparent_domain(pd);

	if (parent && parent->mtd)
		return parent->mtd->bf;
	if (ctx->mctx.shut_up_bf && !(ctx->mctx.flags & MLX5_CTX_FLAGS_NO_KERN_DYN_UAR))
		return &ctx->bfs[0];
	ctx->next_shared_bf = ctx->next_shared_bf % 7 + 1;
	return &ctx->bfs[ctx->next_shared_bf];
}

static void link_qp(struct soft_qp *qp)
{
	qp->next = soft_qps;
	soft_qps = qp;
}

/* The user index CQE version 1 carries (mlx5_store_uidx), and a QP number; undone when either
 * is missing. */
static struct ibv_qp *finish_create(struct soft_qp *qp)
{
	struct ibv_qp *ibqp = &qp->mqp.verbs_qp.qp;
	int uidx = soft_store_uidx(to_mctx(ibqp->context), &qp->mqp.rsc);

	if (uidx < 0 || !ibqp->qp_num) {
		if (uidx >= 0)
			soft_clear_uidx(to_mctx(ibqp->context), (uint32_t)uidx);
		ibv_destroy_qp(ibqp);
		errno = ENOSPC;
		return NULL;
	}
	qp->mqp.rsc.rsn = (uint32_t)uidx;
	if (qp->mqp.dc_type == MLX5DV_DCTYPE_DCT)
		soft_counters.dc_targets_created++;
	else if (qp->mqp.dc_type == MLX5DV_DCTYPE_DCI)
		soft_counters.dc_initiators_created++;
	return ibqp;
}

static struct ibv_qp *create_dci(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
				 struct mlx5dv_qp_init_attr *mlx5_attr)
{
	struct soft_context *ctx = container_of(context, struct soft_context, mctx.ibv_ctx.context);
	struct mlx5_context *mctx = &ctx->mctx;
	struct soft_qp *qp;
	struct mlx5_qp *mqp;
	uint32_t queue_bytes, wqe_size;
	int err;

	/* libibverbs ibv_create_qp_ex and libmlx5 mlx5_qp_fill_wr_pfns: a PD, and the send
	 * operations asked for. */
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    !(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	/* kernel check_qp_attr: a DCI has no receive queue */
	if (attr->cap.max_recv_wr || attr->cap.max_recv_sge || attr->srq) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->cap.max_send_sge > 30 || !attr->send_cq) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->send_ops_flags & ~(uint64_t)SUPPORTED_SEND_OPS_DCI) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* libmlx5 create_qp: streams within dci_streams_caps; kernel process_vendor_flag
	 * (MLX5_QP_FLAG_DCI_STREAM): EINVAL without stream channels. */
	if (mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) {
		struct mlx5dv_dci_streams *streams = &mlx5_attr->dc_init_attr.dci_streams;

		if (!mctx->dci_streams_caps.max_log_num_concurent ||
		    streams->log_num_concurent > mctx->dci_streams_caps.max_log_num_concurent ||
		    streams->log_num_errored > mctx->dci_streams_caps.max_log_num_errored) {
			errno = EINVAL;
			return NULL;
		}
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	mqp = &qp->mqp;
	mqp->dc_type = MLX5DV_DCTYPE_DCI;
	err = size_dci_send_queue(mctx, attr, mqp, &queue_bytes);
	if (err) {
		free(qp);
		errno = err;
		return NULL;
	}
	wqe_size = queue_bytes / (uint32_t)mqp->sq.max_post;
	(void)wqe_size;
	/* verbs.c: create_qp and mlx5_alloc_qp_buf: the SQ alone in its buffer */
	mqp->buf.buf = soft_zalloc_aligned(queue_bytes);
	mqp->buf.length = queue_bytes;
	mqp->buf_size = (int)queue_bytes;
	mqp->sq.offset = 0;
	mqp->sq_start = mqp->buf.buf;
	mqp->sq.qend = (char *)mqp->buf.buf + queue_bytes;
	mqp->sq.wrid = calloc(mqp->sq.wqe_cnt, sizeof(*mqp->sq.wrid));
	mqp->sq.wqe_head = calloc(mqp->sq.wqe_cnt, sizeof(*mqp->sq.wqe_head));
	mqp->sq.wr_data = calloc(mqp->sq.wqe_cnt, sizeof(*mqp->sq.wr_data));
	mqp->db = soft_zalloc_aligned(64);
	mlx5_spinlock_init(&mqp->sq.lock, 1);
	soft_requester_reset(qp);
	mlx5_spinlock_init(&mqp->rq.lock, 1);
	mqp->sq_signal_bits = attr->sq_sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
	mqp->atomics_enabled = 1;
	mqp->rsc.type = MLX5_RSC_TYPE_QP;
	mqp->bf = choose_register(ctx, attr->pd);
	mqp->ibv_qp = &mqp->verbs_qp.qp;
	mqp->verbs_qp.qp.context = context;
	mqp->verbs_qp.qp.pd = attr->pd;
	mqp->verbs_qp.qp.qp_type = IBV_QPT_DRIVER;
	mqp->verbs_qp.qp.state = IBV_QPS_RESET;
	mqp->verbs_qp.qp.send_cq = attr->send_cq;
	mqp->verbs_qp.qp.recv_cq = attr->recv_cq ? attr->recv_cq : attr->send_cq;
	mqp->verbs_qp.qp.qp_context = attr->qp_context;
	mqp->verbs_qp.qp.events_completed = 0;
	pthread_mutex_init(&mqp->verbs_qp.qp.mutex, NULL);
	pthread_cond_init(&mqp->verbs_qp.qp.cond, NULL);
	mqp->verbs_qp.comp_mask |= VERBS_QP_EX;
	if (mlx5_qp_fill_wr_pfns(mqp, attr, mlx5_attr)) {
		free(mqp->buf.buf);
		free(qp);
		errno = EOPNOTSUPP;
		return NULL;
	}
	attr->cap.max_send_wr = (uint32_t)mqp->sq.max_post;
	qp->state = IBV_QPS_RESET;
	if (mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) {
		qp->log_num_concurrent = mlx5_attr->dc_init_attr.dci_streams.log_num_concurent;
		qp->log_num_errored = mlx5_attr->dc_init_attr.dci_streams.log_num_errored;
	}
	pthread_mutex_lock(&soft_lock);
	mqp->verbs_qp.qp.qp_num = soft_fabric_claim_qpn();
	link_qp(qp);
	pthread_mutex_unlock(&soft_lock);
	return finish_create(qp);
}

static struct ibv_qp *create_dct(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
				 struct mlx5dv_qp_init_attr *mlx5_attr)
{
	struct soft_qp *qp;
	struct mlx5_qp *mqp;

	/* libmlx5 create_dct: comp_mask within IBV_QP_INIT_ATTR_PD, the vendor mask within DC
	 * and QP_CREATE_FLAGS (EINVAL); kernel mlx5_ib_create_dct: an SRQ and a receive CQ. */
	if (attr->comp_mask & ~IBV_QP_INIT_ATTR_PD ||
	    mlx5_attr->comp_mask & ~(uint64_t)(MLX5DV_QP_INIT_ATTR_MASK_DC |
					     MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) ||
	    !attr->srq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	mqp = &qp->mqp;
	mqp->dc_type = MLX5DV_DCTYPE_DCT;
	mqp->rsc.type = MLX5_RSC_TYPE_QP;
	mqp->ibv_qp = &mqp->verbs_qp.qp;
	mqp->verbs_qp.qp.context = context;
	mqp->verbs_qp.qp.pd = attr->pd;
	mqp->verbs_qp.qp.qp_type = IBV_QPT_DRIVER;
	mqp->verbs_qp.qp.state = IBV_QPS_RESET;
	mqp->verbs_qp.qp.srq = attr->srq;
	mqp->verbs_qp.qp.recv_cq = attr->recv_cq;
	mqp->verbs_qp.qp.send_cq = attr->recv_cq;
	mqp->verbs_qp.qp.qp_context = attr->qp_context;
	pthread_mutex_init(&mqp->verbs_qp.qp.mutex, NULL);
	pthread_cond_init(&mqp->verbs_qp.qp.cond, NULL);
	mqp->bf = &container_of(context, struct soft_context, mctx.ibv_ctx.context)->bfs[0];
	qp->state = IBV_QPS_RESET;
	qp->dc_key = mlx5_attr->dc_init_attr.dct_access_key;
	pthread_mutex_lock(&soft_lock);
	mqp->verbs_qp.qp.qp_num = soft_fabric_claim_qpn();
	link_qp(qp);
	pthread_mutex_unlock(&soft_lock);
	return finish_create(qp);
}

SOFT_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context,
					    struct ibv_qp_init_attr_ex *attr,
					    struct mlx5dv_qp_init_attr *mlx5_attr)
{
	/* libmlx5 create_qp: DC is an IBV_QPT_DRIVER queue pair with the DC mask. */
	if (attr->qp_type != IBV_QPT_DRIVER || !mlx5_attr ||
	    !(mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (mlx5_attr->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCT)
		return create_dct(context, attr, mlx5_attr);
	if (mlx5_attr->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCI)
		return create_dci(context, attr, mlx5_attr);
	errno = EINVAL;
	return NULL;
}

struct ibv_qp *soft_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	(void)context, (void)attr;
	errno = EOPNOTSUPP; /* RC, UD and the rest are rxe's */
	return NULL;
}

SOFT_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	(void)pd, (void)attr;
	errno = EOPNOTSUPP;
	return NULL;
}

SOFT_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct soft_qp **link, *qp = soft_qp_of(ibqp);

	pthread_mutex_lock(&soft_lock);
	for (link = &soft_qps; *link; link = &(*link)->next)
		if (*link == qp) {
			*link = qp->next;
			break;
		}
	if (ibqp->qp_num)
		soft_fabric_release_qpn(ibqp->qp_num);
	pthread_mutex_unlock(&soft_lock);
	if (qp->mqp.rsc.rsn)
		soft_clear_uidx(to_mctx(ibqp->context), qp->mqp.rsc.rsn);
	free(qp->mqp.buf.buf);
	free(qp->mqp.sq.wrid);
	free(qp->mqp.sq.wqe_head);
	free(qp->mqp.sq.wr_data);
	free(qp->mqp.db);
	soft_dedup_free(qp->dedup);
	free(qp);
	return 0;
}

SOFT_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct verbs_qp *vqp = (struct verbs_qp *)qp;

	if (vqp->comp_mask & VERBS_QP_EX)
		return &vqp->qp_ex;
	return NULL;
}

SOFT_EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
	return &(container_of(qp, struct mlx5_qp, verbs_qp.qp_ex))->dv_qp;
}

/* ---- state machines ---- */

static bool valid_mask(int mask, int required, int optional)
{
	return (mask & required) == required && (mask & ~(required | optional)) == 0;
}

/* kernel modify_dci_qp_is_ok; a kernel without DCI RESET (Linux before v4.20) has no RESET
 * branch and no IB_QP_AV at INIT → RTR (v5.0). */
static bool modify_dci_is_ok(enum ibv_qp_state cur, enum ibv_qp_state new, int mask,
			     bool current_kernel)
{
	int req = IBV_QP_STATE;
	int rtr_optional = IBV_QP_PKEY_INDEX | (current_kernel ? IBV_QP_AV : 0);

	if (new == IBV_QPS_RESET)
		return current_kernel && valid_mask(mask, req, 0);
	if (cur == IBV_QPS_RESET && new == IBV_QPS_INIT)
		return valid_mask(mask, req | IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0);
	if (cur == IBV_QPS_INIT && new == IBV_QPS_INIT)
		return valid_mask(mask, req, IBV_QP_PKEY_INDEX | IBV_QP_PORT);
	if (cur == IBV_QPS_INIT && new == IBV_QPS_RTR)
		return valid_mask(mask, req | IBV_QP_PATH_MTU, rtr_optional);
	if (cur == IBV_QPS_RTR && new == IBV_QPS_RTS)
		return valid_mask(mask, req | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					      IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN,
				  IBV_QP_MIN_RNR_TIMER);
	if (cur == IBV_QPS_RTS && new == IBV_QPS_RTS)
		return valid_mask(mask, req, IBV_QP_MIN_RNR_TIMER);
	if (cur != IBV_QPS_RESET && new == IBV_QPS_ERR)
		return valid_mask(mask, req, 0);
	return false;
}

/* kernel mlx5_ib_modify_dct: RESET → INIT and INIT → RTR with exact masks. */
static bool modify_dct_is_ok(enum ibv_qp_state cur, enum ibv_qp_state new, int mask)
{
	int req = IBV_QP_STATE;

	if (!(mask & req))
		return false;
	if (cur == IBV_QPS_RESET && new == IBV_QPS_INIT)
		return valid_mask(mask, req | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0);
	if (cur == IBV_QPS_INIT && new == IBV_QPS_RTR)
		return valid_mask(mask, req | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU, 0);
	return false;
}

/* kernel rdma_check_ah_attr: a GRH on RoCE and on ports that require one; its source GID in
 * the table. */
static bool check_ah_attr(struct soft_device *dev, const struct ibv_ah_attr *ah)
{
	if (!ah->is_global && (dev->port.ethernet || dev->port.grh_required))
		return false;
	if (ah->port_num != 1)
		return false;
	if (ah->is_global && (ah->grh.sgid_index >= SOFT_GID_TABLE_LEN ||
			      !dev->port.gids[ah->grh.sgid_index].valid))
		return false;
	return true;
}

/* Moves a QP to ERR and flushes (engine.c writes the flush CQEs). Called with soft_lock. */
void soft_qp_to_error(struct soft_qp *qp)
{
	qp->state = IBV_QPS_ERR;
	qp->mqp.verbs_qp.qp.state = IBV_QPS_ERR;
}

/* Empties a DCI's queue of what the device holds of it, as a QP is at RESET
 * (mlx5_init_qp_indices on libmlx5's side). Called with soft_lock. */
static void reset_requester(struct soft_qp *qp)
{
	soft_requester_reset(qp);
	qp->errored_streams = 0;
	/* libmlx5's mlx5_modify_qp to RESET: mlx5_init_qp_indices, and the record zeroed */
	qp->mqp.sq.head = qp->mqp.sq.tail = 0;
	qp->mqp.sq.cur_post = 0;
	qp->mqp.rq.head = qp->mqp.rq.tail = 0;
	qp->mqp.db[MLX5_SND_DBR] = 0;
	qp->mqp.db[MLX5_RCV_DBR] = 0;
}

SOFT_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct soft_qp *qp = soft_qp_of(ibqp);
	struct soft_device *dev = soft_device_of(ibqp->context);
	enum ibv_qp_state cur, new;
	bool ok;

	pthread_mutex_lock(&soft_lock);
	cur = qp->state;
	if (mask & IBV_QP_CUR_STATE) {
		pthread_mutex_unlock(&soft_lock);
		return EINVAL;
	}
	new = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
	if (qp->mqp.dc_type == MLX5DV_DCTYPE_DCT)
		ok = modify_dct_is_ok(cur, new, mask);
	else
		ok = modify_dci_is_ok(cur, new, mask, !dev->profile.no_dci_reset);
	if (ok && (mask & IBV_QP_PORT) && attr->port_num != 1)
		ok = false;
	if (ok && (mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0)
		ok = false;
	if (ok && (mask & IBV_QP_PATH_MTU) &&
	    (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
		ok = false;
	/* kernel validate_rd_atomic: max_rd_atomic within 1 << log_max_ra_res_dc */
	if (ok && (mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
	    attr->max_rd_atomic > to_mctx(ibqp->context)->max_dc_init_rd_atom)
		ok = false;
	if (ok && (mask & IBV_QP_AV) && !check_ah_attr(dev, &attr->ah_attr))
		ok = false;
	if (ok && (mask & IBV_QP_TIMEOUT) && attr->timeout > 31)
		ok = false;
	if (ok && (mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
		ok = false;
	if (ok && (mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
		ok = false;
	if (!ok) {
		pthread_mutex_unlock(&soft_lock);
		return EINVAL;
	}
	/* kernel mlx5_ib_modify_dct: remote atomics on a device without DC atomics
	 * (get_atomic_mode fails) */
	if (qp->mqp.dc_type == MLX5DV_DCTYPE_DCT && (mask & IBV_QP_ACCESS_FLAGS) &&
	    (attr->qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC) && dev->profile.no_dc_atomics) {
		pthread_mutex_unlock(&soft_lock);
		return EOPNOTSUPP;
	}
	if (mask & IBV_QP_PORT)
		qp->port = attr->port_num;
	if (mask & IBV_QP_PKEY_INDEX)
		qp->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_ACCESS_FLAGS)
		qp->access = attr->qp_access_flags;
	if (mask & IBV_QP_PATH_MTU)
		qp->path_mtu = attr->path_mtu;
	if (mask & IBV_QP_TIMEOUT)
		qp->timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		qp->retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		qp->rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_SQ_PSN)
		qp->sq_psn = attr->sq_psn;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_AV) {
		qp->ah_attr = attr->ah_attr;
		qp->ah_set = true;
	}
	if (new == IBV_QPS_RESET && qp->mqp.dc_type == MLX5DV_DCTYPE_DCI)
		reset_requester(qp);
	/* libmlx5 mlx5_modify_qp: qp_state_max_gs follows the state (RTS: the send SGEs) */
	if (new == IBV_QPS_RTS)
		qp->mqp.sq.qp_state_max_gs = qp->mqp.sq.max_gs;
	qp->state = new;
	ibqp->state = new;
	pthread_mutex_unlock(&soft_lock);
	soft_engine_kick();
	return 0;
}

SOFT_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
			     struct ibv_qp_init_attr *init)
{
	struct soft_qp *qp = soft_qp_of(ibqp);

	(void)mask;
	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	pthread_mutex_lock(&soft_lock);
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->path_mtu = qp->path_mtu;
	attr->qp_access_flags = qp->access;
	attr->pkey_index = qp->pkey_index;
	attr->port_num = qp->port;
	attr->timeout = qp->timeout;
	attr->retry_cnt = qp->retry_cnt;
	attr->rnr_retry = qp->rnr_retry;
	attr->min_rnr_timer = qp->min_rnr_timer;
	attr->sq_psn = qp->sq_psn;
	attr->max_rd_atomic = qp->max_rd_atomic;
	if (qp->ah_set)
		attr->ah_attr = qp->ah_attr;
	if (qp->mqp.dc_type == MLX5DV_DCTYPE_DCI) {
		attr->cap.max_send_wr = (uint32_t)qp->mqp.sq.max_post;
		attr->cap.max_send_sge = (uint32_t)qp->mqp.sq.max_gs;
		attr->cap.max_inline_data = (uint32_t)qp->mqp.max_inline_data;
	}
	init->cap = attr->cap;
	init->qp_type = IBV_QPT_DRIVER;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->qp_context = ibqp->qp_context;
	pthread_mutex_unlock(&soft_lock);
	return 0;
}

/* mlx5.c: mlx5dv_dci_stream_id_reset — EOPNOTSUPP on a device without errored streams or the
 * QP context extension, or unless the DCI is in RTS (the library's cached state); EINVAL for a
 * queue pair that is not a DCI; the device clears the stream's error. */
SOFT_EXPORT int mlx5dv_dci_stream_id_reset(struct ibv_qp *ibqp, uint16_t stream_id)
{
	struct mlx5_context *mctx = to_mctx(ibqp->context);
	struct soft_qp *qp = soft_qp_of(ibqp);
	int ret = 0;

	pthread_mutex_lock(&soft_lock);
	if (!mctx->dci_streams_caps.max_log_num_errored || !mctx->qpc_extension_cap ||
	    ibqp->state != IBV_QPS_RTS)
		ret = EOPNOTSUPP;
	else if (qp->mqp.dc_type != MLX5DV_DCTYPE_DCI)
		ret = EINVAL;
	else if (stream_id < 64)
		qp->errored_streams &= ~(1ull << stream_id);
	pthread_mutex_unlock(&soft_lock);
	soft_engine_kick();
	return ret;
}

/* ---- address handles (verbs.c: mlx5_create_ah) ---- */

SOFT_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct soft_device *dev = soft_device_of(pd->context);
	struct soft_ah *ah;
	uint32_t gid_type;

	if (attr->port_num != 1) {
		errno = EINVAL;
		return NULL;
	}
	if (!attr->is_global && (dev->port.ethernet || dev->port.grh_required)) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->is_global && (attr->grh.sgid_index >= SOFT_GID_TABLE_LEN ||
				!dev->port.gids[attr->grh.sgid_index].valid)) {
		errno = EINVAL;
		return NULL;
	}
	/* RoCE resolves the peer's MAC (ib_resolve_eth_dmac): a GID no port of the fabric
	 * holds does not answer ARP. */
	if (dev->port.ethernet && (soft_faults.fail_arp ||
				   (!soft_port_has_gid(&dev->port, attr->grh.dgid.raw) &&
				    attr->grh.dgid.raw[0] != 0xff))) {
		errno = ETIMEDOUT;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	if (dev->port.ethernet) {
		gid_type = dev->port.gids[attr->grh.sgid_index].type;
		if (gid_type == IBV_GID_TYPE_ROCE_V2)
			ah->mah.av.rlid = htobe16(0xc000 | (attr->dlid ? attr->dlid : 0x1234));
		ah->mah.av.stat_rate_sl = (uint8_t)(((attr->sl & 0x7) << 1));
		memset(ah->mah.av.rmac, 0x02, 6);
		ah->mah.av.rmac[5] = (uint8_t)dev->index;
	} else {
		ah->mah.av.fl_mlid = attr->src_path_bits & 0x7f;
		ah->mah.av.rlid = htobe16(attr->dlid);
		ah->mah.av.stat_rate_sl = (uint8_t)(attr->sl & 0xf);
	}
	if (attr->is_global) {
		ah->mah.av.tclass = attr->grh.traffic_class;
		ah->mah.av.hop_limit = attr->grh.hop_limit;
		ah->mah.av.grh_gid_fl = htobe32(((dev->port.ethernet ? 0u : 1u) << 30) |
						((attr->grh.sgid_index & 0xffu) << 20) |
						(attr->grh.flow_label & 0xfffff));
		memcpy(ah->mah.av.rgid, attr->grh.dgid.raw, 16);
	}
	ah->mah.is_global = attr->is_global;
	ah->mah.ibv_ah.context = pd->context;
	ah->mah.ibv_ah.pd = pd;
	pthread_mutex_init(&ah->mah.mutex, NULL);
	return &ah->mah.ibv_ah;
}

SOFT_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	free(container_of(ah, struct soft_ah, mah.ibv_ah));
	return 0;
}

/* ---- mlx5dv_init_obj (mlx5.c: mlx5dv_get_qp, mlx5dv_get_cq, mlx5dv_get_srq) ---- */

static int get_qp(struct ibv_qp *ibqp, struct mlx5dv_qp *out)
{
	struct mlx5_qp *mqp = to_mqp(ibqp);
	uint64_t mask_out = 0;

	out->dbrec = mqp->db;
	out->sq.buf = (char *)mqp->buf.buf + mqp->sq.offset;
	out->sq.wqe_cnt = mqp->sq.wqe_cnt;
	out->sq.stride = 1u << mqp->sq.wqe_shift;
	out->rq.buf = (char *)mqp->buf.buf + mqp->rq.offset;
	out->rq.wqe_cnt = mqp->rq.wqe_cnt;
	out->rq.stride = 1u << mqp->rq.wqe_shift;
	out->bf.reg = mqp->bf->reg;
	if (out->comp_mask & MLX5DV_QP_MASK_UAR_MMAP_OFFSET) {
		out->uar_mmap_offset = mqp->bf->uar_mmap_offset;
		mask_out |= MLX5DV_QP_MASK_UAR_MMAP_OFFSET;
	}
	out->bf.size = mqp->bf->uuarn > 0 ? mqp->bf->buf_size : 0;
	out->comp_mask = mask_out;
	return 0;
}

static int get_cq(struct ibv_cq *ibcq, struct mlx5dv_cq *out)
{
	struct mlx5_cq *mcq = to_mcq(ibcq);

	out->comp_mask = 0;
	out->cqn = mcq->cqn;
	out->cqe_cnt = (uint32_t)mcq->verbs_cq.cq.cqe + 1;
	out->cqe_size = (uint32_t)mcq->cqe_sz;
	out->buf = mcq->active_buf->buf;
	out->dbrec = mcq->dbrec;
	out->cq_uar = to_mctx(ibcq->context)->cq_uar_reg;
	mcq->flags |= MLX5_CQ_FLAGS_DV_OWNED;
	return 0;
}

static int get_srq(struct ibv_srq *ibsrq, struct mlx5dv_srq *out)
{
	struct mlx5_srq *msrq = to_msrq(ibsrq);

	out->comp_mask = 0;
	out->buf = msrq->buf.buf;
	out->dbrec = msrq->db;
	out->stride = 1u << msrq->wqe_shift;
	out->head = (uint32_t)msrq->head;
	out->tail = (uint32_t)msrq->tail;
	return 0;
}

SOFT_EXPORT int mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type)
{
	int ret = 0;

	if (obj_type & ~(uint64_t)(MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_SRQ | MLX5DV_OBJ_AH |
				   MLX5DV_OBJ_PD))
		return EOPNOTSUPP;
	if (obj_type & MLX5DV_OBJ_AH) {
		/* mlx5.c: mlx5dv_get_av */
		obj->ah.out->comp_mask = 0;
		obj->ah.out->av = &to_mah(obj->ah.in)->av;
	}
	if (obj_type & MLX5DV_OBJ_PD) {
		/* mlx5.c: mlx5dv_get_pd */
		obj->pd.out->comp_mask = 0;
		obj->pd.out->pdn = to_mpd(obj->pd.in)->pdn;
	}
	if (obj_type & MLX5DV_OBJ_QP)
		ret = get_qp(obj->qp.in, obj->qp.out);
	if (!ret && (obj_type & MLX5DV_OBJ_CQ))
		ret = get_cq(obj->cq.in, obj->cq.out);
	if (!ret && (obj_type & MLX5DV_OBJ_SRQ))
		ret = get_srq(obj->srq.in, obj->srq.out);
	return ret;
}

/* ---- the old posting entries: DC posts through ibv_qp_ex only ---- */

int soft_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	*bad = wr;
	return EOPNOTSUPP;
}

int soft_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)qp;
	*bad = wr;
	return EOPNOTSUPP;
}
