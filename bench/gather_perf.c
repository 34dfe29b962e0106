/* gather_perf -- Gather, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw * (n-1)/n (nccl-tests; sk_coll_busbw_factor) */
static double ga_factor(int n) { return sk_coll_busbw_factor(SK_COLL_GATHER, n); }

/* nccl-tests: the swept size is the root's gathered (receive) buffer; each rank sends
   count/n elements (the count column and the call's count); in place (on the root),
   send = recv + rank*count. */
static void ga_counts(size_t count, int n, bench_counts *k) {
  size_t per = count / (size_t)n;
  k->send = per, k->recv = per * (size_t)n, k->param = per;
  k->send_ip = per, k->recv_ip = 0;
}

/* Minimum traffic, S = the gathered size: the N inputs of S/N are read once (S) and the root's
   output of S is written once (S): 2S. */
static double ga_min_bytes(double S, int n) {
  (void)n;
  return 2.0 * S;
}

static unsigned ga_touches(int rank, int n, int root) {
  (void)n;
  return rank == root ? 3 : 1; /* every send; the root's recv */
}

static sk_result ga_run(sk_comm *c, const bench_io *io) {
  return sk_gather(c, io->send, io->recv, io->count, io->dt, io->root, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result ga_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_igather(c, io->send, io->recv, io->count, io->dt, io->root, req, NULL);
}

/* only the root receives */
static int64_t ga_check(const bench_io *io) { return io->rank == io->root ? bench_count_wrong_gathered(io) : 0; }

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "Gather", .has_root = true, .in_place = BENCH_IN_PLACE_NCCL,
                                  .bus_factor = ga_factor, .counts = ga_counts, .min_bytes = ga_min_bytes,
                                  .touches = ga_touches, .run = ga_run, .start = ga_start, .fill = bench_fill_gathered, .check = ga_check};
  return bench_main(argc, argv, &coll);
}
