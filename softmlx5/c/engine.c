/* The device thread. As a NIC does, it learns of new work when a send queue's doorbell record
 * moves, reads each WQE from the queue's bytes (control, DC datagram, remote address, atomic,
 * inline and pointer data segments, mlx5dv.h), executes it against the target's memory through
 * the fabric, and writes CQEs. A DCI has one request in flight at a time, in queue order; a
 * request is retried after the transport timeout (4.096 µs · 2^timeout, retry_cnt + 1 tries in
 * all: IB spec C9-140 and the PRM's qpc.retry_count) or the RNR delay (rnr_retry 7: without
 * end, IB spec C9-143). */
#include "softmlx5.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

int soft_srq_take(struct ibv_srq *ibsrq);
struct mlx5_wqe_data_seg *soft_srq_scatter(struct ibv_srq *ibsrq, int index, int *count);

pthread_mutex_t soft_lock = PTHREAD_MUTEX_INITIALIZER;
struct soft_qp *soft_qps;
struct soft_cq *soft_cqs;
struct soft_srq *soft_srqs;
struct soft_mr *soft_mrs;

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static int kick_fd = -1;

uint64_t soft_now_ns(void)
{
	struct timespec now;

	if (soft_faults.step_mode)
		return soft_faults.virtual_ns;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

void soft_engine_kick(void)
{
	uint64_t one = 1;

	if (kick_fd >= 0) {
		ssize_t written = write(kick_fd, &one, sizeof(one));

		(void)written;
	}
}

static uint32_t mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 256u << (mtu - 1) : 256u;
}

/* The IB spec's RNR NAK timer field (table 45), in nanoseconds. */
static uint64_t rnr_delay_ns(uint8_t timer)
{
	static const uint32_t micros[32] = {
		655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
		163840, 245760, 327680, 491520,
	};

	return (uint64_t)micros[timer & 31] * 1000;
}

static void trace_event(uint32_t kind, uint32_t qp_number, uint32_t peer, uint32_t seq,
			uint16_t wqe_index, uint8_t opcode, uint8_t status)
{
	struct softmlx5_event event = {
		.kind = kind,
		.qp_number = qp_number,
		.peer = peer,
		.seq = seq,
		.wqe_index = wqe_index,
		.opcode = opcode,
		.status = status,
	};

	soft_trace(&event);
}

/* ---- a WQE, read from the queue ---- */

struct wqe {
	uint8_t bytes[64 * 16];	/* up to 16 basic blocks, copied across the queue's end */
	uint32_t size;
	uint8_t opcode;
	uint8_t fm_ce_se;
	uint8_t stream;
	uint16_t index;
	uint16_t blocks;
	uint32_t imm;
	struct mlx5_wqe_av av;
	uint64_t remote_addr;
	uint32_t rkey;
	uint64_t swap_add, compare;
	/* data: inline bytes or gather/scatter entries */
	uint32_t data_offset;	/* where the data segments start in bytes[] */
};

static uint8_t wqe_opcode(const struct wqe *wqe)
{
	return wqe->opcode;
}

static void read_wqe(struct soft_qp *qp, uint16_t index, struct wqe *wqe)
{
	struct mlx5_qp *mqp = &qp->mqp;
	uint32_t count = mqp->sq.wqe_cnt, first = index & (count - 1), ds, i;
	const uint8_t *base = mqp->sq_start;
	struct mlx5_wqe_ctrl_seg ctrl;
	uint32_t offset;

	memcpy(&ctrl, base + (size_t)first * 64, sizeof(ctrl));
	ds = be32toh(ctrl.qpn_ds) & 0x3f;
	wqe->blocks = (uint16_t)((ds * 16 + 63) / 64);
	if (!wqe->blocks)
		wqe->blocks = 1;
	if (wqe->blocks > 16)
		wqe->blocks = 16;
	for (i = 0; i < wqe->blocks; i++)
		memcpy(wqe->bytes + i * 64, base + (size_t)((first + i) & (count - 1)) * 64, 64);
	wqe->size = ds * 16;
	wqe->remote_addr = 0;
	wqe->rkey = 0;
	wqe->swap_add = 0;
	wqe->compare = 0;
	wqe->opcode = (uint8_t)(be32toh(ctrl.opmod_idx_opcode) & 0xff);
	wqe->index = index;
	wqe->fm_ce_se = ctrl.fm_ce_se;
	wqe->stream = (uint8_t)be16toh(ctrl.dci_stream_channel_id);
	wqe->imm = ctrl.imm;
	offset = sizeof(ctrl);
	memcpy(&wqe->av, wqe->bytes + offset, sizeof(wqe->av));
	offset += sizeof(struct mlx5_wqe_datagram_seg);
	switch (wqe->opcode) {
	case MLX5_OPCODE_RDMA_WRITE:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
	case MLX5_OPCODE_RDMA_READ:
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA: {
		struct mlx5_wqe_raddr_seg raddr;

		memcpy(&raddr, wqe->bytes + offset, sizeof(raddr));
		wqe->remote_addr = be64toh(raddr.raddr);
		wqe->rkey = be32toh(raddr.rkey);
		offset += sizeof(raddr);
		if (wqe->opcode == MLX5_OPCODE_ATOMIC_CS || wqe->opcode == MLX5_OPCODE_ATOMIC_FA) {
			struct mlx5_wqe_atomic_seg atomic;

			memcpy(&atomic, wqe->bytes + offset, sizeof(atomic));
			wqe->swap_add = be64toh(atomic.swap_add);
			wqe->compare = be64toh(atomic.compare);
			offset += sizeof(atomic);
		}
		break;
	}
	default:
		break;
	}
	wqe->data_offset = offset;
}

/* Gathers the WQE's data (inline segments or pointer segments checked against their keys)
 * into `out`; its length, or -1 with the syndrome in *syndrome. */
static int64_t gather(struct soft_qp *qp, const struct wqe *wqe, uint8_t *out, size_t cap,
		      uint8_t *syndrome)
{
	uint32_t offset = wqe->data_offset;
	size_t len = 0;

	while (offset + 4 <= wqe->size) {
		uint32_t byte_count;

		memcpy(&byte_count, wqe->bytes + offset, 4);
		byte_count = be32toh(byte_count);
		if (byte_count & MLX5_INLINE_SEG) {
			uint32_t n = byte_count & ~MLX5_INLINE_SEG;

			if (offset + 4 + n > wqe->size || len + n > cap) {
				*syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
				return -1;
			}
			if (out)
				memcpy(out + len, wqe->bytes + offset + 4, n);
			len += n;
			offset += align(4 + n, 16);
		} else {
			struct mlx5_wqe_data_seg seg;
			uint64_t addr;
			uint32_t lkey;

			if (offset + sizeof(seg) > wqe->size)
				break;
			memcpy(&seg, wqe->bytes + offset, sizeof(seg));
			offset += sizeof(seg);
			lkey = be32toh(seg.lkey);
			addr = be64toh(seg.addr);
			if (lkey == MLX5_INVALID_LKEY)
				break;
			if (!byte_count)
				byte_count = 0x80000000u; /* PRM: a byte count of 0 means 2 GiB */
			if (soft_mr_check(soft_mr_find(lkey, false), qp->mqp.verbs_qp.qp.pd, addr, byte_count, 0)) {
				*syndrome = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
				return -1;
			}
			if (len + byte_count > cap) {
				*syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
				return -1;
			}
			if (out)
				memcpy(out + len, (void *)(uintptr_t)addr, byte_count);
			len += byte_count;
		}
	}
	return (int64_t)len;
}

/* Checks the WQE's scatter entries (a READ's or an atomic's destination) for local write
 * access; their total length, or -1. */
static int64_t scatter_length(struct soft_qp *qp, const struct wqe *wqe)
{
	uint32_t offset = wqe->data_offset;
	int64_t total = 0;

	while (offset + sizeof(struct mlx5_wqe_data_seg) <= wqe->size) {
		struct mlx5_wqe_data_seg seg;
		uint32_t n;

		memcpy(&seg, wqe->bytes + offset, sizeof(seg));
		offset += sizeof(seg);
		if (be32toh(seg.lkey) == MLX5_INVALID_LKEY)
			break;
		n = be32toh(seg.byte_count);
		if (soft_mr_check(soft_mr_find(be32toh(seg.lkey), false), qp->mqp.verbs_qp.qp.pd, be64toh(seg.addr), n,
				  IBV_ACCESS_LOCAL_WRITE))
			return -1;
		total += n;
	}
	return total;
}

static void scatter(const struct wqe *wqe, const uint8_t *data, size_t len)
{
	uint32_t offset = wqe->data_offset;

	while (len && offset + sizeof(struct mlx5_wqe_data_seg) <= wqe->size) {
		struct mlx5_wqe_data_seg seg;
		size_t n;

		memcpy(&seg, wqe->bytes + offset, sizeof(seg));
		offset += sizeof(seg);
		n = be32toh(seg.byte_count);
		if (n > len)
			n = len;
		memcpy((void *)(uintptr_t)be64toh(seg.addr), data, n);
		data += n;
		len -= n;
	}
}

/* ---- requester ---- */

static uint32_t incarnations;

static uint32_t new_incarnation(void)
{
	return __atomic_add_fetch(&incarnations, 1, __ATOMIC_RELAXED) ^ ((uint32_t)getpid() << 12);
}

void soft_requester_reset(struct soft_qp *qp)
{
	struct soft_requester *r = &qp->requester;

	memset(r, 0, sizeof(*r));
	r->incarnation = new_incarnation();
	r->next_seq = 1;
	r->first_seq = 1;
}

/* Where a WQE goes: its DCT number, DC key and address (the address vector's first 16 bytes
 * and its GID). */
static void destination_of(const struct wqe *wqe, uint8_t out[32])
{
	memcpy(out, &wqe->av, 16);
	memcpy(out + 16, wqe->av.rgid, 16);
	/* the LID lives in the first 16 bytes; the stat rate and SL do not name a target */
	out[12] = 0;
}

static void complete_request(struct soft_qp *qp, const struct wqe *wqe, uint8_t cqe_opcode,
			     uint8_t syndrome, uint32_t byte_count)
{
	struct soft_cq *cq = container_of(qp->mqp.verbs_qp.qp.send_cq, struct soft_cq,
					  mcq.verbs_cq.cq);
	struct soft_cqe cqe = {
		.opcode = cqe_opcode,
		.syndrome = syndrome,
		.wqe_opcode = wqe_opcode(wqe),
		.wqe_counter = wqe->index,
		.qpn = qp->mqp.verbs_qp.qp.qp_num,
		.user_index = qp->mqp.rsc.rsn,
		.byte_count = byte_count,
	};

	soft_cq_write(cq, &cqe);
	trace_event(SOFTMLX5_EVENT_CQE, cqe.qpn, 0, 0, wqe->index, cqe_opcode, syndrome);
}

static struct soft_outstanding *oldest(struct soft_qp *qp)
{
	struct soft_requester *r = &qp->requester;

	return r->count ? &r->ring[r->oldest] : NULL;
}

static void pop_oldest(struct soft_qp *qp)
{
	struct soft_requester *r = &qp->requester;

	r->oldest = (r->oldest + 1) % SOFT_WINDOW;
	r->count--;
	r->tries = 0;
	r->rnr_tries = 0;
	r->rnr_wait = false;
}

/* A stream of `qp` erred: every request of it the window holds is flushed, whether it was sent
 * or not, answered or not. mlx5dv_dci_stream_id_reset(3): "Errors which are stream related will
 * cause only that stream_id's work request to be flushed as they are handled in order in the
 * send queue"; the stream takes requests again after mlx5dv_dci_stream_id_reset (mlx5.c: an
 * RTS2RTS_QP with qpc_ext.dci_stream_channel_id, PRM). Each still completes in queue order, with
 * a flush CQE whether signalled or not (as every flushed WQE: see run_requester's ERR flush),
 * when it leaves the window. Until then it holds its sequence number, so it goes (again) as a
 * placeholder its target answers without executing (soft_engine_request): the target's
 * sequence has no gap, and a request that had not left never executes. One that had left may
 * have executed, as on the wire; its answer no longer completes it. */
static void flush_stream(struct soft_qp *qp, uint8_t stream)
{
	struct soft_requester *r = &qp->requester;
	unsigned i;

	for (i = 0; i < r->count; i++) {
		struct soft_outstanding *slot = &r->ring[(r->oldest + i) % SOFT_WINDOW];

		if (slot->stream == stream)
			slot->flushed = true;
	}
}

/* A stream of `dci` is in error, after a failed request of it or by softmlx5_error_stream: what
 * the window holds of it is flushed (flush_stream), what is not taken yet is flushed as it is
 * taken (take_request); ERR once 2^log_num_errored streams are (mlx5dv_dci_stream_id_reset(3)),
 * which flushes everything. Called with soft_lock. */
void soft_stream_error(struct soft_qp *dci, uint16_t stream)
{
	dci->errored_streams |= 1ull << stream;
	flush_stream(dci, (uint8_t)stream);
	if ((uint32_t)__builtin_popcountll(dci->errored_streams) >= (1u << dci->log_num_errored))
		soft_qp_to_error(dci);
}

/* The oldest request failed with `syndrome`: its error CQE; then its stream errs (a DCI with
 * streams stays in RTS until 2^log_num_errored streams erred: mlx5dv_dci_stream_id_reset(3)) and
 * its requests behind it are flushed, or the DCI goes to ERR and the next pass flushes the
 * rest. */
static void fail_wqe(struct soft_qp *qp, const struct wqe *wqe, uint8_t syndrome)
{
	complete_request(qp, wqe, MLX5_CQE_REQ_ERR, syndrome, 0);
	if (qp->log_num_concurrent && wqe->stream < 64) {
		soft_stream_error(qp, wqe->stream);
		return;
	}
	soft_qp_to_error(qp);
}

/* The oldest request left the window flushed (flush_stream): its flush CQE. */
static void complete_flushed(struct soft_qp *qp)
{
	struct wqe wqe;

	read_wqe(qp, oldest(qp)->wqe_index, &wqe);
	pop_oldest(qp);
	complete_request(qp, &wqe, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0);
}

/* The request packet of `wqe`, or of a placeholder for it when it was flushed (no data). */
static struct soft_packet *request_packet(struct soft_qp *qp, const struct wqe *wqe, uint32_t seq,
					  bool flushed, size_t *len, uint8_t *syndrome)
{
	struct soft_packet *packet;
	int64_t n = 0;

	if (!flushed && (wqe->opcode == MLX5_OPCODE_SEND || wqe->opcode == MLX5_OPCODE_SEND_IMM ||
			 wqe->opcode == MLX5_OPCODE_RDMA_WRITE ||
			 wqe->opcode == MLX5_OPCODE_RDMA_WRITE_IMM)) {
		n = gather(qp, wqe, NULL, SIZE_MAX, syndrome);
		if (n < 0)
			return NULL;
	}
	packet = calloc(1, sizeof(*packet) + (size_t)n);
	if (!packet) {
		*syndrome = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
		return NULL;
	}
	if (n && gather(qp, wqe, packet->payload, (size_t)n, syndrome) != n) {
		free(packet);
		return NULL;
	}
	packet->type = SOFT_REQUEST;
	packet->source_pid = getpid();
	packet->dci_qpn = qp->mqp.verbs_qp.qp.qp_num;
	packet->incarnation = qp->requester.incarnation;
	packet->first_seq = qp->requester.first_seq;
	packet->seq = seq;
	packet->opcode = wqe->opcode;
	packet->stream = wqe->stream;
	packet->dctn = be32toh(wqe->av.dqp_dct) & 0xffffff;
	packet->dc_key = be64toh(wqe->av.key.dc_key);
	memcpy(packet->dgid, wqe->av.rgid, 16);
	packet->dlid = be16toh(wqe->av.rlid);
	packet->global = (be32toh(wqe->av.grh_gid_fl) >> 30) & 1;
	if (flushed) {
		packet->flushed = 1;
		*len = sizeof(*packet);
		return packet;
	}
	packet->requester_mtu = (uint8_t)qp->path_mtu;
	packet->solicited = (wqe->fm_ce_se & MLX5_WQE_CTRL_SOLICITED) != 0;
	packet->remote_addr = wqe->remote_addr;
	packet->rkey = wqe->rkey;
	/* the immediate travels only with the operations that carry one */
	packet->imm = wqe->opcode == MLX5_OPCODE_SEND_IMM || wqe->opcode == MLX5_OPCODE_RDMA_WRITE_IMM
			      ? wqe->imm
			      : 0;
	packet->compare_add = wqe->opcode == MLX5_OPCODE_ATOMIC_CS ? wqe->compare : wqe->swap_add;
	packet->swap = wqe->swap_add;
	if (wqe->opcode == MLX5_OPCODE_RDMA_READ)
		packet->length = (uint32_t)scatter_length(qp, wqe);
	else if (wqe->opcode == MLX5_OPCODE_ATOMIC_CS || wqe->opcode == MLX5_OPCODE_ATOMIC_FA)
		packet->length = 8;
	else
		packet->length = (uint32_t)n;
	packet->payload_len = (uint32_t)n;
	*len = sizeof(*packet) + (size_t)n;
	return packet;
}

static uint64_t transport_timeout_ns(const struct soft_qp *qp)
{
	/* 0 is no timeout at all (IB spec); the rest 4.096 µs · 2^timeout. */
	if (!qp->timeout)
		return UINT64_MAX / 2;
	return 4096ull << qp->timeout;
}

/* Sends the window's requests from sequence number `first` on, in order. The caller holds
 * soft_lock; a response of this process's own target arrives within each send and may move
 * the window (or fail the DCI), so each is found again by its number. */
static void send_from(struct soft_qp *qp, uint32_t first)
{
	struct soft_requester *r = &qp->requester;
	uint32_t incarnation = r->incarnation, seq, end = r->next_seq;

	for (seq = first; seq != end; seq++) {
		struct soft_packet *packet;
		uint8_t syndrome = 0;
		struct wqe wqe;
		bool flushed;
		unsigned i;
		size_t len;

		if (r->incarnation != incarnation || qp->state != IBV_QPS_RTS || r->rnr_wait)
			return;
		for (i = 0; i < r->count && r->ring[(r->oldest + i) % SOFT_WINDOW].seq != seq; i++)
			;
		if (i == r->count)
			continue; /* answered already */
		read_wqe(qp, r->ring[(r->oldest + i) % SOFT_WINDOW].wqe_index, &wqe);
		flushed = r->ring[(r->oldest + i) % SOFT_WINDOW].flushed;
		packet = request_packet(qp, &wqe, seq, flushed, &len, &syndrome);
		if (!packet)
			return; /* out of memory: the timer sends it again */
		if (soft_device_of(qp->mqp.verbs_qp.qp.context)->port.down) {
			/* nothing leaves a port that is down: the retries run out */
			soft_counters.packets_lost++;
			free(packet);
			continue;
		}
		if (!flushed) {
			struct softmlx5_event event = {
				.kind = SOFTMLX5_EVENT_REQUEST,
				.qp_number = packet->dci_qpn,
				.peer = packet->dctn,
				.seq = seq,
				.wqe_index = wqe.index,
				.opcode = wqe.opcode,
				.dc_key = packet->dc_key,
				.remote_addr = packet->remote_addr,
				.rkey = packet->rkey,
				.length = packet->length,
				.imm = packet->imm,
				.stream = wqe.stream,
				.signaled = (wqe.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0,
			};

			soft_trace(&event);
			soft_counters.requests_sent++;
		}
		soft_fabric_send_request(packet, len);
		free(packet);
	}
}

/* Sends the whole window again, oldest first (go-back-N), and restarts the oldest's timer. */
static void transmit_window(struct soft_qp *qp)
{
	struct soft_requester *r = &qp->requester;

	if (!r->count)
		return;
	r->deadline_ns = soft_now_ns() + transport_timeout_ns(qp);
	send_from(qp, r->ring[r->oldest].seq);
}

/* What fails a request before it leaves: its syndrome, or 0. The checks of its local keys,
 * opcode and size (the send queue's WQE checks, PRM). */
static uint8_t local_check(struct soft_qp *qp, const struct wqe *wqe)
{
	uint32_t max_dc = soft_device_of(qp->mqp.verbs_qp.qp.context)->profile.max_wqe_sz_sq_dc;
	uint8_t syndrome = 0;

	switch (wqe->opcode) {
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
	case MLX5_OPCODE_RDMA_WRITE:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		if (gather(qp, wqe, NULL, SIZE_MAX, &syndrome) < 0)
			return syndrome;
		break;
	case MLX5_OPCODE_RDMA_READ:
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
		if (scatter_length(qp, wqe) < 0)
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		break;
	default:
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	}
	/* A DC request beyond the device's max_wqe_sz_sq_dc (PRM cmd_hca_cap): a local QP
	 * operation error. Neither the kernel nor libmlx5 checks it at creation. */
	if (wqe->size > max_dc)
		return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
	return 0;
}

/* Takes the WQE at the consumer index into the window. A WQE that completes without the wire
 * (a NOP, a flushed stream, a local error) waits until the window is empty, so that CQEs stay in
 * queue order. False when it must wait. */
static bool take_request(struct soft_qp *qp)
{
	struct soft_requester *r = &qp->requester;
	struct soft_outstanding *slot;
	uint8_t syndrome;
	struct wqe wqe;

	read_wqe(qp, r->consumer, &wqe);
	if (wqe.opcode == MLX5_OPCODE_NOP) {
		if (r->count)
			return false;
		if (wqe.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE)
			complete_request(qp, &wqe, MLX5_CQE_REQ, 0, 0);
		r->consumer = (uint16_t)(wqe.index + wqe.blocks);
		return true;
	}
	if (qp->log_num_concurrent && wqe.stream < 64 && (qp->errored_streams >> wqe.stream) & 1) {
		/* a stream in error flushes its requests until mlx5dv_dci_stream_id_reset */
		if (r->count)
			return false;
		complete_request(qp, &wqe, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0);
		r->consumer = (uint16_t)(wqe.index + wqe.blocks);
		return true;
	}
	syndrome = local_check(qp, &wqe);
	if (syndrome) {
		if (r->count)
			return false;
		r->consumer = (uint16_t)(wqe.index + wqe.blocks);
		fail_wqe(qp, &wqe, syndrome);
		return true;
	}
	if (r->count == SOFT_WINDOW)
		return false;
	/* A DCI is connected to one DCT at a time: a request for another waits until the window
	 * drained, then goes in a new connection (PRM, DC transport: the DCI reconnects). */
	{
		uint8_t destination[32];

		destination_of(&wqe, destination);
		if (memcmp(destination, r->destination, sizeof(destination))) {
			if (r->count)
				return false;
			memcpy(r->destination, destination, sizeof(destination));
			r->incarnation = new_incarnation();
			r->first_seq = r->next_seq;
		}
	}
	slot = &r->ring[(r->oldest + r->count) % SOFT_WINDOW];
	slot->wqe_index = wqe.index;
	slot->stream = wqe.stream;
	slot->flushed = false;
	slot->seq = r->next_seq++;
	r->count++;
	r->consumer = (uint16_t)(wqe.index + wqe.blocks);
	return true;
}

void soft_engine_response(struct soft_packet *packet)
{
	struct soft_qp *qp = soft_qp_find(packet->dci_qpn);
	struct soft_outstanding *first;
	struct wqe wqe;

	if (!qp || qp->mqp.dc_type != MLX5DV_DCTYPE_DCI || qp->state != IBV_QPS_RTS ||
	    qp->requester.incarnation != packet->incarnation ||
	    soft_device_of(qp->mqp.verbs_qp.qp.context)->port.down)
		return;
	first = oldest(qp);
	if (!first || first->seq != packet->seq)
		return; /* late, duplicate or out of order: dropped */
	if (first->flushed) {
		/* Flushed while on its way (flush_stream): whatever the answer, it completes as
		 * flushed; an RNR NAK of the request itself sends the placeholder after the delay. */
		if (packet->status == SOFT_NAK_RNR) {
			if (!qp->requester.rnr_wait) {
				qp->requester.rnr_wait = true;
				qp->requester.deadline_ns = soft_now_ns() + rnr_delay_ns((uint8_t)packet->imm);
			}
			return;
		}
		complete_flushed(qp);
		qp->requester.deadline_ns = soft_now_ns() + transport_timeout_ns(qp);
		return;
	}
	read_wqe(qp, first->wqe_index, &wqe);
	if (packet->status == SOFT_ACK && wqe.opcode == MLX5_OPCODE_RDMA_READ &&
	    packet->length > mtu_bytes(qp->path_mtu)) {
		/* The responses come at the target's MTU; larger than this path's, they never
		 * arrive (dropped as malformed), and the READ times out. */
		trace_event(SOFTMLX5_EVENT_DROPPED, packet->dci_qpn, 0, packet->seq, wqe.index,
			    wqe.opcode, SOFTMLX5_DROP_MTU);
		return;
	}
	trace_event(SOFTMLX5_EVENT_ANSWERED, packet->dci_qpn, 0, packet->seq, wqe.index, wqe.opcode,
		    (uint8_t)packet->status);
	switch (packet->status) {
	case SOFT_ACK:
		if (wqe.opcode == MLX5_OPCODE_RDMA_READ) {
			scatter(&wqe, packet->payload, packet->payload_len);
		} else if (wqe.opcode == MLX5_OPCODE_ATOMIC_CS || wqe.opcode == MLX5_OPCODE_ATOMIC_FA) {
			scatter(&wqe, packet->payload, 8);
		}
		pop_oldest(qp);
		qp->requester.deadline_ns = soft_now_ns() + transport_timeout_ns(qp);
		if (wqe.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE)
			complete_request(qp, &wqe, MLX5_CQE_REQ, 0,
					 wqe.opcode == MLX5_OPCODE_RDMA_READ ? packet->payload_len
					 : (wqe.opcode == MLX5_OPCODE_ATOMIC_CS ||
					    wqe.opcode == MLX5_OPCODE_ATOMIC_FA) ? 8 : 0);
		break;
	case SOFT_NAK_RNR:
		if (qp->requester.rnr_wait)
			return;
		qp->requester.rnr_tries++;
		if (qp->rnr_retry != 7 && qp->requester.rnr_tries > qp->rnr_retry) {
			pop_oldest(qp);
			fail_wqe(qp, &wqe, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
			break;
		}
		/* the window goes again after the target's RNR timer, not a transport retry */
		qp->requester.rnr_wait = true;
		qp->requester.deadline_ns = soft_now_ns() + rnr_delay_ns((uint8_t)packet->imm);
		break;
	case SOFT_NAK_REMOTE_ACCESS:
		pop_oldest(qp);
		fail_wqe(qp, &wqe, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
		break;
	case SOFT_NAK_REMOTE_OPERATION:
		pop_oldest(qp);
		fail_wqe(qp, &wqe, MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
		break;
	default:
		pop_oldest(qp);
		fail_wqe(qp, &wqe, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
		break;
	}
}

/* The DCI's work: flush in ERR, take what the doorbell record announced, send it, retry what
 * timed out. True when it did something. */
static bool run_requester(struct soft_qp *qp, uint64_t now)
{
	struct soft_requester *r = &qp->requester;
	unsigned before;
	uint16_t producer;
	bool did = false;

	atomic_thread_fence(memory_order_acquire);
	producer = (uint16_t)be32toh(((volatile __be32 *)qp->mqp.db)[MLX5_SND_DBR]);
	atomic_thread_fence(memory_order_acquire);
	if (qp->state == IBV_QPS_ERR) {
		/* Every WQE not completed gets a flush CQE (signalled or not), in order. */
		while (r->count) {
			struct wqe wqe;

			read_wqe(qp, oldest(qp)->wqe_index, &wqe);
			complete_request(qp, &wqe, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0);
			pop_oldest(qp);
			did = true;
		}
		while (r->consumer != producer) {
			struct wqe wqe;

			read_wqe(qp, r->consumer, &wqe);
			complete_request(qp, &wqe, MLX5_CQE_REQ_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0);
			r->consumer = (uint16_t)(wqe.index + wqe.blocks);
			did = true;
		}
		return did;
	}
	if (qp->state != IBV_QPS_RTS || qp->stalled)
		return false;
	if (r->count && now >= r->deadline_ns) {
		if (r->rnr_wait) {
			r->rnr_wait = false;
			soft_counters.retransmits_rnr++;
			trace_event(SOFTMLX5_EVENT_RETRANSMIT, qp->mqp.verbs_qp.qp.qp_num, 0,
				    oldest(qp)->seq, oldest(qp)->wqe_index, 0, 2);
			transmit_window(qp);
		} else if (++r->tries > qp->retry_cnt) {
			struct wqe wqe;

			if (oldest(qp)->flushed) {
				/* a flushed request fails no more: its flush CQE */
				complete_flushed(qp);
			} else {
				read_wqe(qp, oldest(qp)->wqe_index, &wqe);
				pop_oldest(qp);
				fail_wqe(qp, &wqe, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
			}
			/* A DCI with streams goes on: the rest go again in a new connection, which
			 * the target starts at their first (it never saw the one that failed). */
			if (qp->state == IBV_QPS_RTS && r->count) {
				r->incarnation = new_incarnation();
				r->first_seq = oldest(qp)->seq;
				transmit_window(qp);
			}
		} else {
			soft_counters.retransmits_timeout++;
			trace_event(SOFTMLX5_EVENT_RETRANSMIT, qp->mqp.verbs_qp.qp.qp_num, 0,
				    oldest(qp)->seq, oldest(qp)->wqe_index, 0, 1);
			soft_fabric_forget_routes();
			transmit_window(qp);
		}
		return true;
	}
	before = r->count;
	while (qp->state == IBV_QPS_RTS && r->consumer != producer && take_request(qp))
		did = true;
	if (r->count > before && !r->rnr_wait) {
		/* send what was taken: the new ones, after what is already out */
		if (!before)
			r->deadline_ns = soft_now_ns() + transport_timeout_ns(qp);
		send_from(qp, r->next_seq - (r->count - before));
	}
	return did;
}

/* ---- responder ---- */

/* What a DCT keeps of each requester context (a DCI incarnation) it answered: the sequence
 * number it executes next, and the last answers, to answer a retransmission again without
 * doing it twice (an RC or DC responder's duplicate handling). */
#define SOFT_ANSWERS 64
#define SOFT_CONTEXTS 256

struct soft_answer {
	uint32_t seq;
	uint32_t status;
	uint64_t atomic_result;
};

struct soft_dedup {
	int32_t pid;
	uint32_t dci_qpn;
	uint32_t incarnation;
	uint32_t expected;
	struct soft_answer answers[SOFT_ANSWERS];
	struct soft_dedup *next;
};

static struct soft_dedup *context_of(struct soft_qp *dct, const struct soft_packet *packet)
{
	struct soft_dedup *entry, **link;
	unsigned n = 0;

	for (link = &dct->dedup; (entry = *link); link = &entry->next, n++) {
		if (entry->pid == packet->source_pid && entry->dci_qpn == packet->dci_qpn &&
		    entry->incarnation == packet->incarnation) {
			/* most recent first */
			*link = entry->next;
			entry->next = dct->dedup;
			dct->dedup = entry;
			return entry;
		}
		if (n + 1 >= SOFT_CONTEXTS && entry->next) {
			free(entry->next); /* the least recent goes */
			entry->next = NULL;
		}
	}
	entry = calloc(1, sizeof(*entry));
	if (!entry)
		return NULL;
	entry->pid = packet->source_pid;
	entry->dci_qpn = packet->dci_qpn;
	entry->incarnation = packet->incarnation;
	entry->expected = packet->first_seq;
	entry->next = dct->dedup;
	dct->dedup = entry;
	return entry;
}

void soft_dedup_free(struct soft_dedup *list)
{
	while (list) {
		struct soft_dedup *next = list->next;

		free(list);
		list = next;
	}
}

static void respond(const struct soft_packet *request, uint32_t status, const void *payload,
		    uint32_t len, uint32_t packet_bytes, uint32_t extra)
{
	struct soft_packet *response = calloc(1, sizeof(*response) + len);

	if (!response)
		return;
	response->type = SOFT_RESPONSE;
	response->status = status;
	response->source_pid = request->source_pid;
	response->dci_qpn = request->dci_qpn;
	response->incarnation = request->incarnation;
	response->seq = request->seq;
	response->length = packet_bytes;
	response->imm = extra;
	response->payload_len = len;
	if (len)
		memcpy(response->payload, payload, len);
	soft_fabric_send_response(response, sizeof(*response) + len);
	free(response);
}

static void receive_completion(struct soft_qp *dct, const struct soft_packet *packet, int index,
			       uint8_t opcode, uint8_t syndrome, uint32_t byte_count)
{
	struct soft_cq *cq = container_of(dct->mqp.verbs_qp.qp.recv_cq, struct soft_cq,
					  mcq.verbs_cq.cq);
	struct soft_device *dev = soft_device_of(dct->mqp.verbs_qp.qp.context);
	struct soft_cqe cqe = {
		.opcode = opcode,
		.syndrome = syndrome,
		.wqe_counter = (uint16_t)index,
		.qpn = dct->mqp.verbs_qp.qp.qp_num,
		.user_index = dct->mqp.rsc.rsn,
		.byte_count = byte_count,
		.imm = packet->imm,
		.remote_qpn = packet->dci_qpn,
		.grh = dev->port.ethernet || packet->global,
		.solicited = packet->solicited,
	};

	soft_cq_write(cq, &cqe);
}

/* Scatters a SEND's payload into the SRQ's WQE; 0, or the responder's syndrome. */
static uint8_t scatter_receive(struct soft_qp *dct, int index, const struct soft_packet *packet)
{
	struct ibv_srq *srq = dct->mqp.verbs_qp.qp.srq;
	int count, i;
	struct mlx5_wqe_data_seg *segs = soft_srq_scatter(srq, index, &count);
	const uint8_t *data = packet->payload;
	size_t left = packet->payload_len, room = 0;

	for (i = 0; i < count && be32toh(segs[i].lkey) != MLX5_INVALID_LKEY; i++) {
		uint32_t n = be32toh(segs[i].byte_count);

		if (soft_mr_check(soft_mr_find(be32toh(segs[i].lkey), false), srq->pd,
				  be64toh(segs[i].addr), n, IBV_ACCESS_LOCAL_WRITE))
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		room += n;
	}
	if (room < left)
		return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
	for (i = 0; i < count && left; i++) {
		size_t n = be32toh(segs[i].byte_count);

		if (n > left)
			n = left;
		memcpy((void *)(uintptr_t)be64toh(segs[i].addr), data, n);
		data += n;
		left -= n;
	}
	return 0;
}

static bool dct_reached(struct soft_qp *dct, const struct soft_packet *packet)
{
	struct soft_device *dev = soft_device_of(dct->mqp.verbs_qp.qp.context);

	if (dev->port.down)
		return false;
	if (dev->port.ethernet || packet->global)
		return soft_port_has_gid(&dev->port, packet->dgid);
	return packet->dlid == dev->port.lid;
}

/* Executes a request in sequence: its answer's status (SOFT_NAK_RNR: not executed), and an
 * atomic's original value. */
static uint32_t execute(struct soft_qp *dct, const struct soft_packet *packet, uint64_t *atomic)
{
	unsigned access = 0;
	struct soft_mr *mr;
	uint8_t syndrome;
	int index;

	switch (packet->opcode) {
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
		index = soft_srq_take(dct->mqp.verbs_qp.qp.srq);
		if (index < 0)
			return SOFT_NAK_RNR;
		syndrome = scatter_receive(dct, index, packet);
		if (syndrome) {
			receive_completion(dct, packet, index, MLX5_CQE_RESP_ERR, syndrome, 0);
			return syndrome == MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR ? SOFT_NAK_INVALID_REQUEST
									     : SOFT_NAK_REMOTE_OPERATION;
		}
		receive_completion(dct, packet, index,
				   packet->opcode == MLX5_OPCODE_SEND_IMM ? MLX5_CQE_RESP_SEND_IMM
									 : MLX5_CQE_RESP_SEND,
				   0, packet->payload_len);
		return SOFT_ACK;
	case MLX5_OPCODE_RDMA_WRITE:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
		access = IBV_ACCESS_REMOTE_WRITE;
		/* fall through */
	case MLX5_OPCODE_RDMA_READ:
		if (!access)
			access = IBV_ACCESS_REMOTE_READ;
		mr = soft_mr_find(packet->rkey, true);
		if (!(dct->access & access) ||
		    (packet->length &&
		     soft_mr_check(mr, dct->mqp.verbs_qp.qp.pd, packet->remote_addr, packet->length, access)))
			return SOFT_NAK_REMOTE_ACCESS;
		if (packet->opcode == MLX5_OPCODE_RDMA_READ)
			return SOFT_ACK;
		if (packet->opcode == MLX5_OPCODE_RDMA_WRITE_IMM) {
			index = soft_srq_take(dct->mqp.verbs_qp.qp.srq);
			if (index < 0)
				return SOFT_NAK_RNR;
			memcpy((void *)(uintptr_t)packet->remote_addr, packet->payload,
			       packet->payload_len);
			receive_completion(dct, packet, index, MLX5_CQE_RESP_WR_IMM, 0,
					   packet->payload_len);
			return SOFT_ACK;
		}
		memcpy((void *)(uintptr_t)packet->remote_addr, packet->payload, packet->payload_len);
		return SOFT_ACK;
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA: {
		uint64_t *target = (uint64_t *)(uintptr_t)packet->remote_addr, old;

		mr = soft_mr_find(packet->rkey, true);
		if (!(dct->access & IBV_ACCESS_REMOTE_ATOMIC) ||
		    soft_mr_check(mr, dct->mqp.verbs_qp.qp.pd, packet->remote_addr, 8, IBV_ACCESS_REMOTE_ATOMIC))
			return SOFT_NAK_REMOTE_ACCESS;
		if (packet->remote_addr & 7)
			return SOFT_NAK_INVALID_REQUEST;
		/* The operands travel in network order; the target word is big-endian in memory,
		 * as the HCA reads and writes it. */
		old = be64toh(__atomic_load_n(target, __ATOMIC_SEQ_CST));
		if (packet->opcode == MLX5_OPCODE_ATOMIC_FA)
			__atomic_store_n(target, htobe64(old + packet->compare_add), __ATOMIC_SEQ_CST);
		else if (old == packet->compare_add)
			__atomic_store_n(target, htobe64(packet->swap), __ATOMIC_SEQ_CST);
		*atomic = htobe64(old);
		return SOFT_ACK;
	}
	default:
		return SOFT_NAK_INVALID_REQUEST;
	}
}

static void answer(struct soft_qp *dct, const struct soft_packet *packet, uint32_t status,
		   uint64_t atomic)
{
	bool is_atomic = packet->opcode == MLX5_OPCODE_ATOMIC_CS ||
			 packet->opcode == MLX5_OPCODE_ATOMIC_FA;

	if (status == SOFT_NAK_RNR) {
		soft_counters.rnr_naks++;
		respond(packet, status, NULL, 0, 0, dct->min_rnr_timer);
	} else if (status == SOFT_ACK && packet->opcode == MLX5_OPCODE_RDMA_READ) {
		/* the data, in response packets of up to the DCT's path MTU */
		uint32_t mtu = mtu_bytes(dct->path_mtu);

		respond(packet, SOFT_ACK, (void *)(uintptr_t)packet->remote_addr, packet->length,
			packet->length < mtu ? packet->length : mtu, 0);
	} else {
		respond(packet, status, &atomic, status == SOFT_ACK && is_atomic ? 8 : 0, 0, 0);
	}
}

/* A request reached this process. Dropped when no DCT in RTR has the number, when the address
 * is not this port's, or when the DC key differs (the DCT drops it: PRM dc_access_key
 * violation); the requester then times out. Executed in sequence per requester context: a
 * number ahead of the expected one is dropped (the requester goes back), one behind is a
 * retransmission, answered again from what was answered. */
void soft_engine_request(struct soft_packet *packet)
{
	struct soft_qp *dct = soft_qp_find(packet->dctn);
	struct soft_dedup *context;
	struct soft_answer *slot;
	uint64_t atomic = 0;
	uint32_t status;
	int32_t ahead;

	if (!dct || dct->mqp.dc_type != MLX5DV_DCTYPE_DCT || dct->state != IBV_QPS_RTR || !dct_reached(dct, packet)) {
		soft_counters.dropped_no_target++;
		soft_trace_drop(packet, SOFTMLX5_DROP_NO_TARGET);
		return;
	}
	if (dct->killed) {
		soft_trace_drop(packet, SOFTMLX5_DROP_KILLED);
		return;
	}
	if (packet->dc_key != dct->dc_key) {
		soft_counters.dropped_dc_key++;
		soft_trace_drop(packet, SOFTMLX5_DROP_DC_KEY);
		return;
	}
	context = context_of(dct, packet);
	if (!context)
		return;
	ahead = (int32_t)(packet->seq - context->expected);
	if (ahead > 0) {
		soft_counters.dropped_out_of_sequence++;
		soft_trace_drop(packet, SOFTMLX5_DROP_OUT_OF_SEQUENCE);
		return;
	}
	slot = &context->answers[packet->seq % SOFT_ANSWERS];
	if (ahead < 0) {
		if (slot->seq != packet->seq)
			return; /* too old to answer again */
		if (packet->opcode == MLX5_OPCODE_RDMA_READ && slot->status == SOFT_ACK) {
			answer(dct, packet, SOFT_ACK, 0); /* a READ reads again */
			return;
		}
		answer(dct, packet, slot->status, slot->atomic_result);
		return;
	}
	if (packet->flushed) {
		/* the placeholder of a request its initiator flushed: its place in the sequence,
		 * answered, never executed */
		slot->seq = packet->seq;
		slot->status = SOFT_ACK;
		slot->atomic_result = 0;
		context->expected++;
		respond(packet, SOFT_ACK, NULL, 0, 0, 0);
		return;
	}
	status = execute(dct, packet, &atomic);
	trace_event(SOFTMLX5_EVENT_EXECUTED, dct->mqp.verbs_qp.qp.qp_num, packet->dci_qpn,
		    packet->seq, 0, packet->opcode, (uint8_t)status);
	if (status != SOFT_NAK_RNR) {
		slot->seq = packet->seq;
		slot->status = status;
		slot->atomic_result = atomic;
		context->expected++;
	}
	answer(dct, packet, status, atomic);
}

/* ---- the thread ---- */

static bool pass(void)
{
	uint64_t now = soft_now_ns();
	struct soft_qp *qp;
	bool did = soft_fabric_send_due(now);

	for (qp = soft_qps; qp; qp = qp->next)
		if (qp->mqp.dc_type == MLX5DV_DCTYPE_DCI)
			did |= run_requester(qp, now);
	return did;
}

/* One pass of the device's work and every packet that arrived: what softmlx5_step does. */
static size_t work(void)
{
	struct soft_packet *packet;
	size_t done = 0;
	size_t len;

	pthread_mutex_lock(&soft_lock);
	done += pass();
	pthread_mutex_unlock(&soft_lock);
	while ((packet = soft_fabric_receive(&len))) {
		pthread_mutex_lock(&soft_lock);
		if (packet->type == SOFT_REQUEST)
			soft_engine_request(packet);
		else
			soft_engine_response(packet);
		pthread_mutex_unlock(&soft_lock);
		free(packet);
		done++;
	}
	return done;
}

/* Serialises the engine's work between the device thread and softmlx5_step. */
static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;

size_t soft_engine_step(void)
{
	size_t done;

	pthread_mutex_lock(&work_lock);
	done = work();
	pthread_mutex_unlock(&work_lock);
	return done;
}

static void *engine_main(void *arg)
{
	unsigned idle = 0;

	(void)arg;
	for (;;) {
		struct pollfd fds[2] = {
			{ .fd = soft_fabric_fd(), .events = POLLIN },
			{ .fd = kick_fd, .events = POLLIN },
		};
		struct timespec wait;
		bool did = false;

		if (!soft_faults.step_mode) {
			pthread_mutex_lock(&work_lock);
			did = work() > 0;
			pthread_mutex_unlock(&work_lock);
		}
		if (did) {
			idle = 0;
			continue;
		}
		if (soft_faults.step_mode) {
			/* the test steps: wait for it to leave step mode */
			struct pollfd kick = { .fd = kick_fd, .events = POLLIN };

			if (poll(&kick, 1, 10) > 0) {
				uint64_t count;
				ssize_t got = read(kick_fd, &count, sizeof(count));

				(void)got;
			}
			continue;
		}
		/* Doorbell records are memory: the device polls them, briefly at full speed after
		 * work, then backing off to a millisecond. */
		idle++;
		if (idle < 64) {
			sched_yield();
			continue;
		}
		wait.tv_sec = 0;
		wait.tv_nsec = idle < 256 ? 20000 : idle < 1024 ? 200000 : 1000000;
		if (ppoll(fds, 2, &wait, NULL) > 0 && (fds[1].revents & POLLIN)) {
			uint64_t count;
			ssize_t got = read(kick_fd, &count, sizeof(count));

			(void)got;
			idle = 0;
		}
	}
	return NULL;
}

static void start(void)
{
	pthread_t thread;
	pthread_attr_t attr;

	kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_create(&thread, &attr, engine_main, NULL);
	pthread_attr_destroy(&attr);
}

void soft_engine_start(void)
{
	pthread_once(&engine_once, start);
}
