/* sk_opt_shard.h -- optimizer parallel (MindSpore's hsdp / parallel optimizer): which parameters
   are sharded, over which group, and which rows each device keeps.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_OPT_SHARD_IMPL)   #include "sk_opt_shard.h"
   Needs only libc. Pure: no world, no buffers. The compiler (sk_parallel.h) asks it about every
   parameter; `sk-layout --hsdp` explains one.

   THE RULE (MindSpore's, per parameter; docs/optimizer-parallel.md)
     A parameter's layout leaves it whole along some mesh axes: the devices that differ only on
     those axes hold the same model-parallel slice, its replica group G (ascending ranks).
     Optimizer parallel cuts dim 0 of that slice further over S of them:
       S = shard_size when shard_size is positive and at most |G|, else |G| (shard_size -1, or
       larger than the group: clamped).
     The parameter stays whole (size 0) when it is a scalar, when |G| or S is 1, when S does not
     divide |G|, when dim 0 of the model-parallel slice does not divide by S, or when the whole
     parameter is smaller than threshold_kb KB (its dtype's bytes; 0 shards every one).
     The rank at position i of G belongs to the AllGather group G[i/S*S .. i/S*S+S) (the
     innermost S factors of the replicas; the outer replicas keep copies) and keeps chunk i % S
     of the slice's dim 0. When S < |G| the gradient is still summed over the rest of G: the
     ranks of G at positions congruent to i modulo S (the Mirror group, |G|/S ranks).

   ERRORS: NULL, a layout that is not initialised, a rank outside the mesh, a shard_size that is
     neither -1 nor positive, a negative threshold, an unknown level: SK_ERR_INVALID_ARGUMENT.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_OPT_SHARD_IMPL)
#define SK_OPT_SHARD_IMPL
#endif
#ifndef SK_OPT_SHARD_H
#define SK_OPT_SHARD_H

#include "sk_core.h"
#include "sk_layout.h"

SK_EXTERN_C_BEGIN

/* MindSpore's optimizer_level. */
typedef enum sk_hsdp_level {
  SK_HSDP_LEVEL1 = 0, /* weights and optimizer state sharded */
  SK_HSDP_LEVEL2,     /* ... and gradients accumulated over micro-steps */
  SK_HSDP_LEVEL3,     /* ... and weights gathered again for the backward pass */
  SK_HSDP_LEVEL_COUNT
} sk_hsdp_level;

/* AutoParallel.hsdp(shard_size=-1, threshold=64, optimizer_level="level1"). A zero struct is
   optimizer parallel off (MindSpore's default); SK_HSDP_DEFAULTS is hsdp() with no arguments. */
typedef struct sk_hsdp {
  bool enabled;
  int shard_size;       /* -1: the whole replica group; k > 0: k devices (clamped to the group) */
  int64_t threshold_kb; /* parameters of fewer KB stay whole; 0: every parameter is sharded */
  sk_hsdp_level level;
} sk_hsdp;

#define SK_HSDP_DEFAULTS {true, -1, 64, SK_HSDP_LEVEL1}

/* One parameter on one device. */
typedef struct sk_opt_shard {
  int size;      /* S, the shard count; 0 when the parameter is not sharded */
  int replicas;  /* |G|: devices holding the same model-parallel slice */
  int index;     /* this device's chunk, its position in the AllGather group (0 when not sharded) */
  int mirror;    /* |G| / S: the Mirror group after sharding (1: none); 0 when not sharded */
  int ndims;
  int64_t slice_shape[SK_MAX_DIMS]; /* the optimizer slice: the model-parallel slice with dim 0 / S */
  int64_t rows_start, rows_stop;    /* this device's rows of the whole tensor's dim 0 */
  const char *why;                  /* not sharded: why, in words; "" when sharded */
} sk_opt_shard;

SK_API const char *sk_hsdp_level_name(sk_hsdp_level level); /* "level1", ... ("?" if unknown) */
/* The configuration as MindSpore's hsdp() checks its arguments. */
SK_API sk_result sk_hsdp_check(const sk_hsdp *h, sk_error *err);
/* "[SHARD_SIZE][,THRESHOLD_KB][,LEVEL]" (each part optional, defaults -1, 64, level1; "" is
   hsdp()): *out enabled and checked. */
SK_API sk_result sk_hsdp_parse(const char *text, sk_hsdp *out, sk_error *err);
/* Parameter `l` (of dtype dt) on device `rank` under h (h->enabled false: never sharded). */
SK_API sk_result sk_opt_shard_of(const sk_layout *l, sk_dtype dt, const sk_hsdp *h, int rank, sk_opt_shard *out,
                                 sk_error *err);
/* The ranks of `rank`'s AllGather group (gather, *ngather = S) and Mirror group (mirror,
   *nmirror = |G| / S), ascending; a parameter not sharded: its replica group as the Mirror group
   and no AllGather group. Each array holds cap ranks (SK_MAX_DEVICES always suffices). */
SK_API sk_result sk_opt_shard_groups(const sk_layout *l, sk_dtype dt, const sk_hsdp *h, int rank, int *gather,
                                     int *ngather, int *mirror, int *nmirror, int cap, sk_error *err);

SK_EXTERN_C_END
#endif /* SK_OPT_SHARD_H */

#if defined(SK_OPT_SHARD_IMPL) && !defined(SK_OPT_SHARD_IMPL_DONE)
#define SK_OPT_SHARD_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

static const char *const sk__hsdp_levels[SK_HSDP_LEVEL_COUNT] = {"level1", "level2", "level3"};

SK_API const char *sk_hsdp_level_name(sk_hsdp_level level) {
  return (unsigned)level < SK_HSDP_LEVEL_COUNT ? sk__hsdp_levels[level] : "?";
}

SK_API sk_result sk_hsdp_check(const sk_hsdp *h, sk_error *err) {
  if (!h) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: NULL configuration");
  if (!h->enabled) return SK_OK;
  if (h->shard_size != -1 && h->shard_size <= 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: shard_size must be -1 or a positive integer, got %d",
                    h->shard_size);
  if (h->threshold_kb < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: threshold must be 0 or a positive number of KB, got %lld",
                    (long long)h->threshold_kb);
  if ((unsigned)h->level >= SK_HSDP_LEVEL_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: optimizer_level must be 'level1', 'level2' or 'level3', got %d",
                    (int)h->level);
  return SK_OK;
}

/* A whole decimal integer from [s, end), or false. */
static bool sk__hsdp_int(const char *s, const char *end, long long *v) {
  char buf[32];
  size_t n = (size_t)(end - s);
  if (n == 0 || n >= sizeof buf || !(*s == '-' || (*s >= '0' && *s <= '9'))) return false; /* no sign or blank first */
  memcpy(buf, s, n), buf[n] = 0;
  char *stop = NULL;
  *v = strtoll(buf, &stop, 10);
  return stop && *stop == 0;
}

SK_API sk_result sk_hsdp_parse(const char *text, sk_hsdp *out, sk_error *err) {
  if (!text || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: NULL argument");
  sk_hsdp h = SK_HSDP_DEFAULTS;
  int commas = 0;
  for (const char *c = text; *c; c++) commas += *c == ',';
  if (commas > 2) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: '%s': at most three parts (SHARD_SIZE,THRESHOLD_KB,LEVEL)", text);
  const char *at = text;
  for (int part = 0; part < 3; part++) {
    const char *end = strchr(at, ',');
    if (!end) end = at + strlen(at);
    long long v = 0;
    if (end == at) { /* empty: the default */
    } else if (part == 2) {
      int lv = -1;
      for (int i = 0; i < SK_HSDP_LEVEL_COUNT; i++)
        if ((size_t)(end - at) == strlen(sk__hsdp_levels[i]) && !strncmp(at, sk__hsdp_levels[i], (size_t)(end - at))) lv = i;
      if (lv < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: optimizer_level must be 'level1', 'level2' or 'level3', got '%.*s'", (int)(end - at), at);
      h.level = (sk_hsdp_level)lv;
    } else if (!sk__hsdp_int(at, end, &v) || v < -2147483647LL || v > 2147483647LL) {
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "hsdp: %s '%.*s' is not an integer", part ? "threshold" : "shard_size",
                      (int)(end - at), at);
    } else if (part == 0) {
      h.shard_size = (int)v;
    } else {
      h.threshold_kb = v;
    }
    if (!*end) break;
    at = end + 1;
  }
  sk_result r = sk_hsdp_check(&h, err);
  if (!r) *out = h;
  return r;
}

/* The replica group of `rank` (ascending) and rank's position in it; a scalar (no dims: whole
   on every device, as the compiler lays scalars out) is replicated on the whole mesh. */
static sk_result sk__opt_replicas(const sk_layout *l, int rank, int *ranks, int *n, int *pos, sk_error *err) {
  sk_result r = SK_OK;
  if (l->ndims == 0)
    for (*n = 0; *n < l->mesh.size; (*n)++) ranks[*n] = *n;
  else
    r = sk_layout_replica_group(l, rank, ranks, SK_MAX_DEVICES, n, err);
  if (r) return r;
  *pos = 0;
  while (*pos < *n && ranks[*pos] != rank) (*pos)++;
  return SK_OK;
}

/* S, or 0 with the reason. */
static int sk__opt_size(const sk_layout *l, sk_dtype dt, const sk_hsdp *h, int replicas, const char **why) {
  int64_t bytes = (int64_t)sk_dtype_size(dt);
  for (int d = 0; d < l->ndims; d++) bytes *= l->shape[d];
  int s = h->shard_size > 0 && h->shard_size <= replicas ? h->shard_size : replicas;
  int64_t rows[SK_MAX_DIMS] = {0};
  sk_layout_slice_shape(l, rows);
  *why = "";
  if (!h->enabled) *why = "optimizer parallel is off";
  else if (l->ndims == 0) *why = "a scalar has no dim 0";
  else if (h->threshold_kb > INT64_MAX / 1024 || bytes < h->threshold_kb * 1024) *why = "smaller than the threshold";
  else if (replicas == 1) *why = "no replicas: the layout uses every device";
  else if (s == 1) *why = "a shard count of 1 cuts nothing";
  else if (replicas % s) *why = "shard_size does not divide the replica group";
  else if (rows[0] % s) *why = "dim 0 of the slice does not divide by the shard count";
  return **why ? 0 : s;
}

SK_API sk_result sk_opt_shard_of(const sk_layout *l, sk_dtype dt, const sk_hsdp *h, int rank, sk_opt_shard *out,
                                 sk_error *err) {
  if (!l || !h || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "opt shard: NULL argument");
  memset(out, 0, sizeof *out);
  sk_result r = sk_hsdp_check(h, err);
  if (r) return r;
  if (l->mesh.size < 1 || rank < 0 || rank >= l->mesh.size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "opt shard: rank %d is not on the layout's %d devices", rank, l->mesh.size);
  /* On the stack (16 KiB): these calls take no allocator, and allocate nothing. */
  int ranks[SK_MAX_DEVICES], pos = 0;
  if ((r = sk__opt_replicas(l, rank, ranks, &out->replicas, &pos, err))) return r;
  sk_slice s;
  memset(&s, 0, sizeof s);
  if (l->ndims > 0 && (r = sk_layout_slice(l, rank, &s, err))) return r;
  out->size = sk__opt_size(l, dt, h, out->replicas, &out->why);
  out->ndims = l->ndims;
  sk_layout_slice_shape(l, out->slice_shape);
  if (l->ndims > 0) out->rows_start = s.start[0], out->rows_stop = s.stop[0];
  if (!out->size) return SK_OK;
  out->index = pos % out->size, out->mirror = out->replicas / out->size;
  int64_t chunk = out->slice_shape[0] / out->size;
  out->slice_shape[0] = chunk;
  out->rows_start = s.start[0] + out->index * chunk, out->rows_stop = out->rows_start + chunk;
  return SK_OK;
}

SK_API sk_result sk_opt_shard_groups(const sk_layout *l, sk_dtype dt, const sk_hsdp *h, int rank, int *gather,
                                     int *ngather, int *mirror, int *nmirror, int cap, sk_error *err) {
  if (!gather || !ngather || !mirror || !nmirror) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "opt shard: NULL argument");
  *ngather = *nmirror = 0;
  sk_opt_shard os;
  sk_result r = sk_opt_shard_of(l, dt, h, rank, &os, err);
  if (r) return r;
  int g[SK_MAX_DEVICES], n = 0, pos = 0; /* on the stack, as in sk_opt_shard_of */
  r = sk__opt_replicas(l, rank, g, &n, &pos, err);
  int s = os.size ? os.size : 1, mine = os.size ? pos % s : 0;
  if (!r && (n / s > cap || (os.size && s > cap)))
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "opt shard: %d ranks do not fit in %d", n, cap);
  /* sk_opt_shard_of cuts the replicas into whole shard groups; said here so no read passes n */
  if (!r && os.size && (n % s || pos < 0 || pos >= n))
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "opt shard: shard groups of %d over %d replicas (position %d)", s, n, pos);
  if (!r && os.size) memcpy(gather, g + pos / s * s, sizeof(int) * (size_t)s), *ngather = s; /* pos's whole group */
  for (int i = 0; !r && i < n; i++)
    if (!os.size || i % s == mine) mirror[(*nmirror)++] = g[i];
  return r;
}

SK_EXTERN_C_END
#endif /* SK_OPT_SHARD_IMPL */
