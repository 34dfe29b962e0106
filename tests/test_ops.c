/* sk_ops.h: operator sharding rules against docs/semantics.md section 8, and a sharded MatMul's
   forward and backward on 8 device threads against the unsharded product. */
#include <criterion/criterion.h>
#include <string.h>

#include "shardkit.h"
#include "sk_ops.h"

static sk_op_desc matmul_desc(int64_t m, int64_t k, int64_t n) {
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = SK_OP_MATMUL;
  d.ninputs = 2;
  d.ndims[0] = d.ndims[1] = 2;
  d.shape[0][0] = m, d.shape[0][1] = k;
  d.shape[1][0] = k, d.shape[1][1] = n;
  d.params = 2; /* w */
  return d;
}

static void group_of(const sk_mesh *mesh, int rank, uint32_t axes, int *out, int *n) {
  sk_error e;
  cr_assert_eq(sk_mesh_group(mesh, rank, axes, out, SK_MAX_DEVICES, n, &e), SK_OK, "%s", e.msg);
}

/* docs/semantics.md 8.1: MatMul().shard(((2,4),(4,1))) on 8 devices. */
Test(ops, matmul_strategy_table) {
  sk_op_desc d = matmul_desc(16, 784, 512);
  d.has_strategy = true;
  d.strategy[0][0] = 2, d.strategy[0][1] = 4, d.strategy[1][0] = 4, d.strategy[1][1] = 1;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.mesh.naxes, 3, "device matrix [2,4,1], no repeat axis");
  cr_assert_eq(p.mesh.dims[0], 2);
  cr_assert_eq(p.mesh.dims[1], 4);
  cr_assert_eq(p.mesh.dims[2], 1);
  for (int r = 0; r < 8; r++) {
    sk_slice xs, ws, os;
    cr_assert_eq(sk_layout_slice(&p.in[0], r, &xs, &e), SK_OK);
    cr_assert_eq(sk_layout_slice(&p.in[1], r, &ws, &e), SK_OK);
    cr_assert_eq(sk_layout_slice(&p.out[0], r, &os, &e), SK_OK);
    cr_assert_eq(xs.start[0], (r / 4) * 8, "rank %d x rows", r);
    cr_assert_eq(xs.start[1], (r % 4) * 196, "rank %d x cols", r);
    cr_assert_eq(ws.start[0], (r % 4) * 196, "rank %d w rows", r);
    cr_assert_eq(ws.stop[1] - ws.start[1], 512, "rank %d w cols whole", r);
    cr_assert_eq(os.start[0], (r / 4) * 8, "rank %d out rows", r);
    cr_assert_eq(os.stop[1] - os.start[1], 512, "rank %d out cols whole", r);
    int g[8], n;
    cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE);
    group_of(&p.mesh, r, p.fwd.axes, g, &n);
    cr_assert_eq(n, 4, "forward AllReduce group of 4");
    for (int i = 0; i < 4; i++) cr_assert_eq(g[i], (r / 4) * 4 + i, "rank %d forward group", r);
    cr_assert_eq(p.grad[1].kind, SK_COLL_ALLREDUCE, "w's gradient Mirror");
    group_of(&p.mesh, r, p.grad[1].axes, g, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(g[0], r % 4, "rank %d Mirror group {%d,%d}", r, r % 4, r % 4 + 4);
    cr_assert_eq(g[1], r % 4 + 4);
  }
  cr_assert_eq(p.grad[0].kind, SK_COLL_NONE, "x is not a parameter");
  cr_assert_eq(p.bwd_in[0].kind, SK_COLL_NONE, "w's columns are whole: dx needs no sum");
  char text[1024];
  sk_op_plan_format(&p, text, sizeof text);
  cr_assert(strstr(text, "forward: allreduce along (d1), groups of 4") != NULL, "%s", text);
}

/* ReLU().shard(((4,1),)) on 8: repeat axis on the right, replicas {0,1},{2,3},... */
Test(ops, relu_repeat_right) {
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = SK_OP_RELU, d.ninputs = 1, d.ndims[0] = 2, d.shape[0][0] = 16, d.shape[0][1] = 512;
  d.has_strategy = true, d.strategy[0][0] = 4, d.strategy[0][1] = 1;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.mesh.naxes, 3);
  cr_assert_str_eq(p.mesh.names[2], "rep");
  for (int r = 0; r < 8; r++) {
    sk_slice s;
    cr_assert_eq(sk_layout_slice(&p.out[0], r, &s, &e), SK_OK);
    cr_assert_eq(s.start[0], 4 * (r / 2), "rank %d rows", r);
    int g[8], n;
    cr_assert_eq(sk_layout_replica_group(&p.out[0], r, g, 8, &n, &e), SK_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(g[0], r / 2 * 2);
  }
  cr_assert_eq(p.fwd.kind, SK_COLL_NONE);
}

/* docs/semantics.md 8.2: the layout-configured MatMul of the operator-parallel tutorial. */
Test(ops, matmul_layouts_tutorial) {
  sk_mesh mesh;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&mesh, "dp=2,sp=2,mp=2", &e), SK_OK);
  sk_op_desc d = matmul_desc(16, 784, 512);
  d.has_layouts = true;
  int64_t xs[2] = {16, 784}, ws[2] = {784, 512};
  cr_assert_eq(sk_layout_parse(&d.layouts[0], &mesh, "mp,(sp,dp)", 2, xs, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_parse(&d.layouts[1], &mesh, "(sp,dp),None", 2, ws, &e), SK_OK, "%s", e.msg);
  sk_op_plan p;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  for (int r = 0; r < 8; r++) {
    int g[8], n;
    group_of(&p.mesh, r, p.fwd.axes, g, &n);
    cr_assert_eq(n, 4);
    for (int i = 0; i < 4; i++) cr_assert_eq(g[i], (r % 2) + 2 * i, "rank %d forward group {%d,...}", r, r % 2);
    sk_slice s;
    cr_assert_eq(sk_layout_slice(&p.out[0], r, &s, &e), SK_OK);
    cr_assert_eq(s.start[0], (r % 2) * 8, "rank %d output rows by mp", r);
  }
  /* the weight is cut by (sp,dp) and replicated along mp: Mirror over mp */
  int g[8], n;
  group_of(&p.mesh, 0, p.grad[1].axes, g, &n);
  cr_assert_eq(n, 2);
  cr_assert_eq(g[1], 1);
}

/* out_strategy ((8,1),) turns the forward AllReduce into a ReduceScatter. */
Test(ops, matmul_reduce_scatter_output) {
  sk_op_desc d = matmul_desc(16, 784, 512);
  d.has_strategy = true;
  d.strategy[0][0] = 2, d.strategy[0][1] = 4, d.strategy[1][0] = 4, d.strategy[1][1] = 1;
  d.has_out_strategy = true, d.out_strategy[0] = 8, d.out_strategy[1] = 1;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.fwd.kind, SK_COLL_REDUCE_SCATTER);
  for (int r = 0; r < 8; r++) {
    sk_slice s;
    cr_assert_eq(sk_layout_slice(&p.out[0], r, &s, &e), SK_OK);
    cr_assert_eq(s.start[0], 2 * r, "rank %d holds rows [%d,%d)", r, 2 * r, 2 * r + 2);
  }
  cr_assert_eq(p.redistributed, 0u, "the ReduceScatter gives the asked output: no redistribution");
  /* neither (a, c) nor (a*b, c): the AllReduce's output, redistributed to rows cut 4 ways (a
     Cell's shard(out_strategy=...); a primitive's shard in MindSpore refuses it) */
  d.out_strategy[0] = 4;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE);
  cr_assert_eq(p.redistributed, 1u);
  for (int r = 0; r < 8; r++) {
    sk_slice s;
    cr_assert_eq(sk_layout_slice(&p.wanted[0], r, &s, &e), SK_OK);
    cr_assert_eq(s.start[0], 4 * (r / 2), "rank %d wants rows [%d,%d)", r, 4 * (r / 2), 4 * (r / 2) + 4);
  }
  d.out_strategy[2] = 2; /* three entries for the rank-2 output */
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "out_strategy") != NULL, "%s", e.msg);
}

Test(ops, data_parallel_default_and_mean) {
  sk_op_desc d = matmul_desc(32, 512, 10);
  d.gradients_mean = true;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  sk_slice s;
  cr_assert_eq(sk_layout_slice(&p.in[0], 5, &s, &e), SK_OK);
  cr_assert_eq(s.start[0], 20, "rank 5 of 8 holds rows [20,24)");
  cr_assert_eq(p.grad[1].kind, SK_COLL_ALLREDUCE);
  int g[8], n;
  group_of(&p.mesh, 3, p.grad[1].axes, g, &n);
  cr_assert_eq(n, 8, "a replicated weight's gradient is summed over all devices");
  cr_assert(p.grad[1].scale > 0.1249 && p.grad[1].scale < 0.1251, "mean: scale 1/8, got %g", p.grad[1].scale);
  cr_assert_eq(p.fwd.kind, SK_COLL_NONE);
}

Test(ops, softmax_ce_and_flatten) {
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = SK_OP_SOFTMAX_CE, d.ninputs = 2;
  d.ndims[0] = 2, d.shape[0][0] = 32, d.shape[0][1] = 10;
  d.ndims[1] = 1, d.shape[1][0] = 32;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE, "the loss sums the batch pieces");
  int g[8], n;
  group_of(&p.mesh, 0, p.fwd.axes, g, &n);
  cr_assert_eq(n, 8);
  sk_slice ls;
  cr_assert_eq(sk_layout_slice(&p.in[1], 3, &ls, &e), SK_OK);
  cr_assert_eq(ls.start[0], 12, "sparse labels [32] go with the batch dim: rank 3 holds [12,16)");
  d.ndims[1] = 2, d.shape[1][0] = 32, d.shape[1][1] = 10; /* one-hot labels */
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  d.has_strategy = true, d.strategy[0][0] = 4, d.strategy[0][1] = 2, d.strategy[1][0] = 4, d.strategy[1][1] = 2;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT, "the class dim cannot be cut");
  cr_assert(strstr(e.msg, "dim 1") != NULL, "%s", e.msg);

  sk_op_desc f;
  memset(&f, 0, sizeof f);
  f.kind = SK_OP_FLATTEN, f.ninputs = 1, f.ndims[0] = 4;
  f.shape[0][0] = 32, f.shape[0][1] = 1, f.shape[0][2] = 28, f.shape[0][3] = 28;
  cr_assert_eq(sk_op_plan_make(&f, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.out[0].ndims, 2);
  cr_assert_eq(p.out[0].shape[1], 784);
  sk_slice s;
  cr_assert_eq(sk_layout_slice(&p.out[0], 7, &s, &e), SK_OK);
  cr_assert_eq(s.start[0], 28);
}

Test(ops, bias_add_and_broadcast) {
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = SK_OP_BIAS_ADD, d.ninputs = 2;
  d.ndims[0] = 2, d.shape[0][0] = 16, d.shape[0][1] = 512;
  d.ndims[1] = 1, d.shape[1][0] = 512;
  d.has_strategy = true, d.strategy[0][0] = 2, d.strategy[0][1] = 4, d.strategy[1][0] = 4;
  d.params = 2;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  sk_slice s;
  cr_assert_eq(sk_layout_slice(&p.in[1], 5, &s, &e), SK_OK);
  cr_assert_eq(s.start[0], 128, "rank 5 = (1,1): bias cols [128,256)");
  int g[8], n;
  group_of(&p.mesh, 5, p.grad[1].axes, g, &n);
  cr_assert_eq(n, 2, "the bias is replicated along the row axis");
  d.strategy[1][0] = 2;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "cut 2 ways") != NULL, "%s", e.msg);
  /* Add with a broadcast row: [16,512] + [1,512] */
  d.kind = SK_OP_ADD, d.ndims[1] = 2, d.shape[1][0] = 1, d.shape[1][1] = 512;
  d.strategy[1][0] = 1, d.strategy[1][1] = 4;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  d.strategy[1][0] = 2;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT, "a broadcast dim cannot be cut");
}

Test(ops, bad_input) {
  sk_op_desc d = matmul_desc(16, 784, 512);
  d.has_strategy = true;
  d.strategy[0][0] = 2, d.strategy[0][1] = 4, d.strategy[1][0] = 2, d.strategy[1][1] = 1;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "contraction") != NULL, "%s", e.msg);
  d.strategy[1][0] = 4, d.strategy[0][0] = 3;
  cr_assert_eq(sk_op_plan_make(&d, 12, &p, &e), SK_ERR_INVALID_ARGUMENT, "16 rows are not divisible by 3");
  cr_assert(strstr(e.msg, "divisible") != NULL, "%s", e.msg);
  d.strategy[0][0] = 2;
  cr_assert_eq(sk_op_plan_make(&d, 12, &p, &e), SK_ERR_INVALID_ARGUMENT, "8 does not divide 12");
  cr_assert(strstr(e.msg, "does not divide") != NULL, "%s", e.msg);
  cr_assert_eq(sk_op_plan_make(NULL, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_op_plan_make(&d, 8, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  d.kind = (sk_op_kind)42;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
}

/* ---- numbers: a sharded MatMul forward and backward on 8 threads ------------------------- */

#define M 8
#define K 12
#define N 6
static float X[M][K], W[K][N], DOUT[M][N];

typedef struct mm_run {
  sk_op_plan plan;
  float y[8][M * N], dx[8][M * K], dw[8][K * N];
  sk_slice xs[8], ws[8], ys[8];
  sk_result rc[8];
} mm_run;

/* Counts by extent (stop - start), as mm_device sizes its loops, so the static analyzer sees
   that every element those loops read was written here. */
static void slice_copy(const float *full, int64_t cols, const sk_slice *s, float *out) {
  int64_t rows = s->stop[0] - s->start[0], n = s->stop[1] - s->start[1];
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < n; j++) out[i * n + j] = full[(s->start[0] + i) * cols + s->start[1] + j];
}

static sk_result allreduce_along(sk_comm *c, const sk_op_plan *p, const sk_op_comm *oc, float *buf, size_t n) {
  if (oc->kind == SK_COLL_NONE) return SK_OK;
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split_mesh(c, &p->mesh, oc->axes, &sub, NULL);
  if (r == SK_OK) r = sk_allreduce(sub, buf, buf, n, SK_F32, SK_SUM, NULL);
  for (size_t i = 0; i < n; i++) buf[i] *= (float)oc->scale;
  if (sub) sk_comm_destroy(sub, NULL);
  return r;
}

static sk_result mm_device(sk_comm *c, void *arg) {
  mm_run *R = (mm_run *)arg;
  int r = sk_comm_rank(c);
  const sk_op_plan *p = &R->plan;
  sk_error e;
  sk_result rc = sk_layout_slice(&p->in[0], r, &R->xs[r], &e);
  if (rc == SK_OK) rc = sk_layout_slice(&p->in[1], r, &R->ws[r], &e);
  if (rc == SK_OK) rc = sk_layout_slice(&p->out[0], r, &R->ys[r], &e);
  if ((R->rc[r] = rc) != SK_OK) return rc;
  int64_t m = R->xs[r].stop[0] - R->xs[r].start[0], k = R->xs[r].stop[1] - R->xs[r].start[1];
  int64_t n = R->ws[r].stop[1] - R->ws[r].start[1];
  /* x, w and y must agree on the shared dims; the loops below rely on it, and so does the analyzer */
  if (R->ws[r].stop[0] - R->ws[r].start[0] != k || R->ys[r].stop[0] - R->ys[r].start[0] != m ||
      R->ys[r].stop[1] - R->ys[r].start[1] != n)
    return R->rc[r] = SK_ERR_INTERNAL;
  float x[M * K], w[K * N], dout[M * N];
  slice_copy(&X[0][0], K, &R->xs[r], x);
  slice_copy(&W[0][0], N, &R->ws[r], w);
  slice_copy(&DOUT[0][0], N, &R->ys[r], dout);
  /* forward: local product, then the plan's forward collective */
  float *y = R->y[r];
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float acc = 0;
      for (int64_t q = 0; q < k; q++) acc += x[i * k + q] * w[q * n + j];
      y[i * n + j] = acc;
    }
  rc = allreduce_along(c, p, &p->fwd, y, (size_t)(m * n));
  /* backward: dx = dout w^T (plus the plan's sum), dw = x^T dout (plus the Mirror) */
  for (int64_t i = 0; i < m; i++)
    for (int64_t q = 0; q < k; q++) {
      float acc = 0;
      for (int64_t j = 0; j < n; j++) acc += dout[i * n + j] * w[q * n + j];
      R->dx[r][i * k + q] = acc;
    }
  if (rc == SK_OK) rc = allreduce_along(c, p, &p->bwd_in[0], R->dx[r], (size_t)(m * k));
  for (int64_t q = 0; q < k; q++)
    for (int64_t j = 0; j < n; j++) {
      float acc = 0;
      for (int64_t i = 0; i < m; i++) acc += x[i * k + q] * dout[i * n + j];
      R->dw[r][q * n + j] = acc;
    }
  if (rc == SK_OK) rc = allreduce_along(c, p, &p->grad[1], R->dw[r], (size_t)(k * n));
  R->rc[r] = rc;
  return rc;
}

static void check_slice(const float *full, int64_t cols, const sk_slice *s, const float *got, const char *what, int r) {
  size_t idx = 0;
  for (int64_t i = s->start[0]; i < s->stop[0]; i++)
    for (int64_t j = s->start[1]; j < s->stop[1]; j++, idx++) {
      float want = full[i * cols + j];
      float diff = got[idx] - want;
      cr_assert(diff < 1e-4f && diff > -1e-4f, "rank %d %s[%lld][%lld]: got %g want %g", r, what, (long long)i,
                (long long)j, got[idx], want);
    }
}

/* Runs fn on 8 thread devices; asserts (on the test's thread) that every device succeeded. */
static void run_on_8_threads(sk_device_fn fn, void *arg) {
  sk_world_desc wd = {0};
  wd.ndevices = 8;
  wd.backend = sk_threads_backend();
  wd.timeout_ms = 20000;
  sk_world *w;
  sk_error e;
  cr_assert_eq(sk_world_create(&wd, &w, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_world_run(w, fn, arg, NULL), SK_OK, "%s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
}

static void run_sharded_matmul(int s00, int s01, int s11) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < K; j++) X[i][j] = (float)((i * 7 + j * 3) % 11) / 8.0f - 0.5f;
  for (int i = 0; i < K; i++)
    for (int j = 0; j < N; j++) W[i][j] = (float)((i * 5 + j * 2) % 13) / 8.0f - 0.75f;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) DOUT[i][j] = (float)((i + 2 * j) % 5) / 4.0f - 0.5f;
  float Y[M][N], DX[M][K], DW[K][N];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      Y[i][j] = 0;
      for (int q = 0; q < K; q++) Y[i][j] += X[i][q] * W[q][j];
    }
  for (int i = 0; i < M; i++)
    for (int q = 0; q < K; q++) {
      DX[i][q] = 0;
      for (int j = 0; j < N; j++) DX[i][q] += DOUT[i][j] * W[q][j];
    }
  for (int q = 0; q < K; q++)
    for (int j = 0; j < N; j++) {
      DW[q][j] = 0;
      for (int i = 0; i < M; i++) DW[q][j] += X[i][q] * DOUT[i][j];
    }
  static mm_run R;
  memset(&R, 0, sizeof R);
  sk_op_desc d = matmul_desc(M, K, N);
  d.has_strategy = true;
  d.strategy[0][0] = s00, d.strategy[0][1] = s01, d.strategy[1][0] = s01, d.strategy[1][1] = s11;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &R.plan, &e), SK_OK, "%s", e.msg);
  run_on_8_threads(mm_device, &R);
  for (int r = 0; r < 8; r++) {
    check_slice(&Y[0][0], N, &R.ys[r], R.y[r], "y", r);
    check_slice(&DX[0][0], K, &R.xs[r], R.dx[r], "dx", r);
    check_slice(&DW[0][0], N, &R.ws[r], R.dw[r], "dw", r);
  }
}

Test(ops, sharded_matmul_matches_unsharded_2x4x1, .timeout = 30) { run_sharded_matmul(2, 4, 1); }
Test(ops, sharded_matmul_matches_unsharded_1x4x2, .timeout = 30) { run_sharded_matmul(1, 4, 2); }
Test(ops, sharded_matmul_matches_unsharded_2x2x2, .timeout = 30) { run_sharded_matmul(2, 2, 2); }

/* ---- binary operators broadcast both ways (docs/operators.md 2.2) ------------------------- */

static sk_op_desc binary_desc(int64_t a0, int64_t a1, int64_t b0, int64_t b1, int s00, int s01, int s10, int s11) {
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = SK_OP_ADD, d.ninputs = 2;
  d.ndims[0] = d.ndims[1] = 2;
  d.shape[0][0] = a0, d.shape[0][1] = a1, d.shape[1][0] = b0, d.shape[1][1] = b1;
  d.has_strategy = true;
  d.strategy[0][0] = s00, d.strategy[0][1] = s01, d.strategy[1][0] = s10, d.strategy[1][1] = s11;
  return d;
}

static int map_axis(const sk_layout *l, int dim) { return l->map[dim].naxes ? l->map[dim].axes[0] : -1; }

/* Add([1,48], [48,1]).shard(((1,8),(4,1))) on 32 devices: device matrix [4,8]; in MindSpore's
   right-counted maps x [-1,0], y [1,-1], output [1,0]; here axes count from the left, so x's
   dim 1 is axis 1 (d1, 8 ways), y's dim 0 axis 0 (d0, 4 ways). */
Test(ops_binary, add_broadcast_both_sides) {
  sk_op_desc d = binary_desc(1, 48, 48, 1, 1, 8, 4, 1);
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.mesh.naxes, 2, "device matrix [4,8], no repeat axis");
  cr_assert_eq(p.mesh.dims[0], 4);
  cr_assert_eq(p.mesh.dims[1], 8);
  cr_assert_eq(map_axis(&p.in[0], 0), -1);
  cr_assert_eq(map_axis(&p.in[0], 1), 1);
  cr_assert_eq(map_axis(&p.in[1], 0), 0);
  cr_assert_eq(map_axis(&p.in[1], 1), -1);
  cr_assert_eq(p.out[0].shape[0], 48);
  cr_assert_eq(p.out[0].shape[1], 48);
  cr_assert_eq(map_axis(&p.out[0], 0), 0);
  cr_assert_eq(map_axis(&p.out[0], 1), 1);
  sk_slice s;
  cr_assert_eq(sk_layout_slice(&p.out[0], 13, &s, &e), SK_OK, "%s", e.msg);
  /* rank 13 = (1, 5): rows [12,24), cols [30,36) */
  cr_assert_eq(s.start[0], 12);
  cr_assert_eq(s.stop[0], 24);
  cr_assert_eq(s.start[1], 30);
  cr_assert_eq(s.stop[1], 36);
  cr_assert_eq(p.fwd.kind, SK_COLL_NONE);
  /* x's gradient sums dy over rows (cut by d0), y's over columns (cut by d1) */
  cr_assert_eq(p.bwd_in[0].kind, SK_COLL_ALLREDUCE);
  cr_assert_eq(p.bwd_in[0].axes, 1u);
  cr_assert_eq(p.bwd_in[1].kind, SK_COLL_ALLREDUCE);
  cr_assert_eq(p.bwd_in[1].axes, 2u);
  /* the same with the inputs swapped */
  d = binary_desc(48, 1, 1, 48, 4, 1, 1, 8);
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(map_axis(&p.in[0], 0), 0);
  cr_assert_eq(map_axis(&p.in[1], 1), 1);
}

/* 64 devices: a repeat axis on the right, [4,8,2]; MindSpore's maps shift to x [-1,1],
   y [2,-1], output [2,1]: the left-counted axes do not move. A parameter's gradient goes to
   the Mirror, over the axes its map leaves out, repeat axis included. */
Test(ops_binary, repeat_axis_and_mirror) {
  sk_op_desc d = binary_desc(1, 48, 48, 1, 1, 8, 4, 1);
  d.params = 2;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 64, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.mesh.naxes, 3);
  cr_assert_eq(p.mesh.dims[2], 2);
  cr_assert_str_eq(p.mesh.names[2], "rep");
  cr_assert_eq(map_axis(&p.in[0], 1), 1);
  cr_assert_eq(map_axis(&p.in[1], 0), 0);
  cr_assert_eq(p.bwd_in[1].kind, SK_COLL_NONE, "a parameter's partial sums are the Mirror's");
  cr_assert_eq(p.grad[1].kind, SK_COLL_ALLREDUCE);
  cr_assert_eq(p.grad[1].axes, 2u | 4u, "Mirror over d1 and rep");
  cr_assert_eq(p.grad[0].kind, SK_COLL_NONE);
}

/* Ranks differ: [2,16] + [16] with ((2,4),(4,)), and the shorter input first. */
Test(ops_binary, lower_rank_either_side) {
  sk_op_desc d = binary_desc(2, 16, 16, 0, 2, 4, 4, 0);
  d.ndims[1] = 1;
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(map_axis(&p.in[1], 0), 1);
  cr_assert_eq(p.bwd_in[1].axes, 1u, "the row vector's gradient sums over d0");
  sk_op_desc s;
  memset(&s, 0, sizeof s);
  s.kind = SK_OP_ADD, s.ninputs = 2, s.has_strategy = true;
  s.ndims[0] = 1, s.shape[0][0] = 16, s.strategy[0][0] = 4;
  s.ndims[1] = 2, s.shape[1][0] = 2, s.shape[1][1] = 16, s.strategy[1][0] = 2, s.strategy[1][1] = 4;
  cr_assert_eq(sk_op_plan_make(&s, 8, &p, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(p.out[0].ndims, 2);
  cr_assert_eq(p.mesh.dims[0], 2);
  cr_assert_eq(p.mesh.dims[1], 4);
  cr_assert_eq(map_axis(&p.in[0], 0), 1);
}

Test(ops_binary, rejects) {
  sk_op_plan p;
  sk_error e;
  sk_op_desc d = binary_desc(16, 48, 16, 48, 2, 4, 4, 2);
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT, "cuts differ on a dim neither broadcasts");
  cr_assert(strstr(e.msg, "input 1 dim 0 is cut 4 ways but input 0 dim 0 2 ways") != NULL, "%s", e.msg);
  d = binary_desc(16, 48, 8, 48, 1, 1, 1, 1);
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT, "16 and 8 do not broadcast");
  cr_assert(strstr(e.msg, "does not broadcast") != NULL, "%s", e.msg);
  d = binary_desc(1, 48, 48, 1, 2, 8, 4, 1);
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_ERR_INVALID_ARGUMENT, "a size-1 dim cut 2 ways");
  cr_assert(strstr(e.msg, "input 0 dim 0 has size 1 but is cut 2 ways") != NULL, "%s", e.msg);
  d = binary_desc(1, 48, 48, 1, 1, 8, 4, 1);
  cr_assert_eq(sk_op_plan_make(&d, 16, &p, &e), SK_ERR_INVALID_ARGUMENT, "32 devices needed");
  cr_assert(strstr(e.msg, "does not divide") != NULL, "%s", e.msg);
}

/* MindSpore rejects a strategy with the wrong number of tuples or a tuple of the wrong length
   (init fails); desc.nstrategies and desc.strategy_len let them be written. */
Test(ops, strategy_form_rejected) {
  sk_op_desc d = binary_desc(1, 48, 48, 1, 1, 8, 4, 1);
  sk_op_plan p;
  sk_error e;
  d.nstrategies = 1;
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "strategy has 1 tuple for 2 inputs") != NULL, "%s", e.msg);
  d.nstrategies = 3;
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "strategy has 3 tuples for 2 inputs") != NULL, "%s", e.msg);
  d.nstrategies = 2;
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_OK, "%s", e.msg);
  d.strategy_len[1] = 3;
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "input 1's tuple has 3 entries for a rank-2 tensor") != NULL, "%s", e.msg);
  d.strategy_len[1] = 2, d.strategy_len[0] = 1;
  cr_assert_eq(sk_op_plan_make(&d, 32, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "input 0's tuple has 1 entry for a rank-2 tensor") != NULL, "%s", e.msg);
  /* the same checks for the other operators */
  sk_op_desc m = matmul_desc(16, 784, 512);
  m.has_strategy = true;
  m.strategy[0][0] = 2, m.strategy[0][1] = 4, m.strategy[1][0] = 4, m.strategy[1][1] = 1;
  m.strategy_len[0] = 3;
  cr_assert_eq(sk_op_plan_make(&m, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "MatMul: input 0's tuple has 3 entries") != NULL, "%s", e.msg);
  sk_op_desc u;
  memset(&u, 0, sizeof u);
  u.kind = SK_OP_RELU, u.ninputs = 1, u.ndims[0] = 2, u.shape[0][0] = 8, u.shape[0][1] = 8;
  u.has_strategy = true, u.strategy[0][0] = 8, u.strategy[0][1] = 1, u.nstrategies = 2;
  cr_assert_eq(sk_op_plan_make(&u, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "strategy has 2 tuples for 1 input") != NULL, "%s", e.msg);
  u.nstrategies = 0;
  cr_assert_eq(sk_op_plan_make(&u, 8, &p, &e), SK_OK, "%s", e.msg);
}

/* ---- numbers: a sharded broadcasting Add forward and backward on 8 threads --------------- */

#define AR 8
#define AC 8
static float AX[AC], AY[AR], ADOUT[AR][AC];

typedef struct add_run {
  sk_op_plan plan;
  float z[8][AR * AC], dx[8][AC], dy[8][AR];
  sk_slice xs[8], ys[8], zs[8];
  sk_result rc[8];
} add_run;

/* z = x [1,AC] + y [AR,1]; dx sums dout over rows, dy over columns, each over the local piece,
   then the plan's collectives complete the sums (bwd_in, or the Mirror for a parameter). */
static sk_result add_device(sk_comm *c, void *arg) {
  add_run *R = (add_run *)arg;
  int r = sk_comm_rank(c);
  const sk_op_plan *p = &R->plan;
  sk_error e;
  sk_result rc = sk_layout_slice(&p->in[0], r, &R->xs[r], &e);
  if (rc == SK_OK) rc = sk_layout_slice(&p->in[1], r, &R->ys[r], &e);
  if (rc == SK_OK) rc = sk_layout_slice(&p->out[0], r, &R->zs[r], &e);
  if ((R->rc[r] = rc) != SK_OK) return rc;
  const sk_slice *zs = &R->zs[r];
  int64_t rows = zs->stop[0] - zs->start[0], cols = zs->stop[1] - zs->start[1];
  /* the inputs' pieces must be the output's rows and columns: that is what the maps promise */
  if (R->xs[r].start[1] != zs->start[1] || R->xs[r].stop[1] != zs->stop[1] || R->ys[r].start[0] != zs->start[0] ||
      R->ys[r].stop[0] != zs->stop[0])
    return R->rc[r] = SK_ERR_INTERNAL;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) R->z[r][i * cols + j] = AX[zs->start[1] + j] + AY[zs->start[0] + i];
  for (int64_t j = 0; j < cols; j++) {
    R->dx[r][j] = 0;
    for (int64_t i = 0; i < rows; i++) R->dx[r][j] += ADOUT[zs->start[0] + i][zs->start[1] + j];
  }
  for (int64_t i = 0; i < rows; i++) {
    R->dy[r][i] = 0;
    for (int64_t j = 0; j < cols; j++) R->dy[r][i] += ADOUT[zs->start[0] + i][zs->start[1] + j];
  }
  rc = allreduce_along(c, p, &p->bwd_in[0], R->dx[r], (size_t)cols);
  if (rc == SK_OK) rc = allreduce_along(c, p, &p->bwd_in[1], R->dy[r], (size_t)rows);
  if (rc == SK_OK) rc = allreduce_along(c, p, &p->grad[1], R->dy[r], (size_t)rows);
  return R->rc[r] = rc;
}

static void run_sharded_add(int sx1, int sy0, uint32_t params) {
  for (int j = 0; j < AC; j++) AX[j] = (float)(j % 5) / 4.0f - 0.5f;
  for (int i = 0; i < AR; i++) AY[i] = (float)(i % 3) / 2.0f - 0.25f;
  for (int i = 0; i < AR; i++)
    for (int j = 0; j < AC; j++) ADOUT[i][j] = (float)((3 * i + j) % 7) / 4.0f - 0.75f;
  static add_run R;
  memset(&R, 0, sizeof R);
  sk_op_desc d = binary_desc(1, AC, AR, 1, 1, sx1, sy0, 1);
  d.params = params;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &R.plan, &e), SK_OK, "%s", e.msg);
  run_on_8_threads(add_device, &R);
  for (int r = 0; r < 8; r++) {
    const sk_slice *zs = &R.zs[r];
    int64_t cols = zs->stop[1] - zs->start[1];
    for (int64_t i = zs->start[0]; i < zs->stop[0]; i++)
      for (int64_t j = zs->start[1]; j < zs->stop[1]; j++)
        cr_assert_float_eq(R.z[r][(i - zs->start[0]) * cols + (j - zs->start[1])], AX[j] + AY[i], 1e-5, "rank %d z", r);
    for (int64_t j = zs->start[1]; j < zs->stop[1]; j++) {
      float want = 0;
      for (int i = 0; i < AR; i++) want += ADOUT[i][j];
      cr_assert_float_eq(R.dx[r][j - zs->start[1]], want, 1e-4, "rank %d dx[%lld]", r, (long long)j);
    }
    for (int64_t i = zs->start[0]; i < zs->stop[0]; i++) {
      float want = 0;
      for (int j = 0; j < AC; j++) want += ADOUT[i][j];
      cr_assert_float_eq(R.dy[r][i - zs->start[0]], want, 1e-4, "rank %d dy[%lld]", r, (long long)i);
    }
  }
}

Test(ops_binary, sharded_add_matches_unsharded_1x4_2x1, .timeout = 30) { run_sharded_add(4, 2, 0); }
Test(ops_binary, sharded_add_matches_unsharded_param_y, .timeout = 30) { run_sharded_add(4, 2, 2); }
Test(ops_binary, sharded_add_matches_unsharded_repeat, .timeout = 30) { run_sharded_add(2, 2, 0); }
