/* model_impl.h: what compute/model.c (open, sequences, the forward, Engram
 * rows) and compute/model_load.c (the weights, from a pack or from a
 * prepared folder) share. Not an interface: model.h is. */
#ifndef TF_COMPUTE_MODEL_IMPL_H
#define TF_COMPUTE_MODEL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/dspark.h"
#include "compute/forward.h"
#include "compute/model.h"
#include "model/engram_hash.h"
#include "model/exl3.h"
#include "model/plan.h"
#include "pack/pack.h"

struct tf_engram_shard;
struct tf_progress;
struct tf_synth_src;

struct tf_model_hist {
	uint32_t *ids; /* token at each position */
	int64_t cap;
};

struct tf_model {
	struct tf_config c;
	struct tf_pack pack;
	bool pack_open;
	struct tf_plan plan;
	bool plan_built;
	uint32_t rank, world;
	struct tf_comm *comm;      /* borrowed; NULL at world 1 */
	char *prep_dir;            /* the rank's prepared folder, or NULL */
	struct tf_be *be;
	bool device;               /* be holds device memory: weights are uploaded */
	struct tf_synth_src *synth;/* synthetic: the pack's data, generated */
	uint64_t synth_seed;
	struct tf_progress *progress; /* borrowed, or NULL */
	struct tf_model_bytes bytes;  /* the weights placed so far, and the cache */
	struct tf_tensor *dev;     /* device buffers of the weights */
	size_t ndev, capdev;
	void *hold[2];             /* device: host buffers the bytes pass through */
	size_t hold_cap[2];
	struct tf_kv *kv;
	struct tf_fwd *fwd;
	struct tf_phases *phases;  /* TF_PHASES, or NULL */
	struct tf_fwd_weights w;
	struct tf_dspark_weights dw; /* DSpark (spec §13) */
	struct tf_dspark *dspark;    /* NULL: the pack has no DSpark blocks */
	uint16_t *taps;              /* [taps_rows, targets, D] */
	int taps_rows;
	struct tf_exl3_layer *q;   /* [plan.ngroups] */
	void **mem;                /* every buffer the weights use */
	size_t nmem, capmem;
	/* Engram: the rank's hash columns [c0, c1) of every Engram layer, read
	 * from the pack's tables or from the prepared folder's shards */
	struct tf_engram_layout lay;
	struct tf_engram_host host;
	bool host_init;
	struct tf_engram_hasher hasher;
	uint32_t c0, c1;
	const struct tf_pack_tensor *table[TF_CONFIG_MAX_ENGRAM];
	struct tf_engram_shard *shard[TF_CONFIG_MAX_ENGRAM];
	struct tf_model_hist *hist; /* [slots] */
	int slots;
	struct tf_model_mirror mirror; /* before/after NULL: none */
};

/* A buffer of bytes kept until tf_model_free (NULL when out of memory). */
void *tf_model_keep(struct tf_model *m, size_t bytes);

/* The bytes the rank's weights of m->plan take on the backend. */
tf_status tf_model_plan_bytes(struct tf_model *m, uint64_t *exl3, uint64_t *native);

/* Fill m->w (and m->q, m->table or m->shard) with the rank's weights of
 * m->plan: sliced from the pack, or read from m->prep_dir's images (each
 * checked against the pack's key, the rank and the world, every payload
 * against its SHA-256). TF_ERR_FORMAT, TF_ERR_MISMATCH, TF_ERR_VERSION or
 * TF_ERR_NOTFOUND naming the file for a prepared folder that is damaged,
 * for another rank, world or pack, or incomplete. With m->synth the
 * pack's data is generated instead of read (model.h, opts.synthetic). The
 * tensors go to m->be: kept host buffers on the CPU, device buffers
 * (m->dev) uploaded through m->hold on a device. */
tf_status tf_model_load_pack(struct tf_model *m);
tf_status tf_model_load_prepared(struct tf_model *m);

#endif
