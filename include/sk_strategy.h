/* sk_strategy.h -- strategy files: AutoParallel's save_/load_param_strategy_file and
   save_/load_operator_strategy_file, as JSON (docs/strategy-files.md describes the format).

   NEEDS JANSSON: link with -ljansson (Debian: libjansson-dev; `pkg-config --cflags --libs
   jansson`). That is why shardkit.h does not include this header: include it yourself.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_STRATEGY_IMPL where the other modules'
                             #include "sk_strategy.h"   implementations come from elsewhere)

   WHAT IT DOES
     sk_strategy_io() is the table a desc naming strategy files sets as strategy_io; through
     it sk_parallel_compile (sk_parallel.h, which needs no JSON library) runs four steps:
       1. load_operator_strategy_file: every operator of the plan's own copy of the network
          takes the strategy (or layouts) and the pipeline stage the file saved for it,
          replacing the network's own `shard` and `stage` annotation (the caller's network is
          never changed), and the desc takes the file's dataset strategy, stage count and
          hsdp: a saved plan is compiled again as it was, in whatever parallel mode;
       2. the network is compiled with the file fields cleared; with several chunks per stage
          (the compiler then cuts by FLOPs) every operator must land on the file's stage;
       3. load_param_strategy_file: every parameter layout and optimizer shard the file saved
          must be the one the plan gives that parameter (the checkpoint it describes must fit);
       4. save_param_strategy_file / save_operator_strategy_file: the plan's stages and hsdp,
          and its parameter layouts and optimizer shards / the strategies and stages its
          operators used, with its dataset strategy. An operator without a strategy (the
          default, or a fallback) is written with the one it got. The same path for both
          writes one file holding both sections; the two loads may name one file too.
     Saving then loading gives every device the same program and the same losses.
     PRECEDENCE: the file's plan wins for what it records. Its stage count and hsdp are taken
     where the desc sets none (pipeline.stages 0, hsdp off); a desc that sets others is
     refused by name ("stages: the file's plan has 2 pipeline stages, the configuration asks
     for 4"), never overridden. micro_size, the scheduler and interleave stay the desc's.
     VERSIONS: files are written as version 3 (device_num every stage's, "stages", "hsdp", a
     "stage" per operator, an "opt_shard" per parameter; version 2 had the same keys but an
     operator's "out_layout", new in 3 with layouts on every operator); version 1
     files (none of these keys, defaults as null) still load as before, the desc's stages and
     hsdp used. Version 3 follows MindSpore master's rules for Reshape, Gather,
     SoftmaxCrossEntropyWithLogits and MatMul with batch dims: a version 1 or 2 file with an
     entry for one of those is refused, naming the operator and what changed.
     Parameters are the trainable ones (the loss's gradient reaches them: read at a
     differentiable input of an operator the loss depends on; not frozen, requires_grad true) unless
     desc->strategy_file_all_params (MindSpore's disable_strategy_file_only_for_trainable_params). The text is canonical: fixed key order,
     2-space indentation, a final newline; the same plan gives the same bytes.

   ERRORS
     A refused file gives SK_ERR_INVALID_ARGUMENT and one line naming the FIRST mismatch, after
     the file's base name: an empty file, invalid JSON (jansson's line and column), a file for
     another device count, stages or hsdp the configuration contradicts, an operator or
     parameter the network lacks or a network operator (or parameter to check) the file lacks,
     another operator type or parameter shape, a value of the wrong kind or out of range (with
     its JSON path: a stage not below the stage count, an opt_shard that does not fit the
     layout), an operator on another stage or a parameter laid out or sharded otherwise after
     compiling:
       plan.json: line 40: parameters[1] ("fc2.weight"): laid out otherwise after compiling: ...
     The line is that of the element's "name" pair, else of the top-level key holding the value
     (an unknown top-level key: its own). The reading helpers are sk_json_read.h's, which
     sk_json.h's network reader shares: "strategy", "layouts" and "out_layout" are refused in
     the words of a network file's "shard", "layouts" and "out_layout".
     The writing helpers are sk_json_write.h's, sk_json.h's network writer's too.
     The compiler's own refusals pass through unchanged. A file that cannot be read or written:
     SK_ERR_SYSTEM with its path and the system's reason; out of memory: SK_ERR_OUT_OF_MEMORY.
     A file is read only when it is a regular file (a symbolic link to one is followed) of at
     most SK_MAX_TEXT_FILE_BYTES (sk_core.h, 256 MiB unless defined otherwise); otherwise
     SK_ERR_INVALID_ARGUMENT naming it ("PATH: N bytes exceeds the limit of L bytes",
     "PATH: not a regular file (a FIFO)") before a byte is read.
     On any failure the plan is empty (the caller's graph is never written).

   MEMORY
     The scratch of every call, the file texts read and the plan's copy of the network come
     from the configuration's allocator (sk_autoparallel.allocator; a compiled plan keeps its
     configuration, the file names cleared, in plan->desc). The
     text sk_strategy_format hands back is the C library's, for the caller's free(). jansson's
     own values use jansson's allocator (json_set_alloc_funcs), which shardkit leaves alone.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_STRATEGY_IMPL)
#define SK_STRATEGY_IMPL
#endif
#ifndef SK_STRATEGY_H
#define SK_STRATEGY_H

#include "sk_core.h"
#include "sk_exec.h"
#include "sk_graph.h"
#include "sk_parallel.h"

SK_EXTERN_C_BEGIN

/* The strategy-file reader and writer for sk_autoparallel.strategy_io: sk_parallel_compile
   then reads and writes the files the desc names (see above). A static table: no state. */
SK_API const sk_strategy_io_fns *sk_strategy_io(void);

/* The canonical text of a compiled plan's strategy file, NUL-terminated, in *text (from the C
   library, not the plan's allocator: the caller frees it with free(); NULL on failure): its parameter layouts when `params` (every parameter when
   all_params, else the trainable ones), its operators' strategies and dataset strategy when
   `operators`. */
SK_API sk_result sk_strategy_format(const sk_parallel_plan *plan, bool params, bool operators, bool all_params,
                                    char **text, sk_error *err);
/* The same written to path (created or truncated). */
SK_API sk_result sk_strategy_save(const sk_parallel_plan *plan, const char *path, bool params, bool operators,
                                  bool all_params, sk_error *err);

/* Step 1 alone: the operator strategies (and, with one chunk per stage, stages) of the file at
   path into g's operators, and its dataset strategy, stage count and hsdp into *desc (see
   PRECEDENCE), whose ndevices the file's device count must equal. On failure neither is
   changed. */
SK_API sk_result sk_strategy_load_operators(const char *path, sk_graph *g, sk_autoparallel *desc, sk_error *err);
/* Step 3 alone: the stages, hsdp and every parameter layout and optimizer shard the file at path
   holds against the compiled plan; every parameter of the network (the trainable ones unless
   all_params) must be in the file. */
SK_API sk_result sk_strategy_check_params(const char *path, const sk_parallel_plan *plan, bool all_params,
                                          sk_error *err);

SK_EXTERN_C_END
#endif /* SK_STRATEGY_H */

#if defined(SK_STRATEGY_IMPL) && !defined(SK_STRATEGY_IMPL_DONE)
#define SK_STRATEGY_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#define SK__JSON_READ_PRIVATE
#include "sk_json_read.h"
#define SK__JSON_WRITE_PRIVATE
#include "sk_json_write.h"
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

#define SK__ST_FORMAT "shardkit-strategy"
/* 1: no stages, hsdp or opt_shard; 2: the 2020 rules of the operators sk__st_changed_rule names.
   Both still read, except an operator entry whose rule changed in 3. */
#define SK__ST_VERSION 3
#define SK__ST_DUMP_FLAGS (JSON_INDENT(2) | JSON_PRESERVE_ORDER)

/* ---- shared by reading and writing ---------------------------------------------------------- */

/* reach[t] (g->ntensors + 1 entries, from a; NULL when out of memory): whether the loss's
   gradient reaches tensor t, through the differentiable inputs of the operators the loss
   depends on. A parameter it reaches is trainable unless frozen (requires_grad false, which
   MindSpore's only_trainable_params tests); one read only as indices, or only by operators the
   loss does not depend on, is not. */
static bool *sk__st_trainable(const sk_graph *g, const sk_allocator *a) {
  bool *reach = (bool *)sk__calloc(a, ((size_t)g->ntensors + 1) * sizeof *reach, 0);
  if (!reach) return NULL;
  if (g->loss >= 0 && g->loss < g->ntensors) reach[g->loss] = true;
  for (int o = g->nops - 1; o >= 0; o--) {
    const sk_graph_op *op = &g->ops[o];
    bool any = false;
    for (int k = 0; k < op->noutputs; k++) any = any || reach[op->outputs[k]];
    for (int k = 0; any && k < op->ninputs; k++)
      if (sk_exec_differentiable(op, k)) reach[op->inputs[k]] = true;
  }
  return reach;
}

/* The configuration's allocator (MEMORY above) is whole: both functions or neither. */
static sk_result sk__st_allocator(const sk_allocator *a, sk_error *err) {
  if (sk__allocator_ok(a)) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: allocator: set both alloc and free, or neither");
}

/* Whether tensor t goes into (and must be in) a file. */
static bool sk__st_listed(const sk_graph *g, const bool *trainable, int t, bool all_params) {
  return g->tensors[t].role == SK_TENSOR_PARAM && (all_params || (trainable[t] && sk_graph_trainable(g, t)));
}

/* "[a,b,c]" for messages (snprintf convention: cut to fit). */
static void sk__st_list_text(const int64_t *v, int n, char *buf, size_t cap) {
  size_t len = 0;
  int w = snprintf(buf, cap, "[");
  for (int k = 0; w > 0 && k < n; k++) {
    len += (size_t)w;
    w = len < cap ? snprintf(buf + len, cap - len, "%s%lld", k ? "," : "", (long long)v[k]) : 0;
  }
  len += w > 0 ? (size_t)w : 0;
  if (len < cap) (void)snprintf(buf + len, cap - len, "]");
}

/* ==== reading ================================================================================= */

typedef struct sk__st_rd {
  char *text; /* the file, from `a` */
  const sk_allocator *a;
  size_t len;
  const char *base; /* the file's base name, in front of every message */
  sk_error *err;
  json_t *root;
} sk__st_rd;

/* A reading of rd for messages (sk_json_read.h's), about top-level member `key` (NULL: the top). */
static void sk__st_jr(sk__jr *jr, const sk__st_rd *rd, const char *key) {
  sk__jr_begin(jr, rd->text, rd->len, rd->base, rd->err);
  if (key) sk__jr_top(jr, key);
}

/* The whole file into rd->text (from a) and its JSON into rd->root. */
static sk_result sk__st_open(sk__st_rd *rd, const char *path, const sk_allocator *a, sk_error *err) {
  memset(rd, 0, sizeof *rd);
  const char *slash = strrchr(path, '/');
  rd->base = slash ? slash + 1 : path, rd->err = err, rd->a = a;
  sk_result r = sk__read_text_file(a, path, true, SK_MAX_TEXT_FILE_BYTES, &rd->text, &rd->len, err);
  if (r) return r;
  sk__jr jr;
  sk__st_jr(&jr, rd, NULL);
  return sk__jr_parse(&jr, "the strategy file", &rd->root);
}

static void sk__st_close(sk__st_rd *rd) {
  json_decref(rd->root);
  sk__free(rd->a, rd->text);
  memset(rd, 0, sizeof *rd);
}

/* What the top level records of the plan. Version 1 files record the device count only (of a
   pipeline stage, when the plan had stages); version 2 the world's, the stages and hsdp. */
typedef struct sk__st_head {
  int version;
  int stages;    /* version 2: the pipeline stages (1: none); 0 in version 1 */
  sk_hsdp hsdp;  /* version 2: the plan's optimizer parallel (enabled false: off) */
} sk__st_head;

/* "hsdp": null (no optimizer parallel) or {"shard_size", "threshold", "optimizer_level"}, the
   arguments of MindSpore's hsdp(), checked as sk_hsdp_check checks them. */
static sk_result sk__st_hsdp(const sk__st_rd *rd, sk_hsdp *h) {
  static const char *const keys[] = {"shard_size", "threshold", "optimizer_level", NULL};
  json_t *v = json_object_get(rd->root, "hsdp");
  sk__jr jr;
  const char *level;
  long long size = 0, kb = 0;
  sk_result r;
  sk__st_jr(&jr, rd, "hsdp");
  memset(h, 0, sizeof *h);
  if (json_is_null(v)) return SK_OK;
  if (!json_is_object(v))
    return sk__jr_fail(&jr, "hsdp", "expected null (no optimizer parallel) or {\"shard_size\", \"threshold\", "
                       "\"optimizer_level\"}, got %s", sk__jr_type(v));
  (void)snprintf(jr.where, sizeof jr.where, "hsdp");
  if ((r = sk__jr_keys(&jr, v, keys)) || (r = sk__jr_int(&jr, v, "shard_size", true, -1, SK_MAX_DEVICES, &size)) ||
      (r = sk__jr_int(&jr, v, "threshold", true, 0, LLONG_MAX / 1024, &kb)) ||
      (r = sk__jr_string(&jr, v, "optimizer_level", true, &level)))
    return r;
  if (size == 0) return sk__jr_fail(&jr, "shard_size", "expected -1 (the replica group) or a positive count, got 0");
  h->enabled = true, h->shard_size = (int)size, h->threshold_kb = kb;
  int k = 0;
  while (k < SK_HSDP_LEVEL_COUNT && strcmp(level, sk_hsdp_level_name((sk_hsdp_level)k))) k++;
  if (k == SK_HSDP_LEVEL_COUNT) return sk__jr_fail(&jr, "optimizer_level", "expected \"level1\", \"level2\" or \"level3\"");
  h->level = (sk_hsdp_level)k;
  sk_error e;
  if (sk_hsdp_check(h, &e)) return sk__jr_fail(&jr, "", "%s", e.msg);
  return SK_OK;
}

/* The top level: what the file is, its version, for how many devices (v1_devices in a version
   1 file, devices in a later one), and (version 2) the stages and hsdp, into *h. */
static sk_result sk__st_header(const sk__st_rd *rd, int v1_devices, int devices, sk__st_head *h) {
  static const char *const v1[] = {"format", "version", "device_num", "dataset_strategy", "operators", "parameters",
                                   NULL};
  static const char *const v2[] = {"format", "version", "device_num", "stages", "hsdp", "dataset_strategy", "operators",
                                   "parameters", NULL};
  sk__jr jr;
  long long stages = 0;
  sk_result r;
  memset(h, 0, sizeof *h);
  sk__st_jr(&jr, rd, NULL);
  if ((r = sk__jr_head(&jr, rd->root, "strategy", SK__ST_FORMAT, SK__ST_VERSION, &h->version)) ||
      (r = sk__jr_keys(&jr, rd->root, h->version == 1 ? v1 : v2)))
    return r;
  json_t *n = json_object_get(rd->root, "device_num");
  sk__jr_top(&jr, "device_num");
  if (!json_is_integer(n)) return sk__jr_fail(&jr, "device_num", "expected an integer, got %s", sk__jr_type(n));
  if (h->version == 1) devices = v1_devices;
  if (json_integer_value(n) != devices)
    return sk__jr_fail(&jr, "device_num", "the file is for %lld devices, the plan has %d",
                       (long long)json_integer_value(n), devices);
  if (h->version == 1) return SK_OK;
  sk__jr_top(&jr, "stages");
  if ((r = sk__jr_int(&jr, rd->root, "stages", true, 1, SK_PIPE_MAX_STAGES, &stages))) return r;
  if (devices % stages) return sk__jr_fail(&jr, "stages", "%lld stages do not divide the %d devices", stages, devices);
  h->stages = (int)stages;
  return sk__st_hsdp(rd, &h->hsdp);
}

static bool sk__st_same_hsdp(const sk_hsdp *a, const sk_hsdp *b) {
  if (!a->enabled || !b->enabled) return a->enabled == b->enabled;
  return a->shard_size == b->shard_size && a->threshold_kb == b->threshold_kb && a->level == b->level;
}

static void sk__st_hsdp_text(const sk_hsdp *h, char *buf, size_t cap) {
  if (!h->enabled) (void)snprintf(buf, cap, "no optimizer parallel");
  else (void)snprintf(buf, cap, "hsdp(shard_size=%d, threshold=%lld, optimizer_level=%s)", h->shard_size,
                      (long long)h->threshold_kb, sk_hsdp_level_name(h->level));
}

/* The stages and hsdp a version 2 file records against those of `what` (the configuration,
   where 0 stages and hsdp off stand for "not set": then the file's are taken into *taken; or
   a compiled plan, which must have the same). A contradiction is refused by name: the file's
   plan wins for what it records, and nothing is overridden in silence. */
static sk_result sk__st_setup(const sk__st_rd *rd, const sk__st_head *h, int stages, const sk_hsdp *hsdp,
                              const char *what, sk_autoparallel *taken) {
  sk__jr jr;
  char a[96], b[96];
  if (h->version < 2) return SK_OK;
  sk__st_jr(&jr, rd, "stages");
  if ((stages || !taken) && stages != h->stages)
    return sk__jr_fail(&jr, "stages", "the file's plan has %d pipeline stages, %s %d", h->stages, what, stages);
  sk__jr_top(&jr, "hsdp");
  if ((hsdp->enabled || !taken) && !sk__st_same_hsdp(hsdp, &h->hsdp)) {
    sk__st_hsdp_text(&h->hsdp, a, sizeof a), sk__st_hsdp_text(hsdp, b, sizeof b);
    return sk__jr_fail(&jr, "hsdp", "the file's plan has %s, %s %s", a, what, b);
  }
  if (taken && h->stages > 1) taken->pipeline.stages = h->stages;
  if (taken) taken->hsdp = h->hsdp;
  return SK_OK;
}

/* The chunks each stage holds under p, as sk_pipeline.h counts them (zero_bubble_v: two). */
static int sk__st_chunks(const sk_pipe_desc *p) {
  return p->scheduler == SK_PIPE_ZERO_BUBBLE_V ? 2 : p->interleave > 1 ? p->interleave : 1;
}

/* ---- operators ---- */

/* The network's operator called name, or -1 (a linear search: files are read once). */
static int sk__st_find_op(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  return -1;
}

/* Whether `type` (as the file spells it: older names and MindSpore's Activation for a ReLU too)
   names the network operator's kind. */
static sk_result sk__st_type_of(sk__jr *jr, const char *type, sk_op_kind net) {
  uint64_t kinds = sk_op_kinds_named(type);
  sk_op_kind kind;
  if (kinds & ((uint64_t)1 << net)) return SK_OK;
  if (!kinds) return sk__jr_fail(jr, "type", "unknown operator type \"%.40s\" (MindSpore's primitive names)", type);
  return sk__jr_fail(jr, "type", "a %s in the file, a %s in the network",
                     sk_op_kind_from_name(type, &kind) ? sk_op_kind_name(kind) : type, sk_op_kind_name(net));
}

/* Why an operator entry of a file older than version 3 is refused: version 3 follows MindSpore
   master's rules for these operators, where the files before followed the 2020 ones, so the
   strategy saved (and the parameter layouts it gave) may plan otherwise now. NULL when the
   operator's rule did not change (a MatMul changed only with batch dims: rank 3 or more). */
static const char *sk__st_changed_rule(const sk_graph *g, const sk_graph_op *op) {
  static const struct {
    sk_op_kind kind;
    int min_rank;
    const char *why;
  } changed[] = {{SK_OP_RESHAPE, 0, "its own strategy leaves its output whole"},
                 {SK_OP_GATHER, 0, "the indices' strategy comes first in its device matrix"},
                 {SK_OP_SOFTMAX_CE_LOGITS, 0, "any dim but the class axis may be cut, its loss is [B]"},
                 {SK_OP_MATMUL, 3, "with batch dims it is planned as BatchMatMul"}};
  int rank = 0;
  for (int k = 0; k < op->ninputs; k++)
    if (g->tensors[op->inputs[k]].ndims > rank) rank = g->tensors[op->inputs[k]].ndims;
  for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++)
    if (changed[i].kind == op->desc.kind && rank >= changed[i].min_rank) return changed[i].why;
  return NULL;
}

/* Operator entry i: the network's operator of that name and type, which takes its strategy
   (into descs) and, from version 2 on, its pipeline stage (into stages). "out_layout" came with
   version 3, as did layouts on every operator: no older file holds one. */
static sk_result sk__st_op(sk__jr *jr, size_t list_at, const sk__st_head *h, const sk_graph *g, json_t *list, size_t i,
                           sk_op_desc *descs, int *stages, bool *seen) {
  static const char *const v1[] = {"name", "type", "strategy", "out_strategy", "layouts", "fell_back", NULL};
  static const char *const v2[] = {"name", "type", "stage", "strategy", "out_strategy", "layouts", "fell_back", NULL};
  static const char *const v3[] = {"name",    "type",       "stage",     "strategy", "out_strategy",
                                   "layouts", "out_layout", "fell_back", NULL};
  json_t *v = json_array_get(list, i), *out;
  long long stage = 0;
  const char *name, *type;
  bool fell = false;
  sk_result r;
  if ((r = sk__jr_element(jr, "operators", list, i, list_at)) ||
      (r = sk__jr_keys(jr, v, h->version == 1 ? v1 : h->version == 2 ? v2 : v3)) ||
      (r = sk__jr_string(jr, v, "name", true, &name)) || (r = sk__jr_string(jr, v, "type", true, &type)))
    return r;
  int o = sk__st_find_op(g, name);
  if (o < 0) return sk__jr_fail(jr, "", "operator \"%.64s\" is not in the network", name);
  if (seen[o]) return sk__jr_fail(jr, "", "a second entry for operator \"%s\"", g->ops[o].name);
  seen[o] = true;
  if ((r = sk__st_type_of(jr, type, g->ops[o].desc.kind))) return r;
  const char *changed = h->version < 3 ? sk__st_changed_rule(g, &g->ops[o]) : NULL;
  if (changed)
    return sk__jr_fail(jr, "type", "a version %d file: the %s rule changed in version 3 (%s); save the plan again",
                       h->version, sk_op_kind_name(g->ops[o].desc.kind), changed);
  if (h->version >= 2) {
    if ((r = sk__jr_int(jr, v, "stage", true, 0, h->stages - 1, &stage))) return r;
    stages[o] = (int)stage;
  }
  if (!json_object_get(v, "strategy")) return sk__jr_fail(jr, "strategy", "missing (null: no strategy)");
  if ((r = sk__jr_bool(jr, v, "fell_back", &fell))) return r; /* what the writer noted: checked, not used */
  sk_op_desc *d = &descs[o];
  int n = 0;
  d->has_strategy = d->has_out_strategy = d->has_layouts = false; /* the file's replace the network's */
  d->nstrategies = d->nout_layouts = 0;
  memset(d->strategy, 0, sizeof d->strategy), memset(d->strategy_len, 0, sizeof d->strategy_len);
  memset(d->out_strategy, 0, sizeof d->out_strategy), memset(d->layouts, 0, sizeof d->layouts);
  memset(d->out_layouts, 0, sizeof d->out_layouts);
  if ((r = sk__jr_shard(jr, g, &g->ops[o], v, "strategy", true, d))) return r;
  if ((out = json_object_get(v, "out_strategy"))) {
    if ((r = sk__jr_int_list(jr, out, "out_strategy", d->out_strategy, &n))) return r;
    d->has_out_strategy = true;
  }
  if ((r = sk__jr_layouts(jr, g, v, &g->ops[o], d))) return r;
  return sk__jr_out_layout(jr, g, v, &g->ops[o], d);
}

/* "operators": one entry per network operator, each the network has. */
static sk_result sk__st_ops(const sk__st_rd *rd, const sk__st_head *h, const sk_graph *g, sk_op_desc *descs,
                            int *stages, bool *seen) {
  json_t *list = json_object_get(rd->root, "operators");
  sk__jr jr;
  sk__st_jr(&jr, rd, "operators");
  if (!list) return sk__jr_fail(&jr, "operators", "missing: the file holds no operator strategies");
  if (!json_is_array(list)) return sk__jr_fail(&jr, "operators", "expected a list, got %s", sk__jr_type(list));
  for (int o = 0; o < g->nops; o++) descs[o] = g->ops[o].desc, stages[o] = g->ops[o].stage;
  size_t list_at = jr.at;
  for (size_t i = 0; i < json_array_size(list); i++) {
    sk_result r = sk__st_op(&jr, list_at, h, g, list, i, descs, stages, seen);
    if (r) return r;
  }
  sk__jr_top(&jr, "operators");
  for (int o = 0; o < g->nops; o++)
    if (!seen[o])
      return sk__jr_fail(&jr, "operators", "the network's operator \"%s\" (%s) is not in the file", g->ops[o].name,
                         sk_op_kind_name(g->ops[o].desc.kind));
  return SK_OK;
}

/* ---- the dataset strategy ---- */

/* Dataset entry k as a layout {"mesh": ..., "map": ...} of input tensor x. */
static sk_result sk__st_dataset_layout(sk__jr *jr, json_t *v, const sk_graph_tensor *x, sk_layout *l) {
  static const char *const keys[] = {"mesh", "map", NULL};
  const char *mesh_text, *map;
  sk_mesh mesh;
  sk_error e;
  sk_result r;
  if (!json_is_object(v))
    return sk__jr_fail(jr, "", "expected a layout {\"mesh\": ..., \"map\": ...}, got %s", sk__jr_type(v));
  if ((r = sk__jr_keys(jr, v, keys)) || (r = sk__jr_string(jr, v, "mesh", true, &mesh_text)) ||
      (r = sk__jr_string(jr, v, "map", true, &map)))
    return r;
  if (sk_mesh_parse(&mesh, mesh_text, &e)) return sk__jr_fail(jr, "mesh", "%s", e.msg);
  if (x->ndims == 0) { /* a scalar: whole on every device, as sk_ops.h lays scalars */
    if (map[0]) return sk__jr_fail(jr, "map", "input '%s' is a scalar: expected \"\"", x->name);
    memset(l, 0, sizeof *l), l->mesh = mesh;
    return SK_OK;
  }
  if (sk_layout_parse(l, &mesh, map, x->ndims, x->shape, &e)) return sk__jr_fail(jr, "map", "%s", e.msg);
  return SK_OK;
}

/* "dataset_strategy": "data_parallel", "full_batch", a list of strategy tuples or of layouts,
   one per network input in the order the inputs were added. */
static sk_result sk__st_dataset(const sk__st_rd *rd, const sk_graph *g, sk_autoparallel *d) {
  json_t *v = json_object_get(rd->root, "dataset_strategy");
  sk__jr jr;
  sk__st_jr(&jr, rd, "dataset_strategy");
  d->dataset = SK_DATASET_DATA_PARALLEL, d->ndataset = d->ndataset_layouts = 0;
  memset(d->dataset_strategy, 0, sizeof d->dataset_strategy);
  memset(d->dataset_strategy_len, 0, sizeof d->dataset_strategy_len);
  memset(d->dataset_layouts, 0, sizeof d->dataset_layouts);
  if (json_is_string(v) && !strcmp(json_string_value(v), "data_parallel")) return SK_OK;
  if (json_is_string(v) && !strcmp(json_string_value(v), "full_batch")) return d->dataset = SK_DATASET_FULL_BATCH, SK_OK;
  if (!json_is_array(v) || json_array_size(v) == 0)
    return sk__jr_fail(&jr, "dataset_strategy", "expected \"data_parallel\", \"full_batch\" or a list of strategies or "
                       "layouts, got %s", json_is_array(v) ? "an empty list" : sk__jr_type(v));
  int ids[SK_OP_MAX_INPUTS], n = 0;
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_INPUT) {
      if (n < SK_OP_MAX_INPUTS) ids[n] = t;
      n++;
    }
  if (json_array_size(v) != (size_t)n || n > SK_OP_MAX_INPUTS)
    return sk__jr_fail(&jr, "dataset_strategy", "%zu entries for the network's %d inputs", json_array_size(v), n);
  bool layouts = json_is_object(json_array_get(v, 0));
  (void)snprintf(jr.where, sizeof jr.where, "dataset_strategy");
  for (int k = 0; k < n; k++) {
    const sk_graph_tensor *x = &g->tensors[ids[k]];
    json_t *e = json_array_get(v, (size_t)k);
    char key[32];
    int len = 0;
    sk_result r;
    (void)snprintf(key, sizeof key, "[%d]", k);
    if (layouts) {
      size_t up = strlen(jr.where);
      (void)snprintf(jr.where + up, sizeof jr.where - up, "%s", key);
      if ((r = sk__st_dataset_layout(&jr, e, x, &d->dataset_layouts[k]))) return r;
      jr.where[up] = 0;
      continue;
    }
    if ((r = sk__jr_int_list(&jr, e, key, d->dataset_strategy[k], &len))) return r;
    if (len == 0 && x->ndims != 0) return sk__jr_empty_tuple(&jr, key, x->ndims);
    d->dataset_strategy_len[k] = len == x->ndims ? 0 : len; /* 0 stands for the input's rank */
  }
  if (layouts) d->ndataset_layouts = n;
  else d->ndataset = n;
  return SK_OK;
}

SK_API sk_result sk_strategy_load_operators(const char *path, sk_graph *g, sk_autoparallel *desc, sk_error *err) {
  if (!path || !g || !desc) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: NULL argument");
  sk_result r = sk__st_allocator(&desc->allocator, err);
  if (!r) r = sk_graph_check(g, err);
  if (r) return r;
  const sk_allocator *a = &desc->allocator;
  sk__st_rd rd;
  if ((r = sk__st_open(&rd, path, a, err))) return sk__st_close(&rd), r;
  size_t n = (size_t)g->nops + 1;
  sk_op_desc *descs = (sk_op_desc *)sk__calloc(a, n * sizeof *descs, 0);
  int *stages = (int *)sk__calloc(a, n * sizeof *stages, 0);
  bool *seen = (bool *)sk__calloc(a, n * sizeof *seen, 0);
  sk_autoparallel d = *desc;
  sk__st_head h;
  if (!descs || !stages || !seen) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "strategy: out of memory loading '%s'", path);
  if (!r) r = sk__st_header(&rd, desc->ndevices, desc->ndevices, &h);
  if (!r) r = sk__st_setup(&rd, &h, desc->pipeline.stages, &desc->hsdp, "the configuration asks for", &d);
  if (!r) r = sk__st_dataset(&rd, g, &d);
  if (!r) r = sk__st_ops(&rd, &h, g, descs, stages, seen);
  if (!r) { /* all or nothing: the graph and desc change only once the whole file is accepted */
    /* the stages become the network's annotations, which the compiler follows with one chunk
       per stage; with more, it cuts by FLOPs and the check after compiling compares the cut */
    bool annotate = h.version >= 2 && sk__st_chunks(&d.pipeline) == 1;
    for (int o = 0; o < g->nops; o++) {
      g->ops[o].desc = descs[o];
      if (annotate) g->ops[o].stage = stages[o];
    }
    *desc = d;
  }
  sk__free(a, descs), sk__free(a, stages), sk__free(a, seen);
  sk__st_close(&rd);
  return r;
}

/* ---- parameters ---- */

/* The file's "tensor_map": one entry per dim, MindSpore's numbers (mesh axes counted from the
   right, -1 unsplit, a list for a dim cut by several axes). */
static sk_result sk__st_tensor_map(sk__jr *jr, json_t *v, int ndims, sk_dim_map *ms) {
  if (!json_is_array(v) || json_array_size(v) != (size_t)ndims)
    return sk__jr_fail(jr, "tensor_map", "expected a list of %d entries, one per dim, got %s", ndims,
                       json_is_array(v) ? "another length" : sk__jr_type(v));
  memset(ms, 0, SK_MAX_DIMS * sizeof *ms);
  for (int d = 0; d < ndims; d++) {
    json_t *e = json_array_get(v, (size_t)d);
    int64_t axes[SK_MAX_AXES];
    int n = 1;
    char key[32];
    (void)snprintf(key, sizeof key, "tensor_map[%d]", d);
    if (json_is_integer(e) && json_integer_value(e) >= -1 && json_integer_value(e) < SK_MAX_AXES)
      axes[0] = json_integer_value(e);
    else if (!json_is_array(e) || json_array_size(e) == 0 || sk__jr_ints(jr, e, key, SK_MAX_AXES, 0, SK_MAX_AXES - 1, axes, &n))
      return sk__jr_fail(jr, key, "expected -1, a mesh axis 0..%d or a non-empty list of them", SK_MAX_AXES - 1);
    ms[d].naxes = n;
    for (int j = 0; j < n; j++) ms[d].axes[j] = (int)axes[j];
  }
  return SK_OK;
}

/* The file's layout of parameter x: device matrix and tensor map, which the slice shape must
   agree with. */
static sk_result sk__st_file_layout(sk__jr *jr, json_t *v, const sk_graph_tensor *x, int ndevices, sk_layout *l) {
  static const char *const names[SK_MAX_AXES] = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"};
  int64_t dims64[SK_MAX_AXES], slice[SK_MAX_DIMS], want[SK_MAX_DIMS] = {0};
  int dims[SK_MAX_AXES], naxes = 0, ns = 0;
  long long size = 1;
  sk_dim_map ms[SK_MAX_DIMS];
  sk_mesh mesh;
  sk_error e;
  sk_result r;
  if ((r = sk__jr_ints(jr, json_object_get(v, "device_matrix"), "device_matrix", SK_MAX_AXES, 1, SK_MAX_DEVICES,
                       dims64, &naxes)))
    return r;
  /* once past SK_MAX_DEVICES the product cannot be the device count: stop before it overflows */
  for (int a = 0; a < naxes; a++) dims[a] = (int)dims64[a], size *= size <= SK_MAX_DEVICES ? dims64[a] : 1;
  if (naxes == 0 || size != ndevices)
    return sk__jr_fail(jr, "device_matrix", "expected dims whose product is the %d devices", ndevices);
  memset(&mesh, 0, sizeof mesh); /* the analyzer cannot see that a refusal's code is never 0 */
  if (sk_mesh_init(&mesh, naxes, dims, names, &e)) return sk__jr_fail(jr, "device_matrix", "%s", e.msg);
  if ((r = sk__st_tensor_map(jr, json_object_get(v, "tensor_map"), x->ndims, ms))) return r;
  memset(l, 0, sizeof *l), l->mesh = mesh;
  if (x->ndims && sk_layout_from_ms_map(l, &mesh, x->ndims, x->shape, ms, &e))
    return sk__jr_fail(jr, "tensor_map", "%s", e.msg);
  if ((r = sk__jr_ints(jr, json_object_get(v, "slice_shape"), "slice_shape", SK_MAX_DIMS, 1, LLONG_MAX, slice, &ns)))
    return r;
  if (x->ndims) sk_layout_slice_shape(l, want);
  bool same = ns == x->ndims;
  for (int d = 0; same && d < ns; d++) same = slice[d] == want[d];
  if (!same) {
    char a[96], b[96];
    sk__st_list_text(slice, ns, a, sizeof a), sk__st_list_text(want, x->ndims, b, sizeof b);
    return sk__jr_fail(jr, "slice_shape", "%s is not the layout's %s", a, b);
  }
  return SK_OK;
}

/* A layout as "device matrix [2,4], tensor map (1,-1), slice [392,128]" for messages. */
static void sk__st_layout_text(const sk_layout *l, char *buf, size_t cap) {
  int64_t dims[SK_MAX_AXES], slice[SK_MAX_DIMS] = {0};
  sk_dim_map ms[SK_MAX_DIMS];
  char d[64], m[96], s[96];
  for (int a = 0; a < l->mesh.naxes; a++) dims[a] = l->mesh.dims[a];
  sk__st_list_text(dims, l->mesh.naxes, d, sizeof d);
  m[0] = 0;
  if (l->ndims) sk_layout_to_ms_map(l, ms), sk_ms_map_format(ms, l->ndims, m, sizeof m), sk_layout_slice_shape(l, slice);
  sk__st_list_text(slice, l->ndims, s, sizeof s);
  (void)snprintf(buf, cap, "device matrix %s, tensor map %s, slice %s", d, l->ndims ? m : "()", s);
}

/* The devices holding the same slice as each device under l: its mesh over the axes it uses. */
static int sk__st_replicas(const sk_layout *l) {
  uint32_t used = sk_layout_used_axes(l);
  int n = l->mesh.size;
  for (int a = 0; a < l->mesh.naxes; a++)
    if (used & (1u << a)) n /= l->mesh.dims[a];
  return n;
}

/* "opt_shard": null (kept whole) or {"size": S, "mirror": M, "slice_shape": [...]}, the
   optimizer shard of a parameter laid out as l: S shards of its slice's dim 0 among the
   slice's S x M replicas, and the slice each shard holds. Into *size and *mirror (0: whole). */
static sk_result sk__st_opt_shard(sk__jr *jr, json_t *v, const sk_layout *l, int *size, int *mirror) {
  static const char *const keys[] = {"size", "mirror", "slice_shape", NULL};
  json_t *o = json_object_get(v, "opt_shard");
  int64_t want[SK_MAX_DIMS] = {0}, got[SK_MAX_DIMS];
  long long s = 0, m = 0;
  int n = 0;
  sk_result r;
  *size = *mirror = 0;
  if (json_is_null(o)) return SK_OK;
  if (!json_is_object(o))
    return sk__jr_fail(jr, "opt_shard", "expected null (kept whole) or {\"size\", \"mirror\", \"slice_shape\"}, got %s",
                       sk__jr_type(o));
  size_t up = strlen(jr->where);
  (void)snprintf(jr->where + up, sizeof jr->where - up, ".opt_shard");
  if ((r = sk__jr_keys(jr, o, keys)) || (r = sk__jr_int(jr, o, "size", true, 2, SK_MAX_DEVICES, &s)) ||
      (r = sk__jr_int(jr, o, "mirror", true, 1, SK_MAX_DEVICES, &m)))
    return r;
  int replicas = sk__st_replicas(l);
  if (l->ndims == 0) return sk__jr_fail(jr, "size", "a scalar has no dim 0 to shard");
  if (s * m != replicas)
    return sk__jr_fail(jr, "size", "%lld shards x mirror %lld are not the layout's %d replicas", s, m, replicas);
  sk_layout_slice_shape(l, want);
  if (want[0] % s)
    return sk__jr_fail(jr, "size", "%lld shards do not divide dim 0 of the slice (%lld)", s, (long long)want[0]);
  want[0] /= s;
  if ((r = sk__jr_ints(jr, json_object_get(o, "slice_shape"), "slice_shape", SK_MAX_DIMS, 1, LLONG_MAX, got, &n)))
    return r;
  bool same = n == l->ndims;
  for (int d = 0; same && d < n; d++) same = got[d] == want[d];
  if (!same) {
    char a[96], b[96];
    sk__st_list_text(got, n, a, sizeof a), sk__st_list_text(want, l->ndims, b, sizeof b);
    return sk__jr_fail(jr, "slice_shape", "%s is not the shard's %s", a, b);
  }
  jr->where[up] = 0;
  *size = (int)s, *mirror = (int)m;
  return SK_OK;
}

/* Parameter entry i against the compiled plan. */
static sk_result sk__st_param(sk__jr *jr, size_t list_at, const sk__st_head *h, const sk_parallel_plan *p,
                              json_t *list, size_t i, bool *seen) {
  static const char *const v1[] = {"name", "shape", "device_matrix", "tensor_map", "slice_shape", NULL};
  static const char *const v2[] = {"name", "shape", "device_matrix", "tensor_map", "slice_shape", "opt_shard", NULL};
  const sk_graph *g = p->graph;
  json_t *v = json_array_get(list, i);
  const char *name;
  int64_t shape[SK_MAX_DIMS];
  int n = 0;
  sk_result r;
  if ((r = sk__jr_element(jr, "parameters", list, i, list_at)) || (r = sk__jr_keys(jr, v, h->version == 1 ? v1 : v2)) ||
      (r = sk__jr_string(jr, v, "name", true, &name)))
    return r;
  int t = sk_graph_find(g, name);
  if (t < 0 || g->tensors[t].role != SK_TENSOR_PARAM)
    return sk__jr_fail(jr, "", "parameter \"%.64s\" is not in the network", name);
  if (seen[t]) return sk__jr_fail(jr, "", "a second entry for parameter \"%s\"", g->tensors[t].name);
  seen[t] = true;
  const sk_graph_tensor *x = &g->tensors[t];
  if ((r = sk__jr_ints(jr, json_object_get(v, "shape"), "shape", SK_MAX_DIMS, 1, LLONG_MAX, shape, &n))) return r;
  bool same = n == x->ndims;
  for (int d = 0; same && d < n; d++) same = shape[d] == x->shape[d];
  if (!same) {
    char a[96], b[96];
    sk__st_list_text(shape, n, a, sizeof a), sk__st_list_text(x->shape, x->ndims, b, sizeof b);
    return sk__jr_fail(jr, "shape", "%s in the file, %s in the network", a, b);
  }
  sk_layout fl;
  int size = 0, mirror = 0;
  if ((r = sk__st_file_layout(jr, v, x, p->desc.ndevices, &fl))) return r;
  if (h->version >= 2 && (r = sk__st_opt_shard(jr, v, &fl, &size, &mirror))) return r;
  const sk_parallel_tensor *pt = &p->tensors[t];
  char a[320], b[320]; /* sk__st_layout_text writes at most 289 bytes */
  /* a scalar is whole everywhere */
  if (x->ndims != 0 && !sk_parallel_same_layout(&fl, &pt->layout)) {
    sk__st_layout_text(&fl, a, sizeof a), sk__st_layout_text(&pt->layout, b, sizeof b);
    return sk__jr_fail(jr, "", "laid out otherwise after compiling: the file's %s; the plan's %s", a, b);
  }
  if (h->version < 2 || (size == pt->opt_size && mirror == pt->opt_mirror)) return SK_OK;
  if (size) (void)snprintf(a, sizeof a, "%d shards, mirror %d", size, mirror);
  else (void)snprintf(a, sizeof a, "kept whole");
  if (pt->opt_size) (void)snprintf(b, sizeof b, "%d shards, mirror %d", pt->opt_size, pt->opt_mirror);
  else (void)snprintf(b, sizeof b, "kept whole (%.120s)", pt->opt_why ? pt->opt_why : "");
  return sk__jr_fail(jr, "opt_shard", "optimizer-sharded otherwise after compiling: the file's %s; the plan's %s", a,
                     b);
}

SK_API sk_result sk_strategy_check_params(const char *path, const sk_parallel_plan *p, bool all_params, sk_error *err) {
  if (!path || !p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: NULL argument");
  if (!p->graph || !p->tensors) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: the plan is not compiled");
  const sk_graph *g = p->graph;
  const sk_allocator *a = &p->desc.allocator;
  sk_result r = sk__st_allocator(a, err);
  if (r) return r;
  sk__st_rd rd;
  if ((r = sk__st_open(&rd, path, a, err))) return sk__st_close(&rd), r;
  bool *seen = (bool *)sk__calloc(a, ((size_t)g->ntensors + 1) * sizeof *seen, 0), *trainable = sk__st_trainable(g, a);
  json_t *list = json_object_get(rd.root, "parameters");
  sk__jr jr;
  sk__st_head h;
  sk__st_jr(&jr, &rd, "parameters");
  if (!seen || !trainable) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "strategy: out of memory checking '%s'", path);
  if (!r) r = sk__st_header(&rd, p->desc.ndevices, p->world_devices, &h);
  if (!r) r = sk__st_setup(&rd, &h, p->stages, &p->desc.hsdp, "the compiled plan has", NULL);
  if (!r && !list) r = sk__jr_fail(&jr, "parameters", "missing: the file holds no parameter layouts");
  if (!r && !json_is_array(list)) r = sk__jr_fail(&jr, "parameters", "expected a list, got %s", sk__jr_type(list));
  size_t list_at = jr.at;
  for (size_t i = 0; !r && i < json_array_size(list); i++) r = sk__st_param(&jr, list_at, &h, p, list, i, seen);
  if (!r) sk__jr_top(&jr, "parameters");
  for (int t = 0; !r && t < g->ntensors; t++)
    if (sk__st_listed(g, trainable, t, all_params) && !seen[t])
      r = sk__jr_fail(&jr, "parameters", "the network's parameter \"%s\" is not in the file", g->tensors[t].name);
  sk__free(a, seen), sk__free(a, trainable);
  sk__st_close(&rd);
  return r;
}

/* ---- stages ---- */

/* Operator o's pipeline stage in a compiled plan (0 without a pipeline). */
static int sk__st_stage_of(const sk_parallel_plan *p, int o) {
  return p->vstage ? sk_pipe_stage_of(&p->schedule, p->vstage[o], NULL) : 0;
}

/* After compiling from a version 2 file: every operator on the stage the file gives it. With
   one chunk per stage the loaded annotations made it so; with more, the compiler's cut by
   FLOPs must agree with the file's. */
static sk_result sk__st_check_stages(const char *path, const sk_parallel_plan *p, sk_error *err) {
  sk__st_rd rd;
  sk__st_head h;
  sk_result r = sk__st_open(&rd, path, &p->desc.allocator, err);
  if (!r) r = sk__st_header(&rd, p->world_devices, p->world_devices, &h);
  json_t *list = r ? NULL : json_object_get(rd.root, "operators");
  for (size_t i = 0; !r && h.version >= 2 && i < json_array_size(list); i++) {
    json_t *e = json_array_get(list, i), *name = json_object_get(e, "name"), *stage = json_object_get(e, "stage");
    int o = json_is_string(name) ? sk__st_find_op(p->graph, json_string_value(name)) : -1;
    if (o < 0 || !json_is_integer(stage) || json_integer_value(stage) == sk__st_stage_of(p, o)) continue;
    sk__jr jr;
    sk__st_jr(&jr, &rd, "operators");
    if (!(r = sk__jr_element(&jr, "operators", list, i, jr.at)))
      r = sk__jr_fail(&jr, "stage", "stage %lld in the file, stage %d after compiling (%d chunks per stage: cut by FLOPs)",
                      (long long)json_integer_value(stage), sk__st_stage_of(p, o), p->schedule.chunks);
  }
  sk__st_close(&rd);
  return r;
}

/* ==== writing ================================================================================= */

/* A strategy file's writing: the layer's (sk_json_write.h), the plan written and its trainable
   parameters. */
typedef struct sk__sw {
  sk__jw jw;
  const sk_parallel_plan *p;
  const bool *trainable; /* sk__st_trainable */
} sk__sw;

/* Whether two rule plans are the same, as sk_op_plan_format prints them (mesh, layouts,
   collectives); out of memory sets w->jw.failed. */
static bool sk__sw_same_op_plan(sk__sw *w, const sk_op_plan *a, const sk_op_plan *b) {
  size_t na = sk_op_plan_format(a, NULL, 0), nb = sk_op_plan_format(b, NULL, 0);
  if (na != nb) return false;
  const sk_allocator *al = &w->p->desc.allocator;
  char *x = (char *)sk__alloc(al, na + 1, 1), *y = (char *)sk__alloc(al, nb + 1, 1);
  bool same = x && y;
  if (same) sk_op_plan_format(a, x, na + 1), sk_op_plan_format(b, y, nb + 1), same = !strcmp(x, y);
  else w->jw.failed = true;
  sk__free(al, x), sk__free(al, y);
  return same;
}

/* An operator planned without a strategy (MindSpore's default, or a fallback) written with the
   strategy it got: its rule's cut of each input (OneHot's indices: of its output, over which
   its tuple is written). Kept only when the rule planning those tuples gives the same plan;
   false (written null) otherwise. */
static bool sk__sw_default(sk__sw *w, int o, sk_op_desc *out) {
  const sk_parallel_plan *p = w->p;
  const sk_parallel_op *po = &p->ops[o];
  sk_op_desc d = po->desc;
  sk_op_plan probe;
  d.has_strategy = true, d.has_out_strategy = false, d.nstrategies = 0;
  memset(d.strategy, 0, sizeof d.strategy), memset(d.strategy_len, 0, sizeof d.strategy_len);
  for (int k = 0; k < po->plan.ninputs && k < SK_OP_MAX_INPUTS; k++) {
    bool over_output = k == 0 && sk_op_row_of(d.kind)->tuple_extra; /* OneHot's indices' tuple */
    const sk_layout *l = over_output ? &po->plan.out[0] : &po->plan.in[k];
    for (int e = 0; e < l->ndims; e++) d.strategy[k][e] = sk_layout_split_count(l, e);
  }
  if (sk_op_plan_make(&d, p->desc.ndevices, &probe, NULL) || !sk__sw_same_op_plan(w, &probe, &po->plan)) return false;
  *out = d;
  return true;
}

/* The strategy operator o used: its tuples as written (the default form's zero counts and
   lengths spelt out), the strategy a default gave it, or null (layouts; a default with no
   tuple form). */
static json_t *sk__sw_shard(sk__sw *w, int o) {
  const sk_graph *g = w->p->graph;
  const sk_op_desc *d = &w->p->ops[o].desc;
  sk_op_desc got;
  if (!d->has_strategy && (d->has_layouts || !sk__sw_default(w, o, &got))) return json_null();
  if (!d->has_strategy) d = &got;
  json_t *tuples = json_array();
  int n = d->nstrategies ? d->nstrategies : sk__json_tuples(&g->ops[o]);
  for (int i = 0; i < n && i < SK_OP_MAX_INPUTS; i++) {
    int len = d->strategy_len[i] ? d->strategy_len[i] : sk__json_tuple_len(g, &g->ops[o], i);
    sk__jw_append(&w->jw, tuples, sk__jw_ints(&w->jw, d->strategy[i], len < SK_MAX_DIMS ? len : SK_MAX_DIMS));
  }
  return tuples;
}

static json_t *sk__sw_op(sk__sw *w, int o) {
  const sk_graph *g = w->p->graph;
  const sk_parallel_op *po = &w->p->ops[o];
  const sk_op_desc *d = &po->desc;
  json_t *v = json_object();
  sk__jw_set(&w->jw, v, "name", sk__jw_name(&w->jw, g->ops[o].name));
  sk__jw_set(&w->jw, v, "type", json_string(sk_op_kind_name(d->kind)));
  sk__jw_set(&w->jw, v, "stage", json_integer(sk__st_stage_of(w->p, o)));
  sk__jw_set(&w->jw, v, "strategy", sk__sw_shard(w, o));
  if (d->has_out_strategy) { /* over output 0's rank, and any non-zero entry past it */
    int n = g->ops[o].noutputs ? g->tensors[g->ops[o].outputs[0]].ndims : 0;
    for (int k = n; k < SK_MAX_DIMS; k++)
      if (d->out_strategy[k]) n = k + 1;
    sk__jw_set(&w->jw, v, "out_strategy", sk__jw_ints(&w->jw, d->out_strategy, n));
  }
  if (d->has_layouts) sk__jw_set(&w->jw, v, "layouts", sk__jw_layouts(&w->jw, d->layouts, g->ops[o].ninputs, "inputs"));
  if (d->nout_layouts) sk__jw_set(&w->jw, v, "out_layout", sk__jw_layouts(&w->jw, d->out_layouts, d->nout_layouts, "outputs"));
  if (po->fell_back) sk__jw_set(&w->jw, v, "fell_back", json_true());
  return v;
}

/* The plan's dataset strategy: a name, or a list of tuples or of layouts. */
static json_t *sk__sw_dataset(sk__sw *w) {
  const sk_autoparallel *d = &w->p->desc;
  const sk_graph *g = w->p->graph;
  if (!d->ndataset && !d->ndataset_layouts)
    return json_string(d->dataset == SK_DATASET_FULL_BATCH ? "full_batch" : "data_parallel");
  json_t *list = json_array();
  for (int t = 0, k = 0; t < g->ntensors && k < SK_OP_MAX_INPUTS; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    if (d->ndataset_layouts) {
      if (k < d->ndataset_layouts) sk__jw_append(&w->jw, list, sk__jw_layout(&w->jw, &d->dataset_layouts[k], "map", NULL));
    } else if (k < d->ndataset) {
      int len = d->dataset_strategy_len[k] ? d->dataset_strategy_len[k] : g->tensors[t].ndims;
      sk__jw_append(&w->jw, list, sk__jw_ints(&w->jw, d->dataset_strategy[k], len < SK_MAX_DIMS ? len : SK_MAX_DIMS));
    }
    k++;
  }
  return list;
}

/* Parameter t's optimizer shard: null when kept whole, else its count, the Mirror group left
   and the slice each shard holds (the model-parallel slice, dim 0 cut by the count). */
static json_t *sk__sw_opt_shard(sk__sw *w, int t) {
  const sk_parallel_tensor *pt = &w->p->tensors[t];
  int64_t slice[SK_MAX_DIMS] = {0};
  if (!pt->opt_size || pt->layout.ndims == 0) return json_null();
  json_t *v = json_object();
  sk_layout_slice_shape(&pt->layout, slice);
  slice[0] /= pt->opt_size;
  sk__jw_set(&w->jw, v, "size", json_integer(pt->opt_size));
  sk__jw_set(&w->jw, v, "mirror", json_integer(pt->opt_mirror));
  sk__jw_set(&w->jw, v, "slice_shape", sk__jw_i64s(&w->jw, slice, pt->layout.ndims));
  return v;
}

/* The plan's hsdp(): null when optimizer parallel is off. */
static json_t *sk__sw_hsdp(sk__sw *w) {
  const sk_hsdp *h = &w->p->desc.hsdp;
  if (!h->enabled) return json_null();
  json_t *v = json_object();
  sk__jw_set(&w->jw, v, "shard_size", json_integer(h->shard_size));
  sk__jw_set(&w->jw, v, "threshold", json_integer((json_int_t)h->threshold_kb));
  sk__jw_set(&w->jw, v, "optimizer_level", json_string(sk_hsdp_level_name(h->level)));
  return v;
}

/* Parameter t's layout in the plan: device matrix, MindSpore's tensor map, slice shape, and
   its optimizer shard. */
static json_t *sk__sw_param(sk__sw *w, int t) {
  const sk_graph_tensor *x = &w->p->graph->tensors[t];
  const sk_layout *l = &w->p->tensors[t].layout;
  json_t *v = json_object(), *map = json_array();
  int64_t slice[SK_MAX_DIMS] = {0};
  sk_dim_map ms[SK_MAX_DIMS];
  sk__jw_set(&w->jw, v, "name", sk__jw_name(&w->jw, x->name));
  sk__jw_set(&w->jw, v, "shape", sk__jw_i64s(&w->jw, x->shape, x->ndims));
  sk__jw_set(&w->jw, v, "device_matrix", sk__jw_ints(&w->jw, l->mesh.dims, l->mesh.naxes));
  if (x->ndims) sk_layout_to_ms_map(l, ms), sk_layout_slice_shape(l, slice);
  for (int d = 0; d < x->ndims; d++) {
    if (ms[d].naxes <= 1) sk__jw_append(&w->jw, map, json_integer(ms[d].naxes ? ms[d].axes[0] : -1));
    else sk__jw_append(&w->jw, map, sk__jw_ints(&w->jw, ms[d].axes, ms[d].naxes));
  }
  sk__jw_set(&w->jw, v, "tensor_map", map);
  sk__jw_set(&w->jw, v, "slice_shape", sk__jw_i64s(&w->jw, slice, x->ndims));
  sk__jw_set(&w->jw, v, "opt_shard", sk__sw_opt_shard(w, t));
  return v;
}

static json_t *sk__sw_root(sk__sw *w, bool params, bool operators, bool all_params) {
  const sk_graph *g = w->p->graph;
  json_t *root = json_object();
  sk__jw_set(&w->jw, root, "format", json_string(SK__ST_FORMAT));
  sk__jw_set(&w->jw, root, "version", json_integer(SK__ST_VERSION));
  sk__jw_set(&w->jw, root, "device_num", json_integer(w->p->world_devices)); /* every stage's */
  sk__jw_set(&w->jw, root, "stages", json_integer(w->p->stages));
  sk__jw_set(&w->jw, root, "hsdp", sk__sw_hsdp(w));
  if (operators) {
    json_t *ops = json_array();
    sk__jw_set(&w->jw, root, "dataset_strategy", sk__sw_dataset(w));
    for (int o = 0; o < g->nops; o++) sk__jw_append(&w->jw, ops, sk__sw_op(w, o));
    sk__jw_set(&w->jw, root, "operators", ops);
  }
  if (params) {
    json_t *list = json_array();
    for (int t = 0; t < g->ntensors; t++)
      if (sk__st_listed(g, w->trainable, t, all_params)) sk__jw_append(&w->jw, list, sk__sw_param(w, t));
    sk__jw_set(&w->jw, root, "parameters", list);
  }
  return root;
}

/* What the writer reads must be in range: a compiled plan always is, but layouts on two meshes
   have no form in the file. */
static sk_result sk__sw_check(const sk_parallel_plan *p, sk_error *err) {
  if (!p->graph || !p->ops || !p->tensors) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: the plan is not compiled");
  if (sk__st_allocator(&p->desc.allocator, err)) return SK_ERR_INVALID_ARGUMENT;
  for (int o = 0; o < p->graph->nops; o++) {
    const sk_op_desc *d = &p->ops[o].desc;
    bool ok = true;
    for (int k = 0; d->has_layouts && k < p->graph->ops[o].ninputs; k++) ok = ok && sk_mesh_equal(&d->layouts[k].mesh, &d->layouts[0].mesh);
    for (int k = 0; k < d->nout_layouts; k++) ok = ok && sk_mesh_equal(&d->out_layouts[k].mesh, &d->out_layouts[0].mesh);
    if (!ok) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: operator '%s': its layouts are not on one mesh", p->graph->ops[o].name);
  }
  return SK_OK;
}

SK_API sk_result sk_strategy_format(const sk_parallel_plan *p, bool params, bool operators, bool all_params,
                                    char **text, sk_error *err) {
  if (!text) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: NULL text");
  *text = NULL;
  if (!p) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: NULL plan");
  sk_result r = sk__sw_check(p, err);
  if (r) return r;
  sk__sw w = {{false, NULL}, p, NULL};
  bool *trainable = sk__st_trainable(p->graph, &p->desc.allocator);
  if (!trainable) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "strategy: out of memory formatting the strategy file");
  w.trainable = trainable;
  json_t *root = sk__sw_root(&w, params, operators, all_params);
  sk__free(&p->desc.allocator, trainable);
  return sk__jw_text(&w.jw, root, SK__ST_DUMP_FLAGS, "strategy", "the strategy file", text, err);
}

SK_API sk_result sk_strategy_save(const sk_parallel_plan *p, const char *path, bool params, bool operators,
                                  bool all_params, sk_error *err) {
  if (!path) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "strategy: NULL path");
  char *text = NULL;
  sk_result r = sk_strategy_format(p, params, operators, all_params, &text, err);
  if (r) return r;
  return sk__jw_save(text, path, "strategy", err);
}

/* ==== the table sk_parallel_compile reads and writes through ================================= */

/* Step 3: the operators' stages against the operator file, the parameters against theirs. */
static sk_result sk__st_check_files(const sk_parallel_plan *p, const sk_autoparallel *desc, sk_error *err) {
  sk_result r = SK_OK;
  if (desc->load_operator_strategy_file) r = sk__st_check_stages(desc->load_operator_strategy_file, p, err);
  if (!r && desc->load_param_strategy_file)
    r = sk_strategy_check_params(desc->load_param_strategy_file, p, desc->strategy_file_all_params, err);
  return r;
}

/* Step 4: one file when both save paths are the same, holding both sections. */
static sk_result sk__st_save_files(const sk_parallel_plan *p, const sk_autoparallel *desc, sk_error *err) {
  const char *params = desc->save_param_strategy_file, *ops = desc->save_operator_strategy_file;
  bool all = desc->strategy_file_all_params;
  if (params && ops && !strcmp(params, ops)) return sk_strategy_save(p, params, true, true, all, err);
  sk_result r = params ? sk_strategy_save(p, params, true, false, all, err) : SK_OK;
  if (!r && ops) r = sk_strategy_save(p, ops, false, true, all, err);
  return r;
}

SK_API const sk_strategy_io_fns *sk_strategy_io(void) {
  static const sk_strategy_io_fns io = {sk_strategy_load_operators, sk__st_check_files, sk__st_save_files};
  return &io;
}

SK_EXTERN_C_END
#endif /* SK_STRATEGY_IMPL */
