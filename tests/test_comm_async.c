/* test_comm_async.c -- non-blocking collectives, point to point, both entry points, and failure:
   - several outstanding requests per communicator, completing in issue order;
   - sk_test polling; progress without the device thread (a device that does not touch the
     library while its peers' requests complete); overlap with compute;
   - isend/irecv rings and exchanges (both sides send first), blocking pairs, sk_sendrecv rings,
     message order between a pair, blocking and non-blocking calls mixed on one communicator;
   - sk_world_run and bring-your-own-threads (sk_comm_init_rank from the user's pthreads);
   - a failing device aborts its peers, a timeout names the missing rank, sk_world_abort from
     another thread, and bad arguments give SK_ERR_INVALID_ARGUMENT with a message naming them.
   Device threads record into per-rank slots; the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>

#include "shardkit.h"
#include "comm_test_util.h"

typedef struct param {
  int n, cfg;
} param;

/* ---- pending non-blocking operations with their own buffers and expected results -------------- */

enum { P_ALLREDUCE, P_ALLGATHER, P_REDUCE_SCATTER, P_BROADCAST, P_REDUCE, P_ALLTOALL, P_BARRIER, P_NKINDS };
static const char *const p_names[P_NKINDS] = {"iallreduce", "iallgather", "ireduce_scatter", "ibroadcast",
                                              "ireduce",    "ialltoall",  "ibarrier"};

typedef struct pend {
  int kind;
  sk_dtype dt;
  sk_redop op;
  size_t count;
  int root;
  uint64_t seed;
  unsigned char *send, *recv;
  sk_request *req;
} pend;

static sk_result pend_start(sk_comm *c, pend *p) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  size_t es = sk_dtype_size(p->dt), nb = p->count * es, N = (size_t)n;
  int pat = ct_pat_for(p->op);
  /* The request comes back through a local, not &p->req: a pointer into *p would let the call
     (as far as the analyzer knows) overwrite p->send too, losing track of the buffer. */
  sk_request *req = NULL;
  sk_result r;
  p->send = p->recv = NULL;
  p->req = NULL;
  switch (p->kind) {
    case P_ALLREDUCE:
      p->send = ct_buf(nb), p->recv = ct_buf(nb);
      ct_fill(p->dt, pat, p->seed, rank, 0, p->send, p->count);
      r = sk_iallreduce(c, p->send, p->recv, p->count, p->dt, p->op, &req, NULL);
      break;
    case P_ALLGATHER:
      p->send = ct_buf(nb), p->recv = ct_buf(nb * N);
      ct_fill(p->dt, CT_PAT_MOVE, p->seed, rank, 0, p->send, p->count);
      r = sk_iallgather(c, p->send, p->recv, p->count, p->dt, &req, NULL);
      break;
    case P_REDUCE_SCATTER:
      p->send = ct_buf(nb * N), p->recv = ct_buf(nb);
      ct_fill(p->dt, pat, p->seed, rank, 0, p->send, p->count * N);
      r = sk_ireduce_scatter(c, p->send, p->recv, p->count, p->dt, p->op, &req, NULL);
      break;
    case P_BROADCAST:
      p->send = ct_buf(nb), p->recv = ct_buf(nb);
      ct_fill(p->dt, CT_PAT_MOVE, p->seed, rank, 0, p->send, p->count);
      r = sk_ibroadcast(c, p->send, p->recv, p->count, p->dt, p->root, &req, NULL);
      break;
    case P_REDUCE:
      p->send = ct_buf(nb), p->recv = ct_buf(nb);
      ct_fill(p->dt, pat, p->seed, rank, 0, p->send, p->count);
      r = sk_ireduce(c, p->send, p->recv, p->count, p->dt, p->op, p->root, &req, NULL);
      break;
    case P_ALLTOALL:
      p->send = ct_buf(nb * N), p->recv = ct_buf(nb * N);
      ct_fill(p->dt, CT_PAT_MOVE, p->seed, rank, 0, p->send, p->count * N);
      r = sk_ialltoall(c, p->send, p->recv, p->count, p->dt, &req, NULL);
      break;
    default: r = sk_ibarrier(c, &req, NULL); break;
  }
  p->req = req;
  return r;
}

/* After completion: recv must hold the expected result. Frees the buffers. */
static void pend_check(sk_comm *c, pend *p, ct_slot *s, const char *ctx0) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  size_t es = sk_dtype_size(p->dt), nb = p->count * es, N = (size_t)n;
  int pat = ct_pat_for(p->op);
  char ctx[240];
  snprintf(ctx, sizeof ctx, "%s: %s n=%d rank=%d dt=%s op=%s count=%zu root=%d", ctx0, p_names[p->kind], n, rank,
           sk_dtype_name(p->dt), sk_redop_name(p->op), p->count, p->root);
  unsigned char *exp = ct_buf(nb * N + 8);
  switch (p->kind) {
    case P_ALLREDUCE:
      ct_ref_gen(exp, p->dt, p->op, pat, p->seed, n, 0, p->count);
      ct_cmp(s, ctx, "recv", p->dt, p->recv, exp, p->count);
      break;
    case P_ALLGATHER:
      for (int j = 0; j < n; j++) ct_fill(p->dt, CT_PAT_MOVE, p->seed, j, 0, exp + (size_t)j * nb, p->count);
      ct_cmp(s, ctx, "recv", p->dt, p->recv, exp, p->count * N);
      break;
    case P_REDUCE_SCATTER:
      ct_ref_gen(exp, p->dt, p->op, pat, p->seed, n, (size_t)rank * p->count, p->count);
      ct_cmp(s, ctx, "recv", p->dt, p->recv, exp, p->count);
      break;
    case P_BROADCAST:
      ct_fill(p->dt, CT_PAT_MOVE, p->seed, p->root, 0, exp, p->count);
      ct_cmp(s, ctx, "recv", p->dt, p->recv, exp, p->count);
      break;
    case P_REDUCE:
      if (rank == p->root) {
        ct_ref_gen(exp, p->dt, p->op, pat, p->seed, n, 0, p->count);
        ct_cmp(s, ctx, "root's recv", p->dt, p->recv, exp, p->count);
      }
      break;
    case P_ALLTOALL:
      for (int j = 0; j < n; j++)
        ct_fill(p->dt, CT_PAT_MOVE, p->seed, j, (size_t)rank * p->count, exp + (size_t)j * nb, p->count);
      ct_cmp(s, ctx, "recv", p->dt, p->recv, exp, p->count * N);
      break;
    default: break;
  }
  free(exp);
  free(p->send), free(p->recv);
  p->send = p->recv = NULL;
}

/* A failure path's cleanup (pend_check frees on success): completes the request if it is still
   outstanding (its result is moot, the failure is already recorded) since the library may write
   the buffers until then, then frees them. Safe on a pend never started (NULL buffers). */
static void pend_free(pend *p) {
  if (p->req) sk_wait(&p->req, NULL);
  free(p->send), free(p->recv);
  p->send = p->recv = NULL;
}

/* pend_free on ps[0..n-1], in issue order. */
static void pend_free_all(pend *ps, int n) {
  for (int i = 0; i < n; i++) pend_free(&ps[i]);
}

/* A fixed mix of 8 operations (different kinds, dtypes, ops, counts, roots). */
static void pend_mix(pend *ps, int n, uint64_t seed) {
  const pend mix[8] = {
      {P_ALLREDUCE, SK_F32, SK_SUM, 1023, 0, 0, NULL, NULL, NULL},
      {P_ALLGATHER, SK_I32, SK_SUM, 7, 0, 0, NULL, NULL, NULL},
      {P_REDUCE_SCATTER, SK_F64, SK_AVG, 100, 0, 0, NULL, NULL, NULL},
      {P_BROADCAST, SK_U8, SK_SUM, 5000, 1 % n, 0, NULL, NULL, NULL},
      {P_REDUCE, SK_I64, SK_MAX, 33, n - 1, 0, NULL, NULL, NULL},
      {P_ALLTOALL, SK_BF16, SK_SUM, 9, 0, 0, NULL, NULL, NULL},
      {P_BARRIER, SK_U8, SK_SUM, 0, 0, 0, NULL, NULL, NULL},
      {P_ALLREDUCE, SK_F16, SK_AVG, 1, 0, 0, NULL, NULL, NULL},
  };
  for (int i = 0; i < 8; i++) {
    ps[i] = mix[i];
    ps[i].seed = seed + (uint64_t)i;
  }
}

typedef struct aarg {
  int n, cfg;
  ct_slot *slots;
  int mode;
  atomic_int counter;
  atomic_int flags[64];
  double ms[64];
} aarg;

static void aarg_init(aarg *a, int n, int cfg, int mode) {
  memset(a, 0, sizeof *a);
  a->n = n, a->cfg = cfg, a->mode = mode;
  atomic_init(&a->counter, 0);
  for (int i = 0; i < 64; i++) atomic_init(&a->flags[i], 0);
  a->slots = ct_slots_new(n);
}

static void aarg_run(aarg *a, sk_device_fn fn, const char *label) {
  char lab[128];
  snprintf(lab, sizeof lab, "%s n=%d cfg=%s mode=%d", label, a->n, ct_cfg_names[a->cfg], a->mode);
  ct_run(a->n, a->cfg, fn, a, lab);
  ct_expect_slots(a->slots, a->n, lab);
  free(a->slots);
}

/* ---- several outstanding, completing in issue order ------------------------------------------- */

/* mode 0: wait on the LAST request first; then every earlier one must test done at once.
   mode 1: waitall.  mode 2: wait in reverse order.  mode 3: poll all with sk_test. */
static sk_result outstanding_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  char ctx[96];
  for (int round = 0; round < 3; round++) {
    pend ps[8];
    pend_mix(ps, n, 1000u * (uint64_t)round + 7u);
    snprintf(ctx, sizeof ctx, "outstanding mode %d round %d cfg=%s", a->mode, round, ct_cfg_names[a->cfg]);
    sk_result r = SK_OK;
    for (int i = 0; i < 8 && r == SK_OK; i++) r = pend_start(c, &ps[i]);
    if (!ct_rc(s, r, c, ctx)) { pend_free_all(ps, 8); return r; }
    if (a->mode == 0) {
      r = sk_wait(&ps[7].req, NULL);
      if (!ct_rc(s, r, c, ctx)) { pend_free_all(ps, 8); return r; }
      for (int i = 0; i < 7; i++) {
        bool done = false;
        r = ct_test(&ps[i].req, &done);
        if (!ct_rc(s, r, c, ctx)) { pend_free_all(ps, 8); return r; }
        ct_check(s, done && ps[i].req == NULL, "%s rank %d: request %d (%s) not done after request 7 completed", ctx,
                 rank, i, p_names[ps[i].kind]);
        if (!done) r = sk_wait(&ps[i].req, NULL);
      }
    } else if (a->mode == 1) {
      sk_request *reqs[8];
      for (int i = 0; i < 8; i++) reqs[i] = ps[i].req;
      r = sk_waitall(8, reqs, NULL);
      for (int i = 0; i < 8; i++) {
        ct_check(s, reqs[i] == NULL, "%s rank %d: waitall left request %d set", ctx, rank, i);
        ps[i].req = NULL;
      }
    } else if (a->mode == 2) {
      for (int i = 7; i >= 0 && r == SK_OK; i--) r = sk_wait(&ps[i].req, NULL);
    } else {
      uint64_t deadline = sk_now_ns() + 20000000000ull;
      int left = 8;
      while (left > 0 && r == SK_OK && sk_now_ns() < deadline) {
        for (int i = 0; i < 8 && r == SK_OK; i++) {
          if (!ps[i].req) continue;
          bool done = false;
          r = ct_test(&ps[i].req, &done);
          if (!done) continue;
          left--;
          /* issue order: once i is seen done, every earlier request must test done now */
          for (int j = 0; j < i && r == SK_OK; j++) {
            if (!ps[j].req) continue;
            bool dj = false;
            r = ct_test(&ps[j].req, &dj);
            ct_check(s, dj, "%s rank %d: request %d (%s) done while the earlier request %d (%s) is not", ctx, rank, i,
                     p_names[ps[i].kind], j, p_names[ps[j].kind]);
            left -= dj;
          }
        }
      }
      ct_check(s, left == 0, "%s rank %d: %d requests still pending after 20 s of sk_test", ctx, rank, left);
      for (int i = 0; i < 8; i++) sk_wait(&ps[i].req, NULL);
    }
    if (!ct_rc(s, r, c, ctx)) { pend_free_all(ps, 8); return r; }
    for (int i = 0; i < 8; i++) pend_check(c, &ps[i], s, ctx);
  }
  s->ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_async, outstanding_in_order) {
  static param ps[] = {{1, 0}, {2, 0}, {3, 0}, {8, 0}, {2, 1}, {3, 1}, {8, 1}, {5, 2}, {5, 3}, {8, 3}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
/* param.cfg doubles as the wait mode here; configs alternate with it */
ParameterizedTest(param *p, comm_async, outstanding_in_order, .timeout = 30) {
  aarg a;
  aarg_init(&a, p->n, p->cfg % 2 ? CT_CFG_LARGE : CT_CFG_DEFAULT, p->cfg);
  aarg_run(&a, outstanding_device, "outstanding_in_order");
}

/* ---- progress without the device thread ------------------------------------------------------- */

/* Every device starts an iallreduce and spins on sk_test (no wait), bounded. */
static sk_result spin_test_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  for (int round = 0; round < 4; round++) {
    pend p = {P_ALLREDUCE, round % 2 ? SK_F32 : SK_I32, SK_SUM, round < 2 ? 17 : 30011, 0, 300u + (uint64_t)round,
              NULL, NULL, NULL};
    char ctx[64];
    snprintf(ctx, sizeof ctx, "spin on sk_test round %d", round);
    sk_result r = pend_start(c, &p);
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p); return r; }
    bool done = false;
    long polls = 0;
    uint64_t t0 = sk_now_ns();
    while (!done && r == SK_OK && sk_now_ns() - t0 < 20000000000ull) {
      r = ct_test(&p.req, &done);
      polls++;
    }
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p); return r; }
    if (!ct_check(s, done, "%s n=%d rank %d: not done after %ld polls over 20 s", ctx, n, rank, polls)) {
      pend_free(&p);
      return SK_ERR_TIMEOUT;
    }
    ct_check(s, p.req == NULL, "%s rank %d: sk_test reported done but left *req set", ctx, rank);
    pend_check(c, &p, s, ctx);
  }
  s->ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_async, spin_on_test) {
  static param ps[] = {{1, CT_CFG_DEFAULT}, {2, CT_CFG_DEFAULT}, {3, CT_CFG_LARGE}, {8, CT_CFG_DEFAULT}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, spin_on_test, .timeout = 30) {
  aarg a;
  aarg_init(&a, p->n, p->cfg, 0);
  aarg_run(&a, spin_test_device, "spin_on_test");
}

/* One device (the "late" one, also the broadcast root) starts its requests and then does not
   touch the library at all -- it sleeps -- until every peer has seen its own requests complete
   through sk_test. Only then does it wait. If the collectives needed the late device's thread
   to progress, the peers would never complete. mode 0: iallreduce; mode 1: ibroadcast from the
   late rank + iallgather; mode 2: the late rank is the last rank and starts three requests. */
static sk_result late_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  int late = a->mode == 2 ? n - 1 : n / 2;
  pend ps[3];
  int np = 0;
  if (a->mode == 0) {
    ps[np++] = (pend){P_ALLREDUCE, SK_F32, SK_SUM, 4099, 0, 501, NULL, NULL, NULL};
  } else if (a->mode == 1) {
    ps[np++] = (pend){P_BROADCAST, SK_I32, SK_SUM, 777, late, 502, NULL, NULL, NULL};
    ps[np++] = (pend){P_ALLGATHER, SK_F64, SK_SUM, 55, 0, 503, NULL, NULL, NULL};
  } else {
    ps[np++] = (pend){P_ALLREDUCE, SK_BF16, SK_AVG, 301, 0, 504, NULL, NULL, NULL};
    ps[np++] = (pend){P_ALLTOALL, SK_I8, SK_SUM, 13, 0, 505, NULL, NULL, NULL};
    ps[np++] = (pend){P_REDUCE, SK_F32, SK_MIN, 64, late, 506, NULL, NULL, NULL};
  }
  char ctx[64];
  snprintf(ctx, sizeof ctx, "late device %d mode %d", late, a->mode);
  sk_result r = SK_OK;
  for (int i = 0; i < np && r == SK_OK; i++) r = pend_start(c, &ps[i]);
  if (!ct_rc(s, r, c, ctx)) { pend_free_all(ps, np); return r; }
  if (rank == late) {
    uint64_t t0 = sk_now_ns();
    while (atomic_load(&a->counter) < n - 1 && sk_now_ns() - t0 < 15000000000ull) ct_sleep_ms(1);
    int others = atomic_load(&a->counter);
    ct_check(s, others == n - 1,
             "%s: only %d of %d peers completed while the late device was away from the library (%.0f ms)", ctx,
             others, n - 1, ct_ms_since(t0));
    for (int i = 0; i < np && r == SK_OK; i++) r = sk_wait(&ps[i].req, NULL);
  } else {
    uint64_t t0 = sk_now_ns();
    int left = np;
    while (left > 0 && r == SK_OK && sk_now_ns() - t0 < 15000000000ull) {
      for (int i = 0; i < np && r == SK_OK; i++) {
        if (!ps[i].req) continue;
        bool done = false;
        r = ct_test(&ps[i].req, &done);
        left -= done;
      }
      if (left) ct_sleep_ms(1);
    }
    ct_check(s, left == 0, "%s rank %d: %d requests did not complete while the late device slept", ctx, rank, left);
    atomic_fetch_add(&a->counter, 1);
    for (int i = 0; i < np; i++) {
      sk_result r2 = sk_wait(&ps[i].req, NULL);
      if (r == SK_OK) r = r2;
    }
  }
  if (!ct_rc(s, r, c, ctx)) { pend_free_all(ps, np); return r; }
  for (int i = 0; i < np; i++) pend_check(c, &ps[i], s, ctx);
  s->ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_async, progress_without_device_thread) {
  static param ps[] = {{2, 0}, {3, 0}, {8, 0}, {3, 1}, {8, 1}, {5, 2}, {8, 2}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, progress_without_device_thread, .timeout = 30) {
  aarg a;
  aarg_init(&a, p->n, p->n == 8 && p->cfg == 0 ? CT_CFG_LARGE : CT_CFG_DEFAULT, p->cfg);
  aarg_run(&a, late_device, "progress_without_device_thread");
}

/* A device starts an iallreduce, computes on other memory, then waits. */
static sk_result overlap_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c);
  ct_slot *s = &a->slots[rank];
  for (int round = 0; round < 2; round++) {
    pend p = {P_ALLREDUCE, SK_F32, round == 1 ? SK_AVG : SK_SUM, 30011, 0, 700u + (uint64_t)round, NULL, NULL, NULL};
    sk_result r = pend_start(c, &p);
    if (!ct_rc(s, r, c, "overlap: start")) { pend_free(&p); return r; }
    /* compute that touches neither buffer */
    const size_t m = 50000;
    uint32_t *work = (uint32_t *)malloc(m * sizeof(uint32_t));
    uint32_t x = (uint32_t)rank * 2654435761u + (uint32_t)round, sum = 0;
    for (int pass = 0; pass < 4; pass++)
      for (size_t i = 0; i < m; i++) {
        x = x * 1664525u + 1013904223u;
        work[i] = pass ? work[i] ^ x : x;
      }
    for (size_t i = 0; i < m; i++) sum += work[i];
    uint32_t y = (uint32_t)rank * 2654435761u + (uint32_t)round, sum2 = 0;
    for (int pass = 0; pass < 4; pass++)
      for (size_t i = 0; i < m; i++) {
        y = y * 1664525u + 1013904223u;
        work[i] = pass ? work[i] ^ y : y;
      }
    for (size_t i = 0; i < m; i++) sum2 += work[i];
    free(work);
    ct_check(s, sum == sum2, "overlap rank %d: compute result changed while the collective ran", rank);
    r = sk_wait(&p.req, NULL);
    if (!ct_rc(s, r, c, "overlap: wait")) { pend_free(&p); return r; }
    pend_check(c, &p, s, "overlap");
  }
  s->ran = 1;
  return SK_OK;
}

Test(comm_async, overlap_compute, .timeout = 30) {
  aarg a;
  aarg_init(&a, 8, CT_CFG_DEFAULT, 0);
  aarg_run(&a, overlap_device, "overlap_compute");
  aarg_init(&a, 3, CT_CFG_LARGE, 0);
  aarg_run(&a, overlap_device, "overlap_compute");
}

/* ---- point to point ------------------------------------------------------------------------- */

static int32_t p2p_val(int from, int to, int msg, size_t i) { return from * 1000000 + to * 10000 + msg * 1000 + (int32_t)(i % 1000); }

/* Ring: isend to r+1 and irecv from r-1 (mode 0: send first; mode 1: recv first), then wait. */
static sk_result ring_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  /* 700001: a message of 11 chunks with a short tail, copied by both sides (sk__tp2p_copy) */
  static const size_t counts[] = {1, 0, 1001, 40000, 700001};
  for (int k = 0; k < 5; k++) {
    size_t count = counts[k];
    int to = (rank + 1) % n, from = (rank + n - 1) % n;
    int32_t *out = (int32_t *)malloc((count + 1) * sizeof(int32_t)), *in = (int32_t *)malloc((count + 1) * sizeof(int32_t));
    for (size_t i = 0; i < count; i++) out[i] = p2p_val(rank, to, k, i), in[i] = -1;
    sk_request *reqs[2] = {NULL, NULL};
    sk_result r;
    if (a->mode == 0) {
      r = sk_isend(c, out, count, SK_I32, to, &reqs[0], NULL);
      if (r == SK_OK) r = sk_irecv(c, in, count, SK_I32, from, &reqs[1], NULL);
    } else {
      r = sk_irecv(c, in, count, SK_I32, from, &reqs[1], NULL);
      if (r == SK_OK) r = sk_isend(c, out, count, SK_I32, to, &reqs[0], NULL);
    }
    sk_result r2 = sk_waitall(2, reqs, NULL);
    if (r == SK_OK) r = r2;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "ring mode %d n=%d rank %d count %zu", a->mode, n, rank, count);
    if (ct_rc(s, r, c, ctx)) {
      size_t bad = 0;
      for (size_t i = 0; i < count; i++) bad += in[i] != p2p_val(from, rank, k, i);
      ct_check(s, bad == 0, "%s: %zu wrong elements from rank %d", ctx, bad, from);
    }
    free(out), free(in);
    if (r != SK_OK) return r;
  }
  s->ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_async, isend_irecv_ring) {
  static param ps[] = {{2, 0}, {3, 0}, {5, 0}, {8, 0}, {16, 0}, {2, 1}, {5, 1}, {8, 1}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, isend_irecv_ring, .timeout = 30) {
  aarg a;
  aarg_init(&a, p->n, CT_CFG_DEFAULT, p->cfg);
  aarg_run(&a, ring_device, "isend_irecv_ring");
}

/* Pairs (r, r^1) exchange: both isend first, then receive -- mode 0 with irecv + waitall, mode 1
   with a BLOCKING recv while the isend is outstanding, mode 2 blocking send/recv ordered by
   parity (even sends first, odd receives first). Then message order: several isends of one
   pair arrive in order. */
static sk_result exchange_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  int peer = rank ^ 1;
  if (peer >= n) { /* odd n: the last rank sits out */
    s->ran = 1;
    return SK_OK;
  }
  char ctx[96];
  sk_result r = SK_OK;
  for (int k = 0; k < 4 && r == SK_OK; k++) {
    size_t count = k == 0 ? 5 : k == 1 ? 1 : k == 2 ? 30001 : 300001; /* the last in chunks */
    int32_t *out = (int32_t *)malloc(count * sizeof(int32_t)), *in = (int32_t *)malloc(count * sizeof(int32_t));
    for (size_t i = 0; i < count; i++) out[i] = p2p_val(rank, peer, k, i), in[i] = -1;
    snprintf(ctx, sizeof ctx, "exchange mode %d n=%d rank %d<->%d count %zu", a->mode, n, rank, peer, count);
    if (a->mode == 0) {
      sk_request *reqs[2] = {NULL, NULL};
      r = sk_isend(c, out, count, SK_I32, peer, &reqs[0], NULL);
      if (r == SK_OK) r = sk_irecv(c, in, count, SK_I32, peer, &reqs[1], NULL);
      sk_result r2 = sk_waitall(2, reqs, NULL);
      if (r == SK_OK) r = r2;
    } else if (a->mode == 1) {
      sk_request *req = NULL;
      r = sk_isend(c, out, count, SK_I32, peer, &req, NULL);
      if (r == SK_OK) r = sk_recv(c, in, count, SK_I32, peer, NULL);
      sk_result r2 = sk_wait(&req, NULL);
      if (r == SK_OK) r = r2;
    } else {
      if (rank % 2 == 0) {
        r = sk_send(c, out, count, SK_I32, peer, NULL);
        if (r == SK_OK) r = sk_recv(c, in, count, SK_I32, peer, NULL);
      } else {
        r = sk_recv(c, in, count, SK_I32, peer, NULL);
        if (r == SK_OK) r = sk_send(c, out, count, SK_I32, peer, NULL);
      }
    }
    if (ct_rc(s, r, c, ctx)) {
      size_t bad = 0;
      for (size_t i = 0; i < count; i++) bad += in[i] != p2p_val(peer, rank, k, i);
      ct_check(s, bad == 0, "%s: %zu wrong elements", ctx, bad);
    }
    free(out), free(in);
  }
  if (r != SK_OK) return r;
  /* order: the even rank isends 6 messages (mixed dtypes), the odd rank receives them in order,
     half with blocking recv and half with irecv */
  snprintf(ctx, sizeof ctx, "message order n=%d rank %d<->%d", n, rank, peer);
  if (rank % 2 == 0) {
    sk_request *reqs[6];
    int64_t bufs[6][4];
    for (int m = 0; m < 6 && r == SK_OK; m++) {
      for (int i = 0; i < 4; i++) bufs[m][i] = m * 100 + i;
      r = sk_isend(c, bufs[m], m % 2 ? 4 : 2, SK_I64, peer, &reqs[m], NULL);
    }
    if (r == SK_OK) r = sk_waitall(6, reqs, NULL);
  } else {
    for (int m = 0; m < 6 && r == SK_OK; m++) {
      int64_t got[4] = {-1, -1, -1, -1};
      size_t cnt = m % 2 ? 4 : 2;
      if (m < 3) {
        r = sk_recv(c, got, cnt, SK_I64, peer, NULL);
      } else {
        sk_request *req = NULL;
        r = sk_irecv(c, got, cnt, SK_I64, peer, &req, NULL);
        if (r == SK_OK) r = sk_wait(&req, NULL);
      }
      if (r == SK_OK)
        for (size_t i = 0; i < cnt; i++)
          ct_check(s, got[i] == m * 100 + (int64_t)i, "%s: message %d element %zu is %lld (out of order?)", ctx, m, i,
                   (long long)got[i]);
    }
  }
  if (!ct_rc(s, r, c, ctx)) return r;
  s->ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_async, exchange) {
  static param ps[] = {{2, 0}, {2, 1}, {2, 2}, {5, 0}, {5, 1}, {5, 2}, {8, 0}, {8, 1}, {8, 2}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, exchange, .timeout = 30) {
  aarg a;
  aarg_init(&a, p->n, CT_CFG_DEFAULT, p->cfg);
  aarg_run(&a, exchange_device, "exchange");
}

/* Ring allgather by n-1 sk_sendrecv steps: afterwards every rank has every rank's block. */
static sk_result sendrecv_ring_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  const size_t blk = (size_t)(a->mode ? 4097 : 3);
  int32_t *all = (int32_t *)malloc(blk * (size_t)n * sizeof(int32_t));
  for (size_t i = 0; i < blk * (size_t)n; i++) all[i] = -1;
  for (size_t i = 0; i < blk; i++) all[(size_t)rank * blk + i] = rank * 100000 + (int32_t)i;
  int to = (rank + 1) % n, from = (rank + n - 1) % n;
  sk_result r = SK_OK;
  for (int step = 0; step < n - 1 && r == SK_OK; step++) {
    int sb = (rank - step + n) % n, rb = (rank - step - 1 + 2 * n) % n;
    r = sk_sendrecv(c, all + (size_t)sb * blk, blk, to, all + (size_t)rb * blk, blk, from, SK_I32, NULL);
  }
  char ctx[64];
  snprintf(ctx, sizeof ctx, "sendrecv ring n=%d rank %d block %zu", n, rank, blk);
  if (ct_rc(s, r, c, ctx)) {
    size_t bad = 0;
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < blk; i++) bad += all[(size_t)q * blk + i] != q * 100000 + (int32_t)i;
    ct_check(s, bad == 0, "%s: %zu wrong elements", ctx, bad);
    s->ran = 1;
  }
  free(all);
  return r;
}

ParameterizedTestParameters(comm_async, sendrecv_ring) {
  static param ps[] = {{2, 0}, {3, 0}, {5, 0}, {8, 0}, {16, 0}, {3, 1}, {8, 1}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, sendrecv_ring, .timeout = 30) {
  aarg a;
  aarg_init(&a, p->n, CT_CFG_DEFAULT, p->cfg);
  aarg_run(&a, sendrecv_ring_device, "sendrecv_ring");
}

/* isend to oneself then irecv from oneself (the MPI-legal self message). */
static sk_result self_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c);
  ct_slot *s = &a->slots[rank];
  int32_t out[3] = {rank, rank + 1, rank + 2}, in[3] = {-1, -1, -1};
  sk_request *reqs[2] = {NULL, NULL};
  sk_result r = sk_isend(c, out, 3, SK_I32, rank, &reqs[0], NULL);
  if (r == SK_OK) r = sk_irecv(c, in, 3, SK_I32, rank, &reqs[1], NULL);
  sk_result r2 = sk_waitall(2, reqs, NULL);
  if (r == SK_OK) r = r2;
  if (!ct_rc(s, r, c, "isend/irecv to self")) return r;
  ct_check(s, in[0] == rank && in[1] == rank + 1 && in[2] == rank + 2, "self message rank %d: got %d %d %d", rank,
           in[0], in[1], in[2]);
  s->ran = 1;
  return SK_OK;
}

Test(comm_async, isend_irecv_self, .timeout = 30) {
  aarg a;
  aarg_init(&a, 3, CT_CFG_DEFAULT, 0);
  aarg_run(&a, self_device, "isend_irecv_self");
}

/* ---- blocking and non-blocking mixed on one communicator ---------------------------------------- */

static sk_result mixed_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  for (int round = 0; round < 5; round++) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "mixed blocking/non-blocking round %d", round);
    pend p1 = {P_ALLREDUCE, SK_F32, SK_SUM, 2049, 0, 900u + (uint64_t)round * 10, NULL, NULL, NULL};
    pend p2 = {P_ALLGATHER, SK_I8, SK_SUM, 31, 0, 901u + (uint64_t)round * 10, NULL, NULL, NULL};
    sk_result r = pend_start(c, &p1);
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p1), pend_free(&p2); return r; }
    /* a blocking allreduce while p1 is outstanding: runs after it */
    int64_t v = rank + round, sum = -1;
    r = sk_allreduce(c, &v, &sum, 1, SK_I64, SK_SUM, NULL);
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p1), pend_free(&p2); return r; }
    ct_check(s, sum == (int64_t)n * (n - 1) / 2 + (int64_t)n * round, "%s rank %d: blocking allreduce gave %lld", ctx,
             rank, (long long)sum);
    r = pend_start(c, &p2);
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p1), pend_free(&p2); return r; }
    /* point to point in the middle: ring shift of one value */
    int32_t o = rank * 10 + round, in = -1;
    r = sk_sendrecv(c, &o, 1, (rank + 1) % n, &in, 1, (rank + n - 1) % n, SK_I32, NULL);
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p1), pend_free(&p2); return r; }
    ct_check(s, in == ((rank + n - 1) % n) * 10 + round, "%s rank %d: sendrecv got %d", ctx, rank, in);
    r = sk_barrier(c, NULL);
    if (r == SK_OK) {
      int32_t b = rank == round % n ? 4242 + round : 0;
      r = sk_broadcast(c, &b, &b, 1, SK_I32, round % n, NULL);
      ct_check(s, r != SK_OK || b == 4242 + round, "%s rank %d: broadcast gave %d", ctx, rank, b);
    }
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p1), pend_free(&p2); return r; }
    /* wait out of order: p2 first, then p1 */
    r = sk_wait(&p2.req, NULL);
    if (r == SK_OK) r = sk_wait(&p1.req, NULL);
    if (!ct_rc(s, r, c, ctx)) { pend_free(&p1), pend_free(&p2); return r; }
    pend_check(c, &p1, s, ctx);
    pend_check(c, &p2, s, ctx);
  }
  s->ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_async, blocking_and_nonblocking_mixed) {
  static param ps[] = {{1, CT_CFG_DEFAULT}, {2, CT_CFG_DEFAULT}, {5, CT_CFG_DEFAULT}, {8, CT_CFG_LARGE}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, blocking_and_nonblocking_mixed, .timeout = 30) {
  aarg a;
  aarg_init(&a, p->n, p->cfg, 0);
  aarg_run(&a, mixed_device, "blocking_and_nonblocking_mixed");
}

/* ---- bring your own threads ----------------------------------------------------------------- */

typedef struct byo_arg {
  sk_world *world;
  int rank, n;
  ct_slot *slot;
} byo_arg;

static void *byo_thread(void *pv) {
  byo_arg *a = (byo_arg *)pv;
  ct_slot *s = a->slot;
  sk_comm *c = NULL;
  sk_error err;
  memset(&err, 0, sizeof err);
  sk_result r = sk_comm_init_rank(a->world, a->rank, &c, &err);
  if (r != SK_OK || !c) {
    ct_fail(s, "BYO rank %d: sk_comm_init_rank returned %s: %s", a->rank, sk_result_name(r), err.msg);
    s->rc = r ? r : SK_ERR_INTERNAL;
    return NULL;
  }
  int n = a->n, rank = a->rank;
  ct_check(s, sk_comm_rank(c) == rank && sk_comm_size(c) == n && sk_comm_world_rank(c) == rank &&
                  sk_comm_world(c) == a->world,
           "BYO rank %d: rank %d size %d world_rank %d", rank, sk_comm_rank(c), sk_comm_size(c), sk_comm_world_rank(c));
  /* a mix: allreduce, allgather, split + allreduce on the child, non-blocking, sendrecv, barrier */
  pend ps[8];
  pend_mix(ps, n, 4242);
  for (int i = 0; i < 8 && r == SK_OK; i++) {
    r = pend_start(c, &ps[i]);
    if (r == SK_OK) r = sk_wait(&ps[i].req, NULL);
    if (ct_rc(s, r, c, "BYO")) pend_check(c, &ps[i], s, "BYO blocking-by-wait");
    else pend_free(&ps[i]);
  }
  pend_mix(ps, n, 4343);
  for (int i = 0; i < 8 && r == SK_OK; i++) r = pend_start(c, &ps[i]);
  for (int i = 0; i < 8; i++) {
    sk_result r2 = sk_wait(&ps[i].req, NULL);
    if (r == SK_OK) r = r2;
  }
  if (ct_rc(s, r, c, "BYO outstanding"))
    for (int i = 0; i < 8; i++) pend_check(c, &ps[i], s, "BYO outstanding");
  else
    pend_free_all(ps, 8);
  sk_comm *half = NULL;
  if (r == SK_OK) r = sk_comm_split(c, rank % 2, 0, &half, NULL);
  if (ct_rc(s, r, c, "BYO split")) {
    int64_t v = rank, sum = -1, e = 0;
    for (int q = rank % 2; q < n; q += 2) e += q;
    r = sk_allreduce(half, &v, &sum, 1, SK_I64, SK_SUM, NULL);
    if (ct_rc(s, r, half, "BYO allreduce on the split"))
      ct_check(s, sum == e, "BYO rank %d: allreduce on its half gave %lld, expected %lld", rank, (long long)sum,
               (long long)e);
    sk_comm_destroy(half, NULL);
  }
  if (r == SK_OK) {
    int32_t o = rank, in = -1;
    r = sk_sendrecv(c, &o, 1, (rank + 1) % n, &in, 1, (rank + n - 1) % n, SK_I32, NULL);
    if (ct_rc(s, r, c, "BYO sendrecv")) ct_check(s, in == (rank + n - 1) % n, "BYO rank %d: sendrecv got %d", rank, in);
  }
  if (r == SK_OK) r = sk_barrier(c, NULL);
  ct_rc(s, r, c, "BYO barrier");
  r = sk_comm_destroy(c, NULL);
  ct_rc(s, r, NULL, "BYO sk_comm_destroy");
  s->ran = 1;
  return NULL;
}

static void byo_run(int n, int cfg) {
  sk_world *w = ct_world(n, cfg, 0);
  ct_slot *slots = ct_slots_new(n);
  pthread_t th[16];
  byo_arg args[16];
  for (int r = 0; r < n; r++) {
    args[r] = (byo_arg){w, r, n, &slots[r]};
    cr_assert_eq(pthread_create(&th[r], NULL, byo_thread, &args[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  char lab[64];
  snprintf(lab, sizeof lab, "bring-your-own-threads n=%d cfg=%s", n, ct_cfg_names[cfg]);
  ct_expect_slots(slots, n, lab);
  free(slots);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}

Test(comm_async, bring_your_own_threads, .timeout = 30) {
  byo_run(1, CT_CFG_DEFAULT);
  byo_run(4, CT_CFG_DEFAULT);
  byo_run(8, CT_CFG_LARGE);
  byo_run(3, CT_CFG_SMALL4K);
}

Test(comm_async, init_rank_bad_arguments) {
  sk_world *w = ct_world(2, CT_CFG_DEFAULT, 0);
  sk_comm *c = (sk_comm *)&c;
  sk_error err;
  memset(&err, 0, sizeof err);
  cr_expect_eq(sk_comm_init_rank(w, 2, &c, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect_null(c);
  cr_expect(strstr(err.msg, "rank") != NULL, "message '%s' should name the rank", err.msg);
  cr_expect_eq(sk_comm_init_rank(w, -1, &c, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_comm_init_rank(NULL, 0, &c, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_comm_init_rank(w, 0, NULL, &err), SK_ERR_INVALID_ARGUMENT);
  sk_world_destroy(w, NULL);
}

Test(comm_async, world_bad_arguments) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  sk_world *w = (sk_world *)&w;
  sk_error err;
  memset(&err, 0, sizeof err);
  d.ndevices = 4;
  cr_expect_eq(sk_world_create(&d, &w, &err), SK_ERR_INVALID_ARGUMENT, "backend NULL");
  cr_expect_null(w);
  cr_expect(strstr(err.msg, "backend") != NULL, "message '%s'", err.msg);
  d.backend = sk_threads_backend();
  int bad_n[] = {0, -1, SK_MAX_DEVICES + 1};
  for (int i = 0; i < 3; i++) {
    d.ndevices = bad_n[i];
    memset(&err, 0, sizeof err);
    sk_result r = sk_world_create(&d, &w, &err);
    cr_expect_eq(r, SK_ERR_INVALID_ARGUMENT, "ndevices %d: %s", bad_n[i], sk_result_name(r));
    cr_expect(strstr(err.msg, "ndevices") != NULL || strstr(err.msg, "devices") != NULL,
              "ndevices %d: message '%s' should name ndevices", bad_n[i], err.msg);
    if (r == SK_OK) sk_world_destroy(w, NULL);
  }
  cr_expect_eq(sk_world_create(NULL, &w, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_world_create(&d, NULL, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_world_run(NULL, NULL, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  sk_world *ok = ct_world(2, CT_CFG_DEFAULT, 0);
  cr_expect_eq(sk_world_run(ok, NULL, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_world_destroy(ok, NULL), SK_OK);
}

/* ---- failures ------------------------------------------------------------------------------- */

typedef struct farg {
  int n, failing, mode;
  sk_result rc[64];
  double ms[64];
  char msg[64][SK_ERROR_MSG_MAX];
  atomic_int done;
  atomic_int entered; /* ranks that reached the device function */
  sk_world *world;
} farg;

static void farg_init(farg *a, int n, int failing, int mode) {
  memset(a, 0, sizeof *a);
  a->n = n, a->failing = failing, a->mode = mode;
  atomic_init(&a->done, 0);
  atomic_init(&a->entered, 0);
  for (int i = 0; i < 64; i++) a->rc[i] = SK_ERR_INTERNAL;
}

/* One rank fails (returns SK_ERR_BACKEND) while the others are blocked: mode 0 in allreduce,
   1 in a wait on an iallreduce, 2 in barrier, 3 in a recv from the failing rank, 4 in a broadcast
   rooted at the failing rank. */
static sk_result fail_device(sk_comm *c, void *pv) {
  farg *a = (farg *)pv;
  int rank = sk_comm_rank(c);
  atomic_fetch_add(&a->entered, 1);
  if (rank == a->failing) {
    /* Fail only once every peer has joined: a peer that had not would be refused at its
       sk_comm_init_rank and never reach a blocking call (a slow start on a loaded machine). */
    uint64_t t0 = sk_now_ns();
    while (atomic_load(&a->entered) < a->n && sk_now_ns() - t0 < 10000000000ull) ct_sleep_ms(1);
    ct_sleep_ms(50);
    a->rc[rank] = SK_ERR_BACKEND;
    return SK_ERR_BACKEND;
  }
  uint64_t t0 = sk_now_ns();
  float x[64] = {0}, y[64];
  sk_result r;
  switch (a->mode) {
    case 0: r = sk_allreduce(c, x, y, 64, SK_F32, SK_SUM, NULL); break;
    case 1: {
      sk_request *req = NULL;
      r = sk_iallreduce(c, x, y, 64, SK_F32, SK_SUM, &req, NULL);
      if (r == SK_OK) r = sk_wait(&req, NULL);
      break;
    }
    case 2: r = sk_barrier(c, NULL); break;
    case 3: r = sk_recv(c, y, 64, SK_F32, a->failing, NULL); break;
    default: r = sk_broadcast(c, x, y, 64, SK_F32, a->failing, NULL); break;
  }
  a->ms[rank] = ct_ms_since(t0);
  a->rc[rank] = r;
  snprintf(a->msg[rank], sizeof a->msg[rank], "%s", sk_comm_error_message(c));
  /* and later calls on the aborted world fail at once with ABORTED */
  if (r == SK_ERR_ABORTED) {
    sk_result r2 = sk_allreduce(c, x, y, 64, SK_F32, SK_SUM, NULL);
    if (r2 != SK_ERR_ABORTED) a->rc[rank] = (sk_result)(100 + r2); /* flagged below */
  }
  return r;
}

ParameterizedTestParameters(comm_async, device_error_aborts_peers) {
  static param ps[] = {{4, 0}, {4, 1}, {4, 2}, {4, 3}, {4, 4}, {8, 0}, {2, 1}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, device_error_aborts_peers, .timeout = 30) {
  farg a;
  farg_init(&a, p->n, p->n / 2, p->cfg);
  sk_world *w = ct_world(p->n, CT_CFG_DEFAULT, 20000); /* long: this must be ABORTED, not a timeout */
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_world_run(w, fail_device, &a, NULL);
  double ms = ct_ms_since(t0);
  cr_expect_eq(r, SK_ERR_BACKEND, "mode %d n=%d: sk_world_run returned %s, expected the failing device's SK_ERR_BACKEND",
               p->cfg, p->n, sk_result_name(r));
  cr_expect(strlen(sk_world_error_message(w)) > 0, "sk_world_error_message is empty");
  cr_expect(sk_world_aborted(w), "world not marked aborted");
  cr_expect_lt(ms, 10000.0, "mode %d: peers took %.0f ms to give up", p->cfg, ms);
  for (int q = 0; q < p->n; q++) {
    if (q == a.failing) continue;
    cr_expect_eq(a.rc[q], SK_ERR_ABORTED, "mode %d n=%d rank %d: blocked call returned %s (%d) after %.0f ms: %s",
                 p->cfg, p->n, q, a.rc[q] >= 100 ? "ABORTED, but a later call did not" : sk_result_name(a.rc[q]),
                 (int)a.rc[q], a.ms[q], a.msg[q]);
  }
  /* later: a new comm on the aborted world is refused */
  sk_comm *c = NULL;
  sk_error err;
  memset(&err, 0, sizeof err);
  cr_expect_eq(sk_comm_init_rank(w, 0, &c, &err), SK_ERR_ABORTED);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}

/* Timeout: one rank never calls the collective (it waits, away from the library, until the others
   gave up); the others must get SK_ERR_TIMEOUT after about timeout_ms, and the message should
   name the missing rank. mode 0 blocking allreduce, 1 iallreduce + wait, 2 iallreduce + sk_test
   polling, 3 barrier. */
static sk_result timeout_device(sk_comm *c, void *pv) {
  farg *a = (farg *)pv;
  int rank = sk_comm_rank(c);
  if (rank == a->failing) {
    uint64_t t0 = sk_now_ns();
    while (atomic_load(&a->done) < a->n - 1 && sk_now_ns() - t0 < 15000000000ull) ct_sleep_ms(2);
    a->rc[rank] = SK_OK;
    return SK_OK;
  }
  uint64_t t0 = sk_now_ns();
  int32_t x[5] = {1, 2, 3, 4, 5}, y[5];
  sk_result r;
  switch (a->mode) {
    case 0: r = sk_allreduce(c, x, y, 5, SK_I32, SK_SUM, NULL); break;
    case 1:
    case 2: {
      sk_request *req = NULL;
      r = sk_iallreduce(c, x, y, 5, SK_I32, SK_SUM, &req, NULL);
      if (r == SK_OK && a->mode == 1) r = sk_wait(&req, NULL);
      if (r == SK_OK && a->mode == 2) {
        bool done = false;
        while (r == SK_OK && !done && sk_now_ns() - t0 < 15000000000ull) {
          r = ct_test(&req, &done);
          if (r == SK_OK && !done) ct_sleep_ms(1);
        }
        if (req) {
          sk_result r2 = sk_wait(&req, NULL);
          if (r == SK_OK) r = r2;
        }
      }
      break;
    }
    default: r = sk_barrier(c, NULL); break;
  }
  a->ms[rank] = ct_ms_since(t0);
  a->rc[rank] = r;
  snprintf(a->msg[rank], sizeof a->msg[rank], "%s", sk_comm_error_message(c));
  atomic_fetch_add(&a->done, 1);
  return r;
}

ParameterizedTestParameters(comm_async, timeout_names_missing_rank) {
  static param ps[] = {{5, 0}, {5, 1}, {5, 2}, {5, 3}, {2, 0}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, timeout_names_missing_rank, .timeout = 30) {
  farg a;
  farg_init(&a, p->n, p->n == 5 ? 3 : 1, p->cfg);
  sk_world *w = ct_world(p->n, CT_CFG_DEFAULT, 200);
  sk_result r = sk_world_run(w, timeout_device, &a, NULL);
  cr_expect_eq(r, SK_ERR_TIMEOUT, "mode %d n=%d: sk_world_run returned %s: %s", p->cfg, p->n, sk_result_name(r),
               sk_world_error_message(w));
  char missing[8];
  snprintf(missing, sizeof missing, "%d", a.failing);
  for (int q = 0; q < p->n; q++) {
    if (q == a.failing) continue;
    /* the first to time out gets TIMEOUT; one woken by its abort may see ABORTED */
    cr_expect(a.rc[q] == SK_ERR_TIMEOUT || a.rc[q] == SK_ERR_ABORTED, "mode %d n=%d rank %d: returned %s after %.0f ms",
              p->cfg, p->n, q, sk_result_name(a.rc[q]), a.ms[q]);
    cr_expect_geq(a.ms[q], 150.0, "mode %d rank %d: gave up after %.0f ms, before the 200 ms timeout", p->cfg, q,
                  a.ms[q]);
    cr_expect_lt(a.ms[q], 10000.0, "mode %d rank %d: took %.0f ms to time out (timeout 200 ms)", p->cfg, q, a.ms[q]);
    if (a.rc[q] == SK_ERR_TIMEOUT)
      cr_expect(strstr(a.msg[q], missing) != NULL, "mode %d rank %d: timeout message '%s' does not name rank %s",
                p->cfg, q, a.msg[q], missing);
  }
  int timeouts = 0;
  for (int q = 0; q < p->n; q++) timeouts += a.rc[q] == SK_ERR_TIMEOUT;
  cr_expect_geq(timeouts, 1, "no rank reported SK_ERR_TIMEOUT");
  sk_world_destroy(w, NULL);
}

/* sk_world_abort from a thread that is not a device: every blocked device returns ABORTED. */
typedef struct aborter {
  sk_world *w;
  unsigned delay_ms;
} aborter;

static void *abort_thread(void *pv) {
  aborter *ab = (aborter *)pv;
  ct_sleep_ms(ab->delay_ms);
  sk_world_abort(ab->w);
  return NULL;
}

static sk_result abort_victim_device(sk_comm *c, void *pv) {
  farg *a = (farg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  uint64_t t0 = sk_now_ns();
  double x[8] = {0}, y[8];
  sk_result r;
  if (rank == n - 1) { /* waits for a message nobody sends */
    r = sk_recv(c, y, 8, SK_F64, 0, NULL);
  } else if (rank == 0 && a->mode == 1) { /* polls a request that cannot complete */
    sk_request *req = NULL;
    r = sk_iallreduce(c, x, y, 8, SK_F64, SK_SUM, &req, NULL);
    bool done = false;
    while (r == SK_OK && !done && sk_now_ns() - t0 < 15000000000ull) {
      r = ct_test(&req, &done);
      if (r == SK_OK && !done) ct_sleep_ms(1);
    }
    if (req) {
      sk_result r2 = sk_wait(&req, NULL);
      if (r == SK_OK) r = r2;
    }
  } else { /* in a collective the last rank never joins */
    r = sk_allreduce(c, x, y, 8, SK_F64, SK_SUM, NULL);
  }
  a->ms[rank] = ct_ms_since(t0);
  a->rc[rank] = r;
  snprintf(a->msg[rank], sizeof a->msg[rank], "%s", sk_comm_error_message(c));
  return r;
}

ParameterizedTestParameters(comm_async, abort_from_another_thread) {
  static param ps[] = {{4, 0}, {4, 1}, {8, 1}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_async, abort_from_another_thread, .timeout = 30) {
  farg a;
  farg_init(&a, p->n, -1, p->cfg);
  sk_world *w = ct_world(p->n, CT_CFG_DEFAULT, 20000);
  aborter ab = {w, 150};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, abort_thread, &ab), 0);
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_world_run(w, abort_victim_device, &a, NULL);
  double ms = ct_ms_since(t0);
  pthread_join(th, NULL);
  cr_expect_eq(r, SK_ERR_ABORTED, "sk_world_run returned %s", sk_result_name(r));
  cr_expect_lt(ms, 10000.0, "devices took %.0f ms to notice the abort", ms);
  cr_expect(sk_world_aborted(w));
  for (int q = 0; q < p->n; q++)
    cr_expect_eq(a.rc[q], SK_ERR_ABORTED, "mode %d n=%d rank %d: returned %s after %.0f ms: %s", p->cfg, p->n, q,
                 sk_result_name(a.rc[q]), a.ms[q], a.msg[q]);
  /* later calls fail with ABORTED too: a new run's collectives, and init_rank */
  farg b;
  farg_init(&b, p->n, -1, 0);
  r = sk_world_run(w, abort_victim_device, &b, NULL);
  cr_expect_eq(r, SK_ERR_ABORTED, "a run on an aborted world returned %s", sk_result_name(r));
  for (int q = 0; q < p->n; q++)
    cr_expect(b.rc[q] == SK_ERR_ABORTED || b.rc[q] == SK_ERR_INTERNAL /* device never ran */,
              "after abort, rank %d's call returned %s", q, sk_result_name(b.rc[q]));
  sk_comm *c = NULL;
  cr_expect_eq(sk_comm_init_rank(w, 0, &c, NULL), SK_ERR_ABORTED);
  sk_world_abort(w); /* twice is harmless */
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}

/* ---- bad arguments ------------------------------------------------------------------------------ */

typedef struct bad_arg {
  int n;
  ct_slot *slots;
} bad_arg;

#define EXPECT_BAD(call, word)                                                                                  \
  do {                                                                                                          \
    sk_result r_ = (call);                                                                                      \
    ct_check(s, r_ == SK_ERR_INVALID_ARGUMENT, "rank %d: %s returned %s, expected SK_ERR_INVALID_ARGUMENT", rank, \
             #call, sk_result_name(r_));                                                                        \
    ct_check(s, strstr(sk_comm_error_message(c), word) != NULL, "rank %d: %s: message '%s' does not mention '%s'", \
             rank, #call, sk_comm_error_message(c), word);                                                      \
  } while (0)

static sk_result bad_device(sk_comm *c, void *pv) {
  bad_arg *a = (bad_arg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  float buf[64] = {0}, out[64] = {0};
  const size_t cnt = 4;
  /* NULL buffers with count > 0 */
  EXPECT_BAD(sk_allreduce(c, NULL, out, cnt, SK_F32, SK_SUM, NULL), "send");
  EXPECT_BAD(sk_allreduce(c, buf, NULL, cnt, SK_F32, SK_SUM, NULL), "recv");
  EXPECT_BAD(sk_allgather(c, NULL, out, cnt, SK_F32, NULL), "send");
  EXPECT_BAD(sk_reduce_scatter(c, buf, NULL, 1, SK_F32, SK_SUM, NULL), "recv");
  EXPECT_BAD(sk_alltoall(c, NULL, out, 1, SK_F32, NULL), "send");
  EXPECT_BAD(sk_send(c, NULL, cnt, SK_F32, 0, NULL), "NULL");
  EXPECT_BAD(sk_recv(c, NULL, cnt, SK_F32, 0, NULL), "NULL");
  if (rank == 0) EXPECT_BAD(sk_broadcast(c, NULL, out, cnt, SK_F32, 0, NULL), "send"); /* the root needs send */
  /* invalid dtype and op */
  EXPECT_BAD(sk_allreduce(c, buf, out, cnt, (sk_dtype)99, SK_SUM, NULL), "dtype");
  EXPECT_BAD(sk_allreduce(c, buf, out, cnt, (sk_dtype)-1, SK_SUM, NULL), "dtype");
  EXPECT_BAD(sk_broadcast(c, buf, out, cnt, SK_DTYPE_COUNT, 0, NULL), "dtype");
  EXPECT_BAD(sk_allreduce(c, buf, out, cnt, SK_F32, (sk_redop)99, NULL), "op");
  EXPECT_BAD(sk_reduce_scatter(c, buf, out, 1, SK_F32, (sk_redop)-3, NULL), "op");
  EXPECT_BAD(sk_reduce(c, buf, out, cnt, SK_I32, SK_REDOP_COUNT, 0, NULL), "op");
  /* root / peer out of range */
  EXPECT_BAD(sk_broadcast(c, buf, out, cnt, SK_F32, n, NULL), "root");
  EXPECT_BAD(sk_broadcast(c, buf, out, cnt, SK_F32, -1, NULL), "root");
  EXPECT_BAD(sk_reduce(c, buf, out, cnt, SK_F32, SK_SUM, n + 5, NULL), "root");
  EXPECT_BAD(sk_send(c, buf, cnt, SK_F32, n, NULL), "peer");
  EXPECT_BAD(sk_recv(c, out, cnt, SK_F32, -1, NULL), "peer");
  /* overlapping buffers that are not the in-place form */
  EXPECT_BAD(sk_allreduce(c, buf, buf + 1, cnt, SK_F32, SK_SUM, NULL), "overlap");
  EXPECT_BAD(sk_allgather(c, buf + 1, buf, cnt, SK_F32, NULL), "overlap");     /* in-place is buf + rank*cnt */
  EXPECT_BAD(sk_reduce_scatter(c, buf, buf + 1, cnt, SK_F32, SK_SUM, NULL), "overlap"); /* in-place: buf + rank*cnt */
  EXPECT_BAD(sk_alltoall(c, buf, buf + 2, cnt, SK_F32, NULL), "overlap");
  if (rank == 0) EXPECT_BAD(sk_reduce(c, buf + 1, buf, cnt, SK_F32, SK_SUM, 0, NULL), "overlap");
  /* non-blocking forms: same checks, and *req stays NULL */
  sk_request *req = (sk_request *)&req;
  EXPECT_BAD(sk_iallreduce(c, NULL, out, cnt, SK_F32, SK_SUM, &req, NULL), "send");
  ct_check(s, req == NULL, "rank %d: a failed sk_iallreduce left *req set", rank);
  EXPECT_BAD(sk_iallreduce(c, buf, out, cnt, SK_F32, SK_SUM, NULL, NULL), "req");
  EXPECT_BAD(sk_ibroadcast(c, buf, out, cnt, SK_F32, n, &req, NULL), "root");
  EXPECT_BAD(sk_isend(c, buf, cnt, SK_F32, n, &req, NULL), "peer");
  EXPECT_BAD(sk_iallgather(c, buf, out, cnt, (sk_dtype)77, &req, NULL), "dtype");
  /* request helpers */
  bool done = false;
  req = NULL;
  ct_check(s, sk_wait(NULL, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_wait(NULL)", rank);
  ct_check(s, sk_wait(&req, NULL) == SK_OK, "rank %d: sk_wait(&NULL) must be SK_OK", rank);
  ct_check(s, sk_test(&req, &done, NULL) == SK_OK && done, "rank %d: sk_test(&NULL) must be done", rank);
  ct_check(s, sk_test(NULL, &done, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_test(NULL)", rank);
  ct_check(s, sk_waitall(-1, NULL, NULL) == SK_ERR_INVALID_ARGUMENT, "rank %d: sk_waitall(-1)", rank);
  ct_check(s, sk_waitall(0, NULL, NULL) == SK_OK, "rank %d: sk_waitall(0)", rank);
  /* count 0 with NULL buffers is valid and is a real (empty) collective */
  sk_result r = sk_allreduce(c, NULL, NULL, 0, SK_F32, SK_SUM, NULL);
  if (r == SK_OK) r = sk_alltoall(c, NULL, NULL, 0, SK_I8, NULL);
  if (r == SK_OK) r = sk_broadcast(c, NULL, NULL, 0, SK_F64, n - 1, NULL);
  if (!ct_rc(s, r, c, "count 0 with NULL buffers")) return r;
  /* the communicator still works after all the rejected calls */
  for (int i = 0; i < 64; i++) buf[i] = (float)(rank + i);
  r = sk_allreduce(c, buf, out, 64, SK_F32, SK_SUM, NULL);
  if (!ct_rc(s, r, c, "allreduce after the rejected calls")) return r;
  bool good = true;
  for (int i = 0; i < 64; i++) good = good && out[i] == (float)(n * (n - 1) / 2 + n * i);
  ct_check(s, good, "rank %d: allreduce after the rejected calls gave wrong values", rank);
  s->ran = 1;
  return SK_OK;
}

Test(comm_async, bad_arguments, .timeout = 30) {
  for (int n = 2; n <= 3; n++) {
    bad_arg a = {n, ct_slots_new(n)};
    char lab[32];
    snprintf(lab, sizeof lab, "bad_arguments n=%d", n);
    ct_run(n, CT_CFG_DEFAULT, bad_device, &a, lab);
    ct_expect_slots(a.slots, n, lab);
    free(a.slots);
  }
}

/* One world, several sk_world_run calls in a row, then bring-your-own-threads on it: each run
   starts clean (fresh communicators, no leftover requests or sequence numbers). */
static sk_result rerun_device(sk_comm *c, void *pv) {
  aarg *a = (aarg *)pv;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  int run = atomic_load(&a->counter);
  int64_t v = rank + 100 * run, sum = -1;
  sk_request *req = NULL;
  sk_result r = sk_iallreduce(c, &v, &sum, 1, SK_I64, SK_SUM, &req, NULL);
  if (r == SK_OK) r = sk_wait(&req, NULL);
  char ctx[48];
  snprintf(ctx, sizeof ctx, "world_run #%d rank %d", run, rank);
  if (!ct_rc(s, r, c, ctx)) return r;
  ct_check(s, sum == (int64_t)n * (n - 1) / 2 + (int64_t)n * 100 * run, "%s: sum %lld", ctx, (long long)sum);
  s->ran++;
  return SK_OK;
}

Test(comm_async, world_run_repeated, .timeout = 30) {
  aarg a;
  aarg_init(&a, 5, CT_CFG_DEFAULT, 0);
  sk_world *w = ct_world(5, CT_CFG_DEFAULT, 0);
  for (int run = 0; run < 4; run++) {
    atomic_store(&a.counter, run);
    sk_result r = sk_world_run(w, rerun_device, &a, NULL);
    cr_expect_eq(r, SK_OK, "sk_world_run #%d returned %s: %s", run, sk_result_name(r), sk_world_error_message(w));
  }
  for (int q = 0; q < 5; q++)
    cr_expect(a.slots[q].ran == 4 && a.slots[q].nfail == 0, "rank %d: ran %d times, %d failures; first: %s", q,
              a.slots[q].ran, a.slots[q].nfail, a.slots[q].msg);
  free(a.slots);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
}
