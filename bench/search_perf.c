/* search_perf: the strategy searches of sk_search.h -- how good their plans are against the exact
   optimum of the same cost model, and how long they take on a large network.
   - quality (the default): 20 random MLPs built with the sk_graph C API (2 to 6 operators), the
     two MindSpore tutorial networks (examples/nets/recursive_programming.json and
     operator_parallel.json) with their strategies stripped, and one transformer block (the block
     of examples/nets/transformer.json: 16 x 8 tokens, hidden 32, 4 heads, FFN 128), each on 2, 4
     and 8 devices. Per row: the exhaustive optimum's plan cost, sharding_propagation's and
     recursive_programming's (D-Rec) plan costs and their ratios to it, each search's time, and
     propagation SEEDED with the optimum's strategy on the heaviest operator (that operator made
     "configured" through sk_search_apply on a copy of the graph, then a second model): whether
     it reaches the optimum. Below the table, for every seeded run that does not: the operator
     where its choice first differs from the optimum's (in propagation's own visiting order),
     both strategies, and both costs of that operator against its already decided neighbours.
   - --scale [LAYERS]: a LAYERS-layer transformer (default 96; batch 4096 x seq 128, hidden 1024,
     16 heads, FFN 4096) on 4096 devices: the model build, D-Rec and propagation, each timed
     (median of --runs), wall and CPU time (the machine is shared). Targets: D-Rec under 1 s,
     propagation under 5 s, the build included; "met" says yes (wall), cpu (CPU time only) or NO.
     With --write-net FILE: that transformer written as network JSON instead (build/sk-sim --net;
     bench/nets/transformer96.json is --scale 96's), nothing timed.
   - --strip IN OUT: writes network IN with every operator's strategy and layouts cleared (for
     build/sk-sim's search modes against its data-parallel plan).
   - --dry-run-prices: the quality set again, plus the named networks as shipped (four_matmul on
     16 devices, dense_mutmul, the two tutorials and megatron_block on 8), with every plan
     compiled and priced by the dry run (sk_dryrun_step_time): each search's own plan and the
     plan sk_finalists_compile keeps, data parallel's, over the referee (exhaustive's plan;
     the cheapest priced plan where exhaustive refuses). With --scale: both searches' plans on
     the large transformer priced, and the finalists' pricing time. bench/search_targets.sh
     turns both into bench/RESULTS.md's table.
   Cost model: sk_search_cost.h under --link A,G (default 5 us, 25 GB/s; communication only;
   --device-tflops T adds compute). Usage: see --help. */
#define _GNU_SOURCE /* clock_gettime under -std=c11 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SK_IMPL
#include "sk_json.h"
#include "sk_finalists.h"
#include "sk_search.h"

#include "../examples/progs.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double cpu_ms(void) { /* this process's CPU time: the machine is shared */
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die_on(sk_result r, const sk_error *e, const char *what) {
  if (r != SK_OK) {
    fprintf(stderr, "search_perf: %s: %s\n", what, e->msg);
    exit(1);
  }
}

/* ---- building networks ------------------------------------------------------------------------ */

static sk_error E;

static int add_in(sk_graph *g, const char *name, sk_dtype dt, int nd, const int64_t *shape) {
  int id = -1;
  die_on(sk_graph_add_input(g, name, dt, nd, shape, &id, &E), &E, name);
  return id;
}

static int add_param(sk_graph *g, const char *name, int nd, const int64_t *shape, sk_init_kind k) {
  int id = -1;
  sk_init init = {k, 0};
  die_on(sk_graph_add_param(g, name, SK_F32, nd, shape, init, &id, &E), &E, name);
  return id;
}

/* Adds op (name, kind, inputs a, b, c; -1 ends them) and returns its first output. */
static int add_op3(sk_graph *g, sk_graph_op *op, const char *name, sk_op_kind kind, int a, int b, int c) {
  snprintf(op->name, sizeof op->name, "%s", name);
  op->desc.kind = kind;
  int ins[3] = {a, b, c};
  op->ninputs = 0;
  for (int k = 0; k < 3 && ins[k] >= 0; k++) op->inputs[op->ninputs++] = ins[k];
  int i = -1;
  die_on(sk_graph_add_op(g, op, &i, &E), &E, name);
  return g->ops[i].outputs[0];
}

static int add_op(sk_graph *g, const char *name, sk_op_kind kind, int a, int b, int c) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  return add_op3(g, &op, name, kind, a, b, c);
}

static int add_reshape(sk_graph *g, const char *name, int x, int nd, const int64_t *shape) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.desc.noutputs = 1, op.desc.out_ndims[0] = nd;
  for (int d = 0; d < nd; d++) op.desc.out_shape[0][d] = shape[d];
  return add_op3(g, &op, name, SK_OP_RESHAPE, x, -1, -1);
}

static int add_transpose(sk_graph *g, const char *name, int x, const int *perm, int nd) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.desc.has_perm = true;
  for (int d = 0; d < nd; d++) op.desc.perm[d] = perm[d];
  return add_op3(g, &op, name, SK_OP_TRANSPOSE, x, -1, -1);
}

static int add_axis_op(sk_graph *g, const char *name, sk_op_kind kind, int axis, int a, int b, int c) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.desc.naxis = 1, op.desc.axis[0] = axis;
  return add_op3(g, &op, name, kind, a, b, c);
}

static int add_bmm(sk_graph *g, const char *name, int a, int b, bool transpose_b) {
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  op.desc.transpose_b = transpose_b;
  return add_op3(g, &op, name, SK_OP_BATCH_MATMUL, a, b, -1);
}

/* A transformer as examples/nets/transformer.json builds it: Gather embedding + position, then
   `layers` blocks (LayerNorm, Q/K/V MatMuls, reshapes and transposes to heads, the two
   BatchMatMuls, Softmax, the output MatMul, residual Add, LayerNorm, FFN with biases and GeLU,
   residual Add), a final LayerNorm, the head MatMul and the softmax loss. */
static void build_transformer(sk_graph *g, int layers, int64_t B, int64_t S, int64_t H, int64_t heads, int64_t F,
                              int64_t V) {
  sk_graph_init(g);
  int64_t tok_sh[2] = {B, S}, tgt_sh[1] = {B * S}, emb_sh[2] = {V, H}, pos_sh[2] = {S, H}, h_sh[1] = {H};
  int64_t hh[2] = {H, H}, hf[2] = {H, F}, fh[2] = {F, H}, f_sh[1] = {F}, hv[2] = {H, V};
  int64_t x2[2] = {B * S, H}, x3[3] = {B, S, H}, x4[4] = {B, S, heads, H / heads};
  int to_heads[4] = {0, 2, 1, 3};
  int tokens = add_in(g, "tokens", SK_I32, 2, tok_sh), targets = add_in(g, "targets", SK_I32, 1, tgt_sh);
  int emb = add_param(g, "embedding", 2, emb_sh, SK_INIT_NORMAL), pos = add_param(g, "position", 2, pos_sh, SK_INIT_NORMAL);
  int x = add_op(g, "embed", SK_OP_GATHER, emb, tokens, -1);
  x = add_op(g, "embed_pos", SK_OP_ADD, x, pos, -1);
  char n[64], m[64];
#define NM(fmt) (snprintf(n, sizeof n, "b%d." fmt, l), n)
#define PM(fmt) (snprintf(m, sizeof m, "b%d." fmt, l), m)
  for (int l = 0; l < layers; l++) {
    int g1 = add_param(g, PM("ln1.gamma"), 1, h_sh, SK_INIT_ONES), b1 = add_param(g, PM("ln1.beta"), 1, h_sh, SK_INIT_ZEROS);
    int g2 = add_param(g, PM("ln2.gamma"), 1, h_sh, SK_INIT_ONES), b2 = add_param(g, PM("ln2.beta"), 1, h_sh, SK_INIT_ZEROS);
    int wq = add_param(g, PM("wq"), 2, hh, SK_INIT_NORMAL), wk = add_param(g, PM("wk"), 2, hh, SK_INIT_NORMAL);
    int wv = add_param(g, PM("wv"), 2, hh, SK_INIT_NORMAL), wo = add_param(g, PM("wo"), 2, hh, SK_INIT_NORMAL);
    int w1 = add_param(g, PM("w1"), 2, hf, SK_INIT_NORMAL), bb1 = add_param(g, PM("b1"), 1, f_sh, SK_INIT_ZEROS);
    int w2 = add_param(g, PM("w2"), 2, fh, SK_INIT_NORMAL), bb2 = add_param(g, PM("b2"), 1, h_sh, SK_INIT_ZEROS);
    int ln1 = add_axis_op(g, NM("ln1"), SK_OP_LAYER_NORM, -1, x, g1, b1);
    int ln1_2d = add_reshape(g, NM("ln1_2d"), ln1, 2, x2);
    int hq = add_transpose(g, NM("q_heads"), add_reshape(g, NM("q_4d"), add_op(g, NM("q"), SK_OP_MATMUL, ln1_2d, wq, -1), 4, x4),
                           to_heads, 4);
    int hk = add_transpose(g, NM("k_heads"), add_reshape(g, NM("k_4d"), add_op(g, NM("k"), SK_OP_MATMUL, ln1_2d, wk, -1), 4, x4),
                           to_heads, 4);
    int hv_ = add_transpose(g, NM("v_heads"), add_reshape(g, NM("v_4d"), add_op(g, NM("v"), SK_OP_MATMUL, ln1_2d, wv, -1), 4, x4),
                            to_heads, 4);
    int sc = add_bmm(g, NM("scores"), hq, hk, true);
    int at = add_axis_op(g, NM("attention"), SK_OP_SOFTMAX, -1, sc, -1, -1);
    int cx = add_bmm(g, NM("context"), at, hv_, false);
    int ct = add_transpose(g, NM("context_t"), cx, to_heads, 4);
    int c2 = add_reshape(g, NM("context_2d"), ct, 2, x2);
    int o3 = add_reshape(g, NM("out_3d"), add_op(g, NM("out"), SK_OP_MATMUL, c2, wo, -1), 3, x3);
    int r1 = add_op(g, NM("residual1"), SK_OP_ADD, x, o3, -1);
    int ln2 = add_axis_op(g, NM("ln2"), SK_OP_LAYER_NORM, -1, r1, g2, b2);
    int l2 = add_reshape(g, NM("ln2_2d"), ln2, 2, x2);
    int f1 = add_op(g, NM("fc1_bias"), SK_OP_BIAS_ADD, add_op(g, NM("fc1"), SK_OP_MATMUL, l2, w1, -1), bb1, -1);
    int ge = add_op(g, NM("gelu"), SK_OP_GELU, f1, -1, -1);
    int f2 = add_op(g, NM("fc2_bias"), SK_OP_BIAS_ADD, add_op(g, NM("fc2"), SK_OP_MATMUL, ge, w2, -1), bb2, -1);
    x = add_op(g, NM("residual2"), SK_OP_ADD, r1, add_reshape(g, NM("fc2_3d"), f2, 3, x3), -1);
  }
#undef NM
#undef PM
  int gf = add_param(g, "lnf.gamma", 1, h_sh, SK_INIT_ONES), bf = add_param(g, "lnf.beta", 1, h_sh, SK_INIT_ZEROS);
  int head = add_param(g, "head", 2, hv, SK_INIT_NORMAL);
  int lnf = add_reshape(g, "lnf_2d", add_axis_op(g, "lnf", SK_OP_LAYER_NORM, -1, x, gf, bf), 2, x2);
  int logits = add_op(g, "logits", SK_OP_MATMUL, lnf, head, -1);
  die_on(sk_graph_set_loss(g, add_op(g, "loss", SK_OP_SOFTMAX_CE, logits, targets, -1), &E), &E, "loss");
}

static uint64_t rng_state;
static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
static int64_t pick(const int64_t *v, int n) { return v[rng() % (uint64_t)n]; }

/* Random MLP number `seed`: x [B, D0] through 1..3 layers (MatMul, or Dense with its bias; then
   ReLU, GeLU or nothing; a residual Add where the width is kept), the softmax loss; <= 8 ops. */
static void build_mlp(sk_graph *g, int seed, char *desc, size_t cap) {
  rng_state = 0x9E3779B97F4A7C15ull * (uint64_t)(seed + 1);
  static const int64_t batches[] = {8, 16, 32, 64, 128, 256}, widths[] = {8, 16, 32, 64, 128, 256, 512, 1024};
  sk_graph_init(g);
  int64_t B = pick(batches, 6), D = pick(widths, 8), C = pick(widths, 4);
  int64_t xs[2] = {B, D}, ys[1] = {B};
  int x = add_in(g, "x", SK_F32, 2, xs), y = add_in(g, "y", SK_I32, 1, ys);
  int layers = 1 + (int)(rng() % 3), nops = 0;
  size_t at = (size_t)snprintf(desc, cap, "B%lld:%lld", (long long)B, (long long)D);
  char n[64];
  for (int l = 0; l < layers && nops + 2 <= 7; l++) {
    int64_t out = l == layers - 1 ? C : pick(widths, 8);
    int h;
    if (rng() % 2) {
      int64_t ws[2] = {D, out};
      snprintf(n, sizeof n, "w%d", l);
      int w = add_param(g, n, 2, ws, SK_INIT_XAVIER_UNIFORM);
      snprintf(n, sizeof n, "mm%d", l);
      h = add_op(g, n, SK_OP_MATMUL, x, w, -1);
    } else {
      int64_t ws[2] = {out, D}, bs[1] = {out};
      snprintf(n, sizeof n, "w%d", l);
      int w = add_param(g, n, 2, ws, SK_INIT_XAVIER_UNIFORM);
      snprintf(n, sizeof n, "b%d", l);
      int b = add_param(g, n, 1, bs, SK_INIT_ZEROS);
      snprintf(n, sizeof n, "dense%d", l);
      h = add_op(g, n, SK_OP_DENSE, x, w, b);
    }
    nops++;
    at += (size_t)snprintf(desc + (at < cap ? at : cap), at < cap ? cap - at : 0, "-%lld", (long long)out);
    if (l < layers - 1 && nops < 7) {
      unsigned act = (unsigned)(rng() % 3);
      snprintf(n, sizeof n, "act%d", l);
      if (act) h = add_op(g, n, act == 1 ? SK_OP_RELU : SK_OP_GELU, h, -1, -1), nops++;
      if (out == D && nops < 7 && rng() % 2) {
        snprintf(n, sizeof n, "res%d", l);
        h = add_op(g, n, SK_OP_ADD, x, h, -1), nops++;
      }
    }
    x = h, D = out;
  }
  die_on(sk_graph_set_loss(g, add_op(g, "loss", SK_OP_SOFTMAX_CE, x, y, -1), &E), &E, "loss");
}

static void strip(sk_graph *g) {
  for (int o = 0; o < g->nops; o++) {
    sk_op_desc *d = &g->ops[o].desc;
    d->has_strategy = d->has_layouts = d->has_out_strategy = false;
    d->nstrategies = 0;
    memset(d->strategy_len, 0, sizeof d->strategy_len);
    memset(d->strategy, 0, sizeof d->strategy);
  }
}

/* ---- the quality table ------------------------------------------------------------------------ */

static sk_search_desc base_desc;

static int heaviest(const sk_graph *g) {
  int best = 0;
  double w = -1;
  for (int o = 0; o < g->nops; o++) {
    const sk_graph_op *op = &g->ops[o];
    sk_exec_arg in[1], out[1];
    memset(in, 0, sizeof in), memset(out, 0, sizeof out);
    if (op->ninputs)
      in[0].ndims = g->tensors[op->inputs[0]].ndims, memcpy(in[0].shape, g->tensors[op->inputs[0]].shape, sizeof in[0].shape);
    out[0].ndims = g->tensors[op->outputs[0]].ndims, memcpy(out[0].shape, g->tensors[op->outputs[0]].shape, sizeof out[0].shape);
    double f = sk_exec_flops(op, in, out, false);
    if (f > w) w = f, best = o;
  }
  return best;
}

/* The order sk_search_propagate decides operators in (it depends on the graph only). */
static int walk_order(const sk_search_model *m, int *order) {
  const sk_graph *g = m->graph;
  int n = g->nops, k = 0, *queue = (int *)malloc(sizeof(int) * (size_t)(n + 1));
  bool *dec = (bool *)calloc((size_t)n + 1, 1);
  if (!queue || !dec) exit(1);
  for (int o = 0; o < n; o++) dec[o] = m->configured[o];
#define SPREAD(root)                                                                                 \
  do {                                                                                               \
    int head = 0, tail = 0;                                                                          \
    queue[tail++] = (root);                                                                          \
    while (head < tail) {                                                                            \
      int u = queue[head++];                                                                         \
      for (int i = 0; i < m->nadj[u]; i++) {                                                         \
        int e = m->adj[u][i], v = m->edges[e].src == u ? m->edges[e].dst : m->edges[e].src;         \
        if (dec[v]) continue;                                                                        \
        dec[v] = true, order[k++] = v, queue[tail++] = v;                                            \
      }                                                                                              \
    }                                                                                                \
  } while (0)
  for (int o = 0; o < n; o++)
    if (m->configured[o]) SPREAD(o);
  for (int pass = 0; pass < 2; pass++)
    for (int o = 0; o < n; o++) {
      bool reads = false;
      for (int i = 0; i < g->ops[o].ninputs; i++) reads |= g->tensors[g->ops[o].inputs[i]].role == SK_TENSOR_INPUT;
      if (!dec[o] && (pass == 1 || reads)) {
        dec[o] = true, order[k++] = o;
        SPREAD(o);
      }
    }
#undef SPREAD
  free(queue), free(dec);
  return k;
}

/* Operator o at candidate c against the operators in `dec`, at their candidates in choice. */
static double local_cost(sk_search_model *m, int o, int c, const bool *dec, const int *choice) {
  double cost = m->cands[o][c].own + sk_search_input_cost(m, o, c);
  for (int i = 0; i < m->nadj[o]; i++) {
    int e = m->adj[o][i], v = m->edges[e].src == o ? m->edges[e].dst : m->edges[e].src;
    if (v == o || !dec[v]) continue;
    cost += m->edges[e].src == o ? sk_search_edge_cost(m, e, c, choice[v]) : sk_search_edge_cost(m, e, choice[v], c);
  }
  return cost;
}

/* The data-parallel plan semi_auto gives a network without strategies: each operator's rule
   default, found among its candidates by its layouts' cuts; false when one is not there. */
static bool dp_choice(sk_search_model *m, int *choice) {
  const sk_graph *g = m->graph;
  for (int o = 0; o < g->nops; o++) {
    sk_op_desc d;
    sk_op_plan p;
    if (sk_graph_op_desc(g, o, &d, NULL) || sk_op_plan_make(&d, m->desc.ndevices, &p, NULL)) return false;
    choice[o] = -1;
    for (int c = 0; c < m->ncands[o] && choice[o] < 0; c++) {
      const sk_search_cand *x = &m->cands[o][c];
      bool same = true;
      for (int k = 0; k < g->ops[o].ninputs && same; k++) {
        sk_search_sig s = sk_search_sig_of(&p.in[k]);
        same = !memcmp(&s, &x->in[k], sizeof s);
      }
      sk_search_sig s = sk_search_sig_of(&p.out[0]);
      if (same && !memcmp(&s, &x->out[0], sizeof s)) choice[o] = c;
    }
    if (choice[o] < 0) return false;
  }
  return true;
}

typedef struct tally {
  int rows, exact, prop_opt, drec_opt, seeded_opt, seeded_rows, prop_dp, drec_dp, seeded_worse, seeded_same;
  double prop_log, drec_log, prop_max, drec_max;
  char prop_worst[96], drec_worst[96];
  char notes[64][1024];
  int nnotes;
} tally;

static const char *unit(void) { return base_desc.cluster.link.gbps > 0 ? "us" : "B"; }

/* One row: graph g (its strategies already stripped) on n devices. */
static void quality_row(const sk_graph *g, const char *name, int n, tally *t) {
  sk_search_desc d = base_desc;
  d.ndevices = n;
  sk_search_model m, m2;
  die_on(sk_search_model_build(g, &d, &m, &E), &E, name);
  int no = g->nops;
  int *opt = (int *)calloc((size_t)no, sizeof(int)), *prop = (int *)calloc((size_t)no, sizeof(int));
  int *rec = (int *)calloc((size_t)no, sizeof(int)), *seed = (int *)calloc((size_t)no, sizeof(int));
  int *order = (int *)calloc((size_t)no, sizeof(int)), *dp = (int *)calloc((size_t)no, sizeof(int));
  bool *dec = (bool *)calloc((size_t)no, sizeof(bool));
  if (!opt || !prop || !rec || !seed || !order || !dec || !dp) exit(1);
  double dc = dp_choice(&m, dp) ? sk_search_plan_cost(&m, dp) : NAN;
  double combos = 1;
  for (int o = 0; o < no; o++) combos *= m.ncands[o];
  double t0 = now_ms();
  sk_result rx = sk_search_exhaustive(&m, opt, &E);
  double t1 = now_ms();
  die_on(sk_search_propagate(&m, prop, &E), &E, "propagate");
  double t2 = now_ms();
  die_on(sk_search_recursive(&m, rec, &E), &E, "recursive");
  double t3 = now_ms();
  double pc = sk_search_plan_cost(&m, prop), rc = sk_search_plan_cost(&m, rec);
  char key[96];
  snprintf(key, sizeof key, "%s@%d", name, n);
  if (rx) {
    printf("%-24s %3d %3d %9.3g %12s %12.6g %7s %12.6g %7s %12.6g %7s %8s %8.2f %8.2f  exhaustive refused: %s\n", name, no,
           n, combos, "-", pc, "-", rc, "-", dc, "-", "-", t2 - t1, t3 - t2, E.msg);
    sk_search_model_free(&m);
    free(opt), free(prop), free(rec), free(seed), free(order), free(dec), free(dp);
    return;
  }
  double oc = sk_search_plan_cost(&m, opt);
  double pr = oc > 0 ? pc / oc : (pc > 0 ? INFINITY : 1), rr = oc > 0 ? rc / oc : (rc > 0 ? INFINITY : 1);
  t->rows++, t->exact++;
  t->prop_opt += pr <= 1 + 1e-9, t->drec_opt += rr <= 1 + 1e-9;
  t->prop_log += log(pr), t->drec_log += log(rr);
  t->prop_dp += pc > dc * (1 + 1e-9), t->drec_dp += rc > dc * (1 + 1e-9); /* a search worse than data parallel */
  if (pr > t->prop_max) t->prop_max = pr, snprintf(t->prop_worst, sizeof t->prop_worst, "%s", key);
  if (rr > t->drec_max) t->drec_max = rr, snprintf(t->drec_worst, sizeof t->drec_worst, "%s", key);

  /* propagation from the optimum's strategy on the heaviest operator */
  int h = heaviest(g);
  sk_graph g2;
  die_on(sk_graph_micro(g, 1, &g2, &E), &E, "copy");
  die_on(sk_search_apply(&m, h, &m.cands[h][opt[h]], &g2.ops[h].desc, &E), &E, "apply");
  die_on(sk_search_model_build(&g2, &d, &m2, &E), &E, "seeded model");
  die_on(sk_search_propagate(&m2, seed, &E), &E, "seeded propagate");
  /* the seeded model's own optimum must be the optimum: its configured operator costs as that candidate did */
  int *opt2 = (int *)calloc((size_t)no, sizeof(int));
  if (opt2 && !sk_search_exhaustive(&m2, opt2, &E)) {
    double c2 = sk_search_plan_cost(&m2, opt2);
    t->seeded_same += fabs(c2 - oc) <= 1e-9 * (oc > 0 ? oc : 1);
  }
  free(opt2);
  double sc = sk_search_plan_cost(&m2, seed), sr = oc > 0 ? sc / oc : (sc > 0 ? INFINITY : 1);
  bool reached = sr <= 1 + 1e-9;
  t->seeded_rows++, t->seeded_opt += reached, t->seeded_worse += sc > pc * (1 + 1e-9);
  printf("%-24s %3d %3d %9.3g %12.6g %12.6g %7.3f %12.6g %7.3f %12.6g %7.3f %8.2f %8.2f %8.2f  %-10s %7.3f %s\n", name, no, n,
         combos, oc, pc, pr, rc, rr, dc, oc > 0 ? dc / oc : NAN, t1 - t0, t2 - t1, t3 - t2, g->ops[h].name, sr,
         reached ? "yes" : "NO");
  if (!reached && t->nnotes < 64) {
    int k = walk_order(&m2, order), first = -1, at = 0;
    for (int o = 0; o < no; o++) dec[o] = m2.configured[o];
    for (int i = 0; i < k && first < 0; i++) {
      int o = order[i];
      if (seed[o] != opt[o]) first = o, at = i;
      else dec[o] = true;
    }
    char *note = t->notes[t->nnotes++];
    if (first < 0) {
      snprintf(note, sizeof t->notes[0], "%s: seeded propagation differs only in ties?", key);
    } else {
      /* the optimum's choices of the operators decided before `first` are propagation's */
      char sa[160], sb[160];
      sk_search_format_strategy(&m2, first, &m2.cands[first][seed[first]], sa, sizeof sa);
      sk_search_format_strategy(&m2, first, &m2.cands[first][opt[first]], sb, sizeof sb);
      double la = local_cost(&m2, first, seed[first], dec, seed), lb = local_cost(&m2, first, opt[first], dec, seed);
      snprintf(note, sizeof t->notes[0],
               "%s: seeded at %s; first differs at %s (decided %d of %d): chose %s at %.6g %s against its decided "
               "neighbours, the optimum's %s costs %.6g %s there; plan %.6g vs optimum %.6g %s",
               key, g->ops[h].name, g->ops[first].name, at + 1, k, sa, la, unit(), sb, lb, unit(), sc, oc, unit());
    }
  }
  sk_search_model_free(&m2);
  sk_graph_free(&g2);
  sk_search_model_free(&m);
  free(opt), free(prop), free(rec), free(seed), free(order), free(dec), free(dp);
}

static const char *const tutorial_files[] = {"recursive_programming.json", "operator_parallel.json"};

/* Network `file` from folder `nets` into g, with its strategies cleared when `stripped`. */
static void load_net(const char *nets, const char *file, sk_graph *g, bool stripped) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", nets, file);
  sk_graph_init(g);
  die_on(sk_json_load_network(path, g, &E), &E, path);
  if (stripped) strip(g);
}

static int quality(const char *nets, int mlps) {
  static const int devs[] = {2, 4, 8};
  tally *t = (tally *)calloc(1, sizeof *t);
  if (!t) return 1;
  printf("# search_perf quality: plan cost (%s; link %.3g us, %.3g GB/s, device_tflops %.3g) of each search over the\n"
         "# exhaustive optimum; data_par = semi_auto's data-parallel plan (the rules' defaults) in the same model;\n"
         "# seeded = sharding_propagation from the optimum's strategy on the heaviest op\n",
         unit(), base_desc.cluster.link.alpha_us, base_desc.cluster.link.gbps, base_desc.cluster.device_flops * 1e-12);
  printf("%-24s %3s %3s %9s %12s %12s %7s %12s %7s %12s %7s %8s %8s %8s  %-10s %7s %s\n", "# graph", "ops", "dev", "combos",
         "optimum", "propagation", "ratio", "D-Rec", "ratio", "data_par", "ratio", "exh_ms", "prop_ms", "drec_ms",
         "seeded_at", "ratio", "reached");
  for (int s = 0; s < mlps; s++) {
    sk_graph g;
    char desc[96], name[128];
    build_mlp(&g, s, desc, sizeof desc);
    snprintf(name, sizeof name, "mlp%02d:%s", s, desc);
    for (int i = 0; i < 3; i++) quality_row(&g, name, devs[i], t);
    sk_graph_free(&g);
  }
  for (int f = 0; f < 2; f++) {
    sk_graph g;
    load_net(nets, tutorial_files[f], &g, true);
    for (int i = 0; i < 3; i++) quality_row(&g, tutorial_files[f], devs[i], t);
    sk_graph_free(&g);
  }
  sk_graph g;
  build_transformer(&g, 1, 16, 8, 32, 4, 128, 16);
  for (int i = 0; i < 3; i++) quality_row(&g, "transformer_block", devs[i], t);
  sk_graph_free(&g);
  printf("# %d rows with the optimum: propagation optimal on %d, geomean ratio %.4f, worst %.4f (%s); D-Rec optimal on %d, "
         "geomean %.4f, worst %.4f (%s)\n",
         t->exact, t->prop_opt, exp(t->prop_log / (t->exact ? t->exact : 1)), t->prop_max, t->prop_worst, t->drec_opt,
         exp(t->drec_log / (t->exact ? t->exact : 1)), t->drec_max, t->drec_worst);
  printf("# costlier than the data-parallel plan: propagation on %d rows, D-Rec on %d\n", t->prop_dp, t->drec_dp);
  printf("# seeded propagation reached the optimum on %d of %d; it was costlier than unseeded propagation on %d; the\n"
         "# exact search on the seeded model found the same optimum on %d of %d (the configured strategy costs the same)\n",
         t->seeded_opt, t->seeded_rows, t->seeded_worse, t->seeded_same, t->seeded_rows);
  for (int i = 0; i < t->nnotes; i++) printf("#   %s\n", t->notes[i]);
  free(t);
  return 0;
}

/* ---- the large transformer -------------------------------------------------------------------- */

/* Per operator kind: operators, candidates, joint dims; and the redistribution cache's pairs
   (each pair measured over every rank once). */
static void kinds_of(const sk_search_model *m, const char *who, char *buf, size_t cap) {
  const sk_graph *g = m->graph;
  size_t at = 0;
  long nops[64] = {0}, ncands[64] = {0};
  int joint[64] = {0};
  for (int o = 0; o < g->nops; o++) {
    int k = (int)g->ops[o].desc.kind & 63;
    nops[k]++, ncands[k] += m->ncands[o], joint[k] = m->njoint[o];
  }
  if (!strcmp(who, "D-Rec"))
    for (int k = 0; k < 64; k++)
      if (nops[k])
        at += (size_t)snprintf(buf + (at < cap ? at : cap), at < cap ? cap - at : 0, "#   %-20s %5ld ops %8ld candidates %d joint\n",
                               sk_op_kind_name((sk_op_kind)k), nops[k], ncands[k], joint[k]);
  snprintf(buf + (at < cap ? at : cap), at < cap ? cap - at : 0, "#   after %s: %zu (from, to) pairs cached\n", who,
           sk_search_cached_pairs(m));
}

static int scale(int layers, int devices, int runs) {
  sk_graph g;
  double tg = now_ms();
  build_transformer(&g, layers, 4096, 128, 1024, 16, 4096, 1024);
  tg = now_ms() - tg;
  sk_search_desc d = base_desc;
  d.ndevices = devices;
  static char kinds[2][4096];
  double build[2][32], search[2][32], cbuild[2][32], csearch[2][32], cost[2] = {0, 0};
  long cands = 0;
  int nedges = 0;
  int *choice = (int *)calloc((size_t)g.nops, sizeof(int));
  if (!choice) return 1;
  for (int r = 0; r < runs; r++)
    for (int s = 0; s < 2; s++) { /* D-Rec, then propagation: each from a fresh model */
      sk_search_model m;
      double t0 = now_ms(), c0 = cpu_ms();
      die_on(sk_search_model_build(&g, &d, &m, &E), &E, "model");
      double t1 = now_ms(), c1 = cpu_ms();
      die_on(s == 0 ? sk_search_recursive(&m, choice, &E) : sk_search_propagate(&m, choice, &E), &E, "search");
      double t2 = now_ms(), c2 = cpu_ms();
      build[s][r] = t1 - t0, search[s][r] = t2 - t1, cbuild[s][r] = c1 - c0, csearch[s][r] = c2 - c1;
      cost[s] = sk_search_plan_cost(&m, choice);
      if (r == 0) kinds_of(&m, s ? "propagation" : "D-Rec", kinds[s], sizeof kinds[s]);
      cands = 0;
      for (int o = 0; o < g.nops; o++) cands += m.ncands[o];
      nedges = m.nedges;
      sk_search_model_free(&m);
    }
  printf("# search_perf scale: %d-layer transformer (batch 4096 x seq 128, hidden 1024, 16 heads, FFN 4096), %d ops, %d "
         "edges, %ld candidates, %d devices; graph built in %.1f ms (not counted); median of %d runs; wall and CPU ms\n",
         layers, g.nops, nedges, cands, devices, tg, runs);
  printf("%-24s %10s %10s %10s %10s %10s %10s %10s %4s %14s\n", "# search", "build", "build_cpu", "search", "search_cpu",
         "total", "total_cpu", "target", "met", "plan_cost");
  const char *names[2] = {"recursive_programming", "sharding_propagation"};
  double target[2] = {1000, 5000};
  for (int s = 0; s < 2; s++) {
    double tot[32], ctot[32];
    for (int r = 0; r < runs; r++) tot[r] = build[s][r] + search[s][r], ctot[r] = cbuild[s][r] + csearch[s][r];
    double b = median(build[s], runs), se = median(search[s], runs), cb = median(cbuild[s], runs);
    double cs = median(csearch[s], runs), to = median(tot, runs), cto = median(ctot, runs);
    printf("%-24s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.0f %4s %14.6g\n", names[s], b, cb, se, cs, to, cto, target[s],
           to <= target[s] ? "yes" : (cto <= target[s] ? "cpu" : "NO"), cost[s]);
  }
  printf("# where the candidates are (kind: operators, candidates, joint dims) and the redistribution cache:\n%s%s",
         kinds[0], kinds[1]);
  free(choice);
  sk_graph_free(&g);
  return 0;
}

/* --scale L --write-net FILE: the same transformer as network JSON, for build/sk-sim --net (its
   dry run at thousands of devices; bench/nets/transformer96.json is the 96-layer one). */
static int write_net(int layers, const char *path) {
  sk_graph g;
  build_transformer(&g, layers, 4096, 128, 1024, 16, 4096, 1024);
  /* trained as examples/nets/transformer.json is: its token dataset, evaluation and optimizer */
  int logits = -1;
  for (int o = 0; o < g.nops; o++)
    if (!strcmp(g.ops[o].name, "logits")) logits = g.ops[o].outputs[0];
  snprintf(g.dataset, sizeof g.dataset, "sequences");
  g.optim.kind = SK_OPTIM_ADAM, g.optim.lr = 0.003;
  sk_result r = sk_graph_set_eval(&g, logits, 1 /* targets */, &E);
  if (r == SK_OK) r = sk_json_save_network(&g, path, &E);
  if (r == SK_OK)
    printf("search_perf: wrote %s: %d-layer transformer (batch 4096 x seq 128, hidden 1024, 16 heads, FFN 4096), %d "
           "operators, %d tensors\n",
           path, layers, g.nops, g.ntensors);
  else
    fprintf(stderr, "search_perf: --write-net %s: %s\n", path, E.msg);
  sk_graph_free(&g);
  return r == SK_OK ? 0 : 1;
}

/* ---- dry-run prices: every plan compiled and priced by the dry run --------------------------- */

/* What the search cost model says matters less than what the runtime's clocks say: here each
   plan is compiled (sk_parallel_compile, sk_finalists_compile) and priced by the dry run
   (sk_dryrun_step_time) on the same cluster, so the ratios are step-time ratios. */

typedef struct mode_price {
  double search_us, kept_us, ms; /* the search's own plan, the kept plan (NAN: not priced); compile wall ms */
  sk_finalist_kind kept;
} mode_price;

typedef struct price_tally {
  int rows, exhaustive, dearer[2]; /* rows; rows refereed by exhaustive; kept plans dearer than data parallel */
  int exh_dearer;                   /* rows where the referee itself is dearer than data parallel */
  double best;                      /* this row's cheapest plan priced, of all (the referee's included) */
  double log[2], log_search[2], log_best[2], max[2];
  char worst[2][96];
} price_tally;

static const char *const mode_short[2] = {"propagation", "D-Rec"};
static const sk_parallel_mode price_modes[2] = {SK_PARALLEL_SHARDING_PROPAGATION, SK_PARALLEL_RECURSIVE_PROGRAMMING};

static sk_autoparallel price_desc(int n, sk_parallel_mode mode) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = n, d.mode = mode, d.cluster = base_desc.cluster, d.exhaustive_limit = base_desc.exhaustive_limit;
  return d;
}

/* The dry run's step time of plan p, NAN when it refuses (its reason in E). */
static double step_us_of(const sk_parallel_plan *p) {
  sk_dryrun_time t;
  memset(&t, 0, sizeof t);
  return sk_dryrun_step_time(p, &t, &E) ? NAN : t.step_us;
}

/* One search mode through the finalists; *dp_us gets data parallel's price (NAN: not priced). */
static void price_mode(const sk_graph *g, int n, sk_parallel_mode mode, mode_price *out, double *dp_us) {
  sk_autoparallel d = price_desc(n, mode);
  sk_parallel_plan p;
  sk_finalists f;
  out->search_us = out->kept_us = NAN, out->kept = SK_FINALIST_SEARCH;
  double t0 = now_ms();
  sk_result r = sk_finalists_compile(g, &d, &p, &f, &E);
  out->ms = now_ms() - t0;
  if (r) {
    fprintf(stderr, "search_perf: %s on %d devices: %s\n", sk_parallel_mode_name(mode), n, E.msg);
    return;
  }
  const sk_finalist *s = &f.f[SK_FINALIST_SEARCH], *dp = &f.f[SK_FINALIST_DATA_PARALLEL];
  out->search_us = s->priced ? s->step_us : NAN;
  out->kept = f.kept, out->kept_us = f.f[f.kept].priced ? f.f[f.kept].step_us : step_us_of(&p);
  if (dp->priced) *dp_us = dp->step_us;
  sk_parallel_free(&p);
}

/* The referee: exhaustive's plan priced by the dry run; false (with *ms its time) when
   exhaustive refuses (its work bound) or its plan is not priced. */
static bool price_exhaustive(const sk_graph *g, int n, double *us, double *ms) {
  sk_autoparallel d = price_desc(n, SK_PARALLEL_EXHAUSTIVE);
  sk_parallel_plan p;
  double t0 = now_ms();
  sk_result r = sk_parallel_compile(g, &d, &p, &E);
  *ms = now_ms() - t0;
  if (r) return false;
  *us = step_us_of(&p);
  sk_parallel_free(&p);
  return !isnan(*us);
}

static void price_count(price_tally *t, int k, double ratio, double search_ratio, double kept, double dp, const char *key) {
  t->log[k] += log(ratio), t->log_search[k] += log(search_ratio);
  t->log_best[k] += log(kept / t->best);
  t->dearer[k] += kept > dp * (1 + 1e-9); /* the finalists include data parallel: never expected */
  if (ratio > t->max[k]) t->max[k] = ratio, snprintf(t->worst[k], sizeof t->worst[k], "%s", key);
}

/* One row: g on n devices, each mode's kept plan and data parallel over the referee, exhaustive
   on free_g (g, or g with its strategies cleared: the optimum not held to them). */
static void price_row(const sk_graph *g, const sk_graph *free_g, const char *name, int n, price_tally *t) {
  mode_price mp[2];
  double dp = NAN, ref = NAN, exh_ms = 0;
  for (int k = 0; k < 2; k++) price_mode(g, n, price_modes[k], &mp[k], &dp);
  bool exact = price_exhaustive(free_g, n, &ref, &exh_ms);
  if (!exact) /* the cheapest plan priced stands in, labelled */
    ref = fmin(fmin(mp[0].kept_us, mp[1].kept_us), fmin(mp[0].search_us, mp[1].search_us));
  char key[96];
  snprintf(key, sizeof key, "%s@%d", name, n);
  printf("%-36s %3d %3d %11.4g %-10s %11.4g %6.3f", name, g->nops, n, ref, exact ? "exhaustive" : "cheapest", dp, dp / ref);
  for (int k = 0; k < 2; k++)
    printf(" %11.4g %11.4g %-13s %6.3f", mp[k].search_us, mp[k].kept_us, sk_finalist_name(mp[k].kept, price_modes[k]),
           mp[k].kept_us / ref);
  printf(" %8.1f %8.1f %8.1f\n", mp[0].ms, mp[1].ms, exh_ms);
  if (isnan(ref) || isnan(mp[0].kept_us) || isnan(mp[1].kept_us)) return; /* said on stderr */
  t->rows++, t->exhaustive += exact, t->exh_dearer += exact && !isnan(dp) && ref > dp * (1 + 1e-9);
  t->best = fmin(fmin(ref, isnan(dp) ? INFINITY : dp), fmin(mp[0].kept_us, mp[1].kept_us));
  for (int k = 0; k < 2; k++)
    price_count(t, k, mp[k].kept_us / ref, (isnan(mp[k].search_us) ? mp[k].kept_us : mp[k].search_us) / ref, mp[k].kept_us,
                isnan(dp) ? INFINITY : dp, key);
}

static void price_summary(const char *set, const price_tally *t, const double *target) {
  int rows = t->rows ? t->rows : 1;
  printf("# %s: %d rows, referee exhaustive on %d, the cheapest priced plan on %d; exhaustive's plan dearer than data "
         "parallel on %d\n",
         set, t->rows, t->exhaustive, t->rows - t->exhaustive, t->exh_dearer);
  for (int k = 0; k < 2; k++) {
    double gm = exp(t->log[k] / rows);
    printf("# %s: %s kept geomean %.4f (target %.2f: %s), worst %.4f (%s), its own plan's geomean %.4f; kept dearer than "
           "data parallel on %d rows; over the cheapest plan priced %.4f\n",
           set, mode_short[k], gm, target[k], gm <= target[k] ? "met" : "NOT met", t->max[k], t->worst[k],
           exp(t->log_search[k] / rows), t->dearer[k], exp(t->log_best[k] / rows));
  }
}

/* The named networks, as shipped (their own strategies are the semi_auto finalist). */
static const struct {
  const char *file;
  int devices;
} named_nets[] = {{"four_matmul.json", 16},
                  {"dense_mutmul.json", 8},
                  {"recursive_programming.json", 8},
                  {"operator_parallel.json", 8},
                  {"megatron_block.json", 8}};

static int prices(const char *nets, int mlps) {
  static const int devs[] = {2, 4, 8};
  static const double target[2] = {1.1, 1.25};
  price_tally q, named;
  memset(&q, 0, sizeof q), memset(&named, 0, sizeof named);
  printf("# search_perf dry-run prices: each plan compiled and priced by the dry run (us per step; link %.3g us, %.3g GB/s,\n"
         "# device_tflops %.3g); ratios over the referee (exhaustive's plan, or the cheapest priced plan where exhaustive\n"
         "# refuses); search = the mode's own plan, kept = the plan sk_finalists_compile keeps; the named networks\n"
         "# (shipped) keep their own strategies (the semi_auto finalist), their referee is exhaustive without them\n",
         base_desc.cluster.link.alpha_us, base_desc.cluster.link.gbps, base_desc.cluster.device_flops * 1e-12);
  printf("%-36s %3s %3s %11s %-10s %11s %6s %11s %11s %-13s %6s %11s %11s %-13s %6s %8s %8s %8s\n", "# graph", "ops", "dev",
         "referee", "by", "data_par", "ratio", "prop_search", "prop_kept", "prop_kept_by", "ratio", "drec_search",
         "drec_kept", "drec_kept_by", "ratio", "prop_ms", "drec_ms", "exh_ms");
  for (int s = 0; s < mlps; s++) {
    sk_graph g;
    char desc[96], name[128];
    build_mlp(&g, s, desc, sizeof desc);
    snprintf(name, sizeof name, "mlp%02d:%s", s, desc);
    for (int i = 0; i < 3; i++) price_row(&g, &g, name, devs[i], &q);
    sk_graph_free(&g);
  }
  for (int f = 0; f < 2; f++) {
    sk_graph g;
    load_net(nets, tutorial_files[f], &g, true);
    for (int i = 0; i < 3; i++) price_row(&g, &g, tutorial_files[f], devs[i], &q);
    sk_graph_free(&g);
  }
  sk_graph g;
  build_transformer(&g, 1, 16, 8, 32, 4, 128, 16);
  for (int i = 0; i < 3; i++) price_row(&g, &g, "transformer_block", devs[i], &q);
  sk_graph_free(&g);
  for (size_t f = 0; f < sizeof named_nets / sizeof named_nets[0]; f++) {
    char name[64];
    snprintf(name, sizeof name, "%.40s(shipped)", named_nets[f].file);
    sk_graph free_g;
    load_net(nets, named_nets[f].file, &g, false);
    load_net(nets, named_nets[f].file, &free_g, true);
    price_row(&g, &free_g, name, named_nets[f].devices, &named);
    sk_graph_free(&g), sk_graph_free(&free_g);
  }
  price_summary("quality set", &q, target);
  price_summary("named networks", &named, target);
  return 0;
}

/* Plan p's dry-run price, its wall and CPU ms in ms[0], ms[1]. */
static double timed_price(const sk_parallel_plan *p, double *ms) {
  double t0 = now_ms(), c0 = cpu_ms(), us = step_us_of(p);
  ms[0] = now_ms() - t0, ms[1] = cpu_ms() - c0;
  if (isnan(us)) fprintf(stderr, "search_perf: the dry run refused a plan: %s\n", E.msg);
  return us;
}

/* g compiled under d into *p, its wall and CPU ms in ms[0], ms[1]. */
static void timed_compile(const sk_graph *g, const sk_autoparallel *d, sk_parallel_plan *p, double *ms) {
  double t0 = now_ms(), c0 = cpu_ms();
  die_on(sk_parallel_compile(g, d, p, &E), &E, sk_parallel_mode_name(d->mode));
  ms[0] = now_ms() - t0, ms[1] = cpu_ms() - c0;
}

/* --scale L --dry-run-prices: data parallel's plan compiled and priced once, then each search's
   plan compiled alone (model build, search, plan) and priced, each step timed and printed as it
   ends (pricing at thousands of devices can take long); the finalists' pricing is the search's
   plan's dry run plus data parallel's compile and dry run (the network has no strategies of its
   own). Then sk_finalists_compile for the plan it keeps. */
static int scale_prices(int layers, int devices) {
  sk_graph g;
  build_transformer(&g, layers, 4096, 128, 1024, 16, 4096, 1024);
  double kept[2] = {NAN, NAN}, cms[2], pms[2], dms[2], dpms[2];
  printf("# search_perf scale prices: %d-layer transformer, %d ops, %d devices, link %.3g us %.3g GB/s, device_tflops %.3g;\n"
         "# plan prices by the dry run (us per step); times in ms, wall / CPU\n",
         layers, g.nops, devices, base_desc.cluster.link.alpha_us, base_desc.cluster.link.gbps,
         base_desc.cluster.device_flops * 1e-12);
  sk_autoparallel d = price_desc(devices, SK_PARALLEL_SEMI_AUTO);
  sk_parallel_plan p;
  timed_compile(&g, &d, &p, dms);
  double dp = timed_price(&p, dpms);
  sk_parallel_free(&p);
  printf("# data_parallel: compiled in %.1f / %.1f, priced in %.1f / %.1f: %.6g us\n", dms[0], dms[1], dpms[0], dpms[1], dp);
  for (int k = 0; k < 2; k++) {
    d = price_desc(devices, price_modes[k]);
    timed_compile(&g, &d, &p, cms);
    printf("# %s: searched in %.1f (wall), compiled in %.1f / %.1f; pricing its plan...\n", sk_parallel_mode_name(d.mode),
           p.search_ms, cms[0], cms[1]);
    fflush(stdout); /* a line at a time: a run stopped by a timeout still says how far it got */
    double own = timed_price(&p, pms);
    sk_parallel_free(&p);
    sk_finalists f;
    die_on(sk_finalists_compile(&g, &d, &p, &f, &E), &E, "finalists");
    sk_parallel_free(&p);
    kept[k] = f.f[f.kept].priced ? f.f[f.kept].step_us : NAN;
    printf("# %s: plan priced in %.1f / %.1f: %.6g us; finalists' pricing (this plus data parallel's compile and price) "
           "%.1f / %.1f (target 10000: %s); kept %s at %.6g us\n",
           sk_parallel_mode_name(d.mode), pms[0], pms[1], own, pms[0] + dms[0] + dpms[0], pms[1] + dms[1] + dpms[1],
           pms[0] + dms[0] + dpms[0] <= 10000 ? "met" : (pms[1] + dms[1] + dpms[1] <= 10000 ? "cpu" : "NOT met"),
           sk_finalist_name(f.kept, d.mode), kept[k]);
    fflush(stdout);
  }
  double r = kept[1] / kept[0];
  printf("# D-Rec's kept plan over propagation's: %.4f (target 1.5: %s); data parallel over propagation's: %.4f\n", r,
         r <= 1.5 ? "met" : "NOT met", dp / kept[0]);
  sk_graph_free(&g);
  return 0;
}

/* ---- main ------------------------------------------------------------------------------------- */

static void usage(FILE *f, const char *path) {
  fprintf(f,
          "Usage: %s [--nets DIR] [--mlps N] [--dry-run-prices] [--exhaustive-limit S] [--link A,G] [--device-tflops T]\n"
          "       %s --scale [LAYERS] [--devices N] [--runs R] [--dry-run-prices] [--link A,G] [--device-tflops T]\n"
          "       %s --scale [LAYERS] --write-net FILE.json\n"
          "       %s --strip IN.json OUT.json\n"
          "The strategy searches (sk_search.h) against the exhaustive optimum: N random MLPs (default 20), the\n"
          "tutorial networks from DIR (default examples/nets) stripped of strategies and one transformer block,\n"
          "on 2, 4 and 8 devices. --scale: a LAYERS-layer transformer (default 96) on N devices (default 4096):\n"
          "model build and search times of D-Rec and propagation, median of R runs (default 3); with\n"
          "--write-net, that transformer written as network JSON for build/sk-sim --net instead.\n"
          "--strip: write IN with every operator's strategy cleared. Costs under --link A,G (default 5,25: us\n"
          "latency, GB/s; 0,0 counts bytes), plus compute with --device-tflops.\n"
          "--dry-run-prices: every plan compiled and priced by the dry run instead: each search's kept plan\n"
          "(sk_finalists_compile) and data parallel over the referee, exhaustive's plan (work bound\n"
          "--exhaustive-limit S steps, 0: the search's default) or the cheapest priced plan where it\n"
          "refuses; the quality set plus the named networks four_matmul (16 devices), dense_mutmul,\n"
          "recursive_programming, operator_parallel and megatron_block (8) as shipped. With --scale: both\n"
          "searches' prices on the transformer and the finalists' pricing time.\n"
          "  -h,--help   this text\n",
          path, path, path, path);
}

int main(int argc, char **argv) {
  const char *nets = "examples/nets";
  const char *out = NULL;
  int mlps = 20, layers = 0, devices = 4096, runs = 3;
  bool priced = false;
  base_desc.cluster.link.alpha_us = 5, base_desc.cluster.link.gbps = 25;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (prog_is_help(a)) return usage(stdout, argv[0]), 0;
    if (!strcmp(a, "--strip") && v && i + 2 < argc) {
      if (prog_refuse_launch(argv[0])) return 2;
      sk_graph g;
      sk_graph_init(&g);
      die_on(sk_json_load_network(v, &g, &E), &E, v);
      strip(&g);
      die_on(sk_json_save_network(&g, argv[i + 2], &E), &E, argv[i + 2]);
      sk_graph_free(&g);
      return 0;
    }
    if (!strcmp(a, "--dry-run-prices")) {
      priced = true;
      continue;
    }
    if (!strcmp(a, "--scale")) {
      layers = 96;
      if (v && v[0] >= '0' && v[0] <= '9') {
        char *end = NULL;
        long l = strtol(v, &end, 10);
        layers = *end || l > 1000 ? 0 : (int)l, i++;
      }
      if (layers < 1) return fprintf(stderr, "search_perf: --scale takes 1..1000 layers, not '%s'\n", v), 2;
      continue;
    }
    if (!v) return fprintf(stderr, "search_perf: '%s' needs a value or is unknown (see %s -h)\n", a, prog_name(argv[0])), 2;
    i++;
    if (!strcmp(a, "--nets")) nets = v;
    else if (!strcmp(a, "--mlps")) mlps = atoi(v);
    else if (!strcmp(a, "--devices")) devices = atoi(v);
    else if (!strcmp(a, "--runs")) runs = atoi(v);
    else if (!strcmp(a, "--write-net")) out = v;
    else if (!strcmp(a, "--exhaustive-limit")) base_desc.exhaustive_limit = atoll(v);
    else if (!strcmp(a, "--device-tflops")) base_desc.cluster.device_flops = atof(v) * 1e12;
    else if (!strcmp(a, "--link")) {
      if (sscanf(v, "%lf,%lf", &base_desc.cluster.link.alpha_us, &base_desc.cluster.link.gbps) != 2)
        return fprintf(stderr, "search_perf: --link takes A,G\n"), 2;
    } else
      return fprintf(stderr, "search_perf: unknown flag '%s' (see %s -h)\n", a, prog_name(argv[0])), 2;
  }
  if (base_desc.exhaustive_limit < 0) return fprintf(stderr, "search_perf: --exhaustive-limit takes 0 or more steps\n"), 2;
  if (mlps < 0 || mlps > 1000 || devices < 1 || devices > SK_MAX_DEVICES || runs < 1 || runs > 31)
    return fprintf(stderr, "search_perf: --mlps 0..1000, --devices 1..%d, --runs 1..31\n", SK_MAX_DEVICES), 2;
  if (out && !layers) return fprintf(stderr, "search_perf: --write-net writes the --scale transformer: give --scale\n"), 2;
  if (prog_refuse_launch(argv[0])) return 2;
  if (out) return write_net(layers, out);
  if (priced && base_desc.cluster.link.gbps <= 0)
    return fprintf(stderr, "search_perf: --dry-run-prices needs a priced --link (a bandwidth)\n"), 2;
  if (priced) return layers ? scale_prices(layers, devices) : prices(nets, mlps);
  return layers ? scale(layers, devices, runs) : quality(nets, mlps);
}
