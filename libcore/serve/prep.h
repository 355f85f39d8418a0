/* prep.h: one thread for the work a request's body needs before the engine
 * or the reply (parsing, rendering, tokenizing) when the body is big, so
 * that the HTTP thread, which serves many connections, never stalls on it.
 * Jobs run one at a time in their order: the memory they take at once is
 * that of one request. Thread safe. */
#ifndef TF_SERVE_PREP_H
#define TF_SERVE_PREP_H

#include "base/status.h"

/* Bodies of at least this many bytes are prepared on the thread. */
#define TF_PREP_MIN_BODY (64 * 1024)

struct tf_prep;

tf_status tf_prep_new(struct tf_prep **out);
/* Run fn(arg) on the thread. TF_ERR_NOMEM (fn not run) when out of memory. */
tf_status tf_prep_push(struct tf_prep *p, void (*fn)(void *arg), void *arg);
/* Run what is queued, then stop the thread and free. */
void tf_prep_free(struct tf_prep *p);

#endif
