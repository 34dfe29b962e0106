/* mpi_driver.c -- the MPI backend's test driver, run under mpirun by tests/test_mpi.c (never
   inside a Criterion test: MPI cannot be initialised twice in a process).

     mpirun.openmpi --oversubscribe --mca btl self,vader -np N build/mpi_driver [suite...]
   suites: coll groups async chunk det alltoallv (default: all six), faults (tests/mpi/faults.h); or
   alone, as a job of its own: teardown-hang, teardown-left.

   Each suite builds its case list (cases.h), runs it on a threads world of N devices in this
   process (the reference; only this rank's outputs are kept), then on the MPI world, and
   compares the bytes: bit for bit, except that in the default mode two NaNs of different
   payloads count as equal (MPI's NaN-aware min/max and sums pick whichever NaN they meet first).
   det runs with deterministic = true on order-dependent float inputs: bit for bit, NaNs too.
   Rank 0 prints one line per suite ("suite coll np=8: 1234 cases, 0 failures"); failures are
   printed by the rank that saw them. Exit status 0 only when every rank saw no failure. */
#define _GNU_SOURCE
#define SK_IMPL
#include "shardkit.h"
#include "sk_mpi.h"

#include <math.h>
#include <stdint.h>

#include "cases.h"

#define TIMEOUT_MS 60000u

static int g_rank = -1, g_size = 0;

/* ---- case lists ------------------------------------------------------------------------------ */

typedef struct clist {
  dcase *v;
  int n, cap;
} clist;

static void add(clist *l, dcase t) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 256;
    l->v = (dcase *)realloc(l->v, sizeof(dcase) * (size_t)l->cap);
    if (!l->v) abort();
  }
  t.seed = (uint64_t)l->n + 1;
  l->v[l->n++] = t;
}

static const sk_dtype all_dt[] = {SK_F32, SK_F64, SK_F16, SK_BF16, SK_I8, SK_U8, SK_I32, SK_I64};
#define NDT ((int)(sizeof all_dt / sizeof all_dt[0]))

/* kinds x dtypes x ops (reducing kinds) x counts x placements, on one group. */
static void grid(clist *l, int n, const sk_dtype *dts, int ndt, const sk_redop *ops, int nops, const size_t *counts,
                 int ncounts, int group, int nb, int style, bool all_roots) {
  for (int k = 0; k <= DK_SCATTER; k++)
    for (int d = 0; d < ndt; d++)
      for (int o = 0; o < (dk_reduces((dkind)k) ? nops : 1); o++)
        for (int ci = 0; ci < ncounts; ci++)
          for (int ip = 0; ip < 2; ip++) {
            int nroots = dk_rooted((dkind)k) && all_roots && counts[ci] == 7 ? n : 1;
            for (int root = 0; root < nroots; root++) {
              dcase t;
              memset(&t, 0, sizeof t);
              t.k = (dkind)k, t.dt = dts[d], t.op = ops[o], t.count = counts[ci], t.inplace = ip;
              t.root = nroots > 1 ? root : n - 1;
              t.group = group, t.nb = nb, t.style = style;
              add(l, t);
            }
          }
}

static void p2p_and_multi(clist *l, const sk_dtype *dts, int ndt, const size_t *counts, int ncounts, int nb, int style) {
  for (int d = 0; d < ndt; d++)
    for (int ci = 0; ci < ncounts; ci++) {
      dcase t;
      memset(&t, 0, sizeof t);
      t.dt = dts[d], t.count = counts[ci], t.nb = nb, t.style = style, t.op = SK_SUM;
      t.k = DK_SENDRECV;
      add(l, t);
      t.k = DK_MULTI, t.nb = 1, t.root = 1;
      add(l, t);
    }
  dcase b;
  memset(&b, 0, sizeof b);
  b.k = DK_BARRIER, b.nb = nb;
  add(l, b);
}

static void build(const char *suite, int n, clist *l) {
  static const sk_redop all_ops[] = {SK_SUM, SK_PROD, SK_MIN, SK_MAX, SK_AVG};
  if (!strcmp(suite, "coll")) {
    static const size_t counts[] = {0, 1, 7, 1003};
    grid(l, n, all_dt, NDT, all_ops, 5, counts, 4, G_WORLD, 0, ST_EXACT, true);
  } else if (!strcmp(suite, "groups")) {
    static const sk_dtype dts[] = {SK_F32, SK_I32, SK_BF16};
    static const sk_redop ops[] = {SK_SUM, SK_MAX, SK_AVG};
    static const size_t counts[] = {1, 7};
    for (int g = G_SPLIT; g < G_N; g++) grid(l, n, dts, 3, ops, 3, counts, 2, g, g == G_MESH, ST_EXACT, false);
    static const size_t pc[] = {5};
    for (int g = G_SPLIT; g < G_N; g++) {
      size_t before = (size_t)l->n;
      p2p_and_multi(l, dts, 1, pc, 1, 0, ST_EXACT);
      for (size_t i = before; i < (size_t)l->n; i++) l->v[i].group = g;
    }
  } else if (!strcmp(suite, "async")) {
    static const sk_dtype dts[] = {SK_F32, SK_I64, SK_F16, SK_U8};
    static const sk_redop ops[] = {SK_SUM, SK_MIN, SK_AVG};
    static const size_t counts[] = {0, 7, 1003};
    grid(l, n, dts, 4, ops, 3, counts, 3, G_WORLD, 1, ST_EXACT, false);
    p2p_and_multi(l, all_dt, NDT, counts, 3, 0, ST_EXACT);
    p2p_and_multi(l, all_dt, NDT, counts, 3, 1, ST_EXACT);
  } else if (!strcmp(suite, "chunk")) { /* max_count = 7: every chunked path */
    static const sk_dtype dts[] = {SK_F32, SK_I8, SK_F16, SK_F64};
    static const sk_redop ops[] = {SK_SUM, SK_MAX, SK_AVG};
    static const size_t counts[] = {8, 15, 100};
    grid(l, n, dts, 4, ops, 3, counts, 3, G_WORLD, 0, ST_EXACT, false);
    grid(l, n, dts, 1, ops, 1, counts + 2, 1, G_WORLD, 1, ST_EXACT, false);
    p2p_and_multi(l, dts, 4, counts, 3, 0, ST_EXACT);
  } else if (!strcmp(suite, "det")) { /* order-dependent sums: bitwise equal to threads */
    static const sk_dtype dts[] = {SK_F32, SK_F64, SK_F16, SK_BF16};
    static const size_t counts[] = {1, 1003};
    grid(l, n, dts, 4, all_ops, 5, counts, 2, G_WORLD, 0, ST_RANDOM, false);
    grid(l, n, dts, 1, all_ops, 5, counts + 1, 1, G_SPLIT, 1, ST_RANDOM, false);
  }
}

/* ---- reference and comparison ---------------------------------------------------------------- */

typedef struct ref {
  unsigned char **out;
  size_t *len;
  sk_result *rc;
} ref;

typedef struct run_ctx {
  const clist *l;
  ref *ref;
  int tolerant;
  long failures, checks;
  const char *suite;
} run_ctx;

static sk_result ref_device(sk_comm *c, void *arg) {
  run_ctx *x = (run_ctx *)arg;
  bool mine = sk_comm_rank(c) == g_rank;
  for (int i = 0; i < x->l->n; i++) {
    unsigned char *out = NULL;
    size_t len = 0;
    sk_result r = drun(c, &x->l->v[i], &out, &len);
    if (mine) x->ref->out[i] = out, x->ref->len[i] = len, x->ref->rc[i] = r;
    else free(out);
    if (r != SK_OK) return r;
  }
  return SK_OK;
}

static bool same(const dcase *t, const unsigned char *a, const unsigned char *b, size_t len, int tolerant, size_t *at) {
  size_t es = sk_dtype_size(t->dt);
  if (!es) { /* an invalid dtype has no elements to compare: a difference, never a pass */
    *at = 0;
    return false;
  }
  for (size_t i = 0; i < len / es; i++) {
    const unsigned char *p = a + i * es, *q = b + i * es;
    if (!memcmp(p, q, es)) continue;
    if (tolerant && sk_dtype_is_float(t->dt)) {
      double u, v;
      if (t->dt == SK_F32) { float f, g; memcpy(&f, p, 4), memcpy(&g, q, 4); u = f, v = g; }
      else if (t->dt == SK_F64) memcpy(&u, p, 8), memcpy(&v, q, 8);
      else {
        uint16_t f, g;
        memcpy(&f, p, 2), memcpy(&g, q, 2);
        u = t->dt == SK_F16 ? sk_f16_to_f32(f) : sk_bf16_to_f32(f);
        v = t->dt == SK_F16 ? sk_f16_to_f32(g) : sk_bf16_to_f32(g);
      }
      if (isnan(u) && isnan(v)) continue;
    }
    *at = i;
    return false;
  }
  return true;
}

static sk_result mpi_device(sk_comm *c, void *arg) {
  run_ctx *x = (run_ctx *)arg;
  int shown = 0;
  for (int i = 0; i < x->l->n; i++) {
    const dcase *t = &x->l->v[i];
    unsigned char *out = NULL;
    size_t len = 0, at = 0;
    sk_result r = drun(c, t, &out, &len);
    x->checks++;
    char desc[256];
    dcase_str(desc, sizeof desc, t);
    const char *why = NULL;
    if (r != x->ref->rc[i]) why = "result code differs";
    else if (len != x->ref->len[i]) why = "output length differs";
    else if (len && !same(t, out, x->ref->out[i], len, x->tolerant, &at)) why = "output differs";
    if (why) {
      x->failures++;
      if (shown++ < 5)
        fprintf(stderr, "FAIL suite %s np=%d rank %d: case %d (%s): %s (mpi %s, threads %s; first element %zu)\n",
                x->suite, g_size, g_rank, i, desc, why, sk_result_name(r), sk_result_name(x->ref->rc[i]), at);
    }
    free(out);
    if (r != SK_OK && r == x->ref->rc[i]) return r; /* both failed: the sequence is broken */
  }
  long mine[2] = {x->failures, x->checks}, sum[2] = {0, 0};
  sk_result r = sk_allreduce(c, mine, sum, 2, SK_I64, SK_SUM);
  if (r != SK_OK) return r;
  if (g_rank == 0) printf("suite %s np=%d: %d cases, %ld checks, %ld failures\n", x->suite, g_size, x->l->n, sum[1], sum[0]);
  x->failures = sum[0];
  return SK_OK;
}

static long run_suite(const char *suite, sk_world *mw, int tolerant) {
  clist l = {NULL, 0, 0};
  build(suite, g_size, &l);
  if (l.n == 0) { /* main only passes known suites; an empty case list would pass vacuously */
    fprintf(stderr, "rank %d: suite %s has no cases\n", g_rank, suite);
    free(l.v);
    return 1;
  }
  ref rf;
  rf.out = (unsigned char **)calloc((size_t)l.n, sizeof *rf.out);
  rf.len = (size_t *)calloc((size_t)l.n, sizeof *rf.len);
  rf.rc = (sk_result *)calloc((size_t)l.n, sizeof *rf.rc);
  run_ctx x;
  memset(&x, 0, sizeof x);
  x.l = &l, x.ref = &rf, x.tolerant = tolerant, x.suite = suite;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = g_size, d.timeout_ms = TIMEOUT_MS, d.backend = sk_threads_backend();
  sk_world *tw = NULL;
  sk_error err;
  long fails = 0;
  if (sk_world_create(&d, &tw, &err) != SK_OK) {
    fprintf(stderr, "rank %d: threads world: %s\n", g_rank, err.msg);
    fails = 1;
  } else {
    sk_result r = sk_world_run(tw, ref_device, &x);
    if (r != SK_OK) fprintf(stderr, "rank %d: suite %s: the threads reference failed: %s\n", g_rank, suite, sk_world_error_message(tw));
    sk_world_destroy(tw);
    /* the reference's own failures are compared as result codes, case by case */
    r = sk_world_run(mw, mpi_device, &x);
    if (r != SK_OK) {
      fprintf(stderr, "rank %d: suite %s: the MPI run failed: %s: %s\n", g_rank, suite, sk_result_name(r), sk_world_error_message(mw));
      fails = 1;
    }
    fails += x.failures;
  }
  for (int i = 0; i < l.n; i++) free(rf.out[i]);
  free(rf.out), free(rf.len), free(rf.rc), free(l.v);
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
  if (sk_world_run(plain, who, NULL) != SK_OK) return 2;
  static const char *const all[] = {"coll", "groups", "async", "chunk", "det", "alltoallv"};
  const char *const *suites = argc > 1 ? (const char *const *)(argv + 1) : all;
  int ns = argc > 1 ? argc - 1 : 6;
  long fails = 0;
  for (int i = 0; i < ns; i++) {
    const char *s = suites[i];
    if (!strcmp(s, "faults")) fails += run_faults(plain);
    else if (!strcmp(s, "det")) fails += run_suite(s, det, 0);
    else if (!strcmp(s, "chunk")) fails += run_suite(s, chunk, 1);
    else if (!strcmp(s, "alltoallv")) fails += alltoallv_suite(g_size, g_rank);
    else if (!strcmp(s, "coll") || !strcmp(s, "groups") || !strcmp(s, "async")) fails += run_suite(s, plain, 1);
    else {
      fprintf(stderr, "mpi_driver: unknown suite '%s' (coll groups async chunk det alltoallv faults)\n", s);
      fails++;
    }
  }
  sk_world_destroy(chunk);
  sk_world_destroy(det);
  sk_world_destroy(plain); /* MPI_Finalize: requests orphaned by failed worlds are freed now */
  if (g_count.live != 0) {
    fprintf(stderr, "FAIL rank %d: %ld allocations of the fault worlds live after MPI_Finalize\n", g_rank, g_count.live);
    fails++;
  }
  return fails ? 1 : 0;
}
