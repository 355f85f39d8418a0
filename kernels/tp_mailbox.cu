/* tp_mailbox.cu: the same-host two-rank mailbox (small all-reduce sum of
 * f32/bf16, all-gather and exchange), one launch per call.
 *
 * Math: all-reduce out[i] = x0[i] + x1[i] with rank 0's operand first; f32
 * adds in f32, bf16 adds in f32 and rounds once to nearest-even (the host
 * reference tf_comm_reduce in libcore/fabric/reduce.c is the CPU twin).
 * All-gather: out[r * n + i] = x_r[i]. Exchange: out[i] = x_peer[i].
 *
 * Protocol (flags travel with the data, so a call costs one one-way trip):
 * the payload is cut into 8-byte words; word i travels as one 16-byte line
 * {lo 4 bytes, seq, hi 4 bytes, seq} stored with one volatile vector store
 * into line i of the peer's inbox, whose 8-byte halves land whole (the same
 * guarantee NCCL's LL protocol rests on). The receiver polls its own line i
 * until both halves carry seq, combines it with its own word and writes the
 * result, then zeroes the line (0 is never a seq, so a line left from any
 * earlier call can never pass for a new one). No fence, no separate flag,
 * no round trip. An inbox is 2 slots of slot_lines lines; it lives in the
 * receiving GPU's memory when the GPUs reach each other (peer-to-peer; the
 * sender's stores cross NVLink and the receiver polls its own L2), else in
 * the shared pinned host region.
 *
 * Blocks: 512 threads; 512 lines (4 KiB of payload) make a chunk, one
 * line a thread (a thread waits for one line at a time, so two would add a
 * round trip); chunk c belongs to block c mod grid, grid = min(64, chunks):
 * a chunk has the same owner in every call. Block b keeps its own epoch (state[32 + b]) and takes
 * seq = epoch + 1 (0 skipped: after 0xffffffff comes 2, parity alternating)
 * and slot seq & 1. Two slots let a rank run one call ahead of its peer: it
 * cannot run two, since its call k + 1 waits for the peer's lines of call
 * k + 1, which the peer sends only after finishing call k. No block waits
 * for another, so there is no grid-wide barrier.
 *
 * Failure: a wait checks, every 256 polls, the local poison word
 * (state[0]), the shared abort and poison words (ctl[0], ctl[1]) and
 * %globaltimer; on an abort, a peer's poison or timeout_ns without its
 * line, the first waiter of the rank (device CAS on state[0]) writes the
 * rank's failure record (ctl words 16 + 8r: failed, seq, seen, block, why 1
 * abort / 2 timeout, microseconds waited) and sets ctl[1]; every later
 * launch of the rank does nothing, and every wait of the peer ends at its
 * next check. Host layout and record: libcore/fabric/mailbox.c. */
#include <stdint.h>

struct tp_mail_args {
	const unsigned char *in;     /* this rank's operand (device) */
	unsigned char *out;          /* result (device) */
	uint4 *peer_inbox;           /* the peer's inbox (peer GPU or mapped host) */
	uint4 *my_inbox;             /* own inbox (this GPU or mapped host) */
	unsigned int *ctl;           /* control words (mapped host) */
	unsigned int *state;         /* device: [0] poison, [32 + b] block b's epoch */
	unsigned long long bytes;    /* per rank */
	unsigned long long slot_lines;
	unsigned long long timeout_ns;
	int op;                      /* 0 sum f32, 1 sum bf16, 2 all-gather, 3 exchange */
	int rank;
};

#define TP_THREADS 512
#define TP_CHUNK 512 /* lines: 1 per thread */

static __device__ __forceinline__ uint4 ld_volatile_v4(const uint4 *p)
{
	uint4 v;
	asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

static __device__ __forceinline__ void st_volatile_v4(uint4 *p, uint4 v)
{
	asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
		     "r"(v.z), "r"(v.w)
		     : "memory");
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

/* Round to nearest-even, NaN kept quiet: the host's tf_f32_to_bf16. */
static __device__ __forceinline__ unsigned f32_to_bf16(float f)
{
	unsigned u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return ((u >> 16) | 0x40) & 0xffff;
	u += 0x7fffu + ((u >> 16) & 1);
	return u >> 16;
}

/* n (1..8) bytes at p as a little-endian word; one load when aligned. */
static __device__ __forceinline__ unsigned long long load8(const unsigned char *p, unsigned n)
{
	if (n == 8 && !((uintptr_t)p & 7))
		return *(const unsigned long long *)p;
	unsigned long long v = 0;
	for (unsigned k = 0; k < n; k++)
		v |= (unsigned long long)p[k] << (8 * k);
	return v;
}

static __device__ __forceinline__ void store8(unsigned char *p, unsigned long long v, unsigned n)
{
	if (n == 8 && !((uintptr_t)p & 7)) {
		*(unsigned long long *)p = v;
		return;
	}
	for (unsigned k = 0; k < n; k++)
		p[k] = (unsigned char)(v >> (8 * k));
}

/* a + b lane by lane (a is rank 0's word): 2 f32 or 4 bf16. */
static __device__ __forceinline__ unsigned long long sum8(int op, unsigned long long a, unsigned long long b)
{
	if (op == 0) {
		float lo = add_rn(__uint_as_float((unsigned)a), __uint_as_float((unsigned)b));
		float hi = add_rn(__uint_as_float((unsigned)(a >> 32)), __uint_as_float((unsigned)(b >> 32)));
		return (unsigned long long)__float_as_uint(lo) | (unsigned long long)__float_as_uint(hi) << 32;
	}
	unsigned long long r = 0;
#pragma unroll
	for (int k = 0; k < 4; k++) {
		float x = __uint_as_float((unsigned)(a >> (16 * k)) << 16);
		float y = __uint_as_float((unsigned)(b >> (16 * k)) << 16);
		r |= (unsigned long long)f32_to_bf16(add_rn(x, y)) << (16 * k);
	}
	return r;
}

/* Poison the mailbox for this rank: the first failing waiter writes the
 * record, then the shared poison word. */
static __device__ void fail(const struct tp_mail_args &a, unsigned seq, unsigned seen, unsigned why,
			    unsigned long long waited_ns)
{
	if (atomicCAS(a.state, 0u, 1u) != 0)
		return;
	volatile unsigned *rec = a.ctl + 16 + 8 * a.rank;
	rec[1] = seq, rec[2] = seen, rec[3] = blockIdx.x, rec[4] = why;
	rec[5] = (unsigned)(waited_ns / 1000);
	__threadfence_system();
	rec[0] = 1;
	__threadfence_system();
	((volatile unsigned *)a.ctl)[1] = 1;
	__threadfence_system();
}

/* Wait until line p carries seq in both halves; false after a failure.
 * The clock starts at the first check (256 polls in), so the fast path
 * reads no timer. */
static __device__ __forceinline__ bool wait_line(const struct tp_mail_args &a, const uint4 *p, unsigned seq,
						 uint4 *v)
{
	unsigned long long t0 = 0;
	for (unsigned polls = 1;; polls++) {
		uint4 x = ld_volatile_v4(p);
		if (x.y == seq && x.w == seq) {
			*v = x;
			return true;
		}
		if (polls % 256)
			continue;
		const volatile unsigned *ctl = a.ctl;
		unsigned long long now = globaltimer();
		unsigned why = 0;
		if (!t0)
			t0 = now;
		if (*(volatile unsigned *)a.state)
			return false; /* another waiter of this rank failed */
		if (ctl[0] || ctl[1])
			why = 1; /* aborted, or the peer poisoned the mailbox */
		else if (now - t0 > a.timeout_ns)
			why = 2;
		if (why) {
			fail(a, seq, x.y, why, now - t0);
			return false;
		}
	}
}

extern "C" __global__ void __launch_bounds__(TP_THREADS) tp_mailbox(struct tp_mail_args a)
{
	const unsigned b = blockIdx.x, t = threadIdx.x;
	volatile unsigned *epoch = a.state + 32 + b;
	unsigned seq = *epoch + 1;
	if (!seq)
		seq = 2;
	const unsigned poisoned = *(volatile unsigned *)a.state;
	const unsigned long long lines = (a.bytes + 7) / 8;
	const unsigned long long chunks = (lines + TP_CHUNK - 1) / TP_CHUNK;
	uint4 *peer = a.peer_inbox + (seq & 1) * a.slot_lines;
	uint4 *inbox = a.my_inbox + (seq & 1) * a.slot_lines;
	/* This thread's word of its first chunk, loaded while the epoch and
	 * poison loads are in flight. */
	const unsigned long long first = (unsigned long long)b * TP_CHUNK + t;
	unsigned long long keep = 0;
	if (first < lines)
		keep = load8(a.in + 8 * first, a.bytes - 8 * first < 8 ? (unsigned)(a.bytes - 8 * first) : 8);
	if (__syncthreads_or(poisoned))
		return; /* poisoned: do nothing (the whole block decides alike) */

	/* 1. Send this thread's word of each of the block's chunks. */
	for (unsigned long long c = b; c < chunks; c += gridDim.x) {
		unsigned long long i = c * TP_CHUNK + t;
		if (i >= lines)
			break;
		unsigned long long v = c == b ? keep : load8(a.in + 8 * i, a.bytes - 8 * i < 8 ? (unsigned)(a.bytes - 8 * i) : 8);
		st_volatile_v4(peer + i, make_uint4((unsigned)v, seq, (unsigned)(v >> 32), seq));
	}

	/* 2. Receive the peer's words, combine, free the lines. */
	for (unsigned long long c = b; c < chunks; c += gridDim.x) {
		unsigned long long i = c * TP_CHUNK + t;
		if (i >= lines)
			break;
		unsigned n = a.bytes - 8 * i < 8 ? (unsigned)(a.bytes - 8 * i) : 8;
		uint4 line;
		if (!wait_line(a, inbox + i, seq, &line))
			break;
		unsigned long long y = (unsigned long long)line.x | (unsigned long long)line.z << 32;
		unsigned long long x = c == b ? keep : load8(a.in + 8 * i, n);
		if (a.op <= 1) {
			store8(a.out + 8 * i, a.rank == 0 ? sum8(a.op, x, y) : sum8(a.op, y, x), n);
		} else if (a.op == 2) {
			unsigned char *mine = a.out + (unsigned long long)a.rank * a.bytes;
			if (mine != a.in)
				store8(mine + 8 * i, x, n);
			store8(a.out + (unsigned long long)(1 - a.rank) * a.bytes + 8 * i, y, n);
		} else {
			store8(a.out + 8 * i, y, n);
		}
		st_volatile_v4(inbox + i, make_uint4(0, 0, 0, 0));
	}

	/* 3. The block's epoch moves on (also after a failure: a poisoned
	 * mailbox does nothing any more). */
	__syncthreads();
	if (t == 0)
		*epoch = seq;
}
