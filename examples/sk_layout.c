/* sk-layout: explains a MindSpore-style layout -- which slice of a tensor every rank holds, and
   which ranks hold identical copies. Uses only sk_layout.h's public API.

     sk-layout --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)"
     sk-layout --devices 8 --strategy 4,1 --shape 16,512 --repeat left --groups

   Exit status: 0 for a valid query, 2 (and one line "sk-layout: error: ..." on stderr) for bad
   input, 1 if writing the output fails. */
#define SK_IMPL
#include "sk_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: sk-layout --mesh NAME=SIZE,... --shape L0,L1,... [--map TEXT | --ms-map TEXT] [output]\n"
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
    "  -h, --help         this text\n";

/* One line on stderr, exit 2: the contract for bad input. */
static void die(const char *fmt, ...) {
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

int main(int argc, char **argv) {
  const char *mesh_text = NULL, *shape_text = NULL, *map_text = NULL, *ms_map_text = NULL;
  const char *devices_text = NULL, *strategy_text = NULL, *repeat_text = NULL, *name = NULL;
  int tsv = 0, groups = 0, standard = 0;
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
    /* flags with a value: "--flag VALUE" or "--flag=VALUE" */
    static const char *const valued[] = {"--mesh", "--shape", "--map", "--ms-map", "--devices",
                                         "--strategy", "--repeat", "--name"};
    const char **slot[] = {&mesh_text, &shape_text, &map_text, &ms_map_text, &devices_text,
                           &strategy_text, &repeat_text, &name};
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
