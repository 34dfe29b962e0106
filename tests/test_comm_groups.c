/* test_comm_groups.c -- sub-communicators on the threads backend: sk_comm_split (colors, keys,
   SK_UNDEFINED, ties broken by parent rank), sk_comm_create (list order), sk_comm_split_mesh along
   one and several axes (MindSpore's groups of Layout((2,2,2),("dp","sp","mp"))), collectives on
   them, nested splits, and the rank/size/world_rank queries.

   Every expected group is computed here from first principles (coordinates by hand, a stable sort
   by (key, parent rank)); the library's sk_mesh_group is not the oracle. Device threads record
   into per-rank slots; the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "shardkit.h"
#include "comm_test_util.h"

#define MAXN 64

/* Checks a communicator against the expected member list (world ranks in new-rank order), with
   collectives run on it: allgather of world ranks, allreduce sum and max, a broadcast from the
   last member, and a reduce to member 0. Every member calls it. */
static sk_result check_comm(ct_slot *s, sk_comm *sub, const int *members, int m, const char *ctx) {
  int wr = -1, me = -1;
  wr = sk_comm_world_rank(sub);
  for (int i = 0; i < m; i++)
    if (members[i] == wr) me = i;
  ct_check(s, sk_comm_size(sub) == m, "%s: size %d, expected %d", ctx, sk_comm_size(sub), m);
  ct_check(s, me >= 0 && sk_comm_rank(sub) == me, "%s: world rank %d has rank %d, expected %d", ctx, wr,
           sk_comm_rank(sub), me);
  if (sk_comm_size(sub) != m || sk_comm_rank(sub) != me) return SK_OK; /* collectives would not line up */
  int32_t *all = (int32_t *)calloc((size_t)m, sizeof(int32_t));
  int32_t mine = wr;
  sk_result r = sk_allgather(sub, &mine, all, 1, SK_I32, NULL);
  if (!ct_rc(s, r, sub, ctx)) goto out;
  bool same = true;
  for (int i = 0; i < m; i++) same = same && all[i] == members[i];
  if (!same) {
    char got[256] = "", want[256] = "";
    for (int i = 0; i < m && i < 32; i++) {
      snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", all[i]);
      snprintf(want + strlen(want), sizeof want - strlen(want), "%d ", members[i]);
    }
    ct_fail(s, "%s: allgather of world ranks gave { %s}, expected { %s}", ctx, got, want);
  }
  int64_t v[2] = {(int64_t)wr * 3 + 1, (int64_t)wr}, sum_max[2];
  int64_t esum = 0, emax = -1;
  for (int i = 0; i < m; i++) {
    esum += (int64_t)members[i] * 3 + 1;
    if (members[i] > emax) emax = members[i];
  }
  r = sk_allreduce(sub, &v[0], &sum_max[0], 1, SK_I64, SK_SUM, NULL);
  if (r == SK_OK) r = sk_allreduce(sub, &v[1], &sum_max[1], 1, SK_I64, SK_MAX, NULL);
  if (!ct_rc(s, r, sub, ctx)) goto out;
  ct_check(s, sum_max[0] == esum, "%s: allreduce sum %lld, expected %lld", ctx, (long long)sum_max[0], (long long)esum);
  ct_check(s, sum_max[1] == emax, "%s: allreduce max %lld, expected %lld", ctx, (long long)sum_max[1], (long long)emax);
  int32_t b = me == m - 1 ? wr * 7 : -1;
  r = sk_broadcast(sub, &b, &b, 1, SK_I32, m - 1, NULL);
  if (!ct_rc(s, r, sub, ctx)) goto out;
  ct_check(s, b == members[m - 1] * 7, "%s: broadcast from rank %d gave %d, expected %d", ctx, m - 1, b,
           members[m - 1] * 7);
  int32_t red = -5, one = wr;
  r = sk_reduce(sub, &one, &red, 1, SK_I32, SK_MIN, 0, NULL);
  if (!ct_rc(s, r, sub, ctx)) goto out;
  if (me == 0) {
    int32_t emin = members[0];
    for (int i = 0; i < m; i++)
      if (members[i] < emin) emin = members[i];
    ct_check(s, red == emin, "%s: reduce(min) to rank 0 gave %d, expected %d", ctx, red, emin);
  } else {
    ct_check(s, red == -5, "%s: reduce wrote recv on a non-root (%d)", ctx, red);
  }
out:
  free(all);
  return r;
}

/* Members of rank's color, ordered by (key, parent rank): the split's expected new-rank order.
   Returns the count; 0 when color is SK_UNDEFINED. parent[i] maps parent rank -> world rank. */
static int split_expect(int n, const int *color, const int *key, const int *parent, int rank, int *out) {
  if (color[rank] == SK_UNDEFINED) return 0;
  int m = 0, idx[MAXN];
  for (int q = 0; q < n; q++)
    if (color[q] == color[rank]) idx[m++] = q;
  for (int i = 1; i < m; i++) /* insertion sort: stable, so ties stay in parent-rank order */
    for (int j = i; j > 0 && key[idx[j]] < key[idx[j - 1]]; j--) {
      int t = idx[j];
      idx[j] = idx[j - 1], idx[j - 1] = t;
    }
  for (int i = 0; i < m; i++) out[i] = parent ? parent[idx[i]] : idx[i];
  return m;
}

typedef struct garg {
  int n;
  sk_world *world;
  sk_mesh mesh;
  ct_slot *slots;
} garg;

static void run_groups(int n, sk_device_fn fn, garg *a, const char *label) {
  a->n = n;
  a->slots = ct_slots_new(n);
  sk_world *w = ct_world(n, CT_CFG_DEFAULT, 0);
  a->world = w;
  char lab[96];
  snprintf(lab, sizeof lab, "%s n=%d", label, n);
  sk_result r = sk_world_run(w, fn, a, NULL);
  cr_expect_eq(r, SK_OK, "%s: sk_world_run returned %s: %s", lab, sk_result_name(r), sk_world_error_message(w));
  ct_expect_slots(a->slots, n, lab);
  sk_world_destroy(w, NULL);
  free(a->slots);
}

typedef struct nparam {
  int n;
} nparam;

/* ---- queries ---------------------------------------------------------------------------------- */

static sk_result queries_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c);
  if (rank < 0 || rank >= a->n) return SK_ERR_INTERNAL;
  ct_slot *s = &a->slots[rank];
  ct_check(s, sk_comm_size(c) == a->n, "n=%d rank %d: size %d", a->n, rank, sk_comm_size(c));
  ct_check(s, sk_comm_world_rank(c) == rank, "n=%d rank %d: world_rank %d", a->n, rank, sk_comm_world_rank(c));
  ct_check(s, sk_comm_world(c) == a->world, "n=%d rank %d: sk_comm_world is not the world", a->n, rank);
  ct_check(s, strcmp(sk_comm_error_message(c), "") == 0, "n=%d rank %d: fresh error message '%s'", a->n, rank,
           sk_comm_error_message(c));
  int members[MAXN];
  for (int i = 0; i < a->n; i++) members[i] = i;
  char ctx[64];
  snprintf(ctx, sizeof ctx, "world n=%d rank %d", a->n, rank);
  sk_result r = check_comm(s, c, members, a->n, ctx);
  if (r == SK_OK) s->ran = 1;
  return r;
}

ParameterizedTestParameters(comm_groups, queries) {
  static nparam ps[] = {{1}, {2}, {3}, {8}, {16}, {64}};
  return cr_make_param_array(nparam, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(nparam *p, comm_groups, queries, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  run_groups(p->n, queries_device, &a, "queries");
}

Test(comm_groups, queries_on_null) {
  cr_expect_eq(sk_comm_rank(NULL), -1);
  cr_expect_eq(sk_comm_size(NULL), 0);
  cr_expect_eq(sk_comm_world_rank(NULL), -1);
  cr_expect_null(sk_comm_world(NULL));
  cr_expect_eq(sk_world_size(NULL), 0);
}

/* ---- split ------------------------------------------------------------------------------------ */

enum { SC_MOD3_REVERSE, SC_UNDEFINED, SC_KEY_TIES, SC_MIXED_KEYS, SC_ALL_SAME, SC_ALL_UNDEFINED_BUT_ONE, SC_COUNT };
static const char *const sc_names[SC_COUNT] = {
    "color r%3, key -r (reversed)", "SK_UNDEFINED for r%4==3",   "one color, key r%2 (ties)",
    "color r%2, keys (7r)%5-2",     "one color, key 0 (a dup)", "only rank n-1 has a color"};

static void scenario(int sc, int n, int *color, int *key) {
  for (int r = 0; r < n; r++) {
    switch (sc) {
      case SC_MOD3_REVERSE: color[r] = r % 3, key[r] = -r; break;
      case SC_UNDEFINED: color[r] = r % 4 == 3 ? SK_UNDEFINED : 5, key[r] = 0; break;
      case SC_KEY_TIES: color[r] = 0, key[r] = r % 2; break;
      case SC_MIXED_KEYS: color[r] = (r % 2) * 1000, key[r] = (7 * r) % 5 - 2; break;
      case SC_ALL_SAME: color[r] = 3, key[r] = 0; break;
      default: color[r] = r == n - 1 ? 1 : SK_UNDEFINED, key[r] = 0; break;
    }
  }
}

static sk_result split_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  /* members[] is zeroed: the nested split below reads sk_comm_size(sub) of its entries, which
     equals m unless check_comm has already failed the size */
  int color[MAXN], key[MAXN], members[MAXN] = {0};
  for (int sc = 0; sc < SC_COUNT; sc++) {
    scenario(sc, n, color, key);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "split '%s' n=%d world rank %d", sc_names[sc], n, rank);
    sk_comm *sub = (sk_comm *)&sub; /* must be overwritten */
    sk_result r = sk_comm_split(c, color[rank], key[rank], &sub, NULL);
    if (!ct_rc(s, r, c, ctx)) return r;
    int m = split_expect(n, color, key, NULL, rank, members);
    if (m == 0) {
      ct_check(s, sub == NULL, "%s: SK_UNDEFINED must give *out = NULL", ctx);
      continue;
    }
    if (!ct_check(s, sub != NULL, "%s: no communicator", ctx)) return SK_ERR_INTERNAL;
    ct_check(s, sk_comm_world(sub) == a->world, "%s: sk_comm_world of the child", ctx);
    r = check_comm(s, sub, members, m, ctx);
    if (r == SK_OK && sc == SC_MOD3_REVERSE) {
      /* nested: split the child again by its own rank parity, key = -child rank */
      int sm = sk_comm_size(sub), cc[MAXN], kk[MAXN], mem2[MAXN];
      for (int q = 0; q < sm; q++) cc[q] = q % 2, kk[q] = -q;
      sk_comm *sub2 = NULL;
      char ctx2[200];
      snprintf(ctx2, sizeof ctx2, "%s, then split by child rank parity", ctx);
      r = sk_comm_split(sub, cc[sk_comm_rank(sub)], kk[sk_comm_rank(sub)], &sub2, NULL);
      if (ct_rc(s, r, sub, ctx2)) {
        int m2 = split_expect(sm, cc, kk, members, sk_comm_rank(sub), mem2);
        r = check_comm(s, sub2, mem2, m2, ctx2);
        /* the parent still works after its child was made and used */
        if (r == SK_OK) r = check_comm(s, sub, members, m, ctx);
        sk_comm_destroy(sub2, NULL);
      }
    }
    sk_comm_destroy(sub, NULL);
    if (r != SK_OK) return r;
  }
  /* the world communicator is unaffected by all of this */
  for (int i = 0; i < n; i++) members[i] = i;
  sk_result r = check_comm(s, c, members, n, "world after splits");
  if (r == SK_OK) s->ran = 1;
  return r;
}

ParameterizedTestParameters(comm_groups, split) {
  static nparam ps[] = {{1}, {2}, {3}, {5}, {8}, {16}};
  return cr_make_param_array(nparam, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(nparam *p, comm_groups, split, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  run_groups(p->n, split_device, &a, "split");
}

/* Negative colors other than SK_UNDEFINED are rejected (every rank passes the same bad color). */
static sk_result split_bad_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c);
  ct_slot *s = &a->slots[rank];
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split(c, -7, 0, &sub, NULL);
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT && sub == NULL, "split color -7 rank %d: %s", rank, sk_result_name(r));
  ct_check(s, strstr(sk_comm_error_message(c), "color") != NULL, "split color -7 rank %d: message '%s' lacks 'color'",
           rank, sk_comm_error_message(c));
  r = sk_comm_split(c, 0, 0, NULL, NULL);
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT, "split out=NULL rank %d: %s", rank, sk_result_name(r));
  /* and the communicator still splits fine afterwards */
  r = sk_comm_split(c, 0, 0, &sub, NULL);
  if (!ct_rc(s, r, c, "split after bad calls")) return r;
  int members[MAXN];
  for (int i = 0; i < a->n; i++) members[i] = i;
  r = check_comm(s, sub, members, a->n, "split after bad calls");
  sk_comm_destroy(sub, NULL);
  if (r == SK_OK) s->ran = 1;
  return r;
}

Test(comm_groups, split_bad_arguments, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  run_groups(4, split_bad_device, &a, "split_bad_arguments");
}

/* ---- create ----------------------------------------------------------------------------------- */

static sk_result create_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  static const int l1[] = {5, 2, 7, 0}, l2[] = {7, 6, 5, 4, 3, 2, 1, 0}, l3[] = {3}, l4[] = {1, 6};
  const int *lists[] = {l1, l2, l3, l4};
  const int lens[] = {4, 8, 1, 2};
  for (int li = 0; li < 4; li++) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "create list #%d n=%d world rank %d", li, n, rank);
    sk_comm *sub = (sk_comm *)&sub;
    sk_result r = sk_comm_create(c, lens[li], lists[li], &sub, NULL);
    if (!ct_rc(s, r, c, ctx)) return r;
    bool member = false;
    for (int i = 0; i < lens[li]; i++) member = member || lists[li][i] == rank;
    if (!member) {
      ct_check(s, sub == NULL, "%s: a rank not in the list must get NULL", ctx);
      continue;
    }
    if (!ct_check(s, sub != NULL, "%s: no communicator", ctx)) return SK_ERR_INTERNAL;
    r = check_comm(s, sub, lists[li], lens[li], ctx);
    sk_comm_destroy(sub, NULL);
    if (r != SK_OK) return r;
  }
  /* bad lists: every rank passes the same one, so every rank fails, locally */
  static const int dup[] = {1, 4, 1}, range[] = {0, 8}, neg[] = {-1};
  struct {
    int len;
    const int *l;
    const char *word;
  } bad[] = {{3, dup, "twice"}, {2, range, "range"}, {1, neg, "range"}, {0, l1, "n"}, {9, l2, "n"}};
  for (int b = 0; b < 5; b++) {
    sk_comm *sub = (sk_comm *)&sub;
    sk_result r = sk_comm_create(c, bad[b].len, bad[b].l, &sub, NULL);
    ct_check(s, r == SK_ERR_INVALID_ARGUMENT && sub == NULL, "create bad list #%d rank %d: got %s (out %s)", b, rank,
             sk_result_name(r), sub ? "not NULL" : "NULL");
    ct_check(s, strstr(sk_comm_error_message(c), bad[b].word) != NULL,
             "create bad list #%d rank %d: message '%s' lacks '%s'", b, rank, sk_comm_error_message(c), bad[b].word);
  }
  sk_result r = sk_comm_create(c, 2, NULL, &(sk_comm *){NULL}, NULL);
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT, "create ranks=NULL rank %d: %s", rank, sk_result_name(r));
  s->ran = 1;
  return SK_OK;
}

Test(comm_groups, create, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  run_groups(8, create_device, &a, "create");
}

/* ---- split_mesh ------------------------------------------------------------------------------- */

/* Expected group of rank along the axes in mask: the ranks whose coordinates on every other axis
   equal rank's, ascending. Coordinates computed by hand, row-major, last axis fastest. */
static int mesh_expect(int naxes, const int *dims, uint32_t mask, int rank, int *out) {
  int size = 1;
  for (int k = 0; k < naxes; k++) size *= dims[k];
  int rc[SK_MAX_AXES], qc[SK_MAX_AXES], m = 0;
  for (int k = naxes - 1, x = rank; k >= 0; k--) rc[k] = x % dims[k], x /= dims[k];
  for (int q = 0; q < size; q++) {
    for (int k = naxes - 1, x = q; k >= 0; k--) qc[k] = x % dims[k], x /= dims[k];
    bool same = true;
    for (int k = 0; k < naxes; k++)
      if (!(mask & (1u << k)) && qc[k] != rc[k]) same = false;
    if (same) out[m++] = q;
  }
  return m;
}

typedef struct mesh_case {
  const char *text; /* for messages */
  int naxes;
  int dims[4];
  const char *names[4];
  uint32_t masks[8];
  const char *mask_names[8];
  int nmasks;
} mesh_case;

static const mesh_case mesh_cases[] = {
    /* Layout((2,2,2),("dp","sp","mp")): axis 0 = dp, 1 = sp, 2 = mp */
    {"dp=2,sp=2,mp=2",
     3,
     {2, 2, 2},
     {"dp", "sp", "mp"},
     {1u << 2, 1u << 1, 1u << 0, (1u << 1) | (1u << 0), (1u << 2) | (1u << 1), 7u, 0u},
     {"mp", "sp", "dp", "sp,dp", "mp,sp", "dp,sp,mp", "(none)"},
     7},
    {"a=2,b=3", 2, {2, 3}, {"a", "b"}, {1u << 1, 1u << 0, 3u}, {"b", "a", "a,b"}, 3},
    {"x=3,y=1,z=2", 3, {3, 1, 2}, {"x", "y", "z"}, {1u << 1, 1u << 0, 1u << 2, 5u}, {"y", "x", "z", "x,z"}, 4},
    {"a=4,b=4,c=4", 3, {4, 4, 4}, {"a", "b", "c"}, {1u << 2, 3u, 5u}, {"c", "a,b", "a,c"}, 3},
};

typedef struct marg {
  garg g;
  const mesh_case *mc;
} marg;

static sk_result mesh_device(sk_comm *c, void *p) {
  marg *a = (marg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->g.slots[rank];
  const mesh_case *mc = a->mc;
  for (int mi = 0; mi < mc->nmasks; mi++) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "split_mesh %s along %s (mask 0x%x) n=%d world rank %d", mc->text, mc->mask_names[mi],
             (unsigned)mc->masks[mi], n, rank);
    sk_comm *sub = NULL;
    sk_result r = sk_comm_split_mesh(c, &a->g.mesh, mc->masks[mi], &sub, NULL);
    if (!ct_rc(s, r, c, ctx)) return r;
    if (!ct_check(s, sub != NULL, "%s: no communicator", ctx)) return SK_ERR_INTERNAL;
    int members[MAXN];
    int m = mesh_expect(mc->naxes, mc->dims, mc->masks[mi], rank, members);
    r = check_comm(s, sub, members, m, ctx);
    /* AllReduce along the axis of a bigger buffer: the sum over exactly this group */
    if (r == SK_OK) {
      const size_t count = 1001;
      int32_t *buf = (int32_t *)malloc(count * sizeof(int32_t));
      for (size_t i = 0; i < count; i++) buf[i] = rank * 1000 + (int32_t)i;
      r = sk_allreduce(sub, buf, buf, count, SK_I32, SK_SUM, NULL);
      if (ct_rc(s, r, sub, ctx)) {
        size_t bad = 0;
        for (size_t i = 0; i < count; i++) {
          int32_t e = 0;
          for (int k = 0; k < m; k++) e += members[k] * 1000 + (int32_t)i;
          bad += buf[i] != e;
        }
        ct_check(s, bad == 0, "%s: allreduce sum of 1001 i32 along the group: %zu wrong", ctx, bad);
      }
      free(buf);
    }
    sk_comm_destroy(sub, NULL);
    if (r != SK_OK) return r;
  }
  a->g.slots[rank].ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_groups, split_mesh) {
  static nparam ps[] = {{0}, {1}, {2}, {3}};
  return cr_make_param_array(nparam, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(nparam *p, comm_groups, split_mesh, .timeout = 30) {
  marg a;
  memset(&a, 0, sizeof a);
  a.mc = &mesh_cases[p->n];
  sk_error err;
  sk_result r = sk_mesh_init(&a.g.mesh, a.mc->naxes, a.mc->dims, a.mc->names, &err);
  cr_assert_eq(r, SK_OK, "sk_mesh_init(%s): %s", a.mc->text, err.msg);
  cr_assert_eq(a.g.mesh.size, mesh_expect(a.mc->naxes, a.mc->dims, (1u << a.mc->naxes) - 1, 0, (int[MAXN]){0}));
  /* the masks above are literal bits; cross-check the named form for the first mesh */
  if (p->n == 0) {
    uint32_t mask = 0;
    cr_expect_eq(sk_mesh_axis_mask(&a.g.mesh, "sp,dp", &mask, &err), SK_OK);
    cr_expect_eq(mask, 3u, "sk_mesh_axis_mask(\"sp,dp\") = 0x%x", (unsigned)mask);
    /* and the hand-computed groups are MindSpore's: along mp {0,1},{2,3},...; along sp,dp {0,2,4,6},{1,3,5,7} */
    int g[8], m = mesh_expect(3, a.mc->dims, 1u << 2, 2, g);
    cr_expect(m == 2 && g[0] == 2 && g[1] == 3);
    m = mesh_expect(3, a.mc->dims, 3u, 5, g);
    cr_expect(m == 4 && g[0] == 1 && g[1] == 3 && g[2] == 5 && g[3] == 7);
  }
  run_groups(a.g.mesh.size, mesh_device, &a.g, a.mc->text);
}

static sk_result mesh_bad_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c);
  ct_slot *s = &a->slots[rank];
  sk_comm *sub = (sk_comm *)&sub;
  sk_result r = sk_comm_split_mesh(c, &a->mesh, 1u, &sub, NULL); /* a 4-device mesh on 8 ranks */
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT && sub == NULL, "split_mesh size mismatch rank %d: %s", rank,
           sk_result_name(r));
  ct_check(s, strstr(sk_comm_error_message(c), "mesh") != NULL, "split_mesh size mismatch rank %d: message '%s'",
           rank, sk_comm_error_message(c));
  r = sk_comm_split_mesh(c, NULL, 1u, &sub, NULL);
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT, "split_mesh mesh=NULL rank %d: %s", rank, sk_result_name(r));
  sk_mesh m8;
  const int dims[3] = {2, 2, 2};
  const char *names[3] = {"dp", "sp", "mp"};
  sk_mesh_init(&m8, 3, dims, names, NULL);
  r = sk_comm_split_mesh(c, &m8, 1u << 3, &sub, NULL); /* axis 3 of a 3-axis mesh */
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT, "split_mesh mask 0x8 on 3 axes rank %d: %s", rank, sk_result_name(r));
  ct_check(s, strstr(sk_comm_error_message(c), "axis") != NULL || strstr(sk_comm_error_message(c), "axes") != NULL,
           "split_mesh mask 0x8 rank %d: message '%s'", rank, sk_comm_error_message(c));
  s->ran = 1;
  return SK_OK;
}

Test(comm_groups, split_mesh_bad_arguments, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  const int dims[2] = {2, 2};
  const char *names[2] = {"dp", "mp"};
  cr_assert_eq(sk_mesh_init(&a.mesh, 2, dims, names, NULL), SK_OK);
  run_groups(8, mesh_bad_device, &a, "split_mesh_bad_arguments");
}

/* ---- independent groups at once --------------------------------------------------------------- */

/* Along mp the four pairs run different collectives at the same time, interleaved with world
   collectives and with collectives on a second child of the same parent (along sp,dp). */
static sk_result concurrent_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  sk_comm *mp = NULL, *spdp = NULL;
  sk_result r = sk_comm_split_mesh(c, &a->mesh, 1u << 2, &mp, NULL);
  if (r == SK_OK) r = sk_comm_split_mesh(c, &a->mesh, 3u, &spdp, NULL);
  if (!ct_rc(s, r, c, "concurrent: split_mesh")) return r;
  int pair = rank / 2, partner = rank ^ 1, mprank = rank % 2;
  for (int it = 0; it < 30 && r == SK_OK; it++) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "concurrent n=%d rank %d iteration %d pair %d", n, rank, it, pair);
    const size_t count = (size_t)(1 + (it * 37) % 700);
    int32_t *x = (int32_t *)malloc(2 * count * sizeof(int32_t)), *y = (int32_t *)malloc(2 * count * sizeof(int32_t));
    for (size_t i = 0; i < 2 * count; i++) x[i] = rank * 100000 + it * 1000 + (int32_t)i;
    size_t bad = 0;
    switch ((pair + it) % 4) {
      case 0: /* allreduce sum */
        r = sk_allreduce(mp, x, y, count, SK_I32, SK_SUM, NULL);
        for (size_t i = 0; r == SK_OK && i < count; i++)
          bad += y[i] != (rank + partner) * 100000 + 2 * (it * 1000 + (int32_t)i);
        break;
      case 1: /* broadcast from mp rank 1 */
        r = sk_broadcast(mp, x, y, count, SK_I32, 1, NULL);
        for (size_t i = 0; r == SK_OK && i < count; i++)
          bad += y[i] != (pair * 2 + 1) * 100000 + it * 1000 + (int32_t)i;
        break;
      case 2: /* allgather */
        r = sk_allgather(mp, x, y, count, SK_I32, NULL);
        for (size_t i = 0; r == SK_OK && i < 2 * count; i++)
          bad += y[i] != (pair * 2 + (int)(i / count)) * 100000 + it * 1000 + (int32_t)(i % count);
        break;
      default: /* alltoall */
        r = sk_alltoall(mp, x, y, count, SK_I32, NULL);
        for (size_t i = 0; r == SK_OK && i < 2 * count; i++)
          bad += y[i] != (pair * 2 + (int)(i / count)) * 100000 + it * 1000 + (int32_t)(mprank * count + i % count);
        break;
    }
    free(x), free(y);
    if (!ct_rc(s, r, mp, ctx)) break;
    ct_check(s, bad == 0, "%s: pattern %d: %zu wrong elements", ctx, (pair + it) % 4, bad);
    int64_t v = rank, sum = 0;
    if (it % 3 == 0) {
      r = sk_allreduce(c, &v, &sum, 1, SK_I64, SK_SUM, NULL);
      if (ct_rc(s, r, c, ctx)) ct_check(s, sum == (int64_t)n * (n - 1) / 2, "%s: world sum %lld", ctx, (long long)sum);
    } else if (it % 3 == 1) {
      r = sk_allreduce(spdp, &v, &sum, 1, SK_I64, SK_SUM, NULL);
      if (ct_rc(s, r, spdp, ctx))
        ct_check(s, sum == (rank % 2 ? 1 + 3 + 5 + 7 : 0 + 2 + 4 + 6), "%s: sp,dp sum %lld", ctx, (long long)sum);
    }
  }
  sk_comm_destroy(mp, NULL);
  sk_comm_destroy(spdp, NULL);
  if (r == SK_OK) s->ran = 1;
  return r;
}

Test(comm_groups, concurrent_groups, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  const int dims[3] = {2, 2, 2};
  const char *names[3] = {"dp", "sp", "mp"};
  cr_assert_eq(sk_mesh_init(&a.mesh, 3, dims, names, NULL), SK_OK);
  run_groups(8, concurrent_device, &a, "concurrent_groups");
}

/* ---- nested splits and churn ------------------------------------------------------------------ */

/* world(8) -> halves {0..3},{4..7} -> by parity within -> {0,2},{1,3},{4,6},{5,7} -> by key
   reversed; and many create/use/destroy cycles (no leak, no stale state between generations). */
static sk_result nested_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  sk_comm *half = NULL, *par = NULL, *rev = NULL;
  sk_result r = sk_comm_split(c, rank / 4, 0, &half, NULL);
  if (!ct_rc(s, r, c, "nested: halves")) return r;
  int hm[4];
  for (int i = 0; i < 4; i++) hm[i] = (rank / 4) * 4 + i;
  r = check_comm(s, half, hm, 4, "nested: halves");
  if (r == SK_OK) r = sk_comm_split(half, sk_comm_rank(half) % 2, 0, &par, NULL);
  if (!ct_rc(s, r, half, "nested: parity")) return r;
  int pm[2] = {(rank / 4) * 4 + rank % 2, (rank / 4) * 4 + rank % 2 + 2};
  r = check_comm(s, par, pm, 2, "nested: parity in halves");
  if (r == SK_OK) r = sk_comm_split(par, 0, -sk_comm_rank(par), &rev, NULL);
  if (!ct_rc(s, r, par, "nested: reversed")) return r;
  int rm[2] = {pm[1], pm[0]};
  r = check_comm(s, rev, rm, 2, "nested: reversed pair");
  /* all levels stay usable, in any order */
  int wm[MAXN];
  for (int i = 0; i < n; i++) wm[i] = i;
  if (r == SK_OK) r = check_comm(s, c, wm, n, "nested: world");
  if (r == SK_OK) r = check_comm(s, par, pm, 2, "nested: parity again");
  if (r == SK_OK) r = check_comm(s, half, hm, 4, "nested: halves again");
  sk_comm_destroy(rev, NULL);
  sk_comm_destroy(par, NULL);
  sk_comm_destroy(half, NULL);
  for (int gen = 0; gen < 25 && r == SK_OK; gen++) {
    sk_comm *x = NULL;
    int colors = 1 + gen % 4;
    r = sk_comm_split(c, rank % colors, gen % 2 ? -rank : rank, &x, NULL);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "churn generation %d", gen);
    if (!ct_rc(s, r, c, ctx)) break;
    int mem[MAXN], m = 0;
    for (int q = 0; q < n; q++)
      if (q % colors == rank % colors) mem[m++] = q;
    if (gen % 2)
      for (int i = 0; i < m / 2; i++) {
        int t = mem[i];
        mem[i] = mem[m - 1 - i], mem[m - 1 - i] = t;
      }
    int64_t v = rank + 1, sum = 0;
    r = sk_allreduce(x, &v, &sum, 1, SK_I64, SK_SUM, NULL);
    if (ct_rc(s, r, x, ctx)) {
      int64_t e = 0;
      for (int i = 0; i < m; i++) e += mem[i] + 1;
      ct_check(s, sum == e, "%s: sum %lld expected %lld", ctx, (long long)sum, (long long)e);
      ct_check(s, sk_comm_size(x) == m && sk_comm_world_rank(x) == rank && mem[sk_comm_rank(x)] == rank,
               "%s: size %d rank %d", ctx, sk_comm_size(x), sk_comm_rank(x));
    }
    sk_comm_destroy(x, NULL);
  }
  if (r == SK_OK) s->ran = 1;
  return r;
}

Test(comm_groups, nested_and_churn, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  run_groups(8, nested_device, &a, "nested_and_churn");
}

/* Non-blocking collectives outstanding on several communicators of one device at once. */
static sk_result multi_comm_async_device(sk_comm *c, void *p) {
  garg *a = (garg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  sk_comm *mp = NULL, *dp = NULL;
  sk_result r = sk_comm_split_mesh(c, &a->mesh, 1u << 2, &mp, NULL);
  if (r == SK_OK) r = sk_comm_split_mesh(c, &a->mesh, 1u << 0, &dp, NULL);
  if (!ct_rc(s, r, c, "multi-comm: split_mesh")) return r;
  for (int it = 0; it < 10 && r == SK_OK; it++) {
    int64_t v = rank + 1 + it, w_sum = 0, mp_sum = 0, dp_sum = 0;
    sk_request *req[3] = {NULL, NULL, NULL};
    r = sk_iallreduce(dp, &v, &dp_sum, 1, SK_I64, SK_SUM, &req[0], NULL);
    if (r == SK_OK) r = sk_iallreduce(c, &v, &w_sum, 1, SK_I64, SK_SUM, &req[1], NULL);
    if (r == SK_OK) r = sk_iallreduce(mp, &v, &mp_sum, 1, SK_I64, SK_SUM, &req[2], NULL);
    sk_result r2 = sk_waitall(3, req, NULL);
    if (r == SK_OK) r = r2;
    char ctx[64];
    snprintf(ctx, sizeof ctx, "multi-comm async rank %d iteration %d", rank, it);
    if (!ct_rc(s, r, c, ctx)) break;
    int64_t ew = (int64_t)n * (n + 1) / 2 + (int64_t)n * it;
    int64_t emp = (rank & ~1) + 1 + ((rank & ~1) + 1) + 1 + 2 * it;
    int64_t edp = (rank % 4) + 1 + (rank % 4 + 4) + 1 + 2 * it;
    ct_check(s, w_sum == ew && mp_sum == emp && dp_sum == edp, "%s: world %lld/%lld mp %lld/%lld dp %lld/%lld", ctx,
             (long long)w_sum, (long long)ew, (long long)mp_sum, (long long)emp, (long long)dp_sum, (long long)edp);
  }
  sk_comm_destroy(mp, NULL);
  sk_comm_destroy(dp, NULL);
  if (r == SK_OK) s->ran = 1;
  return r;
}

Test(comm_groups, async_on_several_comms, .timeout = 30) {
  garg a;
  memset(&a, 0, sizeof a);
  const int dims[3] = {2, 2, 2};
  const char *names[3] = {"dp", "sp", "mp"};
  cr_assert_eq(sk_mesh_init(&a.mesh, 3, dims, names, NULL), SK_OK);
  run_groups(8, multi_comm_async_device, &a, "async_on_several_comms");
}
