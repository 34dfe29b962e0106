/* sk_program_create.h -- part of sk_parallel.h's implementation: each stage's create section,
   the buffers a device allocates once when its runtime is created and holds for the run.

   Include sk_parallel.h, not this: its implementation includes this after sk_program_fuse.h.
   Needs only libc.

   WHAT THE SECTION LISTS (one Alloc step each, in the order the runtime takes them)
     Per tensor the stage keeps (without a pipeline every tensor; under one its parameters and
     constants that an operator of the stage reads): a sharded parameter's shard and its
     gradient's shard, else its slice (a recomputed activation's exists only while used, in the
     training step's Alloc/Free); its gradient; a trainable parameter's optimizer states
     (`slot` 0.., as many as the configuration's optimizer keeps, sk_optim_nstates).
     Under a pipeline each input the stage reads, once per micro-batch (its feeds).
     The second-gradient scratch, one per input position (sk__prc_second_grad).
     Under grad_accumulation_step the gradient sums.
     Per operator of the stage: an input read in another layout (its moved copy only where it
     runs the Move, sk_parallel_op.move_op; its gradient always), an output
     out_strategy moves (and its gradient), a forward ReduceScatter's output before it (and its
     gradient); under a pipeline the values among these live in the micro-batches' slots, which
     the training step allocates, so only the gradients are here.
     f16 / bf16 runs: the wire buffer and the 16-bit shadows (sk__prc_wires).
   Not listed: the library's bookkeeping (the host kind: redistribution executors, fusion
   schedulers, local norms), which depends on the modules' internals, not on the plan.

   License: MIT. */
#ifndef SK_PROGRAM_CREATE_H
#define SK_PROGRAM_CREATE_H
#include "sk_parallel.h"
#endif

#if defined(SK_PARALLEL_IMPL) && !defined(SK_PROGRAM_CREATE_IMPL_DONE) && defined(SK_PARALLEL_IMPL_BODY)
#define SK_PROGRAM_CREATE_IMPL_DONE
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

typedef struct sk__prc_b {
  const sk_parallel_plan *p;
  int stage;
  int *readers;      /* [ntensors]: how many operator inputs read the tensor (any stage) */
  bool *here;        /* [ntensors]: an operator of this stage reads it (every tensor without a pipeline) */
  sk_program *create; /* the section being written */
  int cap;
  bool failed;
} sk__prc_b;

static void sk__prc_alloc(sk__prc_b *b, int buffer, int t, int o, int k, int m, int64_t n, sk_dtype dt) {
  if (b->failed || n <= 0) return;
  sk_program *c = b->create;
  if (c->nsteps == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    void *q = c->steps;
    if (!sk__prog_grow(&b->p->desc.allocator, &q, sizeof *c->steps * (size_t)b->cap, sizeof *c->steps * (size_t)cap)) {
      b->failed = true;
      return;
    }
    c->steps = (sk_program_step *)q, b->cap = cap;
  }
  sk_program_step *s = &c->steps[c->nsteps++];
  memset(s, 0, sizeof *s);
  s->kind = SK_PSTEP_ALLOC, s->index = -1, s->op = o, s->slot = k, s->tensor = t, s->micro = m, s->vstage = -1;
  s->peer = -1, s->group = -1, s->buffer = buffer, s->send = -1, s->count = n, s->dtype = dt, s->bucket = -1;
  s->coll = SK_COLL_NONE;
}

static int64_t sk__prc_shard_count(const sk_parallel_plan *p, int t) {
  return sk_parallel_slice_count(p, t) / p->tensors[t].opt_size;
}

/* Tensor t's own buffers: its slice or shard, its gradient, its optimizer states. */
static void sk__prc_tensor(sk__prc_b *b, int t) {
  const sk_parallel_plan *p = b->p;
  const sk_graph *g = p->graph;
  const sk_parallel_tensor *pt = &p->tensors[t];
  bool param = g->tensors[t].role == SK_TENSOR_PARAM, kept = param || g->tensors[t].role == SK_TENSOR_CONST;
  if (p->vstage && (!kept || !b->here[t])) return; /* a pipeline's activations live in slots, its inputs in feeds */
  int64_t n = sk_parallel_slice_count(p, t), kept_n = n; /* kept_n: what each optimizer state holds */
  if (pt->opt_size > 0) {
    kept_n = sk__prc_shard_count(p, t);
    sk__prc_alloc(b, SK_PBUF_SHARD, t, -1, -1, 0, kept_n, SK_F32);
    if (pt->needs_grad) sk__prc_alloc(b, SK_PBUF_SHARD_GRAD, t, -1, -1, 0, kept_n, SK_F32);
  } else if (p->vstage || !sk_parallel_recomputed(p, t)) {
    sk__prc_alloc(b, SK_PBUF_VALUE, t, -1, -1, 0, n, g->tensors[t].dtype);
  }
  if (pt->needs_grad) sk__prc_alloc(b, SK_PBUF_GRAD, t, -1, -1, 0, n, SK_F32);
  int nstates = sk_optim_nstates(&p->desc.optim);
  for (int k = 0; k < nstates && sk_graph_trainable(g, t); k++) sk__prc_alloc(b, SK_PBUF_STATE, t, -1, k, 0, kept_n, SK_F32);
}

/* Whether the gradient operator o's backward writes for input k may be a second one of its
   tensor, computed beside the first and summed in (the kernels overwrite what they write): a
   tensor several operators read, and under a pipeline of several micro-batches a parameter,
   whose micro-batches' gradients sum (an activation's gradient is per micro-batch, in its slot). */
static bool sk__prc_second_grad(const sk_parallel_plan *p, const int *readers, int o, int k) {
  const sk_graph_op *op = &p->graph->ops[o];
  int t = op->inputs[k];
  if (!p->tensors[t].needs_grad || !sk_exec_differentiable(op, k)) return false;
  return readers[t] > 1 || (p->vstage && p->micro > 1 && p->graph->tensors[t].role == SK_TENSOR_PARAM);
}

/* Scratch k holds such a second gradient of input k, in the tensor's layout or the operator's:
   each as long as the most the stage's backward steps need. Under a pipeline scratch 0 also
   receives an activation's gradient from the next stage beside one already written, and the
   last a level2 shard's micro-batch ReduceScatter. */
static void sk__prc_scratch(sk__prc_b *b) {
  const sk_parallel_plan *p = b->p;
  const sk_graph *g = p->graph;
  int64_t most[SK_OP_MAX_INPUTS] = {0};
  for (int i = 0; i < p->nsteps; i++) {
    const sk_parallel_step *s = &p->steps[i];
    if (s->op < 0 || !sk_parallel_op_on_stage(p, s->op, b->stage)) continue;
    if (s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER && p->vstage && p->desc.hsdp.level == SK_HSDP_LEVEL2) {
      int64_t n = sk__prc_shard_count(p, g->ops[s->op].inputs[s->slot]);
      most[SK_OP_MAX_INPUTS - 1] = n > most[SK_OP_MAX_INPUTS - 1] ? n : most[SK_OP_MAX_INPUTS - 1];
    }
    for (int k = 0; s->kind == SK_PSTEP_BACKWARD && k < g->ops[s->op].ninputs; k++) {
      if (!sk__prc_second_grad(p, b->readers, s->op, k)) continue;
      int t = g->ops[s->op].inputs[k];
      int64_t whole = sk_parallel_slice_count(p, t), kernel = sk__prog_count(&p->ops[s->op].kernel_in[k]);
      most[k] = whole > most[k] ? whole : most[k], most[k] = kernel > most[k] ? kernel : most[k];
      if (p->vstage && g->tensors[t].role != SK_TENSOR_PARAM) most[0] = whole > most[0] ? whole : most[0];
    }
  }
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) sk__prc_alloc(b, SK_PBUF_SCRATCH, -1, -1, k, 0, most[k], SK_F32);
}

/* Gradient accumulation: a sum per parameter with a gradient here (a level2 shard's size, else
   its slice's). */
static void sk__prc_sums(sk__prc_b *b) {
  const sk_parallel_plan *p = b->p;
  if (p->desc.grad_accumulation_step <= 1) return;
  for (int t = 0; t < p->graph->ntensors; t++) {
    if (p->graph->tensors[t].role != SK_TENSOR_PARAM || !p->tensors[t].needs_grad || (p->vstage && !b->here[t])) continue;
    bool shard_sum = p->tensors[t].opt_size > 0 && p->desc.hsdp.level == SK_HSDP_LEVEL2;
    sk__prc_alloc(b, SK_PBUF_ACC, t, -1, -1, 0, shard_sum ? sk__prc_shard_count(p, t) : sk_parallel_slice_count(p, t), SK_F32);
  }
}

/* Operator o's buffers beside its tensors'. */
static void sk__prc_op(sk__prc_b *b, int o) {
  const sk_parallel_plan *p = b->p;
  const sk_graph_op *op = &p->graph->ops[o];
  const sk_parallel_op *po = &p->ops[o];
  bool slots = p->vstage != NULL; /* a pipeline keeps the values among these in its slots */
  for (int k = 0; k < op->ninputs; k++) {
    int t = op->inputs[k];
    if (!po->moved[k]) continue;
    int64_t n = sk__prog_count(&po->kernel_in[k]);
    if (!slots && sk_parallel_owns_move(p, o, k)) sk__prc_alloc(b, SK_PBUF_KERNEL_IN, -1, o, k, 0, n, p->graph->tensors[t].dtype);
    if (p->tensors[t].needs_grad) sk__prc_alloc(b, SK_PBUF_KERNEL_DIN, -1, o, k, 0, n, SK_F32);
  }
  for (int k = 0; k < op->noutputs && !slots; k++) {
    int t = op->outputs[k];
    if (!po->out_moved[k]) continue;
    int64_t n = sk__prog_count(&po->plan.out[k]);
    sk__prc_alloc(b, SK_PBUF_KERNEL_OUT, -1, o, k, 0, n, p->graph->tensors[t].dtype);
    if (p->tensors[t].needs_grad) sk__prc_alloc(b, SK_PBUF_KERNEL_DOUT, -1, o, k, 0, n, SK_F32);
  }
  if (po->plan.fwd.kind == SK_COLL_REDUCE_SCATTER) {
    int64_t n = sk__prog_count(&po->plan.out[0]) * sk_mesh_group_size(&po->plan.mesh, po->plan.fwd.axes);
    if (!slots) sk__prc_alloc(b, SK_PBUF_PRE_RS, -1, o, 0, 0, n, p->graph->tensors[op->outputs[0]].dtype);
    sk__prc_alloc(b, SK_PBUF_DY_FULL, -1, o, 0, 0, n, SK_F32);
  }
}

/* ---- the 16-bit wires (f16 / bf16 runs; docs/auto-parallel.md, "Wire dtypes") ------------- */

/* Whether the reducing collectives, and the gradient sync, travel in 16 bits (sk_parallel_run_dtypes). */
static bool sk__prc_half_wire(const sk_autoparallel *d) {
  sk_run_dtypes t = sk_parallel_run_dtypes(d);
  return t.wire != t.compute;
}
static bool sk__prc_half_mirrors(const sk_autoparallel *d) {
  sk_run_dtypes t = sk_parallel_run_dtypes(d);
  return t.gradient != t.compute;
}

/* Elements (of the compute dtype) program step ps converts through the wire buffer: a 16-bit
   forward collective (a ReduceScatter's input and output), a packed or 16-bit BackwardComm (its
   members' gradients, the count the program gave its lead), an unfused 16-bit Mirror. */
static int64_t sk__prc_wire_need(const sk_parallel_plan *p, const sk_program_step *ps) {
  bool half = sk__prc_half_wire(&p->desc);
  if (ps->kind == SK_PSTEP_FORWARD_COMM && half) {
    bool rs = p->steps[ps->index].comm.kind == SK_COLL_REDUCE_SCATTER;
    return ps->count + (rs ? sk__prog_count(&p->ops[ps->op].plan.out[0]) : 0);
  }
  if (ps->kind == SK_PSTEP_BACKWARD_COMM && ps->count > 0 &&
      (half || ps->count != sk__prog_count(&p->ops[ps->op].kernel_in[ps->slot])))
    return ps->count;
  if (ps->kind == SK_PSTEP_MIRROR && ps->bucket < 0 && sk__prc_half_mirrors(&p->desc)) return ps->count;
  return 0;
}

/* The bucket of plan step i's Mirror in the stage's program (the first one's), or -1. */
static int sk__prc_mirror_bucket(const sk_program *pg, int i) {
  for (int j = 0; j < pg->nsteps; j++)
    if (pg->steps[j].kind == SK_PSTEP_MIRROR && pg->steps[j].index == i) return pg->steps[j].bucket;
  return -1;
}

/* The wire buffer (as long as the most any step of the stage needs) and the 16-bit shadows:
   of every fused Mirror's gradient, and of every sharded gradient's slice and shard. */
static void sk__prc_wires(sk__prc_b *b) {
  const sk_parallel_plan *p = b->p;
  const sk_program *pg = &p->programs[b->stage];
  int64_t most = 0, shadows = 0, rs_shadows = 0;
  for (int j = 0; j < pg->nsteps; j++) {
    int64_t n = pg->steps[j].op >= 0 ? sk__prc_wire_need(p, &pg->steps[j]) : 0;
    most = n > most ? n : most;
  }
  for (int i = 0; i < p->nsteps && sk__prc_half_mirrors(&p->desc); i++) {
    const sk_parallel_step *s = &p->steps[i];
    if (s->op < 0 || (p->vstage && !sk_parallel_op_on_stage(p, s->op, b->stage))) continue;
    int t = p->graph->ops[s->op].inputs[s->slot];
    if (s->kind == SK_PSTEP_MIRROR && sk__prc_mirror_bucket(pg, i) >= 0) shadows += sk_parallel_slice_count(p, t);
    if (s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER) rs_shadows += sk_parallel_slice_count(p, t) + sk__prc_shard_count(p, t);
  }
  sk__prc_alloc(b, SK_PBUF_WIRE, -1, -1, -1, 0, most, SK_F32);
  sk__prc_alloc(b, SK_PBUF_SHADOWS, -1, -1, -1, 0, shadows, p->desc.dtype);
  sk__prc_alloc(b, SK_PBUF_RS_SHADOWS, -1, -1, -1, 0, rs_shadows, p->desc.dtype);
}

/* Stage s's create section into p->programs[s].create. False when out of memory. */
static bool sk__prog_create_stage(sk_parallel_plan *p, int s, int *readers, bool *here) {
  const sk_graph *g = p->graph;
  sk_program sec = {0, NULL, 0, NULL};
  sk__prc_b b = {p, s, readers, here, &sec, 0, false};
  for (int t = 0; t < g->ntensors; t++) here[t] = !p->vstage;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs && p->vstage; k++) here[g->ops[o].inputs[k]] |= sk_parallel_op_on_stage(p, o, s);
  for (int t = 0; t < g->ntensors; t++) sk__prc_tensor(&b, t);
  for (int t = 0; t < g->ntensors && p->vstage; t++)
    for (int m = 0; m < p->micro && g->tensors[t].role == SK_TENSOR_INPUT && here[t]; m++)
      sk__prc_alloc(&b, SK_PBUF_FEED, t, -1, -1, m, sk_parallel_slice_count(p, t), g->tensors[t].dtype);
  sk__prc_scratch(&b);
  sk__prc_sums(&b);
  for (int o = 0; o < g->nops; o++)
    if (!p->vstage || sk_parallel_op_on_stage(p, o, s)) sk__prc_op(&b, o);
  sk__prc_wires(&b);
  if (b.failed) return sk__free(&p->desc.allocator, sec.steps), false;
  p->programs[s].ncreate = sec.nsteps, p->programs[s].create = sec.steps;
  return true;
}

/* Every stage's create section. False when out of memory. */
static bool sk__prog_create(sk_parallel_plan *p) {
  const sk_graph *g = p->graph;
  const sk_allocator *a = &p->desc.allocator;
  int *readers = (int *)sk__calloc(a, sizeof(int) * ((size_t)g->ntensors + 1), sizeof(int));
  bool *here = (bool *)sk__calloc(a, sizeof(bool) * ((size_t)g->ntensors + 1), sizeof(bool));
  bool ok = readers && here;
  for (int o = 0; ok && o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++) readers[g->ops[o].inputs[k]]++;
  for (int s = 0; ok && s < p->stages; s++) ok = sk__prog_create_stage(p, s, readers, here);
  sk__free(a, readers), sk__free(a, here);
  return ok;
}

SK_EXTERN_C_END
#endif
