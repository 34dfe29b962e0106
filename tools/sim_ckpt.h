/* sim_ckpt.h -- sk-sim's checkpoints (docs/checkpoints.md): --save-checkpoint DIR [--every
   STEPS], --load-checkpoint DIR [--load-checkpoint-params-only], --checkpoint-io auto|plain|io_uring.

   Every device hands sk_ckpt.h the slices its runtime keeps (sk_runtime_param_slice: each
   parameter and its optimizer states, an optimizer shard where the parameter is sharded) and
   writes those it owns: the round-robin owner among the devices holding the same slice
   (sk_ckpt_writes). Beside them, the plan's strategy file, the step count and the data position
   (the batches consumed: sk-sim's batches are a function of their index, so that is where the
   data continues), and the run's optimizer kind. A load reads the newest checkpoint (LATEST)
   into whatever layouts and device count this run has, then sets the step count; training
   continues from the position. The optimizer states load only into a run of the kind that saved
   them (Momentum's state0 is not Adam's m); --load-checkpoint-params-only reads the parameters
   alone and leaves the states as the runtime made them (zero: the optimizer starts afresh),
   which is also the only way to load a checkpoint that does not say its kind (version 1).
   A run that saves holds its root's lock (sk_ckpt_lock) from before its first step to its end:
   a second run saving there fails at start-up, naming the first one's process.

   Needs sk_ckpt.h's implementation in the including file (sk_sim.c defines SK_IMPL) and zlib,
   plus liburing when built with SK_USE_URING. */
#ifndef SK_TOOLS_SIM_CKPT_H
#define SK_TOOLS_SIM_CKPT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_ckpt.h"
#include "sk_strategy.h"

#include "../examples/progs.h"

typedef struct sim_ckpt_opts {
  const char *save, *load; /* checkpoint roots */
  long every;              /* 0: once, at the end */
  sk_ckpt_io io;
  bool params_only;        /* --load-checkpoint-params-only: the parameters, not the optimizer states */
} sim_ckpt_opts;

#define SIM_CKPT_USAGE_LINE                                                                                       \
  "          [--save-checkpoint DIR [--every STEPS]] [--load-checkpoint DIR [--load-checkpoint-params-only]]\n"    \
  "          [--checkpoint-io auto|plain|io_uring]\n"
#define SIM_CKPT_USAGE                                                                                            \
  "  --save-checkpoint DIR  write a sharded checkpoint under DIR at the end (DIR/ckpt-<step>, DIR/LATEST)\n"          \
  "  --every STEPS        ... and every STEPS steps\n"                                                                \
  "  --load-checkpoint DIR  start from DIR's newest checkpoint, on any device count and strategy; --steps S\n"       \
  "                       then runs S more steps, --epochs E up to epoch E; its optimizer must be this run's\n"     \
  "  --load-checkpoint-params-only  load the parameters only: the optimizer starts afresh (another\n"              \
  "                       optimizer kind, or a checkpoint that does not record one)\n"                               \
  "  --checkpoint-io P    auto (io_uring when the kernel allows it, else plain), plain or io_uring\n"

/* The bytes a root must leave for the names the checkpoints put beneath it
   (".tmp-ckpt-<step>/rank-<r>.bin" and the like). */
#define SIM_CKPT_NAMES_BENEATH (2 * SK_CKPT_FILE_MAX)

/* What is wrong with the value v of checkpoint option a (sim_ckpt_parse returned 1), in buf. A
   root's syntax only: whether it can be created and written is found at start-up. */
static inline const char *sim_ckpt_bad_value(const char *a, const char *v, char *buf, size_t cap) {
  const char *why = prog_path_problem(v, SIM_CKPT_NAMES_BENEATH);
  if (!strcmp(a, "--save-checkpoint") || !strcmp(a, "--load-checkpoint")) snprintf(buf, cap, "%s DIR: %s", a, why);
  else if (!strcmp(a, "--every")) snprintf(buf, cap, "--every takes a positive count of steps");
  else snprintf(buf, cap, "--checkpoint-io takes auto, plain or io_uring");
  return buf;
}

/* A checkpoint option `a` with value v: 0 taken, -1 not ours, 1 a bad value. */
static inline int sim_ckpt_parse(const char *a, const char *v, sim_ckpt_opts *c) {
  bool root = !strcmp(a, "--save-checkpoint") || !strcmp(a, "--load-checkpoint");
  if (root && prog_path_problem(v, SIM_CKPT_NAMES_BENEATH)) return 1;
  if (!strcmp(a, "--save-checkpoint")) c->save = v;
  else if (!strcmp(a, "--load-checkpoint")) c->load = v;
  else if (!strcmp(a, "--every")) {
    if (!prog_parse_long_in(v, 1, LONG_MAX, &c->every)) return 1;
  } else if (!strcmp(a, "--checkpoint-io")) {
    if (!strcmp(v, "auto")) c->io = SK_CKPT_IO_AUTO;
    else if (!strcmp(v, "plain")) c->io = SK_CKPT_IO_PLAIN;
    else if (!strcmp(v, "io_uring")) c->io = SK_CKPT_IO_URING;
    else return 1;
  } else return -1;
  return 0;
}

/* A checkpoint option without a value: true when `a` was one. */
static inline bool sim_ckpt_flag(const char *a, sim_ckpt_opts *c) {
  if (strcmp(a, "--load-checkpoint-params-only")) return false;
  return c->params_only = true;
}

/* What the other options must allow; NULL when they do. */
static inline const char *sim_ckpt_conflict(const sim_ckpt_opts *c, bool check, int accum) {
  if (c->every && !c->save) return "--every needs --save-checkpoint DIR";
  if (c->params_only && !c->load) return "--load-checkpoint-params-only needs --load-checkpoint DIR";
  if (!c->save && !c->load) return NULL;
  if (check && c->load) return "--check compares from step 0: not with --load-checkpoint";
  if (c->every && accum > 1 && c->every % accum) return "--every must be a multiple of --grad-accumulation-step";
  return NULL;
}

/* Taking the save root's lock: device 0 takes it for its process; every device learns the
   outcome (an AllReduce), so under MPI the other processes end too instead of waiting. Device 0
   says why before that AllReduce: once the others know, they exit, and mpirun then kills
   process 0, at times before a message written later had left it. */
typedef struct sim_ckpt_locking {
  const char *root, *prog;
  sk_ckpt_root_lock *lock;
  bool said;                  /* device 0's error is on stderr */
} sim_ckpt_locking;

static inline sk_result sim_ckpt_lock_device(sk_comm *c, void *arg) {
  sim_ckpt_locking *L = (sim_ckpt_locking *)arg;
  sk_error e = {SK_OK, ""};
  sk_result r = sk_comm_rank(c) == 0 ? sk_ckpt_lock(L->root, L->lock, &e) : SK_OK;
  if (r) fprintf(stderr, "%s: %s\n", L->prog, e.msg), fflush(stderr), L->said = true;
  int64_t mine = r, worst = 0;
  sk_result a = sk_allreduce(c, &mine, &worst, 1, SK_I64, SK_MAX, NULL);
  return r ? r : a ? a : worst ? SK_ERR_ABORTED : SK_OK;
}

/* With --save-checkpoint, its root locked for the whole run, before anything trains (*lock:
   held until sk_ckpt_unlock or the process ends). When another run writes there or the root
   cannot be created or written: 1 when device 0 said so on stderr (as "PROG: why"), else -1
   with the message. w: the run's world (NULL: this process). */
static inline int sim_ckpt_lock(sk_world *w, const sim_ckpt_opts *o, sk_ckpt_root_lock *lock, const char *prog,
                                char *msg, size_t cap) {
  if (!o->save) return 0;
  sim_ckpt_locking L;
  memset(&L, 0, sizeof L);
  L.root = o->save, L.lock = lock, L.prog = prog;
  if (w && !sk_world_run(w, sim_ckpt_lock_device, &L, NULL)) return 0;
  if (L.said) return 1;
  sk_error e = {SK_OK, ""};
  if (!w && !sk_ckpt_lock(o->save, lock, &e)) return 0;
  snprintf(msg, cap, "%s", !w ? e.msg : sk_world_error_message(w));
  return -1;
}

/* Every parameter of the plan as sk_redundancy.h sees it (for the writers). */
static inline sk_redundancy_param *sim_ckpt_params(const sk_parallel_plan *plan, int *n) {
  const sk_graph *g = plan->graph;
  sk_redundancy_param *ps = (sk_redundancy_param *)calloc((size_t)g->ntensors + 1, sizeof *ps);
  *n = 0;
  for (int t = 0; ps && t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_PARAM) continue;
    ps[*n].name = g->tensors[t].name, ps[*n].layout = plan->tensors[t].layout;
    ps[*n].opt_shard_size = plan->tensors[t].opt_size, (*n)++;
  }
  return ps;
}

/* This device's slices: each parameter and each state it keeps; `write` where it owns it. Under
   a pipeline a device keeps its stage's parameters only, laid out over the stage's devices: the
   owner is chosen among the stage's, by the device's rank there. */
static inline sk_result sim_ckpt_slices(sk_runtime *rt, const sk_parallel_plan *plan, int world_rank, sk_ckpt_slice **out,
                                        int *n, sk_error *e) {
  const sk_graph *g = plan->graph;
  int rank = plan->vstage ? world_rank - sk_parallel_stage_of_rank(plan, world_rank) * plan->desc.ndevices : world_rank;
  int np = 0;
  sk_redundancy_param *ps = sim_ckpt_params(plan, &np);
  sk_ckpt_slice *s = (sk_ckpt_slice *)calloc((size_t)g->ntensors * 3 + 1, sizeof *s);
  *n = 0, *out = NULL;
  if (!ps || !s) {
    free(ps), free(s);
    return sk_error_set(e, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory (%lld tensors)", (long long)g->ntensors);
  }
  sk_result r = SK_OK;
  for (int t = 0, p = 0; !r && t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_PARAM) continue;
    bool writes = false;
    r = sk_ckpt_writes(np, ps, p++, rank, &writes, e);
    for (int k = 0; !r && k < 3; k++) {
      sk_runtime_slice rs;
      if ((r = sk_runtime_param_slice(rt, t, (sk_runtime_slice_kind)k, &rs, e)) || !rs.data) continue;
      sk_ckpt_slice *c = &s[(*n)++];
      c->tensor = g->tensors[t].name, c->kind = (sk_ckpt_kind)k, c->dtype = rs.dtype, c->ndims = g->tensors[t].ndims;
      memcpy(c->shape, g->tensors[t].shape, sizeof(int64_t) * (size_t)c->ndims);
      c->box = rs.box, c->data = rs.data, c->write = writes;
    }
  }
  free(ps);
  if (r) free(s), s = NULL;
  *out = s;
  return r;
}

/* Collective: one checkpoint of the run (optimizer `optim`) at `position` batches; the lead says
   where it went. */
static inline sk_result sim_ckpt_save(sk_comm *c, sk_runtime *rt, const sk_parallel_plan *plan, sk_optim_kind optim,
                                      const sim_ckpt_opts *o, long position, bool lead, sk_error *e) {
  sk_ckpt_slice *s = NULL;
  int n = 0;
  char *strategy = NULL;
  sk_result r = sim_ckpt_slices(rt, plan, sk_comm_rank(c), &s, &n, e);
  if (!r && lead) r = sk_strategy_format(plan, true, true, true, &strategy, e);
  /* every device learns whether one could not describe its slices: then nobody saves (a save
     without one device's slices would not tile, which sk_ckpt_save refuses too) */
  int64_t status = r, worst = 0;
  sk_result a = sk_allreduce(c, &status, &worst, 1, SK_I64, SK_MAX, NULL);
  if (!r && (a || worst)) r = sk_error_set(e, SK_ERR_ABORTED, "checkpoint: a device failed before saving (%lld)", (long long)worst);
  if (r) return free(s), free(strategy), r;
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = sk_runtime_steps(rt), d.position = position, d.io = o->io, d.optimizer = sk_optim_kind_name(optim);
  d.strategy = strategy, d.strategy_len = strategy ? strlen(strategy) : 0;
  sk_ckpt_report rep;
  memset(&rep, 0, sizeof rep);
  r = sk_ckpt_save(c, o->save, &d, n, s, &rep, e);
  int64_t mine[2] = {(int64_t)rep.bytes, rep.slices}, sum[2] = {0, 0};
  if (!r) r = sk_allreduce(c, mine, sum, 2, SK_I64, SK_SUM, NULL);
  if (!r && lead)
    fprintf(stderr, "sk-sim: checkpoint %s/%s saved at step %lld: %lld slices, %lld bytes (%s)\n", o->save, rep.name,
            (long long)d.step, (long long)sum[1], (long long)sum[0], sk_ckpt_io_name(rep.used));
  free(s), free(strategy);
  return r;
}

/* Whether this run (optimizer `optim`) may read m's optimizer states: m was saved with the
   same kind. Else the message says which kinds, and what loads it anyway. */
static inline sk_result sim_ckpt_same_optimizer(const sk_ckpt_manifest *m, sk_optim_kind optim, sk_error *e) {
  const char *mine = sk_optim_kind_name(optim);
  if (!strcmp(m->optimizer, mine)) return SK_OK;
  if (!e) return SK_ERR_INVALID_ARGUMENT;
  e->code = SK_ERR_INVALID_ARGUMENT;
  if (!*m->optimizer) /* a version-1 manifest: its states could be any optimizer's */
    snprintf(e->msg, sizeof e->msg,
             "checkpoint %.120s does not record its optimizer (version 1): only --load-checkpoint-params-only loads it",
             m->dir);
  else
    snprintf(e->msg, sizeof e->msg,
             "checkpoint %.120s was saved with %s; this run uses %s (use --load-checkpoint-params-only to start the "
             "optimizer afresh)", m->dir, m->optimizer, mine);
  return SK_ERR_INVALID_ARGUMENT;
}

/* The parameters' slices of s, moved to its front (the optimizer states are not read); their count. */
static inline int sim_ckpt_keep_params(sk_ckpt_slice *s, int n) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (s[i].kind == SK_CKPT_PARAM) s[k++] = s[i];
  return k;
}

/* Collective: the newest checkpoint under o->load into this run (optimizer `optim`); *position:
   where the data continues. Every device fails when one does (its message names the tensor and
   rank, or the optimizer kinds). With o->params_only the states stay as they are. */
static inline sk_result sim_ckpt_load(sk_comm *c, sk_runtime *rt, const sk_parallel_plan *plan, sk_optim_kind optim,
                                      const sim_ckpt_opts *o, long *position, bool lead, sk_error *e) {
  sk_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  sk_ckpt_slice *s = NULL;
  int n = 0, rank = sk_comm_rank(c);
  sk_ckpt_report rep;
  memset(&rep, 0, sizeof rep);
  sk_result r = sk_ckpt_open(o->load, &m, e);
  if (!r && !o->params_only) r = sim_ckpt_same_optimizer(&m, optim, e);
  if (!r) r = sim_ckpt_slices(rt, plan, rank, &s, &n, e);
  if (!r && o->params_only) n = sim_ckpt_keep_params(s, n);
  if (!r) r = sk_ckpt_load(&m, rank, o->io, n, s, &rep, e);
  if (!r) r = sk_runtime_set_steps(rt, m.step, e);
  int64_t mine[2] = {(int64_t)r, r ? rank : -1}, all[2] = {0, 0};
  sk_result a = sk_allreduce(c, mine, all, 2, SK_I64, SK_MAX, NULL);
  if (!r && (a || all[0])) r = sk_error_set(e, SK_ERR_ABORTED, "checkpoint: device %lld could not load it", (long long)all[1]);
  if (!r && lead)
    fprintf(stderr, "sk-sim: checkpoint %s/%s loaded: step %lld, position %lld (%s)%s\n", o->load, m.name,
            (long long)m.step, (long long)m.position, sk_ckpt_io_name(rep.used),
            o->params_only ? "; parameters only: the optimizer starts afresh" : "");
  *position = (long)m.position;
  free(s);
  sk_ckpt_manifest_free(&m);
  return r;
}

#endif
