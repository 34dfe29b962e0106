/* sk_mpi.h -- the MPI backend: one MPI process is one device (Open MPI or MPICH).

   Do this in ONE .c file:   #define SK_IMPL  (or SK_MPI_IMPL + SK_COMM_IMPL)
                             #include "shardkit.h"
                             #include "sk_mpi.h"
   Build with mpicc.openmpi (or `mpicc.openmpi --showme:compile/--showme:link` flags) and run
   under `mpirun.openmpi -np N`. This is the only shardkit header that includes <mpi.h>.

     sk_mpi_config cfg = {0};          // optional; zero = defaults (below)
     sk_world_desc d = {0};
     d.backend = sk_mpi_backend();     // ndevices 0 = the MPI world size
     d.backend_config = &cfg;
     sk_world_create(&d, &w, &err);
     sk_world_run(w, step, arg);       // calls step once, in this process, as its device
     sk_world_destroy(w);
   or sk_comm_init_rank(w, <this process's rank>, &comm, &err) yourself.

   MPI LIFETIME. sk_world_create initialises MPI only if nobody has (MPI_Init_thread asking for
   MPI_THREAD_SERIALIZED: shardkit calls MPI from whichever thread drives the device, one call at
   a time; no progress thread), and then duplicates MPI_COMM_WORLD once for the barrier below.
   MPI is finalised when the last shardkit world of the process is destroyed, only if shardkit
   initialised it, and only once every process of the job has reached that point: a polled
   barrier first, bounded by the world's timeout (by a short grace period, at most 2 s, when the
   world failed), because MPI_Finalize waits for every process and one hung peer would hold it
   forever. Past the bound MPI_Finalize is skipped, MPI stays initialised, an error goes to the
   world's logger, and sk_world_destroy returns: the job has failed; exit with a non-zero
   status, and mpirun ends the remaining processes (a hung peer included). MPI cannot be
   initialised twice in a process: to use several worlds one after another, keep one world
   alive meanwhile, or initialise MPI yourself (then finalising is yours: after a failed world,
   call MPI_Abort or exit rather than MPI_Finalize, which would wait for a hung peer). A failed
   sk_world_create leaves MPI initialised, so it can be retried. Every world works on duplicates
   of the given communicator (MPI_ERRORS_RETURN set on them and on every communicator shardkit
   makes), so shardkit's traffic never mixes with yours.

   TEARDOWN. sk_comm_destroy waits (bounded by the timeout, as every wait; not at all once the
   world failed) for the requests still outstanding on the communicator and frees them: request
   handles its caller still holds are invalid afterwards. sk_world_destroy ends with a small
   agreement of every process of the world (bounded as above) on whether all ended healthy;
   only then are the world's MPI communicators freed, since after a failure a peer may still
   send on them (and Open MPI would deliver that to the next communicator given the same id).
   So a failed world leaves its MPI communicators allocated.

   HOW A COLLECTIVE MAPS TO MPI
     - Default mode: plain MPI non-blocking collectives (MPI_Iallreduce, MPI_Iallgather,
       MPI_Ireduce_scatter_block, MPI_Ibcast, MPI_Ireduce, MPI_Ialltoall, MPI_Ibarrier) on the
       native types, polled with MPI_Test. Numeric rules of sk_comm.h: integer sum and prod run on
       the unsigned MPI type of the same width (wrap without C overflow; 8-bit sums through a
       user op, since Open MPI 4.1's AVX MPI_SUM saturates 8-bit integers); avg = MPI sum, then
       each output divided locally (integers truncate toward zero); float min/max go through a
       user MPI_Op that propagates NaN (MPI_MIN/MPI_MAX leave NaN implementation-defined).
       Float sums are in MPI's order (not rank order), so the last bits may differ from the
       threads backend.
     - f16 and bf16 travel as user-defined 2-byte MPI datatypes. Their min/max use the NaN-aware
       user op (exact: it picks one input). Their sum/prod/avg do NOT go through an MPI_Op: MPI
       user ops combine two buffers at a time, so each step would round to 16 bits, breaking the
       rule "accumulate in f32 and round once". They take the gather path instead.
     - Gather path: the inputs are gathered (MPI_Iallgather / MPI_Igather / MPI_Ialltoall) and
       reduced locally with sk_reduce_local in rank order 0..N-1: exactly the threads backend's
       kernels and order, so results are bitwise identical to it. Scratch: N x chunk bytes
       (chunks keep it at most 32 MiB).
     - deterministic = true sends every float reduction through the gather path (integer
       reductions are exact either way), so every result equals the threads backend's bit for
       bit, at the price of N times the traffic.
     - Counts: MPI counts are int. Longer collectives are cut into chunks of at most max_count
       elements (AllGather/AllToAll chunks use resized datatypes, ReduceScatter takes the gather
       path), so any count works.
     - AllToAllV: MPI_Ialltoallv on the move type, its size_t counts and displacements converted
       into int arrays the request owns. Phases, one MPI call each, in the queue like any
       collective: [fingerprint and counts check, with check_mismatch, see FAULTS] a rounds
       exchange (MPI_Iallreduce MAX of each member's largest block: every member must call
       MPI_Ialltoallv equally often and none sees the others' counts; with the check on this
       rides the verdict, no extra call), then ceil(largest / max_count) rounds (none when
       nothing moves anywhere): round r moves elements [r*M, (r+1)*M) of every block.
       Displacements go to MPI relative to the lowest block of a side still moving (MPI's
       buffer pointer), so any count and offset works as long as the starts of two non-empty
       blocks of one side lie within INT_MAX elements of each other; otherwise the call returns
       SK_ERR_UNSUPPORTED naming the block, on that member, before anything is posted (its
       peers then wait for it, as after a bad argument).
     - In-place (NCCL forms) map to MPI_IN_PLACE; in-place AllToAll and ReduceScatter (whose
       NCCL form overlaps send and recv in a way MPI_IN_PLACE cannot express) stage the input in
       scratch first.

   NON-BLOCKING AND PROGRESS (the limitation to know). Open MPI progresses non-blocking
   collectives only inside MPI calls, and this backend starts no progress thread (it would need
   MPI_THREAD_MULTIPLE, which slows every MPI call). So a request advances only while this
   process is inside shardkit: sk_test, sk_wait, or any later call on a communicator. To overlap
   compute with a collective, call sk_test now and then. Requests of one communicator run one
   after another in issue order (MPI requires every rank to start collectives in the same order;
   chunked collectives would otherwise interleave). Send/Recv are posted at once and do not queue.

   FAULTS, as far as MPI allows. Every fault ends, on every member, in an sk_result within the
   world's timeout plus a grace period (a quarter of the timeout, 0.2 to 2 s); messages name the
   rank that failed, left or is missing, as a world rank.
     - MPI errors return SK_ERR_BACKEND with MPI's error string in sk_comm_error_message;
       truncation (MPI_ERR_TRUNCATE: a member sent more than this one expects) returns
       SK_ERR_MISMATCH naming the call (a receive also names both ranks). Open MPI 4 reports a
       failed non-blocking collective to MPI_COMM_WORLD's error handler whatever the
       communicator's, so shardkit completes a finished collective request with
       MPI_ERRORS_RETURN set on MPI_COMM_WORLD for that one MPI_Test, then restores yours.
       Errors of calls tied to no communicator (creating the f16 types and ops) still go to
       MPI_COMM_WORLD's handler.
     - Every wait polls against the world's timeout. SK_ERR_TIMEOUT then fails the world: the
       MPI request cannot be cancelled and stays in flight, so the only safe recovery is to
       abort: exit, or set abort_calls_mpi_abort so sk_world_abort calls MPI_Abort and ends
       the whole job. Request memory MPI may still write into is kept, and freed after
       shardkit's MPI_Finalize (never, if MPI is yours or the finalise was skipped); your
       buffers of such a request are another matter: MPI may still write into them.
     - A failure (a device function returning an error, a timeout, sk_world_abort) marks the
       world aborted and sends an abort notice to every other process of the world, naming
       where it started; a process that is told echoes it once to everyone, which also says it
       is alive. Waiters then return SK_ERR_ABORTED naming the failed rank, instead of waiting
       for their timeout. When the failure was a timeout, the members that stay silent during
       the grace period (hung, dead, or gone from the world) are named as the ones it waited
       for; when every member answered, they were in other calls (mismatched calls). A process
       reads the notices before starting any MPI operation, so a late member never completes a
       collective that its peers gave up on.
     - Mismatched calls (different collective, count, dtype, op or root at the same point) are
       undefined in MPI: a hang (then SK_ERR_TIMEOUT), truncation (SK_ERR_MISMATCH on the ranks
       MPI detects it) or wrong data. check_mismatch adds a fingerprint exchange before every
       collective so that every member returns SK_ERR_MISMATCH with the threads backend's
       message. Off by default (one more small collective per call). sk_comm_split always
       exchanges a fingerprint of its own kind (it carries the color and key the split needs
       anyway), so a split against a user collective is SK_ERR_MISMATCH naming both calls with
       the check on, and with it off still never SK_OK for the split nor a hang in
       MPI_Comm_split. Send/Recv: a receive longer or shorter than the message returns
       SK_ERR_MISMATCH on the receiver; dtypes are not compared (MPI does not type-check across
       processes).
     - AllToAllV counts that disagree (rank i sends rank j other than j expects from i): with
       check_mismatch, after the fingerprint, MPI_Ialltoall swaps each member's send counts,
       each compares them with its recv counts, and MPI_Iallgather of every member's lowest
       bad pair (plus its largest block, for the rounds) lets all pick the lowest pair i*size+j:
       every member returns SK_ERR_MISMATCH with the threads backend's message ("mismatch:
       alltoallv: rank I sends N elements to rank J, which expects M from it"; on a
       sub-communicator followed by " (world ranks A and B)"), and nothing moves. Cost: two
       small collectives beyond the fingerprint (the verdict replaces the rounds exchange).
       With the check off the data moves as given (MPI calls such counts erroneous). In one
       round (every block within max_count, INT_MAX by default), a member that expects fewer
       elements than its peer sends gets MPI's truncation: SK_ERR_MISMATCH naming
       MPI_Ialltoallv, on that member alone; one that expects more is undefined in MPI (Open
       MPI: SK_OK, the tail of the block unwritten). Over several rounds the two sides of the
       pair are cut differently: a truncating member still joins the remaining rounds (its
       peers would wait for it otherwise) and reports the first failure after the last; a
       round whose receiver expects nothing while its sender sends leaves that message queued
       in MPI, where a later collective on the communicator may receive it; a round whose
       receiver waits for a message its sender has no more of ends in SK_ERR_TIMEOUT, which
       fails the world. Every member makes the same number of MPI calls (the rounds come from
       the exchange), so nothing waits past the world's bounds. Where counts may disagree,
       turn the check on.
     - Allocation failure (a user allocator returning NULL) returns SK_ERR_OUT_OF_MEMORY and
       leaks nothing; in sk_comm_split it also fails the world, whose peers would otherwise
       wait for this member.
     - Waits spin briefly, then sched_yield (when more processes share the node than it has
       cores, they yield at once), like Open MPI's own yield_when_idle.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_MPI_IMPL)
#define SK_MPI_IMPL
#endif
#ifndef SK_MPI_H
#define SK_MPI_H

#include "sk_backend.h"

SK_EXTERN_C_BEGIN

/* Optional backend_config for the MPI backend; zero fields mean the default:
     comm                    NULL = MPI_COMM_WORLD; else points to the MPI_Comm to use (read at
                             sk_world_create; the world duplicates it). A pointer keeps <mpi.h>
                             out of the declarations.
     deterministic           false: float reductions bitwise identical to the threads backend
                             (gather + sk_reduce_local in rank order)
     check_mismatch          false: fingerprint exchange before every collective (debug)
     abort_calls_mpi_abort   false: sk_world_abort (and a device failure) calls MPI_Abort,
                             ending every process of the job
     max_count               INT_MAX: most elements per MPI call (a test knob, like gloo's
                             maxSegmentSize: small values reach the chunked paths) */
typedef struct sk_mpi_config {
  const void *comm;
  bool deterministic;
  bool check_mismatch;
  bool abort_calls_mpi_abort;
  size_t max_count;
} sk_mpi_config;

SK_API const sk_backend *sk_mpi_backend(void);

SK_EXTERN_C_END

#endif /* SK_MPI_H */

/* ==== implementation ======================================================================== */
#if defined(SK_MPI_IMPL) && !defined(SK_MPI_IMPL_DONE)
#define SK_MPI_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* Open MPI's C++ bindings do not build under -Werror -std=c++17 */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#if !defined(__cplusplus)
/* Strict C11 hides it unless a feature macro preceded the first system include (see sk_comm.h). */
extern long sysconf(int name);
#endif

SK_EXTERN_C_BEGIN

#define SK__M_SPIN_NS 20000ull            /* spin this long before yielding (when cores allow) */
#define SK__M_GATHER_BYTES (32u << 20)    /* gather-path scratch per chunk */
#define SK__M_ABORT_TAG 7471
#define SK__M_P2P_TAG 0
#define SK__M_FP_N 5                      /* fingerprint: kind, count, dtype, op, root */
/* The split's fingerprint kind: no sk_coll_kind, and an unlikely value for user data, so the
   split's agreement exchange never passes for a user collective (or the other way round). */
#define SK__M_FP_SPLIT ((int64_t)0x736b2d73706c6974ll) /* "sk-split" */

/* Abort notices (4 ints: sender, kind, origin rank, origin's kind). Every process of a world
   sends one to every other when the world fails there, so each learns the failure's origin and
   which peers are alive (a peer inside shardkit answers within moments; a silent one is hung,
   dead or gone). */
enum { SK__M_N_FAILED = 1, SK__M_N_TIMEOUT = 2, SK__M_N_ECHO = 3 };

/* ---- process-wide MPI state: types and ops shared by every world of this process --------- */

typedef struct sk__mreq sk__mreq;

static int sk__m_live;          /* shardkit MPI worlds alive in this process */
static int sk__m_initialised;   /* shardkit called MPI_Init_thread */
static MPI_Datatype sk__m_f16 = MPI_DATATYPE_NULL, sk__m_bf16 = MPI_DATATYPE_NULL;
static MPI_Op sk__m_op_min = MPI_OP_NULL, sk__m_op_max = MPI_OP_NULL, sk__m_op_sum8 = MPI_OP_NULL;
/* When shardkit initialised MPI: a duplicate of MPI_COMM_WORLD for the barrier that precedes
   MPI_Finalize, and that barrier's request while it is pending. */
static MPI_Comm sk__m_fin_comm = MPI_COMM_NULL;
static MPI_Request sk__m_fin_req = MPI_REQUEST_NULL;
/* Requests a failed world left inside MPI (a collective cannot be cancelled, and MPI may still
   write into their scratch): freed after shardkit's MPI_Finalize, never before. */
static sk__mreq *sk__m_orphans;
/* World records MPI may still write into (a notice receive or teardown agreement that did not
   finish in its bound): freed after shardkit's MPI_Finalize too. */
static struct sk__mworld *sk__m_graves;

#define SK__M_NAN_PICK(a, b, less) ((a) != (a) ? 0 : (b) != (b) ? 1 : (less) ? 1 : 0) /* 1: take b */

/* NaN-propagating min/max (sk_comm.h's rule), commutative: inout[i] = pick(inout[i], in[i]).
   f16/bf16 pick one of the two inputs, so no rounding happens. */
static void sk__m_minmax(void *in, void *inout, int len, MPI_Datatype dt, int is_max) {
  if (dt == MPI_FLOAT || dt == MPI_DOUBLE) {
#define SK__M_MM(T)                                                                  \
  do {                                                                               \
    T *x = (T *)in, *y = (T *)inout;                                                 \
    for (int i = 0; i < len; i++) {                                                  \
      T a = y[i], b = x[i];                                                          \
      if (SK__M_NAN_PICK(a, b, is_max ? b > a : b < a)) y[i] = b;                    \
    }                                                                                \
  } while (0)
    if (dt == MPI_FLOAT)
      SK__M_MM(float);
    else
      SK__M_MM(double);
#undef SK__M_MM
    return;
  }
  const uint16_t *x = (const uint16_t *)in;
  uint16_t *y = (uint16_t *)inout;
  bool f16 = dt == sk__m_f16;
  for (int i = 0; i < len; i++) {
    float a = f16 ? sk_f16_to_f32(y[i]) : sk_bf16_to_f32(y[i]);
    float b = f16 ? sk_f16_to_f32(x[i]) : sk_bf16_to_f32(x[i]);
    if (SK__M_NAN_PICK(a, b, is_max ? b > a : b < a)) y[i] = x[i];
  }
}
/* Wrapping 8-bit sum. Open MPI 4.1's op/avx component saturates 8-bit MPI_SUM (255 + 1 = 255;
   open-mpi/ompi#8045, "wontfix"), so i8/u8 sums use this user op instead. */
static void sk__m_sum8_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
  const uint8_t *x = (const uint8_t *)in;
  uint8_t *y = (uint8_t *)inout;
  (void)dt;
  for (int i = 0; i < *len; i++) y[i] = (uint8_t)(y[i] + x[i]);
}
static void sk__m_min_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { sk__m_minmax(in, inout, *len, *dt, 0); }
static void sk__m_max_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { sk__m_minmax(in, inout, *len, *dt, 1); }

/* ---- records ------------------------------------------------------------------------------ */

typedef struct sk__mworld {
  MPI_Comm comm;       /* duplicate of the user's communicator: the world's collectives */
  MPI_Comm abort_comm; /* duplicate: abort notices only */
  MPI_Request abort_rx;
  int nin[4];          /* the notice being received */
  int *nout;           /* 4 ints sent to every peer, then `size` send requests (see notify) */
  MPI_Request *ntx;
  unsigned char *heard; /* per world rank: its notice arrived */
  int nheard;
  int cause_rank, cause_kind; /* where the failure started (-1: not known yet) */
  bool abort_sent;
  int rank, size;
  bool claimed;
  bool spin;
  bool abandoned;      /* a request was left in flight: its communicators are never freed */
  bool listened;       /* a grace period was spent listening for silent peers */
  int td_in, td_out;   /* teardown agreement: 1 = this process / every process ended healthy */
  MPI_Request td_req;
  sk_allocator alloc_copy; /* for a record kept past its world (see sk__m_graves) */
  struct sk__mworld *grave_next;
  sk_mpi_config cfg;
  size_t max_count;
  const sk_allocator *alloc;
  sk_world *w;
} sk__mworld;

typedef struct sk__mcomm {
  sk__mworld *mw;
  sk_comm *comm;
  MPI_Comm mc;
  int size;            /* members, as created: what plans divide by (sk_comm_size(NULL) is 0) */
  bool owns;           /* a split's communicator, freed with it */
  const void **ptrs;   /* size entries: gather-path inputs */
  int *wranks;         /* size entries: each member's world rank (for messages) */
  sk__mreq *head, *tail; /* collective requests, in issue order; head is the one in MPI */
  sk__mreq *live;      /* every request not yet freed (collective and point to point) */
} sk__mcomm;

struct sk__mreq {
  sk_request base;
  sk__mreq *next;      /* the communicator's queue */
  sk__mreq *lprev, *lnext; /* the communicator's live list; lnext also links orphans */
  sk__mcomm *m;        /* NULL once orphaned */
  sk_allocator alloc;  /* a copy: an orphan outlives its world */
  int done, started;
  sk_result result;
  char msg[SK_ERROR_MSG_MAX];
  const char *call;    /* the MPI call in flight (for messages) */
  /* plan */
  bool gather, fp_pending;
  bool split;          /* the split's agreement: the fingerprint exchange is the whole op */
  MPI_Datatype mt;     /* moves data */
  MPI_Datatype rt;     /* reduces (native path) */
  MPI_Op rop;
  size_t total, L, off, len; /* elements along the chunked axis; chunk length; current chunk */
  const unsigned char *src;  /* the input actually sent (staged for in-place AllToAll/ReduceScatter) */
  unsigned char *tmp;
  size_t tmp_bytes;
  MPI_Request mr;
  int64_t fp[SK__M_FP_N];
  /* point to point: every chunk posted at once */
  int np;
  MPI_Request *preq;
  MPI_Status *pst;
  /* AllToAllV (sk__mvec_*): the phase in MPI, its rounds, and scratch MPI reads until the
     phase completes (MPI keeps the count and displacement arrays of a non-blocking call) */
  int vphase;
  size_t vround, vrounds;
  sk_result verr; /* the first data round that failed here (the others still run) */
  uint64_t *vx; /* check on: counts sent, counts received, my verdict, everyone's (6 size + 4);
                   check off: my largest count, everyone's largest (2). vint follows it */
  int *vint;    /* 4 x size: the round's send counts, send displs, recv counts, recv displs */
};

#define SK__MWORLD(w) ((sk__mworld *)sk_world_state(w))
#define SK__MCOMM(c) ((sk__mcomm *)sk_comm_state(c))

/* ---- small helpers ------------------------------------------------------------------------ */

static SK__PRINTF(3, 4) sk_result sk__mreq_fail(sk__mreq *q, sk_result code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(q->msg, sizeof q->msg, fmt, ap);
  va_end(ap);
  return code;
}

/* MPI error -> SK_ERR_BACKEND with MPI's own text; truncation (a member sent more than this
   one expects: counts differ) -> SK_ERR_MISMATCH. MPI does not say which member sent it. */
static sk_result sk__mreq_mpi(sk__mreq *q, int e, const char *call) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0, cls = 0;
  if (MPI_Error_string(e, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", e);
  MPI_Error_class(e, &cls);
  const char *name = q->split ? "split" : sk_coll_kind_name(q->base.coll.kind);
  if (cls == MPI_ERR_TRUNCATE)
    return sk__mreq_fail(q, SK_ERR_MISMATCH,
                         "mismatch: %s: %s: %s: a member sent more than rank %d expects (calls or counts differ "
                         "across members; check_mismatch names them)",
                         name, call, text, sk_comm_rank(q->m->comm));
  return sk__mreq_fail(q, SK_ERR_BACKEND, "%s: %s: %s", name, call, text);
}

/* MPI_Test for a non-blocking collective whose errors must come back as return codes. Open MPI
   4.x reports a failed collective request to MPI_COMM_WORLD's error handler (fatal by default)
   instead of its communicator's, so: look without completing (MPI_Request_get_status never
   raises it), and complete it with MPI_ERRORS_RETURN set on MPI_COMM_WORLD for that one call,
   then put the user's handler back (calls are serialised: MPI_THREAD_SERIALIZED). */
static int sk__m_test_coll(MPI_Request *r, int *flag) {
  int e = MPI_Request_get_status(*r, flag, MPI_STATUS_IGNORE);
  if (e != MPI_SUCCESS || !*flag) return e;
  MPI_Errhandler user = MPI_ERRHANDLER_NULL;
  bool swap = MPI_Comm_get_errhandler(MPI_COMM_WORLD, &user) == MPI_SUCCESS;
  if (swap) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  e = MPI_Test(r, flag, MPI_STATUS_IGNORE);
  if (swap) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, user);
    MPI_Errhandler_free(&user);
  }
  if (e != MPI_SUCCESS) *flag = 1, *r = MPI_REQUEST_NULL; /* MPI freed it with the error */
  return e;
}

static MPI_Datatype sk__m_move_type(sk_dtype dt) {
  switch (dt) {
    case SK_F32: return MPI_FLOAT;
    case SK_F64: return MPI_DOUBLE;
    case SK_F16: return sk__m_f16;
    case SK_BF16: return sk__m_bf16;
    case SK_I8: return MPI_INT8_T;
    case SK_U8: return MPI_UINT8_T;
    case SK_I32: return MPI_INT32_T;
    default: return MPI_INT64_T;
  }
}

/* The native reduction's type and op: integer sum/prod/avg unsigned (wrap), min/max signed. */
static void sk__m_reduce_type(sk_dtype dt, sk_redop op, MPI_Datatype *t, MPI_Op *o) {
  bool arith = op == SK_SUM || op == SK_PROD || op == SK_AVG;
  *t = sk__m_move_type(dt);
  if (arith) {
    if (dt == SK_I8) *t = MPI_UINT8_T;
    if (dt == SK_I32) *t = MPI_UINT32_T;
    if (dt == SK_I64) *t = MPI_UINT64_T;
  }
  switch (op) {
    case SK_PROD: *o = MPI_PROD; break;
    case SK_SUM:
    case SK_AVG: *o = sk_dtype_size(dt) == 1 ? sk__m_op_sum8 : MPI_SUM; break;
    case SK_MIN: *o = sk_dtype_is_float(dt) ? sk__m_op_min : MPI_MIN; break;
    case SK_MAX: *o = sk_dtype_is_float(dt) ? sk__m_op_max : MPI_MAX; break;
    default: *o = MPI_SUM; break;
  }
}

/* avg after an MPI sum: divide every element by n as sk_reduce_local's avg does. */
static void sk__m_divide(void *buf, size_t len, sk_dtype dt, int n) {
  switch (dt) {
    case SK_F32: {
      float *p = (float *)buf, d = (float)n;
      for (size_t i = 0; i < len; i++) p[i] = p[i] / d;
      break;
    }
    case SK_F64: {
      double *p = (double *)buf, d = (double)n;
      for (size_t i = 0; i < len; i++) p[i] = p[i] / d;
      break;
    }
#define SK__M_IDIV(T)                                                                     \
  do {                                                                                    \
    T *p = (T *)buf;                                                                      \
    for (size_t i = 0; i < len; i++) p[i] = (T)((long long)p[i] / (long long)n);          \
  } while (0)
    case SK_I8: SK__M_IDIV(int8_t); break;
    case SK_U8: SK__M_IDIV(uint8_t); break;
    case SK_I32: SK__M_IDIV(int32_t); break;
    case SK_I64: SK__M_IDIV(int64_t); break;
#undef SK__M_IDIV
    default: break; /* f16/bf16 avg takes the gather path */
  }
}

/* `len` elements of `base` with an extent of `stride` bytes: chunk j of every rank's block. */
static int sk__m_block_type(MPI_Datatype base, size_t len, size_t stride, MPI_Datatype *out) {
  MPI_Datatype t;
  int e = MPI_Type_contiguous((int)len, base, &t);
  if (e != MPI_SUCCESS) return e;
  e = MPI_Type_create_resized(t, 0, (MPI_Aint)stride, out);
  MPI_Type_free(&t);
  if (e != MPI_SUCCESS) return e;
  return MPI_Type_commit(out);
}

/* ---- collective requests: plan, chunks, progress ------------------------------------------ */

static bool sk__m_in_place(const sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  return sk_coll_in_place(o->kind, o->send, o->recv, o->count, o->dtype, sk_comm_rank(q->m->comm));
}

static void sk__mreq_plan(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  sk__mworld *mw = q->m->mw;
  int n = q->m->size;
  size_t es = sk_dtype_size(o->dtype);
  bool reduces = sk_coll_reduces(o->kind);
  bool half = o->dtype == SK_F16 || o->dtype == SK_BF16;
  bool arith = o->op == SK_SUM || o->op == SK_PROD || o->op == SK_AVG;
  q->gather = reduces && ((sk_dtype_is_float(o->dtype) && mw->cfg.deterministic) || (half && arith) ||
                          (o->kind == SK_COLL_REDUCE_SCATTER && o->count > mw->max_count));
  q->mt = sk__m_move_type(o->dtype);
  if (reduces) sk__m_reduce_type(o->dtype, o->op, &q->rt, &q->rop);
  q->total = o->kind == SK_COLL_BARRIER ? 1 : o->count;
  q->L = mw->max_count;
  if (q->gather && es) { /* es: validated dtype */
    size_t g = SK__M_GATHER_BYTES / ((size_t)n * es);
    if (g < 1) g = 1;
    if (g < q->L) q->L = g;
  }
  q->fp_pending = mw->cfg.check_mismatch;
  q->src = (const unsigned char *)o->send;
}

static sk_result sk__mreq_scratch(sk__mreq *q, size_t bytes) {
  if (bytes <= q->tmp_bytes) return SK_OK;
  sk__free(&q->alloc, q->tmp);
  q->tmp = (unsigned char *)sk__alloc(&q->alloc, bytes, 64);
  q->tmp_bytes = q->tmp ? bytes : 0;
  if (!q->tmp)
    return sk__mreq_fail(q, SK_ERR_OUT_OF_MEMORY, "%s: allocating %zu bytes of scratch",
                         sk_coll_kind_name(q->base.coll.kind), bytes);
  return SK_OK;
}

/* Gather / Scatter, chunk [off, off+len) of every block: the root's size*count side is strided
   (a block type) unless the chunk is the whole block. In place on the root: MPI_IN_PLACE. */
static int sk__mchunk_rooted(sk__mreq *q, const unsigned char *s, unsigned char *r, size_t len, bool ip, const char **call) {
  const sk_coll *o = &q->base.coll;
  sk__mcomm *m = q->m;
  bool root = sk_comm_rank(m->comm) == o->root, gather = o->kind == SK_COLL_GATHER;
  size_t es = sk_dtype_size(o->dtype);
  int il = (int)len, e = MPI_SUCCESS, wide_n = il;
  MPI_Datatype wide = q->mt, bt = MPI_DATATYPE_NULL;
  if (len != o->count) { /* one element of the block type per rank */
    e = sk__m_block_type(q->mt, len, o->count * es, &bt);
    if (e != MPI_SUCCESS) return e;
    wide = bt, wide_n = 1;
  }
  *call = gather ? "MPI_Igather" : "MPI_Iscatter";
  if (gather)
    e = MPI_Igather(root && ip ? MPI_IN_PLACE : (const void *)s, il, q->mt, root ? r : NULL, wide_n, wide, o->root,
                    m->mc, &q->mr);
  else
    e = MPI_Iscatter(root ? (const void *)s : NULL, wide_n, wide, root && ip ? MPI_IN_PLACE : (void *)r, il, q->mt,
                     o->root, m->mc, &q->mr);
  if (bt != MPI_DATATYPE_NULL) MPI_Type_free(&bt); /* MPI keeps it until the operation completes */
  return e;
}

/* Starts the chunk [q->off, q->off + q->len). */
static sk_result sk__mchunk_start(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  sk__mcomm *m = q->m;
  MPI_Comm mc = m->mc;
  int n = sk_comm_size(m->comm), rank = sk_comm_rank(m->comm);
  size_t es = sk_dtype_size(o->dtype), off = q->off, len = q->total - off < q->L ? q->total - off : q->L;
  size_t c = o->count;
  q->len = len;
  int il = (int)len, e = MPI_SUCCESS;
  const unsigned char *s = q->src ? q->src + off * es : NULL;
  unsigned char *r = o->recv ? (unsigned char *)o->recv + off * es : NULL;
  bool ip = sk__m_in_place(q);
  const char *call = "?";
  sk_result rr;
  switch (o->kind) {
    case SK_COLL_BARRIER:
      call = "MPI_Ibarrier";
      e = MPI_Ibarrier(mc, &q->mr);
      break;
    case SK_COLL_ALLREDUCE:
      if (q->gather) {
        if ((rr = sk__mreq_scratch(q, (size_t)n * len * es)) != SK_OK) return rr;
        call = "MPI_Iallgather";
        e = MPI_Iallgather(s, il, q->mt, q->tmp, il, q->mt, mc, &q->mr);
      } else {
        call = "MPI_Iallreduce";
        e = MPI_Iallreduce(ip ? MPI_IN_PLACE : s, r, il, q->rt, q->rop, mc, &q->mr);
      }
      break;
    case SK_COLL_REDUCE:
      if (q->gather) {
        if (rank == o->root && (rr = sk__mreq_scratch(q, (size_t)n * len * es)) != SK_OK) return rr;
        call = "MPI_Igather";
        e = MPI_Igather(s, il, q->mt, rank == o->root ? q->tmp : NULL, il, q->mt, o->root, mc, &q->mr);
      } else {
        call = "MPI_Ireduce";
        e = MPI_Ireduce(rank == o->root && ip ? MPI_IN_PLACE : s, rank == o->root ? r : NULL, il, q->rt, q->rop,
                        o->root, mc, &q->mr);
      }
      break;
    case SK_COLL_BROADCAST:
      call = "MPI_Ibcast";
      e = MPI_Ibcast(r, il, q->mt, o->root, mc, &q->mr);
      break;
    case SK_COLL_REDUCE_SCATTER:
      if (q->gather) { /* chunk [off, off+len) of every rank's block for me: an AllToAll */
        if ((rr = sk__mreq_scratch(q, (size_t)n * len * es)) != SK_OK) return rr;
        call = "MPI_Ialltoall";
        if (len == c) {
          e = MPI_Ialltoall(s, il, q->mt, q->tmp, il, q->mt, mc, &q->mr);
        } else {
          MPI_Datatype bt;
          e = sk__m_block_type(q->mt, len, c * es, &bt);
          if (e == MPI_SUCCESS) {
            e = MPI_Ialltoall(s, 1, bt, q->tmp, il, q->mt, mc, &q->mr);
            MPI_Type_free(&bt); /* MPI keeps it until the operation completes */
          }
        }
      } else {
        call = "MPI_Ireduce_scatter_block";
        e = MPI_Ireduce_scatter_block(s, r, il, q->rt, q->rop, mc, &q->mr);
      }
      break;
    case SK_COLL_ALLGATHER:
    case SK_COLL_ALLTOALL: {
      bool ag = o->kind == SK_COLL_ALLGATHER;
      call = ag ? "MPI_Iallgather" : "MPI_Ialltoall";
      const void *sb = ag && ip ? MPI_IN_PLACE : (const void *)s;
      if (len == c) {
        e = ag ? MPI_Iallgather(sb, il, q->mt, r, il, q->mt, mc, &q->mr)
               : MPI_Ialltoall(sb, il, q->mt, r, il, q->mt, mc, &q->mr);
      } else {
        MPI_Datatype bt;
        e = sk__m_block_type(q->mt, len, c * es, &bt);
        if (e == MPI_SUCCESS) {
          e = ag ? MPI_Iallgather(sb, il, q->mt, r, 1, bt, mc, &q->mr) : MPI_Ialltoall(sb, 1, bt, r, 1, bt, mc, &q->mr);
          MPI_Type_free(&bt);
        }
      }
      break;
    }
    case SK_COLL_GATHER:
    case SK_COLL_SCATTER:
      e = sk__mchunk_rooted(q, s, r, len, ip, &call);
      break;
    default: return sk__mreq_fail(q, SK_ERR_INTERNAL, "mpi backend: unexpected op %d", (int)o->kind);
  }
  if (e != MPI_SUCCESS) return sk__mreq_mpi(q, e, call);
  q->call = call;
  return SK_OK;
}

/* After chunk [off, off+len) completed: the local reductions and divisions. */
static sk_result sk__mchunk_finish(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  sk__mcomm *m = q->m;
  int n = m->size, rank = sk_comm_rank(m->comm);
  size_t es = sk_dtype_size(o->dtype), off = q->off, len = q->len;
  bool here = o->kind != SK_COLL_REDUCE || rank == o->root; /* this rank holds a result */
  unsigned char *r = o->recv ? (unsigned char *)o->recv + off * es : NULL;
  if (sk_coll_reduces(o->kind)) {
    if (q->gather && here) {
      for (int i = 0; i < n; i++) m->ptrs[i] = q->tmp + (size_t)i * len * es;
      sk_result rr = sk_reduce_local(r, m->ptrs, n, len, o->dtype, o->op, NULL);
      if (rr != SK_OK) return sk__mreq_fail(q, rr, "%s: local reduction failed", sk_coll_kind_name(o->kind));
    } else if (!q->gather && here && o->op == SK_AVG) {
      sk__m_divide(r, len, o->dtype, n);
    }
  }
  return SK_OK;
}

/* A fingerprint as the call it describes (kind, count, dtype, op, root). */
static sk_coll sk__mfp_coll(const int64_t *f) {
  sk_coll c;
  memset(&c, 0, sizeof c);
  c.kind = (sk_coll_kind)f[0], c.count = (size_t)f[1], c.dtype = (sk_dtype)f[2], c.op = (sk_redop)f[3];
  c.root = (int)f[4];
  return c;
}

/* One fingerprint as the call that made it (the generic description). Entries left zero (a
   member that sent something else, e.g. its own data with the check off there) read as
   "another call". */
static void sk__mfp_str(char *buf, size_t cap, const int64_t *f) {
  sk_coll c = sk__mfp_coll(f);
  if (f[0] == SK__M_FP_SPLIT)
    snprintf(buf, cap, "split(color %lld, key %lld)", (long long)f[1], (long long)f[2]);
  else if (f[0] <= SK_COLL_NONE || f[0] >= SK_COLL_KIND_COUNT || f[0] == SK_COLL_SEND || f[0] == SK_COLL_RECV ||
           !sk_dtype_valid(c.dtype) || !sk_redop_valid(c.op) || f[1] < 0)
    snprintf(buf, cap, "another call (no fingerprint: a collective without the check, or not a split)");
  else
    sk_coll_describe(buf, cap, &c);
}

/* Whether two fingerprints are the same call (the generic rule). Splits agree with splits only
   (their other fields are each member's color and key). */
static bool sk__mfp_same(const int64_t *a, const int64_t *b) {
  if (a[0] != b[0]) return false;
  if (a[0] == SK__M_FP_SPLIT) return true;
  sk_coll ca = sk__mfp_coll(a), cb = sk__mfp_coll(b);
  return sk_coll_same_call(&ca, &cb);
}

/* The fingerprint check: every member compares all fingerprints with rank 0's, so all agree on
   the verdict and the message (which names world ranks too on a sub-communicator). */
static sk_result sk__mfp_check(sk__mreq *q) {
  sk__mcomm *m = q->m;
  int n = sk_comm_size(m->comm);
  const int64_t *all = (const int64_t *)(const void *)q->tmp;
  for (int i = 1; i < n; i++) {
    const int64_t *b = all + SK__M_FP_N * i;
    if (sk__mfp_same(all, b)) continue;
    char ca[96], cb[96], wa[32] = "", wb[32] = "";
    sk__mfp_str(ca, sizeof ca, all);
    sk__mfp_str(cb, sizeof cb, b);
    if (m->mc != m->mw->comm) {
      snprintf(wa, sizeof wa, " (world rank %d)", m->wranks[0]);
      snprintf(wb, sizeof wb, " (world rank %d)", m->wranks[i]);
    }
    return sk__mreq_fail(q, SK_ERR_MISMATCH, "mismatch: rank 0%s called %s but rank %d%s called %s", wa, ca, i, wb, cb);
  }
  return SK_OK;
}

/* ---- AllToAllV: MPI_Ialltoallv in rounds, after a rounds (and, checked, counts) exchange ---- */

/* The phases of an AllToAllV request after the fingerprint, in order. */
enum { SK__MV_COUNTS = 1, SK__MV_VERDICT, SK__MV_ROUNDS, SK__MV_DATA };

/* Where block j of one side starts, in elements, walking j upward: packed is the running sum
   of the counts before j (sk_coll_vec_displ, without its quadratic walk). */
#define SK__MV_START(displs, j, packed) ((displs) ? (displs)[j] : (packed))

/* The largest block this member sends or receives. Both sides count: with the check off,
   members may disagree on a pair, and the rounds must still cover every block of every member. */
static uint64_t sk__mvec_local_max(const sk_coll *o, int n) {
  size_t most = 0;
  for (int j = 0; j < n; j++) {
    if (o->v.send_counts[j] > most) most = o->v.send_counts[j];
    if (o->v.recv_counts[j] > most) most = o->v.recv_counts[j];
  }
  return (uint64_t)most;
}

/* MPI displacements are int elements. Each round's are taken relative to the lowest block of
   the side still moving (its address becomes MPI's buffer pointer), and counts are cut into
   rounds, so what must fit an int is only the distance between the starts of two non-empty
   blocks of one side: UNSUPPORTED naming the block otherwise, before anything is posted. */
static sk_result sk__mvec_check_side(sk__mreq *q, const char *side, const size_t *counts, const size_t *displs) {
  int n = sk_comm_size(q->m->comm), low = -1;
  size_t packed = 0, low_at = 0;
  for (int j = 0; j < n; j++) {
    size_t at = SK__MV_START(displs, j, packed);
    packed += counts[j];
    if (counts[j] && (low < 0 || at < low_at)) low = j, low_at = at;
  }
  packed = 0;
  for (int j = 0; j < n; j++) {
    size_t at = SK__MV_START(displs, j, packed);
    packed += counts[j];
    if (counts[j] && at - low_at > (size_t)INT_MAX)
      return sk__mreq_fail(q, SK_ERR_UNSUPPORTED,
                           "alltoallv: %s block %d starts at element %zu, %zu after %s block %d: MPI displacements are "
                           "int, so the MPI backend needs the non-empty blocks of a side within INT_MAX elements",
                           side, j, at, at - low_at, side, low);
  }
  return SK_OK;
}

/* AllToAllV before anything is posted: displacements MPI can express, and the request's
   scratch (one allocation, freed with the request). Failures are this member's alone, like a
   bad argument: its peers then wait for it until their timeout or its abort notice. */
static sk_result sk__mvec_prepare(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  size_t n = (size_t)sk_comm_size(q->m->comm), nx = q->m->mw->cfg.check_mismatch ? 6 * n + 4 : 2;
  sk_result r = sk__mvec_check_side(q, "send", o->v.send_counts, o->v.send_displs);
  if (r == SK_OK) r = sk__mvec_check_side(q, "recv", o->v.recv_counts, o->v.recv_displs);
  if (r != SK_OK) return r;
  q->vx = (uint64_t *)sk__alloc(&q->alloc, nx * sizeof(uint64_t) + 4 * n * sizeof(int), 64);
  if (!q->vx) return sk__mreq_fail(q, SK_ERR_OUT_OF_MEMORY, "alltoallv: allocating the counts of %zu members", n);
  q->vint = (int *)(void *)(q->vx + nx);
  return SK_OK;
}

/* The first phase. Every member must call MPI_Ialltoallv equally often, but each sees only its
   own counts, and nothing all members share bounds them; so the rounds come from the largest
   block of any member, exchanged: with the check on it rides the verdict (no extra call), with
   it off it is one MPI_Iallreduce MAX of one integer. The check first swaps the counts
   themselves: member j gets from each i what i sends it, to compare with what it expects. */
static sk_result sk__mvec_begin(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  sk__mcomm *m = q->m;
  int n = sk_comm_size(m->comm), e;
  uint64_t *x = q->vx;
  if (m->mw->cfg.check_mismatch) {
    for (int j = 0; j < n; j++) x[j] = o->v.send_counts[j];
    q->vphase = SK__MV_COUNTS, q->call = "MPI_Ialltoall (alltoallv counts)";
    e = MPI_Ialltoall(x, 1, MPI_UINT64_T, x + n, 1, MPI_UINT64_T, m->mc, &q->mr);
  } else {
    x[0] = sk__mvec_local_max(o, n);
    q->vphase = SK__MV_ROUNDS, q->call = "MPI_Iallreduce (alltoallv rounds)";
    e = MPI_Iallreduce(x, x + 1, 1, MPI_UINT64_T, MPI_MAX, m->mc, &q->mr);
  }
  return e == MPI_SUCCESS ? SK_OK : sk__mreq_mpi(q, e, q->call);
}

/* Counts received: this member's verdict {lowest pair i * size + me whose counts disagree
   (UINT64_MAX: none), what i sends, what this member expects, its largest block}, gathered by
   every member so all pick the same lowest pair (the threads backend's order and message). */
static sk_result sk__mvec_post_verdict(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  sk__mcomm *m = q->m;
  int n = sk_comm_size(m->comm), me = sk_comm_rank(m->comm);
  uint64_t *got = q->vx + n, *mine = q->vx + 2 * (size_t)n, *all = mine + 4;
  mine[0] = UINT64_MAX, mine[1] = mine[2] = 0, mine[3] = sk__mvec_local_max(o, n);
  for (int i = 0; i < n; i++)
    if (got[i] != (uint64_t)o->v.recv_counts[i]) {
      mine[0] = (uint64_t)i * (uint64_t)n + (uint64_t)me, mine[1] = got[i], mine[2] = o->v.recv_counts[i];
      break;
    }
  q->vphase = SK__MV_VERDICT, q->call = "MPI_Iallgather (alltoallv verdict)";
  int e = MPI_Iallgather(mine, 4, MPI_UINT64_T, all, 4, MPI_UINT64_T, m->mc, &q->mr);
  return e == MPI_SUCCESS ? SK_OK : sk__mreq_mpi(q, e, q->call);
}

/* Every verdict gathered: the lowest disagreeing pair fails every member alike (nothing has
   moved); otherwise *most is the largest block of any member. */
static sk_result sk__mvec_verdict(sk__mreq *q, uint64_t *most) {
  sk__mcomm *m = q->m;
  uint64_t n = (uint64_t)sk_comm_size(m->comm);
  const uint64_t *all = q->vx + 2 * n + 4, *bad = NULL;
  *most = 0;
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t *v = all + 4 * i;
    if (v[0] < n * n && (!bad || v[0] < bad[0])) bad = v; /* in range: it indexes wranks below */
    if (v[3] > *most) *most = v[3];
  }
  if (!bad) return SK_OK;
  int from = (int)(bad[0] / n), to = (int)(bad[0] % n);
  char world[64] = "";
  if (m->mc != m->mw->comm) snprintf(world, sizeof world, " (world ranks %d and %d)", m->wranks[from], m->wranks[to]);
  return sk__mreq_fail(q, SK_ERR_MISMATCH,
                       "mismatch: alltoallv: rank %d sends %llu elements to rank %d, which expects %llu from it%s", from,
                       (unsigned long long)bad[1], to, (unsigned long long)bad[2], world);
}

/* Round r of one side into MPI's int arrays: elements [skip, skip + M) of every block (counts
   clamped), displacements relative to the lowest block still moving. Returns that block's
   start plus skip: the element MPI's buffer pointer is at (0 when nothing of this side moves). */
static size_t sk__mvec_round_side(const size_t *counts, const size_t *displs, int n, size_t skip, size_t M, int *ic,
                                  int *id) {
  size_t packed = 0, low = SIZE_MAX;
  for (int j = 0; j < n; j++) {
    size_t at = SK__MV_START(displs, j, packed);
    packed += counts[j];
    if (counts[j] > skip && at < low) low = at;
  }
  packed = 0;
  for (int j = 0; j < n; j++) {
    size_t at = SK__MV_START(displs, j, packed), left = counts[j] > skip ? counts[j] - skip : 0;
    packed += counts[j];
    ic[j] = (int)(left < M ? left : M);     /* M <= INT_MAX */
    id[j] = left ? (int)(at - low) : 0;     /* within INT_MAX: sk__mvec_check_side */
  }
  return low == SIZE_MAX ? 0 : low + skip;
}

/* Posts round q->vround: one MPI_Ialltoallv on the move type. */
static sk_result sk__mvec_round_start(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  sk__mcomm *m = q->m;
  int n = sk_comm_size(m->comm), *sc = q->vint, *sd = sc + n, *rc = sd + n, *rd = rc + n;
  size_t es = sk_dtype_size(o->dtype), skip = q->vround * q->L;
  size_t s0 = sk__mvec_round_side(o->v.send_counts, o->v.send_displs, n, skip, q->L, sc, sd);
  size_t r0 = sk__mvec_round_side(o->v.recv_counts, o->v.recv_displs, n, skip, q->L, rc, rd);
  const unsigned char *s = o->send ? (const unsigned char *)o->send + s0 * es : NULL;
  unsigned char *r = o->recv ? (unsigned char *)o->recv + r0 * es : NULL;
  q->vphase = SK__MV_DATA, q->call = "MPI_Ialltoallv";
  int e = MPI_Ialltoallv(s, sc, sd, q->mt, r, rc, rd, q->mt, m->mc, &q->mr);
  return e == MPI_SUCCESS ? SK_OK : sk__mreq_mpi(q, e, q->call);
}

/* Starts round q->vround, or finishes after the last with the first round's failure. */
static sk_result sk__mvec_round_or_done(sk__mreq *q) {
  if (q->vround < q->vrounds) return sk__mvec_round_start(q);
  q->done = 1;
  return q->verr;
}

/* A data round completed with an error here (with the check off, MPI's truncation: a peer sent
   more than this member expects). The peers go on to the next round, so this member joins the
   remaining rounds too, instead of leaving them to wait until their timeout, and reports the
   first failure after the last. */
static bool sk__mvec_round_failed(sk__mreq *q, int e) {
  if (!sk_coll_vector(q->base.coll.kind) || q->vphase != SK__MV_DATA) return false;
  if (q->verr == SK_OK) q->verr = sk__mreq_mpi(q, e, q->call);
  return true;
}

/* The phase in MPI completed: the next one. Rounds: ceil(most / max_count), the same on every
   member since most is; none when nothing moves anywhere. */
static sk_result sk__mvec_next(sk__mreq *q) {
  uint64_t most = 0;
  sk_result r;
  switch (q->vphase) {
    case SK__MV_COUNTS: return sk__mvec_post_verdict(q);
    case SK__MV_VERDICT:
      if ((r = sk__mvec_verdict(q, &most)) != SK_OK) return r;
      break;
    case SK__MV_ROUNDS: most = q->vx[1]; break;
    default: /* SK__MV_DATA */
      q->vround++;
      return sk__mvec_round_or_done(q);
  }
  q->vround = 0, q->vrounds = (size_t)((most + q->L - 1) / q->L);
  return sk__mvec_round_or_done(q);
}

/* The request became the head of its communicator's queue: stage, then the first step. */
static sk_result sk__mreq_activate(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  sk__mcomm *m = q->m;
  int n = sk_comm_size(m->comm), rank = sk_comm_rank(m->comm);
  size_t es = sk_dtype_size(o->dtype);
  sk_result rr;
  if (q->fp_pending) {
    if (!q->split) /* the split set its own */
      q->fp[0] = o->kind, q->fp[1] = (int64_t)o->count, q->fp[2] = o->dtype, q->fp[3] = o->op, q->fp[4] = o->root;
    if ((rr = sk__mreq_scratch(q, sizeof(int64_t) * SK__M_FP_N * (size_t)n)) != SK_OK) return rr;
    int64_t *all = (int64_t *)(void *)q->tmp;
    memset(all, 0, sizeof(int64_t) * SK__M_FP_N * (size_t)n); /* a short message must not look like a call */
    q->call = q->split ? "MPI_Iallgather (split agreement)" : "MPI_Iallgather (fingerprint)";
    int e = MPI_Iallgather(q->fp, SK__M_FP_N, MPI_INT64_T, all, SK__M_FP_N, MPI_INT64_T, m->mc, &q->mr);
    return e == MPI_SUCCESS ? SK_OK : sk__mreq_mpi(q, e, q->call);
  }
  if (sk_coll_vector(o->kind)) return sk__mvec_begin(q);
  bool ip = sk__m_in_place(q) && o->count > 0;
  if (ip && (o->kind == SK_COLL_ALLTOALL || (o->kind == SK_COLL_REDUCE_SCATTER && !q->gather))) {
    /* MPI_IN_PLACE cannot express these: stage the input (kept apart from gather scratch) */
    size_t bytes = (size_t)n * o->count * es;
    unsigned char *st = (unsigned char *)sk__alloc(&q->alloc, bytes, 64);
    if (!st) return sk__mreq_fail(q, SK_ERR_OUT_OF_MEMORY, "%s: allocating %zu bytes of staging", sk_coll_kind_name(o->kind), bytes);
    memcpy(st, o->send, bytes);
    q->src = st;
  }
  if (o->kind == SK_COLL_BROADCAST && rank == o->root && o->count && o->send != o->recv)
    memcpy(o->recv, o->send, o->count * es);
  if (q->total == 0) {
    q->done = 1;
    return SK_OK;
  }
  return sk__mchunk_start(q);
}

static void sk__mreq_release_scratch(sk__mreq *q) {
  if (q->src && q->src != (const unsigned char *)q->base.coll.send) sk__free(&q->alloc, (void *)q->src);
  q->src = NULL;
  sk__free(&q->alloc, q->tmp);
  q->tmp = NULL, q->tmp_bytes = 0;
  sk__free(&q->alloc, q->vx);
  q->vx = NULL, q->vint = NULL;
}

/* Advances an active collective as far as MPI lets it without blocking. */
static sk_result sk__mreq_advance(sk__mreq *q) {
  while (!q->done) {
    int flag = 0;
    int e = sk__m_test_coll(&q->mr, &flag); /* on an error: flag set, the request freed */
    if (e != MPI_SUCCESS && !sk__mvec_round_failed(q, e)) return sk__mreq_mpi(q, e, q->call ? q->call : "MPI_Test");
    if (!flag) return SK_OK;
    sk_result rr;
    if (q->fp_pending) {
      q->fp_pending = false;
      if ((rr = sk__mfp_check(q)) != SK_OK) return rr;
      if ((rr = sk__mreq_activate(q)) != SK_OK) return rr;
      continue;
    }
    if (sk_coll_vector(q->base.coll.kind)) {
      if ((rr = sk__mvec_next(q)) != SK_OK) return rr;
      continue;
    }
    if ((rr = sk__mchunk_finish(q)) != SK_OK) return rr;
    q->off += q->len;
    if (q->off >= q->total) {
      q->done = 1;
      break;
    }
    if ((rr = sk__mchunk_start(q)) != SK_OK) return rr;
  }
  return SK_OK;
}

static bool sk__m_aborted(sk__mworld *mw);

/* Drives the communicator's queue: the head runs, and when it completes the next starts. */
static void sk__mcomm_progress(sk__mcomm *m) {
  while (m->head) {
    sk__mreq *q = m->head;
    sk_result r = SK_OK;
    if (!q->started) {
      /* Nothing new enters MPI in a failed world, and the notices are read first: a late
         member joining a collective its peers gave up on would let MPI complete it into their
         (abandoned, maybe reused) buffers. */
      if (sk__m_aborted(m->mw)) return;
      q->started = 1;
      r = sk__mreq_activate(q);
    }
    if (r == SK_OK && !q->done) r = sk__mreq_advance(q);
    if (r != SK_OK) q->result = r, q->done = 1;
    if (!q->done) return;
    sk__mreq_release_scratch(q);
    m->head = q->next;
    if (!m->head) m->tail = NULL;
    q->next = NULL;
  }
}

/* ---- abort notices -------------------------------------------------------------------------- */

/* Records where a failure started: the first origin learnt, except that a failed device
   outranks a timeout (a timeout is the symptom; the silent peers behind it are named apart). */
static void sk__m_cause(sk__mworld *mw, int rank, int kind) {
  if (rank < 0 || rank >= mw->size || kind < SK__M_N_FAILED || kind > SK__M_N_TIMEOUT) return;
  if (mw->cause_rank < 0 || (mw->cause_kind == SK__M_N_TIMEOUT && kind == SK__M_N_FAILED))
    mw->cause_rank = rank, mw->cause_kind = kind;
}

/* Tells every other process of the world that the world failed here (once; from a device
   thread): FAILED or TIMEOUT when it started here, else ECHO with the origin learnt. An echo
   also says "alive", which is how the others tell a silent peer from a busy one. The send
   requests are kept and completed at teardown: their buffer must outlive them. */
static void sk__m_notify(sk__mworld *mw) {
  if (mw->abort_sent) return;
  mw->abort_sent = true;
  if (mw->cause_rank < 0) sk__m_cause(mw, mw->rank, SK__M_N_FAILED); /* sk_world_abort or a device error here */
  int *o = mw->nout;
  o[0] = mw->rank, o[1] = mw->cause_rank == mw->rank ? mw->cause_kind : SK__M_N_ECHO;
  o[2] = mw->cause_rank, o[3] = mw->cause_kind;
  for (int r = 0; r < mw->size; r++)
    if (r != mw->rank && MPI_Isend(o, 4, MPI_INT, r, SK__M_ABORT_TAG, mw->abort_comm, &mw->ntx[r]) != MPI_SUCCESS)
      mw->ntx[r] = MPI_REQUEST_NULL;
}

/* Takes in the notices that arrived, without waiting: each marks its sender alive, may teach
   the failure's origin, and aborts the world here. */
static void sk__m_poll_notices(sk__mworld *mw) {
  while (mw->abort_rx != MPI_REQUEST_NULL) {
    int flag = 0;
    if (MPI_Test(&mw->abort_rx, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) return;
    int from = mw->nin[0];
    if (from >= 0 && from < mw->size && from != mw->rank && !mw->heard[from]) mw->heard[from] = 1, mw->nheard++;
    if (mw->nin[1] == SK__M_N_ECHO)
      sk__m_cause(mw, mw->nin[2], mw->nin[3]);
    else
      sk__m_cause(mw, from, mw->nin[1]);
    sk_world_abort(mw->w);
    if (mw->nheard < mw->size - 1 &&
        MPI_Irecv(mw->nin, 4, MPI_INT, MPI_ANY_SOURCE, SK__M_ABORT_TAG, mw->abort_comm, &mw->abort_rx) != MPI_SUCCESS)
      mw->abort_rx = MPI_REQUEST_NULL;
  }
}

/* True when the world is aborted, here or by a peer's notice; this process's notice then goes
   out. */
static bool sk__m_aborted(sk__mworld *mw) {
  sk__m_poll_notices(mw);
  if (!sk_world_aborted(mw->w)) return false;
  sk__m_notify(mw);
  return true;
}

/* How long a failed world listens for its peers' notices. An alive peer inside shardkit answers
   at its next poll, within moments even oversubscribed; the cap keeps "timeout plus a little". */
static uint32_t sk__m_grace_ms(uint32_t timeout_ms) {
  uint32_t ms = timeout_ms / 4;
  return ms < 200 ? 200 : ms > 2000 ? 2000 : ms;
}

static bool sk__m_is_silent(const sk__mworld *mw, int wr) {
  return wr >= 0 && wr < mw->size && wr != mw->rank && !mw->heard[wr];
}

/* Writes into buf the world ranks of the members of m (only comm rank `only` when >= 0) other
   than this one that sent no notice, after listening for them up to the grace period when
   `listen` (once per world: later calls report what is known); returns how many. */
static int sk__m_silent(sk__mcomm *m, int only, bool listen, char *buf, size_t cap) {
  sk__mworld *mw = m->mw;
  listen = listen && !mw->listened;
  uint64_t end = sk_now_ns() + (listen ? sk__m_grace_ms(sk_world_config(mw->w)->timeout_ms) * 1000000ull : 0);
  int n, lo = only >= 0 ? only : 0, hi = only >= 0 ? only + 1 : sk_comm_size(m->comm);
  for (;;) {
    sk__m_poll_notices(mw);
    n = 0;
    for (int i = lo; i < hi; i++) n += sk__m_is_silent(mw, m->wranks[i]);
    if (n == 0 || sk_now_ns() >= end) break;
    sched_yield();
  }
  if (n && listen) mw->listened = true; /* a full grace spent: the silent ones will not answer */
  size_t len = 0;
  buf[0] = 0;
  for (int i = lo; i < hi && len + 16 < cap; i++)
    if (sk__m_is_silent(mw, m->wranks[i]))
      len += (size_t)snprintf(buf + len, cap - len, "%s%d", len ? ", " : "", m->wranks[i]);
  return n;
}

static const char *sk__mreq_name(const sk__mreq *q) { return q->split ? "split" : sk_coll_kind_name(q->base.coll.kind); }

/* A call that found its world aborted: names where the failure started and, when that was a
   timeout, the members that stay silent (hung, dead or gone: those the timeout waited for),
   listening for them first when `listen` (never from calls that must not block). */
static sk_result sk__m_abort_msg(sk__mreq *q, bool listen) {
  sk__mworld *mw = q->m->mw;
  sk_comm *c = q->m->comm;
  int who = mw->cause_rank;
  bool p2p = q->base.coll.kind == SK_COLL_SEND || q->base.coll.kind == SK_COLL_RECV;
  if (who < 0 || who == mw->rank)
    return sk_comm_set_error(c, SK_ERR_ABORTED, "%s: the world was aborted here, on world rank %d (%s)", sk__mreq_name(q),
                             mw->rank, mw->cause_kind == SK__M_N_TIMEOUT ? "a call timed out" : "sk_world_abort or a device error");
  if (mw->cause_kind == SK__M_N_FAILED)
    return sk_comm_set_error(c, SK_ERR_ABORTED,
                             "%s: the world was aborted: world rank %d failed (its device returned an error or called "
                             "sk_world_abort)",
                             sk__mreq_name(q), who);
  char silent[128];
  int ns = sk__m_silent(q->m, p2p ? q->base.coll.root : -1, listen, silent, sizeof silent);
  return sk_comm_set_error(c, SK_ERR_ABORTED, "%s: the world was aborted: world rank %d timed out; %s%s%s", sk__mreq_name(q),
                           who, ns ? "silent (hung, dead or gone): world rank " : "no member of this call is silent",
                           silent, ns ? "" : " (mismatched calls?)");
}

/* This call timed out: the world fails, the notice goes out, and the members that do not answer
   it within the grace period are named as the ones it waited for. */
static sk_result sk__m_timeout(sk__mreq *q) {
  sk__mworld *mw = q->m->mw;
  sk_comm *c = q->m->comm;
  bool p2p = q->base.coll.kind == SK_COLL_SEND || q->base.coll.kind == SK_COLL_RECV;
  sk__m_cause(mw, mw->rank, SK__M_N_TIMEOUT);
  sk_world_abort(mw->w);
  sk__m_notify(mw);
  char silent[128];
  int ns = sk__m_silent(q->m, p2p ? q->base.coll.root : -1, true, silent, sizeof silent);
  if (ns)
    sk_comm_set_error(c, SK_ERR_TIMEOUT,
                      "%s: timed out after %u ms waiting for world rank %s (silent: hung, dead or gone; the MPI request "
                      "stays in flight)",
                      sk__mreq_name(q), (unsigned)sk_world_config(mw->w)->timeout_ms, silent);
  else
    sk_comm_set_error(c, SK_ERR_TIMEOUT,
                      "%s: timed out after %u ms; every member answered the abort notice, so they wait in other calls "
                      "(mismatched calls? check_mismatch names them)",
                      sk__mreq_name(q), (unsigned)sk_world_config(mw->w)->timeout_ms);
  sk_world_fail(mw->w, SK_ERR_TIMEOUT, sk_comm_error_message(c));
  return SK_ERR_TIMEOUT;
}

/* ---- hooks: requests ------------------------------------------------------------------------ */

static void sk__mreq_release(sk__mreq *q) {
  sk__mreq_release_scratch(q);
  sk__free(&q->alloc, q->preq);
  sk__free(&q->alloc, q->pst);
  sk__free(&q->alloc, q);
}

/* Whether MPI still holds q: then its memory must outlive it. */
static bool sk__mreq_in_mpi(const sk__mreq *q) {
  if (q->done) return false;
  if (q->base.coll.kind == SK_COLL_SEND || q->base.coll.kind == SK_COLL_RECV) return q->np > 0;
  return q->started != 0;
}

/* Takes q off its communicator's live list and queue. */
static void sk__mreq_unlink(sk__mreq *q) {
  sk__mcomm *m = q->m;
  if (q->lprev)
    q->lprev->lnext = q->lnext;
  else if (m->live == q)
    m->live = q->lnext;
  if (q->lnext) q->lnext->lprev = q->lprev;
  q->lprev = q->lnext = NULL;
  sk__mreq *prev = NULL, *it = m->head;
  while (it && it != q) prev = it, it = it->next;
  if (it) {
    if (prev)
      prev->next = q->next;
    else
      m->head = q->next;
    if (m->tail == q) m->tail = prev;
  }
  q->next = NULL;
}

/* A receive still posted when its request is dropped (failed world) is cancelled, so MPI never
   writes into a buffer its owner has moved on from; sends and collectives cannot be taken back. */
static void sk__mp2p_cancel(sk__mreq *q) {
  if (q->base.coll.kind != SK_COLL_RECV || q->done || q->np == 0) return;
  for (int j = 0; j < q->np; j++)
    if (q->preq[j] != MPI_REQUEST_NULL) MPI_Cancel(&q->preq[j]);
  int flag = 0;
  for (int i = 0; i < 64 && !flag; i++) /* cancelling an unmatched receive is local: at once */
    if (MPI_Testall(q->np, q->preq, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) flag = 1;
  if (flag) q->done = 1;
}

/* Frees q, or, when MPI still holds it (timeout or abort), hands it to the orphan list that
   shardkit's MPI_Finalize frees: freeing it now would let MPI write into freed memory. */
static void sk__mreq_free(sk_request *base) {
  sk__mreq *q = (sk__mreq *)base;
  sk__mcomm *m = q->m;
  sk__mreq_unlink(q);
  sk__mp2p_cancel(q);
  if (sk__mreq_in_mpi(q)) {
    m->mw->abandoned = true;
    q->m = NULL;
    q->lnext = sk__m_orphans;
    sk__m_orphans = q;
    return;
  }
  sk__mreq_release(q);
}

static sk__mreq *sk__mreq_new(sk__mcomm *m, const sk_coll *op) {
  sk__mreq *q = (sk__mreq *)sk__calloc(m->mw->alloc, sizeof *q, 64);
  if (!q) return NULL;
  q->base.comm = m->comm;
  q->base.coll = *op;
  q->base.free_fn = sk__mreq_free;
  q->m = m;
  q->alloc = *m->mw->alloc;
  q->mr = MPI_REQUEST_NULL;
  q->lnext = m->live;
  if (m->live) m->live->lprev = q;
  m->live = q;
  return q;
}

/* " (world rank N)" after a rank of a sub-communicator; nothing on the world's own. */
static const char *sk__m_wr(const sk__mcomm *m, int rank, char *buf, size_t cap) {
  buf[0] = 0;
  if (m->mc != m->mw->comm && rank >= 0 && rank < sk_comm_size(m->comm)) snprintf(buf, cap, " (world rank %d)", m->wranks[rank]);
  return buf;
}

/* Point to point: every chunk is posted now (MPI keeps pairs in order). */
static sk_result sk__mp2p_post(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  size_t L = q->m->mw->max_count, es = sk_dtype_size(o->dtype);
  size_t nchunks = o->count == 0 ? 1 : (o->count + L - 1) / L;
  if (nchunks > (size_t)INT_MAX) return sk__mreq_fail(q, SK_ERR_INVALID_ARGUMENT, "%s: too many chunks", sk_coll_kind_name(o->kind));
  q->preq = (MPI_Request *)sk__alloc(&q->alloc, sizeof(MPI_Request) * nchunks, 64);
  q->pst = (MPI_Status *)sk__alloc(&q->alloc, sizeof(MPI_Status) * nchunks, 64);
  if (!q->preq || !q->pst) return sk__mreq_fail(q, SK_ERR_OUT_OF_MEMORY, "%s: allocating a request", sk_coll_kind_name(o->kind));
  q->mt = sk__m_move_type(o->dtype);
  for (size_t j = 0; j < nchunks; j++) {
    size_t off = j * L, len = o->count - off < L ? o->count - off : L;
    int e;
    if (o->kind == SK_COLL_SEND)
      e = MPI_Isend((const unsigned char *)o->send + off * es, (int)len, q->mt, o->root, SK__M_P2P_TAG, q->m->mc, &q->preq[j]);
    else
      e = MPI_Irecv((unsigned char *)o->recv + off * es, (int)len, q->mt, o->root, SK__M_P2P_TAG, q->m->mc, &q->preq[j]);
    if (e != MPI_SUCCESS) {
      /* the posted ones stay in flight (q is orphaned by the caller's free) */
      q->np = (int)j;
      return sk__mreq_mpi(q, e, o->kind == SK_COLL_SEND ? "MPI_Isend" : "MPI_Irecv");
    }
  }
  q->np = (int)nchunks;
  return SK_OK;
}

/* A finished receive must have got exactly what it asked for; MPI reports a longer message as
   truncation and lets a shorter one pass, so both are checked here, naming both sides. */
static sk_result sk__mp2p_test(sk__mreq *q) {
  const sk_coll *o = &q->base.coll;
  char me[32], peer[32];
  int flag = 0, e = MPI_Testall(q->np, q->preq, &flag, q->pst), cls = 0;
  if (e != MPI_SUCCESS) {
    for (int j = 0; j < q->np; j++)
      if (q->pst[j].MPI_ERROR != MPI_SUCCESS && q->pst[j].MPI_ERROR != MPI_ERR_PENDING) e = q->pst[j].MPI_ERROR;
    q->done = 1;
    MPI_Error_class(e, &cls);
    if (o->kind == SK_COLL_RECV && cls == MPI_ERR_TRUNCATE)
      return q->result = sk__mreq_fail(q, SK_ERR_MISMATCH,
                                       "mismatch: recv: rank %d%s receives %zu x %s from rank %d%s, which sent more "
                                       "(MPI_Irecv: MPI_ERR_TRUNCATE)",
                                       sk_comm_rank(q->m->comm), sk__m_wr(q->m, sk_comm_rank(q->m->comm), me, sizeof me), o->count,
                                       sk_dtype_name(o->dtype), o->root, sk__m_wr(q->m, o->root, peer, sizeof peer));
    return q->result = sk__mreq_mpi(q, e, o->kind == SK_COLL_SEND ? "MPI_Isend" : "MPI_Irecv");
  }
  if (!flag) return SK_OK;
  q->done = 1;
  if (o->kind == SK_COLL_RECV) {
    size_t got = 0;
    for (int j = 0; j < q->np; j++) {
      int cnt = 0;
      MPI_Get_count(&q->pst[j], q->mt, &cnt);
      got += cnt == MPI_UNDEFINED ? 0 : (size_t)cnt;
    }
    if (got != o->count)
      q->result = sk__mreq_fail(q, SK_ERR_MISMATCH, "mismatch: recv: rank %d%s receives %zu x %s from rank %d%s, which sent %zu",
                                sk_comm_rank(q->m->comm), sk__m_wr(q->m, sk_comm_rank(q->m->comm), me, sizeof me), o->count,
                                sk_dtype_name(o->dtype), o->root, sk__m_wr(q->m, o->root, peer, sizeof peer), got);
  }
  return q->result;
}

/* One non-blocking look at q: drives its communicator's queue (or its Send/Recv). */
static void sk__mreq_poll(sk__mreq *q) {
  if (q->done) return;
  if (q->base.coll.kind == SK_COLL_SEND || q->base.coll.kind == SK_COLL_RECV)
    sk__mp2p_test(q);
  else
    sk__mcomm_progress(q->m);
}

static sk_result sk__mreq_outcome(sk__mreq *q) {
  if (q->result != SK_OK) sk_comm_set_error(q->m->comm, q->result, "%s", q->msg[0] ? q->msg : sk_result_string(q->result));
  return q->result;
}

/* Appends a planned collective to its communicator's queue and starts it if it is first. */
static void sk__mreq_enqueue(sk__mcomm *m, sk__mreq *q) {
  if (m->tail)
    m->tail->next = q;
  else
    m->head = q;
  m->tail = q;
  sk__mcomm_progress(m);
}

static sk_result sk__mpi_start(sk_comm *c, const sk_coll *op, sk_request **req) {
  sk__mcomm *m = SK__MCOMM(c);
  *req = NULL;
  sk__mreq *q = sk__mreq_new(m, op);
  if (!q) return sk_comm_set_error(c, SK_ERR_OUT_OF_MEMORY, "%s: allocating a request", sk_coll_kind_name(op->kind));
  *req = &q->base;
  if (op->kind == SK_COLL_SEND || op->kind == SK_COLL_RECV) {
    if (sk__m_aborted(m->mw)) { /* as for collectives: never post into a failed world */
      q->done = 1;
      sk_result r = sk__m_abort_msg(q, false);
      sk__mreq_free(&q->base);
      *req = NULL;
      return r;
    }
    sk_result r = sk__mp2p_post(q);
    if (r != SK_OK) {
      q->done = q->np == 0;
      sk_comm_set_error(c, r, "%s", q->msg);
      sk__mreq_free(&q->base);
      *req = NULL;
      return r;
    }
    return SK_OK;
  }
  sk__mreq_plan(q);
  if (sk_coll_vector(op->kind)) {
    sk_result r = sk__mvec_prepare(q);
    if (r != SK_OK) { /* nothing posted: q is not in MPI */
      sk_comm_set_error(c, r, "%s", q->msg);
      sk__mreq_free(&q->base);
      *req = NULL;
      return r;
    }
  }
  sk__mreq_enqueue(m, q);
  return SK_OK;
}

static sk_result sk__mpi_test(sk_request *base, bool *done) {
  sk__mreq *q = (sk__mreq *)base;
  sk__mreq_poll(q);
  *done = q->done != 0;
  if (*done) return sk__mreq_outcome(q);
  if (sk__m_aborted(q->m->mw)) { /* it can never complete now: report, and its free orphans it */
    *done = true;
    return sk__m_abort_msg(q, false);
  }
  return SK_OK;
}

static sk_result sk__mpi_wait(sk_request *base) {
  sk__mreq *q = (sk__mreq *)base;
  sk__mworld *mw = q->m->mw;
  uint64_t start = sk_now_ns(), now, deadline = start + (uint64_t)sk_world_config(mw->w)->timeout_ms * 1000000ull;
  for (;;) {
    sk__mreq_poll(q);
    if (q->done) return sk__mreq_outcome(q);
    if (sk__m_aborted(mw)) return sk__m_abort_msg(q, true);
    now = sk_now_ns();
    if (now >= deadline) return sk__m_timeout(q);
    if (!mw->spin || now - start > SK__M_SPIN_NS) sched_yield();
  }
}

/* ---- hooks: world and communicators --------------------------------------------------------- */

static void sk__m_types_fini(void) {
  if (sk__m_f16 != MPI_DATATYPE_NULL) MPI_Type_free(&sk__m_f16);
  if (sk__m_bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&sk__m_bf16);
  if (sk__m_op_min != MPI_OP_NULL) MPI_Op_free(&sk__m_op_min);
  if (sk__m_op_max != MPI_OP_NULL) MPI_Op_free(&sk__m_op_max);
  if (sk__m_op_sum8 != MPI_OP_NULL) MPI_Op_free(&sk__m_op_sum8);
}

static int sk__m_types_init(void) {
  if (sk__m_f16 != MPI_DATATYPE_NULL) return MPI_SUCCESS;
  int e = MPI_Type_contiguous(2, MPI_BYTE, &sk__m_f16);
  if (e == MPI_SUCCESS) e = MPI_Type_commit(&sk__m_f16);
  if (e == MPI_SUCCESS) e = MPI_Type_contiguous(2, MPI_BYTE, &sk__m_bf16);
  if (e == MPI_SUCCESS) e = MPI_Type_commit(&sk__m_bf16);
  if (e == MPI_SUCCESS) e = MPI_Op_create(sk__m_min_fn, 1, &sk__m_op_min);
  if (e == MPI_SUCCESS) e = MPI_Op_create(sk__m_max_fn, 1, &sk__m_op_max);
  if (e == MPI_SUCCESS) e = MPI_Op_create(sk__m_sum8_fn, 1, &sk__m_op_sum8);
  if (e != MPI_SUCCESS) sk__m_types_fini();
  return e;
}

static sk_result sk__m_fail_mpi(sk_error *err, int e, const char *call) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(e, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", e);
  return sk__fail(err, SK_ERR_BACKEND, "mpi backend: %s: %s", call, text);
}

/* Polls r (a request MPI completes on its own, e.g. a cancelled receive or an eager send) for up
   to ms; true once it is complete, and then its buffer may go. */
static bool sk__m_settle(int n, MPI_Request *r, uint32_t ms) {
  uint64_t end = sk_now_ns() + (uint64_t)ms * 1000000ull;
  for (;;) {
    int flag = 0;
    if (MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return false;
    if (flag) return true;
    if (sk_now_ns() >= end) return false;
    sched_yield();
  }
}

/* Finalises MPI when shardkit initialised it and its last world is gone, but only once every
   process of the job has got here too (a polled MPI_Ibarrier, at most bound_ms): MPI_Finalize
   waits for all of them, so a stuck peer would hold it forever. Past the bound MPI stays
   initialised and this returns false: the job has failed, and the process should exit with a
   non-zero status (mpirun then ends the others). Requests orphaned by failed worlds are freed
   after MPI_Finalize, when MPI can no longer write into them. */
static bool sk__m_finalize(uint32_t bound_ms) {
  int fin = 0, flag = 0, e = MPI_SUCCESS;
  MPI_Finalized(&fin);
  if (!sk__m_initialised || fin) return true;
  if (sk__m_fin_req == MPI_REQUEST_NULL && sk__m_fin_comm != MPI_COMM_NULL) /* else: one left pending before */
    e = MPI_Ibarrier(sk__m_fin_comm, &sk__m_fin_req);
  uint64_t end = sk_now_ns() + (uint64_t)bound_ms * 1000000ull;
  while (e == MPI_SUCCESS && sk__m_fin_req != MPI_REQUEST_NULL) {
    e = sk__m_test_coll(&sk__m_fin_req, &flag);
    if (flag) break;
    if (sk_now_ns() >= end) return false;
    sched_yield();
  }
  if (e != MPI_SUCCESS) return false;
  if (sk__m_fin_comm != MPI_COMM_NULL) MPI_Comm_free(&sk__m_fin_comm);
  MPI_Finalize();
  while (sk__m_orphans) {
    sk__mreq *q = sk__m_orphans;
    sk__m_orphans = q->lnext;
    sk__mreq_release(q);
  }
  while (sk__m_graves) {
    sk__mworld *mw = sk__m_graves;
    sk__m_graves = mw->grave_next;
    sk__free(&mw->alloc_copy, mw->ntx);
    sk__free(&mw->alloc_copy, mw);
  }
  return true;
}

/* Whether every process of the world reached teardown without a failure (an allreduce on the
   notice communicator, polled up to bound_ms). Only then is no message still on its way to the
   world's communicators, so only then may they be freed: Open MPI hands a message that arrives
   for a freed communicator to the next one that gets the same id, and derails it. */
static bool sk__m_quiet(sk__mworld *mw, bool failed, uint32_t bound_ms, bool *pending) {
  int flag = 0, e;
  mw->td_in = !failed;
  e = MPI_Iallreduce(&mw->td_in, &mw->td_out, 1, MPI_INT, MPI_MIN, mw->abort_comm, &mw->td_req);
  uint64_t end = sk_now_ns() + (uint64_t)bound_ms * 1000000ull;
  while (e == MPI_SUCCESS && !flag) {
    if ((e = sk__m_test_coll(&mw->td_req, &flag)) != MPI_SUCCESS || flag) break;
    if (sk_now_ns() >= end) {
      *pending = true; /* MPI may still write td_out */
      return false;
    }
    sched_yield();
  }
  return e == MPI_SUCCESS && mw->td_out == 1;
}

/* Frees a world's MPI state; every step is bounded. The pending notice receive is cancelled (a
   local act), the notices sent get a grace period to leave, and memory MPI may still touch is
   not freed. The world's communicators are freed only when every process ended healthy (see
   sk__m_quiet); otherwise those two MPI objects stay allocated. A failed world waits for its
   peers briefly (the healthy ones are tearing down too; a stuck one never comes), a healthy one
   up to its timeout. `created` false: a failed sk_world_create (no traffic yet), which also
   leaves MPI initialised so that a retry can work. */
static bool sk__m_world_free(sk_world *w, sk__mworld *mw, bool created) {
  const sk_allocator *a = mw->alloc;
  if (mw->ntx) sk__m_poll_notices(mw); /* a peer's failure that came meanwhile */
  bool failed = sk_world_aborted(w), rx_done = true, tx_done = true, td_pending = false;
  uint32_t grace = sk__m_grace_ms(sk_world_config(w)->timeout_ms), bound = failed ? grace : sk_world_config(w)->timeout_ms;
  bool quiet = !created || (mw->abort_comm != MPI_COMM_NULL && sk__m_quiet(mw, failed, bound, &td_pending));
  if (mw->abort_rx != MPI_REQUEST_NULL) {
    MPI_Cancel(&mw->abort_rx);
    rx_done = sk__m_settle(1, &mw->abort_rx, grace);
  }
  if (mw->ntx) tx_done = sk__m_settle(mw->size, mw->ntx, grace);
  if (quiet && mw->abort_comm != MPI_COMM_NULL) MPI_Comm_free(&mw->abort_comm);
  if (quiet && mw->comm != MPI_COMM_NULL && !mw->abandoned) MPI_Comm_free(&mw->comm);
  if (rx_done && tx_done && !td_pending) {
    sk__free(a, mw->ntx);
    sk__free(a, mw);
  } else { /* MPI may still read or write them: they go when MPI is finalised */
    mw->alloc_copy = *a;
    mw->grave_next = sk__m_graves;
    sk__m_graves = mw;
  }
  if (!created) {
    sk__m_live--;
    return true;
  }
  if (--sk__m_live > 0) return true;
  sk__m_types_fini();
  if (sk__m_finalize(bound)) return true;
  sk__log(&sk_world_config(w)->logger, SK_LOG_ERROR, SK_LOG_TEARDOWN, -1,
          "mpi backend: MPI_Finalize skipped: not every process reached it within %u ms (a peer is hung or "
          "gone); MPI stays initialised: exit with a non-zero status",
          (unsigned)bound);
  return false;
}

/* SK_ERR_TIMEOUT when the last world's bounded teardown gave up on MPI_Finalize. */
static sk_result sk__mpi_world_destroy(sk_world *w, void *state) {
  return sk__m_world_free(w, (sk__mworld *)state, true) ? SK_OK : SK_ERR_TIMEOUT;
}

/* MPI_Init_thread when nobody has, plus the duplicate of MPI_COMM_WORLD that the barrier before
   MPI_Finalize runs on (made now: every process is here, and a later dup could block). */
static sk_result sk__m_init_mpi(sk_error *err) {
  int inited = 0, fin = 0, provided = 0, e;
  MPI_Finalized(&fin);
  if (fin)
    return sk__fail(err, SK_ERR_INVALID_USAGE,
                    "mpi backend: MPI was already finalised (it cannot restart): keep one MPI world alive while "
                    "creating the next, or initialise MPI yourself");
  MPI_Initialized(&inited);
  if (inited) return SK_OK;
  if ((e = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS)
    return sk__m_fail_mpi(err, e, "MPI_Init_thread");
  sk__m_initialised = 1;
  if ((e = MPI_Comm_dup(MPI_COMM_WORLD, &sk__m_fin_comm)) != MPI_SUCCESS) return sk__m_fail_mpi(err, e, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(sk__m_fin_comm, MPI_ERRORS_RETURN);
  return SK_OK;
}

/* The world's MPI objects, all collective over the base communicator (every process takes part
   in the same calls), each with MPI_ERRORS_RETURN so every error comes back as a code. */
static sk_result sk__m_world_mpi(sk__mworld *mw, MPI_Comm base, sk_error *err) {
  int e;
  if ((e = MPI_Comm_dup(base, &mw->comm)) != MPI_SUCCESS) return sk__m_fail_mpi(err, e, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(mw->comm, MPI_ERRORS_RETURN);
  if ((e = MPI_Comm_dup(mw->comm, &mw->abort_comm)) != MPI_SUCCESS) return sk__m_fail_mpi(err, e, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(mw->abort_comm, MPI_ERRORS_RETURN);
  if ((e = sk__m_types_init()) != MPI_SUCCESS) return sk__m_fail_mpi(err, e, "creating f16/bf16 types and ops");
  MPI_Comm_rank(mw->comm, &mw->rank);
  e = MPI_Irecv(mw->nin, 4, MPI_INT, MPI_ANY_SOURCE, SK__M_ABORT_TAG, mw->abort_comm, &mw->abort_rx);
  if (e != MPI_SUCCESS) return sk__m_fail_mpi(err, e, "MPI_Irecv (abort notices)");
  MPI_Comm node; /* spin only when this node has a core per process */
  int local = mw->size;
  if (MPI_Comm_split_type(mw->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  mw->spin = cores > 0 && local <= cores;
  return SK_OK;
}

static sk_result sk__mpi_world_create(sk_world *w, const sk_world_desc *desc, void **state, int *ndevices, sk_error *err) {
  const sk_mpi_config *cfg = (const sk_mpi_config *)desc->backend_config;
  sk_result r = sk__m_init_mpi(err);
  if (r != SK_OK) return r;
  sk__m_live++;
  sk__mworld *mw = (sk__mworld *)sk__calloc(&sk_world_config(w)->allocator, sizeof *mw, 64);
  if (!mw) {
    sk__m_live--;
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the MPI world");
  }
  mw->alloc = &sk_world_config(w)->allocator;
  mw->w = w;
  mw->comm = mw->abort_comm = MPI_COMM_NULL;
  mw->abort_rx = mw->td_req = MPI_REQUEST_NULL;
  mw->cause_rank = -1;
  if (cfg) mw->cfg = *cfg;
  mw->max_count = mw->cfg.max_count && mw->cfg.max_count < (size_t)INT_MAX ? mw->cfg.max_count : (size_t)INT_MAX;
  MPI_Comm base = cfg && cfg->comm ? *(const MPI_Comm *)cfg->comm : MPI_COMM_WORLD;
  int size = 0, e = MPI_Comm_size(base, &size);
  if (e != MPI_SUCCESS) {
    r = sk__m_fail_mpi(err, e, "MPI_Comm_size");
  } else if (desc->ndevices != 0 && desc->ndevices != size) {
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                 "desc.ndevices = %d but the MPI communicator has %d processes (one device per process; 0 = its size)",
                 desc->ndevices, size);
  } else if (size > SK_MAX_DEVICES) {
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the MPI communicator has %d processes; shardkit allows %d", size,
                 SK_MAX_DEVICES);
  }
  if (r == SK_OK) { /* notices: a send request per peer, the payload, a heard flag per peer */
    mw->size = size;
    mw->ntx = (MPI_Request *)sk__alloc(mw->alloc, sizeof(MPI_Request) * (size_t)size + 4 * sizeof(int) + (size_t)size, 64);
    if (!mw->ntx) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the abort-notice state of %d processes", size);
  }
  if (r == SK_OK) {
    for (int i = 0; i < size; i++) mw->ntx[i] = MPI_REQUEST_NULL;
    mw->nout = (int *)(void *)(mw->ntx + size);
    mw->heard = (unsigned char *)(mw->nout + 4);
    memset(mw->heard, 0, (size_t)size);
    r = sk__m_world_mpi(mw, base, err);
  }
  if (r != SK_OK) {
    sk__m_world_free(w, mw, false);
    return r;
  }
  *state = mw;
  *ndevices = size;
  return SK_OK;
}

/* The member state; ptrs and wranks share one block (one allocation to fail or free). */
static sk__mcomm *sk__mcomm_new(sk__mworld *mw, sk_comm *c, MPI_Comm mc, bool owns, int size) {
  sk__mcomm *m = (sk__mcomm *)sk__calloc(mw->alloc, sizeof *m, 64);
  if (!m) return NULL;
  m->ptrs = (const void **)sk__alloc(mw->alloc, (sizeof(void *) + sizeof(int)) * (size_t)size, 64);
  if (!m->ptrs) {
    sk__free(mw->alloc, m);
    return NULL;
  }
  m->wranks = (int *)(void *)(m->ptrs + size);
  for (int i = 0; i < size; i++) m->wranks[i] = i;
  m->mw = mw, m->comm = c, m->mc = mc, m->owns = owns, m->size = size;
  return m;
}

static sk_result sk__mpi_comm_init_rank(sk_comm *c, int rank, void **state, sk_error *err) {
  sk__mworld *mw = SK__MWORLD(sk_comm_world(c));
  if (rank != mw->rank)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "rank %d: this process is rank %d of the MPI world (one device per process: pass its own rank)",
                    rank, mw->rank);
  if (mw->claimed) return sk__fail(err, SK_ERR_INVALID_USAGE, "rank %d already joined the world in this process", rank);
  sk__mcomm *m = sk__mcomm_new(mw, c, mw->comm, false, mw->size);
  if (!m) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the communicator of rank %d", rank);
  mw->claimed = true;
  *state = m;
  return SK_OK;
}

/* Its requests still outstanding are waited for (bounded by the timeout, as every wait; not at
   all once the world failed) and freed, so none leaks: handles the caller still holds become
   invalid. Those MPI still holds after a failure go to the orphan list. */
static void sk__mpi_comm_destroy(sk_comm *c, void *state) {
  sk__mcomm *m = (sk__mcomm *)state;
  sk__mworld *mw = m->mw;
  for (sk__mreq *q = m->live, *next; q; q = next) {
    next = q->lnext; /* read first: freeing unlinks q (or moves it to the orphans) */
    if (!q->done && !sk_world_aborted(mw->w)) sk__mpi_wait(&q->base);
    sk__mreq_free(&q->base);
  }
  /* a failed world's peers may still send on it (see sk__m_quiet): then it stays allocated */
  if (m->owns && !mw->abandoned && !sk_world_aborted(mw->w)) MPI_Comm_free(&m->mc);
  if (!m->owns) mw->claimed = false;
  (void)c;
  sk__free(mw->alloc, (void *)m->ptrs);
  sk__free(mw->alloc, m);
}

/* The split's agreement: a fingerprint exchange of its own kind (SK__M_FP_SPLIT, with each
   member's color and key) through the polled queue, whatever check_mismatch says. A missing
   member then becomes a timeout or abort instead of a hang in MPI_Comm_split, and a member in a
   user collective a mismatch naming both calls (with the check off there, its data is no
   split's fingerprint, or MPI reports truncation). */
static sk_result sk__m_split_agree(sk__mcomm *pm, int color, int key) {
  sk_coll op;
  memset(&op, 0, sizeof op);
  op.kind = SK_COLL_ALLGATHER, op.dtype = SK_I64; /* count 0: the fingerprint is the whole op */
  sk__mreq *q = sk__mreq_new(pm, &op);
  if (!q) {
    sk_world_fail(sk_comm_world(pm->comm), SK_ERR_OUT_OF_MEMORY, "split: out of memory"); /* peers would wait for us */
    return sk_comm_set_error(pm->comm, SK_ERR_OUT_OF_MEMORY, "split: allocating a request");
  }
  sk__mreq_plan(q);
  q->split = true, q->fp_pending = true;
  q->fp[0] = SK__M_FP_SPLIT, q->fp[1] = color, q->fp[2] = key, q->fp[3] = q->fp[4] = 0;
  sk__mreq_enqueue(pm, q);
  sk_request *req = &q->base;
  sk_result r = sk_wait(&req, NULL);
  if (r == SK_ERR_OUT_OF_MEMORY) sk_world_fail(sk_comm_world(pm->comm), r, sk_comm_error_message(pm->comm));
  return r;
}

/* Split: the agreement, then MPI_Comm_split (blocking, but every member has arrived). */
static sk_result sk__mpi_comm_split(sk_comm *parent, int color, int key, sk_comm *child, void **state, int *rank_out,
                                    int *size_out) {
  sk__mcomm *pm = SK__MCOMM(parent);
  sk__mworld *mw = pm->mw;
  sk_result r = sk__m_split_agree(pm, color, key);
  if (r != SK_OK) return r;
  MPI_Comm nc = MPI_COMM_NULL;
  int e = MPI_Comm_split(pm->mc, color == SK_UNDEFINED ? MPI_UNDEFINED : color, key, &nc);
  if (e != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(e, text, &len);
    return sk_comm_set_error(parent, SK_ERR_BACKEND, "split: MPI_Comm_split: %s", text);
  }
  if (nc == MPI_COMM_NULL) return SK_OK; /* SK_UNDEFINED: *state stays NULL */
  MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(nc, &rank);
  MPI_Comm_size(nc, &size);
  sk__mcomm *m = sk__mcomm_new(mw, child, nc, true, size);
  if (!m) { /* the peers have the communicator and may use it: fail the world, keep nc (see sk__m_quiet) */
    sk_world_fail(sk_comm_world(parent), SK_ERR_OUT_OF_MEMORY, "split: out of memory");
    return sk_comm_set_error(parent, SK_ERR_OUT_OF_MEMORY, "split: allocating the member state");
  }
  /* world ranks of the members, for messages (ptrs is free scratch until a gather-path call) */
  MPI_Group g = MPI_GROUP_NULL, gw = MPI_GROUP_NULL;
  int *in = (int *)(void *)m->ptrs;
  for (int i = 0; i < size; i++) in[i] = i;
  if (MPI_Comm_group(nc, &g) != MPI_SUCCESS || MPI_Comm_group(mw->comm, &gw) != MPI_SUCCESS ||
      MPI_Group_translate_ranks(g, size, in, gw, m->wranks) != MPI_SUCCESS)
    for (int i = 0; i < size; i++) m->wranks[i] = -1;
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (gw != MPI_GROUP_NULL) MPI_Group_free(&gw);
  *rank_out = rank, *size_out = size;
  *state = m;
  return SK_OK;
}

/* This process's one device. The abort notices go out after it, also when the device itself
   called sk_world_abort. */
static sk_result sk__mpi_world_run(sk_world *w, sk_device_entry entry, void *ctx) {
  sk__mworld *mw = SK__MWORLD(w);
  if (sk_world_aborted(w)) return SK_ERR_ABORTED;
  sk_result r = entry(w, mw->rank, ctx);
  if (sk_world_aborted(w)) sk__m_notify(mw);
  return r;
}

/* May run on any thread: only marks the world (waits notice it and send the abort notices from
   the device thread), unless the user asked for MPI_Abort. */
static void sk__mpi_abort(sk_world *w) {
  sk__mworld *mw = SK__MWORLD(w);
  if (mw && mw->cfg.abort_calls_mpi_abort) MPI_Abort(mw->comm != MPI_COMM_NULL ? mw->comm : MPI_COMM_WORLD, 1);
}

static const sk_backend sk__mpi_backend_table = {
    SK_HOOK(version) SK_BACKEND_VERSION,
    SK_HOOK(name) "mpi",
    SK_HOOK(world_create) sk__mpi_world_create,
    SK_HOOK(world_destroy) sk__mpi_world_destroy,
    SK_HOOK(world_run) sk__mpi_world_run,
    SK_HOOK(comm_init_rank) sk__mpi_comm_init_rank,
    SK_HOOK(comm_split) sk__mpi_comm_split,
    SK_HOOK(comm_destroy) sk__mpi_comm_destroy,
    SK_HOOK(start) sk__mpi_start,
    SK_HOOK(test) sk__mpi_test,
    SK_HOOK(wait) sk__mpi_wait,
    SK_HOOK(run) NULL, /* blocking = start + wait */
    SK_HOOK(abort) sk__mpi_abort,
    SK_HOOK(check_caller) NULL,
    SK_HOOK(peer_access) NULL, /* no shared address space */
    SK_HOOK(copy) NULL,        /* host memory: memcpy */
    SK_HOOK(shared_address_space) 0, /* one process per device */
    SK_HOOK(clock_align) NULL,       /* prices no collective: a plain MAX AllReduce */
    SK_HOOK(clock_charge) NULL,      /* prices no collective: a plain MAX AllReduce */
};

SK_API const sk_backend *sk_mpi_backend(void) { return &sk__mpi_backend_table; }

SK_EXTERN_C_END

#endif /* SK_MPI_IMPL */
