/* log.c: leveled logging to stderr (one write per line, thread safe). */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tf_log_level_now = TF_LOG_WARN;
static const char *prog_name = "tf";
static const char *const names[] = {"error", "warn", "info", "debug", "trace"};

int tf_log_level_parse(const char *name)
{
	for (int i = 0; i < 5; i++)
		if (!strcmp(name, names[i]))
			return i;
	if (!strcmp(name, "warning"))
		return TF_LOG_WARN;
	return -1;
}

void tf_log_set_level(int level)
{
	if (level < TF_LOG_ERROR)
		level = TF_LOG_ERROR;
	if (level > TF_LOG_TRACE)
		level = TF_LOG_TRACE;
	tf_log_level_now = level;
}

int tf_log_init(const char *prog)
{
	if (prog) {
		const char *slash = strrchr(prog, '/');
		prog_name = slash ? slash + 1 : prog;
	}
	const char *env = getenv("TF_LOG");
	if (!env || !*env)
		return 0;
	int l = tf_log_level_parse(env);
	if (l < 0)
		return -1;
	tf_log_level_now = l;
	return 0;
}

const char *tf_log_prog(void)
{
	return prog_name;
}

void tf_log_write(int level, const char *fmt, ...)
{
	char line[2048];
	int n = snprintf(line, sizeof line, "%s: %s: ", prog_name,
			 names[level < 0 ? 0 : level > 4 ? 4 : level]);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof line - 2)
		len = sizeof line - 2;
	line[len++] = '\n';
	ssize_t w = write(2, line, len);
	(void)w;
}
