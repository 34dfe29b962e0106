/* sk_graph.h -- a network shardkit can see: inputs, parameters with initialisers, operators
   wired by tensor (each optionally carrying a `shard` strategy or layouts, a fusion id, a
   pipeline stage and a recompute flag), shape inference, a loss, and the optimizer that trains
   it.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_GRAPH_IMPL + SK_OPS_IMPL + SK_LAYOUT_IMPL)
                             #include "sk_graph.h"
   Needs only libc and libm. A graph owns its arrays (from its `allocator`, zero = the C
   library; sk_graph_free releases them); nothing else is allocated and nothing is global.

   WHAT IT IS
     The description the training and parallelisation layers start from; the JSON reader and
     writer (sk_json.h, jansson) load and save it (docs/network-json.md). A graph is built in
     order: a tensor exists before an operator reads it, so the operators' order is a valid
     execution order (a topological one) and shapes are inferred as operators are added.

   TENSORS
     Every tensor has a name (unique in the graph), a role (input: fed by the data; parameter:
     trained, with an initialiser; value: an operator's output; constant: a number an operator
     reads), a dtype and a GLOBAL shape (the whole tensor, as a single device sees it: a
     network's batch size is global). An operator's outputs are named after it: "<op>" for its
     first output, "<op>:<i>" for the others.
     A constant is MindSpore's number operand, as in ops.Mul()(x, 0.5): MindSpore turns the
     number into a rank-0 tensor (a ValueNode) that the operator reads like any input, so its
     shard strategy has an empty tuple () for it (Mul().shard(((2, 4), ())), as MindSpore's
     parallel tests write it). Here it is that rank-0 tensor (sk_graph_add_const): replicated on
     every device, never fed, never given a gradient; the JSON writes it as the number itself in
     the operator's input list, once per reader.
     A parameter added with requires_grad false (sk_graph_set_requires_grad; MindSpore's
     Parameter(..., requires_grad=False)) is still initialised, stored and checkpointed, but has
     no gradient: no Mirror, no optimizer state, no update (sk_graph_trainable).

   OPERATORS
     An sk_graph_op carries an sk_op_desc (sk_ops.h: the kind, MindSpore's attributes, and the
     strategy or layouts of its `shard`), the tensors it reads, and what sk_op_desc has no
     field for: Dropout's keep_prob, the epsilon of LayerNorm and L2Normalize, OneHot's on and off
     values (MindSpore passes them as scalar inputs; here they are attributes), the output dtype
     of Cast, OneHot and GetNext, and the fusion id, pipeline stage and recompute flag later
     layers read. The graph fills the desc's input shapes itself; shape inference is sk_ops.h's
     rule on one device, so an operator the rules refuse is refused here, the message starting
     with the operator's name.

   DATA SOURCES
     An input may name what feeds it (sk_data_source, set by sk_graph_set_data; the JSON's
     "data" object): an .npy file (its path as written; a relative one is read from the graph's
     data_dir, which sk_json_load_network sets to the JSON file's directory), integers uniform in
     [lo, hi) (labels, indices), normal(mean, std) or uniform [lo, hi) floats. The graph only
     carries them; the program feeding the inputs reads the files and draws the numbers
     (tools/data_sources.h, docs/network-json.md). An input without one is fed by the graph's
     `dataset`, a name programs interpret.

   INITIALISERS (MindSpore's names; one seeded stream)
     sk_graph_init_params draws every parameter, in the order they were added, element by
     element in row-major order, from ONE xorshift64* stream seeded by `seed`: a network and a
     seed give the same initial model whatever runs it. fan_in / fan_out follow MindSpore: for a
     shape [d0, d1, r...], fan_in = d1 * prod(r), fan_out = d0 * prod(r) (a 1-D shape: both d0).

   ERRORS
     Bad input (a NULL pointer, an empty or too long or duplicate name, a tensor id out of range,
     a bad shape, dtype or attribute, an operator output of more than 2^40 elements, as for
     inputs and parameters, a loss that is not a one-element float tensor) returns
     SK_ERR_INVALID_ARGUMENT with a message naming the tensor or operator; the graph is left as
     it was. Growing an array that fails: SK_ERR_OUT_OF_MEMORY, the graph unchanged.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_GRAPH_IMPL)
#define SK_GRAPH_IMPL
#endif
#ifndef SK_GRAPH_H
#define SK_GRAPH_H

#include "sk_core.h"
#include "sk_layout.h"
#include "sk_ops.h"
#include "sk_optim.h"

SK_EXTERN_C_BEGIN

#define SK_GRAPH_NAME_MAX 64 /* names, with their terminating NUL */
/* sk_graph_op.fusion: never fused (MindSpore's Cell.set_comm_fusion(0)); sk_fusion.h's SK_FUSION_NEVER */
#define SK_GRAPH_FUSION_NEVER (-1)

typedef enum sk_tensor_role { SK_TENSOR_INPUT = 0, SK_TENSOR_PARAM, SK_TENSOR_VALUE, SK_TENSOR_CONST } sk_tensor_role;

/* MindSpore's initialisers; `value` is the one number each takes (zero: MindSpore's default):
     ZEROS, ONES          --
     CONSTANT             the value (default 0)
     UNIFORM              scale: U(-scale, scale) (default 0.07)
     NORMAL               sigma: N(0, sigma^2) (default 0.01), Box-Muller on two draws
     HE_UNIFORM           negative_slope a (default 0): U(-b, b), b = sqrt(6 / ((1 + a^2) fan_in))
     XAVIER_UNIFORM       gain (default 1): U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)) */
typedef enum sk_init_kind {
  SK_INIT_ZEROS = 0,
  SK_INIT_ONES,
  SK_INIT_CONSTANT,
  SK_INIT_UNIFORM,
  SK_INIT_NORMAL,
  SK_INIT_HE_UNIFORM,
  SK_INIT_XAVIER_UNIFORM,
  SK_INIT_KIND_COUNT
} sk_init_kind;

typedef struct sk_init {
  sk_init_kind kind;
  double value;
} sk_init;

/* What feeds an input (DATA SOURCES above). */
typedef enum sk_data_kind {
  SK_DATA_NONE = 0,       /* the graph's dataset */
  SK_DATA_NPY,            /* path: a NumPy .npy file, samples first (sk_npy.h) */
  SK_DATA_RANDOM_INT,     /* integers uniform in [a, b): whole numbers, |a|, |b| <= 2^53 */
  SK_DATA_RANDOM_NORMAL,  /* a float input: mean a, standard deviation b >= 0 */
  SK_DATA_RANDOM_UNIFORM, /* a float input: uniform in [a, b) */
  SK_DATA_KIND_COUNT
} sk_data_kind;

#define SK_DATA_PATH_MAX 256   /* an .npy path as written, with its NUL */
#define SK_GRAPH_DIR_MAX 4096  /* data_dir, with its NUL */

typedef struct sk_data_source {
  sk_data_kind kind;
  double a, b;                 /* the random kinds' two numbers */
  char path[SK_DATA_PATH_MAX]; /* SK_DATA_NPY */
} sk_data_source;

typedef struct sk_graph_tensor {
  char name[SK_GRAPH_NAME_MAX];
  sk_tensor_role role;
  sk_dtype dtype;
  int ndims; /* 0: a scalar */
  int64_t shape[SK_MAX_DIMS];
  sk_init init;     /* parameters */
  double value;     /* constants: the number (a rank-0 tensor) */
  bool frozen;      /* parameters: requires_grad=False (sk_graph_set_requires_grad) */
  bool no_parallel_optimizer; /* parameters: parallel_optimizer=False (sk_graph_set_parallel_optimizer) */
  int producer;     /* the operator whose output it is; -1 for inputs and parameters */
  int output_index; /* which output of the producer */
  sk_data_source data; /* inputs: what feeds it (SK_DATA_NONE: the graph's dataset) */
} sk_graph_tensor;

/* One operator. Zero-initialise, set name, desc.kind, the attributes the operator reads (in
   desc and here), ninputs / inputs, and optionally a strategy or layouts in desc; the graph
   fills desc's shapes, noutputs and outputs. Zero is every attribute's MindSpore default. */
typedef struct sk_graph_op {
  char name[SK_GRAPH_NAME_MAX];
  sk_op_desc desc;
  int ninputs;
  int inputs[SK_OP_MAX_INPUTS]; /* tensor ids (OneHot: the indices only) */
  int noutputs;
  int outputs[SK_OP_MAX_OUTPUTS];
  double keep_prob;  /* Dropout: zero is MindSpore's 0.5 */
  double epsilon;    /* LayerNorm (zero: 1e-7), L2Normalize (zero: 1e-4) */
  double on_value;   /* OneHot: zero means 1 */
  double off_value;  /* OneHot */
  sk_dtype out_dtype[SK_OP_MAX_OUTPUTS]; /* Cast, OneHot, GetNext: the outputs' dtypes (zero: f32) */
  int fusion;        /* the fusion id of its parameters' gradient AllReduces (Cell.set_comm_fusion):
                        0 MindSpore's default id (1), SK_GRAPH_FUSION_NEVER (MindSpore's 0) never
                        fused, n > 0 id n; only AllReduces of one id fuse */
  int stage;         /* pipeline stage (0: the first) */
  bool recompute;
} sk_graph_op;

typedef struct sk_graph {
  int ntensors, nops;
  sk_graph_tensor *tensors;
  sk_graph_op *ops;
  int loss;   /* the tensor training minimises; -1 until set */
  int logits; /* the tensor evaluation scores (argmax over the last dim); -1: none */
  int labels; /* the input it is scored against (class indices); -1: none */
  char dataset[SK_GRAPH_NAME_MAX]; /* what feeds the inputs: a name programs interpret ("" none) */
  char data_dir[SK_GRAPH_DIR_MAX]; /* where relative .npy paths are read from ("": the current directory) */
  /* The optimizer training uses (sk_optim.h), set directly: zero (as sk_graph_init leaves it) is
     SGD with MindSpore's defaults. The graph only carries it; sk_optim_update checks it. */
  sk_optim_desc optim;
  int tensor_cap, op_cap; /* allocated lengths */
  /* Where the graph's arrays come from, set directly after sk_graph_init and before the first
     add (zero = the C library). sk_graph_free keeps it; sk_graph_micro's result inherits it. */
  sk_allocator allocator;
} sk_graph;

/* An empty graph (no allocation). */
SK_API void sk_graph_init(sk_graph *g);
SK_API void sk_graph_free(sk_graph *g);

SK_API sk_result sk_graph_add_input(sk_graph *g, const char *name, sk_dtype dtype, int ndims, const int64_t *shape,
                                    int *id, sk_error *err);
SK_API sk_result sk_graph_add_param(sk_graph *g, const char *name, sk_dtype dtype, int ndims, const int64_t *shape,
                                    sk_init init, int *id, sk_error *err);
/* A constant: a rank-0 tensor of float dtype holding `value` (see TENSORS), which operators
   read as they read any tensor. */
SK_API sk_result sk_graph_add_const(sk_graph *g, const char *name, sk_dtype dtype, double value, int *id,
                                    sk_error *err);
/* MindSpore's Parameter.requires_grad: false freezes parameter t (see TENSORS); true (what
   sk_graph_add_param gives) trains it. */
SK_API sk_result sk_graph_set_requires_grad(sk_graph *g, int t, bool requires_grad, sk_error *err);
/* MindSpore's Parameter(..., parallel_optimizer=False): parameter t is never sharded by optimizer
   parallel (hsdp); its gradient is summed whole as without hsdp. true (the default) lets the
   hsdp rules decide. */
SK_API sk_result sk_graph_set_parallel_optimizer(sk_graph *g, int t, bool enabled, sk_error *err);
/* Whether tensor t is a parameter that trains (requires_grad): gradient, Mirror, optimizer. */
SK_API bool sk_graph_trainable(const sk_graph *g, int t);
/* Adds op (copied), infers its outputs' shapes and dtypes and adds them as tensors; *index (may
   be NULL) receives the operator's index. */
SK_API sk_result sk_graph_add_op(sk_graph *g, const sk_graph_op *op, int *index, sk_error *err);
SK_API sk_result sk_graph_set_loss(sk_graph *g, int tensor, sk_error *err);
/* Evaluation: logits [..., C] scored by argmax against labels (an integer input of logits'
   shape without the last dim). */
SK_API sk_result sk_graph_set_eval(sk_graph *g, int logits, int labels, sk_error *err);

/* Sets (or with kind SK_DATA_NONE clears) what feeds input `tensor`. Refused, naming the tensor:
   a tensor that is not an input, an unknown kind, an empty, too long or control-character path,
   random_int bounds that are not whole numbers within 2^53 or do not fit the input's integer
   dtype, a normal or uniform source for an integer input, lo >= hi, std < 0, a number that is
   not finite. */
SK_API sk_result sk_graph_set_data(sk_graph *g, int tensor, const sk_data_source *src, sk_error *err);
/* The path an .npy source of input `tensor` is read from: its path joined to g->data_dir when
   relative, into out (cap bytes). */
SK_API sk_result sk_graph_data_path(const sk_graph *g, int tensor, char *out, size_t cap, sk_error *err);
SK_API const char *sk_data_kind_name(sk_data_kind kind); /* "none", "npy", "random_int", ... */
SK_API bool sk_data_kind_from_name(const char *name, sk_data_kind *kind);

/* The tensor id of a name, or -1. */
SK_API int sk_graph_find(const sk_graph *g, const char *name);
/* The element count of a tensor. */
SK_API int64_t sk_graph_numel(const sk_graph *g, int tensor);
/* The complete sk_op_desc of operator i, as sk_op_plan_make takes it (OneHot gets its two scalar
   inputs here). */
SK_API sk_result sk_graph_op_desc(const sk_graph *g, int i, sk_op_desc *desc, sk_error *err);
/* A graph ready to train: a loss is set and every operator's inputs exist. */
SK_API sk_result sk_graph_check(const sk_graph *g, sk_error *err);

/* The network of one micro-batch (pipeline parallel's micro_size): `out` (the caller's, free
   with sk_graph_free) is g with every input's dim 0, its batch, divided by `micro`, and so the
   target shapes of Reshape and GetNext, whose dim 0 counts the batch as a network written for
   the whole batch states them. Parameters (and so their initial values), operators, strategies,
   tensor and operator ids, the loss, evaluation, dataset name, data sources and optimizer are g's. Refused,
   naming the tensor or operator: a scalar input, a dim 0 that `micro` does not divide. */
SK_API sk_result sk_graph_micro(const sk_graph *g, int micro, sk_graph *out, sk_error *err);

/* Draws every parameter's initial values (see INITIALISERS) into values[t] for each parameter
   tensor t (values[t] of the tensor's element count in dtype dt, SK_F32 or SK_F64; entries of
   other tensors are not read). */
SK_API sk_result sk_graph_init_params(const sk_graph *g, uint64_t seed, sk_dtype dt, void *const *values,
                                      sk_error *err);

SK_API const char *sk_init_kind_name(sk_init_kind kind); /* "zeros", "ones", "constant", ... */
SK_API bool sk_init_kind_from_name(const char *name, sk_init_kind *kind);
SK_API const char *sk_tensor_role_name(sk_tensor_role role); /* "input", "parameter", "value", "constant" */

SK_EXTERN_C_END
#define SK__GRAPH_DECLARED
#include "sk_optable.h" /* the table's implementation may have waited for these declarations */
#endif /* SK_GRAPH_H */

#if defined(SK_GRAPH_IMPL) && !defined(SK_GRAPH_IMPL_DONE)
#define SK_GRAPH_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const sk__init_names[SK_INIT_KIND_COUNT] = {"zeros",  "ones",       "constant",      "uniform",
                                                                "normal", "he_uniform", "xavier_uniform"};

SK_API const char *sk_init_kind_name(sk_init_kind kind) {
  return (unsigned)kind < SK_INIT_KIND_COUNT ? sk__init_names[kind] : "unknown";
}

/* The index of name in names[0..n), or -1: the kinds' names read back. */
static int sk__graph_name_index(const char *const *names, int n, const char *name) {
  for (int i = 0; name && i < n; i++)
    if (!strcmp(name, names[i])) return i;
  return -1;
}

SK_API bool sk_init_kind_from_name(const char *name, sk_init_kind *kind) {
  int i = sk__graph_name_index(sk__init_names, SK_INIT_KIND_COUNT, name);
  return i >= 0 ? (*kind = (sk_init_kind)i, true) : false;
}

SK_API const char *sk_tensor_role_name(sk_tensor_role role) {
  switch (role) {
    case SK_TENSOR_INPUT: return "input";
    case SK_TENSOR_PARAM: return "parameter";
    case SK_TENSOR_VALUE: return "value";
    case SK_TENSOR_CONST: return "constant";
  }
  return "unknown";
}

static const char *const sk__data_names[SK_DATA_KIND_COUNT] = {"none", "npy", "random_int", "random_normal",
                                                                "random_uniform"};

SK_API const char *sk_data_kind_name(sk_data_kind kind) {
  return (unsigned)kind < SK_DATA_KIND_COUNT ? sk__data_names[kind] : "unknown";
}

SK_API bool sk_data_kind_from_name(const char *name, sk_data_kind *kind) {
  int i = sk__graph_name_index(sk__data_names, SK_DATA_KIND_COUNT, name);
  return i >= 0 ? (*kind = (sk_data_kind)i, true) : false;
}

SK_API void sk_graph_init(sk_graph *g) {
  memset(g, 0, sizeof *g);
  g->loss = g->logits = g->labels = -1;
}

SK_API void sk_graph_free(sk_graph *g) {
  if (!g) return;
  sk_allocator a = g->allocator;
  sk__free(&a, g->tensors), sk__free(&a, g->ops);
  sk_graph_init(g);
  g->allocator = a; /* the graph may be built again, from the same memory */
}

/* Divides dim 0 of a shape by micro; `what` and `name` name it when micro does not divide. */
static sk_result sk__graph_micro_dim0(int ndims, int64_t *shape, int micro, const char *what, const char *name,
                                      sk_error *err) {
  if (ndims < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: %s '%s' is a scalar: no batch to cut into %d micro-batches", what, name, micro);
  if (shape[0] % micro != 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: %s '%s': dim 0 (%lld) does not divide into %d micro-batches",
                    what, name, (long long)shape[0], micro);
  shape[0] /= micro;
  return SK_OK;
}

/* Adds g's operator o to m at micro-batch size. */
static sk_result sk__graph_micro_op(const sk_graph *g, int o, int micro, sk_graph *m, sk_error *err) {
  sk_graph_op op = g->ops[o];
  sk_result r = SK_OK;
  bool batch_shapes = (sk_op_row_of(op.desc.kind)->flags & SK_OPF_BATCH_SHAPES) != 0;
  for (int k = 0; batch_shapes && !r && k < op.desc.noutputs; k++)
    r = sk__graph_micro_dim0(op.desc.out_ndims[k], op.desc.out_shape[k], micro, "the target shape of operator", op.name, err);
  int index = -1;
  if (!r) r = sk_graph_add_op(m, &op, &index, err);
  if (!r && index != o) r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s' does not keep its index", op.name);
  return r;
}

SK_API sk_result sk_graph_micro(const sk_graph *g, int micro, sk_graph *out, sk_error *err) {
  if (!g || !out || micro < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: micro: NULL graph or micro_size %d < 1", micro);
  sk_graph_init(out);
  out->allocator = g->allocator;
  sk_result r = SK_OK;
  for (int t = 0; !r && t < g->ntensors; t++) {
    const sk_graph_tensor *x = &g->tensors[t];
    int64_t shape[SK_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    int id = -1;
    if (x->role == SK_TENSOR_INPUT) {
      r = sk__graph_micro_dim0(x->ndims, shape, micro, "input", x->name, err);
      if (!r) r = sk_graph_add_input(out, x->name, x->dtype, x->ndims, shape, &id, err);
      if (!r) out->tensors[id].data = x->data;
    } else if (x->role == SK_TENSOR_PARAM) {
      r = sk_graph_add_param(out, x->name, x->dtype, x->ndims, shape, x->init, &id, err);
      if (!r) out->tensors[id].frozen = x->frozen, out->tensors[id].no_parallel_optimizer = x->no_parallel_optimizer;
    } else if (x->role == SK_TENSOR_CONST) {
      r = sk_graph_add_const(out, x->name, x->dtype, x->value, &id, err);
    } else if (x->output_index == 0) {
      r = sk__graph_micro_op(g, x->producer, micro, out, err);
      id = t;
    } else continue; /* a later output of an operator already added */
    if (!r && id != t) r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: tensor '%s' does not keep its id", x->name);
  }
  if (!r && g->loss >= 0) r = sk_graph_set_loss(out, g->loss, err);
  if (!r && g->logits >= 0) r = sk_graph_set_eval(out, g->logits, g->labels, err);
  if (r) return sk_graph_free(out), r;
  memcpy(out->dataset, g->dataset, sizeof out->dataset);
  memcpy(out->data_dir, g->data_dir, sizeof out->data_dir);
  out->optim = g->optim;
  return SK_OK;
}

SK_API int sk_graph_find(const sk_graph *g, const char *name) {
  for (int i = 0; g && name && i < g->ntensors; i++)
    if (!strcmp(g->tensors[i].name, name)) return i;
  return -1;
}

SK_API int64_t sk_graph_numel(const sk_graph *g, int t) {
  if (!g || t < 0 || t >= g->ntensors) return 0;
  int64_t n = 1;
  for (int d = 0; d < g->tensors[t].ndims; d++) n *= g->tensors[t].shape[d];
  return n;
}

/* *p (`used` bytes of it) moved into `bytes` from the graph's allocator; *p is kept on failure.
   The allocator has no realloc: growth is alloc + copy + free, amortised by doubling. */
static bool sk__graph_grow(sk_graph *g, void **p, size_t used, size_t bytes) {
  void *q = sk__alloc(&g->allocator, bytes, sizeof(double));
  if (!q) return false;
  if (used) memcpy(q, *p, used);
  sk__free(&g->allocator, *p);
  *p = q;
  return true;
}

/* Room for `more` tensors and one operator, so that adding an operator either fits whole or
   leaves the graph untouched. */
static sk_result sk__graph_reserve(sk_graph *g, int more, sk_error *err) {
  if (!sk__allocator_ok(&g->allocator))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: allocator: set both alloc and free, or neither");
  if (g->ntensors + more > g->tensor_cap) {
    int cap = g->tensor_cap ? 2 * g->tensor_cap : 16;
    while (cap < g->ntensors + more) cap *= 2;
    if (!sk__graph_grow(g, (void **)&g->tensors, sizeof *g->tensors * (size_t)g->ntensors, sizeof *g->tensors * (size_t)cap))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "graph: out of memory growing the tensor list");
    g->tensor_cap = cap;
  }
  if (g->nops + 1 > g->op_cap) {
    int cap = g->op_cap ? 2 * g->op_cap : 16;
    if (!sk__graph_grow(g, (void **)&g->ops, sizeof *g->ops * (size_t)g->nops, sizeof *g->ops * (size_t)cap))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "graph: out of memory growing the operator list");
    g->op_cap = cap;
  }
  return SK_OK;
}

/* A name is 1..SK_GRAPH_NAME_MAX-1 printable characters, unique among tensors. */
static sk_result sk__graph_check_name(const sk_graph *g, const char *what, const char *name, sk_error *err) {
  if (!name || !*name) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: %s has no name", what);
  size_t n = strlen(name);
  if (n >= SK_GRAPH_NAME_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: %s name '%.20s...' is longer than %d characters", what,
                    name, SK_GRAPH_NAME_MAX - 1);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: %s name has a control character", what);
  if (sk_graph_find(g, name) >= 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: %s '%s': a tensor of that name exists", what, name);
  return SK_OK;
}

static sk_result sk__graph_check_shape(const char *name, int ndims, const int64_t *shape, sk_error *err) {
  if (ndims < 0 || ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: tensor '%s' has %d dims (0..%d allowed)", name, ndims,
                    SK_MAX_DIMS);
  if (ndims && !shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: tensor '%s' has no shape", name);
  int64_t n = 1;
  for (int d = 0; d < ndims; d++) {
    if (shape[d] < 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: tensor '%s' dim %d is %lld (must be >= 1)", name, d,
                      (long long)shape[d]);
    if (shape[d] > ((int64_t)1 << 40) / n)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: tensor '%s' has more than 2^40 elements", name);
    n *= shape[d];
  }
  return SK_OK;
}

static sk_result sk__graph_push_tensor(sk_graph *g, const char *name, sk_tensor_role role, sk_dtype dtype, int ndims,
                                       const int64_t *shape, sk_init init, int *id, sk_error *err) {
  sk_result r;
  if (!g) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: NULL graph");
  const char *what = role == SK_TENSOR_PARAM ? "parameter" : role == SK_TENSOR_CONST ? "constant" : "input";
  if ((r = sk__graph_check_name(g, what, name, err))) return r;
  if ((r = sk__graph_check_shape(name, ndims, shape, err))) return r;
  if (!sk_dtype_valid(dtype)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: tensor '%s' has a bad dtype", name);
  if (role != SK_TENSOR_INPUT && dtype != SK_F32 && dtype != SK_F64 && dtype != SK_F16 && dtype != SK_BF16)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: %s '%s' must be a float tensor, not %s", what, name,
                    sk_dtype_name(dtype));
  if (role == SK_TENSOR_PARAM && (unsigned)init.kind >= SK_INIT_KIND_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: parameter '%s' has an unknown initialiser", name);
  if ((r = sk__graph_reserve(g, 1, err))) return r;
  sk_graph_tensor *t = &g->tensors[g->ntensors];
  memset(t, 0, sizeof *t);
  memcpy(t->name, name, strlen(name) + 1);
  t->role = role, t->dtype = dtype, t->ndims = ndims, t->init = init, t->producer = -1;
  for (int d = 0; d < ndims; d++) t->shape[d] = shape[d];
  if (id) *id = g->ntensors;
  g->ntensors++;
  return SK_OK;
}

SK_API sk_result sk_graph_add_input(sk_graph *g, const char *name, sk_dtype dtype, int ndims, const int64_t *shape,
                                    int *id, sk_error *err) {
  sk_init none = {SK_INIT_ZEROS, 0};
  return sk__graph_push_tensor(g, name, SK_TENSOR_INPUT, dtype, ndims, shape, none, id, err);
}

SK_API sk_result sk_graph_add_param(sk_graph *g, const char *name, sk_dtype dtype, int ndims, const int64_t *shape,
                                    sk_init init, int *id, sk_error *err) {
  return sk__graph_push_tensor(g, name, SK_TENSOR_PARAM, dtype, ndims, shape, init, id, err);
}

SK_API sk_result sk_graph_add_const(sk_graph *g, const char *name, sk_dtype dtype, double value, int *id,
                                    sk_error *err) {
  sk_init none = {SK_INIT_ZEROS, 0};
  if (!isfinite(value))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: constant '%s' is not a finite number", name ? name : "");
  int at = -1;
  sk_result r = sk__graph_push_tensor(g, name, SK_TENSOR_CONST, dtype, 0, NULL, none, &at, err);
  if (r) return r;
  g->tensors[at].value = value;
  if (id) *id = at;
  return SK_OK;
}

SK_API sk_result sk_graph_set_requires_grad(sk_graph *g, int t, bool requires_grad, sk_error *err) {
  if (!g || t < 0 || t >= g->ntensors || g->tensors[t].role != SK_TENSOR_PARAM)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: requires_grad: tensor %d is not a parameter", t);
  g->tensors[t].frozen = !requires_grad;
  return SK_OK;
}

SK_API sk_result sk_graph_set_parallel_optimizer(sk_graph *g, int t, bool enabled, sk_error *err) {
  if (!g || t < 0 || t >= g->ntensors || g->tensors[t].role != SK_TENSOR_PARAM)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: parallel_optimizer: tensor %d is not a parameter", t);
  g->tensors[t].no_parallel_optimizer = !enabled;
  return SK_OK;
}

SK_API bool sk_graph_trainable(const sk_graph *g, int t) {
  return g && t >= 0 && t < g->ntensors && g->tensors[t].role == SK_TENSOR_PARAM && !g->tensors[t].frozen;
}

SK_API sk_result sk_graph_op_desc(const sk_graph *g, int i, sk_op_desc *desc, sk_error *err) {
  if (!g || !desc || i < 0 || i >= g->nops)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: no operator %d", i);
  const sk_graph_op *op = &g->ops[i];
  *desc = op->desc;
  desc->ninputs = op->ninputs;
  for (int k = 0; k < op->ninputs; k++) {
    const sk_graph_tensor *t = &g->tensors[op->inputs[k]];
    desc->ndims[k] = t->ndims;
    memcpy(desc->shape[k], t->shape, sizeof t->shape);
  }
  /* the scalar inputs the graph holds as attributes (OneHot's on and off values) */
  for (int k = 0; k < sk_op_row_of(op->desc.kind)->scalar_tuples; k++) desc->ndims[desc->ninputs++] = 0;
  return SK_OK;
}

/* The dtype of output k: what the operator fixes, else its first input's. */
static sk_dtype sk__graph_out_dtype(const sk_graph *g, const sk_graph_op *op, int k) {
  switch (sk_op_row_of(op->desc.kind)->out_dtype) {
    case SK_OPD_ATTR: return op->out_dtype[k];
    case SK_OPD_MASK: if (k == 1) return SK_U8; break;
    case SK_OPD_PASS: return g->tensors[op->inputs[k]].dtype;
    case SK_OPD_INPUT0: break;
  }
  return op->ninputs ? g->tensors[op->inputs[0]].dtype : SK_F32;
}

/* The checks sk_op_plan_make cannot make: name, kind, arity, tensor ids, attribute ranges. */
static sk_result sk__graph_check_op(const sk_graph *g, const sk_graph_op *op, sk_error *err) {
  sk_result r;
  if ((r = sk__graph_check_name(g, "operator", op->name, err))) return r;
  for (int i = 0; i < g->nops; i++)
    if (!strcmp(g->ops[i].name, op->name))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s': an operator of that name exists", op->name);
  if ((unsigned)op->desc.kind >= SK_OP_KIND_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s' has an unknown kind %d", op->name,
                    (int)op->desc.kind);
  const char *kn = sk_op_kind_name(op->desc.kind);
  const sk_op_row *row = sk_op_row_of(op->desc.kind);
  int lo = row->min_inputs, hi = row->max_inputs; /* OneHot: the indices only */
  bool arity_ok = op->ninputs >= lo && op->ninputs <= hi;
  if (!arity_ok && lo == hi)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s' (%s) reads %d tensors (%d expected)",
                    op->name, kn, op->ninputs, lo);
  if (!arity_ok)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s' (%s) reads %d tensors (%d..%d expected)",
                    op->name, kn, op->ninputs, lo, hi);
  for (int k = 0; k < op->ninputs; k++)
    if (op->inputs[k] < 0 || op->inputs[k] >= g->ntensors)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s' input %d: no tensor %d", op->name, k,
                      op->inputs[k]);
  if (op->keep_prob < 0 || op->keep_prob > 1 || op->epsilon < 0 || !isfinite(op->epsilon) ||
      !isfinite(op->on_value) || !isfinite(op->off_value))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "graph: operator '%s': keep_prob must be in (0, 1], epsilon >= 0, on/off values finite", op->name);
  for (int k = 0; k < SK_OP_MAX_OUTPUTS; k++)
    if (!sk_dtype_valid(op->out_dtype[k]))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s' output %d has a bad dtype", op->name, k);
  if (op->fusion < SK_GRAPH_FUSION_NEVER || op->stage < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "graph: operator '%s': the fusion id must be >= 0 or SK_GRAPH_FUSION_NEVER, the stage >= 0", op->name);
  return SK_OK;
}

/* Output k's name: "<op>" for the first, "<op>:<k>" for the others. */
static sk_result sk__graph_out_name(const sk_graph *g, const sk_graph_op *op, int k, char *name, sk_error *err) {
  int n = k ? snprintf(name, SK_GRAPH_NAME_MAX, "%s:%d", op->name, k) : snprintf(name, SK_GRAPH_NAME_MAX, "%s", op->name);
  if (n < 0 || n >= SK_GRAPH_NAME_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: operator '%s': output name too long", op->name);
  return sk__graph_check_name(g, "operator output", name, err);
}

SK_API sk_result sk_graph_add_op(sk_graph *g, const sk_graph_op *op, int *index, sk_error *err) {
  sk_result r;
  if (!g || !op) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: NULL graph or operator");
  if ((r = sk__graph_check_op(g, op, err))) return r;
  if ((r = sk__graph_reserve(g, SK_OP_MAX_OUTPUTS, err))) return r;
  sk_graph_op *o = &g->ops[g->nops];
  *o = *op;
  g->nops++; /* provisionally, so that sk_graph_op_desc sees it; undone on failure */
  sk_op_desc d;
  sk_op_plan p;
  sk_error e;
  if ((r = sk_graph_op_desc(g, g->nops - 1, &d, err))) return g->nops--, r;
  d.has_strategy = d.has_out_strategy = d.has_layouts = false, d.nstrategies = d.nout_layouts = 0; /* shapes only */
  memset(d.strategy_len, 0, sizeof d.strategy_len);
  if ((r = sk_op_plan_make(&d, 1, &p, &e))) {
    g->nops--;
    return sk__fail(err, r, "graph: operator '%s': %s", op->name, e.msg);
  }
  char names[SK_OP_MAX_OUTPUTS][SK_GRAPH_NAME_MAX];
  for (int k = 0; k < p.noutputs; k++)
    if ((r = sk__graph_out_name(g, op, k, names[k], err))) return g->nops--, r;
  /* Outputs obey the inputs' limit too: a MatMul of [2^40, 1] by [1, 2^40] must not make a
     tensor whose element count overflows. */
  for (int k = 0; k < p.noutputs; k++)
    if ((r = sk__graph_check_shape(names[k], p.out[k].ndims, p.out[k].shape, err))) return g->nops--, r;
  o->desc.ninputs = op->ninputs; /* the inputs' shapes, as sk_graph_op promises (OneHot: the indices') */
  memcpy(o->desc.ndims, d.ndims, sizeof d.ndims);
  memcpy(o->desc.shape, d.shape, sizeof d.shape);
  o->noutputs = p.noutputs;
  for (int k = 0; k < p.noutputs; k++) {
    sk_graph_tensor *t = &g->tensors[g->ntensors];
    memset(t, 0, sizeof *t);
    memcpy(t->name, names[k], sizeof names[k]);
    t->role = SK_TENSOR_VALUE, t->dtype = sk__graph_out_dtype(g, o, k), t->producer = g->nops - 1;
    t->output_index = k, t->ndims = p.out[k].ndims;
    memcpy(t->shape, p.out[k].shape, sizeof t->shape);
    o->outputs[k] = g->ntensors++;
  }
  if (index) *index = g->nops - 1;
  return SK_OK;
}

static bool sk__graph_float(sk_dtype dt) { return dt == SK_F32 || dt == SK_F64 || dt == SK_F16 || dt == SK_BF16; }

SK_API sk_result sk_graph_set_loss(sk_graph *g, int t, sk_error *err) {
  if (!g || t < 0 || t >= g->ntensors) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: loss: no tensor %d", t);
  if (!sk__graph_float(g->tensors[t].dtype) || sk_graph_numel(g, t) != 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: loss '%s' must be a one-element float tensor",
                    g->tensors[t].name);
  g->loss = t;
  return SK_OK;
}

SK_API sk_result sk_graph_set_eval(sk_graph *g, int logits, int labels, sk_error *err) {
  if (!g || logits < 0 || logits >= g->ntensors || labels < 0 || labels >= g->ntensors)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: evaluation: no tensor %d or %d", logits, labels);
  const sk_graph_tensor *z = &g->tensors[logits], *y = &g->tensors[labels];
  bool ok = sk__graph_float(z->dtype) && z->ndims >= 1 && (y->dtype == SK_I32 || y->dtype == SK_I64) &&
            y->role == SK_TENSOR_INPUT && y->ndims == z->ndims - 1;
  for (int d = 0; ok && d < y->ndims; d++) ok = y->shape[d] == z->shape[d];
  if (!ok)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "graph: evaluation: '%s' must be float logits [..., C] and '%s' an integer input of their shape "
                    "without the last dim",
                    z->name, y->name);
  g->logits = logits, g->labels = labels;
  return SK_OK;
}

SK_API sk_result sk_graph_check(const sk_graph *g, sk_error *err) {
  if (!g) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: NULL graph");
  if (g->loss < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: no loss is set");
  if (!g->nops) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: no operators");
  return SK_OK;
}

/* ---- data sources ---------------------------------------------------------------------------- */

/* random_int's bounds: whole numbers within 2^53 (exact as doubles), inside an integer input's
   dtype ([lo, hi) holds at most its largest value). */
static sk_result sk__graph_int_bounds(const sk_graph_tensor *t, double lo, double hi, sk_error *err) {
  const double exact = 9007199254740992.0; /* 2^53 */
  if (lo != floor(lo) || hi != floor(hi) || fabs(lo) > exact || fabs(hi) > exact)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': random_int takes whole numbers within 2^53", t->name);
  double min = 0, max = 0;
  switch (t->dtype) {
    case SK_I8: min = -128, max = 127; break;
    case SK_U8: min = 0, max = 255; break;
    case SK_I32: min = -2147483648.0, max = 2147483647.0; break;
    default: return SK_OK; /* i64 and the floats hold every value within 2^53 */
  }
  if (lo < min || hi - 1 > max)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': random_int [%.17g, %.17g) does not fit %s", t->name,
                    lo, hi, sk_dtype_name(t->dtype));
  return SK_OK;
}

static sk_result sk__graph_check_source(const sk_graph_tensor *t, const sk_data_source *s, sk_error *err) {
  const char *kn = sk_data_kind_name(s->kind);
  if (s->kind == SK_DATA_NPY) {
    const char *end = (const char *)memchr(s->path, 0, sizeof s->path);
    size_t n = end ? (size_t)(end - s->path) : sizeof s->path;
    if (!n || !end)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': the .npy path is empty or has %d characters or more",
                      t->name, SK_DATA_PATH_MAX);
    for (size_t i = 0; i < n; i++)
      if ((unsigned char)s->path[i] < 0x20 || s->path[i] == 0x7f)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': the .npy path has a control character", t->name);
    return SK_OK;
  }
  if (!isfinite(s->a) || !isfinite(s->b))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': %s's numbers must be finite", t->name, kn);
  if (s->kind != SK_DATA_RANDOM_INT && !sk__graph_float(t->dtype))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': %s draws floats, the input is %s (random_int "
                    "draws integers)", t->name, kn, sk_dtype_name(t->dtype));
  if (s->kind == SK_DATA_RANDOM_NORMAL && s->b < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': random_normal's std %.17g is negative", t->name, s->b);
  if (s->kind != SK_DATA_RANDOM_NORMAL && s->a >= s->b)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': %s's lo %.17g is not below hi %.17g", t->name, kn,
                    s->a, s->b);
  return s->kind == SK_DATA_RANDOM_INT ? sk__graph_int_bounds(t, s->a, s->b, err) : SK_OK;
}

SK_API sk_result sk_graph_set_data(sk_graph *g, int t, const sk_data_source *src, sk_error *err) {
  if (!g || !src || t < 0 || t >= g->ntensors)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data: NULL graph or source, or no tensor %d", t);
  sk_graph_tensor *x = &g->tensors[t];
  if (x->role != SK_TENSOR_INPUT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': it is %s, not an input", x->name,
                    x->role == SK_TENSOR_PARAM ? "a parameter" : "an operator's output");
  if ((unsigned)src->kind >= SK_DATA_KIND_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data for '%s': unknown source kind %d", x->name, (int)src->kind);
  sk_result r = src->kind == SK_DATA_NONE ? SK_OK : sk__graph_check_source(x, src, err);
  if (r) return r;
  memset(&x->data, 0, sizeof x->data);
  x->data.kind = src->kind;
  if (src->kind == SK_DATA_NPY) memcpy(x->data.path, src->path, strlen(src->path) + 1);
  else if (src->kind != SK_DATA_NONE) x->data.a = src->a, x->data.b = src->b;
  return SK_OK;
}

SK_API sk_result sk_graph_data_path(const sk_graph *g, int t, char *out, size_t cap, sk_error *err) {
  if (!g || !out || t < 0 || t >= g->ntensors || g->tensors[t].data.kind != SK_DATA_NPY)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data path: NULL graph or buffer, or tensor %d has no .npy source", t);
  const char *p = g->tensors[t].data.path, *dir = p[0] == '/' ? "" : g->data_dir;
  const char *end = (const char *)memchr(dir, 0, SK_GRAPH_DIR_MAX);
  size_t nd = end ? (size_t)(end - dir) : 0;
  bool slash = nd && dir[nd - 1] != '/';
  int n = snprintf(out, cap, "%.*s%s%s", (int)nd, dir, slash ? "/" : "", p);
  if (n < 0 || (size_t)n >= cap)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: data path of '%s': longer than %zu characters", g->tensors[t].name, cap - 1);
  return SK_OK;
}

/* ---- initialisers ---------------------------------------------------------------------------- */

static double sk__graph_uniform(uint64_t *s) { /* xorshift64*, in [0, 1) */
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static void sk__graph_fans(const sk_graph_tensor *t, double *fan_in, double *fan_out) {
  if (t->ndims < 2) {
    *fan_in = *fan_out = t->ndims ? (double)t->shape[0] : 1.0;
    return;
  }
  double rf = 1;
  for (int d = 2; d < t->ndims; d++) rf *= (double)t->shape[d];
  *fan_in = (double)t->shape[1] * rf, *fan_out = (double)t->shape[0] * rf;
}

/* One element of t's initialiser; the bound of the uniform kinds is computed by the caller. */
static double sk__graph_draw(sk_init_kind k, double value, double bound, uint64_t *s) {
  switch (k) {
    case SK_INIT_ZEROS: return 0;
    case SK_INIT_ONES: return 1;
    case SK_INIT_CONSTANT: return value;
    case SK_INIT_NORMAL: {
      double u1 = sk__graph_uniform(s), u2 = sk__graph_uniform(s);
      return (value ? value : 0.01) * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
    }
    default: return (2 * sk__graph_uniform(s) - 1) * bound;
  }
}

static double sk__graph_bound(const sk_graph_tensor *t) {
  double fi, fo, a = t->init.value;
  sk__graph_fans(t, &fi, &fo);
  switch (t->init.kind) {
    case SK_INIT_UNIFORM: return a ? a : 0.07;
    case SK_INIT_HE_UNIFORM: return sqrt(6.0 / ((1.0 + a * a) * fi));
    case SK_INIT_XAVIER_UNIFORM: return (a ? a : 1.0) * sqrt(6.0 / (fi + fo));
    default: return 0;
  }
}

SK_API sk_result sk_graph_init_params(const sk_graph *g, uint64_t seed, sk_dtype dt, void *const *values,
                                      sk_error *err) {
  if (!g || !values) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: init: NULL graph or values");
  if (dt != SK_F32 && dt != SK_F64)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: init: dtype must be f32 or f64, not %s", sk_dtype_name(dt));
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_PARAM && !values[t])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "graph: init: no buffer for parameter '%s'", g->tensors[t].name);
  uint64_t s = seed ? seed : 0x9E3779B97F4A7C15ull; /* xorshift stays at zero from zero */
  for (int t = 0; t < g->ntensors; t++) {
    const sk_graph_tensor *p = &g->tensors[t];
    if (p->role != SK_TENSOR_PARAM) continue;
    double bound = sk__graph_bound(p);
    int64_t n = sk_graph_numel(g, t);
    for (int64_t i = 0; i < n; i++) {
      double v = sk__graph_draw(p->init.kind, p->init.value, bound, &s);
      if (dt == SK_F64) ((double *)values[t])[i] = v;
      else ((float *)values[t])[i] = (float)v;
    }
  }
  return SK_OK;
}

#endif /* SK_GRAPH_IMPL */
