/* status.h: status codes, their messages, and a per-thread detail message.
 *
 * Every libcore function that can fail returns a tf_status: 0 is success,
 * negative values are errors. The code says what kind of failure it was (and
 * which sysexits code a program should exit with); the detail message says
 * where (file, offset, tensor name). The detail lives in thread-local
 * storage, so it is valid until the same thread records another error. */
#ifndef TF_BASE_STATUS_H
#define TF_BASE_STATUS_H

#include <stddef.h>

typedef int tf_status;

enum {
	TF_OK = 0,
	TF_ERR_NOMEM = -1,       /* allocation failed */
	TF_ERR_IO = -2,          /* read/write failed (errno recorded) */
	TF_ERR_FORMAT = -3,      /* bad data: a file or message is malformed */
	TF_ERR_ARG = -4,         /* a caller passed a bad argument */
	TF_ERR_NOTFOUND = -5,    /* a file, tensor or key does not exist */
	TF_ERR_UNSUPPORTED = -6, /* valid, but not implemented here */
	TF_ERR_UNAVAILABLE = -7, /* a library, device or peer is missing */
	TF_ERR_INTERNAL = -8,    /* a bug or a broken invariant */
	TF_ERR_RANGE = -9,       /* a number is out of range */
	TF_ERR_CONFIG = -10,     /* settings are inconsistent */
	TF_ERR_TIMEOUT = -11,    /* a deadline passed */
	TF_ERR_OS = -12,         /* an OS call failed (errno recorded) */
	TF_ERR_CANCELLED = -13,  /* work stopped on request */
	TF_ERR_MISMATCH = -14,   /* a check found a difference */
	TF_ERR_VERSION = -15,    /* an unknown format or protocol version */
};

/* A short constant description of a code ("bad data"). Never NULL. */
const char *tf_status_str(tf_status st);

/* The sysexits code a program exits with for a status: 65 for bad data, 66
 * for a missing input, 69 for unavailable, 70 internal, 71 OS error, 74 I/O,
 * 75 temporary, 78 configuration, 1 for a mismatch, 0 for TF_OK. */
int tf_status_exit(tf_status st);

/* Record a detail message for the calling thread and return st, so that
 * error paths read `return tf_err(TF_ERR_FORMAT, "'%s': bad magic", path);`. */
tf_status tf_err(tf_status st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Like tf_err, with ": strerror(errno)" appended (errno read on entry). */
tf_status tf_err_errno(tf_status st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prefix the current detail with more context ("'dir': " + old detail). */
tf_status tf_err_wrap(tf_status st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The calling thread's last detail message when it was recorded for st,
 * else tf_status_str(st) (none since tf_err_clear, or the last one was
 * another error's: a bare `return TF_ERR_NOMEM;` never shows an earlier
 * error's detail). Borrowed; valid until the next tf_err. tf_err_wrap keeps
 * the old detail only when it was recorded for the same st. */
const char *tf_errmsg(tf_status st);

/* Forget the calling thread's detail message. */
void tf_err_clear(void);

#endif
