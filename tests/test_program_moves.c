/* test_program_moves.c -- a tensor is moved to a layout once per step (sk_parallel_op.move_op):
   several readers of one tensor in the same kernel layout read the first one's moved copy.
   1. MEGATRON: examples/nets/megatron_block.json (attention + MLP at dp 2 x mp 4) on 8 devices:
      no (tensor, from-layout, to-layout) Move twice in the step's program; 8 Moves and 6
      MoveBacks (today's 10 + 6 less the second and third moves of x_2d, for k and v; the
      derivation is in docs/auto-parallel.md, "One move per layout"); one kernel_in buffer per
      Move in the create section; 8 devices train like one (f64, 3 steps, relative 1e-12).
   2. TWO LAYOUTS: one tensor read in two different kernel layouts is still moved twice, once
      to each, and trains like one device.
   3. PIPELINE: under a pipeline each reader keeps its own Move (the slots are per operator).

   Device threads never assert: each records into its dev_out, the test's thread asserts. */
#include <criterion/criterion.h>

#include "runtime_harness.h"
#include "sk_json.h"
#include "shipped_nets.h"

#define PM_TIMEOUT 120
#define MEGATRON "examples/nets/megatron_block.json"

/* The number of program steps of `kind` in stage s's program. */
static int count_kind(const sk_parallel_plan *p, int s, sk_parallel_step_kind kind) {
  int n = 0;
  for (int i = 0; i < p->programs[s].nsteps; i++) n += p->programs[s].steps[i].kind == kind;
  return n;
}

/* The Move at program index i and the one at j move the same tensor between the same layouts. */
static bool same_move(const sk_parallel_plan *p, const sk_program_step *a, const sk_program_step *b) {
  const sk_graph *g = p->graph;
  int ta = g->ops[a->op].inputs[a->slot], tb = g->ops[b->op].inputs[b->slot];
  return ta == tb && sk_parallel_same_layout(&p->ops[a->op].kernel_in[a->slot], &p->ops[b->op].kernel_in[b->slot]);
}

/* No two Moves of stage s's program move one tensor to one layout (the from-layout is the
   tensor's own: the same when the tensor is). */
static void expect_no_repeated_move(const sk_parallel_plan *p, int s, const char *what) {
  const sk_program *pg = &p->programs[s];
  for (int i = 0; i < pg->nsteps; i++)
    for (int j = i + 1; j < pg->nsteps && pg->steps[i].kind == SK_PSTEP_MOVE; j++)
      cr_assert(pg->steps[j].kind != SK_PSTEP_MOVE || !same_move(p, &pg->steps[i], &pg->steps[j]),
                "%s: steps #%d (%s) and #%d (%s) move '%s' to the same layout", what, i, p->graph->ops[pg->steps[i].op].name,
                j, p->graph->ops[pg->steps[j].op].name, p->graph->tensors[p->graph->ops[pg->steps[i].op].inputs[pg->steps[i].slot]].name);
}

/* The operator called name (-1: none). */
static int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  return -1;
}

static int count_created(const sk_parallel_plan *p, int s, sk_program_buffer buffer) {
  int n = 0;
  for (int i = 0; i < p->programs[s].ncreate; i++) n += p->programs[s].create[i].buffer == (int)buffer;
  return n;
}

Test(program_moves, megatron_block_moves_each_layout_once, .timeout = PM_TIMEOUT) {
  net n;
  run R;
  load_shipped_net(&n, MEGATRON);
  run_init(&R, &n, 8, SK_F64, sgd(0.01), 3);
  expect_no_repeated_move(&R.plan, 0, "megatron_block");
  cr_assert_eq(count_kind(&R.plan, 0, SK_PSTEP_MOVE), 8, "megatron_block: %d Moves, want 8",
               count_kind(&R.plan, 0, SK_PSTEP_MOVE));
  cr_assert_eq(count_kind(&R.plan, 0, SK_PSTEP_MOVE_BACK), 6, "megatron_block: %d MoveBacks, want 6",
               count_kind(&R.plan, 0, SK_PSTEP_MOVE_BACK));
  cr_assert_eq(count_created(&R.plan, 0, SK_PBUF_KERNEL_IN), 8, "one moved copy per Move");
  int k = op_named(&n.g, "k"), q = op_named(&n.g, "q");
  cr_assert(R.plan.ops[k].moved[0] && R.plan.ops[k].move_op[0] == q && R.plan.ops[k].move_slot[0] == 0,
            "k reads the copy of x_2d that q's Move made");
  run_world(&R);
  expect_all_ok(&R, "megatron_block");
  errs m = against_trainer(&R, 1e-12, "megatron_block");
  cr_log_info("megatron_block, 8 devices f64: loss %.3g, parameters %.3g relative", m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* x read by a = x w1 cut (2,4)x(4,1) and by b = x w2 cut (2,1)x(1,4), with x placed whole by a
   ReLU in front: x moves to two layouts, then c = x w3 reads it as b does (shares b's copy). */
static void build_two_layouts(net *n) {
  sk_graph_init(&n->g), n->nin = 0;
  int in = add_input(n, "in", SK_F32, 2, SH2(16, 8), 0);
  sk_graph_op r = OP("relu", SK_OP_RELU, in);
  SHARD(r, 0, 1, 1);
  int x = add_op(n, r), sum = -1;
  const char *names[3] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++) {
    char w[16]; /* room for any int: the sanitizer build cannot bound i */
    snprintf(w, sizeof w, "w%d", i + 1);
    int wt = add_param(n, w, 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
    sk_graph_op mm = OP(names[i], SK_OP_MATMUL, x, wt);
    if (i == 0) SHARD(mm, 0, 2, 4), SHARD(mm, 1, 4, 1);
    else SHARD(mm, 0, 2, 1), SHARD(mm, 1, 1, 4);
    int y = add_op(n, mm);
    sum = sum < 0 ? y : add_op(n, OP(i == 1 ? "ab" : "abc", SK_OP_ADD, sum, y));
  }
  OK(sk_graph_set_loss(&n->g, add_op(n, OP("loss", SK_OP_VIRTUAL_LOSS, sum)), E));
}

Test(program_moves, two_layouts_two_moves, .timeout = PM_TIMEOUT) {
  net n;
  run R;
  build_two_layouts(&n);
  run_init(&R, &n, 8, SK_F64, sgd(0.05), 3);
  int a = op_named(&n.g, "a"), b = op_named(&n.g, "b"), c = op_named(&n.g, "c");
  cr_assert(R.plan.ops[a].moved[0] && R.plan.ops[b].moved[0] && R.plan.ops[c].moved[0], "each MatMul reads relu's output moved");
  cr_assert_eq(R.plan.ops[b].move_op[0], b, "b's layout is not a's: b moves its own");
  cr_assert_eq(R.plan.ops[c].move_op[0], b, "c reads x as b does: b's copy");
  int x = n.g.ops[a].inputs[0], moves = 0;
  for (int i = 0; i < R.plan.programs[0].nsteps; i++) {
    const sk_program_step *s = &R.plan.programs[0].steps[i];
    moves += s->kind == SK_PSTEP_MOVE && n.g.ops[s->op].inputs[s->slot] == x;
  }
  cr_assert_eq(moves, 2, "x to two layouts: two Moves, not %d", moves);
  expect_no_repeated_move(&R.plan, 0, "two layouts");
  run_world(&R);
  expect_all_ok(&R, "two layouts");
  against_trainer(&R, 1e-12, "two layouts");
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(program_moves, pipeline_keeps_each_move, .timeout = PM_TIMEOUT) {
  net n;
  load_shipped_net(&n, MEGATRON);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = 2, pd.pipeline.micro = 2;
  sk_parallel_plan p;
  pd.ndevices = 16;
  OK(sk_parallel_compile(&n.g, &pd, &p, E));
  for (int o = 0; o < p.graph->nops; o++)
    for (int k = 0; k < p.graph->ops[o].ninputs; k++)
      cr_assert(!p.ops[o].moved[k] || (p.ops[o].move_op[k] == o && p.ops[o].move_slot[k] == k),
                "under a pipeline '%s' input %d moves its own", p.graph->ops[o].name, k);
  sk_parallel_free(&p);
  sk_graph_free(&n.g);
}
