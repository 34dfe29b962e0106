/* sk_json.h: canonical round trips of graphs built in C (the text comes back byte for byte and
   the graph field by field), every class of refused text with its line and JSON path, files,
   what formatting refuses, and a fuzzer over mutations of valid networks.

   sk_json.h's implementation is compiled here rather than in tests/impl.c: impl.c also goes into
   the TSan binary, which leaves this suite out and does not link jansson. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SK_JSON_IMPL
#include "sk_json.h"

/* ---- building graphs ------------------------------------------------------------------------ */

static int input(sk_graph *g, const char *name, sk_dtype dt, int n, const int64_t *shape) {
  int id = -1;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_add_input(g, name, dt, n, shape, &id, &e), SK_OK, "%s: %s", name, e.msg);
  return id;
}

static int param(sk_graph *g, const char *name, int n, const int64_t *shape, sk_init_kind kind, double value) {
  int id = -1;
  sk_error e = {SK_OK, ""};
  sk_init init = {kind, value};
  cr_assert_eq(sk_graph_add_param(g, name, SK_F32, n, shape, init, &id, &e), SK_OK, "%s: %s", name, e.msg);
  return id;
}

/* A zeroed operator of a kind reading the named tensors. */
static sk_graph_op op_of(const sk_graph *g, const char *name, sk_op_kind kind, const char *in0, const char *in1,
                         const char *in2) {
  sk_graph_op op;
  const char *in[3] = {in0, in1, in2};
  memset(&op, 0, sizeof op);
  snprintf(op.name, sizeof op.name, "%s", name);
  op.desc.kind = kind;
  for (int k = 0; k < 3 && in[k]; k++) {
    op.inputs[k] = sk_graph_find(g, in[k]);
    cr_assert_geq(op.inputs[k], 0, "%s: no tensor %s", name, in[k]);
    op.ninputs = k + 1;
  }
  return op;
}

static void add(sk_graph *g, const sk_graph_op *op) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_add_op(g, op, NULL, &e), SK_OK, "%s: %s", op->name, e.msg);
}

static void strategy(sk_graph_op *op, int i, int n, const int *v) {
  op->desc.has_strategy = true;
  for (int k = 0; k < n; k++) op->desc.strategy[i][k] = v[k];
}

static sk_layout layout(const char *mesh, const char *map, int n, const int64_t *shape) {
  sk_mesh m;
  sk_layout l;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_mesh_parse(&m, mesh, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_parse(&l, &m, map, n, shape, &e), SK_OK, "%s", e.msg);
  return l;
}

/* MindSpore's tutorial network (Fashion-MNIST, 8 cards): Flatten, three MatMuls (a strategy,
   layouts, transpose_b with an output strategy), BiasAdd, ReLU, Dropout, OneHot, the fused loss. */
static void build_mlp(sk_graph *g) {
  static const int64_t xs[4] = {32, 1, 28, 28}, ls[1] = {32}, w1s[2] = {784, 512}, b1s[1] = {512}, w2s[2] = {512, 512},
                       w3s[2] = {10, 512};
  sk_graph_init(g);
  snprintf(g->dataset, sizeof g->dataset, "fashion-mnist");
  input(g, "x", SK_F32, 4, xs);
  input(g, "label", SK_I32, 1, ls);
  param(g, "w1", 2, w1s, SK_INIT_UNIFORM, 1.0 / 28);
  param(g, "b1", 1, b1s, SK_INIT_ZEROS, 0);
  param(g, "w2", 2, w2s, SK_INIT_XAVIER_UNIFORM, 0);
  param(g, "w3", 2, w3s, SK_INIT_NORMAL, 0.02);
  sk_graph_op op = op_of(g, "flat", SK_OP_FLATTEN, "x", NULL, NULL);
  strategy(&op, 0, 4, (const int[]){8, 1, 1, 1});
  add(g, &op);
  op = op_of(g, "mm1", SK_OP_MATMUL, "flat", "w1", NULL);
  strategy(&op, 0, 2, (const int[]){2, 4}), strategy(&op, 1, 2, (const int[]){4, 1});
  op.fusion = 1;
  add(g, &op);
  add(g, (op = op_of(g, "ba1", SK_OP_BIAS_ADD, "mm1", "b1", NULL), &op));
  op = op_of(g, "relu1", SK_OP_RELU, "ba1", NULL, NULL);
  op.recompute = true;
  add(g, &op);
  op = op_of(g, "mm2", SK_OP_MATMUL, "relu1", "w2", NULL);
  op.desc.has_layouts = true, op.stage = 1, op.fusion = 2;
  op.desc.layouts[0] = layout("dp=2,mp=4", "dp,mp", 2, (const int64_t[]){32, 512});
  op.desc.layouts[1] = layout("dp=2,mp=4", "mp,None", 2, w2s);
  add(g, &op);
  op = op_of(g, "drop", SK_OP_DROPOUT, "mm2", NULL, NULL);
  op.keep_prob = 0.9, op.stage = 1;
  add(g, &op);
  op = op_of(g, "mm3", SK_OP_MATMUL, "drop", "w3", NULL);
  op.desc.transpose_b = true, op.desc.has_out_strategy = true, op.desc.out_strategy[0] = 8, op.desc.out_strategy[1] = 1;
  strategy(&op, 0, 2, (const int[]){8, 1}), strategy(&op, 1, 2, (const int[]){1, 1});
  add(g, &op);
  op = op_of(g, "oh", SK_OP_ONE_HOT, "label", NULL, NULL);
  op.desc.depth = 10, op.desc.naxis = 1, op.desc.axis[0] = -1, op.on_value = 0.9, op.off_value = 0.1 / 9;
  strategy(&op, 0, 2, (const int[]){8, 1}); /* then the two scalar tuples (), () */
  add(g, &op);
  add(g, (op = op_of(g, "loss", SK_OP_SOFTMAX_CE, "mm3", "oh", NULL), &op));
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_set_loss(g, sk_graph_find(g, "loss"), &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_graph_set_eval(g, sk_graph_find(g, "mm3"), sk_graph_find(g, "label"), &e), SK_OK, "%s", e.msg);
  g->optim.kind = SK_OPTIM_MOMENTUM, g->optim.lr = 0.01, g->optim.momentum = 0.9, g->optim.weight_decay = 1e-4;
  g->optim.nesterov = true;
}

/* The zoo's tensors, all listed before its operators (the order loading keeps). */
static void zoo_tensors(sk_graph *g) {
  static const int64_t ab[2] = {8, 16}, img[4] = {4, 3, 8, 8}, c16[1] = {16}, c3[1] = {3}, idx[1] = {8},
                       table[2] = {100, 16}, q[3] = {2, 4, 8}, k[3] = {2, 8, 4}, dw[2] = {32, 16}, db[1] = {32};
  input(g, "a", SK_F32, 2, ab);
  input(g, "b", SK_F32, 2, ab);
  input(g, "img", SK_F32, 4, img);
  input(g, "idx", SK_I32, 1, idx);
  input(g, "q", SK_F64, 3, q);
  input(g, "k", SK_F64, 3, k);
  param(g, "gamma", 1, c16, SK_INIT_ONES, 0);
  param(g, "beta", 1, c16, SK_INIT_CONSTANT, 0.5);
  param(g, "pw", 1, c3, SK_INIT_HE_UNIFORM, 0.1);
  param(g, "table", 2, table, SK_INIT_NORMAL, 0);
  param(g, "dw", 2, dw, SK_INIT_XAVIER_UNIFORM, 2.0);
  param(g, "db", 1, db, SK_INIT_CONSTANT, -0.25);
}

/* Element-wise and broadcasting operators, the normalisations, reductions, shape operators. */
static void build_zoo_a(sk_graph *g) {
  sk_graph_op op = op_of(g, "cast", SK_OP_CAST, "a", NULL, NULL);
  op.out_dtype[0] = SK_F16;
  add(g, &op);
  add(g, (op = op_of(g, "gelu", SK_OP_GELU, "a", NULL, NULL), &op));
  op = op_of(g, "tanh", SK_OP_TANH, "b", NULL, NULL); /* out_strategy as a tuple on an element-wise operator */
  op.desc.has_out_strategy = true, op.desc.out_strategy[0] = 1, op.desc.out_strategy[1] = 8;
  add(g, &op);
  op = op_of(g, "add", SK_OP_ADD, "gelu", "tanh", NULL);
  strategy(&op, 0, 2, (const int[]){2, 1}), strategy(&op, 1, 2, (const int[]){2, 1});
  add(g, &op);
  add(g, (op = op_of(g, "sub", SK_OP_SUB, "add", "b", NULL), &op));
  add(g, (op = op_of(g, "mul", SK_OP_MUL, "sub", "a", NULL), &op));
  add(g, (op = op_of(g, "div", SK_OP_DIV, "mul", "b", NULL), &op));
  add(g, (op = op_of(g, "pow", SK_OP_POW, "div", "a", NULL), &op));
  add(g, (op = op_of(g, "prelu", SK_OP_PRELU, "img", "pw", NULL), &op));
  op = op_of(g, "sm", SK_OP_SOFTMAX, "pow", NULL, NULL);
  op.desc.naxis = 1, op.desc.axis[0] = -1;
  add(g, &op);
  op = op_of(g, "lsm", SK_OP_LOG_SOFTMAX, "sm", NULL, NULL);
  op.desc.naxis = 1, op.desc.axis[0] = 1;
  add(g, &op);
  op = op_of(g, "l2", SK_OP_L2_NORMALIZE, "lsm", NULL, NULL);
  op.desc.naxis = 1, op.desc.axis[0] = 0, op.epsilon = 1e-12;
  add(g, &op);
  op = op_of(g, "ln", SK_OP_LAYER_NORM, "l2", "gamma", "beta"); /* layouts on all three inputs, two output layouts */
  op.desc.naxis = 1, op.desc.axis[0] = 1, op.epsilon = 1e-5, op.desc.has_layouts = true;
  op.desc.layouts[0] = layout("dp=2,mp=4", "(dp,mp),None", 2, (const int64_t[]){8, 16});
  op.desc.layouts[1] = layout("dp=2,mp=4", "None", 1, (const int64_t[]){16});
  op.desc.layouts[2] = layout("dp=2,mp=4", "None", 1, (const int64_t[]){16});
  op.desc.nout_layouts = 2;
  op.desc.out_layouts[0] = layout("a=8", "None,a", 2, (const int64_t[]){8, 16});
  op.desc.out_layouts[1] = layout("a=8", "a,None", 2, (const int64_t[]){8, 1});
  add(g, &op);
  op = op_of(g, "rsum", SK_OP_REDUCE_SUM, "ln", NULL, NULL);
  op.desc.naxis = 2, op.desc.axis[0] = 0, op.desc.axis[1] = 1, op.desc.keep_dims = true;
  add(g, &op);
  op = op_of(g, "rmean", SK_OP_REDUCE_MEAN, "ln", NULL, NULL);
  op.desc.naxis = 1, op.desc.axis[0] = 1;
  add(g, &op);
  add(g, (op = op_of(g, "rmax", SK_OP_REDUCE_MAX, "ln", NULL, NULL), &op));
  op = op_of(g, "tr", SK_OP_TRANSPOSE, "ln", NULL, NULL);
  op.desc.perm[0] = 1, op.desc.perm[1] = 0, op.desc.has_perm = true; /* a perm read back is given */
  add(g, &op);
  op = op_of(g, "rs", SK_OP_RESHAPE, "tr", NULL, NULL);
  op.desc.noutputs = 1, op.desc.out_ndims[0] = 2, op.desc.out_shape[0][0] = 4, op.desc.out_shape[0][1] = 32;
  add(g, &op);
  op = op_of(g, "ed", SK_OP_EXPAND_DIMS, "rs", NULL, NULL);
  op.desc.naxis = 1, op.desc.axis[0] = 0;
  add(g, &op);
}

/* Gather, GetNext, VirtualDataset, BatchMatMul, Dense, the losses, and malformed strategies. */
static void build_zoo_b(sk_graph *g) {
  sk_graph_op op = op_of(g, "gat", SK_OP_GATHER, "table", "idx", NULL);
  strategy(&op, 0, 2, (const int[]){1, 2}), strategy(&op, 1, 1, (const int[]){4});
  add(g, &op);
  op = op_of(g, "gn", SK_OP_GET_NEXT, NULL, NULL, NULL);
  op.desc.noutputs = 2, op.desc.out_ndims[0] = 2, op.desc.out_ndims[1] = 1;
  op.desc.out_shape[0][0] = 8, op.desc.out_shape[0][1] = 16, op.desc.out_shape[1][0] = 8;
  op.out_dtype[1] = SK_I32, op.desc.full_batch = true, op.desc.has_strategy = true; /* the empty strategy () */
  add(g, &op);
  op = op_of(g, "vd", SK_OP_VIRTUAL_DATASET, "gn", "gn:1", NULL);
  op.desc.repeat_left = true;
  strategy(&op, 0, 2, (const int[]){4, 1}), strategy(&op, 1, 1, (const int[]){4});
  add(g, &op);
  add(g, (op = op_of(g, "bmm", SK_OP_BATCH_MATMUL, "q", "k", NULL), &op));
  op = op_of(g, "dense", SK_OP_DENSE, "a", "dw", "db");
  op.desc.transpose_b = true;
  add(g, &op);
  add(g, (op = op_of(g, "ce", SK_OP_SOFTMAX_CE_LOGITS, "a", "b", NULL), &op));
  /* Malformed strategies, kept for the compiler to refuse: three tuples for two inputs, a
     one-entry tuple for a rank-2 input, values below 1 and not dividing. */
  op = op_of(g, "bad_count", SK_OP_MUL, "a", "b", NULL);
  strategy(&op, 0, 2, (const int[]){2, 1}), strategy(&op, 1, 2, (const int[]){2, 1}), strategy(&op, 2, 1, (const int[]){1});
  op.desc.nstrategies = 3, op.desc.strategy_len[2] = 1; /* a tuple past the inputs has no rank to default to */
  add(g, &op);
  op = op_of(g, "bad_len", SK_OP_ADD, "a", "b", NULL);
  strategy(&op, 0, 2, (const int[]){2, 1}), strategy(&op, 1, 1, (const int[]){2});
  op.desc.strategy_len[1] = 1;
  add(g, &op);
  op = op_of(g, "bad_values", SK_OP_SUB, "a", "b", NULL);
  strategy(&op, 0, 2, (const int[]){0, -4}), strategy(&op, 1, 2, (const int[]){3, 2147483647});
  add(g, &op);
  op = op_of(g, "one_tuple", SK_OP_MATMUL, "a", "dw", NULL);
  op.desc.transpose_b = true;
  strategy(&op, 0, 2, (const int[]){2, 2});
  op.desc.nstrategies = 1;
  add(g, &op);
  add(g, (op = op_of(g, "mae", SK_OP_MAE_LOSS, "a", "b", NULL), &op));
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_set_loss(g, sk_graph_find(g, "mae"), &e), SK_OK, "%s", e.msg);
  g->optim.kind = SK_OPTIM_ADAM, g->optim.beta1 = 0.95, g->optim.eps = 1e-7;
}

static void build_zoo(sk_graph *g) {
  sk_graph_init(g);
  zoo_tensors(g);
  build_zoo_a(g);
  build_zoo_b(g);
}

/* ---- comparing graphs ----------------------------------------------------------------------- */

static void expect_same_layout(const sk_layout *a, const sk_layout *b, const char *op, int k) {
  cr_expect_eq(a->mesh.naxes, b->mesh.naxes, "%s layout %d", op, k);
  cr_expect_eq(a->mesh.size, b->mesh.size, "%s layout %d", op, k);
  for (int x = 0; x < a->mesh.naxes && x < SK_MAX_AXES; x++) {
    cr_expect_eq(a->mesh.dims[x], b->mesh.dims[x], "%s layout %d", op, k);
    cr_expect_str_eq(a->mesh.names[x], b->mesh.names[x], "%s layout %d", op, k);
  }
  cr_expect_eq(a->ndims, b->ndims, "%s layout %d", op, k);
  for (int d = 0; d < a->ndims && d < SK_MAX_DIMS; d++) {
    cr_expect_eq(a->shape[d], b->shape[d], "%s layout %d dim %d", op, k, d);
    cr_expect_eq(a->map[d].naxes, b->map[d].naxes, "%s layout %d dim %d", op, k, d);
    for (int j = 0; j < a->map[d].naxes && j < SK_MAX_AXES; j++)
      cr_expect_eq(a->map[d].axes[j], b->map[d].axes[j], "%s layout %d dim %d", op, k, d);
  }
}

#define SAME(field) cr_expect(!memcmp(&a->field, &b->field, sizeof a->field), "%s: " #field " differs", name)

/* Every field of two descs (arrays whole: both sides were zeroed before they were filled). */
static void expect_same_desc(const sk_op_desc *a, const sk_op_desc *b, const char *name) {
  SAME(kind); SAME(ninputs); SAME(ndims); SAME(shape); SAME(transpose_a); SAME(transpose_b);
  SAME(has_strategy); SAME(strategy); SAME(has_out_strategy); SAME(out_strategy); SAME(has_layouts);
  SAME(params); SAME(gradients_mean); SAME(nstrategies); SAME(strategy_len); SAME(naxis); SAME(axis);
  SAME(keep_dims); SAME(perm); SAME(has_perm); SAME(depth); SAME(noutputs); SAME(out_ndims); SAME(out_shape);
  SAME(repeat_left); SAME(full_batch); SAME(nout_layouts);
  if (a->has_layouts && b->has_layouts)
    for (int k = 0; k < a->ninputs; k++) expect_same_layout(&a->layouts[k], &b->layouts[k], name, k);
  for (int k = 0; k < a->nout_layouts && k < b->nout_layouts; k++)
    expect_same_layout(&a->out_layouts[k], &b->out_layouts[k], name, SK_OP_MAX_INPUTS + k);
}

static void expect_same_op(const sk_graph_op *a, const sk_graph_op *b) {
  const char *name = a->name;
  cr_expect_str_eq(a->name, b->name);
  SAME(ninputs); SAME(inputs); SAME(noutputs); SAME(outputs); SAME(out_dtype); SAME(fusion); SAME(stage);
  SAME(recompute);
  cr_expect(a->keep_prob == b->keep_prob && a->epsilon == b->epsilon, "%s: keep_prob or epsilon", name);
  cr_expect(a->on_value == b->on_value && a->off_value == b->off_value, "%s: on/off values", name);
  expect_same_desc(&a->desc, &b->desc, name);
}

static void expect_same_tensor(const sk_graph_tensor *a, const sk_graph_tensor *b) {
  const char *name = a->name;
  cr_expect_str_eq(a->name, b->name);
  SAME(role); SAME(dtype); SAME(ndims); SAME(shape); SAME(producer); SAME(output_index);
  cr_expect(a->init.kind == b->init.kind && a->init.value == b->init.value, "%s: init %s %.17g vs %s %.17g", name,
            sk_init_kind_name(a->init.kind), a->init.value, sk_init_kind_name(b->init.kind), b->init.value);
  cr_expect(a->value == b->value, "%s: constant %.17g vs %.17g", name, a->value, b->value);
  cr_expect_eq(a->frozen, b->frozen, "%s: requires_grad differs", name);
  cr_expect_eq(a->no_parallel_optimizer, b->no_parallel_optimizer, "%s: parallel_optimizer differs", name);
}

static void expect_same_graph(const sk_graph *a, const sk_graph *b) {
  cr_assert_eq(a->ntensors, b->ntensors);
  cr_assert_eq(a->nops, b->nops);
  cr_expect_eq(a->loss, b->loss);
  cr_expect_eq(a->logits, b->logits);
  cr_expect_eq(a->labels, b->labels);
  cr_expect_str_eq(a->dataset, b->dataset);
  cr_expect(!memcmp(&a->optim, &b->optim, sizeof a->optim), "optimizer differs"); /* both zeroed, then set */
  for (int t = 0; t < a->ntensors; t++) expect_same_tensor(&a->tensors[t], &b->tensors[t]);
  for (int i = 0; i < a->nops; i++) expect_same_op(&a->ops[i], &b->ops[i]);
}

/* ---- round trips ------------------------------------------------------------------------------ */

static char *format_ok(const sk_graph *g) {
  char *text = NULL;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_format_network(g, &text, &e), SK_OK, "format: %s", e.msg);
  cr_assert(text && strlen(text) > 0 && text[strlen(text) - 1] == '\n');
  return text;
}

static void parse_ok(const char *text, sk_graph *g) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_parse_network(text, strlen(text), g, &e), SK_OK, "parse: %s", e.msg);
}

/* build -> format -> parse -> format: the same text, and the same graph field by field. */
static void round_trip(void (*build)(sk_graph *)) {
  sk_graph g, back;
  build(&g);
  char *text = format_ok(&g);
  parse_ok(text, &back);
  char *again = format_ok(&back);
  cr_expect_str_eq(again, text);
  expect_same_graph(&g, &back);
  sk_error e = {SK_OK, ""};
  if (g.loss >= 0) cr_expect_eq(sk_graph_check(&back, &e), SK_OK, "%s", e.msg);
  free(text), free(again);
  sk_graph_free(&g), sk_graph_free(&back);
}

Test(json, mlp_round_trips_byte_for_byte_and_field_by_field) { round_trip(build_mlp); }

/* The networks shipped in examples/nets are kept in the canonical form: loading one and saving it
   again gives the same file, byte for byte (the suites run from the project root). */
static void shipped_network_is_canonical(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "examples/nets/%s.json", name);
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s (run the suites from the project root)", path);
  static char file[1 << 20];
  size_t n = fread(file, 1, sizeof file - 1, f);
  fclose(f);
  cr_assert(n > 0 && n < sizeof file - 1, "%s: %zu bytes", path, n);
  file[n] = 0;
  sk_graph g;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_load_network(path, &g, &e), SK_OK, "%s: %s", path, e.msg);
  cr_expect_eq(sk_graph_check(&g, &e), SK_OK, "%s: %s", path, e.msg);
  char *text = format_ok(&g);
  cr_expect(strcmp(text, file) == 0, "%s is not in canonical form (load and save it again)", path);
  free(text);
  sk_graph_free(&g);
}

Test(json, shipped_networks_are_canonical) {
  shipped_network_is_canonical("operator_parallel");
  shipped_network_is_canonical("recursive_programming");
  shipped_network_is_canonical("transformer");
  shipped_network_is_canonical("attention");
  shipped_network_is_canonical("dense_mutmul");
  shipped_network_is_canonical("four_matmul");
}

Test(json, operator_zoo_round_trips_byte_for_byte_and_field_by_field) { round_trip(build_zoo); }

static void build_empty(sk_graph *g) { sk_graph_init(g); }
Test(json, empty_graph_round_trips) { round_trip(build_empty); }

/* The canonical text: key order, indentation, defaults left out, exact doubles. */
Test(json, canonical_text_has_fixed_keys_indentation_and_exact_doubles) {
  sk_graph g;
  build_mlp(&g);
  char *text = format_ok(&g);
  static const char head[] = "{\n  \"format\": \"shardkit-network\",\n  \"version\": 1,\n  \"dataset\": \"fashion-mnist\",\n"
                             "  \"tensors\": [\n    {\n      \"name\": \"x\",\n      \"role\": \"input\",\n";
  cr_expect(!strncmp(text, head, strlen(head)), "%.300s", text);
  cr_expect(strstr(text, "\"kind\": \"uniform\",\n        \"value\": 0.035714285714285712\n"), "uniform");
  cr_expect(strstr(text, "\"on_value\": 0.90000000000000002,"), "on_value");
  cr_expect(strstr(text, "\"layouts\": {\n        \"mesh\": \"dp=2,mp=4\",\n        \"inputs\": [\n          \"dp,mp\",\n"
                         "          \"mp,None\"\n        ]\n      }"),
            "layouts");
  cr_expect(strstr(text, "\"loss\": \"loss\",\n  \"eval\": {\n    \"logits\": \"mm3\",\n    \"labels\": \"label\"\n  },\n"
                         "  \"optimizer\": {\n    \"kind\": \"momentum\",\n    \"lr\": 0.01,\n    \"momentum\": 0.90000000000000002,\n"
                         "    \"weight_decay\": 0.0001,\n    \"nesterov\": true\n  }\n}\n"),
            "%s", text + strlen(text) - 300);
  cr_expect(!strstr(text, "keep_dims") && !strstr(text, "transpose_a") && !strstr(text, "false"), "zero defaults written");
  /* OneHot's strategy: the indices' tuple over the output, then the two scalars' () */
  cr_expect(strstr(text, "\"shard\": [\n        [\n          8,\n          1\n        ],\n        [],\n        []\n      ]"),
            "OneHot shard");
  free(text);
  sk_graph_free(&g);
}

/* Parameters added between operators: tensors are listed first on load, so ids change, but the
   names, parameter order and operators stay, and the text is a fixed point. */
Test(json, interleaved_parameters_keep_names_and_text) {
  static const int64_t xs[2] = {4, 8}, ws[2] = {8, 8};
  sk_graph g, back;
  sk_graph_init(&g);
  input(&g, "x", SK_F32, 2, xs);
  param(&g, "w1", 2, ws, SK_INIT_UNIFORM, 0);
  sk_graph_op op = op_of(&g, "mm1", SK_OP_MATMUL, "x", "w1", NULL);
  add(&g, &op);
  param(&g, "w2", 2, ws, SK_INIT_UNIFORM, 0.5);
  add(&g, (op = op_of(&g, "mm2", SK_OP_MATMUL, "mm1", "w2", NULL), &op));
  char *text = format_ok(&g);
  parse_ok(text, &back);
  char *again = format_ok(&back);
  cr_expect_str_eq(again, text);
  cr_expect_eq(sk_graph_find(&g, "w2"), 3);
  cr_expect_eq(sk_graph_find(&back, "w2"), 2);
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 2; k++)
      cr_expect_str_eq(g.tensors[g.ops[i].inputs[k]].name, back.tensors[back.ops[i].inputs[k]].name);
  free(text), free(again);
  sk_graph_free(&g), sk_graph_free(&back);
}

/* Any spacing and key order read the same graph as the canonical text. */
Test(json, hand_written_text_reads_like_the_canonical_one) {
  static const char text[] =
      "{\"version\":1,\"format\":\"shardkit-network\",\"tensors\":[{\"shape\":[4,8],\"dtype\":\"float\","
      "\"role\":\"input\",\"name\":\"x\"},{\"name\":\"w\",\"role\":\"parameter\",\"dtype\":\"f32\",\"shape\":[8,2],"
      "\"init\":{\"value\":1,\"kind\":\"constant\"}}],\"operators\":[{\"inputs\":[\"x\",\"w\"],\"type\":\"MatMul\","
      "\"name\":\"mm\",\"shard\":[[2,1],[1,1]],\"transpose_a\":false},{\"name\":\"loss\",\"type\":\"ReduceMean\","
      "\"inputs\":[\"mm\"],\"axis\":[0,1]}],\"loss\":\"loss\"}";
  sk_graph g;
  parse_ok(text, &g);
  cr_expect_eq(g.nops, 2);
  cr_expect_eq(g.tensors[1].init.kind, SK_INIT_CONSTANT);
  cr_expect_eq(g.tensors[1].init.value, 1.0);
  cr_expect_eq(g.ops[1].desc.naxis, 2);
  cr_expect_eq(g.ops[0].desc.strategy[0][0], 2);
  char *canon = format_ok(&g);
  cr_expect(strstr(canon, "\"value\": 1.0\n"), "%s", canon);
  free(canon);
  sk_graph_free(&g);
}

/* ---- refused texts: each class, with its line and path ---------------------------------------- */

/* Line numbers are fixed: 6 is w1, 8 is w2, 11 mm1, 12 relu, 13 mm2, 14 the loss operator,
   16 the loss key. */
static const char base_text[] =
    "{\n"                                                                                          /* 1 */
    "  \"format\": \"shardkit-network\",\n"                                                        /* 2 */
    "  \"version\": 1,\n"                                                                          /* 3 */
    "  \"tensors\": [\n"                                                                           /* 4 */
    "    {\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [32, 784]},\n"      /* 5 */
    "    {\"name\": \"w1\", \"role\": \"parameter\", \"dtype\": \"f32\", \"shape\": [784, 512],\n" /* 6 */
    "     \"init\": {\"kind\": \"uniform\", \"value\": 0.035714285714285712}},\n"                  /* 7 */
    "    {\"name\": \"w2\", \"role\": \"parameter\", \"dtype\": \"f32\", \"shape\": [512, 10], \"init\": {\"kind\": \"normal\"}}\n"
    "  ],\n"                                                                                       /* 9 */
    "  \"operators\": [\n"                                                                         /* 10 */
    "    {\"name\": \"mm1\", \"type\": \"MatMul\", \"inputs\": [\"x\", \"w1\"], \"shard\": [[2, 4], [4, 1]]},\n"
    "    {\"name\": \"relu\", \"type\": \"ReLU\", \"inputs\": [\"mm1\"]},\n"                       /* 12 */
    "    {\"name\": \"mm2\", \"type\": \"MatMul\", \"inputs\": [\"relu\", \"w2\"]},\n"             /* 13 */
    "    {\"name\": \"loss\", \"type\": \"ReduceMean\", \"inputs\": [\"mm2\"]}\n"                  /* 14 */
    "  ],\n"                                                                                       /* 15 */
    "  \"loss\": \"loss\"\n"                                                                       /* 16 */
    "}\n";

/* base_text with the first `from` replaced by `to`, parsed: must be refused with a message
   holding every `want` (NULL-terminated). */
static void expect_refused(const char *from, const char *to, const char *const *want) {
  const char *at = strstr(base_text, from);
  cr_assert(at, "\"%s\" is not in the base text", from);
  char text[4096];
  int n = snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base_text), base_text, to, at + strlen(from));
  cr_assert(n > 0 && n < (int)sizeof text);
  sk_graph g;
  sk_error e = {SK_OK, ""};
  sk_result r = sk_json_parse_network(text, (size_t)n, &g, &e);
  cr_expect_eq(r, SK_ERR_INVALID_ARGUMENT, "%s -> %s: %s", from, to, sk_result_name(r));
  cr_expect_eq(e.code, SK_ERR_INVALID_ARGUMENT);
  for (int k = 0; want[k]; k++) cr_expect(strstr(e.msg, want[k]), "%s -> %s: \"%s\" lacks \"%s\"", from, to, e.msg, want[k]);
  cr_expect(g.ntensors == 0 && g.nops == 0 && !g.tensors && !g.ops, "the graph is left empty");
}

#define REFUSED(from, to, ...) expect_refused((from), (to), (const char *const[]){__VA_ARGS__, NULL})

Test(json, the_base_text_is_valid) {
  sk_graph g;
  parse_ok(base_text, &g);
  sk_error e = {SK_OK, ""};
  cr_expect_eq(sk_graph_check(&g, &e), SK_OK, "%s", e.msg);
  sk_graph_free(&g);
}

Test(json, syntax_errors_give_janssons_line_and_column) {
  REFUSED("\"version\": 1,", "\"version\": 1", "line 4, column", "expected");
  REFUSED("[\"mm1\"]}", "[\"mm1\"}", "line 12, column");
  REFUSED("\"loss\": \"loss\"\n}", "\"loss\": \"loss\"\n", "line 18", "end of file");
  REFUSED("\"loss\": \"loss\"\n", "\"loss\": \"loss\", \"loss\": \"mm2\"\n", "line 16", "duplicate object key");
  REFUSED("[32, 784]", "[32, 99999999999999999999999]", "line 5", "too big");
}

Test(json, unknown_operator_type) {
  REFUSED("\"ReLU\"", "\"Relu6\"", "line 12: operators[1] (\"relu\").type: unknown operator type \"Relu6\"");
}

Test(json, unknown_input_tensor) {
  REFUSED("[\"relu\", \"w2\"]", "[\"relu\", \"w3\"]", "line 13: operators[2] (\"mm2\").inputs[1]: no tensor \"w3\"");
  /* an operator's output exists only after it: reading a later one is unknown too */
  REFUSED("[\"x\", \"w1\"]", "[\"relu\", \"w1\"]", "line 11: operators[0] (\"mm1\").inputs[0]: no tensor \"relu\"");
}

Test(json, missing_keys) {
  REFUSED("\"dtype\": \"f32\", \"shape\": [512, 10]", "\"shape\": [512, 10]",
          "line 8: tensors[2] (\"w2\").dtype: expected a dtype", "missing");
  REFUSED("\"type\": \"MatMul\", \"inputs\": [\"relu\"", "\"inputs\": [\"relu\"",
          "line 13: operators[2] (\"mm2\").type: expected a string, got nothing (the key is missing)");
  REFUSED(", \"init\": {\"kind\": \"normal\"}", "", "line 8: tensors[2] (\"w2\").init: expected an object", "missing");
  REFUSED("  \"version\": 1,\n", "\n", "line 1: version: expected 1, the version this reader knows, got nothing");
  REFUSED("\"operators\"", "\"ops\"", "line 10: ops: unknown key");
}

Test(json, wrong_json_types) {
  REFUSED("\"shard\": [[2, 4], [4, 1]]", "\"shard\": \"((2,4),(4,1))\"",
          "line 11: operators[0] (\"mm1\").shard: expected a list of at most 4 tuples, got a string");
  REFUSED("\"shard\": [[2, 4], [4, 1]]", "\"shard\": []",
          "line 11: operators[0] (\"mm1\").shard: an empty strategy for an operator of 2 tuples cannot be stored "
          "(leaving it out is the default)");
  REFUSED("\"shard\": [[2, 4], [4, 1]]", "\"shard\": [[2, 4], [4, 1.5]]",
          "line 11: operators[0] (\"mm1\").shard[1]: entry 1: expected an integer", "got a real number");
  REFUSED("\"inputs\": [\"mm2\"]", "\"inputs\": [\"mm2\"], \"keep_dims\": 1",
          "line 14: operators[3] (\"loss\").keep_dims: expected true or false, got an integer");
  REFUSED("\"kind\": \"normal\"", "\"kind\": \"normal\", \"value\": \"0.01\"",
          "line 8: tensors[2] (\"w2\").init.value: expected a number, got a string");
  REFUSED("\"loss\": \"loss\"\n", "\"loss\": 3\n", "line 16: loss: expected a string, got an integer");
  REFUSED("  \"tensors\": [\n", "  \"tensors\": {\"x\": 1}, \"t\": [\n", "line 4: t: unknown key");
  REFUSED("\"loss\": \"loss\"\n", "\"loss\": \"loss\", \"eval\": [\"mm2\"]\n", "line 16: eval: expected an object");
}

Test(json, bad_shapes) {
  REFUSED("[784, 512]", "[784, 0]", "line 6: tensors[1] (\"w1\").shape: entry 1: expected an integer in 1..");
  REFUSED("[784, 512]", "[784, -512]", "line 6: tensors[1] (\"w1\").shape: entry 1");
  REFUSED("[784, 512]", "[1, 2, 3, 4, 5, 6, 7, 8, 9]", "line 6: tensors[1] (\"w1\").shape: expected a list of at most 8");
  REFUSED("[784, 512]", "[1048576, 1048576, 2]", "line 6: tensors[1] (\"w1\").shape: more than 2^40 elements");
  REFUSED("[784, 512]", "\"784x512\"", "line 6: tensors[1] (\"w1\").shape: expected a list", "got a string");
}

Test(json, operators_the_graph_refuses_are_named_with_their_line) {
  /* w2 [256, 10] cannot take mm2's 512 columns */
  REFUSED("[512, 10]", "[256, 10]", "line 13: operators[2] (\"mm2\"): graph: operator 'mm2'", "MatMul");
  /* names are unique across tensors and operators */
  REFUSED("\"name\": \"relu\"", "\"name\": \"w1\"", "line 12: operators[1] (\"w1\"): graph: operator 'w1'");
  /* an output past 2^40 elements: [2^21, 1] by [1, 2^20] */
  REFUSED("[32, 784]},\n    {\"name\": \"w1\", \"role\": \"parameter\", \"dtype\": \"f32\", \"shape\": [784, 512]",
          "[2097152, 1]},\n    {\"name\": \"w1\", \"role\": \"parameter\", \"dtype\": \"f32\", \"shape\": [1, 1048576]",
          "line 11: operators[0] (\"mm1\"): graph: tensor 'mm1' has more than 2^40 elements");
}

Test(json, other_semantic_errors) {
  REFUSED("\"version\": 1", "\"version\": 2", "line 3: version: expected 1, the version this reader knows, got 2");
  REFUSED("\"shardkit-network\"", "\"onnx\"", "line 2: format: expected \"shardkit-network\"");
  REFUSED("\"role\": \"input\"", "\"role\": \"value\"", "line 5: tensors[0] (\"x\").role: expected \"input\" or \"parameter\"");
  REFUSED("\"kind\": \"normal\"", "\"kind\": \"gaussian\"", "line 8: tensors[2] (\"w2\").init.kind: expected zeros");
  REFUSED("\"loss\": \"loss\"\n", "\"loss\": \"los\"\n", "line 16: loss: no tensor \"los\"");
  REFUSED("\"loss\": \"loss\"\n", "\"loss\": \"mm2\"\n", "line 16: loss: graph: loss 'mm2' must be a one-element");
  REFUSED("\"shard\": [[2, 4], [4, 1]]", "\"shards\": [[2, 4], [4, 1]]", "line 11: operators[0] (\"mm1\").shards: unknown key");
  REFUSED("\"shard\": [[2, 4], [4, 1]]", "\"shard\": [[2, 4], []]",
          "line 11: operators[0] (\"mm1\").shard[1]: an empty tuple for a rank-2 input cannot be stored");
  REFUSED("\"inputs\": [\"mm2\"]", "\"inputs\": [\"mm2\"], \"out_shapes\": [[1]]",
          "line 14: operators[3] (\"loss\").out_shapes: GetNext only");
  REFUSED("\"inputs\": [\"mm2\"]", "\"inputs\": [\"mm2\"], \"axis\": 99", "line 14: operators[3] (\"loss\").axis: expected an integer in -9..8");
  REFUSED("\"inputs\": [\"relu\", \"w2\"]", "\"inputs\": [\"relu\", \"w2\"], \"layouts\": {\"mesh\": \"dp=2\", \"inputs\": [\"dp,None\", \"dp\"]}",
          "line 13: operators[2] (\"mm2\").layouts.inputs[1]: layout \"dp\" has 1 dims; the shape has 2");
  REFUSED("\"inputs\": [\"relu\", \"w2\"]", "\"inputs\": [\"relu\", \"w2\"], \"layouts\": {\"mesh\": \"dp=0\", \"inputs\": []}",
          "line 13: operators[2] (\"mm2\").layouts.mesh:");
  REFUSED("\"inputs\": [\"mm1\"]}", "\"inputs\": [\"mm1\"], \"layouts\": {\"mesh\": \"dp=8\", \"inputs\": [\"dp,None\", \"None,dp\"]}}",
          "line 12: operators[1] (\"relu\").layouts.inputs: expected a list of 1 layout texts, one per input");
  REFUSED("\"inputs\": [\"mm1\"]}", "\"inputs\": [\"mm1\"], \"out_layout\": {\"mesh\": \"dp=8\", \"outputs\": [\"dp\"]}}",
          "line 12: operators[1] (\"relu\").out_layout.outputs[0]: layout \"dp\" has 1 dims; the shape has 2");
  REFUSED("\"inputs\": [\"mm1\"]}", "\"inputs\": [\"mm1\"], \"out_layout\": {\"mesh\": \"dp=8\", \"outputs\": []}}",
          "line 12: operators[1] (\"relu\").out_layout.outputs: expected a list of 1..1 layout texts");
  REFUSED("\"inputs\": [\"mm1\"]}", "\"inputs\": [\"mm1\"], \"out_layout\": {\"mesh\": \"dp=8\", \"inputs\": [\"dp,None\"]}}",
          "line 12: operators[1] (\"relu\").out_layout.inputs: unknown key");
}

/* A perm in the file is given (desc.has_perm), all zeros too: (0,0) is refused as no
   permutation, not as a missing perm. */
Test(json, a_given_all_zero_perm_is_no_permutation) {
  REFUSED("\"type\": \"ReLU\", \"inputs\": [\"mm1\"]", "\"type\": \"Transpose\", \"inputs\": [\"mm1\"], \"perm\": [0, 0]",
          "line 12: operators[1] (\"relu\"): graph: operator 'relu'", "Transpose: perm is not a permutation of 0..1");
}

/* Rank 1's perm (0) is all zeros: written, so that it reads back as given. */
static void build_rank1_transpose(sk_graph *g) {
  static const int64_t v[1] = {8};
  sk_graph_init(g);
  input(g, "v", SK_F32, 1, v);
  sk_graph_op op = op_of(g, "tr", SK_OP_TRANSPOSE, "v", NULL, NULL);
  op.desc.has_perm = true;
  add(g, &op);
}

Test(json, a_given_all_zero_perm_round_trips) {
  round_trip(build_rank1_transpose);
  sk_graph g, back;
  build_rank1_transpose(&g);
  char *text = format_ok(&g);
  parse_ok(text, &back);
  cr_expect(back.ops[0].desc.has_perm, "perm (0) was not written: %s", text);
  free(text);
  sk_graph_free(&g), sk_graph_free(&back);
}

Test(json, a_duplicate_name_gives_the_line_of_the_duplicate) {
  REFUSED("\"name\": \"w2\"", "\"name\": \"w1\"", "line 8: tensors[2] (\"w1\"): graph: parameter 'w1': a tensor of that name exists");
  REFUSED("\"name\": \"mm2\"", "\"name\": \"mm1\"", "line 13: operators[2] (\"mm1\"): graph: operator 'mm1'");
}

Test(json, optimizer) {
  static const char *const loss_line = "\"loss\": \"loss\"\n";
  REFUSED(loss_line, "\"loss\": \"loss\",\n  \"optimizer\": {\"kind\": \"rmsprop\"}\n",
          "line 17: optimizer.kind: expected sgd, momentum or adam");
  REFUSED(loss_line, "\"loss\": \"loss\",\n  \"optimizer\": {\"kind\": \"adam\", \"beta1\": 1.5}\n",
          "line 17: optimizer: sk_optim_resolve (adam): beta1 1.5 is outside (0, 1)");
  REFUSED(loss_line, "\"loss\": \"loss\",\n  \"optimizer\": {\"kind\": \"sgd\", \"lr\": \"0.1\"}\n",
          "line 17: optimizer.lr: expected a number, got a string");
  REFUSED(loss_line, "\"loss\": \"loss\",\n  \"optimizer\": {\"kind\": \"sgd\", \"learning_rate\": 0.1}\n",
          "line 17: optimizer.learning_rate: unknown key");
  REFUSED(loss_line, "\"loss\": \"loss\",\n  \"optimizer\": \"sgd\"\n", "line 17: optimizer: expected an object");
  /* without the key: SGD with MindSpore's defaults, written out as such */
  sk_graph g;
  parse_ok(base_text, &g);
  sk_optim_desc zero;
  memset(&zero, 0, sizeof zero);
  cr_expect(!memcmp(&g.optim, &zero, sizeof zero));
  char *text = format_ok(&g);
  cr_expect(strstr(text, "\n  \"optimizer\": {\n    \"kind\": \"sgd\"\n  }\n}\n"), "%s", text);
  free(text);
  sk_graph_free(&g);
}

Test(json, elements_without_a_name_give_the_line_of_their_list) {
  REFUSED("{\"name\": \"relu\", \"type\": \"ReLU\", \"inputs\": [\"mm1\"]}", "42", "line 10: operators[1]: expected an object, got an integer");
  REFUSED("\"name\": \"relu\", ", "", "line 10: operators[1].name: expected a string", "missing");
  REFUSED("{\"name\": \"x\", \"role\"", "{\"role\"", "line 4: tensors[0].name");
}

Test(json, a_name_that_needs_escaping_is_still_found) {
  REFUSED("\"name\": \"relu\", \"type\": \"ReLU\"", "\"name\": \"re\\\"lu\\\\\", \"type\": \"Relu6\"",
          "line 12: operators[1] (\"re\"lu\\\").type: unknown operator type");
}

Test(json, bad_arguments) {
  sk_graph g;
  sk_error e = {SK_OK, ""};
  char *text = (char *)&e;
  cr_expect_eq(sk_json_parse_network(NULL, 0, &g, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_json_parse_network("{}", 2, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_json_format_network(NULL, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_null(text);
  sk_graph_init(&g);
  cr_expect_eq(sk_json_format_network(&g, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_json_parse_network(" \n", 2, &g, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_str_eq(e.msg, "the text is empty");
  cr_expect_eq(sk_json_parse_network("[]", 2, &g, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_str_eq(e.msg, "line 1: expected the network object, got a list");
}

/* ---- what formatting refuses ------------------------------------------------------------------ */

static void build_operands(sk_graph *g); /* below, with the tests of scalar operands */

Test(json, format_refuses_what_json_cannot_carry) {
  sk_graph g;
  sk_error e = {SK_OK, ""};
  char *text = NULL;
  build_mlp(&g);
  g.tensors[2].init.value = INFINITY;
  cr_expect_eq(sk_json_format_network(&g, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "parameter 'w1'") && strstr(e.msg, "not finite"), "%s", e.msg);
  g.tensors[2].init.value = 0.5;
  sk_graph c;
  build_operands(&c);
  c.tensors[sk_graph_find(&c, "scale:in1")].value = NAN; /* a constant is a number JSON can write */
  cr_expect_eq(sk_json_format_network(&c, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "constant 'scale:in1' is not a finite"), "%s", e.msg);
  sk_graph_free(&c);
  snprintf(g.tensors[0].name, sizeof g.tensors[0].name, "x\xff"); /* the graph allows any byte >= 0x20 */
  cr_expect_eq(sk_json_format_network(&g, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "is not UTF-8"), "%s", e.msg);
  snprintf(g.tensors[0].name, sizeof g.tensors[0].name, "x");
  g.ops[4].desc.layouts[1] = layout("a=2,b=4", "b,None", 2, (const int64_t[]){512, 512});
  cr_expect_eq(sk_json_format_network(&g, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "operator 'mm2'") && strstr(e.msg, "one mesh"), "%s", e.msg);
  g.ops[4].desc.has_layouts = false;
  g.optim.lr = -0.5;
  cr_expect_eq(sk_json_format_network(&g, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "the optimizer") && strstr(e.msg, "lr -0.5 is negative"), "%s", e.msg);
  g.optim.lr = NAN;
  cr_expect_eq(sk_json_format_network(&g, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "finite"), "%s", e.msg);
  g.optim.lr = 0.01;
  g.ops[1].desc.nstrategies = 5;
  cr_expect_eq(sk_json_format_network(&g, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "operator 1"), "%s", e.msg);
  cr_expect_null(text);
  sk_graph_free(&g);
}

/* ---- files -------------------------------------------------------------------------------------- */

Test(json, save_then_load_a_file) {
  char path[] = "/tmp/sk_json_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  sk_graph g, back;
  sk_error e = {SK_OK, ""};
  build_zoo(&g);
  cr_assert_eq(sk_json_save_network(&g, path, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_json_load_network(path, &back, &e), SK_OK, "%s", e.msg);
  expect_same_graph(&g, &back);
  sk_graph_free(&back);
  /* a refused file: its base name, then the line */
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs("{\n  \"format\": \"shardkit-network\",\n  \"version\": 7\n}\n", f);
  fclose(f);
  cr_expect_eq(sk_json_load_network(path, &back, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, strrchr(path, '/') + 1) && strstr(e.msg, ": line 3: version"), "%s", e.msg);
  remove(path);
  cr_expect_eq(sk_json_load_network(path, &back, &e), SK_ERR_SYSTEM);
  cr_expect(strstr(e.msg, path) && strstr(e.msg, "No such file"), "%s", e.msg);
  cr_expect_eq(sk_json_save_network(&g, "/nonexistent-dir/x.json", &e), SK_ERR_SYSTEM);
  cr_expect(strstr(e.msg, "/nonexistent-dir/x.json"), "%s", e.msg);
  sk_graph_free(&g);
}

/* ---- parallel_speed_up.json ------------------------------------------------------------------- */

static sk_result speed_up(const char *text, sk_transformer_opt *o, sk_error *e) {
  return sk_json_parse_transformer_opt(text, strlen(text), o, e);
}

Test(json, speed_up_honours_two_options_under_either_name) {
  sk_transformer_opt o;
  sk_error e = {SK_OK, ""};
  memset(&o, 0, sizeof o);
  cr_assert_eq(speed_up("{\"grad_computation_allreduce_overlap\": true, \"enable_communication_fusion\": false}", &o, &e),
               SK_OK, "%s", e.msg);
  cr_expect(o.grad_computation_allreduce_overlap && !o.enable_communication_fusion);
  cr_assert_eq(speed_up("{\"enable_grad_comm_opt\": false, \"enable_task_opt\": true}", &o, &e), SK_OK, "%s", e.msg);
  cr_expect(!o.grad_computation_allreduce_overlap && o.enable_communication_fusion, "the older names");
  cr_assert_eq(speed_up("{\"enable_task_opt\": true, \"enable_communication_fusion\": true}", &o, &e), SK_OK, "%s", e.msg);
  cr_expect(o.enable_communication_fusion);
  cr_assert_eq(speed_up("{}", &o, &e), SK_OK, "%s", e.msg);
  cr_expect(!o.grad_computation_allreduce_overlap && !o.enable_communication_fusion, "MindSpore's defaults: off");
}

/* MindSpore's other options: accepted while off, each refused by name when set. */
Test(json, speed_up_refuses_what_is_not_built_by_name) {
  static const char *const off[] = {"recomputation_communication_overlap", "grad_matmul_communication_overlap",
                                    "grad_fa_allgather_overlap", "computation_allgather_overlap",
                                    "computation_communication_fusion_level", "dataset_broadcast_opt_level",
                                    "allreduce_and_biasadd_swap", "enable_allreduce_slice_to_reducescatter",
                                    "enable_interleave_split_concat_branch", "enable_interleave_parallel_branch"};
  sk_transformer_opt o;
  sk_error e = {SK_OK, ""};
  char text[256], want[128];
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    snprintf(text, sizeof text, "{\"%s\": false, \"enable_task_opt\": true}", off[i]);
    cr_expect_eq(speed_up(text, &o, &e), SK_OK, "%s: %s", off[i], e.msg);
    snprintf(text, sizeof text, "{\"%s\": 0}", off[i]);
    cr_expect_eq(speed_up(text, &o, &e), SK_OK, "%s: %s", off[i], e.msg);
    o.enable_communication_fusion = true;
    snprintf(text, sizeof text, "{\n  \"enable_task_opt\": false,\n  \"%s\": %s\n}", off[i], i % 2 ? "true" : "2");
    snprintf(want, sizeof want, "line 3: %s: not built in shardkit", off[i]);
    cr_expect_eq(speed_up(text, &o, &e), SK_ERR_INVALID_ARGUMENT, "%s", off[i]);
    cr_expect(strstr(e.msg, want), "'%s' does not hold '%s'", e.msg, want);
    cr_expect(o.enable_communication_fusion, "a refused text leaves *out alone");
  }
}

Test(json, speed_up_refusals) {
  sk_transformer_opt o;
  sk_error e = {SK_OK, ""};
  static const struct {
    const char *text, *word;
  } bad[] = {
      {"{\"enable_comm_fusion\": true}", "line 1: enable_comm_fusion: unknown option"},
      {"{\"grad_computation_allreduce_overlap\": 1}", "grad_computation_allreduce_overlap: expected true or false, got an integer"},
      {"{\"enable_task_opt\": \"yes\"}", "enable_task_opt: expected true or false, got a string"},
      {"{\n\"enable_communication_fusion\": true,\n\"enable_task_opt\": false}", "line 3: enable_task_opt: false, but "
                                                                                 "enable_communication_fusion (its newer name) is true"},
      {"{\"dataset_broadcast_opt_level\": \"0\"}", "dataset_broadcast_opt_level: expected a boolean or an integer"},
      {"[true]", "expected an object of options, got a list"},
      {"{\"enable_task_opt\": true,}", "line 1, column"},
      {"", "the text is empty"},
      {"{\"enable_task_opt\": true, \"enable_task_opt\": false}", "duplicate"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_expect_eq(speed_up(bad[i].text, &o, &e), SK_ERR_INVALID_ARGUMENT, "%s", bad[i].text);
    cr_expect(strstr(e.msg, bad[i].word), "%s: '%s' does not hold '%s'", bad[i].text, e.msg, bad[i].word);
  }
  cr_expect_eq(sk_json_parse_transformer_opt(NULL, 0, &o, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_json_parse_transformer_opt("{}", 2, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_json_load_transformer_opt(NULL, &o, &e), SK_ERR_INVALID_ARGUMENT);
}

Test(json, speed_up_from_a_file) {
  char path[] = "/tmp/sk_speed_up_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  FILE *f = fopen(path, "w");
  cr_assert(f);
  fputs("{\n  \"grad_computation_allreduce_overlap\": true,\n  \"enable_task_opt\": true,\n"
        "  \"grad_matmul_communication_overlap\": false\n}\n", f);
  fclose(f);
  sk_transformer_opt o;
  sk_error e = {SK_OK, ""};
  memset(&o, 0, sizeof o);
  cr_assert_eq(sk_json_load_transformer_opt(path, &o, &e), SK_OK, "%s", e.msg);
  cr_expect(o.grad_computation_allreduce_overlap && o.enable_communication_fusion);
  f = fopen(path, "w");
  cr_assert(f);
  fputs("{\n  \"enable_task_opt\": true,\n  \"grad_matmul_communication_overlap\": true\n}\n", f);
  fclose(f);
  cr_expect_eq(sk_json_load_transformer_opt(path, &o, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, strrchr(path, '/') + 1) && strstr(e.msg, ": line 3: grad_matmul_communication_overlap"), "%s",
            e.msg);
  remove(path);
  cr_expect_eq(sk_json_load_transformer_opt(path, &o, &e), SK_ERR_SYSTEM);
  cr_expect(strstr(e.msg, path), "%s", e.msg);
}

/* ---- fuzzing the loader ----------------------------------------------------------------------- */

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* [start, end) of a random run of digits in t, or false. */
static bool pick_number(const char *t, size_t n, uint64_t *s, size_t *start, size_t *end) {
  for (int tries = 0; tries < 20; tries++) {
    size_t i = rnd(s) % n;
    if (t[i] < '0' || t[i] > '9') continue;
    *start = *end = i;
    while (*start > 0 && t[*start - 1] >= '0' && t[*start - 1] <= '9') (*start)--;
    while (*end < n && t[*end] >= '0' && t[*end] <= '9') (*end)++;
    return true;
  }
  return false;
}

/* Replaces [a, b) of buf (length *n, room cap) with `with` (wn bytes), when it fits. */
static void splice(char *buf, size_t *n, size_t cap, size_t a, size_t b, const char *with, size_t wn) {
  if (*n - (b - a) + wn > cap) return;
  memmove(buf + a + wn, buf + b, *n - b);
  memcpy(buf + a, with, wn);
  *n = *n - (b - a) + wn;
}

/* One deterministic mutation of buf. */
static void mutate(char *buf, size_t *n, size_t cap, uint64_t *s) {
  static const char *const numbers[] = {"0", "-1", "-2147483649", "2147483648", "9223372036854775807",
                                        "99999999999999999999", "1099511627777", "1e308", "-0.0", "4096", "3"};
  char tmp[8192];
  size_t a = *n ? rnd(s) % *n : 0, b = a + rnd(s) % 40, c, d;
  if (b > *n) b = *n;
  switch (rnd(s) % 8) {
    case 0: if (*n) buf[a] = (char)(rnd(s) & 0xff); break;                   /* byte flip */
    case 1: *n = a; break;                                                     /* truncation */
    case 2: splice(buf, n, cap, a, b, "", 0); break;                           /* deleted span */
    case 3: memcpy(tmp, buf + a, b - a), splice(buf, n, cap, b, b, tmp, b - a); break; /* duplicated span */
    case 4: /* swapped numbers */
      if (pick_number(buf, *n, s, &a, &b) && pick_number(buf, *n, s, &c, &d) && b <= c) {
        char x[64], y[64];
        size_t xn = b - a < 63 ? b - a : 63, yn = d - c < 63 ? d - c : 63;
        memcpy(x, buf + a, xn), memcpy(y, buf + c, yn);
        splice(buf, n, cap, c, c + yn, x, xn), splice(buf, n, cap, a, a + xn, y, yn);
      }
      break;
    case 5: /* a huge, negative or odd number */
      if (pick_number(buf, *n, s, &a, &b)) {
        const char *x = numbers[rnd(s) % (sizeof numbers / sizeof numbers[0])];
        splice(buf, n, cap, a, b, x, strlen(x));
      }
      break;
    case 6: if (pick_number(buf, *n, s, &a, &b)) splice(buf, n, cap, a, a, "-", 1); break; /* negated */
    default: { /* deep nesting in place of a span */
      size_t depth = 1 + rnd(s) % 3000;
      if (depth * 2 > sizeof tmp) depth = sizeof tmp / 2;
      memset(tmp, '[', depth), memset(tmp + depth, ']', depth);
      splice(buf, n, cap, a, b, tmp, 2 * depth);
    }
  }
}

/* A loaded graph is checked, and any graph the loader accepts formats, and its text is a
   fixed point of load-and-save. */
static void check_accepted(sk_graph *g) {
  sk_error e = {SK_OK, ""};
  if (sk_graph_check(g, &e) != SK_OK) cr_assert(e.msg[0], "sk_graph_check failed without a message");
  char *text = NULL, *again = NULL;
  cr_assert_eq(sk_json_format_network(g, &text, &e), SK_OK, "an accepted graph does not format: %s", e.msg);
  sk_graph back;
  cr_assert_eq(sk_json_parse_network(text, strlen(text), &back, &e), SK_OK, "its text does not load: %s", e.msg);
  cr_assert_eq(sk_json_format_network(&back, &again, &e), SK_OK, "%s", e.msg);
  cr_assert_str_eq(again, text);
  free(text), free(again);
  sk_graph_free(&back);
}

Test(json, fuzzed_texts_load_or_fail_with_a_message, .timeout = 60) {
  enum { CAP = 1 << 17, ROUNDS = 3000 };
  sk_graph g;
  char *base[2];
  build_mlp(&g), base[0] = format_ok(&g), sk_graph_free(&g);
  build_zoo(&g), base[1] = format_ok(&g), sk_graph_free(&g);
  char *buf = malloc(CAP);
  cr_assert(buf);
  uint64_t s = 0x2545F4914F6CDD1Dull;
  int accepted = 0;
  for (int round = 0; round < ROUNDS; round++) {
    size_t n = strlen(base[round & 1]);
    memcpy(buf, base[round & 1], n);
    for (int m = 1 + (int)(rnd(&s) % 3); m > 0; m--) mutate(buf, &n, CAP, &s);
    sk_error e = {SK_OK, ""};
    sk_result r = sk_json_parse_network(buf, n, &g, &e);
    if (r == SK_OK) {
      accepted++;
      check_accepted(&g);
      sk_graph_free(&g);
    } else {
      cr_assert(r == SK_ERR_INVALID_ARGUMENT, "round %d: %s: %s", round, sk_result_name(r), e.msg);
      cr_assert(e.msg[0] && e.code == r, "round %d: no message", round);
      cr_assert(g.ntensors == 0 && !g.tensors && !g.ops, "round %d: graph not left empty", round);
    }
  }
  cr_expect_gt(accepted, 0, "no mutation was accepted: the fuzzer only tests the syntax checks");
  free(buf), free(base[0]), free(base[1]);
}

/* Fusion ids as Cell.set_comm_fusion takes them: absent is the default (the graph's 0), 0 never
   fuses (SK_GRAPH_FUSION_NEVER), n is n; each is written back as it was read. */
Test(json, fusion_ids_as_mindspore_writes_them) {
  const char *mm2 = "\"name\": \"mm2\", \"type\": \"MatMul\",";
  const char *at = strstr(base_text, mm2);
  cr_assert(at);
  const int ids[3] = {-1, 0, 3}, want[3] = {0, SK_GRAPH_FUSION_NEVER, 3};
  for (int i = 0; i < 3; i++) {
    char text[4096], key[32] = "";
    if (ids[i] >= 0) snprintf(key, sizeof key, " \"fusion\": %d,", ids[i]);
    int n = snprintf(text, sizeof text, "%.*s%s%s%s", (int)(at - base_text), base_text, mm2, key, at + strlen(mm2));
    cr_assert(n > 0 && n < (int)sizeof text);
    sk_graph g;
    parse_ok(text, &g);
    cr_expect_eq(g.ops[2].fusion, want[i], "\"fusion\": %d read as %d", ids[i], g.ops[2].fusion);
    char *out = format_ok(&g);
    char line[32];
    snprintf(line, sizeof line, "\"fusion\": %d", ids[i]);
    cr_expect(ids[i] < 0 ? !strstr(out, "\"fusion\"") : strstr(out, line) != NULL, "written back: %s", out);
    free(out);
    sk_graph_free(&g);
  }
  REFUSED("\"name\": \"relu\", \"type\": \"ReLU\",", "\"name\": \"relu\", \"type\": \"ReLU\", \"fusion\": -1,",
          "operators[1] (\"relu\").fusion: expected an integer in 0..");
}

/* ---- scalar operands and frozen parameters ---------------------------------------------------- */

static int constant(sk_graph *g, const char *name, double value) {
  int id = -1;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_add_const(g, name, SK_F32, value, &id, &e), SK_OK, "%s: %s", name, e.msg);
  return id;
}

/* Mul(x, 0.5) and Sub(1, y) as MindSpore writes them, with strategies holding () for the
   numbers (the constants named as the reader names them, added just before their operator), and
   a frozen parameter (requires_grad false) beside a trained one, which opts out of optimizer
   parallel (parallel_optimizer false). */
static void build_operands(sk_graph *g) {
  static const int64_t xs[2] = {8, 4}, ws[1] = {4};
  static const int s24[2] = {2, 4};
  sk_error e = {SK_OK, ""};
  sk_graph_init(g);
  input(g, "x", SK_F32, 2, xs);
  int mask = param(g, "mask", 1, ws, SK_INIT_UNIFORM, 1);
  param(g, "w", 1, ws, SK_INIT_ONES, 0);
  cr_assert_eq(sk_graph_set_requires_grad(g, mask, false, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_graph_set_parallel_optimizer(g, sk_graph_find(g, "w"), false, &e), SK_OK, "%s", e.msg);
  constant(g, "scale:in1", 0.5);
  sk_graph_op op = op_of(g, "scale", SK_OP_MUL, "x", "scale:in1", NULL);
  strategy(&op, 0, 2, s24);
  add(g, &op);
  op = op_of(g, "masked", SK_OP_MUL, "scale", "mask", NULL);
  add(g, &op);
  constant(g, "flip:in0", 1);
  op = op_of(g, "flip", SK_OP_SUB, "flip:in0", "masked", NULL);
  strategy(&op, 1, 2, s24);
  add(g, &op);
  op = op_of(g, "weighted", SK_OP_MUL, "flip", "w", NULL);
  add(g, &op);
  op = op_of(g, "loss", SK_OP_REDUCE_MEAN, "weighted", NULL, NULL);
  add(g, &op);
  cr_assert_eq(sk_graph_set_loss(g, sk_graph_find(g, "loss"), &e), SK_OK, "%s", e.msg);
}

Test(json, scalar_operands_and_frozen_parameters_round_trip) { round_trip(build_operands); }

Test(json, a_number_among_the_inputs_is_a_constant_written_back_as_the_number) {
  sk_graph g;
  build_operands(&g);
  char *text = format_ok(&g);
  /* the number where it is read, its tuple (), no tensor entry for it; requires_grad only when false */
  cr_expect(strstr(text, "\"inputs\": [\n        \"x\",\n        0.5\n      ],\n      \"shard\": [\n        [\n          2,\n"
                         "          4\n        ],\n        []\n      ]"), "%s", text);
  cr_expect(strstr(text, "\"inputs\": [\n        1.0,\n        \"masked\"\n      ]"), "%s", text);
  cr_expect(!strstr(text, "scale:in1") && !strstr(text, "\"constant\""), "%s", text);
  const char *first = strstr(text, "\"requires_grad\": false");
  cr_expect(first && !strstr(first + 1, "\"requires_grad\""), "one parameter is frozen: %s", text);
  first = strstr(text, "\"parallel_optimizer\": false");
  cr_expect(first && !strstr(first + 1, "\"parallel_optimizer\""), "one parameter opts out: %s", text);
  free(text);
  sk_graph_free(&g);
}

Test(json, hand_written_numbers_take_the_dtype_of_the_tensor_beside_them) {
  static const char text[] =
      "{\"format\":\"shardkit-network\",\"version\":1,\"tensors\":[{\"name\":\"x\",\"role\":\"input\",\"dtype\":\"f64\","
      "\"shape\":[4,2]},{\"name\":\"p\",\"role\":\"parameter\",\"dtype\":\"f32\",\"shape\":[2],\"init\":{\"kind\":\"ones\"},"
      "\"requires_grad\":true}],\"operators\":[{\"name\":\"half\",\"type\":\"Div\",\"inputs\":[\"x\",2]},"
      "{\"name\":\"up\",\"type\":\"Add\",\"inputs\":[-0.25,\"half\"],\"shard\":[[],[4,1]]},"
      "{\"name\":\"loss\",\"type\":\"ReduceSum\",\"inputs\":[\"up\"]}],\"loss\":\"loss\"}";
  sk_graph g;
  parse_ok(text, &g);
  int two = sk_graph_find(&g, "half:in1"), quarter = sk_graph_find(&g, "up:in0");
  cr_assert(two >= 0 && quarter >= 0);
  cr_expect_eq(g.tensors[two].role, SK_TENSOR_CONST);
  cr_expect_eq(g.tensors[two].ndims, 0);
  cr_expect_eq(g.tensors[two].dtype, SK_F64, "x's dtype, as MindSpore converts the number");
  cr_expect(g.tensors[two].value == 2 && g.tensors[quarter].value == -0.25);
  cr_expect_eq(g.ops[1].inputs[0], quarter);
  cr_expect(!g.tensors[sk_graph_find(&g, "p")].frozen, "requires_grad true is the default");
  cr_expect(!g.tensors[sk_graph_find(&g, "p")].no_parallel_optimizer, "parallel_optimizer true is the default");
  cr_expect(sk_graph_trainable(&g, sk_graph_find(&g, "p")) && !sk_graph_trainable(&g, two));
  sk_graph_free(&g);
}

Test(json, numbers_and_requires_grad_refused) {
  REFUSED("[\"relu\", \"w2\"]", "[\"relu\", true]", "line 13: operators[2] (\"mm2\").inputs[1]: expected a tensor name or a number");
  REFUSED("\"inputs\": [\"mm1\"]}", "\"inputs\": [3]}", "line 12: operators[1] (\"relu\").inputs[0]: a number needs a tensor input");
  /* a rank-0 operand cannot stand where MatMul needs a matrix: the rule says so */
  REFUSED("[\"relu\", \"w2\"]", "[\"relu\", 2]", "line 13: operators[2] (\"mm2\"): graph: operator 'mm2'");
  REFUSED("\"shape\": [32, 784]}", "\"shape\": [32, 784], \"requires_grad\": false}",
          "line 5: tensors[0] (\"x\").requires_grad: an input takes no gradient");
  REFUSED("\"init\": {\"kind\": \"normal\"}", "\"init\": {\"kind\": \"normal\"}, \"requires_grad\": 0",
          "line 8: tensors[2] (\"w2\").requires_grad: expected true or false");
  REFUSED("\"shape\": [32, 784]}", "\"shape\": [32, 784], \"parallel_optimizer\": false}",
          "line 5: tensors[0] (\"x\").parallel_optimizer: an input has no optimizer state");
  REFUSED("\"init\": {\"kind\": \"normal\"}", "\"init\": {\"kind\": \"normal\"}, \"parallel_optimizer\": \"no\"",
          "line 8: tensors[2] (\"w2\").parallel_optimizer: expected true or false");
}

/* A constant two operators read is written at each: it reads back as two, of the same value. */
Test(json, a_shared_constant_reads_back_once_per_reader) {
  static const int64_t xs[1] = {4};
  sk_graph g, back;
  sk_graph_init(&g);
  input(&g, "x", SK_F32, 1, xs);
  constant(&g, "two", 2);
  sk_graph_op op = op_of(&g, "a", SK_OP_MUL, "x", "two", NULL);
  add(&g, &op);
  op = op_of(&g, "b", SK_OP_ADD, "a", "two", NULL);
  add(&g, &op);
  char *text = format_ok(&g);
  parse_ok(text, &back);
  cr_expect_eq(back.ntensors, g.ntensors + 1);
  int a1 = sk_graph_find(&back, "a:in1"), b1 = sk_graph_find(&back, "b:in1");
  cr_assert(a1 >= 0 && b1 >= 0 && sk_graph_find(&back, "two") < 0);
  cr_expect(back.tensors[a1].value == 2 && back.tensors[b1].value == 2);
  char *again = format_ok(&back);
  cr_expect_str_eq(again, text);
  free(text), free(again);
  sk_graph_free(&g), sk_graph_free(&back);
}
