/* sk_redist_ms.h -- MindSpore's redistribution operator sequence, emulated for sk_redist.h.

   Nothing to do here for users: include "sk_redist.h" (or "shardkit.h") and set
   sk_redist_desc.mode to SK_REDIST_MINDSPORE or SK_REDIST_MINDSPORE_NO_ALLTOALL. This header
   holds how those modes plan. Their public face -- the modes and sk_redist_plan_ms_cost() --
   is declared in sk_redist.h with the rest of the API; the cost record it fills,
   sk_redist_ms_cost, is declared here, and sk_redist.h includes this header. So is
   sk_redist_ms_oplist(): the same operators written as MindSpore master's per-rank lists
   (TensorTransform, `_get_resharding_operator_map`), which needs no plan.

   WHAT IT DOES
     Plans a layout -> layout move the way MindSpore's TensorRedistribution does, and prices it
     with MindSpore's ComputeCost, so that minimal plans can be compared with what MindSpore
     runs. The layouts may differ in device matrix, in shape (a reshape, same element count,
     declared as in every mode with desc.to_ndims/to_shape) and in device count (one a
     multiple of the other). Steps, in order
     (docs/redistribution-across.md):
       0. Both layouts on the larger device count: the smaller gets a repeat axis on the left
          (sk_layout_to_devices), as MindSpore's layouts always cover the whole stage.
       1. Unify them (sk_layout_unify): size-1 device axes and size-1 dims drop out (the
          standard form), tuple dims become one sub-dim per axis, the device matrices are
          refined through their prefix products and the shapes through their common chain,
          device axes split where a cut needs it, until one mesh and one shape carry both maps
          with at most one axis per sub-dim. When that fails, MindSpore's fallback: AllGathers
          to fully replicated on the source's own matrix, a Reshape of the whole tensor when the
          shapes as given differ, StridedSlices on the target's own matrix.
       2. Infer the operators as RedistributionOperatorInfer does: SplitByAxis (StridedSlice),
          PermuteByAxis (AllToAll with enable_alltoall on; AllGather plus StridedSlice off),
          ConcatByAxis (AllGather), repeated until every dim is settled, with MindSpore's
          deadlock breaker (force a concat on the first unsettled dim), each pass walking the
          dims in the order of MindSpore's hash map of them (>>infer).
       3. Across a reshape or a device matrix, local Reshape steps around them: before, when
          the source's slice as given is not its unified slice; after, when the target's
          unified slice is not its slice as given; alone, when there is no operator and the two
          slices differ. (On one matrix and one shape the unified sub-dims only spell out tuple
          maps: no Reshape step there, as the mode always planned.)
       4. Price them with ComputeCost, in elements, its quirks included: Concat and Permute
          are also counted as a Split; a Reshape is added when a layout's own slice shape is
          not its slice of the unified shape (and always on the fallback).
     Each operator becomes one plan step on the unified mesh and shape, executed as a minimal
     exchange between the layouts before and after it (sk_redist.h's planner), and each Reshape
     a local step that maps elements by flat index (sk_redist.h >>flat, >>reshape), so MindSpore-mode
     plans run on any backend.
     sk_redist_ms_oplist() records the operators through its own sink instead and writes them
     for one rank as master does, optionally through master's list optimizer (>>oplist;
     docs/redistribution-across.md section 10). The plan keeps the operators as inferred.

   INCLUDE RELATIONSHIP
     One way: sk_redist.h includes this header, never the reverse. This header knows layouts
     (sk_layout.h, sk_layout_algebra.h) and nothing of plans: it declares the record of
     MindSpore's cost (sk_redist_ms_cost, public through sk_redist.h), infers the operators, and
     hands each one, as a move between two layouts or a Reshape, to a sink the planner gives it
     (sk__ms_sink below). sk_redist.h turns them into plan steps, checks what MindSpore mode
     accepts and formats the cost. The few lines of layout arithmetic both need (element
     counts, whether two layouts have different shapes) live here, the lower of the two.
     SK_IMPL or SK_REDIST_IMPL emits this implementation too (from the start of sk_redist.h's
     implementation section); SK_REDIST_MS_IMPL alone emits only this header's private part.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_REDIST_MS_IMPL)
#define SK_REDIST_MS_IMPL
#endif
#ifndef SK_REDIST_MS_H
#define SK_REDIST_MS_H

#include "sk_core.h"
#include "sk_layout.h"
#include "sk_layout_algebra.h" /* sk_layout_unify */

SK_EXTERN_C_BEGIN

/* MindSpore's redistribution cost (TensorRedistribution::ComputeCost), in elements. */
typedef struct sk_redist_ms_cost {
  double forward_comm, backward_comm, comm, computation, memory;
  bool reshape; /* MindSpore would insert a Reshape (its cost is included) */
} sk_redist_ms_cost;

/* MindSpore's operator list for one rank, as its TensorTransform hands it to Python
   (`_transform_tensor_by_layout`, `_get_resharding_operator_map`): each operator a name and
   integers. Args: Reshape the new local shape; AllConcat the group's ranks then the concat
   axis; StridedSlice begin, end, strides; AllToAll split_count, split_dim, concat_dim, then the
   group's ranks. SK_MS_OP_SLICE (axis, count, index) is the optimizer's own form of a
   StridedSlice and never appears in a returned list. */
typedef enum sk_ms_op_kind {
  SK_MS_OP_RESHAPE,
  SK_MS_OP_ALLCONCAT,
  SK_MS_OP_STRIDEDSLICE,
  SK_MS_OP_ALLTOALL,
  SK_MS_OP_SLICE
} sk_ms_op_kind;
#define SK_MS_OP_ARGS 131 /* AllToAll: 3 + a group of up to 128 ranks */
#define SK_MS_OPS_MAX 24
typedef struct sk_ms_op {
  sk_ms_op_kind kind;
  int nargs;
  int64_t args[SK_MS_OP_ARGS];
} sk_ms_op;
typedef struct sk_ms_oplist {
  int n;
  sk_ms_op ops[SK_MS_OPS_MAX];
} sk_ms_oplist;

/* MindSpore's name of an operator kind ("Reshape", "AllConcat", "StridedSlice", "AlltoAll",
   "Slice"). */
SK_API const char *sk_ms_op_name(sk_ms_op_kind kind);

/* The list MindSpore mode's operators make for `rank` (0..devices-1, the layouts' row-major
   rank order) when written the way MindSpore's TensorTransform writes them. Both knobs are
   MindSpore's: alltoall is enable_alltoall (permutes as AlltoAll; off: AllConcat then
   StridedSlice), resharding selects `_get_resharding_operator_map`'s path -- tuple maps
   expanded into sub-dims first (Python's _expand_layout, with the Reshapes it adds around),
   and TensorTransform's list optimizer (enable_redist_opt: AllConcats reordered, moved to
   axis 0 and merged, slices merged, Reshapes folded; skipped when an AlltoAll is in the list).
   resharding off is `_transform_tensor_by_layout` with enable_redist_opt off: the operators as
   inferred. Layouts of different device counts are aligned as in MindSpore mode. */
SK_API sk_result sk_redist_ms_oplist(const sk_layout *from, const sk_layout *to, int rank, bool alltoall,
                                     bool resharding, sk_ms_oplist *out, sk_error *err);

SK_EXTERN_C_END

#endif /* SK_REDIST_MS_H */

/* ==== implementation ======================================================================== */
#if defined(SK_REDIST_MS_IMPL) && !defined(SK_REDIST_MS_IMPL_DONE)
#define SK_REDIST_MS_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <string.h>

SK_EXTERN_C_BEGIN

/* Layout of this section:  >>shared (layout arithmetic sk_redist.h's planner uses too)  >>sink
   (where the operators go)  >>state (the inference state and one operator)  >>infer
   (RedistributionOperatorInfer)  >>unify (a layout's own expansion for the fallback, the Reshape
   tests; unification itself is sk_layout_unify)  >>plan  >>oplist (master's per-rank lists) */

/* >>shared -- the redistribution module's sk__rd_ helpers that this part needs as well */
static SK__UNUSED int64_t sk__rd_elems(int nd, const int64_t *shape) {
  int64_t v = 1;
  for (int k = 0; k < nd; k++) v *= shape[k];
  return v;
}

static SK__UNUSED int64_t sk__rd_slice_elems(const sk_layout *l) {
  int64_t s[SK_MAX_DIMS] = {0};
  sk_layout_slice_shape(l, s);
  return sk__rd_elems(l->ndims, s);
}

/* Whether a and b describe tensors of different shapes (an exchange between them is flat). */
static SK__UNUSED bool sk__rd_reshaping(const sk_layout *a, const sk_layout *b) {
  return a->ndims != b->ndims || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndims) != 0;
}

/* >>sink -- the planner's side: each operator becomes one of its steps. exchange: a move a -> b
   on one shape, with MindSpore's operator name and its parameters in words; reshape: a local
   Reshape a -> b. Either fails (a full plan, memory) with err set. */
typedef struct sk__ms_sink {
  void *ctx;
  sk_result (*exchange)(void *ctx, const sk_layout *a, const sk_layout *b, const char *name, const char *detail,
                        sk_error *err);
  sk_result (*reshape)(void *ctx, const sk_layout *a, const sk_layout *b, sk_error *err);
} sk__ms_sink;

/* >>state -- RedistributionOperatorInfer on unified single-axis maps */
enum { SK__MS_SPLIT = 0, SK__MS_CONCAT = 1, SK__MS_PERMUTE = 2 };
#define SK__MS_DETAIL 128 /* an operator's parameters in words (the planner keeps what fits its step) */

typedef struct sk__ms_ctx {
  const sk__ms_sink *sink;
  sk_redist_ms_cost *cost; /* MindSpore's ComputeCost, summed operator by operator */
  int nops;                /* operators and Reshapes handed to the sink so far */
  sk_mesh mesh;
  int nd;
  int64_t shape[SK_MAX_DIMS];
  int cur[SK_MAX_DIMS], out[SK_MAX_DIMS]; /* mesh axis per unified dim, -1 unsplit */
  bool in_map[SK_MAX_DIMS];               /* MindSpore's map_ (dims still to settle) */
  bool alltoall;
  sk_layout cur_layout;
  sk_layout f0, t0; /* from and to as given, on the larger device count (the Reshapes' ends) */
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

/* One operator, or one Reshape, to the planner's sink. */
static sk_result sk__ms_exchange(sk__ms_ctx *x, const sk_layout *a, const sk_layout *b, const char *name,
                                 const char *detail) {
  x->nops++;
  return x->sink->exchange(x->sink->ctx, a, b, name, detail, x->err);
}

static sk_result sk__ms_reshape(sk__ms_ctx *x, const sk_layout *a, const sk_layout *b) {
  x->nops++;
  return x->sink->reshape(x->sink->ctx, a, b, x->err);
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
  sk_redist_ms_cost *c = x->cost;
  char detail[SK__MS_DETAIL];
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
  r = sk__ms_exchange(x, &x->cur_layout, &next, name, detail);
  x->cur_layout = next;
  return r;
}

static bool sk__ms_any(const sk__ms_ctx *x, int axis) {
  for (int d = 0; d < x->nd; d++)
    if (x->in_map[d] && x->cur[d] == axis) return true;
  return false;
}


/* >>infer -- MindSpore's passes over map_ (the dims still to settle), one function each. A dim
   whose current axis already is its target's leaves map_ in every pass.
   Each pass walks map_ in MindSpore's order, which decides which dim is gathered first. map_ is
   MindSpore's HashMap<uint64_t, int64_t>, in release builds a robin_hood::unordered_map
   (robin-hood-hashing 3.11.5), filled with the dims 0..n-1 in order; it is walked slot by slot,
   and a dim's slot comes from its hash (murmur3's mixer times 0xc4ceb9fe1a85ec53), with 8 slots
   up to 6 entries and 16 from the 7th. Erasing shifts later entries back but keeps their order,
   and nothing is inserted after the fill (map_[cat_dim] = NONE finds its dim), so the walk is a
   fixed order of the dims for each n <= 8 = SK_MAX_DIMS, found by running the library on those
   inserts. Not followed: where erase(iter++) shifts the next entry under the iterator, MindSpore
   reads that entry again from the emptied slot (robin_hood leaves the moved-from node as it was)
   and may repeat an operator on it; shardkit visits it once. */
static const signed char sk__ms_walk[SK_MAX_DIMS][SK_MAX_DIMS] = {
    {0},          {0, 1},          {0, 1, 2},             {0, 1, 3, 2},
    {0, 1, 4, 3, 2}, {0, 1, 4, 5, 3, 2}, {0, 4, 3, 1, 5, 6, 2}, {0, 4, 3, 1, 5, 6, 7, 2},
};

/* The k-th dim of map_'s walk over x's nd dims. */
static int sk__ms_walk_dim(const sk__ms_ctx *x, int k) { return sk__ms_walk[x->nd - 1][k]; }

static bool sk__ms_pending(const sk__ms_ctx *x) {
  for (int d = 0; d < x->nd; d++)
    if (x->in_map[d]) return true;
  return false;
}

/* SplitByAxis: an unsplit dim whose target axis is free (no unsettled dim holds it) is sliced. */
static sk_result sk__ms_split_pass(sk__ms_ctx *x) {
  sk_result r;
  for (int k = 0; k < x->nd; k++) {
    int d = sk__ms_walk_dim(x, k);
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
  for (int k = 0; k < x->nd; k++) {
    int d = sk__ms_walk_dim(x, k);
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
    int len_split = x->nops;
    if ((r = sk__ms_split_pass(x))) return r;
    int len_perm;
    do {
      len_perm = x->nops;
      if ((r = sk__ms_permute_pass(x))) return r;
    } while (len_perm != x->nops);
    if (len_split == x->nops) return SK_OK;
  }
}

/* ConcatByAxis: a split dim whose axis no target dim uses is gathered; it settles when its
   target is unsplit. */
static sk_result sk__ms_concat_pass(sk__ms_ctx *x) {
  sk_result r;
  for (int k = 0; k < x->nd; k++) {
    int d = sk__ms_walk_dim(x, k);
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
   on the first dim of map_'s walk. */
static sk_result sk__ms_break_deadlock(sk__ms_ctx *x) {
  for (int k = 0; k < x->nd; k++) {
    int d = sk__ms_walk_dim(x, k);
    if (x->in_map[d]) {
      if (x->cur[d] >= 0) return sk__ms_op(x, SK__MS_CONCAT, d, x->cur[d], -1);
      x->in_map[d] = false; /* nothing to concat: MindSpore would erase it next round */
      break;
    }
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
    int len_global = x->nops;
    if ((r = sk__ms_split_permute(x))) return r;
    if ((r = sk__ms_concat_pass(x))) return r;
    if (len_global == x->nops && (r = sk__ms_break_deadlock(x))) return r;
  }
  return SK_OK;
}

/* >>unify -- the pieces around sk_layout_unify */
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

/* Whether a and b give different slice shapes (size-1 dims count): MindSpore's test for a
   Reshape. */
static bool sk__ms_slices_differ(const sk_layout *a, const sk_layout *b) {
  int64_t sa[SK_MAX_DIMS], sb[SK_MAX_DIMS];
  if (a->ndims != b->ndims) return true;
  sk_layout_slice_shape(a, sa);
  sk_layout_slice_shape(b, sb);
  return memcmp(sa, sb, sizeof(int64_t) * (size_t)a->ndims) != 0;
}

/* Whether the layouts as given cross a reshape or a device matrix (only then are Reshape steps
   planned: on one matrix and one shape the unified sub-dims only spell out tuple maps, and
   shardkit keeps MindSpore mode's same-matrix sequences free of Reshapes, as they always were;
   MindSpore's cost still counts the Reshape). */
static bool sk__ms_crosses(const sk_layout *a, const sk_layout *b) {
  return sk__rd_reshaping(a, b) || a->mesh.naxes != b->mesh.naxes ||
         memcmp(a->mesh.dims, b->mesh.dims, sizeof(int) * (size_t)a->mesh.naxes) != 0;
}

/* >>plan */

/* The unified maps as one axis per sub-dim (sk_layout_unify leaves at most one per layout). */
static sk_result sk__ms_single_axes(const sk__ms_ctx *x, const sk_layout *l, int *map) {
  for (int d = 0; d < l->ndims; d++) {
    if (l->map[d].naxes > 1)
      return sk__fail(x->err, SK_ERR_INTERNAL, "MindSpore mode: unified dim %d is cut by %d axes", d, l->map[d].naxes);
    map[d] = l->map[d].naxes ? l->map[d].axes[0] : -1;
  }
  return SK_OK;
}

/* The usual path: the unified layouts are the start and the goal of the operator inference, on
   the unified mesh and shape. The slices change shape only through the Reshapes around it:
   before, when the source's slice as given is not its unified slice; after, when the target's
   unified slice is not its slice as given; with no operator at all, one Reshape from the
   source's slice to the target's, when they differ (sk__ms_crosses: across a reshape or a
   device matrix only). MindSpore prices a Reshape like two copies of the source slice, once,
   when either side's slice changes. */
static sk_result sk__ms_plan_unified(sk__ms_ctx *x, const sk_layout_unified *u) {
  sk_result r;
  x->mesh = u->from.mesh;
  x->nd = u->from.ndims;
  memcpy(x->shape, u->from.shape, sizeof x->shape);
  if ((r = sk__ms_single_axes(x, &u->from, x->cur)) || (r = sk__ms_single_axes(x, &u->to, x->out))) return r;
  if ((r = sk__ms_layout(x, x->cur, &x->cur_layout))) return r;
  bool before = sk__ms_slices_differ(&x->f0, &x->cur_layout), after = sk__ms_slices_differ(&u->to, &x->t0);
  if (before || after) {
    double P = (double)sk__rd_slice_elems(&x->f0);
    x->cost->computation += 2 * P, x->cost->memory += 2 * P, x->cost->reshape = true;
  }
  bool cross = sk__ms_crosses(&x->f0, &x->t0);
  before = before && cross, after = after && cross;
  if (!memcmp(x->cur, x->out, sizeof(int) * (size_t)x->nd)) /* no operator */
    return cross && sk__ms_slices_differ(&x->f0, &x->t0) ? sk__ms_reshape(x, &x->f0, &x->t0) : SK_OK;
  if (before && (r = sk__ms_reshape(x, &x->f0, &x->cur_layout))) return r;
  if ((r = sk__ms_infer(x))) return r;
  return after ? sk__ms_reshape(x, &x->cur_layout, &x->t0) : SK_OK;
}

/* The fallback's view of l: its own mesh, its tuple dims expanded into one sub-dim per axis,
   size-1 sub-dims dropped; ax[d] is the axis of sub-dim d (-1 unsplit). */
static sk_result sk__ms_fallback_view(sk__ms_ctx *x, const sk_layout *l, int *ax) {
  int n = 0;
  x->mesh = l->mesh;
  for (int d = 0; d < l->ndims; d++) {
    int64_t s1[SK_MAX_AXES + 1];
    int a1[SK_MAX_AXES + 1];
    int k = sk__ms_expand(l, d, s1, a1);
    for (int j = 0; j < k; j++)
      if (s1[j] > 1) {
        if (n == SK_MAX_DIMS)
          return sk__fail(x->err, SK_ERR_INVALID_ARGUMENT, "MindSpore mode: the expanded shape needs more than %d dims",
                          SK_MAX_DIMS);
        x->shape[n] = s1[j], ax[n] = a1[j], n++;
      }
  }
  if (!n) x->shape[0] = 1, ax[0] = -1, n = 1;
  x->nd = n;
  return SK_OK;
}

/* Not expandable onto one shape: the source gathered on its own mesh (one AllGather per split
   dim), a Reshape of the whole tensor when the shapes as given differ, the target sliced on its
   own mesh (one StridedSlice per split dim). MindSpore always prices the Reshape, on the whole
   tensor. */
static sk_result sk__ms_plan_fallback(sk__ms_ctx *x) {
  int ax[SK_MAX_DIMS];
  sk_result r;
  if ((r = sk__ms_fallback_view(x, &x->f0, ax))) return r;
  for (int d = 0; d < x->nd; d++) x->cur[d] = ax[d], x->out[d] = -1;
  if ((r = sk__ms_layout(x, x->cur, &x->cur_layout)) || (r = sk__ms_infer(x))) return r;
  sk_layout gathered = x->cur_layout;
  if ((r = sk__ms_fallback_view(x, &x->t0, ax))) return r;
  for (int d = 0; d < x->nd; d++) x->cur[d] = -1, x->out[d] = ax[d];
  if ((r = sk__ms_layout(x, x->cur, &x->cur_layout))) return r;
  if (sk__rd_reshaping(&x->f0, &x->t0) && (r = sk__ms_reshape(x, &gathered, &x->cur_layout))) return r;
  if ((r = sk__ms_infer(x))) return r;
  double P = (double)sk__rd_elems(x->f0.ndims, x->f0.shape);
  x->cost->computation += 2 * P, x->cost->memory += 2 * P, x->cost->reshape = true;
  return SK_OK;
}

/* MindSpore's pipeline from f0 to t0, two layouts on one device count (the planner aligned
   them: a repeat axis on the left of the smaller mesh): unified onto one mesh and one shape
   (sk_layout_unify: size-1 axes and dims drop out, the device matrices and the shapes are
   refined together), the operators inferred there with the Reshapes around, each handed to the
   sink; the fallback when no unification exists (*fallback set). alltoall: enable_alltoall.
   *cost is MindSpore's ComputeCost of the sequence (zeroed first). */
static SK__UNUSED sk_result sk__ms_plan(const sk_layout *f0, const sk_layout *t0, bool alltoall,
                                        const sk__ms_sink *sink, sk_redist_ms_cost *cost, bool *fallback,
                                        sk_error *err) {
  sk__ms_ctx x;
  memset(&x, 0, sizeof x);
  memset(cost, 0, sizeof *cost);
  *fallback = false;
  x.sink = sink;
  x.cost = cost;
  x.alltoall = alltoall;
  x.err = err;
  x.f0 = *f0;
  x.t0 = *t0;
  sk_layout_unified u;
  memset(&u, 0, sizeof u); /* defined also where the analyzer loses track of a failed unify */
  sk_result r = sk_layout_unify(&x.f0, &x.t0, &u, err);
  if (r) return r;
  *fallback = !u.expandable;
  r = u.expandable ? sk__ms_plan_unified(&x, &u) : sk__ms_plan_fallback(&x);
  if (r) return r;
  if (x.nops == 0) /* nothing to do in MindSpore's eyes: the buffers still need a copy */
    r = sk__ms_exchange(&x, &x.cur_layout, &x.cur_layout, "Identity", "no MindSpore operator; local copy");
  return r;
}

/* >>oplist -- MindSpore mode's operators written as MindSpore's TensorTransform writes them for
   one rank (sk_redist_ms_oplist): the plan's sink records each operator as (name, ints), then
   TensorTransform's optimizer rewrites the list on the resharding path. */

SK_API const char *sk_ms_op_name(sk_ms_op_kind kind) {
  switch (kind) {
    case SK_MS_OP_RESHAPE: return "Reshape";
    case SK_MS_OP_ALLCONCAT: return "AllConcat";
    case SK_MS_OP_STRIDEDSLICE: return "StridedSlice";
    case SK_MS_OP_ALLTOALL: return "AlltoAll";
    case SK_MS_OP_SLICE: return "Slice";
  }
  return "?";
}

/* A local shape: what each rank holds between two operators. */
typedef struct sk__ms_shape {
  int nd;
  int64_t s[SK_MAX_DIMS];
} sk__ms_shape;

static sk__ms_shape sk__ms_slice_shape(const sk_layout *l) {
  sk__ms_shape sh;
  sh.nd = l->ndims;
  sk_layout_slice_shape(l, sh.s);
  return sh;
}

static bool sk__ms_shape_eq(const sk__ms_shape *a, const sk__ms_shape *b) {
  return a->nd == b->nd && !memcmp(a->s, b->s, sizeof(int64_t) * (size_t)a->nd);
}

/* The shape after op (TensorTransform's InferXxxOp). */
static void sk__ms_op_shape(const sk_ms_op *op, sk__ms_shape *sh) {
  const int64_t *a = op->args;
  switch (op->kind) {
    case SK_MS_OP_RESHAPE:
      sh->nd = op->nargs;
      memcpy(sh->s, a, sizeof(int64_t) * (size_t)op->nargs);
      break;
    case SK_MS_OP_ALLCONCAT: sh->s[a[op->nargs - 1]] *= op->nargs - 1; break;
    case SK_MS_OP_STRIDEDSLICE:
      for (int d = 0; d < sh->nd; d++) sh->s[d] = (a[sh->nd + d] - a[d]) / a[2 * sh->nd + d];
      break;
    case SK_MS_OP_ALLTOALL: sh->s[a[1]] /= a[0], sh->s[a[2]] *= a[0]; break;
    case SK_MS_OP_SLICE: sh->s[a[0]] /= a[1]; break;
  }
}

/* The shape after the first `upto` operators of l, from `in`. */
static sk__ms_shape sk__ms_shape_at(const sk_ms_oplist *l, const sk__ms_shape *in, int upto) {
  sk__ms_shape sh = *in;
  for (int i = 0; i < upto; i++) sk__ms_op_shape(&l->ops[i], &sh);
  return sh;
}

static sk_ms_op sk__ms_reshape_op(const sk__ms_shape *sh) {
  sk_ms_op op;
  memset(&op, 0, sizeof op);
  op.kind = SK_MS_OP_RESHAPE, op.nargs = sh->nd;
  memcpy(op.args, sh->s, sizeof(int64_t) * (size_t)sh->nd);
  return op;
}

static void sk__ms_list_erase(sk_ms_oplist *l, int from, int to) {
  memmove(&l->ops[from], &l->ops[to], sizeof(sk_ms_op) * (size_t)(l->n - to));
  l->n -= to - from;
}

static sk_result sk__ms_list_insert(sk_ms_oplist *l, int at, const sk_ms_op *op, sk_error *err) {
  if (l->n == SK_MS_OPS_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore operator list: more than %d operators", SK_MS_OPS_MAX);
  memmove(&l->ops[at + 1], &l->ops[at], sizeof(sk_ms_op) * (size_t)(l->n - at));
  l->ops[at] = *op;
  l->n++;
  return SK_OK;
}

/* The sink's side: each planned operator as MindSpore writes it for this rank. */
typedef struct sk__ms_rec {
  int rank;
  sk_ms_oplist *out;
} sk__ms_rec;

/* The dim of a that b changes in the given direction: gained an axis (gain) or lost it. */
static int sk__ms_changed_dim(const sk_layout *a, const sk_layout *b, bool gain) {
  for (int d = 0; d < a->ndims; d++)
    if (gain ? (!a->map[d].naxes && b->map[d].naxes) : (a->map[d].naxes && !b->map[d].naxes)) return d;
  return -1;
}

/* Appends the ranks of rank's group along axis of m to op's args. */
static sk_result sk__ms_group_args(const sk_mesh *m, int rank, int axis, sk_ms_op *op, sk_error *err) {
  int ranks[SK_MAX_DEVICES], n = 0;
  sk_result r = sk_mesh_group(m, rank, 1u << axis, ranks, SK_MAX_DEVICES, &n, err);
  if (r) return r;
  if (op->nargs + n > SK_MS_OP_ARGS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore operator list: a group of %d ranks is more than %d", n,
                    SK_MS_OP_ARGS - 3);
  for (int k = 0; k < n; k++) op->args[op->nargs++] = ranks[k];
  return SK_OK;
}

/* One exchange a -> b on the unified mesh as (name, ints). A StridedSlice is recorded as the
   optimizer's Slice (axis, count, this rank's index); sk__ms_slices_to_strided writes it out. */
static sk_result sk__ms_rec_exchange(void *ctx, const sk_layout *a, const sk_layout *b, const char *name,
                                     const char *detail, sk_error *err) {
  sk__ms_rec *rc = (sk__ms_rec *)ctx;
  sk_ms_op op;
  int coords[SK_MAX_AXES];
  (void)detail;
  memset(&op, 0, sizeof op);
  if (!strcmp(name, "Identity")) return SK_OK;
  int gain = sk__ms_changed_dim(a, b, true), lose = sk__ms_changed_dim(a, b, false);
  bool gathers = !strcmp(name, "AllGather"), slices = !strcmp(name, "StridedSlice");
  if ((!slices && lose < 0) || (!gathers && gain < 0))
    return sk__fail(err, SK_ERR_INTERNAL, "MindSpore operator list: %s changes no dim the way it should", name);
  sk_result r = sk_mesh_coords(&a->mesh, rc->rank, coords, err);
  if (r) return r;
  if (gathers) {
    op.kind = SK_MS_OP_ALLCONCAT;
    if ((r = sk__ms_group_args(&a->mesh, rc->rank, a->map[lose].axes[0], &op, err))) return r;
    if (op.nargs >= SK_MS_OP_ARGS) /* the axis goes after the ranks */
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore operator list: a group of %d ranks is more than %d",
                      op.nargs, SK_MS_OP_ARGS - 1);
    op.args[op.nargs++] = lose;
  } else if (slices) {
    int axis = b->map[gain].axes[0];
    op.kind = SK_MS_OP_SLICE, op.nargs = 3;
    op.args[0] = gain, op.args[1] = b->mesh.dims[axis], op.args[2] = coords[axis];
  } else {
    int axis = b->map[gain].axes[0];
    op.kind = SK_MS_OP_ALLTOALL, op.nargs = 3;
    op.args[0] = b->mesh.dims[axis], op.args[1] = gain, op.args[2] = lose;
    if ((r = sk__ms_group_args(&a->mesh, rc->rank, axis, &op, err))) return r;
  }
  return sk__ms_list_insert(rc->out, rc->out->n, &op, err);
}

static sk_result sk__ms_rec_reshape(void *ctx, const sk_layout *a, const sk_layout *b, sk_error *err) {
  sk__ms_rec *rc = (sk__ms_rec *)ctx;
  sk__ms_shape sh = sk__ms_slice_shape(b);
  sk_ms_op op = sk__ms_reshape_op(&sh);
  (void)a;
  return sk__ms_list_insert(rc->out, rc->out->n, &op, err);
}

/* EliminateRedundancyReshape: each run of Reshapes becomes one Reshape to the run's end shape,
   none when the run ends where it began. */
static sk_result sk__ms_fold_reshapes(sk_ms_oplist *l, const sk__ms_shape *in, sk_error *err) {
  int i = 0;
  while (i < l->n) {
    if (l->ops[i].kind != SK_MS_OP_RESHAPE) {
      i++;
      continue;
    }
    int j = i + 1;
    while (j < l->n && l->ops[j].kind == SK_MS_OP_RESHAPE) j++;
    sk__ms_shape before = sk__ms_shape_at(l, in, i), after = sk__ms_shape_at(l, in, j);
    sk__ms_list_erase(l, i, j);
    if (!sk__ms_shape_eq(&before, &after)) {
      sk_ms_op op = sk__ms_reshape_op(&after);
      sk_result r = sk__ms_list_insert(l, i, &op, err);
      if (r) return r;
    }
    i++; /* as MindSpore: the operator after a dropped run is not looked at again */
  }
  return SK_OK;
}

/* The optimizer's order: AllConcats before Slices, AllConcats by descending axis, Slices by
   ascending axis; a Reshape compares equal to everything (so it is not a strict order, and the
   result is the sorting algorithm's: see sk__ms_reorder). */
static bool sk__ms_before(const sk_ms_op *a, const sk_ms_op *b) {
  if (a->kind == SK_MS_OP_RESHAPE || b->kind == SK_MS_OP_RESHAPE) return false;
  if (a->kind != b->kind) return a->kind == SK_MS_OP_ALLCONCAT;
  if (a->kind == SK_MS_OP_ALLCONCAT) return a->args[a->nargs - 1] > b->args[b->nargs - 1];
  return a->args[0] < b->args[0];
}

/* libstdc++'s insertion sort of ops[lo, hi): an operator goes to the front when it sorts before
   the first, else back past the operators it sorts before. */
static void sk__ms_insertion_sort(sk_ms_op *ops, int lo, int hi) {
  for (int i = lo + 1; i < hi; i++) {
    sk_ms_op v = ops[i];
    int j = i;
    if (sk__ms_before(&v, &ops[lo])) {
      j = lo;
    } else {
      while (sk__ms_before(&v, &ops[j - 1])) j--;
    }
    memmove(&ops[j + 1], &ops[j], sizeof(sk_ms_op) * (size_t)(i - j));
    ops[j] = v;
  }
}

/* std::stable_sort with sk__ms_before as libstdc++ runs it when it gets its buffer: both halves
   (the first one the longer) insertion-sorted, then merged -- forward when the halves are of
   one length (the right one's operator first only when it sorts before the left one's), else
   from the back (the left one's last first only when the right one's sorts before it). The
   order matters because Reshapes compare equal to everything. Up to 14 operators (halves of at
   most 7, libstdc++'s insertion-sort chunk); longer lists are refused. */
static sk_result sk__ms_reorder(sk_ms_oplist *l, sk_error *err) {
  int n = l->n, h = (n + 1) / 2, i = 0, j = h, k = 0;
  if (n > 14)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore operator list: %d operators to reorder, at most 14", n);
  sk__ms_insertion_sort(l->ops, 0, h);
  sk__ms_insertion_sort(l->ops, h, n);
  sk_ms_op merged[14];
  if (h == n - h) {
    while (i < h && j < n) merged[k++] = sk__ms_before(&l->ops[j], &l->ops[i]) ? l->ops[j++] : l->ops[i++];
    while (i < h) merged[k++] = l->ops[i++];
    while (j < n) merged[k++] = l->ops[j++];
  } else {
    i = h - 1, j = n - 1, k = n - 1;
    while (i >= 0 && j >= h) merged[k--] = sk__ms_before(&l->ops[j], &l->ops[i]) ? l->ops[i--] : l->ops[j--];
    while (j >= h) merged[k--] = l->ops[j--];
    while (i >= 0) merged[k--] = l->ops[i--];
  }
  memcpy(l->ops, merged, sizeof(sk_ms_op) * (size_t)n);
  return SK_OK;
}

/* OptimizeAllConcat: an AllConcat on axis k > 0 of a shape whose first k dims are 1 becomes
   Reshape, AllConcat on axis 0, Reshape back. The first Reshape goes to the shape after the
   last operator before that is not a Reshape (MindSpore's choice), else to the shape without
   the leading ones. */
static sk_result sk__ms_concat_to_axis0(sk_ms_oplist *l, const sk__ms_shape *in, sk_error *err) {
  for (int i = 0; i < l->n; i++) {
    sk_ms_op *op = &l->ops[i];
    if (op->kind != SK_MS_OP_ALLCONCAT || op->nargs < 1) continue;
    int64_t axis = op->args[op->nargs - 1];
    if (axis == 0) continue;
    sk__ms_shape s_in = sk__ms_shape_at(l, in, i), s_out = sk__ms_shape_at(l, in, i + 1), pre;
    bool ones = true;
    for (int d = 0; d < axis; d++) ones = ones && s_in.s[d] == 1;
    if (!ones) continue;
    pre.nd = s_in.nd - (int)axis;
    memcpy(pre.s, s_in.s + axis, sizeof(int64_t) * (size_t)pre.nd);
    for (int p = i - 1; p >= 0; p--)
      if (l->ops[p].kind != SK_MS_OP_RESHAPE) {
        pre = sk__ms_shape_at(l, in, p + 1);
        break;
      }
    sk_ms_op before = sk__ms_reshape_op(&pre), after = sk__ms_reshape_op(&s_out);
    op->args[op->nargs - 1] = 0;
    sk_result r = sk__ms_list_insert(l, i, &before, err);
    if (!r) r = sk__ms_list_insert(l, i + 2, &after, err);
    if (r) return r;
  }
  return SK_OK;
}

/* OptimizeSlice: a Slice on axis k followed by a Reshape, where the first k dims are 1, becomes
   a Reshape whose first dim is that many times larger, then the Slice on axis 0. */
static void sk__ms_slice_to_axis0(sk_ms_oplist *l, const sk__ms_shape *in) {
  for (int i = l->n - 2; i >= 0; i--) {
    sk_ms_op s = l->ops[i], rs = l->ops[i + 1];
    if (s.kind != SK_MS_OP_SLICE || rs.kind != SK_MS_OP_RESHAPE) continue;
    sk__ms_shape s_in = sk__ms_shape_at(l, in, i);
    bool ones = true;
    for (int d = 0; d < s.args[0]; d++) ones = ones && s_in.s[d] == 1;
    if (!ones) continue;
    s.args[0] = 0;
    rs.args[0] *= s.args[1];
    l->ops[i] = rs, l->ops[i + 1] = s;
  }
}

/* MergeAllConcat's test: b continues a on the same axis, its rank stride a's whole span. */
static bool sk__ms_concat_continues(const sk_ms_op *a, const sk_ms_op *b) {
  /* two ranks and the axis at least in each, ascending: a one-rank group has no stride */
  if (b->kind != SK_MS_OP_ALLCONCAT || a->nargs < 3 || b->nargs < 3 || a->args[1] <= a->args[0]) return false;
  if (a->args[a->nargs - 1] != b->args[b->nargs - 1]) return false;
  return (a->args[1] - a->args[0]) * (a->nargs - 1) == b->args[1] - b->args[0];
}

/* MergeAllConcat: an AllConcat continued by the next one (sk__ms_concat_continues) becomes one
   over both groups' product: the ranks from b's first shifted by the one rank both share, at
   a's stride. Groups sharing no rank or several are MindSpore's exception, an error here. */
static sk_result sk__ms_merge_concats(sk_ms_oplist *l, sk_error *err) {
  for (int i = 0; i < l->n; i++) {
    sk_ms_op *a = &l->ops[i];
    if (a->kind != SK_MS_OP_ALLCONCAT) continue;
    while (i + 1 < l->n && sk__ms_concat_continues(a, &l->ops[i + 1])) {
      const sk_ms_op *b = &l->ops[i + 1];
      int na = a->nargs - 1, nb = b->nargs - 1, ncommon = 0;
      int64_t common = -1, axis = a->args[na], step = a->args[1] - a->args[0];
      for (int p = 0; p < nb; p++)
        for (int q = 0; q < na; q++)
          if (b->args[p] == a->args[q]) common = b->args[p], ncommon++;
      if (ncommon != 1)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore operator list: AllConcat groups share %d ranks, not 1",
                        ncommon);
      int64_t start = b->args[0] - (common - a->args[0]), end = start + (b->args[1] - b->args[0]) * nb;
      if ((end - start) / step + 1 > SK_MS_OP_ARGS)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore operator list: merged group too large");
      a->nargs = 0;
      for (int64_t r = start; r < end; r += step) a->args[a->nargs++] = r;
      a->args[a->nargs++] = axis;
      sk__ms_list_erase(l, i + 1, i + 2);
    }
  }
  return SK_OK;
}

/* MergeSlice: a Slice followed (past Reshapes, which go) by a Slice of the same axis becomes one
   Slice: counts multiplied, the index the first's times the second's count plus the second's. */
static void sk__ms_merge_slices(sk_ms_oplist *l) {
  for (int i = 0; i < l->n; i++) {
    if (l->ops[i].kind != SK_MS_OP_SLICE) continue;
    int j = i + 1;
    while (j < l->n) {
      if (l->ops[j].kind == SK_MS_OP_RESHAPE) {
        j++;
        continue;
      }
      const int64_t *p = l->ops[i].args, *q = l->ops[j].args;
      if (l->ops[j].kind != SK_MS_OP_SLICE || p[0] != q[0]) break;
      int64_t merged[3] = {p[0], p[1] * q[1], p[2] * q[1] + q[2]};
      sk__ms_list_erase(l, i, j);
      memcpy(l->ops[i].args, merged, sizeof merged);
      j = i + 1;
    }
  }
}

/* TransSliceToStridedSlice: each Slice as begin, end, strides over the shape it cuts. */
static void sk__ms_slices_to_strided(sk_ms_oplist *l, const sk__ms_shape *in) {
  for (int i = 0; i < l->n; i++) {
    sk_ms_op *op = &l->ops[i];
    if (op->kind != SK_MS_OP_SLICE) continue;
    sk__ms_shape s = sk__ms_shape_at(l, in, i);
    int64_t axis = op->args[0], len = s.s[axis] / op->args[1], index = op->args[2];
    op->kind = SK_MS_OP_STRIDEDSLICE, op->nargs = 3 * s.nd;
    for (int d = 0; d < s.nd; d++) op->args[d] = 0, op->args[s.nd + d] = s.s[d], op->args[2 * s.nd + d] = 1;
    op->args[axis] = len * index, op->args[s.nd + axis] = len * (index + 1);
  }
}

/* OptimizeTensorRedistributionOperatorList, from the list as inferred: nothing to do for one
   operator or with an AlltoAll in the list (MindSpore's optimizer takes only AllConcat, Slice
   and Reshape). */
static sk_result sk__ms_optimize(sk_ms_oplist *l, const sk__ms_shape *in, sk_error *err) {
  sk_result r;
  if (l->n <= 1) return SK_OK;
  for (int i = 0; i < l->n; i++)
    if (l->ops[i].kind == SK_MS_OP_ALLTOALL) return SK_OK;
  if ((r = sk__ms_fold_reshapes(l, in, err)) || (r = sk__ms_reorder(l, err)) || (r = sk__ms_concat_to_axis0(l, in, err)))
    return r;
  sk__ms_slice_to_axis0(l, in);
  if ((r = sk__ms_fold_reshapes(l, in, err)) || (r = sk__ms_merge_concats(l, err))) return r;
  sk__ms_merge_slices(l);
  return SK_OK;
}

/* Python's _expand_layout: each tuple-mapped dim of length L on axes (a0..a_{t-1}) becomes t
   dims [d(a0), .., d(a_{t-2}), L / their product], one axis each (size-1 axes kept). */
static sk_result sk__ms_py_expand(const sk_layout *l, sk_layout *out, bool *expanded, sk_error *err) {
  sk_dim_map dm[SK_MAX_DIMS];
  int64_t shape[SK_MAX_DIMS];
  int n = 0;
  memset(dm, 0, sizeof dm);
  *expanded = false;
  for (int d = 0; d < l->ndims; d++) {
    int t = l->map[d].naxes > 1 ? l->map[d].naxes : 1;
    int64_t rest = l->shape[d];
    *expanded = *expanded || t > 1;
    if (n + t > SK_MAX_DIMS)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "MindSpore operator list: the expanded shape needs more than %d dims",
                      SK_MAX_DIMS);
    for (int j = 0; j < t; j++, n++) {
      int ax = l->map[d].naxes ? l->map[d].axes[j] : -1;
      if (ax >= 0) dm[n].naxes = 1, dm[n].axes[0] = ax;
      shape[n] = j < t - 1 ? l->mesh.dims[ax] : rest;
      if (j < t - 1) rest /= l->mesh.dims[ax];
    }
  }
  return sk_layout_init(out, &l->mesh, n, shape, dm, err);
}

/* Both layouts on the larger device count (a repeat axis on the left of the smaller), as
   MindSpore mode plans them. */
static sk_result sk__ms_align(const sk_layout *from, const sk_layout *to, sk_layout *f, sk_layout *t, sk_error *err) {
  int n = from->mesh.size > to->mesh.size ? from->mesh.size : to->mesh.size;
  sk_result r = from->mesh.size == n ? (*f = *from, SK_OK) : sk_layout_to_devices(from, n, f, err);
  if (!r) r = to->mesh.size == n ? (*t = *to, SK_OK) : sk_layout_to_devices(to, n, t, err);
  return r;
}

SK_API sk_result sk_redist_ms_oplist(const sk_layout *from, const sk_layout *to, int rank, bool alltoall,
                                     bool resharding, sk_ms_oplist *out, sk_error *err) {
  if (!from || !to || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_redist_ms_oplist: NULL argument");
  sk_layout f, t, fe, te;
  bool f_tuple = false, t_tuple = false, fallback = false;
  sk_result r = sk__ms_align(from, to, &f, &t, err);
  if (r) return r;
  if (rank < 0 || rank >= f.mesh.size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_redist_ms_oplist: rank %d outside 0..%d", rank, f.mesh.size - 1);
  /* Without resharding the operators work on the tuple dims' refined shape, which no Reshape of
     the list would record: refused rather than listed wrong. */
  for (int d = 0; !resharding && d < (f.ndims > t.ndims ? f.ndims : t.ndims); d++)
    if ((d < f.ndims && f.map[d].naxes > 1) || (d < t.ndims && t.map[d].naxes > 1))
      return sk__fail(err, SK_ERR_UNSUPPORTED,
                      "sk_redist_ms_oplist: dim %d is mapped to several axes; list it with resharding on "
                      "(MindSpore's resharding operator map)", d);
  fe = f, te = t;
  if (resharding && ((r = sk__ms_py_expand(&f, &fe, &f_tuple, err)) || (r = sk__ms_py_expand(&t, &te, &t_tuple, err))))
    return r;
  memset(out, 0, sizeof *out);
  sk__ms_rec rec = {rank, out};
  sk__ms_sink sink = {&rec, sk__ms_rec_exchange, sk__ms_rec_reshape};
  sk_redist_ms_cost cost;
  if ((r = sk__ms_plan(&fe, &te, alltoall, &sink, &cost, &fallback, err))) return r;
  sk__ms_shape in = sk__ms_slice_shape(&fe);
  if (resharding && (r = sk__ms_optimize(out, &in, err))) return r;
  sk__ms_slices_to_strided(out, &in);
  if (f_tuple) { /* Python's Reshapes around (_insert_expand_layout_reshape) */
    sk_ms_op op = sk__ms_reshape_op(&in);
    if ((r = sk__ms_list_insert(out, 0, &op, err))) return r;
  }
  if (t_tuple) {
    sk__ms_shape sh = sk__ms_slice_shape(&t);
    sk_ms_op op = sk__ms_reshape_op(&sh);
    if ((r = sk__ms_list_insert(out, out->n, &op, err))) return r;
  }
  return SK_OK;
}

SK_EXTERN_C_END

#endif /* SK_REDIST_MS_IMPL */
