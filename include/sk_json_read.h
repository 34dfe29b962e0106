/* sk_json_read.h -- the one JSON reading layer of sk_json.h (network files,
   parallel_speed_up.json) and sk_strategy.h (strategy files): parsing with jansson, typed field
   getters whose messages name the file, line, JSON path and key, and the parsers of what both
   formats hold, an operator's strategy tuples and its layout maps. So a mistake reads the same
   in every file shardkit reads.

   NEEDS JANSSON: link with -ljansson (Debian: libjansson-dev; `pkg-config --cflags --libs
   jansson`). Private to those two headers: it declares nothing public, and their
   implementations include it (SK__JSON_READ_PRIVATE); shardkit.h does not.

   MESSAGES
     Every refusal is SK_ERR_INVALID_ARGUMENT (or the code of the call refusing, for a graph or
     layout call's own refusal) and one line, "[<file>: ]line N: <path>.<key>: <what>":
       plan.json: line 40: operators[1] ("fc2").strategy[0]: entry 1: expected an integer in ...
     jansson keeps no positions of values, so the line is looked up in the text: that of a list
     element's "name": "<its name>" pair (the k-th such pair when k earlier elements share the
     name), else that of the top-level key holding the value.

   License: MIT. */
#ifndef SK_JSON_READ_H
#define SK_JSON_READ_H
#include "sk_core.h" /* no declarations of its own: everything here is the readers' private section */
#endif
#if defined(SK_IMPL) && !defined(SK__JSON_READ_PRIVATE)
#define SK__JSON_READ_PRIVATE
#endif
#if defined(SK__JSON_READ_PRIVATE) && !defined(SK__JSON_READ_PRIVATE_DONE)
#define SK__JSON_READ_PRIVATE_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include "sk_graph.h"
#include "sk_layout.h"
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

SK_EXTERN_C_BEGIN

/* A reading: the text (for lines), where messages go, and what the next message is about. */
typedef struct sk__jr {
  const char *text;
  size_t len;
  const char *base; /* the file's base name in front of every message; NULL: none */
  sk_error *err;
  char where[160];  /* the value being read, for messages: "operators[3] (\"mm2\")"; "" at the top */
  size_t at;        /* the text offset whose line messages give */
  json_t *elements; /* inside a top-level list: the list and the index of the element being read, */
  size_t index;     /* whose line is looked up only when a message needs it */
  char note[SK_ERROR_MSG_MAX];
} sk__jr;

static SK__UNUSED void sk__jr_begin(sk__jr *jr, const char *text, size_t len, const char *base, sk_error *err) {
  memset(jr, 0, sizeof *jr);
  jr->text = text, jr->len = len, jr->base = base, jr->err = err;
}

static void sk__jr_anchor(sk__jr *jr);

static SK__UNUSED SK__PRINTF(2, 3) int sk__jr_note(sk__jr *jr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(jr->note, sizeof jr->note, fmt, ap);
  va_end(ap);
  return 0;
}

/* "[<base>: ]line N: <where>.<key>: <note>" into err. `noted` only orders the note first. */
static SK__UNUSED void sk__jr_say(sk__jr *jr, sk_result code, const char *key, int noted) {
  (void)noted;
  sk__jr_anchor(jr);
  int line = 1;
  for (size_t i = 0; i < jr->at && i < jr->len; i++) line += jr->text[i] == '\n';
  const char *dot = jr->where[0] && key[0] && key[0] != '[' ? "." : "", *colon = jr->where[0] || key[0] ? ": " : "";
  (void)sk__fail(jr->err, code, "%s%sline %d: %s%s%s%s%s", jr->base ? jr->base : "", jr->base ? ": " : "", line,
                 jr->where, dot, key, colon, jr->note);
}

/* A refusal: the message, and the code as the macro's value, where the static analyzer sees it
   (it gives up following calls a few levels down, and would then take a failure for SK_OK). */
#define sk__jr_fail(jr, key, ...) \
  (sk__jr_say((jr), SK_ERR_INVALID_ARGUMENT, (key), sk__jr_note((jr), __VA_ARGS__)), SK_ERR_INVALID_ARGUMENT)
/* The refusal e of a graph or layout call that returned r, after the path. */
#define sk__jr_refused(jr, r, key, e) (sk__jr_say((jr), (r), (key), sk__jr_note((jr), "%s", (e)->msg)), (r))

static SK__UNUSED const char *sk__jr_type(const json_t *v) {
  if (!v) return "nothing (the key is missing)";
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
  }
  return "an unknown value";
}

/* ---- where a message points ---- */

static size_t sk__jr_ws(const char *t, size_t len, size_t i) {
  while (i < len && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) i++;
  return i;
}

/* jr's text as JSON into *root (the caller json_decref's it). A text of white space only is
   refused as empty before jansson, whose message for it names no value. */
static SK__UNUSED sk_result sk__jr_parse(sk__jr *jr, const char *what, json_t **root) {
  const char *base = jr->base ? jr->base : "", *colon = jr->base ? ": " : "";
  *root = NULL;
  if (sk__jr_ws(jr->text, jr->len, 0) == jr->len)
    return sk__fail(jr->err, SK_ERR_INVALID_ARGUMENT, "%s%sthe %s is empty", base, colon, jr->base ? "file" : "text");
  json_error_t je;
  memset(&je, 0, sizeof je);
  *root = json_loadb(jr->text, jr->len, JSON_REJECT_DUPLICATES, &je);
  if (*root) return SK_OK;
  /* jansson sets no error text when it cannot allocate its lexer */
  if (!je.text[0] || json_error_code(&je) == json_error_out_of_memory)
    return sk__fail(jr->err, SK_ERR_OUT_OF_MEMORY, "%s%sjson: out of memory parsing %s", base, colon, what);
  return sk__fail(jr->err, SK_ERR_INVALID_ARGUMENT, "%s%sline %d, column %d: %s", base, colon, je.line, je.column, je.text);
}

/* Sets *at to where `key_q: val_q` (both quoted as jansson prints them; val_q NULL: any value)
   first appears at or after `from`, spacing around the colon as it may be; false, *at left
   alone, when it does not. A text search, not parsing: it only picks the line messages name. */
static bool sk__jr_find(const sk__jr *jr, size_t from, const char *key_q, const char *val_q, size_t *at) {
  size_t kn = strlen(key_q), vn = val_q ? strlen(val_q) : 0;
  for (size_t i = from; i + kn <= jr->len; i++) {
    if (memcmp(jr->text + i, key_q, kn)) continue;
    size_t j = sk__jr_ws(jr->text, jr->len, i + kn);
    if (j >= jr->len || jr->text[j] != ':') continue;
    j = sk__jr_ws(jr->text, jr->len, j + 1);
    if (!val_q || (j + vn <= jr->len && !memcmp(jr->text + j, val_q, vn))) {
      *at = i;
      return true;
    }
  }
  return false;
}

/* Messages about top-level member `key` name the line of its key. */
static void sk__jr_top(sk__jr *jr, const char *key) {
  char q[80];
  jr->where[0] = 0, jr->at = 0, jr->elements = NULL;
  if (snprintf(q, sizeof q, "\"%s\"", key) < (int)sizeof q) sk__jr_find(jr, 0, q, NULL, &jr->at);
}

/* The name of a list element, or NULL. */
static json_t *sk__jr_name_of(json_t *element) {
  json_t *name = json_is_object(element) ? json_object_get(element, "name") : NULL;
  return json_is_string(name) ? name : NULL;
}

/* The line of list element jr->index: that of its "name" pair, searched from the list's key
   (jr->at); of the k-th such pair when k earlier elements share the name, as a duplicate does.
   The list's own line when the element has no name or the pair is not found. */
static void sk__jr_anchor(sk__jr *jr) {
  json_t *name = jr->elements ? sk__jr_name_of(json_array_get(jr->elements, jr->index)) : NULL;
  char q[6 * SK_GRAPH_NAME_MAX + 8]; /* a name of the allowed length, every character escaped */
  size_t n = name ? json_dumpb(name, q, sizeof q - 1, JSON_ENCODE_ANY) : 0, found = jr->at;
  bool ok = n > 0 && n < sizeof q, first = true;
  if (ok) q[n] = 0;
  for (size_t j = 0; ok && j <= jr->index; j++)
    if (j == jr->index || json_equal(sk__jr_name_of(json_array_get(jr->elements, j)), name))
      ok = sk__jr_find(jr, first ? found : found + 1, "\"name\"", q, &found), first = false;
  if (ok) jr->at = found;
  jr->elements = NULL; /* found once */
}

/* Messages about element i of the top-level list `list` (its key at offset list_at) name it
   `list[i] ("<name>")`, or `list[i]` when it has no name, and give the line sk__jr_anchor finds.
   An element that is not an object is refused. */
static SK__UNUSED sk_result sk__jr_element(sk__jr *jr, const char *list, json_t *elements, size_t i, size_t list_at) {
  json_t *v = json_array_get(elements, i), *name = sk__jr_name_of(v);
  jr->at = list_at, jr->elements = elements, jr->index = i;
  if (name) {
    (void)snprintf(jr->where, sizeof jr->where, "%s[%zu] (\"%.64s\")", list, i, json_string_value(name));
  } else {
    (void)snprintf(jr->where, sizeof jr->where, "%s[%zu]", list, i);
  }
  if (!json_is_object(v)) return sk__jr_fail(jr, "", "expected an object, got %s", sk__jr_type(v));
  return SK_OK;
}

/* Messages about the members of object `key` (inside the current value) name them key.member
   until jr->where is cut back to the length returned. */
static SK__UNUSED size_t sk__jr_descend(sk__jr *jr, const char *key) {
  size_t n = strlen(jr->where);
  (void)snprintf(jr->where + n, sizeof jr->where - n, "%s%s", n ? "." : "", key);
  return n;
}

/* ---- typed members ---- */

/* A key that is not in `keys` (NULL-terminated) is refused: a misspelt one must not be dropped
   in silence. At the top level the message names the key's own line. */
static sk_result sk__jr_keys(sk__jr *jr, json_t *obj, const char *const *keys) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    int k = 0;
    while (keys[k] && strcmp(keys[k], key)) k++;
    if (keys[k]) continue;
    if (!jr->where[0]) sk__jr_top(jr, key);
    return sk__jr_fail(jr, key, "unknown key");
  }
  return SK_OK;
}

/* Member `key` as a string (NULL when absent and not required). */
static sk_result sk__jr_string(sk__jr *jr, json_t *obj, const char *key, bool required, const char **s) {
  json_t *v = json_object_get(obj, key);
  *s = NULL;
  if (!v && !required) return SK_OK;
  if (!json_is_string(v)) return sk__jr_fail(jr, key, "expected a string, got %s", sk__jr_type(v));
  *s = json_string_value(v);
  return SK_OK;
}

/* Member `key` as an integer in lo..hi into *out (left alone when absent and not required). */
static SK__UNUSED sk_result sk__jr_int(sk__jr *jr, json_t *obj, const char *key, bool required, long long lo, long long hi,
                                       long long *out) {
  json_t *v = json_object_get(obj, key);
  if (!v && !required) return SK_OK;
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return sk__jr_fail(jr, key, "expected an integer in %lld..%lld, got %s", lo, hi,
                       json_is_integer(v) ? "one outside" : sk__jr_type(v));
  *out = json_integer_value(v);
  return SK_OK;
}

/* Member `key`, when present, as a boolean into *out. */
static SK__UNUSED sk_result sk__jr_bool(sk__jr *jr, json_t *obj, const char *key, bool *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return SK_OK;
  if (!json_is_boolean(v)) return sk__jr_fail(jr, key, "expected true or false, got %s", sk__jr_type(v));
  *out = json_is_true(v);
  return SK_OK;
}

/* Member `key`, when present, as a number into *out (jansson reads only finite ones). */
static SK__UNUSED sk_result sk__jr_real(sk__jr *jr, json_t *obj, const char *key, double *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return SK_OK;
  if (!json_is_number(v)) return sk__jr_fail(jr, key, "expected a number, got %s", sk__jr_type(v));
  *out = json_number_value(v);
  return SK_OK;
}

/* v as a list of at most max integers in lo..hi into out; *n receives its length. */
static sk_result sk__jr_ints(sk__jr *jr, json_t *v, const char *key, int max, long long lo, long long hi, int64_t *out,
                             int *n) {
  if (!json_is_array(v) || json_array_size(v) > (size_t)max)
    return sk__jr_fail(jr, key, "expected a list of at most %d integers, got %s", max,
                       json_is_array(v) ? "a longer one" : sk__jr_type(v));
  *n = (int)json_array_size(v);
  for (int k = 0; k < *n; k++) {
    json_t *x = json_array_get(v, (size_t)k);
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
      return sk__jr_fail(jr, key, "entry %d: expected an integer in %lld..%lld, got %s", k, lo, hi,
                         json_is_integer(x) ? "one outside" : sk__jr_type(x));
    out[k] = (int64_t)json_integer_value(x);
  }
  return SK_OK;
}

/* The same into an int array (strategies: any int, kept as written for the compiler to judge). */
static sk_result sk__jr_int_list(sk__jr *jr, json_t *v, const char *key, int *out, int *n) {
  int64_t x[SK_MAX_DIMS];
  sk_result r = sk__jr_ints(jr, v, key, SK_MAX_DIMS, INT_MIN, INT_MAX, x, n);
  for (int k = 0; r == SK_OK && k < *n; k++) out[k] = (int)x[k];
  return r;
}

/* The top level of a shardkit file: an object (`what`, for messages) whose "format" is
   `format` and whose "version" is one of 1..newest, into *version. Its keys are the caller's:
   they may depend on the version. */
static SK__UNUSED sk_result sk__jr_head(sk__jr *jr, json_t *root, const char *what, const char *format, int newest,
                                        int *version) {
  const char *f;
  long long v = 0;
  char known[32];
  sk_result r;
  jr->where[0] = 0, jr->at = 0, jr->elements = NULL;
  if (!json_is_object(root)) return sk__jr_fail(jr, "", "expected the %s object, got %s", what, sk__jr_type(root));
  sk__jr_top(jr, "format");
  if ((r = sk__jr_string(jr, root, "format", true, &f))) return r;
  if (strcmp(f, format)) return sk__jr_fail(jr, "format", "expected \"%s\"", format);
  sk__jr_top(jr, "version");
  json_t *n = json_object_get(root, "version");
  if (json_is_integer(n) && json_integer_value(n) >= 1 && json_integer_value(n) <= newest) v = json_integer_value(n);
  if (newest > 1) (void)snprintf(known, sizeof known, "1..%d, the versions", newest);
  else (void)snprintf(known, sizeof known, "1, the version");
  if (!v && json_is_integer(n))
    return sk__jr_fail(jr, "version", "expected %s this reader knows, got %lld", known, (long long)json_integer_value(n));
  if (!v) return sk__jr_fail(jr, "version", "expected %s this reader knows, got %s", known, sk__jr_type(n));
  *version = (int)v;
  return SK_OK;
}

/* ---- what network and strategy files both hold: strategies and layouts ---- */

/* A strategy's default form, which desc.nstrategies == 0 and desc.strategy_len[i] == 0 stand
   for (the writers write it out): one tuple per input of the operator's full desc (OneHot: its
   indices, then the on and off scalars), each as long as its input's rank (OneHot's indices:
   one more, the classes). */
static SK__UNUSED int sk__json_tuples(const sk_graph_op *op) { return sk_op_tuple_count(op->desc.kind, op->ninputs); }

static SK__UNUSED int sk__json_tuple_len(const sk_graph *g, const sk_graph_op *op, int i) {
  if (i >= op->ninputs) return 0;
  return sk_op_tuple_len(op->desc.kind, i, g->tensors[op->inputs[i]].ndims);
}

/* A tuple of length 0 for a tensor input cannot be kept: a stored length of 0 stands for the
   input's rank. */
#define sk__jr_empty_tuple(jr, key, rank)                                                               \
  sk__jr_fail((jr), (key), "an empty tuple for a rank-%d input cannot be stored (a length of 0 stands " \
              "for the input's rank)", (rank))

/* Member `key` of obj, the strategy tuples as written, into d (the desc of op, whose inputs g
   holds): absent (or null where null_ok: no strategy) leaves d alone. A count or a length that
   differs from the default form is kept in d->nstrategies / strategy_len, for the compiler to
   judge; the default form leaves those zero, as a desc built in C has them. The two forms zero
   cannot tell from the default are refused. */
static SK__UNUSED sk_result sk__jr_shard(sk__jr *jr, const sk_graph *g, const sk_graph_op *op, json_t *obj,
                                         const char *key, bool null_ok, sk_op_desc *d) {
  json_t *v = json_object_get(obj, key);
  int tuples = sk__json_tuples(op);
  if (!v || (null_ok && json_is_null(v))) return SK_OK;
  if (!json_is_array(v) || json_array_size(v) > SK_OP_MAX_INPUTS)
    return sk__jr_fail(jr, key, "expected %sa list of at most %d tuples, got %s", null_ok ? "null or " : "",
                       SK_OP_MAX_INPUTS, json_is_array(v) ? "a longer one" : sk__jr_type(v));
  int n = (int)json_array_size(v);
  if (n == 0 && tuples != 0)
    return sk__jr_fail(jr, key, "an empty strategy for an operator of %d tuples cannot be stored (%s is the default)",
                       tuples, null_ok ? "null" : "leaving it out");
  d->has_strategy = true;
  d->nstrategies = n == tuples ? 0 : n;
  for (int i = 0; i < n; i++) {
    char at[48];
    int len = 0, want = sk__json_tuple_len(g, op, i);
    (void)snprintf(at, sizeof at, "%s[%d]", key, i);
    sk_result r = sk__jr_int_list(jr, json_array_get(v, (size_t)i), at, d->strategy[i], &len);
    if (r) return r;
    if (len == 0 && want != 0) return sk__jr_empty_tuple(jr, at, want);
    d->strategy_len[i] = len == want ? 0 : len;
  }
  return SK_OK;
}

/* A set of layouts on one mesh, member `key` of obj: {"mesh": "<mesh text>", "<list>": ["<map>",
   ...]}, map k read against tensor ids[k]'s shape; between `least` and n maps (*got: how many). */
static sk_result sk__jr_layout_set(sk__jr *jr, const sk_graph *g, json_t *obj, const char *key, const char *list,
                                   const int *ids, int least, int n, sk_layout *out, int *got) {
  const char *const keys[] = {"mesh", list, NULL};
  json_t *v = json_object_get(obj, key), *maps;
  const char *mesh_text;
  sk_mesh mesh;
  sk_error e;
  sk_result r;
  if (!json_is_object(v))
    return sk__jr_fail(jr, key, "expected an object {\"mesh\": ..., \"%s\": [...]}, got %s", list, sk__jr_type(v));
  size_t up = sk__jr_descend(jr, key);
  if ((r = sk__jr_keys(jr, v, keys)) || (r = sk__jr_string(jr, v, "mesh", true, &mesh_text))) return r;
  if ((r = sk_mesh_parse(&mesh, mesh_text, &e))) return sk__jr_refused(jr, r, "mesh", &e);
  maps = json_object_get(v, list);
  if (!json_is_array(maps) || json_array_size(maps) < (size_t)least || json_array_size(maps) > (size_t)n) {
    if (!strcmp(list, "inputs")) return sk__jr_fail(jr, list, "expected a list of %d layout texts, one per input", n);
    return sk__jr_fail(jr, list, "expected a list of %d..%d layout texts, for the operator's first outputs", least, n);
  }
  *got = (int)json_array_size(maps);
  for (int k = 0; k < *got; k++) {
    json_t *m = json_array_get(maps, (size_t)k);
    const sk_graph_tensor *t = &g->tensors[ids[k]];
    char at[32];
    (void)snprintf(at, sizeof at, "%s[%d]", list, k);
    if (!json_is_string(m)) return sk__jr_fail(jr, at, "expected a layout text such as \"dp,mp\", got %s", sk__jr_type(m));
    if ((r = sk_layout_parse(&out[k], &mesh, json_string_value(m), t->ndims, t->shape, &e))) return sk__jr_refused(jr, r, at, &e);
  }
  jr->where[up] = 0;
  return SK_OK;
}

/* "layouts" of obj, when present: shard's in_strategy as layouts, one map per input of op, into
   d (op's desc). */
static SK__UNUSED sk_result sk__jr_layouts(sk__jr *jr, const sk_graph *g, json_t *obj, const sk_graph_op *op,
                                           sk_op_desc *d) {
  int n = 0;
  if (!json_object_get(obj, "layouts")) return SK_OK;
  if (op->ninputs < 1) return sk__jr_fail(jr, "layouts", "the operator reads no tensor: nothing to lay out");
  sk_result r = sk__jr_layout_set(jr, g, obj, "layouts", "inputs", op->inputs, op->ninputs, op->ninputs, d->layouts, &n);
  d->has_layouts = r == SK_OK;
  return r;
}

/* "out_layout" of obj, when present: out_strategy as layouts, one map for each of op's first
   outputs (whose shapes g must hold by then), into d. */
static SK__UNUSED sk_result sk__jr_out_layout(sk__jr *jr, const sk_graph *g, json_t *obj, const sk_graph_op *op,
                                              sk_op_desc *d) {
  if (!json_object_get(obj, "out_layout")) return SK_OK;
  return sk__jr_layout_set(jr, g, obj, "out_layout", "outputs", op->outputs, 1, op->noutputs, d->out_layouts,
                           &d->nout_layouts);
}

SK_EXTERN_C_END
#endif /* SK__JSON_READ_PRIVATE */
