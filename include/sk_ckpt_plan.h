/* sk_ckpt_plan.h -- checkpoint planning without any file: which box of a parameter a device
   holds, which device writes it, which saved slices a target box reads, and MindSpore's rank list
   for loading a distributed checkpoint. Needs only libc (sk_ckpt.h, which reads and writes the
   files, adds zlib and liburing; it includes this header, so its users need nothing more).

   Do this in ONE .c file:   #define SK_IMPL  (or SK_CKPT_PLAN_IMPL)   #include "sk_ckpt_plan.h"
   shardkit.h includes it, so SK_IMPL there implements it; sk_ckpt.h's own SK_CKPT_IMPL does not
   (like the other modules sk_ckpt.h builds on).

   WHAT IS HERE
     sk_ckpt_box              the box of a parameter a rank holds (its optimizer shard's rows)
     sk_ckpt_writes           whether a rank is the round-robin owner that saves a box
     sk_ckpt_read_plan        the saved slices (manifest entries) tiling a target box
     sk_ckpt_infer_rank_list  MindSpore's _infer_rank_list: the training ranks whose files a
                              load reads for one parameter, and whether the slice is taken as
                              saved (no merge or split)
     and the manifest's types, which sk_ckpt.h reads and writes (docs/checkpoints.md).

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_CKPT_PLAN_IMPL)
#define SK_CKPT_PLAN_IMPL
#endif
#ifndef SK_CKPT_PLAN_H
#define SK_CKPT_PLAN_H

#include "sk_core.h"
#include "sk_layout.h"
#include "sk_redundancy.h"

SK_EXTERN_C_BEGIN

#define SK_CKPT_BLOCK ((uint32_t)1 << 20) /* bytes per checksummed block */
#define SK_CKPT_ALIGN 4096                /* each slice's offset in its rank file */
#define SK_CKPT_NAME_MAX 128              /* tensor names, 1..127 bytes, no blank */
#define SK_CKPT_FILE_MAX 64               /* file and checkpoint names */

typedef enum sk_ckpt_kind { SK_CKPT_PARAM = 0, SK_CKPT_STATE0, SK_CKPT_STATE1, SK_CKPT_KINDS } sk_ckpt_kind;
SK_API const char *sk_ckpt_kind_name(sk_ckpt_kind k); /* "param", "state0", "state1" ("?") */

/* One slice on this device, for saving (written when `write`) and loading (filled). data holds
   the box's elements, row-major inside the box. */
typedef struct sk_ckpt_slice {
  const char *tensor;
  sk_ckpt_kind kind;
  sk_dtype dtype;
  int ndims;
  int64_t shape[SK_MAX_DIMS]; /* the whole tensor's */
  sk_slice box;
  void *data;
  bool write;
} sk_ckpt_slice;

typedef struct sk_ckpt_file {
  char name[SK_CKPT_FILE_MAX];
  uint64_t size;
  uint32_t crc;
  int nblocks;
  uint32_t *blocks; /* crc32 of each SK_CKPT_BLOCK bytes (the last: what is left) */
} sk_ckpt_file;

typedef struct sk_ckpt_entry {
  char tensor[SK_CKPT_NAME_MAX];
  sk_ckpt_kind kind;
  sk_dtype dtype;
  int ndims;
  int64_t shape[SK_MAX_DIMS];
  sk_slice box;
  int file; /* index into files */
  uint64_t offset, length;
  int rank; /* the device that wrote it */
} sk_ckpt_entry;

typedef struct sk_ckpt_manifest {
  char dir[4096];                 /* the checkpoint directory it was read from ("" when built) */
  char name[SK_CKPT_FILE_MAX];    /* ckpt-<step> */
  int64_t step, position;
  int devices;
  uint32_t block;
  char optimizer[16];             /* the saving run's, as sk_optim_kind_name spells it (sgd,
                                     momentum, adam); "" unknown: a version-1 manifest, or a save
                                     whose desc gave none */
  int nfiles, nentries;
  sk_ckpt_file *files;
  sk_ckpt_entry *entries;
  /* What its arrays came from, and what every call on it allocates from (load, verify, merge,
     the texts of format and read_strategy): sk_ckpt_open_with's (a save's: its desc's); zero =
     the C library, as sk_ckpt_open, sk_ckpt_open_dir and sk_ckpt_manifest_parse leave it. */
  sk_allocator allocator;
} sk_ckpt_manifest;

/* ---- pure planning ------------------------------------------------------------------------ */

/* The box of a parameter laid out as l on `rank`: its slice, dim 0 narrowed to the rows of its
   optimizer shard when opt_size > 1 (the rank at position i of its replica group keeps chunk
   i % opt_size, as sk_opt_shard.h says). */
SK_API sk_result sk_ckpt_box(const sk_layout *l, int opt_size, int rank, sk_slice *box, sk_error *err);
/* Whether `rank` writes params[which]'s box: its round-robin owner among the devices holding the
   same box (sk_redundancy_owner with params[].opt_shard_size, initial rank 0). */
SK_API sk_result sk_ckpt_writes(int n, const sk_redundancy_param *params, int which, int rank, bool *writes,
                                sk_error *err);

/* One piece of a load: entry `entry` of the manifest gives `box` (global coordinates) of a target. */
typedef struct sk_ckpt_piece {
  int entry;
  sk_slice box;
} sk_ckpt_piece;
/* The pieces tiling target t (at most cap in pieces; *n of them). Fails naming the tensor, kind
   and `rank` when the saved slices do not cover the box exactly once, the shape differs, or the
   dtypes differ and are not both floating. */
SK_API sk_result sk_ckpt_read_plan(const sk_ckpt_manifest *m, const sk_ckpt_slice *t, int rank, sk_ckpt_piece *pieces,
                                   int cap, int *n, sk_error *err);

/* MindSpore's _infer_rank_list (mindspore/parallel/_utils.py) for one parameter: saved with
   layout `train` (one file per training rank), loaded for layout `predict` (NULL: standalone, no
   predict layout) by the device of global rank `rank`. ranks[0..*n) receives the training ranks
   whose slices the load reads: one rank per distinct slice (coordinate 0 on every mesh axis the
   map does not use), ascending; *as_saved says whether the slice is used as saved, without
   merging or splitting (MindSpore's second value). With a predict layout:
     the same layout (mesh shape and map)        -> [rank], as saved;
     a similar one (the same map, and every used axis the same size): one distinct slice -> it,
       as saved; as many as the predict devices -> [ranks[rank]], as saved; else all, merged;
     anything else                                -> all, merged.
   Fails when cap is too small, or rank is outside the predict devices where it is used. */
SK_API sk_result sk_ckpt_infer_rank_list(const sk_layout *train, const sk_layout *predict, int rank, int *ranks, int cap,
                                         int *n, bool *as_saved, sk_error *err);

SK_EXTERN_C_END
#endif /* SK_CKPT_PLAN_H */

#if defined(SK_CKPT_PLAN_IMPL) && !defined(SK_CKPT_PLAN_IMPL_DONE)
#define SK_CKPT_PLAN_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <string.h>

SK_EXTERN_C_BEGIN

static const char *const sk__ckpt_kinds[SK_CKPT_KINDS] = {"param", "state0", "state1"};

SK_API const char *sk_ckpt_kind_name(sk_ckpt_kind k) {
  return (int)k >= 0 && k < SK_CKPT_KINDS ? sk__ckpt_kinds[k] : "?";
}

/* ---- boxes ---------------------------------------------------------------------------------- */

SK_API sk_result sk_ckpt_box(const sk_layout *l, int opt_size, int rank, sk_slice *box, sk_error *err) {
  if (!l || !box || opt_size < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_box: NULL or opt_size < 0");
  sk_result r = sk_layout_slice(l, rank, box, err);
  if (r || opt_size <= 1) return r;
  int ranks[SK_MAX_DEVICES], n = 0, pos = -1;
  if ((r = sk_layout_replica_group(l, rank, ranks, SK_MAX_DEVICES, &n, err))) return r;
  for (int i = 0; i < n; i++)
    if (ranks[i] == rank) pos = i;
  int64_t rows = box->stop[0] - box->start[0];
  if (pos < 0 || n % opt_size || rows % opt_size || box->ndims < 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_box: %d optimizer shards do not divide %d replicas of %lld rows",
                    opt_size, n, (long long)rows);
  int64_t chunk = rows / opt_size;
  box->start[0] += (pos % opt_size) * chunk;
  box->stop[0] = box->start[0] + chunk;
  return SK_OK;
}

SK_API sk_result sk_ckpt_writes(int n, const sk_redundancy_param *params, int which, int rank, bool *writes,
                                sk_error *err) {
  if (!writes) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_writes: writes is NULL");
  int owner = -1;
  sk_result r = sk_redundancy_owner(n, params, which, rank, 0, &owner, err);
  if (r) return r;
  if (owner < 0) /* MindSpore drops a group K does not divide: here that is an error, not a lost slice */
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_writes: '%s' has no redundancy group holding rank %d",
                    params[which].name, rank);
  *writes = owner == rank;
  return SK_OK;
}

/* Whether entry e is target t's tensor and kind; a shape or dtype mismatch is an error. */
static sk_result sk__ckpt_match(const sk_ckpt_entry *e, const sk_ckpt_slice *t, int rank, bool *match, sk_error *err) {
  *match = !strcmp(e->tensor, t->tensor) && e->kind == t->kind;
  if (!*match) return SK_OK;
  /* floating dtypes convert into each other (MindSpore's non-strict load); others must agree */
  bool same = e->ndims == t->ndims && (e->dtype == t->dtype || (sk_dtype_is_float(e->dtype) && sk_dtype_is_float(t->dtype)));
  for (int d = 0; same && d < t->ndims; d++) same = e->shape[d] == t->shape[d];
  if (!same)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: tensor '%s' %s (rank %d): saved as %s of %d dims, wanted %s of %d dims or another shape",
                    t->tensor, sk_ckpt_kind_name(t->kind), rank, sk_dtype_name(e->dtype), e->ndims, sk_dtype_name(t->dtype), t->ndims);
  return SK_OK;
}

SK_API sk_result sk_ckpt_read_plan(const sk_ckpt_manifest *m, const sk_ckpt_slice *t, int rank, sk_ckpt_piece *pieces,
                                   int cap, int *n, sk_error *err) {
  if (!m || !t || !t->tensor || !n || (cap && !pieces))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_read_plan: NULL argument");
  int64_t covered = 0;
  *n = 0;
  for (int i = 0; i < m->nentries; i++) {
    bool match = false;
    sk_result r = sk__ckpt_match(&m->entries[i], t, rank, &match, err);
    if (r) return r;
    sk_slice x;
    if (!match || !sk_slice_intersect(&m->entries[i].box, &t->box, &x)) continue;
    if (*n == cap)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: tensor '%s' %s (rank %d): more than %d saved pieces",
                      t->tensor, sk_ckpt_kind_name(t->kind), rank, cap);
    pieces[*n].entry = i, pieces[*n].box = x, (*n)++;
    covered += sk_slice_volume(&x);
  }
  /* the pieces are disjoint when the saved boxes are (verify checks that), so the volumes add up
     to the box's exactly when they tile it */
  int64_t want = sk_slice_volume(&t->box);
  if (covered != want)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "checkpoint: tensor '%s' %s (rank %d): %s: the saved slices hold %lld of its %lld elements",
                    t->tensor, sk_ckpt_kind_name(t->kind), rank, covered ? "slice missing" : "missing",
                    (long long)covered, (long long)want);
  return SK_OK;
}

/* ---- MindSpore's rank list ------------------------------------------------------------------- */

/* Whether mesh axis k (from the left) cuts some dim of l. */
static bool sk__ckpt_axis_used(const sk_layout *l, int k) {
  for (int d = 0; d < l->ndims; d++)
    for (int j = 0; j < l->map[d].naxes; j++)
      if (l->map[d].axes[j] == k) return true;
  return false;
}

/* MindSpore compares tensor maps as numbers counted from the right of the device matrix. */
static bool sk__ckpt_same_map(const sk_layout *a, const sk_layout *b) {
  if (a->ndims != b->ndims) return false;
  for (int d = 0; d < a->ndims; d++) {
    if (a->map[d].naxes != b->map[d].naxes) return false;
    for (int j = 0; j < a->map[d].naxes; j++)
      if (a->mesh.naxes - 1 - a->map[d].axes[j] != b->mesh.naxes - 1 - b->map[d].axes[j]) return false;
  }
  return true;
}

/* _check_similar_layout: the same map, and every axis it uses the same size in both. */
static bool sk__ckpt_similar(const sk_layout *a, const sk_layout *b) {
  if (!sk__ckpt_same_map(a, b)) return false;
  for (int d = 0; d < a->ndims; d++)
    for (int j = 0; j < a->map[d].naxes; j++)
      if (a->mesh.dims[a->map[d].axes[j]] != b->mesh.dims[b->map[d].axes[j]]) return false;
  return true;
}

static bool sk__ckpt_same_layout(const sk_layout *a, const sk_layout *b) {
  if (a->mesh.naxes != b->mesh.naxes || !sk__ckpt_same_map(a, b)) return false;
  for (int k = 0; k < a->mesh.naxes; k++)
    if (a->mesh.dims[k] != b->mesh.dims[k]) return false;
  return true;
}

/* _remove_repeated_slices + the row-major walk: the ranks at coordinate 0 of every unused axis. */
static sk_result sk__ckpt_distinct_ranks(const sk_layout *l, int *ranks, int cap, int *n, sk_error *err) {
  *n = 0;
  for (int r = 0; r < l->mesh.size; r++) {
    int rest = r;
    bool first = true;
    for (int k = l->mesh.naxes - 1; k >= 0; k--) {
      if (rest % l->mesh.dims[k] && !sk__ckpt_axis_used(l, k)) first = false;
      rest /= l->mesh.dims[k];
    }
    if (!first) continue;
    if (*n == cap) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_infer_rank_list: more than %d ranks (cap)", cap);
    ranks[(*n)++] = r;
  }
  return SK_OK;
}

SK_API sk_result sk_ckpt_infer_rank_list(const sk_layout *train, const sk_layout *predict, int rank, int *ranks, int cap,
                                         int *n, bool *as_saved, sk_error *err) {
  if (!train || !ranks || !n || !as_saved || cap < 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_infer_rank_list: NULL argument or cap < 1");
  int count = 0;
  sk_result r = sk__ckpt_distinct_ranks(train, ranks, cap, &count, err);
  if (r) return r;
  *n = count, *as_saved = false;
  if (!predict) return SK_OK;
  bool same = sk__ckpt_same_layout(train, predict), similar = !same && sk__ckpt_similar(train, predict);
  bool pick = same || (similar && count > 1 && count == predict->mesh.size);
  if (pick && (rank < 0 || rank >= predict->mesh.size))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_infer_rank_list: rank %d is not one of the %d predict devices",
                    rank, predict->mesh.size);
  if (same) ranks[0] = rank, *n = 1, *as_saved = true;
  else if (pick) ranks[0] = ranks[rank], *n = 1, *as_saved = true;
  else if (similar && count == 1) *as_saved = true;
  return SK_OK;
}

SK_EXTERN_C_END
#endif /* SK_CKPT_PLAN_IMPL */
