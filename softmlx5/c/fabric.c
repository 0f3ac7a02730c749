/* The fabric: packets between processes on one machine. Its directory (SOFTMLX5_FABRIC, by
 * default /tmp/softmlx5-<uid>) holds a Unix datagram socket per process, `node-<pid>`, and a
 * file per QP number, `qp-<number>`, holding the pid of the process that owns it: QP numbers are
 * unique across the processes, as on one device, and a request goes to the process that holds
 * its DCT number. A request for a number no live process holds is lost, as on a wire; so are
 * packets to a process that is gone. Packets within one process do not leave it. */
#include "softmlx5.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static pthread_once_t fabric_once = PTHREAD_ONCE_INIT;
static int fabric_fd = -1;
static int fabric_error;
static char fabric_dir[108 - 24];
static pid_t self;
static uint32_t next_qpn_low;

static void node_path(char *out, size_t size, pid_t pid)
{
	snprintf(out, size, "%s/node-%d", fabric_dir, (int)pid);
}

static void qpn_path(char *out, size_t size, uint32_t qpn)
{
	snprintf(out, size, "%s/qp-%06x", fabric_dir, qpn);
}

static void fabric_unlink(void)
{
	char path[128];

	if (getpid() != self)
		return;
	node_path(path, sizeof(path), self);
	unlink(path);
}

static pthread_once_t dir_once = PTHREAD_ONCE_INIT;

static void name_dir(void)
{
	const char *dir = getenv("SOFTMLX5_FABRIC");

	if (dir)
		snprintf(fabric_dir, sizeof(fabric_dir), "%s", dir);
	else
		snprintf(fabric_dir, sizeof(fabric_dir), "/tmp/softmlx5-%u", (unsigned)getuid());
}

/* The fabric directory: SOFTMLX5_FABRIC, or /tmp/softmlx5-<uid>; short enough for the sockets'
 * addresses in it (a longer name is cut). */
const char *soft_fabric_dir(void)
{
	pthread_once(&dir_once, name_dir);
	return fabric_dir;
}

static void init(void)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int size = 4 << 20;

	self = getpid();
	soft_fabric_dir();
	if (mkdir(fabric_dir, 0700) && errno != EEXIST) {
		fabric_error = errno;
		return;
	}
	fabric_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fabric_fd < 0) {
		fabric_error = errno;
		return;
	}
	setsockopt(fabric_fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	setsockopt(fabric_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	node_path(addr.sun_path, sizeof(addr.sun_path), self);
	unlink(addr.sun_path);
	if (bind(fabric_fd, (struct sockaddr *)&addr, sizeof(addr))) {
		fabric_error = errno;
		close(fabric_fd);
		fabric_fd = -1;
		return;
	}
	atexit(fabric_unlink);
	/* QP numbers start from the pid's low bits, so that processes seldom meet. */
	next_qpn_low = ((uint32_t)self * 0x101u) & 0xfff;
}

int soft_fabric_init(void)
{
	pthread_once(&fabric_once, init);
	if (fabric_fd < 0) {
		errno = fabric_error ? fabric_error : EIO;
		return -1;
	}
	return 0;
}

int soft_fabric_fd(void)
{
	return fabric_fd;
}

static pid_t owner_of(uint32_t qpn)
{
	char path[128], text[32] = "";
	int fd;
	ssize_t got;

	qpn_path(path, sizeof(path), qpn);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	got = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (got <= 0)
		return 0;
	return (pid_t)atoi(text);
}

uint32_t soft_fabric_claim_qpn(void)
{
	char path[128], text[32];
	unsigned attempt;

	for (attempt = 0; attempt < 0x100000; attempt++) {
		uint32_t qpn = 0x1000 + ((next_qpn_low++ * 1u) & 0xfffff);
		int fd, len;

		if (qpn > 0xffffff)
			continue;
		qpn_path(path, sizeof(path), qpn);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			pid_t owner = owner_of(qpn);

			/* a number left by a process that is gone is free again */
			if (errno == EEXIST && owner > 0 && kill(owner, 0) && errno == ESRCH)
				unlink(path);
			continue;
		}
		len = snprintf(text, sizeof(text), "%d\n", (int)self);
		if (write(fd, text, (size_t)len) != len) {
			close(fd);
			unlink(path);
			continue;
		}
		close(fd);
		return qpn;
	}
	return 0;
}

void soft_fabric_release_qpn(uint32_t qpn)
{
	char path[128];

	if (owner_of(qpn) != self)
		return;
	qpn_path(path, sizeof(path), qpn);
	unlink(path);
}

/* Packets taken off the socket while a send waited, in arrival order: the engine handles them
 * next, so that answers leave in the order their requests came. */
struct pending {
	struct pending *next;
	size_t len;
	struct soft_packet *packet;
};
static struct pending *pending_head, **pending_tail = &pending_head;

static struct soft_packet *socket_receive(size_t *len);

static void hold(struct soft_packet *packet, size_t len)
{
	struct pending *entry = malloc(sizeof(*entry));

	if (!entry) {
		free(packet);
		soft_counters.packets_lost++;
		return;
	}
	entry->next = NULL;
	entry->len = len;
	entry->packet = packet;
	*pending_tail = entry;
	pending_tail = &entry->next;
}

/* A receiver's queue holds few datagrams (net.unix.max_dgram_qlen): while it is full, this
 * process takes what reached it off its own socket (the receiver may be waiting on this one)
 * to handle later, and tries again, for up to 50 ms; then the packet is lost, as on a congested
 * wire, and the requester's timer recovers. Called with soft_lock held. */
static void send_to(pid_t pid, struct soft_packet *packet, size_t len)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	uint64_t give_up = 0;

	node_path(addr.sun_path, sizeof(addr.sun_path), pid);
	for (;;) {
		struct soft_packet *incoming;
		size_t incoming_len;

		if (sendto(fabric_fd, packet, len, MSG_DONTWAIT, (struct sockaddr *)&addr,
			   sizeof(addr)) >= 0 || errno != EAGAIN)
			return;
		if (!give_up)
			give_up = soft_now_ns() + 50000000ull;
		else if (soft_now_ns() > give_up || soft_faults.step_mode) {
			soft_counters.packets_lost++;
			soft_trace_drop(packet, SOFTMLX5_DROP_CONGESTION);
			return;
		}
		while ((incoming = socket_receive(&incoming_len)))
			hold(incoming, incoming_len);
		usleep(20);
	}
}

/* Where each DCT number was last found: the fabric directory is read once per number, and
 * again after a timeout (soft_fabric_forget_routes), when the number may have moved. */
#define ROUTES 1024
static struct {
	uint32_t qpn;
	pid_t pid;
} routes[ROUTES];

void soft_fabric_forget_routes(void)
{
	memset(routes, 0, sizeof(routes));
}

static pid_t route(uint32_t qpn)
{
	unsigned slot = (qpn * 2654435761u) % ROUTES;

	if (routes[slot].qpn != qpn || !routes[slot].pid) {
		routes[slot].qpn = qpn;
		routes[slot].pid = owner_of(qpn);
	}
	return routes[slot].pid;
}

static void route_request(struct soft_packet *packet, size_t len)
{
	pid_t owner;

	if (soft_qp_find(packet->dctn)) {
		soft_engine_request(packet);
		return;
	}
	owner = route(packet->dctn);
	if (owner <= 0) {
		soft_trace_drop(packet, SOFTMLX5_DROP_NO_TARGET);
		return;
	}
	if (owner == self) {
		soft_engine_request(packet);
		return;
	}
	send_to(owner, packet, len);
}

/* Keeps a copy of `packet` on `fault`'s queue, due at `due_ns`; false without memory. */
static bool keep(struct soft_route_fault *fault, const struct soft_packet *packet, size_t len,
		 uint64_t due_ns)
{
	struct soft_delayed *entry = malloc(sizeof(*entry)), **link;

	if (!entry)
		return false;
	entry->packet = malloc(len);
	if (!entry->packet) {
		free(entry);
		return false;
	}
	memcpy(entry->packet, packet, len);
	entry->len = len;
	entry->due_ns = due_ns;
	entry->next = NULL;
	for (link = &fault->held; *link; link = &(*link)->next)
		;
	*link = entry;
	return true;
}

static void send_kept(struct soft_route_fault *fault, struct soft_delayed *entry)
{
	struct soft_delayed **link;

	for (link = &fault->held; *link != entry; link = &(*link)->next)
		;
	*link = entry->next;
	route_request(entry->packet, entry->len);
	free(entry->packet);
	free(entry);
}

void soft_fabric_release_held(struct soft_route_fault *fault)
{
	while (fault->held)
		send_kept(fault, fault->held);
}

bool soft_fabric_send_due(uint64_t now)
{
	bool sent = false;
	int i;

	for (i = 0; i < SOFT_ROUTE_FAULTS; i++) {
		struct soft_route_fault *fault = &soft_faults.routes[i];

		while (fault->used && fault->held && fault->held->due_ns && fault->held->due_ns <= now) {
			send_kept(fault, fault->held);
			sent = true;
		}
	}
	return sent;
}

/* A request leaves: through its route's faults (softmlx5_route_fault), then to the process that
 * holds its DCT number. */
void soft_fabric_send_request(struct soft_packet *packet, size_t len)
{
	struct soft_route_fault *fault = soft_route_fault_of(packet->dctn);

	if (fault) {
		bool drop = false;

		if (fault->drop_count) {
			fault->drop_count--;
			drop = true;
		} else if (fault->drop_per_million &&
			   soft_random() % 1000000 < fault->drop_per_million) {
			drop = true;
		}
		if (drop) {
			soft_trace_drop(packet, SOFTMLX5_DROP_FAULT);
			return;
		}
		if (fault->delay_ns) {
			if (!keep(fault, packet, len, soft_now_ns() + fault->delay_ns))
				soft_counters.packets_lost++;
			return;
		}
		if (fault->reorder) {
			/* the first of each pair waits for the second, then follows it */
			struct soft_delayed *first = fault->held;

			if (!first) {
				if (!keep(fault, packet, len, 0))
					soft_counters.packets_lost++;
				return;
			}
			route_request(packet, len);
			send_kept(fault, first);
			return;
		}
	}
	route_request(packet, len);
}

void soft_fabric_send_response(struct soft_packet *packet, size_t len)
{
	if (packet->source_pid == self) {
		soft_engine_response(packet);
		return;
	}
	send_to(packet->source_pid, packet, len);
}

struct soft_packet *soft_fabric_receive(size_t *len)
{
	struct pending *first = pending_head;

	if (first) {
		struct soft_packet *packet = first->packet;

		pending_head = first->next;
		if (!pending_head)
			pending_tail = &pending_head;
		*len = first->len;
		free(first);
		return packet;
	}
	return socket_receive(len);
}

static struct soft_packet *socket_receive(size_t *len)
{
	struct soft_packet *packet;
	ssize_t got;
	int size = 0;

	if (fabric_fd < 0)
		return NULL;
	got = recv(fabric_fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	if (got <= 0)
		return NULL;
	size = (int)got;
	packet = malloc((size_t)size);
	if (!packet)
		return NULL;
	got = recv(fabric_fd, packet, (size_t)size, MSG_DONTWAIT);
	if (got < (ssize_t)sizeof(*packet)) {
		free(packet);
		return NULL;
	}
	*len = (size_t)got;
	soft_counters.packets_received++;
	return packet;
}
