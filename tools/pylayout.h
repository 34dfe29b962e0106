/* pylayout.h -- reads MindSpore's Layout literals from a command line (pyliteral.h parses them):
     Layout((2,2,2), ("dp","sp","mp"))("mp", ("sp","dp"))
     mindspore.Layout(device_matrix=(2,4), alias_name=("dp","mp"))("dp", "None")
   The constructor's call gives a mesh: the device matrix's dims, left to right, named by
   alias_name (rank_list is refused unless None: ranks are row-major). The second call gives the
   tensor map, as the text sk_layout_parse reads. And a tuple of such layouts -- MindSpore's
   dataset_strategy, one layout per network input -- reads into a mesh and a map text per entry.
   (Not part of the library: include/ holds that.)

   Every function returns 0 (or what it documents) on success and -1 on an error, whose message
   is in the pylit_doc's error, as pyliteral.h's functions report: "FLAG: MESSAGE at column C in
   'TEXT'" -- except two messages, which are plain: a map text longer than its buffer ("a tensor
   map longer than N characters") and sk_mesh_init's refusal of the mesh (its own words).
   pylayout_tuple names the flag and the column in those too.

   The map text ("canonical"): the map's dims separated by commas, each an axis name, None, or a
   parenthesised tuple of names, the first the major factor; no spaces:
     ("mp", ("sp","dp"))  ->  mp,(sp,dp)          ("dp",)  ->  dp          ("dp","None")  ->  dp,None
   Axis names are identifiers (letters, digits, '_'); a quoted "None" is None, as in MindSpore. */
#ifndef SK_TOOLS_PYLAYOUT_H
#define SK_TOOLS_PYLAYOUT_H

#include "sk_layout.h"
#include "pyliteral.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for one map text, NUL included. */
#define PYLAYOUT_MAP_MAX 1024

/* Appends to a map text in buf; -1 (and the plain message in doc->error) when it does not fit. */
static inline int pylayout_append(pylit_doc *doc, char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < cap - len) return 0;
  buf[len] = '\0';
  snprintf(doc->error, sizeof doc->error, "a tensor map longer than %zu characters", cap - 1);
  return -1;
}

/* Appends the axis name at node n, written bare (mp) or quoted ("mp"); None and the quoted
   "None" append None. Names must be identifiers, so that a map text keeps its items. */
static inline int pylayout_axis_name(pylit_doc *doc, int n, char *buf, size_t cap) {
  const pylit_node *node = &doc->nodes[n];
  if (node->kind == PYLIT_NONE) return pylayout_append(doc, buf, cap, "None");
  if (node->kind != PYLIT_NAME && node->kind != PYLIT_STR) return pylit_expected(doc, n, "an axis name or None");
  for (const char *c = node->text; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '_')
      return pylit_fail_at(doc, node->column, "'%s' is not an axis name", node->text);
  if (!node->text[0]) return pylit_fail_at(doc, node->column, "an empty axis name");
  return pylayout_append(doc, buf, cap, "%s", node->text);
}

/* Appends one dim of a map, node n: a name, None, or a tuple of names (the first the major
   factor). */
static inline int pylayout_map_dim(pylit_doc *doc, int n, char *buf, size_t cap) {
  const pylit_node *node = &doc->nodes[n];
  if (node->kind != PYLIT_TUPLE) return pylayout_axis_name(doc, n, buf, cap);
  if (node->count == 0) return pylit_fail_at(doc, node->column, "an empty tuple cuts nothing: write None");
  if (pylayout_append(doc, buf, cap, "(") < 0) return -1;
  for (int i = node->first, k = 0; i >= 0; i = doc->nodes[i].next, k++) {
    if (doc->nodes[i].kind == PYLIT_TUPLE) return pylit_fail_at(doc, doc->nodes[i].column, "nested tuple in a map dim");
    if (k && pylayout_append(doc, buf, cap, ",") < 0) return -1;
    if (pylayout_axis_name(doc, i, buf, cap) < 0) return -1;
  }
  return pylayout_append(doc, buf, cap, ")");
}

/* The map at node n -- a Layout's call ("mp", ("sp","dp")), or a flag's value "mp,(sp,dp)" or
   ("mp",("sp","dp")) -- as map text in buf (cap bytes, PYLAYOUT_MAP_MAX is plenty). ndims, the
   tensor's dim count, matters only for a value that is not a call: a 1-dim tensor's map may be
   written "(sp,dp)", one tuple of names, which Python would read as two dims. A map without
   dims fails with "FLAG: the map has no dims in 'TEXT'". */
static inline int pylayout_map_text(pylit_doc *doc, int n, int ndims, char *buf, size_t cap) {
  const pylit_node *node = &doc->nodes[n];
  buf[0] = '\0';
  int one_dim_tuple = ndims == 1 && node->kind == PYLIT_TUPLE && node->bracketed && node->count > 1;
  for (int i = node->first; one_dim_tuple && i >= 0; i = doc->nodes[i].next)
    if (doc->nodes[i].kind == PYLIT_TUPLE) one_dim_tuple = 0;
  if (one_dim_tuple || (node->kind != PYLIT_TUPLE && node->kind != PYLIT_CALL)) return pylayout_map_dim(doc, n, buf, cap);
  if (node->count == 0) {
    snprintf(doc->error, sizeof doc->error, "%s: the map has no dims in '%s'", doc->flag, doc->text);
    return -1;
  }
  for (int i = node->first, k = 0; i >= 0; i = doc->nodes[i].next, k++) {
    if (doc->nodes[i].key[0]) return pylit_fail_at(doc, doc->nodes[i].column, "a map takes no keyword '%s'", doc->nodes[i].key);
    if (k && pylayout_append(doc, buf, cap, ",") < 0) return -1;
    if (pylayout_map_dim(doc, i, buf, cap) < 0) return -1;
  }
  return 0;
}

/* A call's argument: positional `index` or keyword `key`; -1 when absent. */
static inline int pylayout_call_argument(const pylit_doc *doc, int call, int index, const char *key) {
  int k = 0;
  for (int i = doc->nodes[call].first; i >= 0; i = doc->nodes[i].next) {
    if (!doc->nodes[i].key[0] ? k++ == index : !strcmp(doc->nodes[i].key, key)) return i;
  }
  return -1;
}

/* The constructor call at node `call`, Layout(device_matrix, alias_name) (keywords allowed,
   mindspore.Layout too), as a mesh. */
static inline int pylayout_mesh_from_call(pylit_doc *doc, int call, sk_mesh *mesh) {
  const pylit_node *callee = &doc->nodes[doc->nodes[call].callee];
  const char *dot = strrchr(callee->text, '.');
  if (callee->kind != PYLIT_NAME || strcmp(dot ? dot + 1 : callee->text, "Layout"))
    return pylit_fail_at(doc, callee->column, "expected Layout(device_matrix, alias_name)");
  for (int i = doc->nodes[call].first; i >= 0; i = doc->nodes[i].next) {
    const char *key = doc->nodes[i].key;
    if (key[0] && strcmp(key, "device_matrix") && strcmp(key, "alias_name") && strcmp(key, "rank_list"))
      return pylit_fail_at(doc, doc->nodes[i].column, "Layout takes no keyword '%s'", key);
  }
  int rank_list = pylayout_call_argument(doc, call, 2, "rank_list");
  if (rank_list >= 0 && doc->nodes[rank_list].kind != PYLIT_NONE)
    return pylit_fail_at(doc, doc->nodes[rank_list].column, "rank_list is not supported (ranks are row-major)");
  int matrix = pylayout_call_argument(doc, call, 0, "device_matrix");
  int alias = pylayout_call_argument(doc, call, 1, "alias_name");
  if (matrix < 0 || alias < 0) return pylit_fail_at(doc, doc->nodes[call].column, "Layout needs device_matrix and alias_name");
  long long dims_ll[SK_MAX_AXES] = {0};
  int n = pylit_int_tuple(doc, matrix, 1, SK_MAX_DEVICES, "a device matrix dim", dims_ll, SK_MAX_AXES);
  if (n < 0) return -1;
  int names[PYLIT_MAX_NODES];
  int nn = pylit_list(doc, alias, names, PYLIT_MAX_NODES);
  if (nn != n)
    return pylit_fail_at(doc, doc->nodes[alias].column, "alias_name has %d names for %d device matrix dims", nn, n);
  int dims[SK_MAX_AXES];
  const char *name_ptrs[SK_MAX_AXES];
  for (int k = 0; k < n; k++) {
    const pylit_node *name = &doc->nodes[names[k]];
    if (name->kind != PYLIT_STR && name->kind != PYLIT_NAME) return pylit_expected(doc, names[k], "an axis name");
    dims[k] = (int)dims_ll[k];
    name_ptrs[k] = name->text;
  }
  sk_error e;
  if (sk_mesh_init(mesh, n, dims, name_ptrs, &e) != SK_OK) {
    snprintf(doc->error, sizeof doc->error, "%s", e.msg);
    return -1;
  }
  return 0;
}

/* Node n as a layout: Layout(device_matrix, alias_name), optionally called with the map as
   MindSpore writes it, Layout((2,2,2), ("dp","sp","mp"))("mp", ("sp","dp")). The mesh into
   *mesh; *map receives the map's call node (for pylayout_map_text), or -1 when there is no call
   after the constructor. */
static inline int pylayout_mesh(pylit_doc *doc, int n, sk_mesh *mesh, int *map) {
  *map = -1;
  if (doc->nodes[n].kind != PYLIT_CALL) return pylit_expected(doc, n, "Layout(device_matrix, alias_name)");
  int outer = doc->nodes[n].callee;
  if (doc->nodes[outer].kind != PYLIT_CALL) return pylayout_mesh_from_call(doc, n, mesh);
  if (pylayout_mesh_from_call(doc, outer, mesh) < 0) return -1;
  *map = n;
  return 0;
}

/* Whether text holds a Layout call ("Layout(", "mindspore.Layout (", ...), so that a flag can
   tell a tuple of layouts from a tuple of strategies before parsing it. */
static inline int pylayout_is_layout_text(const char *text) {
  static const char word[] = "Layout";
  for (const char *p = text; p && (p = strstr(p, word)) != NULL; p += sizeof word - 1) {
    if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
    const char *q = p + sizeof word - 1;
    while (*q == ' ' || *q == '\t' || *q == '\n') q++;
    if (*q == '(') return 1;
  }
  return 0;
}

/* One name of a map (node n, a name, a string or None) against the mesh; used marks the axes
   taken so far. */
static inline int pylayout_check_axis(pylit_doc *doc, int n, const sk_mesh *mesh, int *used) {
  const pylit_node *node = &doc->nodes[n];
  if (node->kind == PYLIT_NONE || !strcmp(node->text, "None")) return 0;
  int a = 0;
  while (a < mesh->naxes && strcmp(mesh->names[a], node->text)) a++;
  if (a == mesh->naxes) return pylit_fail_at(doc, node->column, "'%s' is not an axis of the Layout's alias_name", node->text);
  if (used[a]) return pylit_fail_at(doc, node->column, "axis '%s' used twice in the map", node->text);
  used[a] = 1;
  return 0;
}

/* Checks the names of the map (the call node `map`, already read by pylayout_map_text) against
   the layout's mesh: each an axis of it, none used twice. */
static inline int pylayout_check_axes(pylit_doc *doc, int map, const sk_mesh *mesh) {
  int used[SK_MAX_AXES] = {0};
  for (int i = doc->nodes[map].first; i >= 0; i = doc->nodes[i].next) {
    if (doc->nodes[i].kind != PYLIT_TUPLE) {
      if (pylayout_check_axis(doc, i, mesh, used) < 0) return -1;
      continue;
    }
    for (int j = doc->nodes[i].first; j >= 0; j = doc->nodes[j].next)
      if (pylayout_check_axis(doc, j, mesh, used) < 0) return -1;
  }
  return 0;
}

/* A tuple of layouts from `text`, the value of `flag` -- MindSpore's dataset_strategy, one
   Layout(device_matrix, alias_name)(map...) per network input, in input order:
     (Layout((2,4),("dp","mp"))("dp","None"), Layout((2,4),("dp","mp"))("dp",))
   brackets optional, a trailing comma allowed (a one-entry tuple needs it in Python, not here: a
   lone layout is one entry). At most `max` (>= 1) entries: entry i's mesh into meshes[i], its map text
   (the format above) into maps[i], the count into *n. Each entry must carry its map; its names
   must be axes of its own alias_name, each used once. The shapes are not checked (the caller
   knows them later: sk_layout_parse(&l, &meshes[i], maps[i], ndims, shape, &e)). Returns 0, or
   -1 with "FLAG: MESSAGE at column C in 'TEXT'" in err (errcap bytes, truncated to fit). */
static inline int pylayout_tuple(const char *flag, const char *text, int max, sk_mesh *meshes, char (*maps)[PYLAYOUT_MAP_MAX],
                                 int *n, char *err, size_t errcap) {
  *n = 0;
  if (errcap) err[0] = '\0';
  pylit_doc *doc = (pylit_doc *)malloc(sizeof *doc);
  if (!doc) {
    if (errcap) snprintf(err, errcap, "%s: out of memory", flag);
    return -1;
  }
  int items[PYLIT_MAX_NODES] = {0}; /* all read only below count; GCC cannot see it when inlined */
  int count = 0, r = pylit_parse(doc, flag, text);
  if (r == 0) {
    int root = doc->root;
    count = doc->nodes[root].kind == PYLIT_TUPLE ? pylit_list(doc, root, items, PYLIT_MAX_NODES) : 1;
    if (doc->nodes[root].kind != PYLIT_TUPLE) items[0] = root;
    if (count == 0) r = pylit_fail_at(doc, doc->nodes[root].column, "expected a tuple of Layout(...)(map...), found ()");
    if (r == 0 && count > max) r = pylit_fail_at(doc, doc->nodes[items[max]].column, "more than %d layouts", max);
  }
  for (int k = 0; r == 0 && k < count; k++) {
    int node = items[k], map;
    int column = doc->nodes[node].column;
    size_t flen = strlen(flag);
    memset(&meshes[k], 0, sizeof meshes[k]);
    r = pylayout_mesh(doc, node, &meshes[k], &map);
    if (r == 0 && map < 0) r = pylit_fail_at(doc, column, "layout %d has no map: write Layout(...)(\"dp\", ...)", k);
    if (r == 0 && doc->nodes[map].count == 0) r = pylit_fail_at(doc, doc->nodes[map].column, "layout %d's map has no dims", k);
    if (r == 0) r = pylayout_map_text(doc, map, 0, maps[k], PYLAYOUT_MAP_MAX);
    if (r == 0) r = pylayout_check_axes(doc, map, &meshes[k]);
    if (r < 0 && (strncmp(doc->error, flag, flen) || strncmp(doc->error + flen, ": ", 2))) {
      char plain[sizeof doc->error];
      memcpy(plain, doc->error, sizeof plain);
      pylit_fail_at(doc, column, "layout %d: %s", k, plain);
    }
  }
  if (r == 0)
    *n = count;
  else if (errcap)
    snprintf(err, errcap, "%s", doc->error);
  free(doc);
  return r < 0 ? -1 : 0;
}

#endif /* SK_TOOLS_PYLAYOUT_H */
