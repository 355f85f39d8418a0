/* gpu_fabric.c: the fabric on two GPUs of this host (make check-gpu): the
 * tf-tp-test suite on the NCCL and mailbox backends (the mailbox with its
 * inboxes in GPU memory and in the host region), bit-exact against the
 * host reference, and failfast with each rank as the victim in both modes.
 * Skipped (77) with fewer than two GPUs. Runs $TF_BIN/tf-tp-test. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/driver.h"

static int run(const char *cmd)
{
	printf("+ %s\n", cmd);
	fflush(stdout);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(void)
{
	int n = 0;
	if (tf_cu_init() || tf_cu->DeviceGetCount(&n) || n < 2) {
		printf("skipped: needs two GPUs (found %d)\n", n);
		return 77;
	}
	const char *bin = getenv("TF_BIN") ? getenv("TF_BIN") : "build/bin";
	char cmd[1024];
	int fails = 0, port = 31000 + (int)(getpid() % 1000) * 20;
	static const char *const backends[] = {"nccl", "mailbox", "mailbox TF_TP_MAILBOX_P2P=off"};
	for (int b = 0; b < 3; b++) {
		snprintf(cmd, sizeof cmd,
			 "NCCL_NVLS_ENABLE=0 TF_COMM_BACKEND=%s %s/tf-tp-test --local 2 --port %d suite",
			 backends[b], bin, port += 20);
		fails += run(cmd) != 0;
	}
	for (int victim = 0; victim < 2; victim++)
		for (int kill = 0; kill < 2; kill++) {
			snprintf(cmd, sizeof cmd,
				 "NCCL_NVLS_ENABLE=0 TF_COMM_BACKEND=mailbox %s/tf-tp-test --local 2 --port %d failfast %d %s",
				 bin, port += 20, victim, kill ? "kill" : "fatal");
			fails += run(cmd) != 0;
		}
	printf("%d failed\n", fails);
	return fails ? 1 : 0;
}
