/* sk_rt_core.h -- part of sk_runtime.h's implementation: accounting (every byte counted by kind, the collectives and FLOPs a step runs), a device's tensors, the plan groups' communicators and the moves.
   Include sk_runtime.h, not this: its implementation includes the parts in order. Needs only libc.
   License: MIT. */
#ifndef SK_RT_CORE_H
#define SK_RT_CORE_H
#include "sk_runtime.h"
#endif

#if defined(SK_RUNTIME_IMPL) && defined(SK_RUNTIME_IMPL_BODY) && !defined(SK_RT_CORE_DONE)
#define SK_RT_CORE_DONE

SK_EXTERN_C_BEGIN

/* ---- allocation, counted by kind ------------------------------------------------------------- */

typedef struct sk__rt_block { /* the header in front of every counted block */
  size_t bytes;
  int kind;
  int pad[13]; /* 64 bytes: the block after it stays 64-byte aligned */
} sk__rt_block;

static void *sk__rt_counted_alloc(void *user, size_t size, size_t align) {
  sk_runtime *rt = (sk_runtime *)user;
  (void)align; /* 64 covers every alignment the modules ask for */
  size_t n = (size + 63) / 64 * 64 + sizeof(sk__rt_block);
  sk__rt_block *b = (sk__rt_block *)sk__alloc(&rt->desc.alloc, n, 64);
  if (!b) return NULL;
  memset(b, 0, n);
  b->bytes = size, b->kind = rt->kind;
  rt->bytes[rt->kind] += size;
  uint64_t total = 0;
  for (int k = 0; k < SK__RT_HOST; k++) total += rt->bytes[k];
  if (rt->bytes[rt->kind] > rt->peak[rt->kind]) rt->peak[rt->kind] = rt->bytes[rt->kind];
  if (total > rt->peak_total) rt->peak_total = total;
  return b + 1;
}

static void sk__rt_counted_free(void *user, void *p) {
  sk_runtime *rt = (sk_runtime *)user;
  if (!p) return;
  sk__rt_block *b = (sk__rt_block *)p - 1;
  rt->bytes[b->kind] -= b->bytes;
  sk__free(&rt->desc.alloc, b);
}

static void *sk__rt_alloc(sk_runtime *rt, int kind, size_t bytes) {
  rt->kind = kind;
  return sk__rt_counted_alloc(rt, bytes ? bytes : 1, 64);
}

/* The runtime's own tables (n entries of `size` bytes, zeroed): the library's bookkeeping, from
   the device's allocator, counted as host. Free with sk__rt_counted_free. */
static void *sk__rt_table(sk_runtime *rt, size_t n, size_t size) { return sk__rt_alloc(rt, SK__RT_HOST, n * size); }

/* Puts `prefix` in front of err's message (the end of a long message is cut). */
static void sk__rt_prefix(sk_error *err, const char *prefix) {
  char msg[SK_ERROR_MSG_MAX];
  memcpy(msg, err->msg, sizeof msg);
  msg[sizeof msg - 1] = 0;
  size_t at = strlen(prefix) < sizeof err->msg - 1 ? strlen(prefix) : sizeof err->msg - 1;
  memmove(err->msg, prefix, at);
  size_t len = strlen(msg), room = sizeof err->msg - 1 - at;
  memcpy(err->msg + at, msg, len < room ? len : room);
  err->msg[at + (len < room ? len : room)] = 0;
}

/* f16 / bf16 runs: rounds n f32 values to the storage format (nothing for f32 and f64). */
static void sk__rt_store(const sk_runtime *rt, void *buf, int64_t n) { sk_exec_round(rt->store, (float *)buf, n); }

/* ---- tensors on this device --------------------------------------------------------------- */


static sk_dtype sk__rt_dtype(const sk_runtime *rt, int t) {
  sk_dtype dt = rt->g->tensors[t].dtype;
  return sk_exec_is_float(dt) ? rt->cdt : dt;
}

static int64_t sk__rt_count(const sk_layout *l) {
  int64_t s[SK_MAX_DIMS] = {0}, n = 1;
  sk_layout_slice_shape(l, s);
  for (int d = 0; d < l->ndims; d++) n *= s[d];
  return n;
}

static void sk__rt_view(sk_exec_arg *a, const sk_layout *l, sk_dtype dt, void *data) {
  memset(a, 0, sizeof *a);
  a->dtype = dt, a->ndims = l->ndims, a->data = data;
  sk_layout_slice_shape(l, a->shape);
}

static size_t sk__rt_bytes(const sk_runtime *rt, int t) {
  return (size_t)sk_parallel_slice_count(rt->plan, t) * sk_dtype_size(sk__rt_dtype(rt, t));
}

/* Output k of operator o where its kernel writes it: the tensor's buffer, or the rule's layout's
   (kout) when out_strategy moves it; *n its element count there. */
static void *sk__rt_kout(const sk_runtime *rt, int o, int k, int64_t *n) {
  const sk_parallel_op *po = &rt->plan->ops[o];
  *n = sk__rt_count(&po->plan.out[k]);
  return po->out_moved[k] ? rt->ops[o].kout[k] : rt->values[rt->g->ops[o].outputs[k]];
}

/* Whether an operator of this device's pipeline stage reads tensor t (always, without a pipeline). */
static bool sk__rt_read_here(const sk_runtime *rt, int t) {
  if (!rt->world) return true;
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++)
      if (rt->g->ops[o].inputs[k] == t && sk_parallel_op_on_stage(rt->plan, o, rt->stage)) return true;
  return false;
}

/* Where the buffer of create section step ps goes on this device (NULL: a step this runtime has
   no place for, which one compiled plan never holds). */
static void **sk__rt_create_ref(sk_runtime *rt, const sk_program_step *ps) {
  int t = ps->tensor, k = ps->slot;
  sk__rt_op *ro = ps->op >= 0 ? &rt->ops[ps->op] : NULL;
  bool tensor = t >= 0 && t < rt->g->ntensors, input = ro && k >= 0 && k < SK_OP_MAX_INPUTS;
  bool output = ro && k >= 0 && k < SK_OP_MAX_OUTPUTS;
  switch (ps->buffer) {
    case SK_PBUF_VALUE: return tensor ? &rt->values[t] : NULL;
    case SK_PBUF_GRAD: return tensor ? &rt->grads[t] : NULL;
    case SK_PBUF_SHARD: return tensor ? &rt->shards[t].data : NULL;
    case SK_PBUF_SHARD_GRAD: return tensor ? &rt->shards[t].grad : NULL;
    case SK_PBUF_STATE: return tensor && (k == 0 || k == 1) ? (k ? &rt->state1[t] : &rt->state0[t]) : NULL;
    case SK_PBUF_ACC: return tensor ? &rt->acc[t] : NULL;
    case SK_PBUF_SCRATCH: return k >= 0 && k < SK_OP_MAX_INPUTS ? &rt->scratch[k] : NULL;
    case SK_PBUF_WIRE: return &rt->wire_buf;
    case SK_PBUF_SHADOWS: return &rt->shadows;
    case SK_PBUF_RS_SHADOWS: return &rt->rs_shadows;
    case SK_PBUF_FEED:
      return tensor && rt->feeds && ps->micro >= 0 && ps->micro < rt->plan->micro
                 ? &rt->feeds[(size_t)ps->micro * (size_t)rt->g->ntensors + (size_t)t]
                 : NULL;
    case SK_PBUF_KERNEL_IN: return input ? &ro->kin[k] : NULL;
    case SK_PBUF_KERNEL_DIN: return input ? &ro->dkin[k] : NULL;
    case SK_PBUF_KERNEL_OUT: return output ? &ro->kout[k] : NULL;
    case SK_PBUF_KERNEL_DOUT: return output ? &ro->dkout[k] : NULL;
    case SK_PBUF_PRE_RS: return ro ? &ro->pre_rs : NULL;
    case SK_PBUF_DY_FULL: return ro ? &ro->dy_full : NULL;
    default: return NULL;
  }
}

/* The program's create section, step by step: each buffer its bytes, counted as its kind. */
static sk_result sk__rt_create_buffers(sk_runtime *rt, sk_error *err) {
  const sk_program *pg = &rt->plan->programs[rt->stage];
  for (int i = 0; i < pg->ncreate; i++) {
    const sk_program_step *ps = &pg->create[i];
    void **at = sk__rt_create_ref(rt, ps);
    if (!at || *at)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: create step #c%d: its buffer has no place or is taken", i);
    if (!(*at = sk__rt_alloc(rt, (int)sk_program_memory_kind(rt->plan, ps), (size_t)sk_program_bytes(ps, rt->cdt)))) {
      const char *name = ps->tensor >= 0 ? rt->g->tensors[ps->tensor].name : ps->op >= 0 ? rt->g->ops[ps->op].name : "";
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for create step #c%d (%s%s%s)", i, name,
                      *name ? "'s " : "", sk_parallel_buffer_name((sk_program_buffer)ps->buffer));
    }
  }
  return SK_OK;
}

/* The elements the create section gives `buffer` (one without tensor or operator: the wire
   and the shadow blocks); 0 when it lists none. */
static int64_t sk__rt_created_count(const sk_runtime *rt, sk_program_buffer buffer) {
  const sk_program *pg = &rt->plan->programs[rt->stage];
  for (int i = 0; i < pg->ncreate; i++)
    if (pg->create[i].buffer == (int)buffer) return pg->create[i].count;
  return 0;
}

/* What the buffers are to the kernels: each tensor's view, each shard's place in its slice. */
static sk_result sk__rt_create_views(sk_runtime *rt, sk_error *err) {
  for (int t = 0; t < rt->g->ntensors; t++) {
    const sk_parallel_tensor *pt = &rt->plan->tensors[t];
    sk__rt_shard *sh = &rt->shards[t];
    if (sh->data) {
      sk_opt_shard os;
      sk_result r = sk_opt_shard_of(&pt->layout, rt->g->tensors[t].dtype, &rt->plan->desc.hsdp, rt->rank, &os, err);
      if (r) return r;
      sh->count = sk_parallel_slice_count(rt->plan, t) / pt->opt_size, sh->index = os.index;
    }
    sk__rt_view(&rt->args[t], &pt->layout, sk__rt_dtype(rt, t), rt->values[t]);
  }
  return SK_OK;
}

/* ---- groups and moves ----------------------------------------------------------------------- */

/* One communicator per plan group id, made at create in id order by every device of the
   stage (collective): the world, the stage and the links are the ones the runtime has; a mesh's
   and a shard's are split from the stage. Every collective step names its id (sk_program.h). */
static sk_result sk__rt_make_group(sk_runtime *rt, int id, int *ranks, sk_error *err) {
  const sk_plan_group *g = &rt->plan->groups[id];
  sk_comm *fixed[] = {rt->world ? rt->world : rt->comm, rt->comm, rt->fwd_link, rt->bwd_link};
  if (g->kind <= SK_PGROUP_LINK_BWD) return rt->gcomm[id] = fixed[g->kind], SK_OK;
  sk_result r;
  if (g->kind == SK_PGROUP_MESH) r = sk_comm_split_mesh(rt->comm, &g->mesh, g->axes, &rt->gcomm[id], NULL);
  else {
    int ng = 0, nm = 0;
    const sk_layout *l = &rt->plan->tensors[g->tensor].layout;
    r = sk_opt_shard_groups(l, rt->g->tensors[g->tensor].dtype, &rt->plan->desc.hsdp, rt->rank, ranks, &ng,
                            ranks + SK_MAX_DEVICES, &nm, SK_MAX_DEVICES, err);
    if (!r && (ng < 1 || nm < 1)) /* the plan and the rule disagree: never for one compiled plan */
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: parameter '%s' has no shard group", rt->g->tensors[g->tensor].name);
    if (r) return r;
    r = sk_comm_split(rt->comm, g->kind == SK_PGROUP_OPT_GATHER ? ranks[0] : ranks[SK_MAX_DEVICES], rt->rank, &rt->gcomm[id], NULL);
  }
  if (r) return sk__fail(err, r, "runtime: creating group g%d: %s", id, sk_comm_error_message(rt->comm));
  rt->gown[id] = true;
  return SK_OK;
}

static sk_result sk__rt_make_groups(sk_runtime *rt, sk_error *err) {
  int n = rt->plan->ngroups;
  rt->gcomm = (sk_comm **)sk__rt_table(rt, (size_t)n + 1, sizeof(sk_comm *));
  rt->gown = (bool *)sk__rt_table(rt, (size_t)n + 1, sizeof(bool));
  int *ranks = (int *)sk__rt_table(rt, 2 * SK_MAX_DEVICES, sizeof(int));
  sk_result r = rt->gcomm && rt->gown && ranks ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for groups");
  for (int id = 0; id < n && !r; id++) r = sk__rt_make_group(rt, id, ranks, err);
  sk__rt_counted_free(rt, ranks);
  return r;
}

/* The communicator of the plan's group *want. */
static sk_result sk__rt_group(sk_runtime *rt, const sk_plan_group *want, sk_comm **out, sk_error *err) {
  int id = sk_parallel_find_group(rt->plan, want);
  if (id == -2) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: looking up a group: out of memory");
  if (id < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: the plan names no such group (kind %d)", (int)want->kind);
  *out = rt->gcomm[id];
  return SK_OK;
}

/* The communicator along `axes` of `mesh`. */
static sk_result sk__rt_group_of(sk_runtime *rt, const sk_mesh *mesh, uint32_t axes, sk_comm **out, sk_error *err) {
  sk_plan_group want;
  memset(&want, 0, sizeof want);
  want.kind = SK_PGROUP_MESH, want.mesh = *mesh, want.axes = axes, want.tensor = -1;
  return sk__rt_group(rt, &want, out, err);
}

/* A communicator's plan group id (-1: none of the plan's). */
static int sk__rt_group_id(const sk_runtime *rt, const sk_comm *c) {
  for (int id = 0; c && id < rt->plan->ngroups; id++)
    if (rt->gcomm[id] == c) return id;
  return -1;
}

/* A move's group communicators are the plan's (the compiler numbered each move's collective
   groups), so that the runtime runs every call on a communicator of its group table; NULL when
   the plan has no such group (the executor's creation then fails naming the axes). */
static sk_comm *sk__rt_move_group(void *ctx, const sk_mesh *mesh, uint32_t axes) {
  sk_comm *c = NULL;
  return sk__rt_group_of((sk_runtime *)ctx, mesh, axes, &c, NULL) ? NULL : c;
}

static sk_result sk__rt_move(sk_runtime *rt, const sk_layout *from, const sk_layout *to, sk_dtype dt,
                             sk_redist_executor **ex, sk_error *err) {
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = *from, rd.to = *to, rd.dtype = dt, rd.allocator = rt->counted;
  rd.group = sk__rt_move_group, rd.group_ctx = rt;
  rt->kind = SK__RT_HOST;
  return sk_redist_executor_create(rt->comm, &rd, ex, err);
}

/* What this device sends in a move. */
static uint64_t sk__rt_plan_sends(const sk_redist_executor *ex, int rank) {
  uint64_t recv = 0, send = 0;
  const sk_redist_plan *p = ex ? sk_redist_executor_plan(ex) : NULL;
  if (!p || sk_redist_plan_bytes(p, -1, rank, &recv, &send, NULL)) return 0;
  return send;
}


static sk_result sk__rt_convert(sk_dtype sdt, const void *src, sk_dtype ddt, void *dst, size_t n, sk_error *err) {
  if (sk_exec_convert(sdt, src, ddt, dst, n)) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "cannot convert %s data into a %s tensor", sk_dtype_name(sdt),
                  sk_dtype_name(ddt));
}

/* ---- what a step does, counted ------------------------------------------------------------ */

static void sk__rt_count_comm(sk_runtime *rt, sk_coll_kind kind, sk_comm *group, uint64_t bytes) {
  if (!rt->counting) return;
  sk_comm *c = group ? group : rt->comm; /* a redistribution runs over the stage */
  int size = sk_comm_size(c), id = sk__rt_group_id(rt, c);
  sk_runtime_stats *st = &rt->stats;
  int i = 0;
  while (i < st->nrows && !(st->rows[i].kind == kind && st->rows[i].group_id == id)) i++;
  if (i == st->nrows && st->nrows < SK_RUNTIME_COMM_ROWS)
    st->rows[st->nrows++].kind = kind, st->rows[i].group = size, st->rows[i].group_id = id;
  if (i == SK_RUNTIME_COMM_ROWS) i--;
  st->rows[i].calls++, st->rows[i].bytes += bytes;
}


/* Wall seconds (C11's clock: the header needs no POSIX). */
static double sk__rt_now_s(void) {
  struct timespec ts;
  if (!timespec_get(&ts, TIME_UTC)) return 0;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A kernel that started at t0 (sk__rt_now_s): its FLOPs, its wall time, and its modelled time.
   zero_bubble_v's B and W each count half a backward (a MatMul's two GEMMs: one each). */
static void sk__rt_count_compute(sk_runtime *rt, const sk_graph_op *op, const sk_exec_arg *in, const sk_exec_arg *out,
                                 bool backward, double t0) {
  if (!rt->counting) return;
  double f = sk_exec_flops(op, in, out, backward) * (backward && rt->grads_only ? 0.5 : 1);
  rt->stats.flops += f, rt->stats.busy_s += sk__rt_now_s() - t0;
  double speed = rt->plan->desc.cluster.device_flops;
  if (speed <= 0) return;
  rt->stats.compute_us += f / speed * 1e6;
  sk_comm_compute(rt->comm, f / speed * 1e6);
}

SK_EXTERN_C_END
#endif
