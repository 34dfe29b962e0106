/* test_search_price.c -- one cost model: the price the strategy searches give a plan
   (sk_search_plan_price: the dry run's per-operator and per-edge functions on the same cluster)
   equals the dry run's step time of the compiled plan when the plan is serial (no pipeline, no
   overlap, comm_fusion closed), on a flat cluster and on topologies, with and without compute,
   for the search's own plan and for data parallel. docs/strategy-search.md, "One price". */
#include <criterion/criterion.h>
#include <math.h>

#include "runtime_harness.h"
#include "sk_json.h"
#include "search_nets.h" /* BAD */
#include "shipped_nets.h"

static const char *const nets[] = {"mlp", "examples/nets/four_matmul.json", "examples/nets/megatron_block.json",
                                   "examples/nets/transformer.json", "examples/nets/attention.json",
                                   "examples/nets/dense_mutmul.json"};
#define NNETS ((int)(sizeof nets / sizeof nets[0]))

/* The cluster of case `which`: 0 flat (5 us, 25 GB/s), 1 two devices a node, 2 four a node. */
static sk_cluster cluster_of(int which, int ndev, bool flops) {
  sk_cluster c;
  memset(&c, 0, sizeof c);
  if (which == 0) c.link.alpha_us = 5, c.link.gbps = 25;
  else {
    int per = which == 1 ? 2 : 4;
    c.topology.per_node = per < ndev ? per : ndev, c.topology.nodes = ndev / c.topology.per_node;
    c.topology.intra.alpha_us = 1, c.topology.intra.gbps = 100;
    c.topology.inter.alpha_us = 10, c.topology.inter.gbps = 10;
  }
  if (flops) c.device_flops = 1e9;
  return c;
}

/* Network `name` (a shipped file, or the harness's mlp) with every strategy cleared: searched. */
static void load(net *n, const char *name, int ndev) {
  if (!strcmp(name, "mlp")) build_mlp(n, ndev);
  else load_shipped_net(n, name);
  for (int o = 0; o < n->g.nops; o++) {
    sk_op_desc *d = &n->g.ops[o].desc;
    d->has_strategy = d->has_out_strategy = d->has_layouts = false, d->nstrategies = d->nout_layouts = 0;
    memset(d->strategy_len, 0, sizeof d->strategy_len);
  }
}

static bool close_rel(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

/* Plan `choice` of model m written into g2 (the same network), compiled serial in semi_auto,
   dry-run: its step time against the model's price. */
static void check_choice(sk_search_model *m, const int *choice, sk_graph *g2, const sk_cluster *cl, const char *what) {
  for (int o = 0; o < g2->nops; o++)
    if (!m->configured[o]) OK(sk_search_apply(m, o, &m->cands[o][choice[o]], &g2->ops[o].desc, E));
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = m->desc.ndevices, d.mode = SK_PARALLEL_SEMI_AUTO, d.cluster = *cl;
  d.comm_fusion.closed = true; /* serial: every Mirror a call of its own, no overlap, no pipeline */
  sk_parallel_plan p;
  sk_error e;
  memset(&e, 0, sizeof e);
  cr_assert_eq(sk_parallel_compile(g2, &d, &p, &e), SK_OK, "%s: %s", what, e.msg);
  sk_dryrun_time t;
  memset(&t, 0, sizeof t);
  cr_assert_eq(sk_dryrun_step_time(&p, &t, &e), SK_OK, "%s: %s", what, e.msg);
  double price = sk_search_plan_price(m, choice);
  cr_expect(close_rel(price, t.step_us), "%s: priced %.17g, dry run %.17g", what, price, t.step_us);
  cr_expect_leq(price, sk_search_plan_cost(m, choice) * (1 + 1e-12), "%s: the edges' sum below the price", what);
  sk_parallel_free(&p);
}

/* Network i on ndev devices under cluster cl: the search's plan (propagation) and data parallel
   (every operator's first candidate: the batch cut). */
static void check_net(int i, int ndev, const sk_cluster *cl, const char *what) {
  static net n, n2;
  load(&n, nets[i], ndev);
  sk_search_desc sd;
  memset(&sd, 0, sizeof sd);
  sd.ndevices = ndev, sd.cluster = *cl, sd.whole_mirrors = true;
  sk_search_model m;
  OK(sk_search_model_build(&n.g, &sd, &m, E));
  int choice[256];
  cr_assert_leq(n.g.nops, 256);
  char label[320];
  for (int plan = 0; plan < 2; plan++) {
    if (plan == 0) OK(sk_search_propagate(&m, choice, E));
    else memset(choice, 0, sizeof choice);
    load(&n2, nets[i], ndev);
    snprintf(label, sizeof label, "%s, %s", what, plan ? "data parallel" : "searched");
    check_choice(&m, choice, &n2.g, cl, label);
    sk_graph_free(&n2.g);
  }
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

Test(search_price, serial_plans_priced_as_the_dry_run_steps, .timeout = 600) {
  static const int counts[] = {2, 4, 8};
  static const char *const clusters[] = {"flat", "2 a node", "4 a node"};
  for (int i = 0; i < NNETS; i++)
    for (int c = 0; c < 3; c++)
      for (int which = 0; which < 3; which++)
        for (int f = 0; f < 2; f++) {
          char what[256];
          snprintf(what, sizeof what, "%s, %d devices, %s, %s", nets[i], counts[c], clusters[which],
                   f ? "1 GFLOP/s" : "no compute");
          sk_cluster cl = cluster_of(which, counts[c], f);
          check_net(i, counts[c], &cl, what);
        }
}

/* The model refuses what it cannot price, and a NULL model or plan is worth nothing. */
Test(search_price, bad_input) {
  static net n;
  load(&n, "mlp", 4);
  sk_search_desc sd;
  memset(&sd, 0, sizeof sd);
  sd.ndevices = 8, sd.cluster = cluster_of(1, 4, false); /* 2 nodes of 2: 4 devices, 8 searched */
  sk_search_model m;
  BAD("fewer than the 8 searched", sk_search_model_build(&n.g, &sd, &m, E));
  sd.cluster.topology.inter.gbps = -1;
  BAD("cluster", sk_search_model_build(&n.g, &sd, &m, E));
  sd.ndevices = 4, sd.cluster = cluster_of(1, 4, false);
  OK(sk_search_model_build(&n.g, &sd, &m, E));
  cr_expect_eq(sk_search_plan_price(NULL, (const int[]){0}), 0);
  cr_expect_eq(sk_search_plan_price(&m, NULL), 0);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}
