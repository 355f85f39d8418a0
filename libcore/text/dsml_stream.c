/* dsml_stream.c: reading a DSML reply while it grows (see dsml.h).
 *
 * Each push reads the whole text so far, but every search resumes where
 * the last one stopped (less a window for a tag still arriving) and an
 * invoke whose end is fixed is never read again, so a token costs time in
 * its own text only. The deltas are the reference reader's, step for step:
 * reasoning and content up to what may still become a tag, a call when its
 * header is complete, one arguments fragment per finished parameter, the
 * closing brace when the invoke closes (or at finish). */
#include <stdlib.h>
#include <string.h>

#include "text/dsml_impl.h"

/* A search for a fixed-length tag from `from`, resumed as the text grows. */
struct finder {
	size_t from, scanned;
	bool found;
	struct dsml_match m;
};

/* The invoke being read. */
struct open_call {
	struct dsml_head m;
	struct finder end_f, nxt_f;
	bool has_end, has_nxt;
	struct dsml_match end_m;
	struct dsml_head nxt_m;
	size_t param_pos;
	bool pending;          /* a parameter whose closing tag has not come yet */
	struct dsml_head head;
	size_t close_scan;
	struct tf_dsml_call call;
};

/* An invoke read to its fixed end, usable or not. */
struct done_call {
	struct tf_dsml_call call;
	bool closed;
};

/* A usable call as sent. */
struct sent_call {
	char id[TF_DSML_ID_LEN + 1];
	const char *name; /* the offered spelling (the tools' storage) */
	size_t src;       /* its invoke: done[src], or the open one */
	size_t args;      /* arguments sent */
	bool closed;      /* its closing brace sent */
};

/* A delta before its text pointers are fixed (buffers move while a push
 * runs). */
struct pending_delta {
	enum tf_dsml_delta_kind kind;
	size_t index, off, len;
};

struct tf_dsml_stream {
	bool thinking, finished;
	bool consistent; /* equal to the whole parse for any split (dsml.h) */
	const struct tf_dsml_tools *tools;
	struct tf_buf text;
	size_t sent_reasoning, sent_content;
	bool in_calls;
	bool has_think_end;
	size_t think_end, think_scan;
	struct finder text_blk, rest_blk, close_blk;
	bool rest_set;
	size_t rest_at, resume_at;
	struct done_call *done;
	size_t ndone;
	size_t settled, settled_known;
	bool has_open;
	struct open_call open;
	struct sent_call *calls;
	size_t ncalls;
	struct pending_delta *pd;
	size_t npd, pd_cap; /* deltas has room for pd_cap too */
	struct tf_buf frags;
	struct tf_dsml_delta *deltas;
	struct tf_dsml_call *pub; /* tf_dsml_stream_calls' view */
};

static size_t sat_sub(size_t a, size_t b)
{
	return a > b ? a - b : 0;
}

static void finder_reset(struct finder *f, size_t from)
{
	*f = (struct finder){.from = from, .scanned = from};
}

static const struct dsml_match *finder_block(struct finder *f, const char *t, size_t len, bool close)
{
	if (!f->found) {
		size_t start = sat_sub(f->scanned, DSML_WINDOW);
		f->found = dsml_block_tag(t, start > f->from ? start : f->from, len, close, &f->m);
		f->scanned = len;
	}
	return f->found ? &f->m : NULL;
}

struct tf_dsml_stream *tf_dsml_stream_new(bool thinking, const struct tf_dsml_tools *tools)
{
	struct tf_dsml_stream *s = calloc(1, sizeof *s);
	if (s) {
		s->thinking = thinking;
		s->tools = tools;
	}
	return s;
}

void tf_dsml_stream_consistent(struct tf_dsml_stream *s, bool on)
{
	s->consistent = on;
}

/* What may still become a calls block's opening tag. */
static size_t hold(const struct tf_dsml_stream *s, const char *t, size_t len)
{
	return s->consistent ? dsml_hold_all(t, len) : dsml_hold(t, len);
}

void tf_dsml_stream_free(struct tf_dsml_stream *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->ndone; i++)
		dsml_call_release(&s->done[i].call);
	if (s->has_open)
		dsml_call_release(&s->open.call);
	free(s->done);
	free(s->calls);
	free(s->pd);
	free(s->deltas);
	free(s->pub);
	tf_buf_release(&s->text);
	tf_buf_release(&s->frags);
	free(s);
}

static tf_status emit(struct tf_dsml_stream *s, enum tf_dsml_delta_kind kind, size_t index, size_t off,
		      size_t len)
{
	if (s->npd == s->pd_cap) {
		size_t cap = s->pd_cap ? 2 * s->pd_cap : 8;
		struct pending_delta *pd = realloc(s->pd, cap * sizeof *pd);
		if (pd)
			s->pd = pd;
		struct tf_dsml_delta *d = pd ? realloc(s->deltas, cap * sizeof *d) : NULL;
		if (!d)
			return tf_err(TF_ERR_NOMEM, "DSML stream");
		s->deltas = d;
		s->pd_cap = cap;
	}
	s->pd[s->npd++] = (struct pending_delta){kind, index, off, len};
	return TF_OK;
}

/* The open invoke's parameters up to stop; one whose closing tag is still
 * missing is resumed next time. */
static tf_status read_params(struct tf_dsml_stream *s, const char *t, size_t stop)
{
	struct open_call *o = &s->open;
	for (;;) {
		if (!o->pending) {
			size_t again;
			size_t from = o->param_pos < stop ? o->param_pos : stop;
			if (!dsml_search(t, stop, from, dsml_param_at, &o->head, &again)) {
				o->param_pos = again > o->param_pos ? again : o->param_pos;
				return TF_OK;
			}
			o->pending = true;
			o->close_scan = o->head.end;
		}
		const struct dsml_head *h = &o->head;
		size_t from = sat_sub(o->close_scan, DSML_WINDOW);
		struct dsml_match c;
		if (!dsml_param_close(t, stop, from > h->end ? from : h->end, &c)) {
			o->close_scan = stop;
			return TF_OK;
		}
		o->pending = false;
		o->param_pos = c.end;
		if (dsml_has_arg(&o->call, t + h->name, h->name_len))
			continue;
		const json_t *prop =
			dsml_prop(s->tools, o->call.name, strlen(o->call.name), t + h->name, h->name_len);
		tf_status st = dsml_add_arg(&o->call, t + h->name, h->name_len,
					    dsml_param_value(t + h->end, c.start - h->end, h->string, prop));
		if (st)
			return st;
	}
}

/* The invokes of the body t[..to), resumed: those whose end is fixed are
 * read once and move to done. */
static tf_status read_calls(struct tf_dsml_stream *s, const char *t, size_t to, bool finished)
{
	for (;;) {
		struct open_call *o = &s->open;
		if (!s->has_open) {
			struct dsml_head m;
			size_t again;
			if (!dsml_search(t, to, s->resume_at < to ? s->resume_at : to, dsml_invoke_at, &m, &again)) {
				s->resume_at = again > s->resume_at ? again : s->resume_at;
				return TF_OK;
			}
			*o = (struct open_call){.m = m, .param_pos = m.end};
			finder_reset(&o->end_f, m.end);
			finder_reset(&o->nxt_f, m.end);
			tf_status st = dsml_call_init(&o->call, t + m.name, m.name_len);
			if (st)
				return st;
			s->has_open = true;
		}
		if (!o->has_end) {
			size_t start = sat_sub(o->end_f.scanned, DSML_WINDOW);
			o->has_end = dsml_invoke_end(t, start > o->end_f.from ? start : o->end_f.from, to, &o->end_m);
			o->end_f.scanned = to;
		}
		if (!o->has_nxt) {
			size_t from = o->nxt_f.scanned > o->nxt_f.from ? o->nxt_f.scanned : o->nxt_f.from;
			size_t again;
			o->has_nxt = dsml_search(t, to, from < to ? from : to, dsml_invoke_at, &o->nxt_m, &again);
			o->nxt_f.scanned = again;
		}
		size_t stop = o->has_end && (!o->has_nxt || o->end_m.start < o->nxt_m.start) ? o->end_m.start :
			      o->has_nxt ? o->nxt_m.start : to;
		/* The whole parse ends an invoke's parameters where the next invoke
		 * begins; an invoke header still arriving may begin inside a value
		 * whose closing tag is already here. A consistent stream reads
		 * parameters only up to such a header until it is settled (found,
		 * refused, or the reply ends). */
		size_t params_to = stop;
		if (s->consistent && !finished && !o->has_nxt && o->nxt_f.scanned < stop)
			params_to = o->nxt_f.scanned;
		tf_status st = read_params(s, t, params_to);
		if (st)
			return st;
		/* A call whose parameters are held back stays open: its end is
		 * known, but a header still arriving may end them sooner. */
		if (params_to < stop)
			return TF_OK;
		bool closed = o->has_end && stop == o->end_m.start;
		if (!closed && !o->has_nxt)
			return TF_OK;
		s->resume_at = closed ? o->end_m.end : stop;
		struct done_call *d = realloc(s->done, (s->ndone + 1) * sizeof *d);
		if (!d)
			return tf_err(TF_ERR_NOMEM, "DSML stream");
		s->done = d;
		d[s->ndone++] = (struct done_call){o->call, closed};
		s->has_open = false;
	}
}

static const struct tf_dsml_call *call_at(const struct tf_dsml_stream *s, size_t j, bool *closed)
{
	if (j < s->ndone) {
		*closed = s->done[j].closed;
		return &s->done[j].call;
	}
	*closed = false;
	return &s->open.call;
}

/* Call deltas: new calls open, finished parameters as fragments, closing
 * braces. Calls already sent whole are skipped. */
static tf_status emit_calls(struct tf_dsml_stream *s, bool finished)
{
	while (s->settled < s->ndone) {
		const struct tf_dsml_call *c = &s->done[s->settled].call;
		if (dsml_known(s->tools, c->name, strlen(c->name)) < 0) {
			s->settled++;
			continue;
		}
		if (s->settled_known == s->ncalls || !s->calls[s->settled_known].closed)
			break;
		s->settled_known++;
		s->settled++;
	}
	size_t k = s->settled_known, total = s->ndone + s->has_open;
	for (size_t j = s->settled; j < total; j++) {
		bool closed;
		const struct tf_dsml_call *c = call_at(s, j, &closed);
		long i = dsml_known(s->tools, c->name, strlen(c->name));
		if (i < 0)
			continue;
		tf_status st;
		if (k == s->ncalls) {
			struct sent_call *grown = realloc(s->calls, (s->ncalls + 1) * sizeof *grown);
			if (!grown)
				return tf_err(TF_ERR_NOMEM, "DSML stream");
			s->calls = grown;
			struct sent_call *n = &grown[s->ncalls++];
			*n = (struct sent_call){.name = s->tools->v[i].name, .src = j};
			memcpy(n->id, c->id, sizeof n->id);
			if ((st = emit(s, TF_DSML_CALL, k, 0, 0)))
				return st;
		}
		struct sent_call *mine = &s->calls[k];
		mine->src = j;
		size_t start = s->frags.len;
		for (size_t a = mine->args; a < c->nargs; a++)
			if ((st = dsml_fragment(&s->frags, a == 0, &c->args[a])))
				return st;
		mine->args = c->nargs;
		if ((closed || finished) && !mine->closed) {
			if ((st = tf_buf_puts(&s->frags, c->nargs ? "}" : "{}")))
				return st;
			mine->closed = true;
		}
		if (s->frags.len > start && (st = emit(s, TF_DSML_ARGS, k, start, s->frags.len - start)))
			return st;
		k++;
	}
	return TF_OK;
}

/* The deltas text[0..len) adds (a growth of the last text). */
static tf_status feed(struct tf_dsml_stream *s, size_t len, bool finished)
{
	const char *t = s->text.data ? s->text.data : "";
	bool offered = tf_dsml_tools_count(s->tools) > 0;
	/* a block tag ends unclosed reasoning (dsml_split); the reference's
	   stream looks for one only when tools were offered */
	bool blocks = offered || s->consistent;
	bool has_end = false, has_blk = false;
	const struct dsml_match *blk_all = NULL;
	tf_status st;
	if (s->thinking) {
		if (!s->has_think_end) {
			s->has_think_end =
				dsml_think_end(t, len, sat_sub(s->think_scan, THINK_END_LEN - 1), &s->think_end);
			s->think_scan = len;
		}
		has_end = s->has_think_end;
		blk_all = finder_block(&s->text_blk, t, len, false);
		has_blk = blk_all != NULL;
		if (!has_end && (!has_blk || !blocks)) {
			size_t h = dsml_partial(t, len, THINK_END);
			if (blocks) {
				size_t k = hold(s, t, len);
				/* a block ends the reasoning before the newlines ahead of
				   its tag (dsml_split); the reference sends a lone one */
				while (s->consistent && k && k < len && t[len - k - 1] == '\n')
					k++;
				h = k > h ? k : h;
			}
			size_t upto = finished ? len : len - h;
			if (upto > s->sent_reasoning) {
				if ((st = emit(s, TF_DSML_REASONING, 0, s->sent_reasoning, upto - s->sent_reasoning)))
					return st;
				s->sent_reasoning = upto;
			}
			return TF_OK;
		}
	}
	size_t r, rest_at;
	dsml_split(t, len, s->thinking, has_end, s->think_end, has_blk, blk_all, &r, &rest_at);
	if (r > s->sent_reasoning) {
		if ((st = emit(s, TF_DSML_REASONING, 0, s->sent_reasoning, r - s->sent_reasoning)))
			return st;
		s->sent_reasoning = r;
	}
	if (!s->rest_set || s->rest_at != rest_at) {
		s->rest_set = true;
		s->rest_at = rest_at;
		finder_reset(&s->rest_blk, rest_at);
	}
	const char *rest = t + rest_at;
	size_t rn = len - rest_at, limit;
	const struct dsml_match *blk = offered ? finder_block(&s->rest_blk, t, len, false) : NULL;
	if (blk) {
		limit = blk->start - rest_at;
		if (limit >= 2 && rest[limit - 1] == '\n' && rest[limit - 2] == '\n')
			limit -= 2;
	} else {
		limit = finished ? rn : rn - (offered ? hold(s, rest, rn) : 0);
	}
	if (limit > s->sent_content && !s->in_calls) {
		if ((st = emit(s, TF_DSML_CONTENT, 0, rest_at + s->sent_content, limit - s->sent_content)))
			return st;
		s->sent_content = limit;
	}
	if (!blk)
		return TF_OK;
	if (!s->in_calls) {
		s->in_calls = true;
		s->resume_at = blk->end;
		finder_reset(&s->close_blk, blk->end);
	}
	const struct dsml_match *close = finder_block(&s->close_blk, t, len, true);
	if ((st = read_calls(s, t, close ? close->start : len, finished)) || (st = emit_calls(s, finished)))
		return st;
	/* a block that gave no usable call is content after all, as the whole
	   parse has it (the reference's stream drops it) */
	if (finished && s->consistent && !s->ncalls && rn > s->sent_content) {
		if ((st = emit(s, TF_DSML_CONTENT, 0, rest_at + s->sent_content, rn - s->sent_content)))
			return st;
		s->sent_content = rn;
	}
	return TF_OK;
}

/* The length of s[0..n) without an incomplete trailing UTF-8 character. */
static size_t complete_utf8(const char *s, size_t n)
{
	for (size_t back = 1; back <= 4 && back <= n; back++) {
		unsigned char c = (unsigned char)s[n - back];
		if ((c & 0xc0) == 0x80)
			continue;
		size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
		return back < need ? n - back : n;
	}
	return n;
}

static tf_status run(struct tf_dsml_stream *s, bool finished, const struct tf_dsml_delta **deltas,
		     size_t *ndeltas)
{
	s->npd = 0;
	tf_buf_reset(&s->frags);
	size_t len = finished ? s->text.len : complete_utf8(s->text.data, s->text.len);
	tf_status st = feed(s, len, finished);
	if (st) {
		*deltas = NULL;
		*ndeltas = 0;
		return st;
	}
	for (size_t i = 0; i < s->npd; i++) {
		const struct pending_delta *p = &s->pd[i];
		struct tf_dsml_delta *d = &s->deltas[i];
		*d = (struct tf_dsml_delta){.kind = p->kind, .index = p->index, .len = p->len};
		if (p->kind == TF_DSML_CALL) {
			d->id = s->calls[p->index].id;
			d->name = s->calls[p->index].name;
		} else {
			d->text = (p->kind == TF_DSML_ARGS ? s->frags.data : s->text.data) + p->off;
		}
	}
	*deltas = s->deltas;
	*ndeltas = s->npd;
	return TF_OK;
}

tf_status tf_dsml_stream_push(struct tf_dsml_stream *s, const char *chunk, size_t n,
			      const struct tf_dsml_delta **deltas, size_t *ndeltas)
{
	*deltas = NULL;
	*ndeltas = 0;
	if (s->finished)
		return tf_err(TF_ERR_ARG, "DSML stream: text pushed after finish");
	tf_status st = tf_buf_append(&s->text, chunk, n);
	return st ? st : run(s, false, deltas, ndeltas);
}

tf_status tf_dsml_stream_finish(struct tf_dsml_stream *s, const char *chunk, size_t n,
				const struct tf_dsml_delta **deltas, size_t *ndeltas)
{
	*deltas = NULL;
	*ndeltas = 0;
	if (s->finished)
		return TF_OK;
	tf_status st = tf_buf_append(&s->text, chunk, n);
	if (st)
		return st;
	s->finished = true;
	return run(s, true, deltas, ndeltas);
}

const struct tf_dsml_call *tf_dsml_stream_calls(const struct tf_dsml_stream *s, size_t *ncalls)
{
	struct tf_dsml_stream *m = (struct tf_dsml_stream *)s; /* the view is a cache */
	struct tf_dsml_call *pub = s->ncalls ? realloc(m->pub, s->ncalls * sizeof *pub) : m->pub;
	*ncalls = 0;
	if (s->ncalls && !pub)
		return NULL;
	m->pub = pub;
	for (size_t k = 0; k < s->ncalls; k++) {
		bool closed;
		const struct tf_dsml_call *c = call_at(s, s->calls[k].src, &closed);
		pub[k] = (struct tf_dsml_call){.name = (char *)s->calls[k].name, .args = c->args,
					       .nargs = s->calls[k].args};
		memcpy(pub[k].id, s->calls[k].id, sizeof pub[k].id);
	}
	*ncalls = s->ncalls;
	return pub;
}

const char *tf_dsml_stream_text(const struct tf_dsml_stream *s, size_t *len)
{
	*len = s->text.len;
	return s->text.data ? s->text.data : "";
}
