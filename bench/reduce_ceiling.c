/* reduce_ceiling -- how fast can any code reduce k arrays that do not fit in cache on this
   machine? A hand-written SSE kernel (bench/bench_ceiling.h, outside shardkit), with 2 threads,
   over 16 MiB arrays, streaming stores, best of 5, in two shapes:
   - k into 1: out = in0 + ... + in(k-1). The ceiling that the threads backend's ReduceScatter /
     Reduce (k input streams, one output) can reach. It is well below the in-place read+write
     probe that %bound divides by: reading many streams at once is slower than one
     read-modify-write stream. See bench/RESULTS.md.
   - k into k (the AllReduce shape): every one of k outputs gets the sum, so the kernel reads k
     streams and writes k, as an AllReduce of k devices must.
   The perf programs time the same kernel for their %ceil column (bench/README.md).

   Usage: build/reduce_ceiling [K ...]      (default: 1 2 4 8) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../examples/progs.h"
#include "bench_ceiling.h"

#define ELEMS (4u << 20) /* floats per array: 16 MiB */
#define THREADS 2

typedef struct job {
  float *const *in;
  float *const *out;
  int k, nout;
  size_t lo, hi;
} job;

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *reduce_range(void *p) {
  const job *j = (const job *)p;
  float *in[8], *out[8];
  if (j->k < 1 || j->k > 8 || j->nout < 1 || j->nout > 8) return NULL; /* main() keeps k in 1..8 */
  for (int r = 0; r < j->k; r++) in[r] = j->in[r] + j->lo;
  for (int o = 0; o < j->nout; o++) out[o] = j->out[o] + j->lo;
  bench_ceil_sum(in, j->k, out, j->nout, j->hi - j->lo, true);
  return NULL;
}

/* Best of 5 of THREADS threads reducing k inputs into nout outputs (each thread a contiguous
   half); seconds. */
static double best_time(float *const *in, int k, float *const *out, int nout) {
  double best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    pthread_t th[THREADS];
    job jobs[THREADS];
    double t0 = seconds();
    for (int t = 0; t < THREADS; t++) {
      jobs[t].in = in, jobs[t].out = out, jobs[t].k = k, jobs[t].nout = nout;
      jobs[t].lo = (size_t)ELEMS / THREADS * (size_t)t, jobs[t].hi = (size_t)ELEMS / THREADS * (size_t)(t + 1);
      pthread_create(&th[t], NULL, reduce_range, &jobs[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    double dt = seconds() - t0;
    if (dt < best) best = dt;
  }
  return best;
}

static void usage(FILE *f, const char *path) {
  fprintf(f,
          "Usage: %s [K ...]\n"
          "The memory ceiling of reducing K input streams of 16 MiB into one streamed output with %d threads\n"
          "(a hand-written kernel outside shardkit), best of 5. Each K is 1..8, at most 16 of them\n"
          "(default: 1 2 4 8). Then the AllReduce shape: K inputs into K streamed outputs, every output\n"
          "the sum (rows 'K->K'). GB/s counts bytes read + written.\n"
          "  -h,--help   this text\n",
          path, THREADS);
}

/* The K list from argv into ks (at most 16). Returns the count, 0 after -h, -1 after a message. */
static int parse_ks(int argc, char **argv, int ks[16]) {
  if (argc > 1 && prog_is_help(argv[1])) {
    usage(stdout, argv[0]);
    return 0;
  }
  if (argc - 1 > 16) {
    fprintf(stderr, "reduce_ceiling: at most 16 values of K (see %s -h)\n", prog_name(argv[0]));
    return -1;
  }
  int nk = 0;
  for (int a = 1; a < argc; a++) {
    char *end = NULL;
    long k = strtol(argv[a], &end, 10);
    if (end == argv[a] || *end || k < 1 || k > 8) {
      fprintf(stderr, "reduce_ceiling: K must be 1..8, got '%s' (see %s -h)\n", argv[a], prog_name(argv[0]));
      return -1;
    }
    ks[nk++] = (int)k;
  }
  if (!nk) ks[0] = 1, ks[1] = 2, ks[2] = 4, ks[3] = 8, nk = 4;
  return nk;
}

int main(int argc, char **argv) {
  int ks[16], nk = parse_ks(argc, argv, ks);
  if (nk <= 0) return nk == 0 ? 0 : 2;
  if (prog_refuse_launch(argv[0])) return 2;
  float *in[8], *out[8];
  for (int r = 0; r < 8; r++) {
    in[r] = (float *)aligned_alloc(64, ELEMS * sizeof(float));
    out[r] = (float *)aligned_alloc(64, ELEMS * sizeof(float));
    if (!in[r] || !out[r]) return 1;
    for (size_t i = 0; i < ELEMS; i++) in[r][i] = (float)(i % 7);
    memset(out[r], 0, ELEMS * sizeof(float));
  }
  /* k into 1: these lines are as they always were, for whatever parses them */
  printf("# k input streams of 16 MiB + 1 streamed output, %d threads, best of 5\n", THREADS);
  printf("# %2s %10s %12s\n", "k", "time(ms)", "GB/s(r+w)");
  for (int q = 0; q < nk; q++) {
    double best = best_time(in, ks[q], out, 1);
    double bytes = (double)ELEMS * sizeof(float) * (double)(ks[q] + 1);
    printf("  %2d %10.2f %12.1f\n", ks[q], best * 1e3, bytes / best / 1e9);
  }
  /* k into k: a first field 'k->k' that no k-into-1 row has */
  printf("# AllReduce shape: k input streams of 16 MiB + k streamed outputs (each the sum), %d threads, best of 5\n",
         THREADS);
  printf("# %7s %10s %12s\n", "k->k", "time(ms)", "GB/s(r+w)");
  for (int q = 0; q < nk; q++) {
    double best = best_time(in, ks[q], out, ks[q]);
    double bytes = (double)ELEMS * sizeof(float) * (double)(2 * ks[q]);
    printf("  %3d->%-2d %10.2f %12.1f\n", ks[q], ks[q], best * 1e3, bytes / best / 1e9);
  }
  for (int r = 0; r < 8; r++) free(in[r]), free(out[r]);
  return 0;
}
