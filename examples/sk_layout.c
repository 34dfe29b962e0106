/* sk-layout: explains a MindSpore-style layout -- which slice of a tensor every rank holds, and
   which ranks hold identical copies -- and, with --to, the redistribution plan between two
   layouts (sk_redist.h), optionally executed on the threads backend and checked.

     sk-layout --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)"
     sk-layout --devices 8 --strategy 4,1 --shape 16,512 --repeat left --groups
     sk-layout --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --plan
     sk-layout --mesh a=2,b=4 --shape 16,512 --map None,None --partial b --to b,None --exec

   Exit status: 0 for a valid query (and --exec found every element right), 1 if --exec found a
   wrong element or writing the output fails, 2 (and one line "sk-layout: error: ..." on stderr)
   for bad input. */
#define SK_IMPL
#include "sk_layout.h"
#include "sk_comm.h"
#include "sk_threads.h"
#include "sk_redist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "Usage: sk-layout --mesh NAME=SIZE,... --shape L0,L1,... [--map TEXT | --ms-map TEXT] [output]\n"
    "       sk-layout --devices N --strategy S0,S1,... --shape L0,L1,... [--repeat right|left] [output]\n"
    "\n"
    "Shows how a tensor is cut across a device mesh, MindSpore semantics (rank = row-major\n"
    "coordinates, last axis fastest; in a tuple the first axis is the major factor).\n"
    "\n"
    "  --mesh TEXT        device matrix with named axes, e.g. dp=2,sp=2,mp=2 (1..4096 devices)\n"
    "  --shape LIST       tensor shape, e.g. 16,784\n"
    "  --map TEXT         MindSpore layout(...) arguments, e.g. \"mp,(sp,dp)\" or \"(sp,dp),None\"\n"
    "                     (default: nothing split)\n"
    "  --ms-map TEXT      the same as a numeric tensor_map, e.g. \"(0,(1,2))\" (values count mesh\n"
    "                     axes from the right, -1 = unsplit)\n"
    "  --devices N        with --strategy: number of devices (default: the strategy's product)\n"
    "  --strategy LIST    a shard strategy, e.g. 4,1: mesh d0,d1,... plus a repeat axis 'rep'\n"
    "                     when N > product\n"
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
    "  -h, --help         this text\n";

/* One line on stderr, exit 2: the contract for bad input. _Noreturn also tells the static
   analyzer that the paths after a die() never run. */
static _Noreturn void die(const char *fmt, ...) {
  va_list ap;
  fputs("sk-layout: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(2);
}

/* A comma list of positive integers; at most `max` of them. Returns the count. */
static int parse_list(const char *flag, const char *text, long long *out, int max) {
  int n = 0;
  const char *p = text;
  for (;;) {
    while (*p == ' ') p++;
    if (*p < '0' || *p > '9') die("%s: '%s' is not a comma list of positive integers", flag, text);
    long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
      v = v * 10 + (*p - '0');
      if (v > (1LL << 50)) die("%s: a value in '%s' is too large", flag, text);
    }
    if (v < 1) die("%s: values must be >= 1 in '%s'", flag, text);
    if (n == max) die("%s: '%s' has more than %d values", flag, text, max);
    out[n++] = v;
    while (*p == ' ') p++;
    if (!*p) return n;
    if (*p != ',') die("%s: '%s' is not a comma list of positive integers", flag, text);
    p++;
  }
}

static void check(sk_result r, const sk_error *e) {
  if (r != SK_OK) die("%s", e->msg);
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
  unsigned char *want = (unsigned char *)malloc(es + 1), *parts = (unsigned char *)malloc(es * (size_t)x->gsize + 1);
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
        sk_reduce_local(want, srcs, x->gsize, 1, d->dtype, SK_SUM); /* rank order, as the plan sums */
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
  sk_result rc = sk_world_run(w, exec_device, &x);
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
  sk_world_destroy(w);
  free(x.bad_index), free(x.got), free(x.want), free(x.rc), free(x.msg);
  return status;
}

static int redistribution(const sk_layout *from, const char *to_text, const char *partial_text, int mindspore,
                          const char *alltoall_text, const char *dtype_text, int plan, int tsv, int exec) {
  sk_redist_desc d;
  sk_error e;
  memset(&d, 0, sizeof d);
  d.from = *from;
  check(sk_layout_parse(&d.to, &from->mesh, to_text, from->ndims, from->shape, &e), &e);
  if (partial_text) check(sk_mesh_axis_mask(&from->mesh, partial_text, &d.partial, &e), &e);
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

int main(int argc, char **argv) {
  const char *mesh_text = NULL, *shape_text = NULL, *map_text = NULL, *ms_map_text = NULL;
  const char *devices_text = NULL, *strategy_text = NULL, *repeat_text = NULL, *name = NULL;
  const char *to_text = NULL, *partial_text = NULL, *alltoall_text = NULL, *dtype_text = NULL;
  int tsv = 0, groups = 0, standard = 0, plan = 0, mindspore = 0, exec = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    }
    if (!strcmp(a, "--tsv")) {
      tsv = 1;
      continue;
    }
    if (!strcmp(a, "--groups")) {
      groups = 1;
      continue;
    }
    if (!strcmp(a, "--standard")) {
      standard = 1;
      continue;
    }
    if (!strcmp(a, "--plan")) {
      plan = 1;
      continue;
    }
    if (!strcmp(a, "--mindspore")) {
      mindspore = 1;
      continue;
    }
    if (!strcmp(a, "--exec")) {
      exec = 1;
      continue;
    }
    /* flags with a value: "--flag VALUE" or "--flag=VALUE" */
    static const char *const valued[] = {"--mesh", "--shape", "--map", "--ms-map", "--devices",
                                         "--strategy", "--repeat", "--name", "--to", "--partial",
                                         "--alltoall", "--dtype"};
    const char **slot[] = {&mesh_text, &shape_text, &map_text, &ms_map_text, &devices_text,
                           &strategy_text, &repeat_text, &name, &to_text, &partial_text,
                           &alltoall_text, &dtype_text};
    int which = -1;
    const char *value = NULL;
    for (int k = 0; k < (int)(sizeof valued / sizeof *valued); k++) {
      size_t len = strlen(valued[k]);
      if (!strncmp(a, valued[k], len) && (a[len] == '\0' || a[len] == '=')) {
        which = k;
        value = a[len] == '=' ? a + len + 1 : NULL;
        break;
      }
    }
    if (which < 0) die("unknown option '%s' (try --help)", a);
    if (!value) {
      if (i + 1 >= argc) die("%s needs a value", valued[which]);
      value = argv[++i];
    }
    if (*slot[which]) die("%s given twice", valued[which]);
    *slot[which] = value;
  }

  if (tsv + groups + standard > 1) die("choose one of --tsv, --groups, --standard");
  if (to_text && (groups || standard)) die("--groups and --standard describe one layout; not with --to");
  if (!to_text) {
    if (plan) die("--plan needs --to");
    if (partial_text) die("--partial needs --to");
    if (mindspore) die("--mindspore needs --to");
    if (exec) die("--exec needs --to");
    if (dtype_text) die("--dtype needs --to");
  }
  if (alltoall_text && !mindspore) die("--alltoall needs --mindspore");
  if (!shape_text) die("--shape is required (try --help)");
  if (map_text && ms_map_text) die("give --map or --ms-map, not both");
  if (mesh_text && (strategy_text || devices_text)) die("give --mesh or --strategy, not both");
  if (!mesh_text && !strategy_text) die("give --mesh (with --map) or --strategy (with --devices)");
  if (devices_text && !strategy_text) die("--devices needs --strategy");
  if (repeat_text && !strategy_text) die("--repeat needs --strategy");
  if (strategy_text && (map_text || ms_map_text)) die("--map and --ms-map go with --mesh, not --strategy");

  long long shape_ll[SK_MAX_DIMS];
  int ndims = parse_list("--shape", shape_text, shape_ll, SK_MAX_DIMS);
  int64_t shape[SK_MAX_DIMS];
  for (int d = 0; d < ndims; d++) shape[d] = (int64_t)shape_ll[d];

  sk_layout l;
  sk_error e;
  if (mesh_text) {
    sk_mesh m;
    check(sk_mesh_parse(&m, mesh_text, &e), &e);
    if (ms_map_text) {
      sk_dim_map ms[SK_MAX_DIMS];
      int n;
      check(sk_ms_map_parse(ms_map_text, ms, &n, &e), &e);
      if (n != ndims) die("--ms-map \"%s\" has %d dims; --shape has %d", ms_map_text, n, ndims);
      check(sk_layout_from_ms_map(&l, &m, ndims, shape, ms, &e), &e);
    } else if (map_text) {
      check(sk_layout_parse(&l, &m, map_text, ndims, shape, &e), &e);
    } else {
      check(sk_layout_init(&l, &m, ndims, shape, NULL, &e), &e);
    }
  } else {
    long long st_ll[SK_MAX_DIMS];
    int nst = parse_list("--strategy", strategy_text, st_ll, SK_MAX_DIMS);
    if (nst != ndims) die("--strategy has %d values; --shape has %d", nst, ndims);
    int strategy[SK_MAX_DIMS];
    long long prod = 1;
    for (int d = 0; d < nst; d++) {
      if (st_ll[d] > SK_MAX_DEVICES) die("--strategy value %lld is larger than %d devices", st_ll[d], SK_MAX_DEVICES);
      strategy[d] = (int)st_ll[d];
      prod *= st_ll[d];
      if (prod > SK_MAX_DEVICES) die("--strategy '%s' needs more than %d devices", strategy_text, SK_MAX_DEVICES);
    }
    long long devices = prod;
    if (devices_text) {
      long long v;
      if (parse_list("--devices", devices_text, &v, 1) != 1) die("--devices takes one number");
      if (v > SK_MAX_DEVICES) die("--devices %lld; allowed 1..%d", v, SK_MAX_DEVICES);
      devices = v;
    }
    sk_repeat repeat = SK_REPEAT_RIGHT;
    if (repeat_text) {
      if (!strcmp(repeat_text, "left"))
        repeat = SK_REPEAT_LEFT;
      else if (strcmp(repeat_text, "right"))
        die("--repeat takes right or left, not '%s'", repeat_text);
    }
    check(sk_layout_from_strategy(&l, (int)devices, ndims, shape, strategy, repeat, &e), &e);
  }

  if (to_text) return redistribution(&l, to_text, partial_text, mindspore, alltoall_text, dtype_text, plan, tsv, exec);
  if (tsv)
    print_tsv(&l);
  else if (groups)
    print_groups(&l);
  else if (standard)
    print_standard(&l);
  else
    print_table(&l, name ? name : "tensor");
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "sk-layout: error: writing the output failed\n");
    return 1;
  }
  return 0;
}
