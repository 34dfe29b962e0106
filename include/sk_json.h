/* sk_json.h -- an sk_graph as JSON: load a network description from text or a file, and save one
   (docs/network-json.md describes the format). jansson does all the parsing and printing. Also
   MindSpore's parallel_speed_up.json, read into sk_parallel.h's sk_transformer_opt.

   NEEDS JANSSON: link with -ljansson (Debian: libjansson-dev; `pkg-config --cflags --libs
   jansson`). That is why shardkit.h does not include this header: include it yourself.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_JSON_IMPL where the other modules'
                             #include "sk_json.h"   implementations come from elsewhere)

   WHAT IT DOES
     sk_json_format_network writes a graph in canonical form: fixed key order, 2-space
     indentation, doubles with 17 significant digits (so that they read back exactly), every
     attribute left out while it holds its zero default, a final newline. sk_json_parse_network
     reads any JSON of that content (keys in any order, any spacing) back through the graph's
     builder calls (sk_graph_add_input / _param / _const / _op, _set_requires_grad, _set_loss,
     _set_eval; the optimizer goes to g->optim once sk_optim_resolve has accepted it), so a
     loaded graph has passed every check a built one passes, and loading then saving a canonical file gives it
     back byte for byte. A strategy is kept as written, malformed tuple counts and lengths
     included: MindSpore refuses those when the network is compiled, not when it is read.
     A number among an operator's inputs is a constant (a rank-0 tensor, "<op>:in<k>", added just
     before its operator, of the dtype of the operator's first tensor input); constants are
     written back as numbers where they are read, never in "tensors".
     The "data" object (each input's source: sk_graph_set_data) is read after the operators and
     written after "dataset", its paths as written; sk_json_load_network sets g->data_dir to the
     file's directory, from which relative .npy paths are read (sk_graph_data_path).
     The listed tensors are added first, then the operators: a graph whose parameters were added
     between operators reads back with the same names, operators and parameter order, but other
     tensor ids.

   ERRORS
     A refused text gives SK_ERR_INVALID_ARGUMENT and one line starting "line N: ". A syntax
     error has jansson's line, column and text. Any other error names the JSON path of the value
     at fault and what was expected:
       line 31: operators[2] ("mm2").shard: expected a list of at most 4 tuples, got a string
     jansson keeps no positions of values, so the line is looked up in the text: the line of the
     element's "name": "<its name>" pair (names are unique), else that of the top-level key
     holding the value. The graph's own refusals (an operator rule rejecting a shape, ...) follow
     the path. A text of white space only: "the text is empty". The reading helpers are
     sk_json_read.h's, which sk_strategy.h's reader shares: one wording per kind of mistake.
     The writing ones (and the writers' refusals of a name that is not UTF-8) are
     sk_json_write.h's, which sk_strategy.h's writer shares.
     sk_json_load_network puts the file's base name in front. Out of memory: SK_ERR_OUT_OF_MEMORY;
     a file that cannot be read or written: SK_ERR_SYSTEM with the path and the system's reason.
     A file is read only when it is a regular file (a symbolic link to one is followed) of at
     most SK_MAX_TEXT_FILE_BYTES (sk_core.h, 256 MiB unless defined otherwise), and the parse
     calls refuse a longer len before reading the text; both are SK_ERR_INVALID_ARGUMENT naming
     the file or the call ("PATH: N bytes exceeds the limit of L bytes", "PATH: not a regular
     file (a FIFO)"). Formatting refuses (SK_ERR_INVALID_ARGUMENT) a graph holding what
     JSON cannot carry: a count or tensor id out of range, a non-finite number, a name that is
     not UTF-8, an operator's input (or output) layouts on different meshes; and an optimizer
     sk_optim_resolve refuses, which loading would refuse.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_JSON_IMPL)
#define SK_JSON_IMPL
#endif
#ifndef SK_JSON_H
#define SK_JSON_H

#include "sk_core.h"
#include "sk_graph.h"
#include "sk_parallel.h"

SK_EXTERN_C_BEGIN

/* Reads a network from len bytes of text. *g is overwritten, not freed (pass a graph that holds
   nothing, as sk_graph_init leaves it): on success it holds the network, which the caller frees
   with sk_graph_free; on failure it is empty. */
SK_API sk_result sk_json_parse_network(const char *text, size_t len, sk_graph *g, sk_error *err);
/* The same from a file. */
SK_API sk_result sk_json_load_network(const char *path, sk_graph *g, sk_error *err);
/* The canonical text of g, NUL-terminated, in *text (from the C library: the caller frees it
   with free(); NULL on failure). */
SK_API sk_result sk_json_format_network(const sk_graph *g, char **text, sk_error *err);
/* The canonical text of g written to path (created or truncated). */
SK_API sk_result sk_json_save_network(const sk_graph *g, const char *path, sk_error *err);

/* MindSpore's parallel_speed_up.json (AutoParallel's transformer_opt) into *out, overwritten only
   on success: grad_computation_allreduce_overlap and enable_communication_fusion (booleans;
   MindSpore's older names enable_grad_comm_opt and enable_task_opt too, which must agree with
   the newer where both are given) are honoured. MindSpore's other options are accepted while
   false or 0 and refused by name when set, as is any unknown key. */
SK_API sk_result sk_json_load_transformer_opt(const char *path, sk_transformer_opt *out, sk_error *err);
/* The same from len bytes of text. */
SK_API sk_result sk_json_parse_transformer_opt(const char *text, size_t len, sk_transformer_opt *out, sk_error *err);

SK_EXTERN_C_END
#endif /* SK_JSON_H */

#if defined(SK_JSON_IMPL) && !defined(SK_JSON_IMPL_DONE)
#define SK_JSON_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#define SK__JSON_READ_PRIVATE
#include "sk_json_read.h"
#define SK__JSON_WRITE_PRIVATE
#include "sk_json_write.h"
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SK__JSON_FORMAT "shardkit-network"
#define SK__JSON_VERSION 1
/* What saving fixes: key order as inserted, 2-space indentation, doubles that read back exactly. */
#define SK__JSON_DUMP_FLAGS (JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))
/* Dims of a tensor (and of the shapes an operator takes) as the graph allows them: >= 1, and at
   most 2^40 elements in all, so that no element count overflows. */
#define SK__JSON_MAX_ELEMS ((long long)1 << 40)

/* GetNext: its outputs' shapes and dtypes are attributes ("out_shapes", "out_dtypes"). */
static bool sk__json_source(const sk_op_desc *d) { return (sk_op_row_of(d->kind)->flags & SK_OPF_SOURCE) != 0; }

/* ==== reading ================================================================================= */

/* The helpers (sk__jr_*: field getters, strategy tuples, layouts) are sk_json_read.h's. */

static sk_result sk__jr_dtype(sk__jr *jr, json_t *v, const char *key, sk_dtype *dt) {
  if (!json_is_string(v) || !sk_dtype_from_name(json_string_value(v), dt))
    return sk__jr_fail(jr, key, "expected a dtype (f32 f64 f16 bf16 i8 u8 i32 i64), got %s",
                       json_is_string(v) ? "another string" : sk__jr_type(v));
  return SK_OK;
}

/* v as a tensor shape: at most SK_MAX_DIMS dims >= 1, at most 2^40 elements in all. */
static sk_result sk__jr_shape(sk__jr *jr, json_t *v, const char *key, int64_t *shape, int *n) {
  sk_result r = sk__jr_ints(jr, v, key, SK_MAX_DIMS, 1, SK__JSON_MAX_ELEMS, shape, n);
  long long elems = 1;
  for (int d = 0; r == SK_OK && d < *n; d++) {
    if (shape[d] > SK__JSON_MAX_ELEMS / elems) return sk__jr_fail(jr, key, "more than 2^40 elements");
    elems *= shape[d];
  }
  return r;
}

/* ---- tensors ---- */

static sk_result sk__jr_init(sk__jr *jr, json_t *t, sk_init *init) {
  static const char *const keys[] = {"kind", "value", NULL};
  json_t *v = json_object_get(t, "init");
  const char *kind;
  sk_result r;
  if (!json_is_object(v)) return sk__jr_fail(jr, "init", "expected an object {\"kind\": ...}, got %s", sk__jr_type(v));
  size_t up = sk__jr_descend(jr, "init");
  if ((r = sk__jr_keys(jr, v, keys)) || (r = sk__jr_string(jr, v, "kind", true, &kind))) return r;
  if (!sk_init_kind_from_name(kind, &init->kind))
    return sk__jr_fail(jr, "kind", "expected zeros, ones, constant, uniform, normal, he_uniform or xavier_uniform");
  if ((r = sk__jr_real(jr, v, "value", &init->value))) return r;
  jr->where[up] = 0;
  return SK_OK;
}

static sk_result sk__jr_tensor(sk__jr *jr, sk_graph *g, json_t *list, size_t i, size_t list_at) {
  json_t *v = json_array_get(list, i);
  static const char *const keys[] = {"name", "role", "dtype", "shape", "init", "requires_grad", "parallel_optimizer",
                                     NULL};
  const char *name, *role;
  bool requires_grad = true, parallel_optimizer = true;
  sk_dtype dt = SK_F32;
  int64_t shape[SK_MAX_DIMS];
  int n = 0;
  sk_init init = {SK_INIT_ZEROS, 0};
  sk_error e;
  sk_result r;
  if ((r = sk__jr_element(jr, "tensors", list, i, list_at)) || (r = sk__jr_keys(jr, v, keys)) ||
      (r = sk__jr_string(jr, v, "name", true, &name)) || (r = sk__jr_string(jr, v, "role", true, &role)) ||
      (r = sk__jr_dtype(jr, json_object_get(v, "dtype"), "dtype", &dt)) ||
      (r = sk__jr_shape(jr, json_object_get(v, "shape"), "shape", shape, &n)))
    return r;
  bool param = !strcmp(role, "parameter");
  if (!param && strcmp(role, "input")) return sk__jr_fail(jr, "role", "expected \"input\" or \"parameter\"");
  if (!param && json_object_get(v, "init")) return sk__jr_fail(jr, "init", "an input has no initialiser");
  if (!param && json_object_get(v, "requires_grad"))
    return sk__jr_fail(jr, "requires_grad", "an input takes no gradient");
  if (!param && json_object_get(v, "parallel_optimizer"))
    return sk__jr_fail(jr, "parallel_optimizer", "an input has no optimizer state");
  if (param && ((r = sk__jr_init(jr, v, &init)) || (r = sk__jr_bool(jr, v, "requires_grad", &requires_grad)) ||
                (r = sk__jr_bool(jr, v, "parallel_optimizer", &parallel_optimizer))))
    return r;
  int id = -1;
  r = param ? sk_graph_add_param(g, name, dt, n, shape, init, &id, &e)
            : sk_graph_add_input(g, name, dt, n, shape, NULL, &e);
  if (!r && param) r = sk_graph_set_requires_grad(g, id, requires_grad, &e);
  if (!r && param) r = sk_graph_set_parallel_optimizer(g, id, parallel_optimizer, &e);
  return r ? sk__jr_refused(jr, r, "", &e) : SK_OK;
}

/* ---- operators ---- */

static const char *const sk__jr_op_keys[] = {
    "name",       "type",     "inputs",    "transpose_a", "transpose_b", "axis",        "keep_dims",
    "perm",       "depth",    "shape",     "keep_prob",   "epsilon",     "on_value",    "off_value",
    "dtype",      "out_shapes", "out_dtypes", "repeat_left", "full_batch", "fusion",    "stage",
    "recompute",  "shard",    "out_strategy", "layouts",  "out_layout", "activation_type", NULL};

/* A number among the inputs (MindSpore's ops.Mul()(x, 0.5)) becomes a constant named
   "<op>:in<k>", of the dtype of the operator's first tensor input, as MindSpore converts the
   number to that tensor's dtype. */
static sk_result sk__jr_const_input(sk__jr *jr, sk_graph *g, json_t *list, sk_graph_op *op, int k, const char *key) {
  sk_dtype dt = SK_F32;
  bool found = false;
  for (int j = 0; j < op->ninputs && !found; j++)
    if (json_is_string(json_array_get(list, (size_t)j))) dt = g->tensors[op->inputs[j]].dtype, found = true;
  if (!found) return sk__jr_fail(jr, key, "a number needs a tensor input beside it, whose dtype it takes");
  char name[SK_GRAPH_NAME_MAX + 16]; /* room for any k: a name past the limit is the graph's to refuse */
  (void)snprintf(name, sizeof name, "%s:in%d", op->name, k);
  sk_error e;
  sk_result r = sk_graph_add_const(g, name, dt, json_number_value(json_array_get(list, (size_t)k)), &op->inputs[k], &e);
  return r ? sk__jr_refused(jr, r, key, &e) : SK_OK;
}

static sk_result sk__jr_inputs(sk__jr *jr, sk_graph *g, json_t *o, sk_graph_op *op) {
  json_t *list = json_object_get(o, "inputs");
  if (!json_is_array(list) || json_array_size(list) > SK_OP_MAX_INPUTS)
    return sk__jr_fail(jr, "inputs", "expected a list of at most %d tensor names or numbers, got %s", SK_OP_MAX_INPUTS,
                       json_is_array(list) ? "a longer one" : sk__jr_type(list));
  op->ninputs = (int)json_array_size(list);
  for (int k = 0; k < op->ninputs; k++) { /* the tensors first: a number takes their dtype */
    json_t *s = json_array_get(list, (size_t)k);
    char key[32];
    (void)snprintf(key, sizeof key, "inputs[%d]", k);
    if (json_is_number(s)) continue;
    if (!json_is_string(s)) return sk__jr_fail(jr, key, "expected a tensor name or a number, got %s", sk__jr_type(s));
    if ((op->inputs[k] = sk_graph_find(g, json_string_value(s))) < 0)
      return sk__jr_fail(jr, key, "no tensor \"%.64s\" (listed, or an earlier operator's output)", json_string_value(s));
  }
  for (int k = 0; k < op->ninputs; k++) {
    char key[32];
    (void)snprintf(key, sizeof key, "inputs[%d]", k);
    sk_result r = json_is_number(json_array_get(list, (size_t)k)) ? sk__jr_const_input(jr, g, list, op, k, key) : SK_OK;
    if (r) return r;
  }
  return SK_OK;
}

/* axis: an integer (naxis 1) or a list. Axes and perm entries are kept within -9..8 here, so that
   no rule's index arithmetic meets an absurd value; the rules check them against the rank. */
static sk_result sk__jr_axis(sk__jr *jr, json_t *o, sk_op_desc *d) {
  json_t *v = json_object_get(o, "axis");
  int64_t x[SK_MAX_DIMS];
  sk_result r;
  if (!v) return SK_OK;
  if (json_is_integer(v)) {
    long long a = 0;
    if ((r = sk__jr_int(jr, o, "axis", false, -SK_MAX_DIMS - 1, SK_MAX_DIMS, &a))) return r;
    d->naxis = 1, d->axis[0] = (int)a;
    return SK_OK;
  }
  if ((r = sk__jr_ints(jr, v, "axis", SK_MAX_DIMS, -SK_MAX_DIMS - 1, SK_MAX_DIMS, x, &d->naxis))) return r;
  for (int k = 0; k < d->naxis; k++) d->axis[k] = (int)x[k];
  return SK_OK;
}

/* transpose_a .. depth, the scalars after shape, and the flags, in the canonical key order. */
static sk_result sk__jr_attrs(sk__jr *jr, json_t *o, sk_graph_op *op) {
  sk_op_desc *d = &op->desc;
  json_t *perm = json_object_get(o, "perm");
  int64_t p[SK_MAX_DIMS];
  int np = 0;
  long long depth = 0, fusion = -1, stage = 0; /* fusion -1: absent, MindSpore's default id */
  sk_result r;
  if ((r = sk__jr_bool(jr, o, "transpose_a", &d->transpose_a)) || (r = sk__jr_bool(jr, o, "transpose_b", &d->transpose_b)) ||
      (r = sk__jr_axis(jr, o, d)) || (r = sk__jr_bool(jr, o, "keep_dims", &d->keep_dims)) ||
      (perm && (r = sk__jr_ints(jr, perm, "perm", SK_MAX_DIMS, -SK_MAX_DIMS - 1, SK_MAX_DIMS, p, &np))) ||
      (r = sk__jr_int(jr, o, "depth", false, 0, SK__JSON_MAX_ELEMS, &depth)) ||
      (r = sk__jr_real(jr, o, "keep_prob", &op->keep_prob)) || (r = sk__jr_real(jr, o, "epsilon", &op->epsilon)) ||
      (r = sk__jr_real(jr, o, "on_value", &op->on_value)) || (r = sk__jr_real(jr, o, "off_value", &op->off_value)) ||
      (r = sk__jr_bool(jr, o, "repeat_left", &d->repeat_left)) || (r = sk__jr_bool(jr, o, "full_batch", &d->full_batch)) ||
      (r = sk__jr_int(jr, o, "fusion", false, 0, INT_MAX, &fusion)) ||
      (r = sk__jr_int(jr, o, "stage", false, 0, INT_MAX, &stage)) ||
      (r = sk__jr_bool(jr, o, "recompute", &op->recompute)))
    return r;
  for (int k = 0; k < np; k++) d->perm[k] = (int)p[k];
  d->has_perm = perm != NULL; /* a perm in the file is given, all zeros too: the rule checks it */
  /* the file holds MindSpore's ids (0: never fused); the graph's zero is the default id */
  d->depth = depth, op->fusion = fusion < 0 ? 0 : fusion == 0 ? SK_GRAPH_FUSION_NEVER : (int)fusion, op->stage = (int)stage;
  return SK_OK;
}

/* What sets the outputs: Reshape's target "shape" and a Cast or OneHot "dtype"; GetNext's
   "out_shapes" and "out_dtypes" (one each per output). */
static sk_result sk__jr_out_attrs(sk__jr *jr, json_t *o, sk_graph_op *op) {
  sk_op_desc *d = &op->desc;
  bool get_next = sk__json_source(d);
  static const char *const multi[2] = {"out_shapes", "out_dtypes"}, *const single[2] = {"shape", "dtype"};
  const char *const *mine = get_next ? multi : single, *const *other = get_next ? single : multi;
  json_t *shapes = json_object_get(o, mine[0]), *dtypes = json_object_get(o, mine[1]);
  sk_result r;
  for (int k = 0; k < 2; k++)
    if (json_object_get(o, other[k]))
      return sk__jr_fail(jr, other[k], get_next ? "GetNext takes out_shapes and out_dtypes" : "GetNext only");
  if (!get_next) {
    if (shapes && (r = sk__jr_shape(jr, shapes, "shape", d->out_shape[0], &d->out_ndims[0]))) return r;
    if (dtypes && (r = sk__jr_dtype(jr, dtypes, "dtype", &op->out_dtype[0]))) return r;
    d->noutputs = shapes ? 1 : 0;
    return SK_OK;
  }
  if (shapes && (!json_is_array(shapes) || json_array_size(shapes) > SK_OP_MAX_OUTPUTS))
    return sk__jr_fail(jr, "out_shapes", "expected a list of at most %d shapes", SK_OP_MAX_OUTPUTS);
  d->noutputs = (int)json_array_size(shapes);
  if (dtypes && (!json_is_array(dtypes) || json_array_size(dtypes) != (size_t)d->noutputs))
    return sk__jr_fail(jr, "out_dtypes", "expected a list of %d dtypes, one per out_shapes entry", d->noutputs);
  for (int k = 0; k < d->noutputs; k++) {
    char key[32];
    (void)snprintf(key, sizeof key, "out_shapes[%d]", k);
    if ((r = sk__jr_shape(jr, json_array_get(shapes, (size_t)k), key, d->out_shape[k], &d->out_ndims[k]))) return r;
    (void)snprintf(key, sizeof key, "out_dtypes[%d]", k);
    if (dtypes && (r = sk__jr_dtype(jr, json_array_get(dtypes, (size_t)k), key, &op->out_dtype[k]))) return r;
  }
  return SK_OK;
}

static sk_result sk__jr_op(sk__jr *jr, sk_graph *g, json_t *list, size_t i, size_t list_at) {
  json_t *v = json_array_get(list, i);
  sk_graph_op op;
  const char *name, *type, *activation_type;
  json_t *out_strategy;
  int n = 0;
  sk_error e;
  sk_result r;
  memset(&op, 0, sizeof op);
  if ((r = sk__jr_element(jr, "operators", list, i, list_at)) || (r = sk__jr_keys(jr, v, sk__jr_op_keys)) ||
      (r = sk__jr_string(jr, v, "name", true, &name)) || (r = sk__jr_string(jr, v, "type", true, &type)) ||
      (r = sk__jr_string(jr, v, "activation_type", false, &activation_type)))
    return r;
  if (strlen(name) >= SK_GRAPH_NAME_MAX) return sk__jr_fail(jr, "name", "longer than %d characters", SK_GRAPH_NAME_MAX - 1);
  memcpy(op.name, name, strlen(name) + 1);
  /* Activation is the kind its activation_type names; the file is written back with that kind */
  if ((r = sk_op_kind_parse(type, activation_type, &op.desc.kind, &e)))
    return sk__jr_refused(jr, r, activation_type ? "activation_type" : "type", &e);
  if ((r = sk__jr_inputs(jr, g, v, &op)) || (r = sk__jr_attrs(jr, v, &op)) || (r = sk__jr_out_attrs(jr, v, &op)) ||
      (r = sk__jr_shard(jr, g, &op, v, "shard", false, &op.desc)))
    return r;
  if ((out_strategy = json_object_get(v, "out_strategy"))) {
    if ((r = sk__jr_int_list(jr, out_strategy, "out_strategy", op.desc.out_strategy, &n))) return r;
    op.desc.has_out_strategy = true;
  }
  if ((r = sk__jr_layouts(jr, g, v, &op, &op.desc))) return r;
  int at = -1;
  if ((r = sk_graph_add_op(g, &op, &at, &e))) return sk__jr_refused(jr, r, "", &e);
  /* out_layout is read on the outputs' shapes, which the operator has once added */
  return sk__jr_out_layout(jr, g, v, &g->ops[at], &g->ops[at].desc);
}

/* ---- the network ---- */

static sk_result sk__jr_header(sk__jr *jr, json_t *root, sk_graph *g) {
  static const char *const keys[] = {"format",    "version", "dataset", "data", "tensors", "operators",
                                     "loss",      "eval",    "optimizer", NULL};
  const char *dataset;
  int version = 0;
  sk_result r;
  /* unknown keys first: a misspelt key is named before what it leaves missing */
  if ((json_is_object(root) && (r = sk__jr_keys(jr, root, keys))) ||
      (r = sk__jr_head(jr, root, "network", SK__JSON_FORMAT, SK__JSON_VERSION, &version)))
    return r;
  sk__jr_top(jr, "dataset");
  if ((r = sk__jr_string(jr, root, "dataset", false, &dataset))) return r;
  if (dataset && strlen(dataset) >= sizeof g->dataset)
    return sk__jr_fail(jr, "dataset", "longer than %d characters", (int)sizeof g->dataset - 1);
  if (dataset) memcpy(g->dataset, dataset, strlen(dataset) + 1);
  return SK_OK;
}

/* Member `key` of the top-level object as a list, and the offset of its key. */
static sk_result sk__jr_list(sk__jr *jr, json_t *root, const char *key, json_t **list, size_t *at) {
  sk__jr_top(jr, key);
  *at = jr->at;
  *list = json_object_get(root, key);
  if (!json_is_array(*list)) return sk__jr_fail(jr, key, "expected a list, got %s", sk__jr_type(*list));
  return SK_OK;
}

/* The tensor named by member `key` of obj into *t. */
static sk_result sk__jr_tensor_ref(sk__jr *jr, const sk_graph *g, json_t *obj, const char *key, int *t) {
  const char *name;
  sk_result r = sk__jr_string(jr, obj, key, true, &name);
  if (r) return r;
  if ((*t = sk_graph_find(g, name)) < 0) return sk__jr_fail(jr, key, "no tensor \"%.64s\"", name);
  return SK_OK;
}

static sk_result sk__jr_loss_eval(sk__jr *jr, json_t *root, sk_graph *g) {
  static const char *const keys[] = {"logits", "labels", NULL};
  json_t *ev = json_object_get(root, "eval");
  int loss, logits, labels;
  sk_error e;
  sk_result r;
  sk__jr_top(jr, "loss");
  if (json_object_get(root, "loss")) {
    if ((r = sk__jr_tensor_ref(jr, g, root, "loss", &loss))) return r;
    if ((r = sk_graph_set_loss(g, loss, &e))) return sk__jr_refused(jr, r, "loss", &e);
  }
  if (!ev) return SK_OK;
  sk__jr_top(jr, "eval");
  if (!json_is_object(ev)) return sk__jr_fail(jr, "eval", "expected an object {\"logits\": ..., \"labels\": ...}");
  sk__jr_descend(jr, "eval");
  if ((r = sk__jr_keys(jr, ev, keys)) || (r = sk__jr_tensor_ref(jr, g, ev, "logits", &logits)) ||
      (r = sk__jr_tensor_ref(jr, g, ev, "labels", &labels)))
    return r;
  if ((r = sk_graph_set_eval(g, logits, labels, &e))) return sk__jr_refused(jr, r, "", &e);
  return SK_OK;
}

/* "optimizer": {"kind": "sgd" | "momentum" | "adam", then sk_optim_desc's other fields by their
   names}, checked as training will check it (sk_optim_resolve). */
static sk_result sk__jr_optim(sk__jr *jr, json_t *root, sk_graph *g) {
  static const char *const keys[] = {"kind", "lr", "momentum", "dampening", "weight_decay", "nesterov",
                                     "beta1", "beta2", "eps", NULL};
  json_t *v = json_object_get(root, "optimizer");
  sk_optim_desc *d = &g->optim, resolved;
  const char *kind;
  sk_error e;
  sk_result r;
  if (!v) return SK_OK;
  sk__jr_top(jr, "optimizer");
  if (!json_is_object(v)) return sk__jr_fail(jr, "optimizer", "expected an object {\"kind\": ...}, got %s", sk__jr_type(v));
  sk__jr_descend(jr, "optimizer");
  if ((r = sk__jr_keys(jr, v, keys)) || (r = sk__jr_string(jr, v, "kind", true, &kind))) return r;
  if (!sk_optim_kind_from_name(kind, &d->kind)) return sk__jr_fail(jr, "kind", "expected sgd, momentum or adam");
  if ((r = sk__jr_real(jr, v, "lr", &d->lr)) || (r = sk__jr_real(jr, v, "momentum", &d->momentum)) ||
      (r = sk__jr_real(jr, v, "dampening", &d->dampening)) || (r = sk__jr_real(jr, v, "weight_decay", &d->weight_decay)) ||
      (r = sk__jr_bool(jr, v, "nesterov", &d->nesterov)) || (r = sk__jr_real(jr, v, "beta1", &d->beta1)) ||
      (r = sk__jr_real(jr, v, "beta2", &d->beta2)) || (r = sk__jr_real(jr, v, "eps", &d->eps)))
    return r;
  if ((r = sk_optim_resolve(d, &resolved, &e))) return sk__jr_refused(jr, r, "", &e);
  return SK_OK;
}

/* v, a data entry's [x, y] under `key`, into two numbers; whole ones only for random_int. */
static sk_result sk__jr_pair(sk__jr *jr, json_t *v, const char *key, bool whole, double *x, double *y) {
  json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
  const char *what = whole ? "integers" : "numbers";
  if (!json_is_array(v) || json_array_size(v) != 2 || !(whole ? json_is_integer(a) : json_is_number(a)) ||
      !(whole ? json_is_integer(b) : json_is_number(b)))
    return sk__jr_fail(jr, key, "expected a list of two %s, got %s", what, json_is_array(v) ? "another list" : sk__jr_type(v));
  *x = json_number_value(a), *y = json_number_value(b);
  return SK_OK;
}

/* One entry of "data": "<input>": {"<kind>": <path or [x, y]>}. */
static sk_result sk__jr_data_entry(sk__jr *jr, sk_graph *g, const char *name, json_t *v) {
  sk_data_source src;
  sk_error e;
  sk_result r;
  memset(&src, 0, sizeof src);
  int t = sk_graph_find(g, name);
  if (t < 0) return sk__jr_fail(jr, name, "no tensor \"%.64s\" in the network", name);
  if (g->tensors[t].role != SK_TENSOR_INPUT)
    return sk__jr_fail(jr, name, "\"%.64s\" is %s, not an input", name,
                       g->tensors[t].role == SK_TENSOR_PARAM ? "a parameter" : "an operator's output");
  if (!json_is_object(v) || json_object_size(v) != 1)
    return sk__jr_fail(jr, name, "expected one source, {\"npy\": \"FILE.npy\"} or {\"random_int\": [lo, hi]} ..., got %s",
                       json_is_object(v) ? "an object of another size" : sk__jr_type(v));
  size_t up = sk__jr_descend(jr, name);
  void *member = json_object_iter(v); /* its one member */
  const char *kind = json_object_iter_key(member);
  json_t *arg = json_object_iter_value(member);
  if (!sk_data_kind_from_name(kind, &src.kind) || src.kind == SK_DATA_NONE)
    return sk__jr_fail(jr, kind, "unknown source (npy, random_int, random_normal or random_uniform)");
  if (src.kind == SK_DATA_NPY) {
    if (!json_is_string(arg)) return sk__jr_fail(jr, kind, "expected a file name, got %s", sk__jr_type(arg));
    if (strlen(json_string_value(arg)) >= sizeof src.path)
      return sk__jr_fail(jr, kind, "a path of %d characters or more", SK_DATA_PATH_MAX);
    memcpy(src.path, json_string_value(arg), strlen(json_string_value(arg)) + 1);
  } else if ((r = sk__jr_pair(jr, arg, kind, src.kind == SK_DATA_RANDOM_INT, &src.a, &src.b))) {
    return r;
  }
  if ((r = sk_graph_set_data(g, t, &src, &e))) { /* "graph: data for 'x': " is the path here */
    const char *why = strstr(e.msg, "': ");
    sk__jr_say(jr, r, kind, sk__jr_note(jr, "%s", why ? why + 3 : e.msg));
    return r;
  }
  jr->where[up] = 0;
  return SK_OK;
}

/* "data": {"<input>": {"<kind>": ...}, ...}: what feeds each named input (sk_graph_set_data). */
static sk_result sk__jr_data(sk__jr *jr, json_t *root, sk_graph *g) {
  json_t *v = json_object_get(root, "data"), *entry;
  const char *name;
  if (!v) return SK_OK;
  sk__jr_top(jr, "data");
  if (!json_is_object(v)) return sk__jr_fail(jr, "data", "expected an object {\"<input>\": {\"npy\": ...}}, got %s", sk__jr_type(v));
  sk__jr_descend(jr, "data");
  json_object_foreach(v, name, entry) {
    sk_result r = sk__jr_data_entry(jr, g, name, entry);
    if (r) return r;
  }
  return SK_OK;
}

static sk_result sk__jr_network(sk__jr *jr, json_t *root, sk_graph *g) {
  json_t *tensors, *ops;
  size_t tensors_at, ops_at;
  sk_result r;
  if ((r = sk__jr_header(jr, root, g)) || (r = sk__jr_list(jr, root, "tensors", &tensors, &tensors_at)) ||
      (r = sk__jr_list(jr, root, "operators", &ops, &ops_at)))
    return r;
  for (size_t i = 0; i < json_array_size(tensors); i++)
    if ((r = sk__jr_tensor(jr, g, tensors, i, tensors_at))) return r;
  for (size_t i = 0; i < json_array_size(ops); i++)
    if ((r = sk__jr_op(jr, g, ops, i, ops_at))) return r;
  if ((r = sk__jr_data(jr, root, g)) || (r = sk__jr_loss_eval(jr, root, g))) return r;
  return sk__jr_optim(jr, root, g);
}

SK_API sk_result sk_json_parse_network(const char *text, size_t len, sk_graph *g, sk_error *err) {
  if (!g) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL graph");
  sk_graph_init(g);
  if (!text) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL text");
  if (len > SK_MAX_TEXT_FILE_BYTES) return sk__fail_too_long(err, "sk_json_parse_network", len, SK_MAX_TEXT_FILE_BYTES);
  sk__jr jr;
  json_t *root;
  sk__jr_begin(&jr, text, len, NULL, err);
  sk_result r = sk__jr_parse(&jr, "the network", &root);
  if (r) return r;
  r = sk__jr_network(&jr, root, g);
  json_decref(root);
  if (r) sk_graph_free(g);
  return r;
}

SK_API sk_result sk_json_load_network(const char *path, sk_graph *g, sk_error *err) {
  if (!g) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL graph");
  sk_graph_init(g);
  if (!path) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL path");
  char *text = NULL;
  size_t len = 0;
  sk_error e;
  sk_result r = sk__read_text_file(NULL, path, true, SK_MAX_TEXT_FILE_BYTES, &text, &len, err);
  if (r) return r;
  r = sk_json_parse_network(text, len, g, &e);
  sk__free(NULL, text); /* sk__read_text_file's, from the C library */
  const char *base = strrchr(path, '/');
  if (r) return sk__fail(err, r, "%s: %s", base ? base + 1 : path, e.msg);
  /* relative .npy paths are the file's: read from its directory */
  size_t nd = base ? (size_t)(base - path) + (base == path) : 0;
  if (nd >= sizeof g->data_dir) {
    sk_graph_free(g);
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: its directory is longer than %d characters", path, SK_GRAPH_DIR_MAX - 1);
  }
  memcpy(g->data_dir, path, nd), g->data_dir[nd] = 0;
  return SK_OK;
}

/* ==== parallel_speed_up.json ==================================================================== */

/* MindSpore's options shardkit does not build: accepted while off, refused by name when set. */
static const char *const sk__json_speed_up_off[] = {
    "recomputation_communication_overlap", "grad_matmul_communication_overlap", "grad_fa_allgather_overlap",
    "computation_allgather_overlap", "computation_communication_fusion_level", "dataset_broadcast_opt_level",
    "allreduce_and_biasadd_swap", "enable_allreduce_slice_to_reducescatter", "enable_interleave_split_concat_branch",
    "enable_interleave_parallel_branch", NULL};

/* The honoured options: {name, its older name}. */
static const char *const sk__json_speed_up_on[2][2] = {{"grad_computation_allreduce_overlap", "enable_grad_comm_opt"},
                                                       {"enable_communication_fusion", "enable_task_opt"}};

/* Option i of sk__json_speed_up_on under either name (false when neither is given). */
static sk_result sk__jr_speed_up_flag(sk__jr *jr, json_t *root, int i, bool *out) {
  const char *name = sk__json_speed_up_on[i][0], *old = sk__json_speed_up_on[i][1];
  json_t *a = json_object_get(root, name), *b = json_object_get(root, old);
  for (int k = 0; k < 2; k++) {
    json_t *v = k ? b : a;
    sk__jr_top(jr, k ? old : name);
    if (v && !json_is_boolean(v)) return sk__jr_fail(jr, k ? old : name, "expected true or false, got %s", sk__jr_type(v));
  }
  if (a && b && json_is_true(a) != json_is_true(b))
    return sk__jr_fail(jr, old, "%s, but %s (its newer name) is %s", json_is_true(b) ? "true" : "false", name,
                       json_is_true(a) ? "true" : "false");
  *out = json_is_true(a ? a : b);
  return SK_OK;
}

static sk_result sk__jr_speed_up(sk__jr *jr, json_t *root, sk_transformer_opt *o) {
  const char *key;
  json_t *v;
  if (!json_is_object(root)) return sk__jr_fail(jr, "", "expected an object of options, got %s", sk__jr_type(root));
  json_object_foreach(root, key, v) {
    bool on = false, off = false;
    for (int i = 0; i < 2; i++) on = on || !strcmp(key, sk__json_speed_up_on[i][0]) || !strcmp(key, sk__json_speed_up_on[i][1]);
    for (int i = 0; sk__json_speed_up_off[i]; i++) off = off || !strcmp(key, sk__json_speed_up_off[i]);
    if (on) continue;
    sk__jr_top(jr, key);
    if (!off)
      return sk__jr_fail(jr, key, "unknown option (shardkit honours grad_computation_allreduce_overlap and "
                         "enable_communication_fusion)");
    if (!json_is_boolean(v) && !json_is_integer(v))
      return sk__jr_fail(jr, key, "expected a boolean or an integer, got %s", sk__jr_type(v));
    if (json_is_true(v) || (json_is_integer(v) && json_integer_value(v) != 0))
      return sk__jr_fail(jr, key, "not built in shardkit: only false (or 0) is accepted");
  }
  sk_result r = sk__jr_speed_up_flag(jr, root, 0, &o->grad_computation_allreduce_overlap);
  return r ? r : sk__jr_speed_up_flag(jr, root, 1, &o->enable_communication_fusion);
}

SK_API sk_result sk_json_parse_transformer_opt(const char *text, size_t len, sk_transformer_opt *out, sk_error *err) {
  if (!text || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL argument");
  if (len > SK_MAX_TEXT_FILE_BYTES)
    return sk__fail_too_long(err, "sk_json_parse_transformer_opt", len, SK_MAX_TEXT_FILE_BYTES);
  sk__jr jr;
  json_t *root;
  sk__jr_begin(&jr, text, len, NULL, err);
  sk_result r = sk__jr_parse(&jr, "parallel_speed_up options", &root);
  if (r) return r;
  sk_transformer_opt o;
  memset(&o, 0, sizeof o);
  r = sk__jr_speed_up(&jr, root, &o);
  json_decref(root);
  if (!r) *out = o;
  return r;
}

SK_API sk_result sk_json_load_transformer_opt(const char *path, sk_transformer_opt *out, sk_error *err) {
  if (!path || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL argument");
  char *text = NULL;
  size_t len = 0;
  sk_error e;
  sk_result r = sk__read_text_file(NULL, path, true, SK_MAX_TEXT_FILE_BYTES, &text, &len, err);
  if (r) return r;
  r = sk_json_parse_transformer_opt(text, len, out, &e);
  sk__free(NULL, text); /* sk__read_text_file's, from the C library */
  if (r) {
    const char *base = strrchr(path, '/');
    return sk__fail(err, r, "%s: %s", base ? base + 1 : path, e.msg);
  }
  return SK_OK;
}

/* ==== writing ================================================================================= */

/* A network's writing: the layer's (sk_json_write.h) and the graph written. */
typedef struct sk__jn {
  sk__jw jw;
  const sk_graph *g;
} sk__jn;

/* The attributes, each only when it is not its zero default. */
static void sk__jn_bool(sk__jn *w, json_t *o, const char *key, bool b) {
  if (b) sk__jw_set(&w->jw, o, key, json_true());
}
static void sk__jn_int(sk__jn *w, json_t *o, const char *key, long long v) {
  if (v) sk__jw_set(&w->jw, o, key, json_integer(v));
}
static void sk__jn_real(sk__jn *w, json_t *o, const char *key, double v) {
  if (v != 0) sk__jw_set(&w->jw, o, key, json_real(v));
}

static json_t *sk__jn_tensor(sk__jn *w, const sk_graph_tensor *t) {
  json_t *o = json_object();
  sk__jw_set(&w->jw, o, "name", sk__jw_name(&w->jw, t->name));
  sk__jw_set(&w->jw, o, "role", json_string(sk_tensor_role_name(t->role)));
  sk__jw_set(&w->jw, o, "dtype", json_string(sk_dtype_name(t->dtype)));
  sk__jw_set(&w->jw, o, "shape", sk__jw_i64s(&w->jw, t->shape, t->ndims));
  if (t->role == SK_TENSOR_PARAM) {
    json_t *init = json_object();
    sk__jw_set(&w->jw, init, "kind", json_string(sk_init_kind_name(t->init.kind)));
    sk__jn_real(w, init, "value", t->init.value);
    sk__jw_set(&w->jw, o, "init", init);
    if (t->frozen) sk__jw_set(&w->jw, o, "requires_grad", json_false());
    if (t->no_parallel_optimizer) sk__jw_set(&w->jw, o, "parallel_optimizer", json_false());
  }
  return o;
}

/* transpose_a .. shape. perm runs to its last non-zero entry, and over a Transpose's whole rank;
   it is written whenever given (desc.has_perm), all zeros too (rank 1's (0)), so that it reads
   back as given. */
static void sk__jn_attrs(sk__jn *w, json_t *o, const sk_graph_op *op) {
  const sk_op_desc *d = &op->desc;
  int np = 0;
  for (int k = 0; k < SK_MAX_DIMS; k++)
    if (d->perm[k]) np = k + 1;
  bool perm = np > 0 || d->has_perm;
  bool permutes = (sk_op_row_of(d->kind)->flags & SK_OPF_PERMUTES) != 0;
  if (perm && permutes && op->ninputs && w->g->tensors[op->inputs[0]].ndims > np)
    np = w->g->tensors[op->inputs[0]].ndims;
  sk__jn_bool(w, o, "transpose_a", d->transpose_a);
  sk__jn_bool(w, o, "transpose_b", d->transpose_b);
  if (d->naxis == 1) sk__jw_set(&w->jw, o, "axis", json_integer(d->axis[0]));
  if (d->naxis > 1) sk__jw_set(&w->jw, o, "axis", sk__jw_ints(&w->jw, d->axis, d->naxis));
  sk__jn_bool(w, o, "keep_dims", d->keep_dims);
  if (perm) sk__jw_set(&w->jw, o, "perm", sk__jw_ints(&w->jw, d->perm, np));
  sk__jn_int(w, o, "depth", d->depth);
  if (!sk__json_source(d) && d->noutputs > 0)
    sk__jw_set(&w->jw, o, "shape", sk__jw_i64s(&w->jw, d->out_shape[0], d->out_ndims[0]));
}

/* keep_prob .. recompute. */
static void sk__jn_attrs2(sk__jn *w, json_t *o, const sk_graph_op *op) {
  const sk_op_desc *d = &op->desc;
  bool dtypes = false;
  sk__jn_real(w, o, "keep_prob", op->keep_prob);
  sk__jn_real(w, o, "epsilon", op->epsilon);
  sk__jn_real(w, o, "on_value", op->on_value);
  sk__jn_real(w, o, "off_value", op->off_value);
  if (!sk__json_source(d) && op->out_dtype[0]) sk__jw_set(&w->jw, o, "dtype", json_string(sk_dtype_name(op->out_dtype[0])));
  if (sk__json_source(d) && d->noutputs > 0) {
    json_t *shapes = json_array(), *types = json_array();
    for (int k = 0; k < d->noutputs; k++) {
      sk__jw_append(&w->jw, shapes, sk__jw_i64s(&w->jw, d->out_shape[k], d->out_ndims[k]));
      sk__jw_append(&w->jw, types, json_string(sk_dtype_name(op->out_dtype[k])));
      dtypes |= op->out_dtype[k] != 0;
    }
    sk__jw_set(&w->jw, o, "out_shapes", shapes);
    if (dtypes) sk__jw_set(&w->jw, o, "out_dtypes", types);
    else json_decref(types);
  }
  sk__jn_bool(w, o, "repeat_left", d->repeat_left);
  sk__jn_bool(w, o, "full_batch", d->full_batch);
  if (op->fusion) sk__jw_set(&w->jw, o, "fusion", json_integer(op->fusion == SK_GRAPH_FUSION_NEVER ? 0 : op->fusion));
  sk__jn_int(w, o, "stage", op->stage);
  sk__jn_bool(w, o, "recompute", op->recompute);
}

/* shard (as written: sk__json_tuples / _tuple_len stand in for zero counts and lengths) and
   out_strategy (over output 0's rank, and any non-zero entry past it). */
static void sk__jn_strategy(sk__jn *w, json_t *o, const sk_graph_op *op) {
  const sk_op_desc *d = &op->desc;
  if (d->has_strategy) {
    json_t *tuples = json_array();
    int n = d->nstrategies ? d->nstrategies : sk__json_tuples(op);
    for (int i = 0; i < n; i++) {
      int len = d->strategy_len[i] ? d->strategy_len[i] : sk__json_tuple_len(w->g, op, i);
      sk__jw_append(&w->jw, tuples, sk__jw_ints(&w->jw, d->strategy[i], len));
    }
    sk__jw_set(&w->jw, o, "shard", tuples);
  }
  if (d->has_out_strategy) {
    int n = op->noutputs ? w->g->tensors[op->outputs[0]].ndims : 0;
    for (int k = n; k < SK_MAX_DIMS; k++)
      if (d->out_strategy[k]) n = k + 1;
    sk__jw_set(&w->jw, o, "out_strategy", sk__jw_ints(&w->jw, d->out_strategy, n));
  }
}

static json_t *sk__jn_op(sk__jn *w, const sk_graph_op *op) {
  json_t *o = json_object(), *inputs = json_array();
  sk__jw_set(&w->jw, o, "name", sk__jw_name(&w->jw, op->name));
  sk__jw_set(&w->jw, o, "type", json_string(sk_op_kind_name(op->desc.kind)));
  for (int k = 0; k < op->ninputs; k++) { /* a constant: its number, where it is read */
    const sk_graph_tensor *x = &w->g->tensors[op->inputs[k]];
    sk__jw_append(&w->jw, inputs, x->role == SK_TENSOR_CONST ? json_real(x->value) : sk__jw_name(&w->jw, x->name));
  }
  sk__jw_set(&w->jw, o, "inputs", inputs);
  sk__jn_attrs(w, o, op);
  sk__jn_attrs2(w, o, op);
  sk__jn_strategy(w, o, op);
  if (op->desc.has_layouts) sk__jw_set(&w->jw, o, "layouts", sk__jw_layouts(&w->jw, op->desc.layouts, op->ninputs, "inputs"));
  if (op->desc.nout_layouts) sk__jw_set(&w->jw, o, "out_layout", sk__jw_layouts(&w->jw, op->desc.out_layouts, op->desc.nout_layouts, "outputs"));
  return o;
}

/* The optimizer: its kind, then its non-zero fields (zero is MindSpore's default). */
static json_t *sk__jn_optim(sk__jn *w, const sk_optim_desc *d) {
  json_t *o = json_object();
  sk__jw_set(&w->jw, o, "kind", json_string(sk_optim_kind_name(d->kind)));
  sk__jn_real(w, o, "lr", d->lr);
  sk__jn_real(w, o, "momentum", d->momentum);
  sk__jn_real(w, o, "dampening", d->dampening);
  sk__jn_real(w, o, "weight_decay", d->weight_decay);
  sk__jn_bool(w, o, "nesterov", d->nesterov);
  sk__jn_real(w, o, "beta1", d->beta1);
  sk__jn_real(w, o, "beta2", d->beta2);
  sk__jn_real(w, o, "eps", d->eps);
  return o;
}

/* "data": each input's source, in the inputs' order; NULL when none has one. */
static json_t *sk__jn_data(sk__jn *w) {
  json_t *data = NULL;
  for (int t = 0; t < w->g->ntensors; t++) {
    const sk_graph_tensor *x = &w->g->tensors[t];
    const sk_data_source *s = &x->data;
    if (x->role != SK_TENSOR_INPUT || s->kind == SK_DATA_NONE) continue;
    json_t *src = json_object(), *arg;
    if (s->kind == SK_DATA_NPY) arg = sk__jw_name(&w->jw, s->path);
    else if (s->kind == SK_DATA_RANDOM_INT) arg = json_pack("[II]", (json_int_t)s->a, (json_int_t)s->b);
    else arg = json_pack("[ff]", s->a, s->b);
    sk__jw_set(&w->jw, src, sk_data_kind_name(s->kind), arg);
    if (!data) data = json_object();
    sk__jw_set(&w->jw, data, x->name, src);
  }
  return data;
}

static json_t *sk__jn_network(sk__jn *w) {
  const sk_graph *g = w->g;
  json_t *root = json_object(), *tensors = json_array(), *ops = json_array();
  sk__jw_set(&w->jw, root, "format", json_string(SK__JSON_FORMAT));
  sk__jw_set(&w->jw, root, "version", json_integer(SK__JSON_VERSION));
  if (g->dataset[0]) sk__jw_set(&w->jw, root, "dataset", sk__jw_name(&w->jw, g->dataset));
  json_t *data = sk__jn_data(w);
  if (data) sk__jw_set(&w->jw, root, "data", data);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].role == SK_TENSOR_INPUT || g->tensors[t].role == SK_TENSOR_PARAM)
      sk__jw_append(&w->jw, tensors, sk__jn_tensor(w, &g->tensors[t]));
  sk__jw_set(&w->jw, root, "tensors", tensors);
  for (int i = 0; i < g->nops; i++) sk__jw_append(&w->jw, ops, sk__jn_op(w, &g->ops[i]));
  sk__jw_set(&w->jw, root, "operators", ops);
  if (g->loss >= 0) sk__jw_set(&w->jw, root, "loss", sk__jw_name(&w->jw, g->tensors[g->loss].name));
  if (g->logits >= 0 && g->labels >= 0) {
    json_t *ev = json_object();
    sk__jw_set(&w->jw, ev, "logits", sk__jw_name(&w->jw, g->tensors[g->logits].name));
    sk__jw_set(&w->jw, ev, "labels", sk__jw_name(&w->jw, g->tensors[g->labels].name));
    sk__jw_set(&w->jw, root, "eval", ev);
  }
  sk__jw_set(&w->jw, root, "optimizer", sk__jn_optim(w, &g->optim));
  return root;
}

/* ---- what the writer reads must be in range: a graph the builder made always is ---- */

static bool sk__jn_tensor_ok(const sk_graph *g, int t) { return t >= 0 && t < g->ntensors; }

/* n (>= 1) valid layouts on one mesh: what one "layouts" or "out_layout" object carries. */
static bool sk__jn_layouts_ok(const sk_layout *ls, int n) {
  bool ok = n >= 1 && sk_mesh_format(&ls[0].mesh, NULL, 0) > 0;
  for (int k = 0; ok && k < n; k++) ok = sk_layout_format(&ls[k], NULL, 0) > 0 && sk_mesh_equal(&ls[k].mesh, &ls[0].mesh);
  return ok;
}

static sk_result sk__jn_check_op(const sk_graph *g, const sk_graph_op *op, sk_error *err) {
  const sk_op_desc *d = &op->desc;
  bool ok = (unsigned)d->kind < SK_OP_KIND_COUNT && op->ninputs >= 0 && op->ninputs <= SK_OP_MAX_INPUTS &&
            op->noutputs >= 0 && op->noutputs <= SK_OP_MAX_OUTPUTS && d->naxis >= 0 && d->naxis <= SK_MAX_DIMS &&
            d->noutputs >= 0 && d->noutputs <= SK_OP_MAX_OUTPUTS && d->nstrategies >= 0 &&
            d->nstrategies <= SK_OP_MAX_INPUTS && memchr(op->name, 0, sizeof op->name);
  for (int k = 0; ok && k < op->ninputs; k++) ok = sk__jn_tensor_ok(g, op->inputs[k]);
  for (int k = 0; ok && k < op->noutputs; k++) ok = sk__jn_tensor_ok(g, op->outputs[k]);
  for (int k = 0; ok && k < d->noutputs; k++) ok = d->out_ndims[k] >= 0 && d->out_ndims[k] <= SK_MAX_DIMS;
  for (int k = 0; ok && k < SK_OP_MAX_INPUTS; k++) ok = d->strategy_len[k] >= 0 && d->strategy_len[k] <= SK_MAX_DIMS;
  for (int k = 0; ok && k < SK_OP_MAX_OUTPUTS; k++) ok = sk_dtype_valid(op->out_dtype[k]);
  if (!ok)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: operator %d: a kind, count, dtype or tensor id is out of range",
                    (int)(op - g->ops));
  if (!isfinite(op->keep_prob) || !isfinite(op->epsilon) || !isfinite(op->on_value) || !isfinite(op->off_value))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: operator '%s': keep_prob, epsilon, on_value, off_value must be "
                    "finite", op->name);
  if (d->has_layouts && !sk__jn_layouts_ok(d->layouts, op->ninputs))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: operator '%s': the layouts are not valid layouts, one per input, "
                    "on one mesh", op->name);
  if (d->nout_layouts < 0 || d->nout_layouts > op->noutputs || (d->nout_layouts && !sk__jn_layouts_ok(d->out_layouts, d->nout_layouts)))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: operator '%s': the output layouts are not valid layouts of its "
                    "first outputs on one mesh", op->name);
  return SK_OK;
}

/* A tensor's data source as sk_graph_set_data would take it: what loading the text would do. */
static sk_result sk__jn_check_data(const sk_graph *g, int t, sk_error *err) {
  const sk_graph_tensor *x = &g->tensors[t];
  if (x->data.kind == SK_DATA_NONE) return SK_OK;
  sk_graph scratch = *g; /* sk_graph_set_data checks against the tensor; the copy is written, not g */
  sk_graph_tensor one = *x;
  sk_error e;
  scratch.tensors = &one, scratch.ntensors = 1;
  sk_result r = sk_graph_set_data(&scratch, 0, &x->data, &e);
  if (r) return sk__fail(err, r, "json: %s", e.msg);
  return SK_OK;
}

static sk_result sk__jn_check(const sk_graph *g, sk_error *err) {
  if (g->ntensors < 0 || g->nops < 0 || (g->ntensors && !g->tensors) || (g->nops && !g->ops) ||
      (g->loss != -1 && !sk__jn_tensor_ok(g, g->loss)) || (g->logits != -1 && !sk__jn_tensor_ok(g, g->logits)) ||
      (g->labels != -1 && !sk__jn_tensor_ok(g, g->labels)) || !memchr(g->dataset, 0, sizeof g->dataset))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: the graph's counts or tensor ids are out of range");
  for (int t = 0; t < g->ntensors; t++) {
    const sk_graph_tensor *x = &g->tensors[t];
    if (x->ndims < 0 || x->ndims > SK_MAX_DIMS || !sk_dtype_valid(x->dtype) || (unsigned)x->role > SK_TENSOR_CONST ||
        (unsigned)x->init.kind >= SK_INIT_KIND_COUNT || !memchr(x->name, 0, sizeof x->name))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: tensor %d: a dims count, dtype, role or initialiser is out "
                      "of range", t);
    if (!isfinite(x->init.value))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: parameter '%s': the initialiser's value is not finite", x->name);
    if (x->role == SK_TENSOR_CONST && (!isfinite(x->value) || x->ndims))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: constant '%s' is not a finite rank-0 number", x->name);
    sk_result r = sk__jn_check_data(g, t, err);
    if (r) return r;
  }
  for (int i = 0; i < g->nops; i++) {
    sk_result r = sk__jn_check_op(g, &g->ops[i], err);
    if (r) return r;
  }
  const sk_optim_desc *o = &g->optim;
  if (!isfinite(o->lr) || !isfinite(o->momentum) || !isfinite(o->dampening) || !isfinite(o->weight_decay) ||
      !isfinite(o->beta1) || !isfinite(o->beta2) || !isfinite(o->eps))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: the optimizer's hyper-parameters must be finite");
  /* an optimizer the loader would refuse is refused here, so that every saved file loads */
  sk_optim_desc resolved;
  sk_error e;
  sk_result r = sk_optim_resolve(&g->optim, &resolved, &e);
  if (r) return sk__fail(err, r, "json: the optimizer: %s", e.msg);
  return SK_OK;
}

SK_API sk_result sk_json_format_network(const sk_graph *g, char **text, sk_error *err) {
  if (!text) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL text");
  *text = NULL;
  if (!g) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL graph");
  sk_result r = sk__jn_check(g, err);
  if (r) return r;
  sk__jn w = {{false, NULL}, g};
  json_t *root = sk__jn_network(&w);
  return sk__jw_text(&w.jw, root, SK__JSON_DUMP_FLAGS, "json", "the network", text, err);
}

SK_API sk_result sk_json_save_network(const sk_graph *g, const char *path, sk_error *err) {
  if (!path) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "json: NULL path");
  char *text = NULL;
  sk_result r = sk_json_format_network(g, &text, err);
  if (r) return r;
  return sk__jw_save(text, path, "json", err);
}

#endif /* SK_JSON_IMPL */
