/* depth.c: draft depth from measured costs (depth.h). */
#include "engine/depth.h"

#include <math.h>

/* Each round's weight falls by this much a round: about the last 50 count. */
#define DECAY 0.98

void tf_depth_init(struct tf_depth *d, bool fixed)
{
	*d = (struct tf_depth){.fixed = fixed};
}

void tf_depth_observe(struct tf_depth *d, uint32_t rows, double seconds)
{
	if (!rows || !(seconds >= 0))
		return;
	double x = rows, y = seconds;
	d->w = d->w * DECAY + 1;
	d->sx = d->sx * DECAY + x;
	d->sy = d->sy * DECAY + y;
	d->sxx = d->sxx * DECAY + x * x;
	d->sxy = d->sxy * DECAY + x * y;
	d->rounds++;
}

void tf_depth_costs(const struct tf_depth *d, double *fixed, double *per_row)
{
	*fixed = *per_row = 0;
	if (d->w <= 0)
		return;
	double mx = d->sx / d->w, my = d->sy / d->w;
	double vx = d->sxx / d->w - mx * mx, cxy = d->sxy / d->w - mx * my;
	if (vx > 1e-6 * (mx * mx + 1)) {
		*per_row = cxy / vx;
		*fixed = my - *per_row * mx;
	}
	if (!(vx > 1e-6 * (mx * mx + 1)) || *per_row <= 0 || *fixed < 0) {
		/* rows never varied, or the fit says nothing sensible: call it
		 * half fixed, half per row */
		*fixed = my / 2;
		*per_row = mx > 0 ? my / (2 * mx) : 0;
	}
}

uint32_t tf_depth_choose(const struct tf_depth *d, uint64_t accepted, uint64_t rejects,
			 uint32_t idle, uint32_t lanes, uint32_t max)
{
	if (max == 0 || d->fixed || d->rounds < TF_DEPTH_WARMUP)
		return max;
	double fixed, row;
	tf_depth_costs(d, &fixed, &row);
	if (row <= 0)
		return max;
	double a = ((double)accepted + 1) / ((double)accepted + (double)rejects + 2);
	double base = fixed / (lanes ? lanes : 1) + row;
	double best = 1 / base, tokens = 1, ak = 1;
	uint32_t pick = 0;
	for (uint32_t k = 1; k <= max; k++) {
		ak *= a;
		tokens += ak;
		double rate = tokens / (base + k * row);
		if (rate > best * (1 + 1e-9)) {
			best = rate;
			pick = k;
		}
	}
	if (pick == 0 && idle >= TF_DEPTH_PROBE)
		pick = 1;
	return pick;
}
