/* progress.c: progress line on a terminal. */
#include "base/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "base/cli.h"

double tf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tf_progress_init(struct tf_progress *p, const char *label, uint64_t total, const char *unit)
{
	p->label = label;
	p->unit = unit ? unit : "";
	p->total = total;
	p->done = 0;
	p->t0 = p->last = tf_now();
	p->on = isatty(2) && tf_cli_chatty();
}

static void fmt_amount(char *out, size_t n, double v, const char *unit)
{
	if (unit[0] == 'B' && !unit[1]) {
		static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
		int i = 0;
		while (v >= 1024 && i < 4) {
			v /= 1024;
			i++;
		}
		snprintf(out, n, "%.1f %s", v, u[i]);
	} else {
		snprintf(out, n, "%.0f%s%s", v, *unit ? " " : "", unit);
	}
}

void tf_progress_add(struct tf_progress *p, uint64_t n)
{
	p->done += n;
	if (!p->on)
		return;
	double now = tf_now();
	if (now - p->last < 0.1 && p->done < p->total)
		return;
	p->last = now;
	double el = now - p->t0, rate = el > 0 ? (double)p->done / el : 0;
	char d[32], t[32], r[32];
	fmt_amount(d, sizeof d, (double)p->done, p->unit);
	fmt_amount(t, sizeof t, (double)p->total, p->unit);
	fmt_amount(r, sizeof r, rate, p->unit);
	double left = rate > 0 && p->total > p->done ? (double)(p->total - p->done) / rate : 0;
	fprintf(stderr, "\r%s: %s / %s (%.0f%%), %s/s, %.0fs left\033[K", p->label, d, t,
		p->total ? 100.0 * (double)p->done / (double)p->total : 100.0, r, left);
}

void tf_progress_end(struct tf_progress *p)
{
	if (p->on)
		fprintf(stderr, "\r\033[K");
	p->on = false;
}
