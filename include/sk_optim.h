/* sk_optim.h -- the optimizers a network trains with (MindSpore's nn.SGD, nn.Momentum, nn.Adam), as
   pure element-wise updates of one contiguous buffer.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_OPTIM_IMPL)   #include "sk_optim.h"
   Needs only libc and libm (link -lm). No global state, no environment variables.

   WHAT IT IS
     sk_optim_update applies one training step of one optimizer to n elements: the parameter,
     its gradient and the optimizer's state tensors (0, 1 or 2 of them, sk_optim_nstates), all
     contiguous and of one dtype. Element i's new values depend only on element i's old values
     and on the call's scalars (the hyper-parameters and the step), so an optimizer-sharding layer
     can update any slice of a parameter -- the slice's elements and the same step -- and get
     exactly the bits the unsharded update gives them.
     The math is MindSpore's, operation by operation (docs/optimizers.md lists it):
       SGD       the SGD kernel: weight decay inside it; momentum 0 is plain SGD (no state, and
                 dampening then has no effect); with momentum > 0 the first step copies the
                 gradient into the accumulation (MindSpore's `stat` tensor of ones is `step == 1`
                 here), later steps apply dampening; nesterov needs momentum > 0, dampening 0.
       Momentum  weight decay added to the gradient first (the optimizer's decay_weight), then
                 ApplyMomentum: accum = momentum * accum + grad, param -= lr * accum; nesterov:
                 param -= grad * lr + accum * momentum * lr.
       Adam      weight decay added first, then the Adam kernel in its incremental form
                 m += (g - m)(1 - beta1), v += (g^2 - v)(1 - beta2) and
                 param -= lr_t m / (sqrt(v) + eps), lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t);
                 use_nesterov replaces m in the numerator by beta1 m + (1 - beta1) g.
     Weight decay is added only when it is > 0, as MindSpore does; MindSpore applies it by default
     to the parameters without "beta" or "gamma" in their names: pass 0 for the others.

   DTYPES
     SK_F32 or SK_F64 for the parameter, the gradient and the states alike. f32 data is computed
     as MindSpore's f32 kernels do: the hyper-parameters are first rounded to f32 (MindSpore keeps
     them in f32 tensors) and every operation's result is rounded to f32 (no fused multiply-add:
     the implementation turns contraction off for itself, which only Clang's -ffp-contract=fast
     overrides). Adam's beta1^t and beta2^t are MindSpore's beta1_power / beta2_power
     parameters: 1 multiplied by beta once per step in f32 (a loop of min(step, the step where
     the power stops changing) products per call). f64 data is computed in double throughout,
     beta^t by pow(). Any other dtype is SK_ERR_INVALID_ARGUMENT naming it.

   STATE
     The caller owns the state tensors, each n elements of the data's dtype, zeroed before the
     first step (MindSpore's init='zeros'). SGD with momentum > 0 and Momentum: state0 is the
     accumulation; Adam: state0 is m (moment1), state1 is v (moment2). A state the optimizer does
     not use may be NULL and is never touched. Buffers must not overlap.

   ERRORS
     Bad input -- a NULL desc or buffer that is needed, an unknown kind or dtype, step < 1, a
     negative (or NaN) lr, weight_decay, momentum or dampening, nesterov on SGD without
     momentum > 0 and dampening 0, beta1 or beta2 outside (0, 1) (after rounding, for f32), eps
     not > 0 -- returns SK_ERR_INVALID_ARGUMENT with a message naming the optimizer and the
     argument ("sk_optim_update (adam): beta1 1.5 is outside (0, 1)"); nothing is written then.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_OPTIM_IMPL)
#define SK_OPTIM_IMPL
#endif
#ifndef SK_OPTIM_H
#define SK_OPTIM_H

#include "sk_core.h"

SK_EXTERN_C_BEGIN

typedef enum sk_optim_kind {
  SK_OPTIM_SGD = 0,  /* nn.SGD (the zero value) */
  SK_OPTIM_MOMENTUM, /* nn.Momentum (ApplyMomentum) */
  SK_OPTIM_ADAM,     /* nn.Adam */
  SK_OPTIM_KIND_COUNT
} sk_optim_kind;

/* The defaults a zero field takes. MindSpore's own, except where it has none (marked): there
   shardkit takes the value MindSpore's examples use. */
#define SK_OPTIM_SGD_LR 0.1         /* nn.SGD learning_rate */
#define SK_OPTIM_MOMENTUM_LR 0.1    /* nn.Momentum requires learning_rate: shardkit's choice */
#define SK_OPTIM_MOMENTUM_VALUE 0.9 /* nn.Momentum requires momentum: shardkit's choice */
#define SK_OPTIM_ADAM_LR 1e-3       /* nn.Adam learning_rate */
#define SK_OPTIM_ADAM_BETA1 0.9
#define SK_OPTIM_ADAM_BETA2 0.999
#define SK_OPTIM_ADAM_EPS 1e-8

/* One optimizer's hyper-parameters, named as MindSpore's arguments. Zero-initialise it: a zero
   field means MindSpore's default (fields another kind uses are ignored).
     kind          SK_OPTIM_SGD (zero), SK_OPTIM_MOMENTUM, SK_OPTIM_ADAM
     lr            learning_rate, >= 0. 0: 0.1 for SGD and Momentum, 1e-3 for Adam
     momentum      SGD: momentum, 0 = plain SGD (the default); Momentum: momentum, 0 means 0.9
                   (for momentum 0 take SGD, whose update is then the same). >= 0
     dampening     SGD only, >= 0; default 0
     weight_decay  every kind, >= 0; default 0 (the L2 penalty weight_decay * param is added to
                   the gradient)
     nesterov      SGD: nesterov; Momentum and Adam: use_nesterov. Default false
     beta1, beta2  Adam, in (0, 1); 0: 0.9 and 0.999
     eps           Adam, > 0; 0: 1e-8
   A constant learning rate per call: a schedule passes each step's lr. */
typedef struct sk_optim_desc {
  sk_optim_kind kind;
  double lr;
  double momentum;
  double dampening;
  double weight_decay;
  bool nesterov;
  double beta1, beta2, eps;
} sk_optim_desc;

/* "sgd", "momentum", "adam"; "invalid" for anything else. */
SK_API const char *sk_optim_kind_name(sk_optim_kind kind);
/* Parses those names; false (and *kind untouched) for an unknown name or a NULL argument. */
SK_API bool sk_optim_kind_from_name(const char *name, sk_optim_kind *kind);

/* *out = *d with every zero field replaced by its default, after checking the hyper-parameters
   as sk_optim_update does (everything but the dtype, the step and the buffers). out may be d. */
SK_API sk_result sk_optim_resolve(const sk_optim_desc *d, sk_optim_desc *out, sk_error *err);

/* How many state tensors the optimizer keeps: SGD 0 (1 with momentum > 0), Momentum 1, Adam 2.
   -1 for a NULL desc or an unknown kind. */
SK_API int sk_optim_nstates(const sk_optim_desc *d);

/* One step (step counts from 1: Adam's bias correction and SGD's first step read it) over n
   elements: param updated in place from grad, state0 / state1 updated as STATE above says.
   dt: SK_F32 or SK_F64, for every buffer. n 0 is a valid empty update. */
SK_API sk_result sk_optim_update(const sk_optim_desc *d, sk_dtype dt, int64_t step, size_t n, void *param,
                                 const void *grad, void *state0, void *state1, sk_error *err);

SK_EXTERN_C_END

#endif /* SK_OPTIM_H */

/* ==== implementation ======================================================================== */
#if defined(SK_OPTIM_IMPL) && !defined(SK_OPTIM_IMPL_DONE)
#define SK_OPTIM_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <math.h>

SK_EXTERN_C_BEGIN

SK_API const char *sk_optim_kind_name(sk_optim_kind kind) {
  static const char *const names[] = {"sgd", "momentum", "adam"};
  return (int)kind >= 0 && (int)kind < (int)SK_OPTIM_KIND_COUNT ? names[kind] : "invalid";
}

SK_API bool sk_optim_kind_from_name(const char *name, sk_optim_kind *kind) {
  if (!name || !kind) return false;
  for (int i = 0; i < (int)SK_OPTIM_KIND_COUNT; i++)
    if (sk__streq(name, sk_optim_kind_name((sk_optim_kind)i))) {
      *kind = (sk_optim_kind)i;
      return true;
    }
  return false;
}

/* ---- hyper-parameters ------------------------------------------------------------------------ */

/* Each check states what passes, so that a NaN fails it. */
static sk_result sk__optim_nonneg(sk_error *err, const char *fn, const char *kn, const char *what, double v) {
  if (v >= 0) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s (%s): %s %g is negative (must be >= 0)", fn, kn, what, v);
}

static sk_result sk__optim_beta(sk_error *err, const char *fn, const char *kn, const char *what, double v) {
  if (v > 0 && v < 1) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s (%s): %s %.9g is outside (0, 1)", fn, kn, what, v);
}

/* The checks of every kind's hyper-parameters, on the resolved values. */
static sk_result sk__optim_check(const char *fn, const sk_optim_desc *r, sk_error *err) {
  const char *kn = sk_optim_kind_name(r->kind);
  sk_result e;
  if ((e = sk__optim_nonneg(err, fn, kn, "lr", r->lr)) ||
      (e = sk__optim_nonneg(err, fn, kn, "weight_decay", r->weight_decay)))
    return e;
  if (r->kind == SK_OPTIM_SGD || r->kind == SK_OPTIM_MOMENTUM)
    if ((e = sk__optim_nonneg(err, fn, kn, "momentum", r->momentum))) return e;
  if (r->kind == SK_OPTIM_SGD) {
    if ((e = sk__optim_nonneg(err, fn, kn, "dampening", r->dampening))) return e;
    /* nn.SGD refuses this pair: without momentum there is nothing to look ahead with */
    if (r->nesterov && (r->momentum <= 0 || r->dampening != 0))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "%s (%s): nesterov needs momentum > 0 and dampening 0 (momentum %g, dampening %g)", fn, kn,
                      r->momentum, r->dampening);
  }
  if (r->kind == SK_OPTIM_ADAM) {
    if ((e = sk__optim_beta(err, fn, kn, "beta1", r->beta1)) || (e = sk__optim_beta(err, fn, kn, "beta2", r->beta2)))
      return e;
    if (!(r->eps > 0))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s (%s): eps %g is not > 0", fn, kn, r->eps);
  }
  return SK_OK;
}

/* Resolves the zero fields and checks the result; fn names the public call in messages. */
static sk_result sk__optim_resolve(const char *fn, const sk_optim_desc *d, sk_optim_desc *out, sk_error *err) {
  if (!d) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
  if ((int)d->kind < 0 || (int)d->kind >= (int)SK_OPTIM_KIND_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: kind %d is not an optimizer (sgd, momentum, adam)", fn,
                    (int)d->kind);
  sk_optim_desc r = *d;
  if (r.kind == SK_OPTIM_SGD) r.lr = SK__DEF(r.lr, SK_OPTIM_SGD_LR);
  if (r.kind == SK_OPTIM_MOMENTUM) {
    r.lr = SK__DEF(r.lr, SK_OPTIM_MOMENTUM_LR);
    r.momentum = SK__DEF(r.momentum, SK_OPTIM_MOMENTUM_VALUE);
  }
  if (r.kind == SK_OPTIM_ADAM) {
    r.lr = SK__DEF(r.lr, SK_OPTIM_ADAM_LR);
    r.beta1 = SK__DEF(r.beta1, SK_OPTIM_ADAM_BETA1);
    r.beta2 = SK__DEF(r.beta2, SK_OPTIM_ADAM_BETA2);
    r.eps = SK__DEF(r.eps, SK_OPTIM_ADAM_EPS);
  }
  sk_result e = sk__optim_check(fn, &r, err);
  if (e == SK_OK && out) *out = r;
  return e;
}

SK_API sk_result sk_optim_resolve(const sk_optim_desc *d, sk_optim_desc *out, sk_error *err) {
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_optim_resolve: out is NULL");
  return sk__optim_resolve("sk_optim_resolve", d, out, err);
}

SK_API int sk_optim_nstates(const sk_optim_desc *d) {
  if (!d || (int)d->kind < 0 || (int)d->kind >= (int)SK_OPTIM_KIND_COUNT) return -1;
  if (d->kind == SK_OPTIM_ADAM) return 2;
  if (d->kind == SK_OPTIM_MOMENTUM) return 1;
  return d->momentum > 0 ? 1 : 0; /* SGD's default momentum is 0: no accumulation */
}

/* ---- the typed updates --------------------------------------------------------------------- */

/* Each update is written once over a type T and instantiated for float and double, so that f32
   data runs in f32 arithmetic: every operation's result is cast to T, and a cast rounds (it drops
   any excess precision, C11 6.3.1.8), whatever FLT_EVAL_METHOD is. The hyper-parameters are cast
   to T first, as MindSpore's f32 tensors hold them. Two copies rather than one that picks its
   rounding from a run-time flag: GCC 12.2 at -O2 dropped the f32 casts of such a copy once it
   was inlined (a beta that rounds to 1 in f32 passed the check), so below this point no code
   asks which dtype it runs on.
   A fused multiply-add rounds once where MindSpore's f32 kernels round twice, so contraction is
   turned off for these functions: GCC contracts by default outside its ISO C modes (C++, gnu11)
   and Clang within an expression whenever the target has FMA. Clang's -ffp-contract=fast
   overrides the pragma; such a build keeps the sharding identity but not MindSpore's bits.
   F32 (1 or 0) selects how Adam's beta^step is formed: in f32, MindSpore's beta_power parameter,
   multiplied by beta once per step (a power that a product no longer changes -- 0, or a
   subnormal beta cannot shrink -- stays there, so the loop stops at it); in f64, pow(). */
#ifdef __cplusplus
#define SK__OPTIM_RESTRICT __restrict
#else
#define SK__OPTIM_RESTRICT restrict
#endif
#if defined(__clang__)
#define SK__OPTIM_NO_FMA _Pragma("clang fp contract(off)")
#else
#define SK__OPTIM_NO_FMA
#endif
#define SK__OPTIM_TYPED(SUF, T, F32)                                                                                 \
  typedef struct sk__optim_hp_##SUF {                                                                                \
    bool nesterov, first; /* first: step 1, SGD's stat */                                                            \
    T lr, mom, wd, one_minus_damp, b1, one_minus_b1, one_minus_b2, eps, lr_t;                                        \
  } sk__optim_hp_##SUF;                                                                                              \
                                                                                                                     \
  static T sk__optim_power_##SUF(T beta, int64_t step) {                                                             \
    if (!(F32)) return (T)pow((double)beta, (double)step);                                                           \
    T p = 1;                                                                                                         \
    for (int64_t t = 0; t < step; t++) {                                                                             \
      T q = (T)(p * beta);                                                                                           \
      if (q == p) break;                                                                                             \
      p = q;                                                                                                         \
    }                                                                                                                \
    return p;                                                                                                        \
  }                                                                                                                  \
                                                                                                                     \
  /* The scalars of one call. A beta just below 1 can round to 1 in f32, where the bias correction                  \
     divides by zero, and a tiny eps to 0: refused here, where the dtype is known. */                               \
  static sk_result sk__optim_scalars_##SUF(const sk_optim_desc *r, int64_t step, sk__optim_hp_##SUF *h,            \
                                          sk_error *err) {                                                          \
    SK__OPTIM_NO_FMA                                                                                                 \
    const char *kn = sk_optim_kind_name(r->kind);                                                                    \
    sk_result e;                                                                                                     \
    memset(h, 0, sizeof *h);                                                                                         \
    h->nesterov = r->nesterov, h->first = step == 1;                                                                 \
    h->lr = (T)r->lr, h->mom = (T)r->momentum, h->wd = (T)r->weight_decay;                                           \
    h->one_minus_damp = (T)(1 - (T)r->dampening);                                                                    \
    if (r->kind != SK_OPTIM_ADAM) return SK_OK;                                                                      \
    T b2 = (T)r->beta2;                                                                                              \
    h->b1 = (T)r->beta1, h->eps = (T)r->eps;                                                                         \
    if ((e = sk__optim_beta(err, "sk_optim_update", kn, (F32) ? "beta1 (in f32)" : "beta1", (double)h->b1)) ||     \
        (e = sk__optim_beta(err, "sk_optim_update", kn, (F32) ? "beta2 (in f32)" : "beta2", (double)b2)))          \
      return e;                                                                                                      \
    if (!(h->eps > 0))                                                                                               \
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_optim_update (%s): eps %g is 0 in f32", kn, r->eps);        \
    h->one_minus_b1 = (T)(1 - h->b1), h->one_minus_b2 = (T)(1 - b2);                                                 \
    /* the Adam kernel's new_lr, left to right: lr * sqrt(1 - beta2^t) / (1 - beta1^t) */                           \
    T c2 = (T)sqrt((double)(T)(1 - sk__optim_power_##SUF(b2, step)));                                                \
    T c1 = (T)(1 - sk__optim_power_##SUF(h->b1, step));                                                              \
    h->lr_t = (T)((T)(h->lr * c2) / c1);                                                                             \
    return SK_OK;                                                                                                    \
  }                                                                                                                  \
                                                                                                                     \
  /* MindSpore's SGD kernel: the decay and the momentum branch inside it, in its operation order. */                 \
  static void sk__optim_sgd_##SUF(const sk__optim_hp_##SUF *h, size_t n, T *param, const T *grad, T *accum) {        \
    SK__OPTIM_NO_FMA                                                                                                 \
    for (size_t i = 0; i < n; i++) {                                                                                 \
      T p = param[i], g = grad[i];                                                                                   \
      if (h->wd > 0) g = (T)(g + (T)(p * h->wd));                                                                    \
      if (accum && h->mom > 0) { /* the kernel's test, on the f32 momentum for f32 data */                           \
        T a = h->first ? g : (T)((T)(accum[i] * h->mom) + (T)(h->one_minus_damp * g));                               \
        accum[i] = a;                                                                                                \
        g = h->nesterov ? (T)(g + (T)(a * h->mom)) : a;                                                              \
      }                                                                                                              \
      param[i] = (T)(p - (T)(h->lr * g));                                                                            \
    }                                                                                                                \
  }                                                                                                                  \
                                                                                                                     \
  /* SGD without weight decay or momentum, the tutorials' case: the same operations as above, in a    \
     loop with no branch and no aliasing, which the compiler can keep in registers and vectorize. */   \
  static void sk__optim_sgd_plain_##SUF(T lr, size_t n, T *SK__OPTIM_RESTRICT param,                               \
                                        const T *SK__OPTIM_RESTRICT grad) {                                         \
    SK__OPTIM_NO_FMA                                                                                                 \
    for (size_t i = 0; i < n; i++) param[i] = (T)(param[i] - (T)(lr * grad[i]));                                    \
  }                                                                                                                  \
                                                                                                                     \
  /* nn.Momentum: decay_weight (param * weight_decay + grad), then ApplyMomentum. */                                 \
  static void sk__optim_momentum_##SUF(const sk__optim_hp_##SUF *h, size_t n, T *param, const T *grad, T *accum) {   \
    SK__OPTIM_NO_FMA                                                                                                 \
    for (size_t i = 0; i < n; i++) {                                                                                 \
      T p = param[i], g = grad[i];                                                                                   \
      if (h->wd > 0) g = (T)((T)(p * h->wd) + g);                                                                    \
      T a = (T)((T)(h->mom * accum[i]) + g);                                                                         \
      T u = h->nesterov ? (T)((T)(g * h->lr) + (T)((T)(a * h->mom) * h->lr)) : (T)(h->lr * a);                       \
      accum[i] = a;                                                                                                  \
      param[i] = (T)(p - u);                                                                                         \
    }                                                                                                                \
  }                                                                                                                  \
                                                                                                                     \
  /* nn.Adam: decay_weight, then the Adam kernel's incremental moments and its update. */                            \
  static void sk__optim_adam_##SUF(const sk__optim_hp_##SUF *h, size_t n, T *param, const T *grad, T *mbuf,          \
                                   T *vbuf) {                                                                        \
    SK__OPTIM_NO_FMA                                                                                                 \
    for (size_t i = 0; i < n; i++) {                                                                                 \
      T p = param[i], g = grad[i], m = mbuf[i], v = vbuf[i];                                                         \
      if (h->wd > 0) g = (T)((T)(p * h->wd) + g);                                                                    \
      m = (T)(m + (T)((T)(g - m) * h->one_minus_b1));                                                                \
      v = (T)(v + (T)((T)((T)(g * g) - v) * h->one_minus_b2));                                                       \
      T num = h->nesterov ? (T)((T)(m * h->b1) + (T)(h->one_minus_b1 * g)) : m;                                      \
      T den = (T)((T)sqrt((double)v) + h->eps);                                                                      \
      mbuf[i] = m, vbuf[i] = v;                                                                                      \
      param[i] = (T)(p - (T)((T)(h->lr_t * num) / den));                                                             \
    }                                                                                                                \
  }                                                                                                                  \
                                                                                                                     \
  static sk_result sk__optim_run_##SUF(const sk_optim_desc *r, int64_t step, size_t n, T *param, const T *grad,     \
                                       T *state0, T *state1, sk_error *err) {                                       \
    sk__optim_hp_##SUF h;                                                                                            \
    sk_result e = sk__optim_scalars_##SUF(r, step, &h, err);                                                         \
    if (e) return e;                                                                                                 \
    bool plain = !(h.wd > 0) && !(sk_optim_nstates(r) && h.mom > 0);                                                 \
    if (r->kind == SK_OPTIM_SGD && plain && param != grad) sk__optim_sgd_plain_##SUF(h.lr, n, param, grad);          \
    else if (r->kind == SK_OPTIM_SGD) sk__optim_sgd_##SUF(&h, n, param, grad, sk_optim_nstates(r) ? state0 : NULL);  \
    if (r->kind == SK_OPTIM_MOMENTUM) sk__optim_momentum_##SUF(&h, n, param, grad, state0);                          \
    if (r->kind == SK_OPTIM_ADAM) sk__optim_adam_##SUF(&h, n, param, grad, state0, state1);                          \
    return SK_OK;                                                                                                    \
  }

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
SK__OPTIM_TYPED(f32, float, 1)
SK__OPTIM_TYPED(f64, double, 0)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#undef SK__OPTIM_TYPED
#undef SK__OPTIM_NO_FMA
#undef SK__OPTIM_RESTRICT

static sk_result sk__optim_buf(sk_error *err, const char *kn, const void *p, const char *what) {
  if (p) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_optim_update (%s): %s is NULL", kn, what);
}

SK_API sk_result sk_optim_update(const sk_optim_desc *d, sk_dtype dt, int64_t step, size_t n, void *param,
                                 const void *grad, void *state0, void *state1, sk_error *err) {
  static const char *fn = "sk_optim_update";
  sk_optim_desc r;
  sk_result e;
  if ((e = sk__optim_resolve(fn, d, &r, err))) return e;
  const char *kn = sk_optim_kind_name(r.kind);
  int ns = sk_optim_nstates(&r);
  if (dt != SK_F32 && dt != SK_F64)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s (%s): dtype %s is not supported (f32 or f64)", fn, kn,
                    sk_dtype_name(dt));
  if (step < 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s (%s): step %lld is not >= 1 (steps count from 1)", fn, kn,
                    (long long)step);
  if ((e = sk__optim_buf(err, kn, param, "param")) || (e = sk__optim_buf(err, kn, grad, "grad")) ||
      (ns >= 1 && (e = sk__optim_buf(err, kn, state0, r.kind == SK_OPTIM_ADAM ? "state0 (m)" : "state0 (accum)"))) ||
      (ns >= 2 && (e = sk__optim_buf(err, kn, state1, "state1 (v)"))))
    return e;
  if (dt == SK_F32)
    return sk__optim_run_f32(&r, step, n, (float *)param, (const float *)grad, (float *)state0, (float *)state1, err);
  return sk__optim_run_f64(&r, step, n, (double *)param, (const double *)grad, (double *)state0, (double *)state1,
                           err);
}

SK_EXTERN_C_END

#endif /* SK_OPTIM_IMPL */
