/* pyshard.h -- reads MindSpore's shard(in_strategy=..., out_strategy=...) arguments from a
   command line into an operator's desc (sk_ops.h), in either of shard's forms:
     tuples   ((2,1),(1,4))   -- one tuple per input; "(2,1)" alone is one input's tuple
     layouts  (Layout((2,4),("dp","mp"))("dp","None"), Layout((2,4),("dp","mp"))("mp","None"))
   (pyliteral.h parses them, pylayout.h reads the layouts.) The tuples are kept as written --
   their count and lengths in desc.nstrategies / strategy_len -- so that the operator's rule
   refuses a malformed one in MindSpore's words; an empty tuple "()" has length 0, which desc
   reads as the input's rank: the caller refuses it, or fills it. Layouts are read on the
   tensors' shapes, which the caller passes.
   (Not part of the library: include/ holds that.)

   Every function returns 0 on success and -1 with "FLAG: MESSAGE ..." in err (errcap bytes). */
#ifndef SK_TOOLS_PYSHARD_H
#define SK_TOOLS_PYSHARD_H

#include "pylayout.h"
#include "pyliteral.h"
#include "sk_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tuples of integers: at most `max` tuples of at most SK_MAX_DIMS values; a flat tuple (or one
   integer) is the single tuple. lens[i] receives tuple i's length (0 for "()"), *n the count. */
static inline int pyshard_tuples(const char *flag, const char *text, int max, int (*values)[SK_MAX_DIMS], int *lens, int *n,
                                 char *err, size_t errcap) {
  pylit_doc *doc = (pylit_doc *)malloc(sizeof *doc);
  if (!doc) return snprintf(err, errcap, "%s: out of memory", flag), -1;
  int r = pylit_parse(doc, flag, text), items[PYLIT_MAX_NODES], flat = 0;
  const pylit_node *root = r ? NULL : &doc->nodes[doc->root];
  if (!r) {
    flat = root->kind == PYLIT_INT;
    for (int i = root->kind == PYLIT_TUPLE && root->count ? root->first : -1; i >= 0; i = doc->nodes[i].next)
      flat = doc->nodes[i].kind == PYLIT_INT;
    *n = flat ? 1 : pylit_list(doc, doc->root, items, PYLIT_MAX_NODES);
    if (flat) items[0] = doc->root;
    if (*n > max) r = pylit_fail_at(doc, root->column, "%d tuples; at most %d", *n, max);
  }
  for (int i = 0; !r && i < *n; i++) {
    long long v[SK_MAX_DIMS];
    if (!flat && doc->nodes[items[i]].kind != PYLIT_TUPLE) r = pylit_expected(doc, items[i], "a strategy tuple");
    int len = r ? -1 : pylit_int_tuple(doc, items[i], -(1LL << 30), 1LL << 30, "a strategy value", v, SK_MAX_DIMS);
    if (len < 0) r = -1;
    for (int j = 0; !r && j < len; j++) values[i][j] = (int)v[j];
    lens[i] = len;
  }
  if (r) snprintf(err, errcap, "%s", doc->error);
  free(doc);
  return r;
}

/* A tuple of layouts, layout k read on the rank-ndims[k] shapes[k]: at most `max`, *n the count. */
static inline int pyshard_layouts(const char *flag, const char *text, int max, const int *ndims,
                                  const int64_t (*shapes)[SK_MAX_DIMS], const char *what, sk_layout *out, int *n, char *err,
                                  size_t errcap) {
  static sk_mesh meshes[SK_OP_MAX_INPUTS > SK_OP_MAX_OUTPUTS ? SK_OP_MAX_INPUTS : SK_OP_MAX_OUTPUTS];
  static char maps[sizeof meshes / sizeof meshes[0]][PYLAYOUT_MAP_MAX]; /* off the stack */
  if (pylayout_tuple(flag, text, max, meshes, maps, n, err, errcap)) return -1;
  for (int k = 0; k < *n; k++) {
    sk_error e;
    if (sk_layout_parse(&out[k], &meshes[k], maps[k], ndims[k], shapes[k], &e))
      return snprintf(err, errcap, "%s: layout %d (%s %d): %s", flag, k, what, k, e.msg), -1;
  }
  return 0;
}

/* shard's in_strategy into d, whose inputs' ranks and shapes are set: d->ninputs tensors
   (OneHot's scalars past them take no layout); the form replaces any strategy d had. */
static inline int pyshard_in_strategy(const char *flag, const char *text, sk_op_desc *d, char *err, size_t errcap) {
  int n = 0, lens[SK_OP_MAX_INPUTS] = {0};
  d->has_strategy = d->has_layouts = false, d->nstrategies = 0;
  memset(d->strategy_len, 0, sizeof d->strategy_len);
  if (pylayout_is_layout_text(text)) {
    int tensors = 0;
    while (tensors < d->ninputs && d->ndims[tensors] > 0) tensors++;
    if (pyshard_layouts(flag, text, SK_OP_MAX_INPUTS, d->ndims, (const int64_t(*)[SK_MAX_DIMS])d->shape, "input", d->layouts,
                        &n, err, errcap))
      return -1;
    if (n != tensors) return snprintf(err, errcap, "%s: %d layouts for %d tensor inputs", flag, n, tensors), -1;
    return d->has_layouts = true, 0;
  }
  if (pyshard_tuples(flag, text, SK_OP_MAX_INPUTS, d->strategy, lens, &n, err, errcap)) return -1;
  d->has_strategy = true, d->nstrategies = n;
  memcpy(d->strategy_len, lens, sizeof lens); /* "()" for a tensor: 0, the input's rank; the caller decides */
  return 0;
}

/* shard's out_strategy into d: one tuple (output 0's) or layouts of the first outputs, read on
   the outputs' ranks and shapes (noutputs of them). */
static inline int pyshard_out_strategy(const char *flag, const char *text, sk_op_desc *d, int noutputs, const int *out_ndims,
                                       const int64_t (*out_shapes)[SK_MAX_DIMS], char *err, size_t errcap) {
  int n = 0, lens[SK_OP_MAX_INPUTS] = {0}, values[SK_OP_MAX_INPUTS][SK_MAX_DIMS];
  d->has_out_strategy = false, d->nout_layouts = 0;
  memset(d->out_strategy, 0, sizeof d->out_strategy);
  if (pylayout_is_layout_text(text))
    return pyshard_layouts(flag, text, noutputs, out_ndims, out_shapes, "output", d->out_layouts, &d->nout_layouts, err, errcap);
  if (pyshard_tuples(flag, text, SK_OP_MAX_INPUTS, values, lens, &n, err, errcap)) return -1;
  if (n != 1)
    return snprintf(err, errcap, "%s: %d tuples; out_strategy as tuples is output 0's one tuple (layouts give the others)",
                    flag, n), -1;
  if (lens[0] != out_ndims[0])
    return snprintf(err, errcap, "%s: a tuple of %d values for the rank-%d output", flag, lens[0], out_ndims[0]), -1;
  memcpy(d->out_strategy, values[0], sizeof values[0]);
  d->has_out_strategy = true;
  return 0;
}

#endif /* SK_TOOLS_PYSHARD_H */
