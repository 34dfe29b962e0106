/* sk_layout.h -- device meshes, tensor layouts and slices, MindSpore-exact.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_LAYOUT_IMPL)   #include "sk_layout.h"
   Elsewhere just include it. Needs only libc. No allocation anywhere in this module.

   WHAT IT IS
     A mesh (MindSpore's device matrix) has 1..SK_MAX_AXES named axes; rank <-> coordinates are
     row-major, the LAST axis fastest: for Layout((2,2,2),("dp","sp","mp")), rank = 4dp+2sp+mp.
     A layout is a mesh, a tensor shape and a tensor map: each tensor dim is unsplit, or split by
     one axis, or by an ordered tuple of axes where the FIRST listed axis is the major factor
     ("(sp,dp)" -> slice index 2*sp+dp). An axis is used at most once per tensor. Every split is
     uniform: a dim must be divisible by its split count.

   TEXT FORMS
     mesh         "dp=2,sp=2,mp=2"
     layout map   "mp,(sp,dp)"  "(sp,dp),None"   (MindSpore's layout(...) arguments; whitespace ok)
     numeric map  "(0,(1,2))"   "(1,-1)"         (MindSpore tensor_map: values count mesh axes from
                                                  the RIGHT, -1 = unsplit, a tuple for several axes)

   OUT OF SCOPE (for now): interleaved_parallel virtual axes, rank_list (a mesh covers ranks
   0..N-1 in order), uneven splits.

   ERRORS
     Every fallible call returns sk_result and, when `err` is not NULL, a one-line message naming
     the offending piece: "dim 1 (784) is not divisible by 3 = sp*mp". Never a crash.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_LAYOUT_IMPL)
#define SK_LAYOUT_IMPL
#endif
#ifndef SK_LAYOUT_H
#define SK_LAYOUT_H

#include "sk_core.h"

SK_EXTERN_C_BEGIN

#define SK_MAX_AXES 8        /* mesh axes */
#define SK_MAX_DIMS 8        /* tensor dims (before the standard form expands tuples) */
#define SK_AXIS_NAME_MAX 32  /* 1..31 characters + NUL */
#define SK_MAX_DEVICES 4096  /* MindSpore's device_num range is 1..4096 */

/* A device matrix with named axes. Build it with sk_mesh_init or sk_mesh_parse. */
typedef struct sk_mesh {
  int naxes;
  int dims[SK_MAX_AXES];
  char names[SK_MAX_AXES][SK_AXIS_NAME_MAX];
  int size; /* product of dims: the number of devices */
} sk_mesh;

/* How one tensor dim is cut: by `naxes` mesh axes (indices into the mesh, left = 0), the first
   listed the major factor. naxes == 0: unsplit. */
typedef struct sk_dim_map {
  int naxes;
  int axes[SK_MAX_AXES];
} sk_dim_map;

/* A tensor laid out over a mesh. Build it with sk_layout_init / _parse / _from_ms_map /
   _from_strategy, which validate everything; the other calls trust a layout built that way. */
typedef struct sk_layout {
  sk_mesh mesh;
  int ndims;
  int64_t shape[SK_MAX_DIMS];
  sk_dim_map map[SK_MAX_DIMS];
} sk_layout;

/* One rank's slice: dim d holds [start[d], stop[d]). */
typedef struct sk_slice {
  int ndims;
  int64_t start[SK_MAX_DIMS];
  int64_t stop[SK_MAX_DIMS];
} sk_slice;

/* Where a shard strategy puts the repeat axis when devices > product(strategy).
   RIGHT (fastest, replicas are consecutive ranks) is MindSpore's default for operators;
   LEFT is what dataset inputs (VirtualDataset) use. */
typedef enum sk_repeat { SK_REPEAT_RIGHT = 0, SK_REPEAT_LEFT = 1 } sk_repeat;

/* ---- mesh ---------------------------------------------------------------------------------- */

/* naxes in 1..SK_MAX_AXES, dims >= 1 with a product in 1..SK_MAX_DEVICES, names unique, 1..31
   characters of [A-Za-z0-9_], not "None". */
SK_API sk_result sk_mesh_init(sk_mesh *mesh, int naxes, const int *dims, const char *const *names, sk_error *err);
/* "dp=2,sp=2,mp=2" */
SK_API sk_result sk_mesh_parse(sk_mesh *mesh, const char *text, sk_error *err);
/* Same text form; returns the length snprintf would (the text is cut to fit cap). */
SK_API size_t sk_mesh_format(const sk_mesh *mesh, char *buf, size_t cap);
/* Index of the axis called name, or -1. */
SK_API int sk_mesh_axis(const sk_mesh *mesh, const char *name);
/* Whether two meshes are one: the same axes, sizes and names, in order. */
SK_API bool sk_mesh_equal(const sk_mesh *a, const sk_mesh *b);
/* Bit mask of the axes named in a comma list ("sp,dp"); each name must exist, once. */
SK_API sk_result sk_mesh_axis_mask(const sk_mesh *mesh, const char *names, uint32_t *mask, sk_error *err);
/* Rank -> coordinates (coords has mesh->naxes entries) and back. */
SK_API sk_result sk_mesh_coords(const sk_mesh *mesh, int rank, int *coords, sk_error *err);
SK_API sk_result sk_mesh_rank(const sk_mesh *mesh, const int *coords, int *rank, sk_error *err);

/* The group of `rank` along the axes in axis_mask: the ranks that differ from it only in those
   axes' coordinates, ascending (MindSpore's GetDevicesAlongDim / GetDevicesAlongMultiDim).
   ranks needs room for the product of those axes (cap entries); *n receives the group size.
   mask 0 gives {rank}. */
SK_API sk_result sk_mesh_group(const sk_mesh *mesh, int rank, uint32_t axis_mask, int *ranks, int cap, int *n,
                               sk_error *err);
/* The number of ranks in a group along axis_mask: the product of those axes' sizes (1 for mask 0;
   axes beyond the mesh are ignored). */
SK_API int sk_mesh_group_size(const sk_mesh *mesh, uint32_t axis_mask);
/* Every group along axis_mask: *ngroups groups of *group_size ranks, stored one after another in
   ranks (cap >= mesh->size), ascending within a group, groups ordered by their first rank. */
SK_API sk_result sk_mesh_groups(const sk_mesh *mesh, uint32_t axis_mask, int *ranks, int cap, int *ngroups,
                                int *group_size, sk_error *err);

/* ---- device matrix over a device list ------------------------------------------------------ */

/* MindSpore's DeviceMatrix(rank, dev_list, dev_shape): a shape laid row-major over any list of
   device ids (a pipeline stage's devices, a sub-group), not only 0..n-1 as sk_mesh is. Groups
   come back as device ids in the list's order. mesh holds the shape (axes named d0, d1, ...);
   index is the position of `rank` in devices. Build it with sk_device_matrix_init. */
typedef struct sk_device_matrix {
  int rank;  /* a device id of the list: the device whose groups the calls return */
  int index; /* its position in devices */
  int ndevices;
  int devices[SK_MAX_DEVICES];
  sk_mesh mesh;
} sk_device_matrix;

/* ndims in 1..SK_MAX_AXES, shape >= 1 with a product equal to ndevices, ids >= 0 and distinct,
   rank one of them (MindSpore refuses the same). */
SK_API sk_result sk_device_matrix_init(sk_device_matrix *dm, int rank, const int *devices, int ndevices, int ndims,
                                       const int *shape, sk_error *err);
/* The devices that differ from dm->rank only along the dims in dim_mask (bit k: dim k, left = 0),
   in the list's order: GetDevicesAlongDim for one bit, GetDevicesAlongMultiDim for several.
   ids needs cap >= the product of those dims; *n receives the count. mask 0 gives {rank}. */
SK_API sk_result sk_device_matrix_group(const sk_device_matrix *dm, uint32_t dim_mask, int *ids, int cap, int *n,
                                        sk_error *err);
/* GetDevicesByTensorMap: the devices holding the same slice as dm->rank under a tensor map in
   MindSpore values (ms_map[d].axes, value v = dim ndims-1-v of the matrix; naxes 0 = -1), i.e.
   the group along the dims the map leaves unused, in the list's order. */
SK_API sk_result sk_device_matrix_replica_group(const sk_device_matrix *dm, const sk_dim_map *ms_map, int ndims,
                                                int *ids, int cap, int *n, sk_error *err);

/* ---- layout -------------------------------------------------------------------------------- */

/* ndims in 1..SK_MAX_DIMS, shape[d] >= 1, each axis used at most once, each dim divisible by
   its split count. map may be NULL (nothing split). */
SK_API sk_result sk_layout_init(sk_layout *layout, const sk_mesh *mesh, int ndims, const int64_t *shape,
                                const sk_dim_map *map, sk_error *err);
/* MindSpore's layout text: "mp,(sp,dp)"; its dim count must equal ndims. */
SK_API sk_result sk_layout_parse(sk_layout *layout, const sk_mesh *mesh, const char *map_text, int ndims,
                                 const int64_t *shape, sk_error *err);
/* The map as layout text ("mp,(sp,dp)"); snprintf return convention. */
SK_API size_t sk_layout_format(const sk_layout *layout, char *buf, size_t cap);

/* MindSpore's numeric tensor_map. ms_map[d].axes hold MindSpore values (mesh axis k is value
   naxes-1-k); naxes == 0 means -1 (unsplit). */
SK_API sk_result sk_layout_from_ms_map(sk_layout *layout, const sk_mesh *mesh, int ndims, const int64_t *shape,
                                       const sk_dim_map *ms_map, sk_error *err);
SK_API void sk_layout_to_ms_map(const sk_layout *layout, sk_dim_map *ms_map);
/* Numeric map text "(0,(1,2))" / "(1,-1)" <-> sk_dim_map array in MindSpore values.
   parse: *ndims receives the dim count (room for SK_MAX_DIMS entries). A one-dim map may be
   written "(0,)" or "(0)". format: snprintf convention. */
SK_API sk_result sk_ms_map_parse(const char *text, sk_dim_map *ms_map, int *ndims, sk_error *err);
SK_API size_t sk_ms_map_format(const sk_dim_map *ms_map, int ndims, char *buf, size_t cap);

/* A `shard` strategy tuple on ndevices devices: the mesh is the strategy's dims (axes named d0,
   d1, ...) plus an axis "rep" of size R = ndevices / product(strategy) when R > 1, on the right
   or the left; tensor dim d is mapped to axis d0+d. ndevices % product(strategy) must be 0. */
SK_API sk_result sk_layout_from_strategy(sk_layout *layout, int ndevices, int ndims, const int64_t *shape,
                                         const int *strategy, sk_repeat repeat, sk_error *err);

/* How many pieces dim d is cut into (product of its axes' sizes). */
SK_API int sk_layout_split_count(const sk_layout *layout, int dim);
/* The shape every rank's slice has. */
SK_API void sk_layout_slice_shape(const sk_layout *layout, int64_t *shape);
/* The slice rank holds. */
SK_API sk_result sk_layout_slice(const sk_layout *layout, int rank, sk_slice *slice, sk_error *err);
/* The number of elements of a box (0 when any dim is empty). */
SK_API int64_t sk_slice_volume(const sk_slice *box);
/* a ∩ b (same dim count) into *out; false when it is empty. */
SK_API bool sk_slice_intersect(const sk_slice *a, const sk_slice *b, sk_slice *out);
/* Mask of the mesh axes the map uses; the others replicate the tensor. */
SK_API uint32_t sk_layout_used_axes(const sk_layout *layout);
/* Whether two layouts of one tensor give every rank the same slice, compared rank by rank
   whatever their meshes (one may cut a dim by a tuple of axes where the other cuts it by one axis
   of their product): the same placement. Shapes and device counts must be equal; two scalars on
   meshes of one size are the same. */
SK_API bool sk_layout_same_slices(const sk_layout *a, const sk_layout *b);
/* The ranks holding the identical slice as rank (ascending; cap, *n as sk_mesh_group). */
SK_API sk_result sk_layout_replica_group(const sk_layout *layout, int rank, int *ranks, int cap, int *n,
                                         sk_error *err);
/* All replica groups (as sk_mesh_groups over the unused axes). */
SK_API sk_result sk_layout_replica_groups(const sk_layout *layout, int *ranks, int cap, int *ngroups,
                                          int *group_size, sk_error *err);

/* MindSpore's standard form (what parameter_layout_dict reports): a dim mapped to a tuple is
   first expanded into sub-dims [d(a0), ..., d(a_{t-2}), L / prod] each mapped to one axis
   (the "extended flat map"), then size-1 mesh axes are removed and the map renumbered (a dim on
   a removed axis becomes unsplit); a mesh of only size-1 axes becomes one axis of size 1.
   Axis names are kept. out may have more dims than in (up to SK_MAX_DIMS, else an error). */
SK_API sk_result sk_layout_standard(const sk_layout *in, sk_layout *out, sk_error *err);

/* The device -> slice table, one row per rank: rank, coordinates, slice per dim, like the
   operator-parallel tutorial's table. `name` labels the tensor column ("x"). snprintf
   convention. */
SK_API size_t sk_layout_format_table(const sk_layout *layout, const char *name, char *buf, size_t cap);

SK_EXTERN_C_END

#endif /* SK_LAYOUT_H */

/* ==== implementation ======================================================================== */
#if defined(SK_LAYOUT_IMPL) && !defined(SK_LAYOUT_IMPL_DONE)
#define SK_LAYOUT_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"

/* Layout of this section:  >>out (snprintf-style writer)  >>text (names, cursor, messages)
   >>mesh  >>groups  >>layout  >>parse  >>msmap  >>strategy  >>slice  >>standard  >>table
   Nothing here allocates: every scratch array is sized by SK_MAX_AXES / SK_MAX_DIMS. Outputs
   are written only on success, and inputs may alias outputs (we build into locals first). */

/* >>out -- append to a caller's buffer with snprintf's contract: always count, write what fits,
   keep the buffer NUL-terminated. */
typedef struct sk__layout_out {
  char *buf;
  size_t cap;
  size_t len;
} sk__layout_out;

static SK__UNUSED void sk__layout_out_init(sk__layout_out *o, char *buf, size_t cap) {
  o->buf = buf;
  o->cap = buf ? cap : 0;
  o->len = 0;
  if (o->cap) buf[0] = '\0';
}

static SK__UNUSED SK__PRINTF(2, 3) void sk__layout_put(sk__layout_out *o, const char *fmt, ...) {
  char *dst = NULL;
  size_t room = 0;
  if (o->len < o->cap) {
    dst = o->buf + o->len;
    room = o->cap - o->len;
  }
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(dst, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->len += (size_t)n;
}

/* Pads with spaces up to column width w, counting from `from` (the length before the cell). */
static SK__UNUSED void sk__layout_pad(sk__layout_out *o, size_t from, size_t w) {
  while (o->len - from < w) sk__layout_put(o, " ");
}

/* >>text */
static SK__UNUSED bool sk__layout_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static SK__UNUSED bool sk__layout_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Copies at most 60 bytes of s[0..n) into out (room for 64) for quoting in a message:
   unprintable bytes become '?', a cut text ends in "...". Keeps messages one readable line
   whatever the user passed (very long names, binary junk). */
#define SK__LAYOUT_CLIP 64
static SK__UNUSED void sk__layout_clip(char *out, const char *s, size_t n) {
  size_t i = 0;
  for (; i < n && i < SK__LAYOUT_CLIP - 4 && s[i]; i++) out[i] = (s[i] >= 32 && s[i] < 127) ? s[i] : '?';
  if (i < n && s[i]) out[i++] = '.', out[i++] = '.', out[i++] = '.';
  out[i] = '\0';
}

/* Bounded strlen (strnlen is POSIX, not C11). */
static SK__UNUSED size_t sk__layout_strlen(const char *s, size_t max) {
  size_t n = 0;
  while (n < max && s[n]) n++;
  return n;
}

/* A mesh axis name: 1..31 of [A-Za-z0-9_], and not "None" (which means unsplit in a layout). */
static SK__UNUSED sk_result sk__layout_check_name(const char *name, int axis, sk_error *err) {
  char q[SK__LAYOUT_CLIP];
  size_t n = sk__layout_strlen(name, 4096);
  sk__layout_clip(q, name, n);
  if (n == 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "name of axis %d is empty", axis);
  if (n >= SK_AXIS_NAME_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "name of axis %d ('%s') is longer than %d characters", axis, q,
                    SK_AXIS_NAME_MAX - 1);
  for (size_t i = 0; i < n; i++)
    if (!sk__layout_name_char(name[i]))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "name of axis %d ('%s') has a character other than letters, digits and '_'", axis, q);
  if (sk__streq(name, "None"))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis name 'None' (axis %d) is reserved: it means unsplit", axis);
  return SK_OK;
}

/* A cursor over user text; `what` names the text in messages ("layout", "mesh", ...). */
typedef struct sk__layout_cur {
  const char *text;
  const char *p;
  const char *what;
} sk__layout_cur;

static SK__UNUSED void sk__layout_skip_ws(sk__layout_cur *c) {
  while (sk__layout_space(*c->p)) c->p++;
}

static SK__UNUSED int sk__layout_pos(const sk__layout_cur *c) { return (int)(c->p - c->text); }

/* "unexpected ')' at position 5 in layout \"mp,)\"" and friends. */
static SK__UNUSED sk_result sk__layout_unexpected(const sk__layout_cur *c, sk_error *err) {
  char q[SK__LAYOUT_CLIP];
  sk__layout_clip(q, c->text, (size_t)-1);
  char ch = *c->p;
  if (!ch) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "unexpected end of %s \"%s\"", c->what, q);
  if (ch == ',')
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "empty part at position %d in %s \"%s\"", sk__layout_pos(c),
                    c->what, q);
  if (ch > 32 && ch < 127)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "unexpected '%c' at position %d in %s \"%s\"", ch,
                    sk__layout_pos(c), c->what, q);
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "unexpected byte 0x%02x at position %d in %s \"%s\"",
                  (unsigned)(unsigned char)ch, sk__layout_pos(c), c->what, q);
}

/* Reads a name token [A-Za-z0-9_]+ at the cursor into name (room for SK_AXIS_NAME_MAX). A token
   of 32 or more characters cannot name an axis: it fails here, so later steps never see it.
   *len = 0 when no name starts here (the caller decides what that means). */
static SK__UNUSED sk_result sk__layout_scan_name(sk__layout_cur *c, char *name, size_t *len, sk_error *err) {
  const char *s = c->p;
  while (sk__layout_name_char(*c->p)) c->p++;
  size_t n = (size_t)(c->p - s);
  *len = n;
  if (n >= SK_AXIS_NAME_MAX) {
    char q[SK__LAYOUT_CLIP], t[SK__LAYOUT_CLIP];
    sk__layout_clip(q, s, n);
    sk__layout_clip(t, c->text, (size_t)-1);
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis name '%s' in %s \"%s\" is longer than %d characters", q,
                    c->what, t, SK_AXIS_NAME_MAX - 1);
  }
  memcpy(name, s, n);
  name[n] = '\0';
  return SK_OK;
}

/* Reads an optionally negative decimal integer; saturates at +-1e9 so junk cannot overflow. */
static SK__UNUSED bool sk__layout_scan_int(sk__layout_cur *c, long long *v) {
  const char *s = c->p;
  bool neg = false;
  if (*c->p == '-') neg = true, c->p++;
  if (!(*c->p >= '0' && *c->p <= '9')) {
    c->p = s;
    return false;
  }
  long long x = 0;
  for (; *c->p >= '0' && *c->p <= '9'; c->p++)
    if (x < 1000000000LL) x = x * 10 + (*c->p - '0');
  if (x > 1000000000LL) x = 1000000000LL;
  *v = neg ? -x : x;
  return true;
}

/* >>mesh */

/* Full check of a mesh the caller may have filled by hand (layout calls copy it). */
static SK__UNUSED sk_result sk__mesh_check(const sk_mesh *m, sk_error *err) {
  if (m->naxes < 1 || m->naxes > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh has %d axes; allowed 1..%d", m->naxes, SK_MAX_AXES);
  long long size = 1;
  for (int k = 0; k < m->naxes; k++) {
    if (sk__layout_strlen(m->names[k], SK_AXIS_NAME_MAX) == SK_AXIS_NAME_MAX)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "name of mesh axis %d is not NUL-terminated", k);
    sk_result r = sk__layout_check_name(m->names[k], k, err);
    if (r) return r;
    if (m->dims[k] < 1 || m->dims[k] > SK_MAX_DEVICES)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis '%s' has size %d; allowed 1..%d", m->names[k], m->dims[k],
                      SK_MAX_DEVICES);
    size *= m->dims[k];
    if (size > SK_MAX_DEVICES)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh has more than %d devices", SK_MAX_DEVICES);
  }
  if (size != m->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh size %d is not the product of its axes (%lld)", m->size,
                    size);
  return SK_OK;
}

/* Cheap sanity check for the calls that trust a built mesh (no names): enough that no loop runs
   wild and nothing divides by zero, also for a mesh filled by hand. */
static SK__UNUSED sk_result sk__mesh_sane(const sk_mesh *m, sk_error *err) {
  if (m->naxes < 1 || m->naxes > SK_MAX_AXES || m->size < 1 || m->size > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is not initialised (%d axes, %d devices)", m->naxes,
                    m->size);
  int size = 1;
  for (int k = 0; k < m->naxes; k++) {
    if (m->dims[k] < 1 || m->dims[k] > SK_MAX_DEVICES / size) /* the bound first: the product never overflows */
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh axis %d has size %d; sizes are >= 1 and their product <= %d",
                      k, m->dims[k], SK_MAX_DEVICES);
    size *= m->dims[k];
  }
  if (size != m->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh size %d is not the product of its axes (%d)", m->size, size);
  return SK_OK;
}

/* The error for a mesh whose axes multiply past SK_MAX_DEVICES, first at axis k (size: the
   product before it): the whole product where it stays below 2^40, multiplied without overflow. */
static sk_result sk__mesh_too_big(sk_error *err, int naxes, const int *dims, int k, long long size, const char *name) {
  long long total = size;
  int j = k;
  for (; j < naxes && dims[j] >= 1 && total <= (1LL << 40) / dims[j]; j++) total *= dims[j];
  if (j < naxes)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh has more than 2^40 devices; allowed 1..%d (axis '%s' of size %d "
                    "passes the limit)", SK_MAX_DEVICES, name, dims[k]);
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh has %lld devices; allowed 1..%d (axis '%s' of size %d passes the "
                  "limit)", total, SK_MAX_DEVICES, name, dims[k]);
}

SK_API sk_result sk_mesh_init(sk_mesh *mesh, int naxes, const int *dims, const char *const *names, sk_error *err) {
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!dims) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dims is NULL");
  if (!names) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "names is NULL");
  if (naxes < 1 || naxes > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh has %d axes; allowed 1..%d", naxes, SK_MAX_AXES);
  sk_mesh m;
  memset(&m, 0, sizeof m);
  m.naxes = naxes;
  long long size = 1;
  for (int k = 0; k < naxes; k++) {
    if (!names[k]) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "name of axis %d is NULL", k);
    sk_result r = sk__layout_check_name(names[k], k, err);
    if (r) return r;
    for (int j = 0; j < k; j++)
      if (sk__streq(names[j], names[k]))
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis name '%s' appears twice in the mesh (axes %d and %d)",
                        names[k], j, k);
    if (dims[k] < 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis '%s' has size %d; sizes must be >= 1", names[k], dims[k]);
    /* size <= SK_MAX_DEVICES and dims[k] < 2^31: the product fits in long long */
    if (size * dims[k] > SK_MAX_DEVICES) return sk__mesh_too_big(err, naxes, dims, k, size, names[k]);
    memcpy(m.names[k], names[k], sk__layout_strlen(names[k], SK_AXIS_NAME_MAX - 1));
    m.dims[k] = dims[k];
    size *= dims[k];
  }
  m.size = (int)size;
  *mesh = m;
  return SK_OK;
}

SK_API sk_result sk_mesh_parse(sk_mesh *mesh, const char *text, sk_error *err) {
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  memset(mesh, 0, sizeof *mesh); /* a failed parse leaves an empty mesh, never a half-filled one */
  if (!text) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh text is NULL");
  char names[SK_MAX_AXES][SK_AXIS_NAME_MAX];
  const char *name_ptrs[SK_MAX_AXES];
  int dims[SK_MAX_AXES];
  int n = 0;
  sk__layout_cur c = {text, text, "mesh"};
  char q[SK__LAYOUT_CLIP];
  sk__layout_clip(q, text, (size_t)-1);
  sk__layout_skip_ws(&c);
  if (!*c.p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh text is empty");
  for (;;) {
    sk__layout_skip_ws(&c);
    if (n == SK_MAX_AXES)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh \"%s\" has more than %d axes", q, SK_MAX_AXES);
    size_t len;
    sk_result r = sk__layout_scan_name(&c, names[n], &len, err);
    if (r) return r;
    if (!len) return sk__layout_unexpected(&c, err);
    sk__layout_skip_ws(&c);
    if (*c.p != '=')
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "expected '=' after axis '%s' at position %d in mesh \"%s\"",
                      names[n], sk__layout_pos(&c), q);
    c.p++;
    sk__layout_skip_ws(&c);
    long long v;
    const char *num = c.p;
    if (!sk__layout_scan_int(&c, &v) || v < 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "size of axis '%s' at position %d in mesh \"%s\" is not a non-negative integer", names[n],
                      (int)(num - text), q);
    if (v > SK_MAX_DEVICES) { /* quote the digits: v saturates for absurd inputs */
      char digits[SK__LAYOUT_CLIP];
      sk__layout_clip(digits, num, (size_t)(c.p - num));
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis '%s' has size %s; a mesh has 1..%d devices", names[n],
                      digits, SK_MAX_DEVICES);
    }
    dims[n] = (int)v;
    name_ptrs[n] = names[n];
    n++;
    sk__layout_skip_ws(&c);
    if (!*c.p) break;
    if (*c.p != ',') return sk__layout_unexpected(&c, err);
    c.p++;
    sk__layout_skip_ws(&c);
    if (!*c.p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trailing comma in %s \"%s\"", c.what, q);
    if (*c.p == ',') return sk__layout_unexpected(&c, err); /* doubled comma: an empty part */
  }
  return sk_mesh_init(mesh, n, dims, name_ptrs, err);
}

static SK__UNUSED void sk__mesh_put(sk__layout_out *o, const sk_mesh *m) {
  for (int k = 0; k < m->naxes; k++) sk__layout_put(o, "%s%s=%d", k ? "," : "", m->names[k], m->dims[k]);
}

SK_API size_t sk_mesh_format(const sk_mesh *mesh, char *buf, size_t cap) {
  sk__layout_out o;
  sk__layout_out_init(&o, buf, cap);
  if (mesh && !sk__mesh_sane(mesh, NULL)) sk__mesh_put(&o, mesh);
  return o.len;
}

SK_API int sk_mesh_axis(const sk_mesh *mesh, const char *name) {
  if (!mesh || !name || mesh->naxes < 0 || mesh->naxes > SK_MAX_AXES) return -1;
  for (int k = 0; k < mesh->naxes; k++)
    if (sk__streq(mesh->names[k], name)) return k;
  return -1;
}

SK_API bool sk_mesh_equal(const sk_mesh *a, const sk_mesh *b) {
  if (!a || !b || a->naxes != b->naxes || a->naxes < 0 || a->naxes > SK_MAX_AXES) return false;
  for (int i = 0; i < a->naxes; i++)
    if (a->dims[i] != b->dims[i] || strncmp(a->names[i], b->names[i], SK_AXIS_NAME_MAX)) return false;
  return true;
}

/* Resolves a scanned name to an axis of the mesh, failing on unknown or reused axes (used is the
   mask of axes already taken). */
static SK__UNUSED sk_result sk__layout_take_axis(const sk__layout_cur *c, const sk_mesh *m, const char *name,
                                                 uint32_t *used, int *axis, sk_error *err) {
  char q[SK__LAYOUT_CLIP];
  sk__layout_clip(q, c->text, (size_t)-1);
  int a = sk_mesh_axis(m, name);
  if (a < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "unknown axis '%s' in %s \"%s\"", name, c->what, q);
  if (*used & (1u << a))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis '%s' used twice in %s \"%s\"", name, c->what, q);
  *used |= 1u << a;
  *axis = a;
  return SK_OK;
}

SK_API sk_result sk_mesh_axis_mask(const sk_mesh *mesh, const char *names, uint32_t *mask, sk_error *err) {
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!names) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis names are NULL");
  if (!mask) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mask is NULL");
  sk_result r = sk__mesh_sane(mesh, err);
  if (r) return r;
  sk__layout_cur c = {names, names, "axis list"};
  uint32_t m = 0;
  sk__layout_skip_ws(&c);
  if (*c.p) { /* an empty list is the empty mask: the group of a rank alone */
    for (;;) {
      sk__layout_skip_ws(&c);
      char name[SK_AXIS_NAME_MAX];
      size_t len;
      int a;
      if ((r = sk__layout_scan_name(&c, name, &len, err))) return r;
      if (!len) return sk__layout_unexpected(&c, err);
      if ((r = sk__layout_take_axis(&c, mesh, name, &m, &a, err))) return r;
      sk__layout_skip_ws(&c);
      if (!*c.p) break;
      if (*c.p != ',') return sk__layout_unexpected(&c, err);
      c.p++;
    }
  }
  *mask = m;
  return SK_OK;
}

SK_API sk_result sk_mesh_coords(const sk_mesh *mesh, int rank, int *coords, sk_error *err) {
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!coords) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "coords is NULL");
  sk_result r = sk__mesh_sane(mesh, err);
  if (r) return r;
  if (rank < 0 || rank >= mesh->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank %d out of range [0, %d)", rank, mesh->size);
  for (int k = mesh->naxes - 1; k >= 0; k--) { /* row-major: the last axis varies fastest */
    coords[k] = rank % mesh->dims[k];
    rank /= mesh->dims[k];
  }
  return SK_OK;
}

SK_API sk_result sk_mesh_rank(const sk_mesh *mesh, const int *coords, int *rank, sk_error *err) {
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!coords) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "coords is NULL");
  if (!rank) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank is NULL");
  sk_result r = sk__mesh_sane(mesh, err);
  if (r) return r;
  int x = 0;
  for (int k = 0; k < mesh->naxes; k++) {
    if (coords[k] < 0 || coords[k] >= mesh->dims[k])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "coordinate %d on axis '%s' out of range [0, %d)", coords[k],
                      mesh->names[k], mesh->dims[k]);
    x = x * mesh->dims[k] + coords[k];
  }
  *rank = x;
  return SK_OK;
}

/* >>groups -- an odometer over the axes in a mask, starting at rank `base` (whose coordinates
   on those axes are 0). Counting the masked coordinates in row-major order visits ranks in
   ascending order, because each axis' stride exceeds the span of all faster axes. */
typedef struct sk__mesh_odo {
  int n;                  /* axes in the mask */
  int stride[SK_MAX_AXES]; /* rank stride of each */
  int dim[SK_MAX_AXES];
  int c[SK_MAX_AXES];
  int rank;
} sk__mesh_odo;

static SK__UNUSED void sk__mesh_odo_init(sk__mesh_odo *o, const sk_mesh *m, uint32_t mask, int base) {
  int stride = 1, tmp[SK_MAX_AXES];
  for (int k = m->naxes - 1; k >= 0; k--) tmp[k] = stride, stride *= m->dims[k];
  o->n = 0;
  for (int k = 0; k < m->naxes; k++)
    if (mask & (1u << k)) {
      o->stride[o->n] = tmp[k];
      o->dim[o->n] = m->dims[k];
      o->c[o->n] = 0;
      o->n++;
    }
  o->rank = base;
}

/* Steps to the next rank; false after the last one. */
static SK__UNUSED bool sk__mesh_odo_next(sk__mesh_odo *o) {
  for (int j = o->n - 1; j >= 0; j--) {
    o->rank += o->stride[j];
    if (++o->c[j] < o->dim[j]) return true;
    o->c[j] = 0;
    o->rank -= o->stride[j] * o->dim[j];
  }
  return false;
}

SK_API int sk_mesh_group_size(const sk_mesh *m, uint32_t mask) {
  int n = 1;
  for (int k = 0; m && k < m->naxes; k++)
    if (mask & (1u << k)) n *= m->dims[k];
  return n;
}

static SK__UNUSED sk_result sk__mesh_check_mask(const sk_mesh *m, uint32_t mask, sk_error *err) {
  if (mask >> m->naxes)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis mask 0x%x names axes beyond the mesh's %d", (unsigned)mask,
                    m->naxes);
  return SK_OK;
}

SK_API sk_result sk_mesh_group(const sk_mesh *mesh, int rank, uint32_t axis_mask, int *ranks, int cap, int *n,
                               sk_error *err) {
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!ranks) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ranks is NULL");
  if (!n) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "n is NULL");
  sk_result r;
  if ((r = sk__mesh_sane(mesh, err)) || (r = sk__mesh_check_mask(mesh, axis_mask, err))) return r;
  if (rank < 0 || rank >= mesh->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank %d out of range [0, %d)", rank, mesh->size);
  int size = sk_mesh_group_size(mesh, axis_mask);
  if (cap < size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ranks has room for %d entries; the group needs %d", cap, size);
  /* base = rank with its coordinates on the masked axes set to 0 */
  int base = 0, stride = 1, x = rank;
  int na = mesh->naxes < 1 ? 1 : mesh->naxes > SK_MAX_AXES ? SK_MAX_AXES : mesh->naxes; /* checked above; stated again */
  for (int k = na - 1; k >= 0; k--) {
    int ck = x % mesh->dims[k];
    x /= mesh->dims[k];
    if (!(axis_mask & (1u << k))) base += ck * stride;
    stride *= mesh->dims[k];
  }
  sk__mesh_odo o;
  sk__mesh_odo_init(&o, mesh, axis_mask, base);
  int i = 0;
  do ranks[i++] = o.rank;
  while (sk__mesh_odo_next(&o));
  *n = i;
  return SK_OK;
}

SK_API sk_result sk_mesh_groups(const sk_mesh *mesh, uint32_t axis_mask, int *ranks, int cap, int *ngroups,
                                int *group_size, sk_error *err) {
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!ranks) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ranks is NULL");
  if (!ngroups) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ngroups is NULL");
  if (!group_size) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "group_size is NULL");
  sk_result r;
  if ((r = sk__mesh_sane(mesh, err)) || (r = sk__mesh_check_mask(mesh, axis_mask, err))) return r;
  if (cap < mesh->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ranks has room for %d entries; all groups need %d", cap,
                    mesh->size);
  uint32_t all = (1u << mesh->naxes) - 1u;
  sk__mesh_odo outer, inner;
  sk__mesh_odo_init(&outer, mesh, all & ~axis_mask, 0); /* first rank of each group, ascending */
  sk__mesh_odo_init(&inner, mesh, axis_mask, 0);
  int i = 0;
  do {
    inner.rank = outer.rank; /* inner's counters are back at 0 after each full turn */
    do ranks[i++] = inner.rank;
    while (sk__mesh_odo_next(&inner));
  } while (sk__mesh_odo_next(&outer));
  *group_size = sk_mesh_group_size(mesh, axis_mask);
  *ngroups = mesh->size / *group_size;
  return SK_OK;
}

/* >>device_matrix -- the shape's arithmetic is sk_mesh's (on list positions); the list only
   renames positions to device ids. */

static sk_result sk__dm_check_ids(int rank, const int *devices, int ndevices, int *index, sk_error *err) {
  *index = -1;
  for (int i = 0; i < ndevices; i++) {
    if (devices[i] < 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device list entry %d is %d; device ids are >= 0", i, devices[i]);
    for (int j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device %d is listed twice (entries %d and %d)", devices[i], j,
                        i);
    if (devices[i] == rank) *index = i;
  }
  if (*index < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank %d is not in the device list", rank);
  return SK_OK;
}

SK_API sk_result sk_device_matrix_init(sk_device_matrix *dm, int rank, const int *devices, int ndevices, int ndims,
                                       const int *shape, sk_error *err) {
  if (!dm) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix is NULL");
  if (!devices || !shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device list or shape is NULL");
  if (ndevices < 1 || ndevices > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device list has %d entries; allowed 1..%d", ndevices,
                    SK_MAX_DEVICES);
  if (ndims < 1 || ndims > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix has %d dims; allowed 1..%d", ndims, SK_MAX_AXES);
  long long size = 1;
  for (int k = 0; k < ndims; k++) {
    if (shape[k] < 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix dim %d is %d; dims are >= 1", k, shape[k]);
    size *= shape[k]; /* fits: size <= ndevices before each product, and stops once past it */
    if (size > ndevices) break;
  }
  if (size != ndevices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix shape's product is not the device list's %d entries",
                    ndevices);
  sk_result r = sk__dm_check_ids(rank, devices, ndevices, &dm->index, err);
  if (r) return r;
  char names[SK_MAX_AXES][SK_AXIS_NAME_MAX];
  const char *np[SK_MAX_AXES];
  for (int k = 0; k < ndims; k++) snprintf(names[k], sizeof names[k], "d%d", k), np[k] = names[k];
  if ((r = sk_mesh_init(&dm->mesh, ndims, shape, np, err))) return r;
  dm->rank = rank;
  dm->ndevices = ndevices;
  memcpy(dm->devices, devices, (size_t)ndevices * sizeof *devices);
  return SK_OK;
}

SK_API sk_result sk_device_matrix_group(const sk_device_matrix *dm, uint32_t dim_mask, int *ids, int cap, int *n,
                                        sk_error *err) {
  if (!dm) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix is NULL");
  if (dm->ndevices != dm->mesh.size || dm->index < 0 || dm->index >= dm->ndevices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix is not initialised (%d devices, index %d)",
                    dm->ndevices, dm->index);
  /* positions ascend in sk_mesh_group's answer, so the ids come out in the list's order */
  sk_result r = sk_mesh_group(&dm->mesh, dm->index, dim_mask, ids, cap, n, err);
  if (r) return r;
  for (int i = 0; i < *n; i++) ids[i] = dm->devices[ids[i]];
  return SK_OK;
}

SK_API sk_result sk_device_matrix_replica_group(const sk_device_matrix *dm, const sk_dim_map *ms_map, int ndims,
                                                int *ids, int cap, int *n, sk_error *err) {
  if (!dm || !ms_map) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix or tensor map is NULL");
  if (ndims < 0 || ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor map has %d dims; allowed 0..%d", ndims, SK_MAX_DIMS);
  int na = dm->mesh.naxes;
  if (na < 1 || na > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "device matrix is not initialised (%d dims)", na);
  uint32_t used = 0;
  for (int d = 0; d < ndims; d++) {
    if (ms_map[d].naxes < 0 || ms_map[d].naxes > SK_MAX_AXES)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor map dim %d lists %d values", d, ms_map[d].naxes);
    for (int j = 0; j < ms_map[d].naxes; j++) {
      int v = ms_map[d].axes[j];
      if (v < 0 || v >= na)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                        "tensor map value %d (dim %d) is outside the %d-dim device matrix", v, d, na);
      if (used & (1u << (na - 1 - v)))
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor map value %d is used twice", v);
      used |= 1u << (na - 1 - v);
    }
  }
  return sk_device_matrix_group(dm, ((1u << na) - 1u) & ~used, ids, cap, n, err);
}

/* >>layout */

/* Appends "sp*mp" (the axes of one dim, as listed). */
static SK__UNUSED void sk__layout_put_axes(sk__layout_out *o, const sk_mesh *m, const sk_dim_map *dm,
                                           const char *sep) {
  for (int j = 0; j < dm->naxes; j++) sk__layout_put(o, "%s%s", j ? sep : "", m->names[dm->axes[j]]);
}

SK_API sk_result sk_layout_init(sk_layout *layout, const sk_mesh *mesh, int ndims, const int64_t *shape,
                                const sk_dim_map *map, sk_error *err) {
  if (!layout) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is NULL");
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape is NULL");
  sk_result r = sk__mesh_check(mesh, err);
  if (r) return r;
  if (ndims < 1 || ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor has %d dims; allowed 1..%d", ndims, SK_MAX_DIMS);
  sk_layout l;
  memset(&l, 0, sizeof l);
  l.mesh = *mesh;
  l.ndims = ndims;
  int used_by[SK_MAX_AXES]; /* which dim took each axis, -1 = free */
  for (int k = 0; k < SK_MAX_AXES; k++) used_by[k] = -1;
  for (int d = 0; d < ndims; d++) {
    if (shape[d] < 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dim %d has length %lld; lengths must be >= 1", d,
                      (long long)shape[d]);
    l.shape[d] = shape[d];
    if (!map) continue;
    const sk_dim_map *dm = &map[d];
    if (dm->naxes < 0 || dm->naxes > mesh->naxes)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dim %d maps to %d axes; the mesh has %d", d, dm->naxes,
                      mesh->naxes);
    long long split = 1;
    for (int j = 0; j < dm->naxes; j++) {
      int a = dm->axes[j];
      if (a < 0 || a >= mesh->naxes)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dim %d maps to axis index %d; the mesh has axes 0..%d", d, a,
                        mesh->naxes - 1);
      if (used_by[a] >= 0)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "axis '%s' used twice (dims %d and %d)", mesh->names[a],
                        used_by[a], d);
      used_by[a] = d;
      split *= mesh->dims[a];
      l.map[d].axes[j] = a;
    }
    l.map[d].naxes = dm->naxes;
    if (shape[d] % split) {
      char names[SK_MAX_AXES * SK_AXIS_NAME_MAX + 8];
      sk__layout_out o;
      sk__layout_out_init(&o, names, sizeof names);
      sk__layout_put_axes(&o, mesh, dm, "*");
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dim %d (%lld) is not divisible by %lld = %s", d,
                      (long long)shape[d], split, names);
    }
  }
  *layout = l;
  return SK_OK;
}

/* >>parse -- MindSpore's layout(...) arguments as text: items separated by commas, each a name,
   None, or a parenthesised tuple of names (no nesting, no empty parts). */
SK_API sk_result sk_layout_parse(sk_layout *layout, const sk_mesh *mesh, const char *map_text, int ndims,
                                 const int64_t *shape, sk_error *err) {
  if (!layout) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is NULL");
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!map_text) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout text is NULL");
  if (!shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape is NULL");
  sk_result r = sk__mesh_check(mesh, err);
  if (r) return r;
  if (ndims < 1 || ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor has %d dims; allowed 1..%d", ndims, SK_MAX_DIMS);
  char q[SK__LAYOUT_CLIP];
  sk__layout_clip(q, map_text, (size_t)-1);
  sk__layout_cur c = {map_text, map_text, "layout"};
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  uint32_t used = 0;
  int n = 0;
  char name[SK_AXIS_NAME_MAX];
  size_t len;
  sk__layout_skip_ws(&c);
  if (!*c.p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout text is empty");
  for (;;) {
    sk__layout_skip_ws(&c);
    if (n == SK_MAX_DIMS)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout \"%s\" has more than %d dims", q, SK_MAX_DIMS);
    sk_dim_map *dm = &map[n];
    if (*c.p == '(') {
      c.p++;
      for (;;) {
        sk__layout_skip_ws(&c);
        if (*c.p == '(')
          return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "nested '(' at position %d in layout \"%s\"",
                          sk__layout_pos(&c), q);
        if ((r = sk__layout_scan_name(&c, name, &len, err))) return r;
        if (!len) {
          if (*c.p == ')')
            return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "empty tuple or trailing comma at position %d in layout \"%s\"",
                            sk__layout_pos(&c), q);
          return sk__layout_unexpected(&c, err);
        }
        if (sk__streq(name, "None"))
          return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "'None' inside a tuple at position %d in layout \"%s\"",
                          sk__layout_pos(&c) - 4, q);
        int a = 0;
        if ((r = sk__layout_take_axis(&c, mesh, name, &used, &a, err))) return r;
        dm->axes[dm->naxes++] = a; /* cannot overflow: each of <= 8 axes is taken once */
        sk__layout_skip_ws(&c);
        if (*c.p == ',') {
          c.p++;
          continue;
        }
        if (*c.p == ')') {
          c.p++;
          break;
        }
        if (!*c.p)
          return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "missing ')' at the end of layout \"%s\"", q);
        return sk__layout_unexpected(&c, err);
      }
    } else {
      if ((r = sk__layout_scan_name(&c, name, &len, err))) return r;
      if (!len) return sk__layout_unexpected(&c, err);
      if (!sk__streq(name, "None")) {
        int a = 0;
        if ((r = sk__layout_take_axis(&c, mesh, name, &used, &a, err))) return r;
        dm->axes[dm->naxes++] = a;
      }
    }
    n++;
    sk__layout_skip_ws(&c);
    if (!*c.p) break;
    if (*c.p != ',') return sk__layout_unexpected(&c, err);
    c.p++;
    sk__layout_skip_ws(&c);
    if (!*c.p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "trailing comma in %s \"%s\"", c.what, q);
    if (*c.p == ',') return sk__layout_unexpected(&c, err); /* doubled comma: an empty part */
  }
  if (n != ndims)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout \"%s\" has %d dims; the shape has %d", q, n, ndims);
  return sk_layout_init(layout, mesh, ndims, shape, map, err);
}

SK_API size_t sk_layout_format(const sk_layout *layout, char *buf, size_t cap) {
  sk__layout_out o;
  sk__layout_out_init(&o, buf, cap);
  if (!layout || layout->ndims < 1 || layout->ndims > SK_MAX_DIMS || sk__mesh_sane(&layout->mesh, NULL))
    return 0;
  for (int d = 0; d < layout->ndims; d++) {
    const sk_dim_map *dm = &layout->map[d];
    if (d) sk__layout_put(&o, ",");
    if (dm->naxes == 0)
      sk__layout_put(&o, "None");
    else if (dm->naxes == 1)
      sk__layout_put(&o, "%s", layout->mesh.names[dm->axes[0]]);
    else {
      sk__layout_put(&o, "(");
      sk__layout_put_axes(&o, &layout->mesh, dm, ",");
      sk__layout_put(&o, ")");
    }
  }
  return o.len;
}

/* >>msmap -- MindSpore numbers mesh axes from the right: value v is axis naxes-1-v. */
SK_API sk_result sk_layout_from_ms_map(sk_layout *layout, const sk_mesh *mesh, int ndims, const int64_t *shape,
                                       const sk_dim_map *ms_map, sk_error *err) {
  if (!layout) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is NULL");
  if (!mesh) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh is NULL");
  if (!shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape is NULL");
  if (!ms_map) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ms_map is NULL");
  sk_result r = sk__mesh_check(mesh, err);
  if (r) return r;
  if (ndims < 1 || ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor has %d dims; allowed 1..%d", ndims, SK_MAX_DIMS);
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  int na = mesh->naxes;
  for (int d = 0; d < ndims; d++) {
    const sk_dim_map *m = &ms_map[d];
    if (m->naxes < 0 || m->naxes > na)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map dim %d has %d values; the mesh has %d axes", d,
                      m->naxes, na);
    if (m->naxes == 1 && m->axes[0] == -1) continue; /* a lone -1 is MindSpore's "unsplit" */
    for (int j = 0; j < m->naxes; j++) {
      int v = m->axes[j];
      if (v == -1)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map dim %d mixes -1 with mesh axes", d);
      if (v < -1 || v >= na)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map value %d in dim %d is out of range [-1, %d)", v, d,
                        na);
      map[d].axes[j] = na - 1 - v;
    }
    map[d].naxes = m->naxes;
  }
  return sk_layout_init(layout, mesh, ndims, shape, map, err);
}

SK_API void sk_layout_to_ms_map(const sk_layout *layout, sk_dim_map *ms_map) {
  if (!layout || !ms_map || layout->ndims < 1 || layout->ndims > SK_MAX_DIMS) return;
  for (int d = 0; d < layout->ndims; d++) {
    const sk_dim_map *dm = &layout->map[d];
    memset(&ms_map[d], 0, sizeof ms_map[d]);
    ms_map[d].naxes = dm->naxes;
    for (int j = 0; j < dm->naxes && j < SK_MAX_AXES; j++) ms_map[d].axes[j] = layout->mesh.naxes - 1 - dm->axes[j];
  }
}

/* Numeric map text: Python's tuple syntax ("(0,(1,2))", "(0,)", "[1,-1]"); one level of inner
   tuples; a trailing comma before a closing bracket is allowed, as in Python. */
SK_API sk_result sk_ms_map_parse(const char *text, sk_dim_map *ms_map, int *ndims, sk_error *err) {
  if (!text) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map text is NULL");
  if (!ms_map) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ms_map is NULL");
  if (!ndims) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "ndims is NULL");
  char q[SK__LAYOUT_CLIP];
  sk__layout_clip(q, text, (size_t)-1);
  sk__layout_cur c = {text, text, "tensor_map"};
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  uint32_t used = 0;
  int n = 0;
  sk__layout_skip_ws(&c);
  if (*c.p != '(' && *c.p != '[')
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map \"%s\" must start with '(' or '['", q);
  char close = *c.p == '(' ? ')' : ']';
  c.p++;
  for (;;) {
    sk__layout_skip_ws(&c);
    if (*c.p == close && n > 0) { /* Python's trailing comma: "(0,)" */
      c.p++;
      break;
    }
    if (n == SK_MAX_DIMS)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map \"%s\" has more than %d dims", q, SK_MAX_DIMS);
    sk_dim_map *dm = &map[n];
    bool tuple = *c.p == '(' || *c.p == '[';
    char iclose = *c.p == '(' ? ')' : ']';
    if (tuple) c.p++;
    for (;;) { /* one value, or the values of an inner tuple */
      sk__layout_skip_ws(&c);
      if (tuple && *c.p == iclose && dm->naxes > 0) break;
      if (*c.p == '(' || *c.p == '[')
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "nested '%c' at position %d in tensor_map \"%s\"", *c.p,
                        sk__layout_pos(&c), q);
      int pos = sk__layout_pos(&c);
      long long v;
      if (!sk__layout_scan_int(&c, &v)) {
        if (*c.p == close || *c.p == iclose)
          return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "empty %s at position %d in tensor_map \"%s\"",
                          tuple ? "tuple" : "tensor_map", pos, q);
        return sk__layout_unexpected(&c, err);
      }
      if (v < -1 || v >= SK_MAX_AXES)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map value %lld at position %d is out of range [-1, %d)",
                        v, pos, SK_MAX_AXES);
      if (v == -1 && tuple)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "-1 inside a tuple at position %d in tensor_map \"%s\"", pos, q);
      if (v >= 0) {
        if (used & (1u << v))
          return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "tensor_map value %lld used twice in \"%s\"", v, q);
        used |= 1u << v;
        dm->axes[dm->naxes++] = (int)v; /* bounded: each of < 8 values is used once */
      }
      if (!tuple) break;
      sk__layout_skip_ws(&c);
      if (*c.p == ',') {
        c.p++;
        continue;
      }
      if (*c.p == iclose) break;
      if (!*c.p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "missing '%c' at the end of tensor_map \"%s\"", iclose, q);
      return sk__layout_unexpected(&c, err);
    }
    if (tuple) c.p++; /* the inner closing bracket */
    n++;
    sk__layout_skip_ws(&c);
    if (*c.p == ',') {
      c.p++;
      continue;
    }
    if (*c.p == close) {
      c.p++;
      break;
    }
    if (!*c.p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "missing '%c' at the end of tensor_map \"%s\"", close, q);
    return sk__layout_unexpected(&c, err);
  }
  sk__layout_skip_ws(&c);
  if (*c.p) return sk__layout_unexpected(&c, err);
  memcpy(ms_map, map, (size_t)n * sizeof map[0]);
  *ndims = n;
  return SK_OK;
}

SK_API size_t sk_ms_map_format(const sk_dim_map *ms_map, int ndims, char *buf, size_t cap) {
  sk__layout_out o;
  sk__layout_out_init(&o, buf, cap);
  if (!ms_map || ndims < 1 || ndims > SK_MAX_DIMS) return 0;
  sk__layout_put(&o, "(");
  for (int d = 0; d < ndims; d++) {
    const sk_dim_map *m = &ms_map[d];
    if (d) sk__layout_put(&o, ",");
    if (m->naxes <= 0)
      sk__layout_put(&o, "-1");
    else if (m->naxes == 1)
      sk__layout_put(&o, "%d", m->axes[0]);
    else {
      sk__layout_put(&o, "(");
      for (int j = 0; j < m->naxes && j < SK_MAX_AXES; j++) sk__layout_put(&o, "%s%d", j ? "," : "", m->axes[j]);
      sk__layout_put(&o, ")");
    }
  }
  sk__layout_put(&o, ndims == 1 ? ",)" : ")"); /* Python writes a 1-tuple as "(0,)" */
  return o.len;
}

/* >>strategy */
SK_API sk_result sk_layout_from_strategy(sk_layout *layout, int ndevices, int ndims, const int64_t *shape,
                                         const int *strategy, sk_repeat repeat, sk_error *err) {
  if (!layout) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is NULL");
  if (!shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "shape is NULL");
  if (!strategy) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy is NULL");
  if (repeat != SK_REPEAT_RIGHT && repeat != SK_REPEAT_LEFT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "repeat is %d; use SK_REPEAT_RIGHT or SK_REPEAT_LEFT", (int)repeat);
  if (ndevices < 1 || ndevices > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%d devices; allowed 1..%d", ndevices, SK_MAX_DEVICES);
  if (ndims < 1 || ndims > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy has %d dims; allowed 1..%d", ndims, SK_MAX_DIMS);
  long long prod = 1;
  for (int d = 0; d < ndims; d++) {
    if (strategy[d] < 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy value %d for dim %d; values must be >= 1", strategy[d], d);
    prod *= strategy[d];
    if (prod > ndevices)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy product exceeds the %d devices (at dim %d)", ndevices, d);
  }
  if (ndevices % prod)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%d devices are not divisible by the strategy product %lld",
                    ndevices, prod);
  int rep = (int)(ndevices / prod);
  int naxes = ndims + (rep > 1);
  if (naxes > SK_MAX_AXES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "a %d-dim strategy plus the repeat axis needs %d mesh axes; at most %d", ndims, naxes, SK_MAX_AXES);
  int first = (rep > 1 && repeat == SK_REPEAT_LEFT) ? 1 : 0; /* mesh index of d0 */
  int dims[SK_MAX_AXES];
  char names[SK_MAX_AXES][SK_AXIS_NAME_MAX];
  const char *ptrs[SK_MAX_AXES];
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  for (int d = 0; d < ndims; d++) {
    dims[first + d] = strategy[d];
    snprintf(names[first + d], sizeof names[0], "d%d", d);
    map[d].naxes = 1;
    map[d].axes[0] = first + d;
  }
  if (rep > 1) {
    int k = first ? 0 : ndims;
    dims[k] = rep;
    memcpy(names[k], "rep", 4);
  }
  for (int k = 0; k < naxes; k++) ptrs[k] = names[k];
  sk_mesh mesh;
  sk_result r = sk_mesh_init(&mesh, naxes, dims, ptrs, err);
  if (r) return r;
  return sk_layout_init(layout, &mesh, ndims, shape, map, err);
}

/* >>slice */
static SK__UNUSED bool sk__layout_sane(const sk_layout *l) {
  return l->ndims >= 1 && l->ndims <= SK_MAX_DIMS && !sk__mesh_sane(&l->mesh, NULL);
}

SK_API int sk_layout_split_count(const sk_layout *layout, int dim) {
  if (!layout || !sk__layout_sane(layout) || dim < 0 || dim >= layout->ndims) return 0;
  int s = 1;
  const sk_dim_map *dm = &layout->map[dim];
  for (int j = 0; j < dm->naxes; j++) s *= layout->mesh.dims[dm->axes[j]];
  return s;
}

SK_API void sk_layout_slice_shape(const sk_layout *layout, int64_t *shape) {
  if (!layout || !shape || !sk__layout_sane(layout)) return;
  for (int d = 0; d < layout->ndims; d++) {
    int split = sk_layout_split_count(layout, d); /* >= 1 for a sane layout */
    shape[d] = split ? layout->shape[d] / split : 0;
  }
}

SK_API int64_t sk_slice_volume(const sk_slice *b) {
  int64_t v = 1;
  for (int d = 0; d < b->ndims; d++) v *= b->stop[d] > b->start[d] ? b->stop[d] - b->start[d] : 0;
  return v;
}

SK_API bool sk_slice_intersect(const sk_slice *a, const sk_slice *b, sk_slice *out) {
  out->ndims = a->ndims;
  for (int d = 0; d < a->ndims; d++) {
    out->start[d] = a->start[d] > b->start[d] ? a->start[d] : b->start[d];
    out->stop[d] = a->stop[d] < b->stop[d] ? a->stop[d] : b->stop[d];
    if (out->start[d] >= out->stop[d]) return false;
  }
  return true;
}

SK_API sk_result sk_layout_slice(const sk_layout *layout, int rank, sk_slice *slice, sk_error *err) {
  if (!layout) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is NULL");
  if (!slice) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "slice is NULL");
  const sk_mesh *m = &layout->mesh;
  if (!sk__layout_sane(layout))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is not initialised (%d dims, %d devices)", layout->ndims,
                    m->size);
  if (rank < 0 || rank >= m->size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "rank %d out of range [0, %d)", rank, m->size);
  int c[SK_MAX_AXES];
  for (int k = m->naxes - 1; k >= 0; k--) c[k] = rank % m->dims[k], rank /= m->dims[k];
  slice->ndims = layout->ndims;
  for (int d = 0; d < layout->ndims; d++) {
    /* Horner over the listed axes: the first listed is the most significant digit */
    const sk_dim_map *dm = &layout->map[d];
    int64_t s = 0, S = 1;
    for (int j = 0; j < dm->naxes; j++) {
      int a = dm->axes[j];
      s = s * m->dims[a] + c[a];
      S *= m->dims[a];
    }
    int64_t len = layout->shape[d] / S; /* exact: init checked divisibility; no s*L overflow */
    slice->start[d] = s * len;
    slice->stop[d] = s * len + len;
  }
  return SK_OK;
}

SK_API uint32_t sk_layout_used_axes(const sk_layout *layout) {
  uint32_t mask = 0;
  if (!layout || !sk__layout_sane(layout)) return 0;
  for (int d = 0; d < layout->ndims; d++)
    for (int j = 0; j < layout->map[d].naxes; j++) mask |= 1u << layout->map[d].axes[j];
  return mask;
}

SK_API bool sk_layout_same_slices(const sk_layout *a, const sk_layout *b) {
  if (!a || !b || a->ndims != b->ndims || a->mesh.size != b->mesh.size) return false;
  for (int d = 0; d < a->ndims; d++)
    if (a->shape[d] != b->shape[d]) return false;
  sk_slice x, y; /* zeroed once: the analyzer cannot see that a successful slice sets every dim */
  memset(&x, 0, sizeof x), memset(&y, 0, sizeof y);
  for (int r = 0; a->ndims > 0 && r < a->mesh.size; r++) {
    if (sk_layout_slice(a, r, &x, NULL) || sk_layout_slice(b, r, &y, NULL)) return false;
    for (int d = 0; d < a->ndims; d++)
      if (x.start[d] != y.start[d] || x.stop[d] != y.stop[d]) return false;
  }
  return true;
}

/* Ranks agreeing on every used axis hold the same slice (MindSpore's GetDevicesByTensorMap). */
static SK__UNUSED uint32_t sk__layout_replica_mask(const sk_layout *l) {
  return ((1u << l->mesh.naxes) - 1u) & ~sk_layout_used_axes(l);
}

SK_API sk_result sk_layout_replica_group(const sk_layout *layout, int rank, int *ranks, int cap, int *n,
                                         sk_error *err) {
  if (!layout) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is NULL");
  if (!sk__layout_sane(layout))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is not initialised (%d dims)", layout->ndims);
  return sk_mesh_group(&layout->mesh, rank, sk__layout_replica_mask(layout), ranks, cap, n, err);
}

SK_API sk_result sk_layout_replica_groups(const sk_layout *layout, int *ranks, int cap, int *ngroups,
                                          int *group_size, sk_error *err) {
  if (!layout) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is NULL");
  if (!sk__layout_sane(layout))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is not initialised (%d dims)", layout->ndims);
  return sk_mesh_groups(&layout->mesh, sk__layout_replica_mask(layout), ranks, cap, ngroups, group_size, err);
}

/* >>standard -- MindSpore's TensorLayout::InitFromExtendVector then
   RemoveElementEqualToOneInDeviceArrangement. */
SK_API sk_result sk_layout_standard(const sk_layout *in, sk_layout *out, sk_error *err) {
  if (!in) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "input layout is NULL");
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "output layout is NULL");
  if (!sk__layout_sane(in))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "layout is not initialised (%d dims)", in->ndims);
  const sk_mesh *m = &in->mesh;
  /* 1. a dim on axes (a0..a_{t-1}) becomes sub-dims [d(a0), .., d(a_{t-2}), L/prod] on a0..a_{t-1} */
  int64_t shape[SK_MAX_DIMS];
  int axis[SK_MAX_DIMS]; /* old mesh axis of each new dim, -1 = unsplit */
  int nd = 0;
  for (int d = 0; d < in->ndims; d++) {
    const sk_dim_map *dm = &in->map[d];
    int need = dm->naxes > 1 ? dm->naxes : 1;
    if (nd + need > SK_MAX_DIMS)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "standard form needs more than %d dims (tuples expand into one dim per axis; at dim %d)",
                      SK_MAX_DIMS, d);
    if (dm->naxes == 0) {
      shape[nd] = in->shape[d];
      axis[nd++] = -1;
      continue;
    }
    int64_t rest = in->shape[d];
    for (int j = 0; j < dm->naxes - 1; j++) {
      int a = dm->axes[j];
      shape[nd] = m->dims[a];
      axis[nd++] = a;
      rest /= m->dims[a];
    }
    shape[nd] = rest;
    axis[nd++] = dm->axes[dm->naxes - 1];
  }
  /* 2. drop size-1 axes and renumber; an all-ones mesh keeps one axis of size 1 */
  sk_mesh sm;
  memset(&sm, 0, sizeof sm);
  int renum[SK_MAX_AXES];
  for (int k = 0; k < m->naxes; k++) {
    renum[k] = -1;
    if (m->dims[k] == 1) continue;
    renum[k] = sm.naxes;
    sm.dims[sm.naxes] = m->dims[k];
    memcpy(sm.names[sm.naxes], m->names[k], sizeof sm.names[0]);
    sm.naxes++;
  }
  if (sm.naxes == 0) {
    sm.naxes = 1;
    sm.dims[0] = 1;
    memcpy(sm.names[0], m->names[0], sizeof sm.names[0]);
  }
  sm.size = m->size;
  sk_dim_map map[SK_MAX_DIMS];
  memset(map, 0, sizeof map);
  for (int d = 0; d < nd; d++)
    if (axis[d] >= 0 && renum[axis[d]] >= 0) {
      map[d].naxes = 1;
      map[d].axes[0] = renum[axis[d]];
    }
  return sk_layout_init(out, &sm, nd, shape, map, err);
}

/* >>table -- two passes: measure every column over all ranks, then print aligned. */
static SK__UNUSED void sk__layout_put_coords(sk__layout_out *o, const sk_mesh *m, int rank) {
  int c[SK_MAX_AXES] = {0};
  sk_mesh_coords(m, rank, c, NULL);
  sk__layout_put(o, "(");
  for (int k = 0; k < m->naxes; k++) sk__layout_put(o, "%s%d", k ? "," : "", c[k]);
  sk__layout_put(o, ")");
}

SK_API size_t sk_layout_format_table(const sk_layout *layout, const char *name, char *buf, size_t cap) {
  sk__layout_out o;
  sk__layout_out_init(&o, buf, cap);
  if (!layout || !sk__layout_sane(layout)) return 0;
  const sk_mesh *m = &layout->mesh;
  const char *tn = name && *name ? name : "tensor";
  int nd = layout->ndims;
  sk__layout_out z; /* a counting-only writer to measure cells */
  /* header: x[16,784] on mesh dp=2,sp=2,mp=2 (8 devices), layout "mp,(sp,dp)", tensor_map (0,(1,2)) */
  char text[SK_MAX_DIMS * (SK_MAX_AXES * SK_AXIS_NAME_MAX + 4) + 8];
  sk_dim_map ms[SK_MAX_DIMS];
  memset(ms, 0, sizeof ms);
  sk__layout_put(&o, "%s[", tn);
  for (int d = 0; d < nd; d++) sk__layout_put(&o, "%s%lld", d ? "," : "", (long long)layout->shape[d]);
  sk__layout_put(&o, "] on mesh ");
  sk__mesh_put(&o, m);
  sk_layout_format(layout, text, sizeof text);
  sk__layout_put(&o, " (%d devices), layout \"%s\", tensor_map ", m->size, text);
  sk_layout_to_ms_map(layout, ms);
  sk_ms_map_format(ms, nd, text, sizeof text);
  sk__layout_put(&o, "%s\n", text);
  /* column widths: rank, coords, one per dim, slice shape */
  size_t w_rank = 4, w_coords, w_dim[SK_MAX_DIMS]; /* the last column, the slice shape, needs no width */
  sk__layout_out_init(&z, NULL, 0);
  sk__layout_put(&z, "(");
  for (int k = 0; k < m->naxes; k++) sk__layout_put(&z, "%s%s", k ? "," : "", m->names[k]);
  sk__layout_put(&z, ")");
  w_coords = z.len;
  for (int d = 0; d < nd; d++) {
    sk__layout_out_init(&z, NULL, 0);
    sk__layout_put(&z, "%s dim %d", tn, d);
    w_dim[d] = z.len;
  }
  for (int r = 0; r < m->size; r++) {
    sk_slice s;
    memset(&s, 0, sizeof s);
    sk_layout_slice(layout, r, &s, NULL);
    sk__layout_out_init(&z, NULL, 0);
    sk__layout_put(&z, "%d", r);
    if (z.len > w_rank) w_rank = z.len;
    sk__layout_out_init(&z, NULL, 0);
    sk__layout_put_coords(&z, m, r);
    if (z.len > w_coords) w_coords = z.len;
    for (int d = 0; d < nd; d++) {
      sk__layout_out_init(&z, NULL, 0);
      sk__layout_put(&z, "[%lld,%lld)", (long long)s.start[d], (long long)s.stop[d]);
      if (z.len > w_dim[d]) w_dim[d] = z.len;
    }
  }
  int64_t shape[SK_MAX_DIMS] = {0}; /* every rank's slice shape (the last column) */
  sk_layout_slice_shape(layout, shape);
  /* column titles */
  size_t at;
  sk__layout_put(&o, "%*s  ", (int)w_rank, "rank");
  at = o.len;
  sk__layout_put(&o, "(");
  for (int k = 0; k < m->naxes; k++) sk__layout_put(&o, "%s%s", k ? "," : "", m->names[k]);
  sk__layout_put(&o, ")");
  sk__layout_pad(&o, at, w_coords);
  for (int d = 0; d < nd; d++) {
    sk__layout_put(&o, "  ");
    at = o.len;
    sk__layout_put(&o, "%s dim %d", tn, d);
    sk__layout_pad(&o, at, w_dim[d]);
  }
  sk__layout_put(&o, "  slice shape\n");
  /* rows */
  for (int r = 0; r < m->size; r++) {
    sk_slice s;
    sk_layout_slice(layout, r, &s, NULL);
    sk__layout_put(&o, "%*d  ", (int)w_rank, r);
    at = o.len;
    sk__layout_put_coords(&o, m, r);
    sk__layout_pad(&o, at, w_coords);
    for (int d = 0; d < nd; d++) {
      sk__layout_put(&o, "  ");
      at = o.len;
      sk__layout_put(&o, "[%lld,%lld)", (long long)s.start[d], (long long)s.stop[d]);
      sk__layout_pad(&o, at, w_dim[d]);
    }
    sk__layout_put(&o, "  [");
    for (int d = 0; d < nd; d++) sk__layout_put(&o, "%s%lld", d ? "," : "", (long long)shape[d]);
    sk__layout_put(&o, "]\n");
  }
  return o.len;
}

#endif /* SK_LAYOUT_IMPL */
