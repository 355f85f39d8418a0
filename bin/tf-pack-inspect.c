/* tf-pack-inspect: validate a DeepSeek-V4.1 EXL3 pack from its headers and
 * print its config, CSA2 modes, tensors, EXL3 widths and a rank's plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/json.h"
#include "base/log.h"
#include "base/progress.h"
#include "model/config.h"
#include "model/plan.h"
#include "pack/pack.h"

static struct {
	int64_t rank, world;
	bool json, summary;
} o;

static const struct tf_opt opts[] = {
	TF_OPT_RANK(&o.rank),
	TF_OPT_WORLD(&o.world),
	{"summary", 0, TF_OPT_FLAG, &o.summary, NULL, NULL, NULL,
	 "leave out the per-tensor list", 0, 0, NULL},
	TF_OPT_JSON(&o.json),
};

static const struct tf_cli cli = {
	"tf-pack-inspect", "[OPTION]... PACK",
	"Validate a DeepSeek-V4.1 EXL3 pack from its headers; print its config, layers, tensors, "
	"widths and a rank's plan.",
	NULL, opts, TF_NOPTS(opts),
};

/* The EXL3 width of a trellis tensor, 0 for others. */
static uint32_t trellis_bits(const struct tf_st_tensor *t)
{
	size_t n = strlen(t->name);
	if (n < 8 || strcmp(t->name + n - 8, ".trellis") || t->ndim != 3)
		return 0;
	return (uint32_t)(t->shape[2] / 16);
}

static json_t *shape_json(const struct tf_st_tensor *t)
{
	json_t *a = json_array();
	for (int i = 0; i < t->ndim; i++)
		json_array_append_new(a, json_integer((json_int_t)t->shape[i]));
	return a;
}

static json_t *config_json(const struct tf_config *c)
{
	return json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}",
			 "vocab", c->vocab, "hidden", c->hidden, "layers", c->layers, "mtp_layers",
			 c->mtp_layers, "heads", c->heads, "head_dim", c->head_dim, "q_lora",
			 c->q_lora, "o_lora", c->o_lora, "o_groups", c->o_groups, "window",
			 c->window, "experts", c->experts, "topk", c->topk, "expert_width",
			 c->expert_width, "index_topk", c->index_topk, "engram_layers", c->n_engram);
}

static json_t *layers_json(const struct tf_config *c)
{
	json_t *a = json_array();
	for (uint32_t l = 0; l < tf_config_all_layers(c); l++) {
		char block[TF_NAME_MAX];
		tf_names_block(c, l, block);
		json_array_append_new(a, json_pack("{s:i,s:s,s:s,s:i,s:i,s:i,s:b,s:i,s:i}", "layer", l,
			"block", block, "mode", tf_config_mode_name(tf_config_mode(c, l)), "ratio",
			tf_config_ratio(c, l), "kv_source", tf_config_kv_source(c, l), "index_source",
			tf_config_index_source(c, l), "engram", tf_config_is_engram(c, l), "experts",
			tf_config_experts_of(c, l), "topk", tf_config_topk_of(c, l)));
	}
	return a;
}

struct totals {
	uint64_t groups, trellis_bytes, weights, by_bits[9], by_cb[3];
};

/* Totals over every EXL3 group of the pack (all ranks' parts). */
static void count_groups(const struct tf_pack *pack, struct totals *t)
{
	for (size_t i = 0; i < pack->n; i++) {
		const struct tf_st_tensor *s = pack->tensors[i].t;
		uint32_t b = trellis_bits(s);
		if (!b || b > 8)
			continue;
		char name[TF_NAME_MAX + 16];
		size_t n = strlen(s->name) - strlen(".trellis");
		t->groups++;
		t->trellis_bytes += s->end - s->begin;
		t->weights += s->shape[0] * s->shape[1] * 256;
		t->by_bits[b]++;
		snprintf(name, sizeof name, "%.*s.mcg", (int)n, s->name);
		int cb = tf_pack_find(pack, name) ? 1 : 0;
		snprintf(name, sizeof name, "%.*s.mul1", (int)n, s->name);
		cb = tf_pack_find(pack, name) ? 2 : cb;
		t->by_cb[cb]++;
	}
}

static json_t *plan_json(const struct tf_plan *p, const struct tf_config *c)
{
	json_t *layers = json_array();
	for (uint32_t l = 0; l < tf_config_all_layers(c); l++) {
		const struct tf_plan_layer *x = &p->layers[l];
		json_array_append_new(layers, json_pack("{s:i,s:I,s:I,s:I,s:I,s:I}", "layer", l,
			"attn_bytes", (json_int_t)x->attn_bytes, "expert_bytes",
			(json_int_t)x->expert_bytes, "shared_bytes", (json_int_t)x->shared_bytes,
			"other_bytes", (json_int_t)x->other_bytes, "native_bytes",
			(json_int_t)x->native_bytes));
	}
	return json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "rank", p->rank, "world",
			 p->world, "groups", (json_int_t)p->ngroups, "natives",
			 (json_int_t)p->nnatives, "group_bytes", (json_int_t)p->group_bytes,
			 "native_bytes", (json_int_t)p->native_bytes, "engram_table_bytes",
			 (json_int_t)p->engram_bytes, "total_bytes", (json_int_t)p->total_bytes,
			 "layers", layers);
}

static void print_json(const struct tf_pack *pack, const struct tf_config *c,
		       const struct tf_plan *p, const struct totals *t, double secs)
{
	json_t *root = json_pack("{s:s,s:o,s:o}", "pack", pack->dir, "config", config_json(c),
				 "layers", layers_json(c));
	if (!o.summary) {
		json_t *ts = json_array();
		for (size_t i = 0; i < pack->n; i++) {
			const struct tf_st_tensor *s = pack->tensors[i].t;
			json_t *e = json_pack("{s:s,s:s,s:o,s:I,s:s}", "name", s->name, "dtype",
					      tf_dtype_name(s->dtype), "shape", shape_json(s), "bytes",
					      (json_int_t)(s->end - s->begin), "shard",
					      pack->shard_names[pack->tensors[i].shard]);
			if (trellis_bits(s))
				json_object_set_new(e, "bits", json_integer(trellis_bits(s)));
			json_array_append_new(ts, e);
		}
		json_object_set_new(root, "tensors", ts);
	}
	json_t *bits = json_object();
	for (int b = 1; b <= 8; b++)
		if (t->by_bits[b]) {
			char k[4];
			snprintf(k, sizeof k, "%d", b);
			json_object_set_new(bits, k, json_integer((json_int_t)t->by_bits[b]));
		}
	json_object_set_new(root, "group_bits", bits);
	json_object_set_new(root, "codebooks", json_pack("{s:I,s:I,s:I}", "3inst",
		(json_int_t)t->by_cb[0], "mcg", (json_int_t)t->by_cb[1], "mul1",
		(json_int_t)t->by_cb[2]));
	json_object_set_new(root, "totals", json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:f}",
		"tensors", (json_int_t)pack->n, "shards", (json_int_t)pack->nshards, "tensor_bytes",
		(json_int_t)pack->total_bytes, "file_bytes", (json_int_t)pack->file_bytes, "groups",
		(json_int_t)t->groups, "trellis_bytes", (json_int_t)t->trellis_bytes, "bits_per_weight",
		t->weights ? 8.0 * (double)t->trellis_bytes / (double)t->weights : 0.0, "ignored",
		(json_int_t)p->nignored, "seconds", secs));
	json_object_set_new(root, "plan", plan_json(p, c));
	tf_json_print(stdout, root, true);
	json_decref(root);
}

static void print_text(const struct tf_pack *pack, const struct tf_config *c,
		       const struct tf_plan *p, const struct totals *t)
{
	printf("pack %s: %zu tensors in %zu shards, %.3f GB of tensor data\n", pack->dir, pack->n,
	       pack->nshards, (double)pack->total_bytes / 1e9);
	printf("config: vocab %u, hidden %u, layers %u + %u MTP, heads %u x %u, q_lora %u, "
	       "o_lora %u x %u groups, window %u\n", c->vocab, c->hidden, c->layers, c->mtp_layers,
	       c->heads, c->head_dim, c->q_lora, c->o_lora, c->o_groups, c->window);
	printf("moe: %u experts, top %u, width %u, 1 shared; index: %u heads x %u, top %u; "
	       "engram layers:", c->experts, c->topk, c->expert_width, c->index_heads,
	       c->index_dim, c->index_topk);
	for (uint32_t i = 0; i < c->n_engram; i++)
		printf(" %u", c->engram_layers[i]);
	printf("\n\nlayer block     mode     ratio kv ix experts\n");
	for (uint32_t l = 0; l < tf_config_all_layers(c); l++) {
		char block[TF_NAME_MAX];
		tf_names_block(c, l, block);
		printf("%5u %-9s %-8s %5u %2d %2d %4u/%u%s\n", l, block,
		       tf_config_mode_name(tf_config_mode(c, l)), tf_config_ratio(c, l),
		       tf_config_kv_source(c, l), tf_config_index_source(c, l),
		       tf_config_topk_of(c, l), tf_config_experts_of(c, l),
		       tf_config_is_engram(c, l) ? " engram" : "");
	}
	if (!o.summary) {
		printf("\n%-56s %-5s %-22s %4s %12s\n", "tensor", "dtype", "shape", "bits", "bytes");
		for (size_t i = 0; i < pack->n; i++) {
			const struct tf_st_tensor *s = pack->tensors[i].t;
			char shape[64] = "[";
			size_t n = 1;
			for (int d = 0; d < s->ndim; d++)
				n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%llu", d ? "," : "",
						      (unsigned long long)s->shape[d]);
			snprintf(shape + n, sizeof shape - n, "]");
			uint32_t b = trellis_bits(s);
			char bits[8] = "-";
			if (b)
				snprintf(bits, sizeof bits, "%u", b);
			printf("%-56s %-5s %-22s %4s %12llu\n", s->name, tf_dtype_name(s->dtype), shape,
			       bits, (unsigned long long)(s->end - s->begin));
		}
	}
	printf("\nEXL3 groups: %llu, %.3f bits per weight;", (unsigned long long)t->groups,
	       t->weights ? 8.0 * (double)t->trellis_bytes / (double)t->weights : 0.0);
	for (int b = 1; b <= 8; b++)
		if (t->by_bits[b])
			printf(" %d-bit %llu", b, (unsigned long long)t->by_bits[b]);
	printf("\ncodebooks: 3inst %llu, mcg %llu, mul1 %llu\n", (unsigned long long)t->by_cb[0],
	       (unsigned long long)t->by_cb[1], (unsigned long long)t->by_cb[2]);
	printf("\nplan for rank %u of %u: %.3f GB (EXL3 %.3f GB, natives %.3f GB); Engram tables "
	       "%.3f GB read by row\n", p->rank, p->world, (double)p->total_bytes / 1e9,
	       (double)p->group_bytes / 1e9, (double)p->native_bytes / 1e9,
	       (double)p->engram_bytes / 1e9);
	printf("layer %14s %14s %14s %14s %14s\n", "attn", "experts", "shared", "other", "natives");
	for (uint32_t l = 0; l < tf_config_all_layers(c); l++) {
		const struct tf_plan_layer *x = &p->layers[l];
		printf("%5u %14llu %14llu %14llu %14llu %14llu\n", l,
		       (unsigned long long)x->attn_bytes, (unsigned long long)x->expert_bytes,
		       (unsigned long long)x->shared_bytes, (unsigned long long)x->other_bytes,
		       (unsigned long long)x->native_bytes);
	}
}

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	if (first != argc - 1)
		tf_usage_error(first >= argc ? "no pack folder given" : "more than one pack given");
	const char *dir = argv[first];
	if (o.rank >= o.world)
		tf_usage_error("--rank %lld is not below --world %lld", (long long)o.rank,
			       (long long)o.world);

	double t0 = tf_now();
	struct tf_pack pack;
	tf_status st = tf_pack_open(&pack, dir);
	if (st)
		tf_die_status(st, "bad pack '%s'", dir);
	tf_log(TF_LOG_INFO, "read %zu shard headers in %.3f s", pack.nshards, tf_now() - t0);
	struct tf_config c;
	if ((st = tf_config_from_json(&c, pack.config, "config.json")))
		tf_die(65, "bad pack '%s': %s", dir, tf_errmsg(st));
	/* The plan checks every tensor of every rank's part, so one plan also
	 * validates the whole pack. */
	struct tf_plan p;
	if ((st = tf_plan_build(&p, &c, &pack, (uint32_t)o.rank, (uint32_t)o.world)))
		tf_die(st == TF_ERR_CONFIG ? 78 : 65, "%s '%s': %s",
		       st == TF_ERR_CONFIG ? "cannot plan this rank of" : "bad pack", dir,
		       tf_errmsg(st));
	struct totals t = {0};
	count_groups(&pack, &t);
	tf_log(TF_LOG_INFO, "planned in %.3f s", tf_now() - t0);
	double secs = tf_now() - t0;
	if (o.json)
		print_json(&pack, &c, &p, &t, secs);
	else
		print_text(&pack, &c, &p, &t);
	tf_log(TF_LOG_INFO, "inspected '%s' in %.3f s", dir, secs);
	tf_plan_release(&p);
	tf_pack_close(&pack);
	return 0;
}
