/* sk_threads.h -- the built-in backend: N threads in one process act as N devices.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_THREADS_IMPL + SK_COMM_IMPL + SK_TOPOLOGY_IMPL)
                             #include "sk_threads.h"
   Link with -lpthread. Linux only (futex).

     sk_world_desc d = {0};
     d.ndevices = 8;
     d.backend = sk_threads_backend();
     d.backend_config = &cfg;          // optional sk_threads_config, zero = defaults

   HOW IT WORKS
     All device buffers live in one address space, so collectives copy straight between the
     devices' own buffers: no staging. Once every member has posted its buffers, a collective
     is cut into tasks of up to 256 KiB of output, and every member claims tasks until none is
     left: the threads that are running do the work of those that are not (8 devices on 2
     cores), and the split stays even on a noisy machine. A reduction's member takes its tasks
     from a lane of its own (one slice of every output) while every member has a CPU, and its
     claims are dealt to one stretch per CPU beyond that, so each core walks its own stretch as
     a static split would.
     AllReduce is one pass: a task reads
     its range of all N inputs once and writes it to all N outputs (2*N*S bytes of memory
     traffic in all, the minimum), f32/f64 sums in registers, other types through an L1-sized
     block, reducing in the fixed order rank 0..N-1 so that results are bitwise deterministic
     whoever runs the task. Outputs too large to stay in cache are written with streaming
     stores (no read-for-ownership), except where an output is also an input (in place).
     In-place AllToAll exchanges blocks pairwise, without a staging copy. Small AllReduces
     (<= small_bytes per rank) go through per-member inline slots: one synchronisation instead
     of two.
     Waiting: a spin of at most 20 us (only when devices <= cores; each member's budget halves
     when a spin runs out and doubles when one succeeds, between 0.25 and 20 us, so device threads
     the scheduler put on one core hand over at once), then sched_yield, then a futex sleep in
     bounded slices, always bounded by the world's timeout and woken by abort. sk_world_run's
     device threads are bound to their own CPUs when they fit (sk_threads_config.bind), as
     mpirun binds processes: left alone, the scheduler kept 2 of them on one CPU in half the runs.
     Non-blocking collectives run on a per-communicator progress thread per device (started on
     first use), in issue order; Send/Recv complete on whichever side arrives second.
     Every collective also checks that all members made the same call (kind, count, dtype, op,
     root): a mismatch returns SK_ERR_MISMATCH on every member, naming rank 0's call and the
     first that differs. The backend's own traffic (a split's exchanges, peer access) is tagged
     and never matches a user's call. A communicator belongs to the thread that created it: a
     call from another thread returns SK_ERR_INVALID_ARGUMENT and writes nothing.
   VIRTUAL CLOCKS (a cluster model in sk_world_desc.cluster, see sk_link_model)
     Each user call is priced with sk_topology.h, as the dry run prices it: a collective with
     sk_cluster_coll_us on its group's world ranks in ascending order (sorted once when the
     group is made), a Send/Recv with sk_cluster_p2p_us between the two world ranks. On a flat
     link both give sk_link_cost_us's ring values; under a topology, the cheapest algorithm.
   FAULTS (abort, timeout, a failing or departed device)
     No member returns from a collective while a peer's task can still touch its buffers. A
     member that leaves on a fault first closes the group's task gate (no task starts after it)
     and drains the tasks already running (each ends within one task); members stop claiming at
     the first task after an abort, so abort latency does not grow with the collective's size.
     A peer whose sub-communicator was destroyed, or whose sk_world_run device function has
     returned, will never arrive: waiting for it returns SK_ERR_MISMATCH at once, naming it, and
     takes the world down (as a timeout does). Sub-groups that a fault left unreleased are freed
     with the world.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_THREADS_IMPL)
#define SK_THREADS_IMPL
#endif
#ifndef SK_THREADS_H
#define SK_THREADS_H

#include "sk_backend.h"

SK_EXTERN_C_BEGIN

/* Optional backend_config for the threads backend; zero fields mean the default:
     small_bytes   256: AllReduce of at most this many bytes per rank uses the inline-slot path
                   (a test knob too: 0 keeps the default, larger values are capped at 1024;
                   set force_large to test the large path on tiny counts)
     force_large   false: never use the inline path
     spin          0 = auto (spin only when devices <= online cores), 1 = always, -1 = never
     bind          0 = auto: when 2 or more devices are no more than the CPUs the calling thread
                   may run on, each of sk_world_run's device threads runs on its own share of
                   them (device i: CPUs [i * C / N, (i + 1) * C / N) of the C, in order), as
                   mpirun binds one process per core; 1 = always (more devices than CPUs: round
                   robin, one CPU each); -1 = never. Only the threads sk_world_run creates are
                   bound (and what they start inherits it); they end with the run. Threads that
                   join with sk_comm_init_rank are the caller's and are left alone.
     cache_bytes   0 = the last-level cache of CPU 0 as Linux reports it (sysfs), 32 MiB when it
                   does not: a copying collective writes with streaming stores only when its
                   inputs and outputs reach twice this (reductions from 8 MiB, or this if smaller),
                   so that smaller outputs stay in the cache for whatever reads them next
   A spin or bind outside -1..1 is refused (SK_ERR_INVALID_ARGUMENT) by sk_world_create. */
typedef struct sk_threads_config {
  size_t small_bytes;
  bool force_large;
  int spin;
  int bind;
  size_t cache_bytes;
} sk_threads_config;

SK_API const sk_backend *sk_threads_backend(void);

SK_EXTERN_C_END

#endif /* SK_THREADS_H */

/* ==== implementation ======================================================================== */
#if defined(SK_THREADS_IMPL) && !defined(SK_THREADS_IMPL_DONE)
#define SK_THREADS_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include "sk_topology.h" /* the clocks price each call as the dry run does */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h> /* qsort */
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if !defined(__cplusplus)
/* Strict C11 hides these unless a feature macro preceded the first system include (see
   sk_comm.h); the prototypes are glibc's and musl's. */
extern long syscall(long number, ...);
extern long sysconf(int name);
#endif

SK_EXTERN_C_BEGIN

#if defined(__x86_64__) || defined(__i386__)
#define SK__PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define SK__PAUSE() __asm__ __volatile__("yield")
#else
#define SK__PAUSE() ((void)0)
#endif

#define SK__SC __ATOMIC_SEQ_CST
#define SK__CL 64                        /* cache line */
#define SK__SLICE_NS 20000000ull         /* a futex sleep lasts at most this; then abort/deadline are rechecked */
#define SK__YIELD_NS 100000ull           /* yield this long before sleeping */
#define SK__SPIN_NS 20000ull             /* spin at most this long (only when devices <= cores) */
#define SK__SPIN_MIN_NS 250ull           /* ... and at least this long, so the budget can grow back */
#define SK__COPY_BLOCK 32768             /* bytes copied to every destination while hot in L1 */
#define SK__SMALL_CAP 1024               /* largest small_bytes */
#define SK__LANES_MAX 64                 /* a group's task lanes (sk__tlane_take) */

/* ---- waiting ------------------------------------------------------------------------------ */

/* A futex word plus a count of sleepers, so wakers skip the syscall when nobody sleeps. */
typedef struct sk__tsignal {
  uint32_t epoch;
  uint32_t sleepers;
} sk__tsignal;

/* Called after a state change (a seq_cst store or read-modify-write). A waiter counts itself in
   `sleepers` before its last look at the state, so either it sees the change or this sees it;
   only then is the epoch bumped (making its futex_wait return) and the futex woken. No shared
   write at all when nobody sleeps: the fast path of every collective passes here. */
static void sk__twake(sk__tsignal *s) {
  if (!__atomic_load_n(&s->sleepers, SK__SC)) return;
  __atomic_fetch_add(&s->epoch, 1, SK__SC);
  syscall(SYS_futex, &s->epoch, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

typedef bool (*sk__tpred)(const void *arg);
/* Whether a wait can never succeed (a peer it waits for has left): non-OK ends the wait. */
typedef sk_result (*sk__tbroken)(const void *arg);

/* Whether a peer broke the wait. A failing device aborts the world before it is marked gone,
   so the abort is read again after a departure is seen: a peer that left because it failed is
   reported as the abort it caused, never as a member that skipped the call. */
static sk_result sk__tbroken_now(sk_world *w, sk__tbroken broken, const void *arg) {
  sk_result b = broken ? broken(arg) : SK_OK;
  return b != SK_OK && sk_world_aborted(w) ? SK_ERR_ABORTED : b;
}

/* The spin's budget adapts to how waits end: a spin that sees the state change doubles it (up
   to SK__SPIN_NS), a spin that runs out halves it (down to SK__SPIN_MIN_NS). When the peer a
   member waits for shares its core (the scheduler put both device threads on one CPU, or
   another process holds the other one), the peer cannot run until the spinner yields, so every
   full spin is lost: 2 devices on one core took 22.8 us per 8-B AllReduce with a fixed 20 us
   spin (3.0 us with the budget floored at 1 us, 2.2 us at 0.25 us: the yield's hand-over is the
   rest). Relaxed atomics: a member's device thread and its progress thread both wait. */
static void sk__tspin_learn(uint32_t *spin_ns, uint64_t budget, bool seen) {
  uint64_t next = seen ? budget * 2 : budget / 2;
  next = next > SK__SPIN_NS ? SK__SPIN_NS : next < SK__SPIN_MIN_NS ? SK__SPIN_MIN_NS : next;
  if (next != budget) __atomic_store_n(spin_ns, (uint32_t)next, __ATOMIC_RELAXED);
}

/* Spins (bounded in time: if the peer is descheduled, spinning longer only delays it) until
   pred(arg) or the budget is spent; *now ends at the last clock reading. */
static bool sk__tspin(sk__tpred pred, const void *arg, uint64_t start, uint64_t budget, uint64_t *now) {
  while (*now - start < budget) {
    for (int i = 0; i < 4; i++) { /* a clock read per ~0.1 us: the budget goes down to 0.25 us */
      SK__PAUSE();
      if (pred(arg)) return true;
    }
    *now = sk_now_ns();
  }
  return false;
}

/* Waits until pred(arg): spin (*spin_ns: the member's budget, 0 when devices outnumber the
   cores), then yield, then futex sleep in bounded slices. Returns SK_ERR_ABORTED when the world
   aborts, SK_ERR_TIMEOUT at the deadline, and what broken(arg) returns (if given) once that is
   not SK_OK; abort and broken are looked at after the spin, on every yield and on every wake-up
   or slice. */
static sk_result sk__twait(sk_world *w, sk__tsignal *s, sk__tpred pred, const void *arg, uint32_t *spin_ns,
                           sk__tbroken broken) {
  if (pred(arg)) return SK_OK;
  uint64_t start = sk_now_ns(), now = start, budget = __atomic_load_n(spin_ns, __ATOMIC_RELAXED);
  if (budget) {
    bool seen = sk__tspin(pred, arg, start, budget, &now);
    sk__tspin_learn(spin_ns, budget, seen);
    if (seen) return SK_OK;
  }
  uint64_t deadline = start + (uint64_t)sk_world_config(w)->timeout_ms * 1000000ull;
  while (now - start < budget + SK__YIELD_NS) {
    sched_yield();
    if (pred(arg)) return SK_OK;
    if (sk_world_aborted(w)) return SK_ERR_ABORTED;
    sk_result b = sk__tbroken_now(w, broken, arg);
    if (b != SK_OK) return pred(arg) ? SK_OK : b;
    now = sk_now_ns();
  }
  for (;;) {
    uint32_t e = __atomic_load_n(&s->epoch, SK__SC);
    __atomic_fetch_add(&s->sleepers, 1, SK__SC);
    if (pred(arg)) {
      __atomic_fetch_sub(&s->sleepers, 1, SK__SC);
      return SK_OK;
    }
    now = sk_now_ns();
    sk_result b = sk_world_aborted(w) ? SK_ERR_ABORTED : sk__tbroken_now(w, broken, arg);
    if (b != SK_OK || now >= deadline) {
      __atomic_fetch_sub(&s->sleepers, 1, SK__SC);
      return b == SK_ERR_ABORTED ? b : b != SK_OK ? (pred(arg) ? SK_OK : b) : SK_ERR_TIMEOUT;
    }
    uint64_t slice = deadline - now < SK__SLICE_NS ? deadline - now : SK__SLICE_NS;
    struct timespec ts;
    ts.tv_sec = (time_t)(slice / 1000000000ull);
    ts.tv_nsec = (long)(slice % 1000000000ull);
    syscall(SYS_futex, &s->epoch, FUTEX_WAIT_PRIVATE, e, &ts, NULL, 0);
    __atomic_fetch_sub(&s->sleepers, 1, SK__SC);
    if (pred(arg)) return SK_OK;
  }
}

/* Idling without a deadline, for waits that end by construction: the progress thread on its
   queue, and drains of tasks already running (each ends within one task). One slice: */
static void sk__tidle_slice(sk__tsignal *s, sk__tpred pred, const void *arg) {
  uint32_t e = __atomic_load_n(&s->epoch, SK__SC);
  __atomic_fetch_add(&s->sleepers, 1, SK__SC);
  if (!pred(arg)) {
    struct timespec ts = {0, (long)SK__SLICE_NS};
    syscall(SYS_futex, &s->epoch, FUTEX_WAIT_PRIVATE, e, &ts, NULL, 0);
  }
  __atomic_fetch_sub(&s->sleepers, 1, SK__SC);
}

static void sk__tidle(sk__tsignal *s, sk__tpred pred, const void *arg) {
  while (!pred(arg)) sk__tidle_slice(s, pred, arg);
}

/* ---- shared state ------------------------------------------------------------------------- */

/* One member's postings, written by that member only, read by its peers after `arrive`. */
typedef struct sk__tslot {
  sk_coll coll[2];   /* by sequence parity: peers may still read the previous one */
  int origin[2];     /* SK__ORIGIN_*: who made the call (user, or the backend's own traffic) */
  sk_peer_fn peer_fn[2]; /* peer_access: this member's function and context */
  void *peer_ctx[2];
  int left;          /* atomic: this member's communicator was destroyed */
  uint64_t posted;   /* atomic: sequence number of the last posting */
  uint64_t seq;      /* owner only: collectives this member has posted */
  uint64_t tasks;    /* owner only: tasks of all earlier collectives (the claim counter's base) */
  double link_free;  /* owner only, link model: when the group's last collective ends (us) */
  /* AllToAllV, by parity: values a peer may read after this member has returned (its count
     arrays may be gone by then): the largest block it sends, and its busiest side (elements to
     or from the others) for the link model. */
  size_t vmax[2], vbusy[2];
  char pad[SK__CL];
} sk__tslot;

typedef struct sk__tp2p sk__tp2p;

/* A communicator's shared state, one per group, referenced by every member. */
typedef struct sk__tgroup {
  uint64_t arrive; /* atomic: members that posted, summed over all collectives */
  char pad0[SK__CL - sizeof(uint64_t)];
  uint64_t claim; /* atomic: tasks claimed, over all collectives */
  char pad1[SK__CL - sizeof(uint64_t)];
  uint64_t done; /* atomic: tasks finished, over all collectives */
  char pad1b[SK__CL - sizeof(uint64_t)];
  sk__tsignal sig;
  char pad2[SK__CL - sizeof(sk__tsignal)];
  int size;
  int refs; /* atomic: members still attached */
  int *wranks;      /* member -> world rank */
  int *ascending;   /* the members' world ranks in ascending order: what the cluster model
                       prices a call by (sk_topology.h), sorted once here, not per call */
  sk__tslot *slots; /* size entries */
  unsigned char *inline_data; /* size * 2 * small_bytes: small AllReduce inputs */
  size_t small_bytes;
  pthread_mutex_t p2p_lock; /* also guards vbad */
  /* AllToAllV's verdict, by parity: the lowest ordered pair (i * size + j) whose counts disagree
     (SIZE_MAX: none), with what i sends and j expects. Tasks find it; members read it after. */
  struct { size_t pair, sent, want; } vbad[2];
  sk__tp2p *p2p_head, *p2p_tail; /* unmatched sends and receives, in posting order */
  uint64_t *lanes;  /* nlanes atomic counters, one a cache line (sk__tlane_take) */
  int nlanes;       /* size when every member has a CPU (and size <= SK__LANES_MAX), else 0 */
  void *mem;        /* the one allocation holding this group */
  struct sk__tgroup *reg_prev, *reg_next; /* the world's registry of sub-groups */
} sk__tgroup;

typedef struct sk__tworld {
  int n;
  int *claimed;          /* atomic per rank: a thread has joined as this rank */
  int *gone;             /* atomic per rank: sk_world_run's device thread has finished */
  pthread_mutex_t lock;  /* guards the registry */
  sk__tgroup *groups;    /* registry of live sub-groups: freed at world destroy if a fault
                            left some unreleased (members that never learned of their group) */
  sk__tgroup *world_group;
  bool spin;
  int bind;              /* the config's bind: 0 auto, 1 always, -1 never */
  size_t small_bytes;
  bool force_large;
  int cpus;              /* CPUs online: owned or dealt task lanes (sk__tlanes_of) */
  size_t cache_bytes;    /* the config's, or the detected last-level cache (sk__tplan_nt) */
  const sk_allocator *alloc;
} sk__tworld;

typedef struct sk__treq sk__treq;

/* One member's view of a communicator (sk_comm.state). */
typedef struct sk__tmember {
  sk__tgroup *g;
  int me;
  sk_comm *comm;
  sk__tworld *tw;
  pthread_t owner;        /* the device thread that created this communicator */
  const void **ptrs;      /* 2 * size entries: scratch for kernels */
  unsigned char **outs;   /* size entries: output pointers of one task */
  bool *alias;            /* size entries: output j is also an input (in place) */
  /* progress engine for non-blocking collectives */
  pthread_mutex_t qlock;
  sk__treq *qhead, *qtail;
  sk__tsignal qsig;       /* wakes the progress thread */
  pthread_t thread;
  bool thread_started;
  uint32_t spin_ns;       /* atomic (relaxed): the waits' spin budget, 0 = never spin (sk__twait) */
  int stop;               /* atomic */
  uint64_t issued;        /* device thread only: non-blocking collectives issued */
  uint64_t completed;     /* atomic: ... completed by the progress thread */
  sk__treq *live;         /* device thread only: requests not yet freed (freed at destroy) */
} sk__tmember;

/* A large Send/Recv message being copied in chunks (sk__tp2p_copy), published on the request
   of the side that posted first, so that its owner can copy chunks while it waits. */
typedef struct sk__tp2p_job {
  const unsigned char *src;
  unsigned char *dst;
  size_t bytes;
  uint32_t chunks;
  bool nt;
  int ready;                /* atomic: the fields above are set */
  uint32_t next, finished;  /* atomic: chunks claimed, chunks copied and fenced */
} sk__tp2p_job;

struct sk__treq {
  sk_request base;
  sk__treq *next;
  sk__treq *live_prev, *live_next; /* the owner's list of unfreed requests */
  sk__tmember *m;
  int done; /* atomic */
  sk_result result;
  sk__tp2p_job job;           /* Send/Recv only */
  char msg[SK_ERROR_MSG_MAX]; /* a failure found by a peer; the owner copies it to its comm */
};

/* A posted, unmatched Send or Recv. */
struct sk__tp2p {
  sk__tp2p *next;
  int src, dst; /* member indices */
  bool is_send;
  sk__treq *req;
};

#define SK__TWORLD(w) ((sk__tworld *)sk_world_state(w))
#define SK__TMEMBER(c) ((sk__tmember *)sk_comm_state(c))

/* ---- groups ------------------------------------------------------------------------------- */

static int sk__tint_order(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static sk__tgroup *sk__tgroup_new(sk__tworld *tw, int size, const int *wranks) {
  size_t sb = tw->small_bytes;
  size_t off_slots = (sizeof(sk__tgroup) + SK__CL - 1) / SK__CL * SK__CL;
  size_t off_wranks = off_slots + sizeof(sk__tslot) * (size_t)size;
  size_t off_inline = (off_wranks + 2 * sizeof(int) * (size_t)size + SK__CL - 1) / SK__CL * SK__CL;
  int nlanes = size <= tw->cpus && size <= SK__LANES_MAX ? size : 0; /* owned lanes: a CPU each */
  size_t off_lanes = off_inline + (size_t)size * 2 * sb; /* a multiple of 8 */
  size_t total = (off_lanes + SK__CL - 1) / SK__CL * SK__CL + (size_t)nlanes * SK__CL;
  unsigned char *mem = (unsigned char *)sk__calloc(tw->alloc, total, SK__CL);
  if (!mem) return NULL;
  sk__tgroup *g = (sk__tgroup *)mem;
  g->mem = mem;
  g->size = size;
  g->slots = (sk__tslot *)(mem + off_slots);
  g->wranks = (int *)(mem + off_wranks);
  g->ascending = g->wranks + size;
  g->inline_data = mem + off_inline;
  g->small_bytes = sb;
  g->lanes = (uint64_t *)(void *)(mem + (off_lanes + SK__CL - 1) / SK__CL * SK__CL);
  g->nlanes = nlanes;
  for (int i = 0; i < size; i++) g->wranks[i] = g->ascending[i] = wranks ? wranks[i] : i;
  if (wranks) qsort(g->ascending, (size_t)size, sizeof(int), sk__tint_order); /* a split orders by key */
  if (pthread_mutex_init(&g->p2p_lock, NULL) != 0) {
    sk__free(tw->alloc, mem);
    return NULL;
  }
  if (wranks) { /* a sub-group: registered until freed */
    pthread_mutex_lock(&tw->lock);
    g->reg_next = tw->groups;
    if (tw->groups) tw->groups->reg_prev = g;
    tw->groups = g;
    pthread_mutex_unlock(&tw->lock);
  }
  return g;
}

static void sk__tgroup_free(sk__tworld *tw, sk__tgroup *g) {
  if (g != tw->world_group) {
    pthread_mutex_lock(&tw->lock);
    if (g->reg_prev)
      g->reg_prev->reg_next = g->reg_next;
    else
      tw->groups = g->reg_next;
    if (g->reg_next) g->reg_next->reg_prev = g->reg_prev;
    pthread_mutex_unlock(&tw->lock);
  }
  pthread_mutex_destroy(&g->p2p_lock);
  sk__free(tw->alloc, g->mem);
}

static void sk__tgroup_release(sk__tworld *tw, sk__tgroup *g) {
  if (g != tw->world_group && __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) == 0) sk__tgroup_free(tw, g);
}

/* ---- members ------------------------------------------------------------------------------ */

static sk__tmember *sk__tmember_new(sk__tworld *tw, sk__tgroup *g, int me, sk_comm *comm) {
  sk__tmember *m = (sk__tmember *)sk__calloc(tw->alloc, sizeof *m, SK__CL);
  if (!m) return NULL;
  size_t k = (size_t)g->size;
  m->ptrs = (const void **)sk__alloc(tw->alloc, sizeof(void *) * 2 * k, SK__CL);
  m->outs = (unsigned char **)sk__alloc(tw->alloc, sizeof(void *) * k, SK__CL);
  m->alias = (bool *)sk__alloc(tw->alloc, k, SK__CL);
  if (!m->ptrs || !m->outs || !m->alias || pthread_mutex_init(&m->qlock, NULL) != 0) {
    sk__free(tw->alloc, (void *)m->ptrs);
    sk__free(tw->alloc, m->outs);
    sk__free(tw->alloc, m->alias);
    sk__free(tw->alloc, m);
    return NULL;
  }
  m->g = g, m->me = me, m->comm = comm, m->tw = tw;
  m->spin_ns = tw->spin ? (uint32_t)SK__SPIN_NS : 0;
  m->owner = pthread_self();
  return m;
}

/* ---- the collective engine ---------------------------------------------------------------- */

typedef struct sk__tcount_arg {
  const uint64_t *ctr;
  uint64_t target;
} sk__tcount_arg;

static bool sk__tcount_reached(const void *p) {
  const sk__tcount_arg *a = (const sk__tcount_arg *)p;
  return __atomic_load_n(a->ctr, SK__SC) >= a->target;
}

/* Why a member posted. The backend's own agreement traffic (a split's exchanges, a peer
   access) must never match a user's call: a split against a user's AllGather of 3 x i64 would
   otherwise pass the mismatch check and read user data as group pointers. */
enum { SK__ORIGIN_USER = 0, SK__ORIGIN_SPLIT, SK__ORIGIN_PEER, SK__ORIGIN_CLOCK, SK__ORIGIN_CHARGE };

/* A member that will never post again: it destroyed its sub-communicator, or sk_world_run's
   device function for its rank has returned (which also covers sub-communicators it did not
   destroy). A bring-your-own thread that destroys its world communicator may join again, so
   that alone does not count. */
static bool sk__tleft(const sk__tmember *m, int i) {
  const sk__tgroup *g = m->g;
  return __atomic_load_n(&g->slots[i].left, SK__SC) || __atomic_load_n(&m->tw->gone[g->wranks[i]], SK__SC);
}

/* The arrival wait: the count to reach, and who has left without posting sequence `seq`. */
typedef struct sk__tarrive_arg {
  sk__tcount_arg c; /* first: sk__tcount_reached reads it */
  const sk__tmember *m;
  uint64_t seq;
  int gone; /* out: the member that left */
} sk__tarrive_arg;

static sk_result sk__tarrive_broken(const void *p) {
  sk__tarrive_arg *a = (sk__tarrive_arg *)(uintptr_t)p;
  const sk__tgroup *g = a->m->g;
  for (int i = 0; i < g->size; i++)
    if (__atomic_load_n(&g->slots[i].posted, SK__SC) < a->seq && sk__tleft(a->m, i)) {
      a->gone = i;
      return SK_ERR_MISMATCH;
    }
  return SK_OK;
}

/* Names the members whose posted sequence is below s ("3 (world rank 7), 5 (world rank 9)"). */
static void sk__tmissing(const sk__tgroup *g, uint64_t s, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  int count = 0;
  for (int i = 0; i < g->size && len + 32 < cap; i++) {
    uint64_t v = __atomic_load_n(&g->slots[i].posted, SK__SC);
    if (v < s) len += (size_t)snprintf(buf + len, cap - len, "%s%d (world rank %d)", count++ ? ", " : "", i, g->wranks[i]);
  }
  if (!count) snprintf(buf, cap, "none (late wake-up)");
}

/* Closes the group's task gate and waits for the tasks already claimed to finish. A member
   that leaves a collective on a fault calls it first: afterwards no task can start, and none is
   still running, so no peer touches its buffers once it returns. Bounded by one task. */
#define SK__CLOSED (1ull << 63) /* in g->claim */
static void sk__tclose_drain(sk__tgroup *g);

/* Turns a failed arrival wait into the member's message; the group's sequence is broken, so a
   timeout or a departure takes the world down. */
static sk_result sk__tarrive_failed(sk__tmember *m, sk_result r, const sk__tarrive_arg *a, const char *what) {
  sk_world *w = sk_comm_world(m->comm);
  if (r == SK_ERR_TIMEOUT) {
    char who[160];
    sk__tmissing(m->g, a->seq, who, sizeof who);
    sk_comm_set_error(m->comm, r, "%s: timed out after %u ms waiting for group ranks %s", what,
                      (unsigned)sk_world_config(w)->timeout_ms, who);
  } else if (r == SK_ERR_MISMATCH) {
    sk_comm_set_error(m->comm, r, "%s: group rank %d (world rank %d) has left (its communicator was destroyed or its "
                      "device function returned) without making this call", what, a->gone, m->g->wranks[a->gone]);
  } else {
    sk_comm_set_error(m->comm, r, "%s: the world was aborted (a device failed or sk_world_abort was called)", what);
  }
  if (r != SK_ERR_ABORTED) sk_world_fail(w, r, sk_comm_error_message(m->comm));
  sk__tclose_drain(m->g);
  return r;
}

/* Waits until every member has posted sequence s. */
static sk_result sk__twait_arrival(sk__tmember *m, uint64_t s, const char *what) {
  sk__tarrive_arg a;
  a.c.ctr = &m->g->arrive, a.c.target = s * (uint64_t)m->g->size, a.m = m, a.seq = s, a.gone = -1;
  sk_result r = sk__twait(sk_comm_world(m->comm), &m->g->sig, sk__tcount_reached, &a, &m->spin_ns, sk__tarrive_broken);
  return r == SK_OK ? r : sk__tarrive_failed(m, r, &a, what);
}

/* Waits until the group has finished `end` tasks; on a fault, drains instead. */
static sk_result sk__twait_tasks(sk__tmember *m, uint64_t end, const char *what) {
  sk__tcount_arg a;
  a.ctr = &m->g->done, a.target = end;
  sk_world *w = sk_comm_world(m->comm);
  sk_result r = sk__twait(w, &m->g->sig, sk__tcount_reached, &a, &m->spin_ns, NULL);
  if (r == SK_OK) return r;
  if (r == SK_ERR_TIMEOUT) {
    sk_comm_set_error(m->comm, r, "%s: timed out after %u ms waiting for %llu outstanding tasks", what,
                      (unsigned)sk_world_config(w)->timeout_ms, (unsigned long long)(end - __atomic_load_n(&m->g->done, SK__SC)));
    sk_world_fail(w, r, sk_comm_error_message(m->comm));
  } else {
    sk_comm_set_error(m->comm, r, "%s: the world was aborted (a device failed or sk_world_abort was called)", what);
  }
  sk__tclose_drain(m->g);
  return r;
}

static void sk__tclose_drain(sk__tgroup *g) {
  sk__tcount_arg a;
  a.ctr = &g->done;
  a.target = __atomic_fetch_or(&g->claim, SK__CLOSED, SK__SC) & ~SK__CLOSED;
  sk__tidle(&g->sig, sk__tcount_reached, &a);
}

/* Writes what one member called: the collective, or the backend's own traffic by name. */
static const char *sk__torigin_name(int origin) {
  return origin == SK__ORIGIN_SPLIT    ? "comm_split"
         : origin == SK__ORIGIN_PEER   ? "peer_access"
         : origin == SK__ORIGIN_CHARGE ? "clock_charge"
                                       : "clock_align";
}
static void sk__tdescribe(char *buf, size_t cap, int origin, const sk_coll *c) {
  if (origin == SK__ORIGIN_USER)
    sk_coll_describe(buf, cap, c);
  else
    snprintf(buf, cap, "%s", sk__torigin_name(origin));
}

/* Compares every member's posting with rank 0's. All members see the same postings, so they
   agree on the verdict and on the message. */
static sk_result sk__tcheck_match(sk__tmember *m, int p) {
  const sk__tgroup *g = m->g;
  const sk_coll *a = &g->slots[0].coll[p];
  int oa = g->slots[0].origin[p];
  for (int i = 1; i < g->size; i++) {
    const sk_coll *o = &g->slots[i].coll[p];
    int oo = g->slots[i].origin[p];
    if (oa == oo && sk_coll_same_call(a, o)) continue;
    char da[96], db[96];
    sk__tdescribe(da, sizeof da, oa, a);
    sk__tdescribe(db, sizeof db, oo, o);
    return sk_comm_set_mismatch(m->comm, 0, da, i, db);
  }
  return SK_OK;
}

/* A Send/Recv message or a reduction (n x k bytes) at least this large is written with
   non-temporal stores (the copies decide by the cache's size, sk__tplan_nt): it would not stay
   in cache anyway, and streaming skips the read-for-ownership of every output line. */
#define SK__NT_MIN_BYTES (8u << 20)

static void sk__tstore(unsigned char *dst, const unsigned char *src, size_t n, bool nt) {
#if defined(__SSE2__)
  if (nt && n >= 64) {
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
      __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 32));
      __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 48));
      _mm_stream_si128((__m128i *)(void *)(dst + i), a);
      _mm_stream_si128((__m128i *)(void *)(dst + i + 16), b);
      _mm_stream_si128((__m128i *)(void *)(dst + i + 32), c);
      _mm_stream_si128((__m128i *)(void *)(dst + i + 48), d);
    }
    memcpy(dst + i, src + i, n - i);
    return;
  }
#endif
  (void)nt;
  memcpy(dst, src, n);
}

/* Orders streaming stores before the counter that tells peers the data is there. */
static void sk__tstore_fence(bool nt) {
#if defined(__SSE2__)
  if (nt) _mm_sfence();
#endif
  (void)nt;
}

/* Copies n bytes from src to every dst[i] (skipping dst == src), a block at a time so the source
   is read from memory once. */
static void sk__tcopy_to_all(const unsigned char *src, unsigned char *const *dst, int ndst, size_t n, bool nt) {
  for (size_t off = 0; off < n; off += SK__COPY_BLOCK) {
    size_t len = n - off < SK__COPY_BLOCK ? n - off : SK__COPY_BLOCK;
    for (int i = 0; i < ndst; i++)
      if (dst[i] + off != src + off) sk__tstore(dst[i] + off, src + off, len, nt);
  }
}

/* ---- work: tasks claimed by whichever member runs -------------------------------------------

   After every member has posted, a collective is cut into tasks of about SK__TASK_BYTES of
   output each, and every member claims tasks until none is left. Threads that are running do
   the work of those that are not (8 devices on 2 cores), and the split stays even on a noisy
   machine. Each task owns its output range, and reduces in the fixed order rank 0..N-1, so
   who runs it changes nothing in the result. Nobody returns before all tasks are finished,
   because peers read this member's send buffer and write its recv buffer. */

#define SK__TASK_BYTES (256u << 10)

typedef struct sk__tplan {
  size_t n, es, te; /* count, element size, elements per task */
  size_t per;       /* tasks per contiguous range of n elements */
  uint64_t total;   /* tasks of the whole collective */
  bool nt;          /* streaming stores */
} sk__tplan;

/* Whether a collective streams its outputs (sk__tstore, the fused sums). Streaming skips the
   read-for-ownership of every output line but leaves nothing in the cache, so it pays only once
   the data cannot stay in the last-level cache. A copy streams when its inputs and outputs
   (summed over the group) reach twice the cache: below that, ordinary stores measured 1.3-4.4x
   faster on a 32-MiB L3 (Broadcast at 8 devices, 1-2 MiB; Gather and Scatter at 16 MiB; AllGather
   and AllToAll at 2 devices, 8 MiB; bench/RESULTS.md), from one to two caches within the noise
   out of place and faster in place, and from 1.1 caches at 8 devices up to 2.3x slower
   streaming. A reduction keeps a fixed threshold, SK__NT_MIN_BYTES of n x k (or the cache, if
   smaller): ordinary stores below the cache measured faster at 2 devices, but up to 1.3x slower
   at 8, depending on the memory's state. */
static bool sk__tplan_nt(sk_coll_kind kind, size_t n_k_bytes, size_t in_bytes, size_t out_bytes, size_t cache) {
  if (sk_coll_info_of(kind).flags & SK_COLLF_REDUCES)
    return n_k_bytes >= (cache < SK__NT_MIN_BYTES ? cache : SK__NT_MIN_BYTES);
  return (in_bytes + out_bytes) / 2 >= cache;
}

static sk__tplan sk__tplan_of(const sk_coll *op, int k, size_t cache) {
  sk__tplan pl;
  memset(&pl, 0, sizeof pl);
  if (op->kind == SK_COLL_BARRIER || op->count == 0) return pl;
  pl.n = op->count, pl.es = sk_dtype_size(op->dtype);
  /* Tasks of up to SK__TASK_BYTES (long runs for the prefetchers), but at least 8 per range
     down to 16 KiB, so that mid-sized collectives still spread over the cores. */
  size_t tb = pl.n * pl.es / 8;
  tb = tb > SK__TASK_BYTES ? SK__TASK_BYTES : tb < (16u << 10) ? (16u << 10) : tb / SK__CL * SK__CL;
  pl.te = tb / pl.es;
  pl.per = (pl.n + pl.te - 1) / pl.te;
  /* one range per member whose block is gathered or scattered; pairs i <= j when both are */
  uint64_t uk = (uint64_t)k;
  sk_coll_info info = sk_coll_info_of(op->kind);
  bool sall = sk_coll_buf_all(info.send), rall = sk_coll_buf_all(info.recv);
  pl.total = sall && rall ? uk * (uk + 1) / 2 * pl.per : sall || rall ? uk * pl.per : pl.per;
  size_t in = sk_coll_buf_group_elems(info.send, pl.n, k, op->root) * pl.es;
  size_t out = sk_coll_buf_group_elems(info.recv, pl.n, k, op->root) * pl.es;
  pl.nt = sk__tplan_nt(op->kind, pl.n * pl.es * (size_t)k, in, out, cache);
  return pl;
}

#if defined(__SSE2__)
/* The common case fused: f32 and f64 sums add the k inputs in registers, 4 vectors at a time, and
   store the sums straight to every output, streamed where nt is set, the output is not an input
   (plain[j]) and is 16-byte aligned. Going through the block buffer below instead costs a third
   more CPU per task at 8 devices (its accumulators live in memory, and every output is copied
   from the buffer; bench/RESULTS.md). Each element is in[0] + in[1] + ... + in[k-1], left to
   right as sk_reduce_local adds, so results are bitwise the same. One step reads every input's
   lines before it writes the outputs', so an output that is also an input is safe. */
#define SK__TSUM_KERNEL(name, T, V, L, LOADU, ADD, STOREU, STREAM)                                   \
  static void name(const void *const *in, int k, unsigned char *const *out, const bool *plain, int nout, \
                   size_t len, bool nt) {                                                            \
    size_t i = 0;                                                                                    \
    for (; i + 4 * (L) <= len; i += 4 * (L)) {                                                       \
      const T *a = (const T *)in[0] + i;                                                             \
      V s0 = LOADU(a), s1 = LOADU(a + (L)), s2 = LOADU(a + 2 * (L)), s3 = LOADU(a + 3 * (L));         \
      for (int r = 1; r < k; r++) {                                                                  \
        const T *b = (const T *)in[r] + i;                                                           \
        s0 = ADD(s0, LOADU(b)), s1 = ADD(s1, LOADU(b + (L)));                                        \
        s2 = ADD(s2, LOADU(b + 2 * (L))), s3 = ADD(s3, LOADU(b + 3 * (L)));                          \
      }                                                                                              \
      for (int j = 0; j < nout; j++) {                                                               \
        T *d = (T *)(void *)out[j] + i;                                                              \
        if (nt && !plain[j] && ((uintptr_t)d & 15) == 0)                                             \
          STREAM(d, s0), STREAM(d + (L), s1), STREAM(d + 2 * (L), s2), STREAM(d + 3 * (L), s3);      \
        else                                                                                         \
          STOREU(d, s0), STOREU(d + (L), s1), STOREU(d + 2 * (L), s2), STOREU(d + 3 * (L), s3);      \
      }                                                                                              \
    }                                                                                                \
    for (; i < len; i++) { /* the tail, in the same order */                                         \
      T s = ((const T *)in[0])[i];                                                                   \
      for (int r = 1; r < k; r++) s += ((const T *)in[r])[i];                                        \
      for (int j = 0; j < nout; j++) ((T *)(void *)out[j])[i] = s;                                   \
    }                                                                                                \
  }
SK__TSUM_KERNEL(sk__tsum_f32, float, __m128, 4, _mm_loadu_ps, _mm_add_ps, _mm_storeu_ps, _mm_stream_ps)
SK__TSUM_KERNEL(sk__tsum_f64, double, __m128d, 2, _mm_loadu_pd, _mm_add_pd, _mm_storeu_pd, _mm_stream_pd)
#undef SK__TSUM_KERNEL
#endif

/* Reduces len elements of the k inputs m->ptrs[] into each of the nout outputs m->outs[]: f32 and
   f64 sums in registers (above), the rest a block at a time through an L1-sized buffer. An output
   that is also an input (in place) takes ordinary stores: its lines were just read, so writing
   them back costs nothing extra, whereas streaming would evict them; the other outputs stream
   when nt is set. */
static void sk__treduce_to(sk__tmember *m, const sk_coll *op, int nout, size_t len, bool nt) {
  int k = m->g->size;
  size_t es = sk_dtype_size(op->dtype);
  if (!es) return; /* validated before: never an invalid dtype */
  unsigned char tmp[8192];
  size_t block = sizeof tmp / es;
  const void **in = m->ptrs + k; /* second half: the inputs advanced block by block */
  for (int j = 0; j < nout; j++) { /* one output per member: only its own input can alias it */
    bool alias = nout == k && (const void *)m->outs[j] == m->ptrs[j];
    for (int i = 0; nout != k && i < k && !alias; i++) alias = (const void *)m->outs[j] == m->ptrs[i];
    m->alias[j] = alias;
  }
#if defined(__SSE2__)
  if (op->op == SK_SUM && (op->dtype == SK_F32 || op->dtype == SK_F64)) {
    (op->dtype == SK_F32 ? sk__tsum_f32 : sk__tsum_f64)(m->ptrs, k, m->outs, m->alias, nout, len, nt);
    return;
  }
#endif
  for (size_t off = 0; off < len; off += block) {
    size_t b = len - off < block ? len - off : block;
    for (int i = 0; i < k; i++) in[i] = (const unsigned char *)m->ptrs[i] + off * es;
    sk_reduce_local(tmp, in, k, b, op->dtype, op->op, NULL);
    for (int j = 0; j < nout; j++) sk__tstore(m->outs[j] + off * es, tmp, b * es, nt && !m->alias[j]);
  }
}

/* Pair number p of the upper triangle (i <= j) of a k x k matrix, row by row. */
static void sk__tpair(size_t k, size_t p, size_t *i, size_t *j) {
  size_t lo = 0, hi = k; /* row i starts at i*k - i*(i-1)/2 */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (mid * k - mid * (mid - 1) / 2 <= p)
      lo = mid;
    else
      hi = mid;
  }
  *i = lo;
  *j = lo + (p - (lo * k - lo * (lo - 1) / 2));
}

/* da <- sb and db <- sa, where da may be sa and db may be sb (in-place AllToAll): then each block
   is read into L1 first and written after, so the exchange needs no staging copy. */
static void sk__texchange(unsigned char *da, const unsigned char *sb, unsigned char *db,
                          const unsigned char *sa, size_t bytes, bool nt_a, bool nt_b) {
  if (da == db) { /* the diagonal block: a copy within one member */
    if (da != sb) sk__tstore(da, sb, bytes, nt_a);
    return;
  }
  unsigned char ta[4096], tb[4096];
  if (da != sa && db != sb) { /* out of place: two straight copies */
    sk__tstore(da, sb, bytes, nt_a);
    sk__tstore(db, sa, bytes, nt_b);
    return;
  }
  for (size_t off = 0; off < bytes; off += sizeof ta) {
    size_t b = bytes - off < sizeof ta ? bytes - off : sizeof ta;
    memcpy(ta, sa + off, b);
    memcpy(tb, sb + off, b);
    sk__tstore(da + off, tb, b, nt_a);
    sk__tstore(db + off, ta, b, nt_b);
  }
}

/* AllToAllV: one range of tasks per ordered pair (i, j), sized by the largest block any member
   sends (from the postings, so every member derives the same plan). Every pair has a task even
   when nothing moves: the tasks also check that the pair's counts agree. */
static sk__tplan sk__tplan_vec(const sk__tgroup *g, int p, size_t cache) {
  sk__tplan pl;
  memset(&pl, 0, sizeof pl);
  size_t most = 0;
  for (int i = 0; i < g->size; i++) most = g->slots[i].vmax[p] > most ? g->slots[i].vmax[p] : most;
  pl.n = most, pl.es = sk_dtype_size(g->slots[0].coll[p].dtype);
  if (!pl.es) return pl; /* validated before: never an invalid dtype */
  size_t tb = most * pl.es;
  tb = tb > SK__TASK_BYTES ? SK__TASK_BYTES : tb < pl.es ? pl.es : tb;
  pl.te = tb / pl.es;
  pl.per = most ? (most + pl.te - 1) / pl.te : 1;
  pl.total = (uint64_t)g->size * (uint64_t)g->size * pl.per;
  size_t k = (size_t)g->size, out = most * pl.es * k * k; /* at most: the largest block, k x k */
  pl.nt = sk__tplan_nt(SK_COLL_ALLTOALLV, 0, out, out, cache);
  return pl;
}

/* Records a pair whose counts disagree; the lowest pair wins, so the verdict (and message) is
   the same whichever member ran which task. */
static void sk__tvec_bad(sk__tgroup *g, int p, size_t pair, size_t sent, size_t want) {
  pthread_mutex_lock(&g->p2p_lock);
  if (pair < g->vbad[p].pair) g->vbad[p].pair = pair, g->vbad[p].sent = sent, g->vbad[p].want = want;
  pthread_mutex_unlock(&g->p2p_lock);
}

/* AllToAllV task: range r of the block member i sends to member j (pair = i * size + j). Both
   members' arrays are read here, while no member can have returned (every member waits for
   every task). A pair whose counts disagree moves nothing. */
static void sk__ttask_vec(sk__tgroup *g, int p, const sk__tplan *pl, size_t pair, size_t r) {
  int k = g->size, i = (int)(pair / (size_t)k), j = (int)(pair % (size_t)k);
  const sk_coll *si = &g->slots[i].coll[p], *sj = &g->slots[j].coll[p];
  size_t n = si->v.send_counts[j], lo = r * pl->te;
  if (n != sj->v.recv_counts[i]) {
    if (r == 0) sk__tvec_bad(g, p, pair, n, sj->v.recv_counts[i]);
    return;
  }
  if (lo >= n) return;
  size_t len = n - lo < pl->te ? n - lo : pl->te;
  size_t sd = sk_coll_vec_displ(si->v.send_counts, si->v.send_displs, j);
  size_t rd = sk_coll_vec_displ(sj->v.recv_counts, sj->v.recv_displs, i);
  sk__tstore((unsigned char *)sj->recv + (rd + lo) * pl->es, (const unsigned char *)si->send + (sd + lo) * pl->es,
             len * pl->es, pl->nt);
}

/* After every task: the verdict, the same on every member. */
static sk_result sk__tvec_verdict(sk__tmember *m, int p) {
  sk__tgroup *g = m->g;
  pthread_mutex_lock(&g->p2p_lock);
  size_t pair = g->vbad[p].pair, sent = g->vbad[p].sent, want = g->vbad[p].want;
  pthread_mutex_unlock(&g->p2p_lock);
  if (pair == SIZE_MAX) return SK_OK;
  int k = g->size;
  return sk_comm_set_error(m->comm, SK_ERR_MISMATCH,
                           "mismatch: alltoallv: rank %d sends %zu elements to rank %d, which expects %zu from it",
                           (int)(pair / (size_t)k), sent, (int)(pair % (size_t)k), want);
}

/* Runs task t of the collective posted under parity p. */
static sk_result sk__ttask(sk__tmember *m, int p, const sk__tplan *pl, uint64_t t) {
  sk__tgroup *g = m->g;
  int k = g->size;
  const sk_coll *op = &g->slots[m->me].coll[p];
  size_t es = pl->es, n = pl->n;
  size_t r = (size_t)(t % pl->per), lo = r * pl->te, hi = lo + pl->te < n ? lo + pl->te : n, len = hi - lo;
  size_t seg = (size_t)(t / pl->per); /* which contiguous range: a member index, or a pair */
#define SK__P(i) (&g->slots[(i)].coll[p])
#define SK__SEND(i, elem) ((const unsigned char *)SK__P(i)->send + (elem) * es)
#define SK__RECV(i, elem) ((unsigned char *)SK__P(i)->recv + (elem) * es)
  switch (op->kind) {
    case SK_COLL_ALLREDUCE:
      for (int i = 0; i < k; i++) m->ptrs[i] = SK__SEND(i, lo), m->outs[i] = SK__RECV(i, lo);
      sk__treduce_to(m, op, k, len, pl->nt);
      break;
    case SK_COLL_REDUCE:
      for (int i = 0; i < k; i++) m->ptrs[i] = SK__SEND(i, lo);
      m->outs[0] = SK__RECV(op->root, lo);
      sk__treduce_to(m, op, 1, len, pl->nt);
      break;
    case SK_COLL_REDUCE_SCATTER: /* seg = the member whose result this is */
      for (int i = 0; i < k; i++) m->ptrs[i] = SK__SEND(i, seg * n + lo);
      m->outs[0] = SK__RECV(seg, lo);
      sk__treduce_to(m, op, 1, len, pl->nt);
      break;
    case SK_COLL_ALLGATHER: { /* seg = the member whose contribution is copied */
      unsigned char **dst = (unsigned char **)(void *)m->ptrs;
      for (int i = 0; i < k; i++) dst[i] = SK__RECV(i, seg * n + lo);
      sk__tcopy_to_all(SK__SEND(seg, lo), dst, k, len * es, pl->nt);
      break;
    }
    case SK_COLL_GATHER: /* seg = the member whose block lands in the root's recv (in place: already there) */
      if (SK__RECV(op->root, seg * n + lo) != SK__SEND(seg, lo))
        sk__tstore(SK__RECV(op->root, seg * n + lo), SK__SEND(seg, lo), len * es, pl->nt);
      break;
    case SK_COLL_SCATTER: /* seg = the member that receives block seg of the root's send */
      if (SK__RECV(seg, lo) != SK__SEND(op->root, seg * n + lo))
        sk__tstore(SK__RECV(seg, lo), SK__SEND(op->root, seg * n + lo), len * es, pl->nt);
      break;
    case SK_COLL_BROADCAST: {
      unsigned char **dst = (unsigned char **)(void *)m->ptrs;
      for (int i = 0; i < k; i++) dst[i] = SK__RECV(i, lo);
      sk__tcopy_to_all(SK__SEND(op->root, lo), dst, k, len * es, pl->nt);
      break;
    }
    case SK_COLL_ALLTOALLV: /* seg = the ordered pair (i, j) */
      sk__ttask_vec(g, p, pl, seg, r);
      break;
    case SK_COLL_ALLTOALL: { /* seg = the pair (i, j), i <= j: exchanges block j of i and block i of j */
      size_t i, j;
      sk__tpair((size_t)k, seg, &i, &j);
      sk__texchange(SK__RECV(i, j * n + lo), SK__SEND(j, i * n + lo), SK__RECV(j, i * n + lo), SK__SEND(i, j * n + lo),
                    len * es, pl->nt && SK__P(i)->send != SK__P(i)->recv, pl->nt && SK__P(j)->send != SK__P(j)->recv);
      break;
    }
    default: return sk_comm_set_error(m->comm, SK_ERR_INTERNAL, "threads backend: unexpected op %d", (int)op->kind);
  }
#undef SK__P
#undef SK__SEND
#undef SK__RECV
  sk__tstore_fence(pl->nt);
  return SK_OK;
}

/* Owned lanes. While every member has a CPU (and size <= SK__LANES_MAX), a reduction's tasks are
   split into lanes, one per member: lane l of L holds tasks [per*l/L, per*(l+1)/L) of every
   contiguous range of `per` tasks, one slice of every output, as a static split of the work
   would give each thread. A member
   with a claim (a ticket from sk__tclaim: the group still has an unstarted task) takes the next
   task of its own lane, and once that is used up the next of lane me+1, me+2, ...: each running
   thread walks its own stretch front to back (long streams for the prefetchers, its own memory
   pages), and a thread that is not running leaves its lane to the others, so claiming still
   balances a noisy machine. A lane's counter holds the collective's tag (its first claim number,
   the same on every member) above the tasks taken, so a counter from an earlier collective reads
   as zero taken without being reset. Every ticket takes exactly one task: while a member holds
   one, fewer tasks have been taken than exist, so one pass over the lanes finds one. Side by side
   with claims dealt round robin (bench/RESULTS.md), 2 devices: 6-20% faster at 16 MiB. */
#define SK__LANE_BITS 24 /* tasks taken, below the tag */

/* The slice of every range that lane l of L holds: tasks [*first, *first + *width). */
static void sk__tlane_span(uint64_t per, uint64_t L, uint64_t l, uint64_t *first, uint64_t *width) {
  *first = per * l / L;
  *width = per * (l + 1) / L - *first;
}

/* Takes task *i (0-based) of a lane of `size` tasks for the collective tagged `tag`; false when
   the lane is used up. */
static bool sk__tlane_next(uint64_t *ctr, uint64_t tag, uint64_t size, uint64_t *i) {
  uint64_t v = __atomic_load_n(ctr, SK__SC);
  for (;;) {
    uint64_t taken = v >> SK__LANE_BITS == tag ? v & ((1ull << SK__LANE_BITS) - 1) : 0;
    if (taken >= size) return false;
    if (__atomic_compare_exchange_n(ctr, &v, tag << SK__LANE_BITS | (taken + 1), true, SK__SC, SK__SC)) {
      *i = taken;
      return true;
    }
  }
}

/* For member me holding a ticket of the collective whose first claim number is base: its task,
   from its own lane first, then the next lanes in turn. False only if the lanes were used up,
   which the tickets rule out. */
static bool sk__tlane_take(sk__tgroup *g, const sk__tplan *pl, uint64_t lanes, uint64_t base, int me, uint64_t *task) {
  uint64_t ranges = pl->total / pl->per, tag = base & ((1ull << (64 - SK__LANE_BITS)) - 1);
  for (uint64_t s = 0; s < lanes; s++) {
    uint64_t l = ((uint64_t)me + s) % lanes, first, width, i;
    sk__tlane_span(pl->per, lanes, l, &first, &width);
    if (width && sk__tlane_next(&g->lanes[l * (SK__CL / sizeof(uint64_t))], tag, width * ranges, &i)) {
      *task = i / width * pl->per + first + i % width;
      return true;
    }
  }
  return false;
}

/* With more members than CPUs, the claims are dealt instead: claim number c (0-based, of
   `total`) runs task (c mod L) * floor(total/L) + floor(c/L) for L = CPUs, so threads claiming in
   turn each walk their own stretch, and claims past L * floor(total/L) take the rest in order.
   Owned lanes measured slower there (8 devices on 2 CPUs, bench/RESULTS.md): the two threads
   running need not own different lanes. */
static uint64_t sk__tlane_task(uint64_t c, uint64_t total, uint64_t lanes) {
  uint64_t q = lanes > 1 ? total / lanes : 0;
  if (q < 2 || c >= q * lanes) return c;
  return c % lanes * q + c / lanes;
}

/* How a collective's tasks are ordered. The reductions, whose tasks each stream k inputs: owned
   lanes (*owned, the group's, one per member) when every member has a CPU and the lane counters
   hold the task count, else claims dealt to min(k, CPUs) lanes. The copies: claims in order (1),
   where lanes measured no faster and AllToAll at 2 devices 2% slower (bench/RESULTS.md). */
static uint64_t sk__tlanes_of(const sk__tmember *m, const sk_coll *op, const sk__tplan *pl, bool *owned) {
  sk__tgroup *g = m->g;
  int k = g->size, cpus = m->tw->cpus;
  *owned = false;
  if (op->kind != SK_COLL_ALLREDUCE && op->kind != SK_COLL_REDUCE_SCATTER && op->kind != SK_COLL_REDUCE) return 1;
  uint64_t L = (uint64_t)g->nlanes;
  *owned = L > 1 && pl->total / L + pl->total / pl->per < (1ull << SK__LANE_BITS);
  return *owned ? L : (uint64_t)(k < cpus ? k : cpus);
}

/* Claims the next task below end, if any. */
static bool sk__tclaim(sk__tgroup *g, uint64_t end, uint64_t *t) {
  uint64_t v = __atomic_load_n(&g->claim, SK__SC);
  while (v < end)
    if (__atomic_compare_exchange_n(&g->claim, &v, v + 1, true, SK__SC, SK__SC)) {
      *t = v;
      return true;
    }
  return false;
}

/* AllToAllV's count for the link model: elements per peer of the busiest member (the most it
   sends to, or receives from, the others, over p-1, rounded up). */
static size_t sk__tvec_per_peer(const sk__tgroup *g, int p) {
  size_t most = 0;
  for (int i = 0; i < g->size; i++) most = g->slots[i].vbusy[p] > most ? g->slots[i].vbusy[p] : most;
  return g->size > 1 ? (most + (size_t)g->size - 2) / (size_t)(g->size - 1) : 0;
}

/* Link model: a collective starts when every member has issued it and the group's previous one
   has ended, and lasts the cluster's price for it (sk_cluster_coll_us: on a flat link
   sk_link_cost_us's ring, under a topology the cheapest algorithm, as the dry run prices it).
   Every member computes the same value from the same postings, so a refusal (not expected: the
   world checked the cluster and that the topology holds every device) fails every member alike,
   before any task touches a buffer. *end_us: the modelled end, or 0 with no model. */
static sk_result sk__tmodel_end(sk__tmember *m, int p, const sk_coll *op, double *end_us) {
  const sk_cluster *cluster = &sk_world_config(sk_comm_world(m->comm))->cluster;
  *end_us = 0;
  if (!sk_cluster_prices(cluster)) return SK_OK;
  sk__tgroup *g = m->g;
  sk__tslot *sl = &g->slots[m->me];
  double start = sl->link_free, us = 0;
  for (int i = 0; i < g->size; i++)
    if (g->slots[i].coll[p].issue_us > start) start = g->slots[i].coll[p].issue_us;
  size_t count = sk_coll_vector(op->kind) ? sk__tvec_per_peer(g, p) : op->count;
  sk_coll_algo algo;
  sk_error err;
  sk_result r = sk_cluster_coll_us(cluster, op->kind, count, op->dtype, g->size, g->ascending, &algo, &us, &err);
  if (r != SK_OK) return sk_comm_set_error(m->comm, r, "%s: pricing it: %s", sk_coll_kind_name(op->kind), err.msg);
  *end_us = sl->link_free = start + us;
  return SK_OK;
}

/* Peer access, task t: member t's function over every member's offered address. */
static void sk__tpeer_task(sk__tmember *m, int p, uint64_t t) {
  sk__tgroup *g = m->g;
  for (int i = 0; i < g->size; i++) m->ptrs[i] = g->slots[i].coll[p].send;
  const sk__tslot *owner = &g->slots[t];
  owner->peer_fn[p](owner->peer_ctx[p], m->ptrs);
}

/* AllToAllV: this member's scalars, and the verdict reset (no task of this parity runs before
   every member has posted, and none of the collective two back is still running). */
static void sk__tvec_post(sk__tmember *m, const sk_coll *op, int p) {
  sk__tgroup *g = m->g;
  size_t most = 0, out = 0, in = 0;
  for (int j = 0; j < g->size; j++) {
    most = op->v.send_counts[j] > most ? op->v.send_counts[j] : most;
    if (j != m->me) out += op->v.send_counts[j], in += op->v.recv_counts[j];
  }
  g->slots[m->me].vmax[p] = most;
  g->slots[m->me].vbusy[p] = out > in ? out : in;
  pthread_mutex_lock(&g->p2p_lock);
  g->vbad[p].pair = SIZE_MAX;
  pthread_mutex_unlock(&g->p2p_lock);
}

/* Posts member m's call (sequence s, parity p) and announces its arrival. */
static void sk__tpost(sk__tmember *m, const sk_coll *op, int origin, uint64_t s, bool small) {
  sk__tgroup *g = m->g;
  sk__tslot *sl = &g->slots[m->me];
  int p = (int)(s & 1);
  sl->coll[p] = *op;
  sl->origin[p] = origin;
  if (sk_coll_vector(op->kind)) sk__tvec_post(m, op, p);
  size_t bytes = op->count * sk_dtype_size(op->dtype);
  if (small && bytes) memcpy(g->inline_data + ((size_t)m->me * 2 + (size_t)p) * g->small_bytes, op->send, bytes);
  __atomic_store_n(&sl->posted, s, SK__SC);
  if (__atomic_add_fetch(&g->arrive, 1, SK__SC) == s * (uint64_t)g->size) sk__twake(&g->sig);
}

/* Claims and runs tasks until none is left or the world aborts, then waits for the peers'
   tasks. A member stops claiming at the first task after an abort, so abort latency does not
   grow with the collective's size; sk__twait_tasks then drains what peers already claimed. */
static sk_result sk__trun_tasks(sk__tmember *m, const sk_coll *op, int origin, int p, const char *name) {
  sk__tgroup *g = m->g;
  sk__tslot *sl = &g->slots[m->me];
  size_t cache = m->tw->cache_bytes;
  sk__tplan pl = sk_coll_vector(op->kind) ? sk__tplan_vec(g, p, cache) : sk__tplan_of(op, g->size, cache);
  if (origin == SK__ORIGIN_PEER) pl.total = (uint64_t)g->size;
  if (pl.total == 0) return SK_OK;
  uint64_t base = sl->tasks, end = base + pl.total, t;
  bool owned = false;
  uint64_t lanes = origin == SK__ORIGIN_PEER ? 1 : sk__tlanes_of(m, op, &pl, &owned), task;
  sl->tasks = end;
  sk_result r = SK_OK;
  while (!sk_world_aborted(sk_comm_world(m->comm)) && sk__tclaim(g, end, &t)) {
    task = owned ? 0 : sk__tlane_task(t - base, pl.total, lanes);
    if (origin == SK__ORIGIN_PEER)
      sk__tpeer_task(m, p, t - base);
    else if (r == SK_OK && owned && !sk__tlane_take(g, &pl, lanes, base, m->me, &task))
      r = sk_comm_set_error(m->comm, SK_ERR_INTERNAL, "%s: threads backend: no task left for a claim", name);
    else if (r == SK_OK)
      r = sk__ttask(m, p, &pl, task);
    uint64_t d = __atomic_add_fetch(&g->done, 1, SK__SC);
    if (d == end || (__atomic_load_n(&g->claim, SK__SC) & SK__CLOSED)) sk__twake(&g->sig); /* drainers wait too */
  }
  sk_result r2 = sk__twait_tasks(m, end, name);
  if (r == SK_OK && r2 == SK_OK && sk_coll_vector(op->kind)) r2 = sk__tvec_verdict(m, p);
  return r != SK_OK ? r : r2;
}

/* Runs one collective on member m, on whichever thread calls it (device or progress thread);
   *end_us receives its modelled end (link model) or 0. origin tells user calls from the
   backend's own (SK__ORIGIN_*). A member returns only once no peer can touch its buffers: after
   every task has finished, or, on a fault, after closing the task gate and draining. */
static sk_result sk__texec(sk__tmember *m, const sk_coll *op, int origin, double *end_us) {
  sk__tgroup *g = m->g;
  int k = g->size;
  sk__tslot *sl = &g->slots[m->me];
  const char *name = origin == SK__ORIGIN_USER ? sk_coll_kind_name(op->kind) : sk__torigin_name(origin);
  uint64_t s = ++sl->seq;
  int p = (int)(s & 1);
  *end_us = 0;
  size_t bytes = op->kind == SK_COLL_BARRIER ? 0 : op->count * sk_dtype_size(op->dtype);
  bool small = op->kind == SK_COLL_ALLREDUCE && bytes <= g->small_bytes && !m->tw->force_large;
  sk__tpost(m, op, origin, s, small);
  sk_result r = sk__twait_arrival(m, s, name);
  if (r != SK_OK) return r;
  r = sk__tcheck_match(m, p);
  if (r != SK_OK) return r;
  /* the backend's own traffic costs nothing in the modelled cluster */
  if (origin == SK__ORIGIN_USER && (r = sk__tmodel_end(m, p, op, end_us)) != SK_OK) return r;
  if (small) { /* every member reduces the inline copies into its own output */
    for (int i = 0; i < k; i++) m->ptrs[i] = g->inline_data + ((size_t)i * 2 + (size_t)p) * g->small_bytes;
    return op->count ? sk_reduce_local(op->recv, m->ptrs, k, op->count, op->dtype, op->op, NULL) : SK_OK;
  }
  return sk__trun_tasks(m, op, origin, p, name);
}

/* ---- requests and the progress thread ----------------------------------------------------- */

/* Requests are created and freed on the owner's thread only, so the live list needs no lock. */
static void sk__treq_free(sk_request *base) {
  sk__treq *q = (sk__treq *)base;
  sk__tmember *m = q->m;
  if (q->live_prev)
    q->live_prev->live_next = q->live_next;
  else
    m->live = q->live_next;
  if (q->live_next) q->live_next->live_prev = q->live_prev;
  sk__free(m->tw->alloc, q);
}

static sk__treq *sk__treq_new(sk__tmember *m, const sk_coll *op) {
  sk__treq *q = (sk__treq *)sk__calloc(m->tw->alloc, sizeof *q, SK__CL);
  if (!q) return NULL;
  q->base.comm = m->comm;
  q->base.coll = *op;
  q->base.free_fn = sk__treq_free;
  q->m = m;
  q->live_next = m->live;
  if (m->live) m->live->live_prev = q;
  m->live = q;
  return q;
}

/* Completion wakes the group's signal, not the member's: the owner may free the request and
   its member state as soon as `done` is visible, but the group outlives the completer's call. */
static void sk__treq_complete(sk__treq *q, sk_result r) {
  sk__tgroup *g = q->m->g; /* read before done */
  q->result = r;
  __atomic_store_n(&q->done, 1, SK__SC);
  sk__twake(&g->sig);
}

static bool sk__tqueue_ready(const void *p) {
  const sk__tmember *m = (const sk__tmember *)p;
  return __atomic_load_n(&m->stop, SK__SC) || __atomic_load_n((sk__treq *const *)&m->qhead, SK__SC) != NULL;
}

static void *sk__tprogress_main(void *arg) {
  sk__tmember *m = (sk__tmember *)arg;
  sk_world *w = sk_comm_world(m->comm);
  for (;;) {
    sk__tidle(&m->qsig, sk__tqueue_ready, m);
    if (__atomic_load_n(&m->stop, SK__SC)) break;
    pthread_mutex_lock(&m->qlock);
    sk__treq *q = m->qhead;
    pthread_mutex_unlock(&m->qlock);
    sk_result res = sk_world_aborted(w) ? SK_ERR_ABORTED : sk__texec(m, &q->base.coll, SK__ORIGIN_USER, &q->base.model_end_us);
    if (res == SK_ERR_ABORTED && !sk_comm_error_message(m->comm)[0])
      sk_comm_set_error(m->comm, res, "%s: the world was aborted", sk_coll_kind_name(q->base.coll.kind));
    pthread_mutex_lock(&m->qlock);
    __atomic_store_n(&m->qhead, q->next, SK__SC);
    if (!q->next) m->qtail = NULL;
    pthread_mutex_unlock(&m->qlock);
    __atomic_fetch_add(&m->completed, 1, SK__SC);
    sk__treq_complete(q, res);
  }
  return NULL;
}

static sk_result sk__tenqueue(sk__tmember *m, const sk_coll *op, sk__treq **out) {
  if (!m->thread_started) {
    if (pthread_create(&m->thread, NULL, sk__tprogress_main, m) != 0)
      return sk_comm_set_error(m->comm, SK_ERR_SYSTEM, "%s: could not start the progress thread",
                               sk_coll_kind_name(op->kind));
    m->thread_started = true;
  }
  sk__treq *q = sk__treq_new(m, op);
  if (!q) return sk_comm_set_error(m->comm, SK_ERR_OUT_OF_MEMORY, "%s: allocating a request", sk_coll_kind_name(op->kind));
  m->issued++;
  pthread_mutex_lock(&m->qlock);
  if (m->qtail)
    m->qtail->next = q;
  else
    __atomic_store_n(&m->qhead, q, SK__SC);
  m->qtail = q;
  pthread_mutex_unlock(&m->qlock);
  sk__twake(&m->qsig);
  *out = q;
  return SK_OK;
}

/* ---- point to point ----------------------------------------------------------------------- */

/* Link model: the message moves once both sides have posted, over the link between the two
   devices (sk_cluster_p2p_us: under a topology the intra- or inter-node link, on a flat link
   sk_link_cost_us's Send). A refusal (not expected: the world checked the cluster) goes into
   msg, for both sides. */
static sk_result sk__tp2p_end(const sk__tmember *m, const sk__tp2p *node, const sk_coll *so, const sk_coll *ro,
                              double *end, char *msg, size_t cap) {
  const sk_cluster *cluster = &sk_world_config(sk_comm_world(m->comm))->cluster;
  double us = 0;
  sk_error err;
  *end = so->issue_us > ro->issue_us ? so->issue_us : ro->issue_us;
  if (!sk_cluster_prices(cluster)) return SK_OK;
  sk_result r = sk_cluster_p2p_us(cluster, m->g->wranks[node->src], m->g->wranks[node->dst], so->count, so->dtype,
                                  &us, &err);
  if (r != SK_OK) return snprintf(msg, cap, "Send: pricing it: %.200s", err.msg), r;
  *end += us;
  return SK_OK;
}

#define SK__P2P_CHUNK (256u << 10)

/* Claims and copies one chunk of j; false when none was left. Each chunk is fenced before it
   counts as finished, so the completer's `done` orders every chunk's streaming stores. */
static bool sk__tp2p_chunk(sk__tp2p_job *j) {
  if (__atomic_load_n(&j->next, __ATOMIC_RELAXED) >= j->chunks) return false;
  uint32_t c = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
  if (c >= j->chunks) return false;
  size_t off = (size_t)c * SK__P2P_CHUNK, len = j->bytes - off < SK__P2P_CHUNK ? j->bytes - off : SK__P2P_CHUNK;
  sk__tstore(j->dst + off, j->src + off, len, j->nt);
  sk__tstore_fence(j->nt);
  __atomic_fetch_add(&j->finished, 1, __ATOMIC_RELEASE);
  return true;
}

/* Copies a matched message. While every member of the group has a CPU, a message of two or
   more chunks is published on the request of the side that posted first (`early`), whose owner,
   if it is waiting, copies chunks too (sk__tp2p_done_or_help): in a ring of 2 devices one thread
   often matches both messages while the other only waits (1-4 MiB 2x faster). This thread
   claims chunks until none is left, then waits for the ones the owner claimed (each is one
   chunk's copy, already running) before anything completes. With more members than CPUs every
   CPU is busy anyway, the matcher may wait on a descheduled helper's chunk, and sharing measured
   no faster (8 devices on 2 cores: 0.86-1.29 of copying alone). A message of 8 MiB or more
   streams: in a ring of 2 devices, 8 MiB moved 1.4x faster than with ordinary stores or with
   streaming from the cache's size; at 8 devices no rule won at every size (bench/RESULTS.md). */
static void sk__tp2p_copy(const sk__tmember *m, sk__treq *early, unsigned char *dst, const unsigned char *src,
                          size_t bytes) {
  bool nt = bytes >= SK__NT_MIN_BYTES;
  if (bytes < 2 * SK__P2P_CHUNK || m->g->size > m->tw->cpus) {
    sk__tstore(dst, src, bytes, nt);
    sk__tstore_fence(nt);
    return;
  }
  sk__tp2p_job *j = &early->job;
  j->src = src, j->dst = dst, j->bytes = bytes, j->nt = nt;
  j->chunks = (uint32_t)((bytes + SK__P2P_CHUNK - 1) / SK__P2P_CHUNK);
  __atomic_store_n(&j->ready, 1, __ATOMIC_RELEASE);
  sk__twake(&m->g->sig);
  while (sk__tp2p_chunk(j)) {
  }
  while (__atomic_load_n(&j->finished, __ATOMIC_ACQUIRE) != j->chunks) sched_yield();
}

/* Posts a Send or Recv; whichever side of a pair arrives second copies and completes both. */
static sk_result sk__tp2p_post(sk__tmember *m, const sk_coll *op, sk__treq **out) {
  sk__tgroup *g = m->g;
  sk__treq *q = sk__treq_new(m, op);
  if (!q) return sk_comm_set_error(m->comm, SK_ERR_OUT_OF_MEMORY, "%s: allocating a request", sk_coll_kind_name(op->kind));
  sk__tp2p *node = (sk__tp2p *)sk__calloc(m->tw->alloc, sizeof *node, 16);
  if (!node) {
    sk__treq_free(&q->base); /* unlinks it from the live list */
    return sk_comm_set_error(m->comm, SK_ERR_OUT_OF_MEMORY, "%s: allocating a request", sk_coll_kind_name(op->kind));
  }
  bool is_send = op->kind == SK_COLL_SEND;
  node->is_send = is_send;
  node->src = is_send ? m->me : op->root;
  node->dst = is_send ? op->root : m->me;
  node->req = q;
  *out = q;
  pthread_mutex_lock(&g->p2p_lock);
  sk__tp2p *prev = NULL, *it = g->p2p_head;
  while (it && !(it->is_send != is_send && it->src == node->src && it->dst == node->dst)) prev = it, it = it->next;
  if (!it) {
    if (g->p2p_tail)
      g->p2p_tail->next = node;
    else
      g->p2p_head = node;
    g->p2p_tail = node;
    pthread_mutex_unlock(&g->p2p_lock);
    return SK_OK;
  }
  if (prev)
    prev->next = it->next;
  else
    g->p2p_head = it->next;
  if (g->p2p_tail == it) g->p2p_tail = prev;
  pthread_mutex_unlock(&g->p2p_lock);
  sk__treq *sq = is_send ? q : it->req, *rq = is_send ? it->req : q;
  const sk_coll *so = &sq->base.coll, *ro = &rq->base.coll;
  sk_result r = SK_OK;
  char msg[SK_ERROR_MSG_MAX];
  double end = 0;
  if (so->count != ro->count || so->dtype != ro->dtype) {
    r = SK_ERR_MISMATCH;
    snprintf(msg, sizeof msg, "mismatch: rank %d sends %zu x %s to rank %d, which receives %zu x %s", node->src,
             so->count, sk_dtype_name(so->dtype), node->dst, ro->count, sk_dtype_name(ro->dtype));
  } else {
    r = sk__tp2p_end(m, node, so, ro, &end, msg, sizeof msg);
  }
  if (r != SK_OK) {
    sk_comm_set_error(m->comm, r, "%s", msg);
    memcpy(it->req->msg, msg, sizeof msg); /* written before `done`: the owner reads it after */
    sk__treq_complete(it->req, r);
  } else {
    sq->base.model_end_us = rq->base.model_end_us = end;
    size_t bytes = so->count * sk_dtype_size(so->dtype);
    if (bytes) sk__tp2p_copy(m, it->req, (unsigned char *)ro->recv, (const unsigned char *)so->send, bytes);
    sk__treq_complete(it->req, SK_OK);
  }
  sk__free(m->tw->alloc, it);
  sk__free(m->tw->alloc, node);
  q->result = r;
  __atomic_store_n(&q->done, 1, SK__SC);
  return SK_OK;
}

/* Removes q's post if it is still unmatched; false if a peer already took it (and is copying). */
static bool sk__tp2p_remove(sk__tmember *m, sk__treq *q) {
  sk__tgroup *g = m->g;
  bool found = false;
  pthread_mutex_lock(&g->p2p_lock);
  for (sk__tp2p *prev = NULL, *it = g->p2p_head; it; prev = it, it = it->next) {
    if (it->req != q) continue;
    if (prev)
      prev->next = it->next;
    else
      g->p2p_head = it->next;
    if (g->p2p_tail == it) g->p2p_tail = prev;
    sk__free(m->tw->alloc, it);
    found = true;
    break;
  }
  pthread_mutex_unlock(&g->p2p_lock);
  return found;
}

/* A leaving member's unmatched posts are dropped (their requests were never waited for) and
   their requests marked finished: nobody can match them any more, and the destroy that called
   this waits for every live request to be done before freeing it. */
static void sk__tp2p_drop_all(sk__tmember *m) {
  sk__tgroup *g = m->g;
  pthread_mutex_lock(&g->p2p_lock);
  sk__tp2p **link = &g->p2p_head;
  g->p2p_tail = NULL;
  while (*link) {
    sk__tp2p *it = *link;
    if (it->req->m == m) {
      *link = it->next;
      it->req->result = SK_ERR_ABORTED;
      __atomic_store_n(&it->req->done, 1, SK__SC);
      sk__free(m->tw->alloc, it);
    } else {
      g->p2p_tail = it;
      link = &it->next;
    }
  }
  pthread_mutex_unlock(&g->p2p_lock);
}

/* ---- hooks -------------------------------------------------------------------------------- */

static bool sk__treq_done(const void *p) { return __atomic_load_n(&((const sk__treq *)p)->done, SK__SC) != 0; }

/* The result of a completed request, its message moved to the owner's communicator. */
static sk_result sk__treq_outcome(sk__treq *q) {
  if (q->result != SK_OK && q->msg[0]) sk_comm_set_error(q->m->comm, q->result, "%s", q->msg);
  return q->result;
}

/* A Send or Recv whose peer has left can never be matched. */
static sk_result sk__tp2p_broken(const void *p) {
  const sk__treq *q = (const sk__treq *)p;
  return sk__tleft(q->m, q->base.coll.root) ? SK_ERR_MISMATCH : SK_OK;
}

/* A Send or Recv's wait, on its owner's thread: copies a chunk of any message of this member
   that a peer is copying (sk__tp2p_copy), then says whether q is done. */
static bool sk__tp2p_done_or_help(const void *p) {
  const sk__treq *q = (const sk__treq *)p;
  if (sk__treq_done(q)) return true;
  for (sk__treq *it = q->m->live; it; it = it->live_next)
    if (__atomic_load_n(&it->job.ready, __ATOMIC_ACQUIRE) && sk__tp2p_chunk(&it->job)) break;
  return sk__treq_done(q);
}

static sk_result sk__thr_wait(sk_request *base) {
  sk__treq *q = (sk__treq *)base;
  sk__tmember *m = q->m;
  bool p2p = sk_coll_p2p(q->base.coll.kind);
  sk_result r = p2p ? sk__twait(sk_comm_world(m->comm), &m->g->sig, sk__tp2p_done_or_help, q, &m->spin_ns, sk__tp2p_broken)
                    : sk__twait(sk_comm_world(m->comm), &m->g->sig, sk__treq_done, q, &m->spin_ns, NULL);
  if (r == SK_OK) return sk__treq_outcome(q);
  if (!p2p) {
    /* The progress thread runs it; its own waits are bounded and it completes the request with
       the real outcome (timeout naming the missing ranks, or abort) and message. */
    sk__tidle(&m->g->sig, sk__treq_done, q);
    return q->result;
  }
  const char *name = sk_coll_kind_name(q->base.coll.kind);
  if (r == SK_ERR_TIMEOUT) {
    sk_comm_set_error(m->comm, r, "%s: no matching %s from rank %d within %u ms", name,
                      q->base.coll.kind == SK_COLL_SEND ? "recv" : "send", q->base.coll.root,
                      (unsigned)sk_world_config(sk_comm_world(m->comm))->timeout_ms);
    sk_world_fail(sk_comm_world(m->comm), r, sk_comm_error_message(m->comm));
  } else if (r == SK_ERR_MISMATCH) {
    sk_comm_set_error(m->comm, r, "%s: rank %d (world rank %d) has left without a matching %s", name, q->base.coll.root,
                      m->g->wranks[q->base.coll.root], q->base.coll.kind == SK_COLL_SEND ? "recv" : "send");
    sk_world_fail(sk_comm_world(m->comm), r, sk_comm_error_message(m->comm));
  } else {
    sk_comm_set_error(m->comm, r, "%s: the world was aborted", name);
  }
  if (sk__tp2p_remove(m, q)) return r;
  /* A peer took it and is copying: the copy ends soon. */
  while (!sk__treq_done(q)) sched_yield();
  return q->result == SK_OK ? r : q->result;
}

static sk_result sk__thr_test(sk_request *base, bool *done) {
  sk__treq *q = (sk__treq *)base;
  *done = sk__treq_done(q);
  return *done ? sk__treq_outcome(q) : SK_OK;
}

/* A communicator belongs to the device thread that created it: another thread calling on it
   would post into the same member slot concurrently. Nothing is written to the communicator
   (its message belongs to the owner, who may be using it right now). */
static sk_result sk__thr_check_caller(const sk_comm *c) {
  const sk__tmember *m = SK__TMEMBER(c);
  return pthread_equal(pthread_self(), m->owner) ? SK_OK : SK_ERR_INVALID_ARGUMENT;
}

static sk_result sk__thr_start(sk_comm *c, const sk_coll *op, sk_request **req) {
  sk__tmember *m = SK__TMEMBER(c);
  sk__treq *q = NULL;
  *req = NULL;
  sk_result r = sk_coll_p2p(op->kind) ? sk__tp2p_post(m, op, &q)
                                                                       : sk__tenqueue(m, op, &q);
  *req = q ? &q->base : NULL;
  return r;
}

static sk_result sk__thr_run(sk_comm *c, const sk_coll *op, double *end_us) {
  sk__tmember *m = SK__TMEMBER(c);
  bool p2p = sk_coll_p2p(op->kind);
  /* Outstanding non-blocking work runs first: queue behind it to keep issue order. */
  if (p2p || m->issued != __atomic_load_n(&m->completed, SK__SC)) {
    sk_request *req = NULL;
    sk_result r = sk__thr_start(c, op, &req);
    if (r != SK_OK) return r;
    return sk_wait(&req, NULL);
  }
  sk_result r = sk__texec(m, op, SK__ORIGIN_USER, end_us);
  if (r == SK_ERR_ABORTED && !sk_comm_error_message(c)[0]) sk_comm_set_error(c, r, "%s: the world was aborted", sk_coll_kind_name(op->kind));
  return r;
}

/* The last-level cache of CPU 0 in bytes, from Linux's sysfs (the highest cache level listed);
   32 MiB when it cannot be read. glibc's sysconf is not used: on a virtual machine it can report
   the whole host's L3 (384 MiB on an EPYC whose 2-CPU guest has one 32-MiB L3). */
static size_t sk__tcache_bytes(void) {
  size_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 8; i++) {
    char path[80];
    int level = 0;
    unsigned long size = 0;
    char unit = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *f = fopen(path, "r");
    if (!f) break;
    int ok = fscanf(f, "%d", &level) == 1;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (!ok || !(f = fopen(path, "r"))) continue;
    ok = fscanf(f, "%lu%c", &size, &unit) >= 1;
    fclose(f);
    size *= unit == 'K' ? 1024ul : unit == 'M' ? 1024ul * 1024 : 1;
    if (ok && size && level >= best_level) best = size, best_level = level;
  }
  return best ? best : (size_t)32 << 20;
}

static sk_result sk__thr_world_create(sk_world *w, const sk_world_desc *desc, void **state, int *ndevices, sk_error *err) {
  if (desc->ndevices < 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.ndevices = %d; the threads backend needs 1..%d", desc->ndevices,
                    SK_MAX_DEVICES);
  const sk_threads_config *cfg = (const sk_threads_config *)desc->backend_config;
  if (cfg && (cfg->spin < -1 || cfg->spin > 1))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_threads_config.spin = %d; want -1 (never), 0 (auto) or 1 (always)",
                    cfg->spin);
  if (cfg && (cfg->bind < -1 || cfg->bind > 1))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_threads_config.bind = %d; want -1 (never), 0 (auto) or 1 (always)",
                    cfg->bind);
  sk__tworld *tw = (sk__tworld *)sk__calloc(&sk_world_config(w)->allocator, sizeof *tw, SK__CL);
  if (!tw) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the threads world");
  if (pthread_mutex_init(&tw->lock, NULL) != 0) {
    sk__free(&sk_world_config(w)->allocator, tw);
    return sk__fail(err, SK_ERR_SYSTEM, "initialising the threads world's lock");
  }
  tw->alloc = &sk_world_config(w)->allocator;
  tw->n = desc->ndevices;
  size_t sb = cfg && cfg->small_bytes ? cfg->small_bytes : 256;
  tw->small_bytes = sb > SK__SMALL_CAP ? SK__SMALL_CAP : sb;
  tw->small_bytes = (tw->small_bytes + 7) / 8 * 8;
  tw->force_large = cfg && cfg->force_large;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int spin = cfg ? cfg->spin : 0;
  tw->spin = spin > 0 || (spin == 0 && cores > 0 && tw->n <= cores);
  tw->bind = cfg ? cfg->bind : 0;
  tw->cpus = cores > 0 ? (int)cores : 1;
  tw->cache_bytes = cfg && cfg->cache_bytes ? cfg->cache_bytes : sk__tcache_bytes();
  tw->claimed = (int *)sk__calloc(tw->alloc, sizeof(int) * (size_t)tw->n, SK__CL);
  tw->gone = (int *)sk__calloc(tw->alloc, sizeof(int) * (size_t)tw->n, SK__CL);
  tw->world_group = tw->claimed && tw->gone ? sk__tgroup_new(tw, tw->n, NULL) : NULL;
  if (!tw->world_group) {
    sk__free(tw->alloc, tw->claimed);
    sk__free(tw->alloc, tw->gone);
    pthread_mutex_destroy(&tw->lock);
    sk__free(tw->alloc, tw);
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the world group of %d devices", desc->ndevices);
  }
  *state = tw;
  *ndevices = tw->n;
  return SK_OK;
}

static sk_result sk__thr_world_destroy(sk_world *w, void *state) {
  (void)w;
  sk__tworld *tw = (sk__tworld *)state;
  while (tw->groups) sk__tgroup_free(tw, tw->groups); /* left unreleased by a fault */
  sk__tgroup_free(tw, tw->world_group);
  pthread_mutex_destroy(&tw->lock);
  sk__free(tw->alloc, tw->claimed);
  sk__free(tw->alloc, tw->gone);
  sk__free(tw->alloc, tw);
  return SK_OK;
}

static sk_result sk__thr_comm_attach(sk_comm *c, sk__tgroup *g, int me, void **state) {
  sk__tworld *tw = SK__TWORLD(sk_comm_world(c));
  sk__tmember *m = sk__tmember_new(tw, g, me, c);
  if (!m) return SK_ERR_OUT_OF_MEMORY;
  *state = m;
  return SK_OK;
}

static sk_result sk__thr_comm_init_rank(sk_comm *c, int rank, void **state, sk_error *err) {
  sk__tworld *tw = SK__TWORLD(sk_comm_world(c));
  int expected = 0;
  if (!__atomic_compare_exchange_n(&tw->claimed[rank], &expected, 1, false, SK__SC, SK__SC))
    return sk__fail(err, SK_ERR_INVALID_USAGE, "rank %d already joined the world (one thread per rank)", rank);
  sk_result r = sk__thr_comm_attach(c, tw->world_group, rank, state);
  if (r != SK_OK) {
    __atomic_store_n(&tw->claimed[rank], 0, SK__SC);
    return sk__fail(err, r, "allocating the communicator of rank %d", rank);
  }
  return SK_OK;
}

/* Finishes every request still outstanding on m (bounded: each wait is), then frees them. */
static void sk__tfinish_requests(sk__tmember *m) {
  sk_world *w = sk_comm_world(m->comm);
  if (m->thread_started) {
    sk__tcount_arg a; /* issued == completed; an abort ends every queued wait at once */
    a.ctr = &m->completed, a.target = m->issued;
    while (!sk__tcount_reached(&a) && !sk_world_aborted(w)) sk__tidle_slice(&m->g->sig, sk__tcount_reached, &a);
    __atomic_store_n(&m->stop, 1, SK__SC);
    sk__twake(&m->qsig);
    pthread_join(m->thread, NULL);
    m->thread_started = false;
    while (m->qhead) { /* aborted with work queued: fail it */
      sk__treq *q = m->qhead;
      m->qhead = q->next;
      sk__treq_complete(q, SK_ERR_ABORTED);
    }
  }
  sk__tp2p_drop_all(m);
  /* a Send or Recv a peer has matched is being copied by that peer: the copy ends soon */
  for (sk__treq *q = m->live; q; q = q->live_next)
    while (!sk__treq_done(q)) sched_yield();
  for (sk__treq *q = m->live, *next; q; q = next) {
    next = q->live_next;
    sk__free(m->tw->alloc, q);
  }
  m->live = NULL;
}

static void sk__thr_comm_destroy(sk_comm *c, void *state) {
  sk__tmember *m = (sk__tmember *)state;
  sk__tworld *tw = m->tw;
  sk__tfinish_requests(m);
  if (m->g == tw->world_group)
    __atomic_store_n(&tw->claimed[c->rank], 0, SK__SC);
  else
    __atomic_store_n(&m->g->slots[m->me].left, 1, SK__SC);
  sk__twake(&m->g->sig); /* peers waiting for this member learn that it left */
  sk__tgroup_release(tw, m->g);
  pthread_mutex_destroy(&m->qlock);
  sk__free(tw->alloc, (void *)m->ptrs);
  sk__free(tw->alloc, m->outs);
  sk__free(tw->alloc, m->alias);
  sk__free(tw->alloc, m);
}

/* Internal traffic runs after the member's outstanding non-blocking work (issue order), on the
   calling thread, tagged so that it never matches a user's call. */
static void sk__tflush(sk__tmember *m) {
  sk__tcount_arg a;
  a.ctr = &m->completed, a.target = m->issued;
  while (!sk__tcount_reached(&a) && !sk_world_aborted(sk_comm_world(m->comm))) sk__tidle_slice(&m->g->sig, sk__tcount_reached, &a);
}

static sk_result sk__tinternal(sk__tmember *m, int origin, sk_coll_kind kind, const void *send, void *recv, size_t count,
                               sk_dtype dt, sk_redop op) {
  sk__tflush(m);
  sk_coll o;
  memset(&o, 0, sizeof o);
  o.kind = kind, o.send = send, o.recv = recv, o.count = count, o.dtype = dt, o.op = op;
  double end;
  return sk__texec(m, &o, origin, &end);
}

/* Collective verdict of a split step: every member learns the lowest parent rank that failed
   (INT32_MAX: none). One element: the inline path, which allocates nothing. */
static sk_result sk__tsplit_agree(sk__tmember *pm, bool ok, int32_t *lowest_failed) {
  int32_t mine = ok ? INT32_MAX : (int32_t)sk_comm_rank(pm->comm);
  return sk__tinternal(pm, SK__ORIGIN_SPLIT, SK_COLL_ALLREDUCE, &mine, lowest_failed, 1, SK_I32, SK_MIN);
}

/* Members of `color` sorted by (key, parent rank) into order (insertion sort: stable); returns
   their number and this member's position in *me. */
static int sk__tsplit_order(const int64_t *info, int k, int color, int self, int *order, int *me) {
  int n = 0;
  for (int i = 0; i < k; i++) {
    if (info[3 * i] != color) continue;
    int j = n++;
    while (j > 0 && info[3 * order[j - 1] + 1] > info[3 * i + 1]) order[j] = order[j - 1], j--;
    order[j] = i;
  }
  *me = -1;
  for (int i = 0; i < n; i++)
    if (order[i] == self) *me = i;
  return n;
}

/* The leader (lowest parent rank of its color) builds the group; every member holds one of its
   references from the moment it learns the group's address. */
static sk__tgroup *sk__tsplit_build(sk__tmember *pm, const int *order, int n) {
  sk__tworld *tw = pm->tw;
  int *wr = (int *)sk__alloc(tw->alloc, sizeof(int) * (size_t)n, SK__CL);
  if (!wr) return NULL;
  for (int i = 0; i < n; i++) wr[i] = pm->g->wranks[order[i]];
  sk__tgroup *g = sk__tgroup_new(tw, n, wr);
  sk__free(tw->alloc, wr);
  if (g) g->refs = n;
  return g;
}

static void sk__tmember_free(sk__tmember *m) {
  sk__tworld *tw = m->tw;
  pthread_mutex_destroy(&m->qlock);
  sk__free(tw->alloc, (void *)m->ptrs);
  sk__free(tw->alloc, m->outs);
  sk__free(tw->alloc, m->alias);
  sk__free(tw->alloc, m);
}

/* Exchanges (color, key), lets each color's leader build its group and hands the group's
   address to its members; returns the group (one reference held) or NULL for SK_UNDEFINED. */
static sk_result sk__tsplit_exchange(sk__tmember *pm, int color, int key, int64_t *info, int *order, sk__tgroup **out,
                                     int *me, int *n) {
  *out = NULL;
  int64_t mine[3] = {color, key, 0};
  sk_result r = sk__tinternal(pm, SK__ORIGIN_SPLIT, SK_COLL_ALLGATHER, mine, info, 3, SK_I64, SK_SUM);
  int lowest = sk_comm_size(pm->comm);
  sk__tgroup *built = NULL;
  if (r == SK_OK && color != SK_UNDEFINED) {
    *n = sk__tsplit_order(info, sk_comm_size(pm->comm), color, sk_comm_rank(pm->comm), order, me);
    for (int i = 0; i < *n; i++) lowest = order[i] < lowest ? order[i] : lowest;
    if (lowest == sk_comm_rank(pm->comm)) built = sk__tsplit_build(pm, order, *n);
  }
  if (r != SK_OK) return r;
  mine[2] = (int64_t)(intptr_t)built;
  r = sk__tinternal(pm, SK__ORIGIN_SPLIT, SK_COLL_ALLGATHER, mine, info, 3, SK_I64, SK_SUM);
  if (r != SK_OK) { /* members that did learn the address hold their references; world destroy frees the rest */
    if (built) sk__tgroup_release(pm->tw, built);
    return r;
  }
  if (color != SK_UNDEFINED) *out = (sk__tgroup *)(intptr_t)info[3 * lowest + 2];
  return SK_OK;
}

/* Split, collectively safe: members first agree that everyone could allocate, then exchange
   (color, key) and group addresses through the backend's own tagged traffic, then agree that
   everyone could attach; any failure fails the split on every member (SK_ERR_OUT_OF_MEMORY
   naming the rank), rolled back without a leak. */
static sk_result sk__thr_comm_split(sk_comm *parent, int color, int key, sk_comm *child, void **state, int *rank,
                                    int *size) {
  sk__tmember *pm = SK__TMEMBER(parent);
  sk__tworld *tw = pm->tw;
  int k = sk_comm_size(parent), me = -1, n = 0;
  int64_t *info = (int64_t *)sk__alloc(tw->alloc, sizeof(int64_t) * 3 * (size_t)k, SK__CL);
  int *order = (int *)sk__alloc(tw->alloc, sizeof(int) * (size_t)k, SK__CL);
  int32_t failed = INT32_MAX;
  sk_result r = sk__tsplit_agree(pm, info && order, &failed);
  if (r == SK_OK && (failed != INT32_MAX || !info || !order)) {
    sk_comm_set_error(parent, SK_ERR_OUT_OF_MEMORY, "comm_split: rank %d could not allocate its %d-entry table",
                      failed != INT32_MAX ? (int)failed : sk_comm_rank(parent), k);
    r = SK_ERR_OUT_OF_MEMORY;
  }
  sk__tgroup *g = NULL;
  if (r == SK_OK && info && order) r = sk__tsplit_exchange(pm, color, key, info, order, &g, &me, &n);
  sk__tmember *m = NULL;
  if (r == SK_OK && g) {
    m = sk__tmember_new(tw, g, me, child);
    if (!m) sk__tgroup_release(tw, g);
  }
  if (r == SK_OK) {
    r = sk__tsplit_agree(pm, color == SK_UNDEFINED || m, &failed);
    if (r == SK_OK && failed != INT32_MAX)
      r = sk_comm_set_error(parent, SK_ERR_OUT_OF_MEMORY, "comm_split: rank %d could not allocate its part of the new "
                            "communicator", (int)failed);
  }
  if (r != SK_OK && m) {
    sk__tgroup_release(tw, m->g);
    sk__tmember_free(m);
    m = NULL;
  }
  sk__free(tw->alloc, info);
  sk__free(tw->alloc, order);
  if (r != SK_OK || !m) return r;
  *rank = me, *size = n;
  *state = m;
  return SK_OK;
}

/* Peer access: a tagged collective whose k tasks are the members' functions. */
static sk_result sk__thr_peer_access(sk_comm *c, const void *mine, sk_peer_fn fn, void *ctx) {
  sk__tmember *m = SK__TMEMBER(c);
  sk__tslot *sl = &m->g->slots[m->me];
  sk__tflush(m); /* now nothing else posts on this member: the next parity is known */
  int p = (int)((sl->seq + 1) & 1);
  sl->peer_fn[p] = fn;
  sl->peer_ctx[p] = ctx;
  return sk__tinternal(m, SK__ORIGIN_PEER, SK_COLL_BARRIER, mine, NULL, 0, SK_U8, SK_SUM);
}

/* Clock alignment: a tagged MAX AllReduce; tagged traffic skips the link model, so it costs
   nothing and leaves every group's link-free time as it was. */
static sk_result sk__thr_clock_align(sk_comm *c, double *clock_us) {
  double mine = *clock_us;
  return sk__tinternal(SK__TMEMBER(c), SK__ORIGIN_CLOCK, SK_COLL_ALLREDUCE, &mine, clock_us, 1, SK_F64, SK_MAX);
}

/* A charge (sk_comm_clock_charge): the tagged MAX AllReduce of (clock, us), then the event runs
   from the later of the latest clock and the group's link-free time, as a priced call does
   (sk__tmodel_end); every member computes the same end from the same maxima. */
static sk_result sk__thr_clock_charge(sk_comm *c, double us, double *clock_us) {
  sk__tmember *m = SK__TMEMBER(c);
  double mine[2] = {*clock_us, us}, most[2] = {0, 0};
  sk_result r = sk__tinternal(m, SK__ORIGIN_CHARGE, SK_COLL_ALLREDUCE, mine, most, 2, SK_F64, SK_MAX);
  if (r) return r;
  sk__tslot *sl = &m->g->slots[m->me];
  double start = sl->link_free > most[0] ? sl->link_free : most[0];
  *clock_us = sl->link_free = start + most[1];
  return SK_OK;
}

#define SK__CPU_WORDS 16 /* CPU masks of 1,024 CPUs */

typedef struct sk__trun_arg {
  sk_world *w;
  int rank;
  bool bound;                           /* bind itself to `cpus` (sk__tplace) */
  unsigned long cpus[SK__CPU_WORDS];    /* a CPU mask, as sched_setaffinity takes it */
  sk_device_entry entry;
  void *ctx;
  sk_result result;
} sk__trun_arg;

/* Binding (sk_threads_config.bind). Without it the scheduler keeps 2 device threads on one CPU
   for a whole run in about half of the runs on a 2-core VM (a futex wake places the woken thread
   beside its waker, and they hand over by yielding from then on): an 8-B AllReduce then takes
   ~2 us instead of 0.2-0.6 us. The raw system calls with a mask of words, because strict C11 hides
   glibc's cpu_set_t macros; a failure just leaves the thread unbound. */

/* The CPUs the calling thread may run on, in ascending order, into cpus[0..*n) (at most cap). */
static void sk__tallowed_cpus(int *cpus, int cap, int *n) {
  unsigned long mask[SK__CPU_WORDS];
  int bits = (int)(8 * sizeof mask[0]);
  *n = 0;
  memset(mask, 0, sizeof mask);
  if (syscall(SYS_sched_getaffinity, 0, sizeof mask, mask) < 0) return;
  for (int c = 0; c < SK__CPU_WORDS * bits && *n < cap; c++)
    if (mask[c / bits] >> (c % bits) & 1ul) cpus[(*n)++] = c;
}

/* Where each of the n device threads runs (args[i].bound, .cpus). With n <= CPUs, device i gets
   its own share of them, CPUs [i * ncpu / n, (i + 1) * ncpu / n) of the caller's set, so threads
   it starts (OpenMP's team, its progress thread: they inherit its mask) stay beside it; a single
   device is not bound at all. With more devices than CPUs (bind = 1 only), round robin. */
static void sk__tplace(const sk__tworld *tw, sk__trun_arg *args, int n) {
  int cpus[SK__CPU_WORDS * 64], ncpu = 0, bits = (int)(8 * sizeof args[0].cpus[0]);
  for (int i = 0; i < n; i++) args[i].bound = false;
  if (tw->bind < 0 || n < 2) return;
  sk__tallowed_cpus(cpus, SK__CPU_WORDS * 64, &ncpu);
  if (ncpu < 2 || (tw->bind == 0 && n > ncpu)) return; /* one CPU: nothing to spread over */
  for (int i = 0; i < n; i++) {
    int lo = n <= ncpu ? i * ncpu / n : i % ncpu, hi = n <= ncpu ? (i + 1) * ncpu / n : lo + 1;
    memset(args[i].cpus, 0, sizeof args[i].cpus);
    for (int k = lo; k < hi; k++) args[i].cpus[cpus[k] / bits] |= 1ul << (cpus[k] % bits);
    args[i].bound = true;
  }
}

/* One device thread: bound where sk__tplace said, the generic body, then the departure its
   peers' waits look for. */
static void *sk__tdevice_main(void *p) {
  sk__trun_arg *a = (sk__trun_arg *)p;
  if (a->bound) (void)syscall(SYS_sched_setaffinity, 0, sizeof a->cpus, a->cpus); /* failing: unbound */
  a->result = a->entry(a->w, a->rank, a->ctx);
  sk__tworld *tw = SK__TWORLD(a->w);
  __atomic_store_n(&tw->gone[a->rank], 1, SK__SC);
  sk__twake(&tw->world_group->sig); /* sub-group waiters notice within one sleep slice */
  return NULL;
}

static sk_result sk__thr_world_run(sk_world *w, sk_device_entry entry, void *ctx) {
  sk__tworld *tw = SK__TWORLD(w);
  int n = tw->n;
  pthread_t *th = (pthread_t *)sk__alloc(tw->alloc, sizeof(pthread_t) * (size_t)n, SK__CL);
  sk__trun_arg *args = (sk__trun_arg *)sk__calloc(tw->alloc, sizeof(sk__trun_arg) * (size_t)n, SK__CL);
  if (!th || !args) {
    sk__free(tw->alloc, th);
    sk__free(tw->alloc, args);
    return SK_ERR_OUT_OF_MEMORY;
  }
  int started = 0;
  for (int i = 0; i < n; i++) __atomic_store_n(&tw->gone[i], 0, SK__SC); /* a new run: nobody has left */
  sk__tplace(tw, args, n);
  for (int i = 0; i < n; i++) {
    args[i].w = w, args[i].rank = i, args[i].entry = entry, args[i].ctx = ctx;
    if (pthread_create(&th[i], NULL, sk__tdevice_main, &args[i]) != 0) {
      sk_world_fail(w, SK_ERR_SYSTEM, "could not start a device thread");
      break;
    }
    started++;
  }
  sk_result result = SK_OK;
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    if (args[i].result != SK_OK && result == SK_OK) result = args[i].result;
  }
  if (started < n) result = SK_ERR_SYSTEM;
  sk__free(tw->alloc, th);
  sk__free(tw->alloc, args);
  return result;
}

static void sk__thr_abort(sk_world *w) {
  sk__tworld *tw = SK__TWORLD(w);
  sk__twake(&tw->world_group->sig); /* others notice within one sleep slice */
}

static const sk_backend sk__threads_backend_table = {
    SK_HOOK(version) SK_BACKEND_VERSION,
    SK_HOOK(name) "threads",
    SK_HOOK(world_create) sk__thr_world_create,
    SK_HOOK(world_destroy) sk__thr_world_destroy,
    SK_HOOK(world_run) sk__thr_world_run,
    SK_HOOK(comm_init_rank) sk__thr_comm_init_rank,
    SK_HOOK(comm_split) sk__thr_comm_split,
    SK_HOOK(comm_destroy) sk__thr_comm_destroy,
    SK_HOOK(start) sk__thr_start,
    SK_HOOK(test) sk__thr_test,
    SK_HOOK(wait) sk__thr_wait,
    SK_HOOK(run) sk__thr_run,
    SK_HOOK(abort) sk__thr_abort,
    SK_HOOK(check_caller) sk__thr_check_caller,
    SK_HOOK(peer_access) sk__thr_peer_access,
    SK_HOOK(copy) NULL, /* host memory: memcpy */
    SK_HOOK(shared_address_space) 1, /* the devices are threads of this process */
    SK_HOOK(clock_align) sk__thr_clock_align,
    SK_HOOK(clock_charge) sk__thr_clock_charge,
};

SK_API const sk_backend *sk_threads_backend(void) { return &sk__threads_backend_table; }

SK_EXTERN_C_END

#endif /* SK_THREADS_IMPL */
