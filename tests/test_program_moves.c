/* test_program_moves.c -- no wasted moves in a compiled plan: a tensor is moved to a layout
   once per step (sk_parallel_op.move_op), a Reshape without a strategy keeps its producer's
   layout (no move in front of it when every cut carries over), and a copy moved for several
   readers moves their summed gradient back once (sk_parallel_op.back_op).
   1. MEGATRON: examples/nets/megatron_block.json (attention + MLP at dp 2 x mp 4) on 8 devices
      makes the redistributions MindSpore's rules make, derived in docs/strategy-search.md
      ("Moves on a Megatron block"): 2 Moves (x_2d for q/k/v, x for the first residual Add) and
      no MoveBack (both move the network input, which takes no gradient); 8 devices train like
      one (f64, 3 steps, relative 1e-12).
   2. TWO LAYOUTS: one tensor read in two different kernel layouts is still moved twice, once
      to each; the reader sharing a copy hands its gradient to that copy's MoveBack.
   3. MERGE: three readers of one moved copy (q, k, v) move their summed gradient back once, and
      train like one device; transformer.json on 4 devices moves each block's ln1_2d once and
      its gradient back once (q, k, v merged), and trains like one device on 4 and 8.
   4. SHIPPED: no (tensor, layout) moved twice, nor moved back twice, in one step, on every
      network in examples/nets at 2, 4 and 8 devices.
   5. PIPELINE: under a pipeline each reader keeps its own Move (the slots are per operator).

   The tolerance 1e-12 (f64, relative): N devices sum the same terms as one device in another
   order (partial sums, AllReduces, the readers' gradients), which differs by rounding alone,
   about 1e-16 a step; a gradient lost or counted twice is off by far more than 1e-12.

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

/* No two steps of `kind` (Move or MoveBack) in stage s's program move one tensor to or from
   one layout (the other layout is the tensor's own: the same when the tensor is). */
static void expect_no_repeated(const sk_parallel_plan *p, int s, sk_parallel_step_kind kind, const char *what) {
  const sk_program *pg = &p->programs[s];
  for (int i = 0; i < pg->nsteps; i++)
    for (int j = i + 1; j < pg->nsteps && pg->steps[i].kind == kind; j++)
      cr_assert(pg->steps[j].kind != kind || !same_move(p, &pg->steps[i], &pg->steps[j]),
                "%s: steps #%d (%s) and #%d (%s) %s '%s' with the same layout", what, i, p->graph->ops[pg->steps[i].op].name,
                j, p->graph->ops[pg->steps[j].op].name, kind == SK_PSTEP_MOVE ? "move" : "move back",
                p->graph->tensors[p->graph->ops[pg->steps[i].op].inputs[pg->steps[i].slot]].name);
}

static void expect_no_repeated_move(const sk_parallel_plan *p, int s, const char *what) {
  expect_no_repeated(p, s, SK_PSTEP_MOVE, what);
  expect_no_repeated(p, s, SK_PSTEP_MOVE_BACK, what);
}

/* The steps of `kind` in stage 0's program that move tensor t (Move, MoveBack). */
static int count_moves_of(const sk_parallel_plan *p, sk_parallel_step_kind kind, int t) {
  int n = 0;
  for (int i = 0; i < p->programs[0].nsteps; i++) {
    const sk_program_step *s = &p->programs[0].steps[i];
    n += s->kind == kind && p->graph->ops[s->op].inputs[s->slot] == t;
  }
  return n;
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
  cr_assert_eq(count_kind(&R.plan, 0, SK_PSTEP_MOVE), 2, "megatron_block: %d Moves, want 2 (x_2d, x)",
               count_kind(&R.plan, 0, SK_PSTEP_MOVE));
  cr_assert_eq(count_kind(&R.plan, 0, SK_PSTEP_MOVE_BACK), 0, "megatron_block: %d MoveBacks, want none (x has no gradient)",
               count_kind(&R.plan, 0, SK_PSTEP_MOVE_BACK));
  cr_assert_eq(count_created(&R.plan, 0, SK_PBUF_KERNEL_IN), 2, "one moved copy per Move");
  int k = op_named(&n.g, "k"), q = op_named(&n.g, "q");
  cr_assert(R.plan.ops[k].moved[0] && R.plan.ops[k].move_op[0] == q && R.plan.ops[k].move_slot[0] == 0,
            "k reads the copy of x_2d that q's Move made");
  const char *reshapes[3] = {"out_3d", "residual1_2d", "fc2_3d"}; /* each keeps its producer's layout */
  for (int i = 0; i < 3; i++)
    cr_assert(!R.plan.ops[op_named(&n.g, reshapes[i])].moved[0], "%s reads its input where it is", reshapes[i]);
  run_world(&R);
  expect_all_ok(&R, "megatron_block");
  errs m = against_trainer(&R, 1e-12, "megatron_block");
  cr_log_info("megatron_block, 8 devices f64: loss %.3g, parameters %.3g relative", m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* x = relu(in + p) [16, 8], placed whole by the ReLU's strategy; a gradient reaches it (p's). */
static int whole_activation(net *n) {
  sk_graph_init(&n->g), n->nin = 0;
  int in = add_input(n, "in", SK_F32, 2, SH2(16, 8), 0);
  int h = add_op(n, OP("shift", SK_OP_ADD, in, add_param(n, "p", 2, SH2(16, 8), SK_INIT_XAVIER_UNIFORM, 0)));
  sk_graph_op r = OP("relu", SK_OP_RELU, h);
  SHARD(r, 0, 1, 1);
  return add_op(n, r);
}

/* Three MatMuls names[i] = x w_i (x: whole_activation), the first cut (2,4)x(4,1) when
   row_first, the others (2,1)x(1,4), their sum the loss's input. */
static void build_readers(net *n, const char *const names[3], bool row_first) {
  int x = whole_activation(n), sum = -1;
  for (int i = 0; i < 3; i++) {
    char w[16]; /* room for any int: the sanitizer build cannot bound i */
    snprintf(w, sizeof w, "w%d", i + 1);
    sk_graph_op mm = OP(names[i], SK_OP_MATMUL, x, add_param(n, w, 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0));
    if (i == 0 && row_first) SHARD(mm, 0, 2, 4), SHARD(mm, 1, 4, 1);
    else SHARD(mm, 0, 2, 1), SHARD(mm, 1, 1, 4);
    int y = add_op(n, mm);
    sum = sum < 0 ? y : add_op(n, OP(i == 1 ? "sum2" : "sum3", SK_OP_ADD, sum, y));
  }
  OK(sk_graph_set_loss(&n->g, add_op(n, OP("loss", SK_OP_VIRTUAL_LOSS, sum)), E));
}

/* x read by a = x w1 cut (2,4)x(4,1) and by b = x w2 cut (2,1)x(1,4), with x placed whole by a
   ReLU in front: x moves to two layouts, then c = x w3 reads it as b does (shares b's copy). */
static void build_two_layouts(net *n) { build_readers(n, (const char *const[3]){"a", "b", "c"}, true); }

Test(program_moves, two_layouts_two_moves, .timeout = PM_TIMEOUT) {
  net n;
  run R;
  build_two_layouts(&n);
  run_init(&R, &n, 8, SK_F64, sgd(0.05), 3);
  int a = op_named(&n.g, "a"), b = op_named(&n.g, "b"), c = op_named(&n.g, "c");
  cr_assert(R.plan.ops[a].moved[0] && R.plan.ops[b].moved[0] && R.plan.ops[c].moved[0], "each MatMul reads relu's output moved");
  cr_assert_eq(R.plan.ops[b].move_op[0], b, "b's layout is not a's: b moves its own");
  cr_assert_eq(R.plan.ops[c].move_op[0], b, "c reads x as b does: b's copy");
  int x = n.g.ops[a].inputs[0], moves = count_moves_of(&R.plan, SK_PSTEP_MOVE, x);
  cr_assert_eq(moves, 2, "x to two layouts: two Moves, not %d", moves);
  cr_assert_eq(count_moves_of(&R.plan, SK_PSTEP_MOVE_BACK, x), 2, "x's gradient: a's MoveBack and b's (with c's)");
  cr_assert(R.plan.ops[c].back_op[0] == b && R.plan.ops[c].back_slot[0] == 0, "c's gradient returns with b's");
  expect_no_repeated_move(&R.plan, 0, "two layouts");
  run_world(&R);
  expect_all_ok(&R, "two layouts");
  against_trainer(&R, 1e-12, "two layouts");
  run_free(&R);
  sk_graph_free(&n.g);
}

/* x read by q, k and v = x w cut (2,1)x(1,4): one moved copy. */
static void build_qkv(net *n) { build_readers(n, (const char *const[3]){"q", "k", "v"}, false); }

Test(program_moves, qkv_gradients_move_back_once, .timeout = PM_TIMEOUT) {
  net n;
  run R;
  build_qkv(&n);
  run_init(&R, &n, 8, SK_F64, sgd(0.05), 3);
  int q = op_named(&n.g, "q"), x = n.g.ops[q].inputs[0];
  cr_assert_eq(count_moves_of(&R.plan, SK_PSTEP_MOVE, x), 1, "x moves once for q, k and v");
  cr_assert_eq(count_moves_of(&R.plan, SK_PSTEP_MOVE_BACK, x), 1, "q, k and v's gradients move back once, summed");
  for (int i = 0; i < 3; i++) {
    int o = op_named(&n.g, (const char *[]){"q", "k", "v"}[i]);
    cr_assert(R.plan.ops[o].back_op[0] == q && R.plan.ops[o].back_slot[0] == 0, "reader %d's gradient returns with q's", i);
  }
  run_world(&R);
  expect_all_ok(&R, "q, k, v");
  errs m = against_trainer(&R, 1e-12, "q, k, v");
  cr_log_info("q, k, v, 8 devices f64: loss %.3g, parameters %.3g relative", m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* y = x * x cut (2,1) both, x whole (whole_activation): input 1 reads input 0's copy, and the one
   MoveBack follows both inputs' steps, carrying their summed gradient. */
Test(program_moves, one_operator_reads_one_copy_twice, .timeout = PM_TIMEOUT) {
  net n;
  run R;
  int x = whole_activation(&n);
  sk_graph_op sq = OP("square", SK_OP_MUL, x, x);
  SHARD(sq, 0, 2, 1), SHARD(sq, 1, 2, 1);
  OK(sk_graph_set_loss(&n.g, add_op(&n, OP("loss", SK_OP_VIRTUAL_LOSS, add_op(&n, sq))), E));
  run_init(&R, &n, 8, SK_F64, sgd(0.05), 3);
  int o = op_named(&n.g, "square");
  cr_assert(R.plan.ops[o].move_op[1] == o && R.plan.ops[o].move_slot[1] == 0, "input 1 reads input 0's copy");
  cr_assert(R.plan.ops[o].back_op[1] == o && R.plan.ops[o].back_slot[1] == 0, "input 1's gradient returns with input 0's");
  cr_assert_eq(count_moves_of(&R.plan, SK_PSTEP_MOVE, x), 1, "x moves once");
  cr_assert_eq(count_moves_of(&R.plan, SK_PSTEP_MOVE_BACK, x), 1, "x's two gradients move back once");
  run_world(&R);
  expect_all_ok(&R, "x * x");
  against_trainer(&R, 1e-12, "x * x");
  run_free(&R);
  sk_graph_free(&n.g);
}

/* On 4 devices the transformer's Megatron strategies fall back to data parallel while the
   Reshape into the q/k/v MatMuls is cut 4 ways: each block's ln1_2d moves once and its three
   gradients move back once. */
static void transformer_merges(const sk_parallel_plan *p, const sk_graph *g) {
  int blocks = 0;
  for (int o = 0; o < g->nops; o++) {
    const char *dot = strchr(g->ops[o].name, '.');
    if (!dot || strcmp(dot, ".q")) continue;
    int t = g->ops[o].inputs[0];
    cr_assert(p->ops[o].moved[0], "%s reads its input moved", g->ops[o].name);
    cr_assert_eq(count_moves_of(p, SK_PSTEP_MOVE, t), 1, "'%s' moves once", g->tensors[t].name);
    cr_assert_eq(count_moves_of(p, SK_PSTEP_MOVE_BACK, t), 1, "'%s': one MoveBack for q, k and v, not %d", g->tensors[t].name,
                 count_moves_of(p, SK_PSTEP_MOVE_BACK, t));
    blocks++;
  }
  cr_assert_gt(blocks, 0, "the transformer has q MatMuls");
}

static void transformer_like_one(int ndev, bool merges) {
  net n;
  run R;
  load_shipped_net(&n, "examples/nets/transformer.json");
  run_init(&R, &n, ndev, SK_F64, sgd(0.01), 3);
  if (merges) transformer_merges(&R.plan, &n.g);
  expect_no_repeated_move(&R.plan, 0, "transformer");
  run_world(&R);
  expect_all_ok(&R, "transformer");
  errs m = against_trainer(&R, 1e-12, "transformer");
  cr_log_info("transformer, %d devices f64: loss %.3g, parameters %.3g relative", ndev, m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(program_moves, transformer_qkv_gradient_moves_back_once, .timeout = PM_TIMEOUT) { transformer_like_one(4, true); }

Test(program_moves, transformer_8_devices_like_one, .timeout = PM_TIMEOUT) { transformer_like_one(8, false); }

/* Every shipped network at 2, 4 and 8 devices: no (tensor, layout) moved, nor moved back,
   twice in one step. */
Test(program_moves, shipped_nets_move_each_layout_once, .timeout = PM_TIMEOUT) {
  const char *nets[] = {"attention", "dense_mutmul", "megatron_block", "operator_parallel", "recursive_programming", "transformer"};
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++)
    for (int ndev = 2; ndev <= 8; ndev *= 2) {
      char path[128], what[160];
      snprintf(path, sizeof path, "examples/nets/%s.json", nets[i]);
      snprintf(what, sizeof what, "%s on %d devices", nets[i], ndev);
      net n;
      load_shipped_net(&n, path);
      sk_autoparallel pd;
      memset(&pd, 0, sizeof pd);
      pd.ndevices = ndev;
      sk_parallel_plan p;
      OK(sk_parallel_compile(&n.g, &pd, &p, E));
      expect_no_repeated_move(&p, 0, what);
      sk_parallel_free(&p);
      sk_graph_free(&n.g);
    }
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
