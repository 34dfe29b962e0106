/* sk_rt_steps.h -- part of sk_runtime.h's implementation: the operator steps: Forward, Backward and their collectives (ForwardComm, UndoComm, BackwardComm, Mirror).
   Include sk_runtime.h, not this: its implementation includes the parts in order. Needs only libc.
   License: MIT. */
#ifndef SK_RT_STEPS_H
#define SK_RT_STEPS_H
#include "sk_runtime.h"
#endif

#if defined(SK_RUNTIME_IMPL) && defined(SK_RUNTIME_IMPL_BODY) && !defined(SK_RT_STEPS_DONE)
#define SK_RT_STEPS_DONE

SK_EXTERN_C_BEGIN

/* ---- the steps ---------------------------------------------------------------------------- */

static void sk__rt_scale(sk_dtype dt, void *buf, int64_t n, double s) {
  if (s == 1 || s == 0) return;
  if (dt == SK_F64)
    for (int64_t i = 0; i < n; i++) ((double *)buf)[i] *= s;
  else
    for (int64_t i = 0; i < n; i++) ((float *)buf)[i] = (float)(((float *)buf)[i] * s);
}

static void sk__rt_add(sk_dtype dt, void *acc, const void *x, int64_t n) {
  if (dt == SK_F64)
    for (int64_t i = 0; i < n; i++) ((double *)acc)[i] += ((const double *)x)[i];
  else
    for (int64_t i = 0; i < n; i++) ((float *)acc)[i] += ((const float *)x)[i];
}

/* Operator o's output views; with `grads`, each carries its gradient when one reached it. */
static void sk__rt_outputs(sk_runtime *rt, int o, sk_exec_arg *out, bool grads) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  for (int k = 0; k < op->noutputs; k++) {
    int t = op->outputs[k];
    out[k] = rt->args[t];
    out[k].grad = grads && rt->written[t] ? rt->grads[t] : NULL;
    if (!rt->plan->ops[o].out_moved[k]) continue;
    sk__rt_view(&out[k], &rt->plan->ops[o].plan.out[k], sk__rt_dtype(rt, t), ro->kout[k]);
    out[k].grad = grads ? ro->dkout[k] : NULL;
  }
  if (ro->pre_rs) { /* before the ReduceScatter, output 0 is whole along the scattered dim */
    out[0].data = ro->pre_rs, out[0].shape[0] *= ro->rs_group;
    if (out[0].grad) out[0].grad = ro->dy_full;
  }
}

static sk_result sk__rt_forward(sk_runtime *rt, int o, bool inference, sk_error *err) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  sk_exec_arg out[SK_OP_MAX_OUTPUTS];
  memset(out, 0, sizeof out);
  sk__rt_outputs(rt, o, out, false);
  sk_exec_facts f = ro->facts;
  f.seed = sk_exec_dropout_seed(rt->seed, o, rt->step), f.inference = inference;
  if (rt->world && f.global_ndims > 0) { /* micro-batch i is rows [i*b, (i+1)*b) of the batch's mask */
    int64_t b = f.global_shape[0];
    f.global_shape[0] *= rt->plan->micro, f.slice.start[0] += rt->micro * b, f.slice.stop[0] += rt->micro * b;
  }
  double t0 = sk__rt_now_s();
  sk_result r = sk_exec_forward(rt->desc.kernels, op, &f, ro->karg, out, err);
  if (!r) sk__rt_count_compute(rt, op, ro->karg, out, false, t0);
  sk_coll_kind fc = rt->plan->ops[o].plan.fwd.kind; /* output 0 summed by a collective: rounded after it */
  for (int k = fc == SK_COLL_ALLREDUCE || fc == SK_COLL_REDUCE_SCATTER ? 1 : 0; k < op->noutputs && !r; k++) {
    int64_t n = 0;
    void *buf = sk__rt_kout(rt, o, k, &n);
    if (sk_exec_is_float(rt->g->tensors[op->outputs[k]].dtype)) sk__rt_store(rt, buf, n);
  }
  return r;
}

static sk_result sk__rt_comm_failed(sk_runtime *rt, sk_comm *c, sk_result r, sk_error *err) {
  return sk__fail(err, r, "%s", sk_comm_error_message(c ? c : rt->comm));
}

/* A 16-bit wire: n compute (f32) values into it, and back. */
static void sk__rt_to_wire(sk_dtype wire, const void *src, void *dst, int64_t n) {
  const float *f = (const float *)src;
  uint16_t *h = (uint16_t *)dst;
  if (wire == SK_F16)
    for (int64_t i = 0; i < n; i++) h[i] = sk_f32_to_f16(f[i]);
  else
    for (int64_t i = 0; i < n; i++) h[i] = sk_f32_to_bf16(f[i]);
}

static void sk__rt_from_wire(sk_dtype wire, const void *src, void *dst, int64_t n) {
  const uint16_t *h = (const uint16_t *)src;
  float *f = (float *)dst;
  if (wire == SK_F16)
    for (int64_t i = 0; i < n; i++) f[i] = sk_f16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < n; i++) f[i] = sk_bf16_to_f32(h[i]);
}

/* A reducing collective on compute-dtype buffers, carried in `wire`: directly, or through 16-bit
   copies in the wire buffer (a ReduceScatter's input, then its output beside it). */
static sk_result sk__rt_reduce(sk_runtime *rt, sk_comm *c, sk_coll_kind kind, const void *send, void *recv,
                               int64_t n_send, int64_t n_recv, sk_dtype wire, sk_redop op) {
  bool rs = kind == SK_COLL_REDUCE_SCATTER;
  if (wire == rt->cdt)
    return rs ? sk_reduce_scatter(c, send, recv, (size_t)n_recv, wire, op, NULL) : sk_allreduce(c, send, recv, (size_t)n_recv, wire, op, NULL);
  uint16_t *w = (uint16_t *)rt->wire_buf, *out = rs ? w + n_send : w;
  sk__rt_to_wire(wire, send, w, n_send);
  sk_result r = rs ? sk_reduce_scatter(c, w, out, (size_t)n_recv, wire, op, NULL) : sk_allreduce(c, w, w, (size_t)n_recv, wire, op, NULL);
  if (!r) sk__rt_from_wire(wire, out, recv, n_recv);
  return r;
}

/* The wire buffer is the program's (its create section sized it for every step of the stage):
   a step needing more is a compiler fault, refused before any byte is written. */
static sk_result sk__rt_wire_room(const sk_runtime *rt, const sk_parallel_step *s, int64_t need, sk_error *err) {
  if (need <= rt->wire_count) return SK_OK;
  return sk__fail(err, SK_ERR_INTERNAL, "runtime: %s of '%s' needs %lld wire elements, the program's wire buffer has %lld",
                  sk_parallel_step_name(s->kind), rt->g->ops[s->op].name, (long long)need, (long long)rt->wire_count);
}

static sk_result sk__rt_forward_comm(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  int t = rt->g->ops[s->op].outputs[0];
  sk__rt_op *ro = &rt->ops[s->op];
  int64_t n = 0;
  void *y = sk__rt_kout(rt, s->op, 0, &n);
  sk_dtype dt = sk__rt_dtype(rt, t);
  bool rs = s->comm.kind == SK_COLL_REDUCE_SCATTER;
  sk_dtype wire = sk_exec_is_float(rt->g->tensors[t].dtype) ? rt->wire : dt;
  sk_result r = wire == rt->cdt ? SK_OK : sk__rt_wire_room(rt, s, rs ? ro->pre_rs_count + n : n, err);
  if (r) return r;
  r = sk__rt_reduce(rt, ro->fwd, s->comm.kind, rs ? ro->pre_rs : y, y, rs ? ro->pre_rs_count : n, n, wire,
                              s->comm.op);
  if (r) return sk__rt_comm_failed(rt, ro->fwd, r, err);
  sk__rt_scale(dt, y, n, s->comm.scale);
  sk__rt_store(rt, y, n);
  sk__rt_count_comm(rt, s->comm.kind, ro->fwd, (uint64_t)(rs ? ro->pre_rs_count : n) * sk_dtype_size(wire));
  return SK_OK;
}

/* The backward of the forward collective on output 0's gradient. */
static sk_result sk__rt_undo_comm(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  int t = rt->g->ops[s->op].outputs[0];
  sk__rt_op *ro = &rt->ops[s->op];
  bool moved = rt->plan->ops[s->op].out_moved[0]; /* its gradient came back into dkout */
  if (!moved && !rt->written[t]) return SK_OK;
  int64_t n = sk__rt_count(&rt->plan->ops[s->op].plan.out[0]);
  void *dy = moved ? ro->dkout[0] : rt->grads[t];
  if (!dy) return SK_OK; /* a moved output 0 no gradient flows to */
  sk_dtype dt = sk__rt_dtype(rt, t);
  if (s->comm.kind != SK_COLL_REDUCE_SCATTER) return sk__rt_scale(dt, dy, n, s->comm.scale), SK_OK;
  sk_result r = sk_allgather(ro->fwd, dy, ro->dy_full, (size_t)n, dt, NULL);
  if (r) return sk__rt_comm_failed(rt, ro->fwd, r, err);
  sk__rt_count_comm(rt, SK_COLL_ALLGATHER, ro->fwd, (uint64_t)ro->pre_rs_count * sk_dtype_size(dt));
  sk__rt_scale(dt, ro->dy_full, ro->pre_rs_count, s->comm.scale);
  return SK_OK;
}

/* Where input k's gradient goes: the moved input's buffer, the tensor's gradient when nothing
   wrote it yet this step, else a scratch summed in when the input's steps are done. */
static void *sk__rt_dx_target(sk_runtime *rt, int o, int k) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  int t = op->inputs[k];
  ro->add[k] = false;
  if (!rt->plan->tensors[t].needs_grad || !sk_exec_differentiable(op, k)) return NULL;
  bool param = (rt->plan->ops[o].desc.params >> k) & 1u;
  if ((rt->grads_only == 1 && param) || (rt->grads_only == 2 && !param)) return NULL; /* the other half's */
  if (rt->plan->ops[o].moved[k]) return ro->dkin[k];
  if (!rt->written[t]) return rt->written[t] = true, rt->grads[t];
  ro->add[k] = true;
  return rt->scratch[k];
}

static sk_result sk__rt_backward(sk_runtime *rt, int o, sk_error *err) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  sk_exec_arg out[SK_OP_MAX_OUTPUTS];
  memset(out, 0, sizeof out);
  sk__rt_outputs(rt, o, out, true);
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) ro->dx[k] = k < op->ninputs ? sk__rt_dx_target(rt, o, k) : NULL;
  double t0 = sk__rt_now_s();
  sk_result r = sk_exec_backward(rt->desc.kernels, op, &ro->facts, ro->karg, out, ro->dx, err);
  if (!r) sk__rt_count_compute(rt, op, ro->karg, out, true, t0);
  const sk_parallel_op *po = &rt->plan->ops[o];
  for (int k = 0; k < op->ninputs && !r; k++) /* a sharded parameter has no Mirror step: its scaling here */
    if (ro->dx[k] && rt->shards[op->inputs[k]].data) {
      double cs = po->plan.grad[k].scale == 0 ? 1 : po->plan.grad[k].scale;
      sk__rt_scale(rt->cdt, ro->dx[k], sk__rt_count(&po->kernel_in[k]), po->mirror_scale[k] * cs / po->replication[k]);
    }
  return r;
}

static int64_t sk__rt_dx_count(const sk_runtime *rt, int o, int k) {
  return sk__rt_count(&rt->plan->ops[o].kernel_in[k]);
}

/* The gradients of the inputs input k's step reduces (k alone, or with
   enable_communication_fusion every input of the operator on the same group), in one
   AllReduce: in place, or packed one after the other into the wire buffer. */
static sk_result sk__rt_backward_comm(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  const sk_parallel_op *po = &rt->plan->ops[s->op];
  int k = s->slot;
  if (ro->bwd_lead[k] != k) return SK_OK; /* carried by its leading input's AllReduce */
  unsigned m = ro->bwd_members[k];
  sk_comm *c = ro->bwd[k];
  size_t es = sk_dtype_size(rt->wire);
  int64_t total = 0;
  sk_result r;
  if (m == 1u << k && rt->wire == rt->cdt) {
    total = sk__rt_dx_count(rt, s->op, k);
    r = sk_allreduce(c, ro->dx[k], ro->dx[k], (size_t)total, rt->cdt, s->comm.op, NULL);
  } else {
    char *w = (char *)rt->wire_buf;
    int64_t need = 0;
    for (int j = 0; j < SK_OP_MAX_INPUTS; j++) need += (m >> j) & 1u ? sk__rt_dx_count(rt, s->op, j) : 0;
    if ((r = sk__rt_wire_room(rt, s, need, err))) return r;
    for (int j = 0; j < SK_OP_MAX_INPUTS; j++) {
      if (!((m >> j) & 1u)) continue;
      int64_t n = sk__rt_dx_count(rt, s->op, j);
      if (rt->wire == rt->cdt) memcpy(w + (size_t)total * es, ro->dx[j], (size_t)n * es);
      else sk__rt_to_wire(rt->wire, ro->dx[j], w + (size_t)total * es, n);
      total += n;
    }
    r = sk_allreduce(c, w, w, (size_t)total, rt->wire, s->comm.op, NULL);
    int64_t at = 0;
    for (int j = 0; j < SK_OP_MAX_INPUTS && !r; j++) {
      if (!((m >> j) & 1u)) continue;
      int64_t n = sk__rt_dx_count(rt, s->op, j);
      if (rt->wire == rt->cdt) memcpy(ro->dx[j], w + (size_t)at * es, (size_t)n * es);
      else sk__rt_from_wire(rt->wire, w + (size_t)at * es, ro->dx[j], n);
      at += n;
    }
  }
  if (r) return sk__rt_comm_failed(rt, c, r, err);
  for (int j = 0; j < SK_OP_MAX_INPUTS; j++)
    if ((m >> j) & 1u) sk__rt_scale(rt->cdt, ro->dx[j], sk__rt_dx_count(rt, s->op, j), po->plan.bwd_in[j].scale);
  sk__rt_count_comm(rt, SK_COLL_ALLREDUCE, c, (uint64_t)total * es);
  return SK_OK;
}

/* A Mirror: the gradient is divided by its replication (replicas that hold the same full
   gradient) and multiplied by the plan's factor (gradients_mean) BEFORE the sum, one scaling
   for both paths. A fused Mirror is marked ready now (overlap) or at the update; a 16-bit one
   reduces its shadow. */
static sk_result sk__rt_mirror(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  const sk_parallel_op *po = &rt->plan->ops[s->op];
  int k = s->slot;
  int64_t n = sk__rt_dx_count(rt, s->op, k);
  double comm_scale = s->comm.scale == 0 ? 1 : s->comm.scale;
  sk__rt_scale(rt->cdt, ro->dx[k], n, po->mirror_scale[k] * comm_scale / po->replication[k]);
  if (ro->fusion_handle[k] >= 0) {
    if (ro->shadow[k]) sk__rt_to_wire(rt->mirror_wire, ro->dx[k], ro->shadow[k], n);
    if (!rt->overlap) return SK_OK;
    sk_result r = sk_fusion_ready(rt->fusion, ro->fusion_handle[k], NULL);
    return r ? sk__fail(err, r, "%s", sk_fusion_error_message(rt->fusion)) : SK_OK;
  }
  sk_result r = rt->mirror_wire == rt->cdt ? SK_OK : sk__rt_wire_room(rt, s, n, err);
  if (r) return r;
  sk__rt_count_comm(rt, SK_COLL_ALLREDUCE, ro->mirror[k], (uint64_t)n * sk_dtype_size(rt->mirror_wire));
  r = sk__rt_reduce(rt, ro->mirror[k], SK_COLL_ALLREDUCE, ro->dx[k], ro->dx[k], n, n, rt->mirror_wire, s->comm.op);
  return r ? sk__rt_comm_failed(rt, ro->mirror[k], r, err) : SK_OK;
}

/* Each bucket of a scheduler counted as the one call it is, by its buffer as nccl-tests sizes
   it (an AllGather's output, a ReduceScatter's input). */
static void sk__rt_count_buckets(sk_runtime *rt, sk_fusion *f) {
  int nb = sk_fusion_bucket_count(f);
  for (int b = 0; b < nb && rt->counting; b++) {
    sk_fusion_bucket_info bi;
    memset(&bi, 0, sizeof bi);
    if (sk_fusion_get_bucket(f, b, &bi, NULL)) continue;
    uint64_t n = (uint64_t)bi.count * (bi.kind == SK_COLL_ALLREDUCE ? 1u : (uint64_t)sk_comm_size(bi.comm));
    sk__rt_count_comm(rt, bi.kind, bi.comm, n * sk_dtype_size(bi.dtype));
  }
}

SK_EXTERN_C_END
#endif
