/* runtime_harness.h -- what the runtime suites share (tests/test_runtime.c, tests/test_hsdp.c,
   tests/test_pipeline_runtime.c, tests/test_search.c, tests/test_search_runtime.c):
   networks built in C, a counting allocator, one run of N device threads against the
   single-device trainer (sk_train.h), and the statistics helpers.

   A run compiles a network for N devices (sk_parallel.h, with a sk_autoparallel of knobs or the
   defaults), runs it on N device threads of the threads backend (sk_runtime_create / feed the
   GLOBAL batch / step / evaluate / gather every parameter), and against_trainer trains the same
   network on one device with the same seed, optimizer, dtype and data and compares losses,
   parameters, evaluation and logits.

   Under pipeline parallel (a plan with plan.vstage, tests/test_pipeline_runtime.c) the run's
   devices are the world's: each device gathers only the parameters of its stage (param_stage,
   holds_param), against_trainer compares each parameter from the first device of its stage,
   and the logits, an activation no stage holds after evaluate, are neither gathered nor
   compared (the evaluation's counts are, on every device). Without a pipeline nothing changes.

   Device threads never assert: each records its results and the first error (where, code,
   message) in its dev_out; the test's thread asserts after sk_world_run returns. Worlds have a
   short timeout (a hang becomes an error, not a stuck suite).

   Static inline only: every suite including this keeps what it uses. Include it after
   <criterion/criterion.h> (the TSan build's stand-in, tests/tsan_shim, works too). */
#ifndef RUNTIME_HARNESS_H
#define RUNTIME_HARNESS_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"

#define MAXDEV 8
#define MAXSTEPS 10
#define MAXIN 4
#define TOL64 1e-12
/* f32: the runtime and the trainer both compute in f32; summation order differs, so values
   differ by a few f32 ulps per operation, growing slowly over the steps. Measured over 10 steps
   of the tests below: losses within 1.4e-7, parameters within 5e-8 (relative to 1 + |value|);
   asserted with a margin. */
#define F32_TOL 1e-6
/* f16 and bf16 store in that format and compute in f32, as the trainer does. Summation order can
   flip a rounding to the storage format (one ulp: 2^-11 for f16, 2^-8 for bf16) that later steps
   carry on, and 16-bit collectives round each partial sum, so HALF_TOL allows a few (the
   measured figures are beside the tests that use it). */
#define HALF_TOL 2e-2
#define RT_TIMEOUT 60
#define WORLD_TIMEOUT_MS 20000u

/* ---- helpers for the test's thread ---------------------------------------------------------- */

#define OK(call)                                                               \
  do {                                                                         \
    sk_error e_;                                                               \
    memset(&e_, 0, sizeof e_);                                                 \
    sk_result r_ = (call);                                                     \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg); \
  } while (0)
#define E (&e_)

static inline uint64_t mix(uint64_t x) { /* splitmix64 */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline double unit(uint64_t seed, int64_t i) { /* [0, 1) */
  return (double)(mix(seed * 1000003u + (uint64_t)i) >> 11) / 9007199254740992.0;
}

/* ---- networks built in C -------------------------------------------------------------------- */

typedef struct net {
  sk_graph g;
  int nin;
  int64_t range[MAXIN]; /* by input, in tensor order: integer inputs draw from [0, range) */
} net;

static inline int add_input(net *n, const char *name, sk_dtype dt, int nd, const int64_t *shape, int64_t range) {
  int id = -1;
  OK(sk_graph_add_input(&n->g, name, dt, nd, shape, &id, E));
  cr_assert_lt(n->nin, MAXIN);
  n->range[n->nin++] = range;
  return id;
}

static inline int add_param(net *n, const char *name, int nd, const int64_t *shape, sk_init_kind kind, double value) {
  sk_init init = {kind, value};
  int id = -1;
  OK(sk_graph_add_param(&n->g, name, SK_F32, nd, shape, init, &id, E));
  return id;
}

static inline sk_graph_op op_of(const char *name, sk_op_kind kind, int ninputs, const int *inputs) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  snprintf(op.name, sizeof op.name, "%s", name);
  op.desc.kind = kind, op.ninputs = ninputs;
  for (int k = 0; k < ninputs; k++) op.inputs[k] = inputs[k];
  return op;
}
#define NARGS(...) ((int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)))
#define OP(name, kind, ...) op_of(name, kind, NARGS(__VA_ARGS__), (int[]){__VA_ARGS__})

static inline void shard(sk_graph_op *op, int i, int n, const int *v) {
  op->desc.has_strategy = true;
  for (int j = 0; j < n; j++) op->desc.strategy[i][j] = v[j];
}
#define SHARD(op, i, ...) shard(&(op), i, NARGS(__VA_ARGS__), (int[]){__VA_ARGS__})

/* Adds op; returns its first output. *index (may be NULL): the operator's index. */
static inline int add_op_at(net *n, const sk_graph_op *op, int *index) {
  int i = -1;
  OK(sk_graph_add_op(&n->g, op, &i, E));
  if (index) *index = i;
  return n->g.ops[i].outputs[0];
}
static inline int add_op(net *n, sk_graph_op op) { return add_op_at(n, &op, NULL); }

static int64_t S1[1], S2[2], S3[3];
#define SH1(a) (S1[0] = (a), S1)
#define SH2(a, b) (S2[0] = (a), S2[1] = (b), S2)
#define SH3(a, b, c) (S3[0] = (a), S3[1] = (b), S3[2] = (c), S3)

static inline int loss_head(net *n, int h, int y, const char *wname, int64_t in, int64_t classes) {
  int u = add_param(n, wname, 2, SH2(in, classes), SK_INIT_XAVIER_UNIFORM, 0);
  int z = add_op(n, OP("z", SK_OP_MATMUL, h, u));
  int loss = add_op(n, OP("loss", SK_OP_SOFTMAX_CE, z, y));
  OK(sk_graph_set_loss(&n->g, loss, E));
  OK(sk_graph_set_eval(&n->g, z, y, E));
  return z;
}

/* The tutorial's chain: MatMul ((2, N/2), (N/2, 1)), ReLU (N/2, 1), MatMul ((1, N), (N, 1)),
   ReLU (N, 1), then MatMul and SoftmaxCrossEntropy data parallel: every layer change moves. */
static inline void build_mlp(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 16), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w1 = add_param(n, "w1", 2, SH2(16, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(n, "w2", 2, SH2(16, 16), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op fc1 = OP("fc1", SK_OP_MATMUL, x, w1);
  SHARD(fc1, 0, 2, N / 2), SHARD(fc1, 1, N / 2, 1);
  sk_graph_op relu1 = OP("relu1", SK_OP_RELU, add_op(n, fc1));
  SHARD(relu1, 0, N / 2, 1);
  sk_graph_op fc2 = OP("fc2", SK_OP_MATMUL, add_op(n, relu1), w2);
  SHARD(fc2, 0, 1, N), SHARD(fc2, 1, N, 1);
  sk_graph_op relu2 = OP("relu2", SK_OP_RELU, add_op(n, fc2));
  SHARD(relu2, 0, N, 1);
  loss_head(n, add_op(n, relu2), y, "w3", 16, 4);
}

/* MatMul with the output strategy (a*b, c): a forward ReduceScatter, an AllGather backward. */
static inline int build_reduce_scatter(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int a = N == 2 ? 1 : 2, b = 2, c = N / (a * b);
  sk_graph_op fc = OP("fc", SK_OP_MATMUL, x, w);
  SHARD(fc, 0, a, b), SHARD(fc, 1, b, c);
  fc.desc.has_out_strategy = true, fc.desc.out_strategy[0] = a * b, fc.desc.out_strategy[1] = c;
  int at = -1;
  int h = add_op_at(n, &fc, &at);
  loss_head(n, add_op(n, OP("relu", SK_OP_RELU, h)), y, "u", 8, 4);
  return at;
}

/* A residual Add(h, f(h)) (h read by two operators in two layouts) and a weight read by two
   MatMuls (its gradient summed from both, one of them through a move). */
static inline void build_residual(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int v = add_param(n, "v", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op hm = OP("h", SK_OP_MATMUL, x, w);
  SHARD(hm, 0, N / 2, 2), SHARD(hm, 1, 2, 1);
  int h = add_op(n, hm);
  sk_graph_op am = OP("a", SK_OP_MATMUL, h, v);
  SHARD(am, 0, 1, N), SHARD(am, 1, N, 1);
  int f = add_op(n, OP("f", SK_OP_RELU, add_op(n, am)));
  sk_graph_op add = OP("r", SK_OP_ADD, h, f);
  SHARD(add, 0, 2, N / 2), SHARD(add, 1, 2, N / 2);
  int r = add_op(n, add);
  int s = add_op(n, OP("s", SK_OP_MATMUL, r, w)); /* w again, data parallel */
  loss_head(n, s, y, "u", 8, 4);
}

/* LayerNorm cut (N/2, 1) on N devices: a repeat axis of 2, over which gamma's and beta's
   gradients are replicated (the Mirror divides by 2 before its sum). Returns the operator. */
static inline int build_layernorm(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int gamma = add_param(n, "gamma", 1, SH1(8), SK_INIT_UNIFORM, 0.5);
  int beta = add_param(n, "beta", 1, SH1(8), SK_INIT_UNIFORM, 0.5);
  int h = add_op(n, OP("h", SK_OP_MATMUL, x, w));
  sk_graph_op ln = OP("ln", SK_OP_LAYER_NORM, h, gamma, beta);
  SHARD(ln, 0, N / 2, 1), SHARD(ln, 1, 1), SHARD(ln, 2, 1);
  ln.epsilon = 1e-5;
  int at = -1;
  int out = add_op_at(n, &ln, &at);
  loss_head(n, out, y, "u", 8, 4);
  return at;
}

/* An embedding lookup: table [16, 8] cut by rows (N, 1) (the indices whole; a ReduceScatter of
   the partial lookups), or by columns (1, N/2) with the indices cut 2 ways. */
static inline int build_gather(net *n, int N, bool rows) {
  sk_graph_init(&n->g), n->nin = 0;
  int tok = add_input(n, "tokens", SK_I32, 1, SH1(16), 16), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int table = add_param(n, "table", 2, SH2(16, 8), SK_INIT_UNIFORM, 0.5);
  sk_graph_op ga = OP("embed", SK_OP_GATHER, table, tok);
  if (rows) SHARD(ga, 0, N, 1), SHARD(ga, 1, 1);
  else SHARD(ga, 0, 1, N / 2), SHARD(ga, 1, 2);
  int at = -1;
  int e = add_op_at(n, &ga, &at);
  loss_head(n, add_op(n, OP("act", SK_OP_TANH, e)), y, "u", 8, 4);
  return at;
}

/* MindSpore's "shard batch and axis" Gather: table [16, 8] cut (2, 1), tokens [16, 2] cut
   (N/2, 1) (on 2 devices, where the mode needs 4 or more, a plain row split (2, 1), (1, 1)); the
   lookups [16, 2, 8] summed over dim 1, Tanh, then the loss head. */
static inline int build_gather_batch_axis(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int tok = add_input(n, "tokens", SK_I32, 2, SH2(16, 2), 16), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int table = add_param(n, "table", 2, SH2(16, 8), SK_INIT_UNIFORM, 0.5);
  sk_graph_op ga = OP("embed", SK_OP_GATHER, table, tok);
  SHARD(ga, 0, 2, 1), SHARD(ga, 1, N >= 4 ? N / 2 : 1, 1);
  int at = -1;
  int e = add_op_at(n, &ga, &at);
  sk_graph_op sum = OP("sum", SK_OP_REDUCE_SUM, e);
  sum.desc.naxis = 1, sum.desc.axis[0] = 1;
  loss_head(n, add_op(n, OP("act", SK_OP_TANH, add_op(n, sum))), y, "u", 8, 4);
  return at;
}

/* BatchMatMul [8,4,8] x [8,8,4] (contraction cut on 8 devices), Softmax over the last dim,
   MAELoss against a float label. */
static inline void build_bmm(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 3, SH3(8, 4, 8), 0), lab = add_input(n, "lab", SK_F32, 3, SH3(8, 4, 4), 0);
  int w = add_param(n, "w", 3, SH3(8, 8, 4), SK_INIT_UNIFORM, 0.5);
  sk_graph_op bm = OP("bmm", SK_OP_BATCH_MATMUL, x, w);
  int k = N == 8 ? 2 : 1, m = N == 2 ? 1 : 2;
  SHARD(bm, 0, 2, m, k), SHARD(bm, 1, 2, k, 1);
  sk_graph_op sm = OP("softmax", SK_OP_SOFTMAX, add_op(n, bm));
  SHARD(sm, 0, 2, N / 2, 1);
  sk_graph_op mae = OP("loss", SK_OP_MAE_LOSS, add_op(n, sm), lab);
  SHARD(mae, 0, 2, N / 2, 1), SHARD(mae, 1, 2, N / 2, 1);
  int loss = add_op(n, mae);
  OK(sk_graph_set_loss(&n->g, loss, E));
}

/* Dropout (keep 0.8) cut (N/2, 2) between two data-parallel MatMuls. */
static inline void build_dropout(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int h = add_op(n, OP("h", SK_OP_MATMUL, x, w));
  sk_graph_op dr = OP("drop", SK_OP_DROPOUT, h);
  SHARD(dr, 0, N / 2, 2);
  dr.keep_prob = 0.8;
  loss_head(n, add_op(n, dr), y, "u", 8, 4);
}

/* ---- a counting allocator --------------------------------------------------------------------- */

/* Per device; each block carries 64 bytes of our own header in front (its requested size). */
typedef struct counter {
  long calls;         /* alloc calls */
  long fail_at;       /* refuse exactly this call (1-based; 0: none) */
  bool fail_all;      /* refuse every call */
  long refused;
  size_t outstanding; /* bytes requested and not freed */
  long blocks;        /* blocks not freed */
} counter;

static inline void *count_alloc(void *user, size_t size, size_t align) {
  counter *c = (counter *)user;
  c->calls++;
  if (c->fail_all || c->calls == c->fail_at || align > 64) return c->refused++, NULL;
  unsigned char *p = (unsigned char *)aligned_alloc(64, 64 + (size + 63) / 64 * 64);
  if (!p) return NULL;
  memcpy(p, &size, sizeof size);
  c->outstanding += size, c->blocks++;
  return p + 64;
}

static inline void count_free(void *user, void *q) {
  if (!q) return;
  counter *c = (counter *)user;
  unsigned char *p = (unsigned char *)q - 64;
  size_t size;
  memcpy(&size, p, sizeof size);
  c->outstanding -= size, c->blocks--;
  free(p);
}

/* ---- one run: N devices, the steps, what each device saw ------------------------------------ */

typedef struct dev_out {
  bool ran;           /* the device function started (not when the world was down before it joined) */
  sk_result rc;       /* the first error */
  char where[16];     /* "create", "feed", "step", "evaluate", "gather" */
  char msg[SK_ERROR_MSG_MAX];
  bool created;
  int steps;          /* steps that returned SK_OK */
  double loss[MAXSTEPS];
  int64_t correct, rows;
  unsigned char *params, *logits; /* gathered (the run's dtype) */
  unsigned char *init;            /* R->broadcast: the parameters gathered right after the broadcast */
  counter cnt;
  sk_runtime_memory mem_created, mem_end;
  size_t out_created, out_end, out_after; /* the counter's outstanding bytes */
  long blocks_created, blocks_end, blocks_after;
  sk_runtime_stats stats; /* after the steps */
  double clock_us;        /* the device's virtual clock at the end (a world with a link model) */
} dev_out;

/* FAIL_IN_STEP: call fail_at of the first step (counted from its start, after the feeds). */
enum { FAIL_IN_CREATE = 0, FAIL_FROM_FEED, FAIL_FROM_EVALUATE, FAIL_IN_STEP };

typedef struct run {
  net *n;
  sk_parallel_plan plan;
  sk_runtime_desc desc;
  int ndev, nsteps;
  bool counting;           /* every device allocates through its counter */
  bool evaluate;           /* evaluate and gather the logits after the steps */
  bool create_only;        /* the allocation sweeps: create, destroy */
  int fail_rank;           /* the device whose allocator fails (-1: none) */
  long fail_at;            /* ... at this call of create (FAIL_IN_CREATE) or of the first step (FAIL_IN_STEP) */
  int fail_phase;          /* FAIL_*: when it fails */
  sk_link_model link;      /* the world's (zero: none) */
  sk_topology topology;    /* the world's hierarchical cluster instead of link (zero: none) */
  /* after create, sk_runtime_parameter_broadcast(rt, rank + initial_rank + cur_rank_skew,
     initial_rank) and a gather of every parameter (dev_out.init); against_trainer then starts
     the trainer from device 0's. Under a pipeline rank is the world's, the initial_rank passed
     is initial_rank + the first rank of the device's stage, and each device gathers its stage's
     parameters (the trainer starts from each one's first holder). plan.desc.seed_by_rank is the
     test's to set. */
  bool broadcast;
  int initial_rank, cur_rank_skew; /* skew nonzero: a wrong cur_rank */
  int in_t[MAXIN];
  sk_dtype in_dt[MAXIN];
  int64_t in_n[MAXIN];
  void *data[MAXSTEPS][MAXIN];
  size_t *param_off;       /* per tensor: its offset in dev_out.params */
  size_t params_bytes, logits_bytes;
  sk_result world_rc;
  char world_msg[SK_ERROR_MSG_MAX];
  dev_out dev[MAXDEV];
} run;

static inline sk_result note(dev_out *o, const char *where, sk_result r, const sk_error *e) {
  if (r && !o->rc) {
    o->rc = r;
    snprintf(o->where, sizeof o->where, "%s", where);
    snprintf(o->msg, sizeof o->msg, "%s", e->msg);
  }
  return r;
}

/* Pipeline parallel (R->plan.vstage): the stage whose devices hold parameter t (the one its
   readers run on: the compiler refuses parameters shared across stages); 0 without a pipeline. */
static inline int param_stage(const run *R, int t) {
  const sk_graph *g = R->plan.graph;
  if (!R->plan.vstage) return 0;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t) return sk_pipe_stage_of(&R->plan.schedule, R->plan.vstage[o], NULL);
  return 0;
}

/* Whether device `rank` can gather parameter t: always without a pipeline; under one, the
   devices of its stage (sk_runtime_gather works only for tensors its stage holds). */
static inline bool holds_param(const run *R, int rank, int t) {
  return !R->plan.vstage || sk_parallel_stage_of_rank(&R->plan, rank) == param_stage(R, t);
}

/* The first device that gathers parameter t: 0 without a pipeline. */
static inline int first_holder(const run *R, int t) {
  for (int d = 0; d < R->ndev; d++)
    if (holds_param(R, d, t)) return d;
  return 0;
}

static inline sk_result device_main(sk_comm *comm, void *arg) {
  run *R = (run *)arg;
  int rank = sk_comm_rank(comm);
  dev_out *o = &R->dev[rank];
  const sk_graph *g = &R->n->g;
  sk_error e;
  memset(&e, 0, sizeof e);
  o->ran = true;
  sk_runtime_desc d = R->desc;
  if (R->counting) {
    if (rank == R->fail_rank && R->fail_phase == FAIL_IN_CREATE) o->cnt.fail_at = R->fail_at;
    d.alloc.alloc = count_alloc, d.alloc.free = count_free, d.alloc.user = &o->cnt;
  }
  sk_runtime *rt = NULL;
  sk_result r = note(o, "create", sk_runtime_create(comm, &R->plan, &d, &rt, &e), &e);
  if (!r) {
    o->created = true;
    sk_runtime_memory_get(rt, &o->mem_created);
    o->out_created = o->cnt.outstanding, o->blocks_created = o->cnt.blocks;
    o->cnt.fail_at = 0; /* FAIL_IN_CREATE sweeps create's allocations only */
    if (rank == R->fail_rank && R->fail_phase == FAIL_FROM_FEED) o->cnt.fail_all = true;
  }
  if (!r && R->broadcast) { /* under a pipeline within each stage: initial_rank is the stage's first */
    int first = R->plan.vstage ? sk_parallel_stage_of_rank(&R->plan, rank) * R->plan.desc.ndevices : 0;
    int cur = rank + R->initial_rank + R->cur_rank_skew;
    r = note(o, "broadcast", sk_runtime_parameter_broadcast(rt, cur, R->initial_rank + first, &e), &e);
    for (int t = 0; !r && t < g->ntensors; t++)
      if (g->tensors[t].role == SK_TENSOR_PARAM && holds_param(R, rank, t))
        r = note(o, "gather", sk_runtime_gather(rt, t, o->init + R->param_off[t], &e), &e);
  }
  for (int s = 0; !r && !R->create_only && s < R->nsteps; s++) {
    for (int i = 0; !r && i < R->n->nin; i++)
      r = note(o, "feed", sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[s][i], (size_t)R->in_n[i], &e), &e);
    bool in_step = s == 0 && rank == R->fail_rank && R->fail_phase == FAIL_IN_STEP;
    if (!r && in_step) o->cnt.fail_at = o->cnt.calls + R->fail_at;
    if (!r) r = note(o, "step", sk_runtime_step(rt, &o->loss[s], &e), &e);
    if (in_step) o->cnt.fail_at = 0;
    if (!r) o->steps++;
  }
  if (!r && !R->create_only && R->evaluate) {
    if (rank == R->fail_rank && R->fail_phase == FAIL_FROM_EVALUATE) o->cnt.fail_all = true;
    r = note(o, "evaluate", sk_runtime_evaluate(rt, &o->correct, &o->rows, &e), &e);
    /* pipeline: the logits are a micro-batch's activation, held by no stage after evaluate;
       recomputed logits are dropped when evaluate ends */
    if (!r && !R->plan.vstage && !sk_parallel_recomputed(&R->plan, g->logits)) r = note(o, "gather", sk_runtime_gather(rt, g->logits, o->logits, &e), &e);
  }
  for (int t = 0; !r && !R->create_only && t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM && holds_param(R, rank, t)) r = note(o, "gather", sk_runtime_gather(rt, t, o->params + R->param_off[t], &e), &e);
  sk_runtime_stats_get(rt, &o->stats);
  o->clock_us = sk_comm_clock_us(comm);
  if (!r && rt) {
    sk_runtime_memory_get(rt, &o->mem_end);
    o->out_end = o->cnt.outstanding, o->blocks_end = o->cnt.blocks;
  }
  sk_runtime_destroy(rt);
  o->out_after = o->cnt.outstanding, o->blocks_after = o->cnt.blocks;
  return r;
}

static inline size_t esize(sk_dtype dt) { return sk_dtype_size(dt); }

/* Compiles n for ndev devices with the knobs of `knobs` (NULL: every default) and draws every
   step's data (the same for runtime and trainer). */
static inline void run_init_knobs(run *R, net *n, int ndev, sk_dtype dt, sk_optim_desc optim, int nsteps,
                           const sk_autoparallel *knobs) {
  memset(R, 0, sizeof *R);
  R->n = n, R->ndev = ndev, R->nsteps = nsteps, R->fail_rank = -1;
  R->evaluate = n->g.logits >= 0;
  sk_autoparallel pd;
  if (knobs) pd = *knobs;
  else memset(&pd, 0, sizeof pd);
  pd.ndevices = ndev, pd.dtype = dt, pd.optim = optim, pd.seed = 7;
  OK(sk_parallel_compile(&n->g, &pd, &R->plan, E));
  const sk_graph *g = &n->g;
  int i = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    cr_assert_lt(i, n->nin);
    bool integer = g->tensors[t].dtype == SK_I32 || g->tensors[t].dtype == SK_I64;
    cr_assert_eq(integer, n->range[i] > 0, "input '%s': range %lld", g->tensors[t].name, (long long)n->range[i]);
    R->in_t[i] = t, R->in_dt[i] = integer ? SK_I32 : SK_F64, R->in_n[i] = sk_graph_numel(g, t);
    for (int s = 0; s < nsteps; s++) {
      void *buf = malloc((size_t)R->in_n[i] * 8);
      cr_assert_not_null(buf);
      for (int64_t j = 0; j < R->in_n[i]; j++) {
        double u = unit(mix(1000u * (uint64_t)s + (uint64_t)i + 17u), j);
        if (integer) ((int32_t *)buf)[j] = (int32_t)(u * (double)n->range[i]);
        else ((double *)buf)[j] = 2 * u - 1;
      }
      R->data[s][i] = buf;
    }
    i++;
  }
  cr_assert_eq(i, n->nin);
  R->param_off = (size_t *)calloc((size_t)g->ntensors, sizeof(size_t));
  cr_assert_not_null(R->param_off);
  size_t es = esize(dt == SK_F64 ? SK_F64 : SK_F32);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM) R->param_off[t] = R->params_bytes, R->params_bytes += (size_t)sk_graph_numel(g, t) * es;
  if (g->logits >= 0) R->logits_bytes = (size_t)sk_graph_numel(g, g->logits) * es;
  for (int d = 0; d < ndev; d++) {
    R->dev[d].params = (unsigned char *)calloc(1, R->params_bytes + 1);
    R->dev[d].logits = (unsigned char *)calloc(1, R->logits_bytes + 1);
    R->dev[d].init = (unsigned char *)calloc(1, R->params_bytes + 1);
    cr_assert(R->dev[d].params && R->dev[d].logits && R->dev[d].init);
  }
}

static inline void run_init(run *R, net *n, int ndev, sk_dtype dt, sk_optim_desc optim, int nsteps) {
  run_init_knobs(R, n, ndev, dt, optim, nsteps, NULL);
}

static inline void run_free(run *R) {
  for (int s = 0; s < MAXSTEPS; s++)
    for (int i = 0; i < MAXIN; i++) free(R->data[s][i]);
  for (int d = 0; d < MAXDEV; d++) free(R->dev[d].params), free(R->dev[d].logits), free(R->dev[d].init);
  free(R->param_off);
  sk_parallel_free(&R->plan);
}

/* Runs R on a fresh world of R->ndev device threads; resets what the devices record. */
/* A fresh world of R->ndev threads running fn on R, what each device saw reset first. */
static inline void run_world_with(run *R, sk_device_fn fn) {
  for (int d = 0; d < MAXDEV; d++) {
    dev_out *o = &R->dev[d];
    unsigned char *p = o->params, *l = o->logits, *in = o->init;
    memset(o, 0, sizeof *o);
    o->params = p, o->logits = l, o->init = in;
  }
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = R->ndev, wd.backend = sk_threads_backend(), wd.timeout_ms = WORLD_TIMEOUT_MS, wd.cluster.link = R->link;
  wd.cluster.topology = R->topology;
  sk_world *w = NULL;
  OK(sk_world_create(&wd, &w, E));
  R->world_rc = sk_world_run(w, fn, R, NULL);
  snprintf(R->world_msg, sizeof R->world_msg, "%s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
}

static inline void run_world(run *R) { run_world_with(R, device_main); }

static inline void expect_all_ok(const run *R, const char *what) {
  cr_assert_eq(R->world_rc, SK_OK, "%s on %d devices: world %s (%s)", what, R->ndev, sk_result_name(R->world_rc), R->world_msg);
  for (int d = 0; d < R->ndev; d++)
    cr_assert_eq(R->dev[d].rc, SK_OK, "%s on %d devices: device %d: %s: %s (%s)", what, R->ndev, d, R->dev[d].where,
                 sk_result_name(R->dev[d].rc), R->dev[d].msg);
}

static inline double get(sk_dtype dt, const void *p, int64_t i) {
  return dt == SK_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static inline double rel(double a, double ref) { return fabs(a - ref) / (1 + fabs(ref)); }

typedef struct errs {
  double loss, param, logits; /* the largest relative difference seen */
  int worst;                  /* the parameter where param was seen */
} errs;

/* R->broadcast: every device that holds a parameter (under a pipeline, its stage's) gathered the
   same values after the broadcast (the replicas agree with their owners, whichever copy a
   gather reads), and the trainer starts from them. */
static inline void start_from_broadcast(const run *R, sk_trainer *t, const char *what) {
  const sk_graph *g = &R->n->g;
  for (int p = 0; p < g->ntensors; p++) {
    if (g->tensors[p].role != SK_TENSOR_PARAM) continue;
    size_t bytes = (size_t)sk_graph_numel(g, p) * esize(sk_trainer_dtype(t));
    int d0 = first_holder(R, p);
    for (int d = d0 + 1; d < R->ndev; d++)
      cr_assert(!holds_param(R, d, p) || memcmp(R->dev[d].init + R->param_off[p], R->dev[d0].init + R->param_off[p], bytes) == 0,
                "%s: after the broadcast device %d gathered other values of '%s' than device %d", what, d, g->tensors[p].name, d0);
    memcpy(sk_trainer_values(t, p), R->dev[d0].init + R->param_off[p], bytes);
  }
}

/* The single-device trainer R's run is compared with: the same seed, optimizer and dtype, the
   plan's gradient factors (sk_parallel_grad_scales: all 1 unless a knob rescales) and
   accumulation, started from the broadcast model under R->broadcast. */
static inline sk_trainer *trainer_like(const run *R, const char *what) {
  const sk_graph *g = &R->n->g;
  double *scales = (double *)calloc((size_t)g->nops * SK_OP_MAX_INPUTS + 1, sizeof(double));
  cr_assert_not_null(scales);
  sk_parallel_grad_scales(&R->plan, scales);
  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = R->plan.desc.dtype, td.optim = R->plan.desc.optim, td.seed = R->plan.desc.seed, td.grad_scales = scales;
  td.grad_accumulation_step = R->plan.desc.grad_accumulation_step; /* micro-steps as the plan's */
  sk_trainer *t = NULL;
  OK(sk_trainer_create(g, &td, &t, E));
  free(scales); /* copied at create */
  if (R->broadcast) start_from_broadcast(R, t, what);
  return t;
}

/* Trains R's network on one device (trainer_like) with the same data, and compares every
   device's losses, gathered parameters, evaluation and logits within tol. */
static inline errs against_trainer(const run *R, double tol, const char *what) {
  const sk_graph *g = &R->n->g;
  sk_trainer *t = trainer_like(R, what);
  sk_dtype cdt = sk_trainer_dtype(t);
  errs m = {0, 0, 0, -1};
  for (int s = 0; s < R->nsteps; s++) {
    for (int i = 0; i < R->n->nin; i++) OK(sk_trainer_feed(t, R->in_t[i], R->in_dt[i], R->data[s][i], (size_t)R->in_n[i], E));
    double ref = 0;
    OK(sk_trainer_step(t, &ref, E));
    for (int d = 0; d < R->ndev; d++) {
      double l = R->dev[d].loss[s], x = rel(l, ref);
      m.loss = x > m.loss ? x : m.loss;
      cr_assert(x <= tol, "%s, %d devices, step %d, device %d: loss %.17g, one device %.17g (rel %.3g)", what, R->ndev, s, d,
                l, ref, x);
      cr_assert(memcmp(&l, &R->dev[0].loss[s], sizeof l) == 0, "%s: step %d: device %d's loss differs from device 0's",
                what, s, d);
    }
  }
  if (R->evaluate) {
    int64_t correct = -1, rows = -1;
    OK(sk_trainer_evaluate(t, &correct, &rows, E));
    for (int d = 0; d < R->ndev; d++) {
      cr_assert_eq(R->dev[d].rows, rows, "%s: device %d evaluated %lld rows, one device %lld", what, d,
                   (long long)R->dev[d].rows, (long long)rows);
      cr_assert_eq(R->dev[d].correct, correct, "%s, %d devices: device %d counts %lld correct, one device %lld", what,
                   R->ndev, d, (long long)R->dev[d].correct, (long long)correct);
      cr_assert(R->plan.vstage || sk_parallel_recomputed(&R->plan, g->logits) ||
                    memcmp(R->dev[d].logits, R->dev[0].logits, R->logits_bytes) == 0,
                "%s: device %d gathered other logits than device 0", what, d);
    }
    const void *ref = sk_trainer_values(t, g->logits);
    bool gathered = !R->plan.vstage && !sk_parallel_recomputed(&R->plan, g->logits); /* as device_main gathers them */
    for (int64_t j = 0; gathered && j < sk_graph_numel(g, g->logits); j++) {
      double a = get(cdt, R->dev[0].logits, j), b = get(cdt, ref, j), x = rel(a, b);
      m.logits = x > m.logits ? x : m.logits;
      cr_assert(x <= tol, "%s, %d devices: logits[%lld] %.17g, one device %.17g", what, R->ndev, (long long)j, a, b);
    }
  }
  for (int p = 0; p < g->ntensors; p++) {
    if (g->tensors[p].role != SK_TENSOR_PARAM) continue;
    const void *ref = sk_trainer_values(t, p);
    int d0 = first_holder(R, p); /* 0 without a pipeline; under one, the first device of p's stage */
    for (int d = 0; d < R->ndev; d++) {
      if (!holds_param(R, d, p)) continue;
      const unsigned char *mine = R->dev[d].params + R->param_off[p];
      cr_assert(memcmp(mine, R->dev[d0].params + R->param_off[p], (size_t)sk_graph_numel(g, p) * esize(cdt)) == 0,
                "%s: device %d gathered other values of '%s' than device %d", what, d, g->tensors[p].name, d0);
    }
    for (int64_t j = 0; j < sk_graph_numel(g, p); j++) {
      double a = get(cdt, R->dev[d0].params + R->param_off[p], j), b = get(cdt, ref, j), x = rel(a, b);
      if (x > m.param) m.param = x, m.worst = p;
      cr_assert(x <= tol, "%s, %d devices, after %d steps: '%s'[%lld] %.17g, one device %.17g (rel %.3g)", what, R->ndev,
                R->nsteps, g->tensors[p].name, (long long)j, a, b, x);
    }
  }
  sk_trainer_destroy(t);
  return m;
}

static inline sk_optim_desc sgd(double lr) {
  sk_optim_desc o;
  memset(&o, 0, sizeof o);
  o.kind = SK_OPTIM_SGD, o.lr = lr;
  return o;
}

static inline sk_optim_desc adam(double lr) {
  sk_optim_desc o = sgd(lr);
  o.kind = SK_OPTIM_ADAM;
  return o;
}

static inline sk_optim_desc momentum(double lr, double mu) {
  sk_optim_desc o = sgd(lr);
  o.kind = SK_OPTIM_MOMENTUM, o.momentum = mu;
  return o;
}

static inline int count_steps(const sk_parallel_plan *p, sk_parallel_step_kind kind) {
  int n = 0;
  for (int i = 0; i < p->nsteps; i++) n += p->steps[i].kind == kind;
  return n;
}

/* Builds with build(n, N) for N = 2, 4, 8, compiles it with the knobs of `knobs` (NULL: every
   default), trains `steps` steps in f64 and checks against the trainer; check (may be NULL) looks
   at each plan first. Returns the largest differences seen. */
typedef void (*build_fn)(net *n, int N);
typedef void (*plan_check_fn)(const run *R, int N);

static inline errs each_device_count_knobs(const char *what, build_fn build, plan_check_fn check, sk_optim_desc optim, int steps,
                                           const sk_autoparallel *knobs) {
  static const int counts[3] = {2, 4, 8};
  errs worst = {0, 0, 0, -1};
  for (int c = 0; c < 3; c++) {
    static net n;
    static run R;
    build(&n, counts[c]);
    run_init_knobs(&R, &n, counts[c], SK_F64, optim, steps, knobs);
    cr_assert_eq(R.plan.nfallbacks, 0, "%s on %d devices: %d strategies fell back", what, counts[c], R.plan.nfallbacks);
    if (check) check(&R, counts[c]);
    run_world(&R);
    expect_all_ok(&R, what);
    errs m = against_trainer(&R, TOL64, what);
    worst.loss = fmax(worst.loss, m.loss), worst.param = fmax(worst.param, m.param);
    run_free(&R);
    sk_graph_free(&n.g);
  }
  cr_log_info("%s, 2/4/8 devices vs one, %d steps f64: losses within %.3g, parameters within %.3g", what, steps, worst.loss,
              worst.param);
  return worst;
}

/* Runs R (run_init*) on its devices, expects every device to succeed, and compares it with the
   single-device trainer in f64 (TOL64); the differences seen. */
static inline errs run_against_trainer(run *R, const char *what) {
  run_world(R);
  expect_all_ok(R, what);
  return against_trainer(R, TOL64, what);
}

static inline void each_device_count(const char *what, build_fn build, plan_check_fn check, sk_optim_desc optim, int steps) {
  each_device_count_knobs(what, build, check, optim, steps, NULL);
}

/* Every counted byte: the kinds peak sums, and the library's bookkeeping (host). */
static inline uint64_t mem_sum(const sk_runtime_memory *m) {
  return m->parameters + m->gradients + m->optimizer_state + m->activations + m->communication + m->host;
}

/* Three data-parallel MatMuls (no strategies): three Mirrors over every device, each of a
   parameter read once, so all three go through the fusion scheduler. */
static inline void build_dp(net *n, int N) {
  (void)N;
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w1 = add_param(n, "w1", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(n, "w2", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int h1 = add_op(n, OP("relu1", SK_OP_RELU, add_op(n, OP("fc1", SK_OP_MATMUL, x, w1))));
  int h2 = add_op(n, OP("relu2", SK_OP_RELU, add_op(n, OP("fc2", SK_OP_MATMUL, h1, w2))));
  loss_head(n, h2, y, "u", 8, 4);
}

static inline uint64_t coll_calls(const sk_runtime_stats *st, sk_coll_kind kind) {
  uint64_t n = 0;
  for (int i = 0; i < st->nrows; i++) n += st->rows[i].kind == kind ? st->rows[i].calls : 0;
  return n;
}

static inline uint64_t coll_bytes(const sk_runtime_stats *st, sk_coll_kind kind) {
  uint64_t n = 0;
  for (int i = 0; i < st->nrows; i++) n += st->rows[i].kind == kind ? st->rows[i].bytes : 0;
  return n;
}

/* Runs n on ndev devices with the knobs of pd into *R (compiled, run, checked error-free). */
static inline void run_knobs(run *R, net *n, int ndev, sk_dtype dt, sk_optim_desc optim, int nsteps, const sk_autoparallel *pd,
                      const char *what) {
  run_init_knobs(R, n, ndev, dt, optim, nsteps, pd);
  run_world(R);
  expect_all_ok(R, what);
}

/* After a world in which device R->fail_rank failed (attempt k of a sweep): nothing stays
   allocated on any device, and every device that ran returned an error, none by the timeout. */
static inline void expect_all_failed_clean(const run *R, long k, const char *what) {
  cr_assert_neq(R->world_rc, SK_OK, "%s: k = %ld: the world went on", what, k);
  for (int d = 0; d < R->ndev; d++) {
    const dev_out *o = &R->dev[d];
    cr_assert_eq(o->out_after, 0, "%s: k = %ld, device %d: %zu bytes outstanding", what, k, d, o->out_after);
    cr_assert_eq(o->blocks_after, 0);
    if (!o->ran) continue; /* it joined a world already down */
    cr_assert_neq(o->rc, SK_OK, "%s: k = %ld: device %d went on after device %d failed", what, k, d, R->fail_rank);
    cr_assert_neq(o->rc, SK_ERR_TIMEOUT, "%s: k = %ld: device %d waited out the timeout: %s", what, k, d, o->msg);
  }
}

/* Every allocation of create failing in turn on one device of R->ndev (call k on device
   k % ndev) until create needs fewer: that device returns SK_ERR_OUT_OF_MEMORY from create;
   create is collective, so the others fail in create or, where theirs completed, in the step
   that follows, none by the world's timeout. Nothing stays allocated on any device. Stops after
   every device created in a row; returns the k it stopped at. R: counting. */
static inline long sweep_create_failures(run *R, const char *what) {
  int N = R->ndev, created_in_a_row = 0;
  R->fail_phase = FAIL_IN_CREATE;
  long k = 1;
  for (; created_in_a_row < N; k++) {
    R->fail_rank = (int)(k % N), R->fail_at = k;
    run_world(R);
    const dev_out *f = &R->dev[R->fail_rank];
    if (f->created) {
      for (int d = 0; d < N; d++)
        cr_assert(R->dev[d].out_after == 0 && R->dev[d].blocks_after == 0, "%s: k = %ld, device %d: %zu bytes outstanding",
                  what, k, d, R->dev[d].out_after);
      created_in_a_row++;
      expect_all_ok(R, "after the sweep");
      continue;
    }
    created_in_a_row = 0;
    cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "%s: k = %ld, device %d: %s (%s)", what, k, R->fail_rank, sk_result_name(f->rc),
                 f->msg);
    cr_assert_str_eq(f->where, "create");
    expect_all_failed_clean(R, k, what);
    for (int d = 0; d < N; d++) cr_assert_eq(R->dev[d].steps, 0);
  }
  return k;
}

#endif /* RUNTIME_HARNESS_H */
