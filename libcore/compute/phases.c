/* phases.c: the phase recorder (phases.h). */
#include "compute/phases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/log.h"

struct phase {
	char *name;
	int64_t ns, n, start;
	int open;
};

struct tf_phases {
	enum tf_phases_mode mode;
	char *out_path;
	struct phase *v;
	int n, cap;
	int64_t t0, rounds, tokens;
	tf_status (*sync)(void *ctx);
	void *sync_ctx;
	int warned;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

tf_status tf_phases_new(enum tf_phases_mode mode, const char *out_path, struct tf_phases **out)
{
	*out = NULL;
	if (mode == TF_PHASES_OFF)
		return TF_OK;
	struct tf_phases *p = calloc(1, sizeof *p);
	if (!p || (out_path && !(p->out_path = tf_strdup(out_path)))) {
		free(p);
		return tf_err(TF_ERR_NOMEM, "phases: out of memory");
	}
	p->mode = mode;
	p->t0 = now_ns();
	*out = p;
	return TF_OK;
}

tf_status tf_phases_from_env(struct tf_phases **out)
{
	const char *m = getenv("TF_PHASES"), *path = getenv("TF_PHASES_OUT");
	enum tf_phases_mode mode;
	*out = NULL;
	if (!m || !*m || !strcmp(m, "0"))
		mode = TF_PHASES_OFF;
	else if (!strcmp(m, "1"))
		mode = TF_PHASES_HOST;
	else if (!strcmp(m, "sync"))
		mode = TF_PHASES_SYNC;
	else
		return tf_err(TF_ERR_CONFIG, "TF_PHASES='%s': use 0, 1 or sync", m);
	return tf_phases_new(mode, path && *path ? path : NULL, out);
}

void tf_phases_free(struct tf_phases *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n; i++)
		free(p->v[i].name);
	free(p->v);
	free(p->out_path);
	free(p);
}

void tf_phases_set_sync(struct tf_phases *p, tf_status (*sync)(void *ctx), void *ctx)
{
	if (!p)
		return;
	p->sync = sync;
	p->sync_ctx = ctx;
}

int tf_phases_id(struct tf_phases *p, const char *name)
{
	if (!p)
		return -1;
	for (int i = 0; i < p->n; i++)
		if (!strcmp(p->v[i].name, name))
			return i;
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 32;
		if (tf_realloc_array(&p->v, (size_t)cap, sizeof *p->v))
			return -1;
		p->cap = cap;
	}
	struct phase *ph = &p->v[p->n];
	memset(ph, 0, sizeof *ph);
	if (!(ph->name = tf_strdup(name)))
		return -1;
	return p->n++;
}

static void wait_device(struct tf_phases *p)
{
	if (p->mode == TF_PHASES_SYNC && p->sync)
		p->sync(p->sync_ctx);
}

void tf_phases_begin_(struct tf_phases *p, int id)
{
	if (id >= p->n)
		return;
	wait_device(p);
	p->v[id].start = now_ns();
	p->v[id].open = 1;
}

void tf_phases_end_(struct tf_phases *p, int id)
{
	if (id >= p->n || !p->v[id].open)
		return;
	wait_device(p);
	struct phase *ph = &p->v[id];
	ph->ns += now_ns() - ph->start;
	ph->n++;
	ph->open = 0;
}

static void json_str(struct tf_buf *b, const char *s)
{
	tf_buf_putc(b, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			tf_buf_printf(b, "\\%c", c);
		else if (c < 0x20)
			tf_buf_printf(b, "\\u%04x", c);
		else
			tf_buf_putc(b, (char)c);
	}
	tf_buf_putc(b, '"');
}

char *tf_phases_json(const struct tf_phases *p)
{
	if (!p)
		return NULL;
	struct tf_buf b = TF_BUF_INIT;
	tf_buf_printf(&b, "{\"mode\":\"%s\",\"wall_ms\":%.3f,\"rounds\":%lld,\"tokens\":%lld,\"phases\":{",
		      p->mode == TF_PHASES_SYNC ? "sync" : "host", (now_ns() - p->t0) / 1e6,
		      (long long)p->rounds, (long long)p->tokens);
	for (int i = 0; i < p->n; i++) {
		const struct phase *ph = &p->v[i];
		if (i)
			tf_buf_putc(&b, ',');
		json_str(&b, ph->name);
		tf_buf_printf(&b, ":{\"ms\":%.3f,\"n\":%lld,\"ms_avg\":%.4f}", ph->ns / 1e6,
			      (long long)ph->n, ph->n ? ph->ns / 1e6 / (double)ph->n : 0.0);
	}
	tf_buf_puts(&b, "}}\n");
	return tf_buf_detach(&b, NULL);
}

tf_status tf_phases_round(struct tf_phases *p, int64_t tokens)
{
	if (!p)
		return TF_OK;
	p->rounds++;
	p->tokens += tokens;
	if (p->rounds % TF_PHASES_EVERY)
		return TF_OK;
	size_t len;
	char *text = tf_phases_json(p);
	tf_status st = TF_OK;
	if (!text)
		return tf_err(TF_ERR_NOMEM, "phases: out of memory");
	len = strlen(text);
	if (p->out_path)
		st = tf_file_write_atomic(p->out_path, text, len);
	else
		fputs(text, stderr);
	if (st && !p->warned) {
		p->warned = 1;
		tf_log(TF_LOG_WARN, "phases: cannot write '%s': %s", p->out_path, tf_errmsg(st));
	}
	free(text);
	return st;
}
