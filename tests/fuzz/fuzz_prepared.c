/* fuzz_prepared.c: the prepared-image reader on arbitrary bytes: the header
 * parser from memory (as given, and with the header digest made right so
 * that mutations reach the entry checks), then the file path (open, read,
 * verify) through a memfd. Nothing may crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/digest.h"
#include "model/prepared.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A copy of data whose header digest is made right, so that mutations
 * reach the entry checks behind it. NULL when there is no header. */
static uint8_t *fix_digest(const uint8_t *data, size_t size)
{
	if (size < 112)
		return NULL;
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | data[16 + i];
	if (hlen < 112 || hlen > size)
		return NULL;
	uint8_t *c = malloc(size);
	if (!c)
		return NULL;
	memcpy(c, data, size);
	tf_sha256(c, hlen - TF_SHA256_LEN, c + hlen - TF_SHA256_LEN);
	return c;
}

static void parse_both(const uint8_t *data, size_t size)
{
	struct tf_prep_image im;
	struct tf_prep_expect ex = {NULL, 0, 1};
	if (!tf_prep_parse(&im, "fuzz", data, size, size, NULL)) {
		for (size_t i = 0; i < im.n; i++)
			if (tf_prep_find(&im, im.e[i].name) != &im.e[i])
				abort(); /* names are unique: each finds itself */
		tf_prep_close(&im);
	}
	if (!tf_prep_parse(&im, "fuzz", data, size, size, &ex))
		tf_prep_close(&im);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_prep_image im;
	uint8_t *fixed = fix_digest(data, size);
	parse_both(data, size);
	if (fixed) {
		parse_both(fixed, size);
		data = fixed; /* the file path below sees the fixed copy */
	}
	int fd = memfd_create("fuzz", 0);
	if (fd < 0) {
		free(fixed);
		return 0;
	}
	if (write(fd, data, size) == (ssize_t)size) {
		char path[64];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		if (!tf_prep_open(&im, path, NULL)) {
			(void)tf_prep_verify(&im);
			if (im.n) {
				uint8_t b[16];
				(void)tf_prep_read(&im, &im.e[0], 0, b, im.e[0].length < 16 ? im.e[0].length : 16);
			}
			tf_prep_close(&im);
		}
	}
	close(fd);
	free(fixed);
	return 0;
}
