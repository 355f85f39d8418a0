/* mailbox.c: the same-host mailbox backend's eligibility and routing.
 *
 * The mailbox serves two ranks of one host whose build embeds the mailbox
 * kernel: small messages go through a shared pinned host region, NCCL
 * carries the rest. Eligibility is agreed: the ranks all-gather 65 bytes
 * (has-kernel byte, then the host's boot id, else its host name); only if
 * rank 0 has the kernel and both blobs are equal is the mailbox used; else
 * rank 0 warns and every rank uses NCCL alone. This build carries no
 * mailbox kernel yet (kernels/ has none), so every session takes the NCCL
 * path after that agreement. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "base/log.h"
#include "fabric/comm.h"

bool tf_comm_mailbox_kernel(void)
{
	return false;
}

/* 65 bytes: has-kernel, then the host identity, zero-padded. */
static void host_blob(uint8_t out[65])
{
	memset(out, 0, 65);
	out[0] = tf_comm_mailbox_kernel();
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	char id[65] = "";
	if (!f || !fgets(id, sizeof id, f))
		gethostname(id, sizeof id - 1);
	if (f)
		fclose(f);
	id[strcspn(id, "\n")] = 0;
	memcpy(out + 1, id, strlen(id) < 64 ? strlen(id) : 64);
}

tf_status tf_comm_mailbox_new(struct tf_boot *boot, const struct tf_fabric_settings *s,
			      struct tf_comm **out)
{
	uint8_t mine[65], all[2 * 65];
	size_t lens[2];
	if (boot->world != 2)
		return tf_err(TF_ERR_CONFIG, "TF_COMM_BACKEND=mailbox: expected TF_TP_WORLD=2");
	host_blob(mine);
	tf_status st = tf_boot_all_gather(boot, mine, 65, all, 65, lens);
	if (st)
		return st;
	bool same_host = !memcmp(all + 1, all + 65 + 1, 64);
	if (!all[0] || !same_host) {
		if (boot->rank == 0)
			tf_log(TF_LOG_WARN, "tp: the mailbox is unavailable (%s); using NCCL alone",
			       !all[0] ? "this build has no mailbox kernel" : "the ranks are on different hosts");
		return tf_comm_nccl_new(boot, s, out);
	}
	return tf_err(TF_ERR_INTERNAL, "mailbox kernel present but no mailbox backend");
}
