/* cli.h: the shared command-line layer of every tf program: one option
 * table per program (long and short names, kind, destination, TF_*
 * variable, default, help), parsed with getopt_long; --help, --version,
 * -q/--quiet and -v/--verbose come for free; a hidden --dump-options prints
 * the table for the completion generator. Precedence: command line, then
 * environment, then the default.
 *
 * This is the one part of libcore that exits: tf_cli_parse (on --help,
 * --version and misuse) and tf_die are for programs, never for library
 * code. */
#ifndef TF_BASE_CLI_H
#define TF_BASE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

enum tf_opt_kind {
	TF_OPT_FLAG,   /* bool *: set to true */
	TF_OPT_STR,    /* const char **: the argument (borrowed from argv/environ) */
	TF_OPT_INT,    /* int64_t *: strict, in [min, max] */
	TF_OPT_SIZE,   /* uint64_t *: strict, K/M/G/T suffixes, at most max */
	TF_OPT_DOUBLE, /* double *: finite, in [min, max] */
	TF_OPT_CHOICE, /* const char **: one of choices ("a|b|c") */
};

struct tf_opt {
	const char *name;      /* long name, without "--" */
	int short_name;        /* 0 for none */
	enum tf_opt_kind kind;
	void *dst;
	const char *arg;       /* argument name in help ("N", "FILE", "DIR") */
	const char *env;       /* TF_* variable, or NULL */
	const char *def;       /* default as text (parsed like input), or NULL */
	const char *help;
	double min, max;       /* range for INT and DOUBLE (max for SIZE) */
	const char *choices;   /* for CHOICE: "a|b|c" */
};

struct tf_cli {
	const char *name;      /* "tf-pack-synth" */
	const char *usage;     /* "[OPTION]... -o DIR" (several lines allowed) */
	const char *summary;   /* one line */
	const char *commands;  /* subcommands "a|b|c" for completion, or NULL */
	const struct tf_opt *opts;
	size_t nopts;
};

/* The options many programs share, with their variables. */
#define TF_OPT_JSON(d) {"json", 0, TF_OPT_FLAG, (d), NULL, NULL, NULL, "print structured output as JSON", 0, 0, NULL}
#define TF_OPT_THREADS(d) {"threads", 'j', TF_OPT_INT, (d), "N", "TF_THREADS", "0", "worker threads (0: one per CPU)", 0, 4096, NULL}
#define TF_OPT_RANK(d) {"rank", 'r', TF_OPT_INT, (d), "R", "TF_TP_RANK", "0", "tensor-parallel rank", 0, 7, NULL}
#define TF_OPT_WORLD(d) {"world", 'w', TF_OPT_INT, (d), "W", "TF_TP_WORLD", "1", "tensor-parallel world size", 1, 8, NULL}
#define TF_OPT_DEVICE(d) {"device", 0, TF_OPT_INT, (d), "N", "TF_TP_DEVICE", "0", "CUDA device ordinal", 0, 63, NULL}

#define TF_NOPTS(a) (sizeof(a) / sizeof((a)[0]))

/* Apply defaults and TF_* variables, then parse argv. Returns the index of
 * the first operand. Exits 0 after --help/--version/--dump-options, and 64
 * with a short usage on misuse (a bad variable names the variable). Also
 * reads TF_LOG and arranges for stdout to be checked at exit (a failed write
 * other than EPIPE exits 74). */
int tf_cli_parse(const struct tf_cli *cli, int argc, char **argv);

/* True when option i of the parsed table was given on the command line
 * (not only by its default or TF_* variable). */
bool tf_cli_given(size_t i);

/* Print "prog: usage error text\nTry 'prog --help'." and exit 64. */
void tf_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Print "prog: message" to stderr and exit with code. */
void tf_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Print "prog: message" to stderr. */
void tf_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "prog: what: <detail of st>" and exit tf_status_exit(st). */
void tf_die_status(tf_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* True unless -q was given (progress lines and notes honour it). */
bool tf_cli_chatty(void);

#endif
