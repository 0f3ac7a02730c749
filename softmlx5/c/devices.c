/* Profiles, devices, ports and GID tables, contexts, and the queries that read them. */
#include "softmlx5.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/mlx5dv.h>

/* rdma-core v58's flag (mlx5dv.h), newer than the headers built against. */
#ifndef MLX5DV_CONTEXT_FLAGS_BLUEFLAME
#define MLX5DV_CONTEXT_FLAGS_BLUEFLAME (1 << 8)
#endif

/* The capabilities each profile answers with. The DCI streams limits are those mlx5_ib reports
 * (mlx5_ib_query_device → dci_streams_caps from log_max_dci_stream_channels and
 * log_max_dci_errored_streams): none before ConnectX-6 Dx. The send WQE sizes are QUERY_HCA_CAP's
 * max_wqe_sz_sq and max_wqe_sz_sq_dc. */
static const struct soft_profile profiles[] = {
	{ .name = "cx5", .vendor_part_id = 4119, .max_wqe_sz_sq = 1024, .max_wqe_sz_sq_dc = 1024 },
	{ .name = "cx6", .vendor_part_id = 4123, .max_wqe_sz_sq = 1024, .max_wqe_sz_sq_dc = 1024 },
	{ .name = "cx6dx", .vendor_part_id = 4125, .dci_streams_log_concurrent = 4,
	  .dci_streams_log_errored = 3, .max_wqe_sz_sq = 1024, .max_wqe_sz_sq_dc = 512 },
	{ .name = "cx7", .vendor_part_id = 4129, .dci_streams_log_concurrent = 4,
	  .dci_streams_log_errored = 3, .max_wqe_sz_sq = 1024, .max_wqe_sz_sq_dc = 512 },
};

#define MAX_DEVICES 4
static struct soft_device devices[MAX_DEVICES];
static int device_count = -1;
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static void fill_port(struct soft_device *dev, bool ethernet)
{
	struct soft_port *port = &dev->port;
	int i;

	port->ethernet = ethernet;
	port->active_mtu = IBV_MTU_1024;
	port->lid = ethernet ? 0 : (uint16_t)(1 + dev->index);
	port->grh_required = getenv("SOFTMLX5_GRH_REQUIRED") != NULL && !ethernet;
	if (!ethernet) {
		/* InfiniBand: GID 0 is the subnet prefix and the port GUID (ib_query_gid). */
		struct soft_gid *gid = &port->gids[0];

		gid->raw[0] = 0xfe;
		gid->raw[1] = 0x80;
		for (i = 0; i < 8; i++)
			gid->raw[8 + i] = (uint8_t)(dev->node_guid >> (56 - 8 * i));
		gid->type = IBV_GID_TYPE_IB;
		gid->valid = true;
		return;
	}
	/* RoCE: as mlx5_ib fills it for a netdev with an IPv4 address (roce_gid_mgmt.c): the
	 * link-local GID as RoCE v1 and v2, then the IPv4-mapped GID as v1 and v2. */
	for (i = 0; i < 4; i++) {
		struct soft_gid *gid = &port->gids[i];

		if (i < 2) {
			int b;

			gid->raw[0] = 0xfe;
			gid->raw[1] = 0x80;
			for (b = 0; b < 8; b++)
				gid->raw[8 + b] = (uint8_t)(dev->node_guid >> (56 - 8 * b));
		} else {
			gid->raw[10] = 0xff;
			gid->raw[11] = 0xff;
			gid->raw[12] = 10;
			gid->raw[13] = 77;
			gid->raw[14] = 0;
			gid->raw[15] = (uint8_t)(1 + dev->index);
		}
		gid->type = (i % 2) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
		snprintf(gid->netdev, sizeof(gid->netdev), "softeth%d", dev->index);
		gid->valid = true;
	}
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
 * no-dynamic-uar, comma-separated). */
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
		dev->node_guid = 0x5f5f6d6c78350000ULL | (uint64_t)i; /* "__mlx5" */
		dev->mdev.page_size = 4096;
		ibdev->node_type = IBV_NODE_CA;
		ibdev->transport_type = IBV_TRANSPORT_IB;
		snprintf(ibdev->name, sizeof(ibdev->name), "softmlx5_%d", i);
		snprintf(ibdev->dev_name, sizeof(ibdev->dev_name), "uverbs%d", 90 + i);
		snprintf(ibdev->dev_path, sizeof(ibdev->dev_path),
			 "/sys/class/infiniband_verbs/uverbs%d", 90 + i);
		snprintf(ibdev->ibdev_path, sizeof(ibdev->ibdev_path),
			 "/sys/class/infiniband/softmlx5_%d", i);
		fill_port(dev, !(link && !strcmp(link, "ib")));
	}
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

/* libmlx5's context as mlx5_init_context leaves it, for what qp.c, cq.c and srq.c read. */
static void init_mlx5_context(struct soft_context *ctx, struct soft_device *dev)
{
	struct mlx5_context *mctx = &ctx->mctx;
	int i;

	mctx->prefer_bf = 1;		/* get_always_bf(): MLX5_POST_SEND_PREFER_BF unset */
	mctx->shut_up_bf = getenv("MLX5_SHUT_UP_BF") && !dev->profile.no_dynamic_uar &&
			   strcmp(getenv("MLX5_SHUT_UP_BF"), "0");
	mctx->cqe_version = 1;		/* MLX5_CQE_VERSION_V1, as current kernels grant */
	mctx->max_sq_desc_sz = (int)dev->profile.max_wqe_sz_sq;
	mctx->max_rq_desc_sz = 512;
	mctx->max_send_wqebb = 1 << 15;
	mctx->max_recv_wr = 1 << 15;
	mctx->max_srq_recv_wr = 1 << 15;
	mctx->num_ports = 1;
	mctx->cache_line_size = 64;
	mctx->bf_reg_size = 512;
	mctx->dbg_fp = NULL;
	mctx->cached_link_layer[0] = dev->port.ethernet ? IBV_LINK_LAYER_ETHERNET
							: IBV_LINK_LAYER_INFINIBAND;
	mctx->cached_port_flags[0] = dev->port.grh_required ? IBV_QPF_GRH_REQUIRED : 0;
	mctx->atomic_cap = IBV_ATOMIC_HCA;
	mctx->dci_streams_caps.max_log_num_concurent = dev->profile.dci_streams_log_concurrent;
	mctx->dci_streams_caps.max_log_num_errored = dev->profile.dci_streams_log_errored;
	mctx->max_dc_rd_atom = 16;
	mctx->max_dc_init_rd_atom = 16;
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
	/* Doorbell registers: a UAR page of 8 BlueFlame registers (each two halves of
	 * bf_reg_size), as mlx5_map_uar pages give; register 0 is the shared one. */
	ctx->uar_page = soft_zalloc_aligned(4096);
	ctx->bfs = calloc(8, sizeof(*ctx->bfs));
	if (pipe2(ctx->async_fd, O_CLOEXEC) || !ctx->bfs) {
		free(ctx);
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < 8; i++) {
		ctx->bfs[i].reg = (char *)ctx->uar_page + 0x800 + (i / 2) * 0x200 +
				  (i % 2) * 0x100;
		ctx->bfs[i].buf_size = 256;
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
	soft_engine_start();
	return context;
}

SOFT_EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct soft_context *ctx = container_of(context, struct soft_context, mctx.ibv_ctx.context);

	close(ctx->async_fd[0]);
	close(ctx->async_fd[1]);
	close(context->cmd_fd);
	/* The registers stay mapped: a BlueFlame write racing the close stays harmless. */
	free(ctx);
	return 0;
}

/* ---- device queries ---- */

static void fill_device_attr(struct soft_device *dev, struct ibv_device_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "softmlx5 %s (software)", dev->profile.name);
	attr->node_guid = htobe64(dev->node_guid);
	attr->sys_image_guid = htobe64(dev->node_guid);
	attr->max_mr_size = UINT64_MAX;
	attr->page_size_cap = 0xfffff000;
	attr->vendor_id = 0x02c9;
	attr->vendor_part_id = dev->profile.vendor_part_id;
	attr->hw_ver = 0;
	attr->max_qp = 1 << 16;
	attr->max_qp_wr = 1 << 15;
	attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
				 IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID;
	attr->max_sge = 30;
	attr->max_sge_rd = 30;
	attr->max_cq = 1 << 16;
	attr->max_cqe = (1 << 22) - 1;
	attr->max_mr = 1 << 16;
	attr->max_pd = 1 << 16;
	attr->max_qp_rd_atom = 16;
	attr->max_qp_init_rd_atom = 16;
	attr->max_res_rd_atom = 1 << 20;
	attr->atomic_cap = IBV_ATOMIC_HCA;
	attr->max_srq = 1 << 16;
	attr->max_srq_wr = (1 << 15) - 1;
	attr->max_srq_sge = 31;
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

#undef ibv_query_port
SOFT_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			       struct _compat_ibv_port_attr *compat)
{
	struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;
	struct soft_device *dev = soft_device_of(context);
	struct soft_port *port = &dev->port;

	if (port_num != 1)
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->state = port->down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
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
	attr->phys_state = port->down ? 3 : 5;
	attr->link_layer = port->ethernet ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
	attr->flags = port->grh_required ? IBV_QPF_GRH_REQUIRED : 0;
	return 0;
}

SOFT_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
			      union ibv_gid *gid)
{
	struct soft_port *port = &soft_device_of(context)->port;

	if (port_num != 1 || index < 0 || index >= SOFT_GID_TABLE_LEN)
		return -1;
	memcpy(gid->raw, port->gids[index].raw, 16);
	return 0;
}

SOFT_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
				   unsigned int index, enum ibv_gid_type_sysfs *type)
{
	struct soft_port *port = &soft_device_of(context)->port;

	if (port_num != 1 || index >= SOFT_GID_TABLE_LEN || !port->gids[index].valid) {
		errno = ENODATA;
		return -1;
	}
	*type = port->gids[index].type == IBV_GID_TYPE_ROCE_V2 ? IBV_GID_TYPE_SYSFS_ROCE_V2
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
	entry->ndev_ifindex = gid->netdev[0] ? 1000 + (uint32_t)dev->index : 0;
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

/* mlx5.c: mlx5dv_query_device; what the kernel reports for the profile. */
SOFT_EXPORT int mlx5dv_query_device(struct ibv_context *context, struct mlx5dv_context *attrs)
{
	struct soft_device *dev = soft_device_of(context);
	struct mlx5_context *mctx = to_mctx(context);
	uint64_t comp_mask_out = 0;

	attrs->version = 0;
	attrs->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1 | MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED |
		       MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW | MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP |
		       MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD | MLX5DV_CONTEXT_FLAGS_BLUEFLAME;
	if (attrs->comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS) {
		attrs->dci_streams_caps = mctx->dci_streams_caps;
		comp_mask_out |= MLX5DV_CONTEXT_MASK_DCI_STREAMS;
	}
	if (attrs->comp_mask & MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM) {
		attrs->max_dc_rd_atom = mctx->max_dc_rd_atom;
		attrs->max_dc_init_rd_atom = mctx->max_dc_init_rd_atom;
		comp_mask_out |= MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM;
	}
	(void)dev;
	attrs->comp_mask = comp_mask_out;
	return 0;
}

/* The general device command interface, for what DC's users ask of it: QUERY_HCA_CAP of the
 * current general capabilities (the PRM's query_hca_cap_out and cmd_hca_cap layouts). */
SOFT_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen,
					void *out, size_t outlen)
{
	struct soft_device *dev = soft_device_of(context);
	const uint8_t *input = in;
	uint8_t *output = out;
	uint16_t opcode, op_mod;

	if (inlen < 16 || outlen < 16 + 0x300 / 8) {
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
	output[16 + 0x290 / 8] = (uint8_t)(dev->profile.max_wqe_sz_sq >> 8);
	output[16 + 0x290 / 8 + 1] = (uint8_t)dev->profile.max_wqe_sz_sq;
	output[16 + 0x2d0 / 8] = (uint8_t)(dev->profile.max_wqe_sz_sq_dc >> 8);
	output[16 + 0x2d0 / 8 + 1] = (uint8_t)dev->profile.max_wqe_sz_sq_dc;
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
	return state == IBV_PORT_ACTIVE ? "PORT_ACTIVE" : "PORT_DOWN";
}

SOFT_EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
	(void)event;
	return "softmlx5 event";
}

SOFT_EXPORT int ibv_fork_init(void)
{
	return 0;
}

SOFT_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}
