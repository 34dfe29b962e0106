/* sk_optable.h -- the operator table: everything a pass asks about an operator, one row per
   sk_op_kind. MindSpore keeps an operator's knowledge in one OperatorInfo class and PyTorch in
   one registered strategy function; here it is one row, and every pass reads the row instead of
   switching on the kind: the graph (arity, output dtypes), the sharding rules (sk_ops.h), the
   executor (kernels, differentiable inputs, FLOPs), the compiler (the facts a kernel needs on a
   device), the JSON and strategy files (the strategy tuples' form), the searches (candidates).

   Do this in ONE .c file:   #define SK_IMPL  (or SK_OPTABLE_IMPL, which brings SK_OPS_IMPL)
                             #include "sk_optable.h"
   Needs only libc. The rows' functions live in sk_ops.h (sharding rules),
   sk_optable_kernels.h (forward and backward kernels, FLOPs, kernel facts) and
   sk_optable_space.h (the search's joint dims); each row names its functions, so a row that
   names one nobody wrote does not compile. docs/operators.md, "Adding an operator".

   THE ROW (sk_op_row)
     name, aliases      MindSpore's primitive name, and the older spellings it still accepts
     min/max_inputs     how many graph tensors it reads (OneHot: the indices only)
     scalar_tuples      strategy tuples after the inputs' ones, for scalar inputs the graph
                        holds as attributes (OneHot: the on and off values, tuples ())
     tuple_extra        entries input 0's tuple has beyond its rank (OneHot: the classes; its
                        tuple is written over output 0)
     index_inputs       bit k: input k holds integer indices (its gradient needs no collective)
     grad_inputs        bit k: input k takes a gradient
     flags              SK_OPF_*
     out_dtype          how its outputs' dtypes follow (SK_OPD_*)
     rule               the sharding rule: desc (strategy or layouts) -> device matrix, tensor
                        maps, forward and backward communication, Mirrors
     facts              what its kernel needs to know on one device (offsets, global counts)
     fwd, bwd           the kernels, over tensor views (sk_exec_arg)
     flops              forward FLOPs on the slices (the backward counts twice)
     space              the search's joint dims: the candidates are their cuts

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_OPTABLE_IMPL)
#define SK_OPTABLE_IMPL
#endif
#if defined(SK_OPTABLE_IMPL) && !defined(SK_OPS_IMPL)
#define SK_OPS_IMPL /* the rows point at the sharding rules */
#endif
#ifndef SK_OPTABLE_H
#define SK_OPTABLE_H

#include "sk_ops.h"

SK_EXTERN_C_BEGIN

/* The views and facts the kernels take (sk_exec.h), the kernel context (sk_kernels.h), a graph
   operator (sk_graph.h): declared there, above this table; the rows only pass pointers. */
struct sk_exec_arg;
struct sk_exec_facts;
struct sk_kernel_ctx;
struct sk_graph_op;

#define SK_OP_MAX_JOINT (2 * SK_MAX_DIMS)

/* An operator's joint dims: the dims its strategy tuples share (MatMul: m, k, n), each tuple
   entry taking the cut of one of them. A search candidate is one cut per joint dim. */
typedef struct sk_op_space {
  int n;                                  /* joint dims; 0: the operator keeps its default */
  int64_t size[SK_OP_MAX_JOINT];
  int ntuples, len[SK_OP_MAX_INPUTS];     /* the tuples and their entries */
  int src[SK_OP_MAX_INPUTS][SK_MAX_DIMS]; /* tuple k entry e takes joint dim src (-1: cut 1) */
} sk_op_space;

typedef enum sk_op_flag {
  SK_OPF_CONTRACTS = 1u << 0,    /* the MatMul family: D-Rec partitions it first */
  SK_OPF_KEEPS_SHAPE = 1u << 1,  /* element-wise along input 0: D-Rec joins through it */
  /* 1u << 2 was SK_OPF_LAYOUTS, MatMul's alone: every operator takes layouts now (sk_ops.h) */
  SK_OPF_SOURCE = 1u << 3,       /* reads no tensor: its outputs' shapes and dtypes are attributes */
  SK_OPF_PASSTHROUGH = 1u << 4,  /* output k is input k (its gradient too) */
  SK_OPF_BATCH_SHAPES = 1u << 5, /* its target shapes hold the batch: micro-batches cut dim 0 */
  SK_OPF_FOLLOWS_INPUT = 1u << 6, /* without a strategy it keeps the cut its input arrives with */
  SK_OPF_PERMUTES = 1u << 7,     /* reads perm over its input's whole rank */
  /* MindSpore replaces it by the redistribution from its input's layout to its output's: its
     kernel reads the input whole on the axes its output does not use (sk_op_kernel_layout) */
  SK_OPF_REDISTRIBUTES = 1u << 8
} sk_op_flag;

typedef enum sk_op_dtype_rule {
  SK_OPD_INPUT0 = 0, /* every output: input 0's dtype */
  SK_OPD_ATTR,       /* output k: the operator's out_dtype[k] attribute */
  SK_OPD_MASK,       /* input 0's, output 1 the u8 mask */
  SK_OPD_PASS        /* output k: input k's */
} sk_op_dtype_rule;

typedef sk_result (*sk_op_rule_fn)(const sk_op_desc *d, int ndevices, sk_op_plan *plan, sk_error *err);
typedef sk_result (*sk_op_facts_fn)(const sk_op_desc *d, const sk_op_plan *plan, const sk_layout *kernel_in, int rank,
                                    struct sk_exec_facts *facts, sk_error *err);
typedef sk_result (*sk_op_fwd_fn)(const struct sk_kernel_ctx *ctx, const struct sk_graph_op *op,
                                  const struct sk_exec_facts *facts, const struct sk_exec_arg *in,
                                  struct sk_exec_arg *out, sk_error *err);
/* dx[k] is NULL for an input that takes no gradient (or whose gradient nobody wants). */
typedef sk_result (*sk_op_bwd_fn)(const struct sk_kernel_ctx *ctx, const struct sk_graph_op *op,
                                  const struct sk_exec_facts *facts, const struct sk_exec_arg *in,
                                  const struct sk_exec_arg *out, void *const *dx, sk_error *err);
typedef double (*sk_op_flops_fn)(const sk_op_desc *d, const struct sk_exec_arg *in, const struct sk_exec_arg *out);
/* The caller zeroes *space, sets every src to -1 and ntuples to the desc's inputs; the row fills
   in the joint dims and the entries that take them. */
typedef void (*sk_op_space_fn)(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *space);

typedef struct sk_op_row {
  sk_op_kind kind;
  const char *name;
  const char *aliases; /* comma-separated; "" when none */
  int min_inputs, max_inputs;
  int scalar_tuples;
  int tuple_extra;
  uint32_t index_inputs, grad_inputs;
  uint32_t flags; /* sk_op_flag bits */
  sk_op_dtype_rule out_dtype;
  sk_op_rule_fn rule;
  sk_op_facts_fn facts;
  sk_op_fwd_fn fwd;
  sk_op_bwd_fn bwd;
  sk_op_flops_fn flops;
  sk_op_space_fn space;
} sk_op_row;

/* The row of `kind`; NULL when kind is not an operator. */
SK_API const sk_op_row *sk_op_row_of(sk_op_kind kind);
/* The tuples of a strategy's default form for an operator reading `ninputs` graph tensors
   (OneHot: its indices, then the on and off scalars); 0 for a kind that is not an operator. */
SK_API int sk_op_tuple_count(sk_op_kind kind, int ninputs);
/* Entries of input i's tuple for an input of rank ndims (OneHot's indices: one more). */
SK_API int sk_op_tuple_len(sk_op_kind kind, int input, int ndims);

SK_EXTERN_C_END

#define SK__OPTABLE_DECLARED
#include "sk_ops.h" /* its implementation waits for the declarations above */

#endif /* SK_OPTABLE_H */

/* The table needs the rules (sk_ops.h's implementation, finished) and the declarations of
   sk_graph.h and sk_exec.h (the types its kernels take). Each of those headers includes this
   one again when it is done, and the last of them brings the table; when neither graph nor exec
   has begun, this header includes sk_exec.h, which comes back here. */
#if defined(SK_OPTABLE_IMPL) && !defined(SK_OPTABLE_IMPL_DONE) && defined(SK__OPTABLE_DECLARED) && \
    defined(SK__OPS_RULES_DONE) && !defined(SK_EXEC_H) && (!defined(SK_GRAPH_H) || defined(SK__GRAPH_DECLARED))
#include "sk_exec.h"
#endif
#if defined(SK_OPTABLE_IMPL) && !defined(SK_OPTABLE_IMPL_DONE) && defined(SK__OPTABLE_DECLARED) && \
    defined(SK__OPS_RULES_DONE) && defined(SK__EXEC_DECLARED)
#define SK_OPTABLE_IMPL_DONE
#include <string.h>
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include "sk_exec.h"
#include "sk_optable_kernels.h"
#include "sk_optable_space.h"

SK_EXTERN_C_BEGIN

#define SK__OP_IN(k) (1u << (k))
#define SK__OP_ALL_IN 0xfu /* every input (SK_OP_MAX_INPUTS) */

/* One row per kind, in sk_op_kind's order:
   X(kind, name, aliases, min in, max in, scalar tuples, tuple extra, index inputs, grad inputs,
     flags, out dtype, rule, facts, kernels, flops, space)
   rule R is sk__op_rule_R (sk_ops.h); facts F sk__opk_facts_F; kernels K sk__opk_fwd_K and
   sk__opk_bwd_K; flops P sk__opk_flops_P (sk_optable_kernels.h); space S sk__ops_space_S
   (sk_optable_space.h). */
#define SK__OP_TABLE(X)                                                                                                \
  X(MATMUL, "MatMul", "", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_CONTRACTS, INPUT0, matmul, none, batch_matmul,          \
    matmul, matmul)                                                                                                    \
  X(BATCH_MATMUL, "BatchMatMul", "", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_CONTRACTS, INPUT0, matmul, none,             \
    batch_matmul, matmul, matmul)                                                                                      \
  X(DENSE, "Dense", "", 2, 3, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_CONTRACTS, INPUT0, dense, dense, dense, matmul, dense)    \
  X(RELU, "ReLU", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, unary, none, relu, per_output,         \
    aligned)                                                                                                           \
  X(GELU, "GeLU", "Gelu,GELU", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, unary, none, gelu,            \
    per_output, aligned)                                                                                               \
  X(TANH, "Tanh", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, unary, none, tanh, per_output,         \
    aligned)                                                                                                           \
  X(CAST, "Cast", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, ATTR, unary, none, cast, per_output, aligned)  \
  X(DROPOUT, "Dropout", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, MASK, dropout, dropout, dropout,         \
    per_output, aligned)                                                                                               \
  X(ADD, "Add", "TensorAdd", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, binary, none, add, per_output,  \
    aligned)                                                                                                           \
  X(SUB, "Sub", "", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, binary, none, sub, per_output, aligned)  \
  X(MUL, "Mul", "", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, binary, none, mul, per_output, aligned)  \
  X(DIV, "Div", "RealDiv", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, binary, none, div, per_output,    \
    aligned)                                                                                                           \
  X(POW, "Pow", "", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, binary, none, pow, per_output, aligned)  \
  X(BIAS_ADD, "BiasAdd", "", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, bias_add, none, bias_add,       \
    per_output, aligned)                                                                                               \
  X(PRELU, "PReLU", "", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, prelu, none, prelu, per_output,      \
    prelu)                                                                                                             \
  X(SOFTMAX, "Softmax", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, softmax, none, softmax,          \
    per_output, aligned)                                                                                               \
  X(LOG_SOFTMAX, "LogSoftmax", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, log_softmax, none,        \
    log_softmax, per_output, aligned)                                                                                  \
  X(L2_NORMALIZE, "L2Normalize", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, l2_normalize, none,     \
    l2_normalize, per_output, aligned)                                                                                 \
  X(LAYER_NORM, "LayerNorm", "", 3, 3, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, layer_norm, none,           \
    layer_norm, per_output, aligned)                                                                                   \
  X(SOFTMAX_CE, "SoftmaxCrossEntropy", "", 2, 2, 0, 0, 0, SK__OP_IN(0), 0, INPUT0, softmax_ce, softmax_ce, softmax_ce, \
    per_output, softmax_ce)                                                                                            \
  X(SOFTMAX_CE_LOGITS, "SoftmaxCrossEntropyWithLogits", "", 2, 2, 0, 0, 0, SK__OP_IN(0), 0, INPUT0,                    \
    softmax_ce_logits, none, softmax_ce_logits, per_output, softmax_ce)                                                \
  X(MAE_LOSS, "MAELoss", "MaeLoss", 2, 2, 0, 0, 0, SK__OP_ALL_IN, 0, INPUT0, mae_loss, mae_loss, mae_loss, per_output, \
    reshaping)                                                                                                         \
  X(REDUCE_SUM, "ReduceSum", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, 0, INPUT0, reduce_sum, none, reduce_sum, per_output,    \
    reshaping)                                                                                                         \
  X(REDUCE_MEAN, "ReduceMean", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, 0, INPUT0, reduce_mean, none, reduce_mean,            \
    per_output, reshaping)                                                                                             \
  X(REDUCE_MAX, "ReduceMax", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, 0, INPUT0, reduce_max, none, reduce_max, per_output,    \
    reshaping)                                                                                                         \
  X(FLATTEN, "Flatten", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, 0, INPUT0, flatten, none, copy, per_output, reshaping)       \
  X(TRANSPOSE, "Transpose", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_PERMUTES, INPUT0, transpose, none, transpose,     \
    per_output, reshaping)                                                                                             \
  X(RESHAPE, "Reshape", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_BATCH_SHAPES | SK_OPF_FOLLOWS_INPUT |                  \
    SK_OPF_REDISTRIBUTES, INPUT0, reshape, none, copy, per_output, none)                                               \
  X(EXPAND_DIMS, "ExpandDims", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, 0, INPUT0, expand_dims, none, copy, per_output,       \
    reshaping)                                                                                                         \
  X(ONE_HOT, "OneHot", "", 1, 1, 2, 1, SK__OP_IN(0), 0, 0, ATTR, one_hot, one_hot, one_hot, per_output, one_hot)       \
  X(GATHER, "Gather", "GatherV2", 2, 2, 0, 0, SK__OP_IN(1), SK__OP_IN(0), 0, INPUT0, gather, gather, gather,            \
    per_output, separate)                                                                                              \
  X(GET_NEXT, "GetNext", "", 0, 0, 0, 0, 0, 0, SK_OPF_SOURCE | SK_OPF_BATCH_SHAPES, ATTR, get_next, none, none,        \
    per_output, none)                                                                                                  \
  X(VIRTUAL_DATASET, "VirtualDataset", "_VirtualDataset", 1, SK_OP_MAX_INPUTS, 0, 0, 0, SK__OP_ALL_IN,                 \
    SK_OPF_PASSTHROUGH, PASS, virtual_dataset, none, virtual_dataset, per_output, none)                                \
  X(TMP_IDENTITY, "TmpIdentity", "identity_info", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0,             \
    tmp_identity, none, copy, per_output, aligned)                                                                     \
  X(SIGMOID, "Sigmoid", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, unary, none, sigmoid,            \
    per_output, aligned)                                                                                               \
  X(SILU, "SiLU", "", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, unary, none, silu, per_output, aligned) \
  X(RMS_NORM, "RmsNorm", "RMSNorm", 2, 2, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_KEEPS_SHAPE, INPUT0, rms_norm, none, rms_norm, \
    per_output, aligned)                                                                                               \
  X(VIRTUAL_LOSS, "VirtualLoss", "_VirtualLoss", 1, 1, 0, 0, 0, SK__OP_ALL_IN, SK_OPF_FOLLOWS_INPUT, INPUT0,           \
    virtual_loss, none, virtual_loss, per_output, none)

#define SK__OP_ROW(kind, name, aliases, lo, hi, scalars, extra, index, grad, flags, dtype, rule, facts, kern, flops,   \
                   space)                                                                                              \
  {SK_OP_##kind,                                                                                                       \
   name,                                                                                                               \
   aliases,                                                                                                            \
   lo,                                                                                                                 \
   hi,                                                                                                                 \
   scalars,                                                                                                            \
   extra,                                                                                                              \
   index,                                                                                                              \
   grad,                                                                                                               \
   (uint32_t)(flags),                                                                                                  \
   SK_OPD_##dtype,                                                                                                \
   sk__op_rule_##rule,                                                                                                 \
   sk__opk_facts_##facts,                                                                                              \
   sk__opk_fwd_##kern,                                                                                                 \
   sk__opk_bwd_##kern,                                                                                                 \
   sk__opk_flops_##flops,                                                                                              \
   sk__ops_space_##space},

static const sk_op_row sk__op_rows[] = {SK__OP_TABLE(SK__OP_ROW)};

/* A row for every kind: a kind added to sk_op_kind without one stops the build here. */
typedef char sk__op_rows_complete[sizeof sk__op_rows / sizeof sk__op_rows[0] == SK_OP_KIND_COUNT ? 1 : -1];

SK_API const sk_op_row *sk_op_row_of(sk_op_kind kind) {
  return (int)kind >= 0 && kind < SK_OP_KIND_COUNT ? &sk__op_rows[kind] : NULL;
}

SK_API int sk_op_tuple_count(sk_op_kind kind, int ninputs) {
  const sk_op_row *row = sk_op_row_of(kind);
  return row ? ninputs + row->scalar_tuples : 0;
}

SK_API int sk_op_tuple_len(sk_op_kind kind, int input, int ndims) {
  const sk_op_row *row = sk_op_row_of(kind);
  return row && input == 0 ? ndims + row->tuple_extra : ndims;
}

SK_API const char *sk_op_kind_name(sk_op_kind kind) {
  const sk_op_row *row = sk_op_row_of(kind);
  return row ? row->name : "invalid";
}

/* Whether `name` is one of the comma-separated `list`. */
static bool sk__op_listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return true;
    p += len + (end ? 1 : 0);
  }
  return false;
}

SK_API bool sk_op_kind_from_name(const char *name, sk_op_kind *kind) {
  if (!name || !kind) return false;
  for (int k = 0; k < (int)SK_OP_KIND_COUNT; k++)
    if (!strcmp(name, sk__op_rows[k].name)) return *kind = (sk_op_kind)k, true;
  for (int k = 0; k < (int)SK_OP_KIND_COUNT; k++)
    if (sk__op_listed(sk__op_rows[k].aliases, name)) return *kind = (sk_op_kind)k, true;
  return false;
}

/* MindSpore's Activation is the operator its activation_type names. ActivationInfo::GetAttrs
   accepts relu, relu6 and sigmoid; shardkit has relu and sigmoid. */
#define SK__OP_ACTIVATION "Activation"
static const struct {
  const char *type;
  sk_op_kind kind;
} sk__op_activations[] = {{"relu", SK_OP_RELU}, {"sigmoid", SK_OP_SIGMOID}};
#define SK__OP_NACTIVATIONS (int)(sizeof sk__op_activations / sizeof sk__op_activations[0])

/* The activation types shardkit has, "relu, ..." for messages. */
static void sk__op_activation_types(char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < SK__OP_NACTIVATIONS && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", sk__op_activations[i].type);
}

SK_API sk_result sk_op_kind_parse(const char *name, const char *activation_type, sk_op_kind *kind, sk_error *err) {
  char types[64];
  sk_op_kind named;
  if (!name || !kind) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "name or kind is NULL");
  if (strcmp(name, SK__OP_ACTIVATION)) {
    if (!sk_op_kind_from_name(name, &named))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "unknown operator type \"%.40s\" (MindSpore's primitive names)", name);
    if (activation_type)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: activation_type is an attribute of Activation only", name);
    return *kind = named, SK_OK;
  }
  for (int i = 0; activation_type && i < SK__OP_NACTIVATIONS; i++)
    if (!strcmp(activation_type, sk__op_activations[i].type)) return *kind = sk__op_activations[i].kind, SK_OK;
  sk__op_activation_types(types, sizeof types);
  if (!activation_type) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Activation: needs activation_type (%s)", types);
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "Activation: activation_type \"%.40s\" has no kernel in shardkit, which "
                  "has %s (MindSpore's ActivationInfo takes relu, relu6 and sigmoid)", activation_type, types);
}

/* A bit per kind in sk_op_kinds_named's mask. */
typedef char sk__op_kinds_fit_a_mask[SK_OP_KIND_COUNT <= 64 ? 1 : -1];

SK_API uint64_t sk_op_kinds_named(const char *name) {
  sk_op_kind kind;
  uint64_t kinds = 0;
  if (!name) return 0;
  if (sk_op_kind_from_name(name, &kind)) return (uint64_t)1 << kind;
  if (strcmp(name, SK__OP_ACTIVATION)) return 0;
  for (int i = 0; i < SK__OP_NACTIVATIONS; i++) kinds |= (uint64_t)1 << sk__op_activations[i].kind;
  return kinds;
}

#undef SK__OP_NACTIVATIONS
#undef SK__OP_ACTIVATION

#undef SK__OP_ROW
#undef SK__OP_TABLE
#undef SK__OP_ALL_IN
#undef SK__OP_IN

SK_EXTERN_C_END

#endif /* SK_OPTABLE_IMPL */
