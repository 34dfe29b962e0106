/* sk_strategy.h: a strategy file holds what reproduces the plan. Saving a plan and compiling the
   network again from the file gives every device the same program (sk_parallel_format_program,
   what sk-sim --dump-program prints) under semi_auto, a pipeline (the file's stage count and cut,
   with one chunk per stage and interleaved), hsdp (each level, a shard size), a search mode and
   operator layouts; the re-saved file is byte for byte the first. A version 1 file still loads.
   The file's stages and hsdp win where the configuration sets none; a configuration that
   contradicts them is refused by name, and so is every bad value of the new keys. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardkit.h"
#include "sk_json.h"
#include "sk_strategy.h" /* its implementation is in tests/test_strategy.c, sk_json.h's in tests/test_json.c */

#define OK(call)                                                               \
  do {                                                                         \
    sk_error e_;                                                               \
    memset(&e_, 0, sizeof e_);                                                 \
    sk_result r_ = (call);                                                     \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg); \
  } while (0)
/* A call refused with SK_ERR_INVALID_ARGUMENT and a message holding `word`. */
#define BAD(word, call)                                                                                   \
  do {                                                                                                    \
    sk_error e_;                                                                                          \
    memset(&e_, 0, sizeof e_);                                                                            \
    sk_result r_ = (call);                                                                                \
    cr_assert_eq(r_, SK_ERR_INVALID_ARGUMENT, "%s returned %s (%s)", #call, sk_result_name(r_), e_.msg); \
    cr_assert(strstr(e_.msg, word) != NULL, "%s: message '%s' does not hold '%s'", #call, e_.msg, word); \
  } while (0)
#define E (&e_)

#define TUTORIAL "examples/nets/operator_parallel.json"
#define RECURSIVE "examples/nets/recursive_programming.json"

/* ---- helpers ------------------------------------------------------------------------------ */

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

/* A pipeline of `stages` stages and `micro` micro-batches on n devices. */
static sk_autoparallel piped(int n, int stages, int micro) {
  sk_autoparallel d = pdesc(n);
  d.pipeline.stages = stages, d.pipeline.micro = micro;
  return d;
}

/* A directory of this test's own (the suites run in parallel processes) and its files. */
typedef struct tmpdir {
  char dir[64], a[96], b[96];
} tmpdir;

static void tmp_make(tmpdir *t) {
  snprintf(t->dir, sizeof t->dir, "/tmp/sk_strategy_rt_XXXXXX");
  cr_assert_not_null(mkdtemp(t->dir));
  snprintf(t->a, sizeof t->a, "%s/a.json", t->dir);
  snprintf(t->b, sizeof t->b, "%s/b.json", t->dir);
}

static void tmp_clean(const tmpdir *t) {
  unlink(t->a), unlink(t->b);
  rmdir(t->dir);
}

#include "text_file_util.h"

static char *program(const sk_parallel_plan *p, int rank) {
  size_t n = sk_parallel_format_program(p, rank, NULL, 0) + 1;
  char *text = malloc(n);
  cr_assert_not_null(text);
  sk_parallel_format_program(p, rank, text, n);
  return text;
}

/* Every device's program the same, step by step as sk-sim --dump-program prints it. */
static void same_programs(const sk_parallel_plan *a, const sk_parallel_plan *b) {
  cr_assert_eq(a->world_devices, b->world_devices);
  cr_assert_eq(a->stages, b->stages);
  cr_assert_eq(a->nsteps, b->nsteps);
  for (int r = 0; r < a->world_devices; r++) {
    char *x = program(a, r), *y = program(b, r);
    cr_assert_str_eq(x, y, "device %d's program differs", r);
    free(x), free(y);
  }
  for (int t = 0; t < a->graph->ntensors; t++)
    cr_assert(a->tensors[t].opt_size == b->tensors[t].opt_size && a->tensors[t].opt_mirror == b->tensors[t].opt_mirror,
              "%s: optimizer shard", a->graph->tensors[t].name);
}

/* Removes every `what` from text. */
static void drop_all(char *text, const char *what) {
  size_t n = strlen(what);
  for (char *at; (at = strstr(text, what)) != NULL;) memmove(at, at + n, strlen(at + n) + 1);
}

static int count(const char *text, const char *what) {
  int n = 0;
  for (const char *at = text; (at = strstr(at, what)) != NULL; at++) n++;
  return n;
}

/* `net` compiled under d (g: that network, maybe edited) saving one file; then a fresh `net`
   compiled under l loading it and saving again: the same programs, the same bytes. The first
   plan is left in *first (the caller frees it). */
static void round_trip_into(sk_graph *g, const char *net, const sk_autoparallel *d, const sk_autoparallel *l,
                            sk_parallel_plan *first) {
  tmpdir t;
  tmp_make(&t);
  sk_autoparallel s = *d, r = *l;
  s.save_param_strategy_file = s.save_operator_strategy_file = t.a;
  r.load_param_strategy_file = r.load_operator_strategy_file = t.a;
  r.save_param_strategy_file = r.save_operator_strategy_file = t.b;
  sk_parallel_plan b;
  sk_graph h;
  OK(sk_parallel_compile(g, &s, first, E));
  load(net, &h);
  OK(sk_parallel_compile(&h, &r, &b, E));
  same_programs(first, &b);
  char *x = read_text(t.a), *y = read_text(t.b);
  /* a fallback is saved as the data parallel strategy it got, which fits: it falls back no more */
  drop_all(x, ",\n      \"fell_back\": true");
  cr_assert_str_eq(x, y, "the re-saved file differs from the first");
  cr_assert_eq(count(x, "\"strategy\": null"), count(x, "\"layouts\""),
               "only operators planned from layouts have no strategy; a default is written as the one it got:\n%s", x);
  free(x), free(y);
  sk_parallel_free(&b);
  sk_graph_free(&h);
  tmp_clean(&t);
}

static void round_trip(const char *net, const sk_autoparallel *d, const sk_autoparallel *l) {
  sk_graph g;
  sk_parallel_plan a;
  load(net, &g);
  round_trip_into(&g, net, d, l, &a);
  sk_parallel_free(&a);
  sk_graph_free(&g);
}

/* ---- round trips ---------------------------------------------------------------------------- */

Test(strategy_roundtrip, semi_auto) {
  sk_autoparallel d = pdesc(8);
  round_trip(TUTORIAL, &d, &d);
  round_trip(RECURSIVE, &d, &d);
}

/* The reported case: --pipeline 2 --micro 4 saved, then loaded with the same flags; and loaded
   with --micro 4 alone, the file's 2 stages taken. */
Test(strategy_roundtrip, pipeline_two_stages_four_micro_batches) {
  sk_autoparallel d = piped(8, 2, 4), l = piped(8, 0, 4);
  round_trip(TUTORIAL, &d, &d);
  round_trip(TUTORIAL, &d, &l);
  d.pipeline.scheduler = SK_PIPE_GPIPE, l.pipeline.scheduler = SK_PIPE_GPIPE;
  round_trip(RECURSIVE, &d, &l);
}

/* The network's own stage annotations (each stage one chunk) are the plan's cut; the file's
   stages replace the annotations of a network that has none, or others. */
Test(strategy_roundtrip, pipeline_stages_replace_the_network_annotations) {
  sk_graph g, h;
  sk_parallel_plan a;
  tmpdir t;
  tmp_make(&t);
  load(TUTORIAL, &g);
  for (int o = 0; o < g.nops; o++) g.ops[o].stage = o >= 1 ? 1 : 0; /* only flatten on stage 0 */
  sk_autoparallel d = piped(8, 2, 4), l = piped(8, 2, 4);
  d.save_operator_strategy_file = d.save_param_strategy_file = t.a;
  OK(sk_parallel_compile(&g, &d, &a, E));
  cr_assert(!a.recut && a.vstage[0] == 0 && a.vstage[1] == 1);
  load(TUTORIAL, &h);
  for (int o = 0; o < h.nops; o++) h.ops[o].stage = o == h.nops - 1 ? 1 : 0; /* another cut */
  sk_graph_op *before = (sk_graph_op *)malloc((size_t)h.nops * sizeof *before);
  cr_assert_not_null(before);
  memcpy(before, h.ops, (size_t)h.nops * sizeof *before);
  sk_parallel_plan b;
  l.load_operator_strategy_file = l.load_param_strategy_file = t.a;
  OK(sk_parallel_compile(&h, &l, &b, E));
  cr_assert(!memcmp(before, h.ops, (size_t)h.nops * sizeof *before), "the caller's operators changed");
  free(before);
  same_programs(&a, &b);
  for (int o = 0; o < h.nops; o++) {
    cr_assert_eq(b.graph->ops[o].stage, g.ops[o].stage, "%s: the file's stage", h.ops[o].name);
    cr_assert_eq(h.ops[o].stage, o == h.nops - 1 ? 1 : 0, "%s: the caller's network keeps its stage", h.ops[o].name);
  }
  sk_parallel_free(&a), sk_parallel_free(&b);
  sk_graph_free(&g), sk_graph_free(&h);
  tmp_clean(&t);
}

/* Two chunks per stage: the compiler cuts by FLOPs (annotations are for one chunk per stage), and
   the cut must put every operator on the stage the file says. */
Test(strategy_roundtrip, interleaved_pipeline) {
  sk_autoparallel d = piped(8, 2, 4);
  d.pipeline.interleave = 2;
  round_trip(TUTORIAL, &d, &d);
  d.pipeline.interleave = 0, d.pipeline.scheduler = SK_PIPE_ZERO_BUBBLE_V;
  round_trip(TUTORIAL, &d, &d);
}

/* hsdp at each level and with a shard size, alone and under a pipeline; loaded without hsdp
   set, the file's is taken. */
Test(strategy_roundtrip, hsdp_levels_and_shard_size) {
  static const sk_hsdp_level levels[] = {SK_HSDP_LEVEL1, SK_HSDP_LEVEL2, SK_HSDP_LEVEL3};
  for (int k = 0; k < 3; k++) {
    sk_autoparallel d = pdesc(8), l = pdesc(8);
    sk_hsdp h = {true, -1, 0, levels[k]};
    d.hsdp = h;
    round_trip(TUTORIAL, &d, &l);
    d.hsdp.shard_size = 2;
    round_trip(TUTORIAL, &d, &l);
    d = piped(8, 2, 4), l = piped(8, 2, 4);
    d.hsdp = h;
    round_trip(TUTORIAL, &d, &l);
  }
  /* the file records each parameter's shard */
  sk_graph g;
  sk_parallel_plan a;
  sk_autoparallel d = pdesc(8);
  sk_hsdp h = {true, 2, 0, SK_HSDP_LEVEL2};
  char *text = NULL;
  d.hsdp = h;
  load(TUTORIAL, &g);
  OK(sk_parallel_compile(&g, &d, &a, E));
  OK(sk_strategy_format(&a, true, true, false, &text, E));
  cr_assert(strstr(text, "\"hsdp\": {\n    \"shard_size\": 2,\n    \"threshold\": 0,\n    \"optimizer_level\": \"level2\"\n  }"),
            "%s", text);
  cr_assert(strstr(text, "\"opt_shard\": {\n        \"size\": 2,\n        \"mirror\": 1,\n        \"slice_shape\": ["), "%s", text);
  free(text);
  sk_parallel_free(&a);
  sk_graph_free(&g);
}

/* A search mode's plan (every operator searched) loads as semi_auto or under the same mode:
   the file leaves nothing to search. */
Test(strategy_roundtrip, sharding_propagation, .timeout = 60) {
  sk_autoparallel d = pdesc(8), l = pdesc(8);
  d.mode = SK_PARALLEL_SHARDING_PROPAGATION;
  round_trip(RECURSIVE, &d, &l);
  round_trip(RECURSIVE, &d, &d);
  d = piped(8, 2, 4), l = piped(8, 2, 4);
  d.mode = SK_PARALLEL_SHARDING_PROPAGATION;
  round_trip(RECURSIVE, &d, &l);
}

/* fc3 planned from layouts, the inputs cut by a tuple of layouts. */
Test(strategy_roundtrip, layouts) {
  sk_graph g;
  sk_mesh m, dp;
  sk_parallel_plan a;
  load(TUTORIAL, &g);
  OK(sk_mesh_parse(&m, "dp=2,mp=4", E));
  OK(sk_mesh_parse(&dp, "dp=4", E));
  sk_graph_op *fc3 = &g.ops[g.nops - 2];
  cr_assert_str_eq(fc3->name, "fc3");
  const sk_graph_tensor *x = &g.tensors[fc3->inputs[0]], *w = &g.tensors[fc3->inputs[1]];
  OK(sk_layout_parse(&fc3->desc.layouts[0], &m, "dp,mp", x->ndims, x->shape, E));
  OK(sk_layout_parse(&fc3->desc.layouts[1], &m, "mp,None", w->ndims, w->shape, E));
  fc3->desc.has_layouts = true;
  sk_autoparallel d = pdesc(8), l = pdesc(8);
  const sk_graph_tensor *img = &g.tensors[sk_graph_find(&g, "image")], *lab = &g.tensors[sk_graph_find(&g, "label")];
  d.ndataset_layouts = 2;
  OK(sk_layout_parse(&d.dataset_layouts[0], &m, "dp,None,None,None", img->ndims, img->shape, E));
  OK(sk_layout_parse(&d.dataset_layouts[1], &dp, "dp", lab->ndims, lab->shape, E));
  round_trip_into(&g, TUTORIAL, &d, &l, &a);
  sk_parallel_free(&a);
  d.hsdp.enabled = true, d.hsdp.shard_size = -1, d.hsdp.level = SK_HSDP_LEVEL1;
  round_trip_into(&g, TUTORIAL, &d, &l, &a);
  sk_parallel_free(&a);
  sk_graph_free(&g);
}

/* ---- older files ----------------------------------------------------------------------------- */

/* What today's tree wrote before version 2 for the tutorial on 8 devices: defaults as null, no
   stages, hsdp or opt_shard. */
static const char *const V1_TUTORIAL =
    "{\"format\": \"shardkit-strategy\", \"version\": 1, \"device_num\": 8, \"dataset_strategy\": \"data_parallel\",\n"
    " \"operators\": [\n"
    "  {\"name\": \"flatten\", \"type\": \"Flatten\", \"strategy\": null},\n"
    "  {\"name\": \"fc1\", \"type\": \"MatMul\", \"strategy\": [[2, 4], [4, 1]]},\n"
    "  {\"name\": \"relu1\", \"type\": \"ReLU\", \"strategy\": [[4, 1]]},\n"
    "  {\"name\": \"fc2\", \"type\": \"MatMul\", \"strategy\": [[1, 8], [8, 1]]},\n"
    "  {\"name\": \"relu2\", \"type\": \"ReLU\", \"strategy\": [[8, 1]]},\n"
    "  {\"name\": \"fc3\", \"type\": \"MatMul\", \"strategy\": null},\n"
    "  {\"name\": \"loss\", \"type\": \"SoftmaxCrossEntropy\", \"strategy\": null}],\n"
    " \"parameters\": [\n"
    "  {\"name\": \"fc1.weight\", \"shape\": [784, 512], \"device_matrix\": [2, 4, 1], \"tensor_map\": [1, 0],"
    " \"slice_shape\": [196, 512]},\n"
    "  {\"name\": \"fc2.weight\", \"shape\": [512, 512], \"device_matrix\": [1, 8, 1], \"tensor_map\": [1, 0],"
    " \"slice_shape\": [64, 512]},\n"
    "  {\"name\": \"fc3.weight\", \"shape\": [512, 10], \"device_matrix\": [8, 1, 1], \"tensor_map\": [1, 0],"
    " \"slice_shape\": [512, 10]}]}\n";

Test(strategy_roundtrip, a_version_1_file_still_loads) {
  tmpdir t;
  sk_graph g, h;
  sk_parallel_plan a, b;
  tmp_make(&t);
  write_text(t.a, V1_TUTORIAL);
  load(TUTORIAL, &g);
  load(TUTORIAL, &h);
  sk_autoparallel d = pdesc(8), l = pdesc(8);
  OK(sk_parallel_compile(&g, &d, &a, E));
  l.load_operator_strategy_file = l.load_param_strategy_file = t.a;
  l.save_operator_strategy_file = l.save_param_strategy_file = t.b;
  OK(sk_parallel_compile(&h, &l, &b, E));
  same_programs(&a, &b);
  char *text = read_text(t.b);
  cr_assert(strstr(text, "\"version\": 3") != NULL, "saved again as version 3");
  free(text);
  sk_parallel_free(&b);
  /* version 1 records no hsdp or stages: the configuration's are used, as before */
  l.save_operator_strategy_file = l.save_param_strategy_file = NULL;
  l.hsdp.enabled = true, l.hsdp.shard_size = -1;
  OK(sk_parallel_compile(&h, &l, &b, E));
  cr_assert(b.desc.hsdp.enabled);
  sk_parallel_free(&a), sk_parallel_free(&b);
  sk_graph_free(&g), sk_graph_free(&h);
  tmp_clean(&t);
}

/* ---- the configuration against the file ------------------------------------------------------ */

/* Saves the tutorial under d into t->a. */
static void save_tutorial(const tmpdir *t, sk_autoparallel d) {
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  d.save_operator_strategy_file = d.save_param_strategy_file = t->a;
  OK(sk_parallel_compile(&g, &d, &p, E));
  sk_parallel_free(&p);
  sk_graph_free(&g);
}

/* Loading t->a into the tutorial under l is refused with `word`; the network is left as it was. */
static void refused_by(const tmpdir *t, sk_autoparallel l, const char *word) {
  sk_graph g, ref;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  load(TUTORIAL, &ref);
  for (int o = 0; o < g.nops; o++) g.ops[o].stage = ref.ops[o].stage = o % 2; /* to see them kept */
  l.load_operator_strategy_file = l.load_param_strategy_file = t->a;
  BAD(word, sk_parallel_compile(&g, &l, &p, E));
  cr_assert_null(p.ops, "the plan is empty");
  for (int o = 0; o < g.nops; o++) {
    cr_assert_eq(g.ops[o].stage, ref.ops[o].stage, "%s: stage", g.ops[o].name);
    cr_assert_eq(g.ops[o].desc.has_strategy, ref.ops[o].desc.has_strategy, "%s: strategy", g.ops[o].name);
  }
  sk_graph_free(&g), sk_graph_free(&ref);
}

Test(strategy_roundtrip, a_contradicting_configuration_is_refused_by_name) {
  tmpdir t;
  tmp_make(&t);
  save_tutorial(&t, piped(8, 2, 4));
  refused_by(&t, piped(8, 4, 4), "a.json: line 5: stages: the file's plan has 2 pipeline stages, the configuration asks for 4");
  refused_by(&t, piped(8, 1, 4), "stages: the file's plan has 2 pipeline stages, the configuration asks for 1");
  sk_autoparallel l = piped(8, 2, 4);
  l.hsdp.enabled = true, l.hsdp.shard_size = -1, l.hsdp.threshold_kb = 64;
  refused_by(&t, l, "a.json: line 6: hsdp: the file's plan has no optimizer parallel, the configuration asks for "
                    "hsdp(shard_size=-1, threshold=64, optimizer_level=level1)");
  sk_autoparallel d = pdesc(8);
  d.hsdp.enabled = true, d.hsdp.shard_size = 2, d.hsdp.level = SK_HSDP_LEVEL3;
  save_tutorial(&t, d);
  l = pdesc(8);
  l.hsdp.enabled = true, l.hsdp.shard_size = 4, l.hsdp.level = SK_HSDP_LEVEL3;
  refused_by(&t, l, "hsdp: the file's plan has hsdp(shard_size=2, threshold=0, optimizer_level=level3), the "
                    "configuration asks for hsdp(shard_size=4, threshold=0, optimizer_level=level3)");
  refused_by(&t, piped(8, 2, 4), "stages: the file's plan has 1 pipeline stages, the configuration asks for 2");
  /* the same values pass */
  sk_graph g;
  sk_parallel_plan p;
  load(TUTORIAL, &g);
  l = d, l.load_operator_strategy_file = l.load_param_strategy_file = t.a;
  OK(sk_parallel_compile(&g, &l, &p, E));
  sk_parallel_free(&p);
  sk_graph_free(&g);
  tmp_clean(&t);
}

/* The parameter check alone (the checkpoint's file) against a plan compiled otherwise. */
Test(strategy_roundtrip, a_parameter_file_against_another_plan) {
  tmpdir t;
  sk_graph g;
  sk_parallel_plan p;
  tmp_make(&t);
  save_tutorial(&t, piped(8, 2, 4));
  load(TUTORIAL, &g);
  sk_autoparallel d = piped(8, 2, 4);
  OK(sk_parallel_compile(&g, &d, &p, E));
  OK(sk_strategy_check_params(t.a, &p, false, E));
  sk_parallel_free(&p);
  d.hsdp.enabled = true, d.hsdp.shard_size = -1;
  OK(sk_parallel_compile(&g, &d, &p, E));
  BAD("hsdp: the file's plan has no optimizer parallel, the compiled plan has hsdp(", sk_strategy_check_params(t.a, &p, false, E));
  sk_parallel_free(&p);
  d = piped(8, 4, 4);
  OK(sk_parallel_compile(&g, &d, &p, E));
  BAD("stages: the file's plan has 2 pipeline stages, the compiled plan has 4", sk_strategy_check_params(t.a, &p, false, E));
  sk_parallel_free(&p);
  sk_graph_free(&g);
  tmp_clean(&t);
}

/* ---- bad values of the new keys ------------------------------------------------------------ */

/* The tutorial's file under a 2-stage pipeline with hsdp (threshold 0: every weight sharded), as
   JSON to be edited. */
static json_t *v2_file(void) {
  sk_graph g;
  sk_parallel_plan p;
  char *text = NULL;
  sk_autoparallel d = piped(8, 2, 4);
  d.hsdp.enabled = true, d.hsdp.shard_size = -1;
  load(TUTORIAL, &g);
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

/* The edited file, loaded with --micro 4 only, refused with `word`. */
static void bad_file(json_t *root, const char *word) {
  tmpdir t;
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  tmp_make(&t);
  write_text(t.a, text);
  free(text);
  refused_by(&t, piped(8, 0, 4), word);
  tmp_clean(&t);
}

Test(strategy_roundtrip, the_unedited_file_loads) {
  json_t *root = v2_file();
  tmpdir t;
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  sk_graph g;
  sk_parallel_plan p;
  sk_autoparallel l = piped(8, 0, 4);
  tmp_make(&t);
  write_text(t.a, text);
  load(TUTORIAL, &g);
  l.load_operator_strategy_file = l.load_param_strategy_file = t.a;
  OK(sk_parallel_compile(&g, &l, &p, E));
  cr_assert(p.stages == 2 && p.desc.hsdp.enabled && p.desc.hsdp.threshold_kb == 0);
  sk_parallel_free(&p);
  sk_graph_free(&g);
  free(text);
  json_decref(root);
  tmp_clean(&t);
}

Test(strategy_roundtrip, bad_stages) {
  json_t *root = v2_file();
  json_object_set_new(root, "stages", json_string("2"));
  bad_file(root, "line 5: stages: expected an integer in 1..512, got a string");
  json_object_set_new(root, "stages", json_integer(0));
  bad_file(root, "stages: expected an integer in 1..512, got one outside");
  json_object_set_new(root, "stages", json_integer(513));
  bad_file(root, "stages: expected an integer in 1..512");
  json_object_set_new(root, "stages", json_integer(3));
  bad_file(root, "stages: 3 stages do not divide the 8 devices");
  json_object_del(root, "stages");
  bad_file(root, "stages: expected an integer in 1..512, got nothing (the key is missing)");
  json_decref(root);
}

Test(strategy_roundtrip, bad_operator_stage) {
  json_t *root = v2_file();
  json_t *fc2 = entry(root, "operators", "fc2");
  json_object_set_new(fc2, "stage", json_integer(2));
  bad_file(root, "operators[3] (\"fc2\").stage: expected an integer in 0..1, got one outside");
  json_object_set_new(fc2, "stage", json_integer(-1));
  bad_file(root, "operators[3] (\"fc2\").stage: expected an integer in 0..1");
  json_object_set_new(fc2, "stage", json_true());
  bad_file(root, "operators[3] (\"fc2\").stage: expected an integer in 0..1, got a boolean");
  json_object_del(fc2, "stage");
  bad_file(root, "operators[3] (\"fc2\").stage: expected an integer in 0..1, got nothing");
  json_decref(root);
  /* a cut the schedule cannot run: the compiler refuses it by name */
  root = v2_file();
  json_object_set_new(entry(root, "operators", "loss"), "stage", json_integer(0));
  bad_file(root, "pipeline: operator 'loss' (stage 0) reads");
  json_decref(root);
}

/* With two chunks per stage the file's stages are checked against the compiler's cut. */
Test(strategy_roundtrip, an_interleaved_cut_otherwise_is_refused) {
  tmpdir t;
  char *text;
  tmp_make(&t);
  sk_autoparallel d = piped(8, 2, 4);
  d.pipeline.interleave = 2;
  save_tutorial(&t, d);
  text = read_text(t.a);
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  free(text);
  json_t *flatten = entry(root, "operators", "flatten");
  cr_assert_eq(json_integer_value(json_object_get(flatten, "stage")), 0);
  json_object_set_new(flatten, "stage", json_integer(1));
  text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  write_text(t.a, text);
  refused_by(&t, d, "operators[0] (\"flatten\").stage: stage 1 in the file, stage 0 after compiling (2 chunks per stage");
  free(text);
  json_decref(root);
  tmp_clean(&t);
}

Test(strategy_roundtrip, bad_hsdp) {
  json_t *root = v2_file();
  json_t *h = json_object_get(root, "hsdp");
  json_object_set_new(h, "optimizer_level", json_string("level4"));
  bad_file(root, "line 6: hsdp.optimizer_level: expected \"level1\", \"level2\" or \"level3\"");
  json_object_set_new(h, "optimizer_level", json_string("level1"));
  json_object_set_new(h, "shard_size", json_integer(0));
  bad_file(root, "hsdp.shard_size: expected -1 (the replica group) or a positive count, got 0");
  json_object_set_new(h, "shard_size", json_integer(-2));
  bad_file(root, "hsdp.shard_size: expected an integer in -1..4096");
  json_object_set_new(h, "shard_size", json_integer(-1));
  json_object_set_new(h, "threshold", json_integer(-1));
  bad_file(root, "hsdp.threshold: expected an integer in 0..");
  json_object_set_new(h, "threshold", json_real(0.5));
  bad_file(root, "hsdp.threshold: expected an integer in 0..9007199254740991, got a real number");
  json_object_set_new(h, "threshold", json_integer(0));
  json_object_set_new(h, "level", json_string("level1"));
  bad_file(root, "hsdp.level: unknown key");
  json_object_del(h, "level");
  json_object_set_new(root, "hsdp", json_string("level1"));
  bad_file(root, "hsdp: expected null (no optimizer parallel) or {\"shard_size\", \"threshold\", \"optimizer_level\"}, got a string");
  json_object_del(root, "hsdp");
  bad_file(root, "hsdp: expected null (no optimizer parallel) or {\"shard_size\", \"threshold\", \"optimizer_level\"}, got nothing");
  json_decref(root);
}

Test(strategy_roundtrip, bad_opt_shard) {
  json_t *root = v2_file();
  json_t *w = entry(root, "parameters", "fc1.weight"), *o = json_object_get(w, "opt_shard");
  cr_assert(json_is_object(o), "fc1.weight is sharded (4 replicas on a stage of 4)");
  cr_assert_eq(json_integer_value(json_object_get(o, "size")), 4);
  json_object_set_new(o, "size", json_integer(1));
  bad_file(root, "parameters[0] (\"fc1.weight\").opt_shard.size: expected an integer in 2..4096, got one outside");
  json_object_set_new(o, "size", json_integer(2));
  bad_file(root, "opt_shard.size: 2 shards x mirror 1 are not the layout's 4 replicas");
  json_object_set_new(o, "mirror", json_integer(2));
  bad_file(root, "opt_shard.slice_shape: [196,512] is not the shard's [392,512]");
  json_object_set_new(o, "slice_shape", json_pack("[ii]", 392, 512));
  bad_file(root, "parameters[0] (\"fc1.weight\").opt_shard: optimizer-sharded otherwise after compiling: the file's 2 "
                 "shards, mirror 2; the plan's 4 shards, mirror 1");
  json_object_set_new(o, "extra", json_true());
  bad_file(root, "opt_shard.extra: unknown key");
  json_object_set_new(w, "opt_shard", json_null());
  bad_file(root, "opt_shard: optimizer-sharded otherwise after compiling: the file's kept whole; the plan's 4 shards");
  json_object_set_new(w, "opt_shard", json_integer(4));
  bad_file(root, "opt_shard: expected null (kept whole) or {\"size\", \"mirror\", \"slice_shape\"}, got an integer");
  json_object_del(w, "opt_shard");
  bad_file(root, "got nothing (the key is missing)");
  json_decref(root);
}

/* Version 1 knows none of the new keys; version 2 needs them all; an operator's out_layout came
   with version 3 (layouts on every operator). */
Test(strategy_roundtrip, the_version_decides_the_keys) {
  json_t *root = v2_file();
  json_object_set_new(entry(root, "operators", "flatten"), "out_layout",
                      json_pack("{s:s, s:[s]}", "mesh", "a=4", "outputs", "a,None"));
  json_object_set_new(root, "version", json_integer(2));
  bad_file(root, "operators[0] (\"flatten\").out_layout: unknown key");
  json_object_del(entry(root, "operators", "flatten"), "out_layout");
  json_object_set_new(root, "version", json_integer(1));
  bad_file(root, "stages: unknown key");
  json_object_del(root, "stages"), json_object_del(root, "hsdp");
  bad_file(root, "operators[0] (\"flatten\").stage: unknown key");
  json_decref(root);
}
