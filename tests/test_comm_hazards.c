/* test_comm_hazards.c -- faults that used to become memory errors or hangs:
   - sk_world_abort, a timeout, or a failing device in another sub-group while large collectives
     run: every member returns a named error, nobody returns while a peer can still touch its
     buffers (each device frees its buffers the moment its call returns, so a late peer write
     is a use-after-free: a crash in a plain build, an ASan report under make sanitize), and
     abort latency does not grow with the collective's size;
   - a split on one member against a user's collective on the others, and peer access against
     a barrier: SK_ERR_MISMATCH on every member, naming both calls;
   - peers that have left (device function returned, communicator destroyed): reported at once;
   - requests still outstanding at sk_comm_destroy: finished and freed (counted allocator);
   - mismatched redistribution descriptors: SK_ERR_MISMATCH before anything moves;
   - meshes whose axes overflow or hold a zero, and NaN / infinite link models: rejected.
   Device threads never assert: they record, and the test thread asserts afterwards. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <pthread.h>

#include "shardkit.h"
#include "comm_test_util.h"

#define H_N 8
#if defined(__SANITIZE_THREAD__)
#define H_ELEMS (256u << 10) /* TSan: 8x slower memory; 1 MiB per rank still spans many tasks */
#else
#define H_ELEMS (4u << 20) /* 16 MiB of f32 per rank and buffer */
#endif

/* ============================================================================================ */
/* Abort, timeout and failing devices while large collectives run                               */
/* ============================================================================================ */

typedef struct big_arg {
  sk_coll_kind kind;
  int fail_rank;        /* >= 0: this rank returns an error instead of calling (other sub-group) */
  int repeat;           /* calls of the collective (until one fails) */
  atomic_int entered;   /* devices about to call the collective */
  atomic_int done[H_N]; /* calls each rank completed */
  sk_result rc[H_N];
  char msg[H_N][SK_ERROR_MSG_MAX];
} big_arg;

/* Buffer sizes (elements) of one rank for kind with per-rank count c, on n ranks. */
static void big_sizes(sk_coll_kind kind, size_t c, int n, size_t *ns, size_t *nr) {
  *ns = *nr = c;
  if (kind == SK_COLL_ALLGATHER) *nr = c * (size_t)n;
  if (kind == SK_COLL_REDUCE_SCATTER) *ns = c * (size_t)n;
  if (kind == SK_COLL_ALLTOALL) *ns = *nr = c * (size_t)n;
}

static sk_result big_call(sk_comm *c, sk_coll_kind kind, const float *s, float *r, size_t count) {
  switch (kind) {
    case SK_COLL_ALLREDUCE: return sk_allreduce(c, s, r, count, SK_F32, SK_SUM, NULL);
    case SK_COLL_ALLGATHER: return sk_allgather(c, s, r, count, SK_F32, NULL);
    case SK_COLL_REDUCE_SCATTER: return sk_reduce_scatter(c, s, r, count, SK_F32, SK_SUM, NULL);
    case SK_COLL_ALLTOALL: return sk_alltoall(c, s, r, count, SK_F32, NULL);
    default: return sk_broadcast(c, s, r, count, SK_F32, 0, NULL);
  }
}

/* Runs the large collective on comm c; frees the buffers the moment it returns. */
static sk_result big_device(sk_comm *w, void *pv) {
  big_arg *a = (big_arg *)pv;
  int rank = sk_comm_rank(w);
  sk_comm *c = w, *sub = NULL;
  if (a->fail_rank >= 0) { /* two sub-groups: even and odd ranks; the failing rank is odd */
    sk_result r = sk_comm_split(w, rank % 2, rank, &sub, NULL);
    if (r != SK_OK) return a->rc[rank] = r;
    c = sub;
  }
  int n = sk_comm_size(c);
  size_t count = a->kind == SK_COLL_ALLREDUCE || a->kind == SK_COLL_BROADCAST ? H_ELEMS : H_ELEMS / (size_t)n, ns, nr;
  big_sizes(a->kind, count, n, &ns, &nr);
  float *s = (float *)malloc(ns * sizeof(float)), *r = (float *)malloc(nr * sizeof(float));
  if (!s || !r) {
    free(s), free(r);
    if (sub) sk_comm_destroy(sub, NULL);
    return a->rc[rank] = SK_ERR_OUT_OF_MEMORY;
  }
  memset(s, 0, ns * sizeof(float));
  atomic_fetch_add(&a->entered, 1);
  sk_result rc;
  if (rank == a->fail_rank) {
    ct_sleep_ms(3); /* the even group is inside its collective by now */
    rc = SK_ERR_INVALID_USAGE;
  } else if (a->fail_rank >= 0 && rank % 2) {
    rc = sk_barrier(c, NULL); /* the failing rank's group: never completes */
  } else { /* repeated, so that the abort lands mid-collective however late its thread runs */
    rc = SK_OK;
    for (int it = 0; it < a->repeat && rc == SK_OK; it++)
      if ((rc = big_call(c, a->kind, s, r, count)) == SK_OK) atomic_fetch_add(&a->done[rank], 1);
  }
  free(s); /* at once: a peer still writing here would write freed memory */
  free(r);
  a->rc[rank] = rc;
  snprintf(a->msg[rank], SK_ERROR_MSG_MAX, "%s", sk_comm_error_message(c));
  if (sub) sk_comm_destroy(sub, NULL);
  return rc;
}

typedef struct big_abort {
  sk_world *w;
  big_arg *a;
  int done_after_abort[H_N]; /* each rank's completed calls when sk_world_abort had returned */
} big_abort;

static void *big_abort_main(void *pv) {
  big_abort *b = (big_abort *)pv;
  uint64_t t0 = sk_now_ns();
  while (atomic_load(&b->a->entered) < H_N && sk_now_ns() - t0 < 10000000000ull) ct_sleep_ms(1);
  ct_sleep_ms(2);
  sk_world_abort(b->w);
  for (int q = 0; q < H_N; q++) b->done_after_abort[q] = atomic_load(&b->a->done[q]);
  return NULL;
}

static const sk_coll_kind big_kinds[] = {SK_COLL_ALLREDUCE, SK_COLL_ALLGATHER, SK_COLL_REDUCE_SCATTER, SK_COLL_ALLTOALL,
                                         SK_COLL_BROADCAST};

ParameterizedTestParameters(comm_hazards, abort_mid_collective) {
  return cr_make_param_array(sk_coll_kind, (void *)big_kinds, sizeof big_kinds / sizeof big_kinds[0]);
}

/* sk_world_abort from another thread while 8 devices run a large collective. */
ParameterizedTest(sk_coll_kind *kind, comm_hazards, abort_mid_collective, .timeout = 60) {
  static big_arg a;
  memset(&a, 0, sizeof a);
  a.kind = *kind, a.fail_rank = -1, a.repeat = 200;
  sk_world *w = ct_world(H_N, CT_CFG_DEFAULT, 0);
  big_abort b = {w, &a, {0}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, big_abort_main, &b), 0);
  sk_result r = sk_world_run(w, big_device, &a, NULL);
  pthread_join(th, NULL);
  const char *name = sk_coll_kind_name(*kind);
  cr_expect(r == SK_ERR_ABORTED || r == SK_OK, "%s: sk_world_run returned %s", name, sk_result_name(r));
  int aborted = 0;
  for (int q = 0; q < H_N; q++) {
    cr_expect(a.rc[q] == SK_OK || a.rc[q] == SK_ERR_ABORTED, "%s: rank %d returned %s: %s", name, q,
              sk_result_name(a.rc[q]), a.msg[q]);
    if (a.rc[q] == SK_ERR_ABORTED) {
      aborted++;
      cr_expect(strstr(a.msg[q], "aborted") != NULL, "%s: rank %d's message '%s'", name, q, a.msg[q]);
    }
  }
  /* 200 rounds of 8 x 16 MiB outlast the abort thread's start; tasks stop at the next block,
     not at the collective's end */
  cr_expect_gt(aborted, 0, "%s: the abort came after the collectives had finished", name);
  /* Counted, not timed (a loaded machine stretches any time bound): once sk_world_abort has
     returned, a rank may still finish the call it is in (if it was past its last block), but
     starts no new one successfully. */
  for (int q = 0; q < H_N; q++) {
    int more = atomic_load(&a.done[q]) - b.done_after_abort[q];
    cr_expect_leq(more, 1, "%s: rank %d completed %d calls after the abort", name, q, more);
  }
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}

/* A device of the other sub-group fails while the even group runs a large AllReduce. */
Test(comm_hazards, failing_device_in_other_group, .timeout = 60) {
  static big_arg a;
  memset(&a, 0, sizeof a);
  a.kind = SK_COLL_ALLREDUCE, a.fail_rank = 3, a.repeat = 1;
  sk_world *w = ct_world(H_N, CT_CFG_DEFAULT, 0);
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_world_run(w, big_device, &a, NULL);
  double ms = ct_ms_since(t0);
  /* Rank 3 destroys its sub-communicator on the way out: its group may notice that departure
     (MISMATCH naming world rank 3) before the device's own error takes the world down. */
  const char *why = sk_world_error_message(w);
  cr_expect(r == SK_ERR_INVALID_USAGE || r == SK_ERR_MISMATCH, "sk_world_run returned %s: %s", sk_result_name(r), why);
  cr_expect(strstr(why, "device 3 returned SK_ERR_INVALID_USAGE") || strstr(why, "(world rank 3) has left"),
            "world message '%s'", why);
  for (int q = 0; q < H_N; q++)
    if (q != a.fail_rank)
      cr_expect(a.rc[q] == SK_OK || a.rc[q] == SK_ERR_ABORTED || (q % 2 && a.rc[q] == SK_ERR_MISMATCH),
                "rank %d returned %s: %s", q, sk_result_name(a.rc[q]), a.msg[q]);
  cr_expect_lt(ms, CT_TIMEOUT_MS / 2.0, "the run took %.0f ms (timeout %u ms)", ms, CT_TIMEOUT_MS);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}

/* A world timeout of 1 ms against large collectives: some member times out (at arrival or while
   peers' tasks run), the world goes down, and everyone returns without touching freed memory. */
Test(comm_hazards, timeout_mid_collective, .timeout = 60) {
  for (int i = 0; i < 3; i++) {
    static big_arg a;
    memset(&a, 0, sizeof a);
    a.kind = big_kinds[i], a.fail_rank = -1, a.repeat = 1;
    sk_world *w = ct_world(H_N, CT_CFG_DEFAULT, 1);
    uint64_t t0 = sk_now_ns();
    sk_result r = sk_world_run(w, big_device, &a, NULL);
    double ms = ct_ms_since(t0);
    const char *name = sk_coll_kind_name(a.kind);
    cr_expect(r == SK_ERR_TIMEOUT || r == SK_OK, "%s: sk_world_run returned %s: %s", name, sk_result_name(r),
              sk_world_error_message(w));
    for (int q = 0; q < H_N; q++)
      cr_expect(a.rc[q] == SK_OK || a.rc[q] == SK_ERR_ABORTED || a.rc[q] == SK_ERR_TIMEOUT, "%s: rank %d returned %s", name,
                q, sk_result_name(a.rc[q]));
    cr_expect_lt(ms, CT_TIMEOUT_MS / 2.0, "%s: the run took %.0f ms", name, ms);
    cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  }
}

/* ============================================================================================ */
/* Internal agreement traffic is never confused with user calls                                */
/* ============================================================================================ */

typedef struct conf_arg {
  int odd;    /* the rank that makes the internal call */
  int which;  /* 0: split vs allgather(3, i64); 1: peer access vs barrier */
  sk_result rc[4], after[4];
  char msg[4][SK_ERROR_MSG_MAX];
} conf_arg;

static void conf_peer_fn(void *ctx, const void *const *peers) { (void)ctx, (void)peers; }

static sk_result conf_device(sk_comm *c, void *pv) {
  conf_arg *a = (conf_arg *)pv;
  int rank = sk_comm_rank(c);
  int64_t mine[3] = {rank, rank, rank}, all[3 * 4];
  sk_comm *sub = NULL;
  if (rank == a->odd)
    a->rc[rank] = a->which == 0 ? sk_comm_split(c, 0, rank, &sub, NULL) : sk_comm_peer_access(c, mine, conf_peer_fn, NULL, NULL);
  else
    a->rc[rank] = a->which == 0 ? sk_allgather(c, mine, all, 3, SK_I64, NULL) : sk_barrier(c, NULL);
  snprintf(a->msg[rank], SK_ERROR_MSG_MAX, "%s", sk_comm_error_message(c));
  if (sub) sk_comm_destroy(sub, NULL);
  /* the members still agree on the sequence: a matching call works */
  float x = 1, y = 0;
  a->after[rank] = sk_allreduce(c, &x, &y, 1, SK_F32, SK_SUM, NULL);
  return SK_OK;
}

Test(comm_hazards, internal_calls_never_match_user_calls, .timeout = 30) {
  for (int which = 0; which < 2; which++)
    for (int odd = 0; odd < 3; odd++) {
      conf_arg a;
      memset(&a, 0, sizeof a);
      a.odd = odd, a.which = which;
      ct_run(3, CT_CFG_DEFAULT, conf_device, &a, "internal vs user");
      const char *internal = which ? "peer_access" : "comm_split", *user = which ? "barrier" : "allgather(count 3, i64";
      for (int q = 0; q < 3; q++) {
        cr_expect_eq(a.rc[q], SK_ERR_MISMATCH, "%s on rank %d: rank %d returned %s: %s", internal, odd, q,
                     sk_result_name(a.rc[q]), a.msg[q]);
        cr_expect(strstr(a.msg[q], internal) && strstr(a.msg[q], user), "%s on rank %d: rank %d's message '%s'",
                  internal, odd, q, a.msg[q]);
        cr_expect_eq(a.after[q], SK_OK, "%s on rank %d: rank %d's next allreduce returned %s", internal, odd, q,
                     sk_result_name(a.after[q]));
      }
    }
}

/* ============================================================================================ */
/* Peers that have left                                                                         */
/* ============================================================================================ */

typedef struct gone_arg {
  int mode; /* 0: world allreduce; 1: recv from a departed rank; 2: sub-comm barrier after a peer destroyed it */
  atomic_int done;
  sk_result rc;
  double ms;
  char msg[SK_ERROR_MSG_MAX];
} gone_arg;

static sk_result gone_device(sk_comm *c, void *pv) {
  gone_arg *a = (gone_arg *)pv;
  int rank = sk_comm_rank(c);
  sk_comm *sub = NULL;
  if (a->mode == 2 && sk_comm_split(c, 0, rank, &sub, NULL) != SK_OK) return SK_ERR_INTERNAL;
  if (rank != 2) {
    if (a->mode != 2) return SK_OK; /* leaves at once */
    sk_comm_destroy(sub, NULL);           /* leaves the sub-group only; stays in the world */
    uint64_t t0 = sk_now_ns();
    while (!atomic_load(&a->done) && sk_now_ns() - t0 < 10000000000ull) ct_sleep_ms(1);
    return SK_OK;
  }
  float x[4] = {0}, y[4];
  uint64_t t0 = sk_now_ns();
  sk_comm *cc = a->mode == 2 ? sub : c;
  a->rc = a->mode == 0 ? sk_allreduce(c, x, y, 4, SK_F32, SK_SUM, NULL) : a->mode == 1 ? sk_recv(c, y, 4, SK_F32, 0, NULL) : sk_barrier(sub, NULL);
  a->ms = ct_ms_since(t0);
  snprintf(a->msg, sizeof a->msg, "%s", sk_comm_error_message(cc));
  atomic_store(&a->done, 1);
  if (sub) sk_comm_destroy(sub, NULL);
  return a->rc;
}

Test(comm_hazards, departed_peers_reported_at_once, .timeout = 30) {
  static const char *const modes[] = {"allreduce", "recv", "barrier on a sub-communicator"};
  for (int mode = 0; mode < 3; mode++) {
    gone_arg a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    sk_world *w = ct_world(3, CT_CFG_DEFAULT, 0); /* 10 s: a timeout would show in the time */
    sk_result r = sk_world_run(w, gone_device, &a, NULL);
    cr_expect_eq(r, SK_ERR_MISMATCH, "%s: sk_world_run returned %s: %s", modes[mode], sk_result_name(r),
                 sk_world_error_message(w));
    cr_expect_eq(a.rc, SK_ERR_MISMATCH, "%s: returned %s: '%s'", modes[mode], sk_result_name(a.rc), a.msg);
    /* ranks 0 and 1 both left: the message names one of them */
    cr_expect(strstr(a.msg, "has left") && (strstr(a.msg, "rank 0") || (mode != 1 && strstr(a.msg, "rank 1"))),
              "%s: message '%s' does not name a departed rank", modes[mode], a.msg);
    cr_expect_lt(a.ms, CT_TIMEOUT_MS / 2.0, "%s: the departure took %.0f ms to notice (timeout %u ms)", modes[mode], a.ms,
                 CT_TIMEOUT_MS);
    cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  }
}

/* ============================================================================================ */
/* Requests outstanding at sk_comm_destroy                                                      */
/* ============================================================================================ */

static atomic_long h_live; /* allocations not yet freed */

static void *h_alloc(void *user, size_t size, size_t align) {
  (void)user;
  void *p = aligned_alloc(align, (size + align - 1) / align * align);
  if (p) atomic_fetch_add(&h_live, 1);
  return p;
}

static void h_free(void *user, void *p) {
  (void)user;
  if (p) atomic_fetch_sub(&h_live, 1);
  free(p);
}

static sk_result outstanding_device(sk_comm *c, void *pv) {
  ct_slot *s = &((ct_slot *)pv)[sk_comm_rank(c)];
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split(c, 0, rank, &sub, NULL);
  if (!ct_rc(s, r, c, "split")) return r;
  static float x[4][64], y[4][3][64], p2p[4][64];
  sk_request *req[5] = {NULL};
  for (int k = 0; k < 3; k++) ct_rc(s, sk_iallreduce(sub, x[rank], y[rank][k], 64, SK_F32, SK_SUM, &req[k], NULL), sub, "iallreduce");
  ct_rc(s, sk_isend(sub, x[rank], 64, SK_F32, (rank + 1) % n, &req[3], NULL), sub, "isend");
  ct_rc(s, sk_irecv(sub, p2p[rank], 64, SK_F32, (rank + n - 1) % n, &req[4], NULL), sub, "irecv");
  ct_rc(s, sk_comm_destroy(sub, NULL), c, "destroy with 5 requests outstanding"); /* finishes and frees them */
  s->ran = 1;
  return SK_OK;
}

/* Runs fn on 4 devices whose allocations are counted: every device reaches its end, nothing leaks. */
static void h_run(sk_device_fn fn, const char *label) {
  atomic_store(&h_live, 0);
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 4, d.backend = sk_threads_backend(), d.timeout_ms = CT_TIMEOUT_MS;
  d.allocator.alloc = h_alloc, d.allocator.free = h_free;
  sk_world *w = NULL;
  cr_assert_eq(sk_world_create(&d, &w, NULL), SK_OK);
  ct_slot slots[4];
  memset(slots, 0, sizeof slots);
  cr_expect_eq(sk_world_run(w, fn, slots, NULL), SK_OK, "%s", sk_world_error_message(w));
  ct_expect_slots(slots, 4, label);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  cr_expect_eq(atomic_load(&h_live), 0, "%ld allocations leaked", atomic_load(&h_live));
}

Test(comm_hazards, requests_outstanding_at_destroy, .timeout = 30) { h_run(outstanding_device, "outstanding at destroy"); }

/* A Send or Recv no peer ever matched, still posted when its communicator is destroyed: the
   destroy drops it and returns (it once waited forever for a completion that could not come). */
static sk_result unmatched_device(sk_comm *c, void *pv) {
  ct_slot *s = &((ct_slot *)pv)[sk_comm_rank(c)];
  int rank = sk_comm_rank(c);
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split(c, 0, rank, &sub, NULL);
  if (!ct_rc(s, r, c, "split")) return r;
  static float buf[4][64];
  sk_request *req = NULL;
  if (rank == 0) ct_rc(s, sk_isend(sub, buf[0], 64, SK_F32, 1, &req, NULL), sub, "isend");
  if (rank == 2) ct_rc(s, sk_irecv(sub, buf[2], 64, SK_F32, 3, &req, NULL), sub, "irecv");
  ct_rc(s, sk_comm_destroy(sub, NULL), c, "destroy with an unmatched post");
  s->ran = 1;
  return SK_OK;
}

Test(comm_hazards, unmatched_post_at_destroy, .timeout = 30) { h_run(unmatched_device, "unmatched post at destroy"); }

/* ============================================================================================ */
/* Peer access                                                                                  */
/* ============================================================================================ */

typedef struct pa_ctx {
  int n;
  int64_t sum; /* of every member's offered value */
} pa_ctx;

static void pa_fn(void *pv, const void *const *peers) {
  pa_ctx *c = (pa_ctx *)pv;
  for (int i = 0; i < c->n; i++) c->sum += *(const int64_t *)peers[i] * (i + 1);
}

static sk_result pa_device(sk_comm *c, void *pv) {
  ct_slot *s = &((ct_slot *)pv)[sk_comm_rank(c)];
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  for (int round = 0; round < 50; round++) {
    int64_t mine = rank * 1000 + round;
    pa_ctx ctx = {n, 0};
    if (!ct_rc(s, sk_comm_peer_access(c, &mine, pa_fn, &ctx, NULL), c, "peer_access")) return SK_ERR_INTERNAL;
    int64_t want = 0;
    for (int i = 0; i < n; i++) want += (int64_t)(i * 1000 + round) * (i + 1);
    ct_check(s, ctx.sum == want, "rank %d round %d: sum %lld, want %lld", rank, round, (long long)ctx.sum,
             (long long)want);
  }
  ct_check(s, sk_comm_peer_access(c, NULL, NULL, NULL, NULL) == SK_ERR_INVALID_ARGUMENT, "NULL fn accepted");
  s->ran = 1;
  return SK_OK;
}

Test(comm_hazards, peer_access_reads_every_member, .timeout = 30) {
  for (int n = 1; n <= 5; n += 2) {
    ct_slot slots[5];
    memset(slots, 0, sizeof slots);
    ct_run(n, CT_CFG_DEFAULT, pa_device, slots, "peer access");
    ct_expect_slots(slots, n, "peer access");
  }
}

/* ============================================================================================ */
/* Mismatched redistribution descriptors                                                        */
/* ============================================================================================ */

typedef struct rd_arg {
  sk_result rc[2];
  char msg[2][SK_ERROR_MSG_MAX];
} rd_arg;

static sk_result rd_device(sk_comm *c, void *pv) {
  rd_arg *a = (rd_arg *)pv;
  int rank = sk_comm_rank(c);
  sk_mesh m;
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  int64_t shape[2] = {rank ? 16 : 8, 8}; /* rank 1 thinks the tensor is twice as tall */
  if (sk_mesh_parse(&m, "dp=2", NULL) || sk_layout_parse(&d.from, &m, "dp,None", 2, shape, NULL) ||
      sk_layout_parse(&d.to, &m, "None,dp", 2, shape, NULL))
    return a->rc[rank] = SK_ERR_INTERNAL;
  d.dtype = SK_F32;
  size_t elems = (size_t)(shape[0] * shape[1] / 2);
  float *src = (float *)calloc(elems, sizeof(float)), *dst = (float *)calloc(elems, sizeof(float));
  sk_error err;
  memset(&err, 0, sizeof err);
  a->rc[rank] = sk_redist(c, &d, src, elems, dst, elems, &err);
  snprintf(a->msg[rank], SK_ERROR_MSG_MAX, "%s", err.msg);
  free(src);
  free(dst);
  return SK_OK;
}

Test(comm_hazards, redist_descriptors_differ, .timeout = 30) {
  rd_arg a;
  memset(&a, 0, sizeof a);
  ct_run(2, CT_CFG_DEFAULT, rd_device, &a, "redist mismatch");
  for (int q = 0; q < 2; q++) {
    cr_expect_eq(a.rc[q], SK_ERR_MISMATCH, "rank %d returned %s: %s", q, sk_result_name(a.rc[q]), a.msg[q]);
    cr_expect(strstr(a.msg[q], "ranks 0 and 1 hold different plans") != NULL, "rank %d's message '%s'", q, a.msg[q]);
  }
}

/* ============================================================================================ */
/* Meshes and link models                                                                       */
/* ============================================================================================ */

Test(comm_hazards, mesh_axes_that_overflow, .timeout = 10) {
  const int dims[3] = {2731, 251587083, 53695721};
  const char *const names[3] = {"a", "b", "c"};
  sk_mesh m;
  sk_error e;
  memset(&e, 0, sizeof e);
  cr_expect_eq(sk_mesh_init(&m, 3, dims, names, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "axis 'b'") != NULL, "message '%s' does not name axis b", e.msg);
  const int big[2] = {INT32_MAX, INT32_MAX};
  cr_expect_eq(sk_mesh_init(&m, 2, big, names, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "axis 'a'") != NULL, "message '%s'", e.msg);
}

/* A mesh filled by hand with a zero dim: every rank passes it, every rank gets the error. */
static sk_result zero_dim_device(sk_comm *c, void *pv) {
  ct_slot *s = &((ct_slot *)pv)[sk_comm_rank(c)];
  sk_mesh m;
  memset(&m, 0, sizeof m);
  m.naxes = 2, m.dims[0] = 0, m.dims[1] = 4, m.size = 4;
  snprintf(m.names[0], SK_AXIS_NAME_MAX, "x");
  snprintf(m.names[1], SK_AXIS_NAME_MAX, "y");
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split_mesh(c, &m, 1u, &sub, NULL);
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT && !sub, "split_mesh with a zero dim returned %s", sk_result_name(r));
  ct_check(s, strstr(sk_comm_error_message(c), "axis 0") != NULL, "message '%s'", sk_comm_error_message(c));
  int ranks[4], ng, gs;
  ct_check(s, sk_mesh_groups(&m, 1u, ranks, 4, &ng, &gs, NULL) == SK_ERR_INVALID_ARGUMENT, "sk_mesh_groups accepted it");
  s->ran = 1;
  return SK_OK;
}

Test(comm_hazards, mesh_with_zero_dim, .timeout = 10) {
  ct_slot slots[4];
  memset(slots, 0, sizeof slots);
  ct_run(4, CT_CFG_DEFAULT, zero_dim_device, slots, "zero dim");
  ct_expect_slots(slots, 4, "zero dim");
}

Test(comm_hazards, link_model_not_finite, .timeout = 10) {
  const double bad[][2] = {{NAN, 10}, {1, NAN}, {INFINITY, 10}, {1, INFINITY}, {-1, 10}};
  for (int i = 0; i < 5; i++) {
    sk_world_desc d;
    memset(&d, 0, sizeof d);
    d.ndevices = 2, d.backend = sk_threads_backend();
    d.cluster.link.alpha_us = bad[i][0], d.cluster.link.gbps = bad[i][1];
    sk_world *w = NULL;
    sk_error e;
    memset(&e, 0, sizeof e);
    cr_expect_eq(sk_world_create(&d, &w, &e), SK_ERR_INVALID_ARGUMENT, "link {%g, %g} accepted", bad[i][0], bad[i][1]);
    cr_expect(strstr(e.msg, "desc.cluster.link") != NULL, "message '%s'", e.msg);
    cr_expect_null(w);
  }
}

/* The world's link model is readable without reaching into the world record. */
Test(comm_hazards, world_link_query, .timeout = 10) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 2, d.backend = sk_threads_backend(), d.cluster.link.alpha_us = 5, d.cluster.link.gbps = 25;
  sk_world *w = NULL;
  cr_assert_eq(sk_world_create(&d, &w, NULL), SK_OK);
  sk_link_model l = sk_world_cluster(w).link;
  cr_expect(l.alpha_us == 5 && l.gbps == 25, "sk_world_cluster gave {%g, %g}", l.alpha_us, l.gbps);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  l = sk_world_cluster(NULL).link;
  cr_expect(l.alpha_us == 0 && l.gbps == 0, "sk_world_cluster(NULL) gave {%g, %g}", l.alpha_us, l.gbps);
}
