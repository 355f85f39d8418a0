/* tf-engram-hash: token ids to DeepSeek-V4.1 Engram table rows; builds the
 * Engram host file from a tokenizer; prints decoded rows of a row shard;
 * writes synthetic shards; measures hashing and row fetches.
 *
 * Input ids: one sequence per line, space-separated ids or a JSON array
 * (what `tf-tokenize encode` writes, with or without --json); operands that
 * are numbers form one sequence instead. Each sequence is hashed on its own
 * (with --lookback ids before it, if given). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/cli.h"
#include "base/f16.h"
#include "base/json.h"
#include "base/log.h"
#include "base/num.h"
#include "base/progress.h"
#include "base/rng.h"
#include "model/config.h"
#include "model/engram_cut.h"
#include "model/engram_hash.h"
#include "model/engram_host.h"
#include "model/engram_layout.h"
#include "model/engram_map.h"
#include "model/engram_rows.h"
#include "model/engram_shard.h"
#include "pack/pack.h"
#include "text/tokenizer.h"

static const char *opt_config, *opt_host, *opt_tokenizer, *opt_lookback, *opt_format,
	*opt_output, *opt_pack;
static int64_t opt_rank, opt_world, opt_layer, opt_seed, opt_count;
static bool opt_json;

static const struct tf_opt opts[] = {
	{"config", 'c', TF_OPT_STR, &opt_config, "CONFIG", NULL, "release",
	 "model config: config.json, a folder holding it, or a preset (tiny|small|release)", 0,
	 0, NULL},
	{"host", 0, TF_OPT_STR, &opt_host, "FILE", "TF_ENGRAM_HOST", NULL,
	 "Engram host file (engram-host.bin) with the multipliers and token map", 0, 0, NULL},
	{"tokenizer", 't', TF_OPT_STR, &opt_tokenizer, "FILE", "TF_TOKENIZER", NULL,
	 "tokenizer.json to build the token map from (instead of --host)", 0, 0, NULL},
	TF_OPT_RANK(&opt_rank),
	TF_OPT_WORLD(&opt_world),
	{"lookback", 0, TF_OPT_STR, &opt_lookback, "IDS", NULL, NULL,
	 "up to max-ngram - 1 ids before each sequence, oldest first (\"5,6,7\")", 0, 0, NULL},
	{"format", 'f', TF_OPT_CHOICE, &opt_format, "FMT", NULL, "text",
	 "output: text lines, JSON lines, or raw little-endian values", 0, 0, "text|json|bin"},
	TF_OPT_JSON(&opt_json),
	{"output", 'o', TF_OPT_STR, &opt_output, "FILE", NULL, NULL,
	 "host, shard: the file to write", 0, 0, NULL},
	{"pack", 0, TF_OPT_STR, &opt_pack, "DIR", NULL, NULL,
	 "shard: cut the rows from this pack's Engram table (and take its config)", 0, 0, NULL},
	{"layer", 0, TF_OPT_INT, &opt_layer, "L", NULL, "-1",
	 "shard: the Engram layer (default: the first)", -1, 1 << 20, NULL},
	{"seed", 0, TF_OPT_INT, &opt_seed, "N", NULL, "1", "shard, bench: random seed", 0,
	 4e18, NULL},
	{"count", 'n', TF_OPT_INT, &opt_count, "N", NULL, "0",
	 "bench: positions to hash and rows to fetch (0: a default)", 0, 1LL << 32, NULL},
};

static const struct tf_cli cli = {
	"tf-engram-hash",
	"[OPTION]... [--host FILE | -t TOKENIZER] [IDS...|-]\n"
	"  or:  tf-engram-hash host -t TOKENIZER [-c CONFIG] -o FILE\n"
	"  or:  tf-engram-hash rows SHARD ROW...\n"
	"  or:  tf-engram-hash shard [-c CONFIG | --pack DIR] [--layer L] [--rank R --world W] -o FILE\n"
	"  or:  tf-engram-hash bench [--host FILE | -t TOKENIZER] [SHARD]",
	"Hash token ids to DeepSeek-V4.1 Engram table rows; build the host file; read shards.",
	"host|rows|shard|bench",
	opts,
	TF_NOPTS(opts),
};

/* The config named by -c: a preset, a config.json, or a folder with one. */
static void load_config(struct tf_config *c)
{
	struct stat sb;
	tf_status st;
	if (stat(opt_config, &sb) == 0) {
		char *path = S_ISDIR(sb.st_mode) ? tf_path_join(opt_config, "config.json")
						 : strdup(opt_config);
		if (!path)
			tf_die(71, "out of memory");
		st = tf_config_load(c, path);
		if (st)
			tf_die_status(st, "cannot use config '%s'", path);
		free(path);
	} else if (tf_config_preset(c, opt_config)) {
		tf_die(66, "config '%s' is neither a file, a folder nor a preset (%s)", opt_config,
		       tf_config_preset_names());
	}
	if ((st = tf_engram_config_check(c)))
		tf_die_status(st, "config '%s'", opt_config);
}

/* A host from --host, or built from -t. */
static void load_host(const struct tf_config *c, struct tf_engram_host *h)
{
	tf_status st;
	if (opt_host && opt_tokenizer)
		tf_usage_error("give --host or --tokenizer, not both");
	if (opt_host) {
		if ((st = tf_engram_host_read(opt_host, h)))
			tf_die_status(st, "cannot use host file");
		return;
	}
	if (!opt_tokenizer)
		tf_usage_error("needs --host FILE or --tokenizer FILE");
	struct tf_tok *tok;
	if ((st = tf_tok_load(opt_tokenizer, &tok)))
		tf_die_status(st, "cannot load tokenizer");
	uint32_t *map, vocab, compressed;
	if ((st = tf_engram_map_build(tok, &map, &vocab, &compressed)))
		tf_die_status(st, "cannot build the token map of '%s'", opt_tokenizer);
	tf_tok_free(tok);
	if ((st = tf_engram_host_init(h, c, map, vocab, compressed)))
		tf_die_status(st, "cannot build the Engram host");
	if (c->engram_compressed_vocab && compressed != c->engram_compressed_vocab)
		tf_log(TF_LOG_WARN,
		       "the token map has %u compressed ids, the config says %u: the "
		       "multipliers follow the map",
		       compressed, c->engram_compressed_vocab);
}

/* The hasher for the config and host; columns of --rank/--world. */
static void setup(struct tf_config *c, struct tf_engram_layout *lay, struct tf_engram_host *h,
		  struct tf_engram_hasher *hs, uint32_t *c0, uint32_t *c1)
{
	tf_status st;
	if (opt_rank >= opt_world)
		tf_usage_error("--rank %lld is not below --world %lld", (long long)opt_rank,
			       (long long)opt_world);
	load_config(c);
	if ((st = tf_engram_layout_init(lay, c)))
		tf_die_status(st, "config '%s'", opt_config);
	load_host(c, h);
	if ((st = tf_engram_hasher_init(hs, lay, h, c->engram_pad)))
		tf_die_status(st, "host and config '%s' disagree", opt_config);
	tf_engram_rank_cols(lay->cols, (uint32_t)opt_rank, (uint32_t)opt_world, c0, c1);
}

/* ---- hashing ---- */

struct ids {
	uint32_t *v;
	size_t n, cap;
};

static void push(struct ids *s, uint32_t id)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			tf_die(71, "out of memory");
	}
	s->v[s->n++] = id;
}

/* Append the ids of one line (space/comma separated, or a JSON array);
 * every id must be below the config's vocab. */
static void parse_line(const char *s, size_t len, const char *where, uint32_t vocab,
		       struct ids *out)
{
	size_t at = 0;
	while (at < len && (s[at] == ' ' || s[at] == '\t'))
		at++;
	if (at < len && s[at] == '[') {
		json_t *a;
		tf_status st = tf_json_parse(s, len, where, &a);
		if (st)
			tf_die(65, "%s", tf_errmsg(st));
		size_t i;
		json_t *v;
		if (!json_is_array(a))
			tf_die(65, "%s: not a JSON array of token ids", where);
		json_array_foreach(a, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				tf_die(65, "%s: item %zu is not a token id", where, i + 1);
			if (json_integer_value(v) >= vocab)
				tf_die(65, "%s: token id %lld is past the vocabulary (%u ids)", where,
				       (long long)json_integer_value(v), vocab);
			push(out, (uint32_t)json_integer_value(v));
		}
		json_decref(a);
		return;
	}
	while (at < len) {
		while (at < len && (s[at] == ' ' || s[at] == '\t' || s[at] == ',' || s[at] == '\r' ||
				    s[at] == '\n'))
			at++;
		if (at == len)
			break;
		size_t start = at;
		uint64_t v = 0;
		while (at < len && s[at] >= '0' && s[at] <= '9' && v < (1ULL << 40))
			v = v * 10 + (uint64_t)(s[at++] - '0');
		if (at == start || (at < len && !strchr(" \t,\r\n", s[at])))
			tf_die(65, "%s: '%.*s' is not a token id", where,
			       (int)strcspn(s + start, " \t,\r\n") > 24 ? 24
								      : (int)strcspn(s + start, " \t,\r\n"),
			       s + start);
		if (v >= vocab)
			tf_die(65, "%s: token id %llu is past the vocabulary (%u ids)", where,
			       (unsigned long long)v, vocab);
		push(out, (uint32_t)v);
	}
}

static void put_i64(struct tf_buf *b, int64_t v)
{
	char tmp[24];
	int n = 0;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		tmp[n++] = '-';
	while (n)
		tf_buf_putc(b, tmp[--n]);
}

/* Write one sequence's rows: rows [n][L][w], columns [c0, c0 + w). */
static void emit(const struct tf_engram_layout *lay, const int64_t *rows, size_t n, size_t w,
		 uint32_t c0, struct tf_buf *b)
{
	size_t per = lay->nlayers * w;
	if (!strcmp(opt_format, "bin")) {
		for (size_t i = 0; i < n * per; i++) {
			unsigned char x[8];
			for (int k = 0; k < 8; k++)
				x[k] = (unsigned char)((uint64_t)rows[i] >> (8 * k));
			tf_buf_append(b, x, 8);
		}
	} else if (!strcmp(opt_format, "json")) {
		tf_buf_printf(b, "{\"n\":%zu,\"layers\":[", n);
		for (uint32_t l = 0; l < lay->nlayers; l++)
			tf_buf_printf(b, "%s%u", l ? "," : "", lay->layer_ids[l]);
		tf_buf_printf(b, "],\"cols\":[%u,%zu],\"rows\":[", c0, c0 + w);
		for (size_t t = 0; t < n; t++) {
			tf_buf_puts(b, t ? ",[" : "[");
			for (uint32_t l = 0; l < lay->nlayers; l++) {
				tf_buf_puts(b, l ? ",[" : "[");
				for (size_t c = 0; c < w; c++) {
					if (c)
						tf_buf_putc(b, ',');
					put_i64(b, rows[t * per + l * w + c]);
				}
				tf_buf_putc(b, ']');
			}
			tf_buf_putc(b, ']');
		}
		tf_buf_puts(b, "]}\n");
	} else {
		/* a line per position, a blank line after each sequence */
		for (size_t t = 0; t < n; t++) {
			for (size_t i = 0; i < per; i++) {
				if (i)
					tf_buf_putc(b, ' ');
				put_i64(b, rows[t * per + i]);
			}
			tf_buf_putc(b, '\n');
		}
		tf_buf_putc(b, '\n');
	}
}

static void flush(struct tf_buf *b)
{
	if (b->len && fwrite(b->data, 1, b->len, stdout) != b->len)
		tf_die(74, "cannot write to standard output: %s", strerror(errno));
	tf_buf_reset(b);
}

static int cmd_hash(int argc, char **argv)
{
	struct tf_config c;
	struct tf_engram_layout lay;
	struct tf_engram_host h;
	struct tf_engram_hasher hs;
	uint32_t c0, c1;
	setup(&c, &lay, &h, &hs, &c0, &c1);
	size_t w = c1 - c0;

	struct ids lb = {0}, seq = {0};
	if (opt_lookback) {
		parse_line(opt_lookback, strlen(opt_lookback), "--lookback", c.vocab, &lb);
		if (lb.n > lay.max_ngram - 1)
			tf_usage_error("--lookback: %zu ids, at most %u are used", lb.n,
				       lay.max_ngram - 1);
	}
	struct tf_buf out = TF_BUF_INIT;
	int64_t *rows = NULL;
	size_t rows_cap = 0;
	bool from_args = argc > 0 && strcmp(argv[0], "-");
	FILE *in = stdin;
	struct stat sb;
	bool interactive = !from_args && fstat(0, &sb) == 0 && !S_ISREG(sb.st_mode);
	char *line = NULL;
	size_t line_cap = 0, lineno = 0;
	for (;;) {
		seq.n = 0;
		char where[64];
		if (from_args) {
			if (lineno++)
				break;
			for (int i = 0; i < argc; i++) {
				snprintf(where, sizeof(where), "argument %d", i + 1);
				parse_line(argv[i], strlen(argv[i]), where, c.vocab, &seq);
			}
		} else {
			ssize_t len = getline(&line, &line_cap, in);
			if (len < 0) {
				if (ferror(in))
					tf_die(74, "cannot read standard input: %s", strerror(errno));
				break;
			}
			snprintf(where, sizeof(where), "line %zu", ++lineno);
			parse_line(line, (size_t)len, where, c.vocab, &seq);
		}
		size_t need = seq.n * lay.nlayers * w;
		if (need > rows_cap) {
			rows_cap = need;
			if (!(rows = realloc(rows, rows_cap * sizeof(*rows))))
				tf_die(71, "out of memory");
		}
		tf_engram_hash(&hs, seq.v, seq.n, lb.v, lb.n, c0, c1, rows);
		emit(&lay, rows, seq.n, w, c0, &out);
		/* each sequence's rows leave before the next line is read, so a
		 * pipe partner (a coprocess) sees them at once */
		flush(&out);
		if (interactive && fflush(stdout))
			tf_die(74, "cannot write to standard output: %s", strerror(errno));
	}
	flush(&out);
	tf_buf_release(&out);
	free(line);
	free(rows);
	free(seq.v);
	free(lb.v);
	tf_engram_host_release(&h);
	return 0;
}

/* ---- host ---- */

static int cmd_host(int argc, char **argv)
{
	if (argc)
		tf_usage_error("host takes no operands ('%s')", argv[0]);
	if (!opt_tokenizer || opt_host)
		tf_usage_error("host needs --tokenizer FILE (and no --host)");
	if (!opt_output)
		tf_usage_error("host needs --output FILE");
	struct tf_config c;
	struct tf_engram_host h;
	load_config(&c);
	load_host(&c, &h);
	tf_status st = tf_engram_host_write(&h, opt_output);
	if (st)
		tf_die_status(st, "cannot write '%s'", opt_output);
	if (tf_cli_chatty())
		fprintf(stderr, "%s: %u token ids, %u compressed ids, %u layers\n", opt_output,
			h.vocab, h.compressed, h.nlayers);
	tf_engram_host_release(&h);
	return 0;
}

/* ---- rows ---- */

static int cmd_rows(int argc, char **argv)
{
	if (argc < 1)
		tf_usage_error("rows needs a SHARD and row numbers");
	struct tf_engram_shard *s;
	tf_status st = tf_engram_shard_open(argv[0], &s);
	if (st)
		tf_die_status(st, "cannot open shard");
	size_t n = (size_t)argc - 1;
	uint64_t *rows = calloc(n + 1, sizeof(*rows));
	uint8_t *raw = malloc((n + 1) * TF_ENGRAM_ROW_BYTES);
	uint16_t *vals = malloc((n + 1) * TF_ENGRAM_ROW_VALUES * sizeof(uint16_t));
	if (!rows || !raw || !vals)
		tf_die(71, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (tf_parse_u64(argv[i + 1], UINT64_MAX, false, &rows[i]))
			tf_die(65, "'%s' is not a row number", argv[i + 1]);
	if ((st = tf_engram_shard_fetch(s, rows, n, raw)))
		tf_die_status(st, "cannot fetch rows");
	tf_engram_rows_decode(raw, n, vals);
	struct tf_buf b = TF_BUF_INIT;
	for (size_t i = 0; i < n; i++) {
		const uint16_t *v = vals + i * TF_ENGRAM_ROW_VALUES;
		if (!strcmp(opt_format, "bin")) {
			for (int k = 0; k < TF_ENGRAM_ROW_VALUES; k++) {
				tf_buf_putc(&b, (char)(v[k] & 0xff));
				tf_buf_putc(&b, (char)(v[k] >> 8));
			}
		} else {
			bool json = !strcmp(opt_format, "json");
			tf_buf_printf(&b, json ? "{\"row\":%llu,\"values\":[" : "%llu:",
				      (unsigned long long)rows[i]);
			for (int k = 0; k < TF_ENGRAM_ROW_VALUES; k++) {
				float f = tf_bf16_to_f32(v[k]);
				const char *sep = json ? (k ? "," : "") : " ";
				if (json && !isfinite(f))
					tf_buf_printf(&b, "%snull", sep);
				else
					tf_buf_printf(&b, "%s%.9g", sep, (double)f);
			}
			tf_buf_puts(&b, json ? "]}\n" : "\n");
		}
		if (b.len > (1u << 20))
			flush(&b);
	}
	flush(&b);
	tf_buf_release(&b);
	free(rows);
	free(raw);
	free(vals);
	tf_engram_shard_close(s);
	return 0;
}

/* ---- shard ---- */

/* Row r's synthetic values: seeded by (seed, r), so every split of a table
 * into shards holds the same rows. */
static void synth_row(uint64_t seed, uint64_t r, uint8_t *row)
{
	struct tf_rng g;
	float v[TF_ENGRAM_ROW_VALUES];
	tf_rng_seed(&g, seed * 0x9e3779b97f4a7c15ull ^ r);
	for (int i = 0; i < TF_ENGRAM_ROW_VALUES; i++)
		v[i] = tf_rng_normal(&g) * 0.02f;
	tf_engram_row_encode(v, row);
}

/* Write a synthetic shard of rows h->lo .. h->hi - 1. */
static tf_status write_synth(const struct tf_engram_shard_header *h, const char *path,
			     struct tf_progress *pr)
{
	enum { BATCH = 4096 };
	struct tf_engram_shard_writer w;
	tf_status st = tf_engram_shard_create(&w, path, h);
	if (st)
		return st;
	uint8_t *buf = malloc((size_t)BATCH * TF_ENGRAM_ROW_BYTES);
	if (!buf) {
		tf_engram_shard_abort(&w);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	for (uint64_t r = h->lo; r < h->hi && !st;) {
		size_t k = 0;
		for (; k < BATCH && r < h->hi; k++, r++)
			synth_row((uint64_t)opt_seed, r, buf + k * TF_ENGRAM_ROW_BYTES);
		st = tf_engram_shard_append(&w, buf, k);
		tf_progress_add(pr, k);
	}
	free(buf);
	if (st) {
		tf_engram_shard_abort(&w);
		return st;
	}
	return tf_engram_shard_commit(&w);
}

static int cmd_shard(int argc, char **argv)
{
	if (argc)
		tf_usage_error("shard takes no operands ('%s')", argv[0]);
	if (!opt_output)
		tf_usage_error("shard needs --output FILE");
	if (opt_rank >= opt_world)
		tf_usage_error("--rank %lld is not below --world %lld", (long long)opt_rank,
			       (long long)opt_world);
	struct tf_config c;
	struct tf_engram_layout lay;
	struct tf_pack pack;
	tf_status st;
	if (opt_pack) {
		if ((st = tf_pack_open(&pack, opt_pack)))
			tf_die_status(st, "cannot open pack '%s'", opt_pack);
		if ((st = tf_config_from_json(&c, pack.config, opt_pack)) ||
		    (st = tf_engram_config_check(&c)))
			tf_die_status(st, "pack '%s'", opt_pack);
		opt_config = opt_pack;
	} else {
		load_config(&c);
	}
	if ((st = tf_engram_layout_init(&lay, &c)))
		tf_die_status(st, "config '%s'", opt_config);
	uint32_t l = 0;
	if (opt_layer >= 0) {
		while (l < lay.nlayers && lay.layer_ids[l] != (uint32_t)opt_layer)
			l++;
		if (l == lay.nlayers)
			tf_usage_error("--layer %lld is not an Engram layer of the config",
				       (long long)opt_layer);
	}
	/* -o DIR writes the standard name inside DIR */
	char name[64], *path = NULL;
	struct stat sb;
	tf_engram_shard_name(name, sizeof(name), lay.layer_ids[l], (uint32_t)opt_rank,
			     (uint32_t)opt_world);
	if (stat(opt_output, &sb) == 0 && S_ISDIR(sb.st_mode))
		path = tf_path_join(opt_output, name);
	else
		path = strdup(opt_output);
	if (!path)
		tf_die(71, "out of memory");

	uint32_t c0, c1;
	tf_engram_rank_cols(lay.cols, (uint32_t)opt_rank, (uint32_t)opt_world, &c0, &c1);
	struct tf_engram_shard_header h = {lay.layer_ids[l], 0, 0, lay.rows[l], TF_ENGRAM_ROW_BYTES};
	tf_engram_layout_span(&lay, l, c0, c1, &h.lo, &h.hi);
	struct tf_progress pr;
	tf_progress_init(&pr, "rows", h.hi - h.lo, NULL);
	if (opt_pack) {
		st = tf_engram_cut(&pack, &lay, l, (uint32_t)opt_rank, (uint32_t)opt_world, path, &pr);
		tf_pack_close(&pack);
	} else {
		st = write_synth(&h, path, &pr);
	}
	tf_progress_end(&pr);
	if (st)
		tf_die_status(st, "cannot write '%s'", path);
	if (tf_cli_chatty())
		fprintf(stderr, "%s: layer %u, rows %llu..%llu of %llu (columns %u..%u)\n", path,
			lay.layer_ids[l], (unsigned long long)h.lo, (unsigned long long)h.hi,
			(unsigned long long)h.total, c0, c1);
	free(path);
	return 0;
}

/* ---- bench ---- */

/* The anchor of the hashing benchmark: the same rows the obvious way (a
 * signed % per row, blocking re-derived per layer). Returns a checksum. */
static uint64_t naive_hash(const struct tf_engram_layout *lay, const struct tf_engram_host *h,
			   uint32_t pad_id, const uint32_t *ids, size_t n, int64_t *rows)
{
	uint64_t sum = 0;
	for (size_t t = 0; t < n; t++)
		for (uint32_t l = 0; l < lay->nlayers; l++) {
			int64_t roll = 0;
			bool blocked = false;
			for (uint32_t s = 0; s < lay->max_ngram; s++) {
				blocked = blocked || s > t || ids[t - s] >= h->vocab;
				int64_t v = h->map[blocked ? pad_id : ids[t - s]];
				roll ^= (int64_t)((uint64_t)v * (uint64_t)h->mult[l][s]);
				for (uint32_t k = 0; s && k < lay->heads; k++) {
					uint32_t c = (s - 1) * lay->heads + k;
					int64_t m = roll % lay->prime[l][c];
					m += m < 0 ? lay->prime[l][c] : 0;
					rows[(t * lay->nlayers + l) * lay->cols + c] = m + lay->offset[l][c];
				}
			}
			sum += (uint64_t)rows[(t * lay->nlayers + l + 1) * lay->cols - 1];
		}
	return sum;
}

/* Hash opt_count positions (windows of 4096 random ids, every column) on
 * this thread, then a quarter as many the naive way; the rows both give for
 * those positions must agree. */
static void bench_hash(const struct tf_config *c, const struct tf_engram_layout *lay,
		       const struct tf_engram_host *h, const struct tf_engram_hasher *hs,
		       struct tf_rng *g, bool json)
{
	size_t npos = opt_count ? (size_t)opt_count : 2000000, win = 4096;
	size_t nnaive = npos / 4 ? npos / 4 : 1, per = lay->nlayers * lay->cols;
	uint32_t *ids = malloc(win * 4);
	int64_t *rows = malloc(win * per * 8);
	if (!ids || !rows)
		tf_die(71, "out of memory");
	for (size_t i = 0; i < win; i++)
		ids[i] = (uint32_t)tf_rng_below(g, c->vocab);
	/* every window starts at ids[0] with no lookback, so position t of a
	 * window has the same rows however long the window is */
	uint64_t fast_sum = 0, naive_sum = 0;
	double t0 = tf_now();
	for (size_t done = 0; done < npos; done += win) {
		size_t n = npos - done < win ? npos - done : win;
		tf_engram_hash(hs, ids, n, NULL, 0, 0, lay->cols, rows);
		for (size_t t = 0; done + t < nnaive && t < n; t++)
			for (uint32_t l = 0; l < lay->nlayers; l++)
				fast_sum += (uint64_t)rows[(t * lay->nlayers + l + 1) * lay->cols - 1];
	}
	double dt = tf_now() - t0;
	t0 = tf_now();
	for (size_t done = 0; done < nnaive; done += win) {
		size_t n = nnaive - done < win ? nnaive - done : win;
		naive_sum += naive_hash(lay, h, c->engram_pad, ids, n, rows);
	}
	double dt2 = tf_now() - t0;
	if (fast_sum != naive_sum)
		tf_die(70, "bench: the fast and the naive hash disagree");
	double nrows = (double)npos * per, nrows2 = (double)nnaive * per;
	if (json)
		printf("{\"hash\":{\"positions\":%zu,\"rows\":%.0f,\"seconds\":%.6f,"
		       "\"rows_per_s\":%.0f,\"naive_rows_per_s\":%.0f}",
		       npos, nrows, dt, nrows / dt, nrows2 / dt2);
	else
		printf("hash: %zu positions, %.0f rows in %.3f s: %.1f M rows/s (one thread); "
		       "naive %%: %.1f M rows/s\n",
		       npos, nrows, dt, nrows / dt / 1e6, nrows2 / dt2 / 1e6);
	free(ids);
	free(rows);
}

/* Fetch opt_count random rows of a shard in batches of 1024. */
static void bench_fetch(const char *path, struct tf_rng *g, bool json)
{
	struct tf_engram_shard *s;
	tf_status st = tf_engram_shard_open(path, &s);
	if (st)
		tf_die_status(st, "cannot open shard");
	const struct tf_engram_shard_header *sh = tf_engram_shard_info(s);
	size_t nfetch = opt_count ? (size_t)opt_count : 200000, batch = 1024;
	uint64_t *want = malloc(batch * 8);
	uint8_t *raw = malloc(batch * TF_ENGRAM_ROW_BYTES);
	if (!want || !raw)
		tf_die(71, "out of memory");
	if (sh->hi == sh->lo)
		tf_die(65, "shard '%s' has no rows", path);
	double t0 = tf_now();
	for (size_t done = 0; done < nfetch; done += batch) {
		size_t n = nfetch - done < batch ? nfetch - done : batch;
		for (size_t i = 0; i < n; i++)
			want[i] = sh->lo + tf_rng_below(g, sh->hi - sh->lo);
		if ((st = tf_engram_shard_fetch(s, want, n, raw)))
			tf_die_status(st, "cannot fetch rows");
	}
	double dt = tf_now() - t0;
	if (json)
		printf(",\"fetch\":{\"backend\":\"%s\",\"rows\":%zu,\"batch\":%zu,"
		       "\"seconds\":%.6f,\"rows_per_s\":%.0f,\"bytes_per_s\":%.0f}",
		       tf_engram_shard_backend(s), nfetch, batch, dt, nfetch / dt,
		       nfetch * 264.0 / dt);
	else
		printf("fetch: %zu random rows of 264 B in batches of %zu (%s): %.0f rows/s, "
		       "%.1f MB/s\n",
		       nfetch, batch, tf_engram_shard_backend(s), nfetch / dt,
		       nfetch * 264.0 / dt / 1e6);
	free(want);
	free(raw);
	tf_engram_shard_close(s);
}

static int cmd_bench(int argc, char **argv)
{
	if (argc > 1)
		tf_usage_error("bench takes at most one SHARD");
	struct tf_config c;
	struct tf_engram_layout lay;
	struct tf_engram_host h;
	struct tf_engram_hasher hs;
	tf_status st;
	load_config(&c);
	if ((st = tf_engram_layout_init(&lay, &c)))
		tf_die_status(st, "config '%s'", opt_config);
	if (opt_host || opt_tokenizer) {
		load_host(&c, &h);
	} else {
		/* a synthetic map of the config's compressed size: 0, 1, .. cv-1, 0, .. */
		uint32_t cv = c.engram_compressed_vocab ? c.engram_compressed_vocab : c.vocab;
		if (cv > c.vocab)
			cv = c.vocab;
		uint32_t *map = malloc((size_t)c.vocab * 4);
		if (!map)
			tf_die(71, "out of memory");
		for (uint32_t i = 0; i < c.vocab; i++)
			map[i] = i % cv;
		if ((st = tf_engram_host_init(&h, &c, map, c.vocab, cv)))
			tf_die_status(st, "synthetic host");
	}
	if ((st = tf_engram_hasher_init(&hs, &lay, &h, c.engram_pad)))
		tf_die_status(st, "host and config disagree");
	bool json = !strcmp(opt_format, "json");
	struct tf_rng g;
	tf_rng_seed(&g, (uint64_t)opt_seed);
	bench_hash(&c, &lay, &h, &hs, &g, json);
	if (argc == 1)
		bench_fetch(argv[0], &g, json);
	if (json)
		printf("}\n");
	tf_engram_host_release(&h);
	return 0;
}

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	if (opt_json)
		opt_format = "json";
	argc -= first;
	argv += first;
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {{"host", cmd_host}, {"rows", cmd_rows}, {"shard", cmd_shard}, {"bench", cmd_bench}};
	if (argc > 0)
		for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
			if (!strcmp(argv[0], cmds[i].name))
				return cmds[i].fn(argc - 1, argv + 1);
	return cmd_hash(argc, argv);
}
