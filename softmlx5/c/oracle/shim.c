/* Fills libmlx5's private structures as its own creation paths leave them, over plain memory,
 * so that qp.c's DCI builders and cq.c's poller run unmodified: a DCI as mlx5_create_qp
 * (verbs.c: create_qp, mlx5_calc_sq_size, mlx5_qp_fill_wr_pfns) leaves it, a CQ as
 * mlx5_create_cq leaves it (64-byte CQEs, no compression), each in a context of its own as
 * mlx5_init_context leaves one (prefer_bf on, shut_up_bf off, CQE version 1). Built from the
 * same rdma-core tree as the qp.c/cq.c it drives (build.rs); re-check at each rdma-core upgrade.
 * Also: the barrier and store recorders of record/util/ (in the recorded build), and stubs for what qp.c/cq.c link to
 * but the post and poll paths never call (they abort). */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"
#include "wqe.h"
#include "oracle.h"

#ifdef ORACLE_RECORDED
/* The events of this thread, in order. */
static __thread struct oracle_event *events;
static __thread size_t events_len, events_cap;

static void push_event(struct oracle_event event)
{
	if (events_len == events_cap) {
		events_cap = events_cap ? 2 * events_cap : 256;
		events = realloc(events, events_cap * sizeof(*events));
		if (!events)
			abort();
	}
	events[events_len++] = event;
}

void oracle_barrier(enum oracle_barrier_kind kind)
{
	struct oracle_event event = { .kind = kind };

	push_event(event);
}

void oracle_store(void *addr, const void *bytes, size_t len)
{
	struct oracle_event event = { .kind = 6, .len = len, .addr = (uintptr_t)addr };

	if (len > sizeof(event.bytes))
		abort();
	memcpy(event.bytes, bytes, len);
	memcpy(addr, bytes, len);
	push_event(event);
}

size_t oracle_events_len(void)
{
	return events_len;
}

const struct oracle_event *oracle_events(void)
{
	return events;
}

void oracle_events_clear(void)
{
	events_len = 0;
}
#endif

/* A context as mlx5_init_context leaves it, for what the post and poll paths read. */
static struct mlx5_context *new_context(void)
{
	struct mlx5_context *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		abort();
	ctx->prefer_bf = 1;   /* mlx5.c: get_always_bf(), MLX5_POST_SEND_PREFER_BF unset */
	ctx->shut_up_bf = 0;  /* mlx5.c: get_shut_up_bf(), MLX5_SHUT_UP_BF unset */
	ctx->cqe_version = 1; /* MLX5_CQE_VERSION_V1, as current kernels grant */
	ctx->max_sq_desc_sz = 512 * 16; /* no limit the shapes tested reach */
	ctx->dbg_fp = NULL; /* mlx5.c: mlx5_open_debug_file without MLX5_DEBUG(_FILE) */
	return ctx;
}

static void *aligned(size_t size)
{
	void *memory = NULL;

	if (posix_memalign(&memory, 4096, size ? size : 64))
		abort();
	memset(memory, 0, size ? size : 64);
	return memory;
}

struct oracle_dci {
	struct mlx5_context *ctx;
	struct ibv_pd pd;
	struct mlx5_qp *qp;
	struct mlx5_cq *send_cq;
	struct mlx5_bf bf;
};

/* verbs.c: _sq_overhead for a DCI (the datagram segment after the largest operation). */
static size_t dci_overhead(uint64_t ops)
{
	size_t size = sizeof(struct mlx5_wqe_ctrl_seg);

	if (ops & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		   IBV_QP_EX_WITH_RDMA_READ))
		size = max_t(size_t, size, sizeof(struct mlx5_wqe_ctrl_seg) +
					       sizeof(struct mlx5_wqe_raddr_seg));
	if (ops & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD))
		size = max_t(size_t, size, sizeof(struct mlx5_wqe_ctrl_seg) +
					       sizeof(struct mlx5_wqe_raddr_seg) +
					       sizeof(struct mlx5_wqe_atomic_seg));
	return size + sizeof(struct mlx5_wqe_datagram_seg);
}

struct oracle_dci *oracle_dci_new(const struct oracle_dci_shape *shape)
{
	struct oracle_dci *dci = calloc(1, sizeof(*dci));
	struct mlx5_qp *qp;
	size_t overhead, size, inline_size, wqe_size, sq_size;
	struct ibv_qp_init_attr_ex attr = {};
	struct mlx5dv_qp_init_attr mlx5_attr = {};

	if (!dci || !shape->wqe_count || (shape->wqe_count & (shape->wqe_count - 1)))
		abort();
	dci->ctx = new_context();
	dci->qp = qp = calloc(1, sizeof(*qp));
	dci->send_cq = calloc(1, sizeof(*dci->send_cq));
	if (!qp || !dci->send_cq)
		abort();

	/* verbs.c: mlx5_calc_send_wqe, mlx5_calc_sq_size */
	overhead = dci_overhead(shape->send_ops_flags);
	size = overhead + shape->max_send_sge * sizeof(struct mlx5_wqe_data_seg);
	inline_size = shape->max_inline_data ?
		overhead + align(sizeof(struct mlx5_wqe_inl_data_seg) + shape->max_inline_data, 16) : 0;
	wqe_size = align(max_t(size_t, size, inline_size), MLX5_SEND_WQE_BB);
	sq_size = (size_t)shape->wqe_count * MLX5_SEND_WQE_BB;
	if (wqe_size > sq_size)
		abort();
	qp->max_inline_data = wqe_size - overhead - sizeof(struct mlx5_wqe_inl_data_seg);
	qp->sq.wqe_cnt = shape->wqe_count;
	qp->sq.wqe_shift = STATIC_ILOG_32(MLX5_SEND_WQE_BB) - 1;
	qp->sq.max_gs = shape->max_send_sge;
	qp->sq.qp_state_max_gs = shape->max_send_sge; /* RTS: mlx5_modify_qp */
	qp->sq.max_post = sq_size / wqe_size;
	qp->sq.wrid = calloc(qp->sq.wqe_cnt, sizeof(*qp->sq.wrid));
	qp->sq.wqe_head = calloc(qp->sq.wqe_cnt, sizeof(*qp->sq.wqe_head));
	qp->sq.wr_data = calloc(qp->sq.wqe_cnt, sizeof(*qp->sq.wr_data));
	if (!qp->sq.wrid || !qp->sq.wqe_head || !qp->sq.wr_data)
		abort();

	/* verbs.c: create_qp, the SQ alone in its buffer (no RQ: a DCI has none) */
	qp->buf.buf = aligned(sq_size);
	qp->buf_size = sq_size;
	qp->sq.offset = 0;
	qp->sq_start = qp->buf.buf;
	qp->sq.qend = qp->buf.buf + sq_size;
	qp->db = aligned(8);
	qp->sq_signal_bits = shape->sq_sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
	qp->atomics_enabled = 1;
	qp->dc_type = MLX5DV_DCTYPE_DCI;
	qp->rsc.type = MLX5_RSC_TYPE_QP;
	qp->rsc.rsn = 1; /* the user index (uidx) CQE version 1 carries */

	/* The BlueFlame register: two halves of buf_size; without BlueFlame (uuarn 0) one
	 * doorbell word, as mlx5dv_get_qp reports a size of 0. */
	dci->bf.reg = aligned(2 * shape->blueflame_size);
	dci->bf.buf_size = shape->blueflame_size;
	dci->bf.uuarn = shape->blueflame_size ? 1 : 0;
	dci->bf.need_lock = 0; /* owned outright: a dedicated BlueFlame register */
	qp->bf = &dci->bf;

	dci->send_cq->verbs_cq.cq.context = &dci->ctx->ibv_ctx.context;
	dci->send_cq->cqe_sz = 64;

	qp->ibv_qp = &qp->verbs_qp.qp;
	qp->verbs_qp.qp.context = &dci->ctx->ibv_ctx.context;
	dci->pd.context = &dci->ctx->ibv_ctx.context; /* cq.c: mlx5_copy_to_send_wqe reads it */
	qp->verbs_qp.qp.pd = &dci->pd;
	qp->verbs_qp.qp.qp_num = shape->qp_number;
	qp->verbs_qp.qp.qp_type = IBV_QPT_DRIVER;
	qp->verbs_qp.qp.state = IBV_QPS_RTS;
	qp->verbs_qp.qp.send_cq = &dci->send_cq->verbs_cq.cq;
	qp->verbs_qp.qp.recv_cq = &dci->send_cq->verbs_cq.cq;

	attr.qp_type = IBV_QPT_DRIVER;
	attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	attr.send_ops_flags = shape->send_ops_flags;
	mlx5_attr.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
	mlx5_attr.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
	if (mlx5_qp_fill_wr_pfns(qp, &attr, &mlx5_attr))
		abort();
	return dci;
}

void oracle_dci_free(struct oracle_dci *dci)
{
	free(dci->qp->sq.wrid);
	free(dci->qp->sq.wqe_head);
	free(dci->qp->sq.wr_data);
	free(dci->qp->buf.buf);
	free(dci->qp->db);
	free(dci->bf.reg);
	free(dci->qp);
	free(dci->send_cq);
	free(dci->ctx);
	free(dci);
}

struct ibv_qp_ex *oracle_dci_qp_ex(struct oracle_dci *dci)
{
	return &dci->qp->verbs_qp.qp_ex;
}

struct mlx5dv_qp_ex *oracle_dci_mlx5(struct oracle_dci *dci)
{
	return &dci->qp->dv_qp;
}

void oracle_dci_view(const struct oracle_dci *dci, struct oracle_sq_view *view)
{
	const struct mlx5_qp *qp = dci->qp;

	view->buffer = qp->sq_start;
	view->wqe_count = qp->sq.wqe_cnt;
	view->stride = 1u << qp->sq.wqe_shift;
	view->doorbell_record = (uint32_t *)qp->db;
	view->blueflame = dci->bf.reg;
	view->blueflame_size = dci->bf.uuarn ? dci->bf.buf_size : 0;
	view->blueflame_offset = dci->bf.offset;
	view->posting_index = qp->sq.cur_post;
	view->head = qp->sq.head;
	view->tail = qp->sq.tail;
	view->max_post = qp->sq.max_post;
	view->max_inline_data = qp->max_inline_data;
	view->user_index = qp->rsc.rsn;
	view->wrid = qp->sq.wrid;
	view->wqe_head = qp->sq.wqe_head;
}

/* As cq.c's mlx5_poll_one leaves the send queue after the completion of its last request
 * (wq->tail = wqe_head[idx] + 1): every request retired. */
void oracle_dci_retire_all(struct oracle_dci *dci)
{
	dci->qp->sq.tail = dci->qp->sq.head;
}

struct ibv_ah *oracle_ah_new(const uint8_t av[48])
{
	struct mlx5_ah *ah = calloc(1, sizeof(*ah));

	if (!ah)
		abort();
	_Static_assert(sizeof(ah->av) == 48, "struct mlx5_wqe_av is 48 bytes");
	memcpy(&ah->av, av, sizeof(ah->av));
	return &ah->ibv_ah;
}

void oracle_ah_free(struct ibv_ah *ah)
{
	free(to_mah(ah));
}

void oracle_ah_av(const struct ibv_ah *ah, uint8_t av[48])
{
	memcpy(av, &to_mah((struct ibv_ah *)ah)->av, 48);
}

struct oracle_cq {
	struct mlx5_context *ctx;
	struct mlx5_cq cq;
	struct mlx5_resource *uidx_table[MLX5_UIDX_TABLE_MASK + 1];
};

struct oracle_cq *oracle_cq_new(uint32_t cqe_count, uint32_t cq_number)
{
	struct oracle_cq *ocq = calloc(1, sizeof(*ocq));
	struct mlx5_cq *cq;
	uint32_t i;

	if (!ocq || !cqe_count || (cqe_count & (cqe_count - 1)))
		abort();
	ocq->ctx = new_context();
	ocq->ctx->uidx_table[0].table = ocq->uidx_table;
	ocq->ctx->uidx_table[0].refcnt = 1;
	cq = &ocq->cq;
	/* verbs.c: create_cq, mlx5_alloc_cq_buf (every CQE's op_own invalid, owned by hardware) */
	cq->buf_a.buf = aligned((size_t)cqe_count * 64);
	cq->buf_a.length = (size_t)cqe_count * 64;
	cq->active_buf = &cq->buf_a;
	cq->cqe_sz = 64;
	for (i = 0; i < cqe_count; i++) {
		struct mlx5_cqe64 *cqe = cq->buf_a.buf + (size_t)i * 64;

		cqe->op_own = MLX5_CQE_INVALID << 4;
	}
	cq->dbrec = aligned(8);
	cq->cqn = cq_number;
	cq->verbs_cq.cq.context = &ocq->ctx->ibv_ctx.context;
	cq->verbs_cq.cq.cqe = cqe_count - 1;
	cq->stall_enable = 0;
	return ocq;
}

void oracle_cq_free(struct oracle_cq *ocq)
{
	free(ocq->cq.buf_a.buf);
	free(ocq->cq.dbrec);
	free(ocq->ctx);
	free(ocq);
}

void oracle_cq_attach(struct oracle_cq *ocq, struct oracle_dci *dci)
{
	ocq->uidx_table[dci->qp->rsc.rsn] = &dci->qp->rsc;
}

void oracle_cq_view(const struct oracle_cq *ocq, struct oracle_cq_view *view)
{
	view->buffer = ocq->cq.active_buf->buf;
	view->cqe_count = ocq->cq.verbs_cq.cq.cqe + 1;
	view->cqe_size = ocq->cq.cqe_sz;
	view->doorbell_record = (uint32_t *)ocq->cq.dbrec;
	view->cq_number = ocq->cq.cqn;
	view->consumer_index = ocq->cq.cons_index;
}

int oracle_cq_poll(struct oracle_cq *ocq, int entries, struct ibv_wc *wc)
{
	return mlx5_poll_cq_v1(&ocq->cq.verbs_cq.cq, entries, wc);
}

/* What qp.c and cq.c link to outside the post and poll paths the oracle drives (libibverbs'
 * ibv_qp_to_qp_ex and mlx5dv_get_clock_info come from rdma-mummy-sys' C wrappers, linked with
 * it). */
#define STUB(ret, name, ...)                                              \
	ret name(__VA_ARGS__)                                             \
	{                                                                 \
		fprintf(stderr, "oracle: %s is not part of the oracle\n", #name); \
		abort();                                                  \
	}
STUB(int, mlx5_get_cmd_status_err, int err, void *out)
STUB(int, mlx5dv_devx_qp_query, struct ibv_qp *qp, const void *in, size_t inlen, void *out, size_t outlen)
STUB(struct mlx5_srq *, mlx5_find_srq, struct mlx5_context *ctx, uint32_t srqn)
STUB(void, mlx5_free_srq_wqe, struct mlx5_srq *srq, int ind)
STUB(int, mlx5_copy_to_recv_srq, struct mlx5_srq *srq, int idx, void *buf, int size)
STUB(struct mlx5_mkey *, mlx5_find_mkey, struct mlx5_context *ctx, uint32_t mkey)
STUB(int, mlx5_alloc_prefered_buf, struct mlx5_context *mctx, struct mlx5_buf *buf, size_t size, int page_size, enum mlx5_alloc_type alloc_type, const char *component)
STUB(int, mlx5_free_actual_buf, struct mlx5_context *ctx, struct mlx5_buf *buf)
STUB(void, mlx5_get_alloc_type, struct mlx5_context *context, struct ibv_pd *pd, const char *component, enum mlx5_alloc_type *alloc_type, enum mlx5_alloc_type default_alloc_type)
STUB(void, mlx5_complete_odp_fault, struct mlx5_srq *srq, int ind)
/* mlx5.c: MLX5_FREEZE_ON_ERROR_CQE unset */
int mlx5_freeze_on_error_cqe;
