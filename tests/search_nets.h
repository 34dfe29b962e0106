/* search_nets.h -- what the strategy-search suites share (tests/test_search.c, which also reads
   the shipped networks through sk_json.h, and tests/test_search_runtime.c, which runs under TSan
   too and so links no jansson): seeded random MLPs, the brute force over every combination of
   candidates, and the three searches checked against it.

   Static inline only. Include it after tests/runtime_harness.h (OK, E, net, OP, mix). */
#ifndef SEARCH_NETS_H
#define SEARCH_NETS_H

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_harness.h"

/* A call that must fail with SK_ERR_INVALID_ARGUMENT and a message holding `word`. */
#define BAD(word, call)                                                                                   \
  do {                                                                                                    \
    sk_error e_;                                                                                          \
    memset(&e_, 0, sizeof e_);                                                                            \
    sk_result r_ = (call);                                                                                \
    cr_assert_eq(r_, SK_ERR_INVALID_ARGUMENT, "%s returned %s (%s)", #call, sk_result_name(r_), e_.msg);  \
    cr_assert(strstr(e_.msg, word) != NULL, "%s: message '%s' does not hold '%s'", #call, e_.msg, word); \
  } while (0)

static inline sk_search_desc sdesc(int ndevices) {
  sk_search_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = ndevices;
  return d;
}

static inline int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator '%s'", name);
  return -1;
}

static inline void build_model(const sk_graph *g, const sk_search_desc *d, sk_search_model *m) {
  OK(sk_search_model_build(g, d, m, E));
}

static inline double relerr(double a, double b) { return fabs(a - b) / (1 + fabs(b)); }

static inline int pick(uint64_t *s, int n) {
  *s = mix(*s);
  return (int)((*s >> 20) % (uint64_t)n);
}

/* A seeded chain of Dense / MatMul / ReLU / Add (of a bias parameter, or of an earlier output of
   the same shape), then a MatMul to the classes and the softmax loss. Dims divide N's primes.
   anchor (may be NULL): the operator of that name gets strategy `astrat` (2 tuples + bias). */
static inline void random_mlp_dims(net *n, uint64_t seed, int64_t small, const char *anchor, const sk_search_cand *astrat) {
  sk_graph_init(&n->g), n->nin = 0;
  uint64_t s = seed;
  int64_t sizes[2] = {small, 2 * small};
  int64_t B = sizes[pick(&s, 2)], D = sizes[pick(&s, 2)], C = sizes[pick(&s, 2)];
  int x = add_input(n, "x", SK_F32, 2, SH2(B, D), 0), y = add_input(n, "y", SK_I32, 1, SH1(B), C);
  int h = x, prev = -1; /* prev: an earlier output of h's shape */
  int64_t prevD = -1;
  int layers = 2 + pick(&s, 2);
  char name[32];
  for (int l = 0; l < layers; l++) {
    int kind = pick(&s, 4);
    if (l == 0 && (kind == 2 || kind == 3)) kind = 0; /* start with a weight */
    snprintf(name, sizeof name, "op%d", l);
    sk_graph_op op;
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "w%d", l), snprintf(bn, sizeof bn, "b%d", l);
    int64_t D2 = sizes[pick(&s, 2)];
    if (kind == 0) {
      int w = add_param(n, wn, 2, SH2(D2, D), SK_INIT_XAVIER_UNIFORM, 0), b = add_param(n, bn, 1, SH1(D2), SK_INIT_UNIFORM, 0.5);
      op = OP(name, SK_OP_DENSE, h, w, b);
    } else if (kind == 1) {
      int w = add_param(n, wn, 2, SH2(D, D2), SK_INIT_XAVIER_UNIFORM, 0);
      op = OP(name, SK_OP_MATMUL, h, w);
    } else if (kind == 2) {
      op = OP(name, SK_OP_RELU, h), D2 = D;
    } else {
      int other = prev >= 0 && prevD == D && h != x ? prev : add_param(n, bn, 1, SH1(D), SK_INIT_UNIFORM, 0.5);
      op = OP(name, SK_OP_ADD, h, other), D2 = D;
    }
    if (anchor && !strcmp(anchor, name)) {
      op.desc.has_strategy = true;
      for (int k = 0; k < astrat->ntuples; k++)
        for (int e = 0; e < astrat->len[k]; e++) op.desc.strategy[k][e] = astrat->strategy[k][e];
    }
    if (D2 == D && h != x) prev = h, prevD = D;
    h = add_op(n, op), D = D2;
  }
  int u = add_param(n, "u", 2, SH2(D, C), SK_INIT_XAVIER_UNIFORM, 0);
  int z = add_op(n, OP("head", SK_OP_MATMUL, h, u));
  OK(sk_graph_set_loss(&n->g, add_op(n, OP("loss", SK_OP_SOFTMAX_CE, z, y)), E));
  OK(sk_graph_set_eval(&n->g, z, y, E));
}

static inline void random_mlp(net *n, uint64_t seed, int N, const char *anchor, const sk_search_cand *astrat) {
  random_mlp_dims(n, seed, N % 3 == 0 ? 12 : 8, anchor, astrat);
}

/* The least sk_search_plan_cost over every combination of candidates. */
static inline double brute_force(sk_search_model *m, int *best) {
  int n = m->graph->nops, *c = (int *)calloc((size_t)n, sizeof(int));
  cr_assert_not_null(c);
  double least = DBL_MAX, combos = 1;
  for (int o = 0; o < n; o++) combos *= m->ncands[o];
  cr_assert_leq(combos, 2e6, "brute force over %g combinations", combos);
  for (;;) {
    double cost = sk_search_plan_cost(m, c);
    if (cost < least) least = cost, memcpy(best, c, sizeof(int) * (size_t)n);
    int o = 0;
    while (o < n && ++c[o] == m->ncands[o]) c[o++] = 0;
    if (o == n) break;
  }
  free(c);
  return least;
}

static inline const char *describe(const sk_graph *g, char *buf, size_t cap) {
  size_t at = 0;
  for (int o = 0; o < g->nops && at < cap; o++) {
    const sk_graph_tensor *t = &g->tensors[g->ops[o].outputs[0]];
    int w = snprintf(buf + at, cap - at, "%s%s:%s[%lld,%lld]", o ? " " : "", g->ops[o].name,
                     sk_op_kind_name(g->ops[o].desc.kind), (long long)t->shape[0], (long long)(t->ndims > 1 ? t->shape[1] : 1));
    at += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

typedef struct search_costs {
  double opt, prop, drec;
} search_costs;

/* The three searches and the brute force on one model; asserts their relations. */
static inline search_costs check_searches(sk_search_model *m, const char *what) {
  int n = m->graph->nops;
  int *best = (int *)calloc((size_t)n, sizeof(int)), *ex = (int *)calloc((size_t)n, sizeof(int));
  int *pr = (int *)calloc((size_t)n, sizeof(int)), *dr = (int *)calloc((size_t)n, sizeof(int));
  cr_assert(best && ex && pr && dr);
  search_costs sc;
  double brute = brute_force(m, best);
  OK(sk_search_exhaustive(m, ex, E));
  sc.opt = sk_search_plan_cost(m, ex);
  cr_assert(relerr(sc.opt, brute) <= 1e-12, "%s: exhaustive %.17g, brute force %.17g", what, sc.opt, brute);
  OK(sk_search_propagate(m, pr, E));
  sc.prop = sk_search_plan_cost(m, pr);
  cr_assert(sc.prop >= brute * (1 - 1e-12), "%s: propagation %.17g below the optimum %.17g", what, sc.prop, brute);
  OK(sk_search_recursive(m, dr, E)); /* may append its strategies to the lists: last */
  sc.drec = sk_search_plan_cost(m, dr);
  cr_assert(sc.drec >= brute * (1 - 1e-12), "%s: D-Rec %.17g below the optimum %.17g", what, sc.drec, brute);
  for (int o = 0; o < n; o++) {
    cr_assert(ex[o] >= 0 && ex[o] < m->ncands[o] && pr[o] >= 0 && pr[o] < m->ncands[o] && dr[o] >= 0 && dr[o] < m->ncands[o]);
    if (m->configured[o]) cr_assert(ex[o] == 0 && pr[o] == 0 && dr[o] == 0, "%s: configured operator %d moved", what, o);
  }
  free(best), free(ex), free(pr), free(dr);
  return sc;
}

#endif /* SEARCH_NETS_H */
