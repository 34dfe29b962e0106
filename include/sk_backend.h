/* sk_backend.h -- the contract between shardkit's generic layer and a backend (for backend
   authors; users need sk_comm.h only).

   WHO DOES WHAT. The generic layer (sk_comm.h's implementation) owns the semantics, once for
   every backend: argument validation and its messages; the collectives table (what each
   operation reads and writes); running device functions and turning a failure into a world
   abort with its root cause (sk_device_entry); the error text of every call; the logger;
   the mismatch description (sk_coll_same_call, sk_comm_set_mismatch); the link model's clocks.
   A backend only moves data: it starts an operation (start), observes it (test, wait), runs
   devices where it keeps them (world_run), builds communicators (comm_init_rank, comm_split),
   and, optionally, copies between buffers it owns (copy) and lets a collective reach peers'
   buffers (peer_access). World, communicator and request records are the generic layer's;
   a backend keeps its own state behind sk_world_state() / sk_comm_state().

   WRITING ONE (NCCL, HCCL, ...): define the hook table with designated initializers, so that
   a later version's new hooks start out NULL:
     static const sk_backend my_backend = {
         .version = SK_BACKEND_VERSION, .name = "nccl",
         .world_create = ..., .world_destroy = ..., .world_run = ...,
         .comm_init_rank = ..., .comm_split = ..., .comm_destroy = ...,
         .start = ..., .test = ..., .wait = ..., .abort = ...,
         .copy = ...,   // device memory: cudaMemcpyAsync on the comm's stream, then sync
     };
   and set desc.backend = &my_backend. For NCCL: world_create makes one ncclComm per device
   (ncclCommInitAll or ncclCommInitRank); start maps sk_coll onto ncclAllReduce & co. on a
   per-comm stream and records an event; test/wait poll that event against the deadline
   (sk_world_config(w)->timeout_ms); abort calls ncclCommAbort. A hook reports failure with
   sk_comm_set_error(), and SK_ERR_UNSUPPORTED for "not on this backend".

   VERSIONS. SK_BACKEND_VERSION changes whenever a hook's meaning or signature does;
   sk_world_create refuses a table of another version with a message naming both.
   Version 2 (this one): world_destroy returns a result; world_run receives the generic
   per-device entry; comm_init_rank, comm_split and run return the communicator's shape and the
   modelled end through parameters instead of writing records; copy added.

   License: MIT. */
/* Outside the guard on purpose: with SK_IMPL, sk_comm.h's implementation includes this header
   in turn and needs it complete, also when this header is the first one included. */
#include "sk_comm.h"

#ifndef SK_BACKEND_H
#define SK_BACKEND_H

SK_EXTERN_C_BEGIN

/* The per-peer layout of a vector collective (AllToAllV): size entries each, in elements;
   a NULL displs array means packed in rank order (sk_coll_vec_displ). */
typedef struct sk_coll_vec {
  const size_t *send_counts, *send_displs;
  const size_t *recv_counts, *recv_displs;
} sk_coll_vec;

/* One operation as the generic layer hands it to a backend, already validated. */
typedef struct sk_coll {
  sk_coll_kind kind;
  const void *send;
  void *recv;
  size_t count; /* vector kinds: 0 (the counts are in v) */
  sk_dtype dtype;
  sk_redop op;
  int root; /* root of Broadcast/Reduce/Gather/Scatter; peer of Send/Recv */
  double issue_us; /* link model: the issuing device's virtual clock at the call */
  sk_coll_vec v;   /* vector kinds only; zero otherwise */
} sk_coll;

/* The generic part of a request: a backend's request record starts with this struct (users
   only ever hold sk_request pointers). */
struct sk_request {
  sk_comm *comm;
  sk_coll coll;
  void (*free_fn)(sk_request *req); /* set by the backend */
  double model_end_us;              /* link model: set by the backend when it completes */
};

#define SK_BACKEND_VERSION 2

/* SK_HOOK(start) f,  is the designated initializer .start = f  in C and C++20, and positional
   in C++17, which lacks designators: a table written with it lists the fields in declaration
   order (as C++20 requires anyway) and compiles in both languages. */
#if defined(__cplusplus) && __cplusplus < 202002L
#define SK_HOOK(field)
#else
#define SK_HOOK(field) .field =
#endif

/* The generic body of one device (sk_world_run): joins the world as `rank`, runs the user's
   device function, records a failure as the world's root cause (which aborts it, so peers
   return instead of hanging) and leaves. A backend's world_run calls it once per device it
   hosts, on the thread that is to be that device. */
typedef sk_result (*sk_device_entry)(sk_world *world, int rank, void *ctx);

/* The hook table. Required: world_create, world_destroy, world_run, comm_init_rank,
   comm_split, comm_destroy, start, test, wait, abort. Optional (NULL = the generic path):
   run, check_caller, peer_access, copy, clock_align, clock_charge. */
struct sk_backend {
  int version; /* SK_BACKEND_VERSION */
  const char *name;
  /* Builds backend state for a world; sets *ndevices (may read desc->ndevices). */
  sk_result (*world_create)(sk_world *world, const sk_world_desc *desc, void **state, int *ndevices, sk_error *err);
  /* Frees it; the result is sk_world_destroy's (e.g. a bounded teardown that gave up). */
  sk_result (*world_destroy)(sk_world *world, void *state);
  /* Runs entry(world, rank, ctx) once for every device this process hosts, each on the thread
     that acts as that device, and returns when all have returned (the first non-OK result). */
  sk_result (*world_run)(sk_world *world, sk_device_entry entry, void *ctx);
  /* The calling thread becomes device `rank`; *state: the backend's part of the communicator. */
  sk_result (*comm_init_rank)(sk_comm *comm, int rank, void **state, sk_error *err);
  /* Collective over parent, as MPI_Comm_split (color >= 0 or SK_UNDEFINED, validated). A member
     sets *state and its *rank and *size in the new communicator; SK_UNDEFINED leaves *state
     NULL. child is the generic record the new state belongs to. */
  sk_result (*comm_split)(sk_comm *parent, int color, int key, sk_comm *child, void **state, int *rank, int *size);
  void (*comm_destroy)(sk_comm *comm, void *state);
  /* Starts op; *req receives a request (backend-allocated, starting with struct sk_request). */
  sk_result (*start)(sk_comm *comm, const sk_coll *op, sk_request **req);
  sk_result (*test)(sk_request *req, bool *done);
  sk_result (*wait)(sk_request *req);
  /* Blocking fast path (else start + wait); *model_end_us: as sk_request.model_end_us. */
  sk_result (*run)(sk_comm *comm, const sk_coll *op, double *model_end_us);
  void (*abort)(sk_world *world);
  /* Called before anything else on every call that takes comm (or a request of it): a non-OK
     result is returned at once and nothing is written to comm, because the caller may not be
     comm's owner (the threads backend binds a communicator to its thread). */
  sk_result (*check_caller)(const sk_comm *comm);
  /* sk_comm_peer_access, for shared_address_space backends. NULL = SK_ERR_UNSUPPORTED. */
  sk_result (*peer_access)(sk_comm *comm, const void *mine, sk_peer_fn fn, void *ctx);
  /* sk_comm_copy: bytes from src to dst, both this device's buffers. NULL = memcpy (host
     memory). A device-memory backend copies on its stream and returns when done. */
  sk_result (*copy)(sk_comm *comm, void *dst, const void *src, size_t bytes);
  /* 1 when every device of a world lives in this process's address space (the threads
     backend): collective callers may then exchange buffer pointers and copy straight from
     peers' buffers, bracketed by synchronisation (see sk_comm_shared_memory). */
  int shared_address_space;
  /* sk_comm_clock_align, for backends that price collectives in the link model: a collective
     over comm that sets *clock_us (in: this member's clock) to the members' maximum and moves
     no modelled time (no cost, no group's link-free time). NULL = a plain MAX AllReduce of the
     clocks, right for a backend whose collectives move no clock. */
  sk_result (*clock_align)(sk_comm *comm, double *clock_us);
  /* sk_comm_clock_charge, for backends that price collectives in the link model: a collective
     over comm that moves no data; in: *clock_us this member's clock, us its price of the event;
     out: *clock_us = the event's end = max(the members' clocks, comm's link-free time) + the
     largest us, which becomes comm's link-free time. NULL = a plain MAX AllReduce of (clock, us),
     the end their sum, right for a backend whose collectives move no clock. */
  sk_result (*clock_charge)(sk_comm *comm, double us, double *clock_us);
};

/* ---- the records, through accessors (their layout is the generic layer's) ------------------ */

/* What the backend's world_create returned in *state, and comm_init_rank / comm_split in
   theirs. */
SK_API void *sk_world_state(const sk_world *world);
SK_API void *sk_comm_state(const sk_comm *comm);
/* The world's configuration with defaults applied (timeout_ms, allocator, logger, link). */
SK_API const sk_world_desc *sk_world_config(const sk_world *world);

/* ---- semantics the generic layer owns, for backends to apply ---------------------------------- */

/* Whether two members' postings are the same call: kind, count and dtype, plus the reduce op
   where the kind reduces and the root where it is rooted. */
SK_API bool sk_coll_same_call(const sk_coll *a, const sk_coll *b);
/* What one member called, for messages: "allreduce(count 4, f32, sum, root 0)". */
SK_API void sk_coll_describe(char *buf, size_t cap, const sk_coll *op);
/* The mismatch verdict every backend reports (SK_ERR_MISMATCH, returned):
   "mismatch: rank A called <what_a> but rank B called <what_b>". */
SK_API sk_result sk_comm_set_mismatch(sk_comm *comm, int rank_a, const char *what_a, int rank_b, const char *what_b);

SK_EXTERN_C_END

#endif /* SK_BACKEND_H */
