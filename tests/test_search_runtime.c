/* The strategy search's plans run on thread devices against the single-device trainer (also
   under TSan: this suite reads no JSON, see tests/search_nets.h): Dense with a split contraction
   dim and a bias (its bias once, on the first contraction part: before the fix every part added
   it and the forward AllReduce summed it k times, a loss off by ~3e-2 here), seeded random MLPs
   compiled in every search mode on 2, 4, 6 and 8 devices, 6 devices on dims no 3 divides, and a
   weight shared by two MatMuls. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_harness.h"
#include "search_nets.h"
#include "shardkit.h"

/* ---- 5. Dense with a split contraction dim and a bias ------------------------------------- */

/* x [16, 8] Dense (w [4, 8], b [4]) -> softmax loss; strategy ((a, k), (c, k), (c,)). */
static void build_dense_bias(net *n, int a, int k, int c) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(4, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int b = add_param(n, "b", 1, SH1(4), SK_INIT_UNIFORM, 0.5);
  sk_graph_op fc = OP("fc", SK_OP_DENSE, x, w, b);
  SHARD(fc, 0, a, k), SHARD(fc, 1, c, k), SHARD(fc, 2, c);
  int z = add_op(n, fc);
  OK(sk_graph_set_loss(&n->g, add_op(n, OP("loss", SK_OP_SOFTMAX_CE, z, y)), E));
  OK(sk_graph_set_eval(&n->g, z, y, E));
}

static void dense_bias_case(int N, int a, int k, int c) {
  static net n;
  static run R;
  char what[96];
  snprintf(what, sizeof what, "Dense ((%d,%d),(%d,%d),(%d,)) on %d devices", a, k, c, k, c, N);
  build_dense_bias(&n, a, k, c);
  run_init(&R, &n, N, SK_F64, sgd(0.5), 5);
  cr_assert_eq(R.plan.nfallbacks, 0, "%s fell back", what);
  char text[256], want[128];
  sk_parallel_format_strategies(&R.plan, text, sizeof text);
  snprintf(want, sizeof want, "fc ((%d, %d), (%d, %d), (%d,))\n", a, k, c, k, c);
  cr_assert(!strncmp(text, want, strlen(want)), "%s: '%s'", what, text);
  run_world(&R);
  expect_all_ok(&R, what);
  errs m = against_trainer(&R, TOL64, what);
  cr_log_info("%s: losses within %.3g", what, m.loss);
  /* the facts: the bias on the first contraction part only */
  int fc = op_named(&n.g, "fc"), with_bias = 0;
  for (int r = 0; r < N; r++) {
    sk_exec_facts f;
    OK(sk_parallel_facts(&R.plan, fc, r, &f, E));
    with_bias += !f.skip_bias;
  }
  cr_assert_eq(with_bias, N / k, "%s: %d devices add the bias, want %d", what, with_bias, N / k);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(search_runtime, dense_split_contraction_bias_2, .timeout = RT_TIMEOUT) { dense_bias_case(2, 1, 2, 1); }
Test(search_runtime, dense_split_contraction_bias_4, .timeout = RT_TIMEOUT) {
  dense_bias_case(4, 1, 2, 1); /* two of the four repeat */
  dense_bias_case(4, 1, 4, 1);
  dense_bias_case(4, 2, 2, 1);
}
/* the bias cut with the output columns too: each column part adds its bias slice once */
Test(search_runtime, dense_split_contraction_and_columns_bias, .timeout = RT_TIMEOUT) {
  dense_bias_case(4, 1, 2, 2);
  dense_bias_case(8, 2, 2, 2);
  dense_bias_case(8, 1, 2, 4);
  dense_bias_case(8, 1, 8, 1);
}

/* ---- 7. searched plans train like one device ---------------------------------------------- */

static void train_searched(net *n, int N, sk_parallel_mode mode, sk_dataset_strategy dataset, const char *what) {
  static run R;
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.mode = mode, pd.dataset = dataset;
  run_init_knobs(&R, n, N, SK_F64, sgd(0.2), 4, &pd);
  for (int o = 0; o < R.plan.graph->nops; o++)
    cr_assert(R.plan.searched[o] == !n->g.ops[o].desc.has_strategy, "%s: '%s'", what, n->g.ops[o].name);
  run_world(&R);
  expect_all_ok(&R, what);
  against_trainer(&R, TOL64, what);
  run_free(&R);
}

/* Seeded random MLPs (Dense with biases, MatMul, ReLU, Add of a bias or of an earlier output) on
   2, 4, 6 and 8 thread devices, each search mode: one device's losses and parameters. */
Test(search_runtime, random_mlps_train_like_one_device, .timeout = 240) {
  static const int counts[4] = {2, 4, 6, 8};
  for (int ci = 0; ci < 4; ci++)
    for (uint64_t seed = 1; seed <= 3; seed++)
      for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++) {
        static net n;
        random_mlp(&n, seed * 7919 + (uint64_t)counts[ci], counts[ci], NULL, NULL);
        char what[512], buf[400];
        snprintf(what, sizeof what, "%s, %d devices, seed %llu (%s)", sk_parallel_mode_name((sk_parallel_mode)mode), counts[ci],
                 (unsigned long long)seed, describe(&n.g, buf, sizeof buf));
        train_searched(&n, counts[ci], (sk_parallel_mode)mode, SK_DATASET_DATA_PARALLEL, what);
        sk_graph_free(&n.g);
      }
}

/* 6 devices on dims of 8 and 16: no cut takes a 3, every operator uses 2 devices and repeats
   over 3 (D-Rec's round of 3 cuts nothing); the batch whole on every device. */
Test(search_runtime, six_devices_without_a_three, .timeout = 120) {
  for (uint64_t seed = 1; seed <= 3; seed++) {
    static net n;
    random_mlp_dims(&n, seed * 13, 8, NULL, NULL);
    sk_search_desc d = sdesc(6);
    sk_search_model m;
    build_model(&n.g, &d, &m);
    for (int o = 0; o < n.g.nops; o++)
      for (int c = 0; c < m.ncands[o]; c++) cr_assert_eq(m.cands[o][c].devices, 2, "%s: %d devices", n.g.ops[o].name, m.cands[o][c].devices);
    check_searches(&m, "6 devices on dims of 8 and 16");
    sk_search_model_free(&m);
    for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++)
      train_searched(&n, 6, (sk_parallel_mode)mode, SK_DATASET_FULL_BATCH, sk_parallel_mode_name((sk_parallel_mode)mode));
    sk_graph_free(&n.g);
  }
}

/* One weight read by two MatMuls (a parameter edge between its readers): the exact search
   against the brute force, and every mode trains like one device. */
Test(search_runtime, shared_weight, .timeout = 120) {
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int x = add_input(&n, "x", SK_F32, 2, SH2(16, 16), 0), y = add_input(&n, "y", SK_I32, 1, SH1(16), 8);
  int w = add_param(&n, "w", 2, SH2(16, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int h = add_op(&n, OP("relu", SK_OP_RELU, add_op(&n, OP("fc1", SK_OP_MATMUL, x, w))));
  h = add_op(&n, OP("fc2", SK_OP_MATMUL, h, w));
  loss_head(&n, h, y, "u", 16, 8);
  for (int N = 2; N <= 8; N *= 2) {
    sk_search_desc d = sdesc(N);
    sk_search_model m;
    build_model(&n.g, &d, &m);
    int params = 0;
    for (int e = 0; e < m.nedges; e++) params += m.edges[e].src_param;
    cr_assert_eq(params, 1, "one parameter edge, fc1 -> fc2");
    check_searches(&m, "shared weight");
    sk_search_model_free(&m);
    for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++)
      train_searched(&n, N, (sk_parallel_mode)mode, SK_DATASET_DATA_PARALLEL, sk_parallel_mode_name((sk_parallel_mode)mode));
  }
  sk_graph_free(&n.g);
}

/* ---- the runtime suites' networks with their strategies taken out -------------------------- */

static void strip_strategies(sk_graph *g) {
  for (int o = 0; o < g->nops; o++) {
    sk_op_desc *d = &g->ops[o].desc;
    d->has_strategy = d->has_out_strategy = d->has_layouts = false, d->nstrategies = 0;
    memset(d->strategy, 0, sizeof d->strategy), memset(d->strategy_len, 0, sizeof d->strategy_len);
    memset(d->out_strategy, 0, sizeof d->out_strategy);
  }
}

static void b_mlp(net *n, int N) { build_mlp(n, N), strip_strategies(&n->g); }
static void b_reduce_scatter(net *n, int N) { build_reduce_scatter(n, N), strip_strategies(&n->g); }
static void b_residual(net *n, int N) { build_residual(n, N), strip_strategies(&n->g); }
static void b_layernorm(net *n, int N) { build_layernorm(n, N), strip_strategies(&n->g); }
static void b_gather(net *n, int N) { build_gather(n, N, true), strip_strategies(&n->g); }
static void b_gather_batch_axis(net *n, int N) { build_gather_batch_axis(n, N), strip_strategies(&n->g); }
static void b_bmm(net *n, int N) { build_bmm(n, N), strip_strategies(&n->g); }
static void b_dropout(net *n, int N) { build_dropout(n, N), strip_strategies(&n->g); }

/* ... and as written: the search fills in only the operators without a strategy (the loss
   heads, a few MatMuls), around the configured ones (a ReduceScatter output among them). */
static void a_mlp(net *n, int N) { build_mlp(n, N); }
static void a_reduce_scatter(net *n, int N) { build_reduce_scatter(n, N); }
static void a_residual(net *n, int N) { build_residual(n, N); }
static void a_layernorm(net *n, int N) { build_layernorm(n, N); }
static void a_gather(net *n, int N) { build_gather(n, N, false); }
static void a_bmm(net *n, int N) { build_bmm(n, N); }
static void a_dropout(net *n, int N) { build_dropout(n, N); }

/* Element-wise operators between two MatMuls: Tanh, Sub of a bias, Mul of two branches, Gelu,
   BiasAdd, Softmax. */
static void b_zoo(net *n, int N) {
  (void)N;
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int b = add_param(n, "b", 1, SH1(16), SK_INIT_UNIFORM, 0.5), c = add_param(n, "c", 1, SH1(16), SK_INIT_UNIFORM, 0.5);
  int h = add_op(n, OP("fc", SK_OP_MATMUL, x, w));
  int t = add_op(n, OP("tanh", SK_OP_TANH, h));
  int s = add_op(n, OP("sub", SK_OP_SUB, t, b));
  int m = add_op(n, OP("mul", SK_OP_MUL, s, h));
  int g = add_op(n, OP("gelu", SK_OP_GELU, m));
  int ba = add_op(n, OP("bias", SK_OP_BIAS_ADD, g, c));
  int sm = add_op(n, OP("softmax", SK_OP_SOFTMAX, ba));
  loss_head(n, sm, y, "u", 16, 4);
}

typedef struct named_build {
  const char *name;
  build_fn build;
} named_build;

/* Each network on 2, 4 and 8 devices in each search mode: one device's losses and parameters. */
Test(search_runtime, harness_networks_searched_train_like_one_device, .timeout = 240) {
  static const named_build nets[] = {{"mlp", b_mlp},         {"reduce_scatter", b_reduce_scatter},
                                     {"residual", b_residual}, {"layernorm", b_layernorm},
                                     {"gather", b_gather},     {"gather_batch_axis", b_gather_batch_axis},
                                     {"bmm", b_bmm},           {"dropout", b_dropout},
                                     {"zoo", b_zoo},           {"mlp as written", a_mlp},
                                     {"reduce_scatter as written", a_reduce_scatter},
                                     {"residual as written", a_residual},
                                     {"layernorm as written", a_layernorm},
                                     {"gather (columns) as written", a_gather},
                                     {"bmm as written", a_bmm},
                                     {"dropout as written", a_dropout}};
  for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++)
    for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++) {
      sk_autoparallel pd;
      memset(&pd, 0, sizeof pd);
      pd.mode = (sk_parallel_mode)mode;
      char what[96];
      snprintf(what, sizeof what, "%s, %s", nets[i].name, sk_parallel_mode_name((sk_parallel_mode)mode));
      each_device_count_knobs(what, nets[i].build, NULL, sgd(0.2), 4, &pd);
    }
}
