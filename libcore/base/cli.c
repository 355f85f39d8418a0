/* cli.c: option tables over getopt_long, help, version, exits. */
#include "base/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/num.h"

#ifndef TF_VERSION
#define TF_VERSION "0"
#endif
#ifndef TF_COMMIT
#define TF_COMMIT "unknown"
#endif

static const struct tf_cli *current;
static bool quiet;
/* Which of current's options the command line gave (not defaults or
 * TF_* variables). */
static bool given[96];

enum { KEY_HELP = 1000, KEY_VERSION, KEY_QUIET, KEY_VERBOSE, KEY_DUMP, KEY_BASE = 2000 };

static void check_stdout(void)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return;
	if (errno == EPIPE)
		_exit(0);
	fprintf(stderr, "%s: cannot write to standard output: %s\n", tf_log_prog(),
		strerror(errno));
	_exit(74);
}

bool tf_cli_chatty(void)
{
	return !quiet;
}

/* "prog: message" on stderr, without the newline. */
static void vsay(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", tf_log_prog());
	vfprintf(stderr, fmt, ap);
}

void tf_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void tf_die(int code, const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

void tf_die_status(tf_status st, const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s\n", tf_errmsg(st));
	exit(tf_status_exit(st));
}

void tf_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", tf_log_prog());
	exit(64);
}

static bool in_choices(const char *choices, const char *v)
{
	size_t n = strlen(v);
	for (const char *c = choices; c && *c;) {
		const char *bar = strchr(c, '|');
		size_t len = bar ? (size_t)(bar - c) : strlen(c);
		if (len == n && !strncmp(c, v, n))
			return true;
		c = bar ? bar + 1 : NULL;
	}
	return false;
}

/* Store a textual value into an option's destination. */
static tf_status set_value(const struct tf_opt *o, const char *v)
{
	tf_status st = TF_OK;
	switch (o->kind) {
	case TF_OPT_FLAG: {
		bool on = true;
		if (v && (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !*v))
			on = false;
		else if (v && strcmp(v, "1") && strcmp(v, "true") && strcmp(v, "yes"))
			return tf_err(TF_ERR_ARG, "'%s' is not 0/1/true/false/yes/no", v);
		*(bool *)o->dst = on;
		break;
	}
	case TF_OPT_STR:
		*(const char **)o->dst = v;
		break;
	case TF_OPT_CHOICE:
		if (!in_choices(o->choices, v))
			return tf_err(TF_ERR_ARG, "'%s' is not one of %s", v, o->choices);
		*(const char **)o->dst = v;
		break;
	case TF_OPT_INT: {
		/* a double holds INT64_MAX only approximately: clamp, never overflow */
		int64_t lo = o->min <= -9.2e18 ? INT64_MIN : (int64_t)o->min;
		int64_t hi = o->max >= 9.2e18 ? INT64_MAX : (int64_t)o->max;
		st = tf_parse_i64(v, lo, hi, true, (int64_t *)o->dst);
		break;
	}
	case TF_OPT_SIZE:
		st = tf_parse_u64(v, o->max > 0 && o->max < 1.8e19 ? (uint64_t)o->max : UINT64_MAX, true,
				  (uint64_t *)o->dst);
		break;
	case TF_OPT_DOUBLE:
		st = tf_parse_double(v, o->min, o->max, (double *)o->dst);
		break;
	}
	return st;
}

static void print_help(const struct tf_cli *cli)
{
	printf("Usage: %s %s\n%s\n\nOptions:\n", cli->name, cli->usage, cli->summary);
	for (size_t i = 0; i < cli->nopts; i++) {
		const struct tf_opt *o = &cli->opts[i];
		char left[64];
		int n = snprintf(left, sizeof left, "  %c%c%s--%s%s%s", o->short_name ? '-' : ' ',
				 o->short_name ? o->short_name : ' ', o->short_name ? ", " : "  ",
				 o->name, o->kind == TF_OPT_FLAG ? "" : "=",
				 o->kind == TF_OPT_FLAG ? "" : (o->arg ? o->arg : "X"));
		printf("%s%*s %s", left, n < 30 ? 30 - n : 1, "", o->help);
		if (o->choices)
			printf(" (%s)", o->choices);
		if (o->def && o->kind != TF_OPT_FLAG)
			printf(" [default: %s]", o->def);
		if (o->env)
			printf(" [env: %s]", o->env);
		putchar('\n');
	}
	printf("  -q, --quiet                  only errors on stderr; no progress\n"
	       "  -v, --verbose                more detail on stderr (repeat for more) [env: TF_LOG]\n"
	       "  -h, --help                   print this help and exit\n"
	       "  -V, --version                print the version and exit\n"
	       "\nSee %s(1).\n", cli->name);
}

static const char *kind_name(enum tf_opt_kind k)
{
	static const char *const n[] = {"flag", "str", "int", "size", "double", "choice"};
	return n[k];
}

static void dump_options(const struct tf_cli *cli)
{
	printf("program\t%s\ncommands\t%s\n", cli->name, cli->commands ? cli->commands : "");
	for (size_t i = 0; i < cli->nopts; i++) {
		const struct tf_opt *o = &cli->opts[i];
		printf("option\t%s\t%c\t%s\t%s\t%s\n", o->name, o->short_name ? o->short_name : '-',
		       kind_name(o->kind), o->arg ? o->arg : "-", o->choices ? o->choices : "-");
	}
	printf("option\tquiet\tq\tflag\t-\t-\noption\tverbose\tv\tflag\t-\t-\n"
	       "option\thelp\th\tflag\t-\t-\noption\tversion\tV\tflag\t-\t-\n");
}

bool tf_cli_given(size_t i)
{
	return current && i < current->nopts && i < sizeof given / sizeof *given && given[i];
}

int tf_cli_parse(const struct tf_cli *cli, int argc, char **argv)
{
	current = cli;
	memset(given, 0, sizeof given);
	if (tf_log_init(cli->name) < 0)
		tf_die(78, "TF_LOG='%s' is not one of error|warn|info|debug|trace", getenv("TF_LOG"));
	atexit(check_stdout);

	for (size_t i = 0; i < cli->nopts; i++) {
		const struct tf_opt *o = &cli->opts[i];
		tf_status st;
		if (o->def && (st = set_value(o, o->def)))
			tf_die(70, "bad default for --%s: %s", o->name, tf_errmsg(st));
		const char *e = o->env ? getenv(o->env) : NULL;
		if (e && *e && (st = set_value(o, e)))
			tf_die(78, "%s: %s", o->env, tf_errmsg(st));
	}

	/* Static tables: --help and misuse exit from inside the loop. */
	enum { MAXOPTS = sizeof given / sizeof *given };
	static struct option lo[MAXOPTS + 6];
	static char so[2 * MAXOPTS + 16];
	size_t n = cli->nopts;
	if (n > MAXOPTS)
		tf_die(70, "%s: more than %d options", cli->name, MAXOPTS);
	memset(lo, 0, sizeof lo);
	char *sp = so;
	*sp++ = ':'; /* report a missing argument as ':' */
	for (size_t i = 0; i < n; i++) {
		const struct tf_opt *o = &cli->opts[i];
		int has = o->kind == TF_OPT_FLAG ? no_argument : required_argument;
		lo[i] = (struct option){o->name, has, NULL, KEY_BASE + (int)i};
		if (o->short_name) {
			*sp++ = (char)o->short_name;
			if (has)
				*sp++ = ':';
		}
	}
	strcpy(sp, "qvhV");
	lo[n] = (struct option){"help", no_argument, NULL, KEY_HELP};
	lo[n + 1] = (struct option){"version", no_argument, NULL, KEY_VERSION};
	lo[n + 2] = (struct option){"quiet", no_argument, NULL, KEY_QUIET};
	lo[n + 3] = (struct option){"verbose", no_argument, NULL, KEY_VERBOSE};
	lo[n + 4] = (struct option){"dump-options", no_argument, NULL, KEY_DUMP};

	opterr = 0;
	int c, verbose = 0;
	while ((c = getopt_long(argc, argv, so, lo, NULL)) != -1) {
		const struct tf_opt *o = NULL;
		if (c >= KEY_BASE)
			o = &cli->opts[c - KEY_BASE];
		for (size_t i = 0; !o && i < n; i++)
			if (cli->opts[i].short_name && cli->opts[i].short_name == c)
				o = &cli->opts[i];
		if (o) {
			tf_status st = set_value(o, o->kind == TF_OPT_FLAG ? NULL : optarg);
			if (st)
				tf_usage_error("--%s: %s", o->name, tf_errmsg(st));
			given[o - cli->opts] = true;
			continue;
		}
		switch (c) {
		case 'h': case KEY_HELP: print_help(cli); exit(0);
		case 'V': case KEY_VERSION:
			printf("%s %s (%s)\n", cli->name, TF_VERSION, TF_COMMIT);
			exit(0);
		case 'q': case KEY_QUIET: quiet = true; tf_log_set_level(TF_LOG_ERROR); break;
		case 'v': case KEY_VERBOSE: verbose++; tf_log_set_level(TF_LOG_WARN + verbose); break;
		case KEY_DUMP: dump_options(cli); exit(0);
		case ':':
			tf_usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			if (optopt > 0 && optopt < 256)
				tf_usage_error("unknown option '-%c'", optopt);
			tf_usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	return optind;
}
