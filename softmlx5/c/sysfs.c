/* The sysfs of the process's devices: a tree laid out as the kernel's /sys (class/infiniband/<device>
 * and class/infiniband_verbs/uverbs<N>, the files ib_core's sysfs.c and mlx5_ib show), which each
 * device's ibdev_path and dev_path name. What reads sysfs instead of asking the device finds
 * there what the device answers: libibverbs without _ibv_query_gid_ex reads each GID, its type
 * and its network device from ports/1/gids, gid_attrs/types and gid_attrs/ndevs (cmd_device.c
 * query_sysfs_gid_entry), as sideway-ext's fallback does; ports/1/state follows
 * softmlx5_set_port_state. The tree is a sysfs root (SYSFS_PATH for the tools that take one).
 *
 * It is <fabric directory>/sysfs-<pid>, written once when the devices are made and removed at
 * exit; trees of processes that are gone are removed when the next one is written. The devices
 * of a process are its own (its environment picks their profile and GIDs), so each process has
 * its tree. Not modelled: the files nothing here reads (counters, hw_counters, the device
 * link), class/net (the network devices are named only), and files that fail to read (an empty
 * GID slot's type and network device, which the kernel answers EINVAL, are absent). */
#define _GNU_SOURCE /* nftw's FTW_DEPTH and FTW_PHYS */
#include "softmlx5.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[160];
static pid_t owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static void remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_own_tree(void)
{
	if (getpid() == owner && root[0])
		remove_tree(root);
}

/* Removes the trees of processes that are gone. */
static void remove_stale_trees(const char *fabric)
{
	DIR *dir = opendir(fabric);
	struct dirent *entry;
	char path[256];
	int pid;

	if (!dir)
		return;
	while ((entry = readdir(dir))) {
		if (sscanf(entry->d_name, "sysfs-%d", &pid) != 1 || pid <= 0)
			continue;
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", fabric, entry->d_name);
		remove_tree(path);
	}
	closedir(dir);
}

/* mkdir -p */
static void make_directories(const char *path)
{
	char partial[256];
	size_t i;

	snprintf(partial, sizeof(partial), "%s", path);
	for (i = 1; partial[i]; i++)
		if (partial[i] == '/') {
			partial[i] = 0;
			mkdir(partial, 0755);
			partial[i] = '/';
		}
	mkdir(partial, 0755);
}

/* Writes `dir`/`name` (its directories made), a line as sysfs shows an attribute; whole, so
 * that a reader sees the old line or the new one. */
static void put(const char *dir, const char *name, const char *format, ...)
{
	char path[256], written[272], *slash;
	va_list args;
	FILE *file;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	slash = strrchr(path, '/');
	*slash = 0;
	make_directories(path);
	*slash = '/';
	snprintf(written, sizeof(written), "%s.new", path);
	file = fopen(written, "w");
	if (!file)
		return;
	va_start(args, format);
	vfprintf(file, format, args);
	va_end(args);
	fputc('\n', file);
	if (fclose(file) == 0)
		rename(written, path);
}

static const char *gid_type_name(uint32_t type)
{
	/* ib_core cache.c ib_cache_gid_type_str */
	return type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1";
}

/* ports/1/state and phys_state, as ib_core's sysfs.c state_show and phys_state_show print them. */
static void write_port_state(const char *port_dir, const struct ibv_port_attr *attr)
{
	static const char *const states[] = { "NOP", "DOWN", "INIT", "ARMED", "ACTIVE",
					      "ACTIVE_DEFER" };
	static const char *const physical[] = { "<unknown>", "Sleep", "Polling", "Disabled",
						"PortConfigurationTraining", "LinkUp",
						"LinkErrorRecovery", "Phy Test" };

	put(port_dir, "state", "%d: %s", attr->state, states[attr->state % 6]);
	put(port_dir, "phys_state", "%d: %s", attr->phys_state, physical[attr->phys_state % 8]);
}

static void write_port(const struct soft_device *dev, const char *device_dir)
{
	const struct soft_port *port = &dev->port;
	struct ibv_port_attr attr;
	char port_dir[256], name[64];
	int i, b;

	soft_port_attr(dev, &attr);
	snprintf(port_dir, sizeof(port_dir), "%s/ports/1", device_dir);
	write_port_state(port_dir, &attr);
	put(port_dir, "lid", "0x%x", attr.lid);
	put(port_dir, "sm_lid", "0x%x", attr.sm_lid);
	put(port_dir, "lid_mask_count", "%d", attr.lmc);
	put(port_dir, "cap_mask", "0x%08x", attr.port_cap_flags);
	put(port_dir, "link_layer", "%s", port->ethernet ? "Ethernet" : "InfiniBand");
	put(port_dir, "rate", "200 Gb/sec (4X HDR)");	/* active_width 4x, active_speed HDR */
	put(port_dir, "pkeys/0", "0xffff");
	for (i = 0; i < SOFT_GID_TABLE_LEN; i++) {
		const struct soft_gid *gid = &port->gids[i];
		char text[48];
		size_t at = 0;

		/* show_port_gid: eight groups of four hexadecimal digits; an empty slot zeros */
		for (b = 0; b < 16; b += 2)
			at += (size_t)snprintf(text + at, sizeof(text) - at, "%s%02x%02x",
					       b ? ":" : "", gid->raw[b], gid->raw[b + 1]);
		snprintf(name, sizeof(name), "gids/%d", i);
		put(port_dir, name, "%s", text);
		if (!gid->valid)
			continue;
		snprintf(name, sizeof(name), "gid_attrs/types/%d", i);
		put(port_dir, name, "%s", gid_type_name(gid->type));
		/* a network device this host has: libibverbs turns the name into its index */
		if (gid->ifindex) {
			snprintf(name, sizeof(name), "gid_attrs/ndevs/%d", i);
			put(port_dir, name, "%s", gid->netdev);
		}
	}
}

static void write_device(struct soft_device *dev)
{
	struct ibv_device *ibdev = &dev->mdev.verbs_dev.device;
	char device_dir[256], verbs_dir[256];
	uint64_t guid = dev->node_guid;

	snprintf(device_dir, sizeof(device_dir), "%s/class/infiniband/%s", root, ibdev->name);
	snprintf(verbs_dir, sizeof(verbs_dir), "%s/class/infiniband_verbs/%s", root,
		 ibdev->dev_name);
	put(device_dir, "node_type", "1: CA");
	put(device_dir, "node_guid", "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
	    (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
	    (unsigned)guid & 0xffff);
	put(device_dir, "sys_image_guid", "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
	    (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
	    (unsigned)guid & 0xffff);
	put(device_dir, "fw_ver", "softmlx5 %s (software)", dev->profile.name);
	put(device_dir, "hca_type", "MT%u", dev->profile.vendor_part_id); /* mlx5_ib hca_type_show */
	put(device_dir, "hw_rev", "0");
	put(device_dir, "board_id", "SOFTMLX5");
	put(device_dir, "node_desc", "softmlx5 %s, %s (software)", ibdev->name, dev->profile.part);
	write_port(dev, device_dir);
	put(verbs_dir, "ibdev", "%s", ibdev->name);
	put(verbs_dir, "abi_version", "1");
	snprintf(ibdev->ibdev_path, sizeof(ibdev->ibdev_path), "%s", device_dir);
	snprintf(ibdev->dev_path, sizeof(ibdev->dev_path), "%s", verbs_dir);
}

void soft_sysfs_publish(struct soft_device *devices, int count)
{
	const char *fabric = soft_fabric_dir();
	int i;

	mkdir(fabric, 0700);
	remove_stale_trees(fabric);
	owner = getpid();
	snprintf(root, sizeof(root), "%s/sysfs-%d", fabric, (int)owner);
	remove_tree(root);
	put(root, "class/infiniband_verbs/abi_version", "6");
	for (i = 0; i < count; i++)
		write_device(&devices[i]);
	atexit(remove_own_tree);
}

void soft_sysfs_port_changed(const struct soft_device *dev)
{
	struct ibv_port_attr attr;
	char port_dir[256];

	soft_port_attr(dev, &attr);
	snprintf(port_dir, sizeof(port_dir), "%s/ports/1", dev->mdev.verbs_dev.device.ibdev_path);
	write_port_state(port_dir, &attr);
}
