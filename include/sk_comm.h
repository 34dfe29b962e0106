/* sk_comm.h -- the communicator API every shardkit backend serves, and the backend hook table.

   Do this in ONE .c file:   #define SK_IMPL   #include "shardkit.h"
   (or SK_COMM_IMPL plus the backend's own SK_<BACKEND>_IMPL). Link with -lpthread.

   STEP BY STEP (threads acting as devices, see sk_threads.h)
     sk_world_desc d = {0};
     d.ndevices = 8;
     d.backend = sk_threads_backend();
     sk_world *w;
     if (sk_world_create(&d, &w, &err) != SK_OK) ...;
     sk_world_run(w, train_step, &state);   // train_step(sk_comm *c, void *arg) runs on 8 threads
     sk_world_destroy(w);
   or bring your own threads: each of N threads calls sk_comm_init_rank(w, rank, &comm, &err),
   uses the comm, then sk_comm_destroy(comm) (as NCCL's ncclCommInitRank).

   COUNTS AND IN-PLACE follow NCCL. `count` is per rank: AllReduce / Broadcast / Reduce: the
   elements of each rank's buffer; AllGather: each rank's contribution (recv holds size*count);
   ReduceScatter: each rank's result (send holds size*count); AllToAll: elements per peer (both
   buffers hold size*count); Gather / Scatter: each rank's block (the root's recv / send holds
   size*count). Any count works, including 0. In-place: AllGather (and
   Gather on the root) send == recv + rank*count; ReduceScatter (and Scatter on the root)
   recv == send + rank*count; the others send == recv (the table below derives each).
   Reduce writes recv on the root only (recv may be NULL elsewhere); Broadcast reads send on the
   root only (send may be NULL elsewhere).

   NUMERIC RULES (every backend): integer sums and products wrap (computed unsigned); avg = sum /
   group size, integers truncated toward zero, f16/bf16 accumulated and divided in f32 and rounded
   once; NaN propagates through min and max. The threads backend reduces in the fixed order rank
   0, 1, ..., N-1, so results are bitwise identical run to run. Avg is the sum, rounded in the
   accumulator type, divided once; so it overflows to Inf where that sum does (eight f32 inputs
   near 3e38), even when the true mean is finite. That is deliberate: it is what MindSpore's
   mean (AllReduce sum, then scale by 1/N) and NCCL's integer avg compute, and it rounds once;
   pre-scaling every input by 1/N would round N times. Scale inputs first if they come near the
   type's maximum.

   NON-BLOCKING: sk_i*() return a request; several may be outstanding per communicator and they
   complete in issue order. They make progress without the calling device thread (compute while
   the collective runs); sk_wait / sk_test only observe. A blocking call on a communicator with
   requests outstanding runs after them.

   ERRORS: every fallible call returns sk_result and takes a trailing sk_error *err (NULL
   allowed), which receives the code and message of a failure and is untouched on success. The
   communicator keeps its last failure too: sk_comm_error_message(comm), sk_last_error (per
   communicator, so per device thread). A device function passes sk_comm_error(c), the
   communicator's own record, as err: a failure it returns is then the world's root cause with
   its message (docs/errors-and-logging.md). Every wait is bounded by the world's timeout;
   sk_world_abort() or a device function returning an error wakes every waiter with
   SK_ERR_ABORTED.

   WORLDS, COMMUNICATORS AND REQUESTS are opaque: hold them by pointer, use the functions below.
   Writing a backend (NCCL, HCCL, ...): sk_backend.h.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_COMM_IMPL)
#define SK_COMM_IMPL
#endif
#ifndef SK_COMM_H
#define SK_COMM_H

#include "sk_core.h"
#include "sk_layout.h"

SK_EXTERN_C_BEGIN

typedef struct sk_world sk_world;
typedef struct sk_comm sk_comm;
typedef struct sk_request sk_request;
typedef struct sk_backend sk_backend;

/* A device function: runs once per device with that device's world communicator. */
typedef sk_result (*sk_device_fn)(sk_comm *comm, void *arg);

/* A link model: simulate the links of a target cluster on this machine, where memory is far
   faster than any interconnect. Zero = none. Every device then has a virtual clock (us, from 0
   at world creation): compute the caller reports with sk_comm_compute advances it; a
   collective on a group starts when every member has issued it (their clocks at the call) and
   the group's previous collective has ended, lasts its price (sk_link_cost_us; under a topology
   sk_topology.h's, see sk_world_desc.cluster), and a device's clock moves
   to its end when the device returns from the blocking call or completes the request (so a
   non-blocking collective overlaps the compute reported meanwhile). Send/Recv start when both
   sides have posted. Supported by the threads backend; other backends leave clocks to compute. */
typedef struct sk_link_model {
  double alpha_us; /* per-message latency */
  double gbps;     /* link bandwidth, GB/s (1e9 bytes/s) */
} sk_link_model;

/* A hierarchical cluster: `nodes` nodes of `per_node` devices each, a fast link between two
   devices of one node and a slower one between nodes. World ranks are numbered node by node
   (rank r sits on node r / per_node), as msrun and mpirun place them. Zero = none (flat: one
   link between any two devices). Collectives over it are priced per algorithm by sk_topology.h. */
typedef struct sk_topology {
  int nodes;           /* nodes in the cluster */
  int per_node;        /* devices on each node */
  sk_link_model intra; /* between two devices of one node */
  sk_link_model inter; /* between devices of different nodes */
} sk_topology;

/* The modelled cluster, in one place: what the world's virtual clocks, the compiler's searches
   and the reports read. Zero: nothing modelled (no clocks, searches count bytes, compute and
   memory unchecked). Either `link` (flat) or `topology` (hierarchical), not both. */
typedef struct sk_cluster {
  sk_link_model link;   /* flat: between any two devices */
  sk_topology topology; /* hierarchical (zero: flat) */
  double device_flops;  /* one device's speed, FLOP/s (0: compute time not modelled) */
  double device_memory; /* bytes one device holds (0: unchecked) */
} sk_cluster;

/* Checks a cluster model: every number finite and >= 0, and a bandwidth wherever a latency is
   set; a topology, when any of its fields is set, has nodes and per_node >= 1 (at most
   SK_TOPOLOGY_MAX_DEVICES devices in all), both links with a bandwidth, and no flat link beside
   it. `what` names it in the message ("desc.cluster"), with the bad field. The world, the
   compiler and the searches all check it here. */
#define SK_TOPOLOGY_MAX_DEVICES (1 << 24)
SK_API sk_result sk_cluster_check(const sk_cluster *cluster, const char *what, sk_error *err);

/* Whether the cluster prices communication (a flat link with a bandwidth, or a topology): the
   one test the virtual clocks, the dry run and the reports make. */
SK_API bool sk_cluster_prices(const sk_cluster *cluster);

/* World configuration; zero fields mean the default:
     ndevices        threads backend: required, 1..SK_MAX_DEVICES; MPI: 0 or the world size
     timeout_ms      300000 (5 min): the bound of every wait
     backend         required: sk_threads_backend() (sk_threads.h) or sk_mpi_backend() (sk_mpi.h)
     backend_config  backend-specific, see the backend's header (NULL = its defaults)
     allocator       the C library
     logger          silent
     cluster         none: no virtual clocks (see sk_link_model). A flat link prices every call
                     with sk_link_cost_us; a topology, which must hold at least the world's
                     devices (SK_ERR_INVALID_ARGUMENT otherwise), with sk_topology.h: the cheapest
                     algorithm per collective, Send/Recv over the link between the two nodes */
typedef struct sk_world_desc {
  int ndevices;
  uint32_t timeout_ms;
  const sk_backend *backend;
  void *backend_config;
  sk_allocator allocator;
  sk_logger logger;
  sk_cluster cluster;
} sk_world_desc;

#define SK_DEFAULT_TIMEOUT_MS 300000u

SK_API sk_result sk_world_create(const sk_world_desc *desc, sk_world **world, sk_error *err);
/* Runs fn once on every device (threads backend: N threads; MPI: this process's device) and
   returns the first error any device returned (its text: sk_world_error_message, and err's). A device that
   returns an error aborts the world, so its peers return instead of hanging. An aborted world
   stays aborted: a later run returns at once with the first error recorded (or
   SK_ERR_ABORTED); destroy it and create a new one. */
SK_API sk_result sk_world_run(sk_world *world, sk_device_fn fn, void *arg, sk_error *err);
SK_API const char *sk_world_error_message(const sk_world *world);
SK_API int sk_world_size(const sk_world *world);
/* The world's cluster model (zero: none); zero for NULL. */
SK_API sk_cluster sk_world_cluster(const sk_world *world);
/* Wakes every waiter with SK_ERR_ABORTED; later calls fail with it. Safe from any thread. */
SK_API void sk_world_abort(sk_world *world);
SK_API bool sk_world_aborted(const sk_world *world);
/* Tears the world down, also after an abort. No device may still be using it. The MPI backend
   makes the last world's teardown a bounded collective step (see sk_mpi.h). */
SK_API sk_result sk_world_destroy(sk_world *world, sk_error *err);

/* Bring-your-own-threads entry: the calling thread becomes device `rank` of the world. */
SK_API sk_result sk_comm_init_rank(sk_world *world, int rank, sk_comm **comm, sk_error *err);
/* Frees a communicator (world communicators from sk_comm_init_rank and sub-communicators alike).
   Not collective. Requests still outstanding on it are finished first (bounded by the timeout;
   at once after an abort) and freed: their handles are invalid afterwards. Threads backend:
   peers that wait for a destroyed sub-communicator's member, or for a device whose
   sk_world_run function has returned, learn at once that it has left (SK_ERR_MISMATCH). */
SK_API sk_result sk_comm_destroy(sk_comm *comm, sk_error *err);
SK_API int sk_comm_rank(const sk_comm *comm);
SK_API int sk_comm_size(const sk_comm *comm);
/* This member's rank in the world (its device index). */
SK_API int sk_comm_world_rank(const sk_comm *comm);
SK_API sk_world *sk_comm_world(const sk_comm *comm);
/* The detailed message of the last failed call on comm ("" if none). */
SK_API const char *sk_comm_error_message(const sk_comm *comm);
/* comm's own record of its last failure (NULL for NULL), to pass as `err`: what a device function
   gives the calls it makes, so that a failure it returns is already described where
   sk_world_run looks for the root cause ("device 3 returned SK_ERR_...: <this message>").
   Programs write their own failures into it with sk_error_set(sk_comm_error(c), code, ...). */
SK_API sk_error *sk_comm_error(sk_comm *comm);

/* ---- sub-communicators (collective over the parent: every member calls) ------------------- */
#define SK_UNDEFINED (-1)
/* As MPI_Comm_split: members with the same color form a communicator, ranked by (key, parent
   rank). color SK_UNDEFINED: *out = NULL. */
SK_API sk_result sk_comm_split(sk_comm *comm, int color, int key, sk_comm **out, sk_error *err);
/* The listed parent ranks form a communicator, ranked in list order; others get *out = NULL. */
SK_API sk_result sk_comm_create(sk_comm *comm, int n, const int *ranks, sk_comm **out, sk_error *err);
/* The group along the mesh axes in axis_mask (sk_mesh_group); comm size must equal the mesh's
   device count. New ranks ascend with parent ranks, as MindSpore's groups do. */
SK_API sk_result sk_comm_split_mesh(sk_comm *comm, const sk_mesh *mesh, uint32_t axis_mask, sk_comm **out, sk_error *err);

/* ---- collectives (blocking) ---------------------------------------------------------------- */
SK_API sk_result sk_allreduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, sk_error *err);
SK_API sk_result sk_allgather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_error *err);
SK_API sk_result sk_reduce_scatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, sk_error *err);
SK_API sk_result sk_broadcast(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root, sk_error *err);
SK_API sk_result sk_reduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, int root, sk_error *err);
SK_API sk_result sk_alltoall(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_error *err);
/* Gather: every rank's count elements to the root, whose recv holds size*count in rank order
   (recv may be NULL elsewhere). Scatter: the root's send holds size*count; rank i receives block
   i (send may be NULL elsewhere). In place on the root: Gather send == recv + root*count,
   Scatter recv == send + root*count (as MPI_Gather/MPI_Scatter with MPI_IN_PLACE). */
SK_API sk_result sk_gather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root, sk_error *err);
SK_API sk_result sk_scatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root, sk_error *err);
/* AllToAllV (as MPI_Alltoallv, and MindSpore's AlltoAllV of MoE layers): rank i sends
   send_counts[j] elements, from send + send_displs[j], to rank j, which receives them at
   recv + recv_displs[i]. So recv_counts[i] on rank j must equal send_counts[j] on rank i
   (SK_ERR_MISMATCH on every member otherwise). Each array holds size entries, in elements;
   a NULL displs array means packed in rank order. No in-place form: send and recv must not
   overlap, nor may two recv blocks. Non-blocking: the four arrays, like the buffers, stay the
   caller's and must stay valid until the request completes. */
SK_API sk_result sk_alltoallv(sk_comm *c, const void *send, const size_t *send_counts, const size_t *send_displs,
                              void *recv, const size_t *recv_counts, const size_t *recv_displs, sk_dtype dt, sk_error *err);
SK_API sk_result sk_barrier(sk_comm *c, sk_error *err);
/* Point to point: messages between a pair match in order; counts and dtypes must agree. */
SK_API sk_result sk_send(sk_comm *c, const void *buf, size_t count, sk_dtype dt, int peer, sk_error *err);
SK_API sk_result sk_recv(sk_comm *c, void *buf, size_t count, sk_dtype dt, int peer, sk_error *err);
/* Send to one peer and receive from another at once (no deadlock in rings and exchanges). */
SK_API sk_result sk_sendrecv(sk_comm *c, const void *send, size_t send_count, int dst, void *recv,
                             size_t recv_count, int src, sk_dtype dt, sk_error *err);

/* ---- collectives (non-blocking) ------------------------------------------------------------ */
SK_API sk_result sk_iallreduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op,
                               sk_request **req, sk_error *err);
SK_API sk_result sk_iallgather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_request **req, sk_error *err);
SK_API sk_result sk_ireduce_scatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt,
                                    sk_redop op, sk_request **req, sk_error *err);
SK_API sk_result sk_ibroadcast(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root,
                               sk_request **req, sk_error *err);
SK_API sk_result sk_ireduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op,
                            int root, sk_request **req, sk_error *err);
SK_API sk_result sk_ialltoall(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_request **req, sk_error *err);
SK_API sk_result sk_igather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root,
                            sk_request **req, sk_error *err);
SK_API sk_result sk_iscatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root,
                             sk_request **req, sk_error *err);
SK_API sk_result sk_ialltoallv(sk_comm *c, const void *send, const size_t *send_counts, const size_t *send_displs,
                               void *recv, const size_t *recv_counts, const size_t *recv_displs, sk_dtype dt,
                               sk_request **req, sk_error *err);
SK_API sk_result sk_ibarrier(sk_comm *c, sk_request **req, sk_error *err);
SK_API sk_result sk_isend(sk_comm *c, const void *buf, size_t count, sk_dtype dt, int peer, sk_request **req, sk_error *err);
SK_API sk_result sk_irecv(sk_comm *c, void *buf, size_t count, sk_dtype dt, int peer, sk_request **req, sk_error *err);
/* Waits (bounded) for the request, frees it and sets *req = NULL; returns the op's result.
   *req == NULL returns SK_OK at once. */
SK_API sk_result sk_wait(sk_request **req, sk_error *err);
/* *done = whether it completed. Not yet: returns SK_OK (as MPI_Test). Completed: returns the
   op's result and frees the request as sk_wait does. Never blocks. Under a link model it
   completes in virtual time: only once this device's clock (advanced by sk_comm_compute) has
   reached the modelled end; sk_wait always completes it. */
SK_API sk_result sk_test(sk_request **req, bool *done, sk_error *err);
SK_API sk_result sk_waitall(int n, sk_request **reqs, sk_error *err);

/* ---- link model and virtual clock (see sk_link_model) -------------------------------------- */
/* This device's virtual clock in us (0 without a link model). */
SK_API double sk_comm_clock_us(const sk_comm *c);
/* Reports `us` of compute on this device: advances its virtual clock (no-op without a model). */
SK_API void sk_comm_compute(sk_comm *c, double us);
/* Collective over c: every member's clock becomes the members' latest, at no modelled cost (no
   link time, and no group's link-free time moves), so a measurement can start from one common
   instant (a training step's start: see sk-sim's modelled step time). Waits for this member's
   outstanding non-blocking work as any backend-internal traffic does, without moving the clock
   for it (the clock moves when that work is waited on). No-op without a link model. */
SK_API sk_result sk_comm_clock_align(sk_comm *c, sk_error *err);
/* Collective over c that moves no data: an event the caller priced, for traffic a backend
   carries outside its priced calls (sk_comm_peer_access: sk_redist's shared-memory moves). It
   starts at the latest of the members' clocks and c's link-free time (as a collective does),
   lasts the largest `us` any member passes (each passes its own part's price; us >= 0), and
   every member's clock and c's link-free time move to its end. No-op without a link model. */
SK_API sk_result sk_comm_clock_charge(sk_comm *c, double us, sk_error *err);

/* ---- local reduction (the kernels every backend uses, exposed for references and checks) -- */
/* dst[i] = op over srcs[0][i], srcs[1][i], ..., srcs[n-1][i], left to right, with the numeric
   rules above (avg divides by n). dst may alias srcs[0]. */
SK_API sk_result sk_reduce_local(void *dst, const void *const *srcs, int n, size_t count, sk_dtype dt, sk_redop op, sk_error *err);

/* ==== the collectives: one table ===========================================================

   One row per operation; every predicate, buffer size, in-place rule, link cost and busbw
   factor in shardkit (the generic layer, the backends, the tests and the benches) derives from
   it, so a new collective is a row here plus each backend's data movement.
     X(ENUM, name, ms_name, flags, send, recv, pattern)
     name     shardkit's spelling, in messages and reports (sk_coll_kind_name)
     ms_name  MindSpore's primitive (mindspore.ops.AllReduce, ..., CollectiveGather; its
              parallel ops_utils.h spells them so too), what MindSpore's graphs and tools print
              (sk_coll_kind_ms_name)
     flags    SK_COLLF_REDUCES (takes a reduce op), SK_COLLF_ROOTED (root matters),
              SK_COLLF_P2P (root is the peer; matched pairwise, not collectively)
     send     the send buffer one rank passes, in elements (SK_COLLB_*): none, count, or
     recv     size*count; on every rank or only on the root. In place, where both buffers are
              used on a rank: same length -> send == recv; recv the larger (gathered) ->
              send == recv + rank*count; send the larger (scattered) -> recv == send + rank*count
              (NCCL's forms; an in-place AllToAll is send == recv).
     pattern  the data pattern (SK_COLLP_*), which gives the link cost (sk_link_cost_us) and the
              nccl-tests busbw factor (sk_coll_busbw_factor). */
#define SK_COLL_LIST(X)                                                                                                       \
  X(SK_COLL_ALLREDUCE, "allreduce", "AllReduce", SK_COLLF_REDUCES, SK_COLLB_ONE, SK_COLLB_ONE, SK_COLLP_ALLREDUCE)            \
  X(SK_COLL_ALLGATHER, "allgather", "AllGather", 0, SK_COLLB_ONE, SK_COLLB_ALL, SK_COLLP_SPREAD)                              \
  X(SK_COLL_REDUCE_SCATTER, "reduce_scatter", "ReduceScatter", SK_COLLF_REDUCES, SK_COLLB_ALL, SK_COLLB_ONE, SK_COLLP_SPREAD) \
  X(SK_COLL_BROADCAST, "broadcast", "Broadcast", SK_COLLF_ROOTED, SK_COLLB_ROOT_ONE, SK_COLLB_ONE, SK_COLLP_CHAIN)            \
  X(SK_COLL_REDUCE, "reduce", "Reduce", SK_COLLF_REDUCES | SK_COLLF_ROOTED, SK_COLLB_ONE, SK_COLLB_ROOT_ONE, SK_COLLP_CHAIN)  \
  X(SK_COLL_ALLTOALL, "alltoall", "AlltoAll", 0, SK_COLLB_ALL, SK_COLLB_ALL, SK_COLLP_SPREAD)                                 \
  X(SK_COLL_BARRIER, "barrier", "Barrier", 0, SK_COLLB_NONE, SK_COLLB_NONE, SK_COLLP_BARRIER)                                 \
  X(SK_COLL_SEND, "send", "Send", SK_COLLF_P2P, SK_COLLB_ONE, SK_COLLB_NONE, SK_COLLP_P2P)                                    \
  X(SK_COLL_RECV, "recv", "Receive", SK_COLLF_P2P, SK_COLLB_NONE, SK_COLLB_ONE, SK_COLLP_P2P)                                 \
  X(SK_COLL_GATHER, "gather", "CollectiveGather", SK_COLLF_ROOTED, SK_COLLB_ONE, SK_COLLB_ROOT_ALL, SK_COLLP_SPREAD)          \
  X(SK_COLL_SCATTER, "scatter", "CollectiveScatter", SK_COLLF_ROOTED, SK_COLLB_ROOT_ALL, SK_COLLB_ONE, SK_COLLP_SPREAD)       \
  X(SK_COLL_ALLTOALLV, "alltoallv", "AlltoAllV", SK_COLLF_VECTOR, SK_COLLB_VEC, SK_COLLB_VEC, SK_COLLP_SPREAD)

/* VECTOR: per-peer counts and displacements (sk_coll.v) instead of one count; no in-place form. */
enum { SK_COLLF_REDUCES = 1, SK_COLLF_ROOTED = 2, SK_COLLF_P2P = 4, SK_COLLF_VECTOR = 8 };
/* A buffer: unused, count elements, or size*count elements; on every rank, or the root only;
   VEC: block j at displs[j], counts[j] long (sk_coll_vec_extent). */
typedef enum sk_coll_buf {
  SK_COLLB_NONE, SK_COLLB_ONE, SK_COLLB_ALL, SK_COLLB_ROOT_ONE, SK_COLLB_ROOT_ALL, SK_COLLB_VEC
} sk_coll_buf;
/* ALLREDUCE: ring reduce + gather; SPREAD: each rank's block reaches the others (AllGather,
   ReduceScatter, AllToAll, Gather, Scatter); CHAIN: one buffer along a pipelined chain
   (Broadcast, Reduce); P2P: one message; BARRIER: latency only. */
typedef enum sk_coll_pattern { SK_COLLP_ALLREDUCE, SK_COLLP_SPREAD, SK_COLLP_CHAIN, SK_COLLP_P2P, SK_COLLP_BARRIER } sk_coll_pattern;

typedef enum sk_coll_kind {
  SK_COLL_NONE = 0,
#define SK__COLL_ENUM(e, name, ms_name, flags, send, recv, pattern) e,
  SK_COLL_LIST(SK__COLL_ENUM)
#undef SK__COLL_ENUM
  SK_COLL_KIND_COUNT
} sk_coll_kind;

/* One row of the table (SK_COLL_NONE and invalid kinds: a row of zeros named "invalid"). */
typedef struct sk_coll_info {
  const char *name, *ms_name;
  unsigned flags;
  sk_coll_buf send, recv;
  sk_coll_pattern pattern;
} sk_coll_info;

SK__INLINE sk_coll_info sk_coll_info_of(sk_coll_kind kind) {
  static const sk_coll_info rows[] = {
      {"none", "none", 0, SK_COLLB_NONE, SK_COLLB_NONE, SK_COLLP_BARRIER},
#define SK__COLL_ROW(e, name, ms_name, flags, send, recv, pattern) {name, ms_name, flags, send, recv, pattern},
      SK_COLL_LIST(SK__COLL_ROW)
#undef SK__COLL_ROW
  };
  if ((int)kind <= 0 || (int)kind >= (int)SK_COLL_KIND_COUNT) {
    sk_coll_info bad = {"invalid", "invalid", 0, SK_COLLB_NONE, SK_COLLB_NONE, SK_COLLP_BARRIER};
    return bad;
  }
  return rows[kind];
}

SK__INLINE bool sk_coll_reduces(sk_coll_kind k) { return (sk_coll_info_of(k).flags & SK_COLLF_REDUCES) != 0; }
SK__INLINE bool sk_coll_rooted(sk_coll_kind k) { return (sk_coll_info_of(k).flags & SK_COLLF_ROOTED) != 0; }
SK__INLINE bool sk_coll_p2p(sk_coll_kind k) { return (sk_coll_info_of(k).flags & SK_COLLF_P2P) != 0; }
SK__INLINE bool sk_coll_vector(sk_coll_kind k) { return (sk_coll_info_of(k).flags & SK_COLLF_VECTOR) != 0; }

/* Where block j of a vector buffer starts, in elements: displs[j], or packed (the sum of the
   counts before j) when displs is NULL. */
SK__INLINE size_t sk_coll_vec_displ(const size_t *counts, const size_t *displs, int j) {
  size_t d = 0;
  if (displs) return displs[j];
  for (int i = 0; i < j; i++) d += counts[i];
  return d;
}

/* Elements a vector buffer spans: the largest displs[j] + counts[j] (0 when every count is 0). */
SK__INLINE size_t sk_coll_vec_extent(const size_t *counts, const size_t *displs, int size) {
  size_t end = 0, packed = 0;
  for (int j = 0; j < size; j++) {
    size_t d = displs ? displs[j] : packed;
    packed += counts[j];
    if (counts[j] && d + counts[j] > end) end = d + counts[j];
  }
  return end;
}

/* Elements of a buffer of class b on rank `rank` of `size` for a call with `count` and `root`. */
SK__INLINE size_t sk_coll_buf_elems(sk_coll_buf b, size_t count, int size, int rank, int root) {
  bool here = (b != SK_COLLB_ROOT_ONE && b != SK_COLLB_ROOT_ALL) || rank == root;
  if (b == SK_COLLB_NONE || !here) return 0;
  return b == SK_COLLB_ALL || b == SK_COLLB_ROOT_ALL ? count * (size_t)size : count;
}

/* Elements of buffers of class b summed over a group of `size` ranks: the root's alone, or one
   each. Not for SK_COLLB_VEC, whose sizes come from per-peer counts. */
SK__INLINE size_t sk_coll_buf_group_elems(sk_coll_buf b, size_t count, int size, int root) {
  size_t one = sk_coll_buf_elems(b, count, size, root, root);
  return b == SK_COLLB_ROOT_ONE || b == SK_COLLB_ROOT_ALL ? one : one * (size_t)size;
}

/* Whether a buffer class spans every rank's block (size*count, or per-peer blocks). */
SK__INLINE bool sk_coll_buf_all(sk_coll_buf b) { return b == SK_COLLB_ALL || b == SK_COLLB_ROOT_ALL || b == SK_COLLB_VEC; }

/* Whether send/recv are the in-place form of kind on this rank (both buffers used here): the
   same address, or this rank's block of the larger (gathered or scattered) buffer. */
SK__INLINE bool sk_coll_in_place(sk_coll_kind k, const void *send, const void *recv, size_t count, sk_dtype dt, int rank) {
  sk_coll_info i = sk_coll_info_of(k);
  const char *s = (const char *)send, *r = (const char *)recv;
  size_t block = (size_t)rank * count * sk_dtype_size(dt);
  if (!s || !r || (i.flags & SK_COLLF_VECTOR)) return false;
  if (sk_coll_buf_all(i.recv) && !sk_coll_buf_all(i.send)) return s == r + block;
  if (sk_coll_buf_all(i.send) && !sk_coll_buf_all(i.recv)) return r == s + block;
  return s == r;
}

/* The in-place rule of kind, in words (for messages). */
SK__INLINE const char *sk_coll_in_place_rule(sk_coll_kind k) {
  sk_coll_info i = sk_coll_info_of(k);
  if (i.flags & SK_COLLF_VECTOR) return "none: send and recv must not overlap";
  if (sk_coll_buf_all(i.recv) && !sk_coll_buf_all(i.send)) return "send == recv + rank*count";
  if (sk_coll_buf_all(i.send) && !sk_coll_buf_all(i.recv)) return "recv == send + rank*count";
  return "send == recv";
}

/* nccl-tests' busbw = algbw * factor on n ranks: 2(n-1)/n for AllReduce, (n-1)/n for the
   spreading collectives, 1 for chains and point to point, 0 for a barrier. */
SK__INLINE double sk_coll_busbw_factor(sk_coll_kind k, int n) {
  double q = n > 0 ? (double)n : 1;
  switch (sk_coll_info_of(k).pattern) {
    case SK_COLLP_ALLREDUCE: return 2 * (q - 1) / q;
    case SK_COLLP_SPREAD: return (q - 1) / q;
    case SK_COLLP_CHAIN:
    case SK_COLLP_P2P: return 1;
    default: return 0;
  }
}

/* The row's name ("allreduce", "reduce_scatter", ...); "invalid" for SK_COLL_NONE and any value
   that is not a collective. */
SK_API const char *sk_coll_kind_name(sk_coll_kind kind);
/* MindSpore's primitive name ("AllReduce", "ReduceScatter", "AlltoAll", "Receive", ...);
   "invalid" as sk_coll_kind_name. */
SK_API const char *sk_coll_kind_ms_name(sk_coll_kind kind);
/* The kind either spelling names ("allreduce" or "AllReduce"; case matters); false for any
   other text, and *kind is left alone. */
SK_API bool sk_coll_kind_from_name(const char *name, sk_coll_kind *kind);

/* Modelled duration (us) of one operation on p ranks under a link model, ring algorithms, with
   count as in the call (NCCL conventions) and n its bytes, by the row's pattern:
   ALLREDUCE 2(p-1)a + 2(p-1)/p n/B; SPREAD (AllGather, ReduceScatter, AllToAll, Gather,
   Scatter) (p-1)a + (p-1)/p pn/B (pn = the whole gathered / scattered array); CHAIN (Broadcast,
   Reduce: pipelined) (p-1)a + n/B; P2P a + n/B; BARRIER (p-1)a. 0 for p == 1 (and for a zero
   model). AllToAllV is SPREAD with count = elements per peer of the busiest member (the most
   it sends to, or receives from, the others, divided by p-1). */
SK_API double sk_link_cost_us(const sk_link_model *m, sk_coll_kind kind, size_t count, sk_dtype dt, int p);

/* One member's part of sk_comm_peer_access: peers[i] is the address member i offered. */
typedef void (*sk_peer_fn)(void *ctx, const void *const *peers);

/* Whether comm's peers share this address space (sk_backend.shared_address_space). A module
   may then, collectively, allgather raw pointers, read peers' buffers directly, and barrier
   before anyone reuses them: one copy where message passing would pack, send and unpack. */
SK_API bool sk_comm_shared_memory(const sk_comm *comm);
/* Collective, for modules that read peers' buffers directly (sk_redist.h) on a shared-memory
   backend. Every member offers the address `mine`; once all have, fn(ctx, peers) runs once for
   every member, with that member's ctx and peers[i] = member i's address, on whichever member's
   thread is free (so fn must only touch memory, never call shardkit). No member returns before
   every member's fn has returned, also when the world aborts or times out: offered memory stays
   valid for exactly the call. A member that never arrives fails the call on all (timeout, or
   SK_ERR_MISMATCH when it left or called something else). SK_ERR_UNSUPPORTED where
   !sk_comm_shared_memory(comm). */
SK_API sk_result sk_comm_peer_access(sk_comm *comm, const void *mine, sk_peer_fn fn, void *ctx, sk_error *err);
/* Copies bytes between two of this device's buffers through the backend (a device-memory
   backend cannot memcpy them): what modules use to pack and unpack (sk_fusion.h, sk_redist.h).
   Not collective. */
SK_API sk_result sk_comm_copy(sk_comm *comm, void *dst, const void *src, size_t bytes, sk_error *err);
/* Sets comm's detailed message; returns code (for `return sk_comm_set_error(...)`). */
SK_API sk_result sk_comm_set_error(sk_comm *comm, sk_result code, const char *fmt, ...) SK__PRINTF(3, 4);
/* Logs one item through the world's logger (sk_world_desc.logger), about this device. */
SK_API void sk_comm_log(sk_comm *comm, sk_log_level level, sk_log_id id, const char *fmt, ...) SK__PRINTF(4, 5);
/* Records a device failure: aborts the world and keeps the first root cause. */
SK_API void sk_world_fail(sk_world *world, sk_result code, const char *msg);
/* Monotonic nanoseconds (for deadlines). */
SK_API uint64_t sk_now_ns(void);

SK_EXTERN_C_END

#endif /* SK_COMM_H */

/* ==== implementation ======================================================================== */
#if defined(SK_COMM_IMPL) && !defined(SK_COMM_IMPL_DONE)
#define SK_COMM_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include "sk_backend.h"
#include <string.h>
#include <time.h>

#if !defined(__cplusplus)
/* Strict C11 (-std=c11) hides POSIX declarations unless a feature macro came before the FIRST
   system include, which a header cannot guarantee; so declare what we use (glibc's and musl's
   prototypes, compatible with theirs when they are visible). C++ compilers define _GNU_SOURCE. */
extern int clock_gettime(int clock_id, struct timespec *tp);
#endif
#define SK__CLOCK_MONOTONIC 1 /* Linux's CLOCK_MONOTONIC */

SK_EXTERN_C_BEGIN

/* The records. Private to this implementation: users and backends go through functions. */
struct sk_world {
  sk_object_head head; /* the root cause once failed (claimed by error_claimed), else the last misuse */
  sk_world_desc desc;  /* defaults applied */
  const sk_backend *backend;
  void *state;
  int ndevices;
  int aborted;       /* atomic */
  int first_error;   /* atomic: first sk_result (not ABORTED) a device returned */
  int error_claimed; /* atomic: who writes the head's root cause */
  double *clocks; /* link model: virtual clock per device (us), touched by its device only */
};

struct sk_comm {
  sk_object_head head; /* the last failed call */
  sk_world *world;
  int rank, size, world_rank;
  void *state;
};

SK_API void *sk_world_state(const sk_world *w) { return w ? w->state : NULL; }
SK_API void *sk_comm_state(const sk_comm *c) { return c ? c->state : NULL; }
SK_API const sk_world_desc *sk_world_config(const sk_world *w) { return w ? &w->desc : NULL; }

SK_API uint64_t sk_now_ns(void) {
  struct timespec ts;
  clock_gettime(SK__CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

SK_API const char *sk_coll_kind_name(sk_coll_kind kind) { return sk_coll_info_of(kind).name; }
SK_API const char *sk_coll_kind_ms_name(sk_coll_kind kind) { return sk_coll_info_of(kind).ms_name; }

SK_API bool sk_coll_kind_from_name(const char *name, sk_coll_kind *kind) {
  if (!name || !kind) return false;
  for (int k = SK_COLL_NONE + 1; k < (int)SK_COLL_KIND_COUNT; k++) {
    sk_coll_info i = sk_coll_info_of((sk_coll_kind)k);
    if (!strcmp(name, i.name) || !strcmp(name, i.ms_name)) return *kind = (sk_coll_kind)k, true;
  }
  return false;
}

SK_API sk_result sk_comm_set_error(sk_comm *comm, sk_result code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sk__error_vset(sk_comm_error(comm), code, fmt, ap);
  va_end(ap);
  return code;
}

SK_API void sk_world_fail(sk_world *w, sk_result code, const char *msg) {
  if (!w || code == SK_OK) return;
  if (code != SK_ERR_ABORTED) {
    int expected = 0;
    if (__atomic_compare_exchange_n(&w->error_claimed, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      sk_object_set_error(&w->head, code, msg ? msg : sk_result_string(code));
      __atomic_store_n(&w->first_error, (int)code, __ATOMIC_RELEASE);
      sk__log(&w->desc.logger, SK_LOG_ERROR, SK_LOG_WORLD_FAILED, -1, "%s: %s", sk_result_name(code), w->head.error.msg);
    }
  }
  sk_world_abort(w);
}

/* ---- world ---------------------------------------------------------------------------------- */

/* Every device must sit on a node of the topology: the clocks price a call by where its
   members are. A flat cluster (no topology) fits any world. */
static sk_result sk__topology_fits(const sk_topology *t, int ndevices, sk_error *err) {
  if (!t->nodes || ndevices <= t->nodes * t->per_node) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                  "desc.cluster.topology: %d nodes x %d per node = %d devices, fewer than the world's %d devices",
                  t->nodes, t->per_node, t->nodes * t->per_node, ndevices);
}

SK_API sk_result sk_world_create(const sk_world_desc *desc, sk_world **world, sk_error *err) {
  if (!world) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "world (the output pointer) is NULL");
  *world = NULL;
  if (!desc) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc is NULL");
  if (!desc->backend)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "desc.backend is NULL: set it to sk_threads_backend() (sk_threads.h) or sk_mpi_backend() (sk_mpi.h)");
  if (desc->backend->version != SK_BACKEND_VERSION)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "backend '%s' has hook table version %d; this build needs %d",
                    desc->backend->name ? desc->backend->name : "?", desc->backend->version, SK_BACKEND_VERSION);
  if (desc->ndevices < 0 || desc->ndevices > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.ndevices = %d; allowed 1..%d", desc->ndevices, SK_MAX_DEVICES);
  if (!sk__allocator_ok(&desc->allocator))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.allocator: set both alloc and free, or neither");
  sk_result bad_cluster = sk_cluster_check(&desc->cluster, "desc.cluster", err);
  if (bad_cluster) return bad_cluster;
  sk_world *w = (sk_world *)sk__calloc(&desc->allocator, sizeof *w, 64);
  if (!w) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the world (%zu bytes)", sizeof *w);
  w->head.magic = SK_OBJECT_MAGIC;
  w->desc = *desc;
  w->desc.timeout_ms = SK__DEF(desc->timeout_ms, SK_DEFAULT_TIMEOUT_MS);
  w->backend = desc->backend;
  sk_result r = w->backend->world_create(w, &w->desc, &w->state, &w->ndevices, err);
  if (r != SK_OK) {
    sk__free(&desc->allocator, w);
    return r;
  }
  int n = w->ndevices;
  /* Checked once the backend has counted the devices (MPI: the job's size), on every process
     alike, so a refused world's teardown stays collective. */
  r = sk__topology_fits(&desc->cluster.topology, n, err);
  if (!r && !(w->clocks = (double *)sk__calloc(&desc->allocator, sizeof(double) * (size_t)n, 64)))
    r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating %d device clocks", n);
  if (r) {
    w->backend->world_destroy(w, w->state);
    sk__free(&desc->allocator, w);
    return r;
  }
  *world = w;
  return SK_OK;
}

typedef struct sk__device_fn {
  sk_device_fn fn;
  void *arg;
} sk__device_fn;

/* The generic body of every device (sk_device_entry): join, run, record a failure as the
   world's root cause, leave. */
static sk_result sk__device_entry(sk_world *w, int rank, void *ctx) {
  const sk__device_fn *d = (const sk__device_fn *)ctx;
  sk_comm *c = NULL;
  sk_error err;
  char msg[SK_ERROR_MSG_MAX + 64];
  sk_result r = sk_comm_init_rank(w, rank, &c, &err);
  if (r != SK_OK) {
    snprintf(msg, sizeof msg, "device %d: %s", rank, err.msg);
    sk_world_fail(w, r, msg);
    return r;
  }
  r = d->fn(c, d->arg);
  if (r != SK_OK) {
    snprintf(msg, sizeof msg, "device %d returned %s%s%s", rank, sk_result_name(r), c->head.error.msg[0] ? ": " : "",
             c->head.error.msg);
    sk_world_fail(w, r, msg);
  }
  sk_comm_destroy(c, NULL);
  return r;
}

/* A misuse of the world itself (not a device failure): recorded unless a root cause is. */
static sk_result sk__world_misuse(sk_world *w, sk_result code, const char *msg) {
  if (!__atomic_load_n(&w->error_claimed, __ATOMIC_ACQUIRE)) sk_object_set_error(&w->head, code, msg);
  return code;
}

SK_API sk_result sk_world_run(sk_world *w, sk_device_fn fn, void *arg, sk_error *err) {
  if (!w) return sk__report(w, SK_ERR_INVALID_ARGUMENT, err);
  if (!fn) return sk__report(w, sk__world_misuse(w, SK_ERR_INVALID_ARGUMENT, "world_run: fn is NULL"), err);
  sk__device_fn d = {fn, arg};
  sk_result r = w->backend->world_run(w, sk__device_entry, &d);
  int first = __atomic_load_n(&w->first_error, __ATOMIC_ACQUIRE);
  return sk__report(w, first ? (sk_result)first : r, err);
}

SK_API const char *sk_world_error_message(const sk_world *w) {
  if (!w) return "world is NULL";
  return __atomic_load_n(&w->first_error, __ATOMIC_ACQUIRE) ? w->head.error.msg : "";
}

SK_API int sk_world_size(const sk_world *w) { return w ? w->ndevices : 0; }

SK_API sk_cluster sk_world_cluster(const sk_world *w) {
  sk_cluster none;
  memset(&none, 0, sizeof none);
  return w ? w->desc.cluster : none;
}

/* A topology's link: a bandwidth is required (a node pair always talks), alpha may be 0. */
static sk_result sk__topology_link_check(const sk_link_model *l, const char *what, const char *name, sk_error *err) {
  if (!(l->alpha_us >= 0 && l->alpha_us <= 1e12) || !(l->gbps > 0 && l->gbps <= 1e12))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "%s.topology.%s: alpha_us %g, gbps %g; alpha finite and >= 0, gbps finite and > 0", what, name,
                    l->alpha_us, l->gbps);
  return SK_OK;
}

/* Zero topology: flat, fine. Any field set: the whole topology must be, and the flat link not. */
static sk_result sk__topology_check(const sk_cluster *c, const char *what, sk_error *err) {
  const sk_topology *t = &c->topology;
  if (t->nodes == 0 && t->per_node == 0 && t->intra.alpha_us == 0 && t->intra.gbps == 0 && t->inter.alpha_us == 0 &&
      t->inter.gbps == 0)
    return SK_OK;
  if (t->nodes < 1 || t->per_node < 1 || (long long)t->nodes * t->per_node > SK_TOPOLOGY_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s.topology: nodes %d, per_node %d; both >= 1, at most %d devices",
                    what, t->nodes, t->per_node, SK_TOPOLOGY_MAX_DEVICES);
  sk_result r = sk__topology_link_check(&t->intra, what, "intra", err);
  if (!r) r = sk__topology_link_check(&t->inter, what, "inter", err);
  if (!r && (c->link.alpha_us != 0 || c->link.gbps != 0))
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                 "%s.link: alpha_us %g, gbps %g beside a topology; set either the flat link or the topology", what,
                 c->link.alpha_us, c->link.gbps);
  return r;
}

SK_API sk_result sk_cluster_check(const sk_cluster *c, const char *what, sk_error *err) {
  if (!c) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: NULL cluster", what ? what : "cluster");
  /* "!(x >= 0)" also rejects NaN; the upper bounds reject infinities. */
  const sk_link_model *lk = &c->link;
  if (!(lk->alpha_us >= 0 && lk->alpha_us <= 1e12) || !(lk->gbps >= 0 && lk->gbps <= 1e12) ||
      (lk->alpha_us > 0 && lk->gbps == 0))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "%s.link: alpha_us %g, gbps %g; both finite and >= 0, and gbps > 0 when alpha is set",
                    what ? what : "cluster", lk->alpha_us, lk->gbps);
  if (!(c->device_flops >= 0 && c->device_flops <= 1e30) || !(c->device_memory >= 0 && c->device_memory <= 1e30))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: device_flops %g, device_memory %g; both finite and >= 0",
                    what ? what : "cluster", c->device_flops, c->device_memory);
  return sk__topology_check(c, what ? what : "cluster", err);
}

SK_API bool sk_cluster_prices(const sk_cluster *c) { return c && (c->link.gbps > 0 || c->topology.nodes > 0); }

SK_API void sk_world_abort(sk_world *w) {
  if (!w) return;
  if (__atomic_exchange_n(&w->aborted, 1, __ATOMIC_ACQ_REL)) return;
  sk__log(&w->desc.logger, SK_LOG_WARN, SK_LOG_ABORT, -1, "the world was aborted");
  w->backend->abort(w);
}

SK_API bool sk_world_aborted(const sk_world *w) { return w && __atomic_load_n(&w->aborted, __ATOMIC_ACQUIRE); }

SK_API sk_result sk_world_destroy(sk_world *w, sk_error *err) {
  if (!w) return sk__report(w, SK_ERR_INVALID_ARGUMENT, err);
  sk_allocator a = w->desc.allocator;
  sk_result r = w->backend->world_destroy(w, w->state);
  if (r != SK_OK) sk_error_set(err, r, "world_destroy: the %s backend's teardown: %s", w->backend->name ? w->backend->name : "?",
                              sk_result_string(r)); /* the world's record goes with it */
  sk__free(&a, w->clocks);
  sk__free(&a, w);
  return r;
}

/* ---- communicators -------------------------------------------------------------------------- */

/* The backend's caller check (see sk_backend.check_caller): runs before anything touches comm. */
static sk_result sk__check_caller(const sk_comm *c) {
  const sk_backend *b = c->world->backend;
  return b->check_caller ? b->check_caller(c) : SK_OK;
}

/* The end of a public call on c (sk__report): a caller the backend refuses gets its own message,
   never c's record, which another thread owns and may be writing. */
static sk_result sk__comm_report(sk_comm *c, sk_result r, sk_error *err) {
  if (r == SK_OK || !err) return r;
  if (!c || sk__check_caller(c) == SK_OK) {
    sk__report(c, r, err);
  } else {
    const char *name = c->world->backend->name;
    sk_error_set(err, r, "the calling thread may not use this communicator (backend '%s')", name ? name : "?");
  }
  return r; /* plainly r, for the analyzer */
}

static sk_comm *sk__comm_alloc(sk_world *w) { return (sk_comm *)sk__calloc(&w->desc.allocator, sizeof(sk_comm), 64); }

SK_API sk_result sk_comm_init_rank(sk_world *w, int rank, sk_comm **comm, sk_error *err) {
  if (!comm) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "comm (the output pointer) is NULL");
  *comm = NULL;
  if (!w) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "world is NULL");
  if (rank < 0 || rank >= w->ndevices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank %d out of range [0, %d)", rank, w->ndevices);
  if (sk_world_aborted(w)) return sk__fail(err, SK_ERR_ABORTED, "the world was aborted");
  sk_comm *c = sk__comm_alloc(w);
  if (!c) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating a communicator");
  c->head.magic = SK_OBJECT_MAGIC;
  c->world = w;
  c->rank = c->world_rank = rank;
  c->size = w->ndevices;
  sk_result r = w->backend->comm_init_rank(c, rank, &c->state, err);
  if (r != SK_OK) {
    sk__free(&w->desc.allocator, c);
    return r;
  }
  *comm = c;
  return SK_OK;
}

SK_API sk_result sk_comm_destroy(sk_comm *c, sk_error *err) {
  if (!c) return sk__comm_report(c, SK_ERR_INVALID_ARGUMENT, err);
  sk_world *w = c->world;
  w->backend->comm_destroy(c, c->state);
  sk__free(&w->desc.allocator, c);
  return SK_OK;
}

SK_API int sk_comm_rank(const sk_comm *c) { return c ? c->rank : -1; }
SK_API int sk_comm_size(const sk_comm *c) { return c ? c->size : 0; }
SK_API int sk_comm_world_rank(const sk_comm *c) { return c ? c->world_rank : -1; }
SK_API sk_world *sk_comm_world(const sk_comm *c) { return c ? c->world : NULL; }
SK_API bool sk_comm_shared_memory(const sk_comm *c) { return c && c->world->backend->shared_address_space; }
SK_API const char *sk_comm_error_message(const sk_comm *c) { return c ? c->head.error.msg : "comm is NULL"; }
SK_API sk_error *sk_comm_error(sk_comm *c) { return c ? &c->head.error : NULL; }

static sk_result sk__comm_peer_access(sk_comm *c, const void *mine, sk_peer_fn fn, void *ctx) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk__check_caller(c);
  if (r != SK_OK) return r;
  if (!fn) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "peer_access: fn is NULL");
  if (sk_world_aborted(c->world)) return sk_comm_set_error(c, SK_ERR_ABORTED, "peer_access: the world was aborted");
  const sk_backend *b = c->world->backend;
  if (!b->shared_address_space || !b->peer_access)
    return sk_comm_set_error(c, SK_ERR_UNSUPPORTED, "peer_access: backend '%s' does not share an address space",
                             b->name ? b->name : "?");
  return b->peer_access(c, mine, fn, ctx);
}
SK_API sk_result sk_comm_peer_access(sk_comm *c, const void *mine, sk_peer_fn fn, void *ctx, sk_error *err) {
  return sk__comm_report(c, sk__comm_peer_access(c, mine, fn, ctx), err);
}

static sk_result sk__comm_copy(sk_comm *c, void *dst, const void *src, size_t bytes) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk__check_caller(c);
  if (r != SK_OK) return r;
  if (bytes && (!dst || !src))
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "copy: %s is NULL with %zu bytes", dst ? "src" : "dst", bytes);
  if (!bytes || dst == src) return SK_OK;
  const sk_backend *b = c->world->backend;
  if (b->copy) return b->copy(c, dst, src, bytes);
  memcpy(dst, src, bytes);
  return SK_OK;
}
SK_API sk_result sk_comm_copy(sk_comm *c, void *dst, const void *src, size_t bytes, sk_error *err) {
  return sk__comm_report(c, sk__comm_copy(c, dst, src, bytes), err);
}

SK_API void sk_comm_log(sk_comm *c, sk_log_level level, sk_log_id id, const char *fmt, ...) {
  if (!c || !fmt) return;
  va_list ap;
  va_start(ap, fmt);
  sk__vlog(&c->world->desc.logger, level, id, c->world_rank, fmt, ap);
  va_end(ap);
}

/* A call's outcome as the logger hears it: timeouts and mismatches, per device. */
static sk_result sk__logged(sk_comm *c, sk_result r) {
  if (r == SK_ERR_TIMEOUT) sk_comm_log(c, SK_LOG_ERROR, SK_LOG_TIMEOUT, "%s", c->head.error.msg);
  if (r == SK_ERR_MISMATCH) sk_comm_log(c, SK_LOG_ERROR, SK_LOG_MISMATCH, "%s", c->head.error.msg);
  return r;
}

/* ---- mismatch ------------------------------------------------------------------------------- */

SK_API bool sk_coll_same_call(const sk_coll *a, const sk_coll *b) {
  if (!a || !b || a->kind != b->kind || a->count != b->count || a->dtype != b->dtype) return false;
  return (!sk_coll_reduces(a->kind) || a->op == b->op) && (!sk_coll_rooted(a->kind) || a->root == b->root);
}

SK_API void sk_coll_describe(char *buf, size_t cap, const sk_coll *c) {
  if (!buf || !cap) return;
  if (!c) {
    snprintf(buf, cap, "nothing");
    return;
  }
  snprintf(buf, cap, "%s(count %zu, %s, %s, root %d)", sk_coll_kind_name(c->kind), c->count, sk_dtype_name(c->dtype),
           sk_redop_name(c->op), c->root);
}

SK_API sk_result sk_comm_set_mismatch(sk_comm *c, int rank_a, const char *what_a, int rank_b, const char *what_b) {
  return sk_comm_set_error(c, SK_ERR_MISMATCH, "mismatch: rank %d called %s but rank %d called %s", rank_a, what_a,
                           rank_b, what_b);
}

/* ---- link model ------------------------------------------------------------------------------- */

static bool sk__link_on(const sk_world *w) { return sk_cluster_prices(&w->desc.cluster); }

SK_API double sk_link_cost_us(const sk_link_model *m, sk_coll_kind kind, size_t count, sk_dtype dt, int p) {
  if (!m || m->gbps <= 0 || p <= 1 || !sk_dtype_valid(dt)) return 0;
  double a = m->alpha_us, n = (double)count * (double)sk_dtype_size(dt), q = (double)p;
  double us_per_byte = 1e-3 / m->gbps; /* 1 GB/s = 1e3 bytes per us */
  if ((int)kind <= 0 || kind >= SK_COLL_KIND_COUNT) return 0;
  switch (sk_coll_info_of(kind).pattern) {
    case SK_COLLP_ALLREDUCE: return 2 * (q - 1) * a + 2 * (q - 1) / q * n * us_per_byte;
    case SK_COLLP_SPREAD: return (q - 1) * a + (q - 1) * n * us_per_byte; /* (p-1)/p of p*n */
    case SK_COLLP_CHAIN: return (q - 1) * a + n * us_per_byte;
    case SK_COLLP_P2P: return a + n * us_per_byte;
    default: return (q - 1) * a;
  }
}

SK_API double sk_comm_clock_us(const sk_comm *c) { return c && sk__link_on(c->world) ? c->world->clocks[c->world_rank] : 0; }

SK_API void sk_comm_compute(sk_comm *c, double us) {
  if (c && us > 0 && sk__link_on(c->world)) c->world->clocks[c->world_rank] += us;
}

/* Moves the device clock to a modelled end, when that is later. */
static void sk__clock_reach(sk_comm *c, double end_us) {
  double *clk = &c->world->clocks[c->world_rank];
  if (sk__link_on(c->world) && end_us > *clk) *clk = end_us;
}

static sk_result sk__comm_split(sk_comm *c, int color, int key, sk_comm **out) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result rc = sk__check_caller(c);
  if (rc != SK_OK) return rc;
  if (!out) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split: out (the output pointer) is NULL");
  *out = NULL;
  if (color < 0 && color != SK_UNDEFINED)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split: color %d is negative (use SK_UNDEFINED to opt out)",
                             color);
  sk_world *w = c->world;
  sk_comm *child = sk__comm_alloc(w);
  if (!child) return sk_comm_set_error(c, SK_ERR_OUT_OF_MEMORY, "split: allocating a communicator");
  child->head.magic = SK_OBJECT_MAGIC;
  child->world = w;
  child->world_rank = c->world_rank;
  sk_result r = sk__logged(c, w->backend->comm_split(c, color, key, child, &child->state, &child->rank, &child->size));
  if (r != SK_OK || !child->state) {
    sk__free(&w->desc.allocator, child);
    return r;
  }
  *out = child;
  return SK_OK;
}
SK_API sk_result sk_comm_split(sk_comm *c, int color, int key, sk_comm **out, sk_error *err) {
  return sk__comm_report(c, sk__comm_split(c, color, key, out), err);
}

static sk_result sk__comm_create(sk_comm *c, int n, const int *ranks, sk_comm **out) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  if (!out) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "create: out (the output pointer) is NULL");
  *out = NULL;
  if (n < 1 || n > c->size)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "create: n = %d ranks; allowed 1..%d", n, c->size);
  if (!ranks) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "create: ranks is NULL");
  int pos = -1;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= c->size)
      return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "create: ranks[%d] = %d out of range [0, %d)", i, ranks[i],
                               c->size);
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "create: rank %d listed twice (ranks[%d] and ranks[%d])",
                                 ranks[i], j, i);
    if (ranks[i] == c->rank) pos = i;
  }
  return sk__comm_split(c, pos >= 0 ? 0 : SK_UNDEFINED, pos, out);
}
SK_API sk_result sk_comm_create(sk_comm *c, int n, const int *ranks, sk_comm **out, sk_error *err) {
  return sk__comm_report(c, sk__comm_create(c, n, ranks, out), err);
}

static sk_result sk__comm_split_mesh(sk_comm *c, const sk_mesh *mesh, uint32_t axis_mask, sk_comm **out) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  if (!out) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split_mesh: out (the output pointer) is NULL");
  *out = NULL;
  if (!mesh) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split_mesh: mesh is NULL");
  if (mesh->size != c->size)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split_mesh: mesh has %d devices but the communicator has %d",
                             mesh->size, c->size);
  if (mesh->naxes < 1 || mesh->naxes > SK_MAX_AXES || (axis_mask >> mesh->naxes) != 0)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split_mesh: axis_mask 0x%x names axes the %d-axis mesh lacks",
                             (unsigned)axis_mask, mesh->naxes);
  /* color = the group's smallest rank (this rank with the masked coordinates zeroed) */
  int coords[SK_MAX_AXES];
  sk_error e;
  if (sk_mesh_coords(mesh, c->rank, coords, &e) != SK_OK)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split_mesh: %s", e.msg);
  for (int a = 0; a < mesh->naxes; a++)
    if (axis_mask & (1u << a)) coords[a] = 0;
  int color = 0;
  if (sk_mesh_rank(mesh, coords, &color, &e) != SK_OK)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "split_mesh: %s", e.msg);
  return sk__comm_split(c, color, c->rank, out);
}
SK_API sk_result sk_comm_split_mesh(sk_comm *c, const sk_mesh *mesh, uint32_t axis_mask, sk_comm **out, sk_error *err) {
  return sk__comm_report(c, sk__comm_split_mesh(c, mesh, axis_mask, out), err);
}

/* ---- validation and dispatch ------------------------------------------------------------------ */

static bool sk__overlap(const void *a, size_t na, const void *b, size_t nb) {
  if (!a || !b || !na || !nb) return false;
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

/* One side of a vector collective: counts present and each block addressable without
   wrapping; *extent receives the elements the buffer spans. */
static sk_result sk__validate_vec_side(sk_comm *c, const char *name, const char *side, const void *buf,
                                       const size_t *counts, const size_t *displs, size_t es, size_t *extent) {
  size_t limit = (SIZE_MAX / 4) / es / (size_t)c->size; /* as the count limit of the other kinds */
  if (!counts) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: %s_counts is NULL", name, side);
  for (int j = 0; j < c->size; j++) {
    if (counts[j] > limit || (displs && displs[j] > limit * (size_t)c->size))
      return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: %s block %d (count %zu, displ %zu) is too large", name,
                               side, j, counts[j], displs ? displs[j] : 0);
  }
  *extent = sk_coll_vec_extent(counts, displs, c->size);
  if (*extent && !buf)
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: %s buffer is NULL with %zu elements to move", name, side,
                             *extent);
  return SK_OK;
}

/* AllToAllV: both sides sane, send and recv apart (no in-place form), recv blocks disjoint
   (two peers writing one element is erroneous in MPI too). */
static sk_result sk__validate_vec(sk_comm *c, const sk_coll *op, const char *name) {
  size_t es = sk_dtype_size(op->dtype), sx = 0, rx = 0;
  const sk_coll_vec *v = &op->v;
  sk_result r = sk__validate_vec_side(c, name, "send", op->send, v->send_counts, v->send_displs, es, &sx);
  if (r == SK_OK) r = sk__validate_vec_side(c, name, "recv", op->recv, v->recv_counts, v->recv_displs, es, &rx);
  if (r != SK_OK) return r;
  if (sk__overlap(op->send, sx * es, op->recv, rx * es))
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: send and recv overlap (it has no in-place form)", name);
  if (!v->recv_displs) return SK_OK; /* packed blocks never overlap */
  for (int i = 0; i < c->size; i++)
    for (int j = i + 1; j < c->size; j++) {
      size_t a = v->recv_displs[i], b = v->recv_displs[j], na = v->recv_counts[i], nb = v->recv_counts[j];
      if (na && nb && a < b + nb && b < a + na)
        return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: recv blocks of ranks %d and %d overlap", name, i, j);
    }
  return SK_OK;
}

/* Checks op's arguments on comm; the message names the call and the argument. */
static sk_result sk__validate(sk_comm *c, const sk_coll *op) {
  const char *name = sk_coll_kind_name(op->kind);
  sk_coll_info info = sk_coll_info_of(op->kind);
  if (sk_world_aborted(c->world)) return sk_comm_set_error(c, SK_ERR_ABORTED, "%s: the world was aborted", name);
  if (op->kind == SK_COLL_BARRIER) return SK_OK;
  if (!sk_dtype_valid(op->dtype)) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: invalid dtype %d", name, (int)op->dtype);
  if ((info.flags & SK_COLLF_REDUCES) && !sk_redop_valid(op->op))
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: invalid reduce op %d", name, (int)op->op);
  bool p2p = (info.flags & SK_COLLF_P2P) != 0;
  if ((info.flags & (SK_COLLF_ROOTED | SK_COLLF_P2P)) && (op->root < 0 || op->root >= c->size))
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: %s %d out of range [0, %d)", name, p2p ? "peer" : "root",
                             op->root, c->size);
  size_t es = sk_dtype_size(op->dtype);
  if (info.flags & SK_COLLF_VECTOR) return sk__validate_vec(c, op, name);
  if (op->count > (SIZE_MAX / 4) / es / (size_t)c->size) /* no buffer is that large; keeps byte sums from wrapping */
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: count %zu is too large for %d ranks of %s", name,
                             op->count, c->size, sk_dtype_name(op->dtype));
  /* bytes of send and recv on this rank (0: not used here) */
  size_t sb = sk_coll_buf_elems(info.send, op->count, c->size, c->rank, op->root) * es;
  size_t rb = sk_coll_buf_elems(info.recv, op->count, c->size, c->rank, op->root) * es;
  if (sb && !op->send) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: send buffer is NULL with count %zu", name, op->count);
  if (rb && !op->recv) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: recv buffer is NULL with count %zu", name, op->count);
  /* Only NCCL's in-place forms may overlap. */
  if (sb && rb && sk__overlap(op->send, sb, op->recv, rb) &&
      !sk_coll_in_place(op->kind, op->send, op->recv, op->count, op->dtype, c->rank))
    return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: send and recv overlap without being the in-place form (%s)",
                             name, sk_coll_in_place_rule(op->kind));
  return SK_OK;
}

static sk_result sk__blocking(sk_comm *c, const sk_coll *in) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk__check_caller(c);
  if (r == SK_OK) r = sk__validate(c, in);
  if (r != SK_OK) return r;
  sk_coll op = *in;
  op.issue_us = sk_comm_clock_us(c);
  const sk_backend *b = c->world->backend;
  if (b->run) {
    double end_us = 0;
    r = b->run(c, &op, &end_us);
    sk__clock_reach(c, end_us);
    return sk__logged(c, r);
  }
  sk_request *req = NULL;
  r = b->start(c, &op, &req);
  if (r != SK_OK) return r;
  return sk_wait(&req, NULL);
}

static sk_result sk__nonblocking(sk_comm *c, const sk_coll *op, sk_request **req) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result rc = sk__check_caller(c);
  if (rc != SK_OK) return rc;
  if (!req) return sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "%s: req (the output pointer) is NULL", sk_coll_kind_name(op->kind));
  *req = NULL;
  sk_result r = sk__validate(c, op);
  if (r != SK_OK) return r;
  sk_coll o = *op;
  o.issue_us = sk_comm_clock_us(c);
  return c->world->backend->start(c, &o, req);
}

static sk_coll sk__coll(sk_coll_kind kind, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, int root) {
  sk_coll c;
  memset(&c, 0, sizeof c);
  c.kind = kind, c.send = send, c.recv = recv, c.count = count, c.dtype = dt, c.op = op, c.root = root;
  return c;
}

/* A backend that prices collectives (clock_align hook) takes the maximum without pricing it;
   one that prices none gets a plain AllReduce, which moves no clock there. */
static sk_result sk__clock_align(sk_comm *c) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk__check_caller(c);
  if (r != SK_OK || !sk__link_on(c->world)) return r;
  const sk_backend *b = c->world->backend;
  double mine = sk_comm_clock_us(c), latest = mine;
  if (b->clock_align) {
    r = b->clock_align(c, &latest);
  } else {
    sk_coll o;
    memset(&o, 0, sizeof o);
    o.kind = SK_COLL_ALLREDUCE, o.send = &mine, o.recv = &latest, o.count = 1, o.dtype = SK_F64, o.op = SK_MAX;
    r = sk__blocking(c, &o);
  }
  if (r == SK_OK) sk__clock_reach(c, latest);
  return r;
}
SK_API sk_result sk_comm_clock_align(sk_comm *c, sk_error *err) { return sk__comm_report(c, sk__clock_align(c), err); }

/* As the alignment: a pricing backend (clock_charge hook) applies its link-free time; one that
   prices none gets a plain MAX AllReduce of (clock, us), which moves no clock there. */
static sk_result sk__clock_charge(sk_comm *c, double us) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk__check_caller(c);
  if (r == SK_OK && !(us >= 0 && us <= 1e300))
    r = sk_comm_set_error(c, SK_ERR_INVALID_ARGUMENT, "clock_charge: us %g is not a time >= 0", us);
  if (r != SK_OK || !sk__link_on(c->world)) return r;
  const sk_backend *b = c->world->backend;
  double end = sk_comm_clock_us(c);
  if (b->clock_charge) {
    r = b->clock_charge(c, us, &end);
  } else {
    double mine[2] = {end, us}, most[2] = {0, 0};
    sk_coll o;
    memset(&o, 0, sizeof o);
    o.kind = SK_COLL_ALLREDUCE, o.send = mine, o.recv = most, o.count = 2, o.dtype = SK_F64, o.op = SK_MAX;
    r = sk__blocking(c, &o);
    end = most[0] + most[1];
  }
  if (r == SK_OK) sk__clock_reach(c, end);
  return r;
}
SK_API sk_result sk_comm_clock_charge(sk_comm *c, double us, sk_error *err) { return sk__comm_report(c, sk__clock_charge(c, us), err); }

SK_API sk_result sk_allreduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_ALLREDUCE, send, recv, count, dt, op, 0);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_allgather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_ALLGATHER, send, recv, count, dt, SK_SUM, 0);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_reduce_scatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_REDUCE_SCATTER, send, recv, count, dt, op, 0);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_broadcast(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_BROADCAST, send, recv, count, dt, SK_SUM, root);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_reduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, int root, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_REDUCE, send, recv, count, dt, op, root);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_alltoall(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_ALLTOALL, send, recv, count, dt, SK_SUM, 0);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_gather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_GATHER, send, recv, count, dt, SK_SUM, root);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_scatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_SCATTER, send, recv, count, dt, SK_SUM, root);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
static sk_coll sk__coll_vec(const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                            const size_t *recv_counts, const size_t *recv_displs, sk_dtype dt) {
  sk_coll o = sk__coll(SK_COLL_ALLTOALLV, send, recv, 0, dt, SK_SUM, 0);
  o.v.send_counts = send_counts, o.v.send_displs = send_displs;
  o.v.recv_counts = recv_counts, o.v.recv_displs = recv_displs;
  return o;
}
SK_API sk_result sk_alltoallv(sk_comm *c, const void *send, const size_t *send_counts, const size_t *send_displs,
                              void *recv, const size_t *recv_counts, const size_t *recv_displs, sk_dtype dt, sk_error *err) {
  sk_coll o = sk__coll_vec(send, send_counts, send_displs, recv, recv_counts, recv_displs, dt);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_barrier(sk_comm *c, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_BARRIER, NULL, NULL, 0, SK_U8, SK_SUM, 0);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_send(sk_comm *c, const void *buf, size_t count, sk_dtype dt, int peer, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_SEND, buf, NULL, count, dt, SK_SUM, peer);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
SK_API sk_result sk_recv(sk_comm *c, void *buf, size_t count, sk_dtype dt, int peer, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_RECV, NULL, buf, count, dt, SK_SUM, peer);
  return sk__comm_report(c, sk__blocking(c, &o), err);
}
static sk_result sk__sendrecv(sk_comm *c, const void *send, size_t send_count, int dst, void *recv, size_t recv_count,
                             int src, sk_dtype dt) {
  if (!c) return SK_ERR_INVALID_ARGUMENT;
  sk_result rc = sk__check_caller(c);
  if (rc != SK_OK) return rc;
  /* Both halves are checked before either is posted: a posted send whose recv half is then
     rejected would wait for a receiver that may never come. */
  sk_coll so = sk__coll(SK_COLL_SEND, send, NULL, send_count, dt, SK_SUM, dst);
  sk_coll ro = sk__coll(SK_COLL_RECV, NULL, recv, recv_count, dt, SK_SUM, src);
  sk_result r = sk__validate(c, &so);
  if (r == SK_OK) r = sk__validate(c, &ro);
  if (r != SK_OK) return r;
  sk_request *reqs[2] = {NULL, NULL};
  r = sk_isend(c, send, send_count, dt, dst, &reqs[0], NULL);
  if (r != SK_OK) return r;
  r = sk_irecv(c, recv, recv_count, dt, src, &reqs[1], NULL);
  if (r != SK_OK) {
    /* The posted send may never be matched (the peer's own sendrecv may have failed the same
       way): take the world down so that neither side waits for the timeout. */
    if (r != SK_ERR_ABORTED) sk_world_fail(c->world, r, c->head.error.msg);
    sk_wait(&reqs[0], NULL);
    return r;
  }
  return sk_waitall(2, reqs, NULL);
}
SK_API sk_result sk_sendrecv(sk_comm *c, const void *send, size_t send_count, int dst, void *recv, size_t recv_count,
                             int src, sk_dtype dt, sk_error *err) {
  return sk__comm_report(c, sk__sendrecv(c, send, send_count, dst, recv, recv_count, src, dt), err);
}

SK_API sk_result sk_iallreduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op,
                               sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_ALLREDUCE, send, recv, count, dt, op, 0);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_iallgather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_ALLGATHER, send, recv, count, dt, SK_SUM, 0);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_ireduce_scatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op,
                                    sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_REDUCE_SCATTER, send, recv, count, dt, op, 0);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_ibroadcast(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root,
                               sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_BROADCAST, send, recv, count, dt, SK_SUM, root);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_ireduce(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_redop op, int root,
                            sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_REDUCE, send, recv, count, dt, op, root);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_ialltoall(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_ALLTOALL, send, recv, count, dt, SK_SUM, 0);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_igather(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root,
                            sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_GATHER, send, recv, count, dt, SK_SUM, root);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_iscatter(sk_comm *c, const void *send, void *recv, size_t count, sk_dtype dt, int root,
                             sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_SCATTER, send, recv, count, dt, SK_SUM, root);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_ialltoallv(sk_comm *c, const void *send, const size_t *send_counts, const size_t *send_displs,
                               void *recv, const size_t *recv_counts, const size_t *recv_displs, sk_dtype dt,
                               sk_request **req, sk_error *err) {
  sk_coll o = sk__coll_vec(send, send_counts, send_displs, recv, recv_counts, recv_displs, dt);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_ibarrier(sk_comm *c, sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_BARRIER, NULL, NULL, 0, SK_U8, SK_SUM, 0);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_isend(sk_comm *c, const void *buf, size_t count, sk_dtype dt, int peer, sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_SEND, buf, NULL, count, dt, SK_SUM, peer);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}
SK_API sk_result sk_irecv(sk_comm *c, void *buf, size_t count, sk_dtype dt, int peer, sk_request **req, sk_error *err) {
  sk_coll o = sk__coll(SK_COLL_RECV, NULL, buf, count, dt, SK_SUM, peer);
  return sk__comm_report(c, sk__nonblocking(c, &o, req), err);
}

SK_API sk_result sk_wait(sk_request **req, sk_error *err) {
  if (!req) return sk_error_set(err, SK_ERR_INVALID_ARGUMENT, "wait: req is NULL");
  sk_request *r = *req;
  if (!r) return SK_OK;
  sk_comm *c = r->comm; /* the request is freed below */
  sk_result res = sk__check_caller(c);
  if (res != SK_OK) return sk__comm_report(c, res, err);
  res = sk__logged(c, c->world->backend->wait(r));
  sk__clock_reach(c, r->model_end_us);
  *req = NULL;
  r->free_fn(r);
  return sk__comm_report(c, res, err);
}

SK_API sk_result sk_test(sk_request **req, bool *done, sk_error *err) {
  if (!req || !done) return sk_error_set(err, SK_ERR_INVALID_ARGUMENT, "test: %s is NULL", req ? "done" : "req");
  sk_request *r = *req;
  if (!r) {
    *done = true;
    return SK_OK;
  }
  sk_comm *c = r->comm; /* the request is freed below */
  sk_result res = sk__check_caller(c);
  if (res != SK_OK) {
    *done = false;
    return sk__comm_report(c, res, err);
  }
  res = r->comm->world->backend->test(r, done);
  /* Under a link model "done" is in virtual time: not before this device's clock reaches the
     modelled end, or polling would make modelled times depend on real-time races. */
  if (*done && sk__link_on(r->comm->world) && sk_comm_clock_us(r->comm) < r->model_end_us) {
    *done = false;
    return SK_OK;
  }
  if (*done) {
    sk__logged(r->comm, res);
    sk__clock_reach(r->comm, r->model_end_us);
    *req = NULL;
    r->free_fn(r);
  }
  return sk__comm_report(c, res, err);
}

SK_API sk_result sk_waitall(int n, sk_request **reqs, sk_error *err) {
  if (n < 0 || (n > 0 && !reqs))
    return sk_error_set(err, SK_ERR_INVALID_ARGUMENT, "waitall: n = %d with reqs %s", n, reqs ? "set" : "NULL");
  sk_result first = SK_OK;
  for (int i = 0; i < n; i++) {
    sk_result r = sk_wait(&reqs[i], first == SK_OK ? err : NULL); /* err keeps the first failure */
    if (r != SK_OK && first == SK_OK) first = r;
  }
  return first;
}

/* ---- reduction kernels ------------------------------------------------------------------------ */
/* Each reduces n inputs elementwise, left to right, into an accumulator A, then stores to T.
   Integer sum/prod/avg run in the unsigned type of the same width (wrap, no UB). */

#define SK__NAN_MIN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (b) < (a) ? (b) : (a))
#define SK__NAN_MAX(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (b) > (a) ? (b) : (a))
#define SK__MIN(a, b) ((b) < (a) ? (b) : (a))
#define SK__MAX(a, b) ((b) > (a) ? (b) : (a))
#define SK__ID(x) (x)

/* acc = LOAD(in0); acc = COMB(acc, LOAD(in_r)) for r = 1..n-1; out = STORE(POST(acc)).
   Register-blocked: SK__VW elements at a time are combined across all n inputs in registers and
   stored once, so each input is read once and nothing else touches memory. The fixed-width
   inner loops are what GCC's default -O2 cost model vectorizes (it leaves loops of unknown
   length scalar, and a header cannot pick the user's flags). */
#define SK__VW 16
#define SK__REDUCE_GROUP(T, A, LOAD, STORE, COMB, POST, W, i0)                           \
  do {                                                                                   \
    A a[W];                                                                              \
    const T *in0 = (const T *)srcs[0] + (i0);                                            \
    for (size_t j = 0; j < (W); j++) a[j] = (A)LOAD(in0[j]);                             \
    for (int r = 1; r < n; r++) {                                                        \
      const T *in = (const T *)srcs[r] + (i0);                                           \
      for (size_t j = 0; j < (W); j++) {                                                 \
        A b = (A)LOAD(in[j]);                                                            \
        a[j] = (A)(COMB(a[j], b));                                                       \
      }                                                                                  \
    }                                                                                    \
    T *out = (T *)dst + (i0);                                                            \
    for (size_t j = 0; j < (W); j++) out[j] = STORE(POST(a[j]));                         \
  } while (0)

#define SK__REDUCE_LOOP(T, A, LOAD, STORE, COMB, POST)                                   \
  do {                                                                                   \
    size_t i0 = begin;                                                                   \
    for (; i0 + SK__VW <= end; i0 += SK__VW)                                             \
      SK__REDUCE_GROUP(T, A, LOAD, STORE, COMB, POST, SK__VW, i0);                       \
    for (; i0 < end; i0++) SK__REDUCE_GROUP(T, A, LOAD, STORE, COMB, POST, 1, i0);       \
  } while (0)

#define SK__ADD(a, b) ((a) + (b))
#define SK__DIV_BY_N(x) ((x) / div) /* `div` is the kernel's local (A)n */
#define SK__MUL(a, b) ((a) * (b))

/* Blocked so the accumulator stays in L1: a kernel reduces elements [begin, end) of every input,
   end - begin <= SK__RED_BLOCK (the range, not offset pointers, so that any n needs no memory). */
#define SK__RED_BLOCK 1024

#define SK__DEFINE_FLOAT_KERNEL(fname, T, A, LOAD, STORE)                                          \
  static void fname(void *dst, const void *const *srcs, int n, size_t begin, size_t end, sk_redop op) { \
    A div = (A)n;                                                                                  \
    (void)div;                                                                                     \
    switch (op) {                                                                                  \
      case SK_SUM: SK__REDUCE_LOOP(T, A, LOAD, STORE, SK__ADD, SK__ID); break;                     \
      case SK_PROD: SK__REDUCE_LOOP(T, A, LOAD, STORE, SK__MUL, SK__ID); break;                    \
      case SK_MIN: SK__REDUCE_LOOP(T, A, LOAD, STORE, SK__NAN_MIN, SK__ID); break;                 \
      case SK_MAX: SK__REDUCE_LOOP(T, A, LOAD, STORE, SK__NAN_MAX, SK__ID); break;                 \
      case SK_AVG:                                                                                 \
      default: SK__REDUCE_LOOP(T, A, LOAD, STORE, SK__ADD, SK__DIV_BY_N); break;                   \
    }                                                                                              \
  }

/* Integer kernels: U is the unsigned type of T's width. Sum/prod/avg accumulate in U; min/max
   compare in T. avg converts the wrapped sum back to T and divides (truncation toward zero). */
#define SK__DEFINE_INT_KERNEL(fname, T, U)                                                         \
  static void fname(void *dst, const void *const *srcs, int n, size_t begin, size_t end, sk_redop op) { \
    switch (op) {                                                                                  \
      case SK_SUM: {                                                                               \
        SK__REDUCE_LOOP(T, U, (U), (T), SK__ADD, SK__ID);                                          \
        break;                                                                                     \
      }                                                                                            \
      case SK_PROD: {                                                                              \
        SK__REDUCE_LOOP(T, U, (U), (T), SK__UMUL, SK__ID);                                         \
        break;                                                                                     \
      }                                                                                            \
      case SK_MIN: {                                                                               \
        SK__REDUCE_LOOP(T, T, SK__ID, SK__ID, SK__MIN, SK__ID);                                    \
        break;                                                                                     \
      }                                                                                            \
      case SK_MAX: {                                                                               \
        SK__REDUCE_LOOP(T, T, SK__ID, SK__ID, SK__MAX, SK__ID);                                    \
        break;                                                                                     \
      }                                                                                            \
      case SK_AVG:                                                                                 \
      default: {                                                                                   \
        SK__REDUCE_LOOP(T, U, (U), SK__ID, SK__ADD, (T));                                          \
        T *o = (T *)dst; /* divide in 64 bits: n may not fit in T (200 inputs of i8) */            \
        for (size_t i = begin; i < end; i++) o[i] = (T)((long long)o[i] / (long long)n);             \
        break;                                                                                     \
      }                                                                                            \
    }                                                                                              \
  }

/* Unsigned multiply without promotion to (signed) int overflowing: widen to unsigned long long. */
#define SK__UMUL(a, b) ((unsigned long long)(a) * (unsigned long long)(b))

#define SK__LOAD_F16(x) sk_f16_to_f32(x)
#define SK__STORE_F16(x) sk_f32_to_f16(x)
#define SK__LOAD_BF16(x) sk_bf16_to_f32(x)
#define SK__STORE_BF16(x) sk_f32_to_bf16(x)

SK__DEFINE_FLOAT_KERNEL(sk__red_f32, float, float, SK__ID, SK__ID)
SK__DEFINE_FLOAT_KERNEL(sk__red_f64, double, double, SK__ID, SK__ID)
SK__DEFINE_FLOAT_KERNEL(sk__red_f16, uint16_t, float, SK__LOAD_F16, SK__STORE_F16)
SK__DEFINE_FLOAT_KERNEL(sk__red_bf16, uint16_t, float, SK__LOAD_BF16, SK__STORE_BF16)
SK__DEFINE_INT_KERNEL(sk__red_i8, int8_t, uint8_t)
SK__DEFINE_INT_KERNEL(sk__red_u8, uint8_t, uint8_t)
SK__DEFINE_INT_KERNEL(sk__red_i32, int32_t, uint32_t)
SK__DEFINE_INT_KERNEL(sk__red_i64, int64_t, uint64_t)

SK_API sk_result sk_reduce_local(void *dst, const void *const *srcs, int n, size_t count, sk_dtype dt, sk_redop op, sk_error *err) {
  if (!sk_dtype_valid(dt) || !sk_redop_valid(op))
    return sk_error_set(err, SK_ERR_INVALID_ARGUMENT, "reduce_local: invalid dtype %d or reduce op %d", (int)dt, (int)op);
  if (n < 1 || !srcs || (count && !dst))
    return sk_error_set(err, SK_ERR_INVALID_ARGUMENT, "reduce_local: n = %d, srcs %s, dst %s with count %zu", n,
                        srcs ? "set" : "NULL", dst ? "set" : "NULL", count);
  for (int r = 0; r < n; r++)
    if (count && !srcs[r])
      return sk_error_set(err, SK_ERR_INVALID_ARGUMENT, "reduce_local: srcs[%d] is NULL with count %zu", r, count);
  void (*k)(void *, const void *const *, int, size_t, size_t, sk_redop);
  switch (dt) {
    case SK_F32: k = sk__red_f32; break;
    case SK_F64: k = sk__red_f64; break;
    case SK_F16: k = sk__red_f16; break;
    case SK_BF16: k = sk__red_bf16; break;
    case SK_I8: k = sk__red_i8; break;
    case SK_U8: k = sk__red_u8; break;
    case SK_I32: k = sk__red_i32; break;
    default: k = sk__red_i64; break;
  }
  for (size_t off = 0; off < count; off += SK__RED_BLOCK)
    k(dst, srcs, n, off, count - off < SK__RED_BLOCK ? count : off + SK__RED_BLOCK, op);
  return SK_OK;
}

SK_EXTERN_C_END

#endif /* SK_COMM_IMPL */
