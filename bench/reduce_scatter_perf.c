/* reduce_scatter_perf -- ReduceScatter, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw * (n-1)/n (nccl-tests; sk_coll_busbw_factor) */
static double rs_factor(int n) { return sk_coll_busbw_factor(SK_COLL_REDUCE_SCATTER, n); }

/* nccl-tests: the swept size is the send buffer (n * count elements); each rank receives
   count = size/es/n elements (the count column); in place, recv = send + rank*count. */
static void rs_counts(size_t count, int n, bench_counts *k) {
  size_t per = count / (size_t)n;
  k->send = per * (size_t)n, k->recv = per, k->param = per;
  k->send_ip = 0, k->recv_ip = per;
}

/* Minimum traffic, S = the send size (n * count * es): the N inputs of S are read once (NS)
   and the N outputs of S/N are written once (S): (N+1)S. */
static double rs_min_bytes(double S, int n) { return (n + 1.0) * S; }

static unsigned rs_touches(int rank, int n, int root) {
  (void)rank, (void)n, (void)root;
  return 3;
}

static sk_result rs_run(sk_comm *c, const bench_io *io) {
  return sk_reduce_scatter(c, io->send, io->recv, io->count, io->dt, io->op, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result rs_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_ireduce_scatter(c, io->send, io->recv, io->count, io->dt, io->op, req, NULL);
}

/* Rank j's input element k (k < n*count) is value(j, k). */
static void rs_fill(const bench_io *io) {
  size_t total = io->count * (size_t)io->n;
  bench_fill_values(io->dt, io->send, total, io->rank, 0, io->rep);
  if (!io->in_place) bench_poison(io->recv, io->count * io->es);
}

static size_t rs_expected_elems(int n, size_t count) { return count * (size_t)n; }

static void rs_expected(const bench_io *io, size_t j, void *out) {
  bench_reduce_value(io->dt, io->op, io->n, j, io->rep, out);
}

static int64_t rs_check(const bench_io *io) {
  return bench_count_wrong(io->es, io->recv, io->expected + (size_t)io->rank * io->count * io->es, io->count);
}

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "ReduceScatter", .has_op = true, .loops_ops = true,
                                  .in_place = BENCH_IN_PLACE_NCCL, .ceil = BENCH_CEIL_INTO_BLOCKS,
                                  .bus_factor = rs_factor, .counts = rs_counts,
                                  .min_bytes = rs_min_bytes, .touches = rs_touches, .run = rs_run, .start = rs_start, .fill = rs_fill,
                                  .expected_elems = rs_expected_elems, .expected = rs_expected, .check = rs_check};
  return bench_main(argc, argv, &coll);
}
