/* sk_kernels.h: every backward against central differences of its forward (f64), hand-computed
   forwards, f32 against f64, the sharding identities the runtime relies on (partial sums over a
   split axis, global divisors, row / class offsets, slice-exact dropout masks), the GEMM hook,
   and every kind of bad input. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "sk_kernels.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) { /* xorshift64: deterministic, in [0, 1) */
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}
static void fill(double *p, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * urand();
}
static void to_f32(const double *d, float *f, int64_t n) {
  for (int64_t i = 0; i < n; i++) f[i] = (float)d[i];
}
static void assert_close(const double *got, const double *want, int64_t n, double tol, const char *what) {
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])), "%s[%lld]: %.12g, want %.12g", what, (long long)i,
              got[i], want[i]);
}
static void assert_close_f32(const float *got, const double *want, int64_t n, double tol, const char *what) {
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs((double)got[i] - want[i]) <= tol * (1 + fabs(want[i])), "%s[%lld]: %.9g, want %.9g", what,
              (long long)i, (double)got[i], want[i]);
}
#define OK(call)                                                                   \
  do {                                                                             \
    sk_error e_;                                                                   \
    memset(&e_, 0, sizeof e_);                                                     \
    sk_result r_ = (call);                                                         \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg);     \
  } while (0)
/* A call that must fail with SK_ERR_INVALID_ARGUMENT and a message naming `word`. */
#define BAD(word, call)                                                                               \
  do {                                                                                                \
    sk_error e_;                                                                                      \
    memset(&e_, 0, sizeof e_);                                                                        \
    sk_result r_ = (call);                                                                            \
    cr_assert_eq(r_, SK_ERR_INVALID_ARGUMENT, "%s returned %s", #call, sk_result_name(r_));           \
    cr_assert_eq(e_.code, SK_ERR_INVALID_ARGUMENT);                                                   \
    cr_assert(strstr(e_.msg, word) != NULL, "%s: message '%s' does not name '%s'", #call, e_.msg, word); \
  } while (0)
/* OK and BAD pass &e_ as the error: the calls below write `E` for it. */
#define E (&e_)

/* ---- finite differences ------------------------------------------------------------------- */

/* A case: inputs, the forward's output, a random weight w on it (L = sum w out), and the
   backward's gradients of L (the backward receives w as dy). */
typedef struct fdcase {
  int nin;
  double *in[4];
  int64_t nel[4];
  double *out, *w, *grad[4];
  int64_t nout;
  void (*fwd)(struct fdcase *c);
  void (*bwd)(struct fdcase *c);
} fdcase;

static double fd_loss(fdcase *c) {
  c->fwd(c);
  double s = 0;
  for (int64_t i = 0; i < c->nout; i++) s += c->w[i] * c->out[i];
  return s;
}

/* Central differences with h = 1e-6 in f64: truncation error ~h^2 |f'''| ~ 1e-12 and rounding
   ~1e-16 |L| / h ~ 1e-10, so 1e-6 relative (to 1 + |grad|) leaves a wide margin while catching
   any wrong term (those are O(1)). Inputs are drawn away from kinks (ReLU at 0, |x| at 0, ties). */
static void fd_check(fdcase *c, const char *what) {
  const double h = 1e-6, tol = 1e-6;
  fill(c->w, c->nout, -1, 1);
  c->fwd(c);
  c->bwd(c);
  for (int k = 0; k < c->nin; k++) {
    if (!c->grad[k]) continue;
    for (int64_t i = 0; i < c->nel[k]; i++) {
      double keep = c->in[k][i];
      c->in[k][i] = keep + h;
      double lp = fd_loss(c);
      c->in[k][i] = keep - h;
      double lm = fd_loss(c);
      c->in[k][i] = keep;
      double num = (lp - lm) / (2 * h);
      cr_assert(fabs(num - c->grad[k][i]) <= tol * (1 + fabs(num)), "%s: d input %d [%lld]: analytic %.10g, numeric %.10g",
                what, k, (long long)i, c->grad[k][i], num);
    }
  }
}

/* Buffers for one case (the largest test needs well under 256 elements per tensor). */
#define FDN 256
static double B_in[4][FDN], B_out[FDN], B_w[FDN], B_grad[4][FDN];
static fdcase fd_new(int nin, const int64_t *nel, int64_t nout, double lo, double hi) {
  fdcase c;
  memset(&c, 0, sizeof c);
  c.nin = nin, c.nout = nout, c.out = B_out, c.w = B_w;
  for (int k = 0; k < nin; k++) {
    c.in[k] = B_in[k], c.nel[k] = nel[k], c.grad[k] = B_grad[k];
    fill(c.in[k], nel[k], lo, hi);
  }
  return c;
}

/* ---- backward = finite differences of the forward (f64) ----------------------------------- */

static int P_nda, P_ndb, P_nd, P_axis;
static int64_t P_sha[SK_MAX_DIMS], P_shb[SK_MAX_DIMS], P_sh[SK_MAX_DIMS];
static bool P_ta, P_tb;
static sk_binop P_op;

static void bmm_fwd(fdcase *c) {
  OK(sk_kern_batch_matmul(NULL, SK_F64, P_ta, P_tb, P_nda, P_sha, c->in[0], P_ndb, P_shb, c->in[1], c->out, E));
}
static void bmm_bwd(fdcase *c) {
  OK(sk_kern_batch_matmul_bwd(NULL, SK_F64, P_ta, P_tb, P_nda, P_sha, c->in[0], P_ndb, P_shb, c->in[1], c->w,
                              c->grad[0], c->grad[1], E));
}

Test(kernels_grad, matmul_every_transpose) {
  for (int t = 0; t < 4; t++) {
    P_ta = t & 1, P_tb = (t >> 1) & 1, P_nda = P_ndb = 2;
    int64_t m = 3, k = 4, n = 5;
    P_sha[0] = P_ta ? k : m, P_sha[1] = P_ta ? m : k;
    P_shb[0] = P_tb ? n : k, P_shb[1] = P_tb ? k : n;
    int64_t nel[2] = {m * k, k * n};
    fdcase c = fd_new(2, nel, m * n, -1, 1);
    c.fwd = bmm_fwd, c.bwd = bmm_bwd;
    fd_check(&c, "matmul");
  }
}

Test(kernels_grad, batch_matmul_broadcast) {
  /* a [2,1,3,4] against b [3,4,2] (transposed: [3,2,4]): batch dims broadcast to [2,3] */
  P_ta = false, P_tb = true, P_nda = 4, P_ndb = 3;
  int64_t sa[4] = {2, 1, 3, 4}, sb[3] = {3, 2, 4};
  memcpy(P_sha, sa, sizeof sa), memcpy(P_shb, sb, sizeof sb);
  int64_t nel[2] = {24, 24};
  fdcase c = fd_new(2, nel, 2 * 3 * 3 * 2, -1, 1);
  c.fwd = bmm_fwd, c.bwd = bmm_bwd;
  fd_check(&c, "batch_matmul");
}

static void dense_fwd(fdcase *c) { OK(sk_kern_dense(NULL, SK_F64, 3, P_sha, c->in[0], P_shb, c->in[1], c->in[2], c->out, E)); }
static void dense_bwd(fdcase *c) {
  OK(sk_kern_dense_bwd(NULL, SK_F64, 3, P_sha, c->in[0], P_shb, c->in[1], c->w, c->grad[0], c->grad[1], c->grad[2], E));
}
Test(kernels_grad, dense) {
  int64_t sx[3] = {2, 3, 4}, sw[2] = {5, 4}, nel[3] = {24, 20, 5};
  memcpy(P_sha, sx, sizeof sx), memcpy(P_shb, sw, sizeof sw);
  fdcase c = fd_new(3, nel, 30, -1, 1);
  c.fwd = dense_fwd, c.bwd = dense_bwd;
  fd_check(&c, "dense");
}

typedef sk_result (*unary_fn)(sk_dtype, int, const int64_t *, const void *, void *, sk_error *);
typedef sk_result (*unary_bwd_fn)(sk_dtype, int, const int64_t *, const void *, const void *, void *, sk_error *);
static unary_fn U_f;
static unary_bwd_fn U_b;
static void un_fwd(fdcase *c) { OK(U_f(SK_F64, P_nd, P_sh, c->in[0], c->out, E)); }
static void un_bwd(fdcase *c) { OK(U_b(SK_F64, P_nd, P_sh, c->in[0], c->w, c->grad[0], E)); }
Test(kernels_grad, relu_gelu_tanh_sigmoid_silu) {
  unary_fn f[5] = {sk_kern_relu, sk_kern_gelu, sk_kern_tanh, sk_kern_sigmoid, sk_kern_silu};
  unary_bwd_fn b[5] = {sk_kern_relu_bwd, sk_kern_gelu_bwd, sk_kern_tanh_bwd, sk_kern_sigmoid_bwd, sk_kern_silu_bwd};
  const char *names[5] = {"relu", "gelu", "tanh", "sigmoid", "silu"};
  P_nd = 2, P_sh[0] = 3, P_sh[1] = 7;
  for (int k = 0; k < 5; k++) {
    int64_t nel[1] = {21};
    U_f = f[k], U_b = b[k];
    fdcase c = fd_new(1, nel, 21, -3, 3);
    c.fwd = un_fwd, c.bwd = un_bwd;
    fd_check(&c, names[k]);
  }
}

/* Sigmoid and SiLU at a few points, and far out where exp(-x) would overflow. */
Test(kernels_value, sigmoid_and_silu) {
  double x[5] = {0, 2, -2, 800, -800}, y[5], z[5];
  int64_t sh[1] = {5};
  OK(sk_kern_sigmoid(SK_F64, 1, sh, x, y, E));
  OK(sk_kern_silu(SK_F64, 1, sh, x, z, E));
  double e2 = 1 / (1 + exp(-2.0));
  double want_y[5] = {0.5, e2, 1 - e2, 1, 0}, want_z[5] = {0, 2 * e2, -2 * (1 - e2), 800, 0};
  assert_close(y, want_y, 5, 1e-15, "sigmoid");
  assert_close(z, want_z, 5, 1e-15, "silu");
}

static uint8_t D_mask[FDN];
static void drop_fwd(fdcase *c) { OK(sk_kern_dropout(SK_F64, P_nd, P_sh, 0.7, c->in[0], D_mask, c->out, E)); }
static void drop_bwd(fdcase *c) { OK(sk_kern_dropout_bwd(SK_F64, P_nd, P_sh, 0.7, c->w, D_mask, c->grad[0], E)); }
Test(kernels_grad, dropout) {
  P_nd = 1, P_sh[0] = 40;
  OK(sk_kern_dropout_mask(7, 0.7, 1, P_sh, NULL, D_mask, E));
  int64_t nel[1] = {40};
  fdcase c = fd_new(1, nel, 40, -1, 1);
  c.fwd = drop_fwd, c.bwd = drop_bwd;
  fd_check(&c, "dropout");
}

static void bin_fwd(fdcase *c) { OK(sk_kern_binary(P_op, SK_F64, P_nda, P_sha, c->in[0], P_ndb, P_shb, c->in[1], c->out, E)); }
static void bin_bwd(fdcase *c) {
  OK(sk_kern_binary_bwd(P_op, SK_F64, P_nda, P_sha, c->in[0], P_ndb, P_shb, c->in[1], c->w, c->grad[0], c->grad[1], E));
}
Test(kernels_grad, binary_two_way_broadcast) {
  /* a [2,1,3] and b [4,1] broadcast to [2,4,3]: each input is repeated along a dim */
  P_nda = 3, P_ndb = 2;
  int64_t sa[3] = {2, 1, 3}, sb[2] = {4, 1}, nel[2] = {6, 4};
  memcpy(P_sha, sa, sizeof sa), memcpy(P_shb, sb, sizeof sb);
  const char *names[5] = {"add", "sub", "mul", "div", "pow"};
  for (int op = 0; op < 5; op++) {
    P_op = (sk_binop)op;
    fdcase c = fd_new(2, nel, 24, 0.5, 2); /* positive: Pow's ln x and Div's 1/b stay smooth */
    c.fwd = bin_fwd, c.bwd = bin_bwd;
    fd_check(&c, names[op]);
  }
}

static sk_data_format P_fmt;
static void bias_fwd(fdcase *c) { OK(sk_kern_bias_add(SK_F64, P_fmt, P_nd, P_sh, c->in[0], c->in[1], c->out, E)); }
static void bias_bwd(fdcase *c) { OK(sk_kern_bias_add_bwd(SK_F64, P_fmt, P_nd, P_sh, c->w, c->grad[0], c->grad[1], E)); }
Test(kernels_grad, bias_add_nchw_nhwc) {
  P_nd = 4, P_sh[0] = 2, P_sh[1] = 3, P_sh[2] = 2, P_sh[3] = 5;
  for (int f = 0; f < 2; f++) {
    P_fmt = (sk_data_format)f;
    int64_t nel[2] = {60, f == 0 ? 3 : 5};
    fdcase c = fd_new(2, nel, 60, -1, 1);
    c.fwd = bias_fwd, c.bwd = bias_bwd;
    fd_check(&c, f == 0 ? "bias_add NCHW" : "bias_add NHWC");
  }
}

static int64_t P_nw;
static void prelu_fwd(fdcase *c) { OK(sk_kern_prelu(SK_F64, P_nd, P_sh, c->in[0], P_nw, c->in[1], c->out, E)); }
static void prelu_bwd(fdcase *c) {
  OK(sk_kern_prelu_bwd(SK_F64, P_nd, P_sh, c->in[0], P_nw, c->in[1], c->w, c->grad[0], c->grad[1], E));
}
Test(kernels_grad, prelu_per_channel_and_shared) {
  P_nd = 3, P_sh[0] = 2, P_sh[1] = 3, P_sh[2] = 4;
  for (int k = 0; k < 2; k++) {
    P_nw = k == 0 ? 3 : 1;
    int64_t nel[2] = {24, P_nw};
    fdcase c = fd_new(2, nel, 24, -1, 1);
    c.fwd = prelu_fwd, c.bwd = prelu_bwd;
    fd_check(&c, "prelu");
  }
}

static double P_eps;
static int P_which; /* 0 softmax, 1 log_softmax, 2 l2_normalize */
static void axis_fwd(fdcase *c) {
  if (P_which == 0) OK(sk_kern_softmax(SK_F64, P_nd, P_sh, P_axis, c->in[0], c->out, E));
  if (P_which == 1) OK(sk_kern_log_softmax(SK_F64, P_nd, P_sh, P_axis, c->in[0], c->out, E));
  if (P_which == 2) OK(sk_kern_l2_normalize(SK_F64, P_nd, P_sh, P_axis, P_eps, c->in[0], c->out, E));
}
static void axis_bwd(fdcase *c) {
  if (P_which == 0) OK(sk_kern_softmax_bwd(SK_F64, P_nd, P_sh, P_axis, c->out, c->w, c->grad[0], E));
  if (P_which == 1) OK(sk_kern_log_softmax_bwd(SK_F64, P_nd, P_sh, P_axis, c->out, c->w, c->grad[0], E));
  if (P_which == 2) OK(sk_kern_l2_normalize_bwd(SK_F64, P_nd, P_sh, P_axis, P_eps, c->in[0], c->w, c->grad[0], E));
}
Test(kernels_grad, softmax_log_softmax_l2_normalize) {
  P_nd = 3, P_sh[0] = 2, P_sh[1] = 3, P_sh[2] = 4, P_eps = SK_L2_NORMALIZE_EPSILON;
  int axes[3] = {1, -1, 0};
  for (P_which = 0; P_which < 3; P_which++)
    for (int a = 0; a < 3; a++) {
      P_axis = axes[a];
      int64_t nel[1] = {24};
      fdcase c = fd_new(1, nel, 24, -2, 2);
      c.fwd = axis_fwd, c.bwd = axis_bwd;
      fd_check(&c, P_which == 0 ? "softmax" : P_which == 1 ? "log_softmax" : "l2_normalize");
    }
  /* L2Normalize below epsilon: the denominator is the constant sqrt(epsilon) */
  P_which = 2, P_axis = 0, P_eps = 10.0;
  int64_t nel[1] = {24};
  fdcase c = fd_new(1, nel, 24, -0.5, 0.5);
  c.fwd = axis_fwd, c.bwd = axis_bwd;
  fd_check(&c, "l2_normalize below epsilon");
}

static double LN_mean[FDN], LN_var[FDN];
static void ln_fwd(fdcase *c) {
  OK(sk_kern_layer_norm(SK_F64, P_nd, P_sh, P_axis, 1e-5, c->in[0], c->in[1], c->in[2], c->out, LN_mean, LN_var, E));
}
static void ln_bwd(fdcase *c) {
  OK(sk_kern_layer_norm_bwd(SK_F64, P_nd, P_sh, P_axis, 1e-5, c->in[0], c->w, LN_mean, LN_var, c->in[1], c->grad[0],
                            c->grad[1], c->grad[2], E));
}
Test(kernels_grad, layer_norm) {
  P_nd = 3, P_sh[0] = 2, P_sh[1] = 3, P_sh[2] = 4;
  int begins[2] = {1, -1};
  for (int b = 0; b < 2; b++) {
    P_axis = begins[b];
    int64_t cols = b == 0 ? 12 : 4, nel[3] = {24, cols, cols};
    fdcase c = fd_new(3, nel, 24, -1, 1);
    c.fwd = ln_fwd, c.bwd = ln_bwd;
    fd_check(&c, "layer_norm");
  }
}

static double RMS_rstd[FDN];
static void rms_fwd(fdcase *c) {
  OK(sk_kern_rms_norm(SK_F64, P_nd, P_sh, P_axis, 1e-5, c->in[0], c->in[1], c->out, RMS_rstd, E));
}
static void rms_bwd(fdcase *c) {
  OK(sk_kern_rms_norm_bwd(SK_F64, P_nd, P_sh, P_axis, c->in[0], c->w, RMS_rstd, c->in[1], c->grad[0], c->grad[1], E));
}
Test(kernels_grad, rms_norm) {
  P_nd = 3, P_sh[0] = 2, P_sh[1] = 3, P_sh[2] = 4;
  int begins[2] = {1, -1};
  for (int b = 0; b < 2; b++) {
    P_axis = begins[b];
    int64_t cols = b == 0 ? 12 : 4, nel[2] = {24, cols};
    fdcase c = fd_new(2, nel, 24, -1, 1);
    c.fwd = rms_fwd, c.bwd = rms_bwd;
    fd_check(&c, "rms_norm");
  }
}

/* y = x / sqrt(mean(x^2) + eps) * gamma, per row: [3, 4] / sqrt(12.5 + eps). */
Test(kernels_value, rms_norm_rows) {
  double x[4] = {3, 4, 0, 0}, g[2] = {1, 2}, y[4], rstd[2];
  int64_t sh[2] = {2, 2};
  OK(sk_kern_rms_norm(SK_F64, 2, sh, 1, SK_RMS_NORM_EPSILON, x, g, y, rstd, E));
  double r0 = 1 / sqrt(12.5 + 1e-6), r1 = 1 / sqrt(1e-6);
  double want_y[4] = {3 * r0, 8 * r0, 0, 0}, want_r[2] = {r0, r1};
  assert_close(y, want_y, 4, 1e-15, "rms_norm y");
  assert_close(rstd, want_r, 2, 1e-15, "rms_norm rstd");
}

static double CE_labels[FDN], CE_dlogits[FDN];
static int32_t CE_sparse[8] = {2, 0, 4, 1, 3, 3, 0, 1};
static bool P_sparse;
static void cel_fwd(fdcase *c) { OK(sk_kern_softmax_ce_logits(SK_F64, 2, P_sh, c->in[0], CE_labels, c->out, CE_dlogits, E)); }
static void cel_bwd(fdcase *c) { OK(sk_kern_softmax_ce_logits_bwd(SK_F64, 2, P_sh, c->w, CE_dlogits, c->grad[0], E)); }
static void ce_fwd(fdcase *c) {
  if (P_sparse) OK(sk_kern_sparse_softmax_ce(SK_F64, 2, P_sh, c->in[0], SK_I32, CE_sparse, 16, c->out, E));
  else OK(sk_kern_softmax_ce(SK_F64, 2, P_sh, c->in[0], CE_labels, 16, c->out, E));
}
static void ce_bwd(fdcase *c) {
  if (P_sparse) OK(sk_kern_sparse_softmax_ce_bwd(SK_F64, 2, P_sh, c->in[0], SK_I32, CE_sparse, 16, c->w, c->grad[0], E));
  else OK(sk_kern_softmax_ce_bwd(SK_F64, 2, P_sh, c->in[0], CE_labels, 16, c->w, c->grad[0], E));
}
/* Soft labels: each row a distribution over the classes. */
static void soft_labels(double *lab, int64_t B, int64_t C) {
  fill(lab, B * C, 0.1, 1);
  for (int64_t b = 0; b < B; b++) {
    double s = 0;
    for (int64_t k = 0; k < C; k++) s += lab[b * C + k];
    for (int64_t k = 0; k < C; k++) lab[b * C + k] /= s;
  }
}
Test(kernels_grad, softmax_cross_entropy_all_forms) {
  P_sh[0] = 8, P_sh[1] = 5;
  soft_labels(CE_labels, 8, 5);
  int64_t nel[1] = {40};
  fdcase c = fd_new(1, nel, 8, -2, 2);
  c.fwd = cel_fwd, c.bwd = cel_bwd;
  fd_check(&c, "softmax_ce_logits");
  for (int s = 0; s < 2; s++) {
    P_sparse = s;
    fdcase f = fd_new(1, nel, 1, -2, 2);
    f.fwd = ce_fwd, f.bwd = ce_bwd;
    fd_check(&f, s ? "sparse_softmax_ce" : "softmax_ce");
  }
}

static void mae_fwd(fdcase *c) {
  OK(sk_kern_mae_loss(SK_F64, P_nd, P_sh, c->in[0], P_ndb, P_shb, c->in[1], 50, c->out, E));
}
static void mae_bwd(fdcase *c) {
  OK(sk_kern_mae_loss_bwd(SK_F64, P_nd, P_sh, c->in[0], P_ndb, P_shb, c->in[1], 50, c->w, c->grad[0], c->grad[1], E));
}
/* Labels of the prediction's shape, and labels broadcast: [3, 1] and [4] against [3, 4] (the
   label's gradient sums over the dims it broadcasts). */
Test(kernels_grad, mae_loss) {
  P_nd = 2, P_sh[0] = 3, P_sh[1] = 4;
  int nds[3] = {2, 2, 1};
  int64_t shapes[3][2] = {{3, 4}, {3, 1}, {4, 0}}, counts[3] = {12, 3, 4};
  for (int k = 0; k < 3; k++) {
    P_ndb = nds[k], P_shb[0] = shapes[k][0], P_shb[1] = shapes[k][1];
    int64_t nel[2] = {12, counts[k]};
    fdcase c = fd_new(2, nel, 1, -1, 1);
    c.fwd = mae_fwd, c.bwd = mae_bwd;
    fd_check(&c, "mae_loss");
  }
}

static void vloss_fwd(fdcase *c) { OK(sk_kern_virtual_loss(SK_F64, P_nd, P_sh, c->in[0], c->out, E)); }
static void vloss_bwd(fdcase *c) { OK(sk_kern_virtual_loss_bwd(SK_F64, P_nd, P_sh, c->w, c->grad[0], E)); }
Test(kernels_grad, virtual_loss) {
  P_nd = 3, P_sh[0] = 2, P_sh[1] = 3, P_sh[2] = 4;
  int64_t nel[1] = {24};
  fdcase c = fd_new(1, nel, 1, -1, 1);
  c.fwd = vloss_fwd, c.bwd = vloss_bwd;
  fd_check(&c, "virtual_loss");
}

static sk_redop P_red;
static int P_axes[2] = {0, 2};
static void red_fwd(fdcase *c) { OK(sk_kern_reduce(P_red, SK_F64, P_nd, P_sh, 2, P_axes, 0, c->in[0], c->out, E)); }
static void red_bwd(fdcase *c) {
  OK(sk_kern_reduce_bwd(P_red, SK_F64, P_nd, P_sh, 2, P_axes, 0, c->in[0], c->out, NULL, c->w, c->grad[0], E));
}
Test(kernels_grad, reduce_sum_mean_max) {
  P_nd = 3, P_sh[0] = 3, P_sh[1] = 2, P_sh[2] = 4;
  sk_redop ops[3] = {SK_SUM, SK_AVG, SK_MAX};
  for (int k = 0; k < 3; k++) {
    P_red = ops[k];
    int64_t nel[1] = {24};
    fdcase c = fd_new(1, nel, 2, -1, 1);
    c.fwd = red_fwd, c.bwd = red_bwd;
    fd_check(&c, sk_redop_name(ops[k]));
  }
}

static int P_perm[3] = {2, 0, 1};
static void tr_fwd(fdcase *c) { OK(sk_kern_transpose(SK_F64, P_nd, P_sh, P_perm, c->in[0], c->out, E)); }
static void tr_bwd(fdcase *c) { OK(sk_kern_transpose_bwd(SK_F64, P_nd, P_sh, P_perm, c->w, c->grad[0], E)); }
Test(kernels_grad, transpose) {
  P_nd = 3, P_sh[0] = 2, P_sh[1] = 3, P_sh[2] = 4;
  int64_t nel[1] = {24};
  fdcase c = fd_new(1, nel, 24, -1, 1);
  c.fwd = tr_fwd, c.bwd = tr_bwd;
  fd_check(&c, "transpose");
}

static int64_t G_idx[6] = {3, 0, 8, 4, 3, 2}; /* with offset 2 and 5 rows: 0 and 8 miss, 3 twice */
static void ga_fwd(fdcase *c) { OK(sk_kern_gather(SK_F64, 2, P_sh, c->in[0], SK_I64, 2, P_shb, G_idx, P_axis, 2, c->out, E)); }
static void ga_bwd(fdcase *c) {
  OK(sk_kern_gather_bwd(SK_F64, 2, P_sh, SK_I64, 2, P_shb, G_idx, P_axis, 2, c->w, c->grad[0], E));
}
Test(kernels_grad, gather_scatter_add) {
  P_shb[0] = 2, P_shb[1] = 3;
  for (P_axis = 0; P_axis < 2; P_axis++) {
    P_sh[0] = P_axis == 0 ? 5 : 3, P_sh[1] = P_axis == 0 ? 3 : 5;
    int64_t nel[1] = {15};
    fdcase c = fd_new(1, nel, 18, -1, 1);
    c.fwd = ga_fwd, c.bwd = ga_bwd;
    fd_check(&c, "gather");
  }
}

/* ---- hand-computed forwards --------------------------------------------------------------- */

Test(kernels_value, softmax_row) {
  double x[3] = {1, 2, 3}, y[3], want[3];
  double s = exp(1) + exp(2) + exp(3);
  for (int i = 0; i < 3; i++) want[i] = exp(i + 1) / s; /* 0.0900306, 0.2447285, 0.6652410 */
  int64_t sh[1] = {3};
  OK(sk_kern_softmax(SK_F64, 1, sh, -1, x, y, E));
  assert_close(y, want, 3, 1e-15, "softmax");
  cr_assert(fabs(y[2] - 0.66524096) < 1e-8);
  OK(sk_kern_log_softmax(SK_F64, 1, sh, 0, x, y, E));
  for (int i = 0; i < 3; i++) want[i] = log(want[i]);
  assert_close(y, want, 3, 1e-14, "log_softmax");
}

Test(kernels_value, layer_norm_rows) {
  /* MindSpore's example: [[1,2,3],[1,2,3]], gamma 1, beta 1 -> [-0.2247448, 1, 2.2247448],
     mean 2, variance 2/3 */
  double x[6] = {1, 2, 3, 1, 2, 3}, g[3] = {1, 1, 1}, b[3] = {1, 1, 1}, y[6], mean[2], var[2];
  int64_t sh[2] = {2, 3};
  OK(sk_kern_layer_norm(SK_F64, 2, sh, 1, SK_LAYER_NORM_EPSILON, x, g, b, y, mean, var, E));
  double r = 1 / sqrt(2.0 / 3 + 1e-7);
  double want[6] = {1 - r, 1, 1 + r, 1 - r, 1, 1 + r};
  assert_close(y, want, 6, 1e-14, "y");
  cr_assert(fabs(y[0] - -0.2247448) < 1e-6);
  cr_assert(mean[0] == 2 && mean[1] == 2 && fabs(var[0] - 2.0 / 3) < 1e-15);
}

Test(kernels_value, one_hot_class_offset) {
  int32_t idx[4] = {0, 3, 5, -1};
  int64_t sh[1] = {4};
  double out[8];
  /* depth 6, this device holds classes [2, 4): row of index 3 -> [0, 1]; 0, 5, -1 -> all off */
  OK(sk_kern_one_hot(SK_I32, 1, sh, idx, 6, 2, 2, -1, SK_F64, 1.0, -0.5, out, E));
  double want[8] = {-0.5, -0.5, -0.5, 1, -0.5, -0.5, -0.5, -0.5};
  assert_close(out, want, 8, 0, "one_hot axis -1");
  OK(sk_kern_one_hot(SK_I32, 1, sh, idx, 6, 2, 2, 0, SK_F64, 1.0, 0.0, out, E));
  double want0[8] = {0, 0, 0, 0, 0, 1, 0, 0}; /* [2 classes, 4 indices] */
  assert_close(out, want0, 8, 0, "one_hot axis 0");
}

Test(kernels_value, gather_row_offset) {
  /* rows [10, 13) of a [., 2] table live here as rows 0..2 */
  double t[6] = {1, 2, 3, 4, 5, 6}, out[8];
  int64_t ts[2] = {3, 2}, is[1] = {4}, idx[4] = {11, 9, 12, 10};
  OK(sk_kern_gather(SK_F64, 2, ts, t, SK_I64, 1, is, idx, 0, 10, out, E));
  double want[8] = {3, 4, 0, 0, 5, 6, 1, 2};
  assert_close(out, want, 8, 0, "gather");
}

Test(kernels_value, reduce_max_ties) {
  double x[6] = {1, 3, 3, 2, 0, 2}, y[2], dx[6], dy[2] = {1, 4}, cnt[2];
  int64_t sh[2] = {2, 3};
  int ax[1] = {1};
  OK(sk_kern_reduce(SK_MAX, SK_F64, 2, sh, 1, ax, 0, x, y, E));
  cr_assert(y[0] == 3 && y[1] == 2);
  OK(sk_kern_reduce_max_ties(SK_F64, 2, sh, 1, ax, x, y, cnt, E));
  cr_assert(cnt[0] == 2 && cnt[1] == 2);
  OK(sk_kern_reduce_bwd(SK_MAX, SK_F64, 2, sh, 1, ax, 0, x, y, NULL, dy, dx, E));
  double want[6] = {0, 0.5, 0.5, 2, 0, 2}; /* dy shared among the ties, as MindSpore's grad */
  assert_close(dx, want, 6, 1e-15, "reduce_max dx");
}

Test(kernels_value, gelu_is_the_tanh_form) {
  double x[3] = {1, 2, 3}, y[3];
  int64_t sh[1] = {3};
  OK(sk_kern_gelu(SK_F64, 1, sh, x, y, E));
  double want[3] = {0.841192, 1.9545976, 2.9963627}; /* MindSpore's documented GeLU outputs */
  assert_close(y, want, 3, 1e-6, "gelu");
}

Test(kernels_value, cast_round_trips) {
  double d[4] = {1.5, -2.25, 1e-3, 65504}, back[4];
  float f[4];
  uint16_t h[4];
  int64_t sh[1] = {4};
  OK(sk_kern_cast(SK_F64, 1, sh, d, SK_F32, f, E));
  OK(sk_kern_cast(SK_F32, 1, sh, f, SK_F64, back, E));
  assert_close(back, d, 4, 1e-7, "f64 -> f32 -> f64");
  OK(sk_kern_cast(SK_F64, 1, sh, d, SK_F16, h, E));
  cr_assert_eq(h[0], sk_f32_to_f16(1.5f));
  OK(sk_kern_cast(SK_F16, 1, sh, h, SK_F64, back, E));
  assert_close(back, d, 4, 1e-3, "f64 -> f16 -> f64");
  OK(sk_kern_cast(SK_F32, 1, sh, f, SK_BF16, h, E));
  OK(sk_kern_cast(SK_BF16, 1, sh, h, SK_F32, f, E));
  assert_close_f32(f, d, 4, 1e-2, "f32 -> bf16 -> f32");
}

Test(kernels_value, copy_is_reshape) {
  int32_t a[6] = {1, 2, 3, 4, 5, 6}, b[6];
  int64_t sh[2] = {2, 3};
  OK(sk_kern_copy(SK_I32, 2, sh, a, b, E));
  cr_assert(memcmp(a, b, sizeof a) == 0);
  OK(sk_kern_copy(SK_I32, 2, sh, a, a, E)); /* in place: nothing to do */
}

/* ---- f32 against f64 ----------------------------------------------------------------------- */

/* f32 computes with f32 accumulators: on O(1) data and sums of <= 64 terms the relative error
   stays ~64 * 6e-8 = 4e-6; 2e-5 leaves room for the exp / tanh / sqrt roundings. */
#define F32_TOL 2e-5

Test(kernels_f32, matmul_gelu_binary_softmax_layernorm_ce_reduce) {
  enum { N = 96 };
  double a[N], b[N], y[N], y2[N], m[8], v[8];
  float af[N], bf[N], yf[N], mf[8], vf[8];
  fill(a, N, -1, 1), fill(b, N, 0.5, 2);
  to_f32(a, af, N), to_f32(b, bf, N);
  int64_t s1[2] = {8, 12}, s2[2] = {12, 8}, s3[1] = {12};
  OK(sk_kern_matmul(NULL, SK_F64, false, false, 2, s1, a, 2, s2, b, y, E));
  OK(sk_kern_matmul(NULL, SK_F32, false, false, 2, s1, af, 2, s2, bf, yf, E));
  assert_close_f32(yf, y, 64, F32_TOL, "matmul");
  OK(sk_kern_gelu(SK_F64, 2, s1, a, y, E));
  OK(sk_kern_gelu(SK_F32, 2, s1, af, yf, E));
  assert_close_f32(yf, y, N, F32_TOL, "gelu");
  OK(sk_kern_binary(SK_BIN_DIV, SK_F64, 2, s1, a, 1, s3, b, y, E));
  OK(sk_kern_binary(SK_BIN_DIV, SK_F32, 2, s1, af, 1, s3, bf, yf, E));
  assert_close_f32(yf, y, N, F32_TOL, "div");
  OK(sk_kern_softmax(SK_F64, 2, s1, 1, a, y, E));
  OK(sk_kern_softmax(SK_F32, 2, s1, 1, af, yf, E));
  assert_close_f32(yf, y, N, F32_TOL, "softmax");
  OK(sk_kern_layer_norm(SK_F64, 2, s1, 1, 1e-5, a, NULL, NULL, y, m, v, E));
  OK(sk_kern_layer_norm(SK_F32, 2, s1, 1, 1e-5, af, NULL, NULL, yf, mf, vf, E));
  assert_close_f32(yf, y, N, 1e-4, "layer_norm"); /* divides by the row's std: a larger relative error */
  soft_labels(y2, 8, 12);
  float lf[N], lossf;
  to_f32(y2, lf, N);
  OK(sk_kern_softmax_ce(SK_F64, 2, s1, a, y2, 8, y, E));
  OK(sk_kern_softmax_ce(SK_F32, 2, s1, af, lf, 8, &lossf, E));
  assert_close_f32(&lossf, y, 1, F32_TOL, "softmax_ce");
  int ax[1] = {0};
  OK(sk_kern_reduce(SK_AVG, SK_F64, 2, s1, 1, ax, 0, a, y, E));
  OK(sk_kern_reduce(SK_AVG, SK_F32, 2, s1, 1, ax, 0, af, yf, E));
  assert_close_f32(yf, y, 12, F32_TOL, "reduce_mean");
}

Test(kernels_f32, backward_families) {
  enum { N = 60 };
  double x[N], dy[N], dx[N], w[25], dw[25], db[5], mean[12], var[12];
  float xf[N], dyf[N], dxf[N], wf[25], dwf[25], dbf[5], meanf[12], varf[12];
  fill(x, N, -1, 1), fill(dy, N, -1, 1), fill(w, 25, -1, 1);
  to_f32(x, xf, N), to_f32(dy, dyf, N), to_f32(w, wf, 25);
  int64_t sh[2] = {12, 5}, sw[2] = {5, 5};
  OK(sk_kern_dense_bwd(NULL, SK_F64, 2, sh, x, sw, w, dy, dx, dw, db, E));
  OK(sk_kern_dense_bwd(NULL, SK_F32, 2, sh, xf, sw, wf, dyf, dxf, dwf, dbf, E));
  assert_close_f32(dxf, dx, N, F32_TOL, "dense dx");
  assert_close_f32(dwf, dw, 25, F32_TOL, "dense dw");
  assert_close_f32(dbf, db, 5, F32_TOL, "dense dbias");
  OK(sk_kern_layer_norm(SK_F64, 2, sh, 1, 1e-5, x, NULL, NULL, dx, mean, var, E));
  OK(sk_kern_layer_norm(SK_F32, 2, sh, 1, 1e-5, xf, NULL, NULL, dxf, meanf, varf, E));
  OK(sk_kern_layer_norm_bwd(SK_F64, 2, sh, 1, 1e-5, x, dy, mean, var, NULL, dx, NULL, NULL, E));
  OK(sk_kern_layer_norm_bwd(SK_F32, 2, sh, 1, 1e-5, xf, dyf, meanf, varf, NULL, dxf, NULL, NULL, E));
  assert_close_f32(dxf, dx, N, 1e-3, "layer_norm dx"); /* rstd up to ~3: errors scale with it */
  OK(sk_kern_tanh_bwd(SK_F64, 2, sh, x, dy, dx, E));
  OK(sk_kern_tanh_bwd(SK_F32, 2, sh, xf, dyf, dxf, E));
  assert_close_f32(dxf, dx, N, F32_TOL, "tanh dx");
}

/* ---- sharding identities ------------------------------------------------------------------ */

/* Columns [c0, c0 + nc) of a row-major [rows, cols] matrix. */
static void cols_of(const double *src, int64_t rows, int64_t cols, int64_t c0, int64_t nc, double *dst) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < nc; c++) dst[r * nc + c] = src[r * cols + c0 + c];
}

Test(kernels_shard, reduce_over_a_split_axis) {
  /* x [4, 6] reduced over axis 1, which two devices split 3 + 3 */
  double x[24], full[4], part[2][4], xs[2][12];
  int64_t sh[2] = {4, 6}, ssh[2] = {4, 3};
  int ax[1] = {1};
  fill(x, 24, -1, 1);
  for (int d = 0; d < 2; d++) cols_of(x, 4, 6, 3 * d, 3, xs[d]);
  sk_redop ops[3] = {SK_SUM, SK_AVG, SK_MAX};
  for (int k = 0; k < 3; k++) {
    OK(sk_kern_reduce(ops[k], SK_F64, 2, sh, 1, ax, 0, x, full, E));
    for (int d = 0; d < 2; d++) OK(sk_kern_reduce(ops[k], SK_F64, 2, ssh, 1, ax, 6, xs[d], part[d], E));
    double comb[4]; /* AllReduce: sum for sum and mean (global divisor 6), max for max */
    for (int j = 0; j < 4; j++) comb[j] = ops[k] == SK_MAX ? fmax(part[0][j], part[1][j]) : part[0][j] + part[1][j];
    assert_close(comb, full, 4, 1e-15, sk_redop_name(ops[k]));
  }
}

Test(kernels_shard, reduce_max_backward_with_global_max_and_ties) {
  /* ties across the two shards: row 0's max 5 sits once on each device */
  double x[12] = {5, 1, 2, 0, 5, 3, -1, 4, 2, 1, 0, 3}, y[2], dx[12], dy[2] = {1, 2};
  int64_t sh[2] = {2, 6}, ssh[2] = {2, 3};
  int ax[1] = {1};
  OK(sk_kern_reduce(SK_MAX, SK_F64, 2, sh, 1, ax, 0, x, y, E));
  OK(sk_kern_reduce_bwd(SK_MAX, SK_F64, 2, sh, 1, ax, 0, x, y, NULL, dy, dx, E));
  double xs[2][6], ys[2][2], cnt[2][2], dxs[2][6], want[2][6];
  for (int d = 0; d < 2; d++) cols_of(x, 2, 6, 3 * d, 3, xs[d]), cols_of(dx, 2, 6, 3 * d, 3, want[d]);
  for (int d = 0; d < 2; d++) OK(sk_kern_reduce(SK_MAX, SK_F64, 2, ssh, 1, ax, 0, xs[d], ys[d], E));
  double gmax[2] = {fmax(ys[0][0], ys[1][0]), fmax(ys[0][1], ys[1][1])}; /* AllReduce(max) */
  for (int d = 0; d < 2; d++) OK(sk_kern_reduce_max_ties(SK_F64, 2, ssh, 1, ax, xs[d], gmax, cnt[d], E));
  double gcnt[2] = {cnt[0][0] + cnt[1][0], cnt[0][1] + cnt[1][1]}; /* AllReduce(sum) */
  cr_assert(gcnt[0] == 2 && gcnt[1] == 1);
  for (int d = 0; d < 2; d++) {
    OK(sk_kern_reduce_bwd(SK_MAX, SK_F64, 2, ssh, 1, ax, 0, xs[d], gmax, gcnt, dy, dxs[d], E));
    assert_close(dxs[d], want[d], 6, 1e-15, "sharded reduce_max dx");
  }
}

Test(kernels_shard, fused_cross_entropy_over_batch_shards) {
  double logits[40], labels[40], full, part[2], dfull[40], dpart[40];
  int64_t sl[8] = {1, 4, 0, 2, 3, 3, 4, 0};
  int64_t sh[2] = {8, 5}, ssh[2] = {4, 5};
  fill(logits, 40, -2, 2);
  soft_labels(labels, 8, 5);
  for (int sparse = 0; sparse < 2; sparse++) {
    if (sparse) {
      OK(sk_kern_sparse_softmax_ce(SK_F64, 2, sh, logits, SK_I64, sl, 8, &full, E));
      OK(sk_kern_sparse_softmax_ce_bwd(SK_F64, 2, sh, logits, SK_I64, sl, 8, NULL, dfull, E));
    } else {
      OK(sk_kern_softmax_ce(SK_F64, 2, sh, logits, labels, 8, &full, E));
      OK(sk_kern_softmax_ce_bwd(SK_F64, 2, sh, logits, labels, 8, NULL, dfull, E));
    }
    for (int d = 0; d < 2; d++) { /* device d holds rows [4d, 4d + 4) */
      if (sparse) {
        OK(sk_kern_sparse_softmax_ce(SK_F64, 2, ssh, logits + 20 * d, SK_I64, sl + 4 * d, 8, &part[d], E));
        OK(sk_kern_sparse_softmax_ce_bwd(SK_F64, 2, ssh, logits + 20 * d, SK_I64, sl + 4 * d, 8, NULL, dpart + 20 * d, E));
      } else {
        OK(sk_kern_softmax_ce(SK_F64, 2, ssh, logits + 20 * d, labels + 20 * d, 8, &part[d], E));
        OK(sk_kern_softmax_ce_bwd(SK_F64, 2, ssh, logits + 20 * d, labels + 20 * d, 8, NULL, dpart + 20 * d, E));
      }
    }
    double sum = part[0] + part[1]; /* AllReduce(sum) over the batch axis */
    assert_close(&sum, &full, 1, 1e-14, "loss");
    assert_close(dpart, dfull, 40, 1e-15, "dlogits");
  }
}

Test(kernels_shard, mae_with_global_count) {
  double p[12], l[12], full, part[3];
  int64_t sh[1] = {12}, ssh[1] = {4};
  fill(p, 12, -1, 1), fill(l, 12, -1, 1);
  OK(sk_kern_mae_loss(SK_F64, 1, sh, p, 1, sh, l, 12, &full, E));
  for (int d = 0; d < 3; d++) OK(sk_kern_mae_loss(SK_F64, 1, ssh, p + 4 * d, 1, ssh, l + 4 * d, 12, &part[d], E));
  double sum = part[0] + part[1] + part[2];
  assert_close(&sum, &full, 1, 1e-15, "mae");
}

Test(kernels_shard, gather_over_row_shards) {
  double t[24], full[30], part[30], acc[30] = {0}, dout[30], dfull[24], dpart[24];
  int32_t idx[10] = {7, 0, 3, 4, 4, 1, 6, 2, 5, 7};
  int64_t ts[2] = {8, 3}, sts[2] = {2, 3}, is[2] = {2, 5};
  fill(t, 24, -1, 1), fill(dout, 30, -1, 1);
  OK(sk_kern_gather(SK_F64, 2, ts, t, SK_I32, 2, is, idx, 0, 0, full, E));
  OK(sk_kern_gather_bwd(SK_F64, 2, ts, SK_I32, 2, is, idx, 0, 0, dout, dfull, E));
  for (int d = 0; d < 4; d++) { /* device d holds rows [2d, 2d + 2) */
    OK(sk_kern_gather(SK_F64, 2, sts, t + 6 * d, SK_I32, 2, is, idx, 0, 2 * d, part, E));
    for (int i = 0; i < 30; i++) acc[i] += part[i]; /* AllReduce(sum) */
    OK(sk_kern_gather_bwd(SK_F64, 2, sts, SK_I32, 2, is, idx, 0, 2 * d, dout, dpart + 6 * d, E));
  }
  assert_close(acc, full, 30, 0, "gather");
  assert_close(dpart, dfull, 24, 1e-15, "gather dtable");
}

Test(kernels_shard, one_hot_over_class_shards) {
  int64_t idx[5] = {0, 5, 2, 3, 9}, sh[1] = {5};
  double full[30], part[10], cat[30];
  OK(sk_kern_one_hot(SK_I64, 1, sh, idx, 6, 0, 6, -1, SK_F64, 1, 0, full, E));
  for (int d = 0; d < 3; d++) { /* device d holds classes [2d, 2d + 2): concatenated along the last axis */
    OK(sk_kern_one_hot(SK_I64, 1, sh, idx, 6, 2 * d, 2, -1, SK_F64, 1, 0, part, E));
    for (int r = 0; r < 5; r++)
      for (int c = 0; c < 2; c++) cat[r * 6 + 2 * d + c] = part[r * 2 + c];
  }
  assert_close(cat, full, 30, 0, "one_hot");
}

Test(kernels_shard, dropout_masks_of_slices) {
  int64_t gs[2] = {4, 6};
  uint8_t full[24], part[6];
  OK(sk_kern_dropout_mask(42, 0.6, 2, gs, NULL, full, E));
  int kept = 0;
  for (int i = 0; i < 24; i++) kept += full[i];
  cr_assert(kept > 4 && kept < 22, "a plausible draw: %d of 24 kept", kept);
  for (int r0 = 0; r0 < 4; r0 += 2)
    for (int c0 = 0; c0 < 6; c0 += 3) {
      sk_slice s;
      memset(&s, 0, sizeof s);
      s.ndims = 2, s.start[0] = r0, s.stop[0] = r0 + 2, s.start[1] = c0, s.stop[1] = c0 + 3;
      OK(sk_kern_dropout_mask(42, 0.6, 2, gs, &s, part, E));
      for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) cr_assert_eq(part[r * 3 + c], full[(r0 + r) * 6 + c0 + c]);
    }
  uint8_t other[24];
  OK(sk_kern_dropout_mask(43, 0.6, 2, gs, NULL, other, E));
  cr_assert(memcmp(full, other, 24) != 0, "another seed draws another mask");
}

Test(kernels_shard, matmul_split_contraction_sums) {
  /* x [3, 8] . w [8, 4] with k split over 2 devices: the partial products add up */
  double x[24], w[32], full[12], part[2][12], xs[2][12];
  int64_t sx[2] = {3, 8}, sw[2] = {8, 4}, ssx[2] = {3, 4}, ssw[2] = {4, 4};
  fill(x, 24, -1, 1), fill(w, 32, -1, 1);
  OK(sk_kern_matmul(NULL, SK_F64, false, false, 2, sx, x, 2, sw, w, full, E));
  for (int d = 0; d < 2; d++) {
    cols_of(x, 3, 8, 4 * d, 4, xs[d]);
    OK(sk_kern_matmul(NULL, SK_F64, false, false, 2, ssx, xs[d], 2, ssw, w + 16 * d, part[d], E));
  }
  for (int i = 0; i < 12; i++) part[0][i] += part[1][i];
  assert_close(part[0], full, 12, 1e-14, "matmul");
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

static void naive_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *a, const double *b, double *c) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
}

Test(kernels_gemm, blocked_matches_naive_across_block_edges) {
  enum { M = 70, N = 131, K = 65 };
  static double a[M * K], b[K * N], c[M * N], want[M * N];
  static float af[M * K], bf[K * N], cf[M * N];
  fill(a, M * K, -1, 1), fill(b, K * N, -1, 1);
  to_f32(a, af, M * K), to_f32(b, bf, K * N);
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t >> 1;
    naive_gemm(ta, tb, M, N, K, a, b, want);
    cr_assert_eq(sk_gemm_builtin(NULL, SK_F64, ta, tb, M, N, K, 1.0, a, ta ? M : K, b, tb ? K : N, 0.0, c, N), SK_OK);
    assert_close(c, want, M * N, 1e-13, "dgemm");
    cr_assert_eq(sk_gemm_builtin(NULL, SK_F32, ta, tb, M, N, K, 1.0, af, ta ? M : K, bf, tb ? K : N, 0.0, cf, N), SK_OK);
    assert_close_f32(cf, want, M * N, 1e-5, "sgemm");
  }
  /* alpha and beta */
  for (int i = 0; i < M * N; i++) c[i] = 1;
  cr_assert_eq(sk_gemm_builtin(NULL, SK_F64, false, false, M, N, K, 2.0, a, K, b, N, 0.5, c, N), SK_OK);
  naive_gemm(false, false, M, N, K, a, b, want);
  for (int i = 0; i < M * N; i++) want[i] = 2 * want[i] + 0.5;
  assert_close(c, want, M * N, 1e-13, "alpha beta");
}

static int hook_calls;
static sk_result counting_gemm(void *user, sk_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                               const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
  (*(int *)user)++;
  return sk_gemm_builtin(NULL, dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static sk_result failing_gemm(void *user, sk_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
  (void)user, (void)dt, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
  (void)ldb, (void)beta, (void)c, (void)ldc;
  return SK_ERR_BACKEND;
}

Test(kernels_gemm, hook_is_used_and_its_failure_returned) {
  double x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, 0, 1, 1, 1}, y[4], dx[6], dw[6], db[2];
  int64_t sx[2] = {2, 3}, sw[2] = {2, 3};
  sk_kernel_ctx ctx = {counting_gemm, &hook_calls};
  OK(sk_kern_dense(&ctx, SK_F64, 2, sx, x, sw, w, NULL, y, E));
  cr_assert_eq(hook_calls, 1);
  double want[4] = {1, 6, 4, 15}; /* x w^T */
  assert_close(y, want, 4, 0, "dense through the hook");
  OK(sk_kern_dense_bwd(&ctx, SK_F64, 2, sx, x, sw, w, y, dx, dw, db, E));
  cr_assert_eq(hook_calls, 3, "dx and dw: one product each");
  sk_kernel_ctx bad = {failing_gemm, NULL};
  sk_error e;
  cr_assert_eq(sk_kern_matmul(&bad, SK_F64, false, true, 2, sx, x, 2, sw, w, y, &e), SK_ERR_BACKEND);
  cr_assert(strstr(e.msg, "sk_kern_batch_matmul") && strstr(e.msg, "GEMM"), "%s", e.msg);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static double Z[64];
static float Zf[64];
static int64_t S23[2] = {2, 3}, S32[2] = {3, 2}, S3[1] = {3};

Test(kernels_errors, null_buffers) {
  BAD("x is NULL", sk_kern_relu(SK_F64, 2, S23, NULL, Z, E));
  BAD("dy is NULL", sk_kern_gelu_bwd(SK_F64, 2, S23, Z, NULL, Z, E));
  BAD("c is NULL", sk_kern_matmul(NULL, SK_F64, false, false, 2, S23, Z, 2, S32, Z, NULL, E));
  BAD("b is NULL", sk_kern_binary(SK_BIN_MUL, SK_F64, 2, S23, Z, 2, S23, NULL, Z, E));
  BAD("labels is NULL", sk_kern_softmax_ce(SK_F64, 2, S23, Z, NULL, 2, Z, E));
  BAD("loss is NULL", sk_kern_mae_loss(SK_F64, 2, S23, Z, 2, S23, Z, 6, NULL, E));
  BAD("label dim 0 (3) does not broadcast to prediction dim 1 (2)", sk_kern_mae_loss(SK_F64, 2, S32, Z, 1, S3, Z, 6, Z, E));
  BAD("label dim 0 (3) does not broadcast to prediction dim 0 (2)", sk_kern_mae_loss(SK_F64, 2, S23, Z, 2, S32, Z, 6, Z, E));
  BAD("gamma is NULL", sk_kern_rms_norm(SK_F64, 2, S23, 1, 1e-6, Z, NULL, Z, Z, E));
  BAD("epsilon 0 is not in (0, 1]", sk_kern_rms_norm(SK_F64, 2, S23, 1, 0, Z, Z, Z, Z, E));
  BAD("rstd is NULL", sk_kern_rms_norm_bwd(SK_F64, 2, S23, 1, Z, Z, NULL, Z, Z, NULL, E));
  BAD("dx is NULL", sk_kern_virtual_loss_bwd(SK_F64, 2, S23, NULL, NULL, E));
  BAD("mask is NULL", sk_kern_dropout(SK_F64, 2, S23, 0.5, Z, NULL, Z, E));
  BAD("indices is NULL", sk_kern_gather(SK_F64, 2, S23, Z, SK_I32, 1, S3, NULL, 0, 0, Z, E));
  BAD("mean is NULL", sk_kern_layer_norm_bwd(SK_F64, 2, S23, 1, 1e-7, Z, Z, NULL, Z, NULL, Z, NULL, NULL, E));
  BAD("shape is NULL", sk_kern_tanh(SK_F64, 2, NULL, Z, Z, E));
  BAD("perm is NULL", sk_kern_transpose(SK_F64, 2, S23, NULL, Z, Z + 8, E));
}

Test(kernels_errors, bad_ndims_and_dims) {
  int64_t neg[2] = {2, -1};
  BAD("dims", sk_kern_relu(SK_F64, -1, S23, Z, Z, E));
  BAD("dims", sk_kern_softmax(SK_F64, SK_MAX_DIMS + 1, S23, 0, Z, Z, E));
  BAD("negative", sk_kern_copy(SK_F64, 2, neg, Z, Z, E));
  BAD("needs >= 2", sk_kern_batch_matmul(NULL, SK_F64, false, false, 1, S3, Z, 2, S32, Z, Z, E));
  BAD("MatMul takes 2", sk_kern_matmul(NULL, SK_F64, false, false, 3, S23, Z, 2, S32, Z, Z, E));
  BAD("[B, C]", sk_kern_softmax_ce_logits(SK_F64, 1, S3, Z, Z, Z, Z, E));
  BAD("needs >= 2", sk_kern_bias_add(SK_F64, SK_NCHW, 1, S3, Z, Z, Z, E));
}

Test(kernels_errors, mismatched_shapes) {
  int64_t s24[2] = {2, 4}, s4[1] = {4};
  BAD("contraction", sk_kern_matmul(NULL, SK_F64, false, false, 2, S23, Z, 2, S23, Z, Z, E));
  BAD("contraction", sk_kern_batch_matmul_bwd(NULL, SK_F64, true, false, 2, S23, Z, 2, S32, Z, Z, Z, Z, E));
  BAD("broadcast", sk_kern_binary(SK_BIN_ADD, SK_F64, 2, S23, Z, 2, s24, Z, Z, E));
  int bnd;
  int64_t bsh[SK_MAX_DIMS];
  BAD("broadcast", sk_kern_broadcast_shape(1, S3, 1, s4, &bnd, bsh, E));
  BAD("does not match", sk_kern_dense(NULL, SK_F64, 2, S23, Z, s24, Z, NULL, Z, E));
  BAD("w has 2 values", sk_kern_prelu(SK_F64, 2, S23, Z, 2, Z, Z, E));
  BAD("slice has 1 dims", sk_kern_dropout_mask(1, 0.5, 2, S23, &(sk_slice){1, {0}, {1}}, (uint8_t *)Zf, E));
  sk_slice s = {2, {0, 2}, {2, 4}};
  BAD("outside", sk_kern_dropout_mask(1, 0.5, 2, S23, &s, (uint8_t *)Zf, E));
  BAD("below the local batch", sk_kern_softmax_ce(SK_F64, 2, S23, Z, Z, 1, Z, E));
  BAD("below the local count", sk_kern_mae_loss_bwd(SK_F64, 2, S23, Z, 2, S23, Z, 5, NULL, Z, NULL, E));
}

Test(kernels_errors, bad_axes_and_attributes) {
  int dup[2] = {1, -1}, far[1] = {2}, perm[2] = {0, 0};
  BAD("axis 2 is out of range", sk_kern_softmax(SK_F64, 2, S23, 2, Z, Z, E));
  BAD("axis -3", sk_kern_l2_normalize(SK_F64, 2, S23, -3, 1e-4, Z, Z, E));
  BAD("begin_norm_axis", sk_kern_layer_norm(SK_F64, 2, S23, 5, 1e-7, Z, NULL, NULL, Z, Z, Z, E));
  BAD("given twice", sk_kern_reduce(SK_SUM, SK_F64, 2, S23, 2, dup, 0, Z, Z, E));
  BAD("out of range", sk_kern_reduce_bwd(SK_AVG, SK_F64, 2, S23, 1, far, 0, NULL, NULL, NULL, Z, Z, E));
  BAD("naxes", sk_kern_reduce_shape(2, S23, 3, dup, true, &(int){0}, (int64_t[8]){0}, E));
  BAD("not supported (sum, avg, max)", sk_kern_reduce(SK_PROD, SK_F64, 2, S23, 0, NULL, 0, Z, Z, E));
  BAD("divisor", sk_kern_reduce(SK_AVG, SK_F64, 2, S23, 0, NULL, -2, Z, Z, E));
  BAD("not a permutation", sk_kern_transpose(SK_F64, 2, S23, perm, Z, Z + 8, E));
  BAD("overlap", sk_kern_transpose(SK_F64, 2, S23, (int[2]){1, 0}, Z, Z, E));
  BAD("axis 2", sk_kern_gather(SK_F64, 2, S23, Z, SK_I64, 1, S3, Z, 2, 0, Z, E));
  BAD("offset -1", sk_kern_gather_bwd(SK_F64, 2, S23, SK_I64, 1, S3, Z, 0, -1, Z, Z, E));
  BAD("axis 3 is not in -1..1", sk_kern_one_hot(SK_I32, 1, S3, Z, 4, 0, 4, 3, SK_F64, 1, 0, Z, E));
  BAD("within depth", sk_kern_one_hot(SK_I32, 1, S3, Z, 4, 3, 2, -1, SK_F64, 1, 0, Z, E));
  BAD("keep_prob", sk_kern_dropout_mask(1, 0.0, 2, S23, NULL, (uint8_t *)Zf, E));
  BAD("keep_prob 1.5", sk_kern_dropout_bwd(SK_F64, 2, S23, 1.5, Z, (uint8_t *)Zf, Z, E));
  BAD("data_format", sk_kern_bias_add_bwd(SK_F64, (sk_data_format)7, 2, S23, Z, Z, Z, E));
  BAD("binary op 9", sk_kern_binary((sk_binop)9, SK_F64, 2, S23, Z, 2, S23, Z, Z, E));
  BAD("epsilon", sk_kern_l2_normalize(SK_F64, 2, S23, 0, -1, Z, Z, E));
  int32_t lab[2] = {0, 3};
  BAD("label 3 of row 1", sk_kern_sparse_softmax_ce(SK_F64, 2, S23, Z, SK_I32, lab, 2, Z, E));
}

Test(kernels_errors, unknown_dtypes) {
  BAD("dtype i32 is not supported", sk_kern_relu(SK_I32, 2, S23, Z, Z, E));
  BAD("dtype f16 is not supported", sk_kern_matmul(NULL, SK_F16, false, false, 2, S23, Z, 2, S32, Z, Z, E));
  BAD("dtype bf16", sk_kern_softmax_ce(SK_BF16, 2, S23, Z, Z, 2, Z, E));
  BAD("cannot cast i8 to f32", sk_kern_cast(SK_I8, 2, S23, Z, SK_F32, Z, E));
  BAD("index dtype f32", sk_kern_gather(SK_F64, 2, S23, Z, SK_F32, 1, S3, Z, 0, 0, Z, E));
  BAD("index dtype f64", sk_kern_sparse_softmax_ce(SK_F64, 2, S23, Z, SK_F64, Z, 2, Z, E));
  BAD("is not a dtype", sk_kern_copy((sk_dtype)99, 2, S23, Z, Z, E));
  BAD("dtype u8", sk_kern_gather_bwd(SK_U8, 2, S23, SK_I32, 1, S3, Z, 0, 0, Z, Z, E));
  BAD("dtype i64", sk_kern_one_hot(SK_I32, 1, S3, Z, 4, 0, 4, -1, SK_I64, 1, 0, Z, E));
  cr_assert_eq(sk_gemm_builtin(NULL, SK_I32, false, false, 1, 1, 1, 1, Z, 1, Z, 1, 0, Z, 1), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_gemm_builtin(NULL, SK_F64, false, false, 2, 2, 2, 1, Z, 1, Z, 2, 0, Z, 2), SK_ERR_INVALID_ARGUMENT,
               "lda 1 < k 2");
}

Test(kernels_errors, nothing_written_on_failure_and_err_may_be_null) {
  double y[6] = {7, 7, 7, 7, 7, 7};
  int32_t lab[2] = {0, 9};
  cr_assert_eq(sk_kern_sparse_softmax_ce_bwd(SK_F64, 2, S23, Z, SK_I32, lab, 2, NULL, y, NULL), SK_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < 6; i++) cr_assert_eq(y[i], 7, "the labels are checked before anything is written");
  cr_assert_eq(sk_kern_relu(SK_F64, 2, S23, NULL, y, NULL), SK_ERR_INVALID_ARGUMENT);
}
