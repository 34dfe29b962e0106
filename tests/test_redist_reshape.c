/* test_redist_reshape.c -- sk_redist.h's minimal mode across reshapes and device counts.

   The reference is brute force on flat row-major indices (which a reshape keeps): a rank's slice
   is a bit set of the tensor's elements (every tensor here has at most 64), the rank r of a
   world of W devices holding, under a layout over N devices, the slice of rank r % N.
   - Plans, for the shape pairs [8,4]<->[4,8], [8,4]<->[32], [16]<->[4,4], [2,8,2]<->[4,8],
     [6,4]<->[4,6], [12]<->[3,4], every layout of both shapes on the meshes of 2, 4 and 8
     devices (every ordered factorization; every axis unused or at any place of any dim's tuple;
     pairs thinned to a bounded number per mesh pair), for 4->4, 8->8, 4->8, 8->4 and 2->8
     devices: one step; each rank receives exactly the bytes of its target slice its source
     slice lacks (minimality); sends add up to receives; a collective label agrees with the
     bytes.
   - Execution of a sample of those pairs, with and without partial sums, on the threads
     backend: every rank ends with exactly its target slice.
   - Labels of documented cases, and bad input.
   Device threads never assert: they record into per-rank slots; the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "shardkit.h"
#include "comm_test_util.h"

#define RR_MAX_LAYOUTS 160
#define RR_PAIR_CAP 240 /* plan checks per (shape pair, mesh pair) */
#define RR_EXEC_EVERY 23 /* one pair in this many is also executed */

/* ---- layouts --------------------------------------------------------------------------------- */

typedef struct rr_list {
  int n;
  sk_layout l[RR_MAX_LAYOUTS];
} rr_list;

static sk_mesh rr_mesh(const char *text) {
  sk_mesh m;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&m, text, &e), SK_OK, "%s: %s", text, e.msg);
  return m;
}

static bool rr_known(const rr_list *L, const sk_dim_map *map, int nd) {
  for (int i = 0; i < L->n; i++)
    if (!memcmp(L->l[i].map, map, sizeof(sk_dim_map) * (size_t)nd)) return true;
  return false;
}

/* Every valid layout: axis a goes to dim dim_of[a] (-1: unused); tuples list their axes in the
   order of a permutation of the axes, and every permutation is tried (duplicates dropped). */
static void rr_layouts(rr_list *L, const sk_mesh *m, int nd, const int64_t *shape) {
  int na = m->naxes, ncode = 1, perms[24][SK_MAX_AXES], np = 0;
  for (int a = 0; a < na; a++) ncode *= nd + 1;
  for (int p = 0; p < 27 && np < 24; p++) { /* permutations of up to 3 axes, by digit code */
    int x = p, seen = 0, ok = 1;
    for (int a = 0; a < na; a++, x /= na) {
      perms[np][a] = x % na;
      if (seen & (1 << (x % na))) ok = 0;
      seen |= 1 << (x % na);
    }
    if (ok && x == 0) np++;
  }
  L->n = 0;
  for (int code = 0; code < ncode; code++)
    for (int p = 0; p < np; p++) {
      sk_dim_map map[SK_MAX_DIMS];
      memset(map, 0, sizeof map);
      for (int k = 0; k < na; k++) {
        int a = perms[p][k], c = code;
        for (int j = 0; j < a; j++) c /= nd + 1;
        int d = c % (nd + 1) - 1;
        if (d >= 0) map[d].axes[map[d].naxes++] = a;
      }
      sk_layout l;
      if (rr_known(L, map, nd) || sk_layout_init(&l, m, nd, shape, map, NULL) != SK_OK) continue;
      cr_assert(L->n < RR_MAX_LAYOUTS);
      L->l[L->n++] = l;
    }
}

/* ---- the reference --------------------------------------------------------------------------- */

/* Rank r's slice (r % the layout's device count) as a set of flat indices. */
static uint64_t rr_bits(const sk_layout *l, int r) {
  sk_slice s;
  cr_assert_eq(sk_layout_slice(l, r % l->mesh.size, &s, NULL), SK_OK);
  uint64_t bits = 0;
  int64_t c[SK_MAX_DIMS];
  for (int d = 0; d < l->ndims; d++) c[d] = s.start[d];
  for (;;) {
    int64_t x = 0;
    for (int d = 0; d < l->ndims; d++) x = x * l->shape[d] + c[d];
    bits |= 1ull << x;
    int d = l->ndims - 1;
    while (d >= 0 && ++c[d] == s.stop[d]) c[d] = s.start[d], d--;
    if (d < 0) return bits;
  }
}

static int rr_pop(uint64_t x) { return __builtin_popcountll(x); }

static sk_redist_desc rr_desc(const sk_layout *f, const sk_layout *t) {
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  d.from = *f, d.to = *t;
  bool same = f->ndims == t->ndims && !memcmp(f->shape, t->shape, sizeof(int64_t) * (size_t)f->ndims);
  if (!same) d.to_ndims = t->ndims, memcpy(d.to_shape, t->shape, sizeof d.to_shape);
  return d;
}

static void rr_shape_text(const sk_layout *l, char *buf, size_t cap) {
  int len = snprintf(buf, cap, "[");
  for (int d = 0; d < l->ndims; d++)
    len += snprintf(buf + len, cap - (size_t)len, "%s%lld", d ? "," : "", (long long)l->shape[d]);
  snprintf(buf + len, cap - (size_t)len, "]");
}

static void rr_name(const sk_redist_desc *d, char *buf, size_t cap) {
  char f[96], t[96], mf[96], mt[96], sf[64], st[64];
  sk_layout_format(&d->from, f, sizeof f), sk_layout_format(&d->to, t, sizeof t);
  sk_mesh_format(&d->from.mesh, mf, sizeof mf), sk_mesh_format(&d->to.mesh, mt, sizeof mt);
  rr_shape_text(&d->from, sf, sizeof sf), rr_shape_text(&d->to, st, sizeof st);
  snprintf(buf, cap, "%s %s \"%s\" -> %s %s \"%s\" partial 0x%x", mf, sf, f, mt, st, t, d->partial);
}

typedef struct rr_tally {
  long plans, flat, coll, local;
} rr_tally;

/* The plan of one pair, for every rank: one step, minimal bytes, a label the bytes agree with. */
static void rr_check_plan(const sk_redist_desc *d, rr_tally *tl) {
  char name[640];
  rr_name(d, name, sizeof name);
  sk_redist_plan *p = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(d, SK_REDIST_ALL_RANKS, &p, &e), SK_OK, "%s: %s", name, e.msg);
  cr_assert_eq(sk_redist_plan_nsteps(p), 1, "%s: %d steps", name, sk_redist_plan_nsteps(p));
  sk_redist_step_info si;
  cr_assert_eq(sk_redist_plan_step(p, 0, &si, NULL), SK_OK);
  int W = d->from.mesh.size > d->to.mesh.size ? d->from.mesh.size : d->to.mesh.size;
  uint64_t tot_r = 0, tot_s = 0;
  for (int r = 0; r < W; r++) {
    uint64_t rv = 0, sv = 0, S = rr_bits(&d->from, r), T = rr_bits(&d->to, r);
    cr_assert_eq(sk_redist_plan_bytes(p, -1, r, &rv, &sv, NULL), SK_OK);
    cr_assert_eq(rv, 4u * (uint64_t)rr_pop(T & ~S), "%s: rank %d receives %llu B, minimal %d", name, r,
                 (unsigned long long)rv, 4 * rr_pop(T & ~S));
    if (si.op == SK_REDIST_ALLGATHER || si.op == SK_REDIST_ALLTOALL)
      cr_assert_eq(rv, 4u * (uint64_t)(si.group_size - 1) * si.count, "%s: %s bytes", name, si.name);
    tot_r += rv, tot_s += sv;
  }
  cr_assert_eq(tot_r, tot_s, "%s: %llu B received, %llu sent", name, (unsigned long long)tot_r,
               (unsigned long long)tot_s);
  if (si.op == SK_REDIST_LOCAL) cr_assert_eq(tot_r, 0u, "%s: local step receives", name);
  tl->plans++;
  tl->flat += strstr(si.detail, "flat") != NULL;
  tl->coll += si.op == SK_REDIST_ALLGATHER || si.op == SK_REDIST_ALLTOALL;
  tl->local += si.op == SK_REDIST_LOCAL;
  sk_redist_plan_destroy(p);
}

/* ---- execution ------------------------------------------------------------------------------- */

typedef struct rr_exec {
  sk_redist_desc *cases;
  int n;
  ct_slot *slots;
} rr_exec;

/* Rank r's position in its partial group: its from-mesh coordinates on the partial axes. */
static int rr_ppos(const sk_redist_desc *d, int r) {
  const sk_mesh *m = &d->from.mesh;
  int c[SK_MAX_AXES], x = r % m->size, k = 0;
  for (int a = m->naxes - 1; a >= 0; a--) c[a] = x % m->dims[a], x /= m->dims[a];
  for (int a = 0; a < m->naxes; a++)
    if (d->partial & (1u << a)) k = k * m->dims[a] + c[a];
  return k;
}

static int rr_pgroup(const sk_redist_desc *d) {
  int g = 1;
  for (int a = 0; a < d->from.mesh.naxes; a++)
    if (d->partial & (1u << a)) g *= d->from.mesh.dims[a];
  return g;
}

/* A slice's flat indices in buffer order (increasing). */
static int rr_order(uint64_t bits, int64_t *out) {
  int n = 0;
  for (int x = 0; x < 64; x++)
    if (bits >> x & 1) out[n++] = x;
  return n;
}

/* One case on rank r: source element = flat + 100 * (position in the partial group); the target
   must hold g * flat + 100 * g(g-1)/2 (g = 1 without partial sums). */
static void rr_exec_case(sk_comm *comm, const sk_redist_desc *d, ct_slot *s) {
  int r = sk_comm_rank(comm), g = rr_pgroup(d);
  int64_t fi[64], ti[64];
  int nf = rr_order(rr_bits(&d->from, r), fi), nt = rr_order(rr_bits(&d->to, r), ti);
  float src[64], dst[64 + 1];
  for (int i = 0; i < nf; i++) src[i] = (float)fi[i] + 100.0f * (float)rr_ppos(d, r);
  for (int i = 0; i <= nt; i++) dst[i] = -1.0f;
  char name[640];
  rr_name(d, name, sizeof name);
  sk_error e;
  sk_result rc = sk_redist(comm, d, src, (size_t)nf, dst, (size_t)nt, &e);
  if (!ct_check(s, rc == SK_OK, "%s: rank %d: %s: %s", name, r, sk_result_name(rc), e.msg)) return;
  ct_check(s, dst[nt] == -1.0f, "%s: rank %d: wrote past its target slice", name, r);
  for (int i = 0; i < nt; i++) {
    float want = (float)g * (float)ti[i] + 50.0f * (float)(g * (g - 1));
    if (!ct_check(s, dst[i] == want, "%s: rank %d element %d (flat %lld): got %g, want %g", name, r, i,
                  (long long)ti[i], (double)dst[i], (double)want))
      return;
  }
}

static sk_result rr_device(sk_comm *comm, void *arg) {
  rr_exec *x = (rr_exec *)arg;
  ct_slot *s = &x->slots[sk_comm_rank(comm)];
  for (int i = 0; i < x->n && !s->nfail; i++) rr_exec_case(comm, &x->cases[i], s);
  s->ran = 1;
  return SK_OK;
}

/* The cases on the threads backend as it is (Send/Recv steps read peers' buffers), then as a
   backend without a shared address space (they exchange messages, packed and unpacked). */
static void rr_execute(sk_redist_desc *cases, int n, int W, const char *label) {
  sk_backend msgs = *sk_threads_backend();
  msgs.name = "threads-messages";
  msgs.peer_access = NULL, msgs.shared_address_space = 0;
  for (int k = 0; k < 2; k++) {
    rr_exec x = {cases, n, ct_slots_new(W)};
    sk_world_desc wd;
    memset(&wd, 0, sizeof wd);
    wd.ndevices = W, wd.timeout_ms = CT_TIMEOUT_MS, wd.backend = k ? &msgs : sk_threads_backend();
    sk_world *w = NULL;
    sk_error e;
    cr_assert_eq(sk_world_create(&wd, &w, &e), SK_OK, "%s", e.msg);
    sk_result r = sk_world_run(w, rr_device, &x, NULL);
    cr_expect_eq(r, SK_OK, "%s (%s): %s", label, wd.backend->name, sk_world_error_message(w));
    sk_world_destroy(w, NULL);
    ct_expect_slots(x.slots, W, label);
    free(x.slots);
  }
}

/* ---- the enumeration ------------------------------------------------------------------------- */

typedef struct rr_shape {
  int nd;
  int64_t s[SK_MAX_DIMS];
} rr_shape;

static const rr_shape rr_pairs[][2] = {
    {{2, {8, 4}}, {2, {4, 8}}},   {{2, {8, 4}}, {1, {32}}},  {{1, {16}}, {2, {4, 4}}},
    {{3, {2, 8, 2}}, {2, {4, 8}}}, {{2, {6, 4}}, {2, {4, 6}}}, {{1, {12}}, {2, {3, 4}}},
};
#define RR_NPAIRS ((int)(sizeof rr_pairs / sizeof rr_pairs[0]))

static const char *const rr_meshes2[] = {"a=2", NULL};
static const char *const rr_meshes4[] = {"a=4", "a=2,b=2", NULL};
static const char *const rr_meshes8[] = {"a=8", "a=2,b=4", "a=4,b=2", "a=2,b=2,c=2", NULL};

/* Every shape pair both ways, every mesh of the two lists, every pair of layouts (thinned to
   RR_PAIR_CAP per mesh pair): plan checks; every RR_EXEC_EVERY-th pair is executed too. */
static void rr_sweep(const char *const *fm, const char *const *tm, const char *label) {
  static rr_list F, T;
  int cap = 4096, n = 0, W = 0;
  sk_redist_desc *exec = calloc((size_t)cap, sizeof *exec);
  rr_tally tl = {0, 0, 0, 0};
  for (int sp = 0; sp < 2 * RR_NPAIRS; sp++) {
    const rr_shape *a = &rr_pairs[sp / 2][sp % 2], *b = &rr_pairs[sp / 2][1 - sp % 2];
    for (int i = 0; fm[i]; i++)
      for (int j = 0; tm[j]; j++) {
        sk_mesh mf = rr_mesh(fm[i]), mt = rr_mesh(tm[j]);
        W = mf.size > mt.size ? mf.size : mt.size;
        rr_layouts(&F, &mf, a->nd, a->s);
        rr_layouts(&T, &mt, b->nd, b->s);
        long pairs = (long)F.n * T.n, stride = pairs / RR_PAIR_CAP + 1;
        for (long k = 0; k < pairs; k += stride) {
          sk_redist_desc d = rr_desc(&F.l[k / T.n], &T.l[k % T.n]);
          rr_check_plan(&d, &tl);
          if ((tl.plans % RR_EXEC_EVERY) == 0 && n < cap) exec[n++] = d;
        }
      }
  }
  cr_log_info("%s: %ld plans (%ld collectives, %ld local, %ld flat), %d executed", label, tl.plans, tl.coll, tl.local,
              tl.flat, n);
  cr_expect(tl.coll > 0 && tl.local > 0 && tl.flat > 0, "%s: %ld collectives, %ld local, %ld flat", label, tl.coll,
            tl.local, tl.flat);
  rr_execute(exec, n, W, label);
  free(exec);
}

Test(redist_reshape, four_devices, .timeout = 30) { rr_sweep(rr_meshes4, rr_meshes4, "4 -> 4 devices"); }
Test(redist_reshape, eight_devices, .timeout = 30) { rr_sweep(rr_meshes8, rr_meshes8, "8 -> 8 devices"); }
Test(redist_reshape, four_to_eight, .timeout = 30) { rr_sweep(rr_meshes4, rr_meshes8, "4 -> 8 devices"); }
Test(redist_reshape, eight_to_four, .timeout = 30) { rr_sweep(rr_meshes8, rr_meshes4, "8 -> 4 devices"); }
Test(redist_reshape, two_to_eight, .timeout = 30) { rr_sweep(rr_meshes2, rr_meshes8, "2 -> 8 devices"); }

/* ---- documented cases ------------------------------------------------------------------------ */

static sk_layout rr_layout(const char *mesh, const char *map, int nd, const int64_t *shape) {
  sk_mesh m = rr_mesh(mesh);
  sk_layout l;
  sk_error e;
  cr_assert_eq(sk_layout_parse(&l, &m, map, nd, shape, &e), SK_OK, "%s: %s", map, e.msg);
  return l;
}

static const int64_t rr_84[] = {8, 4}, rr_48[] = {4, 8}, rr_32[] = {32}, rr_16[] = {16}, rr_44[] = {4, 4};
static const int64_t rr_64[] = {6, 4}, rr_46[] = {4, 6};

static sk_redist_desc rr_pair(const char *fm, const char *fmap, int fnd, const int64_t *fs, const char *tm,
                              const char *tmap, int tnd, const int64_t *ts) {
  sk_layout f = rr_layout(fm, fmap, fnd, fs), t = rr_layout(tm, tmap, tnd, ts);
  return rr_desc(&f, &t);
}

/* The plan's only step (after the generic plan checks) is op; its detail mentions `detail`. */
static void rr_expect_op(const sk_redist_desc *d, sk_redist_op op, const char *detail) {
  rr_tally tl = {0, 0, 0, 0};
  rr_check_plan(d, &tl);
  char name[640], text[2048];
  rr_name(d, name, sizeof name);
  sk_redist_plan *p = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(d, SK_REDIST_ALL_RANKS, &p, &e), SK_OK, "%s", e.msg);
  sk_redist_step_info si;
  cr_assert_eq(sk_redist_plan_step(p, 0, &si, NULL), SK_OK);
  sk_redist_plan_format(p, text, sizeof text);
  cr_log_info("%s", text);
  cr_expect_eq(si.op, op, "%s: %s, want %s", name, si.name, sk_redist_op_name(op));
  if (detail) cr_expect(strstr(si.detail, detail), "%s: detail '%s' lacks '%s'", name, si.detail, detail);
  sk_redist_plan_destroy(p);
}

Test(redist_reshape, labels, .timeout = 30) {
  /* rows by 4 of [8,4] are flat quarters: gathering them all is an AllGather of [32] */
  sk_redist_desc d = rr_pair("a=4", "a,None", 2, rr_84, "a=4", "None", 1, rr_32);
  rr_expect_op(&d, SK_REDIST_ALLGATHER, NULL);
  /* [16] by 4 -> rows by 4 of [4,4]: the same quarters, nothing moves */
  d = rr_pair("a=4", "a", 1, rr_16, "a=4", "a,None", 2, rr_44);
  rr_expect_op(&d, SK_REDIST_LOCAL, NULL);
  /* rows by 4 of [8,4] (flat eighths by 4) -> column pairs of [4,8]: 2 elements to and from
     every rank */
  d = rr_pair("a=4", "a,None", 2, rr_84, "a=4", "None,a", 2, rr_48);
  rr_expect_op(&d, SK_REDIST_ALLTOALL, NULL);
  /* rows by 8 of [8,4] -> columns by 8 of [4,8]: column c comes from 4 of the 8 ranks */
  d = rr_pair("a=8", "a,None", 2, rr_84, "a=8", "None,a", 2, rr_48);
  rr_expect_op(&d, SK_REDIST_SENDRECV, NULL);
  /* 4 -> 8 devices: rank r of 8 holds rank r % 4's rows, which its target (rows by the minor
     axis b, replicated along a) is: the repeat axis is on the left */
  d = rr_pair("a=4", "a,None", 2, rr_84, "a=2,b=4", "b,None", 2, rr_84);
  rr_expect_op(&d, SK_REDIST_LOCAL, NULL);
  d = rr_pair("a=2,b=4", "b,None", 2, rr_84, "a=4", "a,None", 2, rr_84); /* and back */
  rr_expect_op(&d, SK_REDIST_LOCAL, NULL);
  /* ... whereas rows by the major axis a are not what rank r % 4 held: an AllGather over b */
  d = rr_pair("a=4", "a,None", 2, rr_84, "a=2,b=4", "a,None", 2, rr_84);
  rr_expect_op(&d, SK_REDIST_SENDRECV, NULL);
  /* [6,4] columns by 2 -> [4,6] columns by 2: no common shape carries both cuts */
  d = rr_pair("a=2", "None,a", 2, rr_64, "a=2", "None,a", 2, rr_46);
  rr_expect_op(&d, SK_REDIST_SENDRECV, "flat");
}

/* The price of a step moved by peer access (sk_redist_step_clock_us), on rows by 8 of [8,4] ->
   columns by 8 of [4,8]: column c comes one element each from ranks c/4, 2+c/4, 4+c/4, 6+c/4
   and row r goes to columns 4r%8 .. 4r%8+3. Rank 1 receives 4 messages (from 0, 2, 4, 6) and
   sends 4 (to 4..7); rank 0 receives 3 (from 2, 4, 6) and sends 3 (to 1, 2, 3), its own
   element local. A message: alpha + 4 bytes / bandwidth. The rank pays its busier side. */
static double rr_clock_us(const sk_redist_plan *p, int step, int rank, const sk_cluster *cl, const int *world) {
  double us = -1;
  sk_error e;
  cr_assert_eq(sk_redist_step_clock_us(p, step, rank, cl, world, &us, &e), SK_OK, "%s", e.msg);
  return us;
}

static bool rr_near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1, fabs(b)); }

Test(redist_reshape, peer_access_clock_prices, .timeout = 30) {
  sk_redist_desc d = rr_pair("a=8", "a,None", 2, rr_84, "a=8", "None,a", 2, rr_48);
  sk_redist_plan *p = NULL;
  cr_assert_eq(sk_redist_plan_create(&d, 3, &p, NULL), SK_OK);
  sk_cluster flat;
  memset(&flat, 0, sizeof flat);
  flat.link = (sk_link_model){10, 25};
  double msg = 10 + 4 / 25e3;
  cr_assert(rr_near(rr_clock_us(p, 0, 1, &flat, NULL), 4 * msg), "rank 1: %.17g", rr_clock_us(p, 0, 1, &flat, NULL));
  cr_assert(rr_near(rr_clock_us(p, 0, 0, &flat, NULL), 3 * msg), "rank 0: %.17g", rr_clock_us(p, 0, 0, &flat, NULL));
  /* 2 nodes of 4: rank 1 receives from 0, 2 inside its node and 4, 6 across, sends all 4 across:
     the send side (4 inter messages) is the busier; rank 0 receives from 2 inside and 4, 6
     across, sends to 1, 2, 3 inside: the receive side */
  sk_cluster topo;
  memset(&topo, 0, sizeof topo);
  topo.topology = (sk_topology){2, 4, {2, 150}, {10, 25}};
  double intra = 2 + 4 / 150e3, inter = 10 + 4 / 25e3;
  cr_assert(rr_near(rr_clock_us(p, 0, 1, &topo, NULL), 4 * inter), "rank 1 on 2x4");
  cr_assert(rr_near(rr_clock_us(p, 0, 0, &topo, NULL), intra + 2 * inter), "rank 0 on 2x4");
  /* the ranks as world ranks 7..0: rank 0 is world 7 (node 1), its sources 2, 4, 6 are 5, 3, 1 */
  const int reversed[8] = {7, 6, 5, 4, 3, 2, 1, 0};
  cr_assert(rr_near(rr_clock_us(p, 0, 0, &topo, reversed), intra + 2 * inter), "rank 0 reversed");
  /* ranks spread over the nodes: rank 0 = world 0 receives from worlds 1, 2, 3 (its node) and
     sends to worlds 4, 1, 5: two across, so the send side */
  const int spread[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  cr_assert(rr_near(rr_clock_us(p, 0, 0, &topo, spread), intra + 2 * inter), "rank 0 spread");
  sk_error e;
  double us;
  cr_assert_eq(sk_redist_step_clock_us(p, 1, 0, &flat, NULL, &us, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "step 1"), "%s", e.msg);
  cr_assert_eq(sk_redist_step_clock_us(p, 0, 8, &flat, NULL, &us, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "rank 8"), "%s", e.msg);
  cr_assert_eq(sk_redist_step_clock_us(p, 0, 0, NULL, NULL, &us, &e), SK_ERR_INVALID_ARGUMENT);
  sk_redist_plan_destroy(p);
  /* an AllGather of rows by 4 of [8,4] into [32]: that collective on the members' world ranks */
  d = rr_pair("a=4", "a,None", 2, rr_84, "a=4", "None", 1, rr_32);
  cr_assert_eq(sk_redist_plan_create(&d, SK_REDIST_ALL_RANKS, &p, NULL), SK_OK);
  const int world[4] = {6, 0, 4, 2}, sorted[4] = {0, 2, 4, 6};
  double want = 0;
  sk_coll_algo algo;
  cr_assert_eq(sk_cluster_coll_us(&topo, SK_COLL_ALLGATHER, 8, SK_F32, 4, sorted, &algo, &want, NULL), SK_OK);
  cr_assert(rr_near(rr_clock_us(p, 0, 2, &topo, world), want), "AllGather: %.17g, want %.17g", rr_clock_us(p, 0, 2, &topo, world), want);
  sk_redist_plan_destroy(p);
}

Test(redist_reshape, partial_sources, .timeout = 30) {
  /* partial over b (the from layout leaves it unused) */
  sk_redist_desc four[3], eight[1];
  four[0] = rr_pair("a=2,b=2", "a,None", 2, rr_84, "a=2,b=2", "None,b", 2, rr_48);
  four[1] = rr_pair("a=2,b=2", "a,None", 2, rr_84, "a=2,b=2", "(a,b)", 1, rr_32);
  four[2] = rr_pair("a=2,b=2", "None,a", 2, rr_64, "a=2", "None,a", 2, rr_46); /* flat */
  eight[0] = rr_pair("a=2,b=2", "a,None", 2, rr_84, "a=2,b=2,c=2", "(c,a)", 1, rr_32);
  for (int i = 0; i < 3; i++) four[i].partial = 2u;
  eight[0].partial = 2u;
  rr_execute(four, 3, 4, "partial sources across reshapes");
  rr_execute(eight, 1, 8, "partial source, 4 -> 8 devices and a reshape");
}

/* ---- bad input ------------------------------------------------------------------------------- */

static void rr_expect_bad(const sk_redist_desc *d, const char *needle) {
  sk_redist_plan *p = NULL;
  sk_error e;
  memset(&e, 0, sizeof e);
  cr_expect_eq(sk_redist_plan_create(d, SK_REDIST_ALL_RANKS, &p, &e), SK_ERR_INVALID_ARGUMENT, "%s", needle);
  cr_expect_null(p);
  cr_expect(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
}

Test(redist_reshape, bad_input, .timeout = 30) {
  sk_redist_desc d = rr_pair("a=4", "a,None", 2, rr_84, "a=4", "None,a", 2, rr_48), base = d;
  d.to_ndims = 0; /* a reshape must be declared */
  rr_expect_bad(&d, "dim 0 is 8 in the from layout but 4 in the to layout");
  d = base;
  d.to_shape[1] = 9;
  rr_expect_bad(&d, "dim 1 is 9 in to_shape but 8 in the to layout");
  d = base;
  d.to_ndims = 1;
  rr_expect_bad(&d, "to_shape has 1 dims but to layout has 2");
  d = base;
  d.to_ndims = 9;
  rr_expect_bad(&d, "to_ndims 9 out of range");
  d = base;
  d.mode = SK_REDIST_MINDSPORE; /* every mode takes the reshape the same way */
  d.to_ndims = 0;
  rr_expect_bad(&d, "dim 0 is 8 in the from layout but 4 in the to layout");
  d.to_shape[1] = 9, d.to_ndims = 2;
  rr_expect_bad(&d, "dim 1 is 9 in to_shape but 8 in the to layout");
  d = base;
  d.to = rr_layout("a=3", "None,None", 2, rr_48);
  rr_expect_bad(&d, "from mesh has 4 devices but to mesh has 3; one must divide the other");
  d = rr_pair("a=4", "a,None", 2, rr_84, "a=2", "None,a", 2, rr_46);
  rr_expect_bad(&d, "a reshape keeps the element count: from has 32, to has 24");
  /* [4, 2^62 + 1] holds 2^64 + 4 elements (4 once wrapped to 64 bits), in every mode */
  static const int64_t s4[] = {4}, huge[] = {4, 4611686018427387905LL};
  base = rr_pair("a=2", "a", 1, s4, "a=2", "None,None", 2, huge);
  for (int mode = 0; mode < 3; mode++) {
    d = base, d.mode = (sk_redist_mode)mode;
    rr_expect_bad(&d, "the to tensor has more bytes than fit a 63-bit size");
  }
  d = rr_pair("a=2", "None,None", 2, huge, "a=2", "a", 1, s4);
  rr_expect_bad(&d, "the from tensor has more bytes than fit a 63-bit size");
  /* the layout on fewer devices has no room left for the repeat axis: say which one */
  d = rr_pair("a=2,b=1,c=1,d=1,e=1,f=1,g=1,h=1", "a,None", 2, rr_84, "x=4", "x,None", 2, rr_84);
  rr_expect_bad(&d, "from layout on 4 devices: mesh has 8 axes already; no room for the repeat axis");
}
