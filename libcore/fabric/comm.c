/* comm.c: choosing a backend from the settings. */
#include "fabric/comm.h"

#include "base/log.h"

tf_status tf_comm_vote(struct tf_comm *c, bool mine, bool *all)
{
	c->calls++;
	return c->ops->vote(c, mine, all);
}

tf_status tf_comm_host_vote(struct tf_comm *c, bool mine, bool *all)
{
	uint8_t v = mine, got[TF_BOOT_MAX_WORLD];
	tf_status st = c->ops->all_gather(c, &v, got, 1, TF_DTYPE_U8, NULL);
	if (st)
		return st;
	bool a = true;
	for (int r = 0; r < c->world; r++)
		a = a && got[r];
	*all = a;
	return TF_OK;
}

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
