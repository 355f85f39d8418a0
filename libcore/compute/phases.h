/* phases.h: named phase timing of forward rounds (TF_PHASES).
 *
 * TF_PHASES=1 times each named phase (embedding, each block's attention,
 * MoE and Engram, the head, sampling; later the GPU's graph stages) on the
 * host's monotonic clock; TF_PHASES=sync also waits for the device at both
 * ends of each phase (the backend's sync hook), so GPU time lands in the
 * phase that queued it. Every 64 rounds the totals are written as JSON to
 * TF_PHASES_OUT (atomically replaced) or, without it, as one line on
 * stderr:
 *   {"mode":"host","wall_ms":W,"rounds":N,"tokens":T,
 *    "phases":{"NAME":{"ms":M,"n":C,"ms_avg":A},...}}
 * Off (TF_PHASES unset or 0) the recorder is NULL and every call below is
 * one NULL test. Phases may nest; each is timed on its own. Not thread-
 * safe: the round's thread records. */
#ifndef TF_COMPUTE_PHASES_H
#define TF_COMPUTE_PHASES_H

#include <stdint.h>

#include "base/status.h"

enum tf_phases_mode {
	TF_PHASES_OFF = 0,
	TF_PHASES_HOST = 1,
	TF_PHASES_SYNC = 2,
};

#define TF_PHASES_EVERY 64

struct tf_phases;

/* A recorder for mode (NULL *out when off); out_path NULL writes to stderr.
 * Free with tf_phases_free. */
tf_status tf_phases_new(enum tf_phases_mode mode, const char *out_path, struct tf_phases **out);
/* The same from TF_PHASES and TF_PHASES_OUT; an unknown TF_PHASES value is
 * TF_ERR_CONFIG. */
tf_status tf_phases_from_env(struct tf_phases **out);
void tf_phases_free(struct tf_phases *p);
/* The device wait used in sync mode (e.g. the backend's sync op). */
void tf_phases_set_sync(struct tf_phases *p, tf_status (*sync)(void *ctx), void *ctx);

/* The id of a phase name (registered on first use; names are copied).
 * -1 when off or out of memory. Look ids up once, outside the hot loop. */
int tf_phases_id(struct tf_phases *p, const char *name);

void tf_phases_begin_(struct tf_phases *p, int id);
void tf_phases_end_(struct tf_phases *p, int id);
/* Start and stop phase id (a no-op when p is NULL or id < 0). */
static inline void tf_phase_begin(struct tf_phases *p, int id)
{
	if (p && id >= 0)
		tf_phases_begin_(p, id);
}

static inline void tf_phase_end(struct tf_phases *p, int id)
{
	if (p && id >= 0)
		tf_phases_end_(p, id);
}

/* End of a round that produced `tokens` tokens; writes the totals every
 * TF_PHASES_EVERY rounds. A failed write is reported once on stderr and
 * returned. */
tf_status tf_phases_round(struct tf_phases *p, int64_t tokens);
/* The JSON totals now (malloc'd text, the caller frees); NULL when off. */
char *tf_phases_json(const struct tf_phases *p);

#endif
