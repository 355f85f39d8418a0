/* nccl.c: the NCCL backend. libnccl.so.2 is opened with dlopen (never
 * linked, no NCCL header needed): the few types and entry points used are
 * declared here with NCCL's values. Every rank agrees on the version, rank
 * 0 makes the unique id and broadcasts it over the bootstrap. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fabric/comm.h"

typedef struct { char internal[128]; } nccl_id;
typedef struct ncclComm *nccl_comm;
enum { NCCL_INT8 = 0, NCCL_UINT8 = 1, NCCL_INT32 = 2, NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9 };
enum { NCCL_SUM = 0, NCCL_MAX = 2, NCCL_MIN = 3 };
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7 };

struct nccl_api {
	int (*GetVersion)(int *v);
	int (*GetUniqueId)(nccl_id *id);
	int (*CommInitRank)(nccl_comm *c, int n, nccl_id id, int rank);
	int (*CommDestroy)(nccl_comm c);
	int (*CommAbort)(nccl_comm c);
	int (*CommGetAsyncError)(nccl_comm c, int *err);
	const char *(*GetErrorString)(int r);
	int (*AllReduce)(const void *s, void *r, size_t n, int dt, int op, nccl_comm c, tf_cu_stream st);
	int (*AllGather)(const void *s, void *r, size_t n, int dt, nccl_comm c, tf_cu_stream st);
	int (*Send)(const void *s, size_t n, int dt, int peer, nccl_comm c, tf_cu_stream st);
	int (*Recv)(void *r, size_t n, int dt, int peer, nccl_comm c, tf_cu_stream st);
	int (*GroupStart)(void);
	int (*GroupEnd)(void);
};

struct ncomm {
	struct tf_comm base;
	void *dl;
	struct nccl_api api;
	nccl_comm comm;
	int version;
	bool aborted;
	tf_cu_stream priv;
	tf_cu_ptr scratch; /* barrier: 2 floats per rank */
};

static tf_status nccl_check(struct ncomm *n, int res, const char *what)
{
	if (res == NCCL_SUCCESS)
		return TF_OK;
	return tf_err(TF_ERR_INTERNAL, "%s: NCCL error %d: %s", what, res,
		      n->api.GetErrorString ? n->api.GetErrorString(res) : "?");
}
#define NC(n, call) nccl_check((n), (call), #call)

static int ndt(enum tf_dtype dt)
{
	switch (dt) {
	case TF_DTYPE_U8: return NCCL_UINT8;
	case TF_DTYPE_I32: return NCCL_INT32;
	case TF_DTYPE_F16: return NCCL_FLOAT16;
	case TF_DTYPE_BF16: return NCCL_BFLOAT16;
	case TF_DTYPE_F32: return NCCL_FLOAT32;
	default: return -1;
	}
}

static tf_status n_all_reduce(struct tf_comm *c, const void *s, void *r, size_t cnt, enum tf_dtype dt,
			      enum tf_redop op, tf_cu_stream st)
{
	struct ncomm *n = (struct ncomm *)c;
	int t = ndt(dt);
	if (t < 0 || dt == TF_DTYPE_U8)
		return tf_err(TF_ERR_UNSUPPORTED, "nccl all-reduce of dtype %d", (int)dt);
	int o = op == TF_REDOP_SUM ? NCCL_SUM : op == TF_REDOP_MAX ? NCCL_MAX : NCCL_MIN;
	return NC(n, n->api.AllReduce(s, r, cnt, t, o, n->comm, st));
}

static tf_status n_all_gather(struct tf_comm *c, const void *s, void *r, size_t cnt, enum tf_dtype dt,
			      tf_cu_stream st)
{
	struct ncomm *n = (struct ncomm *)c;
	int t = ndt(dt);
	if (t < 0)
		return tf_err(TF_ERR_UNSUPPORTED, "nccl all-gather of dtype %d", (int)dt);
	return NC(n, n->api.AllGather(s, r, cnt, t, n->comm, st));
}

/* Rank r's bytes sit at the front of its stride: a whole-stride gather. */
static tf_status n_all_gather_v(struct tf_comm *c, const void *s, void *r, size_t stride,
				const uint32_t *lens, tf_cu_stream st)
{
	struct ncomm *n = (struct ncomm *)c;
	tf_cu_ptr mine = (tf_cu_ptr)(uintptr_t)r + (tf_cu_ptr)c->rank * stride;
	tf_status e;
	if ((uintptr_t)s != mine && lens[c->rank] &&
	    (e = TF_CU(tf_cu->MemcpyDtoDAsync(mine, (tf_cu_ptr)(uintptr_t)s, lens[c->rank], st))))
		return e;
	return NC(n, n->api.AllGather((void *)(uintptr_t)mine, r, stride, NCCL_UINT8, n->comm, st));
}

static tf_status n_exchange(struct tf_comm *c, const void *s, void *r, size_t bytes, int peer,
			    tf_cu_stream st)
{
	struct ncomm *n = (struct ncomm *)c;
	tf_status e;
	if ((e = NC(n, n->api.GroupStart())))
		return e;
	tf_status a = NC(n, n->api.Send(s, bytes, NCCL_UINT8, peer, n->comm, st));
	tf_status b = NC(n, n->api.Recv(r, bytes, NCCL_UINT8, peer, n->comm, st));
	e = NC(n, n->api.GroupEnd());
	return a ? a : b ? b : e;
}

static tf_status n_barrier(struct tf_comm *c)
{
	struct ncomm *n = (struct ncomm *)c;
	tf_status e = NC(n, n->api.AllGather((void *)(uintptr_t)n->scratch,
					     (void *)(uintptr_t)(n->scratch + 8), 1, NCCL_FLOAT32, n->comm, n->priv));
	return e ? e : TF_CU(tf_cu->StreamSynchronize(n->priv));
}

/* The barrier with a word: each rank's int32 gathered on the private
 * stream, then waited for. */
static tf_status n_vote(struct tf_comm *c, bool mine, bool *all)
{
	struct ncomm *n = (struct ncomm *)c;
	int32_t v = mine, got[TF_BOOT_MAX_WORLD];
	tf_status e = TF_CU(tf_cu->MemcpyHtoDAsync(n->scratch, &v, sizeof v, n->priv));
	if (!e)
		e = NC(n, n->api.AllGather((void *)(uintptr_t)n->scratch, (void *)(uintptr_t)(n->scratch + 8),
					   1, NCCL_INT32, n->comm, n->priv));
	if (!e)
		e = TF_CU(tf_cu->MemcpyDtoHAsync(got, n->scratch + 8, sizeof *got * (size_t)c->world, n->priv));
	if (!e)
		e = TF_CU(tf_cu->StreamSynchronize(n->priv));
	if (e)
		return e;
	bool a = true;
	for (int r = 0; r < c->world; r++)
		a = a && got[r];
	*all = a;
	return TF_OK;
}

static tf_status n_check(struct tf_comm *c)
{
	struct ncomm *n = (struct ncomm *)c;
	if (n->aborted)
		return tf_err(TF_ERR_CANCELLED, "nccl: aborted");
	int err = 0;
	n->api.CommGetAsyncError(n->comm, &err);
	if (err != NCCL_SUCCESS && err != NCCL_IN_PROGRESS)
		return tf_err(TF_ERR_UNAVAILABLE, "nccl: a peer failed: %s", n->api.GetErrorString(err));
	return TF_OK;
}

static void n_abort(struct tf_comm *c)
{
	struct ncomm *n = (struct ncomm *)c;
	if (!__atomic_exchange_n(&n->aborted, true, __ATOMIC_SEQ_CST) && n->comm)
		n->api.CommAbort(n->comm);
}

static void n_free(struct tf_comm *c)
{
	struct ncomm *n = (struct ncomm *)c;
	if (n->comm && !n->aborted)
		n->api.CommDestroy(n->comm);
	if (n->scratch)
		tf_cu->MemFree(n->scratch);
	if (n->priv)
		tf_cu->StreamDestroy(n->priv);
	if (n->dl)
		dlclose(n->dl);
	free(n);
}

static const struct tf_comm_ops nccl_ops = {n_all_reduce, n_all_gather, n_all_gather_v, n_exchange,
					    n_barrier, n_check, n_abort, n_free, n_vote};

int tf_comm_nccl_version(const struct tf_comm *c)
{
	return c && c->ops == &nccl_ops ? ((const struct ncomm *)c)->version : 0;
}

tf_status tf_comm_nccl_raw(struct tf_comm *c, struct tf_nccl_raw *out)
{
	if (!c || c->ops != &nccl_ops)
		return tf_err(TF_ERR_ARG, "not an NCCL backend");
	struct ncomm *n = (struct ncomm *)c;
	out->all_reduce = n->api.AllReduce;
	out->comm = n->comm;
	out->bf16 = NCCL_BFLOAT16, out->sum = NCCL_SUM;
	return TF_OK;
}

static tf_status load(struct ncomm *n, const char *path)
{
	n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n->dl)
		return tf_err(TF_ERR_UNAVAILABLE, "cannot load NCCL '%s': %s", path, dlerror());
	static const char *const names[] = {
		"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy",
		"ncclCommAbort", "ncclCommGetAsyncError", "ncclGetErrorString", "ncclAllReduce",
		"ncclAllGather", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"};
	void **slot = (void **)&n->api;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!(slot[i] = dlsym(n->dl, names[i])))
			return tf_err(TF_ERR_UNAVAILABLE, "NCCL '%s' lacks %s", path, names[i]);
	return TF_OK;
}

tf_status tf_comm_nccl_new(struct tf_boot *boot, const struct tf_fabric_settings *s, struct tf_comm **out)
{
	struct ncomm *n = calloc(1, sizeof *n);
	if (!n)
		return tf_err(TF_ERR_NOMEM, "nccl: out of memory");
	n->base = (struct tf_comm){&nccl_ops, boot->world, boot->rank, true, "nccl", 0};
	/* Every rank loads (or fails) before any agreement, so that a rank
	 * without the library makes all refuse rather than wait. */
	tf_status st = load(n, s->nccl_lib);
	if (!st && (st = NC(n, n->api.GetVersion(&n->version))))
		n->version = 0;
	char ver[64];
	snprintf(ver, sizeof ver, "nccl %d", st ? -1 : n->version);
	tf_status ag = tf_boot_agree(boot, ver, strlen(ver), "NCCL version", NULL);
	if (st || (st = ag))
		goto fail;
	nccl_id id;
	memset(&id, 0, sizeof id);
	size_t len = sizeof id;
	if (boot->rank == 0 && (st = NC(n, n->api.GetUniqueId(&id))))
		goto fail;
	if ((st = tf_boot_broadcast(boot, &id, &len, sizeof id)))
		goto fail;
	if (len != sizeof id) {
		st = tf_err(TF_ERR_FORMAT, "nccl: unique id of %zu bytes", len);
		goto fail;
	}
	if ((st = NC(n, n->api.CommInitRank(&n->comm, boot->world, id, boot->rank))))
		goto fail;
	if ((st = TF_CU(tf_cu->StreamCreate(&n->priv, TF_CU_STREAM_NON_BLOCKING))) ||
	    (st = TF_CU(tf_cu->MemAlloc(&n->scratch, 8 + 4 * (size_t)boot->world))))
		goto fail;
	*out = &n->base;
	return TF_OK;
fail:
	n_free(&n->base);
	return st;
}
