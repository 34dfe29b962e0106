/* alltoallv_perf -- AllToAllV (sk_alltoallv), nccl-tests style (see bench_common.h and README.md).
   nccl-tests has no AllToAllV; this program keeps its columns and conventions, with AllToAll's
   sizes, so its rows compare with alltoall_perf's at the same size. AllToAllV has no in-place
   form: the in-place columns print N/A (BENCH_IN_PLACE_NONE). */
#define _GNU_SOURCE
#include "bench_common.h"

/* The per-peer counts, MoE-like: tokens routed unevenly to experts under a load-balancing loss,
   so the traffic between two ranks varies (1:3) while every rank sends and receives the same
   total. c is AllToAll's per-peer count. By the distance d = (to - from) mod n, rank `from` sends
   rank `to` floor(c/2) elements for even d and 2c - floor(c/2) for odd d: distances 2k and 2k+1
   carry 2c together; with n odd the last distance, n-1, has no partner and carries c. A rank's
   sends cover every distance once, and so do its receives: n*c elements each way. */
static size_t a2av_count(int from, int to, int n, size_t c) {
  int d = ((to - from) % n + n) % n;
  if (n % 2 == 1 && d == n - 1) return c;
  size_t half = c / 2;
  return d % 2 == 0 ? half : 2 * c - half;
}

static const char a2av_usage_notes[] =
    "AllToAllV per-peer counts (MoE-like: uneven between ranks, the same total on every rank).\n"
    "With n devices, a swept size B gives c = B/es/n rounded down (AllToAll's per-peer count),\n"
    "and rank i sends rank j\n"
    "    floor(c/2)        elements when d = (j - i) mod n is even,\n"
    "    2c - floor(c/2)   elements when d is odd,\n"
    "    c                 elements when n is odd and d = n-1 (the distance without a partner);\n"
    "rank j expects exactly that from rank i. Blocks are packed in rank order. Every rank sends\n"
    "n*c and receives n*c elements. Columns: count = c (the average per-peer count); size = the\n"
    "largest buffer of any rank = n*c*es (as alltoall_perf); algbw = size/time; busbw =\n"
    "algbw*(n-1)/n (as AllToAll). No in-place form: the in-place columns print N/A.\n";

/* busbw = algbw * (n-1)/n, as AllToAll (sk_coll_busbw_factor) */
static double a2av_factor(int n) { return sk_coll_busbw_factor(SK_COLL_ALLTOALLV, n); }

/* As AllToAll: c = B/es/n for a swept size B; both buffers n*c elements (every rank's totals, a2av_count). */
static void a2av_counts(size_t count, int n, bench_counts *k) {
  size_t per = count / (size_t)n;
  k->send = k->recv = per * (size_t)n, k->param = per;
  k->send_ip = k->recv_ip = 0;
}

/* Both sides from the one formula: recv_counts[i] on rank j == send_counts[j] on rank i. */
static void a2av_peer_counts(int rank, int n, size_t c, size_t *send_counts, size_t *recv_counts) {
  for (int j = 0; j < n; j++) {
    send_counts[j] = a2av_count(rank, j, n, c);
    recv_counts[j] = a2av_count(j, rank, n, c);
  }
}

/* Minimum traffic as AllToAll, S = one rank's buffer (n * c * es; every rank's send and receive
   buffers hold n*c elements): the N inputs (NS) are read once and the N outputs (NS) are written
   once: 2NS. */
static double a2av_min_bytes(double S, int n) { return 2.0 * n * S; }

static unsigned a2av_touches(int rank, int n, int root) {
  (void)rank, (void)n, (void)root;
  return 3;
}

/* Explicit (packed) displacements, as an MPI_Alltoallv caller passes them. */
static sk_result a2av_run(sk_comm *c, const bench_io *io) {
  return sk_alltoallv(c, io->send, io->send_counts, io->send_displs, io->recv, io->recv_counts, io->recv_displs,
                      io->dt, NULL);
}

/* -m under -z 0 or 3: the same call, non-blocking. */
static sk_result a2av_start(sk_comm *c, const bench_io *io, sk_request **req) {
  return sk_ialltoallv(c, io->send, io->send_counts, io->send_displs, io->recv, io->recv_counts,
                       io->recv_displs, io->dt, req, NULL);
}

/* Rank j's send element k is value(j, k); its block for rank r starts at a2av_send_displ(j, r). */
static void a2av_fill(const bench_io *io) {
  size_t total = io->count * (size_t)io->n;
  bench_fill_values(io->dt, io->send, total, io->rank, 0, io->rep);
  bench_poison(io->recv, total * io->es);
}

/* Where rank `from`'s block for rank `to` starts in its (packed) send buffer. */
static size_t a2av_send_displ(int from, int to, int n, size_t c) {
  size_t displ = 0;
  for (int p = 0; p < to; p++) displ += a2av_count(from, p, n, c);
  return displ;
}

/* Block j of rank r's output = rank j's send elements from a2av_send_displ(j, r) on. */
static int64_t a2av_check(const bench_io *io) {
  int64_t bad = 0;
  for (int j = 0; j < io->n; j++)
    bad += bench_count_wrong_values(io->dt, (unsigned char *)io->recv + io->recv_displs[j] * io->es,
                                    io->recv_counts[j], j, a2av_send_displ(j, io->rank, io->n, io->count), io->rep);
  return bad;
}

int main(int argc, char **argv) {
  static const bench_coll coll = {.name = "AllToAllV", .in_place = BENCH_IN_PLACE_NONE,
                                  .usage_notes = a2av_usage_notes, .bus_factor = a2av_factor,
                                  .counts = a2av_counts, .peer_counts = a2av_peer_counts,
                                  .min_bytes = a2av_min_bytes, .touches = a2av_touches, .run = a2av_run, .start = a2av_start,
                                  .fill = a2av_fill, .check = a2av_check};
  return bench_main(argc, argv, &coll);
}
