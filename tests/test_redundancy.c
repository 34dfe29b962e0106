/* sk_redundancy.h: MindSpore's parameter redundancy groups (their order, the optimizer-shard
   split and its dropped groups, the initial rank), remove_param_redundancy's round-robin owners
   (keep_redundancy 1 and 2), and parameter_broadcast on 8 device threads.

   The groups are checked against MindSpore's published examples and, exhaustively over small
   meshes, against a brute force written here from the definition (a key vector per position,
   the keys sorted), not from the library's code. The broadcast's expected values come from the
   same brute force plus a round robin over the sorted names, also written here.

   Device threads never assert: each records its result and message; the test's thread asserts
   after sk_world_run returns. Every threaded test has a .timeout and its world a short one. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "expect_bad.h"

#define NDEV 8
#define WORLD_TIMEOUT_MS 20000u
#define MAXP 8

/* ---- helpers ------------------------------------------------------------------------------- */

/* A layout from MindSpore's dev_matrix and numeric tensor_map text ("(0,-1)"). */
static sk_layout ms_layout(int naxes, const int *dims, const char *map, int ndims, const int64_t *shape) {
  static const char *const names[] = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"};
  sk_error e = {SK_OK, ""};
  sk_mesh m;
  cr_assert_eq(sk_mesh_init(&m, naxes, dims, names, &e), SK_OK, "mesh: %s", e.msg);
  sk_dim_map dm[SK_MAX_DIMS];
  int nd = 0;
  cr_assert_eq(sk_ms_map_parse(map, dm, &nd, &e), SK_OK, "map %s: %s", map, e.msg);
  cr_assert_eq(nd, ndims, "map %s has %d dims", map, nd);
  sk_layout l;
  cr_assert_eq(sk_layout_from_ms_map(&l, &m, ndims, shape, dm, &e), SK_OK, "layout %s: %s", map, e.msg);
  return l;
}

/* Asserts the groups of l equal want (ngroups groups of gsize ranks, flattened). */
static void expect_groups(const sk_layout *l, int k, int init, int ngroups, int gsize, const int *want) {
  int ranks[SK_MAX_DEVICES], ng = -1, gs = -1;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_redundancy_groups(l, k, init, ranks, SK_MAX_DEVICES, &ng, &gs, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(ng, ngroups, "ngroups %d, want %d", ng, ngroups);
  cr_assert_eq(gs, gsize, "group_size %d, want %d", gs, gsize);
  for (int i = 0; i < ng * gs; i++)
    cr_expect_eq(ranks[i], want[i], "group %d entry %d: %d, want %d", i / gs, i % gs, ranks[i], want[i]);
}

/* The brute force: position p's key has entry naxes-1-a = p's coordinate on axis a for every
   used axis a (0 elsewhere); positions with equal keys form a group; groups in ascending key
   order; then each group g becomes g[0::K] .. g[K-1::K], or is dropped when K does not divide
   its length. Returns the number of groups; *gsize their length. */
static int brute_groups(const sk_layout *l, int k, int init, int *out, int *gsize) {
  const sk_mesh *m = &l->mesh;
  int P = m->size, n = m->naxes;
  uint32_t used = sk_layout_used_axes(l);
  int keys[SK_MAX_DEVICES][SK_MAX_AXES], order[SK_MAX_DEVICES], nkeys = 0;
  for (int p = 0; p < P; p++) {
    int c[SK_MAX_AXES], key[SK_MAX_AXES] = {0};
    sk_mesh_coords(m, p, c, NULL);
    for (int a = 0; a < n; a++)
      if (used & (1u << a)) key[n - 1 - a] = c[a];
    int seen = 0;
    for (int j = 0; j < nkeys && !seen; j++) seen = memcmp(keys[j], key, sizeof key) == 0;
    if (!seen) memcpy(keys[nkeys++], key, sizeof key);
  }
  for (int i = 0; i < nkeys; i++) order[i] = i;
  for (int i = 1; i < nkeys; i++) /* insertion sort, lexicographic */
    for (int j = i; j > 0 && memcmp(keys[order[j - 1]], keys[order[j]], sizeof keys[0]) > 0; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  if (nkeys == 0) return *gsize = 0;
  int K = k > 1 ? k : 1, S = P / nkeys, ng = 0, w = 0;
  if (S % K) return *gsize = 0;
  for (int i = 0; i < nkeys; i++) {
    int g[SK_MAX_DEVICES], len = 0;
    for (int p = 0; p < P; p++) {
      int c[SK_MAX_AXES], key[SK_MAX_AXES] = {0};
      sk_mesh_coords(m, p, c, NULL);
      for (int a = 0; a < n; a++)
        if (used & (1u << a)) key[n - 1 - a] = c[a];
      if (memcmp(key, keys[order[i]], sizeof key) == 0) g[len++] = init + p;
    }
    for (int part = 0; part < K; part++, ng++)
      for (int j = part; j < len; j += K) out[w++] = g[j];
  }
  *gsize = S / K;
  return ng;
}

/* ---- MindSpore's examples ----------------------------------------------------------------- */

Test(redundancy, fc1_weight_model_parallel) {
  /* fc1_weight [784,512], MatMul ((2,4),(4,1)): dev (2,4), map (0,-1) */
  int64_t shape[] = {784, 512};
  int dims[] = {2, 4};
  sk_layout l = ms_layout(2, dims, "(0,-1)", 2, shape);
  int want[] = {0, 4, 1, 5, 2, 6, 3, 7};
  expect_groups(&l, 0, 0, 4, 2, want);
  expect_groups(&l, 1, 0, 4, 2, want); /* K = 1: no split */
  /* the same layout unstandardized: dev (2,4,1), map (1,0) */
  int dims3[] = {2, 4, 1};
  sk_layout u = ms_layout(3, dims3, "(1,0)", 2, shape);
  expect_groups(&u, 0, 0, 4, 2, want);
}

Test(redundancy, fully_replicated) {
  int64_t shape[] = {784, 512};
  int dims[] = {2, 4};
  sk_layout l = ms_layout(2, dims, "(-1,-1)", 2, shape);
  int want[] = {0, 1, 2, 3, 4, 5, 6, 7};
  expect_groups(&l, 0, 0, 1, 8, want);
}

Test(redundancy, hsdp_opt_shard_2) {
  int64_t shape[] = {784, 512};
  int dims[] = {2, 4};
  sk_layout l = ms_layout(2, dims, "(0,-1)", 2, shape);
  int want[] = {0, 4, 1, 5, 2, 6, 3, 7};
  expect_groups(&l, 2, 0, 8, 1, want);
}

Test(redundancy, opt_shard_2_on_16) {
  int64_t shape[] = {64, 64};
  int dims[] = {4, 4};
  sk_layout l = ms_layout(2, dims, "(0,-1)", 2, shape);
  int want[] = {0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15};
  expect_groups(&l, 2, 0, 8, 2, want);
}

Test(redundancy, key_order_is_not_rank_order) {
  /* dev (2,2,2), tensor_map (2,0): axes 0 and 2 used; entry 0 of the key is axis 2 */
  int64_t shape[] = {4, 4};
  int dims[] = {2, 2, 2};
  sk_layout l = ms_layout(3, dims, "(2,0)", 2, shape);
  int want[] = {0, 2, 4, 6, 1, 3, 5, 7};
  expect_groups(&l, 0, 0, 4, 2, want);
}

Test(redundancy, dropped_groups) {
  int64_t shape[] = {784, 512};
  int dims[] = {2, 4};
  sk_layout rep = ms_layout(2, dims, "(-1,-1)", 2, shape);
  sk_layout mp = ms_layout(2, dims, "(0,-1)", 2, shape);
  int ranks[8] = {-1}, ng = -1, gs = -1;
  cr_assert_eq(sk_redundancy_groups(&rep, 3, 0, ranks, 8, &ng, &gs, NULL), SK_OK); /* 8 % 3 != 0 */
  cr_expect_eq(ng, 0);
  cr_expect_eq(gs, 0);
  cr_assert_eq(sk_redundancy_groups(&mp, 4, 0, NULL, 0, &ng, &gs, NULL), SK_OK); /* 2 % 4 != 0; no room needed */
  cr_expect_eq(ng, 0);
  cr_expect_eq(gs, 0);
  int want4[] = {0, 4, 1, 5, 2, 6, 3, 7};
  expect_groups(&rep, 4, 0, 4, 2, want4); /* 8 % 4 == 0: (0..7) -> (0,4)(1,5)(2,6)(3,7) */
}

Test(redundancy, initial_rank) {
  int64_t shape[] = {784, 512};
  int dims[] = {2, 4};
  sk_layout l = ms_layout(2, dims, "(0,-1)", 2, shape);
  cr_expect_eq(sk_redundancy_initial_rank(&l, 0), 0);
  cr_expect_eq(sk_redundancy_initial_rank(&l, 7), 0);
  cr_expect_eq(sk_redundancy_initial_rank(&l, 8), 8);
  cr_expect_eq(sk_redundancy_initial_rank(&l, 13), 8);
  cr_expect_eq(sk_redundancy_initial_rank(&l, 23), 16);
  cr_expect_eq(sk_redundancy_initial_rank(&l, -1), -1);
  cr_expect_eq(sk_redundancy_initial_rank(NULL, 3), -1);
  int want[] = {8, 12, 9, 13, 10, 14, 11, 15};
  expect_groups(&l, 0, 8, 4, 2, want);
}

/* Every layout of meshes up to 3 axes of sizes 1..3 (every subset of axes used, one axis per
   dim), K in {0, 2, 3}, against the brute force. */
Test(redundancy, exhaustive_small_meshes) {
  int checked = 0;
  for (int naxes = 1; naxes <= 3; naxes++)
    for (int code = 0; code < (naxes == 1 ? 3 : naxes == 2 ? 9 : 27); code++) { /* every sizes tuple */
      int dims[3], x = code;
      for (int a = 0; a < 3; a++) dims[a] = 1 + x % 3, x /= 3;
      sk_mesh m;
      static const char *const names[] = {"x", "y", "z"};
      cr_assert_eq(sk_mesh_init(&m, naxes, dims, names, NULL), SK_OK);
      for (uint32_t mask = 0; mask < (1u << naxes); mask++) {
        sk_dim_map map[3];
        int64_t shape[3];
        memset(map, 0, sizeof map);
        for (int a = 0; a < naxes; a++) {
          shape[a] = 6;
          if (mask & (1u << a)) map[a].naxes = 1, map[a].axes[0] = a;
        }
        sk_layout l;
        cr_assert_eq(sk_layout_init(&l, &m, naxes, shape, map, NULL), SK_OK);
        for (int k = 0; k <= 3; k += k ? 1 : 2) {
          int want[SK_MAX_DEVICES], gs = 0;
          int ng = brute_groups(&l, k, 3, want, &gs);
          expect_groups(&l, k, 3, ng, gs, want);
          checked++;
        }
      }
    }
  cr_expect_gt(checked, 100);
}

Test(redundancy, group_errors) {
  int64_t shape[] = {8, 8};
  int dims[] = {2, 4};
  sk_layout l = ms_layout(2, dims, "(0,-1)", 2, shape);
  int ranks[8], ng, gs;
  sk_error e;
  EXPECT_BAD(sk_redundancy_groups(NULL, 0, 0, ranks, 8, &ng, &gs, &e), &e, "layout is NULL");
  EXPECT_BAD(sk_redundancy_groups(&l, 0, 0, ranks, 8, NULL, &gs, &e), &e, "ngroups is NULL");
  EXPECT_BAD(sk_redundancy_groups(&l, -1, 0, ranks, 8, &ng, &gs, &e), &e, "opt_shard_size -1");
  EXPECT_BAD(sk_redundancy_groups(&l, 0, -2, ranks, 8, &ng, &gs, &e), &e, "initial_rank -2");
  EXPECT_BAD(sk_redundancy_groups(&l, 0, 0, ranks, 7, &ng, &gs, &e), &e, "room for 7 ranks");
  sk_layout bad;
  memset(&bad, 0, sizeof bad);
  EXPECT_BAD(sk_redundancy_groups(&bad, 0, 0, ranks, 8, &ng, &gs, &e), &e, "not initialised");
}

/* ---- remove_param_redundancy ---------------------------------------------------------------- */

/* c, b, a on purpose: the owners follow the names, not the caller's order. */
static void abc(sk_redundancy_param *p) {
  int64_t shape[] = {784, 512};
  int dims[] = {2, 4};
  memset(p, 0, 3 * sizeof *p);
  p[0].name = "c", p[0].layout = ms_layout(2, dims, "(-1,-1)", 2, shape);
  p[1].name = "b", p[1].layout = ms_layout(2, dims, "(0,-1)", 2, shape);
  p[2].name = "a", p[2].layout = ms_layout(2, dims, "(0,-1)", 2, shape);
}

/* The set of ranks owning params[which], as a bit mask. */
static unsigned owners_mask(const sk_redundancy_param *p, int n, int which, int keep) {
  unsigned mask = 0;
  for (int r = 0; r < NDEV; r++) {
    bool owns = false;
    sk_error e = {SK_OK, ""};
    cr_assert_eq(sk_redundancy_owns(n, p, which, r, 0, keep, &owns, &e), SK_OK, "%s", e.msg);
    if (owns) mask |= 1u << r;
  }
  return mask;
}

Test(redundancy, remove_param_redundancy_example) {
  sk_redundancy_param p[3];
  abc(p);
  cr_expect_eq(owners_mask(p, 3, 2, 1), 0x0fu, "a: %#x", owners_mask(p, 3, 2, 1)); /* 0,1,2,3 */
  cr_expect_eq(owners_mask(p, 3, 1, 1), 0xf0u, "b: %#x", owners_mask(p, 3, 1, 1)); /* 4,5,6,7 */
  cr_expect_eq(owners_mask(p, 3, 0, 1), 0x01u, "c: %#x", owners_mask(p, 3, 0, 1)); /* 0 */
  int o = -2;
  cr_assert_eq(sk_redundancy_owner(3, p, 2, 4, 0, &o, NULL), SK_OK);
  cr_expect_eq(o, 0, "a at rank 4: owner %d", o);
  cr_assert_eq(sk_redundancy_owner(3, p, 1, 1, 0, &o, NULL), SK_OK);
  cr_expect_eq(o, 5, "b at rank 1: owner %d", o);
  cr_assert_eq(sk_redundancy_owner(3, p, 0, 6, -1, &o, NULL), SK_OK); /* default initial rank */
  cr_expect_eq(o, 0, "c at rank 6: owner %d", o);
  cr_assert_eq(sk_redundancy_owner(3, p, 0, 9, 0, &o, NULL), SK_OK); /* outside the mesh */
  cr_expect_eq(o, -1);
  cr_assert_eq(sk_redundancy_owner(3, p, 0, 13, -1, &o, NULL), SK_OK); /* default: 8, owner 8 */
  cr_expect_eq(o, 8);
}

Test(redundancy, keep_redundancy_2) {
  /* rotation 1: (0,4) -> (4,0) gives a->4, b->0; (0..7) -> (1..7,0) gives c->1 */
  sk_redundancy_param p[3];
  abc(p);
  cr_expect_eq(owners_mask(p, 3, 2, 2), 0xffu);
  cr_expect_eq(owners_mask(p, 3, 1, 2), 0xffu);
  cr_expect_eq(owners_mask(p, 3, 0, 2), 0x03u, "c: %#x", owners_mask(p, 3, 0, 2));
  cr_expect_eq(owners_mask(p, 3, 0, 3), 0x07u); /* c: 0, 1, 2 */
  cr_expect_eq(owners_mask(p, 3, 2, 3), 0xffu); /* 3 > len 2: rotation 2 is rotation 0 */
}

Test(redundancy, opt_shard_owners) {
  /* hsdp: single-rank groups own everything; a dropped group has no owner */
  sk_redundancy_param p[2];
  int64_t shape[] = {784, 512};
  int dims[] = {2, 4};
  memset(p, 0, sizeof p);
  p[0].name = "w", p[0].layout = ms_layout(2, dims, "(0,-1)", 2, shape), p[0].opt_shard_size = 2;
  p[1].name = "v", p[1].layout = ms_layout(2, dims, "(-1,-1)", 2, shape), p[1].opt_shard_size = 3;
  cr_expect_eq(owners_mask(p, 2, 0, 1), 0xffu);
  cr_expect_eq(owners_mask(p, 2, 1, 1), 0u);
  int o = 0;
  cr_assert_eq(sk_redundancy_owner(2, p, 1, 3, 0, &o, NULL), SK_OK);
  cr_expect_eq(o, -1);
}

Test(redundancy, owner_errors) {
  sk_redundancy_param p[3];
  abc(p);
  int o;
  bool b;
  sk_error e;
  EXPECT_BAD(sk_redundancy_owner(3, p, 0, 0, 0, NULL, &e), &e, "owner is NULL");
  EXPECT_BAD(sk_redundancy_owner(3, NULL, 0, 0, 0, &o, &e), &e, "params is NULL");
  EXPECT_BAD(sk_redundancy_owner(-1, p, 0, 0, 0, &o, &e), &e, "n -1 is negative");
  EXPECT_BAD(sk_redundancy_owner(3, p, 3, 0, 0, &o, &e), &e, "which 3");
  EXPECT_BAD(sk_redundancy_owner(3, p, 0, -4, 0, &o, &e), &e, "rank -4");
  EXPECT_BAD(sk_redundancy_owns(3, p, 0, 0, 0, 0, &b, &e), &e, "keep_redundancy 0");
  p[1].name = "c";
  EXPECT_BAD(sk_redundancy_owner(3, p, 0, 0, 0, &o, &e), &e, "'c' appears twice");
  p[1].name = NULL;
  EXPECT_BAD(sk_redundancy_owner(3, p, 0, 0, 0, &o, &e), &e, "NULL name");
  abc(p);
  p[2].opt_shard_size = -1;
  EXPECT_BAD(sk_redundancy_owns(3, p, 0, 0, 0, 1, &b, &e), &e, "opt_shard_size -1");
}

/* ---- parameter_broadcast on 8 device threads ------------------------------------------------ */

typedef struct bc_param {
  const char *name;
  const char *map;
  int naxes, dims[3];
  int ndims;
  int64_t shape[2];
  int k;
  sk_dtype dt;
} bc_param;

/* Sharded, replicated, a (2,2,2) mesh in key order, single-rank (hsdp) and dropped groups,
   and one grouping shared by two parameters; f32, f64 and i32. */
static const bc_param BC[] = {
    {"fc1.weight", "(0,-1)", 2, {2, 4}, 2, {8, 6}, 0, SK_F32},
    {"fc1.bias", "(0)", 2, {2, 4}, 1, {8, 0}, 0, SK_F64},
    {"emb", "(-1,-1)", 2, {2, 4}, 2, {3, 5}, 0, SK_F32},
    {"attn.q", "(2,0)", 3, {2, 2, 2}, 2, {4, 6}, 0, SK_I32},
    {"hsdp", "(0,-1)", 2, {2, 4}, 2, {8, 2}, 2, SK_F32},
    {"dropped", "(-1,-1)", 2, {2, 4}, 2, {2, 2}, 3, SK_F32},
    {"ln.gamma", "(-1)", 2, {4, 2}, 1, {5, 0}, 4, SK_F64},
};
#define NBC ((int)(sizeof BC / sizeof BC[0]))

typedef struct bc_world {
  sk_bcast_param params[NDEV][NBC];
  double *data[NDEV][NBC]; /* room for any dtype */
  int initial_rank;        /* what the devices pass */
  int bad_rank;            /* this device passes a wrong cur_rank (-1: none) */
  int fail_alloc_rank;     /* this device's allocations fail (-1: none) */
  sk_result rc[NDEV];
  char msg[NDEV][SK_ERROR_MSG_MAX];
  long allocs, frees;
} bc_world;

static _Thread_local int tl_fail_allocs;

static void *bc_alloc(void *user, size_t size, size_t align) {
  bc_world *W = (bc_world *)user;
  if (tl_fail_allocs) return NULL;
  size = (size + align - 1) / align * align;
  void *p = aligned_alloc(align, size);
  if (p) __atomic_add_fetch(&W->allocs, 1, __ATOMIC_RELAXED);
  return p;
}

static void bc_free(void *user, void *p) {
  bc_world *W = (bc_world *)user;
  __atomic_add_fetch(&W->frees, 1, __ATOMIC_RELAXED);
  free(p);
}

/* The value device `rank` starts with at element i (exact in every dtype used). */
static double bc_start(int rank, size_t i) { return 1000.0 * rank + (double)i; }

static double bc_get(const void *data, sk_dtype dt, size_t i) {
  if (dt == SK_F32) return ((const float *)data)[i];
  if (dt == SK_F64) return ((const double *)data)[i];
  return ((const int32_t *)data)[i];
}

static void bc_set(void *data, sk_dtype dt, size_t i, double v) {
  if (dt == SK_F32) ((float *)data)[i] = (float)v;
  else if (dt == SK_F64) ((double *)data)[i] = v;
  else ((int32_t *)data)[i] = (int32_t)v;
}

static void bc_setup(bc_world *W) {
  memset(W, 0, sizeof *W);
  W->bad_rank = W->fail_alloc_rank = -1;
  for (int r = 0; r < NDEV; r++)
    for (int j = 0; j < NBC; j++) {
      sk_bcast_param *p = &W->params[r][j];
      p->name = BC[j].name;
      p->layout = ms_layout(BC[j].naxes, BC[j].dims, BC[j].map, BC[j].ndims, BC[j].shape);
      p->opt_shard_size = BC[j].k;
      p->dtype = BC[j].dt;
      int64_t s[SK_MAX_DIMS];
      sk_layout_slice_shape(&p->layout, s);
      p->count = 1;
      for (int d = 0; d < BC[j].ndims; d++) p->count *= (size_t)s[d];
      if (BC[j].k > 1) p->count /= (size_t)BC[j].k; /* a device holds its optimizer shard */
      W->data[r][j] = (double *)calloc(p->count, sizeof(double));
      cr_assert_not_null(W->data[r][j]);
      p->data = W->data[r][j];
      for (size_t i = 0; i < p->count; i++) bc_set(p->data, p->dtype, i, bc_start(r, i));
    }
}

static void bc_teardown(bc_world *W) {
  for (int r = 0; r < NDEV; r++)
    for (int j = 0; j < NBC; j++) free(W->data[r][j]);
}

static sk_result bc_device(sk_comm *comm, void *arg) {
  bc_world *W = (bc_world *)arg;
  int r = sk_comm_rank(comm);
  int cur = (W->initial_rank >= 0 ? W->initial_rank : 0) + r;
  if (r == W->bad_rank) cur += 1;
  sk_error e = {SK_OK, ""};
  tl_fail_allocs = r == W->fail_alloc_rank;
  W->rc[r] = sk_parameter_broadcast(comm, NBC, W->params[r], cur, W->initial_rank, &e);
  tl_fail_allocs = 0;
  snprintf(W->msg[r], sizeof W->msg[r], "%s", e.msg);
  return SK_OK; /* the test thread judges the results; the world stays up */
}

static sk_result bc_run(bc_world *W) {
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = NDEV, wd.backend = sk_threads_backend(), wd.timeout_ms = WORLD_TIMEOUT_MS;
  wd.allocator.alloc = bc_alloc, wd.allocator.free = bc_free, wd.allocator.user = W;
  sk_world *w = NULL;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_world_create(&wd, &w, &e), SK_OK, "%s", e.msg);
  sk_result rc = sk_world_run(w, bc_device, W, NULL);
  sk_world_destroy(w, NULL);
  return rc;
}

/* The owner the test expects: the brute-force groups of every parameter, the round robin over
   the names in strcmp order. -1 when rank's group is dropped; rank itself when alone. */
static int bc_expected_owner(int which, int rank) {
  int groups[NBC][SK_MAX_DEVICES], ng[NBC], gs[NBC];
  for (int j = 0; j < NBC; j++) {
    sk_layout l = ms_layout(BC[j].naxes, BC[j].dims, BC[j].map, BC[j].ndims, BC[j].shape);
    ng[j] = brute_groups(&l, BC[j].k, 0, groups[j], &gs[j]);
  }
  for (int g = 0; g < ng[which]; g++) {
    const int *G = &groups[which][g * gs[which]];
    int in = 0;
    for (int m = 0; m < gs[which]; m++) in |= G[m] == rank;
    if (!in) continue;
    int i = 0; /* parameters before `which` by name having exactly G */
    for (int q = 0; q < NBC; q++) {
      if (q == which || strcmp(BC[q].name, BC[which].name) >= 0 || gs[q] != gs[which]) continue;
      for (int h = 0; h < ng[q]; h++)
        if (memcmp(&groups[q][h * gs[q]], G, sizeof(int) * (size_t)gs[q]) == 0) i++;
    }
    return G[i % gs[which]];
  }
  return -1;
}

static void bc_expect_owner_values(const bc_world *W, int initial_rank) {
  for (int j = 0; j < NBC; j++)
    for (int r = 0; r < NDEV; r++) {
      int owner = bc_expected_owner(j, r);
      int src = owner < 0 ? r : owner; /* dropped: untouched */
      const sk_bcast_param *p = &W->params[r][j];
      for (size_t i = 0; i < p->count; i++)
        cr_expect_eq(bc_get(p->data, p->dtype, i), bc_start(src, i), "%s on device %d, element %zu: %g, want %g (owner %d)",
                     p->name, r, i, bc_get(p->data, p->dtype, i), bc_start(src, i), src);
      /* and the library's own owner call agrees */
      sk_redundancy_param rp[NBC];
      for (int q = 0; q < NBC; q++)
        rp[q].name = W->params[r][q].name, rp[q].layout = W->params[r][q].layout,
        rp[q].opt_shard_size = W->params[r][q].opt_shard_size;
      int o = -2;
      cr_assert_eq(sk_redundancy_owner(NBC, rp, j, initial_rank + r, initial_rank, &o, NULL), SK_OK);
      cr_expect_eq(o, owner < 0 ? -1 : initial_rank + owner, "%s at %d: owner %d, want %d", p->name, r, o, owner);
    }
}

Test(redundancy, broadcast_8_devices, .timeout = 60) {
  static bc_world W;
  bc_setup(&W);
  W.initial_rank = -1; /* MindSpore's default */
  sk_result rc = bc_run(&W);
  cr_assert_eq(rc, SK_OK, "world: %s", sk_result_name(rc));
  for (int r = 0; r < NDEV; r++) cr_assert_eq(W.rc[r], SK_OK, "device %d: %s: %s", r, sk_result_name(W.rc[r]), W.msg[r]);
  bc_expect_owner_values(&W, 0);
  cr_expect_eq(W.allocs, W.frees, "allocations %ld, frees %ld", W.allocs, W.frees);
  /* (0,4) is a group of fc1.bias, then fc1.weight (and ln.gamma, on another mesh): fc1.weight
     is the second name there, so device 4 owns it and device 0 now holds device 4's values */
  cr_expect_eq(((float *)W.params[0][0].data)[0], 4000.0f);
  cr_expect_eq(((double *)W.params[4][1].data)[0], 0.0);
  bc_teardown(&W);
}

Test(redundancy, broadcast_initial_rank_offset, .timeout = 60) {
  static bc_world W;
  bc_setup(&W);
  W.initial_rank = 16; /* the third pipeline stage of 8 devices */
  sk_result rc = bc_run(&W);
  cr_assert_eq(rc, SK_OK);
  for (int r = 0; r < NDEV; r++) cr_assert_eq(W.rc[r], SK_OK, "device %d: %s", r, W.msg[r]);
  bc_expect_owner_values(&W, 16);
  bc_teardown(&W);
}

Test(redundancy, broadcast_bad_cur_rank_does_not_hang, .timeout = 60) {
  static bc_world W;
  bc_setup(&W);
  W.initial_rank = -1;
  W.bad_rank = 3;
  sk_result rc = bc_run(&W);
  cr_assert_eq(rc, SK_OK);
  for (int r = 0; r < NDEV; r++) {
    cr_expect_eq(W.rc[r], SK_ERR_INVALID_ARGUMENT, "device %d: %s", r, sk_result_name(W.rc[r]));
    const char *want = r == 3 ? "cur_rank 4 is not this device" : "another device rejected";
    cr_expect(strstr(W.msg[r], want) != NULL, "device %d: \"%s\" lacks \"%s\"", r, W.msg[r], want);
  }
  for (int r = 0; r < NDEV; r++) /* nothing touched */
    for (size_t i = 0; i < W.params[r][0].count; i++)
      cr_expect_eq(((float *)W.params[r][0].data)[i], (float)bc_start(r, i));
  cr_expect_eq(W.allocs, W.frees);
  bc_teardown(&W);
}

Test(redundancy, broadcast_allocation_failure, .timeout = 60) {
  static bc_world W;
  bc_setup(&W);
  W.initial_rank = -1;
  W.fail_alloc_rank = 5;
  (void)bc_run(&W); /* whatever the backend makes of it: no device may hang or succeed */
  cr_expect_eq(W.rc[5], SK_ERR_OUT_OF_MEMORY, "device 5: %s: %s", sk_result_name(W.rc[5]), W.msg[5]);
  for (int r = 0; r < NDEV; r++) cr_expect_neq(W.rc[r], SK_OK, "device %d", r);
  cr_expect_eq(W.allocs, W.frees, "allocations %ld, frees %ld", W.allocs, W.frees);
  bc_teardown(&W);
}

Test(redundancy, broadcast_argument_errors, .timeout = 60) {
  static bc_world W;
  const char *want[] = {"count 11 is not its slice's 12 elements", "unsupported dtype", "its mesh has 4 devices",
                        "data is NULL"};
  for (int c = 0; c < 4; c++) {
    bc_setup(&W);
    W.initial_rank = -1;
    for (int r = 0; r < NDEV; r++) {
      sk_bcast_param *p = &W.params[r][0];
      if (c == 0) p->count = 11;
      if (c == 1) p->dtype = (sk_dtype)99;
      if (c == 2) {
        int d4[] = {4};
        int64_t sh[] = {8, 6};
        p->layout = ms_layout(1, d4, "(0,-1)", 2, sh);
        p->count = 12;
      }
      if (c == 3) p->data = NULL;
    }
    cr_assert_eq(bc_run(&W), SK_OK);
    for (int r = 0; r < NDEV; r++) {
      cr_expect_eq(W.rc[r], SK_ERR_INVALID_ARGUMENT, "case %d device %d: %s", c, r, sk_result_name(W.rc[r]));
      cr_expect(strstr(W.msg[r], want[c]) != NULL, "case %d device %d: \"%s\" lacks \"%s\"", c, r, W.msg[r], want[c]);
    }
    bc_teardown(&W);
  }
  sk_error e;
  EXPECT_BAD(sk_parameter_broadcast(NULL, 0, NULL, 0, 0, &e), &e, "comm is NULL");
}
