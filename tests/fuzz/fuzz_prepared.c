/* fuzz_prepared.c: the prepared-image reader on arbitrary bytes: the header
 * parser from memory, then the file path (open, read, verify) through a
 * memfd. Nothing may crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/prepared.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_prep_image im;
	struct tf_prep_expect ex = {NULL, 0, 1};
	if (!tf_prep_parse(&im, "fuzz", data, size, size, NULL)) {
		for (size_t i = 0; i < im.n; i++)
			(void)tf_prep_find(&im, im.e[i].name);
		tf_prep_close(&im);
	}
	if (!tf_prep_parse(&im, "fuzz", data, size, size, &ex))
		tf_prep_close(&im);
	int fd = memfd_create("fuzz", 0);
	if (fd < 0)
		return 0;
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
	return 0;
}
