/* sk_rt_setup.h -- part of sk_runtime.h's implementation: what create prepares for each operator and parameter (groups, moves, the fusion schedulers, the wire buffers, the norms, the initial parameters; the buffers themselves are the program's create section).
   Include sk_runtime.h, not this: its implementation includes the parts in order. Needs only libc.
   License: MIT. */
#ifndef SK_RT_SETUP_H
#define SK_RT_SETUP_H
#include "sk_runtime.h"
#endif

#if defined(SK_RUNTIME_IMPL) && defined(SK_RUNTIME_IMPL_BODY) && !defined(SK_RT_SETUP_DONE)
#define SK_RT_SETUP_DONE

SK_EXTERN_C_BEGIN

/* Operator o's outputs out_strategy moves: the moves between the rule's layout (the create
   section's buffers, under a pipeline the slots') and their tensors (collective). */
static sk_result sk__rt_setup_out_moves(sk_runtime *rt, int o, sk_error *err) {
  const sk_graph_op *op = &rt->g->ops[o];
  const sk_parallel_op *po = &rt->plan->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  sk_result r = SK_OK;
  for (int k = 0; k < op->noutputs && !r; k++) {
    if (!po->out_moved[k]) continue;
    int t = op->outputs[k];
    sk_dtype dt = sk__rt_dtype(rt, t);
    const sk_layout *kl = &po->plan.out[k], *tl = &rt->plan->tensors[t].layout;
    bool grad = rt->plan->tensors[t].needs_grad;
    r = sk__rt_move(rt, kl, tl, dt, &ro->out_move[k], err);
    if (!r && grad) r = sk__rt_move(rt, tl, kl, dt, &ro->out_move_back[k], err);
    ro->out_move_bytes[k] = sk__rt_plan_sends(ro->out_move[k], rt->rank);
    ro->out_move_back_bytes[k] = sk__rt_plan_sends(ro->out_move_back[k], rt->rank);
  }
  return r;
}

/* Operator o's groups, moves and views of its buffers (collective). */
static sk_result sk__rt_setup_op(sk_runtime *rt, int o, sk_error *err) {
  const sk_graph_op *op = &rt->g->ops[o];
  const sk_parallel_op *po = &rt->plan->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  if (rt->world && !sk_parallel_op_on_stage(rt->plan, o, rt->stage)) return SK_OK; /* another stage's */
  sk_result r = sk_parallel_facts(rt->plan, o, rt->rank, &ro->facts, err);
  for (int k = 0; k < op->ninputs && !r; k++) {
    int t = op->inputs[k];
    sk_dtype dt = sk__rt_dtype(rt, t);
    ro->fusion_handle[k] = -1;
    bool own = sk_parallel_owns_move(rt->plan, o, k); /* else an earlier reader's copy */
    if (po->moved[k]) {
      if (own) r = sk__rt_move(rt, &rt->plan->tensors[t].layout, &po->kernel_in[k], dt, &ro->move[k], err);
      if (!r && ro->dkin[k]) r = sk__rt_move(rt, &po->kernel_in[k], &rt->plan->tensors[t].layout, dt, &ro->move_back[k], err);
      ro->move_bytes[k] = sk__rt_plan_sends(ro->move[k], rt->rank);
      ro->move_back_bytes[k] = sk__rt_plan_sends(ro->move_back[k], rt->rank);
    }
    void *in = !po->moved[k] ? rt->values[t] : own ? ro->kin[k] : rt->ops[po->move_op[k]].kin[po->move_slot[k]];
    sk__rt_view(&ro->karg[k], &po->kernel_in[k], dt, in);
    if (!r && po->plan.bwd_in[k].kind != SK_COLL_NONE) r = sk__rt_group_of(rt, &po->plan.mesh, po->plan.bwd_in[k].axes, &ro->bwd[k], err);
    if (!r && po->plan.grad[k].kind != SK_COLL_NONE && ((po->desc.params >> k) & 1u))
      r = sk__rt_group_of(rt, &po->plan.mesh, po->plan.grad[k].axes, &ro->mirror[k], err);
  }
  if (!r) r = sk__rt_setup_out_moves(rt, o, err);
  if (!r && po->plan.fwd.kind != SK_COLL_NONE) r = sk__rt_group_of(rt, &po->plan.mesh, po->plan.fwd.axes, &ro->fwd, err);
  if (!r && po->plan.fwd.kind == SK_COLL_REDUCE_SCATTER) {
    ro->rs_group = sk_comm_size(ro->fwd);
    ro->pre_rs_count = sk__rt_count(&po->plan.out[0]) * ro->rs_group;
  }
  return r;
}

/* Whether step s runs on this device: every step without a pipeline; under one, the update and
   the steps of the operators of this device's stage. */
static bool sk__rt_step_here(const sk_runtime *rt, const sk_parallel_step *s) {
  return !rt->world || s->op < 0 || sk_parallel_op_on_stage(rt->plan, s->op, rt->stage);
}

/* Pipeline at level2: each micro-batch's sharded gradient is ReduceScattered at its step, not
   through the scheduler at the update. */
static bool sk__rt_pipe_scatters_each_micro(const sk_runtime *rt) {
  return rt->world && rt->plan->desc.hsdp.level == SK_HSDP_LEVEL2;
}

/* The shard groups of each sharded parameter: its AllGather / ReduceScatter group and the Mirror
   over the replicas left (the plan's ids; parameters that group the devices alike share them). */
static sk_result sk__rt_setup_shard_groups(sk_runtime *rt, sk_error *err) {
  const sk_graph *g = rt->g;
  sk_result r = SK_OK;
  for (int t = 0; t < g->ntensors && !r; t++) {
    sk__rt_shard *sh = &rt->shards[t];
    if (!sh->data) continue;
    for (int o = g->nops - 1; o >= 0; o--) /* the first reader's fusion id, as its Mirror would have */
      for (int k = 0; k < g->ops[o].ninputs; k++)
        if (g->ops[o].inputs[k] == t) sh->fusion = g->ops[o].fusion;
    sk_plan_group want;
    memset(&want, 0, sizeof want);
    want.kind = SK_PGROUP_OPT_GATHER, want.tensor = t;
    r = sk__rt_group(rt, &want, &sh->gather, err);
    want.kind = SK_PGROUP_OPT_MIRROR;
    if (!r && rt->plan->tensors[t].opt_mirror > 1) r = sk__rt_group(rt, &want, &sh->mirror, err);
  }
  return r;
}

/* The schedulers execute the program's buckets: each member is registered with its bucket's
   number + 1 as its fusion id and one bucket per id, so they form exactly the plan's buckets. */
static sk_fusion_desc sk__rt_fusion_desc(const sk_runtime *rt) {
  sk_fusion_desc fd;
  memset(&fd, 0, sizeof fd);
  sk_fusion_config *k[3] = {&fd.allreduce, &fd.allgather, &fd.reduce_scatter};
  for (int i = 0; i < 3; i++) k[i]->mode = SK_FUSION_SIZE, k[i]->threshold_bytes = SK_FUSION_INF;
  fd.allocator = rt->counted;
  return fd;
}

/* The program's bucket of plan step s (a Mirror member of a fused AllReduce), or -1. */
static int sk__rt_bucket_of(const sk_runtime *rt, const sk_parallel_step *s) {
  const sk_program *pg = &rt->plan->programs[rt->stage];
  int i = (int)(s - rt->plan->steps);
  for (int j = 0; s->kind == SK_PSTEP_MIRROR && j < pg->nsteps; j++)
    if (pg->steps[j].kind == SK_PSTEP_MIRROR && pg->steps[j].index == i) return pg->steps[j].bucket;
  return -1;
}

static bool sk__rt_fusable(const sk_runtime *rt, const sk_parallel_step *s) { return sk__rt_bucket_of(rt, s) >= 0; }

/* 16-bit Mirrors reduce a shadow of each fused gradient: the create section's one block, the
   shadows consecutive in registration order, so a bucket is one flat span the scheduler
   reduces without packing. */
static sk_result sk__rt_place_shadows(sk_runtime *rt, sk_error *err) {
  if (!rt->shadows) return SK_OK;
  int64_t total = 0;
  for (int i = 0; i < rt->plan->nsteps; i++)
    if (sk__rt_fusable(rt, &rt->plan->steps[i]))
      total += sk_parallel_slice_count(rt->plan, rt->g->ops[rt->plan->steps[i].op].inputs[rt->plan->steps[i].slot]);
  if (total != sk__rt_created_count(rt, SK_PBUF_SHADOWS))
    return sk__fail(err, SK_ERR_INTERNAL, "runtime: the fused Mirrors' shadows need %lld elements, the program gave %lld",
                    (long long)total, (long long)sk__rt_created_count(rt, SK_PBUF_SHADOWS));
  uint16_t *at = (uint16_t *)rt->shadows;
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (!sk__rt_fusable(rt, s)) continue;
    rt->ops[s->op].shadow[s->slot] = at;
    at += sk_parallel_slice_count(rt->plan, rt->g->ops[s->op].inputs[s->slot]);
  }
  return SK_OK;
}

/* The gradient ReduceScatter is the sharded parameter's gradient synchronisation (its Mirror),
   so it travels in the Mirrors' wire. In 16 bits the scheduler reduces shadows, as the fused
   Mirrors do: per sharded gradient a 16-bit copy of its slice (the input, filled when the
   gradient is final) and of its shard (the output, read back after the wait), in the create
   section's one block. */
static sk_result sk__rt_place_rs_shadows(sk_runtime *rt, sk_error *err) {
  if (!rt->rs_shadows) return SK_OK;
  uint16_t *at = (uint16_t *)rt->rs_shadows, *end = at + sk__rt_created_count(rt, SK_PBUF_RS_SHADOWS);
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (s->kind != SK_PSTEP_GRAD_REDUCE_SCATTER || !sk__rt_step_here(rt, s)) continue;
    int t = rt->g->ops[s->op].inputs[s->slot];
    sk__rt_shard *sh = &rt->shards[t];
    if (end - at < sk_parallel_slice_count(rt->plan, t) + sh->count)
      return sk__fail(err, SK_ERR_INTERNAL, "runtime: the program's shadows of the sharded gradients end before '%s''s",
                      rt->g->tensors[t].name);
    sh->wire_grad = at, at += sk_parallel_slice_count(rt->plan, t);
    sh->wire_shard = at, at += sh->count;
  }
  return SK_OK;
}

/* A sharded parameter's gradient ReduceScatter, fused under comm_fusion's reducescatter setting,
   in the Mirrors' wire: on the gradient and its shard, or on their 16-bit shadows. */
static sk_result sk__rt_add_reduce_scatter(sk_runtime *rt, int t, int bucket, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  const void *send = sh->wire_grad ? sh->wire_grad : rt->grads[t];
  void *recv = sh->wire_shard ? sh->wire_shard : sh->grad;
  rt->kind = SK__RT_HOST;
  sk_result r = sk_fusion_add_reduce_scatter(rt->rs_fusion, sh->gather, send, recv, (size_t)sh->count, rt->mirror_wire,
                                             SK_SUM, bucket + 1, rt->g->tensors[t].name, &sh->rs_handle, NULL);
  if (r) return sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(rt->rs_fusion));
  rt->nrs++;
  return SK_OK;
}

/* The Mirrors sk__rt_fusable takes go to the fusion scheduler, registered in backward order;
   the others run at their step. The sharded parameters' ReduceScatters have their own (under
   gradient accumulation at level1 they do not run every step). */
static sk_result sk__rt_setup_fusion(sk_runtime *rt, sk_error *err) {
  sk_fusion_desc fd = sk__rt_fusion_desc(rt);
  rt->kind = SK__RT_HOST;
  sk_result r = sk_fusion_create(&fd, &rt->fusion, err);
  rt->kind = SK__RT_HOST;
  if (!r) r = sk_fusion_create(&fd, &rt->rs_fusion, err);
  if (!r) r = sk__rt_place_shadows(rt, err);
  if (!r) r = sk__rt_place_rs_shadows(rt, err);
  const sk_program *pg = &rt->plan->programs[rt->stage];
  for (int i = 0; i < pg->nsteps && !r; i++) { /* the members, in the program's order */
    const sk_program_step *ps = &pg->steps[i];
    if (ps->bucket < 0 || ps->kind == SK_PSTEP_FUSED || ps->coll == SK_COLL_ALLGATHER) continue;
    const sk_parallel_step *s = &rt->plan->steps[ps->index];
    int t = rt->g->ops[s->op].inputs[s->slot];
    if (ps->coll == SK_COLL_REDUCE_SCATTER) {
      r = sk__rt_add_reduce_scatter(rt, t, ps->bucket, err);
      continue;
    }
    sk__rt_op *ro = &rt->ops[s->op];
    void *buf = ro->shadow[s->slot] ? ro->shadow[s->slot] : rt->grads[t];
    rt->kind = SK__RT_HOST;
    r = sk_fusion_add_allreduce(rt->fusion, ro->mirror[s->slot], buf, buf, (size_t)sk_parallel_slice_count(rt->plan, t),
                                rt->mirror_wire, SK_SUM, ps->bucket + 1, rt->g->tensors[t].name,
                                &ro->fusion_handle[s->slot], NULL);
    if (r) r = sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(rt->fusion));
    else rt->nfused++;
  }
  rt->kind = SK__RT_HOST;
  if (!r && (r = sk_fusion_plan(rt->fusion, NULL))) r = sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(rt->fusion));
  rt->kind = SK__RT_HOST;
  if (!r && (r = sk_fusion_plan(rt->rs_fusion, NULL)))
    r = sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(rt->rs_fusion));
  return r;
}

/* Which BackwardComm steps carry which inputs' gradients: each its own, or with
   enable_communication_fusion every input of an operator reduced on the same group with the
   same operation rides on the first one's AllReduce (the backward wrote all of them before). */
static void sk__rt_setup_bwd_pack(sk_runtime *rt) {
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < SK_OP_MAX_INPUTS; k++) rt->ops[o].bwd_lead[k] = k, rt->ops[o].bwd_members[k] = 0;
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (s->kind != SK_PSTEP_BACKWARD_COMM) continue;
    sk__rt_op *ro = &rt->ops[s->op];
    int k = s->slot, lead = k;
    for (int j = 0; j < k && rt->plan->desc.transformer_opt.enable_communication_fusion; j++)
      if (ro->bwd_members[j] && ro->bwd[j] == ro->bwd[k] && rt->plan->ops[s->op].plan.bwd_in[j].op == s->comm.op) {
        lead = j;
        break;
      }
    ro->bwd_lead[k] = lead, ro->bwd_members[lead] |= 1u << k;
  }
}

/* The communicator of every device: the world under a pipeline (comm is then the stage's). */
static sk_comm *sk__rt_everyone(const sk_runtime *rt) { return rt->world ? rt->world : rt->comm; }

/* Local norms: this device's values, every device's on the world's device 0, and the dump file,
   which that device opens (truncating) now so a bad path fails at create. Every device counts a
   norm per parameter of the network, held here or not (under a pipeline another stage's), so
   the gather takes the same count from each. */
static sk_result sk__rt_setup_norms(sk_runtime *rt, sk_error *err) {
  const sk_autoparallel *pd = &rt->plan->desc;
  if (!pd->print_local_norm && !pd->dump_local_norm) return SK_OK;
  for (int t = 0; t < rt->g->ntensors; t++) rt->nnorms += sk_graph_trainable(rt->g, t);
  rt->nnorms += pd->device_local_norm;
  if (!rt->nnorms) return SK_OK;
  bool writer = sk_comm_rank(sk__rt_everyone(rt)) == 0;
  size_t all = writer ? (size_t)sk_comm_size(sk__rt_everyone(rt)) * (size_t)rt->nnorms : 1;
  rt->norms = (double *)sk__rt_alloc(rt, SK__RT_HOST, (size_t)rt->nnorms * sizeof(double));
  rt->all_norms = (double *)sk__rt_alloc(rt, SK__RT_HOST, all * sizeof(double));
  if (!rt->norms || !rt->all_norms) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for the local norms");
  if (!writer || !pd->dump_local_norm) return SK_OK;
  if (!(rt->norm_file = fopen(pd->dump_local_norm, "w")))
    return sk__fail(err, SK_ERR_SYSTEM, "runtime: dump_local_norm: cannot open '%s' for writing: %s", pd->dump_local_norm,
                    strerror(errno));
  return SK_OK;
}

static void sk__rt_last_steps(sk_runtime *rt) {
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (s->kind == SK_PSTEP_BACKWARD)
      for (int k = 0; k < SK_OP_MAX_INPUTS; k++) rt->ops[s->op].last_step[k] = i;
    else if (s->kind == SK_PSTEP_BACKWARD_COMM || s->kind == SK_PSTEP_MIRROR || s->kind == SK_PSTEP_MOVE_BACK)
      rt->ops[s->op].last_step[s->slot] = i;
  }
}

/* Copies device `rank`'s slice of the whole row-major tensor `full` (elements of esize bytes)
   into out, densely. */
static sk_result sk__rt_take_slice(size_t esize, const sk_layout *l, int rank, const void *full, void *out,
                                   sk_error *err) {
  sk_slice s;
  sk_result r = sk_layout_slice(l, rank, &s, err);
  if (r) return r;
  int nd = l->ndims;
  if (nd == 0) return memcpy(out, full, esize), SK_OK;
  int64_t idx[SK_MAX_DIMS], run = s.stop[nd - 1] - s.start[nd - 1];
  for (int d = 0; d < nd; d++) idx[d] = s.start[d];
  char *dst = (char *)out;
  for (;;) {
    int64_t at = 0;
    for (int d = 0; d < nd; d++) at = at * l->shape[d] + idx[d];
    memcpy(dst, (const char *)full + (size_t)at * esize, (size_t)run * esize);
    dst += (size_t)run * esize;
    int d = nd - 2;
    while (d >= 0 && ++idx[d] == s.stop[d]) idx[d] = s.start[d], d--;
    if (d < 0) return SK_OK;
  }
}

/* Parameter t's slice of the whole tensor `full` (a sharded one: its chunk of that slice). */
static sk_result sk__rt_keep_slice(sk_runtime *rt, int t, const void *full, sk_error *err) {
  size_t es = sk_dtype_size(rt->cdt);
  int64_t n = sk_parallel_slice_count(rt->plan, t);
  const sk__rt_shard *sh = &rt->shards[t];
  void *slice = sh->data ? sk__rt_alloc(rt, SK__RT_PARAMS, (size_t)n * es) : rt->values[t];
  if (!slice) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory drawing '%s'", rt->g->tensors[t].name);
  sk_result r = sk__rt_take_slice(es, &rt->plan->tensors[t].layout, rt->rank, full, slice, err);
  if (!r) sk__rt_store(rt, slice, n);
  if (sh->data) { /* dim 0 is the outermost: chunk `index` is one contiguous run */
    memcpy(sh->data, (const char *)slice + (size_t)(sh->index * sh->count) * es, (size_t)sh->count * es);
    sk__rt_counted_free(rt, slice);
  }
  return r;
}

/* Every device draws the whole initial model, as one device does, and keeps its slices. The
   whole tensors come from desc.alloc too (the largest buffers create takes), freed before it
   returns. */
static sk_result sk__rt_init_params(sk_runtime *rt, sk_error *err) {
  const sk_graph *g = rt->g;
  void **full = (void **)sk__rt_table(rt, (size_t)g->ntensors + 1, sizeof *full);
  sk_result r = full ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory drawing parameters");
  for (int t = 0; t < g->ntensors && !r; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM &&
        !(full[t] = sk__rt_alloc(rt, SK__RT_PARAMS, (size_t)sk_graph_numel(g, t) * sk_dtype_size(rt->cdt))))
      r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory drawing '%s'", g->tensors[t].name);
  uint64_t seed = rt->seed + (rt->plan->desc.seed_by_rank ? (uint64_t)sk_comm_rank(sk__rt_everyone(rt)) : 0);
  if (!r) r = sk_graph_init_params(g, seed, rt->cdt, full, err);
  for (int t = 0; t < g->ntensors && !r; t++) /* pipeline: another stage's parameters have no buffer here */
    if (g->tensors[t].role == SK_TENSOR_PARAM && (rt->values[t] || rt->shards[t].data)) r = sk__rt_keep_slice(rt, t, full[t], err);
  for (int t = 0; t < g->ntensors && !r; t++) /* a constant: the whole rank-0 tensor on every device reading it */
    if (g->tensors[t].role == SK_TENSOR_CONST && rt->values[t]) {
      (void)sk_exec_convert(SK_F64, &g->tensors[t].value, rt->cdt, rt->values[t], 1);
      sk__rt_store(rt, rt->values[t], 1);
    }
  for (int t = 0; full && t < g->ntensors; t++) sk__rt_counted_free(rt, full[t]);
  sk__rt_counted_free(rt, full);
  return r;
}

SK_EXTERN_C_END
#endif
