/* reduce_perf -- Reduce, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw (nccl-tests; sk_coll_busbw_factor) */
static double rd_factor(int n) { return sk_coll_busbw_factor(SK_COLL_REDUCE, n); }

/* count = S / es elements on every rank (nccl-tests); in place, send == recv. */
static void rd_counts(size_t count, int n, bench_counts *k) {
  (void)n;
  k->send = k->recv = k->param = count;
  k->send_ip = k->recv_ip = 0;
}

/* Minimum traffic, S = count * es: the N inputs (NS) are read once and the root's output (S)
   is written once: (N+1)S. */
static double rd_min_bytes(double S, int n) { return (n + 1.0) * S; }

static unsigned rd_touches(int rank, int n, int root) {
  (void)n;
  return rank == root ? 3 : 1; /* every send, the root's recv */
}

static sk_result rd_run(sk_comm *c, const bench_io *io) {
  return sk_reduce(c, io->send, io->recv, io->count, io->dt, io->op, io->root, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result rd_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_ireduce(c, io->send, io->recv, io->count, io->dt, io->op, io->root, req, NULL);
}

static void rd_fill(const bench_io *io) {
  bench_fill_values(io->dt, io->in_place ? io->recv : io->send, io->count, io->rank, 0, io->rep);
  if (!io->in_place) bench_poison(io->recv, io->count * io->es);
}

static size_t rd_expected_elems(int n, size_t count) {
  (void)n;
  return count;
}

static void rd_expected(const bench_io *io, size_t j, void *out) {
  bench_reduce_value(io->dt, io->op, io->n, j, io->rep, out);
}

/* Only the root's output is defined. */
static int64_t rd_check(const bench_io *io) {
  return io->rank == io->root ? bench_count_wrong(io->es, io->recv, io->expected, io->count) : 0;
}

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "Reduce", .has_op = true, .has_root = true, .loops_ops = true,
                                  .in_place = BENCH_IN_PLACE_NCCL, .ceil = BENCH_CEIL_INTO_ROOT,
                                  .bus_factor = rd_factor, .counts = rd_counts,
                                  .min_bytes = rd_min_bytes, .touches = rd_touches, .run = rd_run, .start = rd_start, .fill = rd_fill,
                                  .expected_elems = rd_expected_elems, .expected = rd_expected, .check = rd_check};
  return bench_main(argc, argv, &coll);
}
