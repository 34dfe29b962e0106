/* all_reduce_perf -- AllReduce, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw * 2(n-1)/n (nccl-tests; sk_coll_busbw_factor) */
static double ar_factor(int n) { return sk_coll_busbw_factor(SK_COLL_ALLREDUCE, n); }

/* count = S / es elements on every rank, in and out (nccl-tests). */
static void ar_counts(size_t count, int n, bench_counts *k) {
  (void)n;
  k->send = k->recv = k->param = count;
  k->send_ip = k->recv_ip = 0;
}

/* Minimum traffic, S = count * es: every rank's input (N x S) is read once and every rank's
   output (N x S) is written once: 2NS. */
static double ar_min_bytes(double S, int n) { return 2.0 * n * S; }

static unsigned ar_touches(int rank, int n, int root) {
  (void)rank, (void)n, (void)root;
  return 3; /* send and recv on every rank */
}

static sk_result ar_run(sk_comm *c, const bench_io *io) {
  return sk_allreduce(c, io->send, io->recv, io->count, io->dt, io->op, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result ar_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_iallreduce(c, io->send, io->recv, io->count, io->dt, io->op, req, NULL);
}

static void ar_fill(const bench_io *io) {
  bench_fill_values(io->dt, io->in_place ? io->recv : io->send, io->count, io->rank, 0, io->rep);
  if (!io->in_place) bench_poison(io->recv, io->count * io->es);
}

static size_t ar_expected_elems(int n, size_t count) {
  (void)n;
  return count;
}

static void ar_expected(const bench_io *io, size_t j, void *out) {
  bench_reduce_value(io->dt, io->op, io->n, j, io->rep, out);
}

static int64_t ar_check(const bench_io *io) { return bench_count_wrong(io->es, io->recv, io->expected, io->count); }

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "AllReduce", .has_op = true, .loops_ops = true,
                                  .in_place = BENCH_IN_PLACE_NCCL, .ceil = BENCH_CEIL_INTO_ALL,
                                  .bus_factor = ar_factor, .counts = ar_counts,
                                  .min_bytes = ar_min_bytes, .touches = ar_touches, .run = ar_run, .start = ar_start, .fill = ar_fill,
                                  .expected_elems = ar_expected_elems, .expected = ar_expected, .check = ar_check};
  return bench_main(argc, argv, &coll);
}
