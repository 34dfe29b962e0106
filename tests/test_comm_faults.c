/* test_comm_faults.c -- the fault paths of the communicator (docs/writing-a-backend.md
   section 5), beyond what test_comm_async.c already covers (timeout naming a missing rank in
   a full collective, a failing device aborting its peers, sk_world_abort from another thread, a
   first set of bad arguments):
   - mismatch of every kind at the same point of the sequence (different collective, count, dtype,
     reduce op, root), blocking and non-blocking, on groups of 2, 3 and 8 and on
     sub-communicators: EVERY member returns SK_ERR_MISMATCH, the message names the ranks and what
     each called, and the next matching collective works (members agree on the sequence);
   - point-to-point mismatch (count or dtype), whichever side arrives first;
   - a communicator used from a thread that is not its device;
   - bad arguments, one at a time, on every call where they apply;
   - a lonely collective / an unmatched send or recv timing out with the missing ranks named;
   - world teardown and re-run after an abort.
   Device threads never assert: they record into per-rank slots and arrays, and the test thread
   asserts after sk_world_run returns. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>

#include "shardkit.h"
#include "comm_test_util.h"

#define F_TIMEOUT_MS 150u /* the short world timeout of the timeout tests */
/* What "it did not hang" means beside F_TIMEOUT_MS: half the tests' 30 s limit. Not a speed
   claim: a loaded machine may take seconds to schedule the device threads. */
#define F_HUNG_MS 15000.0

/* Copies comm's message into dst (a device thread reads its own communicator's message). */
static void f_msg(char *dst, const sk_comm *c) { snprintf(dst, SK_ERROR_MSG_MAX, "%s", sk_comm_error_message(c)); }

/* ============================================================================================ */
/* Mismatch                                                                                     */
/* ============================================================================================ */

/* What one member calls in a mismatch case. */
typedef struct mm_call {
  sk_coll_kind kind;
  size_t count;
  sk_dtype dt;
  sk_redop op;
  int root;
  int nb; /* through the non-blocking form + sk_wait */
} mm_call;

enum { D_KIND, D_COUNT, D_DTYPE, D_OP, D_ROOT };

typedef struct mm_case {
  const char *name;
  int detail; /* which field differs (what the message must show) */
  mm_call normal, odd;
} mm_case;

#define MMC(kind, count, dt, op, root, nb) {SK_COLL_##kind, count, SK_##dt, SK_##op, root, nb}
#define LAST (-1) /* root = the group's last rank */

static const mm_case mm_cases[] = {
    {"allreduce vs allgather", D_KIND, MMC(ALLREDUCE, 4, F32, SUM, 0, 0), MMC(ALLGATHER, 4, F32, SUM, 0, 0)},
    {"allreduce vs barrier", D_KIND, MMC(ALLREDUCE, 4, F32, SUM, 0, 0), MMC(BARRIER, 0, U8, SUM, 0, 0)},
    {"broadcast vs reduce", D_KIND, MMC(BROADCAST, 4, F32, SUM, 0, 0), MMC(REDUCE, 4, F32, SUM, 0, 0)},
    {"allgather vs alltoall", D_KIND, MMC(ALLGATHER, 3, I32, SUM, 0, 0), MMC(ALLTOALL, 3, I32, SUM, 0, 0)},
    {"reduce_scatter vs allreduce", D_KIND, MMC(REDUCE_SCATTER, 2, F64, SUM, 0, 0), MMC(ALLREDUCE, 2, F64, SUM, 0, 0)},
    {"allreduce count", D_COUNT, MMC(ALLREDUCE, 4, F32, SUM, 0, 0), MMC(ALLREDUCE, 5, F32, SUM, 0, 0)},
    {"allreduce count small vs large path", D_COUNT, MMC(ALLREDUCE, 4, F32, SUM, 0, 0), MMC(ALLREDUCE, 1000, F32, SUM, 0, 0)},
    {"allgather count", D_COUNT, MMC(ALLGATHER, 7, U8, SUM, 0, 0), MMC(ALLGATHER, 6, U8, SUM, 0, 0)},
    {"broadcast count", D_COUNT, MMC(BROADCAST, 4, F32, SUM, 0, 0), MMC(BROADCAST, 40, F32, SUM, 0, 0)},
    {"allreduce dtype", D_DTYPE, MMC(ALLREDUCE, 4, F32, SUM, 0, 0), MMC(ALLREDUCE, 4, I32, SUM, 0, 0)},
    {"alltoall dtype", D_DTYPE, MMC(ALLTOALL, 2, F16, SUM, 0, 0), MMC(ALLTOALL, 2, BF16, SUM, 0, 0)},
    {"allreduce op", D_OP, MMC(ALLREDUCE, 4, F32, SUM, 0, 0), MMC(ALLREDUCE, 4, F32, MAX, 0, 0)},
    {"reduce op", D_OP, MMC(REDUCE, 4, I64, SUM, 0, 0), MMC(REDUCE, 4, I64, PROD, 0, 0)},
    {"reduce_scatter op", D_OP, MMC(REDUCE_SCATTER, 3, F32, SUM, 0, 0), MMC(REDUCE_SCATTER, 3, F32, AVG, 0, 0)},
    {"broadcast root", D_ROOT, MMC(BROADCAST, 4, F32, SUM, 0, 0), MMC(BROADCAST, 4, F32, SUM, LAST, 0)},
    {"reduce root", D_ROOT, MMC(REDUCE, 4, F32, SUM, LAST, 0), MMC(REDUCE, 4, F32, SUM, 0, 0)},
    {"iallreduce count (sk_wait)", D_COUNT, MMC(ALLREDUCE, 4, F32, SUM, 0, 1), MMC(ALLREDUCE, 5, F32, SUM, 0, 1)},
    {"ibroadcast root (sk_wait)", D_ROOT, MMC(BROADCAST, 8, I8, SUM, 0, 1), MMC(BROADCAST, 8, I8, SUM, LAST, 1)},
    {"iallreduce vs blocking allreduce, dtype", D_DTYPE, MMC(ALLREDUCE, 4, F32, SUM, 0, 1), MMC(ALLREDUCE, 4, F64, SUM, 0, 0)},
    {"gather vs scatter", D_KIND, MMC(GATHER, 3, F32, SUM, 0, 0), MMC(SCATTER, 3, F32, SUM, 0, 0)},
    {"gather root", D_ROOT, MMC(GATHER, 3, I32, SUM, 0, 0), MMC(GATHER, 3, I32, SUM, LAST, 0)},
    {"iscatter count (sk_wait)", D_COUNT, MMC(SCATTER, 3, F64, SUM, 0, 1), MMC(SCATTER, 2, F64, SUM, 0, 1)},
};
#define MM_NCASES ((int)(sizeof mm_cases / sizeof mm_cases[0]))
#define MM_MAXCOUNT 1000
#define MM_MAXN 8

/* The odd one out of case i in a group of n: rank 0, the last rank or a middle one, in turn. */
static int mm_odd_rank(int i, int n) { return i % 3 == 0 ? 0 : i % 3 == 1 ? n - 1 : n / 2; }

static mm_call mm_call_of(int i, int n, int rank) {
  mm_call k = rank == mm_odd_rank(i, n) ? mm_cases[i].odd : mm_cases[i].normal;
  if (k.root == LAST) k.root = n - 1;
  return k;
}

static sk_result mm_exec(sk_comm *c, const mm_call *k, const void *send, void *recv) {
  sk_request *req = NULL;
  sk_request **rq = k->nb ? &req : NULL;
  sk_result r;
  switch (k->kind) {
    case SK_COLL_ALLREDUCE:
      r = rq ? sk_iallreduce(c, send, recv, k->count, k->dt, k->op, rq, NULL) : sk_allreduce(c, send, recv, k->count, k->dt, k->op, NULL);
      break;
    case SK_COLL_ALLGATHER:
      r = rq ? sk_iallgather(c, send, recv, k->count, k->dt, rq, NULL) : sk_allgather(c, send, recv, k->count, k->dt, NULL);
      break;
    case SK_COLL_REDUCE_SCATTER:
      r = rq ? sk_ireduce_scatter(c, send, recv, k->count, k->dt, k->op, rq, NULL)
             : sk_reduce_scatter(c, send, recv, k->count, k->dt, k->op, NULL);
      break;
    case SK_COLL_BROADCAST:
      r = rq ? sk_ibroadcast(c, send, recv, k->count, k->dt, k->root, rq, NULL)
             : sk_broadcast(c, send, recv, k->count, k->dt, k->root, NULL);
      break;
    case SK_COLL_REDUCE:
      r = rq ? sk_ireduce(c, send, recv, k->count, k->dt, k->op, k->root, rq, NULL)
             : sk_reduce(c, send, recv, k->count, k->dt, k->op, k->root, NULL);
      break;
    case SK_COLL_ALLTOALL:
      r = rq ? sk_ialltoall(c, send, recv, k->count, k->dt, rq, NULL) : sk_alltoall(c, send, recv, k->count, k->dt, NULL);
      break;
    case SK_COLL_GATHER:
      r = rq ? sk_igather(c, send, recv, k->count, k->dt, k->root, rq, NULL) : sk_gather(c, send, recv, k->count, k->dt, k->root, NULL);
      break;
    case SK_COLL_SCATTER:
      r = rq ? sk_iscatter(c, send, recv, k->count, k->dt, k->root, rq, NULL)
             : sk_scatter(c, send, recv, k->count, k->dt, k->root, NULL);
      break;
    default: r = rq ? sk_ibarrier(c, rq, NULL) : sk_barrier(c, NULL); break;
  }
  if (rq && r == SK_OK) r = sk_wait(rq, NULL);
  return r;
}

typedef struct mm_arg {
  int n, sub; /* world size; sub: run on sk_comm_split(color = rank % 2, key = -rank) */
  ct_slot *slots; /* by world rank */
  sk_result (*rc)[MM_NCASES];
  char (*msg)[MM_NCASES][SK_ERROR_MSG_MAX];
  int grank[MM_MAXN], gsize[MM_MAXN]; /* each world rank's rank and size in the group tested */
} mm_arg;

/* A matching allreduce after a mismatch: the sequence must still line up. */
static void mm_followup(sk_comm *c, ct_slot *s, int i, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  int64_t x[3], y[3] = {-1, -1, -1};
  for (int j = 0; j < 3; j++) x[j] = (int64_t)rank * 1000 + i * 10 + j;
  sk_result r = sk_allreduce(c, x, y, 3, SK_I64, SK_SUM, NULL);
  if (!ct_rc(s, r, c, ctx)) return;
  for (int j = 0; j < 3; j++)
    ct_check(s, y[j] == (int64_t)n * (n - 1) / 2 * 1000 + (int64_t)n * (i * 10 + j),
             "%s: allreduce after the mismatch: [%d] = %lld, expected %lld", ctx, j, (long long)y[j],
             (long long)((int64_t)n * (n - 1) / 2 * 1000 + (int64_t)n * (i * 10 + j)));
}

static sk_result mm_device(sk_comm *wc, void *pv) {
  mm_arg *a = (mm_arg *)pv;
  int wrank = sk_comm_rank(wc);
  ct_slot *s = &a->slots[wrank];
  sk_comm *c = wc;
  if (a->sub) {
    sk_result r = sk_comm_split(wc, wrank % 2, -wrank, &c, NULL);
    if (!ct_rc(s, r, wc, "split")) return r;
  }
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  a->grank[wrank] = rank, a->gsize[wrank] = n;
  size_t cap = (size_t)MM_MAXCOUNT * MM_MAXN * 8;
  unsigned char *send = (unsigned char *)malloc(cap), *recv = (unsigned char *)malloc(cap);
  memset(send, 1, cap);
  for (int i = 0; i < MM_NCASES; i++) {
    mm_call k = mm_call_of(i, n, rank);
    memset(recv, CT_JUNK_BYTE, cap);
    a->rc[wrank][i] = mm_exec(c, &k, send, recv);
    f_msg(a->msg[wrank][i], c);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "case '%s' group rank %d/%d (world rank %d)", mm_cases[i].name, rank, n, wrank);
    mm_followup(c, s, i, ctx);
  }
  free(send), free(recv);
  if (a->sub) {
    sk_comm_destroy(c, NULL);
    /* and the world communicator was not disturbed by its children's mismatches */
    mm_followup(wc, s, 99, "world allreduce after the sub-communicator mismatches");
  }
  s->ran = 1;
  return SK_OK;
}

/* The part of a member's description that shows the field that differs, as sk__tcheck_match
   prints it: "rank R called KIND(count C, DTYPE, OP, root X)". */
static void mm_desc(char *buf, size_t cap, int rank, const mm_call *k, int detail) {
  const char *kn = sk_coll_kind_name(k->kind);
  switch (detail) {
    case D_KIND: snprintf(buf, cap, "rank %d called %s(", rank, kn); break;
    case D_COUNT: snprintf(buf, cap, "rank %d called %s(count %zu,", rank, kn, k->count); break;
    case D_DTYPE: snprintf(buf, cap, "rank %d called %s(count %zu, %s,", rank, kn, k->count, sk_dtype_name(k->dt)); break;
    case D_OP:
      snprintf(buf, cap, "rank %d called %s(count %zu, %s, %s,", rank, kn, k->count, sk_dtype_name(k->dt),
               sk_redop_name(k->op));
      break;
    default: snprintf(buf, cap, "rank %d called %s(count %zu, %s, %s, root %d)", rank, kn, k->count,
                      sk_dtype_name(k->dt), sk_redop_name(k->op), k->root);
      break;
  }
}

/* Test thread: every member of every group returned MISMATCH with a message naming rank 0 and
   a member whose call differs from rank 0's, each with the differing field. */
static void mm_expect(const mm_arg *a, const char *label) {
  for (int w = 0; w < a->n; w++) {
    int rank = a->grank[w], n = a->gsize[w];
    for (int i = 0; i < MM_NCASES; i++) {
      const char *msg = a->msg[w][i];
      cr_expect_eq(a->rc[w][i], SK_ERR_MISMATCH, "%s: case '%s': group rank %d/%d (world %d) returned %s: '%s'", label,
                   mm_cases[i].name, rank, n, w, sk_result_name(a->rc[w][i]), msg);
      if (a->rc[w][i] != SK_ERR_MISMATCH) continue;
      mm_call k0 = mm_call_of(i, n, 0);
      char d0[160], dq[160];
      mm_desc(d0, sizeof d0, 0, &k0, mm_cases[i].detail);
      cr_expect(strstr(msg, d0) != NULL, "%s: case '%s': group rank %d/%d: message '%s' lacks '%s'", label,
                mm_cases[i].name, rank, n, msg, d0);
      /* the other side: the odd rank, or (when rank 0 is the odd one) any other member */
      int odd = mm_odd_rank(i, n), found = -1;
      for (int q = 1; q < n && found < 0; q++) {
        if (odd != 0 && q != odd) continue;
        mm_call kq = mm_call_of(i, n, q);
        mm_desc(dq, sizeof dq, q, &kq, mm_cases[i].detail);
        if (strstr(msg, dq)) found = q;
      }
      if (found < 0) {
        mm_call kq = mm_call_of(i, n, odd ? odd : 1);
        mm_desc(dq, sizeof dq, odd ? odd : 1, &kq, mm_cases[i].detail);
      }
      cr_expect(found >= 0, "%s: case '%s': group rank %d/%d (odd rank %d): message '%s' does not name the other "
                "side (e.g. '%s')", label, mm_cases[i].name, rank, n, odd, msg, dq);
    }
  }
}

typedef struct mm_param {
  int n, sub;
} mm_param;

ParameterizedTestParameters(comm_faults, mismatch_every_kind) {
  static mm_param ps[] = {{2, 0}, {3, 0}, {8, 0}, {8, 1}, {6, 1}};
  return cr_make_param_array(mm_param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(mm_param *p, comm_faults, mismatch_every_kind, .timeout = 30) {
  mm_arg a;
  memset(&a, 0, sizeof a);
  a.n = p->n, a.sub = p->sub;
  a.slots = ct_slots_new(p->n);
  a.rc = calloc((size_t)p->n, sizeof *a.rc);
  a.msg = calloc((size_t)p->n, sizeof *a.msg);
  cr_assert(a.rc && a.msg);
  char lab[64];
  snprintf(lab, sizeof lab, "mismatch n=%d%s", p->n, p->sub ? " on sub-communicators (split by rank % 2)" : "");
  ct_run(p->n, CT_CFG_DEFAULT, mm_device, &a, lab);
  ct_expect_slots(a.slots, p->n, lab);
  mm_expect(&a, lab);
  free(a.slots), free(a.rc), free(a.msg);
}

/* ---- point to point --------------------------------------------------------------------------- */

/* Rank 0 sends 4 x f32 to rank 1, which receives (mode 0) 5 x f32 or (mode 1) 4 x i32.
   order 0: the receive is posted first (irecv before a barrier, the send after it);
   order 1: the send is posted first; order 2: both blocking, no ordering. */
typedef struct p2p_arg {
  int mode, order;
  sk_result rc[2], rc_after[2];
  char msg[2][SK_ERROR_MSG_MAX];
  ct_slot slots[2];
} p2p_arg;

static sk_result p2p_mm_device(sk_comm *c, void *pv) {
  p2p_arg *a = (p2p_arg *)pv;
  int rank = sk_comm_rank(c);
  ct_slot *s = &a->slots[rank];
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0};
  size_t rcount = a->mode == 0 ? 5 : 4;
  sk_dtype rdt = a->mode == 0 ? SK_F32 : SK_I32;
  sk_request *req = NULL;
  sk_result r = SK_OK;
  bool first = (a->order == 0 && rank == 1) || (a->order == 1 && rank == 0);
  if (a->order < 2 && first) {
    r = rank == 0 ? sk_isend(c, x, 4, SK_F32, 1, &req, NULL) : sk_irecv(c, y, rcount, rdt, 0, &req, NULL);
    if (!ct_rc(s, r, c, "posting the first side")) req = NULL;
  }
  if (a->order < 2) {
    sk_result rb = sk_barrier(c, NULL);
    if (!ct_rc(s, rb, c, "barrier")) return rb;
  }
  if (first)
    r = req ? sk_wait(&req, NULL) : r;
  else
    r = rank == 0 ? sk_send(c, x, 4, SK_F32, 1, NULL) : sk_recv(c, y, rcount, rdt, 0, NULL);
  a->rc[rank] = r;
  f_msg(a->msg[rank], c);
  /* the pair still works afterwards */
  float z[4] = {0};
  r = rank == 0 ? sk_send(c, x, 4, SK_F32, 1, NULL) : sk_recv(c, z, 4, SK_F32, 0, NULL);
  a->rc_after[rank] = r;
  if (ct_rc(s, r, c, "matching send/recv after the mismatch") && rank == 1)
    ct_check(s, z[0] == 1 && z[3] == 4, "send/recv after the mismatch delivered %g %g", (double)z[0], (double)z[3]);
  s->ran = 1;
  return SK_OK;
}

Test(comm_faults, p2p_mismatch, .timeout = 30) {
  for (int mode = 0; mode < 2; mode++)
    for (int order = 0; order < 3; order++) {
      p2p_arg a;
      memset(&a, 0, sizeof a);
      a.mode = mode, a.order = order;
      char lab[96];
      snprintf(lab, sizeof lab, "p2p mismatch (%s, %s)", mode == 0 ? "4 vs 5 x f32" : "f32 vs i32",
               order == 0 ? "recv posted first" : order == 1 ? "send posted first" : "both blocking");
      ct_run(2, CT_CFG_DEFAULT, p2p_mm_device, &a, lab);
      ct_expect_slots(a.slots, 2, lab);
      for (int q = 0; q < 2; q++) {
        cr_expect_eq(a.rc[q], SK_ERR_MISMATCH, "%s: rank %d (%s) returned %s: '%s'", lab, q, q ? "recv" : "send",
                     sk_result_name(a.rc[q]), a.msg[q]);
        cr_expect(strstr(a.msg[q], "rank 0") && strstr(a.msg[q], "rank 1"),
                  "%s: rank %d (%s): message '%s' does not name both ranks", lab, q, q ? "recv" : "send", a.msg[q]);
        cr_expect(strstr(a.msg[q], mode == 0 ? "5 x f32" : "4 x i32") && strstr(a.msg[q], "4 x f32"),
                  "%s: rank %d: message '%s' does not show both sides' count x dtype", lab, q, a.msg[q]);
      }
    }
}

/* ============================================================================================ */
/* A communicator used from the wrong thread                                                    */
/* ============================================================================================ */

typedef struct wt_help {
  sk_comm *c;
  sk_result rc[5];
  char msg[5][SK_ERROR_MSG_MAX];
  sk_error err; /* the barrier's: says why, without the owner's record */
} wt_help;

static void *wt_helper_main(void *pv) {
  wt_help *h = (wt_help *)pv;
  float x[4] = {1, 1, 1, 1}, y[4];
  sk_request *req = NULL;
  h->rc[0] = sk_allreduce(h->c, x, y, 4, SK_F32, SK_SUM, NULL);
  f_msg(h->msg[0], h->c);
  h->rc[1] = sk_iallreduce(h->c, x, y, 4, SK_F32, SK_SUM, &req, NULL);
  f_msg(h->msg[1], h->c);
  if (req) sk_wait(&req, NULL); /* only if wrongly accepted */
  h->rc[2] = sk_barrier(h->c, &h->err);
  f_msg(h->msg[2], h->c);
  h->rc[3] = sk_send(h->c, x, 4, SK_F32, 1, NULL);
  f_msg(h->msg[3], h->c);
  h->rc[4] = sk_broadcast(h->c, x, y, 4, SK_F32, 0, NULL);
  f_msg(h->msg[4], h->c);
  return NULL;
}

typedef struct wt_arg {
  ct_slot slots[4];
  wt_help help[2]; /* world comm, sub-communicator */
} wt_arg;

/* Rank 0 lends its world communicator, then a sub-communicator, to a helper pthread; the peers
   have already entered the matching collectives, which only rank 0's own later call completes. */
static sk_result wt_device(sk_comm *c, void *pv) {
  wt_arg *a = (wt_arg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split(c, 0, n - rank, &sub, NULL); /* everyone, reversed */
  if (!ct_rc(s, r, c, "split")) return r;
  sk_comm *cs[2] = {c, sub};
  for (int which = 0; which < 2; which++) {
    sk_comm *cc = cs[which];
    int crank = sk_comm_rank(cc);
    if (rank == 0) {
      wt_help *h = &a->help[which];
      h->c = cc;
      pthread_t th;
      if (!ct_check(s, pthread_create(&th, NULL, wt_helper_main, h) == 0, "pthread_create")) return SK_ERR_SYSTEM;
      pthread_join(th, NULL);
    }
    float x[4], y[4] = {0};
    for (int j = 0; j < 4; j++) x[j] = (float)(crank + j);
    r = sk_allreduce(cc, x, y, 4, SK_F32, SK_SUM, NULL);
    if (!ct_rc(s, r, cc, which ? "sub allreduce after the helper's calls" : "allreduce after the helper's calls"))
      return r;
    for (int j = 0; j < 4; j++)
      ct_check(s, y[j] == (float)(n * (n - 1) / 2 + n * j), "comm %d: allreduce [%d] = %g", which, j, (double)y[j]);
    /* and a second collective, so the sequence is checked to still line up */
    float b[4] = {0};
    if (crank == 0) memcpy(b, x, sizeof b);
    r = sk_broadcast(cc, b, b, 4, SK_F32, 0, NULL);
    if (!ct_rc(s, r, cc, "broadcast after the helper's calls")) return r;
    ct_check(s, b[0] == 0 && b[3] == 3, "comm %d: broadcast gave %g %g", which, (double)b[0], (double)b[3]);
  }
  sk_comm_destroy(sub, NULL);
  s->ran = 1;
  return SK_OK;
}

Test(comm_faults, comm_used_from_wrong_thread, .timeout = 30) {
  wt_arg a;
  memset(&a, 0, sizeof a);
  ct_run(3, CT_CFG_DEFAULT, wt_device, &a, "wrong thread");
  ct_expect_slots(a.slots, 3, "wrong thread");
  static const char *const calls[5] = {"allreduce", "iallreduce", "barrier", "send", "broadcast"};
  for (int which = 0; which < 2; which++)
    for (int k = 0; k < 5; k++) {
      cr_expect_eq(a.help[which].rc[k], SK_ERR_INVALID_ARGUMENT, "%s comm: helper thread's %s returned %s: '%s'",
                   which ? "sub" : "world", calls[k], sk_result_name(a.help[which].rc[k]), a.help[which].msg[k]);
      /* the message belongs to the owner (who may be using its communicator): untouched */
      cr_expect_str_eq(a.help[which].msg[k], "", "%s comm: helper thread's %s wrote '%s' into the owner's communicator",
                       which ? "sub" : "world", calls[k], a.help[which].msg[k]);
      cr_expect(a.help[which].err.code == SK_ERR_INVALID_ARGUMENT &&
                    strstr(a.help[which].err.msg, "the calling thread may not use this communicator"),
                "%s comm: the helper's err: '%s'", which ? "sub" : "world", a.help[which].err.msg);
    }
}

/* ============================================================================================ */
/* Bad arguments                                                                                */
/* ============================================================================================ */

/* Every case below is rejected locally, before any synchronisation. So that nobody waits for a
   member that never arrives, EVERY rank passes the same bad argument (also where the check
   depends on the rank, e.g. Broadcast's send is only needed on the root: there each rank names
   ITSELF as root, so each one is the root of its own call). The suite runs on 1 and 3 devices.
   bad_arg_on_one_rank below covers the other design: one rank alone, peers time out. */

typedef struct ba_arg {
  int n;
  ct_slot *slots;
} ba_arg;

#define BAD(call, word)                                                                                         \
  do {                                                                                                          \
    sk_result r_ = (call);                                                                                      \
    ct_check(s, r_ == SK_ERR_INVALID_ARGUMENT, "rank %d/%d: %s returned %s (expected SK_ERR_INVALID_ARGUMENT): %s", \
             rank, n, #call, sk_result_name(r_), sk_comm_error_message(c));                                     \
    if (r_ == SK_ERR_INVALID_ARGUMENT)                                                                          \
      ct_check(s, strstr(sk_comm_error_message(c), word) != NULL, "rank %d/%d: %s: message '%s' lacks '%s'", rank, n, \
               #call, sk_comm_error_message(c), word);                                                          \
  } while (0)

/* A non-blocking form: rejected, and *req left NULL. */
#define IBAD(call, word)                                                                                    \
  do {                                                                                                      \
    req = (sk_request *)&req;                                                                               \
    BAD(call, word);                                                                                        \
    ct_check(s, req == NULL, "rank %d: %s left *req set", rank, #call);                                     \
    if (req && req != (sk_request *)&req) sk_wait(&req, NULL);                                                    \
    req = NULL;                                                                                             \
  } while (0)

static sk_result ba_device(sk_comm *c, void *pv) {
  ba_arg *a = (ba_arg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  enum { E = 4 };                /* elements per rank */
  float *buf = (float *)calloc((size_t)(4 * E * n + 8), sizeof(float)); /* room for every overlap */
  float *out = (float *)calloc((size_t)(E * n + 8), sizeof(float));
  const size_t huge = SIZE_MAX / 2;
  const int me = rank;
  sk_request *req = NULL;
  const sk_dtype bad_dt[] = {(sk_dtype)99, (sk_dtype)-1, SK_DTYPE_COUNT};
  const sk_redop bad_op[] = {(sk_redop)99, (sk_redop)-1, SK_REDOP_COUNT};

  /* ---- NULL buffers with count > 0 ---- */
  BAD(sk_allreduce(c, NULL, out, E, SK_F32, SK_SUM, NULL), "send buffer is NULL");
  BAD(sk_allreduce(c, buf, NULL, E, SK_F32, SK_SUM, NULL), "recv buffer is NULL");
  BAD(sk_allgather(c, NULL, out, E, SK_F32, NULL), "send buffer is NULL");
  BAD(sk_allgather(c, buf, NULL, E, SK_F32, NULL), "recv buffer is NULL");
  BAD(sk_reduce_scatter(c, NULL, out, 1, SK_F32, SK_SUM, NULL), "send buffer is NULL");
  BAD(sk_reduce_scatter(c, buf, NULL, 1, SK_F32, SK_SUM, NULL), "recv buffer is NULL");
  BAD(sk_broadcast(c, NULL, out, E, SK_F32, me, NULL), "send buffer is NULL"); /* every rank its own root */
  BAD(sk_broadcast(c, buf, NULL, E, SK_F32, 0, NULL), "recv buffer is NULL"); /* recv needed everywhere */
  BAD(sk_reduce(c, NULL, out, E, SK_F32, SK_SUM, 0, NULL), "send buffer is NULL"); /* send needed everywhere */
  BAD(sk_reduce(c, buf, NULL, E, SK_F32, SK_SUM, me, NULL), "recv buffer is NULL"); /* every rank its own root */
  BAD(sk_alltoall(c, NULL, out, 1, SK_F32, NULL), "send buffer is NULL");
  BAD(sk_alltoall(c, buf, NULL, 1, SK_F32, NULL), "recv buffer is NULL");
  BAD(sk_send(c, NULL, E, SK_F32, (me + 1) % n, NULL), "send buffer is NULL");
  BAD(sk_recv(c, NULL, E, SK_F32, (me + 1) % n, NULL), "recv buffer is NULL");
  IBAD(sk_iallreduce(c, NULL, out, E, SK_F32, SK_SUM, &req, NULL), "send buffer is NULL");
  IBAD(sk_iallgather(c, buf, NULL, E, SK_F32, &req, NULL), "recv buffer is NULL");
  IBAD(sk_ireduce_scatter(c, NULL, out, 1, SK_F32, SK_SUM, &req, NULL), "send buffer is NULL");
  IBAD(sk_ibroadcast(c, NULL, out, E, SK_F32, me, &req, NULL), "send buffer is NULL");
  IBAD(sk_ireduce(c, buf, NULL, E, SK_F32, SK_SUM, me, &req, NULL), "recv buffer is NULL");
  IBAD(sk_ialltoall(c, NULL, out, 1, SK_F32, &req, NULL), "send buffer is NULL");
  IBAD(sk_isend(c, NULL, E, SK_F32, 0, &req, NULL), "send buffer is NULL");
  IBAD(sk_irecv(c, NULL, E, SK_F32, 0, &req, NULL), "recv buffer is NULL");

  /* ---- invalid dtype ---- */
  for (int i = 0; i < 3; i++) {
    sk_dtype d = bad_dt[i];
    BAD(sk_allreduce(c, buf, out, E, d, SK_SUM, NULL), "dtype");
    BAD(sk_allgather(c, buf, out, E, d, NULL), "dtype");
    BAD(sk_reduce_scatter(c, buf, out, 1, d, SK_SUM, NULL), "dtype");
    BAD(sk_broadcast(c, buf, out, E, d, 0, NULL), "dtype");
    BAD(sk_reduce(c, buf, out, E, d, SK_SUM, 0, NULL), "dtype");
    BAD(sk_alltoall(c, buf, out, 1, d, NULL), "dtype");
    BAD(sk_send(c, buf, E, d, 0, NULL), "dtype");
    BAD(sk_recv(c, out, E, d, 0, NULL), "dtype");
    BAD(sk_sendrecv(c, buf, E, 0, out, E, 0, d, NULL), "dtype");
    IBAD(sk_iallreduce(c, buf, out, E, d, SK_SUM, &req, NULL), "dtype");
    IBAD(sk_ialltoall(c, buf, out, 1, d, &req, NULL), "dtype");
    IBAD(sk_irecv(c, out, E, d, 0, &req, NULL), "dtype");
  }

  /* ---- invalid reduce op (the reducing collectives) ---- */
  for (int i = 0; i < 3; i++) {
    sk_redop o = bad_op[i];
    BAD(sk_allreduce(c, buf, out, E, SK_F32, o, NULL), "op");
    BAD(sk_reduce_scatter(c, buf, out, 1, SK_I32, o, NULL), "op");
    BAD(sk_reduce(c, buf, out, E, SK_F64, o, 0, NULL), "op");
    IBAD(sk_iallreduce(c, buf, out, E, SK_F32, o, &req, NULL), "op");
    IBAD(sk_ireduce_scatter(c, buf, out, 1, SK_F32, o, &req, NULL), "op");
    IBAD(sk_ireduce(c, buf, out, E, SK_F32, o, 0, &req, NULL), "op");
  }

  /* ---- root / peer out of range: -1 and size ---- */
  const int bad_rank[] = {-1, n, n + 100, -1000};
  for (int i = 0; i < 4; i++) {
    int b = bad_rank[i];
    BAD(sk_broadcast(c, buf, out, E, SK_F32, b, NULL), "root");
    BAD(sk_reduce(c, buf, out, E, SK_F32, SK_SUM, b, NULL), "root");
    BAD(sk_send(c, buf, E, SK_F32, b, NULL), "peer");
    BAD(sk_recv(c, out, E, SK_F32, b, NULL), "peer");
    BAD(sk_sendrecv(c, buf, E, b, out, E, 0, SK_F32, NULL), "peer"); /* bad dst */
    IBAD(sk_ibroadcast(c, buf, out, E, SK_F32, b, &req, NULL), "root");
    IBAD(sk_ireduce(c, buf, out, E, SK_F32, SK_SUM, b, &req, NULL), "root");
    IBAD(sk_isend(c, buf, E, SK_F32, b, &req, NULL), "peer");
    IBAD(sk_irecv(c, out, E, SK_F32, b, &req, NULL), "peer");
  }

  /* ---- overlapping send/recv that is not the in-place form ---- */
  BAD(sk_allreduce(c, buf, buf + 1, E, SK_F32, SK_SUM, NULL), "overlap");
  BAD(sk_allreduce(c, buf + 1, buf, E, SK_F32, SK_SUM, NULL), "overlap");
  BAD(sk_allgather(c, buf + 1, buf, E, SK_F32, NULL), "overlap");         /* in place: send == recv + rank*E */
  BAD(sk_allgather(c, buf, buf + 1, E, SK_F32, NULL), "overlap");
  BAD(sk_reduce_scatter(c, buf, buf + 1, E, SK_F32, SK_SUM, NULL), "overlap"); /* in place: recv == send + rank*E */
  BAD(sk_reduce_scatter(c, buf + 1, buf, E, SK_F32, SK_SUM, NULL), "overlap");
  BAD(sk_broadcast(c, buf, buf + 1, E, SK_F32, me, NULL), "overlap");   /* only the root reads send */
  BAD(sk_reduce(c, buf + 1, buf, E, SK_F32, SK_SUM, me, NULL), "overlap"); /* only the root writes recv */
  BAD(sk_alltoall(c, buf, buf + 1, E, SK_F32, NULL), "overlap");
  BAD(sk_alltoall(c, buf + 1, buf, E, SK_F32, NULL), "overlap");
  IBAD(sk_iallreduce(c, buf, buf + 1, E, SK_F32, SK_SUM, &req, NULL), "overlap");
  IBAD(sk_iallgather(c, buf + 1, buf, E, SK_F32, &req, NULL), "overlap");

  /* ---- absurd count ---- */
  BAD(sk_allreduce(c, buf, out, huge, SK_F32, SK_SUM, NULL), "count");
  BAD(sk_allgather(c, buf, out, huge, SK_F32, NULL), "count");
  BAD(sk_reduce_scatter(c, buf, out, huge, SK_F32, SK_SUM, NULL), "count");
  BAD(sk_broadcast(c, buf, out, huge, SK_F32, 0, NULL), "count");
  BAD(sk_reduce(c, buf, out, huge, SK_F32, SK_SUM, 0, NULL), "count");
  BAD(sk_alltoall(c, buf, out, huge, SK_F32, NULL), "count");
  BAD(sk_send(c, buf, huge, SK_F32, 0, NULL), "count");
  BAD(sk_recv(c, out, huge, SK_F32, 0, NULL), "count");
  BAD(sk_allreduce(c, buf, out, SIZE_MAX, SK_U8, SK_SUM, NULL), "count");
  IBAD(sk_iallreduce(c, buf, out, huge, SK_F64, SK_SUM, &req, NULL), "count");
  IBAD(sk_isend(c, buf, SIZE_MAX, SK_I8, 0, &req, NULL), "count");

  /* ---- NULL request pointer for every i* form ---- */
  BAD(sk_iallreduce(c, buf, out, E, SK_F32, SK_SUM, NULL, NULL), "req");
  BAD(sk_iallgather(c, buf, out, E, SK_F32, NULL, NULL), "req");
  BAD(sk_ireduce_scatter(c, buf, out, 1, SK_F32, SK_SUM, NULL, NULL), "req");
  BAD(sk_ibroadcast(c, buf, out, E, SK_F32, 0, NULL, NULL), "req");
  BAD(sk_ireduce(c, buf, out, E, SK_F32, SK_SUM, 0, NULL, NULL), "req");
  BAD(sk_ialltoall(c, buf, out, 1, SK_F32, NULL, NULL), "req");
  BAD(sk_ibarrier(c, NULL, NULL), "req");
  BAD(sk_isend(c, buf, E, SK_F32, 0, NULL, NULL), "req");
  BAD(sk_irecv(c, out, E, SK_F32, 0, NULL, NULL), "req");

  /* ---- request helpers ---- */
  bool done = true;
  ct_check(s, sk_wait(NULL, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_wait(NULL)", rank);
  ct_check(s, sk_test(NULL, &done, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_test(NULL, &done)", rank);
  ct_check(s, sk_test(&req, NULL, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_test(&req, NULL)", rank);
  ct_check(s, sk_waitall(-1, NULL, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_waitall(-1)", rank);
  ct_check(s, sk_waitall(2, NULL, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_waitall(2, NULL)", rank);

  /* ---- sub-communicator constructors (argument checks come before the collective part) ---- */
  sk_comm *sub = (sk_comm *)&sub;
  BAD(sk_comm_split(c, 0, 0, NULL, NULL), "out");
  BAD(sk_comm_split(c, -5, 0, &sub, NULL), "color");
  ct_check(s, sub == NULL, "rank %d: a failed split left *out set", rank);
  int dup[2] = {0, 0}, oor[2] = {0, n}, neg[2] = {-1, 0};
  if (n >= 2) { /* two ranks fit */
    BAD(sk_comm_create(c, 2, dup, &sub, NULL), "twice");
    BAD(sk_comm_create(c, 2, oor, &sub, NULL), "out of range");
    BAD(sk_comm_create(c, 2, neg, &sub, NULL), "out of range");
  } else { /* one rank: the lists' second entries alone */
    BAD(sk_comm_create(c, 1, oor + 1, &sub, NULL), "out of range");
    BAD(sk_comm_create(c, 1, neg, &sub, NULL), "out of range");
  }
  BAD(sk_comm_create(c, 0, dup, &sub, NULL), "n = 0");
  BAD(sk_comm_create(c, n + 1, dup, &sub, NULL), "n =");
  BAD(sk_comm_create(c, 1, NULL, &sub, NULL), "ranks is NULL");
  BAD(sk_comm_create(c, 1, dup, NULL, NULL), "out");
  ct_check(s, sub == NULL, "rank %d: a failed create left *out set", rank);
  sk_mesh wrong, ok;
  sk_error e;
  int dims_wrong[2] = {n + 1, 2}, dims_ok[1] = {n};
  const char *names2[2] = {"dp", "mp"}, *names1[1] = {"dp"};
  ct_check(s, sk_mesh_init(&wrong, 2, dims_wrong, names2, &e) == SK_OK, "mesh init: %s", e.msg);
  ct_check(s, sk_mesh_init(&ok, 1, dims_ok, names1, &e) == SK_OK, "mesh init: %s", e.msg);
  BAD(sk_comm_split_mesh(c, &wrong, 1u, &sub, NULL), "devices");
  BAD(sk_comm_split_mesh(c, &ok, 2u, &sub, NULL), "axis_mask");   /* axis 1 of a 1-axis mesh */
  BAD(sk_comm_split_mesh(c, &ok, 0x80000000u, &sub, NULL), "axis_mask");
  BAD(sk_comm_split_mesh(c, NULL, 1u, &sub, NULL), "mesh is NULL");
  BAD(sk_comm_split_mesh(c, &ok, 1u, NULL, NULL), "out");
  ct_check(s, sub == NULL, "rank %d: a failed split_mesh left *out set", rank);

  /* ---- valid: NULL with count 0, Reduce's recv NULL off the root, Broadcast's send NULL off
     the root. These are real collectives: every rank calls them, in the same order. ---- */
  sk_result r = SK_OK;
  const char *what = "";
#define OKCALL(call)            \
  if (r == SK_OK) {             \
    what = #call;               \
    r = (call);                 \
  }
  OKCALL(sk_allreduce(c, NULL, NULL, 0, SK_F32, SK_SUM, NULL));
  OKCALL(sk_allgather(c, NULL, NULL, 0, SK_I8, NULL));
  OKCALL(sk_reduce_scatter(c, NULL, NULL, 0, SK_F64, SK_MAX, NULL));
  OKCALL(sk_broadcast(c, NULL, NULL, 0, SK_F16, n - 1, NULL));
  OKCALL(sk_reduce(c, NULL, NULL, 0, SK_I64, SK_PROD, 0, NULL));
  OKCALL(sk_alltoall(c, NULL, NULL, 0, SK_U8, NULL));
  OKCALL(sk_sendrecv(c, NULL, 0, (me + 1) % n, NULL, 0, (me + n - 1) % n, SK_F32, NULL));
  if (!ct_rc(s, r, c, what)) goto out;
  for (int j = 0; j < E; j++) buf[j] = (float)(rank * 10 + j), out[j] = -1;
  r = sk_reduce(c, buf, rank == n - 1 ? out : NULL, E, SK_F32, SK_SUM, n - 1, NULL);
  if (!ct_rc(s, r, c, "reduce with recv NULL on non-roots")) goto out;
  if (rank == n - 1)
    for (int j = 0; j < E; j++)
      ct_check(s, out[j] == (float)(10 * n * (n - 1) / 2 + n * j), "reduce [%d] = %g", j, (double)out[j]);
  for (int j = 0; j < E; j++) out[j] = -1;
  r = sk_broadcast(c, rank == 0 ? buf : NULL, out, E, SK_F32, 0, NULL);
  if (!ct_rc(s, r, c, "broadcast with send NULL on non-roots")) goto out;
  for (int j = 0; j < E; j++) ct_check(s, out[j] == (float)j, "broadcast [%d] = %g", j, (double)out[j]);
  /* in-place forms are not overlaps */
  for (int j = 0; j < E * n; j++) buf[j] = (float)(j / E == rank ? rank + 1 : 0);
  r = sk_allgather(c, buf + (size_t)rank * E, buf, E, SK_F32, NULL);
  if (!ct_rc(s, r, c, "in-place allgather")) goto out;
  for (int j = 0; j < E * n; j++) ct_check(s, buf[j] == (float)(j / E + 1), "in-place allgather [%d] = %g", j, (double)buf[j]);
  /* the communicator still works after all the rejected calls */
  for (int j = 0; j < E; j++) buf[j] = (float)(rank + j);
  r = sk_allreduce(c, buf, buf, E, SK_F32, SK_SUM, NULL);
  if (!ct_rc(s, r, c, "in-place allreduce after the rejected calls")) goto out;
  for (int j = 0; j < E; j++)
    ct_check(s, buf[j] == (float)(n * (n - 1) / 2 + n * j), "allreduce after the rejected calls [%d] = %g", j,
             (double)buf[j]);
  s->ran = 1;
out:
  free(buf), free(out);
  return r;
#undef OKCALL
}

Test(comm_faults, bad_arguments_each, .timeout = 30) {
  int sizes[] = {1, 3};
  for (int i = 0; i < 2; i++) {
    int n = sizes[i];
    ba_arg a = {n, ct_slots_new(n)};
    char lab[48];
    snprintf(lab, sizeof lab, "bad arguments, n=%d", n);
    sk_world *w = ct_world(n, CT_CFG_DEFAULT, CT_TIMEOUT_MS); /* a wrongly accepted call fails in 10 s, not 5 min */
    uint64_t t0 = sk_now_ns();
    sk_result r = sk_world_run(w, ba_device, &a, NULL);
    cr_expect_eq(r, SK_OK, "%s: sk_world_run returned %s: %s", lab, sk_result_name(r), sk_world_error_message(w));
    cr_expect_lt(ct_ms_since(t0), CT_TIMEOUT_MS / 2.0, "%s: took %.0f ms (something waited)", lab, ct_ms_since(t0));
    cr_expect(!sk_world_aborted(w), "%s: the world was aborted", lab);
    sk_world_destroy(w, NULL);
    ct_expect_slots(a.slots, n, lab);
    free(a.slots);
  }
}

/* sk_sendrecv with a bad SOURCE: the send half is already posted when the receive half is
   rejected. The call must still fail fast with the argument named, not wait for the posted send
   to be matched (nobody will: every rank makes the same bad call). */
typedef struct sr_arg {
  sk_result rc[2];
  double ms[2];
  char msg[2][SK_ERROR_MSG_MAX];
} sr_arg;

static sk_result sr_bad_src_device(sk_comm *c, void *pv) {
  sr_arg *a = (sr_arg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  float x[4] = {0}, y[4];
  uint64_t t0 = sk_now_ns();
  a->rc[rank] = sk_sendrecv(c, x, 4, (rank + 1) % n, y, 4, n, SK_F32, NULL);
  a->ms[rank] = ct_ms_since(t0);
  f_msg(a->msg[rank], c);
  return SK_OK;
}

Test(comm_faults, sendrecv_bad_source_fails_fast, .timeout = 30) {
  sr_arg a;
  memset(&a, 0, sizeof a);
  sk_world *w = ct_world(2, CT_CFG_DEFAULT, CT_TIMEOUT_MS);
  sk_world_run(w, sr_bad_src_device, &a, NULL);
  for (int q = 0; q < 2; q++) {
    cr_expect_eq(a.rc[q], SK_ERR_INVALID_ARGUMENT, "rank %d: sk_sendrecv(src = size) returned %s", q,
                 sk_result_name(a.rc[q]));
    cr_expect(strstr(a.msg[q], "peer") != NULL, "rank %d: message '%s' does not name the peer", q, a.msg[q]);
    cr_expect_lt(a.ms[q], CT_TIMEOUT_MS / 2.0, "rank %d: sk_sendrecv with a bad source took %.0f ms (waited for the "
                 "posted send; world timeout %u ms)", q, a.ms[q], CT_TIMEOUT_MS);
  }
  cr_expect(!sk_world_aborted(w), "a rejected sendrecv aborted the world: %s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
}

/* An absurd count on Send/Recv: nothing else (no overlap check, which in practice catches a huge
   count on the collectives) stands between it and a memcpy of that many bytes. 1 device, each
   half posted alone, a short timeout: if wrongly accepted, the post times out instead of being
   matched (which would crash). */
static sk_result p2p_huge_device(sk_comm *c, void *pv) {
  sr_arg *a = (sr_arg *)pv;
  unsigned char b[16] = {0};
  sk_request *req = NULL;
  a->rc[0] = sk_isend(c, b, SIZE_MAX / 2, SK_U8, 0, &req, NULL);
  f_msg(a->msg[0], c);
  if (req) sk_wait(&req, NULL);
  return SK_OK;
}
static sk_result p2p_huge_recv_device(sk_comm *c, void *pv) {
  sr_arg *a = (sr_arg *)pv;
  unsigned char b[16] = {0};
  sk_request *req = NULL;
  a->rc[1] = sk_irecv(c, b, SIZE_MAX / 2, SK_U8, 0, &req, NULL);
  f_msg(a->msg[1], c);
  if (req) sk_wait(&req, NULL);
  return SK_OK;
}

Test(comm_faults, absurd_count_u8, .timeout = 30) {
  sr_arg a;
  memset(&a, 0, sizeof a);
  sk_world *w = ct_world(1, CT_CFG_DEFAULT, F_TIMEOUT_MS);
  sk_world_run(w, p2p_huge_device, &a, NULL);
  sk_world_destroy(w, NULL);
  w = ct_world(1, CT_CFG_DEFAULT, F_TIMEOUT_MS);
  sk_world_run(w, p2p_huge_recv_device, &a, NULL);
  sk_world_destroy(w, NULL);
  for (int q = 0; q < 2; q++) {
    cr_expect_eq(a.rc[q], SK_ERR_INVALID_ARGUMENT, "1 device: %s of SIZE_MAX/2 x u8 returned %s: '%s'",
                 q ? "irecv" : "isend", sk_result_name(a.rc[q]), a.msg[q]);
    cr_expect(strstr(a.msg[q], "count") != NULL, "%s of SIZE_MAX/2 x u8: message '%s' does not name the count",
              q ? "irecv" : "isend", a.msg[q]);
  }
}

/* A collective of SIZE_MAX/2 x u8 on 1 device, with real (small) distinct buffers: the message
   must blame the count. */
static sk_result coll_huge_device(sk_comm *c, void *pv) {
  sr_arg *a = (sr_arg *)pv;
  static unsigned char b[64], o[64];
  a->rc[0] = sk_allreduce(c, b, o, SIZE_MAX / 2, SK_U8, SK_SUM, NULL);
  f_msg(a->msg[0], c);
  a->rc[1] = sk_broadcast(c, b, o, SIZE_MAX / 2, SK_U8, 0, NULL);
  f_msg(a->msg[1], c);
  return SK_OK;
}

Test(comm_faults, absurd_count_u8_collective_message, .timeout = 30) {
  sr_arg a;
  memset(&a, 0, sizeof a);
  sk_world *w = ct_world(1, CT_CFG_DEFAULT, F_TIMEOUT_MS);
  sk_world_run(w, coll_huge_device, &a, NULL);
  sk_world_destroy(w, NULL);
  for (int q = 0; q < 2; q++) {
    cr_expect_eq(a.rc[q], SK_ERR_INVALID_ARGUMENT, "%s of SIZE_MAX/2 x u8 returned %s", q ? "broadcast" : "allreduce",
                 sk_result_name(a.rc[q]));
    cr_expect(strstr(a.msg[q], "count") != NULL, "%s of SIZE_MAX/2 x u8 (distinct buffers): message '%s' does not "
              "name the count", q ? "broadcast" : "allreduce", a.msg[q]);
  }
}

/* NULL communicator: on the test thread, no world needed. */
Test(comm_faults, null_comm, .timeout = 10) {
  float x[4] = {0}, y[4];
  sk_request *req = (sk_request *)&req;
  sk_comm *out = (sk_comm *)&out;
  int ranks[1] = {0};
  sk_mesh m;
  int dims[1] = {1};
  const char *names[1] = {"dp"};
  cr_assert_eq(sk_mesh_init(&m, 1, dims, names, NULL), SK_OK);
  cr_expect_eq(sk_allreduce(NULL, x, y, 4, SK_F32, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_allgather(NULL, x, y, 1, SK_F32, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce_scatter(NULL, x, y, 1, SK_F32, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_broadcast(NULL, x, y, 4, SK_F32, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce(NULL, x, y, 4, SK_F32, SK_SUM, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_alltoall(NULL, x, y, 1, SK_F32, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_barrier(NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_send(NULL, x, 4, SK_F32, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_recv(NULL, y, 4, SK_F32, 0, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_sendrecv(NULL, x, 4, 0, y, 4, 0, SK_F32, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_iallreduce(NULL, x, y, 4, SK_F32, SK_SUM, &req, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_ibarrier(NULL, &req, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_isend(NULL, x, 4, SK_F32, 0, &req, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_irecv(NULL, y, 4, SK_F32, 0, &req, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_comm_split(NULL, 0, 0, &out, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_comm_create(NULL, 1, ranks, &out, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_comm_split_mesh(NULL, &m, 1u, &out, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_comm_destroy(NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_wait(NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_str_eq(sk_comm_error_message(NULL), "comm is NULL");
  cr_expect_eq(sk_comm_rank(NULL), -1);
  cr_expect_eq(sk_comm_size(NULL), 0);
}

/* One rank alone passes a bad argument (NULL send to allreduce): it is rejected at once, before
   any synchronisation, so the peers' allreduce has a member that never arrives. That rank's
   device function then returns SK_OK: the backend knows it has left, so the peers return
   SK_ERR_MISMATCH naming it (or ABORTED, when the first one's report takes the world down) at
   once, long before the (long) world timeout. */
typedef struct one_arg {
  int n, bad;
  sk_result rc[8];
  double ms[8];
  char msg[8][SK_ERROR_MSG_MAX];
} one_arg;

static sk_result one_bad_device(sk_comm *c, void *pv) {
  one_arg *a = (one_arg *)pv;
  int rank = sk_comm_rank(c);
  float x[4] = {1, 2, 3, 4}, y[4];
  uint64_t t0 = sk_now_ns();
  a->rc[rank] = sk_allreduce(c, rank == a->bad ? NULL : x, y, 4, SK_F32, SK_SUM, NULL);
  a->ms[rank] = ct_ms_since(t0);
  f_msg(a->msg[rank], c);
  return SK_OK; /* the bad rank does not fail its device: the peers must find out by timing out */
}

Test(comm_faults, bad_arg_on_one_rank, .timeout = 30) {
  one_arg a;
  memset(&a, 0, sizeof a);
  a.n = 3, a.bad = 1;
  for (int q = 0; q < a.n; q++) a.rc[q] = SK_RESULT_COUNT; /* never ran: the world fell before it joined */
  sk_world *w = ct_world(a.n, CT_CFG_DEFAULT, CT_TIMEOUT_MS);
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_world_run(w, one_bad_device, &a, NULL);
  double ms = ct_ms_since(t0);
  cr_expect_eq(r, SK_ERR_MISMATCH, "sk_world_run returned %s: %s", sk_result_name(r), sk_world_error_message(w));
  cr_expect(strstr(sk_world_error_message(w), "group rank 1 (world rank 1) has left") != NULL, "world message '%s'",
            sk_world_error_message(w));
  cr_expect_lt(ms, CT_TIMEOUT_MS / 2.0, "the run took %.0f ms (timeout %u ms): the departure was not noticed", ms,
               CT_TIMEOUT_MS);
  cr_expect_eq(a.rc[a.bad], SK_ERR_INVALID_ARGUMENT, "the bad rank returned %s", sk_result_name(a.rc[a.bad]));
  cr_expect(strstr(a.msg[a.bad], "send buffer is NULL") != NULL, "the bad rank's message: '%s'", a.msg[a.bad]);
  cr_expect_lt(a.ms[a.bad], CT_TIMEOUT_MS / 2.0, "the bad rank's rejection took %.0f ms (it must not synchronise)",
               a.ms[a.bad]);
  int named = 0;
  for (int q = 0; q < a.n; q++) {
    if (q == a.bad || a.rc[q] == SK_RESULT_COUNT) continue;
    cr_expect(a.rc[q] == SK_ERR_MISMATCH || a.rc[q] == SK_ERR_ABORTED, "peer %d returned %s", q, sk_result_name(a.rc[q]));
    if (a.rc[q] == SK_ERR_MISMATCH) {
      named++;
      cr_expect(strstr(a.msg[q], "group rank 1 (world rank 1) has left") != NULL, "peer %d: message '%s' does not name rank 1",
                q, a.msg[q]);
    }
  }
  cr_expect_geq(named, 1);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}

/* ============================================================================================ */
/* Timeouts                                                                                     */
/* ============================================================================================ */

/* One rank calls a collective nobody else calls; the others stay in their device function,
   calling nothing, until it has finished (had they returned, the backend would report their
   departure at once: see departed_peers). mode 0: allreduce on the world; 1: ibroadcast + sk_wait; 2: barrier on a sub-communicator
   {0, lonely} that rank 0 never uses; 3: reduce_scatter on the world via sk_test polling. */
typedef struct to_arg {
  int n, lonely, mode;
  atomic_int finished; /* the lonely rank is done */
  sk_result rc;
  double ms;
  char msg[SK_ERROR_MSG_MAX];
  ct_slot slots[4];
} to_arg;

static sk_result lonely_device(sk_comm *c, void *pv) {
  to_arg *a = (to_arg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  sk_comm *sub = NULL;
  if (a->mode == 2) {
    int members[2] = {0, a->lonely};
    sk_result r = sk_comm_create(c, 2, members, &sub, NULL);
    if (!ct_rc(s, r, c, "create")) return r;
  }
  s->ran = 1;
  if (rank != a->lonely) {
    uint64_t t0 = sk_now_ns();
    while (!atomic_load(&a->finished) && sk_now_ns() - t0 < 10000000000ull) ct_sleep_ms(1);
    if (sub) sk_comm_destroy(sub, NULL);
    return SK_OK;
  }
  float x[8] = {0}, y[8 * 4];
  sk_request *req = NULL;
  uint64_t t0 = sk_now_ns();
  sk_comm *cc = c;
  switch (a->mode) {
    case 0: a->rc = sk_allreduce(c, x, y, 8, SK_F32, SK_SUM, NULL); break;
    case 1:
      a->rc = sk_ibroadcast(c, x, y, 8, SK_F32, 0, &req, NULL);
      if (a->rc == SK_OK) a->rc = sk_wait(&req, NULL);
      break;
    case 2: cc = sub, a->rc = sk_barrier(sub, NULL); break;
    default: {
      a->rc = sk_ireduce_scatter(c, y, x, 2, SK_F32, SK_SUM, &req, NULL);
      bool done = false;
      while (a->rc == SK_OK && !done && sk_now_ns() - t0 < 10000000000ull) {
        a->rc = ct_test(&req, &done);
        if (a->rc == SK_OK && !done) ct_sleep_ms(1);
      }
      if (req) sk_wait(&req, NULL);
      (void)n;
      break;
    }
  }
  a->ms = ct_ms_since(t0);
  f_msg(a->msg, cc);
  if (sub) sk_comm_destroy(sub, NULL);
  atomic_store(&a->finished, 1);
  return a->rc;
}

Test(comm_faults, timeout_lonely_collective, .timeout = 30) {
  static const char *const modes[] = {"allreduce", "ibroadcast + wait", "barrier on a sub-communicator",
                                      "ireduce_scatter + test polling"};
  for (int mode = 0; mode < 4; mode++) {
    to_arg a;
    memset(&a, 0, sizeof a);
    a.n = 3, a.lonely = 2, a.mode = mode;
    sk_world *w = ct_world(a.n, CT_CFG_DEFAULT, F_TIMEOUT_MS);
    uint64_t t0 = sk_now_ns();
    sk_result r = sk_world_run(w, lonely_device, &a, NULL);
    double ms = ct_ms_since(t0);
    ct_expect_slots(a.slots, a.n, modes[mode]); /* creation worked; rc recorded separately */
    cr_expect_eq(r, SK_ERR_TIMEOUT, "%s: sk_world_run returned %s: %s", modes[mode], sk_result_name(r),
                 sk_world_error_message(w));
    cr_expect_eq(a.rc, SK_ERR_TIMEOUT, "%s: the lonely rank got %s: '%s'", modes[mode], sk_result_name(a.rc), a.msg);
    cr_expect_geq(a.ms, 100.0, "%s: gave up after %.0f ms, before the %u ms timeout", modes[mode], a.ms, F_TIMEOUT_MS);
    cr_expect_lt(a.ms, F_HUNG_MS, "%s: took %.0f ms to time out (timeout %u ms)", modes[mode], a.ms, F_TIMEOUT_MS);
    cr_expect_lt(ms, F_HUNG_MS, "%s: sk_world_run took %.0f ms", modes[mode], ms);
    /* the missing ranks: world ranks 0 and 1; on the sub-communicator {0, 2}, its rank 0 */
    const char *want = mode == 2 ? "ranks 0 (world rank 0)" : "ranks 0 (world rank 0), 1 (world rank 1)";
    cr_expect(strstr(a.msg, want) != NULL && strstr(a.msg, "timed out") != NULL,
              "%s: message '%s' does not name the missing ranks ('%s')", modes[mode], a.msg, want);
    cr_expect(strstr(sk_world_error_message(w), "timed out") != NULL, "%s: world message '%s'", modes[mode],
              sk_world_error_message(w));
    /* the world can be torn down; a second run on it fails fast instead of hanging */
    to_arg b;
    memset(&b, 0, sizeof b);
    b.n = 3, b.lonely = 2, b.mode = 0;
    t0 = sk_now_ns();
    r = sk_world_run(w, lonely_device, &b, NULL);
    cr_expect(r == SK_ERR_ABORTED || r == SK_ERR_TIMEOUT, "%s: a second run after the timeout returned %s", modes[mode],
              sk_result_name(r));
    cr_expect_lt(ct_ms_since(t0), F_HUNG_MS, "%s: a second run after the timeout took %.0f ms", modes[mode],
                 ct_ms_since(t0));
    cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  }
}

/* A send or recv that no peer matches times out naming the peer. */
typedef struct pt_arg {
  int mode; /* 0: rank 0 recvs from 1; 1: rank 0 sends to 1; 2: rank 0 irecv + wait from 1 */
  atomic_int finished;
  sk_result rc;
  double ms;
  char msg[SK_ERROR_MSG_MAX];
} pt_arg;

static sk_result p2p_timeout_device(sk_comm *c, void *pv) {
  pt_arg *a = (pt_arg *)pv;
  if (sk_comm_rank(c) != 0) { /* stays, posting nothing, until rank 0 is done */
    uint64_t t0 = sk_now_ns();
    while (!atomic_load(&a->finished) && sk_now_ns() - t0 < 10000000000ull) ct_sleep_ms(1);
    return SK_OK;
  }
  float x[4] = {0};
  sk_request *req = NULL;
  uint64_t t0 = sk_now_ns();
  if (a->mode == 0) a->rc = sk_recv(c, x, 4, SK_F32, 1, NULL);
  else if (a->mode == 1) a->rc = sk_send(c, x, 4, SK_F32, 1, NULL);
  else {
    a->rc = sk_irecv(c, x, 4, SK_F32, 1, &req, NULL);
    if (a->rc == SK_OK) a->rc = sk_wait(&req, NULL);
  }
  a->ms = ct_ms_since(t0);
  f_msg(a->msg, c);
  atomic_store(&a->finished, 1);
  return a->rc;
}

Test(comm_faults, timeout_p2p_unmatched, .timeout = 30) {
  static const char *const modes[] = {"recv", "send", "irecv + wait"};
  for (int mode = 0; mode < 3; mode++) {
    pt_arg a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    sk_world *w = ct_world(2, CT_CFG_DEFAULT, F_TIMEOUT_MS);
    sk_result r = sk_world_run(w, p2p_timeout_device, &a, NULL);
    cr_expect_eq(r, SK_ERR_TIMEOUT, "%s: sk_world_run returned %s", modes[mode], sk_result_name(r));
    cr_expect_eq(a.rc, SK_ERR_TIMEOUT, "%s: returned %s: '%s'", modes[mode], sk_result_name(a.rc), a.msg);
    cr_expect(a.ms >= 100.0 && a.ms < F_HUNG_MS, "%s: timed out after %.0f ms (timeout %u ms)", modes[mode], a.ms,
              F_TIMEOUT_MS);
    cr_expect(strstr(a.msg, "rank 1") != NULL, "%s: message '%s' does not name the peer rank 1", modes[mode], a.msg);
    cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  }
}

/* ============================================================================================ */
/* Teardown after abort                                                                         */
/* ============================================================================================ */

typedef struct ab_arg {
  sk_world *w;
  atomic_int entered;
  atomic_int calls;
  sk_result rc[4];
} ab_arg;

static sk_result ab_block_device(sk_comm *c, void *pv) {
  ab_arg *a = (ab_arg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  float x[16] = {0}, y[16];
  atomic_fetch_add(&a->calls, 1);
  atomic_fetch_add(&a->entered, 1);
  /* the last rank waits for a message nobody sends; the others for it in an allreduce */
  a->rc[rank] = rank == n - 1 ? sk_recv(c, y, 16, SK_F32, 0, NULL) : sk_allreduce(c, x, y, 16, SK_F32, SK_SUM, NULL);
  return a->rc[rank];
}

static void *ab_abort_main(void *pv) {
  ab_arg *a = (ab_arg *)pv;
  uint64_t t0 = sk_now_ns();
  while (atomic_load(&a->entered) < 4 && sk_now_ns() - t0 < 5000000000ull) ct_sleep_ms(1);
  ct_sleep_ms(30);
  sk_world_abort(a->w);
  return NULL;
}

Test(comm_faults, teardown_and_rerun_after_abort, .timeout = 30) {
  ab_arg a;
  memset(&a, 0, sizeof a);
  atomic_init(&a.entered, 0);
  atomic_init(&a.calls, 0);
  a.w = ct_world(4, CT_CFG_DEFAULT, 20000); /* long: this must end by the abort, not a timeout */
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, ab_abort_main, &a), 0);
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_world_run(a.w, ab_block_device, &a, NULL);
  pthread_join(th, NULL);
  cr_expect_eq(r, SK_ERR_ABORTED, "the aborted run returned %s", sk_result_name(r));
  cr_expect_lt(ct_ms_since(t0), 10000.0);
  for (int q = 0; q < 4; q++) cr_expect_eq(a.rc[q], SK_ERR_ABORTED, "rank %d returned %s", q, sk_result_name(a.rc[q]));
  /* a second and a third run on the aborted world fail fast */
  for (int k = 0; k < 2; k++) {
    atomic_store(&a.calls, 0);
    t0 = sk_now_ns();
    r = sk_world_run(a.w, ab_block_device, &a, NULL);
    double ms = ct_ms_since(t0);
    cr_expect_eq(r, SK_ERR_ABORTED, "run #%d on the aborted world returned %s", k + 2, sk_result_name(r));
    cr_expect_lt(ms, 10000.0, "run #%d on the aborted world took %.0f ms (timeout 20 s)", k + 2, ms);
  }
  cr_expect_eq(sk_world_destroy(a.w, NULL), SK_OK);
}

/* Aborted before any run: the run fails fast, the device function never gets a communicator,
   teardown works. */
static sk_result ab_count_device(sk_comm *c, void *pv) {
  (void)c;
  atomic_fetch_add(&((ab_arg *)pv)->calls, 1);
  return SK_OK;
}

Test(comm_faults, abort_before_run, .timeout = 30) {
  ab_arg a;
  memset(&a, 0, sizeof a);
  atomic_init(&a.entered, 0);
  atomic_init(&a.calls, 0);
  sk_world *w = ct_world(3, CT_CFG_DEFAULT, 20000);
  sk_world_abort(w);
  cr_expect(sk_world_aborted(w));
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_world_run(w, ab_count_device, &a, NULL);
  cr_expect_eq(r, SK_ERR_ABORTED, "a run on a world aborted before use returned %s", sk_result_name(r));
  cr_expect_lt(ct_ms_since(t0), 2000.0);
  cr_expect_eq(atomic_load(&a.calls), 0, "the device function ran %d times on an aborted world", atomic_load(&a.calls));
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  /* and destroying an aborted world that never ran */
  w = ct_world(2, CT_CFG_DEFAULT, 0);
  sk_world_abort(w);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}
