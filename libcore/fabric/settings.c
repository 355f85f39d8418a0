/* settings.c: the fabric's variables, their ranges, and the agreed digest. */
#include "fabric/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/num.h"
#include "fabric/roce.h"

enum kind { K_INT, K_DOUBLE, K_STR, K_CHOICE };

struct var {
	const char *env, *opt, *arg, *def, *help, *choices;
	enum kind kind;
	double min, max;
	size_t off; /* into struct tf_fabric_opts */
};

#define OFF(f) offsetof(struct tf_fabric_opts, f)
static const struct var vars[TF_FABRIC_NOPTS] = {
	{"TF_TP_WORLD", "world", "W", "1", "tensor-parallel world size", NULL, K_INT, 1, 64, OFF(world)},
	{"TF_TP_RANK", "rank", "R", "0", "this process's rank", NULL, K_INT, 0, 63, OFF(rank)},
	{"TF_TP_MASTER", "master", "HOST", "localhost", "rank 0's host", NULL, K_STR, 0, 0, OFF(master)},
	{"TF_TP_PORT", "port", "PORT", "29500", "rendezvous port", NULL, K_INT, 1, 65527, OFF(port)},
	{"TF_TP_PLAN_PORT", "plan-port", "PORT", "0", "rank 0's listening port (0: PORT+7)", NULL, K_INT, 0, 65535, OFF(plan_port)},
	{"TF_TP_PLAN_TIMEOUT", "plan-timeout", "S", "300", "seconds to connect and per bootstrap read", NULL, K_DOUBLE, 0.1, 86400, OFF(plan_timeout_s)},
	{"TF_TP_DEVICE", "device", "N", "0", "CUDA device ordinal", NULL, K_INT, 0, 63, OFF(device)},
	{"TF_COMM_BACKEND", "backend", "B", "nccl", "collective backend", "nccl|mailbox|host|roce", K_CHOICE, 0, 0, OFF(backend)},
	{"TF_TP_MAILBOX_MAX_KB", "mailbox-max-kb", "KB", "256", "mailbox message cap per rank", NULL, K_INT, 4, 16384, OFF(mailbox_max_kb)},
	{"TF_TP_MAILBOX_TIMEOUT_S", "mailbox-timeout", "S", "120", "mailbox wait limit before poisoning", NULL, K_DOUBLE, 0.001, 86400, OFF(mailbox_timeout_s)},
	{"TF_TP_MAILBOX_P2P", "mailbox-p2p", "on|off", "on", "mailbox inboxes in GPU memory when the GPUs reach each other", "on|off|1|0", K_CHOICE, 0, 0, OFF(mailbox_p2p)},
	{"TF_TP_FAILFAST", "failfast", "on|off", "on", "end every rank when one fails", "on|off|1|0", K_CHOICE, 0, 0, OFF(failfast)},
	{"TF_TP_FAILFAST_GRACE_S", "failfast-grace", "S", "1.0", "seconds before a fail-fast exit 70", NULL, K_DOUBLE, 0, 60, OFF(grace_s)},
	{"TF_TP_HEARTBEAT_S", "heartbeat", "S", "0.1", "seconds between a rank's heartbeats on the fate channel", NULL, K_DOUBLE, 0.01, 60, OFF(beat_s)},
	{"TF_TP_HEARTBEAT_LIMIT_S", "heartbeat-limit", "S", "0.4", "silence of a rank that ends every rank (0: never)", NULL, K_DOUBLE, 0, 3600, OFF(beat_limit_s)},
	{"TF_NCCL_LIB", "nccl-lib", "FILE", "libnccl.so.2", "NCCL library to open", NULL, K_STR, 0, 0, OFF(nccl_lib)},
	{"TF_TP_ROCE_HCA", "roce-hca", "LIST", "", "RoCE HCAs as name[:gid],... (at most 2; empty: choose)", NULL, K_STR, 0, 0, OFF(roce_hca)},
	{"TF_TP_ROCE_HCAS", "roce-hcas", "N", "2", "RoCE ports to choose", NULL, K_INT, 1, 2, OFF(roce_hcas)},
	{"TF_TP_ROCE_TC", "roce-tc", "N", "0", "RoCE GRH traffic class", NULL, K_INT, 0, 255, OFF(roce_tc)},
	{"TF_TP_ROCE_WIRE", "roce-wire", "W", "verbs", "RoCE wire (shm: two ranks of one host, no HCA)", "verbs|shm", K_CHOICE, 0, 0, OFF(roce_wire)},
	{"TF_TP_ROCE_FALLBACK", "roce-fallback", "F", "nccl", "when RoCE cannot start", "nccl|error", K_CHOICE, 0, 0, OFF(roce_fallback)},
	{"TF_TP_ROCE_CHUNKED_KB", "roce-chunked-kb", "KB", "0", "chunked RoCE gathers up to this stride (0: off)", NULL, K_INT, 0, 4194304, OFF(roce_chunked_kb)},
};

void tf_fabric_settings_opts(struct tf_fabric_opts *o, struct tf_opt *out)
{
	for (size_t i = 0; i < TF_FABRIC_NOPTS; i++) {
		const struct var *v = &vars[i];
		static const enum tf_opt_kind k[] = {TF_OPT_INT, TF_OPT_DOUBLE, TF_OPT_STR, TF_OPT_CHOICE};
		out[i] = (struct tf_opt){v->opt, 0, k[v->kind], (char *)o + v->off, v->arg, v->env,
					 v->def, v->help, v->min, v->max, v->choices};
	}
}

static bool choice_ok(const char *choices, const char *s)
{
	size_t n = strlen(s);
	for (const char *p = choices; *p;) {
		const char *e = strchr(p, '|');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncmp(p, s, n))
			return true;
		p += len + (e != NULL);
	}
	return false;
}

/* Parse one variable's text into o (ranges checked, message naming it). */
static tf_status parse_var(const struct var *v, const char *text, struct tf_fabric_opts *o)
{
	void *dst = (char *)o + v->off;
	char buf[128];
	size_t n = strlen(text);
	while (n && (text[n - 1] == ' ' || text[n - 1] == '\t' || text[n - 1] == '\n'))
		n--;
	while (n && (*text == ' ' || *text == '\t'))
		text++, n--;
	if (n >= sizeof buf)
		return tf_err(TF_ERR_CONFIG, "%s: value too long", v->env);
	memcpy(buf, text, n);
	buf[n] = 0;
	switch (v->kind) {
	case K_INT:
		if (tf_parse_i64(buf, (int64_t)v->min, (int64_t)v->max, false, dst))
			return tf_err(TF_ERR_CONFIG, "%s=%s: expected an integer in %.0f..%.0f",
				      v->env, buf, v->min, v->max);
		return TF_OK;
	case K_DOUBLE:
		if (tf_parse_double(buf, v->min, v->max, dst))
			return tf_err(TF_ERR_CONFIG, "%s=%s: expected a number in %g..%g", v->env,
				      buf, v->min, v->max);
		return TF_OK;
	case K_CHOICE:
		if (!choice_ok(v->choices, buf))
			return tf_err(TF_ERR_CONFIG, "%s=%s: expected one of %s", v->env, buf,
				      v->choices);
		/* fallthrough */
	case K_STR:
		/* Strings point into the environment or the default (static);
		 * leading blanks are skipped, trailing ones refused. */
		if (n != strlen(text))
			return tf_err(TF_ERR_CONFIG, "%s='%s': unexpected trailing blanks", v->env, text);
		*(const char **)dst = text;
		return TF_OK;
	}
	return TF_ERR_INTERNAL;
}

tf_status tf_fabric_settings_env(struct tf_fabric_settings *s, const char *(*env)(const char *))
{
	struct tf_fabric_opts o;
	memset(&o, 0, sizeof o);
	for (size_t i = 0; i < TF_FABRIC_NOPTS; i++) {
		const char *t = env ? env(vars[i].env) : getenv(vars[i].env);
		tf_status st = parse_var(&vars[i], vars[i].def, &o);
		if (st)
			return st;
		if (t && *t && (st = parse_var(&vars[i], t, &o)))
			return st;
	}
	return tf_fabric_settings_check(&o, s);
}

tf_status tf_fabric_settings_check(const struct tf_fabric_opts *o, struct tf_fabric_settings *s)
{
	memset(s, 0, sizeof *s);
	s->world = (int)o->world;
	s->rank = (int)o->rank;
	if (o->rank >= o->world)
		return tf_err(TF_ERR_CONFIG, "TF_TP_RANK=%d: expected a rank below TF_TP_WORLD=%d",
			      s->rank, s->world);
	const char *m = o->master ? o->master : "localhost";
	if (!*m || strlen(m) >= sizeof s->master)
		return tf_err(TF_ERR_CONFIG, "TF_TP_MASTER='%s': expected a host name", m);
	snprintf(s->master, sizeof s->master, "%s", m);
	s->port = (int)o->port;
	s->plan_port = o->plan_port ? (int)o->plan_port : s->port + 7;
	s->plan_timeout_s = o->plan_timeout_s;
	s->device = (int)o->device;
	const char *b = o->backend ? o->backend : "nccl";
	if (!strcmp(b, "nccl"))
		s->backend = TF_FABRIC_NCCL;
	else if (!strcmp(b, "mailbox"))
		s->backend = TF_FABRIC_MAILBOX;
	else if (!strcmp(b, "host"))
		s->backend = TF_FABRIC_HOST;
	else if (!strcmp(b, "roce"))
		s->backend = TF_FABRIC_ROCE;
	else
		return tf_err(TF_ERR_CONFIG, "TF_COMM_BACKEND=%s: expected nccl, mailbox, host or roce", b);
	if ((s->backend == TF_FABRIC_MAILBOX || s->backend == TF_FABRIC_ROCE) && s->world != 2)
		return tf_err(TF_ERR_CONFIG, "TF_COMM_BACKEND=%s: expected TF_TP_WORLD=2 (it is %d)",
			      tf_fabric_backend_name(s->backend), s->world);
	s->mailbox_max_kb = (uint32_t)o->mailbox_max_kb;
	tf_status st;
	if (s->backend == TF_FABRIC_ROCE && (st = tf_roce_slot_check(s->mailbox_max_kb)))
		return st;
	s->mailbox_timeout_s = o->mailbox_timeout_s;
	const char *f = o->failfast ? o->failfast : "on";
	s->failfast = !(!strcmp(f, "0") || !strcmp(f, "off"));
	const char *p2p = o->mailbox_p2p ? o->mailbox_p2p : "on";
	s->mailbox_p2p = !(!strcmp(p2p, "0") || !strcmp(p2p, "off"));
	s->grace_s = o->grace_s;
	s->beat_s = o->beat_s;
	s->beat_limit_s = o->beat_limit_s;
	if (s->beat_limit_s > 0 && s->beat_limit_s < 2 * s->beat_s)
		return tf_err(TF_ERR_CONFIG, "TF_TP_HEARTBEAT_LIMIT_S=%g: expected 0 (off) or at least "
			      "twice TF_TP_HEARTBEAT_S=%g", s->beat_limit_s, s->beat_s);
	const char *l = o->nccl_lib ? o->nccl_lib : "libnccl.so.2";
	if (strlen(l) >= sizeof s->nccl_lib)
		return tf_err(TF_ERR_CONFIG, "TF_NCCL_LIB: path too long");
	snprintf(s->nccl_lib, sizeof s->nccl_lib, "%s", l);
	const char *h = o->roce_hca ? o->roce_hca : "";
	char names[TF_ROCE_MAX_HCA][64];
	int gids[TF_ROCE_MAX_HCA], nh;
	if (strlen(h) >= sizeof s->roce_hca)
		return tf_err(TF_ERR_CONFIG, "TF_TP_ROCE_HCA: list too long");
	if ((st = tf_roce_parse_hca(h, names, gids, &nh)))
		return st;
	snprintf(s->roce_hca, sizeof s->roce_hca, "%s", h);
	s->roce_hcas = o->roce_hcas ? (int)o->roce_hcas : 2;
	s->roce_tc = (int)o->roce_tc;
	s->roce_wire = o->roce_wire && !strcmp(o->roce_wire, "shm") ? 1 : 0;
	s->roce_fallback_error = o->roce_fallback && !strcmp(o->roce_fallback, "error");
	s->roce_chunked_kb = (uint32_t)o->roce_chunked_kb;
	return TF_OK;
}

const char *tf_fabric_backend_name(enum tf_fabric_backend b)
{
	switch (b) {
	case TF_FABRIC_NCCL: return "nccl";
	case TF_FABRIC_MAILBOX: return "mailbox";
	case TF_FABRIC_HOST: return "host";
	case TF_FABRIC_ROCE: return "roce";
	}
	return "?";
}

/* The agreed layout: magic "TFS1", then per field a u32 tag and a u64 value
 * (doubles as microseconds), little-endian. */
static const struct {
	uint32_t tag;
	const char *name;
} agreed_fields[] = {
	{1, "TF_TP_WORLD"},          {2, "TF_COMM_BACKEND"},        {3, "TF_TP_MAILBOX_MAX_KB"},
	{4, "TF_TP_MAILBOX_TIMEOUT_S"}, {5, "TF_TP_FAILFAST"},       {6, "TF_TP_FAILFAST_GRACE_S"},
	{7, "TF_TP_PLAN_TIMEOUT"},    {8, "TF_TP_ROCE_WIRE"},        {9, "TF_TP_ROCE_FALLBACK"},
	{10, "TF_TP_ROCE_CHUNKED_KB"}, {11, "TF_TP_HEARTBEAT_S"},      {12, "TF_TP_HEARTBEAT_LIMIT_S"},
};
#define NAGREED (sizeof agreed_fields / sizeof agreed_fields[0])

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

size_t tf_fabric_settings_agreed(const struct tf_fabric_settings *s, uint8_t *out, size_t cap)
{
	uint64_t val[NAGREED] = {
		(uint64_t)s->world, (uint64_t)s->backend, s->mailbox_max_kb,
		(uint64_t)(s->mailbox_timeout_s * 1e6 + 0.5), s->failfast,
		(uint64_t)(s->grace_s * 1e6 + 0.5), (uint64_t)(s->plan_timeout_s * 1e6 + 0.5),
		(uint64_t)s->roce_wire, s->roce_fallback_error, s->roce_chunked_kb,
		(uint64_t)(s->beat_s * 1e6 + 0.5), (uint64_t)(s->beat_limit_s * 1e6 + 0.5),
	};
	size_t n = 4 + 12 * NAGREED;
	if (cap < n)
		return 0;
	memcpy(out, "TFS1", 4);
	for (size_t i = 0; i < NAGREED; i++) {
		put_le(out + 4 + 12 * i, agreed_fields[i].tag, 4);
		put_le(out + 8 + 12 * i, val[i], 8);
	}
	return n;
}

tf_status tf_fabric_settings_digest(const struct tf_fabric_settings *s, uint8_t out[32])
{
	uint8_t b[256];
	size_t n = tf_fabric_settings_agreed(s, b, sizeof b);
	return tf_sha256(b, n, out);
}

void tf_fabric_settings_diff(const uint8_t *a, size_t na, const uint8_t *b, size_t nb, char *msg,
			     size_t cap)
{
	if (na != nb || na < 4 || memcmp(a, b, 4)) {
		snprintf(msg, cap, "the settings layout (%zu vs %zu bytes)", na, nb);
		return;
	}
	for (size_t off = 4; off + 12 <= na; off += 12) {
		if (!memcmp(a + off, b + off, 12))
			continue;
		uint32_t tag = (uint32_t)get_le(a + off, 4);
		const char *name = "an unknown setting";
		for (size_t i = 0; i < NAGREED; i++)
			if (agreed_fields[i].tag == tag)
				name = agreed_fields[i].name;
		snprintf(msg, cap, "%s (%llu vs %llu)", name,
			 (unsigned long long)get_le(a + off + 4, 8),
			 (unsigned long long)get_le(b + off + 4, 8));
		return;
	}
	snprintf(msg, cap, "nothing");
}
