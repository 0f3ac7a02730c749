/* Control for tests: faults, and what the device did. */
#include "softmlx5.h"

/* The name a program can check it runs on the software device with. */
SOFT_EXPORT const char *softmlx5_version(void)
{
	return "softmlx5 0.1 (software ConnectX, rdma-core 55 libmlx5 in the loop)";
}
