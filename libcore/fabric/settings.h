/* settings.h: the tensor-parallel fabric's settings: world, rank, rendezvous
 * address, device, communication backend, mailbox size, fail-fast, plan
 * link. One table of variables (TF_TP_*, TF_COMM_BACKEND) serves both the
 * environment reader for library users and the command-line options of
 * programs (tf_fabric_settings_opts feeds the shared option table), so a
 * range is written once and every refusal names its variable.
 *
 * The settings that must be equal on every rank (world, backend, mailbox
 * size, fail-fast and grace, the heartbeat's period and limit, plan-link
 * timeout, the RoCE wire, fallback and chunk bound) are hashed into a SHA-256
 * digest that the bootstrap agrees on; rank, device and addresses are not
 * part of it. */
#ifndef TF_FABRIC_SETTINGS_H
#define TF_FABRIC_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/cli.h"
#include "base/status.h"

enum tf_fabric_backend {
	TF_FABRIC_NCCL = 0,    /* NCCL for everything (libnccl.so.2 by dlopen) */
	TF_FABRIC_MAILBOX = 1, /* two ranks of one host: mailbox for small, NCCL for the rest */
	TF_FABRIC_HOST = 2,    /* host memory over the bootstrap sockets: the reference */
	TF_FABRIC_ROCE = 3,    /* two ranks on two hosts: RoCE writes for small, host for the rest */
};

struct tf_fabric_settings {
	int world;            /* TF_TP_WORLD: 1..64 (default 1) */
	int rank;             /* TF_TP_RANK: 0..world-1 */
	char master[256];     /* TF_TP_MASTER: rank 0's host (default localhost) */
	int port;             /* TF_TP_PORT: rendezvous port (default 29500) */
	int plan_port;        /* TF_TP_PLAN_PORT: rank 0's listening port (default port+7) */
	double plan_timeout_s;/* TF_TP_PLAN_TIMEOUT: connect window and read deadline (300) */
	int device;           /* TF_TP_DEVICE: CUDA ordinal 0..63 */
	enum tf_fabric_backend backend; /* TF_COMM_BACKEND: nccl|mailbox|host */
	uint32_t mailbox_max_kb;        /* TF_TP_MAILBOX_MAX_KB: 4..16384 (256) */
	double mailbox_timeout_s;       /* TF_TP_MAILBOX_TIMEOUT_S: 0.001..86400 (120) */
	bool mailbox_p2p;               /* TF_TP_MAILBOX_P2P: inboxes in GPU memory (on unless 0/off) */
	bool failfast;                  /* TF_TP_FAILFAST: on unless 0/off */
	double grace_s;                 /* TF_TP_FAILFAST_GRACE_S: 0..60 (1.0) */
	double beat_s;                  /* TF_TP_HEARTBEAT_S: fate heartbeat period 0.01..60 (0.1) */
	double beat_limit_s;            /* TF_TP_HEARTBEAT_LIMIT_S: silence that ends every
					 * rank, 0 (off) or at least twice beat_s (0.4) */
	char nccl_lib[256];             /* TF_NCCL_LIB (libnccl.so.2) */
	char roce_hca[160];             /* TF_TP_ROCE_HCA: name[:gid],... at most 2 ("": choose) */
	int roce_hcas;                  /* TF_TP_ROCE_HCAS: ports to choose, 1..2 (2) */
	int roce_tc;                    /* TF_TP_ROCE_TC: GRH traffic class 0..255 (0) */
	int roce_wire;                  /* TF_TP_ROCE_WIRE: 0 verbs, 1 shm (one host) */
	bool roce_fallback_error;       /* TF_TP_ROCE_FALLBACK=error (else nccl) */
	uint32_t roce_chunked_kb;       /* TF_TP_ROCE_CHUNKED_KB: chunked gathers up to this (0 off) */
};

/* Raw values as options and variables deliver them, before checks. */
struct tf_fabric_opts {
	int64_t world, rank, port, plan_port, device, mailbox_max_kb;
	double plan_timeout_s, mailbox_timeout_s, grace_s, beat_s, beat_limit_s;
	const char *master, *backend, *failfast, *mailbox_p2p, *nccl_lib;
	const char *roce_hca, *roce_wire, *roce_fallback;
	int64_t roce_hcas, roce_tc, roce_chunked_kb;
};

#define TF_FABRIC_NOPTS 22

/* Fill out[0..TF_FABRIC_NOPTS) with option-table entries (long option,
 * variable, default, range) writing into o; a program appends them to its
 * own table and calls tf_fabric_settings_check after tf_cli_parse. */
void tf_fabric_settings_opts(struct tf_fabric_opts *o, struct tf_opt *out);

/* Read the variables into s (defaults where unset or empty), range-checking
 * each: TF_ERR_CONFIG with "NAME=value: expected ..." on a bad one. getenv
 * is consulted through env (NULL: getenv) so tests can feed their own. */
tf_status tf_fabric_settings_env(struct tf_fabric_settings *s,
				 const char *(*env)(const char *name));

/* Check raw option values (ranges already applied by the option table) and
 * the cross-field rules (rank < world, mailbox and roce need world 2, a
 * RoCE slot of at most 1 MiB, a heartbeat limit of 0 or at least twice
 * the period), filling s.
 * TF_ERR_CONFIG naming the variable on a bad value. */
tf_status tf_fabric_settings_check(const struct tf_fabric_opts *o, struct tf_fabric_settings *s);

/* The name of a backend ("nccl", "mailbox", "host", "roce"). */
const char *tf_fabric_backend_name(enum tf_fabric_backend b);

/* The bytes hashed into the digest: a fixed little-endian layout of the
 * fields that must match. Writes at most cap bytes; returns the length. */
size_t tf_fabric_settings_agreed(const struct tf_fabric_settings *s, uint8_t *out, size_t cap);
/* SHA-256 of tf_fabric_settings_agreed. */
tf_status tf_fabric_settings_digest(const struct tf_fabric_settings *s, uint8_t out[32]);
/* Name the first field in which two agreed-bytes blobs differ ("TF_TP_WORLD
 * 2 vs 3") into msg; "nothing" when equal. */
void tf_fabric_settings_diff(const uint8_t *a, size_t na, const uint8_t *b, size_t nb,
			     char *msg, size_t cap);

#endif
