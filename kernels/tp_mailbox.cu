/* tp_mailbox.cu: the same-host two-rank mailbox (small all-reduce sum of
 * f32/bf16, all-gather and exchange) through a shared pinned host region.
 *
 * Math: all-reduce out[i] = x0[i] + x1[i] with rank 0's operand first; f32
 * adds in f32, bf16 adds in f32 and rounds once to nearest-even (the host
 * reference tf_comm_reduce in libcore/fabric/reduce.c is the CPU twin).
 * All-gather: out[r * n + i] = x_r[i]. Exchange: out[i] = x_peer[i].
 * Layout (host region, both ranks map it): 4 KiB of control words (word 0
 * abort, word 1 poison, words 16 + 8r: rank r's failure record), then per
 * rank an inbox: 4 KiB of flags (2 slots x 16 blocks x 128-byte lines) and 2
 * slots of slot_bytes. Each launch takes seq = epoch + 1 and slot seq & 1:
 * block b writes its share of this rank's operand into the peer's inbox,
 * fences (sys) and release-stores flag[slot][b] = seq there; thread 0 then
 * spins with acquire (sys) loads on its own flag[slot][b], checking abort and
 * %globaltimer every 64 polls; on a timeout or abort it poisons the mailbox
 * (CAS word 1) and writes its record (failed, seq, seen, block, why 1 abort
 * / 2 timeout, microseconds waited). Copy-out reads with volatile (uncached)
 * loads. The last block to finish (device counter) publishes the epoch if
 * nothing failed; a poisoned mailbox makes every later launch do nothing.
 * Launch: grid = the next power of two >= bytes / 16 KiB, at most 16; 512
 * threads; no shared memory beyond a flag. Two slots let a rank run one
 * launch ahead of its peer (it cannot run two: its next launch waits for
 * the peer's flags of the current one). */
#include <stdint.h>

struct tp_mail_args {
	const unsigned char *in;     /* this rank's operand (device) */
	unsigned char *out;          /* result (device) */
	unsigned char *peer_inbox;   /* peer's inbox (mapped host) */
	unsigned char *my_inbox;     /* own inbox (mapped host) */
	unsigned int *ctl;           /* control words (mapped host) */
	unsigned int *state;         /* device: epoch, finished-block counter */
	unsigned long long bytes;    /* per rank */
	unsigned long long slot_bytes;
	unsigned long long timeout_ns;
	int op;                      /* 0 sum f32, 1 sum bf16, 2 all-gather, 3 exchange */
	int rank;
};

#define TP_FLAGS 4096
#define TP_LINE 128

static __device__ __forceinline__ unsigned ld_acquire_sys(const unsigned *p)
{
	unsigned v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

static __device__ __forceinline__ void st_release_sys(unsigned *p, unsigned v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ unsigned long long globaltimer(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* f32 add rounded to nearest, denormals kept: the build's fast-math flag
 * (-ftz) must not change the result. */
static __device__ __forceinline__ float add_rn(float x, float y)
{
	float z;
	asm("add.rn.f32 %0, %1, %2;" : "=f"(z) : "f"(x), "f"(y));
	return z;
}

static __device__ __forceinline__ float bf16_to_f32(unsigned short h)
{
	return __uint_as_float((unsigned)h << 16);
}

/* Round to nearest-even, NaN kept quiet: the host's tf_f32_to_bf16. */
static __device__ __forceinline__ unsigned short f32_to_bf16(float f)
{
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (unsigned short)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (unsigned short)(u >> 16);
}

extern "C" __global__ void __launch_bounds__(512) tp_mailbox(struct tp_mail_args a)
{
	__shared__ int failed;
	volatile unsigned *ctl = a.ctl;
	if (ctl[1])
		return; /* poisoned: do nothing */
	const unsigned seq = a.state[0] + 1, slot = seq & 1, b = blockIdx.x;
	unsigned long long chunk = (a.bytes + gridDim.x - 1) / gridDim.x;
	chunk = (chunk + 15) & ~15ull;
	unsigned long long lo = (unsigned long long)b * chunk, hi = lo + chunk;
	if (lo > a.bytes)
		lo = a.bytes;
	if (hi > a.bytes)
		hi = a.bytes;
	unsigned char *peer_slot = a.peer_inbox + TP_FLAGS + slot * a.slot_bytes;
	const volatile unsigned char *my_slot = a.my_inbox + TP_FLAGS + slot * a.slot_bytes;

	/* 1. Send this block's share (16-byte stores where aligned). */
	unsigned long long mid = lo;
	if (!(((uintptr_t)a.in | (uintptr_t)peer_slot) & 15)) {
		mid = lo + ((hi - lo) & ~15ull);
		for (unsigned long long i = lo / 16 + threadIdx.x; i < mid / 16; i += blockDim.x)
			((uint4 *)peer_slot)[i] = ((const uint4 *)a.in)[i];
	}
	for (unsigned long long i = mid + threadIdx.x; i < hi; i += blockDim.x)
		peer_slot[i] = a.in[i];
	__syncthreads();
	if (threadIdx.x == 0) {
		failed = 0;
		asm volatile("fence.sc.sys;" ::: "memory");
		st_release_sys((unsigned *)(a.peer_inbox + (slot * 16 + b) * TP_LINE), seq);
		/* 2. Wait for the peer's share of the same range. */
		const unsigned *flag = (const unsigned *)(a.my_inbox + (slot * 16 + b) * TP_LINE);
		unsigned long long t0 = globaltimer(), now = t0;
		unsigned seen, polls = 0, why = 0;
		while ((seen = ld_acquire_sys(flag)) != seq) {
			if (++polls % 64)
				continue;
			now = globaltimer();
			if (ctl[0] || ctl[1])
				why = 1; /* aborted, or the peer poisoned the mailbox */
			else if (now - t0 > a.timeout_ns)
				why = 2;
			if (why)
				break;
		}
		if (why) {
			failed = 1;
			atomicCAS(a.ctl + 1, 0u, 1u);
			volatile unsigned *rec = a.ctl + 16 + 8 * a.rank;
			rec[1] = seq, rec[2] = seen, rec[3] = b, rec[4] = why;
			rec[5] = (unsigned)((now - t0) / 1000);
			__threadfence_system();
			rec[0] = 1;
		}
	}
	__syncthreads();
	if (failed)
		return;
	/* 3. Combine, rank 0's operand first. */
	if (a.op == 0) {
		for (unsigned long long i = lo / 4 + threadIdx.x; i < hi / 4; i += blockDim.x) {
			float x = ((const float *)a.in)[i], y = ((const volatile float *)my_slot)[i];
			((float *)a.out)[i] = a.rank == 0 ? add_rn(x, y) : add_rn(y, x);
		}
	} else if (a.op == 1) {
		for (unsigned long long i = lo / 2 + threadIdx.x; i < hi / 2; i += blockDim.x) {
			float x = bf16_to_f32(((const unsigned short *)a.in)[i]);
			float y = bf16_to_f32(((const volatile unsigned short *)my_slot)[i]);
			((unsigned short *)a.out)[i] = f32_to_bf16(a.rank == 0 ? add_rn(x, y) : add_rn(y, x));
		}
	} else if (a.op == 2) {
		unsigned char *mine = a.out + (unsigned long long)a.rank * a.bytes;
		unsigned char *theirs = a.out + (unsigned long long)(1 - a.rank) * a.bytes;
		for (unsigned long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
			if (mine != a.in)
				mine[i] = a.in[i];
			theirs[i] = my_slot[i];
		}
	} else {
		for (unsigned long long i = lo + threadIdx.x; i < hi; i += blockDim.x)
			a.out[i] = my_slot[i];
	}
	/* 4. The last block publishes the epoch. */
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		if (atomicAdd(a.state + 1, 1u) == gridDim.x - 1) {
			a.state[1] = 0;
			if (!ctl[1])
				a.state[0] = seq;
			__threadfence();
		}
	}
}
