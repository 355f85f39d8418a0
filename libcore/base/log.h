/* log.h: leveled logging to stderr.
 *
 * The level comes from TF_LOG (error|warn|info|debug|trace, default warn) or
 * from a program's -q/-v; tf_log tests it before formatting, so a disabled
 * message costs one comparison. Lines are "prog: level: message". */
#ifndef TF_BASE_LOG_H
#define TF_BASE_LOG_H

enum tf_log_level {
	TF_LOG_ERROR = 0,
	TF_LOG_WARN = 1,
	TF_LOG_INFO = 2,
	TF_LOG_DEBUG = 3,
	TF_LOG_TRACE = 4,
};

extern int tf_log_level_now;

/* Parse a level name; returns -1 for an unknown one. */
int tf_log_level_parse(const char *name);
/* Set the level; the first call of tf_log_init reads TF_LOG. */
void tf_log_set_level(int level);
/* Read TF_LOG and remember the program name for the line prefix. Returns 0,
 * or -1 when TF_LOG is set to an unknown name (the level stays warn). */
int tf_log_init(const char *prog);
const char *tf_log_prog(void);

void tf_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define tf_log(level, ...) \
	do { \
		if ((level) <= tf_log_level_now) \
			tf_log_write((level), __VA_ARGS__); \
	} while (0)

#endif
