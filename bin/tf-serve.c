/* tf-serve: serve a model over OpenAI- and Anthropic-compatible HTTP, or
 * answer one request from stdin (--once), or check the setup (--check).
 *
 * With --world W (or --local-ranks W) the model is W tensor-parallel ranks,
 * one process each (compute/ranks.h): rank 0 serves and the others follow
 * its model calls; --local-ranks starts the followers itself.
 *
 * main: parse, validate, open (ranks, family, engine, server), run until a
 * stop signal (drain), close (server stop, engine close, server free, the
 * followers stopped); a follower replays rank 0's calls until it stops. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/cli.h"
#include "base/file.h"
#include "base/log.h"
#include "base/progress.h"
#include "compute/model.h"
#include "compute/ranks.h"
#include "engine/model_backend.h"
#include "engine/engine.h"
#include "engine/planner.h"
#include "engine/prefix.h"
#include "engine/stub.h"
#include "serve/family.h"
#include "engine/propose.h"
#include "serve/gen.h"
#include "serve/once.h"
#include "serve/rstore.h"
#include "serve/server.h"

static const char *host, *engine_name, *model, *aliases, *api_key, *api_key_file, *path,
	*seed_salt, *drafts_arg, *devices_arg;
static int64_t port, context, max_tokens, lanes, round_tokens, headers_max, timeout_s,
	connections, http_threads, memo_cap, rstore_cap, top_k, threads, prefix_cache, device, world, rank,
	local_ranks;
static uint64_t body_max, rstore_bytes;
static double drain_s, keepalive_s, stub_token_ms, stub_piece_us, stub_wait_ms, temperature, top_p;
static bool check, once, synthetic, invariant;

static const struct tf_opt opts[] = {
	{"host", 'H', TF_OPT_STR, &host, "ADDR", "TF_HOST", "127.0.0.1", "listen address (numeric IPv4 or IPv6)", 0, 0, NULL},
	{"port", 'p', TF_OPT_INT, &port, "PORT", "TF_PORT", "8080", "listen port (0: any free port)", 0, 65535, NULL},
	{"engine", 'e', TF_OPT_CHOICE, &engine_name, "ENGINE", "TF_ENGINE", "cpu", "engine backend: the model on the CPU or a GPU, or the stub", 0, 0, "cpu|cuda|stub"},
	{"device", 0, TF_OPT_INT, &device, "N", "TF_DEVICE", "0", "cuda engine: the GPU's ordinal (--local-ranks: rank r's is N+r)", 0, 1024, NULL},
	{"devices", 0, TF_OPT_STR, &devices_arg, "LIST", "TF_DEVICES", NULL, "cuda engine: each rank's GPU, one ordinal a rank in rank order (e.g. 0,0: two ranks on GPU 0)", 0, 0, NULL},
	{"world", 0, TF_OPT_INT, &world, "W", "TF_TP_WORLD", "1", "tensor-parallel ranks of the model, one process each (rank 0 serves)", 1, 64, NULL},
	{"rank", 0, TF_OPT_INT, &rank, "R", "TF_TP_RANK", "0", "this process's rank of --world (rank 0 serves HTTP; the others follow it)", 0, 63, NULL},
	{"local-ranks", 0, TF_OPT_INT, &local_ranks, "W", NULL, "0", "serve as rank 0 of W and start the W-1 followers on this host", 0, 64, NULL},
	{"model", 'm', TF_OPT_STR, &model, "NAME", "TF_MODEL", NULL, "served model name (default: the pack folder's name, or 'stub')", 0, 0, NULL},
	{"alias", 0, TF_OPT_STR, &aliases, "NAMES", "TF_MODEL_ALIASES", NULL, "other model names to list, comma-separated", 0, 0, NULL},
	{"context", 'c', TF_OPT_INT, &context, "N", "TF_CONTEXT", "4096", "longest prompt plus completion in tokens", 16, 1 << 24, NULL},
	{"max-tokens", 0, TF_OPT_INT, &max_tokens, "N", "TF_MAX_TOKENS", "4096", "completion limit when a request names none", 1, 1 << 24, NULL},
	{"lanes", 'l', TF_OPT_INT, &lanes, "N", "TF_LANES", "64", "requests running at once (more wait)", 1, 65536, NULL},
	{"round-tokens", 0, TF_OPT_INT, &round_tokens, "N", "TF_ROUND_TOKENS", "2048", "token budget of one engine round", 16, 1 << 20, NULL},
	{"drafts", 0, TF_OPT_STR, &drafts_arg, "N|off", "TF_DRAFTS", "7", "the most speculative drafts a decode row verifies (prompt lookup, then the pack's DSpark blocks; depth from measured costs), 1..7, or off (the cuda engine drafts only with --batch-invariant)", 0, 0, NULL},
	{"prefix-cache", 0, TF_OPT_INT, &prefix_cache, "N", "TF_PREFIX_CACHE", "16", "prompt prefixes the cpu engine keeps for reuse (0: no prompt cache)", 0, 65536, NULL},
	{"api-key", 'k', TF_OPT_STR, &api_key, "KEYS", "TF_API_KEY", NULL, "API keys, comma-separated (Bearer or x-api-key)", 0, 0, NULL},
	{"api-key-file", 0, TF_OPT_STR, &api_key_file, "FILE", "TF_API_KEY_FILE", NULL, "file of API keys, one a line", 0, 0, NULL},
	{"body-max", 0, TF_OPT_SIZE, &body_max, "SIZE", "TF_BODY_MAX", "32M", "request body limit (413 past it)", 0, (double)(1ull << 32), NULL},
	{"headers-max", 0, TF_OPT_INT, &headers_max, "N", "TF_HEADERS_MAX", "100", "header lines per request (431 past it)", 1, 10000, NULL},
	{"timeout", 't', TF_OPT_INT, &timeout_s, "S", "TF_HTTP_TIMEOUT_S", "120", "seconds a connection may idle or take to send a whole request", 1, 86400, NULL},
	{"connections", 0, TF_OPT_INT, &connections, "N", "TF_CONNECTIONS", "2048", "connection slots (past them the idle and the slow make room, else 503)", 1, 1 << 20, NULL},
	{"http-threads", 0, TF_OPT_INT, &http_threads, "N", "TF_HTTP_THREADS", "0", "HTTP threads and stream writers, each (0: one per CPU, at most 4)", 0, 256, NULL},
	{"drain", 0, TF_OPT_DOUBLE, &drain_s, "S", "TF_DRAIN_S", "20", "seconds running requests get after a stop signal", 0, 86400, NULL},
	{"keepalive", 0, TF_OPT_DOUBLE, &keepalive_s, "S", "TF_SSE_KEEPALIVE_S", "15", "silence before a stream keepalive (0: off)", 0, 86400, NULL},
	{"temperature", 0, TF_OPT_DOUBLE, &temperature, "T", "TF_TEMPERATURE", "1.0", "default sampling temperature (0: greedy)", 0, 100, NULL},
	{"top-p", 0, TF_OPT_DOUBLE, &top_p, "P", "TF_TOP_P", "0.95", "default nucleus sampling mass", 0.000001, 1, NULL},
	{"top-k", 0, TF_OPT_INT, &top_k, "K", "TF_TOP_K", "20", "default top-k (0: all)", 0, 1 << 30, NULL},
	{"seed-salt", 0, TF_OPT_STR, &seed_salt, "TEXT", "TF_SEED_SALT", "0", "salt of the default seed (SHA-256 of the prompt ids)", 0, 0, NULL},
	{"reasoning-memory", 0, TF_OPT_INT, &memo_cap, "N", "TF_REASONING_MEMORY", "1024", "replies whose reasoning is kept to restore into history", 1, 1 << 24, NULL},
	{"responses-store", 0, TF_OPT_INT, &rstore_cap, "N", "TF_RESPONSES_STORE", "1024", "Responses API replies kept for previous_response_id and GET (0: none; store: true is refused)", 0, 1 << 24, NULL},
	{"responses-store-bytes", 0, TF_OPT_SIZE, &rstore_bytes, "SIZE", "TF_RESPONSES_STORE_BYTES", "256M", "bytes the stored replies may take (the oldest go first)", 1, (double)(1ull << 40), NULL},
	{"stub-token-ms", 0, TF_OPT_DOUBLE, &stub_token_ms, "MS", "TF_STUB_TOKEN_MS", "15", "stub engine: milliseconds per decode round (0: none)", 0, 60000, NULL},
	{"stub-piece-us", 0, TF_OPT_DOUBLE, &stub_piece_us, "US", "TF_STUB_PIECE_US", "20", "stub engine: microseconds per prompt token (0: none)", 0, 1e6, NULL},
	{"stub-wait-ms", 0, TF_OPT_DOUBLE, &stub_wait_ms, "MS", "TF_STUB_WAIT_MS", "800", "stub engine: the silence of @wait", 1, 3600000, NULL},
	TF_OPT_THREADS(&threads),
	{"batch-invariant", 0, TF_OPT_FLAG, &invariant, NULL, "TF_BATCH_INVARIANT", NULL, "cuda engine: a request's logits do not depend on the requests batched with it, so replies are the same alone or among others and drafted or not (slower)", 0, 0, NULL},
	{"synthetic", 0, TF_OPT_FLAG, &synthetic, NULL, NULL, NULL, "generate the weights from the pack's headers instead of reading them (benchmarks over a sparse tf-pack-synth pack)", 0, 0, NULL},
	{"check", 0, TF_OPT_FLAG, &check, NULL, NULL, NULL, "validate the setup, print it and exit", 0, 0, NULL},
	{"once", 0, TF_OPT_FLAG, &once, NULL, NULL, NULL, "answer one request JSON from stdin on stdout and exit", 0, 0, NULL},
	{"path", 0, TF_OPT_STR, &path, "ROUTE", NULL, "/v1/chat/completions", "the route --once answers", 0, 0, NULL},
};

static const struct tf_cli cli = {
	"tf-serve",
	"[OPTION]... [PACK|PREPARED]\n"
	"       tf-serve --engine stub [OPTION]...\n"
	"       tf-serve --once [--path ROUTE] [OPTION]... [PACK] < request.json",
	"serve a model over OpenAI- and Anthropic-compatible HTTP",
	NULL,
	opts,
	TF_NOPTS(opts),
};

/* Split a comma list into a NULL-free array of heap strings (appended). */
static void split_keys(const char *s, char ***v, size_t *n)
{
	while (s && *s) {
		const char *e = strchr(s, ',');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		while (len && (*s == ' ' || *s == '\t'))
			s++, len--;
		while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r'))
			len--;
		if (len) {
			if (tf_realloc_array(v, *n + 1, sizeof(**v)) || !((*v)[*n] = tf_strndup(s, len)))
				tf_die(71, "out of memory");
			(*n)++;
		}
		s = e ? e + 1 : NULL;
	}
}

static void read_key_file(const char *file, char ***v, size_t *n)
{
	char *data;
	size_t len;
	tf_status st = tf_file_read_all(file, 1 << 20, &data, &len);
	if (st)
		tf_die(st == TF_ERR_NOTFOUND ? 66 : 74, "cannot read the key file '%s': %s", file,
		       tf_errmsg(st));
	struct stat sb;
	if (stat(file, &sb) == 0 && (sb.st_mode & 077))
		tf_warn("the key file '%s' is readable by others (mode %03o)", file,
			(unsigned)(sb.st_mode & 0777));
	/* '#' at the start of a line or after a blank starts a comment (a key
	 * may hold '#' elsewhere). */
	for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
		for (char *h = strchr(line, '#'); h; h = strchr(h + 1, '#'))
			if (h == line || h[-1] == ' ' || h[-1] == '\t') {
				*h = 0;
				break;
			}
		split_keys(line, v, n);
	}
	free(data);
}

static void free_list(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static atomic_int signals;
static sigset_t stop_set;

/* Counts stop signals after the first, for tf_server_drain. */
static void *signal_watch(void *arg)
{
	(void)arg;
	for (;;) {
		int sig;
		if (sigwait(&stop_set, &sig) == 0)
			atomic_fetch_add(&signals, 1);
	}
	return NULL;
}

/* --devices: one ordinal (0..1024) a rank of world, comma-separated. */
static int rank_devices[64];

static void parse_devices(const char *v, int64_t w)
{
	int n = 0;
	for (const char *p = v;; p++) {
		char *end;
		errno = 0;
		long d = strtol(p, &end, 10);
		if (errno || end == p || d < 0 || d > 1024 || (*end && *end != ',') || n == 64)
			tf_usage_error("--devices must list one GPU ordinal (0..1024) a rank, comma-separated: '%s'", v);
		rank_devices[n++] = (int)d;
		if (!*end)
			break;
		p = end;
	}
	if (n != w)
		tf_usage_error("--devices lists %d GPU%s for %lld rank%s: '%s'", n, n == 1 ? "" : "s",
			       (long long)w, w == 1 ? "" : "s", v);
}

/* --drafts: N in 1..TF_PROPOSE_MAX, or off (0). */
static uint32_t parse_drafts(const char *v)
{
	if (!strcmp(v, "off") || !strcmp(v, "0"))
		return 0;
	char *end;
	errno = 0;
	unsigned long n = strtoul(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || n < 1 || n > TF_PROPOSE_MAX)
		tf_usage_error("--drafts must be 1..%d or off: '%s'", TF_PROPOSE_MAX, v);
	return (uint32_t)n;
}

/* TF_DRAFT_DEPTH: measured (the default) or fixed (every row takes --drafts). */
static bool fixed_depth(void)
{
	const char *v = getenv("TF_DRAFT_DEPTH");
	if (!v || !*v || !strcmp(v, "measured"))
		return false;
	if (!strcmp(v, "fixed"))
		return true;
	tf_die(78, "TF_DRAFT_DEPTH must be measured or fixed: '%s'", v);
}

static const char *base_name(const char *p)
{
	static char name[256];
	snprintf(name, sizeof(name), "%s", p);
	size_t n = strlen(name);
	while (n > 1 && name[n - 1] == '/')
		name[--n] = 0;
	const char *b = strrchr(name, '/');
	return b ? b + 1 : name;
}

/* ---- tensor-parallel ranks ---- */

static char world_text[16], rank_text[16];

/* The fabric's variables (fabric/settings.h), with --world and --rank in
 * place of TF_TP_WORLD and TF_TP_RANK and the host collectives unless
 * TF_COMM_BACKEND says otherwise. */
static const char *fabric_env(const char *name)
{
	if (!strcmp(name, "TF_TP_WORLD"))
		return world_text;
	if (!strcmp(name, "TF_TP_RANK"))
		return rank_text;
	const char *v = getenv(name);
	if (!strcmp(name, "TF_COMM_BACKEND") && (!v || !*v))
		return "host";
	return v;
}

/* The settings every rank must share, one "name value" a line: what the
 * model and its cache are made of. */
static char *agreed_text(const char *pack)
{
	char cfg[2 * TF_SHA256_LEN + 1] = "none";
	char p[4096], *data;
	size_t n;
	snprintf(p, sizeof p, "%s/config.json", pack);
	if (!tf_file_read_all(p, 1 << 24, &data, &n)) {
		uint8_t d[TF_SHA256_LEN];
		if (!tf_sha256(data, n, d))
			tf_hex(d, sizeof d, cfg);
		free(data);
	}
	char *t = NULL;
	if (asprintf(&t, "engine %s\nmodel config.json sha256 %s\ncontext %lld\nlanes %lld\n"
		     "prefix-cache %lld\nbatch-invariant %d\n", engine_name, cfg, (long long)context,
		     (long long)lanes, (long long)prefix_cache, (int)invariant) < 0)
		tf_die(71, "out of memory");
	return t;
}

static pid_t followers[64]; /* --local-ranks is at most 64 */

/* --local-ranks: start ranks 1..W-1 as this program with the same options
 * (the rank, the world and the device set), connecting to port on this
 * host; each is killed if this process (the main thread) ends first. */
static void start_followers(int argc, char **argv, int link_port)
{
	char **av = calloc((size_t)argc + 8, sizeof *av);
	char w[16], r[16], d[16], pp[16];
	if (!av)
		tf_die(71, "out of memory");
	snprintf(w, sizeof w, "%lld", (long long)local_ranks);
	snprintf(pp, sizeof pp, "%d", link_port);
	setenv("TF_TP_PLAN_PORT", pp, 1);
	setenv("TF_TP_MASTER", "127.0.0.1", 1);
	int k = 0;
	av[k++] = argv[0];
	av[k++] = "--world", av[k++] = w, av[k++] = "--rank", av[k++] = r;
	if (!strcmp(engine_name, "cuda")) /* --device applies to the cuda engine only */
		av[k++] = "--device", av[k++] = d;
	/* the follower's GPU is in its --device: TF_DEVICES must not list them all */
	unsetenv("TF_DEVICES");
	for (int i = 1; i < argc; i++) {
		static const char *const drop[] = {"--local-ranks", "--device", "--devices", "--world", "--rank"};
		bool skip = false;
		for (size_t j = 0; j < sizeof drop / sizeof *drop && !skip; j++) {
			size_t len = strlen(drop[j]);
			if (!strcmp(argv[i], drop[j]))
				skip = true, i++;
			else if (!strncmp(argv[i], drop[j], len) && argv[i][len] == '=')
				skip = true;
		}
		if (!skip)
			av[k++] = argv[i];
	}
	fflush(stdout), fflush(stderr);
	pid_t parent = getpid();
	for (int q = 1; q < local_ranks; q++) {
		snprintf(r, sizeof r, "%d", q);
		snprintf(d, sizeof d, "%lld", devices_arg ? (long long)rank_devices[q] : (long long)(device + q));
		if ((followers[q] = fork()) < 0)
			tf_die(71, "cannot start rank %d: fork: %s", q, strerror(errno));
		if (!followers[q]) {
			/* A follower never outlives rank 0: one that is stopped or
			 * hung cannot end itself when rank 0 goes fail-fast. */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
				_exit(70);
			execv("/proc/self/exe", av);
			fprintf(stderr, "tf-serve: cannot start rank %d: %s\n", q, strerror(errno));
			_exit(127);
		}
	}
	free(av);
}

/* --local-ranks, after the stop: wait up to 10 s for the followers; the
 * worst exit code of theirs. */
static int reap_followers(void)
{
	int worst = 0;
	double until = tf_now() + 10;
	for (int q = 1; q < local_ranks; q++) {
		int status;
		pid_t p;
		while ((p = waitpid(followers[q], &status, WNOHANG)) == 0 && tf_now() < until)
			usleep(10000);
		if (p == 0) {
			tf_warn("rank %d did not stop in 10 s: killing it", q);
			kill(followers[q], SIGKILL);
			waitpid(followers[q], &status, 0);
		}
		int rc = p < 0 ? 70 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (rc)
			tf_warn("rank %d exited with %d", q, rc);
		worst = rc > worst ? rc : worst;
	}
	return worst;
}

/* A follower ignores the first stop signal (rank 0 stops the world); a
 * second one ends this rank, and so every rank (exit 70). */
static void *follower_signals(void *arg)
{
	struct tf_ranks *r = arg;
	for (int n = 0;;) {
		int sig;
		if (sigwait(&stop_set, &sig))
			continue;
		if (++n == 1) {
			tf_warn("rank %d: stop rank 0 to stop every rank (a second signal ends them all, "
				"exit 70)", tf_ranks_rank(r));
			continue;
		}
		tf_ranks_fatal(r, "a stop signal", "stopped by a second signal");
	}
	return NULL;
}

/* A follower: load this rank's slices and replay rank 0's calls. */
static int follow(struct tf_ranks *r, const char *pack, const struct tf_model_opts *mo)
{
	pthread_t t;
	pthread_create(&t, NULL, follower_signals, r);
	pthread_detach(t);
	struct tf_model *m;
	tf_status st = tf_ranks_model_open(r, pack, mo, &m);
	if (st)
		tf_ranks_fatal(r, "loading the model", tf_errmsg(st));
	if (tf_cli_chatty())
		fprintf(stderr, "tf-serve: rank %d of %d: following rank 0\n", tf_ranks_rank(r),
			tf_ranks_world(r));
	st = tf_ranks_follow(r, m);
	tf_model_free(m);
	if (tf_cli_chatty())
		fprintf(stderr, "tf-serve: rank %d: stopped after %llu calls\n", tf_ranks_rank(r),
			(unsigned long long)tf_ranks_plans(r));
	tf_ranks_free(r);
	return st ? tf_status_exit(st) : 0;
}

static const char *rank_state(void *ctx, int r)
{
	return tf_ranks_state(ctx, r);
}

/* The engine a rank's failure halts; NULL once it closes (the fate's
 * thread may run the hook while the engine is being closed). */
static struct tf_engine *_Atomic live_engine;

static void halt_engine(void *ctx)
{
	(void)ctx;
	struct tf_engine *e = atomic_exchange(&live_engine, NULL);
	if (e)
		tf_engine_halt(e, "a tensor-parallel rank failed: the server is stopping");
}

/* An option the command line gave that does not apply (the reason says
 * why) is a usage error naming it, exit 64: silently ignoring it would let
 * a typo in a launch script pass. TF_* variables are not refused, so one
 * environment can serve every engine. */
static void refuse_given(const char *name, const char *why)
{
	for (size_t k = 0; k < TF_NOPTS(opts); k++)
		if (!strcmp(opts[k].name, name) && tf_cli_given(k))
			tf_usage_error("--%s %s", name, why);
}

static void refuse_given_both(const char *a, const char *b)
{
	bool ga = false, gb = false;
	for (size_t k = 0; k < TF_NOPTS(opts); k++) {
		ga = ga || (!strcmp(opts[k].name, a) && tf_cli_given(k));
		gb = gb || (!strcmp(opts[k].name, b) && tf_cli_given(k));
	}
	if (ga && gb)
		tf_usage_error("--%s and --%s do not go together", a, b);
}

static void check_applies(bool stub, bool cuda)
{
	if (!once)
		refuse_given("path", "applies only with --once");
	if (stub) {
		static const char *const model_only[] = {"threads", "prefix-cache", "device", "devices",
							 "synthetic"};
		for (size_t i = 0; i < TF_NOPTS(model_only); i++)
			refuse_given(model_only[i], "does not apply to the stub engine");
	}
	if (!cuda) {
		refuse_given("device", "applies only to the cuda engine");
		refuse_given("batch-invariant", "applies only to the cuda engine");
		refuse_given("devices", "applies only to the cuda engine");
	}
	refuse_given_both("device", "devices");
}

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	const char *pack = NULL;
	if (argc - first > 1)
		tf_usage_error("one PACK or PREPARED folder at most");
	if (argc - first == 1)
		pack = argv[first];
	bool stub = !strcmp(engine_name, "stub"), cuda = !strcmp(engine_name, "cuda");
	check_applies(stub, cuda);
	if (!stub && !pack)
		tf_usage_error("a PACK or PREPARED folder is needed (or --engine stub)");
	if (once && check)
		tf_usage_error("--once and --check do not go together");
	/* The cuda engine drafts only on the batch-invariant path, by default
	 * there: off it, a drafted row's logits (and so its logprobs, and
	 * tokens at near-ties) can differ from the plain row's, and a drafted
	 * reply must equal the plain one. */
	uint32_t drafts = parse_drafts(drafts_arg);
	if (cuda && !invariant && drafts) {
		bool asked = false;
		for (size_t k = 0; k < TF_NOPTS(opts); k++)
			if (!strcmp(opts[k].name, "drafts"))
				asked = tf_cli_given(k) || (getenv("TF_DRAFTS") && *getenv("TF_DRAFTS"));
		if (asked)
			tf_usage_error("--drafts %s on the cuda engine needs --batch-invariant: off that "
				       "path a drafted reply can differ from the plain one", drafts_arg);
		drafts = 0;
	}
	if (pack && !tf_file_exists(pack))
		tf_die(66, "cannot open '%s': %s", pack, strerror(ENOENT));
	if (path[0] != '/')
		tf_usage_error("--path must start with '/': '%s'", path);
	unsigned char addr[sizeof(struct in6_addr)];
	if (inet_pton(AF_INET, host, addr) != 1 && inet_pton(AF_INET6, host, addr) != 1)
		tf_usage_error("--host must be a numeric IPv4 or IPv6 address: '%s'", host);
	if (local_ranks > 1)
		world = local_ranks, rank = 0;
	if (world > 1 && stub)
		tf_usage_error("--world and --local-ranks need a model engine (cpu or cuda), not the stub");
	if (rank >= world)
		tf_usage_error("--rank %lld must be below --world %lld", (long long)rank, (long long)world);
	/* this rank's GPU: its --devices entry, else --device (a follower
	 * started by --local-ranks is given its own --device) */
	if (!cuda)
		devices_arg = NULL; /* TF_DEVICES, set for the cuda engine */
	if (devices_arg) {
		parse_devices(devices_arg, world);
		device = rank_devices[rank];
	}

	/* Stop signals are taken by one thread; every thread started after this
	 * (the model's workers, the fabric's, the server's) inherits the mask. */
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* Open: the ranks (world > 1), agreeing on the fabric's settings and
	 * on the serving ones that make the model and its cache. */
	tf_status st;
	struct tf_ranks *ranks = NULL;
	if (world > 1) {
		snprintf(world_text, sizeof world_text, "%lld", (long long)world);
		snprintf(rank_text, sizeof rank_text, "%lld", (long long)rank);
		struct tf_fabric_settings fs;
		if ((st = tf_fabric_settings_env(&fs, fabric_env)))
			tf_die_status(st, "bad tensor-parallel settings");
		if (!cuda && (fs.backend == TF_FABRIC_NCCL || fs.backend == TF_FABRIC_MAILBOX))
			tf_die(78, "TF_COMM_BACKEND=%s carries device memory: the %s engine's ranks take host "
			       "or roce", tf_fabric_backend_name(fs.backend), engine_name);
		fs.device = (int)device; /* NCCL and the mailbox open it first */
		const char *pp = getenv("TF_TP_PLAN_PORT");
		if (local_ranks > 1 && (!pp || !*pp))
			fs.plan_port = 0; /* any free port: the followers are told */
		if ((st = tf_ranks_new(&fs, &ranks)))
			tf_die_status(st, "cannot set up the ranks");
		if (local_ranks > 1) {
			int lp;
			if ((st = tf_ranks_listen(ranks, &lp)))
				tf_die_status(st, "rank 0: cannot listen for the other ranks");
			start_followers(argc, argv, lp);
		}
		char *t = agreed_text(pack);
		st = tf_ranks_connect(ranks, t, "serving settings");
		free(t);
		if (st)
			tf_die_status(st, "rank %lld of %lld: cannot join the other ranks", (long long)rank,
				      (long long)world);
	}
	/* A sequence slot per lane and one per saved prompt prefix. */
	struct tf_progress pr;
	tf_progress_init(&pr, "weights", 0, "B");
	struct tf_model_opts mo = {.backend = cuda ? TF_MODEL_CUDA : TF_MODEL_CPU,
				   .device = (int)device, .threads = (int)threads,
				   .slots = (int)(lanes + prefix_cache),
				   .max_positions = context, .progress = &pr,
				   .synthetic = synthetic, .synth_seed = 1,
				   .batch_invariant = cuda && invariant};
	if (rank > 0)
		return follow(ranks, pack, &mo);

	/* Open: the family (a pack's tokenizer, or the plain bytes for the stub). */
	struct tf_family family;
	st = pack ? tf_family_dsv41(pack, &family) : tf_family_plain(&family);
	if (st)
		tf_die_status(st, "cannot load the text side of '%s'", pack ? pack : "(plain)");
	if (!model)
		model = pack ? base_name(pack) : "stub";
	char **keys = NULL, **names = NULL;
	size_t nkeys = 0, nnames = 0;
	split_keys(api_key, &keys, &nkeys);
	if (api_key_file)
		read_key_file(api_key_file, &keys, &nkeys);
	split_keys(aliases, &names, &nnames);
	/* The model engine (cpu or cuda): the pack's model, loaded and checked
	 * before serving. */
	struct tf_model *rank_model = NULL;
	if (!stub) {
		st = ranks ? tf_ranks_model_open(ranks, pack, &mo, &rank_model)
			   : tf_model_open(pack, &mo, &rank_model);
		if (st)
			tf_die_status(st, "cannot load the model of '%s'%s", pack,
				      cuda ? " on the GPU" : "");
	}
	if (check) {
		tf_model_free(rank_model);
		tf_ranks_free(ranks);
		int worst = local_ranks > 1 ? reap_followers() : 0;
		printf("ok: engine %s, family %s, model %s, context %lld, lanes %lld, world %lld, "
		       "listen %s:%lld, %zu API key%s\n", engine_name, family.name, model,
		       (long long)context, (long long)lanes, (long long)world, host, (long long)port,
		       nkeys, nkeys == 1 ? "" : "s");
		tf_family_release(&family);
		free_list(keys, nkeys);
		free_list(names, nnames);
		return worst;
	}

	/* The engine. */
	struct tf_stub_text text = {family.ctx, family.decode, family.encode, family.eos};
	struct tf_stub_config sc = {.text = text, .token_ms = stub_token_ms, .piece_us = stub_piece_us,
				    .wait_ms = stub_wait_ms, .zero_ok = true};
	/* The cpu engine runs prompts in pieces cut at the prompt cache's
	 * blocks, with or without the cache, so a resumed prompt gives the
	 * same tokens as a fresh one. */
	struct tf_planner_config pc = {.round_tokens = (uint32_t)round_tokens,
				       .max_lanes = (uint32_t)lanes, .context = (uint32_t)context,
				       .align = stub ? 0 : TF_PREFIX_BLOCK};
	/* Ids the tokenizer does not define (a synthetic pack's vocabulary has
	 * holes; the release pads its head) are never drawn. */
	uint8_t *drawable = NULL;
	if (!stub && (st = tf_family_drawable(&family, tf_model_config(rank_model)->vocab, &drawable)))
		tf_die_status(st, "cannot read the tokenizer's ids");
	struct tf_engine_model_opts co = {.cache_entries = (uint32_t)prefix_cache, .drawable = drawable,
					  .drafts = drafts, .fixed_depth = fixed_depth()};
	struct tf_engine_backend be;
	struct tf_planner pl;
	struct tf_engine *engine;
	st = stub ? tf_stub_new(&sc, &be) : tf_engine_model_new(rank_model, family.eos, &co, &be);
	if (st || (st = tf_planner_default(&pc, &pl)))
		tf_die_status(st, "cannot set up the engine");
	free(drawable);
	if ((st = tf_engine_new(&be, &pl, &engine)))
		tf_die_status(st, "cannot start the engine");
	/* A rank's failure halts the engine (new requests get 503) while the
	 * running ones fail with an error, before every rank exits 70. */
	if (ranks) {
		atomic_store(&live_engine, engine);
		tf_ranks_on_fail(ranks, halt_engine, NULL);
	}
	struct tf_memo *memo = NULL;
	if ((st = tf_memo_new((size_t)memo_cap, &memo)))
		tf_die_status(st, "cannot set up the reasoning memory");
	struct tf_rstore *rstore = NULL;
	if (rstore_cap && (st = tf_rstore_new((size_t)rstore_cap, (size_t)rstore_bytes, &rstore)))
		tf_die_status(st, "cannot set up the responses store");
	struct tf_gen_env env = {
		.engine = engine,
		.family = &family,
		.model = model,
		.context = (uint32_t)context,
		.max_tokens = (uint32_t)max_tokens,
		.temperature = temperature,
		.top_p = top_p,
		.top_k = (int32_t)top_k,
		.seed_salt = seed_salt,
		.keepalive_s = keepalive_s,
		.memo = memo,
		.rstore = rstore,
	};

	int code = 0;
	if (once) {
		char *body;
		size_t n;
		if ((st = tf_file_read_all("-", body_max, &body, &n)))
			tf_die_status(st, "cannot read the request from standard input");
		int status;
		st = tf_serve_once(&env, path, body, n, stdout, &status);
		free(body);
		if (st)
			tf_die_status(st, "cannot answer the request");
		code = status == 200 ? 0 : status < 500 ? 65 : status == 503 ? 75 : 70;
		if (code)
			tf_warn("the request got HTTP %d", status);
	} else {
		struct tf_server_config c = {
			.host = host,
			.port = (uint16_t)port,
			.body_max = body_max,
			.headers_max = (unsigned)headers_max,
			.timeout_s = (unsigned)timeout_s,
			.connections_max = (unsigned)connections,
			.threads = (unsigned)http_threads,
			.keys = (const char *const *)keys,
			.nkeys = nkeys,
			.aliases = (const char *const *)names,
			.naliases = nnames,
			.env = env,
			.world = (int)world,
			.rank_state = ranks ? rank_state : NULL,
			.rank_ctx = ranks,
		};
		struct tf_server *srv;
		if ((st = tf_server_new(&c, &srv)))
			tf_die_status(st, "cannot serve");
		if (tf_cli_chatty())
			fprintf(stderr, "tf-serve: listening on http://%s%s%s:%u (engine %s, model %s%s%s)\n",
				strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
				(unsigned)tf_server_port(srv), engine_name, model,
				world > 1 ? ", world " : "", world > 1 ? world_text : "");
		int sig;
		while (sigwait(&stop_set, &sig) != 0)
			;
		atomic_store(&signals, 1);
		pthread_t watch;
		pthread_create(&watch, NULL, signal_watch, NULL);
		if (tf_cli_chatty())
			fprintf(stderr, "tf-serve: %s: draining %ld request%s (up to %gs; a second signal "
				"cuts it short)\n", sig == SIGINT ? "interrupt" : "terminate",
				tf_server_inflight(srv), tf_server_inflight(srv) == 1 ? "" : "s", drain_s);
		long cut = tf_server_drain(srv, drain_s, &signals);
		tf_server_stop(srv);
		atomic_store(&live_engine, NULL);
		tf_engine_close(engine);
		engine = NULL;
		tf_server_free(srv);
		if (tf_cli_chatty())
			fprintf(stderr, "tf-serve: stopped%s\n", cut ? " (running requests were halted)" : "");
	}
	atomic_store(&live_engine, NULL);
	tf_engine_close(engine);
	/* The model is freed with the engine: now the followers stop. */
	tf_ranks_free(ranks);
	if (local_ranks > 1) {
		int worst = reap_followers();
		if (!code && worst)
			code = worst;
	}
	tf_memo_free(memo);
	tf_rstore_free(rstore);
	tf_family_release(&family);
	free_list(keys, nkeys);
	free_list(names, nnames);
	return code;
}
