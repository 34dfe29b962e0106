/* sk_parallel.h -- AutoParallel's compiler: a network (sk_graph.h) and a device count in, one
   explicit program out that every device runs on its own slices, like MindSpore's graph after
   its parallel passes (semi_auto_parallel).

   Do this in ONE .c file:   #define SK_IMPL  (or SK_PARALLEL_IMPL + the modules it includes)
                             #include "sk_parallel.h"
   Needs only libc. Pure planning: no world, no buffers; the runtime (sk_runtime.h) runs a plan.

   WHAT IT DECIDES
     - Every operator's strategy: the network's `shard` strategy or layouts, or, where it has
       none, MindSpore's default: data parallel (dim 0 of the first input cut by every device);
       under a search parallel_mode (desc.mode), the strategy the search chose (sk_search.h,
       docs/strategy-search.md), written into the plan's copy of the network.
       A strategy that needs more devices than the plan has (its product exceeds or does not
       divide the count) is replaced by data parallel and counted in nfallbacks (each such
       operator has fell_back set); desc.strict_strategies refuses it instead.
     - Every operator's layouts and collectives: sk_ops.h's rule (sk_op_plan).
     - Every tensor's layout, the layout its buffer has on each device: an operator's output
       keeps the layout its operator produces, or the one its shard's out_strategy asks for
       (sk_ops.h, OUTPUTS: plan.redistributed), which every reader then sees; a network input takes the dataset strategy
       (data_parallel: dim 0 cut over every device, which the global batch must divide;
       full_batch: every device reads the whole batch; or one strategy per input, as
       MindSpore's dataset_strategy tuple); a parameter is stored in the layout its first reader
       wants. A Reshape without a strategy reads its input as that input is cut (the cut of each
       dim), as MindSpore gives a Reshape its predecessor's layout.
     - A move (a redistribution, sk_redist.h) wherever an operator reads a tensor in another
       layout than the tensor's, and in the backward the move of that gradient back.

   THE PROGRAM (the same list on every device; groups and slices differ by rank)
     Forward, in graph order, per operator: MOVE each input that needs it, FORWARD, then
     FORWARD_COMM on output 0 when the rule leaves partial sums (AllReduce, or ReduceScatter),
     then OUT_MOVE for each output out_strategy asks for in another layout (the redistribution
     MindSpore inserts after a Cell's shard outputs).
     Backward, in reverse order, per operator a gradient reaches at an output: OUT_MOVE_BACK of
     each such output's gradient into the rule's layout, UNDO_COMM (an
     AllGather of the output's gradient after a forward ReduceScatter; the scale of a scaled
     AllReduce), BACKWARD, then per input that takes a gradient: BACKWARD_COMM (the rule's bwd_in
     collective), MIRROR for a trainable parameter (its gradient AllReduce over its replicas,
     which the runtime hands to the fusion scheduler; a frozen parameter, requires_grad false,
     takes no gradient, and the rule sees it as no parameter: desc.params, MindSpore's
     is_parameter), MOVE_BACK for a moved input (the gradient returns to
     its tensor's layout; once per moved copy, the gradients of the readers sharing it summed
     first). A tensor read by several operators sums their gradients. Last: UPDATE (the
     optimizer on every parameter's slice, once every Mirror has completed).
     An operator whose outputs do not lead to the loss (a metric, an auxiliary head) has no
     backward steps on any device; a parameter only such operators read keeps a zero gradient,
     with no Mirror, and is updated as on one device (sk_exec_grad_flow says which tensors have
     a gradient).
     Gradients come out exact for the network's loss (the losses divide by the global batch, the
     Mirror sums), so N devices reproduce one device's training; see docs/auto-parallel.md.

   ERRORS: a NULL argument, a graph that is not ready (sk_graph_check), a device count below 1 or
     above SK_MAX_DEVICES, a batch the devices do not divide, an operator's rule refusing its
     strategy (the message starts with the operator's name): SK_ERR_INVALID_ARGUMENT.
     SK_ERR_OUT_OF_MEMORY when an allocation fails (nothing leaks).

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_PARALLEL_IMPL)
#define SK_PARALLEL_IMPL
#endif
#ifndef SK_PARALLEL_H
#define SK_PARALLEL_H

#include "sk_core.h"
#include "sk_exec.h"
#include "sk_fusion.h"
#include "sk_graph.h"
#include "sk_layout.h"
#include "sk_layout_algebra.h"
#include "sk_ops.h"
#include "sk_opt_shard.h"
#include "sk_optim.h"
#include "sk_pipeline.h"
#include "sk_search.h"

SK_EXTERN_C_BEGIN

typedef enum sk_dataset_strategy {
  SK_DATASET_DATA_PARALLEL = 0, /* MindSpore's default: the batch dim cut over every device */
  SK_DATASET_FULL_BATCH         /* every device reads the whole batch */
} sk_dataset_strategy;

/* AutoParallel(net, parallel_mode=...): semi_auto takes the network's strategies (data parallel
   where it has none); the search modes choose a strategy for every operator the network left
   without one (sk_search.h): MindSpore's sharding_propagation and recursive_programming, and
   shardkit's exhaustive (the exact optimum of the same cost model, for small networks). */
typedef enum sk_parallel_mode {
  SK_PARALLEL_SEMI_AUTO = 0,
  SK_PARALLEL_SHARDING_PROPAGATION,
  SK_PARALLEL_RECURSIVE_PROGRAMMING,
  SK_PARALLEL_EXHAUSTIVE
} sk_parallel_mode;

/* MindSpore's comm_fusion dict. Zero: openstate True, every kind auto (64 MB). The runtime hands
   it to the fusion scheduler (sk_fusion.h), whose configs these are; index mode is AllReduce's
   only; size mode counts MB as MindSpore does (the scheduler's mindspore_accounting). */
typedef struct sk_comm_fusion {
  bool closed; /* openstate False: no collective is fused */
  sk_fusion_config allreduce, allgather, reducescatter;
} sk_comm_fusion;

/* The options of MindSpore's transformer_opt (parallel_speed_up.json) shardkit honours; the
   others are refused by name where the file is read (sk_json.h). Zero: MindSpore's default. */
typedef struct sk_transformer_opt {
  bool grad_computation_allreduce_overlap; /* the gradient AllReduces overlap the backward pass */
  bool enable_communication_fusion;        /* see docs/auto-parallel.md */
} sk_transformer_opt;

struct sk_strategy_io_fns; /* below: the strategy-file steps */

/* The parallel configuration: AutoParallel's knobs. Zero-initialise; every zero field is
   MindSpore's default. device_num and global_rank are not here: they are the world's. */
typedef struct sk_autoparallel {
  int ndevices;                /* required: the devices the program runs on */
  sk_parallel_mode mode;       /* parallel_mode: semi_auto */
  /* The modelled cluster (links, device speed and memory), read by the searches' cost model,
     the runtime's compute time and the reports; the world takes the same struct
     (sk_world_desc.cluster) for its virtual clocks. */
  sk_cluster cluster;
  int64_t exhaustive_limit; /* the exhaustive search's work bound (0: 4e9 steps, under a minute) */
  sk_dataset_strategy dataset; /* how network inputs are cut (default data parallel) */
  bool strict_strategies;      /* refuse a strategy that needs more devices, rather than fall back */
  /* MindSpore's dataset_strategy as a tuple of strategies, one per network input in the order the
     inputs were added (ndataset 0: `dataset` above decides): each input is cut as a
     VirtualDataset with that strategy cuts it, the repeat axis on the left. */
  int ndataset;
  int dataset_strategy[SK_OP_MAX_INPUTS][SK_MAX_DIMS];
  int dataset_strategy_len[SK_OP_MAX_INPUTS]; /* entries of tuple i as written (0: input i's rank) */
  /* ... or as a tuple of layouts (ndataset_layouts > 0; not with ndataset): input i's layout, on
     a device matrix of ndevices or of a divisor of it (the repeat axis goes on the left). */
  int ndataset_layouts;
  sk_layout dataset_layouts[SK_OP_MAX_INPUTS];
  bool gradients_mean;        /* enable_gradients_mean: each Mirror divides by its group size */
  bool no_loss_repeated_mean; /* disable_loss_repeated_mean: gradients x the loss's repeat count */
  /* f16 / bf16 runs: gradients travel in 16 bits (disable_gradient_fp32_sync), every reducing
     collective in f32 (enable_fp32_communication). */
  bool no_gradient_fp32_sync, fp32_communication;
  /* The L2 norm of every parameter's gradient slice on every device, one line per step, device
     and parameter ("step device parameter norm"): on stdout (print_local_norm), or in the file
     dump_local_norm names (not printed); device_local_norm adds one line per device over all its
     parameters (parameter column "device"). Written by device 0; under a pipeline every device
     reports the parameters its stage holds. */
  bool print_local_norm, device_local_norm;
  const char *dump_local_norm;
  sk_comm_fusion comm_fusion;
  sk_transformer_opt transformer_opt;
  /* Strategy files (JSON, docs/strategy-files.md), read and written by sk_parallel_compile
     through strategy_io, the reader and writer sk_strategy.h gives (sk_strategy_io()): this
     header needs no JSON library, and a desc naming a file without strategy_io is refused. */
  const char *save_param_strategy_file, *load_param_strategy_file;
  const char *save_operator_strategy_file, *load_operator_strategy_file;
  bool strategy_file_all_params; /* disable_strategy_file_only_for_trainable_params */
  const struct sk_strategy_io_fns *strategy_io;
  /* hsdp(): optimizer parallel (sk_opt_shard.h decides per parameter; zero: off). A parameter
     is sharded only when every operator reads it in its own layout; the threshold counts the
     graph's dtype. */
  sk_hsdp hsdp;
  /* grad_accumulation_step: each runtime step is one micro-step; gradients (their mean) sum over
     this many and the optimizer runs on the last (0 or 1: every step). */
  int grad_accumulation_step;
  /* pipeline(stages, output_broadcast, interleave, scheduler) with micro_size (sk_pipeline.h,
     docs/pipeline.md); zero: no pipeline. Stages > 1 or micro > 1 compile the network of one
     micro-batch (sk_graph_micro) for ndevices / stages devices: stage s is the world's ranks
     [s*n, (s+1)*n), n = ndevices / stages, and each stage's layouts take the same positions
     within it. Operators go to the model's chunks (virtual stages) by their `stage`
     annotations when the annotations count pipeline.stages and each stage holds one chunk;
     otherwise by a cut of the operator sequence balanced by FLOPs (plan.recut). With hsdp the
     shard groups are within a stage (a parameter's data-parallel replicas there; levels 1, 2
     and 3, docs/optimizer-parallel.md). Local norms: each device reports its stage's
     parameters. Not with grad_accumulation_step, which MindSpore refuses too (refused by name;
     sk__par_check_pipeline cites MindSpore's source). */
  sk_pipe_desc pipeline;
  /* The run's numbers. dtype: f32 (zero), f64, or f16 / bf16 (parameters, activations and
     gradients computed in f32; 16-bit gradient wire and shadows as the two flags above say).
     optim: the optimizer (zero: SGD with MindSpore's defaults); the plan lists its states.
     seed: initial parameters and dropout masks (zero: 1); seed_by_rank: device r (the world's
     rank, under a pipeline too) draws its initial model from seed + r, so replicas start apart,
     as before MindSpore's parameter_broadcast. */
  sk_dtype dtype;
  sk_optim_desc optim;
  uint64_t seed;
  bool seed_by_rank;
  bool output_broadcast; /* inference: the last stage's output is broadcast to every stage */
  /* Where the compiler and the plan take their memory (zero: the C library); a device's runtime
     buffers come from its own allocator (sk_runtime_desc.alloc). Every device's runtime looks
     groups up in the plan at create (sk_parallel_find_group, sk_parallel_group_ranks take
     scratch from it), so on the threads backend it must be safe to call from several threads. */
  sk_allocator allocator;
} sk_autoparallel;

typedef enum sk_parallel_step_kind {
  SK_PSTEP_MOVE = 0,      /* input `slot` of `op` moves from its tensor's layout to the operator's */
  SK_PSTEP_FORWARD,       /* the operator on this device's slices */
  SK_PSTEP_FORWARD_COMM,  /* `comm` on output 0 (partial sums: AllReduce, or ReduceScatter) */
  SK_PSTEP_UNDO_COMM,     /* backward of FORWARD_COMM on output 0's gradient (scale; AllGather) */
  SK_PSTEP_BACKWARD,      /* the operator's backward: gradients of its inputs in its layouts */
  SK_PSTEP_BACKWARD_COMM, /* `comm` on input `slot`'s gradient (the rule's bwd_in) */
  SK_PSTEP_MIRROR,        /* a parameter's gradient AllReduce over its replicas */
  SK_PSTEP_MOVE_BACK,     /* input `slot`'s gradient back to its tensor's layout, summed there (with
                             the other readers' of its moved copy: sk_parallel_op.back_op) */
  SK_PSTEP_UPDATE,        /* the optimizer on every parameter slice */
  /* optimizer parallel: input `slot` of `op` is a sharded parameter */
  SK_PSTEP_PARAM_GATHER,  /* AllGather its model-parallel slice from the shards (if not held) */
  SK_PSTEP_PARAM_RELEASE, /* level3: free the gathered slice after the forward */
  SK_PSTEP_GRAD_REDUCE_SCATTER, /* its summed gradient ReduceScattered to the shards (then the
                                   Mirror over the rest of the replicas); the gathered slice freed */
  /* out_strategy: output `slot` of `op`, asked for in another layout than its rule gives */
  SK_PSTEP_OUT_MOVE,      /* moves from the rule's layout (plan.out) to its tensor's (plan.wanted) */
  SK_PSTEP_OUT_MOVE_BACK, /* its gradient from the tensor's layout to the rule's, for the backward */
  /* The rest appear only in a stage's program (sk_program, below), never in plan.steps */
  SK_PSTEP_ALLOC,      /* a buffer's bytes taken (sk_program_buffer), freed by its FREE */
  SK_PSTEP_FREE,
  SK_PSTEP_RECV,       /* pipeline: a tensor (or its gradient) from the device at this one's place in `peer` */
  SK_PSTEP_SEND,       /* ... to it, from a staging copy */
  SK_PSTEP_WAIT_SEND,  /* the SEND at program index `send` is complete: its staging copy freed */
  SK_PSTEP_RECOMPUTE,  /* plan.steps[index], a recomputed operator's forward step, run again */
  SK_PSTEP_SEED_LOSS,  /* the loss's gradient set to its seed (loss_grad_scale / micro-batches) */
  SK_PSTEP_FUSED,      /* fused bucket `bucket` (collective `coll`) launches: its members' steps
                          (Mirror, ParamGather, GradReduceScatter with this `bucket`) are ready */
  SK_PSTEP_WAIT_FUSED, /* every bucket of `coll` complete, its members' data in place */
  SK_PSTEP_GRADS_READY, /* the step's gradients complete: gathered slices released, gradients no
                           backward reached zeroed; under grad_accumulation_step added to their
                           sums (a micro-step but the last ends here) */
  SK_PSTEP_SHARD_MIRROR, /* a partly sharded parameter's gradient shard AllReduced over its replicas */
  SK_PSTEP_SCORE,      /* evaluation: micro-batch `micro`'s logits scored against its labels */
  SK_PSTEP_KIND_COUNT
} sk_parallel_step_kind;

typedef struct sk_parallel_step {
  sk_parallel_step_kind kind;
  int op;         /* the operator (-1: UPDATE) */
  int slot;       /* the input (MOVE, BACKWARD_COMM, MIRROR, MOVE_BACK, PARAM_*, GRAD_REDUCE_SCATTER) or the
                     output (OUT_MOVE, OUT_MOVE_BACK); 0 otherwise */
  sk_op_comm comm; /* FORWARD_COMM, UNDO_COMM, BACKWARD_COMM, MIRROR: on the operator's mesh */
} sk_parallel_step;

/* What an ALLOC / FREE step's buffer holds. */
typedef enum sk_program_buffer {
  SK_PBUF_VALUE = 0,   /* tensor `tensor`'s slice */
  SK_PBUF_GRAD,        /* its gradient */
  SK_PBUF_KERNEL_IN,   /* operator `op`'s input `slot` moved to the kernel's layout */
  SK_PBUF_KERNEL_OUT,  /* its output `slot` in the rule's layout, before the MoveOut */
  SK_PBUF_KERNEL_DOUT, /* that output's gradient */
  SK_PBUF_PRE_RS,      /* its output 0 before the forward ReduceScatter */
  SK_PBUF_STAGING,     /* a SEND's copy of what it sends (freed after its WAIT_SEND) */
  SK_PBUF_GATHERED,    /* optimizer parallel: sharded parameter `tensor`'s slice, gathered (parameters) */
  /* The rest appear only in a program's create section */
  SK_PBUF_SHARD,       /* optimizer parallel: sharded parameter `tensor`'s shard */
  SK_PBUF_SHARD_GRAD,  /* ... and its gradient's shard */
  SK_PBUF_STATE,       /* trainable parameter `tensor`'s optimizer state `slot`: as many as the
                          configuration's optimizer keeps (sk_optim_nstates) */
  SK_PBUF_ACC,         /* grad_accumulation_step: parameter `tensor`'s gradient sum */
  SK_PBUF_SCRATCH,     /* a second gradient of operator inputs at position `slot` (see docs) */
  SK_PBUF_FEED,        /* pipeline: input `tensor` of micro-batch `micro` */
  SK_PBUF_KERNEL_DIN,  /* the gradient of operator `op`'s input `slot` in the kernel's layout */
  SK_PBUF_DY_FULL,     /* the gradient of operator `op`'s output 0 before its forward ReduceScatter */
  /* f16 / bf16 runs (communication): the wire buffer a 16-bit collective or a packed
     BackwardComm converts through (elements of the compute dtype); the fused Mirrors' 16-bit
     gradient shadows, one block; the sharded gradients' 16-bit shadows (slice and shard each),
     one block. The shadows' elements are the run's 16-bit dtype (the step's dtype). */
  SK_PBUF_WIRE,
  SK_PBUF_SHADOWS,
  SK_PBUF_RS_SHADOWS,
  SK_PBUF_COUNT
} sk_program_buffer;

/* What a buffer's bytes count as (sk_runtime_memory's kinds, in its order). */
typedef enum sk_memory_kind {
  SK_MEM_PARAMETERS = 0,
  SK_MEM_GRADIENTS,
  SK_MEM_OPTIMIZER,
  SK_MEM_ACTIVATIONS,
  SK_MEM_COMMUNICATION,
  SK_MEM_KINDS
} sk_memory_kind;

/* One step of a stage's program. Fields a kind does not use are -1 (numbers) or 0 (count). */
typedef struct sk_program_step {
  sk_parallel_step_kind kind;
  int index;     /* the plan.steps entry an operator step or RECOMPUTE runs */
  int op, slot;  /* its operator and slot; an operator buffer's */
  int tensor;    /* SEND, RECV, SEED_LOSS, and ALLOC / FREE of a tensor's value or gradient */
  int micro;     /* the micro-batch (0 without a pipeline) */
  int vstage;    /* the chunk (virtual stage) it belongs to (0 without a pipeline) */
  int peer;      /* SEND, RECV: the other stage */
  int group;     /* the plan group (plan.groups) a communication step uses */
  int buffer;    /* ALLOC, FREE: sk_program_buffer */
  int send;      /* WAIT_SEND: its SEND's index in this program */
  int half;      /* zero_bubble_v's split backward: 1 for B's steps (inputs' gradients), 2 for W's */
  bool grad;     /* SEND, RECV: a gradient (the backward stream) rather than an activation */
  int64_t count; /* elements: of an ALLOC'd buffer, a SEND / RECV, a collective's buffer as
                    nccl-tests sizes it; 0 for a step that moves nothing */
  sk_dtype dtype; /* of those elements: the graph's (a float: the run's, sk_program_bytes) */
  int bucket;     /* a fused collective's bucket: its member steps' and its FUSED step's; -1 */
  sk_coll_kind coll; /* FUSED, WAIT_FUSED: the collective */
  bool last;      /* under grad_accumulation_step: runs on the last micro-step only */
} sk_program_step;

/* What one pipeline stage's devices run for one training step, in order (without a pipeline the
   whole plan is stage 0). The same for every device of the stage: groups, peers and slices are
   functions of the rank. */
typedef struct sk_program {
  int nsteps;
  sk_program_step *steps;
  /* The create section: the buffers a device of the stage allocates when its runtime is created
     and holds for the run, an ALLOC step each (no FREE: they go with the runtime). */
  int ncreate;
  sk_program_step *create;
} sk_program;

/* A communicator the plan's steps use, by id ("g3"): which devices form it is a function of the
   rank (sk_parallel_group_ranks). */
typedef enum sk_plan_group_kind {
  SK_PGROUP_WORLD = 0,  /* every device */
  SK_PGROUP_STAGE,      /* a pipeline stage's devices (the world without a pipeline) */
  SK_PGROUP_LINK_FWD,   /* pipeline: the world again, for activations between stages */
  SK_PGROUP_LINK_BWD,   /* ... and for their gradients, so the two streams never cross */
  SK_PGROUP_MESH,       /* a stage's devices split along `axes` of `mesh` */
  SK_PGROUP_OPT_GATHER, /* optimizer parallel: `tensor`'s shard group */
  SK_PGROUP_OPT_MIRROR  /* ... and the replicas left after sharding */
} sk_plan_group_kind;

typedef struct sk_plan_group {
  sk_plan_group_kind kind;
  sk_mesh mesh;  /* SK_PGROUP_MESH */
  uint32_t axes;
  int tensor;    /* SK_PGROUP_OPT_*: a parameter whose shard groups these are */
} sk_plan_group;

/* What the compiler decided for one operator. */
typedef struct sk_parallel_op {
  sk_op_desc desc;    /* as planned: shapes, and the strategy it used */
  sk_op_plan plan;    /* sk_ops.h's layouts and collectives */
  bool fell_back;     /* its strategy needed more devices: data parallel replaced it */
  /* The layout the operator's kernel reads input k in (sk_op_kernel_layout): plan.in[k], except
     that Reshape's kernel reads it whole on the axes its output does not use. */
  sk_layout kernel_in[SK_OP_MAX_INPUTS];
  bool moved[SK_OP_MAX_INPUTS]; /* input k is read in another layout than its tensor's */
  /* A moved input k reads the copy that operator move_op[k]'s input move_slot[k] moved: its own
     (o, k), or the first earlier reader of the same tensor moved to the same layout, so a tensor
     is moved to a layout once per step (without a pipeline, whose slots are per operator).
     Only the owner has a Move step and a kernel_in buffer; each reader keeps its own gradient
     buffer, and one MoveBack carries their sum (back_op). -1 when not moved. */
  int move_op[SK_OP_MAX_INPUTS], move_slot[SK_OP_MAX_INPUTS];
  /* The slot whose one MoveBack carries input k's gradient back: the first reader of the shared
     copy, in graph order, whose backward writes a gradient for it (its backward runs last).
     The readers' gradients are summed there in the moved layout, so a copy moved for several
     readers moves back once, as autodiff of one redistribution with several users does. -1
     when input k writes no gradient to move back. */
  int back_op[SK_OP_MAX_INPUTS], back_slot[SK_OP_MAX_INPUTS];
  /* output k's kernel writes plan.out[k] and its tensor is plan.wanted[k] (out_strategy asked
     for it): an OUT_MOVE after the forward, an OUT_MOVE_BACK of its gradient before the backward */
  bool out_moved[SK_OP_MAX_OUTPUTS];
  int replication[SK_OP_MAX_INPUTS]; /* parameters: the Mirror's divisor (see docs) */
  /* parameters: the factor the Mirror applies after its sum: 1, or 1 / its group size under
     desc.gradients_mean (1 where there is no Mirror) */
  double mirror_scale[SK_OP_MAX_INPUTS];
} sk_parallel_op;

typedef struct sk_parallel_tensor {
  sk_layout layout; /* its buffer on each device */
  bool needs_grad;  /* it has a gradient (sk_exec_grad_flow): every parameter, and a tensor a
                       parameter's gradient flows through that the loss's reaches */
  /* optimizer parallel (parameters): the shard count S (0: kept whole), the Mirror group left
     after sharding (|replicas| / S), and why a parameter stays whole ("" when sharded) */
  int opt_size, opt_mirror;
  const char *opt_why;
} sk_parallel_tensor;

typedef struct sk_parallel_plan {
  const sk_graph *graph; /* the caller's (borrowed: it must outlive the plan), or micro_graph */
  sk_autoparallel desc;
  sk_parallel_op *ops;         /* graph->nops */
  sk_parallel_tensor *tensors; /* graph->ntensors */
  int nsteps;
  sk_parallel_step *steps;
  int nfallbacks;
  /* The loss's gradient seed: 1 (MindSpore's loss_repeated_mean divides the repeated loss's
     gradient by its repeat count, which exact gradients already are), or under
     desc.no_loss_repeated_mean that repeat count: the devices holding the same loss slice. */
  double loss_grad_scale;
  /* Pipeline parallel (desc.pipeline): `graph` is then the network of one micro-batch (owned
     by the plan) and desc.ndevices the devices of one stage. Without it: stages and micro 1,
     world_devices desc.ndevices, vstage NULL. */
  int world_devices; /* every stage's devices: desc.ndevices x stages */
  int stages, micro;
  int *vstage;       /* [nops]: each operator's virtual stage, its chunk's place in the model */
  bool recut;        /* the network's stage annotations were set but not used: the cut is by FLOPs */
  sk_pipe_schedule schedule;
  sk_graph *micro_graph; /* the graph the plan owns (one micro-batch's; a searched copy; the copy
                            a strategy file was loaded into), or NULL */
  /* A search mode: the searched plan's cost in the model's unit (sk_search_cost.h), the
     search's wall time, and searched[o]: operator o's strategy came from the search. */
  double search_cost, search_ms;
  bool *searched;
  /* What each device runs: programs[stage] (sk_program.h), and the communicators they name. */
  sk_program *programs; /* [stages] */
  sk_program *evals;    /* [stages] under a pipeline: what evaluation runs (every micro-batch's
                           forwards, then Score on the last stage); NULL without one */
  int ngroups;
  sk_plan_group *groups;
} sk_parallel_plan;

/* Whether input k of operator o runs its own Move (and holds the kernel_in buffer it writes),
   rather than reading an earlier reader's copy of the same tensor in the same layout. */
SK__INLINE bool sk_parallel_owns_move(const sk_parallel_plan *p, int o, int k) {
  const sk_parallel_op *po = &p->ops[o];
  return po->moved[k] && po->move_op[k] == o && po->move_slot[k] == k;
}

/* The strategy-file steps sk_parallel_compile runs when a desc names a file; sk_strategy.h's
   sk_strategy_io() is the table (docs/strategy-files.md). `desc` is the caller's, its file
   names set. */
typedef struct sk_strategy_io_fns {
  /* load_operator_strategy_file: the file's strategies and stages into g (the plan's copy of the
     network), its dataset strategy, stage count and hsdp into *desc; on failure neither changes. */
  sk_result (*load_operators)(const char *path, sk_graph *g, sk_autoparallel *desc, sk_error *err);
  /* After compiling: the operators' stages against load_operator_strategy_file, the parameter
     layouts and optimizer shards against load_param_strategy_file. */
  sk_result (*check)(const sk_parallel_plan *plan, const sk_autoparallel *desc, sk_error *err);
  /* save_param_strategy_file and save_operator_strategy_file (one file when the paths match). */
  sk_result (*save)(const sk_parallel_plan *plan, const sk_autoparallel *desc, sk_error *err);
} sk_strategy_io_fns;

/* Compiles g for desc->ndevices devices into *plan (the caller's; free with sk_parallel_free).
   With strategy files (desc->strategy_io set): loads the operator file into the plan's own copy
   of g, compiles, checks the loaded files against the plan, saves; g is never changed. On any
   failure *plan is empty. */
SK_API sk_result sk_parallel_compile(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *plan,
                                     sk_error *err);
/* What sk_parallel_compile checks first, the knobs that need no network (the device count, the
   modes, comm_fusion, hsdp, grad_accumulation_step, the pipeline's and what it does not combine
   with): a program can refuse a configuration before it loads or trains anything. */
SK_API sk_result sk_parallel_check(const sk_autoparallel *desc, sk_error *err);
SK_API void sk_parallel_free(sk_parallel_plan *plan);
/* The dtypes a run computes and communicates in, one rule for the compiler's buffers, the runtime
   and the dry run: `compute` f64 for f64 runs, else f32 (f16 / bf16 are stored 16-bit and
   computed in f32); `wire`, what the reducing collectives travel in: the stored 16-bit dtype
   unless fp32_communication, else compute; `gradient`, the gradient sync (the Mirrors, the
   sharded gradients' ReduceScatters and partial Mirrors): f32 (MindSpore's gradient_fp32_sync)
   unless no_gradient_fp32_sync, and then not under fp32_communication. NULL: a default f32 run. */
typedef struct sk_run_dtypes {
  sk_dtype compute, wire, gradient;
} sk_run_dtypes;
SK_API sk_run_dtypes sk_parallel_run_dtypes(const sk_autoparallel *desc);

/* The kernels' sharding facts for operator `op` on device `rank`, as the operator's row computes
   them (sk_optable_kernels.h; seed and inference are the runtime's to set). */
SK_API sk_result sk_parallel_facts(const sk_parallel_plan *plan, int op, int rank, sk_exec_facts *facts, sk_error *err);
/* What the plan's gradient knobs do to each parameter's gradient, for a single-device reference
   that is to train like the plan: scales[o * SK_OP_MAX_INPUTS + k] is the factor on the
   gradient parameter input k of operator o contributes (loss_grad_scale x mirror_scale[k]; 1
   for every other input). `scales` holds graph->nops * SK_OP_MAX_INPUTS doubles. */
SK_API void sk_parallel_grad_scales(const sk_parallel_plan *plan, double *scales);
/* Pipeline parallel: the stage of world rank `rank` (0 without pipeline), and whether operator
   op runs there. */
SK_API int sk_parallel_stage_of_rank(const sk_parallel_plan *plan, int rank);
SK_API bool sk_parallel_op_on_stage(const sk_parallel_plan *plan, int op, int stage);
/* Recomputation (the operators flagged `recompute`): whether tensor t is freed after the forward
   and computed again, by its operator's forward steps, before the backward reads it: an output
   of a flagged operator, not the loss, that only its own pipeline chunk reads (every reader,
   without a pipeline). sk_parallel_recompute_refusal: why flagged operator op recomputes none of
   its outputs ("its output is the loss", ...), or NULL (it does, or it is not flagged). */
SK_API bool sk_parallel_recomputed(const sk_parallel_plan *plan, int tensor);
SK_API const char *sk_parallel_recompute_refusal(const sk_parallel_plan *plan, int op);
/* The element count of tensor t's slice on every device (layouts cut evenly). */
SK_API int64_t sk_parallel_slice_count(const sk_parallel_plan *plan, int tensor);
/* Whether two layouts give every device the same slice (compared rank by rank, whatever the meshes). */
SK_API bool sk_parallel_same_layout(const sk_layout *a, const sk_layout *b);
/* Device `rank`'s program as text, one line per step, with its groups as rank lists and its
   slices; snprintf convention. Under pipeline parallel, rank counts the world's devices and the
   program is its stage's: the steps of the operators its chunks hold. */
SK_API size_t sk_parallel_format_program(const sk_parallel_plan *plan, int rank, char *buf, size_t cap);
SK_API const char *sk_parallel_step_name(sk_parallel_step_kind kind); /* "Move", "Forward", ... */
/* The world ranks of plan group `group` that world rank `rank` belongs to (ascending; at most cap,
   *n their count); SK_ERR_INVALID_ARGUMENT for a group or rank out of range. */
SK_API sk_result sk_parallel_group_ranks(const sk_parallel_plan *plan, int group, int rank, int *ranks, int cap, int *n,
                                         sk_error *err);
/* The id of the plan's group that splits the devices as *want does (another mesh or parameter
   that groups them alike shares it; without a pipeline the stage is the world), -1 when none
   does, -2 when the lookup ran out of memory (the plan's allocator). */
SK_API int sk_parallel_find_group(const sk_parallel_plan *plan, const sk_plan_group *want);
/* A program step's bytes in a run of dtype `run` (the configuration's): its count times its
   element size, a float's being the run's compute dtype (f64, else f32: f16 and bf16 runs
   compute in f32), a 16-bit shadow block's its own dtype. */
SK_API uint64_t sk_program_bytes(const sk_program_step *step, sk_dtype run);
/* The kind an ALLOC step's buffer counts as (a parameter's value or shard and a gathered slice:
   parameters; an activation's value, a feed, a kernel's input or output: activations; a
   gradient, its sum or shard, scratch: gradients; optimizer states; a Send's staging copy:
   communication). */
/* "value", "grad", ..., "dy_full" ("?" if unknown): what --dump-program prints as buffer=. */
SK_API const char *sk_parallel_buffer_name(sk_program_buffer buffer);
SK_API sk_memory_kind sk_program_memory_kind(const sk_parallel_plan *plan, const sk_program_step *step);
/* Every operator's strategy, one line each: its name and the strategy in MindSpore's tuple
   syntax, "fc1 ((2, 1), (1, 4))" -- as set (by the network or a search) or, for an operator
   without one, the cuts its rule's default gave its inputs; "(layouts)" for layouts; then
   " out ((8, 1),)" or " out (layouts)" for an out_strategy. */
SK_API size_t sk_parallel_format_strategies(const sk_parallel_plan *plan, char *buf, size_t cap);
/* "semi_auto", "sharding_propagation", "recursive_programming", "exhaustive" ("?" if unknown) */
SK_API const char *sk_parallel_mode_name(sk_parallel_mode mode);

SK_EXTERN_C_END
#endif /* SK_PARALLEL_H */

#if defined(SK_PARALLEL_IMPL) && !defined(SK_PARALLEL_IMPL_DONE)
#define SK_PARALLEL_IMPL_DONE
#define SK_PARALLEL_IMPL_BODY /* sk_program.h's implementation follows this one's */
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

SK_EXTERN_C_BEGIN

/* sk_program.h: the stages' programs and their groups */
static sk_result sk__prog_build(sk_parallel_plan *p, sk_error *err);
static void sk__prog_free(sk_parallel_plan *p);

SK_API const char *sk_parallel_step_name(sk_parallel_step_kind kind) {
  static const char *const names[SK_PSTEP_KIND_COUNT] = {
      "Move",   "Forward",  "ForwardComm", "UndoComm",     "Backward",         "BackwardComm",
      "Mirror", "MoveBack", "Update",      "ParamGather", "ParamRelease", "GradReduceScatter",
      "MoveOut", "MoveOutBack", "Alloc", "Free", "Recv", "Send", "WaitSend", "Recompute", "SeedLoss",
      "Fused", "WaitFused", "GradsReady", "ShardMirror", "Score"};
  return (int)kind >= 0 && kind < SK_PSTEP_KIND_COUNT ? names[kind] : "?";
}

/* Equal standard forms: the same slices (the cheap test; the converse does not hold). */
static bool sk__par_same_standard(const sk_layout *a, const sk_layout *b) {
  sk_layout sa, sb;
  if (sk_layout_standard(a, &sa, NULL) || sk_layout_standard(b, &sb, NULL)) return false;
  if (sa.mesh.naxes != sb.mesh.naxes || sa.ndims != sb.ndims) return false;
  for (int i = 0; i < sa.mesh.naxes; i++)
    if (sa.mesh.dims[i] != sb.mesh.dims[i]) return false;
  for (int d = 0; d < sa.ndims; d++) {
    if (sa.shape[d] != sb.shape[d] || sa.map[d].naxes != sb.map[d].naxes) return false;
    for (int j = 0; j < sa.map[d].naxes; j++)
      if (sa.map[d].axes[j] != sb.map[d].axes[j]) return false;
  }
  return true;
}

SK_API bool sk_parallel_same_layout(const sk_layout *a, const sk_layout *b) {
  if (!a || !b) return false;
  if (a->ndims > 0 && a->ndims == b->ndims && sk__par_same_standard(a, b)) return true;
  return sk_layout_same_slices(a, b); /* slice by slice: standard forms differ for (a,b) against one axis of a*b */
}

SK_API int64_t sk_parallel_slice_count(const sk_parallel_plan *plan, int t) {
  if (!plan || !plan->graph || t < 0 || t >= plan->graph->ntensors) return 0;
  int64_t s[SK_MAX_DIMS] = {0}, n = 1; /* sk_layout_slice_shape writes nothing for a scalar */
  const sk_layout *l = &plan->tensors[t].layout;
  sk_layout_slice_shape(l, s);
  for (int d = 0; d < l->ndims; d++) n *= s[d];
  return n;
}

/* The devices the strategy needs: its device matrix without the repeat axis. A rule may combine
   tuples (MatMul's [a, b, c] takes c from w's tuple; OneHot's tuple has one entry more than its
   input's rank), so the rule itself is asked: planned on the product of every entry, a multiple
   of its device matrix, it shows the matrix. Where that plan fails (or the product exceeds
   SK_MAX_DEVICES), the largest tuple product, a lower bound, stands in. */
static int64_t sk__par_strategy_devices(const sk_op_desc *d) {
  for (int i = 0; d->has_layouts && i < d->ninputs; i++)
    if (d->ndims[i] > 0) return d->layouts[i].mesh.size; /* every input's is on one device matrix */
  int64_t most = 1, all = 1;
  for (int i = 0; i < d->ninputs; i++) {
    int64_t n = 1;
    int len = d->strategy_len[i] ? d->strategy_len[i] : sk_op_tuple_len(d->kind, i, d->ndims[i]);
    for (int j = 0; j < len && j < SK_MAX_DIMS; j++) /* saturating: past SK_MAX_DEVICES is too many anyway */
      n = n <= SK_MAX_DEVICES ? n * (d->strategy[i][j] > 0 ? d->strategy[i][j] : 1) : n;
    most = n > most ? n : most;
    all = all <= SK_MAX_DEVICES ? all * n : all;
  }
  sk_op_plan probe;
  if (all > SK_MAX_DEVICES || sk_op_plan_make(d, (int)all, &probe, NULL)) return most;
  int rep = sk_mesh_axis(&probe.mesh, "rep");
  return rep < 0 ? probe.mesh.size : probe.mesh.size / probe.mesh.dims[rep];
}

/* Operator o's desc and rule; a strategy that needs more devices falls back to data parallel. */
static sk_result sk__par_plan_op(sk_parallel_plan *p, int o, bool input_placed, sk_error *err) {
  const sk_graph *g = p->graph;
  sk_parallel_op *po = &p->ops[o];
  sk_result r = sk_graph_op_desc(g, o, &po->desc, err);
  if (r) return r;
  po->desc.params = 0;
  for (int k = 0; k < g->ops[o].ninputs; k++)
    if (sk_graph_trainable(g, g->ops[o].inputs[k])) po->desc.params |= 1u << k; /* is_parameter: requires_grad */
  bool follows = (sk_op_row_of(po->desc.kind)->flags & SK_OPF_FOLLOWS_INPUT) != 0;
  if (follows && !po->desc.has_strategy && !po->desc.has_layouts && input_placed) {
    const sk_layout *in = &p->tensors[g->ops[o].inputs[0]].layout; /* the cut its producer left */
    po->desc.follows_input = true; /* not a strategy of its own: has_strategy stays false */
    po->desc.follow_layout = *in;  /* its device matrix too: the Reshape keeps the producer's axes */
    for (int d = 0; d < in->ndims; d++) po->desc.strategy[0][d] = sk_layout_split_count(in, d);
  }
  int n = p->desc.ndevices;
  int64_t need = (po->desc.has_strategy || po->desc.has_layouts) ? sk__par_strategy_devices(&po->desc) : 1;
  for (int k = 0; k < po->desc.nout_layouts && k < SK_OP_MAX_OUTPUTS; k++) /* an output layout on other devices */
    if (po->desc.out_layouts[k].mesh.size > need) need = po->desc.out_layouts[k].mesh.size;
  if (need > n || n % need) {
    if (p->desc.strict_strategies)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "operator '%s': its strategy needs %lld devices, the plan has %d (strict strategies)",
                      g->ops[o].name, (long long)need, n);
    po->desc.has_strategy = po->desc.has_out_strategy = po->desc.has_layouts = false;
    po->desc.nstrategies = po->desc.nout_layouts = 0;
    memset(po->desc.strategy_len, 0, sizeof po->desc.strategy_len);
    po->fell_back = true, p->nfallbacks++;
  }
  sk_error e;
  r = sk_op_plan_make(&po->desc, n, &po->plan, &e);
  if (r) return sk__fail(err, r, "operator '%s': %s", g->ops[o].name, e.msg);
  return SK_OK;
}

/* The Mirror's divisor for parameter input k: the replication of the output's gradient along
   the axes neither the parameter's layout nor the output's uses. There every replica holds the
   same full gradient, which the Mirror's sum would count that many times. */
static int sk__par_replication(const sk_op_plan *p, int k) {
  uint32_t used = sk_layout_used_axes(&p->in[k]) | sk_layout_used_axes(&p->out[0]);
  int n = 1;
  for (int a = 0; a < p->mesh.naxes; a++)
    if (!(used & (1u << a))) n *= p->mesh.dims[a];
  return n;
}

/* A network input's layout under the dataset strategy, on a one-axis mesh "dp". */
static sk_result sk__par_input_layout(const sk_parallel_plan *p, int t, sk_layout *out, sk_error *err) {
  const sk_graph_tensor *x = &p->graph->tensors[t];
  int n = p->desc.ndevices;
  sk_mesh mesh;
  const char *names[1] = {"dp"};
  sk_result r = sk_mesh_init(&mesh, 1, &n, names, err);
  if (r || x->ndims == 0) /* a scalar: whole on every device, laid out as sk_ops.h lays scalars */
    return r ? r : (memset(out, 0, sizeof *out), out->mesh = mesh, SK_OK);
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  if (p->desc.dataset == SK_DATASET_DATA_PARALLEL && x->ndims > 0 && n > 1) {
    if (x->shape[0] % n)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input '%s': its batch (%lld) does not divide by %d devices",
                      x->name, (long long)x->shape[0], n);
    map[0].naxes = 1, map[0].axes[0] = 0;
  }
  return sk_layout_init(out, &mesh, x->ndims, x->shape, map, err);
}

/* The network inputs under a tuple of strategies: cut as a VirtualDataset with that strategy
   cuts them (sk_ops.h: the repeat axis on the left). */
static sk_result sk__par_dataset_tuple(sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = SK_OP_VIRTUAL_DATASET, d.has_strategy = true;
  int ids[SK_OP_MAX_INPUTS], n = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    if (n == SK_OP_MAX_INPUTS || n == p->desc.ndataset) {
      n++;
      continue;
    }
    ids[n] = t, d.ndims[n] = g->tensors[t].ndims;
    memcpy(d.shape[n], g->tensors[t].shape, sizeof d.shape[n]);
    memcpy(d.strategy[n], p->desc.dataset_strategy[n], sizeof d.strategy[n]);
    d.strategy_len[n] = p->desc.dataset_strategy_len[n]; /* a wrong length is refused in sk_ops.h's words */
    n++;
  }
  if (n != p->desc.ndataset)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dataset_strategy: %d strategies for the network's %d inputs",
                    p->desc.ndataset, n);
  d.ninputs = d.noutputs = n;
  sk_op_plan plan;
  sk_error e;
  sk_result r = sk_op_plan_make(&d, p->desc.ndevices, &plan, &e);
  if (r) return sk__fail(err, r, "dataset_strategy: %s", e.msg);
  for (int k = 0; k < n; k++) p->tensors[ids[k]].layout = plan.out[k];
  return SK_OK;
}

/* The network inputs under a tuple of layouts: each on all the devices, the repeat axis on the left. */
static sk_result sk__par_dataset_layouts(sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  int n = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    if (n < p->desc.ndataset_layouts) {
      const sk_layout *l = &p->desc.dataset_layouts[n];
      bool same = l->ndims == g->tensors[t].ndims;
      for (int d = 0; same && d < l->ndims; d++) same = l->shape[d] == g->tensors[t].shape[d];
      if (!same)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dataset_strategy: layout %d is for another shape than input '%s'",
                        n, g->tensors[t].name);
      sk_error e;
      sk_result r = sk_layout_to_devices(l, p->desc.ndevices, &p->tensors[t].layout, &e);
      if (r) return sk__fail(err, r, "dataset_strategy: layout %d (input '%s'): %s", n, g->tensors[t].name, e.msg);
    }
    n++;
  }
  if (n != p->desc.ndataset_layouts)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dataset_strategy: %d layouts for the network's %d inputs",
                    p->desc.ndataset_layouts, n);
  return SK_OK;
}

/* The network inputs' layouts, by the dataset strategy. */
static sk_result sk__par_place_inputs(sk_parallel_plan *p, bool *placed, sk_error *err) {
  const sk_graph *g = p->graph;
  bool tuple = p->desc.ndataset > 0 || p->desc.ndataset_layouts > 0;
  sk_result r = p->desc.ndataset > 0 ? sk__par_dataset_tuple(p, err)
                : p->desc.ndataset_layouts > 0 ? sk__par_dataset_layouts(p, err) : SK_OK;
  for (int t = 0; t < g->ntensors && !r; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    if (!tuple) r = sk__par_input_layout(p, t, &p->tensors[t].layout, err);
    placed[t] = true;
  }
  return r;
}

/* Every operator's plan and every tensor's layout, in graph order: outputs as produced,
   parameters as first read. */
static sk_result sk__par_place(sk_parallel_plan *p, bool *placed, sk_error *err) {
  const sk_graph *g = p->graph;
  sk_result r = SK_OK;
  for (int o = 0; o < g->nops && !r; o++) {
    const sk_graph_op *op = &g->ops[o];
    if ((r = sk__par_plan_op(p, o, op->ninputs > 0 && placed[op->inputs[0]], err))) break;
    for (int k = 0; k < op->ninputs; k++)
      if (!placed[op->inputs[k]]) p->tensors[op->inputs[k]].layout = p->ops[o].plan.in[k], placed[op->inputs[k]] = true;
    for (int k = 0; k < op->noutputs; k++) { /* as the rule gives it, or as out_strategy asks */
      const sk_op_plan *pl = &p->ops[o].plan;
      p->tensors[op->outputs[k]].layout = (pl->redistributed >> k) & 1u ? pl->wanted[k] : pl->out[k];
      placed[op->outputs[k]] = true;
    }
  }
  for (int t = 0; t < g->ntensors && !r; t++) /* a parameter nobody reads: whole on every device */
    if (!placed[t]) r = sk_layout_init(&p->tensors[t].layout, &p->ops[0].plan.mesh, g->tensors[t].ndims,
                                       g->tensors[t].shape, NULL, err);
  return r;
}

/* ---- strategy search ------------------------------------------------------------------------ */

static double sk__par_now_ms(void) {
  struct timespec ts;
  return timespec_get(&ts, TIME_UTC) ? (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6 : 0;
}

/* Frees the network the plan owns, if any. */
static void sk__par_drop_graph(sk_parallel_plan *p) {
  if (!p->micro_graph) return;
  sk_graph_free(p->micro_graph);
  sk__free(&p->desc.allocator, p->micro_graph);
  p->micro_graph = NULL;
}

/* The plan's own network (g at micro-batch size), from the configuration's allocator:
   sk_graph_micro gives its result the source's allocator, so it reads a view of g that carries
   the plan's. */
static sk_result sk__par_micro_graph(sk_parallel_plan *p, const sk_graph *g, int micro, const char *what, sk_error *err) {
  const sk_allocator *a = &p->desc.allocator;
  sk_graph *m = (sk_graph *)sk__calloc(a, sizeof *m, sizeof(double));
  if (!m) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "%s: out of memory for the network's copy", what);
  sk_graph view = *g;
  view.allocator = *a;
  sk_result r = sk_graph_micro(&view, micro, m, err);
  if (r) return sk__free(a, m), r;
  sk__par_drop_graph(p); /* a copy made earlier (the loaded strategies'), read above */
  p->graph = p->micro_graph = m;
  return SK_OK;
}

/* A search mode and a loaded strategy file write strategies into the network: the plan's own
   copy of it. */
static sk_result sk__par_own_graph(sk_parallel_plan *p, sk_error *err) {
  return p->micro_graph ? SK_OK : sk__par_micro_graph(p, p->graph, 1, "parallel", err);
}

static sk_result sk__par_run_search(sk_parallel_plan *p, sk_search_model *m, int *choice, sk_error *err) {
  switch (p->desc.mode) {
    case SK_PARALLEL_SHARDING_PROPAGATION: return sk_search_propagate(m, choice, err);
    case SK_PARALLEL_RECURSIVE_PROGRAMMING: return sk_search_recursive(m, choice, err);
    default: return sk_search_exhaustive(m, choice, err);
  }
}

/* The search: every operator the network left without a strategy gets the one chosen. */
static sk_result sk__par_search(sk_parallel_plan *p, sk_error *err) {
  sk_graph *g = p->micro_graph;
  const sk_allocator *a = &p->desc.allocator;
  sk_layout *inputs = (sk_layout *)sk__calloc(a, sizeof *inputs * ((size_t)g->ntensors + 1), sizeof(double));
  int *choice = (int *)sk__calloc(a, sizeof(int) * ((size_t)g->nops + 1), sizeof(int));
  p->searched = (bool *)sk__calloc(a, sizeof(bool) * ((size_t)g->nops + 1), sizeof(bool));
  if (!inputs || !choice || !p->searched)
    return sk__free(a, inputs), sk__free(a, choice),
           sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the search's layouts and choices");
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_INPUT) inputs[t] = p->tensors[t].layout;
  sk_search_desc d;
  memset(&d, 0, sizeof d);
  d.cluster = p->desc.cluster, d.exhaustive_limit = p->desc.exhaustive_limit;
  d.ndevices = p->desc.ndevices, d.input_layouts = inputs;
  d.lazy_candidates = p->desc.mode == SK_PARALLEL_RECURSIVE_PROGRAMMING;
  sk_run_dtypes run = sk_parallel_run_dtypes(&p->desc); /* priced in the dtypes the run moves */
  d.compute = run.compute, d.wire = run.wire, d.gradient = run.gradient;
  d.whole_mirrors = p->desc.comm_fusion.closed; /* no bucket: each Mirror a call of its own */
  sk_search_model m;
  double t0 = sk__par_now_ms();
  sk_result r = sk_search_model_build(g, &d, &m, err);
  if (!r) r = sk__par_run_search(p, &m, choice, err);
  if (!r) p->search_ms = sk__par_now_ms() - t0, p->search_cost = sk_search_plan_cost(&m, choice);
  if (!r && m.cache_failed) /* the cost came out right, measured uncached; the allocator still refused */
    r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the search's redistribution cache");
  for (int o = 0; !r && o < g->nops; o++) {
    if (m.configured[o]) continue;
    r = sk_search_apply(&m, o, &m.cands[o][choice[o]], &g->ops[o].desc, err);
    p->searched[o] = true;
  }
  sk_search_model_free(&m);
  sk__free(a, inputs), sk__free(a, choice);
  return r;
}

/* The devices holding each slice of the loss (MindSpore's as_loss_divisor): every device for a
   scalar loss. */
static int sk__par_loss_repeat(const sk_parallel_plan *p) {
  const sk_layout *l = &p->tensors[p->graph->loss].layout;
  int64_t slices = 1;
  for (int d = 0; d < l->ndims; d++) slices *= sk_layout_split_count(l, d);
  return slices > 0 ? (int)(p->desc.ndevices / slices) : 1; /* a compiled layout always has slices */
}

/* The slot whose Move input k of operator o reads (sk_parallel_op.move_op): the first slot, in
   graph order, that reads the same tensor in the same kernel layout and moves it itself. The
   tensor is written once (by its producer, before every reader), so that copy stays valid for
   the whole step. Under a pipeline each slot moves its own: the micro-batches' slots hold them. */
static void sk__par_move_owner(sk_parallel_plan *p, int o, int k) {
  const sk_graph *g = p->graph;
  sk_parallel_op *po = &p->ops[o];
  int t = g->ops[o].inputs[k];
  po->move_op[k] = po->moved[k] ? o : -1, po->move_slot[k] = po->moved[k] ? k : -1;
  for (int o2 = 0; po->moved[k] && !p->vstage && o2 <= o; o2++)
    for (int k2 = 0; k2 < g->ops[o2].ninputs && (o2 < o || k2 < k); k2++) {
      const sk_parallel_op *q = &p->ops[o2];
      if (g->ops[o2].inputs[k2] != t || q->move_op[k2] != o2 || q->move_slot[k2] != k2) continue;
      if (!sk_parallel_same_layout(&q->kernel_in[k2], &po->kernel_in[k])) continue;
      po->move_op[k] = o2, po->move_slot[k] = k2;
      return;
    }
}

static sk_result sk__par_kernel_layouts(sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  for (int o = 0; o < g->nops; o++) {
    const sk_graph_op *op = &g->ops[o];
    sk_parallel_op *po = &p->ops[o];
    for (int k = 0; k < op->ninputs; k++) {
      sk_result r = sk_op_kernel_layout(po->desc.kind, &po->plan, k, &po->kernel_in[k], err);
      if (r) return sk__fail(err, r, "operator '%s' input %d: %s", op->name, k, err ? err->msg : "");
      po->moved[k] = !sk_parallel_same_layout(&p->tensors[op->inputs[k]].layout, &po->kernel_in[k]);
      po->replication[k] = (po->desc.params >> k) & 1u ? sk__par_replication(&po->plan, k) : 1;
      po->mirror_scale[k] = 1;
      if (p->desc.gradients_mean && ((po->desc.params >> k) & 1u) && po->plan.grad[k].kind != SK_COLL_NONE)
        po->mirror_scale[k] = 1.0 / sk_mesh_group_size(&po->plan.mesh, po->plan.grad[k].axes);
    }
    for (int k = 0; k < op->noutputs; k++) po->out_moved[k] = (po->plan.redistributed >> k) & 1u;
    for (int k = 0; k < op->ninputs; k++) sk__par_move_owner(p, o, k);
  }
  return SK_OK;
}

/* Optimizer parallel: every parameter's shard count under desc.hsdp (the same on every rank:
   replica groups have one size). A parameter some operator reads in another layout stays whole:
   its gradient reaches the tensor only after that operator's Mirror and move back. */
static sk_result sk__par_opt_shards(sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  for (int t = 0; t < g->ntensors; t++) {
    sk_parallel_tensor *pt = &p->tensors[t];
    pt->opt_why = "";
    if (g->tensors[t].role != SK_TENSOR_PARAM) continue;
    if (g->tensors[t].no_parallel_optimizer) { /* MindSpore's Parameter(parallel_optimizer=False) */
      pt->opt_why = "parallel_optimizer=False";
      continue;
    }
    const char *moved = NULL;
    for (int o = 0; o < g->nops && !moved; o++)
      for (int k = 0; k < g->ops[o].ninputs; k++)
        if (g->ops[o].inputs[k] == t && p->ops[o].moved[k]) moved = g->ops[o].name;
    sk_opt_shard os;
    sk_result r = sk_opt_shard_of(&pt->layout, g->tensors[t].dtype, &p->desc.hsdp, 0, &os, err);
    if (r) return sk__fail(err, r, "parameter '%s': %s", g->tensors[t].name, err ? err->msg : "");
    pt->opt_why = os.why;
    if (os.size && moved) pt->opt_why = "an operator reads it in another layout";
    else pt->opt_size = os.size, pt->opt_mirror = os.mirror;
  }
  return SK_OK;
}

static bool sk__par_sharded_input(const sk_parallel_plan *p, int o, int k) {
  return p->tensors[p->graph->ops[o].inputs[k]].opt_size > 0;
}

static void sk__par_push(sk_parallel_plan *p, sk_parallel_step_kind kind, int op, int slot, const sk_op_comm *comm) {
  sk_parallel_step *s = &p->steps[p->nsteps++];
  memset(s, 0, sizeof *s);
  s->kind = kind, s->op = op, s->slot = slot;
  if (comm) s->comm = *comm;
  else s->comm.kind = SK_COLL_NONE, s->comm.scale = 1;
}

/* A ParamGather for each sharded parameter operator o reads (the runtime skips one already held). */
static void sk__par_gathers(sk_parallel_plan *p, int o) {
  for (int k = 0; k < p->graph->ops[o].ninputs; k++)
    if (sk__par_sharded_input(p, o, k)) sk__par_push(p, SK_PSTEP_PARAM_GATHER, o, k, NULL);
}

static void sk__par_forward_steps(sk_parallel_plan *p) {
  const sk_graph *g = p->graph;
  for (int o = 0; o < g->nops; o++) {
    const sk_parallel_op *po = &p->ops[o];
    sk__par_gathers(p, o);
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (sk_parallel_owns_move(p, o, k)) sk__par_push(p, SK_PSTEP_MOVE, o, k, NULL);
    sk__par_push(p, SK_PSTEP_FORWARD, o, 0, NULL);
    sk_coll_kind f = po->plan.fwd.kind;
    if (f == SK_COLL_ALLREDUCE || f == SK_COLL_REDUCE_SCATTER) sk__par_push(p, SK_PSTEP_FORWARD_COMM, o, 0, &po->plan.fwd);
    for (int k = 0; k < g->ops[o].noutputs; k++)
      if (po->out_moved[k]) sk__par_push(p, SK_PSTEP_OUT_MOVE, o, k, NULL);
    for (int k = 0; k < g->ops[o].ninputs && p->desc.hsdp.level == SK_HSDP_LEVEL3; k++)
      if (sk__par_sharded_input(p, o, k)) sk__par_push(p, SK_PSTEP_PARAM_RELEASE, o, k, NULL);
  }
}

/* The first reader of tensor t in graph order (-1: none). */
static int sk__par_first_reader(const sk_graph *g, int t) {
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t) return o;
  return -1;
}

/* Whether operator o runs a backward: a gradient reaches one of its outputs (sk_exec_grad_flow:
   then one of its inputs takes one). A metric or an auxiliary head the loss does not read runs
   none, on every device alike: its parameters' gradients stay zero, with no Mirror. */
static bool sk__par_backward_runs(const sk_parallel_plan *p, int o) {
  const sk_graph_op *op = &p->graph->ops[o];
  for (int j = 0; j < op->noutputs; j++)
    if (p->tensors[op->outputs[j]].needs_grad) return true;
  return false;
}

/* The operator whose backward writes tensor t's gradient last: its first reader in graph order
   that runs a backward (-1: none). */
static int sk__par_last_grad_writer(const sk_parallel_plan *p, int t) {
  const sk_graph *g = p->graph;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t && sk_exec_differentiable(&g->ops[o], k) && sk__par_backward_runs(p, o)) return o;
  return -1;
}

/* Whether input k of operator o writes a gradient into its moved copy's buffer in the backward. */
static bool sk__par_moved_grad(const sk_parallel_plan *p, int o, int k) {
  const sk_graph_op *op = &p->graph->ops[o];
  return p->ops[o].moved[k] && p->tensors[op->inputs[k]].needs_grad && sk_exec_differentiable(op, k) &&
         sk__par_backward_runs(p, o);
}

/* Every moved input's back_op/back_slot (sk_parallel_op): the first reader of the same copy that
   writes a gradient. Readers of one copy share its owner's move_op/move_slot. */
static void sk__par_move_backs(sk_parallel_plan *p) {
  const sk_graph *g = p->graph;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      sk_parallel_op *po = &p->ops[o];
      po->back_op[k] = po->back_slot[k] = -1;
      for (int o2 = 0; sk__par_moved_grad(p, o, k) && po->back_op[k] < 0 && o2 <= o; o2++)
        for (int k2 = 0; k2 < g->ops[o2].ninputs && po->back_op[k] < 0; k2++) {
          const sk_parallel_op *q = &p->ops[o2];
          if (q->move_op[k2] == po->move_op[k] && q->move_slot[k2] == po->move_slot[k] && sk__par_moved_grad(p, o2, k2))
            po->back_op[k] = o2, po->back_slot[k] = k2;
        }
    }
}

/* The last input of operator o whose gradient input k's MoveBack carries (k itself, or a later
   input of o reading the same copy): the MoveBack follows that input's steps, its BackwardComm
   and Mirror, so every summed gradient is complete. */
static int sk__par_last_backed(const sk_parallel_plan *p, int o, int k) {
  int last = k;
  for (int j = k + 1; j < p->graph->ops[o].ninputs; j++)
    if (p->ops[o].back_op[j] == o && p->ops[o].back_slot[j] == k) last = j;
  return last;
}

/* After input j's steps: the MoveBacks of o's inputs whose last carried gradient is j's. */
static void sk__par_push_move_backs(sk_parallel_plan *p, int o, int j) {
  for (int k = 0; k <= j; k++)
    if (p->ops[o].back_op[k] == o && p->ops[o].back_slot[k] == k && sk__par_last_backed(p, o, k) == j)
      sk__par_push(p, SK_PSTEP_MOVE_BACK, o, k, NULL);
}

/* Backward of operator o, when a gradient reaches one of its outputs. */
static void sk__par_backward_steps(sk_parallel_plan *p, int o) {
  const sk_graph *g = p->graph;
  const sk_graph_op *op = &g->ops[o];
  const sk_parallel_op *po = &p->ops[o];
  if (!sk__par_backward_runs(p, o)) return;
  if (p->desc.hsdp.level == SK_HSDP_LEVEL3) sk__par_gathers(p, o); /* the backward reads the weights */
  for (int k = 0; k < op->noutputs; k++)
    if (po->out_moved[k] && p->tensors[op->outputs[k]].needs_grad) sk__par_push(p, SK_PSTEP_OUT_MOVE_BACK, o, k, NULL);
  const sk_op_comm *f = &po->plan.fwd; /* an AllReduce's gradient passes unchanged unless it scaled */
  if (f->kind == SK_COLL_REDUCE_SCATTER || (f->kind == SK_COLL_ALLREDUCE && f->scale != 1))
    sk__par_push(p, SK_PSTEP_UNDO_COMM, o, 0, f);
  sk__par_push(p, SK_PSTEP_BACKWARD, o, 0, NULL);
  for (int k = 0; k < op->ninputs; k++) {
    if (!p->tensors[op->inputs[k]].needs_grad || !sk_exec_differentiable(op, k)) continue;
    if (po->plan.bwd_in[k].kind != SK_COLL_NONE) sk__par_push(p, SK_PSTEP_BACKWARD_COMM, o, k, &po->plan.bwd_in[k]);
    bool sharded = sk__par_sharded_input(p, o, k); /* its Mirror follows the ReduceScatter */
    if (((po->desc.params >> k) & 1u) && po->plan.grad[k].kind != SK_COLL_NONE && !sharded)
      sk__par_push(p, SK_PSTEP_MIRROR, o, k, &po->plan.grad[k]);
    sk__par_push_move_backs(p, o, k);
  }
  for (int k = 0; k < op->ninputs; k++) /* o is the last to write a sharded parameter's gradient */
    if (sk__par_sharded_input(p, o, k) && p->tensors[op->inputs[k]].needs_grad && sk__par_last_grad_writer(p, op->inputs[k]) == o)
      sk__par_push(p, SK_PSTEP_GRAD_REDUCE_SCATTER, o, k, NULL);
}

static sk_result sk__par_steps(sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  size_t most = 1;
  for (int o = 0; o < g->nops; o++) most += 4 + 8 * (size_t)g->ops[o].ninputs + 2 * (size_t)g->ops[o].noutputs;
  p->steps = (sk_parallel_step *)sk__calloc(&p->desc.allocator, most * sizeof *p->steps, sizeof(double));
  if (!p->steps) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the plan's steps");
  sk__par_forward_steps(p);
  sk__par_move_backs(p);
  for (int o = g->nops - 1; o >= 0; o--) sk__par_backward_steps(p, o);
  sk__par_push(p, SK_PSTEP_UPDATE, -1, 0, NULL);
  return SK_OK;
}

SK_API void sk_parallel_free(sk_parallel_plan *p) {
  if (!p) return;
  const sk_allocator a = p->desc.allocator; /* everything the compile took came from it */
  sk__prog_free(p);
  sk__free(&a, p->ops), sk__free(&a, p->tensors), sk__free(&a, p->steps), sk__free(&a, p->vstage), sk__free(&a, p->searched);
  sk_pipe_schedule_free(&p->schedule);
  sk__par_drop_graph(p);
  memset(p, 0, sizeof *p);
}

/* One comm_fusion kind, as MindSpore's _set_*_comm_fusion checks it. */
static sk_result sk__par_check_fusion(const sk_fusion_config *c, const char *kind, bool index_ok, sk_error *err) {
  if ((unsigned)c->mode >= SK_FUSION_MODE_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "comm_fusion: %s: unknown mode %d", kind, (int)c->mode);
  if (c->mode == SK_FUSION_INDEX && !index_ok)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "comm_fusion: %s: mode 'index' is AllReduce's only ('auto' or 'size')", kind);
  if (c->mode == SK_FUSION_SIZE && c->threshold_bytes == 0 && !(c->threshold_mb > 0))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "comm_fusion: %s: the size threshold must be larger than 0 MB", kind);
  return SK_OK;
}

/* The first strategy-file field set, or NULL. */
static const char *sk__par_strategy_file(const sk_autoparallel *d) {
  if (d->load_operator_strategy_file) return "load_operator_strategy_file";
  if (d->load_param_strategy_file) return "load_param_strategy_file";
  if (d->save_operator_strategy_file) return "save_operator_strategy_file";
  return d->save_param_strategy_file ? "save_param_strategy_file" : NULL;
}

/* A file named needs the table that reads and writes it (sk_strategy.h's, which needs jansson,
   which this header does not). */
static sk_result sk__par_check_strategy_io(const sk_autoparallel *d, sk_error *err) {
  const char *field = sk__par_strategy_file(d);
  const sk_strategy_io_fns *io = d->strategy_io;
  if (field && !io)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: %s needs the strategy-file reader: set strategy_io = "
                    "sk_strategy_io() (sk_strategy.h)", field);
  if (io && (!io->load_operators || !io->check || !io->save))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: strategy_io lacks a function (load_operators, check, save)");
  return SK_OK;
}

/* The knobs that need no graph. */
static sk_result sk__par_check_desc(const sk_autoparallel *d, sk_error *err) {
  if (d->ndevices < 1 || d->ndevices > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: %d devices (1..%d)", d->ndevices, SK_MAX_DEVICES);
  if ((unsigned)d->mode > SK_PARALLEL_EXHAUSTIVE)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: unknown parallel_mode %d", (int)d->mode);
  if ((unsigned)d->dataset > SK_DATASET_FULL_BATCH)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: unknown dataset strategy %d", (int)d->dataset);
  if (d->dtype != SK_F32 && d->dtype != SK_F64 && d->dtype != SK_F16 && d->dtype != SK_BF16)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: dtype %s: f32, f64, f16 or bf16", sk_dtype_name(d->dtype));
  sk_result bad = sk_cluster_check(&d->cluster, "parallel: cluster", err);
  if (bad) return bad;
  if (d->exhaustive_limit < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: exhaustive_limit %lld: 0 (the default) or more",
                    (long long)d->exhaustive_limit);
  if (!d->allocator.alloc != !d->allocator.free)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: the allocator needs both alloc and free");
  sk_optim_desc resolved;
  bad = sk_optim_resolve(&d->optim, &resolved, err);
  if (bad) return bad;
  if (d->ndataset < 0 || d->ndataset > SK_OP_MAX_INPUTS || d->ndataset_layouts < 0 || d->ndataset_layouts > SK_OP_MAX_INPUTS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: %d dataset strategies, %d layouts (0..%d)", d->ndataset,
                    d->ndataset_layouts, SK_OP_MAX_INPUTS);
  if (d->ndataset && d->ndataset_layouts)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dataset_strategy: a tuple of strategies or of layouts, not both");
  sk_result bad_io = sk__par_check_strategy_io(d, err);
  if (bad_io) return bad_io;
  if (d->grad_accumulation_step < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: grad_accumulation_step must be 1 or more, got %d",
                    d->grad_accumulation_step);
  sk_result r = sk_hsdp_check(&d->hsdp, err);
  if (!r) r = sk__par_check_fusion(&d->comm_fusion.allreduce, "allreduce", true, err);
  if (!r) r = sk__par_check_fusion(&d->comm_fusion.allgather, "allgather", false, err);
  if (!r) r = sk__par_check_fusion(&d->comm_fusion.reducescatter, "reducescatter", false, err);
  return r;
}

/* ---- pipeline parallel ---------------------------------------------------------------------- */

static bool sk__par_pipelined(const sk_autoparallel *d) { return d->pipeline.stages > 1 || d->pipeline.micro > 1; }

/* The pipeline's knobs, and the one feature it does not combine with: grad_accumulation_step,
   which MindSpore (master) refuses with a pipeline too. Its context refuses the knob above 1 in
   every mode (mindspore/python/mindspore/parallel/_auto_parallel_context.py,
   _AutoParallelContext.set_grad_accumulation_step: "The interface is deprecated", pointing to
   GradAccumulation), and its replacement is not an accumulation of its own under a pipeline:
   with pipeline stages the compiler tags the pipeline's micro-batches and returns before it tags
   GradAccumulation's (mindspore/ccsrc/frontend/parallel/parallel_preprocessor.cc,
   MicroBatchPreProcess; parallel_postprocessor.cc, MicroBatchPostProcess), so micro_size is the
   accumulation. A pipeline accumulates over more micro-batches with a larger micro_size. */
static sk_result sk__par_check_pipeline(const sk_autoparallel *d, sk_error *err) {
  sk_result r = sk_pipe_check(&d->pipeline, err);
  if (r) return r;
  int s = SK__DEF(d->pipeline.stages, 1);
  if (d->ndevices % s)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: %d devices do not divide into %d stages", d->ndevices, s);
  if (d->grad_accumulation_step > 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "pipeline: grad_accumulation_step %d with a pipeline is refused, as MindSpore refuses it: micro_size "
                    "accumulates the gradients (micro_size %d x %d: as many micro-batches per update)",
                    d->grad_accumulation_step, SK__DEF(d->pipeline.micro, 1), d->grad_accumulation_step);
  return SK_OK;
}

/* Before the compile: the network of one micro-batch, on one stage's devices. */
static sk_result sk__par_pipeline_begin(sk_parallel_plan *p, const sk_graph *g, sk_error *err) {
  p->stages = SK__DEF(p->desc.pipeline.stages, 1), p->micro = SK__DEF(p->desc.pipeline.micro, 1);
  p->desc.ndevices /= p->stages;
  p->vstage = (int *)sk__calloc(&p->desc.allocator, sizeof(int) * ((size_t)g->nops + 1), sizeof(int));
  if (!p->vstage) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "pipeline: out of memory for the operators' stages");
  return sk__par_micro_graph(p, g, p->micro, "pipeline", err);
}

/* Operator o's forward FLOPs at the network's shapes: the cut's weight. */
static double sk__par_op_flops(const sk_graph *g, int o) {
  const sk_graph_op *op = &g->ops[o];
  sk_exec_arg in[1], out[1];
  memset(in, 0, sizeof in), memset(out, 0, sizeof out);
  if (op->ninputs > 0) in[0].ndims = g->tensors[op->inputs[0]].ndims, memcpy(in[0].shape, g->tensors[op->inputs[0]].shape, sizeof in[0].shape);
  out[0].ndims = g->tensors[op->outputs[0]].ndims, memcpy(out[0].shape, g->tensors[op->outputs[0]].shape, sizeof out[0].shape);
  return sk_exec_flops(op, in, out, false);
}

/* Every operator's virtual stage: the annotations, when they count the stages and each stage
   holds one chunk; else the operator sequence cut into stages x chunks parts balanced by FLOPs,
   empty parts first (the network's inputs reach every stage, and the loss stays last). */
static sk_result sk__par_assign_vstages(sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  int parts = p->stages * p->schedule.chunks, annotated = 0;
  for (int o = 0; o < g->nops; o++) annotated = g->ops[o].stage + 1 > annotated ? g->ops[o].stage + 1 : annotated;
  if (p->schedule.chunks == 1 && annotated == p->stages) {
    for (int o = 0; o < g->nops; o++) p->vstage[o] = g->ops[o].stage;
    return SK_OK;
  }
  p->recut = annotated > 1;
  const sk_allocator *a = &p->desc.allocator;
  double *w = (double *)sk__alloc(a, sizeof(double) * ((size_t)g->nops + 1), sizeof(double));
  int *part = (int *)sk__calloc(a, sizeof(int) * ((size_t)g->nops + 1), sizeof(int));
  sk_result r = w && part ? SK_OK : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "pipeline: out of memory for the cut's weights");
  for (int o = 0; !r && o < g->nops; o++) w[o] = sk__par_op_flops(g, g->nops - 1 - o); /* reversed: empties first */
  if (!r) r = sk_pipe_partition(w, g->nops, parts, part, err);
  for (int o = 0; !r && o < g->nops; o++) p->vstage[o] = parts - 1 - part[g->nops - 1 - o];
  sk__free(a, w), sk__free(a, part);
  return r;
}

/* What the schedule needs of the cut: data flows to later chunks, the loss is on the last, and
   a parameter lives on one stage. */
static sk_result sk__par_check_vstages(const sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  int last = p->stages * p->schedule.chunks - 1;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      const sk_graph_tensor *x = &g->tensors[g->ops[o].inputs[k]];
      if (x->producer >= 0 && p->vstage[x->producer] > p->vstage[o])
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: operator '%s' (stage %d) reads '%s' from a later stage (%d)",
                        g->ops[o].name, p->vstage[o], x->name, p->vstage[x->producer]);
      if (x->role != SK_TENSOR_PARAM) continue;
      int first = sk__par_first_reader(g, g->ops[o].inputs[k]);
      int here = sk_pipe_stage_of(&p->schedule, p->vstage[o], NULL), there = sk_pipe_stage_of(&p->schedule, p->vstage[first], NULL);
      if (here != there)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                        "pipeline: parameter '%s' is read on stage %d (operator '%s') and stage %d (operator '%s'): "
                        "parameters shared across stages are not supported",
                        x->name, there, g->ops[first].name, here, g->ops[o].name);
    }
  int lo = g->tensors[g->loss].producer;
  if (lo >= 0 && p->vstage[lo] != last)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: the loss '%s' is computed on stage %d, not the last (%d)",
                    g->tensors[g->loss].name, p->vstage[lo], last);
  return SK_OK;
}

SK_API sk_run_dtypes sk_parallel_run_dtypes(const sk_autoparallel *d) {
  sk_run_dtypes t = {SK_F32, SK_F32, SK_F32};
  if (!d) return t; /* no configuration: the default f32 run */
  bool half = d->dtype == SK_F16 || d->dtype == SK_BF16;
  t.compute = d->dtype == SK_F64 ? SK_F64 : SK_F32;
  t.wire = half && !d->fp32_communication ? d->dtype : t.compute;
  t.gradient = half && d->no_gradient_fp32_sync && !d->fp32_communication ? d->dtype : t.compute;
  return t;
}

SK_API int sk_parallel_stage_of_rank(const sk_parallel_plan *p, int rank) {
  if (!p || p->desc.ndevices < 1 || p->stages < 2) return 0;
  sk_stage_map map = {p->desc.ndevices * p->stages, NULL, p->stages, NULL};
  int stage = 0;
  (void)sk_stage_of_device(&map, rank, &stage, NULL, NULL); /* a rank outside the world: stage 0 */
  return stage;
}

SK_API bool sk_parallel_op_on_stage(const sk_parallel_plan *p, int o, int stage) {
  if (!p || !p->graph || o < 0 || o >= p->graph->nops) return false;
  return !p->vstage || sk_pipe_stage_of(&p->schedule, p->vstage[o], NULL) == stage;
}

/* Whether operator o reads tensor t from another pipeline chunk than t's producer's. */
static bool sk__par_read_elsewhere(const sk_parallel_plan *p, int t) {
  const sk_graph *g = p->graph;
  int v = p->vstage ? p->vstage[g->tensors[t].producer] : 0;
  for (int o = 0; p->vstage && o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++)
      if (g->ops[o].inputs[k] == t && p->vstage[o] != v) return true;
  return false;
}

SK_API bool sk_parallel_recomputed(const sk_parallel_plan *p, int t) {
  if (!p || !p->graph || t < 0 || t >= p->graph->ntensors) return false;
  const sk_graph_tensor *x = &p->graph->tensors[t];
  return x->role == SK_TENSOR_VALUE && t != p->graph->loss && x->producer >= 0 && p->graph->ops[x->producer].recompute &&
         !sk__par_read_elsewhere(p, t);
}

SK_API const char *sk_parallel_recompute_refusal(const sk_parallel_plan *p, int o) {
  if (!p || !p->graph || o < 0 || o >= p->graph->nops || !p->graph->ops[o].recompute) return NULL;
  const sk_graph_op *op = &p->graph->ops[o];
  for (int k = 0; k < op->noutputs; k++)
    if (sk_parallel_recomputed(p, op->outputs[k])) return NULL;
  return op->noutputs == 1 && op->outputs[0] == p->graph->loss ? "its output is the loss"
                                                               : "its outputs are read by another pipeline chunk or are the loss";
}

/* ---- compiling ------------------------------------------------------------------------------ */

/* The plan of p->graph for p->desc.ndevices devices. */
static sk_result sk__par_compile_graph(sk_parallel_plan *p, sk_error *err) {
  const sk_graph *g = p->graph;
  const sk_allocator *a = &p->desc.allocator;
  sk_result r = SK_OK;
  p->ops = (sk_parallel_op *)sk__calloc(a, sizeof *p->ops * ((size_t)g->nops + 1), sizeof(double));
  p->tensors = (sk_parallel_tensor *)sk__calloc(a, sizeof *p->tensors * ((size_t)g->ntensors + 1), sizeof(double));
  if (!p->ops || !p->tensors) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the plan's operators and tensors");
  bool *needs = r ? NULL : (bool *)sk__calloc(a, sizeof(bool) * ((size_t)g->ntensors + 1), sizeof(bool));
  if (!r && !needs) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory for the gradient flow");
  if (!r) sk_exec_grad_flow(g, needs);
  for (int t = 0; !r && t < g->ntensors; t++) p->tensors[t].needs_grad = needs[t];
  sk__free(a, needs);
  if (!r && g->nops == 0) r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: the network has no operator");
  bool *placed = r ? NULL : (bool *)sk__calloc(a, sizeof(bool) * ((size_t)g->ntensors + 1), sizeof(bool));
  if (!r && !placed) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "parallel: out of memory placing tensors");
  if (!r) r = sk__par_place_inputs(p, placed, err);
  if (!r && p->desc.mode != SK_PARALLEL_SEMI_AUTO) r = sk__par_search(p, err);
  if (!r) r = sk__par_place(p, placed, err);
  sk__free(a, placed);
  if (!r) r = sk__par_kernel_layouts(p, err);
  if (!r) r = sk__par_opt_shards(p, err);
  if (!r) r = sk__par_steps(p, err);
  if (!r) p->loss_grad_scale = p->desc.no_loss_repeated_mean ? sk__par_loss_repeat(p) : 1;
  if (!r) r = sk__prog_build(p, err);
  return r;
}

SK_API sk_result sk_parallel_check(const sk_autoparallel *desc, sk_error *err) {
  if (!desc) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: NULL desc");
  sk_result r = sk__par_check_desc(desc, err);
  if (!r && sk__par_pipelined(desc)) r = sk__par_check_pipeline(desc, err);
  return r;
}

/* The compile of a checked g and desc, no strategy file named (g may be p->micro_graph already:
   the copy a file was loaded into). */
static sk_result sk__par_compile_checked(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *p,
                                         sk_error *err) {
  sk_result r = SK_OK;
  p->graph = g, p->desc = *desc, p->stages = p->micro = 1, p->world_devices = desc->ndevices;
  if (sk__par_pipelined(desc)) {
    r = sk__par_pipeline_begin(p, g, err);
    if (!r) r = sk_pipe_schedule_make(&desc->pipeline, &p->schedule, err);
    if (!r) r = sk__par_assign_vstages(p, err);
    if (!r) r = sk__par_check_vstages(p, err);
  }
  if (!r && desc->mode != SK_PARALLEL_SEMI_AUTO) r = sk__par_own_graph(p, err);
  if (!r) r = sk__par_compile_graph(p, err);
  return r;
}

/* With strategy files: the four steps (docs/strategy-files.md), the file fields cleared in the
   compiled desc. The loaded strategies go into the plan's copy of g, the loaded desc is checked
   as the caller's would be. */
static sk_result sk__par_compile_files(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *p,
                                       sk_error *err) {
  const sk_strategy_io_fns *io = desc->strategy_io;
  sk_autoparallel d = *desc;
  d.save_param_strategy_file = d.load_param_strategy_file = NULL;
  d.save_operator_strategy_file = d.load_operator_strategy_file = NULL;
  sk_result r = SK_OK;
  if (desc->load_operator_strategy_file) { /* into p->micro_graph, which a pipeline's copy replaces */
    p->desc = d; /* the copy's allocator */
    r = sk__par_micro_graph(p, g, 1, "strategy", err);
    if (!r) r = io->load_operators(desc->load_operator_strategy_file, p->micro_graph, &d, err);
    if (!r) r = sk_parallel_check(&d, err);
    if (!r) r = sk_graph_check(p->micro_graph, err);
  }
  if (!r) r = sk__par_compile_checked(p->micro_graph ? p->micro_graph : g, &d, p, err);
  if (!r) r = io->check(p, desc, err);
  if (!r) r = io->save(p, desc, err);
  return r;
}

SK_API sk_result sk_parallel_compile(const sk_graph *g, const sk_autoparallel *desc, sk_parallel_plan *p,
                                     sk_error *err) {
  if (!g || !desc || !p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: NULL argument");
  memset(p, 0, sizeof *p);
  sk_result r = sk_parallel_check(desc, err);
  if (!r) r = sk_graph_check(g, err);
  if (r) return r;
  r = sk__par_strategy_file(desc) ? sk__par_compile_files(g, desc, p, err) : sk__par_compile_checked(g, desc, p, err);
  if (r) sk_parallel_free(p);
  return r;
}

SK_API void sk_parallel_grad_scales(const sk_parallel_plan *p, double *scales) {
  if (!p || !p->graph || !scales) return;
  for (int o = 0; o < p->graph->nops; o++)
    for (int k = 0; k < SK_OP_MAX_INPUTS; k++) {
      bool param = k < p->graph->ops[o].ninputs && ((p->ops[o].desc.params >> k) & 1u);
      scales[o * SK_OP_MAX_INPUTS + k] = param ? p->loss_grad_scale * p->ops[o].mirror_scale[k] : 1;
    }
}

/* ---- facts ---------------------------------------------------------------------------------- */

SK_API sk_result sk_parallel_facts(const sk_parallel_plan *p, int o, int rank, sk_exec_facts *f, sk_error *err) {
  if (!p || !p->graph || !f || o < 0 || o >= p->graph->nops || rank < 0 || rank >= p->desc.ndevices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "parallel: facts: bad argument (operator %d, rank %d)", o, rank);
  memset(f, 0, sizeof *f);
  const sk_parallel_op *po = &p->ops[o];
  return sk_op_row_of(po->desc.kind)->facts(&po->desc, &po->plan, po->kernel_in, rank, f, err);
}

/* ---- printing ------------------------------------------------------------------------------- */

typedef struct sk__par_text {
  char *buf;
  size_t cap, len;
  int base; /* added to every rank printed: a pipeline stage's first world rank */
} sk__par_text;

static SK__PRINTF(2, 3) void sk__par_put(sk__par_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *at = t->len < t->cap ? t->buf + t->len : NULL;
  int n = vsnprintf(at, at ? t->cap - t->len : 0, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
}

SK_API const char *sk_parallel_mode_name(sk_parallel_mode mode) {
  static const char *const names[] = {"semi_auto", "sharding_propagation", "recursive_programming", "exhaustive"};
  return (unsigned)mode <= SK_PARALLEL_EXHAUSTIVE ? names[mode] : "?";
}

/* One operator's strategy tuples: as set, or its kernel's input cuts. */
static void sk__par_put_in_strategy(sk__par_text *t, const sk_parallel_plan *p, int o) {
  const sk_parallel_op *po = &p->ops[o];
  const sk_op_desc *d = &po->desc;
  if (d->has_layouts) {
    sk__par_put(t, "(layouts)");
    return;
  }
  int n = d->has_strategy && d->nstrategies ? d->nstrategies : p->graph->ops[o].ninputs;
  sk__par_put(t, "(");
  for (int k = 0; k < n && k < SK_OP_MAX_INPUTS; k++) {
    int len = d->has_strategy ? SK__DEF(d->strategy_len[k], d->ndims[k]) : po->plan.in[k].ndims;
    sk__par_put(t, "%s(", k ? ", " : "");
    for (int e = 0; e < len; e++)
      sk__par_put(t, "%s%d", e ? ", " : "", d->has_strategy ? d->strategy[k][e] : sk_layout_split_count(&po->plan.in[k], e));
    sk__par_put(t, "%s)", len == 1 ? "," : "");
  }
  sk__par_put(t, "%s)", n == 1 ? "," : "");
}

/* One operator's strategy: its in_strategy, then " out " and its out_strategy when it has one. */
static void sk__par_put_strategy(sk__par_text *t, const sk_parallel_plan *p, int o) {
  const sk_op_desc *d = &p->ops[o].desc;
  sk__par_put_in_strategy(t, p, o);
  if (d->nout_layouts) sk__par_put(t, " out (layouts)");
  if (!d->has_out_strategy) return;
  const sk_layout *l = &p->ops[o].plan.out[0];
  sk__par_put(t, " out ((");
  for (int e = 0; e < l->ndims; e++) sk__par_put(t, "%s%d", e ? ", " : "", d->out_strategy[e]);
  sk__par_put(t, "%s),)", l->ndims == 1 ? "," : "");
}

SK_API size_t sk_parallel_format_strategies(const sk_parallel_plan *p, char *buf, size_t cap) {
  sk__par_text t = {buf, cap, 0, 0};
  if (buf && cap) buf[0] = 0;
  if (!p || !p->graph || !p->ops) return 0;
  for (int o = 0; o < p->graph->nops; o++) {
    sk__par_put(&t, "%s ", p->graph->ops[o].name);
    sk__par_put_strategy(&t, p, o);
    sk__par_put(&t, "\n");
  }
  return t.len;
}

SK_EXTERN_C_END
#include "sk_program.h" /* the programs: built above, defined there */
#include "sk_program_fuse.h" /* their fused collectives and optimizer parallel's timing */
#include "sk_program_create.h" /* their create sections */
#endif /* SK_PARALLEL_IMPL */
