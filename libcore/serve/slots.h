/* slots.h: the server's connection slots: every open socket, the phase of
 * its exchange, the whole-request deadline, and what happens past the
 * slot count.
 *
 * libmicrohttpd's own timeout only closes a connection that goes silent,
 * and at its connection limit it stops accepting, so new clients hang in
 * the kernel's backlog. The slots close both holes: a request must arrive
 * whole (headers and body) within timeout_s of the connection's opening or
 * of the end of its previous exchange (408, then closed); and a connection
 * past cap first sheds the connection idle longest between requests (idle
 * past TF_SLOTS_GRACE_S), else displaces the one that has spent longest
 * sending its request (past the grace too, with a 503), else sheds a
 * younger idle one, else is itself answered 503 with Retry-After: 1 and
 * closed. Connections whose reply is under way are never shed.
 *
 * Each slot holds a dup of its socket, so a shutdown from the ticker never
 * reaches a descriptor number the library closed and the kernel reused.
 * The library must allow more connections than cap (the refused and shed
 * ones linger until it closes them): tf_slots_hard_limit says how many.
 * Thread safe. */
#ifndef TF_SERVE_SLOTS_H
#define TF_SERVE_SLOTS_H

#include <stdbool.h>

#include "base/status.h"
#include "serve/metrics.h"

#define TF_SLOTS_GRACE_S 1.0 /* a sender may not be displaced sooner */
#define TF_SLOTS_LINGER_S 1.0 /* a refused or shed socket is shut after this */

struct tf_slots;
struct tf_slot;

/* cap: slots; timeout_s: the whole-request deadline; m: counts the
 * refusals, sheds and timeouts (and their 503 and 408 replies). */
tf_status tf_slots_new(unsigned cap, unsigned timeout_s, struct tf_metrics *m,
		       struct tf_slots **out);
void tf_slots_free(struct tf_slots *t);

/* Connections the library must allow for cap slots. */
unsigned tf_slots_hard_limit(unsigned cap);

/* A socket was accepted (fd: the library's). Returns its slot, refused
 * (already answered 503) when no room could be made; NULL when out of
 * memory or descriptors (the caller lets the library close it). */
struct tf_slot *tf_slots_open(struct tf_slots *t, int fd);
/* The socket closed: the slot is freed. */
void tf_slots_close(struct tf_slots *t, struct tf_slot *s);

/* Refused, shed or past its deadline: the request must not be served. */
bool tf_slot_dead(struct tf_slots *t, struct tf_slot *s);
/* A request's headers arrived (the body, if any, is still to come). */
void tf_slot_headers(struct tf_slots *t, struct tf_slot *s);
/* The request is whole, or a reply was queued: no deadline, never shed. */
void tf_slot_busy(struct tf_slots *t, struct tf_slot *s);
/* The exchange ended and the connection stays open for the next one. */
void tf_slot_idle(struct tf_slots *t, struct tf_slot *s);

/* Heads the library refuses by itself (its read buffer, the connection
 * memory, filled before the head ended): the head of TF_SLOTS_HEAD_MIN
 * bytes or more, on a connection of the calling thread, that has read the
 * most of its head so far, is answered status (414 or 431) in JSON and
 * shut for writing, so that the library's own HTML reply never goes out.
 * Call from the library's log callback, on its thread, before it replies.
 * Returns whether a head was answered (and counted). Linux: the bytes
 * read come from TCP_INFO. */
#define TF_SLOTS_HEAD_MIN 4096
#define TF_SLOTS_HEAD_MEMORY (64 * 1024) /* the library's connection memory */
#define TF_SLOTS_URL_MAX (8 * 1024)
#define TF_SLOTS_HEADER_BYTES (32 * 1024)
bool tf_slots_refuse_head(struct tf_slots *t, int status, unsigned headers_max);

/* Enforce the deadlines and shut lingering sockets (call every 100 ms or
 * so). */
void tf_slots_tick(struct tf_slots *t);

/* Open connections that hold a slot. */
unsigned tf_slots_live(struct tf_slots *t);

#endif
