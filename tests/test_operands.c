/* Scalar operands and frozen parameters (issue 37).

   1. A number operand (MindSpore's ops.Mul()(x, 0.5)) is a constant: a rank-0 tensor
      (sk_graph_add_const) whose strategy tuple is (), replicated on every device, never given a
      gradient. The kernels compute with it in either position, forward and backward: the
      trainer's gradients of p through Mul(p, 0.5), Sub(1, p), Div(p, 4), Div(2, p) and
      Pow(p, 3) are the closed forms.
   2. A frozen parameter (sk_graph_set_requires_grad false; MindSpore's requires_grad=False):
      no gradient, no optimizer state, no Mirror, not updated, its values exactly the initial
      ones after training; the rule sees it as no parameter (desc.params, MindSpore's
      is_parameter). The memory counts no gradient or optimizer state for it.
   3. A network with both trains on 1 and 8 devices, a pipeline (2 stages of 4, 2 micro-batches)
      and optimizer parallel like the single-device trainer (f64, TOL64 = 1e-12: losses,
      parameters, evaluation), the frozen ones keeping their initial values bit for bit.

   Device threads never assert (tests/runtime_harness.h records, the test's thread asserts);
   every threaded test has a timeout. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "runtime_harness.h"

#define OPERANDS_TIMEOUT (4 * RT_TIMEOUT)

static int constant_of(net *n, const char *name, double value) {
  int id = -1;
  OK(sk_graph_add_const(&n->g, name, SK_F32, value, &id, E));
  return id;
}

static void freeze(net *n, int t) { OK(sk_graph_set_requires_grad(&n->g, t, false, E)); }

/* x [16, 16] -> fc1 (w1) -> Mul(., 0.5) -> Mul(., mask) -> Add(., 1.0) -> ReLU -> Add(pos, .)
   -> z (u) -> the fused loss; mask [16] and pos [16] frozen. On N >= 2 devices the tutorial's
   strategies, () for each number. */
static void build_operands(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 16), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w1 = add_param(n, "w1", 2, SH2(16, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int mask = add_param(n, "mask", 1, SH1(16), SK_INIT_UNIFORM, 1);
  int pos = add_param(n, "pos", 1, SH1(16), SK_INIT_NORMAL, 0.5);
  int u = add_param(n, "u", 2, SH2(16, 4), SK_INIT_XAVIER_UNIFORM, 0);
  freeze(n, mask), freeze(n, pos);
  sk_graph_op fc1 = OP("fc1", SK_OP_MATMUL, x, w1);
  if (N >= 2) SHARD(fc1, 0, 2, N / 2), SHARD(fc1, 1, N / 2, 1);
  int h = add_op(n, fc1);
  sk_graph_op half = OP("half", SK_OP_MUL, h, constant_of(n, "half:in1", 0.5));
  if (N >= 2) SHARD(half, 0, 2, N / 2), half.desc.strategy_len[1] = 0; /* (): the number's tuple */
  sk_graph_op masked = OP("masked", SK_OP_MUL, add_op(n, half), mask);
  if (N >= 2) SHARD(masked, 0, 2, N / 2), SHARD(masked, 1, N / 2);
  sk_graph_op shift = OP("shift", SK_OP_ADD, add_op(n, masked), constant_of(n, "shift:in1", 1.0));
  if (N >= 2) SHARD(shift, 0, N, 1);
  sk_graph_op relu = OP("relu", SK_OP_RELU, add_op(n, shift));
  if (N >= 2) SHARD(relu, 0, N / 2, 2);
  sk_graph_op placed = OP("placed", SK_OP_ADD, pos, add_op(n, relu));
  if (N >= 2) SHARD(placed, 0, 1), SHARD(placed, 1, N, 1);
  int z = add_op(n, OP("z", SK_OP_MATMUL, add_op(n, placed), u));
  int loss = add_op(n, OP("loss", SK_OP_SOFTMAX_CE, z, y));
  OK(sk_graph_set_loss(&n->g, loss, E));
  OK(sk_graph_set_eval(&n->g, z, y, E));
}

static int named(const sk_graph *g, const char *name) {
  int t = sk_graph_find(g, name);
  cr_assert_geq(t, 0, "no tensor '%s'", name);
  return t;
}

static int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator '%s'", name);
  return -1;
}

/* ---- 1. the graph ----------------------------------------------------------------------------- */

Test(operands, constants_and_requires_grad_refusals) {
  static net n;
  build_operands(&n, 1);
  sk_graph *g = &n.g;
  sk_error e;
  int id = -1, before = g->ntensors;
  cr_expect_eq(sk_graph_add_const(g, "k", SK_I32, 1, &id, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "constant 'k' must be a float tensor"), "%s", e.msg);
  cr_expect_eq(sk_graph_add_const(g, "k", SK_F32, NAN, &id, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "constant 'k' is not a finite number"), "%s", e.msg);
  cr_expect_eq(sk_graph_add_const(g, "half:in1", SK_F32, 2, &id, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "a tensor of that name exists"), "%s", e.msg);
  cr_expect_eq(g->ntensors, before, "refusals leave the graph as it was");
  cr_expect_eq(sk_graph_set_requires_grad(g, named(g, "x"), false, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "is not a parameter"), "%s", e.msg);
  cr_expect_eq(sk_graph_set_requires_grad(g, named(g, "half:in1"), false, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_graph_set_requires_grad(g, g->ntensors, false, &e), SK_ERR_INVALID_ARGUMENT);
  int k = named(g, "half:in1");
  cr_expect(g->tensors[k].role == SK_TENSOR_CONST && g->tensors[k].ndims == 0 && g->tensors[k].value == 0.5);
  cr_expect_str_eq(sk_tensor_role_name(SK_TENSOR_CONST), "constant");
  cr_expect(sk_graph_trainable(g, named(g, "w1")) && !sk_graph_trainable(g, named(g, "mask")) && !sk_graph_trainable(g, k));
  OK(sk_graph_set_requires_grad(g, named(g, "mask"), true, E)); /* and back */
  cr_expect(sk_graph_trainable(g, named(g, "mask")));
  sk_graph_free(g);
}

/* The network of one micro-batch keeps the constants and the frozen flags. */
Test(operands, micro_graph_keeps_constants_and_frozen) {
  static net n;
  sk_graph m;
  build_operands(&n, 1);
  OK(sk_graph_micro(&n.g, 2, &m, E));
  cr_expect_eq(m.ntensors, n.g.ntensors);
  cr_expect(m.tensors[named(&m, "shift:in1")].role == SK_TENSOR_CONST && m.tensors[named(&m, "shift:in1")].value == 1.0);
  cr_expect(m.tensors[named(&m, "pos")].frozen && !m.tensors[named(&m, "u")].frozen);
  sk_graph_free(&m), sk_graph_free(&n.g);
}

Test(operands, grad_flow_skips_constants_and_frozen_parameters) {
  static net n;
  build_operands(&n, 1);
  const sk_graph *g = &n.g;
  bool needs[64] = {false};
  cr_assert_lt(g->ntensors, 64);
  sk_exec_grad_flow(g, needs);
  cr_expect(!needs[named(g, "half:in1")] && !needs[named(g, "shift:in1")], "a constant takes no gradient");
  cr_expect(!needs[named(g, "mask")] && !needs[named(g, "pos")], "a frozen parameter takes none");
  cr_expect(needs[named(g, "w1")] && needs[named(g, "u")] && needs[named(g, "half")] && needs[named(g, "placed")]);
  sk_graph_free(&n.g);
}

/* ---- 2. the kernels: the closed-form gradients through each number operand ------------------ */

typedef struct scalar_case {
  const char *what;
  sk_op_kind kind;
  double number;
  bool number_first;
  double (*fwd)(double p, double c);
  double (*dp)(double p, double c);
} scalar_case;

static double mul_f(double p, double c) { return p * c; }
static double mul_d(double p, double c) { return (void)p, c; }
static double rsub_f(double p, double c) { return c - p; }
static double rsub_d(double p, double c) { return (void)p, (void)c, -1.0; }
static double div_f(double p, double c) { return p / c; }
static double div_d(double p, double c) { return (void)p, 1.0 / c; }
static double rdiv_f(double p, double c) { return c / p; }
static double rdiv_d(double p, double c) { return -c / (p * p); }
static double pow_f(double p, double c) { return pow(p, c); }
static double pow_d(double p, double c) { return c * pow(p, c - 1); }

/* loss = ReduceSum(op(p, c)) on one device in f64: the loss and p's gradient are the closed
   forms, the constant has no gradient buffer, and a step moves p by lr times that gradient. */
static void scalar_gradient(const scalar_case *c) {
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int p = add_param(&n, "p", 1, SH1(6), SK_INIT_UNIFORM, 1), k = constant_of(&n, "c", c->number);
  sk_graph_op op = c->number_first ? OP("f", c->kind, k, p) : OP("f", c->kind, p, k);
  int loss = add_op(&n, OP("loss", SK_OP_REDUCE_SUM, add_op(&n, op)));
  OK(sk_graph_set_loss(&n.g, loss, E));
  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = SK_F64, td.optim = sgd(0.125), td.seed = 3;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&n.g, &td, &t, E));
  double v[6], want = 0, loss_v = 0;
  memcpy(v, sk_trainer_values(t, p), sizeof v);
  for (int i = 0; i < 6; i++) v[i] = fabs(v[i]) + 0.5, want += c->fwd(v[i], c->number); /* positive: Pow, Div by p */
  memcpy(sk_trainer_values(t, p), v, sizeof v);
  cr_assert_eq(*(const double *)sk_trainer_values(t, k), c->number, "%s: the constant's buffer", c->what);
  OK(sk_trainer_forward(t, &loss_v, E));
  cr_expect(fabs(loss_v - want) <= 1e-14 * (1 + fabs(want)), "%s: loss %.17g, want %.17g", c->what, loss_v, want);
  OK(sk_trainer_backward(t, E));
  cr_expect_null(sk_trainer_grad(t, k), "%s: a constant has no gradient", c->what);
  const double *gp = (const double *)sk_trainer_grad(t, p);
  for (int i = 0; i < 6; i++)
    cr_expect(fabs(gp[i] - c->dp(v[i], c->number)) <= 1e-14 * (1 + fabs(gp[i])), "%s: dp[%d] %.17g, want %.17g", c->what,
              i, gp[i], c->dp(v[i], c->number));
  OK(sk_trainer_update(t, E));
  const double *after = (const double *)sk_trainer_values(t, p);
  for (int i = 0; i < 6; i++)
    cr_expect(fabs(after[i] - (v[i] - 0.125 * c->dp(v[i], c->number))) <= 1e-14, "%s: p[%d] after the step", c->what, i);
  cr_expect_eq(*(const double *)sk_trainer_values(t, k), c->number, "%s: the constant is not updated", c->what);
  sk_trainer_destroy(t);
  sk_graph_free(&n.g);
}

Test(operands, kernels_compute_number_operands_in_either_position) {
  static const scalar_case cases[] = {
      {"Mul(p, 0.5)", SK_OP_MUL, 0.5, false, mul_f, mul_d},
      {"Mul(0.5, p)", SK_OP_MUL, 0.5, true, mul_f, mul_d},
      {"Sub(1, p)", SK_OP_SUB, 1, true, rsub_f, rsub_d},
      {"Div(p, 4)", SK_OP_DIV, 4, false, div_f, div_d},
      {"Div(2, p)", SK_OP_DIV, 2, true, rdiv_f, rdiv_d},
      {"Pow(p, 3)", SK_OP_POW, 3, false, pow_f, pow_d},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) scalar_gradient(&cases[i]);
}

/* ---- 3. the plan ------------------------------------------------------------------------------ */

Test(operands, plan_has_no_mirror_for_frozen_parameters_and_scalars_replicated) {
  static net n;
  build_operands(&n, 8);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = 8;
  sk_parallel_plan p;
  OK(sk_parallel_compile(&n.g, &pd, &p, E));
  cr_assert_eq(p.nfallbacks, 0);
  const sk_graph *g = p.graph;
  int masked = op_named(g, "masked"), placed = op_named(g, "placed"), half = op_named(g, "half");
  int fc1 = op_named(g, "fc1");
  cr_expect_eq(p.ops[masked].desc.params, 0u, "mask is no parameter to the rule (MindSpore's is_parameter)");
  cr_expect_eq(p.ops[placed].desc.params, 0u);
  cr_expect_eq(p.ops[fc1].desc.params, 2u, "w1 is");
  int mirrors = 0, mirrors_frozen = 0;
  for (int i = 0; i < p.nsteps; i++) {
    if (p.steps[i].kind != SK_PSTEP_MIRROR) continue;
    int t = g->ops[p.steps[i].op].inputs[p.steps[i].slot];
    mirrors++, mirrors_frozen += t == named(g, "mask") || t == named(g, "pos");
  }
  cr_expect_eq(mirrors_frozen, 0, "no Mirror for a frozen parameter");
  cr_expect_eq(mirrors, 2, "w1's and u's Mirrors");
  /* mask is cut by fc1's 4 and read on 2 replicas: a trainable one would have a Mirror over them */
  cr_expect_eq(p.ops[masked].plan.grad[1].kind, SK_COLL_NONE);
  cr_expect_eq(p.ops[half].plan.in[1].ndims, 0, "the number: a scalar, replicated");
  cr_expect(!p.ops[half].moved[1] && !p.tensors[named(g, "half:in1")].needs_grad);
  static char text[16384];
  size_t len = sk_parallel_format_program(&p, 0, text, sizeof text);
  cr_assert(len > 0 && len < sizeof text);
  for (const char *l = text; (l = strstr(l, "Mirror")) != NULL; l++) {
    const char *end = strchr(l, '\n');
    int w = end ? (int)(end - l) : (int)strlen(l);
    cr_expect(!strstr(l, "masked") || strstr(l, "masked") > l + w, "a Mirror of masked: %.*s", w, l);
    cr_expect(!strstr(l, "placed") || strstr(l, "placed") > l + w, "a Mirror of placed: %.*s", w, l);
  }
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}

/* ---- 4. training: frozen values kept, memory, N devices like one ----------------------------- */

/* The initial values of parameter t for seed 7, in f64 (what the harness's runs draw). */
static double *initial_values(const sk_graph *g, int t) {
  void **vals = (void **)calloc((size_t)g->ntensors, sizeof *vals);
  cr_assert_not_null(vals);
  for (int i = 0; i < g->ntensors; i++)
    if (g->tensors[i].role == SK_TENSOR_PARAM) vals[i] = calloc((size_t)sk_graph_numel(g, i), sizeof(double));
  OK(sk_graph_init_params(g, 7, SK_F64, vals, E));
  double *out = (double *)vals[t];
  for (int i = 0; i < g->ntensors; i++)
    if (i != t) free(vals[i]);
  free(vals);
  return out;
}

/* Every device's gathered frozen parameters equal their initial values bit for bit. */
static void expect_frozen_kept(const run *R, const char *what) {
  const sk_graph *g = &R->n->g;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_PARAM || sk_graph_trainable(g, t)) continue;
    double *init = initial_values(g, t);
    for (int d = 0; d < R->ndev; d++)
      if (holds_param(R, d, t))
        cr_expect(!memcmp(R->dev[d].params + R->param_off[t], init, (size_t)sk_graph_numel(g, t) * sizeof(double)),
                  "%s: device %d: '%s' moved", what, d, g->tensors[t].name);
    free(init);
  }
}

typedef struct ocase {
  const char *what;
  int devices, stages, micro;
  bool hsdp;
  sk_hsdp_level level;
} ocase;

static void operands_case(const ocase *c) {
  static net n;
  static run R;
  build_operands(&n, c->devices / (c->stages ? c->stages : 1));
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = c->stages, pd.pipeline.micro = c->micro, pd.output_broadcast = c->stages > 0;
  if (c->hsdp) pd.hsdp.enabled = true, pd.hsdp.shard_size = -1, pd.hsdp.threshold_kb = 0, pd.hsdp.level = c->level;
  run_init_knobs(&R, &n, c->devices, SK_F64, adam(0.01), 4, &pd);
  cr_assert_eq(R.plan.nfallbacks, 0, "%s: %d strategies fell back", c->what, R.plan.nfallbacks);
  run_world(&R);
  expect_all_ok(&R, c->what);
  expect_frozen_kept(&R, c->what);
  errs m = against_trainer(&R, TOL64, c->what);
  cr_log_info("%s: losses within %.3g, parameters within %.3g of one device", c->what, m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(operands, devices_train_like_one, .timeout = OPERANDS_TIMEOUT) {
  static const ocase cases[] = {
      {"1 device", 1, 0, 0, false, SK_HSDP_LEVEL1},
      {"8 devices", 8, 0, 0, false, SK_HSDP_LEVEL1},
      {"8 devices, 2 stages, 2 micro-batches", 8, 2, 2, false, SK_HSDP_LEVEL1},
      {"8 devices, hsdp level1", 8, 0, 0, true, SK_HSDP_LEVEL1},
      {"8 devices, 2 stages, 2 micro-batches, hsdp level2", 8, 2, 2, true, SK_HSDP_LEVEL2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) operands_case(&cases[i]);
}

/* The trainer keeps no gradient for a frozen parameter, and Adam's two states only for the
   trainable ones: the runtime's optimizer-state bytes on each of 8 devices are exactly w1's
   and u's slices twice; its gradients hold none of the frozen ones' either. */
Test(operands, no_gradient_or_optimizer_state_for_frozen, .timeout = OPERANDS_TIMEOUT) {
  static net n;
  static run R;
  build_operands(&n, 8);
  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = SK_F64, td.optim = adam(0.01);
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&n.g, &td, &t, E));
  cr_expect_null(sk_trainer_grad(t, named(&n.g, "mask")));
  cr_expect_null(sk_trainer_grad(t, named(&n.g, "pos")));
  cr_expect_not_null(sk_trainer_grad(t, named(&n.g, "w1")));
  sk_trainer_destroy(t);
  run_init(&R, &n, 8, SK_F64, adam(0.01), 1);
  run_world(&R);
  expect_all_ok(&R, "8 devices, adam");
  int64_t trained = sk_parallel_slice_count(&R.plan, named(&n.g, "w1")) + sk_parallel_slice_count(&R.plan, named(&n.g, "u"));
  int64_t frozen = sk_parallel_slice_count(&R.plan, named(&n.g, "mask")) + sk_parallel_slice_count(&R.plan, named(&n.g, "pos"));
  for (int d = 0; d < 8; d++) {
    cr_expect_eq(R.dev[d].mem_created.optimizer_state, (uint64_t)(2 * trained * 8), "device %d: %llu bytes of state", d,
                 (unsigned long long)R.dev[d].mem_created.optimizer_state);
    cr_expect_eq(R.dev[d].mem_created.parameters, (uint64_t)((trained + frozen) * 8), "device %d: parameters", d);
  }
  run_free(&R);
  sk_graph_free(&n.g);
}
