/* Optimizer parallel (MindSpore's hsdp, sk_opt_shard.h) through the compiler (sk_parallel.h) and
   the runtime (sk_runtime.h), against the single-device trainer (the harness of
   tests/runtime_harness.h, shared with tests/test_runtime.c).

   1. The plan: which parameters shard (opt_size, opt_mirror, opt_why), where ParamGather,
      ParamRelease (level3) and GradReduceScatter stand, no Mirror step for a sharded parameter,
      the partial Mirror group in the program text, a threshold above every parameter and one
      device leaving the program as it is without hsdp, bad configurations refused by name.
   2. Training: level1 and level3, Momentum and Adam, 2 / 4 / 8 devices in f64, a weight read by
      two operators, a partial shard_size and an f32 run: N devices train like one device (losses,
      the parameters gathered at the end, evaluation), TOL64 / F32_TOL as in test_runtime.c.
   3. Memory: parameters and optimizer state fall to the shards; gathered slices are freed by the
      end of the step; the peaks (level1 holds every gathered slice at once, level3 one at a time).
   4. Communication (sk_runtime_stats): AllGather and ReduceScatter bytes per step, level3's
      second gather, the partial Mirror, comm_fusion's allgather / reducescatter modes.
   5. Faults: every allocation of create, and every allocation of a step, failing in turn on one
      device of 4 with hsdp on: a clean error on every device, no hang, no leak.
   6. parameter_broadcast (sk_runtime_parameter_broadcast): every device draws its model from
      seed + rank; after the broadcast each replica holds its owner's draw (round robin in name
      order), per shard under hsdp, initial_rank honoured, a wrong cur_rank refused on every
      device; training then equals the trainer started from the gathered model.
   7. Gradient accumulation: every level like the trainer accumulating the same way; level2's
      sums at the shards' size (without accumulation level2 is level1).
   8. bf16 with no_gradient_fp32_sync: the sharded gradients' ReduceScatters and the partial
      Mirror travel in 16 bits (their bytes halve, the shadows counted as communication), the
      losses change, both within HALF_TOL of the trainer; the overlap gives the same numbers,
      fp32_communication f32 again; under accumulation at every level the bytes halve too. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"

#include "runtime_harness.h"
#include "expect_bad.h"

#define PROGRAM_MAX 65536

/* ---- helpers ---------------------------------------------------------------------------------- */

static sk_hsdp hsdp_of(int shard_size, int64_t threshold_kb, sk_hsdp_level level) {
  sk_hsdp h = {true, shard_size, threshold_kb, level};
  return h;
}

/* The knobs: everything default but hsdp. */
static sk_autoparallel knobs_of(sk_hsdp h) {
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.hsdp = h;
  return pd;
}

static int tensor_named(const sk_graph *g, const char *name) {
  for (int t = 0; t < g->ntensors; t++)
    if (!strcmp(g->tensors[t].name, name)) return t;
  cr_assert_fail("no tensor '%s'", name);
  return -1;
}

static bool op_reads(const sk_graph *g, int o, int t) {
  for (int k = 0; k < g->ops[o].ninputs; k++)
    if (g->ops[o].inputs[k] == t) return true;
  return false;
}

/* Whether step i is about tensor t as an input (the steps with a slot). */
static bool step_on(const sk_parallel_plan *p, int i, sk_parallel_step_kind kind, int t) {
  const sk_parallel_step *s = &p->steps[i];
  return s->kind == kind && s->op >= 0 && p->graph->ops[s->op].inputs[s->slot] == t;
}

static int count_on(const sk_parallel_plan *p, sk_parallel_step_kind kind, int t) {
  int n = 0;
  for (int i = 0; i < p->nsteps; i++) n += step_on(p, i, kind, t);
  return n;
}

/* The first step of `kind` of an operator reading t (-1: none). */
static int first_op_step(const sk_parallel_plan *p, sk_parallel_step_kind kind, int t) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == kind && p->steps[i].op >= 0 && op_reads(p->graph, p->steps[i].op, t)) return i;
  return -1;
}

static int first_reader(const sk_graph *g, int t) {
  for (int o = 0; o < g->nops; o++)
    if (op_reads(g, o, t)) return o;
  return -1;
}

static void compile(const net *n, int ndev, const sk_autoparallel *knobs, sk_parallel_plan *p) {
  sk_autoparallel pd;
  if (knobs) pd = *knobs;
  else memset(&pd, 0, sizeof pd);
  pd.ndevices = ndev;
  OK(sk_parallel_compile(&n->g, &pd, p, E));
}

static char *program_text(const sk_parallel_plan *p, int rank) {
  char *buf = (char *)malloc(PROGRAM_MAX);
  cr_assert_not_null(buf);
  size_t len = sk_parallel_format_program(p, rank, buf, PROGRAM_MAX);
  cr_assert_lt(len, PROGRAM_MAX, "program text truncated");
  return buf;
}

/* Two plans with the same steps, one for one (and the same text on device 0). */
static void expect_same_program(const sk_parallel_plan *a, const sk_parallel_plan *b, const char *what) {
  cr_assert_eq(a->nsteps, b->nsteps, "%s: %d steps, without hsdp %d", what, a->nsteps, b->nsteps);
  for (int i = 0; i < a->nsteps; i++) {
    const sk_parallel_step *x = &a->steps[i], *y = &b->steps[i];
    cr_assert(x->kind == y->kind && x->op == y->op && x->slot == y->slot && x->comm.kind == y->comm.kind &&
                  x->comm.axes == y->comm.axes && x->comm.op == y->comm.op && x->comm.scale == y->comm.scale,
              "%s: step %d differs (%s, without hsdp %s)", what, i, sk_parallel_step_name(x->kind),
              sk_parallel_step_name(y->kind));
  }
  char *ta = program_text(a, 0), *tb = program_text(b, 0);
  cr_assert_str_eq(ta, tb, "%s: the program text differs", what);
  free(ta), free(tb);
}

/* Per parameter: the bytes of its shard (its slice when whole) and of its model-parallel slice
   when sharded, in dtype dt. */
static void param_bytes(const sk_parallel_plan *p, sk_dtype dt, uint64_t *shards, uint64_t *gathered, uint64_t *largest) {
  *shards = *gathered = 0;
  if (largest) *largest = 0;
  for (int t = 0; t < p->graph->ntensors; t++) {
    if (p->graph->tensors[t].role != SK_TENSOR_PARAM) continue;
    uint64_t slice = (uint64_t)sk_parallel_slice_count(p, t) * sk_dtype_size(dt);
    int s = p->tensors[t].opt_size;
    *shards += s ? slice / (uint64_t)s : slice;
    if (s) *gathered += slice;
    if (s && largest && slice > *largest) *largest = slice;
  }
}

static int sharded_params(const sk_parallel_plan *p) {
  int n = 0;
  for (int t = 0; t < p->graph->ntensors; t++) n += p->graph->tensors[t].role == SK_TENSOR_PARAM && p->tensors[t].opt_size > 0;
  return n;
}

/* One weight read by two data-parallel MatMuls (x [16, 8] -> w -> ReLU -> w -> ReLU -> loss
   head): both read it in its own layout, so it shards; its gradient sums both readers'. */
static void build_shared(net *n, int N) {
  (void)N;
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int h1 = add_op(n, OP("relu1", SK_OP_RELU, add_op(n, OP("fc1", SK_OP_MATMUL, x, w))));
  int h2 = add_op(n, OP("relu2", SK_OP_RELU, add_op(n, OP("fc2", SK_OP_MATMUL, h1, w))));
  loss_head(n, h2, y, "u", 8, 4);
}

/* ---- 1. the plan ------------------------------------------------------------------------------ */

/* The tutorial's MLP on 8 devices: fc1 ((2, 4), (4, 1)) leaves w1 [16, 16] cut 4 ways by rows
   over 2 replicas ({0,4}, {1,5}, ...), fc2 ((1, 8), (8, 1)) cuts w2 over every device (no
   replica), the data-parallel head keeps w3 [16, 4] whole on all 8. */
Test(hsdp, plan_which_parameters_shard_and_where_steps_stand) {
  static net n;
  build_mlp(&n, 8);
  sk_parallel_plan p, base;
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, SK_HSDP_LEVEL1));
  compile(&n, 8, &pd, &p);
  compile(&n, 8, NULL, &base);
  const sk_graph *g = &n.g;
  int w1 = tensor_named(g, "w1"), w2 = tensor_named(g, "w2"), w3 = tensor_named(g, "w3");
  cr_assert_eq(p.tensors[w1].opt_size, 2, "w1: opt_size %d", p.tensors[w1].opt_size);
  cr_assert_eq(p.tensors[w1].opt_mirror, 1);
  cr_assert_str_eq(p.tensors[w1].opt_why, "");
  cr_assert_eq(p.tensors[w2].opt_size, 0, "w2 has no replica");
  cr_assert(strstr(p.tensors[w2].opt_why, "no replicas"), "w2: '%s'", p.tensors[w2].opt_why);
  cr_assert_eq(p.tensors[w3].opt_size, 8, "w3: opt_size %d", p.tensors[w3].opt_size);
  cr_assert_eq(p.tensors[w3].opt_mirror, 1);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role != SK_TENSOR_PARAM) cr_assert_eq(p.tensors[t].opt_size, 0, "'%s' is no parameter", g->tensors[t].name);
  cr_assert_eq(count_steps(&p, SK_PSTEP_PARAM_RELEASE), 0, "level1 releases nothing before the backward");
  const int sharded[2] = {w1, w3};
  for (int i = 0; i < 2; i++) {
    int t = sharded[i], fwd = first_op_step(&p, SK_PSTEP_FORWARD, t), reader = first_reader(g, t);
    cr_assert_geq(fwd, 0);
    int gather = -1;
    for (int j = 0; j < fwd; j++)
      if (step_on(&p, j, SK_PSTEP_PARAM_GATHER, t) && p.steps[j].op == p.steps[fwd].op) gather = j;
    cr_assert_geq(gather, 0, "'%s': no ParamGather before its first Forward (step %d)", g->tensors[t].name, fwd);
    cr_assert_eq(count_on(&p, SK_PSTEP_PARAM_GATHER, t), 1, "'%s' is read once: one ParamGather", g->tensors[t].name);
    cr_assert_eq(count_on(&p, SK_PSTEP_GRAD_REDUCE_SCATTER, t), 1);
    int bwd = -1, rs = -1;
    for (int j = 0; j < p.nsteps; j++) {
      if (p.steps[j].kind == SK_PSTEP_BACKWARD && p.steps[j].op == reader) bwd = j;
      if (step_on(&p, j, SK_PSTEP_GRAD_REDUCE_SCATTER, t)) rs = j;
    }
    cr_assert(bwd >= 0 && rs > bwd, "'%s': GradReduceScatter at %d, its first reader's Backward at %d", g->tensors[t].name, rs,
              bwd);
    cr_assert_eq(p.steps[rs].op, reader);
    cr_assert_eq(count_on(&p, SK_PSTEP_MIRROR, t), 0, "'%s' is fully sharded: no Mirror", g->tensors[t].name);
    cr_assert_eq(count_on(&base, SK_PSTEP_MIRROR, t), 1, "'%s' has its Mirror without hsdp", g->tensors[t].name);
  }
  /* nothing else changed: two ParamGathers and two GradReduceScatters in, two Mirrors out */
  cr_assert_eq(p.nsteps, base.nsteps + 2 + 2 - 2);
  char *text = program_text(&p, 0);
  cr_assert(strstr(text, "\n#1 ParamGather fc1 op=MatMul input=1 tensor=w1 rows=[0:2] shards=2 coll=AllGather group=g1 "
                         "ranks={0,4} bytes=256 bucket=0\n"), "%s", text);
  cr_assert(strstr(text, " tensor=w3 rows=[0:2] shards=8 coll=AllGather group=g0 ranks={0,1,2,3,4,5,6,7} "), "%s", text);
  cr_assert(strstr(text, " GradReduceScatter fc1 op=MatMul input=1 tensor=w1 rows=[0:2] shards=2 coll=ReduceScatter(sum) "
                         "group=g1 ranks={0,4} bytes=256 bucket=3\n"), "%s", text);
  cr_assert(!strstr(text, " mirror="), "fully sharded: no Mirror group\n%s", text);
  free(text);
  text = program_text(&p, 5); /* rank 5: second of {1,5}, rows 2..4 of its slice [4:8] */
  cr_assert(strstr(text, " tensor=w1 rows=[6:8] shards=2 coll=AllGather group=g1 ranks={1,5} "), "%s", text);
  free(text);
  sk_parallel_free(&p), sk_parallel_free(&base);
  sk_graph_free(&n.g);
}

/* MindSpore's Parameter(..., parallel_optimizer=False): w3 opted out stays whole, keeps its
   Mirror and gets no gather or scatter; w1 shards as before. */
static void build_mlp_w3_whole(net *n, int N) {
  build_mlp(n, N);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_set_parallel_optimizer(&n->g, tensor_named(&n->g, "w3"), false, &e), SK_OK, "%s", e.msg);
}

Test(hsdp, plan_parallel_optimizer_false_keeps_the_parameter_whole) {
  static net n;
  build_mlp_w3_whole(&n, 8);
  sk_parallel_plan p;
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, SK_HSDP_LEVEL1));
  compile(&n, 8, &pd, &p);
  int w1 = tensor_named(&n.g, "w1"), w3 = tensor_named(&n.g, "w3");
  cr_assert_eq(p.tensors[w1].opt_size, 2, "w1 still shards");
  cr_assert_eq(p.tensors[w3].opt_size, 0, "w3 opted out");
  cr_assert_str_eq(p.tensors[w3].opt_why, "parallel_optimizer=False");
  cr_assert_eq(count_on(&p, SK_PSTEP_PARAM_GATHER, w3), 0);
  cr_assert_eq(count_on(&p, SK_PSTEP_GRAD_REDUCE_SCATTER, w3), 0);
  cr_assert_eq(count_on(&p, SK_PSTEP_MIRROR, w3), 1, "w3's gradient is summed whole");
  sk_error e;
  EXPECT_BAD(sk_graph_set_parallel_optimizer(&n.g, tensor_named(&n.g, "x"), false, &e), &e, "is not a parameter");
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}

static void check_w3_whole(const run *R, int N) {
  int w3 = tensor_named(R->plan.graph, "w3");
  cr_assert_eq(R->plan.tensors[w3].opt_size, 0, "%d devices: w3 sharded", N);
  cr_assert_gt(sharded_params(&R->plan), 0, "%d devices: nothing sharded", N);
}

Test(hsdp, parallel_optimizer_false_trains_like_the_trainer, .timeout = RT_TIMEOUT) {
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, SK_HSDP_LEVEL1));
  errs a = each_device_count_knobs("hsdp level1, w3 parallel_optimizer=False, Adam", build_mlp_w3_whole, check_w3_whole,
                                   adam(0.01), 4, &pd);
  cr_log_info("parallel_optimizer=False: worst relative difference %.3g (losses), %.3g (parameters)", a.loss, a.param);
}

/* shard_size 2 < w3's 8 replicas: w3 shards 2 ways ({0,1}, {2,3}, ...) and its gradient is
   summed over the rest of its replicas ({0,2,4,6} for rank 0) after the ReduceScatter. */
Test(hsdp, plan_partial_shard_size_keeps_a_mirror_group) {
  static net n;
  build_mlp(&n, 8);
  sk_parallel_plan p;
  sk_autoparallel pd = knobs_of(hsdp_of(2, 0, SK_HSDP_LEVEL1));
  compile(&n, 8, &pd, &p);
  int w1 = tensor_named(&n.g, "w1"), w3 = tensor_named(&n.g, "w3");
  cr_assert_eq(p.tensors[w3].opt_size, 2);
  cr_assert_eq(p.tensors[w3].opt_mirror, 4);
  cr_assert_eq(p.tensors[w1].opt_size, 2);
  cr_assert_eq(p.tensors[w1].opt_mirror, 1, "w1's 2 replicas are all in its shard group");
  cr_assert_eq(count_on(&p, SK_PSTEP_MIRROR, w3), 0, "the partial Mirror belongs to the GradReduceScatter step");
  char *text = program_text(&p, 0);
  cr_assert(strstr(text, " tensor=w3 rows=[0:8] shards=2 coll=ReduceScatter(sum) group=g3 ranks={0,1} bytes=256 mirror=g4 "
                         "mirror_ranks={0,2,4,6} bucket=2\n"), "%s", text);
  cr_assert(strstr(text, " tensor=w3 rows=[0:8] shards=2 coll=AllGather group=g3 ranks={0,1} bytes=256 bucket=1\n"), "%s", text);
  cr_assert(strstr(text, "\n#36 WaitFused coll=ReduceScatter(sum)\n#37 GradsReady\n"
                         "#38 ShardMirror w3 coll=AllReduce(sum) group=g4 ranks={0,2,4,6} bytes=128\n#39 Update parameters\n"),
            "the partial Mirror after the ReduceScatters: %s", text);
  free(text);
  text = program_text(&p, 7);
  cr_assert(strstr(text, " tensor=w3 rows=[8:16] shards=2 coll=ReduceScatter(sum) group=g3 ranks={6,7} bytes=256 mirror=g4 "
                         "mirror_ranks={1,3,5,7} bucket=2\n"), "%s", text);
  free(text);
  /* shard_size larger than the replica group: clamped to it (w1: 2 replicas) */
  sk_parallel_free(&p);
  pd = knobs_of(hsdp_of(4, 0, SK_HSDP_LEVEL1));
  compile(&n, 8, &pd, &p);
  cr_assert_eq(p.tensors[w1].opt_size, 2, "shard_size 4 on 2 replicas: clamped");
  cr_assert_eq(p.tensors[w3].opt_size, 4);
  cr_assert_eq(p.tensors[w3].opt_mirror, 2);
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}

/* level3: each read gathers and releases after its forward; the backward gathers again. */
Test(hsdp, plan_level3_releases_and_gathers_again_for_the_backward) {
  static const build_fn nets[2] = {build_mlp, build_shared};
  for (int b = 0; b < 2; b++) {
    static net n;
    nets[b](&n, 8);
    sk_parallel_plan p, l1;
    sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, SK_HSDP_LEVEL3));
    compile(&n, 8, &pd, &p);
    pd.hsdp.level = SK_HSDP_LEVEL1;
    compile(&n, 8, &pd, &l1);
    const sk_graph *g = &n.g;
    int first_bwd = -1;
    for (int i = 0; i < p.nsteps && first_bwd < 0; i++)
      if (p.steps[i].kind == SK_PSTEP_BACKWARD) first_bwd = i;
    cr_assert_gt(first_bwd, 0);
    int nsharded = 0;
    for (int t = 0; t < g->ntensors; t++) {
      if (!p.tensors[t].opt_size) continue;
      nsharded++;
      int reads = 0;
      for (int o = 0; o < g->nops; o++)
        for (int k = 0; k < g->ops[o].ninputs; k++) reads += g->ops[o].inputs[k] == t;
      cr_assert_eq(p.tensors[t].opt_size, l1.tensors[t].opt_size);
      cr_assert_eq(count_on(&p, SK_PSTEP_PARAM_RELEASE, t), reads, "'%s': a release per forward read", g->tensors[t].name);
      cr_assert_eq(count_on(&p, SK_PSTEP_PARAM_GATHER, t), 2 * reads, "'%s': gathered per read, forward and backward",
                   g->tensors[t].name);
      cr_assert_eq(count_on(&l1, SK_PSTEP_PARAM_GATHER, t), reads);
      for (int i = 0; i < p.nsteps; i++) {
        const sk_parallel_step *s = &p.steps[i];
        if (step_on(&p, i, SK_PSTEP_PARAM_RELEASE, t)) { /* right after its reader's forward (and forward comm) */
          cr_assert_lt(i, first_bwd);
          int j = i - 1;
          while (j >= 0 && p.steps[j].kind == SK_PSTEP_PARAM_RELEASE) j--;
          if (j >= 0 && p.steps[j].kind == SK_PSTEP_FORWARD_COMM) j--;
          cr_assert(j >= 0 && p.steps[j].kind == SK_PSTEP_FORWARD && p.steps[j].op == s->op,
                    "'%s': release at step %d does not follow its reader's Forward", g->tensors[t].name, i);
        }
        if (step_on(&p, i, SK_PSTEP_PARAM_GATHER, t) && i > first_bwd) { /* before its reader's Backward */
          int j = i + 1;
          while (j < p.nsteps && !(p.steps[j].kind == SK_PSTEP_BACKWARD && p.steps[j].op == s->op)) j++;
          cr_assert_lt(j, p.nsteps, "'%s': a backward gather at %d without its Backward", g->tensors[t].name, i);
          for (int m = i + 1; m < j; m++) cr_assert(!step_on(&p, m, SK_PSTEP_PARAM_RELEASE, t));
        }
      }
      cr_assert_eq(count_on(&p, SK_PSTEP_GRAD_REDUCE_SCATTER, t), 1);
    }
    cr_assert_gt(nsharded, 0);
    cr_assert_gt(count_steps(&p, SK_PSTEP_PARAM_RELEASE), 0);
    char *text = program_text(&p, 0);
    cr_assert(strstr(text, " ParamRelease "), "%s", text);
    free(text);
    sk_parallel_free(&p), sk_parallel_free(&l1);
    sk_graph_free(&n.g);
  }
}

/* A parameter some operator reads in another layout (the residual net's w: 'h' reads it cut
   (2, 1), 's' data parallel through a move) stays whole, and says so. */
Test(hsdp, plan_moved_parameter_stays_whole) {
  static net n;
  build_residual(&n, 4);
  sk_parallel_plan p;
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, SK_HSDP_LEVEL1));
  compile(&n, 4, &pd, &p);
  int w = tensor_named(&n.g, "w"), u = tensor_named(&n.g, "u");
  cr_assert_eq(p.tensors[w].opt_size, 0);
  cr_assert(strstr(p.tensors[w].opt_why, "another layout"), "w: '%s'", p.tensors[w].opt_why);
  cr_assert_eq(count_on(&p, SK_PSTEP_PARAM_GATHER, w), 0);
  cr_assert_gt(count_on(&p, SK_PSTEP_MIRROR, w), 0, "a whole parameter keeps its Mirrors");
  cr_assert_eq(p.tensors[u].opt_size, 4, "u is read once in its own layout");
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}

/* A threshold above every parameter, or one device: nothing shards and the program is the one
   without hsdp, step for step. */
Test(hsdp, plan_nothing_sharded_is_the_plain_program) {
  static net n;
  build_mlp(&n, 8);
  const int devices[2] = {8, 1};
  const int64_t thresholds[2] = {1024, 0}; /* 1 MB against parameters of 1 KB; every parameter */
  for (int c = 0; c < 2; c++) {
    for (int level = SK_HSDP_LEVEL1; level < SK_HSDP_LEVEL_COUNT; level++) {
      sk_parallel_plan p, base;
      sk_autoparallel pd = knobs_of(hsdp_of(-1, thresholds[c], (sk_hsdp_level)level));
      compile(&n, devices[c], &pd, &p);
      compile(&n, devices[c], NULL, &base);
      char what[64];
      snprintf(what, sizeof what, "%d devices, threshold %lld KB, %s", devices[c], (long long)thresholds[c],
               sk_hsdp_level_name((sk_hsdp_level)level));
      for (int t = 0; t < n.g.ntensors; t++) {
        if (n.g.tensors[t].role != SK_TENSOR_PARAM) continue;
        cr_assert_eq(p.tensors[t].opt_size, 0, "%s: '%s' sharded", what, n.g.tensors[t].name);
        cr_assert(strstr(p.tensors[t].opt_why, c == 0 ? "threshold" : "no replicas"), "%s: '%s': '%s'", what,
                  n.g.tensors[t].name, p.tensors[t].opt_why);
      }
      expect_same_program(&p, &base, what);
      sk_parallel_free(&p), sk_parallel_free(&base);
    }
  }
  sk_graph_free(&n.g);
}

/* hsdp(shard_size, threshold, optimizer_level) checked as MindSpore checks it, by name. */
Test(hsdp, plan_bad_configurations_refused_by_name) {
  static net n;
  build_mlp(&n, 8);
  static const struct {
    sk_hsdp h;
    const char *field;
  } bad[] = {
      {{true, 0, 64, SK_HSDP_LEVEL1}, "shard_size"},
      {{true, -2, 64, SK_HSDP_LEVEL1}, "shard_size"},
      {{true, -1, -1, SK_HSDP_LEVEL1}, "threshold"},
      {{true, -1, 64, (sk_hsdp_level)7}, "optimizer_level"},
      {{true, -1, 64, (sk_hsdp_level)-1}, "optimizer_level"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sk_autoparallel pd = knobs_of(bad[i].h);
    pd.ndevices = 8;
    sk_parallel_plan p;
    sk_error e;
    memset(&e, 0, sizeof e);
    sk_result r = sk_parallel_compile(&n.g, &pd, &p, &e);
    cr_assert_eq(r, SK_ERR_INVALID_ARGUMENT, "case %zu: %s", i, sk_result_name(r));
    cr_assert(strstr(e.msg, bad[i].field), "case %zu: '%s' does not name %s", i, e.msg, bad[i].field);
    cr_assert_null(p.steps);
    sk_parallel_free(&p);
  }
  /* off, the same values are not looked at (a zero struct is MindSpore's default) */
  sk_autoparallel pd = knobs_of(bad[0].h);
  pd.hsdp.enabled = false;
  sk_parallel_plan p;
  compile(&n, 8, &pd, &p);
  cr_assert_eq(sharded_params(&p), 0);
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}

/* ---- 2. training like one device ---------------------------------------------------------------- */

static void check_some_sharded(const run *R, int N) {
  cr_assert_gt(sharded_params(&R->plan), 0, "%d devices: nothing sharded", N);
  cr_assert_gt(count_steps(&R->plan, SK_PSTEP_GRAD_REDUCE_SCATTER), 0);
}

/* Each net, on 2, 4 and 8 devices, under `level` with Momentum and Adam. */
static void train_like_trainer(sk_hsdp_level level, build_fn build, const char *name) {
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, level));
  char what[96];
  snprintf(what, sizeof what, "hsdp %s, %s, Momentum", sk_hsdp_level_name(level), name);
  errs a = each_device_count_knobs(what, build, check_some_sharded, momentum(0.1, 0.9), 4, &pd);
  snprintf(what, sizeof what, "hsdp %s, %s, Adam", sk_hsdp_level_name(level), name);
  errs b = each_device_count_knobs(what, build, check_some_sharded, adam(0.01), 4, &pd);
  cr_log_info("hsdp %s %s: worst relative difference %.3g (losses), %.3g (parameters)", sk_hsdp_level_name(level), name,
              fmax(a.loss, b.loss), fmax(a.param, b.param));
}

Test(hsdp, level1_mlp_like_the_trainer, .timeout = RT_TIMEOUT) { train_like_trainer(SK_HSDP_LEVEL1, build_mlp, "MLP"); }
Test(hsdp, level3_mlp_like_the_trainer, .timeout = RT_TIMEOUT) { train_like_trainer(SK_HSDP_LEVEL3, build_mlp, "MLP"); }
Test(hsdp, level1_weight_read_twice_like_the_trainer, .timeout = RT_TIMEOUT) {
  train_like_trainer(SK_HSDP_LEVEL1, build_shared, "weight read twice");
}
Test(hsdp, level3_weight_read_twice_like_the_trainer, .timeout = RT_TIMEOUT) {
  train_like_trainer(SK_HSDP_LEVEL3, build_shared, "weight read twice");
}
Test(hsdp, level3_residual_like_the_trainer, .timeout = RT_TIMEOUT) {
  train_like_trainer(SK_HSDP_LEVEL3, build_residual, "residual");
}

/* shard_size 2 on 8 devices: w3's gradient ReduceScattered over 2 and AllReduced over 4; and
   the same net in f32, measured against F32_TOL. */
Test(hsdp, partial_shard_size_and_f32_like_the_trainer, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 8);
  const sk_hsdp_level levels[2] = {SK_HSDP_LEVEL1, SK_HSDP_LEVEL3};
  double worst = 0;
  for (int l = 0; l < 2; l++)
    for (int o = 0; o < 2; o++) {
      sk_autoparallel pd = knobs_of(hsdp_of(2, 0, levels[l]));
      run_init_knobs(&R, &n, 8, SK_F64, o ? adam(0.01) : momentum(0.1, 0.9), 4, &pd);
      cr_assert_eq(R.plan.tensors[tensor_named(&n.g, "w3")].opt_mirror, 4);
      run_world(&R);
      expect_all_ok(&R, "shard_size 2");
      errs m = against_trainer(&R, TOL64, o ? "shard_size 2, Adam" : "shard_size 2, Momentum");
      worst = fmax(worst, fmax(m.loss, m.param));
      run_free(&R);
    }
  cr_log_info("hsdp shard_size 2 on 8 devices, f64: worst relative difference %.3g", worst);
  for (int l = 0; l < 2; l++) {
    sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, levels[l]));
    run_init_knobs(&R, &n, 8, SK_F32, adam(0.01), 10, &pd);
    run_world(&R);
    expect_all_ok(&R, "f32");
    errs m = against_trainer(&R, F32_TOL, "hsdp f32");
    cr_log_info("hsdp %s f32, 8 devices, 10 Adam steps: losses within %.3g, parameters within %.3g",
                sk_hsdp_level_name(levels[l]), m.loss, m.param);
    run_free(&R);
  }
  sk_graph_free(&n.g);
}

/* ---- 3. memory --------------------------------------------------------------------------------- */

/* Runs n on ndev devices with the counting allocator (Adam, f64, 3 steps, evaluation). */
static void counted_run(run *R, net *n, int ndev, const sk_autoparallel *pd, const char *what) {
  run_init_knobs(R, n, ndev, SK_F64, adam(0.01), 3, pd);
  R->counting = true;
  run_world(R);
  expect_all_ok(R, what);
  against_trainer(R, TOL64, what);
}

/* Parameters and optimizer state at the shards' size at create and after the steps (the
   gathered slices freed); every block freed by destroy. Returns device 0's peak_parameters. */
static uint64_t expect_shard_memory(const run *R, const char *what) {
  uint64_t shards = 0, gathered = 0, largest = 0;
  param_bytes(&R->plan, SK_F64, &shards, &gathered, &largest);
  for (int d = 0; d < R->ndev; d++) {
    const dev_out *o = &R->dev[d];
    const sk_runtime_memory *c = &o->mem_created, *e = &o->mem_end;
    cr_assert_eq(c->parameters, shards, "%s, device %d: parameters %llu bytes at create, shards %llu", what, d,
                 (unsigned long long)c->parameters, (unsigned long long)shards);
    cr_assert_eq(c->optimizer_state, 2 * shards, "%s, device %d: Adam keeps two states of each shard", what, d);
    cr_assert_eq(e->parameters, shards, "%s, device %d: parameters %llu bytes after the steps, shards %llu", what, d,
                 (unsigned long long)e->parameters, (unsigned long long)shards);
    cr_assert_eq(e->optimizer_state, c->optimizer_state);
    cr_assert_eq(e->gradients, c->gradients);
    cr_assert_eq(c->peak_parameters, c->parameters, "peaks count from create");
    cr_assert_geq(e->peak_parameters, shards + largest, "%s, device %d: a gathered slice is counted while held", what, d);
    cr_assert_eq(e->peak_parameters, R->dev[0].mem_end.peak_parameters, "%s: device %d peaked elsewhere", what, d);
    cr_assert_eq(o->out_after, 0, "%s, device %d: %zu bytes outstanding after destroy", what, d, o->out_after);
    cr_assert_eq(o->blocks_after, 0);
  }
  return R->dev[0].mem_end.peak_parameters;
}

Test(hsdp, memory_parameters_and_state_fall_to_the_shards, .timeout = RT_TIMEOUT) {
  static net n;
  static run R, B;
  /* the MLP on 8 devices (w1 by 2, w2 whole, w3 by 8), and three data-parallel MatMuls on 4
     (every weight by 4; w1 and w2 of one size) */
  static const build_fn nets[2] = {build_mlp, build_dp};
  static const int devices[2] = {8, 4};
  for (int b = 0; b < 2; b++) {
    nets[b](&n, devices[b]);
    counted_run(&B, &n, devices[b], NULL, "memory without hsdp");
    uint64_t whole = B.dev[0].mem_created.parameters, peak[2] = {0, 0}, shards = 0, gathered = 0, largest = 0;
    for (int l = 0; l < 2; l++) {
      sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, l ? SK_HSDP_LEVEL3 : SK_HSDP_LEVEL1));
      counted_run(&R, &n, devices[b], &pd, l ? "memory level3" : "memory level1");
      param_bytes(&R.plan, SK_F64, &shards, &gathered, &largest);
      cr_assert_lt(shards, whole, "sharding saves nothing");
      peak[l] = expect_shard_memory(&R, l ? "level3" : "level1");
      /* the communication buffers hold no gathered slice between steps */
      for (int d = 0; d < R.ndev; d++)
        cr_assert_eq(R.dev[d].mem_end.communication, R.dev[d].mem_created.communication, "device %d", d);
      run_free(&R);
    }
    cr_log_info("hsdp memory on %d devices: parameters %llu bytes whole, %llu sharded (+%llu gathered); peak level1 %llu, "
                "level3 %llu",
                devices[b], (unsigned long long)whole, (unsigned long long)shards, (unsigned long long)gathered,
                (unsigned long long)peak[0], (unsigned long long)peak[1]);
    /* level1 gathers every sharded slice at once; level3 one operator's at a time */
    cr_assert_eq(peak[0], shards + gathered, "level1: peak %llu, shards %llu + every gathered slice %llu",
                 (unsigned long long)peak[0], (unsigned long long)shards, (unsigned long long)gathered);
    cr_assert_geq(peak[1], shards + largest);
    if (nets[b] == build_dp) {
      cr_assert_eq(peak[1], shards + largest, "level3: peak %llu, shards %llu + the largest slice %llu", (unsigned long long)peak[1],
                   (unsigned long long)shards, (unsigned long long)largest);
      cr_assert_lt(peak[1], peak[0], "level3 peaks at %llu, level1 at %llu", (unsigned long long)peak[1],
                   (unsigned long long)peak[0]);
    }
    run_free(&B);
    sk_graph_free(&n.g);
  }
}

/* ---- 4. communication ---------------------------------------------------------------------------- */

/* Calls and bytes of one kind over groups of `group` devices (0: every group). */
static void coll_of(const sk_runtime_stats *st, sk_coll_kind kind, int group, uint64_t *calls, uint64_t *bytes) {
  *calls = *bytes = 0;
  for (int i = 0; i < st->nrows; i++)
    if (st->rows[i].kind == kind && (!group || st->rows[i].group == group)) *calls += st->rows[i].calls, *bytes += st->rows[i].bytes;
}

#define COMM_STEPS 3

/* The three data-parallel MatMuls on 4 devices (w1, w2 [8, 8] and u [8, 4], each sharded 4
   ways): what each step adds to the no-hsdp traffic. */
Test(hsdp, communication_per_step, .timeout = RT_TIMEOUT) {
  static net n;
  static run B, L[2][2]; /* [level1, level3][allgather auto, none] */
  build_dp(&n, 4);
  run_knobs(&B, &n, 4, SK_F64, sgd(0.5), COMM_STEPS, NULL, "no hsdp");
  for (int l = 0; l < 2; l++)
    for (int f = 0; f < 2; f++) {
      sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, l ? SK_HSDP_LEVEL3 : SK_HSDP_LEVEL1));
      pd.comm_fusion.allgather.mode = f ? SK_FUSION_NONE : SK_FUSION_AUTO;
      pd.comm_fusion.reducescatter.mode = f ? SK_FUSION_NONE : SK_FUSION_AUTO;
      run_knobs(&L[l][f], &n, 4, SK_F64, sgd(0.5), COMM_STEPS, &pd, "hsdp traffic");
      against_trainer(&L[l][f], TOL64, "hsdp traffic");
      cr_assert_eq(sharded_params(&L[l][f].plan), 3);
    }
  uint64_t shards = 0, gathered = 0;
  param_bytes(&L[0][0].plan, SK_F64, &shards, &gathered, NULL);
  cr_assert_eq(gathered, (64 + 64 + 32) * 8);
  for (int d = 0; d < 4; d++) {
    uint64_t c0, b0, c, b;
    coll_of(&B.dev[d].stats, SK_COLL_ALLGATHER, 0, &c0, &b0);
    cr_assert_eq(c0, 0, "no AllGather without hsdp");
    /* level1: every slice gathered once a step, counted as its output */
    coll_of(&L[0][0].dev[d].stats, SK_COLL_ALLGATHER, 4, &c, &b);
    cr_assert_eq(b, COMM_STEPS * gathered, "device %d: level1 AllGather %llu bytes in %d steps, slices %llu", d,
                 (unsigned long long)b, COMM_STEPS, (unsigned long long)gathered);
    cr_assert_eq(c, COMM_STEPS * 1, "device %d: allgather auto: one fused AllGather a step, got %llu", d, (unsigned long long)c);
    coll_of(&L[0][1].dev[d].stats, SK_COLL_ALLGATHER, 4, &c, &b);
    cr_assert_eq(b, COMM_STEPS * gathered);
    cr_assert_eq(c, COMM_STEPS * 3, "device %d: allgather none: one AllGather per parameter, got %llu", d, (unsigned long long)c);
    /* level3: forward and backward */
    for (int f = 0; f < 2; f++) {
      coll_of(&L[1][f].dev[d].stats, SK_COLL_ALLGATHER, 4, &c, &b);
      cr_assert_eq(b, 2 * COMM_STEPS * gathered, "device %d: level3 AllGather %llu bytes, level1's twice: %llu", d,
                   (unsigned long long)b, (unsigned long long)(2 * COMM_STEPS * gathered));
      cr_assert_eq(c, 2 * COMM_STEPS * 3, "level3 gathers each parameter where it is read");
    }
  }
  cr_log_info("hsdp traffic on 4 devices: AllGather %llu bytes a step (level1), %llu (level3)",
              (unsigned long long)gathered, (unsigned long long)(2 * gathered));
  /* the gradient: ReduceScattered (its input counted), no Mirror AllReduce left */
  for (int d = 0; d < 4; d++) {
    uint64_t c, b, ca, ba;
    coll_of(&B.dev[d].stats, SK_COLL_ALLREDUCE, 4, &ca, &ba);
    cr_assert_gt(ba, 0, "the Mirrors without hsdp");
    for (int l = 0; l < 2; l++) {
      coll_of(&L[l][1].dev[d].stats, SK_COLL_REDUCE_SCATTER, 4, &c, &b);
      cr_assert_eq(c, COMM_STEPS * 3, "reducescatter none: one ReduceScatter per parameter, got %llu", (unsigned long long)c);
      coll_of(&L[l][0].dev[d].stats, SK_COLL_REDUCE_SCATTER, 4, &c, &b);
      cr_assert_eq(c, COMM_STEPS * 1, "reducescatter auto: one fused ReduceScatter a step, got %llu", (unsigned long long)c);
      /* a ReduceScatter counts its input, the buffer on the wire (nccl-tests' size) */
      cr_assert_eq(b, COMM_STEPS * gathered, "device %d: ReduceScatter %llu bytes in %d steps; its input, the slices: %llu", d,
                   (unsigned long long)b, COMM_STEPS, (unsigned long long)(COMM_STEPS * gathered));
      coll_of(&L[l][0].dev[d].stats, SK_COLL_ALLREDUCE, 4, &c, &b);
      uint64_t loss_only = ba - COMM_STEPS * gathered; /* without hsdp: the Mirrors plus the loss's AllReduce */
      cr_assert_eq(b, loss_only, "device %d: AllReduce %llu bytes with hsdp, %llu without the Mirrors", d, (unsigned long long)b,
                   (unsigned long long)loss_only);
    }
  }
  run_free(&B);
  for (int l = 0; l < 2; l++) run_free(&L[l][0]), run_free(&L[l][1]);
  sk_graph_free(&n.g);
}

/* shard_size 2 on 8 devices: w3's gradient ([16, 4], shards of 32 elements) AllReduced over the
   4 devices of its Mirror group, once a step, after the ReduceScatter over 2. */
Test(hsdp, communication_partial_mirror, .timeout = RT_TIMEOUT) {
  static net n;
  static run F, P;
  build_mlp(&n, 8);
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, SK_HSDP_LEVEL1));
  pd.comm_fusion.allreduce.mode = SK_FUSION_NONE;
  run_knobs(&F, &n, 8, SK_F64, sgd(0.5), COMM_STEPS, &pd, "full shards");
  pd.hsdp.shard_size = 2;
  run_knobs(&P, &n, 8, SK_F64, sgd(0.5), COMM_STEPS, &pd, "shard_size 2");
  against_trainer(&P, TOL64, "shard_size 2");
  for (int d = 0; d < 8; d++) {
    uint64_t cf, bf, cp, bp;
    coll_of(&F.dev[d].stats, SK_COLL_ALLREDUCE, 4, &cf, &bf);
    coll_of(&P.dev[d].stats, SK_COLL_ALLREDUCE, 4, &cp, &bp);
    cr_assert_eq(cp - cf, COMM_STEPS, "device %d: %llu AllReduces over 4 more than full sharding", d, (unsigned long long)(cp - cf));
    cr_assert_eq(bp - bf, COMM_STEPS * 32 * 8, "device %d: %llu bytes", d, (unsigned long long)(bp - bf));
    uint64_t c2, b2;
    coll_of(&P.dev[d].stats, SK_COLL_ALLGATHER, 2, &c2, &b2);
    cr_assert_eq(b2, COMM_STEPS * (64 + 64) * 8, "device %d: w1 [4, 16] and w3 [16, 4] gathered over 2", d);
  }
  run_free(&F), run_free(&P);
  sk_graph_free(&n.g);
}

/* ---- 5. faults ---------------------------------------------------------------------------------- */

/* The MLP on 4 devices (w1 and w3 sharded) under hsdp level1 or level3, counted, no evaluation;
   sync16: bf16 with no_gradient_fp32_sync (the sharded gradients' 16-bit shadows), else f64. */
static void init_faults(run *R, net *n, bool level3, bool sync16, int nsteps) {
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, level3 ? SK_HSDP_LEVEL3 : SK_HSDP_LEVEL1));
  pd.no_gradient_fp32_sync = sync16;
  run_init_knobs(R, n, 4, sync16 ? SK_BF16 : SK_F64, adam(0.01), nsteps, &pd);
  cr_assert_eq(sharded_params(&R->plan), 2);
  R->counting = true, R->evaluate = false;
}

/* Every allocation of create failing in turn on one device of 4, hsdp level1 and level3 (shards,
   their groups, the fused ReduceScatters), and level1 in bf16 with 16-bit gradient sync (the
   sharded gradients' shadows). */
Test(hsdp, create_allocation_failures_one_of_four, .timeout = 2 * RT_TIMEOUT) {
  static net n;
  static run R;
  static const char *const what[3] = {"hsdp level1 create", "hsdp level3 create", "hsdp level1 bf16 16-bit sync create"};
  build_mlp(&n, 4);
  for (int l = 0; l < 3; l++) {
    init_faults(&R, &n, l == 1, l == 2, 1);
    long k = sweep_create_failures(&R, what[l]);
    cr_assert_gt(k, 40);
    cr_log_info("%s on 4 devices: call k of device k %% 4 refused, k = 1..%ld", what[l], k - 5);
    run_free(&R);
  }
  sk_graph_free(&n.g);
}

/* Every allocation of the first step failing in turn on one device of 4 (the gathered slices,
   the per-step AllGather scheduler): that device's step returns SK_ERR_OUT_OF_MEMORY naming the
   ParamGather; every other device fails too, none by the timeout; nothing leaks. The sweep ends
   at the first k the step does not reach, which must run clean. Then the allocator failing
   from the first feed (test_runtime.c's case) with hsdp on. */
Test(hsdp, step_allocation_failures_one_of_four, .timeout = 2 * RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  for (int l = 0; l < 2; l++) {
    const char *what = l ? "hsdp level3 step" : "hsdp level1 step";
    init_faults(&R, &n, l, false, 2);
    R.fail_phase = FAIL_IN_STEP;
    long k = 1;
    for (;; k++) {
      R.fail_rank = (int)(k % 4), R.fail_at = k;
      run_world(&R);
      const dev_out *f = &R.dev[R.fail_rank];
      if (!f->cnt.refused) {
        expect_all_ok(&R, "a step allocating fewer");
        break;
      }
      cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "%s: k = %ld, device %d: %s in %s (%s)", what, k, R.fail_rank,
                   sk_result_name(f->rc), f->where, f->msg);
      cr_assert_str_eq(f->where, "step", "k = %ld: %s", k, f->msg);
      cr_assert(strstr(f->msg, "ParamGather"), "k = %ld: '%s'", k, f->msg);
      expect_all_failed_clean(&R, k, what);
      for (int d = 0; d < 4; d++) cr_assert(R.dev[d].ran, "k = %ld: device %d did not run", k, d);
    }
    cr_assert_gt(k, 1, "the step allocated nothing");
    cr_log_info("hsdp %s: the first step's %ld allocations each refused in turn", l ? "level3" : "level1", k - 1);
    R.fail_phase = FAIL_FROM_FEED, R.fail_rank = 2;
    run_world(&R);
    cr_assert_eq(R.dev[2].rc, SK_ERR_OUT_OF_MEMORY, "%s (%s)", sk_result_name(R.dev[2].rc), R.dev[2].msg);
    cr_assert_str_eq(R.dev[2].where, "feed");
    expect_all_failed_clean(&R, 0, "from the first feed");
    run_free(&R);
  }
  sk_graph_free(&n.g);
}

/* ---- 6. parameter_broadcast through the runtime ---------------------------------------------- */

/* Every device draws its model from seed + rank (plan.desc.seed_by_rank), so replicas start apart
   until sk_runtime_parameter_broadcast gives each its redundancy group owner's values. */
static void init_broadcast(run *R, net *n, int ndev, sk_optim_desc optim, const sk_autoparallel *pd, int initial_rank) {
  run_init_knobs(R, n, ndev, SK_F64, optim, 4, pd);
  R->plan.desc.seed_by_rank = true, R->broadcast = true, R->initial_rank = initial_rank;
}

/* The whole model drawn from one seed, in the run's dtype (f64), one buffer per tensor. */
static double **drawn(const sk_graph *g, uint64_t seed) {
  double **v = (double **)calloc((size_t)g->ntensors + 1, sizeof *v);
  cr_assert_not_null(v);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM) cr_assert_not_null(v[t] = (double *)malloc((size_t)sk_graph_numel(g, t) * 8));
  OK(sk_graph_init_params(g, seed, SK_F64, (void *const *)v, E));
  return v;
}

static void free_drawn(const sk_graph *g, double **v) {
  for (int t = 0; t < g->ntensors; t++) free(v[t]);
  free(v);
}

/* Three data-parallel MatMuls on 8 devices: each weight has one redundancy group, all 8 ranks;
   in name order (u, w1, w2) MindSpore's round robin makes ranks 0, 1 and 2 their owners. After
   the broadcast each weight is exactly its owner's draw (seed + owner), which differs from rank
   0's for w1 and w2; training then equals the trainer started from those values. */
Test(hsdp, broadcast_replicas_take_their_owners_values_and_train_like_one_device, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_dp(&n, 8);
  init_broadcast(&R, &n, 8, momentum(0.1, 0.9), NULL, 0);
  run_world(&R);
  expect_all_ok(&R, "parameter_broadcast, data parallel");
  const sk_graph *g = &n.g;
  const char *names[3] = {"u", "w1", "w2"};
  double **by_rank[3] = {drawn(g, R.plan.desc.seed), drawn(g, R.plan.desc.seed + 1), drawn(g, R.plan.desc.seed + 2)};
  for (int i = 0; i < 3; i++) {
    int t = tensor_named(g, names[i]);
    size_t bytes = (size_t)sk_graph_numel(g, t) * 8;
    for (int d = 0; d < 8; d++)
      cr_assert(memcmp(R.dev[d].init + R.param_off[t], by_rank[i][t], bytes) == 0,
                "device %d: '%s' is not rank %d's draw after the broadcast", d, names[i], i);
    if (i) cr_assert(memcmp(by_rank[i][t], by_rank[0][t], bytes), "'%s': ranks 0 and %d drew the same values", names[i], i);
  }
  errs m = against_trainer(&R, TOL64, "parameter_broadcast, data parallel");
  cr_log_info("parameter_broadcast on 8 data-parallel devices, 4 Momentum steps f64: losses within %.3g, parameters within %.3g",
              m.loss, m.param);
  for (int i = 0; i < 3; i++) free_drawn(g, by_rank[i]);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* The MLP on 8 devices under hsdp shard_size 2, level1 and level3: w1 (2 replicas, 2 shards)
   has nothing to broadcast, each shard keeps its own rank's draw; w3 (8 replicas, 2 shards)
   broadcasts per shard over the 4 ranks keeping the same rows; w2 has no replica. The devices
   then train like one device started from the gathered model, with initial_rank 0 and, as a
   second pipeline stage would call it, cur_rank = rank + 8, initial_rank 8 (the same owners). */
Test(hsdp, broadcast_under_hsdp_per_shard_like_one_device, .timeout = RT_TIMEOUT) {
  static net n;
  static run R, S;
  build_mlp(&n, 8);
  const sk_hsdp_level levels[2] = {SK_HSDP_LEVEL1, SK_HSDP_LEVEL3};
  for (int l = 0; l < 2; l++) {
    sk_autoparallel pd = knobs_of(hsdp_of(2, 0, levels[l]));
    init_broadcast(&R, &n, 8, adam(0.01), &pd, 0);
    cr_assert_eq(R.plan.tensors[tensor_named(&n.g, "w3")].opt_mirror, 4);
    run_world(&R);
    expect_all_ok(&R, "parameter_broadcast under hsdp");
    errs m = against_trainer(&R, TOL64, "parameter_broadcast under hsdp");
    init_broadcast(&S, &n, 8, adam(0.01), &pd, 8);
    run_world(&S);
    expect_all_ok(&S, "parameter_broadcast, initial_rank 8");
    cr_assert(memcmp(S.dev[0].init, R.dev[0].init, R.params_bytes) == 0, "initial_rank 8 chose other owners");
    cr_log_info("parameter_broadcast, hsdp shard_size 2 %s, 8 devices, 4 Adam steps f64: losses within %.3g, parameters "
                "within %.3g", sk_hsdp_level_name(levels[l]), m.loss, m.param);
    run_free(&R), run_free(&S);
  }
  sk_graph_free(&n.g);
}

/* A cur_rank that is not the device's (MindSpore's ValueError): every device returns an error
   from the broadcast, none waits out the timeout, nothing leaks. */
Test(hsdp, broadcast_wrong_cur_rank_fails_on_every_device, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, SK_HSDP_LEVEL1));
  init_broadcast(&R, &n, 4, sgd(0.1), &pd, 0);
  R.cur_rank_skew = 1, R.counting = true;
  run_world(&R);
  for (int d = 0; d < 4; d++) {
    const dev_out *o = &R.dev[d];
    cr_assert_eq(o->rc, SK_ERR_INVALID_ARGUMENT, "device %d: %s in %s (%s)", d, sk_result_name(o->rc), o->where, o->msg);
    cr_assert_str_eq(o->where, "broadcast");
    cr_assert_eq(o->out_after, 0, "device %d: %zu bytes outstanding", d, o->out_after);
  }
  cr_log_info("a wrong cur_rank: '%s'", R.dev[0].msg);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* ---- 7. gradient accumulation: what level2 changes ------------------------------------------- */

/* The sum level2 keeps per sharded parameter is its shard, level1's and level3's the whole
   slice: the difference in gradient bytes between them (f64). */
static uint64_t level2_saving(const sk_parallel_plan *p) {
  uint64_t saved = 0;
  for (int t = 0; t < p->graph->ntensors; t++) {
    int s = p->tensors[t].opt_size;
    if (p->graph->tensors[t].role != SK_TENSOR_PARAM || !s) continue;
    uint64_t slice = (uint64_t)sk_parallel_slice_count(p, t) * 8;
    saved += slice - slice / (uint64_t)s;
  }
  return saved;
}

/* The MLP on 8 devices, 3 micro-steps per update over 9 steps (three updates), Adam and
   Momentum: every level trains like the trainer accumulating the same way, and level2's
   accumulated gradients are the shards' size (level1 and level3 keep whole sums). */
Test(hsdp, accumulation_every_level_like_the_trainer_level2_sums_sharded, .timeout = 2 * RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 8);
  uint64_t grads[3] = {0, 0, 0};
  for (int l = 0; l < 3; l++)
    for (int o = 0; o < 2; o++) {
      sk_hsdp_level level = l == 0 ? SK_HSDP_LEVEL1 : l == 1 ? SK_HSDP_LEVEL2 : SK_HSDP_LEVEL3;
      sk_autoparallel pd = knobs_of(hsdp_of(-1, 0, level));
      pd.grad_accumulation_step = 3;
      char what[96];
      snprintf(what, sizeof what, "hsdp %s, accumulation 3, %s", sk_hsdp_level_name(level), o ? "Adam" : "Momentum");
      run_knobs(&R, &n, 8, SK_F64, o ? adam(0.01) : momentum(0.1, 0.9), 9, &pd, what);
      errs m = against_trainer(&R, TOL64, what);
      cr_log_info("%s, 8 devices, 9 steps f64: losses within %.3g, parameters within %.3g", what, m.loss, m.param);
      grads[l] = R.dev[0].mem_created.gradients;
      for (int d = 0; d < 8; d++) cr_assert_eq(R.dev[d].mem_end.gradients, R.dev[d].mem_created.gradients, "%s: device %d", what, d);
      if (l == 1) cr_assert_eq(grads[0] - grads[1], level2_saving(&R.plan), "level2 keeps %llu gradient bytes, level1 %llu",
                               (unsigned long long)grads[1], (unsigned long long)grads[0]);
      run_free(&R);
    }
  cr_assert_gt(grads[0], grads[1], "level2's sums are no smaller");
  cr_assert_eq(grads[2], grads[0], "level3 accumulates whole, as level1");
  cr_log_info("accumulated gradients on device 0: level1 %llu bytes, level2 %llu, level3 %llu", (unsigned long long)grads[0],
              (unsigned long long)grads[1], (unsigned long long)grads[2]);
  sk_graph_free(&n.g);
}

/* ---- 8. 16-bit gradient sync under hsdp --------------------------------------------------------- */

/* Per step: the elements the sharded gradients ReduceScatter (their slices: the ReduceScatter's
   input) and the partial Mirrors AllReduce (the shards of parameters with opt_mirror > 1). */
static void sync_elements(const sk_parallel_plan *p, uint64_t *scattered, uint64_t *mirrored, uint64_t *shadows) {
  *scattered = *mirrored = *shadows = 0;
  for (int t = 0; t < p->graph->ntensors; t++) {
    int s = p->tensors[t].opt_size;
    if (p->graph->tensors[t].role != SK_TENSOR_PARAM || !s || !p->tensors[t].needs_grad) continue;
    uint64_t slice = (uint64_t)sk_parallel_slice_count(p, t);
    *scattered += slice, *shadows += slice + slice / (uint64_t)s;
    if (p->tensors[t].opt_mirror > 1) *mirrored += slice / (uint64_t)s;
  }
}

static bool same_losses(const run *a, const run *b) {
  return a->nsteps == b->nsteps && !memcmp(a->dev[0].loss, b->dev[0].loss, (size_t)a->nsteps * sizeof(double));
}

enum { WIRE_F32_SYNC, WIRE_16_SYNC, WIRE_16_SYNC_OVERLAP, WIRE_FP32_COMM, WIRE_RUNS };

/* bf16, the MLP on 8 devices under shard_size 2 (w1 [4, 16] and w3 [16, 4] ReduceScattered over
   2, w3's shards AllReduced over the 4 devices of its Mirror group), SGD, 10 steps. By default
   the sharded gradients synchronise in f32 (MindSpore's gradient_fp32_sync); with
   no_gradient_fp32_sync the ReduceScatters and the partial Mirror travel in bf16: their bytes
   halve, the 16-bit shadows (each gradient's slice and its shard) are counted as communication
   buffers, the losses change and both runs stay within HALF_TOL of the trainer. Launched as
   each gradient is ready (overlap), the same numbers; under fp32_communication, f32 again. */
Test(hsdp, bf16_gradient_sync_in_16_bits_halves_the_bytes, .timeout = 2 * RT_TIMEOUT) {
  static net n;
  static run R[WIRE_RUNS];
  static const char *const names[WIRE_RUNS] = {"bf16 hsdp, f32 gradient sync", "bf16 hsdp, no_gradient_fp32_sync",
                                                "bf16 hsdp, no_gradient_fp32_sync, overlap",
                                                "bf16 hsdp, no_gradient_fp32_sync, fp32_communication"};
  build_mlp(&n, 8);
  for (int i = 0; i < WIRE_RUNS; i++) {
    sk_autoparallel pd = knobs_of(hsdp_of(2, 0, SK_HSDP_LEVEL1));
    pd.no_gradient_fp32_sync = i != WIRE_F32_SYNC, pd.fp32_communication = i == WIRE_FP32_COMM;
    pd.transformer_opt.grad_computation_allreduce_overlap = i == WIRE_16_SYNC_OVERLAP;
    run_knobs(&R[i], &n, 8, SK_BF16, sgd(0.5), 10, &pd, names[i]);
  }
  uint64_t scattered, mirrored, shadows;
  sync_elements(&R[0].plan, &scattered, &mirrored, &shadows);
  cr_assert_eq(scattered, 64 + 64, "w1's and w3's slices");
  cr_assert_eq(mirrored, 32, "w3's shard");
  const uint64_t wire[WIRE_RUNS] = {4, 2, 2, 4}; /* bytes per element of the gradient sync */
  uint64_t ar[WIRE_RUNS][2], rs[WIRE_RUNS][2];   /* [run][calls, bytes] on device 0 */
  for (int i = 0; i < WIRE_RUNS; i++) {
    for (int d = 0; d < 8; d++) {
      uint64_t c, b;
      coll_of(&R[i].dev[d].stats, SK_COLL_REDUCE_SCATTER, 0, &c, &b);
      cr_assert_eq(b, 10 * scattered * wire[i], "%s, device %d: ReduceScatter %llu bytes in 10 steps, expected %llu", names[i],
                   d, (unsigned long long)b, (unsigned long long)(10 * scattered * wire[i]));
      if (d == 0) rs[i][0] = c, rs[i][1] = b;
    }
    coll_of(&R[i].dev[0].stats, SK_COLL_ALLREDUCE, 4, &ar[i][0], &ar[i][1]);
    cr_assert_eq(ar[i][0], ar[0][0], "%s: %llu AllReduces over 4, %llu with f32 sync", names[i], (unsigned long long)ar[i][0],
                 (unsigned long long)ar[0][0]);
    cr_assert_eq(rs[i][0], rs[0][0], "%s: the ReduceScatter calls changed", names[i]);
  }
  /* over 4: fc1's forward AllReduce (bf16 in both) and w3's partial Mirror, whose 10 x 32 x 4
     bytes in f32 halve */
  cr_assert_eq(ar[WIRE_F32_SYNC][1] - ar[WIRE_16_SYNC][1], 10 * mirrored * 2,
               "AllReduce over 4: %llu bytes with f32 sync, %llu in 16 bits", (unsigned long long)ar[WIRE_F32_SYNC][1],
               (unsigned long long)ar[WIRE_16_SYNC][1]);
  for (int d = 0; d < 8; d++) {
    uint64_t extra = R[WIRE_16_SYNC].dev[d].mem_created.communication - R[WIRE_F32_SYNC].dev[d].mem_created.communication;
    cr_assert_eq(extra, shadows * 2, "device %d: %llu more communication bytes, the 16-bit shadows %llu", d,
                 (unsigned long long)extra, (unsigned long long)(shadows * 2));
    cr_assert_eq(R[WIRE_16_SYNC].dev[d].mem_end.communication, R[WIRE_16_SYNC].dev[d].mem_created.communication);
  }
  bool differ = false;
  for (int s = 0; s < 10; s++) differ = differ || R[WIRE_F32_SYNC].dev[0].loss[s] != R[WIRE_16_SYNC].dev[0].loss[s];
  cr_assert(differ, "16-bit gradient sync under hsdp should change a bf16 run's losses");
  cr_assert(memcmp(R[WIRE_F32_SYNC].dev[0].params, R[WIRE_16_SYNC].dev[0].params, R[0].params_bytes), "... and its parameters");
  cr_assert(same_losses(&R[WIRE_16_SYNC], &R[WIRE_16_SYNC_OVERLAP]), "overlap changed the 16-bit sync's losses");
  errs m[2];
  for (int i = 0; i < 2; i++) m[i] = against_trainer(&R[i], HALF_TOL, names[i]);
  cr_log_info("bf16 hsdp shard_size 2, 8 devices, 10 SGD steps: ReduceScatter %llu -> %llu bytes, partial Mirror %llu -> %llu "
              "bytes; against the trainer losses within %.3g (f32 sync) and %.3g (16-bit), parameters %.3g and %.3g",
              (unsigned long long)rs[WIRE_F32_SYNC][1], (unsigned long long)rs[WIRE_16_SYNC][1],
              (unsigned long long)(10 * mirrored * 4), (unsigned long long)(10 * mirrored * 2), m[0].loss, m[1].loss,
              m[0].param, m[1].param);
  for (int i = 0; i < WIRE_RUNS; i++) run_free(&R[i]);
  sk_graph_free(&n.g);
}

/* The same under gradient accumulation (3 micro-steps, 9 steps, Adam) at every level: level2
   ReduceScatters at every micro-step and sums the 16-bit-synchronised shards, level1 and level3
   once per update; the partial Mirror runs once per update. The bytes halve, the parameters
   change (measured: the losses of these 9 steps do not, Adam's steps being small), both runs
   stay within HALF_TOL of the trainer accumulating the same way. */
Test(hsdp, bf16_gradient_sync_in_16_bits_under_accumulation, .timeout = 2 * RT_TIMEOUT) {
  static net n;
  static run R[2];
  build_mlp(&n, 8);
  for (int l = 0; l < 3; l++) {
    sk_hsdp_level level = l == 0 ? SK_HSDP_LEVEL1 : l == 1 ? SK_HSDP_LEVEL2 : SK_HSDP_LEVEL3;
    uint64_t rs[2], ar[2], calls;
    errs m[2];
    for (int i = 0; i < 2; i++) {
      sk_autoparallel pd = knobs_of(hsdp_of(2, 0, level));
      pd.grad_accumulation_step = 3, pd.no_gradient_fp32_sync = i;
      char what[96];
      snprintf(what, sizeof what, "bf16 hsdp %s, accumulation 3, %s", sk_hsdp_level_name(level), i ? "16-bit sync" : "f32 sync");
      run_knobs(&R[i], &n, 8, SK_BF16, adam(0.01), 9, &pd, what);
      m[i] = against_trainer(&R[i], HALF_TOL, what);
      coll_of(&R[i].dev[0].stats, SK_COLL_REDUCE_SCATTER, 0, &calls, &rs[i]);
      coll_of(&R[i].dev[0].stats, SK_COLL_ALLREDUCE, 4, &calls, &ar[i]);
    }
    uint64_t scattered, mirrored, shadows, rounds = level == SK_HSDP_LEVEL2 ? 9 : 3;
    sync_elements(&R[0].plan, &scattered, &mirrored, &shadows);
    cr_assert_eq(rs[0], rounds * scattered * 4, "%s: ReduceScatter %llu bytes in f32", sk_hsdp_level_name(level),
                 (unsigned long long)rs[0]);
    cr_assert_eq(rs[1], rounds * scattered * 2, "%s: ReduceScatter %llu bytes in 16 bits", sk_hsdp_level_name(level),
                 (unsigned long long)rs[1]);
    cr_assert_eq(ar[0] - ar[1], 3 * mirrored * 2, "%s: the partial Mirror, once per update, %llu -> %llu bytes over 4",
                 sk_hsdp_level_name(level), (unsigned long long)ar[0], (unsigned long long)ar[1]);
    cr_assert(memcmp(R[0].dev[0].params, R[1].dev[0].params, R[0].params_bytes), "%s: 16-bit sync left the parameters as they were",
              sk_hsdp_level_name(level));
    cr_log_info("bf16 hsdp %s, accumulation 3, 9 Adam steps: ReduceScatter %llu -> %llu bytes; against the trainer losses "
                "within %.3g / %.3g, parameters %.3g / %.3g", sk_hsdp_level_name(level), (unsigned long long)rs[0],
                (unsigned long long)rs[1], m[0].loss, m[1].loss, m[0].param, m[1].param);
    run_free(&R[0]), run_free(&R[1]);
  }
  sk_graph_free(&n.g);
}
