/* broadcast_perf -- Broadcast, nccl-tests style (see bench_common.h and README.md). */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw (nccl-tests; sk_coll_busbw_factor) */
static double bc_factor(int n) { return sk_coll_busbw_factor(SK_COLL_BROADCAST, n); }

/* count = S / es elements on every rank (nccl-tests); in place, send == recv. */
static void bc_counts(size_t count, int n, bench_counts *k) {
  (void)n;
  k->send = k->recv = k->param = count;
  k->send_ip = k->recv_ip = 0;
}

/* Minimum traffic, S = count * es: the root's input (S) is read once and the N outputs
   (NS, the root's own included) are written once: (N+1)S. */
static double bc_min_bytes(double S, int n) { return (n + 1.0) * S; }

static unsigned bc_touches(int rank, int n, int root) {
  (void)n;
  return rank == root ? 3 : 2; /* the root's send, every recv */
}

static sk_result bc_run(sk_comm *c, const bench_io *io) {
  return sk_broadcast(c, io->send, io->recv, io->count, io->dt, io->root, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result bc_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_ibroadcast(c, io->send, io->recv, io->count, io->dt, io->root, req, NULL);
}

static void bc_fill(const bench_io *io) {
  if (!io->in_place) {
    bench_poison(io->recv, io->count * io->es);
    if (io->rank == io->root) bench_fill_values(io->dt, io->send, io->count, io->rank, 0, io->rep);
    else bench_poison(io->send, io->count * io->es);
  } else if (io->rank == io->root) {
    bench_fill_values(io->dt, io->recv, io->count, io->rank, 0, io->rep);
  } else {
    bench_poison(io->recv, io->count * io->es);
  }
}

static int64_t bc_check(const bench_io *io) {
  return bench_count_wrong_values(io->dt, io->recv, io->count, io->root, 0, io->rep);
}

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "Broadcast", .has_root = true, .in_place = BENCH_IN_PLACE_NCCL,
                                  .bus_factor = bc_factor, .counts = bc_counts, .min_bytes = bc_min_bytes,
                                  .touches = bc_touches, .run = bc_run, .start = bc_start, .fill = bc_fill, .check = bc_check};
  return bench_main(argc, argv, &coll);
}
