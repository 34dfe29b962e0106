/* test_oom.c -- allocation-failure sweep, SQLite style.

   A counting allocator (sk_allocator: in sk_world_desc, sk_redist_desc and sk_fusion_desc, the
   same one everywhere) numbers every allocation, atomically across device and progress threads,
   and fails the k-th: once ("once") or the k-th and every later one ("persistent"). Each
   scenario is first run with nothing failing to count its allocations N (three counting runs;
   the count must not vary), then once per k = 1..N in each mode (OOM_PASSES sweeps, below).
   Scenarios (threads backend):
     world     world create + run of a trivial device function + destroy (4 devices)
     split     sk_comm_split, blocking collectives on it, destroy; the same on
               sk_comm_split_mesh (a 2x2 mesh along b), sk_comm_create (2 listed ranks, the
               others get NULL) and sk_comm_split_mesh along both axes (4 devices)
     async     six non-blocking collectives outstanding at once, a blocking AllReduce queued
               behind them, sk_waitall; an isend/irecv ring + sk_waitall; an sk_sendrecv ring
               (4 devices)
     redist4   sk_redist [8,8] "dp,None" -> "None,dp" on mesh dp=4 (one AllToAll)
     redist2x2 mesh a=2,b=2: an executor "a,None" -> "None,a" (AllToAll on the a-groups, a
               sub-group split) executed twice; sk_redist "a,b" -> "b,a" (Send/Recv exchange);
               sk_redist partial over b "a,None" -> "None,None" (AllReduce over b, then an
               AllGather over a: two splits and an intermediate buffer)
     redist_ms MindSpore mode (sk_redist_ms.h's operator inference, each operator a plan step):
               an executor "a,b" -> "b,a" on a=2,b=2 (enable_alltoall, several operators and
               intermediate buffers) executed twice; sk_redist "a,None" -> "None,a" with
               enable_alltoall off (AllGather then StridedSlice); sk_redist from "a,b" on a=2,b=2
               to "x,None" on x=4 (across device matrices: the unified mesh, Reshape steps)
     bcast     sk_parameter_broadcast on a=2,b=2: three parameters grouped along b, along a and
               over all four devices (three group splits, the plan arrays, one AllReduce each);
               every device then holds its owner's values (sk_redundancy_owner)
     fusion    a fusion scheduler (AllReduce size mode, 256 B buckets): 8 AllReduces (zero-copy,
               packed and direct buckets), 2 AllGathers and 2 ReduceScatters (a packed bucket
               each), two steps of ready + wait (the second marks them ready in reverse),
               destroy (4 devices)
   What each k must give (the test thread checks, after sk_world_destroy):
   - every library call returns SK_OK or SK_ERR_OUT_OF_MEMORY (SK_ERR_ABORTED on peers of a
     failed device); a call that returns SK_OK delivered the right data (and a split the right
     group);
   - sk_world_create returns SK_OK or SK_ERR_OUT_OF_MEMORY; sk_world_run returns
     SK_ERR_OUT_OF_MEMORY whenever an allocation was failed during it. No scenario can absorb
     an allocation failure (every allocation the library makes is needed for the call to
     succeed), so "SK_OK although an allocation failed" is reported as a swallowed failure;
   - with nothing failed (a k past the end of a varying count) everything is SK_OK;
   - nothing leaks: the allocator's live blocks are 0 after destroy (the leaked blocks are
     listed by allocation number and size); ASan/LSan cover the rest (`make build/san/unit`);
   - nothing hangs: the world timeout is OOM_TIMEOUT_MS and each k's create + run + destroy
     must take less than half of it (a peer left waiting for the timeout shows up here, or as
     SK_ERR_TIMEOUT).
   Device functions follow a real application: on the first error they stop, release what they
   created (sub-communicators, executors, schedulers) and return that error, which aborts the
   world so peers stop waiting. A device that must drain outstanding requests (async) aborts
   the world first (sk_world_abort), so a drain never waits for a peer that failed too. A device
   that finds a wrong group or wrong data records it and returns SK_OK (the finding is the
   test's, not the world's error).
   Device threads never assert: they record into per-rank slots; the test thread asserts.
   Allocation order across threads is not deterministic, so which call the k-th allocation
   belongs to varies from run to run: each test sweeps k = 1..N OOM_PASSES times.
   Knobs (debugging): OOM_K=k runs that k only; OOM_PASSES=p sweeps p times; OOM_VERBOSE=1 prints
   every run's outcome. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#include "shardkit.h"
#include "comm_test_util.h"

#define OOM_TIMEOUT_MS 10000u /* world timeout; a run must take less than half of it (loaded machines too) */
#define OOM_MAXDEV 4
#define OOM_MAX_REPORTS 12 /* problems reported in full per test; the rest are counted */
#define OOM_PASSES 3       /* sweeps of k = 1..N per test: the threads interleave differently each time */
#define OOM_MAX_SLOW 4     /* a sweep stops after this many runs that waited for the timeout */

/* ============================================================================================ */
/* The counting allocator                                                                       */
/* ============================================================================================ */

#define OOM_MAGIC 0x0f0e0d0c0b0a0908ull

typedef struct oom_hdr {
  uint64_t magic;
  uint64_t seq; /* allocation number, 1-based */
  size_t size;
  void *base;
  struct oom_hdr *prev, *next;
} oom_hdr;

typedef struct oom_alloc {
  atomic_ulong calls;    /* allocations requested (failed ones included) */
  atomic_ulong failed;   /* allocations failed on purpose */
  atomic_long live;      /* blocks handed out and not freed */
  atomic_ulong bad_free; /* frees of pointers this allocator did not hand out (or twice) */
  unsigned long fail_at; /* 0: never fail */
  bool persistent;
  pthread_mutex_t lock;
  oom_hdr *head; /* live blocks */
} oom_alloc;

static void *oom_alloc_fn(void *user, size_t size, size_t align) {
  oom_alloc *a = (oom_alloc *)user;
  unsigned long n = atomic_fetch_add(&a->calls, 1) + 1;
  if (a->fail_at && (n == a->fail_at || (a->persistent && n > a->fail_at))) {
    atomic_fetch_add(&a->failed, 1);
    return NULL;
  }
  if (align < 16) align = 16;
  size_t h = (sizeof(oom_hdr) + align - 1) / align * align;
  size_t total = (h + size + align - 1) / align * align;
  unsigned char *base = (unsigned char *)aligned_alloc(align, total);
  if (!base) return NULL;
  oom_hdr *hd = (oom_hdr *)(void *)(base + h - sizeof(oom_hdr));
  hd->magic = OOM_MAGIC, hd->seq = n, hd->size = size, hd->base = base, hd->prev = NULL;
  pthread_mutex_lock(&a->lock);
  hd->next = a->head;
  if (a->head) a->head->prev = hd;
  a->head = hd;
  pthread_mutex_unlock(&a->lock);
  atomic_fetch_add(&a->live, 1);
  return base + h;
}

static void oom_free_fn(void *user, void *p) {
  oom_alloc *a = (oom_alloc *)user;
  if (!p) return;
  oom_hdr *hd = (oom_hdr *)(void *)((unsigned char *)p - sizeof(oom_hdr));
  pthread_mutex_lock(&a->lock);
  bool ok = hd->magic == OOM_MAGIC;
  if (ok) {
    hd->magic = 0;
    if (hd->prev) hd->prev->next = hd->next;
    else a->head = hd->next;
    if (hd->next) hd->next->prev = hd->prev;
  }
  pthread_mutex_unlock(&a->lock);
  if (!ok) {
    atomic_fetch_add(&a->bad_free, 1);
    return;
  }
  atomic_fetch_sub(&a->live, 1);
  free(hd->base);
}

static void oom_alloc_init(oom_alloc *a) {
  memset(a, 0, sizeof *a);
  pthread_mutex_init(&a->lock, NULL);
}

/* Re-arms for one run: counters to 0, fail the k-th (0 = none). Live blocks must be 0. */
static void oom_alloc_arm(oom_alloc *a, unsigned long k, bool persistent) {
  atomic_store(&a->calls, 0);
  atomic_store(&a->failed, 0);
  atomic_store(&a->bad_free, 0);
  a->fail_at = k, a->persistent = persistent;
}

/* Lists the live blocks ("#seq (size B)") and frees them, so the next k starts clean. */
static void oom_alloc_reap(oom_alloc *a, char *buf, size_t cap) {
  size_t len = 0;
  int n = 0;
  buf[0] = 0;
  pthread_mutex_lock(&a->lock);
  while (a->head) {
    oom_hdr *hd = a->head;
    a->head = hd->next;
    if (n++ < 12 && len + 32 < cap)
      len += (size_t)snprintf(buf + len, cap - len, "%s#%llu (%zu B)", n > 1 ? ", " : "", (unsigned long long)hd->seq,
                              hd->size);
    hd->magic = 0;
    free(hd->base);
  }
  pthread_mutex_unlock(&a->lock);
  if (n > 12 && len + 16 < cap) snprintf(buf + len, cap - len, ", ... (%d in all)", n);
  atomic_store(&a->live, 0);
}

/* ============================================================================================ */
/* Per-rank records                                                                             */
/* ============================================================================================ */

typedef struct oom_slot {
  int entered, ran;
  sk_result rc;            /* first non-OK result a call returned */
  char where[64];          /* which call */
  char msg[SK_ERROR_MSG_MAX];
  int nbad;                /* contract violations seen on the device (wrong data, bad codes) */
  char bad[320];           /* the first */
} oom_slot;

typedef struct oom_ctx {
  oom_alloc *al;
  int n;
  oom_slot slots[OOM_MAXDEV];
} oom_ctx;

static CT_PRINTF(2, 3) void oom_bad(oom_slot *s, const char *fmt, ...) {
  if (s->nbad++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->bad, sizeof s->bad, fmt, ap);
    va_end(ap);
  }
}

/* Records a call's result; true when SK_OK. */
static bool oom_rc(oom_slot *s, sk_result r, const char *msg, const char *what) {
  if (r == SK_OK) return true;
  if (s->rc == SK_OK) {
    s->rc = r;
    snprintf(s->where, sizeof s->where, "%s", what);
    snprintf(s->msg, sizeof s->msg, "%s", msg ? msg : "");
  }
  return false;
}

#define OOM_CALL(s, c, expr, what) oom_rc((s), (expr), sk_comm_error_message(c), (what))

static sk_allocator oom_sk_allocator(oom_alloc *a) {
  sk_allocator al;
  al.alloc = oom_alloc_fn, al.free = oom_free_fn, al.user = a;
  return al;
}

/* ============================================================================================ */
/* Scenarios                                                                                    */
/* ============================================================================================ */

/* ---- (a) world: a trivial device function ----------------------------------------------------- */

static sk_result oom_dev_world(sk_comm *c, void *arg) {
  oom_ctx *x = (oom_ctx *)arg;
  oom_slot *s = &x->slots[sk_comm_rank(c)];
  s->entered = 1;
  s->ran = 1;
  return SK_OK;
}

/* ---- (b) split: sub-communicators and blocking collectives on them ---------------------------- */

static sk_mesh oom_mesh22; /* a=2,b=2, parsed on the test thread */

/* Blocking collectives on a sub-communicator whose members are the world ranks in `wr`
   (sub-rank order); every result is checked. */
static sk_result oom_sub_colls(sk_comm *sub, oom_slot *s, const int *wr, int gn, const char *tag) {
  char what[48];
  int me = sk_comm_rank(sub), wme = sk_comm_world_rank(sub);
  if (!sub || sk_comm_size(sub) != gn || me < 0 || me >= gn || wr[me] != wme) {
    oom_bad(s, "%s: returned SK_OK but the communicator has size %d, rank %d (world %d); expected size %d with world "
               "ranks %d,%d,...",
            tag, sk_comm_size(sub), me, wme, gn, wr[0], gn > 1 ? wr[1] : -1);
    return SK_ERR_INTERNAL; /* stop here; the device function returns SK_OK (see oom_dev_split) */
  }
  /* small AllReduce (inline path) */
  int32_t x[3] = {wme + 1, 10 * (wme + 1), -wme}, y[3] = {0, 0, 0};
  snprintf(what, sizeof what, "%s allreduce", tag);
  if (!OOM_CALL(s, sub, sk_allreduce(sub, x, y, 3, SK_I32, SK_SUM, NULL), what)) return s->rc;
  int32_t e = 0;
  for (int i = 0; i < gn; i++) e += wr[i] + 1;
  if (y[0] != e || y[1] != 10 * e || y[2] != gn - e) oom_bad(s, "%s: [%d %d %d], expected [%d %d %d]", what, y[0], y[1], y[2], e, 10 * e, gn - e);
  /* large AllReduce (task path) */
  float big[100], bo[100];
  for (int i = 0; i < 100; i++) big[i] = (float)(wme * 1000 + i), bo[i] = -1;
  snprintf(what, sizeof what, "%s allreduce(100)", tag);
  if (!OOM_CALL(s, sub, sk_allreduce(sub, big, bo, 100, SK_F32, SK_SUM, NULL), what)) return s->rc;
  for (int i = 0; i < 100; i++) {
    float ex = 0;
    for (int j = 0; j < gn; j++) ex += (float)(wr[j] * 1000 + i);
    if (bo[i] != ex) {
      oom_bad(s, "%s: [%d] = %g, expected %g", what, i, (double)bo[i], (double)ex);
      break;
    }
  }
  /* AllGather of world ranks */
  int32_t mine = wme, all[OOM_MAXDEV] = {-1, -1, -1, -1};
  snprintf(what, sizeof what, "%s allgather", tag);
  if (!OOM_CALL(s, sub, sk_allgather(sub, &mine, all, 1, SK_I32, NULL), what)) return s->rc;
  for (int i = 0; i < gn; i++)
    if (all[i] != wr[i]) {
      oom_bad(s, "%s: [%d] = %d, expected %d", what, i, all[i], wr[i]);
      break;
    }
  /* Broadcast from the last member */
  int32_t b[2] = {wme, 7 * wme}, bo2[2] = {-1, -1};
  snprintf(what, sizeof what, "%s broadcast", tag);
  if (!OOM_CALL(s, sub, sk_broadcast(sub, b, bo2, 2, SK_I32, gn - 1, NULL), what)) return s->rc;
  if (bo2[0] != wr[gn - 1] || bo2[1] != 7 * wr[gn - 1])
    oom_bad(s, "%s: [%d %d], expected [%d %d]", what, bo2[0], bo2[1], wr[gn - 1], 7 * wr[gn - 1]);
  snprintf(what, sizeof what, "%s barrier", tag);
  if (!OOM_CALL(s, sub, sk_barrier(sub, NULL), what)) return s->rc;
  return SK_OK;
}

static sk_result oom_dev_split(sk_comm *c, void *arg) {
  oom_ctx *x = (oom_ctx *)arg;
  int w = sk_comm_rank(c);
  oom_slot *s = &x->slots[w];
  s->entered = 1;
  sk_comm *sub = NULL;
  /* split: color = parity, key = -rank (higher world rank first): {2,0} and {3,1} */
  if (OOM_CALL(s, c, sk_comm_split(c, w % 2, -w, &sub, NULL), "split")) {
    int wr[2] = {w % 2 + 2, w % 2};
    sk_result r = oom_sub_colls(sub, s, wr, 2, "split");
    sk_comm_destroy(sub, NULL);
    if (r != SK_OK) return s->rc; /* SK_OK after a wrong group: recorded, not the world's error */
  } else {
    return s->rc;
  }
  /* split_mesh along b: {0,1} and {2,3} */
  if (OOM_CALL(s, c, sk_comm_split_mesh(c, &oom_mesh22, 2u, &sub, NULL), "split_mesh(b)")) {
    int wr[2] = {w / 2 * 2, w / 2 * 2 + 1};
    sk_result r = oom_sub_colls(sub, s, wr, 2, "split_mesh(b)");
    sk_comm_destroy(sub, NULL);
    if (r != SK_OK) return s->rc; /* SK_OK after a wrong group: recorded, not the world's error */
  } else {
    return s->rc;
  }
  /* create from a list: world ranks 3 and 1 (in that order); 0 and 2 get NULL */
  static const int listed[2] = {3, 1};
  if (OOM_CALL(s, c, sk_comm_create(c, 2, listed, &sub, NULL), "create")) {
    if (w % 2 == 0) {
      if (sub) {
        oom_bad(s, "create: returned SK_OK and a communicator of size %d for unlisted rank %d", sk_comm_size(sub), w);
        sk_comm_destroy(sub, NULL);
        return s->rc;
      }
    } else {
      sk_result r = oom_sub_colls(sub, s, listed, 2, "create");
      sk_comm_destroy(sub, NULL);
      if (r != SK_OK) return s->rc;
    }
  } else {
    return s->rc;
  }
  /* split_mesh along both axes: everyone */
  if (OOM_CALL(s, c, sk_comm_split_mesh(c, &oom_mesh22, 3u, &sub, NULL), "split_mesh(a,b)")) {
    int wr[4] = {0, 1, 2, 3};
    sk_result r = oom_sub_colls(sub, s, wr, 4, "split_mesh(a,b)");
    sk_comm_destroy(sub, NULL);
    if (r != SK_OK) return s->rc; /* SK_OK after a wrong group: recorded, not the world's error */
  } else {
    return s->rc;
  }
  s->ran = 1;
  return SK_OK;
}

/* ---- (c) async: non-blocking collectives and point to point ----------------------------------- */

/* On error: abort the world (peers stop waiting for this device), then drain. */
static void oom_drain(sk_comm *c, sk_request **reqs, int n, bool failed) {
  if (failed) sk_world_abort(sk_comm_world(c));
  sk_waitall(n, reqs, NULL);
}

static sk_result oom_dev_async(sk_comm *c, void *arg) {
  oom_ctx *x = (oom_ctx *)arg;
  int r = sk_comm_rank(c), n = sk_comm_size(c);
  oom_slot *s = &x->slots[r];
  s->entered = 1;
  /* six collectives outstanding at once */
  float a[4], ao[4];
  float big[96], bo[96]; /* 384 B: above small_bytes, the task path */
  int32_t g = 100 + r, go[OOM_MAXDEV];
  int32_t rs[OOM_MAXDEV * 2], rso[2];
  int64_t bc[3];
  for (int i = 0; i < 4; i++) a[i] = (float)(r + 1) * (float)(i + 1), ao[i] = -1;
  for (int i = 0; i < 96; i++) big[i] = (float)(r * 100 + i), bo[i] = -1;
  for (int i = 0; i < n * 2; i++) rs[i] = r * 1000 + i;
  for (int i = 0; i < 3; i++) bc[i] = r == 2 ? 77 + i : -5;
  for (int i = 0; i < n; i++) go[i] = -1;
  rso[0] = rso[1] = -1;
  sk_request *q[8] = {NULL};
  int nq = 0;
  bool ok = OOM_CALL(s, c, sk_iallreduce(c, a, ao, 4, SK_F32, SK_SUM, &q[nq], NULL), "iallreduce(4)") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_iallreduce(c, big, bo, 96, SK_F32, SK_MAX, &q[nq], NULL), "iallreduce(96)") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_iallgather(c, &g, go, 1, SK_I32, &q[nq], NULL), "iallgather") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_ireduce_scatter(c, rs, rso, 2, SK_I32, SK_SUM, &q[nq], NULL), "ireduce_scatter") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_ibroadcast(c, bc, bc, 3, SK_I64, 2, &q[nq], NULL), "ibroadcast") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_ibarrier(c, &q[nq], NULL), "ibarrier") && ++nq;
  /* a blocking call with requests outstanding queues behind them (start + wait) */
  int32_t bl[2] = {r, 1}, blo[2] = {-1, -1};
  ok = ok && OOM_CALL(s, c, sk_allreduce(c, bl, blo, 2, SK_I32, SK_SUM, NULL), "allreduce behind requests");
  if (ok && (blo[0] != n * (n - 1) / 2 || blo[1] != n))
    oom_bad(s, "allreduce behind requests: [%d %d], expected [%d %d]", blo[0], blo[1], n * (n - 1) / 2, n);
  if (!ok) {
    oom_drain(c, q, nq, true);
    return s->rc;
  }
  if (!OOM_CALL(s, c, sk_waitall(nq, q, NULL), "waitall (collectives)")) return s->rc;
  for (int i = 0; i < 4; i++)
    if (ao[i] != 10.0f * (float)(i + 1)) {
      oom_bad(s, "iallreduce(4): [%d] = %g, expected %g", i, (double)ao[i], 10.0 * (i + 1));
      break;
    }
  for (int i = 0; i < 96; i++)
    if (bo[i] != (float)((n - 1) * 100 + i)) {
      oom_bad(s, "iallreduce(96, max): [%d] = %g, expected %d", i, (double)bo[i], (n - 1) * 100 + i);
      break;
    }
  for (int i = 0; i < n; i++)
    if (go[i] != 100 + i) {
      oom_bad(s, "iallgather: [%d] = %d, expected %d", i, go[i], 100 + i);
      break;
    }
  for (int i = 0; i < 2; i++) {
    int32_t e = 0;
    for (int j = 0; j < n; j++) e += j * 1000 + r * 2 + i;
    if (rso[i] != e) oom_bad(s, "ireduce_scatter: [%d] = %d, expected %d", i, rso[i], e);
  }
  for (int i = 0; i < 3; i++)
    if (bc[i] != 77 + i) oom_bad(s, "ibroadcast: [%d] = %lld, expected %d", i, (long long)bc[i], 77 + i);
  /* isend / irecv ring: send right, receive from the left, twice with different tags of data */
  int right = (r + 1) % n, left = (r + n - 1) % n;
  int32_t out1[5], out2[3], in1[5], in2[3];
  for (int i = 0; i < 5; i++) out1[i] = r * 10 + i, in1[i] = -1;
  for (int i = 0; i < 3; i++) out2[i] = -(r * 10 + i), in2[i] = -1;
  nq = 0;
  ok = OOM_CALL(s, c, sk_isend(c, out1, 5, SK_I32, right, &q[nq], NULL), "isend(5)") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_irecv(c, in1, 5, SK_I32, left, &q[nq], NULL), "irecv(5)") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_irecv(c, in2, 3, SK_I32, left, &q[nq], NULL), "irecv(3)") && ++nq;
  ok = ok && OOM_CALL(s, c, sk_isend(c, out2, 3, SK_I32, right, &q[nq], NULL), "isend(3)") && ++nq;
  if (!ok) {
    oom_drain(c, q, nq, true);
    return s->rc;
  }
  if (!OOM_CALL(s, c, sk_waitall(nq, q, NULL), "waitall (isend/irecv)")) return s->rc;
  for (int i = 0; i < 5; i++)
    if (in1[i] != left * 10 + i) {
      oom_bad(s, "irecv(5) from %d: [%d] = %d, expected %d", left, i, in1[i], left * 10 + i);
      break;
    }
  for (int i = 0; i < 3; i++)
    if (in2[i] != -(left * 10 + i)) {
      oom_bad(s, "irecv(3) from %d: [%d] = %d, expected %d", left, i, in2[i], -(left * 10 + i));
      break;
    }
  /* blocking sendrecv ring (the library posts both halves and waits) */
  int64_t so[2] = {r, r * r}, ri[2] = {-1, -1};
  if (!OOM_CALL(s, c, sk_sendrecv(c, so, 2, right, ri, 2, left, SK_I64, NULL), "sendrecv")) return s->rc;
  if (ri[0] != left || ri[1] != (int64_t)left * left)
    oom_bad(s, "sendrecv from %d: [%lld %lld], expected [%d %d]", left, (long long)ri[0], (long long)ri[1], left, left * left);
  s->ran = 1;
  return SK_OK;
}

/* ---- (d) redistribution ------------------------------------------------------------------------- */

typedef struct oom_rd_case {
  const char *mesh, *from, *to, *partial;
  bool executor; /* executor create + execute twice + destroy; else one-shot sk_redist */
  sk_redist_mode mode;
  const char *to_mesh; /* NULL: the to layout is on mesh too */
  sk_layout lf, lt;
  uint32_t pmask;
  int pcount; /* devices per partial group */
} oom_rd_case;

#define OOM_RD(m, f, t, p, ex) {.mesh = m, .from = f, .to = t, .partial = p, .executor = ex}
static oom_rd_case oom_rd4[] = {OOM_RD("dp=4", "dp,None", "None,dp", NULL, false)}; /* one AllToAll */
static oom_rd_case oom_rd22[] = {
    OOM_RD("a=2,b=2", "a,None", "None,a", NULL, true),     /* AllToAll on the a-groups */
    OOM_RD("a=2,b=2", "a,b", "b,a", NULL, false),          /* Send/Recv exchange */
    OOM_RD("a=2,b=2", "a,None", "None,None", "b", false),  /* AllReduce over b, AllGather over a */
};
#define OOM_RDMS(m, f, tm, t, md, ex) {.mesh = m, .from = f, .to = t, .executor = ex, .mode = md, .to_mesh = tm}
static oom_rd_case oom_rdms[] = {
    OOM_RDMS("a=2,b=2", "a,b", NULL, "b,a", SK_REDIST_MINDSPORE, true),
    OOM_RDMS("a=2,b=2", "a,None", NULL, "None,a", SK_REDIST_MINDSPORE_NO_ALLTOALL, false),
    OOM_RDMS("a=2,b=2", "a,b", "x=4", "x,None", SK_REDIST_MINDSPORE, false), /* across device matrices */
};

typedef struct oom_rd_arg {
  oom_ctx ctx;
  oom_rd_case *cases;
  int ncases;
} oom_rd_arg;

static const int64_t oom_rd_shape[2] = {8, 8};

static float oom_rd_val(int64_t i, int64_t j) { return (float)(i * 8 + j + 1); }

static void oom_rd_prepare(oom_rd_case *cs, int n) {
  for (int i = 0; i < n; i++) {
    sk_mesh m, mt;
    sk_error e;
    cr_assert_eq(sk_mesh_parse(&m, cs[i].mesh, &e), SK_OK, "%s", e.msg);
    cr_assert_eq(sk_mesh_parse(&mt, cs[i].to_mesh ? cs[i].to_mesh : cs[i].mesh, &e), SK_OK, "%s", e.msg);
    cr_assert_eq(sk_layout_parse(&cs[i].lf, &m, cs[i].from, 2, oom_rd_shape, &e), SK_OK, "%s", e.msg);
    cr_assert_eq(sk_layout_parse(&cs[i].lt, &mt, cs[i].to, 2, oom_rd_shape, &e), SK_OK, "%s", e.msg);
    cs[i].pmask = 0, cs[i].pcount = 1;
    if (cs[i].partial) {
      cr_assert_eq(sk_mesh_axis_mask(&m, cs[i].partial, &cs[i].pmask, &e), SK_OK, "%s", e.msg);
      for (int a = 0; a < m.naxes; a++)
        if (cs[i].pmask & (1u << a)) cs[i].pcount *= m.dims[a];
    }
  }
}

/* Fills rank's slice of l (row-major) with scale * value. Returns its element count. */
static size_t oom_rd_fill(const sk_layout *l, int rank, float *buf, float scale) {
  sk_slice sl;
  sk_layout_slice(l, rank, &sl, NULL);
  size_t k = 0;
  for (int64_t i = sl.start[0]; i < sl.stop[0]; i++)
    for (int64_t j = sl.start[1]; j < sl.stop[1]; j++) buf[k++] = scale * oom_rd_val(i, j);
  return k;
}

/* Checks rank's slice of l against scale * value. */
static void oom_rd_check(oom_slot *s, const oom_rd_case *cs, int rank, const float *got, float scale, const char *tag) {
  sk_slice sl;
  sk_layout_slice(&cs->lt, rank, &sl, NULL);
  size_t k = 0;
  for (int64_t i = sl.start[0]; i < sl.stop[0]; i++)
    for (int64_t j = sl.start[1]; j < sl.stop[1]; j++, k++)
      if (got[k] != scale * oom_rd_val(i, j)) {
        oom_bad(s, "%s \"%s\" -> \"%s\": returned SK_OK but element (%lld,%lld) is %g, expected %g", tag, cs->from,
                cs->to, (long long)i, (long long)j, (double)got[k], (double)(scale * oom_rd_val(i, j)));
        return;
      }
}

static sk_result oom_dev_redist(sk_comm *c, void *arg) {
  oom_rd_arg *x = (oom_rd_arg *)arg;
  int r = sk_comm_rank(c);
  oom_slot *s = &x->ctx.slots[r];
  s->entered = 1;
  float src[64], dst[64];
  for (int ci = 0; ci < x->ncases; ci++) {
    const oom_rd_case *cs = &x->cases[ci];
    sk_redist_desc d;
    memset(&d, 0, sizeof d);
    d.from = cs->lf, d.to = cs->lt, d.partial = cs->pmask, d.dtype = SK_F32, d.mode = cs->mode;
    d.allocator = oom_sk_allocator(x->ctx.al);
    size_t ns = oom_rd_fill(&cs->lf, r, src, 1.0f);
    size_t nd = 64;
    sk_error err;
    memset(&err, 0, sizeof err);
    char what[64];
    if (cs->executor) {
      sk_redist_executor *ex = NULL;
      snprintf(what, sizeof what, "executor_create #%d", ci);
      if (!oom_rc(s, sk_redist_executor_create(c, &d, &ex, &err), err.msg, what)) return s->rc;
      for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < 64; i++) dst[i] = -1;
        snprintf(what, sizeof what, "execute #%d (%d)", ci, rep);
        if (!OOM_CALL(s, c, sk_redist_execute(ex, src, ns, dst, nd, SK_F32, NULL), what)) {
          sk_redist_executor_destroy(ex);
          return s->rc;
        }
        oom_rd_check(s, cs, r, dst, (float)cs->pcount, what);
      }
      sk_redist_executor_destroy(ex);
    } else {
      for (int i = 0; i < 64; i++) dst[i] = -1;
      snprintf(what, sizeof what, "sk_redist #%d", ci);
      if (!oom_rc(s, sk_redist(c, &d, src, ns, dst, nd, &err), err.msg, what)) return s->rc;
      oom_rd_check(s, cs, r, dst, (float)cs->pcount, what);
    }
  }
  s->ran = 1;
  return SK_OK;
}

/* ---- (e) parameter broadcast (sk_redundancy.h) ------------------------------------------------ */

#define OOM_BC 3
/* not in name order: the call sorts them */
static const char *const oom_bc_names[OOM_BC] = {"w2", "w0", "w1"};
static const char *const oom_bc_maps[OOM_BC] = {"b,None", "None,None", "a,None"};
static sk_layout oom_bc_layouts[OOM_BC]; /* on oom_mesh22, parsed on the test thread */

static float oom_bc_val(int rank, int p, int i) { return (float)(rank * 1000 + p * 100 + i); }

/* Checks that every parameter holds its owner's values after the broadcast. */
static void oom_bc_check(oom_slot *s, int r, const sk_redundancy_param *rp, float (*data)[64], const size_t *count) {
  for (int p = 0; p < OOM_BC; p++) {
    int owner = -1;
    sk_error e;
    if (sk_redundancy_owner(OOM_BC, rp, p, r, 0, &owner, &e) != SK_OK) {
      oom_bad(s, "sk_redundancy_owner of '%s': %s", rp[p].name, e.msg);
      return;
    }
    for (int i = 0; i < (int)count[p]; i++)
      if (data[p][i] != oom_bc_val(owner, p, i)) {
        oom_bad(s, "parameter_broadcast returned SK_OK but '%s'[%d] is %g, expected owner %d's %g", rp[p].name, i,
                (double)data[p][i], owner, (double)oom_bc_val(owner, p, i));
        return;
      }
  }
}

static sk_result oom_dev_bcast(sk_comm *c, void *arg) {
  oom_ctx *x = (oom_ctx *)arg;
  int r = sk_comm_rank(c);
  oom_slot *s = &x->slots[r];
  s->entered = 1;
  float data[OOM_BC][64];
  size_t count[OOM_BC];
  sk_bcast_param bp[OOM_BC];
  sk_redundancy_param rp[OOM_BC];
  for (int p = 0; p < OOM_BC; p++) {
    int64_t sh[SK_MAX_DIMS] = {0};
    sk_layout_slice_shape(&oom_bc_layouts[p], sh);
    count[p] = (size_t)(sh[0] * sh[1]);
    for (int i = 0; i < (int)count[p]; i++) data[p][i] = oom_bc_val(r, p, i);
    rp[p].name = bp[p].name = oom_bc_names[p];
    rp[p].layout = bp[p].layout = oom_bc_layouts[p];
    rp[p].opt_shard_size = bp[p].opt_shard_size = 0;
    bp[p].data = data[p], bp[p].count = count[p], bp[p].dtype = SK_F32;
  }
  sk_error err;
  memset(&err, 0, sizeof err);
  if (!oom_rc(s, sk_parameter_broadcast(c, OOM_BC, bp, r, 0, &err), err.msg, "parameter_broadcast")) return s->rc;
  oom_bc_check(s, r, rp, data, count);
  s->ran = 1;
  return SK_OK;
}

/* ---- (f) fusion scheduler ------------------------------------------------------------------------ */

#define OOM_FT 8
static const size_t oom_fcount[OOM_FT] = {5, 7, 20, 3, 70, 9, 1, 33};

static void oom_ffill(float *const *bufs, int r, int step) {
  for (int t = 0; t < OOM_FT; t++)
    for (size_t i = 0; i < oom_fcount[t]; i++) bufs[t][i] = (float)((r + 1) * (t + 1 + step) + (int)i);
}

#define OOM_FAG 6 /* AllGather: elements per rank */
#define OOM_FRS 4 /* ReduceScatter: elements of each rank's result */

static sk_result oom_dev_fusion(sk_comm *c, void *arg) {
  oom_ctx *x = (oom_ctx *)arg;
  int r = sk_comm_rank(c), n = sk_comm_size(c);
  oom_slot *s = &x->slots[r];
  s->entered = 1;
  /* AllReduce: tensors 0..2 are consecutive in one flat array (in place: a zero-copy bucket);
     the others live apart, some out of place (packed buckets); tensor 4 (280 B) is alone
     (direct). Two AllGathers and two ReduceScatters make one packed bucket each. */
  float flat[5 + 7 + 20];
  float t3[3], t4[70], t5[9], t6[1], t7[33], o3[3], o5[9], o7[33];
  float *send[OOM_FT] = {flat, flat + 5, flat + 12, t3, t4, t5, t6, t7};
  float *recv[OOM_FT] = {flat, flat + 5, flat + 12, o3, t4, o5, t6, o7};
  float ags[2][OOM_FAG], agr[2][OOM_MAXDEV * OOM_FAG], rss[2][OOM_MAXDEV * OOM_FRS], rsr[2][OOM_FRS];
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_SIZE;
  d.allreduce.threshold_bytes = 256;
  d.allocator = oom_sk_allocator(x->al);
  sk_fusion *f = NULL;
  sk_error err;
  memset(&err, 0, sizeof err);
  if (!oom_rc(s, sk_fusion_create(&d, &f, &err), err.msg, "fusion_create")) return s->rc;
  int h[OOM_FT + 4];
  for (int t = 0; t < OOM_FT + 4; t++) {
    char nm[16];
    sk_result rr;
    if (t < OOM_FT) {
      snprintf(nm, sizeof nm, "g%d", t);
      rr = sk_fusion_add_allreduce(f, c, send[t], recv[t], oom_fcount[t], SK_F32, SK_SUM, 0, nm, &h[t], NULL);
    } else if (t < OOM_FT + 2) {
      snprintf(nm, sizeof nm, "ag%d", t - OOM_FT);
      rr = sk_fusion_add_allgather(f, c, ags[t - OOM_FT], agr[t - OOM_FT], OOM_FAG, SK_F32, 0, nm, &h[t], NULL);
    } else {
      snprintf(nm, sizeof nm, "rs%d", t - OOM_FT - 2);
      rr = sk_fusion_add_reduce_scatter(f, c, rss[t - OOM_FT - 2], rsr[t - OOM_FT - 2], OOM_FRS, SK_F32, SK_SUM, 0, nm,
                                        &h[t], NULL);
    }
    if (!oom_rc(s, rr, sk_fusion_error_message(f), "fusion_add")) {
      sk_fusion_destroy(f);
      return s->rc;
    }
  }
  for (int step = 0; step < 2; step++) {
    oom_ffill(send, r, step);
    for (int j = 0; j < 2; j++) {
      for (int i = 0; i < OOM_FAG; i++) ags[j][i] = (float)((r + 1) * 100 + i + 7 * step + 50 * j);
      for (int i = 0; i < n * OOM_FRS; i++) rss[j][i] = (float)((r + 1) * (i + 1) + step + 3 * j);
    }
    for (int t = 0; t < OOM_FT + 4; t++) {
      int tt = step == 0 ? t : OOM_FT + 3 - t; /* step 1 marks them ready in reverse */
      if (!oom_rc(s, sk_fusion_ready(f, h[tt], NULL), sk_fusion_error_message(f), "fusion_ready")) {
        /* ready reports a plan failure (an allocation); nothing was launched */
        sk_fusion_destroy(f);
        return s->rc;
      }
    }
    if (!oom_rc(s, sk_fusion_wait(f, NULL), sk_fusion_error_message(f), step ? "fusion_wait (step 1)" : "fusion_wait (step 0)")) {
      sk_fusion_destroy(f);
      return s->rc;
    }
    bool bad = false;
    for (int t = 0; t < OOM_FT && !bad; t++)
      for (size_t i = 0; i < oom_fcount[t] && !bad; i++) {
        float e = (float)(n * (n + 1) / 2 * (t + 1 + step) + n * (int)i);
        if (recv[t][i] != e)
          bad = true, oom_bad(s, "fusion step %d: wait returned SK_OK but allreduce g%d [%zu] = %g, expected %g", step, t,
                              i, (double)recv[t][i], (double)e);
      }
    for (int j = 0; j < 2 && !bad; j++) {
      for (int q = 0; q < n && !bad; q++)
        for (int i = 0; i < OOM_FAG && !bad; i++) {
          float e = (float)((q + 1) * 100 + i + 7 * step + 50 * j);
          if (agr[j][q * OOM_FAG + i] != e)
            bad = true, oom_bad(s, "fusion step %d: wait returned SK_OK but allgather ag%d [%d] = %g, expected %g", step,
                                j, q * OOM_FAG + i, (double)agr[j][q * OOM_FAG + i], (double)e);
        }
      for (int i = 0; i < OOM_FRS && !bad; i++) {
        float e = (float)(n * (n + 1) / 2 * (r * OOM_FRS + i + 1) + n * (step + 3 * j));
        if (rsr[j][i] != e)
          bad = true, oom_bad(s, "fusion step %d: wait returned SK_OK but reduce_scatter rs%d [%d] = %g, expected %g",
                              step, j, i, (double)rsr[j][i], (double)e);
      }
    }
  }
  sk_fusion_destroy(f);
  s->ran = 1;
  return SK_OK;
}

/* ============================================================================================ */
/* The sweep                                                                                    */
/* ============================================================================================ */

typedef struct oom_scn {
  const char *name;
  int ndev;
  sk_device_fn fn;
  oom_rd_case *rd; /* redistribution cases */
  int nrd;
} oom_scn;

typedef struct oom_outcome {
  sk_result create_rc, run_rc;
  char create_msg[SK_ERROR_MSG_MAX], run_msg[SK_ERROR_MSG_MAX];
  unsigned long calls, failed, failed_in_create;
  long live;
  unsigned long bad_free;
  char leaked[512];
  double ms;
  oom_slot slots[OOM_MAXDEV];
} oom_outcome;

/* One create + run + destroy with the k-th allocation failing (k = 0: none). */
static void oom_once(const oom_scn *sc, oom_alloc *al, unsigned long k, bool persistent, oom_outcome *o) {
  memset(o, 0, sizeof *o);
  oom_alloc_arm(al, k, persistent);
  oom_rd_arg arg;
  memset(&arg, 0, sizeof arg);
  arg.ctx.al = al, arg.ctx.n = sc->ndev, arg.cases = sc->rd, arg.ncases = sc->nrd;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = sc->ndev;
  d.timeout_ms = OOM_TIMEOUT_MS;
  d.backend = sk_threads_backend();
  d.allocator = oom_sk_allocator(al);
  sk_error err;
  memset(&err, 0, sizeof err);
  uint64_t t0 = sk_now_ns();
  sk_world *w = NULL;
  o->create_rc = sk_world_create(&d, &w, &err);
  o->failed_in_create = atomic_load(&al->failed);
  if (o->create_rc != SK_OK) {
    snprintf(o->create_msg, sizeof o->create_msg, "%s", err.msg);
  } else {
    o->run_rc = sk_world_run(w, sc->fn, &arg, NULL);
    snprintf(o->run_msg, sizeof o->run_msg, "%s", sk_world_error_message(w));
    sk_world_destroy(w, NULL);
  }
  o->ms = ct_ms_since(t0);
  o->calls = atomic_load(&al->calls);
  o->failed = atomic_load(&al->failed);
  o->live = atomic_load(&al->live);
  o->bad_free = atomic_load(&al->bad_free);
  if (o->live) oom_alloc_reap(al, o->leaked, sizeof o->leaked);
  memcpy(o->slots, arg.ctx.slots, sizeof o->slots);
}

/* Appends "; " (after the first) and a formatted problem. */
static CT_PRINTF(4, 5) void oom_cat(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len + 8 >= cap) return;
  if (*len) *len += (size_t)snprintf(buf + *len, cap - *len, "; ");
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (k > 0) *len += (size_t)k;
  if (*len >= cap) *len = cap - 1;
}

/* What is wrong with an outcome ("" if nothing). */
static void oom_judge(const oom_scn *sc, const oom_outcome *o, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
#define OOM_PROB(...) oom_cat(buf, cap, &len, __VA_ARGS__)
  bool created = o->create_rc == SK_OK;
  if (!created && o->create_rc != SK_ERR_OUT_OF_MEMORY)
    OOM_PROB("sk_world_create returned %s: %s", sk_result_name(o->create_rc), o->create_msg);
  if (!created && !o->failed_in_create)
    OOM_PROB("sk_world_create returned %s without a failed allocation: %s", sk_result_name(o->create_rc), o->create_msg);
  if (o->ms >= OOM_TIMEOUT_MS / 2.0)
    OOM_PROB("took %.0f ms (world timeout %u ms): a device waited for the timeout", o->ms, OOM_TIMEOUT_MS);
  if (created) {
    bool failed_in_run = o->failed > o->failed_in_create;
    if (failed_in_run && o->run_rc != SK_ERR_OUT_OF_MEMORY)
      OOM_PROB("sk_world_run returned %s although an allocation failed during it (%s)", sk_result_name(o->run_rc),
               o->run_msg[0] ? o->run_msg : "no world message");
    if (!failed_in_run && o->run_rc != SK_OK)
      OOM_PROB("sk_world_run returned %s with no allocation failed: %s", sk_result_name(o->run_rc), o->run_msg);
    for (int r = 0; r < sc->ndev; r++) {
      const oom_slot *s = &o->slots[r];
      if (s->nbad) OOM_PROB("rank %d: %s", r, s->bad);
      if (s->rc != SK_OK && s->rc != SK_ERR_OUT_OF_MEMORY && s->rc != SK_ERR_ABORTED)
        OOM_PROB("rank %d: %s returned %s: %s", r, s->where, sk_result_name(s->rc), s->msg);
      if (!failed_in_run && !s->ran) OOM_PROB("rank %d did not finish with nothing failed (%s: %s)", r, s->where, s->msg);
    }
  }
  if (o->live) OOM_PROB("leak: %ld blocks still allocated after destroy: %s", o->live, o->leaked);
  if (o->bad_free) OOM_PROB("%lu frees of blocks not allocated (or freed twice)", o->bad_free);
#undef OOM_PROB
}

static void oom_describe(const oom_outcome *o, int ndev, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "create %s, run %s, %lu calls, %lu failed, %.1f ms;",
                                sk_result_name(o->create_rc), o->create_rc ? "-" : sk_result_name(o->run_rc), o->calls,
                                o->failed, o->ms);
  for (int r = 0; r < ndev && len + 8 < cap; r++)
    len += (size_t)snprintf(buf + len, cap - len, " r%d:%s%s%s", r, o->slots[r].entered ? "" : "(not run)",
                            sk_result_name(o->slots[r].rc), o->slots[r].rc ? "@" : "");
  for (int r = 0; r < ndev && len + 8 < cap; r++)
    if (o->slots[r].rc) len += (size_t)snprintf(buf + len, cap - len, " [r%d %s: %s]", r, o->slots[r].where, o->slots[r].msg);
}

static void oom_sweep(const oom_scn *sc, bool persistent) {
  const char *mode = persistent ? "persistent" : "once";
  oom_alloc al;
  oom_alloc_init(&al);
  if (sc->rd) oom_rd_prepare(sc->rd, sc->nrd);
  char prob[2048], desc[2048];
  oom_outcome o;
  /* counting runs */
  unsigned long nmin = (unsigned long)-1, nmax = 0;
  for (int i = 0; i < 3; i++) {
    oom_once(sc, &al, 0, false, &o);
    oom_judge(sc, &o, prob, sizeof prob);
    cr_assert(!prob[0], "%s: counting run %d: %s", sc->name, i, prob);
    if (o.calls < nmin) nmin = o.calls;
    if (o.calls > nmax) nmax = o.calls;
  }
  cr_expect_eq(nmin, nmax, "%s: allocations vary between counting runs: %lu..%lu", sc->name, nmin, nmax);
  cr_assert(nmax > 0);
  const char *only = getenv("OOM_K"), *reps_env = getenv("OOM_PASSES");
  const char *verbose_env = getenv("OOM_VERBOSE");
  bool verbose = verbose_env && verbose_env[0] == '1';
  unsigned long k0 = 1, k1 = nmax;
  if (only && *only) k0 = k1 = strtoul(only, NULL, 10);
  int passes = reps_env && *reps_env ? atoi(reps_env) : OOM_PASSES;
  int nprob = 0, nslow = 0;
  unsigned long runs = 0;
  double worst = 0, total = 0;
  uint64_t t0 = sk_now_ns();
  for (int pass = 0; pass < passes && nslow < OOM_MAX_SLOW; pass++)
    for (unsigned long k = k0; k <= k1 && nslow < OOM_MAX_SLOW; k++) {
      oom_once(sc, &al, k, persistent, &o);
      runs++;
      total += o.ms;
      if (o.ms > worst) worst = o.ms;
      if (o.ms >= OOM_TIMEOUT_MS / 2.0) nslow++;
      oom_judge(sc, &o, prob, sizeof prob);
      if (verbose || prob[0]) oom_describe(&o, sc->ndev, desc, sizeof desc);
      if (verbose)
        fprintf(stderr, "oom %s %s pass %d k=%lu: %s%s%s\n", sc->name, mode, pass, k, desc, prob[0] ? "\n    PROBLEM: " : "",
                prob);
      if (prob[0] && nprob++ < OOM_MAX_REPORTS)
        cr_expect(false, "%s, %s, k=%lu of %lu (pass %d): %s\n    outcome: %s", sc->name, mode, k, nmax, pass, prob, desc);
    }
  cr_expect(nslow < OOM_MAX_SLOW, "%s, %s: sweep stopped after %d runs that waited for the timeout", sc->name, mode, nslow);
  cr_expect(nprob == 0, "%s, %s: %d of %lu runs had problems (first %d shown)", sc->name, mode, nprob, runs,
            nprob < OOM_MAX_REPORTS ? nprob : OOM_MAX_REPORTS);
  fprintf(stderr,
          "oom/%s_%s: %lu allocations, k=%lu..%lu x %d passes: %lu runs in %.0f ms (worst %.1f ms, mean %.1f ms), %d with "
          "problems\n",
          sc->name, mode, nmax, k0, k1, passes, runs, ct_ms_since(t0), worst, total / (double)(runs ? runs : 1), nprob);
  pthread_mutex_destroy(&al.lock);
}

static const oom_scn oom_world = {"world", 4, oom_dev_world, NULL, 0};
static const oom_scn oom_split = {"split", 4, oom_dev_split, NULL, 0};
static const oom_scn oom_async = {"async", 4, oom_dev_async, NULL, 0};
static const oom_scn oom_redist4 = {"redist4", 4, oom_dev_redist, oom_rd4, 1};
static const oom_scn oom_redist22 = {"redist2x2", 4, oom_dev_redist, oom_rd22, 3};
static const oom_scn oom_redist_ms = {"redist_ms", 4, oom_dev_redist, oom_rdms, 3};
static const oom_scn oom_bcast = {"bcast", 4, oom_dev_bcast, NULL, 0};
static const oom_scn oom_fusion = {"fusion", 4, oom_dev_fusion, NULL, 0};

static void oom_setup(void) {
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&oom_mesh22, "a=2,b=2", &e), SK_OK, "%s", e.msg);
  static const int64_t shape[2] = {8, 8};
  for (int p = 0; p < OOM_BC; p++)
    cr_assert_eq(sk_layout_parse(&oom_bc_layouts[p], &oom_mesh22, oom_bc_maps[p], 2, shape, &e), SK_OK, "%s", e.msg);
}

Test(oom, world_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_world, false); }
Test(oom, world_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_world, true); }
Test(oom, split_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_split, false); }
Test(oom, split_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_split, true); }
Test(oom, async_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_async, false); }
Test(oom, async_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_async, true); }
Test(oom, redist4_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_redist4, false); }
Test(oom, redist4_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_redist4, true); }
Test(oom, redist2x2_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_redist22, false); }
Test(oom, redist2x2_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_redist22, true); }
Test(oom, redist_ms_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_redist_ms, false); }
Test(oom, redist_ms_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_redist_ms, true); }
Test(oom, bcast_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_bcast, false); }
Test(oom, bcast_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_bcast, true); }
Test(oom, fusion_once, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_fusion, false); }
Test(oom, fusion_persistent, .init = oom_setup, .timeout = 120) { oom_sweep(&oom_fusion, true); }
