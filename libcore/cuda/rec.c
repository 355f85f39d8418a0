/* rec.c: per-stream counting and dry recording of queued work (rec.h). */
#include "cuda/rec.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC_STREAMS 64
#define MEMO_SLOTS 512 /* kernels whose parameter sizes are remembered */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	tf_cu_stream s;
	struct tf_cu_rec *r;
} reg[REC_STREAMS];
static int nreg; /* slots in use are reg[0 .. nreg) */

/* Parameter sizes per kernel handle (open addressing, never shrinks:
 * handles live as long as the module, a reload makes new ones). */
static struct {
	tf_cu_func f;
	int n;
	uint16_t size[TF_CU_REC_MAX_PARAMS];
} memo[MEMO_SLOTS];

tf_status tf_cu_rec_attach(struct tf_cu_rec *r, tf_cu_stream s)
{
	tf_status st = TF_OK;
	pthread_mutex_lock(&mu);
	int i = 0;
	while (i < nreg && reg[i].s != s)
		i++;
	if (i == nreg && nreg == REC_STREAMS)
		st = tf_err(TF_ERR_NOMEM, "stream recorder: more than %d streams", REC_STREAMS);
	else {
		reg[i].s = s;
		reg[i].r = r;
		nreg += i == nreg;
	}
	pthread_mutex_unlock(&mu);
	return st;
}

void tf_cu_rec_detach(tf_cu_stream s)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nreg; i++)
		if (reg[i].s == s) {
			reg[i] = reg[--nreg];
			break;
		}
	pthread_mutex_unlock(&mu);
}

struct tf_cu_rec *tf_cu_rec_of(tf_cu_stream s)
{
	struct tf_cu_rec *r = NULL;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nreg && !r; i++)
		if (reg[i].s == s)
			r = reg[i].r;
	pthread_mutex_unlock(&mu);
	return r;
}

/* $TF_CUDA_GRAPHS_TRACE: a file that gets a line for every item a dry
 * pass hashes, so that two passes whose fingerprints differ can be
 * compared item by item (tf(7)). Opened on first use; NULL when unset. */
static FILE *trace;
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;

static void trace_open(void)
{
	const char *path = getenv("TF_CUDA_GRAPHS_TRACE");
	trace = path && *path ? fopen(path, "a") : NULL;
}

/* (once opened, read without a lock: a dry pass records every item) */
static FILE *trace_file(void)
{
	pthread_once(&trace_once, trace_open);
	return trace;
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

void tf_cu_rec_begin(struct tf_cu_rec *r, bool dry)
{
	FILE *t = dry ? trace_file() : NULL;
	if (t)
		fprintf(t, "== dry pass\n");
	r->fp = 0xcbf29ce484222325ull;
	r->items = 0;
	r->unknown = false;
	r->hashing = true;
	r->dry = dry;
	r->foreign = 0;
}

void tf_cu_rec_end(struct tf_cu_rec *r)
{
	r->hashing = false;
	r->dry = false;
}

void tf_cu_rec_mix(struct tf_cu_rec *r, const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = r->fp;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	r->fp = h;
}

static void mix_u64(struct tf_cu_rec *r, uint64_t v)
{
	unsigned char b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	tf_cu_rec_mix(r, b, 8);
}

/* The driver's answer: parameters 0, 1, ... until it says there are no more. */
static int driver_sizes(tf_cu_func f, size_t *sizes, int max)
{
	if (!tf_cu || !tf_cu->FuncGetParamInfo)
		return -1;
	int n = 0;
	for (; n < max; n++) {
		size_t off, size;
		if (tf_cu->FuncGetParamInfo(f, (size_t)n, &off, &size) != TF_CU_SUCCESS)
			break;
		sizes[n] = size;
	}
	return n == max ? -1 : n; /* max parameters or more: not ours to trust */
}

static int param_sizes(struct tf_cu_rec *r, tf_cu_func f, size_t *sizes)
{
	if (r->param_sizes)
		return r->param_sizes(f, sizes, TF_CU_REC_MAX_PARAMS);
	unsigned h = (unsigned)(((uintptr_t)f >> 4) * 2654435761u) % MEMO_SLOTS;
	int n = -1;
	pthread_mutex_lock(&mu);
	for (unsigned i = 0; i < 8; i++) {
		unsigned k = (h + i) % MEMO_SLOTS;
		if (memo[k].f == f) {
			n = memo[k].n;
			for (int j = 0; j < n; j++)
				sizes[j] = memo[k].size[j];
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	if (n >= 0)
		return n;
	if ((n = driver_sizes(f, sizes, TF_CU_REC_MAX_PARAMS)) < 0)
		return n;
	pthread_mutex_lock(&mu);
	for (unsigned i = 0; i < 8; i++) {
		unsigned k = (h + i) % MEMO_SLOTS;
		if (!memo[k].f) {
			memo[k].f = f;
			memo[k].n = n;
			for (int j = 0; j < n; j++)
				memo[k].size[j] = (uint16_t)sizes[j];
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	return n;
}

bool tf_cu_rec_kernel(tf_cu_stream s, tf_cu_func f, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz, unsigned shmem, void **params,
                      const void *attrs, size_t attr_bytes)
{
	struct tf_cu_rec *r = tf_cu_rec_of(s);
	if (!r)
		return false;
	r->n.kernels++;
	if (!r->hashing || r->foreign)
		return r->dry;
	size_t sizes[TF_CU_REC_MAX_PARAMS];
	int n = param_sizes(r, f, sizes);
	uint32_t dims[8] = {'K', gx, gy, gz, bx, by, bz, shmem};
	tf_cu_rec_mix(r, dims, sizeof dims);
	mix_u64(r, (uint64_t)(uintptr_t)f);
	if (attrs && attr_bytes)
		tf_cu_rec_mix(r, attrs, attr_bytes);
	if (n < 0)
		r->unknown = true;
	for (int i = 0; i < n; i++) {
		mix_u64(r, sizes[i]);
		tf_cu_rec_mix(r, params[i], sizes[i]);
	}
	FILE *t = r->dry ? trace_file() : NULL;
	if (t) {
		const char *name = "?";
		if (tf_cu && tf_cu->FuncGetName)
			tf_cu->FuncGetName(&name, f);
		fprintf(t, "%llu K %s %u,%u,%u %u", (unsigned long long)r->items, name, gx, gy, gz, shmem);
		for (int i = 0; i < n; i++)
			fprintf(t, " %016llx", (unsigned long long)fnv(params[i], sizes[i]));
		fputc('\n', t);
	}
	r->items++;
	return r->dry;
}

bool tf_cu_rec_blas(tf_cu_stream s, const void *args, size_t n)
{
	struct tf_cu_rec *r = tf_cu_rec_of(s);
	if (!r)
		return false;
	r->n.blas++;
	if (r->hashing && !r->foreign) {
		mix_u64(r, 'B');
		tf_cu_rec_mix(r, args, n);
		FILE *t = r->dry ? trace_file() : NULL;
		if (t)
			fprintf(t, "%llu B %016llx\n", (unsigned long long)r->items,
				(unsigned long long)fnv(args, n));
		r->items++;
	}
	return r->dry;
}

bool tf_cu_rec_copy(tf_cu_stream s, int kind, uint64_t dst, uint64_t src, size_t n)
{
	struct tf_cu_rec *r = tf_cu_rec_of(s);
	if (!r)
		return false;
	r->n.copies++;
	if (r->hashing && !r->foreign) {
		uint64_t w[4] = {(uint64_t)kind, dst, src, n};
		for (int i = 0; i < 4; i++)
			mix_u64(r, w[i]);
		FILE *t = r->dry ? trace_file() : NULL;
		if (t)
			fprintf(t, "%llu C %c %llx %llx %zu\n", (unsigned long long)r->items, kind,
				(unsigned long long)dst, (unsigned long long)src, n);
		r->items++;
	}
	return r->dry;
}

bool tf_cu_rec_memset(tf_cu_stream s, uint64_t p, uint32_t value, unsigned elem, size_t n)
{
	struct tf_cu_rec *r = tf_cu_rec_of(s);
	if (!r)
		return false;
	r->n.memsets++;
	if (r->hashing && !r->foreign) {
		uint64_t w[4] = {'M', p, (uint64_t)value << 8 | elem, n};
		for (int i = 0; i < 4; i++)
			mix_u64(r, w[i]);
		FILE *t = r->dry ? trace_file() : NULL;
		if (t)
			fprintf(t, "%llu M %llx %u %zu\n", (unsigned long long)r->items,
				(unsigned long long)p, value, n);
		r->items++;
	}
	return r->dry;
}

bool tf_cu_rec_foreign(tf_cu_stream s, const void *id, size_t n)
{
	struct tf_cu_rec *r = tf_cu_rec_of(s);
	if (!r)
		return false;
	if (r->hashing && !r->foreign) {
		mix_u64(r, 'F');
		tf_cu_rec_mix(r, id, n);
		r->items++;
	}
	if (r->dry)
		return true;
	r->foreign++;
	return false;
}

void tf_cu_rec_foreign_end(tf_cu_stream s)
{
	struct tf_cu_rec *r = tf_cu_rec_of(s);
	if (r && r->foreign > 0)
		r->foreign--;
}
