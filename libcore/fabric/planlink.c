/* planlink.c: plan frames, batches and their validation. */
#include "fabric/planlink.h"

#include <stdlib.h>
#include <string.h>

void tf_plan_link_init_fds(struct tf_plan_link *l, int world, int rank, const int *fds)
{
	memset(l, 0, sizeof *l);
	l->world = world, l->rank = rank;
	for (int r = 0; r < TF_BOOT_MAX_WORLD; r++)
		l->fd[r] = r < world ? fds[r] : -1;
}

void tf_plan_link_init(struct tf_plan_link *l, const struct tf_boot *b)
{
	tf_plan_link_init_fds(l, b->world, b->rank, b->fd[TF_BOOT_PLAN]);
}

void tf_plan_link_release(struct tf_plan_link *l)
{
	free(l->rx);
	l->rx = NULL;
	l->rx_cap = 0;
}

tf_status tf_plan_frame_check(const int64_t *w, size_t n, size_t *nplans)
{
	if (n == 0 || w[0] != TF_PLAN_BATCH_TAG) {
		*nplans = 1;
		return TF_OK;
	}
	if (n < 2 || w[1] < 1 || (uint64_t)w[1] > n)
		return tf_err(TF_ERR_FORMAT, "plan batch: bad plan count");
	size_t pos = 2;
	for (int64_t i = 0; i < w[1]; i++) {
		if (pos >= n || w[pos] < 0 || (uint64_t)w[pos] > n - pos - 1)
			return tf_err(TF_ERR_FORMAT, "plan batch: plan %lld overruns the frame", (long long)i);
		pos += 1 + (size_t)w[pos];
	}
	if (pos != n)
		return tf_err(TF_ERR_FORMAT, "plan batch: %zu words past the last plan", n - pos);
	*nplans = (size_t)w[1];
	return TF_OK;
}

static tf_status send_all(struct tf_plan_link *l, const int64_t *w, size_t n, double timeout_s)
{
	double dl = timeout_s > 0 ? tf_boot_now() + timeout_s : 0;
	for (int r = 1; r < l->world; r++) {
		tf_status st = tf_sock_send_frame(l->fd[r], w, n * 8, dl);
		if (st)
			return tf_err_wrap(st, "plan link to rank %d: ", r);
	}
	return TF_OK;
}

tf_status tf_plan_flush(struct tf_plan_link *l, double timeout_s)
{
	if (!l->nheld_plans)
		return TF_OK;
	l->held[0] = TF_PLAN_BATCH_TAG;
	l->held[1] = (int64_t)l->nheld_plans;
	tf_status st = send_all(l, l->held, 2 + l->nheld, timeout_s);
	l->sent += l->nheld_plans;
	l->nheld = l->nheld_plans = 0;
	return st;
}

static tf_status check_plan(const struct tf_plan_link *l, const int64_t *plan, size_t n)
{
	if (l->rank != 0)
		return tf_err(TF_ERR_ARG, "plan link: only rank 0 sends plans");
	if (n && plan[0] == TF_PLAN_BATCH_TAG)
		return tf_err(TF_ERR_ARG, "plan link: a plan cannot start with INT64_MIN");
	if (n > TF_PLAN_FRAME_MAX_WORDS)
		return tf_err(TF_ERR_RANGE, "plan link: plan of %zu words too large", n);
	return TF_OK;
}

tf_status tf_plan_hold(struct tf_plan_link *l, const int64_t *plan, size_t n, double timeout_s)
{
	tf_status st = check_plan(l, plan, n);
	if (st)
		return st;
	if (l->nheld + 1 + n > TF_PLAN_HOLD_MAX && (st = tf_plan_flush(l, timeout_s)))
		return st;
	if (1 + n > TF_PLAN_HOLD_MAX)
		return tf_plan_send(l, plan, n, timeout_s); /* too big to hold */
	/* held[0..1] are the batch header, filled at flush. */
	l->held[2 + l->nheld] = (int64_t)n;
	memcpy(l->held + 3 + l->nheld, plan, n * 8);
	l->nheld += 1 + n;
	l->nheld_plans++;
	return TF_OK;
}

tf_status tf_plan_send(struct tf_plan_link *l, const int64_t *plan, size_t n, double timeout_s)
{
	tf_status st = check_plan(l, plan, n);
	if (st)
		return st;
	if (l->nheld_plans && 2 + l->nheld + 1 + n <= TF_PLAN_BATCH_MAX) {
		l->held[2 + l->nheld] = (int64_t)n;
		memcpy(l->held + 3 + l->nheld, plan, n * 8);
		l->nheld += 1 + n;
		l->nheld_plans++;
		return tf_plan_flush(l, timeout_s);
	}
	if ((st = tf_plan_flush(l, timeout_s)))
		return st;
	st = send_all(l, plan, n, timeout_s);
	l->sent++;
	return st;
}

/* Read and discard len bytes (a frame too large to keep). */
static tf_status skip(int fd, size_t len, double dl)
{
	uint8_t junk[4096];
	while (len) {
		size_t k = len < sizeof junk ? len : sizeof junk;
		tf_status st = tf_sock_read_full(fd, junk, k, dl);
		if (st)
			return st;
		len -= k;
	}
	return TF_OK;
}

tf_status tf_plan_recv_view(struct tf_plan_link *l, const int64_t **plan, size_t *n,
			    double timeout_s)
{
	if (l->rank == 0)
		return tf_err(TF_ERR_ARG, "plan link: rank 0 does not receive plans");
	if (!l->rx_left) {
		double dl = timeout_s > 0 ? tf_boot_now() + timeout_s : 0;
		int fd = l->fd[0];
		uint8_t h[4];
		tf_status st = tf_sock_read_full(fd, h, 4, dl);
		if (st)
			return st == TF_ERR_TIMEOUT ? st : tf_err(TF_ERR_IO, "plan link: peer closed");
		size_t len = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
		if (len % 8)
			return tf_err(TF_ERR_IO, "plan link: peer closed (frame of %zu bytes is not whole words)", len);
		size_t words = len / 8;
		if (words > TF_PLAN_FRAME_MAX_WORDS) {
			skip(fd, len, dl);
			return tf_err(TF_ERR_RANGE, "plan link: frame of %zu words too large", words);
		}
		if (words > l->rx_cap) {
			int64_t *p = realloc(l->rx, words * 8);
			if (!p)
				return tf_err(TF_ERR_NOMEM, "plan link: out of memory");
			l->rx = p, l->rx_cap = words;
		}
		if ((st = tf_sock_read_full(fd, l->rx, len, dl)))
			return tf_err(TF_ERR_IO, "plan link: peer closed mid-frame");
		size_t np;
		if ((st = tf_plan_frame_check(l->rx, words, &np)))
			return tf_err(TF_ERR_IO, "plan link: peer closed (%s)", tf_errmsg(st));
		l->rx_n = words;
		l->rx_left = np;
		l->rx_pos = words && l->rx[0] == TF_PLAN_BATCH_TAG ? 2 : 0;
		if (!(words && l->rx[0] == TF_PLAN_BATCH_TAG)) {
			/* A plain plan: the whole frame. */
			l->rx_left = 0;
			l->received++;
			*n = words;
			*plan = l->rx;
			return TF_OK;
		}
	}
	size_t len = (size_t)l->rx[l->rx_pos];
	*plan = l->rx + l->rx_pos + 1;
	l->rx_pos += 1 + len;
	l->rx_left--;
	l->received++;
	*n = len;
	return TF_OK;
}

tf_status tf_plan_recv(struct tf_plan_link *l, int64_t *buf, size_t cap, size_t *n, double timeout_s)
{
	const int64_t *p;
	tf_status st = tf_plan_recv_view(l, &p, n, timeout_s);
	if (st)
		return st;
	if (*n > cap)
		return tf_err(TF_ERR_RANGE, "plan of %zu words exceeds the buffer of %zu", *n, cap);
	memcpy(buf, p, *n * 8);
	return TF_OK;
}
