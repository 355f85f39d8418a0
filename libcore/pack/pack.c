/* pack.c: pack folders: index, shards, the tensor directory. */
#include "pack/pack.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/json.h"
#include "base/thread.h"

#define CONFIG_MAX (16u << 20)
#define INDEX_MAX (256u << 20)

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

static tf_status add_shard_name(struct tf_pack *p, size_t *cap, const char *name)
{
	for (size_t i = 0; i < p->nshards; i++)
		if (!strcmp(p->shard_names[i], name))
			return TF_OK;
	if (strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, "."))
		return tf_err(TF_ERR_FORMAT, "'%s/%s': shard name '%s' is not a plain file name",
			      p->dir, TF_PACK_INDEX, name);
	if (p->nshards == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		if (tf_realloc_array(&p->shard_names, *cap, sizeof *p->shard_names))
			return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	if (!(p->shard_names[p->nshards] = strdup(name)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	p->nshards++;
	return TF_OK;
}

/* Shards from the index's weight_map, or from the folder listing. */
static tf_status list_shards(struct tf_pack *p, json_t **weight_map, json_t **index)
{
	size_t cap = 0;
	tf_status st;
	char *ipath = tf_path_join(p->dir, TF_PACK_INDEX);
	if (!ipath)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	if (tf_file_exists(ipath)) {
		p->has_index = true;
		st = tf_json_load(ipath, INDEX_MAX, index);
		free(ipath);
		if (st)
			return st;
		*weight_map = json_object_get(*index, "weight_map");
		if (!json_is_object(*weight_map))
			return tf_err(TF_ERR_FORMAT, "'%s/%s': no weight_map object", p->dir,
				      TF_PACK_INDEX);
		const char *k;
		json_t *v;
		json_object_foreach(*weight_map, k, v) {
			if (!json_is_string(v))
				return tf_err(TF_ERR_FORMAT, "'%s/%s': weight_map['%s'] is not a "
					      "file name", p->dir, TF_PACK_INDEX, k);
			if ((st = add_shard_name(p, &cap, json_string_value(v))))
				return st;
		}
	} else {
		free(ipath);
		DIR *d = opendir(p->dir);
		if (!d)
			return tf_err_errno(TF_ERR_NOTFOUND, "cannot open pack folder '%s'", p->dir);
		struct dirent *e;
		st = TF_OK;
		while (!st && (e = readdir(d)))
			if (e->d_name[0] != '.' && ends_with(e->d_name, ".safetensors"))
				st = add_shard_name(p, &cap, e->d_name);
		closedir(d);
		if (st)
			return st;
	}
	if (!p->nshards)
		return tf_err(TF_ERR_FORMAT, "'%s': no safetensors shards", p->dir);
	qsort(p->shard_names, p->nshards, sizeof *p->shard_names, cmp_str);
	return TF_OK;
}

struct open_job {
	struct tf_pack *p;
	tf_status *st;
	char (*msg)[512];
};

static void open_some(void *ctx, size_t b, size_t e, int worker)
{
	struct open_job *j = ctx;
	for (size_t s = b; s < e; s++) {
		char *path = tf_path_join(j->p->dir, j->p->shard_names[s]);
		j->st[s] = path ? tf_st_open(&j->p->shards[s], path)
				: tf_err(TF_ERR_NOMEM, "out of memory");
		if (j->st[s])
			snprintf(j->msg[s], sizeof j->msg[s], "%s", tf_errmsg(j->st[s]));
		free(path);
	}
}

/* Read and validate every shard header, several at once: a release pack's
 * 50 headers hold 178k tensors. The first failure in shard order wins, so
 * the message does not depend on timing. */
static tf_status open_shards(struct tf_pack *p, json_t *weight_map)
{
	tf_status *sts = tf_calloc(p->nshards, sizeof *sts);
	char (*msgs)[512] = tf_calloc(p->nshards, sizeof *msgs);
	struct tf_pool *pool = NULL;
	tf_status st = sts && msgs ? TF_OK : tf_err(TF_ERR_NOMEM, "out of memory");
	if (!st && p->nshards > 1)
		st = tf_pool_new(p->nshards < 8 ? (int)p->nshards : 8, &pool);
	if (!st) {
		struct open_job j = {p, sts, msgs};
		tf_pool_for(pool, p->nshards, 1, open_some, &j);
	}
	for (size_t s = 0; !st && s < p->nshards; s++) {
		if (!sts[s])
			continue;
		st = tf_err(sts[s], "%s", msgs[s]);
		if (st == TF_ERR_NOTFOUND) {
			const char *k = "?";
			json_t *v;
			json_object_foreach(weight_map, k, v)
				if (!strcmp(json_string_value(v), p->shard_names[s]))
					break;
			st = tf_err(TF_ERR_FORMAT, "'%s/%s': shard named by the index (for tensor "
				    "'%s') does not exist", p->dir, p->shard_names[s], k ? k : "?");
		}
	}
	tf_pool_free(pool);
	free(sts);
	free(msgs);
	return st;
}

tf_status tf_pack_open(struct tf_pack *p, const char *dir)
{
	memset(p, 0, sizeof *p);
	tf_hmap_init(&p->by_name, TF_HMAP_STR);
	json_t *index = NULL, *weight_map = NULL;
	char *path = NULL;
	tf_status st;
	if (!(p->dir = strdup(dir)))
		return tf_err(TF_ERR_NOMEM, "out of memory");

	if (!(path = tf_path_join(dir, "config.json"))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (!tf_file_exists(dir)) {
		st = tf_err(TF_ERR_NOTFOUND, "pack folder '%s' does not exist", dir);
		goto out;
	}
	if ((st = tf_json_load(path, CONFIG_MAX, &p->config))) {
		if (st == TF_ERR_NOTFOUND)
			st = tf_err(TF_ERR_FORMAT, "'%s': the pack has no config.json", path);
		goto out;
	}
	if (!json_is_object(p->config)) {
		st = tf_err(TF_ERR_FORMAT, "'%s': not a JSON object", path);
		goto out;
	}
	if (!(p->tokenizer_path = tf_path_join(dir, "tokenizer.json"))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (!tf_file_exists(p->tokenizer_path)) {
		st = tf_err(TF_ERR_FORMAT, "'%s': the pack has no tokenizer.json", p->tokenizer_path);
		goto out;
	}
	if ((st = list_shards(p, &weight_map, &index)))
		goto out;

	p->shards = tf_calloc(p->nshards, sizeof *p->shards);
	if (!p->shards) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((st = open_shards(p, weight_map)))
		goto out;
	size_t total = 0;
	for (size_t s = 0; s < p->nshards; s++) {
		total += p->shards[s].n;
		p->file_bytes += p->shards[s].file_size;
	}
	if (!(p->tensors = tf_calloc(total ? total : 1, sizeof *p->tensors))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t s = 0; s < p->nshards; s++) {
		const struct tf_st_file *f = &p->shards[s];
		for (size_t i = 0; i < f->n; i++) {
			const struct tf_st_tensor *t = &f->t[i];
			if (weight_map) {
				json_t *where = json_object_get(weight_map, t->name);
				if (!where) {
					st = tf_err(TF_ERR_FORMAT, "'%s': tensor '%s' is not in the "
						    "index's weight_map", f->path, t->name);
					goto out;
				}
				if (strcmp(json_string_value(where), p->shard_names[s]))
					continue; /* the index places it in another shard */
			}
			uintptr_t prev;
			if (tf_hmap_get_str(&p->by_name, t->name, strlen(t->name), &prev)) {
				st = tf_err(TF_ERR_FORMAT, "'%s': tensor '%s' is also in '%s'", f->path,
					    t->name, p->shard_names[p->tensors[prev].shard]);
				goto out;
			}
			p->tensors[p->n] = (struct tf_pack_tensor){t, (uint32_t)s};
			if ((st = tf_hmap_put_str(&p->by_name, t->name, strlen(t->name), p->n)))
				goto out;
			p->n++;
			p->total_bytes += t->end - t->begin;
		}
	}
	if (weight_map) {
		const char *k;
		json_t *v;
		json_object_foreach(weight_map, k, v) {
			if (!tf_hmap_get_str(&p->by_name, k, strlen(k), NULL)) {
				st = tf_err(TF_ERR_FORMAT, "'%s/%s': tensor '%s' is not in its shard "
					    "'%s'", dir, json_string_value(v), k, json_string_value(v));
				goto out;
			}
		}
	}
out:
	free(path);
	json_decref(index);
	if (st)
		tf_pack_close(p);
	return st;
}

void tf_pack_close(struct tf_pack *p)
{
	for (size_t s = 0; p->shards && s < p->nshards; s++)
		tf_st_close(&p->shards[s]);
	for (size_t s = 0; p->shard_names && s < p->nshards; s++)
		free(p->shard_names[s]);
	free(p->shards);
	free(p->shard_names);
	free(p->tensors);
	free(p->dir);
	free(p->tokenizer_path);
	json_decref(p->config);
	tf_hmap_release(&p->by_name);
	memset(p, 0, sizeof *p);
}

const struct tf_pack_tensor *tf_pack_find(const struct tf_pack *p, const char *name)
{
	uintptr_t i;
	if (!tf_hmap_get_str(&p->by_name, name, strlen(name), &i))
		return NULL;
	return &p->tensors[i];
}

tf_status tf_pack_read(const struct tf_pack *p, const struct tf_pack_tensor *t, uint64_t off,
		       void *buf, size_t len)
{
	return tf_st_read(&p->shards[t->shard], t->t, off, buf, len);
}
