/* sk_runtime.h (AutoParallel's runtime) against the single-device trainer (sk_train.h): the
   project's bar for every distributed feature, N devices train exactly like one device.

   Every case compiles a network for N devices (sk_parallel.h), runs it on N device threads of
   the threads backend (sk_runtime_create / feed the GLOBAL batch / step), and trains the same
   network on one device with the trainer: same seed, optimizer, dtype and fed data. Then
   - the losses of every step, on every device, equal the trainer's;
   - every parameter, gathered after the steps (sk_runtime_gather), equals the trainer's;
   - sk_runtime_evaluate counts what sk_trainer_evaluate counts, and the gathered logits equal
     the trainer's; every device gathers the same bytes (the whole tensor on every device).
   The cases: 1. small graphs built here, each on 2, 4 and 8 devices (moves, a ReduceScatter
   output, a residual and a weight read twice, LayerNorm with a repeat axis, Gather with its
   table cut by rows or columns, BatchMatMul + Softmax, Dropout, Adam and Momentum state, f32);
   2. the shipped networks (examples/nets) on 8 devices; 3. evaluation and gather; 4. memory:
   a counting allocator against sk_runtime_memory, nothing left after destroy; 5. failure
   paths: bad arguments, a communicator of another size, f16 / bf16, refused feeds, every
   allocation of create failing in turn (1 device; one device of 4), a kernel or an allocation
   failing on one device, which must take every device down without a hang and leak nothing;
   6. the plan's knobs, each by its effect on the numbers or the traffic (sk_runtime_stats):
   comm_fusion's modes, gradients_mean and no_loss_repeated_mean (against the trainer given
   sk_parallel_grad_scales), the 16-bit wires of f16 / bf16 runs, local norms (dumped, printed,
   a file refused), transformer_opt's overlap (on a link model's virtual clock) and packed
   BackwardComm AllReduces, and create's allocation sweep with all of them on.

   TOLERANCE. f64: 1e-12 relative to 1 + |reference|. Both sides run the same kernels on the same
   values; only the order of summation differs (partial sums over shards, then a collective that
   reduces rank 0, 1, ..., N-1; the Mirror's division by the replication), each of which moves a
   few hundred O(1) terms by ~1e-16 each. SGD and Momentum pass that on unchanged (measured: at
   most 1.2e-15 over every f64 case here). Adam amplifies the absolute difference of a gradient
   near its eps (1e-8) by up to lr / (4 eps), ~1e5: the transformer's b0.w2 agrees to 2.3e-13
   after 3 Adam steps (1.2e-15 with SGD), still an order of magnitude inside the bound.
   f32: see F32_TOL below (measured, the worst case over the f32 tests here).

   Device threads never assert: each records its results and the first error (where, code,
   message) in its dev_out; the test's thread asserts after sk_world_run returns. Every threaded
   test has a timeout, and worlds a short one (a hang becomes an error, not a stuck suite). */
#define _POSIX_C_SOURCE 200809L /* mkstemp, close */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> /* clock_gettime, nanosleep */
#include <unistd.h>

#include "shardkit.h"

/* The TSan build (tests/tsan_shim) links neither jansson nor sk_json.h's implementation: the
   shipped networks are loaded only in the Criterion build. */
#ifndef SK_TSAN_SHIM_CRITERION_H
#define RT_WITH_JSON 1
#include "sk_json.h"
#include <criterion/redirect.h> /* print_local_norm's stdout: Criterion only */
#endif

#include "runtime_harness.h"

/* ---- 1. small graphs on 2, 4 and 8 devices -------------------------------------------------- */

static void check_moves(const run *R, int N) {
  cr_assert_gt(count_steps(&R->plan, SK_PSTEP_MOVE), 0, "%d devices: the strategies should force moves", N);
  cr_assert_gt(count_steps(&R->plan, SK_PSTEP_MOVE_BACK), 0);
  cr_assert_gt(count_steps(&R->plan, SK_PSTEP_MIRROR), 0);
}

Test(runtime, matmul_chain_with_moves, .timeout = RT_TIMEOUT) {
  each_device_count("MatMul chain", build_mlp, check_moves, sgd(0.5), 4);
}

static int rs_op;
static void build_rs(net *n, int N) { rs_op = build_reduce_scatter(n, N); }
static void check_rs(const run *R, int N) {
  cr_assert_eq(R->plan.ops[rs_op].plan.fwd.kind, SK_COLL_REDUCE_SCATTER, "%d devices: no ReduceScatter", N);
  cr_assert_eq(count_steps(&R->plan, SK_PSTEP_FORWARD_COMM), 1 + (N > 1)); /* + the loss's AllReduce */
  cr_assert_eq(count_steps(&R->plan, SK_PSTEP_UNDO_COMM), 1);
}

Test(runtime, matmul_reduce_scatter_output, .timeout = RT_TIMEOUT) {
  each_device_count("MatMul ReduceScatter", build_rs, check_rs, sgd(0.5), 4);
}

static void check_residual(const run *R, int N) {
  const sk_graph *g = &R->n->g;
  int s = -1;
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, "s")) s = o;
  cr_assert(s >= 0 && R->plan.ops[s].moved[1], "%d devices: w's second reader should read it moved", N);
}

Test(runtime, residual_and_weight_read_twice, .timeout = RT_TIMEOUT) {
  each_device_count("residual", build_residual, check_residual, sgd(0.5), 4);
}

static int ln_op;
static void build_ln(net *n, int N) { ln_op = build_layernorm(n, N); }
static void check_ln(const run *R, int N) {
  cr_assert_eq(R->plan.ops[ln_op].replication[1], 2, "%d devices: gamma's replication divisor", N);
  cr_assert_eq(R->plan.ops[ln_op].replication[2], 2, "%d devices: beta's replication divisor", N);
}

Test(runtime, layernorm_repeat_axis_divisor, .timeout = RT_TIMEOUT) {
  each_device_count("LayerNorm (N/2, 1)", build_ln, check_ln, sgd(0.5), 4);
}

static int gather_op;
static void build_gather_rows(net *n, int N) { gather_op = build_gather(n, N, true); }
static void build_gather_cols(net *n, int N) { gather_op = build_gather(n, N, false); }
static void check_gather_rows(const run *R, int N) {
  cr_assert_eq(R->plan.ops[gather_op].plan.fwd.kind, SK_COLL_REDUCE_SCATTER, "%d devices: row split without ReduceScatter", N);
}

Test(runtime, gather_row_split_table, .timeout = RT_TIMEOUT) {
  each_device_count("Gather, rows cut", build_gather_rows, check_gather_rows, sgd(0.5), 4);
}

Test(runtime, gather_column_split_table, .timeout = RT_TIMEOUT) {
  each_device_count("Gather, columns cut", build_gather_cols, NULL, sgd(0.5), 4);
}

static void build_gather_ba(net *n, int N) { gather_op = build_gather_batch_axis(n, N); }
static void check_gather_ba(const run *R, int N) {
  const sk_op_plan *p = &R->plan.ops[gather_op].plan;
  cr_assert_eq(p->fwd.kind, N >= 4 ? SK_COLL_ALLREDUCE : SK_COLL_REDUCE_SCATTER, "%d devices: forward %s", N,
               sk_coll_kind_name(p->fwd.kind));
  cr_assert_eq(sk_layout_split_count(&p->in[1], 0), N >= 4 ? N / 2 : 1, "%d devices: the tokens' rows", N);
  cr_assert_eq(sk_layout_split_count(&p->in[0], 0), 2, "%d devices: the table's rows", N);
}

Test(runtime, gather_shard_batch_and_axis, .timeout = RT_TIMEOUT) {
  each_device_count("Gather, table rows and token rows cut", build_gather_ba, check_gather_ba, sgd(0.5), 4);
}

Test(runtime, batchmatmul_softmax, .timeout = RT_TIMEOUT) {
  each_device_count("BatchMatMul + Softmax", build_bmm, NULL, sgd(0.5), 4);
}

Test(runtime, dropout_mask_by_global_index, .timeout = RT_TIMEOUT) {
  each_device_count("Dropout", build_dropout, NULL, sgd(0.5), 5);
}

Test(runtime, adam_state, .timeout = RT_TIMEOUT) { each_device_count("Adam", build_residual, NULL, adam(0.01), 5); }

Test(runtime, momentum_state, .timeout = RT_TIMEOUT) {
  each_device_count("Momentum", build_mlp, NULL, momentum(0.1, 0.9), 5);
}

/* f32: the same graphs, 10 steps on 8 devices, within F32_TOL (see its comment). */
Test(runtime, f32_within_measured_tolerance, .timeout = RT_TIMEOUT) {
  static const build_fn builds[] = {build_mlp, build_residual, build_ln, build_dropout};
  static const char *const names[] = {"MatMul chain f32", "residual f32", "LayerNorm f32", "Dropout f32"};
  errs worst = {0, 0, 0, -1};
  for (int b = 0; b < 4; b++) {
    static net n;
    static run R;
    builds[b](&n, 8);
    run_init(&R, &n, 8, SK_F32, b % 2 ? adam(0.01) : sgd(0.5), 10);
    run_world(&R);
    expect_all_ok(&R, names[b]);
    errs m = against_trainer(&R, F32_TOL, names[b]);
    worst.loss = fmax(worst.loss, m.loss), worst.param = fmax(worst.param, m.param);
    run_free(&R);
    sk_graph_free(&n.g);
  }
  cr_log_info("f32, 8 devices vs one, 10 steps: losses within %.3g, parameters within %.3g", worst.loss, worst.param);
}

/* ---- 2. the shipped networks on 8 devices ---------------------------------------------------- */

#ifdef RT_WITH_JSON
/* Loads examples/nets/<file> (the suites run from the project root); integer inputs draw from
   [0, range): the class count for labels, the vocabulary for tokens. */
static void load_net(net *n, const char *file, int64_t range) {
  char path[256];
  snprintf(path, sizeof path, "examples/nets/%s", file);
  sk_graph_init(&n->g), n->nin = 0;
  OK(sk_json_load_network(path, &n->g, E));
  for (int t = 0; t < n->g.ntensors; t++) {
    if (n->g.tensors[t].role != SK_TENSOR_INPUT) continue;
    cr_assert_lt(n->nin, MAXIN);
    sk_dtype dt = n->g.tensors[t].dtype;
    n->range[n->nin++] = dt == SK_I32 || dt == SK_I64 ? range : 0;
  }
}

/* optim NULL: the network's own optimizer. */
static void shipped(const char *file, int64_t range, const sk_optim_desc *optim) {
  static net n;
  static run R;
  load_net(&n, file, range);
  run_init(&R, &n, 8, SK_F64, optim ? *optim : n.g.optim, 3);
  cr_assert_gt(count_steps(&R.plan, SK_PSTEP_MIRROR) + count_steps(&R.plan, SK_PSTEP_MOVE), 0);
  run_world(&R);
  expect_all_ok(&R, file);
  errs m = against_trainer(&R, TOL64, file);
  cr_log_info("%s, 8 devices vs one, 3 steps f64: losses within %.3g, parameters within %.3g ('%s')", file, m.loss, m.param,
              m.worst >= 0 ? n.g.tensors[m.worst].name : "");
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(runtime, net_operator_parallel, .timeout = RT_TIMEOUT) { shipped("operator_parallel.json", 10, NULL); }
Test(runtime, net_recursive_programming, .timeout = RT_TIMEOUT) { shipped("recursive_programming.json", 0, NULL); }
Test(runtime, net_transformer, .timeout = RT_TIMEOUT) { shipped("transformer.json", 16, NULL); }
Test(runtime, net_attention, .timeout = RT_TIMEOUT) { shipped("attention.json", 0, NULL); }
Test(runtime, net_dense_mutmul, .timeout = RT_TIMEOUT) { shipped("dense_mutmul.json", 0, NULL); }

/* The transformer trains with Adam, whose first steps are nearly blind to the scale of a
   gradient (m / sqrt(v)): again with SGD, where a gradient off by any factor shows. */
Test(runtime, net_transformer_sgd, .timeout = RT_TIMEOUT) {
  sk_optim_desc o = sgd(0.1);
  shipped("transformer.json", 16, &o);
}
#endif

/* ---- 3. evaluation and gather ------------------------------------------------------------------ */

/* Before any step and after three: evaluate, then gather the logits, a model-parallel activation
   (relu1, cut (2, 1) with a repeat of 2 on 4 devices), an integer input (the labels). */
typedef struct eval_out {
  sk_result rc;
  char msg[SK_ERROR_MSG_MAX];
  int64_t correct[2], rows[2];
  double logits[2][16 * 4], act[16 * 16];
  int32_t labels[16];
} eval_out;

typedef struct eval_run {
  run *R;
  int act;
  eval_out dev[MAXDEV];
} eval_run;

static sk_result eval_device(sk_comm *comm, void *arg) {
  eval_run *V = (eval_run *)arg;
  run *R = V->R;
  eval_out *o = &V->dev[sk_comm_rank(comm)];
  const sk_graph *g = &R->n->g;
  sk_error e;
  memset(&e, 0, sizeof e);
  sk_runtime *rt = NULL;
  sk_result r = sk_runtime_create(comm, &R->plan, &R->desc, &rt, &e);
  for (int i = 0; !r && i < R->n->nin; i++) r = sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[0][i], (size_t)R->in_n[i], &e);
  if (!r) r = sk_runtime_evaluate(rt, &o->correct[0], &o->rows[0], &e);
  if (!r) r = sk_runtime_gather(rt, g->logits, o->logits[0], &e);
  if (!r) r = sk_runtime_gather(rt, V->act, o->act, &e);
  if (!r) r = sk_runtime_gather(rt, R->in_t[1], o->labels, &e);
  for (int s = 0; !r && s < R->nsteps; s++) {
    for (int i = 0; !r && i < R->n->nin; i++) r = sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[s][i], (size_t)R->in_n[i], &e);
    if (!r) r = sk_runtime_step(rt, NULL, &e);
  }
  if (!r) r = sk_runtime_evaluate(rt, &o->correct[1], &o->rows[1], &e);
  if (!r) r = sk_runtime_gather(rt, g->logits, o->logits[1], &e);
  if (!r && sk_runtime_steps(rt) != R->nsteps) r = SK_ERR_INTERNAL, snprintf(e.msg, sizeof e.msg, "sk_runtime_steps");
  sk_runtime_destroy(rt);
  o->rc = r;
  snprintf(o->msg, sizeof o->msg, "%s", e.msg);
  return r;
}

Test(runtime, evaluate_and_gather_match_trainer, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  static eval_run V;
  build_mlp(&n, 4);
  run_init(&R, &n, 4, SK_F64, sgd(0.5), 3);
  memset(&V, 0, sizeof V);
  V.R = &R, V.act = sk_graph_find(&n.g, "relu1");
  cr_assert_eq(R.in_dt[1], SK_I32);
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = 4, wd.backend = sk_threads_backend(), wd.timeout_ms = WORLD_TIMEOUT_MS;
  sk_world *w = NULL;
  OK(sk_world_create(&wd, &w, E));
  sk_result wr = sk_world_run(w, eval_device, &V, NULL);
  for (int d = 0; d < 4; d++) cr_assert_eq(V.dev[d].rc, SK_OK, "device %d: %s", d, V.dev[d].msg);
  cr_assert_eq(wr, SK_OK);
  sk_world_destroy(w, NULL);

  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = SK_F64, td.optim = R.plan.desc.optim, td.seed = R.plan.desc.seed;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&n.g, &td, &t, E));
  for (int i = 0; i < n.nin; i++) OK(sk_trainer_feed(t, R.in_t[i], R.in_dt[i], R.data[0][i], (size_t)R.in_n[i], E));
  int64_t correct[2], rows[2];
  OK(sk_trainer_evaluate(t, &correct[0], &rows[0], E));
  const double *logits = (const double *)sk_trainer_values(t, n.g.logits), *act = (const double *)sk_trainer_values(t, V.act);
  for (int d = 0; d < 4; d++) {
    cr_assert_eq(V.dev[d].correct[0], correct[0], "device %d: %lld correct before training, one device %lld", d,
                 (long long)V.dev[d].correct[0], (long long)correct[0]);
    cr_assert_eq(V.dev[d].rows[0], rows[0]);
    cr_assert(!memcmp(V.dev[d].labels, R.data[0][1], sizeof V.dev[d].labels), "device %d: gathered labels differ", d);
    for (int j = 0; j < 16 * 4; j++)
      cr_assert(rel(V.dev[d].logits[0][j], logits[j]) <= TOL64, "device %d: logits[%d] %.17g, one device %.17g", d, j,
                V.dev[d].logits[0][j], logits[j]);
    for (int j = 0; j < 16 * 16; j++)
      cr_assert(rel(V.dev[d].act[j], act[j]) <= TOL64, "device %d: relu1[%d] %.17g, one device %.17g", d, j, V.dev[d].act[j],
                act[j]);
    cr_assert(!memcmp(V.dev[d].act, V.dev[0].act, sizeof V.dev[d].act), "device %d gathered another relu1", d);
  }
  for (int s = 0; s < R.nsteps; s++) {
    for (int i = 0; i < n.nin; i++) OK(sk_trainer_feed(t, R.in_t[i], R.in_dt[i], R.data[s][i], (size_t)R.in_n[i], E));
    OK(sk_trainer_step(t, NULL, E));
  }
  OK(sk_trainer_evaluate(t, &correct[1], &rows[1], E));
  for (int d = 0; d < 4; d++) {
    cr_assert_eq(V.dev[d].correct[1], correct[1], "device %d: %lld correct after training, one device %lld", d,
                 (long long)V.dev[d].correct[1], (long long)correct[1]);
    cr_assert_eq(V.dev[d].rows[1], 16);
    for (int j = 0; j < 16 * 4; j++) cr_assert(rel(V.dev[d].logits[1][j], logits[j]) <= TOL64);
  }
  sk_trainer_destroy(t);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* ---- 4. memory ------------------------------------------------------------------------------- */

/* The runtime asks desc.alloc for every block as n = (size rounded up to 64) + 64 (its header in
   front), and sk_runtime_memory counts `size`, what the runtime or a module asked it for. So with
   B blocks and A bytes outstanding at the allocator (which sees only n), each block adds between
   n - 127 and n - 64 to the five fields: A - 127 B <= sum of the fields <= A - 64 B, the right
   side exact when every size is a multiple of 64. Parameters and optimizer state are exact: the
   parameters' slices, and Adam's two states of each. */
Test(runtime, memory_counts_every_block, .timeout = RT_TIMEOUT) {
  static const int counts[2] = {1, 4};
  for (int c = 0; c < 2; c++) {
    static net n;
    static run R;
    int N = counts[c];
    build_mlp(&n, 4);
    run_init(&R, &n, N, SK_F64, adam(0.01), 3);
    R.counting = true;
    run_world(&R);
    expect_all_ok(&R, "memory");
    against_trainer(&R, TOL64, "memory");
    uint64_t params = 0, values = 0;
    for (int t = 0; t < n.g.ntensors; t++) {
      sk_dtype dt = n.g.tensors[t].dtype;
      uint64_t b = (uint64_t)sk_parallel_slice_count(&R.plan, t) * (dt == SK_I32 || dt == SK_I64 ? sk_dtype_size(dt) : 8);
      if (n.g.tensors[t].role == SK_TENSOR_PARAM) params += b;
      else values += b;
    }
    for (int d = 0; d < N; d++) {
      const dev_out *o = &R.dev[d];
      const sk_runtime_memory *m = &o->mem_created;
      cr_assert_eq(m->parameters, params, "%d devices, device %d: parameters %llu bytes, slices %llu", N, d,
                   (unsigned long long)m->parameters, (unsigned long long)params);
      cr_assert_eq(m->optimizer_state, 2 * params, "Adam keeps two states of every parameter slice");
      cr_assert_geq(m->activations, values);
      cr_assert_gt(m->gradients, 0);
      if (N > 1) cr_assert_gt(m->host, 0, "%d devices: the moves' executors and the Mirrors' scheduler hold bookkeeping", N);
      /* the counter's sizes are the runtime's requests: rounded to 64, plus the 64-byte header */
      uint64_t A = o->out_created, B = (uint64_t)o->blocks_created, s = mem_sum(m);
      cr_assert_eq(A % 64, 0, "every block's size is a multiple of 64");
      cr_assert(s <= A - 64 * B && s + 127 * B >= A, "device %d: fields sum to %llu, %llu bytes in %llu blocks", d,
                (unsigned long long)s, (unsigned long long)A, (unsigned long long)B);
      /* steps, feeds, evaluation and gathers free what they take */
      const sk_runtime_memory *e = &o->mem_end;
      cr_assert(e->parameters == m->parameters && e->gradients == m->gradients && e->optimizer_state == m->optimizer_state &&
                    e->activations == m->activations && e->communication == m->communication && e->host == m->host,
                "device %d: the counts moved during training", d);
      /* at create the peaks are the counts; a step's temporaries (feeds, gathers) raise them */
      cr_assert_eq(m->peak, s - m->host, "device %d: peak at create %llu, held %llu (host %llu kept out)", d,
                   (unsigned long long)m->peak, (unsigned long long)s, (unsigned long long)m->host);
      cr_assert_geq(e->peak, m->peak);
      cr_assert_geq(e->peak_parameters, e->parameters);
      cr_assert_eq(o->out_end, A);
      cr_assert_eq(o->blocks_end, (long)B);
      cr_assert_eq(o->out_after, 0, "device %d: %zu bytes outstanding after destroy", d, o->out_after);
      cr_assert_eq(o->blocks_after, 0);
    }
    run_free(&R);
    sk_graph_free(&n.g);
  }
}

/* ---- 5. failure paths ------------------------------------------------------------------------ */

/* Calls a device thread makes and records (name, result, message) for the test's thread. */
#define MAXCALLS 40
typedef struct call_log {
  int n;
  const char *name[MAXCALLS];
  sk_result rc[MAXCALLS];
  char msg[MAXCALLS][SK_ERROR_MSG_MAX];
  int bad;           /* a non-call check that failed (its text in note) */
  char note[256];
} call_log;

#define TRY(log, call)                                                     \
  do {                                                                     \
    sk_error e_;                                                           \
    memset(&e_, 0, sizeof e_);                                             \
    if ((log)->n < MAXCALLS) {                                             \
      (log)->name[(log)->n] = #call;                                       \
      (log)->rc[(log)->n] = (call);                                        \
      snprintf((log)->msg[(log)->n], SK_ERROR_MSG_MAX, "%s", e_.msg);      \
      (log)->n++;                                                          \
    }                                                                      \
  } while (0)
#define CHECK(log, cond)                                                   \
  do {                                                                     \
    if (!(cond) && !(log)->bad++) snprintf((log)->note, sizeof (log)->note, "%s", #cond); \
  } while (0)

/* Asserts that the i-th recorded call returned SK_ERR_INVALID_ARGUMENT with `word` in its message. */
static void expect_refused(const call_log *L, int i, const char *word) {
  cr_assert_lt(i, L->n);
  cr_assert_eq(L->rc[i], SK_ERR_INVALID_ARGUMENT, "%s returned %s (%s)", L->name[i], sk_result_name(L->rc[i]), L->msg[i]);
  cr_assert(strstr(L->msg[i], word) != NULL, "%s: message '%s' does not hold '%s'", L->name[i], L->msg[i], word);
}

typedef struct args_run {
  const sk_parallel_plan *plan, *plan_no_eval;
  run *R;
  call_log log[MAXDEV];
} args_run;

static sk_result args_device(sk_comm *comm, void *arg) {
  args_run *A = (args_run *)arg;
  call_log *L = &A->log[sk_comm_rank(comm)];
  const sk_graph *g = A->plan->graph;
  sk_runtime_desc d;
  memset(&d, 0, sizeof d);
  sk_runtime *none = (sk_runtime *)&d; /* must come back NULL */
  sk_parallel_plan empty;
  memset(&empty, 0, sizeof empty);
  TRY(L, sk_runtime_create(NULL, A->plan, &d, &none, &e_));                    /* 0 */
  CHECK(L, none == NULL);
  TRY(L, sk_runtime_create(comm, NULL, &d, &none, &e_));                       /* 1 */
  TRY(L, sk_runtime_create(comm, &empty, &d, &none, &e_));                     /* 2 */
  TRY(L, sk_runtime_create(comm, A->plan, &d, NULL, &e_));                     /* 3 */
  d.alloc.alloc = count_alloc;
  TRY(L, sk_runtime_create(comm, A->plan, &d, &none, &e_));                    /* 4 */
  CHECK(L, none == NULL);
  sk_runtime *rt = NULL, *rt2 = NULL;
  TRY(L, sk_runtime_create(comm, A->plan, NULL, &rt, &e_));                    /* 5: NULL desc: defaults */
  if (!rt) return SK_ERR_INTERNAL;
  double x[16 * 16] = {0}, loss = 0;
  int64_t c = 0, rows = 0;
  int xt = A->R->in_t[0];
  TRY(L, sk_runtime_feed(NULL, xt, SK_F64, x, 256, &e_));                      /* 6 */
  TRY(L, sk_runtime_feed(rt, xt, SK_F64, NULL, 256, &e_));                     /* 7 */
  TRY(L, sk_runtime_step(NULL, &loss, &e_));                                   /* 8 */
  TRY(L, sk_runtime_evaluate(NULL, &c, &rows, &e_));                           /* 9 */
  TRY(L, sk_runtime_evaluate(rt, NULL, &rows, &e_));                           /* 10 */
  TRY(L, sk_runtime_evaluate(rt, &c, NULL, &e_));                              /* 11 */
  TRY(L, sk_runtime_gather(NULL, xt, x, &e_));                                 /* 12 */
  TRY(L, sk_runtime_gather(rt, xt, NULL, &e_));                                /* 13 */
  TRY(L, sk_runtime_gather(rt, -1, x, &e_));                                   /* 14 */
  TRY(L, sk_runtime_gather(rt, g->ntensors, x, &e_));                          /* 15 */
  TRY(L, sk_runtime_create(comm, A->plan_no_eval, NULL, &rt2, &e_));           /* 16 */
  if (rt2) TRY(L, sk_runtime_evaluate(rt2, &c, &rows, &e_));                   /* 17 */
  sk_runtime_memory m;
  memset(&m, 0xFF, sizeof m);
  sk_runtime_memory_get(NULL, &m);
  CHECK(L, mem_sum(&m) == 0);
  sk_runtime_memory_get(rt, NULL);
  CHECK(L, sk_runtime_steps(NULL) == 0);
  CHECK(L, sk_runtime_steps(rt) == 0);
  sk_runtime_destroy(NULL);
  sk_runtime_destroy(rt2);
  sk_runtime_destroy(rt);
  return SK_OK;
}

Test(runtime, null_and_bad_arguments, .timeout = RT_TIMEOUT) {
  static net n, nb;
  static run R, RB;
  static args_run A;
  build_mlp(&n, 2), build_bmm(&nb, 2);
  run_init(&R, &n, 1, SK_F32, sgd(0.1), 1);
  run_init(&RB, &nb, 1, SK_F32, sgd(0.1), 1);
  memset(&A, 0, sizeof A);
  A.plan = &R.plan, A.plan_no_eval = &RB.plan, A.R = &R;
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = 1, wd.backend = sk_threads_backend(), wd.timeout_ms = WORLD_TIMEOUT_MS;
  sk_world *w = NULL;
  OK(sk_world_create(&wd, &w, E));
  cr_assert_eq(sk_world_run(w, args_device, &A, NULL), SK_OK);
  sk_world_destroy(w, NULL);
  const call_log *L = &A.log[0];
  cr_assert_eq(L->bad, 0, "%s", L->note);
  cr_assert_eq(L->n, 18);
  for (int i = 0; i < 5; i++) expect_refused(L, i, "runtime");
  expect_refused(L, 2, "NULL");
  expect_refused(L, 3, "output");
  expect_refused(L, 4, "alloc and free");
  cr_assert_eq(L->rc[5], SK_OK, "a NULL desc takes the defaults: %s", L->msg[5]);
  for (int i = 6; i < 16; i++) expect_refused(L, i, "runtime");
  expect_refused(L, 14, "tensor -1");
  cr_assert_eq(L->rc[16], SK_OK, "%s", L->msg[16]);
  expect_refused(L, 17, "no eval");
  run_free(&R), run_free(&RB);
  sk_graph_free(&n.g), sk_graph_free(&nb.g);
}

/* A program for 4 devices on a world of 2; an integer dtype: every device refuses at create (a
   device whose thread joins after the first refusal aborted the world does not run at all). */
static void expect_create_refused(run *R, const char *word, const char *word2) {
  run_world(R);
  cr_assert_eq(R->world_rc, SK_ERR_INVALID_ARGUMENT, "world: %s (%s)", sk_result_name(R->world_rc), R->world_msg);
  int ran = 0;
  for (int d = 0; d < R->ndev; d++) {
    const dev_out *o = &R->dev[d];
    if (!o->ran) continue;
    ran++;
    cr_assert_eq(o->rc, SK_ERR_INVALID_ARGUMENT, "device %d: %s (%s)", d, sk_result_name(o->rc), o->msg);
    cr_assert_str_eq(o->where, "create");
    cr_assert(strstr(o->msg, word) && strstr(o->msg, word2), "device %d: '%s' should name '%s' and '%s'", d, o->msg, word, word2);
    cr_assert_eq(o->out_after, 0);
  }
  cr_assert_gt(ran, 0);
}

Test(runtime, communicator_size_differs_from_plan, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  run_init(&R, &n, 4, SK_F64, sgd(0.1), 1);
  R.ndev = 2, R.counting = true;
  expect_create_refused(&R, "4 devices", "has 2");
  R.ndev = 8;
  expect_create_refused(&R, "4 devices", "has 8");
  run_free(&R);
  sk_graph_free(&n.g);
}

/* f16 and bf16 against the trainer within HALF_TOL (runtime_harness.h). With fp32_communication
   every collective sums in f32 as the trainer does: measured, the same bits as the trainer on
   this graph. By default the forward and BackwardComm AllReduces travel in 16 bits (MindSpore's
   default): measured, losses within 4e-4 (f16) and 0 (bf16), parameters within 3e-3. */
Test(runtime, half_precision_like_the_trainer, .timeout = RT_TIMEOUT) {
  static const sk_dtype dts[] = {SK_F16, SK_BF16};
  for (int i = 0; i < 4; i++) {
    static net n;
    static run R;
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.fp32_communication = i >= 2;
    build_mlp(&n, 8);
    run_init_knobs(&R, &n, 8, dts[i % 2], sgd(0.5), 5, &pd);
    run_world(&R);
    expect_all_ok(&R, sk_dtype_name(dts[i % 2]));
    errs m = against_trainer(&R, HALF_TOL, sk_dtype_name(dts[i % 2]));
    cr_log_info("%s%s, 8 devices vs one, 5 steps: losses within %.3g, parameters within %.3g", sk_dtype_name(dts[i % 2]),
                pd.fp32_communication ? " fp32_communication" : "", m.loss, m.param);
    if (pd.fp32_communication) cr_assert(m.loss == 0 && m.param == 0, "f32 collectives should give the trainer's bits");
    run_free(&R);
    sk_graph_free(&n.g);
  }
}

/* Other dtypes are refused at create, naming the dtype. */
/* The run's dtype is the configuration's: the compiler refuses an integer one by name. */
Test(runtime, integer_dtype_refused, .timeout = RT_TIMEOUT) {
  static net n;
  build_mlp(&n, 2);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = 2, pd.dtype = SK_I32;
  sk_parallel_plan plan;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_parallel_compile(&n.g, &pd, &plan, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "dtype i32") && strstr(e.msg, "f32, f64, f16 or bf16"), "message: %s", e.msg);
  sk_graph_free(&n.g);
}

/* Refused feeds change nothing: the devices then feed correctly and train like one device. */
static sk_result feed_device(sk_comm *comm, void *arg) {
  args_run *A = (args_run *)arg;
  run *R = A->R;
  call_log *L = &A->log[sk_comm_rank(comm)];
  const sk_graph *g = &R->n->g;
  int x = R->in_t[0], y = R->in_t[1], w1 = sk_graph_find(g, "w1");
  sk_runtime *rt = NULL;
  TRY(L, sk_runtime_create(comm, &R->plan, &R->desc, &rt, &e_));             /* 0 */
  if (!rt) return SK_ERR_INTERNAL;
  int32_t ints[256] = {0};
  TRY(L, sk_runtime_feed(rt, w1, SK_F64, R->data[0][0], 256, &e_));          /* 1: a parameter */
  TRY(L, sk_runtime_feed(rt, sk_graph_find(g, "fc1"), SK_F64, R->data[0][0], 256, &e_)); /* 2: a value */
  TRY(L, sk_runtime_feed(rt, -1, SK_F64, R->data[0][0], 256, &e_));          /* 3 */
  TRY(L, sk_runtime_feed(rt, g->ntensors, SK_F64, R->data[0][0], 256, &e_)); /* 4 */
  TRY(L, sk_runtime_feed(rt, x, SK_F64, R->data[0][0], 255, &e_));           /* 5: one element short */
  TRY(L, sk_runtime_feed(rt, y, SK_I32, R->data[0][1], 32, &e_));            /* 6: too many */
  TRY(L, sk_runtime_feed(rt, y, SK_F64, R->data[0][0], 16, &e_));            /* 7: floats into labels */
  TRY(L, sk_runtime_feed(rt, x, SK_I32, ints, 256, &e_));                    /* 8: integers into floats */
  for (int s = 0; s < R->nsteps; s++) {
    TRY(L, sk_runtime_feed(rt, x, SK_F64, R->data[s][0], 256, &e_));
    TRY(L, sk_runtime_feed(rt, y, SK_I32, R->data[s][1], 16, &e_));
    TRY(L, sk_runtime_step(rt, &R->dev[sk_comm_rank(comm)].loss[s], &e_));
  }
  TRY(L, sk_runtime_gather(rt, w1, R->dev[sk_comm_rank(comm)].params + R->param_off[w1], &e_));
  sk_runtime_destroy(rt);
  return SK_OK;
}

Test(runtime, feed_refused_names_the_tensor, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  static args_run A;
  build_mlp(&n, 2);
  run_init(&R, &n, 2, SK_F64, sgd(0.5), 2);
  memset(&A, 0, sizeof A);
  A.R = &R;
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = 2, wd.backend = sk_threads_backend(), wd.timeout_ms = WORLD_TIMEOUT_MS;
  sk_world *w = NULL;
  OK(sk_world_create(&wd, &w, E));
  cr_assert_eq(sk_world_run(w, feed_device, &A, NULL), SK_OK);
  sk_world_destroy(w, NULL);
  for (int d = 0; d < 2; d++) {
    const call_log *L = &A.log[d];
    cr_assert_eq(L->n, 9 + 3 * R.nsteps + 1);
    cr_assert_eq(L->rc[0], SK_OK, "%s", L->msg[0]);
    expect_refused(L, 1, "'w1'"), expect_refused(L, 1, "not an input");
    expect_refused(L, 2, "'fc1'"), expect_refused(L, 2, "not an input");
    expect_refused(L, 3, "tensor -1");
    expect_refused(L, 4, "not an input");
    expect_refused(L, 5, "'x'"), expect_refused(L, 5, "255");
    expect_refused(L, 6, "'y'"), expect_refused(L, 6, "32");
    expect_refused(L, 7, "'y'");
    expect_refused(L, 8, "'x'");
    for (int i = 9; i < L->n; i++) cr_assert_eq(L->rc[i], SK_OK, "device %d: %s: %s", d, L->name[i], L->msg[i]);
  }
  /* the refused feeds left nothing behind: the losses are one device's */
  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = SK_F64, td.optim = R.plan.desc.optim, td.seed = R.plan.desc.seed;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(&n.g, &td, &t, E));
  for (int s = 0; s < R.nsteps; s++) {
    for (int i = 0; i < n.nin; i++) OK(sk_trainer_feed(t, R.in_t[i], R.in_dt[i], R.data[s][i], (size_t)R.in_n[i], E));
    double ref;
    OK(sk_trainer_step(t, &ref, E));
    for (int d = 0; d < 2; d++) cr_assert(rel(R.dev[d].loss[s], ref) <= TOL64, "step %d: %.17g vs %.17g", s, R.dev[d].loss[s], ref);
  }
  sk_trainer_destroy(t);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* Every allocation of create failing in turn, on one device: SK_ERR_OUT_OF_MEMORY, nothing
   outstanding, until create needs fewer allocations than k. */
Test(runtime, create_allocation_failures_one_device, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  run_init(&R, &n, 1, SK_F64, adam(0.01), 1);
  R.counting = true, R.create_only = true, R.fail_rank = 0;
  long k = 1;
  for (;; k++) {
    R.fail_at = k;
    run_world(&R);
    const dev_out *o = &R.dev[0];
    cr_assert_eq(o->out_after, 0, "k = %ld: %zu bytes outstanding", k, o->out_after);
    cr_assert_eq(o->blocks_after, 0);
    if (o->created) break;
    cr_assert_eq(o->rc, SK_ERR_OUT_OF_MEMORY, "k = %ld: %s (%s)", k, sk_result_name(o->rc), o->msg);
    cr_assert_eq(o->cnt.refused, 1);
  }
  cr_assert_gt(k, 20, "create took only %ld allocations", k - 1);
  cr_log_info("create on 1 device: %ld allocations, each refused in turn", k - 1);
  cr_assert_eq(R.dev[0].cnt.calls, k - 1);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* The same on 4 devices, the allocator failing on one of them (each in turn): that device
   returns SK_ERR_OUT_OF_MEMORY from create; create is collective, so the others fail in create
   or, where theirs completed, in the step that follows, none by the world's timeout. Nothing
   stays allocated on any device. */
Test(runtime, create_allocation_failures_one_of_four, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  run_init(&R, &n, 4, SK_F64, sgd(0.1), 1);
  R.counting = true;
  R.evaluate = false;
  long k = sweep_create_failures(&R, "create");
  cr_assert_gt(k, 40);
  cr_log_info("create on 4 devices: call k of device k %% 4 refused, k = 1..%ld", k - 5);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* A label outside [0, C) in device 0's rows at step 1: device 0's loss kernel refuses; every
   device's step returns an error, and the world ends without waiting for its timeout. */
Test(runtime, kernel_failure_takes_the_world_down, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  run_init(&R, &n, 4, SK_F64, sgd(0.1), 3);
  R.counting = true;
  ((int32_t *)R.data[1][1])[1] = 99;
  run_world(&R);
  cr_assert_neq(R.world_rc, SK_OK);
  const dev_out *o = &R.dev[0];
  cr_assert_eq(o->rc, SK_ERR_INVALID_ARGUMENT, "%s (%s)", sk_result_name(o->rc), o->msg);
  cr_assert(strstr(o->msg, "(Forward) operator 'loss' tensor 'loss'") && strstr(o->msg, "label 99"), "'%s'", o->msg);
  for (int d = 0; d < 4; d++) {
    o = &R.dev[d];
    cr_assert(o->ran, "device %d did not run", d);
    cr_assert_str_eq(o->where, "step", "device %d failed in %s: %s", d, o->where, o->msg);
    cr_assert_eq(o->steps, 1);
    cr_assert_neq(o->rc, SK_OK);
    cr_assert_neq(o->rc, SK_ERR_TIMEOUT, "device %d: %s", d, o->msg);
    cr_assert_eq(o->out_after, 0);
  }
  run_free(&R);
  sk_graph_free(&n.g);
}

/* The allocator failing on one device after create: in its first feed, or in evaluate. */
Test(runtime, allocation_failure_after_create_takes_the_world_down, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  run_init(&R, &n, 4, SK_F64, sgd(0.1), 2);
  R.counting = true, R.fail_rank = 2;
  for (int phase = FAIL_FROM_FEED; phase <= FAIL_FROM_EVALUATE; phase++) {
    R.fail_phase = phase;
    run_world(&R);
    cr_assert_neq(R.world_rc, SK_OK);
    const dev_out *f = &R.dev[2];
    cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "phase %d: %s (%s)", phase, sk_result_name(f->rc), f->msg);
    cr_assert_str_eq(f->where, phase == FAIL_FROM_FEED ? "feed" : "evaluate");
    cr_assert(strstr(f->msg, phase == FAIL_FROM_FEED ? "feed 'x'" : "evaluate"), "'%s'", f->msg);
    for (int d = 0; d < 4; d++) {
      const dev_out *o = &R.dev[d];
      cr_assert(o->ran, "phase %d: device %d did not run", phase, d);
      cr_assert_neq(o->rc, SK_OK, "phase %d: device %d", phase, d);
      cr_assert_neq(o->rc, SK_ERR_TIMEOUT, "phase %d: device %d: %s", phase, d, o->msg);
      cr_assert_eq(o->steps, phase == FAIL_FROM_FEED ? 0 : R.nsteps);
      cr_assert_eq(o->out_after, 0, "phase %d: device %d: %zu bytes outstanding", phase, d, o->out_after);
    }
  }
  run_free(&R);
  sk_graph_free(&n.g);
}

/* A device whose step fails and which then lingers (as a caller that logs, cleans up or retries
   before returning would): its peers, waiting for it in the step's collectives or its closing
   clock alignment, return SK_ERR_ABORTED at once, not when it returns nor at the world's
   timeout. Each device records its step's code and wall time; the test's thread asserts. */
#define LINGER_MS 3000
static sk_result step_ms_rc[MAXDEV];
static double step_ms[MAXDEV];

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static sk_result failing_then_lingering(sk_comm *comm, void *arg) {
  run *R = (run *)arg;
  int me = sk_comm_rank(comm);
  dev_out *o = &R->dev[me];
  sk_error e;
  memset(&e, 0, sizeof e);
  o->ran = true;
  sk_runtime *rt = NULL;
  sk_result r = note(o, "create", sk_runtime_create(comm, &R->plan, &R->desc, &rt, &e), &e);
  for (int i = 0; !r && i < R->n->nin; i++)
    r = note(o, "feed", sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[0][i], (size_t)R->in_n[i], &e), &e);
  double t0 = mono_ms();
  step_ms_rc[me] = r ? r : sk_runtime_step(rt, &o->loss[0], &e);
  step_ms[me] = mono_ms() - t0;
  if (!r) r = note(o, "step", step_ms_rc[me], &e);
  if (r && me == 0) { /* the failing device stays away */
    struct timespec nap = {LINGER_MS / 1000, 0};
    while (nanosleep(&nap, &nap) != 0) continue;
  }
  sk_runtime_destroy(rt);
  return r;
}

Test(runtime, failed_step_releases_its_peers_at_once, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 4);
  run_init(&R, &n, 4, SK_F64, sgd(0.1), 1);
  R.link.alpha_us = 5, R.link.gbps = 25; /* virtual clocks: every step aligns them twice */
  ((int32_t *)R.data[0][1])[1] = 99;    /* device 0's loss kernel refuses its label */
  run_world_with(&R, failing_then_lingering);
  cr_assert_eq(step_ms_rc[0], SK_ERR_INVALID_ARGUMENT, "device 0's step: %s (%s)", sk_result_name(step_ms_rc[0]), R.dev[0].msg);
  cr_assert_neq(R.world_rc, SK_OK);
  for (int d = 1; d < 4; d++) {
    cr_assert_eq(step_ms_rc[d], SK_ERR_ABORTED, "device %d's step: %s (%s)", d, sk_result_name(step_ms_rc[d]), R.dev[d].msg);
    cr_assert_lt(step_ms[d], LINGER_MS / 3.0, "device %d waited %.0f ms for the failed device (it lingered %d ms)", d, step_ms[d],
                 LINGER_MS);
  }
  cr_assert(strstr(R.world_msg, "label 99"), "the world's message names the cause: '%s'", R.world_msg);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* ---- 6. the parallel knobs (sk_autoparallel) at run time ------------------------------------- */

static bool same_losses(const run *A, const run *B) {
  return A->nsteps == B->nsteps && !memcmp(A->dev[0].loss, B->dev[0].loss, (size_t)A->nsteps * sizeof(double));
}

static bool same_traffic(const sk_runtime_stats *a, const sk_runtime_stats *b) {
  if (a->steps != b->steps || a->nrows != b->nrows) return false;
  for (int i = 0; i < a->nrows; i++)
    if (a->rows[i].kind != b->rows[i].kind || a->rows[i].group != b->rows[i].group || a->rows[i].calls != b->rows[i].calls ||
        a->rows[i].bytes != b->rows[i].bytes)
      return false;
  return true;
}

/* comm_fusion drives the scheduler: every Mirror alone (none, or openstate closed), one bucket
   (auto), or split where the index list says; the losses never change, the AllReduce count does
   (a bucket is one call). */
Test(runtime, comm_fusion_from_the_plan, .timeout = RT_TIMEOUT) {
  static net n;
  static run R[5];
  static const int split[1] = {0}; /* Mirrors in backward order: [u], [w2, w1] */
  build_dp(&n, 4);
  sk_autoparallel pd[5];
  memset(pd, 0, sizeof pd);
  pd[0].comm_fusion.allreduce.mode = SK_FUSION_NONE;
  pd[1].comm_fusion.allreduce.mode = SK_FUSION_AUTO;
  pd[2].comm_fusion.allreduce.mode = SK_FUSION_INDEX, pd[2].comm_fusion.allreduce.indices = split;
  pd[2].comm_fusion.allreduce.nindices = 1;
  pd[3].comm_fusion.closed = true; /* auto, but closed */
  pd[4].comm_fusion.allreduce.mode = SK_FUSION_SIZE, pd[4].comm_fusion.allreduce.threshold_mb = 1;
  static const char *const names[5] = {"none", "auto", "index {0}", "closed", "size 1 MB"};
  static const int mirrors_per_step[5] = {3, 1, 2, 3, 1};
  for (int i = 0; i < 5; i++) {
    run_knobs(&R[i], &n, 4, SK_F64, sgd(0.5), 3, &pd[i], names[i]);
    cr_assert_eq(count_steps(&R[i].plan, SK_PSTEP_MIRROR), 3);
  }
  against_trainer(&R[1], TOL64, "comm_fusion auto");
  uint64_t none = coll_calls(&R[0].dev[0].stats, SK_COLL_ALLREDUCE);
  for (int i = 0; i < 5; i++) {
    for (int d = 0; d < 4; d++) {
      uint64_t calls = coll_calls(&R[i].dev[d].stats, SK_COLL_ALLREDUCE);
      cr_assert_eq(calls, none - (uint64_t)(3 - mirrors_per_step[i]) * 3, "%s, device %d: %llu AllReduce calls, none: %llu",
                   names[i], d, (unsigned long long)calls, (unsigned long long)none);
      /* the same data crosses the wire, only in fewer calls */
      cr_assert_eq(coll_bytes(&R[i].dev[d].stats, SK_COLL_ALLREDUCE), coll_bytes(&R[0].dev[d].stats, SK_COLL_ALLREDUCE));
    }
    for (int s = 0; s < 3; s++)
      cr_assert(rel(R[i].dev[0].loss[s], R[0].dev[0].loss[s]) <= TOL64, "%s: step %d: loss %.17g, unfused %.17g", names[i], s,
                R[i].dev[0].loss[s], R[0].dev[0].loss[s]);
  }
  cr_log_info("comm_fusion: %llu AllReduce calls in 3 steps unfused, %llu auto; losses bit-identical: %s",
              (unsigned long long)none, (unsigned long long)coll_calls(&R[1].dev[0].stats, SK_COLL_ALLREDUCE),
              same_losses(&R[0], &R[1]) && same_losses(&R[0], &R[2]) ? "yes" : "no");
  for (int i = 0; i < 5; i++) run_free(&R[i]);
  sk_graph_free(&n.g);
}

/* gradients_mean (each Mirror / its group size) and no_loss_repeated_mean (the loss's gradient
   seeded with its repeat count, here every device) change the training, and N devices still
   train like one device given sk_parallel_grad_scales' factors. TOL64 as everywhere: the
   factors are powers of two (4 devices, groups of 2 and 4), exact in binary floating point, so
   only the order of summation differs, as in the default runs. */
Test(runtime, gradient_factors_like_the_trainer, .timeout = RT_TIMEOUT) {
  static const build_fn builds[2] = {build_dp, build_ln};
  static const char *const bnames[2] = {"data parallel", "LayerNorm (N/2, 1)"};
  for (int b = 0; b < 2; b++) {
    static net n;
    static run D, K;
    builds[b](&n, 4);
    run_knobs(&D, &n, 4, SK_F64, sgd(0.1), 3, NULL, bnames[b]);
    for (int knob = 0; knob < 3; knob++) {
      sk_autoparallel pd;
      memset(&pd, 0, sizeof pd);
      pd.gradients_mean = knob != 1, pd.no_loss_repeated_mean = knob != 0;
      run_knobs(&K, &n, 4, SK_F64, sgd(0.1), 3, &pd, bnames[b]);
      cr_assert_eq(K.plan.loss_grad_scale, knob ? 4.0 : 1.0);
      errs m = against_trainer(&K, TOL64, bnames[b]);
      cr_assert(rel(K.dev[0].loss[0], D.dev[0].loss[0]) <= TOL64, "the first loss comes before any update");
      if (knob < 2)
        cr_assert(fabs(K.dev[0].loss[2] - D.dev[0].loss[2]) > 1e-6, "%s, knob %d: step 2's loss %.17g is the default's",
                  bnames[b], knob, K.dev[0].loss[2]);
      cr_log_info("%s, %s: loss at step 2 %.9g (default %.9g); vs the trainer: losses within %.3g, parameters within %.3g",
                  bnames[b], knob == 0 ? "gradients_mean" : knob == 1 ? "no_loss_repeated_mean" : "both", K.dev[0].loss[2],
                  D.dev[0].loss[2], m.loss, m.param);
      run_free(&K);
    }
    run_free(&D);
    sk_graph_free(&n.g);
  }
}

/* Elements one device reduces per step: forward AllReduces and BackwardComms (`reduce`), and
   Mirrors (`mirror`), from the plan (every layout here cuts evenly). */
static void reduced_elements(const run *R, int64_t *reduce, int64_t *mirror) {
  const sk_graph *g = &R->n->g;
  *reduce = 0, *mirror = 0;
  for (int i = 0; i < R->plan.nsteps; i++) {
    const sk_parallel_step *s = &R->plan.steps[i];
    int64_t shape[SK_MAX_DIMS], n = 1;
    if (s->kind == SK_PSTEP_FORWARD_COMM) {
      cr_assert_eq(s->comm.kind, SK_COLL_ALLREDUCE);
      *reduce += sk_parallel_slice_count(&R->plan, g->ops[s->op].outputs[0]);
    } else if (s->kind == SK_PSTEP_BACKWARD_COMM || s->kind == SK_PSTEP_MIRROR) {
      const sk_layout *l = &R->plan.ops[s->op].kernel_in[s->slot];
      sk_layout_slice_shape(l, shape);
      for (int d = 0; d < l->ndims; d++) n *= shape[d];
      *(s->kind == SK_PSTEP_MIRROR ? mirror : reduce) += n;
    }
  }
}

/* f16 / bf16 runs: the reducing collectives travel in 16 bits unless fp32_communication, the
   Mirrors in f32 unless no_gradient_fp32_sync (and not fp32_communication): the bytes per step
   are exactly that. 16-bit gradient sync trains differently from f32 sync; f32 and f64 runs are
   untouched by the knobs. */
Test(runtime, wire_dtypes_follow_the_knobs, .timeout = RT_TIMEOUT) {
  static net n;
  static run R[4], F[2];
  build_mlp(&n, 8);
  static const char *const names[4] = {"bf16 default", "bf16 fp32_communication", "bf16 no_gradient_fp32_sync", "bf16 both"};
  static const int wr[4] = {2, 4, 2, 4}, wm[4] = {4, 4, 2, 4};
  for (int i = 0; i < 4; i++) {
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.fp32_communication = i & 1, pd.no_gradient_fp32_sync = i >= 2;
    run_knobs(&R[i], &n, 8, SK_BF16, sgd(0.5), 10, &pd, names[i]);
    int64_t er, em;
    reduced_elements(&R[i], &er, &em);
    cr_assert(er > 0 && em > 0, "the chain should reduce activations and Mirror parameters");
    for (int d = 0; d < 8; d++) {
      uint64_t bytes = coll_bytes(&R[i].dev[d].stats, SK_COLL_ALLREDUCE) + coll_bytes(&R[i].dev[d].stats, SK_COLL_REDUCE_SCATTER);
      cr_assert_eq(bytes, (uint64_t)(10 * (er * wr[i] + em * wm[i])), "%s, device %d: %llu bytes in 10 steps", names[i], d,
                   (unsigned long long)bytes);
    }
    if (i == 0) cr_log_info("bf16 chain on 8 devices: %lld reduced and %lld Mirrored elements per step", (long long)er, (long long)em);
  }
  bool differ = false;
  for (int s = 1; s < 10; s++) differ = differ || R[0].dev[0].loss[s] != R[2].dev[0].loss[s];
  /* bf16 losses carry 8 bits: over 10 steps the difference reaches them (step 6 here) */
  cr_assert(differ, "16-bit gradient sync should change a bf16 run's losses");
  cr_assert(memcmp(R[0].dev[0].params, R[2].dev[0].params, R[0].params_bytes), "... and its parameters");
  cr_assert(same_losses(&R[1], &R[3]), "under fp32_communication no_gradient_fp32_sync changes nothing");
  errs m = against_trainer(&R[1], HALF_TOL, names[1]);
  cr_log_info("bf16: step 6 loss %.9g with f32 gradient sync, %.9g with 16-bit; fp32_communication vs the trainer: "
              "losses within %.3g, parameters within %.3g", R[0].dev[0].loss[6], R[2].dev[0].loss[6], m.loss, m.param);
  static const sk_dtype full[2] = {SK_F32, SK_F64};
  for (int i = 0; i < 2; i++) {
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.fp32_communication = true, pd.no_gradient_fp32_sync = true;
    run_knobs(&F[0], &n, 8, full[i], sgd(0.5), 3, NULL, sk_dtype_name(full[i]));
    run_knobs(&F[1], &n, 8, full[i], sgd(0.5), 3, &pd, sk_dtype_name(full[i]));
    cr_assert(same_losses(&F[0], &F[1]), "%s: the 16-bit knobs changed the losses", sk_dtype_name(full[i]));
    cr_assert(same_traffic(&F[0].dev[0].stats, &F[1].dev[0].stats), "%s: the knobs changed the traffic", sk_dtype_name(full[i]));
    run_free(&F[0]), run_free(&F[1]);
  }
  for (int i = 0; i < 4; i++) run_free(&R[i]);
  sk_graph_free(&n.g);
}

/* The L2 norm of device d's slice of a whole row-major gradient (its sum of squares in *sq). */
static double slice_norm(const sk_layout *l, int d, sk_dtype dt, const void *whole, double *sq) {
  sk_slice s;
  OK(sk_layout_slice(l, d, &s, E));
  int64_t idx[SK_MAX_DIMS];
  for (int k = 0; k < l->ndims; k++) idx[k] = s.start[k];
  double acc = 0;
  for (;;) {
    int64_t at = 0;
    for (int k = 0; k < l->ndims; k++) at = at * l->shape[k] + idx[k];
    double v = get(dt, whole, at);
    acc += v * v;
    int k = l->ndims - 1;
    while (k >= 0 && ++idx[k] == s.stop[k]) idx[k] = s.start[k], k--;
    if (k < 0) break;
  }
  *sq += acc;
  return sqrt(acc);
}

/* dump_local_norm with device_local_norm: per step, one line per device and parameter, then the
   device's line; each norm is that of the device's slice of one device's gradient (the trainer,
   given the same data), to the 9 digits written (f64 runs differ by ~1e-16). */
Test(runtime, local_norms_dumped_per_device_and_parameter, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  char path[] = "/tmp/sk_rt_norms_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  build_mlp(&n, 4);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.dump_local_norm = path, pd.device_local_norm = true;
  run_knobs(&R, &n, 4, SK_F64, sgd(0.5), 3, &pd, "local norms");
  const sk_graph *g = &n.g;
  int params[8], np = 0;
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM) params[np++] = t;
  sk_train_desc td;
  memset(&td, 0, sizeof td);
  td.dtype = SK_F64, td.optim = R.plan.desc.optim, td.seed = R.plan.desc.seed;
  sk_trainer *t = NULL;
  OK(sk_trainer_create(g, &td, &t, E));
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  double worst = 0;
  for (int s = 0; s < R.nsteps; s++) {
    for (int i = 0; i < n.nin; i++) OK(sk_trainer_feed(t, R.in_t[i], R.in_dt[i], R.data[s][i], (size_t)R.in_n[i], E));
    OK(sk_trainer_step(t, NULL, E));
    for (int d = 0; d < R.ndev; d++) {
      double sq = 0;
      for (int p = 0; p <= np; p++) {
        long long step = -1;
        int dev = -1;
        char name[64];
        double norm = -1;
        cr_assert_eq(fscanf(f, "%lld %d %63s %lg", &step, &dev, name, &norm), 4, "step %d, device %d: line %d", s, d, p);
        cr_assert_eq(step, s + 1, "steps count from 1");
        cr_assert_eq(dev, d);
        double want = p < np ? slice_norm(&R.plan.tensors[params[p]].layout, d, SK_F64, sk_trainer_grad(t, params[p]), &sq)
                             : sqrt(sq);
        cr_assert_str_eq(name, p < np ? g->tensors[params[p]].name : "device");
        cr_assert(fabs(norm - want) <= 1e-8 * (1 + want), "step %d, device %d, '%s': %.17g, the trainer's slice %.17g", s + 1, d,
                  name, norm, want);
        worst = fmax(worst, fabs(norm - want) / (1 + want));
      }
    }
  }
  char extra[8];
  cr_assert_eq(fscanf(f, "%7s", extra), EOF, "lines past the last step");
  fclose(f);
  remove(path);
  sk_trainer_destroy(t);
  cr_log_info("local norms: %d steps x 4 devices x (%d parameters + device) lines, within %.3g of the trainer's slices",
              R.nsteps, np, worst);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* A dump file that cannot be opened: device 0's create fails naming it; nothing leaks. */
Test(runtime, local_norm_file_refused_at_create, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 2);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.dump_local_norm = "/nonexistent-dir/norms.txt";
  run_init_knobs(&R, &n, 2, SK_F32, sgd(0.1), 1, &pd);
  R.counting = true;
  run_world(&R);
  cr_assert_neq(R.world_rc, SK_OK);
  const dev_out *o = &R.dev[0];
  cr_assert_eq(o->rc, SK_ERR_SYSTEM, "%s (%s)", sk_result_name(o->rc), o->msg);
  cr_assert_str_eq(o->where, "create");
  cr_assert(strstr(o->msg, "/nonexistent-dir/norms.txt"), "'%s'", o->msg);
  for (int d = 0; d < 2; d++) cr_assert_eq(R.dev[d].out_after, 0);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* transformer_opt.grad_computation_allreduce_overlap: the Mirrors launch as their gradients are
   ready (each alone here) and hide behind the rest of the backward on the virtual clock; off,
   MindSpore's default, they launch after the backward. The numbers are the same. */
Test(runtime, mirror_overlap_on_the_virtual_clock, .timeout = RT_TIMEOUT) {
  static net n;
  static run R[2];
  build_dp(&n, 4);
  for (int i = 0; i < 2; i++) {
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.comm_fusion.allreduce.mode = SK_FUSION_NONE;
    pd.transformer_opt.grad_computation_allreduce_overlap = i == 1;
    run_init_knobs(&R[i], &n, 4, SK_F64, sgd(0.5), 3, &pd);
    R[i].link.alpha_us = 20, R[i].link.gbps = 0.01;
    R[i].plan.desc.cluster.device_flops = 1e7; /* slow devices: the backward takes as long as a Mirror */
    R[i].evaluate = false;
    run_world(&R[i]);
    expect_all_ok(&R[i], i ? "overlap" : "no overlap");
  }
  cr_assert(same_losses(&R[0], &R[1]));
  against_trainer(&R[1], TOL64, "overlap");
  double off = R[0].dev[0].clock_us, on = R[1].dev[0].clock_us;
  cr_assert_lt(on, 0.9 * off, "overlap: %.1f us, after the backward: %.1f us", on, off); /* measured: 18% less */
  cr_log_info("3 steps on the virtual clock: Mirrors after the backward %.1f us, overlapping it %.1f us", off, on);
  run_free(&R[0]), run_free(&R[1]);
  sk_graph_free(&n.g);
}

/* LayerNorm whose gamma and beta are activations (Tanh of a parameter): cut (N/2, 1), both
   gradients are partial sums over the rows' axis, reduced by two BackwardComm steps on one
   group; with transformer_opt.enable_communication_fusion, one AllReduce carries both. */
static int lnact_op;
static void build_ln_act(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int g0 = add_param(n, "g0", 1, SH1(8), SK_INIT_UNIFORM, 0.5);
  int b0 = add_param(n, "b0", 1, SH1(8), SK_INIT_UNIFORM, 0.5);
  int h = add_op(n, OP("h", SK_OP_MATMUL, x, w));
  sk_graph_op tg = OP("gamma", SK_OP_TANH, g0), tb = OP("beta", SK_OP_TANH, b0);
  SHARD(tg, 0, 1), SHARD(tb, 0, 1);
  int gamma = add_op(n, tg), beta = add_op(n, tb);
  sk_graph_op ln = OP("ln", SK_OP_LAYER_NORM, h, gamma, beta);
  SHARD(ln, 0, N / 2, 1), SHARD(ln, 1, 1), SHARD(ln, 2, 1);
  ln.epsilon = 1e-5;
  loss_head(n, add_op_at(n, &ln, &lnact_op), y, "u", 8, 4);
}

Test(runtime, communication_fusion_packs_backward_allreduces, .timeout = RT_TIMEOUT) {
  static net n;
  static run R[2];
  build_ln_act(&n, 4);
  for (int i = 0; i < 2; i++) {
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.transformer_opt.enable_communication_fusion = i == 1;
    run_knobs(&R[i], &n, 4, SK_F64, sgd(0.5), 3, &pd, i ? "communication fusion" : "no communication fusion");
    against_trainer(&R[i], TOL64, "LayerNorm, gamma and beta activations");
  }
  int bwd = 0;
  for (int i = 0; i < R[0].plan.nsteps; i++) {
    const sk_parallel_step *s = &R[0].plan.steps[i];
    if (s->kind == SK_PSTEP_BACKWARD_COMM && s->op == lnact_op) {
      bwd++;
      cr_assert_eq(s->comm.axes, R[0].plan.ops[lnact_op].plan.bwd_in[1].axes, "gamma's and beta's groups differ");
    }
  }
  cr_assert_eq(bwd, 2, "LayerNorm should reduce gamma's and beta's gradients");
  for (int d = 0; d < 4; d++) {
    uint64_t a = coll_calls(&R[0].dev[d].stats, SK_COLL_ALLREDUCE), b = coll_calls(&R[1].dev[d].stats, SK_COLL_ALLREDUCE);
    cr_assert_eq(b, a - 3, "device %d: %llu AllReduce calls packed, %llu not: one fewer per step", d, (unsigned long long)b,
                 (unsigned long long)a);
    cr_assert_eq(coll_bytes(&R[0].dev[d].stats, SK_COLL_ALLREDUCE), coll_bytes(&R[1].dev[d].stats, SK_COLL_ALLREDUCE));
  }
  for (int s = 0; s < 3; s++) cr_assert(rel(R[1].dev[0].loss[s], R[0].dev[0].loss[s]) <= TOL64);
  cr_log_info("communication fusion: %llu AllReduce calls in 3 steps, %llu unpacked; losses bit-identical: %s",
              (unsigned long long)coll_calls(&R[1].dev[0].stats, SK_COLL_ALLREDUCE),
              (unsigned long long)coll_calls(&R[0].dev[0].stats, SK_COLL_ALLREDUCE), same_losses(&R[0], &R[1]) ? "yes" : "no");
  run_free(&R[0]), run_free(&R[1]);
  sk_graph_free(&n.g);
}

/* Every allocation of create failing in turn on one of two devices, with every knob that
   allocates on: 16-bit wires and shadows, packed BackwardComms, local norms. */
Test(runtime, create_allocation_failures_with_knobs, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  char path[] = "/tmp/sk_rt_norms_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  build_ln_act(&n, 2);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.no_gradient_fp32_sync = true, pd.dump_local_norm = path, pd.device_local_norm = true;
  pd.transformer_opt.enable_communication_fusion = true;
  run_init_knobs(&R, &n, 2, SK_BF16, sgd(0.1), 1, &pd);
  R.counting = true, R.evaluate = false;
  long k = 1;
  int created_in_a_row = 0;
  for (; created_in_a_row < 2; k++) {
    R.fail_rank = (int)(k % 2), R.fail_at = k;
    run_world(&R);
    for (int d = 0; d < 2; d++) cr_assert_eq(R.dev[d].out_after, 0, "k = %ld, device %d", k, d);
    const dev_out *f = &R.dev[R.fail_rank];
    if (f->created) {
      created_in_a_row++;
      expect_all_ok(&R, "after the sweep");
      continue;
    }
    created_in_a_row = 0;
    cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "k = %ld, device %d: %s (%s)", k, R.fail_rank, sk_result_name(f->rc), f->msg);
  }
  cr_log_info("create with the knobs on 2 devices: call k of device k %% 2 refused, k = 1..%ld", k - 3);
  remove(path);
  run_free(&R);
  sk_graph_free(&n.g);
}

#ifdef RT_WITH_JSON
/* print_local_norm writes on stdout the very lines dump_local_norm writes in its file. */
Test(runtime, local_norms_printed_as_dumped, .init = cr_redirect_stdout, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  char path[] = "/tmp/sk_rt_norms_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  build_residual(&n, 2);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.dump_local_norm = path, pd.print_local_norm = true;
  run_knobs(&R, &n, 2, SK_F32, sgd(0.5), 2, &pd, "printed norms");
  static char text[8192];
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  remove(path);
  text[len] = 0;
  cr_assert_gt(len, 0);
  fflush(stdout);
  cr_assert_stdout_eq_str(text);
  run_free(&R);
  sk_graph_free(&n.g);
}
#endif
