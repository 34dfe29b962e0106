/* sk_redist.h -- tensor redistribution: plan and execute any layout -> layout move.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_REDIST_IMPL with the modules it uses)
                             #include "shardkit.h"
   Needs sk_layout.h, sk_layout_algebra.h, sk_comm.h and sk_topology.h (and a backend to
   execute on). Link
   with -lpthread.

   FILES
     This header declares the redistribution API and implements planning and execution. The
     emulation of MindSpore's operator sequence (the SK_REDIST_MINDSPORE modes) is kept in
     sk_redist_ms.h, which this header includes (never the reverse): it declares the record of
     MindSpore's cost (sk_redist_ms_cost) and infers the operators on layouts alone, handing
     each to this planner, which makes it a plan step. So include this header (or shardkit.h);
     SK_IMPL or SK_REDIST_IMPL in one TU emits both parts once.

   WHAT IT IS
     MindSpore inserts "tensor redistribution" between operators whose layouts differ
     (docs/semantics.md section 9). This module does the same as a library call. Input: a tensor
     shape, a dtype, a from-layout and a to-layout (same mesh, or meshes with the same device
     count; in every mode also a reshape, declared with desc.to_ndims/to_shape, and device
     counts one of which divides the other: RESHAPES AND DEVICE COUNTS below), and optionally
     the mesh axes over which the source holds partial sums (a pending SUM, as the output of a
     MatMul with a split contraction dim). Output: a PLAN -- an ordered
     list of steps, each a local slice/copy or a collective on a group of ranks (AllGather,
     AllToAll, ReduceScatter, AllReduce, or a Send/Recv exchange), with the bytes each rank
     sends and receives and an alpha-beta cost estimate. Plans are backend-independent values,
     printable with sk_redist_plan_format(). An EXECUTOR runs a plan on any backend through the
     public sk_comm.h API.

   MODES (sk_redist_desc.mode)
     SK_REDIST_MINIMAL (default). Without partial sums the plan is ONE exchange in which every
       rank receives exactly the bytes of its target slice it does not already hold, and no more.
       Each missing piece comes from the holder whose coordinates on the source's replicated
       axes equal the receiver's (so replicas share the sending). The exchange is labelled with
       the collective it is, when it is one for every rank: AllGather (everybody needs every
       group member's whole slice), AllToAll (equal blocks to and from every group member, e.g.
       rows-by-8 -> cols-by-8), a local slice/copy (nothing to receive, e.g. MatMul out
       [2,4],[1,-1] -> ReLU in [4,2],[1,-1]); otherwise it is a Send/Recv exchange.
       With partial sums over axes P the plan first reduces over the P group in ONE collective
       (so the sum is taken in rank order within each partial group, as sk_comm.h's reductions
       are): a ReduceScatter when the target splits along some axis of P (the scattered layout
       appends P's axes to the dims where the target uses them), else an AllReduce; then the
       minimal exchange from that layout to the target, if any rank still lacks data.
       Minimal mode also plans across reshapes and device counts (next section).
     SK_REDIST_MINDSPORE / SK_REDIST_MINDSPORE_NO_ALLTOALL. MindSpore's own operator sequence
       (RedistributionOperatorInfer with enable_alltoall on -- the AutoParallel wrapper's
       default -- or off -- set_auto_parallel_context's default): StridedSlice, AllGather
       (ConcatByAxis), AllToAll (PermuteByAxis), with MindSpore's cost model
       (sk_redist_plan_ms_cost: element counts, its Concat/Permute double counting included).
       Non-partial sources only (MindSpore handles partial sums in the operators). The layouts
       may have different device matrices, different shapes of one element count (a reshape,
       declared with to_ndims/to_shape: next section) and different device counts when one divides
       the other: everything then covers the
       larger count, the smaller layout read with a repeat axis on the left
       (sk_layout_to_devices: rank r holds rank r mod N's slice). Both layouts are unified as
       MindSpore does (sk_layout_unify: size-1 axes and dims dropped, device matrices and
       shapes refined together), the operators inferred on the unified layouts, with local
       Reshape steps (SK_REDIST_RESHAPE) around them across a reshape or a device matrix; when
       no unification exists, MindSpore's fallback (AllGathers on the source's matrix, a
       Reshape, StridedSlices on the target's). Every operator is executed as a minimal move
       between the layouts before and after it, so MindSpore plans run too (for comparisons).
       docs/redistribution-across.md has the pipeline; the emulation lives in sk_redist_ms.h;
       its API is declared here with the rest.

   RESHAPES AND DEVICE COUNTS
     In every mode desc.to_ndims/to_shape declare a reshape's target tensor shape (to's shape,
     with from's element count), and device counts N1 (from) and N2 (to) may differ when one
     divides the other: the world (the communicator) has max(N1, N2) ranks and the layout over
     fewer devices is aligned as MindSpore aligns it (sk_layout_to_devices): a repeat axis on
     the LEFT of its mesh, so rank r holds the source slice, or ends with the target slice, of
     rank r % N. MindSpore mode then plans its operators (MODES above); the rest of this
     section is minimal mode. An element is its flat row-major index, which a reshape keeps, so
     the invariant above holds unchanged: one exchange, every rank receiving exactly the
     elements of its target slice its source slice lacks, each from the holder chosen among
     replicas as above.
     Planning: with device counts aligned, a move on one shape is planned as above. Across a
     reshape the two layouts are unified (sk_layout_unify: one mesh, one refined shape); when
     that succeeds the exchange is planned and labelled on the unified layouts (an AllGather or
     AllToAll of a reshape is reported as one), and the caller's buffers serve them unchanged:
     a rank's slice is the same set of elements in both shapes, and a box lists its elements in
     increasing flat order, so the two row-major orders agree (checked at planning, O(devices *
     dims)). When they do not unify (a [6,4] cut by 2 on dim 1 against [4,6] cut by 2 on dim
     1), the exchange is computed on flat indices: each slice is a sorted list of row-major
     runs, and the pieces are the intersections of two lists; labelled Local when no rank
     receives anything, else Send/Recv; its pieces are packed and unpacked run by run. With
     partial sums the reduction runs on the source's shape (an AllReduce across a reshape),
     then the minimal move.

   BYTES AND COSTS
     recv bytes of a rank = what it obtains from other ranks (what it already holds does not
     count; for partial sources, every peer contribution it reads or receives counts: an
     AllReduce of n bytes over g ranks counts (g-1)*n, a ReduceScatter (g-1)*n/g); send bytes =
     what other ranks obtain from it under the plan's choice of sources. Costs (seconds), with
     alpha per message, beta per byte on the wire, gamma per byte reduced or copied locally
     (docs/cost-models.md section 3), g = group size, n = bytes per rank buffer:
       AllGather, AllToAll   (g-1)*alpha + recv*beta              (recv = (g-1)/g * n)
       ReduceScatter         (g-1)*alpha + recv*(beta + gamma)
       AllReduce (ring)      2(g-1)*alpha + 2(g-1)/g*n*beta + (g-1)/g*n*gamma
       Send/Recv exchange    messages*alpha + max(send, recv)*beta + local bytes*gamma
       local slice/copy      bytes*gamma
     A whole plan takes the maximum over ranks; a rank plan uses the planned rank's traffic.

   PLANNING COST
     sk_redist_plan_create(desc, rank, ...) plans for one rank: O(devices) work for the
     classification plus, for a Send/Recv exchange, O(group) for the rank's own pieces (well
     under 1 ms on 4096 devices). rank == SK_REDIST_ALL_RANKS also fills every rank's bytes,
     for explainers and the device classes of the dry run: O(devices * pieces per rank) for a
     Send/Recv exchange on boxes (the walk of BUSIEST RANK below, not each rank's group
     scanned). A flat exchange (a reshape that does not unify)
     costs O(runs) per pair of slices met instead of O(dims), where runs (at most the elements
     of the two slices) counts their row-major runs: O(devices * runs) for the label, O(group *
     runs) per planned rank; executing it walks the same runs.

   BUSIEST RANK
     sk_redist_step_busiest_us prices a step over all ranks at once, for the dry run (which
     charges a Send/Recv exchange as one call as long as its busiest rank's) and the searches'
     cost models, which price many exchanges at thousands of devices. Rank by rank, each
     rank's pieces cost a scan of its whole group: O(devices * group) slice overlaps, 17
     million at 4,096 devices. Instead each receiver's holders come from interval arithmetic:
     per dim its target interval meets a run of the source's blocks, whose holders differ from
     it only on the axes cutting that dim, so the holders are the product of those runs, each
     found in O(dims); a piece's price (sk_cluster_p2p_us, so any link class) is added to the
     receiver's side and, once, to the holder's send side. O(devices * pieces per rank * dims)
     plus a sort of a rank's holders when its layout lists axes out of mesh order; one array of
     devices doubles; the same terms in the same order as rank by rank, so the same value. At
     4,096 devices a 4096-way cut of dim 0 -> 64 x 64 (8192 x 8192, 64 pieces a rank) takes
     3.6 ms against 0.84 s rank by rank (bench/RESULTS.md, section 4). On a flat cluster (no
     topology: alpha + bytes / bandwidth for every message) no piece is listed: a side is its
     message count times alpha plus its bytes over the bandwidth, both counted per dim, for a
     receiver from its block runs, for a sender over the receivers sharing its coordinates on
     the source's unused axes (the two meshes refined to common axes; meshes with none walk):
     O(devices * (dims + axes)), equal to rank by rank up to rounding (the same terms summed
     in another order). Flat exchanges (a reshape that does not unify) keep the rank-by-rank
     loop; collectives price each group once.

   EXECUTING
     sk_redist_executor_create(comm, desc, &ex, &err) is COLLECTIVE over comm (whose size must
     equal the larger of the two device counts; comm rank r plays mesh rank r): it plans for
     this rank and creates, once, the sub-communicators the plan's collectives need
     (sk_comm_split_mesh; or takes the caller's: GROUPS below), plus scratch buffers. sk_redist_execute(ex, src, src_count, dst, dst_count, dtype) -- collective,
     every rank calls it -- moves this rank's source slice (row-major, the source layout's slice
     shape) into its target slice (row-major, the target's slice shape); out-of-place (src and
     dst must not overlap); call it as often as you like. Arguments are checked on every rank
     and agreed on with one small AllReduce before any data moves: a bad argument anywhere
     returns SK_ERR_INVALID_ARGUMENT on every rank (the message, sk_comm_error_message(comm),
     names the problem on the rank that had it). Contiguous blocks are sent from and received
     into the caller's buffers directly; other blocks are packed into the executor's scratch.
     OWNERSHIP: the caller owns comm and the executor; sk_redist_executor_destroy() (not
     collective) frees the executor, its scratch and the sub-communicators it created; destroy
     it before comm. sk_redist() is the one-shot form (create, execute, destroy).
   GROUPS
     A caller that already holds the group communicators (a runtime that makes one per group of
     its plan, so that every call it makes runs on a communicator it knows) sets desc.group:
     the executor then splits nothing, and asks group(group_ctx, mesh, axes) once per distinct
     (mesh, axes) of the plan's collective steps -- the mesh and axes sk_redist_plan_step reports
     (info.from->mesh, info.group_axes): desc.from's mesh, or the aligned or unified mesh the
     step runs on. The answer must be the communicator of this rank's group along those axes,
     members in ascending mesh rank (as sk_comm_split_mesh orders them); it stays the caller's
     (destroy the executor first). NULL, or a communicator of another size or in which this rank
     sits elsewhere, is SK_ERR_INVALID_ARGUMENT naming the mesh and the axes. Since creation then
     makes no communicator, it ends with one small agreement on comm (an AllReduce, as execute's)
     so that a failure on any rank -- a NULL group, memory -- fails creation on every rank
     (the others' message names the lowest failing rank) and none is left holding an executor
     its peers lack.

   ERRORS
     SK_ERR_INVALID_ARGUMENT (with a message in err) for: NULL arguments, layouts that do not
     divide, different shapes without to_ndims (or a to_shape that is not to's shape or holds
     another element count), device counts neither of which divides the other, a partial axis
     the source layout uses (in MindSpore mode any partial axis), an invalid dtype, a count or dtype at execute that does not match the
     plan, overlapping buffers. Nothing is moved in those cases. SK_ERR_MISMATCH when the ranks
     execute different plans (a fingerprint of each rank's descriptor and steps is agreed on
     before anything moves; the message names two ranks that differ). On a shared-memory
     backend, blocks read straight from peers go through sk_comm_peer_access, so a fault while
     they are read never leaves a peer reading a buffer its owner has already reused.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_REDIST_IMPL)
#define SK_REDIST_IMPL
#endif
/* sk_redist_ms.h's implementation is a part of this one (FILES above): asking for this one asks for both */
#if defined(SK_REDIST_IMPL) && !defined(SK_REDIST_MS_IMPL)
#define SK_REDIST_MS_IMPL
#endif
#ifndef SK_REDIST_H
#define SK_REDIST_H

#include "sk_core.h"
#include "sk_layout.h"
#include "sk_layout_algebra.h" /* minimal mode unifies the two layouts across a reshape (sk_layout_unify) */
#include "sk_comm.h"
#include "sk_topology.h"  /* a peer-access step's price on the clocks (sk_redist_step_clock_us) */
#include "sk_redist_ms.h" /* MindSpore mode's operator inference and its cost record, sk_redist_ms_cost */

SK_EXTERN_C_BEGIN

typedef enum sk_redist_mode {
  SK_REDIST_MINIMAL = 0,               /* the least communication (default) */
  SK_REDIST_MINDSPORE = 1,             /* MindSpore's operators, enable_alltoall on */
  SK_REDIST_MINDSPORE_NO_ALLTOALL = 2  /* MindSpore's operators, enable_alltoall off */
} sk_redist_mode;

/* How a step executes. */
typedef enum sk_redist_op {
  SK_REDIST_LOCAL = 0,         /* local slice / copy, no communication */
  SK_REDIST_ALLGATHER,
  SK_REDIST_ALLTOALL,
  SK_REDIST_REDUCE_SCATTER,    /* sum of partial contributions, scattered */
  SK_REDIST_ALLREDUCE,         /* sum of partial contributions, replicated */
  SK_REDIST_SENDRECV,          /* point-to-point exchange */
  SK_REDIST_RESHAPE,           /* local reshape of the slice (MindSpore mode), no communication */
  SK_REDIST_OP_COUNT
} sk_redist_op;

SK_API const char *sk_redist_op_name(sk_redist_op op);

/* Alpha-beta parameters (seconds, seconds per byte); zero fields mean the defaults
   alpha 10e-6 (10 us per message), beta 1e-10 (10 GB/s), gamma 5e-11 (20 GB/s). */
typedef struct sk_redist_cost {
  double alpha, beta, gamma;
} sk_redist_cost;

/* What to move. Zero fields mean the defaults:
     from, to    required; same tensor shape unless to_ndims says otherwise; device counts equal,
                 or one a multiple of the other (every mode: the smaller layout is repeated,
                 rank r holding the slice of rank r % its device count)
     to_ndims, to_shape
                 0: `to` has from's shape. Otherwise a reshape (every mode): the target
                 tensor shape, which must be to's shape and hold as many elements as from's
     partial     0: mask of `from` mesh axes over which the source holds partial sums; each must
                 be an axis the from-layout does not use
     dtype       SK_F32
     mode        SK_REDIST_MINIMAL
     cost        the defaults above
     allocator   the C library */
typedef struct sk_redist_desc {
  sk_layout from;
  sk_layout to;
  uint32_t partial;
  sk_dtype dtype;
  sk_redist_mode mode;
  sk_redist_cost cost;
  sk_allocator allocator;
  int to_ndims;                  /* a reshape: to's shape (0: from's) */
  int64_t to_shape[SK_MAX_DIMS];
  /* Executors only (EXECUTING: GROUPS): NULL to split the collectives' groups from comm;
     otherwise the caller's communicator of the group along `axes` of `mesh` that holds this
     rank, which the executor uses and never destroys (NULL: no such group, a creation error). */
  sk_comm *(*group)(void *ctx, const sk_mesh *mesh, uint32_t axes);
  void *group_ctx;               /* group's first argument */
} sk_redist_desc;

#define SK_REDIST_ALL_RANKS (-1)

typedef struct sk_redist_plan sk_redist_plan;
typedef struct sk_redist_executor sk_redist_executor;

/* One step as the caller sees it. */
typedef struct sk_redist_step_info {
  sk_redist_op op;        /* how it executes */
  const char *name;       /* "AllToAll", ...; in MindSpore mode MindSpore's op ("StridedSlice") */
  const char *detail;     /* parameters in words, e.g. "split_count 8, split_dim 1, concat_dim 0" */
  uint32_t group_axes;    /* mesh axes (of from->mesh below) of the collective's groups; 0 otherwise */
  int group_size;         /* ranks per group (1 for local steps and Send/Recv exchanges) */
  size_t count;           /* elements per rank the collective takes (sk_comm.h's convention) */
  const sk_layout *from;  /* layout before the step (MindSpore mode, reshapes, device counts:
                             the unified or aligned layout the step runs on) */
  const sk_layout *to;    /* layout after it */
  bool from_partial;      /* the step sums partial contributions */
  double cost;            /* alpha-beta estimate (s) */
} sk_redist_step_info;

/* Plans desc for one rank (0..devices-1) or for all (SK_REDIST_ALL_RANKS). *plan is the
   caller's; free it with sk_redist_plan_destroy. */
SK_API sk_result sk_redist_plan_create(const sk_redist_desc *desc, int rank, sk_redist_plan **plan, sk_error *err);
SK_API void sk_redist_plan_destroy(sk_redist_plan *plan);
SK_API int sk_redist_plan_nsteps(const sk_redist_plan *plan);
/* The planned rank, or SK_REDIST_ALL_RANKS. */
SK_API int sk_redist_plan_rank(const sk_redist_plan *plan);
SK_API const sk_redist_desc *sk_redist_plan_desc(const sk_redist_plan *plan);
/* Step i (0-based); pointers inside info live as long as the plan. */
SK_API sk_result sk_redist_plan_step(const sk_redist_plan *plan, int i, sk_redist_step_info *info, sk_error *err);
/* Bytes rank receives and sends in step `step`, or over the whole plan (step -1). A rank plan
   answers only for its rank. */
SK_API sk_result sk_redist_plan_bytes(const sk_redist_plan *plan, int step, int rank, uint64_t *recv_bytes,
                                      uint64_t *send_bytes, sk_error *err);
/* The modelled time (us) of step `step` for `rank` (0..devices-1) when its data moves outside
   any priced call, as the threads backend moves a Send/Recv exchange and an AllGather or AllToAll
   of strided blocks (shared-memory peer access; sk_redist_execute then charges it to the
   clocks with sk_comm_clock_charge, and the dry run does the same): an AllGather or AllToAll
   costs that collective on the rank's group (sk_cluster_coll_us over the members' world ranks);
   a Send/Recv exchange the rank's busier side, the sum of sk_cluster_p2p_us over the messages
   it sends or over those it receives, whichever is larger; any other step 0. world[r] is rank
   r's world rank (NULL: r itself). Any plan of the descriptor answers for every rank. */
SK_API sk_result sk_redist_step_clock_us(const sk_redist_plan *plan, int step, int rank, const sk_cluster *cluster,
                                         const int *world, double *us, sk_error *err);
/* The largest sk_redist_step_clock_us of step `step` over every rank (0..devices-1), the length
   of the call a Send/Recv exchange is charged as over its ranks; for an AllGather or AllToAll
   the dearest group's price; other steps 0. Exact (the same terms summed in the same order as
   rank by rank, so the same double) and without a scan of every peer per rank: BUSIEST RANK
   above. world as sk_redist_step_clock_us's (NULL, or devices entries). */
SK_API sk_result sk_redist_step_busiest_us(const sk_redist_plan *plan, int step, const sk_cluster *cluster,
                                           const int *world, double *us, sk_error *err);
/* Sum of the steps' estimates (s). */
SK_API double sk_redist_plan_cost(const sk_redist_plan *plan);
/* MindSpore mode only (else SK_ERR_INVALID_ARGUMENT). */
SK_API sk_result sk_redist_plan_ms_cost(const sk_redist_plan *plan, sk_redist_ms_cost *cost, sk_error *err);
/* The plan in words, one step a few lines; snprintf convention. */
SK_API size_t sk_redist_plan_format(const sk_redist_plan *plan, char *buf, size_t cap);

/* Collective over comm. */
SK_API sk_result sk_redist_executor_create(sk_comm *comm, const sk_redist_desc *desc, sk_redist_executor **ex,
                                           sk_error *err);
/* Collective. src: src_count elements (>= the source slice), dst: dst_count (>= the target
   slice), both of dtype dt (must be the plan's). */
SK_API sk_result sk_redist_execute(sk_redist_executor *ex, const void *src, size_t src_count, void *dst,
                                   size_t dst_count, sk_dtype dt, sk_error *err);
SK_API const sk_redist_plan *sk_redist_executor_plan(const sk_redist_executor *ex);
SK_API void sk_redist_executor_destroy(sk_redist_executor *ex);
/* One shot: create an executor, execute, destroy. Collective. */
SK_API sk_result sk_redist(sk_comm *comm, const sk_redist_desc *desc, const void *src, size_t src_count, void *dst,
                           size_t dst_count, sk_error *err);

SK_EXTERN_C_END

#endif /* SK_REDIST_H */

/* ==== implementation ======================================================================== */
#if defined(SK_REDIST_IMPL) && !defined(SK_REDIST_IMPL_DONE)
#define SK_REDIST_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include "sk_topology.h"
#include "sk_redist_ms.h" /* its implementation first (SK_REDIST_MS_IMPL is set above): sk__ms_plan, sk__rd_elems */

SK_EXTERN_C_BEGIN

/* Layout of this section (after sk_redist_ms.h's implementation, included above):  >>out  >>box
   (boxes and copies)  >>flat (pieces by flat index, across shapes)  >>check (desc validation)
   >>classify (what collective an exchange is)  >>pieces  >>plan (MindSpore mode's sink
   included)  >>partial  >>format  >>exec  (>>reshape: a Reshape step's check). */

#define SK__RD_MAX_STEPS 48
#define SK__RD_DETAIL 128

/* >>out -- snprintf-style appender */
typedef struct sk__rd_out {
  char *buf;
  size_t cap, len;
} sk__rd_out;

static void sk__rd_out_init(sk__rd_out *o, char *buf, size_t cap) {
  o->buf = buf;
  o->cap = buf ? cap : 0;
  o->len = 0;
  if (o->cap) buf[0] = '\0';
}

static SK__PRINTF(2, 3) void sk__rd_put(sk__rd_out *o, const char *fmt, ...) {
  char *dst = NULL;
  size_t room = 0;
  if (o->len < o->cap) dst = o->buf + o->len, room = o->cap - o->len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(dst, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->len += (size_t)n;
}

/* >>box -- a box is [lo, hi) per dim, in global tensor coordinates */
typedef struct sk__rd_box {
  int64_t lo[SK_MAX_DIMS], hi[SK_MAX_DIMS];
} sk__rd_box;

/* sk_layout_slice as a box, without re-checking the layout per call (the checks and the copy
   through an sk_slice dominated pricing exchanges over thousands of ranks): a plan's layouts
   were validated. Stays defined when they were not: the empty box sk_layout_slice's refusal
   left. */
static void sk__rd_slice_box(const sk_layout *l, int rank, sk__rd_box *b) {
  const sk_mesh *m = &l->mesh;
  int c[SK_MAX_AXES], nd = l->ndims;
  bool sane = nd >= 1 && nd <= SK_MAX_DIMS && m->naxes >= 1 && m->naxes <= SK_MAX_AXES && rank >= 0 && rank < m->size;
  for (int k = m->naxes - 1, x = rank; sane && k >= 0; k--) {
    sane = m->dims[k] >= 1;
    if (sane) c[k] = x % m->dims[k], x /= m->dims[k];
  }
  for (int d = 0; d < SK_MAX_DIMS; d++) b->lo[d] = b->hi[d] = 0;
  for (int d = 0; sane && d < nd; d++) { /* Horner over the listed axes, the first the major digit */
    const sk_dim_map *dm = &l->map[d];
    int64_t at = 0, parts = 1;
    for (int j = 0; j < dm->naxes; j++) {
      int a = dm->axes[j];
      if (a < 0 || a >= m->naxes) return;
      at = at * m->dims[a] + c[a], parts *= m->dims[a];
    }
    int64_t len = l->shape[d] / parts;
    b->lo[d] = at * len, b->hi[d] = at * len + len;
  }
}

/* out = a & b; returns its volume (0 when empty) */
static int64_t sk__rd_isect(const sk__rd_box *a, const sk__rd_box *b, int nd, sk__rd_box *out) {
  int64_t v = 1;
  for (int d = 0; d < nd; d++) {
    int64_t lo = a->lo[d] > b->lo[d] ? a->lo[d] : b->lo[d];
    int64_t hi = a->hi[d] < b->hi[d] ? a->hi[d] : b->hi[d];
    if (hi <= lo) return 0;
    if (out) out->lo[d] = lo, out->hi[d] = hi;
    v *= hi - lo;
  }
  return v;
}

static int64_t sk__rd_vol(const sk__rd_box *b, int nd) {
  int64_t v = 1;
  for (int d = 0; d < nd; d++) v *= b->hi[d] - b->lo[d];
  return v;
}

static bool sk__rd_box_eq(const sk__rd_box *a, const sk__rd_box *b, int nd) {
  for (int d = 0; d < nd; d++)
    if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d]) return false;
  return true;
}

/* Copies box x from a row-major buffer holding box `sb` to one holding box `db`. Runs of
   dims that are whole in both buffers are merged into one copy, made by via's backend
   (sk_comm_copy: device memory cannot be memcpy'd); via NULL: memcpy, inside peer functions
   (host memory by contract, and they may not call shardkit). Returns the first failed copy. */
static sk_result sk__rd_copy(sk_comm *via, char *dst, const sk__rd_box *db, const char *src, const sk__rd_box *sb,
                             const sk__rd_box *x, int nd, size_t es) {
  int64_t ext[SK_MAX_DIMS] = {0}, dstr[SK_MAX_DIMS] = {0}, sstr[SK_MAX_DIMS] = {0};
  int64_t ds = 1, ss = 1;
  for (int d = nd - 1; d >= 0; d--) {
    ext[d] = x->hi[d] - x->lo[d];
    dstr[d] = ds, sstr[d] = ss;
    ds *= db->hi[d] - db->lo[d];
    ss *= sb->hi[d] - sb->lo[d];
  }
  int64_t doff = 0, soff = 0;
  for (int d = 0; d < nd; d++) {
    if (ext[d] <= 0) return SK_OK;
    doff += (x->lo[d] - db->lo[d]) * dstr[d];
    soff += (x->lo[d] - sb->lo[d]) * sstr[d];
  }
  /* merge inner dims: dim d joins the run when every dim inside it is whole in both buffers */
  int inner = nd - 1;
  int64_t run = ext[nd - 1];
  while (inner > 0 && ext[inner] == db->hi[inner] - db->lo[inner] && ext[inner] == sb->hi[inner] - sb->lo[inner]) {
    inner--;
    run *= ext[inner];
  }
  size_t rb = (size_t)run * es;
  int64_t idx[SK_MAX_DIMS] = {0};
  for (;;) {
    sk_result r = SK_OK;
    if (via)
      r = sk_comm_copy(via, dst + (size_t)doff * es, src + (size_t)soff * es, rb, NULL);
    else
      memcpy(dst + (size_t)doff * es, src + (size_t)soff * es, rb);
    if (r != SK_OK) return r;
    int d = inner - 1;
    for (; d >= 0; d--) {
      doff += dstr[d], soff += sstr[d];
      if (++idx[d] < ext[d]) break;
      doff -= dstr[d] * ext[d], soff -= sstr[d] * ext[d];
      idx[d] = 0;
    }
    if (d < 0) return SK_OK;
  }
}

/* Whether box x is one contiguous range of a row-major buffer holding box b; *off = its first
   element. */
static bool sk__rd_contig(const sk__rd_box *b, const sk__rd_box *x, int nd, int64_t *off) {
  int k = 0; /* the first dim with extent > 1 ... */
  while (k < nd - 1 && x->hi[k] - x->lo[k] == 1) k++;
  for (int d = k + 1; d < nd; d++) /* ... and every dim after it whole */
    if (x->lo[d] != b->lo[d] || x->hi[d] != b->hi[d]) return false;
  int64_t o = 0, st = 1;
  for (int d = nd - 1; d >= 0; d--) {
    o += (x->lo[d] - b->lo[d]) * st;
    st *= b->hi[d] - b->lo[d];
  }
  *off = o;
  return true;
}

/* >>flat -- the elements two slices of different shapes share, found on the flat row-major
   index (which a reshape keeps). A box's row-major order is increasing flat order, so a slice
   is a sorted list of runs of equal length (the dims after the first partial one are whole and
   merge into it), run k at offset k*len of the slice's buffer; two such lists meet in one merge,
   O(runs of both). */
typedef struct sk__rd_runs {
  int inner;                   /* dims inner.. form one run */
  int64_t len, n, k, flat;     /* run length, run count, current run, its first flat index */
  int64_t ext[SK_MAX_DIMS], st[SK_MAX_DIMS], idx[SK_MAX_DIMS];
} sk__rd_runs;

static void sk__rd_runs_init(sk__rd_runs *it, const sk_layout *l, int rank) {
  sk__rd_box b;
  sk__rd_slice_box(l, rank, &b);
  memset(it, 0, sizeof *it);
  int nd = l->ndims;
  int64_t st = 1;
  for (int d = nd - 1; d >= 0; d--) it->st[d] = st, st *= l->shape[d], it->ext[d] = b.hi[d] - b.lo[d];
  it->inner = nd - 1;
  it->len = it->ext[nd - 1];
  while (it->inner > 0 && it->ext[it->inner] == l->shape[it->inner]) it->len *= it->ext[--it->inner];
  it->n = it->len ? sk__rd_vol(&b, nd) / it->len : 0;
  for (int d = 0; d < nd; d++) it->flat += b.lo[d] * it->st[d];
}

static void sk__rd_runs_next(sk__rd_runs *it) {
  it->k++;
  for (int d = it->inner - 1; d >= 0; d--) {
    it->flat += it->st[d];
    if (++it->idx[d] < it->ext[d]) return;
    it->flat -= it->st[d] * it->ext[d];
    it->idx[d] = 0;
  }
}

/* Called per common segment: offsets in the target's and the source's buffers, length. */
typedef sk_result (*sk__rd_seg_fn)(void *ctx, int64_t toff, int64_t soff, int64_t n);

/* The elements rank t's slice under B shares with rank s's slice under A (any shapes of one
   element count): *count of them; fn (if not NULL) sees each common segment in flat order and
   stops the walk on failure. */
static sk_result sk__rd_flat_meet(const sk_layout *A, int s, const sk_layout *B, int t, sk__rd_seg_fn fn, void *ctx,
                                  int64_t *count) {
  sk__rd_runs S, T;
  sk__rd_runs_init(&S, A, s);
  sk__rd_runs_init(&T, B, t);
  int64_t total = 0;
  sk_result r = SK_OK;
  while (S.k < S.n && T.k < T.n && r == SK_OK) {
    int64_t s1 = S.flat + S.len, t1 = T.flat + T.len;
    int64_t lo = S.flat > T.flat ? S.flat : T.flat, hi = s1 < t1 ? s1 : t1;
    if (lo < hi) {
      total += hi - lo;
      if (fn) r = fn(ctx, T.k * T.len + lo - T.flat, S.k * S.len + lo - S.flat, hi - lo);
    }
    if (s1 <= t1) sk__rd_runs_next(&S);
    if (t1 <= s1) sk__rd_runs_next(&T);
  }
  if (count) *count = total;
  return r;
}

/* How a piece is copied: between the two slices' buffers, or packed from the source's buffer
   into a contiguous one, or unpacked from a contiguous one into the target's. */
enum { SK__RD_DIRECT = 0, SK__RD_PACK = 1, SK__RD_UNPACK = 2 };

typedef struct sk__rd_segcopy {
  sk_comm *via; /* NULL: memcpy (peer functions) */
  char *dst;
  const char *src;
  size_t es;
  int how;
  int64_t pos; /* the contiguous side's next element */
} sk__rd_segcopy;

static sk_result sk__rd_segcopy_fn(void *pv, int64_t toff, int64_t soff, int64_t n) {
  sk__rd_segcopy *c = (sk__rd_segcopy *)pv;
  int64_t d = c->how == SK__RD_PACK ? c->pos : toff, s = c->how == SK__RD_UNPACK ? c->pos : soff;
  c->pos += n;
  char *dp = c->dst + (size_t)d * c->es;
  const char *sp = c->src + (size_t)s * c->es;
  if (c->via) return sk_comm_copy(c->via, dp, sp, (size_t)n * c->es, NULL);
  memcpy(dp, sp, (size_t)n * c->es);
  return SK_OK;
}

/* The elements of rank t's target slice (under B) that rank s's source slice (under A) holds:
   their box when A and B share a shape, else their count, as the box [0, count) of dim 0. */
static int64_t sk__rd_meet(const sk_layout *A, int s, const sk_layout *B, int t, sk__rd_box *x) {
  if (sk__rd_reshaping(A, B)) {
    int64_t v = 0;
    (void)sk__rd_flat_meet(A, s, B, t, NULL, NULL, &v);
    memset(x, 0, sizeof *x);
    x->hi[0] = v;
    return v;
  }
  sk__rd_box S, T;
  sk__rd_slice_box(A, s, &S);
  sk__rd_slice_box(B, t, &T);
  return sk__rd_isect(&T, &S, A->ndims, x);
}

/* >>check */
static void sk__rd_axes_text(const sk_mesh *m, uint32_t mask, char *buf, size_t cap) {
  sk__rd_out o;
  sk__rd_out_init(&o, buf, cap);
  int n = 0;
  for (int k = 0; k < m->naxes; k++)
    if (mask & (1u << k)) sk__rd_put(&o, "%s%s", n++ ? "," : "", m->names[k]);
  if (!n) sk__rd_put(&o, "-");
}

static sk_result sk__rd_check_layout(const sk_layout *l, const char *which, sk_error *err) {
  sk_layout copy;
  sk_error e;
  if (sk_layout_init(&copy, &l->mesh, l->ndims, l->shape, l->map, &e) != SK_OK)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s layout: %s", which, e.msg);
  return SK_OK;
}

/* Whether a tensor of this shape, es bytes an element, has more bytes than 63 bits count. In
   floating point, so that the test itself cannot overflow: every element count formed in int64
   afterwards (sk__rd_elems, slices, offsets) stays below 4e18. */
static bool sk__rd_too_big(int nd, const int64_t *shape, size_t es) {
  double v = (double)es;
  for (int k = 0; k < nd; k++) v *= (double)shape[k];
  return v > 4.0e18;
}

/* Every mode: device counts equal or one a multiple of the other; shapes equal, or a declared
   reshape (to_ndims, to_shape: to's shape, from's element count); both tensors' bytes within 63
   bits (checked before the counts are compared: a count that wrapped could match). */
static sk_result sk__rd_check_shapes(const sk_redist_desc *d, sk_error *err) {
  const sk_layout *f = &d->from, *t = &d->to;
  int nf = f->mesh.size, nt = t->mesh.size;
  if (nf % nt && nt % nf)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "from mesh has %d devices but to mesh has %d; one must divide the other", nf, nt);
  int nd = d->to_ndims ? d->to_ndims : f->ndims;
  const int64_t *shape = d->to_ndims ? d->to_shape : f->shape;
  const char *which = d->to_ndims ? "to_shape" : "from layout", *the = d->to_ndims ? "" : "the ";
  if (d->to_ndims < 0 || d->to_ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "to_ndims %d out of range [0, %d]", d->to_ndims, SK_MAX_DIMS);
  if (nd != t->ndims)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s has %d dims but to layout has %d", which, nd, t->ndims);
  for (int k = 0; k < nd; k++)
    if (shape[k] != t->shape[k])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dim %d is %lld in %s%s but %lld in the to layout", k,
                      (long long)shape[k], the, which, (long long)t->shape[k]);
  size_t es = sk_dtype_size(d->dtype);
  if (sk__rd_too_big(f->ndims, f->shape, es) || sk__rd_too_big(t->ndims, t->shape, es))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the %s tensor has more bytes than fit a 63-bit size",
                    sk__rd_too_big(f->ndims, f->shape, es) ? "from" : "to");
  if (sk__rd_elems(f->ndims, f->shape) != sk__rd_elems(t->ndims, t->shape))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "a reshape keeps the element count: from has %lld, to has %lld",
                    (long long)sk__rd_elems(f->ndims, f->shape), (long long)sk__rd_elems(t->ndims, t->shape));
  return SK_OK;
}

/* The ranks a plan covers (the world): the larger device count; the smaller layout is repeated
   over it (sk_layout_to_devices). */
static int sk__rd_devices(const sk_redist_desc *d) {
  return d->from.mesh.size > d->to.mesh.size ? d->from.mesh.size : d->to.mesh.size;
}

static sk_result sk__rd_check_desc(const sk_redist_desc *d, sk_error *err) {
  if (!d) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc is NULL");
  sk_result r;
  if ((r = sk__rd_check_layout(&d->from, "from", err)) || (r = sk__rd_check_layout(&d->to, "to", err))) return r;
  const sk_layout *f = &d->from;
  if (!sk_dtype_valid(d->dtype)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "invalid dtype %d", (int)d->dtype);
  if ((r = sk__rd_check_shapes(d, err))) return r;
  if ((int)d->mode < 0 || (int)d->mode > 2)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "invalid mode %d", (int)d->mode);
  if (!sk__allocator_ok(&d->allocator))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "allocator: set both alloc and free, or neither");
  if (d->cost.alpha < 0 || d->cost.beta < 0 || d->cost.gamma < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "cost parameters must be >= 0");
  if (d->partial >> f->mesh.naxes)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "partial mask 0x%x names axes beyond the from mesh's %d",
                    (unsigned)d->partial, f->mesh.naxes);
  uint32_t both = d->partial & sk_layout_used_axes(f);
  if (both) {
    int a = 0;
    while (!(both & (1u << a))) a++;
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "partial axis '%s' also splits the source; a partial axis must be one the from layout does not use",
                    f->mesh.names[a]);
  }
  /* the element count, the declared reshape and the device counts are checked for every mode
     (sk__rd_check_shapes) */
  if (d->mode != SK_REDIST_MINIMAL && d->partial)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "MindSpore mode covers non-partial sources only (MindSpore sums partials in the operators)");
  return SK_OK;
}

/* >>classify -- what a non-partial exchange A -> B is, decided identically on every rank.
   Rank r takes each missing piece from the holder that agrees with r on A's unused axes, so its
   sources are the ranks of its group along A's used axes, one per A-block its target meets.
   Per dim, r's target interval meets A-blocks j0..j1; block j's holder has digit k of j (mixed
   radix, first listed axis major) as coordinate on the dim's k-th axis. The exchange is a
   collective along the axes V iff, for every rank, the holders are exactly r's group along V
   (r included, every block overlap the same size c) with V the same for all ranks:
   AllGather when every overlap is a whole A-block, else AllToAll; V empty = local. */
typedef struct sk__rd_class {
  sk_redist_op op;
  uint32_t axes;
  int gsize;
  int64_t count; /* per peer (AllToAll) or per rank contribution (AllGather) */
} sk__rd_class;

static void sk__rd_classify(const sk_layout *A, const sk_layout *B, sk__rd_class *out) {
  const sk_mesh *m = &A->mesh;
  int nd = A->ndims;
  int64_t bf[SK_MAX_DIMS];
  int stride[SK_MAX_DIMS][SK_MAX_AXES];
  for (int d = 0; d < nd; d++) {
    int64_t parts = sk_layout_split_count(A, d);
    bf[d] = parts > 0 ? A->shape[d] / parts : A->shape[d]; /* a checked layout's count is >= 1 */
    for (int k = 0; k < SK_MAX_AXES; k++) stride[d][k] = 1; /* defined past naxes for the analyzer */
    int s = 1;
    for (int k = A->map[d].naxes - 1; k >= 0; k--) stride[d][k] = s, s *= m->dims[A->map[d].axes[k]];
  }
  uint32_t V0 = 0;
  int64_t c0 = 0;
  bool whole_all = true, ok = true;
  for (int r = 0; r < m->size && ok; r++) {
    int c[SK_MAX_AXES];
    int x = r;
    for (int k = m->naxes - 1; k >= 0; k--) c[k] = x % m->dims[k], x /= m->dims[k];
    sk__rd_box t;
    sk__rd_slice_box(B, r, &t);
    uint32_t V = 0;
    int64_t csz = 1;
    for (int d = 0; d < nd && ok; d++) {
      int64_t ts = t.lo[d], te = t.hi[d];
      int64_t j0 = ts / bf[d], j1 = (te - 1) / bf[d], n = j1 - j0 + 1, len;
      if (n == 1)
        len = te - ts;
      else {
        if (ts % bf[d] || te % bf[d]) ok = false;
        len = bf[d];
      }
      csz *= len;
      if (len != bf[d]) whole_all = false;
      int64_t prodvar = 1;
      for (int k = 0; k < A->map[d].naxes; k++) {
        int a = A->map[d].axes[k];
        int64_t q0 = j0 / stride[d][k], q1 = j1 / stride[d][k];
        if (q0 != q1) {
          V |= 1u << a;
          prodvar *= m->dims[a];
        } else if (q0 % m->dims[a] != c[a])
          ok = false;
      }
      if (n != prodvar) ok = false;
    }
    if (!ok) break;
    if (r == 0)
      V0 = V, c0 = csz;
    else if (V != V0 || csz != c0)
      ok = false;
  }
  memset(out, 0, sizeof *out);
  out->gsize = 1;
  if (!ok) {
    out->op = SK_REDIST_SENDRECV;
    return;
  }
  if (!V0) {
    out->op = SK_REDIST_LOCAL;
    return;
  }
  out->op = whole_all ? SK_REDIST_ALLGATHER : SK_REDIST_ALLTOALL;
  out->axes = V0;
  int g = 1;
  for (int k = 0; k < m->naxes; k++)
    if (V0 & (1u << k)) g *= m->dims[k];
  out->gsize = g;
  out->count = c0;
}

/* Across a reshape: a local copy when every rank's source slice holds its whole target slice,
   else a Send/Recv exchange. O(devices * runs). */
static void sk__rd_classify_flat(const sk_layout *A, const sk_layout *B, sk__rd_class *out) {
  memset(out, 0, sizeof *out);
  out->gsize = 1;
  out->op = SK_REDIST_LOCAL;
  for (int r = 0; r < A->mesh.size; r++) {
    sk__rd_box x, T;
    sk__rd_slice_box(B, r, &T);
    if (sk__rd_meet(A, r, B, r, &x) != sk__rd_vol(&T, B->ndims)) {
      out->op = SK_REDIST_SENDRECV;
      return;
    }
  }
}

/* >>pieces -- the group of r along A's used axes (its possible sources and destinations) */
typedef struct sk__rd_piece {
  int peer;
  sk__rd_box box;
} sk__rd_piece;

/* Bytes (in elements) rank r receives and sends in the exchange A -> B; optionally the pieces
   (recv / send lists, peers ascending; the local piece is not listed but returned in *local).
   Across a reshape a piece's box is [0, count) of dim 0 (sk__rd_meet). */
typedef struct sk__rd_lists {
  sk__rd_piece *recv, *send;
  int nrecv, nsend, cap;
  sk__rd_box local;
  int64_t nlocal;
} sk__rd_lists;

/* Ranks in a group along A's used axes: a rank's possible sources and destinations. */
static int sk__rd_group_size(const sk_layout *A) {
  uint32_t used = sk_layout_used_axes(A);
  int gs = 1;
  for (int k = 0; k < A->mesh.naxes; k++)
    if (used & (1u << k)) gs *= A->mesh.dims[k];
  return gs;
}

static sk_result sk__rd_pieces(const sk_layout *A, const sk_layout *B, int r, int64_t *recv, int64_t *send,
                               sk__rd_lists *lists, const sk_allocator *al) {
  const sk_mesh *m = &A->mesh;
  uint32_t used = sk_layout_used_axes(A);
  int gs = sk__rd_group_size(A);
  int *grp = (int *)sk__alloc(al, sizeof(int) * (size_t)gs, 16);
  if (!grp) return SK_ERR_OUT_OF_MEMORY;
  int n = 0;
  sk_mesh_group(m, r, used, grp, gs, &n, NULL);
  if (lists) {
    memset(lists, 0, sizeof *lists);
    lists->cap = n;
    lists->recv = (sk__rd_piece *)sk__alloc(al, sizeof(sk__rd_piece) * (size_t)n, 16);
    lists->send = (sk__rd_piece *)sk__alloc(al, sizeof(sk__rd_piece) * (size_t)n, 16);
    if (!lists->recv || !lists->send) {
      sk__free(al, lists->recv), sk__free(al, lists->send), sk__free(al, grp);
      lists->recv = lists->send = NULL;
      return SK_ERR_OUT_OF_MEMORY;
    }
  }
  /* on one shape r's boxes are computed once and each peer's once (sk__rd_meet would redo both
     sides per call: twice the slices, which dominate planning a 4096-way exchange) */
  bool flat = sk__rd_reshaping(A, B);
  sk__rd_box Sr, Tr, Sq, Tq, x;
  if (!flat) sk__rd_slice_box(A, r, &Sr), sk__rd_slice_box(B, r, &Tr);
  int64_t rv = 0, sv = 0;
  for (int i = 0; i < n; i++) {
    int q = grp[i];
    if (q == r) {
      int64_t v = flat ? sk__rd_meet(A, r, B, r, &x) : sk__rd_isect(&Tr, &Sr, A->ndims, &x);
      if (lists) lists->local = x, lists->nlocal = v;
      continue;
    }
    if (!flat) sk__rd_slice_box(A, q, &Sq), sk__rd_slice_box(B, q, &Tq);
    int64_t v = flat ? sk__rd_meet(A, q, B, r, &x) : sk__rd_isect(&Tr, &Sq, A->ndims, &x);
    if (v) {
      rv += v;
      if (lists) lists->recv[lists->nrecv].peer = q, lists->recv[lists->nrecv++].box = x;
    }
    v = flat ? sk__rd_meet(A, r, B, q, &x) : sk__rd_isect(&Tq, &Sr, A->ndims, &x);
    if (v) {
      sv += v;
      if (lists) lists->send[lists->nsend].peer = q, lists->send[lists->nsend++].box = x;
    }
  }
  sk__free(al, grp);
  if (recv) *recv = rv;
  if (send) *send = sv;
  return SK_OK;
}

static void sk__rd_lists_free(sk__rd_lists *l, const sk_allocator *al) {
  sk__free(al, l->recv);
  sk__free(al, l->send);
  l->recv = l->send = NULL;
}

/* Rank q's holders (>>busiest below says why and how) and, from them, every rank's traffic in
   one pass: what an all-ranks plan needs, in O(devices x pieces) where sk__rd_pieces per rank
   scans its whole group. */
typedef struct sk__rd_holder {
  int peer;
  int64_t elems;
} sk__rd_holder;

static int sk__rd_holder_cmp(const void *x, const void *y) {
  int a = ((const sk__rd_holder *)x)->peer, b = ((const sk__rd_holder *)y)->peer;
  return (a > b) - (a < b);
}

/* Block j of A on dim d met by target box T: its holder's offset from the base rank (j's
   mixed-radix digits on the dim's axes, the first listed axis the major digit) and the length
   of the meeting. */
static void sk__rd_block_meet(const sk_layout *A, int d, int64_t j, int64_t bf, const sk__rd_box *T, const int *mstride,
                              int *off, int64_t *len) {
  int64_t lo = j * bf, hi = lo + bf, blk = j;
  if (lo < T->lo[d]) lo = T->lo[d];
  if (hi > T->hi[d]) hi = T->hi[d];
  *len = hi - lo;
  *off = 0;
  for (int k = A->map[d].naxes - 1; k >= 0; k--) {
    int a = A->map[d].axes[k];
    *off += (int)(blk % A->mesh.dims[a]) * mstride[a], blk /= A->mesh.dims[a];
  }
}

/* Rank q's holders under A of its target slice under B (q itself left out), peers ascending,
   into h (room for q's group along A's used axes); returns their count. */
static int sk__rd_holders_of(const sk_layout *A, const sk_layout *B, int q, sk__rd_holder *h) {
  const sk_mesh *m = &A->mesh;
  int nd = A->ndims, c[SK_MAX_AXES], mstride[SK_MAX_AXES], off[SK_MAX_DIMS];
  int64_t bf[SK_MAX_DIMS], j0[SK_MAX_DIMS], j1[SK_MAX_DIMS], j[SK_MAX_DIMS], len[SK_MAX_DIMS];
  if (nd < 1 || nd > SK_MAX_DIMS) return 0; /* a checked layout's are not: keeps the walk defined */
  for (int k = m->naxes - 1, x = q, s = 1; k >= 0; k--)
    c[k] = x % m->dims[k], x /= m->dims[k], mstride[k] = s, s *= m->dims[k];
  uint32_t used = sk_layout_used_axes(A);
  int base = q; /* q with its coordinates on A's used axes zeroed: the unused axes pick the holder */
  for (int k = 0; k < m->naxes; k++)
    if (used & (1u << k)) base -= c[k] * mstride[k];
  sk__rd_box T;
  sk__rd_slice_box(B, q, &T);
  for (int d = 0; d < nd; d++) {
    bf[d] = A->shape[d] / sk_layout_split_count(A, d);
    if (T.hi[d] <= T.lo[d]) return 0;
    j0[d] = j[d] = T.lo[d] / bf[d], j1[d] = (T.hi[d] - 1) / bf[d];
  }
  int n = 0, changed = 0; /* dims changed..nd-1 moved to new blocks: only theirs are recomputed */
  bool sorted = true;
  for (;;) { /* odometer over the dims' block ranges, the last dim fastest */
    for (int d = changed; d < nd; d++) sk__rd_block_meet(A, d, j[d], bf[d], &T, mstride, &off[d], &len[d]);
    int p = base;
    int64_t v = 1;
    for (int d = 0; d < nd; d++) p += off[d], v *= len[d];
    if (p != q) {
      if (n && h[n - 1].peer > p) sorted = false;
      h[n].peer = p, h[n++].elems = v;
    }
    int d = nd - 1;
    while (d >= 0 && j[d] == j1[d]) j[d] = j0[d], d--;
    if (d < 0) break;
    j[d]++, changed = d;
  }
  if (!sorted) qsort(h, (size_t)n, sizeof *h, sk__rd_holder_cmp);
  return n;
}

/* Every rank's traffic in the non-flat exchange A -> B (A and B of one device count): elements
   and messages received and sent, and the local copy, all as sk__rd_pieces counts them. t holds
   A's device count entries. */
typedef struct sk__rd_traffic {
  int64_t recv, send, local;
  int nrecv, nsend;
} sk__rd_traffic;

static sk_result sk__rd_traffic_all(const sk_layout *A, const sk_layout *B, sk__rd_traffic *t, const sk_allocator *al) {
  const sk_mesh *m = &A->mesh;
  sk__rd_holder *h = (sk__rd_holder *)sk__alloc(al, sizeof(sk__rd_holder) * (size_t)sk__rd_group_size(A), 16);
  if (!h) return SK_ERR_OUT_OF_MEMORY;
  memset(t, 0, sizeof *t * (size_t)m->size);
  for (int q = 0; q < m->size; q++) {
    int n = sk__rd_holders_of(A, B, q, h);
    for (int i = 0; i < n; i++) {
      t[q].recv += h[i].elems, t[q].nrecv++;
      t[h[i].peer].send += h[i].elems, t[h[i].peer].nsend++;
    }
    sk__rd_box S, T;
    sk__rd_slice_box(A, q, &S), sk__rd_slice_box(B, q, &T);
    t[q].local = sk__rd_isect(&T, &S, A->ndims, NULL);
  }
  sk__free(al, h);
  return SK_OK;
}

/* >>plan */
typedef struct sk__rd_step {
  sk_redist_op op;
  char name[24];
  char detail[SK__RD_DETAIL];
  uint32_t axes;
  int gsize;
  int64_t count;
  sk_layout a, b;
  bool partial;
  bool flat;             /* a and b have different shapes, or a Reshape: pieces are flat runs (>>flat) */
  double cost;
  uint64_t *recv, *send; /* bytes per rank (nranks entries) */
  int64_t local_elems;   /* the planned rank's local copy (rank plans), max over ranks (whole) */
  int msgs;              /* Send/Recv: messages of the planned rank (max over ranks) */
} sk__rd_step;

/* Elements of a piece of step s (a box, or a flat count: sk__rd_meet). */
static int64_t sk__rd_piece_elems(const sk__rd_step *s, const sk__rd_box *box) {
  return s->flat ? box->hi[0] : sk__rd_vol(box, s->a.ndims);
}

struct sk_redist_plan {
  sk_redist_desc desc;
  int rank;   /* planned rank or SK_REDIST_ALL_RANKS */
  int nranks; /* entries of the per-step byte arrays: 1 or devices */
  int nsteps;
  sk__rd_step steps[SK__RD_MAX_STEPS];
  sk_redist_ms_cost ms;
  bool ms_fallback;
};

SK_API const char *sk_redist_op_name(sk_redist_op op) {
  static const char *const names[] = {"Local",     "AllGather", "AllToAll", "ReduceScatter",
                                      "AllReduce", "SendRecv",  "Reshape"};
  return (int)op >= 0 && op < SK_REDIST_OP_COUNT ? names[op] : "invalid";
}

static int sk__rd_plan_slot(const sk_redist_plan *p, int rank) { return p->rank == SK_REDIST_ALL_RANKS ? rank : 0; }

static sk_result sk__rd_new_step(sk_redist_plan *p, sk__rd_step **out, sk_error *err) {
  *out = NULL;
  if (p->nsteps == SK__RD_MAX_STEPS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the plan needs more than %d steps", SK__RD_MAX_STEPS);
  sk__rd_step *s = &p->steps[p->nsteps];
  memset(s, 0, sizeof *s);
  s->recv = (uint64_t *)sk__calloc(&p->desc.allocator, sizeof(uint64_t) * (size_t)p->nranks, 16);
  s->send = (uint64_t *)sk__calloc(&p->desc.allocator, sizeof(uint64_t) * (size_t)p->nranks, 16);
  if (!s->recv || !s->send) {
    sk__free(&p->desc.allocator, s->recv), sk__free(&p->desc.allocator, s->send);
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating a plan step");
  }
  p->nsteps++;
  s->gsize = 1;
  *out = s;
  return SK_OK;
}

static void sk__rd_axes_names(const sk_mesh *m, uint32_t mask, char *buf, size_t cap) { sk__rd_axes_text(m, mask, buf, cap); }

/* Step s's words: the caller's detail, else what the exchange of class c is. */
static void sk__rd_exchange_detail(sk__rd_step *s, const sk_layout *a, const sk__rd_class *c, bool flat,
                                   const char *detail) {
  if (detail)
    snprintf(s->detail, sizeof s->detail, "%s", detail);
  else if (c->op == SK_REDIST_LOCAL)
    snprintf(s->detail, sizeof s->detail, "slice/copy, no communication");
  else if (c->op == SK_REDIST_SENDRECV)
    snprintf(s->detail, sizeof s->detail, "point-to-point, each piece from the nearest holder%s",
             flat ? ", over flat row-major runs (no common shape carries both layouts)" : "");
  else {
    char ax[SK_MAX_AXES * SK_AXIS_NAME_MAX];
    sk__rd_axes_names(&a->mesh, c->axes, ax, sizeof ax);
    sk__rd_out o;
    sk__rd_out_init(&o, s->detail, sizeof s->detail);
    sk__rd_put(&o, "group %s (%d ranks), count %lld%s", ax, c->gsize, (long long)c->count,
               c->op == SK_REDIST_ALLTOALL ? " per peer" : " per rank");
  }
}

/* Rank rk's traffic in the exchange a -> b of class c: from all (every rank's, by
   sk__rd_traffic_all) when set, else from the class or rk's own pieces. */
static sk_result sk__rd_rank_traffic(const sk_redist_plan *p, const sk_layout *a, const sk_layout *b,
                                     const sk__rd_class *c, const sk__rd_traffic *all, int rk, sk__rd_traffic *out) {
  memset(out, 0, sizeof *out);
  if (all) {
    *out = all[rk];
  } else if (c->op == SK_REDIST_ALLGATHER || c->op == SK_REDIST_ALLTOALL) {
    out->recv = out->send = (int64_t)(c->gsize - 1) * c->count;
    out->local = c->count;
  } else if (c->op == SK_REDIST_LOCAL) {
    sk__rd_box T;
    sk__rd_slice_box(b, rk, &T);
    out->local = sk__rd_vol(&T, b->ndims);
  } else {
    sk__rd_lists L;
    if (sk__rd_pieces(a, b, rk, &out->recv, &out->send, &L, &p->desc.allocator) != SK_OK)
      return SK_ERR_OUT_OF_MEMORY;
    out->nrecv = L.nrecv, out->nsend = L.nsend, out->local = L.nlocal;
    sk__rd_lists_free(&L, &p->desc.allocator);
  }
  return SK_OK;
}

/* Adds the minimal exchange a -> b (non-partial) as one step; name NULL = the op's name. */
static sk_result sk__rd_add_exchange(sk_redist_plan *p, const sk_layout *a, const sk_layout *b, const char *name,
                                     const char *detail, sk_error *err) {
  sk__rd_step *s;
  sk_result r = sk__rd_new_step(p, &s, err);
  if (r || !s) return r ? r : SK_ERR_INTERNAL;
  sk__rd_class c;
  bool flat = sk__rd_reshaping(a, b);
  if (flat)
    sk__rd_classify_flat(a, b, &c);
  else
    sk__rd_classify(a, b, &c);
  s->flat = flat;
  s->op = c.op;
  s->axes = c.axes;
  s->gsize = c.gsize;
  s->count = c.count;
  s->a = *a;
  s->b = *b;
  snprintf(s->name, sizeof s->name, "%s", name ? name : sk_redist_op_name(c.op));
  sk__rd_exchange_detail(s, a, &c, flat, detail);
  size_t es = sk_dtype_size(p->desc.dtype);
  const sk_redist_cost *k = &p->desc.cost;
  int r0 = p->rank == SK_REDIST_ALL_RANKS ? 0 : p->rank, r1 = p->rank == SK_REDIST_ALL_RANKS ? a->mesh.size : p->rank + 1;
  /* all ranks of an exchange on boxes: every rank's traffic in one walk, not a scan of each group */
  sk__rd_traffic *all = NULL, tr;
  if (c.op == SK_REDIST_SENDRECV && !flat && p->rank == SK_REDIST_ALL_RANKS && a->mesh.size == b->mesh.size) {
    all = (sk__rd_traffic *)sk__alloc(&p->desc.allocator, sizeof *all * (size_t)a->mesh.size, 16);
    if (!all || sk__rd_traffic_all(a, b, all, &p->desc.allocator) != SK_OK) {
      sk__free(&p->desc.allocator, all);
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating every rank's traffic");
    }
  }
  double worst = 0;
  for (int rk = r0; rk < r1; rk++) {
    if (sk__rd_rank_traffic(p, a, b, &c, all, rk, &tr) != SK_OK) {
      sk__free(&p->desc.allocator, all);
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating piece lists");
    }
    int64_t rv = tr.recv, sv = tr.send, loc = tr.local;
    int msgs = tr.nrecv > tr.nsend ? tr.nrecv : tr.nsend;
    int slot = sk__rd_plan_slot(p, rk);
    s->recv[slot] = (uint64_t)rv * es;
    s->send[slot] = (uint64_t)sv * es;
    if (loc > s->local_elems) s->local_elems = loc;
    if (msgs > s->msgs) s->msgs = msgs;
    double t;
    double rb = (double)rv * (double)es, sb = (double)sv * (double)es;
    switch (c.op) {
      case SK_REDIST_ALLGATHER:
      case SK_REDIST_ALLTOALL: t = (c.gsize - 1) * k->alpha + rb * k->beta; break;
      case SK_REDIST_LOCAL: t = (double)loc * (double)es * k->gamma; break;
      default: t = msgs * k->alpha + (rb > sb ? rb : sb) * k->beta + (double)loc * (double)es * k->gamma; break;
    }
    if (t > worst) worst = t;
  }
  sk__free(&p->desc.allocator, all);
  s->cost = worst;
  return SK_OK;
}

/* A local Reshape a -> b (MindSpore mode): every rank's slice of b holds the same flat elements
   as its slice of a, on another shape; no bytes move between ranks, the copy costs gamma. */
static sk_result sk__rd_add_reshape(sk_redist_plan *p, const sk_layout *a, const sk_layout *b, sk_error *err) {
  sk__rd_step *s;
  sk_result r = sk__rd_new_step(p, &s, err);
  if (r || !s) return r ? r : SK_ERR_INTERNAL;
  int64_t sh[SK_MAX_DIMS] = {0};
  sk_layout_slice_shape(b, sh);
  s->op = SK_REDIST_RESHAPE;
  s->flat = true; /* executed over flat row-major runs (>>flat), whatever the two shapes */
  s->a = *a;
  s->b = *b;
  s->local_elems = sk__rd_slice_elems(b);
  snprintf(s->name, sizeof s->name, "Reshape");
  sk__rd_out o;
  sk__rd_out_init(&o, s->detail, sizeof s->detail);
  sk__rd_put(&o, "local, slice to [");
  for (int d = 0; d < b->ndims; d++) sk__rd_put(&o, "%s%lld", d ? "," : "", (long long)sh[d]);
  sk__rd_put(&o, "]");
  s->cost = (double)s->local_elems * (double)sk_dtype_size(p->desc.dtype) * p->desc.cost.gamma;
  return SK_OK;
}

/* Every rank's slice is the same box under a and b. */
static bool sk__rd_same_slices(const sk_layout *a, const sk_layout *b) {
  for (int r = 0; r < a->mesh.size; r++) {
    sk__rd_box x, y;
    sk__rd_slice_box(a, r, &x);
    sk__rd_slice_box(b, r, &y);
    if (!sk__rd_box_eq(&x, &y, a->ndims)) return false;
  }
  return true;
}

/* >>partial -- one reduction over the whole partial group (rank order = sk_comm's order) */
static sk_result sk__rd_add_reduce(sk_redist_plan *p, const sk_layout *f, const sk_layout *t, uint32_t P,
                                   sk_layout *mid, sk_error *err) {
  const sk_mesh *m = &f->mesh;
  bool same_mesh = f->mesh.naxes == t->mesh.naxes && !sk__rd_reshaping(f, t);
  for (int k = 0; same_mesh && k < m->naxes; k++) same_mesh = f->mesh.dims[k] == t->mesh.dims[k];
  uint32_t Ps = same_mesh ? (P & sk_layout_used_axes(t)) : 0;
  sk_redist_op op = SK_REDIST_ALLREDUCE;
  sk_layout L = *f;
  if (Ps) {
    /* the scattered layout: P's axes appended (minor) to the dims where the target uses them,
       the others after the last of those */
    sk_dim_map map[SK_MAX_DIMS];
    memcpy(map, f->map, sizeof map);
    int last = -1;
    for (int d = 0; d < t->ndims; d++)
      for (int j = 0; j < t->map[d].naxes; j++) {
        int a = t->map[d].axes[j];
        if (P & (1u << a)) map[d].axes[map[d].naxes++] = a, last = d;
      }
    for (int a = 0; a < m->naxes; a++)
      if ((P & ~Ps) & (1u << a)) map[last].axes[map[last].naxes++] = a;
    if (sk_layout_init(&L, m, f->ndims, f->shape, map, NULL) == SK_OK)
      op = SK_REDIST_REDUCE_SCATTER;
    else
      L = *f;
  }
  sk__rd_step *s;
  sk_result r = sk__rd_new_step(p, &s, err);
  if (r || !s) return r ? r : SK_ERR_INTERNAL;
  int g = 1;
  for (int k = 0; k < m->naxes; k++)
    if (P & (1u << k)) g *= m->dims[k];
  s->op = op;
  s->partial = true;
  s->axes = P;
  s->gsize = g;
  s->a = *f;
  s->b = L;
  int64_t n = sk__rd_slice_elems(f);
  s->count = op == SK_REDIST_REDUCE_SCATTER ? n / g : n;
  snprintf(s->name, sizeof s->name, "%s", sk_redist_op_name(op));
  char ax[SK_MAX_AXES * SK_AXIS_NAME_MAX];
  sk__rd_axes_names(m, P, ax, sizeof ax);
  sk__rd_out o;
  sk__rd_out_init(&o, s->detail, sizeof s->detail);
  sk__rd_put(&o, "sum of partials over %s (%d ranks, rank order), count %lld per rank", ax, g, (long long)s->count);
  size_t es = sk_dtype_size(p->desc.dtype);
  uint64_t bytes = (uint64_t)(g - 1) * (uint64_t)s->count * es;
  for (int i = 0; i < p->nranks; i++) s->recv[i] = s->send[i] = bytes;
  const sk_redist_cost *k = &p->desc.cost;
  double nb = (double)n * (double)es, fr = (double)(g - 1) / g;
  if (op == SK_REDIST_REDUCE_SCATTER)
    s->cost = (g - 1) * k->alpha + fr * nb * (k->beta + k->gamma);
  else
    s->cost = 2 * (g - 1) * k->alpha + 2 * fr * nb * k->beta + fr * nb * k->gamma;
  *mid = L;
  return SK_OK;
}

/* Both layouts on the world's device count (sk_layout_to_devices: a repeat axis on the left of
   the smaller mesh), and the partial mask on the aligned from mesh. */
static sk_result sk__rd_align_devices(const sk_redist_desc *d, sk_layout *f, sk_layout *t, uint32_t *P,
                                      sk_error *err) {
  int n = sk__rd_devices(d);
  sk_error e;
  /* the message says which layout: sk_layout_to_devices cannot ("no room for the repeat axis") */
  if (sk_layout_to_devices(&d->from, n, f, &e))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "from layout on %d devices: %s", n, e.msg);
  if (sk_layout_to_devices(&d->to, n, t, &e))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "to layout on %d devices: %s", n, e.msg);
  *P = d->partial << (f->mesh.naxes - d->from.mesh.naxes);
  return SK_OK;
}

/* Whether every rank's slice under `fine` (a unification of `coarse`) starts, ends and counts
   as under `coarse`, in flat indices. sk_layout_unify promises the same elements; both are
   boxes, and a box's row-major order is increasing flat order, so the same elements also come
   in the same order: the caller's buffers serve the unified layouts unchanged. Checked anyway,
   O(devices * dims): a failure takes the flat path. */
static bool sk__rd_same_elements(const sk_layout *coarse, const sk_layout *fine) {
  for (int r = 0; r < coarse->mesh.size; r++) {
    sk__rd_runs a, b;
    sk__rd_runs_init(&a, coarse, r);
    sk__rd_runs_init(&b, fine, r);
    if (a.n * a.len != b.n * b.len || a.flat != b.flat) return false;
    int64_t alast = 0, blast = 0; /* the last run's start: the first's plus the odometer's span */
    for (int d = 0; d < a.inner; d++) alast += (a.ext[d] - 1) * a.st[d];
    for (int d = 0; d < b.inner; d++) blast += (b.ext[d] - 1) * b.st[d];
    if (alast + a.len != blast + b.len) return false;
  }
  return true;
}

/* The minimal move a -> b (same device count): on their shape, or across a reshape on their
   unification (one mesh, one shape) when there is one, else over flat runs. */
static sk_result sk__rd_add_move(sk_redist_plan *p, const sk_layout *a, const sk_layout *b, sk_error *err) {
  if (!sk__rd_reshaping(a, b)) return sk__rd_add_exchange(p, a, b, NULL, NULL, err);
  sk_layout_unified u;
  if (sk_layout_unify(a, b, &u, NULL) == SK_OK && u.expandable && !sk__rd_reshaping(&u.from, &u.to) &&
      sk__rd_same_elements(a, &u.from) && sk__rd_same_elements(b, &u.to))
    return sk__rd_add_exchange(p, &u.from, &u.to, NULL, NULL, err);
  return sk__rd_add_exchange(p, a, b, NULL, NULL, err);
}

/* MindSpore mode (sk_redist_ms.h): devices aligned, the operators inferred there, each one a
   step through this sink (an exchange run as the minimal move between its layouts, or a local
   Reshape), MindSpore's cost into p->ms. */
static sk_result sk__rd_ms_exchange(void *plan, const sk_layout *a, const sk_layout *b, const char *name,
                                    const char *detail, sk_error *err) {
  return sk__rd_add_exchange((sk_redist_plan *)plan, a, b, name, detail, err);
}

static sk_result sk__rd_ms_reshape(void *plan, const sk_layout *a, const sk_layout *b, sk_error *err) {
  return sk__rd_add_reshape((sk_redist_plan *)plan, a, b, err);
}

static sk_result sk__rd_plan_ms(sk_redist_plan *p, sk_error *err) {
  sk_layout f, t;
  uint32_t P = 0; /* no partial axes in MindSpore mode (sk__rd_check_desc) */
  sk_result r = sk__rd_align_devices(&p->desc, &f, &t, &P, err);
  if (r) return r;
  sk__ms_sink sink = {p, sk__rd_ms_exchange, sk__rd_ms_reshape};
  return sk__ms_plan(&f, &t, p->desc.mode == SK_REDIST_MINDSPORE, &sink, &p->ms, &p->ms_fallback, err);
}

/* Minimal mode: devices aligned, partial sums reduced first, then one minimal move (none when
   the reduction already left every rank its target slice). */
static sk_result sk__rd_plan_minimal(sk_redist_plan *p, sk_error *err) {
  sk_layout f, t, mid;
  uint32_t P = 0;
  sk_result r = sk__rd_align_devices(&p->desc, &f, &t, &P, err);
  if (r) return r;
  if (P) {
    if ((r = sk__rd_add_reduce(p, &f, &t, P, &mid, err))) return r;
    if (!sk__rd_reshaping(&mid, &t) && sk__rd_same_slices(&mid, &t)) return SK_OK;
    f = mid;
  }
  return sk__rd_add_move(p, &f, &t, err);
}

/* >>plan -- public */
SK_API sk_result sk_redist_plan_create(const sk_redist_desc *desc, int rank, sk_redist_plan **plan, sk_error *err) {
  if (!plan) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan (the output pointer) is NULL");
  *plan = NULL;
  sk_result r = sk__rd_check_desc(desc, err);
  if (r) return r;
  int N = sk__rd_devices(desc);
  if (rank != SK_REDIST_ALL_RANKS && (rank < 0 || rank >= N))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank %d out of range [0, %d) (or SK_REDIST_ALL_RANKS)", rank, N);
  sk_redist_plan *p = (sk_redist_plan *)sk__calloc(&desc->allocator, sizeof *p, 64);
  if (!p) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating a plan (%zu bytes)", sizeof *p);
  p->desc = *desc;
  p->desc.cost.alpha = SK__DEF(desc->cost.alpha, 10e-6);
  p->desc.cost.beta = SK__DEF(desc->cost.beta, 1e-10);
  p->desc.cost.gamma = SK__DEF(desc->cost.gamma, 5e-11);
  p->rank = rank;
  p->nranks = rank == SK_REDIST_ALL_RANKS ? N : 1;
  r = desc->mode != SK_REDIST_MINIMAL ? sk__rd_plan_ms(p, err) : sk__rd_plan_minimal(p, err);
  if (r) {
    sk_redist_plan_destroy(p);
    return r;
  }
  *plan = p;
  return SK_OK;
}

SK_API void sk_redist_plan_destroy(sk_redist_plan *p) {
  if (!p) return;
  sk_allocator a = p->desc.allocator;
  for (int i = 0; i < p->nsteps; i++) sk__free(&a, p->steps[i].recv), sk__free(&a, p->steps[i].send);
  sk__free(&a, p);
}

SK_API int sk_redist_plan_nsteps(const sk_redist_plan *p) { return p ? p->nsteps : 0; }
SK_API int sk_redist_plan_rank(const sk_redist_plan *p) { return p ? p->rank : SK_REDIST_ALL_RANKS; }
SK_API const sk_redist_desc *sk_redist_plan_desc(const sk_redist_plan *p) { return p ? &p->desc : NULL; }

SK_API sk_result sk_redist_plan_step(const sk_redist_plan *p, int i, sk_redist_step_info *info, sk_error *err) {
  if (!p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan is NULL");
  if (!info) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "info is NULL");
  if (i < 0 || i >= p->nsteps)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "step %d out of range [0, %d)", i, p->nsteps);
  const sk__rd_step *s = &p->steps[i];
  memset(info, 0, sizeof *info);
  info->op = s->op;
  info->name = s->name;
  info->detail = s->detail;
  info->group_axes = s->axes;
  info->group_size = s->gsize;
  info->count = (size_t)s->count;
  info->from = &s->a;
  info->to = &s->b;
  info->from_partial = s->partial;
  info->cost = s->cost;
  return SK_OK;
}

SK_API sk_result sk_redist_plan_bytes(const sk_redist_plan *p, int step, int rank, uint64_t *recv_bytes,
                                      uint64_t *send_bytes, sk_error *err) {
  if (!p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan is NULL");
  if (step < -1 || step >= p->nsteps)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "step %d out of range [-1, %d)", step, p->nsteps);
  int slot;
  if (p->rank == SK_REDIST_ALL_RANKS) {
    if (rank < 0 || rank >= p->nranks)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank %d out of range [0, %d)", rank, p->nranks);
    slot = rank;
  } else {
    if (rank != p->rank)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "this plan is for rank %d only, not rank %d", p->rank, rank);
    slot = 0;
  }
  uint64_t rv = 0, sv = 0;
  for (int i = 0; i < p->nsteps; i++)
    if (step == -1 || step == i) rv += p->steps[i].recv[slot], sv += p->steps[i].send[slot];
  if (recv_bytes) *recv_bytes = rv;
  if (send_bytes) *send_bytes = sv;
  return SK_OK;
}

/* Rank r's busier side of Send/Recv step s (its pieces L): its sends' or its receives' summed
   p2p prices. Allocates nothing (an executor prices inside a step). */
static sk_result sk__rd_p2p_price(const sk__rd_step *s, const sk__rd_lists *L, int r, const sk_cluster *cl,
                                  const int *world, sk_dtype dt, double *us, sk_error *err) {
  double side[2] = {0, 0};
  sk_result res = SK_OK;
  for (int k = 0; !res && k < L->nsend + L->nrecv; k++) {
    bool send = k < L->nsend;
    const sk__rd_piece *pc = send ? &L->send[k] : &L->recv[k - L->nsend];
    int me = world ? world[r] : r, peer = world ? world[pc->peer] : pc->peer;
    double t = 0;
    res = sk_cluster_p2p_us(cl, send ? me : peer, send ? peer : me, (size_t)sk__rd_piece_elems(s, &pc->box), dt, &t, err);
    side[send ? 0 : 1] += t;
  }
  *us = side[0] > side[1] ? side[0] : side[1];
  return res;
}

/* Collective step s on the group mem[0..n) (mesh ranks; overwritten with the members' world
   ranks in ascending order, as the cluster prices a group), priced as that collective.
   Allocates nothing. */
static sk_result sk__rd_coll_price(const sk__rd_step *s, int *mem, int n, const sk_cluster *cl, const int *world,
                                   sk_dtype dt, double *us, sk_error *err) {
  for (int i = 0; i < n; i++) {
    int v = world ? world[mem[i]] : mem[i], j = i;
    for (; j > 0 && mem[j - 1] > v; j--) mem[j] = mem[j - 1]; /* insertion: mem[0..i) already world ranks */
    mem[j] = v;
  }
  sk_coll_algo algo;
  sk_coll_kind kind = s->op == SK_REDIST_ALLGATHER ? SK_COLL_ALLGATHER : SK_COLL_ALLTOALL;
  return sk_cluster_coll_us(cl, kind, (size_t)s->count, dt, n, mem, &algo, us, err);
}

SK_API sk_result sk_redist_step_clock_us(const sk_redist_plan *p, int step, int rank, const sk_cluster *cluster,
                                         const int *world, double *us, sk_error *err) {
  if (!p || !cluster || !us) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: plan, cluster and us must be set");
  if (step < 0 || step >= p->nsteps)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: step %d out of range [0, %d)", step, p->nsteps);
  if (rank < 0 || rank >= sk__rd_devices(&p->desc))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: rank %d out of range [0, %d)", rank, sk__rd_devices(&p->desc));
  const sk__rd_step *s = &p->steps[step];
  const sk_allocator *al = &p->desc.allocator;
  sk_result res = SK_OK;
  *us = 0;
  if (s->op == SK_REDIST_SENDRECV) {
    sk__rd_lists L;
    if (sk__rd_pieces(&s->a, &s->b, rank, NULL, NULL, &L, al))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "redist: pricing step '%s': out of memory", s->name);
    res = sk__rd_p2p_price(s, &L, rank, cluster, world, p->desc.dtype, us, err);
    sk__rd_lists_free(&L, al);
  } else if (s->op == SK_REDIST_ALLGATHER || s->op == SK_REDIST_ALLTOALL) {
    int *mem = (int *)sk__alloc(al, sizeof(int) * (size_t)s->gsize, 16), n = 0;
    if (!mem) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "redist: pricing step '%s': out of memory", s->name);
    sk_mesh_group(&s->a.mesh, rank, s->axes, mem, s->gsize, &n, NULL);
    res = sk__rd_coll_price(s, mem, n, cluster, world, p->desc.dtype, us, err);
    sk__free(al, mem);
  }
  return res;
}

/* >>busiest -- sk_redist_step_busiest_us: every rank's sk_redist_step_clock_us at once.
   A Send/Recv step is walked receiver by receiver: rank q's holders are listed from per-dim
   block arithmetic on A (its target interval on dim d meets A-blocks j0..j1; block j's holder
   has j's mixed-radix digits on the dim's axes and q's own coordinates on A's unused axes, the
   choice sk__rd_pieces makes), never by scanning q's group. A piece q receives from p is the
   piece p sends to q (p is in q's group iff q is in p's), so its price, computed once, is added
   to q's receive side and to p's send side; receivers run in ascending order and each one's
   holders are sorted, so every side sums the very terms sk__rd_p2p_price sums, in its order.
   The walk, sk__rd_holders_of, sits in >>pieces: all-ranks plans count their traffic with it.
   On a flat cluster the walk is replaced by per-dim counts (>>busiest on a flat cluster). */

/* sk_cluster_p2p_us of one piece inside a walk whose cluster and dtype are checked once: the
   same link choice and sk_link_cost_us call, without re-checking the cluster per piece (which
   dominated pricing an exchange of millions of pieces). The last price is kept, as consecutive
   pieces mostly share their link and size. Ranks out of the topology go to sk_cluster_p2p_us,
   which says so. */
typedef struct sk__rd_p2p_memo {
  const sk_link_model *link;
  int64_t elems;
  double us;
} sk__rd_p2p_memo;

static sk_result sk__rd_p2p_piece_us(const sk_cluster *cl, int src, int dst, int64_t elems, sk_dtype dt,
                                     sk__rd_p2p_memo *memo, double *us, sk_error *err) {
  const sk_topology *t = &cl->topology;
  int devices = t->nodes ? t->nodes * t->per_node : SK_TOPOLOGY_MAX_DEVICES;
  if (src < 0 || src >= devices || dst < 0 || dst >= devices)
    return sk_cluster_p2p_us(cl, src, dst, (size_t)elems, dt, us, err);
  const sk_link_model *l = !t->nodes ? &cl->link : src / t->per_node == dst / t->per_node ? &t->intra : &t->inter;
  if (memo->link != l || memo->elems != elems)
    memo->link = l, memo->elems = elems, memo->us = sk_link_cost_us(l, SK_COLL_SEND, (size_t)elems, dt, 2);
  *us = memo->us;
  return SK_OK;
}

/* >>busiest on a flat cluster: every piece costs alpha + bytes / bandwidth (sk_link_cost_us's
   p2p line, one link for every pair), so a side's price is its piece count times alpha plus its
   elements' bytes over the bandwidth, and both counts come from per-dim arithmetic, no piece
   listed. A receiver's holders are the product of its per-dim block runs (>>busiest above),
   less itself when it holds a piece of its own target. A sender's receivers are the ranks
   sharing its coordinates on A's unused axes whose target boxes meet its block: when the two
   meshes refine to common "fine" axes (their strides form a chain), that group is a product
   over fine axes and each target dim reads only its own, so the sum over the group of a
   product over dims is the product over dims of per-dim sums, read from per-dim tables (at
   most 3 x dims x devices entries) as the ranks are counted up: O(devices * (dims + axes)). */
#define SK__RD_FINE_MAX (2 * SK_MAX_AXES)

typedef struct sk__rd_fine_dim {
  int ndig;                            /* fine digits of B's block index on this dim, major first */
  int axis[SK__RD_FINE_MAX];           /* each digit's fine axis */
  int radix[SK__RD_FINE_MAX];          /* its size */
  bool fixed[SK__RD_FINE_MAX];         /* on an axis A leaves unused: a receiver has the sender's */
  int64_t free_after[SK__RD_FINE_MAX]; /* product of the free digits' radices after this one */
  int64_t free_all;                    /* product of every free digit's radix */
  int64_t combos;                      /* product of every fixed digit's radix */
  int64_t block, split;                /* B's block length and blocks on this dim */
  int64_t a_block, a_split;            /* A's */
} sk__rd_fine_dim;

/* What fine axis i is to the two layouts: the dim it cuts under A and under B (-1: none), its
   weight in that dim's block index under each, and among the B dim's fixed digits. */
typedef struct sk__rd_fine_role {
  int dim_a, dim_b;
  int64_t w_a, w_b, w_fixed;
} sk__rd_fine_role;

typedef struct sk__rd_fine {
  int naxes; /* fine axes, the minor (stride 1) first */
  int64_t stride[SK__RD_FINE_MAX + 1];
  int size[SK__RD_FINE_MAX];
  int64_t free_rest; /* free fine axes no target dim reads: receivers alike for every sender */
  bool idle[SK__RD_FINE_MAX]; /* read by neither layout: ranks apart only there price alike */
  sk__rd_fine_role role[SK__RD_FINE_MAX];
  sk__rd_fine_dim dim[SK_MAX_DIMS];
} sk__rd_fine;

/* Mesh m's strides (1, then times each axis's size, the minor axis first) merged into the
   sorted set b[0..*n). */
static void sk__rd_fine_strides(const sk_mesh *m, int64_t *b, int *n) {
  int64_t s = 1;
  for (int k = m->naxes; k >= 0; k--) {
    int i = 0;
    while (i < *n && b[i] < s) i++;
    if (i == *n || b[i] != s) {
      for (int j = *n; j > i; j--) b[j] = b[j - 1];
      b[i] = s, (*n)++;
    }
    if (k > 0) s *= m->dims[k - 1];
  }
}

/* The fine axes [*lo, *hi) of mesh axis k of m: those between its stride and the next. */
static void sk__rd_fine_span(const sk__rd_fine *f, const sk_mesh *m, int k, int *lo, int *hi) {
  int64_t s = 1;
  for (int j = m->naxes - 1; j > k; j--) s *= m->dims[j];
  for (*lo = 0; f->stride[*lo] < s;) (*lo)++;
  for (*hi = *lo; *hi < f->naxes && f->stride[*hi + 1] <= s * m->dims[k];) (*hi)++;
}

/* B's block digits on dim d over the fine axes (fixed: which lie on A's unused axes). */
static void sk__rd_fine_digits(sk__rd_fine *f, const sk_layout *B, int d, const bool *fixed, bool *read) {
  sk__rd_fine_dim *fd = &f->dim[d];
  fd->block = B->shape[d] / sk_layout_split_count(B, d);
  for (int j = 0; j < B->map[d].naxes; j++) {
    int lo, hi;
    sk__rd_fine_span(f, &B->mesh, B->map[d].axes[j], &lo, &hi);
    for (int i = hi - 1; i >= lo; i--, fd->ndig++)
      fd->axis[fd->ndig] = i, fd->radix[fd->ndig] = f->size[i], fd->fixed[fd->ndig] = fixed[i], read[i] = true;
  }
  fd->split = B->shape[d] / fd->block;
  fd->free_all = fd->combos = 1;
  int64_t w = 1;
  for (int i = fd->ndig - 1; i >= 0; w *= fd->radix[i--]) {
    sk__rd_fine_role *ro = &f->role[fd->axis[i]];
    ro->dim_b = d, ro->w_b = w;
    fd->free_after[i] = fd->free_all;
    if (fd->fixed[i])
      ro->w_fixed = fd->combos, fd->combos *= fd->radix[i];
    else
      fd->free_all *= fd->radix[i];
  }
}

/* A's block index on dim d over the fine axes: each one's weight (the last listed axis's
   minor fine axis the least significant digit). */
static void sk__rd_fine_a_digits(sk__rd_fine *f, const sk_layout *A, int d) {
  sk__rd_fine_dim *fd = &f->dim[d];
  fd->a_split = sk_layout_split_count(A, d), fd->a_block = A->shape[d] / fd->a_split;
  int64_t w = 1;
  for (int j = A->map[d].naxes - 1; j >= 0; j--) {
    int lo, hi;
    sk__rd_fine_span(f, &A->mesh, A->map[d].axes[j], &lo, &hi);
    for (int i = lo; i < hi; w *= f->size[i++]) f->role[i].dim_a = d, f->role[i].w_a = w;
  }
}

/* The common refinement of A's and B's meshes with B's per-dim digits on it; false when the
   meshes' strides do not form a chain (then there is none: the caller walks the pieces). */
static bool sk__rd_fine_build(const sk_layout *A, const sk_layout *B, sk__rd_fine *f) {
  int64_t b[2 * SK_MAX_AXES + 2];
  int n = 0;
  sk__rd_fine_strides(&A->mesh, b, &n), sk__rd_fine_strides(&B->mesh, b, &n);
  memset(f, 0, sizeof *f);
  if (n < 1) return false; /* not a checked mesh's (it has axes): keeps b[n - 1] defined */
  f->naxes = n - 1;
  for (int i = 0; i + 1 < n; i++) {
    if (b[i + 1] % b[i]) return false;
    f->stride[i] = b[i], f->size[i] = (int)(b[i + 1] / b[i]);
  }
  f->stride[n - 1] = b[n - 1];
  bool fixed[SK__RD_FINE_MAX] = {false}, read[SK__RD_FINE_MAX] = {false};
  uint32_t used = sk_layout_used_axes(A);
  for (int k = 0; k < A->mesh.naxes; k++) {
    int lo, hi;
    sk__rd_fine_span(f, &A->mesh, k, &lo, &hi);
    for (int i = lo; i < hi; i++) fixed[i] = !(used & (1u << k));
  }
  for (int i = 0; i < f->naxes; i++) f->role[i].dim_a = f->role[i].dim_b = -1;
  for (int d = 0; d < B->ndims; d++) sk__rd_fine_digits(f, B, d, fixed, read), sk__rd_fine_a_digits(f, A, d);
  f->free_rest = 1;
  for (int i = 0; i < f->naxes; i++) {
    if (!fixed[i] && !read[i]) f->free_rest *= f->size[i];
    f->idle[i] = fixed[i] && !read[i];
  }
  return true;
}

/* Block indices t < x on fd whose fixed digits are v's (v: a value per digit). */
static int64_t sk__rd_fine_below(const sk__rd_fine_dim *fd, const int *v, int64_t x) {
  int dig[SK__RD_FINE_MAX];
  for (int i = fd->ndig - 1; i >= 0; i--) dig[i] = (int)(x % fd->radix[i]), x /= fd->radix[i];
  if (x) return fd->free_all; /* x is past the last block */
  int64_t n = 0;
  for (int i = 0; i < fd->ndig; i++) {
    if (!fd->fixed[i]) {
      n += dig[i] * fd->free_after[i];
      continue;
    }
    if (v[i] < dig[i]) n += fd->free_after[i];
    if (v[i] != dig[i]) return n;
  }
  return n;
}

static bool sk__rd_fine_allowed(const sk__rd_fine_dim *fd, const int *v, int64_t t) {
  for (int i = fd->ndig - 1; i >= 0; i--) {
    if (fd->fixed[i] && t % fd->radix[i] != v[i]) return false;
    t /= fd->radix[i];
  }
  return true;
}

/* Elements of S's dim-d interval [lo, hi) that the allowed target blocks meet, and how many of
   them meet it (*n): the inner blocks whole, the two end ones clipped. */
static int64_t sk__rd_fine_meet(const sk__rd_fine_dim *fd, const int *v, int64_t lo, int64_t hi, int64_t *n) {
  int64_t bl = fd->block, t0 = lo / bl, t1 = (hi - 1) / bl;
  *n = sk__rd_fine_below(fd, v, t1 + 1) - sk__rd_fine_below(fd, v, t0);
  if (t0 == t1) return *n ? hi - lo : 0;
  int64_t e = *n * bl;
  if (sk__rd_fine_allowed(fd, v, t0)) e -= lo - t0 * bl;
  if (sk__rd_fine_allowed(fd, v, t1)) e -= (t1 + 1) * bl - hi;
  return e;
}

/* Whether step s's busiest price can be counted per dim: a flat cluster (every pair one link),
   world ranks the cluster accepts, a valid dtype, and meshes with a common refinement (f). */
static bool sk__rd_line_applies(const sk__rd_step *s, const sk_cluster *cl, const int *world, sk_dtype dt,
                                sk__rd_fine *f) {
  if (cl->topology.nodes || !sk_dtype_valid(dt) || s->a.ndims != s->b.ndims) return false;
  for (int r = 0; world && r < s->a.mesh.size; r++)
    if (world[r] < 0 || world[r] >= SK_TOPOLOGY_MAX_DEVICES) return false;
  return sk__rd_fine_build(&s->a, &s->b, f);
}

/* A flat-cluster count's per-dim tables, indexed by block: the A-blocks a receiver's target
   block t meets on dim d (recv[d][t]); a sender's receivers and their elements on dim d
   (sent_n, sent_e[d][a * combos + x]: its A block a, its values x of the dim's fixed digits). */
typedef struct sk__rd_line_tables {
  int64_t *recv[SK_MAX_DIMS], *sent_n[SK_MAX_DIMS], *sent_e[SK_MAX_DIMS];
  int64_t *mem;
} sk__rd_line_tables;

/* Fills tb (one allocation: at most 3 x dims x devices entries, as A's blocks on a dim and
   the values of the axes A leaves unused lie on different fine axes); false when out of memory. */
static bool sk__rd_line_tables_fill(const sk__rd_fine *f, int nd, sk__rd_line_tables *tb, const sk_allocator *al) {
  size_t total = 0;
  for (int d = 0; d < nd; d++) total += (size_t)(f->dim[d].split + 2 * f->dim[d].a_split * f->dim[d].combos);
  int64_t *at = tb->mem = (int64_t *)sk__alloc(al, sizeof(int64_t) * total, 16);
  if (!at) return false;
  for (int d = 0; d < nd; d++) {
    const sk__rd_fine_dim *fd = &f->dim[d];
    int64_t ab = fd->a_block, bb = fd->block, cells = fd->a_split * fd->combos;
    tb->recv[d] = at, tb->sent_n[d] = at + fd->split, tb->sent_e[d] = at + fd->split + cells;
    at += fd->split + 2 * cells;
    for (int64_t t = 0; t < fd->split; t++) tb->recv[d][t] = ((t + 1) * bb - 1) / ab - t * bb / ab + 1;
    for (int64_t c = 0; c < cells; c++) {
      int v[SK__RD_FINE_MAX] = {0};
      int64_t a = c / fd->combos, x = c % fd->combos;
      for (int i = fd->ndig - 1; i >= 0; i--)
        if (fd->fixed[i]) v[i] = (int)(x % fd->radix[i]), x /= fd->radix[i];
      tb->sent_e[d][c] = sk__rd_fine_meet(fd, v, a * ab, a * ab + ab, &tb->sent_n[d][c]);
    }
  }
  return true;
}

/* The rank at fine coordinates v: pieces n[0] and elements e[0] it receives, n[1] and e[1] it
   sends. Per dim its A block, its B block and its fixed digits' values pick the table cells;
   the piece it keeps (its target meeting its own block) is neither side's. */
static void sk__rd_line_rank(const sk__rd_fine *f, int nd, const sk__rd_line_tables *tb, const int *v, int64_t *n,
                             int64_t *e) {
  int64_t a[SK_MAX_DIMS] = {0}, t[SK_MAX_DIMS] = {0}, x[SK_MAX_DIMS] = {0}, own = 1;
  for (int i = 0; i < f->naxes; i++) {
    const sk__rd_fine_role *ro = &f->role[i];
    if (ro->dim_a >= 0) a[ro->dim_a] += v[i] * ro->w_a;
    if (ro->dim_b >= 0) t[ro->dim_b] += v[i] * ro->w_b, x[ro->dim_b] += v[i] * ro->w_fixed;
  }
  n[0] = e[0] = 1, n[1] = e[1] = f->free_rest;
  for (int d = 0; d < nd; d++) {
    const sk__rd_fine_dim *fd = &f->dim[d];
    int64_t slo = a[d] * fd->a_block, tlo = t[d] * fd->block, cell = a[d] * fd->combos + x[d];
    int64_t lo = slo > tlo ? slo : tlo, hi = slo + fd->a_block < tlo + fd->block ? slo + fd->a_block : tlo + fd->block;
    own *= hi > lo ? hi - lo : 0;
    n[0] *= tb->recv[d][t[d]], e[0] *= fd->block;
    n[1] *= tb->sent_n[d][cell], e[1] *= tb->sent_e[d][cell];
  }
  if (own) n[0]--, e[0] -= own;
  if (own && n[1]) n[1]--, e[1] -= own;
}

/* The busiest side of step s on the flat link l into *us: a side's count of pieces times alpha
   plus its elements' bytes over the bandwidth, as sk_link_cost_us prices each piece (nothing
   when the link is free). Ranks run in order, their fine coordinates counted up; a rank apart
   from an earlier one only on idle axes (its slices, its receivers' and its holders' shifted
   alike: a holder shares its receiver's coordinates on A's unused axes) prices as that one. */
static sk_result sk__rd_line_busiest(const sk__rd_step *s, const sk_link_model *l, sk_dtype dt, const sk__rd_fine *f,
                                     const sk_allocator *al, double *us) {
  *us = 0;
  if (l->gbps <= 0) return SK_OK;
  sk__rd_line_tables tb;
  if (!sk__rd_line_tables_fill(f, s->a.ndims, &tb, al)) return SK_ERR_OUT_OF_MEMORY;
  double us_per_byte = 1e-3 / l->gbps, size = (double)sk_dtype_size(dt), worst = 0;
  int v[SK__RD_FINE_MAX] = {0};
  for (int r = 0; r < s->a.mesh.size; r++) {
    bool alike = false;
    for (int i = 0; i < f->naxes && !alike; i++) alike = f->idle[i] && v[i];
    int64_t n[2] = {0, 0}, e[2] = {0, 0};
    if (!alike) sk__rd_line_rank(f, s->a.ndims, &tb, v, n, e);
    for (int k = 0; k < 2; k++) {
      double t = n[k] ? (double)n[k] * l->alpha_us + (double)e[k] * size * us_per_byte : 0;
      if (t > worst) worst = t;
    }
    for (int i = 0; i < f->naxes && ++v[i] == f->size[i]; i++) v[i] = 0; /* the next rank's coordinates */
  }
  sk__free(al, tb.mem);
  *us = worst;
  return SK_OK;
}

/* Send/Recv step s priced for every rank at once: the busiest rank's busier side. One array of
   send sides and one holder list, whatever the device count. */
static sk_result sk__rd_p2p_busiest(const sk_redist_plan *p, const sk__rd_step *s, const sk_cluster *cl,
                                    const int *world, double *us, sk_error *err) {
  const sk_allocator *al = &p->desc.allocator;
  int N = s->a.mesh.size, gs = sk__rd_group_size(&s->a);
  sk_result res = sk_cluster_check(cl, "cluster", err);
  if (res) return *us = 0, res;
  sk__rd_fine fine;
  if (sk__rd_line_applies(s, cl, world, p->desc.dtype, &fine)) {
    if (sk__rd_line_busiest(s, &cl->link, p->desc.dtype, &fine, al, us))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "redist: pricing step '%s': out of memory", s->name);
    return SK_OK;
  }
  double *send = (double *)sk__calloc(al, sizeof(double) * (size_t)N, 16);
  sk__rd_holder *h = (sk__rd_holder *)sk__alloc(al, sizeof(sk__rd_holder) * (size_t)gs, 16);
  if (!send || !h) res = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "redist: pricing step '%s': out of memory", s->name);
  sk__rd_p2p_memo memo = {NULL, -1, 0};
  double worst = 0;
  for (int q = 0; !res && q < N; q++) {
    int n = sk__rd_holders_of(&s->a, &s->b, q, h), me = world ? world[q] : q;
    double recv = 0;
    for (int i = 0; !res && i < n; i++) {
      double t = 0;
      res = sk__rd_p2p_piece_us(cl, world ? world[h[i].peer] : h[i].peer, me, h[i].elems, p->desc.dtype, &memo, &t, err);
      recv += t, send[h[i].peer] += t;
    }
    if (recv > worst) worst = recv;
  }
  for (int r = 0; !res && r < N; r++)
    if (send[r] > worst) worst = send[r];
  sk__free(al, send), sk__free(al, h);
  *us = res ? 0 : worst;
  return res;
}

/* Collective step s: the dearest group's price, each group priced once (by its member with
   coordinate 0 on every group axis), as every member's sk_redist_step_clock_us is its group's. */
static sk_result sk__rd_coll_busiest(const sk_redist_plan *p, const sk__rd_step *s, const sk_cluster *cl,
                                     const int *world, double *us, sk_error *err) {
  const sk_mesh *m = &s->a.mesh;
  int *mem = (int *)sk__alloc(&p->desc.allocator, sizeof(int) * (size_t)s->gsize, 16);
  if (!mem) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "redist: pricing step '%s': out of memory", s->name);
  sk_result res = SK_OK;
  double worst = 0;
  for (int r = 0; !res && r < m->size; r++) {
    bool first = true;
    for (int k = m->naxes - 1, x = r; k >= 0; x /= m->dims[k], k--)
      if ((s->axes & (1u << k)) && x % m->dims[k]) first = false;
    if (!first) continue;
    int n = 0;
    double t = 0;
    sk_mesh_group(m, r, s->axes, mem, s->gsize, &n, NULL);
    res = sk__rd_coll_price(s, mem, n, cl, world, p->desc.dtype, &t, err);
    if (t > worst) worst = t;
  }
  sk__free(&p->desc.allocator, mem);
  *us = res ? 0 : worst;
  return res;
}

SK_API sk_result sk_redist_step_busiest_us(const sk_redist_plan *p, int step, const sk_cluster *cluster,
                                           const int *world, double *us, sk_error *err) {
  if (!p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: plan is NULL");
  if (!cluster) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: cluster is NULL");
  if (!us) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: us (the output) is NULL");
  if (step < 0 || step >= p->nsteps)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: step %d out of range [0, %d)", step, p->nsteps);
  const sk__rd_step *s = &p->steps[step];
  *us = 0;
  if (s->op == SK_REDIST_ALLGATHER || s->op == SK_REDIST_ALLTOALL)
    return sk__rd_coll_busiest(p, s, cluster, world, us, err);
  if (s->op != SK_REDIST_SENDRECV) return SK_OK;
  if (!s->flat && s->a.mesh.size == s->b.mesh.size) return sk__rd_p2p_busiest(p, s, cluster, world, us, err);
  /* pieces of flat row-major runs (a reshape no common shape carries) have no per-dim blocks:
     rank by rank, O(devices * group * runs) */
  sk_result res = SK_OK;
  for (int r = 0; !res && r < sk__rd_devices(&p->desc); r++) {
    double t = 0;
    res = sk_redist_step_clock_us(p, step, r, cluster, world, &t, err);
    if (t > *us) *us = t;
  }
  if (res) *us = 0;
  return res;
}

SK_API double sk_redist_plan_cost(const sk_redist_plan *p) {
  double t = 0;
  for (int i = 0; p && i < p->nsteps; i++) t += p->steps[i].cost;
  return t;
}

SK_API sk_result sk_redist_plan_ms_cost(const sk_redist_plan *p, sk_redist_ms_cost *cost, sk_error *err) {
  if (!p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan is NULL");
  if (!cost) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "cost is NULL");
  if (p->desc.mode == SK_REDIST_MINIMAL)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore's cost exists for MindSpore-mode plans only");
  *cost = p->ms;
  return SK_OK;
}

/* >>format */
static void sk__rd_put_bytes(sk__rd_out *o, const uint64_t *v, int n) {
  uint64_t lo = v[0], hi = v[0];
  for (int i = 1; i < n; i++) lo = v[i] < lo ? v[i] : lo, hi = v[i] > hi ? v[i] : hi;
  if (lo == hi)
    sk__rd_put(o, "%llu B", (unsigned long long)lo);
  else
    sk__rd_put(o, "%llu..%llu B", (unsigned long long)lo, (unsigned long long)hi);
}

static void sk__rd_put_layout(sk__rd_out *o, const sk_layout *l) {
  char t[SK_MAX_DIMS * (SK_MAX_AXES * SK_AXIS_NAME_MAX + 4) + 8];
  sk_layout_format(l, t, sizeof t);
  sk__rd_put(o, "\"%s\"", t);
}

static void sk__rd_put_shape(sk__rd_out *o, const sk_layout *l) {
  sk__rd_put(o, "[");
  for (int k = 0; k < l->ndims; k++) sk__rd_put(o, "%s%lld", k ? "," : "", (long long)l->shape[k]);
  sk__rd_put(o, "]");
}

static void sk__rd_put_us(sk__rd_out *o, double s) { sk__rd_put(o, "%.2f us", s * 1e6); }

/* The last line of a MindSpore-mode plan's text: MindSpore's cost. */
static void sk__rd_put_ms_cost(sk__rd_out *o, const sk_redist_plan *p) {
  sk__rd_put(o,
             "mindspore cost (elements): forward_comm %.0f, backward_comm %.0f, comm %.0f, computation %.0f, "
             "memory %.0f%s%s\n",
             p->ms.forward_comm, p->ms.backward_comm, p->ms.comm, p->ms.computation, p->ms.memory,
             p->ms.reshape ? ", with Reshape" : "", p->ms_fallback ? " (not expandable: via fully replicated)" : "");
}

SK_API size_t sk_redist_plan_format(const sk_redist_plan *p, char *buf, size_t cap) {
  sk__rd_out o;
  sk__rd_out_init(&o, buf, cap);
  if (!p) return 0;
  const sk_redist_desc *d = &p->desc;
  char mt[SK_MAX_AXES * (SK_AXIS_NAME_MAX + 8)];
  sk__rd_put(&o, "redistribution of ");
  sk__rd_put_shape(&o, &d->from);
  if (sk__rd_reshaping(&d->from, &d->to)) sk__rd_put(&o, " -> "), sk__rd_put_shape(&o, &d->to);
  sk__rd_put(&o, " %s, %d devices, %s", sk_dtype_long_name(d->dtype), sk__rd_devices(d),
             d->mode == SK_REDIST_MINIMAL ? "minimal"
             : d->mode == SK_REDIST_MINDSPORE ? "MindSpore operators (enable_alltoall on)"
                                              : "MindSpore operators (enable_alltoall off)");
  if (p->rank != SK_REDIST_ALL_RANKS) sk__rd_put(&o, ", rank %d", p->rank);
  sk_mesh_format(&d->from.mesh, mt, sizeof mt);
  sk__rd_put(&o, "\n  from  mesh %s  layout ", mt);
  sk__rd_put_layout(&o, &d->from);
  if (d->partial) {
    sk__rd_axes_text(&d->from.mesh, d->partial, mt, sizeof mt);
    sk__rd_put(&o, "  partial over %s (pending sum)", mt);
  }
  sk_mesh_format(&d->to.mesh, mt, sizeof mt);
  sk__rd_put(&o, "\n  to    mesh %s  layout ", mt);
  sk__rd_put_layout(&o, &d->to);
  sk__rd_put(&o, "\n");
  for (int i = 0; i < p->nsteps; i++) {
    const sk__rd_step *s = &p->steps[i];
    sk__rd_put(&o, "step %d  %s", i + 1, s->name);
    if (strcmp(s->name, sk_redist_op_name(s->op))) sk__rd_put(&o, " (runs as %s)", sk_redist_op_name(s->op));
    sk__rd_put(&o, ": %s\n        ", s->detail);
    sk__rd_put_layout(&o, &s->a);
    sk__rd_put(&o, "%s -> ", s->partial ? " partial" : "");
    sk__rd_put_layout(&o, &s->b);
    if (sk__rd_reshaping(&s->a, &d->from) && !sk__rd_reshaping(&s->a, &s->b))
      sk__rd_put(&o, " on "), sk__rd_put_shape(&o, &s->a);
    if (sk__rd_reshaping(&s->a, &s->b)) {
      sk__rd_put(&o, " (reshape ");
      sk__rd_put_shape(&o, &s->a);
      sk__rd_put(&o, " -> ");
      sk__rd_put_shape(&o, &s->b);
      sk__rd_put(&o, ")");
    }
    sk__rd_put(&o, "\n        recv ");
    sk__rd_put_bytes(&o, s->recv, p->nranks);
    sk__rd_put(&o, ", send ");
    sk__rd_put_bytes(&o, s->send, p->nranks);
    sk__rd_put(&o, " per rank, cost ");
    sk__rd_put_us(&o, s->cost);
    sk__rd_put(&o, "\n");
  }
  uint64_t *tr = (uint64_t *)sk__calloc(&d->allocator, sizeof(uint64_t) * (size_t)p->nranks * 2, 16);
  if (tr) {
    for (int i = 0; i < p->nsteps; i++)
      for (int k = 0; k < p->nranks; k++) tr[k] += p->steps[i].recv[k], tr[p->nranks + k] += p->steps[i].send[k];
    sk__rd_put(&o, "total   %d step%s, recv ", p->nsteps, p->nsteps == 1 ? "" : "s");
    sk__rd_put_bytes(&o, tr, p->nranks);
    sk__rd_put(&o, ", send ");
    sk__rd_put_bytes(&o, tr + p->nranks, p->nranks);
    sk__rd_put(&o, " per rank, cost ");
    sk__rd_put_us(&o, sk_redist_plan_cost(p));
    sk__rd_put(&o, "\n");
    sk__free(&d->allocator, tr);
  }
  if (d->mode != SK_REDIST_MINIMAL) sk__rd_put_ms_cost(&o, p);
  return o.len;
}

/* >>exec */
typedef struct sk__rd_xstep {
  sk_comm *comm;        /* group communicator (a cached sub-communicator, or the parent) */
  int nmem;             /* group members */
  sk__rd_box abox, bbox; /* this rank's slice before / after */
  sk__rd_box *sbox, *rbox; /* collectives: per member, the block sent / received (group order) */
  bool send_direct, recv_direct;
  int64_t send_off, recv_off;      /* element offsets into a / b when direct */
  size_t send_stage, recv_stage;   /* byte offsets into the scratch when staged */
  sk__rd_lists lists;              /* Send/Recv */
  size_t *soff, *roff;             /* Send/Recv: per piece, scratch byte offset or (size_t)-1 = direct */
  int64_t *sdir, *rdir;            /* Send/Recv: direct element offsets */
  int buf_in, buf_out;             /* buffer ids: 0 = src, 1 = dst, 2.. = intermediates */
  int me;                          /* this rank */
  sk__rd_box *pbox;                /* shared memory, AllToAll/AllGather: member k's source box */
  bool peer;                       /* shared memory: read the members' inputs directly */
  int *mem;                        /* peer collectives under a link model: the group (mesh ranks), for its price */
  double clock_us;                 /* peer access under a link model: its price (sk_redist_step_clock_us) */
} sk__rd_xstep;

struct sk_redist_executor {
  sk_object_head head; /* the last failed execute, for sk_last_error (its communicator's message) */
  sk_comm *comm;
  sk_redist_plan *plan;
  sk_allocator al;
  sk__rd_xstep xs[SK__RD_MAX_STEPS];
  struct {
    const sk_mesh *mesh; /* the step's mesh: the same axes of another mesh are another group */
    uint32_t mask;
    sk_comm *comm;
    bool own;            /* split here (destroyed with the executor), else the caller's (desc.group) */
  } subs[SK__RD_MAX_STEPS];
  int nsubs;
  char *scratch;         /* staging */
  size_t scratch_bytes;
  char *inter[SK__RD_MAX_STEPS]; /* intermediate buffers (index = buffer id - 2) */
  sk_request **reqs;
  int nreqs_cap;
  size_t src_elems, dst_elems;
  /* The clocks of a pricing world see no peer access, so its steps are charged
     (sk_comm_clock_charge), priced at the first execute on the ranks' world ranks. */
  bool charge, priced;
  int *world; /* [comm size]: each rank's world rank, once priced */
};

/* "axes mp,dp of mesh (dp=2,mp=4)": what a group error names. */
static void sk__rd_group_text(const sk_mesh *m, uint32_t mask, char *buf, size_t cap) {
  char axes[SK_MAX_AXES * (SK_AXIS_NAME_MAX + 1) + 2];
  sk__rd_axes_text(m, mask, axes, sizeof axes);
  sk__rd_out o;
  sk__rd_out_init(&o, buf, cap);
  sk__rd_put(&o, "axes %s of mesh (", axes);
  for (int k = 0; k < m->naxes; k++) sk__rd_put(&o, "%s%s=%d", k ? "," : "", m->names[k], m->dims[k]);
  sk__rd_put(&o, ")");
}

/* The communicator of the group along `mask` of mesh m holding this rank: made once per
   (mesh, axes), shared by the steps that name it. Steps on different meshes (a reduction on the
   source's, an exchange on the unified one) may use the same axis bits for other groups, hence
   the mesh in the key. */
static sk_result sk__rd_sub(sk_redist_executor *ex, const sk_mesh *m, uint32_t mask, sk_comm **out, sk_error *err) {
  for (int i = 0; i < ex->nsubs; i++)
    if (ex->subs[i].mask == mask && sk_mesh_equal(ex->subs[i].mesh, m)) {
      *out = ex->subs[i].comm;
      return SK_OK;
    }
  const sk_redist_desc *d = &ex->plan->desc;
  sk_comm *c = NULL;
  if (d->group) {
    if (!(c = d->group(d->group_ctx, m, mask))) {
      char what[SK_ERROR_MSG_MAX / 2];
      sk__rd_group_text(m, mask, what, sizeof what);
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: desc.group gave no communicator for %s", what);
    }
  } else {
    sk_result r = sk_comm_split_mesh(ex->comm, m, mask, &c, NULL);
    if (r) return sk__fail(err, r, "creating the group communicator: %s", sk_comm_error_message(ex->comm));
  }
  ex->subs[ex->nsubs].mesh = m, ex->subs[ex->nsubs].mask = mask, ex->subs[ex->nsubs].own = !d->group;
  ex->subs[ex->nsubs++].comm = c;
  *out = c;
  return SK_OK;
}

/* A caller's group communicator must be the group the plan means (ranks in ascending mesh
   order, mem): else the blocks would go to the wrong members, or a collective wait for ranks
   that never come. */
static sk_result sk__rd_check_group(const sk__rd_step *s, sk_comm *c, const int *mem, int n, int me, sk_error *err) {
  int pos = sk_comm_rank(c), want = 0;
  if (sk_comm_size(c) == n && pos >= 0 && pos < n && mem[pos] == me) return SK_OK;
  while (want < n && mem[want] != me) want++;
  char what[SK_ERROR_MSG_MAX / 2];
  sk__rd_group_text(&s->a.mesh, s->axes, what, sizeof what);
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                  "redist: desc.group's communicator for %s has %d ranks, this one at %d; the group has %d, mesh rank "
                  "%d at %d", what, sk_comm_size(c), pos, n, me, want);
}

/* Whether blocks 0..n-1 lie back to back in a buffer holding box `buf`; *off = first element. */
static bool sk__rd_direct(const sk__rd_box *buf, const sk__rd_box *blocks, int n, int nd, int64_t *off) {
  int64_t next = 0;
  for (int i = 0; i < n; i++) {
    int64_t o;
    if (!sk__rd_contig(buf, &blocks[i], nd, &o)) return false;
    if (i == 0)
      *off = o;
    else if (o != next)
      return false;
    next = o + sk__rd_vol(&blocks[i], nd);
  }
  return true;
}

SK_API void sk_redist_executor_destroy(sk_redist_executor *ex) {
  if (!ex) return;
  sk_allocator al = ex->al;
  for (int i = 0; ex->plan && i < ex->plan->nsteps; i++) {
    sk__rd_xstep *x = &ex->xs[i];
    sk__free(&al, x->sbox), sk__free(&al, x->rbox), sk__free(&al, x->pbox), sk__free(&al, x->mem);
    sk__rd_lists_free(&x->lists, &al);
    sk__free(&al, x->soff), sk__free(&al, x->roff), sk__free(&al, x->sdir), sk__free(&al, x->rdir);
  }
  for (int i = 0; i < ex->nsubs; i++)
    if (ex->subs[i].own) sk_comm_destroy(ex->subs[i].comm, NULL);
  for (int i = 0; i < SK__RD_MAX_STEPS; i++) sk__free(&al, ex->inter[i]);
  sk__free(&al, ex->scratch);
  sk__free(&al, ex->reqs);
  sk__free(&al, ex->world);
  sk_redist_plan_destroy(ex->plan);
  sk__free(&al, ex);
}

static size_t sk__rd_align(size_t x) { return (x + 63) & ~(size_t)63; }

/* What executor creation accumulates over the steps: one scratch area and one request array
   serve every step (the steps run one after the other), so each is sized for the largest. */
typedef struct sk__rd_needs {
  size_t stage; /* scratch bytes */
  int maxreq;   /* requests posted at once by a Send/Recv step */
} sk__rd_needs;

/* Step i's buffers and boxes. Steps chain through buffer ids (0 = the caller's src, 1 = its dst,
   2.. = intermediates), so only the first step reads src and only the last writes dst; each
   intermediate is allocated here, once, so that sk_redist_execute never allocates. */
static sk_result sk__rd_prepare_buffers(sk_redist_executor *ex, int i, int me, size_t es, sk_error *err) {
  const sk__rd_step *s = &ex->plan->steps[i];
  sk__rd_xstep *x = &ex->xs[i];
  x->buf_in = i == 0 ? 0 : i + 1;
  x->buf_out = i == ex->plan->nsteps - 1 ? 1 : i + 2;
  x->me = me;
  sk__rd_slice_box(&s->a, me, &x->abox);
  sk__rd_slice_box(&s->b, me, &x->bbox);
  if (x->buf_out >= 2) {
    size_t bytes = (size_t)sk__rd_vol(&x->bbox, s->b.ndims) * es; /* b: a Reshape changes the dims */
    ex->inter[x->buf_out - 2] = (char *)sk__alloc(&ex->al, bytes, 64);
    if (!ex->inter[x->buf_out - 2]) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating an intermediate buffer");
  }
  return SK_OK;
}

/* Places the pieces of `pieces` that are not one contiguous range of the buffer holding `buf`
   in the scratch from byte *off on, each 64-byte aligned; contiguous ones are sent from or
   received into the caller's buffer directly (no copy), recorded as at[k] == (size_t)-1 with
   their element offset in dir[k]. Flat pieces are always staged. */
static void sk__rd_place_pieces(const sk__rd_step *s, const sk__rd_box *buf, const sk__rd_piece *pieces, int n,
                                size_t es, size_t *at, int64_t *dir, size_t *off) {
  for (int k = 0; k < n; k++) {
    if (!s->flat && sk__rd_contig(buf, &pieces[k].box, s->a.ndims, &dir[k]))
      at[k] = (size_t)-1;
    else
      at[k] = *off, *off += sk__rd_align((size_t)sk__rd_piece_elems(s, &pieces[k].box) * es);
  }
}

/* A Send/Recv step: this rank's pieces, where each one is staged, and (on shared memory) the
   choice to read the senders' inputs directly instead of messaging. Received pieces are staged
   before sent ones, both in the same scratch, as every piece is in flight at the same time. */
static sk_result sk__rd_prepare_sendrecv(sk_redist_executor *ex, int i, int me, size_t es, sk__rd_needs *need,
                                         sk_error *err) {
  const sk__rd_step *s = &ex->plan->steps[i];
  sk__rd_xstep *x = &ex->xs[i];
  const sk_allocator *al = &ex->al;
  sk_result r;
  x->comm = ex->comm;
  if ((r = sk__rd_pieces(&s->a, &s->b, me, NULL, NULL, &x->lists, al)) != SK_OK)
    return sk__fail(err, r, "allocating piece lists");
  int nr = x->lists.nrecv, ns = x->lists.nsend;
  /* +1 keeps every size non-zero when this rank has no pieces to receive or send */
  x->roff = (size_t *)sk__alloc(al, sizeof(size_t) * (size_t)(nr + 1), 16);
  x->soff = (size_t *)sk__alloc(al, sizeof(size_t) * (size_t)(ns + 1), 16);
  x->rdir = (int64_t *)sk__alloc(al, sizeof(int64_t) * (size_t)(nr + 1), 16);
  x->sdir = (int64_t *)sk__alloc(al, sizeof(int64_t) * (size_t)(ns + 1), 16);
  if (!x->roff || !x->soff || !x->rdir || !x->sdir) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating piece offsets");
  size_t off = 0;
  sk__rd_place_pieces(s, &x->bbox, x->lists.recv, nr, es, x->roff, x->rdir, &off);
  sk__rd_place_pieces(s, &x->abox, x->lists.send, ns, es, x->soff, x->sdir, &off);
  if (off > need->stage) need->stage = off;
  if (nr + ns > need->maxreq) need->maxreq = nr + ns;
  x->peer = sk_comm_shared_memory(ex->comm);
  return SK_OK;
}

/* A collective step's blocks, per group member k in group order (mem[k] = its mesh rank): what
   this rank sends to k (sbox) and receives from k (rbox), by the collective's convention; and,
   when the step reads peers directly, k's whole source slice (pbox). */
static void sk__rd_group_blocks(const sk__rd_step *s, sk__rd_xstep *x, const int *mem, int n, bool peer_copy) {
  int nd = s->a.ndims;
  for (int k = 0; k < n; k++) {
    sk__rd_box Sq, Tq;
    sk__rd_slice_box(&s->a, mem[k], &Sq);
    sk__rd_slice_box(&s->b, mem[k], &Tq);
    if (peer_copy) x->pbox[k] = Sq;
    switch (s->op) {
      case SK_REDIST_ALLTOALL:
        sk__rd_isect(&Tq, &x->abox, nd, &x->sbox[k]);
        sk__rd_isect(&x->bbox, &Sq, nd, &x->rbox[k]);
        break;
      case SK_REDIST_ALLGATHER:
        x->sbox[k] = x->abox;
        x->rbox[k] = Sq;
        break;
      case SK_REDIST_REDUCE_SCATTER:
        x->sbox[k] = Tq; /* member k's chunk of the (shared) source box */
        x->rbox[k] = x->bbox;
        break;
      default: /* AllReduce */
        x->sbox[k] = x->abox;
        x->rbox[k] = x->bbox;
        break;
    }
  }
}

/* Whether a collective's send and receive buffers can be the caller's own (the blocks lie back
   to back in them, in group order) or must be packed / unpacked through the scratch; staged
   sends come first in the scratch, staged receives after them. */
static void sk__rd_stage_collective(const sk__rd_step *s, sk__rd_xstep *x, size_t es, sk__rd_needs *need) {
  int nd = s->a.ndims, n = x->nmem;
  int nsend = s->op == SK_REDIST_ALLGATHER || s->op == SK_REDIST_ALLREDUCE ? 1 : n;
  int nrecv = s->op == SK_REDIST_REDUCE_SCATTER || s->op == SK_REDIST_ALLREDUCE ? 1 : n;
  x->send_direct = sk__rd_direct(&x->abox, x->sbox, nsend, nd, &x->send_off);
  x->recv_direct = sk__rd_direct(&x->bbox, x->rbox, nrecv, nd, &x->recv_off);
  size_t off = 0;
  if (!x->send_direct) x->send_stage = off, off += sk__rd_align((size_t)(s->count * nsend) * es);
  if (!x->recv_direct) {
    size_t rc = (size_t)s->count * (size_t)(s->op == SK_REDIST_ALLGATHER || s->op == SK_REDIST_ALLTOALL ? n : 1);
    x->recv_stage = off, off += sk__rd_align(rc * es);
  }
  if (off > need->stage) need->stage = off;
}

/* A collective step: its group communicator (created collectively, once per axis set, and
   shared by the steps that use the same axes), its blocks and their staging. On shared memory,
   AllToAll and AllGather may read the members' inputs directly, which needs every member's
   source box. */
static sk_result sk__rd_prepare_collective(sk_redist_executor *ex, int i, int me, size_t es, sk__rd_needs *need,
                                           sk_error *err) {
  const sk__rd_step *s = &ex->plan->steps[i];
  sk__rd_xstep *x = &ex->xs[i];
  const sk_allocator *al = &ex->al;
  sk_result r;
  if ((r = sk__rd_sub(ex, &s->a.mesh, s->axes, &x->comm, err)) != SK_OK) return r;
  int gs = s->gsize, n = 0;
  int *mem = (int *)sk__alloc(al, sizeof(int) * (size_t)gs, 16);
  x->sbox = (sk__rd_box *)sk__alloc(al, sizeof(sk__rd_box) * (size_t)gs, 16);
  x->rbox = (sk__rd_box *)sk__alloc(al, sizeof(sk__rd_box) * (size_t)gs, 16);
  if (!mem || !x->sbox || !x->rbox) {
    sk__free(al, mem);
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating group blocks");
  }
  sk_mesh_group(&s->a.mesh, me, s->axes, mem, gs, &n, NULL);
  x->nmem = n;
  if (ex->plan->desc.group && (r = sk__rd_check_group(s, x->comm, mem, n, me, err)) != SK_OK) {
    sk__free(al, mem);
    return r;
  }
  bool peer_copy = sk_comm_shared_memory(ex->comm) && (s->op == SK_REDIST_ALLTOALL || s->op == SK_REDIST_ALLGATHER);
  if (peer_copy) {
    x->pbox = (sk__rd_box *)sk__alloc(al, sizeof(sk__rd_box) * (size_t)n, 16);
    x->peer = true;
    if (!x->pbox) {
      sk__free(al, mem);
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating peer boxes");
    }
  }
  sk__rd_group_blocks(s, x, mem, n, peer_copy);
  if (peer_copy) /* kept for pricing the step on the clocks (sk__rd_want_charges drops it if unpriced) */
    x->mem = mem;
  else
    sk__free(al, mem);
  sk__rd_stage_collective(s, x, es, need);
  return SK_OK;
}

/* >>reshape -- a Reshape step copies this rank's slice of a into its slice of b by flat
   row-major index (>>flat: the step is flat, run as a local piece). Every Reshape MindSpore mode
   plans keeps each rank's elements; a slice of b that a's does not cover means the plan is
   wrong: an internal error at creation, never a silent gap. */
static sk_result sk__rd_prepare_reshape(sk_redist_executor *ex, int i, int me, sk_error *err) {
  const sk__rd_step *s = &ex->plan->steps[i];
  const sk__rd_xstep *x = &ex->xs[i];
  int64_t held = 0;
  (void)sk__rd_flat_meet(&s->a, me, &s->b, me, NULL, NULL, &held);
  if (held != sk__rd_vol(&x->bbox, s->b.ndims))
    return sk__fail(err, SK_ERR_INTERNAL, "Reshape step %d: the slices before and after hold different elements", i + 1);
  return SK_OK;
}

/* Everything step i needs at execute time, by how it executes (local steps need only their
   buffers and boxes). */
static sk_result sk__rd_prepare_step(sk_redist_executor *ex, int i, int me, size_t es, sk__rd_needs *need,
                                     sk_error *err) {
  sk_result r = sk__rd_prepare_buffers(ex, i, me, es, err);
  if (r) return r;
  switch (ex->plan->steps[i].op) {
    case SK_REDIST_LOCAL: return SK_OK;
    case SK_REDIST_RESHAPE: return sk__rd_prepare_reshape(ex, i, me, err);
    case SK_REDIST_SENDRECV: return sk__rd_prepare_sendrecv(ex, i, me, es, need, err);
    default: return sk__rd_prepare_collective(ex, i, me, es, need, err);
  }
}

/* The scratch and request array sized for the most demanding step; none when no step needs them. */
static sk_result sk__rd_alloc_shared(sk_redist_executor *ex, const sk__rd_needs *need, sk_error *err) {
  if (need->stage) {
    ex->scratch = (char *)sk__alloc(&ex->al, need->stage, 64);
    ex->scratch_bytes = need->stage;
    if (!ex->scratch) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating %zu bytes of scratch", need->stage);
  }
  if (need->maxreq) {
    ex->reqs = (sk_request **)sk__calloc(&ex->al, sizeof(sk_request *) * (size_t)need->maxreq, 16);
    ex->nreqs_cap = need->maxreq;
    if (!ex->reqs) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating requests");
  }
  return SK_OK;
}

/* This rank's executor, planned and prepared (*out NULL on failure: nothing is left behind). */
/* Whether peer-access steps must be charged to the world's clocks: they run on a pricing world. */
static sk_result sk__rd_want_charges(sk_redist_executor *ex, sk_error *err) {
  const sk_world_desc *wd = sk_world_config(sk_comm_world(ex->comm));
  for (int i = 0; i < ex->plan->nsteps; i++) ex->charge = ex->charge || ex->xs[i].peer;
  ex->charge = ex->charge && wd && sk_cluster_prices(&wd->cluster);
  if (!ex->charge) { /* the groups kept for pricing are not needed */
    for (int i = 0; i < ex->plan->nsteps; i++) sk__free(&ex->al, ex->xs[i].mem), ex->xs[i].mem = NULL;
    return SK_OK;
  }
  ex->world = (int *)sk__alloc(&ex->al, sizeof(int) * (size_t)sk_comm_size(ex->comm), 16);
  return ex->world ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the ranks' world ranks");
}

static sk_result sk__rd_build(sk_comm *comm, const sk_redist_desc *desc, sk_redist_executor **out, sk_error *err) {
  sk_redist_executor *ex = (sk_redist_executor *)sk__calloc(&desc->allocator, sizeof *ex, 64);
  if (!ex) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating an executor");
  ex->head.magic = SK_OBJECT_MAGIC;
  ex->comm = comm;
  ex->al = desc->allocator;
  int me = sk_comm_rank(comm);
  sk_result r = sk_redist_plan_create(desc, me, &ex->plan, err);
  size_t es = sk_dtype_size(desc->dtype);
  sk__rd_needs need = {0, 0};
  ex->src_elems = (size_t)sk__rd_slice_elems(&desc->from);
  ex->dst_elems = (size_t)sk__rd_slice_elems(&desc->to);
  /* the first failure stops the preparation; destroy frees whatever the steps got so far */
  for (int i = 0; !r && i < ex->plan->nsteps; i++) r = sk__rd_prepare_step(ex, i, me, es, &need, err);
  if (r == SK_OK) r = sk__rd_alloc_shared(ex, &need, err);
  if (r == SK_OK) r = sk__rd_want_charges(ex, err);
  if (r) {
    sk_redist_executor_destroy(ex);
    return r;
  }
  *out = ex;
  return SK_OK;
}

/* With desc.group, creation makes no communicator, so nothing collective would tell a rank that
   a peer failed (a NULL group, memory): one agreement, as execute's, on every rank that got past
   the checks every rank makes alike. mine: this rank's result, returned as is when it failed. */
static sk_result sk__rd_agree_created(sk_comm *comm, sk_result mine, sk_error *err) {
  int64_t v = mine ? (int64_t)sk_comm_rank(comm) : INT64_MAX, low = INT64_MAX;
  sk_result r = sk_allreduce(comm, &v, &low, 1, SK_I64, SK_MIN, NULL);
  if (mine) return mine;
  if (r) return sk__fail(err, r, "redist: agreeing on the executor's creation: %s", sk_comm_error_message(comm));
  if (low != INT64_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "redist: rank %lld could not create its executor (its error says why)",
                    (long long)low);
  return SK_OK;
}

SK_API sk_result sk_redist_executor_create(sk_comm *comm, const sk_redist_desc *desc, sk_redist_executor **out,
                                           sk_error *err) {
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ex (the output pointer) is NULL");
  *out = NULL;
  if (!comm) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "comm is NULL");
  sk_result r = sk__rd_check_desc(desc, err);
  if (r) return r;
  if (sk_comm_size(comm) != sk__rd_devices(desc) && desc->from.mesh.size == desc->to.mesh.size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "comm has %d ranks but the mesh has %d devices", sk_comm_size(comm),
                    sk__rd_devices(desc));
  if (sk_comm_size(comm) != sk__rd_devices(desc)) /* which mesh sets the count is not obvious here */
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "comm has %d ranks but the redistribution covers %d devices (the larger of the from mesh's %d "
                    "and the to mesh's %d)", sk_comm_size(comm), sk__rd_devices(desc), desc->from.mesh.size,
                    desc->to.mesh.size);
  sk_redist_executor *ex = NULL;
  r = sk__rd_build(comm, desc, &ex, err);
  if (desc->group) r = sk__rd_agree_created(comm, r, err);
  if (r) {
    sk_redist_executor_destroy(ex);
    return r;
  }
  *out = ex;
  return SK_OK;
}

SK_API const sk_redist_plan *sk_redist_executor_plan(const sk_redist_executor *ex) { return ex ? ex->plan : NULL; }

static bool sk__rd_overlap(const void *a, size_t na, const void *b, size_t nb) {
  if (!a || !b || !na || !nb) return false;
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

/* One member's reads of a peer-access step (sk_comm_peer_access): they may run on any member's
   thread, so they touch only this step's records and the member's own output. */
typedef struct sk__rd_peer_ctx {
  const sk__rd_step *s;
  const sk__rd_xstep *x;
  const char *in;
  char *out;
  size_t es;
} sk__rd_peer_ctx;

/* The piece of step s that rank t's target slice takes from rank q's source slice (box: its
   box, unless flat): copied between the two slices' buffers (SK__RD_DIRECT), packed from q's
   (SK__RD_PACK) or unpacked into t's (SK__RD_UNPACK); via as for sk__rd_copy. On one shape only
   the boxes the copy reads are used, this rank's from x (computed at creation): execute computes
   a slice only for a peer read directly, one per piece. */
static sk_result sk__rd_piece_copy(sk_comm *via, const sk__rd_step *s, const sk__rd_xstep *x, int how, int q, int t,
                                   const sk__rd_box *box, char *dst, const char *src, size_t es) {
  if (s->flat) {
    sk__rd_segcopy c = {via, dst, src, es, how, 0};
    return sk__rd_flat_meet(&s->a, q, &s->b, t, sk__rd_segcopy_fn, &c, NULL);
  }
  sk__rd_box S, T;
  const sk__rd_box *sb = box, *db = box; /* the packed side is the piece itself */
  if (how != SK__RD_UNPACK) {
    if (q == x->me)
      sb = &x->abox;
    else
      sk__rd_slice_box(&s->a, q, &S), sb = &S;
  }
  if (how != SK__RD_PACK) {
    if (t == x->me)
      db = &x->bbox;
    else
      sk__rd_slice_box(&s->b, t, &T), db = &T;
  }
  return sk__rd_copy(via, dst, db, src, sb, box, s->a.ndims, es);
}

/* Send/Recv step: each received piece from its sender's input, then the local piece. */
static void sk__rd_peer_pieces(void *pv, const void *const *peers) {
  const sk__rd_peer_ctx *c = (const sk__rd_peer_ctx *)pv;
  const sk__rd_lists *L = &c->x->lists;
  int me = c->x->me;
  for (int k = 0; k < L->nrecv; k++) {
    int q = L->recv[k].peer;
    (void)sk__rd_piece_copy(NULL, c->s, c->x, SK__RD_DIRECT, q, me, &L->recv[k].box, c->out, (const char *)peers[q],
                            c->es);
  }
  if (L->nlocal) (void)sk__rd_piece_copy(NULL, c->s, c->x, SK__RD_DIRECT, me, me, &L->local, c->out, c->in, c->es);
}

/* AllToAll / AllGather step: member k's block from member k's input. */
static void sk__rd_peer_blocks(void *pv, const void *const *peers) {
  const sk__rd_peer_ctx *c = (const sk__rd_peer_ctx *)pv;
  for (int k = 0; k < c->x->nmem; k++)
    (void)sk__rd_copy(NULL, c->out, &c->x->bbox, (const char *)peers[k], &c->x->pbox[k], &c->x->rbox[k], c->s->a.ndims,
                      c->es);
}

/* A Send/Recv step over messages: the receives are posted first, so arriving pieces find
   their buffers; pieces that are not contiguous go through the scratch (packed before their
   send, unpacked after the wait); the local piece is copied while the messages are in flight. */
static sk_result sk__rd_run_sendrecv(sk_redist_executor *ex, const sk__rd_step *s, const sk__rd_xstep *x,
                                     const char *in, char *out) {
  sk_dtype dt = ex->plan->desc.dtype;
  size_t es = sk_dtype_size(dt);
  sk_result r = SK_OK;
  const sk__rd_lists *L = &x->lists;
  int nq = 0;
  for (int k = 0; k < L->nrecv && r == SK_OK; k++) {
    char *dst = x->roff[k] == (size_t)-1 ? out + (size_t)x->rdir[k] * es : ex->scratch + x->roff[k];
    r = sk_irecv(ex->comm, dst, (size_t)sk__rd_piece_elems(s, &L->recv[k].box), dt, L->recv[k].peer, &ex->reqs[nq], NULL);
    if (r == SK_OK) nq++;
  }
  for (int k = 0; k < L->nsend && r == SK_OK; k++) {
    const char *src;
    if (x->soff[k] == (size_t)-1)
      src = in + (size_t)x->sdir[k] * es;
    else {
      char *st = ex->scratch + x->soff[k];
      r = sk__rd_piece_copy(ex->comm, s, x, SK__RD_PACK, x->me, L->send[k].peer, &L->send[k].box, st, in, es);
      src = st;
    }
    if (r != SK_OK) break;
    r = sk_isend(ex->comm, src, (size_t)sk__rd_piece_elems(s, &L->send[k].box), dt, L->send[k].peer, &ex->reqs[nq], NULL);
    if (r == SK_OK) nq++;
  }
  if (r == SK_OK && L->nlocal)
    r = sk__rd_piece_copy(ex->comm, s, x, SK__RD_DIRECT, x->me, x->me, &L->local, out, in, es);
  /* a post that failed leaves peers' matching posts unmatched: fail the world, not the timeout */
  if (r != SK_OK && r != SK_ERR_ABORTED) sk_world_fail(sk_comm_world(ex->comm), r, sk_comm_error_message(ex->comm));
  sk_result w = sk_waitall(nq, ex->reqs, NULL);
  if (r == SK_OK) r = w;
  if (r) return r;
  for (int k = 0; k < L->nrecv && r == SK_OK; k++)
    if (x->roff[k] != (size_t)-1)
      r = sk__rd_piece_copy(ex->comm, s, x, SK__RD_UNPACK, L->recv[k].peer, x->me, &L->recv[k].box, out,
                            ex->scratch + x->roff[k], es);
  return r;
}

/* Copies n blocks, back to back in `packed`, from or to the buffer `buf` holding box `bb`:
   the collectives take and deliver group-ordered contiguous blocks, the slices are strided. */
static sk_result sk__rd_pack(sk_comm *via, char *packed, const char *buf, const sk__rd_box *bb, const sk__rd_box *blocks,
                             int n, int nd, size_t es) {
  size_t off = 0;
  sk_result r = SK_OK;
  for (int k = 0; k < n && r == SK_OK; k++) {
    r = sk__rd_copy(via, packed + off, &blocks[k], buf, bb, &blocks[k], nd, es);
    off += (size_t)sk__rd_vol(&blocks[k], nd) * es;
  }
  return r;
}

static sk_result sk__rd_unpack(sk_comm *via, char *buf, const sk__rd_box *bb, const char *packed,
                               const sk__rd_box *blocks, int n, int nd, size_t es) {
  size_t off = 0;
  sk_result r = SK_OK;
  for (int k = 0; k < n && r == SK_OK; k++) {
    r = sk__rd_copy(via, buf, bb, packed + off, &blocks[k], &blocks[k], nd, es);
    off += (size_t)sk__rd_vol(&blocks[k], nd) * es;
  }
  return r;
}

/* A collective step. Errors of a sub-communicator are copied to the executor's comm, where
   sk_comm_error_message(comm) -- what the caller reads -- finds them. */
static sk_result sk__rd_run_collective(sk_redist_executor *ex, const sk__rd_step *s, const sk__rd_xstep *x,
                                       const char *in, char *out) {
  int nd = s->a.ndims;
  sk_dtype dt = ex->plan->desc.dtype;
  size_t es = sk_dtype_size(dt);
  sk_result r;
  int n = x->nmem;
  if (x->peer && !(x->send_direct && x->recv_direct)) {
    /* Shared memory and strided blocks: read each block straight from the member's input
       (one copy instead of pack, collective, unpack). Peer access keeps every input valid
       until all members have read it, also when the world aborts meanwhile. */
    sk__rd_peer_ctx ctx = {s, x, in, out, es};
    r = sk_comm_peer_access(x->comm, in, sk__rd_peer_blocks, &ctx, NULL);
    if (!r && ex->charge) r = sk_comm_clock_charge(x->comm, x->clock_us, NULL);
    if (r && x->comm != ex->comm) sk_comm_set_error(ex->comm, r, "%s", sk_comm_error_message(x->comm));
    return r;
  }
  int nsend = s->op == SK_REDIST_ALLGATHER || s->op == SK_REDIST_ALLREDUCE ? 1 : n;
  int nrecv = s->op == SK_REDIST_REDUCE_SCATTER || s->op == SK_REDIST_ALLREDUCE ? 1 : n;
  const char *sp;
  char *rp;
  if (x->send_direct)
    sp = in + (size_t)x->send_off * es;
  else {
    char *st = ex->scratch + x->send_stage;
    r = sk__rd_pack(ex->comm, st, in, &x->abox, x->sbox, nsend, nd, es);
    if (r != SK_OK) { /* the peers are entering the collective: take the world down */
      sk_world_fail(sk_comm_world(ex->comm), r, sk_comm_error_message(ex->comm));
      return r;
    }
    sp = st;
  }
  rp = x->recv_direct ? out + (size_t)x->recv_off * es : ex->scratch + x->recv_stage;
  size_t cnt = (size_t)s->count;
  switch (s->op) {
    case SK_REDIST_ALLGATHER: r = sk_allgather(x->comm, sp, rp, cnt, dt, NULL); break;
    case SK_REDIST_ALLTOALL: r = sk_alltoall(x->comm, sp, rp, cnt, dt, NULL); break;
    case SK_REDIST_REDUCE_SCATTER: r = sk_reduce_scatter(x->comm, sp, rp, cnt, dt, SK_SUM, NULL); break;
    default: r = sk_allreduce(x->comm, sp, rp, cnt, dt, SK_SUM, NULL); break;
  }
  if (r) {
    if (x->comm != ex->comm) sk_comm_set_error(ex->comm, r, "%s", sk_comm_error_message(x->comm));
    return r;
  }
  return x->recv_direct ? SK_OK : sk__rd_unpack(ex->comm, out, &x->bbox, rp, x->rbox, nrecv, nd, es);
}

static sk_result sk__rd_run_step(sk_redist_executor *ex, int i, const char *in, char *out) {
  const sk__rd_step *s = &ex->plan->steps[i];
  sk__rd_xstep *x = &ex->xs[i];
  size_t es = sk_dtype_size(ex->plan->desc.dtype);
  if (s->op == SK_REDIST_LOCAL || s->op == SK_REDIST_RESHAPE)
    return sk__rd_piece_copy(ex->comm, s, x, SK__RD_DIRECT, x->me, x->me, &x->bbox, out, in, es);
  if (s->op == SK_REDIST_SENDRECV && x->peer) {
    /* Shared memory: every rank reads its pieces straight from the senders' inputs. */
    sk__rd_peer_ctx ctx = {s, x, in, out, es};
    sk_result r = sk_comm_peer_access(ex->comm, in, sk__rd_peer_pieces, &ctx, NULL);
    return !r && ex->charge ? sk_comm_clock_charge(ex->comm, x->clock_us, NULL) : r;
  }
  if (s->op == SK_REDIST_SENDRECV) return sk__rd_run_sendrecv(ex, s, x, in, out);
  return sk__rd_run_collective(ex, s, x, in, out);
}

/* FNV-1a over what decides the data movement: layouts (mesh dims, shape, maps), partial axes,
   dtype, mode and the steps; not axis names or cost settings. */
static uint64_t sk__rd_mix(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; i++) h = (h ^ ((uint64_t)v >> (8 * i) & 0xff)) * 1099511628211ull;
  return h;
}

static uint64_t sk__rd_mix_layout(uint64_t h, const sk_layout *l) {
  h = sk__rd_mix(h, l->mesh.naxes);
  for (int a = 0; a < l->mesh.naxes; a++) h = sk__rd_mix(h, l->mesh.dims[a]);
  h = sk__rd_mix(h, l->ndims);
  for (int d = 0; d < l->ndims; d++) {
    h = sk__rd_mix(sk__rd_mix(h, l->shape[d]), l->map[d].naxes);
    for (int a = 0; a < l->map[d].naxes; a++) h = sk__rd_mix(h, l->map[d].axes[a]);
  }
  return h;
}

static uint64_t sk__rd_fingerprint(const sk_redist_plan *p) {
  uint64_t h = 14695981039346656037ull;
  h = sk__rd_mix_layout(sk__rd_mix_layout(h, &p->desc.from), &p->desc.to);
  h = sk__rd_mix(sk__rd_mix(sk__rd_mix(h, p->desc.partial), p->desc.dtype), p->desc.mode);
  h = sk__rd_mix(h, p->nsteps);
  for (int i = 0; i < p->nsteps; i++)
    h = sk__rd_mix(sk__rd_mix(sk__rd_mix(h, p->steps[i].op), p->steps[i].axes), p->steps[i].count);
  return h;
}

/* The members hold different plans: name two ranks that differ (one more agreement, on the
   failure path only), before anything moves. */
static sk_result sk__rd_plan_mismatch(sk_comm *c, int64_t mine, int64_t lowest) {
  int64_t rank = sk_comm_rank(c), v[2] = {mine == lowest ? rank : INT64_MAX, mine == lowest ? INT64_MAX : rank}, w[2];
  sk_result r = sk_allreduce(c, v, w, 2, SK_I64, SK_MIN, NULL);
  if (r) return r;
  return sk_comm_set_error(c, SK_ERR_MISMATCH,
                           "redist: ranks %lld and %lld hold different plans (their descriptors differ in layouts, "
                           "shape, dtype, partial axes or mode)",
                           (long long)w[0], (long long)w[1]);
}

static sk_result sk__rd_execute(sk_redist_executor *ex, const void *src, size_t src_count, void *dst,
                                size_t dst_count, sk_dtype dt);

static void sk__rd_world_of(void *pv, const void *const *peers) {
  sk_redist_executor *ex = (sk_redist_executor *)pv;
  for (int i = 0; i < sk_comm_size(ex->comm); i++) ex->world[i] = *(const int *)peers[i];
}

/* Once, after execute's agreement (every rank gets here with the same plan): the ranks' world
   ranks through peer access (backend traffic: no clock moves), then each peer-access step's
   price, from what creation kept, allocating nothing (a caller counting its allocator's bytes
   by what runs at the time, as sk_runtime does, sees no step-time temporaries). A rank whose
   pricing fails takes the world down: its peers are about to charge. */
static sk_result sk__rd_price_steps(sk_redist_executor *ex) {
  int mine = sk_comm_world_rank(ex->comm);
  sk_result r = sk_comm_peer_access(ex->comm, &mine, sk__rd_world_of, ex, NULL);
  if (r) return r;
  const sk_cluster *cl = &sk_world_config(sk_comm_world(ex->comm))->cluster;
  sk_error e;
  sk_dtype dt = ex->plan->desc.dtype;
  for (int i = 0; !r && i < ex->plan->nsteps; i++) {
    const sk__rd_step *s = &ex->plan->steps[i];
    sk__rd_xstep *x = &ex->xs[i];
    if (x->peer && s->op == SK_REDIST_SENDRECV)
      r = sk__rd_p2p_price(s, &x->lists, x->me, cl, ex->world, dt, &x->clock_us, &e);
    else if (x->peer)
      r = sk__rd_coll_price(s, x->mem, x->nmem, cl, ex->world, dt, &x->clock_us, &e);
  }
  if (r) {
    sk_comm_set_error(ex->comm, r, "redist: pricing a peer-access step: %s", e.msg);
    sk_world_fail(sk_comm_world(ex->comm), r, sk_comm_error_message(ex->comm));
    return r;
  }
  ex->priced = true;
  return SK_OK;
}

/* The executor keeps its last failure (its communicator's message) for sk_last_error. */
SK_API sk_result sk_redist_execute(sk_redist_executor *ex, const void *src, size_t src_count, void *dst,
                                   size_t dst_count, sk_dtype dt, sk_error *err) {
  if (!ex) return sk__report(ex, SK_ERR_INVALID_ARGUMENT, err);
  sk_result r = sk__rd_execute(ex, src, src_count, dst, dst_count, dt);
  if (r != SK_OK) sk_object_set_error(&ex->head, r, sk_comm_error_message(ex->comm));
  return sk__report(ex, r, err);
}

static sk_result sk__rd_execute(sk_redist_executor *ex, const void *src, size_t src_count, void *dst,
                                size_t dst_count, sk_dtype dt) {
  sk_comm *c = ex->comm;
  const sk_redist_plan *p = ex->plan;
  size_t es = sk_dtype_size(p->desc.dtype);
  /* local checks, then one agreement so that nobody moves data when anybody objects */
  sk_result bad = SK_OK;
  char msg[SK_ERROR_MSG_MAX] = "";
  if (dt != p->desc.dtype)
    bad = SK_ERR_INVALID_ARGUMENT,
    snprintf(msg, sizeof msg, "redist: dtype %s does not match the plan's %s", sk_dtype_name(dt),
             sk_dtype_name(p->desc.dtype));
  else if (!src && ex->src_elems)
    bad = SK_ERR_INVALID_ARGUMENT, snprintf(msg, sizeof msg, "redist: src is NULL");
  else if (!dst && ex->dst_elems)
    bad = SK_ERR_INVALID_ARGUMENT, snprintf(msg, sizeof msg, "redist: dst is NULL");
  else if (src_count < ex->src_elems)
    bad = SK_ERR_INVALID_ARGUMENT,
    snprintf(msg, sizeof msg, "redist: src has %zu elements; the source slice of rank %d needs %zu", src_count,
             sk_comm_rank(c), ex->src_elems);
  else if (dst_count < ex->dst_elems)
    bad = SK_ERR_INVALID_ARGUMENT,
    snprintf(msg, sizeof msg, "redist: dst has %zu elements; the target slice of rank %d needs %zu", dst_count,
             sk_comm_rank(c), ex->dst_elems);
  else if (sk__rd_overlap(src, ex->src_elems * es, dst, ex->dst_elems * es))
    bad = SK_ERR_INVALID_ARGUMENT, snprintf(msg, sizeof msg, "redist: src and dst overlap (out-of-place only)");
  /* min over {lowest rejecting rank, fingerprint, ~fingerprint}: ~ reverses the order, so the
     fingerprints all agree iff min == ~min(~fingerprint) */
  uint64_t h = sk__rd_fingerprint(p);
  int64_t mine[3] = {bad ? (int64_t)sk_comm_rank(c) : INT64_MAX, (int64_t)h, (int64_t)~h}, all[3];
  sk_result r = sk_allreduce(c, mine, all, 3, SK_I64, SK_MIN, NULL);
  if (r) return r;
  if (bad) return sk_comm_set_error(c, bad, "%s", msg);
  if (all[0] != INT64_MAX)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "redist: another rank's arguments were rejected (rank %lld)", (long long)all[0]);
  if (all[1] != ~all[2]) return sk__rd_plan_mismatch(c, (int64_t)h, all[1]);
  if (ex->charge && !ex->priced && (r = sk__rd_price_steps(ex)) != SK_OK) return r;
  for (int i = 0; i < p->nsteps; i++) {
    const sk__rd_xstep *x = &ex->xs[i];
    const char *in = x->buf_in == 0 ? (const char *)src : ex->inter[x->buf_in - 2];
    char *out = x->buf_out == 1 ? (char *)dst : ex->inter[x->buf_out - 2];
    if ((r = sk__rd_run_step(ex, i, in, out)) != SK_OK) {
      /* the peers go on into the steps after this one, whose collectives this rank will not
         join: take the world down rather than leave them waiting for its timeout */
      if (i + 1 < p->nsteps && r != SK_ERR_ABORTED) sk_world_fail(sk_comm_world(c), r, sk_comm_error_message(c));
      return r;
    }
  }
  return SK_OK;
}

SK_API sk_result sk_redist(sk_comm *comm, const sk_redist_desc *desc, const void *src, size_t src_count, void *dst,
                           size_t dst_count, sk_error *err) {
  sk_redist_executor *ex = NULL;
  sk_result r = sk_redist_executor_create(comm, desc, &ex, err);
  if (r) return r;
  r = sk_redist_execute(ex, src, src_count, dst, dst_count, desc->dtype, err);
  sk_redist_executor_destroy(ex);
  return r;
}

SK_EXTERN_C_END

#endif /* SK_REDIST_IMPL */
