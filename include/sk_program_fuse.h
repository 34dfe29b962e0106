/* sk_program_fuse.h -- part of sk_parallel.h's implementation: the fused collectives of each
   stage's program and optimizer parallel's timing, decided when the plan is compiled.

   Include sk_parallel.h, not this: its implementation includes this after sk_program.h. Needs
   only libc (and sk_fusion.h's planner, sk_fusion_plan_keys).

   WHAT THE PASS DOES to a program sk_program.h built
     Gathers: a sharded parameter's slice is held from its gather to its release (ParamRelease,
       level3's GradReduceScatter, and without a pipeline every level's GradReduceScatter) or to
       the step's end. A ParamGather of a held slice is dropped. At level3 each gather is its own
       AllGather; at level1 and level2 the first gather of a step gathers every sharded parameter
       of the stage not held, as members of fused AllGather buckets, launched (Fused) and
       completed (WaitFused) right there.
     Mirrors (without a pipeline): of a parameter read once, in its own layout, members of fused
       AllReduce buckets, registered in the order the backward produces them.
     GradReduceScatters: members of fused buckets (without a pipeline, or under one at level1
       and level3 on the last micro-batch, the earlier ones only summing the gradient: nothing
       moves); a pipeline at level2 ReduceScatters each micro-batch's at its step.
     Buckets: sk_fusion's rules on comm_fusion (closed: one bucket an op; auto and size in
       MindSpore's element accounting), keyed by the plan's group ids, in program order. Under
       grad_computation_allreduce_overlap a bucket launches (Fused) as soon as its last member
       is ready and every earlier bucket of its collective has launched; else at the step's end.
     The step's end: Fused of the buckets not launched, WaitFused (AllReduce, then
       ReduceScatter), GradsReady, a ShardMirror per partly sharded parameter, the Update. Under
       grad_accumulation_step the ReduceScatters at level1 and level3, and everything after
       GradsReady, run on the last micro-step only (`last`).

   License: MIT. */
#ifndef SK_PROGRAM_FUSE_H
#define SK_PROGRAM_FUSE_H
#include "sk_program.h" /* sk_program_op_step */
#endif

#if defined(SK_PARALLEL_IMPL) && !defined(SK_PROGRAM_FUSE_IMPL_DONE) && defined(SK_PARALLEL_IMPL_BODY)
#define SK_PROGRAM_FUSE_IMPL_DONE
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

typedef struct sk__fuse_b {
  sk__prog_b *b;    /* the output program (its steps rebuilt) and the plan */
  const sk_program_step *in;
  int nin;          /* the steps to rewrite (a training program's Update is not one of them) */
  bool *held;       /* [ntensors] a sharded parameter's slice gathered now */
  int *readers;     /* [ntensors] input slots reading the tensor, over every operator */
  int *held_at;     /* [2 * ntensors] its Alloc's chunk and micro-batch (its Free's) */
} sk__fuse_b;

/* The plan step a program step runs (its own kind for a Recompute), or -1 for a data step. */
static sk_parallel_step_kind sk__fuse_kind(const sk_parallel_plan *p, const sk_program_step *ps) {
  if (ps->kind == SK_PSTEP_RECOMPUTE) return p->steps[ps->index].kind;
  return ps->kind;
}

static int sk__fuse_input(const sk_parallel_plan *p, const sk_program_step *ps) {
  const sk_parallel_step *s = &p->steps[ps->index];
  return p->graph->ops[s->op].inputs[s->slot];
}

/* Whether sharded parameter t is read on the program's stage (it has a shard there). */
static bool sk__fuse_sharded_here(const sk_parallel_plan *p, int stage, int t) {
  if (p->tensors[t].opt_size <= 0) return false;
  const sk_graph *g = p->graph;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t && (!p->vstage || sk_parallel_op_on_stage(p, o, stage))) return true;
  return false;
}

/* The first ParamGather of plan.steps reading t: the step a gather of t runs. */
static int sk__fuse_gather_index(const sk_parallel_plan *p, int t) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == SK_PSTEP_PARAM_GATHER && p->graph->ops[p->steps[i].op].inputs[p->steps[i].slot] == t) return i;
  return -1;
}

static sk_program_step *sk__fuse_copy(sk__fuse_b *fb, const sk_program_step *ps) {
  sk_program_step *s = sk__prog_emit(fb->b, ps->kind);
  *s = *ps;
  return s;
}

/* A gathered slice taken (before its gather) or given back (at its release). */
static void sk__fuse_slice(sk__fuse_b *fb, bool alloc, int t, int v, int m) {
  const sk_parallel_plan *p = fb->b->p;
  if (alloc) fb->held_at[2 * t] = v, fb->held_at[2 * t + 1] = m;
  else v = fb->held_at[2 * t], m = fb->held_at[2 * t + 1];
  sk__prog_buffer(fb->b, alloc, SK_PBUF_GATHERED, t, -1, -1, v, m, sk_parallel_slice_count(p, t), p->graph->tensors[t].dtype);
  fb->held[t] = alloc;
}

/* level1 / level2: every sharded parameter of the stage not held, gathered now (members of the
   AllGather buckets, kind SK_COLL_ALLGATHER until planned), for micro-batch m of chunk v. */
static void sk__fuse_gather_all(sk__fuse_b *fb, int v, int m) {
  const sk_parallel_plan *p = fb->b->p;
  for (int t = 0; t < p->graph->ntensors; t++) {
    int i = fb->held[t] || !sk__fuse_sharded_here(p, fb->b->stage, t) ? -1 : sk__fuse_gather_index(p, t);
    if (i < 0) continue;
    sk__fuse_slice(fb, true, t, v, m);
    sk__prog_op_step(fb->b, i, v, m, 0, SK_PSTEP_PARAM_GATHER);
    sk_program_step *s = &fb->b->prog->steps[fb->b->prog->nsteps - 1];
    if (!fb->b->failed) s->coll = SK_COLL_ALLGATHER;
  }
}

/* Whether a Mirror step's gradient goes to a fused bucket: no pipeline, a parameter read once,
   not moved to the operator's layout (the others' gradients feed a later backward step). */
static bool sk__fuse_mirror_member(const sk__fuse_b *fb, const sk_program_step *ps) {
  const sk_parallel_plan *p = fb->b->p;
  const sk_parallel_step *s = &p->steps[ps->index];
  return !p->vstage && ps->kind == SK_PSTEP_MIRROR && fb->readers[sk__fuse_input(p, ps)] == 1 && !p->ops[s->op].moved[s->slot];
}

/* A GradReduceScatter: a member of a fused bucket (without a pipeline; under one at level1 and
   level3 the last micro-batch's), or, before the last micro-batch, a sum that moves nothing. */
static void sk__fuse_scatter(sk__fuse_b *fb, const sk_program_step *ps) {
  const sk_parallel_plan *p = fb->b->p;
  sk_program_step *s = sk__fuse_copy(fb, ps);
  bool each_micro = p->vstage && p->desc.hsdp.level == SK_HSDP_LEVEL2;
  if (fb->b->failed || each_micro) return;
  if (p->vstage && ps->micro < p->micro - 1) s->count = 0;
  else s->coll = SK_COLL_REDUCE_SCATTER;
}

/* The program's steps but the Update, gathers and scatters at their real places, members marked. */
static void sk__fuse_rewrite(sk__fuse_b *fb) {
  const sk_parallel_plan *p = fb->b->p;
  bool level3 = p->desc.hsdp.level == SK_HSDP_LEVEL3;
  for (int i = 0; i < fb->nin && !fb->b->failed; i++) {
    const sk_program_step *ps = &fb->in[i];
    sk_parallel_step_kind k = sk_program_op_step(ps) ? sk__fuse_kind(p, ps) : SK_PSTEP_KIND_COUNT; /* none: the Update */
    int t = k != SK_PSTEP_KIND_COUNT ? sk__fuse_input(p, ps) : -1;
    if (k == SK_PSTEP_PARAM_GATHER) {
      if (fb->held[t]) continue;
      if (!level3) {
        sk__fuse_gather_all(fb, ps->vstage, ps->micro);
        continue;
      }
      sk__fuse_slice(fb, true, t, ps->vstage, ps->micro);
    }
    if (k == SK_PSTEP_GRAD_REDUCE_SCATTER) { /* the backward is done with the slice */
      if ((!p->vstage || level3) && fb->held[t]) sk__fuse_slice(fb, false, t, ps->vstage, ps->micro);
      sk__fuse_scatter(fb, ps);
      continue;
    }
    sk_program_step *s = sk__fuse_copy(fb, ps);
    if (!fb->b->failed && sk__fuse_mirror_member(fb, ps)) s->coll = SK_COLL_ALLREDUCE;
    if (k == SK_PSTEP_PARAM_RELEASE && fb->held[t]) sk__fuse_slice(fb, false, t, ps->vstage, ps->micro);
  }
}

/* ---- the buckets ------------------------------------------------------------------------------ */

/* The plan's comm_fusion as the scheduler applies it: closed fuses nothing; auto and size count
   MindSpore's elements. */
static sk_fusion_desc sk__fuse_desc(const sk_parallel_plan *p) {
  const sk_comm_fusion *cf = &p->desc.comm_fusion;
  sk_fusion_desc fd;
  memset(&fd, 0, sizeof fd);
  fd.allreduce = cf->allreduce, fd.allgather = cf->allgather, fd.reduce_scatter = cf->reducescatter;
  sk_fusion_config *k[3] = {&fd.allreduce, &fd.allgather, &fd.reduce_scatter};
  for (int i = 0; i < 3; i++) {
    if (cf->closed) k[i]->mode = SK_FUSION_NONE;
    k[i]->mindspore_accounting = k[i]->mode == SK_FUSION_AUTO || k[i]->mode == SK_FUSION_SIZE;
  }
  return fd;
}

/* A member's fusion id: a Mirror its operator's; a shard's collectives its first reader's. */
static int sk__fuse_id(const sk_parallel_plan *p, const sk_program_step *ps) {
  const sk_graph *g = p->graph;
  if (ps->coll == SK_COLL_ALLREDUCE) return g->ops[p->steps[ps->index].op].fusion;
  int t = sk__fuse_input(p, ps);
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t) return g->ops[o].fusion;
  return 0;
}

/* Every member (a step with coll set and no bucket yet) given its bucket; *nbuckets how many. */
static sk_result sk__fuse_plan(sk_parallel_plan *p, sk_program *pg, int *nbuckets, sk_error *err) {
  int n = 0;
  for (int i = 0; i < pg->nsteps; i++) n += pg->steps[i].coll != SK_COLL_NONE;
  const sk_allocator *a = &p->desc.allocator;
  sk_fusion_key_op *ops = (sk_fusion_key_op *)sk__calloc(a, sizeof *ops * ((size_t)n + 1), sizeof(double));
  int *bucket = (int *)sk__alloc(a, sizeof(int) * ((size_t)n + 1), sizeof(int)), m = 0;
  if (!ops || !bucket)
    return sk__free(a, ops), sk__free(a, bucket), sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the fusion's keys");
  for (int i = 0; i < pg->nsteps; i++) {
    const sk_program_step *s = &pg->steps[i];
    if (s->coll == SK_COLL_NONE) continue;
    sk_fusion_key_op *o = &ops[m++];
    o->kind = s->coll, o->group = s->group, o->count = (size_t)s->count, o->dtype = SK_F32, o->op = SK_SUM;
    o->group_size = s->coll == SK_COLL_ALLREDUCE ? 1 : p->tensors[sk__fuse_input(p, s)].opt_size;
    o->fusion_id = sk__fuse_id(p, s);
    if (s->coll != SK_COLL_ALLREDUCE) o->count /= (size_t)o->group_size; /* the shard: NCCL's count */
  }
  sk_fusion_desc fd = sk__fuse_desc(p);
  sk_result r = sk_fusion_plan_keys(&fd, ops, n, bucket, nbuckets, err);
  for (int i = 0, j = 0; i < pg->nsteps && !r; i++)
    if (pg->steps[i].coll != SK_COLL_NONE) pg->steps[i].bucket = bucket[j++];
  sk__free(a, ops), sk__free(a, bucket);
  return r;
}

/* ---- where each bucket launches ------------------------------------------------------------- */

typedef struct sk__fuse_bucket {
  sk_coll_kind coll;
  int group, last_member, at; /* at: the step after which it launches; -1 the step's end */
  int64_t count;
} sk__fuse_bucket;

/* Each bucket's collective, group, count and launch point: the AllGather buckets after the
   step's last gathered member (one gather of every slice, waited for at once); under overlap an AllReduce or
   ReduceScatter bucket after its last member and the previous bucket of its collective; else at
   the step's end. */
static void sk__fuse_places(const sk_parallel_plan *p, const sk_program *pg, sk__fuse_bucket *bk, int nb) {
  bool overlap = p->desc.transformer_opt.grad_computation_allreduce_overlap;
  for (int b = 0; b < nb; b++) bk[b].coll = SK_COLL_NONE, bk[b].group = -1, bk[b].last_member = -1, bk[b].count = 0;
  for (int i = 0; i < pg->nsteps; i++) {
    const sk_program_step *s = &pg->steps[i];
    if (s->bucket < 0 || s->kind == SK_PSTEP_FUSED) continue;
    sk__fuse_bucket *x = &bk[s->bucket];
    x->coll = s->coll, x->group = s->group, x->last_member = i, x->count += s->count;
  }
  int prev[3] = {-1, -1, -1}; /* the last launch point of AllReduce, ReduceScatter; AllGather's */
  for (int b = 0; b < nb; b++)
    if (bk[b].coll == SK_COLL_ALLGATHER && bk[b].last_member > prev[2]) prev[2] = bk[b].last_member;
  for (int b = 0; b < nb; b++) {
    sk__fuse_bucket *x = &bk[b];
    int c = x->coll == SK_COLL_ALLREDUCE ? 0 : x->coll == SK_COLL_REDUCE_SCATTER ? 1 : 2;
    if (c == 2) x->at = prev[2];
    else if (!overlap) x->at = -1;
    else x->at = prev[c] = x->last_member > prev[c] ? x->last_member : prev[c];
  }
}

static void sk__fuse_launch(sk__fuse_b *fb, const sk__fuse_bucket *x, int b, bool last) {
  sk_program_step *s = sk__prog_emit(fb->b, SK_PSTEP_FUSED);
  s->bucket = b, s->coll = x->coll, s->group = x->group, s->count = x->count, s->last = last;
}

static void sk__fuse_wait(sk__fuse_b *fb, sk_coll_kind coll, bool last) {
  sk_program_step *s = sk__prog_emit(fb->b, SK_PSTEP_WAIT_FUSED);
  s->coll = coll, s->last = last;
}

/* Under grad_accumulation_step, level1 and level3 ReduceScatter the summed gradient once. */
static bool sk__fuse_scatter_last(const sk_parallel_plan *p) {
  return p->desc.grad_accumulation_step > 1 && p->desc.hsdp.level != SK_HSDP_LEVEL2;
}

/* The step's end: the buckets not launched, the waits, GradsReady, the partial Mirrors, the Update. */
static void sk__fuse_end(sk__fuse_b *fb, const sk__fuse_bucket *bk, int nb, const sk_program_step *update) {
  const sk_parallel_plan *p = fb->b->p;
  bool any[2] = {false, false}, accum = p->desc.grad_accumulation_step > 1;
  for (int c = 0; c < 2; c++) {
    sk_coll_kind coll = c ? SK_COLL_REDUCE_SCATTER : SK_COLL_ALLREDUCE;
    bool last = c && sk__fuse_scatter_last(p);
    for (int b = 0; b < nb; b++) {
      if (bk[b].coll != coll) continue;
      any[c] = true;
      if (bk[b].at < 0) sk__fuse_launch(fb, &bk[b], b, last);
    }
    if (any[c]) sk__fuse_wait(fb, coll, last);
  }
  for (int t = 0; t < p->graph->ntensors; t++) /* the slices held to the step's end */
    if (fb->held[t]) sk__fuse_slice(fb, false, t, 0, 0);
  sk__prog_emit(fb->b, SK_PSTEP_GRADS_READY);
  for (int t = 0; t < p->graph->ntensors; t++) {
    if (p->tensors[t].opt_mirror <= 1 || !p->tensors[t].needs_grad || !sk__fuse_sharded_here(p, fb->b->stage, t)) continue;
    sk_program_step *s = sk__prog_emit(fb->b, SK_PSTEP_SHARD_MIRROR);
    s->tensor = t, s->group = sk__prog_take(fb->b, sk__prog_opt_group(fb->b->p, t, SK_PGROUP_OPT_MIRROR)), s->last = accum;
    s->count = sk_parallel_slice_count(p, t) / p->tensors[t].opt_size, s->dtype = p->graph->tensors[t].dtype;
  }
  sk__fuse_copy(fb, update)->last = accum;
}

/* The rewritten steps with each bucket's Fused (and an AllGather's WaitFused) after its launch
   point, then the step's end (an evaluation's: the slices still held given back). */
static void sk__fuse_emit(sk__fuse_b *fb, const sk_program *mid, const sk__fuse_bucket *bk, int nb,
                          const sk_program_step *update) {
  const sk_parallel_plan *p = fb->b->p;
  for (int i = 0; i < mid->nsteps; i++) {
    sk__fuse_copy(fb, &mid->steps[i]);
    bool gathered = false;
    for (int b = 0; b < nb; b++)
      if (bk[b].at == i) {
        sk__fuse_launch(fb, &bk[b], b, bk[b].coll == SK_COLL_REDUCE_SCATTER && sk__fuse_scatter_last(p));
        gathered |= bk[b].coll == SK_COLL_ALLGATHER;
      }
    if (gathered) sk__fuse_wait(fb, SK_COLL_ALLGATHER, false);
  }
  for (int t = 0; !update && t < p->graph->ntensors; t++)
    if (fb->held[t]) sk__fuse_slice(fb, false, t, 0, 0);
  if (update) sk__fuse_end(fb, bk, nb, update);
}

/* Stage s's program pg (the build's: a training step ending with the Update, or an evaluation)
   with its fused collectives. */
static sk_result sk__prog_fuse(sk_parallel_plan *p, sk_program *pg, int stage, bool eval, sk_error *err) {
  sk_program mid = {0, NULL, 0, NULL}, out = {0, NULL, 0, NULL};
  const sk_graph *g = p->graph;
  sk__prog_b b;
  memset(&b, 0, sizeof b);
  b.p = p, b.prog = &mid, b.stage = stage;
  const sk_allocator *a = &p->desc.allocator;
  size_t nt = (size_t)g->ntensors + 1;
  sk__fuse_b fb = {&b, pg->steps, eval ? pg->nsteps : pg->nsteps - 1, (bool *)sk__calloc(a, nt * sizeof(bool), sizeof(bool)),
                   (int *)sk__calloc(a, nt * sizeof(int), sizeof(int)), (int *)sk__calloc(a, 2 * nt * sizeof(int), sizeof(int))};
  sk__fuse_bucket *bk = NULL;
  int nb = 0;
  sk_result r = fb.held && fb.readers && fb.held_at && (eval || pg->nsteps > 0)
                    ? SK_OK
                    : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the fusing's tensor tables");
  for (int o = 0; !r && o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++) fb.readers[g->ops[o].inputs[k]]++;
  if (!r) sk__fuse_rewrite(&fb);
  if (!r && b.failed) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the fused program's steps");
  if (!r) r = sk__fuse_plan(p, &mid, &nb, err);
  if (!r && !(bk = (sk__fuse_bucket *)sk__calloc(a, sizeof *bk * ((size_t)nb + 1), sizeof(double))))
    r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the fusion's buckets");
  if (!r) {
    sk__fuse_places(p, &mid, bk, nb);
    b.prog = &out, b.cap = 0;
    sk__fuse_emit(&fb, &mid, bk, nb, eval ? NULL : &pg->steps[pg->nsteps - 1]);
    if (b.failed) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the fused program's steps");
  }
  sk__free(a, fb.held), sk__free(a, fb.readers), sk__free(a, fb.held_at), sk__free(a, bk), sk__free(a, mid.steps);
  if (r) return sk__free(a, out.steps), r;
  sk__free(a, pg->steps);
  pg->nsteps = out.nsteps, pg->steps = out.steps;
  return SK_OK;
}

SK_EXTERN_C_END
#endif
