/* sk_train.h: a small MLP trained step for step against a reference written with sk_kernels
   and the SGD update (bit for bit in f64), gradients of tensors read several times against
   central differences of the trainer's own loss, f32 against f64, f16 / bf16 storage, Momentum
   and Adam with their state, evaluation against a hand-computed argmax, every bad input, and an
   allocation-failure sweep of sk_trainer_create with a counting allocator. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sk_train.h"

/* ---- helpers ------------------------------------------------------------------------------ */

#define OK(call)                                                               \
  do {                                                                         \
    sk_error e_;                                                               \
    memset(&e_, 0, sizeof e_);                                                 \
    sk_result r_ = (call);                                                     \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg); \
  } while (0)
/* A call that must fail with SK_ERR_INVALID_ARGUMENT and a message holding `word`. */
#define BAD(word, call)                                                                                   \
  do {                                                                                                    \
    sk_error e_;                                                                                          \
    memset(&e_, 0, sizeof e_);                                                                            \
    sk_result r_ = (call);                                                                                \
    cr_assert_eq(r_, SK_ERR_INVALID_ARGUMENT, "%s returned %s", #call, sk_result_name(r_));               \
    cr_assert_eq(e_.code, SK_ERR_INVALID_ARGUMENT);                                                       \
    cr_assert(strstr(e_.msg, word) != NULL, "%s: message '%s' does not hold '%s'", #call, e_.msg, word); \
  } while (0)
#define E (&e_) /* OK and BAD pass &e_ as the error */

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static double urand(void) { /* xorshift64: deterministic, in [0, 1) */
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static int input(sk_graph *g, const char *name, sk_dtype dt, int d0, int d1) {
  int64_t s[2] = {d0, d1};
  int id = -1;
  OK(sk_graph_add_input(g, name, dt, d1 ? 2 : 1, s, &id, E));
  return id;
}

static int param(sk_graph *g, const char *name, int d0, int d1, sk_init_kind kind, double value) {
  int64_t s[2] = {d0, d1};
  sk_init init = {kind, value};
  int id = -1;
  OK(sk_graph_add_param(g, name, SK_F32, d1 ? 2 : 1, s, init, &id, E));
  return id;
}

/* Adds an operator of kind k reading a (and b), returns its first output. */
static int op2(sk_graph *g, const char *name, sk_op_kind k, int n, int a, int b) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, name);
  op.desc.kind = k, op.ninputs = n, op.inputs[0] = a, op.inputs[1] = b;
  int i = -1;
  OK(sk_graph_add_op(g, &op, &i, E));
  return g->ops[i].outputs[0];
}

/* The MLP: x [B, D] -> MatMul w1 [D, H] -> ReLU -> MatMul w2 [H, C] -> SoftmaxCrossEntropy
   against sparse labels y [B]. */
enum { B = 16, D = 4, H = 8, C = 3 };
typedef struct mlp {
  sk_graph g;
  int x, y, w1, w2, h, a, z, loss;
  double xv[B * D];
  int32_t yv[B];
} mlp;

/* Data a linear map separates (the label is the argmax of x times a fixed matrix), so the loss
   can fall. */
static void mlp_build(mlp *m) {
  sk_graph_init(&m->g);
  m->x = input(&m->g, "x", SK_F32, B, D), m->y = input(&m->g, "y", SK_I32, B, 0);
  m->w1 = param(&m->g, "w1", D, H, SK_INIT_XAVIER_UNIFORM, 0);
  m->w2 = param(&m->g, "w2", H, C, SK_INIT_XAVIER_UNIFORM, 0);
  m->h = op2(&m->g, "h", SK_OP_MATMUL, 2, m->x, m->w1);
  m->a = op2(&m->g, "a", SK_OP_RELU, 1, m->h, 0);
  m->z = op2(&m->g, "z", SK_OP_MATMUL, 2, m->a, m->w2);
  m->loss = op2(&m->g, "loss", SK_OP_SOFTMAX_CE, 2, m->z, m->y);
  OK(sk_graph_set_loss(&m->g, m->loss, E));
  OK(sk_graph_set_eval(&m->g, m->z, m->y, E));
  const double tw[D][C] = {{1, -1, 0.5}, {-0.5, 1, 1}, {1, 0.5, -1}, {0, -1, 1}};
  for (int i = 0; i < B; i++) {
    double best = -1e9;
    for (int j = 0; j < D; j++) m->xv[i * D + j] = 2 * urand() - 1;
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int j = 0; j < D; j++) s += m->xv[i * D + j] * tw[j][c];
      if (s > best) best = s, m->yv[i] = c;
    }
  }
}

static sk_trainer *mlp_trainer(mlp *m, sk_dtype dt, sk_optim_desc optim) {
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = dt, d.optim = optim, d.seed = 99;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&m->g, &d, &t, E));
  OK(sk_trainer_feed(t, m->x, SK_F64, m->xv, B * D, E));
  OK(sk_trainer_feed(t, m->y, SK_I32, m->yv, B, E));
  return t;
}

static sk_optim_desc sgd(double lr) {
  sk_optim_desc o;
  memset(&o, 0, sizeof o);
  o.kind = SK_OPTIM_SGD, o.lr = lr;
  return o;
}

/* ---- (a) the MLP against a reference built from the kernels ------------------------------- */

/* The reference's state: parameters, activations and gradients in f64. */
typedef struct ref {
  double w1[D * H], w2[H * C], h[B * H], a[B * H], z[B * C];
  double dz[B * C], da[B * H], dh[B * H], dw1[D * H], dw2[H * C], loss;
} ref;

static void ref_forward(ref *r, const mlp *m) {
  const int64_t sx[2] = {B, D}, s1[2] = {D, H}, sa[2] = {B, H}, s2[2] = {H, C}, sz[2] = {B, C};
  OK(sk_kern_matmul(NULL, SK_F64, false, false, 2, sx, m->xv, 2, s1, r->w1, r->h, E));
  OK(sk_kern_relu(SK_F64, 2, sa, r->h, r->a, E));
  OK(sk_kern_matmul(NULL, SK_F64, false, false, 2, sa, r->a, 2, s2, r->w2, r->z, E));
  OK(sk_kern_sparse_softmax_ce(SK_F64, 2, sz, r->z, SK_I32, m->yv, B, &r->loss, E));
}

/* Backward from dloss = 1, then SGD: w -= lr g, the product rounded before the difference. */
static void ref_step(ref *r, const mlp *m, double lr) {
  const int64_t sx[2] = {B, D}, s1[2] = {D, H}, sa[2] = {B, H}, s2[2] = {H, C}, sz[2] = {B, C};
  const double one = 1;
  ref_forward(r, m);
  OK(sk_kern_sparse_softmax_ce_bwd(SK_F64, 2, sz, r->z, SK_I32, m->yv, B, &one, r->dz, E));
  OK(sk_kern_matmul_bwd(NULL, SK_F64, false, false, 2, sa, r->a, 2, s2, r->w2, r->dz, r->da, r->dw2, E));
  OK(sk_kern_relu_bwd(SK_F64, 2, sa, r->h, r->da, r->dh, E));
  OK(sk_kern_matmul_bwd(NULL, SK_F64, false, false, 2, sx, m->xv, 2, s1, r->w1, r->dh, NULL, r->dw1, E));
  for (int i = 0; i < D * H; i++) {
    double u = lr * r->dw1[i];
    r->w1[i] = r->w1[i] - u;
  }
  for (int i = 0; i < H * C; i++) {
    double u = lr * r->dw2[i];
    r->w2[i] = r->w2[i] - u;
  }
}

Test(train, mlp_sgd_matches_kernel_reference_bitwise) {
  static mlp m;
  mlp_build(&m);
  sk_trainer *t = mlp_trainer(&m, SK_F64, sgd(0.3));
  cr_assert_eq(sk_trainer_dtype(t), SK_F64);
  static ref r;
  void *init[16] = {0};
  init[m.w1] = r.w1, init[m.w2] = r.w2;
  OK(sk_graph_init_params(&m.g, 99, SK_F64, init, E)); /* the trainer draws from its seed the same way */
  const double lr = (double)(float)0.3;                 /* the trainer holds lr as an f32, as MindSpore */
  double first = 0, loss = 0;
  for (int s = 0; s < 20; s++) {
    OK(sk_trainer_step(t, &loss, E));
    ref_step(&r, &m, lr);
    if (s == 0) first = loss;
    cr_assert(loss == r.loss, "step %d: loss %.17g, reference %.17g", s, loss, r.loss);
    cr_assert(!memcmp(sk_trainer_values(t, m.w1), r.w1, sizeof r.w1), "step %d: w1 differs", s);
    cr_assert(!memcmp(sk_trainer_values(t, m.w2), r.w2, sizeof r.w2), "step %d: w2 differs", s);
    cr_assert(!memcmp(sk_trainer_grad(t, m.w1), r.dw1, sizeof r.dw1), "step %d: dw1 differs", s);
    cr_assert(!memcmp(sk_trainer_values(t, m.a), r.a, sizeof r.a), "step %d: ReLU output differs", s);
  }
  cr_assert_eq(sk_trainer_steps(t), 20);
  cr_assert(loss < 0.75 * first, "loss %.6g -> %.6g in 20 steps", first, loss);
  cr_assert_null(sk_trainer_grad(t, m.x), "an input got a gradient");
  sk_trainer_destroy(t);
  sk_graph_free(&m.g);
}

/* ---- (b) tensors read several times: summed gradients ------------------------------------- */

/* Every parameter's gradient against central differences of the loss the trainer computes
   (f64, h = 1e-6: see tests/test_exec.c for the tolerance). */
static void fd_params(sk_trainer *t, const sk_graph *g) {
  OK(sk_trainer_forward(t, NULL, E));
  OK(sk_trainer_backward(t, E));
  for (int p = 0; p < g->ntensors; p++) {
    if (g->tensors[p].role != SK_TENSOR_PARAM) continue;
    double *w = (double *)sk_trainer_values(t, p);
    const double *gr = (const double *)sk_trainer_grad(t, p);
    for (int64_t i = 0; i < sk_graph_numel(g, p); i++) {
      double keep = w[i], lp, lm;
      w[i] = keep + 1e-6;
      OK(sk_trainer_forward(t, &lp, E));
      w[i] = keep - 1e-6;
      OK(sk_trainer_forward(t, &lm, E));
      w[i] = keep;
      double num = (lp - lm) / 2e-6;
      cr_assert(fabs(num - gr[i]) <= 1e-6 * (1 + fabs(num)), "'%s'[%lld]: gradient %.12g, numeric %.12g",
                g->tensors[p].name, (long long)i, gr[i], num);
    }
  }
}

static sk_trainer *f64_trainer(const sk_graph *g) {
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = SK_F64, d.seed = 5;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(g, &d, &t, E));
  return t;
}

static void feed_random(sk_trainer *t, int x, int n) {
  double v[64];
  for (int i = 0; i < n; i++) v[i] = 2 * urand() - 1;
  OK(sk_trainer_feed(t, x, SK_F64, v, (size_t)n, E));
}

/* h read three times (twice by one Add, once by a Mul), w by a MatMul and twice by a Mul;
   the loss adds a scalar penalty to the cross-entropy. */
Test(train, tensor_read_twice_sums_gradients) {
  sk_graph g;
  sk_graph_init(&g);
  int x = input(&g, "x", SK_F32, 5, 3), y = input(&g, "y", SK_I32, 5, 0);
  int w = param(&g, "w", 3, 4, SK_INIT_UNIFORM, 0.5), v = param(&g, "v", 4, 3, SK_INIT_UNIFORM, 0.5);
  int h = op2(&g, "h", SK_OP_MATMUL, 2, x, w);
  int s = op2(&g, "s", SK_OP_ADD, 2, h, h);
  int u = op2(&g, "u", SK_OP_MUL, 2, s, h);
  int z = op2(&g, "z", SK_OP_MATMUL, 2, u, v);
  int ce = op2(&g, "ce", SK_OP_SOFTMAX_CE, 2, z, y);
  int q = op2(&g, "q", SK_OP_MUL, 2, w, w);
  int reg = op2(&g, "reg", SK_OP_REDUCE_SUM, 1, q, 0); /* every dim: a scalar */
  int loss = op2(&g, "loss", SK_OP_ADD, 2, ce, reg);
  OK(sk_graph_set_loss(&g, loss, E));
  sk_trainer *t = f64_trainer(&g);
  feed_random(t, x, 15);
  int32_t lab[5] = {0, 2, 1, 1, 0};
  OK(sk_trainer_feed(t, y, SK_I32, lab, 5, E));
  fd_params(t, &g);
  fd_params(t, &g); /* a second backward: nothing of the first stays in the sums */
  sk_trainer_destroy(t);
  sk_graph_free(&g);
}

/* An operator output no one reads gives its input no gradient, even where that input's
   gradient is also summed from another reader (h2: VirtualDataset's unread second output,
   and an Add). The Add(s, s) before it leaves a nonzero gradient in the trainer's scratch. */
Test(train, unread_output_adds_nothing) {
  sk_graph g;
  sk_graph_init(&g);
  int x = input(&g, "x", SK_F32, 4, 3), y = input(&g, "y", SK_I32, 4, 0);
  int w1 = param(&g, "w1", 3, 5, SK_INIT_UNIFORM, 0.5), w2 = param(&g, "w2", 3, 5, SK_INIT_UNIFORM, 0.5);
  int h1 = op2(&g, "h1", SK_OP_MATMUL, 2, x, w1), h2 = op2(&g, "h2", SK_OP_MATMUL, 2, x, w2);
  int vd = op2(&g, "vd", SK_OP_VIRTUAL_DATASET, 2, h1, h2);
  int s = op2(&g, "s", SK_OP_ADD, 2, vd, h2);
  int d = op2(&g, "d", SK_OP_ADD, 2, s, s);
  int loss = op2(&g, "loss", SK_OP_SOFTMAX_CE, 2, d, y);
  OK(sk_graph_set_loss(&g, loss, E));
  cr_assert_eq(sk_graph_find(&g, "vd:1"), vd + 1);
  sk_trainer *t = f64_trainer(&g);
  feed_random(t, x, 12);
  int32_t lab[4] = {4, 0, 2, 1};
  OK(sk_trainer_feed(t, y, SK_I32, lab, 4, E));
  fd_params(t, &g);
  sk_trainer_destroy(t);
  sk_graph_free(&g);
}

/* ---- (c) dtypes ------------------------------------------------------------------------------ */

static double get(sk_dtype dt, const void *p, int64_t i) {
  return dt == SK_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

Test(train, f32_follows_f64) {
  static mlp m;
  mlp_build(&m);
  sk_trainer *t32 = mlp_trainer(&m, SK_F32, sgd(0.3)), *t64 = mlp_trainer(&m, SK_F64, sgd(0.3));
  cr_assert_eq(sk_trainer_dtype(t32), SK_F32);
  for (int s = 0; s < 10; s++) {
    double l32, l64;
    OK(sk_trainer_step(t32, &l32, E));
    OK(sk_trainer_step(t64, &l64, E));
    cr_assert(fabs(l32 - l64) <= 1e-5 * (1 + fabs(l64)), "step %d: loss f32 %.9g, f64 %.9g", s, l32, l64);
  }
  int ps[2] = {m.w1, m.w2};
  for (int k = 0; k < 2; k++)
    for (int64_t i = 0; i < sk_graph_numel(&m.g, ps[k]); i++) {
      double a = get(SK_F32, sk_trainer_values(t32, ps[k]), i), b = get(SK_F64, sk_trainer_values(t64, ps[k]), i);
      cr_assert(fabs(a - b) <= 1e-5 * (1 + fabs(b)), "param %d [%lld]: f32 %.9g, f64 %.9g", ps[k], (long long)i, a, b);
    }
  sk_trainer_destroy(t32), sk_trainer_destroy(t64);
  sk_graph_free(&m.g);
}

/* Every value of every float tensor survives a round trip through the storage format. */
static void assert_stored(sk_trainer *t, const sk_graph *g, sk_dtype store, int step) {
  for (int i = 0; i < g->ntensors; i++) {
    if (!sk_dtype_is_float(g->tensors[i].dtype)) continue;
    const float *v = (const float *)sk_trainer_values(t, i);
    for (int64_t k = 0; k < sk_graph_numel(g, i); k++) {
      float r = store == SK_F16 ? sk_f16_to_f32(sk_f32_to_f16(v[k])) : sk_bf16_to_f32(sk_f32_to_bf16(v[k]));
      cr_assert(!memcmp(&r, &v[k], sizeof r), "step %d: '%s'[%lld] = %.9g is not a %s value", step, g->tensors[i].name,
                (long long)k, (double)v[k], sk_dtype_name(store));
    }
  }
}

Test(train, f16_and_bf16_store_their_format) {
  sk_dtype fmt[2] = {SK_F16, SK_BF16};
  for (int f = 0; f < 2; f++) {
    static mlp m;
    mlp_build(&m);
    sk_trainer *t = mlp_trainer(&m, fmt[f], sgd(0.3));
    cr_assert_eq(sk_trainer_dtype(t), SK_F32, "f16 / bf16 compute in f32");
    assert_stored(t, &m.g, fmt[f], -1);
    double first = 0, loss = 0;
    for (int s = 0; s < 20; s++) {
      OK(sk_trainer_step(t, &loss, E));
      if (!s) first = loss;
      assert_stored(t, &m.g, fmt[f], s);
    }
    cr_assert(loss < 0.7 * first, "%s: loss %.6g -> %.6g", sk_dtype_name(fmt[f]), first, loss);
    sk_trainer_destroy(t);
    sk_graph_free(&m.g);
  }
}

/* ---- (d) optimizers with state ------------------------------------------------------------- */

/* A counting allocator: live blocks, every call counted, call number fail_at (0: none) fails. */
typedef struct counting {
  long calls, live, fail_at;
} counting;

static void *counting_alloc(void *user, size_t size, size_t align) {
  counting *c = (counting *)user;
  if (++c->calls == c->fail_at) return NULL;
  void *p = aligned_alloc(align, (size + align - 1) / align * align);
  if (p) c->live++;
  return p;
}

static void counting_free(void *user, void *p) {
  counting *c = (counting *)user;
  if (p) c->live--, free(p);
}

static sk_trainer *counted_trainer(const mlp *m, sk_optim_desc optim, counting *c) {
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = SK_F64, d.optim = optim, d.seed = 99;
  d.alloc.alloc = counting_alloc, d.alloc.free = counting_free, d.alloc.user = c;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&m->g, &d, &t, E));
  OK(sk_trainer_feed(t, m->x, SK_F64, m->xv, B * D, E));
  OK(sk_trainer_feed(t, m->y, SK_I32, m->yv, B, E));
  return t;
}

/* Steps the trainer and, beside it, sk_optim_update on a copy of its parameters with its
   gradients and state of our own: equal bits show the state persists and the step counts. */
static void optimizer_run(const mlp *m, sk_trainer *t, sk_optim_desc o, int steps, double *first, double *last) {
  static double p[2][D * H], s0[2][D * H], s1[2][D * H];
  int ps[2] = {m->w1, m->w2};
  memset(s0, 0, sizeof s0), memset(s1, 0, sizeof s1);
  for (int k = 0; k < 2; k++) memcpy(p[k], sk_trainer_values(t, ps[k]), sizeof(double) * (size_t)sk_graph_numel(&m->g, ps[k]));
  o.lr = (double)(float)o.lr; /* as the trainer holds it */
  for (int s = 1; s <= steps; s++) {
    OK(sk_trainer_forward(t, s == 1 ? first : last, E));
    OK(sk_trainer_backward(t, E));
    OK(sk_trainer_update(t, E));
    for (int k = 0; k < 2; k++) {
      size_t n = (size_t)sk_graph_numel(&m->g, ps[k]);
      OK(sk_optim_update(&o, SK_F64, s, n, p[k], sk_trainer_grad(t, ps[k]), s0[k], s1[k], E));
      cr_assert(!memcmp(p[k], sk_trainer_values(t, ps[k]), n * sizeof(double)), "%s step %d: param %d differs",
                sk_optim_kind_name(o.kind), s, k);
    }
  }
}

Test(train, momentum_and_adam_keep_state) {
  static mlp m;
  mlp_build(&m);
  counting cs = {0, 0, 0};
  sk_trainer *t = counted_trainer(&m, sgd(0.3), &cs);
  long base = cs.live;
  sk_trainer_destroy(t);
  cr_assert_eq(cs.live, 0, "SGD trainer leaked %ld blocks", cs.live);
  sk_optim_desc opt[3];
  memset(opt, 0, sizeof opt);
  opt[0].kind = SK_OPTIM_MOMENTUM, opt[0].lr = 0.1;
  opt[1].kind = SK_OPTIM_ADAM, opt[1].lr = 0.02;
  opt[2].kind = SK_OPTIM_SGD, opt[2].lr = 0.1, opt[2].momentum = 0.5;
  long states[3] = {1, 2, 1};
  for (int k = 0; k < 3; k++) {
    counting c = {0, 0, 0};
    t = counted_trainer(&m, opt[k], &c);
    /* one state buffer per parameter and state */
    cr_assert_eq(c.live - base, 2 * states[k], "%s: %ld blocks beyond SGD's", sk_optim_kind_name(opt[k].kind),
                 c.live - base);
    double first = 0, last = 0;
    optimizer_run(&m, t, opt[k], 20, &first, &last);
    cr_assert(last < 0.8 * first, "%s: loss %.6g -> %.6g", sk_optim_kind_name(opt[k].kind), first, last);
    sk_trainer_destroy(t);
    cr_assert_eq(c.live, 0, "%s trainer leaked %ld blocks", sk_optim_kind_name(opt[k].kind), c.live);
  }
  sk_graph_free(&m.g);
}

/* ---- (e) evaluation ---------------------------------------------------------------------- */

Test(train, evaluate_counts_argmax_in_inference_mode) {
  sk_graph g;
  sk_graph_init(&g);
  int x = input(&g, "x", SK_F32, 6, 3), y = input(&g, "y", SK_I32, 6, 0);
  int w = param(&g, "w", 3, 4, SK_INIT_ZEROS, 0);
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, "drop"), op.desc.kind = SK_OP_DROPOUT, op.ninputs = 1, op.inputs[0] = x, op.keep_prob = 0.5;
  OK(sk_graph_add_op(&g, &op, NULL, E));
  int z = op2(&g, "z", SK_OP_MATMUL, 2, g.ops[0].outputs[0], w);
  OK(sk_graph_set_loss(&g, op2(&g, "loss", SK_OP_SOFTMAX_CE, 2, z, y), E));
  sk_trainer *t = f64_trainer(&g);
  BAD("the graph has no logits set", sk_trainer_evaluate(t, &(int64_t){0}, &(int64_t){0}, E));
  OK(sk_graph_set_eval(&g, z, y, E));
  double xv[18], *wv = (double *)sk_trainer_values(t, w);
  for (int i = 0; i < 18; i++) xv[i] = i >= 12 && i < 15 ? 0 : 2 * urand() - 1; /* row 4: all logits tie */
  for (int i = 0; i < 12; i++) wv[i] = 2 * urand() - 1;
  int32_t lab[6];
  double zh[24];
  int64_t want = 0;
  for (int r = 0; r < 6; r++) {
    int best = 0;
    for (int c = 0; c < 4; c++) {
      zh[r * 4 + c] = 0;
      for (int k = 0; k < 3; k++) zh[r * 4 + c] += xv[r * 3 + k] * wv[k * 4 + c];
      if (zh[r * 4 + c] > zh[r * 4 + best]) best = c;
    }
    lab[r] = r % 2 ? (best + 1) % 4 : best; /* even rows right (the tie: the first class) */
    want += r % 2 == 0;
  }
  OK(sk_trainer_feed(t, x, SK_F64, xv, 18, E));
  OK(sk_trainer_feed(t, y, SK_I32, lab, 6, E));
  int64_t correct = -1, rows = -1;
  OK(sk_trainer_evaluate(t, &correct, &rows, E));
  cr_assert_eq(rows, 6);
  cr_assert_eq(correct, want, "correct %lld, want %lld", (long long)correct, (long long)want);
  const double *zv = (const double *)sk_trainer_values(t, z);
  for (int i = 0; i < 24; i++) /* Dropout passed x through: the logits are x w */
    cr_assert(fabs(zv[i] - zh[i]) <= 1e-12, "logit %d: %.17g, want %.17g", i, zv[i], zh[i]);
  cr_assert_eq(sk_trainer_steps(t), 0);
  BAD("evaluate: NULL argument", sk_trainer_evaluate(t, NULL, &rows, E));
  sk_trainer_destroy(t);
  sk_graph_free(&g);
}

/* ---- (f) bad input ------------------------------------------------------------------------- */

Test(train, bad_input_refused_with_message) {
  static mlp m;
  mlp_build(&m);
  sk_trainer *t = mlp_trainer(&m, SK_F64, sgd(0.1));
  double xv[B * D + 1] = {0};
  int32_t yi[B] = {0};
  float yf[B] = {0};
  BAD("tensor 3 is not an input", sk_trainer_feed(t, m.w2, SK_F64, xv, D * H, E)); /* a parameter */
  BAD("tensor 5 is not an input", sk_trainer_feed(t, m.a, SK_F64, xv, B * H, E));  /* an operator's output */
  BAD("tensor 99 is not an input", sk_trainer_feed(t, 99, SK_F64, xv, 1, E));
  BAD("feed 'x': 65 elements given, the tensor has 64", sk_trainer_feed(t, m.x, SK_F64, xv, B * D + 1, E));
  BAD("feed 'x': cannot convert i32 data into a f64 tensor", sk_trainer_feed(t, m.x, SK_I32, yi, B * D, E));
  BAD("feed 'y': cannot convert f32 data into a i32 tensor", sk_trainer_feed(t, m.y, SK_F32, yf, B, E));
  BAD("feed 'y': cannot convert u8 data into a i32 tensor", sk_trainer_feed(t, m.y, SK_U8, yi, B, E));
  BAD("feed: NULL trainer or data", sk_trainer_feed(t, m.x, SK_F64, NULL, B * D, E));
  BAD("feed: NULL trainer or data", sk_trainer_feed(NULL, m.x, SK_F64, xv, B * D, E));
  BAD("NULL trainer", sk_trainer_forward(NULL, NULL, E));
  BAD("NULL trainer", sk_trainer_backward(NULL, E));
  BAD("NULL trainer", sk_trainer_update(NULL, E));
  BAD("NULL trainer", sk_trainer_step(NULL, NULL, E));
  cr_assert_null(sk_trainer_values(NULL, 0));
  cr_assert_null(sk_trainer_values(t, 99));
  sk_trainer *u = (sk_trainer *)&m; /* must be overwritten by NULL on failure */
  BAD("trainer: NULL output", sk_trainer_create(&m.g, NULL, NULL, E));
  BAD("graph: NULL graph", sk_trainer_create(NULL, NULL, &u, E));
  cr_assert_null(u);
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = SK_I32;
  BAD("dtype must be f32, f64, f16 or bf16, not i32", sk_trainer_create(&m.g, &d, &u, E));
  d.dtype = SK_F32, d.alloc.alloc = counting_alloc;
  BAD("set both allocator functions or neither", sk_trainer_create(&m.g, &d, &u, E));
  memset(&d, 0, sizeof d);
  d.optim.kind = SK_OPTIM_ADAM, d.optim.beta1 = 2;
  BAD("beta1 2 is outside (0, 1)", sk_trainer_create(&m.g, &d, &u, E));
  cr_assert_null(u);
  /* the refusals changed nothing: a step now equals a fresh trainer's */
  sk_trainer *fresh = mlp_trainer(&m, SK_F64, sgd(0.1));
  double l1, l2;
  OK(sk_trainer_step(t, &l1, E));
  OK(sk_trainer_step(fresh, &l2, E));
  cr_assert(l1 == l2 && !memcmp(sk_trainer_values(t, m.w1), sk_trainer_values(fresh, m.w1), sizeof(double) * D * H));
  sk_trainer_destroy(t), sk_trainer_destroy(fresh);
  sk_graph_free(&m.g);
}

Test(train, graph_without_loss_or_reachable_parameter) {
  sk_graph g;
  sk_graph_init(&g);
  int x = input(&g, "x", SK_F32, 4, 3), y = input(&g, "y", SK_I32, 4, 0);
  param(&g, "w", 3, 3, SK_INIT_ONES, 0);
  int loss = op2(&g, "loss", SK_OP_SOFTMAX_CE, 2, x, y); /* reads no parameter */
  sk_trainer *t = NULL;
  BAD("graph: no loss is set", sk_trainer_create(&g, NULL, &t, E));
  cr_assert_null(t);
  OK(sk_graph_set_loss(&g, loss, E));
  OK(sk_trainer_create(&g, NULL, &t, E));
  OK(sk_trainer_forward(t, NULL, E));
  BAD("no parameter reaches the loss", sk_trainer_backward(t, E));
  sk_trainer_destroy(t);
  sk_graph_free(&g);
}

/* A step that fails in a kernel (a label out of range) names the operator, changes no
   parameter, and the trainer steps on once fed good data. */
Test(train, failed_step_leaves_trainer_usable) {
  static mlp m;
  mlp_build(&m);
  sk_trainer *t = mlp_trainer(&m, SK_F64, sgd(0.1)), *fresh = mlp_trainer(&m, SK_F64, sgd(0.1));
  int32_t bad[B];
  memcpy(bad, m.yv, sizeof bad);
  bad[3] = C;
  OK(sk_trainer_feed(t, m.y, SK_I32, bad, B, E));
  static double w1[D * H];
  memcpy(w1, sk_trainer_values(t, m.w1), sizeof w1);
  BAD("operator 'loss' (SoftmaxCrossEntropy) forward: ", sk_trainer_step(t, NULL, E));
  cr_assert(!memcmp(w1, sk_trainer_values(t, m.w1), sizeof w1) && sk_trainer_steps(t) == 0);
  OK(sk_trainer_feed(t, m.y, SK_I32, m.yv, B, E));
  double l1, l2;
  OK(sk_trainer_step(t, &l1, E));
  OK(sk_trainer_step(fresh, &l2, E));
  cr_assert(l1 == l2 && !memcmp(sk_trainer_values(t, m.w1), sk_trainer_values(fresh, m.w1), sizeof w1));
  sk_trainer_destroy(t), sk_trainer_destroy(fresh);
  sk_graph_free(&m.g);
}

/* ---- (g) allocation failure ---------------------------------------------------------------- */

/* Fails the k-th allocation for k = 1, 2, ... until creation succeeds: every failure is
   SK_ERR_OUT_OF_MEMORY with no block left live and no trainer; then the trainer works. */
static void oom_sweep(const mlp *m, sk_optim_desc o, sk_dtype dt) {
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = dt, d.optim = o, d.alloc.alloc = counting_alloc, d.alloc.free = counting_free;
  counting c = {0, 0, 0};
  d.alloc.user = &c;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&m->g, &d, &t, E));
  long needed = c.calls;
  sk_trainer_destroy(t);
  cr_assert(needed > 10 && c.live == 0);
  for (long k = 1;; k++) {
    c.calls = 0, c.live = 0, c.fail_at = k;
    sk_error e;
    t = (sk_trainer *)&c;
    sk_result r = sk_trainer_create(&m->g, &d, &t, &e);
    if (r == SK_OK) {
      cr_assert_eq(k, needed + 1, "creation succeeded with allocation %ld failing (of %ld)", k, needed);
      break;
    }
    cr_assert_eq(r, SK_ERR_OUT_OF_MEMORY, "allocation %ld failing: %s (%s)", k, sk_result_name(r), e.msg);
    cr_assert(strstr(e.msg, "out of memory"), "allocation %ld failing: '%s'", k, e.msg);
    cr_assert_null(t, "allocation %ld failing: a trainer was returned", k);
    cr_assert_eq(c.live, 0, "allocation %ld failing: %ld blocks leaked", k, c.live);
  }
  OK(sk_trainer_feed(t, m->x, SK_F64, m->xv, B * D, E));
  OK(sk_trainer_feed(t, m->y, SK_I32, m->yv, B, E));
  OK(sk_trainer_step(t, NULL, E));
  sk_trainer_destroy(t);
  cr_assert_eq(c.live, 0, "%ld blocks leaked after destroy", c.live);
}

Test(train, allocation_failure_sweep) {
  static mlp m;
  mlp_build(&m);
  oom_sweep(&m, sgd(0.1), SK_F64);
  sk_optim_desc adam;
  memset(&adam, 0, sizeof adam);
  adam.kind = SK_OPTIM_ADAM;
  oom_sweep(&m, adam, SK_F16);
  sk_graph_free(&m.g);
}

/* ---- more operators in training ----------------------------------------------------------- */

/* An embedding (Gather with repeated indices: its rows' gradients add) and labels made dense
   by OneHot, whose input takes no gradient. */
Test(train, embedding_and_one_hot_labels) {
  sk_graph g;
  sk_graph_init(&g);
  int idx = input(&g, "idx", SK_I32, 5, 0), y = input(&g, "y", SK_I32, 5, 0);
  int tab = param(&g, "table", 7, 4, SK_INIT_NORMAL, 0.5), w = param(&g, "w", 4, 3, SK_INIT_UNIFORM, 0.5);
  int e = op2(&g, "e", SK_OP_GATHER, 2, tab, idx);
  int z = op2(&g, "z", SK_OP_MATMUL, 2, e, w);
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, "oh"), op.desc.kind = SK_OP_ONE_HOT, op.desc.depth = 3, op.ninputs = 1, op.inputs[0] = y;
  OK(sk_graph_add_op(&g, &op, NULL, E));
  int oh = sk_graph_find(&g, "oh");
  OK(sk_graph_set_loss(&g, op2(&g, "loss", SK_OP_SOFTMAX_CE, 2, z, oh), E));
  sk_trainer *t = f64_trainer(&g);
  int32_t iv[5] = {1, 6, 1, 3, 1}, yv[5] = {2, 0, 1, 2, 2};
  OK(sk_trainer_feed(t, idx, SK_I32, iv, 5, E));
  OK(sk_trainer_feed(t, y, SK_I32, yv, 5, E));
  fd_params(t, &g);
  cr_assert_null(sk_trainer_grad(t, oh), "OneHot's output needs no gradient");
  const double *gt = (const double *)sk_trainer_grad(t, tab);
  for (int c = 0; c < 4; c++) cr_assert_eq(gt[0 * 4 + c], 0.0, "row 0 is never looked up");
  sk_trainer_destroy(t);
  sk_graph_free(&g);
}

/* Dense with bias, LayerNorm, Dropout (its mask fixed within a step), Tanh, the per-row loss
   of SoftmaxCrossEntropyWithLogits and its mean. */
Test(train, dense_layer_norm_dropout_chain) {
  sk_graph g;
  sk_graph_init(&g);
  int x = input(&g, "x", SK_F32, 6, 4), lab = input(&g, "lab", SK_F32, 6, 5);
  int w = param(&g, "w", 5, 4, SK_INIT_UNIFORM, 0.5), b = param(&g, "b", 5, 0, SK_INIT_UNIFORM, 0.5);
  int gam = param(&g, "gamma", 5, 0, SK_INIT_UNIFORM, 1), bet = param(&g, "beta", 5, 0, SK_INIT_UNIFORM, 0.5);
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, "dense"), op.desc.kind = SK_OP_DENSE, op.ninputs = 3;
  op.inputs[0] = x, op.inputs[1] = w, op.inputs[2] = b;
  OK(sk_graph_add_op(&g, &op, NULL, E));
  strcpy(op.name, "ln"), op.desc.kind = SK_OP_LAYER_NORM, op.desc.naxis = 1, op.desc.axis[0] = -1;
  op.inputs[0] = sk_graph_find(&g, "dense"), op.inputs[1] = gam, op.inputs[2] = bet;
  OK(sk_graph_add_op(&g, &op, NULL, E));
  memset(&op, 0, sizeof op);
  strcpy(op.name, "drop"), op.desc.kind = SK_OP_DROPOUT, op.ninputs = 1, op.inputs[0] = sk_graph_find(&g, "ln");
  op.keep_prob = 0.8;
  OK(sk_graph_add_op(&g, &op, NULL, E));
  int th = op2(&g, "th", SK_OP_TANH, 1, sk_graph_find(&g, "drop"), 0);
  int rows = op2(&g, "rows", SK_OP_SOFTMAX_CE_LOGITS, 2, th, lab);
  OK(sk_graph_set_loss(&g, op2(&g, "loss", SK_OP_REDUCE_MEAN, 1, rows, 0), E));
  sk_trainer *t = f64_trainer(&g);
  feed_random(t, x, 24);
  double lv[30];
  for (int i = 0; i < 30; i++) lv[i] = i % 5 == i / 5 % 5 ? 1 : 0; /* one-hot rows */
  OK(sk_trainer_feed(t, lab, SK_F64, lv, 30, E));
  fd_params(t, &g);
  const uint8_t *m = (const uint8_t *)sk_trainer_values(t, sk_graph_find(&g, "drop:1"));
  int kept = 0;
  for (int i = 0; i < 30; i++) kept += m[i];
  cr_assert(kept > 15 && kept < 30, "the mask keeps %d of 30", kept);
  sk_trainer_destroy(t);
  sk_graph_free(&g);
}

/* The mask of a step is a function of (seed, operator, step): it changes with the step and
   is the same in two trainers of one seed. */
Test(train, dropout_mask_per_step) {
  sk_graph g;
  sk_graph_init(&g);
  int x = input(&g, "x", SK_F32, 8, 8), y = input(&g, "y", SK_I32, 8, 0);
  int w = param(&g, "w", 8, 4, SK_INIT_UNIFORM, 0.5);
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, "drop"), op.desc.kind = SK_OP_DROPOUT, op.ninputs = 1, op.inputs[0] = x;
  OK(sk_graph_add_op(&g, &op, NULL, E));
  int z = op2(&g, "z", SK_OP_MATMUL, 2, sk_graph_find(&g, "drop"), w);
  OK(sk_graph_set_loss(&g, op2(&g, "loss", SK_OP_SOFTMAX_CE, 2, z, y), E));
  sk_trainer *t[2] = {f64_trainer(&g), f64_trainer(&g)};
  int32_t yv[8] = {0, 1, 2, 3, 0, 1, 2, 3};
  static uint8_t masks[2][3][64];
  for (int k = 0; k < 2; k++) {
    feed_random(t[k], x, 64); /* x's values do not matter to the mask */
    OK(sk_trainer_feed(t[k], y, SK_I32, yv, 8, E));
    for (int s = 0; s < 3; s++) {
      OK(sk_trainer_step(t[k], NULL, E));
      memcpy(masks[k][s], sk_trainer_values(t[k], sk_graph_find(&g, "drop:1")), 64);
    }
  }
  for (int s = 0; s < 3; s++) cr_assert(!memcmp(masks[0][s], masks[1][s], 64), "step %d: two trainers differ", s);
  cr_assert(memcmp(masks[0][0], masks[0][1], 64) && memcmp(masks[0][1], masks[0][2], 64), "a mask repeats");
  sk_trainer_destroy(t[0]), sk_trainer_destroy(t[1]);
  sk_graph_free(&g);
}

/* ---- the GEMM hook and the seed ------------------------------------------------------------ */

static long gemm_calls;
static sk_result counting_gemm(void *user, sk_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                               const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                               int64_t ldc) {
  gemm_calls += user == &gemm_calls;
  return sk_gemm_builtin(NULL, dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

Test(train, gemm_hook_and_zero_seed) {
  static mlp m;
  mlp_build(&m);
  sk_kernel_ctx ctx = {counting_gemm, &gemm_calls};
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = SK_F64, d.kernels = &ctx; /* seed 0: the default, 1 */
  sk_trainer *hooked = NULL, *plain = mlp_trainer(&m, SK_F64, sgd(0));
  OK(sk_trainer_create(&m.g, &d, &hooked, E));
  OK(sk_trainer_feed(hooked, m.x, SK_F64, m.xv, B * D, E));
  OK(sk_trainer_feed(hooked, m.y, SK_I32, m.yv, B, E));
  sk_train_desc d1 = d;
  d1.seed = 1, d1.kernels = NULL;
  sk_trainer *one = NULL;
  OK(sk_trainer_create(&m.g, &d1, &one, E));
  cr_assert(!memcmp(sk_trainer_values(hooked, m.w1), sk_trainer_values(one, m.w1), sizeof(double) * D * H),
            "seed 0 is not seed 1");
  cr_assert(memcmp(sk_trainer_values(hooked, m.w1), sk_trainer_values(plain, m.w1), sizeof(double) * D * H),
            "seeds 0 and 99 draw the same");
  OK(sk_trainer_step(hooked, NULL, E));
  cr_assert_geq(gemm_calls, 4, "the hook ran %ld times in a step of two MatMuls", gemm_calls);
  sk_trainer_destroy(hooked), sk_trainer_destroy(one), sk_trainer_destroy(plain);
  sk_graph_free(&m.g);
}

/* grad_scales: a factor per (operator, input) on the gradient that read contributes. w read by
   the MatMul (x0.5) and twice by the Mul (x3 on its first input only): w's gradient is
   0.5 g_mm + 3 g_mul0 + g_mul1, compared with the three contributions taken apart. */
Test(train, grad_scales_per_read) {
  sk_graph g;
  sk_graph_init(&g);
  int x = input(&g, "x", SK_F32, 5, 3), y = input(&g, "y", SK_I32, 5, 0);
  int w = param(&g, "w", 3, 3, SK_INIT_UNIFORM, 0.5);
  int h = op2(&g, "h", SK_OP_MATMUL, 2, x, w);
  int ce = op2(&g, "ce", SK_OP_SOFTMAX_CE, 2, h, y);
  int q = op2(&g, "q", SK_OP_MUL, 2, w, w);
  int reg = op2(&g, "reg", SK_OP_REDUCE_SUM, 1, q, 0);
  OK(sk_graph_set_loss(&g, op2(&g, "loss", SK_OP_ADD, 2, ce, reg), E));
  double scales[5 * SK_OP_MAX_INPUTS], gw[3][9];
  const double pick[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}; /* MatMul's w, Mul's first, Mul's second */
  for (int run = 0; run < 4; run++) {
    for (int i = 0; i < 5 * SK_OP_MAX_INPUTS; i++) scales[i] = 1;
    double *mm = &scales[0 * SK_OP_MAX_INPUTS + 1], *m0 = &scales[2 * SK_OP_MAX_INPUTS + 0], *m1 = &scales[2 * SK_OP_MAX_INPUTS + 1];
    if (run < 3) *mm = pick[run][0], *m0 = pick[run][1], *m1 = pick[run][2];
    else *mm = 0.5, *m0 = 3;
    sk_train_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = SK_F64, d.seed = 5, d.grad_scales = scales;
    sk_trainer *t = NULL;
    OK(sk_trainer_create(&g, &d, &t, E));
    *mm = 42; /* copied at create: a later change does nothing */
    rng_state = 77;
    feed_random(t, x, 15);
    int32_t lab[5] = {0, 2, 1, 1, 0};
    OK(sk_trainer_feed(t, y, SK_I32, lab, 5, E));
    double loss;
    OK(sk_trainer_forward(t, &loss, E));
    OK(sk_trainer_backward(t, E));
    const double *gr = (const double *)sk_trainer_grad(t, w);
    for (int i = 0; i < 9; i++) {
      if (run < 3) gw[run][i] = gr[i];
      else {
        double want = 0.5 * gw[0][i] + 3 * gw[1][i] + gw[2][i];
        cr_assert_float_eq(gr[i], want, 1e-12 * (1 + fabs(want)), "w[%d]: %.17g, want %.17g", i, gr[i], want);
      }
    }
    sk_trainer_destroy(t);
  }
  sk_graph_free(&g);
}
