/* test_redist.c -- sk_redist.h: plans and their execution on the threads backend.

   - Exhaustive: every layout (every map, tuples in every order) of 2-D and 3-D tensors on the
     meshes (2,2), (2,3), (2,2,2), (4,2), every pair executed, without partial sums and with
     every set of partial axes the source leaves unused. Each rank's result is compared element
     by element with a brute-force reference computed here from global coordinates (partial
     sums: the contributions of the partial group added left to right in rank order, with the
     suite's own reference reduction, never sk_reduce_local). Without partial sums, the
     minimality property is checked: the bytes a rank receives equal its target slice minus
     what its source slice already holds, computed here by box intersection.
   - The documented cases: MatMul out -> ReLU in needs no communication; rows-by-8 ->
     cols-by-8 is one AllToAll; MindSpore mode (docs/semantics.md 9.3) gives MindSpore's op
     sequences and costs; rank plans agree with the whole plan.
   - Bad input: SK_ERR_INVALID_ARGUMENT with a message, before anything moves.
   Device threads never assert: they record into per-rank slots; the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "shardkit.h"
#include "comm_test_util.h"

/* ---- layouts ---------------------------------------------------------------------------------- */

#define RT_MAX_LAYOUTS 256

typedef struct rt_set {
  int n;
  sk_dim_map maps[RT_MAX_LAYOUTS][SK_MAX_DIMS];
} rt_set;

/* Every map: axis a (in turn) goes to no dim or to any position of any dim's tuple. */
static void rt_enum(rt_set *s, int naxes, int ndims, int a, sk_dim_map *cur) {
  if (a == naxes) {
    cr_assert(s->n < RT_MAX_LAYOUTS);
    memcpy(s->maps[s->n++], cur, sizeof(sk_dim_map) * SK_MAX_DIMS);
    return;
  }
  rt_enum(s, naxes, ndims, a + 1, cur);
  for (int d = 0; d < ndims; d++)
    for (int pos = 0; pos <= cur[d].naxes; pos++) {
      sk_dim_map save = cur[d];
      for (int j = cur[d].naxes; j > pos; j--) cur[d].axes[j] = cur[d].axes[j - 1];
      cur[d].axes[pos] = a;
      cur[d].naxes++;
      rt_enum(s, naxes, ndims, a + 1, cur);
      cur[d] = save;
    }
}

/* ---- one redistribution case on every rank ---------------------------------------------------- */

typedef struct rt_case {
  sk_layout from, to;
  uint32_t partial;
} rt_case;

typedef struct rt_run {
  rt_case *cases;
  int ncases;
  sk_dtype dt;
  sk_redist_mode mode;
  ct_slot *slots;
  long *checked; /* elements checked per rank */
} rt_run;

static int64_t rt_box_vol(const sk_slice *s) {
  int64_t v = 1;
  for (int d = 0; d < s->ndims; d++) v *= s->stop[d] - s->start[d];
  return v;
}

static int64_t rt_overlap(const sk_slice *a, const sk_slice *b) {
  int64_t v = 1;
  for (int d = 0; d < a->ndims; d++) {
    int64_t lo = a->start[d] > b->start[d] ? a->start[d] : b->start[d];
    int64_t hi = a->stop[d] < b->stop[d] ? a->stop[d] : b->stop[d];
    if (hi <= lo) return 0;
    v *= hi - lo;
  }
  return v;
}

/* Global row-major index of element i of a slice. */
static size_t rt_gidx(const sk_layout *l, const sk_slice *s, int64_t i) {
  int64_t sub[SK_MAX_DIMS];
  for (int d = l->ndims - 1; d >= 0; d--) {
    int64_t e = s->stop[d] - s->start[d];
    sub[d] = i % e;
    i /= e;
  }
  size_t x = 0;
  for (int d = 0; d < l->ndims; d++) x = x * (size_t)l->shape[d] + (size_t)(s->start[d] + sub[d]);
  return x;
}

/* Position of rank in its partial group (mixed radix of its coordinates on the partial axes). */
static int rt_ppos(const sk_mesh *m, uint32_t partial, int rank) {
  int c[SK_MAX_AXES], x = rank, k = 0;
  for (int a = m->naxes - 1; a >= 0; a--) c[a] = x % m->dims[a], x /= m->dims[a];
  for (int a = 0; a < m->naxes; a++)
    if (partial & (1u << a)) k = k * m->dims[a] + c[a];
  return k;
}

static void rt_case_name(const rt_case *c, char *buf, size_t cap) {
  char f[128], t[128];
  sk_layout_format(&c->from, f, sizeof f);
  sk_layout_format(&c->to, t, sizeof t);
  snprintf(buf, cap, "\"%s\"%s%x -> \"%s\"", f, c->partial ? " partial 0x" : " ", c->partial, t);
}

#define RT_SEED 0x5eed
#ifndef RT_PARTIAL_STRIDE
#define RT_PARTIAL_STRIDE 1
#endif

static sk_result rt_device(sk_comm *comm, void *arg) {
  rt_run *x = (rt_run *)arg;
  int r = sk_comm_rank(comm);
  ct_slot *s = &x->slots[r];
  size_t es = sk_dtype_size(x->dt);
  /* es is 0 for an invalid dtype (executor_create then fails the case): + 1 keeps malloc off 0 bytes */
  unsigned char *src = NULL, *dst = NULL, *want = malloc(es + 1), *parts = malloc(es * 64 + 1);
  const void *ptrs[64];
  for (int k = 0; k < 64; k++) ptrs[k] = parts + (size_t)k * es;
  for (int ci = 0; ci < x->ncases; ci++) {
    const rt_case *c = &x->cases[ci];
    sk_slice fs, ts;
    sk_layout_slice(&c->from, r, &fs, NULL);
    sk_layout_slice(&c->to, r, &ts, NULL);
    int64_t nf = rt_box_vol(&fs), nt = rt_box_vol(&ts);
    src = realloc(src, (size_t)nf * es + CT_PAD);
    dst = realloc(dst, (size_t)nt * es + CT_PAD);
    int k = rt_ppos(&c->from.mesh, c->partial, r);
    int g = 1;
    for (int a = 0; a < c->from.mesh.naxes; a++)
      if (c->partial & (1u << a)) g *= c->from.mesh.dims[a];
    for (int64_t i = 0; i < nf; i++)
      ct_gen(x->dt, CT_PAT_SUM, RT_SEED, c->partial ? k : 0, rt_gidx(&c->from, &fs, i), src + (size_t)i * es);
    memset(dst, CT_JUNK_BYTE, (size_t)nt * es);
    memset(dst + (size_t)nt * es, CT_PAD_BYTE, CT_PAD);
    sk_redist_desc d;
    memset(&d, 0, sizeof d);
    d.from = c->from, d.to = c->to, d.partial = c->partial, d.dtype = x->dt, d.mode = x->mode;
    char name[300];
    sk_redist_executor *ex = NULL;
    sk_error e;
    sk_result rc = sk_redist_executor_create(comm, &d, &ex, &e);
    if (rc != SK_OK) {
      rt_case_name(c, name, sizeof name);
      ct_fail(s, "%s: executor_create: %s: %s", name, sk_result_name(rc), e.msg);
      s->rc = rc;
      break;
    }
    rc = sk_redist_execute(ex, src, (size_t)nf, dst, (size_t)nt, x->dt, NULL);
    if (!ct_rc(s, rc, comm, "sk_redist_execute")) {
      sk_redist_executor_destroy(ex);
      break;
    }
    bool ok = ct_check(s, ct_pad_ok(dst, (size_t)nt * es), "guard bytes after dst overwritten");
    for (int64_t i = 0; i < nt && ok; i++) {
      size_t gi = rt_gidx(&c->to, &ts, i);
      if (c->partial) {
        for (int j = 0; j < g; j++) ct_gen(x->dt, CT_PAT_SUM, RT_SEED, j, gi, parts + (size_t)j * es);
        ct_ref_reduce1(want, ptrs, g, x->dt, SK_SUM);
      } else {
        ct_gen(x->dt, CT_PAT_SUM, RT_SEED, 0, gi, want);
      }
      x->checked[r]++;
      if (!ct_elem_eq(x->dt, dst + (size_t)i * es, want)) {
        char gs[64], ws[64];
        ct_elem_str(x->dt, dst + (size_t)i * es, gs, sizeof gs);
        ct_elem_str(x->dt, want, ws, sizeof ws);
        rt_case_name(c, name, sizeof name);
        ct_fail(s, "%s (mode %d): rank %d element %lld (global %zu): got %s, want %s", name, (int)x->mode, r,
                (long long)i, gi, gs, ws);
        ok = false;
      }
    }
    if (x->mode == SK_REDIST_MINIMAL && !c->partial) {
      /* minimality: recv = target slice minus what the source slice already holds */
      uint64_t rv = 0, sv = 0;
      const sk_redist_plan *p = sk_redist_executor_plan(ex);
      sk_redist_plan_bytes(p, -1, r, &rv, &sv, NULL);
      uint64_t need = (uint64_t)(nt - rt_overlap(&ts, &fs)) * es;
      if (!ct_check(s, rv == need, "recv bytes %llu, minimal %llu", (unsigned long long)rv, (unsigned long long)need)) {
        rt_case_name(c, name, sizeof name);
        ct_fail(s, "%s: not minimal", name);
      }
      ct_check(s, sk_redist_plan_nsteps(p) == 1, "minimal plan has %d steps", sk_redist_plan_nsteps(p));
    }
    sk_redist_executor_destroy(ex);
    if (s->nfail) break;
  }
  free(src), free(dst), free(want), free(parts);
  s->ran = 1;
  return SK_OK;
}

static void rt_run_cases(rt_case *cases, int n, int ndev, sk_dtype dt, sk_redist_mode mode, const char *label) {
  rt_run x;
  memset(&x, 0, sizeof x);
  x.cases = cases, x.ncases = n, x.dt = dt, x.mode = mode;
  x.slots = ct_slots_new(ndev);
  x.checked = calloc((size_t)ndev, sizeof(long));
  ct_run(ndev, CT_CFG_DEFAULT, rt_device, &x, label);
  ct_expect_slots(x.slots, ndev, label);
  long total = 0;
  for (int r = 0; r < ndev; r++) total += x.checked[r];
  cr_expect(total > 0, "%s: nothing was checked", label);
  free(x.slots);
  free(x.checked);
}

/* All (from, to) pairs on a mesh; partial: also every nonempty set of axes the source leaves
   unused (with every to-layout), which_to: 1 of every `stride` to-layouts. */
static void rt_exhaustive(const char *mesh_text, int ndims, const int64_t *shape, bool partial, int stride) {
  sk_mesh m;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&m, mesh_text, &e), SK_OK, "%s", e.msg);
  static rt_set set;
  set.n = 0;
  sk_dim_map cur[SK_MAX_DIMS];
  memset(cur, 0, sizeof cur);
  rt_enum(&set, m.naxes, ndims, 0, cur);
  sk_layout *ls = calloc((size_t)set.n, sizeof(sk_layout));
  for (int i = 0; i < set.n; i++)
    cr_assert_eq(sk_layout_init(&ls[i], &m, ndims, shape, set.maps[i], &e), SK_OK, "layout %d: %s", i, e.msg);
  int cap = set.n * set.n * (partial ? (1 << m.naxes) : 1), n = 0;
  rt_case *cases = calloc((size_t)cap, sizeof(rt_case));
  for (int i = 0; i < set.n; i++) {
    uint32_t unused = ((1u << m.naxes) - 1u) & ~sk_layout_used_axes(&ls[i]);
    for (uint32_t P = 0; P < (1u << m.naxes); P++) {
      if ((P & ~unused) || (partial != (P != 0))) continue;
      for (int j = 0; j < set.n; j++) {
        if (partial && (i * 7 + j + (int)P) % stride) continue;
        cases[n].from = ls[i], cases[n].to = ls[j], cases[n].partial = P;
        n++;
      }
    }
  }
  char label[128];
  snprintf(label, sizeof label, "mesh %s, %d-D, %d layouts, %d cases%s", mesh_text, ndims, set.n, n,
           partial ? ", partial sources" : "");
  cr_log_info("%s", label);
  rt_run_cases(cases, n, m.size, SK_F32, SK_REDIST_MINIMAL, label);
  free(cases);
  free(ls);
}

static const int64_t rt_s22_2[] = {4, 8}, rt_s22_3[] = {4, 4, 4};
static const int64_t rt_s23_2[] = {6, 12}, rt_s23_3[] = {6, 6, 6};
static const int64_t rt_s222_2[] = {8, 8}, rt_s222_3[] = {8, 8, 8};
static const int64_t rt_s42_2[] = {8, 16}, rt_s42_3[] = {8, 8, 8};

Test(redist_exhaustive, mesh_2x2, .timeout = 120) {
  rt_exhaustive("a=2,b=2", 2, rt_s22_2, false, 1);
  rt_exhaustive("a=2,b=2", 3, rt_s22_3, false, 1);
  rt_exhaustive("a=2,b=2", 2, rt_s22_2, true, 1);
  rt_exhaustive("a=2,b=2", 3, rt_s22_3, true, 1);
}
Test(redist_exhaustive, mesh_2x3, .timeout = 120) {
  rt_exhaustive("a=2,b=3", 2, rt_s23_2, false, 1);
  rt_exhaustive("a=2,b=3", 3, rt_s23_3, false, 1);
  rt_exhaustive("a=2,b=3", 2, rt_s23_2, true, 1);
  rt_exhaustive("a=2,b=3", 3, rt_s23_3, true, 1);
}
Test(redist_exhaustive, mesh_4x2, .timeout = 120) {
  rt_exhaustive("a=4,b=2", 2, rt_s42_2, false, 1);
  rt_exhaustive("a=4,b=2", 3, rt_s42_3, false, 1);
  rt_exhaustive("a=4,b=2", 2, rt_s42_2, true, 1);
  rt_exhaustive("a=4,b=2", 3, rt_s42_3, true, 1);
}
Test(redist_exhaustive, mesh_2x2x2_2d, .timeout = 180) {
  rt_exhaustive("a=2,b=2,c=2", 2, rt_s222_2, false, 1);
  rt_exhaustive("a=2,b=2,c=2", 2, rt_s222_2, true, 1);
}
Test(redist_exhaustive, mesh_2x2x2_3d, .timeout = 300) { rt_exhaustive("a=2,b=2,c=2", 3, rt_s222_3, false, 1); }
Test(redist_exhaustive, mesh_2x2x2_3d_partial, .timeout = 300) {
  rt_exhaustive("a=2,b=2,c=2", 3, rt_s222_3, true, RT_PARTIAL_STRIDE);
}

/* MindSpore mode over every pair too: its operator sequences must also execute correctly. */
static void rt_exhaustive_ms(const char *mesh_text, int ndims, const int64_t *shape, sk_redist_mode mode) {
  sk_mesh m;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&m, mesh_text, &e), SK_OK, "%s", e.msg);
  static rt_set set;
  set.n = 0;
  sk_dim_map cur[SK_MAX_DIMS];
  memset(cur, 0, sizeof cur);
  rt_enum(&set, m.naxes, ndims, 0, cur);
  rt_case *cases = calloc((size_t)set.n * (size_t)set.n, sizeof(rt_case));
  int n = 0;
  for (int i = 0; i < set.n; i++)
    for (int j = 0; j < set.n; j++) {
      cr_assert_eq(sk_layout_init(&cases[n].from, &m, ndims, shape, set.maps[i], &e), SK_OK);
      cr_assert_eq(sk_layout_init(&cases[n].to, &m, ndims, shape, set.maps[j], &e), SK_OK);
      n++;
    }
  char label[128];
  snprintf(label, sizeof label, "MindSpore mode %d, mesh %s, %d-D, %d cases", (int)mode, mesh_text, ndims, n);
  rt_run_cases(cases, n, m.size, SK_F32, mode, label);
  free(cases);
}

Test(redist_mindspore, exhaustive_execution, .timeout = 300) {
  rt_exhaustive_ms("a=2,b=2,c=2", 2, rt_s222_2, SK_REDIST_MINDSPORE);
  rt_exhaustive_ms("a=2,b=2,c=2", 2, rt_s222_2, SK_REDIST_MINDSPORE_NO_ALLTOALL);
  rt_exhaustive_ms("a=2,b=3", 3, rt_s23_3, SK_REDIST_MINDSPORE);
  rt_exhaustive_ms("a=4,b=2", 2, rt_s42_2, SK_REDIST_MINDSPORE_NO_ALLTOALL);
  rt_exhaustive_ms("a=2,b=2,c=2", 3, rt_s222_3, SK_REDIST_MINDSPORE);
}

/* ---- documented cases ------------------------------------------------------------------------- */

static sk_layout rt_layout(const char *mesh, const char *map, int ndims, const int64_t *shape) {
  sk_mesh m;
  sk_layout l;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&m, mesh, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_parse(&l, &m, map, ndims, shape, &e), SK_OK, "%s", e.msg);
  return l;
}

static sk_layout rt_ms_layout(const char *mesh, const char *ms_map, int ndims, const int64_t *shape) {
  sk_mesh m;
  sk_layout l;
  sk_error e;
  sk_dim_map mm[SK_MAX_DIMS];
  int n;
  cr_assert_eq(sk_mesh_parse(&m, mesh, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_ms_map_parse(ms_map, mm, &n, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(n, ndims);
  cr_assert_eq(sk_layout_from_ms_map(&l, &m, ndims, shape, mm, &e), SK_OK, "%s", e.msg);
  return l;
}

static sk_redist_plan *rt_plan(const sk_layout *f, const sk_layout *t, uint32_t partial, sk_redist_mode mode, int rank) {
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  d.from = *f, d.to = *t, d.partial = partial, d.mode = mode;
  sk_redist_plan *p = NULL;
  sk_error e;
  sk_result r = sk_redist_plan_create(&d, rank, &p, &e);
  cr_assert_eq(r, SK_OK, "plan_create: %s: %s", sk_result_name(r), e.msg);
  return p;
}

static void rt_expect_ops(const sk_redist_plan *p, int n, const char *const *names, const sk_redist_op *ops) {
  cr_assert_eq(sk_redist_plan_nsteps(p), n, "%d steps, expected %d", sk_redist_plan_nsteps(p), n);
  for (int i = 0; i < n; i++) {
    sk_redist_step_info s;
    cr_assert_eq(sk_redist_plan_step(p, i, &s, NULL), SK_OK);
    cr_expect_str_eq(s.name, names[i], "step %d is %s, expected %s", i, s.name, names[i]);
    cr_expect_eq(s.op, ops[i], "step %d runs as %s, expected %s", i, sk_redist_op_name(s.op), sk_redist_op_name(ops[i]));
  }
}

static void rt_expect_bytes_all(const sk_redist_plan *p, int n, uint64_t recv, uint64_t send) {
  for (int r = 0; r < n; r++) {
    uint64_t rv, sv;
    cr_assert_eq(sk_redist_plan_bytes(p, -1, r, &rv, &sv, NULL), SK_OK);
    cr_expect_eq(rv, recv, "rank %d receives %llu bytes, expected %llu", r, (unsigned long long)rv,
                 (unsigned long long)recv);
    cr_expect_eq(sv, send, "rank %d sends %llu bytes, expected %llu", r, (unsigned long long)sv,
                 (unsigned long long)send);
  }
}

static const int64_t rt_x[] = {16, 784}, rt_h[] = {16, 512};

Test(redist_cases, matmul_out_to_relu_in_needs_no_communication, .timeout = 30) {
  /* MatMul ((2,4),(4,1)) output: std dev matrix [2,4], map [1,-1]; ReLU ((4,1),) input: [4,2], [1,-1] */
  sk_layout f = rt_ms_layout("a=2,b=4", "(1,-1)", 2, rt_h), t = rt_ms_layout("x=4,y=2", "(1,-1)", 2, rt_h);
  sk_redist_plan *p = rt_plan(&f, &t, 0, SK_REDIST_MINIMAL, SK_REDIST_ALL_RANKS);
  const char *names[] = {"Local"};
  const sk_redist_op ops[] = {SK_REDIST_LOCAL};
  rt_expect_ops(p, 1, names, ops);
  rt_expect_bytes_all(p, 8, 0, 0);
  sk_redist_plan_destroy(p);
  rt_case c = {f, t, 0};
  rt_run_cases(&c, 1, 8, SK_F32, SK_REDIST_MINIMAL, "matmul -> relu");
  /* the same on one mesh, in MindSpore mode: one StridedSlice */
  sk_layout f2 = rt_layout("a=2,b=2,c=2", "a,None", 2, rt_h), t2 = rt_layout("a=2,b=2,c=2", "(a,b),None", 2, rt_h);
  p = rt_plan(&f2, &t2, 0, SK_REDIST_MINDSPORE, SK_REDIST_ALL_RANKS);
  const char *n2[] = {"StridedSlice"};
  rt_expect_ops(p, 1, n2, ops);
  rt_expect_bytes_all(p, 8, 0, 0);
  sk_redist_plan_destroy(p);
}

Test(redist_cases, rows_by_8_to_cols_by_8_is_one_alltoall, .timeout = 30) {
  sk_layout f = rt_layout("dp=8", "dp,None", 2, rt_x), t = rt_layout("dp=8", "None,dp", 2, rt_x);
  sk_redist_plan *p = rt_plan(&f, &t, 0, SK_REDIST_MINIMAL, SK_REDIST_ALL_RANKS);
  const char *names[] = {"AllToAll"};
  const sk_redist_op ops[] = {SK_REDIST_ALLTOALL};
  rt_expect_ops(p, 1, names, ops);
  sk_redist_step_info s;
  sk_redist_plan_step(p, 0, &s, NULL);
  cr_expect_eq(s.group_size, 8);
  cr_expect_eq(s.group_axes, 1u);
  cr_expect_eq(s.count, 196u, "count %zu per peer", s.count); /* [2,98] blocks */
  rt_expect_bytes_all(p, 8, 7 * 196 * 4, 7 * 196 * 4);       /* 7/8 of the slice, nothing more */
  char buf[2048];
  size_t len = sk_redist_plan_format(p, buf, sizeof buf);
  cr_expect(len > 0 && len < sizeof buf);
  cr_expect(strstr(buf, "AllToAll") != NULL, "%s", buf);
  char tiny[16];
  cr_expect_eq(sk_redist_plan_format(p, tiny, sizeof tiny), len, "snprintf convention: full length when cut");
  cr_expect_eq(strlen(tiny), sizeof tiny - 1);
  sk_redist_plan_destroy(p);
  rt_case c = {f, t, 0};
  rt_run_cases(&c, 1, 8, SK_F32, SK_REDIST_MINIMAL, "rows -> cols");
}

static void rt_expect_ms_cost(const sk_redist_plan *p, double fwd, double bwd, double comm, double comp, double mem) {
  sk_redist_ms_cost c;
  cr_assert_eq(sk_redist_plan_ms_cost(p, &c, NULL), SK_OK);
  cr_expect(c.forward_comm == fwd && c.backward_comm == bwd && c.comm == comm && c.computation == comp &&
                c.memory == mem,
            "MindSpore cost fwd %g bwd %g comm %g comp %g mem %g; expected %g %g %g %g %g", c.forward_comm,
            c.backward_comm, c.comm, c.computation, c.memory, fwd, bwd, comm, comp, mem);
}

/* docs/semantics.md 9.4, worked example: [16,784] rows-split-by-8 -> cols-split-by-8. */
Test(redist_mindspore, worked_example_alltoall_on_and_off, .timeout = 30) {
  sk_layout f = rt_layout("dp=8", "dp,None", 2, rt_x), t = rt_layout("dp=8", "None,dp", 2, rt_x);
  sk_redist_plan *p = rt_plan(&f, &t, 0, SK_REDIST_MINDSPORE, SK_REDIST_ALL_RANKS);
  const char *on[] = {"AllToAll"};
  const sk_redist_op on_ops[] = {SK_REDIST_ALLTOALL};
  rt_expect_ops(p, 1, on, on_ops);
  rt_expect_ms_cost(p, 3136, 3136, 6272, 3136, 3136);
  sk_redist_step_info s;
  sk_redist_plan_step(p, 0, &s, NULL);
  cr_expect(strstr(s.detail, "split_count 8, split_dim 1, concat_dim 0") != NULL, "%s", s.detail);
  sk_redist_plan_destroy(p);

  p = rt_plan(&f, &t, 0, SK_REDIST_MINDSPORE_NO_ALLTOALL, SK_REDIST_ALL_RANKS);
  const char *off[] = {"AllGather", "StridedSlice"};
  const sk_redist_op off_ops[] = {SK_REDIST_ALLGATHER, SK_REDIST_LOCAL};
  rt_expect_ops(p, 2, off, off_ops);
  rt_expect_ms_cost(p, 6272, 784, 7056, 15680, 26656);
  rt_expect_bytes_all(p, 8, 7 * 1568 * 4, 7 * 1568 * 4); /* AllGather moves 8x what AllToAll does */
  sk_redist_plan_destroy(p);
  rt_case c = {f, t, 0};
  rt_run_cases(&c, 1, 8, SK_F32, SK_REDIST_MINDSPORE_NO_ALLTOALL, "mindspore off");
  rt_run_cases(&c, 1, 8, SK_F32, SK_REDIST_MINDSPORE, "mindspore on");
}

/* ConcatByAxis on a dim other than 0: AllGather + local Split/Concat, computation 2sn + s. */
Test(redist_mindspore, concat_on_dim_1, .timeout = 30) {
  sk_layout f = rt_layout("dp=8", "None,dp", 2, rt_x), t = rt_layout("dp=8", "None,None", 2, rt_x);
  sk_redist_plan *p = rt_plan(&f, &t, 0, SK_REDIST_MINDSPORE, SK_REDIST_ALL_RANKS);
  const char *names[] = {"AllGather"};
  const sk_redist_op ops[] = {SK_REDIST_ALLGATHER};
  rt_expect_ops(p, 1, names, ops);
  /* s = 16*98 = 1568, n = 8: fwd 0.5sn, bwd 0.5s, comm 0.5s(n+1), comp s+2sn (+s), mem 2sn+s (+s) */
  rt_expect_ms_cost(p, 6272, 784, 7056, 28224, 28224);
  sk_redist_plan_destroy(p);
  /* two axes: (2,4) rows -> cols with alltoall on is two AllToAlls, one per axis, in map order */
  sk_layout f2 = rt_layout("a=2,b=4", "a,b", 2, rt_x), t2 = rt_layout("a=2,b=4", "b,a", 2, rt_x);
  p = rt_plan(&f2, &t2, 0, SK_REDIST_MINDSPORE_NO_ALLTOALL, SK_REDIST_ALL_RANKS);
  cr_expect(sk_redist_plan_nsteps(p) >= 2);
  for (int i = 0; i < sk_redist_plan_nsteps(p); i++) {
    sk_redist_step_info s;
    sk_redist_plan_step(p, i, &s, NULL);
    cr_expect(!strcmp(s.name, "AllGather") || !strcmp(s.name, "StridedSlice"), "step %d: %s", i, s.name);
  }
  sk_redist_plan_destroy(p);
  /* the minimal plan moves each rank's block once */
  p = rt_plan(&f2, &t2, 0, SK_REDIST_MINIMAL, SK_REDIST_ALL_RANKS);
  cr_expect_eq(sk_redist_plan_nsteps(p), 1);
  sk_redist_plan_destroy(p);
}

Test(redist_cases, partial_sources, .timeout = 60) {
  /* MatMul with a split contraction dim: output partial over b; ReLU wants rows split by b */
  sk_layout f = rt_layout("a=2,b=4", "None,None", 2, rt_h), t = rt_layout("a=2,b=4", "b,None", 2, rt_h);
  sk_redist_plan *p = rt_plan(&f, &t, 2u, SK_REDIST_MINIMAL, SK_REDIST_ALL_RANKS);
  const char *rs[] = {"ReduceScatter"};
  const sk_redist_op rs_ops[] = {SK_REDIST_REDUCE_SCATTER};
  rt_expect_ops(p, 1, rs, rs_ops);
  rt_expect_bytes_all(p, 8, 3 * 2048 * 4, 3 * 2048 * 4);
  sk_redist_plan_destroy(p);
  /* replicated target: one AllReduce */
  sk_layout t2 = rt_layout("a=2,b=4", "None,None", 2, rt_h);
  p = rt_plan(&f, &t2, 2u, SK_REDIST_MINIMAL, SK_REDIST_ALL_RANKS);
  const char *ar[] = {"AllReduce"};
  const sk_redist_op ar_ops[] = {SK_REDIST_ALLREDUCE};
  rt_expect_ops(p, 1, ar, ar_ops);
  sk_redist_plan_destroy(p);
  /* every dtype, a few shapes of partial moves */
  rt_case cs[3] = {{f, t, 2u}, {f, t2, 2u}, {f, rt_layout("a=2,b=4", "None,(b,a)", 2, rt_h), 3u}};
  for (int k = 0; k < CT_NDTYPES; k++) {
    char label[64];
    snprintf(label, sizeof label, "partial, %s", sk_dtype_name(ct_all_dtypes[k]));
    rt_run_cases(cs, 3, 8, ct_all_dtypes[k], SK_REDIST_MINIMAL, label);
  }
}

/* Rank plans (what executors use) agree with the whole plan: steps and every rank's bytes. */
Test(redist_cases, rank_plans_match_the_whole_plan, .timeout = 60) {
  sk_mesh m;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&m, "a=2,b=2,c=2", &e), SK_OK);
  static rt_set set;
  set.n = 0;
  sk_dim_map cur[SK_MAX_DIMS];
  memset(cur, 0, sizeof cur);
  rt_enum(&set, 3, 2, 0, cur);
  for (int i = 0; i < set.n; i += 3)
    for (int j = 0; j < set.n; j += 2)
      for (int mode = 0; mode < 3; mode++) {
        sk_layout f, t;
        sk_layout_init(&f, &m, 2, rt_s222_2, set.maps[i], NULL);
        sk_layout_init(&t, &m, 2, rt_s222_2, set.maps[j], NULL);
        sk_redist_plan *w = rt_plan(&f, &t, 0, (sk_redist_mode)mode, SK_REDIST_ALL_RANKS);
        for (int r = 0; r < 8; r++) {
          sk_redist_plan *p = rt_plan(&f, &t, 0, (sk_redist_mode)mode, r);
          cr_assert_eq(sk_redist_plan_rank(p), r);
          cr_assert_eq(sk_redist_plan_nsteps(p), sk_redist_plan_nsteps(w));
          for (int k = -1; k < sk_redist_plan_nsteps(w); k++) {
            uint64_t a, b, c, d;
            cr_assert_eq(sk_redist_plan_bytes(p, k, r, &a, &b, NULL), SK_OK);
            cr_assert_eq(sk_redist_plan_bytes(w, k, r, &c, &d, NULL), SK_OK);
            cr_assert(a == c && b == d, "layouts %d -> %d mode %d rank %d step %d: %llu/%llu vs whole %llu/%llu", i, j,
                      mode, r, k, (unsigned long long)a, (unsigned long long)b, (unsigned long long)c,
                      (unsigned long long)d);
            if (k >= 0) {
              sk_redist_step_info x, y;
              sk_redist_plan_step(p, k, &x, NULL);
              sk_redist_plan_step(w, k, &y, NULL);
              cr_assert(x.op == y.op && !strcmp(x.name, y.name));
            }
          }
          cr_assert_neq(sk_redist_plan_bytes(p, -1, (r + 1) % 8, NULL, NULL, NULL), SK_OK, "a rank plan answers for its rank only");
          sk_redist_plan_destroy(p);
        }
        sk_redist_plan_destroy(w);
      }
}

/* A user allocator sees every allocation freed. */
typedef struct rt_counting { long live, total; } rt_counting;
static void *rt_alloc(void *u, size_t n, size_t align) {
  rt_counting *c = (rt_counting *)u;
  c->live++, c->total++;
  return aligned_alloc(align, (n + align - 1) / align * align);
}
static void rt_free(void *u, void *p) {
  ((rt_counting *)u)->live--;
  free(p);
}

Test(redist_cases, allocator_hook, .timeout = 30) {
  rt_counting cnt = {0, 0};
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  d.from = rt_layout("a=2,b=2,c=2", "(a,b),c", 2, rt_s222_2);
  d.to = rt_layout("a=2,b=2,c=2", "c,(b,a)", 2, rt_s222_2);
  d.allocator.alloc = rt_alloc, d.allocator.free = rt_free, d.allocator.user = &cnt;
  sk_redist_plan *p = NULL;
  cr_assert_eq(sk_redist_plan_create(&d, SK_REDIST_ALL_RANKS, &p, NULL), SK_OK);
  char buf[4096];
  sk_redist_plan_format(p, buf, sizeof buf);
  sk_redist_plan_destroy(p);
  cr_expect(cnt.total > 0 && cnt.live == 0, "%ld allocations, %ld not freed", cnt.total, cnt.live);
}

/* ---- bad input -------------------------------------------------------------------------------- */

static void rt_expect_bad(const sk_redist_desc *d, const char *needle) {
  sk_redist_plan *p = (sk_redist_plan *)1;
  sk_error e;
  memset(&e, 0, sizeof e);
  sk_result r = sk_redist_plan_create(d, SK_REDIST_ALL_RANKS, &p, &e);
  cr_expect_eq(r, SK_ERR_INVALID_ARGUMENT, "expected INVALID_ARGUMENT for '%s', got %s", needle, sk_result_name(r));
  cr_expect_null(p);
  cr_expect(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
}

Test(redist_bad_input, plans, .timeout = 30) {
  sk_redist_desc d, base;
  memset(&base, 0, sizeof base);
  base.from = rt_layout("a=2,b=4", "a,None", 2, rt_h);
  base.to = rt_layout("a=2,b=4", "b,None", 2, rt_h);
  sk_error e;
  cr_expect_eq(sk_redist_plan_create(NULL, 0, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  rt_expect_bad(NULL, "desc is NULL");
  d = base;
  static const int64_t other[] = {16, 256};
  d.to = rt_layout("a=2,b=4", "b,None", 2, other);
  rt_expect_bad(&d, "dim 1 is 512 in the from layout but 256 in the to layout");
  d = base;
  d.to = rt_layout("a=3", "None,None", 2, rt_h);
  rt_expect_bad(&d, "from mesh has 8 devices but to mesh has 3; one must divide the other");
  d = base;
  d.to.shape[0] = 18; /* hand-edited: 18 is not divisible by 4 */
  d.from.shape[0] = 18;
  rt_expect_bad(&d, "not divisible");
  d = base;
  d.partial = 1u; /* axis a splits the source */
  rt_expect_bad(&d, "partial axis 'a' also splits the source");
  d = base;
  d.partial = 4u;
  rt_expect_bad(&d, "beyond the from mesh");
  d = base;
  d.dtype = (sk_dtype)42;
  rt_expect_bad(&d, "invalid dtype 42");
  d = base;
  d.mode = SK_REDIST_MINDSPORE;
  d.partial = 2u;
  rt_expect_bad(&d, "non-partial sources only");
  d = base;
  d.mode = SK_REDIST_MINDSPORE;
  d.to = rt_layout("x=3,y=2", "None,None", 2, rt_h); /* across device matrices is fine; 8 vs 6 devices is not */
  rt_expect_bad(&d, "from mesh has 8 devices but to mesh has 6; one must divide the other");
  d = base;
  sk_redist_plan *p = NULL;
  cr_expect_eq(sk_redist_plan_create(&d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "rank 8 out of range") != NULL, "%s", e.msg);
  cr_expect_eq(sk_redist_plan_create(&d, 0, NULL, &e), SK_ERR_INVALID_ARGUMENT);
}

/* Execution: bad buffers anywhere -> INVALID_ARGUMENT on every rank, dst untouched. */
typedef struct rt_bad {
  ct_slot *slots;
  int bad_rank;
  int what; /* 0 small src, 1 small dst, 2 dtype, 3 NULL dst, 4 overlap */
} rt_bad;

static sk_result rt_bad_device(sk_comm *c, void *arg) {
  rt_bad *b = (rt_bad *)arg;
  int r = sk_comm_rank(c);
  ct_slot *s = &b->slots[r];
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  static const int64_t shape[] = {16, 16};
  sk_mesh m;
  sk_mesh_parse(&m, "dp=8", NULL);
  sk_layout_parse(&d.from, &m, "dp,None", 2, shape, NULL);
  sk_layout_parse(&d.to, &m, "None,dp", 2, shape, NULL);
  sk_redist_executor *ex = NULL;
  sk_error e;
  if (!ct_rc(s, sk_redist_executor_create(c, &d, &ex, &e), c, "executor_create")) return SK_OK;
  float src[32], dst[32];
  for (int i = 0; i < 32; i++) src[i] = (float)i, dst[i] = -1.0f;
  size_t ns = 32, nd = 32;
  sk_dtype dt = SK_F32;
  float *dp = dst;
  const float *sp = src;
  if (r == b->bad_rank) {
    if (b->what == 0) ns = 31;
    if (b->what == 1) nd = 3;
    if (b->what == 2) dt = SK_I32;
    if (b->what == 3) dp = NULL;
    if (b->what == 4) sp = dst + 1, dp = dst;
  }
  sk_result rc = sk_redist_execute(ex, sp, ns, dp, nd, dt, NULL);
  ct_check(s, rc == SK_ERR_INVALID_ARGUMENT, "case %d: rank %d got %s, expected INVALID_ARGUMENT", b->what, r,
           sk_result_name(rc));
  const char *msg = sk_comm_error_message(c);
  static const char *const needles[] = {"src has 31 elements", "dst has 3 elements", "dtype i32 does not match",
                                        "dst is NULL", "overlap"};
  if (r == b->bad_rank)
    ct_check(s, strstr(msg, needles[b->what]) != NULL, "case %d: message '%s'", b->what, msg);
  else
    ct_check(s, strstr(msg, "another rank") != NULL, "case %d: message '%s'", b->what, msg);
  bool untouched = true;
  for (int i = 0; i < 32; i++) untouched = untouched && dst[i] == (b->what == 4 && r == b->bad_rank ? dst[i] : -1.0f);
  ct_check(s, untouched, "case %d: dst was written", b->what);
  /* the executor still works afterwards */
  for (int i = 0; i < 32; i++) src[i] = (float)(r * 100 + i);
  ct_rc(s, sk_redist_execute(ex, src, 32, dst, 32, SK_F32, NULL), c, "execute after a rejected call");
  sk_redist_executor_destroy(ex);
  s->ran = 1;
  return SK_OK;
}

Test(redist_bad_input, execute, .timeout = 60) {
  for (int what = 0; what < 5; what++) {
    rt_bad b;
    b.slots = ct_slots_new(8);
    b.bad_rank = 5;
    b.what = what;
    char label[32];
    snprintf(label, sizeof label, "bad execute %d", what);
    ct_run(8, CT_CFG_DEFAULT, rt_bad_device, &b, label);
    ct_expect_slots(b.slots, 8, label);
    free(b.slots);
  }
}

static sk_result rt_bad_comm_device(sk_comm *c, void *arg) {
  ct_slot *s = &((ct_slot *)arg)[sk_comm_rank(c)];
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  static const int64_t shape[] = {16, 16};
  sk_mesh m;
  sk_mesh_parse(&m, "dp=4", NULL);
  sk_layout_parse(&d.from, &m, "dp,None", 2, shape, NULL);
  d.to = d.from;
  sk_redist_executor *ex = (sk_redist_executor *)1;
  sk_error e;
  sk_result r = sk_redist_executor_create(c, &d, &ex, &e);
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT && ex == NULL && strstr(e.msg, "comm has 8 ranks but the mesh has 4"),
           "executor_create on a wrong-size comm: %s: %s", sk_result_name(r), e.msg);
  ct_check(s, sk_redist_executor_create(NULL, &d, &ex, &e) == SK_ERR_INVALID_ARGUMENT, "NULL comm");
  ct_check(s, sk_redist(c, NULL, NULL, 0, NULL, 0, &e) == SK_ERR_INVALID_ARGUMENT, "NULL desc");
  s->ran = 1;
  return SK_OK;
}

Test(redist_bad_input, executor_on_the_wrong_comm, .timeout = 30) {
  ct_slot *s = ct_slots_new(8);
  ct_run(8, CT_CFG_DEFAULT, rt_bad_comm_device, s, "wrong comm");
  ct_expect_slots(s, 8, "wrong comm");
  free(s);
}
