/* softmlx5's control API for tests, as C functions exported by the software device's
 * libibverbs.so.1 (a program finds them with dlsym, or links them from there). The softmlx5 Rust
 * crate wraps the same functions. Each acts in the calling process: call a target's faults in the
 * process that created the target, an initiator's in the one that created the initiator. */
#ifndef SOFTMLX5_CONTROL_H
#define SOFTMLX5_CONTROL_H

#include <stddef.h>
#include <stdint.h>

/* What the device did: the kinds of struct softmlx5_event. */
enum softmlx5_event_kind {
	SOFTMLX5_EVENT_REQUEST = 1,	/* a request left a DCI (fields: what its WQE asked) */
	SOFTMLX5_EVENT_RETRANSMIT = 2,	/* the window went again (status: 1 timeout, 2 RNR) */
	SOFTMLX5_EVENT_DROPPED = 3,	/* a packet was lost (status: enum softmlx5_drop) */
	SOFTMLX5_EVENT_EXECUTED = 4,	/* a DCT executed a request (status: the answer) */
	SOFTMLX5_EVENT_ANSWERED = 5,	/* a DCI took an answer (status: the answer) */
	SOFTMLX5_EVENT_CQE = 6,		/* a CQE was written (opcode: CQE opcode, status: syndrome) */
};

enum softmlx5_drop {
	SOFTMLX5_DROP_NO_TARGET = 1,	/* no DCT in RTR of that number at that address */
	SOFTMLX5_DROP_DC_KEY = 2,	/* the DCT's DC key differs */
	SOFTMLX5_DROP_OUT_OF_SEQUENCE = 3,
	SOFTMLX5_DROP_FAULT = 4,	/* softmlx5_route_fault */
	SOFTMLX5_DROP_CONGESTION = 5,	/* the receiving process did not take it */
	SOFTMLX5_DROP_KILLED = 6,	/* softmlx5_kill_target */
	SOFTMLX5_DROP_MTU = 7,		/* a READ response larger than the requester's path MTU */
};

/* Answers (status of EXECUTED and ANSWERED). */
enum softmlx5_answer {
	SOFTMLX5_ACK = 0,
	SOFTMLX5_NAK_RNR = 1,
	SOFTMLX5_NAK_REMOTE_ACCESS = 2,
	SOFTMLX5_NAK_REMOTE_OPERATION = 3,
	SOFTMLX5_NAK_INVALID_REQUEST = 4,
};

struct softmlx5_event {
	uint64_t time_ns;	/* monotonic, or the virtual clock in step mode */
	uint32_t kind;		/* enum softmlx5_event_kind */
	uint32_t qp_number;	/* the DCI (REQUEST, RETRANSMIT, ANSWERED, CQE) or DCT (EXECUTED) */
	uint32_t peer;		/* the DCT number (REQUEST, DROPPED) or the DCI number (EXECUTED) */
	uint32_t seq;		/* the request's sequence number on its connection */
	uint16_t wqe_index;
	uint8_t opcode;		/* MLX5_OPCODE_* of the request; MLX5_CQE_* for CQE */
	uint8_t status;
	uint64_t dc_key;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t length;	/* bytes the request moves */
	uint32_t imm;		/* as it travels (big-endian) */
	uint16_t stream;
	uint8_t signaled;
	uint8_t reserved;
};

struct softmlx5_counters {
	uint64_t requests_sent, retransmits_timeout, retransmits_rnr, packets_lost,
		packets_received, rnr_naks, dropped_out_of_sequence, dropped_dc_key,
		dropped_no_target, cqes;
	/* what a program asked of mlx5 and DC: mlx5dv_query_device answered, DC targets and
	 * initiators created */
	uint64_t mlx5_device_queries, dc_targets_created, dc_initiators_created;
};

const char *softmlx5_version(void);

/* Faults. 0, or ENOENT when this process holds no such queue pair. */
int softmlx5_kill_target(uint32_t dct_number, int killed);
int softmlx5_set_dc_key(uint32_t dct_number, uint64_t dc_key);
int softmlx5_route_fault(uint32_t dct_number, uint32_t drop_count, uint32_t drop_per_million,
			 uint64_t delay_ns, int reorder);
int softmlx5_stall_initiator(uint32_t qp_number, int stalled);
int softmlx5_error_initiator(uint32_t qp_number);
int softmlx5_error_stream(uint32_t qp_number, uint16_t stream);
void softmlx5_fail_arp(int fail);
int softmlx5_set_port_state(const char *device_name, int up);

/* Step mode, the virtual clock and the seed. */
void softmlx5_set_step_mode(int on);
void softmlx5_advance(uint64_t nanoseconds);
size_t softmlx5_step(void);
void softmlx5_seed(uint64_t seed);

/* What the device did. */
size_t softmlx5_trace(struct softmlx5_event *out, size_t max);
void softmlx5_trace_clear(void);
void softmlx5_counters(struct softmlx5_counters *out);

#endif
