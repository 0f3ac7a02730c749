/* Control for tests: faults, and what the device did. */
#include "softmlx5.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The name a program can check it runs on the software device with. */
SOFT_EXPORT const char *softmlx5_version(void)
{
	return "softmlx5 0.1 (software ConnectX, rdma-core 55 libmlx5 in the loop)";
}

struct soft_counters soft_counters;

static void print_counters(void)
{
	struct soft_counters *c = &soft_counters;

	fprintf(stderr,
		"softmlx5[%d]: requests %lu, retransmits after timeout %lu, after RNR %lu, "
		"packets lost %lu, received %lu, RNR NAKs %lu, dropped out of sequence %lu, "
		"wrong DC key %lu, no target %lu, CQEs %lu\n",
		(int)getpid(), c->requests_sent, c->retransmits_timeout, c->retransmits_rnr,
		c->packets_lost, c->packets_received, c->rnr_naks, c->dropped_out_of_sequence,
		c->dropped_dc_key, c->dropped_no_target, c->cqes);
}

__attribute__((constructor)) static void counters_at_exit(void)
{
	if (getenv("SOFTMLX5_STATS"))
		atexit(print_counters);
}
