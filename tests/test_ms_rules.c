/* The rules that follow MindSpore master where shardkit followed the 2020 source (Gather's device
   matrix, Reshape's own strategy, MatMul with batch dims, SoftmaxCrossEntropyWithLogits), in a
   network that trains on 2, 4 and 8 device threads as on one (f64, every step's loss and every
   parameter within 1e-12 relative); N-D logits, which the rule takes and the kernel refuses (as
   MindSpore's primitive does); and the strategy files written before them: version 3 refuses an
   older file's entry for an operator whose rule changed, naming it; other older files still
   load. The rules' own values are in tests/test_ops_rules.c and tests/ms_cases.txt. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime_harness.h"
#include "sk_json.h"
#include "sk_strategy.h"
#include "text_file_util.h"

/* ---- the network ---------------------------------------------------------------------------- */

/* tokens [8,4] -> Gather (table [16,8], cut (1,2), the tokens (N/2,1)) -> MatMul with w [8,8]
   (x [8,4,8] has batch dims; ((2,1,N/2),(N/2,1)) cuts the contraction) -> Tanh -> Reshape to
   [8,32] with its own strategy (N/2,2,1): its output whole on every device -> MatMul with u
   [32,4] -> SoftmaxCrossEntropyWithLogits against float labels [8,4], (N,1) -> ReduceMean. */
static void build_ms_rules(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int tok = add_input(n, "tokens", SK_I32, 2, SH2(8, 4), 16), lab = add_input(n, "lab", SK_F32, 2, SH2(8, 4), 0);
  int table = add_param(n, "table", 2, SH2(16, 8), SK_INIT_UNIFORM, 0.5);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_UNIFORM, 0.5);
  int u = add_param(n, "u", 2, SH2(32, 4), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op ga = OP("embed", SK_OP_GATHER, table, tok);
  SHARD(ga, 0, 1, 2), SHARD(ga, 1, N / 2, 1);
  sk_graph_op mm = OP("proj", SK_OP_MATMUL, add_op(n, ga), w);
  SHARD(mm, 0, 2, 1, N / 2), SHARD(mm, 1, N / 2, 1);
  sk_graph_op rs = OP("flat", SK_OP_RESHAPE, add_op(n, OP("act", SK_OP_TANH, add_op(n, mm))));
  rs.desc.noutputs = 1, rs.desc.out_ndims[0] = 2, rs.desc.out_shape[0][0] = 8, rs.desc.out_shape[0][1] = 32;
  SHARD(rs, 0, N / 2, 2, 1);
  int z = add_op(n, OP("logits", SK_OP_MATMUL, add_op(n, rs), u));
  sk_graph_op ce = OP("ce", SK_OP_SOFTMAX_CE_LOGITS, z, lab);
  SHARD(ce, 0, N, 1), SHARD(ce, 1, N, 1);
  sk_graph_op mean = OP("loss", SK_OP_REDUCE_MEAN, add_op(n, ce));
  OK(sk_graph_set_loss(&n->g, add_op(n, mean), E));
}

static int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator %s", name);
  return -1;
}

static void expect_mesh(const sk_mesh *m, int n, const int *dims, const char *what) {
  cr_assert_eq(m->naxes, n, "%s: %d axes", what, m->naxes);
  for (int a = 0; a < n; a++) cr_assert_eq(m->dims[a], dims[a], "%s: axis %d is %d, want %d", what, a, m->dims[a], dims[a]);
}

/* The plans take master's rules. */
static void check_ms_rules(const run *R, int N) {
  const sk_graph *g = &R->n->g;
  const sk_parallel_op *ga = &R->plan.ops[op_named(g, "embed")], *mm = &R->plan.ops[op_named(g, "proj")];
  const sk_parallel_op *rs = &R->plan.ops[op_named(g, "flat")];
  expect_mesh(&ga->plan.mesh, 4, (const int[]){N / 2, 1, 1, 2}, "Gather: the indices' strategy, then the table's");
  cr_assert_eq(sk_layout_split_count(&ga->plan.in[0], 1), 2, "the table's columns");
  expect_mesh(&mm->plan.mesh, 4, (const int[]){2, 1, N / 2, 1}, "MatMul with batch dims: [batch.., a, b, c]");
  cr_assert_eq(mm->plan.fwd.kind, N > 2 ? SK_COLL_ALLREDUCE : SK_COLL_NONE, "the contraction's AllReduce");
  expect_mesh(&rs->plan.mesh, 3, (const int[]){N / 2, 2, 1}, "Reshape: its strategy as written");
  for (int d = 0; d < 2; d++) cr_assert_eq(sk_layout_split_count(&rs->plan.out[0], d), 1, "Reshape's output is whole");
  for (int d = 0; d < 3; d++) cr_assert_eq(sk_layout_split_count(&rs->kernel_in[0], d), 1, "its kernel reads it whole");
  cr_assert(!rs->desc.follows_input);
}

Test(ms_rules, gather_reshape_matmul_ce_train_as_one_device, .timeout = RT_TIMEOUT) {
  each_device_count("Gather, MatMul with batch dims, Reshape with a strategy, SoftmaxCrossEntropyWithLogits",
                    build_ms_rules, check_ms_rules, sgd(0.5), 4);
}

/* A Reshape without a strategy in the same network follows its input (the Tanh's data-parallel
   cut, carried to the output's rows), as MindSpore gives a network's Reshape its producer's
   layout, and trains as one device too. */
static void build_follow(net *n, int N) {
  build_ms_rules(n, N);
  sk_graph_op *rs = &n->g.ops[op_named(&n->g, "flat")];
  rs->desc.has_strategy = false;
  memset(rs->desc.strategy, 0, sizeof rs->desc.strategy);
}

static void check_follow(const run *R, int N) {
  const sk_parallel_op *rs = &R->plan.ops[op_named(&R->n->g, "flat")];
  cr_assert(rs->desc.follows_input && !rs->desc.has_strategy);
  cr_assert_eq(sk_layout_split_count(&rs->plan.out[0], 0), N, "the rows' cut carried over");
  cr_assert(!rs->moved[0], "no move in front of it");
}

Test(ms_rules, reshape_without_strategy_follows_its_input, .timeout = RT_TIMEOUT) {
  each_device_count("a Reshape following its input", build_follow, check_follow, sgd(0.5), 3);
}

/* N-D logits: the rule answers as master's SoftmaxCrossEntropyWithLogitsInfo (a middle dim cut,
   the loss [B] on dim 0's axis, no forward operator), but a loss [B] over the other positions
   would then be a partial sum on each device, so the kernel takes 2-D logits only, as
   MindSpore's primitive does ("dimension of logits" must be 2): a network with N-D logits is
   refused at its first step, naming the kernel, never trained wrong. */
Test(ms_rules, n_d_logits_are_the_rules_answer_not_a_trainable_loss) {
  sk_op_desc d;
  sk_op_plan p;
  memset(&d, 0, sizeof d);
  d.kind = SK_OP_SOFTMAX_CE_LOGITS, d.ninputs = 2, d.has_strategy = true;
  for (int i = 0; i < 2; i++) {
    d.ndims[i] = 3, d.shape[i][0] = 8, d.shape[i][1] = 4, d.shape[i][2] = 5;
    d.strategy[i][0] = 2, d.strategy[i][1] = 4, d.strategy[i][2] = 1;
  }
  OK(sk_op_plan_make(&d, 8, &p, E));
  cr_assert_eq(p.out[0].ndims, 1, "the loss is [B]");
  cr_assert_eq(p.fwd.kind, SK_COLL_NONE);
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int x = add_input(&n, "x", SK_F32, 3, SH3(8, 4, 5), 0), lab = add_input(&n, "lab", SK_F32, 3, SH3(8, 4, 5), 0);
  int ce = add_op(&n, OP("ce", SK_OP_SOFTMAX_CE_LOGITS, x, lab));
  OK(sk_graph_set_loss(&n.g, add_op(&n, OP("loss", SK_OP_REDUCE_MEAN, ce)), E));
  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = SK_F64, td.optim = sgd(0.1);
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&n.g, &td, &t, E));
  static double zeros[160];
  OK(sk_trainer_feed(t, x, SK_F64, zeros, 160, E));
  OK(sk_trainer_feed(t, lab, SK_F64, zeros, 160, E));
  sk_error e;
  cr_assert_eq(sk_trainer_step(t, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "sk_kern_softmax_ce_logits: logits have 3 dims (takes [B, C])"), "%s", e.msg);
  sk_trainer_destroy(t);
  sk_graph_free(&n.g);
}

/* ---- strategy files written before version 3 ------------------------------------------------- */

/* The operator strategy file of g compiled on 8 devices as `version` wrote it (version 2: the
   same keys; version 1: without the stages, hsdp and each operator's stage), as JSON. */
static json_t *older_json(sk_graph *g, int version) {
  sk_autoparallel d;
  sk_parallel_plan p;
  char *text = NULL;
  json_error_t je;
  memset(&d, 0, sizeof d);
  d.ndevices = 8;
  OK(sk_parallel_compile(g, &d, &p, E));
  OK(sk_strategy_format(&p, false, true, false, &text, E));
  sk_parallel_free(&p);
  json_t *root = json_loads(text, 0, &je), *v;
  cr_assert_not_null(root, "%s", je.text);
  free(text);
  json_object_set_new(root, "version", json_integer(version));
  if (version == 1) {
    size_t i;
    json_object_del(root, "stages"), json_object_del(root, "hsdp");
    json_array_foreach(json_object_get(root, "operators"), i, v) json_object_del(v, "stage");
  }
  return root;
}

/* root written to a temporary file, whose path goes to path. */
static void write_json(json_t *root, char *path, size_t cap) {
  snprintf(path, cap, "/tmp/sk_ms_rules_XXXXXX");
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  char *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  cr_assert_not_null(out);
  write_text(path, out);
  free(out);
}

static void older_file(sk_graph *g, int version, char *path, size_t cap) {
  json_t *root = older_json(g, version);
  write_json(root, path, cap);
  json_decref(root);
}

static void expect_refused(const char *path, sk_graph *g, const char *const *words) {
  sk_autoparallel d;
  sk_error e;
  memset(&d, 0, sizeof d);
  d.ndevices = 8;
  cr_assert_eq(sk_strategy_load_operators(path, g, &d, &e), SK_ERR_INVALID_ARGUMENT, "%s loaded", path);
  for (int k = 0; words[k]; k++) cr_assert(strstr(e.msg, words[k]), "\"%s\" lacks \"%s\"", e.msg, words[k]);
}

/* The first entry whose rule changed is refused, naming the operator, its type and what changed;
   the same file as version 3 loads. */
Test(ms_rules, an_older_file_naming_a_changed_rule_is_refused) {
  static net n;
  char path[64];
  build_ms_rules(&n, 8);
  for (int version = 1; version <= 2; version++) {
    older_file(&n.g, version, path, sizeof path);
    const char *words[] = {"operators[0] (\"embed\")", version == 1 ? "a version 1 file" : "a version 2 file",
                           "the Gather rule changed in version 3", "indices' strategy comes first",
                           "save the plan again", NULL};
    expect_refused(path, &n.g, words);
    unlink(path);
  }
  older_file(&n.g, 3, path, sizeof path);
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = 8;
  OK(sk_strategy_load_operators(path, &n.g, &d, E));
  unlink(path);
  sk_graph_free(&n.g);
}

/* Each changed rule is named by its own entry: an older file holding only entries the rules
   kept, and one of the four changed ones, is refused at that one. */
Test(ms_rules, each_changed_rule_is_named) {
  static net n;
  char path[64];
  build_ms_rules(&n, 8);
  json_t *root = older_json(&n.g, 2), *ops = json_object_get(root, "operators");
  static const struct {
    const char *name, *type, *why;
  } changed[] = {{"embed", "Gather", "indices' strategy comes first"},
                 {"proj", "MatMul", "planned as BatchMatMul"},
                 {"flat", "Reshape", "leaves its output whole"},
                 {"ce", "SoftmaxCrossEntropyWithLogits", "its loss is [B]"}};
  for (size_t c = 0; c < sizeof changed / sizeof changed[0]; c++) {
    /* this entry first, so that it is the first changed one read */
    json_t *list = json_array(), *v;
    size_t i;
    json_array_foreach(ops, i, v) if (!strcmp(json_string_value(json_object_get(v, "name")), changed[c].name))
        json_array_append(list, v);
    json_array_foreach(ops, i, v) if (strcmp(json_string_value(json_object_get(v, "name")), changed[c].name))
        json_array_append(list, v);
    json_t *copy = json_copy(root);
    json_object_set_new(copy, "operators", list);
    write_json(copy, path, sizeof path);
    json_decref(copy);
    char where[64], rule[96];
    snprintf(where, sizeof where, "operators[0] (\"%s\")", changed[c].name);
    snprintf(rule, sizeof rule, "the %s rule changed in version 3", changed[c].type);
    const char *words[] = {where, rule, changed[c].why, NULL};
    expect_refused(path, &n.g, words);
    unlink(path);
  }
  json_decref(root);
  sk_graph_free(&n.g);
}

/* An older file whose operators' rules did not change still loads, and compiles to the plan the
   network gives (the shipped tutorial: Flatten, MatMul, ReLU, SoftmaxCrossEntropy). */
Test(ms_rules, an_older_file_of_unchanged_rules_loads) {
  sk_graph g, h;
  char path[64];
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_load_network("examples/nets/operator_parallel.json", &g, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_json_load_network("examples/nets/operator_parallel.json", &h, &e), SK_OK, "%s", e.msg);
  older_file(&g, 2, path, sizeof path);
  sk_autoparallel d, l;
  sk_parallel_plan a, b;
  memset(&d, 0, sizeof d), memset(&l, 0, sizeof l);
  d.ndevices = l.ndevices = 8;
  l.load_operator_strategy_file = path, l.strategy_io = sk_strategy_io();
  OK(sk_parallel_compile(&g, &d, &a, E));
  OK(sk_parallel_compile(&h, &l, &b, E));
  cr_assert_eq(a.nsteps, b.nsteps);
  for (int o = 0; o < g.nops; o++)
    cr_assert(sk_parallel_same_layout(&a.ops[o].plan.in[0], &b.ops[o].plan.in[0]), "'%s'", g.ops[o].name);
  sk_parallel_free(&a), sk_parallel_free(&b);
  unlink(path);
  sk_graph_free(&g), sk_graph_free(&h);
}
