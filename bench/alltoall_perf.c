/* alltoall_perf -- AllToAll, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw * (n-1)/n (nccl-tests; sk_coll_busbw_factor) */
static double a2a_factor(int n) { return sk_coll_busbw_factor(SK_COLL_ALLTOALL, n); }

/* nccl-tests: both buffers hold n blocks of count = size/es/n elements (the count column is the
   per-peer count); in place, send == recv. */
static void a2a_counts(size_t count, int n, bench_counts *k) {
  size_t per = count / (size_t)n;
  k->send = k->recv = per * (size_t)n, k->param = per;
  k->send_ip = k->recv_ip = 0;
}

/* Minimum traffic, S = one rank's buffer (n * count * es): the N inputs (NS) are read once and
   the N outputs (NS) are written once: 2NS. */
static double a2a_min_bytes(double S, int n) { return 2.0 * n * S; }

static unsigned a2a_touches(int rank, int n, int root) {
  (void)rank, (void)n, (void)root;
  return 3;
}

static sk_result a2a_run(sk_comm *c, const bench_io *io) {
  return sk_alltoall(c, io->send, io->recv, io->count, io->dt, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result a2a_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_ialltoall(c, io->send, io->recv, io->count, io->dt, req, NULL);
}

/* Rank j's send element k is value(j, k); block r of it goes to rank r. */
static void a2a_fill(const bench_io *io) {
  size_t total = io->count * (size_t)io->n;
  bench_fill_values(io->dt, io->send, total, io->rank, 0, io->rep);
  if (!io->in_place) bench_poison(io->recv, total * io->es);
}

/* Block j of rank r's output = block r of rank j's input. */
static int64_t a2a_check(const bench_io *io) {
  int64_t bad = 0;
  for (int j = 0; j < io->n; j++)
    bad += bench_count_wrong_values(io->dt, (unsigned char *)io->recv + (size_t)j * io->count * io->es, io->count, j,
                                    (size_t)io->rank * io->count, io->rep);
  return bad;
}

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "AllToAll", .in_place = BENCH_IN_PLACE_NCCL, .bus_factor = a2a_factor,
                                  .counts = a2a_counts, .min_bytes = a2a_min_bytes, .touches = a2a_touches,
                                  .run = a2a_run, .start = a2a_start, .fill = a2a_fill, .check = a2a_check};
  return bench_main(argc, argv, &coll);
}
