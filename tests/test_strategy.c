/* sk_strategy.h: strategy files. Saving a plan and compiling the network again from the file
   reproduces the plan exactly (every operator's desc, layouts, collectives and steps, every
   tensor's layout) for the shipped networks, with a dataset tuple of strategies or of layouts,
   operator layouts, and operators that fell back to data parallel on 8 devices; the re-saved
   file is byte for byte the first; loaded strategies take precedence over the network's; every
   refusal names the first mismatch (and its line); files that cannot be read or written and
   jansson or the configuration's allocator running out of memory are reported, with nothing
   leaked and the graph left as it was; trainable parameters only unless all_params. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oom_alloc.h"
#include "shardkit.h"
#include "sk_json.h"
#define SK_STRATEGY_IMPL
#include "sk_strategy.h"

/* ---- helpers ------------------------------------------------------------------------------ */

#define OK(call)                                                               \
  do {                                                                         \
    sk_error e_;                                                               \
    memset(&e_, 0, sizeof e_);                                                 \
    sk_result r_ = (call);                                                     \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg); \
  } while (0)
/* A call that must fail with `code` and a message holding `word`. */
#define FAILS(want, word, call)                                                                           \
  do {                                                                                                    \
    sk_error e_;                                                                                          \
    memset(&e_, 0, sizeof e_);                                                                            \
    sk_result r_ = (call);                                                                                \
    cr_assert_eq(r_, want, "%s returned %s (%s)", #call, sk_result_name(r_), e_.msg);                     \
    cr_assert_eq(e_.code, want);                                                                          \
    cr_assert(strstr(e_.msg, word) != NULL, "%s: message '%s' does not hold '%s'", #call, e_.msg, word); \
  } while (0)
#define BAD(word, call) FAILS(SK_ERR_INVALID_ARGUMENT, word, call)
#define E (&e_)

#define TUTORIAL "examples/nets/operator_parallel.json"
#define TRANSFORMER "examples/nets/transformer.json"
#define RECURSIVE "examples/nets/recursive_programming.json"

static void load(const char *path, sk_graph *g) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_load_network(path, g, &e), SK_OK, "%s: %s", path, e.msg);
}

static sk_autoparallel pdesc(int n) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = n;
  d.strategy_io = sk_strategy_io(); /* the files the tests name are read and written */
  return d;
}

/* MindSpore's dataset_strategy ((2, 1, 1, 1), (2,)) for the tutorial's image and label. */
static void tutorial_dataset(sk_autoparallel *d) {
  d->ndataset = 2;
  d->dataset_strategy[0][0] = 2, d->dataset_strategy[0][1] = d->dataset_strategy[0][2] = d->dataset_strategy[0][3] = 1;
  d->dataset_strategy[1][0] = 2;
}

static int op_index(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator %s", name);
  return -1;
}

/* A directory of this test's own (the suites run in parallel processes). */
typedef struct tmpdir {
  char dir[64];
} tmpdir;

static void tmp_make(tmpdir *t) {
  snprintf(t->dir, sizeof t->dir, "/tmp/sk_strategy_XXXXXX");
  cr_assert_not_null(mkdtemp(t->dir));
}

static const char *tmp_path(const tmpdir *t, const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", t->dir, name);
  return buf;
}

static void tmp_clean(const tmpdir *t) {
  DIR *d = opendir(t->dir);
  struct dirent *ent;
  char path[sizeof t->dir + sizeof ent->d_name + 2];
  while (d && (ent = readdir(d)) != NULL)
    if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) unlink(tmp_path(t, ent->d_name, path, sizeof path));
  if (d) closedir(d);
  rmdir(t->dir);
}

#include "text_file_util.h"

/* ---- comparing plans ------------------------------------------------------------------------ */

static void same_mesh(const sk_mesh *a, const sk_mesh *b, const char *what) {
  cr_assert_eq(a->naxes, b->naxes, "%s: mesh axes", what);
  cr_assert_eq(a->size, b->size, "%s: mesh size", what);
  for (int i = 0; i < a->naxes; i++) {
    cr_assert_eq(a->dims[i], b->dims[i], "%s: mesh dim %d", what, i);
    cr_assert_str_eq(a->names[i], b->names[i], "%s: mesh axis %d", what, i);
  }
}

/* Field by field: the same mesh, names included, shape and map. */
static void same_layout(const sk_layout *a, const sk_layout *b, const char *what) {
  same_mesh(&a->mesh, &b->mesh, what);
  cr_assert_eq(a->ndims, b->ndims, "%s: dims", what);
  for (int d = 0; d < a->ndims; d++) {
    cr_assert_eq(a->shape[d], b->shape[d], "%s: shape[%d]", what, d);
    cr_assert_eq(a->map[d].naxes, b->map[d].naxes, "%s: map[%d]", what, d);
    for (int j = 0; j < a->map[d].naxes; j++) cr_assert_eq(a->map[d].axes[j], b->map[d].axes[j], "%s: map[%d]", what, d);
  }
}

static void same_comm(const sk_op_comm *a, const sk_op_comm *b, const char *what) {
  cr_assert(a->kind == b->kind && a->op == b->op && a->axes == b->axes && a->scale == b->scale, "%s: collective", what);
}

/* The desc an operator was planned with; a strategy's entries only where it has one (a fallback
   leaves the network's numbers behind its cleared flags). `reloaded`: b was compiled from a
   file a's plan saved, which writes a default (or a fallback) as the strategy it got, so b
   has one where a has none (same_op compares what the rule made of it); a Reshape that followed
   its input is written null and follows it again. */
static void same_desc(const sk_op_desc *a, const sk_op_desc *b, const char *name, bool reloaded) {
  cr_assert_eq(a->kind, b->kind, "%s", name);
  cr_assert_eq(a->ninputs, b->ninputs, "%s", name);
  cr_assert_eq(memcmp(a->ndims, b->ndims, sizeof a->ndims), 0, "%s: ranks", name);
  cr_assert_eq(memcmp(a->shape, b->shape, sizeof a->shape), 0, "%s: shapes", name);
  cr_assert_eq(a->has_layouts, b->has_layouts, "%s: has_layouts", name);
  cr_assert_eq(a->has_out_strategy, b->has_out_strategy, "%s: has_out_strategy", name);
  if (a->follows_input) /* saved null: a strategy of its own would leave its output whole */
    cr_assert(b->follows_input && !b->has_strategy, "%s: a Reshape that followed its input follows it again", name);
  else if (reloaded && !a->has_strategy && !a->has_layouts)
    cr_assert(b->has_strategy, "%s: the default saved as a strategy", name);
  else {
    cr_assert_eq(a->has_strategy, b->has_strategy, "%s: has_strategy", name);
    cr_assert_eq(a->nstrategies, b->nstrategies, "%s: nstrategies", name);
    cr_assert_eq(memcmp(a->strategy_len, b->strategy_len, sizeof a->strategy_len), 0, "%s: strategy_len", name);
  }
  if (a->has_strategy || a->follows_input)
    cr_assert_eq(memcmp(a->strategy, b->strategy, sizeof a->strategy), 0, "%s: strategy", name);
  if (a->has_out_strategy)
    cr_assert_eq(memcmp(a->out_strategy, b->out_strategy, sizeof a->out_strategy), 0, "%s: out_strategy", name);
  for (int k = 0; a->has_layouts && k < a->ninputs; k++)
    if (a->ndims[k] > 0) same_layout(&a->layouts[k], &b->layouts[k], name);
  cr_assert_eq(a->nout_layouts, b->nout_layouts, "%s: nout_layouts", name);
  for (int k = 0; k < a->nout_layouts; k++) same_layout(&a->out_layouts[k], &b->out_layouts[k], name);
  cr_assert_eq(a->params, b->params, "%s: params", name);
  cr_assert(a->transpose_a == b->transpose_a && a->transpose_b == b->transpose_b && a->naxis == b->naxis &&
            a->keep_dims == b->keep_dims && a->depth == b->depth && a->repeat_left == b->repeat_left &&
            a->full_batch == b->full_batch, "%s: attributes", name);
}

static void same_op(const sk_parallel_op *a, const sk_parallel_op *b, const sk_graph_op *op) {
  const char *name = op->name;
  same_desc(&a->desc, &b->desc, name, true);
  same_mesh(&a->plan.mesh, &b->plan.mesh, name);
  cr_assert(a->plan.ninputs == b->plan.ninputs && a->plan.noutputs == b->plan.noutputs, "%s", name);
  for (int k = 0; k < a->plan.ninputs; k++) {
    same_layout(&a->plan.in[k], &b->plan.in[k], name);
    same_comm(&a->plan.bwd_in[k], &b->plan.bwd_in[k], name);
    same_comm(&a->plan.grad[k], &b->plan.grad[k], name);
  }
  for (int k = 0; k < a->plan.noutputs; k++) same_layout(&a->plan.out[k], &b->plan.out[k], name);
  same_comm(&a->plan.fwd, &b->plan.fwd, name);
  for (int k = 0; k < op->ninputs; k++) {
    same_layout(&a->kernel_in[k], &b->kernel_in[k], name);
    cr_assert(a->moved[k] == b->moved[k] && a->replication[k] == b->replication[k] &&
              a->mirror_scale[k] == b->mirror_scale[k], "%s: input %d", name, k);
  }
}

static void same_dataset(const sk_autoparallel *a, const sk_autoparallel *b) {
  cr_assert_eq(a->ndevices, b->ndevices);
  cr_assert_eq(a->ndataset, b->ndataset);
  cr_assert_eq(a->ndataset_layouts, b->ndataset_layouts);
  if (!a->ndataset && !a->ndataset_layouts) cr_assert_eq(a->dataset, b->dataset);
  cr_assert_eq(memcmp(a->dataset_strategy, b->dataset_strategy, sizeof a->dataset_strategy), 0);
  cr_assert_eq(memcmp(a->dataset_strategy_len, b->dataset_strategy_len, sizeof a->dataset_strategy_len), 0);
  for (int k = 0; k < a->ndataset_layouts; k++) same_layout(&a->dataset_layouts[k], &b->dataset_layouts[k], "dataset");
}

/* Two plans of one network: every operator, tensor and step the same. */
static void same_plan(const sk_parallel_plan *a, const sk_parallel_plan *b) {
  const sk_graph *g = a->graph;
  cr_assert_eq(g->nops, b->graph->nops);
  cr_assert_eq(g->ntensors, b->graph->ntensors);
  same_dataset(&a->desc, &b->desc);
  for (int o = 0; o < g->nops; o++) same_op(&a->ops[o], &b->ops[o], &g->ops[o]);
  for (int t = 0; t < g->ntensors; t++) {
    same_layout(&a->tensors[t].layout, &b->tensors[t].layout, g->tensors[t].name);
    cr_assert_eq(a->tensors[t].needs_grad, b->tensors[t].needs_grad, "%s", g->tensors[t].name);
  }
  cr_assert_eq(a->nsteps, b->nsteps);
  for (int i = 0; i < a->nsteps; i++) {
    const sk_parallel_step *x = &a->steps[i], *y = &b->steps[i];
    cr_assert(x->kind == y->kind && x->op == y->op && x->slot == y->slot, "step %d", i);
    same_comm(&x->comm, &y->comm, "step");
  }
  cr_assert_eq(a->loss_grad_scale, b->loss_grad_scale);
}

/* Compiles g under d saving one file (`one`) or a parameter and an operator file; then compiles
   a freshly loaded `net` from them, saving again; both plans and both texts must agree. */
static void round_trip(sk_graph *g, const char *net, const sk_autoparallel *d, bool one) {
  tmpdir t;
  char pp[128], op[128], pp2[128], op2[128];
  tmp_make(&t);
  sk_autoparallel s = *d, l = pdesc(d->ndevices);
  s.save_param_strategy_file = tmp_path(&t, one ? "both.json" : "params.json", pp, sizeof pp);
  s.save_operator_strategy_file = tmp_path(&t, one ? "both.json" : "ops.json", op, sizeof op);
  sk_parallel_plan a, b;
  OK(sk_parallel_compile(g, &s, &a, E));
  sk_graph h;
  load(net, &h);
  l.load_param_strategy_file = pp, l.load_operator_strategy_file = op;
  l.save_param_strategy_file = tmp_path(&t, one ? "both2.json" : "params2.json", pp2, sizeof pp2);
  l.save_operator_strategy_file = tmp_path(&t, one ? "both2.json" : "ops2.json", op2, sizeof op2);
  OK(sk_parallel_compile(&h, &l, &b, E));
  same_plan(&a, &b);
  for (int k = 0; k < 2; k++) {
    char *x = read_text(k ? op : pp), *y = read_text(k ? op2 : pp2);
    cr_assert_str_eq(x, y, "the re-saved file differs from the first");
    cr_assert(strstr(x, k || one ? "\"operators\"" : "\"parameters\"") != NULL);
    if (!one) cr_assert(strstr(x, k ? "\"parameters\"" : "\"operators\"") == NULL, "one section per file");
    free(x), free(y);
  }
  sk_parallel_free(&a), sk_parallel_free(&b);
  sk_graph_free(&h);
  tmp_clean(&t);
}

/* ---- round trips ----------------------------------------------------------------------------- */

Test(strategy, tutorial_round_trips_with_a_dataset_tuple) {
  sk_graph g;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8);
  tutorial_dataset(&d);
  round_trip(&g, TUTORIAL, &d, true);
  round_trip(&g, TUTORIAL, &d, false);
  sk_graph_free(&g);
}

Test(strategy, transformer_round_trips, .timeout = 60) {
  sk_graph g;
  load(TRANSFORMER, &g);
  sk_autoparallel d = pdesc(8);
  d.ndataset = 2, d.dataset_strategy[0][0] = 2, d.dataset_strategy[0][1] = 1, d.dataset_strategy[1][0] = 2;
  round_trip(&g, TRANSFORMER, &d, false);
  sk_graph_free(&g);
}

Test(strategy, recursive_programming_round_trips_data_parallel_and_full_batch) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d = pdesc(4);
  round_trip(&g, RECURSIVE, &d, true);
  d.dataset = SK_DATASET_FULL_BATCH;
  round_trip(&g, RECURSIVE, &d, true);
  sk_graph_free(&g);
}

/* fc3 planned from layouts, relu2 from a layout with a tuple of axes and its output asked for
   in another layout (moved), fc2's output asked for by a tuple; the inputs cut by a tuple of
   layouts (one on a divisor of 8). */
Test(strategy, operator_layouts_and_dataset_layouts_round_trip) {
  sk_graph g;
  sk_mesh m, dp;
  load(TUTORIAL, &g);
  OK(sk_mesh_parse(&m, "dp=2,mp=4", E));
  OK(sk_mesh_parse(&dp, "dp=4", E));
  sk_graph_op *fc3 = &g.ops[op_index(&g, "fc3")], *relu2 = &g.ops[op_index(&g, "relu2")], *fc2 = &g.ops[op_index(&g, "fc2")];
  const sk_graph_tensor *x = &g.tensors[fc3->inputs[0]], *w = &g.tensors[fc3->inputs[1]];
  OK(sk_layout_parse(&fc3->desc.layouts[0], &m, "dp,mp", x->ndims, x->shape, E));
  OK(sk_layout_parse(&fc3->desc.layouts[1], &m, "mp,None", w->ndims, w->shape, E));
  fc3->desc.has_layouts = true;
  const sk_graph_tensor *h = &g.tensors[relu2->inputs[0]];
  relu2->desc.has_strategy = false, relu2->desc.has_layouts = true, relu2->desc.nout_layouts = 1;
  OK(sk_layout_parse(&relu2->desc.layouts[0], &m, "(mp,dp),None", h->ndims, h->shape, E));
  OK(sk_layout_parse(&relu2->desc.out_layouts[0], &m, "None,(dp,mp)", h->ndims, h->shape, E));
  fc2->desc.has_out_strategy = true, fc2->desc.out_strategy[0] = 1, fc2->desc.out_strategy[1] = 8;
  sk_autoparallel d = pdesc(8);
  const sk_graph_tensor *img = &g.tensors[sk_graph_find(&g, "image")], *lab = &g.tensors[sk_graph_find(&g, "label")];
  d.ndataset_layouts = 2;
  OK(sk_layout_parse(&d.dataset_layouts[0], &m, "dp,None,None,None", img->ndims, img->shape, E));
  OK(sk_layout_parse(&d.dataset_layouts[1], &dp, "dp", lab->ndims, lab->shape, E));
  round_trip(&g, TUTORIAL, &d, true);
  sk_graph_free(&g);
}

/* On 8 devices fc1's strategy here needs 16: it falls back to data parallel, which the file
   saves as the strategy it got (with "fell_back"). The shipped network, whose fc1 strategy
   fits, compiled from that file gives the same plan: the file's replaces the network's. */
Test(strategy, a_plan_with_fallbacks_reloads_to_the_same_plan) {
  sk_graph g, h;
  tmpdir t;
  char path[128], again[128];
  tmp_make(&t);
  load(TUTORIAL, &g);
  load(TUTORIAL, &h);
  sk_graph_op *fc1 = &g.ops[op_index(&g, "fc1")];
  fc1->desc.strategy[0][0] = 4, fc1->desc.strategy[0][1] = 4, fc1->desc.strategy[1][0] = 4;
  sk_autoparallel d = pdesc(8), l = pdesc(8);
  d.save_param_strategy_file = d.save_operator_strategy_file = tmp_path(&t, "s.json", path, sizeof path);
  sk_parallel_plan a, b;
  OK(sk_parallel_compile(&g, &d, &a, E));
  cr_assert_eq(a.nfallbacks, 1);
  cr_assert(a.ops[op_index(&g, "fc1")].fell_back);
  char *text = read_text(path);
  cr_assert(strstr(text, "\"name\": \"fc1\",\n      \"type\": \"MatMul\",\n      \"stage\": 0,\n      \"strategy\": [\n"
                        "        [\n          8,\n          1\n        ],\n        [\n          1,\n          1\n        ]\n"
                        "      ],\n      \"fell_back\": true"),
            "%s", text);
  l.load_param_strategy_file = l.load_operator_strategy_file = path;
  l.save_operator_strategy_file = l.save_param_strategy_file = tmp_path(&t, "again.json", again, sizeof again);
  OK(sk_parallel_compile(&h, &l, &b, E));
  same_plan(&a, &b);
  cr_assert_eq(b.nfallbacks, 0, "the file's data parallel strategy fits: nothing falls back");
  const sk_op_desc *fc1h = &b.graph->ops[op_index(&h, "fc1")].desc;
  cr_assert(fc1h->has_strategy && fc1h->strategy[0][0] == 8 && fc1h->strategy[0][1] == 1 && fc1h->strategy[1][0] == 1,
            "the plan's network took the file's fc1 strategy");
  cr_assert_eq(h.ops[op_index(&h, "fc1")].desc.strategy[0][1], 4, "the caller's network keeps its own");
  char *text2 = read_text(again);
  cr_assert(strstr(text2, "fell_back") == NULL);
  free(text), free(text2);
  sk_parallel_free(&a), sk_parallel_free(&b);
  sk_graph_free(&g), sk_graph_free(&h);
  tmp_clean(&t);
}

/* A file of other strategies wins over the network's and the desc's own. */
Test(strategy, loaded_strategies_take_precedence) {
  sk_graph g, h;
  tmpdir t;
  char path[128];
  tmp_make(&t);
  load(TUTORIAL, &g);
  load(TUTORIAL, &h);
  sk_graph_op *fc2 = &g.ops[op_index(&g, "fc2")];
  static const int x[2] = {2, 4}, w[2] = {4, 1};
  memcpy(fc2->desc.strategy[0], x, sizeof x), memcpy(fc2->desc.strategy[1], w, sizeof w);
  sk_autoparallel d = pdesc(8), l = pdesc(8);
  tutorial_dataset(&d);
  d.save_operator_strategy_file = tmp_path(&t, "ops.json", path, sizeof path);
  sk_parallel_plan a, b;
  OK(sk_parallel_compile(&g, &d, &a, E));
  l.dataset = SK_DATASET_FULL_BATCH; /* the file's tuple replaces it */
  l.load_operator_strategy_file = path;
  OK(sk_parallel_compile(&h, &l, &b, E));
  same_plan(&a, &b);
  cr_assert_eq(b.desc.ndataset, 2);
  cr_assert_eq(b.graph->ops[op_index(&h, "fc2")].desc.strategy[0][1], 4);
  cr_assert_neq(h.ops[op_index(&h, "fc2")].desc.strategy[0][1], 4, "the caller's network keeps its own");
  sk_parallel_free(&a), sk_parallel_free(&b);
  /* step 1 alone changes the graph and the desc */
  sk_graph_free(&h);
  load(TUTORIAL, &h);
  sk_autoparallel m = pdesc(8);
  OK(sk_strategy_load_operators(path, &h, &m, E));
  cr_assert_eq(m.ndataset, 2);
  cr_assert_eq(m.dataset_strategy[0][0], 2);
  cr_assert_eq(h.ops[op_index(&h, "fc2")].desc.strategy[1][0], 4);
  sk_graph_free(&g), sk_graph_free(&h);
  tmp_clean(&t);
}

/* The same plan gives the same bytes; the text's layout is the documented one. */
Test(strategy, canonical_text) {
  sk_graph g;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8);
  sk_parallel_plan p;
  char *a = NULL, *b = NULL;
  OK(sk_parallel_compile(&g, &d, &p, E));
  OK(sk_strategy_format(&p, true, true, false, &a, E));
  OK(sk_strategy_format(&p, true, true, false, &b, E));
  cr_assert_str_eq(a, b);
  const char *head = "{\n  \"format\": \"shardkit-strategy\",\n  \"version\": 3,\n  \"device_num\": 8,\n  \"stages\": 1,\n"
                     "  \"hsdp\": null,\n  \"dataset_strategy\": \"data_parallel\",\n  \"operators\": [\n";
  cr_assert(!strncmp(a, head, strlen(head)), "%s", a);
  cr_assert_eq(a[strlen(a) - 1], '\n');
  /* fc1.weight [784, 512] under fc1's [[2, 4], [4, 1]]: MatMul's device matrix (2, 4, 1), rows
     cut by the 4-axis and columns by the 1-axis (MindSpore's 1 and 0, counted from the right) */
  cr_assert(strstr(a, "\"name\": \"fc1.weight\",\n      \"shape\": [\n        784,\n        512\n      ],\n"
                      "      \"device_matrix\": [\n        2,\n        4,\n        1\n      ],\n      \"tensor_map\": [\n"
                      "        1,\n        0\n      ],\n      \"slice_shape\": [\n        196,\n        512\n      ],\n"
                      "      \"opt_shard\": null\n"),
            "%s", a);
  free(a), free(b);
  OK(sk_strategy_format(&p, false, true, false, &a, E));
  cr_assert(strstr(a, "\"parameters\"") == NULL);
  free(a);
  OK(sk_strategy_format(&p, true, false, false, &a, E));
  cr_assert(strstr(a, "\"operators\"") == NULL && strstr(a, "dataset_strategy") == NULL);
  free(a);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* A dim cut by several axes is a list in the tensor map. */
Test(strategy, a_dim_cut_by_two_axes_is_a_list) {
  sk_graph g;
  sk_mesh m;
  load(TUTORIAL, &g);
  OK(sk_mesh_parse(&m, "a=2,b=4", E));
  sk_graph_op *fc3 = &g.ops[op_index(&g, "fc3")];
  const sk_graph_tensor *x = &g.tensors[fc3->inputs[0]], *w = &g.tensors[fc3->inputs[1]];
  OK(sk_layout_parse(&fc3->desc.layouts[0], &m, "None,(a,b)", x->ndims, x->shape, E));
  OK(sk_layout_parse(&fc3->desc.layouts[1], &m, "(a,b),None", w->ndims, w->shape, E));
  fc3->desc.has_layouts = true;
  sk_autoparallel d = pdesc(8);
  sk_parallel_plan p;
  char *a = NULL;
  OK(sk_parallel_compile(&g, &d, &p, E));
  OK(sk_strategy_format(&p, true, false, false, &a, E));
  cr_assert(strstr(a, "\"name\": \"fc3.weight\"") != NULL);
  cr_assert(strstr(strstr(a, "\"name\": \"fc3.weight\""), "\"tensor_map\": [\n        [\n          1,\n          0\n"
                                                          "        ],\n        -1\n      ]") != NULL, "%s", a);
  free(a);
  sk_parallel_free(&p);
  round_trip(&g, TUTORIAL, &d, true);
  sk_graph_free(&g);
}

/* ---- parameters: trainable or all ------------------------------------------------------------ */

/* The tutorial with a parameter the loss does not depend on (read by a dead ReLU). */
static void load_with_frozen(sk_graph *g) {
  static const int64_t shape[2] = {8, 8};
  sk_init init = {SK_INIT_ZEROS, 0};
  int id = -1;
  load(TUTORIAL, g);
  OK(sk_graph_add_param(g, "frozen", SK_F32, 2, shape, init, &id, E));
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  snprintf(op.name, sizeof op.name, "dead");
  op.desc.kind = SK_OP_RELU, op.ninputs = 1, op.inputs[0] = id;
  OK(sk_graph_add_op(g, &op, NULL, E));
}

Test(strategy, trainable_parameters_only_unless_all_params) {
  sk_graph g, h;
  tmpdir t;
  char only[128], all[128];
  tmp_make(&t);
  load_with_frozen(&g);
  load_with_frozen(&h);
  sk_autoparallel d = pdesc(8), l = pdesc(8);
  d.save_param_strategy_file = tmp_path(&t, "only.json", only, sizeof only);
  sk_parallel_plan a, b;
  OK(sk_parallel_compile(&g, &d, &a, E));
  sk_parallel_free(&a);
  d.save_param_strategy_file = tmp_path(&t, "all.json", all, sizeof all), d.strategy_file_all_params = true;
  OK(sk_parallel_compile(&g, &d, &a, E));
  char *x = read_text(only), *y = read_text(all);
  cr_assert(strstr(x, "fc1.weight") && !strstr(x, "frozen"), "trainable only");
  cr_assert(strstr(y, "fc1.weight") && strstr(y, "\"name\": \"frozen\""), "every parameter");
  free(x), free(y);
  /* every file passes the trainable check; only the all-params file passes the all-params one */
  l.load_param_strategy_file = only;
  OK(sk_parallel_compile(&h, &l, &b, E));
  sk_parallel_free(&b);
  l.load_param_strategy_file = all;
  OK(sk_parallel_compile(&h, &l, &b, E));
  sk_parallel_free(&b);
  l.strategy_file_all_params = true;
  OK(sk_parallel_compile(&h, &l, &b, E));
  sk_parallel_free(&b);
  l.load_param_strategy_file = only;
  BAD("the network's parameter \"frozen\" is not in the file", sk_parallel_compile(&h, &l, &b, E));
  BAD("is not in the file", sk_strategy_check_params(only, &a, true, E));
  OK(sk_strategy_check_params(only, &a, false, E));
  sk_parallel_free(&a);
  sk_graph_free(&g), sk_graph_free(&h);
  tmp_clean(&t);
}

/* ---- refusals ----------------------------------------------------------------------------- */

/* The tutorial's file on 8 devices (both sections) as JSON, to be edited. */
static json_t *tutorial_file(void) {
  sk_graph g;
  sk_parallel_plan p;
  char *text = NULL;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8);
  OK(sk_parallel_compile(&g, &d, &p, E));
  OK(sk_strategy_format(&p, true, true, false, &text, E));
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  cr_assert_not_null(root, "%s", je.text);
  free(text);
  sk_parallel_free(&p);
  sk_graph_free(&g);
  return root;
}

static json_t *entry(json_t *root, const char *list, const char *name) {
  json_t *l = json_object_get(root, list), *v;
  size_t i;
  json_array_foreach(l, i, v) if (!strcmp(json_string_value(json_object_get(v, "name")), name)) return v;
  cr_assert_fail("no %s %s", list, name);
  return NULL;
}

static void drop_entry(json_t *root, const char *list, const char *name) {
  json_t *l = json_object_get(root, list), *v;
  size_t i;
  json_array_foreach(l, i, v) if (!strcmp(json_string_value(json_object_get(v, "name")), name)) {
    json_array_remove(l, i);
    return;
  }
  cr_assert_fail("no %s %s", list, name);
}

static json_t *ints2(long long a, long long b) { return json_pack("[II]", (json_int_t)a, (json_int_t)b); }

/* Compiling the tutorial from the edited file (written canonically) must fail with `word`, leave
   the graph's strategies and the plan untouched, and name line `line_of` of the text when it is
   given: the line holding that text. */
static void refused(json_t *root, const char *word, const char *line_of) {
  tmpdir t;
  char path[128], *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  tmp_make(&t);
  write_text(tmp_path(&t, "bad.json", path, sizeof path), text);
  sk_graph g, ref;
  load(TUTORIAL, &g);
  load(TUTORIAL, &ref);
  sk_autoparallel d = pdesc(8);
  d.load_operator_strategy_file = d.load_param_strategy_file = path;
  sk_parallel_plan p;
  memset(&p, 0xab, sizeof p);
  BAD(word, sk_parallel_compile(&g, &d, &p, E));
  cr_assert(p.ops == NULL && p.tensors == NULL && p.steps == NULL, "the plan is empty");
  for (int o = 0; o < g.nops; o++) same_desc(&g.ops[o].desc, &ref.ops[o].desc, g.ops[o].name, false);
  if (line_of) {
    const char *at = strstr(text, line_of);
    cr_assert_not_null(at, "%s", line_of);
    int line = 1;
    for (const char *c = text; c < at; c++) line += *c == '\n';
    char want[32];
    snprintf(want, sizeof want, "bad.json: line %d: ", line);
    sk_error e;
    cr_assert_eq(sk_parallel_compile(&g, &d, &p, &e), SK_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, want) == e.msg, "'%s' does not start with '%s'", e.msg, want);
  }
  free(text);
  sk_graph_free(&g), sk_graph_free(&ref);
  tmp_clean(&t);
}

/* Compiling the tutorial from the file (written canonically) succeeds. */
static void loads(json_t *root) {
  tmpdir t;
  char path[128], *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  tmp_make(&t);
  write_text(tmp_path(&t, "good.json", path, sizeof path), text);
  sk_graph g;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8);
  d.load_operator_strategy_file = d.load_param_strategy_file = path;
  sk_parallel_plan p;
  OK(sk_parallel_compile(&g, &d, &p, E));
  sk_parallel_free(&p);
  sk_graph_free(&g);
  free(text);
  tmp_clean(&t);
}

Test(strategy, the_unedited_file_loads) {
  json_t *root = tutorial_file();
  loads(root);
  json_decref(root);
}

Test(strategy, empty_and_invalid_files) {
  tmpdir t;
  char path[128];
  tmp_make(&t);
  sk_graph g;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8);
  sk_parallel_plan p;
  d.load_operator_strategy_file = tmp_path(&t, "s.json", path, sizeof path);
  write_text(path, "");
  BAD("s.json: the file is empty", sk_parallel_compile(&g, &d, &p, E));
  write_text(path, " \n\t\n");
  BAD("s.json: the file is empty", sk_parallel_compile(&g, &d, &p, E));
  write_text(path, "{\n  \"format\": \"shardkit-strategy\",\n  \"version\": 1,\n}\n");
  BAD("s.json: line 4, column", sk_parallel_compile(&g, &d, &p, E));
  write_text(path, "[]");
  BAD("expected the strategy object, got a list", sk_parallel_compile(&g, &d, &p, E));
  write_text(path, "{\"format\": \"shardkit-network\", \"version\": 1, \"device_num\": 8}");
  BAD("line 1: format: expected \"shardkit-strategy\"", sk_parallel_compile(&g, &d, &p, E));
  write_text(path, "{\"format\": \"shardkit-strategy\", \"version\": 4, \"device_num\": 8}");
  BAD("line 1: version: expected 1..3, the versions this reader knows, got 4", sk_parallel_compile(&g, &d, &p, E));
  /* an unknown top-level key: the line of that key */
  write_text(path, "{\"format\": \"shardkit-strategy\",\n\"version\": 1,\n\"devices\": 8}");
  BAD("s.json: line 3: devices: unknown key", sk_parallel_compile(&g, &d, &p, E));
  write_text(path, "{\"format\": \"shardkit-strategy\", \"version\": 1, \"device_num\": 8}");
  BAD("dataset_strategy: expected \"data_parallel\", \"full_batch\" or a list", sk_parallel_compile(&g, &d, &p, E));
  write_text(path, "{\"format\": \"shardkit-strategy\", \"version\": 1, \"device_num\": 8, \"dataset_strategy\": \"data_parallel\"}");
  BAD("operators: missing: the file holds no operator strategies", sk_parallel_compile(&g, &d, &p, E));
  d.load_operator_strategy_file = NULL, d.load_param_strategy_file = path;
  BAD("parameters: missing: the file holds no parameter layouts", sk_parallel_compile(&g, &d, &p, E));
  sk_graph_free(&g);
  tmp_clean(&t);
}

Test(strategy, another_device_count) {
  json_t *root = tutorial_file();
  json_object_set_new(root, "device_num", json_integer(4));
  refused(root, "device_num: the file is for 4 devices, the plan has 8", "\"device_num\"");
  json_object_set_new(root, "device_num", json_string("8"));
  refused(root, "device_num: expected an integer, got a string", NULL);
  json_decref(root);
}

Test(strategy, operators_the_network_lacks_or_the_file_lacks) {
  json_t *root = tutorial_file();
  json_object_set_new(entry(root, "operators", "fc3"), "name", json_string("fc9"));
  refused(root, "operators[5] (\"fc9\"): operator \"fc9\" is not in the network", "\"name\": \"fc9\"");
  json_decref(root);
  root = tutorial_file();
  drop_entry(root, "operators", "relu2");
  refused(root, "operators: the network's operator \"relu2\" (ReLU) is not in the file", "\"operators\"");
  json_decref(root);
  root = tutorial_file();
  json_array_append(json_object_get(root, "operators"), entry(root, "operators", "fc1"));
  refused(root, "operators[7] (\"fc1\"): a second entry for operator \"fc1\"", NULL);
  json_decref(root);
}

Test(strategy, another_operator_type_or_strategy) {
  json_t *root = tutorial_file();
  json_object_set_new(entry(root, "operators", "fc2"), "type", json_string("BatchMatMul"));
  refused(root, "operators[3] (\"fc2\").type: a BatchMatMul in the file, a MatMul in the network", "\"name\": \"fc2\"");
  json_object_set_new(entry(root, "operators", "fc2"), "type", json_string("Convolution"));
  refused(root, "unknown operator type \"Convolution\"", NULL);
  json_object_set_new(entry(root, "operators", "fc2"), "type", json_string("MatMul"));
  json_object_set_new(entry(root, "operators", "fc2"), "strategy", json_string("dp"));
  refused(root, "operators[3] (\"fc2\").strategy: expected null or a list of at most", NULL);
  json_object_set_new(entry(root, "operators", "fc2"), "strategy", json_pack("[[ii],[i]]", 1, 8, 8));
  refused(root, "fc2", NULL); /* kept as written: the compiler refuses it, naming the operator */
  json_object_del(entry(root, "operators", "fc2"), "strategy");
  refused(root, "operators[3] (\"fc2\").strategy: missing (null: no strategy)", NULL);
  json_object_set_new(entry(root, "operators", "fc2"), "strategy", json_null());
  json_object_set_new(entry(root, "operators", "fc2"), "shard", json_null());
  refused(root, "operators[3] (\"fc2\").shard: unknown key", NULL);
  json_object_del(entry(root, "operators", "fc2"), "shard");
  json_object_set_new(entry(root, "operators", "fc2"), "layouts", json_pack("{ss s[ss]}", "mesh", "dp=8", "inputs", "dp,None", "x"));
  refused(root, "operators[3] (\"fc2\").layouts.inputs[1]:", NULL);
  /* the same wording as a network file's "shard" and "layouts" (sk_json_read.h reads both) */
  json_object_set_new(entry(root, "operators", "fc2"), "layouts", json_pack("{ss s[s]}", "mesh", "dp=8", "inputs", "dp,None"));
  refused(root, "operators[3] (\"fc2\").layouts.inputs: expected a list of 2 layout texts, one per input", NULL);
  json_object_del(entry(root, "operators", "fc2"), "layouts");
  json_object_set_new(entry(root, "operators", "fc2"), "strategy", json_pack("[]"));
  refused(root, "operators[3] (\"fc2\").strategy: an empty strategy for an operator of 2 tuples cannot be stored "
          "(null is the default)", "\"name\": \"fc2\"");
  json_object_set_new(entry(root, "operators", "fc2"), "strategy", json_pack("[[ii],[]]", 1, 8));
  refused(root, "operators[3] (\"fc2\").strategy[1]: an empty tuple for a rank-2 input cannot be stored", NULL);
  json_decref(root);
}

/* MindSpore's spellings name the network's operators too: Activation a ReLU (a strategy file has
   no activation_type: the name stands for every kind one can pick). */
Test(strategy, mindspore_spellings_of_a_type) {
  json_t *root = tutorial_file();
  json_object_set_new(entry(root, "operators", "relu2"), "type", json_string("Activation"));
  loads(root);
  json_object_set_new(entry(root, "operators", "fc2"), "type", json_string("Activation"));
  refused(root, "operators[3] (\"fc2\").type: a Activation in the file, a MatMul in the network", NULL);
  json_decref(root);
}

Test(strategy, parameters_the_network_lacks_or_the_file_lacks) {
  json_t *root = tutorial_file();
  json_object_set_new(entry(root, "parameters", "fc2.weight"), "name", json_string("fc9.weight"));
  refused(root, "parameters[1] (\"fc9.weight\"): parameter \"fc9.weight\" is not in the network", "\"name\": \"fc9.weight\"");
  json_object_set_new(entry(root, "parameters", "fc9.weight"), "name", json_string("image"));
  refused(root, "parameter \"image\" is not in the network", NULL);
  json_decref(root);
  root = tutorial_file();
  drop_entry(root, "parameters", "fc3.weight");
  refused(root, "parameters: the network's parameter \"fc3.weight\" is not in the file", "\"parameters\"");
  json_decref(root);
}

Test(strategy, another_parameter_shape_or_layout) {
  json_t *root = tutorial_file();
  json_t *w = entry(root, "parameters", "fc2.weight");
  json_object_set_new(w, "shape", ints2(512, 256));
  refused(root, "parameters[1] (\"fc2.weight\").shape: [512,256] in the file, [512,512] in the network",
          "\"name\": \"fc2.weight\"");
  json_object_set_new(w, "shape", ints2(512, 512));
  /* fc2's [[1, 8], [8, 1]] cuts the weight's rows 8 ways; the file claims its columns */
  json_object_set_new(w, "tensor_map", ints2(0, 1));
  json_object_set_new(w, "slice_shape", ints2(512, 64));
  refused(root, "parameters[1] (\"fc2.weight\"): laid out otherwise after compiling: the file's device matrix "
          "[1,8,1], tensor map (0,1), slice [512,64]; the plan's device matrix [1,8,1], tensor map (1,0), slice [64,512]",
          "\"name\": \"fc2.weight\"");
  json_object_set_new(w, "slice_shape", ints2(64, 512));
  refused(root, "slice_shape: [64,512] is not the layout's [512,64]", NULL);
  json_object_set_new(w, "tensor_map", ints2(-1, 3));
  refused(root, "tensor_map: tensor_map value 3 in dim 1 is out of range", NULL);
  json_object_set_new(w, "tensor_map", json_pack("[i]", 0));
  refused(root, "tensor_map: expected a list of 2 entries, one per dim", NULL);
  json_object_set_new(w, "tensor_map", json_pack("[[],i]", -1));
  refused(root, "tensor_map[0]: expected -1, a mesh axis", NULL);
  json_object_set_new(w, "tensor_map", ints2(1, 0));
  json_object_set_new(w, "device_matrix", ints2(2, 2));
  refused(root, "device_matrix: expected dims whose product is the 8 devices", NULL);
  json_decref(root);
}

/* Found by tests/fuzz/fuzz_strategy.c: eight device-matrix dims of 4096 each passed the per-dim
   check, and their product (2^96) overflowed long long (UBSan under make sanitize). */
Test(strategy, fuzzed_device_matrix_product_overflow) {
  json_t *root = tutorial_file();
  json_t *w = entry(root, "parameters", "fc2.weight");
  json_object_set_new(w, "device_matrix", json_pack("[IIIIIIII]", (json_int_t)4096, (json_int_t)4096, (json_int_t)4096,
                                                    (json_int_t)4096, (json_int_t)4096, (json_int_t)4096,
                                                    (json_int_t)4096, (json_int_t)4096));
  refused(root, "device_matrix: expected dims whose product is the 8 devices", "\"name\": \"fc2.weight\"");
  json_decref(root);
}

/* A layout written otherwise but giving every device the same slice passes. */
Test(strategy, an_equivalent_layout_passes) {
  json_t *root = tutorial_file();
  json_t *w = entry(root, "parameters", "fc2.weight");
  json_object_set_new(w, "device_matrix", ints2(2, 4));
  json_object_set_new(w, "tensor_map", json_pack("[[ii],i]", 1, 0, -1));
  tmpdir t;
  char path[128], *text = json_dumps(root, JSON_INDENT(2));
  tmp_make(&t);
  write_text(tmp_path(&t, "eq.json", path, sizeof path), text);
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8);
  d.load_param_strategy_file = path;
  OK(sk_parallel_compile(&g, &d, &p, E));
  sk_parallel_free(&p);
  sk_graph_free(&g);
  free(text);
  json_decref(root);
  tmp_clean(&t);
}

/* Several mismatches: the first in the file is named. */
Test(strategy, the_first_mismatch_is_named) {
  json_t *root = tutorial_file();
  json_object_set_new(entry(root, "operators", "fc1"), "name", json_string("fcX"));
  drop_entry(root, "operators", "fc3");
  json_object_set_new(entry(root, "parameters", "fc2.weight"), "shape", ints2(1, 1));
  refused(root, "operator \"fcX\" is not in the network", "\"name\": \"fcX\"");
  json_object_set_new(entry(root, "operators", "fcX"), "name", json_string("fc1"));
  refused(root, "the network's operator \"fc3\" (MatMul) is not in the file", NULL);
  json_decref(root);
  root = tutorial_file();
  json_object_set_new(root, "dataset_strategy", json_pack("[[i]]", 8));
  json_object_set_new(entry(root, "operators", "fc1"), "name", json_string("fcX"));
  refused(root, "dataset_strategy: 1 entries for the network's 2 inputs", "\"dataset_strategy\"");
  json_decref(root);
}

Test(strategy, dataset_strategies_of_the_file) {
  json_t *root = tutorial_file();
  json_object_set_new(root, "dataset_strategy", json_string("model_parallel"));
  refused(root, "dataset_strategy: expected \"data_parallel\", \"full_batch\" or a list", NULL);
  json_object_set_new(root, "dataset_strategy", json_pack("[[iiii],{ss ss}]", 2, 1, 1, 1, "mesh", "dp=8", "map", "dp"));
  refused(root, "dataset_strategy[1]: expected a list of at most 8 integers, got an object", NULL);
  json_object_set_new(root, "dataset_strategy", json_pack("[[],[i]]", 2)); /* not "the input's rank" */
  refused(root, "dataset_strategy[0]: an empty tuple for a rank-4 input", NULL);
  json_object_set_new(root, "dataset_strategy", json_pack("[{ss ss},{ss ss}]", "mesh", "dp=8", "map", "dp,None,None,None",
                                                          "mesh", "dp=8", "map", "dp,dp"));
  refused(root, "dataset_strategy[1].map:", NULL);
  json_decref(root);
}

/* ---- files and memory ------------------------------------------------------------------------ */

Test(strategy, files_that_cannot_be_read_or_written) {
  sk_graph g, ref;
  sk_parallel_plan p;
  tmpdir t;
  char dir_as_file[128];
  tmp_make(&t);
  load(TUTORIAL, &g);
  load(TUTORIAL, &ref);
  sk_autoparallel d = pdesc(8);
  d.save_param_strategy_file = "/nonexistent-dir/s.json";
  FAILS(SK_ERR_SYSTEM, "strategy: cannot create '/nonexistent-dir/s.json'", sk_parallel_compile(&g, &d, &p, E));
  cr_assert_null(p.ops, "a failed save leaves no plan");
  d.save_param_strategy_file = NULL, d.save_operator_strategy_file = t.dir; /* a directory */
  FAILS(SK_ERR_SYSTEM, "cannot create", sk_parallel_compile(&g, &d, &p, E));
  if (access("/dev/full", W_OK) == 0) {
    d.save_operator_strategy_file = "/dev/full";
    FAILS(SK_ERR_SYSTEM, "strategy: cannot write '/dev/full'", sk_parallel_compile(&g, &d, &p, E));
  }
  d.save_operator_strategy_file = NULL, d.load_operator_strategy_file = tmp_path(&t, "missing.json", dir_as_file, sizeof dir_as_file);
  FAILS(SK_ERR_SYSTEM, "missing.json: cannot open: No such file", sk_parallel_compile(&g, &d, &p, E));
  d.load_operator_strategy_file = NULL, d.load_param_strategy_file = t.dir; /* never read (sk_core.h's TEXT FILES) */
  FAILS(SK_ERR_INVALID_ARGUMENT, "not a regular file (a directory)", sk_parallel_compile(&g, &d, &p, E));
  for (int o = 0; o < g.nops; o++) same_desc(&g.ops[o].desc, &ref.ops[o].desc, g.ops[o].name, false);
  sk_graph_free(&g), sk_graph_free(&ref);
  tmp_clean(&t);
}

Test(strategy, bad_arguments) {
  sk_graph g;
  sk_parallel_plan p;
  char *text = (char *)"x";
  load(TUTORIAL, &g);
  sk_autoparallel d = pdesc(8);
  BAD("NULL", sk_parallel_compile(NULL, &d, &p, E));
  BAD("NULL", sk_parallel_compile(&g, NULL, &p, E));
  BAD("NULL", sk_parallel_compile(&g, &d, NULL, E));
  memset(&p, 0, sizeof p);
  BAD("not compiled", sk_strategy_format(&p, true, true, false, &text, E));
  cr_assert_null(text);
  BAD("NULL", sk_strategy_format(NULL, true, true, false, &text, E));
  BAD("NULL", sk_strategy_format(&p, true, true, false, NULL, E));
  BAD("NULL", sk_strategy_save(&p, NULL, true, true, false, E));
  BAD("NULL", sk_strategy_load_operators(NULL, &g, &d, E));
  BAD("NULL", sk_strategy_check_params("x", NULL, false, E));
  BAD("not compiled", sk_strategy_check_params("x", &p, false, E));
  d.allocator.free = oom_alloc_give; /* one function of two */
  BAD("the allocator needs both alloc and free", sk_parallel_compile(&g, &d, &p, E));
  BAD("set both alloc and free", sk_strategy_load_operators("x", &g, &d, E));
  memset(&d.allocator, 0, sizeof d.allocator);
  d.ndevices = 0;
  BAD("devices", sk_parallel_compile(&g, &d, &p, E)); /* the compiler's own refusal */
  d.ndevices = 8, d.mode = SK_PARALLEL_SHARDING_PROPAGATION; /* built now: tests/test_search.c */
  OK(sk_parallel_compile(&g, &d, &p, E));
  p.desc.allocator.alloc = oom_alloc_take; /* a plan whose allocator lost a function */
  BAD("set both alloc and free", sk_strategy_format(&p, true, true, false, &text, E));
  BAD("set both alloc and free", sk_strategy_check_params("x", &p, false, E));
  p.desc.allocator.alloc = NULL;
  sk_parallel_free(&p);
  d.mode = SK_PARALLEL_SEMI_AUTO, d.save_param_strategy_file = "x.json", d.strategy_io = NULL;
  BAD("parallel: save_param_strategy_file needs the strategy-file reader: set strategy_io = sk_strategy_io() (sk_strategy.h)",
      sk_parallel_compile(&g, &d, &p, E));
  sk_graph_free(&g);
}

/* jansson's allocator failing at its k-th call, for every k the call makes: each failure is
   SK_ERR_OUT_OF_MEMORY (nothing leaks: ASan's build runs this too). */
static long oom_left;
static void *oom_malloc(size_t n) { return oom_left-- > 0 ? malloc(n) : NULL; }

static int oom_sweep(sk_result (*call)(void *, sk_error *), void *arg, bool jansson_syntax) {
  for (long k = 0;; k++) {
    sk_error e = {SK_OK, ""};
    oom_left = k;
    json_set_alloc_funcs(oom_malloc, free);
    sk_result r = call(arg, &e);
    json_set_alloc_funcs(malloc, free);
    if (r == SK_OK) return (int)k;
    /* jansson's lexer reports some of its allocation failures as a syntax error (with the line
       and column it reached): those are all a reader can tell */
    if (r == SK_ERR_INVALID_ARGUMENT && jansson_syntax && strstr(e.msg, ", column ")) continue;
    cr_assert_eq(r, SK_ERR_OUT_OF_MEMORY, "allocation %ld failing gave %s (%s)", k, sk_result_name(r), e.msg);
    cr_assert_lt(k, 100000);
  }
}

typedef struct oom_case {
  const sk_parallel_plan *plan;
  sk_graph *g;
  const char *path;
} oom_case;

static sk_result oom_format(void *arg, sk_error *e) {
  const oom_case *c = (const oom_case *)arg;
  char *text = NULL;
  sk_result r = sk_strategy_format(c->plan, true, true, true, &text, e);
  free(text);
  return r;
}

static sk_result oom_load(void *arg, sk_error *e) {
  const oom_case *c = (const oom_case *)arg;
  sk_autoparallel d = pdesc(8);
  sk_result r = sk_strategy_load_operators(c->path, c->g, &d, e);
  return r ? r : sk_strategy_check_params(c->path, c->plan, false, e);
}

/* The tutorial network compiled for 8 devices into *p, its strategies saved to path (in t). */
static void save_tutorial(tmpdir *t, sk_graph *g, sk_parallel_plan *p, char *path, size_t cap) {
  tmp_make(t);
  load(TUTORIAL, g);
  sk_autoparallel d = pdesc(8);
  tutorial_dataset(&d);
  d.save_param_strategy_file = d.save_operator_strategy_file = tmp_path(t, "s.json", path, cap);
  OK(sk_parallel_compile(g, &d, p, E));
}

Test(strategy, out_of_memory_in_jansson, .timeout = 60) {
  sk_graph g;
  sk_parallel_plan p;
  tmpdir t;
  char path[128];
  save_tutorial(&t, &g, &p, path, sizeof path);
  oom_case c = {&p, &g, path};
  cr_assert_gt(oom_sweep(oom_format, &c, false), 10);
  cr_assert_gt(oom_sweep(oom_load, &c, true), 10);
  sk_parallel_free(&p);
  sk_graph_free(&g);
  tmp_clean(&t);
}

/* One compile that loads both sections of `path` and saves them to `again`, its
   scratch and file texts from the configuration's allocator o (armed by the caller). */
static sk_result oom_compile(sk_graph *h, const char *path, const char *again, oom_alloc *o, sk_parallel_plan *p,
                             sk_error *e) {
  sk_autoparallel l = pdesc(8);
  l.load_param_strategy_file = l.load_operator_strategy_file = path;
  l.save_param_strategy_file = l.save_operator_strategy_file = again;
  l.allocator = oom_alloc_hook(o);
  return sk_parallel_compile(h, &l, p, e);
}

/* The configuration's allocator failing at its k-th call, once and from there on, for every k
   a load-check-save compile makes: each failure is SK_ERR_OUT_OF_MEMORY, every block taken is
   given back, and the graph keeps its own strategies and stages; with none failing the file
   saved again is the first, byte for byte. */
Test(strategy, out_of_memory_in_the_allocator, .timeout = 60) {
  sk_graph g, h;
  sk_parallel_plan p;
  tmpdir t;
  char path[128], again[128];
  save_tutorial(&t, &g, &p, path, sizeof path);
  sk_parallel_free(&p);
  load(TUTORIAL, &h);
  sk_op_desc *before = (sk_op_desc *)calloc((size_t)h.nops, sizeof *before);
  int *stages = (int *)calloc((size_t)h.nops, sizeof *stages);
  cr_assert(before && stages);
  for (int o = 0; o < h.nops; o++) before[o] = h.ops[o].desc, stages[o] = h.ops[o].stage;
  oom_alloc o;
  oom_alloc_arm(&o, 0, false);
  tmp_path(&t, "again.json", again, sizeof again);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(oom_compile(&h, path, again, &o, &p, &e), SK_OK, "%s", e.msg);
  sk_parallel_free(&p);
  long n = o.calls;
  cr_assert_gt(n, 5, "the compile took %ld blocks from the configuration's allocator", n);
  cr_assert_eq(o.live, 0, "%ld blocks never given back", o.live);
  char *first = read_text(path), *second = read_text(again);
  cr_assert_str_eq(first, second, "saved through the user's allocator, the file differs");
  free(first), free(second);
  for (int persistent = 0; persistent < 2; persistent++)
    for (long k = 1; k <= n; k++) {
      sk_graph_free(&h), load(TUTORIAL, &h);
      oom_alloc_arm(&o, k, persistent);
      sk_result r = oom_compile(&h, path, again, &o, &p, &e);
      cr_assert_eq(r, SK_ERR_OUT_OF_MEMORY, "allocation %ld failing (%s) gave %s (%s)", k,
                   persistent ? "from there on" : "once", sk_result_name(r), e.msg);
      cr_assert_gt(o.failed, 0);
      cr_assert_eq(o.live, 0, "allocation %ld failing: %ld blocks never given back", k, o.live);
      cr_assert_null(p.ops, "allocation %ld failing: the plan is not empty", k);
      for (int x = 0; x < h.nops; x++) {
        same_desc(&before[x], &h.ops[x].desc, h.ops[x].name, false);
        cr_assert_eq(h.ops[x].stage, stages[x], "%s: stage", h.ops[x].name);
      }
    }
  free(before), free(stages);
  sk_graph_free(&g), sk_graph_free(&h);
  tmp_clean(&t);
}
