/* sk_finalists.h -- a search mode's plan checked against the plans it competes with, each priced
   by the dry run's clocks (sk_dryrun_clock.h), and the cheapest kept.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_FINALISTS_IMPL + the modules it includes)
                             #include "sk_finalists.h"
   Needs only libc. Pure planning: no world, no buffers.

   WHY: a search (sharding_propagation, recursive_programming, exhaustive) chooses its plan by
   its own cost model (sk_search_cost.h), which is not the dry run's; on some networks the plan
   it chooses takes longer per step, by the dry run, than plain data parallel. The dry run is what
   the runtime's clocks measure, so the dry run decides.

   THE FINALISTS (in this order, which breaks ties: the earlier is kept)
     search         the search's plan: sk_parallel_compile of the caller's desc and network
     data_parallel  every operator data parallel (MindSpore's data_parallel mode): the network
                    with no operator strategy, layouts or out_strategy, compiled as semi_auto on
                    the same desc (devices, dataset strategy, cluster, pipeline, hsdp, ...)
     semi_auto      the network's own strategies, data parallel elsewhere: compiled only when the
                    network sets a strategy on some operator (else it is data_parallel)
   Each compiled finalist is priced by sk_dryrun_step_time on the desc's cluster; the one with
   the least step time is kept and the others freed.
   NOT WEIGHED (the search's plan kept exactly as sk_parallel_compile gives it, nothing priced):
     a cluster that prices nothing (sk_cluster_prices false) -- today's behaviour; a desc naming
     strategy files, whose save describes the search's plan (the other finalists' why says so).
   SKIPPED AND REPORTED (the finalist's why): a finalist the dry run refuses
     (SK_ERR_UNSUPPORTED: hsdp under a pipeline, ...) or the compiler refuses
     (SK_ERR_INVALID_ARGUMENT: data parallel on a batch the devices do not divide, ...). When no
     finalist is priced the search's plan is kept.

   ERRORS: a NULL argument or a desc whose mode is not a search (SK_ERR_INVALID_ARGUMENT); the
     search's plan's own compile error; SK_ERR_OUT_OF_MEMORY (from the desc's allocator). On any
     error *plan is empty and nothing leaks.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_FINALISTS_IMPL)
#define SK_FINALISTS_IMPL
#endif
#ifndef SK_FINALISTS_H
#define SK_FINALISTS_H

#include "sk_core.h"
#include "sk_dryrun.h"
#include "sk_graph.h"
#include "sk_parallel.h"

SK_EXTERN_C_BEGIN

typedef enum sk_finalist_kind {
  SK_FINALIST_SEARCH = 0,    /* the search's plan */
  SK_FINALIST_DATA_PARALLEL, /* every operator data parallel */
  SK_FINALIST_SEMI_AUTO,     /* the network's own strategies */
  SK_FINALIST_COUNT
} sk_finalist_kind;

typedef struct sk_finalist {
  bool compiled;  /* a plan was compiled for it */
  bool priced;    /* the dry run priced it: step_us is its step time */
  double step_us;
  char why[SK_ERROR_MSG_MAX + 32]; /* not priced: why ("" when priced, or when the finalist does not apply) */
} sk_finalist;

typedef struct sk_finalists {
  bool weighed;          /* the finalists were priced (a priced cluster, no strategy file) */
  sk_finalist_kind kept; /* the plan returned */
  sk_parallel_mode mode; /* the search's (the desc's) */
  double search_ms;      /* the search's wall time (its plan's search_ms), whichever plan is kept */
  sk_finalist f[SK_FINALIST_COUNT];
} sk_finalists;

/* Compiles g under desc (a search mode) into *plan (the caller's; free with sk_parallel_free):
   the cheapest finalist by the dry run, or the search's plan when nothing was weighed. *out says
   what each finalist cost. A plan other than the search's owns its network copy (micro_graph). */
SK_API sk_result sk_finalists_compile(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *plan,
                                      sk_finalists *out, sk_error *err);
/* The finalist's name: the search mode's own (sk_parallel_mode_name) for the search's plan,
   "data_parallel", "semi_auto". */
SK_API const char *sk_finalist_name(sk_finalist_kind kind, sk_parallel_mode mode);
/* The finalist the kept one is reported against: the search's plan when another was kept and
   the search's was priced, else the cheapest other priced one; -1 when there is none. */
SK_API int sk_finalist_runner_up(const sk_finalists *f);

SK_EXTERN_C_END
#endif /* SK_FINALISTS_H */

#if defined(SK_FINALISTS_IMPL) && !defined(SK_FINALISTS_IMPL_DONE)
#define SK_FINALISTS_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <stdio.h>
#include <string.h>

SK_EXTERN_C_BEGIN

SK_API const char *sk_finalist_name(sk_finalist_kind kind, sk_parallel_mode mode) {
  switch (kind) {
    case SK_FINALIST_SEARCH: return sk_parallel_mode_name(mode);
    case SK_FINALIST_DATA_PARALLEL: return "data_parallel";
    case SK_FINALIST_SEMI_AUTO: return "semi_auto";
    default: return "?";
  }
}

SK_API int sk_finalist_runner_up(const sk_finalists *f) {
  if (!f) return -1;
  if (f->kept != SK_FINALIST_SEARCH && f->f[SK_FINALIST_SEARCH].priced) return SK_FINALIST_SEARCH;
  int best = -1;
  for (int k = 0; k < SK_FINALIST_COUNT; k++)
    if (k != (int)f->kept && f->f[k].priced && (best < 0 || f->f[k].step_us < f->f[best].step_us)) best = k;
  return best;
}

static bool sk__fin_files_named(const sk_autoparallel *d) {
  return d->save_param_strategy_file || d->load_param_strategy_file || d->save_operator_strategy_file ||
         d->load_operator_strategy_file;
}

static bool sk__fin_op_configured(const sk_op_desc *d) {
  return d->has_strategy || d->has_layouts || d->has_out_strategy || d->nout_layouts > 0;
}

static bool sk__fin_has_strategies(const sk_graph *g) {
  for (int o = 0; o < g->nops; o++)
    if (sk__fin_op_configured(&g->ops[o].desc)) return true;
  return false;
}

/* The dry run's price of p into f. A refusal (SK_ERR_UNSUPPORTED) is the finalist's why, not
   an error: the others may still be priced. */
static sk_result sk__fin_price(const sk_parallel_plan *p, sk_finalist *f, sk_error *err) {
  sk_dryrun_time t;
  memset(&t, 0, sizeof t);
  sk_error e = {SK_OK, ""};
  sk_result r = sk_dryrun_step_time(p, &t, &e);
  if (r == SK_ERR_UNSUPPORTED) return snprintf(f->why, sizeof f->why, "%s", e.msg), SK_OK;
  if (r == SK_ERR_OUT_OF_MEMORY) /* the dry run's message names where, not always why */
    return sk__fail(err, r, "finalists: out of memory pricing a plan (%.200s)", e.msg);
  if (r) return sk__fail(err, r, "%s", e.msg);
  f->priced = true, f->step_us = t.step_us;
  return SK_OK;
}

/* A finalist's compile: its error is its why, except running out of memory, which ends the
   whole compile (the caller must see it). */
static sk_result sk__fin_compiled(sk_result r, const sk_error *e, sk_finalist *f, sk_error *err) {
  if (r == SK_ERR_OUT_OF_MEMORY) return sk__fail(err, r, "%s", e->msg);
  if (r) snprintf(f->why, sizeof f->why, "not compiled: %s", e->msg);
  f->compiled = !r;
  return SK_OK;
}

/* The network with every operator's strategy, layouts and out_strategy dropped, in memory from
   the desc's allocator (the plan that keeps it frees it). */
static sk_result sk__fin_dp_graph(const sk_graph *g, const sk_allocator *a, sk_graph **out, sk_error *err) {
  sk_graph *c = (sk_graph *)sk__calloc(a, sizeof *c, sizeof(double));
  if (!c) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "finalists: out of memory for the data-parallel network");
  sk_graph view = *g;
  view.allocator = *a; /* sk_graph_micro gives the copy its source's allocator */
  sk_result r = sk_graph_micro(&view, 1, c, err);
  if (r) return sk__free(a, c), r;
  for (int o = 0; o < c->nops; o++) {
    sk_op_desc *d = &c->ops[o].desc;
    d->has_strategy = d->has_out_strategy = d->has_layouts = false;
    d->nstrategies = d->nout_layouts = 0;
    memset(d->strategy, 0, sizeof d->strategy), memset(d->strategy_len, 0, sizeof d->strategy_len);
    memset(d->out_strategy, 0, sizeof d->out_strategy);
  }
  *out = c;
  return SK_OK;
}

/* The data-parallel finalist into *p. The plan owns the network copy: as its micro_graph, or,
   when a pipeline made its own copy of it, the copy is no longer read and goes. */
static sk_result sk__fin_data_parallel(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *p,
                                       sk_finalist *f, sk_error *err) {
  const sk_allocator *a = &desc->allocator;
  sk_graph *c = NULL;
  sk_error e = {SK_OK, ""};
  sk_result r = sk__fin_dp_graph(g, a, &c, &e);
  if (r) return sk__fin_compiled(r, &e, f, err);
  sk_autoparallel d = *desc;
  d.mode = SK_PARALLEL_SEMI_AUTO;
  r = sk__fin_compiled(sk_parallel_compile(c, &d, p, &e), &e, f, err);
  if (f->compiled && !p->micro_graph) {
    p->micro_graph = c;
    return r;
  }
  sk_graph_free(c), sk__free(a, c);
  return r;
}

/* The network's own strategies, data parallel elsewhere, into *p (the caller's network). */
static sk_result sk__fin_semi_auto(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *p,
                                   sk_finalist *f, sk_error *err) {
  sk_autoparallel d = *desc;
  d.mode = SK_PARALLEL_SEMI_AUTO;
  sk_error e = {SK_OK, ""};
  return sk__fin_compiled(sk_parallel_compile(g, &d, p, &e), &e, f, err);
}

/* Prices the compiled finalist k in *cand; keeps it in *best when strictly cheaper than the
   finalist kept so far (or when that one has no price), and frees whichever is not kept. */
static sk_result sk__fin_weigh(sk_finalists *out, int k, sk_parallel_plan *best, sk_parallel_plan *cand,
                               sk_error *err) {
  sk_finalist *f = &out->f[k], *kept = &out->f[out->kept];
  sk_result r = f->compiled ? sk__fin_price(cand, f, err) : SK_OK;
  if (!r && f->priced && (!kept->priced || f->step_us < kept->step_us)) {
    sk_parallel_plan old = *best;
    *best = *cand, *cand = old, out->kept = (sk_finalist_kind)k;
  }
  if (f->compiled) sk_parallel_free(cand);
  memset(cand, 0, sizeof *cand);
  return r;
}

/* The other finalists against the search's plan in *plan. */
static sk_result sk__fin_weigh_all(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *plan,
                                   sk_finalists *out, sk_error *err) {
  sk_parallel_plan cand;
  memset(&cand, 0, sizeof cand);
  sk_result r = sk__fin_price(plan, &out->f[SK_FINALIST_SEARCH], err);
  if (!r) r = sk__fin_data_parallel(g, desc, &cand, &out->f[SK_FINALIST_DATA_PARALLEL], err);
  if (!r) r = sk__fin_weigh(out, SK_FINALIST_DATA_PARALLEL, plan, &cand, err);
  if (r || !sk__fin_has_strategies(g)) return sk_parallel_free(&cand), r;
  r = sk__fin_semi_auto(g, desc, &cand, &out->f[SK_FINALIST_SEMI_AUTO], err);
  if (!r) r = sk__fin_weigh(out, SK_FINALIST_SEMI_AUTO, plan, &cand, err);
  sk_parallel_free(&cand);
  return r;
}

SK_API sk_result sk_finalists_compile(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *plan,
                                      sk_finalists *out, sk_error *err) {
  if (!g || !desc || !plan || !out)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "finalists: NULL %s", !g ? "network" : !desc ? "desc" : !plan ? "plan" : "out");
  memset(plan, 0, sizeof *plan), memset(out, 0, sizeof *out);
  out->mode = desc->mode;
  if (desc->mode != SK_PARALLEL_SHARDING_PROPAGATION && desc->mode != SK_PARALLEL_RECURSIVE_PROGRAMMING &&
      desc->mode != SK_PARALLEL_EXHAUSTIVE)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "finalists: mode %s (%d) is not a search mode", sk_parallel_mode_name(desc->mode),
                    (int)desc->mode);
  sk_result r = sk_parallel_compile(g, desc, plan, err);
  if (r) return r;
  out->f[SK_FINALIST_SEARCH].compiled = true, out->search_ms = plan->search_ms;
  if (!sk_cluster_prices(&desc->cluster)) return SK_OK;
  if (sk__fin_files_named(desc)) {
    for (int k = SK_FINALIST_DATA_PARALLEL; k < SK_FINALIST_COUNT; k++)
      snprintf(out->f[k].why, sizeof out->f[k].why, "not compiled: strategy files are named (they describe the search's plan)");
    return SK_OK;
  }
  out->weighed = true;
  r = sk__fin_weigh_all(g, desc, plan, out, err);
  if (r) sk_parallel_free(plan), memset(plan, 0, sizeof *plan);
  return r;
}

SK_EXTERN_C_END
#endif /* SK_FINALISTS_IMPL */
