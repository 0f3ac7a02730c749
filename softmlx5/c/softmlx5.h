/* softmlx5: a software ConnectX for DC, below the C ABI. One shared object answers as both
 * libibverbs.so.1 and libmlx5.so.1; its queue pairs, CQs and SRQs are libmlx5's own structures
 * (mlx5.h), laid out as libmlx5's creation paths lay them out, so that libmlx5's own qp.c, cq.c
 * and srq.c (compiled in, unmodified) post and poll, and a device thread executes the WQE bytes
 * and writes CQE bytes.
 *
 * Rooms: devices.c (profiles, devices, ports, GIDs, queries), sysfs.c (their sysfs-like tree),
 * memory.c (PD, MR, thread and parent domains), completion.c (CQs, channels, the CQE writer),
 * shared_receive_queue.c, queue_pair.c (DCI, DCT, address handles, mlx5dv_init_obj), engine.c
 * (the device thread: requester and responder), fabric.c (packets between processes),
 * control.c (faults and trace for tests),
 * provider.c (what libmlx5's files link to). */
#ifndef SOFTMLX5_H
#define SOFTMLX5_H

#include <config.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "mlx5.h"
#include "wqe.h"

#include "softmlx5_control.h"

#define SOFT_EXPORT __attribute__((visibility("default")))

/* ---- profiles and devices (devices.c, sysfs.c) ---- */

/* A device's capabilities, as the PRM's general device capabilities (cmd_hca_cap) hold them:
 * QUERY_HCA_CAP answers them, and ibv_query_device, mlx5dv_query_device and the user context
 * derive from them as mlx5_ib and libmlx5 do (devices.c). */
struct soft_profile {
	const char *name;	/* cx5, cx6, cx6dx, cx7 */
	const char *part;	/* ConnectX-5, ... */
	uint32_t vendor_part_id; /* the PCI device id */
	uint8_t log_max_qp, log_max_qp_sz, log_max_srq, log_max_srq_sz, log_max_cq, log_max_cq_sz;
	uint8_t log_max_mkey, log_max_pd;
	uint8_t log_max_ra_req_qp, log_max_ra_res_qp, log_max_ra_req_dc, log_max_ra_res_dc;
	uint8_t log_max_dci_stream_channels; /* 0: no DCI streams */
	uint8_t log_max_dci_errored_streams;
	bool qpc_extension;	/* what mlx5dv_dci_stream_id_reset needs */
	uint16_t max_wqe_sz_sq, max_wqe_sz_rq, max_wqe_sz_sq_dc; /* bytes */
	/* Older stacks */
	bool no_query_gid_ex;	/* rdma-core before 32 */
	bool no_dci_reset;	/* kernel without DCI RESET from ERR */
	bool no_dynamic_uar;	/* kernel without dynamic UAR */
	/* SOFTMLX5_ATOMICS: no atomics at all (atomic_cap IBV_ATOMIC_NONE), or none on DC */
	bool no_atomics, no_dc_atomics;
};

struct soft_gid {
	uint8_t raw[16];
	uint32_t type;		/* IBV_GID_TYPE_IB / ROCE_V1 / ROCE_V2 */
	char netdev[16];	/* its network device ("" on InfiniBand) */
	uint32_t ifindex;	/* that device's interface index on this host; 0: none has the name */
	bool valid;
};

#define SOFT_GID_TABLE_LEN 16

struct soft_port {
	bool ethernet;		/* RoCE v2; InfiniBand otherwise */
	bool grh_required;
	bool down;		/* softmlx5_set_port_state; read under soft_lock */
	enum ibv_mtu active_mtu;
	uint16_t lid;
	struct soft_gid gids[SOFT_GID_TABLE_LEN];
};

struct soft_context;

struct soft_device {
	struct mlx5_device mdev;	/* first: libmlx5's to_mdev() reads page_size */
	struct soft_profile profile;
	struct soft_port port;	/* one port, port 1 */
	uint64_t node_guid;
	int index;
	struct soft_context *contexts;	/* open on it, for its async events (devices.c) */
};

struct soft_device *soft_device_of(struct ibv_context *context);
bool soft_port_has_gid(const struct soft_port *port, const uint8_t gid[16]);
/* What ibv_query_port answers for the device's port (and its sysfs tree shows). */
void soft_port_attr(const struct soft_device *dev, struct ibv_port_attr *attr);

/* sysfs.c: a sysfs-like tree of the process's devices, which their ibdev_path names. */
void soft_sysfs_publish(struct soft_device *devices, int count);
void soft_sysfs_port_changed(const struct soft_device *dev);

/* ---- objects ---- */

struct soft_context {
	struct mlx5_context mctx;	/* first: libmlx5's to_mctx() */
	struct soft_device *device;
	struct soft_context *next_open;	/* the device's other open contexts */
	int async_fd[2];		/* a pipe of struct ibv_async_event */
	void *uar_page;			/* doorbell and BlueFlame registers, 4 pages of memory */
	struct mlx5_bf *bfs;
	unsigned next_shared_bf;
};

struct soft_mr {
	struct mlx5_mr mmr;
	struct soft_mr *next;
};

struct soft_channel {
	struct ibv_comp_channel channel; /* fd: the read end of a pipe of struct ibv_cq pointers */
	int write_fd;
};

struct soft_cq {
	struct mlx5_cq mcq;
	struct soft_cq *next;
	uint32_t producer;		/* CQEs the device wrote */
	bool armed;			/* an ibv_req_notify_cq not yet answered */
	bool armed_solicited;
	bool overrun;
};

struct soft_srq {
	struct mlx5_srq msrq;
	struct soft_srq *next;
	uint16_t consumed;		/* WQEs the device took */
	int next_index;			/* the WQE the device takes next */
	uint32_t limit;			/* srq_limit armed; 0: not */
	bool in_error;
};

/* What a DCI's requester has sent and not yet seen answered (engine.c): a window of requests
 * in queue order, retransmitted from the oldest (go-back-N, as RC and DC requesters do) after
 * the transport timeout or an RNR NAK's delay. */
#define SOFT_WINDOW 32

struct soft_outstanding {
	uint16_t wqe_index;
	uint32_t seq;
	uint8_t stream;
	/* Its stream erred after it was taken: it completes as flushed, and goes (again) only as a
	 * placeholder its target answers without executing (engine.c: flush_stream). */
	bool flushed;
};

struct soft_requester {
	struct soft_outstanding ring[SOFT_WINDOW];
	unsigned oldest, count;
	uint64_t deadline_ns;	/* the oldest's timer */
	int tries, rnr_tries;
	bool rnr_wait;
	uint32_t next_seq;
	uint32_t first_seq;	/* of the connection: where its target's context starts */
	uint32_t incarnation;	/* the connection: new at creation, at RESET and at each new
				 * destination; the responder keeps a context per connection */
	uint8_t destination[32];	/* of the window's requests: DCT number, DC key, address */
	uint16_t consumer;	/* the next WQE not yet taken into the window */
};

struct soft_qp {
	struct mlx5_qp mqp;
	struct soft_qp *next;
	/* granted attributes */
	enum ibv_qp_state state;
	uint8_t port;
	uint16_t pkey_index;
	unsigned access;
	enum ibv_mtu path_mtu;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
	uint32_t sq_psn;
	uint8_t max_rd_atomic, max_dest_rd_atomic;
	uint64_t dc_key;
	struct ibv_ah_attr ah_attr;
	bool ah_set;
	/* DCI streams */
	uint8_t log_num_concurrent, log_num_errored;
	uint64_t errored_streams;	/* a bit per errored stream (stream ids < 64) */
	struct soft_requester requester;
	bool killed;			/* DCT: softmlx5_kill_target */
	bool stalled;			/* DCI: softmlx5_stall_initiator */
	/* responder (DCT): what each requester last asked, to answer a retry again */
	struct soft_dedup *dedup;
};

struct soft_ah {
	struct mlx5_ah mah;
};

/* ---- the device's one lock and lists (engine.c) ---- */

extern pthread_mutex_t soft_lock;
extern struct soft_qp *soft_qps;
extern struct soft_cq *soft_cqs;
extern struct soft_srq *soft_srqs;
extern struct soft_mr *soft_mrs;

void soft_engine_start(void);
/* A requester as a QP at RESET has it: nothing sent, a new context for its responders. */
void soft_requester_reset(struct soft_qp *qp);
void soft_engine_kick(void);
uint64_t soft_now_ns(void);

/* ---- completion.c ---- */

struct soft_cqe {
	uint8_t opcode;		/* MLX5_CQE_* */
	uint8_t syndrome;	/* error CQEs; the vendor syndrome follows from it (completion.c) */
	uint8_t wqe_opcode;	/* requester: the WQE's opcode */
	uint16_t wqe_counter;
	uint32_t qpn;
	uint32_t user_index;
	uint32_t byte_count;
	uint32_t imm;		/* big-endian as it travels */
	uint32_t remote_qpn;
	bool grh;
	bool solicited;
};
/* Writes one CQE; false when the CQ is full (an overrun, raised as IBV_EVENT_CQ_ERR). */
bool soft_cq_write(struct soft_cq *cq, const struct soft_cqe *cqe);
void soft_async_event(struct ibv_context *context, struct ibv_async_event *event);

/* ---- queue_pair.c ---- */
struct soft_qp *soft_qp_find(uint32_t qpn);
struct soft_dedup;
void soft_qp_to_error(struct soft_qp *qp);

/* ---- memory.c ---- */
/* The region `key` names on `pd`'s device, when it covers [addr, addr + len) with `access`;
 * the syndrome to report otherwise. */
struct soft_mr *soft_mr_find(uint32_t key, bool remote);
int soft_mr_check(struct soft_mr *mr, struct ibv_pd *pd, uint64_t addr, uint64_t len,
		  unsigned access);

/* ---- fabric.c ---- */
enum soft_packet_type {
	SOFT_REQUEST = 1,
	SOFT_RESPONSE = 2,
};

enum soft_response_status {
	SOFT_ACK = 0,
	SOFT_NAK_RNR = 1,
	SOFT_NAK_REMOTE_ACCESS = 2,
	SOFT_NAK_REMOTE_OPERATION = 3,
	SOFT_NAK_INVALID_REQUEST = 4,
};

struct soft_packet {
	uint32_t type;
	uint32_t status;
	int32_t source_pid;
	uint32_t dci_qpn;
	uint32_t incarnation;
	uint32_t first_seq;	/* the connection's first: the target's context starts there */
	uint32_t seq;
	uint8_t opcode;		/* MLX5_OPCODE_* of the request */
	uint8_t stream;
	uint8_t requester_mtu;	/* enum ibv_mtu */
	uint8_t solicited;
	uint32_t dctn;
	uint64_t dc_key;
	uint8_t dgid[16];
	uint16_t dlid;
	uint8_t global;
	uint8_t flushed;	/* a placeholder for a flushed request: answered, never executed */
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t length;	/* of the operation: payload, or bytes to READ */
	uint32_t imm;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t payload_len;
	uint8_t payload[];
};

int soft_fabric_init(void);
const char *soft_fabric_dir(void);
int soft_fabric_fd(void);
/* Allocates a QP number no other process of the fabric holds. */
uint32_t soft_fabric_claim_qpn(void);
void soft_fabric_release_qpn(uint32_t qpn);
void soft_fabric_forget_routes(void);
/* Sends a packet to the process that holds `qpn` (a request) or to `pid` (a response); a packet
 * to a QP number no live process holds is lost, as on a wire. */
void soft_fabric_send_request(struct soft_packet *packet, size_t len);
void soft_fabric_send_response(struct soft_packet *packet, size_t len);
/* The next packet that arrived, or NULL. */
struct soft_packet *soft_fabric_receive(size_t *len);

/* ---- engine.c: a packet arrived ---- */
void soft_engine_request(struct soft_packet *packet);
void soft_engine_response(struct soft_packet *packet);
void soft_dedup_free(struct soft_dedup *list);

/* ---- control.c: faults, step mode, trace, counters ---- */
struct soft_delayed {
	struct soft_delayed *next;
	uint64_t due_ns;
	size_t len;
	struct soft_packet *packet;
};

#define SOFT_ROUTE_FAULTS 64
struct soft_route_fault {
	bool used;
	bool reorder;
	uint32_t dct_number;
	uint32_t drop_count;
	uint32_t drop_per_million;
	uint64_t delay_ns;
	struct soft_delayed *held;	/* delayed or held back, in order */
};

struct soft_faults {
	bool step_mode;
	uint64_t virtual_ns;
	bool fail_arp;
	struct soft_route_fault routes[SOFT_ROUTE_FAULTS];
};

extern struct softmlx5_counters soft_counters;
extern struct soft_faults soft_faults;
uint64_t soft_random(void);
void soft_trace(const struct softmlx5_event *event);
void soft_trace_drop(const struct soft_packet *packet, uint8_t reason);
struct soft_route_fault *soft_route_fault_of(uint32_t dct_number);
size_t soft_engine_step(void);
void soft_stream_error(struct soft_qp *dci, uint16_t stream);
/* fabric.c: sends what a route fault held back, at once */
void soft_fabric_release_held(struct soft_route_fault *fault);
/* fabric.c: sends the delayed packets that are due; true when it sent any */
bool soft_fabric_send_due(uint64_t now);

/* ---- provider.c: libmlx5's buffers ---- */
void *soft_zalloc_aligned(size_t size);
int soft_store_uidx(struct mlx5_context *ctx, void *rsc);
void soft_clear_uidx(struct mlx5_context *ctx, uint32_t uidx);

#endif
