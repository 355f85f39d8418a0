/* verbs.c: rdma-core's libibverbs opened with dlopen (as nccl.c opens NCCL
 * and cuda/driver.c libcuda), and the check behind TF_IBV. Only the entry
 * points the transport calls are looked up; ibv_post_send and ibv_poll_cq
 * are the header's inline dispatches through the provider's ops, wrapped
 * here so the table has one shape for real and fake verbs.
 *
 * Unproven here: no machine of this project has an HCA, so this table has
 * been loaded (dlopen, every symbol resolved) but no call through it has
 * reached a device. */
#include "fabric/verbs.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* verbs_fake.c: drops a fake table (the fabric with the last one). */
void tf_verbs_fake_release(struct tf_verbs *v);

tf_status tf_verbs_fail(int rc, const char *call, const char *file, int line)
{
	int e = rc > 0 ? rc : errno;
	return tf_err(TF_ERR_UNAVAILABLE, "%s failed (%s:%d): %s", call, file, line,
		      e ? strerror(e) : "unknown error");
}

/* The header's inline dispatches, behind plain functions. */
static int real_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

static int real_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, n, wc);
}

static struct ibv_device **real_get_device_list(const struct tf_verbs *v, int *n)
{
	struct ibv_device **(*fn)(int *) = (struct ibv_device **(*)(int *))dlsym(v->dl, "ibv_get_device_list");
	return fn ? fn(n) : NULL;
}

tf_status tf_verbs_open(const char *path, struct tf_verbs *v)
{
	memset(v, 0, sizeof *v);
	if (!path || !*path)
		path = "libibverbs.so.1";
	v->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!v->dl)
		return tf_err(TF_ERR_UNAVAILABLE, "cannot load verbs '%s': %s", path, dlerror());
	v->name = "libibverbs.so.1";
	static const struct {
		size_t off;
		const char *name;
		bool optional;
	} syms[] = {
		{offsetof(struct tf_verbs, free_device_list), "ibv_free_device_list", false},
		{offsetof(struct tf_verbs, get_device_name), "ibv_get_device_name", false},
		{offsetof(struct tf_verbs, open_device), "ibv_open_device", false},
		{offsetof(struct tf_verbs, close_device), "ibv_close_device", false},
		{offsetof(struct tf_verbs, query_port), "ibv_query_port", false},
		{offsetof(struct tf_verbs, query_gid), "ibv_query_gid", false},
		{offsetof(struct tf_verbs, alloc_pd), "ibv_alloc_pd", false},
		{offsetof(struct tf_verbs, dealloc_pd), "ibv_dealloc_pd", false},
		{offsetof(struct tf_verbs, reg_mr), "ibv_reg_mr", false},
		{offsetof(struct tf_verbs, dereg_mr), "ibv_dereg_mr", false},
		{offsetof(struct tf_verbs, create_cq), "ibv_create_cq", false},
		{offsetof(struct tf_verbs, destroy_cq), "ibv_destroy_cq", false},
		{offsetof(struct tf_verbs, create_qp), "ibv_create_qp", false},
		{offsetof(struct tf_verbs, modify_qp), "ibv_modify_qp", false},
		{offsetof(struct tf_verbs, query_qp), "ibv_query_qp", true},
		{offsetof(struct tf_verbs, destroy_qp), "ibv_destroy_qp", false},
	};
	if (!dlsym(v->dl, "ibv_get_device_list")) {
		tf_verbs_close(v);
		return tf_err(TF_ERR_UNAVAILABLE, "verbs '%s' lacks ibv_get_device_list", path);
	}
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *p = dlsym(v->dl, syms[i].name);
		if (!p && !syms[i].optional) {
			tf_verbs_close(v);
			return tf_err(TF_ERR_UNAVAILABLE, "verbs '%s' lacks %s", path, syms[i].name);
		}
		memcpy((char *)v + syms[i].off, &p, sizeof p);
	}
	v->get_device_list = real_get_device_list;
	v->post_send = real_post_send;
	v->poll_cq = real_poll_cq;
	return TF_OK;
}

void tf_verbs_close(struct tf_verbs *v)
{
	if (v->fake)
		tf_verbs_fake_release(v);
	if (v->dl)
		dlclose(v->dl);
	memset(v, 0, sizeof *v);
}
