/* sk_optable_kernels.h -- the operator table's kernel columns: each operator's forward and
   backward kernel over tensor views (sk_exec_arg: dtype, shape, data, incoming gradient), its
   FLOPs, and the facts its kernel needs on one device (the first class or row a device holds,
   a loss's global count, Dropout's global shape and slice, Dense's bias owner). The math itself
   is sk_kernels.h's; these functions only read an operator's attributes and views and call it.

   Part of sk_optable.h's implementation (it includes this file): include sk_optable.h.
   License: MIT. */
#include "sk_optable.h"

#if defined(SK_OPTABLE_IMPL) && defined(SK_OPTABLE_IMPL_DONE) && !defined(SK_OPTABLE_KERNELS_DONE)
#define SK_OPTABLE_KERNELS_DONE
#include <string.h>
#include "sk_exec.h"
#include "sk_kernels.h"

SK_EXTERN_C_BEGIN

typedef sk_exec_arg sk__opk_arg;

static int sk__opk_axis(const sk_graph_op *op, int dflt) { return op->desc.naxis ? op->desc.axis[0] : dflt; }

static double sk__opk_eps(const sk_graph_op *op, double dflt) { return op->epsilon > 0 ? op->epsilon : dflt; }

static double sk__opk_keep(const sk_graph_op *op) { return op->keep_prob > 0 ? op->keep_prob : 0.5; }

static int64_t sk__opk_numel(const sk__opk_arg *a) {
  int64_t n = 1;
  for (int d = 0; d < a->ndims; d++) n *= a->shape[d];
  return n;
}

/* Rows of a [..., C] tensor: every element but the last dim's. */
static int64_t sk__opk_rows(const sk__opk_arg *a) { return a->ndims ? sk__opk_numel(a) / a->shape[a->ndims - 1] : 1; }

/* The global count a loss divides by: the compiler's (a sharded loss), else the local one. */
static int64_t sk__opk_count(const sk_exec_facts *f, int64_t local) { return f && f->global_count ? f->global_count : local; }

static int64_t sk__opk_offset(const sk_exec_facts *f) { return f ? f->offset : 0; }

static void sk__opk_zero(const sk__opk_arg *a, void *dx) {
  if (dx) memset(dx, 0, (size_t)sk__opk_numel(a) * sk_dtype_size(a->dtype));
}

/* ---- FLOPs ------------------------------------------------------------------------------------ */

static double sk__opk_flops_per_output(const sk_op_desc *d, const sk__opk_arg *in, const sk__opk_arg *out) {
  (void)d, (void)in;
  double n = 1;
  for (int e = 0; e < out[0].ndims; e++) n *= (double)out[0].shape[e];
  return n;
}

/* 2mnk: two per output element and contracted element. */
static double sk__opk_flops_matmul(const sk_op_desc *d, const sk__opk_arg *in, const sk__opk_arg *out) {
  double n = sk__opk_flops_per_output(d, in, out);
  if (in[0].ndims >= 2) n *= 2.0 * (double)in[0].shape[d->transpose_a ? in[0].ndims - 2 : in[0].ndims - 1];
  return n;
}

/* ---- facts ------------------------------------------------------------------------------------ */

static sk_result sk__opk_facts_none(const sk_op_desc *d, const sk_op_plan *p, const sk_layout *kin, int rank,
                                    sk_exec_facts *f, sk_error *err) {
  (void)d, (void)p, (void)kin, (void)rank, (void)f, (void)err;
  return SK_OK;
}

static int64_t sk__opk_dims_numel(const sk_op_desc *d, int to) {
  int64_t n = 1;
  for (int e = 0; e < to && e < d->ndims[0]; e++) n *= d->shape[0][e];
  return n;
}

/* The fused loss divides by the global rows, MAELoss by the global elements. */
static sk_result sk__opk_facts_softmax_ce(const sk_op_desc *d, const sk_op_plan *p, const sk_layout *kin, int rank,
                                          sk_exec_facts *f, sk_error *err) {
  (void)p, (void)kin, (void)rank, (void)err;
  f->global_count = sk__opk_dims_numel(d, d->ndims[0] - 1);
  return SK_OK;
}

static sk_result sk__opk_facts_mae_loss(const sk_op_desc *d, const sk_op_plan *p, const sk_layout *kin, int rank,
                                        sk_exec_facts *f, sk_error *err) {
  (void)p, (void)kin, (void)rank, (void)err;
  f->global_count = sk__opk_dims_numel(d, d->ndims[0]);
  return SK_OK;
}

/* OneHot: the first class this device's slice of the output holds. */
static sk_result sk__opk_facts_one_hot(const sk_op_desc *d, const sk_op_plan *p, const sk_layout *kin, int rank,
                                       sk_exec_facts *f, sk_error *err) {
  (void)kin;
  const sk_layout *l = &p->out[0];
  int axis = d->naxis ? d->axis[0] : -1, cdim = axis == 0 ? 0 : l->ndims - 1;
  sk_slice s; /* zeroed: a scalar layout writes no dim, and the analyzer follows that path */
  memset(&s, 0, sizeof s);
  sk_result r = sk_layout_slice(l, rank, &s, err);
  if (!r) f->offset = s.start[cdim];
  return r;
}

/* Gather: the first row (along axis) of the table slice this device holds. */
static sk_result sk__opk_facts_gather(const sk_op_desc *d, const sk_op_plan *p, const sk_layout *kin, int rank,
                                      sk_exec_facts *f, sk_error *err) {
  (void)p;
  int axis = d->naxis ? d->axis[0] : 0;
  sk_slice s;
  memset(&s, 0, sizeof s);
  sk_result r = sk_layout_slice(&kin[0], rank, &s, err);
  if (!r) f->offset = s.start[axis < 0 ? axis + d->ndims[0] : axis];
  return r;
}

/* Dropout draws its mask from global indices: the output's global shape and this slice. */
static sk_result sk__opk_facts_dropout(const sk_op_desc *d, const sk_op_plan *p, const sk_layout *kin, int rank,
                                       sk_exec_facts *f, sk_error *err) {
  (void)d, (void)kin;
  const sk_layout *l = &p->out[0];
  f->global_ndims = l->ndims;
  memcpy(f->global_shape, l->shape, sizeof f->global_shape);
  return sk_layout_slice(l, rank, &f->slice, err);
}

/* A split contraction dim: its forward AllReduce sums the parts, so only the device holding the
   first part adds the bias. */
static sk_result sk__opk_facts_dense(const sk_op_desc *d, const sk_op_plan *p, const sk_layout *kin, int rank,
                                     sk_exec_facts *f, sk_error *err) {
  (void)p;
  if (d->ninputs <= 2) return SK_OK;
  sk_slice s;
  memset(&s, 0, sizeof s);
  sk_result r = sk_layout_slice(&kin[0], rank, &s, err);
  if (!r) f->skip_bias = s.start[d->ndims[0] - 1] != 0;
  return r;
}

/* ---- kernels: the MatMul family --------------------------------------------------------------- */

#define SK__OPK_FWD_ARGS                                                                                               \
  const sk_kernel_ctx *ctx, const sk_graph_op *op, const sk_exec_facts *f, const sk__opk_arg *in, sk__opk_arg *out,    \
      sk_error *err
#define SK__OPK_BWD_ARGS                                                                                               \
  const sk_kernel_ctx *ctx, const sk_graph_op *op, const sk_exec_facts *f, const sk__opk_arg *in,                      \
      const sk__opk_arg *out, void *const *dx, sk_error *err
#define SK__OPK_UNUSED (void)ctx, (void)op, (void)f

/* MatMul and BatchMatMul: one kernel, as they are one rule (batch dims broadcast; 2-D is the
   plain product). */
static sk_result sk__opk_fwd_batch_matmul(SK__OPK_FWD_ARGS) {
  (void)f;
  const sk__opk_arg *x = &in[0], *w = &in[1];
  return sk_kern_batch_matmul(ctx, x->dtype, op->desc.transpose_a, op->desc.transpose_b, x->ndims, x->shape, x->data,
                              w->ndims, w->shape, w->data, out[0].data, err);
}

static sk_result sk__opk_bwd_batch_matmul(SK__OPK_BWD_ARGS) {
  (void)f;
  const sk__opk_arg *x = &in[0], *w = &in[1];
  return sk_kern_batch_matmul_bwd(ctx, x->dtype, op->desc.transpose_a, op->desc.transpose_b, x->ndims, x->shape,
                                  x->data, w->ndims, w->shape, w->data, out[0].grad, dx[0], dx[1], err);
}

static sk_result sk__opk_fwd_dense(SK__OPK_FWD_ARGS) {
  const sk__opk_arg *x = &in[0], *w = &in[1];
  const void *bias = op->ninputs > 2 && !(f && f->skip_bias) ? in[2].data : NULL;
  return sk_kern_dense(ctx, x->dtype, x->ndims, x->shape, x->data, w->shape, w->data, bias, out[0].data, err);
}

/* skip_bias changes nothing here: every part's bias gradient is the whole one, which the
   Mirror's divisor (the parts along the contraction) accounts for. */
static sk_result sk__opk_bwd_dense(SK__OPK_BWD_ARGS) {
  (void)f;
  const sk__opk_arg *x = &in[0], *w = &in[1];
  return sk_kern_dense_bwd(ctx, x->dtype, x->ndims, x->shape, x->data, w->shape, w->data, out[0].grad, dx[0], dx[1],
                           op->ninputs > 2 ? dx[2] : NULL, err);
}

/* ---- kernels: one input, element-wise --------------------------------------------------------- */

/* ReLU, GeLU, Tanh: y = f(x), dx = f'(x) dy. */
typedef sk_result (*sk__opk_act_fn)(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err);
typedef sk_result (*sk__opk_act_bwd_fn)(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy,
                                        void *dx, sk_error *err);

static sk_result sk__opk_act(sk__opk_act_fn fn, const sk__opk_arg *in, sk__opk_arg *out, sk_error *err) {
  return fn(in[0].dtype, in[0].ndims, in[0].shape, in[0].data, out[0].data, err);
}

static sk_result sk__opk_act_bwd(sk__opk_act_bwd_fn fn, const sk__opk_arg *in, const sk__opk_arg *out,
                                 void *const *dx, sk_error *err) {
  return dx[0] ? fn(in[0].dtype, in[0].ndims, in[0].shape, in[0].data, out[0].grad, dx[0], err) : SK_OK;
}

static sk_result sk__opk_fwd_relu(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act(sk_kern_relu, in, out, err); }
static sk_result sk__opk_bwd_relu(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act_bwd(sk_kern_relu_bwd, in, out, dx, err); }
static sk_result sk__opk_fwd_gelu(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act(sk_kern_gelu, in, out, err); }
static sk_result sk__opk_bwd_gelu(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act_bwd(sk_kern_gelu_bwd, in, out, dx, err); }
static sk_result sk__opk_fwd_tanh(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act(sk_kern_tanh, in, out, err); }
static sk_result sk__opk_bwd_tanh(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act_bwd(sk_kern_tanh_bwd, in, out, dx, err); }
static sk_result sk__opk_fwd_sigmoid(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act(sk_kern_sigmoid, in, out, err); }
static sk_result sk__opk_bwd_sigmoid(SK__OPK_BWD_ARGS) {
  return SK__OPK_UNUSED, sk__opk_act_bwd(sk_kern_sigmoid_bwd, in, out, dx, err);
}
static sk_result sk__opk_fwd_silu(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act(sk_kern_silu, in, out, err); }
static sk_result sk__opk_bwd_silu(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_act_bwd(sk_kern_silu_bwd, in, out, dx, err); }

static sk_result sk__opk_fwd_cast(SK__OPK_FWD_ARGS) {
  SK__OPK_UNUSED;
  return sk_kern_cast(in[0].dtype, in[0].ndims, in[0].shape, in[0].data, out[0].dtype, out[0].data, err);
}

/* The gradient casts back. */
static sk_result sk__opk_bwd_cast(SK__OPK_BWD_ARGS) {
  SK__OPK_UNUSED;
  if (!dx[0]) return SK_OK;
  return sk_kern_cast(out[0].dtype, in[0].ndims, in[0].shape, out[0].grad, in[0].dtype, dx[0], err);
}

/* Reshape, Flatten, ExpandDims: the same elements in the same order. */
static sk_result sk__opk_fwd_copy(SK__OPK_FWD_ARGS) {
  SK__OPK_UNUSED;
  return sk_kern_copy(in[0].dtype, in[0].ndims, in[0].shape, in[0].data, out[0].data, err);
}

static sk_result sk__opk_bwd_copy(SK__OPK_BWD_ARGS) {
  SK__OPK_UNUSED;
  if (!dx[0]) return SK_OK;
  return sk_kern_copy(in[0].dtype, in[0].ndims, in[0].shape, out[0].grad, dx[0], err);
}

static sk_result sk__opk_fwd_transpose(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)f;
  return sk_kern_transpose(in[0].dtype, in[0].ndims, in[0].shape, op->desc.perm, in[0].data, out[0].data, err);
}

static sk_result sk__opk_bwd_transpose(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  if (!dx[0]) return SK_OK;
  return sk_kern_transpose_bwd(in[0].dtype, in[0].ndims, in[0].shape, op->desc.perm, out[0].grad, dx[0], err);
}

/* In inference (MindSpore's eval mode) Dropout passes its input through, the mask all ones. */
static sk_result sk__opk_fwd_dropout(SK__OPK_FWD_ARGS) {
  (void)ctx;
  const sk__opk_arg *x = &in[0];
  if (f && f->inference) {
    if (x->ndims < 0 || x->ndims > SK_MAX_DIMS || !out[1].data)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Dropout: bad shape or NULL mask");
    memset(out[1].data, 1, (size_t)sk__opk_numel(x));
    return sk_kern_copy(x->dtype, x->ndims, x->shape, x->data, out[0].data, err);
  }
  bool sliced = f && f->global_ndims;
  sk_result r = sk_kern_dropout_mask(f ? f->seed : 0, sk__opk_keep(op), sliced ? f->global_ndims : x->ndims,
                                     sliced ? f->global_shape : x->shape, sliced ? &f->slice : NULL,
                                     (uint8_t *)out[1].data, err);
  if (r) return r;
  return sk_kern_dropout(x->dtype, x->ndims, x->shape, sk__opk_keep(op), x->data, (const uint8_t *)out[1].data,
                         out[0].data, err);
}

static sk_result sk__opk_bwd_dropout(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  if (!dx[0]) return SK_OK;
  return sk_kern_dropout_bwd(in[0].dtype, in[0].ndims, in[0].shape, sk__opk_keep(op), out[0].grad,
                             (const uint8_t *)out[1].data, dx[0], err);
}

/* ---- kernels: along an axis ------------------------------------------------------------------- */

static sk_result sk__opk_fwd_softmax(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)f;
  return sk_kern_softmax(in[0].dtype, in[0].ndims, in[0].shape, sk__opk_axis(op, -1), in[0].data, out[0].data, err);
}

static sk_result sk__opk_bwd_softmax(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  if (!dx[0]) return SK_OK;
  return sk_kern_softmax_bwd(in[0].dtype, in[0].ndims, in[0].shape, sk__opk_axis(op, -1), out[0].data, out[0].grad,
                             dx[0], err);
}

static sk_result sk__opk_fwd_log_softmax(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)f;
  return sk_kern_log_softmax(in[0].dtype, in[0].ndims, in[0].shape, sk__opk_axis(op, -1), in[0].data, out[0].data,
                             err);
}

static sk_result sk__opk_bwd_log_softmax(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  if (!dx[0]) return SK_OK;
  return sk_kern_log_softmax_bwd(in[0].dtype, in[0].ndims, in[0].shape, sk__opk_axis(op, -1), out[0].data,
                                 out[0].grad, dx[0], err);
}

static sk_result sk__opk_fwd_l2_normalize(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)f;
  return sk_kern_l2_normalize(in[0].dtype, in[0].ndims, in[0].shape, sk__opk_axis(op, 0),
                              sk__opk_eps(op, SK_L2_NORMALIZE_EPSILON), in[0].data, out[0].data, err);
}

static sk_result sk__opk_bwd_l2_normalize(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  if (!dx[0]) return SK_OK;
  return sk_kern_l2_normalize_bwd(in[0].dtype, in[0].ndims, in[0].shape, sk__opk_axis(op, 0),
                                  sk__opk_eps(op, SK_L2_NORMALIZE_EPSILON), in[0].data, out[0].grad, dx[0], err);
}

/* x, gamma, beta; outputs y, mean, variance (the backward reads the last two). */
static sk_result sk__opk_fwd_layer_norm(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)f;
  const sk__opk_arg *x = &in[0];
  return sk_kern_layer_norm(x->dtype, x->ndims, x->shape, sk__opk_axis(op, 1), sk__opk_eps(op, SK_LAYER_NORM_EPSILON),
                            x->data, in[1].data, in[2].data, out[0].data, out[1].data, out[2].data, err);
}

static sk_result sk__opk_bwd_layer_norm(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  const sk__opk_arg *x = &in[0];
  return sk_kern_layer_norm_bwd(x->dtype, x->ndims, x->shape, sk__opk_axis(op, 1),
                                sk__opk_eps(op, SK_LAYER_NORM_EPSILON), x->data, out[0].grad, out[1].data,
                                out[2].data, in[1].data, dx[0], dx[1], dx[2], err);
}

/* x, gamma (the normalised dims: x's last rank(gamma)); outputs y, rstd (the backward reads it). */
static sk_result sk__opk_fwd_rms_norm(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)f;
  const sk__opk_arg *x = &in[0];
  return sk_kern_rms_norm(x->dtype, x->ndims, x->shape, x->ndims - in[1].ndims, sk__opk_eps(op, SK_RMS_NORM_EPSILON),
                          x->data, in[1].data, out[0].data, out[1].data, err);
}

static sk_result sk__opk_bwd_rms_norm(SK__OPK_BWD_ARGS) {
  SK__OPK_UNUSED;
  const sk__opk_arg *x = &in[0];
  return sk_kern_rms_norm_bwd(x->dtype, x->ndims, x->shape, x->ndims - in[1].ndims, x->data, out[0].grad, out[1].data,
                              in[1].data, dx[0], dx[1], err);
}

/* ---- kernels: two inputs ---------------------------------------------------------------------- */

static sk_result sk__opk_binary_fwd(sk_binop b, const sk__opk_arg *in, sk__opk_arg *out, sk_error *err) {
  const sk__opk_arg *x = &in[0], *y = &in[1];
  return sk_kern_binary(b, x->dtype, x->ndims, x->shape, x->data, y->ndims, y->shape, y->data, out[0].data, err);
}

static sk_result sk__opk_binary_bwd(sk_binop b, const sk__opk_arg *in, const sk__opk_arg *out, void *const *dx,
                                    sk_error *err) {
  const sk__opk_arg *x = &in[0], *y = &in[1];
  return sk_kern_binary_bwd(b, x->dtype, x->ndims, x->shape, x->data, y->ndims, y->shape, y->data, out[0].grad, dx[0],
                            dx[1], err);
}

static sk_result sk__opk_fwd_add(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_fwd(SK_BIN_ADD, in, out, err); }
static sk_result sk__opk_bwd_add(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_bwd(SK_BIN_ADD, in, out, dx, err); }
static sk_result sk__opk_fwd_sub(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_fwd(SK_BIN_SUB, in, out, err); }
static sk_result sk__opk_bwd_sub(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_bwd(SK_BIN_SUB, in, out, dx, err); }
static sk_result sk__opk_fwd_mul(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_fwd(SK_BIN_MUL, in, out, err); }
static sk_result sk__opk_bwd_mul(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_bwd(SK_BIN_MUL, in, out, dx, err); }
static sk_result sk__opk_fwd_div(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_fwd(SK_BIN_DIV, in, out, err); }
static sk_result sk__opk_bwd_div(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_bwd(SK_BIN_DIV, in, out, dx, err); }
static sk_result sk__opk_fwd_pow(SK__OPK_FWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_fwd(SK_BIN_POW, in, out, err); }
static sk_result sk__opk_bwd_pow(SK__OPK_BWD_ARGS) { return SK__OPK_UNUSED, sk__opk_binary_bwd(SK_BIN_POW, in, out, dx, err); }

static sk_result sk__opk_fwd_bias_add(SK__OPK_FWD_ARGS) {
  SK__OPK_UNUSED;
  const sk__opk_arg *x = &in[0];
  return sk_kern_bias_add(x->dtype, SK_NCHW, x->ndims, x->shape, x->data, in[1].data, out[0].data, err);
}

static sk_result sk__opk_bwd_bias_add(SK__OPK_BWD_ARGS) {
  SK__OPK_UNUSED;
  const sk__opk_arg *x = &in[0];
  return sk_kern_bias_add_bwd(x->dtype, SK_NCHW, x->ndims, x->shape, out[0].grad, dx[0], dx[1], err);
}

static sk_result sk__opk_fwd_prelu(SK__OPK_FWD_ARGS) {
  SK__OPK_UNUSED;
  const sk__opk_arg *x = &in[0];
  return sk_kern_prelu(x->dtype, x->ndims, x->shape, x->data, sk__opk_numel(&in[1]), in[1].data, out[0].data, err);
}

static sk_result sk__opk_bwd_prelu(SK__OPK_BWD_ARGS) {
  SK__OPK_UNUSED;
  const sk__opk_arg *x = &in[0];
  return sk_kern_prelu_bwd(x->dtype, x->ndims, x->shape, x->data, sk__opk_numel(&in[1]), in[1].data, out[0].grad,
                           dx[0], dx[1], err);
}

/* ---- kernels: losses -------------------------------------------------------------------------- */

/* The fused loss: dense labels [B, C], or class indices [B] (an integer dtype). */
static sk_result sk__opk_fwd_softmax_ce(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)op;
  const sk__opk_arg *x = &in[0], *y = &in[1];
  int64_t rows = sk__opk_count(f, sk__opk_rows(x));
  if (y->dtype == SK_I32 || y->dtype == SK_I64)
    return sk_kern_sparse_softmax_ce(x->dtype, x->ndims, x->shape, x->data, y->dtype, y->data, rows, out[0].data, err);
  return sk_kern_softmax_ce(x->dtype, x->ndims, x->shape, x->data, y->data, rows, out[0].data, err);
}

/* No gradient flows into a loss: its inputs' gradients are zero (the loss kernels would take a
   NULL incoming gradient as 1). */
static bool sk__opk_loss_unreached(const sk_graph_op *op, const sk__opk_arg *in, const sk__opk_arg *out,
                                   void *const *dx) {
  if (out[0].grad) return false;
  for (int k = 0; k < op->ninputs; k++) sk__opk_zero(&in[k], dx[k]);
  return true;
}

static sk_result sk__opk_bwd_softmax_ce(SK__OPK_BWD_ARGS) {
  (void)ctx;
  const sk__opk_arg *x = &in[0], *y = &in[1];
  if (sk__opk_loss_unreached(op, in, out, dx) || !dx[0]) return SK_OK;
  int64_t rows = sk__opk_count(f, sk__opk_rows(x));
  if (y->dtype == SK_I32 || y->dtype == SK_I64)
    return sk_kern_sparse_softmax_ce_bwd(x->dtype, x->ndims, x->shape, x->data, y->dtype, y->data, rows, out[0].grad,
                                         dx[0], err);
  return sk_kern_softmax_ce_bwd(x->dtype, x->ndims, x->shape, x->data, y->data, rows, out[0].grad, dx[0], err);
}

static sk_result sk__opk_fwd_softmax_ce_logits(SK__OPK_FWD_ARGS) {
  SK__OPK_UNUSED;
  const sk__opk_arg *x = &in[0];
  return sk_kern_softmax_ce_logits(x->dtype, x->ndims, x->shape, x->data, in[1].data, out[0].data, out[1].data, err);
}

static sk_result sk__opk_bwd_softmax_ce_logits(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  const sk__opk_arg *x = &in[0];
  if (sk__opk_loss_unreached(op, in, out, dx) || !dx[0]) return SK_OK;
  return sk_kern_softmax_ce_logits_bwd(x->dtype, x->ndims, x->shape, out[0].grad, out[1].data, dx[0], err);
}

/* The label broadcasts to the prediction (aligned from the right). */
static sk_result sk__opk_fwd_mae_loss(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)op;
  const sk__opk_arg *x = &in[0], *y = &in[1];
  return sk_kern_mae_loss(x->dtype, x->ndims, x->shape, x->data, y->ndims, y->shape, y->data,
                          sk__opk_count(f, sk__opk_numel(x)), out[0].data, err);
}

static sk_result sk__opk_bwd_mae_loss(SK__OPK_BWD_ARGS) {
  (void)ctx;
  const sk__opk_arg *x = &in[0], *y = &in[1];
  if (sk__opk_loss_unreached(op, in, out, dx)) return SK_OK;
  return sk_kern_mae_loss_bwd(x->dtype, x->ndims, x->shape, x->data, y->ndims, y->shape, y->data,
                              sk__opk_count(f, sk__opk_numel(x)), out[0].grad, dx[0], dx[1], err);
}

/* The sum of x: the devices' partial sums need no global count. */
static sk_result sk__opk_fwd_virtual_loss(SK__OPK_FWD_ARGS) {
  SK__OPK_UNUSED;
  return sk_kern_virtual_loss(in[0].dtype, in[0].ndims, in[0].shape, in[0].data, out[0].data, err);
}

static sk_result sk__opk_bwd_virtual_loss(SK__OPK_BWD_ARGS) {
  SK__OPK_UNUSED;
  if (sk__opk_loss_unreached(op, in, out, dx) || !dx[0]) return SK_OK;
  return sk_kern_virtual_loss_bwd(in[0].dtype, in[0].ndims, in[0].shape, out[0].grad, dx[0], err);
}

/* ---- kernels: reductions ---------------------------------------------------------------------- */

/* facts->global_count: ReduceMean's global count of reduced elements (0: the local one). */
static sk_result sk__opk_reduce_fwd(sk_redop rop, const sk_graph_op *op, const sk_exec_facts *f,
                                    const sk__opk_arg *in, sk__opk_arg *out, sk_error *err) {
  const sk__opk_arg *x = &in[0];
  return sk_kern_reduce(rop, x->dtype, x->ndims, x->shape, op->desc.naxis, op->desc.axis, f ? f->global_count : 0,
                        x->data, out[0].data, err);
}

static sk_result sk__opk_reduce_bwd(sk_redop rop, const sk_graph_op *op, const sk_exec_facts *f,
                                    const sk__opk_arg *in, const sk__opk_arg *out, void *const *dx, sk_error *err) {
  const sk__opk_arg *x = &in[0];
  if (!dx[0]) return SK_OK;
  return sk_kern_reduce_bwd(rop, x->dtype, x->ndims, x->shape, op->desc.naxis, op->desc.axis, f ? f->global_count : 0,
                            x->data, out[0].data, NULL, out[0].grad, dx[0], err);
}

static sk_result sk__opk_fwd_reduce_sum(SK__OPK_FWD_ARGS) { return (void)ctx, sk__opk_reduce_fwd(SK_SUM, op, f, in, out, err); }
static sk_result sk__opk_bwd_reduce_sum(SK__OPK_BWD_ARGS) { return (void)ctx, sk__opk_reduce_bwd(SK_SUM, op, f, in, out, dx, err); }
static sk_result sk__opk_fwd_reduce_mean(SK__OPK_FWD_ARGS) { return (void)ctx, sk__opk_reduce_fwd(SK_AVG, op, f, in, out, err); }
static sk_result sk__opk_bwd_reduce_mean(SK__OPK_BWD_ARGS) { return (void)ctx, sk__opk_reduce_bwd(SK_AVG, op, f, in, out, dx, err); }
static sk_result sk__opk_fwd_reduce_max(SK__OPK_FWD_ARGS) { return (void)ctx, sk__opk_reduce_fwd(SK_MAX, op, f, in, out, err); }
static sk_result sk__opk_bwd_reduce_max(SK__OPK_BWD_ARGS) { return (void)ctx, sk__opk_reduce_bwd(SK_MAX, op, f, in, out, dx, err); }

/* ---- kernels: indices, data ------------------------------------------------------------------- */

static sk_result sk__opk_fwd_one_hot(SK__OPK_FWD_ARGS) {
  (void)ctx;
  const sk__opk_arg *x = &in[0];
  int axis = sk__opk_axis(op, -1), oa = axis < 0 ? out[0].ndims - 1 : axis;
  return sk_kern_one_hot(x->dtype, x->ndims, x->shape, x->data, op->desc.depth, sk__opk_offset(f), out[0].shape[oa],
                         axis, out[0].dtype, op->on_value != 0 ? op->on_value : 1.0, op->off_value, out[0].data, err);
}

/* Reads no tensor: no operator before it. GetNext's outputs are the data the caller feeds. */
static sk_result sk__opk_fwd_none(SK__OPK_FWD_ARGS) {
  (void)in, (void)out, (void)err;
  return SK__OPK_UNUSED, SK_OK;
}

static sk_result sk__opk_bwd_none(SK__OPK_BWD_ARGS) {
  (void)in, (void)out, (void)dx, (void)err;
  return SK__OPK_UNUSED, SK_OK;
}

static sk_result sk__opk_bwd_one_hot(SK__OPK_BWD_ARGS) { return sk__opk_bwd_none(ctx, op, f, in, out, dx, err); }

static sk_result sk__opk_fwd_gather(SK__OPK_FWD_ARGS) {
  (void)ctx;
  const sk__opk_arg *x = &in[0], *w = &in[1];
  if (op->ninputs != 2) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Gather reads 2 tensors, not %d", op->ninputs);
  return sk_kern_gather(x->dtype, x->ndims, x->shape, x->data, w->dtype, w->ndims, w->shape, w->data,
                        sk__opk_axis(op, 0), sk__opk_offset(f), out[0].data, err);
}

static sk_result sk__opk_bwd_gather(SK__OPK_BWD_ARGS) {
  (void)ctx;
  const sk__opk_arg *x = &in[0], *w = &in[1];
  if (!dx[0]) return SK_OK;
  return sk_kern_gather_bwd(x->dtype, x->ndims, x->shape, w->dtype, w->ndims, w->shape, w->data, sk__opk_axis(op, 0),
                            sk__opk_offset(f), out[0].grad, dx[0], err);
}

static sk_result sk__opk_fwd_virtual_dataset(SK__OPK_FWD_ARGS) {
  (void)ctx, (void)f;
  for (int k = 0; k < op->ninputs && k < op->noutputs; k++) {
    sk_result r = sk_kern_copy(in[k].dtype, in[k].ndims, in[k].shape, in[k].data, out[k].data, err);
    if (r) return r;
  }
  return SK_OK;
}

/* Input k's gradient is output k's; zero where none flows from output k (dx[k] is still written). */
static sk_result sk__opk_bwd_virtual_dataset(SK__OPK_BWD_ARGS) {
  (void)ctx, (void)f;
  for (int k = 0; k < op->ninputs && k < op->noutputs; k++) {
    if (!dx[k]) continue;
    if (!out[k].grad) {
      sk__opk_zero(&in[k], dx[k]);
      continue;
    }
    sk_result r = sk_kern_copy(in[k].dtype, in[k].ndims, in[k].shape, out[k].grad, dx[k], err);
    if (r) return r;
  }
  return SK_OK;
}

#undef SK__OPK_FWD_ARGS
#undef SK__OPK_BWD_ARGS
#undef SK__OPK_UNUSED

SK_EXTERN_C_END

#endif /* SK_OPTABLE_KERNELS */
