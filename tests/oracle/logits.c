/* logits.c: the C side of the oracle comparison (tests/oracle/run.sh).
 * Opens a pack on the CPU backend (compute/model.h), runs one sequence's
 * prefill of the given ids at positions 0..R-1, and writes the logits
 * [R, vocab] as a float32 .npy file. A test driver, not a program: it is
 * built into build/tests/oracle/ and never installed.
 *
 *   logits [--kv fp8|bf16] [--pool fp8|fp4|bf16] [--index fp8|bf16]
 *          [--chunk N] [-j N] PACK IDS OUT.npy
 *
 *   logits --quant FMT [--dim N] [--rope N] IN.f32 OUT.f32
 *
 * IDS is a comma-separated list. --chunk runs the prefill in calls of N
 * rows (default: one call). --quant instead passes raw f32 rows of --dim
 * values through the cache's row format FMT (kv.h: window and pool rows
 * with a --rope bf16 tail; "ik-fp8"/"ik-bf16" for index keys) and writes
 * what a read gives back, so the oracle's formats can be checked exactly. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/file.h"
#include "base/num.h"
#include "base/status.h"
#include "compute/model.h"

static enum tf_kv_row_fmt fmt_of(const char *s)
{
	return !strcmp(s, "bf16") ? TF_KV_BF16 : !strcmp(s, "fp4") ? TF_KV_FP4 : TF_KV_FP8;
}

static int quant(const char *fmt, int dim, int rope, const char *in, const char *out)
{
	char *data;
	size_t len;
	tf_status st = tf_file_read_all(in, (size_t)1 << 30, &data, &len);
	if (st)
		tf_die_status(st, "%s", in);
	size_t rows = len / sizeof(float) / (size_t)dim;
	bool ik = !strncmp(fmt, "ik-", 3);
	enum tf_kv_row_fmt f = fmt_of(ik ? fmt + 3 : fmt);
	size_t bytes = ik ? tf_kv_ik_bytes(f, dim) : tf_kv_row_bytes(f, dim, rope);
	float *x = (float *)(void *)data;
	uint8_t *q = malloc(bytes);
	if (!q)
		tf_die(70, "out of memory");
	for (size_t r = 0; r < rows; r++) {
		float *row = x + r * (size_t)dim;
		if (ik) {
			tf_kv_ik_encode(f, row, dim, q);
			tf_kv_ik_decode(f, q, dim, row);
		} else {
			tf_kv_row_encode(f, row, dim, rope, q);
			tf_kv_row_decode(f, q, dim, rope, row);
		}
	}
	free(q);
	if ((st = tf_file_write_atomic(out, x, rows * (size_t)dim * sizeof *x)))
		tf_die_status(st, "%s", out);
	free(data);
	return 0;
}

static int32_t *parse_ids(const char *s, int *n)
{
	int cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	int32_t *ids = malloc((size_t)cap * sizeof *ids);
	char *dup = strdup(s), *save = NULL;
	if (!ids || !dup)
		tf_die(70, "out of memory");
	*n = 0;
	for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int64_t v;
		if (tf_parse_i64(t, 0, INT32_MAX, false, &v) != TF_OK)
			tf_usage_error("bad token id '%s'", t);
		ids[(*n)++] = (int32_t)v;
	}
	free(dup);
	if (*n == 0)
		tf_usage_error("no token ids");
	return ids;
}

/* A version-1.0 .npy header: magic, version, header length, the dict
 * padded with spaces to a multiple of 64 and ending in a newline. */
static tf_status write_npy(const char *path, const float *x, int rows, int cols)
{
	char dict[128], head[192];
	int n = snprintf(dict, sizeof dict,
			 "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows,
			 cols);
	int total = (10 + n + 1 + 63) / 64 * 64;
	memcpy(head, "\x93NUMPY\x01\x00", 8);
	head[8] = (char)((total - 10) & 0xff);
	head[9] = (char)((total - 10) >> 8);
	memcpy(head + 10, dict, (size_t)n);
	memset(head + 10 + n, ' ', (size_t)(total - 10 - n - 1));
	head[total - 1] = '\n';
	size_t body = (size_t)rows * cols * sizeof *x;
	char *buf = malloc(total + body);
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "logits: %zu bytes", body);
	memcpy(buf, head, (size_t)total);
	memcpy(buf + total, x, body);
	tf_status st = tf_file_write_atomic(path, buf, total + body);
	free(buf);
	return st;
}

int main(int argc, char **argv)
{
	const char *kv = "fp8", *pool = "fp8", *index = "fp8", *qfmt = NULL;
	int64_t chunk = 0, threads = 0, dim = 128, rope = 32;
	static const struct tf_opt opts[] = {
		{"kv", 0, TF_OPT_CHOICE, NULL, "FMT", NULL, "fp8", "window rows", 0, 0, "fp8|bf16"},
		{"pool", 0, TF_OPT_CHOICE, NULL, "FMT", NULL, "fp8", "pool rows", 0, 0,
		 "fp8|fp4|bf16"},
		{"index", 0, TF_OPT_CHOICE, NULL, "FMT", NULL, "fp8", "index keys", 0, 0, "fp8|bf16"},
		{"chunk", 0, TF_OPT_INT, NULL, "N", NULL, "0", "rows per call (0: all)", 0, 1 << 20,
		 NULL},
		TF_OPT_THREADS(NULL),
		{"quant", 0, TF_OPT_CHOICE, NULL, "FMT", NULL, NULL, "pass f32 rows through a format",
		 0, 0, "fp8|fp4|bf16|ik-fp8|ik-bf16"},
		{"dim", 0, TF_OPT_INT, NULL, "N", NULL, "128", "row width (--quant)", 1, 1 << 16, NULL},
		{"rope", 0, TF_OPT_INT, NULL, "N", NULL, "32", "bf16 tail (--quant)", 0, 1 << 16, NULL},
	};
	struct tf_opt o[TF_NOPTS(opts)];
	memcpy(o, opts, sizeof opts);
	o[0].dst = &kv;
	o[1].dst = &pool;
	o[2].dst = &index;
	o[3].dst = &chunk;
	o[4].dst = &threads;
	o[5].dst = &qfmt;
	o[6].dst = &dim;
	o[7].dst = &rope;
	struct tf_cli cli = {"logits", "[OPTION]... PACK IDS OUT.npy",
			     "prefill logits of the CPU forward, for the oracle", NULL, o,
			     TF_NOPTS(o)};
	int i = tf_cli_parse(&cli, argc, argv);
	if (qfmt) {
		if (argc - i != 2 || rope > dim)
			tf_usage_error("want --quant FMT IN.f32 OUT.f32 (rope <= dim)");
		return quant(qfmt, (int)dim, (int)rope, argv[i], argv[i + 1]);
	}
	if (argc - i != 3)
		tf_usage_error("want PACK IDS OUT.npy");
	int R;
	int32_t *ids = parse_ids(argv[i + 1], &R);

	struct tf_model_opts mo = {.threads = (int)threads, .slots = 1,
				   .max_positions = (R + 255) / 256 * 256,
				   .window_fmt = fmt_of(kv), .pool_fmt = fmt_of(pool),
				   .index_fmt = fmt_of(index)};
	struct tf_model *m = NULL;
	tf_status st = tf_model_open(argv[i], &mo, &m);
	if (st)
		tf_die_status(st, "%s", argv[i]);
	uint32_t V = tf_model_config(m)->vocab;
	float *logits = malloc((size_t)R * V * sizeof *logits);
	int64_t *pos = malloc((size_t)R * sizeof *pos);
	int *seq = malloc((size_t)R * sizeof *seq);
	if (!logits || !pos || !seq)
		tf_die(70, "out of memory");
	int s;
	if ((st = tf_model_seq_new(m, &s)))
		tf_die_status(st, "sequence");
	for (int r = 0; r < R; r++) {
		pos[r] = r;
		seq[r] = s;
	}
	int step = chunk > 0 ? (int)chunk : R;
	for (int r = 0; r < R; r += step) {
		int n = R - r < step ? R - r : step;
		if ((st = tf_model_forward(m, n, ids + r, pos + r, seq + r, logits + (size_t)r * V)))
			tf_die_status(st, "forward at row %d", r);
	}
	if ((st = write_npy(argv[i + 2], logits, R, (int)V)))
		tf_die_status(st, "%s", argv[i + 2]);
	tf_model_seq_free(m, s);
	tf_model_free(m);
	free(logits);
	free(pos);
	free(seq);
	free(ids);
	return 0;
}
