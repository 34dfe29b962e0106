/* fusion_perf.c -- where the fusion threshold pays: a simulated data-parallel backward pass whose
   gradients are AllReduced through sk_fusion.h, swept over bucket thresholds.

   build/fusion_perf --model resnet50|bert-base|gpt2|small -g N [-B threads|mpi]
                     [--link ALPHA_US,GBPS] [--zero-copy] --thresholds LIST [--auto]
                     [--csv FILE] [--plot FILE.png|svg|pdf] [-n ROUNDS] [-w WARMUP] [--tflops X]

   Per step, on every device: a barrier; then for each gradient in backward order (reverse
   parameter order) its compute delay passes, then sk_fusion_ready; then sk_fusion_wait. The
   step time is the maximum over ranks. Compute delays come from a FLOP model: a tensor of P
   parameters with Q output positions per sample costs 4*P*Q*batch FLOPs of backward (2 for the
   input gradient, 2 for the weight gradient), at --tflops per device (default 100). Measured
   time: each device sleeps until t0 + (compute so far) (absolute deadlines, so oversleeping
   never accumulates; sleeping, not spinning, because an accelerator's compute does not occupy
   the host cores that run the collectives, and 8 spinning threads on 2 cores would starve them).
   With a link model the same delays are reported with sk_comm_compute, so the modelled time is
   that of the target cluster. exposed = time - total compute (the communication not hidden).
   Gradients are registered in backward order (as DDP builds its buckets), so bucket 0 holds the
   last layers and launches first. Every threshold is a sk_fusion of its own on the same
   gradients (in-place AllReduce, f32 sum); rounds interleave the thresholds; figures are
   medians over rounds. --zero-copy lays the gradients out as views of one flat buffer in bucket
   order (zero-copy buckets); without it every gradient is its own allocation (packed buckets).
   The row "0" (no fusion) is always run: speedups are against it.
   --auto: a = per-bucket cost, c = cost per byte, from the link model (ring: a = 2(p-1)alpha,
   c = 2(p-1)/p / B) or else a quick probe of the backend (median time of a non-blocking 8-B
   AllReduce; of an 8 MiB one for c, plus the pack/unpack copy rate when packing), T_b = the
   total compute, S = the gradient bytes; the threshold is sk_fusion_pick_threshold's closed
   form (docs/cost-models.md).
   The answer: every row competes (no fusion and the auto pick too) on its measured median, since
   the mean of a few rounds on a shared machine follows its worst round; rows within noise of the
   fastest tie and the simplest wins (no fusion, then what MindSpore's comm_fusion can say, whole
   MB, then any size), printed as "# recommended fusion threshold: ..." with the comm_fusion
   config, or why there is none. --plot writes the format of the file's extension. */
#define _GNU_SOURCE
#include <math.h>
#include <strings.h>
#include <time.h>

#include "bench_common.h"

#define FP_MAXCFG 40

typedef struct fp_tensor {
  char name[48];
  size_t count;
  double positions;
  double compute_us;
} fp_tensor;

typedef struct fp_opts {
  const char *prog, *path, *model, *backend, *csv, *plot;
  const char *backend_asked; /* -B's value, NULL when not given */
  char plot_term[64];        /* gnuplot terminal for --plot, from the file's extension */
  int ngpus, rounds, warmup;
  bool zero_copy, autopick, link_on;
  sk_link_model link;
  double tflops;
  int nthr;
  size_t thr[FP_MAXCFG]; /* 0 = none, SK_FUSION_INF = inf */
  char cmdline[1024];
} fp_opts;

typedef struct fp_ctx {
  fp_opts *o;
  fp_tensor *t; /* parameter order */
  int nt, batch;
  size_t total_bytes;
  double compute_total_us;
  int n, nlocal, local0;
  int ncfg;                    /* swept configs (+1 when auto) */
  size_t cfg_thr[FP_MAXCFG + 1];
  bool cfg_auto[FP_MAXCFG + 1];
  int buckets[FP_MAXCFG + 1];
  double *meas, *model;        /* [cfg * rounds + r] */
  double probe_a, probe_c, auto_bytes;
  int done_steps, total_steps;
} fp_ctx;

static void fp_usage(FILE *f, const char *path) {
  fprintf(f,
          "Usage: %s --model resnet50|bert-base|gpt2|small|FILE --thresholds LIST [-g N] [-B threads|mpi]\n"
          "       [--link ALPHA_US,GBPS] [--zero-copy] [--auto] [--csv FILE] [--plot FILE.png|svg|pdf] [-n ROUNDS]\n"
          "       [-w WARMUP]"
          " [--tflops X]\n"
          "  --model       the gradients of a network: resnet50 bert-base gpt2 small (bench/models/NAME.txt) or a file\n"
          "  --thresholds  comma list of bucket thresholds: 0 (no fusion), sizes with K/M/G (powers of 2), inf\n"
          "                (one bucket); e.g. 0,256K,1M,4M,16M,64M,inf\n"
          "  --link        threads backend: model links of ALPHA_US latency and GBPS GB/s (reports modelled time)\n"
          "  --zero-copy   gradients are views of one flat buffer (zero-copy AllReduce buckets)\n"
          "  --auto        pick a threshold from an alpha-beta probe and the gradient ready rate, run it too\n"
          "  --csv FILE    also write the table as CSV (threshold_bytes in bytes)\n"
          "  --plot FILE   draw it with gnuplot, in the format of the extension: .png, .svg or .pdf; log threshold\n"
          "                axis, measured above and (with --link) modelled below, the auto pick as a point\n"
          "  -n ROUNDS     timed rounds (default 5); each round runs every threshold once; medians reported\n"
          "  -w WARMUP     warm-up rounds (default 1)\n"
          "  --tflops X    per-device backward compute rate of the FLOP model (default 100)\n"
          "  -g,--ngpus N  devices (default %d; with MPI: the number of processes, or omitted)\n"
          "  -B,--backend  threads, or mpi (one device per process). Default: threads, or mpi when an MPI\n"
          "                launcher started several processes (-B threads is then refused)\n"
          "  -h,--help     this text\n"
          "Rows: threshold (none, KiB/MiB, inf, auto:SIZE), buckets, time_us (median step), exposed_us, speedup\n"
          "against no fusion, [modelled columns], then mean_us median_us p99_us of the timed rounds (p99 is the\n"
          "nearest rank: the maximum below 100 rounds).\n"
          "The answer, '# recommended fusion threshold: 1 MiB (comm_fusion={...})' or 'none (no fusion)': of every\n"
          "row (no fusion and the auto pick included), those within noise of the fastest median, the simplest:\n"
          "no fusion, then a whole number of MiB (what MindSpore's comm_fusion size mode takes), then any size;\n"
          "the fastest of those. A row is out of the noise when its median is over 1%% slower and either the\n"
          "gap exceeds 2 standard errors (from the MAD of the rounds) or a rank test (Mann-Whitney z > 1.96)\n"
          "finds it slower.\n"
          "On 4 MPI processes:  " PROG_MPIRUN " -np 4 %s --model small --thresholds 0,64K,inf\n" PROG_ROOT_NOTE,
          path, BENCH_DEFAULT_GPUS, path);
}

/* --thresholds LIST into o->thr. Returns 0, or 2 after a message. */
static int fp_parse_thresholds(const char *list, fp_opts *o) {
  o->nthr = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (o->nthr == FP_MAXCFG) return bench__bad(o->prog, "--thresholds: more than 40 in '%s'", list);
    size_t b;
    if (strcmp(tok, "inf") == 0)
      b = SK_FUSION_INF;
    else if (!bench__parse_size(tok, &b))
      return bench__bad(o->prog, "--thresholds: bad size '%s' (0, a size with K/M/G, or inf)", tok);
    for (int i = 0; i < o->nthr; i++)
      if (o->thr[i] == b) return bench__bad(o->prog, "--thresholds: '%s' listed twice", tok);
    o->thr[o->nthr++] = b;
  }
  if (!o->nthr) return bench__bad(o->prog, "--thresholds: empty list '%s'", list);
  return 0;
}

/* The gnuplot terminals this gnuplot has (print writes to stderr unless told otherwise), space-separated with spaces around (" png svg "), into
   buf; false when gnuplot does not run. */
static bool fp_gnuplot_terminals(char *buf, size_t cap) {
  FILE *p = popen("gnuplot -e \"set print '-'; print GPVAL_TERMINALS\" 2>/dev/null </dev/null", "r");
  if (!p) return false;
  buf[0] = ' ';
  size_t n = fread(buf + 1, 1, cap - 3, p);
  int rc = pclose(p);
  if (rc != 0 || n == 0) return false;
  for (size_t i = 1; i <= n; i++)
    if (buf[i] == '\n') buf[i] = ' ';
  buf[n + 1] = ' ', buf[n + 2] = 0;
  return true;
}

/* --plot FILE: the terminal from the extension, checked against this gnuplot before the run
   (rather than after minutes of sweeping). Returns 0, or 2 after a message. */
static int fp_plot_terminal(fp_opts *o) {
  static const struct { const char *ext, *term, *size; } fmt[] = {
      {"png", "pngcairo", "size 1000,760"}, {"png", "png", "size 1000,760"},
      {"svg", "svg", "size 1000,760 dynamic"}, {"pdf", "pdfcairo", "size 7in,5.3in"}};
  const char *dot = strrchr(o->plot, '.');
  if (!dot || strchr(dot, '/')) return bench__bad(o->prog, "--plot: '%s' has no extension (.png, .svg or .pdf)", o->plot);
  bool known = false;
  for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) known = known || strcasecmp(dot + 1, fmt[i].ext) == 0;
  if (!known) return bench__bad(o->prog, "--plot: unknown format '%s' (.png, .svg or .pdf)", dot);
  char terms[4096];
  if (!fp_gnuplot_terminals(terms, sizeof terms))
    return bench__bad(o->prog, "--plot %s: cannot run gnuplot (make deps installs gnuplot-nox)", o->plot);
  char have[200] = "", key[40];
  for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) {
    snprintf(key, sizeof key, " %s ", fmt[i].term);
    if (!strstr(terms, key)) continue;
    if (strcasecmp(dot + 1, fmt[i].ext) == 0) {
      snprintf(o->plot_term, sizeof o->plot_term, "%s %s", fmt[i].term, fmt[i].size);
      return 0;
    }
    size_t l = strlen(have);
    snprintf(have + l, sizeof have - l, "%s.%s (%s)", l ? ", " : "", fmt[i].ext, fmt[i].term);
  }
  char msg[300];
  snprintf(msg, sizeof msg, "this gnuplot has no terminal for %s; available: %s", dot, have[0] ? have : "none of .png .svg .pdf");
  return bench__bad(o->prog, "--plot: %s", msg);
}

static int fp_parse(int argc, char **argv, fp_opts *o) {
  memset(o, 0, sizeof *o);
  o->prog = prog_name(argv[0]), o->path = argv[0];
  o->rounds = 5, o->warmup = 1, o->tflops = 100;
  size_t len = 0;
  for (int i = 0; i < argc && len + 2 < sizeof o->cmdline; i++)
    len += (size_t)snprintf(o->cmdline + len, sizeof o->cmdline - len, "%s%s", i ? " " : "", argv[i]);
  static const struct option lo[] = {{"model", required_argument, 0, 'm'},   {"ngpus", required_argument, 0, 'g'},
                                     {"backend", required_argument, 0, 'B'}, {"link", required_argument, 0, 'L'},
                                     {"zero-copy", no_argument, 0, 'z'},     {"thresholds", required_argument, 0, 't'},
                                     {"auto", no_argument, 0, 'a'},          {"csv", required_argument, 0, 'C'},
                                     {"plot", required_argument, 0, 'P'},    {"tflops", required_argument, 0, 'F'},
                                     {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  long v;
  for (;;) {
    int c = getopt_long(argc, argv, ":g:B:n:w:h", lo, NULL);
    if (c == -1) break;
    switch (c) {
      case 'm': o->model = optarg; break;
      case 'g':
        if (!prog_parse_long_in(optarg, 1, SK_MAX_DEVICES, &v)) return bench__bad(o->prog, "-g: bad device count '%s'", optarg);
        o->ngpus = (int)v;
        break;
      case 'B':
        if (strcmp(optarg, "threads") && strcmp(optarg, "mpi")) return bench__bad(o->prog, "-B: unknown backend '%s' (threads or mpi)", optarg);
        o->backend_asked = strcmp(optarg, "mpi") == 0 ? "mpi" : "threads";
        break;
      case 'n':
        if (!prog_parse_long_in(optarg, 1, 1000, &v)) return bench__bad(o->prog, "-n: bad round count '%s' (1..1000)", optarg);
        o->rounds = (int)v;
        break;
      case 'w':
        if (!prog_parse_long_in(optarg, 0, 1000, &v)) return bench__bad(o->prog, "-w: bad warm-up count '%s' (0..1000)", optarg);
        o->warmup = (int)v;
        break;
      case 'L': {
        char *end = NULL;
        double a = strtod(optarg, &end);
        if (end == optarg || *end != ',') return bench__bad(o->prog, "--link: bad value '%s' (ALPHA_US,GBPS, e.g. 10,25)", optarg);
        char *e2 = NULL;
        double g = strtod(end + 1, &e2);
        if (e2 == end + 1 || *e2 || !(a >= 0) || !(g > 0) || a > 1e9 || g > 1e9)
          return bench__bad(o->prog, "--link: bad value '%s' (ALPHA_US >= 0, GBPS > 0)", optarg);
        o->link.alpha_us = a, o->link.gbps = g, o->link_on = true;
        break;
      }
      case 'z': o->zero_copy = true; break;
      case 'a': o->autopick = true; break;
      case 'C': o->csv = optarg; break;
      case 'P': o->plot = optarg; break;
      case 'F': {
        char *end = NULL;
        o->tflops = strtod(optarg, &end);
        if (end == optarg || *end || !(o->tflops > 0) || o->tflops > 1e9)
          return bench__bad(o->prog, "--tflops: bad rate '%s' (> 0)", optarg);
        break;
      }
      case 't':
        if (fp_parse_thresholds(optarg, o)) return 2;
        break;
      case 'h': fp_usage(stdout, o->path); return 1;
      default: return bench__bad_flag(o->prog, c, argv);
    }
  }
  if (optind < argc) return bench__bad(o->prog, "unexpected argument '%s'", argv[optind]);
  if (!o->model) return bench__bad(o->prog, "%s", "--model is required (resnet50, bert-base, gpt2, small or a file)");
  if (!o->nthr) return bench__bad(o->prog, "%s", "--thresholds is required (e.g. 0,256K,1M,4M,16M,64M,inf)");
  if (!(o->backend = prog_backend(o->path, o->backend_asked, "-B"))) return 2;
  if (o->link_on && strcmp(o->backend, "mpi") == 0)
    return bench__bad(o->prog, "%s", "--link needs -B threads (the MPI backend has no link model)");
  return o->plot ? fp_plot_terminal(o) : 0;
}

/* ---- model files -------------------------------------------------------------------------------- */

static FILE *fp_open_model(const char *prog_path, const char *model, char *path, size_t cap) {
  if (strchr(model, '/') || strstr(model, ".txt")) {
    snprintf(path, cap, "%s", model);
    return fopen(path, "r");
  }
  snprintf(path, cap, "bench/models/%s.txt", model);
  FILE *f = fopen(path, "r");
  if (f) return f;
  const char *slash = strrchr(prog_path, '/');
  int dl = slash ? (int)(slash - prog_path) : 1;
  snprintf(path, cap, "%.*s/../bench/models/%s.txt", dl, slash ? prog_path : ".", model);
  return fopen(path, "r");
}

/* Returns 0, or an exit status after a message. */
static int fp_load(fp_ctx *x, const char *argv0) {
  char path[1024];
  FILE *f = fp_open_model(argv0, x->o->model, path, sizeof path);
  if (!f) return bench__bad(x->o->prog, "--model: cannot open '%s' (resnet50, bert-base, gpt2, small, or a file)", path);
  char line[512];
  int cap = 256;
  x->t = (fp_tensor *)calloc((size_t)cap, sizeof(fp_tensor));
  x->batch = 1;
  int ln = 0;
  while (x->t && fgets(line, sizeof line, f)) {
    ln++;
    if (line[0] == '#') {
      int b;
      if (sscanf(line, "# batch: %d", &b) == 1 && b > 0) x->batch = b;
      continue;
    }
    char shape[128], name[128];
    double pos = 0;
    int k = sscanf(line, "%127s %127s %lf", shape, name, &pos);
    if (k <= 0) continue;
    if (k < 2) snprintf(name, sizeof name, "t%d", x->nt);
    size_t count = 1;
    char *p = shape;
    for (;;) {
      char *end = NULL;
      unsigned long long d = strtoull(p, &end, 10);
      if (end == p || d == 0 || count > (SIZE_MAX >> 20) / d) {
        fclose(f);
        char where[1100];
        snprintf(where, sizeof where, "%s line %d", path, ln);
        return bench__bad(x->o->prog, "model file: bad shape at %s", where);
      }
      count *= (size_t)d;
      if (*end == 'x') p = end + 1;
      else break;
    }
    if (x->nt == cap) {
      cap *= 2;
      fp_tensor *nt = (fp_tensor *)realloc(x->t, sizeof(fp_tensor) * (size_t)cap);
      if (!nt) break;
      x->t = nt;
    }
    fp_tensor *t = &x->t[x->nt++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%.47s", name);
    t->count = count, t->positions = pos > 0 ? pos : 0;
  }
  fclose(f);
  if (!x->t) return bench__bad(x->o->prog, "%s", "out of memory reading the model");
  if (!x->nt) return bench__bad(x->o->prog, "model file '%s' lists no tensors", path);
  for (int i = 0; i < x->nt; i++) {
    fp_tensor *t = &x->t[i];
    double flops = 4.0 * (double)t->count * t->positions * (double)x->batch;
    t->compute_us = flops / (x->o->tflops * 1e6);
    x->compute_total_us += t->compute_us;
    x->total_bytes += t->count * 4;
  }
  return 0;
}

/* ---- the device side ------------------------------------------------------------------------------ */

static void fp_sleep_until(uint64_t deadline_ns) {
  uint64_t now = sk_now_ns();
  if (deadline_ns <= now + 20000) return; /* late or close: carry on */
  struct timespec ts;
  ts.tv_sec = (time_t)(deadline_ns / 1000000000ull);
  ts.tv_nsec = (long)(deadline_ns % 1000000000ull);
  clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

typedef struct fp_dev {
  sk_comm *c;
  fp_ctx *x;
  int rank, lrank;
  unsigned char *flat, *ws;
  unsigned char **grad;  /* per tensor, registration (backward) order */
  sk_fusion *f[FP_MAXCFG + 1];
  int *h[FP_MAXCFG + 1];
} fp_dev;

/* Fusion buffers of any plan: every byte once, plus 64-byte alignment per bucket. */
static size_t fp_ws_bytes(const fp_ctx *x) { return x->total_bytes + 64 * (size_t)x->nt; }

/* Backward order k = 0..nt-1 is parameter index nt-1-k. */
static sk_result fp_make_cfg(fp_dev *d, int ci, size_t thr) {
  fp_ctx *x = d->x;
  sk_fusion_desc desc;
  memset(&desc, 0, sizeof desc);
  if (thr == 0) {
    desc.allreduce.mode = SK_FUSION_NONE;
  } else {
    desc.allreduce.mode = SK_FUSION_SIZE;
    desc.allreduce.threshold_bytes = thr;
  }
  desc.no_zero_copy = !x->o->zero_copy;
  desc.workspace = d->ws;
  desc.workspace_bytes = d->ws ? fp_ws_bytes(x) : 0;
  sk_error *e = sk_comm_error(d->c); /* a failure is described where sk_world_run looks */
  sk_result r = sk_fusion_create(&desc, &d->f[ci], e);
  if (r != SK_OK) return r;
  d->h[ci] = (int *)calloc((size_t)x->nt, sizeof(int));
  if (!d->h[ci]) return SK_ERR_OUT_OF_MEMORY;
  for (int k = 0; k < x->nt; k++) {
    const fp_tensor *t = &x->t[x->nt - 1 - k];
    r = sk_fusion_add_allreduce(d->f[ci], d->c, d->grad[k], d->grad[k], t->count, SK_F32, SK_SUM, 0, t->name, &d->h[ci][k], e);
    if (r != SK_OK) return r;
  }
  r = sk_fusion_plan(d->f[ci], e);
  if (r != SK_OK) return r;
  if (d->lrank == 0 && d->x->local0 == 0) x->buckets[ci] = sk_fusion_bucket_count(d->f[ci]);
  return SK_OK;
}

/* One step of config ci; *t = {measured us, modelled us}, max over ranks. */
static sk_result fp_step(fp_dev *d, int ci, double *t) {
  fp_ctx *x = d->x;
  sk_fusion *f = d->f[ci];
  sk_result r = sk_barrier(d->c, NULL);
  if (r != SK_OK) return r;
  double clk0 = sk_comm_clock_us(d->c);
  uint64_t t0 = sk_now_ns();
  double cum = 0;
  for (int k = 0; k < x->nt; k++) {
    double cu = x->t[x->nt - 1 - k].compute_us;
    if (cu > 0) {
      cum += cu;
      sk_comm_compute(d->c, cu);
      fp_sleep_until(t0 + (uint64_t)(cum * 1000.0));
    }
    r = sk_fusion_ready(f, d->h[ci][k], sk_comm_error(d->c));
    if (r != SK_OK) return r;
  }
  r = sk_fusion_wait(f, sk_comm_error(d->c));
  if (r != SK_OK) return r;
  double mine[2] = {(double)(sk_now_ns() - t0) / 1e3, sk_comm_clock_us(d->c) - clk0};
  return sk_allreduce(d->c, mine, t, 2, SK_F64, SK_MAX, NULL);
}

static double fp_median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double tmp = v[j];
      v[j] = v[j - 1], v[j - 1] = tmp;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Alpha-beta probe of the backend: median times of a non-blocking 8-B AllReduce and of one of
   `big` bytes (in d->ws), plus the copy rate when packing. Max over ranks. */
static sk_result fp_probe(fp_dev *d, double *a_us, double *c_us) {
  fp_ctx *x = d->x;
  size_t big = x->total_bytes < ((size_t)8 << 20) ? x->total_bytes : ((size_t)8 << 20);
  if (big < 4096) big = 4096;
  unsigned char *buf = d->flat ? d->flat : d->ws;
  double small[41], large[7], copy[7];
  float tiny[2] = {0, 0};
  sk_result r = SK_OK;
  for (int i = 0; i < 41 && r == SK_OK; i++) {
    sk_request *q = NULL;
    if ((r = sk_barrier(d->c, NULL)) != SK_OK) break;
    uint64_t t0 = sk_now_ns();
    r = sk_iallreduce(d->c, tiny, tiny, 2, SK_F32, SK_SUM, &q, NULL);
    if (r == SK_OK) r = sk_wait(&q, NULL);
    small[i] = (double)(sk_now_ns() - t0) / 1e3;
  }
  for (int i = 0; i < 7 && r == SK_OK; i++) {
    sk_request *q = NULL;
    if ((r = sk_barrier(d->c, NULL)) != SK_OK) break;
    uint64_t t0 = sk_now_ns();
    r = sk_iallreduce(d->c, buf, buf, big / 4, SK_F32, SK_SUM, &q, NULL);
    if (r == SK_OK) r = sk_wait(&q, NULL);
    large[i] = (double)(sk_now_ns() - t0) / 1e3;
    if (r != SK_OK || (r = sk_barrier(d->c, NULL)) != SK_OK) break; /* a failed wait ends the probe too */
    t0 = sk_now_ns();
    if (!x->o->zero_copy && d->ws && d->grad) { /* pack + unpack: two copies of `big` bytes */
      size_t done = 0;
      for (int k = 0; k < x->nt && done < big; k++) {
        size_t b = x->t[x->nt - 1 - k].count * 4;
        if (b > big - done) b = big - done;
        memcpy(d->ws + done, d->grad[k], b);
        memcpy(d->grad[k], d->ws + done, b);
        done += b;
      }
    }
    copy[i] = (double)(sk_now_ns() - t0) / 1e3;
  }
  if (r != SK_OK) return r;
  double mine[3] = {fp_median(small, 41), fp_median(large, 7), fp_median(copy, 7)}, all[3];
  r = sk_allreduce(d->c, mine, all, 3, SK_F64, SK_MAX, NULL);
  if (r != SK_OK) return r;
  *a_us = all[0];
  *c_us = ((all[1] - all[0]) > 0 ? (all[1] - all[0]) : 0) / (double)big + all[2] / (double)big;
  return SK_OK;
}

static sk_result fp_device(sk_comm *c, void *arg) {
  fp_ctx *x = (fp_ctx *)arg;
  fp_dev d;
  memset(&d, 0, sizeof d);
  d.c = c, d.x = x, d.rank = sk_comm_rank(c), d.lrank = d.rank - x->local0;
  sk_result r = SK_OK;
  int nt = x->nt;
  d.grad = (unsigned char **)calloc((size_t)nt, sizeof(unsigned char *));
  if (!d.grad) return SK_ERR_OUT_OF_MEMORY;
  if (x->o->zero_copy) {
    d.flat = bench__alloc(x->total_bytes);
    if (!d.flat) r = SK_ERR_OUT_OF_MEMORY;
    size_t off = 0;
    for (int k = 0; k < nt && d.flat; k++) d.grad[k] = d.flat + off, off += x->t[nt - 1 - k].count * 4;
  } else {
    for (int k = 0; k < nt && r == SK_OK; k++) {
      size_t b = x->t[nt - 1 - k].count * 4;
      d.grad[k] = (unsigned char *)malloc(b ? b : 1);
      if (!d.grad[k]) r = SK_ERR_OUT_OF_MEMORY;
      else memset(d.grad[k], 0, b);
    }
    d.ws = bench__alloc(fp_ws_bytes(x));
    if (!d.ws) r = SK_ERR_OUT_OF_MEMORY;
  }
  if (r != SK_OK) sk_error_set(sk_comm_error(c), r, "rank %d: allocating %zu bytes of gradients", d.rank, x->total_bytes);
  int nsweep = x->ncfg - (x->o->autopick ? 1 : 0);
  for (int ci = 0; ci < nsweep && r == SK_OK; ci++) r = fp_make_cfg(&d, ci, x->cfg_thr[ci]);
  if (r == SK_OK && x->o->autopick) {
    double a, cb;
    if (x->o->link_on) {
      double p = x->n;
      a = 2 * (p - 1) * x->o->link.alpha_us;
      cb = 2 * (p - 1) / p * 1e-3 / x->o->link.gbps;
    } else {
      r = fp_probe(&d, &a, &cb);
    }
    if (r == SK_OK) {
      double b = sk_fusion_pick_threshold(a, cb, (double)x->total_bytes, x->compute_total_us);
      size_t bb = (size_t)llround(b);
      if (bb < 4) bb = 4;
      if (d.lrank == 0 && x->local0 == 0) x->probe_a = a, x->probe_c = cb, x->auto_bytes = (double)bb;
      x->cfg_thr[x->ncfg - 1] = bb; /* the same on every rank: from allreduced figures or the model */
      r = fp_make_cfg(&d, x->ncfg - 1, bb);
    }
  }
  int R = x->o->rounds;
  for (int round = -x->o->warmup; round < R && r == SK_OK; round++) {
    for (int ci = 0; ci < x->ncfg && r == SK_OK; ci++) {
      double t[2];
      r = fp_step(&d, ci, t);
      if (r == SK_OK && round >= 0 && d.lrank == 0) x->meas[ci * R + round] = t[0], x->model[ci * R + round] = t[1];
      if (d.lrank == 0 && x->local0 == 0) {
        x->done_steps++;
        fprintf(stderr, "\r%s: %s round %d/%d, threshold %d/%d   ", x->o->prog, round < 0 ? "warm-up" : "timed",
                round < 0 ? round + x->o->warmup + 1 : round + 1, round < 0 ? x->o->warmup : R, ci + 1, x->ncfg);
      }
    }
  }
  if (d.lrank == 0 && x->local0 == 0) fprintf(stderr, "\n");
  if (r != SK_OK && r != SK_ERR_ABORTED)
    fprintf(stderr, "%s: rank %d: %s: %s\n", x->o->prog, d.rank, sk_result_name(r), sk_comm_error_message(c));
  for (int ci = 0; ci <= FP_MAXCFG; ci++) {
    sk_fusion_destroy(d.f[ci]);
    free(d.h[ci]);
  }
  if (!x->o->zero_copy)
    for (int k = 0; k < nt; k++) free(d.grad[k]);
  free(d.grad);
  free(d.flat);
  free(d.ws);
  return r;
}

/* The world of -B: one device per MPI process, or o->ngpus threads (with the link model).
   Returns 0, or an exit status after a message. */
static int fp_make_world(const fp_opts *o, fp_ctx *x, sk_world **w) {
  if (strcmp(o->backend, "mpi") == 0) {
    bench_opts bo;
    memset(&bo, 0, sizeof bo);
    bo.prog = o->prog, bo.ngpus = o->ngpus, bo.backend = "mpi";
    int st = bench_world_mpi(&bo, w, &x->nlocal, &x->local0);
    x->n = bo.ngpus;
    return st;
  }
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = o->ngpus ? o->ngpus : BENCH_DEFAULT_GPUS;
  d.backend = sk_threads_backend();
  d.cluster.link = o->link;
  sk_error err;
  if (sk_world_create(&d, w, &err) != SK_OK) {
    fprintf(stderr, "%s: cannot create the threads world: %s\n", o->prog, err.msg);
    return 1;
  }
  x->n = d.ndevices, x->nlocal = d.ndevices, x->local0 = 0;
  return 0;
}


/* ---- output ---------------------------------------------------------------------------------------- */

/* Per config, over its timed rounds: the figures the table, the recommendation and the plot use. */
typedef struct fp_stat {
  double med, mean, p99, lo; /* measured step time, us */
  double se;                 /* standard error of the median (robust: from the MAD), us */
  double ex;                 /* median exposed communication, us */
  double mmed, mex;          /* modelled median time and exposed, us */
} fp_stat;

static double fp_mean(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return n ? s / n : 0;
}

/* v[0..n) sorted: nearest-rank percentile (with fewer than 100 rounds, p99 is the maximum). */
static double fp_pct_sorted(const double *v, int n, double p) {
  int k = (int)ceil(p / 100.0 * n) - 1;
  return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* Sorts v (fp_median does). The median's standard error is 1.2533 sigma / sqrt(n) for normal
   noise; sigma from the median absolute deviation (x 1.4826), so one descheduled round on a
   busy machine does not inflate it the way a standard deviation would. */
static void fp_stat_of(double *v, int n, fp_stat *s) {
  double dev[1000]; /* -n is at most 1000 */
  memset(s, 0, sizeof *s);
  if (n < 1 || n > 1000) return;
  s->mean = fp_mean(v, n);
  s->med = fp_median(v, n);
  s->lo = v[0];
  s->p99 = fp_pct_sorted(v, n, 99);
  for (int i = 0; i < n; i++) dev[i] = fabs(v[i] - s->med);
  double mad = fp_median(dev, n);
  s->se = n > 1 ? 1.2533 * 1.4826 * mad / sqrt((double)n) : 0;
}

/* A size in binary units: "256 KiB", "1 MiB", "2.12 MiB", "inf"; sep goes between number and
   unit ("" keeps a table column one word). Whole units print without decimals. */
static void fp_size_str(char *buf, size_t cap, size_t b, const char *sep) {
  static const char *unit[] = {"B", "KiB", "MiB", "GiB"};
  if (b == SK_FUSION_INF) {
    snprintf(buf, cap, "inf");
    return;
  }
  int u = 0;
  double v = (double)b;
  while (u < 3 && v >= 1024) v /= 1024, u++;
  if (v == floor(v)) snprintf(buf, cap, "%.0f%s%s", v, sep, unit[u]);
  else snprintf(buf, cap, "%.*f%s%s", v < 10 ? 2 : 1, v, sep, unit[u]);
}

/* The table's threshold column: none, 256KiB, inf, auto:2.12MiB. */
static void fp_thr_label(char *buf, size_t cap, size_t thr, bool is_auto) {
  char s[40];
  fp_size_str(s, sizeof s, thr, "");
  if (is_auto) snprintf(buf, cap, "auto:%s", s);
  else snprintf(buf, cap, "%s", thr == 0 ? "none" : s);
}

/* The CSV's threshold_bytes column stays machine-readable: 0, inf, bytes, auto:<bytes>. */
static void fp_thr_bytes(char *buf, size_t cap, size_t thr, bool is_auto) {
  if (is_auto) snprintf(buf, cap, "auto:%zu", thr);
  else if (thr == SK_FUSION_INF) snprintf(buf, cap, "inf");
  else snprintf(buf, cap, "%zu", thr);
}

static void fp_print_header(const fp_ctx *x) {
  const fp_opts *o = x->o;
  printf("# shardkit %d.%d.%d  %s  backend: %s  devices: %d\n", SK_VERSION_MAJOR, SK_VERSION_MINOR, SK_VERSION_PATCH,
         o->prog, o->backend, x->n);
  printf("# Command: %s\n", o->cmdline);
  char tot[40];
  fp_size_str(tot, sizeof tot, x->total_bytes, " ");
  printf("# model %s: %d tensors, %s (%zu B) of f32 gradients; batch %d; FLOP-model backward %.1f us at %g TFLOP/s\n",
         o->model, x->nt, tot, x->total_bytes, x->batch, x->compute_total_us, o->tflops);
  printf("# gradients: %s; in-place AllReduce sum; registered in backward order; %d warm-up + %d timed rounds, medians\n",
         o->zero_copy ? "views of one flat buffer (zero-copy)" : "separate buffers (packed)", o->warmup, o->rounds);
  if (o->link_on)
    printf("# link model: alpha %g us, %g GB/s (ring costs); modelled times from the virtual clocks\n", o->link.alpha_us,
           o->link.gbps);
  fflush(stdout);
}

/* MindSpore's comm_fusion size mode takes a whole number of MB (MiB): an int, validated as one.
   "inf" (one bucket) is any whole MB above the gradient total. */
static bool fp_ms_expressible(size_t thr) { return thr == SK_FUSION_INF || (thr && thr % ((size_t)1 << 20) == 0); }

static long fp_ms_config_mb(const fp_ctx *x, size_t thr) {
  if (thr == SK_FUSION_INF) return (long)(x->total_bytes >> 20) + 1;
  return (long)(thr >> 20);
}

/* Simplicity rank of a config: no fusion, then what MindSpore can express, then the rest. */
static int fp_simplicity(const fp_ctx *x, int i) {
  if (x->cfg_thr[i] == 0 && !x->cfg_auto[i]) return 0;
  return fp_ms_expressible(x->cfg_thr[i]) ? 1 : 2;
}

/* What the choice compares: per config a median and its standard error, and the rounds'
   samples (samp[i * n ..], for the rank test; NULL for the noiseless modelled times). */
typedef struct fp_cmp {
  const double *med, *se, *samp;
  int n;
} fp_cmp;

/* Mann-Whitney's z for "a is slower than b" over n rounds each (normal approximation). Ranks
   suit step times on a shared machine: a few descheduled rounds make the spread (and so the
   standard error) large without making a consistently slower config look like a faster one. */
static double fp_rank_z(const double *a, const double *b, int n) {
  double u = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) u += a[i] > b[j] ? 1 : a[i] == b[j] ? 0.5 : 0;
  double nn = (double)n * n;
  return (u - nn / 2) / sqrt(nn * (2.0 * n + 1) / 12);
}

/* Whether config i is within noise of config f. Never when its median exceeds f's by more than
   1% (less is not worth a configuration change) and either by more than two standard errors of
   the difference or with every round ranking it slower often enough (z > 1.96). */
static bool fp_within_noise(const fp_cmp *c, int i, int f) {
  double d = c->med[i] - c->med[f];
  if (d <= 0.01 * c->med[f]) return true;
  if (d > 2 * sqrt(c->se[i] * c->se[i] + c->se[f] * c->se[f])) return false;
  return !(c->samp && fp_rank_z(c->samp + i * c->n, c->samp + f * c->n, c->n) > 1.96);
}

/* The recommendation: among every config (no fusion, the swept thresholds, the auto pick)
   within noise of the fastest median, the simplest (fp_simplicity), then the fastest of those.
   *fastest gets the fastest config. */
static int fp_choose(const fp_ctx *x, const fp_cmp *c, int *fastest) {
  int f = 0;
  for (int i = 1; i < x->ncfg; i++)
    if (c->med[i] < c->med[f]) f = i;
  int pick = f;
  for (int i = 0; i < x->ncfg; i++) {
    if (!fp_within_noise(c, i, f)) continue;
    int si = fp_simplicity(x, i), sp = fp_simplicity(x, pick);
    if (si < sp || (si == sp && c->med[i] < c->med[pick])) pick = i;
  }
  *fastest = f;
  return pick;
}

/* "1 MiB (comm_fusion=...)" or "none (no fusion)", after `lead`; then what MindSpore can do
   when it cannot say the same. Returns nothing: printing only. */
static void fp_print_answer(const fp_ctx *x, const char *lead, int pick, const double *med) {
  size_t thr = x->cfg_thr[pick];
  char s[40];
  fp_size_str(s, sizeof s, thr, " ");
  if (thr == 0) {
    printf("# %s: none (no fusion)\n", lead);
    printf("#   in MindSpore: comm_fusion={\"openstate\": False} (turns off AllGather and ReduceScatter fusion too)\n");
    return;
  }
  if (fp_ms_expressible(thr)) {
    printf("# %s: %s (comm_fusion={\"allreduce\": {\"mode\": \"size\", \"config\": %ld}})\n", lead, s,
           fp_ms_config_mb(x, thr));
    if (thr == SK_FUSION_INF) {
      char tot[40];
      fp_size_str(tot, sizeof tot, x->total_bytes, " ");
      printf("#   inf is one bucket: any whole MB above the %s of gradients does it\n", tot);
    }
    return;
  }
  printf("# %s: %s (%zu bytes; comm_fusion cannot express it: MindSpore's size mode takes whole MB)\n", lead, s, thr);
  int alt = -1; /* the fastest config MindSpore can express (no fusion counts) */
  for (int i = 0; i < x->ncfg; i++)
    if (fp_simplicity(x, i) < 2 && (alt < 0 || med[i] < med[alt])) alt = i;
  if (alt < 0) return;
  char a[40];
  fp_size_str(a, sizeof a, x->cfg_thr[alt], " ");
  if (x->cfg_thr[alt] == 0)
    printf("#   best MindSpore can express here: none (comm_fusion={\"openstate\": False}), %.3fx the time\n",
           med[alt] / med[pick]);
  else
    printf("#   best MindSpore can express here: %s (comm_fusion={\"allreduce\": {\"mode\": \"size\", \"config\": %ld}}), "
           "%.3fx the time\n", a, fp_ms_config_mb(x, x->cfg_thr[alt]), med[alt] / med[pick]);
}

/* Why that answer: the fastest median, no fusion's, the near-ties and, when it is not the
   fastest, the simpler one chosen among them. */
static void fp_print_why(const fp_ctx *x, const char *what, const fp_cmp *c, int fastest, int pick, int ref) {
  const double *med = c->med;
  char s[48];
  fp_thr_label(s, sizeof s, x->cfg_thr[fastest], x->cfg_auto[fastest]);
  printf("# %s: fastest %s %.1f us, no fusion %.1f us (%.2fx); within noise of the fastest:", what, s, med[fastest],
         med[ref], med[ref] / med[fastest]);
  for (int i = 0; i < x->ncfg; i++)
    if (fp_within_noise(c, i, fastest)) {
      fp_thr_label(s, sizeof s, x->cfg_thr[i], x->cfg_auto[i]);
      printf(" %s", s);
    }
  if (pick != fastest) {
    fp_thr_label(s, sizeof s, x->cfg_thr[pick], x->cfg_auto[pick]);
    printf("; the simplest of those: %s", s);
  }
  printf("\n");
}

/* One row per threshold (and the CSV): medians, speedups against no fusion, then the spread
   of the measured rounds (mean, median, p99) at the end so that the older columns keep their
   places. */
static int fp_print_rows(const fp_ctx *x, const fp_stat *st, int ref) {
  const fp_opts *o = x->o;
  int status = 0;
  printf("#\n# %16s %8s %12s %12s %8s", "threshold", "buckets", "time_us", "exposed_us", "speedup");
  if (o->link_on) printf(" %14s %16s %10s", "model_time_us", "model_exposed_us", "model_spdup");
  printf(" %12s %12s %12s\n", "mean_us", "median_us", "p99_us");
  FILE *csv = o->csv ? fopen(o->csv, "w") : NULL;
  if (o->csv && !csv) {
    fprintf(stderr, "%s: --csv: cannot write '%s'\n", o->prog, o->csv);
    status = 1;
  }
  if (csv)
    fprintf(csv, "threshold_bytes,buckets,time_us,exposed_us,speedup%s,mean_us,median_us,p99_us\n",
            o->link_on ? ",model_time_us,model_exposed_us,model_speedup" : "");
  for (int i = 0; i < x->ncfg; i++) {
    const fp_stat *s = &st[i];
    char lab[48], raw[48];
    fp_thr_label(lab, sizeof lab, x->cfg_thr[i], x->cfg_auto[i]);
    fp_thr_bytes(raw, sizeof raw, x->cfg_thr[i], x->cfg_auto[i]);
    double sp = s->med > 0 ? st[ref].med / s->med : 0, spm = s->mmed > 0 ? st[ref].mmed / s->mmed : 0;
    printf("  %16s %8d %12.1f %12.1f %8.2f", lab, x->buckets[i], s->med, s->ex, sp);
    if (o->link_on) printf(" %14.1f %16.1f %10.2f", s->mmed, s->mex, spm);
    printf(" %12.1f %12.1f %12.1f\n", s->mean, s->med, s->p99);
    if (csv) {
      fprintf(csv, "%s,%d,%.1f,%.1f,%.3f", raw, x->buckets[i], s->med, s->ex, sp);
      if (o->link_on) fprintf(csv, ",%.1f,%.1f,%.3f", s->mmed, s->mex, spm);
      fprintf(csv, ",%.1f,%.1f,%.1f\n", s->mean, s->med, s->p99);
    }
  }
  if (csv && fclose(csv) != 0) {
    fprintf(stderr, "%s: --csv: error writing '%s'\n", o->prog, o->csv);
    status = 1;
  }
  return status;
}

/* A string for gnuplot's single quotes, where a quote is written twice. */
static void fp_gp_str(FILE *g, const char *s) {
  fputc('\'', g);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', g);
    fputc(*s, g);
  }
  fputc('\'', g);
}

/* Where a config sits on the logarithmic threshold axis. 0 and inf have no place on it, so they
   sit a factor 4 beyond the smallest and largest finite thresholds (labelled none and inf). */
static double fp_plot_x(const fp_ctx *x, int i, double lo, double hi) {
  size_t t = x->cfg_thr[i];
  return t == 0 ? lo / 4 : t == SK_FUSION_INF ? hi * 4 : (double)t;
}

static void fp_plot_range(const fp_ctx *x, double *lo, double *hi) {
  *lo = *hi = (double)(x->total_bytes ? x->total_bytes : 1);
  bool any = false;
  for (int i = 0; i < x->ncfg; i++) {
    size_t t = x->cfg_thr[i];
    if (t == 0 || t == SK_FUSION_INF) continue;
    if (!any || (double)t < *lo) *lo = (double)t;
    if (!any || (double)t > *hi) *hi = (double)t;
    any = true;
  }
  if (*hi < (double)x->total_bytes) *hi = (double)x->total_bytes; /* inf is at least one whole-model bucket */
}

/* The data blocks: the sweep sorted by threshold (a line), the auto pick and the recommendation
   (points of their own). Columns: x, median ms, p99 ms, modelled ms. */
static void fp_plot_data(FILE *g, const fp_ctx *x, const fp_stat *st, int pick, double lo, double hi) {
  int idx[FP_MAXCFG + 1], n = 0;
  for (int i = 0; i < x->ncfg; i++)
    if (!x->cfg_auto[i]) idx[n++] = i;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && fp_plot_x(x, idx[j], lo, hi) < fp_plot_x(x, idx[j - 1], lo, hi); j--) {
      int t = idx[j];
      idx[j] = idx[j - 1], idx[j - 1] = t;
    }
  fprintf(g, "$sweep << EOD\n");
  for (int k = 0; k < n; k++) {
    const fp_stat *s = &st[idx[k]];
    fprintf(g, "%.17g %g %g %g\n", fp_plot_x(x, idx[k], lo, hi), s->med / 1e3, s->p99 / 1e3, s->mmed / 1e3);
  }
  fprintf(g, "EOD\n$auto << EOD\n");
  for (int i = 0; i < x->ncfg; i++)
    if (x->cfg_auto[i])
      fprintf(g, "%.17g %g %g %g\n", fp_plot_x(x, i, lo, hi), st[i].med / 1e3, st[i].p99 / 1e3, st[i].mmed / 1e3);
  fprintf(g, "EOD\n$pick << EOD\n%.17g %g %g %g\nEOD\n", fp_plot_x(x, pick, lo, hi), st[pick].med / 1e3,
          st[pick].p99 / 1e3, st[pick].mmed / 1e3);
}

/* Axis, tics and title: log x with a tic per swept threshold in KiB/MiB. */
static void fp_plot_axes(FILE *g, const fp_ctx *x, double lo, double hi) {
  const fp_opts *o = x->o;
  fprintf(g, "set terminal %s\nset termoption noenhanced\nset output ", o->plot_term);
  fp_gp_str(g, o->plot);
  fprintf(g, "\nset logscale x 2\nset xrange [%.17g:%.17g]\nset xtics rotate by -30 (", lo / 8, hi * 8);
  int n = 0;
  for (int i = 0; i < x->ncfg; i++) {
    if (x->cfg_auto[i]) continue;
    char s[48];
    fp_thr_label(s, sizeof s, x->cfg_thr[i], false);
    fprintf(g, "%s'%s' %.17g", n++ ? ", " : "", s, fp_plot_x(x, i, lo, hi));
  }
  fprintf(g, ")\nset grid\nset key outside right top\nset lmargin at screen 0.09\nset rmargin at screen 0.70\nset xlabel 'bucket threshold (log scale; none and inf at the ends)'\n");
}

/* A log y axis when the times span more than a factor 10 (no fusion of many small tensors
   against one bucket), else the small differences near the optimum would be flattened. */
static void fp_plot_yscale(FILE *g, const fp_ctx *x, const fp_stat *st, bool modelled) {
  double lo = 0, hi = 0;
  for (int i = 0; i < x->ncfg; i++) {
    double a = modelled ? st[i].mmed : st[i].med, b = modelled ? st[i].mmed : st[i].p99;
    if (i == 0 || a < lo) lo = a;
    if (i == 0 || b > hi) hi = b;
  }
  fprintf(g, lo > 0 && hi > 10 * lo ? "set logscale y\n" : "unset logscale y\n");
}

static void fp_plot(const fp_ctx *x, const fp_stat *st, int pick) {
  const fp_opts *o = x->o;
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    fprintf(stderr, "%s: --plot: cannot run gnuplot (make deps installs gnuplot-nox)\n", o->prog);
    return;
  }
  double lo, hi;
  fp_plot_range(x, &lo, &hi);
  fp_plot_axes(g, x, lo, hi);
  fp_plot_data(g, x, st, pick, lo, hi);
  char title[300];
  snprintf(title, sizeof title, "fusion_perf %s, %d devices%s", o->model, x->n, o->zero_copy ? ", zero-copy" : "");
  const char *pts = ", $pick using 1:%d with points pt 6 ps 3 lw 2 title 'recommended'";
  char au[160] = "";
  if (o->autopick) {
    char a[40];
    fp_size_str(a, sizeof a, x->cfg_thr[x->ncfg - 1], " ");
    snprintf(au, sizeof au, ", $auto using 1:%%d with points pt 7 ps 1.8 title 'auto pick (%s)'", a);
  }
  if (o->link_on) { /* two panels: the modelled curve is near flat on the measured one's scale */
    fprintf(g, "set multiplot layout 2,1 title ");
    fp_gp_str(g, title);
    fprintf(g, "\nset ylabel 'measured step time (ms)'\n");
  } else {
    fprintf(g, "set title ");
    fp_gp_str(g, title);
    fprintf(g, "\nset ylabel 'measured step time (ms)'\n");
  }
  fp_plot_yscale(g, x, st, false);
  fprintf(g, "plot $sweep using 1:2 with linespoints pt 5 title 'median', $sweep using 1:3 with linespoints dt 2 pt 1 "
             "title 'p99'");
  fprintf(g, au, 2);
  fprintf(g, pts, 2);
  fprintf(g, "\n");
  if (o->link_on) {
    fprintf(g, "set title ''\nset ylabel 'modelled step time (ms)'\n");
    fp_plot_yscale(g, x, st, true);
    fprintf(g, "plot $sweep using 1:4 with linespoints pt 5 lc rgb '#2a9d3a' title 'modelled (link model)'");
    fprintf(g, au, 4);
    fprintf(g, "\nunset multiplot\n");
  }
  int rc = pclose(g);
  if (rc != 0) fprintf(stderr, "%s: --plot: gnuplot failed (status %d)\n", o->prog, rc);
}

/* World rank 0, after the run: the table, the answer, the plot. Returns an exit status. */
static int fp_report(const fp_ctx *x) {
  const fp_opts *o = x->o;
  fp_stat st[FP_MAXCFG + 1];
  double med[FP_MAXCFG + 1], se[FP_MAXCFG + 1], mmed[FP_MAXCFG + 1], zero[FP_MAXCFG + 1];
  int ref = 0; /* the threshold-0 config (main always adds one); starting at 0 keeps it in bounds */
  if (x->ncfg < 1) return 1; /* cannot happen (that config is always there); says so to the analyzer */
  for (int i = 0; i < x->ncfg; i++) {
    fp_stat *s = &st[i];
    fp_stat_of(x->meas + i * o->rounds, o->rounds, s);
    s->mmed = fp_median(x->model + i * o->rounds, o->rounds);
    s->ex = s->med > x->compute_total_us ? s->med - x->compute_total_us : 0;
    s->mex = s->mmed > x->compute_total_us ? s->mmed - x->compute_total_us : 0;
    med[i] = s->med, se[i] = s->se, mmed[i] = s->mmed, zero[i] = 0;
    if (!x->cfg_auto[i] && x->cfg_thr[i] == 0) ref = i;
  }
  if (o->autopick) {
    char s[40];
    fp_size_str(s, sizeof s, (size_t)x->auto_bytes, " ");
    printf("# auto: a = %.2f us, c = %.3g us/B (%s), S = %zu B, T_b = %.1f us -> threshold %s (%.0f B)\n", x->probe_a,
           x->probe_c, o->link_on ? "link model" : "probe of the backend", x->total_bytes, x->compute_total_us, s,
           x->auto_bytes);
  }
  int status = fp_print_rows(x, st, ref);
  fp_cmp cm = {med, se, x->meas, o->rounds}, cz = {mmed, zero, NULL, o->rounds};
  int fastest, pick = fp_choose(x, &cm, &fastest);
  fp_print_why(x, "measured medians", &cm, fastest, pick, ref);
  if (o->link_on) { /* the virtual clocks have no noise: only the 1% margin applies */
    int mf, mpick = fp_choose(x, &cz, &mf);
    fp_print_why(x, "modelled", &cz, mf, mpick, ref);
    fp_print_answer(x, "modelled (link model) choice", mpick, mmed);
  }
  if (o->autopick) {
    int ai = x->ncfg - 1;
    printf("# auto: measured %.1f us = %.3f x the fastest", med[ai], med[ai] / med[fastest]);
    if (o->link_on) {
      int mf;
      fp_choose(x, &cz, &mf);
      printf("; modelled %.1f us = %.3f x the fastest", mmed[ai], mmed[ai] / mmed[mf]);
    }
    printf("\n");
  }
  fp_print_answer(x, "recommended fusion threshold", pick, med);
  if (o->plot) fp_plot(x, st, pick);
  return status;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  fp_opts o;
  int pr = fp_parse(argc, argv, &o);
  if (pr) return pr == 1 ? 0 : 2;
  fp_ctx x;
  memset(&x, 0, sizeof x);
  x.o = &o;
  int st = fp_load(&x, argv[0]);
  if (st) {
    free(x.t); /* what a failed load read so far */
    return st;
  }
  /* configs: the swept thresholds, "0" added first when missing (the reference), auto last */
  bool has0 = false;
  for (int i = 0; i < o.nthr; i++) has0 = has0 || o.thr[i] == 0;
  if (!has0) x.cfg_thr[x.ncfg++] = 0;
  for (int i = 0; i < o.nthr; i++) x.cfg_thr[x.ncfg++] = o.thr[i];
  if (o.autopick) x.cfg_auto[x.ncfg++] = true;
  sk_world *w = NULL;
  if ((st = fp_make_world(&o, &x, &w)) != 0) {
    if (w) sk_world_destroy(w, NULL);
    free(x.t);
    return st;
  }
  x.meas = (double *)calloc((size_t)(x.ncfg * o.rounds), sizeof(double));
  x.model = (double *)calloc((size_t)(x.ncfg * o.rounds), sizeof(double));
  if (!x.meas || !x.model) {
    fprintf(stderr, "%s: out of memory\n", o.prog);
    sk_world_destroy(w, NULL);
    free(x.meas), free(x.model), free(x.t);
    return 1;
  }
  bool root = x.local0 == 0;
  if (root) fp_print_header(&x);
  sk_result r = sk_world_run(w, fp_device, &x, NULL);
  int status = 0;
  if (r != SK_OK) {
    fprintf(stderr, "%s: the run failed: %s: %s\n", o.prog, sk_result_name(r), sk_world_error_message(w));
    status = 1;
  }
  if (root && status == 0) status = fp_report(&x);
  sk_world_destroy(w, NULL);
  free(x.meas);
  free(x.model);
  free(x.t);
  return status;
}
