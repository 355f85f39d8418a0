/* mix-order.c: hc_mix's n-long sums in three orders on the host: fp64, the
 * CPU's (cpu_dot: 8 interleaved partials) and kernels/mhc.cu's (chunks of
 * 512, lane chains of 8 pairs by fma, xor trees over the lanes and over the
 * chunks), then the mix (sigmoids, softmax, 20 Sinkhorn passes) in fp32 as
 * cpu_hc_mix and in fp64; prints the worst errors of each part (pre, post,
 * comb) relative to the part's largest value, on gpu_ops' inputs (x bf16
 * of scale 1.7, fn of scale 1.7 / sqrt(n)). A check of the device's order
 * without a device, not a test of the kernel.
 *   cc -O2 -o /tmp/mix-order tools/mix-order.c -lm && /tmp/mix-order [D] [rows] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
static uint64_t st = 88172645463325252ull;
static double urand(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (st >> 11) * (1.0 / 9007199254740992.0) * 2 - 1; }
static float bfr(float f) { union { float f; uint32_t u; } v = {f}; v.u += 0x7fff + ((v.u >> 16) & 1); v.u &= 0xffff0000u; return v.f; }
static float cpu_dot(const float *a, const float *b, int64_t n)
{
	float s[8] = {0}; int64_t i = 0;
	for (; i + 8 <= n; i += 8) for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
	for (int j = 0; i < n; i++, j++) s[j] += a[i] * b[i];
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
static float xor_tree(float *v) /* lane 0's result */
{
	float w[32];
	for (int o = 16; o > 0; o >>= 1) {
		for (int l = 0; l < 32; l++) w[l] = v[l] + v[l ^ o];
		for (int l = 0; l < 32; l++) v[l] = w[l];
	}
	return v[0];
}
static float gpu_dot(const float *a, const float *b, int64_t n)
{
	int64_t chunks = (n + 511) / 512;
	float *part = calloc(chunks, sizeof *part);
	for (int64_t c = 0; c < chunks; c++) {
		float v[32];
		for (int l = 0; l < 32; l++) {
			float acc = 0;
			for (int j = 0; j < 8; j++) {
				int64_t i = c * 512 + 64 * j + 2 * l;
				float a0 = i < n ? a[i] : 0, b0 = i < n ? b[i] : 0;
				float a1 = i + 1 < n ? a[i + 1] : 0, b1 = i + 1 < n ? b[i + 1] : 0;
				acc = fmaf(a0, b0, acc);
				acc = fmaf(a1, b1, acc);
			}
			v[l] = acc;
		}
		part[c] = xor_tree(v);
	}
	float v[32];
	for (int l = 0; l < 32; l++) { v[l] = 0; for (int64_t c = l; c < chunks; c += 32) v[l] += part[c]; }
	free(part);
	return xor_tree(v);
}
static double ddot(const float *a, const float *b, int64_t n) { double s = 0; for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i]; return s; }
static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
/* the CPU's mix from dots m (already times rs) */
static void mixf(const float *m, const float *base, const float *sc, int S, float *out)
{
	float hc = 1e-6f;
	for (int k = 0; k < S; k++) { out[k] = sigm(sc[0] * m[k] + base[k]) + hc; out[S + k] = 2 * sigm(sc[1] * m[S + k] + base[S + k]); }
	float *c = out + 2 * S;
	for (int i = 0; i < S; i++) { float mx = -INFINITY, s = 0; float *row = c + i * S;
		for (int q = 0; q < S; q++) { row[q] = sc[2] * m[2 * S + i * S + q] + base[2 * S + i * S + q]; mx = row[q] > mx ? row[q] : mx; }
		for (int q = 0; q < S; q++) { row[q] = expf(row[q] - mx); s += row[q]; }
		for (int q = 0; q < S; q++) row[q] = row[q] / s + hc; }
	for (int it = 0; it < 20; it++) {
		if (it > 0) for (int i = 0; i < S; i++) { float s = 0; for (int j = 0; j < S; j++) s += c[i * S + j]; for (int j = 0; j < S; j++) c[i * S + j] /= s + hc; }
		for (int j = 0; j < S; j++) { float s = 0; for (int i = 0; i < S; i++) s += c[i * S + j]; for (int i = 0; i < S; i++) c[i * S + j] /= s + hc; }
	}
}
static void mixd(const double *m, const float *base, const float *sc, int S, double *out)
{
	double hc = 1e-6;
	for (int k = 0; k < S; k++) { out[k] = 1 / (1 + exp(-(sc[0] * m[k] + base[k]))) + hc; out[S + k] = 2 / (1 + exp(-(sc[1] * m[S + k] + base[S + k]))); }
	double *c = out + 2 * S;
	for (int i = 0; i < S; i++) { double mx = -INFINITY, s = 0; double *row = c + i * S;
		for (int q = 0; q < S; q++) { row[q] = sc[2] * m[2 * S + i * S + q] + base[2 * S + i * S + q]; mx = row[q] > mx ? row[q] : mx; }
		for (int q = 0; q < S; q++) { row[q] = exp(row[q] - mx); s += row[q]; }
		for (int q = 0; q < S; q++) row[q] = row[q] / s + hc; }
	for (int it = 0; it < 20; it++) {
		if (it > 0) for (int i = 0; i < S; i++) { double s = 0; for (int j = 0; j < S; j++) s += c[i * S + j]; for (int j = 0; j < S; j++) c[i * S + j] /= s + hc; }
		for (int j = 0; j < S; j++) { double s = 0; for (int i = 0; i < S; i++) s += c[i * S + j]; for (int i = 0; i < S; i++) c[i * S + j] /= s + hc; }
	}
}
int main(int argc, char **argv)
{
	int S = 4, D = argc > 1 ? atoi(argv[1]) : 5120, M = 2 * S + S * S, rows = argc > 2 ? atoi(argv[2]) : 64;
	int64_t n = (int64_t)S * D;
	float *x = malloc(n * 4), *fn = malloc(M * n * 4);
	double worst[2][3] = {{0}}, worstdot[2] = {0}, worstcg = 0;
	for (int r = 0; r < rows; r++) {
		for (int64_t i = 0; i < n; i++) x[i] = bfr(1.7f * (float)urand());
		for (int64_t i = 0; i < M * n; i++) fn[i] = 1.7f / sqrtf((float)n) * (float)urand();
		float base[24], sc[3] = {0.5f + 0.5f * fabs(urand()), 0.5f + 0.5f * fabs(urand()), 1 + fabs(urand())};
		for (int t = 0; t < M; t++) base[t] = (float)urand();
		double md[24], od[24]; float mf[2][24], of[2][24];
		double ssd = ddot(x, x, n), rsd = 1 / sqrt(ssd / n + 1e-6);
		float ssc = cpu_dot(x, x, n), ssg = gpu_dot(x, x, n);
		float rsc = 1.0f / sqrtf(ssc / (float)n + 1e-6f), rsg = 1.0f / sqrtf(ssg / (float)n + 1e-6f);
		for (int t = 0; t < M; t++) {
			double dd = ddot(x, fn + t * n, n);
			float dc = cpu_dot(x, fn + t * n, n), dg = gpu_dot(x, fn + t * n, n);
			double mag = 0; for (int64_t i = 0; i < n; i++) mag += fabs((double)x[i] * fn[t * n + i]);
			worstdot[0] = fmax(worstdot[0], fabs(dc - dd) / mag);
			worstdot[1] = fmax(worstdot[1], fabs(dg - dd) / mag);
			md[t] = dd * rsd; mf[0][t] = dc * rsc; mf[1][t] = dg * rsg;
		}
		mixd(md, base, sc, S, od);
		mixf(mf[0], base, sc, S, of[0]);
		mixf(mf[1], base, sc, S, of[1]);
		for (int v = 0; v < 2; v++)
			for (int part = 0; part < 3; part++) {
				int lo = part == 0 ? 0 : part == 1 ? S : 2 * S, hi = part == 0 ? S : part == 1 ? 2 * S : M;
				double big = 0; for (int t = lo; t < hi; t++) big = fmax(big, fabs(od[t]));
				for (int t = lo; t < hi; t++) worst[v][part] = fmax(worst[v][part], fabs(of[v][t] - od[t]) / big);
			}
		for (int part = 0; part < 3; part++) {
			int lo = part == 0 ? 0 : part == 1 ? S : 2 * S, hi = part == 0 ? S : part == 1 ? 2 * S : M;
			double bg = 0; for (int t = lo; t < hi; t++) bg = fmax(bg, fabs(of[0][t]));
			for (int t = lo; t < hi; t++) worstcg = fmax(worstcg, fabs(of[1][t] - of[0][t]) / bg);
		}
	}
	printf("D %d rows %d: dot err / sum|xw|: cpu %.2e gpu %.2e\n", D, rows, worstdot[0], worstdot[1]);
	printf("vs fp64 (rel of part's max): cpu pre %.2e post %.2e comb %.2e; gpu pre %.2e post %.2e comb %.2e\n",
	       worst[0][0], worst[0][1], worst[0][2], worst[1][0], worst[1][1], worst[1][2]);
	printf("gpu vs cpu worst rel (of part max): %.2e\n", worstcg);
	return 0;
}
