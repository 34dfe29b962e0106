/* The dry run (sk_dryrun.h) against an executed run: the shipped networks (examples/nets,
   every .json) compiled for N devices, one training step on thread devices, and every device's
   dry run of the same plan. Equal, byte for byte and call for call:
     MEMORY   right after create and after the step, each of parameters, gradients, optimizer,
              activations and communication (current value and per-kind peak) and the peak of
              their sum (host is the library's bookkeeping: not compared);
     COMM     the statistics rows, as a set of (kind, plan group id): group size, calls, bytes;
     FLOPS    the step's FLOPs, exactly (the same function summed in the same order).
   Combinations (the suite stays within about half a minute on a loaded 2-core machine): every
   network with semi_auto on 1, 2 and 8 devices; every network under a 2-stage pipeline (1f1b, 2
   micro-batches) on 2 and 8 devices; hsdp level1 and level3 on 8; recompute (every operator but
   the last flagged) without and with a pipeline on 8 (without one, not the transformer: its
   executed step replays the recomputed operators for 40 s); sharding_propagation and
   recursive_programming on 8 (a search under a pipeline needs 16 devices, more than the
   harness holds: the networks' strategies are written for 8 devices a stage; tests/sim_test.sh
   runs one); bf16 and f16 with the gradient sync in 16 bits under hsdp level2, without and
   with a pipeline, on 8; zero_bubble_v (hsdp level2, recompute) and gpipe (hsdp level1) with 4
   micro-batches, grad_accumulation_step 2 with hsdp level2, comm_fusion closed, 4 KB AllReduce
   buckets launched as their gradients are ready with packed BackwardComm, on 8. dense_mutmul
   never under a pipeline (NPIPE below).

   Device threads never assert: each records into its dev_out, the test's thread asserts. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "runtime_harness.h"
#include "sk_json.h"
#include "shipped_nets.h"

#define DR_TIMEOUT 120

static const char *const nets[] = {"examples/nets/transformer.json", "examples/nets/operator_parallel.json",
                                   "examples/nets/recursive_programming.json", "examples/nets/attention.json",
                                   "examples/nets/dense_mutmul.json"};
#define NNETS ((int)(sizeof nets / sizeof nets[0]))
/* Under a pipeline the first four: dense_mutmul adds a bias as long as the whole batch, which a
   micro-batch is not (the compiler refuses it). */
#define NPIPE (NNETS - 1)

/* The network at path, with every operator but the last flagged for recomputation when asked. */
static void load_net(net *n, const char *path, bool recompute) {
  load_shipped_net(n, path);
  for (int o = 0; recompute && o + 1 < n->g.nops; o++) n->g.ops[o].recompute = true;
}

/* One device: create, one step; its memory after each and its statistics. */
static bool evaluate_after; /* one_step evaluates after its step */

static sk_result one_step(sk_comm *comm, void *arg) {
  run *R = (run *)arg;
  dev_out *o = &R->dev[sk_comm_rank(comm)];
  sk_error e;
  memset(&e, 0, sizeof e);
  o->ran = true, o->rc = SK_OK;
  sk_runtime *rt = NULL;
  sk_result r = note(o, "create", sk_runtime_create(comm, &R->plan, &R->desc, &rt, &e), &e);
  if (!r) sk_runtime_memory_get(rt, &o->mem_created), o->created = true;
  for (int i = 0; !r && i < R->n->nin; i++)
    r = note(o, "feed", sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[0][i], (size_t)R->in_n[i], &e), &e);
  if (!r) r = note(o, "step", sk_runtime_step(rt, &o->loss[0], &e), &e);
  if (rt) sk_runtime_stats_get(rt, &o->stats);
  int64_t hits = 0, rows = 0; /* evaluation leaves the peaks as training left them */
  if (!r && evaluate_after && R->n->g.logits >= 0 && R->n->g.labels >= 0) r = note(o, "evaluate", sk_runtime_evaluate(rt, &hits, &rows, &e), &e);
  if (rt) sk_runtime_memory_get(rt, &o->mem_end);
  sk_runtime_destroy(rt);
  return r;
}

static const char *const kinds[SK_MEM_KINDS] = {"parameters", "gradients", "optimizer", "activations", "communication"};

/* The five kinds' current values and peaks, and the peak of their sum. */
static void expect_memory(const sk_runtime_memory *got, const sk_runtime_memory *want, int d, const char *when, const char *what) {
  const uint64_t g[2][SK_MEM_KINDS] = {{got->parameters, got->gradients, got->optimizer_state, got->activations, got->communication},
                                       {got->peak_parameters, got->peak_gradients, got->peak_optimizer_state,
                                        got->peak_activations, got->peak_communication}};
  const uint64_t w[2][SK_MEM_KINDS] = {{want->parameters, want->gradients, want->optimizer_state, want->activations,
                                        want->communication},
                                       {want->peak_parameters, want->peak_gradients, want->peak_optimizer_state,
                                        want->peak_activations, want->peak_communication}};
  for (int peak = 0; peak < 2; peak++)
    for (int k = 0; k < SK_MEM_KINDS; k++)
      cr_assert_eq(g[peak][k], w[peak][k], "%s: device %d %s: %s%s: the runtime %llu bytes, the dry run %llu", what, d, when,
                   peak ? "peak " : "", kinds[k], (unsigned long long)g[peak][k], (unsigned long long)w[peak][k]);
  cr_assert_eq(got->peak, want->peak, "%s: device %d %s: peak total: the runtime %llu, the dry run %llu", what, d, when,
               (unsigned long long)got->peak, (unsigned long long)want->peak);
}

static const sk_runtime_comm_row *find_row(const sk_runtime_stats *st, const sk_runtime_comm_row *x) {
  for (int i = 0; i < st->nrows; i++)
    if (st->rows[i].kind == x->kind && st->rows[i].group_id == x->group_id) return &st->rows[i];
  return NULL;
}

static const char *row_name(sk_coll_kind k) { return k == SK_COLL_NONE ? "Redistribution" : sk_coll_kind_name(k); }

/* Every row of each side on the other, with the same group size, calls and bytes. */
static void expect_rows(const sk_runtime_stats *rt, const sk_runtime_stats *dry, int d, const char *what) {
  cr_assert_lt(rt->nrows, SK_RUNTIME_COMM_ROWS, "%s: device %d: the statistics ran out of rows", what, d);
  cr_assert_eq(rt->nrows, dry->nrows, "%s: device %d: the runtime has %d rows, the dry run %d", what, d, rt->nrows, dry->nrows);
  for (int i = 0; i < rt->nrows; i++) {
    const sk_runtime_comm_row *x = &rt->rows[i], *y = find_row(dry, x);
    cr_assert_not_null(y, "%s: device %d: %s on g%d: %llu calls at run time, none in the dry run", what, d, row_name(x->kind),
                       x->group_id, (unsigned long long)x->calls);
    cr_assert(x->group == y->group && x->calls == y->calls && x->bytes == y->bytes,
              "%s: device %d: %s on g%d: the runtime %d ranks %llu calls %llu bytes, the dry run %d ranks %llu calls %llu bytes",
              what, d, row_name(x->kind), x->group_id, x->group, (unsigned long long)x->calls, (unsigned long long)x->bytes,
              y->group, (unsigned long long)y->calls, (unsigned long long)y->bytes);
  }
}

/* Every device's dry run equals its executed step. */
static void expect_equal(run *R, const char *what) {
  for (int d = 0; d < R->ndev; d++) {
    sk_dryrun_device dry;
    OK(sk_dryrun_device_run(&R->plan, d, &dry, E));
    const dev_out *o = &R->dev[d];
    expect_memory(&o->mem_created, &dry.created, d, "after create", what);
    expect_memory(&o->mem_end, &dry.after, d, "after the step", what);
    expect_rows(&o->stats, &dry.stats, d, what);
    cr_assert(o->stats.flops == dry.stats.flops, "%s: device %d: the runtime %.17g FLOPs, the dry run %.17g", what, d,
              o->stats.flops, dry.stats.flops);
    cr_assert_gt(dry.stats.flops, 0, "%s: device %d: no FLOPs", what, d);
  }
}

/* Network `path` on `ndev` devices with the knobs of pd: executed and dry, compared. */
static void check_net_dt(const char *path, int ndev, sk_dtype dt, const sk_autoparallel *pd, bool recompute, const char *label) {
  static net n;
  static run R;
  char what[256];
  cr_assert_leq(ndev, MAXDEV, "%s: %d devices, the harness holds %d", path, ndev, MAXDEV);
  snprintf(what, sizeof what, "%s, %d device%s, %s, %s", path, ndev, ndev > 1 ? "s" : "", sk_dtype_name(dt), label);
  load_net(&n, path, recompute);
  run_init_knobs(&R, &n, ndev, dt, n.g.optim, 1, pd);
  run_world_with(&R, one_step);
  expect_all_ok(&R, what);
  expect_equal(&R, what);
  run_free(&R);
  sk_graph_free(&n.g);
}

static void check_net(const char *path, int ndev, const sk_autoparallel *pd, bool recompute, const char *label) {
  check_net_dt(path, ndev, SK_F32, pd, recompute, label);
}

static sk_autoparallel knobs(void) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  return d;
}

static sk_autoparallel pipe2(void) {
  sk_autoparallel d = knobs();
  d.pipeline.stages = 2, d.pipeline.micro = 2, d.pipeline.scheduler = SK_PIPE_1F1B;
  return d;
}

Test(dryrun, semi_auto_1_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  const int counts[] = {1, 2, 8};
  for (int i = 0; i < NNETS; i++)
    for (int c = 0; c < 3; c++) check_net(nets[i], counts[c], &pd, false, "semi_auto");
}

Test(dryrun, pipeline_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = pipe2();
  for (int i = 0; i < NPIPE; i++) {
    check_net(nets[i], 2, &pd, false, "1f1b, 2 stages, 2 micro-batches");
    check_net(nets[i], 8, &pd, false, "1f1b, 2 stages, 2 micro-batches");
  }
}

/* Under a priced cluster, with an evaluation after the step: the peaks stay training's (an
   evaluation's pipeline may hold more in flight), and pricing the redistributions' peer-access
   steps inside the step allocates nothing the activations would count. */
Test(dryrun, pipeline_priced_evaluation, .timeout = DR_TIMEOUT) {
  static net n;
  static run R;
  sk_autoparallel pd = pipe2();
  pd.pipeline.micro = 4;
  evaluate_after = true;
  for (int i = 0; i < NPIPE; i++) {
    load_net(&n, nets[i], false);
    run_init_knobs(&R, &n, 8, SK_F32, n.g.optim, 1, &pd);
    R.link.alpha_us = 5, R.link.gbps = 25;
    R.plan.desc.cluster.link = R.link, R.plan.desc.cluster.device_flops = 1e9;
    run_world_with(&R, one_step);
    expect_all_ok(&R, nets[i]);
    expect_equal(&R, nets[i]);
    run_free(&R);
    sk_graph_free(&n.g);
  }
  evaluate_after = false;
}

Test(dryrun, hsdp_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  pd.hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL1};
  for (int i = 0; i < NNETS; i++) check_net(nets[i], 8, &pd, false, "hsdp level1");
  pd.hsdp.level = SK_HSDP_LEVEL3;
  for (int i = 0; i < NNETS; i++) check_net(nets[i], 8, &pd, false, "hsdp level3");
}

Test(dryrun, recompute_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs(), pp = pipe2();
  for (int i = 1; i < NNETS; i++) check_net(nets[i], 8, &pd, true, "recompute"); /* not the transformer: 40 s */
  for (int i = 0; i < NPIPE; i++) check_net(nets[i], 8, &pp, true, "recompute, 1f1b, 2 stages");
}

Test(dryrun, search_modes_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  pd.mode = SK_PARALLEL_SHARDING_PROPAGATION;
  for (int i = 0; i < NNETS; i++) check_net(nets[i], 8, &pd, false, "sharding_propagation");
  pd.mode = SK_PARALLEL_RECURSIVE_PROGRAMMING;
  for (int i = 0; i < NNETS; i++) check_net(nets[i], 8, &pd, false, "recursive_programming");
}

/* 16-bit runs: the reducing collectives and the gradient sync on a 16-bit wire, the wire buffer
   and the shadows in the create section. */
Test(dryrun, half_wires_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs(), pp = pipe2();
  pd.no_gradient_fp32_sync = pp.no_gradient_fp32_sync = true;
  pd.hsdp = pp.hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL2};
  for (int i = 0; i < NNETS; i++) check_net_dt(nets[i], 8, SK_BF16, &pd, false, "hsdp level2, 16-bit gradient sync");
  for (int i = 0; i < NPIPE; i++) check_net_dt(nets[i], 8, SK_F16, &pp, false, "hsdp level2, 1f1b, 16-bit gradient sync");
}

/* A NULL or uncompiled plan, a rank outside the world: refused, naming what was wrong. */
Test(dryrun, refuses_bad_input, .timeout = DR_TIMEOUT) {
  static net n;
  static run R;
  sk_dryrun_device dry;
  sk_error e;
  memset(&e, 0, sizeof e);
  sk_parallel_plan none;
  memset(&none, 0, sizeof none);
  cr_assert_eq(sk_dryrun_device_run(NULL, 0, &dry, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_dryrun_device_run(&none, 0, &dry, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "uncompiled"), "%s", e.msg);
  load_net(&n, nets[3], false);
  sk_autoparallel pd = knobs();
  run_init_knobs(&R, &n, 2, SK_F32, n.g.optim, 1, &pd);
  cr_assert_eq(sk_dryrun_device_run(&R.plan, 2, &dry, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "rank 2 outside the plan's 2 devices"), "%s", e.msg);
  cr_assert_eq(sk_dryrun_device_run(&R.plan, -1, &dry, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_dryrun_device_run(&R.plan, 1, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  OK(sk_dryrun_device_run(&R.plan, 1, &dry, E));
  sk_dryrun_device two[2];
  cr_assert_eq(sk_dryrun_devices_run(&R.plan, 1, 2, two, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "2 devices from rank 1, the plan has 2"), "%s", e.msg);
  cr_assert_eq(sk_dryrun_devices_run(&R.plan, 0, 0, two, &e), SK_ERR_INVALID_ARGUMENT);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* Several devices at once (their FLOPs computed once) equal each one's own dry run: a pipeline's
   ranks 3..7, across both stages. */
Test(dryrun, devices_at_once_equal_each, .timeout = DR_TIMEOUT) {
  static net n;
  static run R;
  static sk_dryrun_device many[5];
  load_net(&n, nets[3], false);
  sk_autoparallel pd = pipe2();
  run_init_knobs(&R, &n, 8, SK_F32, n.g.optim, 1, &pd);
  OK(sk_dryrun_devices_run(&R.plan, 3, 5, many, E));
  for (int i = 0; i < 5; i++) {
    sk_dryrun_device one;
    OK(sk_dryrun_device_run(&R.plan, 3 + i, &one, E));
    cr_assert(many[i].rank == 3 + i && many[i].stage == one.stage, "rank %d: rank %d stage %d", 3 + i, many[i].rank, many[i].stage);
    expect_memory(&many[i].created, &one.created, 3 + i, "after create", "at once");
    expect_memory(&many[i].after, &one.after, 3 + i, "after the step", "at once");
    expect_rows(&many[i].stats, &one.stats, 3 + i, "at once");
    cr_assert(many[i].stats.flops == one.stats.flops, "rank %d: %.17g FLOPs at once, %.17g alone", 3 + i, many[i].stats.flops,
              one.stats.flops);
  }
  cr_assert_neq(many[0].stage, many[4].stage, "both stages");
  run_free(&R);
  sk_graph_free(&n.g);
}

/* The other schedulers, gradient accumulation, fusion (closed; small buckets launched as their
   gradients are ready). */
Test(dryrun, schedulers_accumulation_fusion, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = pipe2();
  pd.pipeline.micro = 4, pd.pipeline.scheduler = SK_PIPE_ZERO_BUBBLE_V;
  pd.hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL2};
  for (int i = 0; i < NPIPE; i++) check_net(nets[i], 8, &pd, true, "zero_bubble_v, 4 micro-batches, hsdp level2, recompute");
  pd.pipeline.scheduler = SK_PIPE_GPIPE, pd.hsdp.level = SK_HSDP_LEVEL1;
  for (int i = 0; i < NPIPE; i++) check_net(nets[i], 8, &pd, false, "gpipe, 4 micro-batches, hsdp level1");
  pd = knobs();
  pd.grad_accumulation_step = 2, pd.hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL2};
  for (int i = 0; i < NNETS; i++) check_net(nets[i], 8, &pd, false, "grad_accumulation_step 2, hsdp level2");
  pd = knobs();
  pd.comm_fusion.closed = true;
  for (int i = 0; i < NNETS; i++) check_net(nets[i], 8, &pd, false, "comm_fusion closed");
  pd = knobs();
  pd.comm_fusion.allreduce.mode = SK_FUSION_SIZE, pd.comm_fusion.allreduce.threshold_bytes = 4096;
  pd.transformer_opt.grad_computation_allreduce_overlap = true, pd.transformer_opt.enable_communication_fusion = true;
  for (int i = 0; i < NNETS; i++) check_net(nets[i], 8, &pd, false, "4 KB buckets launched when ready, packed BackwardComm");
}

/* ---- the step time ------------------------------------------------------------------------------
   The executed step's modelled time (stats.step_us: the threads backend's virtual clocks under a
   flat link and device_flops; a search mode plans every operator itself) against sk_dryrun_step_time, to a relative 1e-9: the first step,
   and the mean of steps 2..STEPS (a step starts with the clocks aligned, so they should agree
   with the first; compared rather than assumed). */
#define STEPS 3
static double step_first[MAXDEV], step_total[MAXDEV];
static int window = 1; /* grad_accumulation_step: the first "step" is the first window's mean */
static sk_dtype run_dt = SK_F32; /* the run's dtype (16-bit runs sync gradients on a 16-bit wire when asked) */

static sk_result timed_steps(sk_comm *comm, void *arg) {
  run *R = (run *)arg;
  int me = sk_comm_rank(comm);
  dev_out *o = &R->dev[me];
  sk_error e;
  memset(&e, 0, sizeof e);
  o->ran = true, o->rc = SK_OK;
  sk_runtime *rt = NULL;
  sk_result r = note(o, "create", sk_runtime_create(comm, &R->plan, &R->desc, &rt, &e), &e);
  for (int s = 0; s < STEPS * window && !r; s++) {
    for (int i = 0; !r && i < R->n->nin; i++)
      r = note(o, "feed", sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[0][i], (size_t)R->in_n[i], &e), &e);
    if (!r) r = note(o, "step", sk_runtime_step(rt, &o->loss[0], &e), &e);
    if (!r) sk_runtime_stats_get(rt, &o->stats);
    if (!r && s == window - 1) step_first[me] = o->stats.step_us;
  }
  step_total[me] = o->stats.step_us;
  sk_runtime_destroy(rt);
  return r;
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

/* The cluster of the step-time checks: a flat link unless a test sets a topology. */
static sk_topology time_topology;

/* Network n on ndev devices, link 5 us / 25 GB/s (or time_topology), 1 GFLOP/s devices:
   executed vs modelled.
   Every plan is modelled (the redistributions' peer-access moves included: charged on both
   sides). Frees n's graph. */
static void check_time_net(net *n, int ndev, const sk_autoparallel *pd, const char *what) {
  static run R;
  for (int o = 0; pd->mode != SK_PARALLEL_SEMI_AUTO && o < n->g.nops; o++) { /* the search's own */
    sk_op_desc *d = &n->g.ops[o].desc;
    d->has_strategy = d->has_out_strategy = d->has_layouts = false, d->nstrategies = d->nout_layouts = 0;
    memset(d->strategy_len, 0, sizeof d->strategy_len);
  }
  run_init_knobs(&R, n, ndev, run_dt, n->g.optim, 1, pd);
  if (time_topology.nodes)
    R.topology = time_topology;
  else
    R.link.alpha_us = 5, R.link.gbps = 25;
  R.plan.desc.cluster.link = R.link, R.plan.desc.cluster.topology = R.topology, R.plan.desc.cluster.device_flops = 1e9;
  sk_dryrun_time t;
  memset(&t, 0, sizeof t);
  double span[MAXDEV], busy[MAXDEV];
  t.span_us = span, t.busy_us = busy;
  sk_error e;
  memset(&e, 0, sizeof e);
  sk_result rc = sk_dryrun_step_time(&R.plan, &t, &e);
  cr_assert_eq(rc, SK_OK, "%s: %s", what, e.msg);
  run_world_with(&R, timed_steps);
  expect_all_ok(&R, what);
  for (int d = 0; d < ndev; d++) {
    double first = step_first[d] / window, later = (step_total[d] - step_first[d]) / ((STEPS - 1) * window);
    cr_assert(close_to(first, t.step_us), "%s: device %d: step 1 took %.17g us executed, %.17g modelled", what, d, first, t.step_us);
    cr_assert(close_to(later, t.step_us), "%s: device %d: steps 2..%d took %.17g us each executed, %.17g modelled", what, d,
              STEPS, later, t.step_us);
    cr_assert_leq(span[d], t.step_us, "%s: device %d ends after the step", what, d);
  }
  cr_assert_gt(t.step_us, 0, "%s: no time", what);
  cr_assert(t.bubble >= 0 && t.bubble < 1, "%s: bubble %g", what, t.bubble);
  run_free(&R);
  sk_graph_free(&n->g);
}

static void check_time(const char *path, int ndev, const sk_autoparallel *pd, const char *label) {
  static net n;
  char what[256];
  snprintf(what, sizeof what, "%s, %d device%s, %s", path, ndev, ndev > 1 ? "s" : "", label);
  load_net(&n, path, false);
  check_time_net(&n, ndev, pd, what);
}

Test(dryrun_time, semi_auto_1_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  const int counts[] = {1, 2, 8};
  for (int i = 0; i < NNETS; i++)
    for (int c = 0; c < 3; c++) check_time(nets[i], counts[c], &pd, "semi_auto");
  pd.dataset = SK_DATASET_FULL_BATCH; /* the inputs whole: moves into cuts are local */
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, "semi_auto, full_batch");
}

Test(dryrun_time, search_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  const sk_parallel_mode modes[] = {SK_PARALLEL_SHARDING_PROPAGATION, SK_PARALLEL_RECURSIVE_PROGRAMMING};
  const char *const names[] = {"sharding_propagation", "recursive_programming"};
  for (int m = 0; m < 2; m++) {
    pd.mode = modes[m];
    for (int i = 0; i < NNETS; i++)
      for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, names[m]);
  }
}

/* Fusion buckets: 4 KB AllReduce buckets launched at their Fused steps, or as their gradients
   are ready (with packed BackwardComm); and comm_fusion closed. */
Test(dryrun_time, fusion_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  pd.comm_fusion.allreduce.mode = SK_FUSION_SIZE, pd.comm_fusion.allreduce.threshold_bytes = 4096;
  for (int i = 0; i < NNETS; i++)
    for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, "4 KB buckets at their Fused steps");
  pd.transformer_opt.grad_computation_allreduce_overlap = true, pd.transformer_opt.enable_communication_fusion = true;
  for (int i = 0; i < NNETS; i++)
    for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, "4 KB buckets launched when ready, packed BackwardComm");
  pd = knobs();
  pd.comm_fusion.closed = true;
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 2, &pd, "comm_fusion closed");
}

/* MatMul ((1, N), (N, 1)) with output strategy (N, 1): a forward ReduceScatter and its
   backward AllGather, the layers after it data parallel (no redistribution). */
static void build_rs_chain(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op fc = OP("fc", SK_OP_MATMUL, x, w);
  SHARD(fc, 0, 1, N), SHARD(fc, 1, N, 1);
  fc.desc.has_out_strategy = true, fc.desc.out_strategy[0] = N, fc.desc.out_strategy[1] = 1;
  sk_graph_op relu = OP("relu", SK_OP_RELU, add_op(n, fc));
  SHARD(relu, 0, N, 1);
  loss_head(n, add_op(n, relu), y, "u", 8, 4);
}

/* The harness's small networks: layer changes (redistributions, moving data by peer access and
   charged), and a forward ReduceScatter with its backward AllGather. */
Test(dryrun_time, built_nets_2_4_8, .timeout = DR_TIMEOUT) {
  static net n;
  sk_autoparallel pd = knobs(), full = knobs();
  full.dataset = SK_DATASET_FULL_BATCH; /* the inputs whole: the moves into the cuts are local */
  char what[128];
  for (int N = 2; N <= 8; N *= 2) {
    build_rs_chain(&n, N);
    snprintf(what, sizeof what, "forward ReduceScatter on %d devices, full_batch", N);
    check_time_net(&n, N, &full, what);
    for (int b = 0; b < 4; b++) {
      const char *name = b == 0 ? "mlp" : b == 1 ? "reduce_scatter" : b == 2 ? "residual" : "layernorm";
      if (b == 0) build_mlp(&n, N);
      else if (b == 1) (void)build_reduce_scatter(&n, N);
      else if (b == 2) build_residual(&n, N);
      else (void)build_layernorm(&n, N);
      snprintf(what, sizeof what, "%s on %d devices", name, N);
      check_time_net(&n, N, &pd, what);
    }
  }
}

/* hsdp: level1 and level2 (gathers and ReduceScatters in buckets, ShardMirrors), level3 (a
   gather before each use), the ReduceScatters launched as ready under overlap. */
Test(dryrun_time, hsdp_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  const sk_hsdp_level levels[] = {SK_HSDP_LEVEL1, SK_HSDP_LEVEL2, SK_HSDP_LEVEL3};
  for (int l = 0; l < 3; l++) {
    pd.hsdp = (sk_hsdp){true, -1, 0, levels[l]};
    for (int i = 0; i < NNETS; i++)
      for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, l == 0 ? "hsdp level1" : l == 1 ? "hsdp level2" : "hsdp level3");
  }
  pd.hsdp.level = SK_HSDP_LEVEL2, pd.transformer_opt.grad_computation_allreduce_overlap = true;
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 2, &pd, "hsdp level2, launched when ready");
  pd = knobs(); /* shards of 2 (a ShardMirror over the other replicas), the sync on a 16-bit wire */
  pd.hsdp = (sk_hsdp){true, 2, 0, SK_HSDP_LEVEL2}, pd.no_gradient_fp32_sync = true;
  run_dt = SK_BF16;
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, "bf16, hsdp level2 in shards of 2, 16-bit sync");
  pd.hsdp.level = SK_HSDP_LEVEL3;
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, "bf16, hsdp level3 in shards of 2, 16-bit sync");
  run_dt = SK_F32;
}

/* Grad accumulation: windows of 2 and 3 micro-steps; each window's mean per micro-step (the
   runtime's step_us / steps over whole windows) against the dry run's. */
Test(dryrun_time, grad_accumulation_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  for (int m = 2; m <= 3; m++) {
    pd.grad_accumulation_step = window = m;
    for (int i = 0; i < NNETS; i++) check_time(nets[i], 2, &pd, m == 2 ? "grad_accumulation_step 2" : "grad_accumulation_step 3");
  }
  pd.grad_accumulation_step = window = 2;
  pd.comm_fusion.allreduce.mode = SK_FUSION_SIZE, pd.comm_fusion.allreduce.threshold_bytes = 4096;
  pd.transformer_opt.grad_computation_allreduce_overlap = true;
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, "grad_accumulation_step 2, 4 KB buckets when ready");
  window = 1;
}

/* Pipelines: 1f1b and gpipe over 2 stages, zero_bubble_v (split backward halves, recompute
   when asked), 4 micro-batches, on 2 and 8 devices (1 and 4 a stage). */
Test(dryrun_time, pipelines_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = pipe2();
  const sk_pipe_scheduler scheds[] = {SK_PIPE_1F1B, SK_PIPE_GPIPE, SK_PIPE_ZERO_BUBBLE_V};
  const char *const names[] = {"1f1b, 2 stages, 4 micro-batches", "gpipe, 2 stages, 4 micro-batches",
                               "zero_bubble_v, 2 stages, 4 micro-batches"};
  pd.pipeline.micro = 4;
  for (int k = 0; k < 3; k++) {
    pd.pipeline.scheduler = scheds[k];
    for (int i = 0; i < NPIPE; i++)
      for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, names[k]);
  }
}

/* Recompute (every operator but the last flagged): the recomputed forwards' FLOPs on the clock,
   with and without a pipeline. */
Test(dryrun_time, recompute_2_8, .timeout = DR_TIMEOUT) {
  static net n;
  sk_autoparallel pd = knobs(), pp = pipe2();
  char what[256];
  for (int i = 0; i < NNETS; i++) {
    snprintf(what, sizeof what, "%s, 8 devices, recompute", nets[i]);
    load_net(&n, nets[i], true);
    check_time_net(&n, 8, &pd, what);
  }
  for (int i = 0; i < NPIPE; i++) {
    snprintf(what, sizeof what, "%s, 2 devices, recompute, 1f1b", nets[i]);
    load_net(&n, nets[i], true);
    check_time_net(&n, 2, &pp, what);
  }
}

/* A hierarchical cluster (2 nodes of 4, 4 of 2): every collective priced by its cheapest
   algorithm on its members' nodes, a redistribution's messages by the link between their nodes,
   a pipeline's Send/Recv across nodes; the same walk. */
Test(dryrun_time, topology_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  const int shapes[2][2] = {{2, 4}, {4, 2}};
  for (int k = 0; k < 2; k++) {
    time_topology = (sk_topology){shapes[k][0], shapes[k][1], {2, 150}, {10, 25}};
    char label[64];
    snprintf(label, sizeof label, "semi_auto on %dx%d", shapes[k][0], shapes[k][1]);
    for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, label);
  }
  pd.hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL2};
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, "hsdp level2 on 4x2");
  pd = pipe2();
  for (int i = 0; i < NPIPE; i++) check_time(nets[i], 8, &pd, "1f1b, 2 stages on 4x2");
  time_topology = (sk_topology){0, 0, {0, 0}, {0, 0}};
}

/* hsdp under a 1f1b pipeline (2 stages, 4 micro-batches, on 2 and 8 devices): level2's
   ReduceScatter per micro-batch, level1 / level3's after the last, the gathers per stage. */
Test(dryrun_time, hsdp_pipeline_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = pipe2();
  const sk_hsdp_level levels[] = {SK_HSDP_LEVEL1, SK_HSDP_LEVEL2, SK_HSDP_LEVEL3};
  const char *const names[] = {"1f1b, hsdp level1", "1f1b, hsdp level2", "1f1b, hsdp level3"};
  pd.pipeline.micro = 4;
  for (int l = 0; l < 3; l++) {
    pd.hsdp = (sk_hsdp){true, -1, 0, levels[l]};
    for (int i = 0; i < NPIPE; i++)
      for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, names[l]);
  }
  pd.hsdp.level = SK_HSDP_LEVEL1, pd.transformer_opt.grad_computation_allreduce_overlap = true;
  for (int i = 0; i < NPIPE; i++) check_time(nets[i], 8, &pd, "1f1b, hsdp level1, launched when ready");
}

/* hsdp under windows of 2 and 3 micro-steps: level2 scatters every micro-step, level1 / level3
   accumulate whole and scatter on the last. */
Test(dryrun_time, hsdp_accumulation_2_8, .timeout = DR_TIMEOUT) {
  sk_autoparallel pd = knobs();
  const sk_hsdp_level levels[] = {SK_HSDP_LEVEL1, SK_HSDP_LEVEL2, SK_HSDP_LEVEL3};
  char label[64];
  for (int m = 2; m <= 3; m++)
    for (int l = 0; l < 3; l++) {
      pd.grad_accumulation_step = window = m, pd.hsdp = (sk_hsdp){true, -1, 0, levels[l]};
      snprintf(label, sizeof label, "grad_accumulation_step %d, hsdp level%d", m, l + 1);
      for (int i = 0; i < NNETS; i++)
        for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, label);
    }
  pd.grad_accumulation_step = window = 2, pd.hsdp.level = SK_HSDP_LEVEL2;
  pd.transformer_opt.grad_computation_allreduce_overlap = true;
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, "grad_accumulation_step 2, hsdp level2, launched when ready");
  window = 1;
}

/* The local norms gathered on device 0 at the update (written to a file here): with and
   without the device's line, under a window (the micro-steps but the last have no update) and
   under a pipeline (the world's gather before the loss's AllReduce). */
Test(dryrun_time, local_norms_2_8, .timeout = DR_TIMEOUT) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/sk_dryrun_norms_%d.txt", (int)getpid());
  sk_autoparallel pd = knobs();
  pd.dump_local_norm = path;
  for (int i = 0; i < NNETS; i++)
    for (int n = 2; n <= 8; n += 6) check_time(nets[i], n, &pd, "local norms dumped");
  pd.device_local_norm = true, pd.grad_accumulation_step = window = 2;
  for (int i = 0; i < NNETS; i++) check_time(nets[i], 8, &pd, "local and device norms dumped, grad_accumulation_step 2");
  window = 1;
  pd = pipe2();
  pd.dump_local_norm = path;
  for (int i = 0; i < NPIPE; i++) check_time(nets[i], 8, &pd, "local norms dumped, 1f1b, 2 stages");
  remove(path);
}

/* What the step time cannot reproduce is refused, naming it; bad input is an argument error. */
Test(dryrun_time, refusals, .timeout = DR_TIMEOUT) {
  static net n;
  static run R;
  sk_dryrun_time t;
  sk_error e;
  memset(&t, 0, sizeof t), memset(&e, 0, sizeof e);
  cr_assert_eq(sk_dryrun_step_time(NULL, &t, &e), SK_ERR_INVALID_ARGUMENT);
  load_net(&n, nets[1], false); /* a cluster that prices nothing runs no clock */
  sk_autoparallel unpriced = knobs();
  run_init_knobs(&R, &n, 2, SK_F32, n.g.optim, 1, &unpriced);
  cr_assert_eq(sk_dryrun_step_time(&R.plan, &t, &e), SK_ERR_UNSUPPORTED, "%s", e.msg);
  cr_assert(strstr(e.msg, "prices no communication"), "%s", e.msg);
  run_free(&R);
  sk_graph_free(&n.g);
  load_net(&n, nets[1], false);
  sk_autoparallel pd = knobs();
  run_init_knobs(&R, &n, 2, SK_F32, n.g.optim, 1, &pd);
  cr_assert_eq(sk_dryrun_step_time(&R.plan, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  run_free(&R);
  sk_graph_free(&n.g);
}
