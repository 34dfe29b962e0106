/* test_finalists.c -- sk_finalists_compile (sk_finalists.h): a search mode's plan against data
   parallel and the network's own strategies, each priced by the dry run, the cheapest kept.

   On a 5 us, 25 GB/s link with 10 TFLOP/s devices (the figures sk-sim's tests use):
     the recursive_programming tutorial on 8 devices: both searches' plans cost more per step
       than data parallel (0.57 ms against 0.33), so data parallel is kept;
     the same network on 2 devices: the search's plan is the cheaper (0.092 ms against 0.133);
     dense_mutmul on 8 devices under sharding_propagation: the search finds data parallel's
       price exactly, and the tie goes to the search's plan;
     the operator-parallel tutorial (which sets strategies) has a third finalist, semi_auto.
   Every price is checked against the dry run of the plan compiled alone. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oom_alloc.h"
#include "shardkit.h"
#include "sk_json.h"

#define RECURSIVE "examples/nets/recursive_programming.json"
#define DENSE "examples/nets/dense_mutmul.json"
#define TUTORIAL "examples/nets/operator_parallel.json"

static void load(const char *path, sk_graph *g) {
  sk_error e = {SK_OK, ""};
  sk_graph_init(g);
  cr_assert_eq(sk_json_load_network(path, g, &e), SK_OK, "%s: %s", path, e.msg);
}

static sk_autoparallel priced_desc(int ndevices, sk_parallel_mode mode) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = ndevices, d.mode = mode;
  d.cluster.link.alpha_us = 5, d.cluster.link.gbps = 25, d.cluster.device_flops = 10e12;
  return d;
}

static double step_us(const sk_parallel_plan *p) {
  sk_dryrun_time t;
  memset(&t, 0, sizeof t);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_dryrun_step_time(p, &t, &e), SK_OK, "dry run: %s", e.msg);
  return t.step_us;
}

/* Finalist k's price equals the dry run of its plan compiled on its own (desc d, network g). */
static void price_matches(const sk_graph *g, sk_autoparallel d, const sk_finalist *f, const char *what) {
  sk_parallel_plan p;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_parallel_compile(g, &d, &p, &e), SK_OK, "%s alone: %s", what, e.msg);
  cr_assert(f->priced, "%s: not priced (%s)", what, f->why);
  cr_assert_eq(f->step_us, step_us(&p), "%s: priced %.3f us, its plan alone %.3f us", what, f->step_us, step_us(&p));
  sk_parallel_free(&p);
}

static size_t strategies(const sk_parallel_plan *p, char *buf, size_t cap) { return sk_parallel_format_strategies(p, buf, cap); }

Test(finalists, data_parallel_kept_when_the_search_is_dearer) {
  for (int m = SK_PARALLEL_SHARDING_PROPAGATION; m <= SK_PARALLEL_RECURSIVE_PROGRAMMING; m++) {
    sk_graph g;
    load(RECURSIVE, &g);
    sk_autoparallel d = priced_desc(8, (sk_parallel_mode)m);
    sk_parallel_plan p;
    sk_finalists f;
    sk_error e = {SK_OK, ""};
    cr_assert_eq(sk_finalists_compile(&g, &d, &p, &f, &e), SK_OK, "%s", e.msg);
    cr_assert(f.weighed);
    cr_assert_eq(f.kept, SK_FINALIST_DATA_PARALLEL, "%s kept %s", sk_parallel_mode_name(d.mode), sk_finalist_name(f.kept, d.mode));
    cr_assert_gt(f.f[SK_FINALIST_SEARCH].step_us, f.f[SK_FINALIST_DATA_PARALLEL].step_us);
    cr_assert(!f.f[SK_FINALIST_SEMI_AUTO].compiled, "the network sets no strategy: no semi_auto finalist");
    cr_assert_eq(sk_finalist_runner_up(&f), SK_FINALIST_SEARCH);
    price_matches(&g, d, &f.f[SK_FINALIST_SEARCH], "the search's plan");
    cr_assert_eq(step_us(&p), f.f[SK_FINALIST_DATA_PARALLEL].step_us, "the kept plan is not the one priced");
    /* the kept plan is data parallel: the semi_auto plan of this network (no strategy set) */
    sk_autoparallel dp = d;
    dp.mode = SK_PARALLEL_SEMI_AUTO;
    price_matches(&g, dp, &f.f[SK_FINALIST_DATA_PARALLEL], "data parallel");
    cr_assert_null(p.searched, "the kept plan carries the search's choices");
    cr_assert(p.graph == p.micro_graph && p.graph != &g, "the data-parallel plan must own its network");
    sk_graph_free(&g); /* the plan outlives the caller's network */
    cr_assert_gt(step_us(&p), 0);
    sk_parallel_free(&p);
  }
}

Test(finalists, search_kept_when_cheaper) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = priced_desc(2, SK_PARALLEL_RECURSIVE_PROGRAMMING);
  sk_parallel_plan p, alone;
  sk_finalists f;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_finalists_compile(&g, &d, &p, &f, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(f.kept, SK_FINALIST_SEARCH, "kept %s", sk_finalist_name(f.kept, d.mode));
  cr_assert_lt(f.f[SK_FINALIST_SEARCH].step_us, f.f[SK_FINALIST_DATA_PARALLEL].step_us);
  cr_assert_eq(sk_finalist_runner_up(&f), SK_FINALIST_DATA_PARALLEL);
  cr_assert_not_null(p.searched);
  cr_assert_eq(sk_parallel_compile(&g, &d, &alone, &e), SK_OK, "%s", e.msg);
  char a[4096], b[4096];
  strategies(&p, a, sizeof a), strategies(&alone, b, sizeof b);
  cr_assert_str_eq(a, b, "the kept plan is not the search's");
  sk_parallel_free(&alone), sk_parallel_free(&p), sk_graph_free(&g);
}

Test(finalists, a_tie_keeps_the_search) {
  sk_graph g;
  load(DENSE, &g);
  sk_autoparallel d = priced_desc(8, SK_PARALLEL_SHARDING_PROPAGATION);
  sk_parallel_plan p;
  sk_finalists f;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_finalists_compile(&g, &d, &p, &f, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(f.f[SK_FINALIST_SEARCH].step_us, f.f[SK_FINALIST_DATA_PARALLEL].step_us, "no tie here: %.3f against %.3f",
               f.f[SK_FINALIST_SEARCH].step_us, f.f[SK_FINALIST_DATA_PARALLEL].step_us);
  cr_assert_eq(f.kept, SK_FINALIST_SEARCH, "a tie kept %s", sk_finalist_name(f.kept, d.mode));
  cr_assert_not_null(p.searched);
  sk_parallel_free(&p), sk_graph_free(&g);
}

Test(finalists, the_networks_own_strategies_are_a_finalist) {
  sk_graph g;
  load(TUTORIAL, &g);
  sk_autoparallel d = priced_desc(8, SK_PARALLEL_SHARDING_PROPAGATION);
  sk_parallel_plan p;
  sk_finalists f;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_finalists_compile(&g, &d, &p, &f, &e), SK_OK, "%s", e.msg);
  sk_autoparallel semi = d;
  semi.mode = SK_PARALLEL_SEMI_AUTO;
  price_matches(&g, semi, &f.f[SK_FINALIST_SEMI_AUTO], "semi_auto");
  cr_assert_neq(f.f[SK_FINALIST_SEMI_AUTO].step_us, f.f[SK_FINALIST_DATA_PARALLEL].step_us, "semi_auto priced as data parallel");
  for (int k = 0; k < SK_FINALIST_COUNT; k++)
    cr_assert(f.f[f.kept].step_us <= f.f[k].step_us, "kept %s over the cheaper %s", sk_finalist_name(f.kept, d.mode),
              sk_finalist_name((sk_finalist_kind)k, d.mode));
  sk_parallel_free(&p), sk_graph_free(&g);
}

Test(finalists, an_unpriced_cluster_keeps_the_search_unweighed) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = priced_desc(8, SK_PARALLEL_RECURSIVE_PROGRAMMING);
  memset(&d.cluster, 0, sizeof d.cluster);
  sk_parallel_plan p, alone;
  sk_finalists f;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_finalists_compile(&g, &d, &p, &f, &e), SK_OK, "%s", e.msg);
  cr_assert(!f.weighed && f.kept == SK_FINALIST_SEARCH);
  for (int k = 0; k < SK_FINALIST_COUNT; k++) cr_assert(!f.f[k].priced, "%d priced without clocks", k);
  cr_assert(!f.f[SK_FINALIST_DATA_PARALLEL].compiled);
  cr_assert_eq(sk_parallel_compile(&g, &d, &alone, &e), SK_OK, "%s", e.msg);
  char a[4096], b[4096];
  strategies(&p, a, sizeof a), strategies(&alone, b, sizeof b);
  cr_assert_str_eq(a, b);
  cr_assert_eq(p.search_cost, alone.search_cost);
  sk_parallel_free(&alone), sk_parallel_free(&p), sk_graph_free(&g);
}

/* hsdp under a pipeline: every finalist is priced (the dry run walks it), the cheapest kept. */
Test(finalists, hsdp_under_a_pipeline_priced) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = priced_desc(8, SK_PARALLEL_SHARDING_PROPAGATION);
  d.pipeline.stages = 2, d.pipeline.micro = 2, d.hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL1};
  sk_parallel_plan p;
  sk_finalists f;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_finalists_compile(&g, &d, &p, &f, &e), SK_OK, "%s", e.msg);
  cr_assert(f.weighed);
  for (int k = SK_FINALIST_SEARCH; k <= SK_FINALIST_DATA_PARALLEL; k++) {
    cr_assert(f.f[k].compiled && f.f[k].priced, "%d: '%s'", k, f.f[k].why);
    cr_assert_leq(f.f[f.kept].step_us, f.f[k].step_us, "kept %d at %g us, %d at %g us", f.kept, f.f[f.kept].step_us, k,
                  f.f[k].step_us);
  }
  sk_parallel_free(&p), sk_graph_free(&g);
}

static void refused(const sk_graph *g, const sk_autoparallel *d, sk_parallel_plan *p, sk_finalists *f, const char *want) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_finalists_compile(g, d, p, f, &e), SK_ERR_INVALID_ARGUMENT, "want '%s'", want);
  cr_assert(strstr(e.msg, want), "'%s' does not say '%s'", e.msg, want);
}

Test(finalists, bad_input_refused_by_name) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = priced_desc(8, SK_PARALLEL_SHARDING_PROPAGATION);
  sk_parallel_plan p;
  sk_finalists f;
  refused(NULL, &d, &p, &f, "NULL network");
  refused(&g, NULL, &p, &f, "NULL desc");
  refused(&g, &d, NULL, &f, "NULL plan");
  refused(&g, &d, &p, NULL, "NULL out");
  d.mode = SK_PARALLEL_SEMI_AUTO;
  refused(&g, &d, &p, &f, "mode semi_auto (0) is not a search mode");
  d.mode = (sk_parallel_mode)9;
  refused(&g, &d, &p, &f, "(9) is not a search mode");
  d = priced_desc(3, SK_PARALLEL_SHARDING_PROPAGATION); /* the search's own refusal passes through */
  sk_error e = {SK_OK, ""};
  cr_assert_neq(sk_finalists_compile(&g, &d, &p, &f, &e), SK_OK);
  cr_assert_null(p.ops, "a refused compile left a plan");
  sk_graph_free(&g);
}

/* Every allocation failing in turn (once, then persistently): SK_OK or SK_ERR_OUT_OF_MEMORY,
   nothing live afterwards, and SK_OK keeps the same finalist at the same prices. */
static void sweep(int ndevices, sk_finalist_kind want) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = priced_desc(ndevices, SK_PARALLEL_SHARDING_PROPAGATION);
  oom_alloc o;
  oom_alloc_arm(&o, 0, false);
  d.allocator = oom_alloc_hook(&o);
  sk_parallel_plan p;
  sk_finalists ref, f;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_finalists_compile(&g, &d, &p, &ref, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(ref.kept, want);
  sk_parallel_free(&p);
  long n = o.calls;
  cr_assert_gt(n, 0);
  cr_assert_eq(o.live, 0);
  for (int persistent = 0; persistent < 2; persistent++)
    for (long k = 1; k <= n; k++) {
      oom_alloc_arm(&o, k, persistent);
      sk_result r = sk_finalists_compile(&g, &d, &p, &f, &e);
      cr_assert(r == SK_OK || r == SK_ERR_OUT_OF_MEMORY, "k=%ld: %s: %s", k, sk_result_name(r), e.msg);
      cr_assert(!o.failed || r == SK_ERR_OUT_OF_MEMORY, "k=%ld: SK_OK although an allocation failed", k);
      if (r) cr_assert(strstr(e.msg, "out of memory") && !p.ops, "k=%ld: '%s'", k, e.msg);
      else cr_assert(f.kept == ref.kept && !memcmp(f.f, ref.f, sizeof f.f), "k=%ld: other finalists", k);
      sk_parallel_free(&p);
      cr_assert_eq(o.live, 0, "k=%ld %s: %ld blocks leaked", k, persistent ? "persistent" : "once", o.live);
    }
  sk_graph_free(&g);
}

Test(finalists, out_of_memory_leaks_nothing_data_parallel_kept) { sweep(8, SK_FINALIST_DATA_PARALLEL); }
Test(finalists, out_of_memory_leaks_nothing_search_kept) { sweep(2, SK_FINALIST_SEARCH); }
