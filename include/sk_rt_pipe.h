/* sk_rt_pipe.h -- part of sk_runtime.h's implementation: pipeline parallel's buffers: the slots of each chunk's micro-batches, binding them, the sends' staging copies.
   Include sk_runtime.h, not this: its implementation includes the parts in order. Needs only libc.
   License: MIT. */
#ifndef SK_RT_PIPE_H
#define SK_RT_PIPE_H
#include "sk_runtime.h"
#endif

#if defined(SK_RUNTIME_IMPL) && defined(SK_RUNTIME_IMPL_BODY) && !defined(SK_RT_PIPE_DONE)
#define SK_RT_PIPE_DONE

SK_EXTERN_C_BEGIN

/* ---- pipeline parallel ------------------------------------------------------------------------
   Every device runs its stage's action list (plan->schedule). A chunk's activations of one
   micro-batch live in a slot, opened by its F and closed after its B, so the activation memory
   follows the schedule (GPipe m micro-batches, 1F1B p - r). Between chunks on different stages
   the tensors that cross the boundary travel by Send/Recv between the devices at the same place
   in the two stages: activations after F, gradients after B, each stream on its own link. A
   tensor that skips chunks is relayed through every chunk in between, so each message goes to
   the next chunk and both sides meet them in the same order. Gradients of parameters sum over
   the micro-batches (each micro-batch's Mirror at its step, summed as a tensor read twice is);
   the loss's gradient is seeded with 1/m, so the update sees the whole batch's mean gradient.
   Optimizer parallel: the shard groups are within the stage (split from its communicator);
   level1 / level2 gather once per step and keep the slices until the update, level3 per use;
   a sharded gradient is ReduceScattered after the last micro-batch (level2: after each, into
   the shard's gradient). docs/optimizer-parallel.md, "With a pipeline". */

typedef struct sk__rt_slot {
  bool live;
  void **values, **grads; /* [ntensors]: the tensors this chunk holds (owner[t] == its chunk) */
  bool *written;
  void **kin;             /* [nops * SK_OP_MAX_INPUTS]: its operators' moved inputs */
  void **pre_rs;          /* [nops]: outputs before a forward ReduceScatter */
  void **kout, **dkout;   /* [nops * SK_OP_MAX_OUTPUTS]: moved outputs in the rule's layout, their gradients */
} sk__rt_slot;

typedef struct sk__rt_send {
  sk_request *req;
  void *staging; /* a copy: the slot it came from may change or close before the peer takes it */
  int at;        /* its Send's index in the stage's program (evaluation: -1) */
} sk__rt_send;

static int sk__rt_nvstages(const sk_runtime *rt) { return rt->plan->stages * rt->plan->schedule.chunks; }

static sk__rt_slot *sk__rt_slot_at(const sk_runtime *rt, int v, int micro) {
  return &rt->slots[(size_t)micro * (size_t)sk__rt_nvstages(rt) + (size_t)v];
}

static bool sk__rt_vstage_here(const sk_runtime *rt, int v) {
  return sk_pipe_stage_of(&rt->plan->schedule, v, NULL) == rt->stage;
}

/* Whether tensor t crosses the boundary after virtual stage j: an activation produced at or
   before j and read after it. */
static bool sk__rt_crosses(const sk_runtime *rt, int t, int j) {
  const sk_graph_tensor *x = &rt->g->tensors[t];
  if (x->role != SK_TENSOR_VALUE || rt->plan->vstage[x->producer] > j) return false;
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++)
      if (rt->g->ops[o].inputs[k] == t && rt->plan->vstage[o] > j) return true;
  return false;
}

/* Which chunk's slot holds each activation on this stage: its producer's, or the first chunk
   here it crosses into. */
static void sk__rt_pipe_owners(sk_runtime *rt) {
  const sk_graph *g = rt->g;
  for (int t = 0; t < g->ntensors; t++) rt->owner[t] = -1;
  for (int v = 0; v < sk__rt_nvstages(rt); v++) {
    if (!sk__rt_vstage_here(rt, v)) continue;
    for (int t = 0; t < g->ntensors; t++) {
      if (rt->owner[t] >= 0 || g->tensors[t].role != SK_TENSOR_VALUE) continue;
      if (rt->plan->vstage[g->tensors[t].producer] == v || (v > 0 && sk__rt_crosses(rt, t, v - 1))) rt->owner[t] = v;
    }
  }
}

static sk_result sk__rt_pipe_open(sk_runtime *rt, sk_comm *world, sk_error *err) {
  rt->stage = sk_parallel_stage_of_rank(rt->plan, sk_comm_rank(world));
  sk_comm *stage = NULL;
  sk_result r = sk_comm_split(world, rt->stage, sk_comm_rank(world), &stage, NULL);
  if (!r) r = sk_comm_split(world, 0, sk_comm_rank(world), &rt->fwd_link, NULL);
  if (!r) r = sk_comm_split(world, 0, sk_comm_rank(world), &rt->bwd_link, NULL);
  if (r) { /* a peer that failed before the splits fails them here: rt->comm stays the caller's */
    sk_comm_destroy(stage, NULL), sk_comm_destroy(rt->fwd_link, NULL), sk_comm_destroy(rt->bwd_link, NULL);
    rt->fwd_link = rt->bwd_link = NULL;
    return sk__fail(err, r, "runtime: pipeline: splitting the stages: %s", sk_comm_error_message(world));
  }
  rt->world = world, rt->comm = stage, rt->rank = sk_comm_rank(stage); /* pipe_close now owns stage */
  size_t nt = (size_t)rt->g->ntensors + 1, no = (size_t)rt->g->nops + 1, m = (size_t)rt->plan->micro;
  size_t nslots = m * (size_t)sk__rt_nvstages(rt);
  rt->owner = (int *)sk__rt_table(rt, nt, sizeof(int));
  rt->feeds = (void **)sk__rt_table(rt, m * nt, sizeof(void *));
  rt->slots = (sk__rt_slot *)sk__rt_table(rt, nslots, sizeof(sk__rt_slot));
  for (size_t i = 0; rt->slots && i < nslots; i++) {
    sk__rt_slot *sl = &rt->slots[i];
    sl->values = (void **)sk__rt_table(rt, nt, sizeof(void *)), sl->grads = (void **)sk__rt_table(rt, nt, sizeof(void *));
    sl->written = (bool *)sk__rt_table(rt, nt, sizeof(bool)), sl->pre_rs = (void **)sk__rt_table(rt, no, sizeof(void *));
    sl->kin = (void **)sk__rt_table(rt, no * SK_OP_MAX_INPUTS, sizeof(void *));
    sl->kout = (void **)sk__rt_table(rt, no * SK_OP_MAX_OUTPUTS, sizeof(void *));
    sl->dkout = (void **)sk__rt_table(rt, no * SK_OP_MAX_OUTPUTS, sizeof(void *));
    if (!sl->values || !sl->grads || !sl->written || !sl->pre_rs || !sl->kin || !sl->kout || !sl->dkout)
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory");
  }
  if (!rt->owner || !rt->feeds || !rt->slots) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory");
  sk__rt_pipe_owners(rt);
  return SK_OK;
}

/* Every micro-batch's slice of each input an operator here reads. */
static void sk__rt_slot_close(sk_runtime *rt, sk__rt_slot *sl) {
  for (int t = 0; t < rt->g->ntensors; t++) {
    sk__rt_counted_free(rt, sl->values[t]), sk__rt_counted_free(rt, sl->grads[t]);
    sl->values[t] = sl->grads[t] = NULL, sl->written[t] = false;
  }
  for (int o = 0; o < rt->g->nops; o++) {
    for (int k = 0; k < SK_OP_MAX_INPUTS; k++) {
      sk__rt_counted_free(rt, sl->kin[o * SK_OP_MAX_INPUTS + k]);
      sl->kin[o * SK_OP_MAX_INPUTS + k] = NULL;
    }
    for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++) {
      sk__rt_counted_free(rt, sl->kout[o * SK_OP_MAX_OUTPUTS + k]), sk__rt_counted_free(rt, sl->dkout[o * SK_OP_MAX_OUTPUTS + k]);
      sl->kout[o * SK_OP_MAX_OUTPUTS + k] = sl->dkout[o * SK_OP_MAX_OUTPUTS + k] = NULL;
    }
    sk__rt_counted_free(rt, sl->pre_rs[o]), sl->pre_rs[o] = NULL;
  }
  sl->live = false;
}

/* Points the runtime's tensors at micro-batch `micro`'s buffers: each activation at its
   owner's slot, each input at its feed, each operator here at its chunk's slot. */
static void sk__rt_pipe_bind(sk_runtime *rt, int micro) {
  const sk_graph *g = rt->g;
  rt->micro = micro;
  for (int t = 0; t < g->ntensors; t++) {
    if (rt->owner[t] >= 0) {
      sk__rt_slot *sl = sk__rt_slot_at(rt, rt->owner[t], micro);
      rt->values[t] = sl->values[t], rt->grads[t] = sl->grads[t], rt->written[t] = sl->written[t];
    } else if (g->tensors[t].role == SK_TENSOR_INPUT) {
      rt->values[t] = rt->feeds[(size_t)micro * (size_t)g->ntensors + (size_t)t];
    } else continue;
    rt->args[t].data = rt->values[t];
  }
  for (int o = 0; o < g->nops; o++) {
    if (!sk_parallel_op_on_stage(rt->plan, o, rt->stage)) continue;
    sk__rt_slot *sl = sk__rt_slot_at(rt, rt->plan->vstage[o], micro);
    sk__rt_op *ro = &rt->ops[o];
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      ro->kin[k] = sl->kin[o * SK_OP_MAX_INPUTS + k];
      ro->karg[k].data = rt->plan->ops[o].moved[k] ? ro->kin[k] : rt->values[g->ops[o].inputs[k]];
    }
    for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++)
      ro->kout[k] = sl->kout[o * SK_OP_MAX_OUTPUTS + k], ro->dkout[k] = sl->dkout[o * SK_OP_MAX_OUTPUTS + k];
    ro->pre_rs = sl->pre_rs[o];
  }
}

/* Keeps what the runtime learned about the micro-batch's gradients in their slots. */
static void sk__rt_pipe_unbind(sk_runtime *rt, int micro) {
  for (int t = 0; t < rt->g->ntensors; t++)
    if (rt->owner[t] >= 0) sk__rt_slot_at(rt, rt->owner[t], micro)->written[t] = rt->written[t];
}


static sk__rt_send *sk__rt_send_at(sk_runtime *rt, int at) {
  for (int i = 0; i < rt->nsends; i++)
    if (rt->sends[i].at == at) return &rt->sends[i];
  return NULL;
}


/* A Send's staging copy: taken by the Alloc step just before it, given back after its WaitSend. */
static sk_result sk__rt_staging(sk_runtime *rt, int at, size_t bytes, sk_error *err) {
  if (rt->nsends == rt->sends_cap) {
    int cap = rt->sends_cap ? 2 * rt->sends_cap : 16;
    sk__rt_send *ns = (sk__rt_send *)sk__rt_table(rt, (size_t)cap, sizeof *ns);
    if (!ns) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory sending");
    if (rt->nsends) memcpy(ns, rt->sends, (size_t)rt->nsends * sizeof *ns);
    sk__rt_counted_free(rt, rt->sends);
    rt->sends = ns, rt->sends_cap = cap;
  }
  sk__rt_send *s = &rt->sends[rt->nsends];
  s->req = NULL, s->at = at;
  if (!(s->staging = sk__rt_alloc(rt, SK__RT_COMM, bytes))) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory for a send's copy");
  rt->nsends++;
  return SK_OK;
}


static void sk__rt_staging_free(sk_runtime *rt, int at) {
  sk__rt_send *s = sk__rt_send_at(rt, at);
  if (!s) return;
  sk__rt_counted_free(rt, s->staging);
  *s = rt->sends[--rt->nsends];
}

/* Waits for every send in flight and frees its copy: after a step or an evaluation, failed or
   not, so that no copy is freed while a peer may still read it. */
static sk_result sk__rt_pipe_sends(sk_runtime *rt, sk_error *err) {
  sk_result r = SK_OK;
  for (int i = 0; i < rt->nsends; i++) {
    sk_result q = rt->sends[i].req ? sk_wait(&rt->sends[i].req, NULL) : SK_OK;
    if (q && !r) r = sk__fail(err, q, "runtime: pipeline: a send to the next stage: %s", sk_comm_error_message(rt->world));
    sk__rt_counted_free(rt, rt->sends[i].staging);
  }
  rt->nsends = 0;
  return r;
}
static bool sk__rt_pipe_has_loss(const sk_runtime *rt, int v) {
  int p = rt->g->tensors[rt->g->loss].producer;
  return p >= 0 && rt->plan->vstage[p] == v;
}
/* A micro-batch's rows of each input, fed whole: micro-batch i reads rows [i*B/m, (i+1)*B/m). */
static sk_result sk__rt_pipe_feed(sk_runtime *rt, int input, sk_dtype dt, const void *global, sk_error *err) {
  if (!sk__rt_read_here(rt, input)) return SK_OK;
  size_t per = (size_t)sk_graph_numel(rt->g, input), count = (size_t)sk_parallel_slice_count(rt->plan, input);
  rt->kind = SK__RT_HOST;
  void *tmp = sk__rt_counted_alloc(rt, count * sk_dtype_size(dt) + 1, 64);
  sk_result r = tmp ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: feed '%s': out of memory", rt->g->tensors[input].name);
  for (int i = 0; i < rt->plan->micro && !r; i++) {
    const char *rows = (const char *)global + (size_t)i * per * sk_dtype_size(dt);
    void *to = rt->feeds[(size_t)i * (size_t)rt->g->ntensors + (size_t)input];
    r = sk__rt_take_slice(sk_dtype_size(dt), &rt->plan->tensors[input].layout, rt->rank, rows, tmp, err);
    if (!r) r = sk__rt_convert(dt, tmp, sk__rt_dtype(rt, input), to, count, err);
    if (!r && sk_exec_is_float(rt->g->tensors[input].dtype)) sk__rt_store(rt, to, (int64_t)count);
  }
  sk__rt_counted_free(rt, tmp);
  return r;
}

/* The runtime's tensors let go of the slots and feeds they were bound to (they own neither). */
static void sk__rt_pipe_unpoint(sk_runtime *rt) {
  for (int t = 0; rt->world && t < rt->g->ntensors; t++)
    if (rt->owner[t] >= 0 || rt->g->tensors[t].role == SK_TENSOR_INPUT) rt->values[t] = rt->grads[t] = rt->args[t].data = NULL;
  for (int o = 0; rt->world && o < rt->g->nops; o++) {
    for (int k = 0; k < SK_OP_MAX_INPUTS; k++) rt->ops[o].kin[k] = NULL, rt->ops[o].karg[k].data = NULL;
    for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++) rt->ops[o].kout[k] = rt->ops[o].dkout[k] = NULL;
    rt->ops[o].pre_rs = NULL;
  }
}

static void sk__rt_pipe_close(sk_runtime *rt) {
  if (!rt->world) return;
  if (rt->sends) (void)sk__rt_pipe_sends(rt, NULL);
  size_t n = (size_t)rt->plan->micro * (size_t)sk__rt_nvstages(rt);
  for (size_t i = 0; rt->slots && i < n; i++) {
    sk__rt_slot *sl = &rt->slots[i];
    if (sl->values && sl->grads && sl->written && sl->kin && sl->pre_rs && sl->kout && sl->dkout) sk__rt_slot_close(rt, sl);
    void *tables[] = {sl->values, sl->grads, sl->written, sl->kin, sl->pre_rs, sl->kout, sl->dkout};
    for (size_t j = 0; j < sizeof tables / sizeof tables[0]; j++) sk__rt_counted_free(rt, tables[j]);
  }
  for (size_t i = 0; rt->feeds && i < (size_t)rt->plan->micro * (size_t)rt->g->ntensors; i++) sk__rt_counted_free(rt, rt->feeds[i]);
  sk__rt_counted_free(rt, rt->slots), sk__rt_counted_free(rt, rt->feeds);
  sk__rt_counted_free(rt, rt->owner), sk__rt_counted_free(rt, rt->sends);
  sk_comm_destroy(rt->fwd_link, NULL), sk_comm_destroy(rt->bwd_link, NULL);
  sk_comm_destroy(rt->comm, NULL); /* this stage's, split from the world */
}

SK_EXTERN_C_END
#endif
