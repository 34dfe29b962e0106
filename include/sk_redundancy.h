/* sk_redundancy.h -- which devices hold the same copy of a parameter, which one of them is its
   owner, and MindSpore's parameter_broadcast: every replica of every parameter made equal to its
   owner's copy.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_REDUNDANCY_IMPL)   #include "sk_redundancy.h"
   Needs libc and sk_comm.h / sk_layout.h (plus whatever backend the communicator runs on).
   The group and owner calls allocate nothing; sk_parameter_broadcast allocates a few small
   arrays through the world's allocator and frees them before it returns.

   WHAT IT IS (MindSpore's mindspore.train.utils and mindspore.parallel.parameter_broadcast)
     Redundancy groups. A parameter laid out over a mesh of P devices is held identically by
     every device that agrees with another on the coordinates of the mesh axes its layout uses;
     such a set of devices is a redundancy group. Ranks are positions in the mesh plus
     `initial_rank` (the first rank of the mesh, e.g. of a pipeline stage). Inside a group the
     ranks ascend. The groups come in MindSpore's order: ascending lexicographic order of a key
     whose entry 0 is the coordinate on the LAST mesh axis (if that axis is used), entry 1 the
     one before it, and so on -- so NOT in the order of their first ranks: mesh (2,2,2) with
     axes 0 and 2 used gives (0,2) (4,6) (1,3) (5,7).
     Optimizer sharding. With opt_shard_size K > 1 every group g is replaced by its K strided
     parts g[0::K], g[1::K], ..., g[K-1::K] (in that order), but only when K divides the
     group's length; otherwise the group is dropped (MindSpore drops it silently; here the call
     reports zero groups). K 0 or 1: no optimizer sharding.
     Owners (MindSpore's remove_param_redundancy). Take the parameters in name order (strcmp;
     names must be unique). For each group G (a tuple of ranks), the i-th parameter having G
     among its groups is owned by rank G[i % len(G)]: round robin, so the saving work spreads
     over the group. keep_redundancy k repeats this with G rotated left by 0, 1, ..., k-1 and
     takes the union: k owners per group where the group is that long.
     Initial rank. MindSpore's default is (rank / P) * P, P = the device count of the FIRST
     parameter's mesh (the first one the caller passes, as MindSpore reads the first entry of
     its layout dict); a negative initial_rank asks for it wherever one is taken.

   THE BROADCAST (sk_parameter_broadcast)
     For each parameter, in name order, the device's group (when it has more than one rank)
     runs MindSpore's zero-then-AllReduce: every member but the owner zeroes its copy, then one
     AllReduce(SUM) over the group leaves the owner's values on every member (x + 0 == x; only a
     -0.0 of the owner's becomes +0.0 on floating dtypes). The group communicators are split
     from `comm` once per distinct grouping (sk_comm_split, color = the group's first rank),
     reused by every parameter grouped the same way, and destroyed before the call returns.
     MindSpore runs one AllReduce graph per group holding all its parameters; shardkit runs one
     AllReduce per parameter on that group: the same sums.
     DEVIATION: MindSpore returns at once on a device that owns no parameter, skipping its
     collectives while its peers wait for it in them. shardkit's devices always take part.
     It is collective over `comm`: every member calls it with the same parameters (names,
     layouts, opt_shard_size) in any order, and comm's rank r is the mesh position r
     (cur_rank = initial_rank + r). Before any group is built, the members agree on the
     arguments with one small AllReduce over comm, so a device that rejects its arguments
     (or fails to allocate its plan) makes every member return an error, with its code,
     instead of leaving them waiting.
     `data` is this device's slice in host memory (memset zeroes it): the threads and MPI
     backends.

   ERRORS
     Every fallible call returns sk_result; `err` (may be NULL) receives a message naming the
     call, the parameter and the argument: "sk_parameter_broadcast: parameter 'fc1.weight':
     count 100 is not its slice's 12544 elements". Bad input is SK_ERR_INVALID_ARGUMENT;
     SK_ERR_OUT_OF_MEMORY when the allocator fails; a collective's failure keeps its code (and
     the communicator's message). Nothing leaks on any path.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_REDUNDANCY_IMPL)
#define SK_REDUNDANCY_IMPL
#endif
#ifndef SK_REDUNDANCY_H
#define SK_REDUNDANCY_H

#include "sk_core.h"
#include "sk_layout.h"
#include "sk_comm.h"

SK_EXTERN_C_BEGIN

/* A parameter as the group and owner calls see it (MindSpore's parameter_layout_dict entry).
   opt_shard_size: the K of the optimizer-shard group ("4-..." -> 4); 0 or 1 = none. */
typedef struct sk_redundancy_param {
  const char *name;
  sk_layout layout;
  int opt_shard_size;
} sk_redundancy_param;

/* A parameter for sk_parameter_broadcast: the same three fields, and this device's slice of it
   (count elements of dtype, count == the layout's slice element count, divided by
   opt_shard_size when that is above 1: the device holds its optimizer shard; data may be NULL
   only when count is 0). */
typedef struct sk_bcast_param {
  const char *name;
  sk_layout layout;
  int opt_shard_size;
  void *data;
  size_t count;
  sk_dtype dtype;
} sk_bcast_param;

/* MindSpore's default initial rank: (rank / P) * P with P = first->mesh.size. -1 for a NULL or
   uninitialised layout, or a negative rank. */
SK_API int sk_redundancy_initial_rank(const sk_layout *first, int rank);

/* The redundancy groups of a parameter laid out as l, ranks offset by initial_rank (>= 0), then
   split for opt_shard_size (>= 0) as WHAT IT IS says. Output: *ngroups groups of *group_size
   ranks each, one after another in ranks (cap entries; l->mesh.size is always enough), in
   MindSpore's order. All groups dropped: *ngroups == *group_size == 0. */
SK_API sk_result sk_redundancy_groups(const sk_layout *l, int opt_shard_size, int initial_rank, int *ranks, int cap,
                                      int *ngroups, int *group_size, sk_error *err);

/* remove_param_redundancy, one parameter and one rank at a time, with keep_redundancy 1:
   *owner = the rank owning params[which] in the group that holds `rank`, or -1 when no group of
   that parameter holds `rank` (outside [initial_rank, initial_rank + P), or its group was
   dropped). initial_rank < 0: the default, from params[0] and rank. */
SK_API sk_result sk_redundancy_owner(int n, const sk_redundancy_param *params, int which, int rank, int initial_rank,
                                     int *owner, sk_error *err);
/* Whether params[which] is in remove_param_redundancy(groups, keep_redundancy)[rank]: `rank` is
   its owner in its group for some rotation 0..keep_redundancy-1 (keep_redundancy >= 1). */
SK_API sk_result sk_redundancy_owns(int n, const sk_redundancy_param *params, int which, int rank, int initial_rank,
                                    int keep_redundancy, bool *owns, sk_error *err);

/* MindSpore's parameter_broadcast(net, layout, cur_rank, initial_rank) over comm (collective:
   see THE BROADCAST). cur_rank: this device's global rank, initial_rank + sk_comm_rank(comm);
   initial_rank < 0: the default, from params[0] and cur_rank. Every parameter's mesh has
   sk_comm_size(comm) devices. n == 0 does nothing (but still agrees with the peers). */
SK_API sk_result sk_parameter_broadcast(sk_comm *comm, int n, const sk_bcast_param *params, int cur_rank,
                                        int initial_rank, sk_error *err);

SK_EXTERN_C_END

#endif /* SK_REDUNDANCY_H */

/* ==== implementation ======================================================================== */
#if defined(SK_REDUNDANCY_IMPL) && !defined(SK_REDUNDANCY_IMPL_DONE)
#define SK_REDUNDANCY_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include "sk_backend.h" /* sk_world_config: the world's allocator */
#include <limits.h>
#include <string.h>

SK_EXTERN_C_BEGIN

/* >>shape -- a layout's grouping, computed on the fly: nothing is stored, so the group and
   owner calls need no memory however large the mesh. A position's "unused index" is its
   row-major index over the unused axes alone; it orders a base group's members ascending. */
typedef struct sk__rdn_shape {
  const sk_layout *l;
  int naxes;      /* l->mesh.naxes, bounded by SK_MAX_AXES for the analyzer's sake */
  uint32_t used;  /* mesh axes the layout uses */
  int K;          /* optimizer-shard size, 1 = none */
  int S;          /* base group length: product of the unused axes */
  int G;          /* base groups: product of the used axes */
  int L;          /* final group length (S / K), 0 when the groups are dropped */
} sk__rdn_shape;

/* A layout sk_layout's builders could have produced; the calls below trust nothing else. */
static SK__UNUSED bool sk__rdn_layout_ok(const sk_layout *l) {
  const sk_mesh *m = &l->mesh;
  if (m->naxes < 1 || m->naxes > SK_MAX_AXES || l->ndims < 1 || l->ndims > SK_MAX_DIMS) return false;
  long long size = 1;
  for (int k = 0; k < m->naxes; k++) {
    if (m->dims[k] < 1) return false;
    size *= m->dims[k];
    if (size > SK_MAX_DEVICES) return false;
  }
  if (size != m->size) return false;
  for (int d = 0; d < l->ndims; d++) {
    if (l->map[d].naxes < 0 || l->map[d].naxes > m->naxes) return false;
    for (int j = 0; j < l->map[d].naxes; j++)
      if (l->map[d].axes[j] < 0 || l->map[d].axes[j] >= m->naxes) return false;
  }
  return true;
}

static SK__UNUSED sk__rdn_shape sk__rdn_shape_of(const sk_layout *l, int opt_shard_size) {
  sk__rdn_shape s;
  s.l = l;
  s.naxes = l->mesh.naxes < 0 ? 0 : l->mesh.naxes > SK_MAX_AXES ? SK_MAX_AXES : l->mesh.naxes;
  s.used = 0;
  for (int d = 0; d < l->ndims; d++)
    for (int j = 0; j < l->map[d].naxes; j++) s.used |= 1u << l->map[d].axes[j];
  s.K = opt_shard_size > 1 ? opt_shard_size : 1;
  s.S = s.G = 1;
  for (int k = 0; k < s.naxes; k++) {
    if (s.used & (1u << k))
      s.G *= l->mesh.dims[k];
    else
      s.S *= l->mesh.dims[k];
  }
  s.L = s.S % s.K == 0 ? s.S / s.K : 0;
  return s;
}

/* Position p's coordinates and its unused index. */
static SK__UNUSED int sk__rdn_coords(const sk__rdn_shape *s, int p, int *c) {
  const sk_mesh *m = &s->l->mesh;
  for (int k = s->naxes - 1; k >= 0; k--) c[k] = p % m->dims[k], p /= m->dims[k];
  int u = 0;
  for (int k = 0; k < s->naxes; k++)
    if (!(s->used & (1u << k))) u = u * m->dims[k] + c[k];
  return u;
}

static SK__UNUSED int sk__rdn_pos(const sk__rdn_shape *s, const int *c) {
  int p = 0;
  for (int k = 0; k < s->naxes; k++) p = p * s->l->mesh.dims[k] + c[k];
  return p;
}

/* The k-th member (0 <= k < s->L) of position p's group: same used coordinates, unused index
   j + k*K where j is p's part (its unused index mod K). */
static SK__UNUSED int sk__rdn_member(const sk__rdn_shape *s, int p, int k) {
  const sk_mesh *m = &s->l->mesh;
  int c[SK_MAX_AXES];
  int u = sk__rdn_coords(s, p, c);
  int idx = u % s->K + k * s->K;
  for (int a = s->naxes - 1; a >= 0; a--)
    if (!(s->used & (1u << a))) c[a] = idx % m->dims[a], idx /= m->dims[a];
  return sk__rdn_pos(s, c);
}

/* Whether positions p and q share a group: the same used coordinates and the same part. */
static SK__UNUSED bool sk__rdn_same(const sk__rdn_shape *s, int p, int q) {
  int cp[SK_MAX_AXES], cq[SK_MAX_AXES];
  int up = sk__rdn_coords(s, p, cp), uq = sk__rdn_coords(s, q, cq);
  for (int k = 0; k < s->naxes; k++)
    if ((s->used & (1u << k)) && cp[k] != cq[k]) return false;
  return up % s->K == uq % s->K;
}

SK_API int sk_redundancy_initial_rank(const sk_layout *first, int rank) {
  if (!first || !sk__rdn_layout_ok(first) || rank < 0) return -1;
  return rank / first->mesh.size * first->mesh.size;
}

/* >>groups -- base group g (0 <= g < G) decodes g into the used axes' coordinates with the
   LOWEST used axis the fastest digit: that makes the last mesh axis the most significant,
   which is MindSpore's key order. Its members walk the unused axes row-major (ascending). */
static SK__UNUSED void sk__rdn_emit(const sk__rdn_shape *s, int initial_rank, int *ranks) {
  const sk_mesh *m = &s->l->mesh;
  const int na = s->naxes < 0 ? 0 : s->naxes < SK_MAX_AXES ? s->naxes : SK_MAX_AXES; /* the analyzer loses the bound */
  int c[SK_MAX_AXES], out = 0;
  for (int g = 0; g < s->G; g++) {
    int x = g;
    for (int a = 0; a < na; a++)
      if (s->used & (1u << a)) c[a] = x % m->dims[a], x /= m->dims[a];
    for (int part = 0; part < s->K; part++) /* g[part::K]: unused index part, part+K, ... */
      for (int idx0 = part; idx0 < s->S; idx0 += s->K) {
        int idx = idx0;
        for (int a = na - 1; a >= 0; a--)
          if (!(s->used & (1u << a))) c[a] = idx % m->dims[a], idx /= m->dims[a];
        ranks[out++] = initial_rank + sk__rdn_pos(s, c);
      }
  }
}

SK_API sk_result sk_redundancy_groups(const sk_layout *l, int opt_shard_size, int initial_rank, int *ranks, int cap,
                                      int *ngroups, int *group_size, sk_error *err) {
  static const char *fn = "sk_redundancy_groups";
  if (!l) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: layout is NULL", fn);
  if (!ngroups || !group_size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !ngroups ? "ngroups" : "group_size");
  if (!sk__rdn_layout_ok(l))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: layout is not initialised (%d dims, %d axes)", fn, l->ndims,
                    l->mesh.naxes);
  if (opt_shard_size < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: opt_shard_size %d is negative (0 or 1: none)", fn,
                    opt_shard_size);
  if (initial_rank < 0 || initial_rank > INT_MAX - l->mesh.size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: initial_rank %d is out of range [0, INT_MAX - %d]", fn,
                    initial_rank, l->mesh.size);
  sk__rdn_shape s = sk__rdn_shape_of(l, opt_shard_size);
  int need = s.L ? l->mesh.size : 0;
  if (need > 0 && (!ranks || cap < need))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: ranks has room for %d ranks; the groups hold %d", fn,
                    ranks ? cap : 0, need);
  if (need > 0) sk__rdn_emit(&s, initial_rank, ranks);
  *ngroups = s.L ? s.G * s.K : 0;
  *group_size = s.L;
  return SK_OK;
}

/* >>owner -- parameters seen through one interface, whichever struct holds them. */
typedef struct sk__rdn_set {
  int n;
  const sk_redundancy_param *rp;
  const sk_bcast_param *bp;
} sk__rdn_set;

static SK__UNUSED const char *sk__rdn_name(const sk__rdn_set *s, int i) {
  return s->rp ? s->rp[i].name : s->bp[i].name;
}
static SK__UNUSED const sk_layout *sk__rdn_layout(const sk__rdn_set *s, int i) {
  return s->rp ? &s->rp[i].layout : &s->bp[i].layout;
}
static SK__UNUSED int sk__rdn_opt(const sk__rdn_set *s, int i) {
  return s->rp ? s->rp[i].opt_shard_size : s->bp[i].opt_shard_size;
}

/* Checks what every call over a parameter set needs: names unique and set, layouts valid,
   opt_shard_size >= 0. `fn` names the calling function in the message. */
static SK__UNUSED sk_result sk__rdn_check_set(const sk__rdn_set *s, const char *fn, sk_error *err) {
  if (s->n < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: n %d is negative", fn, s->n);
  if (s->n > 0 && !s->rp && !s->bp) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: params is NULL", fn);
  for (int i = 0; i < s->n; i++) {
    const char *name = sk__rdn_name(s, i);
    if (!name) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter %d has a NULL name", fn, i);
    if (!sk__rdn_layout_ok(sk__rdn_layout(s, i)))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter '%s': layout is not initialised", fn, name);
    if (sk__rdn_opt(s, i) < 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter '%s': opt_shard_size %d is negative", fn, name,
                      sk__rdn_opt(s, i));
    for (int j = 0; j < i; j++)
      if (strcmp(sk__rdn_name(s, j), name) == 0)
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter name '%s' appears twice (%d and %d)", fn, name,
                        j, i);
  }
  return SK_OK;
}

/* Whether parameter q has exactly the group `w` (shape) gives position p: same length and q's
   group of the first member holds every member. Positions are shared because both count from
   the same initial rank. */
static SK__UNUSED bool sk__rdn_has_group(const sk__rdn_set *set, int q, const sk__rdn_shape *w, int p) {
  sk__rdn_shape s = sk__rdn_shape_of(sk__rdn_layout(set, q), sk__rdn_opt(set, q));
  if (s.L != w->L) return false;
  int first = sk__rdn_member(w, p, 0);
  for (int k = 0; k < w->L; k++) {
    int x = sk__rdn_member(w, p, k);
    if (x >= s.l->mesh.size || first >= s.l->mesh.size || !sk__rdn_same(&s, first, x)) return false;
  }
  return true;
}

/* The owner (a position) of parameter `which` in position p's group under rotation rot, -1 if
   the group was dropped. i counts the parameters before `which` in name order that have the
   same group: the round robin's index. */
static SK__UNUSED int sk__rdn_owner_pos(const sk__rdn_set *set, int which, int p, int rot) {
  sk__rdn_shape w = sk__rdn_shape_of(sk__rdn_layout(set, which), sk__rdn_opt(set, which));
  if (w.L == 0) return -1;
  const char *name = sk__rdn_name(set, which);
  int i = 0;
  for (int q = 0; q < set->n; q++)
    if (q != which && strcmp(sk__rdn_name(set, q), name) < 0 && sk__rdn_has_group(set, q, &w, p)) i++;
  return sk__rdn_member(&w, p, (int)(((long long)i + rot) % w.L));
}

/* initial_rank < 0 -> MindSpore's default from the first parameter. */
static SK__UNUSED int sk__rdn_initial(const sk__rdn_set *set, int rank, int initial_rank) {
  if (initial_rank >= 0 || set->n == 0) return initial_rank;
  return sk_redundancy_initial_rank(sk__rdn_layout(set, 0), rank);
}

static SK__UNUSED sk_result sk__rdn_owner_common(const sk__rdn_set *set, int which, int rank, int *initial_rank,
                                                const char *fn, sk_error *err) {
  sk_result r = sk__rdn_check_set(set, fn, err);
  if (r) return r;
  if (which < 0 || which >= set->n)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: which %d is out of range [0, %d)", fn, which, set->n);
  if (rank < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: rank %d is negative", fn, rank);
  *initial_rank = sk__rdn_initial(set, rank, *initial_rank);
  int P = sk__rdn_layout(set, which)->mesh.size;
  if (*initial_rank > INT_MAX - P)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: initial_rank %d is out of range [0, INT_MAX - %d]", fn,
                    *initial_rank, P);
  return SK_OK;
}

SK_API sk_result sk_redundancy_owner(int n, const sk_redundancy_param *params, int which, int rank, int initial_rank,
                                     int *owner, sk_error *err) {
  if (!owner) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_redundancy_owner: owner is NULL");
  sk__rdn_set set = {n, params, NULL};
  sk_result r = sk__rdn_owner_common(&set, which, rank, &initial_rank, "sk_redundancy_owner", err);
  if (r) return r;
  *owner = -1;
  int P = params[which].layout.mesh.size;
  if (rank < initial_rank || rank - initial_rank >= P) return SK_OK;
  int o = sk__rdn_owner_pos(&set, which, rank - initial_rank, 0);
  if (o >= 0) *owner = initial_rank + o;
  return SK_OK;
}

SK_API sk_result sk_redundancy_owns(int n, const sk_redundancy_param *params, int which, int rank, int initial_rank,
                                    int keep_redundancy, bool *owns, sk_error *err) {
  static const char *fn = "sk_redundancy_owns";
  if (!owns) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: owns is NULL", fn);
  if (keep_redundancy < 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: keep_redundancy %d is less than 1", fn, keep_redundancy);
  sk__rdn_set set = {n, params, NULL};
  sk_result r = sk__rdn_owner_common(&set, which, rank, &initial_rank, fn, err);
  if (r) return r;
  *owns = false;
  int P = params[which].layout.mesh.size;
  if (rank < initial_rank || rank - initial_rank >= P) return SK_OK;
  for (int rot = 0; rot < keep_redundancy && !*owns; rot++) {
    int o = sk__rdn_owner_pos(&set, which, rank - initial_rank, rot);
    *owns = o >= 0 && initial_rank + o == rank;
  }
  return SK_OK;
}

/* >>broadcast -- the plan every member computes alike: parameters in name order, and for
   each the grouping it shares with an earlier one (same first member everywhere), so that
   every member splits the same communicators in the same order. */
typedef struct sk__rdn_plan {
  int *order;      /* parameter indices in name order */
  int *part;       /* per name-order slot: index into subs of its grouping, -1 = nothing to do */
  sk_comm **subs;  /* one communicator per distinct grouping */
  int nsubs;
  const sk_allocator *al;
} sk__rdn_plan;

static SK__UNUSED void sk__rdn_plan_free(sk__rdn_plan *pl) {
  for (int i = 0; i < pl->nsubs; i++)
    if (pl->subs[i]) sk_comm_destroy(pl->subs[i], NULL);
  sk__free(pl->al, pl->order);
  sk__free(pl->al, pl->part);
  sk__free(pl->al, pl->subs);
  memset(pl, 0, sizeof *pl);
}

/* Whether two parameters group the mesh identically: every position has the same first
   member (which names its group) under both. */
static SK__UNUSED bool sk__rdn_same_grouping(const sk__rdn_set *set, int a, int b) {
  sk__rdn_shape x = sk__rdn_shape_of(sk__rdn_layout(set, a), sk__rdn_opt(set, a));
  sk__rdn_shape y = sk__rdn_shape_of(sk__rdn_layout(set, b), sk__rdn_opt(set, b));
  if (x.L != y.L || x.l->mesh.size != y.l->mesh.size) return false;
  for (int p = 0; p < x.l->mesh.size; p++)
    if (sk__rdn_member(&x, p, 0) != sk__rdn_member(&y, p, 0)) return false;
  return true;
}

/* Name order by insertion sort (n is a parameter count; the comparisons dominate nothing). */
static SK__UNUSED void sk__rdn_plan_order(const sk__rdn_set *set, sk__rdn_plan *pl) {
  for (int i = 0; i < set->n; i++) {
    int j = i, v = i;
    while (j > 0 && strcmp(sk__rdn_name(set, pl->order[j - 1]), sk__rdn_name(set, v)) > 0) {
      pl->order[j] = pl->order[j - 1];
      j--;
    }
    pl->order[j] = v;
  }
  for (int i = 0; i < set->n; i++) {
    int q = pl->order[i];
    sk__rdn_shape s = sk__rdn_shape_of(sk__rdn_layout(set, q), sk__rdn_opt(set, q));
    pl->part[i] = -1;
    if (s.L <= 1) continue; /* dropped or single-rank groups: nothing to exchange */
    for (int j = 0; j < i && pl->part[i] < 0; j++)
      if (pl->part[j] >= 0 && sk__rdn_same_grouping(set, pl->order[j], q)) pl->part[i] = pl->part[j];
    if (pl->part[i] < 0) pl->part[i] = pl->nsubs++;
  }
}

static SK__UNUSED sk_result sk__rdn_plan_alloc(sk__rdn_plan *pl, const sk_allocator *al, int n) {
  memset(pl, 0, sizeof *pl);
  pl->al = al;
  size_t m = n > 0 ? (size_t)n : 1;
  pl->order = (int *)sk__alloc(al, sizeof(int) * m, 16);
  pl->part = (int *)sk__alloc(al, sizeof(int) * m, 16);
  pl->subs = (sk_comm **)sk__calloc(al, sizeof(sk_comm *) * m, 16);
  if (pl->order && pl->part && pl->subs) return SK_OK;
  sk__rdn_plan_free(pl);
  return SK_ERR_OUT_OF_MEMORY;
}

/* One parameter's local checks (those a device can fail alone). */
static SK__UNUSED sk_result sk__rdn_check_bcast(const sk_bcast_param *bp, int size, sk_error *err) {
  static const char *fn = "sk_parameter_broadcast";
  if (bp->layout.mesh.size != size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter '%s': its mesh has %d devices, the communicator %d",
                    fn, bp->name, bp->layout.mesh.size, size);
  if (!sk_dtype_valid(bp->dtype))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter '%s': unsupported dtype %d", fn, bp->name,
                    (int)bp->dtype);
  int64_t shape[SK_MAX_DIMS] = {0};
  sk_layout_slice_shape(&bp->layout, shape);
  uint64_t want = 1;
  for (int d = 0; d < bp->layout.ndims; d++) want *= (uint64_t)shape[d];
  if (bp->opt_shard_size > 1) want /= (uint64_t)bp->opt_shard_size; /* a device holds its optimizer shard */
  if ((uint64_t)bp->count != want)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter '%s': count %zu is not its slice's %llu elements",
                    fn, bp->name, bp->count, (unsigned long long)want);
  if (!bp->data && bp->count > 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: parameter '%s': data is NULL", fn, bp->name);
  return SK_OK;
}

/* Everything a device can reject on its own, and the plan's memory. */
static SK__UNUSED sk_result sk__rdn_bcast_local(sk_comm *comm, const sk__rdn_set *set, int cur_rank, int *initial_rank,
                                               sk__rdn_plan *pl, sk_error *err) {
  static const char *fn = "sk_parameter_broadcast";
  sk_result r = sk__rdn_check_set(set, fn, err);
  if (r) return r;
  for (int i = 0; i < set->n; i++)
    if ((r = sk__rdn_check_bcast(&set->bp[i], sk_comm_size(comm), err)) != SK_OK) return r;
  if (cur_rank < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: cur_rank %d is negative", fn, cur_rank);
  *initial_rank = sk__rdn_initial(set, cur_rank, *initial_rank);
  if (*initial_rank < 0) *initial_rank = cur_rank - sk_comm_rank(comm); /* no parameter: any consistent value */
  if (cur_rank - *initial_rank != sk_comm_rank(comm))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "%s: cur_rank %d is not this device: communicator rank %d + initial_rank %d", fn, cur_rank,
                    sk_comm_rank(comm), *initial_rank);
  const sk_world_desc *wd = sk_world_config(sk_comm_world(comm));
  if (sk__rdn_plan_alloc(pl, wd ? &wd->allocator : NULL, set->n) != SK_OK)
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "%s: allocating the plan of %d parameters", fn, set->n);
  sk__rdn_plan_order(set, pl);
  return SK_OK;
}

/* Every member reports its result before any group is built; all return an error if one failed. */
static SK__UNUSED sk_result sk__rdn_agree(sk_comm *comm, sk_result mine, sk_error *err) {
  /* each member's code, the largest kept: a peer whose allocation failed is reported as memory,
     not as a bad argument */
  int32_t code = (int32_t)mine, worst = 0;
  sk_result r = sk_allreduce(comm, &code, &worst, 1, SK_I32, SK_MAX, NULL);
  if (mine != SK_OK) return mine; /* keep the first cause */
  if (r != SK_OK)
    return sk__fail(err, r, "sk_parameter_broadcast: agreeing on the arguments: %s", sk_comm_error_message(comm));
  if (worst == SK_ERR_INVALID_ARGUMENT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "sk_parameter_broadcast: another device rejected its arguments (see its error)");
  if (worst != SK_OK)
    return sk__fail(err, (sk_result)worst,
                    "sk_parameter_broadcast: another device failed before the exchange: %s (see its error)",
                    sk_result_name((sk_result)worst));
  return SK_OK;
}

/* Splits one communicator per distinct grouping, in plan order: color = the first rank of this
   device's group, so every member of comm calls and each group gets its own. */
static SK__UNUSED sk_result sk__rdn_split(sk_comm *comm, const sk__rdn_set *set, sk__rdn_plan *pl, int initial_rank,
                                         sk_error *err) {
  int me = sk_comm_rank(comm), made = 0;
  for (int i = 0; i < set->n; i++) {
    if (pl->part[i] != made) continue; /* not a new grouping */
    int q = pl->order[i];
    sk__rdn_shape s = sk__rdn_shape_of(sk__rdn_layout(set, q), sk__rdn_opt(set, q));
    int color = initial_rank + sk__rdn_member(&s, me, 0);
    sk_result r = sk_comm_split(comm, color, me, &pl->subs[made], NULL);
    if (r != SK_OK)
      return sk__fail(err, r, "sk_parameter_broadcast: splitting the group of '%s': %s", sk__rdn_name(set, q),
                      sk_comm_error_message(comm));
    made++;
  }
  return SK_OK;
}

/* Zero-then-AllReduce for every parameter with something to exchange, in name order. */
static SK__UNUSED sk_result sk__rdn_exchange(sk_comm *comm, const sk__rdn_set *set, const sk__rdn_plan *pl,
                                            sk_error *err) {
  int me = sk_comm_rank(comm);
  for (int i = 0; i < set->n; i++) {
    if (pl->part[i] < 0) continue;
    const sk_bcast_param *bp = &set->bp[pl->order[i]];
    if (sk__rdn_owner_pos(set, pl->order[i], me, 0) != me && bp->count > 0)
      memset(bp->data, 0, bp->count * sk_dtype_size(bp->dtype));
    sk_comm *sub = pl->subs[pl->part[i]];
    sk_result r = sk_allreduce(sub, bp->data, bp->data, bp->count, bp->dtype, SK_SUM, NULL);
    if (r != SK_OK)
      return sk__fail(err, r, "sk_parameter_broadcast: AllReduce of '%s': %s", bp->name, sk_comm_error_message(sub));
  }
  return SK_OK;
}

SK_API sk_result sk_parameter_broadcast(sk_comm *comm, int n, const sk_bcast_param *params, int cur_rank,
                                        int initial_rank, sk_error *err) {
  if (!comm) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_parameter_broadcast: comm is NULL");
  sk__rdn_set set = {n, NULL, params};
  sk__rdn_plan pl;
  memset(&pl, 0, sizeof pl);
  sk_result r = sk__rdn_bcast_local(comm, &set, cur_rank, &initial_rank, &pl, err);
  r = sk__rdn_agree(comm, r, err);
  if (r == SK_OK) r = sk__rdn_split(comm, &set, &pl, initial_rank, err);
  if (r == SK_OK) r = sk__rdn_exchange(comm, &set, &pl, err);
  sk__rdn_plan_free(&pl);
  return r;
}

SK_EXTERN_C_END

#endif /* SK_REDUNDANCY_IMPL */
