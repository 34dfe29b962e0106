/* sk_ops.h -- operator sharding rules: from a `shard` strategy (or layouts) to every tensor's
   layout and the communication the operator needs, as MindSpore's semi-auto parallel derives
   them (docs/semantics.md section 8, docs/operators.md).

   Do this in ONE .c file:   #define SK_IMPL  (or SK_OPS_IMPL + SK_LAYOUT_IMPL)   #include "sk_ops.h"
   Needs only libc; pure value math, no allocation. The rules are columns of the operator table
   (sk_optable.h, which this header includes): SK_OPS_IMPL brings SK_OPTABLE_IMPL.

   WHAT IT DERIVES, per operator (docs/operators.md states each operator's rule)
     - the device matrix (a mesh): the strategy's dims, plus a repeat axis "rep" when the
       devices outnumber the strategy's product: on the RIGHT by default (MindSpore's default
       for operators), on the LEFT with desc.repeat_left (MindSpore's
       repeated_num_in_dev_matrix_right=False) and always for GetNext, VirtualDataset, a
       Gather whose table is cut along its axis, as MindSpore builds those, and a Reshape that
       follows its input's cuts alone (a Reshape's own strategy: on the right; one given its
       input's layout, desc.follow_layout, keeps that layout's device matrix);
     - the layout of every input (rank 0: a scalar) and of every output;
     - fwd: the collective on output 0: MatMul with a split contraction dim leaves partial sums,
       summed by AllReduce along the contraction axes (or ReduceScatter when the output strategy
       asks for it); a reduction over a cut dim AllReduces (sum, or max; ReduceMean scales by
       1/group); the scalar losses (and VirtualLoss's sum) sum their devices' parts; Gather
       with a row-split table ReduceScatters (or AllReduces) along the row axis (AllReduces
       when the indices' rows are cut too: MindSpore's "shard batch and axis"); Reshape has
       none: MindSpore replaces it by the redistribution from its input's layout to its
       output's, so its kernel reads the input whole on the axes its output does not use
       (sk_op_kernel_layout);
     - bwd_in[i]: the collective on input i's gradient (MatMul's dx is partial along the axes
       that split the weight's output dim; a broadcast input's gradient along the axes that cut
       the dims it broadcasts, MAELoss's broadcast labels' too);
     - mirror[i]: MindSpore's Mirror of input i, an AllReduce over the axes its layout does not
       use (what sk-layout --op prints; Transpose, VirtualDataset, TmpIdentity and Gather's
       indices declare none, as in MindSpore);
     - grad[i]: for parameters, the gradient AllReduce over the parameter's replica group (the
       Mirror), scaled by 1/group size when gradients_mean is set. As in MindSpore, the Mirror
       sums the replicas' contributions: along a data-parallel axis each replica saw other rows;
       along a repeat axis ("rep") the replicas must hold partial gradients (MindSpore's backward
       of the redistribution into the operator delivers them so); a caller whose replicas all
       hold the full gradient divides by the repeat count first.
   Operators: every sk_op_kind, named as MindSpore's primitives (sk_op_kind_name,
   sk_op_kind_from_name). Without a strategy an operator takes MindSpore's default: data
   parallel, dim 0 of its (first) input cut by every device. The math of each operator, on a
   device's slice, is in sk_kernels.h.

   LAYOUTS (in_strategy as MindSpore's Layout objects, desc.has_layouts): every input's layout on
   one device matrix of the operator's devices. Where MindSpore computes the operator from the
   layouts themselves, so does the rule, tuples of axes included:
     - MatMul, BatchMatMul (any rank >= 2, as from a strategy): the output takes the batch
       dims' maps, x's row map and w's column map; x's and w's contraction dims are cut alike and the forward AllReduce runs along
       their axes (MatMul::CheckInputLayout, InferOutputLayout,
       InferForwardCommunicationByLayout); batch dims larger than 1 in both are cut alike;
     - the element-wise operators of one input (ReLU, GeLU, Tanh, Sigmoid, SiLU, Cast, Dropout,
       TmpIdentity; Softmax, LogSoftmax, L2Normalize with their axes whole) keep the input's
       layout (ActivationBase::InferOutputTensorInfo);
     - Add, Sub, Mul, Div, Pow: dims both inputs have larger than 1 are cut alike; the output
       takes, per dim, the map of the input that does not broadcast it (ArithmeticBase);
     - LayerNorm: x's dims from begin_norm_axis whole, gamma and beta cut as x's dims they align
       with; y keeps x's layout, mean and variance x's map on their shape (LayerNormInfo);
       RmsNorm alike with gamma alone, its normalised dims gamma's (x's last ones), rstd the
       statistic (RmsNormInfo; master also cuts the normalised dims through an AllReduce in a
       replacement graph, which shardkit refuses: its kernel is the whole operator);
     - BiasAdd: the bias cut as x's channels; y keeps x's layout (BiasAddInfo);
     - Transpose: any layout; output dim k takes input dim perm[k]'s map (TransposeInfo).
   Every other operator computes from a strategy, and takes a layout that is one: each dim cut
   by at most one axis, so the layouts read as the tuples of those axes' sizes; the rule runs on
   that strategy and every input's layout it gives must place the same slices on every device
   as the given one (else refused, naming the operator and the input, as MindSpore's
   CheckInputLayout refuses a layout its operator cannot take). The plan is then the strategy's:
   its device matrix is the strategy's. For Reshape that is a strategy of its own, which leaves
   its output whole (only without one does it follow its input's cut). VirtualLoss, which master
   gives no operator rule (it reads its input as it arrives), also follows its input's cut
   without a strategy; with one, it takes it as the scalar losses do.

   OUTPUTS (shard's out_strategy, desc.has_out_strategy or desc.out_layouts): where the asked
   layout places output k as the rule does, nothing changes. MatMul, BatchMatMul and Dense whose
   forward AllReduce completes partial sums give the output their ReduceScatter leaves instead
   (the output's dim 0 cut further by the contraction's axes: MatMul::CheckOutputLayout's and
   CheckOutputStrategy's (a*b, c)); as a tuple, out_strategy needs their x and w 2-D
   (CheckOutputStrategy; as layouts, any rank). Any other asked layout is reached by a
   redistribution after the forward: plan.redistributed and plan.wanted, which the compiler
   (sk_parallel.h) inserts and every later reader sees. (Reshape's SK_OPF_REDISTRIBUTES is
   another thing: the operator itself is the redistribution from its input's layout to its
   output's, sk_op_kernel_layout; an out_strategy on it moves its output once more.) MindSpore refuses such a layout on a primitive's shard (its
   CheckOutputLayout: "not allowed to be set by users") and inserts that redistribution for a
   Cell's or function's shard(out_strategy=...), through the identity it puts after the outputs
   (AShardIdentity); shardkit's operators take both, the second as the Cell's.

   MAELoss's labels broadcast to its prediction's shape (aligned from the right, size-1 or
   missing dims; a broadcast dim whole). Binary operators broadcast both ways: shapes and
   strategies are aligned from the right, either input may have size-1 dims; where the two
   strategies differ on a dim that one input broadcasts, the device matrix takes the larger
   cut, and each input is mapped only where its cut equals the device matrix's. MatMul and
   BatchMatMul align their batch dims the same way.

   ERRORS: a strategy given both as tuples and as layouts, a layout of another rank than its
   input or output, on another device count, or on another device matrix than input 0's, a
   layout a strategy-computed operator cannot take (a dim cut by several axes, or slices its
   strategy does not give), out_strategy with more entries than output 0's rank, or as a tuple
   on a MatMul or BatchMatMul with batch dims; a strategy with the wrong number of tuples
   (desc.nstrategies) or a tuple of the wrong length (desc.strategy_len), a value below 1, a
   value that is not a power of two when the device count is one, a value that does not divide
   its dim, a product that does not divide the devices, contraction strategies that disagree, a
   split where the operator needs a whole dim (the axis of Softmax, LogSoftmax, L2Normalize;
   LayerNorm's and RmsNorm's normalised dims; the class dim of the softmax losses; indices of a
   row-split Gather outside "shard batch and axis"), a repeat where the operator cannot repeat
   (a Gather table cut along axis and along another dim), MAELoss labels that do not broadcast
   to its prediction: all return SK_ERR_INVALID_ARGUMENT with a message that starts with the
   operator's name and names the input and dim.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_OPS_IMPL)
#define SK_OPS_IMPL
#endif
#if defined(SK_OPS_IMPL) && !defined(SK_OPTABLE_IMPL)
#define SK_OPTABLE_IMPL /* the table's rows are what the rules are reached through */
#endif
#ifndef SK_OPS_H
#define SK_OPS_H

#include "sk_comm.h"
#include "sk_layout.h"

SK_EXTERN_C_BEGIN

#define SK_OP_MAX_INPUTS 4
#define SK_OP_MAX_OUTPUTS 4

/* The operators, named as MindSpore's primitives (sk_op_kind_name / sk_op_kind_from_name). */
typedef enum sk_op_kind {
  SK_OP_MATMUL = 0,   /* x [B..,m,k] (or [..,k,m] with transpose_a), w [B..,k,n] (or [..,n,k]) */
  SK_OP_BATCH_MATMUL, /* MatMul's rule (master's one class): batch dims first in the device matrix; they broadcast */
  SK_OP_DENSE,        /* x [m,k], w [n,k], optional bias [n]: MatMul(transpose_b) + BiasAdd */
  SK_OP_RELU,         /* one input, element-wise */
  SK_OP_GELU,
  SK_OP_TANH,
  SK_OP_CAST,
  SK_OP_DROPOUT, /* outputs: the result and the mask; replicas draw one mask (global indices) */
  SK_OP_ADD,     /* two inputs, broadcasting both ways from the right */
  SK_OP_SUB,
  SK_OP_MUL,
  SK_OP_DIV,
  SK_OP_POW,
  SK_OP_BIAS_ADD,     /* x [..., C] + bias [C] */
  SK_OP_PRELU,        /* x [N, C, ...], w [C] or [1] */
  SK_OP_SOFTMAX,      /* axis (default -1) must not be split */
  SK_OP_LOG_SOFTMAX,  /* axis (default -1) must not be split */
  SK_OP_L2_NORMALIZE, /* axis (default 0) must not be split */
  SK_OP_LAYER_NORM,   /* x, gamma, beta; axis[0] = begin_norm_axis (default 1); outputs y, mean, variance */
  SK_OP_SOFTMAX_CE,   /* shardkit's fused loss: logits [B, C], labels [B, C] (or [B]): scalar mean loss */
  SK_OP_SOFTMAX_CE_LOGITS, /* MindSpore's: logits, labels [B, ..., C]; outputs loss [B], dlogits */
  SK_OP_MAE_LOSS,          /* prediction, label broadcasting to it: scalar mean |prediction - label| */
  SK_OP_REDUCE_SUM,        /* axis (none: all dims), keep_dims */
  SK_OP_REDUCE_MEAN,
  SK_OP_REDUCE_MAX,
  SK_OP_FLATTEN,         /* [N, ...] -> [N, prod(...)]; only the batch dim may be split */
  SK_OP_TRANSPOSE,       /* perm */
  SK_OP_RESHAPE,         /* out_shape[0]: the target shape */
  SK_OP_EXPAND_DIMS,     /* axis[0], in [-n-1, n] */
  SK_OP_ONE_HOT,         /* indices, on value (scalar), off value (scalar); depth; axis -1 or 0 */
  SK_OP_GATHER,          /* table [V] or [V, E], indices; axis 0 or 1 */
  SK_OP_GET_NEXT,        /* no inputs; outputs out_shape[0..noutputs) */
  SK_OP_VIRTUAL_DATASET, /* inputs pass through: the dataset strategy, repeat axis on the left */
  SK_OP_TMP_IDENTITY,    /* one input passed through: a parameter shared by several operators */
  SK_OP_SIGMOID,         /* one input, element-wise: 1 / (1 + exp(-x)) */
  SK_OP_SILU,            /* one input, element-wise: x * sigmoid(x) */
  SK_OP_RMS_NORM,        /* x, gamma (x's last dims, which are normalised); epsilon; outputs y, rstd */
  SK_OP_VIRTUAL_LOSS,    /* one input; output [1]: the sum of its elements (MindSpore's test loss) */
  SK_OP_KIND_COUNT
} sk_op_kind;

/* One operator. Zero-initialise, then set kind, the inputs' shapes, the attributes the operator
   reads, and either a strategy, or layouts, or neither (MindSpore's default: data parallel); and
   optionally what shard's out_strategy asks of the outputs, as a tuple or as layouts. Zero is
   every attribute's MindSpore default. */
typedef struct sk_op_desc {
  sk_op_kind kind;
  int ninputs;
  int ndims[SK_OP_MAX_INPUTS]; /* 0: a scalar input, strategy tuple () */
  int64_t shape[SK_OP_MAX_INPUTS][SK_MAX_DIMS];
  bool transpose_a, transpose_b;
  bool has_strategy; /* MindSpore's shard(((..),(..))) */
  int strategy[SK_OP_MAX_INPUTS][SK_MAX_DIMS];
  /* shard's out_strategy as a tuple: output 0's, on the operator's devices (the repeat axis where
     the operator puts its own). MatMul's ((a*b, c),) is its ReduceScatter output; see OUTPUTS. */
  bool has_out_strategy;
  int out_strategy[SK_MAX_DIMS];
  /* in_strategy as layouts: layouts[i] is input i's device matrix and map, every input's on one
     device matrix of the operator's devices (a layout's shape is its input's: one built on
     another shape of the same rank is read on the input's). Scalar inputs need none. */
  bool has_layouts;
  sk_layout layouts[SK_OP_MAX_INPUTS];
  /* out_strategy as layouts: output k's for k < nout_layouts (not with has_out_strategy); each
     read on its output's shape, as layouts[] are. */
  int nout_layouts;
  sk_layout out_layouts[SK_OP_MAX_OUTPUTS];
  uint32_t params;     /* bit i: input i is a parameter (gets a gradient AllReduce) */
  bool gradients_mean; /* scale parameter gradients by 1 / replica group size */
  /* How the strategy was written, so that a malformed one can be passed and rejected as
     MindSpore rejects it: the number of tuples (0: one per input) and the number of entries of
     tuple i (0: input i's rank). Zero-initialised descs keep meaning "well formed". */
  int nstrategies;
  int strategy_len[SK_OP_MAX_INPUTS];
  /* Attributes, as MindSpore names them. */
  int naxis;              /* 0: the operator's default axis (for a reduction: every dim) */
  int axis[SK_MAX_DIMS];  /* negative counts from the end */
  bool keep_dims;         /* reductions */
  int perm[SK_MAX_DIMS];  /* Transpose: output dim i is input dim perm[i] */
  /* perm was given, so that an all-zero perm is checked as a permutation ((0) is rank 1's; (0,0)
     is none) instead of being read as never set. A desc that sets a non-zero entry, as descs did
     before this field, counts as given without it. */
  bool has_perm;
  int64_t depth;          /* OneHot */
  int noutputs;           /* Reshape: 1 (the target shape); GetNext: its outputs */
  int out_ndims[SK_OP_MAX_OUTPUTS];
  int64_t out_shape[SK_OP_MAX_OUTPUTS][SK_MAX_DIMS];
  bool repeat_left; /* repeated_num_in_dev_matrix_right=False: the repeat axis goes on the left */
  /* Reshape without a strategy in a network: strategy[0] holds the cut its input arrives with,
     which the compiler sets (MindSpore gives such a Reshape its producer's layout); has_strategy
     stays false, as the strategy is not the operator's own. */
  bool follows_input;
  /* ... and the layout that input arrives in (the compiler's; ndims 0 when not given): the
     Reshape then keeps that device matrix, so the output is cut on the producer's own axes and
     nothing moves where every cut carries over. */
  sk_layout follow_layout;
  bool full_batch;  /* GetNext / VirtualDataset: every device reads the whole batch */
} sk_op_desc;

/* A collective an operator needs: kind (SK_COLL_NONE when none) and reduction, along the mesh
   axes in `axes`, the result multiplied by `scale`. */
typedef struct sk_op_comm {
  sk_coll_kind kind;
  sk_redop op;
  uint32_t axes;
  double scale;
} sk_op_comm;

typedef struct sk_op_plan {
  sk_mesh mesh; /* the device matrix */
  int ninputs, noutputs;
  sk_layout in[SK_OP_MAX_INPUTS]; /* a scalar input: ndims 0, replicated */
  sk_layout out[SK_OP_MAX_OUTPUTS]; /* after fwd (a scalar loss: one dim of size 1) */
  sk_op_comm fwd;                     /* on output 0 */
  sk_op_comm bwd_in[SK_OP_MAX_INPUTS];
  sk_op_comm mirror[SK_OP_MAX_INPUTS]; /* MindSpore's Mirror of input i, parameter or not */
  sk_op_comm grad[SK_OP_MAX_INPUTS];   /* the Mirror of parameters, scaled under gradients_mean */
  /* The outputs out_strategy asks for in another layout than out[k] (bit k): output k is
     redistributed from out[k] to wanted[k] after the forward, and its tensor keeps wanted[k]. */
  uint32_t redistributed;
  sk_layout wanted[SK_OP_MAX_OUTPUTS];
} sk_op_plan;

SK_API sk_result sk_op_plan_make(const sk_op_desc *desc, int ndevices, sk_op_plan *plan, sk_error *err);
/* The layout an operator's kernel reads input k in: plan->in[k], except for an operator MindSpore
   replaces by the redistribution from its input's layout to its output's (its row has
   SK_OPF_REDISTRIBUTES: Reshape), whose kernel reads input k whole on the mesh axes output 0
   does not use. */
SK_API sk_result sk_op_kernel_layout(sk_op_kind kind, const sk_op_plan *plan, int k, sk_layout *out, sk_error *err);
/* The plan as text (mesh, layouts, collectives with their groups); snprintf convention. */
SK_API size_t sk_op_plan_format(const sk_op_plan *plan, char *buf, size_t cap);
/* MindSpore's primitive name ("MatMul", "SoftmaxCrossEntropyWithLogits", ...). */
SK_API const char *sk_op_kind_name(sk_op_kind kind);
/* The kind of a MindSpore primitive name (older spellings too: TensorAdd, GatherV2, RealDiv,
   RMSNorm; MindSpore's _VirtualDataset, _VirtualLoss and identity_info); false when unknown, and
   for Activation, which needs its attribute (sk_op_kind_parse). */
SK_API bool sk_op_kind_from_name(const char *name, sk_op_kind *kind);
/* The kind of an operator as MindSpore writes it: its name, and, for Activation, its
   activation_type ("relu": ReLU, "sigmoid": Sigmoid; MindSpore's ActivationInfo also takes relu6,
   which shardkit has no kernel for). activation_type is NULL when not given; another operator
   with one is refused. Errors name what was wrong (an unknown name: "unknown operator type ..."). */
SK_API sk_result sk_op_kind_parse(const char *name, const char *activation_type, sk_op_kind *kind, sk_error *err);
/* The kinds `name` can spell, bit k for kind k: one for a name or an older spelling, those an
   attribute picks from for Activation (ReLU's and Sigmoid's bits); 0 for a name shardkit does
   not read. */
SK_API uint64_t sk_op_kinds_named(const char *name);

SK_EXTERN_C_END

#include "sk_optable.h" /* every operator's row; its implementation follows the rules below */

#endif /* SK_OPS_H */

/* ==== implementation ======================================================================== */
/* The rules read the table's declarations (sk_optable.h includes this header again after them). */
#if defined(SK_OPS_IMPL) && !defined(SK_OPS_IMPL_DONE) && defined(SK__OPTABLE_DECLARED)
#define SK_OPS_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"

SK_EXTERN_C_BEGIN

static sk_op_comm sk__opc(sk_coll_kind kind, uint32_t axes, double scale) {
  sk_op_comm c;
  c.kind = axes ? kind : SK_COLL_NONE, c.op = SK_SUM, c.axes = axes, c.scale = scale;
  return c;
}

/* Drops axes of size 1 from a group mask: a collective over one device is none. */
static uint32_t sk__real_axes(const sk_mesh *m, uint32_t axes) {
  uint32_t r = 0;
  for (int a = 0; a < m->naxes; a++)
    if ((axes & (1u << a)) && m->dims[a] > 1) r |= 1u << a;
  return r;
}

/* The device matrix: dims named d0, d1, ... plus a repeat axis "rep" when devices > product,
   on the right (MindSpore's default: replicas are neighbouring ranks, so a following operator
   repeated the same way needs no redistribution) or, with rep_left, on the left. *first gets
   the mesh index of d0 (NULL: not wanted). */
static sk_result sk__op_mesh(const int *dims, int n, int ndevices, bool rep_left, sk_mesh *mesh, int *first,
                                 sk_error *err) {
  long long prod = 1;
  for (int i = 0; i < n; i++) {
    if (dims[i] < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy value %d at position %d is not >= 1", dims[i], i);
    prod *= dims[i];
    if (prod > SK_MAX_DEVICES) break;
  }
  if (prod > ndevices || ndevices % prod != 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the strategy uses %lld devices, which does not divide the %d devices",
                    prod, ndevices);
  bool rep = prod < ndevices || n == 0; /* a mesh has at least one axis */
  if (n + rep > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the device matrix needs %d axes; at most %d", n + rep, SK_MAX_AXES);
  int d[SK_MAX_AXES], base = rep && rep_left ? 1 : 0;
  char names[SK_MAX_AXES][16];
  const char *np[SK_MAX_AXES];
  for (int i = 0; i < n; i++) {
    d[base + i] = dims[i];
    snprintf(names[base + i], sizeof names[0], "d%d", i);
    np[base + i] = names[base + i];
  }
  if (rep) {
    int at = rep_left ? 0 : n;
    d[at] = (int)(ndevices / prod), np[at] = "rep";
  }
  if (first) *first = base;
  return sk_mesh_init(mesh, n + rep, d, np, err);
}

/* A scalar (rank 0) tensor: replicated on every device of the mesh. */
static void sk__op_scalar(sk_layout *l, const sk_mesh *mesh) {
  memset(l, 0, sizeof *l);
  l->mesh = *mesh;
}

/* A layout whose dim i is cut by mesh axis axes[i] (-1: unsplit); rank 0 is a scalar. */
static sk_result sk__op_layout(sk_layout *l, const sk_mesh *mesh, int ndims, const int64_t *shape, const int *axes,
                               const char *what, sk_error *err) {
  if (ndims == 0) return sk__op_scalar(l, mesh), SK_OK;
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map); /* unused dims too: GCC -O1 cannot see they are never read */
  for (int i = 0; i < ndims; i++) {
    map[i].naxes = axes[i] >= 0 ? 1 : 0;
    map[i].axes[0] = axes[i];
  }
  sk_error e;
  sk_result r = sk_layout_init(l, mesh, ndims, shape, map, &e);
  if (r != SK_OK) return sk__fail(err, r, "%s: %s", what, e.msg);
  return SK_OK;
}

static uint32_t sk__dim_axes(const sk_dim_map *d) {
  uint32_t m = 0;
  for (int j = 0; j < d->naxes; j++) m |= 1u << d->axes[j];
  return m;
}

/* Inputs that carry no gradient: integer indices. */
static bool sk__op_integer_input(const sk_op_desc *d, int i) {
  return (sk_op_row_of(d->kind)->index_inputs & (1u << i)) != 0;
}

/* The backward communication every rule shares, from the layouts alone:
   - bwd_in[i]: input i's gradient is a partial sum along the axes that cut output 0 but not
     input i (MatMul's dx along w's column axis, dw along x's row axis, a broadcast input
     along the axes of the dims it broadcasts, a bias along the rows): an AllReduce there,
     except for a parameter, whose Mirror (over every axis its layout does not use, those
     included) sums it instead;
   - mirror[i]: MindSpore's Mirror, an AllReduce over the axes input i's layout does not use;
   - grad[i]: the Mirror of a parameter, scaled by 1/group size under gradients_mean. */
static void sk__op_grads(const sk_op_desc *d, sk_op_plan *p) {
  uint32_t all = p->mesh.naxes >= 32 ? 0xffffffffu : (1u << p->mesh.naxes) - 1;
  uint32_t out_used = sk_layout_used_axes(&p->out[0]);
  for (int i = 0; i < p->ninputs; i++) {
    bool param = (d->params & (1u << i)) != 0, tensor = p->in[i].ndims > 0;
    uint32_t used = tensor ? sk_layout_used_axes(&p->in[i]) : 0;
    uint32_t replicas = sk__real_axes(&p->mesh, all & ~used);
    uint32_t partial = sk__real_axes(&p->mesh, out_used & ~used);
    p->bwd_in[i] = sk__opc(SK_COLL_ALLREDUCE, param || !tensor || sk__op_integer_input(d, i) ? 0 : partial, 1);
    p->mirror[i] = sk__opc(SK_COLL_ALLREDUCE, tensor ? replicas : 0, 1);
    p->grad[i] = sk__opc(SK_COLL_NONE, 0, 1);
    if (!param) continue;
    double scale = d->gradients_mean ? 1.0 / sk_mesh_group_size(&p->mesh, replicas) : 1.0;
    p->grad[i] = sk__opc(SK_COLL_ALLREDUCE, replicas, scale);
  }
}

/* ---- shared pieces of the rules below ------------------------------------------------------ */

/* Entries of input i's strategy tuple: its rank, except OneHot's indices, whose tuple is
   written over the output (one more dim, the classes). */
static int sk__op_tuple_len(const sk_op_desc *d, int i) { return sk_op_tuple_len(d->kind, i, d->ndims[i]); }

/* Input i's strategy: the user's, or MindSpore's default (data parallel: dim 0 cut by every
   device, the others whole). */
static void sk__op_strategy_of(const sk_op_desc *d, int i, int ndevices, int *s) {
  for (int k = 0; k < sk__op_tuple_len(d, i); k++) s[k] = d->has_strategy ? d->strategy[i][k] : (k == 0 ? ndevices : 1);
}

/* axes[k] = first + k: a tensor whose dim k is cut by the device matrix's axis k. */
static void sk__op_identity(int n, int first, int *axes) {
  for (int k = 0; k < n; k++) axes[k] = first + k;
}

static long long sk__op_product(const int *s, int n) {
  long long p = 1;
  for (int k = 0; k < n; k++) p *= s[k];
  return p;
}

/* Attribute axis number k (negative counts from the end) as a dim of a rank-n tensor. */
static sk_result sk__op_axis(const sk_op_desc *d, int k, int n, int dflt, int *axis, sk_error *err) {
  int a = d->naxis > k ? d->axis[k] : dflt;
  *axis = 0; /* defined on failure too: the static analyzer does not follow sk__fail's result */
  if (a < -n || a >= n)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: axis %d is out of range [%d, %d] for a rank-%d input",
                    sk_op_kind_name(d->kind), a, -n, n - 1, n);
  *axis = a < 0 ? a + n : a;
  return SK_OK;
}

/* The operators that work along axes (Softmax, LogSoftmax, L2Normalize: default axis dflt) need
   them whole. */
static sk_result sk__op_whole_axes(const sk_op_desc *d, int n, const int *s, int dflt, sk_error *err) {
  int naxis = d->naxis > 0 ? d->naxis : 1;
  for (int k = 0; k < naxis; k++) {
    int a = 0;
    sk_result r = sk__op_axis(d, k, n, dflt, &a, err);
    if (r != SK_OK) return r;
    if (s[a] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 0 dim %d is cut %d ways, but it is the axis the operator "
                      "works along and must be whole (strategy 1)", sk_op_kind_name(d->kind), a, s[a]);
  }
  return SK_OK;
}

static void sk__op_no_comm(sk_op_plan *p) {
  p->fwd = sk__opc(SK_COLL_NONE, 0, 1);
  for (int i = 0; i < SK_OP_MAX_INPUTS; i++) p->bwd_in[i] = sk__opc(SK_COLL_NONE, 0, 1);
}

/* ---- layouts ----------------------------------------------------------------------------------- */

/* Whether two dims of layouts on mesh m are cut alike: the same axes in the same order, axes of
   size 1 (which cut nothing) left out. */
static bool sk__op_same_map(const sk_mesh *m, const sk_dim_map *a, const sk_dim_map *b) {
  int i = 0, j = 0;
  for (;;) {
    while (i < a->naxes && m->dims[a->axes[i]] == 1) i++;
    while (j < b->naxes && m->dims[b->axes[j]] == 1) j++;
    if (i == a->naxes || j == b->naxes) return i == a->naxes && j == b->naxes;
    if (a->axes[i++] != b->axes[j++]) return false;
  }
}

/* A dim's map as layout text: "None", "mp" or "(sp,dp)". */
static void sk__op_map_text(const sk_mesh *m, const sk_dim_map *d, char *buf, size_t cap) {
  size_t len = 0;
  if (cap) buf[0] = 0;
  if (d->naxes == 0) {
    snprintf(buf, cap, "None");
    return;
  }
  for (int j = 0; j < d->naxes && len < cap; j++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s%s", j ? "," : d->naxes > 1 ? "(" : "", m->names[d->axes[j]],
                            j == d->naxes - 1 && d->naxes > 1 ? ")" : "");
}

/* A layout as text for messages: "dp,None on dp=2,mp=4". */
static void sk__op_layout_text(const sk_layout *l, char *buf, size_t cap) {
  char map[256], mesh[256];
  sk_layout_format(l, map, sizeof map);
  sk_mesh_format(&l->mesh, mesh, sizeof mesh);
  snprintf(buf, cap, "%s on %s", l->ndims ? map : "a scalar", mesh);
}

/* The inputs' layouts as desc.layouts gives them, each read on its input's shape (MindSpore's
   Layout carries no shape), all on one device matrix of ndevices devices; a scalar input takes
   that matrix. */
static sk_result sk__op_given_layouts(const sk_op_desc *d, int ndevices, sk_layout *in, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int first = -1;
  for (int i = 0; i < d->ninputs; i++) {
    const sk_layout *l = &d->layouts[i];
    if (d->ndims[i] == 0) continue;
    if (first < 0) first = i;
    const sk_mesh *m = &d->layouts[first].mesh;
    bool same = l->mesh.naxes == m->naxes;
    for (int a = 0; same && a < m->naxes; a++) same = l->mesh.dims[a] == m->dims[a];
    if (l->ndims != d->ndims[i])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d's layout has %d dims for a rank-%d input", name, i,
                      l->ndims, d->ndims[i]);
    if (l->mesh.size != ndevices)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d's layout is on %d devices, the operator on %d", name, i,
                      l->mesh.size, ndevices);
    if (!same) {
      char a[256], b[256];
      sk_mesh_format(&l->mesh, a, sizeof a), sk_mesh_format(m, b, sizeof b);
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d's device matrix %s is not input %d's %s: an operator's "
                      "layouts share one device matrix", name, i, a, first, b);
    }
    sk_error e;
    if (sk_layout_init(&in[i], &l->mesh, d->ndims[i], d->shape[i], l->map, &e))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d's layout: %s", name, i, e.msg);
  }
  if (first < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: layouts are for tensor inputs; it has none", name);
  for (int i = 0; i < d->ninputs; i++)
    if (d->ndims[i] == 0) sk__op_scalar(&in[i], &in[first].mesh);
  return SK_OK;
}

/* The strategy the layouts read as: each dim's cut the size of its axis (a tuple of axes: their
   product, which sk__op_check_given refuses unless it places the same slices). */
static void sk__op_strategy_of_layouts(const sk_op_desc *d, const sk_layout *in, sk_op_desc *s) {
  *s = *d;
  s->has_strategy = true, s->nstrategies = 0;
  memset(s->strategy_len, 0, sizeof s->strategy_len);
  for (int i = 0; i < d->ninputs; i++)
    for (int k = 0; k < sk_op_tuple_len(d->kind, i, d->ndims[i]); k++)
      s->strategy[i][k] = k < d->ndims[i] ? sk_layout_split_count(&in[i], k) : 1; /* OneHot's classes: whole */
}

/* MindSpore's CheckInputLayout for an operator that computes from a strategy: the rule's input
   layouts place what the given ones place. */
static sk_result sk__op_check_given(const sk_op_desc *d, const sk_layout *given, const sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  for (int i = 0; i < d->ninputs; i++) {
    if (d->ndims[i] == 0 || sk_layout_same_slices(&p->in[i], &given[i])) continue;
    char a[600], b[600], t[64];
    for (int k = 0; k < given[i].ndims; k++)
      if (given[i].map[k].naxes > 1) {
        sk__op_map_text(&given[i].mesh, &given[i].map[k], t, sizeof t);
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d dim %d is cut by several axes %s in its layout, but "
                        "%s computes from a strategy, whose tuples cut a dim by one axis", name, i, k, t, name);
      }
    sk__op_layout_text(&given[i], a, sizeof a), sk__op_layout_text(&p->in[i], b, sizeof b);
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d's layout %s is not one its strategy gives (%s places "
                    "other slices on the devices): %s computes from a strategy, and takes a layout only as that "
                    "strategy's", name, i, a, b, name);
  }
  return SK_OK;
}

/* Output k as out_strategy asks for it, on the rule's output shape. */
static sk_result sk__op_asked_output(const sk_op_desc *d, int ndevices, int k, const sk_layout *rule, sk_layout *w,
                                     sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  sk_error e;
  if (d->has_out_strategy) {
    int len = SK_MAX_DIMS;
    while (len > 0 && d->out_strategy[len - 1] == 0) len--;
    if (len > rule->ndims)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: out_strategy has %d entries for the rank-%d output", name, len,
                      rule->ndims);
    if (sk_layout_from_strategy(w, ndevices, rule->ndims, rule->shape, d->out_strategy,
                                d->repeat_left ? SK_REPEAT_LEFT : SK_REPEAT_RIGHT, &e))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: out_strategy: %s", name, e.msg);
    return SK_OK;
  }
  const sk_layout *l = &d->out_layouts[k];
  if (l->ndims != rule->ndims)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: output %d's layout has %d dims for a rank-%d output", name, k,
                    l->ndims, rule->ndims);
  if (l->mesh.size != ndevices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: output %d's layout is on %d devices, the operator on %d", name, k,
                    l->mesh.size, ndevices);
  if (sk_layout_init(w, &l->mesh, rule->ndims, rule->shape, l->map, &e))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: output %d's layout: %s", name, k, e.msg);
  return SK_OK;
}

/* The MatMul family's other output: the partial sums ReduceScattered along dim 0 over the
   contraction's axes instead of AllReduced (MatMul::CheckOutputLayout extends the output's dim
   0 map by x's contraction map). Taken when it places `asked`. */
static bool sk__op_reduce_scatter(const sk_op_desc *d, const sk_layout *asked, sk_op_plan *p) {
  const sk_op_comm *f = &p->fwd;
  if (!(sk_op_row_of(d->kind)->flags & SK_OPF_CONTRACTS) || f->kind != SK_COLL_ALLREDUCE || f->op != SK_SUM ||
      f->scale != 1 || p->out[0].ndims < 1)
    return false;
  sk_dim_map map[SK_MAX_DIMS];
  memcpy(map, p->out[0].map, sizeof map);
  for (int a = 0; a < p->mesh.naxes; a++)
    if ((f->axes >> a) & 1u) map[0].axes[map[0].naxes++] = a;
  sk_layout rs;
  if (sk_layout_init(&rs, &p->mesh, p->out[0].ndims, p->out[0].shape, map, NULL) || !sk_layout_same_slices(&rs, asked))
    return false;
  p->out[0] = rs, p->fwd.kind = SK_COLL_REDUCE_SCATTER;
  sk__op_grads(d, p); /* output 0 is now cut by the contraction's axes too */
  return true;
}

/* shard's out_strategy: each output asked for in another layout is taken by a ReduceScatter
   (the MatMul family) or else redistributed after the forward. */
static sk_result sk__op_outputs_asked(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  if (d->has_out_strategy && d->nout_layouts)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: out_strategy is given as a tuple and as layouts; give one", name);
  int n = d->has_out_strategy ? 1 : d->nout_layouts;
  if (n < 0 || n > p->noutputs)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %d output layouts for %d output%s", name, n, p->noutputs,
                    p->noutputs == 1 ? "" : "s");
  for (int k = 0; k < n; k++) {
    sk_layout w;
    sk_result r = sk__op_asked_output(d, ndevices, k, &p->out[k], &w, err);
    if (r) return r;
    if (sk_layout_same_slices(&w, &p->out[k]) || (k == 0 && sk__op_reduce_scatter(d, &w, p))) continue;
    p->redistributed |= 1u << k, p->wanted[k] = w;
  }
  return SK_OK;
}

/* An out_strategy tuple on the MatMul family needs 2-D x and w (MatMul::CheckOutputStrategy: "must
   be 2 if set output strategy", before it reads the tuple); output layouts have no such
   condition (MatMul::CheckOutputLayout), so a batched MatMul takes its out_strategy as layouts. */
static sk_result sk__op_mm_out_strategy_2d(const sk_op_desc *d, sk_error *err) {
  if (!d->has_out_strategy || (d->ndims[0] == 2 && d->ndims[1] == 2)) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: an output strategy (a tuple) needs 2-D x and w, got ranks %d and %d "
                  "(batch dims: give out_strategy as layouts)", sk_op_kind_name(d->kind), d->ndims[0], d->ndims[1]);
}

/* MatMul and BatchMatMul from layouts (any rank >= 2, as from a strategy): x [.., m, k] and
   w [.., k, n] (a transpose swaps its input's last two dims). */
static sk_result sk__op_matmul_layouts(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int nx = d->ndims[0], nw = d->ndims[1];
  if (d->ninputs != 2 || nx < 2 || nw < 2)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: needs two inputs of >= 2 dims (got %d and %d)", name, nx, nw);
  sk_layout in[SK_OP_MAX_INPUTS];
  sk_result r = sk__op_mm_out_strategy_2d(d, err);
  if (r == SK_OK) r = sk__op_given_layouts(d, ndevices, in, err);
  if (r) return r;
  const sk_layout *x = &in[0], *w = &in[1];
  int xm = nx - 2 + d->transpose_a, xk = nx - 1 - d->transpose_a, wk = nw - 2 + d->transpose_b, wn = nw - 1 - d->transpose_b;
  int nb = (nx > nw ? nx : nw) - 2, px = nb - (nx - 2), pw = nb - (nw - 2);
  char a[64], b[64];
  if (x->shape[xk] != w->shape[wk])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: contraction dims differ: x dim %d is %lld, w dim %d is %lld", name, xk,
                    (long long)x->shape[xk], wk, (long long)w->shape[wk]);
  if (!sk__op_same_map(&x->mesh, &x->map[xk], &w->map[wk])) {
    sk__op_map_text(&x->mesh, &x->map[xk], a, sizeof a), sk__op_map_text(&w->mesh, &w->map[wk], b, sizeof b);
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: x's contraction dim (dim %d) is cut by %s but w's (dim %d) by %s; "
                    "they must be cut alike", name, xk, a, wk, b);
  }
  int64_t oshape[SK_MAX_DIMS];
  sk_dim_map omap[SK_MAX_DIMS], none;
  memset(omap, 0, sizeof omap), memset(&none, 0, sizeof none);
  for (int i = 0; i < nb; i++) { /* the batch dims, aligned from the right */
    int64_t hx = i < px ? 1 : x->shape[i - px], hw = i < pw ? 1 : w->shape[i - pw];
    const sk_dim_map *mx = i < px ? &none : &x->map[i - px], *mw = i < pw ? &none : &w->map[i - pw];
    if (hx != hw && hx != 1 && hw != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: batch dims %lld (x) and %lld (w) do not broadcast", name,
                      (long long)hx, (long long)hw);
    if (hx > 1 && hw > 1 && !sk__op_same_map(&x->mesh, mx, mw)) {
      sk__op_map_text(&x->mesh, mx, a, sizeof a), sk__op_map_text(&w->mesh, mw, b, sizeof b);
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: batch dim %d is cut by %s in x but by %s in w; a batch both "
                      "inputs hold is cut alike", name, i, a, b);
    }
    oshape[i] = hx > hw ? hx : hw, omap[i] = hx >= hw ? *mx : *mw;
  }
  oshape[nb] = x->shape[xm], omap[nb] = x->map[xm];
  oshape[nb + 1] = w->shape[wn], omap[nb + 1] = w->map[wn];
  p->mesh = x->mesh, p->ninputs = 2, p->in[0] = *x, p->in[1] = *w;
  sk_error e;
  if (sk_layout_init(&p->out[0], &p->mesh, nb + 2, oshape, omap, &e))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: the output x's and w's layouts give: %s", name, e.msg);
  p->fwd = sk__opc(SK_COLL_ALLREDUCE, sk__real_axes(&p->mesh, sk__dim_axes(&x->map[xk])), 1);
  sk__op_grads(d, p);
  return SK_OK;
}

/* The batch dims of MatMul and BatchMatMul, aligned from the right as numpy broadcasts them (either input may
   have fewer, or size-1 ones): per position the device matrix takes the cut both agree on, or
   the larger where one input broadcasts, and an input is mapped there only where its cut is
   the device matrix's (as for Add). bax/baw get x's / w's batch axes, bshape the output's. */
static sk_result sk__bmm_batch(const sk_op_desc *d, const int *sx, const int *sw, int nb, int *dev, int *bax, int *baw,
                               int64_t *bshape, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int px = nb - (d->ndims[0] - 2), pw = nb - (d->ndims[1] - 2);
  for (int i = 0; i < nb; i++) {
    int64_t hx = i < px ? 1 : d->shape[0][i - px], hw = i < pw ? 1 : d->shape[1][i - pw];
    int cx = i < px ? 1 : sx[i - px], cw = i < pw ? 1 : sw[i - pw];
    if (hx != hw && hx != 1 && hw != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: batch dims %lld (x) and %lld (w) do not broadcast", name,
                      (long long)hx, (long long)hw);
    if (cx != cw && hx != 1 && hw != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: batch dim %d is cut %d ways in x but %d in w", name, i - px,
                      cx, cw);
    if ((hx == 1 && cx != 1) || (hw == 1 && cw != 1))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: a size-1 batch dim is cut %d ways", name,
                      hx == 1 ? cx : cw);
    dev[i] = cx == cw ? cx : cx * cw;
    bshape[i] = hx > hw ? hx : hw;
    if (i >= px) bax[i - px] = cx == dev[i] ? i : -1;
    if (i >= pw) baw[i - pw] = cw == dev[i] ? i : -1;
  }
  return SK_OK;
}

/* The output of MatMul: [batch..., m, n] cut by (batch..., a, c), its partial sums over b
   completed by an AllReduce (an out_strategy may turn it into a ReduceScatter:
   sk__op_outputs_asked). */
static sk_result sk__matmul_output(int nb, int first, const int64_t *oshape, sk_op_plan *p, sk_error *err) {
  int ao[SK_MAX_DIMS];
  sk__op_identity(nb + 1, first, ao);
  ao[nb + 1] = first + nb + 2;
  p->fwd = sk__opc(SK_COLL_ALLREDUCE, sk__real_axes(&p->mesh, 1u << (first + nb + 1)), 1);
  return sk__op_layout(&p->out[0], &p->mesh, nb + 2, oshape, ao, "output", err);
}

/* Which form the shared rule below plans: MindSpore's MatMul class, which MatMul and BatchMatMul
   share on master (matmul_info.h: any rank >= 2, batch dims broadcast), or Dense (2-D x). */
typedef enum sk__op_mm_form { SK__MM_MATMUL, SK__MM_DENSE } sk__op_mm_form;

/* MatMul / BatchMatMul / Dense from a strategy: device matrix [batch..., a, b, c], b contracted.
   x is [batch..., m, k] (or [.., k, m] with transpose_a), w [batch..., k, n] (or [.., n, k]
   with transpose_b; Dense always). */
static sk_result sk__op_matmul(const sk_op_desc *d, int ndevices, sk__op_mm_form form, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int nx = d->ndims[0], nw = d->ndims[1];
  bool batch = form == SK__MM_MATMUL, tb = d->transpose_b || form == SK__MM_DENSE;
  if (d->ninputs != (form == SK__MM_DENSE ? d->ninputs : 2) || nx < 2 || nw < 2 || (!batch && (nx != 2 || nw != 2)))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: needs two inputs of %s dims (got %d and %d)", name,
                    batch ? ">= 2" : "2", nx, nw);
  sk_result r = sk__op_mm_out_strategy_2d(d, err);
  if (r != SK_OK) return r;
  int nb = (nx > nw ? nx : nw) - 2;
  /* positions of m, k in x and k, n in w */
  int xm = nx - 2 + d->transpose_a, xk = nx - 1 - d->transpose_a, wk = nw - 2 + tb, wn = nw - 1 - tb;
  if (d->shape[0][xk] != d->shape[1][wk])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: contraction dims differ: x dim %d is %lld, w dim %d is %lld", name, xk,
                    (long long)d->shape[0][xk], wk, (long long)d->shape[1][wk]);
  int sx[SK_MAX_DIMS] = {0}, sw[SK_MAX_DIMS] = {0}, dev[SK_MAX_DIMS + 1], ax[SK_MAX_DIMS] = {0}, aw[SK_MAX_DIMS] = {0};
  for (int i = 0; i < nx; i++) sx[i] = d->has_strategy ? d->strategy[0][i] : 1;
  for (int i = 0; i < nw; i++) sw[i] = d->has_strategy ? d->strategy[1][i] : 1;
  if (!d->has_strategy) sx[nx > 2 ? 0 : xm] = ndevices; /* data parallel: the batch (or rows) */
  int wb = nw - nx; /* w's dim aligned with x's batch dim 0 (from the right), cut alike */
  if (!d->has_strategy && batch && nx > 2 && wb >= 0 && wb < nw - 2 && d->shape[1][wb] > 1) sw[wb] = ndevices;
  if (sx[xk] != sw[wk])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: the contraction dim is cut %d ways in x but %d in w", name, sx[xk],
                    sw[wk]);
  int64_t oshape[SK_MAX_DIMS];
  r = sk__bmm_batch(d, sx, sw, nb, dev, ax, aw, oshape, err);
  if (r != SK_OK) return r;
  dev[nb] = sx[xm], dev[nb + 1] = sx[xk], dev[nb + 2] = sw[wn];
  int first = 0;
  if ((r = sk__op_mesh(dev, nb + 3, ndevices, d->repeat_left, &p->mesh, &first, err)) != SK_OK) return r;
  for (int i = 0; i < nx - 2; i++) ax[i] += ax[i] >= 0 ? first : 0;
  for (int i = 0; i < nw - 2; i++) aw[i] += aw[i] >= 0 ? first : 0;
  ax[xm] = first + nb, ax[xk] = first + nb + 1, aw[wk] = first + nb + 1, aw[wn] = first + nb + 2;
  oshape[nb] = d->shape[0][xm], oshape[nb + 1] = d->shape[1][wn];
  p->ninputs = 2;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, nx, d->shape[0], ax, "input 0 (x)", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->in[1], &p->mesh, nw, d->shape[1], aw, "input 1 (w)", err)) != SK_OK) return r;
  if ((r = sk__matmul_output(nb, first, oshape, p, err)) != SK_OK) return r;
  return SK_OK;
}

/* MatMul, BatchMatMul, Dense from a strategy. Dense: MatMul with w [n, k] plus an optional bias
   [n], cut as w's rows and added after the forward AllReduce. */
static sk_result sk__op_matmul_family(const sk_op_desc *d, int ndevices, sk__op_mm_form form, sk_op_plan *p,
                                      sk_error *err) {
  if (d->ninputs != 2 && d->ninputs != 3)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Dense: takes x, w and an optional bias, got %d inputs", d->ninputs);
  sk_result r = sk__op_matmul(d, ndevices, form, p, err);
  if (r != SK_OK) return r;
  if (d->ninputs == 3) {
    int c = d->has_strategy ? d->strategy[1][0] : 1, bc = d->has_strategy ? d->strategy[2][0] : c;
    int ab = p->in[1].map[0].axes[0]; /* w's rows: the c axis */
    if (d->ndims[2] != 1 || d->shape[2][0] != d->shape[1][0])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Dense: the bias must be [%lld], as w's rows", (long long)d->shape[1][0]);
    if (bc != c)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Dense: input 2 (bias) dim 0 is cut %d ways but w's rows %d ways", bc, c);
    if ((r = sk__op_layout(&p->in[2], &p->mesh, 1, d->shape[2], &ab, "input 2 (bias)", err)) != SK_OK) return r;
    p->ninputs = 3;
  }
  sk__op_grads(d, p);
  return SK_OK;
}

/* Binary operators: both shapes and strategies padded on the left with 1s to the same rank,
   as MindSpore aligns them. Without a strategy, dim 0 of the (padded) output is cut across all
   devices in every input that does not broadcast it. */
static sk_result sk__binary_align(const sk_op_desc *d, int ndevices, int n, int64_t sh[2][SK_MAX_DIMS],
                                  int st[2][SK_MAX_DIMS], sk_error *err) {
  for (int k = 0; k < 2; k++) {
    int pad = n - d->ndims[k];
    for (int i = 0; i < n; i++) {
      sh[k][i] = i < pad ? 1 : d->shape[k][i - pad];
      st[k][i] = i < pad ? 1 : d->has_strategy ? d->strategy[k][i - pad] : 1;
      if (st[k][i] < 1)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input %d dim %d is cut %d ways; must be >= 1", k, i - pad,
                        st[k][i]);
      if (sh[k][i] == 1 && st[k][i] != 1)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input %d dim %d has size 1 but is cut %d ways", k, i - pad,
                        st[k][i]);
    }
    if (!d->has_strategy && n > 0 && sh[k][0] != 1) st[k][0] = ndevices;
  }
  for (int i = 0; i < n; i++) {
    int j0 = i - (n - d->ndims[0]), j1 = i - (n - d->ndims[1]);
    if (sh[0][i] != sh[1][i] && sh[0][i] != 1 && sh[1][i] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input 1 dim %d (%lld) does not broadcast with input 0 dim %d (%lld)",
                      j1, (long long)sh[1][i], j0, (long long)sh[0][i]);
    /* only a dim one input broadcasts may be cut differently: the other input's cut wins */
    if (st[0][i] != st[1][i] && sh[0][i] != 1 && sh[1][i] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input 1 dim %d is cut %d ways but input 0 dim %d %d ways", j1,
                      st[1][i], j0, st[0][i]);
  }
  return SK_OK;
}

/* Add, Mul, ...: the device matrix takes, per aligned dim, the cut both inputs agree on, or the
   larger one where one input broadcasts; an input is mapped on a dim only where its cut is the
   device matrix's (MindSpore's ArithmeticBase). */
static sk_result sk__op_binary_layouts(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err);

static sk_result sk__op_rule_binary(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 2) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: takes 2 inputs, got %d", sk_op_kind_name(d->kind), d->ninputs);
  if (d->has_layouts) return sk__op_binary_layouts(d, ndevices, p, err);
  int n = d->ndims[0] > d->ndims[1] ? d->ndims[0] : d->ndims[1];
  int64_t sh[2][SK_MAX_DIMS], osh[SK_MAX_DIMS];
  int st[2][SK_MAX_DIMS], dev[SK_MAX_DIMS] = {0}, ao[SK_MAX_DIMS] = {0};
  sk_result r = sk__binary_align(d, ndevices, n, sh, st, err);
  if (r != SK_OK) return r;
  for (int i = 0; i < n; i++) {
    dev[i] = st[0][i] == st[1][i] ? st[0][i] : st[0][i] * st[1][i]; /* one of the two is 1 */
    osh[i] = sh[0][i] > sh[1][i] ? sh[0][i] : sh[1][i];
  }
  int first = 0;
  if ((r = sk__op_mesh(dev, n, ndevices, d->repeat_left, &p->mesh, &first, err)) != SK_OK) return r;
  sk__op_identity(n, first, ao);
  p->ninputs = 2;
  for (int k = 0; k < 2; k++) {
    int pad = n - d->ndims[k], a[SK_MAX_DIMS];
    for (int j = 0; j < d->ndims[k]; j++) a[j] = st[k][pad + j] == dev[pad + j] ? ao[pad + j] : -1;
    const char *what = k == 0 ? "input 0" : "input 1";
    if ((r = sk__op_layout(&p->in[k], &p->mesh, d->ndims[k], d->shape[k], a, what, err)) != SK_OK) return r;
  }
  if ((r = sk__op_layout(&p->out[0], &p->mesh, n, osh, ao, "output", err)) != SK_OK) return r;
  p->fwd = sk__opc(SK_COLL_NONE, 0, 1);
  sk__op_grads(d, p);
  return SK_OK;
}

/* Add, Mul, ... from layouts (ArithmeticBase::CheckInputLayout, InferOutputLayout): aligned from
   the right, a dim both inputs hold larger than 1 is cut alike; the output takes, per dim, the
   map of the input that does not broadcast it. */
static sk_result sk__op_binary_layouts(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  sk_layout in[SK_OP_MAX_INPUTS];
  sk_result r = sk__op_given_layouts(d, ndevices, in, err);
  if (r) return r;
  int n = d->ndims[0] > d->ndims[1] ? d->ndims[0] : d->ndims[1], pad0 = n - d->ndims[0], pad1 = n - d->ndims[1];
  int64_t osh[SK_MAX_DIMS];
  sk_dim_map om[SK_MAX_DIMS], none;
  memset(om, 0, sizeof om), memset(&none, 0, sizeof none);
  for (int i = 0; i < n; i++) {
    int64_t h0 = i < pad0 ? 1 : d->shape[0][i - pad0], h1 = i < pad1 ? 1 : d->shape[1][i - pad1];
    const sk_dim_map *m0 = i < pad0 ? &none : &in[0].map[i - pad0], *m1 = i < pad1 ? &none : &in[1].map[i - pad1];
    if (h0 != h1 && h0 != 1 && h1 != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 1 dim %d (%lld) does not broadcast with input 0 dim %d (%lld)",
                      name, i - pad1, (long long)h1, i - pad0, (long long)h0);
    if (h0 > 1 && h1 > 1 && !sk__op_same_map(&in[0].mesh, m0, m1)) {
      char a[64], b[64];
      sk__op_map_text(&in[0].mesh, m0, a, sizeof a), sk__op_map_text(&in[0].mesh, m1, b, sizeof b);
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 1 dim %d is cut by %s but input 0 dim %d by %s", name,
                      i - pad1, b, i - pad0, a);
    }
    osh[i] = h0 > h1 ? h0 : h1, om[i] = h0 >= h1 ? *m0 : *m1; /* the larger's (equal cuts where both are) */
  }
  p->mesh = in[0].mesh, p->ninputs = 2, p->in[0] = in[0], p->in[1] = in[1];
  sk_error e;
  if (sk_layout_init(&p->out[0], &p->mesh, n, osh, om, &e))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: the output its inputs' layouts give: %s", name, e.msg);
  p->fwd = sk__opc(SK_COLL_NONE, 0, 1);
  sk__op_grads(d, p);
  return SK_OK;
}

/* Input i's tuple has the wrong number of entries. OneHot's indices tuple is measured against
   the output, one rank more than the indices, so its message names the output: "for a rank-2
   tensor" would send the reader to rank-1 indices. */
static sk_result sk__op_tuple_len_fail(const sk_op_desc *d, int i, int want, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind), *entries = d->strategy_len[i] == 1 ? "y" : "ies";
  if (sk_op_row_of(d->kind)->tuple_extra && i == 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 0's tuple has %d entr%s for the rank-%d output; the indices' "
                    "tuple is written over the output (the indices' %d dim%s, then the classes)", name, d->strategy_len[i],
                    entries, want, d->ndims[0], d->ndims[0] == 1 ? "" : "s");
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d's tuple has %d entr%s for a rank-%d tensor", name, i,
                  d->strategy_len[i], entries, want);
}

/* MindSpore's first strategy checks: one tuple per input, each as long as its input's rank,
   every value >= 1 and, when the device count is a power of two, a power of two. Whether a
   value divides its dim is checked when the layouts are built, naming the dim. */
static sk_result sk__op_check_strategy_form(const sk_op_desc *d, int ndevices, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  if (d->nstrategies != 0 && d->nstrategies != d->ninputs)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: strategy has %d tuple%s for %d input%s", name, d->nstrategies,
                    d->nstrategies == 1 ? "" : "s", d->ninputs, d->ninputs == 1 ? "" : "s");
  bool pow2 = (ndevices & (ndevices - 1)) == 0;
  for (int i = 0; i < d->ninputs; i++) {
    int want = sk__op_tuple_len(d, i);
    if (d->strategy_len[i] != 0 && d->strategy_len[i] != want) return sk__op_tuple_len_fail(d, i, want, err);
    for (int k = 0; k < want; k++) {
      int v = d->strategy[i][k];
      if (v < 1)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d dim %d is cut %d ways; strategy values must be >= 1",
                        name, i, k, v);
      if (pow2 && (v & (v - 1)) != 0)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                        "%s: input %d dim %d is cut %d ways; on %d devices (a power of two) every strategy value must "
                        "be a power of two", name, i, k, v, ndevices);
    }
  }
  return SK_OK;
}

/* How BiasAdd, Flatten and the losses differ inside the rule they share. */
typedef enum sk__op_align {
  SK__ALIGN_RIGHT,  /* input 1 aligns with input 0 from the right */
  SK__ALIGN_LABELS, /* so do dense labels; sparse labels [B] go with the batch dim */
  SK__ALIGN_BIAS    /* a rank-1 bias at dim 1, the channels */
} sk__op_align;

typedef enum sk__op_batch_out {
  SK__OUT_SAME,      /* the output is input 0 */
  SK__OUT_FLAT,      /* [N, prod(...)] */
  SK__OUT_SCALAR,    /* a scalar loss, summed over the devices that cut the inputs */
  SK__OUT_PER_SAMPLE /* a loss per sample [B], and the logits' gradient */
} sk__op_batch_out;

typedef struct sk__op_batch_form {
  int ninputs;
  bool batch_only; /* every dim but the batch whole */
  sk__op_align align;
  sk__op_batch_out out;
} sk__op_batch_form;

/* Input 1 of BiasAdd and the losses, aligned with input 0 from the right (sparse labels [B] go
   with the logits' batch dim): each dim must match input 0's and be cut as it is, or broadcast
   (size 1, whole). */
static sk_result sk__op_second_input(const sk_op_desc *d, sk__op_align align, const int *s0, const int *ax,
                                     sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int n0 = d->ndims[0], n1 = d->ndims[1], a1[SK_MAX_DIMS] = {0};
  if (n1 > n0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 1 has more dims (%d) than input 0 (%d)", name, n1, n0);
  int shift = n0 - n1; /* aligned from the right */
  if (align == SK__ALIGN_LABELS && n1 == 1) shift = 0; /* sparse labels [B]: the batch dim */
  if (align == SK__ALIGN_BIAS) {
    /* MindSpore's BiasAdd adds along dim 1, the channels of NCHW (the last dim of a 2-D x) */
    if (n0 < 2 || n1 != 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "BiasAdd: takes x of rank >= 2 and a rank-1 bias");
    shift = 1;
  }
  for (int j = 0; j < n1; j++) {
    int i = shift + j;
    bool broadcast = d->shape[1][j] == 1 && d->shape[0][i] != 1;
    int s1 = d->has_strategy ? d->strategy[1][j] : broadcast ? 1 : s0[i]; /* default: follow input 0 */
    if (broadcast) {
      if (s1 != 1)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 1 dim %d broadcasts (size 1) but is cut %d ways", name, j, s1);
      a1[j] = -1;
      continue;
    }
    if (d->shape[1][j] != d->shape[0][i])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 1 dim %d (%lld) does not broadcast to input 0 dim %d (%lld)",
                      name, j, (long long)d->shape[1][j], i, (long long)d->shape[0][i]);
    if (s1 != s0[i])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 1 dim %d is cut %d ways but input 0 dim %d %d ways", name, j,
                      s1, i, s0[i]);
    a1[j] = ax[i];
  }
  return sk__op_layout(&p->in[1], &p->mesh, n1, d->shape[1], a1, "input 1", err);
}

/* The outputs of BiasAdd, Flatten and the losses. A loss reduced to a scalar (the fused
   SoftmaxCrossEntropy, MAELoss) is a per-device sum divided by the global count, made whole
   by an AllReduce along every axis that cuts the inputs. */
static sk_result sk__op_batch_outputs(const sk_op_desc *d, sk__op_batch_out out, const int *ax, sk_op_plan *p,
                                      sk_error *err) {
  int n0 = d->ndims[0];
  sk_result r = SK_OK;
  p->noutputs = 1;
  if (out == SK__OUT_FLAT) {
    int64_t oshape[2] = {d->shape[0][0], 1};
    for (int i = 1; i < n0; i++) oshape[1] *= d->shape[0][i];
    int ao[2] = {ax[0], -1};
    r = sk__op_layout(&p->out[0], &p->mesh, 2, oshape, ao, "output", err);
  } else if (out == SK__OUT_SCALAR) {
    int64_t one = 1;
    int ao[1] = {-1};
    r = sk__op_layout(&p->out[0], &p->mesh, 1, &one, ao, "output", err);
    p->fwd = sk__opc(SK_COLL_ALLREDUCE, sk__real_axes(&p->mesh, sk_layout_used_axes(&p->in[0])), 1);
  } else if (out == SK__OUT_PER_SAMPLE) {
    /* the loss [B], the logits' dim 0 (MindSpore's infer: loss_shape = {logits_shp[0]}), takes
       dim 0's axis (master's InferTensorMap: {tensor_map_index[0]}); output 1, the logits'
       gradient, the logits' layout */
    r = sk__op_layout(&p->out[0], &p->mesh, 1, d->shape[0], ax, "output 0 (loss)", err);
    p->out[1] = p->in[0], p->noutputs = 2;
  } else {
    p->out[0] = p->in[0];
  }
  return r;
}

/* BiasAdd, Flatten, SoftmaxCrossEntropy (fused), SoftmaxCrossEntropyWithLogits, MAELoss: the
   device matrix is input 0's strategy; input 1 aligns with it from the right. Flatten and the
   fused loss keep every dim but the batch whole. */
static sk_result sk__op_batch_rule(const sk_op_desc *d, int ndevices, sk__op_batch_form form, sk_op_plan *p,
                                   sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  if (d->ninputs != form.ninputs)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: takes %d input(s), got %d", name, form.ninputs, d->ninputs);
  int n0 = d->ndims[0], s0[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, first = 0;
  sk__op_strategy_of(d, 0, ndevices, s0);
  for (int i = 1; form.batch_only && i < n0; i++)
    if (s0[i] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: only the batch dim may be cut, but input 0 dim %d is cut %d ways",
                      name, i, s0[i]);
  sk_result r = sk__op_mesh(s0, n0, ndevices, d->repeat_left, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  sk__op_identity(n0, first, ax);
  p->ninputs = d->ninputs;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, n0, d->shape[0], ax, "input 0", err)) != SK_OK) return r;
  if (d->ninputs == 2 && (r = sk__op_second_input(d, form.align, s0, ax, p, err)) != SK_OK) return r;
  sk__op_no_comm(p);
  if ((r = sk__op_batch_outputs(d, form.out, ax, p, err)) != SK_OK) return r;
  sk__op_grads(d, p);
  return SK_OK;
}

static const sk__op_batch_form sk__op_bias_add_form = {2, false, SK__ALIGN_BIAS, SK__OUT_SAME},
                               sk__op_flatten_form = {1, true, SK__ALIGN_RIGHT, SK__OUT_FLAT},
                               sk__op_softmax_ce_form = {2, true, SK__ALIGN_LABELS, SK__OUT_SCALAR},
                               sk__op_softmax_ce_logits_form = {2, false, SK__ALIGN_RIGHT, SK__OUT_PER_SAMPLE},
                               sk__op_mae_loss_form = {2, false, SK__ALIGN_RIGHT, SK__OUT_SCALAR},
                               sk__op_virtual_loss_form = {1, false, SK__ALIGN_RIGHT, SK__OUT_SCALAR};

/* BiasAdd from layouts (BiasAddInfo::CheckInputLayout): the bias cut as x's channels, dim 1 (which
   MindSpore's check calls x's last dim: one for the 2-D x it is used on); y keeps x's layout. */
static sk_result sk__op_bias_add_layouts(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  sk_layout in[SK_OP_MAX_INPUTS];
  sk_result r = d->ninputs == 2 && d->ndims[0] >= 2 && d->ndims[1] == 1 ? sk__op_given_layouts(d, ndevices, in, err)
                : sk__fail(err, SK_ERR_INVALID_ARGUMENT, "BiasAdd: takes x of rank >= 2 and a rank-1 bias");
  if (r != SK_OK) return r;
  if (d->shape[1][0] != d->shape[0][1])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "BiasAdd: the bias has %lld entries for %lld channels (x dim 1)",
                    (long long)d->shape[1][0], (long long)d->shape[0][1]);
  if (!sk__op_same_map(&in[0].mesh, &in[1].map[0], &in[0].map[1])) {
    char a[64], b[64];
    sk__op_map_text(&in[0].mesh, &in[1].map[0], a, sizeof a), sk__op_map_text(&in[0].mesh, &in[0].map[1], b, sizeof b);
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "BiasAdd: input 1 dim 0 is cut by %s but x's channels (dim 1) by %s", a, b);
  }
  p->mesh = in[0].mesh, p->ninputs = 2, p->in[0] = in[0], p->in[1] = in[1], p->out[0] = in[0];
  sk__op_no_comm(p);
  sk__op_grads(d, p);
  return SK_OK;
}

static sk_result sk__op_rule_bias_add(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->has_layouts) return sk__op_bias_add_layouts(d, ndevices, p, err);
  return sk__op_batch_rule(d, ndevices, sk__op_bias_add_form, p, err);
}
static sk_result sk__op_rule_flatten(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_batch_rule(d, ndevices, sk__op_flatten_form, p, err);
}
static sk_result sk__op_rule_softmax_ce(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_batch_rule(d, ndevices, sk__op_softmax_ce_form, p, err);
}
/* SoftmaxCrossEntropyWithLogits as master's SoftmaxCrossEntropyWithLogitsInfo (loss_info.cc): any
   rank, both strategies equal, the class axis (the last) whole, every other dim may be cut; the
   device matrix is the logits' strategy. The loss [B] keeps only dim 0's axis and there is no
   forward communication. shardkit's kernel, as MindSpore's primitive, takes 2-D logits: there
   the loss is per sample; an N-D plan answers MindSpore's rule (sk-layout). */
static sk_result sk__op_rule_softmax_ce_logits(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  int n = d->ndims[0];
  if (d->ninputs == 2 && n < 2)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "SoftmaxCrossEntropyWithLogits: takes logits [B, ..., C] of rank >= 2, "
                    "got rank %d", n);
  if (d->ninputs == 2 && d->has_strategy && d->strategy[0][n - 1] != 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "SoftmaxCrossEntropyWithLogits: input 0 dim %d is cut %d ways, but it is "
                    "the class axis and must be whole (strategy 1)", n - 1, d->strategy[0][n - 1]);
  return sk__op_batch_rule(d, ndevices, sk__op_softmax_ce_logits_form, p, err);
}
/* MAELoss (nn.MAELoss: mean |logits - labels|): labels broadcast to the logits' shape, aligned from
   the right (size-1 or missing dims). A label dim the logits cut but the labels broadcast leaves
   each device a part of the labels' gradient: an AllReduce along those axes, as a broadcast
   input's of Sub (a parameter's Mirror sums it instead). */
static sk_result sk__op_rule_mae_loss(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  sk_result r = sk__op_batch_rule(d, ndevices, sk__op_mae_loss_form, p, err);
  if (r != SK_OK) return r;
  uint32_t partial = sk__real_axes(&p->mesh, sk_layout_used_axes(&p->in[0]) & ~sk_layout_used_axes(&p->in[1]));
  if (!(d->params & 2u)) p->bwd_in[1] = sk__opc(SK_COLL_ALLREDUCE, partial, 1);
  return SK_OK;
}

/* VirtualLoss (MindSpore's test primitive, tests/ut/python/ops/test_math_ops.py): one input, an
   output of shape [1]. Master gives it no OperatorInfo (it is in PARALLEL_BLACK_LIST): it reads
   its input as it arrives and inserts nothing; its forward and VirtualLossGrad raise
   NotImplementedError (the tests only compile). shardkit gives it values: the sum of x, whose
   gradient is dloss at every element of x (VirtualLossGrad's shape: x's). Without a strategy it
   keeps the cut its input arrives with (SK_OPF_FOLLOWS_INPUT; alone: data parallel); with one,
   the device matrix is the strategy. The per-device sums are made whole by an AllReduce along
   the axes that cut x, as MAELoss's. */
static sk_result sk__op_rule_virtual_loss(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  sk_op_desc own = *d;
  own.has_strategy = d->has_strategy || d->follows_input; /* the cut it arrives with: strategy[0] */
  return sk__op_batch_rule(&own, ndevices, sk__op_virtual_loss_form, p, err);
}

/* ---- one input, element-wise or along a whole axis ------------------------------------------- */

/* ReLU, GeLU, Tanh, Cast, Dropout, Softmax, LogSoftmax, L2Normalize: the device matrix is the
   strategy, input and output share the identity map. Dropout's second output is the mask. It
   may repeat, as in MindSpore (which gives the replicas one seed): sk_kern_dropout_mask draws
   each element from the op's seed and its GLOBAL index, so replicas of a slice draw one mask. */
typedef struct sk__op_unary_form {
  bool whole_axes;  /* works along axes, which must be whole */
  int default_axis; /* the axis when the desc names none */
  int noutputs;     /* Dropout: 2, the mask */
} sk__op_unary_form;

/* The input's layout: the strategy's, or the given one (ActivationBase and Softmax compute from
   it: tuples of axes stay). */
static sk_result sk__op_unary_input(const sk_op_desc *d, int ndevices, sk__op_unary_form form, sk_op_plan *p,
                                    sk_error *err) {
  int n = d->ndims[0], s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, first = 0;
  sk_layout in[SK_OP_MAX_INPUTS];
  sk_result r = d->has_layouts ? sk__op_given_layouts(d, ndevices, in, err) : SK_OK;
  if (r != SK_OK) return r;
  for (int k = 0; d->has_layouts && k < n; k++) s[k] = sk_layout_split_count(&in[0], k);
  if (!d->has_layouts) sk__op_strategy_of(d, 0, ndevices, s);
  if (form.whole_axes && (r = sk__op_whole_axes(d, n, s, form.default_axis, err)) != SK_OK) return r;
  if (d->has_layouts) return p->mesh = in[0].mesh, p->in[0] = in[0], SK_OK;
  if ((r = sk__op_mesh(s, n, ndevices, d->repeat_left, &p->mesh, &first, err)) != SK_OK) return r;
  sk__op_identity(n, first, ax);
  return sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0", err);
}

static sk_result sk__op_unary(const sk_op_desc *d, int ndevices, sk__op_unary_form form, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  if (d->ninputs != 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: takes 1 input, got %d", name, d->ninputs);
  sk_result r = sk__op_unary_input(d, ndevices, form, p, err);
  if (r != SK_OK) return r;
  p->ninputs = 1;
  p->out[0] = p->out[1] = p->in[0];
  p->noutputs = form.noutputs;
  sk__op_no_comm(p);
  sk__op_grads(d, p);
  return SK_OK;
}

static const sk__op_unary_form sk__op_elementwise_form = {false, 0, 1}, sk__op_dropout_form = {false, 0, 2},
                               sk__op_softmax_form = {true, -1, 1}, sk__op_l2_normalize_form = {true, 0, 1};

static sk_result sk__op_rule_unary(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_unary(d, ndevices, sk__op_elementwise_form, p, err);
}
static sk_result sk__op_rule_dropout(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_unary(d, ndevices, sk__op_dropout_form, p, err);
}
static sk_result sk__op_rule_softmax(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_unary(d, ndevices, sk__op_softmax_form, p, err);
}
static sk_result sk__op_rule_log_softmax(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_unary(d, ndevices, sk__op_softmax_form, p, err);
}
static sk_result sk__op_rule_l2_normalize(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_unary(d, ndevices, sk__op_l2_normalize_form, p, err);
}

/* TmpIdentity (MindSpore's TmpIdentityInfo, "identity_info"): what MindSpore's auto-parallel puts
   between a parameter and the operators that share it, so that they read one layout. The
   element-wise rule (the device matrix is the strategy, input and output share the identity map,
   no communication) without a Mirror, as TmpIdentityInfo::InferMirrorOps declares none; a
   parameter's gradient still gets its AllReduce, as Transpose's does. */
static sk_result sk__op_rule_tmp_identity(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  sk_result r = sk__op_unary(d, ndevices, sk__op_elementwise_form, p, err);
  p->mirror[0] = sk__opc(SK_COLL_NONE, 0, 1);
  return r;
}

/* ExpandDims: the output is the input with a whole size-1 dim inserted at axis (in [-n-1, n]). */
static sk_result sk__op_rule_expand_dims(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ExpandDims: takes 1 input, got %d", d->ninputs);
  int n = d->ndims[0], s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, oax[SK_MAX_DIMS] = {0}, first = 0;
  if (d->naxis < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ExpandDims: needs axis");
  if (n + 1 > SK_MAX_DIMS) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ExpandDims: the output would have %d dims", n + 1);
  int a = d->axis[0];
  if (a < -n - 1 || a > n)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ExpandDims: axis %d is out of range [%d, %d]", a, -n - 1, n);
  if (a < 0) a += n + 1;
  sk__op_strategy_of(d, 0, ndevices, s);
  sk_result r = sk__op_mesh(s, n, ndevices, d->repeat_left, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  sk__op_identity(n, first, ax);
  int64_t oshape[SK_MAX_DIMS];
  for (int k = 0, j = 0; k <= n; k++) {
    oshape[k] = k == a ? 1 : d->shape[0][j];
    oax[k] = k == a ? -1 : ax[j++];
  }
  p->ninputs = 1;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->out[0], &p->mesh, n + 1, oshape, oax, "output", err)) != SK_OK) return r;
  sk__op_no_comm(p);
  sk__op_grads(d, p);
  return SK_OK;
}

/* Transpose's perm: a permutation of 0..n-1, given (an all-zero one too: desc.has_perm). */
static sk_result sk__op_perm_check(const sk_op_desc *d, int n, sk_error *err) {
  unsigned seen = 0;
  bool given = d->has_perm;
  for (int k = 0; k < n; k++) given = given || d->perm[k] != 0;
  if (n > 1 && !given) /* not set at all: no rank >= 2 permutation is all zeros, so say what is wrong */
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Transpose: perm is missing; give a permutation of 0..%d (output dim k is "
                    "input dim perm[k])", n - 1);
  for (int k = 0; k < n; k++) {
    int q = d->perm[k];
    if (q < 0 || q >= n || (seen & (1u << q)))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Transpose: perm is not a permutation of 0..%d (entry %d is %d)", n - 1,
                      k, q);
    seen |= 1u << q;
  }
  return SK_OK;
}

/* Transpose: output dim k is input dim perm[k], cut by the same axes; the input cut by the
   strategy, or by any layout (TransposeInfo::CheckInputLayout takes any). */
static sk_result sk__op_rule_transpose(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Transpose: takes 1 input, got %d", d->ninputs);
  int n = d->ndims[0], s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, first = 0;
  sk_layout in[SK_OP_MAX_INPUTS];
  sk_result r = sk__op_perm_check(d, n, err);
  if (r == SK_OK && d->has_layouts && (r = sk__op_given_layouts(d, ndevices, in, err)) == SK_OK)
    p->mesh = in[0].mesh, p->in[0] = in[0];
  if (r == SK_OK && !d->has_layouts) {
    sk__op_strategy_of(d, 0, ndevices, s);
    if ((r = sk__op_mesh(s, n, ndevices, d->repeat_left, &p->mesh, &first, err)) == SK_OK) sk__op_identity(n, first, ax);
    if (r == SK_OK) r = sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0", err);
  }
  if (r != SK_OK) return r;
  int64_t oshape[SK_MAX_DIMS];
  sk_dim_map om[SK_MAX_DIMS];
  memset(om, 0, sizeof om);
  for (int k = 0; k < n; k++) oshape[k] = d->shape[0][d->perm[k]], om[k] = p->in[0].map[d->perm[k]];
  sk_error e;
  if (n > 0 && sk_layout_init(&p->out[0], &p->mesh, n, oshape, om, &e))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Transpose: output: %s", e.msg);
  if (n == 0) sk__op_scalar(&p->out[0], &p->mesh);
  p->ninputs = 1;
  sk__op_no_comm(p);
  sk__op_grads(d, p);
  /* MindSpore's Transpose declares no Mirror (a parameter's gradient still gets its AllReduce) */
  p->mirror[0] = sk__opc(SK_COLL_NONE, 0, 1);
  return SK_OK;
}

/* A device matrix of the strategy's cuts larger than 1 only, with the repeat axis on the left
   (how the 2020 source built Reshape's matrix, which a Reshape following its input keeps);
   axes[k] gets the axis of dim k, -1 where its cut is 1. */
static sk_result sk__op_mesh_of_cuts(const int *s, int n, int ndevices, sk_mesh *mesh, int *axes, sk_error *err) {
  int cuts[SK_MAX_DIMS] = {0}, ncuts = 0, first = 0;
  for (int k = 0; k < n; k++)
    if (s[k] > 1) cuts[ncuts++] = s[k];
  sk_result r = sk__op_mesh(cuts, ncuts, ndevices, true, mesh, &first, err);
  for (int k = 0, j = 0; r == SK_OK && k < n; k++) axes[k] = s[k] > 1 ? first + j++ : -1;
  return r;
}

/* The output dim of a reshape that starts where input dim k starts in the flat order (equal
   products of the dims from there on), -1 when none does. Cutting input dim k s ways cuts that
   flat range into s contiguous blocks, which is cutting the output dim s ways when s divides
   it: the cut carries over without moving data. */
static int sk__reshape_dim(const sk_op_desc *d, int k, int cut) {
  int64_t in_tail = 1, out_tail = 1;
  for (int i = k; i < d->ndims[0]; i++) in_tail *= d->shape[0][i];
  for (int j = d->out_ndims[0] - 1; j >= 0; j--) {
    out_tail *= d->out_shape[0][j];
    if (out_tail == in_tail) return d->out_shape[0][j] % cut == 0 ? j : -1;
    if (out_tail > in_tail) return -1;
  }
  return -1;
}

/* Reshape from its own strategy, as master's ReshapeInfo (reshape_info.cc): the device matrix is
   the strategy as written, size-1 entries kept (InferDevMatrixShape), the repeat on the right
   (InitWithAutoRepeatCalc; on the left under repeat_left); the input takes the strategy's cuts
   (identity map) and the output is whole (InferTensorMap: MAP_NONE). MindSpore replaces the
   operator by the redistribution from the one to the other (ComputeReplaceOp), no forward
   operator: every device's kernel reads the whole input and writes the whole output. */
static sk_result sk__op_reshape_own(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  int n = d->ndims[0], first = 0, ax[SK_MAX_DIMS] = {0}, oax[SK_MAX_DIMS];
  sk_result r = sk__op_mesh(d->strategy[0], n, ndevices, d->repeat_left, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  sk__op_identity(n, first, ax);
  for (int j = 0; j < d->out_ndims[0]; j++) oax[j] = -1;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0", err)) != SK_OK) return r;
  return sk__op_layout(&p->out[0], &p->mesh, d->out_ndims[0], d->out_shape[0], oax, "output", err);
}

/* A Reshape on the layout its input arrives in (desc.follow_layout): the same device matrix and
   input layout, each cut dim's axes carried to the output dim that starts where it starts. A
   mesh built from the cuts alone (below) puts the repeat axis elsewhere than the producer did,
   which is another layout and a move before the kernel; MindSpore keeps the producer's.
   False, nothing written, when a cut cannot carry over (or no layout was given). */
static bool sk__op_reshape_on_input(const sk_op_desc *d, int ndevices, sk_op_plan *p) {
  const sk_layout *in = &d->follow_layout;
  if (!d->follows_input || in->ndims != d->ndims[0] || in->mesh.size != ndevices) return false;
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  for (int k = 0; k < in->ndims; k++) {
    if (in->shape[k] != d->shape[0][k]) return false;
    int cut = sk_layout_split_count(in, k);
    if (cut <= 1) continue;
    int j = sk__reshape_dim(d, k, cut);
    if (j < 0) return false;
    map[j] = in->map[k];
  }
  if (sk_layout_init(&p->out[0], &in->mesh, d->out_ndims[0], d->out_shape[0], map, NULL) != SK_OK) return false;
  p->mesh = in->mesh, p->in[0] = *in;
  return true;
}

/* Reshape without a strategy of its own: the cut its input arrives with (desc.follows_input: the
   compiler's, as MindSpore gives a network's Reshape its producer's layout and redistributes
   through the reshape) or, alone, data parallel. Each cut carries over to the output dim that
   starts where its input dim starts ([32,512,7,7] cut (4,1,1,1) to [32,25088] cut (4,1)); the
   kernel reads the cuts that cannot carry over whole (SK_OPF_REDISTRIBUTES). */
static sk_result sk__op_reshape_follow(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (sk__op_reshape_on_input(d, ndevices, p)) return SK_OK;
  int n = d->ndims[0], no = d->out_ndims[0], s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, oax[SK_MAX_DIMS];
  for (int k = 0; k < n; k++) s[k] = d->follows_input ? d->strategy[0][k] : k == 0 ? ndevices : 1;
  sk_result r = sk__op_mesh_of_cuts(s, n, ndevices, &p->mesh, ax, err);
  if (r != SK_OK) return r;
  for (int j = 0; j < no; j++) oax[j] = -1;
  for (int k = 0; k < n; k++) {
    int j = s[k] > 1 ? sk__reshape_dim(d, k, s[k]) : -1;
    if (j >= 0) oax[j] = ax[k];
  }
  if ((r = sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0", err)) != SK_OK) return r;
  return sk__op_layout(&p->out[0], &p->mesh, no, d->out_shape[0], oax, "output", err);
}

/* Reshape: one input and a target shape of as many elements; planned from its own strategy
   (master's unit tests) or following its input (a network's Reshape without one). */
static sk_result sk__op_rule_reshape(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Reshape: takes 1 input, got %d", d->ninputs);
  if (d->noutputs != 1 || d->out_ndims[0] < 1 || d->out_ndims[0] > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Reshape: needs the target shape (1..%d dims)", SK_MAX_DIMS);
  long long in_elems = 1, out_elems = 1;
  for (int k = 0; k < d->ndims[0]; k++) in_elems *= d->shape[0][k];
  for (int k = 0; k < d->out_ndims[0]; k++) out_elems *= d->out_shape[0][k];
  if (in_elems != out_elems)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Reshape: the input has %lld elements but the target shape %lld", in_elems,
                    out_elems);
  sk_result r = d->has_strategy ? sk__op_reshape_own(d, ndevices, p, err) : sk__op_reshape_follow(d, ndevices, p, err);
  if (r != SK_OK) return r;
  p->ninputs = 1;
  sk__op_no_comm(p); /* MindSpore's ReshapeInfo::InferForwardCommunication: none */
  sk__op_grads(d, p);
  return SK_OK;
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* The dims a reduction reduces (no axis: all of them), as a mask. */
static sk_result sk__op_reduced_dims(const sk_op_desc *d, int n, unsigned *mask, sk_error *err) {
  *mask = d->naxis == 0 ? (1u << n) - 1 : 0;
  for (int k = 0; k < d->naxis; k++) {
    int a = 0;
    sk_result r = sk__op_axis(d, k, n, 0, &a, err);
    if (r != SK_OK) return r;
    *mask |= 1u << a;
  }
  return SK_OK;
}

/* ReduceSum / ReduceMean / ReduceMax: reduced dims may be cut; each device then holds a partial
   result, completed by an AllReduce (sum, or max) along the axes that cut them; ReduceMean
   divides by that group's size (each device's mean covers an equal share). The output drops
   the reduced dims, or keeps them whole with size 1 under keep_dims. */
static sk_result sk__op_reduce(const sk_op_desc *d, int ndevices, sk_redop rop, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  if (d->ninputs != 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: takes 1 input, got %d", name, d->ninputs);
  int n = d->ndims[0], s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, oax[SK_MAX_DIMS] = {0}, first = 0, no = 0;
  unsigned reduced;
  sk_result r = sk__op_reduced_dims(d, n, &reduced, err);
  if (r != SK_OK) return r;
  sk__op_strategy_of(d, 0, ndevices, s);
  if ((r = sk__op_mesh(s, n, ndevices, d->repeat_left, &p->mesh, &first, err)) != SK_OK) return r;
  sk__op_identity(n, first, ax);
  int64_t oshape[SK_MAX_DIMS];
  uint32_t partial = 0;
  for (int k = 0; k < n; k++) {
    if (!(reduced & (1u << k))) {
      oshape[no] = d->shape[0][k], oax[no++] = ax[k];
      continue;
    }
    partial |= 1u << ax[k];
    if (d->keep_dims) oshape[no] = 1, oax[no++] = -1;
  }
  p->ninputs = 1;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->out[0], &p->mesh, no, oshape, oax, "output", err)) != SK_OK) return r;
  sk__op_no_comm(p);
  partial = sk__real_axes(&p->mesh, partial);
  double scale = rop == SK_AVG ? 1.0 / sk_mesh_group_size(&p->mesh, partial) : 1.0;
  p->fwd = sk__opc(SK_COLL_ALLREDUCE, partial, scale);
  if (rop == SK_MAX) p->fwd.op = SK_MAX;
  sk__op_grads(d, p);
  return SK_OK;
}

static sk_result sk__op_rule_reduce_sum(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_reduce(d, ndevices, SK_SUM, p, err);
}

static sk_result sk__op_rule_reduce_mean(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_reduce(d, ndevices, SK_AVG, p, err);
}

static sk_result sk__op_rule_reduce_max(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_reduce(d, ndevices, SK_MAX, p, err);
}

/* ---- LayerNorm, RmsNorm ------------------------------------------------------------------------ */

/* The parameters of a norm (LayerNorm's gamma and beta, RmsNorm's gamma): inputs 1.. */
static const char *sk__op_norm_param(int i) { return i == 1 ? "input 1 (gamma)" : "input 2 (beta)"; }

/* A norm's inputs from a strategy: x cut by it (its dims from b on whole), the parameters as
   x's dims they align with (from the right). */
static sk_result sk__op_norm_strategy(const sk_op_desc *d, int ndevices, int b, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int n = d->ndims[0], s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, first = 0;
  sk__op_strategy_of(d, 0, ndevices, s);
  for (int k = b; k < n; k++)
    if (s[k] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 0 dim %d is cut %d ways, but dims from "
                      "begin_norm_axis %d on are normalised and must be whole", name, k, s[k], b);
  sk_result r = sk__op_mesh(s, n, ndevices, d->repeat_left, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  sk__op_identity(n, first, ax);
  if ((r = sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0 (x)", err)) != SK_OK) return r;
  for (int i = 1; i < d->ninputs; i++) {
    int pad = n - d->ndims[i];
    for (int k = 0; k < d->ndims[i]; k++) {
      int cut = d->has_strategy ? d->strategy[i][k] : s[pad + k];
      if (cut != s[pad + k])
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d dim %d is cut %d ways but x's dim %d %d ways", name, i,
                        k, cut, pad + k, s[pad + k]);
    }
    if ((r = sk__op_layout(&p->in[i], &p->mesh, d->ndims[i], d->shape[i], ax + pad, sk__op_norm_param(i), err)) != SK_OK)
      return r;
  }
  return SK_OK;
}

/* A norm's inputs from layouts (LayerNormInfo's and RmsNormInfo's CheckInputLayout): x's dims
   from b whole, the parameters' maps x's maps of the dims they align with. */
static sk_result sk__op_norm_layouts(const sk_op_desc *d, int ndevices, int b, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int n = d->ndims[0];
  sk_layout in[SK_OP_MAX_INPUTS];
  sk_result r = sk__op_given_layouts(d, ndevices, in, err);
  if (r != SK_OK) return r;
  for (int k = b; k < n; k++)
    if (sk_layout_split_count(&in[0], k) > 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input 0 dim %d is cut by its layout, but dims from "
                      "begin_norm_axis %d on are normalised and must be whole (None)", name, k, b);
  for (int i = 1; i < d->ninputs; i++)
    for (int k = 0, pad = n - d->ndims[i]; k < d->ndims[i]; k++)
      if (!sk__op_same_map(&in[0].mesh, &in[i].map[k], &in[0].map[pad + k])) {
        char a[64], c[64];
        sk__op_map_text(&in[0].mesh, &in[i].map[k], a, sizeof a), sk__op_map_text(&in[0].mesh, &in[0].map[pad + k], c, sizeof c);
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d dim %d is cut by %s but x's dim %d by %s; its "
                        "parameters are cut as x's dims they align with (from the right)", name, i, k, a, pad + k, c);
      }
  p->mesh = in[0].mesh;
  for (int i = 0; i < d->ninputs; i++) p->in[i] = in[i];
  return SK_OK;
}

/* A norm over x's dims from b on: the parameters (inputs 1..) align with x from the right and
   match its dims; x's normalised dims are whole and the parameters are cut as x is there.
   Outputs: y (x's layout), then nstats statistics (x's shape with the normalised dims of size 1,
   x's map on the others). The parameters' gradients sum over the rows: their Mirror does it. */
static sk_result sk__op_norm(const sk_op_desc *d, int ndevices, int b, int nstats, sk_op_plan *p, sk_error *err) {
  const char *name = sk_op_kind_name(d->kind);
  int n = d->ndims[0];
  for (int i = 1; i < d->ninputs; i++) {
    int m = d->ndims[i], pad = n - m;
    if (pad < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d has more dims (%d) than x (%d)", name, i, m, n);
    for (int k = 0; k < m; k++)
      if (d->shape[i][k] != d->shape[0][pad + k])
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input %d dim %d (%lld) does not match x's dim %d (%lld)", name, i,
                        k, (long long)d->shape[i][k], pad + k, (long long)d->shape[0][pad + k]);
  }
  sk_result r = d->has_layouts ? sk__op_norm_layouts(d, ndevices, b, p, err) : sk__op_norm_strategy(d, ndevices, b, p, err);
  if (r != SK_OK) return r;
  p->ninputs = d->ninputs;
  int64_t sshape[SK_MAX_DIMS];
  sk_dim_map smap[SK_MAX_DIMS];
  memset(smap, 0, sizeof smap);
  for (int k = 0; k < b; k++) sshape[k] = d->shape[0][k], smap[k] = p->in[0].map[k];
  for (int k = b; k < n; k++) sshape[k] = 1;
  p->out[0] = p->in[0];
  for (int o = 1; o <= nstats; o++) {
    sk_error e;
    if (sk_layout_init(&p->out[o], &p->mesh, n, sshape, smap, &e) != SK_OK)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: output %d: %s", name, o, e.msg);
  }
  p->noutputs = 1 + nstats;
  sk__op_no_comm(p);
  sk__op_grads(d, p);
  return SK_OK;
}

/* LayerNorm: x, gamma, beta; begin_norm_axis (axis[0], default 1); outputs y, mean, variance. */
static sk_result sk__op_rule_layer_norm(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 3) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "LayerNorm: takes x, gamma and beta, got %d inputs", d->ninputs);
  int b = 0;
  sk_result r = sk__op_axis(d, 0, d->ndims[0], 1, &b, err);
  return r != SK_OK ? r : sk__op_norm(d, ndevices, b, 2, p, err);
}

/* RmsNorm (master's RmsNormInfo): x, gamma; the normalised dims are gamma's, x's last ones
   (begin_norm_axis = rank(x) - rank(gamma), GetAttrs); outputs y and rstd. Master also takes
   them cut, replacing the operator by Square, ReduceMean, an AllReduce and the rest
   (ComputeReplaceGraphForSplitNormAxis); shardkit's kernel is the whole operator, so they stay
   whole here, as LayerNorm's. */
static sk_result sk__op_rule_rms_norm(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 2) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "RmsNorm: takes x and gamma, got %d inputs", d->ninputs);
  if (d->ndims[1] < 1 || d->ndims[1] > d->ndims[0])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "RmsNorm: input 1 (gamma) has rank %d; it must be in [1, %d], x's rank",
                    d->ndims[1], d->ndims[0]);
  return sk__op_norm(d, ndevices, d->ndims[0] - d->ndims[1], 1, p, err);
}

/* ---- PReLU ----------------------------------------------------------------------------------- */

/* x [N, C, ...] and a slope w [C] (cut as x's channels) or [1] (whole). */
static sk_result sk__op_rule_prelu(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 2 || d->ndims[0] < 2 || d->ndims[1] != 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "PReLU: takes x of rank >= 2 and a rank-1 weight");
  int n = d->ndims[0], s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0}, first = 0;
  sk__op_strategy_of(d, 0, ndevices, s);
  bool single = d->shape[1][0] == 1;
  if (!single && d->shape[1][0] != d->shape[0][1])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "PReLU: weight has %lld entries for %lld channels (x dim 1)",
                    (long long)d->shape[1][0], (long long)d->shape[0][1]);
  int ws = d->has_strategy ? d->strategy[1][0] : single ? 1 : s[1];
  if (ws != (single ? 1 : s[1]))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "PReLU: input 1 dim 0 is cut %d ways but must be cut as x's channels "
                    "(dim 1, %d ways)", ws, single ? 1 : s[1]);
  sk_result r = sk__op_mesh(s, n, ndevices, d->repeat_left, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  sk__op_identity(n, first, ax);
  int wax = single ? -1 : ax[1];
  p->ninputs = 2;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, n, d->shape[0], ax, "input 0 (x)", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->in[1], &p->mesh, 1, d->shape[1], &wax, "input 1 (weight)", err)) != SK_OK) return r;
  p->out[0] = p->in[0];
  sk__op_no_comm(p);
  sk__op_grads(d, p);
  return SK_OK;
}


/* ---- lookups ---------------------------------------------------------------------------------- */

/* OneHot: indices [B, ...] and two scalars (on and off values); the strategy is written over
   the output, one tuple entry per output dim, and empty tuples for the scalars. axis -1: the
   output is [B, ..., depth] and the device matrix the strategy; axis 0 (rank-1 indices only):
   the output is [depth, B] and MindSpore reverses the device matrix so that the batch stays on
   its left axis. A cut depth leaves each device its own range of classes; no communication. */
static sk_result sk__op_rule_one_hot(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 3 || d->ndims[1] != 0 || d->ndims[2] != 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "OneHot: takes indices and two scalars (on and off values)");
  int ni = d->ndims[0], no = ni + 1, axis = d->naxis ? d->axis[0] : -1;
  if (no > SK_MAX_DIMS) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "OneHot: the output would have %d dims", no);
  if (d->depth < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "OneHot: depth %lld must be >= 1", (long long)d->depth);
  if (axis != -1 && axis != 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "OneHot: axis %d; only -1 and 0 are supported", axis);
  if (axis == 0 && ni != 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "OneHot: axis 0 needs rank-1 indices (got rank %d)", ni);
  int s[SK_MAX_DIMS] = {0}, dev[SK_MAX_DIMS] = {0}, oax[SK_MAX_DIMS] = {0}, iax[SK_MAX_DIMS] = {0}, first = 0;
  for (int k = 0; k < no; k++) s[k] = d->has_strategy ? d->strategy[0][k] : 1;
  if (!d->has_strategy) s[axis == 0 ? 1 : 0] = ndevices; /* data parallel over the batch */
  for (int k = 1; ni > 1 && k < no; k++)
    if (s[k] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "OneHot: with rank-%d indices only dim 0 may be cut, but dim %d is cut "
                      "%d ways", ni, k, s[k]);
  for (int k = 0; k < no; k++) dev[k] = axis == 0 ? s[no - 1 - k] : s[k];
  sk_result r = sk__op_mesh(dev, no, ndevices, d->repeat_left, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  int64_t oshape[SK_MAX_DIMS];
  for (int k = 0; k < ni; k++) iax[k] = first + k;
  if (axis == 0) {
    oshape[0] = d->depth, oshape[1] = d->shape[0][0], oax[0] = first + 1, oax[1] = first;
  } else {
    for (int k = 0; k < ni; k++) oshape[k] = d->shape[0][k], oax[k] = first + k;
    oshape[ni] = d->depth, oax[ni] = first + ni;
  }
  p->ninputs = 3;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, ni, d->shape[0], iax, "input 0 (indices)", err)) != SK_OK) return r;
  sk__op_scalar(&p->in[1], &p->mesh), sk__op_scalar(&p->in[2], &p->mesh);
  if ((r = sk__op_layout(&p->out[0], &p->mesh, no, oshape, oax, "output", err)) != SK_OK) return r;
  sk__op_no_comm(p);
  sk__op_grads(d, p);
  /* MindSpore's OneHot declares no Mirror at all (its InferMirrorOps does nothing): the indices
     are integer labels, never a parameter, and the on/off values are constants */
  for (int i = 0; i < p->ninputs; i++) p->mirror[i] = p->grad[i] = sk__opc(SK_COLL_NONE, 0, 1);
  return SK_OK;
}

/* Gather with the table whole along axis (master's NormalImpl, gather_info.cc): the device matrix
   is the indices' strategy followed by the table's; the output (table dims before axis, the
   indices' dims, table dims after) keeps every cut. No communication; the table's Mirror sums
   over the axes that cut the indices. */
static sk_result sk__op_gather_columns(const sk_op_desc *d, int ndevices, int axis, const int *st, const int *si,
                                       sk_op_plan *p, sk_error *err) {
  int nt = d->ndims[0], ni = d->ndims[1], dev[SK_MAX_AXES] = {0}, tax[SK_MAX_DIMS] = {0}, iax[SK_MAX_DIMS] = {0}, oax[SK_MAX_DIMS] = {0}, first = 0;
  int no = nt - 1 + ni;
  if (nt + ni > SK_MAX_AXES || no > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Gather: table and indices have %d dims together; at most %d", nt + ni,
                    SK_MAX_AXES);
  for (int k = 0; k < ni; k++) dev[k] = si[k];
  for (int k = 0; k < nt; k++) dev[ni + k] = st[k];
  sk_result r = sk__op_mesh(dev, nt + ni, ndevices, d->repeat_left, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  sk__op_identity(ni, first, iax);
  sk__op_identity(nt, first + ni, tax);
  int64_t oshape[SK_MAX_DIMS];
  int o = 0;
  for (int k = 0; k < nt; k++) {
    if (k != axis) {
      oshape[o] = d->shape[0][k], oax[o++] = tax[k];
      continue;
    }
    for (int j = 0; j < ni; j++) oshape[o] = d->shape[1][j], oax[o++] = iax[j];
  }
  p->ninputs = 2;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, nt, d->shape[0], tax, "input 0 (table)", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->in[1], &p->mesh, ni, d->shape[1], iax, "input 1 (indices)", err)) != SK_OK) return r;
  return sk__op_layout(&p->out[0], &p->mesh, no, oshape, oax, "output", err);
}

/* Gather with the table cut along axis (a row split for axis 0): each device looks up only the
   entries it holds and writes zeros for the others, so the output is a partial sum along the
   axis that cuts the table's axis dim. For axis 0, when that cut divides the indices' dim 0, a
   ReduceScatter completes it and leaves output dim 0 cut that way (MindSpore's default);
   otherwise an AllReduce leaves the output whole there. The indices must be whole; a repeat
   axis (on the left) is allowed only when the other table dims are whole. */
static sk_result sk__op_gather_rows(const sk_op_desc *d, int ndevices, int axis, const int *st, const int *si,
                                    sk_op_plan *p, sk_error *err) {
  int nt = d->ndims[0], ni = d->ndims[1], tax[SK_MAX_DIMS] = {0}, iax[SK_MAX_DIMS] = {0}, oax[SK_MAX_DIMS] = {0}, first = 0;
  for (int k = 0; k < ni; k++)
    if (si[k] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Gather: the table is cut along axis %d, so the indices must be whole, "
                      "but input 1 dim %d is cut %d ways (both may be cut only with axis 0, a 2-D table cut (a,1), "
                      "2-D indices cut (c,1), and a*c = %d devices, neither alone)", axis, k, si[k], ndevices);
  for (int k = 0; sk__op_product(st, nt) != ndevices && k < nt; k++)
    if (k != axis && st[k] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Gather: the table is cut along axis %d with a repeat (the strategy "
                      "uses %lld of %d devices), so its other dims must be whole, but input 0 dim %d is cut %d ways", axis,
                      sk__op_product(st, nt), ndevices, k, st[k]);
  if (nt - 1 + ni > SK_MAX_DIMS) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Gather: the output has too many dims");
  sk_result r = sk__op_mesh(st, nt, ndevices, true, &p->mesh, &first, err);
  if (r != SK_OK) return r;
  sk__op_identity(nt, first, tax);
  bool scatter = axis == 0 && d->shape[1][0] % st[axis] == 0;
  int64_t oshape[SK_MAX_DIMS];
  int o = 0;
  for (int k = 0; k < nt; k++) {
    if (k != axis) {
      oshape[o] = d->shape[0][k], oax[o++] = tax[k];
      continue;
    }
    for (int j = 0; j < ni; j++) oshape[o] = d->shape[1][j], oax[o++] = j == 0 && scatter ? tax[axis] : -1, iax[j] = -1;
  }
  p->ninputs = 2;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, nt, d->shape[0], tax, "input 0 (table)", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->in[1], &p->mesh, ni, d->shape[1], iax, "input 1 (indices)", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->out[0], &p->mesh, o, oshape, oax, "output", err)) != SK_OK) return r;
  p->fwd = sk__opc(scatter ? SK_COLL_REDUCE_SCATTER : SK_COLL_ALLREDUCE, sk__real_axes(&p->mesh, 1u << tax[axis]), 1);
  return SK_OK;
}

/* MindSpore's "shard batch and axis" mode (GatherInfo::ShardBatchAndAxis): axis 0, a 2-D table
   cut (a, 1), 2-D indices cut (c, 1), a * c the device count and neither a nor c alone. */
static bool sk__op_gather_batch_and_axis(int axis, int nt, int ni, const int *st, const int *si, int ndevices) {
  return axis == 0 && nt == 2 && ni == 2 && st[1] == 1 && si[1] == 1 && st[0] > 1 && si[0] > 1 &&
         (long long)st[0] * si[0] == ndevices;
}

/* Shard batch and axis: device matrix [c, a] (no repeat); the table's rows are cut by a, the
   indices' rows by c. Each device looks up its batch slice in its rows (zeros elsewhere), so the
   output [I0, I1, E], dim 0 cut by c, is a partial sum along a: an AllReduce(sum) over a
   completes it. The table's Mirror runs over c; the indices have none. */
static sk_result sk__op_gather_batch_axis(const sk_op_desc *d, int ndevices, const int *st, const int *si, sk_op_plan *p,
                                          sk_error *err) {
  int dev[2] = {si[0], st[0]}, tax[2] = {1, -1}, iax[2] = {0, -1}, oax[3] = {0, -1, -1};
  int64_t oshape[3] = {d->shape[1][0], d->shape[1][1], d->shape[0][1]};
  sk_result r = sk__op_mesh(dev, 2, ndevices, false, &p->mesh, NULL, err);
  if (r != SK_OK) return r;
  p->ninputs = 2;
  if ((r = sk__op_layout(&p->in[0], &p->mesh, 2, d->shape[0], tax, "input 0 (table)", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->in[1], &p->mesh, 2, d->shape[1], iax, "input 1 (indices)", err)) != SK_OK) return r;
  if ((r = sk__op_layout(&p->out[0], &p->mesh, 3, oshape, oax, "output", err)) != SK_OK) return r;
  p->fwd = sk__opc(SK_COLL_ALLREDUCE, 1u << 1, 1);
  return SK_OK;
}

/* Gather: table [V] or [V, E, ...] and indices of any rank; axis says which table dim the
   indices pick. Default strategy: the table whole, the indices' dim 0 cut by every device. */
static sk_result sk__op_rule_gather(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 2) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Gather: takes a table and indices, got %d inputs", d->ninputs);
  int nt = d->ndims[0], ni = d->ndims[1], axis, st[SK_MAX_DIMS] = {0}, si[SK_MAX_DIMS] = {0};
  sk_result r = sk__op_axis(d, 0, nt, 0, &axis, err);
  if (r != SK_OK) return r;
  for (int k = 0; k < nt; k++) st[k] = d->has_strategy ? d->strategy[0][k] : 1;
  for (int k = 0; k < ni; k++) si[k] = d->has_strategy ? d->strategy[1][k] : (k == 0 ? ndevices : 1);
  sk__op_no_comm(p);
  if (st[axis] == 1)
    r = sk__op_gather_columns(d, ndevices, axis, st, si, p, err);
  else if (sk__op_gather_batch_and_axis(axis, nt, ni, st, si, ndevices))
    r = sk__op_gather_batch_axis(d, ndevices, st, si, p, err);
  else
    r = sk__op_gather_rows(d, ndevices, axis, st, si, p, err);
  if (r != SK_OK) return r;
  sk__op_grads(d, p);
  p->mirror[1] = sk__opc(SK_COLL_NONE, 0, 1); /* MindSpore's Gather declares the table's Mirror only */
  return SK_OK;
}

/* ---- data input ------------------------------------------------------------------------------- */

/* The dataset operators' device matrix: the strategy (size-1 entries kept) with the repeat axis
   on the left; a dim is mapped only where its cut is larger than 1. */
static sk_result sk__op_dataset_mesh(const int *s, int n, int ndevices, sk_mesh *mesh, int *axes, sk_error *err) {
  int first = 0;
  sk_result r = sk__op_mesh(s, n, ndevices, true, mesh, &first, err);
  for (int k = 0; r == SK_OK && k < n; k++) axes[k] = s[k] > 1 ? first + k : -1;
  return r;
}

/* GetNext's strategy: empty tuples only, as many as written (MindSpore's GetNextInfo::CheckStrategy
   reads each tuple and never counts them: () and ((),()) both pass). A desc holds the lengths of
   SK_OP_MAX_INPUTS tuples at most. */
static sk_result sk__op_get_next_strategy(const sk_op_desc *d, sk_error *err) {
  if (!d->has_strategy) return SK_OK;
  if (d->nstrategies > SK_OP_MAX_INPUTS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "GetNext: strategy has %d tuples; a desc holds at most %d",
                    d->nstrategies, SK_OP_MAX_INPUTS);
  for (int i = 0; i < d->nstrategies; i++)
    if (d->strategy_len[i] != 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "GetNext: tuple %d has %d entr%s; its strategy takes empty tuples "
                      "only (the dataset strategy cuts its outputs)", i, d->strategy_len[i],
                      d->strategy_len[i] == 1 ? "y" : "ies");
  return SK_OK;
}

/* GetNext: no inputs, and a strategy of empty tuples or none; every output's batch dim is cut by
   every device (none under full_batch: the devices become the repeat axis). */
static sk_result sk__op_rule_get_next(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->ninputs != 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "GetNext: takes no inputs, got %d", d->ninputs);
  sk_result r = sk__op_get_next_strategy(d, err);
  if (r != SK_OK) return r;
  if (d->noutputs < 1 || d->noutputs > SK_OP_MAX_OUTPUTS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "GetNext: needs 1..%d output shapes, got %d", SK_OP_MAX_OUTPUTS, d->noutputs);
  int rank = 1, s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0};
  for (int o = 0; o < d->noutputs; o++) {
    if (d->out_ndims[o] < 1 || d->out_ndims[o] > SK_MAX_DIMS)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "GetNext: output %d has %d dims; allowed 1..%d", o, d->out_ndims[o],
                      SK_MAX_DIMS);
    if (d->out_ndims[o] > rank) rank = d->out_ndims[o];
  }
  for (int k = 0; k < rank; k++) s[k] = k == 0 && !d->full_batch ? ndevices : 1;
  if ((r = sk__op_dataset_mesh(s, rank, ndevices, &p->mesh, ax, err)) != SK_OK) return r;
  p->ninputs = 0, p->noutputs = d->noutputs;
  for (int o = 0; o < d->noutputs; o++) {
    char what[32];
    snprintf(what, sizeof what, "output %d", o);
    if ((r = sk__op_layout(&p->out[o], &p->mesh, d->out_ndims[o], d->out_shape[o], ax, what, err)) != SK_OK) return r;
  }
  sk__op_no_comm(p);
  return SK_OK;
}

/* VirtualDataset: the dataset strategy, as MindSpore's newest VirtualDatasetInfo checks it. Each
   input passes through; each tuple cuts at most one dim (any dim), every cut one by the same
   count d; the device matrix is the longest input's strategy with the repeat axis on the LEFT,
   as MindSpore places it for dataset inputs, and every input's cut dim maps to the axis of the
   longest input's cut dim (so that input must be cut when any is). full_batch: nothing is cut.
   No communication and no Mirror. */
static sk_result sk__op_rule_virtual_dataset(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  int longest = 0, shard = 1, s[SK_MAX_DIMS] = {0}, ax[SK_MAX_DIMS] = {0};
  for (int i = 0; i < d->ninputs; i++) {
    if (d->ndims[i] > d->ndims[longest]) longest = i;
    for (int k = 0, at = -1; d->has_strategy && k < d->ndims[i]; k++) {
      int v = d->strategy[i][k];
      if (v == 1) continue;
      if (at >= 0)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "VirtualDataset: input %d cuts dim %d and dim %d; a dataset "
                        "strategy cuts at most one dim of each input", i, at, k);
      at = k;
      if (shard != 1 && v != shard)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "VirtualDataset: input %d dim %d is cut %d ways, but an earlier "
                        "input %d ways; a dataset strategy cuts every input the same number of ways (or not at all)",
                        i, k, v, shard);
      shard = v;
    }
  }
  int n = d->ndims[longest], slice = 0;
  for (int k = 0; k < n; k++) s[k] = d->full_batch ? 1 : d->has_strategy ? d->strategy[longest][k] : k == 0 ? ndevices : 1;
  if (d->has_strategy && !d->full_batch && shard > 1) {
    for (slice = 0; slice < n && s[slice] != shard; slice++) continue;
    if (slice == n)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "VirtualDataset: input %d, the longest, is not cut, but another "
                      "input is cut %d ways; the longest input's cut dim gives the axis every cut maps to", longest,
                      shard);
  }
  sk_result r = sk__op_dataset_mesh(s, n, ndevices, &p->mesh, ax, err);
  if (r != SK_OK) return r;
  p->ninputs = p->noutputs = d->ninputs;
  for (int i = 0; i < d->ninputs; i++) {
    char what[32];
    int iax[SK_MAX_DIMS] = {0};
    for (int k = 0; k < d->ndims[i]; k++) {
      int v = d->full_batch ? 1 : d->has_strategy ? d->strategy[i][k] : k == 0 ? ndevices : 1;
      iax[k] = v > 1 ? ax[slice] : -1;
    }
    snprintf(what, sizeof what, "input %d", i);
    if ((r = sk__op_layout(&p->in[i], &p->mesh, d->ndims[i], d->shape[i], iax, what, err)) != SK_OK) return r;
    p->out[i] = p->in[i];
    p->mirror[i] = p->grad[i] = sk__opc(SK_COLL_NONE, 0, 1);
  }
  sk__op_no_comm(p);
  return SK_OK;
}

/* MatMul and BatchMatMul (one rule, as master's one MatMul class) from a strategy or from
   layouts; Dense from a strategy. */
static sk_result sk__op_rule_matmul(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  if (d->has_layouts) return sk__op_matmul_layouts(d, ndevices, p, err);
  return sk__op_matmul_family(d, ndevices, SK__MM_MATMUL, p, err);
}

static sk_result sk__op_rule_dense(const sk_op_desc *d, int ndevices, sk_op_plan *p, sk_error *err) {
  return sk__op_matmul_family(d, ndevices, SK__MM_DENSE, p, err);
}

/* What every operator's desc must satisfy before its rule reads it. */
static sk_result sk__op_check_desc(const sk_op_desc *d, int ndevices, sk_error *err) {
  if ((int)d->kind < 0 || d->kind >= SK_OP_KIND_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.kind %d is not an operator", (int)d->kind);
  if (ndevices < 1 || ndevices > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%d devices; allowed 1..%d", ndevices, SK_MAX_DEVICES);
  const sk_op_row *row = sk_op_row_of(d->kind);
  if (d->has_layouts && d->has_strategy)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: in_strategy is given as tuples and as layouts; give one",
                    sk_op_kind_name(d->kind));
  if (d->nout_layouts < 0 || d->nout_layouts > SK_OP_MAX_OUTPUTS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: desc.nout_layouts = %d; allowed 0..%d", sk_op_kind_name(d->kind),
                    d->nout_layouts, SK_OP_MAX_OUTPUTS);
  int min_inputs = row->min_inputs == 0 ? 0 : 1;
  if (d->ninputs < min_inputs || d->ninputs > SK_OP_MAX_INPUTS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: desc.ninputs = %d; allowed %d..%d", sk_op_kind_name(d->kind),
                    d->ninputs, min_inputs, SK_OP_MAX_INPUTS);
  for (int i = 0; i < d->ninputs; i++)
    if (d->ndims[i] < 0 || d->ndims[i] > SK_MAX_DIMS)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input %d has %d dims; allowed 0..%d", i, d->ndims[i], SK_MAX_DIMS);
  if (d->noutputs < 0 || d->noutputs > SK_OP_MAX_OUTPUTS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.noutputs = %d; allowed 0..%d", d->noutputs, SK_OP_MAX_OUTPUTS);
  if (d->naxis < 0 || d->naxis > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.naxis = %d; allowed 0..%d", d->naxis, SK_MAX_DIMS);
  /* a source reads no tensor: there are no inputs to count tuples against, and its rule checks
     its tuples itself (GetNext's are empty, any number of them) */
  if (d->has_strategy && !(row->flags & SK_OPF_SOURCE)) return sk__op_check_strategy_form(d, ndevices, err);
  return SK_OK;
}

SK_API sk_result sk_op_plan_make(const sk_op_desc *d, int ndevices, sk_op_plan *plan, sk_error *err) {
  if (!d) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc is NULL");
  if (!plan) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan is NULL");
  sk_result r = sk__op_check_desc(d, ndevices, err);
  if (r != SK_OK) return r;
  sk_op_plan p;
  memset(&p, 0, sizeof p);
  sk_error e;
  sk_layout given[SK_OP_MAX_INPUTS];
  memset(given, 0, sizeof given); /* read only where has_layouts filled them */
  sk_op_desc as_strategy; /* layouts read as a strategy, for the rules that compute from one */
  const sk_op_desc *use = d;
  if (d->has_layouts && (r = sk__op_given_layouts(d, ndevices, given, &e)) == SK_OK)
    sk__op_strategy_of_layouts(d, given, &as_strategy), use = &as_strategy;
  if (r == SK_OK) r = sk_op_row_of(d->kind)->rule(use, ndevices, &p, &e);
  if (r == SK_OK && d->has_layouts) r = sk__op_check_given(d, given, &p, &e);
  if (r == SK_OK && p.noutputs == 0) p.noutputs = 1;
  if (r == SK_OK) r = sk__op_outputs_asked(d, ndevices, &p, &e);
  if (r != SK_OK) {
    /* every message names the operator, also those of the shared layout and mesh checks */
    const char *name = sk_op_kind_name(d->kind);
    size_t len = strlen(name);
    if (strncmp(e.msg, name, len) == 0 && e.msg[len] == ':') return sk__fail(err, r, "%s", e.msg);
    return sk__fail(err, r, "%s: %s", name, e.msg);
  }
  *plan = p;
  return SK_OK;
}

SK_API sk_result sk_op_kernel_layout(sk_op_kind kind, const sk_op_plan *plan, int k, sk_layout *out, sk_error *err) {
  const sk_op_row *row = sk_op_row_of(kind);
  if (!row || !plan || !out || k < 0 || k >= plan->ninputs)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "kernel layout: no kind %d, plan or input %d", (int)kind, k);
  const sk_layout *l = &plan->in[k];
  *out = *l;
  if (!(row->flags & SK_OPF_REDISTRIBUTES) || l->ndims == 0) return SK_OK;
  uint32_t whole = sk_layout_used_axes(l) & ~sk_layout_used_axes(&plan->out[0]);
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  for (int d = 0; d < l->ndims; d++)
    for (int j = 0; j < l->map[d].naxes; j++)
      if (!(whole & (1u << l->map[d].axes[j]))) map[d].axes[map[d].naxes++] = l->map[d].axes[j];
  return sk_layout_init(out, &l->mesh, l->ndims, l->shape, map, err);
}

static size_t sk__op_comm_format(const sk_mesh *m, const char *what, const sk_op_comm *c, char *buf, size_t cap) {
  if (c->kind == SK_COLL_NONE) return (size_t)snprintf(buf, cap, "%s: none\n", what);
  size_t len = 0;
#define SK__OUT(...) (len += (size_t)snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, __VA_ARGS__))
  SK__OUT("%s: %s", what, sk_coll_kind_name(c->kind));
  if (c->op != SK_SUM && (sk_coll_info_of(c->kind).flags & SK_COLLF_REDUCES)) SK__OUT("(%s)", sk_redop_name(c->op));
  SK__OUT(" along (");
  for (int a = 0, k = 0; a < m->naxes; a++)
    if (c->axes & (1u << a)) SK__OUT("%s%s", k++ ? "," : "", m->names[a]);
  SK__OUT("), groups of %d", sk_mesh_group_size(m, c->axes));
  if (c->scale != 1) SK__OUT(", scaled by %g", c->scale);
  SK__OUT("\n");
#undef SK__OUT
  return len;
}

/* One tensor's line: its layout, or "scalar". */
static size_t sk__op_tensor_format(const char *what, int i, const sk_layout *l, char *buf, size_t cap) {
  char tmp[512];
  if (l->ndims == 0) return (size_t)snprintf(buf, cap, "%s %d: scalar\n", what, i);
  sk_layout_format(l, tmp, sizeof tmp);
  return (size_t)snprintf(buf, cap, "%s %d: \"%s\"\n", what, i, tmp);
}

SK_API size_t sk_op_plan_format(const sk_op_plan *p, char *buf, size_t cap) {
  if (!p) return 0;
  char tmp[512], what[48];
  size_t len = 0;
#define SK__AT len < cap ? buf + len : NULL, len < cap ? cap - len : 0
  sk_mesh_format(&p->mesh, tmp, sizeof tmp);
  len += (size_t)snprintf(SK__AT, "device matrix %s\n", tmp);
  for (int i = 0; i < p->ninputs; i++) len += sk__op_tensor_format("input", i, &p->in[i], SK__AT);
  for (int o = 0; o < p->noutputs; o++) len += sk__op_tensor_format("output", o, &p->out[o], SK__AT);
  for (int o = 0; o < p->noutputs; o++) /* out_strategy asked for another layout */
    if ((p->redistributed >> o) & 1u) {
      char map[512];
      sk_layout_format(&p->wanted[o], map, sizeof map), sk_mesh_format(&p->wanted[o].mesh, tmp, sizeof tmp);
      len += (size_t)snprintf(SK__AT, "output %d moved after the forward to \"%s\" on %s\n", o, map, tmp);
    }
  len += sk__op_comm_format(&p->mesh, "forward", &p->fwd, SK__AT);
  for (int i = 0; i < p->ninputs; i++) {
    snprintf(what, sizeof what, "input %d gradient", i);
    len += sk__op_comm_format(&p->mesh, what, &p->bwd_in[i], SK__AT);
    snprintf(what, sizeof what, "input %d Mirror", i);
    len += sk__op_comm_format(&p->mesh, what, &p->mirror[i], SK__AT);
    if (p->grad[i].kind != SK_COLL_NONE) {
      snprintf(what, sizeof what, "parameter %d gradient", i);
      len += sk__op_comm_format(&p->mesh, what, &p->grad[i], SK__AT);
    }
  }
#undef SK__AT
  return len;
}

SK_EXTERN_C_END

#define SK__OPS_RULES_DONE
#include "sk_optable.h" /* the table, now that the rules it points at are written */
#endif /* SK_OPS_IMPL */
