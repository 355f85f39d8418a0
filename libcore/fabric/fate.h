/* fate.h: fail-fast between the ranks of one model. A failure on one rank
 * (tf_fate_fatal), a crash or a vanished process ends every rank: each one
 * logs the reason, runs its abort hooks, tells its peers, and exits 70
 * after the grace time. A clean stop (tf_fate_stop, in any order) ends
 * nobody; a rank draining its last work stays armed.
 *
 * Each follower holds one fate socket to rank 0 (the bootstrap's role 2);
 * rank 0 watches all of them and relays a failure to the others. Frames are
 * 16 bytes: magic "41FF", kind (1 MEM, 2 FAIL, 3 STOP, 4 BEAT) and an
 * int64 value; FAIL is followed by value (at most 512) bytes of reason. A
 * watcher thread polls the sockets with a wake pipe; a frame read has a 1 s
 * deadline.
 *
 * Hangs: the watcher sends a BEAT (value: its count) to each peer every
 * beat_s (rank 0 to every follower, each follower to rank 0), on its own
 * thread, so a rank busy in a long forward still beats; a rank whose whole
 * process stops (SIGSTOP, a frozen host, a cut link) cannot. A peer from
 * which nothing has come for limit_s is taken for hung: the watcher fails
 * fast naming it, as for a closed socket. Any frame counts; the watcher
 * reads what has arrived before it judges, so its own late wake-up is not
 * taken for a peer's silence. A peer is held to limit_s from its first
 * frame; before that (its fate may start later than ours) to the larger
 * of limit_s and the bootstrap's timeout. A peer that sent STOP is not
 * watched. So a rank that stops ends every rank within limit_s + beat_s +
 * the grace time. A thread stuck inside a forward while its process still
 * runs is not a silence: the collective's own timeout ends that one. */
#ifndef TF_FABRIC_FATE_H
#define TF_FABRIC_FATE_H

#include <stdint.h>

#include "base/status.h"
#include "fabric/bootstrap.h"

#define TF_FATE_MAGIC 0x46463431u
enum { TF_FATE_MEM = 1, TF_FATE_FAIL = 2, TF_FATE_STOP = 3, TF_FATE_BEAT = 4 };
#define TF_FATE_REASON_MAX 512
#define TF_FATE_EXIT 70

struct tf_fate;

struct tf_fate_opts {
	double grace_s; /* from the failure to exit 70 */
	double beat_s;  /* heartbeat period (0: send none) */
	double limit_s; /* a peer's silence that ends every rank (0: never) */
};

/* The options of s: TF_TP_FAILFAST_GRACE_S, TF_TP_HEARTBEAT_S and
 * TF_TP_HEARTBEAT_LIMIT_S. */
struct tf_fate_opts tf_fate_opts_of(const struct tf_fabric_settings *s);

/* Arm fail-fast on boot's fate sockets (borrowed; the boot must outlive
 * the fate) and start the watcher thread (o copied). */
tf_status tf_fate_start(struct tf_boot *boot, const struct tf_fate_opts *o, struct tf_fate **out);
/* Register a hook run (on a detached thread) when this rank dies, e.g. a
 * communicator abort so that blocked collectives end. At most 8. */
void tf_fate_on_abort(struct tf_fate *f, void (*fn)(void *), void *ctx);
/* This rank failed: log "tp fail-fast: rank r failed in <where>: <why>",
 * tell the peers and exit 70 after the grace time. Never returns. */
void tf_fate_fatal(struct tf_fate *f, const char *where, const char *why) __attribute__((noreturn));
/* A clean stop: tell the peers, stop the watcher, free f. Safe on NULL. */
void tf_fate_stop(struct tf_fate *f);

/* Parse a 16-byte frame. TF_ERR_FORMAT for a bad magic, kind or reason
 * length. Pure. */
tf_status tf_fate_frame_parse(const uint8_t p[16], uint32_t *kind, int64_t *value);

#endif
