/* Pipeline parallel with optimizer parallel (hsdp): sk_autoparallel.pipeline and .hsdp together.

   MindSpore's semantics: the shard groups are within a stage (a parameter's data-parallel
   replicas on its stage's devices); level1 gathers each sharded parameter once per step and
   keeps it for every micro-batch, sums the micro-batches' gradients whole and ReduceScatters the
   sum once after the last micro-batch's backward (then the Mirror over the replicas left);
   level2 ReduceScatters each micro-batch's gradient into a sharded accumulator; level3 gathers
   per use (forward and backward of every micro-batch) and sums the gradients as level1.

   1. 8 devices in 2 stages of 4 (and 4 stages of 2), 4 or 8 micro-batches, every scheduler
      (gpipe, 1f1b, interleaved 1f1b and gpipe with 2 chunks, zero_bubble_v) x level1, level2,
      level3, on the tutorial's MLP (with and without its ReLUs recomputed) and on the skip
      network whose activation is relayed through chunks: losses and final parameters against
      the single-device trainer on the whole batch, f64 within TOL64. With comm_fusion closed
      (every collective its own call) each device's AllGather and ReduceScatter counts are the
      ones the level implies for its stage's sharded parameters, and after the last step a
      device holds only its shards (the gathered slices were released).
   2. shard_size 2 on stages of 4: the partial Mirror over the replicas left, per stage. Fused
      and overlapped collectives (f64), and bf16 with the gradient sync in 16 bits (HALF_TOL).
   3. The program names world ranks in its shard groups (stage 1's groups are ranks 4..7).
   4. Faults: every allocation of the first step failing in turn on each device of a 2 x 2
      world, at each level (the gathers' slices included): every device's step fails, none by
      the world's timeout, nothing outstanding.

   TOLERANCE: f64 TOL64 (1e-12 relative to 1 + |reference|), as the pipeline suite: sharding
   the optimizer changes only the order of the gradient's summation (the ReduceScatter sums the
   replicas' micro-batch sums; level2 sums the micro-batches after the ReduceScatter), so the
   runs agree to rounding (measured below 1e-15).

   Device threads never assert (the harness records, the test's thread asserts); every test has
   a timeout and every world a short one. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "runtime_harness.h"

#define PH_TIMEOUT (6 * RT_TIMEOUT)

typedef struct phcase {
  sk_pipe_scheduler sched;
  int world, stages, micro, interleave;
} phcase;

static const phcase CASES[] = {
    {SK_PIPE_GPIPE, 8, 2, 4, 1}, {SK_PIPE_1F1B, 8, 2, 4, 1},          {SK_PIPE_1F1B, 8, 2, 4, 2},
    {SK_PIPE_GPIPE, 8, 2, 4, 2}, {SK_PIPE_ZERO_BUBBLE_V, 8, 2, 4, 2}, {SK_PIPE_1F1B, 8, 4, 8, 1},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static sk_autoparallel knobs(const phcase *c, sk_hsdp_level level, int shard_size) {
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = c->stages, pd.pipeline.micro = c->micro;
  pd.pipeline.scheduler = c->sched, pd.pipeline.interleave = c->interleave;
  pd.output_broadcast = true;
  pd.hsdp = (sk_hsdp)SK_HSDP_DEFAULTS;
  pd.hsdp.threshold_kb = 0, pd.hsdp.level = level, pd.hsdp.shard_size = shard_size;
  pd.comm_fusion.closed = true; /* every collective its own call: the counts below */
  return pd;
}

/* The tutorial's MLP with its ReLUs recomputed (their outputs freed after the forward and
   computed again before the backward). */
static void build_mlp_recompute(net *n, int N) {
  build_mlp(n, N);
  for (int o = 0; o < n->g.nops; o++) n->g.ops[o].recompute = n->g.ops[o].desc.kind == SK_OP_RELU;
}

/* The pipeline suite's skip network, 2 ways at most along the batch (here: its strategies for a
   stage of N devices, data parallel where N is 1). */
static void build_skip(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w0 = add_param(n, "w0", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w1 = add_param(n, "w1", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(n, "w2", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op hm = OP("h", SK_OP_MATMUL, x, w0), a1 = OP("a1", SK_OP_MATMUL, 0, w1), a2 = OP("a2", SK_OP_MATMUL, 0, w2);
  if (N >= 2) SHARD(hm, 0, 2, N / 2), SHARD(hm, 1, N / 2, 1), SHARD(a2, 0, 2, 1), SHARD(a2, 1, 1, N / 2);
  int h = add_op(n, hm);
  a1.inputs[0] = h;
  a2.inputs[0] = add_op(n, OP("f1", SK_OP_RELU, add_op(n, a1)));
  int f2 = add_op(n, OP("f2", SK_OP_TANH, add_op(n, a2)));
  loss_head(n, add_op(n, OP("r1", SK_OP_ADD, h, f2)), y, "u", 8, 4);
}

typedef struct phnet {
  const char *name;
  build_fn build;
} phnet;

static const phnet NETS[] = {{"MLP", build_mlp}, {"MLP recompute", build_mlp_recompute}, {"skip", build_skip}};

static const char *describe(const phcase *c, const char *net_name, sk_hsdp_level level, int shard_size) {
  static char buf[160];
  snprintf(buf, sizeof buf, "%s, %s, %d devices in %d stages, %d micro-batches, %d chunk(s), hsdp %s shard_size %d", net_name,
           sk_pipe_scheduler_name(c->sched), c->world, c->stages, c->micro, c->interleave, sk_hsdp_level_name(level),
           shard_size);
  return buf;
}

/* ---- what the plan implies per stage ---------------------------------------------------------- */

/* The sharded parameters on `stage` (*with_grad: those with a gradient), and the parameter
   bytes (shards and whole slices) a device there holds between steps. */
static int stage_sharded(const run *R, int stage, uint64_t *param_bytes, int *with_grad) {
  const sk_graph *g = R->plan.graph;
  int k = 0;
  *param_bytes = 0, *with_grad = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_PARAM || param_stage(R, t) != stage) continue;
    int64_t n = sk_parallel_slice_count(&R->plan, t);
    const sk_parallel_tensor *pt = &R->plan.tensors[t];
    *param_bytes += (uint64_t)(pt->opt_size ? n / pt->opt_size : n) * sizeof(double);
    k += pt->opt_size > 0, *with_grad += pt->opt_size > 0 && pt->needs_grad;
  }
  return k;
}

/* The uses of `stage`'s sharded parameters by its operators: level3's gathers per micro-batch
   (one per forward use, one per backward of an operator that passes a gradient, one more per
   recomputed use). */
static uint64_t level3_gathers(const run *R, int stage) {
  const sk_parallel_plan *p = &R->plan;
  uint64_t n = 0;
  for (int i = 0; i < p->nsteps; i++) {
    const sk_parallel_step *s = &p->steps[i];
    if (s->kind != SK_PSTEP_PARAM_GATHER || !sk_parallel_op_on_stage(p, s->op, stage)) continue;
    n++;
    bool forward = true; /* a forward gather of a recomputed operator runs again before its backward */
    for (int j = 0; j < i; j++) forward = forward && p->steps[j].kind != SK_PSTEP_BACKWARD;
    n += forward && p->graph->ops[s->op].recompute;
  }
  return n * (uint64_t)p->micro;
}

static void expect_counts(const run *R, sk_hsdp_level level, const char *what, int *sharded_total) {
  for (int d = 0; d < R->ndev; d++) {
    int stage = sk_parallel_stage_of_rank(&R->plan, d);
    uint64_t bytes = 0, steps = (uint64_t)R->nsteps;
    int kg = 0;
    uint64_t k = (uint64_t)stage_sharded(R, stage, &bytes, &kg);
    if (d % (R->ndev / R->plan.stages) == 0) *sharded_total += (int)k;
    uint64_t ag = coll_calls(&R->dev[d].stats, SK_COLL_ALLGATHER), rs = coll_calls(&R->dev[d].stats, SK_COLL_REDUCE_SCATTER);
    uint64_t want_rs = (uint64_t)kg * steps * (level == SK_HSDP_LEVEL2 ? (uint64_t)R->plan.micro : 1);
    uint64_t want_ag = level == SK_HSDP_LEVEL3 ? level3_gathers(R, stage) * steps : k * steps;
    cr_assert_eq(rs, want_rs, "%s: device %d (stage %d, %llu sharded): %llu ReduceScatters, want %llu", what, d, stage,
                 (unsigned long long)k, (unsigned long long)rs, (unsigned long long)want_rs);
    cr_assert_eq(ag, want_ag, "%s: device %d (stage %d, %llu sharded): %llu AllGathers, want %llu", what, d, stage,
                 (unsigned long long)k, (unsigned long long)ag, (unsigned long long)want_ag);
    cr_assert_eq(R->dev[d].mem_end.parameters, bytes, "%s: device %d holds %llu parameter bytes after the steps, its shards %llu",
                 what, d, (unsigned long long)R->dev[d].mem_end.parameters, (unsigned long long)bytes);
  }
}

/* ---- 1. every scheduler x level like one device ------------------------------------------------- */

static double one_case(const phcase *c, const phnet *pn, sk_hsdp_level level, int shard_size, int *sharded) {
  static net n;
  static run R;
  const char *what = describe(c, pn->name, level, shard_size);
  sk_autoparallel pd = knobs(c, level, shard_size);
  pn->build(&n, c->world / c->stages);
  run_init_knobs(&R, &n, c->world, SK_F64, sgd(0.5), 3, &pd);
  cr_assert_eq(R.plan.nfallbacks, 0, "%s: %d strategies fell back", what, R.plan.nfallbacks);
  run_world(&R);
  expect_all_ok(&R, what);
  errs m = against_trainer(&R, TOL64, what);
  int k = 0;
  expect_counts(&R, level, what, &k);
  *sharded += k;
  run_free(&R);
  sk_graph_free(&n.g);
  return fmax(m.loss, m.param);
}

static void every_case(sk_hsdp_level level) {
  double worst = 0;
  for (int i = 0; i < NCASES; i++) {
    int sharded = 0;
    for (int k = 0; k < (int)(sizeof NETS / sizeof NETS[0]); k++) worst = fmax(worst, one_case(&CASES[i], &NETS[k], level, -1, &sharded));
    cr_assert_gt(sharded, 2, "%s: only %d parameters sharded", describe(&CASES[i], "every net", level, -1), sharded);
  }
  cr_log_info("hsdp %s with a pipeline, %d configurations x %d networks vs one device, 3 steps f64: within %.3g",
              sk_hsdp_level_name(level), NCASES, (int)(sizeof NETS / sizeof NETS[0]), worst);
}

Test(pipeline_hsdp, level1_every_scheduler_like_one_device, .timeout = PH_TIMEOUT) { every_case(SK_HSDP_LEVEL1); }
Test(pipeline_hsdp, level2_every_scheduler_like_one_device, .timeout = PH_TIMEOUT) { every_case(SK_HSDP_LEVEL2); }
Test(pipeline_hsdp, level3_every_scheduler_like_one_device, .timeout = PH_TIMEOUT) { every_case(SK_HSDP_LEVEL3); }

/* ---- 2. a partial shard: the Mirror over the replicas left ---------------------------------------- */

Test(pipeline_hsdp, shard_size_two_mirrors_the_rest_within_the_stage, .timeout = PH_TIMEOUT) {
  double worst = 0;
  for (int lv = SK_HSDP_LEVEL1; lv <= SK_HSDP_LEVEL2; lv++)
    for (int i = 0; i < 2; i++) {
      static net n;
      static run R;
      const phcase *c = &CASES[i + 1]; /* 1f1b, one chunk and interleaved */
      const char *what = describe(c, "MLP", (sk_hsdp_level)lv, 2);
      sk_autoparallel pd = knobs(c, (sk_hsdp_level)lv, 2);
      build_mlp(&n, 4);
      run_init_knobs(&R, &n, 8, SK_F64, adam(0.01), 3, &pd);
      int partial = 0;
      for (int t = 0; t < n.g.ntensors; t++) partial += R.plan.tensors[t].opt_size == 2 && R.plan.tensors[t].opt_mirror == 2;
      cr_assert_geq(partial, 1, "%s: no parameter sharded 2 ways with a Mirror over 2", what);
      run_world(&R);
      expect_all_ok(&R, what);
      errs m = against_trainer(&R, TOL64, what);
      worst = fmax(worst, fmax(m.loss, m.param));
      for (int d = 0; d < 8; d++) /* the partial Mirrors: AllReduces over 2 devices */
        cr_assert_gt(coll_calls(&R.dev[d].stats, SK_COLL_ALLREDUCE), 0, "%s: device %d reduced nothing", what, d);
      run_free(&R);
      sk_graph_free(&n.g);
    }
  cr_log_info("shard_size 2 with a pipeline (Adam), level1 and level2: within %.3g", worst);
}

/* Fused and overlapped (comm_fusion auto, grad_computation_allreduce_overlap: level1 / level3 hand
   each sum to the scheduler after the last micro-batch's backward), in f64; and bf16 with the
   gradients synchronised in 16 bits (no_gradient_fp32_sync: the ReduceScatters and partial
   Mirrors through their shadows) within HALF_TOL, as tests/test_hsdp.c's 16-bit runs. */
Test(pipeline_hsdp, fused_overlapped_and_16_bit_gradient_sync, .timeout = PH_TIMEOUT) {
  double worst[2] = {0, 0};
  for (int lv = SK_HSDP_LEVEL1; lv < SK_HSDP_LEVEL_COUNT; lv++)
    for (int i = 0; i < 2; i++)
      for (int half = 0; half < 2; half++) {
        static net n;
        static run R;
        const phcase *c = i ? &CASES[4] : &CASES[1]; /* zero_bubble_v, 1f1b */
        sk_autoparallel pd = knobs(c, (sk_hsdp_level)lv, half ? 2 : -1);
        pd.comm_fusion.closed = false, pd.transformer_opt.grad_computation_allreduce_overlap = !half;
        pd.no_gradient_fp32_sync = half;
        const char *what = describe(c, half ? "MLP bf16, 16-bit gradient sync" : "MLP fused, overlapped", (sk_hsdp_level)lv,
                                    half ? 2 : -1);
        build_mlp_recompute(&n, 4);
        run_init_knobs(&R, &n, 8, half ? SK_BF16 : SK_F64, sgd(0.5), 3, &pd);
        run_world(&R);
        expect_all_ok(&R, what);
        errs m = against_trainer(&R, half ? HALF_TOL : TOL64, what);
        worst[half] = fmax(worst[half], fmax(m.loss, m.param));
        int scattering = 0;
        for (int d = 0; d < 8; d++) { /* a device of a stage with sharded gradients scatters them */
          uint64_t bytes = 0;
          int kg = 0;
          stage_sharded(&R, sk_parallel_stage_of_rank(&R.plan, d), &bytes, &kg);
          scattering += kg > 0;
          cr_assert_eq(coll_bytes(&R.dev[d].stats, SK_COLL_REDUCE_SCATTER) > 0, kg > 0, "%s: device %d: %d sharded gradients, %llu bytes scattered",
                       what, d, kg, (unsigned long long)coll_bytes(&R.dev[d].stats, SK_COLL_REDUCE_SCATTER));
        }
        cr_assert_geq(scattering, 4, "%s: only %d devices hold sharded gradients", what, scattering);
        run_free(&R);
        sk_graph_free(&n.g);
      }
  cr_log_info("fused + overlapped f64 within %.3g; bf16 with 16-bit gradient sync within %.3g", worst[0], worst[1]);
}

/* ---- 3. the program's groups are world ranks ------------------------------------------------------ */

/* Every rank a ParamGather / GradReduceScatter line of world rank r's program names is on r's stage. */
Test(pipeline_hsdp, program_names_world_ranks_in_shard_groups, .timeout = RT_TIMEOUT) {
  static net n;
  build_mlp(&n, 4);
  sk_autoparallel pd = knobs(&CASES[1], SK_HSDP_LEVEL1, -1);
  pd.ndevices = 8;
  sk_parallel_plan p;
  OK(sk_parallel_compile(&n.g, &pd, &p, E));
  static char buf[1 << 16];
  int groups = 0;
  for (int r = 0; r < 8; r++) {
    size_t len = sk_parallel_format_program(&p, r, buf, sizeof buf);
    cr_assert(len > 0 && len < sizeof buf);
    int lo = sk_parallel_stage_of_rank(&p, r) * 4;
    for (const char *q = buf; (q = strstr(q, "ranks={")); q++) {
      const char *at = q + strlen("ranks={");
      bool opt = false; /* only the shard steps' groups: the line begins with their step's name */
      for (const char *b = q; b > buf && b[-1] != '\n'; b--) opt = opt || !strncmp(b, "ParamGather", 11) || !strncmp(b, "GradReduceScatter", 17);
      if (!opt) continue;
      groups++;
      for (;;) {
        int v = (int)strtol(at, (char **)&at, 10);
        cr_assert(v >= lo && v < lo + 4, "rank %d's program names rank %d in a shard group (stage ranks %d..%d):\n%s", r, v, lo,
                  lo + 3, buf);
        if (*at != ',') break;
        at++;
      }
    }
  }
  cr_assert_gt(groups, 8, "the programs printed only %d shard groups", groups);
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}

/* ---- 4. faults ---------------------------------------------------------------------------------- */

/* Every allocation of the first step failing in turn on each device of 2 stages x 2 devices
   (1f1b, 4 micro-batches; the gathered slices among them): that device's step returns
   SK_ERR_OUT_OF_MEMORY; every other device's step fails too -- the peers of a device that gave
   up before a gather wait on it in the gather -- none by the world's timeout, nothing
   outstanding. The sweep ends at the first k the step does not reach, which trains clean. */
Test(pipeline_hsdp, step_allocation_failures_each_device_each_level, .timeout = PH_TIMEOUT) {
  static char seen[4096];
  seen[0] = 0;
  for (int lv = SK_HSDP_LEVEL1; lv < SK_HSDP_LEVEL_COUNT; lv++) {
    static net n;
    static run R;
    const phcase c = {SK_PIPE_1F1B, 4, 2, 4, 1};
    const char *what = describe(&c, "MLP step", (sk_hsdp_level)lv, -1);
    sk_autoparallel pd = knobs(&c, (sk_hsdp_level)lv, -1);
    build_mlp(&n, 2);
    run_init_knobs(&R, &n, 4, SK_F64, adam(0.01), 2, &pd);
    R.counting = true, R.evaluate = false, R.fail_phase = FAIL_IN_STEP;
    for (int rank = 0; rank < 4; rank++) {
      R.fail_rank = rank;
      long k = 1;
      for (;; k++) {
        R.fail_at = k;
        run_world(&R);
        const dev_out *f = &R.dev[rank];
        if (!f->cnt.refused) {
          expect_all_ok(&R, "a step allocating fewer");
          break;
        }
        cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "%s: device %d, k = %ld: %s in %s (%s)", what, rank, k, sk_result_name(f->rc),
                     f->where, f->msg);
        cr_assert_str_eq(f->where, "step", "%s: device %d, k = %ld: %s", what, rank, k, f->msg);
        if (!strstr(seen, f->msg) && strlen(seen) + strlen(f->msg) + 2 < sizeof seen) strcat(seen, f->msg), strcat(seen, "\n");
        expect_all_failed_clean(&R, k, what);
        for (int d = 0; d < 4; d++) cr_assert_eq(R.dev[d].steps, 0, "%s, k = %ld: device %d finished its step", what, k, d);
      }
      cr_assert_gt(k, 4, "%s: device %d: the step allocated only %ld times", what, rank, k - 1);
    }
    run_free(&R);
    sk_graph_free(&n.g);
  }
  cr_assert(strstr(seen, "out of memory for the slice ParamGather gathers"), "the sweeps should reach the gathered slices:\n%s",
            seen);
}
