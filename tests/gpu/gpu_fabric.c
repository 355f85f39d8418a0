/* gpu_fabric.c: the fabric on two GPUs of this host (make check-gpu): the
 * tf-tp-test suite on the NCCL and mailbox backends (the mailbox with its
 * inboxes in GPU memory and in the host region), bit-exact against the
 * host reference (each run must report the backend it was asked for, and
 * the mailbox where its inboxes are: a fallback fails), and failfast with
 * each rank as the victim in both modes.
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
	/* each suite must have run on the backend it names, and the mailbox
	 * with its inboxes where it was told (a fallback must not pass) */
	static const struct {
		const char *env, *backend, *inbox;
	} suites[] = {
		{"TF_COMM_BACKEND=nccl", "nccl", NULL},
		{"TF_COMM_BACKEND=mailbox", "mailbox", "inboxes in GPU memory"},
		{"TF_COMM_BACKEND=mailbox TF_TP_MAILBOX_P2P=off", "mailbox",
		 "inboxes in the pinned host region"},
	};
	for (int b = 0; b < 3; b++) {
		snprintf(cmd, sizeof cmd,
			 "NCCL_NVLS_ENABLE=0 TF_LOG=info %s %s/tf-tp-test --local 2 --port %d suite "
			 ">gpu_fabric.log 2>&1; rc=$?; cat gpu_fabric.log; [ $rc = 0 ] && "
			 "[ $(grep -c '^RESULT .*\"backend\":\"%s\"' gpu_fabric.log) = 2 ]%s%s%s",
			 suites[b].env, bin, port += 20, suites[b].backend,
			 suites[b].inbox ? " && grep -q '" : "", suites[b].inbox ? suites[b].inbox : "",
			 suites[b].inbox ? "' gpu_fabric.log" : "");
		int rc = run(cmd);
		if (rc)
			printf("FAIL suite %s: exit %d, or not both ranks on %s%s%s\n", suites[b].env, rc,
			       suites[b].backend, suites[b].inbox ? " with " : "",
			       suites[b].inbox ? suites[b].inbox : "");
		fails += rc != 0;
	}
	unlink("gpu_fabric.log");
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
