/* sk_exec.h -- one graph operator, forward and backward, on one device's buffers: the bridge
   between an sk_graph_op (sk_graph.h) and the kernels (sk_kernels.h).

   Do this in ONE .c file:   #define SK_IMPL  (or SK_EXEC_IMPL + the modules it includes)
                             #include "sk_exec.h"
   Needs only libc and libm. No allocation, no global state.

   WHAT IT IS
     The single-device trainer (sk_train.h) and the distributed runtime both run operators
     through these two calls, which run the kernels the operator's row of the table names
     (sk_optable.h; the adapters are in sk_optable_kernels.h): an operator's math is wired to
     its kernels in one place, and a kind without a row is refused, never sent elsewhere. The
     buffers are whatever the caller holds: the whole tensor on one device, or a device's slice
     (shapes are then the LOCAL shapes). What a kernel must know about the sharding to
     reproduce the unsharded result travels in sk_exec_facts (zero: unsharded); the collectives
     the operator needs (sk_ops.h's plan) are the caller's.

   BUFFERS
     Float tensors are SK_F32 or SK_F64 (every float argument of one call the same dtype);
     indices and labels SK_I32 or SK_I64; Dropout's mask (output 1) SK_U8. The forward writes
     every output's data. The backward reads the outputs' grad (NULL: no gradient flows from
     that output) and the forward's data, and OVERWRITES dx[k] for each input k whose dx[k] is
     not NULL (dx[k] has input k's shape and dtype); summing the gradients of a tensor read
     twice is the caller's. Inputs that take no gradient (indices, labels, a mask) are skipped.

   ERRORS: a kernel's error, prefixed with the operator's name and kind.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_EXEC_IMPL)
#define SK_EXEC_IMPL
#endif
#ifndef SK_EXEC_H
#define SK_EXEC_H

#include "sk_core.h"
#include "sk_graph.h"
#include "sk_kernels.h"
#include "sk_layout.h"

SK_EXTERN_C_BEGIN

typedef struct sk_exec_arg {
  sk_dtype dtype;
  int ndims;
  int64_t shape[SK_MAX_DIMS];
  void *data;
  void *grad; /* outputs: the incoming gradient (backward); unused for inputs */
} sk_exec_arg;

/* The sharding facts kernels need (zero-initialise: unsharded). */
typedef struct sk_exec_facts {
  int64_t global_count; /* the fused softmax loss: global rows; MAELoss: global elements;
                           ReduceMean: global count of the reduced elements (0: local) */
  int64_t offset;       /* OneHot: the first class this device holds; Gather: the first row */
  uint64_t seed;        /* Dropout: the mask's seed */
  /* Dropout: the global shape of output 0 and this device's slice of it (global_ndims 0: the
     local buffer is the whole tensor) */
  int global_ndims;
  int64_t global_shape[SK_MAX_DIMS];
  sk_slice slice;
  bool inference;       /* Dropout passes its input through (MindSpore's eval mode); mask all ones */
  /* Dense whose contraction dim is split, on a device that does not hold its first part: the
     forward AllReduce sums the parts, so only the first adds the bias (MindSpore's BiasAdd
     follows that AllReduce); the others leave it out of the forward */
  bool skip_bias;
} sk_exec_facts;

SK_API sk_result sk_exec_forward(const sk_kernel_ctx *ctx, const sk_graph_op *op, const sk_exec_facts *facts,
                                 const sk_exec_arg *in, sk_exec_arg *out, sk_error *err);
SK_API sk_result sk_exec_backward(const sk_kernel_ctx *ctx, const sk_graph_op *op, const sk_exec_facts *facts,
                                  const sk_exec_arg *in, const sk_exec_arg *out, void *const *dx, sk_error *err);
/* The Dropout seed of operator `op` at training step `step` under run seed `seed`: a pure
   function, so every device of a distributed run draws the same global mask. */
SK_API uint64_t sk_exec_dropout_seed(uint64_t seed, int op, int64_t step);
/* Whether input k of op can take a gradient (false for indices, labels of a loss, OneHot). */
SK_API bool sk_exec_differentiable(const sk_graph_op *op, int k);
/* needs[t] (g->ntensors entries): whether tensor t has a gradient in the backward. Every
   trainable parameter has one (zero where no gradient reaches it: the optimizer still updates
   it, as MindSpore gives such a parameter a zero gradient), a frozen one (requires_grad false)
   and a constant none; another tensor when a parameter's gradient
   flows through it (a float output of an operator with a differentiable input that has one) AND
   the loss's gradient reaches it (the loss itself; an input an operator reads differentiably
   when the output that input's gradient comes from has one: output 0, VirtualDataset's output
   k for its input k). An operator whose outputs have none -- a metric, an auxiliary head --
   runs no backward, and its parameters' gradients stay zero. */
SK_API void sk_exec_grad_flow(const sk_graph *g, bool *needs);
/* Operator op's FLOPs on the slices in / out (a MatMul's 2mnk, one per output element for the
   others; backward: twice the forward): what the runtime counts and the pipeline cut weighs. */
SK_API double sk_exec_flops(const sk_graph_op *op, const sk_exec_arg *in, const sk_exec_arg *out, bool backward);
/* Whether dt is a float dtype (f32, f64, f16, bf16). */
SK_API bool sk_exec_is_float(sk_dtype dt);
/* n values from dtype `from` into dtype `to`, as the trainers feed inputs: any float dtype into
   f32 or f64, integers between i32 and i64; false (nothing written) for another pair. */
SK_API bool sk_exec_convert(sk_dtype from, const void *src, sk_dtype to, void *dst, size_t n);
/* f16 / bf16 storage: rounds n f32 values to `store` and back (nothing for another dtype). */
SK_API void sk_exec_round(sk_dtype store, float *values, int64_t n);

SK_EXTERN_C_END
#define SK__EXEC_DECLARED
#include "sk_optable.h" /* the table's implementation waits for these declarations */
#endif /* SK_EXEC_H */

#if defined(SK_EXEC_IMPL) && !defined(SK_EXEC_IMPL_DONE)
#define SK_EXEC_IMPL_DONE
#include <stdio.h>
#include <string.h>

SK_API bool sk_exec_differentiable(const sk_graph_op *op, int k) {
  const sk_op_row *row = sk_op_row_of(op->desc.kind);
  return row && k >= 0 && k < 32 && (row->grad_inputs & (1u << k)) != 0;
}

SK_API double sk_exec_flops(const sk_graph_op *op, const sk_exec_arg *in, const sk_exec_arg *out, bool backward) {
  const sk_op_row *row = sk_op_row_of(op->desc.kind);
  double n = row ? row->flops(&op->desc, in, out) : 0;
  return backward ? 2 * n : n;
}

SK_API bool sk_exec_is_float(sk_dtype dt) { return dt == SK_F32 || dt == SK_F64 || dt == SK_F16 || dt == SK_BF16; }

/* The output whose gradient input k's comes from (sk_exec_backward reads no other): output 0,
   VirtualDataset's output k; -1: none. */
static int sk__exec_grad_source(const sk_graph_op *op, int k) {
  if (sk_op_row_of(op->desc.kind)->flags & SK_OPF_PASSTHROUGH) return k < op->noutputs ? k : -1;
  return op->noutputs > 0 ? 0 : -1;
}

/* Two passes over one array, no allocation: backward from the loss, needs[t] says a gradient
   reaches t; then forward from the parameters each output keeps it only where one flows. An
   input's value is final when its readers come to it (graph order is topological), and where a
   gradient reaches an output the inputs it passes to have one exactly when one flows there. */
SK_API void sk_exec_grad_flow(const sk_graph *g, bool *needs) {
  for (int t = 0; t < g->ntensors; t++) needs[t] = t == g->loss;
  for (int o = g->nops - 1; o >= 0; o--) {
    const sk_graph_op *op = &g->ops[o];
    for (int k = 0; k < op->ninputs; k++) {
      int s = sk__exec_grad_source(op, k);
      if (s >= 0 && needs[op->outputs[s]] && sk_exec_differentiable(op, k)) needs[op->inputs[k]] = true;
    }
  }
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].producer < 0) needs[t] = sk_graph_trainable(g, t);
  for (int o = 0; o < g->nops; o++) {
    const sk_graph_op *op = &g->ops[o];
    bool flows[SK_OP_MAX_OUTPUTS] = {false};
    for (int k = 0; k < op->ninputs; k++) {
      int s = sk__exec_grad_source(op, k);
      if (s >= 0 && needs[op->inputs[k]] && sk_exec_differentiable(op, k)) flows[s] = true;
    }
    for (int j = 0; j < op->noutputs; j++) {
      int t = op->outputs[j];
      needs[t] = needs[t] && flows[j] && sk_exec_is_float(g->tensors[t].dtype);
    }
  }
}

SK_API bool sk_exec_convert(sk_dtype from, const void *src, sk_dtype to, void *dst, size_t n) {
  if (sk_exec_is_float(from) && (to == SK_F32 || to == SK_F64)) {
    for (size_t i = 0; i < n; i++) {
      double v = from == SK_F64 ? ((const double *)src)[i]
                 : from == SK_F32 ? ((const float *)src)[i]
                 : from == SK_F16 ? sk_f16_to_f32(((const uint16_t *)src)[i])
                                  : sk_bf16_to_f32(((const uint16_t *)src)[i]);
      if (to == SK_F64) ((double *)dst)[i] = v;
      else ((float *)dst)[i] = (float)v;
    }
    return true;
  }
  if ((from != SK_I32 && from != SK_I64) || (to != SK_I32 && to != SK_I64)) return false;
  for (size_t i = 0; i < n; i++) {
    int64_t v = from == SK_I64 ? ((const int64_t *)src)[i] : ((const int32_t *)src)[i];
    if (to == SK_I64) ((int64_t *)dst)[i] = v;
    else ((int32_t *)dst)[i] = (int32_t)v;
  }
  return true;
}

SK_API void sk_exec_round(sk_dtype store, float *f, int64_t n) {
  if (store == SK_F16)
    for (int64_t i = 0; i < n; i++) f[i] = sk_f16_to_f32(sk_f32_to_f16(f[i]));
  else if (store == SK_BF16)
    for (int64_t i = 0; i < n; i++) f[i] = sk_bf16_to_f32(sk_f32_to_bf16(f[i]));
}

SK_API uint64_t sk_exec_dropout_seed(uint64_t seed, int op, int64_t step) {
  /* op * 2^40 (mod 2^64): the shift written as a product, which no checker reads as an overflow */
  uint64_t z = seed ^ ((uint64_t)(uint32_t)op * 0x10000000000ull) ^ (uint64_t)step * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; /* splitmix64 */
  return z ^ (z >> 31);
}

/* The checks every kernel relies on; an operator that reads no tensor runs none (its outputs are
   fed). */
static sk_result sk__exec_fwd(const sk_kernel_ctx *ctx, const sk_graph_op *op, const sk_exec_facts *f,
                              const sk_exec_arg *in, sk_exec_arg *out, sk_error *err) {
  const sk_op_row *row = sk_op_row_of(op->desc.kind);
  if (!row) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "kind %d is not an operator", (int)op->desc.kind);
  if (row->flags & SK_OPF_SOURCE) return SK_OK;
  if (op->ninputs == 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "it reads no tensor");
  for (int k = 0; k < op->ninputs; k++)
    if (!in[k].data) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input %d has no buffer", k);
  for (int k = 0; k < op->noutputs; k++)
    if (!out[k].data) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "output %d has no buffer", k);
  return row->fwd(ctx, op, f, in, out, err);
}

/* Prefixes a kernel's message with the operator it ran for (the end of a long message is cut). */
static sk_result sk__exec_named(const sk_graph_op *op, const char *dir, sk_result r, sk_error *err) {
  if (r && err) {
    char msg[SK_ERROR_MSG_MAX];
    memcpy(msg, err->msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
    int n = snprintf(err->msg, sizeof err->msg, "operator '%.63s' (%.40s) %.8s: ", op->name,
                     sk_op_kind_name(op->desc.kind), dir);
    size_t at = n > 0 ? (size_t)n : 0, len = strlen(msg), room = sizeof err->msg - 1 - at;
    memcpy(err->msg + at, msg, len < room ? len : room);
    err->msg[at + (len < room ? len : room)] = 0;
  }
  return r;
}

SK_API sk_result sk_exec_forward(const sk_kernel_ctx *ctx, const sk_graph_op *op, const sk_exec_facts *facts,
                                 const sk_exec_arg *in, sk_exec_arg *out, sk_error *err) {
  if (!op || (op->ninputs && !in) || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "exec: NULL argument");
  return sk__exec_named(op, "forward", sk__exec_fwd(ctx, op, facts, in, out, err), err);
}

SK_API sk_result sk_exec_backward(const sk_kernel_ctx *ctx, const sk_graph_op *op, const sk_exec_facts *facts,
                                  const sk_exec_arg *in, const sk_exec_arg *out, void *const *dx, sk_error *err) {
  if (!op || (op->ninputs && !in) || !out || !dx) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "exec: NULL argument");
  void *d[SK_OP_MAX_INPUTS];
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) d[k] = k < op->ninputs && sk_exec_differentiable(op, k) ? dx[k] : NULL;
  const sk_op_row *row = sk_op_row_of(op->desc.kind);
  if (!row) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "exec: kind %d is not an operator", (int)op->desc.kind);
  return sk__exec_named(op, "backward", row->bwd(ctx, op, facts, in, out, d, err), err);
}

#endif /* SK_EXEC_IMPL */
