/* coll_grid.h -- the parametrised collective grid, one harness for every backend.

   The threads suite (tests/test_comm_coll.c, under Criterion) and the MPI driver
   (tests/mpi/mpi_driver.c, a plain MPI program under mpirun) run the same cases through the same
   functions:
   - cg_case describes one case: which collective (cg_kind), dtype, reduce op, count, in place or
     not, root, blocking or non-blocking, the group it runs on (the world, a split, a created
     group, a mesh axis), the input style, and a seed.
   - cg_expand turns a cg_grid (dtypes x ops x counts x placements x roots) into cases.
   - cg_run_case runs one case on a rank: it makes the case's group, fills the inputs, makes the
     call, and checks everything it can see on that rank: the outputs against comm_test_util.h's
     reference (never against sk_reduce_local), the inputs unchanged, the guard bytes after every
     buffer intact, the buffers a rank passes but must not receive into left as they were.
   - Failures go to a ct_slot (comm_test_util.h), which does not depend on Criterion: the threads
     suite asserts on its slots on the test's own thread, the driver prints and counts them.

   Inputs are a pure function of (group rank, case seed, the group's colour), so every rank
   computes what every peer sent and what the collective must produce without looking at its
   peers' buffers; two groups of one split get different inputs, so data crossing between them
   shows. Input styles (cg_style):
   - CG_ORDERED: comm_test_util.h's patterns, whose float sums depend on the order: only rank 0,
     1, ..., n-1 left to right matches. For backends that promise that order: threads, and MPI
     in deterministic mode.
   - CG_EXACT: float reductions take CT_PAT_EXACT (+-2^k, k in [-2, 2], NaNs now and then), whose
     sums and products are exact in any order: for MPI's default mode, which reduces in MPI's
     order. Still compared bit for bit with the reference, except that any NaN equals any NaN
     (ct_elem_eq: MPI's order may pick either payload). Data movement always takes CT_PAT_MOVE.

   Adding a collective: one row in CG_COLLECTIVES and one cg_run_<name> function (the case's
   fields give it everything, e.g. per-peer counts derived from count, rank and peer, as
   cg_run_alltoallv does; its buffers come from cg_buf and are freed with the case; cg_complete
   finishes either call form; the cg_check_* helpers record into the slot); the grid, the
   groups, non-blocking and both runners pick it up. */
#ifndef COLL_GRID_H
#define COLL_GRID_H

#include "comm_test_util.h"

/* ---- the kinds: one row each --------------------------------------------------------------- */

/* What the library's table (SK_COLL_LIST) does not say: whether the kind has an in-place form,
   and for the composites, which case fields they use. */
enum {
  CG_F_IN_PLACE = 1, /* NCCL's in-place form (or MPI's, on the root): cases come in both placements */
  CG_F_REDUCES = 2,  /* a composite that takes the case's op */
  CG_F_ROOTED = 4,   /* a composite that takes the case's root */
  CG_F_NO_DATA = 8   /* no buffers: one case per grid, whatever its dtypes and counts */
};

/* X(id, name, library kind, flags, run-and-check function). Reduces? rooted? come from the
   library's table for the collectives, from the flags for the composites. */
#define CG_COLLECTIVES(X)                                                                              \
  X(CG_ALLREDUCE, "allreduce", SK_COLL_ALLREDUCE, CG_F_IN_PLACE, cg_run_allreduce)                     \
  X(CG_ALLGATHER, "allgather", SK_COLL_ALLGATHER, CG_F_IN_PLACE, cg_run_allgather)                     \
  X(CG_REDUCE_SCATTER, "reduce_scatter", SK_COLL_REDUCE_SCATTER, CG_F_IN_PLACE, cg_run_reduce_scatter) \
  X(CG_BROADCAST, "broadcast", SK_COLL_BROADCAST, CG_F_IN_PLACE, cg_run_broadcast)                     \
  X(CG_REDUCE, "reduce", SK_COLL_REDUCE, CG_F_IN_PLACE, cg_run_reduce)                                 \
  X(CG_ALLTOALL, "alltoall", SK_COLL_ALLTOALL, CG_F_IN_PLACE, cg_run_alltoall)                         \
  X(CG_GATHER, "gather", SK_COLL_GATHER, CG_F_IN_PLACE, cg_run_gather)                                 \
  X(CG_SCATTER, "scatter", SK_COLL_SCATTER, CG_F_IN_PLACE, cg_run_scatter)                             \
  X(CG_ALLTOALLV, "alltoallv", SK_COLL_ALLTOALLV, 0, cg_run_alltoallv)
/* Not one library call each: a ring of Send/Recv, three requests outstanding at once, a barrier.
   Left out where a runner sweeps "every collective". */
#define CG_COMPOSITES(X)                                                                   \
  X(CG_RING, "sendrecv_ring", SK_COLL_NONE, 0, cg_run_ring)                                \
  X(CG_MULTI, "multi", SK_COLL_NONE, CG_F_REDUCES | CG_F_ROOTED, cg_run_multi)             \
  X(CG_BARRIER, "barrier", SK_COLL_BARRIER, CG_F_NO_DATA, cg_run_barrier)

#define CG__ENUM(id, name, coll, flags, fn) id,
#define CG__ONE(id, name, coll, flags, fn) +1
typedef enum cg_kind { CG_COLLECTIVES(CG__ENUM) CG_COMPOSITES(CG__ENUM) CG_NKINDS } cg_kind;
enum { CG_NCOLLS = 0 CG_COLLECTIVES(CG__ONE) }; /* the collectives are kinds 0 .. CG_NCOLLS-1 */
#undef CG__ENUM
#undef CG__ONE

typedef enum cg_group { CG_WORLD = 0, CG_SPLIT, CG_CREATE, CG_MESH, CG_NGROUPS } cg_group;
static const char *const cg_group_names[CG_NGROUPS] = {"world", "split", "create", "mesh"};

typedef enum cg_style { CG_ORDERED = 0, CG_EXACT } cg_style;

/* One case. Zero fields are the plain case: blocking, on the world, ordered inputs. The same
   list is built on every rank, so every rank makes the same calls in the same order. */
typedef struct cg_case {
  cg_kind kind;
  sk_dtype dt;
  sk_redop op; /* reducing kinds only */
  size_t count;
  bool inplace;
  int root;      /* rooted kinds; taken modulo the size of the case's group */
  uint64_t seed; /* inputs; its low bits also pick the optional NULL pointers */
  bool nb;       /* the non-blocking call, completed by polling sk_test, then sk_wait */
  cg_group group;
  cg_style style;
} cg_case;

/* Where the cases run, for failure messages, and an optional tap on the outputs: keep() gets
   the bytes of every output a case checks on this rank (the MPI driver compares deterministic
   mode with the threads backend bit for bit through it, NaN payloads included). */
typedef struct cg_env {
  const char *label; /* e.g. "cfg=force_large", "mpi/chunk" */
  void (*keep)(void *user, const void *bytes, size_t len);
  void *user;
  bool calls_only; /* make the calls, check nothing but their results: a device whose outputs
                      nobody looks at (the MPI driver's threads world, all but one device) */
} cg_env;

/* The buffers of one case (cg_buf): cg_run_case frees them once the run-and-check function has
   returned, so that no function needs a cleanup path of its own. */
#define CG_MAX_BUFS 8
typedef struct cg_bufs {
  unsigned char *p[CG_MAX_BUFS];
  int n;
} cg_bufs;

/* One case being run on one rank of its group. */
typedef struct cg_run {
  sk_comm *c;        /* the case's group */
  const cg_case *t;  /* root already within the group */
  int rank, n;       /* in the group */
  uint64_t data_seed; /* the case's seed mixed with the group's colour */
  ct_slot *s;
  const cg_env *env;
  const char *ctx; /* the case in words */
  cg_bufs *bufs;
} cg_run;

/* ---- helpers of the run-and-check functions --------------------------------------------------- */

/* nbytes with guard bytes after them (ct_buf), freed with the case. */
static inline unsigned char *cg_buf(const cg_run *x, size_t nbytes) {
  if (x->bufs->n == CG_MAX_BUFS) {
    fprintf(stderr, "coll_grid: %s: more than %d buffers\n", x->ctx, CG_MAX_BUFS);
    abort();
  }
  unsigned char *p = ct_buf(nbytes);
  x->bufs->p[x->bufs->n++] = p;
  return p;
}

/* The inputs' pattern: reductions take the style's, data movement many distinct values. */
static inline int cg_pattern(const cg_case *t, bool reduces) {
  if (!reduces) return CT_PAT_MOVE;
  return t->style == CG_EXACT ? CT_PAT_EXACT : ct_pat_for(t->op);
}

/* count elements of rank's input from first_index on. */
static inline void cg_fill(const cg_run *x, int pat, int rank, size_t first_index, void *buf, size_t count) {
  ct_fill(x->t->dt, pat, x->data_seed, rank, first_index, buf, count);
}

/* The reference: out[k] = op over every rank's input element first_index + k. */
static inline void cg_ref(const cg_run *x, int pat, size_t first_index, void *out, size_t count) {
  ct_ref_gen(out, x->t->dt, x->t->op, pat, x->data_seed, x->n, first_index, count);
}

/* An output against what it must hold; the output also goes to the env's tap. */
static inline void cg_check_out(const cg_run *x, const char *what, const void *got, const void *expected,
                                size_t count) {
  ct_cmp(x->s, x->ctx, what, x->t->dt, got, expected, count);
  if (x->env->keep) x->env->keep(x->env->user, got, count * sk_dtype_size(x->t->dt));
}

/* A buffer the collective reads but must not write still holds rank's input. */
static inline void cg_check_input(const cg_run *x, const char *what, int pat, int rank, const void *buf,
                                  size_t count) {
  size_t nb = count * sk_dtype_size(x->t->dt);
  unsigned char *want = ct_buf(nb);
  if (!want) {
    ct_fail(x->s, "%s: out of memory for the check of %s", x->ctx, what);
    return;
  }
  cg_fill(x, pat, rank, 0, want, count);
  ct_cmp(x->s, x->ctx, what, x->t->dt, buf, want, count);
  free(want);
}

static inline void cg_check_pad(const cg_run *x, const char *what, const unsigned char *p, size_t nbytes) {
  ct_check(x->s, ct_pad_ok(p, nbytes), "%s: %s: guard bytes after the buffer were overwritten", x->ctx, what);
}

/* An output buffer of its own (from ct_buf, not a block inside another): contents and guard bytes. */
static inline void cg_check_recv(const cg_run *x, const char *what, const unsigned char *recv, const void *expected,
                                 size_t count) {
  cg_check_out(x, what, recv, expected, count);
  cg_check_pad(x, what, recv, count * sk_dtype_size(x->t->dt));
}

/* This rank's send buffer of count elements still holds its input, guard bytes intact. */
static inline void cg_check_send(const cg_run *x, const char *what, int pat, const unsigned char *send, size_t count) {
  cg_check_input(x, what, pat, x->rank, send, count);
  cg_check_pad(x, "send", send, count * sk_dtype_size(x->t->dt));
}

/* A buffer the collective must ignore (a non-root's) still holds the junk it was given. */
static inline void cg_check_untouched(const cg_run *x, const char *what, const unsigned char *p, size_t nbytes) {
  ct_check(x->s, ct_all_bytes(p, nbytes, CT_JUNK_BYTE), "%s: %s was written", x->ctx, what);
}

/* The buffers a call gets. Count 0 out of place: NULL buffers are allowed, so some cases pass
   them (which seed bit decides differs per collective, so that NULL meets the other optional
   buffers both ways). */
typedef struct cg_ptrs {
  const void *send;
  void *recv;
} cg_ptrs;

static inline cg_ptrs cg_pass(const cg_case *t, uint64_t null_seed_bit, const void *send, void *recv) {
  cg_ptrs p = {send, recv};
  if (t->count == 0 && !t->inplace && (t->seed & null_seed_bit)) p.send = NULL, p.recv = NULL;
  return p;
}

/* Records the call's result; true when it succeeded and the outputs are to be checked. */
static inline bool cg_called(const cg_run *x, sk_result r) {
  return ct_rc(x->s, r, x->c, x->ctx) && !x->env->calls_only;
}

/* Completes a call: a failed issue is the result; a request is polled with sk_test a while
   (under MPI only calls into shardkit progress it), then waited for. Blocking calls pass
   through (no request). */
static inline sk_result cg_complete(sk_result issued, sk_request **req) {
  if (issued != SK_OK) return issued;
  for (int i = 0; i < 50 && *req; i++) {
    bool done = false;
    sk_result r = ct_test(req, &done);
    if (r != SK_OK || done) return r;
  }
  return sk_wait(req, NULL);
}

/* ---- one case of each collective ---------------------------------------------------------------- */

static inline sk_result cg_run_allreduce(const cg_run *x) {
  const cg_case *t = x->t;
  size_t nb = t->count * sk_dtype_size(t->dt);
  int pat = cg_pattern(t, true);
  unsigned char *recv = cg_buf(x, nb), *send = t->inplace ? recv : cg_buf(x, nb), *exp = cg_buf(x, nb);
  cg_fill(x, pat, x->rank, 0, send, t->count);
  cg_ptrs p = cg_pass(t, 1, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_iallreduce(x->c, p.send, p.recv, t->count, t->dt, t->op, &req, NULL)
                                  : sk_allreduce(x->c, p.send, p.recv, t->count, t->dt, t->op, NULL),
                            &req);
  if (cg_called(x, r)) {
    cg_ref(x, pat, 0, exp, t->count);
    cg_check_recv(x, "recv", recv, exp, t->count);
    if (!t->inplace) cg_check_send(x, "send buffer changed", pat, send, t->count);
  }
  return r;
}

static inline sk_result cg_run_allgather(const cg_run *x) {
  const cg_case *t = x->t;
  size_t nb = t->count * sk_dtype_size(t->dt), all = nb * (size_t)x->n;
  unsigned char *recv = cg_buf(x, all), *exp = cg_buf(x, all);
  unsigned char *send = t->inplace ? recv + (size_t)x->rank * nb : cg_buf(x, nb);
  cg_fill(x, CT_PAT_MOVE, x->rank, 0, send, t->count);
  cg_ptrs p = cg_pass(t, 1, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_iallgather(x->c, p.send, p.recv, t->count, t->dt, &req, NULL)
                                  : sk_allgather(x->c, p.send, p.recv, t->count, t->dt, NULL),
                            &req);
  if (cg_called(x, r)) {
    for (int j = 0; j < x->n; j++) cg_fill(x, CT_PAT_MOVE, j, 0, exp + (size_t)j * nb, t->count);
    cg_check_recv(x, "recv", recv, exp, t->count * (size_t)x->n);
    if (!t->inplace) cg_check_send(x, "send buffer changed", CT_PAT_MOVE, send, t->count);
  }
  return r;
}

static inline sk_result cg_run_reduce_scatter(const cg_run *x) {
  const cg_case *t = x->t;
  size_t nb = t->count * sk_dtype_size(t->dt), all = nb * (size_t)x->n, tot = t->count * (size_t)x->n;
  int pat = cg_pattern(t, true);
  unsigned char *send = cg_buf(x, all), *exp = cg_buf(x, nb);
  unsigned char *recv = t->inplace ? send + (size_t)x->rank * nb : cg_buf(x, nb);
  cg_fill(x, pat, x->rank, 0, send, tot);
  cg_ptrs p = cg_pass(t, 1, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_ireduce_scatter(x->c, p.send, p.recv, t->count, t->dt, t->op, &req, NULL)
                                  : sk_reduce_scatter(x->c, p.send, p.recv, t->count, t->dt, t->op, NULL),
                            &req);
  if (cg_called(x, r)) {
    cg_ref(x, pat, (size_t)x->rank * t->count, exp, t->count);
    cg_check_out(x, "recv", recv, exp, t->count);
    cg_check_pad(x, "send", send, all);
    if (!t->inplace) {
      cg_check_pad(x, "recv", recv, nb);
      cg_check_input(x, "send buffer changed", pat, x->rank, send, tot);
    }
  }
  return r;
}

static inline sk_result cg_run_broadcast(const cg_run *x) {
  const cg_case *t = x->t;
  bool is_root = x->rank == t->root;
  size_t nb = t->count * sk_dtype_size(t->dt);
  unsigned char *recv = cg_buf(x, nb), *exp = cg_buf(x, nb), *send = NULL;
  if (t->inplace) {
    send = recv;
    if (is_root) cg_fill(x, CT_PAT_MOVE, t->root, 0, recv, t->count);
  } else if (is_root) {
    send = cg_buf(x, nb);
    cg_fill(x, CT_PAT_MOVE, t->root, 0, send, t->count);
  } else if (t->seed & 1) {
    send = cg_buf(x, nb); /* ignored off the root: must stay untouched */
  } /* else NULL: allowed off the root */
  cg_ptrs p = cg_pass(t, 2, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_ibroadcast(x->c, p.send, p.recv, t->count, t->dt, t->root, &req, NULL)
                                  : sk_broadcast(x->c, p.send, p.recv, t->count, t->dt, t->root, NULL),
                            &req);
  if (cg_called(x, r)) {
    cg_fill(x, CT_PAT_MOVE, t->root, 0, exp, t->count);
    cg_check_recv(x, "recv", recv, exp, t->count);
    if (!t->inplace && send) {
      if (is_root) cg_check_input(x, "root's send buffer changed", CT_PAT_MOVE, x->rank, send, t->count);
      else cg_check_untouched(x, "a non-root's send buffer", send, nb);
      cg_check_pad(x, "send", send, nb);
    }
  }
  return r;
}

static inline sk_result cg_run_reduce(const cg_run *x) {
  const cg_case *t = x->t;
  bool is_root = x->rank == t->root;
  size_t nb = t->count * sk_dtype_size(t->dt);
  int pat = cg_pattern(t, true);
  unsigned char *send = cg_buf(x, nb), *exp = cg_buf(x, nb), *recv = NULL;
  cg_fill(x, pat, x->rank, 0, send, t->count);
  if (t->inplace)
    recv = send;
  else if (is_root || (t->seed & 1))
    recv = cg_buf(x, nb); /* off the root: ignored, must stay untouched */
  cg_ptrs p = cg_pass(t, 2, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_ireduce(x->c, p.send, p.recv, t->count, t->dt, t->op, t->root, &req, NULL)
                                  : sk_reduce(x->c, p.send, p.recv, t->count, t->dt, t->op, t->root, NULL),
                            &req);
  if (cg_called(x, r)) {
    if (is_root) {
      cg_ref(x, pat, 0, exp, t->count);
      cg_check_recv(x, "root's recv", recv, exp, t->count);
    } else if (t->inplace) {
      cg_check_input(x, "a non-root's in-place buffer changed", pat, x->rank, recv, t->count);
    } else if (recv) {
      cg_check_untouched(x, "a non-root's recv buffer", recv, nb);
      cg_check_pad(x, "recv", recv, nb);
    }
    if (!t->inplace) cg_check_input(x, "send buffer changed", pat, x->rank, send, t->count);
    cg_check_pad(x, "send", send, nb);
  }
  return r;
}

static inline sk_result cg_run_alltoall(const cg_run *x) {
  const cg_case *t = x->t;
  size_t nb = t->count * sk_dtype_size(t->dt), all = nb * (size_t)x->n, tot = t->count * (size_t)x->n;
  unsigned char *send = cg_buf(x, all), *exp = cg_buf(x, all);
  unsigned char *recv = t->inplace ? send : cg_buf(x, all);
  /* send[j*count + i] goes to peer j; it is gen(rank, j*count + i) */
  cg_fill(x, CT_PAT_MOVE, x->rank, 0, send, tot);
  cg_ptrs p = cg_pass(t, 1, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_ialltoall(x->c, p.send, p.recv, t->count, t->dt, &req, NULL)
                                  : sk_alltoall(x->c, p.send, p.recv, t->count, t->dt, NULL),
                            &req);
  if (cg_called(x, r)) {
    /* recv[j*count + i] came from peer j: gen(j, rank*count + i) */
    for (int j = 0; j < x->n; j++)
      cg_fill(x, CT_PAT_MOVE, j, (size_t)x->rank * t->count, exp + (size_t)j * nb, t->count);
    cg_check_recv(x, "recv", recv, exp, tot);
    if (!t->inplace) cg_check_send(x, "send buffer changed", CT_PAT_MOVE, send, tot);
  }
  return r;
}

/* Gather: block j of the root's recv is rank j's send, gen(j, i). In place on the root only. */
static inline sk_result cg_run_gather(const cg_run *x) {
  const cg_case *t = x->t;
  bool is_root = x->rank == t->root, ip_root = t->inplace && is_root;
  size_t nb = t->count * sk_dtype_size(t->dt), all = nb * (size_t)x->n;
  unsigned char *recv = is_root || (t->seed & 1) ? cg_buf(x, all) : NULL; /* off the root: untouched */
  unsigned char *send = ip_root ? recv + (size_t)x->rank * nb : cg_buf(x, nb), *exp = cg_buf(x, all);
  cg_fill(x, CT_PAT_MOVE, x->rank, 0, send, t->count);
  cg_ptrs p = cg_pass(t, 2, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_igather(x->c, p.send, p.recv, t->count, t->dt, t->root, &req, NULL)
                                  : sk_gather(x->c, p.send, p.recv, t->count, t->dt, t->root, NULL),
                            &req);
  if (cg_called(x, r)) {
    if (is_root) {
      for (int j = 0; j < x->n; j++) cg_fill(x, CT_PAT_MOVE, j, 0, exp + (size_t)j * nb, t->count);
      cg_check_recv(x, "root's recv", recv, exp, t->count * (size_t)x->n);
    } else if (recv) {
      cg_check_untouched(x, "a non-root's recv buffer", recv, all);
    }
    if (!ip_root) {
      cg_check_send(x, "send buffer changed", CT_PAT_MOVE, send, t->count);
    }
  }
  return r;
}

/* Scatter: rank j receives block j of the root's send, gen(root, j*count + i). In place on the
   root only. */
static inline sk_result cg_run_scatter(const cg_run *x) {
  const cg_case *t = x->t;
  bool is_root = x->rank == t->root, ip_root = t->inplace && is_root;
  size_t nb = t->count * sk_dtype_size(t->dt), all = nb * (size_t)x->n, tot = t->count * (size_t)x->n;
  unsigned char *send = is_root || (t->seed & 1) ? cg_buf(x, all) : NULL; /* off the root: untouched */
  if (is_root) cg_fill(x, CT_PAT_MOVE, x->rank, 0, send, tot);
  unsigned char *recv = ip_root ? send + (size_t)x->rank * nb : cg_buf(x, nb), *exp = cg_buf(x, nb);
  cg_ptrs p = cg_pass(t, 2, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_iscatter(x->c, p.send, p.recv, t->count, t->dt, t->root, &req, NULL)
                                  : sk_scatter(x->c, p.send, p.recv, t->count, t->dt, t->root, NULL),
                            &req);
  if (cg_called(x, r)) {
    cg_fill(x, CT_PAT_MOVE, t->root, (size_t)x->rank * t->count, exp, t->count);
    cg_check_out(x, "recv", recv, exp, t->count);
    if (!ip_root) cg_check_pad(x, "recv", recv, nb);
    if (is_root) {
      cg_check_send(x, "root's send buffer changed", CT_PAT_MOVE, send, tot);
    } else if (send) {
      cg_check_untouched(x, "a non-root's send buffer", send, all);
    }
  }
  return r;
}

/* AllToAllV: rank i sends cg_v_count(i, j) elements to rank j, gen(i, j*count + k); the block
   sizes range over count/4 .. count and differ per ordered pair. Seed bit 2 picks the layout:
   packed (NULL displs) or gapped, the send blocks in reverse rank order and one junk element
   between receive blocks, which must stay junk. */
static inline size_t cg_v_count(const cg_case *t, int from, int to) {
  return t->count * (size_t)(1 + (from * 3 + to * 5 + (int)(t->seed % 4)) % 4) / 4;
}

/* Counts and displacements of one side: peer j's block is count(j); displs NULL when packed. */
static inline size_t cg_v_layout(const cg_run *x, bool sending, size_t *counts, size_t *displs) {
  size_t at = 0;
  for (int k = 0; k < x->n; k++) {
    int j = sending ? x->n - 1 - k : k; /* gapped sends run in reverse rank order */
    counts[j] = sending ? cg_v_count(x->t, x->rank, j) : cg_v_count(x->t, j, x->rank);
    if (displs) displs[j] = at, at += 1; /* one junk element after each block */
    at += counts[j];
  }
  return at;
}

static inline sk_result cg_run_alltoallv(const cg_run *x) {
  const cg_case *t = x->t;
  size_t es = sk_dtype_size(t->dt), arr = sizeof(size_t) * (size_t)x->n;
  bool gapped = (t->seed & 2) != 0;
  size_t *sc = (size_t *)cg_buf(x, arr), *rc = (size_t *)cg_buf(x, arr);
  size_t *sd = gapped ? (size_t *)cg_buf(x, arr) : NULL, *rd = gapped ? (size_t *)cg_buf(x, arr) : NULL;
  size_t sspan = cg_v_layout(x, true, sc, sd), rspan = cg_v_layout(x, false, rc, rd);
  unsigned char *send = cg_buf(x, sspan * es), *recv = cg_buf(x, rspan * es), *exp = cg_buf(x, rspan * es);
  for (int j = 0; j < x->n; j++) {
    size_t s_at = sd ? sd[j] : 0, r_at = rd ? rd[j] : 0;
    for (int k = 0; !sd && k < j; k++) s_at += sc[k];
    for (int k = 0; !rd && k < j; k++) r_at += rc[k];
    cg_fill(x, CT_PAT_MOVE, x->rank, (size_t)j * t->count, send + s_at * es, sc[j]);
    cg_fill(x, CT_PAT_MOVE, j, (size_t)x->rank * t->count, exp + r_at * es, rc[j]);
  }
  unsigned char *want_send = cg_buf(x, sspan * es);
  memcpy(want_send, send, sspan * es);
  cg_ptrs p = cg_pass(t, 1, send, recv);
  sk_request *req = NULL;
  sk_result r = cg_complete(t->nb ? sk_ialltoallv(x->c, p.send, sc, sd, p.recv, rc, rd, t->dt, &req, NULL)
                                  : sk_alltoallv(x->c, p.send, sc, sd, p.recv, rc, rd, t->dt, NULL),
                            &req);
  if (cg_called(x, r)) {
    cg_check_recv(x, "recv", recv, exp, rspan);
    ct_cmp(x->s, x->ctx, "send buffer changed", t->dt, send, want_send, sspan);
    cg_check_pad(x, "send", send, sspan * es);
  }
  return r;
}

/* ---- the composites ------------------------------------------------------------------------------- */

/* A ring: each rank sends its input to rank + 1 and receives rank - 1's (sk_sendrecv, or
   sk_irecv + sk_isend + sk_waitall). */
static inline sk_result cg_run_ring(const cg_run *x) {
  const cg_case *t = x->t;
  size_t nb = t->count * sk_dtype_size(t->dt);
  int to = (x->rank + 1) % x->n, from = (x->rank + x->n - 1) % x->n;
  unsigned char *send = cg_buf(x, nb), *recv = cg_buf(x, nb), *exp = cg_buf(x, nb);
  cg_fill(x, CT_PAT_MOVE, x->rank, 0, send, t->count);
  sk_result r;
  if (t->nb) {
    sk_request *two[2] = {NULL, NULL};
    r = sk_irecv(x->c, recv, t->count, t->dt, from, &two[1], NULL); /* posted first: the send may find it */
    if (r == SK_OK) r = sk_isend(x->c, send, t->count, t->dt, to, &two[0], NULL);
    sk_result w = sk_waitall(2, two, NULL);
    if (r == SK_OK) r = w;
  } else {
    r = sk_sendrecv(x->c, send, t->count, to, recv, t->count, from, t->dt, NULL);
  }
  if (cg_called(x, r)) {
    cg_fill(x, CT_PAT_MOVE, from, 0, exp, t->count);
    cg_check_recv(x, "recv from rank - 1", recv, exp, t->count);
    cg_check_send(x, "send buffer changed", CT_PAT_MOVE, send, t->count);
  }
  return r;
}

/* Three requests outstanding at once on one communicator, all reading one send buffer:
   AllReduce, AllGather and Broadcast from the root; an sk_test of the last one while the first
   may still run, then sk_waitall. */
static inline sk_result cg_run_multi(const cg_run *x) {
  const cg_case *t = x->t;
  size_t nb = t->count * sk_dtype_size(t->dt), all = nb * (size_t)x->n;
  int pat = cg_pattern(t, true);
  unsigned char *send = cg_buf(x, nb), *sum = cg_buf(x, nb), *gathered = cg_buf(x, all), *bcast = cg_buf(x, nb);
  unsigned char *exp = cg_buf(x, all);
  cg_fill(x, pat, x->rank, 0, send, t->count);
  sk_request *q[3] = {NULL, NULL, NULL};
  sk_result r = sk_iallreduce(x->c, send, sum, t->count, t->dt, t->op, &q[0], NULL);
  if (r == SK_OK) r = sk_iallgather(x->c, send, gathered, t->count, t->dt, &q[1], NULL);
  if (r == SK_OK) r = sk_ibroadcast(x->c, send, bcast, t->count, t->dt, t->root, &q[2], NULL);
  bool done = false;
  if (r == SK_OK) r = ct_test(&q[2], &done);
  sk_result w = sk_waitall(3, q, NULL);
  if (r == SK_OK) r = w;
  if (cg_called(x, r)) {
    cg_ref(x, pat, 0, exp, t->count);
    cg_check_recv(x, "allreduce's recv", sum, exp, t->count);
    for (int j = 0; j < x->n; j++) cg_fill(x, pat, j, 0, exp + (size_t)j * nb, t->count);
    cg_check_recv(x, "allgather's recv", gathered, exp, t->count * (size_t)x->n);
    cg_check_recv(x, "broadcast's recv", bcast, exp + (size_t)t->root * nb, t->count);
    cg_check_send(x, "send buffer changed", pat, send, t->count);
  }
  return r;
}

/* A barrier leaves nothing to look at across processes: the result is the check (a rank that
   never arrives makes it SK_ERR_TIMEOUT). The threads suite's barrier test checks the order
   itself through shared memory. */
static inline sk_result cg_run_barrier(const cg_run *x) {
  sk_request *req = NULL;
  sk_result r = cg_complete(x->t->nb ? sk_ibarrier(x->c, &req, NULL) : sk_barrier(x->c, NULL), &req);
  ct_rc(x->s, r, x->c, x->ctx);
  return r;
}

/* ---- the table ---------------------------------------------------------------------------------- */

typedef struct cg_kind_row {
  const char *name;
  sk_coll_kind coll;
  unsigned flags;
  sk_result (*run)(const cg_run *x);
} cg_kind_row;

#define CG__ROW(id, name, coll, flags, fn) {name, coll, flags, fn},
static const cg_kind_row cg_kinds[CG_NKINDS] = {CG_COLLECTIVES(CG__ROW) CG_COMPOSITES(CG__ROW)};
#undef CG__ROW

static inline const char *cg_kind_name(cg_kind k) { return cg_kinds[k].name; }
static inline bool cg_reduces(cg_kind k) {
  return sk_coll_reduces(cg_kinds[k].coll) || (cg_kinds[k].flags & CG_F_REDUCES);
}
static inline bool cg_rooted(cg_kind k) {
  return sk_coll_rooted(cg_kinds[k].coll) || (cg_kinds[k].flags & CG_F_ROOTED);
}

/* ---- groups ----------------------------------------------------------------------------------- */

/* The case's group on communicator c (*g NULL when this rank is not a member) and this rank's
   colour: which of the groups made by one call it is in (equal on every member). */
static inline sk_result cg_group_comm(sk_comm *c, cg_group group, sk_comm **g, int *colour) {
  int n = sk_comm_size(c), me = sk_comm_rank(c);
  *g = NULL, *colour = 0;
  switch (group) {
    case CG_SPLIT: /* by parity, keys reversed: group ranks run against the world's order */
      *colour = me % 2;
      return sk_comm_split(c, me % 2, -me, g, NULL);
    case CG_CREATE: { /* a listed group, not in rank order: {n-1, 0, 1} */
      int ranks[3] = {n - 1, 0, 1}, m = n >= 3 ? 3 : n;
      if (n == 2) ranks[0] = 1, ranks[1] = 0;
      return sk_comm_create(c, m, ranks, g, NULL);
    }
    case CG_MESH: { /* dp x mp (dp = 2 when n is even), one group per dp row along mp */
      sk_mesh mesh;
      memset(&mesh, 0, sizeof mesh); /* defined even on the failure paths the analyzer walks */
      int dims[2] = {n % 2 ? 1 : 2, n % 2 ? n : n / 2}, coords[2] = {0, 0};
      const char *names[2] = {"dp", "mp"};
      sk_result r = sk_mesh_init(&mesh, 2, dims, names, NULL);
      if (r == SK_OK) r = sk_mesh_coords(&mesh, me, coords, NULL);
      *colour = coords[0];
      return r != SK_OK ? r : sk_comm_split_mesh(c, &mesh, 2u, g, NULL);
    }
    default: *g = c; return SK_OK;
  }
}

static inline void cg_case_str(char *buf, size_t cap, const cg_case *t, const cg_env *env, int n, int rank) {
  char root[16] = "-";
  if (cg_rooted(t->kind)) snprintf(root, sizeof root, "%d", t->root);
  snprintf(buf, cap, "%s %s n=%d rank=%d dt=%s op=%s count=%zu %s root=%s%s%s%s%s", cg_kind_name(t->kind),
           env->label, n, rank, sk_dtype_name(t->dt), cg_reduces(t->kind) ? sk_redop_name(t->op) : "-", t->count,
           t->inplace ? "in-place" : "out-of-place", root, t->nb ? " non-blocking" : "",
           t->group ? " group=" : "", t->group ? cg_group_names[t->group] : "", t->style == CG_EXACT ? " exact" : "");
}

/* Runs case t on this rank of communicator c (its group's member or not) and records every
   check into s. Returns the first failing call's result: the caller returns it from its device
   function, which fails the world, so that peers return instead of hanging. */
static inline sk_result cg_run_case(sk_comm *c, const cg_case *t, ct_slot *s, const cg_env *env) {
  sk_comm *g = NULL;
  int colour = 0;
  sk_result r = cg_group_comm(c, t->group, &g, &colour);
  char ctx[300];
  if (r != SK_OK) {
    cg_case_str(ctx, sizeof ctx, t, env, sk_comm_size(c), sk_comm_rank(c));
    ct_rc(s, r, c, ctx);
    return r;
  }
  if (!g) return SK_OK; /* not in this case's group */
  cg_case here = *t;
  if (cg_rooted(t->kind)) here.root = t->root % sk_comm_size(g);
  cg_bufs bufs = {{NULL}, 0};
  cg_run x = {g, &here, sk_comm_rank(g), sk_comm_size(g), t->seed + 0x1000003u * (uint64_t)colour, s, env, ctx, &bufs};
  cg_case_str(ctx, sizeof ctx, &here, env, x.n, x.rank);
  r = cg_kinds[t->kind].run(&x);
  for (int i = 0; i < bufs.n; i++) free(bufs.p[i]);
  if (g != c) sk_comm_destroy(g, NULL);
  return r;
}

/* ---- grids ------------------------------------------------------------------------------------ */

/* dtypes x ops (reducing kinds) x counts x placements (kinds with an in-place form) x roots
   (rooted kinds: every root at every_root_count, one root, varying, at the others), all with
   the same nb, group and style. */
typedef struct cg_grid {
  const sk_dtype *dts;
  int ndts;
  const sk_redop *ops;
  int nops;
  const size_t *counts;
  int ncounts;
  size_t every_root_count; /* SIZE_MAX: none */
  bool nb;
  cg_group group;
  cg_style style;
} cg_grid;

typedef struct cg_list {
  cg_case *v;
  int n, cap;
} cg_list;

static inline void cg_add(cg_list *l, cg_case t) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 256;
    cg_case *v = (cg_case *)realloc(l->v, sizeof(cg_case) * (size_t)l->cap);
    if (!v) {
      fprintf(stderr, "coll_grid: out of memory for %d cases\n", l->cap);
      abort();
    }
    l->v = v;
  }
  l->v[l->n++] = t;
}

/* Appends kind k's cases of grid g for n ranks. Seeds depend on (k, n, position in the list),
   so a list that holds one kind has the same inputs whatever else a runner builds. */
static inline void cg_expand(cg_list *l, cg_kind k, const cg_grid *g, int n) {
  bool no_data = (cg_kinds[k].flags & CG_F_NO_DATA) != 0;
  int ndts = no_data ? 1 : g->ndts, ncounts = no_data ? 1 : g->ncounts, nops = cg_reduces(k) ? g->nops : 1;
  int nplaces = cg_kinds[k].flags & CG_F_IN_PLACE ? 2 : 1;
  uint64_t seed = 1 + 100000u * (uint64_t)k + 1000u * (uint64_t)n;
  for (int d = 0; d < ndts; d++)
    for (int o = 0; o < nops; o++)
      for (int ci = 0; ci < ncounts; ci++)
        for (int ip = 0; ip < nplaces; ip++) {
          int r0 = 0, r1 = 0;
          if (cg_rooted(k)) {
            if (g->counts[ci] == g->every_root_count) r0 = 0, r1 = n - 1;
            else r0 = r1 = (ci + ip + d) % n;
          }
          for (int root = r0; root <= r1; root++) {
            cg_case t = {.kind = k, .dt = g->dts[d], .op = cg_reduces(k) ? g->ops[o] : SK_SUM,
                         .count = no_data ? 0 : g->counts[ci], .inplace = ip == 1, .root = root,
                         .seed = seed + (uint64_t)l->n, .nb = g->nb, .group = g->group, .style = g->style};
            cg_add(l, t);
          }
        }
}

/* Every collective (the composites left out) of grid g. */
static inline void cg_expand_collectives(cg_list *l, const cg_grid *g, int n) {
  for (int k = 0; k < CG_NCOLLS; k++) cg_expand(l, (cg_kind)k, g, n);
}

/* Every composite of grid g. */
static inline void cg_expand_composites(cg_list *l, const cg_grid *g, int n) {
  for (int k = CG_NCOLLS; k < CG_NKINDS; k++) cg_expand(l, (cg_kind)k, g, n);
}

static inline cg_grid cg_make_grid(const sk_dtype *dts, int ndts, const sk_redop *ops, int nops, const size_t *counts,
                                   int ncounts, bool nb, cg_group group, cg_style style) {
  cg_grid g = {dts, ndts, ops, nops, counts, ncounts, SIZE_MAX, nb, group, style};
  return g;
}

/* ---- the grids both runners sweep ------------------------------------------------------------- */

/* Every dtype and op, counts 0, 1, 7 (every root) and 1023 (larger than one inline slot, not a
   multiple of anything), on the world, blocking. */
static const size_t cg_std_counts[] = {0, 1, 7, 1023};
static const cg_grid cg_std_grid = {ct_all_dtypes, CT_NDTYPES, ct_all_ops, CT_NOPS, cg_std_counts, 4, 7, false,
                                    CG_WORLD, CG_ORDERED};

static const sk_redop cg_sum_only[] = {SK_SUM};

/* Sub-communicators (split, created, a mesh axis), each blocking and non-blocking, every
   collective and the composites on each. */
static inline void cg_expand_groups(cg_list *l, int n, cg_style style) {
  static const sk_dtype dts[] = {SK_F32, SK_I32, SK_BF16};
  static const sk_redop ops[] = {SK_SUM, SK_MAX, SK_AVG};
  static const size_t counts[] = {1, 7}, ring_counts[] = {5};
  for (int g = CG_SPLIT; g < CG_NGROUPS; g++)
    for (int nb = 0; nb < 2; nb++) {
      cg_grid coll = cg_make_grid(dts, 3, ops, 3, counts, 2, nb, (cg_group)g, style);
      cg_expand_collectives(l, &coll, n);
      cg_grid comp = cg_make_grid(dts, 1, cg_sum_only, 1, ring_counts, 1, nb, (cg_group)g, style);
      cg_expand_composites(l, &comp, n);
    }
}

/* Non-blocking collectives on the world; the composites both ways, every dtype. */
static inline void cg_expand_async(cg_list *l, int n, cg_style style) {
  static const sk_dtype dts[] = {SK_F32, SK_I64, SK_F16, SK_U8};
  static const sk_redop ops[] = {SK_SUM, SK_MIN, SK_AVG};
  static const size_t counts[] = {0, 7, 1003};
  cg_grid coll = cg_make_grid(dts, 4, ops, 3, counts, 3, true, CG_WORLD, style);
  cg_expand_collectives(l, &coll, n);
  for (int nb = 0; nb < 2; nb++) {
    cg_grid comp = cg_make_grid(ct_all_dtypes, CT_NDTYPES, cg_sum_only, 1, counts, 3, nb, CG_WORLD, style);
    cg_expand_composites(l, &comp, n);
  }
}

#endif /* COLL_GRID_H */
