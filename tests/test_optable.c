/* sk_optable.h: the operator table. Adds no operator. Checks that every kind has a complete row
   (a name and aliases that map back to it and to nothing else, arity, index and gradient
   inputs, a function in every column), then runs every column of every kind's row on one small
   case written by hand -- the sharding rule's outputs, the kernel facts, the forward kernel's
   values, the FLOPs, the search's joint dims -- so that a row naming another operator's function
   fails here, and so does a kind added without a case below. Kinds outside the table are
   refused by name, never routed to a default. (tests/test_exec.c checks every kind's backward
   against finite differences; the backward here is one hand-computed case per family.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sk_exec.h"
#include "sk_optable.h"

#define OK(call)                                                               \
  do {                                                                         \
    sk_error e_;                                                               \
    memset(&e_, 0, sizeof e_);                                                 \
    sk_result r_ = (call);                                                     \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg); \
  } while (0)
#define E (&e_) /* OK passes &e_ as the error */

/* A shape or a list of values as two arguments, their count and the array:
   add_in(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4)). */
#define DIMS(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#define VALS(...) (int)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)), (const double[]){__VA_ARGS__}

enum { CASE_MAX = 16 }; /* elements of any tensor of a case */

/* One operator on tiny tensors with everything its row should give for them. */
typedef struct kcase {
  sk_graph_op op; /* op.desc is what the rule reads: every input, OneHot's scalars too */
  sk_exec_arg in[SK_OP_MAX_INPUTS], out[SK_OP_MAX_OUTPUTS];
  double inbuf[SK_OP_MAX_INPUTS][CASE_MAX], outbuf[SK_OP_MAX_OUTPUTS][CASE_MAX];
  int nwant[SK_OP_MAX_OUTPUTS]; /* -1: the forward leaves output k alone (GetNext's are fed) */
  double want[SK_OP_MAX_OUTPUTS][CASE_MAX];
  double tol;              /* relative to 1 + |want| */
  sk_exec_facts facts;     /* what the forward is given */
  int64_t global_count;    /* what the row's facts give on one device: a loss's divisor */
  int global_ndims;        /* and Dropout's global rank */
  double flops;            /* the forward's */
  const char *space;       /* the joint dims, as space_text writes them */
} kcase;

static int64_t numel_of(int nd, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= shape[d];
  return n;
}

static void store(sk_dtype dt, void *p, int64_t i, double v) {
  if (dt == SK_F64) ((double *)p)[i] = v;
  else if (dt == SK_F32) ((float *)p)[i] = (float)v;
  else if (dt == SK_I32) ((int32_t *)p)[i] = (int32_t)v;
  else if (dt == SK_I64) ((int64_t *)p)[i] = (int64_t)v;
  else if (dt == SK_U8) ((uint8_t *)p)[i] = (uint8_t)v;
  else cr_assert_fail("dtype %d", (int)dt);
}

static double load(sk_dtype dt, const void *p, int64_t i) {
  if (dt == SK_F64) return ((const double *)p)[i];
  if (dt == SK_F32) return ((const float *)p)[i];
  if (dt == SK_I32) return ((const int32_t *)p)[i];
  if (dt == SK_I64) return (double)((const int64_t *)p)[i];
  if (dt == SK_U8) return ((const uint8_t *)p)[i];
  cr_assert_fail("dtype %d", (int)dt);
  return 0;
}

static void set_arg(sk_exec_arg *a, sk_dtype dt, int nd, const int64_t *shape, void *data) {
  cr_assert(nd <= SK_MAX_DIMS && numel_of(nd, shape) <= CASE_MAX);
  a->dtype = dt, a->ndims = nd, a->data = data;
  memcpy(a->shape, shape, sizeof(int64_t) * (size_t)nd);
}

/* The next graph input, its values v. */
static void add_in(kcase *c, sk_dtype dt, int nd, const int64_t *shape, int nv, const double *v) {
  int k = c->op.ninputs++;
  sk_op_desc *d = &c->op.desc;
  d->ninputs = c->op.ninputs, d->ndims[k] = nd;
  memcpy(d->shape[k], shape, sizeof(int64_t) * (size_t)nd);
  set_arg(&c->in[k], dt, nd, shape, c->inbuf[k]);
  cr_assert_eq(nv, numel_of(nd, shape), "input %d: %d values for %lld elements", k, nv, (long long)numel_of(nd, shape));
  for (int i = 0; i < nv; i++) store(dt, c->inbuf[k], i, v[i]);
}

/* Scalar inputs the graph holds as attributes (OneHot's on and off values): desc entries only. */
static void add_scalars(kcase *c, int n) {
  for (int k = 0; k < n; k++) c->op.desc.ndims[c->op.desc.ninputs++] = 0;
}

/* The next output and the values its forward must write. */
static void add_out(kcase *c, sk_dtype dt, int nd, const int64_t *shape, int nv, const double *v) {
  int k = c->op.noutputs++;
  set_arg(&c->out[k], dt, nd, shape, c->outbuf[k]);
  cr_assert_eq(nv, numel_of(nd, shape), "output %d: %d values for %lld elements", k, nv,
               (long long)numel_of(nd, shape));
  c->nwant[k] = nv;
  memcpy(c->want[k], v, sizeof(double) * (size_t)nv);
}

/* GetNext's outputs: their shapes and dtypes are attributes, their data what the caller feeds. */
static void add_fed(kcase *c, sk_dtype dt, int nd, const int64_t *shape) {
  int k = c->op.noutputs++;
  sk_op_desc *d = &c->op.desc;
  set_arg(&c->out[k], dt, nd, shape, c->outbuf[k]);
  c->nwant[k] = -1, c->op.out_dtype[k] = dt;
  d->noutputs = c->op.noutputs, d->out_ndims[k] = nd;
  memcpy(d->out_shape[k], shape, sizeof(int64_t) * (size_t)nd);
}

static void set_axis(kcase *c, int axis) { c->op.desc.naxis = 1, c->op.desc.axis[0] = axis; }

/* ---- one case per kind --------------------------------------------------------------------------- */

/* x [[1,2,3],[4,5,6]], w [[1,0],[0,1],[1,1]]: x w = [[4,5],[10,11]]; 2mnk = 24. */
static void case_matmul(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 3), VALS(1, 2, 3, 4, 5, 6));
  add_in(c, SK_F64, DIMS(3, 2), VALS(1, 0, 0, 1, 1, 1));
  add_out(c, SK_F64, DIMS(2, 2), VALS(4, 5, 10, 11));
  c->flops = 2 * 2 * 2 * 3, c->space = "2,3,2 (0,1)(1,2)";
}

static void case_batch_matmul(kcase *c) { /* MatMul's, in a batch of 1 */
  add_in(c, SK_F64, DIMS(1, 2, 3), VALS(1, 2, 3, 4, 5, 6));
  add_in(c, SK_F64, DIMS(1, 3, 2), VALS(1, 0, 0, 1, 1, 1));
  add_out(c, SK_F64, DIMS(1, 2, 2), VALS(4, 5, 10, 11));
  c->flops = 2 * 2 * 2 * 3, c->space = "1,2,3,2 (0,1,2)(0,2,3)";
}

/* w is [n, k]: x w^T = [[4,5],[10,11]], plus the bias [10, 20]. */
static void case_dense(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 3), VALS(1, 2, 3, 4, 5, 6));
  add_in(c, SK_F64, DIMS(2, 3), VALS(1, 0, 1, 0, 1, 1));
  add_in(c, SK_F64, DIMS(2), VALS(10, 20));
  add_out(c, SK_F64, DIMS(2, 2), VALS(14, 25, 20, 31));
  c->flops = 2 * 2 * 2 * 3, c->space = "2,3,2 (0,1)(2,1)(2)";
}

static void case_relu(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, -2, 3, -4));
  add_out(c, SK_F64, DIMS(2, 2), VALS(1, 0, 3, 0));
  c->flops = 4, c->space = "2,2 (0,1)";
}

/* the tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static void case_gelu(kcase *c) {
  add_in(c, SK_F64, DIMS(2), VALS(1, -1));
  add_out(c, SK_F64, DIMS(2), VALS(0.8411919906082768, -0.15880800939172324));
  c->flops = 2, c->space = "2 (0)";
}

static void case_tanh(kcase *c) {
  add_in(c, SK_F64, DIMS(2), VALS(0, 1));
  add_out(c, SK_F64, DIMS(2), VALS(0, 0.7615941559557649));
  c->flops = 2, c->space = "2 (0)";
}

static void case_cast(kcase *c) { /* f64 -> f32 */
  add_in(c, SK_F64, DIMS(2), VALS(1.5, -2));
  add_out(c, SK_F32, DIMS(2), VALS(1.5, -2));
  c->op.out_dtype[0] = SK_F32;
  c->flops = 2, c->space = "2 (0)";
}

/* keep_prob 1 keeps everything: y = x, the mask all ones (output 1, u8). */
static void case_dropout(kcase *c) {
  add_in(c, SK_F64, DIMS(2), VALS(1, -2));
  add_out(c, SK_F64, DIMS(2), VALS(1, -2));
  add_out(c, SK_U8, DIMS(2), VALS(1, 1));
  c->op.keep_prob = 1, c->facts.seed = 7;
  c->global_ndims = 1, c->flops = 2, c->space = "2 (0)";
}

/* b [10, 20] broadcast along the last dim */
static void case_add(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  add_in(c, SK_F64, DIMS(2), VALS(10, 20));
  add_out(c, SK_F64, DIMS(2, 2), VALS(11, 22, 13, 24));
  c->flops = 4, c->space = "2,2 (0,1)(1)";
}

/* Sub, Mul, Div, Pow of [3, 2] and [2, 3] */
static void binary_case(kcase *c, double y0, double y1) {
  add_in(c, SK_F64, DIMS(2), VALS(3, 2));
  add_in(c, SK_F64, DIMS(2), VALS(2, 3));
  add_out(c, SK_F64, DIMS(2), VALS(y0, y1));
  c->flops = 2, c->space = "2 (0)(0)";
}
static void case_sub(kcase *c) { binary_case(c, 1, -1); }
static void case_mul(kcase *c) { binary_case(c, 6, 6); }
static void case_div(kcase *c) { binary_case(c, 1.5, 2.0 / 3.0); }
static void case_pow(kcase *c) { binary_case(c, 9, 8); }

/* The bias goes along dim 1, the channels: [1,2,3] + [10,20] is not a broadcast. The search's
   joint dims align it from the right (as the search did before the table), so here it takes no
   joint dim. */
static void case_bias_add(kcase *c) {
  add_in(c, SK_F64, DIMS(1, 2, 3), VALS(1, 2, 3, 4, 5, 6));
  add_in(c, SK_F64, DIMS(2), VALS(10, 20));
  add_out(c, SK_F64, DIMS(1, 2, 3), VALS(11, 12, 13, 24, 25, 26));
  c->flops = 6, c->space = "1,2,3 (0,1,2)(-1)";
}

/* The slopes [0.5, 0.25] per channel (dim 1), not per last dim; w takes x's dim 1. */
static void case_prelu(kcase *c) {
  add_in(c, SK_F64, DIMS(1, 2, 2), VALS(1, -2, 3, -4));
  add_in(c, SK_F64, DIMS(2), VALS(0.5, 0.25));
  add_out(c, SK_F64, DIMS(1, 2, 2), VALS(1, -1, 3, -1));
  c->flops = 4, c->space = "1,2,2 (0,1,2)(1)";
}

/* softmax(0, ln 3) = (1/4, 3/4) */
static void case_softmax(kcase *c) {
  add_in(c, SK_F64, DIMS(1, 2), VALS(0, log(3.0)));
  add_out(c, SK_F64, DIMS(1, 2), VALS(0.25, 0.75));
  c->flops = 2, c->space = "1,2 (0,1)";
}

static void case_log_softmax(kcase *c) {
  add_in(c, SK_F64, DIMS(1, 2), VALS(0, log(3.0)));
  add_out(c, SK_F64, DIMS(1, 2), VALS(-1.3862943611198906, -0.2876820724517809));
  c->flops = 2, c->space = "1,2 (0,1)";
}

static void case_l2_normalize(kcase *c) { /* along axis 0, MindSpore's default */
  add_in(c, SK_F64, DIMS(2), VALS(3, 4));
  add_out(c, SK_F64, DIMS(2), VALS(0.6, 0.8));
  c->flops = 2, c->space = "2 (0)";
}

/* x [1, 3]: mean 2, variance 1, y = (x - 2) * gamma 2 + beta 1 (epsilon 1e-7: tolerance 1e-6). */
static void case_layer_norm(kcase *c) {
  add_in(c, SK_F64, DIMS(1, 2), VALS(1, 3));
  add_in(c, SK_F64, DIMS(2), VALS(2, 2));
  add_in(c, SK_F64, DIMS(2), VALS(1, 1));
  add_out(c, SK_F64, DIMS(1, 2), VALS(-1, 3));
  add_out(c, SK_F64, DIMS(1, 1), VALS(2));
  add_out(c, SK_F64, DIMS(1, 1), VALS(1));
  c->tol = 1e-6, c->flops = 2, c->space = "1,2 (0,1)(1)(1)";
}

/* Class-index labels: both rows' loss is -ln 3/4, the mean too; the labels take the batch. */
static void case_softmax_ce(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(0, log(3.0), log(3.0), 0));
  add_in(c, SK_I32, DIMS(2), VALS(1, 0));
  add_out(c, SK_F64, DIMS(1), VALS(0.2876820724517809));
  c->global_count = 2, c->flops = 1, c->space = "2,2 (0,1)(0)";
}

/* the loss per sample and the logits' gradient, softmax - labels */
static void case_softmax_ce_logits(kcase *c) {
  add_in(c, SK_F64, DIMS(1, 2), VALS(0, log(3.0)));
  add_in(c, SK_F64, DIMS(1, 2), VALS(0, 1));
  add_out(c, SK_F64, DIMS(1), VALS(0.2876820724517809));
  add_out(c, SK_F64, DIMS(1, 2), VALS(0.25, -0.25));
  c->flops = 1, c->space = "1,2 (0,1)(0,1)";
}

static void case_mae_loss(kcase *c) { /* mean(|1 - 2|, |2 - 4|) */
  add_in(c, SK_F64, DIMS(2), VALS(1, 2));
  add_in(c, SK_F64, DIMS(2), VALS(2, 4));
  add_out(c, SK_F64, DIMS(1), VALS(1.5));
  c->global_count = 2, c->flops = 1, c->space = "2 (0)(0)";
}

/* [[1,2],[3,4]] along axis 1 */
static void reduce_case(kcase *c, double y0, double y1) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  add_out(c, SK_F64, DIMS(2), VALS(y0, y1));
  set_axis(c, 1);
  c->flops = 2, c->space = "2,2 (0,1)";
}
static void case_reduce_sum(kcase *c) { reduce_case(c, 3, 7); }
static void case_reduce_mean(kcase *c) { reduce_case(c, 1.5, 3.5); }
static void case_reduce_max(kcase *c) { reduce_case(c, 2, 4); }

static void case_flatten(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 1, 2), VALS(1, 2, 3, 4));
  add_out(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  c->flops = 4, c->space = "2,1,2 (0,1,2)";
}

static void case_transpose(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 3), VALS(1, 2, 3, 4, 5, 6));
  add_out(c, SK_F64, DIMS(3, 2), VALS(1, 4, 2, 5, 3, 6));
  c->op.desc.perm[0] = 1, c->op.desc.perm[1] = 0, c->op.desc.has_perm = true;
  c->flops = 6, c->space = "2,3 (0,1)";
}

static void case_reshape(kcase *c) { /* the target shape [4] */
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  add_out(c, SK_F64, DIMS(4), VALS(1, 2, 3, 4));
  sk_op_desc *d = &c->op.desc;
  d->noutputs = 1, d->out_ndims[0] = 1, d->out_shape[0][0] = 4;
  c->flops = 4, c->space = "none"; /* it follows its input: the searches give it no strategy */
}

static void case_expand_dims(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  add_out(c, SK_F64, DIMS(1, 2, 2), VALS(1, 2, 3, 4));
  set_axis(c, 0);
  c->flops = 4, c->space = "2,2 (0,1)";
}

/* indices [1, 0], depth 3, on 5, off -1; the output's dims are the joint dims. */
static void case_one_hot(kcase *c) {
  add_in(c, SK_I32, DIMS(2), VALS(1, 0));
  add_scalars(c, 2);
  add_out(c, SK_F64, DIMS(2, 3), VALS(-1, 5, -1, 5, -1, -1));
  c->op.desc.depth = 3, c->op.on_value = 5, c->op.off_value = -1, c->op.out_dtype[0] = SK_F64;
  c->flops = 6, c->space = "2,3 (0,1)()()";
}

/* rows 2 and 0 of [[1,2],[3,4],[5,6]]; table and indices cut independently */
static void case_gather(kcase *c) {
  add_in(c, SK_F64, DIMS(3, 2), VALS(1, 2, 3, 4, 5, 6));
  add_in(c, SK_I32, DIMS(2), VALS(2, 0));
  add_out(c, SK_F64, DIMS(2, 2), VALS(5, 6, 1, 2));
  c->flops = 4, c->space = "3,2,2 (0,1)(2)";
}

static void case_get_next(kcase *c) {
  add_fed(c, SK_F64, DIMS(2, 2));
  add_fed(c, SK_I32, DIMS(2));
  c->flops = 4, c->space = "none";
}

static void case_virtual_dataset(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  add_in(c, SK_I32, DIMS(2), VALS(7, 8));
  add_out(c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  add_out(c, SK_I32, DIMS(2), VALS(7, 8));
  c->flops = 4, c->space = "none";
}

static void case_tmp_identity(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, -2, 3, -4));
  add_out(c, SK_F64, DIMS(2, 2), VALS(1, -2, 3, -4));
  c->flops = 4, c->space = "2,2 (0,1)";
}

static void case_sigmoid(kcase *c) {
  add_in(c, SK_F64, DIMS(2), VALS(0, 2));
  add_out(c, SK_F64, DIMS(2), VALS(0.5, 0.8807970779778823));
  c->flops = 2, c->space = "2 (0)";
}

static void case_silu(kcase *c) { /* x sigmoid(x) */
  add_in(c, SK_F64, DIMS(2), VALS(0, 2));
  add_out(c, SK_F64, DIMS(2), VALS(0, 1.7615941559557646));
  c->flops = 2, c->space = "2 (0)";
}

/* x [1, 2] = (3, 4): rstd = 1 / sqrt(12.5 + 1e-6) (the default epsilon), y = x rstd gamma (1, 2);
   rstd keeps x's rank, the normalised dim of size 1. */
static void case_rms_norm(kcase *c) {
  add_in(c, SK_F64, DIMS(1, 2), VALS(3, 4));
  add_in(c, SK_F64, DIMS(2), VALS(1, 2));
  add_out(c, SK_F64, DIMS(1, 2), VALS(0.8485281034827337, 2.2627416092872896));
  add_out(c, SK_F64, DIMS(1, 1), VALS(0.2828427011609112));
  c->flops = 2, c->space = "1,2 (0,1)(1)";
}

/* The sum of x; it follows its input's cut, so the search has nothing to choose. */
static void case_virtual_loss(kcase *c) {
  add_in(c, SK_F64, DIMS(2, 2), VALS(1, -2, 3, -4));
  add_out(c, SK_F64, DIMS(1), VALS(-2));
  c->flops = 1, c->space = "none";
}

/* Indexed by kind: a kind added to sk_op_kind without a case here fails every test below. */
static void (*const case_of[SK_OP_KIND_COUNT])(kcase *) = {
    [SK_OP_MATMUL] = case_matmul,
    [SK_OP_BATCH_MATMUL] = case_batch_matmul,
    [SK_OP_DENSE] = case_dense,
    [SK_OP_RELU] = case_relu,
    [SK_OP_GELU] = case_gelu,
    [SK_OP_TANH] = case_tanh,
    [SK_OP_CAST] = case_cast,
    [SK_OP_DROPOUT] = case_dropout,
    [SK_OP_ADD] = case_add,
    [SK_OP_SUB] = case_sub,
    [SK_OP_MUL] = case_mul,
    [SK_OP_DIV] = case_div,
    [SK_OP_POW] = case_pow,
    [SK_OP_BIAS_ADD] = case_bias_add,
    [SK_OP_PRELU] = case_prelu,
    [SK_OP_SOFTMAX] = case_softmax,
    [SK_OP_LOG_SOFTMAX] = case_log_softmax,
    [SK_OP_L2_NORMALIZE] = case_l2_normalize,
    [SK_OP_LAYER_NORM] = case_layer_norm,
    [SK_OP_SOFTMAX_CE] = case_softmax_ce,
    [SK_OP_SOFTMAX_CE_LOGITS] = case_softmax_ce_logits,
    [SK_OP_MAE_LOSS] = case_mae_loss,
    [SK_OP_REDUCE_SUM] = case_reduce_sum,
    [SK_OP_REDUCE_MEAN] = case_reduce_mean,
    [SK_OP_REDUCE_MAX] = case_reduce_max,
    [SK_OP_FLATTEN] = case_flatten,
    [SK_OP_TRANSPOSE] = case_transpose,
    [SK_OP_RESHAPE] = case_reshape,
    [SK_OP_EXPAND_DIMS] = case_expand_dims,
    [SK_OP_ONE_HOT] = case_one_hot,
    [SK_OP_GATHER] = case_gather,
    [SK_OP_GET_NEXT] = case_get_next,
    [SK_OP_VIRTUAL_DATASET] = case_virtual_dataset,
    [SK_OP_TMP_IDENTITY] = case_tmp_identity,
    [SK_OP_SIGMOID] = case_sigmoid,
    [SK_OP_SILU] = case_silu,
    [SK_OP_RMS_NORM] = case_rms_norm,
    [SK_OP_VIRTUAL_LOSS] = case_virtual_loss,
};

/* Kind k's case; its outputs' buffers filled with 0xA5 bytes. */
static void build_case(sk_op_kind k, kcase *c) {
  memset(c, 0, sizeof *c);
  cr_assert(case_of[k], "%s (kind %d) has no case in tests/test_optable.c", sk_op_kind_name(k), (int)k);
  c->op.desc.kind = k;
  snprintf(c->op.name, sizeof c->op.name, "t_%s", sk_op_kind_name(k));
  c->tol = 1e-12;
  memset(c->outbuf, 0xA5, sizeof c->outbuf);
  case_of[k](c);
}

/* The plan of c's operator on `devices` devices, through sk_op_plan_make. */
static sk_op_plan plan_of(const kcase *c, int devices) {
  sk_op_plan p;
  OK(sk_op_plan_make(&c->op.desc, devices, &p, E));
  return p;
}

/* ---- the rows themselves ------------------------------------------------------------------------- */

/* Whether every comma-separated alias of list is a name without spaces that gives kind k back. */
static bool each_alias(const char *list, sk_op_kind k) {
  char buf[128];
  cr_assert_lt(strlen(list), sizeof buf);
  strcpy(buf, list);
  if (!*buf) return true;
  for (char *p = buf;;) {
    char *end = strchr(p, ',');
    if (end) *end = 0;
    if (!*p || strchr(p, ' ')) return false;
    sk_op_kind got = SK_OP_KIND_COUNT;
    cr_assert(sk_op_kind_from_name(p, &got), "%s: alias '%s' is not found", sk_op_kind_name(k), p);
    cr_assert_eq(got, k, "%s: alias '%s' gives %s", sk_op_kind_name(k), p, sk_op_kind_name(got));
    if (!end) return true;
    p = end + 1;
  }
}

/* The flags sk_optable.h defines (1u << 2, SK_OPF_LAYOUTS once, is retired: every operator
   takes layouts). */
static const unsigned known_flags = SK_OPF_CONTRACTS | SK_OPF_KEEPS_SHAPE | SK_OPF_SOURCE | SK_OPF_PASSTHROUGH |
                                    SK_OPF_BATCH_SHAPES | SK_OPF_FOLLOWS_INPUT | SK_OPF_PERMUTES | SK_OPF_REDISTRIBUTES;

Test(optable, every_kind_has_a_complete_row) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    const sk_op_row *row = sk_op_row_of((sk_op_kind)k);
    cr_assert(row, "kind %d has no row", k);
    cr_assert_eq(row->kind, (sk_op_kind)k, "row %d holds kind %d", k, (int)row->kind);
    cr_assert(row->name && *row->name, "kind %d has no name", k);
    cr_assert_str_eq(sk_op_kind_name((sk_op_kind)k), row->name);
    sk_op_kind got = SK_OP_KIND_COUNT;
    cr_assert(sk_op_kind_from_name(row->name, &got) && got == (sk_op_kind)k, "%s does not name kind %d", row->name, k);
    cr_assert(row->aliases, "%s: aliases NULL (\"\" when none)", row->name);
    cr_assert(each_alias(row->aliases, (sk_op_kind)k), "%s: an empty alias or a space in \"%s\"", row->name,
              row->aliases);
    cr_assert(0 <= row->min_inputs && row->min_inputs <= row->max_inputs && row->max_inputs <= SK_OP_MAX_INPUTS,
              "%s: inputs %d..%d", row->name, row->min_inputs, row->max_inputs);
    cr_assert(row->scalar_tuples >= 0 && row->max_inputs + row->scalar_tuples <= SK_OP_MAX_INPUTS, "%s: %d scalars",
              row->name, row->scalar_tuples);
    cr_assert_geq(row->tuple_extra, 0, "%s", row->name);
    cr_assert_eq(row->index_inputs >> row->max_inputs, 0u, "%s: an index input past its inputs", row->name);
    cr_assert_eq(row->index_inputs & row->grad_inputs, 0u, "%s: an index input takes a gradient", row->name);
    cr_assert_eq(row->flags & ~known_flags, 0u, "%s: unknown flags 0x%x", row->name, row->flags);
    cr_assert((int)row->out_dtype >= SK_OPD_INPUT0 && row->out_dtype <= SK_OPD_PASS, "%s: out dtype %d", row->name,
              (int)row->out_dtype);
    cr_assert(row->rule && row->facts && row->fwd && row->bwd && row->flops && row->space, "%s: a column is NULL",
              row->name);
  }
}

/* What the flags mean, against the row's other fields. */
Test(optable, flags_agree_with_the_row) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    const sk_op_row *row = sk_op_row_of((sk_op_kind)k);
    bool source = (row->flags & SK_OPF_SOURCE) != 0, pass = (row->flags & SK_OPF_PASSTHROUGH) != 0;
    cr_assert_eq(source, row->max_inputs == 0, "%s: reads no tensor exactly when it is a source", row->name);
    cr_assert_eq(pass, row->out_dtype == SK_OPD_PASS, "%s: a pass-through keeps each input's dtype", row->name);
    if (source) cr_assert_eq(row->grad_inputs, 0u, "%s: a source has no input to differentiate", row->name);
  }
}

Test(optable, names_and_aliases_belong_to_one_kind) {
  const char *seen[4 * SK_OP_KIND_COUNT];
  int n = 0;
  char all[SK_OP_KIND_COUNT][128];
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    const sk_op_row *row = sk_op_row_of((sk_op_kind)k);
    seen[n++] = row->name;
    snprintf(all[k], sizeof all[k], "%s", row->aliases);
    for (char *p = all[k]; *p;) {
      char *end = strchr(p, ',');
      if (end) *end = 0;
      cr_assert_lt(n, 4 * SK_OP_KIND_COUNT);
      seen[n++] = p;
      if (!end) break;
      p = end + 1;
    }
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) cr_assert(strcmp(seen[i], seen[j]), "'%s' names two kinds", seen[i]);
  sk_op_kind got = SK_OP_ADD;
  cr_assert(!sk_op_kind_from_name("NoSuchOp", &got));
  cr_assert(!sk_op_kind_from_name("", &got));
  cr_assert(!sk_op_kind_from_name("matmul", &got), "names are MindSpore's, case and all");
  cr_assert(!sk_op_kind_from_name("Gelu,GELU", &got), "the alias list is not itself a name");
  cr_assert(!sk_op_kind_from_name(NULL, &got));
  cr_assert_eq(got, SK_OP_ADD, "a failed lookup writes nothing");
}

Test(optable, kinds_outside_the_table_have_no_row) {
  const sk_op_kind out[2] = {(sk_op_kind)-1, SK_OP_KIND_COUNT};
  for (int i = 0; i < 2; i++) {
    cr_assert_null(sk_op_row_of(out[i]), "kind %d", (int)out[i]);
    cr_assert_str_eq(sk_op_kind_name(out[i]), "invalid");
    cr_assert_eq(sk_op_tuple_count(out[i], 2), 0);
  }
}

/* ---- the columns, every kind on its case --------------------------------------------------------- */

/* The rule on one device: what sk_op_plan_make gives, with the case's outputs. */
Test(optable, rule_column) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    kcase c;
    build_case((sk_op_kind)k, &c);
    const char *name = sk_op_kind_name((sk_op_kind)k);
    sk_op_plan direct, made = plan_of(&c, 1);
    memset(&direct, 0, sizeof direct);
    sk_error e;
    cr_assert_eq(sk_op_row_of((sk_op_kind)k)->rule(&c.op.desc, 1, &direct, &e), SK_OK, "%s: %s", name, e.msg);
    if (direct.noutputs == 0) direct.noutputs = 1; /* as sk_op_plan_make does */
    char a[4096], b[4096];
    sk_op_plan_format(&direct, a, sizeof a), sk_op_plan_format(&made, b, sizeof b);
    cr_assert_str_eq(a, b, "%s", name);
    cr_assert_eq(made.ninputs, c.op.desc.ninputs, "%s: inputs", name);
    cr_assert_eq(made.noutputs, c.op.noutputs, "%s: outputs", name);
    for (int o = 0; o < made.noutputs; o++) {
      cr_assert_eq(made.out[o].ndims, c.out[o].ndims, "%s: output %d's rank", name, o);
      for (int d = 0; d < c.out[o].ndims; d++)
        cr_assert_eq(made.out[o].shape[d], c.out[o].shape[d], "%s: output %d dim %d", name, o, d);
    }
  }
}

/* The three reductions share a form but not a collective: a cut reduced dim is summed, averaged
   or maxed. */
Test(optable, reduction_rules_complete_a_cut_dim_each_their_way) {
  const sk_op_kind kinds[3] = {SK_OP_REDUCE_SUM, SK_OP_REDUCE_MEAN, SK_OP_REDUCE_MAX};
  const sk_redop want_op[3] = {SK_SUM, SK_SUM, SK_MAX};
  const double want_scale[3] = {1, 0.5, 1};
  for (int i = 0; i < 3; i++) {
    kcase c;
    build_case(kinds[i], &c);
    c.op.desc.has_strategy = true, c.op.desc.strategy[0][0] = 1, c.op.desc.strategy[0][1] = 2;
    sk_op_plan p = plan_of(&c, 2);
    cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE, "%s", sk_op_kind_name(kinds[i]));
    cr_assert_eq(p.fwd.op, want_op[i], "%s", sk_op_kind_name(kinds[i]));
    cr_assert_eq(p.fwd.scale, want_scale[i], "%s", sk_op_kind_name(kinds[i]));
  }
}

/* Rules that differ only in which dims must stay whole, on 2 devices: every input [2,2], each
   given the same tuple. ReLU cuts anything; Softmax and LogSoftmax keep their axis (-1) whole,
   L2Normalize its axis (0); the softmax losses keep all but the batch whole, MAELoss nothing;
   Sigmoid, SiLU and VirtualLoss nothing; RmsNorm its normalised dims (gamma [2,2] here: both). */
Test(optable, rules_sharing_a_form_keep_their_own_dims_whole) {
  const struct {
    sk_op_kind kind;
    int ninputs, cut[2];
    bool ok;
  } t[] = {
      {SK_OP_RELU, 1, {1, 2}, true},        {SK_OP_RELU, 1, {2, 1}, true},
      {SK_OP_SOFTMAX, 1, {1, 2}, false},    {SK_OP_SOFTMAX, 1, {2, 1}, true},
      {SK_OP_LOG_SOFTMAX, 1, {1, 2}, false}, {SK_OP_LOG_SOFTMAX, 1, {2, 1}, true},
      {SK_OP_L2_NORMALIZE, 1, {1, 2}, true}, {SK_OP_L2_NORMALIZE, 1, {2, 1}, false},
      {SK_OP_MAE_LOSS, 2, {1, 2}, true},    {SK_OP_SOFTMAX_CE, 2, {1, 2}, false},
      {SK_OP_SIGMOID, 1, {1, 2}, true},     {SK_OP_SILU, 1, {2, 1}, true},
      {SK_OP_VIRTUAL_LOSS, 1, {1, 2}, true}, {SK_OP_RMS_NORM, 2, {1, 2}, false}, {SK_OP_RMS_NORM, 2, {2, 1}, false},
      {SK_OP_SOFTMAX_CE_LOGITS, 2, {1, 2}, false}, {SK_OP_SOFTMAX_CE_LOGITS, 2, {2, 1}, true},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    sk_op_desc d;
    memset(&d, 0, sizeof d);
    d.kind = t[i].kind, d.ninputs = t[i].ninputs, d.has_strategy = true;
    for (int k = 0; k < d.ninputs; k++) {
      d.ndims[k] = 2, d.shape[k][0] = d.shape[k][1] = 2;
      d.strategy[k][0] = t[i].cut[0], d.strategy[k][1] = t[i].cut[1];
    }
    sk_op_plan p;
    sk_error e;
    sk_result r = sk_op_plan_make(&d, 2, &p, &e);
    cr_assert_eq(r == SK_OK, t[i].ok, "%s (%d,%d): %s", sk_op_kind_name(t[i].kind), t[i].cut[0], t[i].cut[1],
                 r ? e.msg : "accepted");
  }
}

/* On one device a kernel needs no offset; a loss divides by its global count, Dropout draws
   from its global shape. */
Test(optable, facts_column) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    kcase c;
    build_case((sk_op_kind)k, &c);
    const char *name = sk_op_kind_name((sk_op_kind)k);
    sk_op_plan p = plan_of(&c, 1);
    sk_exec_facts f;
    memset(&f, 0, sizeof f);
    sk_error e;
    cr_assert_eq(sk_op_row_of((sk_op_kind)k)->facts(&c.op.desc, &p, p.in, 0, &f, &e), SK_OK, "%s: %s", name, e.msg);
    cr_assert_eq(f.global_count, c.global_count, "%s: global count %lld", name, (long long)f.global_count);
    cr_assert_eq(f.offset, 0, "%s", name);
    cr_assert_eq(f.global_ndims, c.global_ndims, "%s: global rank %d", name, f.global_ndims);
    cr_assert(!f.skip_bias, "%s", name);
  }
}

/* Rank 1 of 2: OneHot's second half of the classes, Gather's second half of the rows, Dense's
   second part of a cut contraction (which leaves the bias to rank 0). */
Test(optable, facts_give_a_devices_first_class_and_row) {
  kcase c;
  sk_exec_facts f;
  build_case(SK_OP_ONE_HOT, &c);
  c.op.desc.depth = 4, c.op.desc.has_strategy = true, c.op.desc.strategy[0][0] = 1, c.op.desc.strategy[0][1] = 2;
  c.op.desc.strategy_len[0] = 2;
  sk_op_plan p = plan_of(&c, 2);
  memset(&f, 0, sizeof f);
  OK(sk_op_row_of(SK_OP_ONE_HOT)->facts(&c.op.desc, &p, p.in, 1, &f, E));
  cr_assert_eq(f.offset, 2, "OneHot: rank 1's first class %lld", (long long)f.offset);

  build_case(SK_OP_GATHER, &c);
  c.in[0].shape[0] = c.op.desc.shape[0][0] = 4;
  c.op.desc.has_strategy = true, c.op.desc.strategy[0][0] = 2, c.op.desc.strategy[0][1] = 1;
  c.op.desc.strategy[1][0] = 1;
  p = plan_of(&c, 2);
  memset(&f, 0, sizeof f);
  OK(sk_op_row_of(SK_OP_GATHER)->facts(&c.op.desc, &p, p.in, 1, &f, E));
  cr_assert_eq(f.offset, 2, "Gather: rank 1's first row %lld", (long long)f.offset);

  build_case(SK_OP_DENSE, &c);
  c.in[0].shape[1] = c.op.desc.shape[0][1] = c.op.desc.shape[1][1] = 4;
  c.op.desc.has_strategy = true, c.op.desc.strategy[0][0] = 1, c.op.desc.strategy[0][1] = 2;
  c.op.desc.strategy[1][0] = 1, c.op.desc.strategy[1][1] = 2, c.op.desc.strategy[2][0] = 1;
  p = plan_of(&c, 2);
  for (int rank = 0; rank < 2; rank++) {
    memset(&f, 0, sizeof f);
    OK(sk_op_row_of(SK_OP_DENSE)->facts(&c.op.desc, &p, p.in, rank, &f, E));
    cr_assert_eq(f.skip_bias, rank == 1, "Dense: rank %d skip_bias %d", rank, f.skip_bias);
  }
}

static void expect_outputs(const kcase *c, const char *name) {
  for (int o = 0; o < c->op.noutputs; o++) {
    const sk_exec_arg *a = &c->out[o];
    if (c->nwant[o] < 0) {
      for (size_t b = 0; b < sizeof c->outbuf[o]; b++)
        cr_assert_eq(((const unsigned char *)c->outbuf[o])[b], 0xA5, "%s: output %d was written", name, o);
      continue;
    }
    for (int i = 0; i < c->nwant[o]; i++) {
      double got = load(a->dtype, a->data, i), want = c->want[o][i];
      cr_assert(fabs(got - want) <= c->tol * (1 + fabs(want)), "%s: output %d [%d] = %.17g, want %.17g", name, o, i,
                got, want);
    }
  }
}

/* Every kind's forward through sk_exec_forward, against values worked out by hand. */
Test(optable, forward_column) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    kcase c;
    build_case((sk_op_kind)k, &c);
    OK(sk_exec_forward(NULL, &c.op, &c.facts, c.in, c.out, E));
    expect_outputs(&c, sk_op_kind_name((sk_op_kind)k));
  }
}

/* Runs c's forward, then its backward from the upstream gradient dy of output 0; dx[k] gets
   input k's gradient (filled with 0xA5 first). */
static void run_backward(kcase *c, int ndy, const double *dy, double dx[][CASE_MAX]) {
  cr_assert_eq(ndy, numel_of(c->out[0].ndims, c->out[0].shape));
  OK(sk_exec_forward(NULL, &c->op, &c->facts, c->in, c->out, E));
  c->out[0].grad = (void *)dy;
  void *d[SK_OP_MAX_INPUTS] = {dx[0], dx[1], dx[2], dx[3]};
  memset(dx, 0xA5, sizeof(double) * CASE_MAX * SK_OP_MAX_INPUTS);
  OK(sk_exec_backward(NULL, &c->op, &c->facts, c->in, c->out, d, E));
}

static void expect_grad(const double *got, int n, const double *want, const char *what) {
  for (int i = 0; i < n; i++)
    cr_assert(fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i])), "%s [%d] = %.17g, want %.17g", what, i, got[i],
              want[i]);
}

/* One backward per kernel family, by hand. */
Test(optable, backward_column) {
  kcase c;
  double dx[SK_OP_MAX_INPUTS][CASE_MAX];
  build_case(SK_OP_MATMUL, &c); /* dx = dy w^T, dw = x^T dy */
  run_backward(&c, VALS(1, 1, 1, 1), dx);
  expect_grad(dx[0], VALS(1, 1, 2, 1, 1, 2), "MatMul dx");
  expect_grad(dx[1], VALS(5, 5, 7, 7, 9, 9), "MatMul dw");
  build_case(SK_OP_RELU, &c);
  run_backward(&c, VALS(1, 2, 3, 4), dx);
  expect_grad(dx[0], VALS(1, 0, 3, 0), "ReLU dx");
  build_case(SK_OP_MUL, &c); /* da = b dy, db = a dy */
  run_backward(&c, VALS(1, 2), dx);
  expect_grad(dx[0], VALS(2, 6), "Mul da");
  expect_grad(dx[1], VALS(3, 4), "Mul db");
  build_case(SK_OP_REDUCE_SUM, &c);
  run_backward(&c, VALS(1, 2), dx);
  expect_grad(dx[0], VALS(1, 1, 2, 2), "ReduceSum dx");
  build_case(SK_OP_GATHER, &c); /* rows 2 and 0 get dy's rows; the indices take none */
  run_backward(&c, VALS(1, 2, 3, 4), dx);
  expect_grad(dx[0], VALS(3, 4, 0, 0, 1, 2), "Gather dtable");
  for (size_t b = 0; b < sizeof dx[1]; b++) cr_assert_eq(((const unsigned char *)dx[1])[b], 0xA5, "Gather dindices");
  build_case(SK_OP_SOFTMAX_CE_LOGITS, &c); /* d loss = dy (softmax - labels) */
  run_backward(&c, VALS(2), dx);
  expect_grad(dx[0], VALS(0.5, -0.5), "SoftmaxCrossEntropyWithLogits dlogits");
  build_case(SK_OP_VIRTUAL_LOSS, &c); /* dy at every element */
  run_backward(&c, VALS(3), dx);
  expect_grad(dx[0], VALS(3, 3, 3, 3), "VirtualLoss dx");
}

/* MAELoss with labels [2] broadcast against the prediction [2, 2] (1,2,3,4) - (0,5) per row:
   mean(1, 3, 3, 1) = 2; dpred = dy sign / 4, and each label gathers minus its column's. */
Test(optable, mae_loss_broadcasts_its_labels) {
  kcase c;
  double dx[SK_OP_MAX_INPUTS][CASE_MAX];
  build_case(SK_OP_MAE_LOSS, &c);
  memset(&c.op, 0, sizeof c.op);
  c.op.desc.kind = SK_OP_MAE_LOSS;
  add_in(&c, SK_F64, DIMS(2, 2), VALS(1, 2, 3, 4));
  add_in(&c, SK_F64, DIMS(2), VALS(0, 5));
  add_out(&c, SK_F64, DIMS(1), VALS(2));
  OK(sk_exec_forward(NULL, &c.op, &c.facts, c.in, c.out, E));
  expect_outputs(&c, "MAELoss, labels broadcast");
  run_backward(&c, VALS(2), dx);
  expect_grad(dx[0], VALS(0.5, -0.5, 0.5, -0.5), "MAELoss dpred");
  expect_grad(dx[1], VALS(-1, 1), "MAELoss dlabels");
}

static double flops_of(const kcase *c) {
  return sk_op_row_of(c->op.desc.kind)->flops(&c->op.desc, c->in, c->out);
}

/* 2mnk for the MatMul family, one per output element for every other kind; the backward
   counts twice. */
Test(optable, flops_column) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    kcase c;
    build_case((sk_op_kind)k, &c);
    const char *name = sk_op_kind_name((sk_op_kind)k);
    cr_assert_eq(flops_of(&c), c.flops, "%s: %g FLOPs, want %g", name, flops_of(&c), c.flops);
    cr_assert_eq(sk_exec_flops(&c.op, c.in, c.out, false), c.flops, "%s", name);
    cr_assert_eq(sk_exec_flops(&c.op, c.in, c.out, true), 2 * c.flops, "%s", name);
  }
}

/* The joint dims as text: "sizes (tuple 0's sources)(tuple 1's)...", -1 for an entry cut 1;
   "none" without joint dims. */
static void space_text(const sk_op_space *j, char *buf, size_t cap) {
  size_t len = 0;
#define PUT(...) (len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, __VA_ARGS__))
  if (j->n == 0) {
    snprintf(buf, cap, "none");
    return;
  }
  for (int e = 0; e < j->n; e++) PUT("%s%lld", e ? "," : "", (long long)j->size[e]);
  PUT(" ");
  for (int k = 0; k < j->ntuples; k++) {
    PUT("(");
    for (int e = 0; e < j->len[k]; e++) PUT("%s%d", e ? "," : "", j->src[k][e]);
    PUT(")");
  }
#undef PUT
  cr_assert_lt(len, cap);
}

/* The space of c's operator, set up as the search sets it up (every entry cut 1, a tuple per
   desc input). */
static sk_op_space space_of(const kcase *c) {
  sk_op_space j;
  memset(&j, 0, sizeof j);
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++)
    for (int e = 0; e < SK_MAX_DIMS; e++) j.src[k][e] = -1;
  j.ntuples = c->op.desc.ninputs;
  sk_op_row_of(c->op.desc.kind)->space(&c->op.desc, c->out[0].ndims, c->out[0].shape, &j);
  return j;
}

Test(optable, space_column) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    kcase c;
    build_case((sk_op_kind)k, &c);
    sk_op_space j = space_of(&c);
    char text[256];
    space_text(&j, text, sizeof text);
    cr_assert_str_eq(text, c.space, "%s", sk_op_kind_name((sk_op_kind)k));
  }
}

/* MatMul [4,8] x [8,16]: m, k, n = 4, 8, 16; x's tuple takes (m, k), w's (k, n). */
Test(optable, matmul_space_is_m_k_n) {
  kcase c;
  memset(&c, 0, sizeof c);
  c.op.desc.kind = SK_OP_MATMUL;
  c.op.desc.ninputs = 2, c.op.desc.ndims[0] = c.op.desc.ndims[1] = 2;
  c.op.desc.shape[0][0] = 4, c.op.desc.shape[0][1] = 8, c.op.desc.shape[1][0] = 8, c.op.desc.shape[1][1] = 16;
  c.out[0].ndims = 2, c.out[0].shape[0] = 4, c.out[0].shape[1] = 16;
  sk_op_space j = space_of(&c);
  cr_assert_eq(j.n, 3);
  cr_assert(j.size[0] == 4 && j.size[1] == 8 && j.size[2] == 16, "sizes %lld,%lld,%lld", (long long)j.size[0],
            (long long)j.size[1], (long long)j.size[2]);
  cr_assert(j.len[0] == 2 && j.src[0][0] == 0 && j.src[0][1] == 1, "x takes (%d,%d)", j.src[0][0], j.src[0][1]);
  cr_assert(j.len[1] == 2 && j.src[1][0] == 1 && j.src[1][1] == 2, "w takes (%d,%d)", j.src[1][0], j.src[1][1]);
}

/* ---- kinds without a row ------------------------------------------------------------------------- */

/* An unknown kind is refused by name, never routed to a default (once, Add's kernel). */
Test(optable, unknown_kinds_are_refused) {
  const sk_op_kind bad[2] = {SK_OP_KIND_COUNT, (sk_op_kind)-1};
  for (int i = 0; i < 2; i++) {
    kcase c;
    build_case(SK_OP_ADD, &c);
    c.op.desc.kind = bad[i];
    sk_op_plan p;
    sk_error e;
    cr_assert_eq(sk_op_plan_make(&c.op.desc, 1, &p, &e), SK_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "is not an operator"), "plan: '%s'", e.msg);
    cr_assert_eq(sk_exec_forward(NULL, &c.op, &c.facts, c.in, c.out, &e), SK_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "(invalid) forward") && strstr(e.msg, "is not an operator"), "forward: '%s'", e.msg);
    for (size_t b = 0; b < sizeof c.outbuf[0]; b++)
      cr_assert_eq(((const unsigned char *)c.outbuf[0])[b], 0xA5, "the forward wrote an output");
    double dy[4] = {1, 1, 1, 1}, dx[SK_OP_MAX_INPUTS][CASE_MAX];
    void *d[SK_OP_MAX_INPUTS] = {dx[0], dx[1], dx[2], dx[3]};
    c.out[0].grad = dy;
    cr_assert_eq(sk_exec_backward(NULL, &c.op, &c.facts, c.in, c.out, d, &e), SK_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "is not an operator"), "backward: '%s'", e.msg);
    cr_assert_eq(sk_exec_flops(&c.op, c.in, c.out, false), 0);
    cr_assert(!sk_exec_differentiable(&c.op, 0));
    sk_graph g;
    sk_graph_init(&g);
    int a = -1, b = -1, at = -1;
    OK(sk_graph_add_input(&g, "a", SK_F64, DIMS(2, 2), &a, E));
    OK(sk_graph_add_input(&g, "b", SK_F64, DIMS(2), &b, E));
    c.op.inputs[0] = a, c.op.inputs[1] = b;
    cr_assert_eq(sk_graph_add_op(&g, &c.op, &at, &e), SK_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "unknown kind"), "graph: '%s'", e.msg);
    sk_graph_free(&g);
  }
}
