/* The README's quick start, built by `make` so it stays true: 8 threads act as 8 devices and
   average a gradient with one AllReduce; then the README's layout example cuts a tensor across a
   2x2x2 mesh. Both results are checked against values worked out by hand, and the program says
   what it did; a wrong result exits 1. */
#define SK_IMPL /* in exactly one .c file */
#include "shardkit.h"
#include <stdio.h>
#include <string.h>

#include "progs.h"

#define DEVICES 8
#define N 1024

static sk_result step(sk_comm *c, void *arg) { /* runs on each of the 8 device threads */
  int *wrong = (int *)arg; /* one counter per device: no two threads write the same one */
  int rank = sk_comm_rank(c);
  float g[N];
  for (int i = 0; i < N; i++) g[i] = (float)rank; /* this device's gradient */
  sk_result r = sk_allreduce(c, g, g, N, SK_F32, SK_AVG, NULL);
  /* the mean of 0..7 is 3.5, exact in float, on every element of every device */
  for (int i = 0; r == SK_OK && i < N; i++) wrong[rank] += g[i] != 3.5f;
  return r;
}

/* AllReduce(avg) of the 8 gradients; returns the number of wrong elements, or -1 on failure. */
static long run_allreduce(void) {
  sk_world_desc d = {0};
  d.ndevices = DEVICES;
  d.backend = sk_threads_backend();
  sk_world *w;
  sk_error err;
  if (sk_world_create(&d, &w, &err) != SK_OK) {
    fprintf(stderr, "quickstart: %s\n", err.msg);
    return -1;
  }
  int wrong[DEVICES] = {0};
  sk_result r = sk_world_run(w, step, wrong, NULL);
  if (r != SK_OK) fprintf(stderr, "quickstart: %s\n", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  long total = 0;
  for (int i = 0; i < DEVICES; i++) total += wrong[i];
  printf("AllReduce(avg) on %d threads as devices: device r held %d floats equal to r; every device now\n"
         "holds the mean 3.5 in all of them: %s (%ld of %d elements wrong)\n",
         DEVICES, N, r == SK_OK && !total ? "ok" : "WRONG", total, DEVICES * N);
  return r == SK_OK ? total : -1;
}

/* x[16,784] under layout("mp",("sp","dp")) on the mesh dp=2,sp=2,mp=2: which slice rank 2 holds.
   Rank 2 has coordinates dp=0, sp=1, mp=0; rows are cut by mp (2 blocks of 8: block 0), columns
   by (sp,dp) with sp the major part (4 blocks of 196: block 2*1 + 0 = 2), so rows 0:8 and
   columns 392:588. Returns 0 when the library agrees. */
static int run_layout(void) {
  sk_mesh m;
  sk_layout l;
  sk_slice s;
  sk_error err;
  const int64_t shape[2] = {16, 784};
  memset(&s, 0, sizeof s); /* a failed call leaves it alone; the analyzer cannot see a good one fills it */
  if (sk_mesh_parse(&m, "dp=2,sp=2,mp=2", &err) != SK_OK ||
      sk_layout_parse(&l, &m, "mp,(sp,dp)", 2, shape, &err) != SK_OK || sk_layout_slice(&l, 2, &s, &err) != SK_OK) {
    fprintf(stderr, "quickstart: %s\n", err.msg);
    return 1;
  }
  int ok = s.start[0] == 0 && s.stop[0] == 8 && s.start[1] == 392 && s.stop[1] == 588;
  printf("layout \"mp,(sp,dp)\" of x[16,784] on mesh dp=2,sp=2,mp=2: rank 2 holds x[%lld:%lld, %lld:%lld], "
         "expected x[0:8, 392:588]: %s\n",
         (long long)s.start[0], (long long)s.stop[0], (long long)s.start[1], (long long)s.stop[1], ok ? "ok" : "WRONG");
  return !ok;
}

int main(int argc, char **argv) {
  if (argc > 1 && prog_is_help(argv[1])) {
    printf("Usage: %s\n"
           "The README's quick start: an AllReduce(avg) on 8 threads acting as devices, and a tensor's slice\n"
           "under a layout, each checked against the expected values. No options; exit status 1 on a wrong\n"
           "result.\n",
           argv[0]);
    return 0;
  }
  if (argc > 1) return prog_bad_usage(argv[0], "takes no arguments", argv[1]);
  if (prog_refuse_launch(argv[0])) return 2;
  long wrong = run_allreduce();
  int layout_bad = run_layout();
  int failed = wrong != 0 || layout_bad;
  printf("quickstart: %s\n", failed ? "FAILED" : "all results as expected");
  return failed;
}
