/* fixtures.h: the test data for unit suites: paths under TF_TEST_DATA
 * (default tests/data) and JSONL golden files read one record at a time. */
#ifndef TF_TESTS_FIXTURES_H
#define TF_TESTS_FIXTURES_H

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"

/* A path under the test data; valid until the next call. */
static inline char *data_path(const char *name)
{
	const char *dir = getenv("TF_TEST_DATA");
	static char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir ? dir : "tests/data", name);
	return path;
}

struct jsonl {
	char *text, *at, *end;
};

/* Read a JSONL file of the test data (the test fails when it cannot). */
static inline void jsonl_open(struct jsonl *j, const char *name)
{
	size_t n;
	ck_assert_int_eq(tf_file_read_all(data_path(name), 1 << 26, &j->text, &n), TF_OK);
	j->at = j->text;
	j->end = j->text + n;
}

/* The next record (the caller json_decrefs it), empty lines skipped, or
 * NULL at the end. A line that is not JSON fails the test. */
static inline json_t *jsonl_next(struct jsonl *j)
{
	while (j->at < j->end) {
		char *line = j->at, *nl = memchr(line, '\n', (size_t)(j->end - line));
		if (!nl)
			nl = j->end;
		j->at = nl + 1;
		if (nl == line)
			continue;
		json_t *rec;
		ck_assert_int_eq(tf_json_parse(line, (size_t)(nl - line), "record", &rec), TF_OK);
		return rec;
	}
	return NULL;
}

static inline void jsonl_close(struct jsonl *j)
{
	free(j->text);
	j->text = j->at = j->end = NULL;
}

#endif
