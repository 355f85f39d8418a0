/* cpu.h: the engine backend over the DeepSeek-V4.1 forward on the CPU
 * (compute/model.h): one cache sequence per lane, every round's prompt
 * pieces and decode rows in one batched forward, keyed sampling
 * (compute/sample.h) from each row's logits at the position it predicts, so
 * the same request gives the same tokens alone or batched. */
#ifndef TF_ENGINE_CPU_H
#define TF_ENGINE_CPU_H

#include "base/status.h"
#include "compute/model.h"
#include "engine/engine.h"

/* A backend over model (which it takes over: the engine frees both). eos
 * is the end-of-sequence id, or -1. */
tf_status tf_engine_cpu_new(struct tf_model *model, int32_t eos, struct tf_engine_backend *out);

#endif
