/* Completion channels, CQs as verbs.c's create_cq lays them out (libmlx5's own
 * mlx5_alloc_cq_buf and mlx5_cq_fill_pfns), events, and the CQE writer the device uses. */
#include "softmlx5.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t next_cqn = 0x400;

SOFT_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct soft_channel *channel = calloc(1, sizeof(*channel));
	int fds[2];

	if (!channel) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC)) {
		free(channel);
		return NULL;
	}
	channel->channel.context = context;
	channel->channel.fd = fds[0];
	channel->channel.refcnt = 0;
	channel->write_fd = fds[1];
	return &channel->channel;
}

SOFT_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ibchannel)
{
	struct soft_channel *channel = container_of(ibchannel, struct soft_channel, channel);

	if (ibchannel->refcnt)
		return EBUSY;
	close(ibchannel->fd);
	close(channel->write_fd);
	free(channel);
	return 0;
}

static struct soft_cq *create_cq(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	struct mlx5_context *mctx = to_mctx(context);
	struct soft_cq *cq;
	struct ibv_cq *ibcq;
	uint32_t ncqe;

	if (attr->cqe < 1 || attr->cqe > (1u << 22) - 1 ||
	    attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_vector >= (uint32_t)context->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	/* verbs.c: create_cq */
	ncqe = 1;
	while (ncqe < attr->cqe + 1)
		ncqe <<= 1;
	if (mlx5_spinlock_init(&cq->mcq.lock, 1) ||
	    mlx5_alloc_cq_buf(mctx, &cq->mcq, &cq->mcq.buf_a, (int)ncqe, 64)) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	cq->mcq.dbrec = soft_zalloc_aligned(64);
	cq->mcq.active_buf = &cq->mcq.buf_a;
	cq->mcq.resize_buf = NULL;
	cq->mcq.cqe_sz = 64;
	cq->mcq.cons_index = 0;
	cq->mcq.arm_sn = 0;
	cq->mcq.stall_enable = 0;
	cq->mcq.flags = MLX5_CQ_FLAGS_EXTENDED;
	if (mlx5_cq_fill_pfns(&cq->mcq, attr, mctx)) {
		free(cq->mcq.buf_a.buf);
		free(cq);
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* libibverbs: verbs_init_cq */
	ibcq = &cq->mcq.verbs_cq.cq;
	ibcq->context = context;
	ibcq->channel = attr->channel;
	ibcq->cq_context = attr->cq_context;
	ibcq->cqe = (int)ncqe - 1;
	pthread_mutex_init(&ibcq->mutex, NULL);
	pthread_cond_init(&ibcq->cond, NULL);
	if (attr->channel)
		attr->channel->refcnt++;
	pthread_mutex_lock(&soft_lock);
	cq->mcq.cqn = next_cqn++;
	cq->next = soft_cqs;
	soft_cqs = cq;
	pthread_mutex_unlock(&soft_lock);
	return cq;
}

struct ibv_cq_ex *soft_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	struct soft_cq *cq;

	/* mlx5_create_cq_ex: the work completion fields libmlx5 can read. */
	if (attr->wc_flags & ~(IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			       IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG |
			       IBV_WC_EX_WITH_TM_INFO |
			       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = create_cq(context, attr);
	return cq ? &cq->mcq.verbs_cq.cq_ex : NULL;
}

SOFT_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
					 struct ibv_comp_channel *channel, int comp_vector)
{
	struct ibv_cq_init_attr_ex attr = {
		.cqe = (uint32_t)cqe,
		.cq_context = cq_context,
		.channel = channel,
		.comp_vector = (uint32_t)comp_vector,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	struct soft_cq *cq;

	if (cqe < 1 || comp_vector < 0) {
		errno = EINVAL;
		return NULL;
	}
	cq = create_cq(context, &attr);
	return cq ? &cq->mcq.verbs_cq.cq : NULL;
}

SOFT_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq, (void)cqe;
	return EOPNOTSUPP;
}

SOFT_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct soft_cq **link, *cq = container_of(ibcq, struct soft_cq, mcq.verbs_cq.cq);
	struct soft_qp *qp;

	pthread_mutex_lock(&soft_lock);
	for (qp = soft_qps; qp; qp = qp->next)
		if (qp->mqp.verbs_qp.qp.send_cq == ibcq || qp->mqp.verbs_qp.qp.recv_cq == ibcq) {
			pthread_mutex_unlock(&soft_lock);
			return EBUSY;
		}
	for (link = &soft_cqs; *link; link = &(*link)->next)
		if (*link == cq) {
			*link = cq->next;
			break;
		}
	pthread_mutex_unlock(&soft_lock);
	if (ibcq->channel)
		ibcq->channel->refcnt--;
	free(cq->mcq.buf_a.buf);
	free(cq->mcq.dbrec);
	free(cq);
	return 0;
}

/* ibv_req_notify_cq: libmlx5's mlx5_arm_cq writes the arm doorbell; the device learns of the
 * request here, as it would from the doorbell. */
int soft_req_notify_cq(struct ibv_cq *ibcq, int solicited)
{
	struct soft_cq *cq = container_of(ibcq, struct soft_cq, mcq.verbs_cq.cq);
	uint32_t consumer;
	int ret = mlx5_arm_cq(ibcq, solicited);

	if (ret)
		return ret;
	pthread_mutex_lock(&soft_lock);
	cq->armed = true;
	cq->armed_solicited = solicited != 0;
	/* A CQE already there when armed: the event fires at once (the CQ's arm compares the
	 * consumer index it was given). */
	consumer = be32toh(cq->mcq.dbrec[MLX5_CQ_SET_CI]) & 0xffffff;
	if (cq->producer != consumer && !solicited && ibcq->channel) {
		struct soft_channel *channel =
			container_of(ibcq->channel, struct soft_channel, channel);
		ssize_t written = write(channel->write_fd, &ibcq, sizeof(ibcq));

		(void)written;
		cq->armed = false;
	}
	pthread_mutex_unlock(&soft_lock);
	return 0;
}

SOFT_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
				 void **cq_context)
{
	struct ibv_cq *got;

	if (read(channel->fd, &got, sizeof(got)) != (ssize_t)sizeof(got))
		return -1;
	*cq = got;
	*cq_context = got->cq_context;
	mlx5_cq_event(got); /* libmlx5's: the next arm takes a new sequence number */
	return 0;
}

SOFT_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* The vendor syndrome (mlx5_err_cqe.vendor_err_synd; libmlx5's cq.c hands it out as ibv_wc's
 * vendor_err and ibv_wc_read_vendor_err) a ConnectX writes beside each syndrome (mlx5dv.h:
 * MLX5_CQE_SYNDROME_*) the device models. The PRM's table of them is not public, and neither
 * the kernel (mlx5_ib cq.c: mlx5_handle_error_cqe only prints it), libmlx5 nor UCX defines them,
 * save UCX's and libmlx5's ODP page fault (0x93). The values are those ConnectX-4 to -7 wrote
 * in the error CQEs public reports quote (UCX's uct_ib_mlx5_completion_with_err logs them as
 * "synd 0x.. vend 0x..", NCCL as "vendor err", perftest as "syndrom", libmlx5 and the kernel in
 * their dumps of the CQE):
 * - requester: local protection 0x51 (NCCL and perftest, status 4; one ConnectX-6 Dx/7 report
 *   shows 0x52 instead); flush 0xf9 (NCCL, status 5, send and receive; the kernel's own flushes,
 *   cq.c sw_comp after a fatal error, report the syndrome 0x05 itself, but no device writes
 *   those); remote invalid request 0x8a, remote access 0x88, remote operation 0x89 (libmlx5's
 *   dumps, UCX's DCI logs); transport retry exceeded 0x81 (UCX's DCI logs, NCCL).
 * - responder: local protection into an SRQ 0x32 (UCX's SRQ logs).
 * No public source shows the vendor syndrome of a local length error, a local QP operation
 * error or an RNR retry exceeded: those stay 0, a value no ConnectX is claimed to write. */
static uint8_t vendor_syndrome(uint8_t opcode, uint8_t syndrome)
{
	if (opcode == MLX5_CQE_RESP_ERR) {
		switch (syndrome) {
		case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
			return 0x32;
		case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
			return 0xf9;
		default:
			return 0;
		}
	}
	switch (syndrome) {
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
		return 0x51;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
		return 0xf9;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
		return 0x8a;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
		return 0x88;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
		return 0x89;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
		return 0x81;
	default:
		return 0;
	}
}

/* Writes a CQE as the hardware does: every field, then op_own (opcode and owner bit) after a
 * barrier; the owner bit flips at each pass over the ring (cq.c: get_sw_cqe). Called with
 * soft_lock held. */
bool soft_cq_write(struct soft_cq *cq, const struct soft_cqe *in)
{
	uint32_t count = (uint32_t)cq->mcq.verbs_cq.cq.cqe + 1;
	uint32_t consumer = be32toh(cq->mcq.dbrec[MLX5_CQ_SET_CI]) & 0xffffff;
	struct mlx5_cqe64 *cqe;
	uint8_t owner;

	if (((cq->producer - consumer) & 0xffffff) >= count) {
		if (!cq->overrun) {
			struct ibv_async_event event = {
				.element.cq = &cq->mcq.verbs_cq.cq,
				.event_type = IBV_EVENT_CQ_ERR,
			};

			cq->overrun = true;
			soft_async_event(cq->mcq.verbs_cq.cq.context, &event);
		}
		return false;
	}
	cqe = (struct mlx5_cqe64 *)((char *)cq->mcq.active_buf->buf +
				    (size_t)(cq->producer & (count - 1)) * 64);
	owner = (uint8_t)((cq->producer / count) & 1);
	memset(cqe, 0, 63);
	if (in->opcode == MLX5_CQE_REQ_ERR || in->opcode == MLX5_CQE_RESP_ERR) {
		struct mlx5_err_cqe *err = (struct mlx5_err_cqe *)cqe;

		err->syndrome = in->syndrome;
		err->vendor_err_synd = vendor_syndrome(in->opcode, in->syndrome);
		err->s_wqe_opcode_qpn = htobe32((uint32_t)in->wqe_opcode << 24 | in->qpn);
		err->wqe_counter = htobe16(in->wqe_counter);
		err->srqn = htobe32(in->user_index);
	} else {
		cqe->srqn_uidx = htobe32(in->user_index & 0xffffff);
		cqe->byte_cnt = htobe32(in->byte_count);
		cqe->imm_inval_pkey = in->imm;
		cqe->sop_drop_qpn = htobe32((uint32_t)in->wqe_opcode << 24 | in->qpn);
		cqe->wqe_counter = htobe16(in->wqe_counter);
		cqe->flags_rqpn = htobe32((in->grh ? 2u << 28 : 0) | (in->remote_qpn & 0xffffff));
		cqe->timestamp = htobe64(soft_now_ns());
	}
	atomic_thread_fence(memory_order_release);
	((volatile uint8_t *)cqe)[63] = (uint8_t)(in->opcode << 4 | owner);
	cq->producer++;
	soft_counters.cqes++;
	/* An armed CQ raises one event (a solicited arm: a solicited or an error completion). */
	if (cq->armed && cq->mcq.verbs_cq.cq.channel &&
	    (!cq->armed_solicited || in->solicited || in->opcode == MLX5_CQE_REQ_ERR ||
	     in->opcode == MLX5_CQE_RESP_ERR)) {
		struct ibv_cq *ibcq = &cq->mcq.verbs_cq.cq;
		struct soft_channel *channel = container_of(ibcq->channel, struct soft_channel, channel);
		ssize_t written = write(channel->write_fd, &ibcq, sizeof(ibcq));

		(void)written;
		cq->armed = false;
	}
	return true;
}
