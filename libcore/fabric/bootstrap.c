/* bootstrap.c: the TCP star, frames with deadlines, all-gather, agree. */
#include "fabric/bootstrap.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

double tf_boot_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Wait for events on fd until deadline: TF_OK, or TF_ERR_TIMEOUT. */
static tf_status wait_fd(int fd, short ev, double deadline)
{
	for (;;) {
		int ms = -1;
		if (deadline > 0) {
			double left = deadline - tf_boot_now();
			if (left <= 0)
				return tf_err(TF_ERR_TIMEOUT, "socket wait timed out");
			ms = (int)(left * 1000) + 1;
		}
		struct pollfd p = {fd, ev, 0};
		int r = poll(&p, 1, ms);
		if (r > 0)
			return TF_OK;
		if (r < 0 && errno != EINTR)
			return tf_err_errno(TF_ERR_OS, "poll");
	}
}

tf_status tf_sock_write_full(int fd, const void *p, size_t n, double deadline)
{
	const uint8_t *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			c += w, n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			tf_status st = wait_fd(fd, POLLOUT, deadline);
			if (st)
				return st;
			continue;
		}
		return tf_err_errno(TF_ERR_IO, "peer closed: send");
	}
	return TF_OK;
}

tf_status tf_sock_read_full(int fd, void *p, size_t n, double deadline)
{
	uint8_t *c = p;
	while (n) {
		ssize_t r = recv(fd, c, n, MSG_DONTWAIT);
		if (r > 0) {
			c += r, n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return tf_err(TF_ERR_IO, "peer closed the connection");
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			tf_status st = wait_fd(fd, POLLIN, deadline);
			if (st)
				return st;
			continue;
		}
		return tf_err_errno(TF_ERR_IO, "peer closed: recv");
	}
	return TF_OK;
}

tf_status tf_sock_send_frame(int fd, const void *p, size_t n, double deadline)
{
	if (n > UINT32_MAX)
		return tf_err(TF_ERR_ARG, "frame of %zu bytes too large", n);
	uint8_t h[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
	tf_status st = tf_sock_write_full(fd, h, 4, deadline);
	return st ? st : tf_sock_write_full(fd, p, n, deadline);
}

tf_status tf_sock_recv_frame(int fd, void *buf, size_t cap, size_t *n, double deadline)
{
	uint8_t h[4];
	tf_status st = tf_sock_read_full(fd, h, 4, deadline);
	if (st)
		return st;
	size_t len = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
	if (len > cap)
		return tf_err(TF_ERR_FORMAT, "frame of %zu bytes exceeds %zu", len, cap);
	*n = len;
	return tf_sock_read_full(fd, buf, len, deadline);
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void tf_boot_hello_pack(const struct tf_boot_hello *h, uint8_t p[20])
{
	put32(p, h->magic), put32(p + 4, h->version), put32(p + 8, h->world);
	put32(p + 12, h->rank), put32(p + 16, h->role);
}

tf_status tf_boot_hello_parse(const uint8_t p[20], int world, struct tf_boot_hello *h)
{
	h->magic = get32(p), h->version = get32(p + 4), h->world = get32(p + 8);
	h->rank = get32(p + 12), h->role = get32(p + 16);
	if (h->magic != TF_BOOT_MAGIC)
		return tf_err(TF_ERR_VERSION, "hello with bad magic 0x%08x", h->magic);
	if (h->version != TF_BOOT_VERSION)
		return tf_err(TF_ERR_VERSION, "hello of protocol version %u (this is %u)", h->version,
			      TF_BOOT_VERSION);
	if (h->world != (uint32_t)world)
		return tf_err(TF_ERR_MISMATCH, "rank %u says the world is %u, rank 0 says %d", h->rank,
			      h->world, world);
	if (h->rank == 0 || h->rank >= (uint32_t)world)
		return tf_err(TF_ERR_MISMATCH, "hello from rank %u outside 1..%d", h->rank, world - 1);
	if (h->role >= TF_BOOT_NROLES)
		return tf_err(TF_ERR_MISMATCH, "hello from rank %u with role %u", h->rank, h->role);
	return TF_OK;
}

static void tune(int fd)
{
	int one = 1, idle = 30, intvl = 10, cnt = 6;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static void init_fds(struct tf_boot *b)
{
	for (int k = 0; k < TF_BOOT_NROLES; k++)
		for (int r = 0; r < TF_BOOT_MAX_WORLD; r++)
			b->fd[k][r] = -1;
}

tf_status tf_boot_listen(struct tf_boot *b, const struct tf_fabric_settings *s)
{
	memset(b, 0, sizeof *b);
	init_fds(b);
	b->listen_fd = -1;
	b->world = s->world, b->rank = s->rank, b->timeout_s = s->plan_timeout_s;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return tf_err_errno(TF_ERR_OS, "socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->plan_port),
				.sin_addr.s_addr = htonl(INADDR_ANY)};
	if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64)) {
		tf_status st = tf_err_errno(TF_ERR_UNAVAILABLE, "cannot listen on port %d", s->plan_port);
		close(fd);
		return st;
	}
	socklen_t al = sizeof a;
	getsockname(fd, (struct sockaddr *)&a, &al);
	b->port = ntohs(a.sin_port);
	b->listen_fd = fd;
	return TF_OK;
}

static tf_status accept_all(struct tf_boot *b)
{
	double deadline = tf_boot_now() + b->timeout_s;
	int need = TF_BOOT_NROLES * (b->world - 1);
	while (need > 0) {
		tf_status st = wait_fd(b->listen_fd, POLLIN, deadline);
		if (st)
			return tf_err(TF_ERR_TIMEOUT,
				      "rank 0: %d of %d peer connections missing after %.1f s", need,
				      TF_BOOT_NROLES * (b->world - 1), b->timeout_s);
		int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
				continue;
			return tf_err_errno(TF_ERR_OS, "accept");
		}
		tune(fd);
		uint8_t p[20];
		struct tf_boot_hello h;
		double hd = tf_boot_now() + 5.0;
		st = tf_sock_read_full(fd, p, 20, hd < deadline ? hd : deadline);
		if (!st)
			st = tf_boot_hello_parse(p, b->world, &h);
		if (st == TF_ERR_VERSION || st == TF_ERR_IO || st == TF_ERR_TIMEOUT) {
			tf_log(TF_LOG_WARN, "tp bootstrap: dropped a connection: %s", tf_errmsg(st));
			close(fd);
			continue;
		}
		if (!st && b->fd[h.role][h.rank] >= 0)
			st = tf_err(TF_ERR_MISMATCH, "rank %u connected role %u twice", h.rank, h.role);
		if (st) {
			close(fd);
			return st;
		}
		b->fd[h.role][h.rank] = fd;
		need--;
	}
	return TF_OK;
}

static tf_status connect_one(struct tf_boot *b, const struct tf_fabric_settings *s, int role,
			     double deadline, int *out)
{
	char port[16];
	snprintf(port, sizeof port, "%d", s->plan_port);
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
	for (;;) {
		int gai = getaddrinfo(s->master, port, &hints, &ai);
		if (!gai) {
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				freeaddrinfo(ai);
				return tf_err_errno(TF_ERR_OS, "socket");
			}
			if (!connect(fd, ai->ai_addr, ai->ai_addrlen)) {
				freeaddrinfo(ai);
				tune(fd);
				struct tf_boot_hello h = {TF_BOOT_MAGIC, TF_BOOT_VERSION, (uint32_t)b->world,
							  (uint32_t)b->rank, (uint32_t)role};
				uint8_t p[20];
				tf_boot_hello_pack(&h, p);
				tf_status st = tf_sock_write_full(fd, p, 20, deadline);
				if (st) {
					close(fd);
					return st;
				}
				*out = fd;
				return TF_OK;
			}
			close(fd);
			freeaddrinfo(ai);
			ai = NULL;
		}
		if (tf_boot_now() + 0.05 > deadline)
			return tf_err(TF_ERR_TIMEOUT, "rank %d: cannot reach rank 0 at %s:%d within %.1f s",
				      b->rank, s->master, s->plan_port, s->plan_timeout_s);
		usleep(50000);
	}
}

void tf_boot_close(struct tf_boot *b)
{
	for (int k = 0; k < TF_BOOT_NROLES; k++)
		for (int r = 0; r < TF_BOOT_MAX_WORLD; r++)
			if (b->fd[k][r] >= 0) {
				close(b->fd[k][r]);
				b->fd[k][r] = -1;
			}
	if (b->listen_fd >= 0)
		close(b->listen_fd);
	b->listen_fd = -1;
}

tf_status tf_boot_open(struct tf_boot *b, const struct tf_fabric_settings *s)
{
	tf_status st = TF_OK;
	if (s->rank == 0) {
		if (!(b->listen_fd > 0 && b->world == s->world) && (st = tf_boot_listen(b, s)))
			return st;
		st = accept_all(b);
		close(b->listen_fd);
		b->listen_fd = -1;
	} else {
		memset(b, 0, sizeof *b);
		init_fds(b);
		b->listen_fd = -1;
		b->world = s->world, b->rank = s->rank, b->timeout_s = s->plan_timeout_s;
		double deadline = tf_boot_now() + s->plan_timeout_s;
		for (int k = 0; k < TF_BOOT_NROLES && !st; k++)
			st = connect_one(b, s, k, deadline, &b->fd[k][0]);
	}
	if (!st) {
		uint8_t blob[256];
		size_t n = tf_fabric_settings_agreed(s, blob, sizeof blob);
		st = tf_boot_agree(b, blob, n, "settings", tf_fabric_settings_diff);
	}
	if (st)
		tf_boot_close(b);
	return st;
}

tf_status tf_boot_all_gather(struct tf_boot *b, const void *mine, size_t n, uint8_t *out,
			     size_t cap, size_t *lens)
{
	if (n > TF_BOOT_BLOB_MAX || n > cap)
		return tf_err(TF_ERR_ARG, "all-gather blob of %zu bytes too large", n);
	double deadline = tf_boot_now() + b->timeout_s;
	tf_status st = TF_OK;
	if (b->rank == 0) {
		memcpy(out, mine, n);
		lens[0] = n;
		for (int r = 1; r < b->world && !st; r++)
			st = tf_sock_recv_frame(b->fd[TF_BOOT_CTL][r], out + (size_t)r * cap, cap,
						&lens[r], deadline);
		for (int r = 1; r < b->world && !st; r++)
			for (int q = 0; q < b->world && !st; q++)
				st = tf_sock_send_frame(b->fd[TF_BOOT_CTL][r], out + (size_t)q * cap,
							lens[q], deadline);
	} else {
		int fd = b->fd[TF_BOOT_CTL][0];
		st = tf_sock_send_frame(fd, mine, n, deadline);
		for (int q = 0; q < b->world && !st; q++)
			st = tf_sock_recv_frame(fd, out + (size_t)q * cap, cap, &lens[q], deadline);
	}
	return st ? tf_err_wrap(st, "tp bootstrap all-gather (rank %d): ", b->rank) : TF_OK;
}

tf_status tf_boot_broadcast(struct tf_boot *b, void *buf, size_t *n, size_t cap)
{
	double deadline = tf_boot_now() + b->timeout_s;
	tf_status st = TF_OK;
	if (b->rank == 0) {
		for (int r = 1; r < b->world && !st; r++)
			st = tf_sock_send_frame(b->fd[TF_BOOT_CTL][r], buf, *n, deadline);
	} else {
		st = tf_sock_recv_frame(b->fd[TF_BOOT_CTL][0], buf, cap, n, deadline);
	}
	return st ? tf_err_wrap(st, "tp bootstrap broadcast (rank %d): ", b->rank) : TF_OK;
}

tf_status tf_boot_agree(struct tf_boot *b, const void *mine, size_t n, const char *what,
			void (*diff)(const uint8_t *, size_t, const uint8_t *, size_t, char *, size_t))
{
	size_t cap = n + 64;
	uint8_t *all = malloc(cap * (size_t)b->world);
	size_t *lens = malloc(sizeof *lens * (size_t)b->world);
	tf_status st = TF_OK;
	if (!all || !lens) {
		st = tf_err(TF_ERR_NOMEM, "agree: out of memory");
		goto out;
	}
	/* A rank whose blob is longer than ours by more than the slack fails
	 * the frame read: still a refusal, just with a cruder message. */
	if ((st = tf_boot_all_gather(b, mine, n, all, cap, lens)))
		goto out;
	for (int r = 1; r < b->world; r++) {
		const uint8_t *a0 = all, *ar = all + (size_t)r * cap;
		if (lens[r] == lens[0] && !memcmp(a0, ar, lens[0]))
			continue;
		char d[256] = "";
		if (diff)
			diff(ar, lens[r], a0, lens[0], d, sizeof d);
		else
			snprintf(d, sizeof d, "%zu vs %zu bytes", lens[r], lens[0]);
		tf_log(TF_LOG_ERROR, "rank %d's %s differs from rank 0's: %s; every rank refuses to start",
		       r, what, d);
		st = tf_err(TF_ERR_CONFIG, "rank %d's %s differs from rank 0's: %s; every rank refuses to start",
			    r, what, d);
		goto out;
	}
out:
	free(all);
	free(lens);
	return st;
}
