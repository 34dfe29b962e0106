/* MindSpore master's operator lists, produced by shardkit (sk_redist_ms_oplist) and replayed.

   Master writes a redistribution for one rank as a list of (op, args): ('AllConcat', group +
   [axis]), ('StridedSlice', begin + end + strides), ('Reshape', shape), ('AlltoAll',
   [split_count, split_dim, concat_dim] + group). Two producers are pinned here, each with the
   test that pins it in MindSpore's repository:
   - `_get_resharding_operator_map(from, to, rank)` (mindspore/parallel/_tensor.py): the map
     from the rank and every rank its AllConcats reach to their lists, with enable_redist_opt
     on. Cases test_reshard_operator_map_1 .. _8 of tests/ut/python/parallel/
     test_redist_operator_map.py, repository mindspore-ai/mindspore_test, commit
     e07d11760719d80017cb12116c19bde5b26cf0b4 (_7 and _8 set enable_alltoall). _1 .. _5 are
     unchanged from commit 6f4c14939dee2f0fe5c67eb30cda9bacd162f38e.
   - `_transform_tensor_by_layout` and `_get_needed_rank_transform_operator_map_by_layouts`
     with enable_redist_opt off, and `_generate_transform_operator_stack`: the cases of
     tests/ut/python/parallel/test_transform_tensor.py, mindspore-ai/mindspore_test, commit
     41e2430b02cbfce484ad20bf164df30aacfdb9d1.
   What is checked:
   - exact: for every rank of each map, sk_redist_ms_oplist's list equals master's, operator by
     operator and argument by argument; the map's ranks are the ones master's rank walk reaches
     (om_needed below follows its rule); the operator stack of test_generate_transform_operator_
     stack_4 and _2, and the stack of _3: its length (79, what master asserts) and its entries
     per level.
   - data: master's lists of the [8,8] and [16,16] maps are replayed rank by rank (each rank
     starts from its source slice as sk_layout_slice gives it, the tensor holding its flat
     indices, an AllConcat takes the group members' tensors of the same step, an AlltoAll
     their pieces) and every rank must end with exactly its target slice; so are shardkit's
     own lists for every rank of those cases (the AlltoAll of _7 included) and for all 64 ranks
     of stack_3 (a 3-dim tensor, ten operators). A wrong reading of
     MindSpore's maps, tuple maps, device matrices or rank order fails here. */
#include <criterion/criterion.h>
#include <string.h>

#include "sk_redist.h"

#define OM_MAX_EL 16384 /* stack_3's largest gathered slice */
#define OM_MAX_OPS 12
#define OM_MAX_RANKS 8     /* ranks of a pinned map */
#define OM_REPLAY_RANKS 64 /* ranks a replay runs */
#define OM_MAX_ARGS 40

typedef struct om_op {
  char kind; /* 'C' AllConcat, 'S' StridedSlice, 'R' Reshape, 'A' AlltoAll */
  int n;     /* args */
  int64_t args[OM_MAX_ARGS];
} om_op;

typedef struct om_case {
  const char *name;
  int from_nd, from_dev[3];
  const char *from_map;
  int to_nd, to_dev[3];
  const char *to_map;
  int nd;
  int64_t shape[3];
  bool alltoall, resharding;
  int self, nranks, ranks[OM_MAX_RANKS], nops;
  om_op ops[OM_MAX_RANKS][OM_MAX_OPS]; /* per rank, in ranks' order */
} om_case;

#define C2(a, b, ax) {'C', 3, {a, b, ax}}
#define C4(a, b, c, d, ax) {'C', 5, {a, b, c, d, ax}}
#define R2(a, b) {'R', 2, {a, b}}
#define R3(a, b, c) {'R', 3, {a, b, c}}
#define R4(a, b, c, d) {'R', 4, {a, b, c, d}}
#define R5(a, b, c, d, e) {'R', 5, {a, b, c, d, e}}
#define S2(b0, b1, e0, e1) {'S', 6, {b0, b1, e0, e1, 1, 1}}
#define S3(b0, b1, b2, e0, e1, e2) {'S', 9, {b0, b1, b2, e0, e1, e2, 1, 1, 1}}
#define S5(b0, b1, b2, b3, b4, e0, e1, e2, e3, e4) {'S', 15, {b0, b1, b2, b3, b4, e0, e1, e2, e3, e4, 1, 1, 1, 1, 1}}
#define C8(ax) {'C', 9, {0, 1, 2, 3, 4, 5, 6, 7, ax}}
#define M88 2, {8, 8}
#define M16 2, {16, 16}
#define T3 3, {32, 64, 128}

/* _6 repeats _5 on [8,8] and adds it on [16,16]; the [8,8] half is _5 below. */
static const om_case reshard[] = {
    {"test_reshard_operator_map_1", 2, {2, 4}, "(0,-1)", 3, {2, 2, 2}, "(1,-1)", M88, false, true, 0, 2, {0, 1}, 1,
     {{C2(0, 1, 0)}, {C2(0, 1, 0)}}},
    {"test_reshard_operator_map_2", 2, {4, 2}, "(1,-1)", 3, {2, 2, 2}, "(1,-1)", M88, false, true, 0, 4, {0, 2, 4, 6}, 5,
     {{C2(0, 2, 0), R3(1, 4, 8), C2(0, 4, 0), R2(8, 8), S2(0, 0, 4, 8)},
      {C2(0, 2, 0), R3(1, 4, 8), C2(2, 6, 0), R2(8, 8), S2(4, 0, 8, 8)},
      {C2(4, 6, 0), R3(1, 4, 8), C2(0, 4, 0), R2(8, 8), S2(0, 0, 4, 8)},
      {C2(4, 6, 0), R3(1, 4, 8), C2(2, 6, 0), R2(8, 8), S2(4, 0, 8, 8)}}},
    {"test_reshard_operator_map_3", 3, {2, 2, 2}, "((0,2,1),-1)", 2, {4, 2}, "(0,-1)", M88, false, true, 0, 4,
     {0, 2, 4, 6}, 3,
     {{R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)},
      {R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)},
      {R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)},
      {R4(1, 1, 1, 8), R2(1, 8), C4(0, 2, 4, 6, 0)}}},
    {"test_reshard_operator_map_4", 3, {2, 2, 2}, "((0,1),-1)", 2, {4, 2}, "(0,-1)", M88, false, true, 0, 2, {0, 2}, 3,
     {{R3(1, 2, 8), R2(2, 8), C2(0, 2, 0)}, {R3(1, 2, 8), R2(2, 8), C2(0, 2, 0)}}},
    {"test_reshard_operator_map_5", 3, {2, 2, 2}, "((0,2),1)", 2, {4, 2}, "(0,-1)", M88, false, true, 0, 4, {0, 2, 4, 6},
     4,
     {{R3(1, 2, 4), C2(0, 2, 2), C2(0, 4, 0), R2(4, 8)},
      {R3(1, 2, 4), C2(0, 2, 2), C2(2, 6, 0), R2(4, 8)},
      {R3(1, 2, 4), C2(4, 6, 2), C2(0, 4, 0), R2(4, 8)},
      {R3(1, 2, 4), C2(4, 6, 2), C2(2, 6, 0), R2(4, 8)}}},
    {"test_reshard_operator_map_6 [16,16]", 3, {2, 2, 2}, "((0,2),1)", 2, {4, 2}, "(0,-1)", M16, false, true, 0, 4,
     {0, 2, 4, 6}, 4,
     {{R3(1, 4, 8), C2(0, 2, 2), C2(0, 4, 0), R2(8, 16)},
      {R3(1, 4, 8), C2(0, 2, 2), C2(2, 6, 0), R2(8, 16)},
      {R3(1, 4, 8), C2(4, 6, 2), C2(0, 4, 0), R2(8, 16)},
      {R3(1, 4, 8), C2(4, 6, 2), C2(2, 6, 0), R2(8, 16)}}},
    {"test_reshard_operator_map_7", 1, {8}, "(0,-1)", 1, {8}, "(-1,0)", M88, true, true, 0, 1, {0}, 1,
     {{{'A', 11, {8, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7}}}}},
    {"test_reshard_operator_map_8", 2, {8, 4}, "(1,-1,-1)", 1, {32}, "(-1,-1,0)", 3, {256, 2048, 7168}, true, true, 0, 1,
     {0}, 4,
     {{R4(32, 2048, 8, 896),
       {'S', 12, {0, 0, 0, 0, 32, 2048, 8, 224, 1, 1, 1, 1}},
       {'A', 11, {8, 2, 0, 0, 4, 8, 12, 16, 20, 24, 28}},
       R3(256, 2048, 224)}}},
};

/* test_transform_tensor.py: one rank's list (_transform_tensor_by_layout), or a whole map
   (stack_1; stack_4's map is pinned through its stack below). */
static const om_case transform[] = {
    {"test_transform_tensor_by_layout_allconcat_axis_1", 2, {1, 8}, "(1,0)", 3, {1, 4, 2}, "(2,1)", 2, {32, 256},
     false, false, 0, 1, {0}, 3, {{R3(32, 1, 32), C2(0, 1, 2), R2(32, 64)}}},
    {"test_transform_tensor_by_layout_allconcat_axis_1_using_none_map", 1, {8}, "(0,-1)", 2, {4, 2}, "(1,-1)", 2,
     {32, 256}, false, false, 0, 1, {0}, 3, {{R3(1, 4, 256), C2(0, 1, 1), R2(8, 256)}}},
    {"test_transform_tensor_by_layout_allconcat_to_single", 2, {4, 2}, "(1,0)", 2, {1, 8}, "(-1,-1)", 2, {32, 256},
     false, false, 0, 1, {0}, 2, {{C4(0, 2, 4, 6, 0), C2(0, 1, 1)}}},
    {"test_transform_tensor_by_layout_allconcat_axis_0", 2, {8, 1}, "(1,0)", 3, {2, 1, 4}, "(2,1)", 2, {32, 256}, false,
     false, 0, 1, {0}, 3, {{R3(1, 4, 256), {'C', 5, {0, 1, 2, 3, 1}}, R2(16, 256)}}},
    {"test_transform_tensor_by_layout_all_to_all", 2, {8, 1}, "(1,-1)", 2, {1, 8}, "(-1,0)", 2, {32, 64}, false, false,
     0, 1, {0}, 2, {{C8(0), S2(0, 0, 32, 8)}}},
    {"test_transform_tensor_by_layout_mix", 3, {2, 2, 2}, "(2,1,0)", 3, {8, 1, 1}, "(2,1,0)", T3, false, false, 1, 1,
     {1}, 6,
     {{R5(1, 2, 8, 32, 64), C2(1, 3, 3), S5(0, 0, 0, 0, 0, 1, 1, 8, 64, 64), C2(0, 1, 4),
       S5(0, 0, 4, 0, 0, 1, 1, 8, 64, 128), R3(4, 64, 128)}}},
    {"test_generate_transform_operator_stack_1", 3, {8, 1, 8}, "(2,1,-1)", 3, {8, 8, 1}, "(2,1,0)", T3, false, false,
     0, 1, {0}, 1, {{S3(0, 0, 0, 4, 8, 128)}}},
};

/* ---- layouts and shardkit's lists ------------------------------------------------------------ */

static sk_layout om_layout(const om_case *c, bool from) {
  static const char *const names[] = {"m0", "m1", "m2"};
  sk_mesh m;
  sk_dim_map ms[SK_MAX_DIMS];
  sk_layout l;
  int nm = 0;
  sk_error e;
  const char *text = from ? c->from_map : c->to_map;
  cr_assert_eq(sk_mesh_init(&m, from ? c->from_nd : c->to_nd, from ? c->from_dev : c->to_dev, names, &e), SK_OK, "%s",
               e.msg);
  cr_assert_eq(sk_ms_map_parse(text, ms, &nm, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_from_ms_map(&l, &m, c->nd, c->shape, ms, &e), SK_OK, "%s: %s", text, e.msg);
  return l;
}

/* shardkit's list for rank, as om_ops. */
static int om_list(const om_case *c, int rank, om_op *ops) {
  static const char kinds[] = {'R', 'C', 'S', 'A', '?'};
  static sk_ms_oplist l;
  sk_layout from = om_layout(c, true), to = om_layout(c, false);
  sk_error e;
  cr_assert_eq(sk_redist_ms_oplist(&from, &to, rank, c->alltoall, c->resharding, &l, &e), SK_OK, "%s rank %d: %s",
               c->name, rank, e.msg);
  cr_assert(l.n <= OM_MAX_OPS, "%s rank %d: %d operators", c->name, rank, l.n);
  for (int i = 0; i < l.n; i++) {
    cr_assert(l.ops[i].nargs <= OM_MAX_ARGS);
    ops[i].kind = kinds[l.ops[i].kind], ops[i].n = l.ops[i].nargs;
    memcpy(ops[i].args, l.ops[i].args, sizeof(int64_t) * (size_t)l.ops[i].nargs);
  }
  return l.n;
}

static size_t om_format(const om_op *ops, int n, char *buf, size_t cap) {
  size_t k = 0;
  for (int i = 0; i < n && k < cap; i++) {
    k += (size_t)snprintf(buf + k, cap - k, "%s%c[", i ? " " : "", ops[i].kind);
    for (int a = 0; a < ops[i].n && k < cap; a++)
      k += (size_t)snprintf(buf + k, cap - k, "%s%lld", a ? "," : "", (long long)ops[i].args[a]);
    if (k < cap) k += (size_t)snprintf(buf + k, cap - k, "]");
  }
  return k;
}

static bool om_same(const om_op *a, int na, const om_op *b, int nb) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++)
    if (a[i].kind != b[i].kind || a[i].n != b[i].n || memcmp(a[i].args, b[i].args, sizeof(int64_t) * (size_t)a[i].n))
      return false;
  return true;
}

/* Master's rank walk (_get_needed_rank_transform_operator_map_by_layouts): the self rank, then
   the members of its AllConcats' groups, last AllConcat first; a member found there adds the
   groups of its own AllConcats that come before the one that reached it. *n ranks, in the
   order found. */
static void om_needed(const om_case *c, int *ranks, int *n) {
  typedef struct { int index, n; int64_t g[OM_MAX_RANKS]; } om_pending;
  om_pending stack[64];
  int ns = 0, index = 0;
  om_op ops[OM_MAX_OPS];
  int nops = om_list(c, c->self, ops);
  *n = 0, ranks[(*n)++] = c->self;
  for (int i = 0; i < nops; i++)
    if (ops[i].kind == 'C') {
      stack[ns].index = index++, stack[ns].n = ops[i].n - 1;
      memcpy(stack[ns++].g, ops[i].args, sizeof(int64_t) * (size_t)(ops[i].n - 1));
    }
  while (ns > 0) {
    om_pending p = stack[--ns];
    for (int q = 0; q < p.n; q++) {
      bool known = false;
      for (int k = 0; k < *n; k++) known = known || ranks[k] == p.g[q];
      if (known) continue;
      cr_assert(*n < OM_MAX_RANKS);
      ranks[(*n)++] = (int)p.g[q];
      nops = om_list(c, (int)p.g[q], ops), index = 0;
      for (int i = 0; i < nops; i++)
        if (ops[i].kind == 'C' && index < p.index) {
          cr_assert(ns < 64);
          memmove(&stack[1], &stack[0], sizeof(om_pending) * (size_t)ns++);
          stack[0].index = index++, stack[0].n = ops[i].n - 1;
          memcpy(stack[0].g, ops[i].args, sizeof(int64_t) * (size_t)(ops[i].n - 1));
        }
    }
  }
}

/* Every rank of c's map: its list is master's, and the map holds exactly c's ranks. */
static void om_exact(const om_case *c) {
  char got[512], want[512];
  om_op ops[OM_MAX_OPS];
  for (int i = 0; i < c->nranks; i++) {
    int n = om_list(c, c->ranks[i], ops);
    om_format(ops, n, got, sizeof got);
    om_format(c->ops[i], c->nops, want, sizeof want);
    cr_expect(om_same(ops, n, c->ops[i], c->nops), "%s rank %d:\n  shardkit %s\n  master   %s", c->name, c->ranks[i],
              got, want);
  }
  int ranks[OM_MAX_RANKS], n = 0;
  om_needed(c, ranks, &n);
  cr_expect_eq(n, c->nranks, "%s: the map has %d ranks, master's %d", c->name, n, c->nranks);
  for (int k = 0; k < n; k++) {
    bool listed = false;
    for (int i = 0; i < c->nranks; i++) listed = listed || c->ranks[i] == ranks[k];
    cr_expect(listed, "%s: rank %d is in the map, not in master's", c->name, ranks[k]);
  }
}

/* ---- replay -------------------------------------------------------------------------------- */

/* A rank's local tensor: row-major values (flat indices of the full tensor). */
typedef struct om_tensor {
  int nd;
  int64_t shape[SK_MAX_DIMS];
  int v[OM_MAX_EL];
} om_tensor;

static int om_count(const om_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->nd; d++) n *= t->shape[d];
  return (int)n;
}

/* rank's slice of the tensor whose every element holds its row-major flat index. */
static void om_slice(const sk_layout *l, int rank, om_tensor *t) {
  sk_slice s;
  sk_error e;
  int64_t idx[SK_MAX_DIMS];
  cr_assert_eq(sk_layout_slice(l, rank, &s, &e), SK_OK, "%s", e.msg);
  t->nd = l->ndims;
  for (int d = 0; d < l->ndims; d++) t->shape[d] = s.stop[d] - s.start[d], idx[d] = s.start[d];
  cr_assert(om_count(t) <= OM_MAX_EL);
  for (int k = 0; k < om_count(t); k++) {
    int64_t flat = 0;
    for (int d = 0; d < l->ndims; d++) flat = flat * l->shape[d] + idx[d];
    t->v[k] = (int)flat;
    for (int d = l->ndims - 1; d >= 0 && ++idx[d] == s.stop[d]; d--) idx[d] = s.start[d];
  }
}

/* Concatenates parts[0..n) along axis into out (all of one rank and equal off the axis). */
static void om_concat(const om_tensor *const *parts, int n, int axis, om_tensor *out) {
  const om_tensor *p0 = parts[0];
  cr_assert(axis >= 0 && axis < p0->nd, "concat axis %d of a %d-dim tensor", axis, p0->nd);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= p0->shape[d];
  for (int d = axis + 1; d < p0->nd; d++) inner *= p0->shape[d];
  om_tensor res = *p0;
  res.shape[axis] = 0;
  for (int q = 0; q < n; q++) res.shape[axis] += parts[q]->shape[axis];
  cr_assert(om_count(&res) <= OM_MAX_EL);
  int k = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int q = 0; q < n; q++) {
      int64_t run = parts[q]->shape[axis] * inner;
      memcpy(res.v + k, parts[q]->v + o * run, (size_t)run * sizeof(int));
      k += (int)run;
    }
  *out = res;
}

/* begin, end (stride 1) over every dim: an odometer over the output box. */
static void om_box(const om_tensor *t, const int64_t *begin, const int64_t *end, om_tensor *out) {
  om_tensor res = {t->nd, {0}, {0}};
  int64_t idx[SK_MAX_DIMS];
  for (int d = 0; d < t->nd; d++) res.shape[d] = end[d] - begin[d], idx[d] = begin[d];
  int n = om_count(&res);
  for (int k = 0; k < n; k++) {
    int64_t flat = 0;
    for (int d = 0; d < t->nd; d++) flat = flat * t->shape[d] + idx[d];
    res.v[k] = t->v[flat];
    for (int d = t->nd - 1; d >= 0 && ++idx[d] == end[d]; d--) idx[d] = begin[d];
  }
  *out = res;
}

static void om_strided_slice(om_tensor *t, const om_op *op) {
  cr_assert(op->n == 3 * t->nd, "StridedSlice of %d args on a %d-dim tensor", op->n, t->nd);
  for (int d = 0; d < t->nd; d++) cr_assert_eq(op->args[2 * t->nd + d], 1);
  om_box(t, op->args, op->args + t->nd, t);
}

typedef struct om_map {
  const char *name;
  int nranks, ranks[OM_REPLAY_RANKS], nops;
  const om_op (*ops)[OM_MAX_OPS];
} om_map;

static int om_index(const om_map *m, int64_t rank) {
  for (int i = 0; i < m->nranks; i++)
    if (m->ranks[i] == rank) return i;
  cr_assert_fail("%s: group member %lld has no list in the map", m->name, (long long)rank);
  return -1;
}

/* AlltoAll for member i: from each group member its piece i along split_dim, concatenated in
   group order along concat_dim. */
static void om_alltoall(const om_map *m, const om_tensor *cur, int self, const om_op *op, om_tensor *out) {
  int64_t count = op->args[0], split = op->args[1], cat = op->args[2];
  static om_tensor pieces[OM_REPLAY_RANKS];
  const om_tensor *parts[OM_REPLAY_RANKS];
  int pos = -1;
  cr_assert(op->n - 3 == count && count <= OM_REPLAY_RANKS);
  for (int q = 0; q < count; q++)
    if (op->args[3 + q] == m->ranks[self]) pos = q;
  cr_assert(pos >= 0, "%s: rank %d is not in its AlltoAll group", m->name, m->ranks[self]);
  for (int q = 0; q < count; q++) {
    const om_tensor *t = &cur[om_index(m, op->args[3 + q])];
    int64_t begin[SK_MAX_DIMS] = {0}, end[SK_MAX_DIMS];
    memcpy(end, t->shape, sizeof end);
    begin[split] = t->shape[split] / count * pos, end[split] = begin[split] + t->shape[split] / count;
    om_box(t, begin, end, &pieces[q]);
    parts[q] = &pieces[q];
  }
  om_concat(parts, (int)count, (int)cat, out);
}

/* One step of every rank's list; AllConcat and AlltoAll read the members' tensors from before
   the step. */
static void om_step(const om_map *m, int s, om_tensor *cur) {
  static om_tensor next[OM_REPLAY_RANKS];
  for (int i = 0; i < m->nranks; i++) {
    const om_op *op = &m->ops[i][s];
    next[i] = cur[i];
    if (op->kind == 'R') {
      om_tensor *t = &next[i];
      int before = om_count(t);
      t->nd = op->n;
      memcpy(t->shape, op->args, sizeof(int64_t) * (size_t)op->n);
      cr_assert_eq(om_count(t), before, "%s rank %d step %d: Reshape changes the element count", m->name, m->ranks[i], s);
    } else if (op->kind == 'S') {
      om_strided_slice(&next[i], op);
    } else if (op->kind == 'A') {
      om_alltoall(m, cur, i, op, &next[i]);
    } else {
      const om_tensor *parts[OM_REPLAY_RANKS];
      cr_assert(op->n - 1 <= OM_REPLAY_RANKS);
      for (int q = 0; q < op->n - 1; q++) parts[q] = &cur[om_index(m, op->args[q])];
      om_concat(parts, op->n - 1, (int)op->args[op->n - 1], &next[i]);
    }
  }
  memcpy(cur, next, (size_t)m->nranks * sizeof *cur);
}

/* Replays m's lists from the source slices of c's layouts; whether every rank ends with its
   target slice (on the first one that does not, *bad_rank and *bad_at say where; -1: size). */
static bool om_replay(const om_case *c, const om_map *m, int *bad_rank, int *bad_at) {
  sk_layout from = om_layout(c, true), to = om_layout(c, false);
  static om_tensor cur[OM_REPLAY_RANKS], want;
  for (int i = 0; i < m->nranks; i++) om_slice(&from, m->ranks[i], &cur[i]);
  for (int s = 0; s < m->nops; s++) om_step(m, s, cur);
  for (int i = 0; i < m->nranks; i++) {
    om_slice(&to, m->ranks[i], &want);
    *bad_rank = m->ranks[i], *bad_at = -1;
    if (om_count(&cur[i]) != om_count(&want)) return false;
    for (int k = 0; k < om_count(&want); k++)
      if (cur[i].v[k] != want.v[k]) return *bad_at = k, false;
  }
  return true;
}

static om_map om_master_map(const om_case *c) {
  om_map m = {c->name, c->nranks, {0}, c->nops, c->ops};
  memcpy(m.ranks, c->ranks, sizeof c->ranks);
  return m;
}

/* master's lists for c's map, replayed (not _7's and _8's: their maps hold rank 0 alone, while
   an AlltoAll needs every member's list). */
static void om_replay_master(const om_case *c) {
  om_map m = om_master_map(c);
  for (int i = 0; i < c->nops; i++)
    if (c->ops[0][i].kind == 'A') return;
  int rank = -1, at = -1;
  cr_expect(om_replay(c, &m, &rank, &at), "%s (master's lists): rank %d does not end with its target slice (element %d)",
            c->name, rank, at);
}

/* shardkit's lists for every rank of c's devices, replayed (all of one length in these cases). */
static void om_replay_shardkit(const om_case *c) {
  static om_op ops[OM_REPLAY_RANKS][OM_MAX_OPS];
  sk_layout from = om_layout(c, true), to = om_layout(c, false);
  int n = from.mesh.size > to.mesh.size ? from.mesh.size : to.mesh.size;
  om_map m = {c->name, n, {0}, 0, (const om_op(*)[OM_MAX_OPS])ops};
  cr_assert(n <= OM_REPLAY_RANKS);
  for (int r = 0; r < n; r++) {
    m.ranks[r] = r;
    int k = om_list(c, r, ops[r]);
    cr_assert(r == 0 || k == m.nops, "%s: rank %d has %d operators, rank 0 %d", c->name, r, k, m.nops);
    m.nops = k;
  }
  int rank = -1, at = -1;
  cr_expect(om_replay(c, &m, &rank, &at), "%s (shardkit's lists): rank %d does not end with its target slice (element %d)",
            c->name, rank, at);
}

/* ---- the tests ----------------------------------------------------------------------------- */

#define OM_RESHARD(i, suffix)                                                                                       \
  Test(ms_opmap, reshard_operator_map_##suffix) {                                                                   \
    om_exact(&reshard[i]);                                                                                           \
    if (reshard[i].nd == 2 && reshard[i].shape[0] <= 16) om_replay_master(&reshard[i]), om_replay_shardkit(&reshard[i]); \
  }
OM_RESHARD(0, 1)
OM_RESHARD(1, 2)
OM_RESHARD(2, 3)
OM_RESHARD(3, 4)
OM_RESHARD(4, 5)
OM_RESHARD(5, 6)
OM_RESHARD(6, 7)
OM_RESHARD(7, 8)

Test(ms_opmap, transform_tensor_lists) {
  for (size_t i = 0; i < sizeof transform / sizeof transform[0]; i++) {
    const om_case *c = &transform[i];
    if (c->ranks[0] != c->self || c->nranks != 1) continue;
    char got[512], want[512];
    om_op ops[OM_MAX_OPS];
    int n = om_list(c, c->self, ops);
    om_format(ops, n, got, sizeof got), om_format(c->ops[0], c->nops, want, sizeof want);
    cr_expect(om_same(ops, n, c->ops[0], c->nops), "%s:\n  shardkit %s\n  master   %s", c->name, got, want);
  }
  om_exact(&transform[6]); /* stack_1's map: rank 0 alone */
}

/* ---- operator stacks (_generate_transform_operator_stack) ---------------------------------- */

typedef struct om_entry {
  int rank, level;
  om_op op;
} om_entry;

/* Master's walk from the self rank's last operator back to the first: an AllConcat at level k
   queues each group member's operator k-1, any other operator the same rank's; breadth first. */
static int om_stack(const om_case *c, om_entry *out, int cap) {
  static om_op lists[64][OM_MAX_OPS];
  int nops[64] = {0}, head = 0, n = 0;
  for (int r = 0; r < 64; r++) nops[r] = -1;
  nops[c->self] = om_list(c, c->self, lists[c->self]);
  if (!nops[c->self]) return 0;
  out[n++] = (om_entry){c->self, nops[c->self] - 1, lists[c->self][nops[c->self] - 1]};
  while (head < n) {
    om_entry e = out[head++];
    if (e.level < 1) continue;
    int nnext = e.op.kind == 'C' ? e.op.n - 1 : 1;
    for (int q = 0; q < nnext; q++) {
      int r = e.op.kind == 'C' ? (int)e.op.args[q] : e.rank;
      cr_assert(r < 64 && n < cap);
      if (nops[r] < 0) nops[r] = om_list(c, r, lists[r]);
      cr_assert(e.level - 1 < nops[r], "%s: rank %d has no operator %d", c->name, r, e.level - 1);
      out[n++] = (om_entry){r, e.level - 1, lists[r][e.level - 1]};
    }
  }
  return n;
}

static void om_expect_stack(const om_case *c, const om_entry *want, int nwant) {
  static om_entry got[128];
  int n = om_stack(c, got, 128);
  cr_expect_eq(n, nwant, "%s: a stack of %d entries, master's %d", c->name, n, nwant);
  for (int i = 0; i < n && i < nwant; i++) {
    char a[256], b[256];
    om_format(&got[i].op, 1, a, sizeof a), om_format(&want[i].op, 1, b, sizeof b);
    cr_expect(got[i].rank == want[i].rank && got[i].level == want[i].level && om_same(&got[i].op, 1, &want[i].op, 1),
              "%s entry %d: shardkit (%d, %d, %s), master (%d, %d, %s)", c->name, i, got[i].rank, got[i].level, a,
              want[i].rank, want[i].level, b);
  }
}

Test(ms_opmap, transform_operator_stack_4) {
  const om_case c = {"test_generate_transform_operator_stack_4", 3, {2, 2, 2}, "(2,1,0)", 3, {8, 1, 1}, "(2,1,0)", T3,
                     false, false, 1, 0, {0}, 0, {{{0}}}};
  static const om_entry want[] = {
      {1, 5, R3(4, 64, 128)},
      {1, 4, S5(0, 0, 4, 0, 0, 1, 1, 8, 64, 128)},
      {1, 3, C2(0, 1, 4)},
      {0, 2, S5(0, 0, 0, 0, 0, 1, 1, 8, 64, 64)},
      {1, 2, S5(0, 0, 0, 0, 0, 1, 1, 8, 64, 64)},
      {0, 1, C2(0, 2, 3)},
      {1, 1, C2(1, 3, 3)},
      {0, 0, R5(1, 2, 8, 32, 64)},
      {2, 0, R5(1, 2, 8, 32, 64)},
      {1, 0, R5(1, 2, 8, 32, 64)},
      {3, 0, R5(1, 2, 8, 32, 64)},
  };
  om_expect_stack(&c, want, (int)(sizeof want / sizeof want[0]));
  int ranks[OM_MAX_RANKS], n = 0; /* test_needed_rank_list_by_layouts_1: ranks 0..3 */
  om_needed(&c, ranks, &n);
  cr_expect_eq(n, 4);
  for (int k = 0; k < n; k++) cr_expect(ranks[k] >= 0 && ranks[k] < 4, "rank %d in the map", ranks[k]);
}

Test(ms_opmap, transform_operator_stack_2_and_3) {
  const om_case c2 = {"test_generate_transform_operator_stack_2", 2, {8, 1}, "(1,-1)", 2, {1, 8}, "(-1,0)", 2, {32, 64},
                      false, false, 0, 0, {0}, 0, {{{0}}}};
  static const om_entry want2[] = {{0, 1, S2(0, 0, 32, 8)}, {0, 0, C8(0)}};
  om_expect_stack(&c2, want2, 2);
  int ranks[OM_MAX_RANKS], n = 0;
  om_needed(&c2, ranks, &n);
  cr_expect_eq(n, 8, "stack_2's map has %d ranks, master's 8", n);
  const om_case c3 = {"test_generate_transform_operator_stack_3", 3, {8, 1, 8}, "(2,-1,0)", 3, {2, 8, 4}, "(2,1,0)", T3,
                      false, false, 0, 0, {0}, 0, {{{0}}}};
  /* Master asserts only the length. Its list is ten operators, R A2 S A4 S A2 S A2 S R (each
     AllGather an AllConcat, each followed by a StridedSlice): the AllConcat of 2 first because
     MindSpore's map of the dims to settle, a robin_hood hash map, walks the seven unified dims
     as 0 4 3 1 5 6 2, so dim 4 (an axis of 2) is gathered before dim 1 (the axis of 4). The
     entries per level, last operator first, are 1 1 1 2 2 4 4 16 16 32: 79. */
  static om_entry got[128];
  static const int per_level[10] = {32, 16, 16, 4, 4, 2, 2, 1, 1, 1};
  int n3 = om_stack(&c3, got, 128), count[10] = {0};
  cr_expect_eq(n3, 79, "stack_3: a stack of %d entries, master's 79", n3);
  for (int i = 0; i < n3; i++)
    if (got[i].level >= 0 && got[i].level < 10) count[got[i].level]++;
  for (int lv = 0; lv < 10; lv++)
    cr_expect_eq(count[lv], per_level[lv], "stack_3 level %d: %d entries, master's %d", lv, count[lv], per_level[lv]);
  cr_expect(got[n3 - 1].op.kind == 'R', "stack_3 starts with a Reshape");
  om_replay_shardkit(&c3); /* all 64 ranks' lists land every target slice */
}

/* The replay tells readings apart: _5's lists on the source map with its tuple in the other
   order ((2,0) instead of (0,2): the other axis major) leave some rank with the wrong rows, and
   so do _3's lists with the AllConcat group in reverse order. */
Test(ms_opmap, other_readings_fail) {
  int rank = -1, at = -1;
  om_case c = reshard[4];
  om_map m = om_master_map(&c);
  c.from_map = "((2,0),1)";
  cr_expect(!om_replay(&c, &m, &rank, &at), "_5 with the tuple reversed still replays right");
  static om_case c3;
  c3 = reshard[2];
  for (int i = 0; i < c3.nranks; i++)
    for (int q = 0; q < 2; q++) {
      int64_t t = c3.ops[i][2].args[q];
      c3.ops[i][2].args[q] = c3.ops[i][2].args[3 - q], c3.ops[i][2].args[3 - q] = t;
    }
  m = om_master_map(&c3);
  cr_expect(!om_replay(&c3, &m, &rank, &at), "_3 with the group reversed still replays right");
}

/* The knob: _7 with enable_alltoall off is no AlltoAll (an AllConcat of the 8 rows, then this
   rank's columns), and its lists still move the data right. */
Test(ms_opmap, alltoall_off) {
  om_case c = reshard[6];
  c.alltoall = false;
  om_op ops[OM_MAX_OPS];
  int n = om_list(&c, 0, ops);
  for (int i = 0; i < n; i++) cr_expect(ops[i].kind != 'A', "an AlltoAll with enable_alltoall off");
  om_replay_shardkit(&c);
}

/* Bad input is an error naming it. */
Test(ms_opmap, bad_input) {
  static sk_ms_oplist l;
  sk_layout from = om_layout(&reshard[0], true), to = om_layout(&reshard[0], false);
  sk_error e;
  cr_expect_eq(sk_redist_ms_oplist(&from, &to, 8, false, true, &l, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "rank 8") != NULL, "%s", e.msg);
  cr_expect_eq(sk_redist_ms_oplist(NULL, &to, 0, false, true, &l, &e), SK_ERR_INVALID_ARGUMENT);
}

/* Layouts the list cannot be written for are refused by name, never listed wrong or crashed on:
   a tuple dim without resharding (its operators would start from a refined shape no Reshape of
   the list records), and a gather over more ranks than an operator's arguments hold. */
static sk_layout om_one_layout(int ndims_mesh, const int *dims, int ndims, const int64_t *shape, const sk_dim_map *map) {
  static const char *const names[] = {"a", "b", "c"};
  sk_mesh m;
  sk_layout l;
  cr_assert_eq(sk_mesh_init(&m, ndims_mesh, dims, names, NULL), SK_OK);
  cr_assert_eq(sk_layout_init(&l, &m, ndims, shape, map, NULL), SK_OK);
  return l;
}

Test(ms_opmap, unlistable_layouts_refused) {
  static sk_ms_oplist l;
  sk_error e;
  int dims2[2] = {2, 2}, dims131[1] = {131};
  int64_t shape2[2] = {8, 8}, shape1[1] = {262};
  sk_dim_map f0[2], t0[2], one[1], none[1];
  memset(f0, 0, sizeof f0), memset(t0, 0, sizeof t0), memset(one, 0, sizeof one), memset(none, 0, sizeof none);
  f0[1].naxes = 1, f0[1].axes[0] = 1;                                   /* (None, b) */
  t0[1].naxes = 2, t0[1].axes[0] = 0, t0[1].axes[1] = 1;                /* (None, (a, b)) */
  sk_layout from = om_one_layout(2, dims2, 2, shape2, f0), to = om_one_layout(2, dims2, 2, shape2, t0);
  for (int alltoall = 0; alltoall < 2; alltoall++) {
    cr_expect_eq(sk_redist_ms_oplist(&from, &to, 0, alltoall, false, &l, &e), SK_ERR_UNSUPPORTED);
    cr_expect(strstr(e.msg, "several axes") != NULL, "%s", e.msg);
    cr_expect_eq(sk_redist_ms_oplist(&from, &to, 0, alltoall, true, &l, &e), SK_OK, "%s", e.msg); /* with resharding: listed */
  }
  one[0].naxes = 1, one[0].axes[0] = 0;
  sk_layout cut = om_one_layout(1, dims131, 1, shape1, one), whole = om_one_layout(1, dims131, 1, shape1, none);
  cr_expect_eq(sk_redist_ms_oplist(&cut, &whole, 0, false, false, &l, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "131 ranks") != NULL, "%s", e.msg);
}
