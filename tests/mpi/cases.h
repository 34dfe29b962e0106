/* cases.h -- one collective case, run the same way on any backend (tests/mpi/mpi_driver.c).

   The driver runs every case once on a threads world (the reference: the threads backend is the
   semantics, and its suites check it against an independent reference) and once on the MPI
   world, and compares the output bytes. A case's inputs are a pure function of (world rank,
   index, seed), so both runs see the same data.

   Input styles: EXACT floats are +-2^k, k in [-2, 2] (every sum and product of up to 8 of them
   is exact in f32/f64, so MPI's reduction order cannot change the bits) with a NaN now and then;
   RANDOM floats are +-(1 + a 20-bit fraction), whose sums depend on the order (the
   deterministic-mode check), with NaNs too. Integers are full-width random bits (sums and
   products wrap). */
#ifndef MPI_DRIVER_CASES_H
#define MPI_DRIVER_CASES_H

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"

typedef enum dkind {
  DK_ALLREDUCE, DK_ALLGATHER, DK_REDUCE_SCATTER, DK_BROADCAST, DK_REDUCE, DK_ALLTOALL, DK_GATHER, DK_SCATTER,
  DK_SENDRECV, /* ring: send to rank+1, receive from rank-1 */
  DK_MULTI,    /* three non-blocking collectives outstanding at once, then sk_waitall */
  DK_BARRIER,
  DK_N
} dkind;
static const char *const dk_names[DK_N] = {"allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
                                           "alltoall",  "gather",    "scatter",        "sendrecv",  "multi",
                                           "barrier"};
/* The collectives of the grid, as the library's table names them (the rest are composites). */
static const sk_coll_kind dk_coll[DK_N] = {SK_COLL_ALLREDUCE, SK_COLL_ALLGATHER, SK_COLL_REDUCE_SCATTER,
                                           SK_COLL_BROADCAST, SK_COLL_REDUCE,    SK_COLL_ALLTOALL,
                                           SK_COLL_GATHER,    SK_COLL_SCATTER,   SK_COLL_SEND,
                                           SK_COLL_NONE,      SK_COLL_BARRIER};

enum { ST_EXACT = 0, ST_RANDOM = 1 };
/* Groups: the world; split by parity with reversed keys; create from a list; a mesh axis. */
enum { G_WORLD = 0, G_SPLIT = 1, G_CREATE = 2, G_MESH = 3, G_N = 4 };
static const char *const g_names[G_N] = {"world", "split", "create", "mesh"};

typedef struct dcase {
  dkind k;
  sk_dtype dt;
  sk_redop op;
  size_t count;
  int inplace, root, nb, group, style;
  uint64_t seed;
} dcase;

static int dk_reduces(dkind k) { return sk_coll_reduces(dk_coll[k]); }
static int dk_rooted(dkind k) { return sk_coll_rooted(dk_coll[k]); }

static void dcase_str(char *buf, size_t cap, const dcase *t) {
  snprintf(buf, cap, "%s %s dt=%s op=%s count=%zu %s root=%d %s group=%s", dk_names[t->k], t->nb ? "nb" : "blocking",
           sk_dtype_name(t->dt), dk_reduces(t->k) ? sk_redop_name(t->op) : "-", t->count,
           t->inplace ? "in-place" : "out-of-place", t->root, t->style ? "random" : "exact", g_names[t->group]);
}

static uint64_t dmix(int rank, size_t idx, uint64_t seed) {
  uint64_t x = (uint64_t)idx * 0x9E3779B97F4A7C15ull + (uint64_t)(rank + 1) * 0xBF58476D1CE4E5B9ull + seed * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 29;
  return x;
}

static double dfloat(uint64_t x, int style) {
  if (x % 97 == 5) return __builtin_nan("");
  double sign = (x >> 7) & 1 ? -1.0 : 1.0;
  if (style == ST_EXACT) {
    static const double p[5] = {0.25, 0.5, 1.0, 2.0, 4.0};
    return sign * p[(x >> 9) % 5];
  }
  return sign * (1.0 + (double)(x >> 44) / 1048576.0);
}

static void dfill(sk_dtype dt, void *buf, size_t n, int rank, uint64_t seed, int style) {
  for (size_t i = 0; i < n; i++) {
    uint64_t x = dmix(rank, i, seed);
    switch (dt) {
      case SK_F32: ((float *)buf)[i] = (float)dfloat(x, style); break;
      case SK_F64: ((double *)buf)[i] = dfloat(x, style); break;
      case SK_F16: ((uint16_t *)buf)[i] = sk_f32_to_f16((float)dfloat(x, style)); break;
      case SK_BF16: ((uint16_t *)buf)[i] = sk_f32_to_bf16((float)dfloat(x, style)); break;
      case SK_I8: case SK_U8: ((uint8_t *)buf)[i] = (uint8_t)x; break;
      case SK_I32: ((uint32_t *)buf)[i] = (uint32_t)x; break;
      default: ((uint64_t *)buf)[i] = x; break;
    }
  }
}

/* The case's group communicator (NULL when this rank is not a member). */
static sk_result dgroup(sk_comm *w, int group, sk_comm **g) {
  int n = sk_comm_size(w), r = sk_comm_rank(w);
  *g = NULL;
  switch (group) {
    case G_SPLIT: return sk_comm_split(w, r % 2, -r, g);
    case G_CREATE: {
      int ranks[3] = {n - 1, 0, 1}, m = n >= 3 ? 3 : n;
      if (n == 2) ranks[0] = 1, ranks[1] = 0;
      return sk_comm_create(w, m, ranks, g);
    }
    case G_MESH: {
      sk_mesh mesh;
      int dims[2] = {n % 2 ? 1 : 2, n % 2 ? n : n / 2};
      const char *names[2] = {"dp", "mp"};
      sk_result rr = sk_mesh_init(&mesh, 2, dims, names, NULL);
      return rr != SK_OK ? rr : sk_comm_split_mesh(w, &mesh, 2u, g); /* along mp */
    }
    default: *g = w; return SK_OK;
  }
}

static sk_result dfinish(sk_comm *c, sk_request **req) {
  bool done = false;
  for (int i = 0; !done; i++) { /* poll a while with sk_test (it drives MPI), then wait */
    if (i == 50) return sk_wait(req);
    sk_result r = sk_test(req, &done);
    if (r != SK_OK) return r;
    if (!done) sched_yield();
  }
  (void)c;
  return SK_OK;
}

/* Runs t on world communicator w; the bytes this rank received go to *out (malloc'd; NULL and 0
   when it receives nothing). */
static sk_result drun(sk_comm *w, const dcase *t, unsigned char **out, size_t *outlen) {
  *out = NULL, *outlen = 0;
  sk_comm *g = NULL;
  sk_result r = dgroup(w, t->group, &g);
  if (r != SK_OK || !g) return r;
  int n = sk_comm_size(g), me = sk_comm_rank(g), wr = sk_comm_world_rank(g);
  size_t es = sk_dtype_size(t->dt), c = t->count;
  size_t sn = c, rn = c; /* elements of send and recv */
  switch (t->k) {
    case DK_ALLGATHER: rn = (size_t)n * c; break;
    case DK_REDUCE_SCATTER: sn = (size_t)n * c; break;
    case DK_ALLTOALL: sn = rn = (size_t)n * c; break;
    case DK_GATHER: rn = (size_t)n * c; break;
    case DK_SCATTER: sn = (size_t)n * c; break;
    case DK_MULTI: rn = c + (size_t)n * c + c; break;
    case DK_BARRIER: sn = rn = 0; break;
    default: break;
  }
  int root = t->root % n;
  bool ip = t->inplace && (!dk_rooted(t->k) || t->k == DK_BROADCAST || t->k == DK_REDUCE || me == root);
  size_t cap = (sn > rn ? sn : rn) * es + 1; /* in-place ReduceScatter's recv holds the whole input */
  unsigned char *recv = (unsigned char *)malloc(cap), *send = (unsigned char *)malloc(sn * es + 1);
  if (!recv || !send) {
    free(recv), free(send);
    if (g != w) sk_comm_destroy(g);
    return SK_ERR_OUT_OF_MEMORY;
  }
  memset(recv, 0x5A, cap);
  dfill(t->dt, send, sn, wr, t->seed, t->style);
  void *sp = send, *rp = recv;
  /* in place: AllGather and the Gather root send from their block of recv; ReduceScatter and
     the Scatter root receive into their block of send (NCCL's forms); Gather and Scatter have
     it on the root only */
  if (ip && t->k != DK_SENDRECV && t->k != DK_MULTI) {
    size_t off = t->k == DK_ALLGATHER || t->k == DK_GATHER ? (size_t)me * c : 0;
    memcpy(recv + off * es, send, sn * es);
    sp = recv + off * es;
    if (t->k == DK_REDUCE_SCATTER || t->k == DK_SCATTER) rp = recv + (size_t)me * c * es, sp = recv;
  }
  if (!ip && (t->k == DK_BROADCAST || t->k == DK_SCATTER) && me != root) sp = NULL; /* read on the root only */
  bool has_out = !((t->k == DK_REDUCE || t->k == DK_GATHER) && me != root);
  if (!ip && !has_out) rp = NULL;
  sk_request *req = NULL;
  switch (t->k) {
    case DK_ALLREDUCE:
      r = t->nb ? sk_iallreduce(g, sp, rp, c, t->dt, t->op, &req) : sk_allreduce(g, sp, rp, c, t->dt, t->op);
      break;
    case DK_ALLGATHER: r = t->nb ? sk_iallgather(g, sp, rp, c, t->dt, &req) : sk_allgather(g, sp, rp, c, t->dt); break;
    case DK_REDUCE_SCATTER:
      r = t->nb ? sk_ireduce_scatter(g, sp, rp, c, t->dt, t->op, &req) : sk_reduce_scatter(g, sp, rp, c, t->dt, t->op);
      break;
    case DK_BROADCAST:
      r = t->nb ? sk_ibroadcast(g, sp, rp, c, t->dt, root, &req) : sk_broadcast(g, sp, rp, c, t->dt, root);
      break;
    case DK_REDUCE:
      r = t->nb ? sk_ireduce(g, sp, rp, c, t->dt, t->op, root, &req) : sk_reduce(g, sp, rp, c, t->dt, t->op, root);
      break;
    case DK_ALLTOALL: r = t->nb ? sk_ialltoall(g, sp, rp, c, t->dt, &req) : sk_alltoall(g, sp, rp, c, t->dt); break;
    case DK_GATHER:
      r = t->nb ? sk_igather(g, sp, rp, c, t->dt, root, &req) : sk_gather(g, sp, rp, c, t->dt, root);
      break;
    case DK_SCATTER:
      r = t->nb ? sk_iscatter(g, sp, rp, c, t->dt, root, &req) : sk_scatter(g, sp, rp, c, t->dt, root);
      break;
    case DK_BARRIER: r = t->nb ? sk_ibarrier(g, &req) : sk_barrier(g); break;
    case DK_SENDRECV:
      if (t->nb) {
        sk_request *two[2] = {NULL, NULL};
        r = sk_irecv(g, recv, c, t->dt, (me + n - 1) % n, &two[1]);
        if (r == SK_OK) r = sk_isend(g, send, c, t->dt, (me + 1) % n, &two[0]);
        sk_result r2 = sk_waitall(2, two);
        if (r == SK_OK) r = r2;
      } else {
        r = sk_sendrecv(g, send, c, (me + 1) % n, recv, c, (me + n - 1) % n, t->dt);
      }
      break;
    case DK_MULTI: {
      sk_request *three[3] = {NULL, NULL, NULL};
      unsigned char *a = recv, *b = recv + c * es, *d = recv + (c + (size_t)n * c) * es;
      r = sk_iallreduce(g, send, a, c, t->dt, t->op, &three[0]);
      if (r == SK_OK) r = sk_iallgather(g, send, b, c, t->dt, &three[1]);
      if (r == SK_OK) r = sk_ibroadcast(g, send, d, c, t->dt, root, &three[2]);
      bool done = false;
      if (r == SK_OK) r = sk_test(&three[2], &done); /* the last one cannot finish before the first */
      sk_result r2 = sk_waitall(3, three);
      if (r == SK_OK) r = r2;
      break;
    }
    default: break;
  }
  if (r == SK_OK && req) r = dfinish(g, &req);
  if (r == SK_OK && has_out && rn) {
    size_t ob = (ip && (t->k == DK_REDUCE_SCATTER || t->k == DK_SCATTER) ? c : rn) * es;
    *out = (unsigned char *)malloc(ob);
    if (!*out) r = SK_ERR_OUT_OF_MEMORY;
    else memcpy(*out, rp, ob), *outlen = ob;
  }
  free(recv);
  free(send);
  if (r != SK_OK) fprintf(stderr, "rank %d: %s: %s\n", wr, sk_result_name(r), sk_comm_error_message(g));
  if (g != w) sk_comm_destroy(g);
  return r;
}

#endif /* MPI_DRIVER_CASES_H */
