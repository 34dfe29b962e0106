/* mpi_driver.c -- the MPI backend's test driver, run under mpirun by tests/test_mpi.c (never
   inside a Criterion test: MPI cannot be initialised twice in a process).

     mpirun.openmpi --oversubscribe --mca btl self,vader -np N build/mpi_driver [suite...]
   suites: coll groups async chunk det alltoallv (default: all six), faults (tests/mpi/faults.h); or
   alone, as a job of its own: teardown-hang, teardown-left.

   The collective suites run the shared grid of tests/coll_grid.h (the one the threads suite
   tests/test_comm_coll.c runs) on the MPI world, each case checked on every rank against the
   independent reference of tests/comm_test_util.h: outputs, inputs left unchanged, guard bytes,
   the buffers a rank must not receive into. MPI's default mode reduces floats in MPI's order,
   so its suites take the EXACT input style (floats +-2^k, k in [-2, 2], and NaNs: every sum and
   product exact in any order, compared bit for bit, any NaN equal to any NaN). det runs on a
   deterministic world with the ORDERED style (sums that only rank order 0..N-1 gets right),
   and also compares every output with the threads backend's, run in this process on a threads
   world of N devices, byte for byte, NaN payloads included.
     coll    every collective x dtype x op x count x placement x root on the world, blocking
     groups  sub-communicators (split, create, mesh axis), blocking and non-blocking, with the
             Send/Recv ring, three outstanding requests and the barrier
     async   non-blocking collectives; the ring, outstanding requests and barrier both ways
     chunk   max_count = 7: every MPI call cut into chunks
     det     deterministic = true, bit for bit with the threads backend
   Rank 0 prints one line per suite ("suite coll np=8: 1234 cases, 56789 checks, 0 failures";
   failures are failed checks, summed over the ranks); the first failures of each rank are
   printed by that rank. Exit status 0 only when every rank saw no failure. */
#define _GNU_SOURCE
#define SK_IMPL
#define CT_NO_CRITERION /* a plain MPI program: the harness without its Criterion helpers */
#include "shardkit.h"
#include "sk_mpi.h"

#include "../coll_grid.h"

#define TIMEOUT_MS 60000u
#define SHOWN_FAILURES 5 /* failed cases each rank prints per suite */

static int g_rank = -1, g_size = 0;

/* ---- the suites' grids ------------------------------------------------------------------------ */

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* On a world with max_count = 7: counts just above it, twice it plus one, and many chunks. */
static void build_chunk(cg_list *l, int n) {
  static const sk_dtype dts[] = {SK_F32, SK_I8, SK_F16, SK_F64};
  static const sk_redop ops[] = {SK_SUM, SK_MAX, SK_AVG};
  static const size_t counts[] = {8, 15, 100};
  cg_grid coll = cg_make_grid(dts, NELEMS(dts), ops, NELEMS(ops), counts, NELEMS(counts), false, CG_WORLD, CG_EXACT);
  cg_expand_collectives(l, &coll, n);
  cg_grid nb = cg_make_grid(dts, 1, ops, 1, counts + 2, 1, true, CG_WORLD, CG_EXACT);
  cg_expand_collectives(l, &nb, n);
  cg_grid comp = cg_make_grid(dts, NELEMS(dts), cg_sum_only, 1, counts, NELEMS(counts), false, CG_WORLD, CG_EXACT);
  cg_expand_composites(l, &comp, n);
}

/* On a deterministic world: order-dependent float sums (ORDERED), on the world and on a split
   non-blocking; the reductions again in the EXACT style for its NaNs (101 elements hold several),
   whose payloads must match the threads backend's too. */
static void build_det(cg_list *l, int n) {
  static const sk_dtype float_dts[] = {SK_F32, SK_F64, SK_F16, SK_BF16};
  static const size_t counts[] = {1, 1003}, nan_counts[] = {101};
  int nfloat = NELEMS(float_dts);
  cg_grid ordered = cg_make_grid(float_dts, nfloat, ct_all_ops, CT_NOPS, counts, 2, false, CG_WORLD, CG_ORDERED);
  cg_expand_collectives(l, &ordered, n);
  cg_grid split = cg_make_grid(float_dts, 1, ct_all_ops, CT_NOPS, counts + 1, 1, true, CG_SPLIT, CG_ORDERED);
  cg_expand_collectives(l, &split, n);
  cg_grid nans = cg_make_grid(float_dts, nfloat, ct_all_ops, CT_NOPS, nan_counts, 1, false, CG_WORLD, CG_EXACT);
  for (int k = 0; k < CG_NCOLLS; k++)
    if (cg_reduces((cg_kind)k)) cg_expand(l, (cg_kind)k, &nans, n);
}

static void build(const char *suite, int n, cg_list *l) {
  if (!strcmp(suite, "coll")) {
    cg_grid g = cg_std_grid; /* the threads suite's grid, with inputs MPI's order cannot change */
    g.style = CG_EXACT;
    cg_expand_collectives(l, &g, n);
  } else if (!strcmp(suite, "groups")) {
    cg_expand_groups(l, n, CG_EXACT);
  } else if (!strcmp(suite, "async")) {
    cg_expand_async(l, n, CG_EXACT);
  } else if (!strcmp(suite, "chunk")) {
    build_chunk(l, n);
  } else if (!strcmp(suite, "det")) {
    build_det(l, n);
  }
}

/* ---- running a suite ---------------------------------------------------------------------------- */

/* A case's outputs on this rank, as the grid's tap hands them over. */
typedef struct bytes {
  unsigned char *p;
  size_t len, cap;
  bool oom;
} bytes;

static void keep_bytes(void *user, const void *b, size_t n) {
  bytes *o = (bytes *)user;
  if (o->oom || n == 0) return;
  if (o->len + n > o->cap) {
    size_t cap = 2 * (o->len + n);
    unsigned char *p = (unsigned char *)realloc(o->p, cap);
    if (!p) {
      o->oom = true;
      return;
    }
    o->p = p, o->cap = cap;
  }
  memcpy(o->p + o->len, b, n);
  o->len += n;
}

typedef struct suite_run {
  const char *suite;
  const cg_list *l;
  bytes *threads_out; /* det: per case, this rank's outputs on the threads world; else NULL */
  long fails, checks;
} suite_run;

/* det: the case's outputs on MPI equal the threads backend's byte for byte. */
static void check_same_as_threads(ct_slot *s, const suite_run *x, int i, const bytes *mpi) {
  const bytes *thr = &x->threads_out[i];
  const cg_case *t = &x->l->v[i];
  size_t at = 0;
  while (at < mpi->len && at < thr->len && mpi->p[at] == thr->p[at]) at++;
  ct_check(s, !mpi->oom && !thr->oom && mpi->len == thr->len && at == mpi->len,
           "case %d (%s dt=%s op=%s count=%zu): deterministic MPI differs from the threads backend: %zu bytes vs "
           "%zu, first difference at byte %zu",
           i, cg_kind_name(t->kind), sk_dtype_name(t->dt), sk_redop_name(t->op), t->count, mpi->len, thr->len, at);
}

/* The threads world of this process: every device takes part in the cases; the one with this
   process's rank checks them against the reference and keeps its outputs (so each rank's checks
   count once over the job, and the others' references cost nothing). */
static sk_result threads_device(sk_comm *c, void *arg) {
  suite_run *x = (suite_run *)arg;
  bool mine = sk_comm_rank(c) == g_rank;
  ct_slot s;
  memset(&s, 0, sizeof s);
  sk_result r = SK_OK;
  for (int i = 0; i < x->l->n && r == SK_OK; i++) {
    cg_env env = {"threads", mine ? keep_bytes : NULL, &x->threads_out[i], !mine};
    r = cg_run_case(c, &x->l->v[i], &s, &env);
  }
  if (mine) {
    x->fails += s.nfail, x->checks += s.nchecks;
    if (s.nfail) fprintf(stderr, "FAIL suite %s np=%d rank %d, threads world: %d failed checks; first: %s\n", x->suite,
                         g_size, g_rank, s.nfail, s.msg);
  }
  return r;
}

static sk_result mpi_device(sk_comm *c, void *arg) {
  suite_run *x = (suite_run *)arg;
  int shown = 0;
  char label[64];
  snprintf(label, sizeof label, "mpi/%s", x->suite);
  for (int i = 0; i < x->l->n; i++) {
    ct_slot s;
    memset(&s, 0, sizeof s);
    bytes out = {NULL, 0, 0, false};
    cg_env env = {label, x->threads_out ? keep_bytes : NULL, &out, false};
    sk_result r = cg_run_case(c, &x->l->v[i], &s, &env);
    if (x->threads_out && r == SK_OK) check_same_as_threads(&s, x, i, &out);
    free(out.p);
    x->fails += s.nfail, x->checks += s.nchecks;
    if (s.nfail && shown++ < SHOWN_FAILURES)
      fprintf(stderr, "FAIL suite %s np=%d rank %d: case %d: %d failed checks; first: %s\n", x->suite, g_size, g_rank,
              i, s.nfail, s.msg);
    if (r != SK_OK) return r; /* fails the world: the peers return instead of hanging */
  }
  long mine[2] = {x->fails, x->checks}, sum[2] = {0, 0};
  sk_result r = sk_allreduce(c, mine, sum, 2, SK_I64, SK_SUM, NULL);
  if (r != SK_OK) return r;
  if (g_rank == 0)
    printf("suite %s np=%d: %d cases, %ld checks, %ld failures\n", x->suite, g_size, x->l->n, sum[1], sum[0]);
  x->fails = sum[0];
  return SK_OK;
}

/* det's first half: the cases on a threads world of g_size devices in this process. */
static long run_threads_reference(suite_run *x) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = g_size, d.timeout_ms = TIMEOUT_MS, d.backend = sk_threads_backend();
  sk_world *tw = NULL;
  sk_error err;
  if (sk_world_create(&d, &tw, &err) != SK_OK) {
    fprintf(stderr, "rank %d: threads world: %s\n", g_rank, err.msg);
    return 1;
  }
  sk_result r = sk_world_run(tw, threads_device, x, NULL);
  if (r != SK_OK)
    fprintf(stderr, "rank %d: suite %s: the threads run failed: %s\n", g_rank, x->suite, sk_world_error_message(tw));
  sk_world_destroy(tw, NULL);
  return r != SK_OK;
}

static long run_suite(const char *suite, sk_world *mw) {
  cg_list l = {NULL, 0, 0};
  build(suite, g_size, &l);
  if (l.n == 0) { /* main only passes known suites; an empty case list would pass vacuously */
    fprintf(stderr, "rank %d: suite %s has no cases\n", g_rank, suite);
    return 1;
  }
  suite_run x = {suite, &l, NULL, 0, 0};
  long fails = 0;
  if (!strcmp(suite, "det")) {
    x.threads_out = (bytes *)calloc((size_t)l.n, sizeof *x.threads_out);
    if (!x.threads_out) abort();
    fails += run_threads_reference(&x);
  }
  sk_result r = sk_world_run(mw, mpi_device, &x, NULL);
  if (r != SK_OK) {
    fprintf(stderr, "rank %d: suite %s: the MPI run failed: %s: %s\n", g_rank, suite, sk_result_name(r),
            sk_world_error_message(mw));
    fails++;
  }
  fails += x.fails;
  for (int i = 0; x.threads_out && i < l.n; i++) free(x.threads_out[i].p);
  free(x.threads_out), free(l.v);
  return fails;
}

#include "faults.h"
#include "alltoallv.h"

/* ---- main --------------------------------------------------------------------------------------- */

static sk_result who(sk_comm *c, void *arg) {
  (void)arg;
  g_rank = sk_comm_rank(c), g_size = sk_comm_size(c);
  return SK_OK;
}

static sk_world *mpi_world(bool det, size_t max_count) {
  static sk_mpi_config cfgs[4];
  static int used;
  sk_mpi_config *cfg = &cfgs[used++];
  memset(cfg, 0, sizeof *cfg);
  cfg->deterministic = det, cfg->max_count = max_count;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.backend = sk_mpi_backend(), d.backend_config = cfg, d.timeout_ms = TIMEOUT_MS;
  sk_world *w = NULL;
  sk_error err;
  if (sk_world_create(&d, &w, &err) != SK_OK) {
    fprintf(stderr, "mpi_driver: cannot create the MPI world: %s\n", err.msg);
    exit(2);
  }
  return w;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* One job each: these destroy the process's only world, which finalises MPI. */
  if (argc == 2 && !strcmp(argv[1], "teardown-hang")) return run_teardown(true);
  if (argc == 2 && !strcmp(argv[1], "teardown-left")) return run_teardown(false);
  /* The first world initialises MPI and is destroyed last, so MPI stays up for the others. */
  sk_world *plain = mpi_world(false, 0), *det = mpi_world(true, 0), *chunk = mpi_world(false, 7);
  if (sk_world_run(plain, who, NULL, NULL) != SK_OK) return 2;
  static const char *const all[] = {"coll", "groups", "async", "chunk", "det", "alltoallv"};
  const char *const *suites = argc > 1 ? (const char *const *)(argv + 1) : all;
  int ns = argc > 1 ? argc - 1 : 6;
  long fails = 0;
  for (int i = 0; i < ns; i++) {
    const char *s = suites[i];
    if (!strcmp(s, "faults")) fails += run_faults(plain);
    else if (!strcmp(s, "det")) fails += run_suite(s, det);
    else if (!strcmp(s, "chunk")) fails += run_suite(s, chunk);
    else if (!strcmp(s, "alltoallv")) fails += alltoallv_suite(g_size, g_rank);
    else if (!strcmp(s, "coll") || !strcmp(s, "groups") || !strcmp(s, "async")) fails += run_suite(s, plain);
    else {
      fprintf(stderr, "mpi_driver: unknown suite '%s' (coll groups async chunk det alltoallv faults)\n", s);
      fails++;
    }
  }
  sk_world_destroy(chunk, NULL);
  sk_world_destroy(det, NULL);
  sk_world_destroy(plain, NULL); /* MPI_Finalize: requests orphaned by failed worlds are freed now */
  if (g_count.live != 0) {
    fprintf(stderr, "FAIL rank %d: %ld allocations of the fault worlds live after MPI_Finalize\n", g_rank, g_count.live);
    fails++;
  }
  return fails ? 1 : 0;
}
