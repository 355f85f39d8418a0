/* tf-prepare: write a rank's prepared images from a pack (or a tar stream
 * of them), import such a stream, or list a prepared folder.
 *
 *   tf-prepare PACK -o DIR --rank R --world W [--layers LIST] [--verify]
 *              [--dry-run] [--jobs N]
 *   tf-prepare PACK -o - --rank R --world W [--zstd]       (tar on stdout)
 *   tf-prepare --import FILE -o DIR                        (FILE may be -)
 *   tf-prepare --list -o DIR [PACK]
 *
 * The work lives in libcore/model/prepare.c (conversion), prepared.c (the
 * format) and prepared_tar.c (streams); this file parses, orchestrates and
 * reports. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/file.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/thread.h"
#include "model/config.h"
#include "model/engram_shard.h"
#include "model/plan.h"
#include "model/prepare.h"
#include "pack/pack.h"

static struct {
	const char *out, *layers, *import;
	int64_t rank, world, jobs;
	bool verify, dry_run, zstd, list, json;
} o;

static const struct tf_opt opts[] = {
	{"output", 'o', TF_OPT_STR, &o.out, "DIR", NULL, NULL, "the prepared folder; - writes a tar stream to stdout", 0, 0, NULL},
	TF_OPT_RANK(&o.rank),
	TF_OPT_WORLD(&o.world),
	{"layers", 'l', TF_OPT_STR, &o.layers, "LIST", NULL, NULL, "only these blocks: A-B, A, top, comma-separated (default: all and top)", 0, 0, NULL},
	{"verify", 0, TF_OPT_FLAG, &o.verify, NULL, NULL, NULL, "check every payload digest of present images (rebuild the damaged)", 0, 0, NULL},
	{"dry-run", 'n', TF_OPT_FLAG, &o.dry_run, NULL, NULL, NULL, "say what would be written; write nothing", 0, 0, NULL},
	{"jobs", 'j', TF_OPT_INT, &o.jobs, "N", NULL, "0", "images written at once (0: one per CPU)", 0, 256, NULL},
	{"zstd", 'z', TF_OPT_FLAG, &o.zstd, NULL, NULL, NULL, "compress the tar stream of -o - with zstd", 0, 0, NULL},
	{"import", 'i', TF_OPT_STR, &o.import, "FILE", NULL, NULL, "unpack and verify a tar stream (- for stdin) into -o DIR", 0, 0, NULL},
	{"list", 0, TF_OPT_FLAG, &o.list, NULL, NULL, NULL, "show what -o DIR holds (and whether it matches PACK)", 0, 0, NULL},
	TF_OPT_JSON(&o.json),
};

static const struct tf_cli cli = {
	"tf-prepare",
	"PACK -o DIR [-r R] [-w W] [--layers LIST] [--verify] [--dry-run] [-j N]\n"
	"       tf-prepare PACK -o - [-r R] [-w W] [--zstd] > images.tar\n"
	"       tf-prepare --import FILE -o DIR\n"
	"       tf-prepare --list -o DIR [PACK]",
	"Write a tensor-parallel rank's prepared images from an EXL3 pack; move them as a tar stream.",
	NULL, opts, TF_NOPTS(opts),
};

/* ---- the files to write ---- */

struct job {
	uint32_t layer;           /* block or TF_PREP_TOP */
	const struct tf_plan_native *engram; /* an Engram shard of this block, or NULL */
	struct tf_engram_expect expect;      /* what that shard holds */
	char name[64];
	char *path;
	enum tf_prepare_state state;
	char msg[512];            /* why damaged, or why the write failed */
	tf_status st;
	uint64_t read;
};

/* Parse --layers into the selected blocks (sel[l]) and whether top is in. */
static void parse_layers(const char *s, uint32_t nblocks, bool *sel, bool *top)
{
	if (!s) {
		for (uint32_t l = 0; l < nblocks; l++)
			sel[l] = true;
		*top = true;
		return;
	}
	char *copy = strdup(s), *save = NULL;
	if (!copy)
		tf_die(71, "out of memory");
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "top")) {
			*top = true;
			continue;
		}
		char *end;
		errno = 0;
		unsigned long a = strtoul(t, &end, 10), b = a;
		if (end != t && *end == '-') {
			char *e2;
			b = strtoul(end + 1, &e2, 10);
			if (e2 == end + 1)
				end = t;
			else
				end = e2;
		}
		if (end == t || *end || errno || a > b || b >= nblocks)
			tf_usage_error("--layers '%s': expected A-B, A or top with blocks 0..%u", s,
				       nblocks - 1);
		for (unsigned long l = a; l <= b; l++)
			sel[l] = true;
	}
	free(copy);
}

struct run {
	const struct tf_config *c;
	const struct tf_pack *pack;
	const struct tf_plan *plan;
	uint8_t key[TF_PREP_KEY_LEN];
	struct job *jobs;
	uint32_t njobs;
	enum tf_prep_commit commit;
	struct tf_progress prog;
	pthread_mutex_t mu;
};

static void on_progress(void *ctx, uint64_t n)
{
	struct run *r = ctx;
	pthread_mutex_lock(&r->mu);
	tf_progress_add(&r->prog, n);
	pthread_mutex_unlock(&r->mu);
}

static void write_jobs(void *ctx, size_t begin, size_t end, int worker)
{
	struct run *r = ctx;
	for (size_t i = begin; i < end; i++) {
		struct job *j = &r->jobs[i];
		if (j->state == TF_PREPARE_OK)
			continue;
		if (j->engram)
			j->st = tf_prepare_engram_write(r->c, r->pack, r->plan, j->engram, j->path,
							on_progress, r, &j->read);
		else
			j->st = tf_prepare_write(r->c, r->pack, r->plan, j->layer, r->key, j->path, r->commit,
						 on_progress, r, &j->read);
		if (j->st)
			snprintf(j->msg, sizeof j->msg, "%s", tf_errmsg(j->st));
	}
}

static long peak_rss_kib(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_maxrss;
}

/* Add the image of layer (or its Engram shard, when table is set) to the
 * run: its path, its state on disk, its size (printed by --dry-run). */
static void add_job(struct run *r, const char *dir, uint32_t layer,
		    const struct tf_plan_native *table, bool stream, uint64_t *total)
{
	struct job *j = &r->jobs[r->njobs++];
	uint64_t bytes = 0;
	tf_status st;
	j->layer = layer;
	j->engram = table;
	if (table) {
		int ei = tf_config_engram_index(r->c, table->spec.layer);
		j->expect.layer = table->spec.layer;
		if ((st = tf_prepare_engram_range(r->c, (uint32_t)ei, (uint32_t)o.rank, (uint32_t)o.world,
						  &j->expect.lo, &j->expect.hi, &j->expect.total)))
			tf_die_status(st, "Engram table '%s'", table->spec.name);
		tf_engram_shard_name(j->name, sizeof j->name, table->spec.layer, (uint32_t)o.rank,
				     (uint32_t)o.world);
		bytes = (j->expect.hi - j->expect.lo) * TF_ENGRAM_ROW_BYTES;
	} else {
		tf_prep_file_name(layer, j->name, sizeof j->name);
	}
	if (!(j->path = tf_path_join(dir, j->name)))
		tf_die(71, "out of memory");
	if (stream) {
		j->state = TF_PREPARE_MISSING;
	} else if (table) {
		st = tf_prepare_engram_check(j->path, &j->expect, NULL);
		j->state = st == TF_ERR_NOTFOUND ? TF_PREPARE_MISSING : st ? TF_PREPARE_DAMAGED : TF_PREPARE_OK;
		if (st)
			snprintf(j->msg, sizeof j->msg, "%s", tf_errmsg(st));
	} else {
		j->state = tf_prepare_check(j->path, r->key, (uint32_t)o.rank, (uint32_t)o.world, o.verify,
					    j->msg, sizeof j->msg);
	}
	if (j->state == TF_PREPARE_DAMAGED)
		tf_warn("%s; %s", j->msg, o.dry_run ? "would rebuild it" : "rebuilding it");
	if (!table) {
		struct tf_prep_writer w;
		if ((st = tf_prep_writer_init(&w, j->path, r->key, (uint32_t)o.rank, (uint32_t)o.world)) ||
		    (st = tf_prepare_declare(r->c, r->plan, layer, &w, &bytes)))
			tf_die_status(st, "'%s'", j->path);
		tf_prep_writer_release(&w);
	}
	if (o.dry_run)
		printf("%s\t%s\t%llu\n", j->path,
		       j->state == TF_PREPARE_OK ? "present" :
		       j->state == TF_PREPARE_MISSING ? "write" : "rebuild",
		       (unsigned long long)bytes);
	if (j->state != TF_PREPARE_OK)
		*total += bytes;
}

static void sync_staged(void *ctx, size_t begin, size_t end, int worker)
{
	struct run *r = ctx;
	for (size_t i = begin; i < end; i++) {
		struct job *j = &r->jobs[i];
		if (j->state == TF_PREPARE_OK || j->st || j->engram)
			continue; /* Engram shards commit themselves */
		char *t = tf_prep_staged_path(j->path);
		int fd = t ? open(t, O_RDONLY | O_CLOEXEC) : -1;
		if (fd < 0 || fsync(fd)) {
			j->st = tf_err_errno(TF_ERR_IO, "cannot sync '%s'", t ? t : j->path);
			snprintf(j->msg, sizeof j->msg, "%s", tf_errmsg(j->st));
			if (t)
				unlink(t);
		}
		if (fd >= 0)
			close(fd);
		free(t);
	}
}

/* Make the staged images durable, all at once (fsyncs from several threads
 * share the file system's journal commits), rename each into place, then
 * fsync the folder once: the data is on disk before any name points at it,
 * as with a per-file fsync and rename, without waiting for one flush per
 * file in turn. */
static void publish(struct run *r, const char *dir)
{
	struct tf_pool *pool = NULL;
	int n = r->njobs < 16 ? (int)r->njobs : 16;
	tf_status st;
	if (n > 1 && (st = tf_pool_new(n, &pool)))
		tf_die_status(st, "cannot start threads");
	tf_pool_for(pool, r->njobs, 1, sync_staged, r);
	tf_pool_free(pool);
	for (uint32_t i = 0; i < r->njobs; i++) {
		struct job *j = &r->jobs[i];
		if (j->state == TF_PREPARE_OK || j->st || j->engram)
			continue;
		if ((st = tf_prep_publish(j->path))) {
			j->st = st;
			snprintf(j->msg, sizeof j->msg, "%s", tf_errmsg(st));
		}
	}
	if (r->njobs && (st = tf_file_sync_dir(r->jobs[0].path)))
		tf_die_status(st, "cannot sync '%s'", dir);
}

static size_t count_present(const struct run *r)
{
	size_t n = 0;
	for (uint32_t i = 0; i < r->njobs; i++)
		n += r->jobs[i].state == TF_PREPARE_OK;
	return n;
}

/* -o -: make each image in the temporary folder tmp, add it to the tar
 * stream on standard output, remove it. Exits on the first failure. */
static void write_stream(struct run *r, char *tmp, uint64_t *read, size_t *written)
{
	struct tf_prep_tar tar;
	char hex[2 * TF_PREP_KEY_LEN + 1];
	tf_status st;
	tf_hex(r->key, TF_PREP_KEY_HEX / 2, hex);
	if ((st = tf_prep_tar_begin(&tar, STDOUT_FILENO, o.zstd)))
		tf_die_status(st, "cannot start the tar stream");
	for (uint32_t i = 0; i < r->njobs; i++) {
		struct job *j = &r->jobs[i];
		char rel[128];
		snprintf(rel, sizeof rel, "%s/rank%lldof%lld/%s", hex, (long long)o.rank,
			 (long long)o.world, j->name);
		write_jobs(r, i, i + 1, 0);
		if (!j->st && (j->st = tf_prep_tar_add(&tar, rel, j->path)))
			snprintf(j->msg, sizeof j->msg, "%s", tf_errmsg(j->st));
		unlink(j->path);
		if (j->st) {
			tf_prep_tar_abort(&tar);
			rmdir(tmp);
			tf_progress_end(&r->prog);
			tf_die(tf_status_exit(j->st), "%s", j->msg);
		}
		*read += j->read;
		++*written;
	}
	if ((st = tf_prep_tar_end(&tar)))
		tf_die_status(st, "cannot finish the tar stream");
	rmdir(tmp);
}

/* -o DIR: write the missing or damaged images, o.jobs at a time, then
 * publish them. Each failure is reported; the first one's status is
 * returned (the images that were written are kept). */
static tf_status write_folder(struct run *r, const char *dir, uint64_t *read, size_t *written)
{
	struct tf_pool *pool = NULL;
	tf_status st, first = TF_OK;
	if (o.jobs != 1 && (st = tf_pool_new((int)o.jobs, &pool)))
		tf_die_status(st, "cannot start threads");
	tf_pool_for(pool, r->njobs, 1, write_jobs, r);
	tf_pool_free(pool);
	publish(r, dir);
	for (uint32_t i = 0; i < r->njobs; i++) {
		struct job *j = &r->jobs[i];
		if (j->state == TF_PREPARE_OK)
			continue;
		if (j->st) {
			tf_progress_end(&r->prog);
			tf_warn("%s", j->msg);
			if (!first)
				first = j->st;
		} else {
			++*written;
			*read += j->read;
		}
	}
	return first;
}

/* Write (or stream) the selected images of one rank. */
static int prepare(const char *pack_dir)
{
	struct tf_pack pack;
	struct tf_config c;
	struct tf_plan plan;
	struct run r = {.c = &c, .pack = &pack, .plan = &plan};
	tf_status st = tf_pack_open(&pack, pack_dir);
	if (st)
		tf_die_status(st, "cannot open pack '%s'", pack_dir);
	if ((st = tf_config_from_json(&c, pack.config, pack_dir)))
		tf_die_status(st, "'%s': bad config", pack_dir);
	if ((st = tf_plan_build(&plan, &c, &pack, (uint32_t)o.rank, (uint32_t)o.world)))
		tf_die_status(st, "cannot plan rank %lld of %lld", (long long)o.rank, (long long)o.world);
	if ((st = tf_prepare_key(&pack, (uint32_t)o.rank, (uint32_t)o.world, "", r.key)))
		tf_die_status(st, "cannot read the pack's identity");

	uint32_t nblocks = tf_config_all_layers(&c), njobs = 0;
	bool sel[TF_CONFIG_MAX_LAYERS] = {false}, top = false;
	parse_layers(o.layers, nblocks, sel, &top);
	r.jobs = calloc(2 * nblocks + 1, sizeof(*r.jobs));
	if (!r.jobs)
		tf_die(71, "out of memory");
	bool stream = !strcmp(o.out, "-");
	char *dir = NULL, *tmp = NULL;
	/* images of a stream are temporary; a folder's are staged, made durable
	 * together and then renamed into place (publish) */
	r.commit = stream ? TF_PREP_COMMIT_NOSYNC : TF_PREP_COMMIT_STAGED;
	if (stream) {
		const char *t = getenv("TMPDIR");
		if (asprintf(&tmp, "%s/tf-prepare.XXXXXX", t && *t ? t : "/tmp") < 0 || !mkdtemp(tmp))
			tf_die(71, "cannot make a temporary folder: %s", strerror(errno));
		dir = tmp;
	} else {
		if (!(dir = tf_prep_rank_dir(o.out, r.key, (uint32_t)o.rank, (uint32_t)o.world)))
			tf_die(71, "out of memory");
		if (!o.dry_run && (st = tf_file_mkdirs(dir)))
			tf_die_status(st, "cannot create '%s'", dir);
	}
	uint64_t total = 0;
	for (uint32_t l = 0; l <= nblocks; l++) {
		uint32_t layer = l == nblocks ? TF_PREP_TOP : l;
		if (l == nblocks ? !top : !sel[l])
			continue;
		add_job(&r, dir, layer, NULL, stream, &total);
		for (size_t i = 0; i < plan.nnatives; i++)
			if (plan.natives[i].spec.slice == TF_SLICE_ENGRAM && plan.natives[i].spec.layer == l)
				add_job(&r, dir, layer, &plan.natives[i], stream, &total);
	}
	njobs = r.njobs;
	if (o.dry_run)
		goto done;

	double t0 = tf_now();
	pthread_mutex_init(&r.mu, NULL);
	tf_progress_init(&r.prog, "prepare", total, "B");
	uint64_t read = 0;
	size_t written = 0;
	if (stream)
		write_stream(&r, tmp, &read, &written);
	else if ((st = write_folder(&r, dir, &read, &written)))
		tf_die(tf_status_exit(st), "%zu of %u images could not be written", njobs - written -
		       count_present(&r), njobs);
	tf_progress_end(&r.prog);
	double dt = tf_now() - t0;
	if (!stream)
		printf("%s\n", dir);
	tf_log(TF_LOG_INFO, "rank %lld of %lld: %zu written, %zu present, %.1f MB read in %.2f s "
	       "(%.1f MB/s), peak RSS %ld KiB", (long long)o.rank, (long long)o.world, written,
	       (size_t)njobs - written, read / 1e6, dt, dt > 0 ? read / 1e6 / dt : 0.0, peak_rss_kib());
done:
	for (uint32_t i = 0; i < njobs; i++)
		free(r.jobs[i].path);
	free(r.jobs);
	if (!stream)
		free(dir);
	free(tmp);
	tf_plan_release(&plan);
	tf_pack_close(&pack);
	return 0;
}

static int import(void)
{
	int fd = strcmp(o.import, "-") ? open(o.import, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
	if (fd < 0)
		tf_die(errno == ENOENT ? 66 : 74, "cannot open '%s': %s", o.import, strerror(errno));
	size_t files;
	tf_status st = tf_prep_tar_import(fd, o.out, &files);
	if (fd != STDIN_FILENO)
		close(fd);
	if (st)
		tf_die_status(st, "cannot import '%s'", o.import);
	tf_log(TF_LOG_INFO, "imported and verified %zu images into '%s'", files, o.out);
	return 0;
}

/* ---- --list ---- */

static bool is_key_dir(const char *s)
{
	if (strlen(s) != TF_PREP_KEY_HEX)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in a folder (NULL-terminated; caller frees each and the
 * array), or NULL when it cannot be read. */
static char **list_dir(const char *path, size_t *n)
{
	DIR *d = opendir(path);
	char **v = NULL;
	size_t cap = 0;
	*n = 0;
	if (!d)
		return NULL;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		if (*n + 1 >= cap) {
			cap = cap ? 2 * cap : 16;
			char **nv = realloc(v, cap * sizeof(*v));
			if (!nv)
				tf_die(71, "out of memory");
			v = nv;
		}
		if (!(v[(*n)++] = strdup(e->d_name)))
			tf_die(71, "out of memory");
	}
	closedir(d);
	if (v)
		qsort(v, *n, sizeof(*v), cmp_str);
	return v;
}

static void free_list(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Check one file of a rank folder (an image against its folder's key,
 * rank and world, fully with --verify; or an Engram shard's header); add
 * its size to *bytes. */
static tf_status check_file(const char *fp, const char *name, const char *key_hex,
			    unsigned rank, unsigned world, uint64_t *bytes)
{
	struct tf_prep_image im;
	struct tf_prep_expect ex = {NULL, rank, world};
	struct stat sb;
	tf_status st;
	if (!strncmp(name, "engram-", 7)) {
		if (!(st = tf_prepare_engram_check(fp, NULL, NULL)) && !stat(fp, &sb))
			*bytes += (uint64_t)sb.st_size;
		return st;
	}
	if ((st = tf_prep_open(&im, fp, &ex)))
		return st;
	char hex[2 * TF_PREP_KEY_LEN + 1];
	tf_hex(im.key, TF_PREP_KEY_HEX / 2, hex);
	if (strcmp(hex, key_hex))
		st = tf_err(TF_ERR_MISMATCH, "'%s': its key %s differs from its folder", fp, hex);
	if (!st && o.verify)
		st = tf_prep_verify(&im);
	*bytes += im.file_len;
	tf_prep_close(&im);
	return st;
}

/* Print one line (or JSON object) for the rank folder rd; return the
 * number of damaged files. */
static size_t list_rank(const char *rd, const char *key_hex, unsigned rank, unsigned world,
			const struct tf_pack *pack, int *first)
{
	size_t nf, files = 0, bad = 0;
	uint64_t bytes = 0;
	char **fl = list_dir(rd, &nf);
	for (size_t f = 0; f < nf; f++) {
		size_t len = strlen(fl[f]);
		if (len < 5 || strcmp(fl[f] + len - 4, ".bin"))
			continue;
		char *fp = tf_path_join(rd, fl[f]);
		if (!fp)
			tf_die(71, "out of memory");
		tf_status st = check_file(fp, fl[f], key_hex, rank, world, &bytes);
		files++;
		if (st) {
			bad++;
			tf_warn("%s", tf_errmsg(st));
		}
		free(fp);
	}
	free_list(fl, nf);
	const char *match = "-";
	if (pack) {
		uint8_t key[TF_PREP_KEY_LEN];
		char hex[2 * TF_PREP_KEY_LEN + 1];
		tf_status st = tf_prepare_key(pack, rank, world, "", key);
		if (st)
			tf_die_status(st, "cannot read the pack's identity");
		tf_hex(key, TF_PREP_KEY_HEX / 2, hex);
		match = strcmp(hex, key_hex) ? "stale" : "matches";
	}
	if (o.json)
		printf("%s{\"key\":\"%s\",\"rank\":%u,\"world\":%u,\"files\":%zu,\"bytes\":%llu,"
		       "\"damaged\":%zu,\"pack\":\"%s\"}", *first ? "" : ",\n", key_hex, rank, world,
		       files, (unsigned long long)bytes, bad, match);
	else
		printf("%s\trank %u of %u\t%zu files\t%llu bytes\t%s\t%s\n", key_hex, rank, world, files,
		       (unsigned long long)bytes, bad ? "damaged" : o.verify ? "verified" : "ok", match);
	*first = 0;
	return bad;
}

/* --list: every <key>/rank<r>of<w> folder of -o DIR. Exit 1 when a file is
 * damaged. */
static int list(const char *pack_dir)
{
	struct tf_pack pack;
	tf_status st;
	if (!tf_file_exists(o.out))
		tf_die(66, "cannot open '%s': %s", o.out, strerror(ENOENT));
	if (pack_dir && (st = tf_pack_open(&pack, pack_dir)))
		tf_die_status(st, "cannot open pack '%s'", pack_dir);
	size_t nk, damaged = 0;
	char **keys = list_dir(o.out, &nk);
	int first = 1;
	if (o.json)
		printf("[");
	for (size_t i = 0; i < nk; i++) {
		if (!is_key_dir(keys[i]))
			continue;
		char *kd = tf_path_join(o.out, keys[i]);
		size_t nr;
		char **ranks = list_dir(kd, &nr);
		for (size_t j = 0; j < nr; j++) {
			unsigned rank, world;
			char tail;
			if (sscanf(ranks[j], "rank%uof%u%c", &rank, &world, &tail) != 2)
				continue;
			char *rd = tf_path_join(kd, ranks[j]);
			damaged += list_rank(rd, keys[i], rank, world, pack_dir ? &pack : NULL, &first);
			free(rd);
		}
		free_list(ranks, nr);
		free(kd);
	}
	if (o.json)
		printf("]\n");
	free_list(keys, nk);
	if (pack_dir)
		tf_pack_close(&pack);
	return damaged ? 1 : 0;
}

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	int nops = argc - first;
	if (!o.out)
		tf_usage_error("missing -o DIR (or -o - for a tar stream)");
	if (o.import) {
		if (nops || o.list || !strcmp(o.out, "-"))
			tf_usage_error("--import takes -o DIR and no PACK");
		return import();
	}
	if (o.list) {
		if (nops > 1 || !strcmp(o.out, "-"))
			tf_usage_error("--list takes -o DIR and at most one PACK");
		return list(nops ? argv[first] : NULL);
	}
	if (nops != 1)
		tf_usage_error(nops ? "one PACK only" : "missing PACK");
	if (o.rank >= o.world)
		tf_usage_error("--rank %lld is not below --world %lld", (long long)o.rank, (long long)o.world);
	if (o.zstd && strcmp(o.out, "-"))
		tf_usage_error("--zstd goes with -o - (a tar stream)");
	if (o.jobs == 0)
		o.jobs = tf_cpu_count();
	return prepare(argv[first]);
}
