/* Dead branches: an operator whose output does not reach the loss (a metric, an auxiliary head)
   runs its forward and no backward, on one device and on N, and a parameter only it reads gets a
   zero gradient and is still updated (weight decay, momentum), as MindSpore gives it a zero
   gradient.

   The network is the tutorial's chain (tests/runtime_harness.h's build_mlp) with an auxiliary
   head before the loss head: aux = MatMul(relu1, aux.weight), aux_relu = ReLU(aux), which no
   operator reads. A second form reads the loss head's weight u in the auxiliary head too (before
   the loss head, in graph order): u's gradient comes from the loss head alone.

   1. sk_exec_grad_flow: the head's outputs have no gradient; every parameter has one.
   2. The plan: no Backward step for the head on any device count, no Mirror for aux.weight; the
      sharded u's gradient ReduceScatter follows the loss head's backward (the reader that
      writes it), not the head's.
   3. 1, 2 and 8 devices, a pipeline (2 stages of 4, 2 micro-batches; with optimizer parallel
      level2 too) and optimizer parallel (level1, level3) train like the single-device trainer:
      every loss and every parameter, aux.weight included, f64 within TOL64, Momentum with
      weight decay so aux.weight moves though its gradient is zero; the trainer's gradient of
      aux.weight is zero after every backward.

   Device threads never assert (the harness records, the test's thread asserts); every threaded
   test has a timeout. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "runtime_harness.h"

#define DEAD_TIMEOUT (4 * RT_TIMEOUT)

/* The tutorial's chain (its strategies on N >= 2 devices) with the auxiliary head before the
   loss head; shared: the head reads the loss head's weight u instead of its own aux.weight. */
static void build_dead(net *n, int N, bool shared) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 16), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w1 = add_param(n, "w1", 2, SH2(16, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(n, "w2", 2, SH2(16, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int u = add_param(n, "u", 2, SH2(16, 4), SK_INIT_XAVIER_UNIFORM, 0);
  int aw = shared ? u : add_param(n, "aux.weight", 2, SH2(16, 4), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op fc1 = OP("fc1", SK_OP_MATMUL, x, w1);
  if (N >= 2) SHARD(fc1, 0, 2, N / 2), SHARD(fc1, 1, N / 2, 1);
  sk_graph_op relu1 = OP("relu1", SK_OP_RELU, add_op(n, fc1));
  if (N >= 2) SHARD(relu1, 0, N / 2, 1);
  int h1 = add_op(n, relu1);
  sk_graph_op fc2 = OP("fc2", SK_OP_MATMUL, h1, w2);
  if (N >= 2) SHARD(fc2, 0, 1, N), SHARD(fc2, 1, N, 1);
  sk_graph_op relu2 = OP("relu2", SK_OP_RELU, add_op(n, fc2));
  if (N >= 2) SHARD(relu2, 0, N, 1);
  int h2 = add_op(n, relu2);
  add_op(n, OP("aux_relu", SK_OP_RELU, add_op(n, OP("aux", SK_OP_MATMUL, h1, aw))));
  int z = add_op(n, OP("z", SK_OP_MATMUL, h2, u));
  int loss = add_op(n, OP("loss", SK_OP_SOFTMAX_CE, z, y));
  OK(sk_graph_set_loss(&n->g, loss, E));
  OK(sk_graph_set_eval(&n->g, z, y, E));
}

static int tensor_named(const sk_graph *g, const char *name) {
  for (int t = 0; t < g->ntensors; t++)
    if (!strcmp(g->tensors[t].name, name)) return t;
  cr_assert_fail("no tensor '%s'", name);
  return -1;
}

static int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator '%s'", name);
  return -1;
}

/* Steps of `kind` of operator o (slot: any when -1). */
static int steps_of(const sk_parallel_plan *p, sk_parallel_step_kind kind, int o, int slot) {
  int n = 0;
  for (int i = 0; i < p->nsteps; i++)
    n += p->steps[i].kind == kind && p->steps[i].op == o && (slot < 0 || p->steps[i].slot == slot);
  return n;
}

/* Momentum 0.9 with weight decay: a zero gradient still moves a parameter. */
static sk_optim_desc decaying(void) {
  sk_optim_desc o = momentum(0.1, 0.9);
  o.weight_decay = 0.05;
  return o;
}

/* ---- 1. which tensors have a gradient ----------------------------------------------------------- */

Test(dead_branches, grad_flow_stops_where_the_loss_does_not_reach) {
  static net n;
  build_dead(&n, 2, false);
  const sk_graph *g = &n.g;
  bool *needs = (bool *)calloc((size_t)g->ntensors, sizeof(bool));
  cr_assert_not_null(needs);
  sk_exec_grad_flow(g, needs);
  cr_assert(!needs[tensor_named(g, "aux")] && !needs[tensor_named(g, "aux_relu")], "the head's outputs have no gradient");
  cr_assert(needs[tensor_named(g, "aux.weight")], "every parameter has a gradient (zero where none reaches it)");
  cr_assert(needs[tensor_named(g, "relu1")] && needs[tensor_named(g, "z")] && needs[g->loss]);
  cr_assert(!needs[tensor_named(g, "x")] && !needs[tensor_named(g, "y")], "inputs take none");
  free(needs);
  sk_graph_free(&n.g);
}

/* ---- 2. the plan ----------------------------------------------------------------------------- */

Test(dead_branches, no_backward_and_no_mirror_for_the_head) {
  static const int counts[] = {1, 2, 8};
  for (int c = 0; c < 3; c++) {
    static net n;
    int N = counts[c];
    build_dead(&n, N, false);
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.ndevices = N;
    sk_parallel_plan p;
    OK(sk_parallel_compile(&n.g, &pd, &p, E));
    int aux = op_named(p.graph, "aux"), aux_relu = op_named(p.graph, "aux_relu"), z = op_named(p.graph, "z");
    cr_assert_eq(steps_of(&p, SK_PSTEP_FORWARD, aux, -1) + steps_of(&p, SK_PSTEP_FORWARD, aux_relu, -1), 2,
                 "%d devices: the head still runs forward", N);
    for (int kind = SK_PSTEP_UNDO_COMM; kind <= SK_PSTEP_MOVE_BACK; kind++)
      cr_assert_eq(steps_of(&p, (sk_parallel_step_kind)kind, aux, -1) + steps_of(&p, (sk_parallel_step_kind)kind, aux_relu, -1), 0,
                   "%d devices: a %s step for the head", N, sk_parallel_step_name((sk_parallel_step_kind)kind));
    cr_assert_eq(steps_of(&p, SK_PSTEP_BACKWARD, z, -1), 1, "%d devices: the loss head's backward", N);
    cr_assert(p.tensors[tensor_named(p.graph, "aux.weight")].needs_grad);
    cr_assert(!p.tensors[tensor_named(p.graph, "aux_relu")].needs_grad);
    sk_parallel_free(&p);
    sk_graph_free(&n.g);
  }
}

/* Optimizer parallel: u's gradient is written by the loss head's backward alone, so its
   ReduceScatter follows that backward, though the head reads u first. */
Test(dead_branches, sharded_gradient_scattered_after_the_reader_that_writes_it) {
  static net n;
  build_dead(&n, 8, true);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = 8, pd.hsdp.enabled = true, pd.hsdp.shard_size = -1, pd.hsdp.level = SK_HSDP_LEVEL1;
  sk_parallel_plan p;
  OK(sk_parallel_compile(&n.g, &pd, &p, E));
  int u = tensor_named(p.graph, "u"), z = op_named(p.graph, "z"), aux = op_named(p.graph, "aux");
  cr_assert_gt(p.tensors[u].opt_size, 1, "u is sharded (%s)", p.tensors[u].opt_why);
  cr_assert_eq(steps_of(&p, SK_PSTEP_GRAD_REDUCE_SCATTER, z, 1), 1, "u's ReduceScatter follows z's backward");
  cr_assert_eq(steps_of(&p, SK_PSTEP_GRAD_REDUCE_SCATTER, aux, -1), 0);
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}

/* ---- 3. N devices train like one ----------------------------------------------------------- */

/* The trainer's gradient of aux.weight is zero after each backward, and the update still moves
   aux.weight (weight decay through the momentum): what the runs below must reproduce. */
Test(dead_branches, trainer_zero_gradient_still_updated) {
  static net n;
  build_dead(&n, 1, false);
  const sk_graph *g = &n.g;
  int aw = tensor_named(g, "aux.weight");
  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = SK_F64, td.optim = decaying(), td.seed = 7;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(g, &td, &t, E));
  double x[16 * 16], before[16 * 4];
  int32_t y[16];
  for (int i = 0; i < 256; i++) x[i] = 2 * unit(3, i) - 1;
  for (int i = 0; i < 16; i++) y[i] = i % 4;
  memcpy(before, sk_trainer_values(t, aw), sizeof before);
  for (int s = 0; s < 3; s++) {
    OK(sk_trainer_feed(t, tensor_named(g, "x"), SK_F64, x, 256, E));
    OK(sk_trainer_feed(t, tensor_named(g, "y"), SK_I32, y, 16, E));
    double loss = 0;
    OK(sk_trainer_forward(t, &loss, E));
    OK(sk_trainer_backward(t, E));
    const double *gr = (const double *)sk_trainer_grad(t, aw);
    cr_assert_not_null(gr);
    for (int i = 0; i < 64; i++) cr_assert_eq(gr[i], 0.0, "step %d: aux.weight's gradient [%d] is %g", s, i, gr[i]);
    cr_assert_null(sk_trainer_grad(t, tensor_named(g, "aux_relu")), "no gradient buffer for the head's output");
    OK(sk_trainer_update(t, E));
  }
  cr_assert(memcmp(before, sk_trainer_values(t, aw), sizeof before) != 0, "weight decay moves aux.weight");
  sk_trainer_destroy(t);
  sk_graph_free(&n.g);
}

typedef struct dcase {
  const char *what;
  int devices, stages, micro;
  bool hsdp, shared;
  sk_hsdp_level level;
} dcase;

static void dead_case(const dcase *c) {
  static net n;
  static run R;
  build_dead(&n, c->devices / (c->stages ? c->stages : 1), c->shared);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = c->stages, pd.pipeline.micro = c->micro, pd.output_broadcast = c->stages > 0;
  if (c->hsdp) pd.hsdp.enabled = true, pd.hsdp.shard_size = -1, pd.hsdp.threshold_kb = 0, pd.hsdp.level = c->level;
  run_init_knobs(&R, &n, c->devices, SK_F64, decaying(), 4, &pd);
  cr_assert_eq(R.plan.nfallbacks, 0, "%s: %d strategies fell back", c->what, R.plan.nfallbacks);
  run_world(&R);
  expect_all_ok(&R, c->what);
  errs m = against_trainer(&R, TOL64, c->what); /* every parameter, aux.weight (or u) included */
  cr_log_info("%s: losses within %.3g, parameters within %.3g of one device", c->what, m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(dead_branches, devices_train_like_one, .timeout = DEAD_TIMEOUT) {
  static const dcase cases[] = {
      {"1 device", 1, 0, 0, false, false, SK_HSDP_LEVEL1},
      {"2 devices", 2, 0, 0, false, false, SK_HSDP_LEVEL1},
      {"8 devices", 8, 0, 0, false, false, SK_HSDP_LEVEL1},
      {"8 devices, the head reads u", 8, 0, 0, false, true, SK_HSDP_LEVEL1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) dead_case(&cases[i]);
}

Test(dead_branches, pipeline_trains_like_one, .timeout = DEAD_TIMEOUT) {
  static const dcase cases[] = {
      {"8 devices, 2 stages, 2 micro-batches", 8, 2, 2, false, false, SK_HSDP_LEVEL1},
      {"8 devices, 2 stages, 2 micro-batches, hsdp level2", 8, 2, 2, true, false, SK_HSDP_LEVEL2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) dead_case(&cases[i]);
}

Test(dead_branches, optimizer_parallel_trains_like_one, .timeout = DEAD_TIMEOUT) {
  static const dcase cases[] = {
      {"8 devices, hsdp level1", 8, 0, 0, true, false, SK_HSDP_LEVEL1},
      {"8 devices, hsdp level3", 8, 0, 0, true, false, SK_HSDP_LEVEL3},
      {"8 devices, hsdp level1, the head reads u", 8, 0, 0, true, true, SK_HSDP_LEVEL1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) dead_case(&cases[i]);
}
