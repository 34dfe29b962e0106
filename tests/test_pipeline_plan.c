/* Pipeline parallel in the compiler (sk_parallel.h with desc.pipeline) and the network of one
   micro-batch (sk_graph_micro): the recursive-programming tutorial's two annotated stages, the
   cut by FLOPs when the annotations do not fit (other stage counts, interleaving, zero_bubble_v),
   the stage's devices and its program with world ranks, and every refusal. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_json.h"
#include "expect_bad.h"

#define TUTORIAL "examples/nets/operator_parallel.json"
#define RECURSIVE "examples/nets/recursive_programming.json"
#define TRANSFORMER "examples/nets/transformer.json"

static void load(const char *path, sk_graph *g) {
  sk_error e = {SK_OK, ""};
  sk_graph_init(g);
  cr_assert_eq(sk_json_load_network(path, g, &e), SK_OK, "%s: %s", path, e.msg);
}

static sk_autoparallel pipe_desc(int devices, int stages, int micro, sk_pipe_scheduler sched, int interleave) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = devices;
  d.pipeline.stages = stages, d.pipeline.micro = micro, d.pipeline.scheduler = sched, d.pipeline.interleave = interleave;
  return d;
}

static void compile(const sk_graph *g, const sk_autoparallel *d, sk_parallel_plan *p) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_parallel_compile(g, d, p, &e), SK_OK, "%s", e.msg);
}

static int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator '%s'", name);
  return -1;
}

/* ---- the network of one micro-batch ---------------------------------------------------------- */

Test(pipeline_plan, micro_graph_keeps_ids_and_cuts_the_batch) {
  sk_graph g, m;
  load(TRANSFORMER, &g);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_micro(&g, 4, &m, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(m.ntensors, g.ntensors);
  cr_assert_eq(m.nops, g.nops);
  cr_expect_eq(m.loss, g.loss);
  cr_expect_eq(m.optim.kind, g.optim.kind);
  cr_expect_str_eq(m.dataset, g.dataset);
  for (int t = 0; t < g.ntensors; t++) {
    const sk_graph_tensor *a = &g.tensors[t], *b = &m.tensors[t];
    cr_assert_str_eq(a->name, b->name);
    cr_expect_eq(a->role, b->role);
    cr_expect_eq(a->ndims, b->ndims, "%s", a->name);
    /* every activation's dim 0 carries the batch in this network; parameters stay whole */
    int64_t want0 = a->role == SK_TENSOR_PARAM || a->ndims == 0 ? a->shape[0] : a->shape[0] / 4;
    if (a->ndims > 0 && a->role != SK_TENSOR_PARAM && !(a->ndims == 1 && a->shape[0] == 1))
      cr_expect_eq(b->shape[0], want0, "%s: dim 0 %lld, want %lld", a->name, (long long)b->shape[0], (long long)want0);
    for (int d = 1; d < a->ndims; d++) cr_expect_eq(a->shape[d], b->shape[d], "%s dim %d", a->name, d);
  }
  int r = op_named(&m, "b0.ln1_2d"); /* Reshape to [128, 32]: its target follows the batch */
  cr_expect_eq(m.ops[r].desc.out_shape[0][0], 32);
  /* the same parameters draw the same initial values */
  sk_graph_free(&m);
  EXPECT_BAD(sk_graph_micro(&g, 3, &m, &e), &e, "input 'tokens': dim 0 (16) does not divide into 3 micro-batches");
  cr_expect_eq(m.ntensors, 0); /* nothing left behind */
  EXPECT_BAD(sk_graph_micro(&g, 0, &m, &e), &e, "micro_size 0");
  EXPECT_BAD(sk_graph_micro(NULL, 2, &m, &e), &e, "NULL");
  sk_graph_free(&g);
}

Test(pipeline_plan, micro_graph_refuses_a_scalar_input) {
  sk_graph g;
  sk_graph_init(&g);
  sk_error e = {SK_OK, ""};
  int x, w;
  int64_t shape[1] = {4};
  cr_assert_eq(sk_graph_add_input(&g, "x", SK_F32, 0, shape, &x, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_graph_add_param(&g, "w", SK_F32, 0, shape, (sk_init){SK_INIT_ONES, 0}, &w, &e), SK_OK, "%s", e.msg);
  sk_graph m;
  EXPECT_BAD(sk_graph_micro(&g, 2, &m, &e), &e, "input 'x' is a scalar");
  sk_graph_free(&g);
}

/* ---- stages --------------------------------------------------------------------------------- */

Test(pipeline_plan, the_tutorial_keeps_its_two_annotated_stages) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = pipe_desc(8, 2, 4, SK_PIPE_1F1B, 0);
  sk_parallel_plan p;
  compile(&g, &d, &p);
  cr_expect_eq(p.stages, 2);
  cr_expect_eq(p.micro, 4);
  cr_expect_eq(p.world_devices, 8);
  cr_expect_eq(p.desc.ndevices, 4, "each stage's layouts cover its 4 devices");
  cr_expect_not(p.recut);
  const char *first[3] = {"flatten", "fc1", "relu1"}, *second[4] = {"fc2", "relu2", "fc3", "loss"};
  for (int i = 0; i < 3; i++) cr_expect_eq(p.vstage[op_named(&g, first[i])], 0, "%s", first[i]);
  for (int i = 0; i < 4; i++) cr_expect_eq(p.vstage[op_named(&g, second[i])], 1, "%s", second[i]);
  cr_expect_eq(sk_parallel_stage_of_rank(&p, 3), 0);
  cr_expect_eq(sk_parallel_stage_of_rank(&p, 4), 1);
  cr_expect(sk_parallel_op_on_stage(&p, op_named(&g, "fc1"), 0));
  cr_expect_not(sk_parallel_op_on_stage(&p, op_named(&g, "fc1"), 1));
  /* the plan is the micro-batch's: 32 rows / 4 micro-batches / 4 devices of data parallel */
  cr_expect_eq(p.graph->tensors[sk_graph_find(p.graph, "image")].shape[0], 8);
  cr_expect_eq(sk_parallel_slice_count(&p, sk_graph_find(p.graph, "fc1")), 2 * g.tensors[sk_graph_find(&g, "fc1")].shape[1]);
  /* the schedule is the configuration's */
  cr_expect_eq(p.schedule.stages, 2);
  cr_expect_eq(p.schedule.micro, 4);
  cr_expect_eq(p.schedule.count[0], 8);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(pipeline_plan, a_program_is_its_stages_with_world_ranks) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = pipe_desc(8, 2, 4, SK_PIPE_GPIPE, 0);
  sk_parallel_plan p;
  compile(&g, &d, &p);
  static char buf[1 << 16];
  cr_assert_lt(sk_parallel_format_program(&p, 5, buf, sizeof buf), sizeof buf);
  cr_expect(strstr(buf, "# device 5 of 8: stage 1 of 2 (ranks 4..7; chunks 1 of 2), 4 micro-batches") == buf, "%s", buf);
  cr_expect(strstr(buf, " fc2 op=Dense ") != NULL, "%s", buf);
  cr_expect(strstr(buf, " fc1 op=Dense") == NULL, "stage 1 runs no stage-0 operator:\n%s", buf);
  cr_expect(strstr(buf, " ranks={4,5,6,7} ") != NULL, "groups in world ranks:\n%s", buf);
  cr_expect(strstr(buf, " Recv relu1 data=value micro=0 chunk=0 peer=1 group=g2 ") != NULL, "peers in world ranks:\n%s", buf);
  cr_expect(strstr(buf, " Update parameters\n") != NULL, "%s", buf);
  cr_assert_lt(sk_parallel_format_program(&p, 1, buf, sizeof buf), sizeof buf);
  cr_expect(strstr(buf, " fc1 op=Dense ") != NULL && strstr(buf, " fc2 op=Dense") == NULL, "%s", buf);
  cr_expect(strstr(buf, " Send relu1 data=value micro=0 chunk=0 peer=5 group=g2 bytes=4096\n") != NULL, "%s", buf);
  cr_expect(strstr(buf, " ranks={0,1,2,3} ") != NULL, "%s", buf);
  cr_expect_eq(sk_parallel_format_program(&p, 8, buf, sizeof buf), 0);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* Virtual stages never decrease along the operators, every chunk of a cut network is used when
   there are operators enough, and the loss sits on the last. */
static void expect_cut(const sk_parallel_plan *p, int parts) {
  const sk_graph *g = p->graph;
  int used = 0;
  for (int o = 0; o < g->nops; o++) {
    cr_assert(p->vstage[o] >= 0 && p->vstage[o] < parts);
    if (o) cr_expect_geq(p->vstage[o], p->vstage[o - 1], "operator %d", o);
  }
  for (int v = 0, seen; v < parts; v++) {
    seen = 0;
    for (int o = 0; o < g->nops; o++) seen |= p->vstage[o] == v;
    used += seen;
  }
  cr_expect_eq(used, g->nops < parts ? g->nops : parts);
  cr_expect_eq(p->vstage[g->tensors[g->loss].producer], parts - 1);
}

Test(pipeline_plan, other_stage_counts_and_chunks_recut_by_flops) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_parallel_plan p;
  sk_autoparallel d = pipe_desc(8, 4, 4, SK_PIPE_1F1B, 0);
  compile(&g, &d, &p);
  cr_expect(p.recut, "2 annotated stages, 4 asked");
  expect_cut(&p, 4);
  sk_parallel_free(&p);
  d = pipe_desc(8, 2, 4, SK_PIPE_1F1B, 2); /* interleaved: 4 chunks */
  compile(&g, &d, &p);
  cr_expect(p.recut);
  expect_cut(&p, 4);
  sk_parallel_free(&p);
  d = pipe_desc(8, 4, 8, SK_PIPE_ZERO_BUBBLE_V, 0); /* 8 chunks, 7 operators: one empty, first */
  compile(&g, &d, &p);
  expect_cut(&p, 8);
  cr_expect_eq(p.vstage[0], 1, "the empty chunk is the first");
  sk_parallel_free(&p);
  /* The heaviest operator, fc1 (784 x 512 of the 3-layer MLP), gets a chunk to itself. */
  d = pipe_desc(8, 2, 4, SK_PIPE_GPIPE, 0);
  for (int o = 0; o < g.nops; o++) g.ops[o].stage = 0; /* no annotations */
  compile(&g, &d, &p);
  cr_expect_not(p.recut, "nothing annotated, nothing said");
  expect_cut(&p, 2);
  cr_expect_eq(p.vstage[op_named(&g, "fc1")], 0);
  cr_expect_eq(p.vstage[op_named(&g, "relu1")], 1);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

Test(pipeline_plan, every_shipped_network_compiles_for_every_scheduler) {
  const char *nets[3] = {TUTORIAL, RECURSIVE, TRANSFORMER};
  sk_pipe_scheduler scheds[3] = {SK_PIPE_GPIPE, SK_PIPE_1F1B, SK_PIPE_ZERO_BUBBLE_V};
  for (int n = 0; n < 3; n++) {
    sk_graph g;
    load(nets[n], &g);
    for (int s = 0; s < 3; s++)
      for (int stages = 2; stages <= 4; stages += 2) {
        sk_autoparallel d = pipe_desc(8, stages, 4, scheds[s], 0);
        sk_parallel_plan p;
        compile(&g, &d, &p);
        expect_cut(&p, stages * p.schedule.chunks);
        sk_parallel_free(&p);
      }
    sk_graph_free(&g);
  }
}

/* ---- optimizer parallel within a stage ---------------------------------------------------------- */

/* The tutorial network, 2 stages x 4 devices, hsdp threshold 0: parameters are sharded over
   their replicas within the stage (at most the stage's 4 devices), on both stages. */
Test(pipeline_plan, hsdp_shards_within_a_stage) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_parallel_plan p;
  sk_error e;
  sk_autoparallel d = pipe_desc(8, 2, 4, SK_PIPE_1F1B, 0);
  d.hsdp = (sk_hsdp)SK_HSDP_DEFAULTS, d.hsdp.threshold_kb = 0;
  cr_assert_eq(sk_parallel_compile(&g, &d, &p, &e), SK_OK, "%s", e.msg);
  int sharded[2] = {0, 0};
  for (int o = 0; o < p.graph->nops; o++)
    for (int k = 0; k < p.graph->ops[o].ninputs; k++) {
      const sk_parallel_tensor *pt = &p.tensors[p.graph->ops[o].inputs[k]];
      if (p.graph->tensors[p.graph->ops[o].inputs[k]].role != SK_TENSOR_PARAM || !pt->opt_size) continue;
      cr_assert_leq(pt->opt_size, 4, "a shard group larger than a stage: %d", pt->opt_size);
      cr_assert_eq(pt->layout.mesh.size, 4, "a parameter laid out on %d devices, not its stage's 4", pt->layout.mesh.size);
      sharded[sk_pipe_stage_of(&p.schedule, p.vstage[o], NULL)]++;
    }
  cr_assert(sharded[0] > 0 && sharded[1] > 0, "sharded parameters per stage: %d, %d", sharded[0], sharded[1]);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* ---- refusals -------------------------------------------------------------------------------- */

Test(pipeline_plan, refusals) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_parallel_plan p;
  sk_error e;
  sk_autoparallel d = pipe_desc(8, 3, 3, SK_PIPE_1F1B, 0);
  EXPECT_BAD(sk_parallel_compile(&g, &d, &p, &e), &e, "8 devices do not divide into 3 stages");
  d = pipe_desc(8, 4, 2, SK_PIPE_1F1B, 0);
  EXPECT_BAD(sk_parallel_compile(&g, &d, &p, &e), &e, "micro_size 2 < stages 4");
  d = pipe_desc(8, 2, 3, SK_PIPE_GPIPE, 0);
  EXPECT_BAD(sk_parallel_compile(&g, &d, &p, &e), &e, "input 'image': dim 0 (32) does not divide into 3");
  d = pipe_desc(8, 2, 4, SK_PIPE_GPIPE, 0); /* hsdp combines with a pipeline; a bad one is still refused */
  d.hsdp = (sk_hsdp)SK_HSDP_DEFAULTS, d.hsdp.shard_size = 0;
  EXPECT_BAD(sk_parallel_compile(&g, &d, &p, &e), &e, "hsdp: shard_size must be -1 or a positive integer, got 0");
  d = pipe_desc(8, 2, 4, SK_PIPE_GPIPE, 0);
  d.grad_accumulation_step = 2;
  EXPECT_BAD(sk_parallel_compile(&g, &d, &p, &e), &e, "grad_accumulation_step");
  /* Annotations that send data backwards. */
  g.ops[op_named(&g, "relu1")].stage = 1, g.ops[op_named(&g, "fc2")].stage = 0;
  d = pipe_desc(8, 2, 4, SK_PIPE_GPIPE, 0);
  EXPECT_BAD(sk_parallel_compile(&g, &d, &p, &e), &e, "operator 'fc2' (stage 0) reads 'relu1' from a later stage (1)");
  sk_graph_free(&g);
}

Test(pipeline_plan, a_parameter_shared_across_stages_is_refused) {
  /* Two MatMuls read one weight; annotated on two stages. */
  sk_graph g;
  sk_graph_init(&g);
  sk_error e = {SK_OK, ""};
  int x, y, w;
  int64_t xs[2] = {8, 4}, ws[2] = {4, 4}, ys[1] = {8};
  cr_assert_eq(sk_graph_add_input(&g, "x", SK_F32, 2, xs, &x, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_graph_add_input(&g, "y", SK_I32, 1, ys, &y, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_graph_add_param(&g, "w", SK_F32, 2, ws, (sk_init){SK_INIT_ONES, 0}, &w, &e), SK_OK, "%s", e.msg);
  sk_graph_op a, b, l;
  memset(&a, 0, sizeof a), memset(&b, 0, sizeof b), memset(&l, 0, sizeof l);
  strcpy(a.name, "a"), a.desc.kind = SK_OP_MATMUL, a.ninputs = 2, a.inputs[0] = x, a.inputs[1] = w;
  cr_assert_eq(sk_graph_add_op(&g, &a, NULL, &e), SK_OK, "%s", e.msg);
  strcpy(b.name, "b"), b.desc.kind = SK_OP_MATMUL, b.ninputs = 2, b.inputs[0] = sk_graph_find(&g, "a"), b.inputs[1] = w;
  b.stage = 1;
  cr_assert_eq(sk_graph_add_op(&g, &b, NULL, &e), SK_OK, "%s", e.msg);
  strcpy(l.name, "loss"), l.desc.kind = SK_OP_SOFTMAX_CE, l.ninputs = 2, l.inputs[0] = sk_graph_find(&g, "b");
  l.inputs[1] = y, l.stage = 1;
  cr_assert_eq(sk_graph_add_op(&g, &l, NULL, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_graph_set_loss(&g, sk_graph_find(&g, "loss"), &e), SK_OK, "%s", e.msg);
  sk_autoparallel d = pipe_desc(2, 2, 2, SK_PIPE_GPIPE, 0);
  sk_parallel_plan p;
  EXPECT_BAD(sk_parallel_compile(&g, &d, &p, &e), &e,
             "parameter 'w' is read on stage 0 (operator 'a') and stage 1 (operator 'b')");
  sk_graph_free(&g);
}
