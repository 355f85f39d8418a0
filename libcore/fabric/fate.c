/* fate.c: the fate channel, its watcher thread and the fail-fast exit. */
#include "fabric/fate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"

struct hook {
	void (*fn)(void *);
	void *ctx;
};

struct tf_fate {
	struct tf_boot *boot;
	struct tf_fate_opts o;
	int wake[2];
	pthread_t thread;
	pthread_mutex_t send_mu;          /* one frame at a time on a socket */
	bool stopped[TF_BOOT_MAX_WORLD];
	double heard[TF_BOOT_MAX_WORLD];  /* when the last frame of peer r came */
	bool beating[TF_BOOT_MAX_WORLD];  /* a frame of peer r came */
	uint64_t beats;
	bool closing;
	struct hook hooks[8];
	int nhooks;
};

static atomic_int dying;

static void put(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

tf_status tf_fate_frame_parse(const uint8_t p[16], uint32_t *kind, int64_t *value)
{
	if (get(p, 4) != TF_FATE_MAGIC)
		return tf_err(TF_ERR_FORMAT, "fate frame with bad magic");
	*kind = (uint32_t)get(p + 4, 4);
	*value = (int64_t)get(p + 8, 8);
	if (*kind < TF_FATE_MEM || *kind > TF_FATE_BEAT)
		return tf_err(TF_ERR_FORMAT, "fate frame of unknown kind %u", *kind);
	if (*kind == TF_FATE_FAIL && (*value < 0 || *value > TF_FATE_REASON_MAX))
		return tf_err(TF_ERR_FORMAT, "fate FAIL with a reason of %lld bytes", (long long)*value);
	return TF_OK;
}

/* One frame (FAIL: value = the reason's length; BEAT: value given). */
static void send_frame(struct tf_fate *f, int fd, uint32_t kind, const char *reason, int64_t value)
{
	uint8_t p[16 + TF_FATE_REASON_MAX];
	size_t n = reason ? strlen(reason) : 0;
	if (n > TF_FATE_REASON_MAX)
		n = TF_FATE_REASON_MAX;
	put(p, TF_FATE_MAGIC, 4), put(p + 4, kind, 4);
	put(p + 8, kind == TF_FATE_FAIL ? (uint64_t)n : (uint64_t)value, 8);
	if (kind == TF_FATE_FAIL)
		memcpy(p + 16, reason, n);
	else
		n = 0;
	/* Best effort, bounded: a dead peer must not hold us. The lock keeps
	 * a FAIL from another thread out of the middle of a beat. */
	pthread_mutex_lock(&f->send_mu);
	tf_sock_write_full(fd, p, 16 + n, tf_boot_now() + 0.2);
	pthread_mutex_unlock(&f->send_mu);
}

static void *run_hooks(void *arg)
{
	struct tf_fate *f = arg;
	for (int i = 0; i < f->nhooks; i++)
		f->hooks[i].fn(f->hooks[i].ctx);
	return NULL;
}

/* The one way out: log, abort hooks, tell peers (except origin), shut every
 * socket, wait the grace time, exit 70. */
static void die(struct tf_fate *f, int origin, const char *reason) __attribute__((noreturn));
static void die(struct tf_fate *f, int origin, const char *reason)
{
	if (atomic_exchange(&dying, 1))
		for (;;)
			pause(); /* a second caller waits for the first to exit */
	struct tf_boot *b = f->boot;
	fprintf(stderr, "%s: tp fail-fast: rank %d: %s; exiting (%d) in %.0f ms\n", tf_log_prog(),
		b->rank, reason, TF_FATE_EXIT, f->o.grace_s * 1000);
	pthread_t t;
	if (f->nhooks && !pthread_create(&t, NULL, run_hooks, f))
		pthread_detach(t);
	if (!f->closing)
		for (int r = 0; r < b->world; r++)
			if (r != origin && b->fd[TF_BOOT_FATE][r] >= 0)
				send_frame(f, b->fd[TF_BOOT_FATE][r], TF_FATE_FAIL, reason, 0);
	for (int k = 0; k < TF_BOOT_NROLES; k++)
		for (int r = 0; r < b->world; r++)
			if (b->fd[k][r] >= 0)
				shutdown(b->fd[k][r], SHUT_RDWR);
	double g = f->o.grace_s;
	struct timespec ts = {(time_t)g, (long)((g - (double)(time_t)g) * 1e9)};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	_exit(TF_FATE_EXIT);
}

void tf_fate_fatal(struct tf_fate *f, const char *where, const char *why)
{
	char reason[TF_FATE_REASON_MAX];
	snprintf(reason, sizeof reason, "rank %d failed in %s: %s", f->boot->rank, where, why);
	die(f, -1, reason);
}

/* Handle readable data on peer r's socket; returns false when the peer has
 * stopped and closed (drop it from the poll set). */
static bool read_peer(struct tf_fate *f, int r)
{
	int fd = f->boot->fd[TF_BOOT_FATE][r];
	char reason[TF_FATE_REASON_MAX + 200];
	uint8_t p[16];
	tf_status st = tf_sock_read_full(fd, p, 16, tf_boot_now() + 1.0);
	f->heard[r] = tf_boot_now(), f->beating[r] = true;
	if (st) {
		if (f->stopped[r])
			return false;
		snprintf(reason, sizeof reason,
			 "rank %d closed the fate channel (it failed, exited or was killed)", r);
		die(f, r, reason);
	}
	uint32_t kind;
	int64_t value;
	if ((st = tf_fate_frame_parse(p, &kind, &value))) {
		snprintf(reason, sizeof reason, "rank %d sent a bad fate frame: %s", r, tf_errmsg(st));
		die(f, r, reason);
	}
	if (kind == TF_FATE_STOP) {
		f->stopped[r] = true;
	} else if (kind == TF_FATE_FAIL) {
		char why[TF_FATE_REASON_MAX + 1];
		if (tf_sock_read_full(fd, why, (size_t)value, tf_boot_now() + 1.0))
			value = 0;
		why[value] = 0;
		snprintf(reason, sizeof reason, "%s", value ? why : "a peer failed");
		die(f, r, reason);
	}
	return true;
}

/* A BEAT to every peer still watched. */
static void beat(struct tf_fate *f, const bool *live)
{
	struct tf_boot *b = f->boot;
	f->beats++;
	for (int r = 0; r < b->world; r++)
		if (live[r] && !f->stopped[r])
			send_frame(f, b->fd[TF_BOOT_FATE][r], TF_FATE_BEAT, NULL, (int64_t)f->beats);
}

/* Fail fast when a watched peer has been silent past its limit. */
static void judge(struct tf_fate *f, const bool *live, double now)
{
	struct tf_boot *b = f->boot;
	for (int r = 0; r < b->world; r++) {
		if (!live[r] || f->stopped[r])
			continue;
		double limit = f->o.limit_s;
		if (!f->beating[r] && b->timeout_s > limit)
			limit = b->timeout_s; /* its fate may not have started yet */
		if (now - f->heard[r] <= limit)
			continue;
		char reason[TF_FATE_REASON_MAX];
		snprintf(reason, sizeof reason, "rank %d sent nothing on the fate channel for %.2f s "
			 "(it is stopped, hung or cut off; TF_TP_HEARTBEAT_LIMIT_S=%g)", r, now - f->heard[r],
			 f->o.limit_s);
		die(f, r, reason);
	}
}

static void *watch(void *arg)
{
	struct tf_fate *f = arg;
	struct tf_boot *b = f->boot;
	bool live[TF_BOOT_MAX_WORLD] = {0};
	double start = tf_boot_now(), next = start;
	for (int r = 0; r < b->world; r++) {
		live[r] = r != b->rank && b->fd[TF_BOOT_FATE][r] >= 0;
		f->heard[r] = start;
	}
	for (;;) {
		double now = tf_boot_now();
		if (f->o.beat_s > 0 && now >= next) {
			beat(f, live);
			next = now + f->o.beat_s;
		}
		int timeout = -1;
		if (f->o.beat_s > 0) {
			double ms = (next - tf_boot_now()) * 1000;
			timeout = ms < 1 ? 1 : (int)ms + 1;
		}
		struct pollfd p[TF_BOOT_MAX_WORLD + 1];
		int who[TF_BOOT_MAX_WORLD + 1], n = 0;
		p[n] = (struct pollfd){f->wake[0], POLLIN, 0}, who[n++] = -1;
		for (int r = 0; r < b->world; r++)
			if (live[r])
				p[n] = (struct pollfd){b->fd[TF_BOOT_FATE][r], POLLIN | POLLRDHUP, 0}, who[n++] = r;
		int k = poll(p, (nfds_t)n, timeout);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			die(f, -1, "fate watcher: poll failed");
		}
		if (p[0].revents)
			return NULL; /* clean stop */
		/* What has arrived first, then the silences: a watcher that woke
		 * late finds its peers' beats waiting. */
		for (int i = 1; i < n; i++)
			if (p[i].revents && !read_peer(f, who[i]))
				live[who[i]] = false;
		if (f->o.limit_s > 0)
			judge(f, live, tf_boot_now());
	}
}

struct tf_fate_opts tf_fate_opts_of(const struct tf_fabric_settings *s)
{
	return (struct tf_fate_opts){s->grace_s, s->beat_s, s->beat_limit_s};
}

tf_status tf_fate_start(struct tf_boot *boot, const struct tf_fate_opts *o, struct tf_fate **out)
{
	struct tf_fate *f = calloc(1, sizeof *f);
	if (!f)
		return tf_err(TF_ERR_NOMEM, "fate: out of memory");
	f->boot = boot, f->o = *o;
	if (f->o.limit_s > 0 && f->o.beat_s <= 0)
		f->o.limit_s = 0; /* nothing beats: nothing to judge */
	pthread_mutex_init(&f->send_mu, NULL);
	if (pipe2(f->wake, O_CLOEXEC)) {
		pthread_mutex_destroy(&f->send_mu);
		free(f);
		return tf_err_errno(TF_ERR_OS, "fate: pipe");
	}
	if (pthread_create(&f->thread, NULL, watch, f)) {
		close(f->wake[0]), close(f->wake[1]);
		pthread_mutex_destroy(&f->send_mu);
		free(f);
		return tf_err(TF_ERR_OS, "fate: cannot start the watcher thread");
	}
	*out = f;
	return TF_OK;
}

void tf_fate_on_abort(struct tf_fate *f, void (*fn)(void *), void *ctx)
{
	if (f && f->nhooks < 8)
		f->hooks[f->nhooks++] = (struct hook){fn, ctx};
}

void tf_fate_stop(struct tf_fate *f)
{
	if (!f)
		return;
	struct tf_boot *b = f->boot;
	/* Stop the watcher first so a peer's close after our STOP is not
	 * taken for a failure; then announce and close our side. */
	if (write(f->wake[1], "x", 1) == 1)
		pthread_join(f->thread, NULL);
	f->closing = true;
	for (int r = 0; r < b->world; r++)
		if (r != b->rank && b->fd[TF_BOOT_FATE][r] >= 0) {
			send_frame(f, b->fd[TF_BOOT_FATE][r], TF_FATE_STOP, NULL, 0);
			close(b->fd[TF_BOOT_FATE][r]);
			b->fd[TF_BOOT_FATE][r] = -1;
		}
	close(f->wake[0]), close(f->wake[1]);
	pthread_mutex_destroy(&f->send_mu);
	free(f);
}
