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

static sk_result rd_run(sk_comm *c, const void *s, void *r, size_t count, sk_dtype dt, sk_redop op, int root) {
  return sk_reduce(c, s, r, count, dt, op, root);
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
  static const bench_coll coll = {"Reduce",   true,   true,    true,  true,   rd_factor,
                                  rd_counts,  rd_min_bytes, rd_touches, rd_run, rd_fill, rd_expected_elems,
                                  rd_expected, rd_check};
  return bench_main(argc, argv, &coll);
}
