/* module.c: loading the embedded fatbin and looking up kernels. */
#include "cuda/module.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "cuda/rec.h"

#if TF_CUDA
/* Written by tools/embed.sh from build/kernels/tf.fatbin. */
extern const unsigned char tf_fatbin[];
extern const size_t tf_fatbin_len;
#endif

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tf_cu_module mod;
static bool tried;
static tf_status load_st;
static char load_msg[512];
static unsigned generation;

bool tf_cu_kernels_built(void)
{
	return TF_CUDA != 0;
}

size_t tf_cu_fatbin_size(void)
{
#if TF_CUDA
	return tf_fatbin_len;
#else
	return 0;
#endif
}

static tf_status load_locked(void)
{
	if (tried)
		return load_st ? tf_err(load_st, "%s", load_msg) : TF_OK;
	tried = true;
#if TF_CUDA
	tf_status st = tf_cu_init();
	if (!st) {
		st = TF_CU(tf_cu->ModuleLoadData(&mod, tf_fatbin));
		if (st)
			st = tf_err_wrap(st, "cannot load tf's kernels (%zu-byte fatbin for sm_90a, PTX "
			                 "compute_90): ", tf_fatbin_len);
	}
	if (!st) {
		generation++;
		tf_log(TF_LOG_DEBUG, "cuda: loaded the kernel module (%zu bytes)", tf_fatbin_len);
	}
#else
	tf_status st = tf_err(TF_ERR_UNAVAILABLE,
	                      "this build of tf has no CUDA kernels (it was built with CUDA=0, "
	                      "without nvcc)");
#endif
	load_st = st;
	if (st)
		snprintf(load_msg, sizeof(load_msg), "%s", tf_errmsg(st));
	return st;
}

tf_status tf_cu_module_load(void)
{
	pthread_mutex_lock(&mu);
	tf_status st = load_locked();
	pthread_mutex_unlock(&mu);
	return st;
}

tf_status tf_cu_kernel(const char *name, tf_cu_func *f)
{
	*f = NULL;
	pthread_mutex_lock(&mu);
	tf_status st = load_locked();
	if (!st) {
		st = TF_CU(tf_cu->ModuleGetFunction(f, mod, name));
		if (st)
			st = tf_err_wrap(st, "kernel '%s': ", name);
	}
	pthread_mutex_unlock(&mu);
	return st;
}

void tf_cu_module_forget(void)
{
	pthread_mutex_lock(&mu);
	if (tried && !load_st) {
		tried = false;
		mod = NULL;
	}
	pthread_mutex_unlock(&mu);
}

unsigned tf_cu_module_generation(void)
{
	pthread_mutex_lock(&mu);
	unsigned g = generation;
	pthread_mutex_unlock(&mu);
	return g;
}

void tf_cu_module_unload(void)
{
	pthread_mutex_lock(&mu);
	if (mod)
		tf_cu->ModuleUnload(mod);
	mod = NULL;
	tried = false;
	load_st = TF_OK;
	pthread_mutex_unlock(&mu);
}

tf_status tf_cu_launch(tf_cu_func f, unsigned grid, unsigned block, unsigned shmem,
                       tf_cu_stream s, void **params)
{
	if (tf_cu_rec_kernel(s, f, grid, 1, 1, block, 1, 1, shmem, params, NULL, 0))
		return TF_OK; /* recorded (rec.h) */
	tf_status st = TF_CU(tf_cu->LaunchKernel(f, grid, 1, 1, block, 1, 1, shmem, s, params, NULL));
	if (st)
		return tf_err_wrap(st, "kernel %s (grid %u, block %u, %u B shared): ",
		                   tf_cu_func_name(f), grid, block, shmem);
	return TF_OK;
}
