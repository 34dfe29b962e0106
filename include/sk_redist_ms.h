/* sk_redist_ms.h -- MindSpore's redistribution operator sequence, emulated for sk_redist.h.

   Nothing to do here for users: include "sk_redist.h" (or "shardkit.h") and set
   sk_redist_desc.mode to SK_REDIST_MINDSPORE or SK_REDIST_MINDSPORE_NO_ALLTOALL. This header
   holds how those modes plan; their public face -- the modes, sk_redist_ms_cost and
   sk_redist_plan_ms_cost() -- is declared in sk_redist.h with the rest of the API.

   WHAT IT DOES
     Plans a layout -> layout move the way MindSpore's TensorRedistribution does, and prices it
     with MindSpore's ComputeCost, so that minimal plans can be compared with what MindSpore
     runs. Steps, in order:
       1. Unify the two tensor maps: every tuple dim is expanded into one sub-dim per mesh axis,
          size-1 dims squeezed, and the two factorizations refined into one common shape on
          which each sub-dim carries at most one axis per side. When no such refinement exists
          (MindSpore would have to split a device axis) the plan takes MindSpore's fallback:
          source -> fully replicated -> target, each half on its own expansion.
       2. Infer the operators as RedistributionOperatorInfer does: SplitByAxis (StridedSlice),
          PermuteByAxis (AllToAll with enable_alltoall on; AllGather plus StridedSlice off),
          ConcatByAxis (AllGather), repeated until every dim is settled, with MindSpore's
          deadlock breaker (force a concat on the first unsettled dim).
       3. Price them with ComputeCost, in elements, its quirks included: Concat and Permute
          are also counted as a Split; a Reshape is added when a layout's own slice shape is
          not its slice of the unified shape (and always on the fallback).
     Each operator becomes one plan step, executed as a minimal exchange between the layouts
     before and after it (sk_redist.h's planner), so MindSpore-mode plans run on any backend.

   INCLUDE RELATIONSHIP
     sk_redist.h is the module; this header is a part of its implementation kept apart.
       - Declarations: this header includes sk_redist.h, so including it alone declares the
         whole redistribution API; it declares nothing else. sk_redist.h does not need it for
         declarations.
       - Implementation: the emulation is built on sk_redist.h's private (static) planner --
         the plan and step records, sk__rd_add_exchange -- and sk_redist.h's planner calls it,
         so both must land in the same translation unit, exactly once. sk_redist.h declares the
         three entry points (sk__ms_check_desc, sk__ms_plan, sk__ms_format_cost) and includes
         this header at the end of its implementation section, which emits the code below.
         SK_REDIST_IMPL and SK_REDIST_MS_IMPL therefore go together: SK_IMPL, or either one,
         emits both, whichever of the two headers is included first, and the _DONE guards keep
         a second inclusion from emitting anything again.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_REDIST_MS_IMPL)
#define SK_REDIST_MS_IMPL
#endif
/* the emulation cannot be built without the planner it extends: asking for it asks for both */
#if defined(SK_REDIST_MS_IMPL) && !defined(SK_REDIST_IMPL)
#define SK_REDIST_IMPL
#endif
#ifndef SK_REDIST_MS_H
#define SK_REDIST_MS_H
/* No declarations of its own: see sk_redist.h. */
#endif /* SK_REDIST_MS_H */

/* Outside the guard on purpose: included again after SK_IMPL was defined, sk_redist.h emits
   its implementation, and that emits the section below (from its end). */
#include "sk_redist.h"

/* ==== implementation ======================================================================== */
/* Reached from the end of sk_redist.h's implementation section, when its private planner is
   defined (SK_REDIST_IMPL_DONE); included any other way, sk_redist.h above has already done it. */
#if defined(SK_REDIST_MS_IMPL) && !defined(SK_REDIST_MS_IMPL_DONE) && defined(SK_REDIST_IMPL_DONE)
#define SK_REDIST_MS_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"

SK_EXTERN_C_BEGIN

/* Layout of this section:  >>check (what MindSpore mode accepts)  >>state (the inference
   state and one operator)  >>infer (RedistributionOperatorInfer)  >>unify (tensor maps on one
   shape)  >>plan  >>cost (the public accessor and the plan text's cost line) */

/* >>check -- called by sk__rd_check_desc after the checks every mode shares */
static sk_result sk__ms_check_desc(const sk_redist_desc *d, sk_error *err) {
  const sk_layout *f = &d->from, *t = &d->to;
  if (d->partial)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "MindSpore mode covers non-partial sources only (MindSpore sums partials in the operators)");
  bool same = f->mesh.naxes == t->mesh.naxes;
  for (int k = 0; same && k < f->mesh.naxes; k++) same = f->mesh.dims[k] == t->mesh.dims[k];
  if (!same) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore mode needs the same device matrix for both layouts");
  return SK_OK;
}

/* >>state -- RedistributionOperatorInfer on unified single-axis maps */
enum { SK__MS_SPLIT = 0, SK__MS_CONCAT = 1, SK__MS_PERMUTE = 2 };

typedef struct sk__ms_ctx {
  sk_redist_plan *p;
  sk_mesh mesh;
  int nd;
  int64_t shape[SK_MAX_DIMS];
  int cur[SK_MAX_DIMS], out[SK_MAX_DIMS]; /* mesh axis per unified dim, -1 unsplit */
  bool in_map[SK_MAX_DIMS];               /* MindSpore's map_ (dims still to settle) */
  bool alltoall;
  sk_layout cur_layout;
  sk_error *err;
} sk__ms_ctx;

static sk_result sk__ms_layout(const sk__ms_ctx *x, const int *map, sk_layout *l) {
  sk_dim_map dm[SK_MAX_DIMS];
  memset(dm, 0, sizeof dm);
  for (int d = 0; d < x->nd; d++)
    if (map[d] >= 0) dm[d].naxes = 1, dm[d].axes[0] = map[d];
  sk_error e;
  if (sk_layout_init(l, &x->mesh, x->nd, x->shape, dm, &e) != SK_OK)
    return sk__fail(x->err, SK_ERR_INTERNAL, "MindSpore mode: intermediate layout: %s", e.msg);
  return SK_OK;
}

static double sk__ms_slice(const sk__ms_ctx *x) {
  double s = 1;
  for (int d = 0; d < x->nd; d++) s *= (double)(x->cur[d] >= 0 ? x->shape[d] / x->mesh.dims[x->cur[d]] : x->shape[d]);
  return s;
}

/* MindSpore's ms value of a mesh axis (counted from the right). */
static int sk__ms_val(const sk__ms_ctx *x, int axis) { return x->mesh.naxes - 1 - axis; }

/* Applies one operator: cost, new state, one plan step. */
static sk_result sk__ms_op(sk__ms_ctx *x, int kind, int dim, int axis, int cat_dim) {
  double s = sk__ms_slice(x), n = x->mesh.dims[axis];
  sk_redist_ms_cost *c = &x->p->ms;
  char detail[SK__RD_DETAIL];
  const char *name;
  if (kind == SK__MS_SPLIT) {
    c->computation += s, c->memory += s;
    x->cur[dim] = axis;
    name = "StridedSlice";
    snprintf(detail, sizeof detail, "dim %d split %d ways by %s (%d)", dim, (int)n, x->mesh.names[axis],
             sk__ms_val(x, axis));
  } else if (kind == SK__MS_CONCAT) {
    c->forward_comm += 0.5 * s * n, c->backward_comm += 0.5 * s, c->comm += 0.5 * s * (n + 1);
    if (dim == 0)
      c->computation += s, c->memory += s * n;
    else
      c->computation += s + 2 * s * n, c->memory += 2 * s * n + s;
    c->computation += s, c->memory += s; /* MindSpore's if/else quirk: also counted as a Split */
    x->cur[dim] = -1;
    name = "AllGather";
    snprintf(detail, sizeof detail, "concat dim %d, group %s (%d), %d ranks", dim, x->mesh.names[axis],
             sk__ms_val(x, axis), (int)n);
  } else {
    c->forward_comm += 2 * s, c->backward_comm += 2 * s, c->comm += 4 * s;
    if (cat_dim == 0)
      c->computation += s, c->memory += s;
    else
      c->computation += s + 2 * s * n, c->memory += 2 * s * n + s;
    c->computation += s, c->memory += s; /* the same quirk */
    x->cur[dim] = axis;
    x->cur[cat_dim] = -1;
    name = "AllToAll";
    snprintf(detail, sizeof detail, "split_count %d, split_dim %d, concat_dim %d, group %s (%d)", (int)n, dim, cat_dim,
             x->mesh.names[axis], sk__ms_val(x, axis));
  }
  sk_layout next;
  sk_result r = sk__ms_layout(x, x->cur, &next);
  if (r) return r;
  r = sk__rd_add_exchange(x->p, &x->cur_layout, &next, name, detail, x->err);
  x->cur_layout = next;
  return r;
}

static bool sk__ms_any(const sk__ms_ctx *x, int axis) {
  for (int d = 0; d < x->nd; d++)
    if (x->in_map[d] && x->cur[d] == axis) return true;
  return false;
}


/* >>infer -- MindSpore's passes over map_ (the dims still to settle), one function each. A dim
   whose current axis already is its target's leaves map_ in every pass. */

static bool sk__ms_pending(const sk__ms_ctx *x) {
  for (int d = 0; d < x->nd; d++)
    if (x->in_map[d]) return true;
  return false;
}

/* SplitByAxis: an unsplit dim whose target axis is free (no unsettled dim holds it) is sliced. */
static sk_result sk__ms_split_pass(sk__ms_ctx *x) {
  sk_result r;
  for (int d = 0; d < x->nd; d++) {
    if (!x->in_map[d]) continue;
    int in = x->cur[d], o = x->out[d];
    if (in == o) {
      x->in_map[d] = false;
      continue;
    }
    if (in == -1 && !sk__ms_any(x, o)) {
      if ((r = sk__ms_op(x, SK__MS_SPLIT, d, o, -1))) return r;
      x->in_map[d] = false;
    }
  }
  return SK_OK;
}

/* PermuteByAxis, one pass: an unsplit dim whose target axis another dim holds takes it over --
   one AllToAll, or (enable_alltoall off) an AllGather of the holder then a StridedSlice. The
   holder loses its axis and goes back into map_. */
static sk_result sk__ms_permute_pass(sk__ms_ctx *x) {
  sk_result r;
  for (int d = 0; d < x->nd; d++) {
    if (!x->in_map[d]) continue;
    int in = x->cur[d], o = x->out[d];
    if (in == o) {
      x->in_map[d] = false;
      continue;
    }
    if (in == -1 && sk__ms_any(x, o)) {
      int cat = -1;
      for (int j = 0; j < x->nd; j++)
        if (x->cur[j] == o) cat = j;
      if (x->alltoall) {
        if ((r = sk__ms_op(x, SK__MS_PERMUTE, d, o, cat))) return r;
      } else {
        if ((r = sk__ms_op(x, SK__MS_CONCAT, cat, o, -1))) return r;
        if ((r = sk__ms_op(x, SK__MS_SPLIT, d, o, -1))) return r;
      }
      x->in_map[d] = false;
      x->in_map[cat] = true; /* map_[cat_dim] = NONE */
    }
  }
  return SK_OK;
}

/* Split, then Permute repeated while it adds operators; both again while the split and
   permutes added any (a permute returns a dim to map_, which the next split may settle). */
static sk_result sk__ms_split_permute(sk__ms_ctx *x) {
  sk_result r;
  for (;;) {
    int len_split = x->p->nsteps;
    if ((r = sk__ms_split_pass(x))) return r;
    int len_perm;
    do {
      len_perm = x->p->nsteps;
      if ((r = sk__ms_permute_pass(x))) return r;
    } while (len_perm != x->p->nsteps);
    if (len_split == x->p->nsteps) return SK_OK;
  }
}

/* ConcatByAxis: a split dim whose axis no target dim uses is gathered; it settles when its
   target is unsplit. */
static sk_result sk__ms_concat_pass(sk__ms_ctx *x) {
  sk_result r;
  for (int d = 0; d < x->nd; d++) {
    if (!x->in_map[d]) continue;
    int in = x->cur[d], o = x->out[d];
    bool in_out = false;
    for (int j = 0; j < x->nd; j++) in_out = in_out || (in >= 0 && x->out[j] == in);
    if (in != -1 && !in_out) {
      if ((r = sk__ms_op(x, SK__MS_CONCAT, d, in, -1))) return r;
      if (o == -1) x->in_map[d] = false;
    }
  }
  return SK_OK;
}

/* A round that added nothing would repeat forever (axes waiting on each other): force a concat
   on the first dim left. */
static sk_result sk__ms_break_deadlock(sk__ms_ctx *x) {
  for (int d = 0; d < x->nd; d++)
    if (x->in_map[d]) {
      if (x->cur[d] >= 0) return sk__ms_op(x, SK__MS_CONCAT, d, x->cur[d], -1);
      x->in_map[d] = false; /* nothing to concat: MindSpore would erase it next round */
      break;
    }
  return SK_OK;
}

/* Rounds until every dim is settled. MindSpore needs a handful; the guard turns a
   non-terminating inference (a bug) into an error. */
static sk_result sk__ms_infer(sk__ms_ctx *x) {
  sk_result r;
  int guard = 0;
  for (int d = 0; d < x->nd; d++) x->in_map[d] = true;
  while (sk__ms_pending(x)) {
    if (++guard > 64) return sk__fail(x->err, SK_ERR_INTERNAL, "MindSpore mode: operator inference does not converge");
    int len_global = x->p->nsteps;
    if ((r = sk__ms_split_permute(x))) return r;
    if ((r = sk__ms_concat_pass(x))) return r;
    if (len_global == x->p->nsteps && (r = sk__ms_break_deadlock(x))) return r;
  }
  return SK_OK;
}

/* >>unify -- tensor maps on one shape */
/* Per original dim: the sub-dim sizes and axes of a (possibly tuple) map, size-1 axes ignored:
   (a0..a_{t-1}) on L -> [d(a0), .., d(a_{t-2}), L/prod] (InitFromExtendVector). */
static int sk__ms_expand(const sk_layout *l, int d, int64_t *sizes, int *axes) {
  int t = 0, ax[SK_MAX_AXES];
  for (int j = 0; j < l->map[d].naxes; j++)
    if (l->mesh.dims[l->map[d].axes[j]] > 1) ax[t++] = l->map[d].axes[j];
  if (!t) {
    sizes[0] = l->shape[d], axes[0] = -1;
    return 1;
  }
  int64_t rest = l->shape[d];
  for (int j = 0; j < t - 1; j++) sizes[j] = l->mesh.dims[ax[j]], axes[j] = ax[j], rest /= l->mesh.dims[ax[j]];
  sizes[t - 1] = rest, axes[t - 1] = ax[t - 1];
  return t;
}

/* Common refinement of two factorizations of L (prefix products must form one divisibility
   chain); each axis goes to the first (major) refined piece of its sub-dim and must divide it.
   Size-1 pieces are squeezed. Returns false when not expandable. */
static bool sk__ms_unify(const sk_layout *f, const sk_layout *t, const sk_mesh *m, int *nd, int64_t *shape, int *fm,
                         int *tm) {
  int n = 0;
  for (int d = 0; d < f->ndims; d++) {
    int64_t fs[SK_MAX_AXES + 1], ts[SK_MAX_AXES + 1];
    int fa[SK_MAX_AXES + 1], ta[SK_MAX_AXES + 1];
    int nf = sk__ms_expand(f, d, fs, fa), nt = sk__ms_expand(t, d, ts, ta);
    int i = 0, j = 0;
    int64_t pf = fs[0], pt = ts[0], prev = 1;
    bool fnew = true, tnew = true;
    while (i < nf && j < nt) {
      int64_t cut = pf < pt ? pf : pt;
      if (cut % prev) return false;
      int64_t piece = cut / prev;
      int af = fnew ? fa[i] : -1, at = tnew ? ta[j] : -1;
      if (af >= 0 && piece % m->dims[af]) return false;
      if (at >= 0 && piece % m->dims[at]) return false;
      if (piece > 1) {
        if (n == SK_MAX_DIMS) return false;
        shape[n] = piece, fm[n] = af, tm[n] = at, n++;
      } else if (af >= 0 || at >= 0)
        return false;
      fnew = tnew = false;
      prev = cut;
      if (pf == cut && ++i < nf) pf *= fs[i], fnew = true;
      if (pt == cut && ++j < nt) pt *= ts[j], tnew = true;
      if (pf % prev || pt % prev) return false;
    }
  }
  if (n == 0) shape[0] = 1, fm[0] = tm[0] = -1, n = 1;
  *nd = n;
  return true;
}

static bool sk__ms_slice_shape_eq(const sk_layout *orig, int nd, const int64_t *shape, const int *map, const sk_mesh *m) {
  int64_t s[SK_MAX_DIMS];
  sk_layout_slice_shape(orig, s);
  if (orig->ndims != nd) return false;
  for (int d = 0; d < nd; d++)
    if (s[d] != (map[d] >= 0 ? shape[d] / m->dims[map[d]] : shape[d])) return false;
  return true;
}


/* >>plan */

/* The usual path: the unified maps are the start and the goal. MindSpore adds a Reshape
   (priced like two copies of the source slice) when either layout's own slice shape differs
   from its slice of the unified shape. */
static sk_result sk__ms_plan_unified(sk__ms_ctx *x, const int *fm, const int *tm) {
  sk_redist_plan *p = x->p;
  const sk_layout *f = &p->desc.from, *t = &p->desc.to;
  sk_result r;
  memcpy(x->cur, fm, sizeof x->cur);
  memcpy(x->out, tm, sizeof x->out);
  if ((r = sk__ms_layout(x, x->cur, &x->cur_layout))) return r;
  bool reshape = !sk__ms_slice_shape_eq(f, x->nd, x->shape, fm, &x->mesh) || !sk__ms_slice_shape_eq(t, x->nd, x->shape, tm, &x->mesh);
  if ((r = sk__ms_infer(x))) return r;
  if (reshape) {
    double P = (double)sk__rd_slice_elems(f);
    p->ms.computation += 2 * P, p->ms.memory += 2 * P, p->ms.reshape = true;
  }
  return SK_OK;
}

/* One half of the fallback on l's own expansion (size-1 sub-dims dropped): phase 0 gathers
   the source l to fully replicated, phase 1 splits fully replicated into the target l. */
static sk_result sk__ms_fallback_half(sk__ms_ctx *x, const sk_layout *l, int phase) {
  int64_t sz[SK_MAX_DIMS + SK_MAX_AXES];
  int ax[SK_MAX_DIMS + SK_MAX_AXES];
  sk_result r;
  int n = 0;
  for (int d = 0; d < l->ndims; d++) {
    int64_t s1[SK_MAX_AXES + 1];
    int a1[SK_MAX_AXES + 1];
    int k = sk__ms_expand(l, d, s1, a1);
    for (int j = 0; j < k; j++)
      if (s1[j] > 1) {
        if (n == SK_MAX_DIMS)
          return sk__fail(x->err, SK_ERR_INVALID_ARGUMENT, "MindSpore mode: the expanded shape needs more than %d dims",
                          SK_MAX_DIMS);
        sz[n] = s1[j], ax[n] = a1[j], n++;
      }
  }
  if (!n) sz[0] = 1, ax[0] = -1, n = 1;
  x->nd = n;
  memcpy(x->shape, sz, sizeof(int64_t) * (size_t)n);
  for (int d = 0; d < n; d++) {
    x->cur[d] = phase ? -1 : ax[d];
    x->out[d] = phase ? ax[d] : -1;
  }
  sk_layout start;
  if ((r = sk__ms_layout(x, x->cur, &start))) return r;
  x->cur_layout = start;
  return sk__ms_infer(x);
}

/* Not expandable onto one shape: from -> replicated, Reshape (always: priced on the whole
   tensor), replicated -> to. */
static sk_result sk__ms_plan_fallback(sk__ms_ctx *x) {
  sk_redist_plan *p = x->p;
  const sk_layout *f = &p->desc.from;
  sk_result r;
  p->ms_fallback = true;
  if ((r = sk__ms_fallback_half(x, f, 0))) return r;
  if ((r = sk__ms_fallback_half(x, &p->desc.to, 1))) return r;
  double P = 1;
  for (int d = 0; d < f->ndims; d++) P *= (double)f->shape[d];
  p->ms.computation += 2 * P, p->ms.memory += 2 * P, p->ms.reshape = true;
  return SK_OK;
}

/* Plans p (desc checked, cost defaults filled, no steps yet) with MindSpore's operators. */
static sk_result sk__ms_plan(sk_redist_plan *p, sk_error *err) {
  sk__ms_ctx x;
  memset(&x, 0, sizeof x);
  x.p = p;
  x.mesh = p->desc.from.mesh;
  x.alltoall = p->desc.mode == SK_REDIST_MINDSPORE;
  x.err = err;
  int fm[SK_MAX_DIMS], tm[SK_MAX_DIMS];
  sk_result r;
  if (sk__ms_unify(&p->desc.from, &p->desc.to, &x.mesh, &x.nd, x.shape, fm, tm))
    r = sk__ms_plan_unified(&x, fm, tm);
  else
    r = sk__ms_plan_fallback(&x);
  if (r) return r;
  if (p->nsteps == 0) { /* nothing to do in MindSpore's eyes: the buffers still need a copy */
    sk_layout a;
    if ((r = sk__ms_layout(&x, x.cur, &a))) return r;
    r = sk__rd_add_exchange(p, &a, &a, "Identity", "no MindSpore operator; local copy", err);
  }
  return r;
}

/* >>cost */
SK_API sk_result sk_redist_plan_ms_cost(const sk_redist_plan *p, sk_redist_ms_cost *cost, sk_error *err) {
  if (!p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan is NULL");
  if (!cost) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "cost is NULL");
  if (p->desc.mode == SK_REDIST_MINIMAL)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore's cost exists for MindSpore-mode plans only");
  *cost = p->ms;
  return SK_OK;
}

/* The last line of sk_redist_plan_format's text for a MindSpore-mode plan. */
static void sk__ms_format_cost(const sk_redist_plan *p, sk__rd_out *o) {
  sk__rd_put(o,
             "mindspore cost (elements): forward_comm %.0f, backward_comm %.0f, comm %.0f, computation %.0f, "
             "memory %.0f%s%s\n",
             p->ms.forward_comm, p->ms.backward_comm, p->ms.comm, p->ms.computation, p->ms.memory,
             p->ms.reshape ? ", with Reshape" : "", p->ms_fallback ? " (not expandable: via fully replicated)" : "");
}

SK_EXTERN_C_END

#endif /* SK_REDIST_MS_IMPL */
