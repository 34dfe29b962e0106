/* layout_bench: the cost of sk_layout.h's math on the largest mesh MindSpore allows.
   - ns per rank slice: sk_layout_slice over all 4096 ranks, many passes, median of several runs
   - all replica groups (sk_layout_replica_groups), and sk_mesh_groups over each of the 16 axis
     combinations of an 8x8x8x8 mesh
   Targets: <= 100 ns per slice, <= 5 ms for all groups (a training framework asks for these at
   every graph compile, for every tensor).
   Usage: build/layout_bench [RUNS]   (default 9 runs; the median is reported) */
#define _GNU_SOURCE /* clock_gettime under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define SK_IMPL
#include "sk_layout.h"

#include "../examples/progs.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die_on(sk_result r, const sk_error *e) {
  if (r != SK_OK) {
    fprintf(stderr, "layout_bench: %s\n", e->msg);
    exit(1);
  }
}

/* Keeps the compiler from dropping the measured calls. */
static volatile int64_t sink;

static void usage(FILE *f, const char *path) {
  fprintf(f,
          "Usage: %s [RUNS]\n"
          "Times sk_layout.h on a 4096-device mesh (dp=8,sp=8,mp=8,pp=8): sk_layout_slice per rank, all\n"
          "replica groups, the groups of every axis combination. RUNS: 1..101 (default 9); medians reported.\n"
          "  -h,--help   this text\n",
          path);
}

/* RUNS from argv, or 0 after a message (or the help text: *help set). */
static int parse_runs(int argc, char **argv, int *help) {
  *help = argc > 1 && prog_is_help(argv[1]);
  if (*help) {
    usage(stdout, argv[0]);
    return 0;
  }
  if (argc > 2) {
    fprintf(stderr, "layout_bench: unexpected argument '%s' (see %s -h)\n", argv[2], prog_name(argv[0]));
    return 0;
  }
  if (argc < 2) return 9;
  char *end = NULL;
  long runs = strtol(argv[1], &end, 10);
  if (end == argv[1] || *end || runs < 1 || runs > 101) {
    fprintf(stderr, "layout_bench: RUNS must be 1..101, got '%s' (see %s -h)\n", argv[1], prog_name(argv[0]));
    return 0;
  }
  return (int)runs;
}

int main(int argc, char **argv) {
  int help, runs = parse_runs(argc, argv, &help);
  if (help) return 0;
  if (!runs) return 2;
  if (prog_refuse_launch(argv[0])) return 2;
  sk_mesh mesh;
  sk_layout layout;
  sk_error e;
  const char *mesh_text = "dp=8,sp=8,mp=8,pp=8";
  const char *map_text = "(dp,sp),None,mp,None"; /* a tuple dim and unsplit dims: pp replicates */
  const int64_t shape[4] = {1024, 1024, 64, 64};
  die_on(sk_mesh_parse(&mesh, mesh_text, &e), &e);
  die_on(sk_layout_parse(&layout, &mesh, map_text, 4, shape, &e), &e);

  /* 1. ns per slice: every rank, `passes` times per run */
  const int passes = 200;
  double slice_ns[101];
  for (int run = 0; run < runs; run++) {
    int64_t acc = 0;
    double t0 = now_ns();
    for (int p = 0; p < passes; p++)
      for (int r = 0; r < mesh.size; r++) {
        sk_slice s;
        die_on(sk_layout_slice(&layout, r, &s, &e), &e);
        acc += s.start[0] + s.stop[0]; /* a sink; dim 0 changes with the rank */
      }
    double t1 = now_ns();
    sink = acc;
    slice_ns[run] = (t1 - t0) / ((double)passes * mesh.size);
  }

  /* 2. all replica groups, and the groups along every axis combination */
  static int ranks[SK_MAX_DEVICES];
  double rep_ms[101], axes_ms[101];
  int ng = 0, gs = 0;
  for (int run = 0; run < runs; run++) {
    double t0 = now_ns();
    die_on(sk_layout_replica_groups(&layout, ranks, SK_MAX_DEVICES, &ng, &gs, &e), &e);
    double t1 = now_ns();
    int64_t acc = 0;
    for (uint32_t mask = 0; mask < (1u << mesh.naxes); mask++) {
      int n, g;
      die_on(sk_mesh_groups(&mesh, mask, ranks, SK_MAX_DEVICES, &n, &g, &e), &e);
      acc += ranks[SK_MAX_DEVICES - 1] + n;
    }
    double t2 = now_ns();
    sink = acc;
    rep_ms[run] = (t1 - t0) / 1e6;
    axes_ms[run] = (t2 - t1) / 1e6;
  }

  double m_slice = median(slice_ns, runs), m_rep = median(rep_ms, runs), m_axes = median(axes_ms, runs);
  printf("# layout_bench: mesh %s (%d devices), x[1024,1024,64,64] layout \"%s\", %d runs, median\n", mesh_text,
         mesh.size, map_text, runs);
  printf("%-44s %12s %10s %s\n", "measure", "median", "target", "met");
  printf("%-44s %9.1f ns %7.0f ns %s\n", "sk_layout_slice, per rank", m_slice, 100.0, m_slice <= 100.0 ? "yes" : "NO");
  printf("%-44s %9.3f ms %7.0f ms %s\n", "sk_layout_replica_groups (all groups)", m_rep, 5.0, m_rep <= 5.0 ? "yes" : "NO");
  printf("%-44s %9.3f ms %7.0f ms %s\n", "sk_mesh_groups, all 16 axis combinations", m_axes, 5.0,
         m_axes <= 5.0 ? "yes" : "NO");
  printf("# replica groups: %d groups of %d ranks\n", ng, gs);
  return 0;
}
