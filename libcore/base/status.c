/* status.c: status codes and the per-thread detail message. */
#include "base/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char detail[1024];
/* The status the detail was recorded for: a detail is shown only for it. */
static _Thread_local tf_status detail_st;

const char *tf_status_str(tf_status st)
{
	switch (st) {
	case TF_OK: return "success";
	case TF_ERR_NOMEM: return "out of memory";
	case TF_ERR_IO: return "input/output error";
	case TF_ERR_FORMAT: return "bad data";
	case TF_ERR_ARG: return "invalid argument";
	case TF_ERR_NOTFOUND: return "not found";
	case TF_ERR_UNSUPPORTED: return "not supported";
	case TF_ERR_UNAVAILABLE: return "unavailable";
	case TF_ERR_INTERNAL: return "internal error";
	case TF_ERR_RANGE: return "out of range";
	case TF_ERR_CONFIG: return "bad configuration";
	case TF_ERR_TIMEOUT: return "timed out";
	case TF_ERR_OS: return "operating system error";
	case TF_ERR_CANCELLED: return "cancelled";
	case TF_ERR_MISMATCH: return "mismatch";
	case TF_ERR_VERSION: return "unknown version";
	}
	return "unknown error";
}

int tf_status_exit(tf_status st)
{
	switch (st) {
	case TF_OK: return 0;
	case TF_ERR_MISMATCH: return 1;
	case TF_ERR_ARG: return 64;
	case TF_ERR_FORMAT: case TF_ERR_VERSION: case TF_ERR_RANGE: return 65;
	case TF_ERR_NOTFOUND: return 66;
	case TF_ERR_UNAVAILABLE: case TF_ERR_UNSUPPORTED: return 69;
	case TF_ERR_OS: case TF_ERR_NOMEM: return 71;
	case TF_ERR_IO: return 74;
	case TF_ERR_TIMEOUT: case TF_ERR_CANCELLED: return 75;
	case TF_ERR_CONFIG: return 78;
	default: return 70;
	}
}

static void vset(tf_status st, const char *fmt, va_list ap, const char *suffix)
{
	detail_st = st;
	int n = vsnprintf(detail, sizeof detail, fmt, ap);
	if (suffix && n >= 0 && (size_t)n < sizeof detail)
		snprintf(detail + n, sizeof detail - (size_t)n, ": %s", suffix);
}

tf_status tf_err(tf_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vset(st, fmt, ap, NULL);
	va_end(ap);
	return st;
}

tf_status tf_err_errno(tf_status st, const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	vset(st, fmt, ap, strerror(e));
	va_end(ap);
	return st;
}

tf_status tf_err_wrap(tf_status st, const char *fmt, ...)
{
	char old[sizeof detail];
	memcpy(old, detail, sizeof old);
	if (detail_st != st)
		old[0] = 0; /* a detail of another error is not this one's */
	detail_st = st;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(detail, sizeof detail, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof detail)
		snprintf(detail + n, sizeof detail - (size_t)n, "%s",
			 old[0] ? old : tf_status_str(st));
	return st;
}

const char *tf_errmsg(tf_status st)
{
	return detail[0] && detail_st == st ? detail : tf_status_str(st);
}

void tf_err_clear(void)
{
	detail[0] = 0;
}
