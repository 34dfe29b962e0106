/* sk_rt_run.h -- part of sk_runtime.h's implementation: one plan step run (the moves back and out, the gradients' last steps), and the end of a training step: local norms, the Mirrors and ReduceScatters done, the update.
   Include sk_runtime.h, not this: its implementation includes the parts in order. Needs only libc.
   License: MIT. */
#ifndef SK_RT_RUN_H
#define SK_RT_RUN_H
#include "sk_runtime.h"
#endif

#if defined(SK_RUNTIME_IMPL) && defined(SK_RUNTIME_IMPL_BODY) && !defined(SK_RT_RUN_DONE)
#define SK_RT_RUN_DONE

SK_EXTERN_C_BEGIN

/* The other readers of input k's moved copy whose gradients its MoveBack carries
   (sk_parallel_op.back_op): each wrote its own in the moved layout, summed into k's here. */
static void sk__rt_sum_readers(sk_runtime *rt, int o, int k) {
  const sk_parallel_plan *p = rt->plan;
  int64_t n = sk__rt_dx_count(rt, o, k);
  for (int o2 = o; o2 < rt->g->nops; o2++)
    for (int k2 = 0; k2 < rt->g->ops[o2].ninputs; k2++)
      if (p->ops[o2].back_op[k2] == o && p->ops[o2].back_slot[k2] == k && (o2 != o || k2 != k))
        sk__rt_add(rt->cdt, rt->ops[o].dkin[k], rt->ops[o2].dkin[k2], n);
}

static sk_result sk__rt_move_back(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  int k = s->slot, t = rt->g->ops[s->op].inputs[k];
  sk__rt_sum_readers(rt, s->op, k);
  void *target = rt->written[t] ? rt->scratch[k] : rt->grads[t];
  ro->add[k] = rt->written[t], rt->written[t] = true;
  sk_result r = sk_redist_execute(ro->move_back[k], ro->dkin[k], (size_t)sk__rt_dx_count(rt, s->op, k), target,
                                  (size_t)sk_parallel_slice_count(rt->plan, t), rt->cdt, NULL);
  if (r) return sk__fail(err, r, "moving the gradient back: %s", sk_comm_error_message(rt->comm));
  sk__rt_count_comm(rt, SK_COLL_NONE, NULL, ro->move_back_bytes[k]);
  ro->dx[k] = target;
  return SK_OK;
}

/* OUT_MOVE: output k from the rule's layout into its tensor; OUT_MOVE_BACK: the tensor's
   gradient into the rule's layout (zeros when none reached it: the backward then adds nothing). */
static sk_result sk__rt_out_move(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  int k = s->slot, t = rt->g->ops[s->op].outputs[k];
  size_t nk = (size_t)sk__rt_count(&rt->plan->ops[s->op].plan.out[k]), nt = (size_t)sk_parallel_slice_count(rt->plan, t);
  bool back = s->kind == SK_PSTEP_OUT_MOVE_BACK;
  if (back && !rt->written[t]) return memset(ro->dkout[k], 0, nk * sk_dtype_size(rt->cdt)), SK_OK;
  sk_result r = back ? sk_redist_execute(ro->out_move_back[k], rt->grads[t], nt, ro->dkout[k], nk, rt->cdt, NULL)
                     : sk_redist_execute(ro->out_move[k], ro->kout[k], nk, rt->values[t], nt, sk__rt_dtype(rt, t), NULL);
  if (r) return sk__fail(err, r, "%s", sk_comm_error_message(rt->comm));
  sk__rt_count_comm(rt, SK_COLL_NONE, NULL, back ? ro->out_move_back_bytes[k] : ro->out_move_bytes[k]);
  return SK_OK;
}

/* After input k's last backward step: a gradient in scratch is summed into the tensor's. */
static void sk__rt_finish_inputs(sk_runtime *rt, int o, int step) {
  sk__rt_op *ro = &rt->ops[o];
  for (int k = 0; k < rt->g->ops[o].ninputs; k++) {
    if (ro->last_step[k] != step || !ro->add[k] || !ro->dx[k]) continue;
    int t = rt->g->ops[o].inputs[k];
    sk__rt_add(rt->cdt, rt->grads[t], ro->dx[k], sk_parallel_slice_count(rt->plan, t));
    ro->add[k] = false;
  }
}

/* Whether this device keeps parameter t: always without a pipeline; under one, when its stage does. */
static bool sk__rt_holds(const sk_runtime *rt, int t) { return rt->values[t] || rt->shards[t].data; }

/* The norms of every parameter's gradient slice this device holds (with device_local_norm, then
   of all of them); a parameter another pipeline stage holds counts -1, which no norm is. */
static void sk__rt_norms_here(sk_runtime *rt) {
  const sk_graph *g = rt->g;
  double all = 0;
  int i = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (!sk_graph_trainable(g, t)) continue;
    const sk__rt_shard *sh = &rt->shards[t]; /* a sharded parameter's local slice is its shard */
    int64_t n = sh->data ? sh->count : sk_parallel_slice_count(rt->plan, t);
    const void *gr = sh->data ? sh->grad : rt->grads[t];
    double sq = 0;
    for (int64_t j = 0; j < n && gr; j++) {
      double v = rt->cdt == SK_F64 ? ((const double *)gr)[j] : ((const float *)gr)[j];
      sq += v * v;
    }
    all += sq, rt->norms[i++] = sk__rt_holds(rt, t) ? sqrt(sq) : -1;
  }
  if (i < rt->nnorms) rt->norms[i] = sqrt(all); /* device_local_norm */
}

/* The local norms, gathered on the world's device 0, which writes one line per device and
   parameter that device holds (under a pipeline, its stage's), then the device's line. The
   gather is not a training collective: the statistics leave it out. */
static sk_result sk__rt_local_norms(sk_runtime *rt, sk_error *err) {
  const sk_graph *g = rt->g;
  sk_comm *all = sk__rt_everyone(rt);
  sk__rt_norms_here(rt);
  sk_result r = sk_gather(all, rt->norms, rt->all_norms, (size_t)rt->nnorms, SK_F64, 0, NULL);
  if (r) return sk__fail(err, r, "local norms: %s", sk_comm_error_message(all));
  if (sk_comm_rank(all) != 0) return SK_OK;
  const sk_autoparallel *pd = &rt->plan->desc;
  FILE *to[2] = {pd->print_local_norm ? stdout : NULL, rt->norm_file};
  for (int f = 0; f < 2; f++) {
    if (!to[f]) continue;
    for (int d = 0; d < sk_comm_size(all); d++) {
      const double *v = rt->all_norms + (size_t)d * (size_t)rt->nnorms;
      int i = 0;
      for (int t = 0; t < g->ntensors; t++) {
        if (!sk_graph_trainable(g, t)) continue;
        double norm = v[i++];
        if (norm >= 0) fprintf(to[f], "%lld %d %s %.9g\n", (long long)rt->step + 1, d, g->tensors[t].name, norm);
      }
      if (i < rt->nnorms) fprintf(to[f], "%lld %d device %.9g\n", (long long)rt->step + 1, d, v[i]);
    }
    if (fflush(to[f]))
      return sk__fail(err, SK_ERR_SYSTEM, "local norms: writing %s: %s", f ? pd->dump_local_norm : "stdout", strerror(errno));
  }
  return SK_OK;
}

/* The scheduler executing the program's buckets of collective `coll`. */
static sk_fusion *sk__rt_scheduler(const sk_runtime *rt, sk_coll_kind coll) {
  return coll == SK_COLL_ALLREDUCE ? rt->fusion : coll == SK_COLL_REDUCE_SCATTER ? rt->rs_fusion : rt->ag;
}

/* A Fused step: the bucket launches. Its members marked themselves ready at their steps under
   overlap (the AllReduces and ReduceScatters of grad_computation_allreduce_overlap); else they
   are marked here, which launches it (buckets launch in order: the program's Fused steps are). */
static sk_result sk__rt_prog_fused(sk_runtime *rt, const sk_program_step *ps, sk_error *err) {
  sk_fusion *f = sk__rt_scheduler(rt, ps->coll);
  const char *members = ps->coll == SK_COLL_ALLGATHER ? "ParamGather" : ps->coll == SK_COLL_ALLREDUCE ? "Mirror" : "GradReduceScatter";
  if (ps->coll != SK_COLL_ALLGATHER && rt->overlap) return SK_OK;
  if (!f) return sk__fail(err, SK_ERR_INVALID_USAGE, "runtime: bucket %d launched before any member", ps->bucket);
  rt->kind = SK__RT_HOST;
  sk_result r = sk_fusion_plan(f, NULL); /* its buffers: the first failure's message, not a later call's */
  for (int b = 0, nb = r ? 0 : sk_fusion_bucket_count(f); b < nb && !r; b++) {
    sk_fusion_bucket_info bi;
    memset(&bi, 0, sizeof bi);
    if ((r = sk_fusion_get_bucket(f, b, &bi, NULL)) || bi.fusion_id != ps->bucket + 1) continue;
    for (int i = 0; i < bi.ntensors && !r; i++) r = sk_fusion_ready(f, bi.tensors[i], NULL);
  }
  return r ? sk__fail(err, r, "Fused bucket %d of %s steps: %s", ps->bucket, members, sk_fusion_error_message(f)) : SK_OK;
}

/* This step's gathers complete: counted per bucket, the scheduler gone (its slices stay). */
static sk_result sk__rt_gathers_done(sk_runtime *rt, sk_error *err) {
  sk_result r = rt->ag ? sk_fusion_wait(rt->ag, NULL) : SK_OK;
  if (r) return sk__fail(err, r, "%s", sk_fusion_error_message(rt->ag));
  if (rt->ag) sk__rt_count_buckets(rt, rt->ag);
  sk_fusion_destroy(rt->ag);
  rt->ag = NULL;
  return SK_OK;
}

/* Completes the fused Mirrors, 16-bit shadows back into the gradients; each bucket counted as
   the one AllReduce it is. */
static sk_result sk__rt_mirrors_done(sk_runtime *rt, sk_error *err) {
  sk_result r = sk_fusion_wait(rt->fusion, NULL);
  if (r) return sk__fail(err, r, "%s", sk_fusion_error_message(rt->fusion));
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++)
      if (rt->ops[o].shadow[k]) {
        int t = rt->g->ops[o].inputs[k];
        sk__rt_from_wire(rt->mirror_wire, rt->ops[o].shadow[k], rt->grads[t], sk_parallel_slice_count(rt->plan, t));
      }
  sk__rt_count_buckets(rt, rt->fusion);
  return SK_OK;
}

/* Completes the sharded parameters' ReduceScatters, 16-bit shard shadows back into the shards;
   each bucket counted in its wire dtype. */
static sk_result sk__rt_reduce_scatters_done(sk_runtime *rt, sk_error *err) {
  if (!rt->nrs) return SK_OK;
  sk_result r = sk_fusion_wait(rt->rs_fusion, NULL);
  if (r) return sk__fail(err, r, "%s", sk_fusion_error_message(rt->rs_fusion));
  for (int t = 0; t < rt->g->ntensors; t++) {
    const sk__rt_shard *sh = &rt->shards[t];
    if (sh->wire_shard) sk__rt_from_wire(rt->mirror_wire, sh->wire_shard, sh->grad, sh->count);
  }
  sk__rt_count_buckets(rt, rt->rs_fusion);
  return SK_OK;
}

/* Gradient accumulation after a micro-step's reductions: each parameter's gradient (a level2
   shard's, or the whole slice's; level1 / level3 shards accumulated before their ReduceScatter)
   is added to its sum, which on the last micro-step becomes the gradient the optimizer sees. */
static void sk__rt_accumulate(sk_runtime *rt, bool last) {
  for (int t = 0; t < rt->g->ntensors; t++) {
    const sk__rt_shard *sh = &rt->shards[t];
    if (!rt->acc[t] || (sh->data && rt->plan->desc.hsdp.level != SK_HSDP_LEVEL2)) continue;
    void *gr = sh->data ? sh->grad : rt->grads[t];
    int64_t n = sh->data ? sh->count : sk_parallel_slice_count(rt->plan, t);
    if (!last) {
      sk__rt_add(rt->cdt, rt->acc[t], gr, n);
      continue;
    }
    sk__rt_add(rt->cdt, gr, rt->acc[t], n);
    memset(rt->acc[t], 0, (size_t)n * sk_dtype_size(rt->cdt));
  }
}

static sk_result sk__rt_prog_wait_fused(sk_runtime *rt, const sk_program_step *ps, sk_error *err) {
  if (ps->coll == SK_COLL_ALLGATHER) return sk__rt_gathers_done(rt, err);
  return ps->coll == SK_COLL_ALLREDUCE ? sk__rt_mirrors_done(rt, err) : sk__rt_reduce_scatters_done(rt, err);
}

/* GradsReady: gradients no backward reached zeroed, and under grad_accumulation_step the
   micro-step's added to their sums; *more false when the step ends here (a micro-step but the
   last). The gathered slices were given back by the Free steps before it. */
static void sk__rt_grads_ready(sk_runtime *rt, bool *more) {
  for (int t = 0; t < rt->g->ntensors; t++)
    if (rt->g->tensors[t].role == SK_TENSOR_PARAM && !rt->written[t] && rt->grads[t])
      memset(rt->grads[t], 0, sk__rt_bytes(rt, t));
  if (rt->accum > 1) sk__rt_accumulate(rt, sk__rt_last_micro(rt));
  *more = sk__rt_last_micro(rt);
}

/* After the program: the local norms and the optimizer on every parameter (or its shard). */
static sk_result sk__rt_update(sk_runtime *rt, sk_error *err) {
  sk_result r = SK_OK;
  if (rt->nnorms) r = sk__rt_local_norms(rt, err);
  for (int t = 0; t < rt->g->ntensors && !r; t++) {
    if (rt->g->tensors[t].role != SK_TENSOR_PARAM) continue;
    const sk__rt_shard *sh = &rt->shards[t];
    int64_t n = sh->data ? sh->count : sk_parallel_slice_count(rt->plan, t);
    void *v = sh->data ? sh->data : rt->values[t], *gr = sh->data ? sh->grad : rt->grads[t];
    if (!gr) continue; /* a sharded parameter without a gradient: SGD would see none either */
    r = sk_optim_update(&rt->optim, rt->cdt, (rt->step + 1) / rt->accum, (size_t)n, v, gr, rt->state0[t], rt->state1[t], err);
    sk__rt_store(rt, v, n);
  }
  return r;
}

static sk_result sk__rt_run_step(sk_runtime *rt, int i, bool inference, sk_error *err) {
  const sk_parallel_step *s = &rt->plan->steps[i];
  if (s->kind == SK_PSTEP_UPDATE) return sk__rt_update(rt, err);
  if (s->op < 0 || s->op >= rt->g->nops) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "a step without its operator");
  sk__rt_op *ro = &rt->ops[s->op];
  int t = rt->g->ops[s->op].inputs[s->slot];
  sk_result r = SK_OK;
  switch (s->kind) {
    case SK_PSTEP_MOVE:
      r = sk_redist_execute(ro->move[s->slot], rt->values[t], (size_t)sk_parallel_slice_count(rt->plan, t),
                            ro->kin[s->slot], (size_t)sk__rt_dx_count(rt, s->op, s->slot), sk__rt_dtype(rt, t), NULL);
      if (r) r = sk__fail(err, r, "%s", sk_comm_error_message(rt->comm));
      else sk__rt_count_comm(rt, SK_COLL_NONE, NULL, ro->move_bytes[s->slot]);
      break;
    case SK_PSTEP_FORWARD: r = sk__rt_forward(rt, s->op, inference, err); break;
    case SK_PSTEP_FORWARD_COMM: r = sk__rt_forward_comm(rt, s, err); break;
    case SK_PSTEP_UNDO_COMM: r = sk__rt_undo_comm(rt, s, err); break;
    case SK_PSTEP_BACKWARD: r = sk__rt_backward(rt, s->op, err); break;
    case SK_PSTEP_BACKWARD_COMM: r = sk__rt_backward_comm(rt, s, err); break;
    case SK_PSTEP_MIRROR: r = sk__rt_mirror(rt, s, err); break;
    case SK_PSTEP_MOVE_BACK: r = sk__rt_move_back(rt, s, err); break;
    case SK_PSTEP_GRAD_REDUCE_SCATTER: r = sk__rt_grad_reduce_scatter(rt, t, err); break;
    case SK_PSTEP_OUT_MOVE:
    case SK_PSTEP_OUT_MOVE_BACK: r = sk__rt_out_move(rt, s, err); break;
    default: r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "unknown step kind %d", (int)s->kind); break;
  }
  if (!r) sk__rt_finish_inputs(rt, s->op, i);
  return r;
}

/* Names the step, operator and tensor in front of a failed step's message. */
static sk_result sk__rt_named(const sk_runtime *rt, int i, sk_result r, sk_error *err) {
  if (!r || !err) return r;
  const sk_parallel_step *s = &rt->plan->steps[i];
  char pre[SK_ERROR_MSG_MAX];
  if (s->op < 0) snprintf(pre, sizeof pre, "step %d (%s): ", i, sk_parallel_step_name(s->kind));
  else {
    const sk_graph_op *op = &rt->g->ops[s->op];
    bool on_output = s->kind == SK_PSTEP_FORWARD || s->kind == SK_PSTEP_FORWARD_COMM || s->kind == SK_PSTEP_UNDO_COMM ||
                     s->kind == SK_PSTEP_BACKWARD;
    bool out_slot = s->kind == SK_PSTEP_OUT_MOVE || s->kind == SK_PSTEP_OUT_MOVE_BACK;
    int t = out_slot ? op->outputs[s->slot] : on_output ? op->outputs[0] : op->inputs[s->slot];
    snprintf(pre, sizeof pre, "step %d (%s) operator '%.63s' tensor '%.63s': ", i, sk_parallel_step_name(s->kind),
             op->name, rt->g->tensors[t].name);
  }
  sk__rt_prefix(err, pre);
  return r;
}

/* The forward pass ends at the first backward step (a level3 release belongs to it). */
static bool sk__rt_is_forward(sk_parallel_step_kind k) {
  return k == SK_PSTEP_MOVE || k == SK_PSTEP_FORWARD || k == SK_PSTEP_FORWARD_COMM || k == SK_PSTEP_PARAM_GATHER ||
         k == SK_PSTEP_PARAM_RELEASE || k == SK_PSTEP_OUT_MOVE;
}

static int64_t sk__rt_argmax_hits(const sk_runtime *rt, const void *logits, const void *labels, int64_t rows, int64_t c);

/* The evaluated logits and labels gathered whole (collective over rt->comm): rows whose argmax
   is the label, and how many rows. */
static sk_result sk__rt_score(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err) {
  const sk_graph *g = rt->g;
  int64_t nl = sk_graph_numel(g, g->logits), ny = sk_graph_numel(g, g->labels);
  int64_t c = g->tensors[g->logits].shape[g->tensors[g->logits].ndims - 1];
  rt->kind = SK__RT_HOST;
  void *logits = sk__rt_counted_alloc(rt, (size_t)nl * sk_dtype_size(rt->cdt), 64);
  void *labels = sk__rt_counted_alloc(rt, (size_t)ny * sk_dtype_size(sk__rt_dtype(rt, g->labels)), 64);
  sk_result r = logits && labels ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: evaluate: out of memory");
  if (!r) r = sk_runtime_gather(rt, g->logits, logits, err);
  if (!r) r = sk_runtime_gather(rt, g->labels, labels, err);
  if (!r) *correct = sk__rt_argmax_hits(rt, logits, labels, ny, c), *rows = ny;
  sk__rt_counted_free(rt, logits), sk__rt_counted_free(rt, labels);
  return r;
}

SK_EXTERN_C_END
#endif
