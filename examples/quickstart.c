/* The README's quick start, built by `make` so it stays true: 8 threads act as 8 devices and
   average a gradient with one AllReduce. */
#define SK_IMPL /* in exactly one .c file */
#include "shardkit.h"
#include <stdio.h>

static sk_result step(sk_comm *c, void *arg) { /* runs on each of the 8 device threads */
  (void)arg;
  float g[1024];
  for (int i = 0; i < 1024; i++) g[i] = (float)sk_comm_rank(c); /* this device's gradient */
  sk_result r = sk_allreduce(c, g, g, 1024, SK_F32, SK_AVG);
  if (r == SK_OK && sk_comm_rank(c) == 0) printf("mean of ranks 0..7 = %g\n", g[0]); /* 3.5 */
  return r;
}

int main(void) {
  sk_world_desc d = {0};
  d.ndevices = 8;
  d.backend = sk_threads_backend();
  sk_world *w;
  sk_error err;
  if (sk_world_create(&d, &w, &err) != SK_OK) {
    fprintf(stderr, "quickstart: %s\n", err.msg);
    return 1;
  }
  sk_result r = sk_world_run(w, step, NULL);
  if (r != SK_OK) fprintf(stderr, "quickstart: %s\n", sk_world_error_message(w));
  sk_world_destroy(w);
  return r != SK_OK;
}
