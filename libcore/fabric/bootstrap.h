/* bootstrap.h: the fabric's TCP star on rank 0 and its framing.
 *
 * Rank 0 listens on TF_TP_PLAN_PORT; every other rank connects three
 * sockets to it (role 0 control: bootstrap and host collectives; role 1 plan
 * link; role 2 fate), retrying every 50 ms while rank 0 starts, and opens
 * each with a hello of five little-endian u32 (magic "TPB1", version, world,
 * rank, role). Rank 0 accepts them in any order; a bad magic or version is
 * dropped with a warning, a bad world, rank or role or a duplicate refuses
 * the start. Frames are a little-endian u32 length then the bytes. Every
 * wait has a deadline (TF_TP_PLAN_TIMEOUT): nothing here blocks forever.
 *
 * Collective helpers over the control sockets: all-gather (rank 0 reads
 * every rank's frame in rank order, then sends all of them to each rank),
 * broadcast (only rank 0 contributes) and agree (every rank compares each
 * rank's blob with rank 0's and all refuse on a difference). Not thread
 * safe: one thread drives a struct tf_boot at a time. */
#ifndef TF_FABRIC_BOOTSTRAP_H
#define TF_FABRIC_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "fabric/settings.h"

#define TF_BOOT_MAGIC 0x31425054u /* "TPB1" */
#define TF_BOOT_VERSION 2u
#define TF_BOOT_BLOB_MAX 65536u
#define TF_BOOT_MAX_WORLD 64

enum tf_boot_role { TF_BOOT_CTL = 0, TF_BOOT_PLAN = 1, TF_BOOT_FATE = 2, TF_BOOT_NROLES = 3 };

struct tf_boot_hello {
	uint32_t magic, version, world, rank, role;
};

struct tf_boot {
	int world, rank;
	double timeout_s;
	int listen_fd; /* rank 0 before open completes, else -1 */
	int port;      /* the port rank 0 listens on */
	/* rank 0: fd[role][r] for peers r >= 1; other ranks: fd[role][0]. */
	int fd[TF_BOOT_NROLES][TF_BOOT_MAX_WORLD];
};

/* Rank 0 only, optional: bind and listen now (s->plan_port; 0 picks a free
 * port, reported in b->port) so that a caller can tell peers the port. */
tf_status tf_boot_listen(struct tf_boot *b, const struct tf_fabric_settings *s);
/* Connect the star (all three roles); b must be zeroed or prepared by
 * tf_boot_listen. Then agree on the settings digest:
 * a difference refuses on every rank with TF_ERR_CONFIG naming the first
 * differing variable. TF_ERR_TIMEOUT when peers do not come in time,
 * TF_ERR_MISMATCH on a bad hello. On error everything is closed. */
tf_status tf_boot_open(struct tf_boot *b, const struct tf_fabric_settings *s);
/* Close every socket (safe twice and on a failed open). */
void tf_boot_close(struct tf_boot *b);

/* All-gather of one blob (at most TF_BOOT_BLOB_MAX bytes) per rank: out
 * receives world slots of cap bytes, rank 0 first; lens[r] the lengths. */
tf_status tf_boot_all_gather(struct tf_boot *b, const void *mine, size_t n, uint8_t *out,
			     size_t cap, size_t *lens);
/* Rank 0's buf[0..*n) to every rank (others pass cap and get *n). */
tf_status tf_boot_broadcast(struct tf_boot *b, void *buf, size_t *n, size_t cap);
/* All ranks must pass equal bytes: on a difference every rank records
 * "rank i's <what> differs from rank 0's: <detail>; every rank refuses to
 * start" and returns TF_ERR_CONFIG. diff (may be NULL) names the
 * difference; without it the detail is the byte offset. */
tf_status tf_boot_agree(struct tf_boot *b, const void *mine, size_t n, const char *what,
			void (*diff)(const uint8_t *, size_t, const uint8_t *, size_t, char *, size_t));

/* Socket helpers with deadlines (CLOCK_MONOTONIC seconds; 0: none). */
double tf_boot_now(void);
tf_status tf_sock_write_full(int fd, const void *p, size_t n, double deadline);
/* TF_ERR_IO with "peer closed" on EOF, TF_ERR_TIMEOUT past the deadline. */
tf_status tf_sock_read_full(int fd, void *p, size_t n, double deadline);
tf_status tf_sock_send_frame(int fd, const void *p, size_t n, double deadline);
/* Read one frame of at most cap bytes; a longer one is TF_ERR_FORMAT (the
 * stream is then out of step: close it). */
tf_status tf_sock_recv_frame(int fd, void *buf, size_t cap, size_t *n, double deadline);

/* Check a hello's 20 bytes against a world: TF_ERR_VERSION for a bad
 * magic or version (drop the connection), TF_ERR_MISMATCH for a bad world,
 * rank or role. Pure: the fuzz target drives it. */
tf_status tf_boot_hello_parse(const uint8_t p[20], int world, struct tf_boot_hello *h);
void tf_boot_hello_pack(const struct tf_boot_hello *h, uint8_t p[20]);

#endif
