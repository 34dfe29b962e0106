/* sk_layout_algebra.h -- refining meshes and tensor shapes, and unifying two layouts, as
   MindSpore's redistribution does before it infers any operator.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_LAYOUT_ALGEBRA_IMPL)   #include this header
   Elsewhere just include it. Needs only libc and sk_layout.h. No allocation anywhere.

   WHAT IT IS
     Two layouts of one tensor can live on different device matrices ([8] and [2,4]) and cut
     their dims differently. MindSpore compares them only after re-expressing both on ONE device
     matrix and ONE tensor shape, on which every sub-dim is cut by at most one device axis per
     layout. The helpers here are the pieces of that, each a pure value function:

       sk_mesh_refine_common   [8] and [2,4] -> [2,4];  [4,2] and [2,4] -> [2,2,2]: the merged
                               set of prefix products, which must be a chain of divisors
                               ([3,2] and [2,3] have none: {2,3,6} is not a chain)
       sk_layout_expand_mesh   a layout on a refined mesh: each axis becomes the tuple of its
                               sub-axes (major first); every rank keeps its slice
       sk_layout_expand_shape  a layout on a refined tensor shape: each sub-dim takes the axes
                               whose digits of the dim's index lie in it (major axes on major
                               sub-dims); an axis may not straddle two sub-dims
       sk_layout_unify         from and to (same shape, or a reshape: same element count) on one
                               mesh and one shape, or "not expandable" (MindSpore then goes via
                               the fully replicated layout)
       sk_layout_to_devices    a layout over N devices on k*N: a repeat axis of size k on the
                               LEFT, so rank r holds the slice of rank r % N
       sk_layout_collapse      the inverse of the expansions: back to a coarser mesh and shape

     Below them, MindSpore's own shape helpers (shape_util.cc: ShapeToAccumulateProduct,
     UnifyShape, ExpandShape, ...) under snake_case names, for code and tests ported from it.

     "Refines" means: the prefix products of the coarse dims (or axes) are among those of the
     fine ones, so every coarse dim is the product of consecutive fine ones. Size-1 axes and
     size-1 dims carry nothing and are skipped when matching. docs/layout-algebra.md explains
     the algebra, its relation to MindSpore, and what unification produces.

   ERRORS
     SK_ERR_INVALID_ARGUMENT with a message naming what did not fit ("cannot refine [3,2] and
     [2,3] to a common device matrix"). sk_layout_unify reports "not expandable" as a flag
     (sk_layout_unified.expandable) with the reason, not as an error: it is MindSpore's normal
     fallback, not a misuse.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_LAYOUT_ALGEBRA_IMPL)
#define SK_LAYOUT_ALGEBRA_IMPL
#endif
#ifndef SK_LAYOUT_ALGEBRA_H
#define SK_LAYOUT_ALGEBRA_H

#include "sk_layout.h"

SK_EXTERN_C_BEGIN

/* The coarsest mesh refining both a and b (same device count): its axes are the ratios of the
   merged prefix products, size-1 axes dropped (one axis of size 1 for a single device). Axes
   keep a's names where a's axis is not split, else "<name>_<i>" (i = part, major first). */
SK_API sk_result sk_mesh_refine_common(const sk_mesh *a, const sk_mesh *b, sk_mesh *out, sk_error *err);

/* `in` re-expressed on `refined`, a refinement of in->mesh: same shape, every axis of in's map
   replaced by the tuple of refined axes whose product it is. */
SK_API sk_result sk_layout_expand_mesh(const sk_layout *in, const sk_mesh *refined, sk_layout *out, sk_error *err);

/* `in` re-expressed on the tensor shape (ndims, shape), a refinement of in->shape, same mesh.
   A dim cut by axes (a0..a_{t-1}) has its index written in digits [d(a0),..,d(a_{t-1}),rest];
   each axis goes to the sub-dim holding its digit, which must lie wholly inside one sub-dim
   (else an error naming the axis and the dim: split the axis first, as sk_layout_unify does). */
SK_API sk_result sk_layout_expand_shape(const sk_layout *in, int ndims, const int64_t *shape, sk_layout *out,
                                        sk_error *err);

/* A layout on ndevices = k * in->mesh.size devices: a repeat axis of size k prepended (named
   "rep", or "rep2", ... when taken), so rank r holds the slice rank r % in->mesh.size held. */
SK_API sk_result sk_layout_to_devices(const sk_layout *in, int ndevices, sk_layout *out, sk_error *err);

/* What sk_layout_unify produces. expandable: from and to hold the two layouts on one mesh and
   one shape, every sub-dim cut by at most one axis per layout, every rank's slice (as a set of
   flat elements) unchanged. Otherwise `why` says what stopped it and from/to are unset. */
typedef struct sk_layout_unified {
  bool expandable;
  sk_layout from, to;
  char why[SK_ERROR_MSG_MAX];
} sk_layout_unified;

/* MindSpore's RedistributionLayoutTransfer: the layouts' element counts must be equal and one
   device count a multiple of the other (the smaller is aligned by sk_layout_to_devices). Then
   the meshes are refined to a common one, and shapes and axes refined together until one shape
   carries both maps. Returns SK_OK whether or not that was possible (see `expandable`). */
SK_API sk_result sk_layout_unify(const sk_layout *from, const sk_layout *to, sk_layout_unified *out, sk_error *err);

/* The inverse of the expansions: `in` on the coarser mesh `mesh` (NULL: in's own) and coarser
   shape (ndims, shape). Sub-dims of one dim merge into one tuple when their cuts form one block
   cut (every cut sub-dim but the last fully cut); the parts of a mesh axis must appear together
   and in order. Errors name the dim or axis that does not merge. */
SK_API sk_result sk_layout_collapse(const sk_layout *in, const sk_mesh *mesh, int ndims, const int64_t *shape,
                                    sk_layout *out, sk_error *err);

/* ---- MindSpore's shape helpers (shape_util.cc), with its semantics ---------------------------
   The pieces MindSpore's layout code is built on, public so code ported from it (and its tests)
   read the same. A list is an sk_int_list (at most SK_INT_LIST_MAX values). "Accumulate
   products" are prefix products: [2,8,32] -> [2,16,512]; reversed, suffix products:
   [512,256,32]. Unlike the layout helpers above, size-1 dims are kept, as MindSpore keeps them.
   Where MindSpore reads past a list's end (UnifyAccumulateProduct with different last values,
   ExpandAccumulateProduct with an empty input) these return SK_ERR_INVALID_ARGUMENT; a value
   <= 0 in an accumulate-product list is refused too (MindSpore accepts a negative one there). */
#define SK_INT_LIST_MAX 32
typedef struct sk_int_list {
  int n;
  int64_t v[SK_INT_LIST_MAX];
} sk_int_list;

/* ShapeToAccumulateProduct: [2,8,32] -> [2,16,512]. Every dim > 0. */
SK_API sk_result sk_shape_to_accumulate_product(const sk_int_list *shape, sk_int_list *out, sk_error *err);
/* ShapeToAccumulateProductReverse: [2,8,32] -> [512,256,32]. */
SK_API sk_result sk_shape_to_accumulate_product_reverse(const sk_int_list *shape, sk_int_list *out, sk_error *err);
/* AccumulateProductToShape: [2,16,512] -> [2,8,32]; each value a multiple of the one before. */
SK_API sk_result sk_accumulate_product_to_shape(const sk_int_list *accum, sk_int_list *out, sk_error *err);
/* AccumulateProductReverseToShape: [512,256,32] -> [2,8,32]. */
SK_API sk_result sk_accumulate_product_reverse_to_shape(const sk_int_list *accum, sk_int_list *out, sk_error *err);
/* UnifyAccumulateProduct: the merged ascending lists, equal values once: [2,8] and [4,8] ->
   [2,4,8]. Both must end on the same value. */
SK_API sk_result sk_unify_accumulate_product(const sk_int_list *a, const sk_int_list *b, sk_int_list *out,
                                             sk_error *err);
/* UnifyShape: the shape whose prefix products are both shapes' merged: [8,4] and [2,16] -> [2,4,4]. */
SK_API sk_result sk_unify_shape(const sk_int_list *a, const sk_int_list *b, sk_int_list *out, sk_error *err);
/* ExpandAccumulateProduct: suffix-product lists merged from the right: [512,256,32] and
   [512,32,8] -> [512,256,32,8]. Once `in` is used up, a value of `expand` equal to the one
   after it (a size-1 dim) is dropped; any other is an error. */
SK_API sk_result sk_expand_accumulate_product(const sk_int_list *in_reverse, const sk_int_list *expand_reverse,
                                              sk_int_list *out, sk_error *err);
/* ExpandShape: `in` cut further where `expand` cuts: [2,8,32] by [16,4,8] -> [2,8,4,8]. */
SK_API sk_result sk_expand_shape(const sk_int_list *in, const sk_int_list *expand, sk_int_list *out, sk_error *err);

SK_EXTERN_C_END

#endif /* SK_LAYOUT_ALGEBRA_H */

/* ==== implementation ======================================================================== */
#if defined(SK_LAYOUT_ALGEBRA_IMPL) && !defined(SK_LAYOUT_ALGEBRA_IMPL_DONE)
#define SK_LAYOUT_ALGEBRA_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <string.h>

/* Layout of this section:  >>text (messages)  >>chain (prefix products)  >>mesh  >>shape
   >>devices  >>unify  >>collapse  >>shape_util (MindSpore's shape helpers)
   Everything works on prefix products: a factorization [f0, f1, ..] of n is the chain
   f0 | f0*f1 | .. | n, and one factorization refines another exactly when its chain contains the
   other's. Size-1 factors add no point, so they never matter. */

/* >>text -- "[3,2]" for messages */
static SK__UNUSED void sk__la_dims_text(char *buf, size_t cap, int n, const int *i32, const int64_t *i64) {
  size_t len = 0;
  buf[0] = '\0';
  for (int k = 0; k < n && len < cap; k++) {
    long long v = i32 ? i32[k] : (long long)i64[k];
    int w = snprintf(buf + len, cap - len, "%s%lld", k ? "," : "[", v);
    if (w > 0) len += (size_t)w;
  }
  if (len < cap) snprintf(buf + len, cap - len, "%s", n ? "]" : "[]");
}

#define SK__LA_TEXT 96

/* A layout's own checks (the public ones of sk_layout.h trust a built layout; ours are called
   with anything). */
static SK__UNUSED sk_result sk__la_check_layout(const sk_layout *l, const char *what, sk_error *err) {
  if (!l) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s layout is NULL", what);
  sk_layout tmp;
  sk_error e;
  if (sk_layout_init(&tmp, &l->mesh, l->ndims, l->shape, l->map, &e) != SK_OK)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s layout is not valid: %s", what, e.msg);
  return SK_OK;
}

/* >>chain -- the prefix products of a factorization, size-1 factors skipped: {f0, f0*f1, ..}.
   Returns the point count (<= cap, else -1). */
static SK__UNUSED int sk__la_points(int n, const int *i32, const int64_t *i64, int64_t *pts, int cap) {
  int np = 0;
  int64_t p = 1;
  for (int k = 0; k < n; k++) {
    int64_t f = i32 ? i32[k] : i64[k];
    if (f == 1) continue;
    if (np == cap) return -1;
    p *= f;
    pts[np++] = p;
  }
  return np;
}

/* Merges two ascending point sets into one (duplicates once). Returns the count, or -1 when the
   result is not a chain of divisors (no common refinement) or has more than cap points. */
static SK__UNUSED int sk__la_merge(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int cap) {
  int i = 0, j = 0, n = 0;
  int64_t prev = 1;
  while (i < na || j < nb) {
    int64_t v = (j >= nb || (i < na && a[i] <= b[j])) ? a[i] : b[j];
    if (i < na && a[i] == v) i++;
    if (j < nb && b[j] == v) j++;
    if (n == cap || v % prev) return -1;
    out[n++] = prev = v;
  }
  return n;
}

/* >>mesh */

/* The mesh whose axes are the ratios of the chain pts (ascending, last = base->size), named
   after base's axes (base's chain is part of pts). n == 0: one axis of size 1. */
static SK__UNUSED sk_result sk__la_mesh_from_points(const sk_mesh *base, const int64_t *pts, int n, sk_mesh *out,
                                                    sk_error *err) {
  int dims[SK_MAX_AXES] = {0};
  char names[SK_MAX_AXES][SK_AXIS_NAME_MAX];
  const char *ptrs[SK_MAX_AXES] = {NULL};
  if (n > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the refined mesh needs %d axes; at most %d", n, SK_MAX_AXES);
  if (n == 0) {
    dims[0] = 1;
    ptrs[0] = base->names[0];
    return sk_mesh_init(out, 1, dims, ptrs, err);
  }
  int k = 0, part = 0;
  int64_t lo = 1, hi = 1; /* base axis k spans the points (lo, hi] */
  for (int j = 0; j < n; j++) {
    int64_t start = j ? pts[j - 1] : 1;
    while (hi <= start) lo = hi, hi *= base->dims[k++], part = 0; /* the base axis this part lies in */
    dims[j] = (int)(pts[j] / start);
    bool whole = start == lo && pts[j] == hi;
    if (whole)
      snprintf(names[j], sizeof names[j], "%s", base->names[k - 1]);
    else
      snprintf(names[j], sizeof names[j], "%.24s_%c", base->names[k - 1], (char)('0' + part)); /* part < 8 */
    part++;
    ptrs[j] = names[j];
  }
  if (sk_mesh_init(out, n, dims, ptrs, NULL) == SK_OK) return SK_OK;
  for (int j = 0; j < n; j++) snprintf(names[j], sizeof names[j], "r%c", (char)('0' + j)); /* a generated name was taken */
  return sk_mesh_init(out, n, dims, ptrs, err);
}

/* A full check of a mesh the caller may have filled by hand, as a validated copy. */
static SK__UNUSED sk_result sk__la_check_mesh(const sk_mesh *in, const char *what, sk_mesh *out, sk_error *err) {
  if (!in) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s mesh is NULL", what);
  if (in->naxes < 1 || in->naxes > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s mesh has %d axes; allowed 1..%d", what, in->naxes, SK_MAX_AXES);
  const char *ptrs[SK_MAX_AXES];
  for (int k = 0; k < in->naxes; k++) {
    if (!memchr(in->names[k], 0, SK_AXIS_NAME_MAX))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s mesh: name of axis %d is not NUL-terminated", what, k);
    ptrs[k] = in->names[k];
  }
  sk_error e;
  if (sk_mesh_init(out, in->naxes, in->dims, ptrs, &e) != SK_OK)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s mesh is not valid: %s", what, e.msg);
  return SK_OK;
}

SK_API sk_result sk_mesh_refine_common(const sk_mesh *a, const sk_mesh *b, sk_mesh *out, sk_error *err) {
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "output mesh is NULL");
  sk_mesh ca, cb;
  sk_result r;
  if ((r = sk__la_check_mesh(a, "first", &ca, err)) || (r = sk__la_check_mesh(b, "second", &cb, err))) return r;
  char ta[SK__LA_TEXT], tb[SK__LA_TEXT];
  sk__la_dims_text(ta, sizeof ta, ca.naxes, ca.dims, NULL);
  sk__la_dims_text(tb, sizeof tb, cb.naxes, cb.dims, NULL);
  if (ca.size != cb.size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "meshes %s (%d devices) and %s (%d devices) differ in device count",
                    ta, ca.size, tb, cb.size);
  int64_t pa[SK_MAX_AXES], pb[SK_MAX_AXES], pm[2 * SK_MAX_AXES];
  int na = sk__la_points(ca.naxes, ca.dims, NULL, pa, SK_MAX_AXES);
  int nb = sk__la_points(cb.naxes, cb.dims, NULL, pb, SK_MAX_AXES);
  int n = sk__la_merge(pa, na, pb, nb, pm, 2 * SK_MAX_AXES);
  if (n < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "cannot refine %s and %s to a common device matrix (their prefix products do not divide one "
                    "another in order)", ta, tb);
  return sk__la_mesh_from_points(&ca, pm, n, out, err);
}

/* For every axis k of coarse: the fine axes (size > 1) whose product it is, in order. Fails when
   fine does not refine coarse. */
static SK__UNUSED sk_result sk__la_axis_parts(const sk_mesh *coarse, const sk_mesh *fine, int parts[][SK_MAX_AXES],
                                              int *nparts, sk_error *err) {
  char tc[SK__LA_TEXT], tf[SK__LA_TEXT];
  sk__la_dims_text(tc, sizeof tc, coarse->naxes, coarse->dims, NULL);
  sk__la_dims_text(tf, sizeof tf, fine->naxes, fine->dims, NULL);
  if (coarse->size != fine->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh %s (%d devices) does not refine %s (%d devices)", tf,
                    fine->size, tc, coarse->size);
  int j = 0;
  int64_t pf = 1, pc = 1;
  for (int k = 0; k < coarse->naxes; k++) {
    pc *= coarse->dims[k];
    nparts[k] = 0;
    while (pf < pc) {
      if (fine->dims[j] > 1) parts[k][nparts[k]++] = j;
      pf *= fine->dims[j++];
    }
    if (pf != pc)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "mesh %s does not refine %s: axis '%s' (%d) is not a product of consecutive axes", tf, tc,
                      coarse->names[k], coarse->dims[k]);
  }
  return SK_OK;
}

SK_API sk_result sk_layout_expand_mesh(const sk_layout *in, const sk_mesh *refined, sk_layout *out, sk_error *err) {
  sk_result r;
  if ((r = sk__la_check_layout(in, "input", err))) return r;
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "output layout is NULL");
  sk_mesh fine;
  if ((r = sk__la_check_mesh(refined, "refined", &fine, err))) return r;
  int parts[SK_MAX_AXES][SK_MAX_AXES], nparts[SK_MAX_AXES];
  if ((r = sk__la_axis_parts(&in->mesh, &fine, parts, nparts, err))) return r;
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  for (int d = 0; d < in->ndims; d++) /* fine has no more axes than SK_MAX_AXES: the tuple fits */
    for (int j = 0; j < in->map[d].naxes; j++) {
      int k = in->map[d].axes[j];
      for (int i = 0; i < nparts[k]; i++) map[d].axes[map[d].naxes++] = parts[k][i];
    }
  return sk_layout_init(out, &fine, in->ndims, in->shape, map, err);
}

/* The arguments every shape-taking call shares: a valid layout, a shape of 1..SK_MAX_DIMS dims
   >= 1 (`what` names it: "refined", "coarse"), somewhere to write. */
static SK__UNUSED sk_result sk__la_check_call(const sk_layout *in, int ndims, const int64_t *shape, const char *what,
                                              const sk_layout *out, sk_error *err) {
  sk_result r;
  if ((r = sk__la_check_layout(in, "input", err))) return r;
  if (!shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s shape is NULL", what);
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "output layout is NULL");
  if (ndims < 1 || ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s shape has %d dims; allowed 1..%d", what, ndims, SK_MAX_DIMS);
  for (int d = 0; d < ndims; d++)
    if (shape[d] < 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s shape: dim %d is %lld; dims must be >= 1", what, d,
                      (long long)shape[d]);
  return SK_OK;
}

/* >>shape -- sub-dims [first[d], first[d]+count[d]) of the fine shape make coarse dim d. A
   size-1 sub-dim goes with the dim that follows it (trailing ones with the last dim). */
static SK__UNUSED sk_result sk__la_group_dims(int nc, const int64_t *coarse, int nf, const int64_t *fine, int *first,
                                              int *count, sk_error *err) {
  char tc[SK__LA_TEXT], tf[SK__LA_TEXT];
  sk__la_dims_text(tc, sizeof tc, nc, NULL, coarse);
  sk__la_dims_text(tf, sizeof tf, nf, NULL, fine);
  if (nc < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape %s has no dims", tc); /* callers checked */
  int i = 0;
  for (int d = 0; d < nc; d++) {
    int64_t p = 1;
    first[d] = i;
    /* p divides coarse[d]: dividing first keeps a huge fine[i] from overflowing p * fine[i] */
    while (i < nf && p < coarse[d] && (coarse[d] / p) % fine[i] == 0) p *= fine[i++];
    if (p != coarse[d])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape %s does not refine %s: dim %d (%lld) is not a product of "
                      "consecutive sub-dims", tf, tc, d, (long long)coarse[d]);
    count[d] = i - first[d];
  }
  for (; i < nf; i++) {
    if (fine[i] != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape %s does not refine %s: it has more elements", tf, tc);
    count[nc - 1]++;
  }
  return SK_OK;
}

/* The axes of dim d (size-1 axes carry no digit) placed on its sub-dims: axis j's digit spans
   the prefix products (P_j, P_j*d(a_j)]; it must lie inside one sub-dim (Q_i, Q_i+1], aligned:
   Q_i | P_j and P_j*d(a_j) | Q_i+1. The first axis of each sub-dim then starts at its top. */
static SK__UNUSED sk_result sk__la_place_axes(const sk_layout *in, int d, const int64_t *sub, int nsub,
                                              sk_dim_map *map, sk_error *err) {
  const sk_mesh *m = &in->mesh;
  int i = 0;
  int64_t q = 1, qn = nsub ? sub[0] : 1, p = 1; /* sub-dim i spans (q, qn] */
  for (int j = 0; j < in->map[d].naxes; j++) {
    int a = in->map[d].axes[j];
    if (m->dims[a] == 1) continue;
    while (qn <= p && i + 1 < nsub) q = qn, qn *= sub[++i];
    int64_t pn = p * m->dims[a];
    if (p % q || pn > qn || qn % pn)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "dim %d (%lld): axis '%s' (%d) does not fit one sub-dim of the refined shape (its digit spans "
                      "prefix products %lld..%lld, sub-dim %d spans %lld..%lld)", d, (long long)in->shape[d],
                      m->names[a], m->dims[a], (long long)p, (long long)pn, i, (long long)q, (long long)qn);
    map[i].axes[map[i].naxes++] = a;
    p = pn;
  }
  return SK_OK;
}

SK_API sk_result sk_layout_expand_shape(const sk_layout *in, int ndims, const int64_t *shape, sk_layout *out,
                                        sk_error *err) {
  sk_result r;
  if ((r = sk__la_check_call(in, ndims, shape, "refined", out, err))) return r;
  int first[SK_MAX_DIMS], count[SK_MAX_DIMS];
  if ((r = sk__la_group_dims(in->ndims, in->shape, ndims, shape, first, count, err))) return r;
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  for (int d = 0; d < in->ndims; d++)
    if ((r = sk__la_place_axes(in, d, shape + first[d], count[d], map + first[d], err))) return r;
  return sk_layout_init(out, &in->mesh, ndims, shape, map, err);
}

/* >>devices */
SK_API sk_result sk_layout_to_devices(const sk_layout *in, int ndevices, sk_layout *out, sk_error *err) {
  sk_result r;
  if ((r = sk__la_check_layout(in, "input", err))) return r;
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "output layout is NULL");
  const sk_mesh *m = &in->mesh;
  if (ndevices < m->size || ndevices > SK_MAX_DEVICES || ndevices % m->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%d devices is not a multiple of the layout's %d (at most %d)",
                    ndevices, m->size, SK_MAX_DEVICES);
  if (ndevices == m->size) {
    *out = *in;
    return SK_OK;
  }
  if (m->naxes == SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh has %d axes already; no room for the repeat axis",
                    SK_MAX_AXES);
  int dims[SK_MAX_AXES];
  const char *ptrs[SK_MAX_AXES];
  char rep[SK_AXIS_NAME_MAX] = "rep";
  for (int n = 2; sk_mesh_axis(m, rep) >= 0; n++) snprintf(rep, sizeof rep, "rep%d", n); /* a free name */
  dims[0] = ndevices / m->size, ptrs[0] = rep;
  for (int k = 0; k < m->naxes; k++) dims[k + 1] = m->dims[k], ptrs[k + 1] = m->names[k];
  sk_mesh big;
  if ((r = sk_mesh_init(&big, m->naxes + 1, dims, ptrs, err))) return r;
  sk_dim_map map[SK_MAX_DIMS];
  memcpy(map, in->map, sizeof map);
  for (int d = 0; d < in->ndims; d++)
    for (int j = 0; j < map[d].naxes; j++) map[d].axes[j]++;
  return sk_layout_init(out, &big, in->ndims, in->shape, map, err);
}

/* >>unify -- the state of one side: its standard pieces. Dim d cut by (a0..a_{t-1}) is the
   pieces [d(a0), .., d(a_{t-2}), rest] carrying a0..a_{t-1} (MindSpore's standard form); an
   unsplit dim is one piece without an axis. start: the flat prefix product before the piece. */
typedef struct sk__la_pieces {
  int n;
  int64_t start[SK_MAX_DIMS * (SK_MAX_AXES + 1)];
  int64_t size[SK_MAX_DIMS * (SK_MAX_AXES + 1)];
  int axis[SK_MAX_DIMS * (SK_MAX_AXES + 1)];
} sk__la_pieces;

static SK__UNUSED void sk__la_std_pieces(const sk_layout *l, sk__la_pieces *ps) {
  int64_t p = 1;
  ps->n = 0;
  for (int d = 0; d < l->ndims; d++) {
    int ax[SK_MAX_AXES], t = 0;
    for (int j = 0; j < l->map[d].naxes; j++)
      if (l->mesh.dims[l->map[d].axes[j]] > 1) ax[t++] = l->map[d].axes[j];
    int64_t rest = l->shape[d];
    for (int j = 0; j < t || (j == 0 && t == 0); j++) {
      int64_t s = j + 1 < t ? l->mesh.dims[ax[j]] : rest;
      ps->start[ps->n] = p, ps->size[ps->n] = s, ps->axis[ps->n] = t ? ax[j] : -1, ps->n++;
      p *= s, rest /= s;
    }
  }
}

/* The chain of both sides' piece ends: the common shape, when no axis straddles it. */
static SK__UNUSED int sk__la_common_points(const sk__la_pieces *f, const sk__la_pieces *t, int64_t *pts, int cap) {
  int64_t pf[SK_MAX_DIMS * (SK_MAX_AXES + 1)], pt[SK_MAX_DIMS * (SK_MAX_AXES + 1)];
  int nf = 0, nt = 0;
  for (int i = 0; i < f->n; i++)
    if (f->size[i] > 1) pf[nf++] = f->start[i] * f->size[i];
  for (int i = 0; i < t->n; i++)
    if (t->size[i] > 1) pt[nt++] = t->start[i] * t->size[i];
  return sk__la_merge(pf, nf, pt, nt, pts, cap);
}

/* Adds to the mesh's own chain (mpts) the points where a common point falls strictly inside
   an axis' digit (MindSpore then splits that device axis). Returns the new count, or -1. */
static SK__UNUSED int sk__la_axis_splits(const sk_mesh *m, const sk__la_pieces *ps, const int64_t *pts, int npts,
                                         int64_t *mpts, int nm) {
  for (int i = 0; i < ps->n; i++) {
    int a = ps->axis[i];
    if (a < 0) continue;
    int64_t lo = ps->start[i], hi = lo * m->dims[a], mlo = 1; /* mlo: the mesh prefix before axis a */
    for (int k = 0; k < a; k++) mlo *= m->dims[k];
    for (int j = 0; j < npts; j++) {
      if (pts[j] <= lo || pts[j] >= hi) continue;
      if (pts[j] % lo) return -1;
      int64_t add[1] = {mlo * (pts[j] / lo)}, merged[16];
      nm = sk__la_merge(mpts, nm, add, 1, merged, 16);
      if (nm < 0) return -1;
      memcpy(mpts, merged, (size_t)nm * sizeof merged[0]);
    }
  }
  return nm;
}

/* One round: the common chain of both sides, and whether the mesh had to be refined (then both
   layouts are re-expressed and the caller goes round again). false + why: not expandable. */
static SK__UNUSED bool sk__la_unify_round(sk_layout *f, sk_layout *t, int64_t *pts, int *npts, bool *again,
                                          char *why) {
  sk__la_pieces pf, pt;
  sk__la_std_pieces(f, &pf);
  sk__la_std_pieces(t, &pt);
  int n = sk__la_common_points(&pf, &pt, pts, SK_MAX_DIMS * (SK_MAX_AXES + 1));
  if (n < 0) return snprintf(why, SK_ERROR_MSG_MAX, "the two shapes have no common refinement"), false;
  int64_t mpts[16];
  int nm0 = sk__la_points(f->mesh.naxes, f->mesh.dims, NULL, mpts, 16);
  int nm = sk__la_axis_splits(&f->mesh, &pf, pts, n, mpts, nm0);
  if (nm >= 0) nm = sk__la_axis_splits(&t->mesh, &pt, pts, n, mpts, nm);
  if (nm < 0) return snprintf(why, SK_ERROR_MSG_MAX, "a device axis would have to split unevenly"), false;
  *npts = n;
  *again = nm != nm0;
  if (!*again) return true;
  sk_mesh fine;
  sk_layout nf, nt;
  sk_error e;
  if (sk__la_mesh_from_points(&f->mesh, mpts, nm, &fine, &e) || sk_layout_expand_mesh(f, &fine, &nf, &e) ||
      sk_layout_expand_mesh(t, &fine, &nt, &e))
    return snprintf(why, SK_ERROR_MSG_MAX, "refining the device matrix: %.200s", e.msg), false;
  *f = nf, *t = nt;
  return true;
}

/* Both layouts on one mesh (device counts aligned, meshes refined). false + why: none. */
static SK__UNUSED bool sk__la_unify_meshes(const sk_layout *from, const sk_layout *to, sk_layout *f, sk_layout *t,
                                           char *why) {
  sk_layout a = *from, b = *to;
  sk_mesh m;
  sk_error e;
  if ((a.mesh.size < b.mesh.size && sk_layout_to_devices(from, b.mesh.size, &a, &e)) ||
      (b.mesh.size < a.mesh.size && sk_layout_to_devices(to, a.mesh.size, &b, &e)) ||
      sk_mesh_refine_common(&a.mesh, &b.mesh, &m, &e) || sk_layout_expand_mesh(&a, &m, f, &e) ||
      sk_layout_expand_mesh(&b, &m, t, &e))
    return snprintf(why, SK_ERROR_MSG_MAX, "%.250s", e.msg), false;
  return true;
}

/* A layout's element count, or -1 past INT64_MAX (counts that wrapped could compare equal). Below
   it every prefix product unification forms is at most the count, so none overflows. */
static SK__UNUSED int64_t sk__la_count(const sk_layout *l) {
  int64_t n = 1;
  for (int d = 0; d < l->ndims; d++) {
    if (l->shape[d] > INT64_MAX / n) return -1;
    n *= l->shape[d];
  }
  return n;
}

SK_API sk_result sk_layout_unify(const sk_layout *from, const sk_layout *to, sk_layout_unified *out, sk_error *err) {
  sk_result r;
  if ((r = sk__la_check_layout(from, "from", err)) || (r = sk__la_check_layout(to, "to", err))) return r;
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "output is NULL");
  int64_t nf = sk__la_count(from), nt = sk__la_count(to);
  if (nf < 0 || nt < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s has more than %lld elements", nf < 0 ? "from" : "to",
                    (long long)INT64_MAX);
  if (nf != nt)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "from has %lld elements and to has %lld; a reshape keeps the count",
                    (long long)nf, (long long)nt);
  int sf = from->mesh.size, st = to->mesh.size;
  if ((sf > st ? sf % st : st % sf) != 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device counts %d and %d: neither is a multiple of the other", sf, st);
  sk_layout_unified u;
  memset(&u, 0, sizeof u);
  sk_layout f, t;
  int64_t pts[SK_MAX_DIMS * (SK_MAX_AXES + 1)];
  int n = 0;
  bool ok = sk__la_unify_meshes(from, to, &f, &t, u.why), again = ok;
  while (ok && again) ok = sk__la_unify_round(&f, &t, pts, &n, &again, u.why); /* each round adds an axis */
  int64_t shape[SK_MAX_DIMS];
  if (ok && n > SK_MAX_DIMS)
    ok = false, snprintf(u.why, sizeof u.why, "the common shape needs %d dims; at most %d", n, SK_MAX_DIMS);
  for (int i = 0; ok && i < n; i++) shape[i] = pts[i] / (i ? pts[i - 1] : 1);
  if (ok && n == 0) shape[0] = 1, n = 1; /* a one-element tensor */
  sk_error e;
  if (ok && (sk_layout_expand_shape(&f, n, shape, &u.from, &e) || sk_layout_expand_shape(&t, n, shape, &u.to, &e)))
    ok = false, snprintf(u.why, sizeof u.why, "%.250s", e.msg);
  u.expandable = ok;
  if (!ok) memset(&u.from, 0, sizeof u.from), memset(&u.to, 0, sizeof u.to);
  *out = u;
  return SK_OK;
}

/* >>collapse -- one coarse dim from its sub-dims: their tuples concatenated, which is one block
   cut only when every cut sub-dim before the last is wholly cut and no unsplit one precedes a
   cut one. */
static SK__UNUSED sk_result sk__la_merge_dim(const sk_layout *in, int d, int first, int count, sk_dim_map *dm,
                                             sk_error *err) {
  const sk_mesh *m = &in->mesh;
  memset(dm, 0, sizeof *dm);
  bool open = true; /* every sub-dim so far is wholly cut */
  for (int i = first; i < first + count; i++) {
    int64_t cut = 1;
    for (int j = 0; j < in->map[i].naxes; j++) {
      int a = in->map[i].axes[j];
      if (m->dims[a] == 1) continue;
      if (!open)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dim %d: sub-dim %d is cut by '%s' below a sub-dim that is not "
                        "wholly cut; that is not one block cut of the dim", d, i, m->names[a]);
      dm->axes[dm->naxes++] = a;
      cut *= m->dims[a];
    }
    if (cut != in->shape[i]) open = false;
  }
  return SK_OK;
}

/* Rewrites a map on the fine mesh into one on coarse: the parts of each coarse axis must come
   together, in order, in one tuple (or not at all). */
static SK__UNUSED sk_result sk__la_merge_axes(const sk_mesh *coarse, const sk_mesh *fine, sk_dim_map *map, int nd,
                                              sk_error *err) {
  int parts[SK_MAX_AXES][SK_MAX_AXES], nparts[SK_MAX_AXES], owner[SK_MAX_AXES];
  sk_result r = sk__la_axis_parts(coarse, fine, parts, nparts, err);
  if (r) return r;
  for (int k = 0; k < coarse->naxes; k++)
    for (int i = 0; i < nparts[k]; i++) owner[parts[k][i]] = k;
  for (int d = 0; d < nd; d++) {
    sk_dim_map out;
    memset(&out, 0, sizeof out);
    for (int j = 0; j < map[d].naxes;) {
      int k = owner[map[d].axes[j]];
      for (int i = 0; i < nparts[k]; i++, j++)
        if (j >= map[d].naxes || map[d].axes[j] != parts[k][i])
          return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dim %d: the parts of axis '%s' are not used together and in "
                          "order, so the map cannot be written on the coarser mesh", d, coarse->names[k]);
      out.axes[out.naxes++] = k;
    }
    map[d] = out;
  }
  return SK_OK;
}

SK_API sk_result sk_layout_collapse(const sk_layout *in, const sk_mesh *mesh, int ndims, const int64_t *shape,
                                    sk_layout *out, sk_error *err) {
  sk_result r;
  if ((r = sk__la_check_call(in, ndims, shape, "coarse", out, err))) return r;
  sk_mesh cm;
  if ((r = sk__la_check_mesh(mesh ? mesh : &in->mesh, "coarse", &cm, err))) return r;
  int first[SK_MAX_DIMS], count[SK_MAX_DIMS];
  if ((r = sk__la_group_dims(ndims, shape, in->ndims, in->shape, first, count, err))) return r;
  sk_dim_map map[SK_MAX_DIMS];
  for (int d = 0; d < ndims; d++)
    if ((r = sk__la_merge_dim(in, d, first[d], count[d], &map[d], err))) return r;
  if ((r = sk__la_merge_axes(&cm, &in->mesh, map, ndims, err))) return r;
  return sk_layout_init(out, &cm, ndims, shape, map, err);
}

/* >>shape_util -- MindSpore's shape helpers */

static sk_result sk__su_check(const sk_int_list *l, const char *what, sk_error *err) {
  if (!l) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  if (l->n < 0 || l->n > SK_INT_LIST_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s has %d values; allowed 0..%d", what, l->n, SK_INT_LIST_MAX);
  return SK_OK;
}

static sk_result sk__su_positive(const sk_int_list *l, const char *what, sk_error *err) {
  sk_result r = sk__su_check(l, what, err);
  for (int k = 0; !r && k < l->n; k++)
    if (l->v[k] <= 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: value %d is %lld; every value must be > 0", what, k,
                      (long long)l->v[k]);
  return r;
}

static sk_result sk__su_push(sk_int_list *out, int64_t v, sk_error *err) {
  if (out->n == SK_INT_LIST_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the result needs more than %d values", SK_INT_LIST_MAX);
  out->v[out->n++] = v;
  return SK_OK;
}

/* Prefix products (reverse: suffix products) of a shape of positive dims. */
static sk_result sk__su_products(const sk_int_list *shape, bool reverse, sk_int_list *out, sk_error *err) {
  sk_result r = sk__su_positive(shape, "shape", err);
  if (r || !out) return r ? r : sk__fail(err, SK_ERR_INVALID_ARGUMENT, "out is NULL");
  sk_int_list res = {shape->n, {0}};
  int64_t size = 1;
  for (int i = 0; i < shape->n; i++) {
    int k = reverse ? shape->n - 1 - i : i;
    if (size > INT64_MAX / shape->v[k])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape: the product of the dims overflows 64 bits");
    res.v[k] = size *= shape->v[k];
  }
  *out = res;
  return SK_OK;
}

/* The dims of prefix products (reverse: suffix products): each value divided by the previous. */
static sk_result sk__su_dims(const sk_int_list *accum, bool reverse, sk_int_list *out, sk_error *err) {
  sk_result r = sk__su_positive(accum, "accumulate product", err);
  if (r || !out) return r ? r : sk__fail(err, SK_ERR_INVALID_ARGUMENT, "out is NULL");
  sk_int_list res = {accum->n, {0}};
  int64_t prev = 1;
  for (int i = 0; i < accum->n; i++) {
    int k = reverse ? accum->n - 1 - i : i;
    if (accum->v[k] % prev)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "accumulate product: %lld is not a multiple of %lld (not an accumulate product in %s order)",
                      (long long)accum->v[k], (long long)prev, reverse ? "descending" : "ascending");
    res.v[k] = accum->v[k] / prev;
    prev = accum->v[k];
  }
  *out = res;
  return SK_OK;
}

SK_API sk_result sk_shape_to_accumulate_product(const sk_int_list *shape, sk_int_list *out, sk_error *err) {
  return sk__su_products(shape, false, out, err);
}

SK_API sk_result sk_shape_to_accumulate_product_reverse(const sk_int_list *shape, sk_int_list *out, sk_error *err) {
  return sk__su_products(shape, true, out, err);
}

SK_API sk_result sk_accumulate_product_to_shape(const sk_int_list *accum, sk_int_list *out, sk_error *err) {
  return sk__su_dims(accum, false, out, err);
}

SK_API sk_result sk_accumulate_product_reverse_to_shape(const sk_int_list *accum, sk_int_list *out, sk_error *err) {
  return sk__su_dims(accum, true, out, err);
}

SK_API sk_result sk_unify_accumulate_product(const sk_int_list *a, const sk_int_list *b, sk_int_list *out,
                                             sk_error *err) {
  sk_result r = sk__su_positive(a, "in1", err);
  if (!r) r = sk__su_positive(b, "in2", err);
  if (r || !out) return r ? r : sk__fail(err, SK_ERR_INVALID_ARGUMENT, "out is NULL");
  sk_int_list res = {0, {0}};
  int i = 0, j = 0;
  while (!r && i < a->n && j < b->n) {
    int64_t v = a->v[i] < b->v[j] ? a->v[i] : b->v[j];
    if (a->v[i] == v) i++;
    if (b->v[j] == v) j++;
    r = sk__su_push(&res, v, err);
  }
  if (r) return r;
  if (i < a->n || j < b->n)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the last values of in1 and in2 must be equal (%lld, %lld)",
                    a->n ? (long long)a->v[a->n - 1] : 0LL, b->n ? (long long)b->v[b->n - 1] : 0LL);
  *out = res;
  return SK_OK;
}

SK_API sk_result sk_unify_shape(const sk_int_list *a, const sk_int_list *b, sk_int_list *out, sk_error *err) {
  sk_int_list pa, pb, merged;
  sk_result r = sk_shape_to_accumulate_product(a, &pa, err);
  if (!r) r = sk_shape_to_accumulate_product(b, &pb, err);
  if (!r) r = sk_unify_accumulate_product(&pa, &pb, &merged, err);
  if (!r) r = sk_accumulate_product_to_shape(&merged, out, err);
  return r;
}

/* Walks both suffix-product lists from their ends (the smallest values), as MindSpore does,
   and writes the merged list backwards into res (res->v[SK_INT_LIST_MAX - res->n ..]). */
static sk_result sk__su_expand_walk(const sk_int_list *in, const sk_int_list *ex, sk_int_list *res, sk_error *err) {
  int i = in->n - 1, j = ex->n - 1;
  while (j >= 0) {
    int64_t v;
    if (i < 0) {
      if (j + 1 < ex->n && ex->v[j] == ex->v[j + 1]) { /* a size-1 dim of expand */
        j--;
        continue;
      }
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "expand: %lld is beyond the input's %lld elements",
                      (long long)ex->v[j], in->n ? (long long)in->v[0] : 1LL);
    }
    if (in->v[i] > ex->v[j])
      v = ex->v[j--];
    else if (in->v[i] == ex->v[j])
      v = ex->v[j--], i--;
    else
      v = in->v[i--];
    if (res->n == SK_INT_LIST_MAX)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the result needs more than %d values", SK_INT_LIST_MAX);
    res->v[SK_INT_LIST_MAX - ++res->n] = v;
  }
  for (; i >= 0; i--) {
    if (res->n == SK_INT_LIST_MAX)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "the result needs more than %d values", SK_INT_LIST_MAX);
    res->v[SK_INT_LIST_MAX - ++res->n] = in->v[i];
  }
  return SK_OK;
}

SK_API sk_result sk_expand_accumulate_product(const sk_int_list *in_reverse, const sk_int_list *expand_reverse,
                                              sk_int_list *out, sk_error *err) {
  sk_result r = sk__su_positive(in_reverse, "in", err);
  if (!r) r = sk__su_positive(expand_reverse, "expand", err);
  if (r || !out) return r ? r : sk__fail(err, SK_ERR_INVALID_ARGUMENT, "out is NULL");
  sk_int_list res = {0, {0}};
  if ((r = sk__su_expand_walk(in_reverse, expand_reverse, &res, err))) return r;
  out->n = res.n;
  memmove(out->v, res.v + SK_INT_LIST_MAX - res.n, (size_t)res.n * sizeof *res.v);
  return SK_OK;
}

SK_API sk_result sk_expand_shape(const sk_int_list *in, const sk_int_list *expand, sk_int_list *out, sk_error *err) {
  sk_int_list pin, pex, merged;
  sk_result r = sk_shape_to_accumulate_product_reverse(in, &pin, err);
  if (!r) r = sk_shape_to_accumulate_product_reverse(expand, &pex, err);
  if (!r) r = sk_expand_accumulate_product(&pin, &pex, &merged, err);
  if (!r) r = sk_accumulate_product_reverse_to_shape(&merged, out, err);
  return r;
}

#endif /* SK_LAYOUT_ALGEBRA_IMPL */
