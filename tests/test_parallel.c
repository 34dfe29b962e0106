/* sk_parallel.h: the operator-parallel tutorial compiled for 8 devices (each MatMul's device
   matrix, tensor maps, slices and Mirror groups as MindSpore's tutorial gives them, the moves,
   the program's shape), the same network on 1 and 4 devices (strategies that need more devices
   fall back to data parallel; strict strategies refuse them), the dataset strategies, every
   refused argument, the kernels' facts on sharded operators, layout comparison across meshes,
   the program as text, the transformer, and the plan's memory (freed, zeroed, nothing leaked
   by a failed compile). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_json.h"

/* ---- helpers ------------------------------------------------------------------------------ */

#define OK(call)                                                               \
  do {                                                                         \
    sk_error e_;                                                               \
    memset(&e_, 0, sizeof e_);                                                 \
    sk_result r_ = (call);                                                     \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg); \
  } while (0)
/* A call that must fail with SK_ERR_INVALID_ARGUMENT and a message holding `word`. */
#define BAD(word, call)                                                                                   \
  do {                                                                                                    \
    sk_error e_;                                                                                          \
    memset(&e_, 0, sizeof e_);                                                                            \
    sk_result r_ = (call);                                                                                \
    cr_assert_eq(r_, SK_ERR_INVALID_ARGUMENT, "%s returned %s", #call, sk_result_name(r_));               \
    cr_assert_eq(e_.code, SK_ERR_INVALID_ARGUMENT);                                                       \
    cr_assert(strstr(e_.msg, word) != NULL, "%s: message '%s' does not hold '%s'", #call, e_.msg, word); \
  } while (0)
#define E (&e_) /* OK and BAD pass &e_ as the error */

#define TUTORIAL "examples/nets/operator_parallel.json"
#define TRANSFORMER "examples/nets/transformer.json"

static void load(const char *path, sk_graph *g) {
  sk_graph_init(g);
  OK(sk_json_load_network(path, g, E));
}

static sk_autoparallel pdesc(int ndevices, sk_dataset_strategy dataset) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = ndevices, d.dataset = dataset;
  return d;
}

/* Compiles g for n devices (data-parallel dataset), asserting success. */
static void compile(const sk_graph *g, int n, sk_parallel_plan *p) {
  sk_autoparallel d = pdesc(n, SK_DATASET_DATA_PARALLEL);
  OK(sk_parallel_compile(g, &d, p, E));
}

static int op_index(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator '%s'", name);
  return -1;
}

static int tensor(const sk_graph *g, const char *name) {
  int t = sk_graph_find(g, name);
  cr_assert_geq(t, 0, "no tensor '%s'", name);
  return t;
}

/* rank's group along `axes` of mesh, into ranks[8]; returns its size. */
static int group(const sk_mesh *mesh, int rank, uint32_t axes, int *ranks) {
  int n = 0;
  OK(sk_mesh_group(mesh, rank, axes, ranks, 8, &n, E));
  return n;
}

static void assert_group(const sk_mesh *mesh, int rank, uint32_t axes, int n, const int *want) {
  int got[8];
  cr_assert_eq(group(mesh, rank, axes, got), n, "rank %d: group of %d ranks, want %d", rank, group(mesh, rank, axes, got), n);
  for (int i = 0; i < n; i++) cr_assert_eq(got[i], want[i], "rank %d group entry %d: %d, want %d", rank, i, got[i], want[i]);
}

/* MindSpore's tensor map of a layout, one value per dim (-1: unsplit; dims on one axis only). */
static void assert_ms_map(const sk_layout *l, int nd, const int *want, const char *what) {
  sk_dim_map ms[SK_MAX_DIMS];
  sk_layout_to_ms_map(l, ms);
  cr_assert_eq(l->ndims, nd, "%s: %d dims", what, l->ndims);
  for (int d = 0; d < nd; d++) {
    int v = ms[d].naxes ? ms[d].axes[0] : -1;
    cr_assert(ms[d].naxes <= 1, "%s dim %d: on %d axes", what, d, ms[d].naxes);
    cr_assert_eq(v, want[d], "%s dim %d: tensor map %d, want %d", what, d, v, want[d]);
  }
}

static void assert_mesh(const sk_mesh *m, int naxes, const int *dims, const char *what) {
  cr_assert_eq(m->naxes, naxes, "%s: %d axes, want %d", what, m->naxes, naxes);
  for (int a = 0; a < naxes; a++) cr_assert_eq(m->dims[a], dims[a], "%s axis %d: %d, want %d", what, a, m->dims[a], dims[a]);
}

static void assert_slice(const sk_layout *l, int rank, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  sk_slice s;
  OK(sk_layout_slice(l, rank, &s, E));
  cr_assert(s.start[0] == r0 && s.stop[0] == r1 && s.start[1] == c0 && s.stop[1] == c1,
            "rank %d: [%lld:%lld, %lld:%lld], want [%lld:%lld, %lld:%lld]", rank, (long long)s.start[0],
            (long long)s.stop[0], (long long)s.start[1], (long long)s.stop[1], (long long)r0, (long long)r1,
            (long long)c0, (long long)c1);
}

static int count_steps(const sk_parallel_plan *p, sk_parallel_step_kind kind) {
  int n = 0;
  for (int i = 0; i < p->nsteps; i++) n += p->steps[i].kind == kind;
  return n;
}

/* The step of `kind` for operator op and input slot, or -1. */
static int find_step(const sk_parallel_plan *p, sk_parallel_step_kind kind, int op, int slot) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == kind && p->steps[i].op == op && p->steps[i].slot == slot) return i;
  return -1;
}

static bool has_strategy(const sk_graph_op *op) { return op->desc.has_strategy || op->desc.has_layouts; }

/* A small network: x [b, k] (input) MatMul w [k, n] (parameter), then the softmax loss against
   labels y [b]. A NULL strategy leaves the operator data parallel; a loss strategy of 0 leaves
   the loss data parallel, 1 makes it ((1,1),(1)) (whole on every device). */
typedef struct mm_net {
  sk_graph g;
  int x, y, w, z, loss;
} mm_net;

static void mm_build(mm_net *m, int b, int k, int n, const int *xs, const int *ws, int whole_loss) {
  sk_graph_init(&m->g);
  int64_t xsh[2] = {b, k}, wsh[2] = {k, n}, ysh[1] = {b};
  sk_init init = {SK_INIT_XAVIER_UNIFORM, 0};
  OK(sk_graph_add_input(&m->g, "x", SK_F32, 2, xsh, &m->x, E));
  OK(sk_graph_add_input(&m->g, "y", SK_I32, 1, ysh, &m->y, E));
  OK(sk_graph_add_param(&m->g, "w", SK_F32, 2, wsh, init, &m->w, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, "mm"), op.desc.kind = SK_OP_MATMUL, op.ninputs = 2, op.inputs[0] = m->x, op.inputs[1] = m->w;
  if (xs) {
    op.desc.has_strategy = true;
    for (int i = 0; i < 2; i++) op.desc.strategy[0][i] = xs[i], op.desc.strategy[1][i] = ws[i];
  }
  int i = -1;
  OK(sk_graph_add_op(&m->g, &op, &i, E));
  m->z = m->g.ops[i].outputs[0];
  memset(&op, 0, sizeof op);
  strcpy(op.name, "loss"), op.desc.kind = SK_OP_SOFTMAX_CE, op.ninputs = 2, op.inputs[0] = m->z, op.inputs[1] = m->y;
  if (whole_loss) op.desc.has_strategy = true, op.desc.strategy[0][0] = op.desc.strategy[0][1] = op.desc.strategy[1][0] = 1;
  OK(sk_graph_add_op(&m->g, &op, &i, E));
  m->loss = m->g.ops[i].outputs[0];
  OK(sk_graph_set_loss(&m->g, m->loss, E));
}

/* Adds an operator reading a (and b) and returns its first output. */
static int add_op(sk_graph *g, sk_graph_op *op, const char *name, sk_op_kind kind, int n, int a, int b) {
  strcpy(op->name, name), op->desc.kind = kind, op->ninputs = n, op->inputs[0] = a, op->inputs[1] = b;
  int i = -1;
  OK(sk_graph_add_op(g, op, &i, E));
  return g->ops[i].outputs[0];
}

/* The softmax loss of logits against labels y [b], set as the graph's loss. */
static void add_loss(sk_graph *g, int logits, int y) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  OK(sk_graph_set_loss(g, add_op(g, &op, "loss", SK_OP_SOFTMAX_CE, 2, logits, y), E));
}

/* ---- 1. the operator-parallel tutorial on 8 devices --------------------------------------- */

/* fc1 ((2,4),(4,1)): device matrix (2,4,1), x map (2,1), w map (1,0), out (2,0); w's slice on
   rank 0 is rows [0,196) and every column; its Mirror runs along the batch axis: {0,4}. */
Test(parallel, tutorial_fc1_as_mindspore) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  const sk_parallel_op *fc1 = &p.ops[op_index(&g, "fc1")];
  assert_mesh(&fc1->plan.mesh, 3, (const int[]){2, 4, 1}, "fc1 device matrix");
  assert_ms_map(&fc1->plan.in[0], 2, (const int[]){2, 1}, "fc1 x");
  assert_ms_map(&fc1->plan.in[1], 2, (const int[]){1, 0}, "fc1 w");
  assert_ms_map(&fc1->plan.out[0], 2, (const int[]){2, 0}, "fc1 out");
  const sk_layout *w = &p.tensors[tensor(&g, "fc1.weight")].layout; /* stored as fc1 reads it */
  assert_slice(w, 0, 0, 196, 0, 512);
  assert_slice(w, 5, 196, 392, 0, 512); /* rank 5: coordinates (1,1,0) */
  cr_assert_eq(fc1->plan.grad[1].kind, SK_COLL_ALLREDUCE);
  assert_group(&fc1->plan.mesh, 0, fc1->plan.grad[1].axes, 2, (const int[]){0, 4});
  assert_group(&fc1->plan.mesh, 3, fc1->plan.grad[1].axes, 2, (const int[]){3, 7});
  cr_assert_eq(fc1->plan.fwd.kind, SK_COLL_ALLREDUCE); /* the contraction dim is cut 4 ways */
  assert_group(&fc1->plan.mesh, 0, fc1->plan.fwd.axes, 4, (const int[]){0, 1, 2, 3});
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* fc2 ((1,8),(8,1)): the contraction dim cut over all 8, so a forward AllReduce over all 8; its
   weight is cut over all 8 too, so no Mirror. fc3 without a strategy: data parallel, its weight
   whole on every device and mirrored over all 8. */
Test(parallel, tutorial_fc2_fc3) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  int o2 = op_index(&g, "fc2"), o3 = op_index(&g, "fc3");
  const sk_parallel_op *fc2 = &p.ops[o2], *fc3 = &p.ops[o3];
  const int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  assert_mesh(&fc2->plan.mesh, 3, (const int[]){1, 8, 1}, "fc2 device matrix");
  cr_assert_eq(fc2->plan.fwd.kind, SK_COLL_ALLREDUCE);
  assert_group(&fc2->plan.mesh, 0, fc2->plan.fwd.axes, 8, all);
  cr_assert_eq(fc2->plan.grad[1].kind, SK_COLL_NONE, "fc2's weight has no replica to mirror");
  cr_assert_eq(find_step(&p, SK_PSTEP_MIRROR, o2, 1), -1);
  cr_assert_eq(find_step(&p, SK_PSTEP_FORWARD_COMM, o2, 0) >= 0, true);
  cr_assert(!fc3->desc.has_strategy && !fc3->fell_back);
  cr_assert_eq(sk_layout_split_count(&fc3->plan.in[0], 0), 8, "fc3 cuts its batch over all 8");
  cr_assert_eq(sk_layout_split_count(&fc3->plan.in[1], 0) * sk_layout_split_count(&fc3->plan.in[1], 1), 1);
  cr_assert_eq(fc3->plan.fwd.kind, SK_COLL_NONE);
  int m = find_step(&p, SK_PSTEP_MIRROR, o3, 1);
  cr_assert_geq(m, 0, "fc3's weight has a Mirror step");
  assert_group(&fc3->plan.mesh, 5, p.steps[m].comm.axes, 8, all);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* Inputs read in another layout than their tensor's are moved; fc3 reads relu2's output as
   relu2 ((8,1)) left it, and nothing falls back on 8 devices. */
Test(parallel, tutorial_moves) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  cr_assert_eq(p.nfallbacks, 0);
  for (int o = 0; o < g.nops; o++) cr_assert(!p.ops[o].fell_back, "'%s' fell back", g.ops[o].name);
  int f1 = op_index(&g, "fc1"), f3 = op_index(&g, "fc3"), fl = op_index(&g, "flatten");
  cr_assert(p.ops[f1].moved[0], "fc1 reads flatten's rows (8 ways) as (2,4)");
  cr_assert(!p.ops[f1].moved[1], "fc1.weight is stored as fc1 reads it");
  cr_assert(!p.ops[f3].moved[0] && !p.ops[f3].moved[1]);
  cr_assert(!p.ops[fl].moved[0], "the image arrives data parallel, as flatten reads it");
  cr_assert(p.ops[op_index(&g, "fc2")].moved[0]);
  cr_assert_geq(find_step(&p, SK_PSTEP_MOVE, f1, 0), 0);
  cr_assert_eq(find_step(&p, SK_PSTEP_MOVE, f3, 0), -1);
  /* the image takes no gradient: fc1's input 0 is moved but never moved back */
  cr_assert_eq(find_step(&p, SK_PSTEP_MOVE_BACK, f1, 0), -1);
  cr_assert_geq(find_step(&p, SK_PSTEP_MOVE_BACK, op_index(&g, "fc2"), 0), 0);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* Index of the first backward-phase step (every step before it is MOVE, FORWARD or
   FORWARD_COMM). */
static int forward_end(const sk_parallel_plan *p) {
  int i = 0;
  while (i < p->nsteps && (p->steps[i].kind == SK_PSTEP_MOVE || p->steps[i].kind == SK_PSTEP_FORWARD ||
                           p->steps[i].kind == SK_PSTEP_FORWARD_COMM))
    i++;
  return i;
}

/* The program: forward steps in graph order (every operator's Forward once, ascending), then
   backward steps in reverse operator order, then exactly one Update, last; every Mirror is a
   parameter's. */
static void assert_program_shape(const sk_graph *g, const sk_parallel_plan *p) {
  int fe = forward_end(p), next = 0;
  cr_assert_gt(p->nsteps, 1);
  for (int i = 0; i < fe; i++) {
    cr_assert(i == 0 || p->steps[i].op >= p->steps[i - 1].op, "step %d goes back in the forward", i);
    if (p->steps[i].kind == SK_PSTEP_FORWARD) cr_assert_eq(p->steps[i].op, next++, "step %d: forward out of order", i);
  }
  cr_assert_eq(next, g->nops, "%d Forward steps for %d operators", next, g->nops);
  cr_assert_eq(count_steps(p, SK_PSTEP_UPDATE), 1);
  cr_assert_eq(p->steps[p->nsteps - 1].kind, SK_PSTEP_UPDATE);
  cr_assert_eq(p->steps[p->nsteps - 1].op, -1);
  for (int i = fe; i < p->nsteps - 1; i++) {
    const sk_parallel_step *s = &p->steps[i];
    cr_assert(s->kind != SK_PSTEP_MOVE && s->kind != SK_PSTEP_FORWARD && s->kind != SK_PSTEP_FORWARD_COMM,
              "step %d: %s after the forward", i, sk_parallel_step_name(s->kind));
    cr_assert(i == fe || s->op <= p->steps[i - 1].op, "step %d: backward not in reverse operator order", i);
    if (s->kind == SK_PSTEP_MIRROR)
      cr_assert_eq(g->tensors[g->ops[s->op].inputs[s->slot]].role, SK_TENSOR_PARAM, "step %d: Mirror of a non-parameter", i);
  }
}

Test(parallel, tutorial_program_shape) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  assert_program_shape(&g, &p);
  cr_assert_eq(p.steps[0].kind, SK_PSTEP_FORWARD, "flatten reads its input as it arrives");
  cr_assert_eq(p.steps[0].op, 0);
  cr_assert_eq(count_steps(&p, SK_PSTEP_MIRROR), 2, "fc1's and fc3's weights; fc2's has no replica");
  int loss = op_index(&g, "loss");
  cr_assert_geq(find_step(&p, SK_PSTEP_FORWARD_COMM, loss, 0), 0, "the loss sums its batch-split parts");
  cr_assert_eq(p.steps[forward_end(&p)].kind, SK_PSTEP_BACKWARD);
  cr_assert_eq(p.steps[forward_end(&p)].op, loss, "the backward starts at the loss");
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* ---- 2. one device ------------------------------------------------------------------------ */

static void assert_no_communication(const sk_parallel_plan *p) {
  for (int i = 0; i < p->nsteps; i++) {
    sk_parallel_step_kind k = p->steps[i].kind;
    cr_assert(k == SK_PSTEP_FORWARD || k == SK_PSTEP_BACKWARD || k == SK_PSTEP_UPDATE, "step %d: %s on one device", i,
              sk_parallel_step_name(k));
    cr_assert_eq(p->steps[i].comm.kind, SK_COLL_NONE);
  }
}

Test(parallel, one_device_falls_back) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 1, &p);
  int with = 0;
  for (int o = 0; o < g.nops; o++) {
    with += has_strategy(&g.ops[o]);
    cr_assert_eq(p.ops[o].fell_back, has_strategy(&g.ops[o]), "'%s'", g.ops[o].name);
    cr_assert(!p.ops[o].desc.has_strategy, "'%s' kept its strategy", g.ops[o].name);
    for (int k = 0; k < g.ops[o].ninputs; k++) cr_assert(!p.ops[o].moved[k], "'%s' input %d moved", g.ops[o].name, k);
  }
  cr_assert_eq(with, 4, "fc1, relu1, fc2, relu2");
  cr_assert_eq(p.nfallbacks, with);
  assert_no_communication(&p);
  assert_program_shape(&g, &p);
  static char text[8192];
  size_t n = sk_parallel_format_program(&p, 0, text, sizeof text);
  cr_assert(n > 0 && n < sizeof text);
  cr_assert_null(strstr(text, "group"), "%s", text);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(parallel, strict_strategies_refused) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(1, SK_DATASET_DATA_PARALLEL);
  d.strict_strategies = true;
  BAD("'fc1'", sk_parallel_compile(&g, &d, &p, E));
  cr_assert(!p.ops && !p.steps && !p.tensors, "a refused compile leaves nothing");
  d.ndevices = 4; /* fc1 needs 8 before relu1, which fits 4, is reached */
  BAD("'fc1'", sk_parallel_compile(&g, &d, &p, E));
  d.ndevices = 8; /* every strategy fits: strictness changes nothing */
  OK(sk_parallel_compile(&g, &d, &p, E));
  cr_assert_eq(p.nfallbacks, 0);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* ---- 3. four devices ---------------------------------------------------------------------- */

Test(parallel, tutorial_on_four_keeps_what_fits) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 4, &p);
  cr_assert_eq(p.nfallbacks, 3, "fc1, fc2 and relu2 need 8");
  cr_assert(p.ops[op_index(&g, "fc1")].fell_back && p.ops[op_index(&g, "fc2")].fell_back);
  cr_assert(p.ops[op_index(&g, "relu2")].fell_back);
  const sk_parallel_op *relu1 = &p.ops[op_index(&g, "relu1")];
  cr_assert(!relu1->fell_back && relu1->desc.has_strategy, "relu1 (4,1) fits 4 devices");
  assert_mesh(&relu1->plan.mesh, 2, (const int[]){4, 1}, "relu1 device matrix");
  const sk_parallel_op *fc1 = &p.ops[op_index(&g, "fc1")];
  cr_assert_eq(sk_layout_split_count(&fc1->plan.in[0], 0), 4, "fc1 is data parallel now");
  cr_assert_eq(sk_layout_split_count(&fc1->plan.in[0], 1), 1);
  assert_program_shape(&g, &p);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(parallel, matmul_strategy_fits_four) {
  mm_net m;
  sk_parallel_plan p;
  mm_build(&m, 8, 16, 4, (const int[]){2, 2}, (const int[]){2, 1}, 0);
  compile(&m.g, 4, &p);
  const sk_parallel_op *mm = &p.ops[0];
  cr_assert(!mm->fell_back && mm->desc.has_strategy);
  cr_assert_eq(p.nfallbacks, 0);
  assert_mesh(&mm->plan.mesh, 3, (const int[]){2, 2, 1}, "mm device matrix");
  assert_group(&mm->plan.mesh, 0, mm->plan.fwd.axes, 2, (const int[]){0, 1});
  assert_group(&mm->plan.mesh, 1, mm->plan.grad[1].axes, 2, (const int[]){1, 3});
  assert_slice(&p.tensors[m.w].layout, 1, 8, 16, 0, 4);
  sk_parallel_free(&p);
  sk_graph_free(&m.g);
}

Test(parallel, matmul_strategy_needing_eight_falls_back_on_four) {
  mm_net m;
  sk_parallel_plan p;
  mm_build(&m, 8, 16, 4, (const int[]){2, 4}, (const int[]){4, 1}, 0);
  compile(&m.g, 4, &p);
  const sk_parallel_op *mm = &p.ops[0];
  cr_assert(mm->fell_back && !mm->desc.has_strategy);
  cr_assert_eq(p.nfallbacks, 1);
  cr_assert_eq(sk_layout_split_count(&mm->plan.in[0], 0), 4);
  cr_assert_eq(sk_layout_split_count(&mm->plan.in[1], 0), 1);
  cr_assert_eq(mm->plan.fwd.kind, SK_COLL_NONE);
  cr_assert_eq(mm->plan.grad[1].kind, SK_COLL_ALLREDUCE, "the whole weight is mirrored over all 4");
  sk_parallel_free(&p);
  sk_graph_free(&m.g);
}

/* ((2,1),(1,4)): no tuple needs more than 4, but the device matrix [2,1,4] takes x's rows and
   w's columns together: 8 devices. */
Test(parallel, matmul_device_matrix_counts_both_tuples) {
  mm_net m;
  sk_parallel_plan p;
  mm_build(&m, 8, 16, 4, (const int[]){2, 1}, (const int[]){1, 4}, 0);
  compile(&m.g, 4, &p);
  cr_assert(p.ops[0].fell_back, "needs 8 devices");
  cr_assert_eq(p.nfallbacks, 1);
  sk_parallel_free(&p);
  compile(&m.g, 8, &p);
  cr_assert(!p.ops[0].fell_back);
  assert_mesh(&p.ops[0].plan.mesh, 3, (const int[]){2, 1, 4}, "mm device matrix");
  sk_parallel_free(&p);
  sk_graph_free(&m.g);
}

/* A product that fits in count but does not divide it (3 of 4) falls back too. */
Test(parallel, strategy_not_dividing_falls_back) {
  mm_net m;
  sk_parallel_plan p;
  mm_build(&m, 12, 16, 4, (const int[]){3, 1}, (const int[]){1, 1}, 0);
  compile(&m.g, 4, &p);
  cr_assert(p.ops[0].fell_back);
  cr_assert_eq(p.nfallbacks, 1);
  sk_parallel_free(&p);
  sk_graph_free(&m.g);
}

/* OneHot's strategy is written over its output, one entry more than the indices' rank: the
   class cut counts toward the devices it needs. */
Test(parallel, one_hot_class_cut_counts) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t ysh[1] = {8}, xsh[2] = {8, 4}, wsh[2] = {4, 16};
  int y, x, w;
  sk_init init = {SK_INIT_XAVIER_UNIFORM, 0};
  OK(sk_graph_add_input(&g, "y", SK_I32, 1, ysh, &y, E));
  OK(sk_graph_add_input(&g, "x", SK_F32, 2, xsh, &x, E));
  OK(sk_graph_add_param(&g, "w", SK_F32, 2, wsh, init, &w, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.desc.depth = 16, op.desc.has_strategy = true, op.desc.strategy[0][0] = 1, op.desc.strategy[0][1] = 4;
  int oh = add_op(&g, &op, "oh", SK_OP_ONE_HOT, 1, y, 0);
  memset(&op, 0, sizeof op);
  add_loss(&g, add_op(&g, &op, "z", SK_OP_MATMUL, 2, x, w), oh);
  sk_parallel_plan p;
  compile(&g, 2, &p); /* (1,4) needs 4 */
  cr_assert(p.ops[0].fell_back);
  cr_assert_eq(p.nfallbacks, 1);
  sk_parallel_free(&p);
  sk_autoparallel d = pdesc(2, SK_DATASET_DATA_PARALLEL);
  d.strict_strategies = true;
  BAD("'oh'", sk_parallel_compile(&g, &d, &p, E));
  sk_graph_free(&g);
}

/* ---- 4. dataset strategy and refused arguments -------------------------------------------- */

Test(parallel, dataset_data_parallel_cuts_batch) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  int img = tensor(&g, "image"), lab = tensor(&g, "label");
  cr_assert_eq(sk_layout_split_count(&p.tensors[img].layout, 0), 8);
  for (int d = 1; d < 4; d++) cr_assert_eq(sk_layout_split_count(&p.tensors[img].layout, d), 1);
  cr_assert_eq(sk_layout_split_count(&p.tensors[lab].layout, 0), 8);
  cr_assert_eq(sk_parallel_slice_count(&p, img), 4 * 28 * 28);
  cr_assert_eq(sk_parallel_slice_count(&p, lab), 4);
  sk_slice s;
  OK(sk_layout_slice(&p.tensors[img].layout, 3, &s, E));
  cr_assert(s.start[0] == 12 && s.stop[0] == 16, "rank 3 reads rows [12,16)");
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(parallel, dataset_full_batch_leaves_inputs_whole) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8, SK_DATASET_FULL_BATCH);
  OK(sk_parallel_compile(&g, &d, &p, E));
  int img = tensor(&g, "image"), lab = tensor(&g, "label");
  for (int k = 0; k < 4; k++) cr_assert_eq(sk_layout_split_count(&p.tensors[img].layout, k), 1);
  cr_assert_eq(sk_layout_split_count(&p.tensors[lab].layout, 0), 1);
  cr_assert_eq(sk_parallel_slice_count(&p, img), 32 * 28 * 28);
  cr_assert(p.ops[op_index(&g, "flatten")].moved[0], "flatten cuts the whole batch it is given");
  cr_assert(p.ops[op_index(&g, "loss")].moved[1], "so does the loss with the labels");
  assert_program_shape(&g, &p);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* x [6, 16] read by a MatMul that keeps its rows whole: only the dataset strategy cuts them. */
Test(parallel, batch_not_dividing_refused) {
  mm_net m;
  sk_parallel_plan p;
  mm_build(&m, 6, 16, 4, (const int[]){1, 4}, (const int[]){4, 1}, 1);
  sk_autoparallel d = pdesc(4, SK_DATASET_DATA_PARALLEL);
  BAD("input 'x'", sk_parallel_compile(&m.g, &d, &p, E));
  cr_assert_null(p.ops);
  d.dataset = SK_DATASET_FULL_BATCH;
  OK(sk_parallel_compile(&m.g, &d, &p, E));
  sk_parallel_free(&p);
  sk_graph_free(&m.g);
}

/* A scalar input (x [8, 4] times s []): whole on every device under either dataset strategy,
   read as it is stored. */
Test(parallel, scalar_input_whole_everywhere) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t xsh[2] = {8, 4}, wsh[2] = {4, 3}, ysh[1] = {8};
  int x, sc, y, w;
  sk_init init = {SK_INIT_ONES, 0};
  OK(sk_graph_add_input(&g, "x", SK_F32, 2, xsh, &x, E));
  OK(sk_graph_add_input(&g, "s", SK_F32, 0, NULL, &sc, E));
  OK(sk_graph_add_input(&g, "y", SK_I32, 1, ysh, &y, E));
  OK(sk_graph_add_param(&g, "w", SK_F32, 2, wsh, init, &w, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  int m = add_op(&g, &op, "m", SK_OP_MUL, 2, x, sc);
  memset(&op, 0, sizeof op);
  add_loss(&g, add_op(&g, &op, "z", SK_OP_MATMUL, 2, m, w), y);
  for (int ds = 0; ds < 2; ds++) {
    sk_parallel_plan p;
    sk_autoparallel d = pdesc(4, (sk_dataset_strategy)ds);
    OK(sk_parallel_compile(&g, &d, &p, E));
    cr_assert_eq(p.tensors[sc].layout.ndims, 0);
    cr_assert_eq(p.tensors[sc].layout.mesh.size, 4);
    cr_assert_eq(sk_parallel_slice_count(&p, sc), 1);
    cr_assert(!p.ops[0].moved[1], "dataset %d: the scalar is moved", ds);
    cr_assert_eq(p.ops[0].moved[0], ds == SK_DATASET_FULL_BATCH, "dataset %d", ds);
    sk_parallel_free(&p);
  }
  sk_graph_free(&g);
}

Test(parallel, device_count_refused) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  const int bad[] = {0, -1, SK_MAX_DEVICES + 1};
  for (int i = 0; i < 3; i++) {
    sk_autoparallel d = pdesc(bad[i], SK_DATASET_DATA_PARALLEL);
    BAD("devices", sk_parallel_compile(&g, &d, &p, E));
    cr_assert_null(p.ops);
  }
  sk_autoparallel d = pdesc(8, (sk_dataset_strategy)7);
  BAD("dataset", sk_parallel_compile(&g, &d, &p, E));
  sk_graph_free(&g);
}

Test(parallel, null_arguments_refused) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  BAD("NULL", sk_parallel_compile(NULL, &d, &p, E));
  BAD("NULL", sk_parallel_compile(&g, NULL, &p, E));
  BAD("NULL", sk_parallel_compile(&g, &d, NULL, E));
  cr_assert_eq(sk_parallel_compile(&g, &d, NULL, NULL), SK_ERR_INVALID_ARGUMENT, "no error to fill is fine");
  sk_graph_free(&g);
}

Test(parallel, graph_without_loss_refused) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t sh[2] = {8, 4};
  int x;
  OK(sk_graph_add_input(&g, "x", SK_F32, 2, sh, &x, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  add_op(&g, &op, "r", SK_OP_RELU, 1, x, 0);
  sk_parallel_plan p;
  sk_autoparallel d = pdesc(4, SK_DATASET_DATA_PARALLEL);
  BAD("loss", sk_parallel_compile(&g, &d, &p, E));
  cr_assert_null(p.ops);
  sk_graph_free(&g);
}

/* ---- 5. facts ----------------------------------------------------------------------------- */

Test(parallel, facts_loss_counts_global_batch) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  int loss = op_index(&g, "loss"), fc1 = op_index(&g, "fc1");
  for (int r = 0; r < 8; r++) {
    sk_exec_facts f;
    OK(sk_parallel_facts(&p, loss, r, &f, E));
    cr_assert_eq(f.global_count, 32, "rank %d: %lld rows", r, (long long)f.global_count);
    memset(&f, 0x5a, sizeof f); /* the facts of an operator without any are all zero */
    OK(sk_parallel_facts(&p, fc1, r, &f, E));
    cr_assert(f.global_count == 0 && f.offset == 0 && f.global_ndims == 0 && !f.inference);
  }
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* MAELoss divides by every element of the global prediction: pred [8, 3] on 4 devices. */
Test(parallel, facts_mae_loss_counts_every_element) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t xsh[2] = {8, 4}, wsh[2] = {4, 3}, lsh[2] = {8, 3};
  int x, lab, w;
  sk_init init = {SK_INIT_XAVIER_UNIFORM, 0};
  OK(sk_graph_add_input(&g, "x", SK_F32, 2, xsh, &x, E));
  OK(sk_graph_add_input(&g, "target", SK_F32, 2, lsh, &lab, E));
  OK(sk_graph_add_param(&g, "w", SK_F32, 2, wsh, init, &w, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  int z = add_op(&g, &op, "z", SK_OP_MATMUL, 2, x, w);
  memset(&op, 0, sizeof op);
  OK(sk_graph_set_loss(&g, add_op(&g, &op, "mae", SK_OP_MAE_LOSS, 2, z, lab), E));
  sk_parallel_plan p;
  compile(&g, 4, &p);
  sk_exec_facts f;
  for (int r = 0; r < 4; r++) {
    OK(sk_parallel_facts(&p, 1, r, &f, E));
    cr_assert_eq(f.global_count, 24, "rank %d: %lld", r, (long long)f.global_count);
  }
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* x [8, 6] -> Dropout ((2,2)) on 4 -> MatMul w [6, 3] -> loss against y [8]. */
Test(parallel, facts_dropout_global_shape_and_slice) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t xsh[2] = {8, 6}, wsh[2] = {6, 3}, ysh[1] = {8};
  int x, y, w;
  sk_init init = {SK_INIT_XAVIER_UNIFORM, 0};
  OK(sk_graph_add_input(&g, "x", SK_F32, 2, xsh, &x, E));
  OK(sk_graph_add_input(&g, "y", SK_I32, 1, ysh, &y, E));
  OK(sk_graph_add_param(&g, "w", SK_F32, 2, wsh, init, &w, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.keep_prob = 0.5, op.desc.has_strategy = true, op.desc.strategy[0][0] = op.desc.strategy[0][1] = 2;
  int drop = add_op(&g, &op, "drop", SK_OP_DROPOUT, 1, x, 0);
  memset(&op, 0, sizeof op);
  add_loss(&g, add_op(&g, &op, "z", SK_OP_MATMUL, 2, drop, w), y);
  sk_parallel_plan p;
  compile(&g, 4, &p);
  cr_assert(!p.ops[0].fell_back);
  for (int r = 0; r < 4; r++) {
    sk_exec_facts f;
    OK(sk_parallel_facts(&p, 0, r, &f, E));
    cr_assert(f.global_ndims == 2 && f.global_shape[0] == 8 && f.global_shape[1] == 6);
    int64_t r0 = 4 * (r / 2), c0 = 3 * (r % 2);
    cr_assert(f.slice.start[0] == r0 && f.slice.stop[0] == r0 + 4 && f.slice.start[1] == c0 && f.slice.stop[1] == c0 + 3,
              "rank %d: [%lld:%lld, %lld:%lld]", r, (long long)f.slice.start[0], (long long)f.slice.stop[0],
              (long long)f.slice.start[1], (long long)f.slice.stop[1]);
  }
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* y [8] -> OneHot depth 16, ((1,4),(),()) on 4: rank r holds classes [4r, 4r+4). */
Test(parallel, facts_one_hot_offset) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t ysh[1] = {8}, xsh[2] = {8, 4}, wsh[2] = {4, 16};
  int y, x, w;
  sk_init init = {SK_INIT_XAVIER_UNIFORM, 0};
  OK(sk_graph_add_input(&g, "y", SK_I32, 1, ysh, &y, E));
  OK(sk_graph_add_input(&g, "x", SK_F32, 2, xsh, &x, E));
  OK(sk_graph_add_param(&g, "w", SK_F32, 2, wsh, init, &w, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.desc.depth = 16, op.desc.has_strategy = true, op.desc.strategy[0][0] = 1, op.desc.strategy[0][1] = 4;
  int oh = add_op(&g, &op, "oh", SK_OP_ONE_HOT, 1, y, 0);
  memset(&op, 0, sizeof op);
  add_loss(&g, add_op(&g, &op, "z", SK_OP_MATMUL, 2, x, w), oh);
  sk_parallel_plan p;
  compile(&g, 4, &p);
  cr_assert(!p.ops[0].fell_back);
  for (int r = 0; r < 4; r++) {
    sk_exec_facts f;
    OK(sk_parallel_facts(&p, 0, r, &f, E));
    cr_assert_eq(f.offset, 4 * r, "rank %d: first class %lld", r, (long long)f.offset);
  }
  cr_assert(p.ops[op_index(&g, "loss")].moved[1], "the loss reads the labels batch-cut, not class-cut");
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* table [16, 4] (parameter), rows cut 4 ways, looked up by idx [8]: rank r holds rows [4r, 4r+4). */
Test(parallel, facts_gather_offset) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t tsh[2] = {16, 4}, ish[1] = {8};
  int tab, idx, y;
  sk_init init = {SK_INIT_NORMAL, 0};
  OK(sk_graph_add_input(&g, "idx", SK_I32, 1, ish, &idx, E));
  OK(sk_graph_add_input(&g, "y", SK_I32, 1, ish, &y, E));
  OK(sk_graph_add_param(&g, "table", SK_F32, 2, tsh, init, &tab, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.desc.has_strategy = true, op.desc.strategy[0][0] = 4, op.desc.strategy[0][1] = 1, op.desc.strategy[1][0] = 1;
  add_loss(&g, add_op(&g, &op, "emb", SK_OP_GATHER, 2, tab, idx), y);
  sk_parallel_plan p;
  compile(&g, 4, &p);
  cr_assert(!p.ops[0].fell_back);
  cr_assert_eq(p.ops[0].plan.fwd.kind, SK_COLL_REDUCE_SCATTER, "a row-split table leaves partial rows");
  for (int r = 0; r < 4; r++) {
    sk_exec_facts f;
    OK(sk_parallel_facts(&p, 0, r, &f, E));
    cr_assert_eq(f.offset, 4 * r, "rank %d: first row %lld", r, (long long)f.offset);
  }
  int ff = find_step(&p, SK_PSTEP_FORWARD_COMM, 0, 0), uc = find_step(&p, SK_PSTEP_UNDO_COMM, 0, 0);
  cr_assert(ff >= 0 && uc > ff, "ReduceScatter forward, undone by the backward");
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(parallel, facts_bad_arguments) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  sk_exec_facts f;
  BAD("operator -1", sk_parallel_facts(&p, -1, 0, &f, E));
  BAD("operator 7", sk_parallel_facts(&p, g.nops, 0, &f, E));
  BAD("rank 8", sk_parallel_facts(&p, 0, 8, &f, E));
  BAD("rank -1", sk_parallel_facts(&p, 0, -1, &f, E));
  BAD("bad argument", sk_parallel_facts(NULL, 0, 0, &f, E));
  BAD("bad argument", sk_parallel_facts(&p, 0, 0, NULL, E));
  OK(sk_parallel_facts(&p, g.nops - 1, 7, &f, E));
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* ---- 6. layouts across meshes ------------------------------------------------------------- */

static void layout_on(sk_layout *l, const char *mesh_text, const char *map, int64_t rows, int64_t cols) {
  sk_mesh m;
  int64_t sh[2] = {rows, cols};
  OK(sk_mesh_parse(&m, mesh_text, E));
  OK(sk_layout_parse(l, &m, map, 2, sh, E));
}

/* Whether every rank holds the same slice under a and b: what same_layout must answer. */
static bool same_slices(const sk_layout *a, const sk_layout *b) {
  for (int r = 0; r < a->mesh.size; r++) {
    sk_slice x, y;
    OK(sk_layout_slice(a, r, &x, E));
    OK(sk_layout_slice(b, r, &y, E));
    for (int d = 0; d < a->ndims; d++)
      if (x.start[d] != y.start[d] || x.stop[d] != y.stop[d]) return false;
  }
  return true;
}

Test(parallel, same_layout_across_meshes) {
  sk_layout a, b, c, d;
  layout_on(&a, "dp=8", "dp,None", 32, 4);
  layout_on(&b, "a0=2,a1=4", "(a0,a1),None", 32, 4);
  cr_assert(same_slices(&a, &b), "the premise: rank r holds rows [4r, 4r+4) under both");
  cr_assert(sk_parallel_same_layout(&a, &b));
  cr_assert(sk_parallel_same_layout(&b, &a));
  layout_on(&c, "dp=8,mp=1", "dp,mp", 32, 4); /* a size-1 axis changes nothing */
  cr_assert(sk_parallel_same_layout(&a, &c));
  layout_on(&d, "a0=2,a1=4", "(a1,a0),None", 32, 4); /* the other order: other rows */
  cr_assert(!same_slices(&a, &d));
  cr_assert(!sk_parallel_same_layout(&a, &d));
  cr_assert(!sk_parallel_same_layout(&b, &d));
  sk_layout s1, s2; /* scalars, as sk_ops.h lays them: whole on every device of any mesh */
  memset(&s1, 0, sizeof s1), memset(&s2, 0, sizeof s2);
  s1.mesh = a.mesh, s2.mesh = b.mesh;
  cr_assert(sk_parallel_same_layout(&s1, &s2));
  cr_assert(!sk_parallel_same_layout(&s1, &a));
}

Test(parallel, same_layout_different) {
  sk_layout a, b;
  layout_on(&a, "dp=8", "dp,None", 32, 8);
  layout_on(&b, "dp=8", "None,dp", 32, 8);
  cr_assert(!sk_parallel_same_layout(&a, &b), "rows vs columns");
  layout_on(&b, "dp=8", "None,None", 32, 8);
  cr_assert(!sk_parallel_same_layout(&a, &b), "cut vs whole");
  layout_on(&b, "dp=8", "dp,None", 64, 8);
  cr_assert(!sk_parallel_same_layout(&a, &b), "other shape");
  layout_on(&a, "a=2,b=4", "a,b", 32, 8);
  layout_on(&b, "a=2,b=4", "b,a", 32, 8);
  cr_assert(!sk_parallel_same_layout(&a, &b), "axes swapped between dims");
  cr_assert(sk_parallel_same_layout(&a, &a));
}

/* ---- 7. the program as text --------------------------------------------------------------- */

Test(parallel, format_tutorial_rank0) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  static char text[16384];
  size_t n = sk_parallel_format_program(&p, 0, text, sizeof text);
  cr_assert(n > 0 && n < sizeof text);
  cr_assert_eq(strlen(text), n);
  cr_assert_not_null(strstr(text, "Mirror"));
  cr_assert_not_null(strstr(text, "fc1.weight"));
  cr_assert_not_null(strstr(text, "\n#25 Mirror fc1 op=MatMul input=1 tensor=fc1.weight slice=[0:196,0:512] coll=AllReduce(sum) "
                                 "group=g2 ranks={0,4} bytes=401408 bucket=1\n"),
                    "fc1.weight's slice and Mirror group on rank 0: %s", text);
  cr_assert_not_null(strstr(text, "\n#27 Fused bucket=1 coll=AllReduce(sum) group=g2 ranks={0,4} bytes=401408\n"
                                 "#28 WaitFused coll=AllReduce(sum)\n#29 GradsReady\n"),
                    "fc1.weight's bucket launched at the step's end: %s", text);
  cr_assert_eq(text[n - 1], '\n');
  cr_assert_not_null(strstr(text, "\n#30 Update parameters\n# create: "), "the Update ends the step, the create section follows: %s",
                     text);
  int lines = 0;
  for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
  cr_assert_eq(lines, p.programs[0].nsteps + p.programs[0].ncreate + 3,
               "a header, one line per step, a header, one per buffer, the evaluation's line");
  const char *seed = "\n#14 SeedLoss loss\n", *last = "\n# evaluation: the training steps #0..#13 (the forward part)\n";
  cr_assert_not_null(strstr(text, seed), "%s", text);
  cr_assert(n > strlen(last) && !strcmp(text + n - strlen(last), last), "evaluation: the steps before SeedLoss, last: %s", text);
  cr_assert_eq(sk_parallel_format_program(&p, 3, text, sizeof text), strlen(text));
  cr_assert_not_null(strstr(text, " group=g2 ranks={3,7} "), "rank 3's fc1 Mirror group: %s", text);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(parallel, format_snprintf_convention) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  size_t n = sk_parallel_format_program(&p, 0, NULL, 0);
  cr_assert_gt(n, 100);
  char *full = malloc(n + 1);
  cr_assert_not_null(full);
  cr_assert_eq(sk_parallel_format_program(&p, 0, full, n + 1), n);
  cr_assert_eq(strlen(full), n);
  char small[16];
  memset(small, 'x', sizeof small);
  cr_assert_eq(sk_parallel_format_program(&p, 0, small, 10), n);
  cr_assert_eq(small[9], '\0');
  cr_assert(!memcmp(small, full, 9), "the cut text is the start of the whole");
  cr_assert_eq(small[10], 'x', "nothing written past cap");
  cr_assert_eq(sk_parallel_format_program(&p, 0, small, 1), n);
  cr_assert_eq(small[0], '\0');
  cr_assert_eq(sk_parallel_format_program(&p, 0, full, n), n, "one byte short");
  cr_assert_eq(strlen(full), n - 1);
  free(full);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(parallel, format_bad_rank) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  char buf[64] = "junk";
  cr_assert_eq(sk_parallel_format_program(&p, 8, buf, sizeof buf), 0);
  cr_assert_eq(buf[0], '\0', "a refused call leaves an empty string");
  cr_assert_eq(sk_parallel_format_program(&p, -1, buf, sizeof buf), 0);
  cr_assert_eq(sk_parallel_format_program(&p, -1, NULL, 0), 0);
  cr_assert_eq(sk_parallel_format_program(NULL, 0, buf, sizeof buf), 0);
  cr_assert_gt(sk_parallel_format_program(&p, 7, buf, sizeof buf), 0);
  sk_parallel_free(&p);
  cr_assert_eq(sk_parallel_format_program(&p, 0, buf, sizeof buf), 0, "a freed plan prints nothing");
  sk_graph_free(&g);
}

Test(parallel, step_names) {
  cr_assert_str_eq(sk_parallel_step_name(SK_PSTEP_MOVE), "Move");
  cr_assert_str_eq(sk_parallel_step_name(SK_PSTEP_MIRROR), "Mirror");
  cr_assert_str_eq(sk_parallel_step_name(SK_PSTEP_UPDATE), "Update");
  cr_assert_str_eq(sk_parallel_step_name(SK_PSTEP_KIND_COUNT), "?");
  cr_assert_str_eq(sk_parallel_step_name((sk_parallel_step_kind)-1), "?");
}

/* ---- 8. the transformer ------------------------------------------------------------------- */

Test(parallel, transformer_eight_devices) {
  sk_graph g;
  sk_parallel_plan p;
  load(TRANSFORMER, &g);
  compile(&g, 8, &p);
  cr_assert_eq(p.nfallbacks, 0);
  for (int o = 0; o < g.nops; o++) cr_assert(!p.ops[o].fell_back, "'%s' fell back", g.ops[o].name);
  assert_program_shape(&g, &p);
  cr_assert_gt(count_steps(&p, SK_PSTEP_MIRROR), 0);
  cr_assert_gt(count_steps(&p, SK_PSTEP_FORWARD_COMM), 0, "the MatMuls cut along k sum their parts");
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(parallel, transformer_one_device) {
  sk_graph g;
  sk_parallel_plan p;
  load(TRANSFORMER, &g);
  compile(&g, 1, &p);
  int with = 0;
  for (int o = 0; o < g.nops; o++) {
    with += has_strategy(&g.ops[o]);
    cr_assert_eq(p.ops[o].fell_back, has_strategy(&g.ops[o]), "'%s'", g.ops[o].name);
  }
  cr_assert_gt(with, 0);
  cr_assert_eq(p.nfallbacks, with);
  assert_no_communication(&p);
  assert_program_shape(&g, &p);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* On 2 and 4 devices the transformer's strategies (dp 2 x mp 4) fall back where they need 8; the
   fallback's data parallel BatchMatMul cuts the batch dim of both inputs, as MindSpore's does,
   so the attention products compile. */
Test(parallel, transformer_two_and_four_devices) {
  sk_graph g;
  load(TRANSFORMER, &g);
  for (int n = 2; n <= 4; n *= 2) {
    sk_parallel_plan p;
    compile(&g, n, &p);
    cr_assert_gt(p.nfallbacks, 0, "%d devices", n);
    assert_program_shape(&g, &p);
    int scores = -1;
    for (int o = 0; o < g.nops; o++)
      if (!strcmp(g.ops[o].name, "b0.scores")) scores = o;
    cr_assert_geq(scores, 0);
    cr_assert_eq(sk_layout_split_count(&p.ops[scores].plan.in[1], 0), n, "w's batch dim on %d devices", n);
    sk_parallel_free(&p);
  }
  sk_graph_free(&g);
}

/* A Reshape without a strategy takes its input's cut (MindSpore gives a Reshape its predecessor's
   layout): the same number of pieces in every dim. (Its repeat axis stays on the left, as
   sk_ops.h builds Reshapes, so replicas may still be exchanged.) */
Test(parallel, reshape_takes_its_inputs_cut) {
  sk_graph g;
  sk_parallel_plan p;
  load(TRANSFORMER, &g);
  compile(&g, 8, &p);
  int reshapes = 0;
  for (int o = 0; o < g.nops; o++) {
    if (g.ops[o].desc.kind != SK_OP_RESHAPE) continue;
    reshapes++;
    const sk_layout *in = &p.tensors[g.ops[o].inputs[0]].layout;
    for (int d = 0; d < in->ndims; d++)
      cr_assert_eq(sk_layout_split_count(&p.ops[o].plan.in[0], d), sk_layout_split_count(in, d), "'%s' dim %d",
                   g.ops[o].name, d);
    cr_assert(!p.ops[o].fell_back);
  }
  cr_assert_gt(reshapes, 0);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* dataset_strategy as a tuple: each input cut as a VirtualDataset cuts it, the repeat axis on the
   left; the wrong number of tuples, or a cut that does not divide, is refused naming it. */
Test(parallel, dataset_strategy_tuple) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.ndataset = 2;
  d.dataset_strategy[0][0] = 2, d.dataset_strategy[0][1] = d.dataset_strategy[0][2] = d.dataset_strategy[0][3] = 1;
  d.dataset_strategy[1][0] = 2;
  OK(sk_parallel_compile(&g, &d, &p, E));
  const sk_layout *img = &p.tensors[sk_graph_find(&g, "image")].layout;
  cr_assert_eq(sk_layout_split_count(img, 0), 2);
  sk_slice s0, s1;
  OK(sk_layout_slice(img, 0, &s0, E));
  cr_assert_eq(s0.start[0], 0);
  OK(sk_layout_slice(img, 1, &s1, E));
  cr_assert_eq(s1.start[0], 16, "the repeat axis on the left: rank 1 holds the second half");
  OK(sk_layout_slice(img, 2, &s1, E));
  cr_assert_eq(s1.start[0], 0, "rank 2 repeats rank 0's rows");
  sk_parallel_free(&p);
  d.ndataset = 1;
  BAD("dataset_strategy: 1 strategies for the network's 2 inputs", sk_parallel_compile(&g, &d, &p, E));
  d.ndataset = 2, d.dataset_strategy[1][0] = 3;
  BAD("dataset_strategy", sk_parallel_compile(&g, &d, &p, E));
  d.ndataset = 5;
  BAD("dataset strategies", sk_parallel_compile(&g, &d, &p, E));
  sk_graph_free(&g);
}

/* With a dataset strategy that fits (dp 2), the transformer compiles on 4096 devices: every
   operator has a strategy or reads its input as cut, none falls back. */
Test(parallel, transformer_on_4096_devices) {
  sk_graph g;
  sk_parallel_plan p;
  load(TRANSFORMER, &g);
  sk_autoparallel d = pdesc(4096, SK_DATASET_DATA_PARALLEL);
  d.ndataset = 2, d.dataset_strategy[0][0] = 2, d.dataset_strategy[0][1] = 1, d.dataset_strategy[1][0] = 2;
  OK(sk_parallel_compile(&g, &d, &p, E));
  cr_assert_eq(p.nfallbacks, 0);
  assert_program_shape(&g, &p);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* ---- 9. memory ---------------------------------------------------------------------------- */

static bool all_zero(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return false;
  return true;
}

Test(parallel, free_zeroes_and_is_idempotent) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  compile(&g, 8, &p);
  cr_assert(p.ops && p.tensors && p.steps && p.graph == &g);
  sk_parallel_free(&p);
  cr_assert(all_zero(&p, sizeof p), "a freed plan is all zero");
  sk_parallel_free(&p);
  cr_assert(all_zero(&p, sizeof p));
  sk_parallel_free(NULL);
  cr_assert_eq(sk_parallel_slice_count(&p, 0), 0, "a freed plan has no tensors");
  sk_graph_free(&g);
}

/* Each refusal happens at a different stage of the compile (arguments, graph, an operator's
   rule, the tensors' layouts); every one leaves the plan zeroed (ASan checks nothing leaked). */
Test(parallel, failures_leave_plan_empty) {
  mm_net m;
  sk_parallel_plan p;
  mm_build(&m, 6, 16, 4, (const int[]){1, 4}, (const int[]){4, 1}, 1);
  sk_autoparallel d = pdesc(4, SK_DATASET_DATA_PARALLEL);
  memset(&p, 0x5a, sizeof p);
  BAD("input 'x'", sk_parallel_compile(&m.g, &d, &p, E)); /* placing the inputs, before any operator */
  cr_assert(all_zero(&p, sizeof p));
  d.strict_strategies = true, d.ndevices = 2; /* the MatMul needs 4 */
  memset(&p, 0x5a, sizeof p);
  BAD("'mm'", sk_parallel_compile(&m.g, &d, &p, E));
  cr_assert(all_zero(&p, sizeof p));
  sk_graph_free(&m.g);
  mm_build(&m, 6, 16, 4, NULL, NULL, 0); /* data parallel: the rule refuses 6 rows on 4 */
  d.strict_strategies = false, d.ndevices = 4, d.dataset = SK_DATASET_FULL_BATCH; /* the inputs fit */
  memset(&p, 0x5a, sizeof p);
  BAD("'mm'", sk_parallel_compile(&m.g, &d, &p, E));
  cr_assert(all_zero(&p, sizeof p));
  sk_graph_free(&m.g);
}

/* ---- the AutoParallel knobs ---------------------------------------------------------------- */

/* An unknown parallel_mode is refused by name (the search modes are built: tests/test_search.c),
   as are strategy files (they are sk_strategy.h's) and comm_fusion settings MindSpore refuses. */
Test(parallel, knobs_refused_by_name) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++) {
    d.mode = (sk_parallel_mode)mode;
    OK(sk_parallel_compile(&g, &d, &p, E));
    sk_parallel_free(&p);
  }
  d.mode = (sk_parallel_mode)7;
  BAD("unknown parallel_mode 7", sk_parallel_compile(&g, &d, &p, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.load_operator_strategy_file = "/tmp/x.json";
  BAD("load_operator_strategy_file needs the strategy-file reader: set strategy_io = sk_strategy_io()",
      sk_parallel_compile(&g, &d, &p, E)); /* sk_strategy.h is not included here: no jansson */
  sk_strategy_io_fns half = {NULL, NULL, NULL};
  d.strategy_io = &half;
  BAD("strategy_io lacks a function", sk_parallel_compile(&g, &d, &p, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.comm_fusion.allgather.mode = SK_FUSION_INDEX;
  BAD("allgather: mode 'index' is AllReduce's only", sk_parallel_compile(&g, &d, &p, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.comm_fusion.reducescatter.mode = SK_FUSION_SIZE;
  BAD("reducescatter: the size threshold must be larger than 0 MB", sk_parallel_compile(&g, &d, &p, E));
  d.comm_fusion.reducescatter.threshold_mb = 0.5;
  OK(sk_parallel_compile(&g, &d, &p, E));
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* sk_parallel_check: what the compile refuses before it reads the network, with no network
   (a program refuses such a command line before any work); a good desc passes. */
Test(parallel, check_needs_no_network) {
  sk_autoparallel d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  OK(sk_parallel_check(&d, E));
  d.pipeline.stages = 2, d.pipeline.micro = 4;
  OK(sk_parallel_check(&d, E));
  d.pipeline.stages = 3, d.pipeline.micro = 3;
  BAD("8 devices do not divide into 3 stages", sk_parallel_check(&d, E));
  d.pipeline.stages = 4, d.pipeline.micro = 2;
  BAD("micro_size 2 < stages 4", sk_parallel_check(&d, E));
  d.pipeline.micro = 4, d.grad_accumulation_step = 2;
  BAD("grad_accumulation_step 2 with a pipeline is refused", sk_parallel_check(&d, E));
  d = pdesc(0, SK_DATASET_DATA_PARALLEL);
  BAD("0 devices", sk_parallel_check(&d, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.dtype = SK_F64;
  OK(sk_parallel_check(&d, E));
  d.dtype = SK_BF16; /* stored in 16 bits, computed in f32 */
  OK(sk_parallel_check(&d, E));
  d.dtype = SK_I64;
  BAD("dtype i64: f32, f64, f16 or bf16", sk_parallel_check(&d, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.optim.kind = SK_OPTIM_ADAM, d.optim.beta1 = 1.5;
  BAD("beta1", sk_parallel_check(&d, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.cluster.link.alpha_us = 5; /* a latency without a bandwidth */
  BAD("parallel: cluster.link: alpha_us 5, gbps 0", sk_parallel_check(&d, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.cluster.device_flops = -1;
  BAD("device_flops -1", sk_parallel_check(&d, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.exhaustive_limit = -1;
  BAD("exhaustive_limit -1", sk_parallel_check(&d, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.allocator.free = NULL, d.allocator.alloc = (void *(*)(void *, size_t, size_t))1;
  BAD("the allocator needs both alloc and free", sk_parallel_check(&d, E));
  d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  d.comm_fusion.allgather.mode = SK_FUSION_INDEX;
  BAD("allgather: mode 'index' is AllReduce's only", sk_parallel_check(&d, E));
  BAD("NULL desc", sk_parallel_check(NULL, E));
}

/* Rank's rows of a layout's dim 0. */
static void assert_rows(const sk_layout *l, int rank, int64_t start, int64_t stop) {
  sk_slice s;
  OK(sk_layout_slice(l, rank, &s, E));
  cr_assert(s.start[0] == start && s.stop[0] == stop, "rank %d: rows [%lld, %lld), want [%lld, %lld)", rank,
            (long long)s.start[0], (long long)s.stop[0], (long long)start, (long long)stop);
}

/* dataset_strategy as a tuple of layouts: the image on a (2, 2) matrix cut by "dp" on its batch,
   the label by ("dp", "mp") on 4: on 8 devices the repeat axis goes on the left. */
Test(parallel, dataset_strategy_layouts) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  int img = tensor(&g, "image"), lab = tensor(&g, "label");
  sk_autoparallel d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  sk_mesh m;
  OK(sk_mesh_init(&m, 2, (const int[]){2, 2}, (const char *[]){"dp", "mp"}, E));
  sk_dim_map im[SK_MAX_DIMS] = {{1, {0}}}, lm[SK_MAX_DIMS] = {{2, {0, 1}}};
  OK(sk_layout_init(&d.dataset_layouts[0], &m, g.tensors[img].ndims, g.tensors[img].shape, im, E));
  OK(sk_layout_init(&d.dataset_layouts[1], &m, 1, g.tensors[lab].shape, lm, E));
  d.ndataset_layouts = 2;
  OK(sk_parallel_compile(&g, &d, &p, E));
  const sk_layout *il = &p.tensors[img].layout, *ll = &p.tensors[lab].layout;
  int64_t b = g.tensors[img].shape[0];
  cr_assert_eq(il->mesh.size, 8);
  for (int r = 0; r < 8; r++) { /* rank r holds the slice of r % 4 on the (2, 2) matrix */
    int c = r % 4, dp = c / 2;
    assert_rows(il, r, dp * b / 2, (dp + 1) * b / 2);
    assert_rows(ll, r, c * b / 4, (c + 1) * b / 4);
  }
  sk_parallel_free(&p);
  d.ndataset_layouts = 1;
  BAD("dataset_strategy: 1 layouts for the network's 2 inputs", sk_parallel_compile(&g, &d, &p, E));
  d.ndataset_layouts = 2, d.ndataset = 2;
  BAD("not both", sk_parallel_compile(&g, &d, &p, E));
  d.ndataset = 0, d.dataset_layouts[1] = d.dataset_layouts[0];
  BAD("layout 1 is for another shape than input 'label'", sk_parallel_compile(&g, &d, &p, E));
  OK(sk_mesh_init(&m, 1, (const int[]){3}, (const char *[]){"dp"}, E)); /* 3 devices do not divide 8 */
  OK(sk_layout_init(&d.dataset_layouts[1], &m, 1, g.tensors[lab].shape, NULL, E));
  BAD("dataset_strategy: layout 1 (input 'label')", sk_parallel_compile(&g, &d, &p, E));
  sk_graph_free(&g);
}

/* gradients_mean: each Mirror divides by its group: fc1's weight is mirrored over {0,4} (1/2),
   fc3's over all 8 (1/8), fc2's weight is cut over all 8 and has no Mirror (1). Off, every
   factor is 1. */
Test(parallel, gradients_mean_scales_mirrors) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8, SK_DATASET_DATA_PARALLEL);
  double s[64];
  cr_assert_leq(g.nops * SK_OP_MAX_INPUTS, 64);
  OK(sk_parallel_compile(&g, &d, &p, E));
  sk_parallel_grad_scales(&p, s);
  for (int i = 0; i < g.nops * SK_OP_MAX_INPUTS; i++) cr_assert_eq(s[i], 1.0, "factor %d: %g by default", i, s[i]);
  cr_assert_eq(p.loss_grad_scale, 1.0);
  sk_parallel_free(&p);
  d.gradients_mean = true;
  OK(sk_parallel_compile(&g, &d, &p, E));
  int fc1 = op_index(&g, "fc1"), fc2 = op_index(&g, "fc2"), fc3 = op_index(&g, "fc3");
  cr_assert_eq(p.ops[fc1].mirror_scale[1], 0.5);
  cr_assert_eq(p.ops[fc2].mirror_scale[1], 1.0);
  cr_assert_eq(p.ops[fc3].mirror_scale[1], 0.125);
  cr_assert_eq(p.ops[fc1].mirror_scale[0], 1.0, "an activation has no Mirror");
  sk_parallel_grad_scales(&p, s);
  cr_assert_eq(s[fc1 * SK_OP_MAX_INPUTS + 1], 0.5);
  cr_assert_eq(s[fc3 * SK_OP_MAX_INPUTS + 1], 0.125);
  cr_assert_eq(s[fc1 * SK_OP_MAX_INPUTS + 0], 1.0);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* disable_loss_repeated_mean: the scalar loss is held by every device, so its gradient seed is
   the device count (MindSpore's as_loss_divisor); every parameter's factor carries it. */
Test(parallel, no_loss_repeated_mean_seeds_repeat_count) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  int fc2 = op_index(&g, "fc2"), fc3 = op_index(&g, "fc3");
  double s[64];
  for (int n = 1; n <= 8; n *= 2) {
    sk_autoparallel d = pdesc(n, SK_DATASET_DATA_PARALLEL);
    d.no_loss_repeated_mean = true, d.gradients_mean = true;
    OK(sk_parallel_compile(&g, &d, &p, E));
    cr_assert_eq(p.loss_grad_scale, (double)n, "%d devices: seed %g", n, p.loss_grad_scale);
    sk_parallel_grad_scales(&p, s);
    cr_assert_eq(s[fc3 * SK_OP_MAX_INPUTS + 1], 1.0, "fc3's weight: the seed's x%d and its Mirror's /%d cancel", n, n);
    /* fc2's weight is cut over all 8 (no Mirror: x8); on fewer it falls back to data parallel */
    cr_assert_eq(s[fc2 * SK_OP_MAX_INPUTS + 1], n == 8 ? 8.0 : 1.0, "fc2's weight on %d devices", n);
    cr_assert_eq(s[fc3 * SK_OP_MAX_INPUTS + 0], 1.0, "an activation carries no factor");
    sk_parallel_free(&p);
  }
  sk_graph_free(&g);
}
