/* The oracle's stand-in for rdma-core's util/udma_barrier.h: each barrier macro qp.c and cq.c use
 * is recorded by name (oracle_barrier, shim.c) instead of executed, so a test sees the order of
 * barriers and MMIO stores libmlx5 issues. Found before rdma-core's own header by the include
 * path (build.rs). The names and their numbers are the oracle's Barrier enum (src/events.rs). */
#ifndef __UTIL_UDMA_BARRIER_H
#define __UTIL_UDMA_BARRIER_H

#include <pthread.h>

enum oracle_barrier_kind {
	ORACLE_TO_DEVICE = 0,
	ORACLE_FROM_DEVICE = 1,
	ORACLE_FLUSH_WRITES = 2,
	ORACLE_WC_START = 3,
	ORACLE_WC_SPINLOCK = 4,
	ORACLE_WC_SPINUNLOCK = 5,
};

void oracle_barrier(enum oracle_barrier_kind kind);

#define udma_to_device_barrier() oracle_barrier(ORACLE_TO_DEVICE)
#define udma_from_device_barrier() oracle_barrier(ORACLE_FROM_DEVICE)
#define udma_ordering_write_barrier() oracle_barrier(ORACLE_TO_DEVICE)
#define mmio_flush_writes() oracle_barrier(ORACLE_FLUSH_WRITES)
#define mmio_wc_start() oracle_barrier(ORACLE_WC_START)
#define mmio_ordered_writes_hack() oracle_barrier(ORACLE_FLUSH_WRITES)

static inline void mmio_wc_spinlock(pthread_spinlock_t *lock)
{
	pthread_spin_lock(lock);
	oracle_barrier(ORACLE_WC_SPINLOCK);
}

static inline void mmio_wc_spinunlock(pthread_spinlock_t *lock)
{
	oracle_barrier(ORACLE_WC_SPINUNLOCK);
	pthread_spin_unlock(lock);
}

#endif
