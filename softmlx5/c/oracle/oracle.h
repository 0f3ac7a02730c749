/* The oracle's C interface (src/ffi.rs mirrors it): libmlx5's DCI send path and CQ poll path
 * over plain memory, and the events its barrier and MMIO stand-ins record (record/util/). */
#ifndef ORACLE_H
#define ORACLE_H

#include <stdint.h>
#include <stddef.h>

struct ibv_qp_ex;
struct mlx5dv_qp_ex;
struct ibv_ah;
struct ibv_wc;

struct oracle_dci_shape {
	uint32_t wqe_count;
	uint32_t max_inline_data;
	uint32_t max_send_sge;
	uint32_t sq_sig_all;
	uint64_t send_ops_flags;
	uint32_t blueflame_size;
	uint32_t qp_number;
};

struct oracle_sq_view {
	void *buffer;
	uint32_t wqe_count;
	uint32_t stride;
	uint32_t *doorbell_record;
	void *blueflame;
	uint32_t blueflame_size;
	uint32_t blueflame_offset;
	uint32_t posting_index;
	uint32_t head;
	uint32_t tail;
	uint32_t max_post;
	uint32_t max_inline_data;
	uint32_t user_index;
	const uint64_t *wrid;
	const uint32_t *wqe_head;
};

struct oracle_cq_view {
	void *buffer;
	uint32_t cqe_count;
	uint32_t cqe_size;
	uint32_t *doorbell_record;
	uint32_t cq_number;
	uint32_t consumer_index;
};

struct oracle_event {
	uint32_t kind; /* 0..5: the barriers of record/util/udma_barrier.h; 6: a store */
	uint32_t len;
	uintptr_t addr;
	uint8_t bytes[8];
};

struct oracle_dci *oracle_dci_new(const struct oracle_dci_shape *shape);
void oracle_dci_free(struct oracle_dci *dci);
struct ibv_qp_ex *oracle_dci_qp_ex(struct oracle_dci *dci);
struct mlx5dv_qp_ex *oracle_dci_mlx5(struct oracle_dci *dci);
void oracle_dci_view(const struct oracle_dci *dci, struct oracle_sq_view *view);
void oracle_dci_retire_all(struct oracle_dci *dci);

struct ibv_ah *oracle_ah_new(const uint8_t av[48]);
void oracle_ah_free(struct ibv_ah *ah);
void oracle_ah_av(const struct ibv_ah *ah, uint8_t av[48]);

struct oracle_cq *oracle_cq_new(uint32_t cqe_count, uint32_t cq_number);
void oracle_cq_free(struct oracle_cq *cq);
void oracle_cq_attach(struct oracle_cq *cq, struct oracle_dci *dci);
void oracle_cq_view(const struct oracle_cq *cq, struct oracle_cq_view *view);
int oracle_cq_poll(struct oracle_cq *cq, int entries, struct ibv_wc *wc);

size_t oracle_events_len(void);
const struct oracle_event *oracle_events(void);
void oracle_events_clear(void);

#endif
