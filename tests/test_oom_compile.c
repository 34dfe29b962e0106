/* test_oom_compile.c -- allocation-failure sweeps of the compiler (sk_parallel_compile: the plan,
   the search's scratch, the stages' programs, their fusing, groups and WaitSends), which takes
   its memory from the configuration's allocator (sk_autoparallel.allocator).

   Each case compiles once without a hook (the reference: device 0's and the last device's
   program text, sk_parallel_format_program), once under tests/oom_alloc.h's counting allocator
   with nothing failing (its N allocations counted; the same text), then for every k = 1..N with
   the k-th allocation failing once, and again with the k-th and every later one failing
   (persistent). Every k must give SK_OK or SK_ERR_OUT_OF_MEMORY (with a message saying so);
   SK_ERR_OUT_OF_MEMORY whenever an allocation failed; SK_OK only with the reference's text; no
   live block after a failed compile nor after sk_parallel_free. The hook stops failing before
   the text is printed (printing takes scratch from the plan's allocator too).
   Cases:
     plain     the operator-parallel tutorial on 8 devices, hsdp level1 (every replicated
               parameter sharded), every operator flagged for recomputation, AllReduce fusion
               by size (0.5 MB)
     pipeline  the recursive_programming network on 8 devices, 1f1b, 2 stages, 4 micro-batches,
               hsdp level1 (evaluation programs, WaitSends)
     search    the recursive_programming network on 8 devices under recursive_programming
               (the plan's own copy of the network, the searched operators)
     loaded    the pipeline case's plan saved as a strategy file, then compiled from it (stage
               count and hsdp from the file; the plan's copy the file is loaded into, replaced
               by the pipeline's) and saved again (sk_strategy.h's table: strategy_io) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oom_alloc.h"
#include "shardkit.h"
#include "sk_json.h"
#include "sk_strategy.h" /* implemented in tests/test_strategy.c */

#define TUTORIAL "examples/nets/operator_parallel.json"
#define RECURSIVE "examples/nets/recursive_programming.json"

enum { CASE_PLAIN, CASE_PIPELINE, CASE_SEARCH, CASE_LOADED, NCASES };
static const char *const case_name[NCASES] = {"plain", "pipeline", "search", "loaded"};
static char loaded_path[64], again_path[64]; /* the loaded case's files (sweep makes them) */

static void load_case(int which, sk_graph *g, sk_autoparallel *d) {
  sk_error e = {SK_OK, ""};
  sk_graph_init(g);
  const char *path = which == CASE_PLAIN ? TUTORIAL : RECURSIVE;
  cr_assert_eq(sk_json_load_network(path, g, &e), SK_OK, "%s: %s", path, e.msg);
  memset(d, 0, sizeof *d);
  d->ndevices = 8;
  if (which != CASE_SEARCH) d->hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL1};
  if (which == CASE_PLAIN) {
    for (int o = 0; o < g->nops; o++) g->ops[o].recompute = true; /* refused where it cannot be */
    d->comm_fusion.allreduce.mode = SK_FUSION_SIZE, d->comm_fusion.allreduce.threshold_mb = 0.5;
  }
  if (which == CASE_PIPELINE) d->pipeline.stages = 2, d->pipeline.micro = 4, d->pipeline.scheduler = SK_PIPE_1F1B;
  if (which == CASE_SEARCH) d->mode = SK_PARALLEL_RECURSIVE_PROGRAMMING;
  if (which == CASE_LOADED) { /* stages and hsdp come from the file */
    d->pipeline.micro = 4, d->pipeline.scheduler = SK_PIPE_1F1B, d->strategy_io = sk_strategy_io();
    d->load_operator_strategy_file = d->load_param_strategy_file = loaded_path;
    d->save_operator_strategy_file = d->save_param_strategy_file = again_path;
  }
}

/* The pipeline case's plan saved to loaded_path, for the loaded case. */
static void save_pipeline_plan(void) {
  snprintf(loaded_path, sizeof loaded_path, "/tmp/sk_oom_compile_%d.json", (int)getpid());
  snprintf(again_path, sizeof again_path, "/tmp/sk_oom_compile_%d_again.json", (int)getpid());
  sk_graph g;
  sk_autoparallel d;
  load_case(CASE_PIPELINE, &g, &d);
  d.save_operator_strategy_file = d.save_param_strategy_file = loaded_path, d.strategy_io = sk_strategy_io();
  sk_parallel_plan p;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_parallel_compile(&g, &d, &p, &e), SK_OK, "saving the pipeline's plan: %s", e.msg);
  sk_parallel_free(&p), sk_graph_free(&g);
}

/* Device 0's and the last device's program text (malloc'd by the test, not the hook). */
static char *programs_text(const sk_parallel_plan *p) {
  int ranks[2] = {0, p->world_devices - 1};
  size_t n[2], total = 1;
  for (int i = 0; i < 2; i++) total += n[i] = sk_parallel_format_program(p, ranks[i], NULL, 0);
  char *text = (char *)malloc(total);
  cr_assert_not_null(text);
  sk_parallel_format_program(p, ranks[0], text, n[0] + 1);
  sk_parallel_format_program(p, ranks[1], text + n[0], n[1] + 1);
  return text;
}

/* Compiles case `which` (through o's hook when o is set) and returns its text, or NULL with *r
   the failure. */
static char *compile_case(int which, oom_alloc *o, sk_result *r) {
  sk_graph g;
  sk_autoparallel d;
  load_case(which, &g, &d);
  if (o) d.allocator = oom_alloc_hook(o);
  sk_parallel_plan p;
  sk_error e = {SK_OK, ""};
  *r = sk_parallel_compile(&g, &d, &p, &e);
  if (o) o->fail_at = 0; /* the text's scratch must not fail */
  char *text = NULL;
  if (*r) {
    cr_assert(*r != SK_ERR_OUT_OF_MEMORY || strstr(e.msg, "out of memory"), "%s: '%s'", case_name[which], e.msg);
    cr_assert(!o || o->live == 0, "%s: a failed compile left %ld blocks", case_name[which], o ? o->live : 0);
  } else {
    text = programs_text(&p);
    sk_parallel_free(&p);
  }
  sk_graph_free(&g);
  return text;
}

static void run_k(int which, const char *ref, long k, bool persistent) {
  oom_alloc o;
  oom_alloc_arm(&o, k, persistent);
  sk_result r;
  char *text = compile_case(which, &o, &r);
  const char *mode = persistent ? "persistent" : "once";
  cr_assert(r == SK_OK || r == SK_ERR_OUT_OF_MEMORY, "%s k=%ld %s: %s", case_name[which], k, mode, sk_result_name(r));
  cr_assert(!o.failed || r == SK_ERR_OUT_OF_MEMORY, "%s k=%ld %s: SK_OK although allocation %ld failed", case_name[which], k,
            mode, k);
  cr_assert(r || !strcmp(text, ref), "%s k=%ld %s: SK_OK with another program than the reference's", case_name[which], k, mode);
  cr_assert_eq(o.live, 0, "%s k=%ld %s: %ld blocks leaked", case_name[which], k, mode, o.live);
  free(text);
}

static void sweep(int which) {
  if (which == CASE_LOADED) save_pipeline_plan();
  sk_result r;
  char *ref = compile_case(which, NULL, &r);
  cr_assert_eq(r, SK_OK, "%s without a hook: %s", case_name[which], sk_result_name(r));
  oom_alloc o;
  oom_alloc_arm(&o, 0, false);
  char *counted = compile_case(which, &o, &r);
  cr_assert_eq(r, SK_OK, "%s counted: %s", case_name[which], sk_result_name(r));
  cr_assert_str_eq(counted, ref, "%s through the hook: another program than without it", case_name[which]);
  cr_assert_eq(o.live, 0, "%s counted: %ld blocks leaked", case_name[which], o.live);
  cr_assert_gt(o.calls, 0, "%s: nothing went through the hook", case_name[which]);
  oom_alloc_arm(&o, 0, false); /* how many the compile alone takes: the text's scratch counted above too */
  sk_graph g;
  sk_autoparallel d;
  load_case(which, &g, &d);
  d.allocator = oom_alloc_hook(&o);
  sk_parallel_plan p;
  cr_assert_eq(sk_parallel_compile(&g, &d, &p, NULL), SK_OK);
  long n = o.calls;
  sk_parallel_free(&p), sk_graph_free(&g);
  for (long k = 1; k <= n; k++) run_k(which, ref, k, false), run_k(which, ref, k, true);
  cr_log_info("%s: %ld allocations, each failed once and persistently", case_name[which], n);
  free(counted), free(ref);
  if (which == CASE_LOADED) remove(loaded_path), remove(again_path);
}

Test(oom_compile, plain) { sweep(CASE_PLAIN); }
Test(oom_compile, pipeline) { sweep(CASE_PIPELINE); }
Test(oom_compile, search) { sweep(CASE_SEARCH); }
Test(oom_compile, loaded) { sweep(CASE_LOADED); }
