/* sk_dryrun.h -- a compiled plan's training step on one device with no data: the memory by
   kind, the communication and the FLOPs the runtime would count, read off the device's program
   (sk_program.h) without tensors, kernels, threads or a world.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_DRYRUN_IMPL + the modules it includes)
                             #include "sk_dryrun.h"
   Needs only libc.

   WHAT IT WALKS (the runtime runs the same program; sk_runtime.h)
     Create: the stage's create section, each Alloc counted as sk_program_memory_kind says with
       sk_program_bytes -- what sk_runtime_create takes, so `created` is sk_runtime_memory_get's
       right after create (peaks equal to the values: the runtime's peaks start there).
     One training step (the first: under grad_accumulation_step a micro-step that is not the
       window's last, so steps marked `last` are skipped and the walk stops at GradsReady, as
       the runtime's does): Alloc adds, Free subtracts, each kind's peak and the peak of the
       five kinds' sum taken at every Alloc, as the runtime's counting allocator takes them.
       What the step allocated and did not free is given back at its end (the runtime's settle
       does so); `unfreed` says how much that was, per kind.
     Communication: every collective step counted as the runtime counts it -- one row per
       (collective kind, plan group id) in order of first use, calls and bytes on the wire
       (16-bit where the run's wire is), a fused bucket one call (its Fused step), a
       redistribution (kind SK_COLL_NONE) its calls and the bytes this rank sends in the
       redistribution plan sk_redist_plan_create makes for it (the executor's own plan).
     FLOPs: sk_exec_flops of every Forward, Backward and recomputed Forward on the kernel's
       slices (zero_bubble_v's split halves: half a backward each).
   STEP TIME: sk_dryrun_step_time (sk_dryrun_clock.h, included below) walks every device's
     program together on virtual clocks: the runtime's stats.step_us, exactly, for the plans it
     models (what it refuses, with SK_ERR_UNSUPPORTED, is listed there).
   NOT MODELLED: host bookkeeping (memory kind host: the library's internals; reported 0); in
     sk_dryrun_device_run the step's wall and virtual times (stats' step_s, busy_s, clock_us,
     compute_us stay 0: the step time is sk_dryrun_step_time's).

   ERRORS: SK_ERR_INVALID_ARGUMENT for a NULL or uncompiled plan or a rank outside the world,
     and for a program that frees more of a kind than it holds (a compiler fault);
     SK_ERR_OUT_OF_MEMORY when the plan's allocator fails.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_DRYRUN_IMPL)
#define SK_DRYRUN_IMPL
#endif
#ifndef SK_DRYRUN_H
#define SK_DRYRUN_H

#include "sk_core.h"
#include "sk_exec.h"
#include "sk_parallel.h"
#include "sk_redist.h"
#include "sk_runtime.h" /* the figures' types: sk_runtime_memory, sk_runtime_stats */

SK_EXTERN_C_BEGIN

/* One device's dry run. */
typedef struct sk_dryrun_device {
  int rank;                     /* its world rank */
  int stage;                    /* its pipeline stage (0 without a pipeline) */
  sk_runtime_memory created;    /* right after create */
  sk_runtime_memory after;      /* after one training step */
  sk_runtime_stats stats;       /* that step: steps 1, flops, the communication rows */
  uint64_t unfreed[SK_MEM_KINDS]; /* the step's own buffers it never frees, by kind (0: none) */
} sk_dryrun_device;

/* World rank `rank`'s dry run of one training step of `plan` into *out. Scratch comes from the
   plan's allocator (desc.allocator) and is given back. */
SK_API sk_result sk_dryrun_device_run(const sk_parallel_plan *plan, int rank, sk_dryrun_device *out, sk_error *err);
/* The same for the `count` world ranks from `first` into out[0 .. count - 1], each equal to its
   sk_dryrun_device_run; the operators' FLOPs are computed once for all of them (the walk of a
   large world spends most of its time there otherwise). */
SK_API sk_result sk_dryrun_devices_run(const sk_parallel_plan *plan, int first, int count, sk_dryrun_device *out, sk_error *err);

SK_EXTERN_C_END
#endif /* SK_DRYRUN_H */

#if defined(SK_DRYRUN_IMPL) && !defined(SK_DRYRUN_IMPL_DONE)
#define SK_DRYRUN_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <string.h>

SK_EXTERN_C_BEGIN

/* The four moves an operator slot may have: into the kernel's layout and back, out of the
   rule's layout and back. */
enum { SK__DR_MOVE = 0, SK__DR_MOVE_BACK, SK__DR_OUT_MOVE, SK__DR_OUT_MOVE_BACK, SK__DR_MOVES };
#define SK__DR_SLOTS (SK_OP_MAX_INPUTS > SK_OP_MAX_OUTPUTS ? SK_OP_MAX_INPUTS : SK_OP_MAX_OUTPUTS)
#define SK__DR_UNKNOWN UINT64_MAX

typedef struct sk__dr {
  const sk_parallel_plan *p;
  int rank, local;           /* the world rank; the rank in its stage (the layouts' device index) */
  sk_dtype cdt, wire, mirror_wire;
  uint64_t bytes[SK_MEM_KINDS], peak[SK_MEM_KINDS], peak_total, live[SK_MEM_KINDS];
  int *gsize;                /* [ngroups]: each plan group's size for this rank, 0 not yet known */
  uint64_t *sends;           /* [nops][SK__DR_MOVES][SK__DR_SLOTS]: a move's bytes sent, or SK__DR_UNKNOWN */
  double *flops;             /* [nops][2]: an operator's forward and backward FLOPs, < 0 not yet known
                                (sk__dr_flops_table: one for every device walked) */
  sk_runtime_stats *st;
  sk_error *err;
} sk__dr;

/* ---- memory ----------------------------------------------------------------------------------- */

static void sk__dr_take(sk__dr *d, int kind, uint64_t b) {
  d->bytes[kind] += b;
  uint64_t total = 0;
  for (int k = 0; k < SK_MEM_KINDS; k++) total += d->bytes[k];
  if (d->bytes[kind] > d->peak[kind]) d->peak[kind] = d->bytes[kind];
  if (total > d->peak_total) d->peak_total = total;
}

static void sk__dr_memory(const sk__dr *d, sk_runtime_memory *m) {
  memset(m, 0, sizeof *m);
  m->parameters = d->bytes[SK_MEM_PARAMETERS], m->gradients = d->bytes[SK_MEM_GRADIENTS];
  m->optimizer_state = d->bytes[SK_MEM_OPTIMIZER], m->activations = d->bytes[SK_MEM_ACTIVATIONS];
  m->communication = d->bytes[SK_MEM_COMMUNICATION];
  m->peak_parameters = d->peak[SK_MEM_PARAMETERS], m->peak_gradients = d->peak[SK_MEM_GRADIENTS];
  m->peak_optimizer_state = d->peak[SK_MEM_OPTIMIZER], m->peak_activations = d->peak[SK_MEM_ACTIVATIONS];
  m->peak_communication = d->peak[SK_MEM_COMMUNICATION], m->peak = d->peak_total;
}

/* The create section: what the runtime holds once created; the peaks start there. */
static void sk__dr_create(sk__dr *d, const sk_program *pg) {
  for (int i = 0; i < pg->ncreate; i++)
    sk__dr_take(d, (int)sk_program_memory_kind(d->p, &pg->create[i]), sk_program_bytes(&pg->create[i], d->p->desc.dtype));
  d->peak_total = 0;
  for (int k = 0; k < SK_MEM_KINDS; k++) d->peak[k] = d->bytes[k], d->peak_total += d->bytes[k];
}

/* An Alloc or Free step of the training step. */
static sk_result sk__dr_buffer(sk__dr *d, int i, const sk_program_step *s) {
  int kind = (int)sk_program_memory_kind(d->p, s);
  uint64_t b = sk_program_bytes(s, d->p->desc.dtype);
  if (s->kind == SK_PSTEP_ALLOC) return sk__dr_take(d, kind, b), d->live[kind] += b, SK_OK;
  if (d->live[kind] < b)
    return sk__fail(d->err, SK_ERR_INVALID_ARGUMENT, "dry run: program step %d frees %llu bytes of %s, the step holds %llu", i,
                    (unsigned long long)b, sk_parallel_buffer_name((sk_program_buffer)s->buffer),
                    (unsigned long long)d->live[kind]);
  d->bytes[kind] -= b, d->live[kind] -= b;
  return SK_OK;
}

/* ---- communication ------------------------------------------------------------------------- */

/* Plan group id's size for this device (cached: listing a group is O(devices)). */
static sk_result sk__dr_group_size(sk__dr *d, int id, int *size) {
  const sk_parallel_plan *p = d->p;
  if (id < 0 || id >= p->ngroups)
    return sk__fail(d->err, SK_ERR_INVALID_ARGUMENT, "dry run: a step names group %d, the plan has %d", id, p->ngroups);
  if (!d->gsize[id]) {
    int *ranks = (int *)sk__alloc(&p->desc.allocator, sizeof(int) * SK_MAX_DEVICES, sizeof(int)), n = 0;
    if (!ranks) return sk__fail(d->err, SK_ERR_OUT_OF_MEMORY, "dry run: out of memory listing group g%d", id);
    sk_result r = sk_parallel_group_ranks(p, id, d->rank, ranks, SK_MAX_DEVICES, &n, d->err);
    sk__free(&p->desc.allocator, ranks);
    if (r) return r;
    d->gsize[id] = n;
  }
  *size = d->gsize[id];
  return SK_OK;
}

/* One call of `kind` on plan group `id`, as the runtime's statistics count it: a row per
   (kind, group id) in order of first use; rows past SK_RUNTIME_COMM_ROWS summed into the last. */
static sk_result sk__dr_count(sk__dr *d, sk_coll_kind kind, int id, uint64_t bytes) {
  sk_runtime_stats *st = d->st;
  int i = 0, size = 0;
  while (i < st->nrows && !(st->rows[i].kind == kind && st->rows[i].group_id == id)) i++;
  if (i == st->nrows && st->nrows < SK_RUNTIME_COMM_ROWS) {
    sk_result r = sk__dr_group_size(d, id, &size);
    if (r) return r;
    st->rows[st->nrows++].kind = kind, st->rows[i].group = size, st->rows[i].group_id = id;
  }
  if (i == SK_RUNTIME_COMM_ROWS) i--;
  st->rows[i].calls++, st->rows[i].bytes += bytes;
  return SK_OK;
}

/* A float tensor's elements travel in the run's compute dtype (f16 / bf16 runs compute in f32). */
static sk_dtype sk__dr_dtype(const sk__dr *d, int t) {
  sk_dtype dt = d->p->graph->tensors[t].dtype;
  return sk_exec_is_float(dt) ? d->cdt : dt;
}

/* The redistribution plan of move `which` of operator o's slot k for rank `local`: the one the
   runtime's executor makes (sk_rt_setup.h). The caller destroys it. */
static sk_result sk__dr_move_plan(const sk__dr *d, int o, int which, int k, sk_redist_plan **rp) {
  const sk_parallel_plan *p = d->p;
  const sk_parallel_op *po = &p->ops[o];
  bool in = which == SK__DR_MOVE || which == SK__DR_MOVE_BACK, back = which == SK__DR_MOVE_BACK || which == SK__DR_OUT_MOVE_BACK;
  int t = in ? p->graph->ops[o].inputs[k] : p->graph->ops[o].outputs[k];
  const sk_layout *tensor = &p->tensors[t].layout, *kernel = in ? &po->kernel_in[k] : &po->plan.out[k];
  bool to_kernel = in != back; /* MOVE and OUT_MOVE_BACK end in the operator's layout */
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = to_kernel ? *tensor : *kernel, rd.to = to_kernel ? *kernel : *tensor;
  rd.dtype = sk__dr_dtype(d, t), rd.allocator = p->desc.allocator;
  *rp = NULL;
  sk_result r = sk_redist_plan_create(&rd, d->local, rp, d->err);
  return r ? sk__fail(d->err, r, "dry run: the move of operator '%s' slot %d", p->graph->ops[o].name, k) : SK_OK;
}

/* The bytes rank `local` sends in move `which` of operator o's slot k, cached. */
static sk_result sk__dr_move_sends(sk__dr *d, int o, int which, int k, uint64_t *sends) {
  uint64_t *at = &d->sends[((size_t)o * SK__DR_MOVES + (size_t)which) * SK__DR_SLOTS + (size_t)k];
  if (*at == SK__DR_UNKNOWN) {
    sk_redist_plan *rp = NULL;
    uint64_t recv = 0;
    sk_result r = sk__dr_move_plan(d, o, which, k, &rp);
    if (!r) r = sk_redist_plan_bytes(rp, -1, d->local, &recv, at, d->err);
    sk_redist_plan_destroy(rp);
    if (r) return *at = SK__DR_UNKNOWN, r;
  }
  *sends = *at;
  return SK_OK;
}

static int sk__dr_move_of(sk_parallel_step_kind k) {
  switch (k) {
    case SK_PSTEP_MOVE: return SK__DR_MOVE;
    case SK_PSTEP_MOVE_BACK: return SK__DR_MOVE_BACK;
    case SK_PSTEP_OUT_MOVE: return SK__DR_OUT_MOVE;
    case SK_PSTEP_OUT_MOVE_BACK: return SK__DR_OUT_MOVE_BACK;
    default: return -1;
  }
}

/* Program step s, running plan step of kind k: the collective the runtime calls for it, its
   group and the bytes it counts (sk_rt_steps.h, sk_rt_hsdp.h, sk_rt_run.h). */
static sk_result sk__dr_comm(sk__dr *d, const sk_program_step *s, sk_parallel_step_kind k) {
  const sk_parallel_plan *p = d->p;
  size_t cs = sk_dtype_size(d->cdt), ms = sk_dtype_size(d->mirror_wire);
  uint64_t n = s->count > 0 ? (uint64_t)s->count : 0;
  if (s->kind == SK_PSTEP_SEND) return sk__dr_count(d, SK_COLL_SEND, s->group, n * sk_dtype_size(sk__dr_dtype(d, s->tensor)));
  if (s->kind == SK_PSTEP_FUSED) /* a bucket: gathers in the compute dtype, the gradient sync in the Mirrors' wire */
    return sk__dr_count(d, s->coll, s->group, n * (s->coll == SK_COLL_ALLGATHER ? cs : ms));
  if (s->kind == SK_PSTEP_SHARD_MIRROR) return sk__dr_count(d, SK_COLL_ALLREDUCE, s->group, n * ms);
  if (s->bucket >= 0) return SK_OK; /* a bucket's member: its Fused step counts it */
  int move = sk__dr_move_of(k);
  if (move >= 0) {
    uint64_t sends = 0;
    sk_result r = sk__dr_move_sends(d, s->op, move, s->slot, &sends);
    return r ? r : sk__dr_count(d, SK_COLL_NONE, s->group, sends);
  }
  if (n == 0) return SK_OK; /* a packed BackwardComm's follower, a scaling UndoComm */
  const sk_parallel_step *ps = &p->steps[s->index];
  int out0 = p->graph->ops[s->op].outputs[0];
  switch (k) {
    case SK_PSTEP_FORWARD_COMM: {
      sk_dtype wire = sk_exec_is_float(p->graph->tensors[out0].dtype) ? d->wire : sk__dr_dtype(d, out0);
      return sk__dr_count(d, ps->comm.kind, s->group, n * sk_dtype_size(wire));
    }
    case SK_PSTEP_UNDO_COMM: return sk__dr_count(d, SK_COLL_ALLGATHER, s->group, n * sk_dtype_size(sk__dr_dtype(d, out0)));
    case SK_PSTEP_BACKWARD_COMM: return sk__dr_count(d, SK_COLL_ALLREDUCE, s->group, n * sk_dtype_size(d->wire));
    case SK_PSTEP_MIRROR: return sk__dr_count(d, SK_COLL_ALLREDUCE, s->group, n * ms);
    case SK_PSTEP_PARAM_GATHER: return sk__dr_count(d, SK_COLL_ALLGATHER, s->group, n * cs);
    case SK_PSTEP_GRAD_REDUCE_SCATTER: return sk__dr_count(d, SK_COLL_REDUCE_SCATTER, s->group, n * ms);
    default: return SK_OK;
  }
}

/* ---- compute -------------------------------------------------------------------------------- */

static void sk__dr_view(sk_exec_arg *a, const sk_layout *l, sk_dtype dt) {
  memset(a, 0, sizeof *a);
  a->dtype = dt, a->ndims = l->ndims;
  sk_layout_slice_shape(l, a->shape);
}

/* Operator o's FLOPs on this device's slices, as the runtime's kernels see them: inputs in the
   kernel's layouts, outputs in the rule's (out_strategy) or their tensors', output 0 whole
   along the scattered dim before a forward ReduceScatter. */
static double sk__dr_op_flops(const sk__dr *d, int o, bool backward) {
  const sk_parallel_plan *p = d->p;
  const sk_graph_op *op = &p->graph->ops[o];
  const sk_parallel_op *po = &p->ops[o];
  sk_exec_arg in[SK_OP_MAX_INPUTS], out[SK_OP_MAX_OUTPUTS];
  memset(in, 0, sizeof in), memset(out, 0, sizeof out);
  for (int k = 0; k < op->ninputs; k++) sk__dr_view(&in[k], &po->kernel_in[k], sk__dr_dtype(d, op->inputs[k]));
  for (int k = 0; k < op->noutputs; k++) {
    int t = op->outputs[k];
    sk__dr_view(&out[k], po->out_moved[k] ? &po->plan.out[k] : &p->tensors[t].layout, sk__dr_dtype(d, t));
  }
  if (po->plan.fwd.kind == SK_COLL_REDUCE_SCATTER) out[0].shape[0] *= sk_mesh_group_size(&po->plan.mesh, po->plan.fwd.axes);
  return sk_exec_flops(op, in, out, backward);
}

/* The FLOPs table for a plan of nops operators, every entry unknown; NULL when out of memory.
   One table serves every device of every stage: the FLOPs read the operator's layouts' slice
   shapes alone, which are the same on every device (layouts split evenly, sk_layout_slice_shape
   takes no rank; the runtime's kernels count sk_exec_flops on those shapes too). */
static double *sk__dr_flops_table(const sk_allocator *a, int nops) {
  size_t n = 2 * (size_t)nops;
  double *t = (double *)sk__alloc(a, sizeof(double) * (n + 1), sizeof(double));
  for (size_t i = 0; t && i < n; i++) t[i] = -1;
  return t;
}

/* Operator o's FLOPs on a device, from the table (computed on first use); zero_bubble_v's split
   halves count half a backward each. */
static double sk__dr_flops(const sk__dr *d, int o, bool backward, int half) {
  double *at = &d->flops[2 * (size_t)o + (backward ? 1 : 0)];
  if (*at < 0) *at = sk__dr_op_flops(d, o, backward);
  return *at * (backward && half ? 0.5 : 1);
}

/* ---- the walk ------------------------------------------------------------------------------- */

/* Training step i of pg: memory, communication, FLOPs. *more turns false at a GradsReady that
   ends a micro-step but the window's last (the runtime stops the program there). */
static sk_result sk__dr_step(sk__dr *d, const sk_program *pg, int i, bool *more) {
  const sk_program_step *s = &pg->steps[i];
  if (s->kind == SK_PSTEP_ALLOC || s->kind == SK_PSTEP_FREE) return sk__dr_buffer(d, i, s);
  if (s->kind == SK_PSTEP_GRADS_READY) return *more = d->p->desc.grad_accumulation_step <= 1, SK_OK;
  /* of the rest only these communicate (a Recv is its Send's other side); the Update (no
     operator) is the optimizer, which the runtime counts no FLOPs of */
  if (!sk_program_op_step(s))
    return s->kind == SK_PSTEP_SEND || s->kind == SK_PSTEP_FUSED || s->kind == SK_PSTEP_SHARD_MIRROR ? sk__dr_comm(d, s, s->kind)
                                                                                                       : SK_OK;
  sk_parallel_step_kind k = d->p->steps[s->index].kind;
  if (k == SK_PSTEP_FORWARD || k == SK_PSTEP_BACKWARD)
    return d->st->flops += sk__dr_flops(d, s->op, k == SK_PSTEP_BACKWARD, s->half), SK_OK;
  return k == SK_PSTEP_PARAM_RELEASE ? SK_OK : sk__dr_comm(d, s, k);
}

/* The first training step: every step but those of the window's last micro-step (under
   grad_accumulation_step), up to a GradsReady that ends the micro-step. */
static sk_result sk__dr_train(sk__dr *d, const sk_program *pg) {
  bool last = d->p->desc.grad_accumulation_step <= 1, more = true;
  sk_result r = SK_OK;
  for (int i = 0; i < pg->nsteps && !r && more; i++)
    if (!pg->steps[i].last || last) r = sk__dr_step(d, pg, i, &more);
  return r;
}

static void sk__dr_wires(sk__dr *d) {
  sk_run_dtypes t = sk_parallel_run_dtypes(&d->p->desc); /* the runtime's rule too */
  d->cdt = t.compute, d->wire = t.wire, d->mirror_wire = t.gradient;
}

static sk_result sk__dr_run(sk__dr *d, sk_dryrun_device *out) {
  const sk_program *pg = &d->p->programs[out->stage];
  sk__dr_wires(d);
  sk__dr_create(d, pg);
  sk__dr_memory(d, &out->created);
  sk_result r = sk__dr_train(d, pg);
  if (r) return r;
  for (int k = 0; k < SK_MEM_KINDS; k++) /* the runtime's settle gives back what the step kept */
    out->unfreed[k] = d->live[k], d->bytes[k] -= d->live[k], d->live[k] = 0;
  sk__dr_memory(d, &out->after);
  out->stats.steps = 1;
  return SK_OK;
}

/* World rank `rank` walked into *out with d's tables, its per-rank caches emptied first. */
static sk_result sk__dr_device(sk__dr *d, int rank, sk_dryrun_device *out) {
  const sk_parallel_plan *p = d->p;
  memset(out, 0, sizeof *out);
  out->rank = rank, out->stage = sk_parallel_stage_of_rank(p, rank);
  memset(d->bytes, 0, sizeof d->bytes), memset(d->peak, 0, sizeof d->peak), memset(d->live, 0, sizeof d->live);
  d->peak_total = 0;
  d->rank = rank, d->local = rank - out->stage * p->desc.ndevices, d->st = &out->stats;
  memset(d->gsize, 0, sizeof(int) * ((size_t)p->ngroups + 1));
  size_t nsends = (size_t)p->graph->nops * SK__DR_MOVES * SK__DR_SLOTS;
  for (size_t i = 0; i < nsends; i++) d->sends[i] = SK__DR_UNKNOWN;
  return sk__dr_run(d, out);
}

SK_API sk_result sk_dryrun_devices_run(const sk_parallel_plan *p, int first, int count, sk_dryrun_device *out, sk_error *err) {
  if (!p || !out || !p->graph || !p->programs || !p->steps)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dry run: NULL or uncompiled plan, or NULL output");
  if (first < 0 || first >= p->world_devices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dry run: rank %d outside the plan's %d devices", first, p->world_devices);
  if (count < 1 || count > p->world_devices - first)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dry run: %d devices from rank %d, the plan has %d", count, first,
                    p->world_devices);
  const sk_allocator *a = &p->desc.allocator;
  size_t nsends = (size_t)p->graph->nops * SK__DR_MOVES * SK__DR_SLOTS + 1;
  sk__dr d;
  memset(&d, 0, sizeof d);
  d.p = p, d.err = err;
  d.gsize = (int *)sk__calloc(a, sizeof(int) * ((size_t)p->ngroups + 1), sizeof(int));
  d.sends = (uint64_t *)sk__alloc(a, sizeof(uint64_t) * nsends, sizeof(uint64_t));
  d.flops = sk__dr_flops_table(a, p->graph->nops);
  sk_result r = d.gsize && d.sends && d.flops ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "dry run: out of memory");
  for (int i = 0; i < count && !r; i++)
    if ((r = sk__dr_device(&d, first + i, &out[i])) && count > 1 && err) /* which of them failed */
      (void)sk__fail(err, r, "device %d: %s", first + i, err->msg);
  sk__free(a, d.gsize), sk__free(a, d.sends), sk__free(a, d.flops);
  return r;
}

SK_API sk_result sk_dryrun_device_run(const sk_parallel_plan *p, int rank, sk_dryrun_device *out, sk_error *err) {
  return sk_dryrun_devices_run(p, rank, 1, out, err);
}

SK_EXTERN_C_END
#endif /* SK_DRYRUN_IMPL */

#include "sk_dryrun_clock.h" /* the step time: every device's program on virtual clocks */
