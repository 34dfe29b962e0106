/* Every operator of sk_ops.h run sharded on 8 device threads, forward and backward, against the
   unsharded kernels of sk_kernels.h on the full tensors.

   One harness runs every case (struct op_case: a desc, generator kinds, seeds):
     1. the full inputs and the output gradients dy come from a deterministic generator;
     2. the oracle runs the operator's kernels on the full shapes (offsets 0, no collective);
     3. each device slices the inputs by plan.in[i] (for Reshape, whose kernel reads its input
        whole on the axes its output does not use, sk_op_kernel_layout, the redistribution
        module then moves them there), runs the same kernels on its local shapes, applies plan.fwd to output 0
        (AllReduce with op and scale, or ReduceScatter along dim 0), slices dy by plan.out[o],
        undoes plan.fwd for the backward (scale; an AllGather of dy after a ReduceScatter), runs
        the backward kernels, applies plan.bwd_in[i] and, for parameters, plan.grad[i];
     4. the test's thread compares every rank's output slices and input-gradient slices with the
        oracle's.

   THE MIRROR'S CONVENTION. plan.grad[i] SUMS the replicas' contributions over the axes the
   parameter's layout does not use. Along a data-parallel axis each replica saw other rows, so the
   sum is right. Along an axis over which dy itself is replicated (the repeat axis, or an axis the
   output does not use either, e.g. the contraction axis b for Dense's bias after the forward
   AllReduce) every replica holds the same full gradient; MindSpore's backward of the
   redistribution into the operator delivers partial gradients there. The runtime must therefore
   divide the local gradient by the replication of dy along the axes that neither the parameter's
   layout nor the output's layout uses (replication() below) before the Mirror's AllReduce. That is
   what this harness does, and nothing else.

   TOLERANCE. Both sides compute in f64 (the kernels compute f64 data in double); only the order of
   summation differs (partial sums over shards, then the collective), so every value must agree to
   1e-12 relative to 1 + |value| (a few hundred terms of O(1) err by ~1e-14). Cast goes through f32
   identically on both sides; the dropout mask is a pure function of the global index.

   Device threads never assert: each rank records its rc and message; the test's thread asserts
   after sk_world_run returns. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"

#define NDEV 8
#define MAXT 4     /* tensors per side (inputs, outputs) */
#define MAXE 1024  /* elements of any tensor, full or local */
#define TOL 1e-12

typedef struct tensor {
  int nd;
  int64_t sh[SK_MAX_DIMS];
  double v[MAXE];
} tensor;

enum { GEN_REAL = 0, GEN_POS, GEN_COARSE, GEN_INDEX };

/* One case: the operator, its strategy, how its inputs are drawn. */
typedef struct op_case {
  sk_op_desc desc;
  int gen[MAXT];        /* GEN_* per input */
  int64_t irange[MAXT]; /* GEN_INDEX: values in [0, irange) */
  uint32_t grads;       /* inputs whose gradient is checked */
  bool fwd_only;        /* no backward (OneHot, the dataset operators) */
  uint64_t seed;
  double keep_prob; /* Dropout */
  bool check_fwd;   /* the plan's forward collective must be fwd_kind (the case exercises it) */
  sk_coll_kind fwd_kind;
} op_case;

/* What a kernel adapter sees: local tensors (the full ones in the oracle) and, for a device, its
   communicator and the plan. */
typedef struct kctx {
  const op_case *c;
  const sk_op_desc *d;
  sk_comm *comm;          /* NULL: the unsharded oracle */
  const sk_op_plan *plan; /* NULL: the unsharded oracle */
  int rank;
  tensor *in, *out, *dy, *dx;
  sk_slice ins[MAXT]; /* where each local input sits in the full tensor */
  sk_slice outs[MAXT];
  sk_error err;
} kctx;

typedef struct op_impl {
  sk_result (*fwd)(kctx *k);
  sk_result (*bwd)(kctx *k);
} op_impl;

typedef struct dev_state {
  tensor in[MAXT], out[MAXT], dy[MAXT], dx[MAXT];
  sk_result rc;
  char msg[300];
} dev_state;

typedef struct run {
  const op_case *c;
  sk_op_plan plan;
  int nin;                  /* data inputs (GetNext: its outputs, read from the dataset) */
  tensor full_dy[MAXT];
  dev_state oracle;         /* full inputs, outputs, gradients */
  dev_state dev[NDEV];
} run;

/* ---- tensors --------------------------------------------------------------------------------- */

static int64_t numel(const tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->nd; i++) n *= t->sh[i];
  return n;
}

static uint64_t mix(uint64_t x) { /* splitmix64 */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static void generate(tensor *t, int kind, int64_t range, uint64_t seed) {
  for (int64_t i = 0; i < numel(t); i++) {
    uint64_t h = mix(seed * 1000003u + (uint64_t)i);
    double u = (double)(h >> 11) / 9007199254740992.0; /* [0, 1) */
    t->v[i] = kind == GEN_POS      ? 0.5 + u
              : kind == GEN_COARSE ? (double)(int)(u * 9) / 4.0 - 1.0 /* -1, -0.75, ..., 1: ties */
              : kind == GEN_INDEX  ? (double)(int64_t)(u * (double)range)
                                   : 2 * u - 1;
  }
}

/* out = full[s]; back: full[s] = in. */
static void slice_move(tensor *full, const sk_slice *s, tensor *local, bool back) {
  if (!back) {
    local->nd = full->nd;
    for (int d = 0; d < full->nd; d++) local->sh[d] = s->stop[d] - s->start[d];
  }
  int64_t idx[SK_MAX_DIMS] = {0}, n = numel(local);
  for (int64_t e = 0; e < n; e++) {
    int64_t off = 0;
    for (int d = 0; d < full->nd; d++) off = off * full->sh[d] + s->start[d] + idx[d];
    if (back)
      full->v[off] = local->v[e];
    else
      local->v[e] = full->v[off];
    for (int d = full->nd - 1; d >= 0 && ++idx[d] == local->sh[d]; d--) idx[d] = 0;
  }
}

/* sk_layout_slice, also for a scalar (rank 0) layout. */
static sk_result layout_slice(const sk_layout *l, int rank, sk_slice *s, sk_error *e) {
  if (l->ndims == 0) return s->ndims = 0, SK_OK;
  return sk_layout_slice(l, rank, s, e);
}

static void full_slice(const tensor *t, sk_slice *s) {
  s->ndims = t->nd;
  for (int d = 0; d < t->nd; d++) s->start[d] = 0, s->stop[d] = t->sh[d];
}

static void set_shape(tensor *t, const sk_layout *l) {
  t->nd = l->ndims;
  memcpy(t->sh, l->shape, sizeof t->sh);
}

static void scale(tensor *t, double s) {
  if (s != 1)
    for (int64_t i = 0; i < numel(t); i++) t->v[i] *= s;
}

static void to_index(const tensor *t, int64_t *out) {
  for (int64_t i = 0; i < numel(t); i++) out[i] = (int64_t)t->v[i];
}

/* ---- collectives along mesh axes (no-ops in the oracle) -------------------------------------- */

static int axes_size(const sk_mesh *m, uint32_t axes) {
  int n = 1;
  for (int a = 0; a < m->naxes; a++)
    if (axes & (1u << a)) n *= m->dims[a];
  return n;
}

/* kind along the mesh axes: count is sk_comm.h's per-rank count. */
static sk_result k_coll(kctx *k, sk_coll_kind kind, sk_redop op, uint32_t axes, const double *send, double *recv,
                        size_t count) {
  if (!k->comm || !axes) return SK_OK;
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split_mesh(k->comm, &k->plan->mesh, axes, &sub, NULL);
  if (r == SK_OK && kind == SK_COLL_ALLREDUCE) r = sk_allreduce(sub, send, recv, count, SK_F64, op, NULL);
  if (r == SK_OK && kind == SK_COLL_REDUCE_SCATTER) r = sk_reduce_scatter(sub, send, recv, count, SK_F64, op, NULL);
  if (r == SK_OK && kind == SK_COLL_ALLGATHER) r = sk_allgather(sub, send, recv, count, SK_F64, NULL);
  if (r != SK_OK) snprintf(k->err.msg, sizeof k->err.msg, "%s", sk_comm_error_message(sub ? sub : k->comm));
  if (sub) sk_comm_destroy(sub, NULL);
  return r;
}

/* An AllReduce(sum) of t along oc's axes, times oc's scale. */
static sk_result k_apply(kctx *k, const sk_op_comm *oc, tensor *t) {
  if (oc->kind == SK_COLL_NONE) return SK_OK;
  sk_result r = k_coll(k, SK_COLL_ALLREDUCE, oc->op, oc->axes, t->v, t->v, (size_t)numel(t));
  scale(t, oc->scale);
  return r;
}

/* True when this device is the first of its group along axes (always in the oracle). */
static bool k_first_in_group(const kctx *k, uint32_t axes) {
  if (!k->plan) return true;
  int c[SK_MAX_AXES];
  if (sk_mesh_coords(&k->plan->mesh, k->rank, c, NULL) != SK_OK) return false;
  for (int a = 0; a < k->plan->mesh.naxes; a++)
    if ((axes & (1u << a)) && c[a] != 0) return false;
  return true;
}

/* ---- kernel adapters: one pair per family, on the local (or full) tensors -------------------- */

#define SH(t) (t).nd, (t).sh
#define E (&k->err)
#define F64 SK_F64

static sk_result matmul_fwd(kctx *k) {
  const sk_op_desc *d = k->d;
  tensor *x = &k->in[0], *w = &k->in[1], *y = &k->out[0];
  if (d->kind == SK_OP_BATCH_MATMUL)
    return sk_kern_batch_matmul(NULL, F64, d->transpose_a, d->transpose_b, SH(*x), x->v, SH(*w), w->v, y->v, E);
  if (d->kind == SK_OP_MATMUL)
    return sk_kern_matmul(NULL, F64, d->transpose_a, d->transpose_b, SH(*x), x->v, SH(*w), w->v, y->v, E);
  /* Dense: the bias is added once per contraction group, after the partial sums are summed */
  const double *bias = d->ninputs == 3 && k_first_in_group(k, k->plan ? k->plan->fwd.axes : 0) ? k->in[2].v : NULL;
  return sk_kern_dense(NULL, F64, SH(*x), x->v, w->sh, w->v, bias, y->v, E);
}

static sk_result matmul_bwd(kctx *k) {
  const sk_op_desc *d = k->d;
  tensor *x = &k->in[0], *w = &k->in[1];
  const double *dy = k->dy[0].v;
  if (d->kind == SK_OP_BATCH_MATMUL)
    return sk_kern_batch_matmul_bwd(NULL, F64, d->transpose_a, d->transpose_b, SH(*x), x->v, SH(*w), w->v, dy,
                                    k->dx[0].v, k->dx[1].v, E);
  if (d->kind == SK_OP_MATMUL)
    return sk_kern_matmul_bwd(NULL, F64, d->transpose_a, d->transpose_b, SH(*x), x->v, SH(*w), w->v, dy, k->dx[0].v,
                              k->dx[1].v, E);
  return sk_kern_dense_bwd(NULL, F64, SH(*x), x->v, w->sh, w->v, dy, k->dx[0].v, k->dx[1].v,
                           d->ninputs == 3 ? k->dx[2].v : NULL, E);
}

typedef sk_result (*unary_fn)(sk_dtype, int, const int64_t *, const void *, void *, sk_error *);
typedef sk_result (*unary_bwd_fn)(sk_dtype, int, const int64_t *, const void *, const void *, void *, sk_error *);

static sk_result unary_fwd(kctx *k) {
  unary_fn f = k->d->kind == SK_OP_RELU ? sk_kern_relu : k->d->kind == SK_OP_GELU ? sk_kern_gelu : sk_kern_tanh;
  return f(F64, SH(k->in[0]), k->in[0].v, k->out[0].v, E);
}

static sk_result unary_bwd(kctx *k) {
  unary_bwd_fn f = k->d->kind == SK_OP_RELU   ? sk_kern_relu_bwd
                   : k->d->kind == SK_OP_GELU ? sk_kern_gelu_bwd
                                              : sk_kern_tanh_bwd;
  return f(F64, SH(k->in[0]), k->in[0].v, k->dy[0].v, k->dx[0].v, E);
}

/* Cast f64 -> f32 (kept in a double buffer); its backward casts dy (f32) back to f64. */
static sk_result cast_through_f32(kctx *k, const tensor *src, double *dst) {
  float f[MAXE];
  sk_result r = sk_kern_cast(F64, SH(*src), src->v, SK_F32, f, E);
  return r != SK_OK ? r : sk_kern_cast(SK_F32, SH(*src), f, F64, dst, E);
}
static sk_result cast_fwd(kctx *k) { return cast_through_f32(k, &k->in[0], k->out[0].v); }
static sk_result cast_bwd(kctx *k) { return cast_through_f32(k, &k->dy[0], k->dx[0].v); }

/* Dropout: the mask of this device's slice of the GLOBAL tensor; output 1 is the mask. */
static sk_result dropout_fwd(kctx *k) {
  uint8_t mask[MAXE];
  int64_t n = numel(&k->in[0]);
  sk_result r = sk_kern_dropout_mask(k->c->seed, k->c->keep_prob, k->d->ndims[0], k->d->shape[0], &k->ins[0], mask, E);
  if (r == SK_OK) r = sk_kern_dropout(F64, SH(k->in[0]), k->c->keep_prob, k->in[0].v, mask, k->out[0].v, E);
  for (int64_t i = 0; i < n; i++) k->out[1].v[i] = mask[i];
  return r;
}

static sk_result dropout_bwd(kctx *k) {
  uint8_t mask[MAXE];
  for (int64_t i = 0; i < numel(&k->out[1]); i++) mask[i] = (uint8_t)k->out[1].v[i];
  return sk_kern_dropout_bwd(F64, SH(k->dy[0]), k->c->keep_prob, k->dy[0].v, mask, k->dx[0].v, E);
}

static sk_binop binop_of(sk_op_kind kind) {
  return kind == SK_OP_ADD ? SK_BIN_ADD : kind == SK_OP_SUB ? SK_BIN_SUB : kind == SK_OP_MUL ? SK_BIN_MUL
         : kind == SK_OP_DIV ? SK_BIN_DIV : SK_BIN_POW;
}

static sk_result binary_fwd(kctx *k) {
  return sk_kern_binary(binop_of(k->d->kind), F64, SH(k->in[0]), k->in[0].v, SH(k->in[1]), k->in[1].v, k->out[0].v, E);
}

static sk_result binary_bwd(kctx *k) {
  return sk_kern_binary_bwd(binop_of(k->d->kind), F64, SH(k->in[0]), k->in[0].v, SH(k->in[1]), k->in[1].v, k->dy[0].v,
                            k->dx[0].v, k->dx[1].v, E);
}

/* sk_ops.h's BiasAdd adds the bias along x's dim 1 (MindSpore's NCHW): the kernel's NCHW. */
static sk_result bias_add_fwd(kctx *k) {
  return sk_kern_bias_add(F64, SK_NCHW, SH(k->in[0]), k->in[0].v, k->in[1].v, k->out[0].v, E);
}
static sk_result bias_add_bwd(kctx *k) {
  return sk_kern_bias_add_bwd(F64, SK_NCHW, SH(k->dy[0]), k->dy[0].v, k->dx[0].v, k->dx[1].v, E);
}

static sk_result prelu_fwd(kctx *k) {
  return sk_kern_prelu(F64, SH(k->in[0]), k->in[0].v, k->in[1].sh[0], k->in[1].v, k->out[0].v, E);
}
static sk_result prelu_bwd(kctx *k) {
  return sk_kern_prelu_bwd(F64, SH(k->in[0]), k->in[0].v, k->in[1].sh[0], k->in[1].v, k->dy[0].v, k->dx[0].v,
                           k->dx[1].v, E);
}

static int attr_axis(const sk_op_desc *d, int dflt) { return d->naxis ? d->axis[0] : dflt; }

static sk_result softmax_fwd(kctx *k) {
  int axis = attr_axis(k->d, k->d->kind == SK_OP_L2_NORMALIZE ? 0 : -1);
  tensor *x = &k->in[0];
  if (k->d->kind == SK_OP_L2_NORMALIZE)
    return sk_kern_l2_normalize(F64, SH(*x), axis, SK_L2_NORMALIZE_EPSILON, x->v, k->out[0].v, E);
  if (k->d->kind == SK_OP_SOFTMAX) return sk_kern_softmax(F64, SH(*x), axis, x->v, k->out[0].v, E);
  return sk_kern_log_softmax(F64, SH(*x), axis, x->v, k->out[0].v, E);
}

static sk_result softmax_bwd(kctx *k) {
  int axis = attr_axis(k->d, k->d->kind == SK_OP_L2_NORMALIZE ? 0 : -1);
  tensor *x = &k->in[0];
  const double *y = k->out[0].v, *dy = k->dy[0].v;
  if (k->d->kind == SK_OP_L2_NORMALIZE)
    return sk_kern_l2_normalize_bwd(F64, SH(*x), axis, SK_L2_NORMALIZE_EPSILON, x->v, dy, k->dx[0].v, E);
  if (k->d->kind == SK_OP_SOFTMAX) return sk_kern_softmax_bwd(F64, SH(*x), axis, y, dy, k->dx[0].v, E);
  return sk_kern_log_softmax_bwd(F64, SH(*x), axis, y, dy, k->dx[0].v, E);
}

static sk_result layer_norm_fwd(kctx *k) {
  return sk_kern_layer_norm(F64, SH(k->in[0]), attr_axis(k->d, 1), SK_LAYER_NORM_EPSILON, k->in[0].v, k->in[1].v,
                            k->in[2].v, k->out[0].v, k->out[1].v, k->out[2].v, E);
}
static sk_result layer_norm_bwd(kctx *k) {
  return sk_kern_layer_norm_bwd(F64, SH(k->in[0]), attr_axis(k->d, 1), SK_LAYER_NORM_EPSILON, k->in[0].v, k->dy[0].v,
                                k->out[1].v, k->out[2].v, k->in[1].v, k->dx[0].v, k->dx[1].v, k->dx[2].v, E);
}

/* The losses. The fused SoftmaxCrossEntropy and MAELoss divide by the GLOBAL count (from the
   desc), so the plan's AllReduce(sum) of the devices' partial losses is the mean. Labels given as
   indices (GEN_INDEX) take the sparse kernel. */
static int64_t global_count(const sk_op_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->ndims[0]; i++) n *= d->shape[0][i];
  return n;
}

static sk_result loss_fwd(kctx *k) {
  const sk_op_desc *d = k->d;
  tensor *a = &k->in[0], *b = &k->in[1];
  if (d->kind == SK_OP_SOFTMAX_CE_LOGITS) return sk_kern_softmax_ce_logits(F64, SH(*a), a->v, b->v, k->out[0].v, k->out[1].v, E);
  if (d->kind == SK_OP_MAE_LOSS) return sk_kern_mae_loss(F64, SH(*a), a->v, SH(*b), b->v, global_count(d), k->out[0].v, E);
  if (k->c->gen[1] != GEN_INDEX) return sk_kern_softmax_ce(F64, SH(*a), a->v, b->v, d->shape[0][0], k->out[0].v, E);
  int64_t idx[MAXE];
  to_index(b, idx);
  return sk_kern_sparse_softmax_ce(F64, SH(*a), a->v, SK_I64, idx, d->shape[0][0], k->out[0].v, E);
}

static sk_result loss_bwd(kctx *k) {
  const sk_op_desc *d = k->d;
  tensor *a = &k->in[0], *b = &k->in[1];
  const double *dl = k->dy[0].v;
  if (d->kind == SK_OP_SOFTMAX_CE_LOGITS) return sk_kern_softmax_ce_logits_bwd(F64, SH(*a), dl, k->out[1].v, k->dx[0].v, E);
  if (d->kind == SK_OP_MAE_LOSS)
    return sk_kern_mae_loss_bwd(F64, SH(*a), a->v, SH(*b), b->v, global_count(d), dl, k->dx[0].v, k->dx[1].v, E);
  if (k->c->gen[1] != GEN_INDEX) return sk_kern_softmax_ce_bwd(F64, SH(*a), a->v, b->v, d->shape[0][0], dl, k->dx[0].v, E);
  int64_t idx[MAXE];
  to_index(b, idx);
  return sk_kern_sparse_softmax_ce_bwd(F64, SH(*a), a->v, SK_I64, idx, d->shape[0][0], dl, k->dx[0].v, E);
}

/* Reductions: the local kernel (ReduceMean with its LOCAL divisor: the plan's scale 1/group
   makes the mean of the shards' means); ReduceMax's backward takes the GLOBAL max (output 0 after
   the forward AllReduce(max)) and the GLOBAL tie count, summed along the forward's axes. */
static sk_redop reduce_op(sk_op_kind kind) {
  return kind == SK_OP_REDUCE_SUM ? SK_SUM : kind == SK_OP_REDUCE_MEAN ? SK_AVG : SK_MAX;
}

static sk_result reduce_fwd(kctx *k) {
  return sk_kern_reduce(reduce_op(k->d->kind), F64, SH(k->in[0]), k->d->naxis, k->d->axis, 0, k->in[0].v, k->out[0].v, E);
}

static sk_result reduce_bwd(kctx *k) {
  const sk_op_desc *d = k->d;
  sk_redop op = reduce_op(d->kind);
  double count[MAXE];
  const double *cnt = NULL;
  if (op == SK_MAX) {
    sk_result r = sk_kern_reduce_max_ties(F64, SH(k->in[0]), d->naxis, d->axis, k->in[0].v, k->out[0].v, count, E);
    if (r == SK_OK && k->plan) r = k_coll(k, SK_COLL_ALLREDUCE, SK_SUM, k->plan->fwd.axes, count, count, (size_t)numel(&k->out[0]));
    if (r != SK_OK) return r;
    cnt = count;
  }
  return sk_kern_reduce_bwd(op, F64, SH(k->in[0]), d->naxis, d->axis, 0, k->in[0].v, k->out[0].v, cnt, k->dy[0].v,
                            k->dx[0].v, E);
}

static sk_result transpose_fwd(kctx *k) {
  return sk_kern_transpose(F64, SH(k->in[0]), k->d->perm, k->in[0].v, k->out[0].v, E);
}
static sk_result transpose_bwd(kctx *k) {
  return sk_kern_transpose_bwd(F64, SH(k->in[0]), k->d->perm, k->dy[0].v, k->dx[0].v, E);
}

/* Reshape, Flatten, ExpandDims and VirtualDataset: a row-major copy, forward and backward. */
static sk_result copy_fwd(kctx *k) {
  sk_result r = SK_OK;
  for (int i = 0; r == SK_OK && i < k->d->ninputs; i++) r = sk_kern_copy(F64, SH(k->in[i]), k->in[i].v, k->out[i].v, E);
  return r;
}
static sk_result copy_bwd(kctx *k) { return sk_kern_copy(F64, SH(k->in[0]), k->dy[0].v, k->dx[0].v, E); }

/* GetNext: the device reads its outputs from the dataset, which the harness hands it as inputs
   sliced by the outputs' layouts. */
static sk_result get_next_fwd(kctx *k) {
  sk_result r = SK_OK;
  for (int o = 0; r == SK_OK && o < k->d->noutputs; o++) r = sk_kern_copy(F64, SH(k->in[o]), k->in[o].v, k->out[o].v, E);
  return r;
}

/* OneHot: this device writes classes [offset, offset + local depth) of the output's class dim. */
static sk_result one_hot_fwd(kctx *k) {
  int axis = attr_axis(k->d, -1), cdim = axis == 0 ? 0 : k->out[0].nd - 1;
  int64_t idx[MAXE];
  to_index(&k->in[0], idx);
  return sk_kern_one_hot(SK_I64, SH(k->in[0]), idx, k->d->depth, k->outs[0].start[cdim], k->out[0].sh[cdim], axis, F64,
                         k->in[1].v[0], k->in[2].v[0], k->out[0].v, E);
}

/* Gather: this device holds the table's entries [offset, offset + local) along axis. */
static sk_result gather_fwd(kctx *k) {
  int axis = attr_axis(k->d, 0);
  int64_t idx[MAXE];
  to_index(&k->in[1], idx);
  return sk_kern_gather(F64, SH(k->in[0]), k->in[0].v, SK_I64, SH(k->in[1]), idx, axis, k->ins[0].start[axis],
                        k->out[0].v, E);
}
static sk_result gather_bwd(kctx *k) {
  int axis = attr_axis(k->d, 0);
  int64_t idx[MAXE];
  to_index(&k->in[1], idx);
  return sk_kern_gather_bwd(F64, SH(k->in[0]), SK_I64, SH(k->in[1]), idx, axis, k->ins[0].start[axis], k->dy[0].v,
                            k->dx[0].v, E);
}

static const op_impl *impl_of(sk_op_kind kind) {
  static const op_impl impls[SK_OP_KIND_COUNT] = {
      [SK_OP_MATMUL] = {matmul_fwd, matmul_bwd},       [SK_OP_BATCH_MATMUL] = {matmul_fwd, matmul_bwd},
      [SK_OP_DENSE] = {matmul_fwd, matmul_bwd},        [SK_OP_RELU] = {unary_fwd, unary_bwd},
      [SK_OP_GELU] = {unary_fwd, unary_bwd},           [SK_OP_TANH] = {unary_fwd, unary_bwd},
      [SK_OP_CAST] = {cast_fwd, cast_bwd},             [SK_OP_DROPOUT] = {dropout_fwd, dropout_bwd},
      [SK_OP_ADD] = {binary_fwd, binary_bwd},          [SK_OP_SUB] = {binary_fwd, binary_bwd},
      [SK_OP_MUL] = {binary_fwd, binary_bwd},          [SK_OP_DIV] = {binary_fwd, binary_bwd},
      [SK_OP_POW] = {binary_fwd, binary_bwd},          [SK_OP_BIAS_ADD] = {bias_add_fwd, bias_add_bwd},
      [SK_OP_PRELU] = {prelu_fwd, prelu_bwd},          [SK_OP_SOFTMAX] = {softmax_fwd, softmax_bwd},
      [SK_OP_LOG_SOFTMAX] = {softmax_fwd, softmax_bwd}, [SK_OP_L2_NORMALIZE] = {softmax_fwd, softmax_bwd},
      [SK_OP_LAYER_NORM] = {layer_norm_fwd, layer_norm_bwd}, [SK_OP_SOFTMAX_CE] = {loss_fwd, loss_bwd},
      [SK_OP_SOFTMAX_CE_LOGITS] = {loss_fwd, loss_bwd}, [SK_OP_MAE_LOSS] = {loss_fwd, loss_bwd},
      [SK_OP_REDUCE_SUM] = {reduce_fwd, reduce_bwd},   [SK_OP_REDUCE_MEAN] = {reduce_fwd, reduce_bwd},
      [SK_OP_REDUCE_MAX] = {reduce_fwd, reduce_bwd},   [SK_OP_FLATTEN] = {copy_fwd, copy_bwd},
      [SK_OP_TRANSPOSE] = {transpose_fwd, transpose_bwd}, [SK_OP_RESHAPE] = {copy_fwd, copy_bwd},
      [SK_OP_EXPAND_DIMS] = {copy_fwd, copy_bwd},      [SK_OP_ONE_HOT] = {one_hot_fwd, NULL},
      [SK_OP_GATHER] = {gather_fwd, gather_bwd},       [SK_OP_GET_NEXT] = {get_next_fwd, NULL},
      [SK_OP_VIRTUAL_DATASET] = {copy_fwd, NULL},      [SK_OP_TMP_IDENTITY] = {copy_fwd, copy_bwd}};
  return &impls[kind];
}

/* ---- the harness ------------------------------------------------------------------------------ */

/* The layout input i arrives in: plan.in[i]; GetNext's "inputs" are its outputs as the dataset
   holds them, read by each device in the outputs' layouts. */
static const sk_layout *input_layout(const run *R, int i) {
  return R->c->desc.kind == SK_OP_GET_NEXT ? &R->plan.out[i] : &R->plan.in[i];
}

/* The layout the kernel sees input i in (sk_op_kernel_layout: Reshape's input whole on the axes
   its output does not use); GetNext's outputs as the dataset holds them. */
static sk_result kernel_layout(const run *R, int i, sk_layout *out, sk_error *e) {
  if (R->c->desc.kind == SK_OP_GET_NEXT) return *out = *input_layout(R, i), SK_OK;
  return sk_op_kernel_layout(R->c->desc.kind, &R->plan, i, out, e);
}

/* Moves t (this device's piece) from one layout to another with the redistribution module. */
static sk_result k_redist(kctx *k, const sk_layout *from, const sk_layout *to, tensor *t, tensor *tmp) {
  if (memcmp(from->map, to->map, sizeof from->map) == 0) return SK_OK;
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = *from, rd.to = *to, rd.dtype = F64;
  sk_slice s;
  sk_result r = layout_slice(to, k->rank, &s, E);
  if (r != SK_OK) return r;
  *tmp = *t;
  t->nd = to->ndims;
  for (int d = 0; d < t->nd; d++) t->sh[d] = s.stop[d] - s.start[d];
  return sk_redist(k->comm, &rd, tmp->v, (size_t)numel(tmp), t->v, (size_t)numel(t), E);
}

/* Device: this rank's slice of every input, moved to the kernel's layout. */
static sk_result load_inputs(kctx *k, run *R, tensor *tmp) {
  for (int i = 0; i < R->nin; i++) {
    sk_layout kl;
    sk_slice s;
    sk_result r = layout_slice(input_layout(R, i), k->rank, &s, E);
    if (r == SK_OK) r = kernel_layout(R, i, &kl, E);
    if (r == SK_OK) slice_move(&R->oracle.in[i], &s, &k->in[i], false);
    if (r == SK_OK) r = k_redist(k, input_layout(R, i), &kl, &k->in[i], tmp);
    if (r == SK_OK) r = layout_slice(&kl, k->rank, &k->ins[i], E);
    if (r != SK_OK) return r;
  }
  return SK_OK;
}

/* The outputs' shapes before the forward collective: the plan's slices (the full tensors in the
   oracle), output 0's dim 0 whole along the axes of a ReduceScatter. */
static sk_result shape_outputs(kctx *k, run *R) {
  for (int o = 0; o < R->plan.noutputs; o++) {
    set_shape(&k->out[o], &R->plan.out[o]);
    if (!k->plan) {
      full_slice(&k->out[o], &k->outs[o]);
      continue;
    }
    sk_result r = layout_slice(&R->plan.out[o], k->rank, &k->outs[o], E);
    if (r != SK_OK) return r;
    for (int d = 0; d < k->out[o].nd; d++) k->out[o].sh[d] = k->outs[o].stop[d] - k->outs[o].start[d];
  }
  if (k->plan && k->plan->fwd.kind == SK_COLL_REDUCE_SCATTER) k->out[0].sh[0] *= axes_size(&k->plan->mesh, k->plan->fwd.axes);
  return SK_OK;
}

/* plan.fwd on output 0: AllReduce (op, scale) or ReduceScatter along dim 0. */
static sk_result forward_collective(kctx *k, tensor *tmp) {
  const sk_op_comm *f = k->plan ? &k->plan->fwd : NULL;
  tensor *y = &k->out[0];
  if (!f || f->kind == SK_COLL_ALLREDUCE || f->kind == SK_COLL_NONE) return f ? k_apply(k, f, y) : SK_OK;
  if (f->kind != SK_COLL_REDUCE_SCATTER) return SK_OK;
  int g = axes_size(&k->plan->mesh, f->axes);
  *tmp = *y;
  y->sh[0] /= g;
  sk_result r = k_coll(k, SK_COLL_REDUCE_SCATTER, f->op, f->axes, tmp->v, y->v, (size_t)numel(y));
  scale(y, f->scale);
  return r;
}

/* dy of every output, sliced as the outputs are; for output 0 the forward collective undone: an
   AllReduce's dy is every partial result's (times its scale), a ReduceScatter's is gathered. */
static sk_result load_dy(kctx *k, run *R, tensor *tmp) {
  for (int o = 0; o < R->plan.noutputs; o++) slice_move(&R->full_dy[o], &k->outs[o], &k->dy[o], false);
  const sk_op_comm *f = k->plan ? &k->plan->fwd : NULL;
  if (!f || f->kind == SK_COLL_NONE) return SK_OK;
  if (f->kind == SK_COLL_ALLREDUCE) return scale(&k->dy[0], f->scale), SK_OK;
  *tmp = k->dy[0];
  k->dy[0].sh[0] *= axes_size(&k->plan->mesh, f->axes);
  sk_result r = k_coll(k, SK_COLL_ALLGATHER, SK_SUM, f->axes, tmp->v, k->dy[0].v, (size_t)numel(tmp));
  scale(&k->dy[0], f->scale);
  return r;
}

/* The replication of dy along the axes that neither parameter i's layout nor the output's uses:
   the Mirror sums identical full gradients there, so the runtime divides by it first (see the
   file comment). */
static int replication(const sk_op_plan *p, int i) {
  uint32_t used = sk_layout_used_axes(&p->in[i]) | sk_layout_used_axes(&p->out[0]);
  int n = 1;
  for (int a = 0; a < p->mesh.naxes; a++)
    if (!(used & (1u << a))) n *= p->mesh.dims[a];
  return n;
}

/* Input i's gradient back in plan.in[i], then plan.bwd_in[i] and, for a parameter, the Mirror. */
static sk_result finish_grad(kctx *k, run *R, int i, tensor *tmp) {
  sk_layout kl;
  sk_result r = kernel_layout(R, i, &kl, E);
  if (r == SK_OK) r = k_redist(k, &kl, &R->plan.in[i], &k->dx[i], tmp);
  if (r == SK_OK) r = k_apply(k, &k->plan->bwd_in[i], &k->dx[i]);
  if (r != SK_OK || !(k->d->params & (1u << i))) return r;
  scale(&k->dx[i], 1.0 / replication(k->plan, i));
  return k_apply(k, &k->plan->grad[i], &k->dx[i]);
}

/* The operator forward and backward on k's tensors: a device's (k->plan set) or the oracle's. */
static sk_result exec(kctx *k, run *R, tensor *tmp, const char **step) {
  const op_impl *impl = impl_of(k->d->kind);
  sk_result r = SK_OK;
  if (k->plan) *step = "inputs", r = load_inputs(k, R, tmp);
  if (r == SK_OK) *step = "outputs", r = shape_outputs(k, R);
  if (r == SK_OK) *step = "forward", r = impl->fwd(k);
  if (r == SK_OK) *step = "forward collective", r = forward_collective(k, tmp);
  if (r != SK_OK || k->c->fwd_only) return r;
  *step = "dy", r = load_dy(k, R, tmp);
  for (int i = 0; i < R->nin; i++) {
    k->dx[i] = k->in[i];
    memset(k->dx[i].v, 0, sizeof k->dx[i].v);
  }
  if (r == SK_OK) *step = "backward", r = impl->bwd(k);
  for (int i = 0; r == SK_OK && k->plan && i < R->nin; i++)
    if (k->c->grads & (1u << i)) *step = "gradient collectives", r = finish_grad(k, R, i, tmp);
  return r;
}

static sk_result run_exec(run *R, dev_state *D, sk_comm *comm, int rank) {
  static tensor tmps[NDEV + 1];
  kctx k;
  memset(&k, 0, sizeof k);
  k.c = R->c, k.d = &R->c->desc, k.comm = comm, k.plan = comm ? &R->plan : NULL, k.rank = rank;
  k.in = D->in, k.out = D->out, k.dy = D->dy, k.dx = D->dx;
  for (int i = 0; i < R->nin && !comm; i++) full_slice(&D->in[i], &k.ins[i]);
  const char *step = "";
  D->rc = exec(&k, R, &tmps[comm ? rank : NDEV], &step);
  if (D->rc != SK_OK) snprintf(D->msg, sizeof D->msg, "%s: %s: %s", step, sk_result_name(D->rc), k.err.msg);
  return D->rc;
}

static sk_result device_fn(sk_comm *c, void *arg) {
  run *R = (run *)arg;
  int r = sk_comm_rank(c);
  return run_exec(R, &R->dev[r], c, r);
}

/* ---- the test's thread: plan, oracle, devices, comparisons ------------------------------------ */

static void check_slices(const run *R, const tensor *full, const sk_layout *l, const tensor *got, int r,
                         const char *what, int i) {
  static tensor want;
  sk_slice s;
  sk_error e;
  cr_assert_eq(layout_slice(l, r, &s, &e), SK_OK, "%s", e.msg);
  slice_move((tensor *)full, &s, &want, false);
  const char *op = sk_op_kind_name(R->c->desc.kind);
  cr_assert_eq(numel(got), numel(&want), "%s: rank %d %s %d holds %lld elements, its slice %lld", op, r, what, i,
               (long long)numel(got), (long long)numel(&want));
  for (int64_t j = 0; j < numel(&want); j++)
    cr_assert(fabs(got->v[j] - want.v[j]) <= TOL * (1 + fabs(want.v[j])),
              "%s: rank %d %s %d, local element %lld: got %.17g, the unsharded run gives %.17g", op, r, what, i,
              (long long)j, got->v[j], want.v[j]);
}

/* The dataset operators: every output's dim 0 is tiled by the ranks, each row held by as many
   ranks as dim 0 is not cut, and a rank reads the same samples in every output. */
static void check_dataset(const run *R) {
  const sk_op_plan *p = &R->plan;
  for (int o = 0; o < p->noutputs; o++) {
    int cut = sk_layout_split_count(&p->out[o], 0);
    int64_t held[MAXE] = {0};
    for (int r = 0; r < NDEV; r++) {
      sk_slice s, s0;
      cr_assert_eq(sk_layout_slice(&p->out[o], r, &s, NULL), SK_OK);
      cr_assert_eq(sk_layout_slice(&p->out[0], r, &s0, NULL), SK_OK);
      cr_assert(s.start[0] * p->out[0].shape[0] == s0.start[0] * p->out[o].shape[0], "rank %d: output %d starts at "
                "sample %lld, output 0 at %lld", r, o, (long long)s.start[0], (long long)s0.start[0]);
      for (int64_t i = s.start[0]; i < s.stop[0]; i++) held[i]++;
    }
    for (int64_t i = 0; i < p->out[o].shape[0]; i++)
      cr_assert_eq(held[i], NDEV / cut, "output %d sample %lld is held by %lld ranks, want %d", o, (long long)i,
                   (long long)held[i], NDEV / cut);
  }
}

static void compare(const run *R) {
  const sk_op_plan *p = &R->plan;
  for (int r = 0; r < NDEV; r++) {
    for (int o = 0; o < p->noutputs; o++) check_slices(R, &R->oracle.out[o], &p->out[o], &R->dev[r].out[o], r, "output", o);
    for (int i = 0; i < R->nin && !R->c->fwd_only; i++)
      if (R->c->grads & (1u << i)) check_slices(R, &R->oracle.dx[i], &p->in[i], &R->dev[r].dx[i], r, "input gradient", i);
  }
}

static void run_case(const op_case *c) {
  static run R;
  memset(&R, 0, sizeof R);
  R.c = c;
  sk_error e;
  const char *op = sk_op_kind_name(c->desc.kind);
  cr_assert_eq(sk_op_plan_make(&c->desc, NDEV, &R.plan, &e), SK_OK, "%s", e.msg);
  cr_assert(!c->check_fwd || R.plan.fwd.kind == c->fwd_kind, "%s: the plan's forward collective is %s, the case "
            "exercises %s", op, sk_coll_kind_name(R.plan.fwd.kind), sk_coll_kind_name(c->fwd_kind));
  R.nin = c->desc.kind == SK_OP_GET_NEXT ? R.plan.noutputs : R.plan.ninputs;
  for (int i = 0; i < R.nin; i++) {
    set_shape(&R.oracle.in[i], input_layout(&R, i));
    cr_assert_leq(numel(&R.oracle.in[i]), MAXE, "%s: input %d too large", op, i);
    generate(&R.oracle.in[i], c->gen[i], c->irange[i], c->seed + (uint64_t)i);
  }
  for (int o = 0; o < R.plan.noutputs; o++) {
    set_shape(&R.full_dy[o], &R.plan.out[o]);
    cr_assert_leq(numel(&R.full_dy[o]), MAXE, "%s: output %d too large", op, o);
    generate(&R.full_dy[o], GEN_REAL, 0, c->seed + 100 + (uint64_t)o);
  }
  cr_assert_eq(run_exec(&R, &R.oracle, NULL, 0), SK_OK, "%s unsharded: %s", op, R.oracle.msg);
  sk_world_desc wd = {0};
  wd.ndevices = NDEV, wd.backend = sk_threads_backend(), wd.timeout_ms = 20000;
  sk_world *w;
  cr_assert_eq(sk_world_create(&wd, &w, &e), SK_OK, "%s", e.msg);
  sk_result rr = sk_world_run(w, device_fn, &R, NULL);
  char wmsg[300];
  snprintf(wmsg, sizeof wmsg, "%s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  for (int r = 0; r < NDEV; r++) cr_assert_eq(R.dev[r].rc, SK_OK, "%s: rank %d: %s", op, r, R.dev[r].msg);
  cr_assert_eq(rr, SK_OK, "%s: %s", op, wmsg);
  compare(&R);
  if (c->desc.kind == SK_OP_GET_NEXT || c->desc.kind == SK_OP_VIRTUAL_DATASET) check_dataset(&R);
}

/* ---- cases ------------------------------------------------------------------------------------ */

/* "8,12;12,6": per input its dims (an empty entry: a scalar); returns the number of entries. */
static int parse_shapes(const char *text, int *nd, int64_t sh[][SK_MAX_DIMS]) {
  int n = 0;
  for (const char *p = text; p; n++) {
    nd[n] = 0;
    while (*p && *p != ';') {
      char *end;
      sh[n][nd[n]++] = strtoll(p, &end, 10);
      p = *end == ',' ? end + 1 : end;
    }
    p = *p == ';' ? p + 1 : NULL;
  }
  return n;
}

/* A case: kind, the inputs' shapes, the strategy (NULL: none) and the parameter mask. Every real
   input's gradient is checked; inputs drawn as indices (as_index) are not. */
static op_case mk(sk_op_kind kind, const char *shapes, const char *strategy, uint32_t params) {
  op_case c;
  memset(&c, 0, sizeof c);
  c.desc.kind = kind, c.desc.params = params;
  if (shapes) c.desc.ninputs = parse_shapes(shapes, c.desc.ndims, c.desc.shape);
  if (strategy) {
    int nd[MAXT];
    int64_t st[MAXT][SK_MAX_DIMS];
    int ns = parse_shapes(strategy, nd, st);
    c.desc.has_strategy = true;
    for (int i = 0; i < ns; i++)
      for (int k = 0; k < nd[i]; k++) c.desc.strategy[i][k] = (int)st[i][k];
  }
  for (int i = 0; i < c.desc.ninputs; i++)
    if (c.desc.ndims[i] > 0) c.grads |= 1u << i;
  c.seed = 1000 + 37 * (uint64_t)kind, c.keep_prob = 0.7;
  return c;
}

static void expect_fwd(op_case *c, sk_coll_kind kind) { c->check_fwd = true, c->fwd_kind = kind; }

static void as_index(op_case *c, int i, int64_t range) {
  c->gen[i] = GEN_INDEX, c->irange[i] = range, c->grads &= ~(1u << i);
}

static void set_axes(op_case *c, int n, int a0, int a1) {
  c->desc.naxis = n, c->desc.axis[0] = a0, c->desc.axis[1] = a1;
}

/* Reshape's target, GetNext's outputs: "4,12" or "16,4;16". */
static void set_outputs(op_case *c, const char *shapes) {
  c->desc.noutputs = parse_shapes(shapes, c->desc.out_ndims, c->desc.out_shape);
}

static void run_kind(sk_op_kind kind, const char *shapes, const char *strategy, uint32_t params) {
  op_case c = mk(kind, shapes, strategy, params);
  run_case(&c);
}

#define OPS_TEST(name) Test(ops_sharded, name, .timeout = 30)

/* ---- MatMul, BatchMatMul, Dense (w and the bias are parameters) ------------------------------- */

OPS_TEST(matmul_2x2x2) { run_kind(SK_OP_MATMUL, "8,12;12,6", "2,2;2,2", 0x2); }
OPS_TEST(matmul_repeat) { run_kind(SK_OP_MATMUL, "8,12;12,6", "2,2;2,1", 0x2); }
OPS_TEST(matmul_transpose_b) {
  op_case c = mk(SK_OP_MATMUL, "8,12;6,12", "2,2;2,2", 0x2);
  c.desc.transpose_b = true;
  run_case(&c);
}
OPS_TEST(matmul_transpose_b_repeat) {
  op_case c = mk(SK_OP_MATMUL, "8,12;6,12", "1,2;2,2", 0x2);
  c.desc.transpose_b = true;
  run_case(&c);
}
OPS_TEST(matmul_reduce_scatter) {
  op_case c = mk(SK_OP_MATMUL, "8,12;12,6", "2,2;2,2", 0x2);
  c.desc.has_out_strategy = true, c.desc.out_strategy[0] = 4, c.desc.out_strategy[1] = 2;
  expect_fwd(&c, SK_COLL_REDUCE_SCATTER);
  run_case(&c);
}
OPS_TEST(matmul_reduce_scatter_repeat) {
  op_case c = mk(SK_OP_MATMUL, "8,12;12,6", "2,2;2,1", 0x2);
  c.desc.has_out_strategy = true, c.desc.out_strategy[0] = 4, c.desc.out_strategy[1] = 1;
  expect_fwd(&c, SK_COLL_REDUCE_SCATTER);
  run_case(&c);
}
OPS_TEST(batch_matmul) { run_kind(SK_OP_BATCH_MATMUL, "2,4,6;2,6,4", "2,2,1;2,1,2", 0x2); }
OPS_TEST(batch_matmul_w_missing_batch_dim) { run_kind(SK_OP_BATCH_MATMUL, "2,4,6;6,4", "2,2,2;2,1", 0x2); }
OPS_TEST(batch_matmul_w_size1_batch_repeat) { run_kind(SK_OP_BATCH_MATMUL, "2,4,6;1,6,4", "2,1,1;1,1,2", 0x2); }
/* x [4,6] broadcast over w's batch dim (2), cut 2 ways: device matrix d0=2,d1..d3=1,rep=4. dx =
   sum_b dy_b w_b^T is partial over d0; the plan's bwd_in[0] sums it there (the shared rule: the
   axes that cut the output but not x, the batch dims x broadcasts among them), as the binary
   operators do. */
OPS_TEST(batch_matmul_x_broadcast) { run_kind(SK_OP_BATCH_MATMUL, "4,6;2,6,4", "1,1;2,1,1", 0x2); }
/* w, bias and x as activations (no parameter): their partial gradients are summed by bwd_in */
OPS_TEST(matmul_w_activation) { run_kind(SK_OP_MATMUL, "8,12;12,6", "2,2;2,2", 0); }
OPS_TEST(dense_activations_repeat) { run_kind(SK_OP_DENSE, "8,12;6,12;6", "2,2;1,2;1", 0); }
OPS_TEST(bias_add_activation) { run_kind(SK_OP_BIAS_ADD, "4,6,3;6", "2,2,1;2", 0); }
OPS_TEST(dense_bias) { run_kind(SK_OP_DENSE, "8,12;6,12;6", "2,2;2,2;2", 0x6); }
OPS_TEST(dense_bias_repeat) { run_kind(SK_OP_DENSE, "8,12;6,12;6", "2,2;1,2;1", 0x6); }

/* ---- element-wise, one input -------------------------------------------------------------------- */

OPS_TEST(relu_repeat) { run_kind(SK_OP_RELU, "8,6", "4,1", 0); }
OPS_TEST(gelu) { run_kind(SK_OP_GELU, "8,6", "4,2", 0); }
OPS_TEST(tanh_repeat) { run_kind(SK_OP_TANH, "8,6", "2,2", 0); }
OPS_TEST(cast_f64_f32) { run_kind(SK_OP_CAST, "8,6", "2,2", 0); }
OPS_TEST(dropout) { run_kind(SK_OP_DROPOUT, "8,6", "4,2", 0); }
OPS_TEST(dropout_rows) { run_kind(SK_OP_DROPOUT, "8,6,3", "8,1,1", 0); }
/* a repeat of 2: both replicas of a slice must draw the unsharded mask's slice */
OPS_TEST(dropout_repeat) { run_kind(SK_OP_DROPOUT, "8,6", "2,2", 0); }
/* a parameter passed on: no Mirror, but its gradient is summed over its replicas (the repeat) */
OPS_TEST(tmp_identity_param_repeat) { run_kind(SK_OP_TMP_IDENTITY, "8,6", "2,2", 0x1); }

/* ---- binary with broadcasting, BiasAdd, PReLU ------------------------------------------------- */

OPS_TEST(add_row_param_repeat) { run_kind(SK_OP_ADD, "8,6;6", "2,2;2", 0x2); }
OPS_TEST(sub_broadcast_row) { run_kind(SK_OP_SUB, "8,6;1,6", "4,2;1,2", 0); }
OPS_TEST(mul_broadcast_both_ways) { run_kind(SK_OP_MUL, "8,1;1,8", "2,1;1,4", 0x1); }
OPS_TEST(div_same_shape) {
  op_case c = mk(SK_OP_DIV, "8,6;8,6", "2,2;2,2", 0);
  c.gen[1] = GEN_POS;
  run_case(&c);
}
OPS_TEST(pow_param_exponent) {
  op_case c = mk(SK_OP_POW, "8,6;6", "4,2;2", 0x2);
  c.gen[0] = GEN_POS;
  run_case(&c);
}
OPS_TEST(bias_add_repeat) { run_kind(SK_OP_BIAS_ADD, "4,6,3;6", "2,2,1;2", 0x2); }
OPS_TEST(prelu_channels_repeat) { run_kind(SK_OP_PRELU, "4,6,3;6", "2,2,1;2", 0x2); }
OPS_TEST(prelu_single_weight) { run_kind(SK_OP_PRELU, "4,6,2;1", "2,2,2;1", 0x2); }

/* ---- along an axis: Softmax, LogSoftmax, L2Normalize, LayerNorm --------------------------------- */

OPS_TEST(softmax_repeat) { run_kind(SK_OP_SOFTMAX, "8,6", "4,1", 0); }
OPS_TEST(log_softmax_axis1) {
  op_case c = mk(SK_OP_LOG_SOFTMAX, "4,6,4", "2,1,2", 0);
  set_axes(&c, 1, 1, 0);
  run_case(&c);
}
OPS_TEST(l2_normalize_axis0_repeat) { run_kind(SK_OP_L2_NORMALIZE, "6,8", "1,4", 0); }
OPS_TEST(l2_normalize_last_axis) {
  op_case c = mk(SK_OP_L2_NORMALIZE, "8,6", "8,1", 0);
  set_axes(&c, 1, -1, 0);
  run_case(&c);
}
OPS_TEST(layer_norm_last_axis_repeat) {
  op_case c = mk(SK_OP_LAYER_NORM, "4,2,6;6;6", "2,2,1;1;1", 0x6);
  set_axes(&c, 1, 2, 0);
  run_case(&c);
}
OPS_TEST(layer_norm_default_axis) { run_kind(SK_OP_LAYER_NORM, "8,3,4;3,4;3,4", "4,1,1;1,1;1,1", 0x6); }

/* ---- losses ----------------------------------------------------------------------------------- */

OPS_TEST(softmax_ce_with_logits_repeat) {
  op_case c = mk(SK_OP_SOFTMAX_CE_LOGITS, "8,5;8,5", "4,1;4,1", 0);
  c.grads = 0x1; /* the labels get no gradient */
  run_case(&c);
}
OPS_TEST(softmax_ce_fused_dense_repeat) {
  op_case c = mk(SK_OP_SOFTMAX_CE, "8,5;8,5", "4,1;4,1", 0);
  expect_fwd(&c, SK_COLL_ALLREDUCE);
  c.grads = 0x1;
  run_case(&c);
}
OPS_TEST(softmax_ce_fused_sparse) {
  op_case c = mk(SK_OP_SOFTMAX_CE, "8,5;8", "8,1;8", 0);
  as_index(&c, 1, 5);
  run_case(&c);
}
OPS_TEST(mae_loss_repeat) { run_kind(SK_OP_MAE_LOSS, "8,6;8,6", "2,2;2,2", 0); }
OPS_TEST(mae_loss_all_devices) { run_kind(SK_OP_MAE_LOSS, "8,6;8,6", "4,2;4,2", 0); }

/* ---- reductions over a split axis ------------------------------------------------------------- */

static void run_reduce(sk_op_kind kind, const char *strategy, int naxis, int a0, int a1, bool keep_dims, int gen) {
  op_case c = mk(kind, "4,6,4", strategy, 0);
  set_axes(&c, naxis, a0, a1);
  c.desc.keep_dims = keep_dims, c.gen[0] = gen;
  expect_fwd(&c, SK_COLL_ALLREDUCE);
  run_case(&c);
}

OPS_TEST(reduce_sum_split_axis_repeat) { run_reduce(SK_OP_REDUCE_SUM, "2,2,1", 1, 1, 0, false, GEN_REAL); }
OPS_TEST(reduce_sum_two_axes_keep_dims) { run_reduce(SK_OP_REDUCE_SUM, "2,2,2", 2, 1, 2, true, GEN_REAL); }
OPS_TEST(reduce_mean_split_axis) { run_reduce(SK_OP_REDUCE_MEAN, "2,2,2", 1, 0, 0, false, GEN_REAL); }
OPS_TEST(reduce_mean_all_keep_dims_repeat) { run_reduce(SK_OP_REDUCE_MEAN, "2,2,1", 0, 0, 0, true, GEN_REAL); }
OPS_TEST(reduce_max_two_split_axes_ties_keep_dims) { run_reduce(SK_OP_REDUCE_MAX, "1,2,4", 2, 1, 2, true, GEN_COARSE); }
OPS_TEST(reduce_max_last_axis_repeat) { run_reduce(SK_OP_REDUCE_MAX, "2,1,2", 1, -1, 0, false, GEN_COARSE); }

/* ---- layout operators ------------------------------------------------------------------------- */

OPS_TEST(transpose_repeat) {
  op_case c = mk(SK_OP_TRANSPOSE, "4,6,2", "2,2,1", 0);
  c.desc.perm[0] = 2, c.desc.perm[1] = 0, c.desc.perm[2] = 1;
  run_case(&c);
}
OPS_TEST(flatten_repeat) { run_kind(SK_OP_FLATTEN, "8,2,3", "4,1,1", 0); }
/* A Reshape that follows its input (desc.follows_input, as the compiler plans a strategy-less
   Reshape in a network): the strategy carries the input's cut. */
static op_case mk_follow(const char *shapes, const char *cut, const char *target) {
  op_case c = mk(SK_OP_RESHAPE, shapes, cut, 0);
  c.desc.has_strategy = false, c.desc.follows_input = true;
  set_outputs(&c, target);
  expect_fwd(&c, SK_COLL_NONE);
  return c;
}
/* its kernel reads the cut of dim 2 (inside output dim 1) whole */
OPS_TEST(reshape_follow_gathers_split_dim_repeat) {
  op_case c = mk_follow("4,6,2", "2,1,2", "4,12");
  run_case(&c);
}
/* a cut of a dim that starts an output dim carries over: no data moves */
OPS_TEST(reshape_follow_carries_cut_repeat) {
  op_case c = mk_follow("4,6,2", "2,2,1", "4,12");
  run_case(&c);
}
OPS_TEST(reshape_follow_rows_regrouped) {
  op_case c = mk_follow("8,4", "2,4", "4,8");
  run_case(&c);
}
/* Its own strategy (master's ReshapeInfo): the output is whole on every device, the kernel reads
   the whole input, the input's gradient is sliced back. */
OPS_TEST(reshape_own_strategy_whole_output) {
  op_case c = mk(SK_OP_RESHAPE, "4,6,2", "2,2,1", 0);
  set_outputs(&c, "4,12");
  expect_fwd(&c, SK_COLL_NONE);
  run_case(&c);
}
OPS_TEST(reshape_own_strategy_repeat_right) {
  op_case c = mk(SK_OP_RESHAPE, "8,4", "2,1", 0);
  set_outputs(&c, "32");
  run_case(&c);
}
OPS_TEST(expand_dims_repeat) {
  op_case c = mk(SK_OP_EXPAND_DIMS, "4,6", "2,2", 0);
  set_axes(&c, 1, 1, 0);
  run_case(&c);
}
OPS_TEST(expand_dims_last_repeat_left) {
  op_case c = mk(SK_OP_EXPAND_DIMS, "4,6", "2,2", 0);
  set_axes(&c, 1, -1, 0);
  c.desc.repeat_left = true;
  run_case(&c);
}

/* ---- lookups: OneHot (forward only: no real input), Gather (the table is a parameter) ----------- */

static void run_one_hot(const char *shapes, const char *strategy, int axis, int64_t depth) {
  op_case c = mk(SK_OP_ONE_HOT, shapes, strategy, 0);
  as_index(&c, 0, depth);
  set_axes(&c, 1, axis, 0);
  c.desc.depth = depth, c.fwd_only = true;
  run_case(&c);
}

OPS_TEST(one_hot_depth_split_repeat) { run_one_hot("8;;", "2,2;;", -1, 6); }
OPS_TEST(one_hot_axis0_depth_split) { run_one_hot("8;;", "2,4;;", 0, 6); }
OPS_TEST(one_hot_2d_indices_repeat) { run_one_hot("4,2;;", "2,1,1;;", -1, 5); }

static void run_gather(const char *shapes, const char *strategy, int axis, int64_t entries, sk_coll_kind fwd) {
  op_case c = mk(SK_OP_GATHER, shapes, strategy, 0x1);
  expect_fwd(&c, fwd);
  as_index(&c, 1, entries);
  set_axes(&c, 1, axis, 0);
  run_case(&c);
}

OPS_TEST(gather_rows_reduce_scatter_repeat) { run_gather("8,4;8", "4,1;1", 0, 8, SK_COLL_REDUCE_SCATTER); }
OPS_TEST(gather_rows_allreduce_repeat) { run_gather("8,4;6", "4,1;1", 0, 8, SK_COLL_ALLREDUCE); }
OPS_TEST(gather_rows_and_columns_2d_indices) { run_gather("8,4;4,3", "2,4;1,1", 0, 8, SK_COLL_REDUCE_SCATTER); }
OPS_TEST(gather_columns_indices_split) { run_gather("8,4;6", "1,4;2", 0, 8, SK_COLL_NONE); }
OPS_TEST(gather_indices_split_repeat) { run_gather("8,4;8", "1,1;4", 0, 8, SK_COLL_NONE); }
OPS_TEST(gather_axis1) { run_gather("4,8;6", "2,1;2", 1, 8, SK_COLL_NONE); }
/* MindSpore's "shard batch and axis": the table's rows cut 2 ways, the indices' rows 4 ways
   (2 * 4 = 8 devices). Each device looks up its batch slice in its rows (the kernels' offset is
   its rows' start), the forward AllReduce along the row axis completes the output, and the
   table's Mirror along the batch axis sums the batch slices' gradients. */
OPS_TEST(gather_shard_batch_and_axis) { run_gather("8,4;4,3", "2,1;4,1", 0, 8, SK_COLL_ALLREDUCE); }

/* ---- data input: slices only -------------------------------------------------------------------- */

OPS_TEST(get_next) {
  op_case c = mk(SK_OP_GET_NEXT, NULL, NULL, 0);
  set_outputs(&c, "16,4;16");
  c.fwd_only = true;
  run_case(&c);
}
OPS_TEST(virtual_dataset_repeat_left) {
  op_case c = mk(SK_OP_VIRTUAL_DATASET, "16,4;16", "4,1;4", 0);
  c.fwd_only = true;
  run_case(&c);
}
OPS_TEST(get_next_full_batch) {
  op_case c = mk(SK_OP_GET_NEXT, NULL, NULL, 0);
  set_outputs(&c, "16,4;16");
  c.desc.full_batch = true, c.fwd_only = true;
  run_case(&c);
}
