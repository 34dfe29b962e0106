/* sk_ops.h: every operator kind's sharding rule against values derived by hand from MindSpore's
   rules (docs/operators.md), most of them re-deriving the concrete cases of MindSpore's own
   operator unit tests. Expectations are written in MindSpore's form: the device matrix as a list,
   tensor maps counted from the right ("(1,-1)", a 1-tuple as "(0,)"), slice shapes, and a
   collective or Mirror as the rank list of a given rank's group.

   Where MindSpore's versions differ, the newest source's behaviour is encoded and the comment
   says so. Kinds not implemented yet fail here until their rules land. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_ops.h"

/* ---- building a desc from compact text ------------------------------------------------------ */

/* Parses a list of bracketed integer tuples, "[16,32],[32]" or "(2,4),()", into rows; returns the
   row count. Each row's length goes to len[]. */
static int parse_tuples(const char *s, int64_t rows[][SK_MAX_DIMS], int *len, int maxrows) {
  int n = 0;
  while (s && *s) {
    while (*s == ' ' || *s == ',') s++;
    if (!*s) break;
    cr_assert(*s == '[' || *s == '(', "bad tuple text at \"%s\"", s);
    cr_assert(n < maxrows, "too many tuples");
    s++;
    len[n] = 0;
    while (*s && *s != ']' && *s != ')') {
      char *end;
      long long v = strtoll(s, &end, 10);
      cr_assert(end != s, "bad number at \"%s\"", s);
      cr_assert(len[n] < SK_MAX_DIMS);
      rows[n][len[n]++] = v;
      s = end;
      while (*s == ' ' || *s == ',') s++;
    }
    cr_assert(*s, "unterminated tuple");
    s++;
    n++;
  }
  return n;
}

/* op(kind, "[16,32],[32,64]", "(2,4),(4,1)"): the inputs' shapes and the strategy (NULL: none).
   A strategy with another tuple count than inputs sets nstrategies, a tuple whose length is not
   its input's rank sets strategy_len[i], so that malformed strategies are written as MindSpore
   users write them. "[]" is a scalar input (OneHot's on/off values), "()" its empty tuple. */
static sk_op_desc op(sk_op_kind kind, const char *shapes, const char *strategy) {
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = kind;
  int64_t rows[SK_OP_MAX_INPUTS + 2][SK_MAX_DIMS];
  int len[SK_OP_MAX_INPUTS + 2];
  d.ninputs = parse_tuples(shapes, rows, len, SK_OP_MAX_INPUTS);
  for (int i = 0; i < d.ninputs; i++) {
    d.ndims[i] = len[i];
    for (int j = 0; j < len[i]; j++) d.shape[i][j] = rows[i][j];
  }
  if (strategy) {
    d.has_strategy = true;
    int n = parse_tuples(strategy, rows, len, SK_OP_MAX_INPUTS + 2);
    if (n != d.ninputs) d.nstrategies = n;
    for (int i = 0; i < n && i < SK_OP_MAX_INPUTS; i++) {
      if (i >= d.ninputs || len[i] != d.ndims[i]) d.strategy_len[i] = len[i];
      for (int j = 0; j < len[i]; j++) d.strategy[i][j] = (int)rows[i][j];
    }
  }
  return d;
}

static void set_axis(sk_op_desc *d, int axis) { d->naxis = 1, d->axis[0] = axis; }

/* GetNext's outputs, Reshape's target: "[64,32],[64]" */
static void set_out_shapes(sk_op_desc *d, const char *shapes) {
  int64_t rows[SK_OP_MAX_OUTPUTS][SK_MAX_DIMS];
  int len[SK_OP_MAX_OUTPUTS];
  d->noutputs = parse_tuples(shapes, rows, len, SK_OP_MAX_OUTPUTS);
  for (int i = 0; i < d->noutputs; i++) {
    d->out_ndims[i] = len[i];
    for (int j = 0; j < len[i]; j++) d->out_shape[i][j] = rows[i][j];
  }
}

/* ---- expectations in MindSpore's form ------------------------------------------------------- */

static sk_op_plan plan_ok(const sk_op_desc *d, int ndevices) {
  sk_op_plan p;
  sk_error e;
  memset(&p, 0, sizeof p);
  sk_result r = sk_op_plan_make(d, ndevices, &p, &e);
  cr_assert_eq(r, SK_OK, "%s on %d devices: %s", sk_op_kind_name(d->kind), ndevices, e.msg);
  return p;
}

/* The device matrix, as MindSpore prints it: "2,4,8,16,1". */
static void expect_dev_matrix(const sk_op_plan *p, const char *want) {
  char got[128] = "";
  size_t len = 0;
  for (int a = 0; a < p->mesh.naxes; a++)
    len += (size_t)snprintf(got + len, sizeof got - len, "%s%d", a ? "," : "", p->mesh.dims[a]);
  cr_expect_str_eq(got, want, "device matrix");
}

/* A layout's tensor map in MindSpore's numbers (counted from the right of the device matrix). */
static void ms_map_of(const sk_layout *l, char *buf, size_t cap) {
  sk_dim_map ms[SK_MAX_DIMS];
  sk_layout_to_ms_map(l, ms);
  sk_ms_map_format(ms, l->ndims, buf, cap);
}

static void expect_map(const sk_layout *l, const char *want, const char *what) {
  char got[128];
  ms_map_of(l, got, sizeof got);
  cr_expect_str_eq(got, want, "%s tensor map", what);
}

static void expect_slice(const sk_layout *l, const char *want, const char *what) {
  int64_t s[SK_MAX_DIMS];
  sk_layout_slice_shape(l, s);
  char got[128] = "";
  size_t len = 0;
  for (int i = 0; i < l->ndims; i++) len += (size_t)snprintf(got + len, sizeof got - len, "%s%lld", i ? "," : "", (long long)s[i]);
  cr_expect_str_eq(got, want, "%s slice shape", what);
}

static void expect_shape(const sk_layout *l, const char *want, const char *what) {
  char got[128] = "";
  size_t len = 0;
  for (int i = 0; i < l->ndims; i++)
    len += (size_t)snprintf(got + len, sizeof got - len, "%s%lld", i ? "," : "", (long long)l->shape[i]);
  cr_expect_str_eq(got, want, "%s shape", what);
}

/* The ranks of `rank`'s group along the comm's axes, "0,1,2,3". */
static void group_text(const sk_op_plan *p, const sk_op_comm *c, int rank, char *buf, size_t cap) {
  static int ranks[SK_MAX_DEVICES];
  int n = 0;
  sk_error e;
  cr_assert_eq(sk_mesh_group(&p->mesh, rank, c->axes, ranks, SK_MAX_DEVICES, &n, &e), SK_OK, "%s", e.msg);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n && len < cap; i++) len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "," : "", ranks[i]);
}

static void expect_comm(const sk_op_plan *p, const sk_op_comm *c, sk_coll_kind kind, sk_redop redop, double scale, int rank,
                        const char *group, const char *what) {
  cr_expect_eq(c->kind, kind, "%s: collective %s, want %s", what, sk_coll_kind_name(c->kind), sk_coll_kind_name(kind));
  if (kind == SK_COLL_NONE || c->kind != kind) return;
  cr_expect_eq(c->op, redop, "%s: reduction", what);
  cr_expect_float_eq(c->scale, scale, 1e-12, "%s: scale %g, want %g", what, c->scale, scale);
  char got[4096];
  group_text(p, c, rank, got, sizeof got);
  cr_expect_str_eq(got, group, "%s: group of rank %d", what, rank);
}

static void expect_none(const sk_op_comm *c, const char *what) {
  cr_expect_eq(c->kind, SK_COLL_NONE, "%s: want none, got %s", what, sk_coll_kind_name(c->kind));
}

/* The group size of a comm (for the 1024-device cases, where listing ranks is unwieldy). */
static int group_size(const sk_op_plan *p, const sk_op_comm *c) {
  int n = 1;
  for (int a = 0; a < p->mesh.naxes; a++)
    if (c->axes & (1u << a)) n *= p->mesh.dims[a];
  return n;
}

/* Rejected with SK_ERR_INVALID_ARGUMENT and a message holding every given substring. */
static void expect_reject(const sk_op_desc *d, int ndevices, const char *why, ...) {
  sk_op_plan p;
  sk_error e;
  memset(&e, 0, sizeof e);
  sk_result r = sk_op_plan_make(d, ndevices, &p, &e);
  cr_expect_eq(r, SK_ERR_INVALID_ARGUMENT, "%s (%s) on %d devices: want INVALID_ARGUMENT, got %d (%s)",
               sk_op_kind_name(d->kind), why, ndevices, (int)r, e.msg);
  va_list ap;
  va_start(ap, why);
  for (const char *sub = va_arg(ap, const char *); sub; sub = va_arg(ap, const char *))
    cr_expect(strstr(e.msg, sub) != NULL, "%s (%s): message \"%s\" lacks \"%s\"", sk_op_kind_name(d->kind), why, e.msg, sub);
  va_end(ap);
}

/* ==== MatMul, BatchMatMul, Dense ============================================================== */

/* MindSpore's MatMul test "matmul1", a 1024-device stage: x [2,4,8,16], w [2,4,16,32], strategy
   ((2,4,8,16),(2,4,16,1)). Batch dims first, then a, b (contracted), c. */
Test(ops_rules, batch_matmul_ms_matmul1) {
  sk_op_desc d = op(SK_OP_BATCH_MATMUL, "[2,4,8,16],[2,4,16,32]", "(2,4,8,16),(2,4,16,1)");
  d.params = 2;
  sk_op_plan p = plan_ok(&d, 1024);
  expect_dev_matrix(&p, "2,4,8,16,1");
  expect_map(&p.in[0], "(4,3,2,1)", "x");
  expect_map(&p.in[1], "(4,3,1,0)", "w");
  expect_map(&p.out[0], "(4,3,2,0)", "output");
  expect_slice(&p.in[0], "1,1,1,1", "x");
  expect_slice(&p.in[1], "1,1,1,32", "w");
  expect_slice(&p.out[0], "1,1,1,32", "output");
  /* b = 16 is cut: AllReduce(sum) over the 16 consecutive ranks of the b axis */
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", "forward");
  /* w's Mirror: the a axis (8), stride 16 */
  expect_comm(&p, &p.mirror[1], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,16,32,48,64,80,96,112", "w Mirror");
  expect_none(&p.mirror[0], "x Mirror (its map uses every axis of size > 1)");
}

/* MindSpore's "GetForwardOp2": ((2,4,8,1),(2,4,1,16)) on 1024: the contraction is whole, no
   forward op; dx = dy w^T is partial over c = 16 (the last axis: consecutive ranks). */
Test(ops_rules, batch_matmul_no_forward_op) {
  sk_op_desc d = op(SK_OP_BATCH_MATMUL, "[2,4,8,16],[2,4,16,32]", "(2,4,8,1),(2,4,1,16)");
  sk_op_plan p = plan_ok(&d, 1024);
  expect_dev_matrix(&p, "2,4,8,1,16");
  expect_none(&p.fwd, "forward");
  expect_comm(&p, &p.bwd_in[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", "dx");
  /* MindSpore's "GetMirrorOPs4" companion: ((2,4,1,16),(2,4,16,8)) gives x a Mirror over c */
  sk_op_desc d2 = op(SK_OP_BATCH_MATMUL, "[2,4,8,16],[2,4,16,32]", "(2,4,1,16),(2,4,16,8)");
  sk_op_plan p2 = plan_ok(&d2, 1024);
  expect_dev_matrix(&p2, "2,4,1,16,8");
  expect_comm(&p2, &p2.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7", "x Mirror");
  expect_none(&p2.mirror[1], "w Mirror (only the size-1 a axis is unused)");
}

/* MindSpore's "matmul2": transpose_b, x [2,4,8,16], w [32,16] (no batch dims: it broadcasts),
   ((2,4,8,16),(1,16)) on 1024. w's map swaps its two entries: n -> c (0), k -> b (1). */
Test(ops_rules, batch_matmul_broadcast_w_transpose_b) {
  sk_op_desc d = op(SK_OP_BATCH_MATMUL, "[2,4,8,16],[32,16]", "(2,4,8,16),(1,16)");
  d.transpose_b = true;
  sk_op_plan p = plan_ok(&d, 1024);
  expect_dev_matrix(&p, "2,4,8,16,1");
  expect_map(&p.in[0], "(4,3,2,1)", "x");
  expect_map(&p.in[1], "(0,1)", "w");
  expect_map(&p.out[0], "(4,3,2,0)", "output");
  expect_slice(&p.in[1], "32,1", "w");
  expect_slice(&p.out[0], "1,1,1,32", "output");
  /* w is replicated over the batch axes and a: 2*4*8 = 64 devices */
  cr_expect_eq(group_size(&p, &p.mirror[1]), 64, "w Mirror over batch axes and a");
}

/* MindSpore's "matmul3": x [8,16] broadcasts against w [2,4,32,16] (transpose_b),
   ((8,16),(2,4,1,16)) on 1024: the device matrix takes its batch part from the longer input. */
Test(ops_rules, batch_matmul_broadcast_x) {
  sk_op_desc d = op(SK_OP_BATCH_MATMUL, "[8,16],[2,4,32,16]", "(8,16),(2,4,1,16)");
  d.transpose_b = true;
  sk_op_plan p = plan_ok(&d, 1024);
  expect_dev_matrix(&p, "2,4,8,16,1");
  expect_map(&p.in[0], "(2,1)", "x");
  expect_map(&p.in[1], "(4,3,0,1)", "w");
  expect_map(&p.out[0], "(4,3,2,0)", "output");
  expect_slice(&p.in[0], "1,1", "x");
  expect_slice(&p.in[1], "1,1,32,1", "w");
  expect_slice(&p.out[0], "1,1,1,32", "output");
}

/* On master MatMul and BatchMatMul are one class (matmul_info.h: BatchMatMulInfo derives from
   MatMul, which takes any rank >= 2), and matmul_info_test.cc's cases construct MatMulInfo with
   4-D inputs: DISABLED_InferDevMatrixShape1 / InferTensorMap1 / InferSliceShape1 /
   GetForwardOp1 (x [2,4,8,16], w [2,4,16,32], ((2,4,8,16),(2,4,16,1)), 1024 devices) and
   DISABLED_InferTensorMap3 (x [8,16] against w [2,4,32,16], transpose_b). MatMul answers them as
   BatchMatMul does; only an output strategy needs 2-D (MatMul::CheckOutputStrategy). */
Test(ops_rules, matmul_takes_batch_dims_as_master) {
  sk_op_desc d = op(SK_OP_MATMUL, "[2,4,8,16],[2,4,16,32]", "(2,4,8,16),(2,4,16,1)");
  sk_op_plan p = plan_ok(&d, 1024);
  expect_dev_matrix(&p, "2,4,8,16,1");
  expect_map(&p.in[0], "(4,3,2,1)", "x");
  expect_map(&p.in[1], "(4,3,1,0)", "w");
  expect_map(&p.out[0], "(4,3,2,0)", "output");
  expect_slice(&p.out[0], "1,1,1,32", "output");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", "forward");
  sk_op_desc b = op(SK_OP_MATMUL, "[8,16],[2,4,32,16]", "(8,16),(2,4,1,16)");
  b.transpose_b = true;
  sk_op_plan q = plan_ok(&b, 1024);
  expect_dev_matrix(&q, "2,4,8,16,1");
  expect_map(&q.in[0], "(2,1)", "x");
  expect_map(&q.in[1], "(4,3,0,1)", "w");
  sk_op_desc o = op(SK_OP_MATMUL, "[2,64,32],[2,32,16]", "(1,2,4),(1,4,1)");
  o.has_out_strategy = true, o.out_strategy[0] = 8, o.out_strategy[1] = 1;
  expect_reject(&o, 8, "output strategy with batch dims", "MatMul", "2-D", NULL);
}

/* Hand-derived: 2-D MatMul with transpose_b and a repeat axis. x [16,32], w [64,32],
   ((2,4),(1,4)) on 16: [a,b,c] = [2,4,1], repeat 2 on the right. */
Test(ops_rules, matmul_transpose_b_repeat) {
  sk_op_desc d = op(SK_OP_MATMUL, "[16,32],[64,32]", "(2,4),(1,4)");
  d.transpose_b = true, d.params = 2;
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "2,4,1,2");
  expect_map(&p.in[0], "(3,2)", "x");
  expect_map(&p.in[1], "(1,2)", "w");
  expect_map(&p.out[0], "(3,1)", "output");
  expect_slice(&p.in[1], "64,8", "w");
  expect_slice(&p.out[0], "8,64", "output");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6", "forward over b (stride 2: rep is right of it)");
  /* w unused: a (stride 8) and rep (stride 1) */
  expect_comm(&p, &p.mirror[1], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,8,9", "w Mirror");
  expect_comm(&p, &p.grad[1], SK_COLL_ALLREDUCE, SK_SUM, 1, 3, "2,3,10,11", "w gradient");
  /* x unused: c (size 1) and rep */
  expect_comm(&p, &p.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1", "x Mirror");
}

/* out_strategy ((a*b, c),) asks for a ReduceScatter: MindSpore's output dev matrix is
   [a*b, c] with map (1,0); on shardkit's single mesh the output rows are cut by (a, b). */
Test(ops_rules, matmul_out_strategy_reduce_scatter) {
  sk_op_desc d = op(SK_OP_MATMUL, "[64,32],[32,16]", "(2,4),(4,1)");
  d.has_out_strategy = true, d.out_strategy[0] = 8, d.out_strategy[1] = 1;
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "2,4,1");
  expect_map(&p.out[0], "((2,1),0)", "output");
  expect_slice(&p.out[0], "8,16", "output");
  expect_comm(&p, &p.fwd, SK_COLL_REDUCE_SCATTER, SK_SUM, 1, 5, "4,5,6,7", "forward ReduceScatter over b");
  cr_assert_eq(p.redistributed, 0u);
  /* (a, c) is the AllReduce's own output (MatMul::CheckOutputStrategy takes both) */
  d.out_strategy[0] = 2;
  p = plan_ok(&d, 8);
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 5, "4,5,6,7", "forward AllReduce over b");
  cr_assert_eq(p.redistributed, 0u);
  sk_op_desc bad = d;
  bad.out_strategy[2] = 1;
  expect_reject(&bad, 8, "out_strategy longer than the output's rank", "MatMul", "out_strategy", NULL);
}

/* Dense = MatMul(transpose_b) + bias over the output's columns: hand-derived. x [16,32],
   w [64,32], bias [64], ((2,4),(2,4),(2)) on 16: [a,b,c] = [2,4,2]. */
Test(ops_rules, dense) {
  sk_op_desc d = op(SK_OP_DENSE, "[16,32],[64,32],[64]", "(2,4),(2,4),(2)");
  d.params = 6;
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "2,4,2");
  expect_map(&p.in[0], "(2,1)", "x");
  expect_map(&p.in[1], "(0,1)", "w");
  expect_map(&p.in[2], "(0,)", "bias");
  expect_map(&p.out[0], "(2,0)", "output");
  expect_slice(&p.out[0], "8,32", "output");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6", "forward over b");
  /* bias replicated over a and b */
  expect_comm(&p, &p.mirror[2], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6,8,10,12,14", "bias Mirror");
  sk_op_desc bad = op(SK_OP_DENSE, "[16,32],[64,32],[64]", "(2,4),(2,4),(1)");
  expect_reject(&bad, 16, "bias cut unlike w's rows", "Dense", "input 2", NULL);
}

Test(ops_rules, matmul_rejects) {
  sk_op_desc d = op(SK_OP_MATMUL, "[16,32],[32,64]", "(2,4),(2,1)");
  expect_reject(&d, 8, "contraction cut 4 vs 2", "MatMul", NULL);
  /* MindSpore's CheckRelevantDimension: batch entries must agree */
  sk_op_desc b = op(SK_OP_BATCH_MATMUL, "[2,4,8,16],[2,4,16,32]", "(2,2,8,16),(2,4,16,1)");
  expect_reject(&b, 1024, "batch dim 1 cut 2 vs 4", "BatchMatMul", "dim 1", NULL);
}

/* ==== element-wise ============================================================================ */

/* Hand-derived for each one-input kind: x [64,32,16], (2,4,2) on 32: repeat 2 on the right; the
   input's Mirror runs over the repeat axis (consecutive pairs). */
Test(ops_rules, unary_table) {
  const sk_op_kind kinds[] = {SK_OP_RELU, SK_OP_GELU, SK_OP_TANH, SK_OP_CAST};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    sk_op_desc d = op(kinds[k], "[64,32,16]", "(2,4,2)");
    sk_op_plan p = plan_ok(&d, 32);
    expect_dev_matrix(&p, "2,4,2,2");
    expect_map(&p.in[0], "(3,2,1)", sk_op_kind_name(kinds[k]));
    expect_map(&p.out[0], "(3,2,1)", sk_op_kind_name(kinds[k]));
    expect_slice(&p.out[0], "32,8,8", sk_op_kind_name(kinds[k]));
    expect_none(&p.fwd, sk_op_kind_name(kinds[k]));
    expect_comm(&p, &p.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 6, "6,7", sk_op_kind_name(kinds[k]));
  }
}

/* TmpIdentity, MindSpore's tmpidentity_test.cc (TestTmpIdentityInfo, a 1024-device stage): x
   [2,4,8,16], strategy (2,4,8,16): InferDevMatrixShape1 [2,4,8,16], GetTensorLayout1 maps
   (3,2,1,0) in and out, InferSliceShape1 1,1,1,1; CheckStrategy1 (two tuples) and CheckStrategy2
   (a tuple of 3 for a rank-4 input) fail. Beyond the test: tmp_identity_info.cc declares no Mirror
   and no forward communication; the repeat goes on the right (InitWithAutoRepeatCalc) and a
   parameter's gradient is still summed over its replicas. */
Test(ops_rules, tmp_identity_ms_tests) {
  sk_op_desc d = op(SK_OP_TMP_IDENTITY, "[2,4,8,16]", "(2,4,8,16)");
  sk_op_plan p = plan_ok(&d, 1024);
  expect_dev_matrix(&p, "2,4,8,16");
  expect_map(&p.in[0], "(3,2,1,0)", "input");
  expect_map(&p.out[0], "(3,2,1,0)", "output");
  expect_slice(&p.in[0], "1,1,1,1", "input");
  expect_slice(&p.out[0], "1,1,1,1", "output");
  expect_none(&p.fwd, "forward");
  sk_op_desc two = op(SK_OP_TMP_IDENTITY, "[2,4,8,16]", "(2,2,8,16),(2,4,16,1)");
  expect_reject(&two, 1024, "CheckStrategy1", "TmpIdentity", NULL);
  sk_op_desc short_tuple = op(SK_OP_TMP_IDENTITY, "[2,4,8,16]", "(2,4,8)");
  expect_reject(&short_tuple, 1024, "CheckStrategy2", "TmpIdentity", NULL);

  sk_op_desc w = op(SK_OP_TMP_IDENTITY, "[64,32]", "(2,4)");
  w.params = 1;
  sk_op_plan q = plan_ok(&w, 32);
  expect_dev_matrix(&q, "2,4,4");
  expect_map(&q.out[0], "(2,1)", "output with repeat");
  expect_none(&q.mirror[0], "TmpIdentity declares no Mirror");
  expect_none(&q.bwd_in[0], "backward");
  expect_comm(&q, &q.grad[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 5, "4,5,6,7", "the parameter's gradient");
}

/* Dropout: two outputs (result and mask), both with the input's map. */
Test(ops_rules, dropout_two_outputs_and_repeat) {
  sk_op_desc d = op(SK_OP_DROPOUT, "[32,64]", "(4,8)");
  sk_op_plan p = plan_ok(&d, 32);
  expect_dev_matrix(&p, "4,8");
  cr_expect_eq(p.noutputs, 2, "result and mask");
  expect_map(&p.out[0], "(1,0)", "result");
  expect_map(&p.out[1], "(1,0)", "mask");
  expect_slice(&p.out[1], "8,8", "mask");
  /* A repeat axis, as MindSpore's DropoutInfo accepts (it gives the replicas one seed); the mask
     of sk_kern_dropout_mask depends on the global index only, so the replicas agree. The repeat
     goes on the right, like any element-wise operator's. */
  sk_op_desc r = op(SK_OP_DROPOUT, "[32,64]", "(4,4)");
  sk_op_plan q = plan_ok(&r, 32);
  expect_dev_matrix(&q, "4,4,2");
  expect_map(&q.out[0], "(2,1)", "result with a repeat");
  expect_map(&q.out[1], "(2,1)", "mask with a repeat");
  expect_slice(&q.out[1], "8,16", "mask with a repeat");
  expect_none(&q.fwd, "Dropout forward");
  expect_comm(&q, &q.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1", "Mirror over the repeat axis");
}

/* MindSpore's tensor-add test, a 32-device stage: [32,64,96] twice, ((2,4,4),(2,4,4)); and its
   broadcast case [1,48] + [48,1] with ((1,8),(4,1)). Run for every binary kind. */
Test(ops_rules, binary_table) {
  const sk_op_kind kinds[] = {SK_OP_ADD, SK_OP_SUB, SK_OP_MUL, SK_OP_DIV, SK_OP_POW};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    const char *name = sk_op_kind_name(kinds[k]);
    sk_op_desc d = op(kinds[k], "[32,64,96],[32,64,96]", "(2,4,4),(2,4,4)");
    sk_op_plan p = plan_ok(&d, 32);
    expect_dev_matrix(&p, "2,4,4");
    expect_map(&p.in[0], "(2,1,0)", name);
    expect_map(&p.in[1], "(2,1,0)", name);
    expect_map(&p.out[0], "(2,1,0)", name);
    expect_slice(&p.in[1], "16,16,24", name);
    expect_none(&p.fwd, name);
    expect_none(&p.mirror[0], name);
    expect_none(&p.mirror[1], name);

    sk_op_desc b = op(kinds[k], "[1,48],[48,1]", "(1,8),(4,1)");
    sk_op_plan q = plan_ok(&b, 32);
    expect_dev_matrix(&q, "4,8");
    expect_map(&q.in[0], "(-1,0)", name);
    expect_map(&q.in[1], "(1,-1)", name);
    expect_map(&q.out[0], "(1,0)", name);
    expect_shape(&q.out[0], "48,48", name);
    expect_slice(&q.out[0], "12,6", name);
    /* MindSpore's "mirror_ops" case: input 1 gets a Mirror (over the 8 axis) */
    expect_comm(&q, &q.mirror[1], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7", name);
    expect_comm(&q, &q.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,8,16,24", name);

    /* MindSpore's CheckStrategy1..3 */
    sk_op_desc r1 = op(kinds[k], "[32,64,96],[32,64,96]", "(2,4,4),(2,6,4)");
    expect_reject(&r1, 32, "6 does not divide 64", name, "input 1", "dim 1", NULL);
    sk_op_desc r2 = op(kinds[k], "[32,64,96],[32,64,96]", "(2,4,8),(2,4,8)");
    expect_reject(&r2, 32, "64 devices of 32", name, "devices", NULL);
    sk_op_desc r3 = op(kinds[k], "[32,64,96],[32,64,96]", "(2,4,4)");
    expect_reject(&r3, 32, "one tuple for two inputs", name, "tuple", NULL);
  }
}

/* BiasAdd: x [64,32] + bias [32], ((4,8),(8)) on 64: repeat 2; the bias follows the channel. */
Test(ops_rules, bias_add) {
  sk_op_desc d = op(SK_OP_BIAS_ADD, "[64,32],[32]", "(4,8),(8)");
  d.params = 2;
  sk_op_plan p = plan_ok(&d, 64);
  expect_dev_matrix(&p, "4,8,2");
  expect_map(&p.in[0], "(2,1)", "x");
  expect_map(&p.in[1], "(1,)", "bias");
  expect_map(&p.out[0], "(2,1)", "output");
  expect_none(&p.fwd, "forward");
  expect_comm(&p, &p.mirror[1], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,16,17,32,33,48,49", "bias Mirror");
  sk_op_desc bad = op(SK_OP_BIAS_ADD, "[64,32],[32]", "(4,8),(4)");
  expect_reject(&bad, 64, "bias cut unlike the channel", "BiasAdd", "input 1", NULL);
}

/* MindSpore's PReLU test, a 1024-device stage: x [64,4,8,16], w [4], ((2,1,8,16),(1)). The stored
   test expects [4,2,1,8,16] (the repeat on the left, an old default); the newest PReLUInfo uses
   the automatic repeat, on the right: [2,1,8,16,4], and every map entry shifts by one. */
Test(ops_rules, prelu) {
  sk_op_desc d = op(SK_OP_PRELU, "[64,4,8,16],[4]", "(2,1,8,16),(1)");
  d.params = 2;
  sk_op_plan p = plan_ok(&d, 1024);
  expect_dev_matrix(&p, "2,1,8,16,4");
  expect_map(&p.in[0], "(4,3,2,1)", "x");
  expect_map(&p.in[1], "(3,)", "w");
  expect_map(&p.out[0], "(4,3,2,1)", "output");
  expect_slice(&p.in[0], "32,4,1,1", "x");
  expect_slice(&p.in[1], "4", "w");
  expect_none(&p.fwd, "forward");
  cr_expect_eq(group_size(&p, &p.mirror[1]), 1024, "w is whole on every device");
  /* the 2-D case: x [1024,4], ((128,1),(1)) -> [128,1,8] */
  sk_op_desc d2 = op(SK_OP_PRELU, "[1024,4],[4]", "(128,1),(1)");
  sk_op_plan p2 = plan_ok(&d2, 1024);
  expect_dev_matrix(&p2, "128,1,8");
  expect_map(&p2.in[0], "(2,1)", "x");
  expect_map(&p2.in[1], "(1,)", "w");
  expect_slice(&p2.in[0], "8,4", "x");
  /* w of size 1 is never mapped */
  sk_op_desc d3 = op(SK_OP_PRELU, "[64,4,8,16],[1]", "(2,4,8,16),(1)");
  sk_op_plan p3 = plan_ok(&d3, 1024);
  expect_map(&p3.in[1], "(-1,)", "w of size 1");
  /* CheckStrategy1: one tuple; channel cut 4 but w cut 1; w's tuple of two entries */
  sk_op_desc r1 = op(SK_OP_PRELU, "[64,4,8,16],[4]", "(2,1,8,16)");
  expect_reject(&r1, 1024, "one tuple", "PReLU", "tuple", NULL);
  sk_op_desc r2 = op(SK_OP_PRELU, "[64,4,8,16],[4]", "(2,4,8,16),(1)");
  expect_reject(&r2, 1024, "w cut unlike the channel", "PReLU", "input 1", NULL);
  sk_op_desc r3 = op(SK_OP_PRELU, "[64,4,8,16],[4]", "(2,4,8,16),(4,1)");
  expect_reject(&r3, 1024, "w's tuple has 2 entries", "PReLU", "input 1", NULL);
}

/* ==== Softmax family, LayerNorm ================================================================ */

/* x [128,64,32], (2,4,1) on 32 with the axis unsplit: repeat 4 on the right. */
Test(ops_rules, softmax_family) {
  const sk_op_kind kinds[] = {SK_OP_SOFTMAX, SK_OP_LOG_SOFTMAX};
  for (size_t k = 0; k < 2; k++) {
    const char *name = sk_op_kind_name(kinds[k]);
    sk_op_desc d = op(kinds[k], "[128,64,32]", "(2,4,1)");
    sk_op_plan p = plan_ok(&d, 32); /* default axis -1 */
    expect_dev_matrix(&p, "2,4,1,4");
    expect_map(&p.in[0], "(3,2,1)", name);
    expect_map(&p.out[0], "(3,2,1)", name);
    expect_none(&p.fwd, name);
    expect_comm(&p, &p.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3", name);
    sk_op_desc r = op(kinds[k], "[128,64,32]", "(2,1,4)");
    expect_reject(&r, 32, "axis -1 cut", name, "dim 2", NULL);
    sk_op_desc a = op(kinds[k], "[128,64,32]", "(2,4,1)");
    set_axis(&a, 1);
    expect_reject(&a, 32, "axis 1 cut", name, "dim 1", NULL);
    sk_op_desc o = op(kinds[k], "[128,64,32]", "(2,4,1)");
    set_axis(&o, 3);
    expect_reject(&o, 32, "axis out of [-3, 2]", name, "axis", NULL);
  }
}

/* L2Normalize: default axis 0 must stay whole. */
Test(ops_rules, l2_normalize) {
  sk_op_desc d = op(SK_OP_L2_NORMALIZE, "[128,64,32]", "(1,4,8)");
  sk_op_plan p = plan_ok(&d, 32);
  expect_dev_matrix(&p, "1,4,8");
  expect_map(&p.out[0], "(2,1,0)", "output");
  expect_slice(&p.out[0], "128,16,4", "output");
  expect_none(&p.fwd, "forward");
  sk_op_desc r = op(SK_OP_L2_NORMALIZE, "[128,64,32]", "(2,4,1)");
  expect_reject(&r, 32, "axis 0 cut", "L2Normalize", "dim 0", NULL);
  sk_op_desc a = op(SK_OP_L2_NORMALIZE, "[128,64,32]", "(2,4,1)");
  set_axis(&a, -1);
  sk_op_plan q = plan_ok(&a, 32);
  expect_dev_matrix(&q, "2,4,1,4");
}

/* LayerNorm, hand-derived: x [16,32,64], gamma [64], beta [64], begin_norm_axis 2,
   ((4,2,1),(1),(1)) on 16: repeat 2; mean and variance keep x's rank with size-1 normalised dims. */
Test(ops_rules, layer_norm) {
  sk_op_desc d = op(SK_OP_LAYER_NORM, "[16,32,64],[64],[64]", "(4,2,1),(1),(1)");
  set_axis(&d, 2);
  d.params = 6;
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "4,2,1,2");
  expect_map(&p.in[0], "(3,2,1)", "x");
  expect_map(&p.in[1], "(1,)", "gamma");
  expect_map(&p.in[2], "(1,)", "beta");
  cr_expect_eq(p.noutputs, 3, "y, mean, variance");
  expect_map(&p.out[0], "(3,2,1)", "y");
  expect_map(&p.out[1], "(3,2,-1)", "mean");
  expect_map(&p.out[2], "(3,2,-1)", "variance");
  expect_shape(&p.out[1], "16,32,1", "mean");
  expect_slice(&p.out[0], "4,16,64", "y");
  expect_slice(&p.out[1], "4,16,1", "mean");
  expect_none(&p.fwd, "forward");
  cr_expect_eq(group_size(&p, &p.mirror[1]), 16, "gamma is whole everywhere");
  /* default begin_norm_axis 1: dims 1 and 2 stay whole */
  sk_op_desc r1 = op(SK_OP_LAYER_NORM, "[16,32,64],[64],[64]", "(4,2,1),(1),(1)");
  expect_reject(&r1, 16, "dim 1 cut with begin_norm_axis 1", "LayerNorm", "dim 1", NULL);
  sk_op_desc r2 = op(SK_OP_LAYER_NORM, "[16,32,64],[64],[64]", "(4,2,2),(2),(2)");
  set_axis(&r2, 2);
  expect_reject(&r2, 16, "normalised dim 2 cut", "LayerNorm", "dim 2", NULL);
  sk_op_desc r3 = op(SK_OP_LAYER_NORM, "[16,32,64],[32,64],[64]", "(4,2,1),(1,1),(1)");
  set_axis(&r3, 2);
  expect_reject(&r3, 16, "gamma cut unlike x's dim 1", "LayerNorm", "input 1", NULL);
  sk_op_desc r4 = op(SK_OP_LAYER_NORM, "[16,32,64],[64],[64]", "(4,2,1),(1)");
  set_axis(&r4, 2);
  expect_reject(&r4, 16, "two tuples for three inputs", "LayerNorm", "tuple", NULL);
}

/* RmsNorm, master's tests/ut/python/parallel/test_rms_norm.py (x [16,64,32], gamma [64,32], 16
   devices): test_rms_norm_data_parallel's ((16,1,1),(1,1)) and hybrid_parallel's ((2,1,1),(1,1))
   (a repeat of 8 on the right) plan; y keeps x's map, rstd [16,1,1] x's rows' axis
   (RmsNormInfo::InferTensorMap). test_rms_norm_wrong_strategy's rank-4 tuples are refused. Master
   takes split_norm_axis's ((2,8,1),(8,1)) through a replacement graph with an AllReduce; here the
   normalised dims stay whole, so it is refused naming the dim. Gamma cut unlike x is refused as
   RmsNormInfo::CheckStrategy does. */
Test(ops_rules, rms_norm_ms_cases) {
  sk_op_desc d = op(SK_OP_RMS_NORM, "[16,64,32],[64,32]", "(16,1,1),(1,1)");
  d.params = 2;
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "16,1,1");
  expect_map(&p.in[0], "(2,1,0)", "x");
  expect_map(&p.in[1], "(1,0)", "gamma");
  cr_expect_eq(p.noutputs, 2, "y and rstd");
  expect_map(&p.out[0], "(2,1,0)", "y");
  expect_map(&p.out[1], "(2,-1,-1)", "rstd");
  expect_shape(&p.out[1], "16,1,1", "rstd");
  expect_slice(&p.out[0], "1,64,32", "y");
  expect_none(&p.fwd, "forward");
  cr_expect_eq(group_size(&p, &p.grad[1]), 16, "gamma's gradient sums over every device");
  sk_op_desc h = op(SK_OP_RMS_NORM, "[16,64,32],[64,32]", "(2,1,1),(1,1)");
  expect_dev_matrix((sk_op_plan[]){plan_ok(&h, 16)}, "2,1,1,8");
  sk_op_desc w = op(SK_OP_RMS_NORM, "[16,64,32],[64,32]", "(1,2,1,2),(2,1,2)");
  expect_reject(&w, 16, "rank-4 tuples for rank-3 x", "RmsNorm", "input 0's tuple has 4 entries", NULL);
  sk_op_desc s = op(SK_OP_RMS_NORM, "[16,64,32],[64,32]", "(2,8,1),(8,1)");
  expect_reject(&s, 16, "a normalised dim cut", "RmsNorm", "input 0 dim 1 is cut 8 ways", "begin_norm_axis 1", NULL);
  sk_op_desc g = op(SK_OP_RMS_NORM, "[16,64,32],[32]", "(2,8,1),(2)");
  expect_reject(&g, 16, "gamma cut unlike x", "RmsNorm", "input 1 dim 0 is cut 2 ways but x's dim 2 1 ways", NULL);
  sk_op_desc m = op(SK_OP_RMS_NORM, "[16,64,32],[16]", NULL);
  expect_reject(&m, 16, "gamma unlike x's last dim", "RmsNorm", "input 1 dim 0 (16) does not match x's dim 2 (32)", NULL);
  sk_op_desc r = op(SK_OP_RMS_NORM, "[16,64],[2,16,64]", NULL);
  expect_reject(&r, 16, "gamma of a higher rank", "RmsNorm", "input 1 (gamma) has rank 3", NULL);
}

/* Sigmoid and SiLU: master's SigmoidInfo and SiLUInfo are ActivationOther (activation_info.h):
   the device matrix is the strategy, y keeps x's map, no communication, any dim may be cut. */
Test(ops_rules, sigmoid_and_silu) {
  const sk_op_kind kinds[2] = {SK_OP_SIGMOID, SK_OP_SILU};
  for (int i = 0; i < 2; i++) {
    sk_op_desc d = op(kinds[i], "[2,4,8,16]", "(2,4,8,1)");
    sk_op_plan p = plan_ok(&d, 128);
    expect_dev_matrix(&p, "2,4,8,1,2");
    expect_map(&p.in[0], "(4,3,2,1)", "x");
    expect_map(&p.out[0], "(4,3,2,1)", "y");
    expect_slice(&p.out[0], "1,1,1,16", "y");
    expect_none(&p.fwd, "forward");
    sk_op_desc r = op(kinds[i], "[2,4,8,16]", "(2,4,8)");
    expect_reject(&r, 128, "a short tuple", sk_op_kind_name(kinds[i]), "tuple", NULL);
  }
}

/* ==== losses =================================================================================== */

/* SoftmaxCrossEntropyWithLogits, hand-derived: logits and labels [64,10], ((8,1),(8,1)).
   Output 0 (per-sample loss) keeps the batch axis, output 1 (the gradient) the logits' map. */
Test(ops_rules, softmax_ce_with_logits) {
  sk_op_desc d = op(SK_OP_SOFTMAX_CE_LOGITS, "[64,10],[64,10]", "(8,1),(8,1)");
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "8,1,2");
  cr_expect_eq(p.noutputs, 2, "loss and gradient");
  expect_map(&p.in[0], "(2,1)", "logits");
  expect_map(&p.in[1], "(2,1)", "labels");
  expect_map(&p.out[0], "(2,)", "loss");
  expect_map(&p.out[1], "(2,1)", "gradient");
  expect_shape(&p.out[0], "64", "loss");
  expect_slice(&p.out[0], "8", "loss");
  expect_none(&p.fwd, "forward: the per-sample losses stay batch-split");
  sk_op_desc r1 = op(SK_OP_SOFTMAX_CE_LOGITS, "[64,10],[64,10]", "(8,1),(4,1)");
  expect_reject(&r1, 16, "labels cut unlike logits", "SoftmaxCrossEntropyWithLogits", "input 1", NULL);
  sk_op_desc r2 = op(SK_OP_SOFTMAX_CE_LOGITS, "[64,16],[64,16]", "(4,2),(4,2)");
  expect_reject(&r2, 16, "class dim cut", "SoftmaxCrossEntropyWithLogits", "dim 1", NULL);
}

/* Master's softmax_entropy_loss_info_test.cc (a 64-device stage, logits and labels [2,4,8,16],
   outputs {2} and {2,4,8,16} as the test sets them): any dim but the class axis may be cut
   (SoftmaxCrossEntropyWithLogitsInfo::CheckStrategy, loss_info.cc). InferDevMatrixShape1:
   ((2,4,8,1),(2,4,8,1)) gives [2,4,8,1]; InferSliceShape1: slices [1,1,1,16] twice, [1] and
   [1,1,1,16]; GetTensorLayout1: maps [3,2,1,0] twice, [3] and [3,2,1,0]; GetForwardOp1: none;
   GetVirtualDivOPs1: ((1,4,8,1),(1,4,8,1)) is accepted (a repeat of 2 on the right);
   CheckStrategy1: ((2,2,8,16),(2,4,16,1)) is refused. The 2020 rule took the batch dim only. */
Test(ops_rules, softmax_ce_with_logits_ms_case) {
  sk_op_desc d = op(SK_OP_SOFTMAX_CE_LOGITS, "[2,4,8,16],[2,4,8,16]", "(2,4,8,1),(2,4,8,1)");
  sk_op_plan p = plan_ok(&d, 64);
  expect_dev_matrix(&p, "2,4,8,1");
  expect_map(&p.in[0], "(3,2,1,0)", "logits");
  expect_map(&p.in[1], "(3,2,1,0)", "labels");
  expect_map(&p.out[0], "(3,)", "loss");
  expect_map(&p.out[1], "(3,2,1,0)", "gradient");
  expect_shape(&p.out[0], "2", "loss");
  expect_slice(&p.in[0], "1,1,1,16", "logits");
  expect_slice(&p.out[0], "1", "loss");
  expect_slice(&p.out[1], "1,1,1,16", "gradient");
  expect_none(&p.fwd, "forward");
  sk_op_desc v = op(SK_OP_SOFTMAX_CE_LOGITS, "[2,4,8,16],[2,4,8,16]", "(1,4,8,1),(1,4,8,1)");
  sk_op_plan q = plan_ok(&v, 64);
  expect_dev_matrix(&q, "1,4,8,1,2");
  sk_op_desc r1 = op(SK_OP_SOFTMAX_CE_LOGITS, "[2,4,8,16],[2,4,8,16]", "(2,2,8,16),(2,4,16,1)");
  expect_reject(&r1, 64, "class axis cut, strategies differ", "SoftmaxCrossEntropyWithLogits", "dim 3", NULL);
}

/* shardkit's fused SoftmaxCrossEntropy: the scalar mean is summed over the batch axis only. */
Test(ops_rules, softmax_ce_fused) {
  sk_op_desc d = op(SK_OP_SOFTMAX_CE, "[64,10],[64,10]", "(8,1),(8,1)");
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "8,1,2");
  expect_shape(&p.out[0], "1", "loss");
  expect_map(&p.out[0], "(-1,)", "loss");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6,8,10,12,14", "forward over the batch axis");
  sk_op_desc r = op(SK_OP_SOFTMAX_CE, "[64,16],[64,16]", "(4,2),(4,2)");
  expect_reject(&r, 16, "class dim cut", "SoftmaxCrossEntropy", "dim 1", NULL);
}

/* MAELoss, hand-derived with the fused loss's convention (each device divides its partial sum by
   the global element count): the scalar mean is an AllReduce(sum) over every axis that cuts the
   inputs, the repeat axis excluded. prediction, label [32,16], ((4,2),(4,2)) on 16. */
Test(ops_rules, mae_loss) {
  sk_op_desc d = op(SK_OP_MAE_LOSS, "[32,16],[32,16]", "(4,2),(4,2)");
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "4,2,2");
  expect_map(&p.in[0], "(2,1)", "prediction");
  expect_map(&p.in[1], "(2,1)", "label");
  expect_shape(&p.out[0], "1", "loss");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6,8,10,12,14", "forward over the cutting axes");
  sk_op_desc r = op(SK_OP_MAE_LOSS, "[32,16],[32,16]", "(4,2),(2,2)");
  expect_reject(&r, 16, "label cut unlike prediction", "MAELoss", "input 1", NULL);
}

/* MAELoss with labels that broadcast (nn.MAELoss: abs(logits - labels), aligned from the right):
   prediction [32,16] on 16, ((4,2),(2)): labels [16] take the columns' axis; each device holds a
   part of their gradient, summed along the rows' axis (d0). Labels [32,1], ((4,2),(4,1)): the
   sum runs along the columns' axis. A parameter's Mirror sums it instead. Labels that do not
   broadcast, or cut unlike the dim they align with, are refused by name. */
Test(ops_rules, mae_loss_broadcast_labels) {
  sk_op_desc d = op(SK_OP_MAE_LOSS, "[32,16],[16]", "(4,2),(2)");
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "4,2,2");
  expect_map(&p.in[1], "(1,)", "labels");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6,8,10,12,14", "forward over the cutting axes");
  expect_comm(&p, &p.bwd_in[1], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,4,8,12", "the labels' gradient over the rows");
  expect_none(&p.bwd_in[0], "the prediction's gradient is whole");
  sk_op_desc c = op(SK_OP_MAE_LOSS, "[32,16],[32,1]", "(4,2),(4,1)");
  sk_op_plan q = plan_ok(&c, 16);
  expect_map(&q.in[1], "(2,-1)", "labels");
  expect_comm(&q, &q.bwd_in[1], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2", "the labels' gradient over the columns");
  c.params = 2;
  expect_none(&plan_ok(&c, 16).bwd_in[1], "a parameter's Mirror sums it");
  sk_op_desc dflt = op(SK_OP_MAE_LOSS, "[32,16],[16]", NULL);
  expect_slice(&plan_ok(&dflt, 16).in[1], "16", "default: the labels whole");
  sk_op_desc r1 = op(SK_OP_MAE_LOSS, "[32,16],[8]", "(4,2),(2)");
  expect_reject(&r1, 16, "labels [8] against [32,16]", "MAELoss", "input 1 dim 0 (8) does not broadcast to input 0 dim 1 (16)",
                NULL);
  sk_op_desc r2 = op(SK_OP_MAE_LOSS, "[32,16],[16]", "(4,2),(1)");
  expect_reject(&r2, 16, "labels cut unlike the columns", "MAELoss", "input 1 dim 0 is cut 1 ways", NULL);
  sk_op_desc r3 = op(SK_OP_MAE_LOSS, "[32],[32,16]", NULL);
  expect_reject(&r3, 16, "labels of a higher rank", "MAELoss", "input 1 has more dims", NULL);
}

/* VirtualLoss (master's tests/ut/python/ops/test_math_ops.py, the loss of the parallel tests'
   NetWithLoss): no OperatorInfo on master, so shardkit's rule is the scalar losses'. x [64,32],
   ((4,2),) on 16: the sums AllReduce along both cutting axes, the output [1] whole. Without a
   strategy it takes the cut its input arrives with (desc.follows_input), else data parallel. */
Test(ops_rules, virtual_loss) {
  sk_op_desc d = op(SK_OP_VIRTUAL_LOSS, "[64,32]", "(4,2)");
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "4,2,2");
  expect_map(&p.in[0], "(2,1)", "x");
  expect_shape(&p.out[0], "1", "loss");
  expect_map(&p.out[0], "(-1,)", "loss");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6,8,10,12,14", "forward over the cutting axes");
  expect_none(&p.bwd_in[0], "dx is whole: the loss is");
  sk_op_desc dp = op(SK_OP_VIRTUAL_LOSS, "[64,32]", NULL);
  expect_dev_matrix((sk_op_plan[]){plan_ok(&dp, 16)}, "16,1");
  dp.follows_input = true, dp.strategy[0][0] = 2, dp.strategy[0][1] = 4;
  sk_op_plan f = plan_ok(&dp, 16);
  expect_dev_matrix(&f, "2,4,2");
  expect_slice(&f.in[0], "32,8", "x as it arrives");
  sk_op_desc r = op(SK_OP_VIRTUAL_LOSS, "[64,32],[64]", NULL);
  expect_reject(&r, 16, "two inputs", "VirtualLoss", "takes 1 input", NULL);
}

/* ==== reductions =============================================================================== */

/* MindSpore's ReduceSum test, a 32-device stage: x [16,32,64], axis -1, keep_dims false. */
Test(ops_rules, reduce_sum_ms_cases) {
  sk_op_desc d = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(4,8,1)");
  set_axis(&d, -1);
  sk_op_plan p = plan_ok(&d, 32);
  expect_dev_matrix(&p, "4,8,1");
  expect_map(&p.in[0], "(2,1,0)", "input");
  expect_map(&p.out[0], "(2,1)", "output");
  expect_slice(&p.in[0], "4,4,64", "input");
  expect_slice(&p.out[0], "4,4", "output");
  expect_none(&p.fwd, "the reduced dim is whole");
  expect_none(&p.mirror[0], "no Mirror: every axis of size > 1 cuts x");

  /* (4,4,2): the reduced dim is cut by the last axis: AllReduce(sum) over pairs */
  sk_op_desc s = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(4,4,2)");
  set_axis(&s, -1);
  sk_op_plan q = plan_ok(&s, 32);
  expect_dev_matrix(&q, "4,4,2");
  expect_map(&q.out[0], "(2,1)", "output");
  expect_slice(&q.out[0], "4,8", "output");
  expect_comm(&q, &q.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1", "forward");

  /* (4,4,1): repeat 2 on the right, the input's Mirror over it */
  sk_op_desc m = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(4,4,1)");
  set_axis(&m, -1);
  sk_op_plan r = plan_ok(&m, 32);
  expect_dev_matrix(&r, "4,4,1,2");
  expect_map(&r.out[0], "(3,2)", "output");
  expect_none(&r.fwd, "forward");
  expect_comm(&r, &r.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1", "Mirror");

  /* CheckStrategy1, 2 */
  sk_op_desc b1 = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(2,2,8,16)");
  set_axis(&b1, -1);
  expect_reject(&b1, 32, "four entries for a rank-3 input", "ReduceSum", "input 0", NULL);
  sk_op_desc b2 = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(2,4,8),(2,4,8)");
  set_axis(&b2, -1);
  expect_reject(&b2, 32, "two tuples", "ReduceSum", "tuple", NULL);
}

Test(ops_rules, reduce_keep_dims_max_mean) {
  /* keep_dims: the reduced dim stays, size 1, unmapped */
  sk_op_desc k = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(4,4,2)");
  set_axis(&k, -1);
  k.keep_dims = true;
  sk_op_plan p = plan_ok(&k, 32);
  expect_shape(&p.out[0], "16,32,1", "output");
  expect_map(&p.out[0], "(2,1,-1)", "output");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 2, "2,3", "forward");

  sk_op_desc mx = op(SK_OP_REDUCE_MAX, "[16,32,64]", "(4,4,2)");
  set_axis(&mx, -1);
  sk_op_plan q = plan_ok(&mx, 32);
  expect_comm(&q, &q.fwd, SK_COLL_ALLREDUCE, SK_MAX, 1, 0, "0,1", "ReduceMax forward");

  /* ReduceMean: AllReduce(sum) then division by the group size */
  sk_op_desc mn = op(SK_OP_REDUCE_MEAN, "[16,32,64]", "(2,4,4)");
  set_axis(&mn, -1);
  sk_op_plan r = plan_ok(&mn, 32);
  expect_comm(&r, &r.fwd, SK_COLL_ALLREDUCE, SK_SUM, 0.25, 0, "0,1,2,3", "ReduceMean forward");
}

/* A reduced dim cut by a middle axis, with a repeat axis on the right: the group holds the
   cutting axis only, never the repeat axis. x [16,32,64], axis 1, (2,4,1) on 16. */
Test(ops_rules, reduce_split_axis_with_repeat) {
  sk_op_desc d = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(2,4,1)");
  set_axis(&d, 1);
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "2,4,1,2");
  expect_map(&p.out[0], "(3,1)", "output");
  expect_shape(&p.out[0], "16,64", "output");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,2,4,6", "forward over the 4 axis");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 9, "9,11,13,15", "forward, rank 9");
  /* every dim (no axis) with keep_dims: one group of all cutting axes */
  sk_op_desc a = op(SK_OP_REDUCE_SUM, "[16,32,64]", "(2,4,2)");
  a.keep_dims = true;
  sk_op_plan q = plan_ok(&a, 16);
  expect_map(&q.out[0], "(-1,-1,-1)", "output");
  expect_comm(&q, &q.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", "forward");
}

/* ==== layout operators ========================================================================= */

/* Transpose, hand-derived: x [16,32,64], perm (2,0,1), (2,4,8) on 64. MindSpore's TransposeInfo
   builds no Mirror (it declares none: the operator has no parameter). */
Test(ops_rules, transpose) {
  sk_op_desc d = op(SK_OP_TRANSPOSE, "[16,32,64]", "(2,4,8)");
  d.perm[0] = 2, d.perm[1] = 0, d.perm[2] = 1;
  sk_op_plan p = plan_ok(&d, 64);
  expect_dev_matrix(&p, "2,4,8");
  expect_map(&p.in[0], "(2,1,0)", "input");
  expect_map(&p.out[0], "(0,2,1)", "output");
  expect_shape(&p.out[0], "64,16,32", "output");
  expect_slice(&p.out[0], "8,8,8", "output");
  expect_none(&p.fwd, "forward");
  sk_op_desc r = op(SK_OP_TRANSPOSE, "[16,32,64]", "(2,4,4)");
  r.perm[0] = 2, r.perm[1] = 0, r.perm[2] = 1;
  sk_op_plan q = plan_ok(&r, 64);
  expect_dev_matrix(&q, "2,4,4,2");
  expect_map(&q.out[0], "(1,3,2)", "output with repeat");
  expect_none(&q.mirror[0], "Transpose declares no Mirror");
  sk_op_desc bad = op(SK_OP_TRANSPOSE, "[16,32,64]", "(2,4,8)");
  bad.perm[0] = 0, bad.perm[1] = 0, bad.perm[2] = 1;
  expect_reject(&bad, 64, "perm not a permutation", "Transpose", "perm", NULL);
  /* perm left zero-initialised (never given): said so, not "not a permutation" */
  sk_op_desc none = op(SK_OP_TRANSPOSE, "[16,32]", "(2,1)");
  expect_reject(&none, 8, "perm not given", "Transpose", "perm is missing", NULL);
  sk_op_desc one = op(SK_OP_TRANSPOSE, "[16]", "(2)"); /* rank 1: (0) is the only perm */
  plan_ok(&one, 8);
}

/* A perm that was given (desc.has_perm) is checked as one even when every entry is zero: (0,0)
   is no permutation, not a missing perm; rank 1's (0) still passes. */
Test(ops_rules, transpose_given_all_zero_perm) {
  sk_op_desc d = op(SK_OP_TRANSPOSE, "[16,32]", "(2,1)");
  d.has_perm = true;
  expect_reject(&d, 8, "perm (0,0) given", "Transpose: perm is not a permutation of 0..1 (entry 1 is 0)", NULL);
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "missing") == NULL, "%s", e.msg);
  sk_op_desc one = op(SK_OP_TRANSPOSE, "[16]", "(2)");
  one.has_perm = true;
  plan_ok(&one, 8);
  /* a desc that sets non-zero entries needs no flag, as before it existed */
  sk_op_desc old = op(SK_OP_TRANSPOSE, "[16,32]", "(2,1)");
  old.perm[0] = 1;
  sk_op_plan q = plan_ok(&old, 8);
  expect_shape(&q.out[0], "32,16", "output");
}

/* A layout as the kernel reads it: its tensor map in MindSpore's numbers. */
static void expect_kernel_map(sk_op_kind kind, const sk_op_plan *p, const char *want, const char *what) {
  sk_layout kl;
  sk_error e;
  cr_assert_eq(sk_op_kernel_layout(kind, p, 0, &kl, &e), SK_OK, "%s", e.msg);
  expect_map(&kl, want, what);
}

/* Master's reshape_test.cc (a 32-device stage, [32,512,7,7] -> [32,25088]; every test carries
   the DISABLED_ prefix, its values are master's ReshapeInfo's): the device matrix is the strategy
   as written with the repeat on the right (DISABLED_InferDevMatrixShape1: (4,1,1,1) gives
   [4,1,1,1,8]; DISABLED_InferDevMatrixShape2: (32,1,1,1) gives [32,1,1,1]); the input takes the
   strategy's cuts, the output is whole (DISABLED_GetTensorLayout1: [4,3,2,1] and [-1,-1];
   DISABLED_GetTensorLayout2: [3,2,1,0] and [-1,-1]; DISABLED_InferSliceShape1: [8,512,7,7] and
   [32,25088]; DISABLED_InferSliceShape2: [1,512,7,7] and [32,25088]); no forward operator
   (DISABLED_GetForwardOp1); two Mirror slots, the input's and the shape's
   (DISABLED_GetMirrorOPs1: size 2); (1,4,8) and two tuples are refused (DISABLED_CheckStrategy1,
   2). The 2020 source dropped the size-1 entries and put the repeat on the left ([8,4]), and the
   output kept the batch cut. The kernel reads the whole input: MindSpore replaces the operator by
   the redistribution into the whole output. */
Test(ops_rules, reshape_ms_case) {
  sk_op_desc d = op(SK_OP_RESHAPE, "[32,512,7,7]", "(4,1,1,1)");
  set_out_shapes(&d, "[32,25088]");
  sk_op_plan p = plan_ok(&d, 32);
  expect_dev_matrix(&p, "4,1,1,1,8");
  expect_map(&p.in[0], "(4,3,2,1)", "input");
  expect_map(&p.out[0], "(-1,-1)", "output");
  expect_shape(&p.out[0], "32,25088", "output");
  expect_slice(&p.in[0], "8,512,7,7", "input");
  expect_slice(&p.out[0], "32,25088", "output");
  expect_none(&p.fwd, "forward");
  expect_kernel_map(SK_OP_RESHAPE, &p, "(-1,-1,-1,-1)", "the kernel's input");
  /* the input is replicated along the repeat axis, on the right: consecutive ranks */
  expect_comm(&p, &p.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7", "Mirror");
  sk_op_desc d2 = op(SK_OP_RESHAPE, "[32,512,7,7]", "(32,1,1,1)");
  set_out_shapes(&d2, "[32,25088]");
  sk_op_plan q = plan_ok(&d2, 32);
  expect_dev_matrix(&q, "32,1,1,1");
  expect_map(&q.in[0], "(3,2,1,0)", "input");
  expect_map(&q.out[0], "(-1,-1)", "output");
  expect_slice(&q.in[0], "1,512,7,7", "input");
  expect_slice(&q.out[0], "32,25088", "output");
  expect_none(&q.mirror[0], "Mirror");
  /* DISABLED_CheckStrategy1, 2 */
  sk_op_desc b1 = op(SK_OP_RESHAPE, "[32,512,7,7]", "(1,4,8)");
  set_out_shapes(&b1, "[32,25088]");
  expect_reject(&b1, 32, "three entries for a rank-4 input", "Reshape", "input 0", NULL);
  sk_op_desc b2 = op(SK_OP_RESHAPE, "[32,512,7,7]", "(2,4,8,1),(2,4,8,1)");
  set_out_shapes(&b2, "[32,25088]");
  expect_reject(&b2, 32, "two tuples", "Reshape", "tuple", NULL);
  sk_op_desc b3 = op(SK_OP_RESHAPE, "[32,512,7,7]", "(4,1,1,1)");
  set_out_shapes(&b3, "[32,1000]");
  expect_reject(&b3, 32, "element counts differ", "Reshape", NULL);
}

/* A Reshape following its input (desc.follows_input, as the compiler plans a network's Reshape
   without a strategy: MindSpore gives it its producer's layout), hand-derived: a cut carries over
   to the output dim that starts where its input dim starts ([32,512,7,7] -> [32,25088]: dim 1's
   4-way cut becomes output dim 1's), and the kernel reads a cut that cannot (dim 3, 7 ways,
   inside an output dim) whole. No forward operator either way. */
Test(ops_rules, reshape_follows_input_carries_or_gathers_cuts) {
  sk_op_desc d = op(SK_OP_RESHAPE, "[32,512,7,7]", NULL);
  set_out_shapes(&d, "[32,25088]");
  d.follows_input = true, d.strategy[0][0] = 2, d.strategy[0][1] = 4, d.strategy[0][2] = d.strategy[0][3] = 1;
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "2,4");
  expect_map(&p.out[0], "(1,0)", "output");
  expect_slice(&p.out[0], "16,6272", "output");
  expect_none(&p.fwd, "forward");
  expect_kernel_map(SK_OP_RESHAPE, &p, "(1,0,-1,-1)", "the kernel's input: nothing gathered");
  sk_op_desc g = op(SK_OP_RESHAPE, "[32,512,7,7]", NULL);
  set_out_shapes(&g, "[32,25088]");
  g.follows_input = true, g.strategy[0][0] = 2, g.strategy[0][1] = g.strategy[0][2] = 1, g.strategy[0][3] = 7;
  sk_op_plan q = plan_ok(&g, 14);
  expect_dev_matrix(&q, "2,7");
  expect_map(&q.in[0], "(1,-1,-1,0)", "input");
  expect_map(&q.out[0], "(1,-1)", "output");
  expect_none(&q.fwd, "forward");
  expect_kernel_map(SK_OP_RESHAPE, &q, "(1,-1,-1,-1)", "the kernel's input: the 7-way cut gathered");
  /* alone, without a strategy: data parallel, carried */
  sk_op_desc a = op(SK_OP_RESHAPE, "[32,512,7,7]", NULL);
  set_out_shapes(&a, "[32,25088]");
  sk_op_plan r = plan_ok(&a, 8);
  expect_dev_matrix(&r, "8");
  expect_map(&r.out[0], "(0,-1)", "output");
  /* other operators' kernels read plan.in */
  sk_op_desc u = op(SK_OP_REDUCE_SUM, "[16,8]", "(2,4)");
  sk_op_plan pu = plan_ok(&u, 8);
  expect_kernel_map(SK_OP_REDUCE_SUM, &pu, "(1,0)", "ReduceSum's kernel input");
}

/* ExpandDims, hand-derived: x [16,32], (4,2) on 16; a -1 entry at the new axis. */
Test(ops_rules, expand_dims) {
  sk_op_desc d = op(SK_OP_EXPAND_DIMS, "[16,32]", "(4,2)");
  set_axis(&d, 1);
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "4,2,2");
  expect_map(&p.in[0], "(2,1)", "input");
  expect_map(&p.out[0], "(2,-1,1)", "output");
  expect_shape(&p.out[0], "16,1,32", "output");
  expect_slice(&p.out[0], "4,1,16", "output");
  expect_comm(&p, &p.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1", "Mirror over the right repeat axis");
  /* axis -1 is n + axis + 1 = 2: the new dim goes last */
  sk_op_desc n = op(SK_OP_EXPAND_DIMS, "[16,32]", "(4,2)");
  set_axis(&n, -1);
  sk_op_plan q = plan_ok(&n, 16);
  expect_shape(&q.out[0], "16,32,1", "output");
  expect_map(&q.out[0], "(2,1,-1)", "output");
  /* repeat_left: the repeat factor leads and the maps are not shifted */
  sk_op_desc l = op(SK_OP_EXPAND_DIMS, "[16,32]", "(4,2)");
  set_axis(&l, 1);
  l.repeat_left = true;
  sk_op_plan r = plan_ok(&l, 16);
  expect_dev_matrix(&r, "2,4,2");
  expect_map(&r.in[0], "(1,0)", "input");
  expect_map(&r.out[0], "(1,-1,0)", "output");
  expect_comm(&r, &r.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,8", "Mirror over the left repeat axis");
  sk_op_desc bad = op(SK_OP_EXPAND_DIMS, "[16,32]", "(4,2)");
  set_axis(&bad, 3);
  expect_reject(&bad, 16, "axis out of [-3, 2]", "ExpandDims", "axis", NULL);
}

/* The number of entries of the first tuple of a strategy text. */
static int tuple_len(const char *strategy) {
  int64_t rows[SK_OP_MAX_INPUTS + 2][SK_MAX_DIMS];
  int len[SK_OP_MAX_INPUTS + 2];
  return parse_tuples(strategy, rows, len, SK_OP_MAX_INPUTS + 2) > 0 ? len[0] : 0;
}

/* MindSpore's OneHot test (axis -1), an 8-device stage: indices [64], depth 10, output [64,10];
   the strategy is for the output, plus empty tuples for the on/off values. */
static sk_op_desc onehot(const char *indices, int64_t depth, const char *strategy, int axis) {
  char shapes[64];
  snprintf(shapes, sizeof shapes, "%s,[],[]", indices);
  sk_op_desc d = op(SK_OP_ONE_HOT, shapes, strategy);
  /* tuple 0 is for the output (rank + 1 entries): its length is always stated */
  if (strategy) d.strategy_len[0] = tuple_len(strategy);
  d.depth = depth;
  set_axis(&d, axis);
  return d;
}

Test(ops_rules, onehot_axis_last) {
  sk_op_desc d = onehot("[64]", 10, "(8,1),(),()", -1);
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "8,1");
  expect_map(&p.in[0], "(1,)", "indices");
  expect_map(&p.out[0], "(1,0)", "output");
  expect_shape(&p.out[0], "64,10", "output");
  expect_slice(&p.in[0], "8", "indices");
  expect_slice(&p.out[0], "8,10", "output");
  expect_none(&p.fwd, "forward");
  expect_none(&p.mirror[0], "no Mirror (MindSpore: mirror_ops empty)");
  sk_op_desc r = onehot("[64]", 10, "(4,1),(),()", -1);
  sk_op_plan pr = plan_ok(&r, 8);
  expect_dev_matrix(&pr, "4,1,2");
  /* replicated over the repeat axis, but still no Mirror: OneHotInfo's InferMirrorOps does
     nothing (the indices are integer labels, never a parameter) */
  for (int i = 0; i < 3; i++) expect_none(&pr.mirror[i], "OneHot declares no Mirror, even with a repeat");
  /* depth cut: each device keeps 5 classes */
  sk_op_desc s = onehot("[64]", 10, "(4,2),(),()", -1);
  sk_op_plan q = plan_ok(&s, 8);
  expect_dev_matrix(&q, "4,2");
  expect_slice(&q.in[0], "16", "indices");
  expect_slice(&q.out[0], "16,5", "output");
  expect_none(&q.fwd, "forward: the replaced graph shifts indices, no collective");
  sk_op_desc t = onehot("[64]", 10, "(2,2),(),()", -1);
  sk_op_plan u = plan_ok(&t, 8);
  expect_dev_matrix(&u, "2,2,2");
  expect_slice(&u.out[0], "32,5", "output");
  /* CheckStrategy1: one entry for a rank-2 output */
  sk_op_desc b = onehot("[64]", 10, "(16),(),()", -1);
  expect_reject(&b, 8, "tuple of one entry", "OneHot", "input 0", NULL);
}

/* The indices' tuple is measured against the output (one rank more): the message names the
   output's rank and says why, not "a rank-2 tensor", which the rank-1 indices are not. */
Test(ops_rules, onehot_tuple_length_names_the_output) {
  sk_op_desc d = onehot("[64]", 10, "(8),(),()", -1);
  sk_op_plan p;
  sk_error e;
  cr_assert_eq(sk_op_plan_make(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "OneHot: input 0's tuple has 1 entry for the rank-2 output") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "the indices' 1 dim, then the classes") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "rank-2 tensor") == NULL, "%s", e.msg);
  sk_op_desc m = onehot("[64,4]", 10, "(8,1),(),()", -1);
  cr_assert_eq(sk_op_plan_make(&m, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "input 0's tuple has 2 entries for the rank-3 output") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "the indices' 2 dims, then the classes") != NULL, "%s", e.msg);
  /* the scalars' tuples keep the usual wording */
  sk_op_desc v = onehot("[64]", 10, "(8,1),(1),()", -1);
  v.strategy_len[1] = 1;
  cr_assert_eq(sk_op_plan_make(&v, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "OneHot: input 1's tuple has 1 entry for a rank-0 tensor") != NULL, "%s", e.msg);
}

/* axis 0: output [depth, B]; the device matrix is the strategy reversed, [s1, s0], so that the
   batch stays on the left axis. MindSpore's axis-0 test (8 devices, output [10,64]); its newest
   version (disabled there) expects the repeat on the right, [4,1,2] for (1,4), and accepts (2,4). */
Test(ops_rules, onehot_axis_0) {
  sk_op_desc d = onehot("[64]", 10, "(1,8),(),()", 0);
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "8,1");
  expect_map(&p.in[0], "(1,)", "indices");
  expect_map(&p.out[0], "(0,1)", "output");
  expect_shape(&p.out[0], "10,64", "output");
  expect_slice(&p.out[0], "10,8", "output");
  sk_op_desc r = onehot("[64]", 10, "(1,4),(),()", 0);
  sk_op_plan q = plan_ok(&r, 8);
  expect_dev_matrix(&q, "4,1,2");
  expect_map(&q.in[0], "(2,)", "indices");
  expect_map(&q.out[0], "(1,2)", "output");
  sk_op_desc s = onehot("[64]", 10, "(2,4),(),()", 0);
  sk_op_plan t = plan_ok(&s, 8);
  expect_dev_matrix(&t, "4,2");
  expect_slice(&t.in[0], "16", "indices");
  expect_slice(&t.out[0], "5,16", "output");
}

Test(ops_rules, onehot_rank2_rejects) {
  /* indices [8,16] -> output [8,16,10]: only dim 0 may be cut, and axis must be -1 */
  sk_op_desc d = onehot("[8,16]", 10, "(8,1,1),(),()", -1);
  sk_op_plan p = plan_ok(&d, 8);
  expect_map(&p.in[0], "(2,1)", "indices");
  expect_map(&p.out[0], "(2,1,0)", "output");
  sk_op_desc r = onehot("[8,16]", 10, "(4,2,1),(),()", -1);
  expect_reject(&r, 8, "rank-2 indices, dim 1 cut", "OneHot", "dim 1", NULL);
  sk_op_desc a = onehot("[8,16]", 10, "(8,1,1),(),()", 0);
  expect_reject(&a, 8, "rank-2 indices with axis 0", "OneHot", "axis", NULL);
}

/* ==== Gather ==================================================================================== */

/* Table not cut along axis 0 ("column split"): master's NormalImpl (gather_info.cc,
   NormalImpl::InferDevMatrixShape / InferTensorMap; master has no C++ test of Gather) puts the
   indices' strategy first, then the table's: [2,2,1,4]; the table maps to the last two axes, the
   indices to the first two, the output takes the indices' map at the axis position. The 2020
   rule put the table first ([1,4,2,2]); the slices are the same. */
Test(ops_rules, gather_column_split_indices_split) {
  sk_op_desc d = op(SK_OP_GATHER, "[64,32],[16,8]", "(1,4),(2,2)");
  d.params = 1;
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "2,2,1,4");
  expect_map(&p.in[0], "(1,0)", "table");
  expect_map(&p.in[1], "(3,2)", "indices");
  expect_map(&p.out[0], "(3,2,0)", "output");
  expect_shape(&p.out[0], "16,8,32", "output");
  expect_slice(&p.in[0], "64,8", "table");
  expect_slice(&p.out[0], "8,4,8", "output");
  expect_none(&p.fwd, "forward");
  /* the table is replicated over the indices' axes, the first two: strides 8 and 4 */
  expect_comm(&p, &p.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,4,8,12", "table Mirror");
  expect_none(&p.mirror[1], "indices have no Mirror");
  /* 8 devices, indices (2,1): no repeat, the size-1 entries kept in place */
  sk_op_desc e = op(SK_OP_GATHER, "[64,32],[16,8]", "(1,4),(2,1)");
  sk_op_plan q = plan_ok(&e, 8);
  expect_dev_matrix(&q, "2,1,1,4");
  expect_map(&q.in[0], "(1,0)", "table");
  expect_map(&q.in[1], "(3,2)", "indices");
  expect_map(&q.out[0], "(3,2,0)", "output");
}

/* Row split (axis 0 cut): indices whole; each device looks up its own rows; the output is a
   partial sum completed by a ReduceScatter(sum) along the row-cutting axis (newest GatherInfo:
   the group is the devices along the axis dim), which leaves output dim 0 cut by it. */
Test(ops_rules, gather_row_split) {
  sk_op_desc d = op(SK_OP_GATHER, "[64,32],[16,8]", "(8,1),(1,1)");
  d.params = 1;
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "8,1");
  expect_map(&p.in[0], "(1,0)", "table");
  expect_map(&p.in[1], "(-1,-1)", "indices");
  expect_map(&p.out[0], "(1,-1,0)", "output");
  expect_slice(&p.out[0], "2,8,32", "output");
  expect_comm(&p, &p.fwd, SK_COLL_REDUCE_SCATTER, SK_SUM, 1, 3, "0,1,2,3,4,5,6,7", "forward");
  expect_none(&p.mirror[0], "table cut 8 ways on 8 devices");
  /* with a repeat (16 devices): the newest GatherInfo puts it on the LEFT for a row split */
  sk_op_plan q = plan_ok(&d, 16);
  expect_dev_matrix(&q, "2,8,1");
  expect_map(&q.in[0], "(1,0)", "table");
  expect_map(&q.out[0], "(1,-1,0)", "output");
  expect_comm(&q, &q.fwd, SK_COLL_REDUCE_SCATTER, SK_SUM, 1, 9, "8,9,10,11,12,13,14,15", "forward, rank 9");
  expect_comm(&q, &q.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,8", "table Mirror over the left repeat axis");
  /* indices' dim 0 (12) not divisible by the row cut: AllReduce, output dim 0 whole */
  sk_op_desc a = op(SK_OP_GATHER, "[64,32],[12]", "(8,1),(1)");
  sk_op_plan r = plan_ok(&a, 8);
  expect_map(&r.out[0], "(-1,0)", "output");
  expect_comm(&r, &r.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1,2,3,4,5,6,7", "forward AllReduce");
}

/* MindSpore's "shard batch and axis" (GatherInfo::ShardBatchAndAxis, ShardBatchAndAxisImpl):
   axis 0, a 2-D table cut (a,1) and 2-D indices cut (c,1), a*c the stage's devices and neither
   alone. Device matrix [c, a]; table map (0,-1), indices (1,-1), output (1,-1,-1); the forward
   AllReduce(sum) runs along a (the group is the device matrix's dim 1); the table's Mirror
   (GatherInfo::InferMirrorOps, by its tensor map) along c; the indices have none. */
Test(ops_rules, gather_shard_batch_and_axis) {
  sk_op_desc d = op(SK_OP_GATHER, "[64,32],[16,8]", "(2,1),(4,1)");
  d.params = 1;
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "4,2");
  expect_map(&p.in[0], "(0,-1)", "table");
  expect_map(&p.in[1], "(1,-1)", "indices");
  expect_map(&p.out[0], "(1,-1,-1)", "output");
  expect_shape(&p.out[0], "16,8,32", "output");
  expect_slice(&p.in[0], "32,32", "table");
  expect_slice(&p.in[1], "4,8", "indices");
  expect_slice(&p.out[0], "4,8,32", "output");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 0, "0,1", "forward AllReduce along the table's rows");
  expect_comm(&p, &p.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 5, "4,5", "forward, rank 5");
  expect_comm(&p, &p.mirror[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 1, "1,3,5,7", "table Mirror along the indices' rows");
  expect_comm(&p, &p.grad[0], SK_COLL_ALLREDUCE, SK_SUM, 1, 1, "1,3,5,7", "table gradient");
  expect_none(&p.mirror[1], "indices have no Mirror");
  expect_none(&p.bwd_in[0], "the table's gradient is summed by its Mirror");
  /* the device count 16: (8,1),(2,1) is the same mode */
  sk_op_desc e = op(SK_OP_GATHER, "[64,32],[16,8]", "(8,1),(2,1)");
  sk_op_plan q = plan_ok(&e, 16);
  expect_dev_matrix(&q, "2,8");
  expect_comm(&q, &q.fwd, SK_COLL_ALLREDUCE, SK_SUM, 1, 9, "8,9,10,11,12,13,14,15", "forward, rank 9");
  /* outside the mode the indices must be whole: a repeat (a*c < devices), a cut second dim,
     1-D indices, a 1-D table, axis 1 */
  sk_op_desc b1 = op(SK_OP_GATHER, "[64,32],[16,8]", "(2,1),(2,1)");
  expect_reject(&b1, 8, "a*c below the device count", "Gather", "input 1 dim 0", NULL);
  sk_op_desc b2 = op(SK_OP_GATHER, "[64,32],[16,8]", "(2,1),(2,2)");
  expect_reject(&b2, 8, "indices' dim 1 cut", "Gather", "input 1", NULL);
  sk_op_desc b3 = op(SK_OP_GATHER, "[64,32],[16]", "(2,1),(4)");
  expect_reject(&b3, 8, "1-D indices", "Gather", "input 1 dim 0", NULL);
  sk_op_desc b4 = op(SK_OP_GATHER, "[64],[16,8]", "(2),(4,1)");
  expect_reject(&b4, 8, "1-D table", "Gather", "input 1 dim 0", NULL);
  sk_op_desc b5 = op(SK_OP_GATHER, "[64,32],[16,8]", "(2,2),(2,1)");
  expect_reject(&b5, 8, "table's dim 1 cut", "Gather", "input 1 dim 0", NULL);
  sk_op_desc b6 = op(SK_OP_GATHER, "[32,64],[16,8]", "(1,2),(4,1)");
  set_axis(&b6, 1);
  expect_reject(&b6, 8, "axis 1", "Gather", "input 1 dim 0", NULL);
}

Test(ops_rules, gather_rejects) {
  sk_op_desc d = op(SK_OP_GATHER, "[64,32],[16,8]", "(8,1),(1,2)");
  expect_reject(&d, 16, "row split with split indices", "Gather", "input 1", NULL);
  /* a repeat with the rows and the columns both cut */
  sk_op_desc r = op(SK_OP_GATHER, "[64,32],[16,8]", "(4,2),(1,1)");
  expect_reject(&r, 16, "row split, column cut, repeat", "Gather", "repeat", NULL);
}

/* ==== data input ================================================================================ */

/* MindSpore's GetNext test, an 8-device stage: outputs [64,32] and [64], no strategy tuples.
   The stored test maps output 0 as (1,0); the newest GetNextInfo maps a dim of strategy 1 as -1,
   so (1,-1): the slices agree either way. */
Test(ops_rules, get_next) {
  sk_op_desc d = op(SK_OP_GET_NEXT, "", NULL);
  set_out_shapes(&d, "[64,32],[64]");
  sk_op_plan p = plan_ok(&d, 8);
  cr_expect_eq(p.ninputs, 0);
  cr_expect_eq(p.noutputs, 2);
  expect_dev_matrix(&p, "8,1");
  expect_map(&p.out[0], "(1,-1)", "output 0");
  expect_map(&p.out[1], "(1,)", "output 1");
  expect_slice(&p.out[0], "8,32", "output 0");
  expect_slice(&p.out[1], "8", "output 1");
  expect_none(&p.fwd, "forward");
  /* full_batch: every device reads everything; the repeat goes on the left */
  sk_op_desc f = d;
  f.full_batch = true;
  sk_op_plan q = plan_ok(&f, 8);
  expect_dev_matrix(&q, "8,1,1");
  expect_map(&q.out[0], "(-1,-1)", "output 0");
  expect_slice(&q.out[0], "64,32", "output 0");
  /* the stored test's InferDevMatrixShape1 passes ((),()): empty tuples, as many as written, pass
     (master's GetNextInfo::CheckStrategy never counts them); the plan is the one above */
  sk_op_desc e = op(SK_OP_GET_NEXT, "", "(),()");
  set_out_shapes(&e, "[64,32],[64]");
  sk_op_plan pe = plan_ok(&e, 8);
  expect_dev_matrix(&pe, "8,1");
  expect_map(&pe.out[0], "(1,-1)", "output 0 under ((),())");
  /* CheckStrategy2: non-empty tuples */
  sk_op_desc b = op(SK_OP_GET_NEXT, "", "(8,1),(8)");
  set_out_shapes(&b, "[64,32],[64]");
  expect_reject(&b, 8, "non-empty tuples", "GetNext", "tuple 0", NULL);
}

/* VirtualDataset, newest rule: the device matrix is the longest input's strategy, the repeat
   factor on the LEFT; a dim cut by the shard number maps to its axis, others -1. No Mirror. */
Test(ops_rules, virtual_dataset) {
  sk_op_desc d = op(SK_OP_VIRTUAL_DATASET, "[32,16],[32]", "(4,1),(4)");
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "2,4,1");
  expect_map(&p.in[0], "(1,-1)", "input 0");
  expect_map(&p.in[1], "(1,)", "input 1");
  expect_map(&p.out[0], "(1,-1)", "output 0");
  expect_map(&p.out[1], "(1,)", "output 1");
  expect_slice(&p.out[0], "8,16", "output 0");
  expect_none(&p.fwd, "forward");
  expect_none(&p.mirror[0], "VirtualDataset declares no Mirror");
  /* ranks sharing a batch slice are 4 apart: rank 0 and rank 4 hold rows 0..7 */
  sk_slice s0, s4;
  sk_error e;
  cr_assert_eq(sk_layout_slice(&p.out[0], 0, &s0, &e), SK_OK);
  cr_assert_eq(sk_layout_slice(&p.out[0], 4, &s4, &e), SK_OK);
  cr_expect_eq(s0.start[0], s4.start[0], "repeat on the left: ranks 0 and 4 replicate");
  /* default strategy: dim 0 cut by every device; full_batch: nothing cut */
  sk_op_desc n = op(SK_OP_VIRTUAL_DATASET, "[32,16],[32]", NULL);
  sk_op_plan q = plan_ok(&n, 8);
  expect_dev_matrix(&q, "8,1");
  expect_map(&q.out[0], "(1,-1)", "output 0");
  n.full_batch = true;
  sk_op_plan r = plan_ok(&n, 8);
  expect_dev_matrix(&r, "8,1,1");
  expect_map(&r.out[0], "(-1,-1)", "output 0");
  expect_map(&r.out[1], "(-1,)", "output 1");
  sk_op_desc b1 = op(SK_OP_VIRTUAL_DATASET, "[32,16],[32]", "(4,1),(2)");
  expect_reject(&b1, 8, "different shard numbers", "VirtualDataset", "input 1", NULL);
  sk_op_desc b2 = op(SK_OP_VIRTUAL_DATASET, "[32,16],[32]", "(4,2),(4)");
  expect_reject(&b2, 8, "two dims cut", "VirtualDataset", "input 0", NULL);
}

/* VirtualDataset, newest VirtualDatasetInfo::CheckStrategy: the one cut dim may be any dim ("only
   support shard in one dim" counts the cut dims, not which); every input's cut dim maps to the
   axis where the longest input's strategy holds the shard number; an input may stay whole. */
Test(ops_rules, virtual_dataset_any_dim) {
  sk_op_desc d = op(SK_OP_VIRTUAL_DATASET, "[32,16],[16]", "(1,4),(4)");
  sk_op_plan p = plan_ok(&d, 8);
  expect_dev_matrix(&p, "2,1,4");
  expect_map(&p.in[0], "(-1,0)", "input 0");
  expect_map(&p.in[1], "(0,)", "input 1");
  expect_map(&p.out[0], "(-1,0)", "output 0");
  expect_slice(&p.out[0], "32,4", "output 0");
  expect_slice(&p.out[1], "4", "output 1");
  expect_none(&p.mirror[0], "VirtualDataset declares no Mirror");
  /* the shorter input cut along dim 0, the longer along dim 1: one axis */
  sk_op_desc s = op(SK_OP_VIRTUAL_DATASET, "[8],[32,4,2]", "(2),(1,2,1)");
  sk_op_plan q = plan_ok(&s, 8);
  expect_dev_matrix(&q, "4,1,2,1");
  expect_map(&q.in[0], "(1,)", "input 0");
  expect_map(&q.in[1], "(-1,1,-1)", "input 1");
  /* an input left whole */
  sk_op_desc w = op(SK_OP_VIRTUAL_DATASET, "[32,16],[32]", "(4,1),(1)");
  sk_op_plan u = plan_ok(&w, 8);
  expect_map(&u.in[0], "(1,-1)", "input 0");
  expect_map(&u.in[1], "(-1,)", "input 1, whole");
  /* full_batch leaves every input whole whatever the strategy */
  d.full_batch = true;
  sk_op_plan f = plan_ok(&d, 8);
  expect_map(&f.in[0], "(-1,-1)", "input 0 under full_batch");
  expect_map(&f.in[1], "(-1,)", "input 1 under full_batch");
  /* the longest input whole while another is cut: no axis to map the cut to */
  sk_op_desc b = op(SK_OP_VIRTUAL_DATASET, "[32,16],[32]", "(1,1),(4)");
  expect_reject(&b, 8, "the longest input not cut", "VirtualDataset", "longest", NULL);
}

/* Flatten: only the batch dim may be cut. */
Test(ops_rules, flatten) {
  sk_op_desc d = op(SK_OP_FLATTEN, "[16,4,8]", "(8,1,1)");
  sk_op_plan p = plan_ok(&d, 16);
  expect_dev_matrix(&p, "8,1,1,2");
  expect_shape(&p.out[0], "16,32", "output");
  expect_map(&p.out[0], "(3,-1)", "output");
  sk_op_desc r = op(SK_OP_FLATTEN, "[16,4,8]", "(2,2,1)");
  expect_reject(&r, 16, "dim 1 cut", "Flatten", "dim 1", NULL);
}

/* ==== the shared strategy checks, for one operator of each family ============================== */

typedef struct shared_case {
  sk_op_kind kind;
  const char *shapes;
  const char *good;   /* a valid strategy, for context */
  const char *ntuple; /* one tuple too few or many */
  const char *tlen;   /* input 0's tuple one entry short */
  const char *nodiv;  /* a value that does not divide input 0's dim 1 */
  const char *npow2;  /* a non-power-of-two on input 0's dim 0 (8 devices) */
  const char *toobig; /* a product above the device count */
} shared_case;

static const shared_case SHARED[] = {
    {SK_OP_MATMUL, "[24,12],[12,16]", "(2,4),(4,1)", "(2,4)", "(2),(4,1)", "(1,8),(8,1)", "(3,1),(1,1)", "(4,4),(4,1)"},
    {SK_OP_RELU, "[24,12]", "(2,2)", "(2,2),(2,2)", "(2)", "(1,8)", "(3,1)", "(4,4)"},
    {SK_OP_ADD, "[24,12],[24,12]", "(2,2),(2,2)", "(2,2)", "(2),(2,2)", "(1,8),(1,8)", "(3,1),(3,1)", "(4,4),(4,4)"},
    {SK_OP_SOFTMAX, "[24,12,16]", "(2,2,1)", "(2,2,1),(1)", "(2,2)", "(1,8,1)", "(3,1,1)", "(4,4,1)"},
    {SK_OP_REDUCE_SUM, "[24,12,16]", "(2,2,1)", "(2,2,1),(1)", "(2,2)", "(1,8,1)", "(3,1,1)", "(4,4,1)"},
    {SK_OP_TRANSPOSE, "[24,12]", "(2,2)", "(2,2),(2,2)", "(2)", "(1,8)", "(3,1)", "(4,4)"},
    {SK_OP_EXPAND_DIMS, "[24,12]", "(2,2)", "(2,2),(2,2)", "(2)", "(1,8)", "(3,1)", "(4,4)"},
    {SK_OP_LAYER_NORM, "[24,12,16],[16],[16]", "(2,2,1),(1),(1)", "(2,2,1),(1)", "(2,2),(1),(1)", "(1,8,1),(1),(1)",
     "(3,1,1),(1),(1)", "(4,4,1),(1),(1)"},
    {SK_OP_GATHER, "[24,12],[16]", "(1,2),(2)", "(1,2)", "(2),(2)", "(1,8),(1)", "(3,1),(1)", "(1,4),(4)"},
};

static void shared_setup(sk_op_desc *d) {
  if (d->kind == SK_OP_LAYER_NORM) set_axis(d, 2);
  if (d->kind == SK_OP_TRANSPOSE) d->perm[0] = 1, d->perm[1] = 0;
  if (d->kind == SK_OP_EXPAND_DIMS) set_axis(d, 0);
  if (d->kind == SK_OP_REDUCE_SUM) set_axis(d, -1);
}

static sk_op_desc shared_desc(const shared_case *c, const char *strategy) {
  sk_op_desc d = op(c->kind, c->shapes, strategy);
  shared_setup(&d);
  return d;
}

Test(ops_rules, shared_strategy_checks) {
  for (size_t i = 0; i < sizeof SHARED / sizeof SHARED[0]; i++) {
    const shared_case *c = &SHARED[i];
    const char *name = sk_op_kind_name(c->kind);
    sk_op_desc g = shared_desc(c, c->good);
    plan_ok(&g, 8);
    sk_op_desc d;
    d = shared_desc(c, c->ntuple);
    expect_reject(&d, 8, "wrong tuple count", name, "tuple", NULL);
    d = shared_desc(c, c->tlen);
    expect_reject(&d, 8, "short tuple", name, "input 0", NULL);
    d = shared_desc(c, c->nodiv);
    expect_reject(&d, 8, "value does not divide dim 1", name, "dim 1", NULL);
    /* on 8 devices the power-of-two check fires first (MindSpore checks each value before the
       device count): the message names the value's dim */
    d = shared_desc(c, c->npow2);
    expect_reject(&d, 8, "3 on 8 devices", name, "dim 0", "power", NULL);
    d = shared_desc(c, c->toobig);
    expect_reject(&d, 8, "product above the devices", name, "devices", NULL);
  }
}

/* The power-of-two check is skipped when the device count is not a power of two (newest
   CheckStrategyByVector): 3 on 12 devices is accepted, with a repeat of 4. */
Test(ops_rules, power_of_two_skipped_on_12_devices) {
  sk_op_desc d = op(SK_OP_RELU, "[24,30]", "(3,1)");
  sk_op_plan p = plan_ok(&d, 12);
  expect_dev_matrix(&p, "3,1,4");
  expect_slice(&p.out[0], "8,30", "output");
  sk_op_desc m = op(SK_OP_MATMUL, "[24,30],[30,16]", "(3,1),(1,1)");
  sk_op_plan q = plan_ok(&m, 12);
  expect_dev_matrix(&q, "3,1,1,4");
}
