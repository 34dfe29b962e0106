/* sendrecv_perf -- SendRecv in a ring, nccl-tests style (see bench_common.h and README.md).
   Every rank sends to (r+1)%n and receives from (r-1+n)%n at once (sk_sendrecv). NCCL has no
   in-place send/receive; nccl-tests still prints the in-place columns with #wrong N/A. Here the
   in-place columns time the out-of-place form again (separate buffers) and show N/A likewise. */
#define _GNU_SOURCE
#include "bench_common.h"

/* busbw = algbw (nccl-tests; sk_coll_busbw_factor) */
static double sr_factor(int n) { return sk_coll_busbw_factor(SK_COLL_SEND, n); }

/* count = S / es elements sent and received by every rank (nccl-tests). */
static void sr_counts(size_t count, int n, bench_counts *k) {
  (void)n;
  k->send = k->recv = k->param = count;
  k->send_ip = k->recv_ip = 0;
}

/* Minimum traffic, S = count * es: the N inputs (NS) are read once and the N outputs (NS) are
   written once: 2NS. */
static double sr_min_bytes(double S, int n) { return 2.0 * n * S; }

static unsigned sr_touches(int rank, int n, int root) {
  (void)rank, (void)n, (void)root;
  return 3;
}

static sk_result sr_run(sk_comm *c, const bench_io *io) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  if (n < 1) return SK_ERR_INVALID_ARGUMENT; /* no communicator: the modulo below needs n */
  return sk_sendrecv(c, io->send, io->count, (me + 1) % n, io->recv, io->count, (me - 1 + n) % n, io->dt, NULL);
}

/* -m under -z 0 or 3: the receive and the send posted non-blocking (two requests), as
   nccl-tests groups its ncclRecv and ncclSend; receive first, so a send to oneself finds it. */
static sk_result sr_start(sk_comm *c, const bench_io *io, sk_request **req) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  if (n < 1) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk_irecv(c, io->recv, io->count, io->dt, (me - 1 + n) % n, &req[0], NULL);
  return r == SK_OK ? sk_isend(c, io->send, io->count, io->dt, (me + 1) % n, &req[1], NULL) : r;
}

static void sr_fill(const bench_io *io) {
  bench_fill_values(io->dt, io->send, io->count, io->rank, 0, io->rep);
  bench_poison(io->recv, io->count * io->es);
}

static int64_t sr_check(const bench_io *io) {
  return bench_count_wrong_values(io->dt, io->recv, io->count, (io->rank - 1 + io->n) % io->n, 0, io->rep);
}

int main(int argc, char **argv) {
  /* redop column: nccl-tests prints the op (default sum) and loops over -o all */
  static const bench_coll coll = {.name = "SendRecv", .has_op = true, .loops_ops = true,
                                  .in_place = BENCH_IN_PLACE_RETIMED, .bus_factor = sr_factor, .counts = sr_counts,
                                  .min_bytes = sr_min_bytes, .touches = sr_touches, .run = sr_run, .start = sr_start, .fill = sr_fill,
                                  .check = sr_check};
  return bench_main(argc, argv, &coll);
}
