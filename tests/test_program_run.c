/* The stages' programs (sk_program.h) against what the runtime does when it runs them
   (sk_runtime.h executes plan->programs[stage] for every training step):
   1. REPLAY: one f64 training step on every device; its statistics rows (kind, plan group id,
      calls, bytes) equal the sums over the device's stage program of every communicating step
      (ForwardComm, UndoComm, BackwardComm, Mirror, ParamGather, GradReduceScatter, a Recompute
      of one, Send) by (collective kind, group id), bytes sk_program_bytes(step, SK_F64). The
      redistributions' rows (SK_COLL_NONE) count what a rank sends, which the program does not
      carry: their calls only. 1f1b with recomputation and model-parallel MatMuls,
      zero_bubble_v, and a plan without a pipeline (recomputation, comm_fusion closed: every
      fused Mirror a bucket of its own).
   2. HSDP AND FUSION: the same with optimizer parallel (level1, level2, level3; under a pipeline
      and without) and fused buckets (comm_fusion open, with and without overlap): a fused bucket is one call, its Fused step; its members' steps (bucket
      >= 0) move nothing of their own; ShardMirror an AllReduce.
   3. DETERMINISM: 2 stages x 4 devices with hsdp trained 2 steps, five fresh worlds: every
      device's memory peaks (sk_runtime_memory) the same each time.
   4. ACCOUNTING: a pipeline's per-step peaks of activations, gradients and communication on
      each device are the program's: walking its Alloc / Free steps (each counted as
      sk_program_memory_kind says) gives, per kind, the most held above what create left; the
      runtime's peak_* minus its bytes right after create.
   5. CREATE: what each device holds right after create, kind by kind, is its stage's create
      section (optimizer states: as many as the optimizer keeps), under a pipeline with hsdp,
      gradient accumulation, recomputation, moved inputs and outputs and a forward
      ReduceScatter, and without a pipeline.

   Device threads never assert: each records into its dev_out, the test's thread asserts. */
#include <criterion/criterion.h>

#include "runtime_harness.h"

#define PR_TIMEOUT 60
#define MAXROWS 64

/* ---- a network with every kind of collective: forward AllReduce and ReduceScatter (with the
   AllGather of its backward), BackwardComm, Mirrors, moves between layouts ------------------- */

/* N devices a stage (4, or 2): x w1 cut on the contraction (forward AllReduce, w1's Mirror over
   the batch cut); h w2 cut by columns (h replicated: its gradient's BackwardComm); w3 with an
   out_strategy (forward ReduceScatter, AllGather backward); the data-parallel loss head (u's
   Mirror). Every operator but the loss head flagged for recomputation. */
static void build_replay(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w1 = add_param(n, "w1", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(n, "w2", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w3 = add_param(n, "w3", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op fc1 = OP("fc1", SK_OP_MATMUL, x, w1);
  SHARD(fc1, 0, 2, N / 2), SHARD(fc1, 1, N / 2, 1);
  int h1 = add_op(n, OP("relu1", SK_OP_RELU, add_op(n, fc1)));
  sk_graph_op fc2 = OP("fc2", SK_OP_MATMUL, h1, w2);
  SHARD(fc2, 0, 1, 1), SHARD(fc2, 1, 1, N);
  int h2 = add_op(n, OP("tanh2", SK_OP_TANH, add_op(n, fc2)));
  int a = N == 2 ? 1 : 2, b = 2, c = N / (a * b);
  sk_graph_op fc3 = OP("fc3", SK_OP_MATMUL, h2, w3);
  SHARD(fc3, 0, a, b), SHARD(fc3, 1, b, c);
  fc3.desc.has_out_strategy = true, fc3.desc.out_strategy[0] = a * b, fc3.desc.out_strategy[1] = c;
  int h3 = add_op(n, OP("relu3", SK_OP_RELU, add_op(n, fc3)));
  int head = n->g.nops;
  loss_head(n, h3, y, "u", 8, 4);
  for (int o = 0; o < head; o++) n->g.ops[o].recompute = true;
}

static sk_autoparallel pipe_knobs(int micro, sk_pipe_scheduler sched) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.pipeline.stages = 2, d.pipeline.micro = micro, d.pipeline.scheduler = sched;
  return d;
}

static sk_autoparallel pipe_hsdp_knobs(int micro, sk_pipe_scheduler sched, sk_hsdp_level level) {
  sk_autoparallel d = pipe_knobs(micro, sched);
  d.hsdp = (sk_hsdp){true, -1, 0, level}; /* threshold 0: every replicated parameter shards */
  return d;
}

/* ---- one world: create, `nsteps` steps, the statistics and memory right after the last ------- */

/* Unlike the harness's device_main nothing runs after the steps (a gather allocates
   communication buffers, which would move the peaks). */
static sk_result steps_only(sk_comm *comm, void *arg) {
  run *R = (run *)arg;
  dev_out *o = &R->dev[sk_comm_rank(comm)];
  sk_error e;
  memset(&e, 0, sizeof e);
  o->ran = true, o->rc = SK_OK, o->steps = 0; /* what an earlier world of this run recorded goes */
  sk_runtime *rt = NULL;
  sk_result r = note(o, "create", sk_runtime_create(comm, &R->plan, &R->desc, &rt, &e), &e);
  if (!r) sk_runtime_memory_get(rt, &o->mem_created), o->created = true;
  for (int s = 0; !r && s < R->nsteps; s++) {
    for (int i = 0; !r && i < R->n->nin; i++)
      r = note(o, "feed", sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[s][i], (size_t)R->in_n[i], &e), &e);
    if (!r) r = note(o, "step", sk_runtime_step(rt, &o->loss[s], &e), &e);
    if (!r) o->steps++;
  }
  if (rt) sk_runtime_stats_get(rt, &o->stats), sk_runtime_memory_get(rt, &o->mem_end);
  sk_runtime_destroy(rt);
  return r;
}

static void run_steps(run *R, const char *what) {
  sk_world_desc wd = {0};
  wd.ndevices = R->ndev, wd.backend = sk_threads_backend(), wd.timeout_ms = WORLD_TIMEOUT_MS;
  sk_world *w = NULL;
  OK(sk_world_create(&wd, &w, E));
  R->world_rc = sk_world_run(w, steps_only, R, NULL);
  snprintf(R->world_msg, sizeof R->world_msg, "%s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  expect_all_ok(R, what);
}

/* Compiles build_replay for `world` devices with the knobs of pd and runs `nsteps` f64 steps. */
static void run_replay_net(run *R, net *n, int world, const sk_autoparallel *pd, int nsteps, const char *what) {
  int stages = pd->pipeline.stages > 1 ? pd->pipeline.stages : 1;
  build_replay(n, world / stages);
  run_init_knobs(R, n, world, SK_F64, sgd(0.1), nsteps, pd);
  cr_assert_eq(R->plan.nfallbacks, 0, "%s: %d strategies fell back", what, R->plan.nfallbacks);
  run_steps(R, what);
}

/* ---- the program replayed: calls and bytes by (collective kind, plan group) ------------------ */

typedef struct tally {
  sk_coll_kind kind;
  int group;
  uint64_t calls, bytes;
} tally;

typedef struct tallies {
  int n;
  tally row[MAXROWS];
} tallies;

static void tally_add(tallies *t, sk_coll_kind kind, int group, uint64_t bytes) {
  int i = 0;
  while (i < t->n && !(t->row[i].kind == kind && t->row[i].group == group)) i++;
  if (i == t->n) {
    cr_assert_lt(t->n, MAXROWS, "more than %d (kind, group) rows", MAXROWS);
    t->row[t->n++] = (tally){kind, group, 0, 0};
  }
  t->row[i].calls++, t->row[i].bytes += bytes;
}

static const tally *tally_find(const tallies *t, sk_coll_kind kind, int group) {
  for (int i = 0; i < t->n; i++)
    if (t->row[i].kind == kind && t->row[i].group == group) return &t->row[i];
  return NULL;
}

static bool is_move(sk_parallel_step_kind k) {
  return k == SK_PSTEP_MOVE || k == SK_PSTEP_MOVE_BACK || k == SK_PSTEP_OUT_MOVE || k == SK_PSTEP_OUT_MOVE_BACK;
}

/* The collective program step ps runs, as sk-sim --dump-program names it (sk__prog_put_comm);
   false for a step that communicates nothing. */
static bool step_collective(const sk_parallel_plan *p, const sk_program_step *ps, sk_coll_kind *kind) {
  if (ps->kind == SK_PSTEP_SEND) return *kind = SK_COLL_SEND, true;
  if (ps->kind == SK_PSTEP_FUSED) return *kind = ps->coll, true;
  if (ps->kind == SK_PSTEP_SHARD_MIRROR) return *kind = SK_COLL_ALLREDUCE, true;
  if (ps->bucket >= 0) return false; /* a member: its bucket's Fused step moves it */
  if (ps->kind >= SK_PSTEP_ALLOC && ps->kind != SK_PSTEP_RECOMPUTE) return false;
  if (ps->kind == SK_PSTEP_UPDATE) return false;
  const sk_parallel_step *s = &p->steps[ps->index];
  if (is_move(s->kind)) return *kind = SK_COLL_NONE, ps->group >= 0;
  if (ps->count <= 0) return false;
  switch (s->kind) {
    case SK_PSTEP_FORWARD_COMM: *kind = s->comm.kind; return true;
    case SK_PSTEP_UNDO_COMM: *kind = SK_COLL_ALLGATHER; return true; /* count > 0: a ReduceScatter's */
    case SK_PSTEP_BACKWARD_COMM:
    case SK_PSTEP_MIRROR: *kind = SK_COLL_ALLREDUCE; return true;
    case SK_PSTEP_PARAM_GATHER: *kind = SK_COLL_ALLGATHER; return true;
    case SK_PSTEP_GRAD_REDUCE_SCATTER: *kind = SK_COLL_REDUCE_SCATTER; return true;
    default: return false;
  }
}

/* Stage `stage`'s program replayed; moves count calls only (bytes 0). */
static void replay_program(const sk_parallel_plan *p, int stage, tallies *out) {
  const sk_program *pg = &p->programs[stage];
  memset(out, 0, sizeof *out);
  for (int i = 0; i < pg->nsteps; i++) {
    sk_coll_kind kind;
    if (!step_collective(p, &pg->steps[i], &kind)) continue;
    tally_add(out, kind, pg->steps[i].group, kind == SK_COLL_NONE ? 0 : sk_program_bytes(&pg->steps[i], SK_F64));
  }
}

/* A device's statistics rows as tallies (a move's bytes dropped: the program does not carry them). */
static void runtime_rows(const sk_runtime_stats *st, tallies *out) {
  memset(out, 0, sizeof *out);
  cr_assert_lt(st->nrows, SK_RUNTIME_COMM_ROWS, "the statistics ran out of rows (the last sums the rest)");
  for (int i = 0; i < st->nrows; i++) {
    const sk_runtime_comm_row *r = &st->rows[i];
    cr_assert_lt(out->n, MAXROWS);
    out->row[out->n++] = (tally){r->kind, r->group_id, r->calls, r->kind == SK_COLL_NONE ? 0 : r->bytes};
  }
}

static const char *kind_name(sk_coll_kind k) { return k == SK_COLL_NONE ? "Move" : sk_coll_kind_ms_name(k); }

/* Every row of one side found on the other with the same calls and bytes. Returns how many
   rows were compared. */
static int expect_rows_equal(const tallies *prog, const tallies *rt, int dev, const char *what) {
  int compared = 0;
  for (int side = 0; side < 2; side++) {
    const tallies *a = side ? rt : prog, *b = side ? prog : rt;
    for (int i = 0; i < a->n; i++) {
      const tally *x = &a->row[i], *y = tally_find(b, x->kind, x->group);
      cr_assert_not_null(y, "%s: device %d: %s on g%d: %llu calls in the %s, none in the %s", what, dev, kind_name(x->kind),
                         x->group, (unsigned long long)x->calls, side ? "runtime" : "program", side ? "program" : "runtime");
      cr_assert(x->calls == y->calls && x->bytes == y->bytes,
                "%s: device %d: %s on g%d: the program %llu calls %llu bytes, the runtime %llu calls %llu bytes", what, dev,
                kind_name(x->kind), x->group, (unsigned long long)(side ? y : x)->calls,
                (unsigned long long)(side ? y : x)->bytes, (unsigned long long)(side ? x : y)->calls,
                (unsigned long long)(side ? x : y)->bytes);
      compared += side == 0;
    }
  }
  return compared;
}

/* One step of the plan pd on `world` devices, every device's rows against its stage's program. */
static void expect_replay(const sk_autoparallel *pd, int world, const char *what) {
  static net n;
  static run R;
  run_replay_net(&R, &n, world, pd, 1, what);
  int rows = 0;
  for (int d = 0; d < world; d++) {
    tallies prog, rt;
    replay_program(&R.plan, sk_parallel_stage_of_rank(&R.plan, d), &prog);
    runtime_rows(&R.dev[d].stats, &rt);
    cr_assert_gt(prog.n, 1, "%s: device %d: the program communicates on %d (kind, group)s", what, d, prog.n);
    rows += expect_rows_equal(&prog, &rt, d, what);
  }
  cr_log_info("%s: %d devices, %d (kind, group) rows equal to the programs'", what, world, rows);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* Whether some step of any stage's program is of kind k (k RECOMPUTE: of plan step kind `of`). */
static bool program_has(const sk_parallel_plan *p, sk_parallel_step_kind k, sk_parallel_step_kind of) {
  for (int s = 0; s < p->stages; s++)
    for (int i = 0; i < p->programs[s].nsteps; i++) {
      const sk_program_step *ps = &p->programs[s].steps[i];
      if (ps->kind == k && (k != SK_PSTEP_RECOMPUTE || p->steps[ps->index].kind == of)) return true;
    }
  return false;
}

/* The network has what the replay is meant to cover, under each plan. */
static void expect_coverage(const sk_autoparallel *pd, int world, const char *what) {
  static net n;
  static run R;
  int stages = pd->pipeline.stages > 1 ? pd->pipeline.stages : 1;
  build_replay(&n, world / stages);
  run_init_knobs(&R, &n, world, SK_F64, sgd(0.1), 1, pd);
  const sk_parallel_step_kind want[] = {SK_PSTEP_FORWARD_COMM, SK_PSTEP_UNDO_COMM, SK_PSTEP_BACKWARD_COMM, SK_PSTEP_MIRROR,
                                        SK_PSTEP_MOVE, SK_PSTEP_SEND};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    cr_assert(program_has(&R.plan, want[i], want[i]) || (want[i] == SK_PSTEP_SEND && !R.plan.vstage), "%s: no %s step", what,
              sk_parallel_step_name(want[i]));
  cr_assert(program_has(&R.plan, SK_PSTEP_RECOMPUTE, SK_PSTEP_FORWARD_COMM), "%s: no ForwardComm recomputed", what);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(program_run, the_network_covers_every_collective_step, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_knobs(4, SK_PIPE_1F1B);
  expect_coverage(&pd, 8, "1f1b");
  pd = pipe_knobs(4, SK_PIPE_ZERO_BUBBLE_V);
  expect_coverage(&pd, 8, "zero_bubble_v");
  memset(&pd, 0, sizeof pd);
  expect_coverage(&pd, 4, "no pipeline");
}

Test(program_run, replay_1f1b_recompute, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_knobs(4, SK_PIPE_1F1B);
  expect_replay(&pd, 8, "1f1b, 2 stages x 4 devices, 4 micro-batches, recompute");
}

Test(program_run, replay_zero_bubble_v, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_knobs(4, SK_PIPE_ZERO_BUBBLE_V);
  expect_replay(&pd, 8, "zero_bubble_v, 2 stages x 4 devices, 4 micro-batches, recompute");
}

Test(program_run, replay_without_a_pipeline_fusion_closed, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.comm_fusion.closed = true; /* every fused Mirror its own bucket, one call as the program's step */
  expect_replay(&pd, 4, "no pipeline, 4 devices, recompute, comm_fusion closed");
}

/* ---- 2. hsdp and fused buckets: the shard groups' gathers, scatters and partial Mirrors ------ */

/* Whether some step of stage 0's program is a member of a fused bucket of collective c. */
static bool fuses(const sk_parallel_plan *p, sk_coll_kind c) {
  for (int i = 0; i < p->programs[0].nsteps; i++)
    if (p->programs[0].steps[i].kind == SK_PSTEP_FUSED && p->programs[0].steps[i].coll == c) return true;
  return false;
}

Test(program_run, replay_hsdp_under_a_pipeline, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_hsdp_knobs(4, SK_PIPE_1F1B, SK_HSDP_LEVEL1);
  expect_replay(&pd, 8, "1f1b + hsdp level1, 2 stages x 4 devices, 4 micro-batches");
  pd = pipe_hsdp_knobs(4, SK_PIPE_ZERO_BUBBLE_V, SK_HSDP_LEVEL2);
  expect_replay(&pd, 8, "zero_bubble_v + hsdp level2, 2 stages x 4 devices, 4 micro-batches");
  pd = pipe_hsdp_knobs(4, SK_PIPE_1F1B, SK_HSDP_LEVEL3);
  pd.transformer_opt.grad_computation_allreduce_overlap = true;
  expect_replay(&pd, 8, "1f1b + hsdp level3 + overlap, 2 stages x 4 devices, 4 micro-batches");
}

/* Without a pipeline: fused Mirrors, gathers and ReduceScatters in comm_fusion's buckets. */
static sk_autoparallel plain_hsdp_knobs(sk_hsdp_level level, bool overlap) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.hsdp = (sk_hsdp){true, 2, 0, level}; /* shard_size 2: a ShardMirror over the replicas left */
  d.transformer_opt.grad_computation_allreduce_overlap = overlap;
  return d;
}

Test(program_run, replay_fused_without_a_pipeline, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd); /* comm_fusion auto: the Mirrors in one bucket per group */
  expect_replay(&pd, 4, "no pipeline, 4 devices, comm_fusion auto");
  pd.transformer_opt.grad_computation_allreduce_overlap = true;
  expect_replay(&pd, 4, "no pipeline, 4 devices, comm_fusion auto, overlap");
  pd = plain_hsdp_knobs(SK_HSDP_LEVEL1, false);
  expect_replay(&pd, 8, "no pipeline, hsdp level1 shard_size 2, 8 devices");
  pd = plain_hsdp_knobs(SK_HSDP_LEVEL3, true);
  expect_replay(&pd, 8, "no pipeline, hsdp level3 shard_size 2, overlap, 8 devices");
}

Test(program_run, the_fused_plans_fuse, .timeout = PR_TIMEOUT) {
  static net n;
  static run R;
  sk_autoparallel pd = plain_hsdp_knobs(SK_HSDP_LEVEL1, false);
  build_replay(&n, 8);
  run_init_knobs(&R, &n, 8, SK_F64, sgd(0.1), 1, &pd);
  cr_assert(fuses(&R.plan, SK_COLL_ALLGATHER) && fuses(&R.plan, SK_COLL_REDUCE_SCATTER), "hsdp level1: no fused gather or scatter");
  cr_assert(program_has(&R.plan, SK_PSTEP_SHARD_MIRROR, SK_PSTEP_SHARD_MIRROR), "shard_size 2 of 8: no ShardMirror");
  run_free(&R);
  sk_graph_free(&n.g);
  memset(&pd, 0, sizeof pd);
  build_replay(&n, 4);
  run_init_knobs(&R, &n, 4, SK_F64, sgd(0.1), 1, &pd);
  cr_assert(fuses(&R.plan, SK_COLL_ALLREDUCE), "comm_fusion auto: no fused Mirror");
  run_free(&R);
  sk_graph_free(&n.g);
}

/* ---- 3. the memory peaks do not depend on the run ------------------------------------------------ */

static bool same_peaks(const sk_runtime_memory *a, const sk_runtime_memory *b) {
  return a->peak_parameters == b->peak_parameters && a->peak_gradients == b->peak_gradients &&
         a->peak_optimizer_state == b->peak_optimizer_state && a->peak_activations == b->peak_activations &&
         a->peak_communication == b->peak_communication && a->peak == b->peak;
}

static void expect_same_peaks_5_runs(const sk_autoparallel *pd, const char *what) {
  static net n;
  static run R;
  sk_runtime_memory first[8];
  run_replay_net(&R, &n, 8, pd, 2, what);
  cr_assert(program_has(&R.plan, SK_PSTEP_PARAM_GATHER, SK_PSTEP_PARAM_GATHER), "%s: nothing sharded", what);
  for (int d = 0; d < 8; d++) first[d] = R.dev[d].mem_end;
  for (int k = 1; k < 5; k++) {
    run_steps(&R, what);
    for (int d = 0; d < 8; d++) {
      const sk_runtime_memory *a = &first[d], *b = &R.dev[d].mem_end;
      cr_assert(same_peaks(a, b),
                "%s: device %d, run %d: peaks (parameters, gradients, state, activations, communication, total) "
                "%llu %llu %llu %llu %llu %llu, run 0: %llu %llu %llu %llu %llu %llu",
                what, d, k, (unsigned long long)b->peak_parameters, (unsigned long long)b->peak_gradients,
                (unsigned long long)b->peak_optimizer_state, (unsigned long long)b->peak_activations,
                (unsigned long long)b->peak_communication, (unsigned long long)b->peak, (unsigned long long)a->peak_parameters,
                (unsigned long long)a->peak_gradients, (unsigned long long)a->peak_optimizer_state,
                (unsigned long long)a->peak_activations, (unsigned long long)a->peak_communication, (unsigned long long)a->peak);
    }
  }
  cr_log_info("%s: 5 runs, device 0's peak %llu bytes each time", what, (unsigned long long)first[0].peak);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(program_run, peaks_deterministic_1f1b_hsdp_level1, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_hsdp_knobs(4, SK_PIPE_1F1B, SK_HSDP_LEVEL1);
  expect_same_peaks_5_runs(&pd, "1f1b + hsdp level1 + recompute, 2 stages x 4 devices, 4 micro-batches, 2 steps");
}

Test(program_run, peaks_deterministic_zero_bubble_v_hsdp_level2, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_hsdp_knobs(4, SK_PIPE_ZERO_BUBBLE_V, SK_HSDP_LEVEL2);
  expect_same_peaks_5_runs(&pd, "zero_bubble_v + hsdp level2 + recompute, 2 stages x 4 devices, 4 micro-batches, 2 steps");
}

/* ---- 4. the runtime's per-step peaks are the program's --------------------------------------- */

enum { WALK_ACTS, WALK_GRADS, WALK_COMM, WALK_PARAMS, WALK_KINDS };

/* Stage `stage`'s program walked: the most bytes of each kind its Alloc steps hold at once. */
static void program_peaks(const sk_parallel_plan *p, int stage, uint64_t peak[WALK_KINDS]) {
  const sk_program *pg = &p->programs[stage];
  uint64_t now[WALK_KINDS] = {0};
  for (int k = 0; k < WALK_KINDS; k++) peak[k] = 0;
  for (int i = 0; i < pg->nsteps; i++) {
    const sk_program_step *s = &pg->steps[i];
    if (s->kind != SK_PSTEP_ALLOC && s->kind != SK_PSTEP_FREE) continue;
    static const int walk[SK_MEM_KINDS] = {WALK_PARAMS, WALK_GRADS, -1, WALK_ACTS, WALK_COMM};
    int k = walk[sk_program_memory_kind(p, s)];
    cr_assert_geq(k, 0, "stage %d step %d: a step's buffer counted as optimizer state", stage, i);
    uint64_t b = sk_program_bytes(s, SK_F64);
    if (s->kind == SK_PSTEP_FREE) {
      cr_assert_geq(now[k], b, "stage %d step %d frees more than is held", stage, i);
      now[k] -= b;
      continue;
    }
    now[k] += b;
    if (now[k] > peak[k]) peak[k] = now[k];
  }
}

/* with_comm: the communication kind too (hsdp's runtime takes fusion buffers at each gather, not
   program buffers). The parameters' peak above create is the gathered slices'. */
static void expect_peaks_of_program(const sk_autoparallel *pd, bool with_comm, const char *what) {
  static net n;
  static run R;
  run_replay_net(&R, &n, 8, pd, 1, what);
  for (int d = 0; d < 8; d++) {
    uint64_t want[WALK_KINDS];
    program_peaks(&R.plan, sk_parallel_stage_of_rank(&R.plan, d), want);
    const sk_runtime_memory *c = &R.dev[d].mem_created, *e = &R.dev[d].mem_end;
    uint64_t got[WALK_KINDS] = {e->peak_activations - c->activations, e->peak_gradients - c->gradients,
                                e->peak_communication - c->communication, e->peak_parameters - c->parameters};
    static const char *const names[WALK_KINDS] = {"activations", "gradients", "communication", "parameters"};
    for (int k = 0; k < WALK_KINDS; k++) {
      if (k == WALK_COMM && !with_comm) continue;
      cr_assert_eq(got[k], want[k], "%s: device %d: %s peak %llu bytes above create's, the program's %llu", what, d, names[k],
                   (unsigned long long)got[k], (unsigned long long)want[k]);
    }
    cr_assert_eq(e->activations, c->activations, "%s: device %d: activations left after the step", what, d);
    cr_assert_eq(e->parameters, c->parameters, "%s: device %d: gathered slices left after the step", what, d);
    cr_assert_gt(want[WALK_ACTS], 0, "%s: device %d: the program holds no activations", what, d);
  }
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(program_run, step_peaks_are_the_programs_1f1b, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_knobs(4, SK_PIPE_1F1B);
  expect_peaks_of_program(&pd, true, "1f1b + recompute, 2 stages x 4 devices, 4 micro-batches");
}

Test(program_run, step_peaks_are_the_programs_zero_bubble_v, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_knobs(4, SK_PIPE_ZERO_BUBBLE_V);
  expect_peaks_of_program(&pd, true, "zero_bubble_v + recompute, 2 stages x 4 devices, 4 micro-batches");
}

Test(program_run, step_peaks_are_the_programs_hsdp, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_hsdp_knobs(4, SK_PIPE_1F1B, SK_HSDP_LEVEL1);
  expect_peaks_of_program(&pd, false, "1f1b + hsdp level1 + recompute, 2 stages x 4 devices, 4 micro-batches");
  pd = pipe_hsdp_knobs(4, SK_PIPE_1F1B, SK_HSDP_LEVEL3);
  expect_peaks_of_program(&pd, false, "1f1b + hsdp level3 + recompute, 2 stages x 4 devices, 4 micro-batches");
  pd = plain_hsdp_knobs(SK_HSDP_LEVEL3, false);
  expect_peaks_of_program(&pd, false, "hsdp level3 + recompute, no pipeline, 8 devices");
}

/* ---- 5. what create holds is the create section's ------------------------------------------- */

/* After create, every device holds exactly its stage's create section, kind by kind; the
   optimizer's states are as many as it keeps; `must` names buffers the section has to list. */
static void expect_create_is_the_section(const sk_autoparallel *pd, int accumulate, sk_dtype dt, sk_optim_desc optim,
                                         unsigned must, const char *what) {
  static net n;
  static run R;
  sk_autoparallel knobs = *pd;
  knobs.grad_accumulation_step = accumulate;
  int stages = pd->pipeline.stages > 1 ? pd->pipeline.stages : 1;
  build_replay(&n, 8 / stages);
  run_init_knobs(&R, &n, 8, dt, optim, 1, &knobs);
  run_steps(&R, what);
  for (int d = 0; d < 8; d++) {
    const sk_program *pg = &R.plan.programs[sk_parallel_stage_of_rank(&R.plan, d)];
    uint64_t want[SK_MEM_KINDS] = {0};
    unsigned kinds = 0;
    int states = 0, params = 0;
    for (int i = 0; i < pg->ncreate; i++) {
      const sk_program_step *ps = &pg->create[i];
      cr_assert_eq(ps->kind, SK_PSTEP_ALLOC, "%s: create step %d is not an Alloc", what, i);
      want[sk_program_memory_kind(&R.plan, ps)] += sk_program_bytes(ps, dt);
      kinds |= 1u << ps->buffer, states += ps->buffer == SK_PBUF_STATE;
      params += (ps->buffer == SK_PBUF_SHARD_GRAD || (ps->buffer == SK_PBUF_GRAD && !R.plan.tensors[ps->tensor].opt_size)) &&
                sk_graph_trainable(&n.g, ps->tensor);
    }
    const sk_runtime_memory *c = &R.dev[d].mem_created;
    uint64_t got[SK_MEM_KINDS] = {c->parameters, c->gradients, c->optimizer_state, c->activations, c->communication};
    static const char *const names[SK_MEM_KINDS] = {"parameters", "gradients", "optimizer", "activations", "communication"};
    for (int k = 0; k < SK_MEM_KINDS; k++)
      cr_assert_eq(got[k], want[k], "%s: device %d: %s after create %llu bytes, the create section's %llu", what, d, names[k],
                   (unsigned long long)got[k], (unsigned long long)want[k]);
    cr_assert_gt(params, 0, "%s: device %d: no parameter gradient in the section", what, d);
    cr_assert_eq(states, params * sk_optim_nstates(&optim), "%s: device %d: %d optimizer states for %d parameters (%s)", what,
                 d, states, params, sk_optim_kind_name(optim.kind));
    cr_assert_eq(kinds & must, must, "%s: device %d: the section lists buffers %#x of %#x", what, d, kinds & must, must);
  }
  run_free(&R);
  sk_graph_free(&n.g);
}

#define BUF(b) (1u << (b))

Test(program_run, create_is_the_create_section, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_hsdp_knobs(4, SK_PIPE_1F1B, SK_HSDP_LEVEL1);
  expect_create_is_the_section(&pd, 1, SK_F64, adam(0.01), BUF(SK_PBUF_STATE), "1f1b + hsdp level1, 2 stages x 4 devices");
  pd = pipe_hsdp_knobs(4, SK_PIPE_ZERO_BUBBLE_V, SK_HSDP_LEVEL2);
  expect_create_is_the_section(&pd, 1, SK_F64, momentum(0.01, 0.9), BUF(SK_PBUF_STATE),
                               "zero_bubble_v + hsdp level2, 2 stages x 4 devices");
  pd = plain_hsdp_knobs(SK_HSDP_LEVEL2, false);
  expect_create_is_the_section(&pd, 2, SK_F64, adam(0.01), BUF(SK_PBUF_ACC), "hsdp level2, grad_accumulation_step 2, 8 devices");
  memset(&pd, 0, sizeof pd);
  expect_create_is_the_section(&pd, 2, SK_F64, sgd(0.1), 0, "no pipeline, no hsdp, grad_accumulation_step 2, 8 devices");
}

/* f16 / bf16 runs: the wire buffer and the 16-bit shadows are the section's too. */
Test(program_run, create_section_lists_the_16_bit_wires, .timeout = PR_TIMEOUT) {
  sk_autoparallel pd = pipe_hsdp_knobs(4, SK_PIPE_1F1B, SK_HSDP_LEVEL1);
  pd.no_gradient_fp32_sync = true; /* the gradient sync in 16 bits: shadows of the sharded gradients */
  expect_create_is_the_section(&pd, 1, SK_F16, adam(0.01), BUF(SK_PBUF_RS_SHADOWS) | BUF(SK_PBUF_WIRE), "f16, 1f1b + hsdp level1, 16-bit gradient sync");
  memset(&pd, 0, sizeof pd); /* comm_fusion auto: the Mirrors fused, through their shadows */
  pd.no_gradient_fp32_sync = true;
  pd.transformer_opt.enable_communication_fusion = true;
  expect_create_is_the_section(&pd, 1, SK_BF16, momentum(0.01, 0.9), BUF(SK_PBUF_SHADOWS) | BUF(SK_PBUF_WIRE),
                               "bf16, no pipeline, fused 16-bit Mirrors, packed BackwardComm");
  memset(&pd, 0, sizeof pd);
  pd.fp32_communication = true; /* nothing in 16 bits on the wire */
  expect_create_is_the_section(&pd, 1, SK_F16, sgd(0.1), 0, "f16, fp32_communication");
}
