/* sk_runtime.h -- AutoParallel's runtime: runs a compiled program (sk_parallel.h) on every
   device of a world, forward, backward, optimizer, and evaluates.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_RUNTIME_IMPL + the modules it includes)
                             #include "sk_runtime.h"
   Needs only libc and libm, and a backend (threads, MPI: the same program on either).

   HOW IT RUNS
     Every device calls sk_runtime_create with its communicator (collective: it creates the
     groups, the redistribution executors and the fusion scheduler the program needs), then per
     step sk_runtime_feed for each network input (the GLOBAL batch: each device keeps its slice),
     then sk_runtime_step (collective). A step runs the device's program, the plan's
     programs[stage] (sk_program.h: the same engine with a pipeline or without), step by step and
     deciding nothing the program says: its Alloc and Free steps take and give back the buffers
     that live within a step, its Send, WaitSend and Recv steps move what crosses a pipeline
     stage, its operator steps run moves through sk_redist.h, operators through sk_exec.h and
     collectives through sk_comm.h, each on the communicator of the plan group it names (one per
     id, made at create). The Mirror AllReduces of parameters read once go to the fusion
     scheduler (sk_fusion.h) in the buckets the program's Fused steps name, and the update
     waits for them; optimizer parallel's gathers and ReduceScatters run where the program
     places them. Initial parameters are the single-device trainer's (sk_graph_init_params
     with the same seed), each device keeping its slice, so N devices start from the model one
     device starts from; a constant (a number operand) is whole on every device reading it. A
     frozen parameter (requires_grad false) has no gradient, Mirror or optimizer state and is
     never updated; the local norms leave it out.

   THE PLAN'S KNOBS (sk_autoparallel; docs/auto-parallel.md)
     dtype, optim, seed   the run's numbers (DTYPES below; the optimizer, resolved as
                          sk_optim_resolve does; the initial model's and dropout's seed)
     seed_by_rank         device r draws its initial model from seed + r (the world's rank)
     cluster              device_flops: each operator reports its FLOPs' time to the world's
                          virtual clock (sk_comm_compute); the clock's links are the world's
                          (sk_world_desc.cluster, the same struct)
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
     (sk_runtime_memory); the redistribution executors, the fusion schedulers, feed staging,
     temporaries and the local norms allocate through it too and are counted as host (the
     library's bookkeeping, kept out of peak); communication is the 16-bit wire buffer and
     gradient shadows (the fused Mirrors', the sharded gradients'), the packed BackwardComm
     buffer, all taken at create, and a pipeline Send's staging copy (its Alloc to the Free
     after its WaitSend). An output out_strategy moves (MoveOut)
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

   THE PARTS: sk_runtime.h holds the API, the engine and create; its implementation includes, in
     order, sk_rt_core.h (accounting, a device's tensors, the groups, the moves), sk_rt_setup.h
     (what create prepares), sk_rt_steps.h (the operator steps), sk_rt_hsdp.h (optimizer
     parallel), sk_rt_run.h (one plan step, and the update) and sk_rt_pipe.h (a pipeline's
     buffers).

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

/* What one device brings to its runtime; zero-initialise (NULL: every default). The run's
   numbers (dtype, optimizer, seed) and the cluster model are the configuration's
   (sk_autoparallel), read from the plan. */
typedef struct sk_runtime_desc {
  const sk_kernel_ctx *kernels; /* the GEMM hook (NULL: the built-in GEMM) */
  sk_allocator alloc;           /* this device's buffers (zero: the C library): a device may
                                   bring its own arena, so it is not the plan's allocator */
} sk_runtime_desc;

/* Bytes a device holds, by kind: now, and the most over the training steps since create
   returned (peak_*: per kind; peak: of the sum of the first five; sk_runtime_evaluate's own
   buffers are not in them). Under optimizer parallel, parameters are the shards
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
     (the bubble modelled), and step_us the modelled step time: each step starts with every
     device's clock aligned to the latest (sk_comm_clock_align) and lasts until the last device
     ends it, the same on every device (under gradient accumulation a step is one micro-step, so
     step_us over a whole window's steps gives the window's mean). */
  double step_s, busy_s, clock_us, compute_us, step_us;
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
   run's dtype (floats) or the graph's (integers). A parameter, the logits and the labels gather
   over the plan's communicators; another tensor's gather splits its own for the call. */
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
  uint64_t seed; /* the plan's (zero there: 1) */
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
  sk_fusion *ag;      /* level1 / level2: this step's gathers, from the first member to WaitFused */
  int64_t scored[2];  /* an evaluation's Score steps so far: rows whose argmax is the label, rows */
  int accum;          /* grad_accumulation_step (1: none) */
  void **acc;         /* per parameter: its gradient accumulated over the micro-steps (NULL: none) */
  bool overlap;       /* transformer_opt.grad_computation_allreduce_overlap */
  sk_dtype wire;      /* forward AllReduce / ReduceScatter and BackwardComm on the wire */
  sk_dtype mirror_wire; /* the gradient sync on the wire: Mirrors, sharded ReduceScatters, partial Mirrors */
  void *wire_buf;     /* 16-bit copies of reduced buffers, and packed BackwardComm gradients */
  int64_t wire_count; /* its elements (of the compute dtype), as the create section gives them */
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
static sk_result sk__rt_pipe_feed(sk_runtime *rt, int input, sk_dtype dt, const void *global, sk_error *err);
static void sk__rt_pipe_unpoint(sk_runtime *rt);
static void sk__rt_pipe_close(sk_runtime *rt);
static bool sk__rt_is_forward(sk_parallel_step_kind k);

#define SK_RUNTIME_IMPL_BODY /* the parts below are this implementation, in order */
SK_EXTERN_C_END
#include "sk_rt_core.h"
#include "sk_rt_setup.h"
#include "sk_rt_steps.h"
#include "sk_rt_hsdp.h"
#include "sk_rt_run.h"
#include "sk_rt_pipe.h"
SK_EXTERN_C_BEGIN

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
  if (ps->buffer == SK_PBUF_GATHERED) return sk__rt_hold(rt, ps->tensor, err);
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
  if (ps->buffer == SK_PBUF_GATHERED) {
    sk__rt_release(rt, ps->tensor);
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
  sk_result r = sk_isend(link, s->staging, n, sk__rt_dtype(rt, t), ps->peer * rt->plan->desc.ndevices + rt->rank, &s->req, NULL);
  if (r) return sk__fail(err, r, "runtime: pipeline: sending '%s': %s", rt->g->tensors[t].name, sk_comm_error_message(link));
  sk__rt_count_comm(rt, SK_COLL_SEND, link, b);
  return SK_OK;
}

static sk_result sk__rt_prog_recv(sk_runtime *rt, const sk_program_step *ps, sk_error *err) {
  int t = ps->tensor, peer = ps->peer * rt->plan->desc.ndevices + rt->rank;
  sk_comm *link = ps->grad ? rt->bwd_link : rt->fwd_link;
  bool add = ps->grad && rt->written[t]; /* beside the gradient already there, then summed in */
  void *to = !ps->grad ? rt->values[t] : add ? rt->scratch[0] : rt->grads[t];
  sk_result r = sk_recv(link, to, (size_t)ps->count, ps->grad ? rt->cdt : sk__rt_dtype(rt, t), peer, NULL);
  if (r) return sk__fail(err, r, "runtime: pipeline: receiving %s'%s': %s", ps->grad ? "the gradient of " : "",
                         rt->g->tensors[t].name, sk_comm_error_message(link));
  if (add) sk__rt_add(rt->cdt, rt->grads[t], to, ps->count);
  if (ps->grad) rt->written[t] = true;
  return SK_OK;
}

static sk_result sk__rt_prog_wait(sk_runtime *rt, const sk_program_step *ps, sk_error *err) {
  sk__rt_send *s = sk__rt_send_at(rt, ps->send);
  sk_result r = s && s->req ? sk_wait(&s->req, NULL) : SK_OK;
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

/* The input tensor of plan step i (a step on an operator's input slot). */
static int sk__rt_step_input(const sk_runtime *rt, int i) {
  const sk_parallel_step *s = &rt->plan->steps[i];
  return rt->g->ops[s->op].inputs[s->slot];
}

/* Score: the bound micro-batch's logits against its labels, added to rt->scored. */
static sk_result sk__rt_prog_score(sk_runtime *rt, sk_error *err) {
  int64_t hits = 0, n = 0;
  sk_result r = sk__rt_score(rt, &hits, &n, err);
  if (!r) rt->scored[0] += hits, rt->scored[1] += n;
  return r;
}

/* Program step i of pg; *sum gathers the micro-batches' losses; *more turns false where a micro-step
   of grad accumulation ends (GradsReady). The Update is the caller's. */
static sk_result sk__rt_prog_step(sk_runtime *rt, const sk_program *pg, int i, bool inference, double *sum, bool *more,
                                  sk_error *err) {
  const sk_program_step *ps = &pg->steps[i];
  switch (ps->kind) {
    case SK_PSTEP_ALLOC: return sk__rt_prog_alloc(rt, i, ps, err);
    case SK_PSTEP_FREE: return sk__rt_prog_free(rt, ps, inference), SK_OK;
    case SK_PSTEP_WAIT_SEND: return sk__rt_prog_wait(rt, ps, err);
    case SK_PSTEP_FUSED: return sk__rt_prog_fused(rt, ps, err);
    case SK_PSTEP_WAIT_FUSED: return sk__rt_prog_wait_fused(rt, ps, err);
    case SK_PSTEP_GRADS_READY: return sk__rt_grads_ready(rt, more), SK_OK;
    case SK_PSTEP_SHARD_MIRROR: return sk__rt_prog_shard_mirror(rt, ps->tensor, err);
    case SK_PSTEP_UPDATE: return SK_OK;
    default: break;
  }
  sk_parallel_step_kind k = ps->kind == SK_PSTEP_RECOMPUTE ? rt->plan->steps[ps->index].kind : ps->kind;
  if (k == SK_PSTEP_PARAM_GATHER) /* into the slice its Alloc took */
    return sk__rt_named(rt, ps->index, sk__rt_prog_gather(rt, sk__rt_step_input(rt, ps->index), ps->bucket, err), err);
  if (k == SK_PSTEP_PARAM_RELEASE) return SK_OK; /* the Free after it gives the slice back */
  sk__rt_prog_bind(rt, ps->micro);
  if (ps->kind == SK_PSTEP_SEND) return sk__rt_prog_send(rt, i, ps, err);
  if (ps->kind == SK_PSTEP_RECV) return sk__rt_prog_recv(rt, ps, err);
  if (ps->kind == SK_PSTEP_SEED_LOSS) return sk__rt_prog_seed(rt, sum), SK_OK;
  if (ps->kind == SK_PSTEP_SCORE) return sk__rt_prog_score(rt, err);
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
  if (r) { /* a failed step: no bucket stays in flight, the schedulers ready for the next */
    if (rt->fusion) (void)sk_fusion_wait(rt->fusion, NULL);
    if (rt->rs_fusion) (void)sk_fusion_wait(rt->rs_fusion, NULL);
  }
  sk_fusion_destroy(rt->ag); /* waits for what it launched */
  rt->ag = NULL;
  sk__rt_release_all(rt); /* a failed step's gathered slices */
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
  bool more = true;
  for (int i = 0; i < pg->nsteps && !r && more; i++)
    if (!pg->steps[i].last || sk__rt_last_micro(rt)) r = sk__rt_prog_step(rt, pg, i, false, &sum, &more, err);
  r = sk__rt_settle(rt, r, err);
  sk__rt_pipe_unpoint(rt); /* the update reads parameters only */
  if (!r && more) r = sk__rt_update(rt, err);
  if (r || !rt->world) return r || !loss ? r : (*loss = sum, SK_OK);
  double all = sk__rt_pipe_has_loss(rt, sk__rt_nvstages(rt) - 1) && sk__rt_vstage_here(rt, sk__rt_nvstages(rt) - 1) && rt->rank == 0
                   ? sum / rt->plan->micro : 0;
  if ((r = sk_allreduce(rt->world, &all, &all, 1, SK_F64, SK_SUM, NULL))) /* the loss on every stage */
    return sk__fail(err, r, "runtime: pipeline: sharing the loss: %s", sk_comm_error_message(rt->world));
  if (loss) *loss = all;
  return SK_OK;
}

/* Aligns the clocks of every device of the step (free: see sk_comm_clock_align). */
static sk_result sk__rt_align(sk_comm *all, sk_error *err) {
  sk_result r = all ? sk_comm_clock_align(all, NULL) : SK_OK;
  return r ? sk__fail(err, r, "runtime: aligning the virtual clocks: %s", sk_comm_error_message(all)) : SK_OK;
}

/* A step that failed here leaves its peers waiting for this device (in a collective of the
   step, or in the closing alignment): the world goes down with its message, so they return
   SK_ERR_ABORTED now, not at the world's timeout. A step aborted by a peer's failure already
   did; a world of one device waits for nobody. */
static sk_result sk__rt_step_failed(sk_comm *all, sk_result r, const sk_error *err) {
  if (r != SK_ERR_ABORTED && sk_comm_size(all) > 1)
    sk_world_fail(sk_comm_world(all), r, err && err->msg[0] ? err->msg : sk_result_name(r));
  return r;
}

/* The step between two clock alignments: the first gives every device the step's start, the
   second the latest end, so the difference is the step's makespan on every device. */
SK_API sk_result sk_runtime_step(sk_runtime *rt, double *loss, sk_error *err) {
  if (!rt) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: NULL runtime");
  sk_comm *all = rt->world ? rt->world : rt->comm;
  sk_result r = sk__rt_align(all, err);
  if (r) return r;
  double t0 = sk__rt_now_s(), c0 = sk_comm_clock_us(all);
  rt->counting = true;
  r = sk__rt_train_step(rt, loss, err);
  rt->counting = false;
  double c1 = sk_comm_clock_us(all); /* this device's end */
  if (r) return sk__rt_step_failed(all, r, err);
  if ((r = sk__rt_align(all, err))) return r;
  rt->step++, rt->stats.steps++;
  rt->stats.step_s += sk__rt_now_s() - t0, rt->stats.clock_us += c1 - c0;
  rt->stats.step_us += sk_comm_clock_us(all) - c0;
  return SK_OK;
}

/* Inference through the pipeline: the stage's evaluation program (plan.evals: every micro-batch
   forward, chunk after chunk; Score on the last stage); with output_broadcast every device gets
   the last stage's counts, else the other stages' devices report no rows (MindSpore's
   output_broadcast=False). */
static sk_result sk__rt_pipe_evaluate(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err) {
  const sk_program *pg = &rt->plan->evals[rt->stage];
  int last = sk__rt_nvstages(rt) - 1;
  sk_result r = SK_OK;
  double sum = 0;
  bool more = true;
  rt->scored[0] = rt->scored[1] = 0, rt->bound = -1;
  for (int i = 0; i < pg->nsteps && !r; i++) r = sk__rt_prog_step(rt, pg, i, true, &sum, &more, err);
  r = sk__rt_settle(rt, r, err);
  sk__rt_pipe_unpoint(rt);
  double counts[2] = {(double)rt->scored[0], (double)rt->scored[1]};
  if (!r && rt->plan->desc.output_broadcast) { /* the last stage's first device speaks for it */
    if (!sk__rt_vstage_here(rt, last) || rt->rank != 0) counts[0] = counts[1] = 0;
    if ((r = sk_allreduce(rt->world, counts, counts, 2, SK_F64, SK_SUM, NULL)))
      r = sk__fail(err, r, "runtime: pipeline: broadcasting the last stage's score: %s", sk_comm_error_message(rt->world));
  }
  if (!r) *correct = (int64_t)counts[0], *rows = (int64_t)counts[1];
  return r;
}

/* Evaluation without a pipeline: the program's forward part, up to the loss's seed. */
static sk_result sk__rt_plain_evaluate(sk_runtime *rt, sk_error *err) {
  const sk_program *pg = &rt->plan->programs[0];
  sk_result r = SK_OK;
  double sum = 0;
  bool more = true;
  for (int i = 0; i < pg->nsteps && !r && pg->steps[i].kind != SK_PSTEP_SEED_LOSS; i++)
    r = sk__rt_prog_step(rt, pg, i, true, &sum, &more, err);
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
  if ((!desc->alloc.alloc) != (!desc->alloc.free))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: the allocator needs both alloc and free");
  return SK_OK;
}

/* The wire dtypes: sk_parallel_run_dtypes, the compiler's and the dry run's rule. */
static void sk__rt_setup_wire(sk_runtime *rt) {
  const sk_autoparallel *pd = &rt->plan->desc;
  sk_run_dtypes t = sk_parallel_run_dtypes(pd);
  rt->wire = t.wire, rt->mirror_wire = t.gradient;
  rt->overlap = pd->transformer_opt.grad_computation_allreduce_overlap;
}

/* The per-tensor and per-operator tables, given back and forgotten: after a failed
   sk__rt_alloc_arrays destroy then walks none of them. */
static void sk__rt_free_arrays(sk_runtime *rt) {
  sk__rt_counted_free(rt, rt->values), sk__rt_counted_free(rt, rt->grads), sk__rt_counted_free(rt, rt->state0);
  sk__rt_counted_free(rt, rt->state1), sk__rt_counted_free(rt, rt->written), sk__rt_counted_free(rt, rt->readers);
  sk__rt_counted_free(rt, rt->args), sk__rt_counted_free(rt, rt->ops), sk__rt_counted_free(rt, rt->shards);
  sk__rt_counted_free(rt, rt->acc), sk__rt_counted_free(rt, rt->recomputed);
  rt->values = rt->grads = rt->state0 = rt->state1 = rt->acc = NULL;
  rt->written = rt->recomputed = NULL, rt->readers = NULL, rt->args = NULL, rt->ops = NULL, rt->shards = NULL;
}

static sk_result sk__rt_alloc_arrays(sk_runtime *rt, sk_error *err) {
  size_t n = (size_t)rt->g->ntensors + 1;
  rt->values = (void **)sk__rt_table(rt, n, sizeof(void *)), rt->grads = (void **)sk__rt_table(rt, n, sizeof(void *));
  rt->state0 = (void **)sk__rt_table(rt, n, sizeof(void *)), rt->state1 = (void **)sk__rt_table(rt, n, sizeof(void *));
  rt->written = (bool *)sk__rt_table(rt, n, sizeof(bool)), rt->readers = (int *)sk__rt_table(rt, n, sizeof(int));
  rt->args = (sk_exec_arg *)sk__rt_table(rt, n, sizeof(sk_exec_arg));
  rt->ops = (sk__rt_op *)sk__rt_table(rt, (size_t)rt->g->nops + 1, sizeof(sk__rt_op));
  rt->shards = (sk__rt_shard *)sk__rt_table(rt, n, sizeof(sk__rt_shard));
  rt->acc = (void **)sk__rt_table(rt, n, sizeof(void *));
  rt->recomputed = (bool *)sk__rt_table(rt, n, sizeof(bool));
  if (!rt->values || !rt->grads || !rt->state0 || !rt->state1 || !rt->written || !rt->readers || !rt->args || !rt->ops ||
      !rt->shards || !rt->acc || !rt->recomputed)
    return sk__rt_free_arrays(rt), sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory"); /* all or none */
  for (int t = 0; !rt->plan->vstage && t < rt->g->ntensors; t++) rt->recomputed[t] = sk_parallel_recomputed(rt->plan, t);
  for (int o = 0; o < rt->g->nops; o++)
    for (int k = 0; k < rt->g->ops[o].ninputs; k++) rt->readers[rt->g->ops[o].inputs[k]]++;
  return SK_OK;
}

SK_API void sk_runtime_destroy(sk_runtime *rt) {
  if (!rt) return;
  sk_fusion_destroy(rt->fusion), sk_fusion_destroy(rt->rs_fusion), sk_fusion_destroy(rt->ag);
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
    if (rt->gown[id]) sk_comm_destroy(rt->gcomm[id], NULL);
  if (rt->world && rt->owner && rt->values && rt->ops) sk__rt_pipe_unpoint(rt); /* the tables exist */
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
  sk__rt_free_arrays(rt);
  sk__rt_counted_free(rt, rt->gcomm), sk__rt_counted_free(rt, rt->gown);
  sk_allocator own = rt->desc.alloc; /* rt came from it */
  sk__free(&own, rt);
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
  /* rt itself comes from the device's allocator too, sized as sk__rt_counted_alloc sizes a block
     (a multiple of 64 and a 64-byte header's room) and counted as host once it exists */
  sk_runtime *rt = (sk_runtime *)sk__calloc(&desc->alloc, (sizeof(sk_runtime) + 63) / 64 * 64 + 64, 64);
  if (!rt) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: out of memory");
  rt->bytes[SK__RT_HOST] = sizeof *rt;
  rt->comm = comm, rt->rank = sk_comm_rank(comm), rt->plan = plan, rt->g = plan->graph, rt->desc = *desc;
  rt->cdt = sk_parallel_run_dtypes(&plan->desc).compute, rt->store = plan->desc.dtype;
  sk__rt_setup_wire(rt);
  rt->counted.alloc = sk__rt_counted_alloc, rt->counted.free = sk__rt_counted_free, rt->counted.user = rt;
  rt->seed = plan->desc.seed ? plan->desc.seed : 1;
  rt->accum = plan->desc.grad_accumulation_step > 1 ? plan->desc.grad_accumulation_step : 1;
  r = sk_optim_resolve(&plan->desc.optim, &rt->optim, err);
  rt->optim.lr = (double)(float)rt->optim.lr; /* MindSpore holds learning_rate in a float32 Parameter */
  if (!r) r = sk__rt_alloc_arrays(rt, err);
  if (!r && plan->vstage) r = sk__rt_pipe_open(rt, comm, err);
  if (!r) r = sk__rt_create_buffers(rt, err);
  if (!r) r = sk__rt_create_views(rt, err);
  if (!r) rt->wire_count = sk__rt_created_count(rt, SK_PBUF_WIRE);
  if (!r) r = sk__rt_setup_norms(rt, err);
  if (!r) r = sk__rt_make_groups(rt, err);
  for (int o = 0; o < rt->g->nops && !r; o++) r = sk__rt_setup_op(rt, o, err);
  if (!r) r = sk__rt_setup_shard_groups(rt, err);
  if (!r) sk__rt_setup_bwd_pack(rt);
  if (!r) r = sk__rt_setup_fusion(rt, err);
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


/* ---- evaluation and reading tensors ----------------------------------------------------------- */

SK_API sk_result sk_runtime_gather(sk_runtime *rt, int t, void *full, sk_error *err) {
  if (!rt || !full || t < 0 || t >= rt->g->ntensors)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: gather: NULL runtime or buffer, or tensor %d", t);
  if (rt->world && !rt->values[t] && !rt->shards[t].data) /* a shard: this stage's parameter */
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: gather: '%s' is not held by pipeline stage %d",
                    rt->g->tensors[t].name, rt->stage);
  if (rt->recomputed[t] && !rt->values[t]) /* held from its forward until the step (or evaluation) ends */
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: gather: '%s' is recomputed: it is not held between steps",
                    rt->g->tensors[t].name);
  const sk_layout *l = &rt->plan->tensors[t].layout;
  const sk__rt_shard *sh = &rt->shards[t];
  int64_t n = sk_parallel_slice_count(rt->plan, t);
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = *l, rd.dtype = sk__rt_dtype(rt, t), rd.allocator = rt->counted;
  const sk_graph_tensor *x = &rt->g->tensors[t];
  if (x->role == SK_TENSOR_PARAM || t == rt->g->logits || t == rt->g->labels) /* their groups are the plan's */
    rd.group = sk__rt_move_group, rd.group_ctx = rt; /* (another tensor's gather splits its own for the call) */
  sk_result r = sk_layout_init(&rd.to, &l->mesh, l->ndims, l->shape, NULL, err);
  rt->kind = SK__RT_HOST;
  void *slice = sh->data ? sk__rt_counted_alloc(rt, sk__rt_bytes(rt, t), 64) : rt->values[t]; /* a shard: gathered first */
  if (!r && !slice) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "runtime: gather: out of memory");
  if (!r && sh->data && (r = sk_allgather(sh->gather, sh->data, slice, (size_t)sh->count, rt->cdt, NULL)))
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

static sk_result sk__rt_evaluate(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err) {
  if (rt->world) return sk__rt_pipe_evaluate(rt, correct, rows, err);
  sk_result r = sk__rt_plain_evaluate(rt, err);
  sk__rt_release_all(rt); /* no backward follows */
  if (!r) r = sk__rt_score(rt, correct, rows, err);
  sk__rt_drop_recomputed(rt);
  return r;
}

/* The peaks are training's (sk_runtime_memory): what evaluation holds meanwhile -- its forward
   only, but a pipeline's sends in flight as its clocks let them complete -- is left out, so a
   run's peaks are the plan's, as the dry run walks it. Host bookkeeping keeps its own. */
SK_API sk_result sk_runtime_evaluate(sk_runtime *rt, int64_t *correct, int64_t *rows, sk_error *err) {
  if (!rt || !correct || !rows) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: evaluate: NULL argument");
  const sk_graph *g = rt->g;
  if (g->logits < 0 || g->labels < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "runtime: evaluate: the network has no eval");
  uint64_t peak[SK__RT_KINDS], peak_total = rt->peak_total;
  memcpy(peak, rt->peak, sizeof peak);
  sk_result r = sk__rt_evaluate(rt, correct, rows, err);
  uint64_t now = 0;
  for (int k = 0; k < SK__RT_HOST; k++) rt->peak[k] = peak[k] > rt->bytes[k] ? peak[k] : rt->bytes[k], now += rt->bytes[k];
  rt->peak_total = peak_total > now ? peak_total : now;
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
  sk_bcast_param *ps = (sk_bcast_param *)sk__rt_table(rt, (size_t)g->ntensors + 1, sizeof *ps);
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
  sk__rt_counted_free(rt, ps);
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
