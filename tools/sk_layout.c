/* sk-layout: explains a MindSpore-style layout -- which slice of a tensor every rank holds, and
   which ranks hold identical copies -- and, with --to, the redistribution plan between two
   layouts (sk_redist.h), optionally executed on the threads backend and checked; with --hsdp,
   whether optimizer parallel shards a parameter of that layout and which rows a rank keeps
   (sk_opt_shard.h).

     sk-layout --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)"
     sk-layout --devices 8 --strategy 4,1 --shape 16,512 --repeat left --groups
     sk-layout --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --plan
     sk-layout --mesh a=2,b=4 --shape 16,512 --map None,None --partial b --to b,None --exec
     sk-layout --mesh a=2,b=4 --shape 784,512 --map b,None --hsdp -1,64 --rank 4 --json

   Exit status: 0 for a valid query (and --exec found every element right), 1 if --exec found a
   wrong element or writing the output fails, 2 (and one line "sk-layout: error: ..." on stderr)
   for bad input; under --op --json a failure is also {"ok": false, "error": ...} on stdout. */
#define SK_IMPL
#include "sk_layout.h"
#include "sk_layout_algebra.h"
#include "sk_opt_shard.h"
#include "sk_comm.h"
#include "sk_threads.h"
#include "sk_redist.h"
#include "sk_ops.h"
#include "pyliteral.h"
#include "pylayout.h"
#include "pyshard.h"

#include <ctype.h>
#include <stdarg.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "Usage: sk-layout --mesh NAME=SIZE,... --shape L0,L1,... [--map TEXT | --ms-map TEXT] [output]\n"
    "       sk-layout --layout 'Layout(DEVICE_MATRIX, ALIAS_NAME)(MAP...)' --shape SHAPE [output]\n"
    "       sk-layout --devices N --strategy S0,S1,... --shape L0,L1,... [--repeat right|left] [output]\n"
    "       sk-layout --mesh ... --shape ... --map|--ms-map ... --hsdp SHARD_SIZE,THRESHOLD_KB\n"
    "                 [--dtype T] [--rank R] [--json]\n"
    "       sk-layout --op NAME --shapes SHAPES [--shard STRATEGY] --devices N [--rank R]\n"
    "                 [--attr NAME=VALUE ...] [--params LIST] [--json]\n"
    "       sk-layout --shape-util FUNC LIST [LIST]   (MindSpore's shape helpers, see below)\n"
    "\n"
    "Shows how a tensor is cut across a device mesh, MindSpore semantics (rank = row-major\n"
    "coordinates, last axis fastest; in a tuple the first axis is the major factor), or how an\n"
    "operator's shard strategy cuts its inputs and outputs and what it communicates.\n"
    "Values are written as in Python: (16,784), (4,), (\"mp\",(\"sp\",\"dp\")), None, True; the\n"
    "older bare forms (16,784 and mp,(sp,dp)) work too.\n"
    "\n"
    "  --mesh TEXT        device matrix with named axes, e.g. dp=2,sp=2,mp=2 (1..4096 devices)\n"
    "  --layout TEXT      MindSpore's Layout instead of --mesh, e.g. 'Layout((2,2,2),(\"dp\",\"sp\",\"mp\"))',\n"
    "                     optionally called with the map as in MindSpore:\n"
    "                     'Layout((2,2,2),(\"dp\",\"sp\",\"mp\"))(\"mp\",(\"sp\",\"dp\"))'\n"
    "  --shape LIST       tensor shape, e.g. 16,784 or (16,784)\n"
    "  --map TEXT         MindSpore layout(...) arguments, e.g. \"mp,(sp,dp)\", '(\"mp\",(\"sp\",\"dp\"))' or\n"
    "                     \"(sp,dp),None\"; a 1-dim tensor's \"(sp,dp)\" is its one dim (default: unsplit)\n"
    "  --ms-map TEXT      the same as a numeric tensor_map, e.g. \"(0,(1,2))\" (values count mesh\n"
    "                     axes from the right, -1 = unsplit)\n"
    "  --devices N        with --strategy or --op: number of devices (--strategy's default: its product)\n"
    "  --strategy LIST    a shard strategy, e.g. 4,1 or (4,1): mesh d0,d1,... plus a repeat axis\n"
    "                     'rep' when N > product\n"
    "  --repeat SIDE      where the repeat axis goes: right (operators, default) or left (datasets)\n"
    "  --name NAME        label of the tensor in the table (default: tensor)\n"
    "output (default: the device -> slice table):\n"
    "  --tsv              rank<TAB>coords<TAB>slices, e.g. 2<TAB>0,1,0<TAB>0:8,392:588\n"
    "  --groups           replica groups (ranks holding identical slices), one per line\n"
    "  --standard         MindSpore's standard form (size-1 axes dropped, tuples expanded)\n"
    "redistribution (the layout above is the source):\n"
    "  --to TEXT          target layout on the same mesh, e.g. \"None,dp\"; prints the plan\n"
    "  --partial AXES     mesh axes over which the source holds partial sums, e.g. dp,mp\n"
    "  --mindspore        MindSpore's own operator sequence instead of the minimal plan\n"
    "  --alltoall on|off  with --mindspore: enable_alltoall (default on)\n"
    "  --dtype NAME       element type for bytes and --exec (nccl-tests names; default float)\n"
    "  --plan             print the plan (the default output with --to)\n"
    "  --tsv              rank<TAB>recv_bytes<TAB>send_bytes, one line per rank\n"
    "  --exec             run the plan on the threads backend with generated data and check\n"
    "                     every element: prints ok, or the first wrong element (exit 1)\n"
    "shape helpers (MindSpore's shape_util.cc), each printing its result list:\n"
    "  --shape-util FUNC LIST [LIST]  FUNC one of ShapeToAccumulateProduct[Reverse] SHAPE,\n"
    "                     AccumulateProduct[Reverse]ToShape ACCUM, UnifyAccumulateProduct A B,\n"
    "                     UnifyShape A B, ExpandAccumulateProduct IN EXPAND, ExpandShape IN EXPAND;\n"
    "                     e.g. sk-layout --shape-util UnifyShape \"(8,4)\" \"(2,16)\" prints [2, 4, 4]\n"
    "device lists (MindSpore's DeviceMatrix over any device ids, sk_device_matrix):\n"
    "  --dev-list IDS --dev-shape SHAPE --rank ID [--tensor-map MAP]  e.g. --dev-list 8,9,10,11\n"
    "                     --dev-shape 2,2 --rank 9: rank 9's group along each dim, one line per\n"
    "                     dim; with --tensor-map (-1,0): the devices holding rank 9's slice\n"
    ;

/* A third string for the same reason. */
static const char usage_hsdp[] =
    "optimizer parallel (sk_opt_shard.h; the layout above is the parameter's):\n"
    "  --hsdp SIZE,KB[,LEVEL]  MindSpore's hsdp(shard_size, threshold, optimizer_level), e.g. -1,64 or\n"
    "                     2,0,level2 (each part optional: -1, 64, level1); explains whether the\n"
    "                     parameter is sharded, rank R's AllGather and Mirror groups, the optimizer\n"
    "                     slice shape and the rows of dim 0 rank R keeps\n"
    "  --dtype NAME       the parameter's element type, for the threshold: f32 (default), f16, bf16,\n"
    "                     f64, ... (float, half, bfloat16, double too)\n"
    "  --rank R           whose group and rows to explain (default 0)\n"
    "  --json             one JSON object; its opt_shard member holds size (0: not sharded), group\n"
    "                     (the AllGather group), slice_shape, rows ([start, stop) of dim 0), sharded,\n"
    "                     replicas, index, mirror_group, why\n";

/* Two strings: ISO C guarantees string literals of 4095 characters only. */
static const char usage_op[] =
    "operator (sk_ops.h rules):\n"
    "  --op NAME          MindSpore's primitive: MatMul, BatchMatMul, ReLU, Sigmoid, SiLU, Add,\n"
    "                     BiasAdd, Softmax, LayerNorm, RmsNorm, MAELoss, OneHot, Gather, Reshape,\n"
    "                     Transpose, GetNext, _VirtualDataset, _VirtualLoss, TmpIdentity\n"
    "                     (identity_info), Activation (with --attr activation_type='relu' or\n"
    "                     'sigmoid'), ...\n"
    "  --shapes SHAPES    the inputs' shapes, e.g. \"((32,784),(784,512))\"; () is a scalar input;\n"
    "                     \"(16,512)\" alone is one input's; \"()\" alone is no input (GetNext)\n"
    "  --shard STRATEGY   the in_strategy, e.g. \"((2,4),(4,1))\"; leave it out for MindSpore's default\n"
    "                     (data parallel); () for a tensor input cuts its dim 0 by N (or the largest\n"
    "                     divisor of N that divides the dim), the rest by 1; or one layout per tensor\n"
    "                     input: '(Layout((2,4),(\"dp\",\"mp\"))(\"dp\",\"mp\"), Layout(...)(...))'\n"
    "  --rank R           whose groups to print (default 0)\n"
    "  --attr NAME=VALUE  an attribute, as MindSpore names it; repeat for several:\n"
    "                     transpose_a, transpose_b, axis (-1 or (0,1)), keep_dims, begin_norm_axis,\n"
    "                     repeated_num_in_dev_matrix_right, full_batch, gradients_mean, and the\n"
    "                     operands MindSpore passes as inputs: depth (OneHot), shape (Reshape),\n"
    "                     perm (Transpose), shapes (GetNext's outputs), out_strategy (output 0's\n"
    "                     tuple, or layouts of the first outputs: moved after the forward where\n"
    "                     the rule gives another, \"redistributed_outputs\" in --json),\n"
    "                     activation_type (Activation's: 'relu' makes it ReLU, 'sigmoid' Sigmoid);\n"
    "                     accepted and ignored: is_grad, types, output_num, batch_dims, keep_prob,\n"
    "                     seed, seed2, epsilon, data_format, begin_params_axis, shared_name, dtype,\n"
    "                     dst_type, sparse, reduction\n"
    "  --params LIST      the inputs that are parameters, e.g. 1 or (0,1)\n"
    "  --json             one JSON object: ok, error (when not ok: a rejected strategy or a usage\n"
    "                     error), dev_matrix, inputs, outputs\n"
    "                     ({shape, tensor_map, slice_shape}), forward_ops, backward_ops ({op, group}),\n"
    "                     mirror_ops (null or {op: \"_MirrorOperator\", group}); groups are rank R's\n"
    "  -h, --help         this text\n"
    "\n"
    "Examples:\n"
    "  sk-layout --layout 'Layout((2,2,2),(\"dp\",\"sp\",\"mp\"))(\"mp\",(\"sp\",\"dp\"))' --shape \"(16,784)\"\n"
    "  sk-layout --devices 8 --strategy \"(4,1)\" --shape \"(16,512)\" --groups\n"
    "  sk-layout --op MatMul --shapes \"((32,784),(784,512))\" --shard \"((2,4),(4,1))\" --devices 8\n"
    "  sk-layout --op MatMul --shapes \"((32,512),(1024,512))\" --shard \"((2,1),(4,1))\" --devices 8 \\\n"
    "            --attr transpose_b=True --json\n"
    "  sk-layout --op Add --shapes \"((1,48),(48,1))\" --shard \"((1,8),(4,1))\" --devices 32\n"
    "  sk-layout --mesh a=2,b=4 --shape 784,512 --map b,None --hsdp -1,64 --rank 4 --json\n"
    "\n"
    "Exit status: 0 for a valid query; 2 (one line \"sk-layout: error: ...\" on stderr) for bad\n"
    "input, and for a strategy the operator's rules reject (with --json: {\"ok\": false, ...} on\n"
    "stdout instead; for bad input with --op --json, on stdout as well); 1 if --exec found a wrong\n"
    "element or writing the output failed.\n";

/* Set once the flags are read when they hold --op and --json: then every error also goes to
   stdout as {"ok": false, "error": ...}, the one JSON object --json promises, so that a script
   reads a usage error as it reads a rejected strategy. */
static int json_errors;

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      fputs("\\n", stdout);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* --json's answer to a failure: {"ok": false, "error": MSG}, one line. */
static void print_json_error(const char *msg) {
  printf("{\"ok\": false, \"error\": ");
  json_string(msg);
  printf("}\n");
  fflush(stdout);
}

/* The message of fmt, ap as the JSON error line; ap is the caller's, copied before the measuring
   pass consumes it. */
static void print_json_error_v(const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  char *msg = n < 0 ? NULL : (char *)malloc((size_t)n + 1);
  if (!msg) {
    print_json_error("out of memory for the error message");
    return;
  }
  vsnprintf(msg, (size_t)n + 1, fmt, ap);
  print_json_error(msg);
  free(msg);
}

/* One line on stderr, exit 2: the contract for bad input (under --op --json, the JSON line on
   stdout too). _Noreturn also tells the static analyzer that the paths after a die() never run. */
static _Noreturn void die(const char *fmt, ...) {
  va_list ap, aq;
  fputs("sk-layout: error: ", stderr);
  va_start(ap, fmt);
  va_copy(aq, ap);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  if (json_errors) print_json_error_v(fmt, aq);
  va_end(aq);
  va_end(ap);
  exit(2);
}

static void check(sk_result r, const sk_error *e) {
  if (r != SK_OK) die("%s", e->msg);
}

/* ---- Python forms of the flags' values (pyliteral.h; Layout(...) and maps: pylayout.h) ------- */

/* Every flag value goes through one parser; a doc per value, kept until the program exits
   (its nodes are read while the value is interpreted, and messages quote its text). */
static pylit_doc *parse_flag(const char *flag, const char *text) {
  pylit_doc *doc = (pylit_doc *)malloc(sizeof *doc);
  if (!doc) die("out of memory");
  if (pylit_parse(doc, flag, text) < 0) die("%s", doc->error);
  return doc;
}

static void need(int status, const pylit_doc *doc) {
  if (status < 0) die("%s", doc->error);
}

/* A comma list or tuple of positive integers ("16,784", "(16,784)", "[16]", "(4,)"); at most
   `max`. Returns the count. */
static int parse_positive_ints(const char *flag, const char *text, long long *out, int max) {
  pylit_doc *doc = parse_flag(flag, text);
  int n = pylit_int_tuple(doc, doc->root, 1, 1LL << 50, "a positive integer", out, max);
  need(n, doc);
  if (n == 0) die("%s: '%s' has no values", flag, text);
  return n;
}

/* Appends to a fixed buffer; a map text longer than the buffer is a usage error. */
static void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap - len) die("a tensor map longer than %zu characters", cap - 1);
}

/* --map / --to: a layout of `shape` on `mesh` from any of the map's forms. */
static void layout_from_map_flag(sk_layout *l, const sk_mesh *mesh, const char *flag, const char *text, int ndims,
                                 const int64_t *shape) {
  char canonical[PYLAYOUT_MAP_MAX];
  sk_error e;
  pylit_doc *doc = parse_flag(flag, text);
  need(pylayout_map_text(doc, doc->root, ndims, canonical, sizeof canonical), doc);
  check(sk_layout_parse(l, mesh, canonical, ndims, shape, &e), &e);
}

/* A numeric tensor_map flag (--ms-map, --tensor-map): "(0,(1,2))", "0,-1", "[1,-1]", read by
   sk_ms_map_parse, which checks the values, into ms (SK_MAX_DIMS entries). Returns the dims. */
static int ms_map_flag(const char *flag, const char *text, sk_dim_map *ms) {
  pylit_doc *doc = parse_flag(flag, text);
  int items[PYLIT_MAX_NODES];
  int n = pylit_list(doc, doc->root, items, PYLIT_MAX_NODES);
  char canonical[1024] = "(";
  for (int i = 0; i < n; i++) {
    long long v[SK_MAX_AXES] = {0};
    const pylit_node *node = &doc->nodes[items[i]];
    int k = node->kind == PYLIT_TUPLE ? pylit_int_tuple(doc, items[i], -1, SK_MAX_AXES, "a mesh axis number", v, SK_MAX_AXES)
                                      : pylit_int(doc, items[i], -1, SK_MAX_AXES, "a mesh axis number", v) < 0 ? -1 : 1;
    need(k, doc);
    append(canonical, sizeof canonical, node->kind == PYLIT_TUPLE ? "%s(" : "%s", i ? "," : "");
    for (int j = 0; j < k; j++) append(canonical, sizeof canonical, "%s%lld", j ? "," : "", v[j]);
    if (node->kind == PYLIT_TUPLE) append(canonical, sizeof canonical, ")");
  }
  append(canonical, sizeof canonical, n == 1 ? ",)" : ")");
  int got;
  sk_error e;
  check(sk_ms_map_parse(canonical, ms, &got, &e), &e);
  return got;
}

static void layout_from_ms_map_flag(sk_layout *l, const sk_mesh *mesh, const char *text, int ndims, const int64_t *shape) {
  sk_dim_map ms[SK_MAX_DIMS];
  sk_error e;
  int got = ms_map_flag("--ms-map", text, ms);
  if (got != ndims) die("--ms-map \"%s\" has %d dims; --shape has %d", text, got, ndims);
  check(sk_layout_from_ms_map(l, mesh, ndims, shape, ms, &e), &e);
}

/* --partial: mesh axis names, "dp,mp" or ("dp", "mp"), as the mask sk_mesh_axis_mask reads. */
static uint32_t partial_axes(const sk_mesh *mesh, const char *text) {
  pylit_doc *doc = parse_flag("--partial", text);
  int items[PYLIT_MAX_NODES];
  int n = pylit_list(doc, doc->root, items, PYLIT_MAX_NODES);
  char names[1024] = "";
  for (int i = 0; i < n; i++) {
    if (i) append(names, sizeof names, ",");
    need(pylayout_axis_name(doc, items[i], names, sizeof names), doc);
  }
  uint32_t mask;
  sk_error e;
  check(sk_mesh_axis_mask(mesh, names, &mask, &e), &e);
  return mask;
}

/* Prints the ranks of each replica group, one group a line. */
static void print_groups(const sk_layout *l) {
  static int ranks[SK_MAX_DEVICES];
  int ng, gs;
  sk_error e;
  check(sk_layout_replica_groups(l, ranks, SK_MAX_DEVICES, &ng, &gs, &e), &e);
  for (int g = 0; g < ng; g++) {
    for (int i = 0; i < gs; i++) printf("%s%d", i ? "," : "", ranks[g * gs + i]);
    putchar('\n');
  }
}

static void print_tsv(const sk_layout *l) {
  sk_error e;
  puts("rank\tcoords\tslices");
  for (int r = 0; r < l->mesh.size; r++) {
    int c[SK_MAX_AXES];
    sk_slice s;
    check(sk_mesh_coords(&l->mesh, r, c, &e), &e);
    check(sk_layout_slice(l, r, &s, &e), &e);
    printf("%d\t", r);
    for (int k = 0; k < l->mesh.naxes; k++) printf("%s%d", k ? "," : "", c[k]);
    putchar('\t');
    for (int d = 0; d < s.ndims; d++) printf("%s%lld:%lld", d ? "," : "", (long long)s.start[d], (long long)s.stop[d]);
    putchar('\n');
  }
}

static void print_standard(const sk_layout *l) {
  sk_layout s;
  sk_error e;
  check(sk_layout_standard(l, &s, &e), &e);
  char text[1024];
  sk_dim_map ms[SK_MAX_DIMS];
  sk_mesh_format(&s.mesh, text, sizeof text);
  printf("mesh        %s\n", text);
  printf("dev_matrix  [");
  for (int k = 0; k < s.mesh.naxes; k++) printf("%s%d", k ? "," : "", s.mesh.dims[k]);
  printf("]\nshape       [");
  for (int d = 0; d < s.ndims; d++) printf("%s%lld", d ? "," : "", (long long)s.shape[d]);
  sk_layout_format(&s, text, sizeof text);
  printf("]\nlayout      %s\n", text);
  sk_layout_to_ms_map(&s, ms);
  sk_ms_map_format(ms, s.ndims, text, sizeof text);
  printf("tensor_map  %s\n", text);
}

static void print_table(const sk_layout *l, const char *name) {
  size_t n = sk_layout_format_table(l, name, NULL, 0);
  char *buf = (char *)malloc(n + 1);
  if (!buf) die("out of memory for a %zu-byte table", n + 1);
  sk_layout_format_table(l, name, buf, n + 1);
  fputs(buf, stdout);
  free(buf);
}

/* ---- redistribution --------------------------------------------------------------------------- */

/* Generated data: value of global element x; partial contributions also depend on k, the
   holder's position in its partial group. Small integers, exact in every dtype. */
static void gen_value(sk_dtype dt, void *buf, size_t pos, int64_t x, int k, int partial) {
  long v = partial ? (long)((x * 7 + k * 13 + 3) % 15) - 7 : (long)(x % 251) - 125;
  switch (dt) {
    case SK_F32: ((float *)buf)[pos] = (float)v; break;
    case SK_F64: ((double *)buf)[pos] = (double)v; break;
    case SK_F16: ((uint16_t *)buf)[pos] = sk_f32_to_f16((float)v); break;
    case SK_BF16: ((uint16_t *)buf)[pos] = sk_f32_to_bf16((float)v); break;
    case SK_I8: ((int8_t *)buf)[pos] = (int8_t)v; break;
    case SK_U8: ((uint8_t *)buf)[pos] = (uint8_t)(v + 125); break;
    case SK_I32: ((int32_t *)buf)[pos] = (int32_t)v; break;
    default: ((int64_t *)buf)[pos] = (int64_t)v; break;
  }
}

static double as_double(sk_dtype dt, const void *buf, size_t pos) {
  switch (dt) {
    case SK_F32: return ((const float *)buf)[pos];
    case SK_F64: return ((const double *)buf)[pos];
    case SK_F16: return sk_f16_to_f32(((const uint16_t *)buf)[pos]);
    case SK_BF16: return sk_bf16_to_f32(((const uint16_t *)buf)[pos]);
    case SK_I8: return ((const int8_t *)buf)[pos];
    case SK_U8: return ((const uint8_t *)buf)[pos];
    case SK_I32: return ((const int32_t *)buf)[pos];
    default: return (double)((const int64_t *)buf)[pos];
  }
}

/* Position of rank in its partial group: mixed radix of its coordinates on the partial axes. */
static int partial_pos(const sk_mesh *m, uint32_t partial, int rank) {
  int c[SK_MAX_AXES], k = 0;
  sk_mesh_coords(m, rank, c, NULL);
  for (int a = 0; a < m->naxes; a++)
    if (partial & (1u << a)) k = k * m->dims[a] + c[a];
  return k;
}

typedef struct exec_ctx {
  const sk_redist_desc *desc;
  int gsize;           /* partial group size (1 without partial sums) */
  int64_t *bad_index;  /* per rank: first wrong element of its target slice, or -1 */
  double *got, *want;
  sk_result *rc;
  char (*msg)[SK_ERROR_MSG_MAX];
} exec_ctx;

/* Linear global index of element i of a slice (row-major within the slice). */
static int64_t global_index(const sk_layout *l, const sk_slice *s, int64_t i, int64_t *coords) {
  int64_t x = 0;
  int64_t rem = i;
  int64_t sub[SK_MAX_DIMS];
  for (int d = l->ndims - 1; d >= 0; d--) {
    int64_t e = s->stop[d] - s->start[d];
    sub[d] = rem % e;
    rem /= e;
  }
  for (int d = 0; d < l->ndims; d++) {
    int64_t g = s->start[d] + sub[d];
    if (coords) coords[d] = g;
    x = x * l->shape[d] + g;
  }
  return x;
}

static sk_result exec_device(sk_comm *c, void *arg) {
  exec_ctx *x = (exec_ctx *)arg;
  const sk_redist_desc *d = x->desc;
  int r = sk_comm_rank(c);
  size_t es = sk_dtype_size(d->dtype);
  sk_slice fs, ts;
  sk_error e;
  x->bad_index[r] = -1;
  if ((x->rc[r] = sk_layout_slice(&d->from, r, &fs, &e)) || (x->rc[r] = sk_layout_slice(&d->to, r, &ts, &e))) {
    snprintf(x->msg[r], SK_ERROR_MSG_MAX, "%s", e.msg);
    return x->rc[r];
  }
  int64_t nf = 1, nt = 1;
  for (int k = 0; k < fs.ndims; k++) nf *= fs.stop[k] - fs.start[k], nt *= ts.stop[k] - ts.start[k];
  /* every size + 1: malloc(0) may return NULL, which would read as out of memory */
  unsigned char *src = (unsigned char *)malloc((size_t)nf * es + 1), *dst = (unsigned char *)malloc((size_t)nt * es + 1);
  unsigned char *want = (unsigned char *)calloc(1, es + 1), *parts = (unsigned char *)malloc(es * (size_t)x->gsize + 1); /* calloc: the analyzer cannot see gsize >= 1 */
  const void **srcs = (const void **)malloc(sizeof(void *) * (size_t)x->gsize + 1);
  if (!src || !dst || !want || !parts || !srcs) {
    free(src), free(dst), free(want), free(parts), free(srcs);
    x->rc[r] = SK_ERR_OUT_OF_MEMORY;
    snprintf(x->msg[r], SK_ERROR_MSG_MAX, "out of memory");
    return SK_ERR_OUT_OF_MEMORY;
  }
  int k = partial_pos(&d->from.mesh, d->partial, r);
  for (int64_t i = 0; i < nf; i++) gen_value(d->dtype, src, (size_t)i, global_index(&d->from, &fs, i, NULL), k, d->partial != 0);
  memset(dst, 0xA5, (size_t)nt * es);
  sk_result rc = sk_redist(c, d, src, (size_t)nf, dst, (size_t)nt, &e);
  x->rc[r] = rc;
  if (rc != SK_OK) {
    snprintf(x->msg[r], SK_ERROR_MSG_MAX, "%s", e.msg);
  } else {
    for (int j = 0; j < x->gsize; j++) srcs[j] = parts + (size_t)j * es;
    for (int64_t i = 0; i < nt; i++) {
      int64_t g = global_index(&d->to, &ts, i, NULL);
      if (d->partial) {
        for (int j = 0; j < x->gsize; j++) gen_value(d->dtype, parts, (size_t)j, g, j, 1);
        sk_reduce_local(want, srcs, x->gsize, 1, d->dtype, SK_SUM, NULL); /* rank order, as the plan sums */
      } else {
        gen_value(d->dtype, want, 0, g, 0, 0);
      }
      if (memcmp(dst + (size_t)i * es, want, es)) {
        x->bad_index[r] = i;
        x->got[r] = as_double(d->dtype, dst, (size_t)i);
        x->want[r] = as_double(d->dtype, want, 0);
        break;
      }
    }
  }
  free(src), free(dst), free(want), free(parts), free(srcs);
  return rc;
}

static int run_exec(const sk_redist_desc *d) {
  int n = d->from.mesh.size;
  if (n > 512) die("--exec runs one thread per device; %d devices is more than 512", n);
  double bytes = (double)sk_dtype_size(d->dtype);
  for (int k = 0; k < d->from.ndims; k++) bytes *= (double)d->from.shape[k];
  if (bytes > 256.0 * 1024 * 1024) die("--exec: the tensor has %.0f bytes; at most 256 MiB", bytes);
  int g = 1;
  for (int a = 0; a < d->from.mesh.naxes; a++)
    if (d->partial & (1u << a)) g *= d->from.mesh.dims[a];
  exec_ctx x;
  x.desc = d;
  x.gsize = g;
  x.bad_index = (int64_t *)calloc((size_t)n, sizeof(int64_t));
  x.got = (double *)calloc((size_t)n, sizeof(double));
  x.want = (double *)calloc((size_t)n, sizeof(double));
  x.rc = (sk_result *)calloc((size_t)n, sizeof(sk_result));
  x.msg = (char(*)[SK_ERROR_MSG_MAX])calloc((size_t)n, SK_ERROR_MSG_MAX);
  if (!x.bad_index || !x.got || !x.want || !x.rc || !x.msg) die("out of memory");
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = n;
  wd.backend = sk_threads_backend();
  wd.timeout_ms = 60000;
  sk_world *w;
  sk_error e;
  if (sk_world_create(&wd, &w, &e) != SK_OK) die("creating the threads world: %s", e.msg);
  sk_result rc = sk_world_run(w, exec_device, &x, NULL);
  int status = 0;
  if (rc != SK_OK) {
    for (int r = 0; r < n; r++)
      if (x.rc[r] != SK_OK && x.rc[r] != SK_ERR_ABORTED) die("rank %d: %s", r, x.msg[r]);
    die("executing the plan: %s", sk_world_error_message(w));
  }
  for (int r = 0; r < n && !status; r++)
    if (x.bad_index[r] >= 0) {
      sk_slice ts;
      int64_t gc[SK_MAX_DIMS];
      sk_layout_slice(&d->to, r, &ts, NULL);
      global_index(&d->to, &ts, x.bad_index[r], gc);
      printf("rank %d, index %lld (tensor [", r, (long long)x.bad_index[r]);
      for (int k = 0; k < d->to.ndims; k++) printf("%s%lld", k ? "," : "", (long long)gc[k]);
      printf("]): got %g, wanted %g\n", x.got[r], x.want[r]);
      status = 1;
    }
  if (!status) puts("ok");
  sk_world_destroy(w, NULL);
  free(x.bad_index), free(x.got), free(x.want), free(x.rc), free(x.msg);
  return status;
}

static int redistribution(const sk_layout *from, const char *to_text, const char *partial_text, int mindspore,
                          const char *alltoall_text, const char *dtype_text, int plan, int tsv, int exec) {
  sk_redist_desc d;
  sk_error e;
  memset(&d, 0, sizeof d);
  d.from = *from;
  layout_from_map_flag(&d.to, &from->mesh, "--to", to_text, from->ndims, from->shape);
  if (partial_text) d.partial = partial_axes(&from->mesh, partial_text);
  d.dtype = SK_F32;
  if (dtype_text && !sk_dtype_from_name(dtype_text, &d.dtype))
    die("--dtype: unknown type '%s' (float, double, half, bfloat16, int8, uint8, int32, int64)", dtype_text);
  d.mode = SK_REDIST_MINIMAL;
  if (mindspore) {
    d.mode = SK_REDIST_MINDSPORE;
    if (alltoall_text) {
      if (!strcmp(alltoall_text, "off"))
        d.mode = SK_REDIST_MINDSPORE_NO_ALLTOALL;
      else if (strcmp(alltoall_text, "on"))
        die("--alltoall takes on or off, not '%s'", alltoall_text);
    }
  }
  sk_redist_plan *p;
  check(sk_redist_plan_create(&d, SK_REDIST_ALL_RANKS, &p, &e), &e);
  if (plan || (!tsv && !exec)) {
    size_t n = sk_redist_plan_format(p, NULL, 0);
    char *buf = (char *)malloc(n + 1);
    if (!buf) die("out of memory for a %zu-byte plan", n + 1);
    sk_redist_plan_format(p, buf, n + 1);
    fputs(buf, stdout);
    free(buf);
  }
  if (tsv) {
    puts("rank\trecv_bytes\tsend_bytes");
    for (int r = 0; r < from->mesh.size; r++) {
      uint64_t rv, sv;
      check(sk_redist_plan_bytes(p, -1, r, &rv, &sv, &e), &e);
      printf("%d\t%llu\t%llu\n", r, (unsigned long long)rv, (unsigned long long)sv);
    }
  }
  sk_redist_plan_destroy(p);
  int status = 0;
  if (exec) {
    fflush(stdout);
    status = run_exec(&d);
  }
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "sk-layout: error: writing the output failed\n");
    return 1;
  }
  return status;
}

/* ---- the operator explainer (--op) ----------------------------------------------------------- */

/* The Mirror as MindSpore's graph names it (MIRROR_OPERATOR in its parallel ops_utils.h). */
#define MS_MIRROR_OPERATOR "_MirrorOperator"

/* The top level of --shapes / --shard: a tuple of tuples, one per input. A flat tuple of
   integers, or one integer, is the single tuple of a one-input operator: "(32,784)" reads as
   "((32,784),)". Returns the count; *flat says the root itself is that single tuple. */
static int top_level_tuples(const pylit_doc *doc, int *items, int max, int *flat) {
  const pylit_node *root = &doc->nodes[doc->root];
  *flat = root->kind == PYLIT_INT;
  if (root->kind == PYLIT_TUPLE && root->count > 0) {
    *flat = 1;
    for (int i = root->first; i >= 0; i = doc->nodes[i].next)
      if (doc->nodes[i].kind != PYLIT_INT) *flat = 0;
  }
  if (!*flat) return pylit_list(doc, doc->root, items, max);
  items[0] = doc->root;
  return 1;
}

/* --shapes: desc.ninputs, ndims, shape; "()" is a scalar input (inside the outer tuple) or no
   input at all (the whole value, as for GetNext). */
static void op_read_shapes(sk_op_desc *d, const char *text) {
  pylit_doc *doc = parse_flag("--shapes", text);
  int items[PYLIT_MAX_NODES], flat;
  int n = top_level_tuples(doc, items, PYLIT_MAX_NODES, &flat);
  if (n > SK_OP_MAX_INPUTS) die("--shapes: %d inputs; at most %d", n, SK_OP_MAX_INPUTS);
  d->ninputs = n;
  for (int i = 0; i < n; i++) {
    if (!flat && doc->nodes[items[i]].kind != PYLIT_TUPLE) need(pylit_expected(doc, items[i], "a shape tuple"), doc);
    long long dims[SK_MAX_DIMS];
    int k = pylit_int_tuple(doc, items[i], 1, 1LL << 50, "a dim size", dims, SK_MAX_DIMS);
    need(k, doc);
    d->ndims[i] = k;
    for (int j = 0; j < k; j++) d->shape[i][j] = dims[j];
  }
}

/* The cut of dim 0 that fills a tensor input's empty strategy tuple: MindSpore's data-parallel
   default, all the devices -- or, when the dim is smaller, the largest divisor of the device
   count that divides it, so that the default itself never fails to divide. */
static int data_parallel_cut(int ndevices, int64_t dim0) {
  for (int cut = ndevices; cut > 1; cut--)
    if (ndevices % cut == 0 && dim0 % cut == 0) return cut;
  return 1;
}

/* --shard: the strategy as written. The tuple count and each tuple's length go to
   desc.nstrategies / strategy_len unchanged (only the first SK_MAX_DIMS values of a tuple fit),
   so that the operator's rules reject a malformed strategy with MindSpore's message. Returns
   the number of tuples. */
static int op_read_strategy(sk_op_desc *d, const char *text, int ndevices) {
  pylit_doc *doc = parse_flag("--shard", text);
  int items[PYLIT_MAX_NODES], flat;
  int n = top_level_tuples(doc, items, PYLIT_MAX_NODES, &flat);
  d->has_strategy = true;
  d->nstrategies = n;
  for (int i = 0; i < n && i < SK_OP_MAX_INPUTS; i++) {
    if (!flat && doc->nodes[items[i]].kind != PYLIT_TUPLE) need(pylit_expected(doc, items[i], "a strategy tuple"), doc);
    int values[PYLIT_MAX_NODES];
    int len = pylit_list(doc, items[i], values, PYLIT_MAX_NODES);
    if (len == 0 && i < d->ninputs && d->ndims[i] > 0) { /* () for a tensor: the default */
      d->strategy[i][0] = data_parallel_cut(ndevices, d->shape[i][0]);
      for (int j = 1; j < d->ndims[i]; j++) d->strategy[i][j] = 1;
      d->strategy_len[i] = d->ndims[i];
      continue;
    }
    d->strategy_len[i] = len;
    for (int j = 0; j < len && j < SK_MAX_DIMS; j++) {
      long long v = 0;
      need(pylit_int(doc, values[j], -(1LL << 30), 1LL << 30, "a strategy value", &v), doc);
      d->strategy[i][j] = (int)v;
    }
  }
  return n;
}

/* ---- attributes: --attr NAME=VALUE, as MindSpore names them ---- */

typedef void (*attr_reader)(sk_op_desc *d, pylit_doc *doc, size_t field);

/* A bool attribute stored as is (field: its offset in sk_op_desc). */
static void attr_flag(sk_op_desc *d, pylit_doc *doc, size_t field) {
  int v = 0;
  need(pylit_bool(doc, doc->root, &v), doc);
  *(bool *)((char *)d + field) = v != 0;
}

/* repeated_num_in_dev_matrix_right=False is desc.repeat_left. */
static void attr_repeat_right(sk_op_desc *d, pylit_doc *doc, size_t field) {
  int v = 0;
  (void)field;
  need(pylit_bool(doc, doc->root, &v), doc);
  d->repeat_left = !v;
}

/* axis=-1, axis=(0,1), axis=() (a reduction over every dim). */
static void attr_axis(sk_op_desc *d, pylit_doc *doc, size_t field) {
  long long v[SK_MAX_DIMS];
  (void)field;
  int n = pylit_int_tuple(doc, doc->root, -SK_MAX_DIMS - 1, SK_MAX_DIMS, "an axis", v, SK_MAX_DIMS);
  need(n, doc);
  d->naxis = n;
  for (int i = 0; i < n; i++) d->axis[i] = (int)v[i];
}

/* LayerNorm's begin_norm_axis is desc.axis[0]. */
static void attr_begin_norm_axis(sk_op_desc *d, pylit_doc *doc, size_t field) {
  long long v = 0;
  (void)field;
  need(pylit_int(doc, doc->root, -SK_MAX_DIMS, SK_MAX_DIMS - 1, "an axis", &v), doc);
  d->naxis = 1, d->axis[0] = (int)v;
}

/* Transpose's perm: one entry per dim of the input (desc has no length for it). */
static void attr_perm(sk_op_desc *d, pylit_doc *doc, size_t field) {
  long long v[SK_MAX_DIMS];
  (void)field;
  int n = pylit_int_tuple(doc, doc->root, -SK_MAX_DIMS, SK_MAX_DIMS - 1, "a dim", v, SK_MAX_DIMS);
  need(n, doc);
  if (d->ninputs > 0 && n != d->ndims[0]) die("%s: perm has %d entries for a rank-%d input", doc->flag, n, d->ndims[0]);
  for (int i = 0; i < n; i++) d->perm[i] = (int)v[i];
  d->has_perm = true; /* perm=(0,0) is then refused as no permutation, not as missing */
}

/* OneHot's depth. */
static void attr_depth(sk_op_desc *d, pylit_doc *doc, size_t field) {
  long long v = 0;
  (void)field;
  need(pylit_int(doc, doc->root, 1, 1LL << 50, "a depth", &v), doc);
  d->depth = v;
}

/* One output shape at node n into desc.out_shape[k]; Reshape's may hold one -1. */
static void read_out_shape(sk_op_desc *d, pylit_doc *doc, int n, int k, long long lo) {
  long long v[SK_MAX_DIMS];
  if (doc->nodes[n].kind != PYLIT_TUPLE) need(pylit_expected(doc, n, "a shape tuple"), doc);
  int len = pylit_int_tuple(doc, n, lo, 1LL << 50, "a dim size", v, SK_MAX_DIMS);
  need(len, doc);
  d->out_ndims[k] = len;
  for (int i = 0; i < len; i++) d->out_shape[k][i] = v[i];
}

/* Reshape's target shape (an input in MindSpore): the one output shape. */
static void attr_shape(sk_op_desc *d, pylit_doc *doc, size_t field) {
  (void)field;
  read_out_shape(d, doc, doc->root, 0, -1);
  d->noutputs = 1;
}

/* GetNext's output shapes. */
static void attr_shapes(sk_op_desc *d, pylit_doc *doc, size_t field) {
  int items[PYLIT_MAX_NODES];
  (void)field;
  int n = pylit_list(doc, doc->root, items, PYLIT_MAX_NODES);
  if (n > SK_OP_MAX_OUTPUTS) die("%s: %d shapes; at most %d outputs", doc->flag, n, SK_OP_MAX_OUTPUTS);
  for (int k = 0; k < n; k++) read_out_shape(d, doc, items[k], k, 1);
  d->noutputs = n;
}

/* shard's out_strategy (its second argument), read once the outputs' shapes are known
   (op_read_out_strategy): output 0's tuple ((8,1),), or layouts of the first outputs. */
static const char *op_out_strategy_text;

static void attr_out_strategy(sk_op_desc *d, pylit_doc *doc, size_t field) {
  (void)d, (void)field;
  op_out_strategy_text = doc->text;
}

/* The out_strategy on the outputs' shapes, which the rule gives for d's inputs. */
static void op_read_out_strategy(sk_op_desc *d, const char *text) {
  sk_op_desc shapes = *d;
  sk_op_plan p;
  sk_error e;
  char msg[600];
  shapes.has_strategy = shapes.has_layouts = shapes.has_out_strategy = false, shapes.nstrategies = shapes.nout_layouts = 0;
  memset(shapes.strategy_len, 0, sizeof shapes.strategy_len);
  if (sk_op_plan_make(&shapes, 1, &p, &e)) die("%s", e.msg);
  int nd[SK_OP_MAX_OUTPUTS] = {0};
  int64_t sh[SK_OP_MAX_OUTPUTS][SK_MAX_DIMS] = {{0}};
  for (int k = 0; k < p.noutputs; k++) nd[k] = p.out[k].ndims, memcpy(sh[k], p.out[k].shape, sizeof sh[k]);
  if (pyshard_out_strategy("--attr out_strategy", text, d, p.noutputs, nd, (const int64_t(*)[SK_MAX_DIMS])sh, msg, sizeof msg))
    die("%s", msg);
}

typedef struct op_attribute {
  const char *name;
  attr_reader read; /* NULL: accepted and ignored (it does not change the sharding rule) */
  size_t field;
} op_attribute;

static const op_attribute op_attributes[] = {
    {"transpose_a", attr_flag, offsetof(sk_op_desc, transpose_a)},
    {"transpose_b", attr_flag, offsetof(sk_op_desc, transpose_b)},
    {"keep_dims", attr_flag, offsetof(sk_op_desc, keep_dims)},
    {"full_batch", attr_flag, offsetof(sk_op_desc, full_batch)},
    {"gradients_mean", attr_flag, offsetof(sk_op_desc, gradients_mean)},
    {"repeated_num_in_dev_matrix_right", attr_repeat_right, 0},
    {"axis", attr_axis, 0},
    {"begin_norm_axis", attr_begin_norm_axis, 0},
    {"perm", attr_perm, 0},
    {"depth", attr_depth, 0},
    {"shape", attr_shape, 0},
    {"shapes", attr_shapes, 0},
    {"out_strategy", attr_out_strategy, 0},
    {"activation_type", NULL, 0}, /* Activation's: picks the operator (op_activation_type) */
    /* what MindSpore's tests pass that leaves the layouts and collectives as they are */
    {"is_grad", NULL, 0}, {"types", NULL, 0}, {"output_num", NULL, 0}, {"batch_dims", NULL, 0},
    {"keep_prob", NULL, 0}, {"seed", NULL, 0}, {"seed2", NULL, 0}, {"epsilon", NULL, 0},
    {"data_format", NULL, 0}, {"begin_params_axis", NULL, 0}, {"shared_name", NULL, 0},
    {"dtype", NULL, 0}, {"dst_type", NULL, 0}, {"sparse", NULL, 0}, {"reduction", NULL, 0},
};

/* The length of NAME in --attr's NAME=VALUE. */
static size_t attr_name_length(const char *arg) {
  const char *eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg) : 0;
  while (len > 0 && arg[len - 1] == ' ') len--;
  if (!eq || len == 0) die("--attr takes NAME=VALUE, e.g. transpose_b=True; not '%s'", arg);
  return len;
}

/* --attr activation_type='relu' (the last one given), which makes Activation the operator it
   names (sk_op_kind_parse, before the other attributes are read); NULL when not given. */
static const char *op_activation_type(const char *const *attrs, int nattrs) {
  static const char name[] = "activation_type";
  const char *type = NULL;
  for (int i = 0; i < nattrs; i++) {
    const char *arg = attrs[i];
    if (attr_name_length(arg) != sizeof name - 1 || strncmp(arg, name, sizeof name - 1)) continue;
    pylit_doc *doc = parse_flag("--attr activation_type", strchr(arg, '=') + 1);
    if (doc->nodes[doc->root].kind != PYLIT_STR) need(pylit_expected(doc, doc->root, "a string such as 'relu'"), doc);
    type = doc->nodes[doc->root].text; /* the doc lives as long as the run */
  }
  return type;
}

static void op_read_attribute(sk_op_desc *d, const char *arg) {
  const char *eq = strchr(arg, '=');
  size_t len = attr_name_length(arg);
  for (size_t i = 0; i < sizeof op_attributes / sizeof *op_attributes; i++) {
    const op_attribute *a = &op_attributes[i];
    if (strlen(a->name) != len || strncmp(a->name, arg, len)) continue;
    /* the flag's name lives as long as the doc that quotes it: the whole run */
    static char flag_names[sizeof op_attributes / sizeof *op_attributes][64];
    char *flag = flag_names[i];
    snprintf(flag, sizeof flag_names[i], "--attr %s", a->name);
    pylit_doc *doc = parse_flag(flag, eq + 1);
    if (a->read) a->read(d, doc, a->field);
    return;
  }
  die("--attr: unknown attribute '%.*s' (--help lists them)", (int)len, arg);
}

/* --params: the inputs that are parameters, "1" or "(0,1)". */
static uint32_t op_read_params(const char *text) {
  long long v[SK_OP_MAX_INPUTS];
  pylit_doc *doc = parse_flag("--params", text);
  int n = pylit_int_tuple(doc, doc->root, 0, SK_OP_MAX_INPUTS - 1, "an input index", v, SK_OP_MAX_INPUTS);
  need(n, doc);
  uint32_t mask = 0;
  for (int i = 0; i < n; i++) mask |= 1u << v[i];
  return mask;
}

/* ---- the explainer's output: text, or one JSON object as Python's json.dumps writes it ---- */

/* "[16, 196]"; "[]" for a scalar. */
static void format_dims(const int64_t *v, int n, char *buf, size_t cap) {
  buf[0] = '\0';
  append(buf, cap, "[");
  for (int i = 0; i < n; i++) append(buf, cap, "%s%lld", i ? ", " : "", (long long)v[i]);
  append(buf, cap, "]");
}

/* MindSpore's numeric tensor_map, counted from the right, -1 unsplit, a list for a dim split
   over several axes: "[2, [1, 0], -1]"; "[]" for a scalar. */
static void format_tensor_map(const sk_layout *l, char *buf, size_t cap) {
  sk_dim_map ms[SK_MAX_DIMS];
  sk_layout_to_ms_map(l, ms);
  buf[0] = '\0';
  append(buf, cap, "[");
  for (int d = 0; d < l->ndims; d++) {
    append(buf, cap, d ? ", " : "");
    if (ms[d].naxes == 0) append(buf, cap, "-1");
    if (ms[d].naxes == 1) append(buf, cap, "%d", ms[d].axes[0]);
    if (ms[d].naxes > 1) {
      append(buf, cap, "[");
      for (int j = 0; j < ms[d].naxes; j++) append(buf, cap, "%s%d", j ? ", " : "", ms[d].axes[j]);
      append(buf, cap, "]");
    }
  }
  append(buf, cap, "]");
}

/* The global ranks of `rank`'s group along `axes`: "[0, 4]". */
static void format_group(const sk_mesh *m, int rank, uint32_t axes, char *buf, size_t cap) {
  static int ranks[SK_MAX_DEVICES];
  int n;
  sk_error e;
  check(sk_mesh_group(m, rank, axes, ranks, SK_MAX_DEVICES, &n, &e), &e);
  buf[0] = '\0';
  append(buf, cap, "[");
  for (int i = 0; i < n; i++) append(buf, cap, "%s%d", i ? ", " : "", ranks[i]);
  append(buf, cap, "]");
}

/* Room for the longest group: 4096 ranks of up to 4 digits and ", ". */
#define GROUP_TEXT_MAX (SK_MAX_DEVICES * 6 + 4)

/* {"shape": [...], "tensor_map": [...], "slice_shape": [...]} */
static void json_tensor(const sk_layout *l) {
  char text[512];
  int64_t slice[SK_MAX_DIMS];
  if (l->ndims > 0) sk_layout_slice_shape(l, slice);
  format_dims(l->shape, l->ndims, text, sizeof text);
  printf("{\"shape\": %s", text);
  format_tensor_map(l, text, sizeof text);
  printf(", \"tensor_map\": %s", text);
  format_dims(slice, l->ndims, text, sizeof text);
  printf(", \"slice_shape\": %s}", text);
}

static void json_tensors(const sk_layout *tensors, int n) {
  putchar('[');
  for (int i = 0; i < n; i++) fputs(i ? ", " : "", stdout), json_tensor(&tensors[i]);
  putchar(']');
}

/* One collective: {"op": "AllReduce", "group": [...]}, with its reduction when not a sum, its
   scale when not 1, and, for a gradient, the input it belongs to. */
static void json_comm(const sk_mesh *m, const sk_op_comm *c, int rank, int input) {
  static char group[GROUP_TEXT_MAX];
  format_group(m, rank, c->axes, group, sizeof group);
  printf("{\"op\": \"%s\", \"group\": %s", sk_coll_kind_ms_name(c->kind), group);
  bool reduces = c->kind == SK_COLL_ALLREDUCE || c->kind == SK_COLL_REDUCE_SCATTER || c->kind == SK_COLL_REDUCE;
  if (reduces && c->op != SK_SUM) printf(", \"reduce\": \"%s\"", sk_redop_name(c->op));
  if (c->scale != 1) printf(", \"scale\": %.17g", c->scale);
  if (input >= 0) printf(", \"input\": %d", input);
  putchar('}');
}

static void print_plan_json(const sk_op_plan *p, const sk_op_desc *d, int rank) {
  static char group[GROUP_TEXT_MAX];
  printf("{\"ok\": true, \"dev_matrix\": [");
  for (int k = 0; k < p->mesh.naxes; k++) printf("%s%d", k ? ", " : "", p->mesh.dims[k]);
  printf("], \"inputs\": ");
  json_tensors(p->in, p->ninputs);
  printf(", \"outputs\": ");
  json_tensors(p->out, p->noutputs);
  if (p->redistributed) { /* only then: a plan without out_strategy prints as before */
    printf(", \"redistributed_outputs\": [");
    for (int k = 0, n = 0; k < p->noutputs; k++)
      if ((p->redistributed >> k) & 1u) {
        printf("%s{\"output\": %d, \"dev_matrix\": [", n++ ? ", " : "", k);
        for (int a = 0; a < p->wanted[k].mesh.naxes; a++) printf("%s%d", a ? ", " : "", p->wanted[k].mesh.dims[a]);
        printf("], \"layout\": ");
        json_tensor(&p->wanted[k]);
        putchar('}');
      }
    putchar(']');
  }
  printf(", \"forward_ops\": [");
  if (p->fwd.kind != SK_COLL_NONE) json_comm(&p->mesh, &p->fwd, rank, -1);
  printf("], \"backward_ops\": [");
  for (int i = 0, k = 0; i < p->ninputs; i++)
    if (p->bwd_in[i].kind != SK_COLL_NONE) {
      fputs(k++ ? ", " : "", stdout);
      json_comm(&p->mesh, &p->bwd_in[i], rank, i);
    }
  printf("], \"mirror_ops\": [");
  for (int i = 0; i < p->ninputs; i++) {
    fputs(i ? ", " : "", stdout);
    if (p->mirror[i].kind == SK_COLL_NONE) {
      fputs("null", stdout);
      continue;
    }
    format_group(&p->mesh, rank, p->mirror[i].axes, group, sizeof group);
    printf("{\"op\": \"%s\", \"group\": %s", MS_MIRROR_OPERATOR, group);
    /* MindSpore's mean_flag: the parameter's gradient is divided by the group size */
    if ((d->params & (1u << i)) && d->gradients_mean) printf(", \"mean\": true");
    putchar('}');
  }
  printf("]}\n");
}

/* "AllReduce over d1, group [0, 1, 2, 3]" (or "none"). */
static void print_comm_text(const sk_mesh *m, const sk_op_comm *c, const char *op_name, int rank) {
  static char group[GROUP_TEXT_MAX];
  if (c->kind == SK_COLL_NONE) {
    puts("none");
    return;
  }
  printf("%s", op_name ? op_name : sk_coll_kind_ms_name(c->kind));
  if (c->op != SK_SUM && c->kind != SK_COLL_ALLGATHER && c->kind != SK_COLL_ALLTOALL) printf(" (%s)", sk_redop_name(c->op));
  printf(" over ");
  for (int a = 0, k = 0; a < m->naxes; a++)
    if (c->axes & (1u << a)) printf("%s%s", k++ ? "," : "", m->names[a]);
  format_group(m, rank, c->axes, group, sizeof group);
  printf(", group %s", group);
  if (c->scale != 1) printf(", scaled by %g", c->scale);
  putchar('\n');
}

/* The first column of the text output: "input 1", "forward", ... */
static void print_label(const char *what, int i) {
  char label[32];
  if (i < 0)
    snprintf(label, sizeof label, "%s", what);
  else
    snprintf(label, sizeof label, "%s %d", what, i);
  printf("%-12s ", label);
}

static void print_tensor_text(const char *what, int i, const sk_layout *l) {
  char shape[256], map[256], slice[256];
  int64_t s[SK_MAX_DIMS];
  if (l->ndims > 0) sk_layout_slice_shape(l, s);
  format_dims(l->shape, l->ndims, shape, sizeof shape);
  format_tensor_map(l, map, sizeof map);
  format_dims(s, l->ndims, slice, sizeof slice);
  print_label(what, i);
  printf("shape %s  tensor_map %s  slice_shape %s\n", shape, map, slice);
}

static void print_plan_text(const sk_op_plan *p, const sk_op_desc *d, int ndevices, int rank) {
  char mesh[512];
  sk_mesh_format(&p->mesh, mesh, sizeof mesh);
  printf("%s on %d devices; groups are rank %d's\n", sk_op_kind_name(d->kind), ndevices, rank);
  print_label("dev_matrix", -1);
  printf("[");
  for (int k = 0; k < p->mesh.naxes; k++) printf("%s%d", k ? ", " : "", p->mesh.dims[k]);
  printf("]  (%s)\n", mesh);
  for (int i = 0; i < p->ninputs; i++) print_tensor_text("input", i, &p->in[i]);
  for (int i = 0; i < p->noutputs; i++) print_tensor_text("output", i, &p->out[i]);
  for (int i = 0; i < p->noutputs; i++) /* out_strategy asked for another layout: moved after the forward */
    if ((p->redistributed >> i) & 1u) {
      sk_mesh_format(&p->wanted[i].mesh, mesh, sizeof mesh);
      print_tensor_text("moved to", i, &p->wanted[i]);
      printf("%13s(on %s, a redistribution after the forward: out_strategy)\n", "", mesh);
    }
  print_label("forward", -1);
  print_comm_text(&p->mesh, &p->fwd, NULL, rank);
  for (int i = 0; i < p->ninputs; i++) {
    print_label("backward", i);
    print_comm_text(&p->mesh, &p->bwd_in[i], NULL, rank);
  }
  for (int i = 0; i < p->ninputs; i++) {
    print_label("mirror", i);
    print_comm_text(&p->mesh, &p->mirror[i], MS_MIRROR_OPERATOR " (AllReduce)", rank);
    if (p->grad[i].kind != SK_COLL_NONE && p->grad[i].scale != 1)
      printf("%13sparameter %d's gradient scaled by %g (gradients_mean)\n", "", i, p->grad[i].scale);
  }
}

/* A strategy the rules (or the reading of it) reject: ok false in JSON, else the message on
   stderr; exit 2 either way. */
static _Noreturn void reject(int json, const char *msg) {
  if (!json) die("%s", msg);
  print_json_error(msg);
  exit(2);
}

/* ---- optimizer parallel (--hsdp): one parameter under MindSpore's hsdp --------------------- */

/* What --hsdp explains, gathered once so that the text and the JSON say the same. */
typedef struct hsdp_report {
  const sk_layout *l;
  sk_hsdp h;
  sk_dtype dt;
  int rank;
  sk_opt_shard os;
  sk_slice mp;                  /* rank's model-parallel slice */
  int *gather, ngather;         /* the AllGather group; none when not sharded */
  int *mirror, nmirror;         /* the Mirror group; none when it would be the rank alone */
  int *replicas, nreplicas;     /* the replica group */
} hsdp_report;

/* "[0, 4]"; "[]" for no rank. */
static void format_ranks(const int *ranks, int n, char *buf, size_t cap) {
  buf[0] = '\0';
  append(buf, cap, "[");
  for (int i = 0; i < n; i++) append(buf, cap, "%s%d", i ? ", " : "", ranks[i]);
  append(buf, cap, "]");
}

static int64_t param_bytes(const sk_layout *l, sk_dtype dt) {
  int64_t bytes = (int64_t)sk_dtype_size(dt);
  for (int d = 0; d < l->ndims; d++) bytes *= l->shape[d];
  return bytes;
}

static void print_hsdp_json(const hsdp_report *r) {
  static char text[GROUP_TEXT_MAX];
  int64_t mp_shape[SK_MAX_DIMS];
  sk_layout_slice_shape(r->l, mp_shape);
  printf("{\"dev_matrix\": [");
  for (int k = 0; k < r->l->mesh.naxes; k++) printf("%s%d", k ? ", " : "", r->l->mesh.dims[k]);
  format_dims(r->l->shape, r->l->ndims, text, sizeof text);
  printf("], \"shape\": %s", text);
  format_tensor_map(r->l, text, sizeof text);
  printf(", \"tensor_map\": %s, \"dtype\": \"%s\", \"bytes\": %lld, \"rank\": %d", text, sk_dtype_name(r->dt),
         (long long)param_bytes(r->l, r->dt), r->rank);
  printf(", \"hsdp\": {\"shard_size\": %d, \"threshold_kb\": %lld, \"optimizer_level\": \"%s\"}", r->h.shard_size,
         (long long)r->h.threshold_kb, sk_hsdp_level_name(r->h.level));
  format_dims(mp_shape, r->l->ndims, text, sizeof text);
  printf(", \"slice_shape\": %s", text);
  format_ranks(r->replicas, r->nreplicas, text, sizeof text);
  printf(", \"replica_group\": %s", text);
  /* the promised members first: size, group, slice_shape, rows */
  format_ranks(r->gather, r->ngather, text, sizeof text);
  printf(", \"opt_shard\": {\"size\": %d, \"group\": %s", r->os.size, text);
  format_dims(r->os.slice_shape, r->os.ndims, text, sizeof text);
  printf(", \"slice_shape\": %s, \"rows\": [%lld, %lld]", text, (long long)r->os.rows_start, (long long)r->os.rows_stop);
  printf(", \"sharded\": %s, \"replicas\": %d, \"index\": %d", r->os.size ? "true" : "false", r->os.replicas, r->os.index);
  format_ranks(r->mirror, r->nmirror, text, sizeof text);
  printf(", \"mirror_group\": %s, \"why\": ", text);
  json_string(r->os.why);
  printf("}}\n");
}

static void print_hsdp_text(const hsdp_report *r, const char *name) {
  static char text[GROUP_TEXT_MAX];
  char mesh[512];
  int64_t mp_shape[SK_MAX_DIMS];
  sk_layout_slice_shape(r->l, mp_shape);
  sk_mesh_format(&r->l->mesh, mesh, sizeof mesh);
  format_dims(r->l->shape, r->l->ndims, text, sizeof text);
  printf("%s %s %s (%lld bytes) on %d devices (%s); rank %d\n", name, text, sk_dtype_name(r->dt),
         (long long)param_bytes(r->l, r->dt), r->l->mesh.size, mesh, r->rank);
  printf("hsdp         shard_size %d, threshold %lld KB, %s\n", r->h.shard_size, (long long)r->h.threshold_kb,
         sk_hsdp_level_name(r->h.level));
  format_dims(mp_shape, r->l->ndims, text, sizeof text);
  printf("model slice  %s, rows [%lld, %lld)", text, (long long)r->mp.start[0], (long long)r->mp.stop[0]);
  format_ranks(r->replicas, r->nreplicas, text, sizeof text);
  printf(", %d replica%s %s\n", r->nreplicas, r->nreplicas == 1 ? "" : "s", text);
  if (!r->os.size) {
    printf("opt shard    none: %s\n", r->os.why);
  } else {
    format_dims(r->os.slice_shape, r->os.ndims, text, sizeof text);
    printf("opt shard    %d ways: keeps %s, rows [%lld, %lld) (chunk %d)\n", r->os.size, text,
           (long long)r->os.rows_start, (long long)r->os.rows_stop, r->os.index);
    format_ranks(r->gather, r->ngather, text, sizeof text);
    printf("allgather    %s (forward AllGather, backward ReduceScatter)\n", text);
  }
  format_ranks(r->mirror, r->nmirror, text, sizeof text);
  printf("mirror       %s\n", r->nmirror ? text : "none (nothing left to sum)");
}

/* ---- command line ------------------------------------------------------------------------------ */

#define MAX_ATTRS 32

typedef struct options {
  const char *mesh, *layout, *shape, *map, *ms_map, *devices, *strategy, *repeat, *name;
  const char *to, *partial, *alltoall, *dtype;
  const char *op, *shapes, *shard, *rank, *params;
  const char *hsdp; /* --hsdp: its value, "" included (hsdp() with no arguments) */
  const char *attrs[MAX_ATTRS]; /* --attr may repeat */
  int nattrs;
  int tsv, groups, standard, plan, mindspore, exec, json;
} options;

/* The first error in the flags. parse_args reads them all before it reports it: whether --op
   and --json are among them, after the error too, decides whether it is also JSON. */
static char args_error[1024];

static void args_fail(const char *fmt, ...) {
  va_list ap;
  if (args_error[0]) return;
  va_start(ap, fmt);
  vsnprintf(args_error, sizeof args_error, fmt, ap);
  va_end(ap);
}

/* The value of flag `name` in argv[*i]: "--flag VALUE" or "--flag=VALUE"; NULL when argv[*i] is
   another flag; "" (and the error kept) when the value is missing. */
static const char *flag_value(int argc, char **argv, int *i, const char *name) {
  size_t len = strlen(name);
  const char *a = argv[*i];
  if (strncmp(a, name, len) || (a[len] != '\0' && a[len] != '=')) return NULL;
  if (a[len] == '=') return a + len + 1;
  if (*i + 1 >= argc) return args_fail("%s needs a value", name), "";
  return argv[++*i];
}

static void parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  const struct { const char *flag; int *set; } switches[] = {
      {"--tsv", &o->tsv}, {"--groups", &o->groups}, {"--standard", &o->standard}, {"--plan", &o->plan},
      {"--mindspore", &o->mindspore}, {"--exec", &o->exec}, {"--json", &o->json}};
  const struct { const char *flag; const char **value; } valued[] = {
      {"--mesh", &o->mesh}, {"--layout", &o->layout}, {"--shape", &o->shape}, {"--map", &o->map},
      {"--ms-map", &o->ms_map}, {"--devices", &o->devices}, {"--strategy", &o->strategy}, {"--repeat", &o->repeat},
      {"--name", &o->name}, {"--to", &o->to}, {"--partial", &o->partial}, {"--alltoall", &o->alltoall},
      {"--dtype", &o->dtype}, {"--op", &o->op}, {"--shapes", &o->shapes}, {"--shard", &o->shard},
      {"--rank", &o->rank}, {"--params", &o->params}, {"--hsdp", &o->hsdp}};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if ((!strcmp(a, "-h") || !strcmp(a, "--help")) && !args_error[0]) { /* after an error: that error */
      fputs(usage, stdout);
      fputs(usage_hsdp, stdout);
      fputs(usage_op, stdout);
      exit(0);
    }
    int known = 0;
    for (size_t k = 0; k < sizeof switches / sizeof *switches && !known; k++)
      if (!strcmp(a, switches[k].flag)) *switches[k].set = known = 1;
    if ((v = flag_value(argc, argv, &i, "--attr"))) {
      if (o->nattrs == MAX_ATTRS)
        args_fail("more than %d --attr", MAX_ATTRS);
      else
        o->attrs[o->nattrs++] = v;
      known = 1;
    }
    for (size_t k = 0; k < sizeof valued / sizeof *valued && !known; k++)
      if ((v = flag_value(argc, argv, &i, valued[k].flag))) {
        if (*valued[k].value) args_fail("%s given twice", valued[k].flag);
        *valued[k].value = v;
        known = 1;
      }
    if (!known) args_fail("unknown option '%s' (try --help)", a);
  }
  json_errors = o->op && o->json;
  if (args_error[0]) die("%s", args_error);
}

/* One integer flag, e.g. --devices 8, in [lo, hi]. */
static int parse_int_flag(const char *flag, const char *text, long long lo, long long hi) {
  pylit_doc *doc = parse_flag(flag, text);
  long long v = 0;
  if (doc->nodes[doc->root].kind != PYLIT_INT) die("%s takes one number, not '%s'", flag, text);
  if (doc->nodes[doc->root].ival < lo || doc->nodes[doc->root].ival > hi)
    die("%s %lld; allowed %lld..%lld", flag, doc->nodes[doc->root].ival, lo, hi);
  need(pylit_int(doc, doc->root, lo, hi, "a number", &v), doc);
  return (int)v;
}

static int finish_output(void) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "sk-layout: error: writing the output failed\n");
    return 1;
  }
  return 0;
}

/* --op: one operator's sharding, as MindSpore's rules derive it (sk_ops.h). */
static int op_main(const options *o) {
  const char *layout_only[] = {o->mesh, o->layout, o->shape, o->map, o->ms_map, o->strategy, o->repeat, o->name, o->to,
                               o->partial, o->alltoall, o->dtype};
  for (size_t k = 0; k < sizeof layout_only / sizeof *layout_only; k++)
    if (layout_only[k]) die("--op takes --shapes, --shard, --devices, --rank, --attr, --params, --json; not the layout flags");
  if (o->tsv || o->groups || o->standard || o->plan || o->mindspore || o->exec)
    die("--op takes --shapes, --shard, --devices, --rank, --attr, --params, --json; not the layout flags");
  if (!o->shapes) die("--op needs --shapes (try --help)");
  if (!o->devices) die("--op needs --devices");
  sk_op_desc d;
  sk_error e;
  memset(&d, 0, sizeof d);
  if (!sk_op_kinds_named(o->op)) die("--op: unknown operator '%s' (MindSpore's primitive names)", o->op);
  if (sk_op_kind_parse(o->op, op_activation_type(o->attrs, o->nattrs), &d.kind, &e)) die("--op: %s", e.msg);
  int ndevices = parse_int_flag("--devices", o->devices, 1, SK_MAX_DEVICES);
  int rank = o->rank ? parse_int_flag("--rank", o->rank, 0, ndevices - 1) : 0;
  op_read_shapes(&d, o->shapes);
  for (int i = 0; i < o->nattrs; i++) op_read_attribute(&d, o->attrs[i]);
  if (o->params) d.params = op_read_params(o->params);
  char msg[600];
  if (o->shard && pylayout_is_layout_text(o->shard)) {
    if (pyshard_in_strategy("--shard", o->shard, &d, msg, sizeof msg)) die("%s", msg);
  } else if (o->shard && op_read_strategy(&d, o->shard, ndevices) == 0 && d.ninputs > 0) {
    /* desc.nstrategies 0 means "one per input", so an empty strategy is refused here, as the
       rules word it */
    snprintf(msg, sizeof msg, "%s: strategy has 0 tuples for %d input%s", sk_op_kind_name(d.kind), d.ninputs,
             d.ninputs == 1 ? "" : "s");
    reject(o->json, msg);
  }
  if (op_out_strategy_text) op_read_out_strategy(&d, op_out_strategy_text);
  sk_op_plan p;
  if (sk_op_plan_make(&d, ndevices, &p, &e) != SK_OK) reject(o->json, e.msg);
  if (o->json)
    print_plan_json(&p, &d, rank);
  else
    print_plan_text(&p, &d, ndevices, rank);
  return finish_output();
}

static void check_layout_flags(const options *o) {
  const char *op_only[] = {o->shapes, o->shard, o->hsdp ? NULL : o->rank, o->params};
  for (size_t k = 0; k < sizeof op_only / sizeof *op_only; k++)
    if (op_only[k]) die("--shapes, --shard and --params go with --op, --rank with --op or --hsdp");
  if (o->nattrs) die("--attr goes with --op");
  if (o->json && !o->hsdp) die("--json goes with --op or --hsdp");
  if (o->tsv + o->groups + o->standard > 1) die("choose one of --tsv, --groups, --standard");
  if (o->to && (o->groups || o->standard)) die("--groups and --standard describe one layout; not with --to");
  if (!o->to) {
    if (o->plan) die("--plan needs --to");
    if (o->partial) die("--partial needs --to");
    if (o->mindspore) die("--mindspore needs --to");
    if (o->exec) die("--exec needs --to");
    if (o->dtype && !o->hsdp) die("--dtype needs --to or --hsdp");
  }
  if (o->alltoall && !o->mindspore) die("--alltoall needs --mindspore");
  if (o->name && !*o->name) die("--name takes a label for the table, not ''");
  if (!o->shape) die("--shape is required (try --help)");
  if (o->map && o->ms_map) die("give --map or --ms-map, not both");
  if ((o->mesh != NULL) + (o->layout != NULL) + (o->strategy != NULL || o->devices != NULL) > 1)
    die("give one of --mesh, --layout, --strategy");
  if (!o->mesh && !o->layout && !o->strategy) die("give --mesh (with --map), --layout or --strategy (with --devices)");
  if (o->devices && !o->strategy) die("--devices needs --strategy");
  if (o->repeat && !o->strategy) die("--repeat needs --strategy");
  if (o->strategy && (o->map || o->ms_map)) die("--map and --ms-map go with --mesh, not --strategy");
}

/* --strategy S --devices N [--repeat SIDE]: the layout an operator's strategy gives its input. */
static void layout_from_strategy_flags(const options *o, sk_layout *l, int ndims, const int64_t *shape) {
  long long st_ll[SK_MAX_DIMS] = {0};
  int nst = parse_positive_ints("--strategy", o->strategy, st_ll, SK_MAX_DIMS);
  if (nst != ndims) die("--strategy has %d values; --shape has %d", nst, ndims);
  int strategy[SK_MAX_DIMS];
  long long prod = 1;
  for (int d = 0; d < nst; d++) {
    if (st_ll[d] > SK_MAX_DEVICES) die("--strategy value %lld is larger than %d devices", st_ll[d], SK_MAX_DEVICES);
    strategy[d] = (int)st_ll[d];
    prod *= st_ll[d];
    if (prod > SK_MAX_DEVICES) die("--strategy '%s' needs more than %d devices", o->strategy, SK_MAX_DEVICES);
  }
  int devices = o->devices ? parse_int_flag("--devices", o->devices, 1, SK_MAX_DEVICES) : (int)prod;
  sk_repeat repeat = SK_REPEAT_RIGHT;
  if (o->repeat) {
    if (!strcmp(o->repeat, "left"))
      repeat = SK_REPEAT_LEFT;
    else if (strcmp(o->repeat, "right"))
      die("--repeat takes right or left, not '%s'", o->repeat);
  }
  sk_error e;
  check(sk_layout_from_strategy(l, devices, ndims, shape, strategy, repeat, &e), &e);
}

/* The layout the flags describe: a mesh (--mesh or --layout) and a map, or a strategy. */
static void layout_from_flags(const options *o, sk_layout *l) {
  long long shape_ll[SK_MAX_DIMS] = {0};
  int ndims = parse_positive_ints("--shape", o->shape, shape_ll, SK_MAX_DIMS);
  int64_t shape[SK_MAX_DIMS];
  for (int d = 0; d < ndims; d++) shape[d] = (int64_t)shape_ll[d];
  if (o->strategy) {
    layout_from_strategy_flags(o, l, ndims, shape);
    return;
  }
  sk_mesh m;
  sk_error e;
  pylit_doc *layout_doc = NULL;
  int layout_map = -1;
  if (o->layout) {
    layout_doc = parse_flag("--layout", o->layout);
    need(pylayout_mesh(layout_doc, layout_doc->root, &m, &layout_map), layout_doc);
    if (layout_map >= 0 && (o->map || o->ms_map)) die("--layout already has the map (its call); no --map or --ms-map");
  } else {
    check(sk_mesh_parse(&m, o->mesh, &e), &e);
  }
  if (layout_map >= 0) {
    char canonical[PYLAYOUT_MAP_MAX];
    need(pylayout_map_text(layout_doc, layout_map, ndims, canonical, sizeof canonical), layout_doc);
    check(sk_layout_parse(l, &m, canonical, ndims, shape, &e), &e);
  } else if (o->ms_map) {
    layout_from_ms_map_flag(l, &m, o->ms_map, ndims, shape);
  } else if (o->map) {
    layout_from_map_flag(l, &m, "--map", o->map, ndims, shape);
  } else {
    check(sk_layout_init(l, &m, ndims, shape, NULL, &e), &e);
  }
}

/* --hsdp explains one parameter: the layout flags plus --dtype, --rank, --json and --name; the
   other outputs describe something else, so they are refused rather than ignored. */
static void check_hsdp_flags(const options *o) {
  if (!o->shape || (!o->mesh && !o->layout && !o->strategy))
    die("--hsdp needs the parameter's layout: --shape and --mesh (with --map or --ms-map), --layout or --strategy");
  if (o->to || o->partial || o->mindspore || o->alltoall || o->plan || o->exec)
    die("--hsdp explains one layout; not with --to or the redistribution flags");
  if (o->tsv || o->groups || o->standard) die("--hsdp prints its own explanation; not with --tsv, --groups or --standard");
}

/* --hsdp: whether optimizer parallel shards the parameter laid out by `l`, and rank R's part. */
static int hsdp_main(const options *o, const sk_layout *l) {
  static int gather[SK_MAX_DEVICES], mirror[SK_MAX_DEVICES], replicas[SK_MAX_DEVICES];
  hsdp_report r;
  sk_error e;
  memset(&r, 0, sizeof r);
  r.l = l, r.dt = SK_F32, r.gather = gather, r.mirror = mirror, r.replicas = replicas;
  check(sk_hsdp_parse(o->hsdp, &r.h, &e), &e);
  if (o->dtype && !sk_dtype_from_name(o->dtype, &r.dt))
    die("--dtype: unknown type '%s' (f32, f16, bf16, f64, i8, u8, i32, i64, or float, half, bfloat16, double, ...)",
        o->dtype);
  r.rank = o->rank ? parse_int_flag("--rank", o->rank, 0, l->mesh.size - 1) : 0;
  check(sk_opt_shard_of(l, r.dt, &r.h, r.rank, &r.os, &e), &e);
  check(sk_opt_shard_groups(l, r.dt, &r.h, r.rank, gather, &r.ngather, mirror, &r.nmirror, SK_MAX_DEVICES, &e), &e);
  check(sk_layout_replica_group(l, r.rank, replicas, SK_MAX_DEVICES, &r.nreplicas, &e), &e);
  check(sk_layout_slice(l, r.rank, &r.mp, &e), &e);
  /* a Mirror over the rank alone sums nothing: MindSpore inserts none */
  if (r.nmirror == 1) r.nmirror = 0;
  if (o->json)
    print_hsdp_json(&r);
  else
    print_hsdp_text(&r, o->name ? o->name : "parameter");
  return finish_output();
}

/* --shape-util FUNC LIST [LIST]: one of MindSpore's shape helpers (sk_layout_algebra.h). */
static int shape_util_main(int argc, char **argv) {
  static const struct {
    const char *name;
    sk_result (*unary)(const sk_int_list *, sk_int_list *, sk_error *);
    sk_result (*binary)(const sk_int_list *, const sk_int_list *, sk_int_list *, sk_error *);
  } funcs[] = {{"ShapeToAccumulateProduct", sk_shape_to_accumulate_product, NULL},
               {"ShapeToAccumulateProductReverse", sk_shape_to_accumulate_product_reverse, NULL},
               {"AccumulateProductToShape", sk_accumulate_product_to_shape, NULL},
               {"AccumulateProductReverseToShape", sk_accumulate_product_reverse_to_shape, NULL},
               {"UnifyAccumulateProduct", NULL, sk_unify_accumulate_product},
               {"UnifyShape", NULL, sk_unify_shape},
               {"ExpandAccumulateProduct", NULL, sk_expand_accumulate_product},
               {"ExpandShape", NULL, sk_expand_shape}};
  if (argc < 1) die("--shape-util needs a function name (try --help)");
  size_t f = 0;
  while (f < sizeof funcs / sizeof *funcs && strcmp(funcs[f].name, argv[0])) f++;
  if (f == sizeof funcs / sizeof *funcs) die("--shape-util: unknown function '%s' (try --help)", argv[0]);
  int want = funcs[f].unary ? 1 : 2;
  if (argc - 1 != want) die("--shape-util %s takes %d list%s, got %d", argv[0], want, want == 1 ? "" : "s", argc - 1);
  sk_int_list in[2], out;
  long long v[SK_INT_LIST_MAX] = {0};
  for (int k = 0; k < want; k++) {
    in[k].n = parse_positive_ints("--shape-util", argv[1 + k], v, SK_INT_LIST_MAX);
    for (int i = 0; i < in[k].n; i++) in[k].v[i] = v[i];
  }
  sk_error e;
  sk_result r = funcs[f].unary ? funcs[f].unary(&in[0], &out, &e) : funcs[f].binary(&in[0], &in[1], &out, &e);
  if (r) die("%s: %s", argv[0], e.msg);
  char text[SK_INT_LIST_MAX * 24];
  format_dims(out.v, out.n, text, sizeof text);
  printf("%s\n", text);
  return finish_output();
}

/* "[8, 9]" and a newline: device ids as Python prints a list. */
static void print_ids(const int *ids, int n) {
  printf("[");
  for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
  printf("]\n");
}

/* --dev-list IDS --dev-shape SHAPE --rank ID [--tensor-map MAP]: MindSpore's DeviceMatrix on a
   list of device ids (sk_device_matrix). Without --tensor-map, its group list (one group per
   dim); with it, GetDevicesByTensorMap's devices. */
static int dev_list_main(int argc, char **argv) {
  static sk_device_matrix dm;
  static const char *const flags[] = {"--dev-list", "--dev-shape", "--rank", "--tensor-map"};
  const char *val[4] = {NULL, NULL, NULL, NULL}; /* in flags' order */
  for (int i = 0; i < argc; i++) {
    int k = 0, at = i;
    const char *v = NULL;
    /* a flag that took its value moved i: no further name is tried on that value */
    while (k < 4 && i == at && !(v = flag_value(argc, argv, &i, flags[k]))) k++;
    if (k == 4) die("--dev-list takes only --dev-shape, --rank and --tensor-map, not '%s'", argv[i]);
    val[k] = v;
  }
  if (args_error[0]) die("%s", args_error);
  const char *ids_text = val[0], *shape_text = val[1], *rank_text = val[2], *map_text = val[3];
  if (!ids_text || !shape_text || !rank_text) die("--dev-list needs --dev-shape and --rank");
  static long long ids_ll[SK_MAX_DEVICES];
  static int ids[SK_MAX_DEVICES];
  long long shape_ll[SK_MAX_AXES];
  int shape[SK_MAX_AXES];
  pylit_doc *doc = parse_flag("--dev-list", ids_text);
  int n = pylit_int_tuple(doc, doc->root, 0, INT_MAX, "a device id", ids_ll, SK_MAX_DEVICES);
  need(n, doc);
  int nd = parse_positive_ints("--dev-shape", shape_text, shape_ll, SK_MAX_AXES);
  for (int i = 0; i < n; i++) ids[i] = (int)ids_ll[i];
  for (int k = 0; k < nd; k++) shape[k] = shape_ll[k] > INT_MAX ? INT_MAX : (int)shape_ll[k];
  sk_error e;
  check(sk_device_matrix_init(&dm, parse_int_flag("--rank", rank_text, 0, INT_MAX), ids, n, nd, shape, &e), &e);
  if (map_text) {
    sk_dim_map ms[SK_MAX_DIMS];
    int nm = ms_map_flag("--tensor-map", map_text, ms), got;
    check(sk_device_matrix_replica_group(&dm, ms, nm, ids, SK_MAX_DEVICES, &got, &e), &e);
    print_ids(ids, got);
  } else {
    for (int k = 0; k < nd; k++) {
      int got;
      check(sk_device_matrix_group(&dm, 1u << k, ids, SK_MAX_DEVICES, &got, &e), &e);
      printf("dim %d: ", k);
      print_ids(ids, got);
    }
  }
  return finish_output();
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--shape-util")) return shape_util_main(argc - 2, argv + 2);
  if (argc > 1 && !strcmp(argv[1], "--dev-list")) return dev_list_main(argc - 1, argv + 1);
  options o;
  parse_args(argc, argv, &o);
  if (o.op && o.hsdp) die("--hsdp explains a parameter's layout (--mesh, --layout or --strategy); not with --op");
  if (o.op) return op_main(&o);
  if (o.hsdp) check_hsdp_flags(&o);
  check_layout_flags(&o);
  sk_layout l;
  layout_from_flags(&o, &l);
  if (o.hsdp) return hsdp_main(&o, &l);
  if (o.to) return redistribution(&l, o.to, o.partial, o.mindspore, o.alltoall, o.dtype, o.plan, o.tsv, o.exec);
  if (o.tsv)
    print_tsv(&l);
  else if (o.groups)
    print_groups(&l);
  else if (o.standard)
    print_standard(&l);
  else
    print_table(&l, o.name ? o.name : "tensor");
  return finish_output();
}
