/* test_comm_coll.c -- every collective x dtype x reduce op on the threads backend.

   Group sizes 1, 2, 3, 5, 8 (and 16, 64 on a smaller grid); counts 0, 1, 7, 1023 and 100003
   (prime, so no chunking splits it evenly); out-of-place and NCCL's in-place forms; every root of
   Broadcast/Reduce at count 7; each with the default config, force_large (the chunked AllReduce
   path at tiny counts) and, for AllReduce, small_bytes = 4096 (the inline path at count 1023).

   Expected values come from comm_test_util.h's reference (never from sk_reduce_local). Device
   threads only record into their ct_slot; the test thread asserts after sk_world_run. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "shardkit.h"
#include "comm_test_util.h"

typedef enum kind {
  K_ALLREDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_BROADCAST, K_REDUCE, K_ALLTOALL, K_GATHER, K_SCATTER, K_NKINDS
} kind;
/* The library's table says what each kind is (reduces? rooted?); the expected values below do
   not come from it. */
static const sk_coll_kind kind_coll[K_NKINDS] = {SK_COLL_ALLREDUCE, SK_COLL_ALLGATHER, SK_COLL_REDUCE_SCATTER,
                                                 SK_COLL_BROADCAST, SK_COLL_REDUCE,    SK_COLL_ALLTOALL,
                                                 SK_COLL_GATHER,    SK_COLL_SCATTER};
#define kind_names(k) sk_coll_kind_name(kind_coll[k])

static bool kind_reduces(kind k) { return sk_coll_reduces(kind_coll[k]); }
static bool kind_rooted(kind k) { return sk_coll_rooted(kind_coll[k]); }

typedef struct tcase {
  kind k;
  sk_dtype dt;
  sk_redop op;
  size_t count;
  bool inplace;
  int root;
  uint64_t seed;
} tcase;

typedef struct run_arg {
  int n, cfg;
  const tcase *cases;
  int ncases;
  ct_slot *slots;
} run_arg;

static void case_str(char *buf, size_t cap, const run_arg *a, const tcase *t, int rank) {
  char root[16] = "-";
  if (kind_rooted(t->k)) snprintf(root, sizeof root, "%d", t->root);
  snprintf(buf, cap, "%s n=%d cfg=%s rank=%d dt=%s op=%s count=%zu %s root=%s", kind_names(t->k), a->n,
           ct_cfg_names[a->cfg], rank, sk_dtype_name(t->dt), kind_reduces(t->k) ? sk_redop_name(t->op) : "-",
           t->count, t->inplace ? "in-place" : "out-of-place", root);
}

/* Pads intact and, where asked, a buffer still holding what it held before the call. */
static void check_pad(ct_slot *s, const char *ctx, const char *what, const unsigned char *p, size_t nb) {
  ct_check(s, ct_pad_ok(p, nb), "%s: %s: guard bytes after the buffer were overwritten", ctx, what);
}

/* ---- one case of each collective ------------------------------------------------------------- */

static sk_result run_allreduce(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  size_t es = sk_dtype_size(t->dt), nb = t->count * es;
  int pat = ct_pat_for(t->op);
  unsigned char *recv = ct_buf(nb), *send = t->inplace ? recv : ct_buf(nb), *exp = ct_buf(nb);
  ct_fill(t->dt, pat, t->seed, rank, 0, send, t->count);
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 1)) sp = NULL, rp = NULL; /* count 0: NULL is fine */
  sk_result r = sk_allreduce(c, sp, rp, t->count, t->dt, t->op);
  if (ct_rc(s, r, c, ctx)) {
    ct_ref_gen(exp, t->dt, t->op, pat, t->seed, n, 0, t->count);
    ct_cmp(s, ctx, "recv", t->dt, recv, exp, t->count);
    check_pad(s, ctx, "recv", recv, nb);
    if (!t->inplace) {
      ct_fill(t->dt, pat, t->seed, rank, 0, exp, t->count);
      ct_cmp(s, ctx, "send buffer changed", t->dt, send, exp, t->count);
      check_pad(s, ctx, "send", send, nb);
    }
  }
  if (!t->inplace) free(send);
  free(recv), free(exp);
  return r;
}

static sk_result run_allgather(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  size_t es = sk_dtype_size(t->dt), nb = t->count * es;
  unsigned char *recv = ct_buf(nb * (size_t)n), *exp = ct_buf(nb * (size_t)n);
  unsigned char *send = t->inplace ? recv + (size_t)rank * nb : ct_buf(nb);
  ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, send, t->count);
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 1)) sp = NULL, rp = NULL;
  sk_result r = sk_allgather(c, sp, rp, t->count, t->dt);
  if (ct_rc(s, r, c, ctx)) {
    for (int j = 0; j < n; j++) ct_fill(t->dt, CT_PAT_MOVE, t->seed, j, 0, exp + (size_t)j * nb, t->count);
    ct_cmp(s, ctx, "recv", t->dt, recv, exp, t->count * (size_t)n);
    check_pad(s, ctx, "recv", recv, nb * (size_t)n);
    if (!t->inplace) {
      ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, exp, t->count);
      ct_cmp(s, ctx, "send buffer changed", t->dt, send, exp, t->count);
      check_pad(s, ctx, "send", send, nb);
    }
  }
  if (!t->inplace) free(send);
  free(recv), free(exp);
  return r;
}

static sk_result run_reduce_scatter(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  size_t es = sk_dtype_size(t->dt), nb = t->count * es;
  int pat = ct_pat_for(t->op);
  unsigned char *send = ct_buf(nb * (size_t)n), *exp = ct_buf(nb * (size_t)n);
  unsigned char *recv = t->inplace ? send + (size_t)rank * nb : ct_buf(nb);
  ct_fill(t->dt, pat, t->seed, rank, 0, send, t->count * (size_t)n);
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 1)) sp = NULL, rp = NULL;
  sk_result r = sk_reduce_scatter(c, sp, rp, t->count, t->dt, t->op);
  if (ct_rc(s, r, c, ctx)) {
    ct_ref_gen(exp, t->dt, t->op, pat, t->seed, n, (size_t)rank * t->count, t->count);
    ct_cmp(s, ctx, "recv", t->dt, recv, exp, t->count);
    check_pad(s, ctx, "send", send, nb * (size_t)n);
    if (!t->inplace) {
      check_pad(s, ctx, "recv", recv, nb);
      ct_fill(t->dt, pat, t->seed, rank, 0, exp, t->count * (size_t)n);
      ct_cmp(s, ctx, "send buffer changed", t->dt, send, exp, t->count * (size_t)n);
    }
  }
  if (!t->inplace) free(recv);
  free(send), free(exp);
  return r;
}

static sk_result run_broadcast(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c);
  bool is_root = rank == t->root;
  size_t es = sk_dtype_size(t->dt), nb = t->count * es;
  unsigned char *recv = ct_buf(nb), *exp = ct_buf(nb), *send = NULL;
  if (t->inplace) {
    send = recv;
    if (is_root) ct_fill(t->dt, CT_PAT_MOVE, t->seed, t->root, 0, recv, t->count);
  } else if (is_root) {
    send = ct_buf(nb);
    ct_fill(t->dt, CT_PAT_MOVE, t->seed, t->root, 0, send, t->count);
  } else if (t->seed & 1) {
    send = ct_buf(nb); /* ignored off the root: must stay untouched */
  } /* else NULL: allowed off the root */
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 2)) sp = NULL, rp = NULL;
  sk_result r = sk_broadcast(c, sp, rp, t->count, t->dt, t->root);
  if (ct_rc(s, r, c, ctx)) {
    ct_fill(t->dt, CT_PAT_MOVE, t->seed, t->root, 0, exp, t->count);
    ct_cmp(s, ctx, "recv", t->dt, recv, exp, t->count);
    check_pad(s, ctx, "recv", recv, nb);
    if (!t->inplace && send) {
      if (is_root)
        ct_cmp(s, ctx, "root's send buffer changed", t->dt, send, exp, t->count);
      else
        ct_check(s, ct_all_bytes(send, nb, CT_JUNK_BYTE), "%s: a non-root's send buffer was written", ctx);
      check_pad(s, ctx, "send", send, nb);
    }
  }
  if (!t->inplace) free(send);
  free(recv), free(exp);
  return r;
}

static sk_result run_reduce(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  bool is_root = rank == t->root;
  size_t es = sk_dtype_size(t->dt), nb = t->count * es;
  int pat = ct_pat_for(t->op);
  unsigned char *send = ct_buf(nb), *exp = ct_buf(nb), *recv = NULL;
  ct_fill(t->dt, pat, t->seed, rank, 0, send, t->count);
  if (t->inplace)
    recv = send;
  else if (is_root || (t->seed & 1))
    recv = ct_buf(nb); /* off the root: ignored, must stay untouched */
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 2)) sp = NULL, rp = NULL;
  sk_result r = sk_reduce(c, sp, rp, t->count, t->dt, t->op, t->root);
  if (ct_rc(s, r, c, ctx)) {
    if (is_root) {
      ct_ref_gen(exp, t->dt, t->op, pat, t->seed, n, 0, t->count);
      ct_cmp(s, ctx, "root's recv", t->dt, recv, exp, t->count);
      check_pad(s, ctx, "recv", recv, nb);
    } else if (t->inplace) {
      ct_fill(t->dt, pat, t->seed, rank, 0, exp, t->count);
      ct_cmp(s, ctx, "a non-root's in-place buffer changed", t->dt, recv, exp, t->count);
    } else if (recv) {
      ct_check(s, ct_all_bytes(recv, nb, CT_JUNK_BYTE), "%s: a non-root's recv buffer was written", ctx);
      check_pad(s, ctx, "recv", recv, nb);
    }
    if (!t->inplace) {
      ct_fill(t->dt, pat, t->seed, rank, 0, exp, t->count);
      ct_cmp(s, ctx, "send buffer changed", t->dt, send, exp, t->count);
    }
    check_pad(s, ctx, "send", send, nb);
  }
  if (!t->inplace) free(recv);
  free(send), free(exp);
  return r;
}

static sk_result run_alltoall(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  size_t es = sk_dtype_size(t->dt), nb = t->count * es, tot = t->count * (size_t)n;
  unsigned char *send = ct_buf(nb * (size_t)n), *exp = ct_buf(nb * (size_t)n);
  unsigned char *recv = t->inplace ? send : ct_buf(nb * (size_t)n);
  /* send[j*count + i] goes to peer j; it is gen(rank, j*count + i) */
  ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, send, tot);
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 1)) sp = NULL, rp = NULL;
  sk_result r = sk_alltoall(c, sp, rp, t->count, t->dt);
  if (ct_rc(s, r, c, ctx)) {
    /* recv[j*count + i] came from peer j: gen(j, rank*count + i) */
    for (int j = 0; j < n; j++)
      ct_fill(t->dt, CT_PAT_MOVE, t->seed, j, (size_t)rank * t->count, exp + (size_t)j * nb, t->count);
    ct_cmp(s, ctx, "recv", t->dt, recv, exp, tot);
    check_pad(s, ctx, "recv", recv, nb * (size_t)n);
    if (!t->inplace) {
      ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, exp, tot);
      ct_cmp(s, ctx, "send buffer changed", t->dt, send, exp, tot);
      check_pad(s, ctx, "send", send, nb * (size_t)n);
    }
  }
  if (!t->inplace) free(recv);
  free(send), free(exp);
  return r;
}

/* Gather: block j of the root's recv is rank j's send, gen(j, i). */
static sk_result run_gather(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  bool is_root = rank == t->root, ip_root = t->inplace && is_root;
  size_t es = sk_dtype_size(t->dt), nb = t->count * es, tot = t->count * (size_t)n;
  unsigned char *recv = is_root || (t->seed & 1) ? ct_buf(nb * (size_t)n) : NULL; /* off the root: untouched */
  unsigned char *send = ip_root ? recv + (size_t)rank * nb : ct_buf(nb), *exp = ct_buf(nb * (size_t)n);
  ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, send, t->count);
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 2)) sp = NULL, rp = NULL;
  sk_result r = sk_gather(c, sp, rp, t->count, t->dt, t->root);
  if (ct_rc(s, r, c, ctx)) {
    if (is_root) {
      for (int j = 0; j < n; j++) ct_fill(t->dt, CT_PAT_MOVE, t->seed, j, 0, exp + (size_t)j * nb, t->count);
      ct_cmp(s, ctx, "root's recv", t->dt, recv, exp, tot);
      check_pad(s, ctx, "recv", recv, nb * (size_t)n);
    } else if (recv) {
      ct_check(s, ct_all_bytes(recv, nb * (size_t)n, CT_JUNK_BYTE), "%s: a non-root's recv buffer was written", ctx);
    }
    if (!ip_root) {
      ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, exp, t->count);
      ct_cmp(s, ctx, "send buffer changed", t->dt, send, exp, t->count);
      check_pad(s, ctx, "send", send, nb);
    }
  }
  if (!ip_root) free(send);
  free(recv), free(exp);
  return r;
}

/* Scatter: rank j receives block j of the root's send, gen(root, j*count + i). */
static sk_result run_scatter(sk_comm *c, const tcase *t, ct_slot *s, const char *ctx) {
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  bool is_root = rank == t->root, ip_root = t->inplace && is_root;
  size_t es = sk_dtype_size(t->dt), nb = t->count * es, tot = t->count * (size_t)n;
  unsigned char *send = is_root || (t->seed & 1) ? ct_buf(nb * (size_t)n) : NULL; /* off the root: untouched */
  if (is_root) ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, send, tot);
  unsigned char *recv = ip_root ? send + (size_t)rank * nb : ct_buf(nb), *exp = ct_buf(nb * (size_t)n);
  const void *sp = send;
  void *rp = recv;
  if (t->count == 0 && !t->inplace && (t->seed & 2)) sp = NULL, rp = NULL;
  sk_result r = sk_scatter(c, sp, rp, t->count, t->dt, t->root);
  if (ct_rc(s, r, c, ctx)) {
    ct_fill(t->dt, CT_PAT_MOVE, t->seed, t->root, (size_t)rank * t->count, exp, t->count);
    ct_cmp(s, ctx, "recv", t->dt, recv, exp, t->count);
    if (!ip_root) check_pad(s, ctx, "recv", recv, nb);
    if (is_root) {
      ct_fill(t->dt, CT_PAT_MOVE, t->seed, rank, 0, exp, tot);
      ct_cmp(s, ctx, "root's send buffer changed", t->dt, send, exp, tot);
      check_pad(s, ctx, "send", send, nb * (size_t)n);
    } else if (send) {
      ct_check(s, ct_all_bytes(send, nb * (size_t)n, CT_JUNK_BYTE), "%s: a non-root's send buffer was written", ctx);
    }
  }
  if (!ip_root) free(recv);
  free(send), free(exp);
  return r;
}

static sk_result run_case(sk_comm *c, const run_arg *a, const tcase *t, ct_slot *s) {
  char ctx[200];
  case_str(ctx, sizeof ctx, a, t, sk_comm_rank(c));
  switch (t->k) {
    case K_ALLREDUCE: return run_allreduce(c, t, s, ctx);
    case K_ALLGATHER: return run_allgather(c, t, s, ctx);
    case K_REDUCE_SCATTER: return run_reduce_scatter(c, t, s, ctx);
    case K_BROADCAST: return run_broadcast(c, t, s, ctx);
    case K_REDUCE: return run_reduce(c, t, s, ctx);
    case K_GATHER: return run_gather(c, t, s, ctx);
    case K_SCATTER: return run_scatter(c, t, s, ctx);
    default: return run_alltoall(c, t, s, ctx);
  }
}

static sk_result cases_device(sk_comm *c, void *p) {
  const run_arg *a = (const run_arg *)p;
  int rank = sk_comm_rank(c);
  if (rank < 0 || rank >= a->n) return SK_ERR_INTERNAL;
  ct_slot *s = &a->slots[rank];
  ct_check(s, sk_comm_size(c) == a->n && sk_comm_world_rank(c) == rank, "n=%d rank=%d: size %d world_rank %d", a->n,
           rank, sk_comm_size(c), sk_comm_world_rank(c));
  for (int i = 0; i < a->ncases; i++) {
    sk_result r = run_case(c, a, &a->cases[i], s);
    if (r != SK_OK) return r; /* aborts the world: peers return instead of hanging */
  }
  s->ran = 1;
  return SK_OK;
}

/* ---- grids ------------------------------------------------------------------------------------ */

typedef struct grid {
  const sk_dtype *dts;
  int ndts;
  const sk_redop *ops;
  int nops;
  const size_t *counts;
  int ncounts;
  size_t every_root_count; /* every root at this count; other counts take one root each */
} grid;

/* Expands the grid for kind k on n ranks (the same list on every rank). */
static int expand(kind k, const grid *g, int n, tcase **out) {
  int cap = 1 + g->ndts * g->nops * g->ncounts * 2 * (n + 1);
  tcase *cs = (tcase *)calloc((size_t)cap, sizeof *cs);
  cr_assert_not_null(cs);
  int m = 0;
  uint64_t seed = 1 + 100000u * (uint64_t)k + 1000u * (uint64_t)n;
  int nops = kind_reduces(k) ? g->nops : 1;
  for (int d = 0; d < g->ndts; d++)
    for (int o = 0; o < nops; o++)
      for (int ci = 0; ci < g->ncounts; ci++)
        for (int ip = 0; ip < 2; ip++) {
          int r0 = 0, r1 = 0;
          if (kind_rooted(k)) {
            if (g->counts[ci] == g->every_root_count) r0 = 0, r1 = n - 1;
            else r0 = r1 = (ci + ip + d) % n;
          }
          for (int root = r0; root <= r1; root++) {
            tcase t = {k, g->dts[d], kind_reduces(k) ? g->ops[o] : SK_SUM, g->counts[ci], ip == 1, root, seed++};
            cs[m++] = t;
          }
        }
  *out = cs;
  return m;
}

static void run_cases(int n, int cfg, const tcase *cs, int ncases, const char *label) {
  run_arg a;
  memset(&a, 0, sizeof a);
  a.n = n, a.cfg = cfg, a.cases = cs, a.ncases = ncases;
  a.slots = ct_slots_new(n);
  char lab[160];
  snprintf(lab, sizeof lab, "%s n=%d cfg=%s", label, n, ct_cfg_names[cfg]);
  ct_run(n, cfg, cases_device, &a, lab);
  ct_expect_slots(a.slots, n, lab);
  free(a.slots);
}

static void run_grid(kind k, const grid *g, int n, int cfg) {
  tcase *cs = NULL;
  int m = expand(k, g, n, &cs);
  run_cases(n, cfg, cs, m, kind_names(k));
  free(cs);
}

static const size_t std_counts[] = {0, 1, 7, 1023};
static const grid std_grid = {ct_all_dtypes, CT_NDTYPES, ct_all_ops, CT_NOPS, std_counts, 4, 7};

static const size_t big_n_counts[] = {0, 1, 7};
static const grid big_n_grid = {ct_all_dtypes, CT_NDTYPES, ct_all_ops, CT_NOPS, big_n_counts, 3, 1};

static const sk_dtype few_dtypes[] = {SK_F32, SK_BF16, SK_I8, SK_I64};
static const size_t huge_n_counts[] = {0, 7};
static const grid huge_n_grid = {few_dtypes, 4, ct_all_ops, CT_NOPS, huge_n_counts, 2, 1};

typedef struct param {
  int n, cfg;
} param;

#define STD_PARAMS                                                                                    \
  {1, CT_CFG_DEFAULT}, {2, CT_CFG_DEFAULT}, {3, CT_CFG_DEFAULT}, {5, CT_CFG_DEFAULT}, {8, CT_CFG_DEFAULT}, \
  {1, CT_CFG_LARGE}, {2, CT_CFG_LARGE}, {3, CT_CFG_LARGE}, {5, CT_CFG_LARGE}, {8, CT_CFG_LARGE}

#define PARAMS(name, ...)                                                            \
  ParameterizedTestParameters(comm_coll, name) {                                     \
    static param ps[] = {__VA_ARGS__};                                               \
    return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);                 \
  }

/* ---- the sweeps ------------------------------------------------------------------------------- */

PARAMS(allreduce, STD_PARAMS, {3, CT_CFG_SMALL4K}, {8, CT_CFG_SMALL4K})
ParameterizedTest(param *p, comm_coll, allreduce, .timeout = 30) { run_grid(K_ALLREDUCE, &std_grid, p->n, p->cfg); }

PARAMS(allgather, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, allgather, .timeout = 30) { run_grid(K_ALLGATHER, &std_grid, p->n, p->cfg); }

PARAMS(reduce_scatter, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, reduce_scatter, .timeout = 30) {
  run_grid(K_REDUCE_SCATTER, &std_grid, p->n, p->cfg);
}

PARAMS(broadcast, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, broadcast, .timeout = 30) { run_grid(K_BROADCAST, &std_grid, p->n, p->cfg); }

PARAMS(reduce, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, reduce, .timeout = 30) { run_grid(K_REDUCE, &std_grid, p->n, p->cfg); }

PARAMS(alltoall, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, alltoall, .timeout = 30) { run_grid(K_ALLTOALL, &std_grid, p->n, p->cfg); }

PARAMS(gather, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, gather, .timeout = 30) { run_grid(K_GATHER, &std_grid, p->n, p->cfg); }

PARAMS(scatter, STD_PARAMS)
ParameterizedTest(param *p, comm_coll, scatter, .timeout = 30) { run_grid(K_SCATTER, &std_grid, p->n, p->cfg); }

/* 16 and 64 devices: every collective on a smaller grid. */
PARAMS(big_groups, {16, CT_CFG_DEFAULT}, {16, CT_CFG_LARGE}, {64, CT_CFG_DEFAULT}, {64, CT_CFG_LARGE})
ParameterizedTest(param *p, comm_coll, big_groups, .timeout = 30) {
  const grid *g = p->n >= 64 ? &huge_n_grid : &big_n_grid;
  for (int k = 0; k < K_NKINDS; k++) run_grid((kind)k, g, p->n, p->cfg);
}

/* A prime count (100003: no chunking splits it evenly) per collective, with a few dtype/op pairs.
   On 8 ranks most cases use the smaller prime 20011 to keep the references (and TSan) cheap. */
PARAMS(large_count, {3, CT_CFG_DEFAULT}, {8, CT_CFG_DEFAULT}, {3, CT_CFG_LARGE}, {8, CT_CFG_LARGE})
ParameterizedTest(param *p, comm_coll, large_count, .timeout = 30) {
  const size_t N = 100003, M = p->n >= 8 ? 20011 : 100003;
  int n = p->n;
  const tcase cs[] = {
      {K_ALLREDUCE, SK_F32, SK_SUM, N, false, 0, 11},   {K_ALLREDUCE, SK_BF16, SK_AVG, M, true, 0, 12},
      {K_ALLREDUCE, SK_I64, SK_PROD, M, false, 0, 13},  {K_ALLREDUCE, SK_F64, SK_MAX, M, true, 0, 14},
      {K_ALLGATHER, SK_I8, SK_SUM, M, false, 0, 15},     {K_ALLGATHER, SK_F16, SK_SUM, M, true, 0, 16},
      {K_REDUCE_SCATTER, SK_F32, SK_SUM, M, false, 0, 17}, {K_REDUCE_SCATTER, SK_I32, SK_MIN, M, true, 0, 18},
      {K_BROADCAST, SK_F16, SK_SUM, N, false, 1, 19},    {K_BROADCAST, SK_I32, SK_SUM, M, true, n - 1, 20},
      {K_REDUCE, SK_F64, SK_MIN, M, false, n - 1, 21},   {K_REDUCE, SK_U8, SK_SUM, M, true, 1, 22},
      {K_ALLTOALL, SK_U8, SK_SUM, M, false, 0, 23},      {K_ALLTOALL, SK_F32, SK_SUM, M, true, 0, 24},
  };
  run_cases(n, p->cfg, cs, (int)(sizeof cs / sizeof cs[0]), "large_count");
}

/* Every kind interleaved on one communicator: state left by one collective must not leak into
   the next (inline slots, chunk tables, root bookkeeping). */
PARAMS(mixed, {2, CT_CFG_DEFAULT}, {5, CT_CFG_DEFAULT}, {8, CT_CFG_DEFAULT}, {5, CT_CFG_LARGE}, {8, CT_CFG_SMALL4K})
ParameterizedTest(param *p, comm_coll, mixed, .timeout = 30) {
  static const size_t counts[] = {0, 1, 3, 7, 64, 1023, 2001};
  int n = p->n, m = 0;
  tcase cs[300];
  for (int i = 0; i < 300; i++) {
    kind k = (kind)(i % K_NKINDS);
    tcase t = {k,        ct_all_dtypes[(i / K_NKINDS) % CT_NDTYPES],
               ct_all_ops[(i / 3) % CT_NOPS], counts[(i * 5 + i / 7) % 7],
               ((i / 2) % 2) == 1, (i / K_NKINDS) % n, 5000u + (uint64_t)i};
    cs[m++] = t;
  }
  run_cases(n, p->cfg, cs, m, "mixed");
}

/* ---- Barrier ---------------------------------------------------------------------------------- */

typedef struct barrier_arg {
  int n, rounds;
  atomic_int *phase; /* phase[r]: the last round rank r entered */
  ct_slot *slots;
} barrier_arg;

/* Round k: announce k, barrier, then every peer must have announced at least k. */
static sk_result barrier_device(sk_comm *c, void *p) {
  barrier_arg *a = (barrier_arg *)p;
  int rank = sk_comm_rank(c);
  ct_slot *s = &a->slots[rank];
  for (int k = 1; k <= a->rounds; k++) {
    if (rank == k % a->n) ct_sleep_ms(2); /* a late arrival, a different rank each round */
    atomic_store(&a->phase[rank], k);
    sk_result r = (k % 3 == 0) ? SK_OK : sk_barrier(c);
    if (k % 3 == 0) { /* the non-blocking form too */
      sk_request *req = NULL;
      r = sk_ibarrier(c, &req);
      if (r == SK_OK) r = sk_wait(&req);
    }
    char what[96];
    snprintf(what, sizeof what, "barrier n=%d rank=%d round %d", a->n, rank, k);
    if (!ct_rc(s, r, c, what)) return r;
    for (int q = 0; q < a->n; q++) {
      int ph = atomic_load(&a->phase[q]);
      ct_check(s, ph >= k, "barrier n=%d rank=%d round %d: left the barrier before rank %d arrived (its phase %d)",
               a->n, rank, k, q, ph);
    }
  }
  s->ran = 1;
  return SK_OK;
}

PARAMS(barrier, STD_PARAMS, {16, CT_CFG_DEFAULT}, {64, CT_CFG_DEFAULT})
ParameterizedTest(param *p, comm_coll, barrier, .timeout = 30) {
  barrier_arg a;
  a.n = p->n;
  a.rounds = p->n >= 64 ? 6 : 12;
  a.phase = (atomic_int *)calloc((size_t)p->n, sizeof(atomic_int));
  for (int r = 0; r < p->n; r++) atomic_init(&a.phase[r], 0);
  a.slots = ct_slots_new(p->n);
  char lab[64];
  snprintf(lab, sizeof lab, "barrier n=%d cfg=%s", p->n, ct_cfg_names[p->cfg]);
  ct_run(p->n, p->cfg, barrier_device, &a, lab);
  ct_expect_slots(a.slots, p->n, lab);
  free(a.slots);
  free(a.phase);
}

/* ---- the oracle itself: spot checks of the reference against hand-computed values ------------ */

Test(comm_coll, reference_spot_checks) {
  /* f32 sum left to right: (1e8 + 1) + -1e8 = 0 in f32 (1 is lost), not 1 */
  float f[3] = {1e8f, 1.0f, -1e8f}, out;
  const void *src[3] = {&f[0], &f[1], &f[2]};
  ct_ref_reduce1(&out, src, 3, SK_F32, SK_SUM);
  cr_expect_eq(out, 0.0f);
  /* i8 wraps */
  int8_t a[2] = {127, 1}, o8;
  const void *s8[2] = {&a[0], &a[1]};
  ct_ref_reduce1(&o8, s8, 2, SK_I8, SK_SUM);
  cr_expect_eq(o8, -128);
  /* i32 avg truncates toward zero */
  int32_t b[2] = {-7, 0}, o32;
  const void *s32[2] = {&b[0], &b[1]};
  ct_ref_reduce1(&o32, s32, 2, SK_I32, SK_AVG);
  cr_expect_eq(o32, -3);
  /* NaN in the last input wins in max */
  float g[2] = {1.0f, 0.0f / 0.0f};
  const void *sg[2] = {&g[0], &g[1]};
  ct_ref_reduce1(&out, sg, 2, SK_F32, SK_MAX);
  cr_expect(out != out);
}
