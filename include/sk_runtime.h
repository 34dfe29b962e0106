/* sk_runtime.h -- AutoParallel's runtime: runs a compiled program (sk_parallel.h) on every
   device of a world, forward, backward, optimizer, and evaluates.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_RUNTIME_IMPL + the modules it includes)
                             #include "sk_runtime.h"
   Needs only libc and libm, and a backend (threads, MPI: the same program on either).

   HOW IT RUNS
     Every device calls sk_runtime_create with its communicator (collective: it creates the
     groups, the redistribution executors and the fusion scheduler the program needs), then per
     step sk_runtime_feed for each network input (the GLOBAL batch: each device keeps its slice),
     then sk_runtime_step (collective). The program's steps run in order: moves through
     sk_redist.h, operators through sk_exec.h, collectives through sk_comm.h; the Mirror
     AllReduces of parameters read once go to the fusion scheduler (sk_fusion.h), and the update
     waits for them. Initial parameters are the single-device trainer's (sk_graph_init_params
     with the same seed), each device keeping its slice, so N devices start from the model one
     device starts from; a constant (a number operand) is whole on every device reading it. A
     frozen parameter (requires_grad false) has no gradient, Mirror or optimizer state and is
     never updated; the local norms leave it out.

   THE PLAN'S KNOBS (sk_parallel_desc; docs/auto-parallel.md)
     comm_fusion          the fusion scheduler's configs (closed: nothing fused; size and auto
                          modes count MB as MindSpore does)
     gradients_mean, no_loss_repeated_mean
                          the loss's gradient is seeded with plan->loss_grad_scale and each
                          Mirror multiplies by mirror_scale[k] (folded into its 1/replication)
     fp32_communication, no_gradient_fp32_sync
                          f16 / bf16 runs: what travels in 16 bits (DTYPES below)
     print_local_norm, device_local_norm, dump_local_norm
                          after the Mirrors and before the update, every device's gradient-slice
                          norms, written by device 0 as "step device parameter norm", steps
                          counted from 1 (the optimizer's step); under a pipeline each device
                          reports the parameters its stage holds, and device 0 is the world's
     transformer_opt      grad_computation_allreduce_overlap: fused Mirrors launch as their
                          gradient is ready (else, the default, after the backward in
                          registration order); enable_communication_fusion: an operator's
                          BackwardComm AllReduces on one group go as one packed AllReduce

   DTYPES: f32 and f64 compute and store in that dtype; f16 and bf16 STORE in that format and
     compute in f32, as the single-device trainer does: inputs, parameters and every operator's
     output are rounded to the storage format once written (an output summed by its forward
     collective after the sum). On the wire, f16 / bf16 runs send the reducing collectives
     (forward AllReduce and ReduceScatter, BackwardComm) in the storage format, converted
     through a 16-bit buffer, unless fp32_communication; the gradient synchronisation -- the
     Mirrors, and under optimizer parallel the sharded gradients' ReduceScatters and partial
     Mirrors -- in f32 (MindSpore's gradient_fp32_sync) unless no_gradient_fp32_sync without
     fp32_communication. Moves and AllGathers carry compute values.

   MEMORY: every buffer the runtime allocates goes through desc.alloc and is counted by kind
     (sk_runtime_memory); the redistribution executors and the fusion scheduler allocate
     through it too and are counted as communication buffers, as are the 16-bit wire buffer and
     gradient shadows (the fused Mirrors', the sharded gradients'), the packed BackwardComm
     buffer and the local norms, all taken at create. An output out_strategy moves (MoveOut)
     also has a buffer in its rule's layout, counted as activations (under a pipeline, one per
     micro-batch slot), and one for its gradient there, counted as gradients. Gradients: every tensor's that has one
     (under a pipeline the stage's parameters'; the activations' live in the micro-batch slots),
     and a scratch per input slot k for a second gradient summed into the first (the kernels
     overwrite): as long as the largest one slot k's backward steps write on this device, of a
     tensor several operators read or, under a pipeline of several micro-batches, a parameter.

   RECOMPUTATION: a tensor the plan recomputes (sk_parallel_recomputed: an output of an operator
     flagged `recompute`) has no buffer between steps without a pipeline: its operator's Forward
     allocates it, it is freed after its last forward use, and before a backward step reads it
     its operator's forward steps run again (the same dropout mask), freed after its last use;
     activations then count it only while held. Under a pipeline the chunk's slot frees it after
     the chunk's forward and recomputes it before the chunk's backward. sk_runtime_gather
     refuses it (not held between steps).

   ERRORS: a failing step returns its sk_result with a message naming the step, the operator and
     the tensor; collectives that fail take the world down (sk_comm.h's fault rules), so a
     device's failure ends every device's step with an error, never a hang.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_RUNTIME_IMPL)
#define SK_RUNTIME_IMPL
#endif
#ifndef SK_RUNTIME_H
#define SK_RUNTIME_H

#include "sk_comm.h"
#include "sk_core.h"
#include "sk_exec.h"
#include "sk_fusion.h"
#include "sk_kernels.h"
#include "sk_optim.h"
#include "sk_parallel.h"
#include "sk_redist.h"
#include "sk_redundancy.h"

SK_EXTERN_C_BEGIN

/* Zero-initialise; zero fields take the defaults below. */
typedef struct sk_runtime_desc {
  sk_dtype dtype;               /* f32 (zero) or f64 */
  sk_optim_desc optim;          /* zero: SGD with MindSpore's defaults */
  uint64_t seed;                /* initial parameters and dropout masks (zero: 1) */
  const sk_kernel_ctx *kernels; /* the GEMM hook (NULL: the built-in GEMM) */
  sk_allocator alloc;           /* zero: the C library */
  double device_flops;          /* the modelled device's FLOP/s: each operator reports its FLOPs' time to
                                   the world's virtual clock (sk_comm_compute); 0: nothing reported */
  bool seed_by_rank;            /* device r (the world's rank, under a pipeline too) draws its initial
                                   model from seed + r: replicas start apart, as before MindSpore's
                                   parameter_broadcast */
} sk_runtime_desc;

/* Bytes a device holds, by kind: now, and the most since create returned (peak_*: per kind;
   peak: of the sum of the first five). Under optimizer parallel, parameters are the shards
   outside a step and the gathered slices count as parameters while they are held.
   Communication is the runtime's own buffers on the wire (a Send's staging copy, 16-bit wire
   copies); host is the library's bookkeeping (redistribution plans and executors, fusion
   schedulers and their packing, feed staging, evaluation and gather temporaries, local norms),
   kept out of peak: it depends on the rank and the modules' internals, not on the plan. */
typedef struct sk_runtime_memory {
  uint64_t parameters, gradients, optimizer_state, activations, communication, host;
  uint64_t peak_parameters, peak_gradients, peak_optimizer_state, peak_activations, peak_communication, peak_host, peak;
} sk_runtime_memory;

/* What training steps did on this device, summed since create: FLOPs (a MatMul's 2mnk, and
   twice that backward; one per output element for the others, two backward) and the
   communication per collective kind and group size (bytes: each call's buffer on the wire, as
   nccl-tests counts its size, 16-bit where the wire is; a fusion bucket or a packed BackwardComm
   is one call; kind SK_COLL_NONE: a redistribution's moves, bytes: what this device sends). The
   local norms' gather is not counted. */
#define SK_RUNTIME_COMM_ROWS 32
typedef struct sk_runtime_comm_row {
  sk_coll_kind kind;
  int group;    /* its size */
  int group_id; /* the plan group it ran on (plan.groups; a pipeline's Send on its link's) */
  uint64_t calls, bytes;
} sk_runtime_comm_row;

typedef struct sk_runtime_stats {
  int64_t steps;
  double flops;
  /* Time summed over the steps: step_s their wall time, busy_s the part inside operator kernels
     (1 - busy_s / step_s: the idle share, a pipeline's bubble measured); under a link model,
     clock_us their span on this device's virtual clock and compute_us the part its FLOPs took
     (the bubble modelled). */
  double step_s, busy_s, clock_us, compute_us;
  int nrows; /* one per (kind, plan group); rows past SK_RUNTIME_COMM_ROWS are summed into the last */
  sk_runtime_comm_row rows[SK_RUNTIME_COMM_ROWS];
} sk_runtime_stats;

typedef struct sk_runtime sk_runtime;

SK_API sk_result sk_runtime_create(sk_comm *comm, const sk_parallel_plan *plan, const sk_runtime_desc *desc,
                                   sk_runtime **out, sk_error *err);
SK_API void sk_runtime_destroy(sk_runtime *rt);
/* Input `input` from the whole (global) tensor: n elements of dtype dt; this device keeps its
   slice (floats convert to the run's dtype, integers between i32 and i64). */
SK_API sk_result sk_runtime_feed(sk_runtime *rt, int input, sk_dtype dt, const void *global, size_t n, sk_error *err);
/* One training step (collective); *loss (may be NULL): the network's loss, the same on every device. */
SK_API sk_result sk_runtime_step(sk_runtime *rt, double *loss, sk_error *err);
/* Inference-mode forward over the fed inputs (collective): rows whose argmax(logits) is the label. */
SK_API sk_result sk_runtime_evaluate(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err);
/* The whole tensor on every device (collective): `full` holds its global element count in the
   run's dtype (floats) or the graph's (integers). */
SK_API sk_result sk_runtime_gather(sk_runtime *rt, int tensor, void *full, sk_error *err);
SK_API void sk_runtime_memory_get(const sk_runtime *rt, sk_runtime_memory *mem);
/* MindSpore's parameter_broadcast(net, layout, cur_rank, initial_rank) on every parameter
   (collective; sk_redundancy.h): each replica takes its redundancy group owner's values (a
   sharded parameter: per shard). cur_rank -1: this device's rank (plus initial_rank);
   initial_rank -1: MindSpore's default. Under a pipeline it is collective over the device's
   stage and broadcasts the stage's parameters among its devices, as MindSpore's does
   (mindspore/python/mindspore/parallel/parameter_broadcast.py, parameter_broadcast: each stage
   calls it with the redundancy groups of its own layouts and its initial_rank, "start rank id
   for each pipeline", which _check_rank in parallel/_utils.py refuses unless a multiple of the
   stage's device count): cur_rank is the world rank, initial_rank the stage's first
   (cur_rank - initial_rank is the device's place in its stage; anything else is refused on
   every device of the stage); cur_rank -1 with initial_rank -1: the world rank and its stage's
   first, as MindSpore's default initial rank (rank / P * P, P the stage's devices) gives. */
SK_API sk_result sk_runtime_parameter_broadcast(sk_runtime *rt, int cur_rank, int initial_rank, sk_error *err);
SK_API int64_t sk_runtime_steps(const sk_runtime *rt);
SK_API void sk_runtime_stats_get(const sk_runtime *rt, sk_runtime_stats *stats);

/* ==== checkpoints (sk_ckpt.h, docs/checkpoints.md): what resumes training exactly ============
   A device's slice of a parameter and of its optimizer states, read and written in place
   between steps, and the step count (the optimizer's step and the dropout masks follow it).
   Under gradient accumulation only at the end of a window (steps a multiple of
   grad_accumulation_step): the running sums are not part of the state. */
typedef enum sk_runtime_slice_kind {
  SK_RUNTIME_VALUES = 0, /* the parameter */
  SK_RUNTIME_STATE0,     /* the optimizer's first state (momentum, Adam's m) */
  SK_RUNTIME_STATE1      /* its second (Adam's v) */
} sk_runtime_slice_kind;

typedef struct sk_runtime_slice {
  void *data;     /* NULL: this device keeps no such slice (a state the optimizer has not, a
                     parameter of another pipeline stage) */
  sk_dtype dtype; /* the run's compute dtype: f32 (also for f16 / bf16 runs) or f64 */
  int64_t count;  /* elements, row-major inside box */
  sk_slice box;   /* global coordinates: the layout's slice on this device, dim 0 narrowed to
                     its optimizer shard's rows when the parameter is sharded */
} sk_runtime_slice;

/* Parameter `tensor`'s slice of `kind` on this device. SK_ERR_INVALID_ARGUMENT for a tensor that
   is not a parameter; SK_ERR_INVALID_USAGE inside an accumulation window. */
SK_API sk_result sk_runtime_param_slice(sk_runtime *rt, int tensor, sk_runtime_slice_kind kind, sk_runtime_slice *out,
                                        sk_error *err);
/* Sets the step count (a loaded checkpoint's): the next step is step `steps` + 1. */
SK_API sk_result sk_runtime_set_steps(sk_runtime *rt, int64_t steps, sk_error *err);
/* ==== end of checkpoints ================================================================== */

SK_EXTERN_C_END
#endif /* SK_RUNTIME_H */

#if defined(SK_RUNTIME_IMPL) && !defined(SK_RUNTIME_IMPL_DONE)
#define SK_RUNTIME_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

SK_EXTERN_C_BEGIN

/* What a counted byte holds. HOST is the library's bookkeeping (redistribution plans and
   executors, fusion schedulers, feed staging, evaluation and gather temporaries, the local
   norms): it depends on the rank and on the modules' internals, so it stays out of peak, which
   sums the kinds the plan's buffers fill. */
enum { SK__RT_PARAMS = 0, SK__RT_GRADS, SK__RT_STATE, SK__RT_ACTS, SK__RT_COMM, SK__RT_HOST, SK__RT_KINDS };

/* What operator o needs on this device beyond its tensors' buffers. */
typedef struct sk__rt_op {
  void *kin[SK_OP_MAX_INPUTS];   /* a moved input in the kernel's layout */
  void *dkin[SK_OP_MAX_INPUTS];  /* its gradient there */
  sk_exec_arg karg[SK_OP_MAX_INPUTS];
  void *pre_rs, *dy_full;        /* output 0 before a forward ReduceScatter, its gathered gradient */
  int64_t pre_rs_count;
  int rs_group;                  /* the ReduceScatter's group size */
  sk_redist_executor *move[SK_OP_MAX_INPUTS], *move_back[SK_OP_MAX_INPUTS];
  sk_comm *fwd, *bwd[SK_OP_MAX_INPUTS], *mirror[SK_OP_MAX_INPUTS];
  int fusion_handle[SK_OP_MAX_INPUTS]; /* -1: the Mirror runs at its step */
  void *shadow[SK_OP_MAX_INPUTS];      /* a fused Mirror's 16-bit copy of the gradient (16-bit sync) */
  int bwd_lead[SK_OP_MAX_INPUTS];      /* the input whose BackwardComm step reduces input k's gradient */
  unsigned bwd_members[SK_OP_MAX_INPUTS]; /* a leading input: the inputs its one AllReduce carries */
  uint64_t move_bytes[SK_OP_MAX_INPUTS], move_back_bytes[SK_OP_MAX_INPUTS]; /* this device sends */
  int last_step[SK_OP_MAX_INPUTS];     /* the last backward step touching input k's gradient */
  void *dx[SK_OP_MAX_INPUTS];          /* where this step's backward wrote input k's gradient */
  /* an output out_strategy asks for in another layout (plan out_moved[k]): the kernel writes it
     in the rule's layout into kout[k], an OUT_MOVE takes it to the tensor; its gradient comes
     back into dkout[k] (zeros when none reached the tensor) */
  void *kout[SK_OP_MAX_OUTPUTS], *dkout[SK_OP_MAX_OUTPUTS];
  sk_redist_executor *out_move[SK_OP_MAX_OUTPUTS], *out_move_back[SK_OP_MAX_OUTPUTS];
  uint64_t out_move_bytes[SK_OP_MAX_OUTPUTS], out_move_back_bytes[SK_OP_MAX_OUTPUTS];
  bool add[SK_OP_MAX_INPUTS];          /* ... to be summed into the tensor's gradient */
  sk_exec_facts facts;
} sk__rt_op;

/* A parameter optimizer parallel shards (sk_opt_shard.h): this device keeps `count` elements,
   chunk `index` of its model-parallel slice's dim 0. */
typedef struct sk__rt_shard {
  void *data;          /* the shard (parameters) */
  void *grad;          /* its gradient after the ReduceScatter (gradients) */
  int64_t count;
  int index;
  bool held;           /* the gathered slice is allocated (values[t]) */
  sk_comm *gather;     /* the AllGather / ReduceScatter group */
  sk_comm *mirror;     /* the rest of the replicas (NULL: none) */
  int rs_handle;       /* its ReduceScatter in the fusion scheduler */
  void *wire_grad;     /* 16-bit sync: the gradient's 16-bit shadow (the ReduceScatter's input), */
  void *wire_shard;    /* ... and its shard's (its output, then the partial Mirror's buffer) */
  int fusion;          /* the fusion id of its first reader */
  int micros;          /* pipeline: the micro-batches whose gradient reached its ReduceScatter step */
} sk__rt_shard;


struct sk_runtime {
  sk_comm *comm;
  int rank;
  const sk_parallel_plan *plan;
  const sk_graph *g;
  sk_runtime_desc desc;
  sk_optim_desc optim;
  sk_dtype cdt;   /* compute dtype: f64 for f64, f32 otherwise */
  sk_dtype store; /* storage format of float tensors */
  int64_t step;
  void **values, **grads, **state0, **state1;
  sk__rt_shard *shards; /* per tensor; data NULL: not sharded */
  bool *written;
  int *readers;       /* how many operators read each tensor */
  sk_exec_arg *args;  /* per tensor: its slice as sk_exec sees it */
  sk__rt_op *ops;
  sk_comm **gcomm;    /* [plan->ngroups]: the communicator of each plan group id (sk__rt_make_groups) */
  bool *gown;         /* ... split here (the others are comm, world and the links) */
  sk_fusion *fusion;
  int nfused;         /* Mirrors registered with the scheduler: handles 0 .. nfused - 1 */
  sk_fusion *rs_fusion; /* the sharded parameters' gradient ReduceScatters (handles 0 .. nrs - 1) */
  int nrs;
  int accum;          /* grad_accumulation_step (1: none) */
  void **acc;         /* per parameter: its gradient accumulated over the micro-steps (NULL: none) */
  bool overlap;       /* transformer_opt.grad_computation_allreduce_overlap */
  sk_dtype wire;      /* forward AllReduce / ReduceScatter and BackwardComm on the wire */
  sk_dtype mirror_wire; /* the gradient sync on the wire: Mirrors, sharded ReduceScatters, partial Mirrors */
  void *wire_buf;     /* 16-bit copies of reduced buffers, and packed BackwardComm gradients */
  void *shadows;      /* every fused 16-bit shadow, consecutive in registration order */
  void *rs_shadows;   /* the sharded gradients' 16-bit shadows (sk__rt_shard.wire_*), one block */
  int nnorms;         /* local norms: values per device (0: none reported) */
  double *norms, *all_norms; /* this device's; every device's (device 0) */
  FILE *norm_file;    /* dump_local_norm (device 0) */
  void *scratch[SK_OP_MAX_INPUTS]; /* an input's gradient to be summed into one already written */
  int kind;           /* what the next allocation is counted as */
  uint64_t bytes[SK__RT_KINDS], peak[SK__RT_KINDS], peak_total;
  bool counting;           /* inside a training step: the stats count */
  sk_runtime_stats stats;
  sk_allocator counted; /* desc.alloc, counted: handed to the modules that allocate for us */
  /* Pipeline parallel (plan->vstage; "pipeline" below): comm is then this stage's devices */
  sk_comm *world;       /* the communicator create was given: every stage */
  sk_comm *fwd_link, *bwd_link; /* the world twice: activations on one, gradients on the other, so the
                                   two streams between a pair of stages never take each other's messages */
  int stage;
  int *owner;           /* [ntensors] the chunk (virtual stage) whose slot holds a tensor here; -1: none */
  struct sk__rt_slot *slots; /* [micro * nvstages]: one micro-batch's activations of one chunk */
  void **feeds;         /* [micro * ntensors] each micro-batch's slice of every input read here */
  struct sk__rt_send *sends; /* activations and gradients on their way to another stage */
  int nsends, sends_cap;
  int grads_only;       /* zero_bubble_v: 1 the inputs' gradients (B), 2 the parameters' (W); 0 both */
  int micro;            /* the micro-batch bound (sk__rt_pipe_bind) */
  int bound;            /* the training step's: the micro-batch the tensors point at, -1 none */
  int nforward;         /* the program's forward steps: those before its first backward step */
  bool *recomputed; /* without a pipeline: per tensor, sk_parallel_recomputed (its buffer lives within a step) */
};

/* Pipeline parallel, defined with the steps below. */
static sk_result sk__rt_pipe_open(sk_runtime *rt, sk_comm *world, sk_error *err);
static sk_result sk__rt_settle(sk_runtime *rt, sk_result r, sk_error *err);
static sk_result sk__rt_pipe_alloc_feeds(sk_runtime *rt, sk_error *err);
static sk_result sk__rt_pipe_feed(sk_runtime *rt, int input, sk_dtype dt, const void *global, sk_error *err);
static void sk__rt_pipe_unpoint(sk_runtime *rt);
static void sk__rt_pipe_close(sk_runtime *rt);
static bool sk__rt_is_forward(sk_parallel_step_kind k);

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
  sk__rt_block *b = (sk__rt_block *)(rt->desc.alloc.alloc ? rt->desc.alloc.alloc(rt->desc.alloc.user, n, 64)
                                                           : aligned_alloc(64, n));
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
  if (rt->desc.alloc.free) rt->desc.alloc.free(rt->desc.alloc.user, b);
  else free(b);
}

static void *sk__rt_alloc(sk_runtime *rt, int kind, size_t bytes) {
  rt->kind = kind;
  return sk__rt_counted_alloc(rt, bytes ? bytes : 1, 64);
}

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

/* A sharded parameter's shard, its gradient and its place in the model-parallel slice; the
   slice itself (values[t]) exists only while gathered. */
static sk_result sk__rt_alloc_shard(sk_runtime *rt, int t, sk_error *err) {
  const sk_parallel_tensor *pt = &rt->plan->tensors[t];
  sk__rt_shard *sh = &rt->shards[t];
  sk_opt_shard os;
  sk_result r = sk_opt_shard_of(&pt->layout, rt->g->tensors[t].dtype, &rt->plan->desc.hsdp, rt->rank, &os, err);
  if (r) return r;
  sh->count = sk_parallel_slice_count(rt->plan, t) / pt->opt_size, sh->index = os.index;
  size_t b = (size_t)sh->count * sk_dtype_size(rt->cdt);
  sh->data = sk__rt_alloc(rt, SK__RT_PARAMS, b);
  if (pt->needs_grad) sh->grad = sk__rt_alloc(rt, SK__RT_GRADS, b);
  if (!sh->data || (pt->needs_grad && !sh->grad))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for the shard of '%s'", rt->g->tensors[t].name);
  return SK_OK;
}

/* Whether an operator of this device's pipeline stage reads tensor t (always, without a pipeline). */
static bool sk__rt_read_here(const sk_runtime *rt, int t) {
  if (!rt->world) return true;
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++)
      if (rt->g->ops[o].inputs[k] == t && sk_parallel_op_on_stage(rt->plan, o, rt->stage)) return true;
  return false;
}

static sk_result sk__rt_alloc_tensors(sk_runtime *rt, sk_error *err) {
  const sk_graph *g = rt->g;
  int nstates = sk_optim_nstates(&rt->optim);
  for (int t = 0; t < g->ntensors; t++) {
    const sk_parallel_tensor *pt = &rt->plan->tensors[t];
    bool param = g->tensors[t].role == SK_TENSOR_PARAM, sharded = pt->opt_size > 0;
    bool kept = param || g->tensors[t].role == SK_TENSOR_CONST, trains = sk_graph_trainable(g, t);
    /* pipeline: a stage keeps its parameters and constants; activations live in slots, inputs in feeds */
    if (rt->world && (!kept || !sk__rt_read_here(rt, t))) {
      sk__rt_view(&rt->args[t], &pt->layout, sk__rt_dtype(rt, t), NULL);
      continue;
    }
    size_t b = sk__rt_bytes(rt, t), bs = b; /* bs: what the optimizer keeps per state */
    if (sharded) {
      sk_result r = sk__rt_alloc_shard(rt, t, err);
      if (r) return r;
      bs = (size_t)rt->shards[t].count * sk_dtype_size(rt->cdt);
    } else if (!rt->recomputed[t]) { /* a recomputed tensor's buffer exists only while used */
      rt->values[t] = sk__rt_alloc(rt, param ? SK__RT_PARAMS : SK__RT_ACTS, b);
    }
    if (pt->needs_grad) rt->grads[t] = sk__rt_alloc(rt, SK__RT_GRADS, b);
    if (trains && nstates > 0) rt->state0[t] = sk__rt_alloc(rt, SK__RT_STATE, bs); /* a frozen parameter has none */
    if (trains && nstates > 1) rt->state1[t] = sk__rt_alloc(rt, SK__RT_STATE, bs);
    if ((!sharded && !rt->recomputed[t] && !rt->values[t]) || (pt->needs_grad && !rt->grads[t]) ||
        (trains && nstates > 0 && !rt->state0[t]) || (trains && nstates > 1 && !rt->state1[t]))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for tensor '%s'", g->tensors[t].name);
    sk__rt_view(&rt->args[t], &pt->layout, sk__rt_dtype(rt, t), rt->values[t]);
  }
  return SK_OK;
}

/* Gradient accumulation: a sum per parameter with a gradient (a level2 shard's size, else its
   slice's). */
static sk_result sk__rt_alloc_acc(sk_runtime *rt, sk_error *err) {
  if (rt->accum == 1) return SK_OK;
  for (int t = 0; t < rt->g->ntensors; t++) {
    if (rt->g->tensors[t].role != SK_TENSOR_PARAM || !rt->grads[t]) continue;
    const sk__rt_shard *sh = &rt->shards[t];
    bool sharded_sum = sh->data && rt->plan->desc.hsdp.level == SK_HSDP_LEVEL2;
    size_t b = sharded_sum ? (size_t)sh->count * sk_dtype_size(rt->cdt) : sk__rt_bytes(rt, t);
    if (!(rt->acc[t] = sk__rt_alloc(rt, SK__RT_GRADS, b)))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory accumulating '%s'", rt->g->tensors[t].name);
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
  if (g->kind == SK_PGROUP_MESH) r = sk_comm_split_mesh(rt->comm, &g->mesh, g->axes, &rt->gcomm[id]);
  else {
    int ng = 0, nm = 0;
    const sk_layout *l = &rt->plan->tensors[g->tensor].layout;
    r = sk_opt_shard_groups(l, rt->g->tensors[g->tensor].dtype, &rt->plan->desc.hsdp, rt->rank, ranks, &ng,
                            ranks + SK_MAX_DEVICES, &nm, SK_MAX_DEVICES, err);
    if (!r && (ng < 1 || nm < 1)) /* the plan and the rule disagree: never for one compiled plan */
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: parameter '%s' has no shard group", rt->g->tensors[g->tensor].name);
    if (r) return r;
    r = sk_comm_split(rt->comm, g->kind == SK_PGROUP_OPT_GATHER ? ranks[0] : ranks[SK_MAX_DEVICES], rt->rank, &rt->gcomm[id]);
  }
  if (r) return sk__fail(err, r, "runtime: creating group g%d: %s", id, sk_comm_error_message(rt->comm));
  rt->gown[id] = true;
  return SK_OK;
}

static sk_result sk__rt_make_groups(sk_runtime *rt, sk_error *err) {
  int n = rt->plan->ngroups;
  rt->gcomm = (sk_comm **)calloc((size_t)n + 1, sizeof(sk_comm *)), rt->gown = (bool *)calloc((size_t)n + 1, sizeof(bool));
  int *ranks = (int *)malloc(2 * sizeof(int) * SK_MAX_DEVICES);
  sk_result r = rt->gcomm && rt->gown && ranks ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for groups");
  for (int id = 0; id < n && !r; id++) r = sk__rt_make_group(rt, id, ranks, err);
  free(ranks);
  return r;
}

/* The communicator of the plan's group *want. */
static sk_result sk__rt_group(sk_runtime *rt, const sk_plan_group *want, sk_comm **out, sk_error *err) {
  int id = sk_parallel_find_group(rt->plan, want);
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

static sk_result sk__rt_move(sk_runtime *rt, const sk_layout *from, const sk_layout *to, sk_dtype dt,
                             sk_redist_executor **ex, sk_error *err) {
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = *from, rd.to = *to, rd.dtype = dt, rd.allocator = rt->counted;
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

/* Operator o's outputs out_strategy moves: their buffers in the rule's layout (under a pipeline
   the slots') and the moves to and from their tensors (collective). */
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
    size_t b = (size_t)sk__rt_count(kl) * sk_dtype_size(dt);
    bool grad = rt->plan->tensors[t].needs_grad;
    ro->kout[k] = rt->world ? NULL : sk__rt_alloc(rt, SK__RT_ACTS, b);
    ro->dkout[k] = grad && !rt->world ? sk__rt_alloc(rt, SK__RT_GRADS, b) : NULL;
    if (!rt->world && (!ro->kout[k] || (grad && !ro->dkout[k])))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for operator '%s'", op->name);
    r = sk__rt_move(rt, kl, tl, dt, &ro->out_move[k], err);
    if (!r && grad) r = sk__rt_move(rt, tl, kl, dt, &ro->out_move_back[k], err);
    ro->out_move_bytes[k] = sk__rt_plan_sends(ro->out_move[k], rt->rank);
    ro->out_move_back_bytes[k] = sk__rt_plan_sends(ro->out_move_back[k], rt->rank);
  }
  return r;
}

/* Operator o's buffers, groups and moves (collective). */
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
    if (po->moved[k]) {
      size_t b = (size_t)sk__rt_count(&po->kernel_in[k]) * sk_dtype_size(dt);
      ro->kin[k] = rt->world ? NULL : sk__rt_alloc(rt, SK__RT_ACTS, b); /* pipeline: the slot's */
      ro->dkin[k] = rt->plan->tensors[t].needs_grad ? sk__rt_alloc(rt, SK__RT_GRADS, b) : NULL;
      if ((!rt->world && !ro->kin[k]) || (rt->plan->tensors[t].needs_grad && !ro->dkin[k]))
        return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for operator '%s'", op->name);
      r = sk__rt_move(rt, &rt->plan->tensors[t].layout, &po->kernel_in[k], dt, &ro->move[k], err);
      if (!r && ro->dkin[k]) r = sk__rt_move(rt, &po->kernel_in[k], &rt->plan->tensors[t].layout, dt, &ro->move_back[k], err);
      ro->move_bytes[k] = sk__rt_plan_sends(ro->move[k], rt->rank);
      ro->move_back_bytes[k] = sk__rt_plan_sends(ro->move_back[k], rt->rank);
    }
    sk__rt_view(&ro->karg[k], &po->kernel_in[k], dt, po->moved[k] ? ro->kin[k] : rt->values[t]);
    if (!r && po->plan.bwd_in[k].kind != SK_COLL_NONE) r = sk__rt_group_of(rt, &po->plan.mesh, po->plan.bwd_in[k].axes, &ro->bwd[k], err);
    if (!r && po->plan.grad[k].kind != SK_COLL_NONE && ((po->desc.params >> k) & 1u))
      r = sk__rt_group_of(rt, &po->plan.mesh, po->plan.grad[k].axes, &ro->mirror[k], err);
  }
  if (!r) r = sk__rt_setup_out_moves(rt, o, err);
  if (!r && po->plan.fwd.kind != SK_COLL_NONE) r = sk__rt_group_of(rt, &po->plan.mesh, po->plan.fwd.axes, &ro->fwd, err);
  if (!r && po->plan.fwd.kind == SK_COLL_REDUCE_SCATTER) {
    int t = op->outputs[0];
    ro->rs_group = sk_comm_size(ro->fwd);
    ro->pre_rs_count = sk__rt_count(&po->plan.out[0]) * ro->rs_group;
    size_t b = (size_t)ro->pre_rs_count * sk_dtype_size(sk__rt_dtype(rt, t));
    ro->pre_rs = rt->world ? NULL : sk__rt_alloc(rt, SK__RT_ACTS, b); /* pipeline: the slot's */
    ro->dy_full = sk__rt_alloc(rt, SK__RT_GRADS, b);
    if ((!rt->world && !ro->pre_rs) || !ro->dy_full)
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for '%s'", op->name);
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

/* Whether the gradient operator o's backward writes for input k may be a second one of its
   tensor, computed beside the first and summed in (the kernels overwrite what they write): a
   tensor several operators read, and under a pipeline of several micro-batches a parameter,
   whose micro-batches' gradients sum (an activation's gradient is per micro-batch, in its slot). */
static bool sk__rt_second_grad(const sk_runtime *rt, int o, int k) {
  const sk_graph_op *op = &rt->g->ops[o];
  int t = op->inputs[k];
  if (!rt->plan->tensors[t].needs_grad || !sk_exec_differentiable(op, k)) return false;
  return rt->readers[t] > 1 || (rt->world && rt->plan->micro > 1 && rt->g->tensors[t].role == SK_TENSOR_PARAM);
}

/* Scratch k holds such a second gradient of input k, in the tensor's layout or the operator's:
   each slot as long as the most its backward steps on this device need. Under a pipeline slot 0
   also receives an activation's gradient from the next stage beside one already written, and the
   last a level2 shard's micro-batch ReduceScatter (sk__rt_pipe_scatter_micro). */
static sk_result sk__rt_alloc_scratch(sk_runtime *rt, sk_error *err) {
  const sk_graph *g = rt->g;
  size_t most[SK_OP_MAX_INPUTS] = {0};
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (!sk__rt_step_here(rt, s)) continue;
    if (s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER && sk__rt_pipe_scatters_each_micro(rt)) {
      size_t b = (size_t)rt->shards[g->ops[s->op].inputs[s->slot]].count * sk_dtype_size(rt->cdt);
      most[SK_OP_MAX_INPUTS - 1] = b > most[SK_OP_MAX_INPUTS - 1] ? b : most[SK_OP_MAX_INPUTS - 1];
    }
    for (int k = 0; s->kind == SK_PSTEP_BACKWARD && k < g->ops[s->op].ninputs; k++) {
      if (!sk__rt_second_grad(rt, s->op, k)) continue;
      int t = g->ops[s->op].inputs[k];
      size_t es = sk_dtype_size(sk__rt_dtype(rt, t)), a = sk__rt_bytes(rt, t);
      size_t b = (size_t)sk__rt_count(&rt->plan->ops[s->op].kernel_in[k]) * es;
      most[k] = a > most[k] ? a : most[k], most[k] = b > most[k] ? b : most[k];
      if (rt->world && g->tensors[t].role != SK_TENSOR_PARAM) most[0] = a > most[0] ? a : most[0];
    }
  }
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++)
    if (most[k] && !(rt->scratch[k] = sk__rt_alloc(rt, SK__RT_GRADS, most[k])))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for the gradient scratch");
  return SK_OK;
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

/* The scheduler's configuration: the plan's comm_fusion (MindSpore counts size mode's MB in
   elements, hence its accounting); openstate False fuses nothing. */
static sk_fusion_desc sk__rt_fusion_desc(const sk_runtime *rt) {
  const sk_comm_fusion *cf = &rt->plan->desc.comm_fusion;
  sk_fusion_desc fd;
  memset(&fd, 0, sizeof fd);
  fd.allreduce = cf->allreduce, fd.allgather = cf->allgather, fd.reduce_scatter = cf->reducescatter;
  sk_fusion_config *k[3] = {&fd.allreduce, &fd.allgather, &fd.reduce_scatter};
  for (int i = 0; i < 3; i++) {
    if (cf->closed) k[i]->mode = SK_FUSION_NONE;
    k[i]->mindspore_accounting = k[i]->mode == SK_FUSION_AUTO || k[i]->mode == SK_FUSION_SIZE;
  }
  fd.allocator = rt->counted;
  return fd;
}

/* Whether the Mirror at step s goes through the scheduler: a parameter read once, in its own
   layout (the others' gradients are consumed by a later step of the backward). */
static bool sk__rt_fusable(const sk_runtime *rt, const sk_parallel_step *s) {
  return !rt->world && s->kind == SK_PSTEP_MIRROR && rt->readers[rt->g->ops[s->op].inputs[s->slot]] == 1 &&
         !rt->plan->ops[s->op].moved[s->slot];
}

/* 16-bit Mirrors reduce a shadow of each fused gradient: one block, the shadows consecutive in
   registration order, so a bucket is one flat span the scheduler reduces without packing. */
static sk_result sk__rt_alloc_shadows(sk_runtime *rt, sk_error *err) {
  if (rt->mirror_wire == rt->cdt) return SK_OK;
  size_t total = 0;
  for (int i = 0; i < rt->plan->nsteps; i++)
    if (sk__rt_fusable(rt, &rt->plan->steps[i]))
      total += (size_t)sk_parallel_slice_count(rt->plan, rt->g->ops[rt->plan->steps[i].op].inputs[rt->plan->steps[i].slot]);
  if (!total) return SK_OK;
  if (!(rt->shadows = sk__rt_alloc(rt, SK__RT_COMM, total * sizeof(uint16_t))))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for the 16-bit gradient shadows");
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
   gradient is final) and of its shard (the output, read back after the wait), all in one block
   taken at create and counted as communication. */
static sk_result sk__rt_alloc_rs_shadows(sk_runtime *rt, sk_error *err) {
  if (rt->mirror_wire == rt->cdt) return SK_OK;
  size_t total = 0;
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (s->kind != SK_PSTEP_GRAD_REDUCE_SCATTER || !sk__rt_step_here(rt, s)) continue;
    int t = rt->g->ops[s->op].inputs[s->slot];
    total += (size_t)(sk_parallel_slice_count(rt->plan, t) + rt->shards[t].count);
  }
  if (!total) return SK_OK;
  if (!(rt->rs_shadows = sk__rt_alloc(rt, SK__RT_COMM, total * sizeof(uint16_t))))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for the 16-bit shadows of the sharded gradients");
  uint16_t *at = (uint16_t *)rt->rs_shadows;
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (s->kind != SK_PSTEP_GRAD_REDUCE_SCATTER || !sk__rt_step_here(rt, s)) continue;
    int t = rt->g->ops[s->op].inputs[s->slot];
    sk__rt_shard *sh = &rt->shards[t];
    sh->wire_grad = at, at += sk_parallel_slice_count(rt->plan, t);
    sh->wire_shard = at, at += sh->count;
  }
  return SK_OK;
}

/* A sharded parameter's gradient ReduceScatter, fused under comm_fusion's reducescatter setting,
   in the Mirrors' wire: on the gradient and its shard, or on their 16-bit shadows. */
static sk_result sk__rt_add_reduce_scatter(sk_runtime *rt, int t, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  const void *send = sh->wire_grad ? sh->wire_grad : rt->grads[t];
  void *recv = sh->wire_shard ? sh->wire_shard : sh->grad;
  rt->kind = SK__RT_HOST;
  sk_result r = sk_fusion_add_reduce_scatter(rt->rs_fusion, sh->gather, send, recv, (size_t)sh->count, rt->mirror_wire,
                                             SK_SUM, sh->fusion, rt->g->tensors[t].name, &sh->rs_handle);
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
  if (!r) r = sk__rt_alloc_shadows(rt, err);
  if (!r) r = sk__rt_alloc_rs_shadows(rt, err);
  for (int i = 0; i < rt->plan->nsteps && !r; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (s->kind == SK_PSTEP_GRAD_REDUCE_SCATTER) { /* pipeline: this stage's parameters only */
      if (sk__rt_step_here(rt, s) && !sk__rt_pipe_scatters_each_micro(rt))
        r = sk__rt_add_reduce_scatter(rt, rt->g->ops[s->op].inputs[s->slot], err);
      continue;
    }
    if (!sk__rt_fusable(rt, s)) continue;
    int t = rt->g->ops[s->op].inputs[s->slot];
    sk__rt_op *ro = &rt->ops[s->op];
    void *buf = ro->shadow[s->slot] ? ro->shadow[s->slot] : rt->grads[t];
    rt->kind = SK__RT_HOST;
    r = sk_fusion_add_allreduce(rt->fusion, ro->mirror[s->slot], buf, buf, (size_t)sk_parallel_slice_count(rt->plan, t),
                                rt->mirror_wire, SK_SUM, rt->g->ops[s->op].fusion, rt->g->tensors[t].name,
                                &ro->fusion_handle[s->slot]);
    if (r) r = sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(rt->fusion));
    else rt->nfused++;
  }
  rt->kind = SK__RT_HOST;
  if (!r && (r = sk_fusion_plan(rt->fusion))) r = sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(rt->fusion));
  rt->kind = SK__RT_HOST;
  if (!r && (r = sk_fusion_plan(rt->rs_fusion)))
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

/* Wire buffer elements (of the compute dtype, which is at least as wide as the wire) step s needs. */
static int64_t sk__rt_wire_need(const sk_runtime *rt, const sk_parallel_step *s) {
  const sk__rt_op *ro = &rt->ops[s->op];
  bool half = rt->wire != rt->cdt;
  if (s->kind == SK_PSTEP_FORWARD_COMM && half) {
    int64_t n = sk__rt_count(&rt->plan->ops[s->op].plan.out[0]);
    return s->comm.kind == SK_COLL_REDUCE_SCATTER ? ro->pre_rs_count + n : n;
  }
  if (s->kind == SK_PSTEP_BACKWARD_COMM && ro->bwd_lead[s->slot] == s->slot && (half || ro->bwd_members[s->slot] != 1u << s->slot)) {
    int64_t n = 0;
    for (int j = 0; j < SK_OP_MAX_INPUTS; j++)
      if ((ro->bwd_members[s->slot] >> j) & 1u) n += sk__rt_count(&rt->plan->ops[s->op].kernel_in[j]);
    return n;
  }
  if (s->kind == SK_PSTEP_MIRROR && rt->mirror_wire != rt->cdt && ro->fusion_handle[s->slot] < 0)
    return sk__rt_count(&rt->plan->ops[s->op].kernel_in[s->slot]);
  return 0;
}

static sk_result sk__rt_alloc_wire(sk_runtime *rt, sk_error *err) {
  int64_t most = 0;
  for (int i = 0; i < rt->plan->nsteps; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    int64_t n = s->op >= 0 ? sk__rt_wire_need(rt, s) : 0;
    most = n > most ? n : most;
  }
  if (most && !(rt->wire_buf = sk__rt_alloc(rt, SK__RT_COMM, (size_t)most * sk_dtype_size(rt->cdt))))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for the communication buffer");
  return SK_OK;
}

/* The communicator of every device: the world under a pipeline (comm is then the stage's). */
static sk_comm *sk__rt_everyone(const sk_runtime *rt) { return rt->world ? rt->world : rt->comm; }

/* Local norms: this device's values, every device's on the world's device 0, and the dump file,
   which that device opens (truncating) now so a bad path fails at create. Every device counts a
   norm per parameter of the network, held here or not (under a pipeline another stage's), so
   the gather takes the same count from each. */
static sk_result sk__rt_setup_norms(sk_runtime *rt, sk_error *err) {
  const sk_parallel_desc *pd = &rt->plan->desc;
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
  void **full = (void **)calloc((size_t)g->ntensors + 1, sizeof *full);
  sk_result r = full ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory drawing parameters");
  for (int t = 0; t < g->ntensors && !r; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM &&
        !(full[t] = sk__rt_alloc(rt, SK__RT_PARAMS, (size_t)sk_graph_numel(g, t) * sk_dtype_size(rt->cdt))))
      r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory drawing '%s'", g->tensors[t].name);
  uint64_t seed = rt->desc.seed + (rt->desc.seed_by_rank ? (uint64_t)sk_comm_rank(sk__rt_everyone(rt)) : 0);
  if (!r) r = sk_graph_init_params(g, seed, rt->cdt, full, err);
  for (int t = 0; t < g->ntensors && !r; t++) /* pipeline: another stage's parameters have no buffer here */
    if (g->tensors[t].role == SK_TENSOR_PARAM && (rt->values[t] || rt->shards[t].data)) r = sk__rt_keep_slice(rt, t, full[t], err);
  for (int t = 0; t < g->ntensors && !r; t++) /* a constant: the whole rank-0 tensor on every device reading it */
    if (g->tensors[t].role == SK_TENSOR_CONST && rt->values[t]) {
      (void)sk_exec_convert(SK_F64, &g->tensors[t].value, rt->cdt, rt->values[t], 1);
      sk__rt_store(rt, rt->values[t], 1);
    }
  for (int t = 0; full && t < g->ntensors; t++) sk__rt_counted_free(rt, full[t]);
  free(full);
  return r;
}

/* ---- create and destroy --------------------------------------------------------------------- */

static sk_result sk__rt_check(sk_comm *comm, const sk_parallel_plan *plan, const sk_runtime_desc *desc,
                              sk_error *err) {
  if (!comm || !plan || !plan->graph || !plan->steps) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: NULL argument");
  int devices = plan->vstage ? plan->world_devices : plan->desc.ndevices;
  if (sk_comm_size(comm) != devices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: the program is for %d devices, the communicator has %d",
                    devices, sk_comm_size(comm));
  if (desc->dtype != SK_F32 && desc->dtype != SK_F64 && desc->dtype != SK_F16 && desc->dtype != SK_BF16)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: dtype %s (f32, f64, f16 or bf16)", sk_dtype_name(desc->dtype));
  if ((!desc->alloc.alloc) != (!desc->alloc.free))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: the allocator needs both alloc and free");
  return SK_OK;
}

/* The wire dtypes (f16 / bf16 runs; f32 and f64 reduce in their own): the reducing collectives
   travel in the storage format unless fp32_communication; the gradient sync (the Mirrors, the
   sharded gradients' ReduceScatters and partial Mirrors) in f32 (MindSpore's gradient_fp32_sync)
   unless no_gradient_fp32_sync, and then not under fp32_communication. */
static void sk__rt_setup_wire(sk_runtime *rt) {
  const sk_parallel_desc *pd = &rt->plan->desc;
  bool half = rt->store == SK_F16 || rt->store == SK_BF16;
  rt->wire = half && !pd->fp32_communication ? rt->store : rt->cdt;
  rt->mirror_wire = half && pd->no_gradient_fp32_sync && !pd->fp32_communication ? rt->store : rt->cdt;
  rt->overlap = pd->transformer_opt.grad_computation_allreduce_overlap;
}

static sk_result sk__rt_alloc_arrays(sk_runtime *rt, sk_error *err) {
  size_t n = (size_t)rt->g->ntensors + 1;
  rt->values = (void **)calloc(n, sizeof(void *)), rt->grads = (void **)calloc(n, sizeof(void *));
  rt->state0 = (void **)calloc(n, sizeof(void *)), rt->state1 = (void **)calloc(n, sizeof(void *));
  rt->written = (bool *)calloc(n, sizeof(bool)), rt->readers = (int *)calloc(n, sizeof(int));
  rt->args = (sk_exec_arg *)calloc(n, sizeof(sk_exec_arg));
  rt->ops = (sk__rt_op *)calloc((size_t)rt->g->nops + 1, sizeof(sk__rt_op));
  rt->shards = (sk__rt_shard *)calloc(n, sizeof(sk__rt_shard));
  rt->acc = (void **)calloc(n, sizeof(void *));
  rt->recomputed = (bool *)calloc(n, sizeof(bool));
  if (!rt->values || !rt->grads || !rt->state0 || !rt->state1 || !rt->written || !rt->readers || !rt->args || !rt->ops ||
      !rt->shards || !rt->acc || !rt->recomputed)
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory");
  for (int t = 0; !rt->plan->vstage && t < rt->g->ntensors; t++) rt->recomputed[t] = sk_parallel_recomputed(rt->plan, t);
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++) rt->readers[rt->g->ops[o].inputs[k]]++;
  return SK_OK;
}

SK_API void sk_runtime_destroy(sk_runtime *rt) {
  if (!rt) return;
  sk_fusion_destroy(rt->fusion), sk_fusion_destroy(rt->rs_fusion);
  for (int o = 0; rt->ops && o < rt->g->nops; o++) {
    sk__rt_op *ro = &rt->ops[o];
    for (int k = 0; k < SK_OP_MAX_INPUTS; k++) {
      sk_redist_executor_destroy(ro->move[k]), sk_redist_executor_destroy(ro->move_back[k]);
      sk__rt_counted_free(rt, ro->kin[k]), sk__rt_counted_free(rt, ro->dkin[k]);
    }
    for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++) {
      sk_redist_executor_destroy(ro->out_move[k]), sk_redist_executor_destroy(ro->out_move_back[k]);
      if (!rt->world) sk__rt_counted_free(rt, ro->kout[k]), sk__rt_counted_free(rt, ro->dkout[k]); /* else the slots' */
    }
    sk__rt_counted_free(rt, ro->pre_rs), sk__rt_counted_free(rt, ro->dy_full);
  }
  for (int id = 0; rt->gcomm && rt->gown && id < rt->plan->ngroups; id++)
    if (rt->gown[id]) sk_comm_destroy(rt->gcomm[id]);
  if (rt->world && rt->owner) sk__rt_pipe_unpoint(rt);
  sk__rt_pipe_close(rt); /* after the groups: they were split from its stage's communicator */
  for (int t = 0; rt->shards && t < rt->g->ntensors; t++) {
    sk__rt_shard *sh = &rt->shards[t];
    sk__rt_counted_free(rt, sh->data), sk__rt_counted_free(rt, sh->grad);
  }
  for (int t = 0; rt->values && t < rt->g->ntensors; t++) {
    sk__rt_counted_free(rt, rt->values[t]), sk__rt_counted_free(rt, rt->grads[t]);
    sk__rt_counted_free(rt, rt->state0[t]), sk__rt_counted_free(rt, rt->state1[t]);
    if (rt->acc) sk__rt_counted_free(rt, rt->acc[t]);
  }
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) sk__rt_counted_free(rt, rt->scratch[k]);
  sk__rt_counted_free(rt, rt->wire_buf), sk__rt_counted_free(rt, rt->shadows), sk__rt_counted_free(rt, rt->rs_shadows);
  sk__rt_counted_free(rt, rt->norms), sk__rt_counted_free(rt, rt->all_norms);
  if (rt->norm_file) fclose(rt->norm_file);
  free(rt->values), free(rt->grads), free(rt->state0), free(rt->state1), free(rt->written), free(rt->readers);
  free(rt->args), free(rt->ops), free(rt->gcomm), free(rt->gown), free(rt->shards), free(rt->acc);
  free(rt->recomputed);
  free(rt);
}

SK_API sk_result sk_runtime_create(sk_comm *comm, const sk_parallel_plan *plan, const sk_runtime_desc *desc,
                                   sk_runtime **out, sk_error *err) {
  sk_runtime_desc zero;
  memset(&zero, 0, sizeof zero);
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: NULL output");
  *out = NULL;
  if (!desc) desc = &zero;
  sk_result r = sk__rt_check(comm, plan, desc, err);
  if (r) return r;
  sk_runtime *rt = (sk_runtime *)calloc(1, sizeof *rt);
  if (!rt) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory");
  rt->comm = comm, rt->rank = sk_comm_rank(comm), rt->plan = plan, rt->g = plan->graph, rt->desc = *desc;
  rt->cdt = desc->dtype == SK_F64 ? SK_F64 : SK_F32, rt->store = desc->dtype;
  sk__rt_setup_wire(rt);
  rt->counted.alloc = sk__rt_counted_alloc, rt->counted.free = sk__rt_counted_free, rt->counted.user = rt;
  if (!rt->desc.seed) rt->desc.seed = 1;
  rt->accum = plan->desc.grad_accumulation_step > 1 ? plan->desc.grad_accumulation_step : 1;
  r = sk_optim_resolve(&desc->optim, &rt->optim, err);
  rt->optim.lr = (double)(float)rt->optim.lr; /* MindSpore holds learning_rate in a float32 Parameter */
  if (!r) r = sk__rt_alloc_arrays(rt, err);
  if (!r && plan->vstage) r = sk__rt_pipe_open(rt, comm, err);
  if (!r) r = sk__rt_alloc_tensors(rt, err);
  if (!r && rt->world) r = sk__rt_pipe_alloc_feeds(rt, err);
  if (!r) r = sk__rt_alloc_scratch(rt, err);
  if (!r) r = sk__rt_alloc_acc(rt, err);
  if (!r) r = sk__rt_setup_norms(rt, err);
  if (!r) r = sk__rt_make_groups(rt, err);
  for (int o = 0; o < rt->g->nops && !r; o++) r = sk__rt_setup_op(rt, o, err);
  if (!r) r = sk__rt_setup_shard_groups(rt, err);
  if (!r) sk__rt_setup_bwd_pack(rt);
  if (!r) r = sk__rt_setup_fusion(rt, err);
  if (!r) r = sk__rt_alloc_wire(rt, err);
  if (!r) r = sk__rt_init_params(rt, err);
  if (r) {
    sk_runtime_destroy(rt);
    return r;
  }
  sk__rt_last_steps(rt);
  while (rt->nforward < plan->nsteps && sk__rt_is_forward(plan->steps[rt->nforward].kind)) rt->nforward++;
  rt->peak_total = 0; /* peaks count from here: drawing the whole model is create's alone */
  for (int k = 0; k < SK__RT_KINDS; k++) rt->peak[k] = rt->bytes[k], rt->peak_total += k < SK__RT_HOST ? rt->bytes[k] : 0;
  *out = rt;
  return SK_OK;
}

/* ---- feeding -------------------------------------------------------------------------------- */

static sk_result sk__rt_convert(sk_dtype sdt, const void *src, sk_dtype ddt, void *dst, size_t n, sk_error *err) {
  if (sk_exec_convert(sdt, src, ddt, dst, n)) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "cannot convert %s data into a %s tensor", sk_dtype_name(sdt),
                  sk_dtype_name(ddt));
}

SK_API sk_result sk_runtime_feed(sk_runtime *rt, int input, sk_dtype dt, const void *global, size_t n, sk_error *err) {
  if (!rt || !global) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: feed: NULL runtime or data");
  if (input < 0 || input >= rt->g->ntensors)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: feed: tensor %d is not an input (the network has %d tensors)",
                    input, rt->g->ntensors);
  if (rt->g->tensors[input].role != SK_TENSOR_INPUT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: feed '%s': tensor %d is a %s, not an input",
                    rt->g->tensors[input].name, input, sk_tensor_role_name(rt->g->tensors[input].role));
  const char *name = rt->g->tensors[input].name;
  int64_t whole = sk_graph_numel(rt->g, input) * (rt->world ? rt->plan->micro : 1); /* pipeline: every micro-batch */
  if ((int64_t)n != whole)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: feed '%s': %zu elements given, the tensor has %lld", name, n,
                    (long long)whole);
  if (rt->world) return sk__rt_pipe_feed(rt, input, dt, global, err);
  size_t count = (size_t)sk_parallel_slice_count(rt->plan, input);
  rt->kind = SK__RT_HOST;
  void *tmp = sk__rt_counted_alloc(rt, count * sk_dtype_size(dt) + 1, 64);
  if (!tmp) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: feed '%s': out of memory", name);
  sk_result r = sk__rt_take_slice(sk_dtype_size(dt), &rt->plan->tensors[input].layout, rt->rank, global, tmp, err);
  if (!r) r = sk__rt_convert(dt, tmp, sk__rt_dtype(rt, input), rt->values[input], count, err);
  if (!r && sk_exec_is_float(rt->g->tensors[input].dtype)) sk__rt_store(rt, rt->values[input], (int64_t)count);
  sk__rt_counted_free(rt, tmp);
  if (r && err) {
    char pre[128];
    snprintf(pre, sizeof pre, "runtime: feed '%.63s': ", name);
    sk__rt_prefix(err, pre);
  }
  return r;
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
  if (rt->desc.device_flops <= 0) return;
  rt->stats.compute_us += f / rt->desc.device_flops * 1e6;
  sk_comm_compute(rt->comm, f / rt->desc.device_flops * 1e6);
}

/* ---- the steps ---------------------------------------------------------------------------- */

static void sk__rt_scale(sk_dtype dt, void *buf, int64_t n, double s) {
  if (s == 1 || s == 0) return;
  if (dt == SK_F64)
    for (int64_t i = 0; i < n; i++) ((double *)buf)[i] *= s;
  else
    for (int64_t i = 0; i < n; i++) ((float *)buf)[i] = (float)(((float *)buf)[i] * s);
}

static void sk__rt_add(sk_dtype dt, void *acc, const void *x, int64_t n) {
  if (dt == SK_F64)
    for (int64_t i = 0; i < n; i++) ((double *)acc)[i] += ((const double *)x)[i];
  else
    for (int64_t i = 0; i < n; i++) ((float *)acc)[i] += ((const float *)x)[i];
}

/* Operator o's output views; with `grads`, each carries its gradient when one reached it. */
static void sk__rt_outputs(sk_runtime *rt, int o, sk_exec_arg *out, bool grads) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  for (int k = 0; k < op->noutputs; k++) {
    int t = op->outputs[k];
    out[k] = rt->args[t];
    out[k].grad = grads && rt->written[t] ? rt->grads[t] : NULL;
    if (!rt->plan->ops[o].out_moved[k]) continue;
    sk__rt_view(&out[k], &rt->plan->ops[o].plan.out[k], sk__rt_dtype(rt, t), ro->kout[k]);
    out[k].grad = grads ? ro->dkout[k] : NULL;
  }
  if (ro->pre_rs) { /* before the ReduceScatter, output 0 is whole along the scattered dim */
    out[0].data = ro->pre_rs, out[0].shape[0] *= ro->rs_group;
    if (out[0].grad) out[0].grad = ro->dy_full;
  }
}

static sk_result sk__rt_forward(sk_runtime *rt, int o, bool inference, sk_error *err) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  sk_exec_arg out[SK_OP_MAX_OUTPUTS];
  memset(out, 0, sizeof out);
  sk__rt_outputs(rt, o, out, false);
  sk_exec_facts f = ro->facts;
  f.seed = sk_exec_dropout_seed(rt->desc.seed, o, rt->step), f.inference = inference;
  if (rt->world && f.global_ndims > 0) { /* micro-batch i is rows [i*b, (i+1)*b) of the batch's mask */
    int64_t b = f.global_shape[0];
    f.global_shape[0] *= rt->plan->micro, f.slice.start[0] += rt->micro * b, f.slice.stop[0] += rt->micro * b;
  }
  double t0 = sk__rt_now_s();
  sk_result r = sk_exec_forward(rt->desc.kernels, op, &f, ro->karg, out, err);
  if (!r) sk__rt_count_compute(rt, op, ro->karg, out, false, t0);
  sk_coll_kind fc = rt->plan->ops[o].plan.fwd.kind; /* output 0 summed by a collective: rounded after it */
  for (int k = fc == SK_COLL_ALLREDUCE || fc == SK_COLL_REDUCE_SCATTER ? 1 : 0; k < op->noutputs && !r; k++) {
    int64_t n = 0;
    void *buf = sk__rt_kout(rt, o, k, &n);
    if (sk_exec_is_float(rt->g->tensors[op->outputs[k]].dtype)) sk__rt_store(rt, buf, n);
  }
  return r;
}

static sk_result sk__rt_comm_failed(sk_runtime *rt, sk_comm *c, sk_result r, sk_error *err) {
  return sk__fail(err, r, "%s", sk_comm_error_message(c ? c : rt->comm));
}

/* A 16-bit wire: n compute (f32) values into it, and back. */
static void sk__rt_to_wire(sk_dtype wire, const void *src, void *dst, int64_t n) {
  const float *f = (const float *)src;
  uint16_t *h = (uint16_t *)dst;
  if (wire == SK_F16)
    for (int64_t i = 0; i < n; i++) h[i] = sk_f32_to_f16(f[i]);
  else
    for (int64_t i = 0; i < n; i++) h[i] = sk_f32_to_bf16(f[i]);
}

static void sk__rt_from_wire(sk_dtype wire, const void *src, void *dst, int64_t n) {
  const uint16_t *h = (const uint16_t *)src;
  float *f = (float *)dst;
  if (wire == SK_F16)
    for (int64_t i = 0; i < n; i++) f[i] = sk_f16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < n; i++) f[i] = sk_bf16_to_f32(h[i]);
}

/* A reducing collective on compute-dtype buffers, carried in `wire`: directly, or through 16-bit
   copies in the wire buffer (a ReduceScatter's input, then its output beside it). */
static sk_result sk__rt_reduce(sk_runtime *rt, sk_comm *c, sk_coll_kind kind, const void *send, void *recv,
                               int64_t n_send, int64_t n_recv, sk_dtype wire, sk_redop op) {
  bool rs = kind == SK_COLL_REDUCE_SCATTER;
  if (wire == rt->cdt)
    return rs ? sk_reduce_scatter(c, send, recv, (size_t)n_recv, wire, op) : sk_allreduce(c, send, recv, (size_t)n_recv, wire, op);
  uint16_t *w = (uint16_t *)rt->wire_buf, *out = rs ? w + n_send : w;
  sk__rt_to_wire(wire, send, w, n_send);
  sk_result r = rs ? sk_reduce_scatter(c, w, out, (size_t)n_recv, wire, op) : sk_allreduce(c, w, w, (size_t)n_recv, wire, op);
  if (!r) sk__rt_from_wire(wire, out, recv, n_recv);
  return r;
}

static sk_result sk__rt_forward_comm(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  int t = rt->g->ops[s->op].outputs[0];
  sk__rt_op *ro = &rt->ops[s->op];
  int64_t n = 0;
  void *y = sk__rt_kout(rt, s->op, 0, &n);
  sk_dtype dt = sk__rt_dtype(rt, t);
  bool rs = s->comm.kind == SK_COLL_REDUCE_SCATTER;
  sk_dtype wire = sk_exec_is_float(rt->g->tensors[t].dtype) ? rt->wire : dt;
  sk_result r = sk__rt_reduce(rt, ro->fwd, s->comm.kind, rs ? ro->pre_rs : y, y, rs ? ro->pre_rs_count : n, n, wire,
                              s->comm.op);
  if (r) return sk__rt_comm_failed(rt, ro->fwd, r, err);
  sk__rt_scale(dt, y, n, s->comm.scale);
  sk__rt_store(rt, y, n);
  sk__rt_count_comm(rt, s->comm.kind, ro->fwd, (uint64_t)(rs ? ro->pre_rs_count : n) * sk_dtype_size(wire));
  return SK_OK;
}

/* The backward of the forward collective on output 0's gradient. */
static sk_result sk__rt_undo_comm(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  int t = rt->g->ops[s->op].outputs[0];
  sk__rt_op *ro = &rt->ops[s->op];
  bool moved = rt->plan->ops[s->op].out_moved[0]; /* its gradient came back into dkout */
  if (!moved && !rt->written[t]) return SK_OK;
  int64_t n = sk__rt_count(&rt->plan->ops[s->op].plan.out[0]);
  void *dy = moved ? ro->dkout[0] : rt->grads[t];
  if (!dy) return SK_OK; /* a moved output 0 no gradient flows to */
  sk_dtype dt = sk__rt_dtype(rt, t);
  if (s->comm.kind != SK_COLL_REDUCE_SCATTER) return sk__rt_scale(dt, dy, n, s->comm.scale), SK_OK;
  sk_result r = sk_allgather(ro->fwd, dy, ro->dy_full, (size_t)n, dt);
  if (r) return sk__rt_comm_failed(rt, ro->fwd, r, err);
  sk__rt_count_comm(rt, SK_COLL_ALLGATHER, ro->fwd, (uint64_t)ro->pre_rs_count * sk_dtype_size(dt));
  sk__rt_scale(dt, ro->dy_full, ro->pre_rs_count, s->comm.scale);
  return SK_OK;
}

/* Where input k's gradient goes: the moved input's buffer, the tensor's gradient when nothing
   wrote it yet this step, else a scratch summed in when the input's steps are done. */
static void *sk__rt_dx_target(sk_runtime *rt, int o, int k) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  int t = op->inputs[k];
  ro->add[k] = false;
  if (!rt->plan->tensors[t].needs_grad || !sk_exec_differentiable(op, k)) return NULL;
  bool param = (rt->plan->ops[o].desc.params >> k) & 1u;
  if ((rt->grads_only == 1 && param) || (rt->grads_only == 2 && !param)) return NULL; /* the other half's */
  if (rt->plan->ops[o].moved[k]) return ro->dkin[k];
  if (!rt->written[t]) return rt->written[t] = true, rt->grads[t];
  ro->add[k] = true;
  return rt->scratch[k];
}

static sk_result sk__rt_backward(sk_runtime *rt, int o, sk_error *err) {
  const sk_graph_op *op = &rt->g->ops[o];
  sk__rt_op *ro = &rt->ops[o];
  sk_exec_arg out[SK_OP_MAX_OUTPUTS];
  memset(out, 0, sizeof out);
  sk__rt_outputs(rt, o, out, true);
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) ro->dx[k] = k < op->ninputs ? sk__rt_dx_target(rt, o, k) : NULL;
  double t0 = sk__rt_now_s();
  sk_result r = sk_exec_backward(rt->desc.kernels, op, &ro->facts, ro->karg, out, ro->dx, err);
  if (!r) sk__rt_count_compute(rt, op, ro->karg, out, true, t0);
  const sk_parallel_op *po = &rt->plan->ops[o];
  for (int k = 0; k < op->ninputs && !r; k++) /* a sharded parameter has no Mirror step: its scaling here */
    if (ro->dx[k] && rt->shards[op->inputs[k]].data) {
      double cs = po->plan.grad[k].scale == 0 ? 1 : po->plan.grad[k].scale;
      sk__rt_scale(rt->cdt, ro->dx[k], sk__rt_count(&po->kernel_in[k]), po->mirror_scale[k] * cs / po->replication[k]);
    }
  return r;
}

static int64_t sk__rt_dx_count(const sk_runtime *rt, int o, int k) {
  return sk__rt_count(&rt->plan->ops[o].kernel_in[k]);
}

/* The gradients of the inputs input k's step reduces (k alone, or with
   enable_communication_fusion every input of the operator on the same group), in one
   AllReduce: in place, or packed one after the other into the wire buffer. */
static sk_result sk__rt_backward_comm(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  const sk_parallel_op *po = &rt->plan->ops[s->op];
  int k = s->slot;
  if (ro->bwd_lead[k] != k) return SK_OK; /* carried by its leading input's AllReduce */
  unsigned m = ro->bwd_members[k];
  sk_comm *c = ro->bwd[k];
  size_t es = sk_dtype_size(rt->wire);
  int64_t total = 0;
  sk_result r;
  if (m == 1u << k && rt->wire == rt->cdt) {
    total = sk__rt_dx_count(rt, s->op, k);
    r = sk_allreduce(c, ro->dx[k], ro->dx[k], (size_t)total, rt->cdt, s->comm.op);
  } else {
    char *w = (char *)rt->wire_buf;
    for (int j = 0; j < SK_OP_MAX_INPUTS; j++) {
      if (!((m >> j) & 1u)) continue;
      int64_t n = sk__rt_dx_count(rt, s->op, j);
      if (rt->wire == rt->cdt) memcpy(w + (size_t)total * es, ro->dx[j], (size_t)n * es);
      else sk__rt_to_wire(rt->wire, ro->dx[j], w + (size_t)total * es, n);
      total += n;
    }
    r = sk_allreduce(c, w, w, (size_t)total, rt->wire, s->comm.op);
    int64_t at = 0;
    for (int j = 0; j < SK_OP_MAX_INPUTS && !r; j++) {
      if (!((m >> j) & 1u)) continue;
      int64_t n = sk__rt_dx_count(rt, s->op, j);
      if (rt->wire == rt->cdt) memcpy(ro->dx[j], w + (size_t)at * es, (size_t)n * es);
      else sk__rt_from_wire(rt->wire, w + (size_t)at * es, ro->dx[j], n);
      at += n;
    }
  }
  if (r) return sk__rt_comm_failed(rt, c, r, err);
  for (int j = 0; j < SK_OP_MAX_INPUTS; j++)
    if ((m >> j) & 1u) sk__rt_scale(rt->cdt, ro->dx[j], sk__rt_dx_count(rt, s->op, j), po->plan.bwd_in[j].scale);
  sk__rt_count_comm(rt, SK_COLL_ALLREDUCE, c, (uint64_t)total * es);
  return SK_OK;
}

/* A Mirror: the gradient is divided by its replication (replicas that hold the same full
   gradient) and multiplied by the plan's factor (gradients_mean) BEFORE the sum, one scaling
   for both paths. A fused Mirror is marked ready now (overlap) or at the update; a 16-bit one
   reduces its shadow. */
static sk_result sk__rt_mirror(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  const sk_parallel_op *po = &rt->plan->ops[s->op];
  int k = s->slot;
  int64_t n = sk__rt_dx_count(rt, s->op, k);
  double comm_scale = s->comm.scale == 0 ? 1 : s->comm.scale;
  sk__rt_scale(rt->cdt, ro->dx[k], n, po->mirror_scale[k] * comm_scale / po->replication[k]);
  if (ro->fusion_handle[k] >= 0) {
    if (ro->shadow[k]) sk__rt_to_wire(rt->mirror_wire, ro->dx[k], ro->shadow[k], n);
    if (!rt->overlap) return SK_OK;
    sk_result r = sk_fusion_ready(rt->fusion, ro->fusion_handle[k]);
    return r ? sk__fail(err, r, "%s", sk_fusion_error_message(rt->fusion)) : SK_OK;
  }
  sk__rt_count_comm(rt, SK_COLL_ALLREDUCE, ro->mirror[k], (uint64_t)n * sk_dtype_size(rt->mirror_wire));
  sk_result r = sk__rt_reduce(rt, ro->mirror[k], SK_COLL_ALLREDUCE, ro->dx[k], ro->dx[k], n, n, rt->mirror_wire, s->comm.op);
  return r ? sk__rt_comm_failed(rt, ro->mirror[k], r, err) : SK_OK;
}

/* Each bucket of a scheduler counted as the one call it is, by its buffer as nccl-tests sizes
   it (an AllGather's output, a ReduceScatter's input). */
static void sk__rt_count_buckets(sk_runtime *rt, sk_fusion *f) {
  int nb = sk_fusion_bucket_count(f);
  for (int b = 0; b < nb && rt->counting; b++) {
    sk_fusion_bucket_info bi;
    memset(&bi, 0, sizeof bi);
    if (sk_fusion_get_bucket(f, b, &bi)) continue;
    uint64_t n = (uint64_t)bi.count * (bi.kind == SK_COLL_ALLREDUCE ? 1u : (uint64_t)sk_comm_size(bi.comm));
    sk__rt_count_comm(rt, bi.kind, bi.comm, n * sk_dtype_size(bi.dtype));
  }
}

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
  if (!v) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory gathering '%s'", rt->g->tensors[t].name);
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

/* level3: one parameter, gathered where it is read. */
static sk_result sk__rt_gather_one(sk_runtime *rt, int t, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  sk_result r = sk__rt_hold(rt, t, err);
  if (r) return r;
  if ((r = sk_allgather(sh->gather, sh->data, rt->values[t], (size_t)sh->count, rt->cdt)))
    return sk__rt_comm_failed(rt, sh->gather, r, err);
  sk__rt_count_comm(rt, SK_COLL_ALLGATHER, sh->gather, (uint64_t)sk_parallel_slice_count(rt->plan, t) * sk_dtype_size(rt->cdt));
  return SK_OK;
}

/* level1 / level2: at the first gather of a step, every sharded parameter not held, fused under
   comm_fusion's allgather setting (a scheduler per step: the gathered slices are new buffers). */
static sk_result sk__rt_gather_all(sk_runtime *rt, sk_error *err) {
  sk_fusion_desc fd = sk__rt_fusion_desc(rt);
  sk_fusion *f = NULL;
  rt->kind = SK__RT_HOST;
  sk_result r = sk_fusion_create(&fd, &f, err);
  int n = 0;
  for (int t = 0; t < rt->g->ntensors && !r; t++) {
    sk__rt_shard *sh = &rt->shards[t];
    if (!sh->data || sh->held || (r = sk__rt_hold(rt, t, err))) continue;
    rt->kind = SK__RT_HOST;
    r = sk_fusion_add_allgather(f, sh->gather, sh->data, rt->values[t], (size_t)sh->count, rt->cdt, sh->fusion,
                                rt->g->tensors[t].name, NULL);
    if (r) r = sk__fail(err, r, "runtime: fusion: %s", sk_fusion_error_message(f));
    n++;
  }
  rt->kind = SK__RT_HOST;
  sk_result c = SK_OK;
  bool launched = false;
  for (int h = 0; h < n && !r && !c; h++) c = sk_fusion_ready(f, h), launched = true;
  sk_result w = launched ? sk_fusion_wait(f) : SK_OK; /* even after a failed ready: nothing stays in flight */
  if (!c) c = w;
  if (!r && c) r = sk__fail(err, c, "%s", sk_fusion_error_message(f));
  if (!r) sk__rt_count_buckets(rt, f);
  sk_fusion_destroy(f);
  return r;
}

static sk_result sk__rt_param_gather(sk_runtime *rt, int t, sk_error *err) {
  if (rt->shards[t].held) return SK_OK;
  return rt->plan->desc.hsdp.level == SK_HSDP_LEVEL3 ? sk__rt_gather_one(rt, t, err) : sk__rt_gather_all(rt, err);
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
   least a shard long (sk__rt_alloc_scratch). */
static sk_result sk__rt_pipe_scatter_micro(sk_runtime *rt, int t, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  int64_t n = sk_parallel_slice_count(rt->plan, t);
  void *to = sh->micros ? rt->scratch[SK_OP_MAX_INPUTS - 1] : sh->grad;
  sk_result r;
  if (sh->wire_grad) {
    sk__rt_to_wire(rt->mirror_wire, rt->grads[t], sh->wire_grad, n);
    r = sk_reduce_scatter(sh->gather, sh->wire_grad, sh->wire_shard, (size_t)sh->count, rt->mirror_wire, SK_SUM);
    if (!r) sk__rt_from_wire(rt->mirror_wire, sh->wire_shard, to, sh->count);
  } else {
    r = sk_reduce_scatter(sh->gather, rt->grads[t], to, (size_t)sh->count, rt->cdt, SK_SUM);
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
   level1 keeps the gathered slice for the step's other micro-batches (released at the update);
   level3 gathers per use, so it lets go now. */
static sk_result sk__rt_pipe_grad_reduce_scatter(sk_runtime *rt, int t, sk_error *err) {
  sk__rt_shard *sh = &rt->shards[t];
  if (!rt->written[t]) memset(rt->grads[t], 0, sk__rt_bytes(rt, t)), rt->written[t] = true;
  if (rt->plan->desc.hsdp.level == SK_HSDP_LEVEL3) sk__rt_release(rt, t);
  if (sk__rt_pipe_scatters_each_micro(rt)) return sk__rt_pipe_scatter_micro(rt, t, err);
  if (++sh->micros < rt->plan->micro) return SK_OK;
  if (sh->wire_grad) sk__rt_to_wire(rt->mirror_wire, rt->grads[t], sh->wire_grad, sk_parallel_slice_count(rt->plan, t));
  if (!rt->overlap) return SK_OK;
  sk_result r = sk_fusion_ready(rt->rs_fusion, sh->rs_handle);
  return r ? sk__fail(err, r, "%s", sk_fusion_error_message(rt->rs_fusion)) : SK_OK;
}

static sk_result sk__rt_grad_reduce_scatter(sk_runtime *rt, int t, sk_error *err) {
  if (rt->world) return sk__rt_pipe_grad_reduce_scatter(rt, t, err);
  if (!rt->written[t]) memset(rt->grads[t], 0, sk__rt_bytes(rt, t)), rt->written[t] = true;
  sk__rt_release(rt, t);
  int64_t n = sk_parallel_slice_count(rt->plan, t);
  if (!sk__rt_scatter_now(rt)) return sk__rt_add(rt->cdt, rt->acc[t], rt->grads[t], n), SK_OK;
  if (rt->acc[t] && rt->plan->desc.hsdp.level != SK_HSDP_LEVEL2) { /* the whole accumulated gradient */
    sk__rt_add(rt->cdt, rt->grads[t], rt->acc[t], n);
    memset(rt->acc[t], 0, sk__rt_bytes(rt, t));
  }
  if (rt->shards[t].wire_grad) /* the gradient is final: its 16-bit copy is what the scheduler sends */
    sk__rt_to_wire(rt->mirror_wire, rt->grads[t], rt->shards[t].wire_grad, n);
  if (!rt->overlap) return SK_OK;
  sk_result r = sk_fusion_ready(rt->rs_fusion, rt->shards[t].rs_handle);
  return r ? sk__fail(err, r, "%s", sk_fusion_error_message(rt->rs_fusion)) : SK_OK;
}

/* The partial Mirror of one shard, in the Mirrors' wire: in 16 bits through the shard's shadow,
   free again after the ReduceScatter (the shard itself may have changed since: level2 sums it
   over the micro-steps). */
static sk_result sk__rt_shard_mirror(sk_runtime *rt, sk__rt_shard *sh) {
  if (!sh->wire_shard) return sk_allreduce(sh->mirror, sh->grad, sh->grad, (size_t)sh->count, rt->cdt, SK_SUM);
  sk__rt_to_wire(rt->mirror_wire, sh->grad, sh->wire_shard, sh->count);
  sk_result r = sk_allreduce(sh->mirror, sh->wire_shard, sh->wire_shard, (size_t)sh->count, rt->mirror_wire, SK_SUM);
  if (!r) sk__rt_from_wire(rt->mirror_wire, sh->wire_shard, sh->grad, sh->count);
  return r;
}

/* After the ReduceScatters: a partially sharded parameter's Mirror over the rest of its replicas. */
static sk_result sk__rt_shard_mirrors(sk_runtime *rt, sk_error *err) {
  for (int t = 0; t < rt->g->ntensors; t++) {
    sk__rt_shard *sh = &rt->shards[t];
    if (!sh->mirror || !sh->grad) continue;
    sk_result r = sk__rt_shard_mirror(rt, sh);
    if (r) return sk__rt_comm_failed(rt, sh->mirror, r, err);
    sk__rt_count_comm(rt, SK_COLL_ALLREDUCE, sh->mirror, (uint64_t)sh->count * sk_dtype_size(rt->mirror_wire));
  }
  return SK_OK;
}

static sk_result sk__rt_move_back(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  int k = s->slot, t = rt->g->ops[s->op].inputs[k];
  void *target = rt->written[t] ? rt->scratch[k] : rt->grads[t];
  ro->add[k] = rt->written[t], rt->written[t] = true;
  sk_result r = sk_redist_execute(ro->move_back[k], ro->dkin[k], (size_t)sk__rt_dx_count(rt, s->op, k), target,
                                  (size_t)sk_parallel_slice_count(rt->plan, t), rt->cdt);
  if (r) return sk__fail(err, r, "moving the gradient back: %s", sk_comm_error_message(rt->comm));
  sk__rt_count_comm(rt, SK_COLL_NONE, NULL, ro->move_back_bytes[k]);
  ro->dx[k] = target;
  return SK_OK;
}

/* OUT_MOVE: output k from the rule's layout into its tensor; OUT_MOVE_BACK: the tensor's
   gradient into the rule's layout (zeros when none reached it: the backward then adds nothing). */
static sk_result sk__rt_out_move(sk_runtime *rt, const sk_parallel_step *s, sk_error *err) {
  sk__rt_op *ro = &rt->ops[s->op];
  int k = s->slot, t = rt->g->ops[s->op].outputs[k];
  size_t nk = (size_t)sk__rt_count(&rt->plan->ops[s->op].plan.out[k]), nt = (size_t)sk_parallel_slice_count(rt->plan, t);
  bool back = s->kind == SK_PSTEP_OUT_MOVE_BACK;
  if (back && !rt->written[t]) return memset(ro->dkout[k], 0, nk * sk_dtype_size(rt->cdt)), SK_OK;
  sk_result r = back ? sk_redist_execute(ro->out_move_back[k], rt->grads[t], nt, ro->dkout[k], nk, rt->cdt)
                     : sk_redist_execute(ro->out_move[k], ro->kout[k], nk, rt->values[t], nt, sk__rt_dtype(rt, t));
  if (r) return sk__fail(err, r, "%s", sk_comm_error_message(rt->comm));
  sk__rt_count_comm(rt, SK_COLL_NONE, NULL, back ? ro->out_move_back_bytes[k] : ro->out_move_bytes[k]);
  return SK_OK;
}

/* After input k's last backward step: a gradient in scratch is summed into the tensor's. */
static void sk__rt_finish_inputs(sk_runtime *rt, int o, int step) {
  sk__rt_op *ro = &rt->ops[o];
  for (int k = 0; k < rt->g->ops[o].ninputs; k++) {
    if (ro->last_step[k] != step || !ro->add[k] || !ro->dx[k]) continue;
    int t = rt->g->ops[o].inputs[k];
    sk__rt_add(rt->cdt, rt->grads[t], ro->dx[k], sk_parallel_slice_count(rt->plan, t));
    ro->add[k] = false;
  }
}

/* Whether this device keeps parameter t: always without a pipeline; under one, when its stage does. */
static bool sk__rt_holds(const sk_runtime *rt, int t) { return rt->values[t] || rt->shards[t].data; }

/* The norms of every parameter's gradient slice this device holds (with device_local_norm, then
   of all of them); a parameter another pipeline stage holds counts -1, which no norm is. */
static void sk__rt_norms_here(sk_runtime *rt) {
  const sk_graph *g = rt->g;
  double all = 0;
  int i = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (!sk_graph_trainable(g, t)) continue;
    const sk__rt_shard *sh = &rt->shards[t]; /* a sharded parameter's local slice is its shard */
    int64_t n = sh->data ? sh->count : sk_parallel_slice_count(rt->plan, t);
    const void *gr = sh->data ? sh->grad : rt->grads[t];
    double sq = 0;
    for (int64_t j = 0; j < n && gr; j++) {
      double v = rt->cdt == SK_F64 ? ((const double *)gr)[j] : ((const float *)gr)[j];
      sq += v * v;
    }
    all += sq, rt->norms[i++] = sk__rt_holds(rt, t) ? sqrt(sq) : -1;
  }
  if (i < rt->nnorms) rt->norms[i] = sqrt(all); /* device_local_norm */
}

/* The local norms, gathered on the world's device 0, which writes one line per device and
   parameter that device holds (under a pipeline, its stage's), then the device's line. The
   gather is not a training collective: the statistics leave it out. */
static sk_result sk__rt_local_norms(sk_runtime *rt, sk_error *err) {
  const sk_graph *g = rt->g;
  sk_comm *all = sk__rt_everyone(rt);
  sk__rt_norms_here(rt);
  sk_result r = sk_gather(all, rt->norms, rt->all_norms, (size_t)rt->nnorms, SK_F64, 0);
  if (r) return sk__fail(err, r, "local norms: %s", sk_comm_error_message(all));
  if (sk_comm_rank(all) != 0) return SK_OK;
  const sk_parallel_desc *pd = &rt->plan->desc;
  FILE *to[2] = {pd->print_local_norm ? stdout : NULL, rt->norm_file};
  for (int f = 0; f < 2; f++) {
    if (!to[f]) continue;
    for (int d = 0; d < sk_comm_size(all); d++) {
      const double *v = rt->all_norms + (size_t)d * (size_t)rt->nnorms;
      int i = 0;
      for (int t = 0; t < g->ntensors; t++) {
        if (!sk_graph_trainable(g, t)) continue;
        double norm = v[i++];
        if (norm >= 0) fprintf(to[f], "%lld %d %s %.9g\n", (long long)rt->step + 1, d, g->tensors[t].name, norm);
      }
      if (i < rt->nnorms) fprintf(to[f], "%lld %d device %.9g\n", (long long)rt->step + 1, d, v[i]);
    }
    if (fflush(to[f]))
      return sk__fail(err, SK_ERR_SYSTEM, "local norms: writing %s: %s", f ? pd->dump_local_norm : "stdout", strerror(errno));
  }
  return SK_OK;
}

/* Completes the fused Mirrors: launched now in registration order unless they overlapped the
   backward, waited for, 16-bit shadows back into the gradients; each bucket counted as the one
   AllReduce it is. */
static sk_result sk__rt_mirrors_done(sk_runtime *rt, sk_error *err) {
  sk_result r = SK_OK;
  for (int h = 0; h < rt->nfused && !rt->overlap && !r; h++) r = sk_fusion_ready(rt->fusion, h);
  sk_result w = sk_fusion_wait(rt->fusion); /* even after a failed ready: nothing stays in flight */
  r = r ? r : w;
  if (r) return sk__fail(err, r, "%s", sk_fusion_error_message(rt->fusion));
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++)
      if (rt->ops[o].shadow[k]) {
        int t = rt->g->ops[o].inputs[k];
        sk__rt_from_wire(rt->mirror_wire, rt->ops[o].shadow[k], rt->grads[t], sk_parallel_slice_count(rt->plan, t));
      }
  sk__rt_count_buckets(rt, rt->fusion);
  return SK_OK;
}

/* Completes the sharded parameters' ReduceScatters (launched now unless they overlapped), 16-bit
   shard shadows back into the shards; each bucket counted in its wire dtype. */
static sk_result sk__rt_reduce_scatters_done(sk_runtime *rt, sk_error *err) {
  if (!rt->nrs) return SK_OK;
  sk_result r = SK_OK;
  for (int h = 0; h < rt->nrs && !rt->overlap && !r; h++) r = sk_fusion_ready(rt->rs_fusion, h);
  sk_result w = sk_fusion_wait(rt->rs_fusion);
  r = r ? r : w;
  if (r) return sk__fail(err, r, "%s", sk_fusion_error_message(rt->rs_fusion));
  for (int t = 0; t < rt->g->ntensors; t++) {
    const sk__rt_shard *sh = &rt->shards[t];
    if (sh->wire_shard) sk__rt_from_wire(rt->mirror_wire, sh->wire_shard, sh->grad, sh->count);
  }
  sk__rt_count_buckets(rt, rt->rs_fusion);
  return SK_OK;
}

/* Gradient accumulation after a micro-step's reductions: each parameter's gradient (a level2
   shard's, or the whole slice's; level1 / level3 shards accumulated before their ReduceScatter)
   is added to its sum, which on the last micro-step becomes the gradient the optimizer sees. */
static void sk__rt_accumulate(sk_runtime *rt, bool last) {
  for (int t = 0; t < rt->g->ntensors; t++) {
    const sk__rt_shard *sh = &rt->shards[t];
    if (!rt->acc[t] || (sh->data && rt->plan->desc.hsdp.level != SK_HSDP_LEVEL2)) continue;
    void *gr = sh->data ? sh->grad : rt->grads[t];
    int64_t n = sh->data ? sh->count : sk_parallel_slice_count(rt->plan, t);
    if (!last) {
      sk__rt_add(rt->cdt, rt->acc[t], gr, n);
      continue;
    }
    sk__rt_add(rt->cdt, gr, rt->acc[t], n);
    memset(rt->acc[t], 0, (size_t)n * sk_dtype_size(rt->cdt));
  }
}

static sk_result sk__rt_update(sk_runtime *rt, sk_error *err) {
  sk_result r = sk__rt_mirrors_done(rt, err);
  if (!r && sk__rt_scatter_now(rt)) r = sk__rt_reduce_scatters_done(rt, err);
  sk__rt_release_all(rt); /* a parameter no gradient reached may still be gathered */
  for (int t = 0; t < rt->g->ntensors && !r; t++) /* no gradient reached it: zero */
    if (rt->g->tensors[t].role == SK_TENSOR_PARAM && !rt->written[t] && rt->grads[t])
      memset(rt->grads[t], 0, sk__rt_bytes(rt, t));
  if (!r && rt->accum > 1) {
    sk__rt_accumulate(rt, sk__rt_last_micro(rt));
    if (!sk__rt_last_micro(rt)) return SK_OK;
  }
  if (!r) r = sk__rt_shard_mirrors(rt, err);
  if (!r && rt->nnorms) r = sk__rt_local_norms(rt, err);
  for (int t = 0; t < rt->g->ntensors && !r; t++) {
    if (rt->g->tensors[t].role != SK_TENSOR_PARAM) continue;
    const sk__rt_shard *sh = &rt->shards[t];
    int64_t n = sh->data ? sh->count : sk_parallel_slice_count(rt->plan, t);
    void *v = sh->data ? sh->data : rt->values[t], *gr = sh->data ? sh->grad : rt->grads[t];
    if (!gr) continue; /* a sharded parameter without a gradient: SGD would see none either */
    r = sk_optim_update(&rt->optim, rt->cdt, (rt->step + 1) / rt->accum, (size_t)n, v, gr, rt->state0[t], rt->state1[t], err);
    sk__rt_store(rt, v, n);
  }
  return r;
}

static sk_result sk__rt_run_step(sk_runtime *rt, int i, bool inference, sk_error *err) {
  const sk_parallel_step *s = &rt->plan->steps[i];
  if (s->kind == SK_PSTEP_UPDATE) return sk__rt_update(rt, err);
  if (s->op < 0 || s->op >= rt->g->nops) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "a step without its operator");
  sk__rt_op *ro = &rt->ops[s->op];
  int t = rt->g->ops[s->op].inputs[s->slot];
  sk_result r = SK_OK;
  switch (s->kind) {
    case SK_PSTEP_MOVE:
      r = sk_redist_execute(ro->move[s->slot], rt->values[t], (size_t)sk_parallel_slice_count(rt->plan, t),
                            ro->kin[s->slot], (size_t)sk__rt_dx_count(rt, s->op, s->slot), sk__rt_dtype(rt, t));
      if (r) r = sk__fail(err, r, "%s", sk_comm_error_message(rt->comm));
      else sk__rt_count_comm(rt, SK_COLL_NONE, NULL, ro->move_bytes[s->slot]);
      break;
    case SK_PSTEP_FORWARD: r = sk__rt_forward(rt, s->op, inference, err); break;
    case SK_PSTEP_FORWARD_COMM: r = sk__rt_forward_comm(rt, s, err); break;
    case SK_PSTEP_UNDO_COMM: r = sk__rt_undo_comm(rt, s, err); break;
    case SK_PSTEP_BACKWARD: r = sk__rt_backward(rt, s->op, err); break;
    case SK_PSTEP_BACKWARD_COMM: r = sk__rt_backward_comm(rt, s, err); break;
    case SK_PSTEP_MIRROR: r = sk__rt_mirror(rt, s, err); break;
    case SK_PSTEP_MOVE_BACK: r = sk__rt_move_back(rt, s, err); break;
    case SK_PSTEP_PARAM_GATHER: r = sk__rt_param_gather(rt, t, err); break;
    case SK_PSTEP_PARAM_RELEASE: sk__rt_release(rt, t); break;
    case SK_PSTEP_GRAD_REDUCE_SCATTER: r = sk__rt_grad_reduce_scatter(rt, t, err); break;
    case SK_PSTEP_OUT_MOVE:
    case SK_PSTEP_OUT_MOVE_BACK: r = sk__rt_out_move(rt, s, err); break;
    default: r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "unknown step kind %d", (int)s->kind); break;
  }
  if (!r) sk__rt_finish_inputs(rt, s->op, i);
  return r;
}

/* Names the step, operator and tensor in front of a failed step's message. */
static sk_result sk__rt_named(const sk_runtime *rt, int i, sk_result r, sk_error *err) {
  if (!r || !err) return r;
  const sk_parallel_step *s = &rt->plan->steps[i];
  char pre[SK_ERROR_MSG_MAX];
  if (s->op < 0) snprintf(pre, sizeof pre, "step %d (%s): ", i, sk_parallel_step_name(s->kind));
  else {
    const sk_graph_op *op = &rt->g->ops[s->op];
    bool on_output = s->kind == SK_PSTEP_FORWARD || s->kind == SK_PSTEP_FORWARD_COMM || s->kind == SK_PSTEP_UNDO_COMM ||
                     s->kind == SK_PSTEP_BACKWARD;
    bool out_slot = s->kind == SK_PSTEP_OUT_MOVE || s->kind == SK_PSTEP_OUT_MOVE_BACK;
    int t = out_slot ? op->outputs[s->slot] : on_output ? op->outputs[0] : op->inputs[s->slot];
    snprintf(pre, sizeof pre, "step %d (%s) operator '%.63s' tensor '%.63s': ", i, sk_parallel_step_name(s->kind),
             op->name, rt->g->tensors[t].name);
  }
  sk__rt_prefix(err, pre);
  return r;
}

/* The forward pass ends at the first backward step (a level3 release belongs to it). */
static bool sk__rt_is_forward(sk_parallel_step_kind k) {
  return k == SK_PSTEP_MOVE || k == SK_PSTEP_FORWARD || k == SK_PSTEP_FORWARD_COMM || k == SK_PSTEP_PARAM_GATHER ||
         k == SK_PSTEP_PARAM_RELEASE || k == SK_PSTEP_OUT_MOVE;
}

static int64_t sk__rt_argmax_hits(const sk_runtime *rt, const void *logits, const void *labels, int64_t rows, int64_t c);

/* The evaluated logits and labels gathered whole (collective over rt->comm): rows whose argmax
   is the label, and how many rows. */
static sk_result sk__rt_score(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err) {
  const sk_graph *g = rt->g;
  int64_t nl = sk_graph_numel(g, g->logits), ny = sk_graph_numel(g, g->labels);
  int64_t c = g->tensors[g->logits].shape[g->tensors[g->logits].ndims - 1];
  rt->kind = SK__RT_HOST;
  void *logits = sk__rt_counted_alloc(rt, (size_t)nl * sk_dtype_size(rt->cdt), 64);
  void *labels = sk__rt_counted_alloc(rt, (size_t)ny * sk_dtype_size(sk__rt_dtype(rt, g->labels)), 64);
  sk_result r = logits && labels ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: evaluate: out of memory");
  if (!r) r = sk_runtime_gather(rt, g->logits, logits, err);
  if (!r) r = sk_runtime_gather(rt, g->labels, labels, err);
  if (!r) *correct = sk__rt_argmax_hits(rt, logits, labels, ny, c), *rows = ny;
  sk__rt_counted_free(rt, logits), sk__rt_counted_free(rt, labels);
  return r;
}

/* ---- pipeline parallel ------------------------------------------------------------------------
   Every device runs its stage's action list (plan->schedule). A chunk's activations of one
   micro-batch live in a slot, opened by its F and closed after its B, so the activation memory
   follows the schedule (GPipe m micro-batches, 1F1B p - r). Between chunks on different stages
   the tensors that cross the boundary travel by Send/Recv between the devices at the same place
   in the two stages: activations after F, gradients after B, each stream on its own link. A
   tensor that skips chunks is relayed through every chunk in between, so each message goes to
   the next chunk and both sides meet them in the same order. Gradients of parameters sum over
   the micro-batches (each micro-batch's Mirror at its step, summed as a tensor read twice is);
   the loss's gradient is seeded with 1/m, so the update sees the whole batch's mean gradient.
   Optimizer parallel: the shard groups are within the stage (split from its communicator);
   level1 / level2 gather once per step and keep the slices until the update, level3 per use;
   a sharded gradient is ReduceScattered after the last micro-batch (level2: after each, into
   the shard's gradient). docs/optimizer-parallel.md, "With a pipeline". */

typedef struct sk__rt_slot {
  bool live;
  void **values, **grads; /* [ntensors]: the tensors this chunk holds (owner[t] == its chunk) */
  bool *written;
  void **kin;             /* [nops * SK_OP_MAX_INPUTS]: its operators' moved inputs */
  void **pre_rs;          /* [nops]: outputs before a forward ReduceScatter */
  void **kout, **dkout;   /* [nops * SK_OP_MAX_OUTPUTS]: moved outputs in the rule's layout, their gradients */
} sk__rt_slot;

typedef struct sk__rt_send {
  sk_request *req;
  void *staging; /* a copy: the slot it came from may change or close before the peer takes it */
  int at;        /* its Send's index in the stage's program (evaluation: -1) */
} sk__rt_send;

static int sk__rt_nvstages(const sk_runtime *rt) { return rt->plan->stages * rt->plan->schedule.chunks; }

static sk__rt_slot *sk__rt_slot_at(const sk_runtime *rt, int v, int micro) {
  return &rt->slots[(size_t)micro * (size_t)sk__rt_nvstages(rt) + (size_t)v];
}

static bool sk__rt_vstage_here(const sk_runtime *rt, int v) {
  return sk_pipe_stage_of(&rt->plan->schedule, v, NULL) == rt->stage;
}

/* Whether tensor t crosses the boundary after virtual stage j: an activation produced at or
   before j and read after it. */
static bool sk__rt_crosses(const sk_runtime *rt, int t, int j) {
  const sk_graph_tensor *x = &rt->g->tensors[t];
  if (x->role != SK_TENSOR_VALUE || rt->plan->vstage[x->producer] > j) return false;
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++)
      if (rt->g->ops[o].inputs[k] == t && rt->plan->vstage[o] > j) return true;
  return false;
}

/* Which chunk's slot holds each activation on this stage: its producer's, or the first chunk
   here it crosses into. */
static void sk__rt_pipe_owners(sk_runtime *rt) {
  const sk_graph *g = rt->g;
  for (int t = 0; t < g->ntensors; t++) rt->owner[t] = -1;
  for (int v = 0; v < sk__rt_nvstages(rt); v++) {
    if (!sk__rt_vstage_here(rt, v)) continue;
    for (int t = 0; t < g->ntensors; t++) {
      if (rt->owner[t] >= 0 || g->tensors[t].role != SK_TENSOR_VALUE) continue;
      if (rt->plan->vstage[g->tensors[t].producer] == v || (v > 0 && sk__rt_crosses(rt, t, v - 1))) rt->owner[t] = v;
    }
  }
}

static sk_result sk__rt_pipe_open(sk_runtime *rt, sk_comm *world, sk_error *err) {
  rt->world = world;
  rt->stage = sk_parallel_stage_of_rank(rt->plan, sk_comm_rank(world));
  sk_comm *stage = NULL;
  sk_result r = sk_comm_split(world, rt->stage, sk_comm_rank(world), &stage);
  if (!r) r = sk_comm_split(world, 0, sk_comm_rank(world), &rt->fwd_link);
  if (!r) r = sk_comm_split(world, 0, sk_comm_rank(world), &rt->bwd_link);
  if (r) return sk_comm_destroy(stage), sk__fail(err, r, "runtime: pipeline: splitting the stages: %s", sk_comm_error_message(world));
  rt->comm = stage, rt->rank = sk_comm_rank(stage);
  size_t nt = (size_t)rt->g->ntensors + 1, no = (size_t)rt->g->nops + 1, m = (size_t)rt->plan->micro;
  size_t nslots = m * (size_t)sk__rt_nvstages(rt);
  rt->owner = (int *)calloc(nt, sizeof(int));
  rt->feeds = (void **)calloc(m * nt, sizeof(void *));
  rt->slots = (sk__rt_slot *)calloc(nslots, sizeof(sk__rt_slot));
  for (size_t i = 0; rt->slots && i < nslots; i++) {
    sk__rt_slot *sl = &rt->slots[i];
    sl->values = (void **)calloc(nt, sizeof(void *)), sl->grads = (void **)calloc(nt, sizeof(void *));
    sl->written = (bool *)calloc(nt, sizeof(bool)), sl->pre_rs = (void **)calloc(no, sizeof(void *));
    sl->kin = (void **)calloc(no * SK_OP_MAX_INPUTS, sizeof(void *));
    sl->kout = (void **)calloc(no * SK_OP_MAX_OUTPUTS, sizeof(void *)), sl->dkout = (void **)calloc(no * SK_OP_MAX_OUTPUTS, sizeof(void *));
    if (!sl->values || !sl->grads || !sl->written || !sl->pre_rs || !sl->kin || !sl->kout || !sl->dkout)
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory");
  }
  if (!rt->owner || !rt->feeds || !rt->slots) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory");
  sk__rt_pipe_owners(rt);
  return SK_OK;
}

/* Every micro-batch's slice of each input an operator here reads. */
static sk_result sk__rt_pipe_alloc_feeds(sk_runtime *rt, sk_error *err) {
  for (int t = 0; t < rt->g->ntensors; t++) {
    if (rt->g->tensors[t].role != SK_TENSOR_INPUT || !sk__rt_read_here(rt, t)) continue;
    for (int i = 0; i < rt->plan->micro; i++)
      if (!(rt->feeds[(size_t)i * (size_t)rt->g->ntensors + (size_t)t] = sk__rt_alloc(rt, SK__RT_ACTS, sk__rt_bytes(rt, t))))
        return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory for input '%s'", rt->g->tensors[t].name);
  }
  return SK_OK;
}

static void sk__rt_slot_close(sk_runtime *rt, sk__rt_slot *sl) {
  for (int t = 0; t < rt->g->ntensors; t++) {
    sk__rt_counted_free(rt, sl->values[t]), sk__rt_counted_free(rt, sl->grads[t]);
    sl->values[t] = sl->grads[t] = NULL, sl->written[t] = false;
  }
  for (int o = 0; o < rt->g->nops; o++) {
    for (int k = 0; k < SK_OP_MAX_INPUTS; k++) {
      sk__rt_counted_free(rt, sl->kin[o * SK_OP_MAX_INPUTS + k]);
      sl->kin[o * SK_OP_MAX_INPUTS + k] = NULL;
    }
    for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++) {
      sk__rt_counted_free(rt, sl->kout[o * SK_OP_MAX_OUTPUTS + k]), sk__rt_counted_free(rt, sl->dkout[o * SK_OP_MAX_OUTPUTS + k]);
      sl->kout[o * SK_OP_MAX_OUTPUTS + k] = sl->dkout[o * SK_OP_MAX_OUTPUTS + k] = NULL;
    }
    sk__rt_counted_free(rt, sl->pre_rs[o]), sl->pre_rs[o] = NULL;
  }
  sl->live = false;
}

/* Chunk v's buffers for one micro-batch: its tensors (and their gradients), its operators'
   moved inputs and pre-ReduceScatter outputs. */
static sk_result sk__rt_slot_open(sk_runtime *rt, int v, int micro, sk_error *err) {
  sk__rt_slot *sl = sk__rt_slot_at(rt, v, micro);
  const sk_graph *g = rt->g;
  bool ok = true;
  for (int t = 0; t < g->ntensors && ok; t++) {
    if (rt->owner[t] != v) continue;
    ok = (sl->values[t] = sk__rt_alloc(rt, SK__RT_ACTS, sk__rt_bytes(rt, t))) != NULL;
    if (ok && rt->plan->tensors[t].needs_grad) ok = (sl->grads[t] = sk__rt_alloc(rt, SK__RT_GRADS, sk__rt_bytes(rt, t))) != NULL;
  }
  for (int o = 0; o < g->nops && ok; o++) {
    if (rt->plan->vstage[o] != v) continue;
    const sk_parallel_op *po = &rt->plan->ops[o];
    for (int k = 0; k < g->ops[o].ninputs && ok; k++)
      if (po->moved[k])
        ok = (sl->kin[o * SK_OP_MAX_INPUTS + k] = sk__rt_alloc(rt, SK__RT_ACTS, (size_t)sk__rt_count(&po->kernel_in[k]) *
                                                                               sk_dtype_size(sk__rt_dtype(rt, g->ops[o].inputs[k])))) != NULL;
    for (int k = 0; k < g->ops[o].noutputs && ok; k++) {
      if (!po->out_moved[k]) continue;
      int t = g->ops[o].outputs[k];
      size_t b = (size_t)sk__rt_count(&po->plan.out[k]) * sk_dtype_size(sk__rt_dtype(rt, t));
      ok = (sl->kout[o * SK_OP_MAX_OUTPUTS + k] = sk__rt_alloc(rt, SK__RT_ACTS, b)) != NULL;
      if (ok && rt->plan->tensors[t].needs_grad) ok = (sl->dkout[o * SK_OP_MAX_OUTPUTS + k] = sk__rt_alloc(rt, SK__RT_GRADS, b)) != NULL;
    }
    if (ok && rt->ops[o].pre_rs_count)
      ok = (sl->pre_rs[o] = sk__rt_alloc(rt, SK__RT_ACTS, (size_t)rt->ops[o].pre_rs_count *
                                                            sk_dtype_size(sk__rt_dtype(rt, g->ops[o].outputs[0])))) != NULL;
  }
  sl->live = true;
  if (ok) return SK_OK;
  sk__rt_slot_close(rt, sl);
  return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory for micro-batch %d of chunk %d", micro, v);
}

/* Points the runtime's tensors at micro-batch `micro`'s buffers: each activation at its
   owner's slot, each input at its feed, each operator here at its chunk's slot. */
static void sk__rt_pipe_bind(sk_runtime *rt, int micro) {
  const sk_graph *g = rt->g;
  rt->micro = micro;
  for (int t = 0; t < g->ntensors; t++) {
    if (rt->owner[t] >= 0) {
      sk__rt_slot *sl = sk__rt_slot_at(rt, rt->owner[t], micro);
      rt->values[t] = sl->values[t], rt->grads[t] = sl->grads[t], rt->written[t] = sl->written[t];
    } else if (g->tensors[t].role == SK_TENSOR_INPUT) {
      rt->values[t] = rt->feeds[(size_t)micro * (size_t)g->ntensors + (size_t)t];
    } else continue;
    rt->args[t].data = rt->values[t];
  }
  for (int o = 0; o < g->nops; o++) {
    if (!sk_parallel_op_on_stage(rt->plan, o, rt->stage)) continue;
    sk__rt_slot *sl = sk__rt_slot_at(rt, rt->plan->vstage[o], micro);
    sk__rt_op *ro = &rt->ops[o];
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      ro->kin[k] = sl->kin[o * SK_OP_MAX_INPUTS + k];
      ro->karg[k].data = rt->plan->ops[o].moved[k] ? ro->kin[k] : rt->values[g->ops[o].inputs[k]];
    }
    for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++)
      ro->kout[k] = sl->kout[o * SK_OP_MAX_OUTPUTS + k], ro->dkout[k] = sl->dkout[o * SK_OP_MAX_OUTPUTS + k];
    ro->pre_rs = sl->pre_rs[o];
  }
}

/* Keeps what the runtime learned about the micro-batch's gradients in their slots. */
static void sk__rt_pipe_unbind(sk_runtime *rt, int micro) {
  for (int t = 0; t < rt->g->ntensors; t++)
    if (rt->owner[t] >= 0) sk__rt_slot_at(rt, rt->owner[t], micro)->written[t] = rt->written[t];
}

/* The device at this device's place in the stage holding virtual stage v. */
static int sk__rt_pipe_peer(const sk_runtime *rt, int v) {
  return sk_pipe_stage_of(&rt->plan->schedule, v, NULL) * rt->plan->desc.ndevices + rt->rank;
}


static sk__rt_send *sk__rt_send_at(sk_runtime *rt, int at) {
  for (int i = 0; i < rt->nsends; i++)
    if (rt->sends[i].at == at) return &rt->sends[i];
  return NULL;
}


/* A Send's staging copy: taken by the Alloc step just before it, given back after its WaitSend. */
static sk_result sk__rt_staging(sk_runtime *rt, int at, size_t bytes, sk_error *err) {
  if (rt->nsends == rt->sends_cap) {
    int cap = rt->sends_cap ? 2 * rt->sends_cap : 16;
    sk__rt_send *ns = (sk__rt_send *)realloc(rt->sends, (size_t)cap * sizeof *ns);
    if (!ns) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory sending");
    rt->sends = ns, rt->sends_cap = cap;
  }
  sk__rt_send *s = &rt->sends[rt->nsends];
  s->req = NULL, s->at = at;
  if (!(s->staging = sk__rt_alloc(rt, SK__RT_COMM, bytes))) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory for a send's copy");
  rt->nsends++;
  return SK_OK;
}


static void sk__rt_staging_free(sk_runtime *rt, int at) {
  sk__rt_send *s = sk__rt_send_at(rt, at);
  if (!s) return;
  sk__rt_counted_free(rt, s->staging);
  *s = rt->sends[--rt->nsends];
}

/* Waits for every send in flight and frees its copy: after a step or an evaluation, failed or
   not, so that no copy is freed while a peer may still read it. */
static sk_result sk__rt_pipe_sends(sk_runtime *rt, sk_error *err) {
  sk_result r = SK_OK;
  for (int i = 0; i < rt->nsends; i++) {
    sk_result q = rt->sends[i].req ? sk_wait(&rt->sends[i].req) : SK_OK;
    if (q && !r) r = sk__fail(err, q, "runtime: pipeline: a send to the next stage: %s", sk_comm_error_message(rt->world));
    sk__rt_counted_free(rt, rt->sends[i].staging);
  }
  rt->nsends = 0;
  return r;
}
/* Evaluation: activation t to the next stage, from a copy freed after the evaluation. */
static sk_result sk__rt_pipe_send(sk_runtime *rt, int peer, int t, sk_error *err) {
  size_t n = (size_t)sk_parallel_slice_count(rt->plan, t), b = sk__rt_bytes(rt, t);
  sk_result r = sk__rt_staging(rt, -1, b, err);
  if (r) return r;
  sk__rt_send *s = &rt->sends[rt->nsends - 1];
  memcpy(s->staging, rt->values[t], b);
  if ((r = sk_isend(rt->fwd_link, s->staging, n, sk__rt_dtype(rt, t), peer, &s->req)) != SK_OK) {
    sk__rt_counted_free(rt, s->staging), rt->nsends--;
    return sk__fail(err, r, "runtime: pipeline: sending '%s': %s", rt->g->tensors[t].name, sk_comm_error_message(rt->fwd_link));
  }
  return SK_OK;
}

/* Before F of chunk v: the activations crossing into it from the previous chunk's stage. */
static sk_result sk__rt_pipe_recv_values(sk_runtime *rt, int v, sk_error *err) {
  if (v == 0 || sk__rt_vstage_here(rt, v - 1)) return SK_OK;
  for (int t = 0; t < rt->g->ntensors; t++) {
    if (!sk__rt_crosses(rt, t, v - 1)) continue;
    sk_result r = sk_recv(rt->fwd_link, rt->values[t], (size_t)sk_parallel_slice_count(rt->plan, t), sk__rt_dtype(rt, t),
                          sk__rt_pipe_peer(rt, v - 1));
    if (r) return sk__fail(err, r, "runtime: pipeline: receiving '%s': %s", rt->g->tensors[t].name, sk_comm_error_message(rt->fwd_link));
  }
  return SK_OK;
}

/* After F of chunk v: the activations crossing out of it, to the next chunk's stage. */
static sk_result sk__rt_pipe_send_values(sk_runtime *rt, int v, sk_error *err) {
  if (v + 1 >= sk__rt_nvstages(rt) || sk__rt_vstage_here(rt, v + 1)) return SK_OK;
  sk_result r = SK_OK;
  for (int t = 0; t < rt->g->ntensors && !r; t++)
    if (sk__rt_crosses(rt, t, v)) r = sk__rt_pipe_send(rt, sk__rt_pipe_peer(rt, v + 1), t, err);
  return r;
}
/* Chunk v's forward steps (evaluation: the training step runs the stage's program). */
static sk_result sk__rt_pipe_run(sk_runtime *rt, int v, sk_error *err) {
  sk_result r = SK_OK;
  for (int i = 0; i < rt->nforward && !r; i++) {
    const sk_parallel_step *s = &rt->plan->steps[i];
    if (s->op >= 0 && rt->plan->vstage[s->op] == v) r = sk__rt_named(rt, i, sk__rt_run_step(rt, i, true, err), err);
  }
  return r;
}

static bool sk__rt_pipe_has_loss(const sk_runtime *rt, int v) {
  int p = rt->g->tensors[rt->g->loss].producer;
  return p >= 0 && rt->plan->vstage[p] == v;
}
/* Evaluation: chunk v's forward for micro-batch `micro`, between its Recv and Send. */
static sk_result sk__rt_pipe_forward(sk_runtime *rt, int v, int micro, sk_error *err) {
  sk_result r = sk__rt_slot_open(rt, v, micro, err);
  if (r) return r;
  sk__rt_pipe_bind(rt, micro);
  r = sk__rt_pipe_recv_values(rt, v, err);
  if (!r) r = sk__rt_pipe_run(rt, v, err);
  if (!r) r = sk__rt_pipe_send_values(rt, v, err);
  sk__rt_pipe_unbind(rt, micro);
  return r;
}

/* Inference through the pipeline: every micro-batch forward, chunk after chunk; the last
   stage's devices score its logits; with output_broadcast every device gets their counts, else
   the other stages' devices report no rows (MindSpore's output_broadcast=False). */
static sk_result sk__rt_pipe_evaluate(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err) {
  int last = sk__rt_nvstages(rt) - 1;
  double counts[2] = {0, 0};
  sk_result r = SK_OK;
  for (int i = 0; i < rt->plan->micro && !r; i++) {
    for (int v = 0; v <= last && !r; v++)
      if (sk__rt_vstage_here(rt, v)) r = sk__rt_pipe_forward(rt, v, i, err);
    if (!r && sk__rt_vstage_here(rt, last)) {
      int64_t hits = 0, n = 0;
      sk__rt_pipe_bind(rt, i);
      r = sk__rt_score(rt, &hits, &n, err);
      counts[0] += (double)hits, counts[1] += (double)n;
    }
    for (int v = 0; v <= last; v++) /* no backward follows: one micro-batch held at a time */
      if (sk__rt_slot_at(rt, v, i)->live) sk__rt_slot_close(rt, sk__rt_slot_at(rt, v, i));
  }
  r = sk__rt_settle(rt, r, err);
  sk__rt_pipe_unpoint(rt);
  sk__rt_release_all(rt); /* hsdp: no backward follows */
  if (!r && rt->plan->desc.output_broadcast) { /* the last stage's first device speaks for it */
    if (!sk__rt_vstage_here(rt, last) || rt->rank != 0) counts[0] = counts[1] = 0;
    if ((r = sk_allreduce(rt->world, counts, counts, 2, SK_F64, SK_SUM)))
      r = sk__fail(err, r, "runtime: pipeline: broadcasting the last stage's score: %s", sk_comm_error_message(rt->world));
  }
  if (!r) *correct = (int64_t)counts[0], *rows = (int64_t)counts[1];
  return r;
}

/* A micro-batch's rows of each input, fed whole: micro-batch i reads rows [i*B/m, (i+1)*B/m). */
static sk_result sk__rt_pipe_feed(sk_runtime *rt, int input, sk_dtype dt, const void *global, sk_error *err) {
  if (!sk__rt_read_here(rt, input)) return SK_OK;
  size_t per = (size_t)sk_graph_numel(rt->g, input), count = (size_t)sk_parallel_slice_count(rt->plan, input);
  rt->kind = SK__RT_HOST;
  void *tmp = sk__rt_counted_alloc(rt, count * sk_dtype_size(dt) + 1, 64);
  sk_result r = tmp ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: feed '%s': out of memory", rt->g->tensors[input].name);
  for (int i = 0; i < rt->plan->micro && !r; i++) {
    const char *rows = (const char *)global + (size_t)i * per * sk_dtype_size(dt);
    void *to = rt->feeds[(size_t)i * (size_t)rt->g->ntensors + (size_t)input];
    r = sk__rt_take_slice(sk_dtype_size(dt), &rt->plan->tensors[input].layout, rt->rank, rows, tmp, err);
    if (!r) r = sk__rt_convert(dt, tmp, sk__rt_dtype(rt, input), to, count, err);
    if (!r && sk_exec_is_float(rt->g->tensors[input].dtype)) sk__rt_store(rt, to, (int64_t)count);
  }
  sk__rt_counted_free(rt, tmp);
  return r;
}

/* The runtime's tensors let go of the slots and feeds they were bound to (they own neither). */
static void sk__rt_pipe_unpoint(sk_runtime *rt) {
  for (int t = 0; rt->world && t < rt->g->ntensors; t++)
    if (rt->owner[t] >= 0 || rt->g->tensors[t].role == SK_TENSOR_INPUT) rt->values[t] = rt->grads[t] = rt->args[t].data = NULL;
  for (int o = 0; rt->world && o < rt->g->nops; o++) {
    for (int k = 0; k < SK_OP_MAX_INPUTS; k++) rt->ops[o].kin[k] = NULL, rt->ops[o].karg[k].data = NULL;
    for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++) rt->ops[o].kout[k] = rt->ops[o].dkout[k] = NULL;
    rt->ops[o].pre_rs = NULL;
  }
}

static void sk__rt_pipe_close(sk_runtime *rt) {
  if (!rt->world) return;
  if (rt->sends) (void)sk__rt_pipe_sends(rt, NULL);
  size_t n = (size_t)rt->plan->micro * (size_t)sk__rt_nvstages(rt);
  for (size_t i = 0; rt->slots && i < n; i++) {
    sk__rt_slot *sl = &rt->slots[i];
    if (sl->values && sl->grads && sl->written && sl->kin && sl->pre_rs && sl->kout && sl->dkout) sk__rt_slot_close(rt, sl);
    free(sl->values), free(sl->grads), free(sl->written), free(sl->kin), free(sl->pre_rs), free(sl->kout), free(sl->dkout);
  }
  for (size_t i = 0; rt->feeds && i < (size_t)rt->plan->micro * (size_t)rt->g->ntensors; i++) sk__rt_counted_free(rt, rt->feeds[i]);
  free(rt->slots), free(rt->feeds), free(rt->owner), free(rt->sends);
  sk_comm_destroy(rt->fwd_link), sk_comm_destroy(rt->bwd_link);
  sk_comm_destroy(rt->comm); /* this stage's, split from the world */
}

/* ---- recomputed tensors without a pipeline: their buffers live within a step (the program's
   Alloc and Free steps, sk_program.h) ---------------------------------------------------------- */

static sk_result sk__rt_hold_value(sk_runtime *rt, int t, sk_error *err) {
  void *v = sk__rt_alloc(rt, SK__RT_ACTS, sk__rt_bytes(rt, t));
  if (!v) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory for '%s'", rt->g->tensors[t].name);
  sk__rt_point(rt, t, v);
  return SK_OK;
}

static void sk__rt_drop_value(sk_runtime *rt, int t) {
  sk__rt_counted_free(rt, rt->values[t]);
  sk__rt_point(rt, t, NULL);
}

static void sk__rt_drop_recomputed(sk_runtime *rt) {
  for (int t = 0; t < rt->g->ntensors; t++)
    if (rt->recomputed[t] && rt->values[t]) sk__rt_drop_value(rt, t);
}

/* ---- the program, step by step --------------------------------------------------------------------
   A training step runs the device's program, plan->programs[stage] (sk_program.h), with or without
   a pipeline: its Alloc and Free steps take and give back the buffers that live within a step
   (a pipeline's slots, recomputed tensors), its Send, WaitSend and Recv steps move what crosses a
   stage boundary, and its operator steps run on the micro-batch's buffers, bound on demand. */

/* The slot pointer a pipeline's Alloc or Free step names. */
static void **sk__rt_slot_ref(sk_runtime *rt, const sk_program_step *ps) {
  sk__rt_slot *sl = sk__rt_slot_at(rt, ps->vstage, ps->micro);
  switch (ps->buffer) {
    case SK_PBUF_VALUE: return &sl->values[ps->tensor];
    case SK_PBUF_GRAD: return &sl->grads[ps->tensor];
    case SK_PBUF_KERNEL_IN: return &sl->kin[ps->op * SK_OP_MAX_INPUTS + ps->slot];
    case SK_PBUF_KERNEL_OUT: return &sl->kout[ps->op * SK_OP_MAX_OUTPUTS + ps->slot];
    case SK_PBUF_KERNEL_DOUT: return &sl->dkout[ps->op * SK_OP_MAX_OUTPUTS + ps->slot];
    case SK_PBUF_PRE_RS: return &sl->pre_rs[ps->op];
    default: return NULL;
  }
}

/* The tensors let go of the micro-batch they point at, keeping what they learned of its
   gradients: its buffers are about to change. */
static void sk__rt_prog_unbind(sk_runtime *rt) {
  if (rt->bound >= 0) sk__rt_pipe_unbind(rt, rt->bound);
  rt->bound = -1;
}

/* The tensors point at micro-batch m's buffers (again, after an Alloc or Free). */
static void sk__rt_prog_bind(sk_runtime *rt, int m) {
  if (!rt->world || rt->bound == m) return;
  sk__rt_prog_unbind(rt);
  sk__rt_pipe_bind(rt, m);
  rt->bound = m;
}

static sk_result sk__rt_prog_alloc(sk_runtime *rt, int i, const sk_program_step *ps, sk_error *err) {
  sk_dtype dt = sk_exec_is_float(ps->dtype) ? rt->cdt : ps->dtype;
  size_t bytes = (size_t)ps->count * sk_dtype_size(dt);
  if (ps->buffer == SK_PBUF_STAGING) return sk__rt_staging(rt, i + 1, bytes, err);
  if (!rt->world) return sk__rt_hold_value(rt, ps->tensor, err); /* a recomputed tensor */
  void **at = sk__rt_slot_ref(rt, ps);
  sk__rt_prog_unbind(rt);
  if (!at || *at) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: program step %d: a buffer allocated twice", i);
  int kind = ps->buffer == SK_PBUF_GRAD || ps->buffer == SK_PBUF_KERNEL_DOUT ? SK__RT_GRADS : SK__RT_ACTS;
  if (!(*at = sk__rt_alloc(rt, kind, bytes)))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: pipeline: out of memory for micro-batch %d of chunk %d", ps->micro,
                    ps->vstage);
  sk__rt_slot_at(rt, ps->vstage, ps->micro)->live = true;
  return SK_OK;
}

/* Evaluation keeps the logits to be scored. */
static void sk__rt_prog_free(sk_runtime *rt, const sk_program_step *ps, bool inference) {
  if (ps->buffer == SK_PBUF_STAGING) {
    sk__rt_staging_free(rt, ps->send);
    return;
  }
  if (!rt->world) {
    if (!(inference && ps->tensor == rt->g->logits)) sk__rt_drop_value(rt, ps->tensor);
    return;
  }
  void **at = sk__rt_slot_ref(rt, ps);
  if (!at) return;
  sk__rt_prog_unbind(rt);
  sk__rt_counted_free(rt, *at), *at = NULL;
  if (ps->buffer == SK_PBUF_GRAD) sk__rt_slot_at(rt, ps->vstage, ps->micro)->written[ps->tensor] = false;
}

static sk_result sk__rt_prog_send(sk_runtime *rt, int i, const sk_program_step *ps, sk_error *err) {
  int t = ps->tensor;
  sk__rt_send *s = sk__rt_send_at(rt, i);
  sk_comm *link = ps->grad ? rt->bwd_link : rt->fwd_link;
  if (!s) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: program step %d: a Send without its copy", i);
  size_t n = (size_t)ps->count, b = n * sk_dtype_size(sk__rt_dtype(rt, t));
  const void *from = ps->grad ? (rt->written[t] ? rt->grads[t] : NULL) : rt->values[t];
  if (from) memcpy(s->staging, from, b);
  else memset(s->staging, 0, b); /* a crossing tensor no gradient reached: zero, so the streams stay paired */
  if (ps->grad) rt->written[t] = false; /* what was sent comes back with the rest through the chunks between */
  sk_result r = sk_isend(link, s->staging, n, sk__rt_dtype(rt, t), ps->peer * rt->plan->desc.ndevices + rt->rank, &s->req);
  if (r) return sk__fail(err, r, "runtime: pipeline: sending '%s': %s", rt->g->tensors[t].name, sk_comm_error_message(link));
  sk__rt_count_comm(rt, SK_COLL_SEND, link, b);
  return SK_OK;
}

static sk_result sk__rt_prog_recv(sk_runtime *rt, const sk_program_step *ps, sk_error *err) {
  int t = ps->tensor, peer = ps->peer * rt->plan->desc.ndevices + rt->rank;
  sk_comm *link = ps->grad ? rt->bwd_link : rt->fwd_link;
  bool add = ps->grad && rt->written[t]; /* beside the gradient already there, then summed in */
  void *to = !ps->grad ? rt->values[t] : add ? rt->scratch[0] : rt->grads[t];
  sk_result r = sk_recv(link, to, (size_t)ps->count, ps->grad ? rt->cdt : sk__rt_dtype(rt, t), peer);
  if (r) return sk__fail(err, r, "runtime: pipeline: receiving %s'%s': %s", ps->grad ? "the gradient of " : "",
                         rt->g->tensors[t].name, sk_comm_error_message(link));
  if (add) sk__rt_add(rt->cdt, rt->grads[t], to, ps->count);
  if (ps->grad) rt->written[t] = true;
  return SK_OK;
}

static sk_result sk__rt_prog_wait(sk_runtime *rt, const sk_program_step *ps, sk_error *err) {
  sk__rt_send *s = sk__rt_send_at(rt, ps->send);
  sk_result r = s && s->req ? sk_wait(&s->req) : SK_OK;
  return r ? sk__fail(err, r, "runtime: pipeline: a send to the next stage: %s", sk_comm_error_message(rt->world)) : SK_OK;
}

/* The loss's value summed, its gradient seeded: d loss / d loss times the plan's seed
   (no_loss_repeated_mean), over the micro-batches' or the micro-steps' mean. */
static void sk__rt_prog_seed(sk_runtime *rt, double *sum) {
  int lt = rt->g->loss;
  const void *l = rt->values[lt];
  *sum += rt->cdt == SK_F64 ? ((const double *)l)[0] : ((const float *)l)[0];
  double seed = (rt->plan->loss_grad_scale > 0 ? rt->plan->loss_grad_scale : 1) / rt->plan->micro / rt->accum;
  for (int64_t j = 0; j < sk_parallel_slice_count(rt->plan, lt); j++)
    if (rt->cdt == SK_F64) ((double *)rt->grads[lt])[j] = seed;
    else ((float *)rt->grads[lt])[j] = (float)seed;
  rt->written[lt] = true;
}

/* Program step i; *sum gathers the micro-batches' losses. The Update is the caller's. */
static sk_result sk__rt_prog_step(sk_runtime *rt, int i, bool inference, double *sum, sk_error *err) {
  const sk_program_step *ps = &rt->plan->programs[rt->stage].steps[i];
  switch (ps->kind) {
    case SK_PSTEP_ALLOC: return sk__rt_prog_alloc(rt, i, ps, err);
    case SK_PSTEP_FREE: return sk__rt_prog_free(rt, ps, inference), SK_OK;
    case SK_PSTEP_WAIT_SEND: return sk__rt_prog_wait(rt, ps, err);
    case SK_PSTEP_UPDATE: return SK_OK;
    default: break;
  }
  sk__rt_prog_bind(rt, ps->micro);
  if (ps->kind == SK_PSTEP_SEND) return sk__rt_prog_send(rt, i, ps, err);
  if (ps->kind == SK_PSTEP_RECV) return sk__rt_prog_recv(rt, ps, err);
  if (ps->kind == SK_PSTEP_SEED_LOSS) return sk__rt_prog_seed(rt, sum), SK_OK;
  rt->grads_only = ps->half;
  sk_result r = sk__rt_named(rt, ps->index, sk__rt_run_step(rt, ps->index, inference, err), err);
  rt->grads_only = 0;
  return r;
}

/* After a step or an evaluation, failed or not: nothing in flight, every buffer that lives
   within a step given back. */
static sk_result sk__rt_settle(sk_runtime *rt, sk_result r, sk_error *err) {
  sk_error e2;
  sk_result w = sk__rt_pipe_sends(rt, r ? &e2 : err);
  size_t n = rt->world ? (size_t)rt->plan->micro * (size_t)sk__rt_nvstages(rt) : 0;
  for (size_t i = 0; i < n; i++)
    if (rt->slots[i].live) sk__rt_slot_close(rt, &rt->slots[i]);
  if (!rt->world) sk__rt_drop_recomputed(rt);
  rt->bound = -1;
  return r ? r : w;
}

/* One training step: the device's program, then the update; *loss (the whole batch's, the mean
   of the micro-batches') on every device. */
static sk_result sk__rt_train_step(sk_runtime *rt, double *loss, sk_error *err) {
  const sk_program *pg = &rt->plan->programs[rt->stage];
  double sum = 0;
  sk_result r = SK_OK;
  memset(rt->written, 0, (size_t)rt->g->ntensors * sizeof(bool)); /* gradients' sums start */
  for (int t = 0; t < rt->g->ntensors; t++) rt->shards[t].micros = 0;
  rt->bound = -1;
  for (int i = 0; i < pg->nsteps && !r; i++) r = sk__rt_prog_step(rt, i, false, &sum, err);
  r = sk__rt_settle(rt, r, err);
  sk__rt_pipe_unpoint(rt); /* the update reads parameters only */
  if (!r) r = sk__rt_update(rt, err);
  if (r || !rt->world) return r || !loss ? r : (*loss = sum, SK_OK);
  double all = sk__rt_pipe_has_loss(rt, sk__rt_nvstages(rt) - 1) && sk__rt_vstage_here(rt, sk__rt_nvstages(rt) - 1) && rt->rank == 0
                   ? sum / rt->plan->micro : 0;
  if ((r = sk_allreduce(rt->world, &all, &all, 1, SK_F64, SK_SUM))) /* the loss on every stage */
    return sk__fail(err, r, "runtime: pipeline: sharing the loss: %s", sk_comm_error_message(rt->world));
  if (loss) *loss = all;
  return SK_OK;
}

SK_API sk_result sk_runtime_step(sk_runtime *rt, double *loss, sk_error *err) {
  if (!rt) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: NULL runtime");
  double t0 = sk__rt_now_s(), c0 = sk_comm_clock_us(rt->world ? rt->world : rt->comm);
  rt->counting = true;
  sk_result r = sk__rt_train_step(rt, loss, err);
  rt->counting = false;
  if (r) return r;
  rt->step++, rt->stats.steps++;
  rt->stats.step_s += sk__rt_now_s() - t0, rt->stats.clock_us += sk_comm_clock_us(rt->world ? rt->world : rt->comm) - c0;
  return SK_OK;
}

/* Evaluation without a pipeline: the program's forward part, up to the loss's seed. */
static sk_result sk__rt_plain_evaluate(sk_runtime *rt, sk_error *err) {
  const sk_program *pg = &rt->plan->programs[0];
  sk_result r = SK_OK;
  double sum = 0;
  for (int i = 0; i < pg->nsteps && !r && pg->steps[i].kind != SK_PSTEP_SEED_LOSS; i++)
    r = sk__rt_prog_step(rt, i, true, &sum, err);
  return r;
}

/* ---- evaluation and reading tensors ----------------------------------------------------------- */

SK_API sk_result sk_runtime_gather(sk_runtime *rt, int t, void *full, sk_error *err) {
  if (!rt || !full || t < 0 || t >= rt->g->ntensors)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: gather: NULL runtime or buffer, or tensor %d", t);
  if (rt->world && !rt->values[t] && !rt->shards[t].data) /* a shard: this stage's parameter */
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: gather: '%s' is not held by pipeline stage %d",
                    rt->g->tensors[t].name, rt->stage);
  if (rt->recomputed[t])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: gather: '%s' is recomputed: it is not held between steps",
                    rt->g->tensors[t].name);
  const sk_layout *l = &rt->plan->tensors[t].layout;
  const sk__rt_shard *sh = &rt->shards[t];
  int64_t n = sk_parallel_slice_count(rt->plan, t);
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = *l, rd.dtype = sk__rt_dtype(rt, t), rd.allocator = rt->counted;
  sk_result r = sk_layout_init(&rd.to, &l->mesh, l->ndims, l->shape, NULL, err);
  rt->kind = SK__RT_HOST;
  void *slice = sh->data ? sk__rt_counted_alloc(rt, sk__rt_bytes(rt, t), 64) : rt->values[t]; /* a shard: gathered first */
  if (!r && !slice) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: gather: out of memory");
  if (!r && sh->data && (r = sk_allgather(sh->gather, sh->data, slice, (size_t)sh->count, rt->cdt)))
    r = sk__rt_comm_failed(rt, sh->gather, r, err);
  rt->kind = SK__RT_HOST;
  if (!r) r = sk_redist(rt->comm, &rd, slice, (size_t)n, full, (size_t)sk_graph_numel(rt->g, t), err);
  if (sh->data) sk__rt_counted_free(rt, slice);
  return r;
}

static int64_t sk__rt_argmax_hits(const sk_runtime *rt, const void *logits, const void *labels, int64_t rows, int64_t c) {
  sk_dtype lt = rt->g->tensors[rt->g->labels].dtype;
  int64_t hits = 0;
  for (int64_t i = 0; i < rows; i++) {
    int64_t best = 0;
    for (int64_t j = 1; j < c; j++) {
      double a = rt->cdt == SK_F64 ? ((const double *)logits)[i * c + j] : ((const float *)logits)[i * c + j];
      double b = rt->cdt == SK_F64 ? ((const double *)logits)[i * c + best] : ((const float *)logits)[i * c + best];
      best = a > b ? j : best;
    }
    int64_t label = lt == SK_I64 ? ((const int64_t *)labels)[i] : ((const int32_t *)labels)[i];
    hits += best == label;
  }
  return hits;
}

SK_API sk_result sk_runtime_evaluate(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err) {
  if (!rt || !correct || !rows) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: evaluate: NULL argument");
  const sk_graph *g = rt->g;
  if (g->logits < 0 || g->labels < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: evaluate: the network has no eval");
  if (rt->world) return sk__rt_pipe_evaluate(rt, correct, rows, err);
  sk_result r = SK_OK;
  r = sk__rt_plain_evaluate(rt, err);
  sk__rt_release_all(rt); /* no backward follows */
  if (!r) r = sk__rt_score(rt, correct, rows, err);
  sk__rt_drop_recomputed(rt);
  return r;
}

SK_API void sk_runtime_memory_get(const sk_runtime *rt, sk_runtime_memory *m) {
  if (!m) return;
  memset(m, 0, sizeof *m);
  if (!rt) return;
  m->parameters = rt->bytes[SK__RT_PARAMS], m->gradients = rt->bytes[SK__RT_GRADS];
  m->optimizer_state = rt->bytes[SK__RT_STATE], m->activations = rt->bytes[SK__RT_ACTS];
  m->communication = rt->bytes[SK__RT_COMM], m->host = rt->bytes[SK__RT_HOST];
  m->peak_parameters = rt->peak[SK__RT_PARAMS], m->peak_gradients = rt->peak[SK__RT_GRADS];
  m->peak_optimizer_state = rt->peak[SK__RT_STATE], m->peak_activations = rt->peak[SK__RT_ACTS];
  m->peak_communication = rt->peak[SK__RT_COMM], m->peak_host = rt->peak[SK__RT_HOST], m->peak = rt->peak_total;
}

SK_API int64_t sk_runtime_steps(const sk_runtime *rt) { return rt ? rt->step : 0; }

/* Under a pipeline each stage broadcasts its own parameters among its devices, as MindSpore's
   parameter_broadcast does on each stage with the stage's initial_rank (see the declaration):
   comm is then the stage's, and its rank r is world rank stage * n + r. */
SK_API sk_result sk_runtime_parameter_broadcast(sk_runtime *rt, int cur_rank, int initial_rank, sk_error *err) {
  if (!rt) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: parameter_broadcast: NULL runtime");
  const sk_graph *g = rt->g;
  sk_bcast_param *ps = (sk_bcast_param *)calloc((size_t)g->ntensors + 1, sizeof *ps);
  int n = 0;
  for (int t = 0; ps && t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_PARAM || !sk__rt_holds(rt, t)) continue; /* another stage's */
    const sk__rt_shard *sh = &rt->shards[t];
    sk_bcast_param *p = &ps[n++];
    p->name = g->tensors[t].name, p->layout = rt->plan->tensors[t].layout;
    p->opt_shard_size = rt->plan->tensors[t].opt_size, p->dtype = rt->cdt;
    p->data = sh->data ? sh->data : rt->values[t];
    p->count = (size_t)(sh->data ? sh->count : sk_parallel_slice_count(rt->plan, t));
  }
  int stage_start = sk_comm_rank(sk__rt_everyone(rt)) - rt->rank; /* 0 without a pipeline */
  if (cur_rank < 0) cur_rank = rt->rank + (initial_rank >= 0 ? initial_rank : stage_start);
  sk_result r = ps ? sk_parameter_broadcast(rt->comm, n, ps, cur_rank, initial_rank, err)
                   : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: parameter_broadcast: out of memory");
  free(ps);
  return r;
}

SK_API void sk_runtime_stats_get(const sk_runtime *rt, sk_runtime_stats *st) {
  if (!st) return;
  if (rt) *st = rt->stats;
  else memset(st, 0, sizeof *st);
}

/* ==== checkpoints ========================================================================== */

/* A window of gradient accumulation is open: its sums would be lost. */
static sk_result sk__rt_ckpt_window(const sk_runtime *rt, sk_error *err) {
  if (rt->step % rt->accum)
    return sk__fail(err, SK_ERR_INVALID_USAGE, "runtime: step %lld is inside a gradient accumulation window of %d",
                    (long long)rt->step, rt->accum);
  return SK_OK;
}

SK_API sk_result sk_runtime_param_slice(sk_runtime *rt, int t, sk_runtime_slice_kind kind, sk_runtime_slice *out,
                                        sk_error *err) {
  if (!rt || !out || t < 0 || t >= rt->g->ntensors || rt->g->tensors[t].role != SK_TENSOR_PARAM ||
      (int)kind < 0 || kind > SK_RUNTIME_STATE1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: param_slice: NULL, not a parameter (%d) or a bad kind", t);
  sk_result r = sk__rt_ckpt_window(rt, err);
  if (r) return r;
  const sk_parallel_tensor *pt = &rt->plan->tensors[t];
  const sk__rt_shard *sh = &rt->shards[t];
  memset(out, 0, sizeof *out);
  out->dtype = rt->cdt;
  if ((r = sk_layout_slice(&pt->layout, rt->rank, &out->box, err))) return r;
  out->count = sk_parallel_slice_count(rt->plan, t);
  if (sh->data) { /* the shard: rows_start..rows_stop of dim 0, as the runtime allocated it */
    sk_opt_shard os;
    if ((r = sk_opt_shard_of(&pt->layout, rt->g->tensors[t].dtype, &rt->plan->desc.hsdp, rt->rank, &os, err))) return r;
    out->box.start[0] = os.rows_start, out->box.stop[0] = os.rows_stop, out->count = sh->count;
  }
  out->data = kind == SK_RUNTIME_VALUES ? (sh->data ? sh->data : rt->values[t])
              : kind == SK_RUNTIME_STATE0 ? rt->state0[t] : rt->state1[t];
  if (!out->data) out->count = 0;
  return SK_OK;
}

SK_API sk_result sk_runtime_set_steps(sk_runtime *rt, int64_t steps, sk_error *err) {
  if (!rt || steps < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: set_steps: NULL runtime or negative steps");
  if (steps % rt->accum)
    return sk__fail(err, SK_ERR_INVALID_USAGE, "runtime: step %lld is inside a gradient accumulation window of %d",
                    (long long)steps, rt->accum);
  rt->step = steps;
  return SK_OK;
}
/* ==== end of checkpoints ================================================================== */

SK_EXTERN_C_END
#endif /* SK_RUNTIME_IMPL */
