/* Profiles, devices, ports and GID tables, contexts, and the queries that read them. */
#define _GNU_SOURCE /* pipe2 */
#include "softmlx5.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/mlx5dv.h>

/* rdma-core v58's flag (mlx5dv.h), newer than the headers built against. */
#ifndef MLX5DV_CONTEXT_FLAGS_BLUEFLAME
#define MLX5DV_CONTEXT_FLAGS_BLUEFLAME (1 << 8)
#endif

/* The kernel's include/linux/mlx5/driver.h: the dynamic BlueFlame registers a user context gets
 * on a kernel without dynamic UAR (calc_dynamic_bfregs, 4 KiB pages). */
#define MLX5_MAX_DYN_BFREGS 1024
/* log_bf_reg_size: a BlueFlame register of 512 bytes, two halves of 256. */
#define LOG_BF_REG_SIZE 9

/* The capabilities each profile answers with, as the PRM's cmd_hca_cap fields; every query
 * derives from them as mlx5_ib and libmlx5 do (see fill_device_attr, init_mlx5_context,
 * mlx5dv_query_device, mlx5dv_devx_general_cmd).
 *
 * - vendor_part_id: the PCI device id, rdma-core providers/mlx5/mlx5.c hca_table (0x1017
 *   ConnectX-5, 0x101b ConnectX-6, 0x101d ConnectX-6 Dx, 0x1021 ConnectX-7); mlx5_ib reports
 *   pdev->device (mlx5_ib_query_device).
 * - DCI streams (log_max_dci_stream_channels, log_max_dci_errored_streams, the kernel's
 *   mlx5_ifc.h): none on ConnectX-5 and ConnectX-6, whose mlx5dv_query_device reports zeros
 *   (libmlx5 _mlx5dv_query_device copies what mlx5_ib_query_device put in dci_streams_caps) and
 *   whose kernel refuses a DCI with streams (qp.c process_vendor_flag: EINVAL); present from
 *   ConnectX-6 Dx on. The sizes given to ConnectX-6 Dx and -7 (16 streams, 8 errored) are no
 *   source's: no public source read gives a device's value. qpc_extension (which
 *   mlx5dv_dci_stream_id_reset needs) goes with streams here, likewise unsourced.
 * - The counts (log_max_qp, ..., log_max_pd) and read/atomic depths (log_max_ra_*: 16 each)
 *   are the software device's, not read from a ConnectX: no source read gives them. The same
 *   on every profile.
 * - max_wqe_sz_sq, max_wqe_sz_rq (512: max_srq_sge 31, mlx5_ib max_rq_sg - 1) and
 *   max_wqe_sz_sq_dc: no source read gives a device's value; max_sge is 30 whatever
 *   max_wqe_sz_sq is above 512 (mlx5_ib caps it at 512). ConnectX-6 Dx and -7 are given a DC
 *   limit below max_wqe_sz_sq, so that a profile reports a DC limit of its own (sideway-ext's
 *   query_send_wqe_sizes); which ConnectX has one is unknown. */
#define COUNTS                                                                                   \
	.log_max_qp = 16, .log_max_qp_sz = 15, .log_max_srq = 16, .log_max_srq_sz = 15,          \
	.log_max_cq = 16, .log_max_cq_sz = 22, .log_max_mkey = 16, .log_max_pd = 16,             \
	.log_max_ra_req_qp = 4, .log_max_ra_res_qp = 4, .log_max_ra_req_dc = 4,                  \
	.log_max_ra_res_dc = 4, .max_wqe_sz_sq = 1024, .max_wqe_sz_rq = 512
static const struct soft_profile profiles[] = {
	{ .name = "cx5", .part = "ConnectX-5", .vendor_part_id = 0x1017, COUNTS,
	  .max_wqe_sz_sq_dc = 1024 },
	{ .name = "cx6", .part = "ConnectX-6", .vendor_part_id = 0x101b, COUNTS,
	  .max_wqe_sz_sq_dc = 1024 },
	{ .name = "cx6dx", .part = "ConnectX-6 Dx", .vendor_part_id = 0x101d, COUNTS,
	  .log_max_dci_stream_channels = 4, .log_max_dci_errored_streams = 3,
	  .qpc_extension = true, .max_wqe_sz_sq_dc = 512 },
	{ .name = "cx7", .part = "ConnectX-7", .vendor_part_id = 0x1021, COUNTS,
	  .log_max_dci_stream_channels = 4, .log_max_dci_errored_streams = 3,
	  .qpc_extension = true, .max_wqe_sz_sq_dc = 512 },
};

#define MAX_DEVICES 4
static struct soft_device devices[MAX_DEVICES];
static int device_count = -1;
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
/* Guards each device's list of open contexts. */
static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- GID tables ---- */

/* What SOFTMLX5_GIDS and SOFTMLX5_NETDEV ask of a RoCE port's GID table. */
struct gid_plan {
	bool ipv4, ipv6, vlan;
	char netdev[16], vlan_netdev[16];
};

/* Adds `raw` of `netdev` to the table as RoCE v1 then v2, as mlx5_ib's ports have every address
 * (roce_gid_mgmt.c adds one entry per GID type the port supports). */
static void add_roce_gid(struct soft_port *port, int *next, const uint8_t raw[16],
			 const char *netdev)
{
	int v;

	for (v = 0; v < 2 && *next < SOFT_GID_TABLE_LEN; v++) {
		struct soft_gid *gid = &port->gids[(*next)++];

		memcpy(gid->raw, raw, 16);
		gid->type = v ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
		snprintf(gid->netdev, sizeof(gid->netdev), "%s", netdev);
		gid->ifindex = if_nametoindex(netdev);
		gid->valid = true;
	}
}

/* fe80::<the node GUID>: the link-local address (as an EUI-64 interface id). */
static void link_local(uint8_t raw[16], uint64_t guid)
{
	int b;

	memset(raw, 0, 16);
	raw[0] = 0xfe;
	raw[1] = 0x80;
	for (b = 0; b < 8; b++)
		raw[8 + b] = (uint8_t)(guid >> (56 - 8 * b));
}

/* ::ffff:10.77.<subnet>.<host> */
static void ipv4_mapped(uint8_t raw[16], uint8_t subnet, uint8_t host)
{
	memset(raw, 0, 16);
	raw[10] = raw[11] = 0xff;
	raw[12] = 10;
	raw[13] = 77;
	raw[14] = subnet;
	raw[15] = host;
}

/* 2001:db8:77:<subnet>::<host>, a global (not link-local) IPv6 address of the documentation
 * prefix. */
static void global_ipv6(uint8_t raw[16], uint16_t subnet, uint8_t host)
{
	static const uint8_t prefix[6] = { 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x77 };

	memset(raw, 0, 16);
	memcpy(raw, prefix, sizeof(prefix));
	raw[6] = (uint8_t)(subnet >> 8);
	raw[7] = (uint8_t)subnet;
	raw[15] = host;
}

/* A RoCE port's table as mlx5_ib fills it (drivers/infiniband/core/roce_gid_mgmt.c): the
 * default GIDs first (the link-local address of the port's network device, indexes 0 and 1),
 * then each network device's addresses, IPv4 before IPv6 (_add_netdev_ips), the port's device
 * before its VLAN device (which has a link-local address of its own, listed after its global
 * ones, as IPv6 lists addresses by scope). */
static void fill_roce_gids(struct soft_device *dev, const struct gid_plan *plan)
{
	struct soft_port *port = &dev->port;
	uint8_t host = (uint8_t)(1 + dev->index), raw[16];
	int next = 0;

	link_local(raw, dev->node_guid);
	add_roce_gid(port, &next, raw, plan->netdev);
	if (plan->ipv4) {
		ipv4_mapped(raw, 0, host);
		add_roce_gid(port, &next, raw, plan->netdev);
	}
	if (plan->ipv6) {
		global_ipv6(raw, 0, host);
		add_roce_gid(port, &next, raw, plan->netdev);
	}
	if (!plan->vlan)
		return;
	if (plan->ipv4) {
		ipv4_mapped(raw, 100, host);
		add_roce_gid(port, &next, raw, plan->vlan_netdev);
	}
	if (plan->ipv6) {
		global_ipv6(raw, 0x100, host);
		add_roce_gid(port, &next, raw, plan->vlan_netdev);
	}
	link_local(raw, dev->node_guid);
	add_roce_gid(port, &next, raw, plan->vlan_netdev);
}

/* SOFTMLX5_GIDS: a comma list of ipv4 (an IPv4 address, ::ffff:10.77.0.N+1), ipv6 (a global
 * IPv6 address, 2001:db8:77::N+1) and vlan (a VLAN device, VLAN 100, with the same kinds of
 * address on subnet 100); the link-local address is always there. Default: ipv4.
 * SOFTMLX5_NETDEV: the port's network device, and after a comma its VLAN device's (defaults
 * softethN and <device>.100); a name this host has gives the GIDs its interface index, as
 * rxe's port is bound to a network device of the host. */
static void plan_gids(struct gid_plan *plan, int index)
{
	const char *gids = getenv("SOFTMLX5_GIDS");
	const char *netdev = getenv("SOFTMLX5_NETDEV");
	const char *comma;

	if (!gids)
		gids = "ipv4";
	plan->ipv4 = strstr(gids, "ipv4") != NULL;
	plan->ipv6 = strstr(gids, "ipv6") != NULL;
	plan->vlan = strstr(gids, "vlan") != NULL;
	if (!netdev || !*netdev) {
		snprintf(plan->netdev, sizeof(plan->netdev), "softeth%d", index);
		snprintf(plan->vlan_netdev, sizeof(plan->vlan_netdev), "softeth%d.100", index);
		return;
	}
	comma = strchr(netdev, ',');
	snprintf(plan->netdev, sizeof(plan->netdev), "%.*s",
		 (int)(comma ? (size_t)(comma - netdev) : strlen(netdev)), netdev);
	if (comma && comma[1])
		snprintf(plan->vlan_netdev, sizeof(plan->vlan_netdev), "%s", comma + 1);
	else
		snprintf(plan->vlan_netdev, sizeof(plan->vlan_netdev), "%.11s.100", plan->netdev);
}

static void fill_port(struct soft_device *dev, bool ethernet)
{
	struct soft_port *port = &dev->port;
	struct gid_plan plan;

	port->ethernet = ethernet;
	/* RoCE: the largest IB MTU within the network device's 1500 bytes less the RoCE headers
	 * (ib_addr.h iboe_get_mtu); InfiniBand: the same, as the subnet manager set it. */
	port->active_mtu = IBV_MTU_1024;
	port->lid = ethernet ? 0 : (uint16_t)(1 + dev->index);
	port->grh_required = getenv("SOFTMLX5_GRH_REQUIRED") != NULL && !ethernet;
	if (!ethernet) {
		/* InfiniBand: GID 0 is the subnet prefix and the port GUID (ib_query_gid). */
		link_local(port->gids[0].raw, dev->node_guid);
		port->gids[0].type = IBV_GID_TYPE_IB;
		port->gids[0].valid = true;
		return;
	}
	plan_gids(&plan, dev->index);
	fill_roce_gids(dev, &plan);
}

static void flag_stack(struct soft_profile *profile, const char *stack)
{
	if (!stack)
		return;
	if (strstr(stack, "no-query-gid-ex"))
		profile->no_query_gid_ex = true;
	if (strstr(stack, "no-dci-reset"))
		profile->no_dci_reset = true;
	if (strstr(stack, "no-dynamic-uar"))
		profile->no_dynamic_uar = true;
}

/* SOFTMLX5_DEVICES (1 to 4, default 1), SOFTMLX5_PROFILE (cx5, cx6, cx6dx, cx7; default cx6dx),
 * SOFTMLX5_LINK (roce or ib; default roce), SOFTMLX5_STACK (no-query-gid-ex, no-dci-reset,
 * no-dynamic-uar, comma-separated), SOFTMLX5_GIDS and SOFTMLX5_NETDEV (plan_gids),
 * SOFTMLX5_GRH_REQUIRED (an InfiniBand port that requires a GRH), SOFTMLX5_ATOMICS (none: a
 * device without atomics, atomic_cap IBV_ATOMIC_NONE; no-dc: atomics, but not on DC, which the
 * kernel's mlx5_ib_modify_dct refuses with EOPNOTSUPP: get_atomic_mode fails). */
static void make_devices(void)
{
	const char *count = getenv("SOFTMLX5_DEVICES");
	const char *profile = getenv("SOFTMLX5_PROFILE");
	const char *link = getenv("SOFTMLX5_LINK");
	size_t p;
	int i;

	device_count = count ? atoi(count) : 1;
	if (device_count < 0 || device_count > MAX_DEVICES)
		device_count = 1;
	for (i = 0; i < device_count; i++) {
		struct soft_device *dev = &devices[i];
		struct ibv_device *ibdev = &dev->mdev.verbs_dev.device;

		dev->index = i;
		dev->profile = profiles[2];
		for (p = 0; profile && p < sizeof(profiles) / sizeof(profiles[0]); p++)
			if (!strcmp(profile, profiles[p].name))
				dev->profile = profiles[p];
		flag_stack(&dev->profile, getenv("SOFTMLX5_STACK"));
		if (getenv("SOFTMLX5_ATOMICS")) {
			dev->profile.no_atomics = !strcmp(getenv("SOFTMLX5_ATOMICS"), "none");
			dev->profile.no_dc_atomics = dev->profile.no_atomics ||
						     !strcmp(getenv("SOFTMLX5_ATOMICS"), "no-dc");
		}
		dev->node_guid = 0x5f5f6d6c78350000ULL | (uint64_t)i; /* "__mlx5" */
		dev->mdev.page_size = 4096;
		ibdev->node_type = IBV_NODE_CA;
		ibdev->transport_type = IBV_TRANSPORT_IB;
		snprintf(ibdev->name, sizeof(ibdev->name), "softmlx5_%d", i);
		snprintf(ibdev->dev_name, sizeof(ibdev->dev_name), "uverbs%d", 90 + i);
		fill_port(dev, !(link && !strcmp(link, "ib")));
	}
	/* ibdev_path and dev_path: the tree sysfs.c writes */
	soft_sysfs_publish(devices, device_count);
}

static void ensure_devices(void)
{
	pthread_once(&devices_once, make_devices);
}

struct soft_device *soft_device_of(struct ibv_context *context)
{
	return container_of(context->device, struct soft_device, mdev.verbs_dev.device);
}

bool soft_port_has_gid(const struct soft_port *port, const uint8_t gid[16])
{
	int i;

	for (i = 0; i < SOFT_GID_TABLE_LEN; i++)
		if (port->gids[i].valid && !memcmp(port->gids[i].raw, gid, 16))
			return true;
	return false;
}

SOFT_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list;
	int i;

	ensure_devices();
	list = calloc(device_count + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < device_count; i++)
		list[i] = &devices[i].mdev.verbs_dev.device;
	if (num_devices)
		*num_devices = device_count;
	return list;
}

SOFT_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SOFT_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

SOFT_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(container_of(device, struct soft_device, mdev.verbs_dev.device)->node_guid);
}

/* ---- contexts ---- */

int soft_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			 struct ibv_device_attr_ex *attr, size_t attr_size);
struct ibv_cq_ex *soft_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *soft_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_td *soft_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr);
int soft_dealloc_td(struct ibv_td *td);
struct ibv_pd *soft_alloc_parent_domain(struct ibv_context *context,
					struct ibv_parent_domain_init_attr *attr);
struct ibv_srq *soft_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
int soft_req_notify_cq(struct ibv_cq *cq, int solicited);
int soft_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int soft_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* libmlx5's context as mlx5_init_context and mlx5_set_context leave it, from what the kernel
 * answers (mlx5_ib_alloc_ucontext's set_ucontext_resp, mlx5_ib_query_device) and libmlx5 reads
 * itself (get_hca_general_caps), for what qp.c, cq.c and srq.c read. */
static void init_mlx5_context(struct soft_context *ctx, struct soft_device *dev)
{
	const struct soft_profile *profile = &dev->profile;
	struct mlx5_context *mctx = &ctx->mctx;
	const char *shut_up = getenv("MLX5_SHUT_UP_BF");
	int i;

	mctx->prefer_bf = 1;		/* get_always_bf(): MLX5_POST_SEND_PREFER_BF unset */
	/* get_shut_up_bf(): on every kernel; without dynamic UAR it changes how the static
	 * registers are mapped and stops qp.c's BlueFlame copy, not which register a QP gets */
	mctx->shut_up_bf = shut_up && strcmp(shut_up, "0");
	mctx->cqe_version = 1;		/* MLX5_CQE_VERSION_V1, as current kernels grant */
	mctx->max_sq_desc_sz = profile->max_wqe_sz_sq;
	mctx->max_rq_desc_sz = profile->max_wqe_sz_rq;
	mctx->max_send_wqebb = 1 << profile->log_max_qp_sz;
	mctx->max_recv_wr = 1 << profile->log_max_qp_sz;
	mctx->max_srq_recv_wr = 1 << profile->log_max_srq_sz;
	mctx->num_ports = 1;
	mctx->cache_line_size = 64;
	mctx->bf_reg_size = 1 << LOG_BF_REG_SIZE;
	mctx->num_uars_per_page = 1;	/* uar_4k on 4 KiB pages */
	mctx->dbg_fp = NULL;
	mctx->cached_link_layer[0] = dev->port.ethernet ? IBV_LINK_LAYER_ETHERNET
							: IBV_LINK_LAYER_INFINIBAND;
	mctx->cached_port_flags[0] = dev->port.grh_required ? IBV_QPF_GRH_REQUIRED : 0;
	mctx->atomic_cap = profile->no_atomics ? IBV_ATOMIC_NONE : IBV_ATOMIC_HCA;
	mctx->dci_streams_caps.max_log_num_concurent = profile->log_max_dci_stream_channels;
	mctx->dci_streams_caps.max_log_num_errored = profile->log_max_dci_errored_streams;
	mctx->qpc_extension_cap = profile->qpc_extension;
	mctx->max_dc_rd_atom = 1 << profile->log_max_ra_req_dc;
	mctx->max_dc_init_rd_atom = 1 << profile->log_max_ra_res_dc;
	/* mlx5_set_context: a kernel without dynamic UAR answers tot_bfregs (the static
	 * registers) and num_dyn_bfregs, the registers thread domains get, page by page
	 * (mlx5_alloc_dyn_uar's legacy mode); one with it answers neither. */
	if (profile->no_dynamic_uar) {
		mctx->flags |= MLX5_CTX_FLAGS_NO_KERN_DYN_UAR;
		mctx->num_dyn_bfregs = MLX5_MAX_DYN_BFREGS;
		mctx->max_num_legacy_dyn_uar_sys_page =
			mctx->num_dyn_bfregs /
			(mctx->num_uars_per_page * MLX5_NUM_NON_FP_BFREGS_PER_UAR);
	}
	list_head_init(&mctx->dyn_uar_bf_list);
	pthread_mutex_init(&mctx->dyn_bfregs_mutex, NULL);
	pthread_mutex_init(&mctx->qp_table_mutex, NULL);
	pthread_mutex_init(&mctx->srq_table_mutex, NULL);
	pthread_mutex_init(&mctx->uidx_table_mutex, NULL);
	pthread_mutex_init(&mctx->mkey_table_mutex, NULL);
	for (i = 0; i < MLX5_MAX_UARS; i++)
		mctx->uar[i].reg = ctx->uar_page;
	mctx->cq_uar_reg = ctx->uar_page;
}

SOFT_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct soft_device *dev = container_of(device, struct soft_device, mdev.verbs_dev.device);
	struct soft_context *ctx;
	struct verbs_context *vctx;
	struct ibv_context *context;
	int i;

	if (soft_fabric_init())
		return NULL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->device = dev;
	/* Doorbell registers: 8 BlueFlame registers on 4 UAR pages, as mlx5_map_uar gives them
	 * (MLX5_NUM_NON_FP_BFREGS_PER_UAR of them a page, at MLX5_BF_OFFSET + j * bf_reg_size,
	 * each written in halves of bf_reg_size / 2); register 0 is the shared one. */
	ctx->uar_page = soft_zalloc_aligned(4 * 4096);
	ctx->bfs = calloc(8, sizeof(*ctx->bfs));
	if (pipe2(ctx->async_fd, O_CLOEXEC) || !ctx->bfs) {
		free(ctx);
		errno = ENOMEM;
		return NULL;
	}
	/* The device never waits for a reader: an event the pipe has no room for is lost. */
	fcntl(ctx->async_fd[1], F_SETFL, O_NONBLOCK);
	for (i = 0; i < 8; i++) {
		ctx->bfs[i].reg = (char *)ctx->uar_page + (i / MLX5_NUM_NON_FP_BFREGS_PER_UAR) * 4096 +
				  MLX5_BF_OFFSET + (i % MLX5_NUM_NON_FP_BFREGS_PER_UAR) * (1 << LOG_BF_REG_SIZE);
		ctx->bfs[i].buf_size = (1 << LOG_BF_REG_SIZE) / 2;
		ctx->bfs[i].uuarn = (unsigned)i;
		ctx->bfs[i].need_lock = 1;
		mlx5_spinlock_init(&ctx->bfs[i].lock, 1);
	}
	ctx->bfs[0].buf_size = 0; /* uuar 0: doorbell only, as libmlx5's shared high-latency one */
	init_mlx5_context(ctx, dev);
	ctx->mctx.bfs = ctx->bfs;

	vctx = &ctx->mctx.ibv_ctx;
	vctx->sz = sizeof(*vctx);
	vctx->query_device_ex = soft_query_device_ex;
	vctx->create_cq_ex = soft_create_cq_ex;
	vctx->create_qp_ex = soft_create_qp_ex;
	vctx->alloc_td = soft_alloc_td;
	vctx->dealloc_td = soft_dealloc_td;
	vctx->alloc_parent_domain = soft_alloc_parent_domain;
	vctx->create_srq_ex = soft_create_srq_ex;
	context = &vctx->context;
	context->device = device;
	context->cmd_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	context->async_fd = ctx->async_fd[0];
	context->num_comp_vectors = 1;
	context->abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&context->mutex, NULL);
	context->ops.poll_cq = mlx5_poll_cq_v1;
	context->ops.req_notify_cq = soft_req_notify_cq;
	context->ops.post_srq_recv = mlx5_post_srq_recv;
	context->ops.post_send = soft_post_send;
	context->ops.post_recv = soft_post_recv;
	pthread_mutex_lock(&contexts_lock);
	ctx->next_open = dev->contexts;
	dev->contexts = ctx;
	pthread_mutex_unlock(&contexts_lock);
	soft_engine_start();
	return context;
}

SOFT_EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct soft_context *ctx = container_of(context, struct soft_context, mctx.ibv_ctx.context);
	struct soft_context **link;

	pthread_mutex_lock(&contexts_lock);
	for (link = &ctx->device->contexts; *link; link = &(*link)->next_open)
		if (*link == ctx) {
			*link = ctx->next_open;
			break;
		}
	pthread_mutex_unlock(&contexts_lock);
	close(ctx->async_fd[0]);
	close(ctx->async_fd[1]);
	close(context->cmd_fd);
	/* The registers stay mapped: a BlueFlame write racing the close stays harmless. */
	free(ctx);
	return 0;
}

/* ---- device queries ---- */

/* The attributes mlx5_ib_query_device derives from the capabilities (and ib_uverbs hands on:
 * max_sge is the smaller of the send and receive limits, copy_query_dev_fields). */
static void fill_device_attr(struct soft_device *dev, struct ibv_device_attr *attr)
{
	const struct soft_profile *profile = &dev->profile;
	/* a 16-byte control and a 16-byte remote address segment, then 16 bytes an entry */
	int max_sq_sg = ((profile->max_wqe_sz_sq < 512 ? profile->max_wqe_sz_sq : 512) - 32) / 16;
	int max_rq_sg = profile->max_wqe_sz_rq / 16;

	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "softmlx5 %s (software)", profile->name);
	attr->node_guid = htobe64(dev->node_guid);
	attr->sys_image_guid = htobe64(dev->node_guid);
	attr->max_mr_size = UINT64_MAX;
	attr->page_size_cap = ~(uint64_t)(4096 - 1);	/* ~(1 << log_pg_sz - 1) */
	attr->vendor_id = 0x02c9;
	attr->vendor_part_id = profile->vendor_part_id;
	attr->hw_ver = 0;
	attr->max_qp = 1 << profile->log_max_qp;
	attr->max_qp_wr = 1 << profile->log_max_qp_sz;
	attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
				 IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID;
	attr->max_sge = max_sq_sg < max_rq_sg ? max_sq_sg : max_rq_sg;
	attr->max_sge_rd = (512 - 16 - 16) / 16;	/* MLX5_MAX_SGE_RD */
	attr->max_cq = 1 << profile->log_max_cq;
	attr->max_cqe = (1 << profile->log_max_cq_sz) - 1;
	attr->max_mr = 1 << profile->log_max_mkey;
	attr->max_pd = 1 << profile->log_max_pd;
	attr->max_qp_rd_atom = 1 << profile->log_max_ra_req_qp;
	attr->max_qp_init_rd_atom = 1 << profile->log_max_ra_res_qp;
	attr->max_res_rd_atom = attr->max_qp_rd_atom * attr->max_qp;
	attr->atomic_cap = profile->no_atomics ? IBV_ATOMIC_NONE : IBV_ATOMIC_HCA;
	attr->max_srq = 1 << profile->log_max_srq;
	attr->max_srq_wr = (1 << profile->log_max_srq_sz) - 1;
	attr->max_srq_sge = max_rq_sg - 1;
	attr->max_pkeys = 1;
	attr->local_ca_ack_delay = 16;
	attr->phys_port_cnt = 1;
}

SOFT_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
	fill_device_attr(soft_device_of(context), attr);
	return 0;
}

int soft_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			 struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex full = {};

	(void)input;
	fill_device_attr(soft_device_of(context), &full.orig_attr);
	full.max_dm_size = 0;
	full.raw_packet_caps = 0;
	memcpy(attr, &full, attr_size < sizeof(full) ? attr_size : sizeof(full));
	return 0;
}

void soft_port_attr(const struct soft_device *dev, struct ibv_port_attr *attr)
{
	const struct soft_port *port = &dev->port;
	bool down;

	pthread_mutex_lock(&soft_lock);
	down = port->down;
	pthread_mutex_unlock(&soft_lock);
	memset(attr, 0, sizeof(*attr));
	attr->state = down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = port->active_mtu;
	attr->gid_tbl_len = SOFT_GID_TABLE_LEN;
	attr->port_cap_flags = port->ethernet ? IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS
					      : IBV_PORT_CM_SUP;
	attr->max_msg_sz = 1 << 30;
	attr->pkey_tbl_len = 1;
	attr->lid = port->lid;
	attr->sm_lid = port->ethernet ? 0 : 1;
	attr->lmc = 0;
	attr->max_vl_num = 4;
	attr->active_width = 2;		/* 4x */
	attr->active_speed = 32;	/* HDR */
	attr->phys_state = down ? 3 : 5;	/* Disabled, LinkUp */
	attr->link_layer = port->ethernet ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
	attr->flags = port->grh_required ? IBV_QPF_GRH_REQUIRED : 0;
}

#undef ibv_query_port
SOFT_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			       struct _compat_ibv_port_attr *compat)
{
	if (port_num != 1)
		return EINVAL;
	soft_port_attr(soft_device_of(context), (struct ibv_port_attr *)compat);
	return 0;
}

SOFT_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
			      union ibv_gid *gid)
{
	struct soft_port *port = &soft_device_of(context)->port;

	if (port_num != 1 || index < 0 || index >= SOFT_GID_TABLE_LEN)
		return -1;
	/* an empty slot reads as zeros, with success (libibverbs ibv_query_gid) */
	memcpy(gid->raw, port->gids[index].raw, 16);
	return 0;
}

/* libibverbs verbs.c ibv_query_gid_type: an empty slot is IB/RoCE v1, with success. */
SOFT_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
				   unsigned int index, enum ibv_gid_type_sysfs *type)
{
	struct soft_port *port = &soft_device_of(context)->port;

	if (port_num != 1 || index >= SOFT_GID_TABLE_LEN) {
		errno = EINVAL;
		return -1;
	}
	*type = port->gids[index].valid && port->gids[index].type == IBV_GID_TYPE_ROCE_V2
			? IBV_GID_TYPE_SYSFS_ROCE_V2
			: IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

static void fill_gid_entry(struct soft_device *dev, unsigned index, struct ibv_gid_entry *entry)
{
	const struct soft_gid *gid = &dev->port.gids[index];

	memset(entry, 0, sizeof(*entry));
	memcpy(entry->gid.raw, gid->raw, 16);
	entry->gid_index = index;
	entry->port_num = 1;
	entry->gid_type = gid->type;
	entry->ndev_ifindex = gid->ifindex;
}

/* libibverbs' _ibv_query_gid_ex (rdma-core 32 and later). A profile of an older rdma-core
 * answers as rdma-mummy-sys does where the symbol is missing. */
SOFT_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
				  uint32_t gid_index, struct ibv_gid_entry *entry, uint32_t flags,
				  size_t entry_size)
{
	struct soft_device *dev = soft_device_of(context);

	if (dev->profile.no_query_gid_ex)
		return EOPNOTSUPP;
	if (flags || entry_size < sizeof(*entry))
		return EINVAL;
	if (port_num != 1 || gid_index >= SOFT_GID_TABLE_LEN)
		return EINVAL;
	if (!dev->port.gids[gid_index].valid)
		return ENODATA;
	fill_gid_entry(dev, gid_index, entry);
	return 0;
}

SOFT_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
					 struct ibv_gid_entry *entries, size_t max_entries,
					 uint32_t flags, size_t entry_size)
{
	struct soft_device *dev = soft_device_of(context);
	size_t n = 0;
	unsigned i;

	if (dev->profile.no_query_gid_ex)
		return -EOPNOTSUPP;
	if (flags || entry_size < sizeof(*entries))
		return -EINVAL;
	for (i = 0; i < SOFT_GID_TABLE_LEN && n < max_entries; i++)
		if (dev->port.gids[i].valid)
			fill_gid_entry(dev, i, &entries[n++]);
	return (ssize_t)n;
}

SOFT_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
			       __be16 *pkey)
{
	(void)context;
	if (port_num != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

/* ---- mlx5 direct verbs queries ---- */

SOFT_EXPORT bool mlx5dv_is_supported(struct ibv_device *device)
{
	(void)device;
	return true;
}

/* mlx5.c: _mlx5dv_query_device, from the context as init_mlx5_context left it. */
SOFT_EXPORT int mlx5dv_query_device(struct ibv_context *context, struct mlx5dv_context *attrs)
{
	struct mlx5_context *mctx = to_mctx(context);
	uint64_t comp_mask_out = 0;

	soft_counters.mlx5_device_queries++;
	attrs->version = 0;
	attrs->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1 | MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED |
		       MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW | MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP |
		       MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD | MLX5DV_CONTEXT_FLAGS_BLUEFLAME;
	if (attrs->comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS) {
		attrs->dci_streams_caps = mctx->dci_streams_caps;
		comp_mask_out |= MLX5DV_CONTEXT_MASK_DCI_STREAMS;
	}
	if (attrs->comp_mask & MLX5DV_CONTEXT_MASK_DYN_BFREGS) {
		attrs->max_dynamic_bfregs = mctx->num_dyn_bfregs;
		comp_mask_out |= MLX5DV_CONTEXT_MASK_DYN_BFREGS;
	}
	if (attrs->comp_mask & MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM) {
		attrs->max_dc_rd_atom = mctx->max_dc_rd_atom;
		attrs->max_dc_init_rd_atom = mctx->max_dc_init_rd_atom;
		comp_mask_out |= MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM;
	}
	attrs->comp_mask = comp_mask_out;
	return 0;
}

/* Sets `value` in the `width` bits at bit `offset` of a PRM layout (big-endian 32-bit words,
 * the first field at the most significant bit: mlx5_ifc.h's DEVX_SET). */
static void prm_set(uint8_t *layout, unsigned offset, unsigned width, uint32_t value)
{
	uint8_t *at = layout + offset / 32 * 4;
	unsigned shift = 32 - offset % 32 - width;
	uint32_t mask = (width == 32 ? UINT32_MAX : (1u << width) - 1) << shift;
	uint32_t word;

	memcpy(&word, at, 4);
	word = (be32toh(word) & ~mask) | ((value << shift) & mask);
	word = htobe32(word);
	memcpy(at, &word, 4);
}

/* QUERY_HCA_CAP of the general device capabilities: cmd_hca_cap (the PRM; bit offsets as the
 * kernel's include/linux/mlx5/mlx5_ifc.h and libmlx5's providers/mlx5/mlx5_ifc.h place them)
 * with the profile's values, which every other query derives from. */
static void fill_cmd_hca_cap(const struct soft_device *dev, uint8_t *cap)
{
	const struct soft_profile *profile = &dev->profile;

	prm_set(cap, 0x80, 8, profile->log_max_srq_sz);
	prm_set(cap, 0x88, 8, profile->log_max_qp_sz);
	prm_set(cap, 0x9b, 5, profile->log_max_qp);
	prm_set(cap, 0xab, 5, profile->log_max_srq);
	prm_set(cap, 0xc8, 8, profile->log_max_cq_sz);
	prm_set(cap, 0xdb, 5, profile->log_max_cq);
	prm_set(cap, 0xea, 6, profile->log_max_mkey);
	prm_set(cap, 0x122, 1, profile->qpc_extension);
	prm_set(cap, 0x12a, 6, profile->log_max_ra_req_dc);
	prm_set(cap, 0x13a, 6, profile->log_max_ra_res_dc);
	prm_set(cap, 0x14a, 6, profile->log_max_ra_req_qp);
	prm_set(cap, 0x15a, 6, profile->log_max_ra_res_qp);
	prm_set(cap, 0x1b6, 2, dev->port.ethernet ? 1 : 0);	/* port_type: 1 Ethernet, 0 IB */
	prm_set(cap, 0x1b8, 8, 1);				/* num_ports */
	prm_set(cap, 0x1fc, 4, 1);				/* cqe_version */
	prm_set(cap, 0x21a, 1, 1);				/* dct */
	prm_set(cap, 0x21e, 1, !profile->no_atomics);		/* atomic */
	prm_set(cap, 0x240, 1, 1);				/* uar_4k */
	prm_set(cap, 0x258, 8, 12);				/* log_pg_sz */
	prm_set(cap, 0x260, 1, 1);				/* bf */
	prm_set(cap, 0x26b, 5, LOG_BF_REG_SIZE);
	prm_set(cap, 0x290, 16, profile->max_wqe_sz_sq);
	prm_set(cap, 0x2b0, 16, profile->max_wqe_sz_rq);
	prm_set(cap, 0x2d0, 16, profile->max_wqe_sz_sq_dc);
	prm_set(cap, 0x32b, 5, profile->log_max_pd);
	prm_set(cap, 0x520, 32, 1);				/* num_of_uars_per_page */
	prm_set(cap, 0x58b, 5, profile->log_max_dci_stream_channels);
	prm_set(cap, 0x593, 5, profile->log_max_dci_errored_streams);
}

/* The general device command interface, for what DC's users ask of it: QUERY_HCA_CAP of the
 * general capabilities, current or maximal (the PRM's query_hca_cap_out: a 16-byte header,
 * then cmd_hca_cap, 256 bytes). Anything else is the firmware's BAD_OP. */
SOFT_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
					void *out, size_t outlen)
{
	struct soft_device *dev = soft_device_of(context);
	const uint8_t *input = in;
	uint8_t *output = out;
	uint16_t opcode, op_mod;

	if (inlen < 16 || outlen < 16 + 0x800 / 8) {
		errno = EINVAL;
		return EINVAL;
	}
	opcode = (uint16_t)(input[0] << 8 | input[1]);
	op_mod = (uint16_t)(input[6] << 8 | input[7]);
	memset(output, 0, outlen);
	if (opcode != 0x100 || (op_mod >> 1) != 0) {
		output[0] = 0x02; /* BAD_OP */
		errno = EREMOTEIO;
		return EREMOTEIO;
	}
	fill_cmd_hca_cap(dev, output + 16);
	return 0;
}

/* ---- ports ---- */

/* Takes port 1 of `device_name` down (up 0) or up: ibv_query_port and the sysfs tree say so,
 * every open context of the device gets IBV_EVENT_PORT_ERR or IBV_EVENT_PORT_ACTIVE (as
 * mlx5_ib dispatches a port change: handle_port_change, and mlx5_netdev_event on RoCE), and the
 * engine neither delivers to nor sends from a port that is down. Per process: another process's
 * device of the same name is its own. 0, or -1 with errno ENODEV for an unknown device. */
SOFT_EXPORT int softmlx5_set_port_state(const char *device_name, int up)
{
	struct soft_device *dev = NULL;
	struct soft_context *ctx;
	bool changed;
	int i;

	ensure_devices();
	for (i = 0; i < device_count && device_name; i++)
		if (!strcmp(devices[i].mdev.verbs_dev.device.name, device_name))
			dev = &devices[i];
	if (!dev) {
		errno = ENODEV;
		return -1;
	}
	pthread_mutex_lock(&soft_lock);
	changed = dev->port.down != !up;
	dev->port.down = !up;
	pthread_mutex_unlock(&soft_lock);
	if (!changed)
		return 0;
	soft_sysfs_port_changed(dev);
	pthread_mutex_lock(&contexts_lock);
	for (ctx = dev->contexts; ctx; ctx = ctx->next_open) {
		struct ibv_async_event event = {
			.event_type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR,
			.element.port_num = 1,
		};

		soft_async_event(&ctx->mctx.ibv_ctx.context, &event);
	}
	pthread_mutex_unlock(&contexts_lock);
	soft_engine_kick();
	return 0;
}

/* ---- async events ---- */

void soft_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct soft_context *ctx = container_of(context, struct soft_context, mctx.ibv_ctx.context);
	ssize_t written = write(ctx->async_fd[1], event, sizeof(*event));

	(void)written;
}

SOFT_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	ssize_t got = read(context->async_fd, event, sizeof(*event));

	return got == (ssize_t)sizeof(*event) ? 0 : -1;
}

SOFT_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	(void)event;
}

/* ---- strings and fork ---- */

SOFT_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const names[] = {
		"success", "local length error", "local QP operation error",
		"local EE context operation error", "local protection error",
		"Work Request Flushed Error", "memory management operation error",
		"bad response error", "local access error", "remote invalid request error",
		"remote access error", "remote operation error", "transport retry counter exceeded",
		"RNR retry counter exceeded", "local RDD violation error",
		"remote invalid RD request", "aborted error", "invalid EE context number",
		"invalid EE context state", "fatal error", "response timeout error",
		"general error", "TM error", "TM rendezvous error",
	};

	if ((unsigned)status < sizeof(names) / sizeof(names[0]))
		return names[status];
	return "unknown";
}

SOFT_EXPORT const char *ibv_node_type_str(enum ibv_node_type node_type)
{
	return node_type == IBV_NODE_CA ? "InfiniBand channel adapter" : "unknown";
}

SOFT_EXPORT const char *ibv_port_state_str(enum ibv_port_state state)
{
	static const char *const names[] = { "PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
					      "PORT_ACTIVE", "PORT_ACTIVE_DEFER" };

	return (unsigned)state < sizeof(names) / sizeof(names[0]) ? names[state] : "invalid state";
}

/* libibverbs enum_strs.c's names */
SOFT_EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
	static const char *const names[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};

	if ((unsigned)event >= sizeof(names) / sizeof(names[0]) || !names[event])
		return "unknown";
	return names[event];
}

SOFT_EXPORT int ibv_fork_init(void)
{
	return 0;
}

SOFT_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}
