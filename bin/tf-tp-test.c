/* tf-tp-test: check and measure the tensor-parallel fabric.
 *
 *   suite                 every collective, dtype and size, bit-exact against
 *                         results computed here in fp64 and integers, not by
 *                         fabric/reduce.c (exit 1 on a mismatch)
 *   failfast VICTIM MODE  the victim fails at step 50 (fatal or kill); the
 *                         others must exit 70 within the grace time + 0.5 s
 *   bench                 an nccl-tests-style all-reduce table
 *   kernel                whether the mailbox kernel is embedded
 *   roce-host             the RoCE protocol over the shm wire (no GPU, no
 *                         HCA): bit-exact gathers, then latency percentiles
 *
 * One process is one rank (TF_TP_RANK, TF_TP_WORLD, ...); --local N starts
 * N ranks of this host itself, one per GPU, and judges failfast. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/f16.h"
#include "base/log.h"
#include "base/num.h"
#include "cuda/driver.h"
#include "cuda/module.h"
#include "fabric/bootstrap.h"
#include "fabric/comm.h"
#include "fabric/fate.h"
#include "fabric/roce.h"
#include "fabric/settings.h"

static struct {
	struct tf_fabric_opts fab;
	int64_t local, iters, max_bytes;
} o;

static struct tf_opt opts[TF_FABRIC_NOPTS + 3] = {
	{"local", 'l', TF_OPT_INT, &o.local, "N", NULL, "0",
	 "start N ranks on this host (one per GPU) and judge them", 0, 64, NULL},
	{"iters", 'n', TF_OPT_INT, &o.iters, "N", NULL, "20", "timed iterations per bench size", 1, 100000, NULL},
	{"max-bytes", 'm', TF_OPT_SIZE, &o.max_bytes, "SIZE", NULL, "4M", "largest message of suite and bench", 0,
	 (double)(1ull << 32), NULL},
};

static const struct tf_cli cli = {
	"tf-tp-test",
	"[OPTION]... suite\n"
	"       tf-tp-test [OPTION]... failfast VICTIM fatal|kill\n"
	"       tf-tp-test [OPTION]... bench\n"
	"       tf-tp-test [OPTION]... roce-host\n"
	"       tf-tp-test kernel",
	"Check and measure the tensor-parallel fabric (collectives, fail-fast).",
	"suite|failfast|bench|roce-host|kernel", opts, TF_NOPTS(opts),
};

static struct tf_fabric_settings S;
static struct tf_boot boot;
static struct tf_comm *comm;
static struct tf_fate *fate;
static struct tf_cu_device dev;
static tf_cu_stream stream;

/* ---- buffers: host memory, or device memory on GPU backends ---- */

struct buf {
	void *p;    /* host pointer or device address */
	size_t n;
};

static void buf_new(struct buf *b, size_t n)
{
	b->n = n;
	if (comm->device) {
		tf_cu_ptr d;
		tf_status st = TF_CU(tf_cu->MemAlloc(&d, n ? n : 1));
		if (st)
			tf_die_status(st, "device buffer");
		b->p = (void *)(uintptr_t)d;
	} else if (!(b->p = malloc(n ? n : 1))) {
		tf_die(71, "out of memory");
	}
}

static void buf_free(struct buf *b)
{
	if (comm->device)
		tf_cu->MemFree((tf_cu_ptr)(uintptr_t)b->p);
	else
		free(b->p);
}

static void put(void *dst, const void *src, size_t n)
{
	if (!n)
		return;
	if (comm->device) {
		/* A pageable copy may still be in flight when it returns, and
		 * the collective stream does not wait for the null stream. */
		tf_status st = TF_CU(tf_cu->MemcpyHtoD((tf_cu_ptr)(uintptr_t)dst, src, n));
		if (!st)
			st = TF_CU(tf_cu->CtxSynchronize());
		if (st)
			tf_die_status(st, "copy to device");
	} else {
		memcpy(dst, src, n);
	}
}

static void get(void *dst, const void *src, size_t n)
{
	if (!n)
		return;
	if (comm->device) {
		tf_status st = TF_CU(tf_cu->StreamSynchronize(stream));
		if (!st)
			st = TF_CU(tf_cu->MemcpyDtoH(dst, (tf_cu_ptr)(uintptr_t)src, n));
		if (st)
			tf_die_status(st, "copy from device");
	} else {
		memcpy(dst, src, n);
	}
}

static void sync_stream(void)
{
	if (comm->device) {
		tf_status st = TF_CU(tf_cu->StreamSynchronize(stream));
		if (st)
			tf_fate_fatal(fate, "stream", tf_errmsg(st));
	}
}

/* ---- opening a rank ---- */

static void open_rank(void)
{
	tf_status st;
	/* The host and roce backends carry host memory: no GPU needed. */
	if (S.backend != TF_FABRIC_HOST && S.backend != TF_FABRIC_ROCE) {
		if ((st = tf_cu_init()) || (st = tf_cu_device_open(S.device, &dev)))
			tf_die_status(st, "cannot open CUDA device %d", S.device);
		if ((st = TF_CU(tf_cu->StreamCreate(&stream, TF_CU_STREAM_NON_BLOCKING))))
			tf_die_status(st, "stream");
	}
	if ((st = tf_boot_open(&boot, &S)))
		tf_die_status(st, "rank %d: bootstrap", S.rank);
	if ((st = tf_comm_open(&boot, &S, &comm)))
		tf_die_status(st, "rank %d: %s backend", S.rank, tf_fabric_backend_name(S.backend));
	if (S.failfast) {
		struct tf_fate_opts fo = tf_fate_opts_of(&S);
		if ((st = tf_fate_start(&boot, &fo, &fate)))
			tf_die_status(st, "rank %d: fail-fast", S.rank);
		tf_fate_on_abort(fate, (void (*)(void *))comm->ops->abort, comm);
	}
	int ver = tf_comm_nccl_version(comm);
	printf("INFO rank %d/%d on %s, backend %s%s", S.rank, S.world,
	       dev.name[0] ? dev.name : "host", comm->name,
	       ver ? "" : "\n");
	if (ver)
		printf(" (NCCL %d.%d.%d)\n", ver / 10000, ver / 100 % 100, ver % 100);
	fflush(stdout);
}

static void close_rank(void)
{
	tf_fate_stop(fate);
	fate = NULL;
	tf_comm_free(comm);
	tf_boot_close(&boot);
	if (stream)
		tf_cu->StreamDestroy(stream);
}

/* A call failed: on an armed rank that ends every rank (exit 70). */
static void must(tf_status st, const char *where)
{
	if (!st)
		return;
	if (fate)
		tf_fate_fatal(fate, where, tf_errmsg(st));
	tf_die_status(st, "rank %d: %s", S.rank, where);
}

/* ---- the suite ---- */

/* Deterministic operand bytes of rank r for case c: values in [-4, 4)
 * with a few fractional bits, distinct per rank. */
static void fill(uint8_t *p, size_t n, enum tf_dtype dt, int r, int c)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(r * 7919 + c * 104729 + 1);
	size_t es = tf_comm_dtype_size(dt);
	for (size_t i = 0; i < n / es; i++) {
		x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
		uint64_t z = x * 0x2545f4914f6cdd1dull;
		float f = (float)((int64_t)(z >> 40) - (1 << 23)) / (float)(1 << 21);
		switch (dt) {
		case TF_DTYPE_F32: memcpy(p + 4 * i, &f, 4); break;
		case TF_DTYPE_BF16: { uint16_t h = tf_f32_to_bf16(f); memcpy(p + 2 * i, &h, 2); break; }
		case TF_DTYPE_F16: { uint16_t h = tf_f32_to_f16(f); memcpy(p + 2 * i, &h, 2); break; }
		case TF_DTYPE_I32: { uint32_t v = (uint32_t)(z >> 17); memcpy(p + 4 * i, &v, 4); break; }
		default: p[i] = (uint8_t)(z >> 56); break;
		}
	}
}

/* ---- the expected results, written apart from fabric/reduce.c ---- */

/* Round x to p significant bits, nearest even, with subnormals below
 * 2^emin (fp64 holds every sum of two operands here exactly, so one
 * rounding of the exact sum is what the wire format's own add gives). */
static double round_bits(double x, int p, int emin)
{
	if (x == 0)
		return x;
	int e;
	frexp(x, &e);
	if (e - 1 < emin)
		e = emin + 1;
	double q = ldexp(1, e - p);
	return nearbyint(x / q) * q;
}

/* Element i of rank operand p as fp64 (bf16 is the high half of an f32;
 * f16 is 1.5.10 with subnormals). */
static double elem(const uint8_t *p, size_t i, enum tf_dtype dt)
{
	uint16_t h;
	uint32_t u;
	float f;
	switch (dt) {
	case TF_DTYPE_F32: memcpy(&f, p + 4 * i, 4); return f;
	case TF_DTYPE_BF16:
		memcpy(&h, p + 2 * i, 2);
		u = (uint32_t)h << 16;
		memcpy(&f, &u, 4);
		return f;
	case TF_DTYPE_F16: {
		memcpy(&h, p + 2 * i, 2);
		int ex = h >> 10 & 31, m = h & 1023;
		double v = ex ? ldexp(1024 + m, ex - 25) : ldexp(m, -24);
		return h >> 15 ? -v : v;
	}
	default: return 0;
	}
}

static void put_elem(uint8_t *p, size_t i, enum tf_dtype dt, double v)
{
	float f = (float)v;
	uint32_t u;
	uint16_t h;
	switch (dt) {
	case TF_DTYPE_F32: memcpy(p + 4 * i, &f, 4); break;
	case TF_DTYPE_BF16: /* v already holds 8 bits: the high half is exact */
		memcpy(&u, &f, 4);
		h = (uint16_t)(u >> 16);
		memcpy(p + 2 * i, &h, 2);
		break;
	case TF_DTYPE_F16: {
		double a = fabs(v);
		int e;
		frexp(a, &e);
		if (a == 0)
			h = 0;
		else if (e - 1 < -14)
			h = (uint16_t)(a * 0x1p24); /* subnormal: a multiple of 2^-24 */
		else
			h = (uint16_t)((e + 14) << 10 | ((uint32_t)ldexp(a, 11 - e) & 1023));
		h |= (uint16_t)(signbit(v) ? 0x8000 : 0);
		memcpy(p + 2 * i, &h, 2);
		break;
	}
	default: break;
	}
}

/* The expected all-reduce of W operands in rank order, each step rounded
 * to the dtype (sum), or the operand kept (max, min: the first of equals);
 * i32 sums wrap. */
static void expect_reduce(uint8_t *want, uint8_t *const *in, int W, size_t count,
			  enum tf_dtype dt, enum tf_redop rop)
{
	for (size_t i = 0; i < count; i++) {
		if (dt == TF_DTYPE_I32) {
			int32_t a, b;
			memcpy(&a, in[0] + 4 * i, 4);
			uint64_t sum = (uint32_t)a;
			for (int r = 1; r < W; r++) {
				memcpy(&b, in[r] + 4 * i, 4);
				sum += (uint32_t)b;
				a = rop == TF_REDOP_MAX ? (b > a ? b : a) : rop == TF_REDOP_MIN ? (b < a ? b : a) : a;
			}
			uint32_t v = rop == TF_REDOP_SUM ? (uint32_t)(sum & 0xffffffffu) : (uint32_t)a;
			memcpy(want + 4 * i, &v, 4);
			continue;
		}
		int p = dt == TF_DTYPE_F32 ? 24 : dt == TF_DTYPE_BF16 ? 8 : 11;
		int emin = dt == TF_DTYPE_F16 ? -14 : -126;
		double a = elem(in[0], i, dt);
		for (int r = 1; r < W; r++) {
			double b = elem(in[r], i, dt);
			if (rop == TF_REDOP_SUM)
				a = round_bits(a + b, p, emin);
			else if (rop == TF_REDOP_MAX ? b > a : b < a)
				a = b;
		}
		put_elem(want, i, dt, a);
	}
}

static int passed, failed;

static const char *dt_name(enum tf_dtype dt)
{
	switch (dt) {
	case TF_DTYPE_U8: return "u8";
	case TF_DTYPE_I32: return "i32";
	case TF_DTYPE_F16: return "f16";
	case TF_DTYPE_BF16: return "bf16";
	case TF_DTYPE_F32: return "f32";
	default: return "?";
	}
}

static void verdict(const char *what, const uint8_t *got, const uint8_t *want, size_t n)
{
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i] && !bad++)
			first = i;
	if (!bad) {
		passed++;
		printf("PASS rank %d: %s\n", S.rank, what);
	} else {
		failed++;
		printf("FAIL rank %d: %s: %zu of %zu bytes differ, first at %zu (0x%02x, want 0x%02x)\n",
		       S.rank, what, bad, n, first, got[first], want[first]);
	}
}

enum op { OP_REDUCE, OP_GATHER, OP_GATHER_V, OP_EXCHANGE };

/* One case: every rank builds every rank's operand, runs the collective
 * (in place: recv holds the operand at its spot; skewed by one element
 * for all-reduce), and compares with the reference. graph: capture the
 * call once and replay it. */
static void run_case(enum op op, enum tf_dtype dt, enum tf_redop rop, size_t bytes, bool inplace,
		     bool graph, int c)
{
	int W = S.world, R = S.rank;
	size_t es = tf_comm_dtype_size(dt);
	size_t count = bytes / es ? bytes / es : 1;
	bytes = count * es;
	uint32_t lens[TF_BOOT_MAX_WORLD];
	size_t stride = bytes;
	for (int r = 0; r < W; r++)
		lens[r] = (uint32_t)(bytes - (bytes / (size_t)(W + 1)) * (size_t)r);
	size_t out_n = op == OP_REDUCE || op == OP_EXCHANGE ? bytes : bytes * (size_t)W;
	uint8_t *in[TF_BOOT_MAX_WORLD];
	uint8_t *want = calloc(1, out_n), *got = calloc(1, out_n);
	for (int r = 0; r < W; r++) {
		in[r] = malloc(bytes);
		fill(in[r], bytes, dt, r, c);
	}
	int peer = R ^ 1;
	switch (op) {
	case OP_REDUCE: expect_reduce(want, in, W, count, dt, rop); break;
	case OP_GATHER:
		for (int r = 0; r < W; r++)
			memcpy(want + (size_t)r * bytes, in[r], bytes);
		break;
	case OP_GATHER_V:
		for (int r = 0; r < W; r++)
			memcpy(want + (size_t)r * stride, in[r], lens[r]);
		break;
	case OP_EXCHANGE: memcpy(want, in[peer], bytes); break;
	}
	size_t skew = op == OP_REDUCE && inplace ? es : 0;
	struct buf sb, rb;
	buf_new(&rb, out_n + skew);
	buf_new(&sb, bytes);
	uint8_t *recv = (uint8_t *)rb.p + skew;
	const void *send = sb.p;
	/* Known garbage in recv so that stale bytes cannot pass. */
	uint8_t *junk = malloc(out_n + skew);
	memset(junk, 0xa5, out_n + skew);
	put(rb.p, junk, out_n + skew);
	if (inplace && op == OP_REDUCE) {
		put(recv, in[R], bytes);
		send = recv;
	} else if (inplace && op == OP_GATHER) {
		put(recv + (size_t)R * bytes, in[R], bytes);
		send = recv + (size_t)R * bytes;
	} else {
		put(sb.p, in[R], bytes);
	}
	tf_cu_graph g = NULL;
	tf_cu_graph_exec ge = NULL;
	if (graph)
		must(TF_CU(tf_cu->StreamBeginCapture(stream, TF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)), "capture");
	tf_status st = TF_OK;
	switch (op) {
	case OP_REDUCE: st = tf_comm_all_reduce(comm, send, recv, count, dt, rop, stream); break;
	case OP_GATHER: st = tf_comm_all_gather(comm, send, recv, count, dt, stream); break;
	case OP_GATHER_V: st = tf_comm_all_gather_v(comm, send, recv, stride, lens, stream); break;
	case OP_EXCHANGE: st = tf_comm_exchange(comm, send, recv, bytes, peer, stream); break;
	}
	must(st, "collective");
	if (graph) {
		must(TF_CU(tf_cu->StreamEndCapture(stream, &g)), "end capture");
		must(TF_CU(tf_cu->GraphInstantiate(&ge, g, 0)), "instantiate");
		/* An eager call between replays, then the replay. */
		must(tf_comm_barrier(comm), "barrier");
		must(TF_CU(tf_cu->GraphLaunch(ge, stream)), "graph launch");
	}
	get(got, recv, out_n);
	must(tf_comm_check(comm), "check");
	if (graph) {
		tf_cu->GraphExecDestroy(ge);
		tf_cu->GraphDestroy(g);
	}
	if (op == OP_GATHER_V)
		for (int r = 0; r < W; r++)
			memcpy(got + (size_t)r * stride + lens[r], want + (size_t)r * stride + lens[r],
			       stride - lens[r]);
	static const char *const opn[] = {"all-reduce", "all-gather", "all-gather-v", "exchange"};
	char what[160];
	snprintf(what, sizeof what, "%s%s%s %s %zu B %s%s", opn[op], op == OP_REDUCE ? " " : "",
		 op == OP_REDUCE ? tf_redop_name(rop) : "", dt_name(dt), bytes,
		 inplace ? "in place" : "out of place", graph ? " (graph replay)" : "");
	verdict(what, got, want, out_n);
	buf_free(&sb);
	buf_free(&rb);
	for (int r = 0; r < W; r++)
		free(in[r]);
	free(want), free(got), free(junk);
}

static int cmd_suite(void)
{
	open_rank();
	static const size_t sizes[] = {6, 64, 1000, 10240, 65536, 262160, 1 << 20, 4 << 20};
	static const enum tf_dtype rdt[] = {TF_DTYPE_F32, TF_DTYPE_BF16, TF_DTYPE_F16, TF_DTYPE_I32};
	static const enum tf_dtype gdt[] = {TF_DTYPE_U8, TF_DTYPE_BF16, TF_DTYPE_F32};
	int c = 0;
	for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
		size_t n = sizes[si];
		if (n > (size_t)o.max_bytes)
			break;
		for (size_t d = 0; d < 4; d++)
			for (int op = 0; op < 3; op++)
				for (int ip = 0; ip < 2; ip++)
					run_case(OP_REDUCE, rdt[d], (enum tf_redop)op, n, ip, false, c++);
		for (size_t d = 0; d < 3; d++)
			for (int ip = 0; ip < 2; ip++)
				run_case(OP_GATHER, gdt[d], 0, n, ip, false, c++);
		run_case(OP_GATHER_V, TF_DTYPE_U8, 0, n, false, false, c++);
		if (S.world % 2 == 0)
			run_case(OP_EXCHANGE, TF_DTYPE_U8, 0, n, false, false, c++);
		if (comm->device && (n == 10240 || n == (1 << 20))) {
			/* Graph replays with eager calls between (sum, gather, sum, exchange). */
			run_case(OP_REDUCE, TF_DTYPE_BF16, TF_REDOP_SUM, n, false, true, c++);
			run_case(OP_GATHER, TF_DTYPE_F32, 0, n, false, true, c++);
			run_case(OP_REDUCE, TF_DTYPE_F32, TF_REDOP_SUM, n, true, true, c++);
			if (S.world % 2 == 0)
				run_case(OP_EXCHANGE, TF_DTYPE_U8, 0, n, false, true, c++);
		}
	}
	must(tf_comm_barrier(comm), "barrier");
	printf("SUMMARY rank %d: %d passed, %d failed\n", S.rank, passed, failed);
	printf("RESULT {\"rank\":%d,\"backend\":\"%s\",\"passed\":%d,\"failed\":%d}\n", S.rank,
	       comm->name, passed, failed);
	close_rank();
	return failed ? 1 : 0;
}

/* ---- failfast ---- */

/* Both ranks' links idle (every HCA's posts completed, waited for up to
 * 1 s), agreed over the bootstrap. */
static bool link_idle(struct tf_roce *t)
{
	double until = tf_boot_now() + 1.0;
	bool idle;
	while (!(idle = tf_roce_idle(t)) && tf_boot_now() < until)
		usleep(100);
	must(tf_comm_barrier(comm), "barrier");
	uint8_t me = idle, all[2 * 8];
	size_t lens[2];
	must(tf_boot_all_gather(&boot, &me, 1, all, 8, lens), "idle vote");
	return all[0] && all[8];
}

static int cmd_failfast(int victim, bool kill_it)
{
	if (victim < 0 || victim >= S.world)
		tf_usage_error("victim %d outside 0..%d", victim, S.world - 1);
	if (!S.failfast)
		tf_usage_error("failfast needs TF_TP_FAILFAST on");
	open_rank();
	size_t n = 5120; /* a decode row: 10 KB of bf16 */
	struct buf b;
	buf_new(&b, n * 2);
	uint16_t *h = calloc(n, 2);
	put(b.p, h, n * 2);
	struct tf_roce *roce = tf_comm_roce_transport(comm);
	for (int step = 0; step < 100000; step++) {
		if (step == 50 && roce && !link_idle(roce)) {
			/* Inject only on an idle link: a failure with writes in
			 * flight is not what this test measures (and on a real HCA
			 * not what it should risk). */
			printf("REFUSED rank %d: the RoCE link is not idle; no injection\n", S.rank);
			close_rank();
			return 2;
		}
		if (step == 50 && S.rank == victim) {
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			double now = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
			printf("INJECT %s rank %d at %.6f\n", kill_it ? "kill" : "fatal", S.rank, now);
			fflush(stdout);
			const char *fd = getenv("TF_TP_TEST_INJECT_FD");
			if (fd) {
				char line[64];
				int k = snprintf(line, sizeof line, "%.6f\n", now);
				if (write(atoi(fd), line, (size_t)k) != k)
					tf_warn("cannot report the injection time");
			}
			if (kill_it)
				raise(SIGKILL);
			if (roce) /* the proxy's failure path: every QP halted, the region kept */
				tf_roce_fail(roce, "injected failure");
			tf_fate_fatal(fate, "failfast test", "injected failure");
		}
		must(tf_comm_all_reduce(comm, b.p, b.p, n, TF_DTYPE_BF16, TF_REDOP_SUM, stream), "all-reduce");
		sync_stream();
		usleep(2000);
	}
	printf("FAIL rank %d: still running after 100000 steps\n", S.rank);
	return 1;
}

/* ---- bench ---- */

static double now_s(void)
{
	return tf_boot_now();
}

/* A bench column: a backend through tf's collectives, or NCCL's own
 * ncclAllReduce called directly on the same buffers and stream. */
struct col {
	char name[32];
	struct tf_comm *comm;   /* NULL: direct */
	struct tf_nccl_raw raw; /* direct */
	double sum_bus;
};

/* iters all-reduces of col c, timed like every column: warm-ups, stream
 * sync, a barrier of all ranks, then events around the loop (a host clock
 * on the host backend). Returns microseconds per call. */
static double bench_col(struct col *c, const void *s, void *r, size_t count, tf_cu_event e0, tf_cu_event e1)
{
	for (int w = 0; w < 3; w++) {
		if (c->comm)
			must(tf_comm_all_reduce(c->comm, s, r, count, TF_DTYPE_BF16, TF_REDOP_SUM, stream), "all-reduce");
		else if (c->raw.all_reduce(s, r, count, c->raw.bf16, c->raw.sum, c->raw.comm, stream))
			must(tf_err(TF_ERR_INTERNAL, "ncclAllReduce failed"), "all-reduce");
	}
	sync_stream();
	must(tf_comm_barrier(comm), "barrier");
	double t0 = now_s();
	int bad = 0;
	if (comm->device)
		must(TF_CU(tf_cu->EventRecord(e0, stream)), "event");
	if (c->comm) {
		for (int64_t k = 0; k < o.iters; k++)
			must(tf_comm_all_reduce(c->comm, s, r, count, TF_DTYPE_BF16, TF_REDOP_SUM, stream), "all-reduce");
	} else {
		for (int64_t k = 0; k < o.iters; k++)
			bad |= c->raw.all_reduce(s, r, count, c->raw.bf16, c->raw.sum, c->raw.comm, stream);
	}
	if (bad)
		must(tf_err(TF_ERR_INTERNAL, "ncclAllReduce failed"), "all-reduce");
	if (!comm->device)
		return (now_s() - t0) * 1e6 / (double)o.iters;
	float ms;
	must(TF_CU(tf_cu->EventRecord(e1, stream)), "event");
	must(TF_CU(tf_cu->EventSynchronize(e1)), "event");
	must(TF_CU(tf_cu->EventElapsedTime(&ms, e0, e1)), "event");
	return ms * 1000.0 / (double)o.iters;
}

static int cmd_bench(void)
{
	open_rank();
	size_t maxb = (size_t)o.max_bytes;
	double factor = S.world > 1 ? 2.0 * (S.world - 1) / S.world : 1;
	/* The columns: the session backend; for the mailbox also the NCCL
	 * path it routes large messages to; then NCCL's ncclAllReduce direct. */
	struct col cols[3];
	int nc = 0;
	memset(cols, 0, sizeof cols);
	cols[nc].comm = comm;
	snprintf(cols[nc++].name, sizeof cols[0].name, "%s%s", comm->name,
		 tf_comm_mailbox_p2p(comm) ? " (p2p)" : S.backend == TF_FABRIC_MAILBOX ? " (host region)" : "");
	struct tf_comm *nccl = tf_comm_mailbox_nccl(comm);
	if (nccl) {
		cols[nc].comm = nccl;
		snprintf(cols[nc++].name, sizeof cols[0].name, "nccl");
	} else if (comm->device) {
		nccl = comm;
	}
	if (nccl && !tf_comm_nccl_raw(nccl, &cols[nc].raw))
		snprintf(cols[nc++].name, sizeof cols[0].name, "nccl-direct");
	if (S.rank == 0) {
		printf("# all-reduce sum bf16, world %d, backend %s, %lld iterations; per column: time (us), "
		       "algbw and busbw (GB/s), #wrong\n", S.world, comm->name, (long long)o.iters);
		if (S.backend == TF_FABRIC_MAILBOX)
			printf("# the mailbox carries messages up to %u KiB; above that its column is NCCL\n",
			       S.mailbox_max_kb);
		printf("#%23s", "");
		for (int c = 0; c < nc; c++)
			printf(c + 1 < nc ? " | %-36s" : " | %s", cols[c].name);
		printf("\n#%11s %11s", "size (B)", "count");
		for (int c = 0; c < nc; c++)
			printf(" | %9s %8s %8s %7s", "time (us)", "algbw", "busbw", "#wrong");
		printf("\n");
	}
	size_t sizes[64], ns = 0;
	for (size_t s = 8; s <= maxb && ns < 60; s *= 4) {
		if (s < 10240 && s * 4 > 10240)
			sizes[ns++] = s, sizes[ns++] = 10240;
		else
			sizes[ns++] = s;
	}
	tf_cu_event e0 = NULL, e1 = NULL;
	if (comm->device) {
		must(TF_CU(tf_cu->EventCreate(&e0, TF_CU_EVENT_DEFAULT)), "event");
		must(TF_CU(tf_cu->EventCreate(&e1, TF_CU_EVENT_DEFAULT)), "event");
	}
	for (size_t i = 0; i < ns; i++) {
		size_t count = sizes[i] / 2, bytes = count * 2;
		struct buf sb, rb;
		buf_new(&sb, bytes);
		buf_new(&rb, bytes);
		uint16_t *in = malloc(bytes), *out = malloc(bytes), *want = malloc(bytes);
		uint8_t *ins[TF_BOOT_MAX_WORLD];
		for (int r = 0; r < S.world; r++) {
			ins[r] = malloc(bytes);
			fill(ins[r], bytes, TF_DTYPE_BF16, r, (int)i);
		}
		expect_reduce((uint8_t *)want, ins, S.world, count, TF_DTYPE_BF16, TF_REDOP_SUM);
		memcpy(in, ins[S.rank], bytes);
		put(sb.p, in, bytes);
		if (S.rank == 0)
			printf("%12zu %11zu", bytes, count);
		long wrong_any = 0;
		for (int c = 0; c < nc; c++) {
			/* Stale results of another column cannot pass. */
			memset(out, 0xff, bytes);
			put(rb.p, out, bytes);
			double us = bench_col(&cols[c], sb.p, rb.p, count, e0, e1);
			get(out, rb.p, bytes);
			long wrong = 0;
			for (size_t k = 0; k < count; k++)
				wrong += out[k] != want[k];
			double alg = (double)bytes / us / 1e3;
			cols[c].sum_bus += alg * factor;
			if (S.rank == 0)
				printf(" | %9.2f %8.3f %8.3f %7ld", us, alg, alg * factor, wrong);
			else if (wrong)
				printf("rank %d: %s: %ld wrong at %zu bytes\n", S.rank, cols[c].name, wrong, bytes);
			wrong_any += wrong;
		}
		if (S.rank == 0)
			printf("\n");
		buf_free(&sb), buf_free(&rb);
		for (int r = 0; r < S.world; r++)
			free(ins[r]);
		free(in), free(out), free(want);
		if (wrong_any)
			failed++;
	}
	if (S.rank == 0) {
		printf("# Avg bus bandwidth:");
		for (int c = 0; c < nc; c++)
			printf(" %s %.3f GB/s%s", cols[c].name, ns ? cols[c].sum_bus / (double)ns : 0,
			       c + 1 < nc ? "," : "\n");
	}
	if (e0)
		tf_cu->EventDestroy(e0), tf_cu->EventDestroy(e1);
	must(tf_comm_barrier(comm), "barrier");
	close_rank();
	return failed ? 1 : 0;
}

/* ---- roce-host ---- */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The RoCE protocol over the shm wire: 1000 variable-length gathers (and
 * as many chunked ones with TF_TP_ROCE_CHUNKED_KB) bit for bit, then the
 * latency of gathers of 16 B, 4 KiB and a slot. */
static int cmd_roce_host(void)
{
	open_rank();
	if (!tf_comm_roce_transport(comm)) {
		printf("FAIL rank %d: roce-host: the roce backend did not start (backend %s)\n", S.rank, comm->name);
		close_rank();
		return 1;
	}
	size_t slot = tf_roce_slot_bytes(S.mailbox_max_kb);
	size_t chunked = (size_t)S.roce_chunked_kb * 1024;
	size_t maxs = chunked > slot ? chunked : slot;
	uint8_t *src = malloc(maxs), *dst = malloc(2 * maxs), *want = malloc(2 * maxs);
	uint64_t x = 0x2545f4914f6cdd1dull;
	int bad = 0, n = 0;
	for (int pass = 0; pass < (chunked > slot ? 2 : 1); pass++) {
		size_t top = pass ? maxs : slot;
		for (int i = 0; i < 1000; i++, n++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* the same on both ranks */
			size_t stride = 1 + (size_t)(x % top);
			uint32_t lens[2] = {(uint32_t)((x >> 21) % (stride + 1)), (uint32_t)((x >> 42) % (stride + 1))};
			for (int r = 0; r < 2; r++)
				for (size_t k = 0; k < lens[r]; k++)
					want[(size_t)r * stride + k] = (uint8_t)(k * 29 + (size_t)i * 3 + (size_t)r * 71);
			memcpy(src, want + (size_t)S.rank * stride, lens[S.rank]);
			memset(dst, 0x5a, 2 * stride);
			must(tf_comm_all_gather_v(comm, src, dst, stride, lens, NULL), "roce-host gather");
			for (int r = 0; r < 2; r++)
				if (memcmp(dst + (size_t)r * stride, want + (size_t)r * stride, lens[r])) {
					if (!bad++)
						printf("FAIL rank %d: roce-host gather %d (stride %zu): rank %d's bytes differ\n",
						       S.rank, n, stride, r);
				}
		}
	}
	if (!bad)
		printf("PASS rank %d: roce-host: %d gathers bit-exact (slot %zu, chunked up to %zu)\n", S.rank, n, slot,
		       chunked);
	static const size_t sizes[] = {16, 4096, 0};
	for (size_t si = 0; si < 3; si++) {
		size_t b = sizes[si] ? sizes[si] : slot;
		enum { ITERS = 500 };
		double t[ITERS];
		must(tf_comm_barrier(comm), "barrier");
		for (int i = 0; i < ITERS; i++) {
			double t0 = tf_boot_now();
			must(tf_comm_all_gather(comm, src, dst, b, TF_DTYPE_U8, NULL), "roce-host gather");
			t[i] = (tf_boot_now() - t0) * 1e6;
		}
		qsort(t, ITERS, sizeof t[0], cmp_d);
		printf("RESULT {\"rank\":%d,\"op\":\"roce-host all-gather\",\"bytes\":%zu,\"iters\":%d,"
		       "\"p50_us\":%.2f,\"p90_us\":%.2f}\n", S.rank, b, ITERS, t[ITERS / 2], t[ITERS * 9 / 10]);
	}
	free(src), free(dst), free(want);
	must(tf_comm_barrier(comm), "barrier");
	close_rank();
	return bad ? 1 : 0;
}

/* ---- launcher ---- */

static int launch(int argc, char **argv, int first)
{
	int n = (int)o.local;
	bool ff = !strcmp(argv[first], "failfast");
	int victim = ff ? atoi(argv[first + 1]) : -1;
	bool kill_it = ff && !strcmp(argv[first + 2], "kill");
	int pfd[2];
	if (pipe(pfd))
		tf_die(71, "pipe: %s", strerror(errno));
	pid_t pid[TF_BOOT_MAX_WORLD];
	char **av = calloc((size_t)argc + 1, sizeof *av);
	/* The child runs the same command without --local. */
	int k = 0;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--local") || !strcmp(argv[i], "-l")) {
			i++;
			continue;
		}
		if (!strncmp(argv[i], "--local=", 8))
			continue;
		av[k++] = argv[i];
	}
	char num[32];
	snprintf(num, sizeof num, "%d", n);
	setenv("TF_TP_WORLD", num, 1);
	snprintf(num, sizeof num, "%d", pfd[1]);
	setenv("TF_TP_TEST_INJECT_FD", num, 1);
	fflush(stdout);
	for (int r = 0; r < n; r++) {
		if ((pid[r] = fork()) < 0)
			tf_die(71, "fork: %s", strerror(errno));
		if (!pid[r]) {
			char v[16];
			close(pfd[0]);
			snprintf(v, sizeof v, "%d", r);
			setenv("TF_TP_RANK", v, 1);
			if (S.backend != TF_FABRIC_HOST && S.backend != TF_FABRIC_ROCE)
				setenv("TF_TP_DEVICE", v, 1);
			execv("/proc/self/exe", av);
			_exit(127);
		}
	}
	close(pfd[1]);
	int rc[TF_BOOT_MAX_WORLD];
	double t_exit[TF_BOOT_MAX_WORLD];
	for (int left = n; left > 0; left--) {
		int status;
		pid_t p = waitpid(-1, &status, 0);
		if (p < 0)
			tf_die(71, "waitpid: %s", strerror(errno));
		for (int r = 0; r < n; r++)
			if (pid[r] == p) {
				rc[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
				t_exit[r] = tf_boot_now();
				printf("EXIT rank %d rc %d at %.6f\n", r, rc[r], t_exit[r]);
			}
	}
	char line[64] = "";
	ssize_t got = read(pfd[0], line, sizeof line - 1);
	close(pfd[0]);
	if (!ff) {
		int worst = 0;
		for (int r = 0; r < n; r++)
			if (rc[r] > worst)
				worst = rc[r];
		return worst;
	}
	if (got <= 0) {
		for (int r = 0; r < n; r++)
			if (rc[r] == 2) {
				printf("REFUSED failfast: a link was not idle; nothing injected\n");
				return 2;
			}
		printf("FAIL failfast: the victim never injected\n");
		return 1;
	}
	line[got] = 0;
	double t_inject = strtod(line, NULL);
	int bad = 0;
	for (int r = 0; r < n; r++) {
		double after = t_exit[r] - t_inject;
		int want = r == victim && kill_it ? 128 + SIGKILL : 70;
		bool late = r != victim && after > S.grace_s + 0.5;
		if (rc[r] != want || late) {
			bad++;
			printf("FAIL failfast %s: rank %d exit %d (want %d) %.3f s after INJECT\n",
			       kill_it ? "kill" : "fatal", r, rc[r], want, after);
		} else {
			printf("PASS failfast %s: rank %d exit %d %.3f s after INJECT (limit %.3f s)\n",
			       kill_it ? "kill" : "fatal", r, rc[r], after, S.grace_s + 0.5);
		}
	}
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* ranks share a pipe: whole lines */
	tf_fabric_settings_opts(&o.fab, opts + 3);
	int i = tf_cli_parse(&cli, argc, argv);
	if (i >= argc)
		tf_usage_error("missing mode (suite, failfast, bench, roce-host or kernel)");
	const char *mode = argv[i];
	int nargs = !strcmp(mode, "failfast") ? 2 : 0;
	if (strcmp(mode, "suite") && strcmp(mode, "failfast") && strcmp(mode, "bench") && strcmp(mode, "kernel") &&
	    strcmp(mode, "roce-host"))
		tf_usage_error("unknown mode '%s' (suite, failfast, bench, roce-host or kernel)", mode);
	if (argc - i - 1 != nargs)
		tf_usage_error(nargs ? "failfast takes VICTIM and fatal|kill" : "unexpected argument '%s'",
			       argv[i + 1]);
	int64_t victim = 0;
	if (nargs && tf_parse_i64(argv[i + 1], 0, 63, false, &victim))
		tf_usage_error("bad victim rank '%s'", argv[i + 1]);
	if (nargs && strcmp(argv[i + 2], "fatal") && strcmp(argv[i + 2], "kill"))
		tf_usage_error("bad failure mode '%s' (fatal or kill)", argv[i + 2]);
	if (!strcmp(mode, "kernel")) {
		bool k = tf_comm_mailbox_kernel();
		printf("mailbox kernel: %s (fatbin %zu bytes)\n", k ? "embedded" : "not embedded",
		       tf_cu_fatbin_size());
		return k ? 0 : 1;
	}
	if (!strcmp(mode, "roce-host")) /* the shm wire: two ranks of one host */
		o.fab.backend = "roce", o.fab.roce_wire = "shm";
	if (o.local) {
		o.fab.world = o.local;
		o.fab.rank = 0;
	}
	tf_status st = tf_fabric_settings_check(&o.fab, &S);
	if (st)
		tf_die_status(st, "bad settings");
	if (o.local)
		return launch(argc, argv, i);
	if (!strcmp(mode, "suite"))
		return cmd_suite();
	if (!strcmp(mode, "bench"))
		return cmd_bench();
	if (!strcmp(mode, "roce-host"))
		return cmd_roce_host();
	return cmd_failfast((int)victim, !strcmp(argv[i + 2], "kill"));
}
