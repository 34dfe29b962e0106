/* all_gather_perf -- AllGather, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw * (n-1)/n (nccl-tests; sk_coll_busbw_factor) */
static double ag_factor(int n) { return sk_coll_busbw_factor(SK_COLL_ALLGATHER, n); }

/* nccl-tests: the swept size is the gathered (receive) buffer; each rank contributes
   count/n elements (the count column and the call's count); in place, send = recv + rank*count. */
static void ag_counts(size_t count, int n, bench_counts *k) {
  size_t per = count / (size_t)n;
  k->send = per, k->recv = per * (size_t)n, k->param = per;
  k->send_ip = per, k->recv_ip = 0;
}

/* Minimum traffic, S = the gathered size (n * count * es): the N inputs of S/N are read once
   (S in total) and the N outputs of S are written once (NS): (N+1)S. */
static double ag_min_bytes(double S, int n) { return (n + 1.0) * S; }

static unsigned ag_touches(int rank, int n, int root) {
  (void)rank, (void)n, (void)root;
  return 3;
}

static sk_result ag_run(sk_comm *c, const bench_io *io) {
  return sk_allgather(c, io->send, io->recv, io->count, io->dt, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result ag_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_iallgather(c, io->send, io->recv, io->count, io->dt, req, NULL);
}

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "AllGather", .in_place = BENCH_IN_PLACE_NCCL, .bus_factor = ag_factor,
                                  .counts = ag_counts, .min_bytes = ag_min_bytes, .touches = ag_touches,
                                  .run = ag_run, .start = ag_start, .fill = bench_fill_gathered, .check = bench_count_wrong_gathered};
  return bench_main(argc, argv, &coll);
}
