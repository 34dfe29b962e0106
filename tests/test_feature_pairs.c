/* Every pair of features, trained together on the tutorial network and checked against one
   device, as `sk-sim --check` checks a run (examples/loss_check.h); and what a pipeline adds to
   local norms and parameter_broadcast.

   THE NETWORK: MindSpore's operator-parallel tutorial (examples/nets/operator_parallel.json:
   Flatten, MatMul 784x512, ReLU, MatMul 512x512, ReLU, MatMul 512x10, SoftmaxCrossEntropy; SGD
   0.01), taken at a batch of 8 (sk_graph_micro of its 32) to keep the suite fast, with its
   strategies cut for a stage of 4 devices: fc1 ((2, 2), (2, 1)), relu1 (4, 1), fc2 ((1, 4),
   (4, 1)), relu2 (4, 1) -- every layer change still moves, as on the tutorial's 8 cards. Runs
   take 4 devices, or 8 in 2 pipeline stages of 4.

   THE FEATURES: pipeline (2 stages, micro_size 2, 1f1b), hsdp level1 / level2 / level3 (every
   data-parallel replica group sharded: threshold 0), recompute (relu1 and relu2 flagged),
   grad_accumulation_step 2, parameter_broadcast (every device draws from seed + its world rank,
   then the broadcast; the reference starts from the broadcast model), local norms
   (dump_local_norm with device_local_norm, the file checked line by line), each search mode
   (sharding_propagation, recursive_programming, exhaustive: sk_parallel_mode's three; shardkit
   has no dynamic_programming), fp32_communication and gradients_mean. Two values of one knob (two
   hsdp levels, two search modes) are not a pair: one run cannot have both.

   1. Every other pair trains 4 steps and passes the loss check: every device reports the same
      loss, and the relative difference to the single-device trainer's (same seed, data,
      optimizer, accumulation and gradient factors) is within tolerance over the 4 steps; in
      f64 the final parameters too. f64 everywhere except the pairs with fp32_communication,
      which acts only where collectives could travel in 16 bits: those run bf16 against the bf16
      trainer.
   2. The pairs MindSpore refuses are refused by name, SK_ERR_INVALID_ARGUMENT from
      sk_parallel_check and sk_parallel_compile, the message naming both features: pipeline with
      grad_accumulation_step (MindSpore master refuses grad_accumulation_step above 1 in
      mindspore/python/mindspore/parallel/_auto_parallel_context.py,
      _AutoParallelContext.set_grad_accumulation_step, and under a pipeline accumulates by
      micro_size alone: mindspore/ccsrc/frontend/parallel/parallel_preprocessor.cc,
      MicroBatchPreProcess; sk_parallel.h says more).
   3. Local norms under a pipeline: each device reports the parameters its stage holds, and their
      norms are those the same stage's layouts give without a pipeline (the micro-batches'
      gradients sum to the batch's).
   4. parameter_broadcast under a pipeline broadcasts within each stage from the stage's initial
      rank (MindSpore's parameter_broadcast, mindspore/python/mindspore/parallel/
      parameter_broadcast.py, called on each stage with its initial_rank): fc3.weight, replicated
      over stage 1's ranks 4..7 and the first of its group in name order there, takes rank 4's
      draw; the run then trains like one device started from the broadcast model. A cur_rank
      that is not the device's fails on every device of every stage.

   71 pairs train, 1 is refused (13 features; the 6 pairs of one knob's values are no pairs).

   TOLERANCE: f64 1e-9, loss_check_tolerance(SK_F64), sk-sim's: N devices and one sum the same
   products in other orders, so f64 runs differ by rounding alone (measured at most 2e-16 here,
   the losses relative to the reference's, the parameters relative to 1 + |value|); 1e-9 leaves
   six orders of margin and is still far below what a wrong factor, a lost micro-batch or a stale
   replica shows (1e-3 and more). bf16: loss_check_tolerance(SK_BF16), 3e-2, the drift sk-sim
   allows 16-bit storage (a different order of a sum rounds a value one bf16 step apart, which
   later steps carry on; measured 3.4e-3, with the pipeline, and 0 where the order is the
   trainer's).

   Device threads never assert (tests/runtime_harness.h records, the test's thread asserts);
   every test has a timeout and every world a short one. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, close */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardkit.h"
#include "sk_json.h"
#include "runtime_harness.h"
#include "../examples/loss_check.h"

#define PAIRS_TIMEOUT (6 * RT_TIMEOUT)
#define PAIR_STEPS 4
#define STAGE_DEVICES 4

/* ---- the network ---------------------------------------------------------------------------- */

static int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("the tutorial network has no operator '%s'", name);
  return -1;
}

/* The tutorial network at a batch of 8, cut for 4 devices (see THE NETWORK). */
static void load_tutorial(net *n) {
  sk_graph full;
  sk_graph_init(&full);
  OK(sk_json_load_network("examples/nets/operator_parallel.json", &full, E));
  OK(sk_graph_micro(&full, 4, &n->g, E));
  sk_graph_free(&full);
  n->nin = 0;
  for (int t = 0; t < n->g.ntensors; t++)
    if (n->g.tensors[t].role == SK_TENSOR_INPUT) n->range[n->nin++] = n->g.tensors[t].dtype == SK_I32 ? 10 : 0;
  sk_graph_op *fc1 = &n->g.ops[op_named(&n->g, "fc1")], *fc2 = &n->g.ops[op_named(&n->g, "fc2")];
  SHARD(*fc1, 0, 2, 2), SHARD(*fc1, 1, 2, 1);
  SHARD(*fc2, 0, 1, 4), SHARD(*fc2, 1, 4, 1);
  SHARD(n->g.ops[op_named(&n->g, "relu2")], 0, 4, 1);
}

/* ---- the features ----------------------------------------------------------------------------- */

typedef enum feature {
  F_PIPELINE = 0, F_HSDP1, F_HSDP2, F_HSDP3, F_RECOMPUTE, F_ACCUMULATION, F_BROADCAST, F_LOCAL_NORM,
  F_PROPAGATION, F_RECURSIVE, F_EXHAUSTIVE, F_FP32_COMM, F_GRADIENTS_MEAN, F_COUNT
} feature;

typedef struct feature_info {
  const char *name; /* in the test's messages */
  const char *word; /* how the library's messages name it */
  int knob;         /* features of one knob (its values) make no pair */
} feature_info;

static const feature_info FEATURES[F_COUNT] = {
    {"pipeline", "pipeline", 0},
    {"hsdp level1", "hsdp", 1},
    {"hsdp level2", "hsdp", 1},
    {"hsdp level3", "hsdp", 1},
    {"recompute", "recompute", 2},
    {"grad_accumulation_step 2", "grad_accumulation_step", 3},
    {"parameter_broadcast", "parameter_broadcast", 4},
    {"local norms", "local norm", 5},
    {"sharding_propagation", "sharding_propagation", 6},
    {"recursive_programming", "recursive_programming", 6},
    {"exhaustive", "exhaustive", 6},
    {"fp32_communication (bf16)", "fp32_communication", 7},
    {"gradients_mean", "gradients_mean", 8},
};

/* The pairs MindSpore refuses (see 2.). */
static bool refused(feature a, feature b) {
  return (a == F_PIPELINE && b == F_ACCUMULATION) || (a == F_ACCUMULATION && b == F_PIPELINE);
}

/* A run's configuration: the compiler's knobs and what the run does around them. */
typedef struct config {
  sk_autoparallel pd;
  int ndev;
  sk_dtype dtype;
  bool recompute, broadcast, norms;
} config;

static void apply(feature f, config *c, const char *norm_path) {
  static const sk_hsdp_level levels[3] = {SK_HSDP_LEVEL1, SK_HSDP_LEVEL2, SK_HSDP_LEVEL3};
  static const sk_parallel_mode modes[3] = {SK_PARALLEL_SHARDING_PROPAGATION, SK_PARALLEL_RECURSIVE_PROGRAMMING,
                                            SK_PARALLEL_EXHAUSTIVE};
  switch (f) {
    case F_PIPELINE:
      c->pd.pipeline.stages = 2, c->pd.pipeline.micro = 2, c->pd.output_broadcast = true;
      c->ndev = 2 * STAGE_DEVICES;
      break;
    case F_HSDP1: case F_HSDP2: case F_HSDP3:
      c->pd.hsdp = (sk_hsdp)SK_HSDP_DEFAULTS;
      c->pd.hsdp.threshold_kb = 0, c->pd.hsdp.level = levels[f - F_HSDP1];
      break;
    case F_RECOMPUTE: c->recompute = true; break;
    case F_ACCUMULATION: c->pd.grad_accumulation_step = 2; break;
    case F_BROADCAST: c->broadcast = true; break;
    case F_LOCAL_NORM: c->pd.dump_local_norm = norm_path, c->pd.device_local_norm = true, c->norms = true; break;
    case F_PROPAGATION: case F_RECURSIVE: case F_EXHAUSTIVE: c->pd.mode = modes[f - F_PROPAGATION]; break;
    case F_FP32_COMM: c->pd.fp32_communication = true, c->dtype = SK_BF16; break;
    case F_GRADIENTS_MEAN: c->pd.gradients_mean = true; break;
    default: cr_assert_fail("feature %d", (int)f);
  }
}

static config config_of(feature a, feature b, const char *norm_path) {
  config c;
  memset(&c, 0, sizeof c);
  c.ndev = STAGE_DEVICES, c.dtype = SK_F64;
  apply(a, &c, norm_path), apply(b, &c, norm_path);
  return c;
}

static void flag_recompute(net *n, bool on) {
  n->g.ops[op_named(&n->g, "relu1")].recompute = on;
  n->g.ops[op_named(&n->g, "relu2")].recompute = on;
}

/* ---- the check ------------------------------------------------------------------------------- */

/* A single-device run R was compared with. Runs of one test share the network, seed and data,
   so a reference is decided by the dtype, the accumulation and the gradient factors, unless it
   starts from a broadcast model: pairs alike share one trainer's run (half the pairs of a test;
   the suite's time is mostly training). */
typedef struct reference_run {
  sk_dtype dtype;
  int accum;
  double *scales; /* sk_parallel_grad_scales */
  bool broadcast; /* never shared */
  double loss[MAXSTEPS];
  sk_trainer *t; /* after the steps */
} reference_run;

#define MAX_REFERENCES 16
static reference_run references[MAX_REFERENCES]; /* this test's (each test is a process of its own) */
static int nreferences;

static void forget_references(void) {
  for (int i = 0; i < nreferences; i++) sk_trainer_destroy(references[i].t), free(references[i].scales);
  nreferences = 0;
}

/* The single-device trainer (the harness's trainer_like) on R's data, trained now or earlier. */
static const reference_run *reference(const run *R, const char *what) {
  size_t nscales = (size_t)R->n->g.nops * SK_OP_MAX_INPUTS;
  reference_run key = {R->plan.desc.dtype, R->plan.desc.grad_accumulation_step, (double *)calloc(nscales + 1, sizeof(double)),
                       R->broadcast, {0}, NULL};
  cr_assert_not_null(key.scales);
  sk_parallel_grad_scales(&R->plan, key.scales);
  for (int i = 0; i < nreferences; i++) {
    const reference_run *c = &references[i];
    if (!c->broadcast && !key.broadcast && c->dtype == key.dtype && c->accum == key.accum &&
        !memcmp(c->scales, key.scales, nscales * sizeof(double)))
      return free(key.scales), c;
  }
  cr_assert_lt(nreferences, MAX_REFERENCES);
  key.t = trainer_like(R, what);
  for (int s = 0; s < R->nsteps; s++) {
    for (int i = 0; i < R->n->nin; i++) OK(sk_trainer_feed(key.t, R->in_t[i], R->in_dt[i], R->data[s][i], (size_t)R->in_n[i], E));
    OK(sk_trainer_step(key.t, &key.loss[s], E));
  }
  references[nreferences] = key;
  return &references[nreferences++];
}

/* f64: every parameter (from the first device holding it) within tol of the trainer's. */
static double expect_parameters(const run *R, sk_trainer *t, double tol, const char *what) {
  const sk_graph *g = &R->n->g;
  double worst = 0;
  for (int p = 0; p < g->ntensors; p++) {
    if (g->tensors[p].role != SK_TENSOR_PARAM) continue;
    const double *mine = (const double *)(R->dev[first_holder(R, p)].params + R->param_off[p]);
    const double *want = (const double *)sk_trainer_values(t, p);
    int64_t at = 0; /* the element furthest off, asserted once (the parameters are large) */
    for (int64_t j = 0; j < sk_graph_numel(g, p); j++)
      if (!(rel(mine[j], want[j]) <= rel(mine[at], want[at]))) at = j; /* a NaN too */
    double x = rel(mine[at], want[at]);
    cr_assert(x <= tol, "%s: after %d steps '%s'[%lld] is %.17g, one device %.17g", what, R->nsteps, g->tensors[p].name,
              (long long)at, mine[at], want[at]);
    worst = fmax(worst, x);
  }
  return worst;
}

/* The loss check of sk-sim --check: every device's losses equal device 0's, which pass
   loss_check against the trainer's. Returns the largest difference (losses and, in f64,
   parameters). */
static double expect_like_one_device(const run *R, const char *what) {
  double tol = loss_check_tolerance(R->plan.desc.dtype);
  for (int d = 1; d < R->ndev; d++)
    cr_assert(memcmp(R->dev[d].loss, R->dev[0].loss, sizeof(double) * (size_t)R->nsteps) == 0,
              "%s: device %d reports other losses than device 0", what, d);
  const reference_run *ref = reference(R, what);
  loss_verdict v = loss_check(R->dev[0].loss, R->nsteps, ref->loss, R->nsteps, tol);
  cr_assert(v.passed && v.compared == R->nsteps, "%s on %d devices, %s: check FAILED: max relative loss difference %.3g (tolerance %.0e)",
            what, R->ndev, sk_dtype_name(R->plan.desc.dtype), v.worst, tol);
  double worst = v.worst;
  if (R->plan.desc.dtype == SK_F64) worst = fmax(worst, expect_parameters(R, ref->t, tol, what));
  return worst;
}

/* ---- local norms' lines ---------------------------------------------------------------------- */

typedef struct norm_line {
  long long step;
  int dev;
  char name[64];
  double norm;
} norm_line;

/* Every line of a local-norm file; *n lines. */
static norm_line *read_norms(const char *path, int *n) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  int cap = 64;
  norm_line *v = (norm_line *)malloc(sizeof *v * (size_t)cap);
  cr_assert_not_null(v);
  *n = 0;
  for (;;) {
    if (*n == cap) cr_assert_not_null(v = (norm_line *)realloc(v, sizeof *v * (size_t)(cap *= 2)));
    norm_line *l = &v[*n];
    int got = fscanf(f, "%lld %d %63s %lg", &l->step, &l->dev, l->name, &l->norm);
    if (got == EOF) break;
    cr_assert_eq(got, 4, "%s: line %d is not 'step device parameter norm'", path, *n + 1);
    (*n)++;
  }
  fclose(f);
  return v;
}

/* The file holds, per update (every grad_accumulation_step steps, numbered by the step it ends),
   for every device in order, a line per parameter it holds (its stage's under a pipeline) in
   graph order, then its device line: the norm over those lines. */
static void expect_norm_lines(const run *R, const char *path, const char *what) {
  const sk_graph *g = &R->n->g;
  int n = 0, at = 0, accum = R->plan.desc.grad_accumulation_step > 1 ? R->plan.desc.grad_accumulation_step : 1;
  norm_line *v = read_norms(path, &n);
  for (int step = accum; step <= R->nsteps; step += accum)
    for (int d = 0; d < R->ndev; d++) {
      double sq = 0;
      for (int p = 0; p <= g->ntensors; p++) {
        bool device_line = p == g->ntensors;
        if (!device_line && (g->tensors[p].role != SK_TENSOR_PARAM || !holds_param(R, d, p))) continue;
        cr_assert_lt(at, n, "%s: the norms end at line %d (step %d, device %d)", what, at + 1, step, d);
        const norm_line *l = &v[at++];
        const char *want = device_line ? "device" : g->tensors[p].name;
        cr_assert(l->step == step && l->dev == d && !strcmp(l->name, want),
                  "%s: line %d is '%lld %d %s', want step %d, device %d, '%s'", what, at, l->step, l->dev, l->name, step, d, want);
        cr_assert(isfinite(l->norm) && l->norm >= 0, "%s: line %d: norm %g", what, at, l->norm);
        if (device_line)
          cr_assert(fabs(l->norm - sqrt(sq)) <= 1e-7 * (1 + l->norm), "%s: device %d's line %.9g, its parameters' %.9g", what, d,
                    l->norm, sqrt(sq));
        else sq += l->norm * l->norm;
      }
    }
  cr_assert_eq(at, n, "%s: %d lines past the last update", what, n - at);
  free(v);
}

/* ---- 1 and 2: every pair --------------------------------------------------------------------- */

static void expect_refused(const net *n, const config *c, feature a, feature b, const char *what) {
  sk_autoparallel pd = c->pd;
  pd.ndevices = c->ndev;
  sk_parallel_plan p;
  sk_error e1, e2;
  memset(&e1, 0, sizeof e1), memset(&e2, 0, sizeof e2);
  sk_result r1 = sk_parallel_check(&pd, &e1), r2 = sk_parallel_compile(&n->g, &pd, &p, &e2);
  cr_assert(r1 == SK_ERR_INVALID_ARGUMENT && r2 == SK_ERR_INVALID_ARGUMENT, "%s: check %s, compile %s (%s)", what,
            sk_result_name(r1), sk_result_name(r2), e2.msg);
  for (int i = 0; i < 2; i++) {
    const char *msg = i ? e2.msg : e1.msg;
    cr_assert(strstr(msg, FEATURES[a].word) && strstr(msg, FEATURES[b].word), "%s: '%s' should name '%s' and '%s'", what, msg,
              FEATURES[a].word, FEATURES[b].word);
  }
}

/* One pair: refused by name, or trained and checked. Returns the largest difference. */
static double one_pair(net *n, feature a, feature b) {
  static run R;
  char what[128], path[] = "/tmp/sk_pairs_norms_XXXXXX";
  snprintf(what, sizeof what, "%s + %s", FEATURES[a].name, FEATURES[b].name);
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  config c = config_of(a, b, path);
  flag_recompute(n, c.recompute);
  double worst = 0;
  if (refused(a, b)) {
    expect_refused(n, &c, a, b, what);
  } else {
    run_init_knobs(&R, n, c.ndev, c.dtype, n->g.optim, PAIR_STEPS, &c.pd);
    R.broadcast = R.plan.desc.seed_by_rank = c.broadcast;
    run_world(&R);
    expect_all_ok(&R, what);
    worst = expect_like_one_device(&R, what);
    if (c.norms) expect_norm_lines(&R, path, what);
    run_free(&R);
  }
  remove(path);
  return worst;
}

/* Every pair (a, b) with b after a, b of another knob. */
static void pairs_with(feature a) {
  static net n;
  load_tutorial(&n);
  double worst64 = 0, worst16 = 0;
  int trained = 0, refusals = 0;
  for (int b = a + 1; b < F_COUNT; b++) {
    if (FEATURES[a].knob == FEATURES[b].knob) continue;
    double x = one_pair(&n, a, (feature)b);
    if (refused(a, (feature)b)) refusals++;
    else if (a == F_FP32_COMM || b == F_FP32_COMM) trained++, worst16 = fmax(worst16, x);
    else trained++, worst64 = fmax(worst64, x);
  }
  cr_log_info("%s with each later feature: %d pairs like one device over %d steps (f64 within %.3g, bf16 within %.3g), %d refused",
              FEATURES[a].name, trained, PAIR_STEPS, worst64, worst16, refusals);
  forget_references();
  sk_graph_free(&n.g);
}

Test(feature_pairs, pipeline, .timeout = PAIRS_TIMEOUT) { pairs_with(F_PIPELINE); }
Test(feature_pairs, hsdp_level1, .timeout = PAIRS_TIMEOUT) { pairs_with(F_HSDP1); }
Test(feature_pairs, hsdp_level2, .timeout = PAIRS_TIMEOUT) { pairs_with(F_HSDP2); }
Test(feature_pairs, hsdp_level3, .timeout = PAIRS_TIMEOUT) { pairs_with(F_HSDP3); }
Test(feature_pairs, recompute, .timeout = PAIRS_TIMEOUT) { pairs_with(F_RECOMPUTE); }
Test(feature_pairs, grad_accumulation, .timeout = PAIRS_TIMEOUT) { pairs_with(F_ACCUMULATION); }
Test(feature_pairs, parameter_broadcast, .timeout = PAIRS_TIMEOUT) { pairs_with(F_BROADCAST); }
Test(feature_pairs, local_norms, .timeout = PAIRS_TIMEOUT) { pairs_with(F_LOCAL_NORM); }
Test(feature_pairs, search_modes, .timeout = PAIRS_TIMEOUT) {
  pairs_with(F_PROPAGATION), pairs_with(F_RECURSIVE), pairs_with(F_EXHAUSTIVE);
}
Test(feature_pairs, fp32_communication, .timeout = PAIRS_TIMEOUT) { pairs_with(F_FP32_COMM); }

/* ---- 3. local norms under a pipeline ------------------------------------------------------------ */

/* The norm device d reports for parameter `name` in lines v (-1: none). */
static double norm_of(const norm_line *v, int n, long long step, int d, const char *name) {
  for (int i = 0; i < n; i++)
    if (v[i].step == step && v[i].dev == d && !strcmp(v[i].name, name)) return v[i].norm;
  return -1;
}

/* The local norms of a run of the tutorial on ndev devices with pd's knobs, in path. */
static norm_line *norms_of_run(net *n, sk_autoparallel pd, int ndev, int *count) {
  static run R;
  char path[] = "/tmp/sk_pairs_norms_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  pd.dump_local_norm = path, pd.device_local_norm = true;
  run_knobs(&R, n, ndev, SK_F64, n->g.optim, 3, &pd, "local norms");
  expect_norm_lines(&R, path, "local norms");
  norm_line *v = read_norms(path, count);
  remove(path);
  run_free(&R);
  return v;
}

/* 2 stages of 4 devices against 4 devices without a pipeline, each stage's layouts those of the
   4: device 4s + r reports for each parameter of stage s the norm device r reports without a
   pipeline, to the 9 digits written (the micro-batches' gradients sum to the batch's, in another
   order: f64 agrees to ~1e-16). */
Test(feature_pairs, pipeline_local_norms_are_each_stage_devices, .timeout = PAIRS_TIMEOUT) {
  static net n;
  load_tutorial(&n);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  int nflat = 0, npipe = 0, compared = 0;
  norm_line *flat = norms_of_run(&n, pd, STAGE_DEVICES, &nflat);
  pd.pipeline.stages = 2, pd.pipeline.micro = 2, pd.output_broadcast = true;
  norm_line *pipe = norms_of_run(&n, pd, 2 * STAGE_DEVICES, &npipe);
  bool stage_of[2] = {false, false};
  for (int i = 0; i < npipe; i++) {
    const norm_line *l = &pipe[i];
    if (!strcmp(l->name, "device")) continue;
    double want = norm_of(flat, nflat, l->step, l->dev % STAGE_DEVICES, l->name);
    cr_assert(fabs(l->norm - want) <= 1e-8 * (1 + want), "step %lld, device %d, '%s': %.9g under the pipeline, %.9g without",
              l->step, l->dev, l->name, l->norm, want);
    stage_of[l->dev / STAGE_DEVICES] = true, compared++;
  }
  cr_assert(stage_of[0] && stage_of[1], "both stages report parameters");
  cr_assert_lt(npipe, 2 * nflat, "each stage reports its own parameters only");
  cr_log_info("local norms, 2 stages x 4 devices: %d parameter lines equal to 4 devices' without a pipeline", compared);
  free(flat), free(pipe);
  sk_graph_free(&n.g);
}

/* ---- 4. parameter_broadcast under a pipeline ------------------------------------------------------ */

/* Parameter t as device `rank` draws it (seed + rank), f64. */
static double *draw_of(const sk_graph *g, int t, uint64_t seed) {
  void **all = (void **)calloc((size_t)g->ntensors + 1, sizeof *all);
  cr_assert_not_null(all);
  for (int p = 0; p < g->ntensors; p++)
    if (g->tensors[p].role == SK_TENSOR_PARAM) cr_assert_not_null(all[p] = malloc((size_t)sk_graph_numel(g, p) * 8));
  OK(sk_graph_init_params(g, seed, SK_F64, all, E));
  double *mine = (double *)all[t];
  all[t] = NULL;
  for (int p = 0; p < g->ntensors; p++) free(all[p]);
  free(all);
  return mine;
}

/* Every device draws from seed + its world rank; each stage broadcasts among its devices from its
   initial rank (stage 1: 4). fc3.weight is data parallel on stage 1 (one group, ranks 4..7) and
   the first parameter of that group in name order there (fc2.weight's groups are single ranks),
   so rank 4 owns it: every device of stage 1 holds rank 4's draw, not rank 0's (what a broadcast
   from the world's initial rank would give). Under hsdp level1 its 4 shards are groups of one
   each: row block k keeps rank 4 + k's draw. Training then equals one device started from the
   broadcast model. */
Test(feature_pairs, pipeline_parameter_broadcast_within_each_stage, .timeout = PAIRS_TIMEOUT) {
  static net n;
  static run R;
  load_tutorial(&n);
  const sk_graph *g = &n.g;
  int fc3 = sk_graph_find(g, "fc3.weight");
  int64_t rows = g->tensors[fc3].shape[0], cols = g->tensors[fc3].shape[1];
  double *drawn[2 * STAGE_DEVICES];
  for (int r = 0; r < 2 * STAGE_DEVICES; r++) drawn[r] = draw_of(g, fc3, 7 + (uint64_t)r); /* the harness's seed, 7 */
  cr_assert(memcmp(drawn[0], drawn[4], (size_t)(rows * cols) * 8), "ranks 0 and 4 drew the same fc3.weight");
  for (int level = 0; level < 2; level++) {
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.pipeline.stages = 2, pd.pipeline.micro = 2, pd.output_broadcast = true;
    if (level) pd.hsdp = (sk_hsdp)SK_HSDP_DEFAULTS, pd.hsdp.threshold_kb = 0;
    run_init_knobs(&R, &n, 2 * STAGE_DEVICES, SK_F64, n.g.optim, PAIR_STEPS, &pd);
    R.broadcast = R.plan.desc.seed_by_rank = true;
    cr_assert_eq(R.plan.desc.seed, 7);
    cr_assert_eq(param_stage(&R, fc3), 1, "fc3.weight is on the last stage");
    cr_assert_eq(R.plan.tensors[fc3].opt_size, level ? STAGE_DEVICES : 0);
    run_world(&R);
    expect_all_ok(&R, "parameter_broadcast under a pipeline");
    for (int d = STAGE_DEVICES; d < 2 * STAGE_DEVICES; d++)
      for (int k = 0; k < STAGE_DEVICES; k++) {
        size_t block = (size_t)(rows / STAGE_DEVICES * cols), at = (size_t)k * block;
        const double *want = drawn[level ? STAGE_DEVICES + k : STAGE_DEVICES];
        cr_assert(memcmp(R.dev[d].init + R.param_off[fc3] + at * 8, want + at, block * 8) == 0,
                  "device %d: fc3.weight's rows %zu.. are not rank %d's draw after the broadcast (hsdp %s)", d,
                  at / (size_t)cols, level ? STAGE_DEVICES + k : STAGE_DEVICES, level ? "level1" : "off");
      }
    double worst = expect_like_one_device(&R, "parameter_broadcast under a pipeline");
    cr_log_info("parameter_broadcast, 2 stages x 4 devices%s: fc3.weight as stage 1 owns it, then like one device within %.3g",
                level ? ", hsdp level1" : "", worst);
    run_free(&R);
  }
  forget_references();
  for (int r = 0; r < 2 * STAGE_DEVICES; r++) free(drawn[r]);
  sk_graph_free(&n.g);
}

/* A cur_rank that is not the device's fails every device that reaches the broadcast (each stage
   agrees before it exchanges); one of another stage still in create when the world went down
   fails there; none by the world's timeout, nothing leaks. */
Test(feature_pairs, pipeline_parameter_broadcast_wrong_cur_rank_fails_everywhere, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  load_tutorial(&n);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = 2, pd.pipeline.micro = 2, pd.output_broadcast = true;
  run_init_knobs(&R, &n, 2 * STAGE_DEVICES, SK_F64, n.g.optim, 1, &pd);
  R.broadcast = R.plan.desc.seed_by_rank = true, R.cur_rank_skew = 1, R.counting = true;
  run_world(&R);
  int refused = 0;
  for (int d = 0; d < R.ndev; d++) {
    const dev_out *o = &R.dev[d];
    cr_assert_eq(o->out_after, 0, "device %d: %zu bytes outstanding", d, o->out_after);
    if (!o->ran) continue; /* it joined a world already down */
    if (!o->created) {
      cr_assert_eq(o->rc, SK_ERR_ABORTED, "device %d: %s in %s (%s)", d, sk_result_name(o->rc), o->where, o->msg);
      continue;
    }
    cr_assert_eq(o->rc, SK_ERR_INVALID_ARGUMENT, "device %d: %s in %s (%s)", d, sk_result_name(o->rc), o->where, o->msg);
    cr_assert_str_eq(o->where, "broadcast");
    refused++;
  }
  cr_assert_gt(refused, 0);
  cr_log_info("a wrong cur_rank under a pipeline, %d devices refused: '%s'", refused, R.dev[0].msg);
  run_free(&R);
  sk_graph_free(&n.g);
}
