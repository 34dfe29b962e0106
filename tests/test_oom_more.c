/* test_oom_more.c -- allocation-failure sweeps of the single-threaded modules that take the
   user's allocator (issue 39): checkpoints, the strategy searches, graphs and pipeline schedules.

   Each scenario runs once without a hook (the reference), once under tests/oom_alloc.h's
   counting allocator with nothing failing (its N allocations counted; the same results as the
   reference), then for every k = 1..N with the k-th allocation failing once, and again with
   the k-th and every later one failing (persistent). Every k must give:
   - every library call SK_OK or SK_ERR_OUT_OF_MEMORY; the scenario stops at the first error,
     cleans up, and returns it;
   - SK_ERR_OUT_OF_MEMORY whenever an allocation failed (none of these calls can do without any
     of its allocations, so SK_OK after a failure is a swallowed failure);
   - SK_OK only with the reference's results;
   - no live block after the cleanup.
   Scenarios:
     ckpt      sk_ckpt_save of two tensors (one cut in two slices) and a strategy text under a
               fresh root; sk_ckpt_open_with, sk_ckpt_load into new buffers, sk_ckpt_verify,
               sk_ckpt_read_strategy, sk_ckpt_merge into a second root (/dev/shm: no disk)
     search    a MatMul + softmax loss network on 4 devices: sk_search_propagate,
               sk_search_recursive and sk_search_exhaustive (the model and the scratch from the
               graph's allocator)
     search_grow  18 MatMuls of distinct shapes on 64 devices, listed in full (propagation, exact
               search) and lazily (D-Rec): the model's growing lists, memo and cache
     graph     a graph of 20 chained operators (its lists grow past their first 16), then
               sk_graph_micro (whose result inherits the allocator) and sk_graph_free
     pipeline  sk_pipe_schedule_make for 1f1b (2 chunks) and zero_bubble_v, sk_pipe_simulate
     npy       sk_npy_open_with of a [4, 3] f32 file, sk_npy_read_rows of rows 1..3 into f64 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oom_alloc.h"
#include "shardkit.h"
#include "sk_ckpt.h" /* implemented in tests/test_ckpt.c */

/* What a scenario produced, compared with the reference byte by byte. */
typedef struct oom_out {
  double v[64];
  int n;
} oom_out;

typedef sk_result (*oom_scenario)(const sk_allocator *a, oom_out *out);

static void put(oom_out *o, double v) {
  if (o->n < 64) o->v[o->n++] = v;
}

/* Stops the scenario at the first call that does not succeed (cleanup follows `fail:`). */
#define TRY(call)            \
  do {                       \
    if ((r = (call))) goto fail; \
  } while (0)

/* ---- the scenarios --------------------------------------------------------------------------- */

static void ckpt_slice(sk_ckpt_slice *s, const char *name, int nd, const int64_t *shape, int64_t r0, int64_t r1, void *data) {
  memset(s, 0, sizeof *s);
  s->tensor = name, s->kind = SK_CKPT_PARAM, s->dtype = SK_F32, s->ndims = nd, s->box.ndims = nd;
  s->data = data, s->write = true;
  for (int d = 0; d < nd; d++) s->shape[d] = shape[d], s->box.start[d] = 0, s->box.stop[d] = shape[d];
  s->box.start[0] = r0, s->box.stop[0] = r1;
}

static sk_result scenario_ckpt(const sk_allocator *a, oom_out *out) {
  static const int64_t ws[2] = {4, 6}, bs[1] = {6};
  float w[24], b[6], w_back[24] = {0}, b_back[6] = {0};
  for (int i = 0; i < 24; i++) w[i] = (float)i * 0.5f - 3;
  for (int i = 0; i < 6; i++) b[i] = (float)i + 0.25f;
  char root[64] = "/dev/shm/sk_oom_ckpt.XXXXXX", merged[96], cmd[128], *text = NULL;
  cr_assert(mkdtemp(root), "mkdtemp");
  snprintf(merged, sizeof merged, "%s/merged", root);
  sk_ckpt_slice save[3], load[2];
  ckpt_slice(&save[0], "w", 2, ws, 0, 2, w), ckpt_slice(&save[1], "w", 2, ws, 2, 4, w + 12);
  ckpt_slice(&save[2], "b", 1, bs, 0, 6, b);
  ckpt_slice(&load[0], "w", 2, ws, 0, 4, w_back), ckpt_slice(&load[1], "b", 1, bs, 0, 6, b_back);
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = 7, d.strategy = "{\"w\": [2, 1]}", d.strategy_len = strlen(d.strategy), d.io = SK_CKPT_IO_PLAIN;
  if (a) d.allocator = *a;
  sk_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  size_t len = 0;
  sk_result r;
  TRY(sk_ckpt_save(NULL, root, &d, 3, save, NULL, NULL));
  TRY(sk_ckpt_open_with(root, a, &m, NULL));
  TRY(sk_ckpt_load(&m, 0, SK_CKPT_IO_PLAIN, 2, load, NULL, NULL));
  TRY(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, NULL));
  TRY(sk_ckpt_read_strategy(&m, &text, &len, NULL));
  TRY(sk_ckpt_merge(&m, merged, SK_CKPT_IO_PLAIN, NULL, NULL));
  for (int i = 0; i < 24; i++) put(out, w_back[i]);
  for (int i = 0; i < 6; i++) put(out, b_back[i]);
  put(out, (double)len), put(out, text && len == d.strategy_len && !memcmp(text, d.strategy, len));
fail:
  if (a) a->free(a->user, text); /* read_strategy's text: from m's allocator (zero: malloc'd) */
  else free(text);
  sk_ckpt_manifest_free(&m);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  cr_assert_eq(system(cmd), 0);
  return r;
}

static sk_graph_op op_of(const char *name, sk_op_kind kind, int n, int in0, int in1) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  snprintf(op.name, sizeof op.name, "%s", name);
  op.desc.kind = kind, op.ninputs = n, op.inputs[0] = in0, op.inputs[1] = in1;
  return op;
}

/* A graph on allocator a (NULL: libc's) with the inputs x [batch, feat] (f32) and y [batch]. */
static sk_result net_inputs(sk_graph *g, const sk_allocator *a, int64_t batch, int64_t feat, int *x, int *y) {
  sk_graph_init(g);
  if (a) g->allocator = *a;
  int64_t xs[2] = {batch, feat}, ys[1] = {batch};
  sk_result r = sk_graph_add_input(g, "x", SK_F32, 2, xs, x, NULL);
  return r ? r : sk_graph_add_input(g, "y", SK_I32, 1, ys, y, NULL);
}

/* *h [., k] MatMul a parameter w<i> [k, n]: the product in *h. */
static sk_result net_matmul(sk_graph *g, int i, int64_t k, int64_t n, int *h) {
  int64_t ws[2] = {k, n};
  sk_init init;
  memset(&init, 0, sizeof init);
  init.kind = SK_INIT_XAVIER_UNIFORM;
  char name[16];
  int w = -1, o = -1;
  snprintf(name, sizeof name, "w%d", i);
  sk_result r = sk_graph_add_param(g, name, SK_F32, 2, ws, init, &w, NULL);
  snprintf(name, sizeof name, "mm%d", i);
  sk_graph_op op = op_of(name, SK_OP_MATMUL, 2, *h, w);
  if (!r) r = sk_graph_add_op(g, &op, &o, NULL);
  if (!r) *h = g->ops[o].outputs[0];
  return r;
}

/* Softmax loss of h against the labels y: the graph's loss. */
static sk_result net_loss(sk_graph *g, int h, int y) {
  sk_graph_op op = op_of("loss", SK_OP_SOFTMAX_CE, 2, h, y);
  int o = -1;
  sk_result r = sk_graph_add_op(g, &op, &o, NULL);
  return r ? r : sk_graph_set_loss(g, g->ops[o].outputs[0], NULL);
}

/* x [8, 16] MatMul w [16, 8] -> softmax loss against y [8]; `relus` ReLUs after the MatMul. */
static sk_result small_net(sk_graph *g, const sk_allocator *a, int relus) {
  int h = -1, y = -1, o = -1;
  sk_result r;
  TRY(net_inputs(g, a, 8, 16, &h, &y));
  TRY(net_matmul(g, 0, 16, 8, &h));
  for (int k = 0; k < relus; k++) {
    char name[16];
    snprintf(name, sizeof name, "relu%d", k);
    sk_graph_op op = op_of(name, SK_OP_RELU, 1, h, 0);
    TRY(sk_graph_add_op(g, &op, &o, NULL));
    h = g->ops[o].outputs[0];
  }
  r = net_loss(g, h, y);
fail:
  return r;
}

static sk_result scenario_search(const sk_allocator *a, oom_out *out) {
  sk_graph g;
  sk_search_model m;
  memset(&m, 0, sizeof m);
  sk_search_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 4;
  int choice[3][8];
  bool built = false;
  sk_result r;
  TRY(small_net(&g, a, 1));
  TRY(sk_search_model_build(&g, &d, &m, NULL));
  built = true;
  TRY(sk_search_propagate(&m, choice[0], NULL));
  TRY(sk_search_recursive(&m, choice[1], NULL));
  TRY(sk_search_exhaustive(&m, choice[2], NULL));
  for (int s = 0; s < 3; s++) {
    for (int o = 0; o < g.nops; o++) put(out, choice[s][o]);
    put(out, sk_search_plan_cost(&m, choice[s]));
  }
fail:
  if (built) sk_search_model_free(&m);
  sk_graph_free(&g);
  return r;
}

/* x [64, 8] through 18 MatMuls of widths 8, 16, ..., 152 (each operator its own description,
   more than the memo's first 16), softmax loss against y [64], on 64 devices: MatMuls with more
   candidates than a list's first 16, more priced pairs of cuts than the cache's first 512 (half
   its 1024 slots), and (lazy lists) D-Rec's strategies appended to empty lists. The model's
   growth paths, each failing in its turn. */
static sk_result wide_net(sk_graph *g, const sk_allocator *a) {
  int h = -1, y = -1;
  sk_result r = net_inputs(g, a, 64, 8, &h, &y);
  for (int i = 0; !r && i < 18; i++) r = net_matmul(g, i, 8 * (i + 1), 8 * (i + 2), &h);
  return r ? r : net_loss(g, h, y);
}

/* One model of the wide net: lazy, D-Rec (its strategies appended to empty lists); else
   listed in full, the propagation and the exact search. Its plans' costs, and (lists ready) the
   growth its lists, memo and cache went through, which the scenario needs to have happened. */
static sk_result search_wide(const sk_graph *g, bool lazy, oom_out *out) {
  sk_search_model m;
  sk_search_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 64, d.lazy_candidates = lazy;
  int choice[2][24];
  sk_result r = sk_search_model_build(g, &d, &m, NULL);
  if (r) return r;
  if (lazy) r = sk_search_recursive(&m, choice[0], NULL);
  else if (!(r = sk_search_propagate(&m, choice[0], NULL))) r = sk_search_exhaustive(&m, choice[1], NULL);
  for (int s = 0; !r && s < (lazy ? 1 : 2); s++) {
    for (int o = 0; o < g->nops; o++) put(out, choice[s][o]);
    put(out, sk_search_plan_cost(&m, choice[s]));
  }
  int most = 0;
  for (int o = 0; o < g->nops; o++) most = m.ncands[o] > most ? m.ncands[o] : most;
  size_t pairs = sk_search_cached_pairs(&m);
  if (!r) put(out, most), put(out, (double)pairs);
  /* the growth this scenario is for: a list past its first 16 and the cache past half its first
     1024 slots (the memo's 19 descriptions pass its first 16 by construction) */
  if (!r && !lazy) cr_assert(most > 16 && pairs > 512, "wide net: %d candidates at most, %zu pairs", most, pairs);
  if (!r && lazy) cr_assert(most >= 1, "wide net: D-Rec appended no strategy");
  sk_search_model_free(&m);
  return r;
}

static sk_result scenario_search_grow(const sk_allocator *a, oom_out *out) {
  sk_graph g;
  sk_result r = wide_net(&g, a);
  if (!r) r = search_wide(&g, false, out);
  if (!r) r = search_wide(&g, true, out);
  sk_graph_free(&g);
  return r;
}

static sk_result scenario_graph(const sk_allocator *a, oom_out *out) {
  sk_graph g, micro;
  sk_graph_init(&micro);
  sk_result r;
  TRY(small_net(&g, a, 20));
  TRY(sk_graph_check(&g, NULL));
  TRY(sk_graph_micro(&g, 2, &micro, NULL));
  put(out, g.ntensors), put(out, g.nops), put(out, micro.ntensors), put(out, micro.tensors[0].shape[0]);
  put(out, micro.allocator.user == (a ? a->user : NULL));
fail:
  sk_graph_free(&micro), sk_graph_free(&g);
  return r;
}

static sk_result scenario_pipeline(const sk_allocator *a, oom_out *out) {
  sk_pipe_desc d[2] = {{.stages = 4, .micro = 8, .scheduler = SK_PIPE_1F1B, .interleave = 2},
                       {.stages = 4, .micro = 8, .scheduler = SK_PIPE_ZERO_BUBBLE_V, .interleave = 0}};
  sk_pipe_costs costs = {1, 2, 1, 0.5};
  sk_result r = SK_OK;
  for (int i = 0; !r && i < 2; i++) {
    sk_pipe_schedule s;
    sk_pipe_stats st;
    if (a) d[i].allocator = *a;
    if ((r = sk_pipe_schedule_make(&d[i], &s, NULL))) break;
    r = sk_pipe_simulate(&s, &costs, &st, NULL);
    if (!r) put(out, st.makespan), put(out, st.bubble_fraction), put(out, s.count[0]), put(out, st.peak_live[0]);
    sk_pipe_schedule_free(&s);
  }
  return r;
}

/* A NumPy 1.0 file of shape [4, 3], f32 0, 1, ..., 11, at path. */
static void write_npy(const char *path) {
  char head[128]; /* numpy pads its header to a multiple of 64 bytes */
  const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }";
  memset(head, ' ', sizeof head);
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  head[8] = (char)(sizeof head - 10), head[9] = 0; /* the header's length, little-endian */
  memcpy(head + 10, dict, strlen(dict));
  head[sizeof head - 1] = '\n';
  float v[12];
  for (int i = 0; i < 12; i++) v[i] = (float)i;
  FILE *f = fopen(path, "wb");
  cr_assert(f && fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(v, sizeof v, 1, f) == 1 && !fclose(f));
}

static sk_result scenario_npy(const sk_allocator *a, oom_out *out) {
  char path[64] = "/dev/shm/sk_oom_npy.XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0, "mkstemp");
  close(fd), write_npy(path);
  sk_npy npy;
  double rows[9];
  sk_result r = sk_npy_open_with(path, a, &npy, NULL);
  if (!r) r = sk_npy_read_rows(&npy, 1, 3, SK_F64, rows, NULL);
  for (int i = 0; !r && i < 9; i++) put(out, rows[i]);
  if (!r) sk_npy_close(&npy);
  unlink(path);
  return r;
}

/* ---- the sweep ------------------------------------------------------------------------------- */

/* One run with the k-th allocation failing (k = 0: none), checked against the reference. */
static void run_k(const char *name, oom_scenario run, const oom_out *ref, long k, bool persistent) {
  oom_alloc o;
  oom_alloc_arm(&o, k, persistent);
  sk_allocator a = oom_alloc_hook(&o);
  oom_out out;
  memset(&out, 0, sizeof out);
  sk_result r = run(&a, &out);
  const char *mode = persistent ? "persistent" : "once";
  cr_assert(r == SK_OK || r == SK_ERR_OUT_OF_MEMORY, "%s k=%ld %s: %s", name, k, mode, sk_result_name(r));
  cr_assert(!o.failed || r == SK_ERR_OUT_OF_MEMORY, "%s k=%ld %s: SK_OK although allocation %ld failed", name, k, mode, k);
  cr_assert(r || !memcmp(&out, ref, sizeof out), "%s k=%ld %s: SK_OK with results other than the reference's", name, k,
            mode);
  cr_assert_eq(o.live, 0, "%s k=%ld %s: %ld blocks leaked", name, k, mode, o.live);
}

static void sweep(const char *name, oom_scenario run) {
  oom_out ref;
  memset(&ref, 0, sizeof ref);
  sk_result r = run(NULL, &ref);
  cr_assert_eq(r, SK_OK, "%s without a hook: %s", name, sk_result_name(r));
  oom_alloc o;
  oom_alloc_arm(&o, 0, false);
  sk_allocator a = oom_alloc_hook(&o);
  oom_out out;
  memset(&out, 0, sizeof out);
  cr_assert_eq(run(&a, &out), SK_OK, "%s counted", name);
  cr_assert(!memcmp(&out, &ref, sizeof out), "%s through the hook: results other than without it", name);
  cr_assert_eq(o.live, 0, "%s counted: %ld blocks leaked", name, o.live);
  cr_assert_gt(o.calls, 0, "%s: nothing went through the hook", name);
  for (long k = 1; k <= o.calls; k++) run_k(name, run, &ref, k, false), run_k(name, run, &ref, k, true);
  cr_log_info("%s: %ld allocations, each failed once and persistently", name, o.calls);
}

Test(oom_more, ckpt) { sweep("ckpt", scenario_ckpt); }
Test(oom_more, search) { sweep("search", scenario_search); }
Test(oom_more, search_grow, .timeout = 300) { sweep("search_grow", scenario_search_grow); }
Test(oom_more, graph) { sweep("graph", scenario_graph); }
Test(oom_more, pipeline) { sweep("pipeline", scenario_pipeline); }
Test(oom_more, npy) { sweep("npy", scenario_npy); }
