/* bench.h: what the modes of tf-bench share: the parsed options (one
 * table for the program, in tf-bench.c) and the argument-list parsers. Each
 * mode lives in its own file of this folder, linked into tf-bench only. */
#ifndef TF_BENCH_BENCH_H
#define TF_BENCH_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/config.h"

struct bench_opts {
	const char *backend;            /* kernels: cuda or cpu */
	const char *shapes, *bits, *rows, *codebook;
	const char *pack, *preset;      /* decode: the model */
	const char *prepared;           /* decode: tf-prepare's folder of the pack */
	const char *variant;            /* cuda: tf_cu_exl3_variant's spec */
	const char *devices;            /* decode: rank r's GPU, a list */
	double collective_us;           /* decode: one collective's latency, for the floor */
	int64_t world;                  /* decode: tensor-parallel ranks on threads */
	int64_t iters, device, blocks_per_sm, threads, experts, ctx, layers;
	double seconds;
	bool json, no_cublas, draft, ops; /* ops: kernels --ops */
	bool invariant;                 /* cuda: the batch-invariant path */
	/* serve */
	const char *host, *path, *model, *api_key, *prompt, *prompt_file;
	int64_t port, requests, concurrency, max_tokens, random_words, seed;
	double rate, temperature, hold, timeout;
	bool ignore_eos, verify;
	/* grammar */
	const char *schemas, *tokenizer;
	int64_t vocab, steps, walks;
};

extern struct bench_opts bench;

/* tf-bench kernels on the GPU (kernels_cuda.c) and on the CPU (kernels_cpu.c). */
int bench_kernels_cuda(void);
int bench_kernels_cpu(void);
/* tf-bench kernels --ops: every op of the CUDA backend (ops.c). */
int bench_kernels_ops(void);

struct tf_cu_device;
/* The copy kernel over 1 GiB on an open device with the kernels loaded:
 * bytes read plus bytes written per second, in GB/s (kernels_cuda.c; dies
 * on a failed CUDA call). */
double bench_cuda_copy_gbs(const struct tf_cu_device *dev);
/* tf-bench decode on the CPU or one GPU (decode.c). */
int bench_decode(void);

/* A decode step's byte floor (floor.c, which says what it counts): the
 * fixed weight bytes, the routed experts' bytes of the backbone, and the
 * config. */
struct bench_floor {
	struct tf_config c;
	double fixed, experts;
};
/* The floor of rank 0 of world (its plan's slices; the KV rows every rank
 * reads whole). */
tf_status bench_floor_init(const char *pack_dir, const struct tf_config *c, int world,
			   struct bench_floor *f);
/* Bytes a step of B rows at context ctx must read. */
double bench_floor_bytes(const struct bench_floor *f, int B, int64_t ctx);
/* tf-bench grammar: mask costs of constrained output (grammar.c). */
int bench_grammar(void);
/* tf-bench serve: a load generator against a running server (serve.c). */
int bench_serve(void);

/* "a,b,c" of integers in [lo, hi] into v (at most max); usage error if bad. */
int bench_parse_list(const char *s, const char *what, int64_t lo, int64_t hi, int64_t *v, int max);
/* "KxN,..." or "dsv41" (the release's expert, attention and head shapes). */
int bench_parse_shapes(const char *s, uint32_t (*v)[2], int max);
/* "3inst,mcg,mul1" or "all" into codebook numbers 0, 1, 2. */
int bench_parse_codebooks(const char *s, int *v);

#endif
