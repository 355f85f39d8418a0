/* sample.c: keyed deterministic sampling (sample.h has the rule). The
 * arithmetic follows the reference sampler bit for bit: fp64 from the fp32
 * logits, libm exp and log, numpy's pairwise sum. */
#include "compute/sample.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/f16.h"

struct tf_sampler {
	size_t cap;
	uint64_t *keys, *tmp;
	double *scaled, *work;
	size_t count[1 << 16]; /* radix sort digits */
};

/* nucleus: a cumulative sum this close to top_p is left to the whole row */
#define NUCLEUS_GUARD 1e-9

uint64_t tf_sample_seed(const int32_t *ids, size_t n, int64_t salt)
{
	struct tf_digest d;
	uint8_t out[TF_SHA256_LEN];
	char num[32];
	if (tf_digest_init(&d, TF_DIGEST_SHA256))
		return 0;
	for (size_t i = 0; i < n; i++) {
		int len = snprintf(num, sizeof num, i ? ",%" PRId32 : "%" PRId32, ids[i]);
		tf_digest_update(&d, num, (size_t)len);
	}
	int len = snprintf(num, sizeof num, "|%" PRId64, salt);
	tf_digest_update(&d, num, (size_t)len);
	if (tf_digest_final(&d, out))
		return 0;
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | out[i];
	return v & ((UINT64_C(1) << 63) - 1);
}

static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xBF58476D1CE4E5B9);
	x ^= x >> 27;
	x *= UINT64_C(0x94D049BB133111EB);
	return x ^ (x >> 31);
}

double tf_sample_uniform(uint64_t seed, uint64_t position, uint64_t id)
{
	uint64_t x = mix(seed + UINT64_C(0x9E3779B97F4A7C15));
	x = mix(x ^ (position * UINT64_C(0xD1B54A32D192ED03)));
	x = mix(x ^ id);
	return (double)(x >> 11) * 0x1p-53 + 0x1p-54;
}

double tf_sample_pairwise_sum(const double *a, size_t n)
{
	if (n < 8) {
		double res = 0.0;
		for (size_t i = 0; i < n; i++)
			res += a[i];
		return res;
	}
	if (n <= 128) {
		double r[8];
		for (int j = 0; j < 8; j++)
			r[j] = a[j];
		size_t i = 8;
		for (; i < n - n % 8; i += 8)
			for (int j = 0; j < 8; j++)
				r[j] += a[i + j];
		double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
		for (; i < n; i++)
			res += a[i];
		return res;
	}
	size_t n2 = n / 2;
	n2 -= n2 % 8;
	return tf_sample_pairwise_sum(a, n2) + tf_sample_pairwise_sum(a + n2, n - n2);
}

int tf_sample_greedy(const struct tf_sample_params *p)
{
	return !p || !(p->temperature > 0);
}

int tf_sample_is_nucleus(const struct tf_sample_params *p)
{
	return !tf_sample_greedy(p) && p->top_k == 0 && p->top_p > 0 && p->top_p < 1;
}

size_t tf_sample_candidates(const struct tf_sample_params *p, size_t n, size_t nucleus)
{
	size_t k;
	if (tf_sample_greedy(p))
		k = 1 + TF_SAMPLE_MARGIN;
	else if (p->top_k > 0)
		k = (size_t)p->top_k + TF_SAMPLE_MARGIN;
	else if (tf_sample_is_nucleus(p) && nucleus > 0)
		k = nucleus;
	else
		k = n;
	return k < n ? k : n;
}

tf_status tf_sampler_new(size_t capacity, struct tf_sampler **out)
{
	struct tf_sampler *s = calloc(1, sizeof *s);
	*out = NULL;
	if (!s)
		return tf_err(TF_ERR_NOMEM, "sampler: out of memory");
	s->cap = capacity ? capacity : 1;
	s->keys = tf_alloc_array(s->cap, sizeof *s->keys);
	s->tmp = tf_alloc_array(s->cap, sizeof *s->tmp);
	s->scaled = tf_alloc_array(s->cap, sizeof *s->scaled);
	s->work = tf_alloc_array(s->cap, sizeof *s->work);
	if (!s->keys || !s->tmp || !s->scaled || !s->work) {
		tf_sampler_free(s);
		return tf_err(TF_ERR_NOMEM, "sampler: out of memory for %zu logits", capacity);
	}
	*out = s;
	return TF_OK;
}

void tf_sampler_free(struct tf_sampler *s)
{
	if (!s)
		return;
	free(s->keys);
	free(s->tmp);
	free(s->scaled);
	free(s->work);
	free(s);
}

/* The order key: larger logit first (-0 as +0, NaN last), then the lower
 * id, as one unsigned number (larger = earlier). */
static inline uint64_t key_of(float v, uint32_t id)
{
	if (v != v)
		return 0xFFFFFFFFu - id;
	uint32_t b = tf_f32_bits(v + 0.0f);
	uint32_t mono = b & 0x80000000u ? ~b : b | 0x80000000u;
	return (uint64_t)mono << 32 | (0xFFFFFFFFu - id);
}

static inline float value_of(uint64_t k)
{
	uint32_t mono = (uint32_t)(k >> 32);
	if (mono == 0)
		return NAN;
	return tf_bits_f32(mono & 0x80000000u ? mono & 0x7FFFFFFFu : ~mono);
}

static inline int32_t id_of(uint64_t k)
{
	return (int32_t)(0xFFFFFFFFu - (uint32_t)k);
}

/* Sort keys[0..n) descending: LSD radix of ~key over 16-bit digits, or
 * 8-bit ones for fewer than 16384 keys (a candidate list: clearing 2^16
 * counts a pass would cost more than the sort). A stable radix sort gives
 * the one sorted order whatever the digit width. */
static void sort_desc(struct tf_sampler *s, uint64_t *keys, size_t n)
{
	size_t *count = s->count;
	uint64_t *tmp = s->tmp;
	int bits = n < 16384 ? 8 : 16;
	size_t digits = (size_t)1 << bits, mask = digits - 1;
	for (size_t i = 0; i < n; i++)
		keys[i] = ~keys[i];
	uint64_t *a = keys, *b = tmp;
	for (int shift = 0; shift < 64; shift += bits) {
		memset(count, 0, digits * sizeof *count);
		for (size_t i = 0; i < n; i++)
			count[(a[i] >> shift) & mask]++;
		if (count[(a[0] >> shift) & mask] == n)
			continue; /* one digit value: this pass would not move anything */
		size_t sum = 0;
		for (size_t d = 0; d < digits; d++) {
			size_t c = count[d];
			count[d] = sum;
			sum += c;
		}
		for (size_t i = 0; i < n; i++)
			b[count[(a[i] >> shift) & mask]++] = a[i];
		uint64_t *t = a;
		a = b;
		b = t;
	}
	if (a != keys)
		memcpy(keys, a, n * sizeof *keys);
	for (size_t i = 0; i < n; i++)
		keys[i] = ~keys[i];
}

static double min_log(const struct tf_sample_params *p)
{
	return p->min_p > 0 ? log(p->min_p) : -INFINITY;
}

/* The keyed draw over keys[0..keep) with scaled logits x[j]: the argmax of
 * x - ln(-ln(u)), the first on ties; entries below floor are skipped. */
static int32_t keyed(const uint64_t *keys, const double *x, size_t keep, double floor,
		     const struct tf_sample_params *p, uint64_t position)
{
	size_t best = 0;
	double best_score = -INFINITY;
	int any = 0;
	for (size_t j = 0; j < keep; j++) {
		if (x[j] < floor)
			continue;
		double score = x[j] - log(-log(tf_sample_uniform(p->seed, position,
								  (uint64_t)id_of(keys[j]))));
		if (!any || score > best_score) {
			best = j;
			best_score = score;
			any = 1;
		}
	}
	return id_of(keys[best]);
}

/* The draw of a sampled row from its best keys, sorted, n of them (the
 * whole row, or at least its top_k): rules 2-6. */
static int32_t draw_sorted(struct tf_sampler *s, const uint64_t *keys, size_t n,
			   uint64_t position, const struct tf_sample_params *p)
{
	size_t k = p->top_k && p->top_k < n ? p->top_k : n;
	double t = p->temperature > 1e-6 ? p->temperature : 1e-6;
	double *x = s->scaled;
	for (size_t j = 0; j < k; j++)
		x[j] = (double)value_of(keys[j]) / t;
	size_t keep = k;
	if (p->top_p > 0 && p->top_p < 1) {
		double *q = s->work;
		for (size_t j = 0; j < k; j++)
			q[j] = exp(x[j] - x[0]);
		double total = tf_sample_pairwise_sum(q, k), cum = 0;
		size_t below = 0;
		for (size_t j = 0; j < k; j++) {
			cum += q[j] / total;
			if (cum < p->top_p)
				below++;
		}
		keep = below + 1 < k ? below + 1 : k;
	}
	return keyed(keys, x, keep, x[0] + min_log(p), p, position);
}

int32_t tf_sample_row(struct tf_sampler *s, const float *logits, size_t n, uint64_t position,
		      const struct tf_sample_params *p)
{
	if (n > s->cap)
		n = s->cap;
	if (tf_sample_greedy(p)) {
		uint64_t best = key_of(logits[0], 0);
		for (size_t i = 1; i < n; i++) {
			uint64_t k = key_of(logits[i], (uint32_t)i);
			best = k > best ? k : best;
		}
		return id_of(best);
	}
	uint64_t *keys = s->keys;
	for (size_t i = 0; i < n; i++)
		keys[i] = key_of(logits[i], (uint32_t)i);
	sort_desc(s, keys, n);
	return draw_sorted(s, keys, n, position, p);
}

int tf_sample_top(struct tf_sampler *s, const float *values, const int32_t *ids, size_t n,
		  uint64_t position, const struct tf_sample_params *p, int32_t *token)
{
	if (n == 0 || n > s->cap)
		return 0;
	uint64_t *keys = s->keys;
	for (size_t i = 0; i < n; i++)
		keys[i] = key_of(values[i], (uint32_t)ids[i]);
	if (tf_sample_greedy(p)) {
		uint64_t best = keys[0];
		for (size_t i = 1; i < n; i++)
			best = keys[i] > best ? keys[i] : best;
		*token = id_of(best);
		return 1;
	}
	if (p->top_k == 0 || p->top_k > n)
		return 0;
	sort_desc(s, keys, n);
	*token = draw_sorted(s, keys, n, position, p);
	return 1;
}

void tf_sample_stats(const float *logits, size_t n, double temperature,
		     struct tf_sample_stats *out)
{
	double t = temperature > 1e-6 ? temperature : 1e-6, m = -INFINITY, sum = 0;
	for (size_t i = 0; i < n; i++)
		m = logits[i] > m ? logits[i] : m;
	for (size_t i = 0; i < n; i++)
		sum += exp((double)logits[i] / t - m / t);
	out->max = m;
	out->sum = sum;
}

int tf_sample_nucleus(struct tf_sampler *s, const float *values, const int32_t *ids, size_t n,
		      size_t count, const struct tf_sample_stats *stats, int nstats,
		      uint64_t position, const struct tf_sample_params *p, int32_t *token)
{
	if (n == 0 || n > s->cap || !tf_sample_is_nucleus(p))
		return 0;
	uint64_t *keys = s->keys;
	for (size_t i = 0; i < n; i++)
		keys[i] = key_of(values[i], (uint32_t)ids[i]);
	sort_desc(s, keys, n);
	if (count > 0 && count < n)
		n = count;
	double t = p->temperature > 1e-6 ? p->temperature : 1e-6, m = -INFINITY, z = 0;
	for (int r = 0; r < nstats; r++)
		m = stats[r].max > m ? stats[r].max : m;
	for (int r = 0; r < nstats; r++)
		z += stats[r].sum * exp(stats[r].max / t - m / t);
	double top = value_of(keys[0]);
	if (n < 2 || !isfinite(top) || !isfinite(z) || z <= 0 || top != m)
		return 0;
	double *x = s->scaled, cum = 0;
	size_t below = 0;
	for (size_t j = 0; j < n; j++)
		x[j] = (double)value_of(keys[j]) / t;
	for (size_t j = 0; j < n; j++) {
		cum += exp(x[j] - x[0]) / z;
		if (fabs(cum - p->top_p) <= NUCLEUS_GUARD)
			return 0;
		if (cum < p->top_p)
			below++;
	}
	size_t keep = below + 1;
	/* the prefix must end inside the candidates, before a value they cut */
	if (keep >= n || !(value_of(keys[keep - 1]) > value_of(keys[n - 1])))
		return 0;
	*token = keyed(keys, x, keep, x[0] + min_log(p), p, position);
	return 1;
}

void tf_sample_logprobs(struct tf_sampler *s, const float *logits, size_t n, int32_t token,
			int top_n, float *lp, int32_t *top_ids, float *top_lp)
{
	if (n > s->cap)
		n = s->cap;
	double m = -INFINITY, sum = 0;
	for (size_t i = 0; i < n; i++)
		m = logits[i] > m ? logits[i] : m;
	for (size_t i = 0; i < n; i++)
		sum += exp((double)logits[i] - m);
	double lse = m + log(sum);
	if (lp)
		*lp = token >= 0 && (size_t)token < n ? (float)((double)logits[token] - lse)
						      : -INFINITY;
	if (top_n <= 0)
		return;
	if ((size_t)top_n > n)
		top_n = (int)n;
	for (size_t i = 0; i < n; i++)
		s->keys[i] = key_of(logits[i], (uint32_t)i);
	sort_desc(s, s->keys, n);
	for (int i = 0; i < top_n; i++) {
		top_ids[i] = id_of(s->keys[i]);
		top_lp[i] = (float)((double)value_of(s->keys[i]) - lse);
	}
}
