/* test_comm_coll.c -- every collective x dtype x reduce op on the threads backend.

   Group sizes 1, 2, 3, 5, 8 (and 16, 64 on a smaller grid); counts 0, 1, 7, 1023 and 100003
   (prime, so no chunking splits it evenly); out-of-place and NCCL's in-place forms; every root of
   Broadcast/Reduce at count 7; each with the default config, force_large (the chunked AllReduce
   path at tiny counts) and, for AllReduce, small_bytes = 4096 (the inline path at count 1023);
   the large counts also with a 1-byte cache_bytes, so every collective streams its outputs.
   Then the MPI driver's sub-communicator and non-blocking grids (with a Send/Recv ring, three
   outstanding requests and barriers) on a few sizes.

   The cases, their expansion and their run-and-check functions are tests/coll_grid.h's, which
   the MPI driver (tests/mpi/mpi_driver.c) runs too. Expected values come from comm_test_util.h's
   reference (never from sk_reduce_local). Device threads only record into their ct_slot; the
   test thread asserts after sk_world_run. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "shardkit.h"
#include "coll_grid.h"

typedef struct run_arg {
  int n, cfg;
  const cg_case *cases;
  int ncases;
  ct_slot *slots;
} run_arg;

static sk_result cases_device(sk_comm *c, void *p) {
  const run_arg *a = (const run_arg *)p;
  int rank = sk_comm_rank(c);
  if (rank < 0 || rank >= a->n) return SK_ERR_INTERNAL;
  ct_slot *s = &a->slots[rank];
  ct_check(s, sk_comm_size(c) == a->n && sk_comm_world_rank(c) == rank, "n=%d rank=%d: size %d world_rank %d", a->n,
           rank, sk_comm_size(c), sk_comm_world_rank(c));
  char label[64];
  snprintf(label, sizeof label, "cfg=%s", ct_cfg_names[a->cfg]);
  cg_env env = {label, NULL, NULL, false};
  for (int i = 0; i < a->ncases; i++) {
    sk_result r = cg_run_case(c, &a->cases[i], s, &env);
    if (r != SK_OK) return r; /* aborts the world: peers return instead of hanging */
  }
  s->ran = 1;
  return SK_OK;
}

static void run_cases(int n, int cfg, const cg_case *cs, int ncases, const char *label) {
  cr_assert(ncases > 0, "%s: no cases", label);
  run_arg a;
  memset(&a, 0, sizeof a);
  a.n = n, a.cfg = cfg, a.cases = cs, a.ncases = ncases;
  a.slots = ct_slots_new(n);
  char lab[160];
  snprintf(lab, sizeof lab, "%s n=%d cfg=%s", label, n, ct_cfg_names[cfg]);
  ct_run(n, cfg, cases_device, &a, lab);
  ct_expect_slots(a.slots, n, lab);
  free(a.slots);
}

static void run_list(int n, int cfg, cg_list *l, const char *label) {
  run_cases(n, cfg, l->v, l->n, label);
  free(l->v);
}

static void run_grid(cg_kind k, const cg_grid *g, int n, int cfg) {
  cg_list l = {NULL, 0, 0};
  cg_expand(&l, k, g, n);
  run_list(n, cfg, &l, cg_kind_name(k));
}

#define GRID(dts, ops, counts, every_root)                                                           \
  {dts, (int)(sizeof dts / sizeof dts[0]), ops, (int)(sizeof ops / sizeof ops[0]), counts,           \
   (int)(sizeof counts / sizeof counts[0]), every_root, false, CG_WORLD, CG_ORDERED}

static const size_t big_n_counts[] = {0, 1, 7};
static const cg_grid big_n_grid = GRID(ct_all_dtypes, ct_all_ops, big_n_counts, 1);

static const sk_dtype few_dtypes[] = {SK_F32, SK_BF16, SK_I8, SK_I64};
static const size_t huge_n_counts[] = {0, 7};
static const cg_grid huge_n_grid = GRID(few_dtypes, ct_all_ops, huge_n_counts, 1);

typedef struct param {
  int n, cfg;
} param;

#define STD_PARAMS                                                                                    \
  {1, CT_CFG_DEFAULT}, {2, CT_CFG_DEFAULT}, {3, CT_CFG_DEFAULT}, {5, CT_CFG_DEFAULT}, {8, CT_CFG_DEFAULT}, \
  {1, CT_CFG_LARGE}, {2, CT_CFG_LARGE}, {3, CT_CFG_LARGE}, {5, CT_CFG_LARGE}, {8, CT_CFG_LARGE}

#define PARAMS(name, ...)                                                            \
  ParameterizedTestParameters(comm_coll, name) {                                     \
    static param ps[] = {__VA_ARGS__};                                               \
    return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);                 \
  }

/* ---- the sweeps ------------------------------------------------------------------------------- */

PARAMS(allreduce, STD_PARAMS, {3, CT_CFG_SMALL4K}, {8, CT_CFG_SMALL4K})
ParameterizedTest(param *p, comm_coll, allreduce, .timeout = 30) { run_grid(CG_ALLREDUCE, &cg_std_grid, p->n, p->cfg); }

PARAMS(allgather, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, allgather, .timeout = 30) { run_grid(CG_ALLGATHER, &cg_std_grid, p->n, p->cfg); }

PARAMS(reduce_scatter, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, reduce_scatter, .timeout = 30) {
  run_grid(CG_REDUCE_SCATTER, &cg_std_grid, p->n, p->cfg);
}

PARAMS(broadcast, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, broadcast, .timeout = 30) { run_grid(CG_BROADCAST, &cg_std_grid, p->n, p->cfg); }

PARAMS(reduce, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, reduce, .timeout = 30) { run_grid(CG_REDUCE, &cg_std_grid, p->n, p->cfg); }

PARAMS(alltoall, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, alltoall, .timeout = 30) { run_grid(CG_ALLTOALL, &cg_std_grid, p->n, p->cfg); }

PARAMS(gather, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, gather, .timeout = 30) { run_grid(CG_GATHER, &cg_std_grid, p->n, p->cfg); }

PARAMS(scatter, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, scatter, .timeout = 30) { run_grid(CG_SCATTER, &cg_std_grid, p->n, p->cfg); }

PARAMS(alltoallv, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, alltoallv, .timeout = 30) { run_grid(CG_ALLTOALLV, &cg_std_grid, p->n, p->cfg); }

/* 16 and 64 devices: every collective on a smaller grid. */
PARAMS(big_groups, {16, CT_CFG_DEFAULT}, {16, CT_CFG_LARGE}, {64, CT_CFG_DEFAULT}, {64, CT_CFG_LARGE})
ParameterizedTest(param *p, comm_coll, big_groups, .timeout = 30) {
  const cg_grid *g = p->n >= 64 ? &huge_n_grid : &big_n_grid;
  for (int k = 0; k < CG_NCOLLS; k++) run_grid((cg_kind)k, g, p->n, p->cfg);
}

#define LARGE(k_, dt_, op_, count_, inplace_, root_, seed_) \
  {.kind = k_, .dt = dt_, .op = op_, .count = count_, .inplace = inplace_, .root = root_, .seed = seed_}

/* A prime count (100003: no chunking splits it evenly) per collective, with a few dtype/op pairs.
   On 8 ranks most cases use the smaller prime 20011 to keep the references (and TSan) cheap.
   2 ranks on a machine of 2 or more CPUs take the reductions' owned lanes (sk_threads.h), 3 and
   8 on 2 CPUs the dealt claims; one case after another also checks that a lane counter left by
   the previous collective reads as none taken. */
PARAMS(large_count, {2, CT_CFG_DEFAULT}, {2, CT_CFG_LARGE}, {3, CT_CFG_DEFAULT}, {8, CT_CFG_DEFAULT}, {3, CT_CFG_LARGE},
       {8, CT_CFG_LARGE}, {2, CT_CFG_STREAM}, {8, CT_CFG_STREAM})
ParameterizedTest(param *p, comm_coll, large_count, .timeout = 30) {
  const size_t N = 100003, M = p->n >= 8 ? 20011 : 100003;
  int n = p->n;
  const cg_case cs[] = {
      LARGE(CG_ALLREDUCE, SK_F32, SK_SUM, N, false, 0, 11),
      LARGE(CG_ALLREDUCE, SK_BF16, SK_AVG, M, true, 0, 12),
      LARGE(CG_ALLREDUCE, SK_I64, SK_PROD, M, false, 0, 13),
      LARGE(CG_ALLREDUCE, SK_F64, SK_MAX, M, true, 0, 14),
      LARGE(CG_ALLGATHER, SK_I8, SK_SUM, M, false, 0, 15),
      LARGE(CG_ALLGATHER, SK_F16, SK_SUM, M, true, 0, 16),
      LARGE(CG_REDUCE_SCATTER, SK_F32, SK_SUM, M, false, 0, 17),
      LARGE(CG_REDUCE_SCATTER, SK_I32, SK_MIN, M, true, 0, 18),
      LARGE(CG_BROADCAST, SK_F16, SK_SUM, N, false, 1, 19),
      LARGE(CG_BROADCAST, SK_I32, SK_SUM, M, true, n - 1, 20),
      LARGE(CG_REDUCE, SK_F64, SK_MIN, M, false, n - 1, 21),
      LARGE(CG_REDUCE, SK_U8, SK_SUM, M, true, 1, 22),
      LARGE(CG_ALLTOALL, SK_U8, SK_SUM, M, false, 0, 23),
      LARGE(CG_ALLTOALL, SK_F32, SK_SUM, M, true, 0, 24),
      LARGE(CG_ALLTOALLV, SK_F32, SK_SUM, M, false, 0, 25), /* seed bit 2 clear: packed */
      LARGE(CG_ALLTOALLV, SK_F16, SK_SUM, M, false, 0, 26), /* set: gapped, sends reversed */
  };
  run_cases(n, p->cfg, cs, (int)(sizeof cs / sizeof cs[0]), "large_count");
}

/* Every kind interleaved on one communicator: state left by one collective must not leak into
   the next (inline slots, chunk tables, root bookkeeping). */
PARAMS(mixed, {2, CT_CFG_DEFAULT}, {5, CT_CFG_DEFAULT}, {8, CT_CFG_DEFAULT}, {5, CT_CFG_LARGE}, {8, CT_CFG_SMALL4K})
ParameterizedTest(param *p, comm_coll, mixed, .timeout = 30) {
  static const size_t counts[] = {0, 1, 3, 7, 64, 1023, 2001};
  int n = p->n, m = 0;
  cg_case cs[300];
  for (int i = 0; i < 300; i++) {
    cg_kind k = (cg_kind)(i % CG_NCOLLS);
    cg_case t = {.kind = k, .dt = ct_all_dtypes[(i / CG_NCOLLS) % CT_NDTYPES],
                 .op = ct_all_ops[(i / 3) % CT_NOPS], .count = counts[(i * 5 + i / 7) % 7],
                 .inplace = ((i / 2) % 2) == 1 && (cg_kinds[k].flags & CG_F_IN_PLACE),
                 .root = (i / CG_NCOLLS) % n, .seed = 5000u + (uint64_t)i};
    cs[m++] = t;
  }
  run_cases(n, p->cfg, cs, m, "mixed");
}

/* Sub-communicators (split, created, a mesh axis), blocking and non-blocking, with the Send/Recv
   ring, three outstanding requests and the barrier on each: the MPI driver's groups suite. */
PARAMS(groups, {5, CT_CFG_LARGE}, {8, CT_CFG_DEFAULT})
ParameterizedTest(param *p, comm_coll, groups, .timeout = 30) {
  cg_list l = {NULL, 0, 0};
  cg_expand_groups(&l, p->n, CG_ORDERED);
  run_list(p->n, p->cfg, &l, "groups");
}

/* Non-blocking collectives, and the composites both ways, on the world: the driver's async. */
PARAMS(async, {3, CT_CFG_DEFAULT}, {8, CT_CFG_LARGE})
ParameterizedTest(param *p, comm_coll, async, .timeout = 30) {
  cg_list l = {NULL, 0, 0};
  cg_expand_async(&l, p->n, CG_ORDERED);
  run_list(p->n, p->cfg, &l, "async");
}

/* ---- Barrier ---------------------------------------------------------------------------------- */

typedef struct barrier_arg {
  int n, rounds;
  atomic_int *phase; /* phase[r]: the last round rank r entered */
  ct_slot *slots;
} barrier_arg;

/* Round k: announce k, barrier, then every peer must have announced at least k. */
static sk_result barrier_device(sk_comm *c, void *p) {
  barrier_arg *a = (barrier_arg *)p;
  int rank = sk_comm_rank(c);
  ct_slot *s = &a->slots[rank];
  for (int k = 1; k <= a->rounds; k++) {
    if (rank == k % a->n) ct_sleep_ms(2); /* a late arrival, a different rank each round */
    atomic_store(&a->phase[rank], k);
    sk_result r = (k % 3 == 0) ? SK_OK : sk_barrier(c, NULL);
    if (k % 3 == 0) { /* the non-blocking form too */
      sk_request *req = NULL;
      r = sk_ibarrier(c, &req, NULL);
      if (r == SK_OK) r = sk_wait(&req, NULL);
    }
    char what[96];
    snprintf(what, sizeof what, "barrier n=%d rank=%d round %d", a->n, rank, k);
    if (!ct_rc(s, r, c, what)) return r;
    for (int q = 0; q < a->n; q++) {
      int ph = atomic_load(&a->phase[q]);
      ct_check(s, ph >= k, "barrier n=%d rank=%d round %d: left the barrier before rank %d arrived (its phase %d)",
               a->n, rank, k, q, ph);
    }
  }
  s->ran = 1;
  return SK_OK;
}

PARAMS(barrier, STD_PARAMS, {16, CT_CFG_DEFAULT}, {64, CT_CFG_DEFAULT})
ParameterizedTest(param *p, comm_coll, barrier, .timeout = 30) {
  barrier_arg a;
  a.n = p->n;
  a.rounds = p->n >= 64 ? 6 : 12;
  a.phase = (atomic_int *)calloc((size_t)p->n, sizeof(atomic_int));
  for (int r = 0; r < p->n; r++) atomic_init(&a.phase[r], 0);
  a.slots = ct_slots_new(p->n);
  char lab[64];
  snprintf(lab, sizeof lab, "barrier n=%d cfg=%s", p->n, ct_cfg_names[p->cfg]);
  ct_run(p->n, p->cfg, barrier_device, &a, lab);
  ct_expect_slots(a.slots, p->n, lab);
  free(a.slots);
  free(a.phase);
}

/* ---- the oracle itself: spot checks of the reference against hand-computed values ------------ */

Test(comm_coll, reference_spot_checks) {
  /* f32 sum left to right: (1e8 + 1) + -1e8 = 0 in f32 (1 is lost), not 1 */
  float f[3] = {1e8f, 1.0f, -1e8f}, out;
  const void *src[3] = {&f[0], &f[1], &f[2]};
  ct_ref_reduce1(&out, src, 3, SK_F32, SK_SUM);
  cr_expect_eq(out, 0.0f);
  /* i8 wraps */
  int8_t a[2] = {127, 1}, o8;
  const void *s8[2] = {&a[0], &a[1]};
  ct_ref_reduce1(&o8, s8, 2, SK_I8, SK_SUM);
  cr_expect_eq(o8, -128);
  /* i32 avg truncates toward zero */
  int32_t b[2] = {-7, 0}, o32;
  const void *s32[2] = {&b[0], &b[1]};
  ct_ref_reduce1(&o32, s32, 2, SK_I32, SK_AVG);
  cr_expect_eq(o32, -3);
  /* NaN in the last input wins in max */
  float g[2] = {1.0f, 0.0f / 0.0f};
  const void *sg[2] = {&g[0], &g[1]};
  ct_ref_reduce1(&out, sg, 2, SK_F32, SK_MAX);
  cr_expect(out != out);
}
