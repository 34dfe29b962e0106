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
/* Every group along axis_mask: *ngroups groups of *group_size ranks, stored one after another in
   ranks (cap >= mesh->size), ascending within a group, groups ordered by their first rank. */
SK_API sk_result sk_mesh_groups(const sk_mesh *mesh, uint32_t axis_mask, int *ranks, int cap, int *ngroups,
                                int *group_size, sk_error *err);

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
/* Mask of the mesh axes the map uses; the others replicate the tensor. */
SK_API uint32_t sk_layout_used_axes(const sk_layout *layout);
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

/* (implementation goes here) */

#endif /* SK_LAYOUT_IMPL */
