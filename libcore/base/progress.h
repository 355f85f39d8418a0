/* progress.h: a one-line progress report on stderr for long work (done/
 * total, rate, time left), redrawn at most 10 times a second, and only when
 * stderr is a terminal and the program is not quiet. */
#ifndef TF_BASE_PROGRESS_H
#define TF_BASE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct tf_progress {
	const char *label;
	const char *unit;   /* "B" formats as bytes (KiB/MiB...), else a count */
	uint64_t total, done;
	double t0, last;
	bool on;
};

void tf_progress_init(struct tf_progress *p, const char *label, uint64_t total, const char *unit);
/* Add n to the done count and redraw if due. */
void tf_progress_add(struct tf_progress *p, uint64_t n);
/* Clear the line. */
void tf_progress_end(struct tf_progress *p);

/* Monotonic seconds. */
double tf_now(void);

#endif
