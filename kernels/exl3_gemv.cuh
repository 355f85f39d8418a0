/* exl3_gemv.cuh: what the one-launch GEMV kernels share (exl3_gemv.cu,
 * exl3_gemv10.cu): the argument block, a block's job and its end (split-K
 * sums in the workspace, the last block's output Hadamard and svh). */
#ifndef TF_KERNELS_EXL3_GEMV_CUH
#define TF_KERNELS_EXL3_GEMV_CUH

#include "kernels/exl3_common.cuh"

struct exl3_gemv_args {
	const uint32_t *trellis; /* the tiles, as u32 words */
	const __half *suh;       /* [K] */
	const __half *svh;       /* [N] */
	const __nv_bfloat16 *x;  /* [rows][K] */
	void *y;                 /* [rows][N], f32 or bf16 */
	float *acc;              /* [16][N] zeroed workspace */
	unsigned *count;         /* [N/128] zeroed */
	int k, n, rows;
	int chunks_per_slice;    /* 128-blocks of K per block */
	int y_bf16;
};

#define GEMV_THREADS 256
/* The most blocks a cluster of split-K slices spans (16: past the portable
 * 8, which the launcher allows for the kernel). */
#define GEMV_CLUSTER_MAX 16

__device__ __forceinline__ uint32_t h2u(__half2 h)
{
	return *reinterpret_cast<uint32_t *>(&h);
}

/* What one block of the body works on. */
struct gemv_job {
	const uint32_t *trellis;
	const __half *suh, *svh;
	const __nv_bfloat16 *x;
	const int *xrow; /* x row of row r: xrow[r], or r when NULL */
	void *y;         /* row r at y + r·N */
	float *acc;      /* this job's [rows][N] partial sums */
	unsigned *count; /* this job's [N/128] counters */
	int k, n, rows;
	int chunks_per_slice;
	int y_bf16;
};

/* One expert of a ragged group. */
struct exl3_expert {
	unsigned long long off; /* byte offset of its trellis */
	int bits, pad;
};

/* One task: an expert and its rows. */
struct exl3_task {
	int expert, first, count, pad;
};

struct exl3_experts_args {
	const unsigned char *trellis;      /* all experts, back to back */
	const exl3_expert *experts;        /* [E] */
	const __half *suh;                 /* [E][K] */
	const __half *svh;                 /* [E][N] */
	const exl3_task *tasks;            /* [T] */
	const int *xrow;                   /* [pairs]: the x row of each pair */
	const __nv_bfloat16 *x;            /* [rows][K] */
	void *y;                           /* [pairs][N] */
	float *acc;                        /* [T][R][N] zeroed */
	unsigned *count;                   /* [T][N/128] zeroed */
	int k, n;
	int chunks_per_slice;
	int y_bf16;
};

/* Ĥ(x[r] ⊙ suh) for the 128-block kb of K by one warp, unnormalised:
 * lane l gets elements 4l..4l+3 in v; zeros when row r is past a.rows. */
__device__ __forceinline__ void u_block(const gemv_job &a, int kb, int r, int lane, float v[4])
{
	v[0] = v[1] = v[2] = v[3] = 0.f;
	if (r < a.rows) {
		const int k = kb * 128 + 4 * lane;
		const int xr = a.xrow ? a.xrow[r] : r;
		scale_in4(a.x + (size_t)xr * a.k + k, a.suh + k, v);
		had128_warp(v, lane);
	}
}

/* The job of an experts-launch block (grid (N/128, slices, tasks)): its
 * task's expert and rows, and that task's rows of the workspace; returns
 * the expert's bit width. */
template <int R>
__device__ __forceinline__ int experts_job(const exl3_experts_args &a, gemv_job &j)
{
	/* The tasks and their rows may come from the launch before this one
	 * (routing on the GPU): as a dependent launch, wait for it first. */
	asm volatile("griddepcontrol.wait;" ::: "memory");
	const exl3_task t = a.tasks[blockIdx.z];
	const exl3_expert e = a.experts[t.expert];
	j.trellis = reinterpret_cast<const uint32_t *>(a.trellis + e.off);
	j.suh = a.suh + (size_t)t.expert * a.k;
	j.svh = a.svh + (size_t)t.expert * a.n;
	j.x = a.x;
	j.xrow = a.xrow + t.first;
	j.y = a.y_bf16 ? static_cast<void *>(static_cast<__nv_bfloat16 *>(a.y) + (size_t)t.first * a.n)
	               : static_cast<void *>(static_cast<float *>(a.y) + (size_t)t.first * a.n);
	j.acc = a.acc + (size_t)blockIdx.z * R * a.n;
	j.count = a.count + (size_t)blockIdx.z * (a.n >> 7);
	j.k = a.k;
	j.n = a.n;
	j.rows = t.count;
	j.chunks_per_slice = a.chunks_per_slice;
	j.y_bf16 = a.y_bf16;
	return e.bits;
}

/* Thread-block clusters (sm_90): the blocks in this one, this block's
 * rank in it, a barrier over all of their threads (release before,
 * acquire after), and a float from block rank's shared memory at the
 * address p has in this block's. */
__device__ __forceinline__ unsigned cluster_blocks()
{
	unsigned n;
	asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
	return n;
}

__device__ __forceinline__ unsigned cluster_rank()
{
	unsigned r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
	return r;
}

__device__ __forceinline__ void cluster_sync()
{
	asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
	             "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ float cluster_ld(const float *p, unsigned rank)
{
	uint32_t a = (uint32_t)__cvta_generic_to_shared(p), ra;
	float v;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
	asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
	return v;
}

/* The end of a GEMV block, once part[r][0..127] holds its partial sums of
 * this block's 128 columns: split-K slices meet, then y = (a · Ĥ_N) ⊙ svh
 * by one block. Launched as clusters that span the slices (grid y), the
 * slices meet in shared memory: block 0 of the cluster adds the others'
 * sums in rank order (deterministic, no workspace), the others leave after
 * a second barrier (their shared memory must live until it is read).
 * Else in the workspace: each block adds its sums atomically and counts
 * itself in; the last block takes the sums and re-zeroes the workspace.
 * How a block's sums are published before its count there:
 * FENCE 0: every thread fences; 1: one thread fences, after the block's
 * barrier (cumulative over it); 2: that thread's count is one
 * acquire-release atomic, with no fence (the release is cumulative over
 * the barrier, the acquire covers the last block's reads after the next
 * barrier). */
template <int R, int FENCE>
__device__ __forceinline__ void gemv_tail(const gemv_job &a, float (*part)[128], unsigned &last)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nb = blockIdx.x;
	__syncthreads();

	const unsigned cn = cluster_blocks();
	if (cn > 1) {
		cluster_sync();
		const unsigned me = cluster_rank();
		if (me == 0)
			for (int e = threadIdx.x; e < R * 128; e += GEMV_THREADS) {
				const int r = e >> 7, c = e & 127;
				if (r < a.rows) {
					/* all loads in flight at once, then the sum in rank order */
					float t[GEMV_CLUSTER_MAX];
#pragma unroll
					for (unsigned b = 1; b < GEMV_CLUSTER_MAX; b++)
						t[b] = b < cn ? cluster_ld(&part[r][c], b) : 0.f;
					float v = part[r][c];
#pragma unroll
					for (unsigned b = 1; b < GEMV_CLUSTER_MAX; b++)
						v += t[b];
					part[r][c] = v;
				}
			}
		cluster_sync();
		if (me != 0)
			return;
	}
	const int slices = gridDim.y;
	if (cn == 1 && slices > 1) {
		float *acc_g = a.acc + (size_t)nb * 128;
		for (int e = threadIdx.x; e < R * 128; e += GEMV_THREADS) {
			const int r = e >> 7, c = e & 127;
			if (r < a.rows)
				atomicAdd(acc_g + (size_t)r * a.n + c, part[r][c]);
		}
		if (FENCE == 0)
			__threadfence();
		__syncthreads();
		if (threadIdx.x == 0) {
			unsigned c;
			if (FENCE == 2) {
				asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
				             : "=r"(c) : "l"(a.count + nb) : "memory");
			} else {
				__threadfence(); /* (FENCE 1: cumulative over the barrier) */
				c = atomicAdd(a.count + nb, 1u);
			}
			last = c == (unsigned)slices - 1;
		}
		__syncthreads();
		if (!last)
			return;
		if (FENCE != 2)
			__threadfence();
		for (int e = threadIdx.x; e < R * 128; e += GEMV_THREADS) {
			const int r = e >> 7, c = e & 127;
			if (r < a.rows) {
				float *p = acc_g + (size_t)r * a.n + c;
				part[r][c] = __ldcg(p);
				__stcg(p, 0.f);
			}
		}
		if (threadIdx.x == 0)
			a.count[nb] = 0;
		__syncthreads();
	}

	/* y = (a · Ĥ_N) ⊙ svh for this block's 128 columns: warp w, rows w, w+8. */
#pragma unroll
	for (int rr = 0; rr < (R + 7) / 8; rr++) {
		const int r = warp + 8 * rr;
		if (r < R && r < a.rows) {
			float v[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				v[i] = part[r][4 * lane + i];
			had128_warp(v, lane);
			const int n0 = nb * 128 + 4 * lane;
			store_y4(a.y, a.y_bf16, (size_t)r * a.n + n0, v, a.svh + n0);
		}
	}
}

#endif
