/* MindSpore master's offline resharding operator lists, replayed on shardkit's layouts.

   `_get_resharding_operator_map(from_layout, to_layout, rank)` (mindspore/parallel/_tensor.py)
   returns, for a rank and every rank whose data reaches it through an AllConcat, a list of
   (op, args): ("AllConcat", group + [axis]), ("StridedSlice", begin + end + strides),
   ("Reshape", shape). The lists below are the expected maps of test_reshard_operator_map_1 ..
   _5 in tests/ut/python/parallel/test_redist_operator_map.py (repository
   mindspore-ai/mindspore_test, commit 6f4c14939dee2f0fe5c67eb30cda9bacd162f38e), rank 0's
   call, every rank of each map.

   shardkit does not produce these lists yet (docs/redistribution-across.md section 10 sets
   them beside what MindSpore mode plans). What this suite checks is that they and shardkit's
   layouts agree on the data: every rank of a map starts from its source slice as
   sk_layout_slice gives it (the tensor holds its flat indices), the lists are replayed step by
   step (an AllConcat takes the group members' tensors of the same step), and each rank must
   end with exactly its target slice. A wrong reading of MindSpore's numeric or tuple maps, of
   its device matrices, or of its row-major rank order fails here. */
#include <criterion/criterion.h>
#include <string.h>

#include "sk_layout.h"

#define OM_MAX_EL 64 /* [8,8] */
#define OM_MAX_OPS 6
#define OM_MAX_RANKS 8

typedef struct om_op {
  char kind; /* 'C' AllConcat, 'S' StridedSlice, 'R' Reshape */
  int n;     /* args */
  int args[12];
} om_op;

typedef struct om_case {
  const char *name;
  int from_nd, from_dev[3];
  const char *from_map;
  int to_nd, to_dev[3];
  const char *to_map;
  int nranks, ranks[OM_MAX_RANKS], nops;
  om_op ops[OM_MAX_RANKS][OM_MAX_OPS]; /* per rank, in ranks' order */
} om_case;

#define C2(a, b, ax) {'C', 3, {a, b, ax}}
#define C4(a, b, c, d, ax) {'C', 5, {a, b, c, d, ax}}
#define R2(a, b) {'R', 2, {a, b}}
#define R3(a, b, c) {'R', 3, {a, b, c}}
#define R4(a, b, c, d) {'R', 4, {a, b, c, d}}
#define S2(b0, b1, e0, e1) {'S', 6, {b0, b1, e0, e1, 1, 1}}

static const om_case cases[] = {
    {"test_reshard_operator_map_1", 2, {2, 4}, "(0,-1)", 3, {2, 2, 2}, "(1,-1)", 2, {0, 1}, 1,
     {{C2(0, 1, 0)}, {C2(0, 1, 0)}}},
    {"test_reshard_operator_map_2", 2, {4, 2}, "(1,-1)", 3, {2, 2, 2}, "(1,-1)", 4, {0, 2, 4, 6}, 5,
     {{C2(0, 2, 0), R3(1, 4, 8), C2(0, 4, 0), R2(8, 8), S2(0, 0, 4, 8)},
      {C2(0, 2, 0), R3(1, 4, 8), C2(2, 6, 0), R2(8, 8), S2(4, 0, 8, 8)},
      {C2(4, 6, 0), R3(1, 4, 8), C2(0, 4, 0), R2(8, 8), S2(0, 0, 4, 8)},
      {C2(4, 6, 0), R3(1, 4, 8), C2(2, 6, 0), R2(8, 8), S2(4, 0, 8, 8)}}},
    {"test_reshard_operator_map_3", 3, {2, 2, 2}, "((0,2,1),-1)", 2, {4, 2}, "(0,-1)", 4, {0, 2, 4, 6}, 3,
     {{R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)},
      {R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)},
      {R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)},
      {R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)}}},
    {"test_reshard_operator_map_4", 3, {2, 2, 2}, "((0,1),-1)", 2, {4, 2}, "(0,-1)", 2, {0, 2}, 3,
     {{R3(1, 2, 8), R2(2, 8), C2(0, 2, 0)}, {R3(1, 2, 8), R2(2, 8), C2(0, 2, 0)}}},
    {"test_reshard_operator_map_5", 3, {2, 2, 2}, "((0,2),1)", 2, {4, 2}, "(0,-1)", 4, {0, 2, 4, 6}, 4,
     {{R3(1, 2, 4), C2(0, 2, 2), C2(0, 4, 0), R2(4, 8)},
      {R3(1, 2, 4), C2(0, 2, 2), C2(2, 6, 0), R2(4, 8)},
      {R3(1, 2, 4), C2(4, 6, 2), C2(0, 4, 0), R2(4, 8)},
      {R3(1, 2, 4), C2(4, 6, 2), C2(2, 6, 0), R2(4, 8)}}},
};

/* A rank's local tensor: row-major values (flat indices of the [8,8] tensor). */
typedef struct om_tensor {
  int nd;
  int shape[4];
  int v[OM_MAX_EL];
} om_tensor;

static int om_count(const om_tensor *t) {
  int n = 1;
  for (int d = 0; d < t->nd; d++) n *= t->shape[d];
  return n;
}

static sk_layout om_layout(int nd, const int *dev, const char *map_text) {
  static const char *const names[] = {"m0", "m1", "m2"};
  sk_mesh m;
  sk_dim_map ms[SK_MAX_DIMS];
  sk_layout l;
  int nm = 0;
  int64_t shape[2] = {8, 8};
  sk_error e;
  cr_assert_eq(sk_mesh_init(&m, nd, dev, names, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_ms_map_parse(map_text, ms, &nm, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_from_ms_map(&l, &m, nm, shape, ms, &e), SK_OK, "%s: %s", map_text, e.msg);
  return l;
}

/* rank's slice of the [8,8] tensor whose element (i,j) holds 8*i+j. */
static void om_slice(const sk_layout *l, int rank, om_tensor *t) {
  sk_slice s;
  sk_error e;
  cr_assert_eq(sk_layout_slice(l, rank, &s, &e), SK_OK, "%s", e.msg);
  t->nd = 2;
  t->shape[0] = (int)(s.stop[0] - s.start[0]), t->shape[1] = (int)(s.stop[1] - s.start[1]);
  int k = 0;
  for (int64_t i = s.start[0]; i < s.stop[0]; i++)
    for (int64_t j = s.start[1]; j < s.stop[1]; j++) t->v[k++] = (int)(8 * i + j);
}

/* Concatenates parts[0..n) along axis into out (all of one rank and equal off the axis). */
static void om_concat(const om_tensor *const *parts, int n, int axis, om_tensor *out) {
  const om_tensor *p0 = parts[0];
  cr_assert(axis >= 0 && axis < p0->nd, "concat axis %d of a %d-dim tensor", axis, p0->nd);
  int outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= p0->shape[d];
  for (int d = axis + 1; d < p0->nd; d++) inner *= p0->shape[d];
  *out = *p0;
  out->shape[axis] = 0;
  for (int q = 0; q < n; q++) out->shape[axis] += parts[q]->shape[axis];
  cr_assert(om_count(out) <= OM_MAX_EL);
  int k = 0;
  for (int o = 0; o < outer; o++)
    for (int q = 0; q < n; q++) {
      int run = parts[q]->shape[axis] * inner;
      memcpy(out->v + k, parts[q]->v + o * run, (size_t)run * sizeof(int));
      k += run;
    }
}

/* begin + end + strides over a 2-dim tensor (all the lists' slices are 2-dim, stride 1). */
static void om_strided_slice(om_tensor *t, const om_op *op) {
  cr_assert(t->nd == 2 && op->n == 6 && op->args[4] == 1 && op->args[5] == 1);
  om_tensor out = {2, {op->args[2] - op->args[0], op->args[3] - op->args[1]}, {0}};
  int k = 0;
  for (int i = op->args[0]; i < op->args[2]; i++)
    for (int j = op->args[1]; j < op->args[3]; j++) out.v[k++] = t->v[i * t->shape[1] + j];
  *t = out;
}

static int om_index(const om_case *c, int rank) {
  for (int i = 0; i < c->nranks; i++)
    if (c->ranks[i] == rank) return i;
  cr_assert_fail("%s: group member %d has no list in the map", c->name, rank);
  return -1;
}

/* One step of every rank's list; AllConcat reads the members' tensors from before the step. */
static void om_step(const om_case *c, int s, om_tensor *cur) {
  om_tensor next[OM_MAX_RANKS];
  for (int i = 0; i < c->nranks; i++) {
    const om_op *op = &c->ops[i][s];
    next[i] = cur[i];
    if (op->kind == 'R') {
      om_tensor *t = &next[i];
      int before = om_count(t);
      t->nd = op->n;
      for (int d = 0; d < op->n; d++) t->shape[d] = op->args[d];
      cr_assert_eq(om_count(t), before, "%s rank %d step %d: Reshape changes the element count", c->name,
                   c->ranks[i], s);
    } else if (op->kind == 'S') {
      om_strided_slice(&next[i], op);
    } else {
      const om_tensor *parts[OM_MAX_RANKS];
      for (int q = 0; q < op->n - 1; q++) parts[q] = &cur[om_index(c, op->args[q])];
      om_concat(parts, op->n - 1, op->args[op->n - 1], &next[i]);
    }
  }
  memcpy(cur, next, (size_t)c->nranks * sizeof *cur);
}

/* Replays c's lists from c's source slices; whether every rank ends with its target slice (on
   the first one that does not, *bad_rank and *bad_at say where). */
static bool om_replay(const om_case *c, int *bad_rank, int *bad_at) {
  sk_layout from = om_layout(c->from_nd, c->from_dev, c->from_map);
  sk_layout to = om_layout(c->to_nd, c->to_dev, c->to_map);
  om_tensor cur[OM_MAX_RANKS], want;
  for (int i = 0; i < c->nranks; i++) om_slice(&from, c->ranks[i], &cur[i]);
  for (int s = 0; s < c->nops; s++) om_step(c, s, cur);
  for (int i = 0; i < c->nranks; i++) {
    om_slice(&to, c->ranks[i], &want);
    *bad_rank = c->ranks[i], *bad_at = -1;
    if (om_count(&cur[i]) != om_count(&want)) return false;
    for (int k = 0; k < om_count(&want); k++)
      if (cur[i].v[k] != want.v[k]) return *bad_at = k, false;
  }
  return true;
}

static void om_run(const om_case *c) {
  int rank = -1, at = -1;
  cr_assert(om_replay(c, &rank, &at), "%s: rank %d does not end with its target slice (element %d; -1: size)",
            c->name, rank, at);
}

Test(ms_opmap, reshard_operator_map_1) { om_run(&cases[0]); }
Test(ms_opmap, reshard_operator_map_2) { om_run(&cases[1]); }
Test(ms_opmap, reshard_operator_map_3) { om_run(&cases[2]); }
Test(ms_opmap, reshard_operator_map_4) { om_run(&cases[3]); }
Test(ms_opmap, reshard_operator_map_5) { om_run(&cases[4]); }

/* The replay tells readings apart: _5's lists on the source map with its tuple in the other
   order ((2,0) instead of (0,2): the other axis major) leave some rank with the wrong rows, and
   so do _3's lists with the AllConcat group in reverse order. */
Test(ms_opmap, other_readings_fail) {
  int rank = -1, at = -1;
  om_case c = cases[4];
  c.from_map = "((2,0),1)";
  cr_expect(!om_replay(&c, &rank, &at), "_5 with the tuple reversed still replays right");
  c = cases[2];
  for (int i = 0; i < c.nranks; i++)
    for (int q = 0; q < 2; q++) {
      int t = c.ops[i][2].args[q];
      c.ops[i][2].args[q] = c.ops[i][2].args[3 - q], c.ops[i][2].args[3 - q] = t;
    }
  cr_expect(!om_replay(&c, &rank, &at), "_3 with the group reversed still replays right");
}
