/* sk_search.h -- strategy search: MindSpore's sharding_propagation and recursive_programming
   (D-Rec), and an exact search as their reference, all over the cost model of
   sk_search_cost.h. docs/strategy-search.md.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_SEARCH_IMPL + SK_SEARCH_COST_IMPL + ...)
                             #include "sk_search.h"
   Needs only libc. Pure planning; sk_parallel.h runs them for parallel_mode.

   Each search fills choice[o], operator o's candidate in m->cands[o]. Operators the network
   configured (m->configured) keep their one candidate.

   sk_search_propagate (sharding_propagation) -- from the configured operators, in the graph's
     order, then from the network's inputs (their dataset layouts count as configured, as
     MindSpore's VirtualDataset does), then from whatever is left: a breadth-first walk over the
     edges; each operator it reaches takes the candidate with the least sum of its own cost, its
     inputs' dataset moves and the edges to the operators already decided (so one reached from
     several sides weighs every side decided so far); ties go to the earlier candidate.
   sk_search_recursive (recursive_programming, D-Rec) -- the operators that contract (the MatMul
     family; every unconfigured one when there are none) are partitioned in one round
     per prime factor of the device count, largest first (4096: twelve rounds of 2; 12: a round
     of 3, then two of 2): each starts whole; in each round they are visited heaviest (forward
     FLOPs) first and each cuts one joint dim whose remaining extent the round's factor divides,
     choosing the dim with the least own cost plus the edges to operators already decided in this
     round (and to configured ones; two partitioned operators joined through shape-keeping
     element-wise operators count as neighbours) plus its inputs' dataset moves; one with no dim left repeats
     over the rest. The other operators (eliminated from MindSpore's recursive graph) then take
     their strategies by the propagation above, from the partitioned and configured ones. Last a
     memory check: the plan's bytes per device (sk_search_plan_memory) against
     desc.cluster.device_memory. The partitioned strategies are appended to the candidate lists when
     absent.
   sk_search_exhaustive -- the least plan cost over every combination of candidates, exactly: a
     dynamic programme over the operators in graph order whose state is the candidates of the
     operators decided so far that still have an undecided neighbour (the frontier). It first
     counts its work and refuses, naming the operator where the frontier grows too wide, a graph
     whose work passes desc.exhaustive_limit (default 4e9 steps: 15 to 40 s on this machine, at 1e8 to 2.5e8 steps a second).

   ERRORS: NULL, SK_ERR_INVALID_ARGUMENT (a refused exhaustive search, D-Rec's failed memory
   check, naming the bytes), SK_ERR_OUT_OF_MEMORY (nothing leaks; memory from the searched
   graph's allocator; also when the model's redistribution cache could not grow:
   sk_search_model.cache_failed).

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_SEARCH_IMPL)
#define SK_SEARCH_IMPL
#endif
#ifndef SK_SEARCH_H
#define SK_SEARCH_H

#include "sk_core.h"
#include "sk_search_cost.h"

SK_EXTERN_C_BEGIN

SK_API sk_result sk_search_propagate(sk_search_model *m, int *choice, sk_error *err);
SK_API sk_result sk_search_recursive(sk_search_model *m, int *choice, sk_error *err);
SK_API sk_result sk_search_exhaustive(sk_search_model *m, int *choice, sk_error *err);

SK_EXTERN_C_END
#endif /* SK_SEARCH_H */

#if defined(SK_SEARCH_IMPL) && !defined(SK_SEARCH_IMPL_DONE)
#define SK_SEARCH_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

static int sk__se_other(const sk_search_model *m, int e, int o) { return m->edges[e].src == o ? m->edges[e].dst : m->edges[e].src; }

/* The cost of operator o at candidate c against the operators `decided` marks, at `cur`. */
static double sk__se_against(sk_search_model *m, int o, const sk_search_cand *c, const bool *decided,
                             sk_search_cand *const *cur) {
  double cost = c->own + sk_search_input_cost_of(m, o, c);
  for (int i = 0; i < m->nadj[o]; i++) {
    int e = m->adj[o][i], n = sk__se_other(m, e, o);
    if (n == o || !decided[n]) continue;
    cost += m->edges[e].src == o ? sk_search_edge_cost_of(m, e, c, cur[n]) : sk_search_edge_cost_of(m, e, cur[n], c);
  }
  return cost;
}

/* The searches' scratch comes from the graph's allocator, through the model's helpers
   (SK__SC_CALLOC, sk__sc_free, sk__sc_grow: sk_search_cost.h). A search whose pricing could not
   grow the redistribution cache still chose right, but reports the failure (r SK_OK only). */
static sk_result sk__se_priced(const sk_search_model *m, sk_result r, sk_error *err) {
  if (r || !m->cache_failed) return r;
  return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the redistribution cache");
}

/* ---- sharding propagation ---------------------------------------------------------------------- */

typedef struct sk__se_walk {
  sk_search_model *m;
  int *choice, *queue;
  bool *decided;
  sk_search_cand **cur;
} sk__se_walk;

static void sk__se_choose(sk__se_walk *w, int o) {
  sk_search_model *m = w->m;
  double best = DBL_MAX;
  int pick = 0;
  for (int c = 0; c < m->ncands[o]; c++) {
    double cost = sk__se_against(m, o, &m->cands[o][c], w->decided, w->cur);
    if (cost < best) best = cost, pick = c;
  }
  w->choice[o] = pick, w->cur[o] = &m->cands[o][pick], w->decided[o] = true;
}

/* Breadth first from root (decided): every undecided neighbour chooses, then spreads. */
static void sk__se_spread(sk__se_walk *w, int root) {
  int head = 0, tail = 0;
  w->queue[tail++] = root;
  while (head < tail) {
    int u = w->queue[head++];
    for (int i = 0; i < w->m->nadj[u]; i++) {
      int v = sk__se_other(w->m, w->m->adj[u][i], u);
      if (w->decided[v]) continue;
      sk__se_choose(w, v);
      w->queue[tail++] = v;
    }
  }
}

static bool sk__se_reads_input(const sk_graph *g, int o) {
  for (int k = 0; k < g->ops[o].ninputs; k++)
    if (g->tensors[g->ops[o].inputs[k]].role == SK_TENSOR_INPUT) return true;
  return false;
}

/* The walk, from the operators `fixed` marks (NULL: the configured ones; their choice set; a
   configured operator's is its one candidate): each, in the graph's order, then the network's inputs, then whatever no edge
   reached. */
static sk_result sk__se_propagate(sk_search_model *m, int *choice, const bool *fixed, sk_error *err) {
  sk_result r = sk_search_model_candidates(m, err);
  if (r) return r;
  int n = m->graph->nops;
  sk__se_walk w = {m, choice, (int *)SK__SC_CALLOC(m, (size_t)n + 1, sizeof(int)),
                   (bool *)SK__SC_CALLOC(m, (size_t)n + 1, sizeof(bool)),
                   (sk_search_cand **)SK__SC_CALLOC(m, (size_t)n + 1, sizeof(sk_search_cand *))};
  if (!w.queue || !w.decided || !w.cur) {
    sk__sc_free(m, w.queue), sk__sc_free(m, w.decided), sk__sc_free(m, w.cur);
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the propagation");
  }
  for (int o = 0; o < n; o++) {
    if (m->configured[o]) choice[o] = 0; /* its one candidate */
    if (fixed ? fixed[o] : m->configured[o]) w.cur[o] = &m->cands[o][choice[o]], w.decided[o] = true;
  }
  for (int o = 0; o < n; o++)
    if (fixed ? fixed[o] : m->configured[o]) sk__se_spread(&w, o);
  for (int pass = 0; pass < 2; pass++) /* from the dataset, then from what no edge reached */
    for (int o = 0; o < n; o++)
      if (!w.decided[o] && (pass == 1 || sk__se_reads_input(m->graph, o))) sk__se_choose(&w, o), sk__se_spread(&w, o);
  sk__sc_free(m, w.queue), sk__sc_free(m, w.decided), sk__sc_free(m, w.cur);
  return SK_OK;
}

SK_API sk_result sk_search_propagate(sk_search_model *m, int *choice, sk_error *err) {
  if (!m || !m->graph || !choice) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: propagate: NULL argument");
  return sk__se_priced(m, sk__se_propagate(m, choice, NULL, err), err);
}

/* ---- recursive programming (D-Rec) ------------------------------------------------------------- */

static int sk__se_primes(int n, int *f) { /* largest first */
  int k = 0;
  for (int p = 2; n > 1; p++)
    while (n % p == 0) f[k++] = p, n /= p;
  for (int i = 0; i < k / 2; i++) {
    int t = f[i];
    f[i] = f[k - 1 - i], f[k - 1 - i] = t;
  }
  return k;
}

/* The operators D-Rec partitions: those that contract (the MatMul family), whose cuts decide a
   network's communication; the others take their strategies from them afterwards, as the
   operators MindSpore's recursive graph eliminates do. (A Gather partitioned on its own cuts the
   embedding's hidden dim, where nothing is replicated, and every layer after it pays the move.) */
static bool sk__se_computes(const sk_graph *g, int o) {
  return (sk_op_row_of(g->ops[o].desc.kind)->flags & SK_OPF_CONTRACTS) != 0;
}

static double sk__se_weight(const sk_graph *g, int o) {
  const sk_graph_op *op = &g->ops[o];
  sk_exec_arg in[1], out[1];
  memset(in, 0, sizeof in), memset(out, 0, sizeof out);
  if (op->ninputs) in[0].ndims = g->tensors[op->inputs[0]].ndims, memcpy(in[0].shape, g->tensors[op->inputs[0]].shape, sizeof in[0].shape);
  out[0].ndims = g->tensors[op->outputs[0]].ndims, memcpy(out[0].shape, g->tensors[op->outputs[0]].shape, sizeof out[0].shape);
  return sk_exec_flops(op, in, out, false);
}

typedef struct sk__se_ranked {
  double weight;
  int op;
} sk__se_ranked;

/* A tensor from one partitioned operator's output to another's input through operators
   eliminated from the recursive graph that keep its shape (element-wise ones): MindSpore's
   recursive graph joins the two directly. */
typedef struct sk__se_link {
  int src, src_slot, dst, dst_slot, tensor;
} sk__se_link;

typedef struct sk__se_drec {
  sk_search_model *m;
  bool *rec; /* the operators the rounds partition (the others follow by propagation) */
  sk__se_link *links;
  int nlinks;
  sk_search_cand *state; /* [nops]: each operator's strategy so far */
  sk_search_cand **cur;
  bool *decided;
  sk__se_ranked *order;
} sk__se_drec;

static int sk__se_heavier(const void *a, const void *b) { /* heaviest first; the graph's order among equals */
  const sk__se_ranked *x = (const sk__se_ranked *)a, *y = (const sk__se_ranked *)b;
  if (x->weight != y->weight) return x->weight > y->weight ? -1 : 1;
  return (x->op > y->op) - (x->op < y->op);
}

/* Whether operator o passes input 0's shape through unchanged, element by element. */
static bool sk__se_passes(const sk_graph *g, int o) {
  const sk_graph_op *op = &g->ops[o];
  if (!(sk_op_row_of(op->desc.kind)->flags & SK_OPF_KEEPS_SHAPE)) return false;
  const sk_graph_tensor *x = &g->tensors[op->inputs[0]], *y = &g->tensors[op->outputs[0]];
  return x->ndims == y->ndims && !memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->ndims);
}

/* The links between partitioned operators: each input of one, followed back through eliminated
   shape-keeping operators to another's output. */
static sk_result sk__se_links(sk__se_drec *d, sk_error *err) {
  const sk_graph *g = d->m->graph;
  int cap = 0;
  for (int o = 0; o < g->nops; o++) cap += g->ops[o].ninputs;
  d->links = (sk__se_link *)SK__SC_CALLOC(d->m, (size_t)cap + 1, sizeof *d->links);
  if (!d->links) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for D-Rec");
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; d->rec[o] && k < g->ops[o].ninputs; k++) {
      int t = g->ops[o].inputs[k], p = g->tensors[t].producer, hops = 0;
      while (p >= 0 && !d->rec[p] && !d->m->configured[p] && g->tensors[t].output_index == 0 && sk__se_passes(g, p) &&
             hops++ < g->nops)
        t = g->ops[p].inputs[0], p = g->tensors[t].producer;
      if (p < 0 || !d->rec[p] || t == g->ops[o].inputs[k]) continue; /* none, or a direct edge already */
      sk__se_link l = {p, g->tensors[t].output_index, o, k, t};
      d->links[d->nlinks++] = l;
    }
  return SK_OK;
}

/* The links of o to partitioned operators decided in this round. */
static double sk__se_linked(sk__se_drec *d, int o, const sk_search_cand *c) {
  double cost = 0;
  for (int i = 0; i < d->nlinks; i++) {
    const sk__se_link *l = &d->links[i];
    int other = l->src == o ? l->dst : l->dst == o ? l->src : -1;
    if (other < 0 || !d->decided[other]) continue;
    const sk_search_sig *from = l->src == o ? &c->out[l->src_slot] : &d->cur[l->src]->out[l->src_slot];
    const sk_search_sig *to = l->dst == o ? &c->in[l->dst_slot] : &d->cur[l->dst]->in[l->dst_slot];
    const sk_graph_tensor *x = &d->m->graph->tensors[l->tensor];
    int64_t n = sk_graph_numel(d->m->graph, l->tensor);
    cost += sk_search_redist_cost(d->m, from, to, n, x->dtype, NULL);
    if (d->m->needs_grad[l->tensor]) cost += sk_search_redist_cost(d->m, to, from, n, x->dtype, NULL);
  }
  return cost;
}

/* One round's step for operator o: cut the joint dim the factor divides that costs least. */
static void sk__se_cut(sk__se_drec *d, int o, int factor) {
  sk_search_model *m = d->m;
  sk_search_cand best, trial;
  double best_cost = DBL_MAX;
  bool found = false;
  for (int e = 0; e < m->njoint[o]; e++) {
    int64_t left = m->joint_size[o][e] / d->state[o].joint[e];
    if (left % factor) continue;
    int joint[SK_SEARCH_MAX_JOINT];
    memcpy(joint, d->state[o].joint, sizeof joint);
    joint[e] *= factor;
    if (sk_search_eval(m, o, joint, &trial, NULL)) continue; /* the rule refuses this cut */
    double cost = sk__se_against(m, o, &trial, d->decided, d->cur) + sk__se_linked(d, o, &trial);
    if (cost < best_cost) best_cost = cost, best = trial, found = true;
  }
  if (found) d->state[o] = best;
  d->decided[o] = true;
}

/* The strategies D-Rec chose, as candidates: found in the lists or appended to them. */
static sk_result sk__se_adopt(sk__se_drec *d, int *choice, sk_error *err) {
  sk_search_model *m = d->m;
  for (int o = 0; o < m->graph->nops; o++) {
    if (m->configured[o]) choice[o] = 0;
    if (!d->rec[o]) continue;
    int found = -1;
    for (int c = 0; c < m->ncands[o] && found < 0; c++)
      if (!memcmp(m->cands[o][c].joint, d->state[o].joint, sizeof d->state[o].joint)) found = c;
    if (found < 0) {
      /* The model's own list: grown the way sk_search_cost.h allocates and frees it. */
      size_t n = (size_t)m->ncands[o];
      if (!sk__sc_grow(m, (void **)&m->cands[o], n * sizeof *m->cands[o], (n + 1) * sizeof *m->cands[o]))
        return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for D-Rec's strategy of '%s'", m->graph->ops[o].name);
      m->cands[o][n] = d->state[o], found = m->ncands[o]++;
    }
    choice[o] = found;
  }
  return SK_OK;
}

/* Every unconfigured operator whole; configured ones at their strategy, decided for good. */
static sk_result sk__se_drec_start(sk__se_drec *d, sk_error *err) {
  sk_search_model *m = d->m;
  const sk_graph *g = m->graph;
  bool any = false;
  for (int o = 0; o < g->nops; o++) any = any || (!m->configured[o] && sk__se_computes(g, o));
  for (int o = 0; o < g->nops; o++) {
    d->order[o].op = o, d->order[o].weight = sk__se_weight(g, o);
    d->rec[o] = !m->configured[o] && (!any || sk__se_computes(g, o));
    if (m->configured[o]) d->state[o] = m->cands[o][0];
    if (!d->rec[o]) continue; /* the others are never decided in a round: their state is not read */
    int whole[SK_SEARCH_MAX_JOINT];
    for (int e = 0; e < SK_SEARCH_MAX_JOINT; e++) whole[e] = 1;
    sk_error e;
    if (sk_search_eval(m, o, whole, &d->state[o], &e))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: recursive_programming: operator '%s': %s", g->ops[o].name, e.msg);
  }
  qsort(d->order, (size_t)g->nops, sizeof *d->order, sk__se_heavier);
  for (int o = 0; o < g->nops; o++) d->cur[o] = &d->state[o];
  return SK_OK;
}

static sk_result sk__se_drec_run(sk__se_drec *d, int *choice, sk_error *err) {
  sk_search_model *m = d->m;
  int n = m->graph->nops, factors[32];
  sk_result r = sk__se_drec_start(d, err);
  if (!r) r = sk__se_links(d, err);
  int rounds = r ? 0 : sk__se_primes(m->desc.ndevices, factors);
  for (int k = 0; k < rounds; k++) {
    for (int o = 0; o < n; o++) d->decided[o] = m->configured[o];
    for (int i = 0; i < n; i++)
      if (d->rec[d->order[i].op]) sk__se_cut(d, d->order[i].op, factors[k]);
  }
  if (!r) r = sk__se_adopt(d, choice, err);
  for (int o = 0; o < n; o++) d->rec[o] = d->rec[o] || m->configured[o]; /* fixed for the propagation */
  if (!r) r = sk__se_propagate(m, choice, d->rec, err);
  double bytes = r ? 0 : sk_search_plan_memory(m, choice);
  if (!r && m->desc.cluster.device_memory > 0 && bytes > m->desc.cluster.device_memory)
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                 "search: recursive_programming: out of memory: the strategies need %.0f bytes per device, the device has %.0f",
                 bytes, m->desc.cluster.device_memory);
  return r;
}

SK_API sk_result sk_search_recursive(sk_search_model *m, int *choice, sk_error *err) {
  if (!m || !m->graph || !choice) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: recursive: NULL argument");
  size_t n = (size_t)m->graph->nops + 1;
  sk__se_drec d;
  d.m = m;
  d.state = (sk_search_cand *)SK__SC_CALLOC(m, n, sizeof *d.state);
  d.cur = (sk_search_cand **)SK__SC_CALLOC(m, n, sizeof *d.cur);
  d.decided = (bool *)SK__SC_CALLOC(m, n, sizeof *d.decided);
  d.order = (sk__se_ranked *)SK__SC_CALLOC(m, n, sizeof *d.order);
  d.rec = (bool *)SK__SC_CALLOC(m, n, sizeof *d.rec);
  d.links = NULL, d.nlinks = 0;
  sk_result r = d.state && d.cur && d.decided && d.order && d.rec
                    ? sk__se_drec_run(&d, choice, err)
                    : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for D-Rec");
  sk__sc_free(m, d.state), sk__sc_free(m, d.cur), sk__sc_free(m, d.decided), sk__sc_free(m, d.order);
  sk__sc_free(m, d.rec), sk__sc_free(m, d.links);
  return sk__se_priced(m, r, err);
}

/* ---- the exact search -------------------------------------------------------------------------- */

/* One step of the programme: operator v joins; the table over the frontier after it. */
typedef struct sk__se_step {
  int nfront, front[64]; /* the frontier after v, least significant digit first */
  int64_t size;
  int *pick;       /* [size]: 1 + v's candidate in the best assignment (0: no state reached yet) */
  int64_t *prev;   /* [size]: the index into the previous step's table */
} sk__se_step;

#define SK__SE_MAX_FRONT 64
#define SK__SE_MAX_STATES (int64_t)(1 << 22)

typedef struct sk__se_dp {
  sk_search_model *m;
  int *last; /* [nops]: the latest neighbour of each operator in graph order */
  sk__se_step *steps;
} sk__se_dp;

/* The frontier after v from the one before it; false when it is too wide to index. */
static bool sk__se_next_front(const sk__se_dp *p, const sk__se_step *before, int v, sk__se_step *after) {
  after->nfront = 0;
  for (int i = 0; before && i < before->nfront; i++)
    if (p->last[before->front[i]] > v) after->front[after->nfront++] = before->front[i];
  if (p->last[v] > v) {
    if (after->nfront == SK__SE_MAX_FRONT) return false;
    after->front[after->nfront++] = v;
  }
  return true;
}

/* Counts the programme's work and table sizes before running it: a refusal names where. */
static sk_result sk__se_dp_plan(sk__se_dp *p, sk_error *err) {
  sk_search_model *m = p->m;
  const sk_graph *g = m->graph;
  double limit = m->desc.exhaustive_limit > 0 ? (double)m->desc.exhaustive_limit : 4e9, work = 0;
  for (int v = 0; v < g->nops; v++) {
    const sk__se_step *before = v ? &p->steps[v - 1] : NULL;
    sk__se_step *s = &p->steps[v];
    double states = 1, size = 1;
    for (int i = 0; before && i < before->nfront; i++) states *= m->ncands[before->front[i]];
    bool ok = sk__se_next_front(p, before, v, s);
    for (int i = 0; i < s->nfront; i++) size *= m->ncands[s->front[i]];
    work += states * m->ncands[v] * (1 + m->nadj[v]);
    if (!ok || size > (double)SK__SE_MAX_STATES || work > limit)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "search: exhaustive: the graph is too large to search exactly: at operator '%s' the frontier "
                      "holds %d operators (%.3g strategy combinations), %.3g steps so far (limit %.3g)",
                      g->ops[v].name, s->nfront, size, work, limit);
    s->size = (int64_t)size;
  }
  return SK_OK;
}

/* The edges from v to the operators of the frontier before it: their costs for every pair. */
static sk_result sk__se_edge_tables(sk__se_dp *p, const sk__se_step *before, int v, double **tab, int *pos, int *ntab,
                                    sk_error *err) {
  sk_search_model *m = p->m;
  *ntab = 0;
  for (int i = 0; i < m->nadj[v]; i++) {
    int e = m->adj[v][i], u = sk__se_other(m, e, v), at = -1;
    if (u >= v) continue; /* a later neighbour: counted when it joins */
    for (int f = 0; before && f < before->nfront; f++)
      if (before->front[f] == u) at = f;
    double *t = (double *)SK__SC_CALLOC(m, (size_t)m->ncands[u] * (size_t)m->ncands[v], sizeof(double));
    if (!t || at < 0) {
      sk__sc_free(m, t);
      return sk__fail(err, t ? SK_ERR_INVALID_ARGUMENT : SK_ERR_OUT_OF_MEMORY, "search: exhaustive: %s",
                      t ? "a neighbour left the frontier early" : "out of memory");
    }
    for (int a = 0; a < m->ncands[u]; a++)
      for (int b = 0; b < m->ncands[v]; b++) t[a * m->ncands[v] + b] = sk_search_edge_cost(m, e, a, b);
    tab[*ntab] = t, pos[(*ntab)++] = at;
  }
  return SK_OK;
}

/* Where each digit of the frontier before v goes in the frontier after it (-1: it leaves), and
   the place value of v's own digit (0: v leaves at once). */
static void sk__se_digits(const sk_search_model *m, const sk__se_step *before, int nb, const sk__se_step *after, int v,
                          int64_t *place, int64_t *vplace) {
  int64_t at[SK__SE_MAX_FRONT];
  int64_t pv = 1;
  int na = after->nfront; /* read once (nb too, by the caller): the analyzer forgets scratch's contents */
  for (int i = 0; i < na; i++) at[i] = pv, pv *= m->ncands[after->front[i]];
  *vplace = 0;
  for (int i = 0; i < na; i++)
    if (after->front[i] == v) *vplace = at[i];
  for (int f = 0; f < nb; f++) {
    place[f] = -1;
    for (int i = 0; i < na; i++)
      if (after->front[i] == before->front[f]) place[f] = at[i];
  }
}

/* v joins: every state of the table before it, every candidate of v. */
static void sk__se_relax(sk__se_dp *p, int v, const sk__se_step *before, const sk__se_step *after, const double *tbefore,
                         double *tafter, double *const *tab, const int *pos, int ntab) {
  sk_search_model *m = p->m;
  int64_t place[SK__SE_MAX_FRONT], vplace, states = before ? before->size : 1;
  int nv = m->ncands[v], digit[SK__SE_MAX_FRONT], nb = before ? before->nfront : 0;
  sk__se_digits(m, before, nb, after, v, place, &vplace);
  for (int64_t s = 0; s < states; s++) {
    int64_t rest = s, base = 0;
    for (int f = 0; f < nb; f++) {
      int nf = m->ncands[before->front[f]];
      digit[f] = (int)(rest % nf), rest /= nf;
      if (place[f] >= 0) base += digit[f] * place[f];
    }
    for (int c = 0; c < nv; c++) {
      double cost = tbefore[s] + m->cands[v][c].own + sk_search_input_cost(m, v, c);
      for (int i = 0; i < ntab; i++) cost += tab[i][digit[pos[i]] * nv + c];
      int64_t j = base + c * vplace;
      if (!after->pick[j] || cost < tafter[j]) tafter[j] = cost, after->pick[j] = c + 1, after->prev[j] = s;
    }
  }
}

static sk_result sk__se_dp_step(sk__se_dp *p, int v, const double *tbefore, double *tafter, sk_error *err) {
  sk__se_step *s = &p->steps[v];
  s->pick = (int *)SK__SC_CALLOC(p->m, (size_t)s->size, sizeof(int));
  s->prev = (int64_t *)SK__SC_CALLOC(p->m, (size_t)s->size, sizeof(int64_t));
  double *tab[SK__SE_MAX_FRONT * 4];
  int pos[SK__SE_MAX_FRONT * 4], ntab = 0;
  if (!s->pick || !s->prev) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: exhaustive: out of memory");
  if (p->m->nadj[v] > SK__SE_MAX_FRONT * 4)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: exhaustive: operator '%s' has more than %d edges",
                    p->m->graph->ops[v].name, SK__SE_MAX_FRONT * 4);
  const sk__se_step *before = v ? &p->steps[v - 1] : NULL;
  sk_result r = sk__se_edge_tables(p, before, v, tab, pos, &ntab, err);
  if (!r) sk__se_relax(p, v, before, s, tbefore, tafter, tab, pos, ntab);
  for (int i = 0; i < ntab; i++) sk__sc_free(p->m, tab[i]);
  return r;
}

static sk_result sk__se_dp_run(sk__se_dp *p, int *choice, sk_error *err) {
  const sk_graph *g = p->m->graph;
  sk_result r = sk__se_dp_plan(p, err);
  double *tbefore = NULL, *tafter = NULL;
  for (int v = 0; !r && v < g->nops; v++) {
    tafter = (double *)SK__SC_CALLOC(p->m, (size_t)p->steps[v].size, sizeof(double));
    if (!tafter) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: exhaustive: out of memory");
    if (!r) {
      double zero = 0;
      r = sk__se_dp_step(p, v, v ? tbefore : &zero, tafter, err);
    }
    sk__sc_free(p->m, tbefore), tbefore = tafter, tafter = NULL;
  }
  sk__sc_free(p->m, tbefore);
  int64_t j = 0; /* the last frontier is empty: one state */
  for (int v = g->nops - 1; !r && v >= 0 && p->steps[v].pick; v--) choice[v] = p->steps[v].pick[j] - 1, j = p->steps[v].prev[j];
  return r;
}

SK_API sk_result sk_search_exhaustive(sk_search_model *m, int *choice, sk_error *err) {
  if (!m || !m->graph || !choice) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: exhaustive: NULL argument");
  const sk_graph *g = m->graph;
  sk__se_dp p;
  p.m = m;
  p.last = (int *)SK__SC_CALLOC(m, (size_t)g->nops + 1, sizeof(int));
  p.steps = (sk__se_step *)SK__SC_CALLOC(m, (size_t)g->nops + 1, sizeof *p.steps);
  sk_result r = p.last && p.steps ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: exhaustive: out of memory");
  for (int o = 0; !r && o < g->nops; o++) {
    p.last[o] = o;
    for (int i = 0; i < m->nadj[o]; i++) {
      int u = sk__se_other(m, m->adj[o][i], o);
      p.last[o] = u > p.last[o] ? u : p.last[o];
    }
  }
  if (!r) r = sk_search_model_candidates(m, err);
  if (!r) r = sk__se_dp_run(&p, choice, err);
  for (int v = 0; p.steps && v < g->nops; v++) sk__sc_free(m, p.steps[v].pick), sk__sc_free(m, p.steps[v].prev);
  sk__sc_free(m, p.last), sk__sc_free(m, p.steps);
  return sk__se_priced(m, r, err);
}

SK_EXTERN_C_END
#endif /* SK_SEARCH_IMPL */
