/* comm.c: choosing a backend from the settings. */
#include "fabric/comm.h"

#include "base/log.h"

tf_status tf_comm_open(struct tf_boot *boot, const struct tf_fabric_settings *s, struct tf_comm **out)
{
	switch (s->backend) {
	case TF_FABRIC_HOST:
		return tf_comm_host_new(boot, out);
	case TF_FABRIC_NCCL:
		return tf_comm_nccl_new(boot, s, out);
	case TF_FABRIC_MAILBOX:
		return tf_comm_mailbox_new(boot, s, out);
	case TF_FABRIC_ROCE:
		return tf_comm_roce_new(boot, s, out);
	}
	return tf_err(TF_ERR_ARG, "unknown backend %d", (int)s->backend);
}
