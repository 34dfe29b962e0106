/* alltoallv.h -- AllToAllV on the MPI backend (included once by mpi_driver.c; entry:
   alltoallv_suite).

   Every check is against values the receiver computes itself: byte b of element e of the block
   comm rank i sends to comm rank j is av_byte(seed, i, j, e, b), a pure function, so no rank
   reads another's inputs and no backend serves as the reference for data. The receiver builds
   the image its whole recv buffer must have (those blocks where its displacements say, the
   junk byte in every gap and in the guard past the end) and compares it byte for byte; the
   send buffer must come back unchanged.

   Worlds (created here; the driver's own worlds keep MPI initialised meanwhile):
     plain   check_mismatch off, max_count default (one round)
     chunk   check_mismatch off, max_count 5: blocks of up to 28 elements take up to 6 rounds
     check   check_mismatch on, max_count 5 (the rounds then come from the counts verdict)
   each runs the grid (dtypes x layouts x count patterns x blocking / non-blocking / two
   outstanding with an AllReduce between) on the world and on a split, blocks beyond element
   INT_MAX, and: on plain, block starts too far apart (SK_ERR_UNSUPPORTED before anything
   moves, on every rank); on check, mismatched counts and AllToAllV against AllGather
   (SK_ERR_MISMATCH on every rank, the message equal to the threads backend's, which runs the
   same calls in this process first). Then a world whose allocator fails each allocation of a
   call in turn (SK_ERR_OUT_OF_MEMORY, nothing leaked), and last, since they may fail their
   worlds, mismatched counts with the check off, in one round and over several (bounded;
   truncation is SK_ERR_MISMATCH on the receiver alone, which still joins the later rounds).
   Seeds come from one counter every rank advances alike (a case's counts depend on its seed).
   Rank 0 prints "suite alltoallv np=N: X cases, Y failures" (failures summed over ranks); each
   failure is printed by the rank that saw it. */
#ifndef MPI_DRIVER_ALLTOALLV_H
#define MPI_DRIVER_ALLTOALLV_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_mpi.h"

#define AV_JUNK 0xA5
#define AV_GUARD 4          /* elements past each buffer's extent that must stay junk */
#define AV_TIMEOUT_MS 60000u
#define AV_HANG_TIMEOUT_MS 5000u /* the check-off world whose last call waits for nothing */
#define AV_SLACK_S 3.0      /* the grace period (at most 2 s) plus scheduling noise */

typedef struct av_ctx {
  int np, rank;
  int cfg; /* AV_W_* of the world running */
  long cases, fails;
  uint64_t seed;
  size_t loose_max_count; /* the check-off world's max_count and timeout (av_run_loose) */
  uint32_t loose_timeout_ms;
  char (*tmsg)[SK_ERROR_MSG_MAX]; /* threads backend's messages: [variant * np + rank] */
  sk_result *trc;
} av_ctx;

/* The worlds of the grid, then the two that run alone (labels of failure lines). */
enum { AV_W_PLAIN, AV_W_CHUNK, AV_W_CHECK, AV_NWORLD, AV_W_OOM = AV_NWORLD, AV_W_LOOSE };
static const char *const av_world_names[AV_W_LOOSE + 1] = {"plain", "chunk", "check", "allocation-failure",
                                                           "check-off"};

/* One fprintf per failure: ranks share stderr, and pieces written apart interleave. */
#define AV_CHECK(x, cond, ...)                                                                          \
  do {                                                                                                  \
    if (!(cond)) {                                                                                      \
      char av_why_[768];                                                                                \
      (x)->fails++;                                                                                     \
      snprintf(av_why_, sizeof av_why_, __VA_ARGS__);                                                   \
      fprintf(stderr, "FAIL suite alltoallv np=%d rank %d (%s world, line %d): %s\n", (x)->np, (x)->rank, \
              av_world_names[(x)->cfg], __LINE__, av_why_);                                             \
    }                                                                                                   \
  } while (0)

/* ---- cases ------------------------------------------------------------------------------------ */

enum { AV_PACKED, AV_STRIDED, AV_REVERSED, AV_NLAYOUT };      /* REVERSED: block n-1 first, gaps */
enum { AV_SKEW1, AV_SKEW7, AV_ONE_SENDER, AV_ZERO, AV_NPATTERN };
enum { AV_BLOCKING, AV_NB, AV_NB_PAIR, AV_NMODE };
static const char *const av_layout_names[AV_NLAYOUT] = {"packed", "strided", "reversed"};
static const char *const av_pattern_names[AV_NPATTERN] = {"skew1", "skew7", "one-sender", "zero"};
static const char *const av_mode_names[AV_NMODE] = {"blocking", "nb", "nb-pair"};

typedef struct av_case {
  sk_dtype dt;
  int layout, pattern, mode;
  uint64_t seed;
} av_case;

static unsigned char av_byte(uint64_t seed, int i, int j, size_t e, size_t b) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + ((uint64_t)i << 40) + ((uint64_t)j << 24) +
               (uint64_t)e * 0xBF58476D1CE4E5B9ull + (uint64_t)b * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 29;
  return (unsigned char)x;
}

/* Elements comm rank i sends to comm rank j: SKEW has empty and unequal blocks (SKEW7 up to 28,
   past max_count 5); ONE_SENDER: a single member sends 13 to everyone, so the others, with
   nothing of their own, must still join every round. */
static size_t av_count(int pattern, int i, int j, int n, uint64_t seed) {
  size_t skew = (size_t)((i + 2 * j + (int)(seed % 5)) % 5);
  switch (pattern) {
    case AV_SKEW1: return skew;
    case AV_SKEW7: return skew * 7;
    case AV_ONE_SENDER: return i == (int)(seed % (uint64_t)n) ? 13 : 0;
    default: return 0;
  }
}

/* One side of member me: counts and where each block starts (packed positions too, for the
   checks); returns the elements the layout spans. */
static size_t av_side(const av_case *t, int n, int me, bool send, size_t *counts, size_t *displs) {
  size_t at = t->layout == AV_REVERSED ? 1 : 0, gap = t->layout == AV_PACKED ? 0 : t->layout == AV_STRIDED ? 3 : 2;
  for (int j = 0; j < n; j++)
    counts[j] = send ? av_count(t->pattern, me, j, n, t->seed) : av_count(t->pattern, j, me, n, t->seed);
  for (int k = 0; k < n; k++) {
    int j = t->layout == AV_REVERSED ? n - 1 - k : k;
    displs[j] = at;
    at += counts[j] + gap;
  }
  return at;
}

/* One member's buffers of a case: inputs written, recv all junk, and the images both must
   have afterwards. */
typedef struct av_bufs {
  size_t *sc, *sd, *rc, *rd; /* 4 x n, one allocation */
  unsigned char *send, *recv, *want, *sent; /* sent: the send buffer as given */
  size_t sbytes, rbytes;
} av_bufs;

static void av_bufs_free(av_bufs *b) {
  free(b->sc), free(b->send), free(b->recv), free(b->want), free(b->sent);
  memset(b, 0, sizeof *b);
}

static bool av_bufs_make(const av_case *t, sk_comm *c, av_bufs *b) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  size_t es = sk_dtype_size(t->dt);
  memset(b, 0, sizeof *b);
  b->sc = (size_t *)malloc(4 * sizeof(size_t) * (size_t)n);
  if (!b->sc) return false;
  b->sd = b->sc + n, b->rc = b->sd + n, b->rd = b->rc + n;
  b->sbytes = (av_side(t, n, me, true, b->sc, b->sd) + AV_GUARD) * es;
  b->rbytes = (av_side(t, n, me, false, b->rc, b->rd) + AV_GUARD) * es;
  b->send = (unsigned char *)malloc(b->sbytes), b->sent = (unsigned char *)malloc(b->sbytes);
  b->recv = (unsigned char *)malloc(b->rbytes), b->want = (unsigned char *)malloc(b->rbytes);
  if (!b->send || !b->sent || !b->recv || !b->want) {
    av_bufs_free(b);
    return false;
  }
  memset(b->send, AV_JUNK ^ 0xFF, b->sbytes);
  memset(b->recv, AV_JUNK, b->rbytes);
  memset(b->want, AV_JUNK, b->rbytes);
  for (int j = 0; j < n; j++)
    for (size_t e = 0; e < b->sc[j] * es; e++) b->send[b->sd[j] * es + e] = av_byte(t->seed, me, j, e / es, e % es);
  for (int i = 0; i < n; i++)
    for (size_t e = 0; e < b->rc[i] * es; e++) b->want[b->rd[i] * es + e] = av_byte(t->seed, i, me, e / es, e % es);
  memcpy(b->sent, b->send, b->sbytes);
  return true;
}

static void av_case_str(char *buf, size_t cap, const av_case *t, const char *group) {
  snprintf(buf, cap, "%s dt=%s %s %s %s seed=%llu", group, sk_dtype_name(t->dt), av_layout_names[t->layout],
           av_pattern_names[t->pattern], av_mode_names[t->mode], (unsigned long long)t->seed);
}

/* The received bytes against the image; the first wrong byte is named by its block. */
static void av_verify(av_ctx *x, sk_comm *c, const av_case *t, const av_bufs *b, const char *what) {
  size_t es = sk_dtype_size(t->dt), at = 0;
  int n = sk_comm_size(c);
  while (at < b->rbytes && b->recv[at] == b->want[at]) at++;
  if (at < b->rbytes) {
    char where[48] = "a gap or the guard";
    for (int i = 0; i < n; i++)
      if (at >= b->rd[i] * es && at < (b->rd[i] + b->rc[i]) * es)
        snprintf(where, sizeof where, "the block from rank %d", i);
    AV_CHECK(x, false, "%s: recv byte %zu (element %zu, in %s) is 0x%02x, want 0x%02x", what, at, at / es, where,
             b->recv[at], b->want[at]);
  }
  AV_CHECK(x, !memcmp(b->send, b->sent, b->sbytes), "%s: the send buffer changed", what);
}

static const size_t *av_displs(const av_case *t, const size_t *d) { return t->layout == AV_PACKED ? NULL : d; }

static sk_result av_issue(sk_comm *c, const av_case *t, av_bufs *b, sk_request **q) {
  return sk_ialltoallv(c, b->send, b->sc, av_displs(t, b->sd), b->recv, b->rc, av_displs(t, b->rd), t->dt, q, NULL);
}

/* Polls a while (sk_test drives MPI), then waits. */
static sk_result av_finish(sk_request **q) {
  bool done = false;
  for (int i = 0; i < 20 && !done; i++) {
    sk_result r = sk_test(q, &done, NULL);
    if (r != SK_OK) return r;
  }
  return done ? SK_OK : sk_wait(q, NULL);
}

/* Runs one case on c and checks it. NB_PAIR: two AllToAllV outstanding with an AllReduce
   issued between them, completed together (issue order on the queue). */
static void av_run_case(av_ctx *x, sk_comm *c, const av_case *t, const char *group) {
  char what[160];
  av_case_str(what, sizeof what, t, group);
  av_case t2 = *t;
  t2.seed += 7777;
  av_bufs a, b;
  bool pair = t->mode == AV_NB_PAIR;
  x->cases++;
  if (!av_bufs_make(t, c, &a) || (pair && !av_bufs_make(&t2, c, &b))) {
    AV_CHECK(x, false, "%s: out of memory", what);
    av_bufs_free(&a);
    return;
  }
  sk_result r;
  int64_t one = 1, all = 0;
  if (t->mode == AV_BLOCKING) {
    r = sk_alltoallv(c, a.send, a.sc, av_displs(t, a.sd), a.recv, a.rc, av_displs(t, a.rd), t->dt, NULL);
  } else if (!pair) {
    sk_request *q = NULL;
    r = av_issue(c, t, &a, &q);
    if (r == SK_OK) r = av_finish(&q);
  } else {
    sk_request *q[3] = {NULL, NULL, NULL};
    r = av_issue(c, t, &a, &q[0]);
    if (r == SK_OK) r = sk_iallreduce(c, &one, &all, 1, SK_I64, SK_SUM, &q[1], NULL);
    if (r == SK_OK) r = av_issue(c, &t2, &b, &q[2]);
    sk_result r2 = sk_waitall(3, q, NULL);
    if (r == SK_OK) r = r2;
  }
  AV_CHECK(x, r == SK_OK, "%s: %s: %s", what, sk_result_name(r), sk_comm_error_message(c));
  if (r == SK_OK) {
    av_verify(x, c, t, &a, what);
    if (pair) av_verify(x, c, &t2, &b, what);
    AV_CHECK(x, !pair || all == sk_comm_size(c), "%s: the AllReduce between gave %lld", what, (long long)all);
  }
  av_bufs_free(&a);
  if (pair) av_bufs_free(&b);
}

/* dtypes x layouts x patterns x modes (the split takes every other dtype). */
static void av_grid(av_ctx *x, sk_comm *c, const char *group, int dt_step) {
  static const sk_dtype dts[] = {SK_F32, SK_F64, SK_BF16, SK_I8, SK_I64};
  for (int d = 0; d < 5; d += dt_step)
    for (int l = 0; l < AV_NLAYOUT; l++)
      for (int p = 0; p < AV_NPATTERN; p++)
        for (int m = 0; m < AV_NMODE; m++) {
          av_case t = {dts[d], l, p, m, ++x->seed};
          av_run_case(x, c, &t, group);
        }
}

/* ---- blocks beyond element INT_MAX, and blocks too far apart --------------------------------- */

/* One side's blocks all start past element INT_MAX (2 i8 each, 3 apart; the other side packed):
   MPI gets displacements relative to the lowest, so this works. The far buffer is 2 GiB of
   address space; only the pages of the blocks are touched. */
static void av_far(av_ctx *x, sk_comm *c, bool far_send) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  size_t base = (size_t)INT_MAX + 11, far_bytes = base + 3 * (size_t)n, near_bytes = 2 * (size_t)n;
  size_t counts[64], far_d[64];
  if (n > 64) return;
  for (int j = 0; j < n; j++) counts[j] = 2, far_d[j] = base + 3 * (size_t)j;
  unsigned char *far = (unsigned char *)malloc(far_bytes), *near = (unsigned char *)malloc(near_bytes);
  int32_t have = far && near, everyone = 0; /* all or none call: a lone caller would wait */
  sk_result r = sk_allreduce(c, &have, &everyone, 1, SK_I32, SK_MIN, NULL);
  x->cases++;
  if (r != SK_OK || !everyone) {
    fprintf(stderr, "note: suite alltoallv rank %d: %s; the far-blocks case is skipped\n", x->rank,
            r != SK_OK ? sk_comm_error_message(c) : "a rank has no 2 GiB of address space");
    free(far), free(near);
    return;
  }
  unsigned char *send = far_send ? far : near, *recv = far_send ? near : far;
  const size_t *sd = far_send ? far_d : NULL, *rd = far_send ? NULL : far_d;
  for (int j = 0; j < n; j++)
    for (size_t e = 0; e < 2; e++) {
      send[(far_send ? far_d[j] : 2 * (size_t)j) + e] = av_byte(99, me, j, e, 0);
      recv[(far_send ? 2 * (size_t)j : far_d[j]) + e] = AV_JUNK;
    }
  r = sk_alltoallv(c, send, counts, sd, recv, counts, rd, SK_I8, NULL);
  AV_CHECK(x, r == SK_OK, "far %s blocks: %s: %s", far_send ? "send" : "recv", sk_result_name(r),
           sk_comm_error_message(c));
  for (int i = 0; r == SK_OK && i < n; i++)
    for (size_t e = 0; e < 2; e++) {
      unsigned char got = recv[(far_send ? 2 * (size_t)i : far_d[i]) + e];
      AV_CHECK(x, got == av_byte(99, i, me, e, 0), "far %s blocks: element %zu from rank %d is 0x%02x",
               far_send ? "send" : "recv", e, i, got);
    }
  free(far), free(near);
}

/* Every rank puts one block of one side INT_MAX + 10 elements after block 0: each returns
   SK_ERR_UNSUPPORTED naming it, before anything is posted (so the world goes on). The buffers
   are never touched: recv lies below send (or the other way round), so they do not overlap. */
static void av_too_far(av_ctx *x, sk_comm *c, bool send_side) {
  int n = sk_comm_size(c);
  size_t counts[64], d[64];
  if (n < 2 || n > 64) return;
  static float pool[1024];
  for (int j = 0; j < n; j++) counts[j] = 1, d[j] = (size_t)j;
  int blk = send_side ? 1 : n - 1;
  d[blk] = (size_t)INT_MAX + 10;
  float *lo = pool, *hi = pool + 512;
  x->cases++;
  sk_result r = send_side ? sk_alltoallv(c, hi, counts, d, lo, counts, NULL, SK_F32, NULL)
                          : sk_alltoallv(c, lo, counts, NULL, hi, counts, d, SK_F32, NULL);
  char want[96];
  const char *side = send_side ? "send" : "recv";
  snprintf(want, sizeof want, "alltoallv: %s block %d starts at element %zu, %zu after %s block 0", side, blk, d[blk],
           d[blk], side);
  const char *m = sk_comm_error_message(c);
  AV_CHECK(x, r == SK_ERR_UNSUPPORTED && strstr(m, want) && strstr(m, "INT_MAX"), "%s blocks too far apart: %s: %s",
           send_side ? "send" : "recv", sk_result_name(r), m);
}

/* ---- mismatched calls, check on: every rank fails alike, as under the threads backend -------- */

enum { AV_MM_RECV_MORE, AV_MM_TWO_BAD, AV_MM_VS_ALLGATHER, AV_MM_ALLGATHER_VS, AV_NMM };

static int av_mm_min_size(int v) { return v == AV_MM_TWO_BAD ? 3 : 2; }

/* Variant v on c. RECV_MORE: rank 1 expects 3 from rank 0, which sends 2. TWO_BAD: rank 1
   sends 6 to rank n-1 (which expects 2) and rank 0 expects 4 from rank 2: the lowest pair,
   (1, n-1), is named. VS_ALLGATHER: rank 0 calls AllToAllV, the others AllGather(3, i64);
   ALLGATHER_VS: rank n-1 calls AllToAllV, the others AllGather. */
static sk_result av_mm_call(sk_comm *c, int v) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  size_t sc[64], rc[64];
  int64_t send[64 * 6], recv[64 * 6];
  if (n > 64) return SK_ERR_INVALID_ARGUMENT; /* the arrays above */
  memset(send, 0, sizeof send);
  for (int j = 0; j < n; j++) sc[j] = rc[j] = 2;
  if (v == AV_MM_RECV_MORE && me == 1) rc[0] = 3;
  if (v == AV_MM_TWO_BAD && me == 1) sc[n - 1] = 6;
  if (v == AV_MM_TWO_BAD && me == 0) rc[2] = 4;
  bool vec = v < AV_MM_VS_ALLGATHER || (v == AV_MM_VS_ALLGATHER && me == 0) || (v == AV_MM_ALLGATHER_VS && me == n - 1);
  return vec ? sk_alltoallv(c, send, sc, NULL, recv, rc, NULL, SK_I64, NULL) : sk_allgather(c, send, recv, 3, SK_I64, NULL);
}

/* What every rank must see for variant v on a communicator of n (world ranks a, b: the suffix
   a sub-communicator adds; -1: none). */
static void av_mm_want(char *buf, size_t cap, int v, int n, int a, int b) {
  char world[48] = "";
  const char *vec = "alltoallv(count 0, i64, sum, root 0)", *gather = "allgather(count 3, i64, sum, root 0)";
  if (a >= 0) snprintf(world, sizeof world, " (world ranks %d and %d)", a, b);
  if (v == AV_MM_RECV_MORE)
    snprintf(buf, cap, "mismatch: alltoallv: rank 0 sends 2 elements to rank 1, which expects 3 from it%s", world);
  else if (v == AV_MM_TWO_BAD)
    snprintf(buf, cap, "mismatch: alltoallv: rank 1 sends 6 elements to rank %d, which expects 2 from it%s", n - 1,
             world);
  else if (v == AV_MM_VS_ALLGATHER)
    snprintf(buf, cap, "mismatch: rank 0 called %s but rank 1 called %s", vec, gather);
  else
    snprintf(buf, cap, "mismatch: rank 0 called %s but rank %d called %s", gather, n - 1, vec);
}

/* A correct AllToAllV right after a mismatch: the communicator goes on. */
static void av_after(av_ctx *x, sk_comm *c, const char *group, uint64_t seed) {
  av_case t = {SK_I32, AV_STRIDED, AV_SKEW7, AV_BLOCKING, seed};
  av_run_case(x, c, &t, group);
}

/* Threads device: every variant, each rank's result and message kept for the MPI run. */
static sk_result av_mm_threads_device(sk_comm *c, void *arg) {
  av_ctx *x = (av_ctx *)arg;
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  for (int v = 0; v < AV_NMM; v++) {
    if (n < av_mm_min_size(v)) continue;
    x->trc[v * n + me] = av_mm_call(c, v);
    snprintf(x->tmsg[v * n + me], SK_ERROR_MSG_MAX, "%s", sk_comm_error_message(c));
  }
  return SK_OK;
}

static void av_mismatch(av_ctx *x, sk_comm *c) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  for (int v = 0; v < AV_NMM; v++) {
    if (n < av_mm_min_size(v)) continue;
    char want[SK_ERROR_MSG_MAX];
    av_mm_want(want, sizeof want, v, n, -1, -1);
    x->cases++;
    sk_result r = av_mm_call(c, v);
    const char *m = sk_comm_error_message(c);
    AV_CHECK(x, r == SK_ERR_MISMATCH && !strcmp(m, want), "mismatch variant %d: %s: '%s', want '%s'", v,
             sk_result_name(r), m, want);
    AV_CHECK(x, x->trc[v * n + me] == r && !strcmp(x->tmsg[v * n + me], m),
             "mismatch variant %d: threads backend says %s '%s', MPI %s '%s'", v, sk_result_name(x->trc[v * n + me]),
             x->tmsg[v * n + me], sk_result_name(r), m);
    av_after(x, c, "world after a mismatch", ++x->seed);
  }
}

/* On the split (parity, reversed keys): sub rank k is the k-th world rank of this parity from
   the top, which the message adds. */
static void av_mismatch_split(av_ctx *x, sk_comm *sub) {
  int n = sk_comm_size(sub), top = x->np - 1 - ((x->np - 1 - x->rank) % 2);
  uint64_t seed = ++x->seed; /* on every rank, member or not: seeds must agree job-wide */
  if (n < 2) return;
  char want[SK_ERROR_MSG_MAX];
  av_mm_want(want, sizeof want, AV_MM_RECV_MORE, n, top, top - 2);
  x->cases++;
  sk_result r = av_mm_call(sub, AV_MM_RECV_MORE);
  const char *m = sk_comm_error_message(sub);
  AV_CHECK(x, r == SK_ERR_MISMATCH && !strcmp(m, want), "split mismatch: %s: '%s', want '%s'", sk_result_name(r), m,
           want);
  av_after(x, sub, "split after a mismatch", seed);
}

/* ---- the worlds --------------------------------------------------------------------------------- */

static sk_result av_device(sk_comm *c, void *arg) {
  av_ctx *x = (av_ctx *)arg;
  av_grid(x, c, "world", 1);
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split(c, x->rank % 2, -x->rank, &sub, NULL);
  AV_CHECK(x, r == SK_OK && sub, "split: %s: %s", sk_result_name(r), sk_comm_error_message(c));
  if (sub) {
    av_grid(x, sub, "split", 2);
    if (x->cfg == AV_W_CHECK) av_mismatch_split(x, sub);
    sk_comm_destroy(sub, NULL);
  }
  av_far(x, c, true);
  av_far(x, c, false);
  if (x->cfg == AV_W_PLAIN) av_too_far(x, c, true), av_too_far(x, c, false);
  if (x->cfg == AV_W_CHECK) av_mismatch(x, c);
  return SK_OK;
}

static sk_world *av_world(bool check, size_t max_count, uint32_t timeout, const sk_allocator *alloc) {
  static sk_mpi_config cfgs[8];
  static int used;
  sk_mpi_config *cfg = &cfgs[used++ % 8]; /* read at create only */
  memset(cfg, 0, sizeof *cfg);
  cfg->check_mismatch = check, cfg->max_count = max_count;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.backend = sk_mpi_backend(), d.backend_config = cfg, d.timeout_ms = timeout;
  if (alloc) d.allocator = *alloc;
  sk_world *w = NULL;
  sk_error err;
  if (sk_world_create(&d, &w, &err) != SK_OK) {
    fprintf(stderr, "suite alltoallv: cannot create an MPI world: %s\n", err.msg); /* the caller counts it */
    return NULL;
  }
  return w;
}

/* The threads backend's verdicts on the mismatch variants, np devices in this process. */
static bool av_threads_reference(av_ctx *x) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = x->np, d.timeout_ms = AV_TIMEOUT_MS, d.backend = sk_threads_backend();
  sk_world *tw = NULL;
  sk_error err;
  if (sk_world_create(&d, &tw, &err) != SK_OK) {
    fprintf(stderr, "FAIL suite alltoallv rank %d: threads world: %s\n", x->rank, err.msg);
    return false;
  }
  sk_result r = sk_world_run(tw, av_mm_threads_device, x, NULL);
  sk_world_destroy(tw, NULL);
  return r == SK_OK;
}

/* ---- allocation failure: each allocation of one call fails in turn ---------------------------- */

typedef struct av_counting {
  long live, made, fail_at;
} av_counting;

static void *av_alloc(void *user, size_t size, size_t align) {
  av_counting *k = (av_counting *)user;
  if (k->made++ == k->fail_at) return NULL;
  void *p = aligned_alloc(align, (size + align - 1) / align * align);
  if (p) k->live++;
  return p;
}
static void av_free(void *user, void *p) {
  if (p) ((av_counting *)user)->live--;
  free(p);
}

typedef struct av_oom {
  av_ctx *x;
  av_counting *k;
} av_oom;

/* The same allocations fail on every rank (the code path is the same), before anything is
   posted: every rank returns SK_ERR_OUT_OF_MEMORY and the world goes on. */
static sk_result av_oom_device(sk_comm *c, void *arg) {
  av_oom *o = (av_oom *)arg;
  av_ctx *x = o->x;
  for (int mode = AV_BLOCKING; mode <= AV_NB; mode++)
    for (long at = 0; at < 32; at++) {
      av_case t = {SK_F32, AV_STRIDED, AV_SKEW7, mode, ++x->seed};
      av_bufs b;
      if (!av_bufs_make(&t, c, &b)) return SK_ERR_OUT_OF_MEMORY;
      long live = o->k->live;
      o->k->fail_at = o->k->made + at;
      sk_request *q = NULL;
      sk_result r = mode == AV_NB ? av_issue(c, &t, &b, &q)
                                  : sk_alltoallv(c, b.send, b.sc, b.sd, b.recv, b.rc, b.rd, t.dt, NULL);
      if (r == SK_OK && q) r = sk_wait(&q, NULL);
      bool failed = o->k->made > o->k->fail_at;
      o->k->fail_at = -1;
      x->cases++;
      AV_CHECK(x, failed ? r == SK_ERR_OUT_OF_MEMORY : r == SK_OK, "oom %s, allocation %ld of the call: %s: %s",
               av_mode_names[mode], at, sk_result_name(r), sk_comm_error_message(c));
      AV_CHECK(x, o->k->live == live, "oom %s, allocation %ld: %ld allocations left", av_mode_names[mode], at,
               o->k->live - live);
      if (r == SK_OK) av_verify(x, c, &t, &b, "oom sweep, no failure");
      av_bufs_free(&b);
      if (failed) continue;
      /* every allocation of the call has failed once: the request and its counts at least */
      AV_CHECK(x, at >= 2, "oom %s: the call made %ld allocations through the world's allocator", av_mode_names[mode],
               at);
      break;
    }
  return SK_OK;
}

static void av_run_oom(av_ctx *x) {
  static av_counting k = {0, 0, -1};
  x->cfg = AV_W_OOM;
  sk_allocator a = {av_alloc, av_free, &k};
  sk_world *w = av_world(true, 5, 10000, &a);
  AV_CHECK(x, w, "the allocation-failure world");
  if (!w) return;
  av_oom o = {x, &k};
  sk_result r = sk_world_run(w, av_oom_device, &o, NULL);
  AV_CHECK(x, r == SK_OK, "allocation-failure run: %s: %s", sk_result_name(r), sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  AV_CHECK(x, k.live == 0, "%ld allocations of the allocation-failure world left after destroy", k.live);
}

/* ---- mismatched counts, check off: bounded; truncation named on the receiver ------------------ */

static double av_secs_since(uint64_t t0) { return (double)(sk_now_ns() - t0) * 1e-9; }

/* Every rank sends `per` i32 to each; rank 1 expects `want` from rank 0. Returns false when
   the world failed (the calls after it would only report that). */
static bool av_loose_call(av_ctx *x, sk_comm *c, size_t per, size_t want, bool strict) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  size_t sc[64], rc[64], at = 0;
  int32_t send[64 * 5], recv[64 * 5 + 8];
  for (int j = 0; j < n; j++) {
    sc[j] = rc[j] = per;
    for (size_t e = 0; e < per; e++) send[per * (size_t)j + e] = 10000 * me + 100 * j + (int)e;
  }
  if (me == 1) rc[0] = want;
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_alltoallv(c, send, sc, NULL, recv, rc, NULL, SK_I32, NULL);
  double s = av_secs_since(t0);
  const char *m = sk_comm_error_message(c);
  bool truncated = want < per && me == 1, ok = r == SK_OK || r == SK_ERR_MISMATCH;
  char what[96];
  snprintf(what, sizeof what, "max_count %zu, rank 1 expects %zu of %zu from rank 0", x->loose_max_count, want, per);
  x->cases++;
  if (strict)
    AV_CHECK(x, truncated ? r == SK_ERR_MISMATCH && strstr(m, "MPI_Ialltoallv") && strstr(m, "truncat") : r == SK_OK,
             "%s: %s: %s", what, sk_result_name(r), m);
  else
    AV_CHECK(x, ok || r == SK_ERR_TIMEOUT || r == SK_ERR_ABORTED, "%s: %s: %s", what, sk_result_name(r), m);
  AV_CHECK(x, s < x->loose_timeout_ms * 1e-3 + AV_SLACK_S, "%s: took %.2f s", what, s);
  for (int i = 0; i < n && strict && ok; at += rc[i], i++)
    for (size_t e = 0; e < per && !(me == 1 && i == 0); e++)
      AV_CHECK(x, recv[at + e] == 10000 * i + 100 * me + (int)e, "%s: element %zu from rank %d is %d", what, e, i,
               (int)recv[at + e]);
  return ok;
}

/* One round (max_count default): rank 1 expecting fewer gets MPI's truncation, SK_ERR_MISMATCH
   naming MPI_Ialltoallv, alone; expecting more, SK_OK (undefined in MPI; Open MPI leaves the
   tail unwritten). Every other block arrives. max_count 2, 5 each: rank 1's truncation is in
   round 0 of 3, and it still joins rounds 1 and 2, so nobody waits for it; expecting 7 it waits
   in round 3 for a message rank 0 never sends: bounded by the timeout (the world fails). Open
   MPI's libnbc prints "MPI Error in NBC subrequest" for the truncations: expected. */
static sk_result av_loose_device(sk_comm *c, void *arg) {
  av_ctx *x = (av_ctx *)arg;
  if (sk_comm_size(c) > 64) return SK_OK; /* the arrays of av_loose_call */
  bool one_round = x->loose_max_count == 0;
  size_t per = one_round ? 3 : 5;
  if (av_loose_call(x, c, per, 1, true)) av_loose_call(x, c, per, one_round ? 5 : 7, one_round);
  return SK_OK;
}

/* One world per max_count, so a failure ends only its own. The one-round world has the long
   timeout (nothing in it should wait); the rounds world a short one, since its last call waits
   for it by design, and long enough that its strict first call does not time out on a loaded
   machine. */
static void av_run_loose(av_ctx *x) {
  static const size_t max_counts[2] = {0, 2};
  static const uint32_t timeouts[2] = {AV_TIMEOUT_MS, AV_HANG_TIMEOUT_MS};
  x->cfg = AV_W_LOOSE;
  for (int k = 0; k < 2 && x->np >= 2; k++) {
    sk_world *w = av_world(false, max_counts[k], timeouts[k], NULL);
    AV_CHECK(x, w, "the check-off world");
    if (!w) return;
    x->loose_max_count = max_counts[k], x->loose_timeout_ms = timeouts[k];
    sk_world_run(w, av_loose_device, x, NULL);
    uint64_t t0 = sk_now_ns();
    sk_world_destroy(w, NULL);
    double s = av_secs_since(t0);
    AV_CHECK(x, s < timeouts[k] * 1e-3 + AV_SLACK_S, "destroying the check-off world took %.2f s", s);
  }
}

/* ---- entry ---------------------------------------------------------------------------------------- */

static sk_result av_tally_device(sk_comm *c, void *arg) {
  av_ctx *x = (av_ctx *)arg;
  int64_t mine = x->fails, all = 0;
  sk_result r = sk_allreduce(c, &mine, &all, 1, SK_I64, SK_SUM, NULL);
  if (r == SK_OK) x->fails = all;
  return r;
}

/* Runs everything above on np processes (this one is rank); returns the failures of all ranks. */
static int alltoallv_suite(int np, int rank) {
  av_ctx x;
  memset(&x, 0, sizeof x);
  x.np = np, x.rank = rank;
  x.tmsg = (char(*)[SK_ERROR_MSG_MAX])calloc((size_t)(AV_NMM * np), SK_ERROR_MSG_MAX);
  x.trc = (sk_result *)calloc((size_t)(AV_NMM * np), sizeof(sk_result));
  if (!x.tmsg || !x.trc || !av_threads_reference(&x)) x.fails++;
  sk_world *w[AV_NWORLD] = {av_world(false, 0, AV_TIMEOUT_MS, NULL), av_world(false, 5, AV_TIMEOUT_MS, NULL),
                            av_world(true, 5, AV_TIMEOUT_MS, NULL)};
  for (int i = 0; i < AV_NWORLD && x.tmsg && x.trc; i++) {
    x.cfg = i;
    AV_CHECK(&x, w[i], "creating the world");
    if (!w[i]) continue;
    sk_result r = sk_world_run(w[i], av_device, &x, NULL);
    AV_CHECK(&x, r == SK_OK, "run: %s: %s", sk_result_name(r), sk_world_error_message(w[i]));
  }
  av_run_oom(&x);
  av_run_loose(&x); /* after the others: it may fail its own world (never the plain one) */
  long mine = x.fails;
  if (!w[AV_W_PLAIN] || sk_world_aborted(w[AV_W_PLAIN]) || sk_world_run(w[AV_W_PLAIN], av_tally_device, &x, NULL) != SK_OK)
    x.fails = mine + 1; /* no job-wide count: fail here */
  for (int i = AV_NWORLD - 1; i >= 0; i--)
    if (w[i]) sk_world_destroy(w[i], NULL);
  if (rank == 0) printf("suite alltoallv np=%d: %ld cases, %ld failures\n", np, x.cases, x.fails);
  free(x.tmsg), free(x.trc);
  return x.fails > INT_MAX ? INT_MAX : (int)x.fails;
}

#endif /* MPI_DRIVER_ALLTOALLV_H */
