/* test_redist_busiest.c -- sk_redist_step_busiest_us against its definition: the largest
   sk_redist_step_clock_us over every rank, asked rank by rank.

   - A thousand random descriptors (a few hundred of them Send/Recv exchanges): meshes of 1 to 3 axes and 2 to 64 devices, from and to on
     different meshes of one device count (or twice / half the count), every axis unused or at a
     random place of a random dim's tuple (so sources and targets with partial replicas, axes
     listed out of mesh order), shapes a random multiple of both cuts; some sources with partial
     sums (a reduction step, then the exchange). Every step of every plan is priced on a flat
     link and on topologies of 2 and 4 devices a node with different intra and inter links,
     under the identity, a pipeline stage's offset and a shuffled world map: on a topology the
     two prices must be the same double (the fast walk sums the same terms in the same order),
     on the flat link equal to 1e-12 relative (counted per dim: the same terms, summed apart).
   - The same descriptors planned for all ranks at once: every rank's bytes as its own plan's.
   - A thousand more on up to 256 devices and 4-axis meshes, the two sides' meshes drawn
     apart and half their axes unused, counting the exchanges with a receiver holding a piece
     of its own target.
   - A 512-device exchange of the kind the dry run meets at scale (rows by 512 -> 16 x 32).
   - Reshapes that no common shape carries (flat pieces) and collectives take the same value.
   - Bad input names what is wrong. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "shardkit.h"

/* ---- a small deterministic generator --------------------------------------------------------- */

static uint64_t rb_state = 0x9e3779b97f4a7c15ull;

static int rb_below(int n) {
  rb_state = rb_state * 6364136223846793005ull + 1442695040888963407ull;
  return (int)((rb_state >> 33) % (uint64_t)n);
}

/* ---- random meshes and layouts --------------------------------------------------------------- */

/* A mesh of 1..maxaxes axes (at most 4) whose sizes multiply to `devices` (each axis a random
   divisor >= 1 of what is left). */
static sk_mesh rb_mesh_of(int devices, const char *prefix, int maxaxes) {
  int naxes = 1 + rb_below(maxaxes), dims[4] = {1, 1, 1, 1}, left = devices;
  for (int k = 0; k < naxes - 1; k++) {
    int divs[256] = {1}, n = 1; /* 1 divides anything */
    for (int f = 2; f <= left; f++)
      if (left % f == 0) divs[n++] = f;
    dims[k] = divs[rb_below(n)];
    left /= dims[k];
  }
  dims[naxes - 1] = left;
  char names[4][16];
  const char *np[4];
  for (int k = 0; k < naxes; k++) snprintf(names[k], sizeof names[k], "%s%d", prefix, k), np[k] = names[k];
  sk_mesh m;
  sk_error e;
  cr_assert_eq(sk_mesh_init(&m, naxes, dims, np, &e), SK_OK, "%s", e.msg);
  return m;
}

static sk_mesh rb_mesh(int devices, const char *prefix) { return rb_mesh_of(devices, prefix, 3); }

/* Each axis unused (one time in `unused_in`) or appended to a random dim's tuple, axes visited
   in a random order so tuples list them out of mesh order too. */
static void rb_map_with(const sk_mesh *m, int ndims, sk_dim_map *map, int unused_in) {
  memset(map, 0, sizeof(sk_dim_map) * (size_t)ndims);
  int order[SK_MAX_AXES];
  for (int k = 0; k < m->naxes; k++) order[k] = k;
  for (int k = m->naxes - 1; k > 0; k--) {
    int j = rb_below(k + 1), t = order[k];
    order[k] = order[j], order[j] = t;
  }
  for (int i = 0; i < m->naxes; i++) {
    if (rb_below(unused_in) == 0) continue;
    sk_dim_map *dm = &map[rb_below(ndims)];
    dm->axes[dm->naxes++] = order[i];
  }
}

static void rb_map(const sk_mesh *m, int ndims, sk_dim_map *map) { rb_map_with(m, ndims, map, 3); }

static int64_t rb_split(const sk_mesh *m, const sk_dim_map *dm) {
  int64_t s = 1;
  for (int k = 0; k < dm->naxes; k++) s *= m->dims[dm->axes[k]];
  return s;
}

static int64_t rb_lcm(int64_t a, int64_t b) {
  int64_t x = a, y = b;
  while (y) {
    int64_t t = x % y;
    x = y, y = t;
  }
  return a / x * b;
}

/* A random exchange: `devices` on the from side, the same, twice or half on the to side. */
static sk_redist_desc rb_desc(void) {
  static const int counts[] = {2, 3, 4, 6, 8, 12, 16, 24, 32, 64};
  int nf = counts[rb_below(10)], nt = nf, pick = rb_below(4);
  if (pick == 0 && nf <= 32) nt = 2 * nf;
  if (pick == 1 && nf % 2 == 0) nt = nf / 2;
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  sk_mesh mf = rb_mesh(nf, "f"), mt = rb_mesh(nt, "t");
  int ndims = 1 + rb_below(3);
  sk_dim_map fm[SK_MAX_DIMS], tm[SK_MAX_DIMS];
  rb_map(&mf, ndims, fm);
  rb_map(&mt, ndims, tm);
  int64_t shape[SK_MAX_DIMS];
  for (int dd = 0; dd < ndims; dd++)
    shape[dd] = rb_lcm(rb_split(&mf, &fm[dd]), rb_split(&mt, &tm[dd])) * (1 + rb_below(3));
  sk_error e;
  cr_assert_eq(sk_layout_init(&d.from, &mf, ndims, shape, fm, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_init(&d.to, &mt, ndims, shape, tm, &e), SK_OK, "%s", e.msg);
  d.dtype = rb_below(2) ? SK_F32 : SK_BF16;
  uint32_t unused = ((1u << mf.naxes) - 1) & ~sk_layout_used_axes(&d.from);
  if (unused && nt == nf && rb_below(4) == 0) d.partial = unused & (0u - unused); /* the lowest unused axis */
  return d;
}

/* ---- clusters and world maps ------------------------------------------------------------------- */

static sk_cluster rb_flat(void) {
  sk_cluster c;
  memset(&c, 0, sizeof c);
  c.link = (sk_link_model){5, 25};
  return c;
}

/* per_node devices a node, intra and inter links of different prices, room for world ranks
   0 .. 2 * devices (a second pipeline stage). */
static sk_cluster rb_topo(int per_node, int devices) {
  sk_cluster c;
  memset(&c, 0, sizeof c);
  c.topology = (sk_topology){(2 * devices + per_node - 1) / per_node, per_node, {2, 150}, {10, 25}};
  return c;
}

/* kind 0: NULL (identity); 1: a second stage's offset; 2: that offset, shuffled. */
static int *rb_world(int kind, int devices, int *buf) {
  if (kind == 0) return NULL;
  for (int r = 0; r < devices; r++) buf[r] = devices + r;
  if (kind == 2)
    for (int r = devices - 1; r > 0; r--) {
      int j = rb_below(r + 1), t = buf[r];
      buf[r] = buf[j], buf[j] = t;
    }
  return buf;
}

/* ---- the comparison ------------------------------------------------------------------------------ */

static double rb_rank_by_rank(const sk_redist_plan *p, int step, int devices, const sk_cluster *cl, const int *world) {
  double worst = 0;
  for (int r = 0; r < devices; r++) {
    double t = -1;
    sk_error e;
    cr_assert_eq(sk_redist_step_clock_us(p, step, r, cl, world, &t, &e), SK_OK, "rank %d: %s", r, e.msg);
    if (t > worst) worst = t;
  }
  return worst;
}

/* An all-ranks plan (whose exchanges count every rank's pieces in one walk) against each rank's
   own plan: the same bytes each way, the same estimate. */
static void rb_check_all_ranks(const sk_redist_desc *d, const char *what) {
  int devices = d->from.mesh.size > d->to.mesh.size ? d->from.mesh.size : d->to.mesh.size;
  sk_redist_plan *all = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(d, SK_REDIST_ALL_RANKS, &all, &e), SK_OK, "%s: %s", what, e.msg);
  double worst = 0;
  for (int r = 0; r < devices; r++) {
    sk_redist_plan *one = NULL;
    cr_assert_eq(sk_redist_plan_create(d, r, &one, &e), SK_OK, "%s: %s", what, e.msg);
    for (int s = 0; s < sk_redist_plan_nsteps(one); s++) {
      uint64_t ra = 0, sa = 0, r1 = 0, s1 = 0;
      cr_assert_eq(sk_redist_plan_bytes(all, s, r, &ra, &sa, &e), SK_OK, "%s", e.msg);
      cr_assert_eq(sk_redist_plan_bytes(one, s, r, &r1, &s1, &e), SK_OK, "%s", e.msg);
      cr_assert(ra == r1 && sa == s1, "%s, step %d, rank %d: all-ranks plan recv %llu send %llu, rank plan %llu %llu",
                what, s, r, (unsigned long long)ra, (unsigned long long)sa, (unsigned long long)r1,
                (unsigned long long)s1);
    }
    if (sk_redist_plan_cost(one) > worst) worst = sk_redist_plan_cost(one);
    sk_redist_plan_destroy(one);
  }
  /* the whole plan's estimate is the maximum over ranks of each step's (per step, so at least
     the dearest rank plan's total) */
  cr_assert_geq(sk_redist_plan_cost(all), worst * (1 - 1e-12), "%s: all-ranks estimate %.17g under a rank's %.17g",
                what, sk_redist_plan_cost(all), worst);
  sk_redist_plan_destroy(all);
}

/* busiest against rank by rank. On a flat link a Send/Recv step is counted per dim (a side's
   pieces times alpha plus its bytes over the bandwidth) where rank by rank sums each piece's
   price: the same terms summed in another order, so equal up to rounding (1e-12 relative).
   Elsewhere (a topology, collectives) the walk sums the very terms in the very order: the same
   double. */
static void rb_assert_same(double fast, double slow, bool counted, const char *what, int step, const char *name,
                           int cluster, int world) {
  if (counted)
    cr_assert(fabs(fast - slow) <= 1e-12 * fabs(slow),
              "%s, step %d (%s), cluster %d, world map %d: busiest %.17g, rank by rank %.17g (relative %.3g)", what,
              step, name, cluster, world, fast, slow, slow ? fabs(fast - slow) / slow : fast);
  else
    cr_assert(fast == slow, "%s, step %d (%s), cluster %d, world map %d: busiest %.17g, rank by rank %.17g", what,
              step, name, cluster, world, fast, slow);
}

/* Every step of desc's plan on every cluster and world map; returns the Send/Recv steps seen
   with a nonzero price. */
static int rb_check_desc(const sk_redist_desc *d, const char *what) {
  sk_redist_plan *p = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(d, 0, &p, &e), SK_OK, "%s: %s", what, e.msg);
  int devices = d->from.mesh.size > d->to.mesh.size ? d->from.mesh.size : d->to.mesh.size, priced = 0;
  int buf[2 * SK_MAX_DEVICES];
  sk_cluster clusters[3] = {rb_flat(), rb_topo(2, devices), rb_topo(4, devices)};
  for (int s = 0; s < sk_redist_plan_nsteps(p); s++) {
    sk_redist_step_info si;
    cr_assert_eq(sk_redist_plan_step(p, s, &si, &e), SK_OK, "%s", e.msg);
    for (int c = 0; c < 3; c++)
      for (int w = 0; w < 3; w++) {
        const int *world = rb_world(w, devices, buf);
        double fast = -1, slow = rb_rank_by_rank(p, s, devices, &clusters[c], world);
        cr_assert_eq(sk_redist_step_busiest_us(p, s, &clusters[c], world, &fast, &e), SK_OK, "%s: %s", what, e.msg);
        rb_assert_same(fast, slow, c == 0 && si.op == SK_REDIST_SENDRECV, what, s, si.name, c, w);
        if (si.op == SK_REDIST_SENDRECV && slow > 0 && c == 0 && w == 0) priced++;
      }
  }
  sk_redist_plan_destroy(p);
  return priced;
}

Test(redist_busiest, random_exchanges_equal_the_rank_by_rank_max, .timeout = 120) {
  int exchanges = 0;
  for (int i = 0; i < 1000; i++) {
    sk_redist_desc d = rb_desc();
    char what[256], f[96], t[96];
    sk_layout_format(&d.from, f, sizeof f);
    sk_layout_format(&d.to, t, sizeof t);
    snprintf(what, sizeof what, "case %d: [%s] on %d -> [%s] on %d, partial 0x%x", i, f, d.from.mesh.size, t,
             d.to.mesh.size, (unsigned)d.partial);
    exchanges += rb_check_desc(&d, what);
    rb_check_all_ranks(&d, what);
  }
  /* the generator must reach the walk often, not only collectives and local copies */
  cr_assert_gt(exchanges, 200, "only %d Send/Recv exchanges among the random cases", exchanges);
}

/* ---- flat links counted per dim: replicas, two meshes, receivers holding their own piece ------------- */

/* Whether some Send/Recv step of d's plan has a rank whose source slice meets its target
   slice without holding all of it: a receiver that is its own holder for one piece (kept
   local, not a message) and takes others from its peers. */
static bool rb_own_holder(const sk_redist_desc *d) {
  sk_redist_plan *p = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(d, 0, &p, &e), SK_OK, "%s", e.msg);
  bool found = false;
  for (int s = 0; s < sk_redist_plan_nsteps(p) && !found; s++) {
    sk_redist_step_info si;
    cr_assert_eq(sk_redist_plan_step(p, s, &si, &e), SK_OK, "%s", e.msg);
    for (int r = 0; si.op == SK_REDIST_SENDRECV && r < si.from->mesh.size && !found; r++) {
      sk_slice a, b;
      cr_assert_eq(sk_layout_slice(si.from, r, &a, &e), SK_OK, "%s", e.msg);
      cr_assert_eq(sk_layout_slice(si.to, r, &b, &e), SK_OK, "%s", e.msg);
      bool meet = true, inside = true;
      for (int dd = 0; dd < a.ndims; dd++) {
        meet &= a.start[dd] < b.stop[dd] && b.start[dd] < a.stop[dd];
        inside &= a.start[dd] <= b.start[dd] && b.stop[dd] <= a.stop[dd];
      }
      found = meet && !inside;
    }
  }
  sk_redist_plan_destroy(p);
  return found;
}

/* Up to 256 devices, meshes of up to 4 axes drawn apart for the two sides, half the axes
   unused (replicas a receiver's holder must share), shapes one to three times the cuts' lcm
   (so blocks of the two sides straddle each other): the per-dim count on a flat link against
   rank by rank, and the walk's bit-equality on topologies, as for the cases above. */
Test(redist_busiest, flat_counts_with_replicas_and_two_meshes, .timeout = 240) {
  static const int counts[] = {8, 12, 16, 32, 48, 64, 128, 256};
  int exchanges = 0, own = 0, two_meshes = 0;
  for (int i = 0; i < 1000; i++) {
    int n = counts[rb_below(8)], ndims = 1 + rb_below(3);
    sk_mesh mf = rb_mesh_of(n, "f", 4), mt = rb_mesh_of(n, "t", 4);
    sk_dim_map fm[SK_MAX_DIMS], tm[SK_MAX_DIMS];
    rb_map_with(&mf, ndims, fm, 2), rb_map_with(&mt, ndims, tm, 2); /* replicas on both sides */
    int64_t shape[SK_MAX_DIMS];
    for (int dd = 0; dd < ndims; dd++)
      shape[dd] = rb_lcm(rb_split(&mf, &fm[dd]), rb_split(&mt, &tm[dd])) * (1 + rb_below(3));
    sk_redist_desc d;
    memset(&d, 0, sizeof d);
    sk_error e;
    cr_assert_eq(sk_layout_init(&d.from, &mf, ndims, shape, fm, &e), SK_OK, "%s", e.msg);
    cr_assert_eq(sk_layout_init(&d.to, &mt, ndims, shape, tm, &e), SK_OK, "%s", e.msg);
    d.dtype = rb_below(2) ? SK_F32 : SK_BF16;
    char what[256], f[96], t[96];
    sk_layout_format(&d.from, f, sizeof f), sk_layout_format(&d.to, t, sizeof t);
    snprintf(what, sizeof what, "wide case %d: [%s] -> [%s] on %d", i, f, t, n);
    int priced = rb_check_desc(&d, what);
    exchanges += priced;
    if (priced && rb_own_holder(&d)) own++;
    if (priced && memcmp(mf.dims, mt.dims, sizeof mf.dims)) two_meshes++;
  }
  /* the generator must reach what the count has to get right, not only easy exchanges */
  cr_assert_gt(exchanges, 200, "only %d Send/Recv exchanges", exchanges);
  cr_log_info("wide cases: %d exchanges, %d with an own holder, %d between two meshes", exchanges, own, two_meshes);
  cr_assert_gt(own, 30, "only %d exchanges with a rank holding a piece of its own target", own);
  cr_assert_gt(two_meshes, 30, "only %d exchanges between two different meshes", two_meshes);
}

/* A two-dim exchange written as meshes and layout text ("x,None"); a reshape when the shapes
   differ. */
static sk_redist_desc rb_named(const char *from_mesh, const char *from_map, const int64_t *from_shape,
                               const char *to_mesh, const char *to_map, const int64_t *to_shape) {
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  sk_mesh mf, mt;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&mf, from_mesh, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_mesh_parse(&mt, to_mesh, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_parse(&d.from, &mf, from_map, 2, from_shape, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_layout_parse(&d.to, &mt, to_map, 2, to_shape, &e), SK_OK, "%s", e.msg);
  if (memcmp(from_shape, to_shape, 2 * sizeof(int64_t)))
    d.to_ndims = 2, d.to_shape[0] = to_shape[0], d.to_shape[1] = to_shape[1];
  return d;
}

/* The op of step 0 of desc's plan. */
static sk_redist_op rb_first_op(const sk_redist_desc *d) {
  sk_redist_plan *p = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(d, 0, &p, &e), SK_OK, "%s", e.msg);
  sk_redist_step_info si;
  cr_assert_eq(sk_redist_plan_step(p, 0, &si, &e), SK_OK, "%s", e.msg);
  sk_redist_plan_destroy(p);
  return si.op;
}

/* Rows of [2048, 1024] by 512 -> rows by 16 x columns by 32: every rank gathers 32 row blocks'
   column pieces, scattered over the nodes. */
Test(redist_busiest, a_512_device_exchange, .timeout = 120) {
  const int64_t shape[2] = {2048, 1024};
  sk_redist_desc d = rb_named("x=512", "x,None", shape, "r=16,c=32", "r,c", shape);
  cr_assert_eq(rb_check_desc(&d, "rows by 512 -> 16 x 32"), 1);
}

/* A reshape no common shape carries ([6,4] columns by 2 -> [4,6] columns by 2: flat pieces) and
   an AllGather (rows by 4 -> replicated) take the same value as rank by rank. */
Test(redist_busiest, flat_pieces_and_collectives) {
  const int64_t s64[2] = {6, 4}, s46[2] = {4, 6}, s84[2] = {8, 4};
  sk_redist_desc d = rb_named("a=2", "None,a", s64, "a=2", "None,a", s46);
  cr_assert_eq(rb_check_desc(&d, "[6,4] -> [4,6], columns by 2"), 1);
  sk_redist_desc g = rb_named("a=2,b=2", "(a,b),None", s84, "a=2,b=2", "None,None", s84);
  cr_assert_eq(rb_first_op(&g), SK_REDIST_ALLGATHER);
  cr_assert_eq(rb_check_desc(&g, "AllGather of rows by 4"), 0);
}

Test(redist_busiest, bad_input_is_named) {
  const int64_t shape[2] = {8, 8};
  sk_redist_desc d = rb_named("a=4", "a,None", shape, "a=2,b=2", "b,a", shape);
  cr_assert_eq(rb_first_op(&d), SK_REDIST_SENDRECV);
  sk_redist_plan *p = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(&d, 0, &p, &e), SK_OK, "%s", e.msg);
  sk_cluster flat = rb_flat();
  double us = 0;
  cr_assert_eq(sk_redist_step_busiest_us(NULL, 0, &flat, NULL, &us, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "plan is NULL"), "%s", e.msg);
  cr_assert_eq(sk_redist_step_busiest_us(p, 1, &flat, NULL, &us, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "step 1 out of range"), "%s", e.msg);
  cr_assert_eq(sk_redist_step_busiest_us(p, -1, &flat, NULL, &us, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "step -1"), "%s", e.msg);
  cr_assert_eq(sk_redist_step_busiest_us(p, 0, NULL, NULL, &us, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "cluster is NULL"), "%s", e.msg);
  cr_assert_eq(sk_redist_step_busiest_us(p, 0, &flat, NULL, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "us"), "%s", e.msg);
  /* a world map past the topology's devices: the cluster's refusal, as rank by rank */
  sk_cluster small = rb_topo(2, 1); /* 1 node of 2 devices */
  const int world[4] = {0, 1, 2, 3};
  cr_assert_eq(sk_redist_step_busiest_us(p, 0, &small, world, &us, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "world ranks"), "%s", e.msg);
  sk_redist_plan_destroy(p);
}
