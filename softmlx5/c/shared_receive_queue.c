/* Shared receive queues as verbs.c's mlx5_create_srq lays them out (libmlx5's own
 * mlx5_alloc_srq_buf; posting is srq.c's mlx5_post_srq_recv), and the device's side: taking
 * the next WQE by the linked list libmlx5 keeps, and the limit event. */
#include "softmlx5.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t next_srqn = 0x200;

struct ibv_srq *soft_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr)
{
	struct mlx5_context *ctx = to_mctx(context);
	struct soft_srq *srq;
	struct ibv_srq *ibsrq;

	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
	    (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE && attr->srq_type != IBV_SRQT_BASIC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* mlx5_create_srq */
	if (attr->attr.max_wr > ctx->max_srq_recv_wr || !attr->attr.max_wr ||
	    attr->attr.max_sge > (uint32_t)ctx->max_rq_desc_sz / sizeof(struct mlx5_wqe_data_seg)) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	ibsrq = &srq->msrq.vsrq.srq;
	mlx5_spinlock_init(&srq->msrq.lock, 1);
	srq->msrq.max_gs = (int)attr->attr.max_sge;
	srq->msrq.counter = 0;
	if (mlx5_alloc_srq_buf(context, &srq->msrq, attr->attr.max_wr, attr->pd)) {
		free(srq);
		return NULL;
	}
	srq->msrq.db = soft_zalloc_aligned(64);
	attr->attr.max_sge = (uint32_t)srq->msrq.max_gs;
	attr->attr.max_wr = (uint32_t)srq->msrq.tail;
	ibsrq->context = context;
	ibsrq->srq_context = attr->srq_context;
	ibsrq->pd = attr->pd;
	pthread_mutex_init(&ibsrq->mutex, NULL);
	pthread_cond_init(&ibsrq->cond, NULL);
	srq->msrq.vsrq.srq_type = IBV_SRQT_BASIC;
	srq->msrq.rsc.type = MLX5_RSC_TYPE_SRQ;
	srq->next_index = srq->msrq.head;
	/* ibv_create_srq(3): the limit given at creation is ignored; ibv_modify_srq arms it. */
	srq->limit = 0;
	pthread_mutex_lock(&soft_lock);
	srq->msrq.srqn = next_srqn++;
	srq->msrq.rsc.rsn = srq->msrq.srqn;
	srq->next = soft_srqs;
	soft_srqs = srq;
	pthread_mutex_unlock(&soft_lock);
	return ibsrq;
}

SOFT_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ex = {
		.srq_context = attr->srq_context,
		.attr = attr->attr,
		.comp_mask = IBV_SRQ_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_srq *srq = soft_create_srq_ex(pd->context, &ex);

	if (srq)
		attr->attr = ex.attr;
	return srq;
}

static struct soft_srq *soft_srq_of(struct ibv_srq *ibsrq)
{
	return container_of(ibsrq, struct soft_srq, msrq.vsrq.srq);
}

/* WQEs posted and not yet taken by the device. */
static uint32_t posted(struct soft_srq *srq)
{
	uint16_t counter = (uint16_t)be32toh(*srq->msrq.db);

	return (uint16_t)(counter - srq->consumed);
}

/* mlx5_ib_modify_srq: resizing is refused; a limit at or above the queue's size is EINVAL. */
SOFT_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct soft_srq *srq = soft_srq_of(ibsrq);

	if (mask & IBV_SRQ_MAX_WR)
		return EINVAL;
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit >= (uint32_t)srq->msrq.max)
			return EINVAL;
		pthread_mutex_lock(&soft_lock);
		srq->limit = attr->srq_limit;
		pthread_mutex_unlock(&soft_lock);
	}
	return 0;
}

SOFT_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct soft_srq *srq = soft_srq_of(ibsrq);

	pthread_mutex_lock(&soft_lock);
	attr->max_wr = (uint32_t)srq->msrq.max - 1;
	attr->max_sge = (uint32_t)srq->msrq.max_gs;
	attr->srq_limit = srq->limit;
	pthread_mutex_unlock(&soft_lock);
	return 0;
}

SOFT_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct soft_srq **link, *srq = soft_srq_of(ibsrq);
	struct soft_qp *qp;

	pthread_mutex_lock(&soft_lock);
	for (qp = soft_qps; qp; qp = qp->next)
		if (qp->mqp.verbs_qp.qp.srq == ibsrq) {
			pthread_mutex_unlock(&soft_lock);
			return EBUSY;
		}
	for (link = &soft_srqs; *link; link = &(*link)->next)
		if (*link == srq) {
			*link = srq->next;
			break;
		}
	pthread_mutex_unlock(&soft_lock);
	free(srq->msrq.wrid);
	free(srq->msrq.free_wqe_bitmap);
	free(srq->msrq.buf.buf);
	free(srq->msrq.db);
	free(srq);
	return 0;
}

/* The device takes the next posted WQE: its index, or -1 when none is posted (the requester
 * then gets RNR). The limit event fires when the posted count falls below an armed limit, and
 * disarms it (PRM: SRQ limit; mlx5_ib raises IB_EVENT_SRQ_LIMIT_REACHED). Called with
 * soft_lock held. */
int soft_srq_take(struct ibv_srq *ibsrq)
{
	struct soft_srq *srq = soft_srq_of(ibsrq);
	struct mlx5_wqe_srq_next_seg *next;
	int index;

	if (!posted(srq))
		return -1;
	index = srq->next_index;
	next = (struct mlx5_wqe_srq_next_seg *)((char *)srq->msrq.buf.buf +
						 ((size_t)index << srq->msrq.wqe_shift));
	srq->next_index = be16toh(next->next_wqe_index);
	srq->consumed++;
	if (srq->limit && posted(srq) < srq->limit) {
		struct ibv_async_event event = {
			.element.srq = ibsrq,
			.event_type = IBV_EVENT_SRQ_LIMIT_REACHED,
		};

		srq->limit = 0;
		soft_async_event(ibsrq->context, &event);
	}
	return index;
}

/* The scatter list of the SRQ's WQE `index`. */
struct mlx5_wqe_data_seg *soft_srq_scatter(struct ibv_srq *ibsrq, int index, int *count)
{
	struct soft_srq *srq = soft_srq_of(ibsrq);
	struct mlx5_wqe_srq_next_seg *next =
		(struct mlx5_wqe_srq_next_seg *)((char *)srq->msrq.buf.buf +
						 ((size_t)index << srq->msrq.wqe_shift));

	*count = srq->msrq.max_gs;
	return (struct mlx5_wqe_data_seg *)(next + 1);
}
