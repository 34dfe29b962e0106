/* sk_program.h -- part of sk_parallel.h's implementation: lowering a compiled plan into the program
   each pipeline stage's devices run (sk_program), the communicators those programs name
   (sk_plan_group), and the program as text (sk_parallel_format_program).

   Include sk_parallel.h, not this: sk_parallel.h's implementation includes it. Needs only libc.

   WHAT A PROGRAM HOLDS
     Without a pipeline: plan.steps in order, the loss's SeedLoss between the forward and the
     backward. Under a pipeline, stage s's action list (plan.schedule) turned into steps:
       F of chunk v, micro-batch m: an Alloc of every buffer the chunk's micro-batch holds (its
         activations and their gradients, its operators' moved inputs and outputs, its outputs
         before a forward ReduceScatter), a Recv of each activation crossing into v from the
         stage before, the forward steps of v's operators, a Send of each activation crossing out
         of v, then (training) a Free of each recomputed output.
       B: an Alloc and a Recompute of the recomputed outputs (their operators' forward steps
         again), a Recv of the gradients of what crossed out of v, SeedLoss on the loss's chunk,
         the backward steps (zero_bubble_v: only those of the inputs' gradients, half 1), a Send
         of the gradients of what crossed into v, then the chunk's Free steps (not under
         zero_bubble_v, whose W frees them after the parameters' gradients, half 2).
       Every Send has a staging copy (Alloc) and a WaitSend that frees it, placed where the send
       is proven complete: right after the first Recv from the same peer that the peer sent after
       receiving it; else at the end of the step. So a peak is a function of the program, not of
       when a poll happened to see a send done.
     Then the Update (plan.steps' last).
   GROUPS: g0 is the world; under a pipeline g1 a stage, g2 and g3 the two links between stages;
     then every other group in order of first use, one id per distinct partition of the devices
     (two meshes that split the devices alike share an id). Redistributions (Move, MoveBack,
     MoveOut, MoveOutBack) run over the stage's group; the groups of their collectives are mesh
     groups with ids too (the runtime's executors take them from the plan's table).

   License: MIT. */
#ifndef SK_PROGRAM_H
#define SK_PROGRAM_H
#include "sk_parallel.h"
#endif

/* Guarded apart: included first with the implementation, this header's implementation runs
   inside sk_parallel.h's (which includes it) before the block above ends, and needs this. */
#ifndef SK_PROGRAM_OP_STEP_DEFINED
#define SK_PROGRAM_OP_STEP_DEFINED
SK_EXTERN_C_BEGIN

/* Whether program step s runs an operator's step of plan.steps (s->index): a plan step kind or
   a Recompute, with its operator (not the Update, nor a buffer, pipeline or bucket step). */
SK__INLINE bool sk_program_op_step(const sk_program_step *s) {
  return (s->kind < SK_PSTEP_ALLOC || s->kind == SK_PSTEP_RECOMPUTE) && s->op >= 0;
}

SK_EXTERN_C_END
#endif

#if defined(SK_PARALLEL_IMPL) && !defined(SK_PROGRAM_IMPL_DONE) && defined(SK_PARALLEL_IMPL_BODY)
#define SK_PROGRAM_IMPL_DONE
#include "sk_redist.h" /* the moves' groups: their plans' collective steps */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

/* ---- groups --------------------------------------------------------------------------------- */

/* Stage-local rank `local`'s members of a mesh or optimizer group (stage-local ranks). */
static sk_result sk__prog_members(const sk_parallel_plan *p, const sk_plan_group *g, int local, int *ranks, int *n) {
  if (g->kind == SK_PGROUP_MESH) return sk_mesh_group(&g->mesh, local, g->axes, ranks, SK_MAX_DEVICES, n, NULL);
  const sk_layout *l = &p->tensors[g->tensor].layout;
  sk_dtype dt = p->graph->tensors[g->tensor].dtype;
  int other[SK_MAX_DEVICES], m = 0; /* 16 KiB on the stack, as in sk_opt_shard_of: no failure to report */
  return g->kind == SK_PGROUP_OPT_GATHER
             ? sk_opt_shard_groups(l, dt, &p->desc.hsdp, local, ranks, n, other, &m, SK_MAX_DEVICES, NULL)
             : sk_opt_shard_groups(l, dt, &p->desc.hsdp, local, other, &m, ranks, n, SK_MAX_DEVICES, NULL);
}

/* The same group by its definition: one mesh's axes, or one parameter's shard groups. */
static bool sk__prog_same_def(const sk_plan_group *a, const sk_plan_group *b) {
  if (a->kind != b->kind) return false;
  if (a->kind != SK_PGROUP_MESH) return a->tensor == b->tensor;
  if (a->axes != b->axes || a->mesh.naxes != b->mesh.naxes) return false;
  for (int i = 0; i < a->mesh.naxes; i++)
    if (a->mesh.dims[i] != b->mesh.dims[i]) return false;
  return true;
}

/* rep[r]: the first rank of stage-local rank r's group (a mesh's groups in one call, a shard's
   one members call per group: the whole partition costs O(devices)). */
static bool sk__prog_reps(const sk_parallel_plan *p, const sk_plan_group *g, int *rep, int *ranks) {
  int n = p->desc.ndevices, ngroups = 0, size = 0;
  for (int r = 0; r < n; r++) rep[r] = -1;
  if (g->kind == SK_PGROUP_MESH) { /* every group at once: the mesh's odometer walked once */
    if (sk_mesh_groups(&g->mesh, g->axes, ranks, SK_MAX_DEVICES, &ngroups, &size, NULL) || ngroups * size != n) return false;
    for (int i = 0; i < ngroups * size; i++) rep[ranks[i]] = ranks[i / size * size];
    return true;
  }
  for (int r = 0; r < n; r++) {
    int m = 0;
    if (rep[r] >= 0) continue;
    if (sk__prog_members(p, g, r, ranks, &m) || m < 1) return false;
    for (int i = 0; i < m; i++)
      if (ranks[i] >= 0 && ranks[i] < n) rep[ranks[i]] = ranks[0];
  }
  return true;
}

/* Whether two stage-level groups split the stage's devices alike (buf: 3 x SK_MAX_DEVICES). */
static bool sk__prog_same_split(const sk_parallel_plan *p, const sk_plan_group *a, const sk_plan_group *b, int *buf) {
  if (sk__prog_same_def(a, b)) return true;
  int *ra = buf, *rb = buf + SK_MAX_DEVICES, *tmp = buf + 2 * SK_MAX_DEVICES;
  if (!sk__prog_reps(p, a, ra, tmp) || !sk__prog_reps(p, b, rb, tmp)) return false;
  return !memcmp(ra, rb, sizeof(int) * (size_t)p->desc.ndevices);
}

/* The id of the plan's group that splits the devices as *want does; -1 when none does, -2 when
   out of memory (told apart: the build must not add a group it could not compare). Without a
   pipeline the stage is the world; a group of the whole stage is the stage's. A group defined
   alike (the same mesh and axes, the same parameter) is found first, without comparing
   partitions. */
static int sk__prog_find(const sk_parallel_plan *p, const sk_plan_group *want) {
  sk_plan_group_kind kind = want->kind == SK_PGROUP_STAGE && !p->vstage ? SK_PGROUP_WORLD : want->kind;
  if (kind <= SK_PGROUP_LINK_BWD) {
    for (int i = 0; i < p->ngroups; i++)
      if (p->groups[i].kind == kind) return i;
    return -1;
  }
  for (int i = 0; i < p->ngroups; i++)
    if (sk__prog_same_def(&p->groups[i], want)) return i;
  const sk_allocator *a = &p->desc.allocator; /* 48 KiB: too much for the stack */
  int *buf = (int *)sk__alloc(a, 3 * sizeof(int) * SK_MAX_DEVICES, sizeof(int)), found = -1, n = 0;
  if (!buf) return -2;
  if (!sk__prog_members(p, want, 0, buf, &n) && n == p->desc.ndevices) { /* the whole stage: its group */
    sk_plan_group whole;
    memset(&whole, 0, sizeof whole);
    whole.kind = SK_PGROUP_STAGE, whole.tensor = -1;
    sk__free(a, buf);
    return sk__prog_find(p, &whole);
  }
  for (int i = 0; i < p->ngroups && found < 0; i++)
    if (p->groups[i].kind > SK_PGROUP_LINK_BWD && sk__prog_same_split(p, &p->groups[i], want, buf)) found = i;
  sk__free(a, buf);
  return found;
}

SK_API int sk_parallel_find_group(const sk_parallel_plan *p, const sk_plan_group *want) {
  if (!p || !want || !p->graph || (want->kind >= SK_PGROUP_OPT_GATHER && (want->tensor < 0 || want->tensor >= p->graph->ntensors)))
    return -1;
  int id = sk__prog_find(p, want);
  return id >= 0 ? id : id == -2 ? -2 : -1;
}

/* *q (`used` bytes of it) moved into `bytes` from allocator a; *q is kept on failure. The
   allocator has no realloc: growth is alloc + copy + free, amortised by doubling. */
static bool sk__prog_grow(const sk_allocator *a, void **q, size_t used, size_t bytes) {
  void *n = sk__alloc(a, bytes, sizeof(double));
  if (!n) return false;
  if (used) memcpy(n, *q, used);
  sk__free(a, *q);
  *q = n;
  return true;
}

/* The id of group *want, added to the plan's table when new; -1 when out of memory. The table
   has no capacity field: it holds a power of two of groups, grown when ngroups reaches one. */
static int sk__prog_group(sk_parallel_plan *p, const sk_plan_group *want) {
  int found = sk__prog_find(p, want);
  if (found >= 0) return found;
  if (found < -1) return -1; /* out of memory comparing */
  if (want->kind == SK_PGROUP_STAGE && !p->vstage) return -1; /* the world, made first */
  int n = p->ngroups;
  void *q = p->groups;
  if ((n & (n - 1)) == 0 && !sk__prog_grow(&p->desc.allocator, &q, (size_t)n * sizeof *p->groups,
                                           (size_t)(n ? 2 * n : 1) * sizeof *p->groups))
    return -1;
  p->groups = (sk_plan_group *)q, p->groups[n] = *want;
  return p->ngroups++;
}

static int sk__prog_fixed(sk_parallel_plan *p, sk_plan_group_kind kind) {
  sk_plan_group g;
  memset(&g, 0, sizeof g);
  g.kind = kind, g.tensor = -1;
  return sk__prog_group(p, &g);
}

static int sk__prog_mesh_group(sk_parallel_plan *p, const sk_mesh *mesh, uint32_t axes) {
  sk_plan_group g;
  memset(&g, 0, sizeof g);
  g.kind = SK_PGROUP_MESH, g.mesh = *mesh, g.axes = axes, g.tensor = -1;
  return sk__prog_group(p, &g);
}

static int sk__prog_opt_group(sk_parallel_plan *p, int t, sk_plan_group_kind kind) {
  sk_plan_group g;
  memset(&g, 0, sizeof g);
  g.kind = kind, g.tensor = t;
  return sk__prog_group(p, &g);
}

SK_API sk_result sk_parallel_group_ranks(const sk_parallel_plan *p, int group, int rank, int *ranks, int cap, int *n,
                                         sk_error *err) {
  if (!p || !p->groups || !ranks || !n || group < 0 || group >= p->ngroups || rank < 0 || rank >= p->world_devices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: group %d of rank %d: out of range", group, rank);
  const sk_plan_group *g = &p->groups[group];
  int stage = sk_parallel_stage_of_rank(p, rank), base = stage * p->desc.ndevices, m = 0;
  int *tmp = (int *)sk__alloc(&p->desc.allocator, sizeof(int) * SK_MAX_DEVICES, sizeof(int));
  if (!tmp) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory listing group %d", group);
  sk_result r = SK_OK;
  if (g->kind == SK_PGROUP_STAGE)
    for (int i = 0; i < p->desc.ndevices; i++) tmp[m++] = base + i;
  else if (g->kind <= SK_PGROUP_LINK_BWD)
    for (int i = 0; i < p->world_devices; i++) tmp[m++] = i;
  else if ((r = sk__prog_members(p, g, rank - base, tmp, &m)) != SK_OK)
    r = sk__fail(err, r, "parallel: group %d of rank %d", group, rank);
  else
    for (int i = 0; i < m; i++) tmp[i] += base;
  if (!r && m > cap) r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: group %d has %d ranks, room for %d", group, m, cap);
  if (!r) memcpy(ranks, tmp, sizeof(int) * (size_t)m), *n = m;
  sk__free(&p->desc.allocator, tmp);
  return r;
}

SK_API uint64_t sk_program_bytes(const sk_program_step *s, sk_dtype run) {
  if (!s || s->count <= 0) return 0;
  sk_dtype compute = run == SK_F64 ? SK_F64 : SK_F32; /* f16 / bf16 runs compute in f32 */
  bool shadows = s->buffer == SK_PBUF_SHADOWS || s->buffer == SK_PBUF_RS_SHADOWS; /* 16 bits, always */
  return (uint64_t)s->count * sk_dtype_size(sk_exec_is_float(s->dtype) && !shadows ? compute : s->dtype);
}

SK_API sk_memory_kind sk_program_memory_kind(const sk_parallel_plan *p, const sk_program_step *s) {
  switch (s->buffer) {
    case SK_PBUF_VALUE: return p->graph->tensors[s->tensor].role == SK_TENSOR_PARAM ? SK_MEM_PARAMETERS : SK_MEM_ACTIVATIONS;
    case SK_PBUF_GATHERED:
    case SK_PBUF_SHARD: return SK_MEM_PARAMETERS;
    case SK_PBUF_GRAD:
    case SK_PBUF_KERNEL_DOUT:
    case SK_PBUF_SHARD_GRAD:
    case SK_PBUF_ACC:
    case SK_PBUF_SCRATCH:
    case SK_PBUF_KERNEL_DIN:
    case SK_PBUF_DY_FULL: return SK_MEM_GRADIENTS;
    case SK_PBUF_STATE: return SK_MEM_OPTIMIZER;
    case SK_PBUF_STAGING:
    case SK_PBUF_WIRE:
    case SK_PBUF_SHADOWS:
    case SK_PBUF_RS_SHADOWS: return SK_MEM_COMMUNICATION;
    default: return SK_MEM_ACTIVATIONS; /* kernel_in, kernel_out, pre_rs, feed */
  }
}

/* ---- building a program ----------------------------------------------------------------------- */

typedef struct sk__prog_b {
  sk_parallel_plan *p;
  sk_program *prog;
  int cap, stage, nforward;
  bool eval; /* an evaluation program: no backward follows a forward */
  int *owner; /* [ntensors]: the chunk here whose slot holds an activation; -1 none */
  bool failed;
  sk_program_step sink; /* written and dropped once an allocation failed */
} sk__prog_b;

static sk_program_step *sk__prog_emit(sk__prog_b *b, sk_parallel_step_kind kind) {
  static const sk_program_step none = {SK_PSTEP_MOVE, -1, -1, -1, -1, 0, 0, -1, -1, -1, -1, 0, false, 0, SK_F32, -1,
                                        SK_COLL_NONE, false};
  if (b->prog->nsteps == b->cap) {
    int cap = b->cap ? 2 * b->cap : 64;
    void *q = b->prog->steps;
    size_t step = sizeof *b->prog->steps;
    if (b->failed || !sk__prog_grow(&b->p->desc.allocator, &q, (size_t)b->cap * step, (size_t)cap * step)) {
      b->failed = true;
      return &b->sink; /* the build reports the failure */
    }
    b->prog->steps = (sk_program_step *)q, b->cap = cap;
  }
  sk_program_step *s = &b->prog->steps[b->prog->nsteps++];
  *s = none;
  s->kind = kind;
  return s;
}

static int64_t sk__prog_count(const sk_layout *l) {
  int64_t shape[SK_MAX_DIMS] = {0}, n = 1;
  sk_layout_slice_shape(l, shape);
  for (int d = 0; d < l->ndims; d++) n *= shape[d];
  return n;
}

static bool sk__prog_is_forward(sk_parallel_step_kind k) {
  return k == SK_PSTEP_MOVE || k == SK_PSTEP_FORWARD || k == SK_PSTEP_FORWARD_COMM || k == SK_PSTEP_PARAM_GATHER ||
         k == SK_PSTEP_PARAM_RELEASE || k == SK_PSTEP_OUT_MOVE;
}

/* Group id `id` as a step takes it: -1 (out of memory) fails the build, so that no step names a
   group that is not there nor the table numbers its groups otherwise than without the failure. */
static int sk__prog_take(sk__prog_b *b, int id) {
  if (id < 0) b->failed = true;
  return id;
}

/* The group and element count an operator step's collective moves (nccl-tests' sizes). */
static void sk__prog_comm(sk__prog_b *b, sk_program_step *ps, const sk_parallel_step *s) {
  sk_parallel_plan *p = b->p;
  const sk_graph_op *op = &p->graph->ops[s->op];
  const sk_parallel_op *po = &p->ops[s->op];
  int t_in = s->kind == SK_PSTEP_UPDATE ? -1 : op->inputs[s->slot];
  switch (s->kind) {
    case SK_PSTEP_FORWARD_COMM:
    case SK_PSTEP_UNDO_COMM: {
      if (s->kind == SK_PSTEP_UNDO_COMM && s->comm.kind != SK_COLL_REDUCE_SCATTER) return; /* a scale */
      int64_t n = sk__prog_count(&po->plan.out[0]);
      if (s->comm.kind == SK_COLL_REDUCE_SCATTER) n *= sk_mesh_group_size(&po->plan.mesh, s->comm.axes);
      ps->group = sk__prog_take(b, sk__prog_mesh_group(p, &po->plan.mesh, s->comm.axes)), ps->count = n;
      ps->dtype = p->graph->tensors[op->outputs[0]].dtype;
      return;
    }
    case SK_PSTEP_BACKWARD_COMM:
    case SK_PSTEP_MIRROR:
      ps->group = sk__prog_take(b, sk__prog_mesh_group(p, &po->plan.mesh, s->comm.axes));
      ps->count = sk__prog_count(&po->kernel_in[s->slot]);
      return;
    case SK_PSTEP_PARAM_GATHER:
    case SK_PSTEP_GRAD_REDUCE_SCATTER:
      ps->group = sk__prog_take(b, sk__prog_opt_group(p, t_in, SK_PGROUP_OPT_GATHER)), ps->count = sk_parallel_slice_count(p, t_in);
      if (s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER && p->tensors[t_in].opt_mirror > 1)
        (void)sk__prog_take(b, sk__prog_opt_group(p, t_in, SK_PGROUP_OPT_MIRROR)); /* its partial Mirror at the update */
      return;
    case SK_PSTEP_MOVE:
    case SK_PSTEP_MOVE_BACK:
    case SK_PSTEP_OUT_MOVE:
    case SK_PSTEP_OUT_MOVE_BACK: ps->group = sk__prog_take(b, sk__prog_fixed(p, SK_PGROUP_STAGE)); return;
    default: return;
  }
}

/* Packed BackwardComm (transformer_opt.enable_communication_fusion): an operator's inputs whose
   gradients take the same reduction over the same group travel in the first one's AllReduce;
   the others' steps move nothing. */
static void sk__prog_bwd_pack(sk__prog_b *b) {
  sk_program *pg = b->prog;
  if (!b->p->desc.transformer_opt.enable_communication_fusion) return;
  for (int i = 0; i < pg->nsteps; i++) {
    sk_program_step *s = &pg->steps[i];
    if (s->kind != SK_PSTEP_BACKWARD_COMM || !s->count) continue;
    for (int j = i + 1; j < pg->nsteps && pg->steps[j].op == s->op && pg->steps[j].micro == s->micro; j++) {
      sk_program_step *u = &pg->steps[j];
      const sk_op_plan *op = &b->p->ops[s->op].plan;
      if (u->kind == SK_PSTEP_BACKWARD_COMM && u->group == s->group && op->bwd_in[u->slot].op == op->bwd_in[s->slot].op)
        s->count += u->count, u->count = 0, u->group = -1;
    }
  }
}

/* An operator step of plan.steps[i] for micro-batch m of chunk v. */
static void sk__prog_op_step(sk__prog_b *b, int i, int v, int m, int half, sk_parallel_step_kind kind) {
  const sk_parallel_step *s = &b->p->steps[i];
  sk_program_step *ps = sk__prog_emit(b, kind);
  ps->index = i, ps->op = s->op, ps->slot = s->slot, ps->micro = m, ps->vstage = v, ps->half = half;
  if (s->op >= 0) sk__prog_comm(b, ps, s);
}

/* ---- a pipeline stage ------------------------------------------------------------------------- */

static int sk__prog_nv(const sk_parallel_plan *p) { return p->stages * p->schedule.chunks; }

static int sk__prog_stage_of(const sk_parallel_plan *p, int v) { return sk_pipe_stage_of(&p->schedule, v, NULL); }

/* Whether tensor t crosses the boundary after virtual stage j: an activation produced at or
   before j and read after it. */
static bool sk__prog_crosses(const sk_parallel_plan *p, int t, int j) {
  const sk_graph *g = p->graph;
  const sk_graph_tensor *x = &g->tensors[t];
  if (x->role != SK_TENSOR_VALUE || p->vstage[x->producer] > j) return false;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t && p->vstage[o] > j) return true;
  return false;
}

/* Which chunk's slot holds each activation on this stage: its producer's, or the first chunk
   here it crosses into. */
static void sk__prog_owners(sk__prog_b *b) {
  const sk_parallel_plan *p = b->p;
  const sk_graph *g = p->graph;
  int nt = g->ntensors;
  for (int t = 0; t < nt; t++) b->owner[t] = -1;
  for (int v = 0; v < sk__prog_nv(p); v++) {
    if (sk__prog_stage_of(p, v) != b->stage) continue;
    for (int t = 0; t < nt; t++)
      if (b->owner[t] < 0 && g->tensors[t].role == SK_TENSOR_VALUE &&
          (p->vstage[g->tensors[t].producer] == v || (v > 0 && sk__prog_crosses(p, t, v - 1))))
        b->owner[t] = v;
  }
}

static void sk__prog_buffer(sk__prog_b *b, bool alloc, int buffer, int t, int o, int k, int v, int m, int64_t n,
                            sk_dtype dt) {
  sk_program_step *s = sk__prog_emit(b, alloc ? SK_PSTEP_ALLOC : SK_PSTEP_FREE);
  s->buffer = buffer, s->tensor = t, s->op = o, s->slot = k, s->vstage = v, s->micro = m, s->count = n, s->dtype = dt;
}

/* Chunk v's buffers of micro-batch m, taken or given back (in the same order). */
static void sk__prog_slot(sk__prog_b *b, bool alloc, int v, int m) {
  const sk_parallel_plan *p = b->p;
  const sk_graph *g = p->graph;
  for (int t = 0; t < g->ntensors; t++) {
    if (b->owner[t] != v) continue;
    int64_t n = sk_parallel_slice_count(p, t);
    sk__prog_buffer(b, alloc, SK_PBUF_VALUE, t, -1, -1, v, m, n, g->tensors[t].dtype);
    if (p->tensors[t].needs_grad) sk__prog_buffer(b, alloc, SK_PBUF_GRAD, t, -1, -1, v, m, n, SK_F32);
  }
  for (int o = 0; o < g->nops; o++) {
    if (p->vstage[o] != v) continue;
    const sk_parallel_op *po = &p->ops[o];
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (po->moved[k])
        sk__prog_buffer(b, alloc, SK_PBUF_KERNEL_IN, -1, o, k, v, m, sk__prog_count(&po->kernel_in[k]),
                        g->tensors[g->ops[o].inputs[k]].dtype);
    for (int k = 0; k < g->ops[o].noutputs; k++) {
      int t = g->ops[o].outputs[k];
      if (!po->out_moved[k]) continue;
      sk__prog_buffer(b, alloc, SK_PBUF_KERNEL_OUT, -1, o, k, v, m, sk__prog_count(&po->plan.out[k]), g->tensors[t].dtype);
      if (p->tensors[t].needs_grad)
        sk__prog_buffer(b, alloc, SK_PBUF_KERNEL_DOUT, -1, o, k, v, m, sk__prog_count(&po->plan.out[k]), SK_F32);
    }
    if (po->plan.fwd.kind == SK_COLL_REDUCE_SCATTER)
      sk__prog_buffer(b, alloc, SK_PBUF_PRE_RS, -1, o, 0, v, m,
                      sk__prog_count(&po->plan.out[0]) * sk_mesh_group_size(&po->plan.mesh, po->plan.fwd.axes),
                      g->tensors[g->ops[o].outputs[0]].dtype);
  }
}

/* The activations (or their gradients) crossing the boundary after virtual stage j, each a Recv
   or a Send (with its staging copy) to or from the stage holding the other side. */
static void sk__prog_cross(sk__prog_b *b, int j, bool send, bool grad, int v, int m) {
  sk_parallel_plan *p = b->p;
  int peer = sk__prog_stage_of(p, send != grad ? j + 1 : j);
  int link = sk__prog_take(b, sk__prog_fixed(p, grad ? SK_PGROUP_LINK_BWD : SK_PGROUP_LINK_FWD));
  for (int t = 0; t < p->graph->ntensors; t++) {
    if (!sk__prog_crosses(p, t, j) || (grad && !p->tensors[t].needs_grad)) continue;
    sk_dtype dt = grad ? SK_F32 : p->graph->tensors[t].dtype;
    int64_t n = sk_parallel_slice_count(p, t);
    if (send) sk__prog_buffer(b, true, SK_PBUF_STAGING, t, -1, -1, v, m, n, dt);
    sk_program_step *s = sk__prog_emit(b, send ? SK_PSTEP_SEND : SK_PSTEP_RECV);
    s->tensor = t, s->vstage = v, s->micro = m, s->peer = peer, s->group = link, s->grad = grad, s->count = n, s->dtype = dt;
  }
}

/* plan.steps of chunk v: forward (i < nforward) or backward ones, of one half under a split
   backward (the rule sk__prog_half gives). */
static bool sk__prog_half(const sk_parallel_plan *p, const sk_parallel_step *s, int half) {
  if (!half || s->kind == SK_PSTEP_BACKWARD || s->kind == SK_PSTEP_PARAM_GATHER) return true;
  if (s->kind == SK_PSTEP_UNDO_COMM) return half == 1 || s->comm.kind == SK_COLL_REDUCE_SCATTER;
  if (s->kind == SK_PSTEP_OUT_MOVE_BACK) return half == 1; /* its gradient stays in the slot for W */
  bool param = (p->ops[s->op].desc.params >> s->slot) & 1u;
  return param == (half == 2);
}

static void sk__prog_run(sk__prog_b *b, int v, int m, bool forward, int half) {
  const sk_parallel_plan *p = b->p;
  for (int i = 0; i < p->nsteps; i++) {
    const sk_parallel_step *s = &p->steps[i];
    if (s->op < 0 || p->vstage[s->op] != v || (i < b->nforward) != forward) continue;
    if (!forward && !sk__prog_half(p, s, half)) continue;
    sk__prog_op_step(b, i, v, m, half, s->kind);
  }
}

static bool sk__prog_recomputed_here(const sk_parallel_plan *p, int v, int t) {
  return sk_parallel_recomputed(p, t) && p->vstage[p->graph->tensors[t].producer] == v;
}

static void sk__prog_forward(sk__prog_b *b, int v, int m) {
  const sk_parallel_plan *p = b->p;
  sk__prog_slot(b, true, v, m);
  if (v > 0 && sk__prog_stage_of(p, v - 1) != b->stage) sk__prog_cross(b, v - 1, false, false, v, m);
  sk__prog_run(b, v, m, true, 0);
  if (v + 1 < sk__prog_nv(p) && sk__prog_stage_of(p, v + 1) != b->stage) sk__prog_cross(b, v, true, false, v, m);
  for (int t = 0; t < p->graph->ntensors && !b->eval; t++)
    if (sk__prog_recomputed_here(p, v, t))
      sk__prog_buffer(b, false, SK_PBUF_VALUE, t, -1, -1, v, m, sk_parallel_slice_count(p, t), p->graph->tensors[t].dtype);
}

static void sk__prog_recompute(sk__prog_b *b, int v, int m) {
  const sk_parallel_plan *p = b->p;
  bool any = false;
  for (int t = 0; t < p->graph->ntensors; t++)
    if (sk__prog_recomputed_here(p, v, t)) {
      sk__prog_buffer(b, true, SK_PBUF_VALUE, t, -1, -1, v, m, sk_parallel_slice_count(p, t), p->graph->tensors[t].dtype);
      any = true;
    }
  for (int i = 0; any && i < b->nforward; i++) {
    const sk_parallel_step *s = &p->steps[i];
    if (s->op >= 0 && p->vstage[s->op] == v && p->graph->ops[s->op].recompute)
      sk__prog_op_step(b, i, v, m, 0, SK_PSTEP_RECOMPUTE);
  }
}

static bool sk__prog_has_loss(const sk_parallel_plan *p, int v) {
  int o = p->graph->tensors[p->graph->loss].producer;
  return o >= 0 && p->vstage[o] == v;
}

static void sk__prog_backward(sk__prog_b *b, int v, int m) {
  const sk_parallel_plan *p = b->p;
  sk__prog_recompute(b, v, m);
  if (v + 1 < sk__prog_nv(p) && sk__prog_stage_of(p, v + 1) != b->stage) sk__prog_cross(b, v, false, true, v, m);
  if (sk__prog_has_loss(p, v)) {
    sk_program_step *s = sk__prog_emit(b, SK_PSTEP_SEED_LOSS);
    s->tensor = p->graph->loss, s->vstage = v, s->micro = m;
  }
  sk__prog_run(b, v, m, false, p->schedule.split_backward ? 1 : 0);
  if (v > 0 && sk__prog_stage_of(p, v - 1) != b->stage) sk__prog_cross(b, v - 1, true, true, v, m);
  if (!p->schedule.split_backward) sk__prog_slot(b, false, v, m);
}

static void sk__prog_weights(sk__prog_b *b, int v, int m) {
  sk__prog_run(b, v, m, false, 2);
  sk__prog_slot(b, false, v, m);
}

/* Evaluation under a pipeline, micro-batch after micro-batch: the forwards of the stage's chunks,
   Score on the loss's stage, then the micro-batch's buffers given back (one held at a time). */
static void sk__prog_eval_stage(sk__prog_b *b) {
  const sk_parallel_plan *p = b->p;
  int last = sk__prog_nv(p) - 1;
  sk__prog_owners(b);
  for (int m = 0; m < p->micro; m++) {
    for (int v = 0; v <= last; v++)
      if (sk__prog_stage_of(p, v) == b->stage) sk__prog_forward(b, v, m);
    if (sk__prog_stage_of(p, last) == b->stage) {
      sk_program_step *s = sk__prog_emit(b, SK_PSTEP_SCORE);
      s->tensor = p->graph->logits, s->vstage = last, s->micro = m;
    }
    for (int v = 0; v <= last; v++)
      if (sk__prog_stage_of(p, v) == b->stage) sk__prog_slot(b, false, v, m);
  }
}

static void sk__prog_pipeline_stage(sk__prog_b *b) {
  const sk_pipe_schedule *s = &b->p->schedule;
  sk__prog_owners(b);
  for (int k = 0; k < s->count[b->stage]; k++) {
    const sk_pipe_action *a = &s->actions[b->stage][k];
    int v = sk_pipe_virtual_stage(s, b->stage, a->chunk);
    if (a->kind == SK_PIPE_F) sk__prog_forward(b, v, a->micro);
    else if (a->kind == SK_PIPE_B) sk__prog_backward(b, v, a->micro);
    else sk__prog_weights(b, v, a->micro);
  }
}

/* ---- without a pipeline ----------------------------------------------------------------------------
   plan.steps, the loss's seed between the forward and the backward, and recomputation: a
   recomputed tensor (sk_parallel_recomputed) has no buffer between steps. Its operator's Forward
   takes it (Alloc); it is freed after the last forward step that uses it, so the backward starts
   without it. Before a backward step that uses it, its operator's forward steps run again
   (Recompute: the same steps, the same dropout seed, so the same values), and it is freed after
   the last step that uses it. A chain of recomputed operators comes back in forward order: what
   a recompute brings back only to feed it is freed once the recompute no longer reads it. */

typedef struct sk__prog_plain_b {
  sk__prog_b *b;
  bool *held;                 /* [ntensors] a recomputed tensor has its buffer now */
  int *last_fwd_use, *last_use; /* [ntensors] the last forward step, and the last step, using it */
} sk__prog_plain_b;

/* The tensors whose values plan step i reads or writes (at most SK__PROG_USES): a Move its
   input, a Forward or Backward its unmoved inputs and its outputs, a ForwardComm output 0, a
   MoveOut its output (what out_strategy moves is the operator's own buffer before it). */
#define SK__PROG_USES (SK_OP_MAX_INPUTS + SK_OP_MAX_OUTPUTS)
static int sk__prog_uses(const sk_parallel_plan *p, int i, int *use) {
  const sk_parallel_step *s = &p->steps[i];
  if (s->op < 0) return 0;
  const sk_graph_op *op = &p->graph->ops[s->op];
  const sk_parallel_op *po = &p->ops[s->op];
  int n = 0;
  if (s->kind == SK_PSTEP_MOVE) use[n++] = op->inputs[s->slot];
  if (s->kind == SK_PSTEP_OUT_MOVE) use[n++] = op->outputs[s->slot];
  if (s->kind == SK_PSTEP_FORWARD_COMM && !po->out_moved[0]) use[n++] = op->outputs[0];
  if (s->kind != SK_PSTEP_FORWARD && s->kind != SK_PSTEP_BACKWARD) return n;
  for (int k = 0; k < op->ninputs; k++)
    if (!po->moved[k]) use[n++] = op->inputs[k];
  for (int k = 0; k < op->noutputs; k++)
    if (!po->out_moved[k]) use[n++] = op->outputs[k];
  return n;
}

static bool sk__prog_step_uses(const sk_parallel_plan *p, int i, int t) {
  int use[SK__PROG_USES];
  for (int u = 0, n = sk__prog_uses(p, i, use); u < n; u++)
    if (use[u] == t) return true;
  return false;
}

static void sk__prog_value(sk__prog_plain_b *pb, bool alloc, int t) {
  const sk_parallel_plan *p = pb->b->p;
  sk__prog_buffer(pb->b, alloc, SK_PBUF_VALUE, t, -1, -1, 0, 0, sk_parallel_slice_count(p, t), p->graph->tensors[t].dtype);
  pb->held[t] = alloc;
}

static void sk__prog_replay(sk__prog_plain_b *pb, int t, int at);

/* Before step i (run for step `at`): the recomputed tensors it uses, taken (its operator's
   Forward writes them) or computed again. */
static void sk__prog_bring_back(sk__prog_plain_b *pb, int i, int at) {
  const sk_parallel_plan *p = pb->b->p;
  const sk_parallel_step *s = &p->steps[i];
  int use[SK__PROG_USES];
  for (int u = 0, n = sk__prog_uses(p, i, use); u < n; u++) {
    int t = use[u];
    if (!sk_parallel_recomputed(p, t) || pb->held[t]) continue;
    bool writes = (s->kind == SK_PSTEP_FORWARD || s->kind == SK_PSTEP_OUT_MOVE) && p->graph->tensors[t].producer == s->op;
    if (writes) sk__prog_value(pb, true, t);
    else sk__prog_replay(pb, t, at);
  }
}

/* Whether a forward step of operator o after step j, or step `at`, uses tensor t. */
static bool sk__prog_used_later(const sk__prog_plain_b *pb, int o, int j, int at, int t) {
  const sk_parallel_plan *p = pb->b->p;
  for (int i = j + 1; i < pb->b->nforward; i++)
    if (p->steps[i].op == o && sk__prog_step_uses(p, i, t)) return true;
  return sk__prog_step_uses(p, at, t);
}

/* Tensor t again, for step `at`: its operator's forward steps (level3's gathers and releases
   too, but not the release of a slice held already: the backward gathered it). */
static void sk__prog_replay(sk__prog_plain_b *pb, int t, int at) {
  const sk_parallel_plan *p = pb->b->p;
  int o = p->graph->tensors[t].producer;
  const sk_graph_op *op = &p->graph->ops[o];
  bool held[SK_OP_MAX_INPUTS];
  for (int k = 0; k < op->ninputs; k++) held[k] = !sk_parallel_recomputed(p, op->inputs[k]) || pb->held[op->inputs[k]];
  for (int j = 0; j < pb->b->nforward; j++) {
    const sk_parallel_step *s = &p->steps[j];
    if (s->op != o || (s->kind == SK_PSTEP_PARAM_RELEASE && held[s->slot])) continue;
    sk__prog_bring_back(pb, j, at);
    sk__prog_op_step(pb->b, j, 0, 0, 0, SK_PSTEP_RECOMPUTE);
    for (int k = 0; k < op->ninputs; k++) { /* brought back only for this recompute */
      int u = op->inputs[k];
      if (!held[k] && pb->held[u] && !sk__prog_used_later(pb, o, j, at, u)) sk__prog_value(pb, false, u);
    }
  }
}

/* Plan step i, the recomputed tensors around it: back before, freed after their last use. */
static void sk__prog_plain_step(sk__prog_plain_b *pb, int i) {
  const sk_parallel_plan *p = pb->b->p;
  sk__prog_bring_back(pb, i, i);
  sk__prog_op_step(pb->b, i, 0, 0, 0, p->steps[i].kind);
  int use[SK__PROG_USES];
  for (int u = 0, n = sk__prog_uses(p, i, use); u < n; u++) {
    int t = use[u];
    if (pb->held[t] && (i < pb->b->nforward ? pb->last_fwd_use[t] : pb->last_use[t]) <= i) sk__prog_value(pb, false, t);
  }
}

static void sk__prog_plain(sk__prog_b *b) {
  const sk_parallel_plan *p = b->p;
  size_t nt = (size_t)p->graph->ntensors + 1;
  const sk_allocator *a = &p->desc.allocator;
  sk__prog_plain_b pb = {b, (bool *)sk__calloc(a, nt * sizeof(bool), sizeof(bool)), (int *)sk__alloc(a, nt * sizeof(int), sizeof(int)),
                         (int *)sk__alloc(a, nt * sizeof(int), sizeof(int))};
  if (!pb.held || !pb.last_fwd_use || !pb.last_use) b->failed = true;
  int use[SK__PROG_USES];
  for (int t = 0; !b->failed && t < p->graph->ntensors; t++) pb.last_fwd_use[t] = pb.last_use[t] = -1;
  for (int i = 0; !b->failed && i < p->nsteps; i++)
    for (int u = 0, n = sk__prog_uses(p, i, use); u < n; u++) {
      if (i < b->nforward) pb.last_fwd_use[use[u]] = i;
      pb.last_use[use[u]] = i;
    }
  for (int i = 0; !b->failed && i < p->nsteps - 1; i++) { /* the Update is the caller's */
    if (i == b->nforward) sk__prog_emit(b, SK_PSTEP_SEED_LOSS)->tensor = p->graph->loss;
    sk__prog_plain_step(&pb, i);
  }
  if (b->nforward >= p->nsteps - 1) sk__prog_emit(b, SK_PSTEP_SEED_LOSS)->tensor = p->graph->loss; /* no backward */
  sk__free(a, pb.held), sk__free(a, pb.last_fwd_use), sk__free(a, pb.last_use);
}

/* ---- WaitSend: where each send is proven complete ---------------------------------------------- */

/* The index in program pg of the n-th (0-based) message of `kind` between it and stage `peer`
   on `link`; -1 when there is none. */
static int sk__prog_nth(const sk_program *pg, sk_parallel_step_kind kind, int peer, int link, int n) {
  for (int i = 0; i < pg->nsteps; i++) {
    const sk_program_step *s = &pg->steps[i];
    if (s->kind == kind && s->peer == peer && s->group == link && n-- == 0) return i;
  }
  return -1;
}

/* How many messages of `kind` to `peer` on `link` come before index i of pg. */
static int sk__prog_before(const sk_program *pg, sk_parallel_step_kind kind, int peer, int link, int i) {
  int n = 0;
  for (int j = 0; j < i; j++) n += pg->steps[j].kind == kind && pg->steps[j].peer == peer && pg->steps[j].group == link;
  return n;
}

/* Where stage s's Send at index i is known complete: after the Recv of the first message its peer
   sent back after receiving it (the peer's Recv blocks, so it took the data before sending),
   when that Recv comes after the Send; else -1 (the end of the step). */
static int sk__prog_proof(const sk_program *progs, int s, int i) {
  const sk_program *me = &progs[s];
  const sk_program_step *snd = &me->steps[i];
  const sk_program *peer = &progs[snd->peer];
  int at = sk__prog_nth(peer, SK_PSTEP_RECV, s, snd->group, sk__prog_before(me, SK_PSTEP_SEND, snd->peer, snd->group, i));
  for (int j = at + 1; at >= 0 && j < peer->nsteps; j++) {
    const sk_program_step *back = &peer->steps[j];
    if (back->kind != SK_PSTEP_SEND || back->peer != s) continue;
    int r = sk__prog_nth(me, SK_PSTEP_RECV, snd->peer, back->group,
                         sk__prog_before(peer, SK_PSTEP_SEND, s, back->group, j));
    return r > i ? r : -1;
  }
  return -1;
}

static bool sk__prog_at_end(sk_parallel_step_kind k) {
  return k == SK_PSTEP_FUSED || k == SK_PSTEP_WAIT_FUSED || k == SK_PSTEP_GRADS_READY || k == SK_PSTEP_SHARD_MIRROR ||
         k == SK_PSTEP_UPDATE;
}

/* Inserts every WaitSend (and the Free of its staging copy) into stage s's program. */
static sk_result sk__prog_wait_sends(const sk_allocator *a, sk_program *progs, int s) {
  sk_program *pg = &progs[s];
  int n = pg->nsteps, nsend = 0;
  int *after = (int *)sk__alloc(a, sizeof(int) * ((size_t)n + 1), sizeof(int));
  if (!after) return SK_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < n; i++) {
    after[i] = pg->steps[i].kind == SK_PSTEP_SEND ? sk__prog_proof(progs, s, i) : -2;
    nsend += pg->steps[i].kind == SK_PSTEP_SEND;
  }
  sk_program_step *out = (sk_program_step *)sk__alloc(a, sizeof *out * ((size_t)n + 2 * (size_t)nsend + 1), sizeof(double));
  int *moved = (int *)sk__alloc(a, sizeof(int) * ((size_t)n + 1), sizeof(int));
  if (!out || !moved) return sk__free(a, after), sk__free(a, out), sk__free(a, moved), SK_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < n; i++) moved[i] = -1;
  int tail = n, m = 0; /* the step's end (sk_program_fuse.h): no Send there */
  while (tail > 0 && sk__prog_at_end(pg->steps[tail - 1].kind)) tail--;
  for (int at = 0; at <= tail; at++) { /* step `at`, then the waits it proves; the rest before the end */
    bool last = at == tail;
    if (!last) moved[at] = m, out[m++] = pg->steps[at];
    for (int i = 0; i < n; i++) {
      if (pg->steps[i].kind != SK_PSTEP_SEND || (last ? after[i] >= 0 : after[i] != at)) continue;
      sk_program_step w = pg->steps[i], f = pg->steps[i];
      w.kind = SK_PSTEP_WAIT_SEND, w.send = moved[i], w.count = 0;
      f.kind = SK_PSTEP_FREE, f.buffer = SK_PBUF_STAGING, f.group = -1, f.peer = -1, f.send = moved[i];
      out[m++] = w, out[m++] = f;
    }
  }
  for (int at = tail; at < n; at++) out[m++] = pg->steps[at];
  sk__free(a, pg->steps), sk__free(a, after), sk__free(a, moved);
  pg->steps = out, pg->nsteps = m;
  return SK_OK;
}

/* ---- the plan's programs ---------------------------------------------------------------------- */

/* The group of each collective step of the move from -> to (and of to -> from when `back`):
   planned without a communicator for rank 0, since every rank's plan has the same steps on the
   same groups. A move that cannot be planned registers nothing (the runtime reports it); false
   only when out of memory. */
static bool sk__prog_move_groups(sk_parallel_plan *p, const sk_layout *from, const sk_layout *to, bool back) {
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  for (int dir = 0; dir < 1 + back; dir++) {
    d.from = dir ? *to : *from, d.to = dir ? *from : *to;
    sk_redist_plan *rp = NULL;
    sk_result r = sk_redist_plan_create(&d, 0, &rp, NULL);
    if (r) return r != SK_ERR_OUT_OF_MEMORY;
    sk_redist_step_info info;
    bool ok = true;
    for (int i = 0; i < sk_redist_plan_nsteps(rp) && ok; i++) {
      if (sk_redist_plan_step(rp, i, &info, NULL)) continue;
      /* the steps an executor runs on a group communicator (sk_redist.h, GROUPS) */
      bool coll = info.op != SK_REDIST_LOCAL && info.op != SK_REDIST_RESHAPE && info.op != SK_REDIST_SENDRECV;
      if (coll) ok = sk__prog_mesh_group(p, &info.from->mesh, info.group_axes) >= 0;
    }
    sk_redist_plan_destroy(rp);
    if (!ok) return false;
  }
  return true;
}

/* Every communicator a runtime creates has an id, also those no step of a program names (the
   groups of a gradient no backward reaches): after the programs' groups, each operator's and
   each sharded parameter's in order, then the moves' collectives' (a move back where the
   runtime makes one: its tensor has a gradient), then those of gathering a parameter, the logits
   or the labels into a whole copy (sk_runtime_gather: checkpoints, checks, evaluation's Score). */
static bool sk__prog_all_groups(sk_parallel_plan *p) {
  const sk_graph *g = p->graph;
  bool ok = true;
  for (int o = 0; o < g->nops && ok; o++) {
    const sk_op_plan *op = &p->ops[o].plan;
    for (int k = 0; k < g->ops[o].ninputs && ok; k++) {
      if (op->bwd_in[k].kind != SK_COLL_NONE) ok = sk__prog_mesh_group(p, &op->mesh, op->bwd_in[k].axes) >= 0;
      if (ok && op->grad[k].kind != SK_COLL_NONE && ((p->ops[o].desc.params >> k) & 1u))
        ok = sk__prog_mesh_group(p, &op->mesh, op->grad[k].axes) >= 0;
    }
    if (ok && op->fwd.kind != SK_COLL_NONE) ok = sk__prog_mesh_group(p, &op->mesh, op->fwd.axes) >= 0;
  }
  for (int t = 0; t < g->ntensors && ok; t++) {
    if (p->tensors[t].opt_size <= 0) continue;
    ok = sk__prog_opt_group(p, t, SK_PGROUP_OPT_GATHER) >= 0;
    if (ok && p->tensors[t].opt_mirror > 1) ok = sk__prog_opt_group(p, t, SK_PGROUP_OPT_MIRROR) >= 0;
  }
  for (int o = 0; o < g->nops && ok; o++) {
    const sk_parallel_op *po = &p->ops[o];
    for (int k = 0; k < g->ops[o].ninputs && ok; k++) {
      const sk_parallel_tensor *pt = &p->tensors[g->ops[o].inputs[k]];
      if (po->moved[k]) ok = sk__prog_move_groups(p, &pt->layout, &po->kernel_in[k], pt->needs_grad);
    }
    for (int k = 0; k < g->ops[o].noutputs && ok; k++) {
      const sk_parallel_tensor *pt = &p->tensors[g->ops[o].outputs[k]];
      if (po->out_moved[k]) ok = sk__prog_move_groups(p, &po->plan.out[k], &pt->layout, pt->needs_grad);
    }
  }
  for (int t = 0; t < g->ntensors && ok; t++) { /* sk_runtime_gather's of what a runtime reads back */
    if (g->tensors[t].role != SK_TENSOR_PARAM && t != g->logits && t != g->labels) continue;
    const sk_layout *l = &p->tensors[t].layout;
    sk_layout whole;
    if (!sk_layout_init(&whole, &l->mesh, l->ndims, l->shape, NULL, NULL)) ok = sk__prog_move_groups(p, l, &whole, false);
  }
  return ok;
}

static sk_result sk__prog_fuse(sk_parallel_plan *p, sk_program *pg, int stage, bool eval, sk_error *err); /* sk_program_fuse.h */
static bool sk__prog_create(sk_parallel_plan *p); /* sk_program_create.h */

/* Every stage's evaluation program (under a pipeline). */
static bool sk__prog_build_evals(sk_parallel_plan *p, int *owner, int nforward) {
  p->evals = (sk_program *)sk__calloc(&p->desc.allocator, sizeof *p->evals * (size_t)p->stages, sizeof(double));
  bool failed = !p->evals;
  for (int s = 0; s < p->stages && !failed; s++) {
    sk__prog_b b;
    memset(&b, 0, sizeof b);
    b.p = p, b.prog = &p->evals[s], b.stage = s, b.nforward = nforward, b.owner = owner, b.eval = true;
    sk__prog_eval_stage(&b);
    failed = b.failed;
  }
  return !failed;
}

/* The training programs (and the pipeline's evaluation programs) with their fused collectives;
   NULL, else what ran out of memory. */
static const char *sk__prog_build_stages(sk_parallel_plan *p, int *owner, int nforward, sk_error *err, sk_result *r) {
  bool piped = p->vstage != NULL; /* read once: the analyzer forgets vstage across the fusing calls */
  for (int s = 0; s < p->stages; s++) {
    sk__prog_b b;
    memset(&b, 0, sizeof b);
    b.p = p, b.prog = &p->programs[s], b.stage = s, b.nforward = nforward, b.owner = owner;
    if (piped) sk__prog_pipeline_stage(&b);
    else sk__prog_plain(&b);
    sk__prog_op_step(&b, p->nsteps - 1, 0, 0, 0, SK_PSTEP_UPDATE);
    sk__prog_bwd_pack(&b);
    if (b.failed) return "the programs' steps";
  }
  if (piped && !sk__prog_build_evals(p, owner, nforward)) return "the evaluation programs";
  for (int s = 0; s < p->stages && !*r; s++) {
    *r = sk__prog_fuse(p, &p->programs[s], s, false, err);
    if (!*r && piped) *r = sk__prog_fuse(p, &p->evals[s], s, true, err);
  }
  for (int s = 0; s < p->stages && !*r && piped; s++)
    if (sk__prog_wait_sends(&p->desc.allocator, p->programs, s) || sk__prog_wait_sends(&p->desc.allocator, p->evals, s))
      return "placing the WaitSends";
  return NULL;
}

static sk_result sk__prog_build(sk_parallel_plan *p, sk_error *err) {
  const sk_allocator *a = &p->desc.allocator;
  p->programs = (sk_program *)sk__calloc(a, sizeof *p->programs * (size_t)p->stages, sizeof(double));
  int *owner = (int *)sk__calloc(a, sizeof(int) * ((size_t)p->graph->ntensors + 1), sizeof(int)); /* each stage's: sk__prog_owners */
  const char *what = p->programs && owner ? NULL : "the programs";
  if (!what && (sk__prog_fixed(p, SK_PGROUP_WORLD) < 0 ||
                (p->vstage && (sk__prog_fixed(p, SK_PGROUP_STAGE) < 0 || sk__prog_fixed(p, SK_PGROUP_LINK_FWD) < 0 ||
                               sk__prog_fixed(p, SK_PGROUP_LINK_BWD) < 0))))
    what = "the groups";
  int nforward = 0;
  while (nforward < p->nsteps && sk__prog_is_forward(p->steps[nforward].kind)) nforward++;
  sk_result r = SK_OK; /* a failure the fusing reported itself */
  if (!what) what = sk__prog_build_stages(p, owner, nforward, err, &r);
  sk__free(a, owner);
  if (r) return r;
  if (!what && !sk__prog_all_groups(p)) what = "the groups";
  if (!what && !sk__prog_create(p)) what = "the create sections";
  return what ? sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for %s", what) : SK_OK;
}

static void sk__prog_free(sk_parallel_plan *p) {
  const sk_allocator *a = &p->desc.allocator;
  for (int s = 0; p->programs && s < p->stages; s++) sk__free(a, p->programs[s].steps), sk__free(a, p->programs[s].create);
  for (int s = 0; p->evals && s < p->stages; s++) sk__free(a, p->evals[s].steps);
  sk__free(a, p->evals);
  sk__free(a, p->programs), sk__free(a, p->groups);
}

/* ---- the program as text ------------------------------------------------------------------------ */

static void sk__prog_put_slice(sk__par_text *t, const char *key, const sk_layout *l, int rank) {
  sk_slice s;
  if (sk_layout_slice(l, rank, &s, NULL)) {
    sk__par_put(t, " %s=?", key);
    return;
  }
  sk__par_put(t, " %s=[", key);
  for (int d = 0; d < l->ndims; d++) sk__par_put(t, "%s%lld:%lld", d ? "," : "", (long long)s.start[d], (long long)s.stop[d]);
  sk__par_put(t, "]");
}

/* " KEY=g5 RANKS={0,1}" for world rank `rank`: group 5 and its members (the first 16). */
static void sk__prog_put_group_as(sk__par_text *t, const sk_parallel_plan *p, const char *key, const char *members,
                                  int group, int rank) {
  int *ranks = (int *)sk__alloc(&p->desc.allocator, sizeof(int) * SK_MAX_DEVICES, sizeof(int)), n = 0;
  sk__par_put(t, " %s=g%d", key, group);
  if (!ranks || sk_parallel_group_ranks(p, group, rank, ranks, SK_MAX_DEVICES, &n, NULL)) n = 0;
  if (n) sk__par_put(t, " %s={", members);
  for (int i = 0; i < n && i < 16; i++) sk__par_put(t, "%s%d", i ? "," : "", ranks[i]);
  if (n) sk__par_put(t, "%s}", n > 16 ? ",..." : "");
  sk__free(&p->desc.allocator, ranks);
}

static void sk__prog_put_group(sk__par_text *t, const sk_parallel_plan *p, int group, int rank) {
  sk__prog_put_group_as(t, p, "group", "ranks", group, rank);
}

SK_API const char *sk_parallel_buffer_name(sk_program_buffer b) {
  static const char *const names[SK_PBUF_COUNT] = {
      "value", "grad",  "kernel_in", "kernel_out", "kernel_dout", "pre_rs",     "staging", "gathered",
      "shard", "shard_grad", "state", "grad_sum",  "scratch",     "feed",        "kernel_din", "dy_full",
      "wire",  "shadows",    "rs_shadows"};
  return (int)b >= 0 && b < SK_PBUF_COUNT ? names[b] : "?";
}

/* The id the build gave parameter t's Mirror group (the replicas left after sharding, summed after
   the GradReduceScatter). */
static int sk__prog_mirror_id(const sk_parallel_plan *p, int t) {
  sk_plan_group want;
  memset(&want, 0, sizeof want);
  want.kind = SK_PGROUP_OPT_MIRROR, want.tensor = t;
  return sk__prog_find(p, &want);
}

/* " mirror=g7 mirror_ranks={0,2,4,6}": a partly sharded parameter's GradReduceScatter. */
static void sk__prog_put_mirror(sk__par_text *t, const sk_parallel_plan *p, int tensor, int rank) {
  int id = p->tensors[tensor].opt_mirror > 1 ? sk__prog_mirror_id(p, tensor) : -1;
  if (id >= 0) sk__prog_put_group_as(t, p, "mirror", "mirror_ranks", id, rank);
}

/* The collective an operator step runs, its group and its bytes. */
static void sk__prog_put_comm(sk__par_text *t, const sk_parallel_plan *p, const sk_program_step *ps, int rank) {
  const sk_parallel_step *s = &p->steps[ps->index];
  sk_coll_kind kind = s->comm.kind;
  if (s->kind == SK_PSTEP_UNDO_COMM && kind == SK_COLL_REDUCE_SCATTER) kind = SK_COLL_ALLGATHER;
  if (s->kind == SK_PSTEP_PARAM_GATHER) kind = SK_COLL_ALLGATHER;
  if (s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER) kind = SK_COLL_REDUCE_SCATTER;
  bool reduces = kind == SK_COLL_ALLREDUCE || kind == SK_COLL_REDUCE_SCATTER;
  if (ps->count) sk__par_put(t, " coll=%s%s%s%s", sk_coll_kind_ms_name(kind), reduces ? "(" : "",
                             reduces ? sk_redop_name(s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER ? SK_SUM : s->comm.op) : "",
                             reduces ? ")" : "");
  if (ps->group >= 0) sk__prog_put_group(t, p, ps->group, rank);
  if (ps->count) sk__par_put(t, " bytes=%llu", (unsigned long long)sk_program_bytes(ps, p->desc.dtype));
  if (s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER) sk__prog_put_mirror(t, p, p->graph->ops[s->op].inputs[s->slot], rank);
  if (s->comm.kind != SK_COLL_NONE && s->comm.scale != 1 && s->comm.scale != 0) sk__par_put(t, " scale=%.6g", s->comm.scale);
}

/* An operator step's fields: its input or output, the slices it moves between, its collective. */
static void sk__prog_put_op(sk__par_text *t, const sk_parallel_plan *p, const sk_program_step *ps, int rank, int local) {
  const sk_graph *g = p->graph;
  const sk_parallel_step *s = &p->steps[ps->index];
  const sk_graph_op *op = &g->ops[s->op];
  const sk_parallel_op *po = &p->ops[s->op];
  sk__par_put(t, " %s op=%s", op->name, sk_op_kind_name(op->desc.kind));
  if (ps->kind == SK_PSTEP_RECOMPUTE) sk__par_put(t, " step=%s", sk_parallel_step_name(s->kind));
  bool out_slot = s->kind == SK_PSTEP_OUT_MOVE || s->kind == SK_PSTEP_OUT_MOVE_BACK;
  bool in_slot = s->kind == SK_PSTEP_MOVE || s->kind == SK_PSTEP_MOVE_BACK || s->kind == SK_PSTEP_BACKWARD_COMM ||
                 s->kind == SK_PSTEP_MIRROR || (s->kind >= SK_PSTEP_PARAM_GATHER && s->kind <= SK_PSTEP_GRAD_REDUCE_SCATTER);
  if (in_slot) sk__par_put(t, " input=%d tensor=%s", s->slot, g->tensors[op->inputs[s->slot]].name);
  if (out_slot) sk__par_put(t, " output=%d tensor=%s", s->slot, g->tensors[op->outputs[s->slot]].name);
  const sk_layout *a = NULL, *b = NULL;
  if (s->kind == SK_PSTEP_MOVE || s->kind == SK_PSTEP_MOVE_BACK) a = &p->tensors[op->inputs[s->slot]].layout, b = &po->kernel_in[s->slot];
  if (out_slot) a = &po->plan.out[s->slot], b = &p->tensors[op->outputs[s->slot]].layout;
  if (s->kind == SK_PSTEP_MOVE_BACK || s->kind == SK_PSTEP_OUT_MOVE_BACK) {
    const sk_layout *c = a;
    a = b, b = c;
  }
  if (a) sk__prog_put_slice(t, "from", a, local), sk__prog_put_slice(t, "to", b, local);
  else if (s->kind == SK_PSTEP_FORWARD || s->kind == SK_PSTEP_FORWARD_COMM) sk__prog_put_slice(t, "out", &po->plan.out[0], local);
  else if (s->kind == SK_PSTEP_BACKWARD_COMM || s->kind == SK_PSTEP_MIRROR) sk__prog_put_slice(t, "slice", &po->kernel_in[s->slot], local);
  if (s->kind >= SK_PSTEP_PARAM_GATHER && s->kind <= SK_PSTEP_GRAD_REDUCE_SCATTER) {
    sk_opt_shard os;
    int tin = op->inputs[s->slot];
    if (!sk_opt_shard_of(&p->tensors[tin].layout, g->tensors[tin].dtype, &p->desc.hsdp, local, &os, NULL))
      sk__par_put(t, " rows=[%lld:%lld] shards=%d", (long long)os.rows_start, (long long)os.rows_stop, os.size);
  }
  sk__prog_put_comm(t, p, ps, rank);
  if (s->kind == SK_PSTEP_MIRROR && po->replication[s->slot] > 1) sk__par_put(t, " divide=%d", po->replication[s->slot]);
  if (s->kind == SK_PSTEP_FORWARD && op->recompute && ps->kind != SK_PSTEP_RECOMPUTE)
    sk__par_put(t, " recompute=%s", sk_parallel_recompute_refusal(p, s->op) ? "refused" : "yes");
}

/* A buffer's, a Send's or a Recv's fields; `mark` the program's ("e": a WaitSend's Send is #eN). */
static void sk__prog_put_data(sk__par_text *t, const sk_parallel_plan *p, const char *mark, const sk_program_step *ps, int rank) {
  const sk_graph *g = p->graph;
  if (ps->tensor >= 0) sk__par_put(t, " %s", g->tensors[ps->tensor].name);
  else if (ps->op >= 0) sk__par_put(t, " %s", g->ops[ps->op].name);
  if (ps->kind == SK_PSTEP_ALLOC || ps->kind == SK_PSTEP_FREE) {
    sk__par_put(t, " buffer=%s", sk_parallel_buffer_name((sk_program_buffer)ps->buffer));
    if (ps->buffer == SK_PBUF_KERNEL_IN) sk__par_put(t, " input=%d", ps->slot);
    else if (ps->tensor < 0 && ps->op >= 0) sk__par_put(t, " output=%d", ps->slot);
  }
  if (ps->kind == SK_PSTEP_SEND || ps->kind == SK_PSTEP_RECV || ps->kind == SK_PSTEP_WAIT_SEND)
    sk__par_put(t, " data=%s", ps->grad ? "grad" : "value");
  if (ps->kind == SK_PSTEP_WAIT_SEND) sk__par_put(t, " send=#%s%d", mark, ps->send);
  if (p->vstage && ps->kind != SK_PSTEP_UPDATE) {
    int chunk = 0;
    (void)sk_pipe_stage_of(&p->schedule, ps->vstage, &chunk);
    sk__par_put(t, " micro=%d chunk=%d", ps->micro, chunk);
  }
  if (ps->peer >= 0) sk__par_put(t, " peer=%d", ps->peer * p->desc.ndevices + rank % p->desc.ndevices);
  if (ps->group >= 0 && (ps->kind == SK_PSTEP_SEND || ps->kind == SK_PSTEP_RECV)) sk__par_put(t, " group=g%d", ps->group);
  if (ps->count) sk__par_put(t, " bytes=%llu", (unsigned long long)sk_program_bytes(ps, p->desc.dtype));
}

/* A step of the step's end (sk_program_fuse.h): a bucket's launch, a wait, GradsReady, a partial Mirror. */
static void sk__prog_put_end(sk__par_text *t, const sk_parallel_plan *p, const sk_program_step *ps, int rank) {
  if (ps->kind == SK_PSTEP_SHARD_MIRROR) sk__par_put(t, " %s", p->graph->tensors[ps->tensor].name);
  if (ps->kind == SK_PSTEP_FUSED) sk__par_put(t, " bucket=%d", ps->bucket);
  sk_coll_kind coll = ps->kind == SK_PSTEP_SHARD_MIRROR ? SK_COLL_ALLREDUCE : ps->coll;
  if (coll != SK_COLL_NONE)
    sk__par_put(t, " coll=%s%s", sk_coll_kind_ms_name(coll), coll == SK_COLL_ALLGATHER ? "" : "(sum)");
  if (ps->group >= 0) sk__prog_put_group(t, p, ps->group, rank);
  if (ps->count) sk__par_put(t, " bytes=%llu", (unsigned long long)sk_program_bytes(ps, p->desc.dtype));
  if (ps->kind == SK_PSTEP_GRADS_READY && p->desc.grad_accumulation_step > 1)
    sk__par_put(t, " accumulate=%d", p->desc.grad_accumulation_step);
}

/* Step i of a program, "#N Kind ..." (mark "": the training step's) or "#eN Kind ..." (mark "e":
   the evaluation's). */
static void sk__prog_put_step(sk__par_text *t, const sk_parallel_plan *p, const char *mark, int i, const sk_program_step *ps,
                              int rank) {
  int local = rank % p->desc.ndevices;
  sk__par_put(t, "#%s%d %s", mark, i, sk_parallel_step_name(ps->kind));
  if (ps->kind == SK_PSTEP_UPDATE) sk__par_put(t, " parameters");
  else if (sk__prog_at_end(ps->kind)) sk__prog_put_end(t, p, ps, rank);
  else if (sk_program_op_step(ps)) {
    sk__prog_put_op(t, p, ps, rank, local);
    if (p->vstage) {
      int chunk = 0;
      (void)sk_pipe_stage_of(&p->schedule, ps->vstage, &chunk);
      sk__par_put(t, " micro=%d chunk=%d", ps->micro, chunk);
    }
    if (ps->half) sk__par_put(t, " half=%s", ps->half == 1 ? "B" : "W");
    if (ps->bucket >= 0) sk__par_put(t, " bucket=%d", ps->bucket);
  } else sk__prog_put_data(t, p, mark, ps, rank);
  if (ps->last) sk__par_put(t, " when=last");
  sk__par_put(t, "\n");
}

/* "#c3 Alloc w1 buffer=state state=1 memory=optimizer bytes=2048": create section step i. */
static void sk__prog_put_create(sk__par_text *t, const sk_parallel_plan *p, int i, const sk_program_step *ps) {
  static const char *const kinds[SK_MEM_KINDS] = {"parameters", "gradients", "optimizer", "activations", "communication"};
  const sk_graph *g = p->graph;
  sk__par_put(t, "#c%d %s", i, sk_parallel_step_name(ps->kind));
  if (ps->tensor >= 0) sk__par_put(t, " %s", g->tensors[ps->tensor].name);
  else if (ps->op >= 0) sk__par_put(t, " %s", g->ops[ps->op].name);
  else sk__par_put(t, " %s", sk_parallel_buffer_name((sk_program_buffer)ps->buffer)); /* the wire, the shadows */
  sk__par_put(t, " buffer=%s", sk_parallel_buffer_name((sk_program_buffer)ps->buffer));
  if (ps->buffer == SK_PBUF_SHADOWS || ps->buffer == SK_PBUF_RS_SHADOWS) sk__par_put(t, " dtype=%s", sk_dtype_name(ps->dtype));
  if (ps->buffer == SK_PBUF_KERNEL_IN || ps->buffer == SK_PBUF_KERNEL_DIN || ps->buffer == SK_PBUF_SCRATCH)
    sk__par_put(t, " input=%d", ps->slot);
  else if (ps->buffer == SK_PBUF_KERNEL_OUT || ps->buffer == SK_PBUF_KERNEL_DOUT) sk__par_put(t, " output=%d", ps->slot);
  if (ps->buffer == SK_PBUF_STATE) sk__par_put(t, " state=%d", ps->slot);
  if (ps->buffer == SK_PBUF_FEED) sk__par_put(t, " micro=%d", ps->micro);
  sk__par_put(t, " memory=%s bytes=%llu\n", kinds[sk_program_memory_kind(p, ps)],
              (unsigned long long)sk_program_bytes(ps, p->desc.dtype));
}

/* How the device evaluates: under a pipeline its stage's own program (plan.evals), else the
   training program's forward part, the steps before its SeedLoss (as sk_runtime_evaluate runs it). */
static void sk__prog_put_eval(sk__par_text *t, const sk_parallel_plan *p, int stage, int rank) {
  if (p->evals) {
    const sk_program *ev = &p->evals[stage];
    sk__par_put(t, "# evaluation: %d steps, every micro-batch's forwards%s\n", ev->nsteps,
                stage == p->stages - 1 ? " and their Score" : "");
    for (int i = 0; i < ev->nsteps; i++) sk__prog_put_step(t, p, "e", i, &ev->steps[i], rank);
    return;
  }
  const sk_program *pg = &p->programs[stage];
  int seed = 0;
  while (seed < pg->nsteps && pg->steps[seed].kind != SK_PSTEP_SEED_LOSS) seed++;
  sk__par_put(t, "# evaluation: the training steps #0..#%d (the forward part)\n", seed - 1);
}

SK_API size_t sk_parallel_format_program(const sk_parallel_plan *p, int rank, char *buf, size_t cap) {
  sk__par_text t = {buf, buf ? cap : 0, 0, 0};
  if (cap && buf) buf[0] = 0;
  if (!p || !p->programs || rank < 0 || rank >= p->world_devices) return 0;
  int stage = sk_parallel_stage_of_rank(p, rank);
  const sk_program *pg = &p->programs[stage];
  if (p->vstage) {
    sk__par_put(&t, "# device %d of %d: stage %d of %d (ranks %d..%d; chunks", rank, p->world_devices, stage, p->stages,
                stage * p->desc.ndevices, (stage + 1) * p->desc.ndevices - 1);
    for (int c = 0; c < p->schedule.chunks; c++) sk__par_put(&t, " %d", sk_pipe_virtual_stage(&p->schedule, stage, c));
    sk__par_put(&t, " of %d), %d micro-batches, %d steps\n", p->stages * p->schedule.chunks, p->micro, pg->nsteps);
  } else sk__par_put(&t, "# device %d of %d: %d steps\n", rank, p->desc.ndevices, pg->nsteps);
  for (int i = 0; i < pg->nsteps; i++) sk__prog_put_step(&t, p, "", i, &pg->steps[i], rank);
  sk__par_put(&t, "# create: %d buffers the device allocates once, held for the run\n", pg->ncreate);
  for (int i = 0; i < pg->ncreate; i++) sk__prog_put_create(&t, p, i, &pg->create[i]);
  sk__prog_put_eval(&t, p, stage, rank);
  return t.len;
}

SK_EXTERN_C_END
#endif /* SK_PARALLEL_IMPL */
