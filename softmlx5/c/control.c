/* Control for tests: faults at a time, a step mode with a virtual clock, a seed, a bounded trace
 * of what the device did, and counters. Every function is a C entry (softmlx5_*) a test calls in
 * the process that owns the object; the softmlx5 Rust crate wraps them. Faults act where the
 * hardware would see them: a killed target or a changed DC key at the target, drops, delays and
 * reordering on the requester's way out, a stalled or errored initiator or stream at the
 * initiator, ARP at address-handle creation. */
#include "softmlx5.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct softmlx5_counters soft_counters;
struct soft_faults soft_faults;

/* ---- the seed (xorshift64*: the same seed, the same faults) ---- */

static uint64_t random_state = 0x9e3779b97f4a7c15ull;

uint64_t soft_random(void)
{
	random_state ^= random_state >> 12;
	random_state ^= random_state << 25;
	random_state ^= random_state >> 27;
	return random_state * 0x2545f4914f6cdd1dull;
}

SOFT_EXPORT void softmlx5_seed(uint64_t seed)
{
	pthread_mutex_lock(&soft_lock);
	random_state = seed ? seed : 0x9e3779b97f4a7c15ull;
	pthread_mutex_unlock(&soft_lock);
}

/* ---- the trace ---- */

#define TRACE_LEN 4096
static struct softmlx5_event trace[TRACE_LEN];
static uint64_t trace_written;

void soft_trace(const struct softmlx5_event *event)
{
	struct softmlx5_event *slot = &trace[trace_written % TRACE_LEN];

	*slot = *event;
	slot->time_ns = soft_now_ns();
	trace_written++;
}

/* A packet lost, and why (enum softmlx5_drop). */
void soft_trace_drop(const struct soft_packet *packet, uint8_t reason)
{
	struct softmlx5_event event = {
		.kind = SOFTMLX5_EVENT_DROPPED,
		.qp_number = packet->dci_qpn,
		.peer = packet->dctn,
		.seq = packet->seq,
		.opcode = packet->opcode,
		.status = reason,
	};

	soft_trace(&event);
}

/* Copies up to `max` of the last events, oldest first; returns how many. */
SOFT_EXPORT size_t softmlx5_trace(struct softmlx5_event *out, size_t max)
{
	uint64_t first, i;
	size_t n = 0;

	pthread_mutex_lock(&soft_lock);
	first = trace_written > TRACE_LEN ? trace_written - TRACE_LEN : 0;
	if (trace_written - first > max)
		first = trace_written - max;
	for (i = first; i < trace_written; i++)
		out[n++] = trace[i % TRACE_LEN];
	pthread_mutex_unlock(&soft_lock);
	return n;
}

SOFT_EXPORT void softmlx5_trace_clear(void)
{
	pthread_mutex_lock(&soft_lock);
	trace_written = 0;
	pthread_mutex_unlock(&soft_lock);
}

/* ---- step mode and the virtual clock ---- */

/* In step mode the device thread does nothing: softmlx5_step does one pass of the device's work
 * (every doorbell, every packet that arrived, every timer due), and time is a clock the test
 * moves (softmlx5_advance). */
SOFT_EXPORT void softmlx5_set_step_mode(int on)
{
	pthread_mutex_lock(&soft_lock);
	if (on && !soft_faults.step_mode)
		soft_faults.virtual_ns = soft_now_ns();
	soft_faults.step_mode = on != 0;
	pthread_mutex_unlock(&soft_lock);
	soft_engine_kick();
}

SOFT_EXPORT void softmlx5_advance(uint64_t nanoseconds)
{
	pthread_mutex_lock(&soft_lock);
	soft_faults.virtual_ns += nanoseconds;
	pthread_mutex_unlock(&soft_lock);
}

SOFT_EXPORT size_t softmlx5_step(void)
{
	return soft_engine_step();
}

/* ---- faults ---- */

static struct soft_qp *local_qp(uint32_t qpn, enum mlx5dv_dc_type kind)
{
	struct soft_qp *qp = soft_qp_find(qpn);

	return qp && qp->mqp.dc_type == kind ? qp : NULL;
}

/* A DC target that no longer answers (its requests are dropped), or again. ENOENT when this
 * process has no DCT of that number. */
SOFT_EXPORT int softmlx5_kill_target(uint32_t dct_number, int killed)
{
	struct soft_qp *dct;
	int ret = 0;

	pthread_mutex_lock(&soft_lock);
	dct = local_qp(dct_number, MLX5DV_DCTYPE_DCT);
	if (dct)
		dct->killed = killed != 0;
	else
		ret = ENOENT;
	pthread_mutex_unlock(&soft_lock);
	return ret;
}

/* The DC key a DC target checks from now on. */
SOFT_EXPORT int softmlx5_set_dc_key(uint32_t dct_number, uint64_t dc_key)
{
	struct soft_qp *dct;
	int ret = 0;

	pthread_mutex_lock(&soft_lock);
	dct = local_qp(dct_number, MLX5DV_DCTYPE_DCT);
	if (dct)
		dct->dc_key = dc_key;
	else
		ret = ENOENT;
	pthread_mutex_unlock(&soft_lock);
	return ret;
}

static struct soft_route_fault *route_fault(uint32_t dct_number, bool create)
{
	struct soft_route_fault *fault;
	int i;

	for (i = 0; i < SOFT_ROUTE_FAULTS; i++)
		if (soft_faults.routes[i].used && soft_faults.routes[i].dct_number == dct_number)
			return &soft_faults.routes[i];
	if (!create)
		return NULL;
	for (i = 0; i < SOFT_ROUTE_FAULTS; i++) {
		fault = &soft_faults.routes[i];
		if (!fault->used) {
			memset(fault, 0, sizeof(*fault));
			fault->used = true;
			fault->dct_number = dct_number;
			return fault;
		}
	}
	return NULL;
}

/* Requests from this process to `dct_number`: the next `count` dropped, then each dropped with
 * probability `per_million` / 10^6 (drawn from the seed); each delayed by `delay_ns`; with
 * `reorder`, each held until the next one to the same target went first. All zero: cleared. */
SOFT_EXPORT int softmlx5_route_fault(uint32_t dct_number, uint32_t drop_count,
				     uint32_t drop_per_million, uint64_t delay_ns, int reorder)
{
	struct soft_route_fault *fault;
	int ret = 0;

	pthread_mutex_lock(&soft_lock);
	fault = route_fault(dct_number, true);
	if (!fault) {
		ret = ENOSPC;
	} else if (!drop_count && !drop_per_million && !delay_ns && !reorder) {
		soft_fabric_release_held(fault);
		fault->used = false;
	} else {
		fault->drop_count = drop_count;
		fault->drop_per_million = drop_per_million;
		fault->delay_ns = delay_ns;
		fault->reorder = reorder != 0;
	}
	pthread_mutex_unlock(&soft_lock);
	soft_engine_kick();
	return ret;
}

struct soft_route_fault *soft_route_fault_of(uint32_t dct_number)
{
	return route_fault(dct_number, false);
}

/* A DC initiator the device does not serve (its requests wait), or serves again. */
SOFT_EXPORT int softmlx5_stall_initiator(uint32_t qp_number, int stalled)
{
	struct soft_qp *dci;
	int ret = 0;

	pthread_mutex_lock(&soft_lock);
	dci = local_qp(qp_number, MLX5DV_DCTYPE_DCI);
	if (dci)
		dci->stalled = stalled != 0;
	else
		ret = ENOENT;
	pthread_mutex_unlock(&soft_lock);
	soft_engine_kick();
	return ret;
}

/* A DC initiator's fatal error: to ERR, its work flushed, IBV_EVENT_QP_FATAL on its context. */
SOFT_EXPORT int softmlx5_error_initiator(uint32_t qp_number)
{
	struct soft_qp *dci;
	int ret = 0;

	pthread_mutex_lock(&soft_lock);
	dci = local_qp(qp_number, MLX5DV_DCTYPE_DCI);
	if (dci) {
		struct ibv_async_event event = {
			.element.qp = &dci->mqp.verbs_qp.qp,
			.event_type = IBV_EVENT_QP_FATAL,
		};

		soft_qp_to_error(dci);
		soft_async_event(dci->mqp.verbs_qp.qp.context, &event);
	} else {
		ret = ENOENT;
	}
	pthread_mutex_unlock(&soft_lock);
	soft_engine_kick();
	return ret;
}

/* One stream of a DC initiator in error, as after a failed request on it (its error CQE is the
 * one thing the fault does not write): every request of the stream the device holds, on its way
 * or answered or not, and every one posted after, completes flushed, signalled or not, until
 * mlx5dv_dci_stream_id_reset (mlx5dv_dci_stream_id_reset(3); engine.c: soft_stream_error); the
 * initiator goes to ERR when 2^log_num_errored streams are. EINVAL for a DCI without streams or
 * a stream id above 63. */
SOFT_EXPORT int softmlx5_error_stream(uint32_t qp_number, uint16_t stream)
{
	struct soft_qp *dci;
	int ret = 0;

	pthread_mutex_lock(&soft_lock);
	dci = local_qp(qp_number, MLX5DV_DCTYPE_DCI);
	if (!dci)
		ret = ENOENT;
	else if (!dci->log_num_concurrent || stream >= 64)
		ret = EINVAL;
	else
		soft_stream_error(dci, stream);
	pthread_mutex_unlock(&soft_lock);
	soft_engine_kick();
	return ret;
}

/* ibv_create_ah on RoCE fails as an unanswered ARP does (ETIMEDOUT), or resolves again. */
SOFT_EXPORT void softmlx5_fail_arp(int fail)
{
	pthread_mutex_lock(&soft_lock);
	soft_faults.fail_arp = fail != 0;
	pthread_mutex_unlock(&soft_lock);
}

/* ---- what it is, and what it did ---- */

/* The name a program can check it runs on the software device with. */
SOFT_EXPORT const char *softmlx5_version(void)
{
	return "softmlx5 0.1 (software ConnectX, rdma-core 55 libmlx5 in the loop)";
}

SOFT_EXPORT void softmlx5_counters(struct softmlx5_counters *out)
{
	pthread_mutex_lock(&soft_lock);
	*out = soft_counters;
	pthread_mutex_unlock(&soft_lock);
}

static void print_counters(void)
{
	struct softmlx5_counters *c = &soft_counters;

	fprintf(stderr,
		"softmlx5[%d]: requests %lu, retransmits after timeout %lu, after RNR %lu, "
		"packets lost %lu, received %lu, RNR NAKs %lu, dropped out of sequence %lu, "
		"wrong DC key %lu, no target %lu, CQEs %lu, mlx5 device queries %lu, "
		"DC targets created %lu, DC initiators created %lu\n",
		(int)getpid(), c->requests_sent, c->retransmits_timeout, c->retransmits_rnr,
		c->packets_lost, c->packets_received, c->rnr_naks, c->dropped_out_of_sequence,
		c->dropped_dc_key, c->dropped_no_target, c->cqes, c->mlx5_device_queries,
		c->dc_targets_created, c->dc_initiators_created);
}

/* SOFTMLX5_STATS prints the counters at exit; SOFTMLX5_STEP=1 starts in step mode;
 * SOFTMLX5_SEED seeds the faults' draws. */
__attribute__((constructor)) static void control_from_environment(void)
{
	const char *seed = getenv("SOFTMLX5_SEED");

	if (getenv("SOFTMLX5_STATS"))
		atexit(print_counters);
	if (seed)
		random_state = strtoull(seed, NULL, 0) ? strtoull(seed, NULL, 0) : random_state;
	if (getenv("SOFTMLX5_STEP") && !strcmp(getenv("SOFTMLX5_STEP"), "1")) {
		soft_faults.step_mode = true;
		soft_faults.virtual_ns = 1000000000ull;
	}
}

