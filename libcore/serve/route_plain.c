/* route_plain.c: the plain routes (server_impl.h): /health (the engine's
 * and the ranks' state; draining or halted: 503), /v1/models (the model
 * and its aliases) and /metrics (Prometheus text, metrics.h). Answered at
 * once on the connection's HTTP thread. */
#include <string.h>

#include "serve/server_impl.h"

/* With ranks behind the engine: "world" and "ranks" [{rank, state}]. */
static json_t *with_world(const struct tf_server *s, json_t *o)
{
	if (!o || s->c.world < 2 || !s->c.rank_state)
		return o;
	json_t *ranks = json_array();
	for (int r = 0; r < s->c.world; r++)
		json_array_append_new(ranks, json_pack("{s:i,s:s}", "rank", r, "state",
						       s->c.rank_state(s->c.rank_ctx, r)));
	json_object_set_new(o, "world", json_integer(s->c.world));
	json_object_set_new(o, "ranks", ranks);
	return o;
}

enum MHD_Result tf_route_health(struct MHD_Connection *mc, struct conn *c, bool authed)
{
	struct tf_server *s = c->s;
	long n = atomic_load(&s->inflight);
	if (atomic_load(&s->draining))
		return tf_respond_json(mc, c, 503, json_pack("{s:s,s:I}", "status", "draining",
						       "requests_in_progress", (json_int_t)n), 30);
	struct tf_engine_stats es;
	tf_engine_stats(s->c.env.engine, &es);
	if (es.halted)
		return tf_respond_json(mc, c, 503, with_world(s, json_pack("{s:s}", "status", "halted")), 30);
	if (!authed)
		return tf_respond_json(mc, c, 200, json_pack("{s:s}", "status", "ok"), 0);
	return tf_respond_json(mc, c, 200,
			 with_world(s, json_pack("{s:s,s:s,s:I,s:i,s:i,s:i,s:i,s:I,s:I}", "status", "ok",
				   "model", s->c.env.model, "requests_in_progress", (json_int_t)n,
				   "requests_running", (int)es.running, "requests_filling", (int)es.filling,
				   "requests_waiting", (int)es.waiting, "context_length",
				   (int)s->c.env.context, "rounds", (json_int_t)es.rounds, "generated",
				   (json_int_t)es.generated)), 0);
}

static json_t *model_entry(struct tf_server *s, const char *id)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:s,s:i,s:i}", "id", id, "object", "model", "owned_by",
			 "tf", "created", (json_int_t)s->started, "root", s->c.env.model,
			 "max_model_len", (int)s->c.env.context, "context_length",
			 (int)s->c.env.context);
}

enum MHD_Result tf_route_models(struct MHD_Connection *mc, struct conn *c)
{
	struct tf_server *s = c->s;
	json_t *data = json_array();
	json_array_append_new(data, model_entry(s, s->c.env.model));
	for (size_t i = 0; i < s->c.naliases; i++)
		json_array_append_new(data, model_entry(s, s->c.aliases[i]));
	return tf_respond_json(mc, c, 200, json_pack("{s:s,s:o}", "object", "list", "data", data), 0);
}

enum MHD_Result tf_route_metrics(struct MHD_Connection *mc, struct conn *c)
{
	struct tf_server *s = c->s;
	struct tf_engine_stats es;
	tf_engine_stats(s->c.env.engine, &es);
	struct tf_reply r = {.status = 200, .type = "text/plain; version=0.0.4"};
	struct tf_metrics_now now = {.inflight = atomic_load(&s->inflight),
				     .draining = atomic_load(&s->draining),
				     .connections = tf_slots_live(s->slots)};
	tf_metrics_write(s->metrics, s->c.env.model, &es, &now, &r.body);
	if (s->c.world > 1 && s->c.rank_state) {
		tf_buf_printf(&r.body, "# HELP tf_tp_world tensor-parallel ranks serving the model\n"
			      "# TYPE tf_tp_world gauge\ntf_tp_world %d\n"
			      "# HELP tf_tp_rank_up 1 while the rank is up\n# TYPE tf_tp_rank_up gauge\n",
			      s->c.world);
		for (int k = 0; k < s->c.world; k++) {
			const char *st = s->c.rank_state(s->c.rank_ctx, k);
			tf_buf_printf(&r.body, "tf_tp_rank_up{rank=\"%d\",state=\"%s\"} %d\n", k, st,
				      strcmp(st, "failed") != 0);
		}
	}
	enum MHD_Result ret = tf_respond(mc, c, &r, NULL, false);
	tf_reply_release(&r);
	return ret;
}
