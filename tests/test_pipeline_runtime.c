/* Pipeline parallel in the runtime (sk_runtime.h with a plan compiled with desc.pipeline): every
   device runs its stage's action list, activations and gradients cross between stages by
   Send/Recv, and the loss and the evaluation are shared by every stage.

   1. N devices train exactly like one device: gpipe and 1f1b, 2 and 4 stages on 8 devices and
      2 stages of 1 device, 4 or 8 micro-batches, 1 or 2 chunks per stage, on the tutorial's MLP
      (tests/runtime_harness.h; a data-parallel MLP where a stage has one device) and on a
      network whose skip connection crosses several chunks (relayed); losses on every device and
      the final parameters (gathered on their stage's devices) against the trainer on the WHOLE
      batch (the mean over micro-batches is the whole batch's mean). The Send count of every
      device is the one the cut implies. f64 within TOL64, f32 within F32_TOL.
   2. Evaluation through the pipeline counts what the trainer counts, on every device, and
      leaves no micro-batch's activations behind.
   3. Activation memory follows the schedule: each device's peak of activations (and of the
      activations' gradients) after create is exactly the most bytes of open chunk slots while
      walking its stage's action list (a slot: what the chunk owns for one micro-batch, opened
      by F, closed after B); gpipe holds m micro-batches, 1f1b stage r holds p - r.
   4. Refusals, each naming what it refuses: a communicator of another size than the world's,
      feeds of the wrong element count, a gather of another stage's parameter, and the
      compiler's grad_accumulation_step with a pipeline (hsdp combines:
      tests/test_pipeline_hsdp.c; parameter_broadcast and local norms: tests/test_feature_pairs.c).
   5. Faults on 2-stage worlds of 2 and 4 devices: every allocation of create, and every
      allocation of the first step, failing in turn on each device ends with an error on every
      device (none by the world's timeout) and nothing outstanding after destroy; the same for
      the allocator failing from the first feed or from evaluate, and for a loss kernel refusing
      a label mid-schedule.
   6. Dropout: each micro-batch draws its rows of the whole batch's mask, so training matches too.

   TOLERANCE as tests/test_runtime.c: f64 1e-12 relative to 1 + |reference| (TOL64; measured at
   most 1.7e-16 here, Adam included), f32 F32_TOL (measured 7.5e-8). The pipeline's micro-batch
   sums change only the order of the gradient's summation.

   Device threads never assert (the harness records, the test's thread asserts); every test has
   a timeout and every world a short one. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "runtime_harness.h"

#define PIPE_TIMEOUT (4 * RT_TIMEOUT)

/* ---- configurations and networks ------------------------------------------------------------ */

typedef struct pcase {
  sk_pipe_scheduler sched;
  int world, stages, micro, interleave;
} pcase;

/* Stages of 4 devices take 4 micro-batches (the MLP cuts the batch 4 ways: 16 rows / 4 = 4),
   stages of 2 or 1 take 8 too. */
static const pcase CASES[] = {
    {SK_PIPE_GPIPE, 8, 2, 4, 1}, {SK_PIPE_1F1B, 8, 2, 4, 1}, {SK_PIPE_GPIPE, 8, 2, 4, 2}, {SK_PIPE_1F1B, 8, 2, 4, 2},
    {SK_PIPE_GPIPE, 8, 4, 8, 1}, {SK_PIPE_1F1B, 8, 4, 8, 1}, {SK_PIPE_GPIPE, 8, 4, 8, 2}, {SK_PIPE_1F1B, 8, 4, 8, 2},
    {SK_PIPE_1F1B, 8, 4, 4, 1},  {SK_PIPE_GPIPE, 2, 2, 8, 1}, {SK_PIPE_1F1B, 2, 2, 4, 1}, {SK_PIPE_1F1B, 2, 2, 8, 2},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static sk_autoparallel knobs_of(const pcase *c) {
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = c->stages, pd.pipeline.micro = c->micro;
  pd.pipeline.scheduler = c->sched, pd.pipeline.interleave = c->interleave;
  pd.output_broadcast = true; /* every device gets the evaluation the trainer's run is compared with */
  return pd;
}

static const char *describe(const pcase *c, const char *net_name) {
  static char buf[128];
  snprintf(buf, sizeof buf, "%s, %s, %d devices in %d stages, %d micro-batches, %d chunk(s) per stage", net_name,
           sk_pipe_scheduler_name(c->sched), c->world, c->stages, c->micro, c->interleave);
  return buf;
}

/* The tutorial's chain (harness) on a stage of N >= 2 devices; on one device, the data-parallel
   MLP (the tutorial's strategies need 2 devices at least). */
static void build_pipe_mlp(net *n, int N) {
  if (N >= 2) build_mlp(n, N);
  else build_dp(n, N);
}

/* A skip connection over several chunks and a second residual: h = x w0; r1 = h + tanh(relu(h
   w1) w2); r2 = r1 + relu(r1 w3); z = r2 u; loss. Cut into 4 or more chunks, h is produced in
   the first and read again by r1 two or more chunks later: it is relayed through the chunks in
   between, and its gradient comes back the same way, summed with a1's. No parameter is read
   twice (the compiler refuses a parameter on two stages). Strategies cut the batch at most 2
   ways (8 micro-batches of 16 rows leave 2). */
static void build_skip(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w0 = add_param(n, "w0", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w1 = add_param(n, "w1", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(n, "w2", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w3 = add_param(n, "w3", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op hm = OP("h", SK_OP_MATMUL, x, w0);
  sk_graph_op a1 = OP("a1", SK_OP_MATMUL, 0, w1), a2 = OP("a2", SK_OP_MATMUL, 0, w2), a3 = OP("a3", SK_OP_MATMUL, 0, w3);
  sk_graph_op r1 = OP("r1", SK_OP_ADD, 0, 0);
  if (N >= 2) {
    SHARD(hm, 0, 2, N / 2), SHARD(hm, 1, N / 2, 1); /* the contraction cut: a forward AllReduce */
    SHARD(a1, 0, 1, N), SHARD(a1, 1, N, 1);
    SHARD(a2, 0, 2, 1), SHARD(a2, 1, 1, N / 2);
    SHARD(r1, 0, 2, N / 2), SHARD(r1, 1, 2, N / 2);
    SHARD(a3, 0, 1, 2), SHARD(a3, 1, 2, N / 2);
  }
  int h = add_op(n, hm);
  a1.inputs[0] = h;
  int f1 = add_op(n, OP("f1", SK_OP_RELU, add_op(n, a1)));
  a2.inputs[0] = f1;
  int f2 = add_op(n, OP("f2", SK_OP_TANH, add_op(n, a2)));
  r1.inputs[0] = h, r1.inputs[1] = f2;
  int s1 = add_op(n, r1);
  a3.inputs[0] = s1;
  int f3 = add_op(n, OP("f3", SK_OP_RELU, add_op(n, a3)));
  int s2 = add_op(n, OP("r2", SK_OP_ADD, s1, f3));
  loss_head(n, s2, y, "u", 8, 4);
}

/* Four blocks MatMul + ReLU annotated on stages 0..3 (used as they are with 4 stages of one
   chunk), the loss head on the last: the middle chunks' slots are the same size (the activation
   received, the MatMul's and the ReLU's outputs), the first holds one tensor fewer and the last
   the logits and the loss more. */
static void build_chain(net *n, int N) {
  (void)N;
  sk_graph_init(&n->g), n->nin = 0;
  int h = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  for (int s = 0; s < 4; s++) {
    char name[16];
    snprintf(name, sizeof name, "w%d", s);
    int w = add_param(n, name, 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
    sk_graph_op mm = OP("mm", SK_OP_MATMUL, h, w), act = OP("act", SK_OP_RELU, 0);
    snprintf(mm.name, sizeof mm.name, "mm%d", s), snprintf(act.name, sizeof act.name, "act%d", s);
    mm.stage = act.stage = s;
    act.inputs[0] = add_op(n, mm);
    h = add_op(n, act);
  }
  int at = n->g.nops;
  loss_head(n, h, y, "u", 8, 4);
  for (int o = at; o < n->g.nops; o++) n->g.ops[o].stage = 3;
}

typedef struct pnet {
  const char *name;
  build_fn build;
} pnet;

static const pnet NETS[] = {{"MLP", build_pipe_mlp}, {"skip", build_skip}};

/* The most chunk boundaries one tensor crosses (2 or more: relayed through a chunk). */
static int longest_crossing(const sk_parallel_plan *p) {
  const sk_graph *g = p->graph;
  int most = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_VALUE) continue;
    int from = p->vstage[g->tensors[t].producer];
    for (int o = 0; o < g->nops; o++)
      for (int k = 0; k < g->ops[o].ninputs; k++)
        if (g->ops[o].inputs[k] == t && p->vstage[o] - from > most) most = p->vstage[o] - from;
  }
  return most;
}

/* ---- what the runtime should hold and send, derived from the plan ---------------------------- */

static int nvstages(const sk_parallel_plan *p) { return p->stages * p->schedule.chunks; }

static bool vstage_on(const sk_parallel_plan *p, int v, int stage) { return sk_pipe_stage_of(&p->schedule, v, NULL) == stage; }

/* Tensor t is produced at or before chunk j and read after it. */
static bool crosses(const sk_parallel_plan *p, int t, int j) {
  const sk_graph *g = p->graph;
  if (g->tensors[t].role != SK_TENSOR_VALUE || p->vstage[g->tensors[t].producer] > j) return false;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t && p->vstage[o] > j) return true;
  return false;
}

/* The chunk of `stage` whose slot holds activation t: the first chunk there that produces it or
   that it crosses into; -1: none. */
static int owner_of(const sk_parallel_plan *p, int t, int stage) {
  const sk_graph *g = p->graph;
  if (g->tensors[t].role != SK_TENSOR_VALUE) return -1;
  for (int v = 0; v < nvstages(p); v++)
    if (vstage_on(p, v, stage) && (p->vstage[g->tensors[t].producer] == v || (v > 0 && crosses(p, t, v - 1)))) return v;
  return -1;
}

static size_t dsize(const sk_graph *g, int t, sk_dtype cdt) {
  sk_dtype dt = g->tensors[t].dtype;
  return sk_dtype_size(sk_exec_is_float(dt) ? cdt : dt);
}

static int64_t layout_count(const sk_layout *l) {
  int64_t s[SK_MAX_DIMS] = {0}, n = 1;
  sk_layout_slice_shape(l, s);
  for (int d = 0; d < l->ndims; d++) n *= s[d];
  return n;
}

/* One micro-batch's slot of chunk v on `stage`: its activations (the tensors it owns and its
   operators' inputs read in another layout) and their gradients. */
static void slot_bytes(const sk_parallel_plan *p, int v, int stage, sk_dtype cdt, uint64_t *acts, uint64_t *grads) {
  const sk_graph *g = p->graph;
  *acts = *grads = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (owner_of(p, t, stage) != v) continue;
    uint64_t b = (uint64_t)sk_parallel_slice_count(p, t) * dsize(g, t, cdt);
    *acts += b;
    if (p->tensors[t].needs_grad) *grads += b;
  }
  for (int o = 0; o < g->nops; o++) {
    if (p->vstage[o] != v) continue;
    cr_assert_neq(p->ops[o].plan.fwd.kind, SK_COLL_REDUCE_SCATTER, "the derivation leaves out ReduceScatter outputs");
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (p->ops[o].moved[k]) *acts += (uint64_t)layout_count(&p->ops[o].kernel_in[k]) * dsize(g, g->ops[o].inputs[k], cdt);
  }
}

/* The most bytes of open slots while `stage` walks its action list. */
static void schedule_peak(const sk_parallel_plan *p, int stage, sk_dtype cdt, uint64_t *acts, uint64_t *grads) {
  const sk_pipe_schedule *s = &p->schedule;
  uint64_t la = 0, lg = 0;
  *acts = *grads = 0;
  for (int k = 0; k < s->count[stage]; k++) {
    const sk_pipe_action *a = &s->actions[stage][k];
    uint64_t sa, sg;
    slot_bytes(p, sk_pipe_virtual_stage(s, stage, a->chunk), stage, cdt, &sa, &sg);
    if (a->kind == SK_PIPE_F) la += sa, lg += sg;
    else la -= sa, lg -= sg;
    *acts = la > *acts ? la : *acts, *grads = lg > *grads ? lg : *grads;
  }
}

/* Every micro-batch's slice of each input the stage reads, held from create on. */
static uint64_t feed_bytes(const sk_parallel_plan *p, int stage, sk_dtype cdt) {
  const sk_graph *g = p->graph;
  uint64_t b = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    bool here = false;
    for (int o = 0; o < g->nops; o++)
      for (int k = 0; k < g->ops[o].ninputs; k++) here |= g->ops[o].inputs[k] == t && sk_parallel_op_on_stage(p, o, stage);
    if (here) b += (uint64_t)p->micro * (uint64_t)sk_parallel_slice_count(p, t) * dsize(g, t, cdt);
  }
  return b;
}

/* The messages one training step sends from a device of `stage`: after each F of chunk v whose
   next chunk is on another stage, every tensor crossing out of v; after each B of chunk v whose
   previous chunk is elsewhere, the gradient of every tensor crossing into v that has one. */
static uint64_t sends_per_step(const sk_parallel_plan *p, int stage) {
  const sk_graph *g = p->graph;
  int V = nvstages(p);
  uint64_t n = 0;
  for (int v = 0; v < V; v++) {
    if (!vstage_on(p, v, stage)) continue;
    for (int t = 0; t < g->ntensors; t++) {
      if (v + 1 < V && !vstage_on(p, v + 1, stage) && crosses(p, t, v)) n++;
      if (v > 0 && !vstage_on(p, v - 1, stage) && crosses(p, t, v - 1) && p->tensors[t].needs_grad) n++;
    }
  }
  return n * (uint64_t)p->micro;
}

/* ---- 1. N devices train like one --------------------------------------------------------------- */

typedef struct worst {
  double loss, param;
  int relayed; /* cases with a tensor crossing two or more boundaries */
} worst;

static void one_case(const pcase *c, const pnet *pn, sk_dtype dt, sk_optim_desc optim, double tol, worst *w) {
  static net n;
  static run R;
  const char *what = describe(c, pn->name);
  sk_autoparallel pd = knobs_of(c);
  pn->build(&n, c->world / c->stages);
  run_init_knobs(&R, &n, c->world, dt, optim, 3, &pd);
  cr_assert_eq(R.plan.nfallbacks, 0, "%s: %d strategies fell back", what, R.plan.nfallbacks);
  cr_assert_eq(R.plan.world_devices, c->world);
  cr_assert_eq(R.plan.stages, c->stages);
  cr_assert_eq(R.plan.micro, c->micro);
  cr_assert_eq(R.plan.schedule.chunks, c->interleave);
  w->relayed += longest_crossing(&R.plan) >= 2;
  run_world(&R);
  expect_all_ok(&R, what);
  errs m = against_trainer(&R, tol, what);
  w->loss = fmax(w->loss, m.loss), w->param = fmax(w->param, m.param);
  for (int d = 0; d < c->world; d++) {
    int stage = sk_parallel_stage_of_rank(&R.plan, d);
    uint64_t want = (uint64_t)R.nsteps * sends_per_step(&R.plan, stage);
    cr_assert_gt(want, 0, "%s: stage %d sends nothing", what, stage);
    cr_assert_eq(coll_calls(&R.dev[d].stats, SK_COLL_SEND), want, "%s: device %d (stage %d) sent %llu messages, want %llu", what,
                 d, stage, (unsigned long long)coll_calls(&R.dev[d].stats, SK_COLL_SEND), (unsigned long long)want);
    cr_assert_eq(R.dev[d].stats.steps, R.nsteps);
  }
  run_free(&R);
  sk_graph_free(&n.g);
}

static void every_case(const pnet *pn, sk_dtype dt, sk_optim_desc optim, double tol) {
  worst w = {0, 0, 0};
  for (int i = 0; i < NCASES; i++) one_case(&CASES[i], pn, dt, optim, tol, &w);
  cr_log_info("%s, %s, %d pipeline configurations vs one device, 3 steps: losses within %.3g, parameters within %.3g "
              "(%d with a relayed tensor)",
              pn->name, sk_dtype_name(dt), NCASES, w.loss, w.param, w.relayed);
  if (pn->build == build_skip) cr_assert_geq(w.relayed, 4, "the skip connection should be relayed in the 4-chunk cuts");
}

Test(pipeline_runtime, mlp_like_one_device, .timeout = PIPE_TIMEOUT) { every_case(&NETS[0], SK_F64, sgd(0.5), TOL64); }

Test(pipeline_runtime, skip_connection_relayed_like_one_device, .timeout = PIPE_TIMEOUT) {
  every_case(&NETS[1], SK_F64, sgd(0.5), TOL64);
}

/* Adam's state lives with its parameter's stage. */
Test(pipeline_runtime, adam_like_one_device, .timeout = PIPE_TIMEOUT) {
  worst w = {0, 0, 0};
  static const pcase cs[] = {{SK_PIPE_1F1B, 8, 4, 8, 2}, {SK_PIPE_GPIPE, 8, 2, 4, 1}};
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 2; k++) one_case(&cs[i], &NETS[k], SK_F64, adam(0.01), TOL64, &w);
  cr_log_info("Adam, f64: losses within %.3g, parameters within %.3g", w.loss, w.param);
}

Test(pipeline_runtime, f32_like_one_device, .timeout = PIPE_TIMEOUT) {
  worst w = {0, 0, 0};
  static const pcase cs[] = {{SK_PIPE_GPIPE, 8, 2, 4, 2}, {SK_PIPE_1F1B, 8, 4, 8, 1}, {SK_PIPE_1F1B, 8, 4, 8, 2},
                             {SK_PIPE_GPIPE, 2, 2, 8, 1}};
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 2; k++) one_case(&cs[i], &NETS[k], SK_F32, sgd(0.5), F32_TOL, &w);
  cr_log_info("f32: losses within %.3g, parameters within %.3g", w.loss, w.param);
}

/* ---- 2. evaluation ------------------------------------------------------------------------------ */

/* After a step: every device's count is the trainer's (against_trainer compares them on every
   device) over the whole batch's 16 rows; evaluate closes every slot it opened (the activations
   left are the feeds, the gradients create's) and nothing stays allocated after destroy. */
Test(pipeline_runtime, evaluation_counts_on_every_device, .timeout = PIPE_TIMEOUT) {
  int cases = 0;
  for (int i = 0; i < NCASES; i++)
    for (int k = 0; k < 2; k++) {
      static net n;
      static run R;
      const pcase *c = &CASES[i];
      const char *what = describe(c, NETS[k].name);
      sk_autoparallel pd = knobs_of(c);
      pd.output_broadcast = (i + k) % 2 == 0; /* half the cases each way */
      NETS[k].build(&n, c->world / c->stages);
      run_init_knobs(&R, &n, c->world, SK_F64, sgd(0.5), 1, &pd);
      R.counting = true;
      cr_assert(R.evaluate);
      run_world(&R);
      expect_all_ok(&R, what);
      if (pd.output_broadcast) against_trainer(&R, TOL64, what);
      for (int d = 0; d < c->world; d++) {
        /* without output_broadcast only the last stage's devices hold the score */
        bool last = sk_parallel_stage_of_rank(&R.plan, d) == sk_pipe_stage_of(&R.plan.schedule, c->stages * R.plan.schedule.chunks - 1, NULL);
        int64_t want = pd.output_broadcast || last ? 16 : 0;
        cr_assert_eq(R.dev[d].rows, want, "%s: device %d: %lld rows, want %lld (output_broadcast %d)", what, d,
                     (long long)R.dev[d].rows, (long long)want, pd.output_broadcast);
        cr_assert_eq(R.dev[d].mem_end.activations, R.dev[d].mem_created.activations,
                     "%s: device %d holds %llu bytes of activations after evaluate, %llu after create", what, d,
                     (unsigned long long)R.dev[d].mem_end.activations, (unsigned long long)R.dev[d].mem_created.activations);
        cr_assert_eq(R.dev[d].mem_end.gradients, R.dev[d].mem_created.gradients);
        cr_assert_eq(R.dev[d].out_after, 0);
        cr_assert_eq(R.dev[d].blocks_after, 0);
      }
      cases++;
      run_free(&R);
      sk_graph_free(&n.g);
    }
  cr_log_info("evaluation through the pipeline: %d runs, every device counts the trainer's", cases);
}

/* ---- 3. activation memory follows the schedule ---------------------------------------------------- */

/* Runs c's plan (no evaluation: it opens a slot per chunk and micro-batch and closes them all at
   its end, so its peak is every micro-batch's, whatever the scheduler) and
   checks every device's peaks against the schedule walk; returns stage `which`'s peak of
   activations above the feeds on its first device. */
static uint64_t peak_case(const pcase *c, const pnet *pn, int which, uint64_t *slot0) {
  static net n;
  static run R;
  const char *what = describe(c, pn->name);
  sk_autoparallel pd = knobs_of(c);
  pn->build(&n, c->world / c->stages);
  run_init_knobs(&R, &n, c->world, SK_F64, sgd(0.5), 2, &pd);
  R.counting = true, R.evaluate = false;
  run_world(&R);
  expect_all_ok(&R, what);
  uint64_t ret = 0;
  int per = c->world / c->stages;
  for (int d = 0; d < c->world; d++) {
    const dev_out *o = &R.dev[d];
    int stage = d / per;
    uint64_t acts, grads;
    schedule_peak(&R.plan, stage, SK_F64, &acts, &grads);
    uint64_t feeds = feed_bytes(&R.plan, stage, SK_F64);
    cr_assert_eq(o->mem_created.activations, feeds, "%s: device %d: %llu bytes of feeds, want %llu", what, d,
                 (unsigned long long)o->mem_created.activations, (unsigned long long)feeds);
    cr_assert_eq(o->mem_end.peak_activations - o->mem_created.activations, acts,
                 "%s: device %d (stage %d): peak activations %llu above the feeds, the schedule holds %llu", what, d, stage,
                 (unsigned long long)(o->mem_end.peak_activations - o->mem_created.activations), (unsigned long long)acts);
    cr_assert_eq(o->mem_end.peak_gradients - o->mem_created.gradients, grads,
                 "%s: device %d (stage %d): peak gradients %llu above create's, the schedule holds %llu", what, d, stage,
                 (unsigned long long)(o->mem_end.peak_gradients - o->mem_created.gradients), (unsigned long long)grads);
    cr_assert_eq(o->mem_end.activations, o->mem_created.activations, "%s: device %d: slots left open", what, d);
    if (d == which * per) ret = acts;
  }
  if (slot0) {
    uint64_t g;
    slot_bytes(&R.plan, sk_pipe_virtual_stage(&R.plan.schedule, which, 0), which, SK_F64, slot0, &g);
  }
  run_free(&R);
  sk_graph_free(&n.g);
  return ret;
}

Test(pipeline_runtime, peak_activations_follow_the_schedule, .timeout = PIPE_TIMEOUT) {
  /* Exact bytes on every device of every configuration. */
  for (int i = 0; i < NCASES; i++)
    for (int k = 0; k < 2; k++) peak_case(&CASES[i], &NETS[k], 0, NULL);
  /* The chain on 4 stages of 2 devices, 8 micro-batches, one chunk each: gpipe holds 8
     micro-batches on every stage, 1f1b p - r on stage r, so stage 0's peak above the feeds
     halves (m / p = 2), and 1f1b's stage 0 holds more than its last stage. */
  const pnet chain = {"chain", build_chain};
  const pcase g = {SK_PIPE_GPIPE, 8, 4, 8, 1}, f = {SK_PIPE_1F1B, 8, 4, 8, 1};
  uint64_t peak[2][4], slot[4];
  for (int r = 0; r < 4; r++) peak[0][r] = peak_case(&g, &chain, r, &slot[r]), peak[1][r] = peak_case(&f, &chain, r, NULL);
  cr_assert_eq(slot[1], slot[2], "the middle chunks' slots: %llu and %llu bytes", (unsigned long long)slot[1],
               (unsigned long long)slot[2]);
  for (int r = 0; r < 4; r++) {
    cr_assert_gt(slot[r], 0);
    cr_assert_eq(peak[0][r], 8 * slot[r], "gpipe stage %d holds %llu bytes, 8 slots of %llu", r, (unsigned long long)peak[0][r],
                 (unsigned long long)slot[r]);
    cr_assert_eq(peak[1][r], (uint64_t)(4 - r) * slot[r], "1f1b stage %d holds %llu bytes, %d slots of %llu", r,
                 (unsigned long long)peak[1][r], 4 - r, (unsigned long long)slot[r]);
  }
  cr_assert_eq(peak[0][0], 2 * peak[1][0]);
  cr_assert_gt(peak[0][0], peak[1][0]);
  cr_assert_gt(peak[1][0], peak[1][3]);
  cr_log_info("chain, 4 stages x 2 devices, 8 micro-batches, f64: slots %llu/%llu/%llu/%llu B; peak activations above the "
              "feeds gpipe %llu/%llu/%llu/%llu B, 1f1b %llu/%llu/%llu/%llu B",
              (unsigned long long)slot[0], (unsigned long long)slot[1], (unsigned long long)slot[2], (unsigned long long)slot[3],
              (unsigned long long)peak[0][0], (unsigned long long)peak[0][1], (unsigned long long)peak[0][2],
              (unsigned long long)peak[0][3], (unsigned long long)peak[1][0], (unsigned long long)peak[1][1],
              (unsigned long long)peak[1][2], (unsigned long long)peak[1][3]);
  /* The interleaved 1f1b of docs/pipeline.md (p 4, v 2, m 8): its stage 0 holds 11 chunks at its
     peak (the simulator's count); in bytes, the schedule walk above. */
  sk_pipe_desc d = {.stages = 4, .micro = 8, .scheduler = SK_PIPE_1F1B, .interleave = 2};
  sk_pipe_schedule s;
  OK(sk_pipe_schedule_make(&d, &s, E));
  sk_pipe_costs costs = {1, 2, 0, 0};
  static sk_pipe_stats st;
  OK(sk_pipe_simulate(&s, &costs, &st, E));
  cr_assert_eq(st.peak_live[0], 11);
  sk_pipe_schedule_free(&s);
}

/* The modelled step time (sk_runtime_stats.step_us) under a link model: every step starts from
   aligned clocks and ends at the last device's end, so it is the same on every device, and with
   one step it is the largest of the devices' spans (clock_us) exactly. */
Test(pipeline_runtime, modelled_step_time_is_the_makespan, .timeout = PIPE_TIMEOUT) {
  static net n;
  static run R;
  const pcase c = {SK_PIPE_1F1B, 4, 4, 4, 1};
  sk_autoparallel pd = knobs_of(&c);
  NETS[0].build(&n, 1);
  run_init_knobs(&R, &n, 4, SK_F64, sgd(0.5), 1, &pd);
  R.link.alpha_us = 5, R.link.gbps = 25;
  R.plan.desc.cluster.device_flops = 1e9;
  R.evaluate = false;
  run_world(&R);
  expect_all_ok(&R, "1f1b, 4 stages, link model");
  double step = R.dev[0].stats.step_us, most = 0;
  for (int d = 0; d < 4; d++) {
    cr_assert_eq(R.dev[d].stats.step_us, step, "device %d: step time %.17g, device 0's %.17g", d, R.dev[d].stats.step_us, step);
    most = fmax(most, R.dev[d].stats.clock_us);
  }
  cr_assert_gt(step, 0);
  cr_assert_eq(step, most, "step time %.17g, the longest device span %.17g", step, most);
  cr_log_info("1f1b on 4 stages, one step: modelled step time %.3f us", step);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* ---- 4. refusals ----------------------------------------------------------------------------------- */

/* Every device that ran stopped at `where` with SK_ERR_INVALID_ARGUMENT and a message holding
   both words; nothing outstanding. */
static void expect_refused_at(const run *R, const char *where, const char *word, const char *word2) {
  cr_assert_neq(R->world_rc, SK_OK, "world: %s", sk_result_name(R->world_rc));
  int ran = 0;
  for (int d = 0; d < R->ndev; d++) {
    const dev_out *o = &R->dev[d];
    if (!o->ran) continue;
    ran++;
    cr_assert_eq(o->rc, SK_ERR_INVALID_ARGUMENT, "device %d: %s (%s)", d, sk_result_name(o->rc), o->msg);
    cr_assert_str_eq(o->where, where, "device %d failed in %s: %s", d, o->where, o->msg);
    cr_assert(strstr(o->msg, word) && strstr(o->msg, word2), "device %d: '%s' should name '%s' and '%s'", d, o->msg, word, word2);
    cr_assert_eq(o->steps, 0);
    cr_assert_eq(o->out_after, 0);
  }
  cr_assert_gt(ran, 0);
}

Test(pipeline_runtime, zero_bubble_v_like_one_device, .timeout = PIPE_TIMEOUT) {
  /* B and W split: the inputs' gradients first, the weights' later from the kept output
     gradients; two chunks per stage in a V (the skip network relays through the V's bottom). */
  worst w = {0, 0, 0};
  static const pcase cs[] = {{SK_PIPE_ZERO_BUBBLE_V, 4, 2, 4, 2}, {SK_PIPE_ZERO_BUBBLE_V, 8, 4, 8, 2},
                             {SK_PIPE_ZERO_BUBBLE_V, 8, 2, 2, 2}};
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 2; k++) one_case(&cs[i], &NETS[k], SK_F64, sgd(0.5), TOL64, &w);
}

/* The plan is for the world (8 devices): a communicator of one stage's size (4), of 2, or of 16
   is refused, naming both counts. */
Test(pipeline_runtime, communicator_of_another_size_refused, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  const pcase c = {SK_PIPE_GPIPE, 8, 2, 4, 1};
  sk_autoparallel pd = knobs_of(&c);
  build_pipe_mlp(&n, 4);
  run_init_knobs(&R, &n, 8, SK_F64, sgd(0.5), 1, &pd);
  cr_assert_eq(R.plan.desc.ndevices, 4);
  R.counting = true;
  static const int sizes[2] = {4, 2};
  for (int i = 0; i < 2; i++) {
    R.ndev = sizes[i];
    run_world(&R);
    char has[32];
    snprintf(has, sizeof has, "has %d", sizes[i]);
    expect_refused_at(&R, "create", "for 8 devices", has);
  }
  run_free(&R);
  sk_graph_free(&n.g);
}

/* Feeds take the whole batch (every micro-batch): a micro-batch's count, one element short, or
   one micro-batch too many are refused naming the input and the counts, and change nothing (the
   devices then train like one device). A device gathering a parameter of another stage is
   refused naming it and its stage. */
typedef struct refusal_log {
  int n;
  sk_result rc[8];
  char msg[8][SK_ERROR_MSG_MAX];
} refusal_log;
static refusal_log rlog[MAXDEV];

static sk_result feed_refusals_device(sk_comm *comm, void *arg) {
  run *R = (run *)arg;
  int rank = sk_comm_rank(comm);
  dev_out *o = &R->dev[rank];
  refusal_log *L = &rlog[rank];
  const sk_graph *g = &R->n->g;
  sk_error e;
  memset(&e, 0, sizeof e);
  o->ran = true;
  sk_runtime *rt = NULL;
  sk_result r = note(o, "create", sk_runtime_create(comm, &R->plan, &R->desc, &rt, &e), &e);
  if (r) return r;
  int x = R->in_t[0], y = R->in_t[1];
  size_t whole_x = (size_t)R->in_n[0], whole_y = (size_t)R->in_n[1];
  size_t micro_x = (size_t)sk_graph_numel(R->plan.graph, x), micro_y = (size_t)sk_graph_numel(R->plan.graph, y);
#define REFUSE(call) (L->rc[L->n] = (call), snprintf(L->msg[L->n], sizeof L->msg[0], "%s", e.msg), L->n++)
  REFUSE(sk_runtime_feed(rt, x, SK_F64, R->data[0][0], micro_x, &e));     /* 0: one micro-batch */
  REFUSE(sk_runtime_feed(rt, x, SK_F64, R->data[0][0], whole_x - 1, &e)); /* 1: one element short */
  REFUSE(sk_runtime_feed(rt, y, SK_I32, R->data[0][1], whole_y + micro_y, &e)); /* 2: a micro-batch too many */
  /* 3: a parameter of the other stage (w1 on stage 0, w3 on stage 1) */
  int other = sk_graph_find(g, sk_parallel_stage_of_rank(&R->plan, rank) == 0 ? "w3" : "w1");
  REFUSE(sk_runtime_gather(rt, other, o->params + R->param_off[other], &e));
#undef REFUSE
  for (int s = 0; !r && s < R->nsteps; s++) {
    for (int i = 0; !r && i < R->n->nin; i++)
      r = note(o, "feed", sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[s][i], (size_t)R->in_n[i], &e), &e);
    if (!r) r = note(o, "step", sk_runtime_step(rt, &o->loss[s], &e), &e);
    if (!r) o->steps++;
  }
  for (int t = 0; !r && t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM && holds_param(R, rank, t))
      r = note(o, "gather", sk_runtime_gather(rt, t, o->params + R->param_off[t], &e), &e);
  sk_runtime_destroy(rt);
  return r;
}

static void expect_logged(int d, int i, const char *word, const char *word2) {
  const refusal_log *L = &rlog[d];
  cr_assert_eq(L->rc[i], SK_ERR_INVALID_ARGUMENT, "device %d, call %d: %s (%s)", d, i, sk_result_name(L->rc[i]), L->msg[i]);
  cr_assert(strstr(L->msg[i], word) && strstr(L->msg[i], word2), "device %d, call %d: '%s' should name '%s' and '%s'", d, i,
            L->msg[i], word, word2);
}

Test(pipeline_runtime, wrong_feed_counts_and_other_stage_gather_refused, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  const pcase c = {SK_PIPE_1F1B, 4, 2, 4, 1};
  sk_autoparallel pd = knobs_of(&c);
  build_pipe_mlp(&n, 2);
  run_init_knobs(&R, &n, 4, SK_F64, sgd(0.5), 2, &pd);
  R.evaluate = false;
  cr_assert_eq(param_stage(&R, sk_graph_find(&n.g, "w1")), 0);
  cr_assert_eq(param_stage(&R, sk_graph_find(&n.g, "w3")), 1);
  memset(rlog, 0, sizeof rlog);
  for (int d = 0; d < MAXDEV; d++) {
    unsigned char *p = R.dev[d].params, *l = R.dev[d].logits, *in = R.dev[d].init;
    memset(&R.dev[d], 0, sizeof R.dev[d]);
    R.dev[d].params = p, R.dev[d].logits = l, R.dev[d].init = in;
  }
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = 4, wd.backend = sk_threads_backend(), wd.timeout_ms = WORLD_TIMEOUT_MS;
  sk_world *w = NULL;
  OK(sk_world_create(&wd, &w, E));
  R.world_rc = sk_world_run(w, feed_refusals_device, &R, NULL);
  snprintf(R.world_msg, sizeof R.world_msg, "%s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  expect_all_ok(&R, "after the refused calls");
  for (int d = 0; d < 4; d++) {
    cr_assert_eq(rlog[d].n, 4);
    expect_logged(d, 0, "feed 'x'", "64 elements given, the tensor has 256");
    expect_logged(d, 1, "feed 'x'", "255 elements given");
    expect_logged(d, 2, "feed 'y'", "20 elements given, the tensor has 16");
    expect_logged(d, 3, d < 2 ? "'w3'" : "'w1'", d < 2 ? "not held by pipeline stage 0" : "not held by pipeline stage 1");
    cr_assert_eq(R.dev[d].steps, 2);
  }
  against_trainer(&R, TOL64, "after the refused calls");
  run_free(&R);
  sk_graph_free(&n.g);
}

/* What a pipeline does not combine with is refused by the compiler, naming both: MindSpore
   refuses grad_accumulation_step with a pipeline (sk_parallel.h cites where). */
Test(pipeline_runtime, compiler_refuses_what_the_pipeline_does_not_combine_with, .timeout = RT_TIMEOUT) {
  static net n;
  build_pipe_mlp(&n, 2);
  const pcase c = {SK_PIPE_1F1B, 4, 2, 4, 1};
  sk_autoparallel pd = knobs_of(&c);
  pd.grad_accumulation_step = 2, pd.ndevices = 4;
  sk_parallel_plan p;
  sk_error e;
  memset(&e, 0, sizeof e);
  sk_result r = sk_parallel_compile(&n.g, &pd, &p, &e);
  cr_assert_eq(r, SK_ERR_INVALID_ARGUMENT, "%s (%s)", sk_result_name(r), e.msg);
  cr_assert(strstr(e.msg, "grad_accumulation_step 2 with a pipeline is refused"), "'%s'", e.msg);
  sk_graph_free(&n.g);
}

/* ---- 5. faults ------------------------------------------------------------------------------------ */

/* The MLP on a 2-stage world (4 micro-batches), counted, Adam, no evaluation. */
static void init_faults_case(run *R, net *n, int nsteps, const pcase *c) {
  sk_autoparallel pd = knobs_of(c);
  build_pipe_mlp(n, c->world / c->stages);
  run_init_knobs(R, n, c->world, SK_F64, adam(0.01), nsteps, &pd);
  R->counting = true, R->evaluate = false;
}

static void init_faults_with(run *R, net *n, int nsteps, sk_pipe_scheduler sched) {
  const pcase c = {sched, 4, 2, 4, 1};
  init_faults_case(R, n, nsteps, &c);
}

/* The sweeps' worlds: 2 stages of 1 and of 2 devices, one chunk or two per stage. */
static const pcase FAULT_CASES[] = {{SK_PIPE_1F1B, 2, 2, 4, 1}, {SK_PIPE_1F1B, 4, 2, 4, 1}, {SK_PIPE_GPIPE, 4, 2, 4, 2}};

/* Every allocation of create failing in turn on each device: that device returns
   SK_ERR_OUT_OF_MEMORY from create; the others fail in create (it is collective: the stage
   split, the groups) or in the first step, none by the timeout; nothing outstanding anywhere.
   Each device's sweep ends at the first k its create does not reach; that run trains clean. */
Test(pipeline_runtime, create_allocation_failures_each_device, .timeout = PIPE_TIMEOUT) {
  for (int c = 0; c < 3; c++) {
    static net n;
    static run R;
    const pcase *pc = &FAULT_CASES[c];
    const char *what = describe(pc, "MLP create");
    init_faults_case(&R, &n, 1, pc);
    R.fail_phase = FAIL_IN_CREATE;
    long calls[4] = {0, 0, 0, 0};
    for (int rank = 0; rank < pc->world; rank++) {
      R.fail_rank = rank;
      long k = 1;
      for (;; k++) {
        R.fail_at = k;
        run_world(&R);
        const dev_out *f = &R.dev[rank];
        if (f->created) {
          expect_all_ok(&R, "a create allocating fewer");
          for (int d = 0; d < pc->world; d++) cr_assert_eq(R.dev[d].out_after, 0);
          break;
        }
        cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "%s: device %d, k = %ld: %s (%s)", what, rank, k, sk_result_name(f->rc), f->msg);
        cr_assert_str_eq(f->where, "create");
        cr_assert_eq(f->cnt.refused, 1);
        expect_all_failed_clean(&R, k, what);
        for (int d = 0; d < pc->world; d++) cr_assert_eq(R.dev[d].steps, 0);
      }
      calls[rank] = k - 1;
      cr_assert_gt(calls[rank], 10, "%s: device %d: create took only %ld allocations", what, rank, calls[rank]);
    }
    cr_log_info("%s: every allocation refused in turn, %ld / %ld / %ld / %ld per device", what, calls[0], calls[1], calls[2],
                calls[3]);
    run_free(&R);
    sk_graph_free(&n.g);
  }
}

/* Every allocation of the first step (slots, their moved inputs, the sends' copies) failing in
   turn on each device: that device's step returns SK_ERR_OUT_OF_MEMORY; every other device's
   step fails too, none by the timeout (they wait on Send/Recv with the failed device, or on
   their stage's collectives); nothing outstanding anywhere. Each sweep ends at the first k the
   step does not reach, which must train clean. */
Test(pipeline_runtime, step_allocation_failures_each_device, .timeout = PIPE_TIMEOUT) {
  static char seen[4096];
  seen[0] = 0;
  for (int c = 0; c < 3; c++) {
    static net n;
    static run R;
    const pcase *pc = &FAULT_CASES[c];
    const char *what = describe(pc, "MLP step");
    init_faults_case(&R, &n, 2, pc);
    R.fail_phase = FAIL_IN_STEP;
    long calls[4] = {0, 0, 0, 0};
    for (int rank = 0; rank < pc->world; rank++) {
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
        cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "%s: device %d, k = %ld: %s in %s (%s)", what, rank, k,
                     sk_result_name(f->rc), f->where, f->msg);
        cr_assert_str_eq(f->where, "step", "%s: device %d, k = %ld: %s", what, rank, k, f->msg);
        cr_assert(strstr(f->msg, "out of memory"), "%s: device %d, k = %ld: '%s'", what, rank, k, f->msg);
        if (!strstr(seen, f->msg) && strlen(seen) + strlen(f->msg) + 2 < sizeof seen) strcat(seen, f->msg), strcat(seen, "\n");
        expect_all_failed_clean(&R, k, what);
        for (int d = 0; d < pc->world; d++) {
          cr_assert(R.dev[d].ran, "%s, k = %ld: device %d did not run", what, k, d);
          cr_assert_eq(R.dev[d].steps, 0, "%s, k = %ld: device %d finished its step", what, k, d);
        }
      }
      calls[rank] = k - 1;
      cr_assert_gt(calls[rank], 4, "%s: device %d: the step allocated only %ld times", what, rank, calls[rank]);
    }
    cr_log_info("%s: every allocation refused in turn, %ld / %ld / %ld / %ld per device", what, calls[0], calls[1], calls[2],
                calls[3]);
    run_free(&R);
    sk_graph_free(&n.g);
  }
  int kinds = 0;
  for (const char *q = seen; (q = strchr(q, '\n')); q++) kinds++;
  cr_assert(strstr(seen, "out of memory for micro-batch 3 of chunk 3") && strstr(seen, "out of memory for a send's copy"),
            "the sweeps should reach every slot and the sends' copies:\n%s", seen);
  cr_log_info("the failing devices gave %d distinct messages (every slot of every chunk, the sends' copies)", kinds);
}

/* The allocator failing from the first feed, or from evaluate, on each device in turn; and a
   label outside [0, C) in micro-batch 2 of step 1 (the last stage's loss kernel refuses it while
   the first stage is mid-schedule): the failing device names its error, every other device
   returns one too (none by the timeout), nothing outstanding. */
Test(pipeline_runtime, feed_evaluate_and_kernel_failures_take_the_world_down, .timeout = PIPE_TIMEOUT) {
  static net n;
  static run R;
  for (int sc = 0; sc < 2; sc++) {
    init_faults_with(&R, &n, 2, sc ? SK_PIPE_GPIPE : SK_PIPE_1F1B);
    R.evaluate = true;
    for (int rank = 0; rank < 4; rank++)
      for (int phase = FAIL_FROM_FEED; phase <= FAIL_FROM_EVALUATE; phase++) {
        R.fail_rank = rank, R.fail_phase = phase;
        run_world(&R);
        const dev_out *f = &R.dev[rank];
        cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "device %d, phase %d: %s (%s)", rank, phase, sk_result_name(f->rc), f->msg);
        cr_assert_str_eq(f->where, phase == FAIL_FROM_FEED ? "feed" : "evaluate");
        cr_assert(strstr(f->msg, phase == FAIL_FROM_FEED ? "feed '" : "out of memory for micro-batch 0"), "'%s'", f->msg);
        expect_all_failed_clean(&R, phase, phase == FAIL_FROM_FEED ? "from the first feed" : "from evaluate");
        for (int d = 0; d < 4; d++) cr_assert_eq(R.dev[d].steps, phase == FAIL_FROM_FEED ? 0 : 2);
      }
    R.fail_rank = -1;
    ((int32_t *)R.data[1][1])[9] = 99; /* row 9: micro-batch 2, row 1 of its 4 */
    run_world(&R);
    cr_assert_neq(R.world_rc, SK_OK);
    for (int d = 0; d < 4; d++) {
      const dev_out *o = &R.dev[d];
      cr_assert(o->ran);
      cr_assert_str_eq(o->where, "step", "device %d failed in %s: %s", d, o->where, o->msg);
      cr_assert_eq(o->steps, 1);
      cr_assert_neq(o->rc, SK_OK);
      cr_assert_neq(o->rc, SK_ERR_TIMEOUT, "device %d: %s", d, o->msg);
      cr_assert_eq(o->out_after, 0);
    }
    int refused = 0; /* the last stage's device holding rows 0..1 of the micro-batch's 4 */
    for (int d = 2; d < 4; d++)
      refused += R.dev[d].rc == SK_ERR_INVALID_ARGUMENT && strstr(R.dev[d].msg, "operator 'loss'") && strstr(R.dev[d].msg, "label 99");
    cr_assert_eq(refused, 1, "one device of the last stage should name the loss and the label: '%s' / '%s'", R.dev[2].msg,
                 R.dev[3].msg);
    run_free(&R);
    sk_graph_free(&n.g);
  }
}

/* Dropout: micro-batch i draws rows i*B/m .. (i+1)*B/m-1 of the whole batch's mask (keyed by the
   operator's seed and the element's place in the whole batch), so the pipeline trains like one
   device. (Before the fix every micro-batch reused micro-batch 0's rows: losses 2.9e-2 apart.) */
Test(pipeline_runtime, dropout_like_one_device, .timeout = PIPE_TIMEOUT) {
  worst w = {0, 0, 0};
  const pnet drop = {"dropout", build_dropout};
  static const pcase cs[] = {{SK_PIPE_1F1B, 8, 2, 4, 1}, {SK_PIPE_GPIPE, 8, 4, 8, 1}};
  for (int i = 0; i < 2; i++) one_case(&cs[i], &drop, SK_F64, sgd(0.5), TOL64, &w);
}
