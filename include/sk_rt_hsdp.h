/* sk_rt_hsdp.h -- part of sk_runtime.h's implementation: optimizer parallel: the shards' gathers, ReduceScatters and partial Mirrors.
   Include sk_runtime.h, not this: its implementation includes the parts in order. Needs only libc.
   License: MIT. */
#ifndef SK_RT_HSDP_H
#define SK_RT_HSDP_H
#include "sk_runtime.h"
#endif

#if defined(SK_RUNTIME_IMPL) && defined(SK_RUNTIME_IMPL_BODY) && !defined(SK_RT_HSDP_DONE)
#define SK_RT_HSDP_DONE

SK_EXTERN_C_BEGIN

/* ---- optimizer parallel: gathered slices of sharded parameters -------------------------------- */

/* Points every view of tensor t's slice at `data` (a gathered slice, or NULL once released). */
static void sk__rt_point(sk_runtime *rt, int t, void *data) {
  rt->values[t] = data, rt->args[t].data = data;
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++)
      if (rt->g->ops[o].inputs[k] == t && !rt->plan->ops[o].moved[k]) rt->ops[o].karg[k].data = data;
}

static sk_result sk__rt_hold(sk_runtime *rt, int t, sk_error *err) {
  void *v = sk__rt_alloc(rt, SK__RT_PARAMS, sk__rt_bytes(rt, t));
  if (!v) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: Alloc: out of memory for the slice ParamGather gathers of '%s'",
                         rt->g->tensors[t].name);
  sk__rt_point(rt, t, v);
  rt->shards[t].held = true;
  return SK_OK;
}

static void sk__rt_release(sk_runtime *rt, int t) {
  if (!rt->shards[t].held) return;
  sk__rt_counted_free(rt, rt->values[t]);
  sk__rt_point(rt, t, NULL);
  rt->shards[t].held = false;
}

static void sk__rt_release_all(sk_runtime *rt) {
  for (int t = 0; t < rt->g->ntensors; t++) sk__rt_release(rt, t);
}

/* A ParamGather of the program into the slice its Alloc took: at level3 one AllGather now; at
   level1 / level2 a member of this step's gather, registered with its scheduler (made at the
   first member: the slices are new buffers) under its bucket, which its Fused step launches. */
static sk_result sk__rt_prog_gather(sk_runtime *rt, int t, int bucket, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  sk_result r = SK_OK;
  if (!sh->held) return sk__fail(err, SK_ERR_INVALID_USAGE, "runtime: gathering '%s' without its slice", rt->g->tensors[t].name);
  if (bucket < 0) {
    if ((r = sk_allgather(sh->gather, sh->data, rt->values[t], (size_t)sh->count, rt->cdt, NULL)))
      return sk__rt_comm_failed(rt, sh->gather, r, err);
    sk__rt_count_comm(rt, SK_COLL_ALLGATHER, sh->gather, (uint64_t)sk_parallel_slice_count(rt->plan, t) * sk_dtype_size(rt->cdt));
    return SK_OK;
  }
  if (!rt->ag) {
    sk_fusion_desc fd = sk__rt_fusion_desc(rt);
    rt->kind = SK__RT_HOST;
    if ((r = sk_fusion_create(&fd, &rt->ag, err))) return r;
  }
  rt->kind = SK__RT_HOST;
  r = sk_fusion_add_allgather(rt->ag, sh->gather, sh->data, rt->values[t], (size_t)sh->count, rt->cdt, bucket + 1,
                              rt->g->tensors[t].name, NULL, NULL);
  return r ? sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(rt->ag)) : SK_OK;
}

/* The summed gradient of a sharded parameter goes to the scheduler (launched now under overlap,
   else at the update); the backward is done with the gathered slice. */
/* Gradient accumulation: the optimizer runs on the last of every grad_accumulation_step steps. */
static bool sk__rt_last_micro(const sk_runtime *rt) { return (rt->step + 1) % rt->accum == 0; }

/* Sharded gradients are ReduceScattered every step at level2 (they accumulate sharded), else
   on the last micro-step (they accumulate whole, as MindSpore's grad_accumulation_shard False). */
static bool sk__rt_scatter_now(const sk_runtime *rt) {
  return rt->accum == 1 || rt->plan->desc.hsdp.level == SK_HSDP_LEVEL2 || sk__rt_last_micro(rt);
}

/* Pipeline at level2: micro-batch i's gradient of parameter t ReduceScattered now, in the
   Mirrors' wire, into the shard's gradient (the first micro-batch) or beside it and added (the
   others: the shard's gradient is MindSpore's sharded accumulator); the next micro-batch's
   gradient starts a new sum. "Beside it" is the last gradient scratch, free at this step (it
   follows every step of its operator's inputs, each of which summed its scratch in) and at
   least a shard long (the create section sizes it: sk_program_create.h). */
static sk_result sk__rt_pipe_scatter_micro(sk_runtime *rt, int t, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  int64_t n = sk_parallel_slice_count(rt->plan, t);
  void *to = sh->micros ? rt->scratch[SK_OP_MAX_INPUTS - 1] : sh->grad;
  sk_result r;
  if (sh->wire_grad) {
    sk__rt_to_wire(rt->mirror_wire, rt->grads[t], sh->wire_grad, n);
    r = sk_reduce_scatter(sh->gather, sh->wire_grad, sh->wire_shard, (size_t)sh->count, rt->mirror_wire, SK_SUM, NULL);
    if (!r) sk__rt_from_wire(rt->mirror_wire, sh->wire_shard, to, sh->count);
  } else {
    r = sk_reduce_scatter(sh->gather, rt->grads[t], to, (size_t)sh->count, rt->cdt, SK_SUM, NULL);
  }
  if (r) return sk__rt_comm_failed(rt, sh->gather, r, err);
  sk__rt_count_comm(rt, SK_COLL_REDUCE_SCATTER, sh->gather, (uint64_t)n * sk_dtype_size(rt->mirror_wire));
  if (sh->micros) sk__rt_add(rt->cdt, sh->grad, to, sh->count);
  rt->written[t] = false;
  sh->micros++;
  return SK_OK;
}

/* Under a pipeline the step runs once per micro-batch (after the backward of the parameter's
   first reader). level2 scatters each; level1 and level3 sum the micro-batches' gradients whole
   (MindSpore's grad_accumulation_shard False) and hand the sum to the scheduler after the last.
   The gathered slice's Free is the program's (level3 before this step, the others at the end). */
static sk_result sk__rt_pipe_grad_reduce_scatter(sk_runtime *rt, int t, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  if (!rt->written[t]) memset(rt->grads[t], 0, sk__rt_bytes(rt, t)), rt->written[t] = true;
  if (sk__rt_pipe_scatters_each_micro(rt)) return sk__rt_pipe_scatter_micro(rt, t, err);
  if (++sh->micros < rt->plan->micro) return SK_OK;
  if (sh->wire_grad) sk__rt_to_wire(rt->mirror_wire, rt->grads[t], sh->wire_grad, sk_parallel_slice_count(rt->plan, t));
  if (!rt->overlap) return SK_OK;
  sk_result r = sk_fusion_ready(rt->rs_fusion, sh->rs_handle, NULL);
  return r ? sk__fail(err, r, "%s", sk_fusion_error_message(rt->rs_fusion)) : SK_OK;
}

static sk_result sk__rt_grad_reduce_scatter(sk_runtime *rt, int t, sk_error *err) {
  if (rt->world) return sk__rt_pipe_grad_reduce_scatter(rt, t, err);
  if (!rt->written[t]) memset(rt->grads[t], 0, sk__rt_bytes(rt, t)), rt->written[t] = true;
  int64_t n = sk_parallel_slice_count(rt->plan, t);
  if (!sk__rt_scatter_now(rt)) return sk__rt_add(rt->cdt, rt->acc[t], rt->grads[t], n), SK_OK;
  if (rt->acc[t] && rt->plan->desc.hsdp.level != SK_HSDP_LEVEL2) { /* the whole accumulated gradient */
    sk__rt_add(rt->cdt, rt->grads[t], rt->acc[t], n);
    memset(rt->acc[t], 0, sk__rt_bytes(rt, t));
  }
  if (rt->shards[t].wire_grad) /* the gradient is final: its 16-bit copy is what the scheduler sends */
    sk__rt_to_wire(rt->mirror_wire, rt->grads[t], rt->shards[t].wire_grad, n);
  if (!rt->overlap) return SK_OK;
  sk_result r = sk_fusion_ready(rt->rs_fusion, rt->shards[t].rs_handle, NULL);
  return r ? sk__fail(err, r, "%s", sk_fusion_error_message(rt->rs_fusion)) : SK_OK;
}

/* The partial Mirror of one shard, in the Mirrors' wire: in 16 bits through the shard's shadow,
   free again after the ReduceScatter (the shard itself may have changed since: level2 sums it
   over the micro-steps). */
static sk_result sk__rt_shard_mirror(sk_runtime *rt, sk__rt_shard *sh) {
  if (!sh->wire_shard) return sk_allreduce(sh->mirror, sh->grad, sh->grad, (size_t)sh->count, rt->cdt, SK_SUM, NULL);
  sk__rt_to_wire(rt->mirror_wire, sh->grad, sh->wire_shard, sh->count);
  sk_result r = sk_allreduce(sh->mirror, sh->wire_shard, sh->wire_shard, (size_t)sh->count, rt->mirror_wire, SK_SUM, NULL);
  if (!r) sk__rt_from_wire(rt->mirror_wire, sh->wire_shard, sh->grad, sh->count);
  return r;
}

/* ShardMirror: after the ReduceScatters, a partly sharded parameter's Mirror over the rest of
   its replicas. */
static sk_result sk__rt_prog_shard_mirror(sk_runtime *rt, int t, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  if (!sh->mirror || !sh->grad)
    return sk__fail(err, SK_ERR_INVALID_USAGE, "runtime: ShardMirror of '%s', which has no shard here", rt->g->tensors[t].name);
  sk_result r = sk__rt_shard_mirror(rt, sh);
  if (r) return sk__rt_comm_failed(rt, sh->mirror, r, err);
  sk__rt_count_comm(rt, SK_COLL_ALLREDUCE, sh->mirror, (uint64_t)sh->count * sk_dtype_size(rt->mirror_wire));
  return SK_OK;
}

SK_EXTERN_C_END
#endif
