/* scatter_perf -- Scatter, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw * (n-1)/n (nccl-tests; sk_coll_busbw_factor) */
static double sc_factor(int n) { return sk_coll_busbw_factor(SK_COLL_SCATTER, n); }

/* nccl-tests: the swept size is the root's send buffer (n * count elements); each rank
   receives count = size/es/n elements (the count column); in place (on the root),
   recv = send + rank*count. */
static void sc_counts(size_t count, int n, bench_counts *k) {
  size_t per = count / (size_t)n;
  k->send = per * (size_t)n, k->recv = per, k->param = per;
  k->send_ip = 0, k->recv_ip = per;
}

/* Minimum traffic, S = the root's send size: it is read once (S) and the N outputs of S/N are
   written once (S): 2S. */
static double sc_min_bytes(double S, int n) {
  (void)n;
  return 2.0 * S;
}

static unsigned sc_touches(int rank, int n, int root) {
  (void)n;
  return rank == root ? 3 : 2; /* the root's send, every recv */
}

static sk_result sc_run(sk_comm *c, const bench_io *io) {
  return sk_scatter(c, io->send, io->recv, io->count, io->dt, io->root, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result sc_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_iscatter(c, io->send, io->recv, io->count, io->dt, io->root, req, NULL);
}

/* The root's send element k (k < n*count) is value(root, k): rank j receives value(root, j*count + i). */
static void sc_fill(const bench_io *io) {
  size_t cnt = io->count, es = io->es, tot = cnt * (size_t)io->n;
  if (io->rank == io->root) bench_fill_values(io->dt, io->send, tot, io->rank, 0, io->rep);
  if (!io->in_place || io->rank != io->root) bench_poison(io->recv, cnt * es); /* in place on the root: its block */
}

static int64_t sc_check(const bench_io *io) {
  return bench_count_wrong_values(io->dt, io->recv, io->count, io->root, (size_t)io->rank * io->count, io->rep);
}

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "Scatter", .has_root = true, .in_place = BENCH_IN_PLACE_NCCL,
                                  .bus_factor = sc_factor, .counts = sc_counts, .min_bytes = sc_min_bytes,
                                  .touches = sc_touches, .run = sc_run, .start = sc_start, .fill = sc_fill, .check = sc_check};
  return bench_main(argc, argv, &coll);
}
