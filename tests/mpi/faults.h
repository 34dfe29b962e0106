/* faults.h -- the MPI driver's fault suites (included once by mpi_driver.c).

   faults: one fresh MPI world per fault (an aborted world stays aborted), next to the driver's
   healthy keeper worlds, which stay alive so MPI does; the keeper also gathers verdicts that only
   the whole job can give ("some rank saw the mismatch"). Each fault must end, on every member,
   in a named sk_result within the world's timeout plus a little (SLACK_S), with a message naming
   the rank that failed, left or is missing. Worlds of this suite use a counting allocator, so a
   leak shows as live allocations once MPI is finalised (main checks it), and allocation failure
   is swept (every failure must be SK_ERR_OUT_OF_MEMORY and leak nothing).

   teardown-hang / teardown-left: a single world, the last of the process, so destroying it
   finalises MPI; run each as its own job (see tests/test_mpi.c). */
#ifndef MPI_DRIVER_FAULTS_H
#define MPI_DRIVER_FAULTS_H

#include <time.h>

/* Every fault's bound beyond the timeout: the grace period for silent peers (at most 2 s) plus
   scheduling noise of 8 processes on 2 cores. */
#define SLACK_S 3.0

/* ---- a counting allocator that can fail its k-th allocation ---------------------------------- */

typedef struct counting {
  long live;    /* allocations not yet freed */
  long made;    /* allocations asked for */
  long fail_at; /* the allocation (0-based) that returns NULL; -1: none */
} counting;

static counting g_count = {0, 0, -1};

static void *count_alloc(void *user, size_t size, size_t align) {
  counting *k = (counting *)user;
  if (k->made++ == k->fail_at) return NULL;
  size = (size + align - 1) / align * align;
  void *p = aligned_alloc(align, size);
  if (p) k->live++;
  return p;
}
static void count_free(void *user, void *p) {
  counting *k = (counting *)user;
  if (p) k->live--;
  free(p);
}
static sk_allocator counting_allocator(void) {
  sk_allocator a = {count_alloc, count_free, &g_count};
  return a;
}

/* ---- checks ------------------------------------------------------------------------------------ */

typedef struct fctx {
  long fails, checks;
  int which;
  int saw_error;    /* this rank's fault call returned something other than SK_OK */
  uint32_t timeout; /* the fault world's timeout (ms) */
} fctx;

#define FCHECK(x, cond, ...)                                                                   \
  do {                                                                                         \
    (x)->checks++;                                                                             \
    if (!(cond)) {                                                                             \
      (x)->fails++;                                                                            \
      fprintf(stderr, "FAIL faults np=%d rank %d line %d: ", g_size, g_rank, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fputc('\n', stderr);                                                                     \
    }                                                                                          \
  } while (0)

static double secs_since(uint64_t t0) { return (double)(sk_now_ns() - t0) * 1e-9; }

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Whether msg contains `pre` followed by the number n (as in "world rank 7"). */
/* Whether msg names rank n in the list after pre ("waiting for world rank 1, 2"): on a loaded
   machine another rank may still be on its way when the wait times out, and is listed too. */
static bool names(const char *msg, const char *pre, int n) {
  const char *p = strstr(msg, pre);
  if (!p) return false;
  p += strlen(pre);
  for (;;) {
    char *end;
    long r = strtol(p, &end, 10);
    if (end == p) return false;
    if (r == n) return true;
    if (strncmp(end, ", ", 2)) return false;
    p = end + 2;
  }
}

/* Outcomes allowed when the mismatch check is off: MPI may deliver wrong data (SK_OK), detect
   truncation (MISMATCH), hang (TIMEOUT) or hear of a peer's failure (ABORTED); never a crash. */
static bool undefined_ok(sk_result r) {
  return r == SK_OK || r == SK_ERR_MISMATCH || r == SK_ERR_TIMEOUT || r == SK_ERR_ABORTED;
}

enum {
  F_MISMATCH, F_P2P, F_DEVICE_FAILS, F_ABORT, F_TIMEOUT, /* the first suite */
  F_HANG,         /* the last rank sleeps past the timeout instead of calling */
  F_COUNTS_OFF,   /* mismatched counts with the check off */
  F_SPLIT_ON,     /* a split on rank 0 against a user AllGather elsewhere, check on */
  F_SPLIT_OFF,    /* the same with the check off */
  F_PENDING,      /* a sub-communicator destroyed with requests outstanding */
  F_N
};

static sk_result fault_mismatch(fctx *x, sk_comm *c) {
  int me = sk_comm_rank(c), n = sk_comm_size(c);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
  sk_result r = sk_allreduce(c, a, b, me == 0 ? 5 : 4, SK_F32, SK_SUM, NULL);
  FCHECK(x, r == SK_ERR_MISMATCH && strstr(sk_comm_error_message(c), "mismatch: rank 0 called allreduce(count 5"),
         "count mismatch: %s: %s", sk_result_name(r), sk_comm_error_message(c));
  sk_request *q = NULL;
  r = me == 0 ? sk_ibroadcast(c, a, b, 3, SK_F32, 0, &q, NULL) : sk_ireduce(c, a, b, 3, SK_F32, SK_SUM, 0, &q, NULL);
  if (r == SK_OK) r = sk_wait(&q, NULL);
  FCHECK(x, r == SK_ERR_MISMATCH && strstr(sk_comm_error_message(c), "but rank 1 called reduce"),
         "kind mismatch: %s: %s", sk_result_name(r), sk_comm_error_message(c));
  r = sk_allreduce(c, a, b, 8, SK_F32, SK_SUM, NULL);
  FCHECK(x, r == SK_OK && b[7] == 8.0f * (float)n, "allreduce after mismatches: %s", sk_result_name(r));
  return SK_OK;
}

/* Receiver longer, then shorter (MPI's truncation) than the message: both name both ranks. */
static sk_result fault_p2p(fctx *x, sk_comm *c) {
  int me = sk_comm_rank(c);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
  sk_result r;
  if (me == 0) {
    r = sk_send(c, a, 4, SK_F32, 1, NULL);
    FCHECK(x, r == SK_OK, "send: %s", sk_result_name(r));
    r = sk_send(c, a, 6, SK_F32, 1, NULL);
    FCHECK(x, r == SK_OK, "send: %s", sk_result_name(r));
  } else if (me == 1) {
    const char *m = sk_comm_error_message(c);
    r = sk_recv(c, b, 5, SK_F32, 0, NULL);
    FCHECK(x, r == SK_ERR_MISMATCH && strstr(m, "rank 1 receives 5 x f32 from rank 0, which sent 4"),
           "recv longer: %s: %s", sk_result_name(r), m);
    r = sk_recv(c, b, 5, SK_F32, 0, NULL);
    FCHECK(x, r == SK_ERR_MISMATCH && strstr(m, "from rank 0, which sent more") && strstr(m, "MPI_ERR_TRUNCATE"),
           "recv shorter: %s: %s", sk_result_name(r), m);
  }
  r = sk_barrier(c, NULL);
  FCHECK(x, r == SK_OK, "barrier after p2p mismatches: %s", sk_result_name(r));
  return SK_OK;
}

/* The last rank fails at once (or rank 0 calls sk_world_abort): the others see ABORTED naming it. */
static sk_result fault_peer_fails(fctx *x, sk_comm *c) {
  int me = sk_comm_rank(c), n = sk_comm_size(c), odd = x->which == F_ABORT ? 0 : n - 1;
  if (me == odd) {
    if (x->which == F_ABORT) {
      sk_world_abort(sk_comm_world(c));
      return SK_OK;
    }
    return sk_comm_set_error(c, SK_ERR_INVALID_USAGE, "rank %d fails on purpose", me);
  }
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_barrier(c, NULL);
  double s = secs_since(t0);
  const char *m = sk_comm_error_message(c);
  FCHECK(x, r == SK_ERR_ABORTED && s < 10.0, "peer failure: %s after %.1f s: %s", sk_result_name(r), s, m);
  FCHECK(x, strstr(m, "aborted") && names(m, "world rank ", odd) && strstr(m, "failed"), "message: %s", m);
  return r;
}

/* Rank 0 alone in a barrier (the others left): TIMEOUT naming them as the ones it waited for. */
static sk_result fault_timeout(fctx *x, sk_comm *c) {
  if (sk_comm_rank(c) != 0) return SK_OK;
  sk_result r = sk_barrier(c, NULL);
  const char *m = sk_comm_error_message(c);
  FCHECK(x, r == SK_ERR_TIMEOUT && strstr(m, "timed out") && names(m, "waiting for world rank ", 1),
         "lonely barrier: %s: %s", sk_result_name(r), m);
  return r;
}

/* The last rank sleeps through 3 timeouts, then calls: every other rank ends within the timeout
   plus slack, naming it; the sleeper then finds the world aborted by a timeout. */
static sk_result fault_hang(fctx *x, sk_comm *c) {
  int me = sk_comm_rank(c), n = sk_comm_size(c);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
  if (me == n - 1) {
    sleep_ms(3 * (long)x->timeout);
    sk_result r = sk_allreduce(c, a, b, 8, SK_F32, SK_SUM, NULL);
    const char *m = sk_comm_error_message(c);
    FCHECK(x, r == SK_ERR_ABORTED && strstr(m, "timed out"), "sleeper: %s: %s", sk_result_name(r), m);
    return r;
  }
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_allreduce(c, a, b, 8, SK_F32, SK_SUM, NULL);
  double s = secs_since(t0);
  const char *m = sk_comm_error_message(c);
  FCHECK(x, (r == SK_ERR_TIMEOUT || r == SK_ERR_ABORTED) && s < x->timeout * 1e-3 + SLACK_S, "hang: %s after %.2f s: %s",
         sk_result_name(r), s, m);
  FCHECK(x, names(m, r == SK_ERR_TIMEOUT ? "waiting for world rank " : "gone): world rank ", n - 1),
         "hang: the message does not name the sleeper (world rank %d): %s", n - 1, m);
  return r;
}

/* Mismatched counts with the check off: no process dies; what MPI detects is MISMATCH naming
   the call (the keeper checks that some rank saw an error). */
static sk_result fault_counts_off(fctx *x, sk_comm *c) {
  int me = sk_comm_rank(c);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
  uint64_t t0 = sk_now_ns();
  sk_result r = sk_allreduce(c, a, b, me == 0 ? 5 : 4, SK_F32, SK_SUM, NULL);
  double s = secs_since(t0);
  const char *m = sk_comm_error_message(c);
  FCHECK(x, undefined_ok(r) && s < x->timeout * 1e-3 + SLACK_S, "counts, check off: %s after %.2f s: %s",
         sk_result_name(r), s, m);
  if (r == SK_ERR_MISMATCH)
    FCHECK(x, strstr(m, "allreduce") && strstr(m, "MPI_Iallreduce") && strstr(m, "truncat"), "message: %s", m);
  x->saw_error = r != SK_OK;
  return r;
}

/* Rank 0 splits while the others call AllGather(count 3, i64). Check on: MISMATCH everywhere,
   naming both calls, and the world goes on. Check off: bounded, and never SK_OK for the split. */
static sk_result fault_split(fctx *x, sk_comm *c) {
  int me = sk_comm_rank(c), n = sk_comm_size(c);
  int64_t mine[3] = {me, me, me}, all[3 * 64];
  sk_comm *sub = NULL;
  uint64_t t0 = sk_now_ns();
  sk_result r = me == 0 ? sk_comm_split(c, 0, me, &sub, NULL) : sk_allgather(c, mine, all, 3, SK_I64, NULL);
  double s = secs_since(t0);
  const char *m = sk_comm_error_message(c);
  if (sub) sk_comm_destroy(sub, NULL);
  if (x->which == F_SPLIT_OFF) {
    FCHECK(x, undefined_ok(r) && (me != 0 || r != SK_OK) && s < x->timeout * 1e-3 + SLACK_S,
           "split vs allgather, check off: %s after %.2f s: %s", sk_result_name(r), s, m);
    x->saw_error = r != SK_OK;
    return r;
  }
  FCHECK(x, r == SK_ERR_MISMATCH && strstr(m, "split(color 0, key 0)") && strstr(m, "allgather(count 3, i64"),
         "split vs allgather: %s: %s", sk_result_name(r), m);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8];
  r = sk_allreduce(c, a, b, 8, SK_F32, SK_SUM, NULL);
  FCHECK(x, r == SK_OK && b[7] == 8.0f * (float)n, "allreduce after the split mismatch: %s", sk_result_name(r));
  return SK_OK;
}

/* A sub-communicator destroyed with a collective, a barrier and a Send/Recv pair outstanding:
   destroy completes and frees them (the result is there), and nothing stays allocated. */
static sk_result fault_pending(fctx *x, sk_comm *c) {
  int me = sk_comm_rank(c);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {0}, rb[8] = {0};
  long before = g_count.live;
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split(c, me % 2, me, &sub, NULL);
  FCHECK(x, r == SK_OK && sub, "split: %s", sk_result_name(r));
  if (r != SK_OK) return r;
  int k = sk_comm_size(sub), sr = sk_comm_rank(sub);
  sk_request *q[4] = {NULL, NULL, NULL, NULL};
  r = sk_iallreduce(sub, a, b, 8, SK_F32, SK_SUM, &q[0], NULL);
  if (r == SK_OK) r = sk_ibarrier(sub, &q[1], NULL);
  if (r == SK_OK) r = sk_irecv(sub, rb, 8, SK_F32, (sr + k - 1) % k, &q[2], NULL);
  if (r == SK_OK) r = sk_isend(sub, a, 8, SK_F32, (sr + 1) % k, &q[3], NULL);
  FCHECK(x, r == SK_OK, "issuing: %s", sk_result_name(r));
  sk_comm_destroy(sub, NULL); /* the handles in q are invalid from here */
  FCHECK(x, b[7] == 8.0f * (float)k && rb[7] == 8.0f, "results after destroy: %g %g", (double)b[7], (double)rb[7]);
  FCHECK(x, g_count.live == before, "%ld allocations left by the destroyed communicator", g_count.live - before);
  r = sk_allreduce(c, a, b, 8, SK_F32, SK_SUM, NULL);
  FCHECK(x, r == SK_OK, "allreduce after: %s", sk_result_name(r));
  return r;
}

static sk_result fault_device(sk_comm *c, void *arg) {
  fctx *x = (fctx *)arg;
  switch (x->which) {
    case F_MISMATCH: return fault_mismatch(x, c);
    case F_P2P: return fault_p2p(x, c);
    case F_DEVICE_FAILS:
    case F_ABORT: return fault_peer_fails(x, c);
    case F_TIMEOUT: return fault_timeout(x, c);
    case F_HANG: return fault_hang(x, c);
    case F_COUNTS_OFF: return fault_counts_off(x, c);
    case F_SPLIT_ON:
    case F_SPLIT_OFF: return fault_split(x, c);
    case F_PENDING: return fault_pending(x, c);
    default: return SK_OK;
  }
}

/* A world for fault `which` on the counting allocator. */
static sk_result fault_world(int which, uint32_t timeout, sk_world **w, sk_error *err) {
  static sk_mpi_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.check_mismatch = which == F_MISMATCH || which == F_SPLIT_ON;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.backend = sk_mpi_backend(), d.backend_config = &cfg, d.timeout_ms = timeout;
  d.allocator = counting_allocator();
  return sk_world_create(&d, w, err);
}

/* The job-wide verdict: whether any rank saw an error (an AllReduce on the healthy keeper). */
static bool anyone(sk_world *keeper, int mine) {
  sk_comm *c = NULL;
  sk_error err;
  int32_t v = mine, any = 0;
  if (sk_comm_init_rank(keeper, g_rank, &c, &err) != SK_OK) return false;
  sk_result r = sk_allreduce(c, &v, &any, 1, SK_I32, SK_MAX, NULL);
  sk_comm_destroy(c, NULL);
  return r == SK_OK && any;
}

/* Checks on one fault's run result and teardown. */
static void fault_verdict(fctx *x, sk_world *keeper, sk_world *w, sk_result r) {
  const char *m = sk_world_error_message(w);
  switch (x->which) {
    case F_MISMATCH:
    case F_P2P:
    case F_SPLIT_ON:
    case F_PENDING: FCHECK(x, r == SK_OK, "run %d: %s", x->which, m); break;
    case F_DEVICE_FAILS:
      FCHECK(x, g_rank == g_size - 1 ? r == SK_ERR_INVALID_USAGE : r == SK_ERR_ABORTED, "run: %s: %s", sk_result_name(r), m);
      break;
    case F_TIMEOUT: FCHECK(x, g_rank == 0 ? r == SK_ERR_TIMEOUT : 1, "run: %s", sk_result_name(r)); break;
    case F_COUNTS_OFF:
    case F_SPLIT_OFF: FCHECK(x, anyone(keeper, x->saw_error), "fault %d, check off: no rank saw an error", x->which); break;
    default: break;
  }
  if (x->which == F_DEVICE_FAILS || x->which == F_ABORT || x->which == F_TIMEOUT || x->which == F_HANG)
    FCHECK(x, sk_world_aborted(w) || g_rank != 0, "world not aborted");
  uint64_t t0 = sk_now_ns();
  sk_world_destroy(w, NULL);
  double s = secs_since(t0);
  FCHECK(x, s < x->timeout * 1e-3 + SLACK_S, "fault %d: sk_world_destroy took %.2f s", x->which, s);
}

/* Every allocation of world creation, a run (split, gather-path AllReduce, in-place AllToAll,
   Send/Recv, all with the check's fingerprints) and teardown fails in turn: each failure is
   SK_ERR_OUT_OF_MEMORY (or ABORTED, from a peer's), and nothing stays allocated. */
static sk_result oom_device(sk_comm *c, void *arg) {
  (void)arg;
  int me = sk_comm_rank(c), n = sk_comm_size(c);
  uint16_t h[5] = {0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00}, hr[5];
  int32_t t[2 * 64], s[2] = {me, me}, rb[2];
  for (int i = 0; i < 2 * n; i++) t[i] = i;
  sk_comm *sub = NULL;
  sk_result r = sk_comm_split(c, me % 2, me, &sub, NULL);
  if (r == SK_OK) r = sk_allreduce(sub, h, hr, 5, SK_F16, SK_SUM, NULL);
  if (sub) sk_comm_destroy(sub, NULL);
  if (r == SK_OK) r = sk_alltoall(c, t, t, 2, SK_I32, NULL);
  if (r == SK_OK) r = sk_sendrecv(c, s, 2, (me + 1) % n, rb, 2, (me + n - 1) % n, SK_I32, NULL);
  return r;
}

static long run_oom(fctx *x, sk_world *keeper) {
  sk_mpi_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.check_mismatch = true;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.backend = sk_mpi_backend(), d.backend_config = &cfg, d.timeout_ms = 10000;
  d.allocator = counting_allocator();
  long total = -1;
  for (long k = -1; k < 0 || k < total; k++) { /* k = -1: no failure, counting them */
    long live0 = g_count.live;
    g_count.made = 0, g_count.fail_at = k;
    sk_world *w = NULL;
    sk_error err;
    sk_result r = sk_world_create(&d, &w, &err);
    FCHECK(x, r == SK_OK || r == SK_ERR_OUT_OF_MEMORY, "oom %ld: create: %s: %s", k, sk_result_name(r), err.msg);
    if (r == SK_OK) {
      r = sk_world_run(w, oom_device, NULL, NULL);
      FCHECK(x, r == SK_OK || r == SK_ERR_OUT_OF_MEMORY || r == SK_ERR_ABORTED, "oom %ld: run: %s: %s", k,
             sk_result_name(r), sk_world_error_message(w));
      FCHECK(x, k >= 0 || r == SK_OK, "oom: the run without failures: %s", sk_world_error_message(w));
      sk_world_destroy(w, NULL);
    }
    /* an aborted run may leave requests in MPI (a peer failed mid-collective): those are freed
       after MPI_Finalize, and main checks that nothing is left then */
    FCHECK(x, g_count.live == live0 || r == SK_ERR_ABORTED, "oom %ld: %ld allocations left (%s)", k,
           g_count.live - live0, sk_result_name(r));
    if (k < 0) { /* every rank sweeps as far as the longest count */
      sk_comm *c = NULL;
      int64_t mine = g_count.made, most = mine;
      if (sk_comm_init_rank(keeper, g_rank, &c, &err) == SK_OK) {
        sk_allreduce(c, &mine, &most, 1, SK_I64, SK_MAX, NULL);
        sk_comm_destroy(c, NULL);
      }
      total = most;
    }
  }
  g_count.fail_at = -1;
  return total;
}

static long run_faults(sk_world *keeper) {
  fctx x;
  memset(&x, 0, sizeof x);
  sk_error err;
  /* bad arguments: ndevices must be 0 or the world size; init_rank takes this process's rank */
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.backend = sk_mpi_backend();
  d.ndevices = g_size + 1;
  sk_world *w = NULL;
  sk_result r = sk_world_create(&d, &w, &err);
  FCHECK(&x, r == SK_ERR_INVALID_ARGUMENT && strstr(err.msg, "one device per process"), "ndevices: %s: %s",
         sk_result_name(r), err.msg);
  sk_comm *c = NULL;
  r = sk_comm_init_rank(keeper, (g_rank + 1) % g_size, &c, &err);
  FCHECK(&x, r == SK_ERR_INVALID_ARGUMENT, "init_rank of another process: %s: %s", sk_result_name(r), err.msg);
  for (int which = 0; which < F_N; which++) {
    bool short_t = which == F_TIMEOUT || which == F_HANG || which == F_COUNTS_OFF || which == F_SPLIT_OFF;
    x.which = which, x.saw_error = 0, x.timeout = short_t ? 500u : 30000u;
    r = fault_world(which, x.timeout, &w, &err);
    FCHECK(&x, r == SK_OK, "world: %s", err.msg);
    if (r != SK_OK) continue;
    r = sk_world_run(w, fault_device, &x, NULL);
    fault_verdict(&x, keeper, w, r);
  }
  long swept = run_oom(&x, keeper);
  printf("faults rank %d np=%d: %ld checks (allocation failure swept over %ld allocations), %ld failures\n", g_rank,
         g_size, x.checks, swept, x.fails);
  return x.fails;
}

/* ---- teardown: the process's last world after a fault (destroy finalises MPI) ---------------- */

/* hang: the last rank never calls (it sleeps 60 s: mpirun ends it once the others exit without
   MPI_Finalize); the others must time out naming it, and destroy must return within the bound
   instead of blocking in MPI_Finalize. left: rank 1 returns at once and destroys its world;
   rank 0 times out naming it, and every process then finalises cleanly (exit status 0). */
typedef struct tctx {
  bool hang;
  sk_result r;
  double s;
  char msg[SK_ERROR_MSG_MAX];
} tctx;

static sk_result teardown_device(sk_comm *c, void *arg) {
  tctx *t = (tctx *)arg;
  int me = sk_comm_rank(c), n = sk_comm_size(c);
  g_rank = me, g_size = n;
  /* Everyone meets once first, so that the waiters enter the checked barrier together: on a
     loaded host one of them could otherwise start late enough to be named as missing too. */
  if (t->hang && (t->r = sk_barrier(c, NULL)) != SK_OK) return t->r;
  if (t->hang && me == n - 1) sleep_ms(60000);
  if (!t->hang && me != 0) return SK_OK;
  uint64_t t0 = sk_now_ns();
  t->r = sk_barrier(c, NULL);
  t->s = secs_since(t0);
  snprintf(t->msg, sizeof t->msg, "%s", sk_comm_error_message(c));
  return t->r;
}

static int run_teardown(bool hang) {
  fctx x;
  memset(&x, 0, sizeof x);
  tctx t;
  memset(&t, 0, sizeof t);
  t.hang = hang;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.backend = sk_mpi_backend(), d.timeout_ms = 500;
  sk_world *w = NULL;
  sk_error err;
  if (sk_world_create(&d, &w, &err) != SK_OK) {
    fprintf(stderr, "teardown: cannot create the MPI world: %s\n", err.msg);
    return 2;
  }
  sk_world_run(w, teardown_device, &t, NULL);
  bool waiter = hang ? g_rank != g_size - 1 : g_rank == 0;
  if (waiter) {
    FCHECK(&x, (t.r == SK_ERR_TIMEOUT || t.r == SK_ERR_ABORTED) && t.s < 0.5 + SLACK_S, "%s after %.2f s: %s",
           sk_result_name(t.r), t.s, t.msg);
    FCHECK(&x, names(t.msg, t.r == SK_ERR_TIMEOUT ? "waiting for world rank " : "gone): world rank ", hang ? g_size - 1 : 1),
           "the message does not name the missing rank: %s", t.msg);
  }
  uint64_t t0 = sk_now_ns();
  sk_world_destroy(w, NULL); /* the last world: MPI_Finalize, or not, within the bound */
  double ds = secs_since(t0);
  FCHECK(&x, ds < 0.5 + SLACK_S, "sk_world_destroy took %.2f s", ds);
  printf("teardown-%s rank %d np=%d: %s after %.2f s, destroy %.2f s; %ld checks, %ld failures\n", hang ? "hang" : "left",
         g_rank, g_size, sk_result_name(t.r), t.s, ds, x.checks, x.fails);
  /* mpirun ends the whole job at the first process that exits without MPI_Finalize: give the
     other waiters (who finish destroy within moments of this one) time to report */
  if (hang) sleep_ms(1000);
  return x.fails ? 1 : 0;
}

#endif /* MPI_DRIVER_FAULTS_H */
