/* sk_search_cost.h -- the cost model the strategy searches share (sk_search.h): for every
   operator of a network, its candidate strategies, and for each the communication it causes and
   the memory it takes on a device; for every edge of the network (a tensor one operator makes
   and another reads, or a parameter two operators read), the cost of moving the tensor from the
   layout one side gives it to the layout the other side wants. docs/strategy-search.md.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_SEARCH_COST_IMPL + the modules it includes)
                             #include "sk_search_cost.h"
   Needs libc, sk_redist.h (the Moves' plans) and sk_topology.h (the prices). Pure planning: no
   world, no buffers.

   CANDIDATES (MindSpore's default set)
     An operator's strategies are the cuts of its JOINT dims: the dims its strategy tuples
     share (MatMul: i, k, j; BatchMatMul: the broadcast batch dims, then m, k, n; element-wise
     and broadcasting operators: the output's dims, each input taking the cut of the dim it is
     aligned to; Gather: the table's dims and the indices' dims). A candidate cuts them with a
     product equal to the devices, each cut dividing its dim, and is kept when sk_ops.h's rule
     accepts it (each operator's joint dims are its table row's space, sk_optable_space.h).
     When no cut uses every device (dims too small), the largest device count
     that has one stands in, the rest repeating. GetNext and VirtualDataset keep their default.
     Operators the network configured (a strategy or layouts) have one candidate: their own.

   COSTS, in one unit: modelled microseconds on desc.cluster, priced as the dry run prices the
   compiled program (sk_dryrun_clock.h), flat or a topology; or bytes when the cluster prices
   nothing (the costs then count the bytes a device sends on its busiest path, latency free).
     own(op, cand)   each collective the program issues for the operator -- the forward one on
                     output 0, in the backward the undoing of a forward ReduceScatter and the
                     rule's collective on each input gradient, and the Mirror (gradient
                     AllReduce) of each parameter -- by sk_cluster_coll_us on the dearest of its
                     real groups (sk_cluster_mesh_coll_us: the stage's world ranks), in the run's
                     dtypes (desc.compute, wire, gradient); a Mirror whole when desc.whole_mirrors
                     (comm_fusion closed), else by its bandwidth alone (the fusion scheduler
                     shares its latency); plus, with desc.cluster.device_flops, its compute:
                     sk_exec_flops on a device's slices for the Forward and the Backward.
     edge(a, b)      the Move of the tensor from a's layout to b's as the dry run charges it: its
                     agreement (an AllReduce of 3 x i64 over the stage), then the steps of the
                     redistribution plan (sk_redist_plan_create on the layouts the cuts make on
                     the stage's devices): a collective on the dearest group of its axes, a
                     Send/Recv exchange at its busiest rank; cached by (cuts, shape, dtype);
                     plus the same move backwards for the gradient where one flows.
     input(op, cand) the same from a network input's dataset layout to the operator's (a
                     Reshape's: the layout its kernel reads, gathered).
     A plan's cost is the sum of own over operators, edge over edges and input over inputs; its
     price (sk_search_plan_price) counts each Move the compiler makes once, and for a serial
     plan equals the dry run's step time.
   Memory per device: the slices of the operator's inputs and outputs (reported; D-Rec's final
   check sums the operators' outputs and the parameters' slices).

   READING THE MODEL: a candidate records each input's and output's layout as cuts
   (sk_search_sig); sk_search_sig_of(layout) gives a layout's, so a layout of one's own (a rule's
   default, a plan's) can be found among the candidates by comparing them. sk_search_cached_pairs
   counts the (from, to) pairs of cuts whose move the model has measured so far (the edge costs'
   cache): how much redistribution work a search caused.

   ERRORS: NULL, a device count outside 1..SK_MAX_DEVICES, a topology with fewer devices than
   that, a graph that is not ready: SK_ERR_INVALID_ARGUMENT; SK_ERR_OUT_OF_MEMORY (nothing
   leaks). Every block comes from the graph's allocator (sk_graph.allocator). The costs return
   no error: when the redistribution cache cannot grow they are measured uncached, still right,
   and cache_failed is set for the searches to report.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_SEARCH_COST_IMPL)
#define SK_SEARCH_COST_IMPL
#endif
#ifndef SK_SEARCH_COST_H
#define SK_SEARCH_COST_H

#include "sk_comm.h"
#include "sk_core.h"
#include "sk_exec.h"
#include "sk_graph.h"
#include "sk_layout.h"
#include "sk_ops.h"
#include "sk_redist.h"
#include "sk_topology.h"

SK_EXTERN_C_BEGIN

#define SK_SEARCH_MAX_JOINT SK_OP_MAX_JOINT /* sk_optable.h */
#define SK_SEARCH_MAX_CANDIDATES 4096 /* per operator; the enumeration stops there */

/* How one tensor dim is cut on a device count: in `count` parts, the part of rank r being
   (r / stride) % count (count 1: whole). Layouts from different device matrices of one size
   compare through it. */
typedef struct sk_search_cut {
  int32_t count, stride;
} sk_search_cut;

typedef struct sk_search_sig {
  int ndims;
  sk_search_cut dim[SK_MAX_DIMS];
} sk_search_sig;

typedef enum sk_search_cand_kind {
  SK_SEARCH_CAND_STRATEGY = 0, /* the strategy below */
  SK_SEARCH_CAND_CONFIGURED,   /* the network's own strategy or layouts */
  SK_SEARCH_CAND_DEFAULT       /* no strategy: the rule's default (GetNext, VirtualDataset) */
} sk_search_cand_kind;

typedef struct sk_search_cand {
  sk_search_cand_kind kind;
  int joint[SK_SEARCH_MAX_JOINT]; /* the cut of each joint dim */
  /* the strategy in sk_op_desc's terms: tuples, their lengths, their entries */
  int ntuples;
  int len[SK_OP_MAX_INPUTS];
  int strategy[SK_OP_MAX_INPUTS][SK_MAX_DIMS];
  int devices;    /* the product of the cuts: the devices it splits over */
  double own;     /* own(op, cand) in the model's unit */
  double own_bytes;
  double memory;  /* bytes per device: its inputs' and outputs' slices */
  double out_bytes; /* bytes per device of its outputs' slices */
  sk_search_sig in[SK_OP_MAX_INPUTS], out[SK_OP_MAX_OUTPUTS];
} sk_search_cand;

/* A tensor between two operators: read by `dst` at input dst_slot, produced by `src` at output
   src_slot (src_param false), or a parameter `src` reads at input src_slot (src_param true: the
   parameter is stored as its first reader, src, wants it). */
typedef struct sk_search_edge {
  int src, src_slot, dst, dst_slot, tensor;
  bool src_param;
} sk_search_edge;

typedef struct sk_search_desc {
  int ndevices;         /* the devices every candidate spreads over (a stage's) */
  /* the cost unit: time on the cluster (a flat link or a topology holding the devices); a cluster
     that prices nothing: bytes; cluster.device_flops > 0:
     own() adds compute time; cluster.device_memory: bytes per device D-Rec's final check allows
     (0: unchecked) */
  sk_cluster cluster;
  /* the dataset layout of each network input, indexed by tensor id (the others ignored);
     NULL: data parallel, dim 0 cut by every device */
  const sk_layout *input_layouts;
  int64_t exhaustive_limit; /* the exact search's work bound (0: 4e9 steps, under a minute) */
  /* list the unconfigured operators' candidates only when a search asks (D-Rec builds its own
     cuts and never does: the compiler sets this for recursive_programming) */
  bool lazy_candidates;
  /* the run's dtypes (sk_parallel_run_dtypes; zero: f32, the default run's): a float tensor
     computes in `compute`, its forward and backward collectives carry `wire`, the Mirrors
     `gradient` (any other dtype travels as itself) */
  sk_dtype compute, wire, gradient;
  /* each Mirror is a call of its own (comm_fusion closed, as a serial plan has it); false: the
     fusion scheduler buckets them and a Mirror is priced by its bandwidth alone */
  bool whole_mirrors;
} sk_search_desc;

typedef struct sk_search_model {
  const sk_graph *graph;
  sk_search_desc desc;
  int *ncands;            /* [nops] */
  sk_search_cand **cands; /* [nops][ncands] */
  bool *configured;       /* [nops]: the network set its strategy (or it keeps its default) */
  bool *needs_grad;       /* [ntensors] */
  sk_search_sig *input_sig; /* [ntensors]: network inputs' dataset cuts */
  int nedges;
  sk_search_edge *edges;
  int *nadj, **adj; /* [nops]: the edges each operator is an end of */
  /* joint dims per operator: sizes, and for each input dim the joint dim it takes (-1: 1) */
  int *njoint;
  int64_t (*joint_size)[SK_SEARCH_MAX_JOINT];
  bool enumerated; /* the unconfigured operators' candidates are listed (sk_search_model_candidates) */
  void *cache;     /* the redistribution cache (private) */
  void *memo;      /* the candidate lists of operators seen, by their description (private) */
  /* the redistribution cache could not grow (the costs stay right, measured uncached), or a
     move's plan ran out of memory (priced by bytes instead): the searches (sk_search.h) report
     SK_ERR_OUT_OF_MEMORY rather than hide it */
  bool cache_failed;
} sk_search_model;

/* Builds the model of g: edges, every operator's candidates (with desc.lazy_candidates only the
   configured operators' one; the others' lists stay empty until sk_search_model_candidates).
   Free with sk_search_model_free. */
SK_API sk_result sk_search_model_build(const sk_graph *g, const sk_search_desc *desc, sk_search_model *m,
                                       sk_error *err);
/* Lists every unconfigured operator's candidates (once; again is a no-op). Operators with the
   same description (kind, attributes, shapes, dtypes, gradients) share one enumeration, so the
   layers of a deep network cost one layer's. */
SK_API sk_result sk_search_model_candidates(sk_search_model *m, sk_error *err);
SK_API void sk_search_model_free(sk_search_model *m);
/* The costs above: edge e with its source at candidate a and its target at candidate b; the
   network inputs op reads, at candidate c. */
SK_API double sk_search_edge_cost(sk_search_model *m, int e, int a, int b);
SK_API double sk_search_input_cost(sk_search_model *m, int op, int c);
/* The same for candidates that need not be in the lists (D-Rec's partial strategies). */
SK_API double sk_search_edge_cost_of(sk_search_model *m, int e, const sk_search_cand *a, const sk_search_cand *b);
SK_API double sk_search_input_cost_of(sk_search_model *m, int op, const sk_search_cand *c);
/* A whole plan's cost: choice[o] is operator o's candidate (every list must hold it). The sum
   of own, input and edge: what the searches minimize (the exhaustive one exactly). */
SK_API double sk_search_plan_cost(sk_search_model *m, const int *choice);
/* The plan's price as the compiler makes it and the dry run prices it: own of every operator,
   and the plan's Moves -- each tensor moved once to each layout its readers want (a tensor read
   by several operators in one layout moves once, its gradient back once), from where it is held
   (its producer's output, its first reader's parameter layout, its dataset cuts). For a serial
   plan (no pipeline, no overlap, comm_fusion closed: desc.whole_mirrors) it equals
   sk_dryrun_step_time's step_us of the compiled plan (tests/test_search_price.c). The sum
   above counts a shared Move once per reader, so it is never below this. */
SK_API double sk_search_plan_price(sk_search_model *m, const int *choice);
/* The bytes every device holds under a plan: the operators' outputs and the parameters' slices. */
SK_API double sk_search_plan_memory(const sk_search_model *m, const int *choice);
/* Evaluates operator op with the joint cuts `joint` as a candidate (the rule must accept it):
   SK_OK and *c filled, or the rule's refusal. */
SK_API sk_result sk_search_eval(sk_search_model *m, int op, const int *joint, sk_search_cand *c, sk_error *err);
/* The cost of moving a tensor of `numel` elements of dt from cuts `from` to cuts `to`; the
   bytes the busiest device receives in *bytes (may be NULL). */
SK_API double sk_search_redist_cost(sk_search_model *m, const sk_search_sig *from, const sk_search_sig *to,
                                    int64_t numel, sk_dtype dt, double *bytes);
/* The cuts of layout l on its devices, as candidates record them in in[] and out[] (l NULL: no
   dims). */
SK_API sk_search_sig sk_search_sig_of(const sk_layout *l);
/* The (from, to) pairs of cuts the model has measured a move between (each over every rank once,
   then cached): grows as searches price edges; 0 for a model not built. */
SK_API size_t sk_search_cached_pairs(const sk_search_model *m);
/* Writes candidate c of operator op into *desc (the graph's desc of op, its shapes filled): the
   strategy set, layouts and output strategy cleared; CONFIGURED leaves the desc as it is. */
SK_API sk_result sk_search_apply(const sk_search_model *m, int op, const sk_search_cand *c, sk_op_desc *desc,
                                 sk_error *err);
/* The strategy of a candidate in MindSpore's tuple syntax, "((2, 1), (1, 4))" ("None" for
   DEFAULT; the network's own for CONFIGURED); snprintf convention. */
SK_API size_t sk_search_format_strategy(const sk_search_model *m, int op, const sk_search_cand *c, char *buf,
                                        size_t cap);

SK_EXTERN_C_END
#endif /* SK_SEARCH_COST_H */

#if defined(SK_SEARCH_COST_IMPL) && !defined(SK_SEARCH_COST_IMPL_DONE)
#define SK_SEARCH_COST_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

/* ---- memory ------------------------------------------------------------------------------------ */

/* Everything the model and the searches (sk_search.h) allocate comes from the graph's allocator
   (sk_graph.allocator; the desc has none). The zeroing one is a macro, not a function: the clang
   analyzer follows only a few nested calls, and past them would not know the memory zeroed. */
#define SK__SC_CALLOC(m, n, size) sk__calloc(&(m)->graph->allocator, (size_t)(n) * (size), 0)
static void sk__sc_free(const sk_search_model *m, void *p) { sk__free(&m->graph->allocator, p); }

/* *p grown to `bytes` keeping its first `used`: the allocator cannot resize, so alloc + copy +
   free (callers double). False, *p untouched, when out of memory. */
static bool sk__sc_grow(const sk_search_model *m, void **p, size_t used, size_t bytes) {
  void *q = sk__alloc(&m->graph->allocator, bytes, sizeof(double));
  if (!q) return false;
  if (used) memcpy(q, *p, used);
  sk__sc_free(m, *p), *p = q;
  return true;
}

/* ---- joint dims -------------------------------------------------------------------------------- */

/* The joint dims of operator o, from its desc (shapes filled by the graph) and its row; n = 0:
   no search. */
static void sk__sc_joint_of(const sk_graph *g, int o, const sk_op_desc *d, sk_op_space *j) {
  memset(j, 0, sizeof *j);
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++)
    for (int e = 0; e < SK_MAX_DIMS; e++) j->src[k][e] = -1;
  j->ntuples = d->ninputs;
  const sk_graph_tensor *out = &g->tensors[g->ops[o].outputs[0]];
  sk_op_row_of(d->kind)->space(d, out->ndims, out->shape, j);
}

/* ---- evaluating a candidate -------------------------------------------------------------------- */

SK_API sk_search_sig sk_search_sig_of(const sk_layout *l) {
  sk_search_sig s;
  memset(&s, 0, sizeof s);
  if (!l) return s;
  s.ndims = l->ndims;
  for (int d = 0; d < l->ndims; d++) {
    int count = 1, stride = 1;
    for (int a = 0; a < l->map[d].naxes; a++) {
      int ax = l->map[d].axes[a];
      count *= l->mesh.dims[ax];
      stride = 1;
      for (int b = ax + 1; b < l->mesh.naxes; b++) stride *= l->mesh.dims[b];
    }
    s.dim[d].count = count, s.dim[d].stride = count > 1 ? stride : 0;
  }
  return s;
}

static double sk__sc_slice_bytes(const sk_layout *l, sk_dtype dt) {
  double n = (double)sk_dtype_size(dt);
  for (int d = 0; d < l->ndims; d++) n *= (double)l->shape[d] / (double)sk_layout_split_count(l, d);
  return n;
}

/* The run's dtype of a tensor of dtype dt travelling as `as` (a float: the run's compute, wire
   or gradient dtype; any other: its own), sk_parallel_run_dtypes' rule. */
static sk_dtype sk__sc_run_dtype(sk_dtype dt, sk_dtype as) { return sk_exec_is_float(dt) ? as : dt; }

/* The model's unit for one `kind` call of `count` elements of dt (count as the call takes it) on
   every group of mesh axes `axes`: the dearest group's price by sk_cluster_mesh_coll_us, the dry
   run's (sk_dryrun_clock.h) own; latency free when `fused` (a fusion bucket's member shares its
   bucket's). *bytes gets what the ring sends from a device; a cluster that prices nothing counts
   those bytes. */
static double sk__sc_coll(const sk_search_model *m, sk_coll_kind kind, double count, sk_dtype dt, const sk_mesh *mesh,
                          uint32_t axes, double *bytes, bool fused) {
  int p = sk_mesh_group_size(mesh, axes);
  if (kind == SK_COLL_NONE || p <= 1 || count <= 0) return 0;
  sk_link_model bytes_model = {0, 1e-3}; /* 1 unit per byte */
  double b = sk_link_cost_us(&bytes_model, kind, (size_t)count, dt, p);
  *bytes += b;
  if (!sk_cluster_prices(&m->desc.cluster)) return b;
  sk_cluster cl = m->desc.cluster;
  if (fused) cl.link.alpha_us = cl.topology.intra.alpha_us = cl.topology.inter.alpha_us = 0;
  double us = 0;
  /* the model checked the cluster and the plan made the mesh: no refusal can come */
  (void)sk_cluster_mesh_coll_us(&cl, kind, (size_t)count, dt, mesh, axes, 0, &us, NULL);
  return us;
}

static double sk__sc_numel_of(const sk_layout *l) {
  double n = 1;
  for (int d = 0; d < l->ndims; d++) n *= (double)l->shape[d] / (double)sk_layout_split_count(l, d);
  return n;
}

static void sk__sc_view(sk_exec_arg *a, const sk_layout *l, sk_dtype dt) {
  memset(a, 0, sizeof *a);
  a->dtype = dt, a->ndims = l->ndims;
  sk_layout_slice_shape(l, a->shape);
}

/* Operator o's compute (us) under plan p, as the dry run counts it: sk_exec_flops on a device's
   slices (inputs in the kernel's layouts, outputs in the rule's, output 0 whole along the
   scattered dim before a forward ReduceScatter), in the run's compute dtype, for its Forward and,
   when a gradient flows, its Backward. */
static double sk__sc_compute(const sk_search_model *m, int o, const sk_op_plan *p, bool backward) {
  const sk_graph *g = m->graph;
  const sk_graph_op *op = &g->ops[o];
  double speed = m->desc.cluster.device_flops;
  if (speed <= 0) return 0;
  sk_exec_arg in[SK_OP_MAX_INPUTS], out[SK_OP_MAX_OUTPUTS];
  memset(in, 0, sizeof in), memset(out, 0, sizeof out);
  for (int k = 0; k < op->ninputs; k++) {
    sk_layout kl;
    if (sk_op_kernel_layout(op->desc.kind, p, k, &kl, NULL)) kl = p->in[k];
    sk__sc_view(&in[k], &kl, sk__sc_run_dtype(g->tensors[op->inputs[k]].dtype, m->desc.compute));
  }
  for (int k = 0; k < op->noutputs && k < SK_OP_MAX_OUTPUTS; k++)
    sk__sc_view(&out[k], &p->out[k], sk__sc_run_dtype(g->tensors[op->outputs[k]].dtype, m->desc.compute));
  if (p->fwd.kind == SK_COLL_REDUCE_SCATTER) out[0].shape[0] *= sk_mesh_group_size(&p->mesh, p->fwd.axes);
  double flops = sk_exec_flops(op, in, out, false) / speed * 1e6;
  if (backward) flops += sk_exec_flops(op, in, out, true) / speed * 1e6;
  return flops;
}

/* The Mirrors (gradient syncs) of operator o's trainable inputs. Fused (desc.whole_mirrors
   false) each is a bucket's member: its bandwidth alone. Whole, each is its own call. */
static double sk__sc_mirrors(const sk_search_model *m, const sk_graph_op *op, const sk_op_plan *p, double *bytes) {
  const sk_graph *g = m->graph;
  double t = 0;
  for (int k = 0; k < op->ninputs; k++) {
    int tk = op->inputs[k];
    if (!m->needs_grad[tk] || !sk_graph_trainable(g, tk)) continue;
    sk_dtype dk = sk__sc_run_dtype(g->tensors[tk].dtype, m->desc.gradient);
    t += sk__sc_coll(m, p->grad[k].kind, sk__sc_numel_of(&p->in[k]), dk, &p->mesh, p->grad[k].axes, bytes,
                     !m->desc.whole_mirrors);
  }
  return t;
}

/* own(op, cand) from the rule's plan: each collective the compiled program issues for the
   operator on its real groups, and its compute. */
static void sk__sc_own(const sk_search_model *m, int o, const sk_op_plan *p, sk_search_cand *c) {
  const sk_graph *g = m->graph;
  const sk_graph_op *op = &g->ops[o];
  sk_dtype dt = g->tensors[op->outputs[0]].dtype;
  bool backward = m->needs_grad[op->outputs[0]];
  double bytes = 0, t = 0;
  sk_coll_kind fk = p->fwd.kind;
  double fcount = sk__sc_numel_of(&p->out[0]);
  t += sk__sc_coll(m, fk, fcount, sk__sc_run_dtype(dt, m->desc.wire), &p->mesh, p->fwd.axes, &bytes, false);
  if (backward && fk == SK_COLL_REDUCE_SCATTER) /* its backward gathers the gradient */
    t += sk__sc_coll(m, SK_COLL_ALLGATHER, fcount, sk__sc_run_dtype(dt, m->desc.compute), &p->mesh, p->fwd.axes,
                     &bytes, false);
  for (int k = 0; k < op->ninputs && backward; k++) {
    int tk = op->inputs[k];
    if (!m->needs_grad[tk]) continue;
    t += sk__sc_coll(m, p->bwd_in[k].kind, sk__sc_numel_of(&p->in[k]), sk__sc_run_dtype(g->tensors[tk].dtype, m->desc.wire),
                     &p->mesh, p->bwd_in[k].axes, &bytes, false);
  }
  if (backward) t += sk__sc_mirrors(m, op, p, &bytes);
  c->own = t + sk__sc_compute(m, o, p, backward), c->own_bytes = bytes;
}

static void sk__sc_fill_strategy(const sk_op_space *j, const int *joint, sk_search_cand *c) {
  c->ntuples = j->ntuples, c->devices = 1;
  for (int e = 0; e < j->n; e++) c->joint[e] = joint[e], c->devices *= joint[e];
  for (int k = 0; k < j->ntuples; k++) {
    c->len[k] = j->len[k];
    for (int e = 0; e < j->len[k]; e++) c->strategy[k][e] = j->src[k][e] >= 0 ? joint[j->src[k][e]] : 1;
  }
}

/* The desc operator o plans with under candidate c. */
static sk_result sk__sc_desc(const sk_search_model *m, int o, const sk_search_cand *c, sk_op_desc *d, sk_error *err) {
  const sk_graph *g = m->graph;
  sk_result r = sk_graph_op_desc(g, o, d, err);
  if (r) return r;
  d->params = 0;
  for (int k = 0; k < g->ops[o].ninputs; k++)
    if (sk_graph_trainable(g, g->ops[o].inputs[k])) d->params |= 1u << k;
  if (c->kind == SK_SEARCH_CAND_CONFIGURED) return SK_OK;
  d->has_strategy = c->kind == SK_SEARCH_CAND_STRATEGY;
  d->has_out_strategy = d->has_layouts = false; /* an unconfigured operator's out_strategy goes with its in_strategy */
  d->nstrategies = d->nout_layouts = 0;
  memset(d->strategy_len, 0, sizeof d->strategy_len);
  memset(d->strategy, 0, sizeof d->strategy);
  for (int k = 0; d->has_strategy && k < c->ntuples; k++) {
    if (c->len[k] != d->ndims[k]) d->strategy_len[k] = c->len[k];
    for (int e = 0; e < c->len[k]; e++) d->strategy[k][e] = c->strategy[k][e];
  }
  return SK_OK;
}

SK_API sk_result sk_search_apply(const sk_search_model *m, int o, const sk_search_cand *c, sk_op_desc *d, sk_error *err) {
  if (!m || !m->graph || !c || !d || o < 0 || o >= m->graph->nops)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: apply: NULL argument or operator %d out of range", o);
  sk_op_desc full;
  sk_result r = sk__sc_desc(m, o, c, &full, err);
  if (r || c->kind == SK_SEARCH_CAND_CONFIGURED) return r;
  d->has_strategy = full.has_strategy, d->has_out_strategy = d->has_layouts = false, d->nstrategies = d->nout_layouts = 0;
  memcpy(d->strategy_len, full.strategy_len, sizeof d->strategy_len);
  memcpy(d->strategy, full.strategy, sizeof d->strategy);
  return SK_OK;
}

/* Plans operator o under c and fills c's layouts' cuts, costs and memory. */
static sk_result sk__sc_eval(sk_search_model *m, int o, sk_search_cand *c, sk_error *err) {
  const sk_graph *g = m->graph;
  const sk_graph_op *op = &g->ops[o];
  sk_op_desc d;
  sk_op_plan p;
  sk_result r = sk__sc_desc(m, o, c, &d, err);
  if (!r) r = sk_op_plan_make(&d, m->desc.ndevices, &p, err);
  if (r) return r;
  if (c->kind != SK_SEARCH_CAND_STRATEGY) {
    int rep = sk_mesh_axis(&p.mesh, "rep");
    c->devices = rep < 0 ? p.mesh.size : p.mesh.size / p.mesh.dims[rep];
  }
  c->memory = c->out_bytes = 0;
  for (int k = 0; k < op->ninputs; k++) {
    sk_layout kl; /* what the kernel reads, so what a Move brings the tensor to (Reshape: gathered) */
    if (sk_op_kernel_layout(op->desc.kind, &p, k, &kl, NULL)) kl = p.in[k];
    c->in[k] = sk_search_sig_of(&kl);
    c->memory += sk__sc_slice_bytes(&p.in[k], g->tensors[op->inputs[k]].dtype);
  }
  for (int k = 0; k < op->noutputs && k < SK_OP_MAX_OUTPUTS; k++) {
    c->out[k] = sk_search_sig_of(&p.out[k]);
    c->out_bytes += sk__sc_slice_bytes(&p.out[k], g->tensors[op->outputs[k]].dtype);
  }
  c->memory += c->out_bytes;
  sk__sc_own(m, o, &p, c);
  return SK_OK;
}

SK_API sk_result sk_search_eval(sk_search_model *m, int o, const int *joint, sk_search_cand *c, sk_error *err) {
  if (!m || !m->graph || !joint || !c || o < 0 || o >= m->graph->nops)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: eval: NULL argument or operator %d out of range", o);
  sk_op_space j;
  sk_op_desc d;
  sk_result r = sk_graph_op_desc(m->graph, o, &d, err);
  if (r) return r;
  sk__sc_joint_of(m->graph, o, &d, &j);
  memset(c, 0, sizeof *c);
  c->kind = j.n ? SK_SEARCH_CAND_STRATEGY : SK_SEARCH_CAND_DEFAULT;
  if (j.n) sk__sc_fill_strategy(&j, joint, c);
  return sk__sc_eval(m, o, c, err);
}

/* ---- candidates -------------------------------------------------------------------------------- */

typedef struct sk__sc_enum {
  sk_search_model *m;
  int op;
  const sk_op_space *j;
  int joint[SK_SEARCH_MAX_JOINT];
  sk_search_cand *out; /* grows */
  int n, cap;
  sk_result oom;
} sk__sc_enum;

static void sk__sc_try(sk__sc_enum *s) {
  if (s->n >= SK_SEARCH_MAX_CANDIDATES || s->oom) return;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    if (!sk__sc_grow(s->m, (void **)&s->out, (size_t)s->n * sizeof *s->out, (size_t)cap * sizeof *s->out)) {
      s->oom = SK_ERR_OUT_OF_MEMORY;
      return;
    }
    s->cap = cap;
  }
  sk_search_cand *c = &s->out[s->n];
  memset(c, 0, sizeof *c);
  c->kind = SK_SEARCH_CAND_STRATEGY;
  sk__sc_fill_strategy(s->j, s->joint, c);
  if (sk__sc_eval(s->m, s->op, c, NULL) == SK_OK) s->n++; /* the rule refuses: not a candidate */
}

/* Every cut of joint dims e.. with product `left`, each dividing its dim; larger cuts of earlier
   dims first (so data parallel, the batch cut, comes first among equals). */
static void sk__sc_enum_from(sk__sc_enum *s, int e, int left) {
  if (e == s->j->n) {
    if (left == 1) sk__sc_try(s);
    return;
  }
  for (int f = left; f >= 1; f--) {
    if (left % f || s->j->size[e] % f) continue;
    s->joint[e] = f;
    sk__sc_enum_from(s, e + 1, left / f);
    if (s->n >= SK_SEARCH_MAX_CANDIDATES || s->oom) return;
  }
}

/* What an operator's candidates depend on: its description, its tensors' shapes, dtypes and
   gradients. Zeroed first, so that equal keys compare equal byte for byte. */
typedef struct sk__sc_key {
  sk_op_desc desc;
  int out_ndims[SK_OP_MAX_OUTPUTS];
  int64_t out_shape[SK_OP_MAX_OUTPUTS][SK_MAX_DIMS];
  int dtype[SK_OP_MAX_INPUTS + SK_OP_MAX_OUTPUTS];
  int flags[SK_OP_MAX_INPUTS + SK_OP_MAX_OUTPUTS]; /* role and needs_grad */
} sk__sc_key;

typedef struct sk__sc_memo {
  sk__sc_key *keys;
  int *op; /* the operator whose list each key's is */
  int n, cap;
} sk__sc_memo;

static void sk__sc_key_of(const sk_search_model *m, int o, const sk_op_desc *d, sk__sc_key *k) {
  const sk_graph *g = m->graph;
  const sk_graph_op *op = &g->ops[o];
  memset(k, 0, sizeof *k);
  k->desc = *d;
  for (int i = 0; i < op->noutputs && i < SK_OP_MAX_OUTPUTS; i++) {
    const sk_graph_tensor *y = &g->tensors[op->outputs[i]];
    k->out_ndims[i] = y->ndims, memcpy(k->out_shape[i], y->shape, sizeof k->out_shape[i]);
    k->dtype[SK_OP_MAX_INPUTS + i] = (int)y->dtype, k->flags[SK_OP_MAX_INPUTS + i] = m->needs_grad[op->outputs[i]];
  }
  for (int i = 0; i < op->ninputs; i++) {
    const sk_graph_tensor *x = &g->tensors[op->inputs[i]];
    k->dtype[i] = (int)x->dtype, k->flags[i] = (int)x->role * 2 + m->needs_grad[op->inputs[i]];
  }
}

/* An operator described by k is already listed: its list, copied (0); -1: none; > 0: out of memory. */
static int sk__sc_recall(sk_search_model *m, const sk__sc_key *k, sk_search_cand **out, int *n) {
  sk__sc_memo *memo = (sk__sc_memo *)m->memo;
  for (int i = 0; i < memo->n; i++) {
    if (memcmp(&memo->keys[i], k, sizeof *k)) continue;
    int from = memo->op[i];
    *out = (sk_search_cand *)SK__SC_CALLOC(m, (size_t)m->ncands[from] + 1, sizeof **out);
    if (!*out) return SK_ERR_OUT_OF_MEMORY;
    memcpy(*out, m->cands[from], (size_t)m->ncands[from] * sizeof **out), *n = m->ncands[from];
    return 0;
  }
  return -1;
}

/* Operator o's list recorded under k. Out of memory (the memo's growth): the lists stay valid,
   and the error is reported rather than the sharing quietly lost. */
static sk_result sk__sc_remember(sk_search_model *m, int o, const sk__sc_key *k, sk_error *err) {
  sk__sc_memo *memo = (sk__sc_memo *)m->memo;
  if (memo->n == memo->cap) {
    size_t n = (size_t)memo->n, cap = memo->cap ? 2 * n : 16;
    if (!sk__sc_grow(m, (void **)&memo->keys, n * sizeof *memo->keys, cap * sizeof *memo->keys) ||
        !sk__sc_grow(m, (void **)&memo->op, n * sizeof *memo->op, cap * sizeof *memo->op))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the memo of candidate lists ('%s')",
                      m->graph->ops[o].name);
    memo->cap = (int)cap;
  }
  memo->keys[memo->n] = *k, memo->op[memo->n++] = o;
  return SK_OK;
}

/* Every cut of operator o's joint dims using the most devices (of ndevices' divisors) that has one. */
static sk_result sk__sc_enumerate(sk_search_model *m, int o, const sk_op_space *j, sk_error *err) {
  sk__sc_enum s;
  memset(&s, 0, sizeof s);
  s.m = m, s.op = o, s.j = j;
  for (int t = m->desc.ndevices; t >= 1 && s.n == 0 && !s.oom; t--)
    if (m->desc.ndevices % t == 0) sk__sc_enum_from(&s, 0, t);
  sk_result r = SK_OK;
  if (s.oom) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the candidates of '%s'", m->graph->ops[o].name);
  else if (s.n == 0)
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: operator '%s' has no strategy its rule accepts", m->graph->ops[o].name);
  if (r) return sk__sc_free(m, s.out), r;
  m->cands[o] = s.out, m->ncands[o] = s.n;
  return SK_OK;
}

/* Operator o's joint dims, and its one candidate when configured (its own strategy or layouts,
   or its default when it has no joint dims). */
static sk_result sk__sc_configure(sk_search_model *m, int o, sk_error *err) {
  const sk_graph *g = m->graph;
  sk_op_desc d;
  sk_op_space j;
  sk_result r = sk_graph_op_desc(g, o, &d, err);
  if (r) return r;
  sk__sc_joint_of(g, o, &d, &j);
  m->njoint[o] = j.n;
  memcpy(m->joint_size[o], j.size, sizeof j.size);
  m->configured[o] = d.has_strategy || d.has_layouts || j.n == 0;
  if (!m->configured[o]) return SK_OK;
  sk_search_cand *c = (sk_search_cand *)SK__SC_CALLOC(m, 1, sizeof *c);
  if (!c) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the candidate of '%s'", g->ops[o].name);
  c->kind = j.n == 0 && !d.has_strategy && !d.has_layouts ? SK_SEARCH_CAND_DEFAULT : SK_SEARCH_CAND_CONFIGURED;
  r = sk__sc_eval(m, o, c, err);
  if (r) return sk__sc_free(m, c), r;
  m->cands[o] = c, m->ncands[o] = 1;
  return SK_OK;
}

SK_API sk_result sk_search_model_candidates(sk_search_model *m, sk_error *err) {
  if (!m || !m->graph) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: candidates: NULL model");
  if (m->enumerated) return SK_OK;
  const sk_graph *g = m->graph;
  sk_result r = SK_OK;
  for (int o = 0; !r && o < g->nops; o++) {
    if (m->configured[o] || m->ncands[o]) continue;
    sk_op_desc d;
    sk_op_space j;
    sk__sc_key k;
    r = sk_graph_op_desc(g, o, &d, err);
    if (r) break;
    d.params = 0;
    for (int i = 0; i < g->ops[o].ninputs; i++)
      if (sk_graph_trainable(g, g->ops[o].inputs[i])) d.params |= 1u << i;
    sk__sc_key_of(m, o, &d, &k);
    int got = sk__sc_recall(m, &k, &m->cands[o], &m->ncands[o]);
    if (got > 0) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the candidates of '%s'", g->ops[o].name);
    if (got != -1) continue;
    sk__sc_joint_of(g, o, &d, &j);
    r = sk__sc_enumerate(m, o, &j, err);
    if (!r) r = sk__sc_remember(m, o, &k, err);
  }
  m->enumerated = !r;
  return r;
}

/* ---- redistribution ---------------------------------------------------------------------------- */

/* A move the model has priced: the tensor (its shape and the dtype it travels in) and the two
   cuts are the key, zeroed past their dims so that keys compare byte for byte. */
typedef struct sk__sc_entry {
  sk_search_sig from, to;
  int64_t shape[SK_MAX_DIMS];
  int dt;
  double held;  /* the least fraction of its target slice a device already holds */
  double us;    /* its price on the clocks (agreement and plan steps); < 0: no redistribution plan */
  bool used;
} sk__sc_entry;

typedef struct sk__sc_cache {
  sk__sc_entry *slots;
  size_t cap, used;
} sk__sc_cache;

static uint64_t sk__sc_hash(const sk__sc_entry *e) {
  uint64_t h = 1469598103934665603ull;
  const sk_search_sig *s[2] = {&e->from, &e->to};
  for (int k = 0; k < 2; k++) {
    h = (h ^ (uint64_t)(uint32_t)s[k]->ndims) * 1099511628211ull;
    for (int d = 0; d < s[k]->ndims && d < SK_MAX_DIMS; d++)
      h = (h ^ ((uint64_t)(uint32_t)s[k]->dim[d].count << 32 | (uint32_t)s[k]->dim[d].stride)) * 1099511628211ull;
  }
  for (int d = 0; d < e->from.ndims && d < SK_MAX_DIMS; d++) h = (h ^ (uint64_t)e->shape[d]) * 1099511628211ull;
  h = (h ^ (uint64_t)(uint32_t)e->dt) * 1099511628211ull;
  return h ^ (h >> 29);
}

/* The part of dim d's target block on rank r that its source block covers (a fraction). */
static double sk__sc_overlap(sk_search_cut s, sk_search_cut t, int r) {
  int64_t cs = s.count, ct = t.count;
  int64_t is = cs > 1 ? (r / s.stride) % cs : 0, it = ct > 1 ? (r / t.stride) % ct : 0;
  /* in units of 1 / (cs * ct) of the dim: source [is*ct, (is+1)*ct), target [it*cs, (it+1)*cs) */
  int64_t lo = is * ct > it * cs ? is * ct : it * cs, hi = (is + 1) * ct < (it + 1) * cs ? (is + 1) * ct : (it + 1) * cs;
  return hi > lo ? (double)(hi - lo) / (double)cs : 0;
}

/* The layout cuts s give a tensor of `shape` on n devices: one mesh axis per cut dim, from the
   major stride down, with unused axes filling the gaps (the devices a slice repeats over). False
   when the cuts do not tile the devices that way or need more axes than a mesh has. */
static bool sk__sc_layout_of(const sk_search_sig *s, int n, const int64_t *shape, sk_layout *l) {
  int order[SK_MAX_DIMS], nc = 0, dims[SK_MAX_AXES], na = 0;
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  for (int d = 0; d < s->ndims; d++) {
    if (s->dim[d].count <= 1) continue;
    int at = nc++;
    for (; at > 0 && s->dim[order[at - 1]].stride < s->dim[d].stride; at--) order[at] = order[at - 1];
    order[at] = d;
  }
  int64_t span = n;
  for (int i = 0; i < nc; i++) {
    int d = order[i];
    int64_t top = (int64_t)s->dim[d].count * s->dim[d].stride;
    if (s->dim[d].stride < 1 || top > span || span % top || na + 2 > SK_MAX_AXES) return false;
    if (top < span) dims[na++] = (int)(span / top);
    map[d].naxes = 1, map[d].axes[0] = na, dims[na++] = s->dim[d].count, span = s->dim[d].stride;
  }
  if (span > 1 || na == 0) {
    if (na == SK_MAX_AXES) return false;
    dims[na++] = (int)span;
  }
  static const char *const names[SK_MAX_AXES] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"};
  sk_mesh mesh;
  return sk_mesh_init(&mesh, na, dims, names, NULL) == SK_OK && sk_layout_init(l, &mesh, s->ndims, shape, map, NULL) == SK_OK;
}

/* Step k of move plan rp on the clocks, as the dry run makes it (sk_dryrun_clock.h): a
   collective on the dearest group of its axes, a Send/Recv exchange at its busiest rank, a local
   step free. */
static sk_result sk__sc_step_us(const sk_search_model *m, const sk_redist_plan *rp, int k, double *us) {
  sk_redist_step_info si;
  sk_result r = sk_redist_plan_step(rp, k, &si, NULL);
  *us = 0;
  if (r || si.op == SK_REDIST_LOCAL || si.op == SK_REDIST_RESHAPE) return r;
  if (si.op == SK_REDIST_SENDRECV) return sk_redist_step_busiest_us(rp, k, &m->desc.cluster, NULL, us, NULL);
  sk_coll_kind kind = si.op == SK_REDIST_ALLREDUCE        ? SK_COLL_ALLREDUCE
                      : si.op == SK_REDIST_REDUCE_SCATTER ? SK_COLL_REDUCE_SCATTER
                      : si.op == SK_REDIST_ALLGATHER      ? SK_COLL_ALLGATHER
                                                          : SK_COLL_ALLTOALL;
  return sk_cluster_mesh_coll_us(&m->desc.cluster, kind, si.count, sk_redist_plan_desc(rp)->dtype, &si.from->mesh,
                                 si.group_axes, 0, us, NULL);
}

/* The move's price as the dry run charges a Move: its agreement (an AllReduce of 3 x i64 over
   the stage), then its redistribution plan's steps (the plan of one rank: every rank's has the
   same steps). -1 when the cuts make no layout or the plan fails (out of memory: flagged in
   cache_failed, for the searches to report). */
static double sk__sc_move_us(sk_search_model *m, const sk__sc_entry *e) {
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  int n = m->desc.ndevices;
  if (!sk__sc_layout_of(&e->from, n, e->shape, &rd.from) || !sk__sc_layout_of(&e->to, n, e->shape, &rd.to)) return -1;
  rd.dtype = (sk_dtype)e->dt, rd.allocator = m->graph->allocator;
  sk_mesh stage;
  static const char *const name[1] = {"stage"};
  double us = 0, step = 0;
  if (sk_mesh_init(&stage, 1, &n, name, NULL) ||
      sk_cluster_mesh_coll_us(&m->desc.cluster, SK_COLL_ALLREDUCE, 3, SK_I64, &stage, 1u, 0, &us, NULL))
    return -1;
  sk_redist_plan *rp = NULL;
  sk_result r = sk_redist_plan_create(&rd, 0, &rp, NULL);
  if (r == SK_ERR_OUT_OF_MEMORY) m->cache_failed = true;
  if (r) return -1;
  for (int k = 0; !r && k < sk_redist_plan_nsteps(rp); k++) r = sk__sc_step_us(m, rp, k, &step), us += step;
  if (r == SK_ERR_OUT_OF_MEMORY) m->cache_failed = true;
  if (r) return sk_redist_plan_destroy(rp), -1;
  sk_redist_plan_destroy(rp);
  return us;
}

static void sk__sc_measure(sk_search_model *m, sk__sc_entry *e) {
  double least = 1;
  for (int r = 0; r < m->desc.ndevices && least > 0; r++) {
    double f = 1;
    for (int d = 0; d < e->to.ndims && f > 0; d++) f *= sk__sc_overlap(e->from.dim[d], e->to.dim[d], r);
    least = f < least ? f : least;
  }
  e->held = least;
  e->us = sk_cluster_prices(&m->desc.cluster) ? sk__sc_move_us(m, e) : -1;
}

/* The cache's slots doubled (from 1024), rehashed; false when out of memory. */
static bool sk__sc_rehash(sk_search_model *m, sk__sc_cache *c) {
  size_t cap = c->cap ? 2 * c->cap : 1024;
  sk__sc_entry *slots = (sk__sc_entry *)SK__SC_CALLOC(m, cap, sizeof *slots);
  if (!slots) return false;
  for (size_t i = 0; i < c->cap; i++) {
    if (!c->slots[i].used) continue;
    size_t h = (size_t)sk__sc_hash(&c->slots[i]) & (cap - 1);
    while (slots[h].used) h = (h + 1) & (cap - 1);
    slots[h] = c->slots[i];
  }
  sk__sc_free(m, c->slots), c->slots = slots, c->cap = cap;
  return true;
}

/* The cached move of key k (measured on first sight); NULL when the cache cannot grow. */
static sk__sc_entry *sk__sc_lookup(sk_search_model *m, const sk__sc_entry *k) {
  sk__sc_cache *c = (sk__sc_cache *)m->cache;
  if (c->used * 2 >= c->cap && !sk__sc_rehash(m, c)) { /* a failed grow keeps the table, computes uncached, is flagged */
    m->cache_failed = true;
    if (c->used + 1 >= c->cap) return NULL;
  }
  size_t h = (size_t)sk__sc_hash(k) & (c->cap - 1);
  while (c->slots[h].used) {
    const sk__sc_entry *e = &c->slots[h];
    if (!memcmp(&e->from, &k->from, sizeof k->from) && !memcmp(&e->to, &k->to, sizeof k->to) &&
        !memcmp(e->shape, k->shape, sizeof k->shape) && e->dt == k->dt)
      return &c->slots[h];
    h = (h + 1) & (c->cap - 1);
  }
  sk__sc_entry *e = &c->slots[h];
  *e = *k, e->used = true, c->used++;
  sk__sc_measure(m, e);
  return e;
}

SK_API size_t sk_search_cached_pairs(const sk_search_model *m) {
  return m && m->cache ? ((const sk__sc_cache *)m->cache)->used : 0;
}

static double sk__sc_sig_numel(const sk_search_sig *s, int64_t numel) {
  double n = (double)numel;
  for (int d = 0; d < s->ndims; d++) n /= (double)s->dim[d].count;
  return n;
}

/* The move of a tensor of `shape` in dt from cuts `from` to cuts `to`, in the model's unit: the
   dry run's price on a pricing cluster, else the bytes the busiest device receives. */
static double sk__sc_move_cost(sk_search_model *m, const sk_search_sig *from, const sk_search_sig *to, const int64_t *shape,
                               sk_dtype dt, double *bytes) {
  if (bytes) *bytes = 0;
  if (!m || !from || !to || !memcmp(from, to, sizeof *from) || from->ndims != to->ndims) return 0;
  sk__sc_entry key, *e;
  memset(&key, 0, sizeof key);
  key.from = *from, key.to = *to, key.dt = (int)dt;
  int64_t numel = 1;
  for (int d = 0; d < from->ndims && d < SK_MAX_DIMS; d++) key.shape[d] = shape[d], numel *= shape[d];
  e = sk__sc_lookup(m, &key);
  if (!e) sk__sc_measure(m, &key), e = &key;
  double b = sk__sc_sig_numel(to, numel) * (double)sk_dtype_size(dt) * (1 - e->held);
  if (bytes) *bytes = b;
  if (e->us >= 0) return e->us; /* a Move to a part of what a device holds still pays its agreement */
  if (b <= 0) return 0;
  /* no plan for these cuts (they do not tile the devices as a mesh would): the bytes over the
     slowest link, with one collective's latency over the stage */
  const sk_cluster *cl = &m->desc.cluster;
  const sk_link_model *l = cl->topology.nodes ? &cl->topology.inter : &cl->link;
  int peers = m->desc.ndevices > 1 ? m->desc.ndevices - 1 : 1;
  return l->gbps > 0 ? peers * l->alpha_us + b * 1e-3 / l->gbps : b;
}

SK_API double sk_search_redist_cost(sk_search_model *m, const sk_search_sig *from, const sk_search_sig *to, int64_t numel,
                                    sk_dtype dt, double *bytes) {
  if (bytes) *bytes = 0;
  if (!m || !from || !to || from->ndims != to->ndims || from->ndims > SK_MAX_DIMS) return 0;
  /* a shape with these elements every cut divides: the cuts' largest on each dim but the first,
     the rest on the first (a move's price depends on its slices' sizes, not on the dims') */
  int64_t shape[SK_MAX_DIMS], rest = numel;
  for (int d = from->ndims - 1; d >= 1; d--) {
    int64_t c = from->dim[d].count > to->dim[d].count ? from->dim[d].count : to->dim[d].count;
    shape[d] = c > 0 && rest % c == 0 ? c : 1, rest /= shape[d];
  }
  if (from->ndims > 0) shape[0] = rest;
  return sk__sc_move_cost(m, from, to, shape, dt, bytes);
}

/* ---- the model --------------------------------------------------------------------------------- */

SK_API double sk_search_edge_cost_of(sk_search_model *m, int ei, const sk_search_cand *a, const sk_search_cand *b) {
  if (!m || !a || !b || ei < 0 || ei >= m->nedges) return 0;
  const sk_search_edge *e = &m->edges[ei];
  const sk_graph_tensor *x = &m->graph->tensors[e->tensor];
  const sk_search_sig *from = e->src_param ? &a->in[e->src_slot] : &a->out[e->src_slot], *to = &b->in[e->dst_slot];
  sk_dtype dt = sk__sc_run_dtype(x->dtype, m->desc.compute);
  double cost = sk__sc_move_cost(m, from, to, x->shape, dt, NULL);
  if (m->needs_grad[e->tensor]) cost += sk__sc_move_cost(m, to, from, x->shape, dt, NULL); /* its gradient back */
  return cost;
}

SK_API double sk_search_edge_cost(sk_search_model *m, int ei, int a, int b) {
  if (!m || ei < 0 || ei >= m->nedges) return 0;
  const sk_search_edge *e = &m->edges[ei];
  if (a < 0 || a >= m->ncands[e->src] || b < 0 || b >= m->ncands[e->dst]) return 0;
  return sk_search_edge_cost_of(m, ei, &m->cands[e->src][a], &m->cands[e->dst][b]);
}

SK_API double sk_search_input_cost_of(sk_search_model *m, int o, const sk_search_cand *c) {
  if (!m || !c || o < 0 || o >= m->graph->nops) return 0;
  const sk_graph_op *op = &m->graph->ops[o];
  double cost = 0;
  for (int k = 0; k < op->ninputs; k++) {
    int t = op->inputs[k];
    if (m->graph->tensors[t].role != SK_TENSOR_INPUT) continue;
    const sk_graph_tensor *x = &m->graph->tensors[t];
    cost += sk__sc_move_cost(m, &m->input_sig[t], &c->in[k], x->shape, sk__sc_run_dtype(x->dtype, m->desc.compute), NULL);
  }
  return cost;
}

SK_API double sk_search_input_cost(sk_search_model *m, int o, int c) {
  if (!m || o < 0 || o >= m->graph->nops || c < 0 || c >= m->ncands[o]) return 0;
  return sk_search_input_cost_of(m, o, &m->cands[o][c]);
}

static int sk__sc_first_reader(const sk_graph *g, int t, int *slot) {
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t) return *slot = k, o;
  return *slot = 0, -1;
}

/* Where tensor t is held before its readers' Moves under plan `choice`: its producer's output,
   the layout its first reader stores a parameter in, or a network input's dataset cuts. NULL: a
   constant (a scalar everywhere, never moved). */
static const sk_search_sig *sk__sc_held_sig(const sk_search_model *m, const int *choice, int t) {
  const sk_graph *g = m->graph;
  const sk_graph_tensor *x = &g->tensors[t];
  int slot = 0, o;
  switch (x->role) {
    case SK_TENSOR_CONST: return NULL;
    case SK_TENSOR_INPUT: return &m->input_sig[t];
    case SK_TENSOR_PARAM:
      o = sk__sc_first_reader(g, t, &slot);
      return o < 0 ? NULL : &m->cands[o][choice[o]].in[slot];
    default: return x->producer < 0 ? NULL : &m->cands[x->producer][choice[x->producer]].out[x->output_index];
  }
}

/* Whether an earlier reader of operator o's input k (an operator before o, or o at a slot before
   k) reads the same tensor in the same cuts: the compiler moves a tensor once per layout its
   readers want (sk_parallel_op.move_op), and its gradient back once. */
static bool sk__sc_moved_before(const sk_search_model *m, const int *choice, int o, int k) {
  const sk_graph *g = m->graph;
  int t = g->ops[o].inputs[k];
  const sk_search_sig *want = &m->cands[o][choice[o]].in[k];
  for (int o2 = 0; o2 <= o; o2++)
    for (int k2 = 0; k2 < g->ops[o2].ninputs && (o2 < o || k2 < k); k2++)
      if (g->ops[o2].inputs[k2] == t && !memcmp(&m->cands[o2][choice[o2]].in[k2], want, sizeof *want)) return true;
  return false;
}

SK_API double sk_search_plan_cost(sk_search_model *m, const int *choice) {
  if (!m || !choice) return 0;
  double cost = 0;
  for (int o = 0; o < m->graph->nops; o++) cost += m->cands[o][choice[o]].own + sk_search_input_cost(m, o, choice[o]);
  for (int e = 0; e < m->nedges; e++) cost += sk_search_edge_cost(m, e, choice[m->edges[e].src], choice[m->edges[e].dst]);
  return cost;
}

SK_API double sk_search_plan_price(sk_search_model *m, const int *choice) {
  if (!m || !choice) return 0;
  const sk_graph *g = m->graph;
  double cost = 0;
  for (int o = 0; o < g->nops; o++) cost += m->cands[o][choice[o]].own;
  /* the plan's Moves: each tensor to each layout its readers want, once, and its gradient back */
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      int t = g->ops[o].inputs[k];
      const sk_search_sig *from = sk__sc_held_sig(m, choice, t), *to = &m->cands[o][choice[o]].in[k];
      if (!from || sk__sc_moved_before(m, choice, o, k)) continue;
      const sk_graph_tensor *x = &g->tensors[t];
      sk_dtype dt = sk__sc_run_dtype(x->dtype, m->desc.compute);
      cost += sk__sc_move_cost(m, from, to, x->shape, dt, NULL);
      if (m->needs_grad[t]) cost += sk__sc_move_cost(m, to, from, x->shape, dt, NULL);
    }
  return cost;
}

SK_API double sk_search_plan_memory(const sk_search_model *m, const int *choice) {
  if (!m || !choice) return 0;
  const sk_graph *g = m->graph;
  double bytes = 0;
  for (int o = 0; o < g->nops; o++) {
    const sk_search_cand *c = &m->cands[o][choice[o]];
    bytes += c->out_bytes;
    for (int k = 0; k < g->ops[o].ninputs; k++) { /* a parameter, where its first reader stores it */
      int t = g->ops[o].inputs[k];
      bool first = g->tensors[t].role == SK_TENSOR_PARAM;
      for (int j = 0; first && j < k; j++) /* read again by the same operator: stored once */
        if (g->ops[o].inputs[j] == t) first = false;
      for (int e = 0; first && e < m->nedges; e++)
        if (m->edges[e].dst == o && m->edges[e].dst_slot == k && m->edges[e].src_param) first = false;
      if (first) bytes += sk__sc_sig_numel(&c->in[k], sk_graph_numel(g, t)) * (double)sk_dtype_size(g->tensors[t].dtype);
    }
  }
  return bytes;
}

/* The dataset cuts of a network input: the desc's layout, or dim 0 over every device. */
static void sk__sc_input_sig(sk_search_model *m, int t) {
  const sk_graph_tensor *x = &m->graph->tensors[t];
  sk_search_sig *s = &m->input_sig[t];
  memset(s, 0, sizeof *s);
  if (m->desc.input_layouts && m->desc.input_layouts[t].ndims == x->ndims && x->ndims > 0) {
    *s = sk_search_sig_of(&m->desc.input_layouts[t]);
    return;
  }
  s->ndims = x->ndims;
  for (int d = 0; d < x->ndims; d++) s->dim[d].count = 1;
  int n = m->desc.ndevices;
  if (x->ndims > 0 && n > 1 && x->shape[0] % n == 0) s->dim[0].count = n, s->dim[0].stride = 1;
}

static sk_result sk__sc_edges(sk_search_model *m, sk_error *err) {
  const sk_graph *g = m->graph;
  int cap = 0;
  for (int o = 0; o < g->nops; o++) cap += g->ops[o].ninputs;
  m->edges = (sk_search_edge *)SK__SC_CALLOC(m, (size_t)cap + 1, sizeof *m->edges);
  m->nadj = (int *)SK__SC_CALLOC(m, (size_t)g->nops + 1, sizeof(int));
  m->adj = (int **)SK__SC_CALLOC(m, (size_t)g->nops + 1, sizeof(int *));
  if (!m->edges || !m->nadj || !m->adj) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the edges");
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      int t = g->ops[o].inputs[k], slot = 0;
      const sk_graph_tensor *x = &g->tensors[t];
      sk_search_edge e = {x->producer, x->output_index, o, k, t, false};
      if (x->role == SK_TENSOR_INPUT || x->role == SK_TENSOR_CONST) continue; /* a constant: a scalar everywhere */
      if (x->role == SK_TENSOR_PARAM) {
        e.src = sk__sc_first_reader(g, t, &slot), e.src_slot = slot, e.src_param = true;
        if (e.src == o) continue; /* its first reader: stored as it wants it */
      }
      m->edges[m->nedges++] = e;
      m->nadj[e.src]++, m->nadj[o]++;
    }
  for (int o = 0; o < g->nops; o++) {
    m->adj[o] = (int *)SK__SC_CALLOC(m, (size_t)m->nadj[o] + 1, sizeof(int));
    if (!m->adj[o]) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "search: out of memory for the edges of '%s'", g->ops[o].name);
    m->nadj[o] = 0;
  }
  for (int e = 0; e < m->nedges; e++) {
    int s = m->edges[e].src, d = m->edges[e].dst;
    if (s < 0 || d < 0 || !m->adj[s] || !m->adj[d]) continue; /* cannot happen: every end is an operator */
    m->adj[s][m->nadj[s]++] = e, m->adj[d][m->nadj[d]++] = e;
  }
  return SK_OK;
}

SK_API void sk_search_model_free(sk_search_model *m) {
  if (!m || !m->graph) return; /* not built (a failed build frees itself): nothing held */
  for (int o = 0; o < m->graph->nops; o++) {
    if (m->cands) sk__sc_free(m, m->cands[o]);
    if (m->adj) sk__sc_free(m, m->adj[o]);
  }
  sk__sc_free(m, m->cands), sk__sc_free(m, m->ncands), sk__sc_free(m, m->configured), sk__sc_free(m, m->needs_grad);
  sk__sc_free(m, m->input_sig), sk__sc_free(m, m->edges), sk__sc_free(m, m->nadj), sk__sc_free(m, m->adj);
  sk__sc_free(m, m->njoint), sk__sc_free(m, m->joint_size);
  if (m->cache) sk__sc_free(m, ((sk__sc_cache *)m->cache)->slots);
  if (m->memo) sk__sc_free(m, ((sk__sc_memo *)m->memo)->keys), sk__sc_free(m, ((sk__sc_memo *)m->memo)->op);
  sk__sc_free(m, m->cache), sk__sc_free(m, m->memo);
  memset(m, 0, sizeof *m);
}

static sk_result sk__sc_alloc(sk_search_model *m, sk_error *err) {
  size_t no = (size_t)m->graph->nops + 1, nt = (size_t)m->graph->ntensors + 1;
  m->ncands = (int *)SK__SC_CALLOC(m, no, sizeof(int));
  m->cands = (sk_search_cand **)SK__SC_CALLOC(m, no, sizeof(sk_search_cand *));
  m->configured = (bool *)SK__SC_CALLOC(m, no, sizeof(bool));
  m->njoint = (int *)SK__SC_CALLOC(m, no, sizeof(int));
  m->joint_size = (int64_t(*)[SK_SEARCH_MAX_JOINT])SK__SC_CALLOC(m, no, sizeof *m->joint_size);
  m->needs_grad = (bool *)SK__SC_CALLOC(m, nt, sizeof(bool));
  m->input_sig = (sk_search_sig *)SK__SC_CALLOC(m, nt, sizeof(sk_search_sig));
  m->cache = SK__SC_CALLOC(m, 1, sizeof(sk__sc_cache));
  m->memo = SK__SC_CALLOC(m, 1, sizeof(sk__sc_memo));
  if (!m->memo || !m->ncands || !m->cands || !m->configured || !m->njoint || !m->joint_size || !m->needs_grad || !m->input_sig ||
      !m->cache)
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY,
                    "search: out of memory for the model's tables (operators' candidates and joint dims, tensors' "
                    "gradients and input cuts, the cache, the memo)");
  return SK_OK;
}

SK_API sk_result sk_search_model_build(const sk_graph *g, const sk_search_desc *desc, sk_search_model *m, sk_error *err) {
  if (!g || !desc || !m) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: NULL argument");
  memset(m, 0, sizeof *m);
  if (desc->ndevices < 1 || desc->ndevices > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: %d devices (1..%d)", desc->ndevices, SK_MAX_DEVICES);
  sk_result r = sk_cluster_check(&desc->cluster, "search: cluster", err);
  const sk_topology *t = &desc->cluster.topology;
  if (!r && t->nodes && (int64_t)t->nodes * t->per_node < desc->ndevices) /* the stage's ranks must be on it */
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "search: cluster.topology holds %d x %d devices, fewer than the %d searched",
                 t->nodes, t->per_node, desc->ndevices);
  if (!r) r = sk_graph_check(g, err);
  if (r) return r;
  m->graph = g, m->desc = *desc;
  r = sk__sc_alloc(m, err);
  if (!r) sk_exec_grad_flow(g, m->needs_grad);
  for (int t = 0; !r && t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_INPUT) sk__sc_input_sig(m, t);
  if (!r) r = sk__sc_edges(m, err);
  for (int o = 0; !r && o < g->nops; o++) r = sk__sc_configure(m, o, err);
  if (!r && !desc->lazy_candidates) r = sk_search_model_candidates(m, err);
  if (r) sk_search_model_free(m);
  return r;
}

/* ---- text -------------------------------------------------------------------------------------- */

static size_t sk__sc_put_tuples(int n, const int *len, const int (*s)[SK_MAX_DIMS], char *buf, size_t cap) {
  size_t at = 0;
  char none[1]; /* the destination when only measuring (buf NULL, cap 0): never NULL for snprintf */
#define SK__SC_PUT(...)                                                     \
  do {                                                                      \
    int w_ = snprintf(buf ? buf + (at < cap ? at : cap) : none, buf && at < cap ? cap - at : 0, __VA_ARGS__); \
    at += w_ > 0 ? (size_t)w_ : 0;                                          \
  } while (0)
  SK__SC_PUT("(");
  for (int k = 0; k < n; k++) {
    SK__SC_PUT("%s(", k ? ", " : "");
    for (int e = 0; e < len[k]; e++) SK__SC_PUT("%s%d", e ? ", " : "", s[k][e]);
    SK__SC_PUT("%s)", len[k] == 1 ? "," : "");
  }
  SK__SC_PUT("%s)", n == 1 ? "," : "");
#undef SK__SC_PUT
  return at;
}

SK_API size_t sk_search_format_strategy(const sk_search_model *m, int o, const sk_search_cand *c, char *buf, size_t cap) {
  if (buf && cap) buf[0] = 0;
  if (!m || !c || o < 0 || o >= m->graph->nops) return 0;
  if (c->kind == SK_SEARCH_CAND_STRATEGY) return sk__sc_put_tuples(c->ntuples, c->len, c->strategy, buf, cap);
  const sk_op_desc *d = &m->graph->ops[o].desc;
  if (c->kind == SK_SEARCH_CAND_DEFAULT || (!d->has_strategy && !d->has_layouts))
    return (size_t)snprintf(buf, cap, "None");
  if (d->has_layouts) return (size_t)snprintf(buf, cap, "(layouts)");
  int n = d->nstrategies ? d->nstrategies : m->graph->ops[o].ninputs, len[SK_OP_MAX_INPUTS];
  for (int k = 0; k < n && k < SK_OP_MAX_INPUTS; k++) len[k] = d->strategy_len[k] ? d->strategy_len[k] : d->ndims[k];
  return sk__sc_put_tuples(n < SK_OP_MAX_INPUTS ? n : SK_OP_MAX_INPUTS, len, d->strategy, buf, cap);
}

SK_EXTERN_C_END
#endif /* SK_SEARCH_COST_IMPL */
