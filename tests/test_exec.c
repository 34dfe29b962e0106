/* sk_exec.h: every operator kind with a backward, built as a one-operator graph and run through
   sk_exec_forward / sk_exec_backward in f64, against central differences of the forward (the
   weighted sum <r, y> for a random upstream gradient r); inputs that take no gradient are never
   written; the operator-named error prefix; Dropout's inference mode and seeds. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_exec.h"

/* ---- helpers ------------------------------------------------------------------------------ */

#define OK(call)                                                               \
  do {                                                                         \
    sk_error e_;                                                               \
    memset(&e_, 0, sizeof e_);                                                 \
    sk_result r_ = (call);                                                     \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg); \
  } while (0)
#define E (&e_) /* OK passes &e_ as the error */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* xorshift64: deterministic, in [0, 1) */
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* A one-operator graph and the buffers sk_exec runs it on. */
typedef struct xcase {
  sk_graph g;
  int opi;
  sk_exec_arg in[SK_OP_MAX_INPUTS], out[SK_OP_MAX_OUTPUTS];
  void *dx[SK_OP_MAX_INPUTS];
  double *r[SK_OP_MAX_OUTPUTS]; /* the upstream gradient of each output that takes one */
  int ngrad;                    /* outputs 0..ngrad-1 take one */
  sk_exec_facts f;
} xcase;

static void xc_begin(xcase *c) {
  memset(c, 0, sizeof *c);
  sk_graph_init(&c->g);
  c->f.seed = 1234; /* Dropout: one fixed mask for every forward of the case */
}

static int xc_in(xcase *c, const char *name, sk_dtype dt, int nd, const int64_t *shape) {
  int id = -1;
  OK(sk_graph_add_input(&c->g, name, dt, nd, shape, &id, E));
  return id;
}
/* An f64 (or other dtype) input of the shape listed: IN(c, "x", SK_F64, 2, 3). */
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIMS(...) ((int)(sizeof SHAPE(__VA_ARGS__) / sizeof(int64_t)))
#define IN(c, name, dt, ...) xc_in((c), (name), (dt), NDIMS(__VA_ARGS__), SHAPE(__VA_ARGS__))

static sk_graph_op mkop(const char *name, sk_op_kind k, int n, int a, int b, int c) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, name);
  op.desc.kind = k, op.ninputs = n;
  op.inputs[0] = a, op.inputs[1] = b, op.inputs[2] = c;
  return op;
}

static int64_t numel(const sk_exec_arg *a) {
  int64_t n = 1;
  for (int d = 0; d < a->ndims; d++) n *= a->shape[d];
  return n;
}

static sk_exec_arg arg_of(const sk_graph *g, int t) {
  sk_exec_arg a;
  memset(&a, 0, sizeof a);
  a.dtype = g->tensors[t].dtype, a.ndims = g->tensors[t].ndims;
  memcpy(a.shape, g->tensors[t].shape, sizeof a.shape);
  a.data = calloc((size_t)sk_graph_numel(g, t) + 1, 8); /* 8 bytes: room for any dtype, never 0 */
  cr_assert(a.data);
  return a;
}

static const sk_graph_op *xc_opp(const xcase *c) { return &c->g.ops[c->opi]; }

/* Adds op, gives every input and output a buffer (float inputs uniform in [lo, hi], integer
   ones zero for the caller to set) and every input a gradient buffer. */
static void xc_op(xcase *c, const sk_graph_op *op, double lo, double hi) {
  OK(sk_graph_add_op(&c->g, op, &c->opi, E));
  const sk_graph_op *o = xc_opp(c);
  for (int k = 0; k < o->ninputs; k++) {
    c->in[k] = arg_of(&c->g, o->inputs[k]);
    c->dx[k] = calloc((size_t)numel(&c->in[k]) + 1, 8);
    cr_assert(c->dx[k]);
    if (c->in[k].dtype == SK_F64)
      for (int64_t i = 0; i < numel(&c->in[k]); i++) ((double *)c->in[k].data)[i] = lo + (hi - lo) * urand();
  }
  for (int k = 0; k < o->noutputs; k++) c->out[k] = arg_of(&c->g, o->outputs[k]);
  c->ngrad = o->desc.kind == SK_OP_VIRTUAL_DATASET ? o->noutputs : 1;
}

static void xc_end(xcase *c) {
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) free(c->in[k].data), free(c->dx[k]);
  for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++) free(c->out[k].data), free(c->r[k]);
  sk_graph_free(&c->g);
}

static double *f64(const xcase *c, int k) { return (double *)c->in[k].data; }
static int32_t *i32(const xcase *c, int k) { return (int32_t *)c->in[k].data; }

/* Moves input k's values at least `gap` away from 0, keeping their signs: no kink of ReLU,
   PReLU or |.| lies within a finite-difference step. */
static void away_from_zero(xcase *c, int k, double gap) {
  for (int64_t i = 0; i < numel(&c->in[k]); i++) f64(c, k)[i] += f64(c, k)[i] < 0 ? -gap : gap;
}

/* L = sum over the outputs that take a gradient of <r, y>. */
static double xc_loss(xcase *c) {
  OK(sk_exec_forward(NULL, xc_opp(c), &c->f, c->in, c->out, E));
  double s = 0;
  for (int o = 0; o < c->ngrad; o++)
    for (int64_t i = 0; i < numel(&c->out[o]); i++) s += c->r[o][i] * ((const double *)c->out[o].data)[i];
  return s;
}

/* Central differences with h = 1e-6 in f64 (truncation ~h^2, rounding ~1e-16 / h): 1e-6
   relative to 1 + |gradient| leaves a wide margin and catches any wrong term. */
static void fd_input(xcase *c, int k, const char *what) {
  const double h = 1e-6, tol = 1e-6;
  double *x = f64(c, k);
  const double *ana = (const double *)c->dx[k];
  for (int64_t i = 0; i < numel(&c->in[k]); i++) {
    double keep = x[i];
    x[i] = keep + h;
    double lp = xc_loss(c);
    x[i] = keep - h;
    double lm = xc_loss(c);
    x[i] = keep;
    double num = (lp - lm) / (2 * h);
    cr_assert(fabs(num - ana[i]) <= tol * (1 + fabs(num)), "%s: d input %d [%lld]: analytic %.12g, numeric %.12g", what,
              k, (long long)i, ana[i], num);
  }
}

/* Forward, backward with a random r, then every differentiable input against central
   differences; an input sk_exec_differentiable refuses must keep its gradient buffer's bytes. */
static void xc_check(xcase *c, const char *what) {
  const sk_graph_op *op = xc_opp(c);
  for (int o = 0; o < c->ngrad; o++) {
    int64_t n = numel(&c->out[o]);
    cr_assert((c->r[o] = malloc(sizeof(double) * (size_t)n)));
    for (int64_t i = 0; i < n; i++) c->r[o][i] = 2 * urand() - 1;
    c->out[o].grad = c->r[o];
  }
  OK(sk_exec_forward(NULL, op, &c->f, c->in, c->out, E));
  size_t bytes[SK_OP_MAX_INPUTS];
  for (int k = 0; k < op->ninputs; k++) {
    bytes[k] = (size_t)numel(&c->in[k]) * sk_dtype_size(c->in[k].dtype);
    memset(c->dx[k], 0xA5, bytes[k]);
  }
  OK(sk_exec_backward(NULL, op, &c->f, c->in, c->out, c->dx, E));
  for (int k = 0; k < op->ninputs; k++) {
    if (sk_exec_differentiable(op, k)) {
      cr_assert_eq(c->in[k].dtype, SK_F64, "%s: input %d is differentiable but not f64", what, k);
      fd_input(c, k, what);
      continue;
    }
    for (size_t b = 0; b < bytes[k]; b++)
      cr_assert_eq(((const unsigned char *)c->dx[k])[b], 0xA5, "%s: input %d takes no gradient but byte %zu was written",
                   what, k, b);
  }
}

/* ---- products ------------------------------------------------------------------------------- */

Test(exec, matmul_every_transpose_flag) {
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t >> 1;
    xcase c;
    xc_begin(&c);
    int x = ta ? IN(&c, "x", SK_F64, 3, 4) : IN(&c, "x", SK_F64, 4, 3);
    int w = tb ? IN(&c, "w", SK_F64, 5, 3) : IN(&c, "w", SK_F64, 3, 5);
    sk_graph_op op = mkop("mm", SK_OP_MATMUL, 2, x, w, 0);
    op.desc.transpose_a = ta, op.desc.transpose_b = tb;
    xc_op(&c, &op, -1, 1);
    xc_check(&c, ta ? (tb ? "MatMul ta tb" : "MatMul ta") : (tb ? "MatMul tb" : "MatMul"));
    xc_end(&c);
  }
}

Test(exec, batch_matmul_broadcast_batch) {
  for (int t = 0; t < 2; t++) {
    xcase c;
    xc_begin(&c);
    /* batch [2,1] against [3]: each input repeated along a batch dim of the other */
    int a = t ? IN(&c, "a", SK_F64, 2, 1, 4, 3) : IN(&c, "a", SK_F64, 2, 1, 3, 4);
    int b = t ? IN(&c, "b", SK_F64, 3, 2, 4) : IN(&c, "b", SK_F64, 3, 4, 2);
    sk_graph_op op = mkop("bmm", SK_OP_BATCH_MATMUL, 2, a, b, 0);
    op.desc.transpose_a = op.desc.transpose_b = t;
    xc_op(&c, &op, -1, 1);
    xc_check(&c, t ? "BatchMatMul transposed" : "BatchMatMul");
    xc_end(&c);
  }
}

Test(exec, dense_with_and_without_bias) {
  for (int n = 2; n <= 3; n++) {
    xcase c;
    xc_begin(&c);
    int x = IN(&c, "x", SK_F64, 4, 3), w = IN(&c, "w", SK_F64, 5, 3), b = IN(&c, "b", SK_F64, 5);
    sk_graph_op op = mkop("dense", SK_OP_DENSE, n, x, w, b);
    xc_op(&c, &op, -1, 1);
    xc_check(&c, n == 3 ? "Dense with bias" : "Dense");
    xc_end(&c);
  }
}

/* ---- element-wise ----------------------------------------------------------------------------- */

Test(exec, relu_gelu_tanh_cast_sigmoid_silu) {
  sk_op_kind kinds[6] = {SK_OP_RELU, SK_OP_GELU, SK_OP_TANH, SK_OP_CAST, SK_OP_SIGMOID, SK_OP_SILU};
  for (int k = 0; k < 6; k++) {
    xcase c;
    xc_begin(&c);
    int x = IN(&c, "x", SK_F64, 3, 7);
    sk_graph_op op = mkop("u", kinds[k], 1, x, 0, 0);
    op.out_dtype[0] = SK_F64; /* Cast f64 -> f64 */
    xc_op(&c, &op, -2, 2);
    away_from_zero(&c, 0, 0.05);
    xc_check(&c, sk_op_kind_name(kinds[k]));
    xc_end(&c);
  }
}

Test(exec, binary_ops_two_way_broadcast) {
  sk_op_kind kinds[5] = {SK_OP_ADD, SK_OP_SUB, SK_OP_MUL, SK_OP_DIV, SK_OP_POW};
  for (int k = 0; k < 5; k++) {
    xcase c;
    xc_begin(&c);
    int a = IN(&c, "a", SK_F64, 2, 1, 3), b = IN(&c, "b", SK_F64, 4, 1); /* to [2, 4, 3] */
    sk_graph_op op = mkop("bin", kinds[k], 2, a, b, 0);
    xc_op(&c, &op, 0.5, 2); /* positive: Div's 1/b and Pow's ln a stay smooth */
    xc_check(&c, sk_op_kind_name(kinds[k]));
    xc_end(&c);
  }
}

Test(exec, bias_add_and_prelu) {
  for (int t = 0; t < 2; t++) { /* BiasAdd along dim 1 of [2,3,4], and of a 2-D x */
    xcase c;
    xc_begin(&c);
    int x = t ? IN(&c, "x", SK_F64, 4, 5) : IN(&c, "x", SK_F64, 2, 3, 4);
    int b = t ? IN(&c, "b", SK_F64, 5) : IN(&c, "b", SK_F64, 3);
    sk_graph_op op = mkop("ba", SK_OP_BIAS_ADD, 2, x, b, 0);
    xc_op(&c, &op, -1, 1);
    xc_check(&c, "BiasAdd");
    xc_end(&c);
  }
  for (int t = 0; t < 2; t++) { /* PReLU per channel and one shared slope */
    xcase c;
    xc_begin(&c);
    int x = IN(&c, "x", SK_F64, 2, 3, 4), w = t ? IN(&c, "w", SK_F64, 1) : IN(&c, "w", SK_F64, 3);
    sk_graph_op op = mkop("pr", SK_OP_PRELU, 2, x, w, 0);
    xc_op(&c, &op, -1, 1);
    away_from_zero(&c, 0, 0.05);
    xc_check(&c, t ? "PReLU shared" : "PReLU");
    xc_end(&c);
  }
}

Test(exec, dropout_with_its_fixed_mask) {
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 5, 8);
  sk_graph_op op = mkop("drop", SK_OP_DROPOUT, 1, x, 0, 0);
  op.keep_prob = 0.7;
  xc_op(&c, &op, -1, 1);
  xc_check(&c, "Dropout");
  /* the check means something only if the mask both keeps and drops */
  const uint8_t *m = (const uint8_t *)c.out[1].data;
  int kept = 0;
  for (int i = 0; i < 40; i++) kept += m[i];
  cr_assert(kept > 10 && kept < 40, "mask keeps %d of 40", kept);
  xc_end(&c);
}

/* ---- along an axis ---------------------------------------------------------------------------- */

Test(exec, softmax_log_softmax_l2_normalize) {
  sk_op_kind kinds[3] = {SK_OP_SOFTMAX, SK_OP_LOG_SOFTMAX, SK_OP_L2_NORMALIZE};
  for (int k = 0; k < 3; k++)
    for (int a = 0; a < 2; a++) { /* the default axis, then axis 1 */
      xcase c;
      xc_begin(&c);
      int x = IN(&c, "x", SK_F64, 2, 3, 4);
      sk_graph_op op = mkop("ax", kinds[k], 1, x, 0, 0);
      if (a) op.desc.naxis = 1, op.desc.axis[0] = 1;
      xc_op(&c, &op, -2, 2);
      xc_check(&c, sk_op_kind_name(kinds[k]));
      xc_end(&c);
    }
}

Test(exec, layer_norm_x_gamma_beta) {
  for (int t = 0; t < 2; t++) { /* begin_norm_axis 1 (the default) and -1 */
    xcase c;
    xc_begin(&c);
    int x = IN(&c, "x", SK_F64, 2, 3, 4);
    int g = t ? IN(&c, "gamma", SK_F64, 4) : IN(&c, "gamma", SK_F64, 3, 4);
    int b = t ? IN(&c, "beta", SK_F64, 4) : IN(&c, "beta", SK_F64, 3, 4);
    sk_graph_op op = mkop("ln", SK_OP_LAYER_NORM, 3, x, g, b);
    if (t) op.desc.naxis = 1, op.desc.axis[0] = -1;
    xc_op(&c, &op, -1, 1);
    xc_check(&c, "LayerNorm");
    xc_end(&c);
  }
}

/* RmsNorm: gamma over x's last dims (its rank says how many); outputs y and rstd. */
Test(exec, rms_norm_x_gamma) {
  for (int t = 0; t < 2; t++) {
    xcase c;
    xc_begin(&c);
    int x = IN(&c, "x", SK_F64, 2, 3, 4);
    int g = t ? IN(&c, "gamma", SK_F64, 4) : IN(&c, "gamma", SK_F64, 3, 4);
    sk_graph_op op = mkop("rms", SK_OP_RMS_NORM, 2, x, g, 0);
    op.epsilon = 1e-5;
    xc_op(&c, &op, -1, 1);
    xc_check(&c, "RmsNorm");
    xc_end(&c);
  }
}

/* ---- losses ----------------------------------------------------------------------------------- */

/* Rows of soft labels, each a distribution over the classes. */
static void soft_labels(double *lab, int64_t rows, int64_t classes) {
  for (int64_t b = 0; b < rows; b++) {
    double s = 0;
    for (int64_t k = 0; k < classes; k++) s += (lab[b * classes + k] = 0.1 + urand());
    for (int64_t k = 0; k < classes; k++) lab[b * classes + k] /= s;
  }
}

Test(exec, softmax_cross_entropy_dense_sparse_and_with_logits) {
  for (int t = 0; t < 4; t++) { /* dense labels, sparse i32, sparse i64, WithLogits */
    xcase c;
    xc_begin(&c);
    int z = IN(&c, "z", SK_F64, 4, 5);
    int y = t == 0 || t == 3 ? IN(&c, "y", SK_F64, 4, 5) : IN(&c, "y", t == 1 ? SK_I32 : SK_I64, 4);
    sk_graph_op op = mkop("ce", t == 3 ? SK_OP_SOFTMAX_CE_LOGITS : SK_OP_SOFTMAX_CE, 2, z, y, 0);
    xc_op(&c, &op, -2, 2);
    const int64_t cls[4] = {3, 0, 4, 3};
    for (int i = 0; i < 4; i++) {
      if (t == 1) i32(&c, 1)[i] = (int32_t)cls[i];
      if (t == 2) ((int64_t *)c.in[1].data)[i] = cls[i];
    }
    if (t == 0 || t == 3) soft_labels(f64(&c, 1), 4, 5);
    const char *what[4] = {"SoftmaxCrossEntropy dense", "SoftmaxCrossEntropy i32", "SoftmaxCrossEntropy i64",
                           "SoftmaxCrossEntropyWithLogits"};
    xc_check(&c, what[t]);
    xc_end(&c);
  }
}

Test(exec, mae_loss_both_inputs) {
  xcase c;
  xc_begin(&c);
  int p = IN(&c, "p", SK_F64, 3, 4), y = IN(&c, "y", SK_F64, 3, 4);
  sk_graph_op op = mkop("mae", SK_OP_MAE_LOSS, 2, p, y, 0);
  xc_op(&c, &op, -1, 1);
  for (int i = 0; i < 12; i++) { /* p - y at least 0.1 from the kink of |.| */
    double d = f64(&c, 0)[i] - f64(&c, 1)[i];
    f64(&c, 0)[i] = f64(&c, 1)[i] + (d < 0 ? d - 0.1 : d + 0.1);
  }
  xc_check(&c, "MAELoss");
  xc_end(&c);
}

/* Labels [3, 1] and [4] broadcast against the prediction [3, 4]. */
Test(exec, mae_loss_broadcast_labels) {
  for (int t = 0; t < 2; t++) {
    xcase c;
    xc_begin(&c);
    int p = IN(&c, "p", SK_F64, 3, 4), y = t ? IN(&c, "y", SK_F64, 4) : IN(&c, "y", SK_F64, 3, 1);
    sk_graph_op op = mkop("mae", SK_OP_MAE_LOSS, 2, p, y, 0);
    xc_op(&c, &op, -1, 1);
    away_from_zero(&c, 0, 2.5); /* |p| > 2.5 > |y|: p - y keeps clear of the kink */
    xc_check(&c, t ? "MAELoss, labels [4]" : "MAELoss, labels [3,1]");
    xc_end(&c);
  }
}

Test(exec, virtual_loss_sums) {
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 2, 3, 4);
  sk_graph_op op = mkop("vl", SK_OP_VIRTUAL_LOSS, 1, x, 0, 0);
  xc_op(&c, &op, -1, 1);
  xc_check(&c, "VirtualLoss");
  xc_end(&c);
}

/* ---- reductions and data movement -------------------------------------------------------------- */

Test(exec, reductions_with_and_without_keep_dims) {
  sk_op_kind kinds[3] = {SK_OP_REDUCE_SUM, SK_OP_REDUCE_MEAN, SK_OP_REDUCE_MAX};
  const int axes[4] = {1, -1, 0, 99}; /* 99: no axis, every dim */
  for (int k = 0; k < 3; k++)
    for (int a = 0; a < 4; a++)
      for (int keep = 0; keep < 2; keep++) {
        xcase c;
        xc_begin(&c);
        int x = IN(&c, "x", SK_F64, 2, 3, 4);
        sk_graph_op op = mkop("red", kinds[k], 1, x, 0, 0);
        if (axes[a] != 99) op.desc.naxis = 1, op.desc.axis[0] = axes[a];
        op.desc.keep_dims = keep;
        xc_op(&c, &op, -1, 1); /* 24 random values: ReduceMax has no ties within a step */
        xc_check(&c, sk_op_kind_name(kinds[k]));
        xc_end(&c);
      }
}

/* TmpIdentity is a copy too, of the same shape. */
Test(exec, reshapes_and_transpose) {
  sk_op_kind kinds[5] = {SK_OP_FLATTEN, SK_OP_RESHAPE, SK_OP_EXPAND_DIMS, SK_OP_TRANSPOSE, SK_OP_TMP_IDENTITY};
  for (int k = 0; k < 5; k++) {
    xcase c;
    xc_begin(&c);
    int x = IN(&c, "x", SK_F64, 2, 3, 4);
    sk_graph_op op = mkop("mv", kinds[k], 1, x, 0, 0);
    op.desc.noutputs = 1, op.desc.out_ndims[0] = 2, op.desc.out_shape[0][0] = 4, op.desc.out_shape[0][1] = 6;
    op.desc.naxis = 1, op.desc.axis[0] = 1;
    op.desc.perm[0] = 2, op.desc.perm[1] = 0, op.desc.perm[2] = 1;
    if (kinds[k] != SK_OP_RESHAPE) op.desc.noutputs = 0;
    xc_op(&c, &op, -1, 1);
    xc_check(&c, sk_op_kind_name(kinds[k]));
    xc_end(&c);
  }
}

Test(exec, gather_table_gradient_sums_repeats) {
  for (int t = 0; t < 3; t++) { /* axis 0 with i32, axis 0 with i64, axis 1 */
    xcase c;
    xc_begin(&c);
    int tab = t == 2 ? IN(&c, "table", SK_F64, 3, 6) : IN(&c, "table", SK_F64, 6, 3);
    int idx = IN(&c, "idx", t == 1 ? SK_I64 : SK_I32, 2, 3);
    sk_graph_op op = mkop("gather", SK_OP_GATHER, 2, tab, idx, 0);
    if (t == 2) op.desc.naxis = 1, op.desc.axis[0] = 1;
    xc_op(&c, &op, -1, 1);
    const int64_t rows[6] = {0, 5, 2, 2, 0, 3}; /* repeats: their gradients add */
    for (int i = 0; i < 6; i++) {
      if (t == 1) ((int64_t *)c.in[1].data)[i] = rows[i];
      else i32(&c, 1)[i] = (int32_t)rows[i];
    }
    xc_check(&c, t == 2 ? "Gather axis 1" : "Gather");
    xc_end(&c);
  }
}

Test(exec, virtual_dataset_passes_every_gradient) {
  xcase c;
  xc_begin(&c);
  int a = IN(&c, "a", SK_F64, 4, 3), b = IN(&c, "b", SK_F64, 4, 2);
  sk_graph_op op = mkop("vd", SK_OP_VIRTUAL_DATASET, 2, a, b, 0);
  xc_op(&c, &op, -1, 1);
  cr_assert_eq(c.ngrad, 2);
  xc_check(&c, "VirtualDataset");
  xc_end(&c);
}

/* "No gradient flows from that output" (grad NULL) is a zero gradient: the backward still
   overwrites dx, which the trainer then takes as written. */
Test(exec, output_without_gradient_gives_zero) {
  xcase c;
  xc_begin(&c);
  int a = IN(&c, "a", SK_F64, 4, 3), b = IN(&c, "b", SK_F64, 4, 2);
  sk_graph_op op = mkop("vd", SK_OP_VIRTUAL_DATASET, 2, a, b, 0);
  xc_op(&c, &op, -1, 1);
  double r0[12];
  for (int i = 0; i < 12; i++) r0[i] = i + 1;
  c.out[0].grad = r0, c.out[1].grad = NULL;
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  memset(c.dx[0], 0xA5, 12 * sizeof(double)), memset(c.dx[1], 0xA5, 8 * sizeof(double));
  OK(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, c.dx, E));
  for (int i = 0; i < 12; i++) cr_assert_eq(((double *)c.dx[0])[i], r0[i]);
  for (int i = 0; i < 8; i++) cr_assert_eq(((double *)c.dx[1])[i], 0.0, "dx[1][%d] = %g", i, ((double *)c.dx[1])[i]);
  xc_end(&c);
}

/* The same for the losses: a NULL upstream gradient is zero, not the kernels' "NULL: 1". */
Test(exec, loss_without_upstream_gradient_gives_zero) {
  sk_op_kind kinds[4] = {SK_OP_SOFTMAX_CE, SK_OP_SOFTMAX_CE, SK_OP_SOFTMAX_CE_LOGITS, SK_OP_MAE_LOSS};
  for (int t = 0; t < 4; t++) {
    xcase c;
    xc_begin(&c);
    int z = IN(&c, "z", SK_F64, 4, 5), y = t == 1 ? IN(&c, "y", SK_I32, 4) : IN(&c, "y", SK_F64, 4, 5);
    sk_graph_op op = mkop("loss", kinds[t], 2, z, y, 0);
    xc_op(&c, &op, 0.1, 0.9);
    OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
    for (int k = 0; k < 2; k++) memset(c.dx[k], 0xA5, (size_t)numel(&c.in[k]) * sk_dtype_size(c.in[k].dtype));
    OK(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, c.dx, E));
    for (int k = 0; k < 2; k++)
      for (int i = 0; k < 1 + (t == 3) && i < 20; i++) /* the inputs that take a gradient */
        cr_assert_eq(((double *)c.dx[k])[i], 0.0, "%s (%d): dx[%d][%d] = %g", sk_op_kind_name(kinds[t]), t, k, i,
                     ((double *)c.dx[k])[i]);
    xc_end(&c);
  }
}

/* ---- contracts -------------------------------------------------------------------------------- */

/* A NULL dx[k] is not computed; the others get the same bits as when all are asked for. */
Test(exec, null_dx_skips_that_input_only) {
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 4, 3), w = IN(&c, "w", SK_F64, 3, 5);
  sk_graph_op op = mkop("mm", SK_OP_MATMUL, 2, x, w, 0);
  xc_op(&c, &op, -1, 1);
  double r[20], dw[15];
  for (int i = 0; i < 20; i++) r[i] = urand();
  c.out[0].grad = r;
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  OK(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, c.dx, E));
  void *only_w[2] = {NULL, dw};
  OK(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, only_w, E));
  cr_assert(!memcmp(dw, c.dx[1], sizeof dw), "dw differs when dx is not asked for");
  xc_end(&c);
}

Test(exec, differentiable_inputs) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  struct { sk_op_kind kind; int k; bool want; } t[] = {
      {SK_OP_MATMUL, 0, true},         {SK_OP_MATMUL, 1, true},     {SK_OP_SOFTMAX_CE, 0, true},
      {SK_OP_SOFTMAX_CE, 1, false},    {SK_OP_SOFTMAX_CE_LOGITS, 1, false}, {SK_OP_GATHER, 0, true},
      {SK_OP_GATHER, 1, false},        {SK_OP_ONE_HOT, 0, false},   {SK_OP_MAE_LOSS, 1, true},
      {SK_OP_LAYER_NORM, 2, true},     {SK_OP_GET_NEXT, 0, false}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    op.desc.kind = t[i].kind;
    cr_assert_eq(sk_exec_differentiable(&op, t[i].k), t[i].want, "%s input %d", sk_op_kind_name(t[i].kind), t[i].k);
  }
}

Test(exec, errors_name_the_operator) {
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 4, 3), w = IN(&c, "w", SK_F64, 3, 5);
  sk_graph_op op = mkop("my_matmul", SK_OP_MATMUL, 2, x, w, 0);
  xc_op(&c, &op, -1, 1);
  sk_error e;
  sk_exec_arg bad[2] = {c.in[0], c.in[1]};
  bad[1].data = NULL;
  cr_assert_eq(sk_exec_forward(NULL, xc_opp(&c), &c.f, bad, c.out, &e), SK_ERR_INVALID_ARGUMENT);
  const char *pre = "operator 'my_matmul' (MatMul) forward: ";
  cr_assert(!strncmp(e.msg, pre, strlen(pre)) && strlen(e.msg) > strlen(pre) + 5, "message '%s'", e.msg);
  bad[1] = c.in[1], bad[1].shape[0] = 4; /* the contraction no longer matches */
  cr_assert_eq(sk_exec_forward(NULL, xc_opp(&c), &c.f, bad, c.out, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(!strncmp(e.msg, pre, strlen(pre)), "message '%s'", e.msg);
  c.out[0].grad = NULL; /* MatMul's backward needs its upstream gradient */
  cr_assert_eq(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, c.dx, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(!strncmp(e.msg, "operator 'my_matmul' (MatMul) backward: ", 40), "message '%s'", e.msg);
  cr_assert_eq(sk_exec_forward(NULL, NULL, &c.f, c.in, c.out, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(e.msg, "exec: NULL argument");
  cr_assert_eq(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  xc_end(&c);
}

/* A 63-character name and a long kernel message: the prefix is whole, the end cut, the
   message terminated. */
Test(exec, long_messages_are_cut_not_overrun) {
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 4, 3);
  sk_graph_op op = mkop("", SK_OP_RELU, 1, x, 0, 0);
  memset(op.name, 'n', 63);
  xc_op(&c, &op, -1, 1);
  sk_error e;
  sk_exec_arg bad = c.in[0];
  bad.data = NULL;
  cr_assert_eq(sk_exec_forward(NULL, xc_opp(&c), &c.f, &bad, c.out, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_lt(strlen(e.msg), sizeof e.msg);
  char pre[128];
  snprintf(pre, sizeof pre, "operator '%s' (ReLU) forward: ", op.name);
  cr_assert(!strncmp(e.msg, pre, strlen(pre)) && strlen(e.msg) > strlen(pre), "message '%s'", e.msg);
  xc_end(&c);
}

/* ---- Dropout ------------------------------------------------------------------------------- */

Test(exec, dropout_inference_is_identity_with_ones_mask) {
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 50, 40);
  sk_graph_op op = mkop("drop", SK_OP_DROPOUT, 1, x, 0, 0);
  op.keep_prob = 0.5;
  xc_op(&c, &op, -1, 1);
  const uint8_t *m = (const uint8_t *)c.out[1].data;
  const double *y = (const double *)c.out[0].data;
  c.f.inference = true;
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  cr_assert(!memcmp(y, c.in[0].data, 2000 * sizeof(double)), "inference Dropout changed its input");
  for (int i = 0; i < 2000; i++) cr_assert_eq(m[i], 1, "inference mask[%d] = %d", i, m[i]);
  c.f.inference = false;
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  int kept = 0;
  for (int i = 0; i < 2000; i++) {
    cr_assert(m[i] <= 1);
    kept += m[i];
    cr_assert(fabs(y[i] - f64(&c, 0)[i] * m[i] / 0.5) <= 1e-15, "y[%d] = %g", i, y[i]);
  }
  cr_assert(kept > 900 && kept < 1100, "keep_prob 0.5 kept %d of 2000", kept);
  xc_end(&c);
}

Test(exec, dropout_seed_differs_across_op_and_step) {
  enum { N = 16 };
  uint64_t s[N * N];
  for (int op = 0; op < N; op++)
    for (int step = 0; step < N; step++) {
      s[op * N + step] = sk_exec_dropout_seed(7, op, step);
      cr_assert_eq(s[op * N + step], sk_exec_dropout_seed(7, op, step), "not a pure function");
    }
  for (int i = 0; i < N * N; i++)
    for (int j = i + 1; j < N * N; j++) cr_assert_neq(s[i], s[j], "op/step %d and %d share seed", i, j);
  cr_assert_neq(sk_exec_dropout_seed(7, 0, 0), sk_exec_dropout_seed(8, 0, 0), "the run seed is ignored");
  cr_assert_neq(sk_exec_dropout_seed(7, 1, 0), sk_exec_dropout_seed(7, 0, 1));
  /* different seeds give different masks through the forward */
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 256);
  sk_graph_op op = mkop("drop", SK_OP_DROPOUT, 1, x, 0, 0);
  xc_op(&c, &op, -1, 1);
  uint8_t m0[256];
  c.f.seed = sk_exec_dropout_seed(7, 0, 0);
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  memcpy(m0, c.out[1].data, sizeof m0);
  c.f.seed = sk_exec_dropout_seed(7, 0, 1);
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  cr_assert(memcmp(m0, c.out[1].data, sizeof m0), "steps 0 and 1 drew the same mask");
  xc_end(&c);
}

/* ---- sharding facts: a device's slice reproduces its part of the unsharded result ---------- */

static sk_exec_arg view(sk_dtype dt, int nd, const int64_t *shape, void *data) {
  sk_exec_arg a;
  memset(&a, 0, sizeof a);
  a.dtype = dt, a.ndims = nd, a.data = data;
  memcpy(a.shape, shape, sizeof(int64_t) * (size_t)nd);
  return a;
}

/* The fused loss over a batch split in two: each half divides by the global batch, so the
   halves' losses sum to the whole one and their gradients are its rows. */
Test(exec, facts_split_batch_loss) {
  xcase c;
  xc_begin(&c);
  int z = IN(&c, "z", SK_F64, 4, 5), y = IN(&c, "y", SK_I32, 4);
  sk_graph_op op = mkop("ce", SK_OP_SOFTMAX_CE, 2, z, y, 0);
  xc_op(&c, &op, -2, 2);
  for (int i = 0; i < 4; i++) i32(&c, 1)[i] = (i * 3) % 5;
  double one = 1, whole, part[2], dz[20];
  c.out[0].grad = &one;
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  OK(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, c.dx, E));
  whole = *(double *)c.out[0].data;
  sk_exec_facts f = c.f;
  f.global_count = 4;
  for (int h = 0; h < 2; h++) {
    sk_exec_arg in[2] = {view(SK_F64, 2, SHAPE(2, 5), f64(&c, 0) + 10 * h), view(SK_I32, 1, SHAPE(2), i32(&c, 1) + 2 * h)};
    sk_exec_arg out[1] = {view(SK_F64, 1, SHAPE(1), &part[h])};
    out[0].grad = &one;
    void *dx[2] = {dz + 10 * h, NULL};
    OK(sk_exec_forward(NULL, xc_opp(&c), &f, in, out, E));
    OK(sk_exec_backward(NULL, xc_opp(&c), &f, in, out, dx, E));
  }
  cr_assert(fabs(part[0] + part[1] - whole) <= 1e-15 * fabs(whole), "halves %.17g + %.17g, whole %.17g", part[0],
            part[1], whole);
  for (int i = 0; i < 20; i++) cr_assert(dz[i] == ((double *)c.dx[0])[i], "dz[%d] differs", i);
  xc_end(&c);
}

/* Gather over a row-split table: each shard looks up its rows (offset) and zeros elsewhere, so
   the shards' outputs sum to the whole; each shard's table gradient is its rows of the whole. */
Test(exec, facts_row_split_gather) {
  xcase c;
  xc_begin(&c);
  int tab = IN(&c, "table", SK_F64, 6, 3), idx = IN(&c, "idx", SK_I32, 5);
  sk_graph_op op = mkop("gather", SK_OP_GATHER, 2, tab, idx, 0);
  xc_op(&c, &op, -1, 1);
  const int32_t rows[5] = {4, 0, 4, 2, 5};
  memcpy(c.in[1].data, rows, sizeof rows);
  double r[15], sum[15] = {0}, part[15], dt[18];
  for (int i = 0; i < 15; i++) r[i] = urand();
  c.out[0].grad = r;
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  OK(sk_exec_backward(NULL, xc_opp(&c), &c.f, c.in, c.out, c.dx, E));
  for (int h = 0; h < 2; h++) {
    sk_exec_facts f = c.f;
    f.offset = 3 * h;
    sk_exec_arg in[2] = {view(SK_F64, 2, SHAPE(3, 3), f64(&c, 0) + 9 * h), c.in[1]};
    sk_exec_arg out[1] = {view(SK_F64, 2, SHAPE(5, 3), part)};
    out[0].grad = r;
    void *dx[2] = {dt + 9 * h, NULL};
    OK(sk_exec_forward(NULL, xc_opp(&c), &f, in, out, E));
    OK(sk_exec_backward(NULL, xc_opp(&c), &f, in, out, dx, E));
    for (int i = 0; i < 15; i++) sum[i] += part[i];
  }
  cr_assert(!memcmp(sum, c.out[0].data, sizeof sum), "the shards' lookups do not sum to the whole");
  cr_assert(!memcmp(dt, c.dx[0], sizeof dt), "the shards' table gradients are not the whole's rows");
  xc_end(&c);
}

/* Dropout on a slice draws exactly that slice of the global mask; OneHot with a class offset
   writes its range of the classes. */
Test(exec, facts_dropout_slice_and_one_hot_offset) {
  xcase c;
  xc_begin(&c);
  int x = IN(&c, "x", SK_F64, 8, 5);
  sk_graph_op op = mkop("drop", SK_OP_DROPOUT, 1, x, 0, 0);
  xc_op(&c, &op, -1, 1);
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  sk_exec_facts f = c.f;
  f.global_ndims = 2, f.global_shape[0] = 8, f.global_shape[1] = 5;
  f.slice.ndims = 2, f.slice.start[0] = 4, f.slice.stop[0] = 8, f.slice.stop[1] = 5;
  uint8_t m[20];
  double y[20];
  sk_exec_arg in[1] = {view(SK_F64, 2, SHAPE(4, 5), f64(&c, 0) + 20)};
  sk_exec_arg out[2] = {view(SK_F64, 2, SHAPE(4, 5), y), view(SK_U8, 2, SHAPE(4, 5), m)};
  OK(sk_exec_forward(NULL, xc_opp(&c), &f, in, out, E));
  cr_assert(!memcmp(m, (uint8_t *)c.out[1].data + 20, 20), "the slice's mask is not the global mask's rows 4..7");
  cr_assert(!memcmp(y, (double *)c.out[0].data + 20, sizeof y));
  xc_end(&c);

  xc_begin(&c);
  int idx = IN(&c, "idx", SK_I64, 4);
  op = mkop("oh", SK_OP_ONE_HOT, 1, idx, 0, 0);
  op.desc.depth = 6, op.out_dtype[0] = SK_F64, op.on_value = 2, op.off_value = -1;
  xc_op(&c, &op, 0, 0);
  const int64_t cls[4] = {5, 0, 3, 2};
  memcpy(c.in[0].data, cls, sizeof cls);
  OK(sk_exec_forward(NULL, xc_opp(&c), &c.f, c.in, c.out, E));
  const double *whole = (const double *)c.out[0].data;
  for (int i = 0; i < 24; i++) cr_assert_eq(whole[i], i % 6 == cls[i / 6] ? 2.0 : -1.0, "one_hot[%d]", i);
  double part[12];
  f = c.f, f.offset = 3; /* this device holds classes 3..5 */
  sk_exec_arg o[1] = {view(SK_F64, 2, SHAPE(4, 3), part)};
  OK(sk_exec_forward(NULL, xc_opp(&c), &f, c.in, o, E));
  for (int i = 0; i < 12; i++) cr_assert_eq(part[i], whole[(i / 3) * 6 + 3 + i % 3], "classes 3..5 [%d]", i);
  xc_end(&c);
}

/* ---- the helpers the trainers share --------------------------------------------------------- */

Test(exec, convert_round_and_grad_flow) {
  const float f[3] = {1.5f, -2.25f, 3.0f};
  double d[3];
  cr_assert(sk_exec_convert(SK_F32, f, SK_F64, d, 3));
  cr_assert(d[0] == 1.5 && d[1] == -2.25 && d[2] == 3.0);
  const int64_t big[2] = {7, -9};
  int32_t small[2];
  cr_assert(sk_exec_convert(SK_I64, big, SK_I32, small, 2));
  cr_assert(small[0] == 7 && small[1] == -9);
  cr_assert(!sk_exec_convert(SK_F32, f, SK_I32, small, 3), "floats do not convert into integers");
  cr_assert(!sk_exec_convert(SK_F32, f, SK_F16, small, 1), "the trainers compute in f32 or f64 only");
  float r[2] = {1.0f + 1.0f / 4096, 1.0f + 1.0f / 128};
  sk_exec_round(SK_F16, r, 1); /* 2^-12 is below f16's ulp at 1 (2^-10): rounds to 1 */
  cr_assert_eq(r[0], 1.0f);
  sk_exec_round(SK_BF16, r + 1, 1); /* 2^-7 is bf16's ulp at 1: kept */
  cr_assert_eq(r[1], 1.0f + 1.0f / 128);
  sk_exec_round(SK_F32, r + 1, 1);
  cr_assert_eq(r[1], 1.0f + 1.0f / 128, "f32 storage changes nothing");
  cr_assert(sk_exec_is_float(SK_BF16) && !sk_exec_is_float(SK_I32));
}
