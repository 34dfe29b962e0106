/* sk_graph.h through its C API: the shapes and dtypes inferred for a representative operator of
   each family and the names of their outputs, every refusal with its message and the graph left
   exactly as it was (then still usable), and the initialisers: one seeded stream, MindSpore's
   fan_in / fan_out, exact constants, bounds and spreads of the random kinds. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sk_graph.h"

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

static int input(sk_graph *g, const char *name, sk_dtype dt, int nd, const int64_t *shape) {
  int id = -1;
  OK(sk_graph_add_input(g, name, dt, nd, shape, &id, E));
  return id;
}

static int param(sk_graph *g, const char *name, int nd, const int64_t *shape, sk_init_kind kind, double value) {
  int id = -1;
  sk_init init = {kind, value};
  OK(sk_graph_add_param(g, name, SK_F64, nd, shape, init, &id, E));
  return id;
}

/* A zeroed operator of kind k reading n tensors. */
static sk_graph_op mkop(const char *name, sk_op_kind k, int n, int a, int b, int c) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, name);
  op.desc.kind = k, op.ninputs = n;
  op.inputs[0] = a, op.inputs[1] = b, op.inputs[2] = c;
  return op;
}

/* Adds op and returns its first output's tensor id. */
static int add(sk_graph *g, const sk_graph_op *op) {
  int idx = -1;
  OK(sk_graph_add_op(g, op, &idx, E));
  cr_assert_eq(idx, g->nops - 1);
  return g->ops[idx].outputs[0];
}

static void assert_shape(const sk_graph *g, int t, sk_dtype dt, int nd, const int64_t *shape) {
  const sk_graph_tensor *x = &g->tensors[t];
  cr_assert_eq(x->dtype, dt, "'%s': dtype %s, want %s", x->name, sk_dtype_name(x->dtype), sk_dtype_name(dt));
  cr_assert_eq(x->ndims, nd, "'%s': %d dims, want %d", x->name, x->ndims, nd);
  for (int d = 0; d < nd; d++)
    cr_assert_eq(x->shape[d], shape[d], "'%s' dim %d: %lld, want %lld", x->name, d, (long long)x->shape[d],
                 (long long)shape[d]);
}

/* The whole visible state of a graph, to show that a refused call changed nothing. */
typedef struct snap {
  int ntensors, nops, loss, logits, labels;
  sk_graph_tensor *tensors;
  sk_graph_op *ops;
} snap;

static snap take(const sk_graph *g) {
  snap s = {g->ntensors, g->nops, g->loss, g->logits, g->labels, NULL, NULL};
  s.tensors = malloc(sizeof *s.tensors * (size_t)(g->ntensors + 1));
  s.ops = malloc(sizeof *s.ops * (size_t)(g->nops + 1));
  cr_assert(s.tensors && s.ops);
  if (g->ntensors) memcpy(s.tensors, g->tensors, sizeof *s.tensors * (size_t)g->ntensors);
  if (g->nops) memcpy(s.ops, g->ops, sizeof *s.ops * (size_t)g->nops);
  return s;
}

static void same(const sk_graph *g, snap *s, const char *what) {
  cr_assert_eq(g->ntensors, s->ntensors, "%s: ntensors %d, was %d", what, g->ntensors, s->ntensors);
  cr_assert_eq(g->nops, s->nops, "%s: nops %d, was %d", what, g->nops, s->nops);
  cr_assert(g->loss == s->loss && g->logits == s->logits && g->labels == s->labels, "%s: loss/eval changed", what);
  cr_assert(!g->ntensors || !memcmp(g->tensors, s->tensors, sizeof *s->tensors * (size_t)g->ntensors),
            "%s: a tensor changed", what);
  cr_assert(!g->nops || !memcmp(g->ops, s->ops, sizeof *s->ops * (size_t)g->nops), "%s: an operator changed", what);
  free(s->tensors), free(s->ops);
}

/* ---- shape inference ---------------------------------------------------------------------- */

Test(graph, matmul_family_shapes) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t sx[2] = {4, 3}, sw[2] = {3, 5}, swt[2] = {5, 3}, sxt[2] = {3, 4}, sb[1] = {5};
  int x = input(&g, "x", SK_F64, 2, sx), w = param(&g, "w", 2, sw, SK_INIT_ONES, 0);
  int wt = param(&g, "wt", 2, swt, SK_INIT_ONES, 0), xt = input(&g, "xt", SK_F64, 2, sxt);
  int b = param(&g, "b", 1, sb, SK_INIT_ZEROS, 0);
  int64_t want[2] = {4, 5};
  sk_graph_op op = mkop("mm", SK_OP_MATMUL, 2, x, w, 0);
  assert_shape(&g, add(&g, &op), SK_F64, 2, want);
  op = mkop("mm_tb", SK_OP_MATMUL, 2, x, wt, 0), op.desc.transpose_b = true;
  assert_shape(&g, add(&g, &op), SK_F64, 2, want);
  op = mkop("mm_ta", SK_OP_MATMUL, 2, xt, w, 0), op.desc.transpose_a = true;
  assert_shape(&g, add(&g, &op), SK_F64, 2, want);
  op = mkop("dense", SK_OP_DENSE, 3, x, wt, b); /* w [n, k] and a bias [n] */
  assert_shape(&g, add(&g, &op), SK_F64, 2, want);
  op = mkop("dense_nb", SK_OP_DENSE, 2, x, wt, 0);
  assert_shape(&g, add(&g, &op), SK_F64, 2, want);
  /* batch dims broadcast from the right: [2,1] against [3] gives [2,3] */
  int64_t sa[4] = {2, 1, 3, 4}, sbm[3] = {3, 4, 6}, wbm[4] = {2, 3, 3, 6};
  int a = input(&g, "a", SK_F32, 4, sa), bm = input(&g, "bm", SK_F32, 3, sbm);
  op = mkop("bmm", SK_OP_BATCH_MATMUL, 2, a, bm, 0);
  assert_shape(&g, add(&g, &op), SK_F32, 4, wbm);
  cr_assert_eq(g.tensors[g.ops[g.nops - 1].outputs[0]].producer, g.nops - 1);
  sk_graph_free(&g);
}

Test(graph, elementwise_layout_and_reduction_shapes) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t s1[3] = {2, 1, 3}, s2[2] = {4, 1}, s3[3] = {2, 3, 4};
  int a = input(&g, "a", SK_F32, 3, s1), b = input(&g, "b", SK_F32, 2, s2), x = input(&g, "x", SK_F32, 3, s3);
  int64_t w_add[3] = {2, 4, 3}, w_rs[2] = {6, 4}, w_tr[3] = {4, 2, 3}, w_keep[3] = {2, 1, 4}, w_drop[2] = {2, 4};
  sk_graph_op op = mkop("add", SK_OP_ADD, 2, a, b, 0);
  assert_shape(&g, add(&g, &op), SK_F32, 3, w_add);
  op = mkop("rs", SK_OP_RESHAPE, 1, x, 0, 0);
  op.desc.noutputs = 1, op.desc.out_ndims[0] = 2, op.desc.out_shape[0][0] = 6, op.desc.out_shape[0][1] = 4;
  assert_shape(&g, add(&g, &op), SK_F32, 2, w_rs);
  op = mkop("tr", SK_OP_TRANSPOSE, 1, x, 0, 0);
  op.desc.perm[0] = 2, op.desc.perm[1] = 0, op.desc.perm[2] = 1;
  assert_shape(&g, add(&g, &op), SK_F32, 3, w_tr);
  op = mkop("sum_keep", SK_OP_REDUCE_SUM, 1, x, 0, 0);
  op.desc.naxis = 1, op.desc.axis[0] = 1, op.desc.keep_dims = true;
  assert_shape(&g, add(&g, &op), SK_F32, 3, w_keep);
  op = mkop("mean_drop", SK_OP_REDUCE_MEAN, 1, x, 0, 0);
  op.desc.naxis = 1, op.desc.axis[0] = -2;
  assert_shape(&g, add(&g, &op), SK_F32, 2, w_drop);
  op = mkop("max_all", SK_OP_REDUCE_MAX, 1, x, 0, 0); /* no axis: every dim, a scalar */
  int m = add(&g, &op);
  assert_shape(&g, m, SK_F32, 0, NULL);
  cr_assert_eq(sk_graph_numel(&g, m), 1);
  op = mkop("max_all_keep", SK_OP_REDUCE_MAX, 1, x, 0, 0), op.desc.keep_dims = true;
  int64_t ones[3] = {1, 1, 1};
  assert_shape(&g, add(&g, &op), SK_F32, 3, ones);
  sk_graph_free(&g);
}

Test(graph, lookup_norm_dropout_loss_shapes_and_names) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t si[1] = {4}, st[2] = {10, 3}, sgi[2] = {2, 5}, sx[3] = {2, 3, 4}, sgb[2] = {3, 4}, sz[2] = {4, 6};
  int idx = input(&g, "idx", SK_I32, 1, si), tab = param(&g, "table", 2, st, SK_INIT_NORMAL, 0);
  int gi = input(&g, "gi", SK_I64, 2, sgi), x = input(&g, "x", SK_F32, 3, sx);
  int gam = param(&g, "gamma", 2, sgb, SK_INIT_ONES, 0), bet = param(&g, "beta", 2, sgb, SK_INIT_ZEROS, 0);
  sk_graph_op op = mkop("oh", SK_OP_ONE_HOT, 1, idx, 0, 0);
  op.desc.depth = 6, op.out_dtype[0] = SK_F64;
  int64_t w_oh[2] = {4, 6}, w_g[3] = {2, 5, 3}, w_st[3] = {2, 1, 1}, w_one[1] = {1};
  assert_shape(&g, add(&g, &op), SK_F64, 2, w_oh);
  op = mkop("gather", SK_OP_GATHER, 2, tab, gi, 0);
  assert_shape(&g, add(&g, &op), SK_F64, 3, w_g);
  op = mkop("ln", SK_OP_LAYER_NORM, 3, x, gam, bet);
  int y = add(&g, &op);
  const sk_graph_op *ln = &g.ops[g.nops - 1];
  cr_assert_eq(ln->noutputs, 3);
  assert_shape(&g, y, SK_F32, 3, sx);
  assert_shape(&g, ln->outputs[1], SK_F32, 3, w_st);
  assert_shape(&g, ln->outputs[2], SK_F32, 3, w_st);
  cr_assert_str_eq(g.tensors[ln->outputs[0]].name, "ln");
  cr_assert_str_eq(g.tensors[ln->outputs[1]].name, "ln:1");
  cr_assert_str_eq(g.tensors[ln->outputs[2]].name, "ln:2");
  cr_assert_eq(sk_graph_find(&g, "ln:2"), ln->outputs[2]);
  cr_assert_eq(g.tensors[ln->outputs[2]].output_index, 2);
  cr_assert_eq(g.tensors[ln->outputs[2]].role, SK_TENSOR_VALUE);
  op = mkop("drop", SK_OP_DROPOUT, 1, y, 0, 0), op.keep_prob = 0.8;
  add(&g, &op);
  const sk_graph_op *dr = &g.ops[g.nops - 1];
  cr_assert_eq(dr->noutputs, 2);
  assert_shape(&g, dr->outputs[0], SK_F32, 3, sx);
  assert_shape(&g, dr->outputs[1], SK_U8, 3, sx); /* the mask */
  cr_assert_str_eq(g.tensors[dr->outputs[1]].name, "drop:1");
  int z = input(&g, "z", SK_F32, 2, sz), lab = input(&g, "lab", SK_I32, 1, si);
  op = mkop("ce", SK_OP_SOFTMAX_CE, 2, z, lab, 0);
  int loss = add(&g, &op);
  assert_shape(&g, loss, SK_F32, 1, w_one);
  OK(sk_graph_set_loss(&g, loss, E));
  OK(sk_graph_set_eval(&g, z, lab, E));
  OK(sk_graph_check(&g, E));
  cr_assert_eq(g.loss, loss);
  sk_graph_free(&g);
}

/* ---- refusals ------------------------------------------------------------------------------ */

/* A small valid graph every refusal test starts from. */
static void base_graph(sk_graph *g, int *x, int *w, int *h) {
  int64_t sx[2] = {4, 3}, sw[2] = {3, 5};
  sk_graph_init(g);
  *x = input(g, "x", SK_F32, 2, sx);
  *w = param(g, "w", 2, sw, SK_INIT_HE_UNIFORM, 0);
  sk_graph_op op = mkop("h", SK_OP_MATMUL, 2, *x, *w, 0);
  *h = add(g, &op);
}

/* After a refusal the graph still takes an operator. */
static void still_usable(sk_graph *g, int h) {
  int n = g->ntensors;
  sk_graph_op op = mkop("still_usable", SK_OP_RELU, 1, h, 0, 0);
  add(g, &op);
  cr_assert_eq(g->ntensors, n + 1);
}

Test(graph, duplicate_names_refused_graph_unchanged) {
  sk_graph g;
  int x, w, h;
  base_graph(&g, &x, &w, &h);
  int64_t s[1] = {3};
  snap s0 = take(&g);
  BAD("'x': a tensor of that name exists", sk_graph_add_input(&g, "x", SK_F32, 1, s, NULL, E));
  BAD("'w': a tensor of that name exists", sk_graph_add_param(&g, "w", SK_F32, 1, s, (sk_init){0, 0}, NULL, E));
  sk_graph_op op = mkop("h", SK_OP_RELU, 1, x, 0, 0); /* the name of an operator (and its output) */
  BAD("operator 'h': a tensor of that name exists", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("x", SK_OP_RELU, 1, x, 0, 0); /* the name of an input */
  BAD("a tensor of that name exists", sk_graph_add_op(&g, &op, NULL, E));
  same(&g, &s0, "duplicate names");
  /* a second output whose name "<op>:1" is taken: refused after shape inference ran */
  OK(sk_graph_add_input(&g, "d:1", SK_F32, 1, s, NULL, E));
  snap s1 = take(&g);
  op = mkop("d", SK_OP_DROPOUT, 1, x, 0, 0);
  BAD("'d:1': a tensor of that name exists", sk_graph_add_op(&g, &op, NULL, E));
  same(&g, &s1, "a taken output name");
  cr_assert_eq(sk_graph_find(&g, "d"), -1);
  still_usable(&g, h);
  sk_graph_free(&g);
}

Test(graph, bad_ids_arity_shapes_refused_graph_unchanged) {
  sk_graph g;
  int x, w, h;
  base_graph(&g, &x, &w, &h);
  snap s0 = take(&g);
  sk_graph_op op = mkop("r", SK_OP_RELU, 1, 99, 0, 0);
  BAD("operator 'r' input 0: no tensor 99", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("a", SK_OP_ADD, 2, x, -1, 0);
  BAD("operator 'a' input 1: no tensor -1", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("m1", SK_OP_MATMUL, 1, x, 0, 0);
  BAD("operator 'm1' (MatMul) reads 1 tensors (2 expected)", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("d4", SK_OP_DENSE, 4, x, w, h), op.inputs[3] = x;
  BAD("operator 'd4' (Dense) reads 4 tensors (2..3 expected)", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("", SK_OP_RELU, 1, x, 0, 0);
  BAD("operator has no name", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("k", SK_OP_RELU, 1, x, 0, 0), op.desc.kind = SK_OP_KIND_COUNT;
  BAD("operator 'k' has an unknown kind", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("kp", SK_OP_DROPOUT, 1, x, 0, 0), op.keep_prob = 1.5;
  BAD("operator 'kp': keep_prob", sk_graph_add_op(&g, &op, NULL, E));
  int64_t zero[2] = {4, 0}, big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, huge[2] = {1 << 30, 1 << 20};
  BAD("tensor 'z' dim 1 is 0 (must be >= 1)", sk_graph_add_input(&g, "z", SK_F32, 2, zero, NULL, E));
  BAD("tensor 'n' has 9 dims", sk_graph_add_input(&g, "n", SK_F32, 9, big, NULL, E));
  BAD("tensor 'n' has -1 dims", sk_graph_add_input(&g, "n", SK_F32, -1, big, NULL, E));
  BAD("tensor 'u' has no shape", sk_graph_add_input(&g, "u", SK_F32, 2, NULL, NULL, E));
  BAD("more than 2^40 elements", sk_graph_add_input(&g, "huge", SK_F32, 2, huge, NULL, E));
  BAD("tensor 'q' has a bad dtype", sk_graph_add_input(&g, "q", SK_DTYPE_COUNT, 2, big, NULL, E));
  BAD("parameter 'p' must be a float tensor, not i32",
      sk_graph_add_param(&g, "p", SK_I32, 1, big, (sk_init){SK_INIT_ONES, 0}, NULL, E));
  BAD("parameter 'p' has an unknown initialiser",
      sk_graph_add_param(&g, "p", SK_F32, 1, big, (sk_init){SK_INIT_KIND_COUNT, 0}, NULL, E));
  BAD("NULL graph", sk_graph_add_input(NULL, "n", SK_F32, 1, big, NULL, E));
  BAD("NULL graph or operator", sk_graph_add_op(&g, NULL, NULL, E));
  same(&g, &s0, "bad ids, arity, shapes");
  still_usable(&g, h);
  sk_graph_free(&g);
}

Test(graph, shape_rule_refusals_name_the_operator) {
  sk_graph g;
  int x, w, h;
  base_graph(&g, &x, &w, &h);
  int64_t s45[2] = {4, 5}, s7[1] = {7};
  int v = input(&g, "v", SK_F32, 2, s45), b7 = input(&g, "b7", SK_F32, 1, s7);
  snap s0 = take(&g);
  sk_graph_op op = mkop("bad_mm", SK_OP_MATMUL, 2, x, v, 0); /* [4,3] x [4,5]: 3 != 4 */
  BAD("graph: operator 'bad_mm': MatMul: contraction dims differ", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("bad_add", SK_OP_ADD, 2, x, b7, 0);
  BAD("graph: operator 'bad_add': Add: input 1 dim 0 (7) does not broadcast", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("bad_rs", SK_OP_RESHAPE, 1, x, 0, 0);
  op.desc.noutputs = 1, op.desc.out_ndims[0] = 1, op.desc.out_shape[0][0] = 13;
  BAD("graph: operator 'bad_rs': Reshape: the input has 12 elements", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("bad_tr", SK_OP_TRANSPOSE, 1, x, 0, 0), op.desc.perm[0] = 1, op.desc.perm[1] = 1;
  BAD("graph: operator 'bad_tr': Transpose: perm is not a permutation", sk_graph_add_op(&g, &op, NULL, E));
  op = mkop("bad_axis", SK_OP_REDUCE_SUM, 1, x, 0, 0), op.desc.naxis = 1, op.desc.axis[0] = 2;
  BAD("graph: operator 'bad_axis': ReduceSum: axis 2 is out of range", sk_graph_add_op(&g, &op, NULL, E));
  same(&g, &s0, "shape rules");
  still_usable(&g, h);
  sk_graph_free(&g);
}

Test(graph, loss_and_eval_refusals) {
  sk_graph g;
  int x, w, h;
  base_graph(&g, &x, &w, &h);
  int64_t one[1] = {1}, s4[1] = {4}, s5[1] = {5};
  int i1 = input(&g, "i1", SK_I32, 1, one), lab = input(&g, "lab", SK_I32, 1, s4);
  int lab5 = input(&g, "lab5", SK_I32, 1, s5), flab = input(&g, "flab", SK_F32, 1, s4);
  sk_graph_op op = mkop("labv", SK_OP_CAST, 1, lab, 0, 0);
  op.out_dtype[0] = SK_I32;
  int hv = add(&g, &op); /* integer labels of the right shape, but an operator's output */
  snap s0 = take(&g);
  BAD("loss 'h' must be a one-element float tensor", sk_graph_set_loss(&g, h, E));
  BAD("loss 'i1' must be a one-element float tensor", sk_graph_set_loss(&g, i1, E));
  BAD("loss: no tensor 99", sk_graph_set_loss(&g, 99, E));
  BAD("graph: no loss is set", sk_graph_check(&g, E));
  BAD("'h' must be float logits [..., C] and 'lab5'", sk_graph_set_eval(&g, h, lab5, E));
  BAD("'h' must be float logits [..., C] and 'flab'", sk_graph_set_eval(&g, h, flab, E));
  BAD("'h' must be float logits [..., C] and 'labv'", sk_graph_set_eval(&g, h, hv, E)); /* not an input */
  BAD("'i1' must be float logits", sk_graph_set_eval(&g, i1, lab, E));
  BAD("evaluation: no tensor 99 or", sk_graph_set_eval(&g, 99, lab, E));
  same(&g, &s0, "loss and eval");
  OK(sk_graph_set_eval(&g, h, lab, E));
  cr_assert(g.logits == h && g.labels == lab);
  sk_graph_free(&g);
}

Test(graph, name_length_limit) {
  sk_graph g;
  int x, w, h;
  base_graph(&g, &x, &w, &h);
  char n63[64], n64[65];
  memset(n63, 'a', 63), n63[63] = 0;
  memset(n64, 'b', 64), n64[64] = 0;
  int64_t s[1] = {2};
  snap s0 = take(&g);
  BAD("is longer than 63 characters", sk_graph_add_input(&g, n64, SK_F32, 1, s, NULL, E));
  BAD("has a control character", sk_graph_add_input(&g, "a\tb", SK_F32, 1, s, NULL, E));
  BAD("input has no name", sk_graph_add_input(&g, NULL, SK_F32, 1, s, NULL, E));
  /* an operator of 62 characters fits, but its output "<op>:1" would need 64 */
  sk_graph_op op = mkop("", SK_OP_DROPOUT, 1, h, 0, 0);
  memset(op.name, 'c', 62), op.name[62] = 0;
  BAD("output name too long", sk_graph_add_op(&g, &op, NULL, E));
  same(&g, &s0, "long names");
  int id = -1;
  OK(sk_graph_add_input(&g, n63, SK_F32, 1, s, &id, E));
  cr_assert_eq(sk_graph_find(&g, n63), id);
  op = mkop("", SK_OP_RELU, 1, h, 0, 0);
  memset(op.name, 'r', 63), op.name[63] = 0; /* one output: its name is the operator's */
  add(&g, &op);
  sk_graph_free(&g);
}

/* ---- initialisers ------------------------------------------------------------------------- */

/* Draws g's parameters into fresh f64 buffers (values[t] for parameters, NULL elsewhere). */
static double **draw(const sk_graph *g, uint64_t seed) {
  double **v = calloc((size_t)g->ntensors, sizeof *v);
  cr_assert(v);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM) cr_assert((v[t] = malloc(sizeof(double) * (size_t)sk_graph_numel(g, t))));
  OK(sk_graph_init_params(g, seed, SK_F64, (void *const *)v, E));
  return v;
}

static void drop(const sk_graph *g, double **v) {
  for (int t = 0; t < g->ntensors; t++) free(v[t]);
  free(v);
}

static double max_abs(const double *v, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fabs(v[i]) > m ? fabs(v[i]) : m;
  return m;
}

Test(graph, init_seeded_stream_is_deterministic) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t s1[2] = {10, 7}, s2[1] = {5};
  int p = param(&g, "p", 2, s1, SK_INIT_UNIFORM, 0.5);
  input(&g, "between", SK_F32, 1, s2); /* inputs draw nothing */
  int q = param(&g, "q", 1, s2, SK_INIT_UNIFORM, 0.5);
  double **a = draw(&g, 42), **b = draw(&g, 42), **c = draw(&g, 43), **z = draw(&g, 0), **z2 = draw(&g, 0);
  cr_assert(!memcmp(a[p], b[p], 70 * sizeof(double)) && !memcmp(a[q], b[q], 5 * sizeof(double)), "seed 42 twice differs");
  cr_assert(!memcmp(z[p], z2[p], 70 * sizeof(double)), "seed 0 twice differs");
  int differ = 0;
  for (int i = 0; i < 70; i++) differ += a[p][i] != c[p][i];
  cr_assert_geq(differ, 69, "seeds 42 and 43 share %d of 70 values", 70 - differ);
  cr_assert(max_abs(z[p], 70) > 0.1, "seed 0 stuck at zero"); /* xorshift from a zero state stays zero */
  /* one stream, row-major, parameters in order: the same as one parameter of 75 elements */
  sk_graph h;
  sk_graph_init(&h);
  int64_t s75[1] = {75};
  int r = param(&h, "r", 1, s75, SK_INIT_UNIFORM, 0.5);
  double **d = draw(&h, 42);
  cr_assert(!memcmp(d[r], a[p], 70 * sizeof(double)) && !memcmp(d[r] + 70, a[q], 5 * sizeof(double)),
            "parameters do not share one stream in order");
  /* f32 buffers get the f64 draws rounded */
  float fp[70], fq[5];
  void *fv[3] = {fp, NULL, fq};
  OK(sk_graph_init_params(&g, 42, SK_F32, fv, E));
  for (int i = 0; i < 70; i++) cr_assert_eq(fp[i], (float)a[p][i]);
  drop(&g, a), drop(&g, b), drop(&g, c), drop(&g, z), drop(&g, z2), drop(&h, d);
  sk_graph_free(&g), sk_graph_free(&h);
}

/* fan_in = shape[1] * receptive field: a [64, 32, 3, 3] kernel has fan_in 288, fan_out 576. */
Test(graph, init_fan_rules_and_bounds) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t sk[4] = {64, 32, 3, 3}, s1[1] = {20000}, s2[2] = {300, 100};
  int he = param(&g, "he", 4, sk, SK_INIT_HE_UNIFORM, 0);
  int hes = param(&g, "he_slope", 4, sk, SK_INIT_HE_UNIFORM, 0.5);
  int he1 = param(&g, "he_1d", 1, s1, SK_INIT_HE_UNIFORM, 0);
  int xa = param(&g, "xavier", 4, sk, SK_INIT_XAVIER_UNIFORM, 0);
  int xg = param(&g, "xavier_gain", 2, s2, SK_INIT_XAVIER_UNIFORM, 2.0);
  int un = param(&g, "uniform", 2, s2, SK_INIT_UNIFORM, 0);
  struct { int t; double bound; const char *what; } c[6] = {
      {he, sqrt(6.0 / 288), "HeUniform"},
      {hes, sqrt(6.0 / (1.25 * 288)), "HeUniform slope 0.5"},
      {he1, sqrt(6.0 / 20000), "HeUniform 1-D"},
      {xa, sqrt(6.0 / (288 + 576)), "XavierUniform"},
      {xg, 2.0 * sqrt(6.0 / (100 + 300)), "XavierUniform gain 2"},
      {un, 0.07, "Uniform default"}};
  double **v = draw(&g, 7);
  for (int k = 0; k < 6; k++) {
    int64_t n = sk_graph_numel(&g, c[k].t);
    double m = max_abs(v[c[k].t], n), mean = 0;
    for (int64_t i = 0; i < n; i++) mean += v[c[k].t][i];
    mean /= (double)n;
    /* n >= 18432 uniform draws: the largest |v| lies within ~1e-4 of the bound */
    cr_assert(m <= c[k].bound, "%s: %.9g exceeds the bound %.9g", c[k].what, m, c[k].bound);
    cr_assert(m >= c[k].bound * 0.999, "%s: max %.9g, bound %.9g", c[k].what, m, c[k].bound);
    cr_assert(fabs(mean) < 0.02 * c[k].bound, "%s: mean %.3g", c[k].what, mean);
  }
  drop(&g, v);
  sk_graph_free(&g);
}

Test(graph, init_constants_exact_and_normal_spread) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t s[2] = {3, 4}, sn[1] = {100000};
  int z = param(&g, "z", 2, s, SK_INIT_ZEROS, 5), o = param(&g, "o", 2, s, SK_INIT_ONES, 5);
  int c = param(&g, "c", 2, s, SK_INIT_CONSTANT, 0.3), c0 = param(&g, "c0", 2, s, SK_INIT_CONSTANT, 0);
  int nm = param(&g, "n", 1, sn, SK_INIT_NORMAL, 0.5), nd = param(&g, "nd", 1, sn, SK_INIT_NORMAL, 0);
  double **v = draw(&g, 3);
  for (int i = 0; i < 12; i++) {
    cr_assert(v[z][i] == 0 && v[o][i] == 1 && v[c0][i] == 0, "zeros/ones/constant 0 at %d", i);
    cr_assert(v[c][i] == 0.3, "constant: %.17g", v[c][i]);
  }
  double sig[2] = {0.5, 0.01};
  int ts[2] = {nm, nd};
  for (int k = 0; k < 2; k++) {
    double s1 = 0, s2 = 0;
    for (int i = 0; i < 100000; i++) s1 += v[ts[k]][i], s2 += v[ts[k]][i] * v[ts[k]][i];
    double mean = s1 / 1e5, sd = sqrt(s2 / 1e5 - mean * mean);
    /* the std of a 100k sample is within 0.3% of sigma (3 standard errors); 2% catches a wrong scale */
    cr_assert(fabs(sd - sig[k]) < 0.02 * sig[k], "normal sigma %g: sample std %.6g", sig[k], sd);
    cr_assert(fabs(mean) < 0.02 * sig[k], "normal sigma %g: mean %.3g", sig[k], mean);
  }
  drop(&g, v);
  sk_graph_free(&g);
}

Test(graph, init_refusals_and_names) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t s[1] = {4};
  param(&g, "p", 1, s, SK_INIT_ONES, 0);
  double buf[4];
  void *vals[1] = {buf}, *none[1] = {NULL};
  BAD("dtype must be f32 or f64, not f16", sk_graph_init_params(&g, 1, SK_F16, vals, E));
  BAD("no buffer for parameter 'p'", sk_graph_init_params(&g, 1, SK_F64, none, E));
  BAD("NULL graph or values", sk_graph_init_params(&g, 1, SK_F64, NULL, E));
  sk_init_kind k;
  cr_assert(sk_init_kind_from_name("he_uniform", &k) && k == SK_INIT_HE_UNIFORM);
  cr_assert(!sk_init_kind_from_name("HeUniform", &k));
  cr_assert_str_eq(sk_init_kind_name(SK_INIT_XAVIER_UNIFORM), "xavier_uniform");
  cr_assert_str_eq(sk_tensor_role_name(SK_TENSOR_PARAM), "parameter");
  sk_graph_free(&g);
}

/* The stored operator carries its inputs' shapes in desc (as the struct promises) and keeps
   its strategy, which shape inference on one device ignores; sk_graph_op_desc then plans it. */
Test(graph, stored_desc_has_shapes_and_strategy) {
  sk_graph g;
  sk_graph_init(&g);
  int64_t sx[2] = {16, 8}, sw[2] = {8, 4}, si[1] = {16};
  int x = input(&g, "x", SK_F32, 2, sx), w = param(&g, "w", 2, sw, SK_INIT_ONES, 0);
  int idx = input(&g, "idx", SK_I32, 1, si);
  sk_graph_op op = mkop("mm", SK_OP_MATMUL, 2, x, w, 0);
  op.desc.has_strategy = true; /* MatMul().shard(((2, 4), (4, 1))) on 8 devices */
  op.desc.strategy[0][0] = 2, op.desc.strategy[0][1] = 4, op.desc.strategy[1][0] = 4, op.desc.strategy[1][1] = 1;
  int64_t want[2] = {16, 4};
  assert_shape(&g, add(&g, &op), SK_F32, 2, want);
  const sk_op_desc *d = &g.ops[0].desc;
  cr_assert(d->has_strategy && d->strategy[0][1] == 4, "the strategy was dropped");
  cr_assert_eq(d->ninputs, 2);
  cr_assert(d->ndims[0] == 2 && d->shape[0][0] == 16 && d->shape[0][1] == 8, "x's shape not in desc");
  cr_assert(d->ndims[1] == 2 && d->shape[1][0] == 8 && d->shape[1][1] == 4, "w's shape not in desc");
  sk_op_desc full;
  sk_op_plan p;
  OK(sk_graph_op_desc(&g, 0, &full, E));
  OK(sk_op_plan_make(&full, 8, &p, E));
  cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE, "a cut contraction dim is summed");
  op = mkop("oh", SK_OP_ONE_HOT, 1, idx, 0, 0), op.desc.depth = 10;
  add(&g, &op);
  OK(sk_graph_op_desc(&g, 1, &full, E));
  cr_assert(full.ninputs == 3 && full.ndims[0] == 1 && full.ndims[1] == 0 && full.ndims[2] == 0);
  OK(sk_op_plan_make(&full, 4, &p, E));
  BAD("graph: no operator 2", sk_graph_op_desc(&g, 2, &full, E));
  sk_graph_free(&g);
}
