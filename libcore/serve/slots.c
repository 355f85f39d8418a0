/* slots.c: the connection slots (see slots.h): a list of open sockets under
 * one mutex, scanned when a connection arrives past the cap and by the
 * ticker for deadlines. A scan is a few thousand entries at most. */
#include "serve/slots.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/tcp.h> /* tcpi_bytes_received, which glibc's tcp.h lacks */
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"

enum phase {
	P_FRESH, /* accepted, no request headers yet */
	P_IDLE,  /* between requests of a keep-alive connection */
	P_BODY,  /* headers in, the body still coming */
	P_BUSY,  /* the request is whole or its reply under way */
	P_DEAD,  /* refused, shed or timed out: shut at `kill` */
};

struct tf_slot {
	int fd;              /* our dup of the socket */
	enum phase phase;
	double start;        /* when the current request may have begun */
	double kill;         /* P_DEAD: when to shut both ways */
	bool shut;           /* shut both ways already */
	pthread_t owner;     /* the library's thread that accepted it (and serves it) */
	uint64_t head_at;    /* bytes the library had read when the current head began */
	struct tf_slot *prev, *next;
};

struct tf_slots {
	pthread_mutex_t mu;
	unsigned cap, timeout_s;
	unsigned live;       /* slots not dead */
	struct tf_metrics *m;
	struct tf_slot *head;
};

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

tf_status tf_slots_new(unsigned cap, unsigned timeout_s, struct tf_metrics *m,
		       struct tf_slots **out)
{
	struct tf_slots *t = tf_calloc(1, sizeof(*t));
	if (!t)
		return tf_err(TF_ERR_NOMEM, "server: out of memory");
	pthread_mutex_init(&t->mu, NULL);
	t->cap = cap;
	t->timeout_s = timeout_s;
	t->m = m;
	*out = t;
	return TF_OK;
}

void tf_slots_free(struct tf_slots *t)
{
	if (!t)
		return;
	for (struct tf_slot *s = t->head, *n; s; s = n) {
		n = s->next;
		close(s->fd);
		free(s);
	}
	pthread_mutex_destroy(&t->mu);
	free(t);
}

unsigned tf_slots_hard_limit(unsigned cap)
{
	/* Room for the refused and shed sockets of about a second. */
	return cap + cap / 2 + 64;
}

/* A whole reply, written straight to a socket the library is not writing
 * to (it has not read a whole request, so it has queued nothing). Best
 * effort: a socket buffer takes these few hundred bytes. */
static void say(struct tf_slots *t, struct tf_slot *s, int status, const char *reason,
		const char *kind, const char *code, const char *msg, int retry_after)
{
	char body[256], head[256];
	int nb = snprintf(body, sizeof(body),
			  "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
			  msg, kind, code);
	char ra[32] = "";
	if (retry_after)
		snprintf(ra, sizeof(ra), "Retry-After: %d\r\n", retry_after);
	int nh = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
			  "%sConnection: close\r\n\r\n", status, reason, nb, ra);
	if (send(s->fd, head, (size_t)nh, MSG_NOSIGNAL | MSG_DONTWAIT) == nh)
		send(s->fd, body, (size_t)nb, MSG_NOSIGNAL | MSG_DONTWAIT);
	tf_metrics_http(t->m, status);
}

/* Mark s dead (t->mu held): no more writes from us; its read side is shut
 * after linger seconds, which makes the library close it. */
static void kill_locked(struct tf_slots *t, struct tf_slot *s, double now, double linger)
{
	if (s->phase != P_DEAD)
		t->live--;
	s->phase = P_DEAD;
	shutdown(s->fd, SHUT_WR);
	s->kill = now + linger;
}

static void busy_reply(struct tf_slots *t, struct tf_slot *s, double now)
{
	say(t, s, 503, "Service Unavailable", "server_error", "server_busy",
	    "every connection slot is taken: retry shortly", 1);
	kill_locked(t, s, now, TF_SLOTS_LINGER_S);
}

/* Make room for one more (t->mu held): shed the connection idle longest
 * (once idle past the grace), else displace the sender that has spent
 * longest on its request (past the grace), else shed an idle one however
 * young. Returns false when nothing may go. */
static bool make_room(struct tf_slots *t, double now)
{
	struct tf_slot *idle = NULL, *slow = NULL;
	for (struct tf_slot *s = t->head; s; s = s->next) {
		if (s->phase == P_IDLE && (!idle || s->start < idle->start))
			idle = s;
		else if ((s->phase == P_FRESH || s->phase == P_BODY) &&
			 now - s->start >= TF_SLOTS_GRACE_S && (!slow || s->start < slow->start))
			slow = s;
	}
	if (idle && (now - idle->start >= TF_SLOTS_GRACE_S || !slow)) {
		kill_locked(t, idle, now, 0);
		tf_metrics_conn(t->m, TF_CONN_SHED_IDLE);
		return true;
	}
	if (slow) {
		busy_reply(t, slow, now);
		tf_metrics_conn(t->m, TF_CONN_SHED_SLOW);
		return true;
	}
	return false;
}

struct tf_slot *tf_slots_open(struct tf_slots *t, int fd)
{
	struct tf_slot *s = tf_calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (s->fd < 0) {
		tf_log(TF_LOG_WARN, "cannot hold a connection: %s", strerror(errno));
		free(s);
		return NULL;
	}
	double now = mono();
	s->phase = P_FRESH;
	s->start = now;
	s->owner = pthread_self();
	pthread_mutex_lock(&t->mu);
	s->next = t->head;
	if (t->head)
		t->head->prev = s;
	t->head = s;
	t->live++;
	if (t->live > t->cap && !make_room(t, now)) {
		busy_reply(t, s, now);
		tf_metrics_conn(t->m, TF_CONN_REFUSED);
	}
	pthread_mutex_unlock(&t->mu);
	return s;
}

void tf_slots_close(struct tf_slots *t, struct tf_slot *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->mu);
	if (s->prev)
		s->prev->next = s->next;
	else
		t->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	if (s->phase != P_DEAD)
		t->live--;
	pthread_mutex_unlock(&t->mu);
	close(s->fd);
	free(s);
}

bool tf_slot_dead(struct tf_slots *t, struct tf_slot *s)
{
	if (!s)
		return false;
	pthread_mutex_lock(&t->mu);
	bool dead = s->phase == P_DEAD;
	pthread_mutex_unlock(&t->mu);
	return dead;
}

static void move(struct tf_slots *t, struct tf_slot *s, enum phase from_max, enum phase to,
		 bool restart)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->mu);
	if (s->phase != P_DEAD && s->phase <= from_max) {
		s->phase = to;
		if (restart)
			s->start = mono();
	}
	pthread_mutex_unlock(&t->mu);
}

void tf_slot_headers(struct tf_slots *t, struct tf_slot *s)
{
	move(t, s, P_IDLE, P_BODY, false);
}

void tf_slot_busy(struct tf_slots *t, struct tf_slot *s)
{
	move(t, s, P_BODY, P_BUSY, false);
}

/* Bytes the library has read from the socket so far: what the kernel
 * received, less what still waits to be read. 0 when it cannot say. */
static uint64_t taken(int fd)
{
	struct tcp_info ti;
	socklen_t n = sizeof(ti);
	int unread = 0;
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) ||
	    n < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received) ||
	    ioctl(fd, SIOCINQ, &unread) || unread < 0 || (uint64_t)unread > ti.tcpi_bytes_received)
		return 0;
	return ti.tcpi_bytes_received - (uint64_t)unread;
}

void tf_slot_idle(struct tf_slots *t, struct tf_slot *s)
{
	if (!s)
		return;
	uint64_t at = taken(s->fd);
	pthread_mutex_lock(&t->mu);
	if (s->phase == P_BUSY)
		s->head_at = at;
	pthread_mutex_unlock(&t->mu);
	move(t, s, P_BUSY, P_IDLE, true);
}

bool tf_slots_refuse_head(struct tf_slots *t, int status, unsigned headers_max)
{
	pthread_t me = pthread_self();
	struct tf_slot *worst = NULL;
	uint64_t most = 0;
	pthread_mutex_lock(&t->mu);
	for (struct tf_slot *s = t->head; s; s = s->next) {
		if ((s->phase != P_FRESH && s->phase != P_IDLE) || !pthread_equal(s->owner, me))
			continue;
		uint64_t n = taken(s->fd);
		n = n > s->head_at ? n - s->head_at : 0;
		if (n > most) {
			most = n;
			worst = s;
		}
	}
	if (worst && most >= TF_SLOTS_HEAD_MIN) {
		char m[96];
		if (status == 414)
			snprintf(m, sizeof(m), "the request path is longer than %d bytes", TF_SLOTS_URL_MAX);
		else if (most > TF_SLOTS_HEADER_BYTES)
			snprintf(m, sizeof(m), "the request's header is larger than %d bytes",
				 TF_SLOTS_HEADER_BYTES);
		else /* many short lines: their index filled the memory */
			snprintf(m, sizeof(m), "the request's header lines do not fit in the server's "
				 "%d KiB of connection memory (at most %u are taken)", TF_SLOTS_HEAD_MEMORY / 1024,
				 headers_max);
		say(t, worst, status, status == 414 ? "URI Too Long" : "Request Header Fields Too Large",
		    "invalid_request_error", status == 414 ? "uri_too_long" : "header_too_large", m, 0);
		kill_locked(t, worst, mono(), TF_SLOTS_LINGER_S);
	}
	pthread_mutex_unlock(&t->mu);
	return worst && most >= TF_SLOTS_HEAD_MIN;
}

void tf_slots_tick(struct tf_slots *t)
{
	double now = mono();
	pthread_mutex_lock(&t->mu);
	for (struct tf_slot *s = t->head; s; s = s->next) {
		if (s->phase == P_DEAD) {
			if (!s->shut && now >= s->kill) {
				shutdown(s->fd, SHUT_RDWR);
				s->shut = true;
			}
			continue;
		}
		if (s->phase == P_BUSY || now - s->start < t->timeout_s)
			continue;
		if (s->phase != P_IDLE) { /* between requests a silent close is the norm */
			char m[96];
			snprintf(m, sizeof(m), "the request did not arrive whole within %u seconds",
				 t->timeout_s);
			say(t, s, 408, "Request Timeout", "invalid_request_error", "request_timeout", m, 0);
			tf_metrics_conn(t->m, TF_CONN_TIMEOUT);
		}
		kill_locked(t, s, now, 0);
	}
	pthread_mutex_unlock(&t->mu);
}

unsigned tf_slots_live(struct tf_slots *t)
{
	pthread_mutex_lock(&t->mu);
	unsigned n = t->live;
	pthread_mutex_unlock(&t->mu);
	return n;
}
