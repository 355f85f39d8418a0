/* synth_chain.c: a synthetic pack rewritten so that its DSpark drafts are
 * right (synth.h tf_synth_chain): the backbone's next token and the
 * drafts' follow one chain of the token's residue mod the Markov rank.
 *
 * The backbone: every block's branch writes zero (the svh of attn.wo_b,
 * of every ffn w2, shared and routed, and of engram.wkv are zero: an EXL3
 * output is (a·Ĥ)⊙svh), so the residual streams keep the embedding, and
 * embed[t] is 1 at column t mod R (R the Markov rank), 0 elsewhere; the
 * mixes only scale the streams, the final norm (weight 1) brings them back
 * to e_k, and the head maps e_k to fixed logits whose argmax f(k) is
 * computed here from the head's own weights (tf_exl3_matmul): the greedy
 * next token of t is f(t mod R). The drafts: the Markov head's embed[t] is
 * 256 at column t mod R, its head row f(k) 1 at column k, so the bias
 * adds 256 to f(prev mod R) and each draft is the backbone's own next
 * token. Everything else stays as tf_synth_write wrote it. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/f16.h"
#include "base/file.h"
#include "model/config.h"
#include "model/exl3.h"
#include "model/synth.h"
#include "pack/pack.h"

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && !strcmp(s + n - m, tail);
}

/* Overwrite tensor t's bytes in its shard with data (its whole size). */
static tf_status put(const struct tf_pack *p, const struct tf_pack_tensor *t, const void *data)
{
	const struct tf_st_file *sf = tf_pack_shard(p, t);
	int fd = open(sf->path, O_WRONLY);
	if (fd < 0)
		return tf_err(TF_ERR_IO, "chain: cannot open '%s'", sf->path);
	tf_status st = tf_file_pwrite(fd, data, (size_t)(t->t->end - t->t->begin),
				      sf->data_off + t->t->begin);
	close(fd);
	return st;
}

static tf_status find(const struct tf_pack *p, const char *name, size_t bytes,
		      const struct tf_pack_tensor **out)
{
	*out = tf_pack_find(p, name);
	if (!*out)
		return tf_err(TF_ERR_FORMAT, "chain: the pack has no '%s'", name);
	if ((size_t)((*out)->t->end - (*out)->t->begin) != bytes)
		return tf_err(TF_ERR_FORMAT, "chain: '%s' holds %llu bytes, not %zu", name,
			      (unsigned long long)((*out)->t->end - (*out)->t->begin), bytes);
	return TF_OK;
}

static tf_status read_all(const struct tf_pack *p, const char *name, size_t bytes, void *buf)
{
	const struct tf_pack_tensor *t;
	tf_status st = find(p, name, bytes, &t);
	return st ? st : tf_pack_read(p, t, 0, buf, bytes);
}

/* f(k) for k < R: the argmax of the head's logits of e_k. */
static tf_status head_targets(const struct tf_pack *p, const struct tf_config *c, int64_t R,
			      int32_t *f)
{
	const int64_t D = c->hidden, V = c->vocab;
	const struct tf_pack_tensor *tr = tf_pack_find(p, "head.trellis");
	if (!tr || tr->t->ndim != 3)
		return tf_err(TF_ERR_FORMAT, "chain: the pack's head is not an EXL3 group");
	struct tf_exl3_geom g = {(uint32_t)D, (uint32_t)V, (uint32_t)(tr->t->shape[2] / 16),
				 TF_EXL3_CB_3INST};
	for (int cb = 0; cb < 3; cb++) {
		char name[32];
		snprintf(name, sizeof name, "head.%s", tf_exl3_cb_name((enum tf_exl3_cb)cb));
		if (tf_pack_find(p, name))
			g.cb = (enum tf_exl3_cb)cb;
	}
	size_t tb = tf_exl3_trellis_bytes(&g);
	uint16_t *trellis = malloc(tb), *suh = malloc(2 * (size_t)D), *svh = malloc(2 * (size_t)V);
	float *x = calloc((size_t)(R * D), sizeof *x), *y = malloc(sizeof *y * (size_t)(R * V));
	tf_status st = trellis && suh && svh && x && y ? TF_OK
						     : tf_err(TF_ERR_NOMEM, "chain: out of memory");
	if (!st && !(st = read_all(p, "head.trellis", tb, trellis)) &&
	    !(st = read_all(p, "head.suh", 2 * (size_t)D, suh)) &&
	    !(st = read_all(p, "head.svh", 2 * (size_t)V, svh))) {
		for (int64_t k = 0; k < R; k++)
			x[k * D + k] = 1;
		struct tf_exl3_layer L = {g, trellis, suh, svh, NULL};
		st = tf_exl3_matmul(&L, x, (size_t)R, y, NULL);
	}
	for (int64_t k = 0; k < R && !st; k++) {
		int32_t b = 0;
		for (int64_t v = 1; v < V; v++)
			if (y[k * V + v] > y[k * V + b])
				b = (int32_t)v;
		f[k] = b;
	}
	free(trellis);
	free(suh);
	free(svh);
	free(x);
	free(y);
	return st;
}

tf_status tf_synth_chain(const char *dir, int32_t *targets, int max, int *rank)
{
	*rank = 0;
	struct tf_pack p;
	tf_status st = tf_pack_open(&p, dir);
	if (st)
		return st;
	struct tf_config c;
	int32_t *f = NULL;
	uint16_t *buf = NULL;
	if ((st = tf_config_from_json(&c, p.config, "config.json")))
		goto out;
	const int64_t D = c.hidden, V = c.vocab, R = c.dspark_markov_rank;
	if (!R || !c.mtp_layers) {
		st = tf_err(TF_ERR_CONFIG, "chain: the pack has no DSpark blocks");
		goto out;
	}
	if (R > D || R > max) {
		st = tf_err(TF_ERR_CONFIG, "chain: Markov rank %lld past the hidden size or %d",
			    (long long)R, max);
		goto out;
	}
	const size_t most = (size_t)(V * D) + 65536; /* u16s: the largest tensor patched */
	f = malloc(sizeof *f * (size_t)R);
	buf = calloc(most, sizeof *buf);
	if (!f || !buf) {
		st = tf_err(TF_ERR_NOMEM, "chain: out of memory");
		goto out;
	}
	if ((st = head_targets(&p, &c, R, f)))
		goto out;
	/* the branches write zero: every svh of those outputs */
	for (size_t i = 0; i < p.n && !st; i++) {
		const struct tf_pack_tensor *t = &p.tensors[i];
		const char *n = t->t->name;
		if (strncmp(n, "layers.", 7) ||
		    !(ends_with(n, ".attn.wo_b.svh") || ends_with(n, ".w2.svh") ||
		      ends_with(n, ".engram.wkv.svh")))
			continue;
		size_t bytes = (size_t)(t->t->end - t->t->begin);
		if (bytes > 2 * most) {
			st = tf_err(TF_ERR_FORMAT, "chain: '%s' is %zu bytes", n, bytes);
			break;
		}
		memset(buf, 0, bytes);
		st = put(&p, t, buf);
	}
	const struct tf_pack_tensor *t;
	const uint16_t one = tf_f32_to_bf16(1.0f), big = tf_f32_to_bf16(256.0f);
	/* the embedding: e_(t mod R) */
	if (!st && !(st = find(&p, "embed.weight", 2 * (size_t)(V * D), &t))) {
		memset(buf, 0, 2 * (size_t)(V * D));
		for (int64_t v = 0; v < V; v++)
			buf[v * D + v % R] = one;
		st = put(&p, t, buf);
	}
	if (!st && !(st = find(&p, "norm.weight", 2 * (size_t)D, &t))) {
		for (int64_t d = 0; d < D; d++)
			buf[d] = one;
		st = put(&p, t, buf);
	}
	/* the Markov head of every DSpark block */
	for (uint32_t b = 0; !st && b < c.mtp_layers; b++) {
		char name[96];
		snprintf(name, sizeof name, "mtp.%u.markov_head.embed.weight", b);
		if (!(st = find(&p, name, 2 * (size_t)(V * R), &t))) {
			memset(buf, 0, 2 * (size_t)(V * R));
			for (int64_t v = 0; v < V; v++)
				buf[v * R + v % R] = big;
			st = put(&p, t, buf);
		}
		snprintf(name, sizeof name, "mtp.%u.markov_head.head.weight", b);
		if (!st && !(st = find(&p, name, 2 * (size_t)(V * R), &t))) {
			memset(buf, 0, 2 * (size_t)(V * R));
			for (int64_t k = 0; k < R; k++)
				buf[(int64_t)f[k] * R + k] = one;
			st = put(&p, t, buf);
		}
	}
	for (int64_t k = 0; !st && k < R; k++)
		targets[k] = f[k];
	if (!st)
		*rank = (int)R;
out:
	free(f);
	free(buf);
	tf_pack_close(&p);
	return st;
}
