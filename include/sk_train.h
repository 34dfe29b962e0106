/* sk_train.h -- trains an sk_graph on one device: the reference every distributed run of the
   same network is checked against.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_TRAIN_IMPL + the modules it includes)
                             #include "sk_train.h"
   Needs only libc and libm.

   WHAT IT DOES
     sk_trainer_create allocates a buffer for every tensor of the graph (the whole tensor: one
     device), a gradient for every tensor that has one (sk_exec_grad_flow: every trainable
     parameter, and the float tensors between one and the loss), the optimizer's state of the
     trainable parameters, draws the initial parameters (sk_graph_init_params with the seed) and
     writes the constants; a frozen parameter (requires_grad false) keeps its values. A step:
     feed the inputs (sk_trainer_feed), sk_trainer_forward (the operators in graph order through
     sk_exec.h), sk_trainer_backward (in reverse order, the operators a gradient reaches; a
     tensor read by several operators sums their gradients in reverse graph order; a parameter
     no gradient reaches -- one only a metric or an auxiliary head reads -- has a zero gradient,
     written every step), sk_trainer_update (sk_optim.h on every trainable parameter, that one
     too: weight decay and momentum still move it); sk_trainer_step does the three. sk_trainer_evaluate runs the
     forward in inference mode (Dropout passes its input through, as MindSpore's cell in eval
     mode) and counts the rows whose argmax over the graph's logits equals the label.

   DTYPES
     A network trains in ONE float dtype, desc.dtype: f32 (the zero value) or f64 compute and
     store in that dtype; f16 and bf16 STORE in that format and compute in f32 (every float
     tensor and parameter is rounded to the storage format after it is written, the kernels
     accumulate in f32). Integer tensors (labels, indices) keep the graph's dtype. The learning
     rate is rounded to f32 first, as MindSpore holds learning_rate in a float32 Parameter.
     Cast therefore changes no value in training (every float tensor has the run's dtype).

   DROPOUT
     The mask of operator i at step s is drawn from sk_exec_dropout_seed(seed, i, s), a pure
     function a distributed runtime calls with the same arguments.

   ERRORS: bad input (NULL, an input fed from the wrong tensor or dtype) is
     SK_ERR_INVALID_ARGUMENT naming the tensor; a kernel's error names the operator;
     SK_ERR_OUT_OF_MEMORY when an allocation fails (nothing leaks). A failed step leaves the
     trainer usable for another feed and step.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_TRAIN_IMPL)
#define SK_TRAIN_IMPL
#endif
#ifndef SK_TRAIN_H
#define SK_TRAIN_H

#include "sk_core.h"
#include "sk_exec.h"
#include "sk_graph.h"
#include "sk_kernels.h"
#include "sk_optim.h"

SK_EXTERN_C_BEGIN

/* Zero-initialise; zero fields take the defaults below. */
typedef struct sk_train_desc {
  sk_dtype dtype;              /* the run's float dtype: f32 (zero), f64, f16, bf16 */
  sk_optim_desc optim;         /* zero: SGD with MindSpore's defaults */
  uint64_t seed;               /* initial parameters and dropout masks (zero: 1) */
  const sk_kernel_ctx *kernels; /* the GEMM hook (NULL: the built-in GEMM) */
  sk_allocator alloc;          /* every allocation: the trainer, its tables, its buffers (zero: the C library) */
  /* Per operator o and input k, a factor on the gradient that input contributes:
     grad_scales[o * SK_OP_MAX_INPUTS + k] (copied at create; NULL: every factor 1). With
     sk_parallel_grad_scales' values the trainer trains like a plan whose knobs rescale
     gradients (gradients_mean, no_loss_repeated_mean). */
  const double *grad_scales;
  /* sk_trainer_step as a micro-step: the gradients' mean over this many steps, the optimizer on
     the last (0 or 1: every step), as sk_autoparallel.grad_accumulation_step. */
  int grad_accumulation_step;
} sk_train_desc;

typedef struct sk_trainer sk_trainer;

SK_API sk_result sk_trainer_create(const sk_graph *g, const sk_train_desc *desc, sk_trainer **out, sk_error *err);
SK_API void sk_trainer_destroy(sk_trainer *t);
/* Copies n elements of dtype dt into input tensor `input` (n must be its element count; floats
   convert to the run's dtype, integers between i32 and i64). */
SK_API sk_result sk_trainer_feed(sk_trainer *t, int input, sk_dtype dt, const void *data, size_t n, sk_error *err);
SK_API sk_result sk_trainer_forward(sk_trainer *t, double *loss, sk_error *err);
SK_API sk_result sk_trainer_backward(sk_trainer *t, sk_error *err);
SK_API sk_result sk_trainer_update(sk_trainer *t, sk_error *err);
/* forward + backward + update; *loss (may be NULL) is the step's loss before the update. */
SK_API sk_result sk_trainer_step(sk_trainer *t, double *loss, sk_error *err);
/* Inference-mode forward over the fed inputs; *correct rows of *rows have argmax(logits) ==
   label. The graph needs sk_graph_set_eval. */
SK_API sk_result sk_trainer_evaluate(sk_trainer *t, int64_t *correct, int64_t *rows, sk_error *err);

/* A tensor's buffer (values) and gradient (NULL when none flows), in sk_trainer_dtype for float
   tensors, the graph's dtype otherwise. Valid until sk_trainer_destroy. */
SK_API void *sk_trainer_values(sk_trainer *t, int tensor);
SK_API void *sk_trainer_grad(sk_trainer *t, int tensor);
/* The dtype float tensors are computed in: f64 for an f64 run, f32 otherwise. */
SK_API sk_dtype sk_trainer_dtype(const sk_trainer *t);
/* Steps taken (updates applied). */
SK_API int64_t sk_trainer_steps(const sk_trainer *t);

SK_EXTERN_C_END
#endif /* SK_TRAIN_H */

#if defined(SK_TRAIN_IMPL) && !defined(SK_TRAIN_IMPL_DONE)
#define SK_TRAIN_IMPL_DONE
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sk_trainer {
  const sk_graph *g;
  sk_train_desc desc;
  sk_optim_desc optim; /* resolved, lr rounded to f32 */
  sk_dtype cdt;        /* compute dtype */
  sk_dtype store;      /* storage format of float tensors */
  int64_t step;
  void **values, **grads, **state0, **state1;
  bool *needs_grad, *written;
  void *scratch[SK_OP_MAX_INPUTS]; /* a second gradient of a tensor read twice */
  double *grad_scales;             /* desc.grad_scales copied, or NULL */
  sk_exec_arg *args;               /* per tensor, the view sk_exec takes */
  int accum;                       /* desc.grad_accumulation_step, at least 1 */
  void **acc;                      /* per parameter: its gradient summed over the micro-steps */
};


/* A tensor's buffer, zeroed, with a spare 64 bytes (never 0, a multiple of the alignment). */
static void *sk__tr_alloc(const sk_trainer *t, size_t bytes) {
  return sk__calloc(&t->desc.alloc, (bytes + 63) / 64 * 64 + 64, 64);
}

/* The trainer's tables: n zeroed items of `size` bytes from the desc's allocator. */
static void *sk__tr_table(const sk_trainer *t, size_t n, size_t size) { return sk__calloc(&t->desc.alloc, n * size, 0); }

static sk_dtype sk__tr_dtype(const sk_trainer *t, int i) {
  sk_dtype dt = t->g->tensors[i].dtype;
  return sk_exec_is_float(dt) ? t->cdt : dt;
}

static size_t sk__tr_bytes(const sk_trainer *t, int i) {
  return (size_t)sk_graph_numel(t->g, i) * sk_dtype_size(sk__tr_dtype(t, i));
}


static sk_result sk__tr_alloc_all(sk_trainer *t, sk_error *err) {
  const sk_graph *g = t->g;
  size_t n = (size_t)g->ntensors, most = 0;
  t->values = (void **)sk__tr_table(t, n, sizeof(void *)), t->grads = (void **)sk__tr_table(t, n, sizeof(void *));
  t->state0 = (void **)sk__tr_table(t, n, sizeof(void *)), t->state1 = (void **)sk__tr_table(t, n, sizeof(void *));
  t->needs_grad = (bool *)sk__tr_table(t, n, sizeof(bool)), t->written = (bool *)sk__tr_table(t, n, sizeof(bool));
  t->args = (sk_exec_arg *)sk__tr_table(t, n, sizeof(sk_exec_arg));
  t->acc = (void **)sk__tr_table(t, n, sizeof(void *));
  size_t nscales = (size_t)g->nops * SK_OP_MAX_INPUTS;
  if (t->desc.grad_scales && (t->grad_scales = (double *)sk__tr_table(t, nscales + 1, sizeof(double))))
    memcpy(t->grad_scales, t->desc.grad_scales, nscales * sizeof(double));
  if (!t->values || !t->grads || !t->state0 || !t->state1 || !t->needs_grad || !t->written || !t->args || !t->acc ||
      (t->desc.grad_scales && !t->grad_scales))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "trainer: out of memory");
  sk_exec_grad_flow(t->g, t->needs_grad);
  int nstates = sk_optim_nstates(&t->optim);
  for (int i = 0; i < g->ntensors; i++) {
    size_t b = sk__tr_bytes(t, i);
    bool trains = sk_graph_trainable(g, i); /* a frozen parameter has no gradient and no state */
    if (!(t->values[i] = sk__tr_alloc(t, b)) || (t->needs_grad[i] && !(t->grads[i] = sk__tr_alloc(t, b))) ||
        (trains && nstates > 0 && !(t->state0[i] = sk__tr_alloc(t, b))) ||
        (trains && nstates > 1 && !(t->state1[i] = sk__tr_alloc(t, b))) ||
        (trains && t->accum > 1 && t->needs_grad[i] && !(t->acc[i] = sk__tr_alloc(t, b))))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "trainer: out of memory for tensor '%s' (%zu bytes)",
                      g->tensors[i].name, b);
    if (t->needs_grad[i] && b > most) most = b;
    sk_exec_arg *a = &t->args[i];
    a->dtype = sk__tr_dtype(t, i), a->ndims = g->tensors[i].ndims, a->data = t->values[i];
    memcpy(a->shape, g->tensors[i].shape, sizeof a->shape);
  }
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++)
    if (!(t->scratch[k] = sk__tr_alloc(t, most))) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "trainer: out of memory");
  return SK_OK;
}

/* Rounds a float buffer of the run to its storage format (f16 / bf16 runs only). */
static void sk__tr_store(const sk_trainer *t, void *buf, int64_t n) { sk_exec_round(t->store, (float *)buf, n); }

static sk_result sk__tr_check_desc(const sk_train_desc *d, sk_error *err) {
  if (d->dtype != SK_F32 && d->dtype != SK_F64 && d->dtype != SK_F16 && d->dtype != SK_BF16)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: dtype must be f32, f64, f16 or bf16, not %s",
                    sk_dtype_name(d->dtype));
  if ((!d->alloc.alloc) != (!d->alloc.free))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: set both allocator functions or neither");
  if (d->grad_accumulation_step < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: grad_accumulation_step must be 1 or more, got %d",
                    d->grad_accumulation_step);
  return SK_OK;
}

SK_API sk_result sk_trainer_create(const sk_graph *g, const sk_train_desc *desc, sk_trainer **out, sk_error *err) {
  sk_result r;
  sk_train_desc zero;
  memset(&zero, 0, sizeof zero);
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: NULL output");
  *out = NULL;
  if (!desc) desc = &zero;
  if ((r = sk_graph_check(g, err)) || (r = sk__tr_check_desc(desc, err))) return r;
  sk_trainer *t = (sk_trainer *)sk__calloc(&desc->alloc, sizeof *t, 0);
  if (!t) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "trainer: out of memory");
  t->g = g, t->desc = *desc, t->store = desc->dtype;
  t->cdt = desc->dtype == SK_F64 ? SK_F64 : SK_F32;
  t->accum = desc->grad_accumulation_step > 1 ? desc->grad_accumulation_step : 1;
  if (!t->desc.seed) t->desc.seed = 1;
  if ((r = sk_optim_resolve(&desc->optim, &t->optim, err))) return sk__free(&desc->alloc, t), r;
  t->optim.lr = (double)(float)t->optim.lr;
  if ((r = sk__tr_alloc_all(t, err)) || (r = sk_graph_init_params(g, t->desc.seed, t->cdt, t->values, err))) {
    sk_trainer_destroy(t);
    return r;
  }
  for (int i = 0; i < g->ntensors; i++) {
    if (g->tensors[i].role == SK_TENSOR_CONST) /* a number operand: its value, in the run's dtype */
      (void)sk_exec_convert(SK_F64, &g->tensors[i].value, t->cdt, t->values[i], 1);
    if (g->tensors[i].role == SK_TENSOR_PARAM || g->tensors[i].role == SK_TENSOR_CONST)
      sk__tr_store(t, t->values[i], sk_graph_numel(g, i));
  }
  *out = t;
  return SK_OK;
}

SK_API void sk_trainer_destroy(sk_trainer *t) {
  if (!t) return;
  for (int i = 0; t->values && i < t->g->ntensors; i++) {
    sk__free(&t->desc.alloc, t->values[i]), sk__free(&t->desc.alloc, t->grads ? t->grads[i] : NULL);
    sk__free(&t->desc.alloc, t->state0 ? t->state0[i] : NULL), sk__free(&t->desc.alloc, t->state1 ? t->state1[i] : NULL);
    sk__free(&t->desc.alloc, t->acc ? t->acc[i] : NULL);
  }
  sk_allocator a = t->desc.alloc; /* outlives t */
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) sk__free(&a, t->scratch[k]);
  sk__free(&a, t->values), sk__free(&a, t->grads), sk__free(&a, t->state0), sk__free(&a, t->state1);
  sk__free(&a, t->needs_grad), sk__free(&a, t->written), sk__free(&a, t->args), sk__free(&a, t->grad_scales);
  sk__free(&a, t->acc), sk__free(&a, t);
}

/* Converts n values from src (dtype sdt) into dst (dtype ddt): floats to floats, integers to
   integers. */
static sk_result sk__tr_convert(sk_dtype sdt, const void *src, sk_dtype ddt, void *dst, size_t n, const char *name,
                                sk_error *err) {
  if (sk_exec_convert(sdt, src, ddt, dst, n)) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: feed '%s': cannot convert %s data into a %s tensor", name,
                  sk_dtype_name(sdt), sk_dtype_name(ddt));
}

SK_API sk_result sk_trainer_feed(sk_trainer *t, int input, sk_dtype dt, const void *data, size_t n, sk_error *err) {
  if (!t || !data) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: feed: NULL trainer or data");
  if (input < 0 || input >= t->g->ntensors || t->g->tensors[input].role != SK_TENSOR_INPUT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: feed: tensor %d is not an input", input);
  const sk_graph_tensor *x = &t->g->tensors[input];
  if ((int64_t)n != sk_graph_numel(t->g, input))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: feed '%s': %zu elements given, the tensor has %lld",
                    x->name, n, (long long)sk_graph_numel(t->g, input));
  sk_result r = sk__tr_convert(dt, data, sk__tr_dtype(t, input), t->values[input], n, x->name, err);
  if (!r && sk_exec_is_float(x->dtype)) sk__tr_store(t, t->values[input], (int64_t)n);
  return r;
}

static sk_result sk__tr_forward(sk_trainer *t, bool inference, sk_error *err) {
  const sk_graph *g = t->g;
  for (int o = 0; o < g->nops; o++) {
    const sk_graph_op *op = &g->ops[o];
    sk_exec_arg in[SK_OP_MAX_INPUTS], out[SK_OP_MAX_OUTPUTS];
    memset(in, 0, sizeof in), memset(out, 0, sizeof out); /* slots past the operator's arity are unread */
    for (int k = 0; k < op->ninputs; k++) in[k] = t->args[op->inputs[k]];
    for (int k = 0; k < op->noutputs; k++) out[k] = t->args[op->outputs[k]];
    sk_exec_facts f;
    memset(&f, 0, sizeof f);
    f.seed = sk_exec_dropout_seed(t->desc.seed, o, t->step), f.inference = inference;
    sk_result r = sk_exec_forward(t->desc.kernels, op, &f, in, out, err);
    if (r) return r;
    for (int k = 0; k < op->noutputs; k++)
      if (sk_exec_is_float(out[k].dtype) && sk_exec_is_float(g->tensors[op->outputs[k]].dtype))
        sk__tr_store(t, out[k].data, sk_graph_numel(g, op->outputs[k]));
  }
  return SK_OK;
}

static double sk__tr_get(sk_dtype dt, const void *p, int64_t i) {
  return dt == SK_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

SK_API sk_result sk_trainer_forward(sk_trainer *t, double *loss, sk_error *err) {
  if (!t) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: NULL trainer");
  sk_result r = sk__tr_forward(t, false, err);
  if (!r && loss) *loss = sk__tr_get(t->cdt, t->values[t->g->loss], 0);
  return r;
}

/* Where op's input k writes its gradient: straight into the tensor's gradient the first time
   one is written this step, else into scratch (*add: the caller sums it in). */
static void *sk__tr_dx(sk_trainer *t, const sk_graph_op *op, int k, bool *add) {
  int ti = op->inputs[k];
  *add = false;
  if (!t->needs_grad[ti] || !sk_exec_differentiable(op, k)) return NULL;
  bool again = t->written[ti];
  for (int j = 0; j < k; j++) again = again || (op->inputs[j] == ti && sk_exec_differentiable(op, j));
  if (!again) return t->grads[ti];
  *add = true;
  return t->scratch[k];
}

static void sk__tr_accumulate(sk_dtype dt, void *acc, const void *x, int64_t n) {
  if (dt == SK_F64)
    for (int64_t i = 0; i < n; i++) ((double *)acc)[i] += ((const double *)x)[i];
  else
    for (int64_t i = 0; i < n; i++) ((float *)acc)[i] += ((const float *)x)[i];
}

static void sk__tr_scale(sk_dtype dt, void *x, int64_t n, double s) {
  if (dt == SK_F64)
    for (int64_t i = 0; i < n; i++) ((double *)x)[i] *= s;
  else
    for (int64_t i = 0; i < n; i++) ((float *)x)[i] = (float)(((float *)x)[i] * s);
}

static sk_result sk__tr_backward_op(sk_trainer *t, int o, sk_error *err) {
  const sk_graph_op *op = &t->g->ops[o];
  sk_exec_arg in[SK_OP_MAX_INPUTS], out[SK_OP_MAX_OUTPUTS];
  memset(in, 0, sizeof in), memset(out, 0, sizeof out); /* slots past the operator's arity are unread */
  bool any = false;
  for (int k = 0; k < op->noutputs; k++) {
    out[k] = t->args[op->outputs[k]];
    out[k].grad = t->written[op->outputs[k]] ? t->grads[op->outputs[k]] : NULL;
    any = any || out[k].grad;
  }
  bool passthrough = (sk_op_row_of(op->desc.kind)->flags & SK_OPF_PASSTHROUGH) != 0; /* each output its own */
  if (!any || (!out[0].grad && !passthrough)) return SK_OK; /* nothing flows back */
  void *dx[SK_OP_MAX_INPUTS] = {NULL, NULL, NULL, NULL};
  bool add[SK_OP_MAX_INPUTS] = {false, false, false, false};
  for (int k = 0; k < op->ninputs; k++) in[k] = t->args[op->inputs[k]], dx[k] = sk__tr_dx(t, op, k, &add[k]);
  sk_exec_facts f;
  memset(&f, 0, sizeof f);
  f.seed = sk_exec_dropout_seed(t->desc.seed, o, t->step);
  sk_result r = sk_exec_backward(t->desc.kernels, op, &f, in, out, dx, err);
  if (r) return r;
  for (int k = 0; k < op->ninputs; k++) {
    int ti = op->inputs[k];
    if (!dx[k]) continue;
    double scale = t->grad_scales ? t->grad_scales[o * SK_OP_MAX_INPUTS + k] : 1;
    if (scale != 1) sk__tr_scale(t->cdt, dx[k], sk_graph_numel(t->g, ti), scale);
    if (add[k]) sk__tr_accumulate(t->cdt, t->grads[ti], dx[k], sk_graph_numel(t->g, ti));
    t->written[ti] = true;
  }
  return SK_OK;
}

SK_API sk_result sk_trainer_backward(sk_trainer *t, sk_error *err) {
  if (!t) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: NULL trainer");
  const sk_graph *g = t->g;
  memset(t->written, 0, sizeof(bool) * (size_t)g->ntensors);
  if (!t->needs_grad[g->loss]) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: no parameter reaches the loss");
  if (t->cdt == SK_F64) *(double *)t->grads[g->loss] = 1.0 / t->accum; /* the mean over micro-steps */
  else *(float *)t->grads[g->loss] = (float)(1.0 / t->accum);
  t->written[g->loss] = true;
  for (int o = g->nops - 1; o >= 0; o--) {
    sk_result r = sk__tr_backward_op(t, o, err);
    if (r) return r;
  }
  for (int i = 0; i < g->ntensors; i++) /* a parameter the loss does not reach has a zero gradient */
    if (sk_graph_trainable(g, i) && !t->written[i]) memset(t->grads[i], 0, sk__tr_bytes(t, i));
  return SK_OK;
}

/* The optimizer's update number `number` on every parameter. */
static sk_result sk__tr_apply(sk_trainer *t, int64_t number, sk_error *err) {
  for (int i = 0; i < t->g->ntensors; i++) {
    if (!sk_graph_trainable(t->g, i)) continue;
    int64_t n = sk_graph_numel(t->g, i);
    sk_result r = sk_optim_update(&t->optim, t->cdt, number, (size_t)n, t->values[i], t->grads[i], t->state0[i],
                                  t->state1[i], err);
    if (r) return r;
    sk__tr_store(t, t->values[i], n);
  }
  return SK_OK;
}

SK_API sk_result sk_trainer_update(sk_trainer *t, sk_error *err) {
  if (!t) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: NULL trainer");
  sk_result r = sk__tr_apply(t, t->step + 1, err);
  if (!r) t->step++;
  return r;
}

/* A micro-step under gradient accumulation: the gradients join their sums; on the last of
   t->accum steps the sums are the gradients the optimizer sees. */
static sk_result sk__tr_micro_update(sk_trainer *t, sk_error *err) {
  bool last = (t->step + 1) % t->accum == 0;
  for (int i = 0; i < t->g->ntensors; i++) {
    if (!t->acc[i]) continue;
    int64_t n = sk_graph_numel(t->g, i);
    if (!last) sk__tr_accumulate(t->cdt, t->acc[i], t->grads[i], n);
    else sk__tr_accumulate(t->cdt, t->grads[i], t->acc[i], n), memset(t->acc[i], 0, sk__tr_bytes(t, i));
  }
  sk_result r = last ? sk__tr_apply(t, (t->step + 1) / t->accum, err) : SK_OK;
  if (!r) t->step++;
  return r;
}

SK_API sk_result sk_trainer_step(sk_trainer *t, double *loss, sk_error *err) {
  sk_result r = sk_trainer_forward(t, loss, err);
  if (!r) r = sk_trainer_backward(t, err);
  if (!r) r = t->accum > 1 ? sk__tr_micro_update(t, err) : sk_trainer_update(t, err);
  return r;
}

SK_API sk_result sk_trainer_evaluate(sk_trainer *t, int64_t *correct, int64_t *rows, sk_error *err) {
  if (!t || !correct || !rows) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: evaluate: NULL argument");
  const sk_graph *g = t->g;
  if (g->logits < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trainer: evaluate: the graph has no logits set");
  sk_result r = sk__tr_forward(t, true, err);
  if (r) return r;
  const sk_graph_tensor *z = &g->tensors[g->logits];
  int64_t c = z->shape[z->ndims - 1], n = sk_graph_numel(g, g->logits) / c, good = 0;
  const void *lab = t->values[g->labels];
  for (int64_t i = 0; i < n; i++) {
    int64_t best = 0;
    for (int64_t j = 1; j < c; j++)
      if (sk__tr_get(t->cdt, t->values[g->logits], i * c + j) > sk__tr_get(t->cdt, t->values[g->logits], i * c + best))
        best = j;
    int64_t y = g->tensors[g->labels].dtype == SK_I64 ? ((const int64_t *)lab)[i] : ((const int32_t *)lab)[i];
    good += best == y;
  }
  *correct = good, *rows = n;
  return SK_OK;
}

SK_API void *sk_trainer_values(sk_trainer *t, int i) { return t && i >= 0 && i < t->g->ntensors ? t->values[i] : NULL; }
SK_API void *sk_trainer_grad(sk_trainer *t, int i) { return t && i >= 0 && i < t->g->ntensors ? t->grads[i] : NULL; }
SK_API sk_dtype sk_trainer_dtype(const sk_trainer *t) { return t ? t->cdt : SK_F32; }
SK_API int64_t sk_trainer_steps(const sk_trainer *t) { return t ? t->step : 0; }

#endif /* SK_TRAIN_IMPL */
