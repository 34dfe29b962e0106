/* fusion_perf.c -- where the fusion threshold pays: a simulated data-parallel backward pass whose
   gradients are AllReduced through sk_fusion.h, swept over bucket thresholds.

   build/fusion_perf --model resnet50|bert-base|gpt2|small -g N [-B threads|mpi]
                     [--link ALPHA_US,GBPS] [--zero-copy] --thresholds LIST [--auto]
                     [--csv FILE] [--plot FILE.png] [-n ROUNDS] [-w WARMUP] [--tflops X]

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
   form (docs/cost-models.md). */
#define _GNU_SOURCE
#include <math.h>
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
          "       [--link ALPHA_US,GBPS] [--zero-copy] [--auto] [--csv FILE] [--plot FILE.png] [-n ROUNDS] [-w WARMUP]\n"
          "       [--tflops X]\n"
          "  --model       the gradients of a network: resnet50 bert-base gpt2 small (bench/models/NAME.txt) or a file\n"
          "  --thresholds  comma list of bucket thresholds: 0 (no fusion), sizes with K/M/G (powers of 2), inf\n"
          "                (one bucket); e.g. 0,256K,1M,4M,16M,64M,inf\n"
          "  --link        threads backend: model links of ALPHA_US latency and GBPS GB/s (reports modelled time)\n"
          "  --zero-copy   gradients are views of one flat buffer (zero-copy AllReduce buckets)\n"
          "  --auto        pick a threshold from an alpha-beta probe and the gradient ready rate, run it too\n"
          "  --csv FILE    also write the table as CSV;  --plot FILE.png  draw it with gnuplot\n"
          "  -n ROUNDS     timed rounds (default 5); each round runs every threshold once; medians reported\n"
          "  -w WARMUP     warm-up rounds (default 1)\n"
          "  --tflops X    per-device backward compute rate of the FLOP model (default 100)\n"
          "  -g,--ngpus N  devices (default %d; with MPI: the number of processes, or omitted)\n"
          "  -B,--backend  threads, or mpi (one device per process). Default: threads, or mpi when an MPI\n"
          "                launcher started several processes (-B threads is then refused)\n"
          "  -h,--help     this text\n"
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
        if (!bench__parse_long(optarg, 1, SK_MAX_DEVICES, &v)) return bench__bad(o->prog, "-g: bad device count '%s'", optarg);
        o->ngpus = (int)v;
        break;
      case 'B':
        if (strcmp(optarg, "threads") && strcmp(optarg, "mpi")) return bench__bad(o->prog, "-B: unknown backend '%s' (threads or mpi)", optarg);
        o->backend_asked = strcmp(optarg, "mpi") == 0 ? "mpi" : "threads";
        break;
      case 'n':
        if (!bench__parse_long(optarg, 1, 1000, &v)) return bench__bad(o->prog, "-n: bad round count '%s' (1..1000)", optarg);
        o->rounds = (int)v;
        break;
      case 'w':
        if (!bench__parse_long(optarg, 0, 1000, &v)) return bench__bad(o->prog, "-w: bad warm-up count '%s' (0..1000)", optarg);
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
  return 0;
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
  sk_error err;
  sk_result r = sk_fusion_create(&desc, &d->f[ci], &err);
  if (r != SK_OK) return sk_comm_set_error(d->c, r, "fusion create: %s", err.msg);
  d->h[ci] = (int *)calloc((size_t)x->nt, sizeof(int));
  if (!d->h[ci]) return SK_ERR_OUT_OF_MEMORY;
  for (int k = 0; k < x->nt; k++) {
    const fp_tensor *t = &x->t[x->nt - 1 - k];
    r = sk_fusion_add_allreduce(d->f[ci], d->c, d->grad[k], d->grad[k], t->count, SK_F32, SK_SUM, 0, t->name, &d->h[ci][k]);
    if (r != SK_OK) return sk_comm_set_error(d->c, r, "fusion add: %s", sk_fusion_error_message(d->f[ci]));
  }
  r = sk_fusion_plan(d->f[ci]);
  if (r != SK_OK) return sk_comm_set_error(d->c, r, "fusion plan: %s", sk_fusion_error_message(d->f[ci]));
  if (d->lrank == 0 && d->x->local0 == 0) x->buckets[ci] = sk_fusion_bucket_count(d->f[ci]);
  return SK_OK;
}

/* One step of config ci; *t = {measured us, modelled us}, max over ranks. */
static sk_result fp_step(fp_dev *d, int ci, double *t) {
  fp_ctx *x = d->x;
  sk_fusion *f = d->f[ci];
  sk_result r = sk_barrier(d->c);
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
    r = sk_fusion_ready(f, d->h[ci][k]);
    if (r != SK_OK) return sk_comm_set_error(d->c, r, "ready: %s", sk_fusion_error_message(f));
  }
  r = sk_fusion_wait(f);
  if (r != SK_OK) return sk_comm_set_error(d->c, r, "%s", sk_fusion_error_message(f));
  double mine[2] = {(double)(sk_now_ns() - t0) / 1e3, sk_comm_clock_us(d->c) - clk0};
  return sk_allreduce(d->c, mine, t, 2, SK_F64, SK_MAX);
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
    if ((r = sk_barrier(d->c)) != SK_OK) break;
    uint64_t t0 = sk_now_ns();
    r = sk_iallreduce(d->c, tiny, tiny, 2, SK_F32, SK_SUM, &q);
    if (r == SK_OK) r = sk_wait(&q);
    small[i] = (double)(sk_now_ns() - t0) / 1e3;
  }
  for (int i = 0; i < 7 && r == SK_OK; i++) {
    sk_request *q = NULL;
    if ((r = sk_barrier(d->c)) != SK_OK) break;
    uint64_t t0 = sk_now_ns();
    r = sk_iallreduce(d->c, buf, buf, big / 4, SK_F32, SK_SUM, &q);
    if (r == SK_OK) r = sk_wait(&q);
    large[i] = (double)(sk_now_ns() - t0) / 1e3;
    if (r != SK_OK || (r = sk_barrier(d->c)) != SK_OK) break; /* a failed wait ends the probe too */
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
  r = sk_allreduce(d->c, mine, all, 3, SK_F64, SK_MAX);
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
  if (r != SK_OK) sk_comm_set_error(c, r, "rank %d: allocating %zu bytes of gradients", d.rank, x->total_bytes);
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

/* ---- output ---------------------------------------------------------------------------------------- */

static void fp_thr_str(char *buf, size_t cap, size_t thr, bool is_auto) {
  if (is_auto) snprintf(buf, cap, "auto:%zu", thr);
  else if (thr == 0) snprintf(buf, cap, "0");
  else if (thr == SK_FUSION_INF) snprintf(buf, cap, "inf");
  else snprintf(buf, cap, "%zu", thr);
}

static void fp_plot(const fp_ctx *x, const double *tm, const double *mm, int ref) {
  const fp_opts *o = x->o;
  FILE *g = popen("gnuplot 2>/dev/null", "w");
  if (!g) {
    fprintf(stderr, "%s: --plot: cannot run gnuplot (make deps installs gnuplot-nox)\n", o->prog);
    return;
  }
  fprintf(g, "set terminal pngcairo size 900,540\nset output '%s'\n", o->plot);
  fprintf(g, "set termoption noenhanced\n");
  fprintf(g, "set title 'fusion_perf %s, %d devices%s (%s)'\n", o->model, x->n, o->zero_copy ? ", zero-copy" : "",
          o->link_on ? "measured and modelled" : "measured");
  fprintf(g, "set xlabel 'bucket threshold'\nset ylabel 'step time (ms)'\nset grid\nset key top left\nset style data linespoints\n");
  fprintf(g, "set xtics rotate by -30 (");
  for (int i = 0; i < x->ncfg; i++) {
    char s[48];
    fp_thr_str(s, sizeof s, x->cfg_thr[i], x->cfg_auto[i]);
    fprintf(g, "%s'%s' %d", i ? ", " : "", s, i);
  }
  fprintf(g, ")\n");
  fprintf(g, "plot '-' using 1:2 title 'measured (this machine)'%s\n", o->link_on ? ", '-' using 1:2 title 'modelled (link model)'" : "");
  for (int i = 0; i < x->ncfg; i++) fprintf(g, "%d %g\n", i, tm[i] / 1e3);
  fprintf(g, "e\n");
  if (o->link_on) {
    for (int i = 0; i < x->ncfg; i++) fprintf(g, "%d %g\n", i, mm[i] / 1e3);
    fprintf(g, "e\n");
  }
  (void)ref;
  int st = pclose(g);
  if (st != 0) fprintf(stderr, "%s: --plot: gnuplot failed (status %d; make deps installs gnuplot-nox)\n", o->prog, st);
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
  d.link = o->link;
  sk_error err;
  if (sk_world_create(&d, w, &err) != SK_OK) {
    fprintf(stderr, "%s: cannot create the threads world: %s\n", o->prog, err.msg);
    return 1;
  }
  x->n = d.ndevices, x->nlocal = d.ndevices, x->local0 = 0;
  return 0;
}

static void fp_print_header(const fp_ctx *x) {
  const fp_opts *o = x->o;
  printf("# shardkit %d.%d.%d  %s  backend: %s  devices: %d\n", SK_VERSION_MAJOR, SK_VERSION_MINOR, SK_VERSION_PATCH,
         o->prog, o->backend, x->n);
  printf("# Command: %s\n", o->cmdline);
  printf("# model %s: %d tensors, %zu bytes of f32 gradients; batch %d; FLOP-model backward %.1f us at %g TFLOP/s\n",
         o->model, x->nt, x->total_bytes, x->batch, x->compute_total_us, o->tflops);
  printf("# gradients: %s; in-place AllReduce sum; registered in backward order; %d warm-up + %d timed rounds, medians\n",
         o->zero_copy ? "views of one flat buffer (zero-copy)" : "separate buffers (packed)", o->warmup, o->rounds);
  if (o->link_on)
    printf("# link model: alpha %g us, %g GB/s (ring costs); modelled times from the virtual clocks\n", o->link.alpha_us,
           o->link.gbps);
  fflush(stdout);
}

/* One row per threshold (and the CSV): measured and modelled medians, speedups against no fusion. */
static int fp_print_rows(const fp_ctx *x, const double *tm, const double *ex, const double *mm, const double *mx,
                         int ref, int *best, int *bestm) {
  const fp_opts *o = x->o;
  int status = 0;
  printf("#\n# %16s %8s %12s %12s %8s", "threshold_bytes", "buckets", "time_us", "exposed_us", "speedup");
  if (o->link_on) printf(" %14s %16s %10s", "model_time_us", "model_exposed_us", "model_spdup");
  printf("\n");
  FILE *csv = o->csv ? fopen(o->csv, "w") : NULL;
  if (o->csv && !csv) {
    fprintf(stderr, "%s: --csv: cannot write '%s'\n", o->prog, o->csv);
    status = 1;
  }
  if (csv)
    fprintf(csv, "threshold_bytes,buckets,time_us,exposed_us,speedup%s\n",
            o->link_on ? ",model_time_us,model_exposed_us,model_speedup" : "");
  *best = -1, *bestm = -1;
  for (int i = 0; i < x->ncfg; i++) {
    char s[48];
    fp_thr_str(s, sizeof s, x->cfg_thr[i], x->cfg_auto[i]);
    double sp = tm[i] > 0 ? tm[ref] / tm[i] : 0, spm = mm[i] > 0 ? mm[ref] / mm[i] : 0;
    printf("  %16s %8d %12.1f %12.1f %8.2f", s, x->buckets[i], tm[i], ex[i], sp);
    if (o->link_on) printf(" %14.1f %16.1f %10.2f", mm[i], mx[i], spm);
    printf("\n");
    if (csv) {
      fprintf(csv, "%s,%d,%.1f,%.1f,%.3f", s, x->buckets[i], tm[i], ex[i], sp);
      if (o->link_on) fprintf(csv, ",%.1f,%.1f,%.3f", mm[i], mx[i], spm);
      fprintf(csv, "\n");
    }
    if (!x->cfg_auto[i] && x->cfg_thr[i] != 0) {
      if (*best < 0 || tm[i] < tm[*best]) *best = i;
      if (*bestm < 0 || mm[i] < mm[*bestm]) *bestm = i;
    }
  }
  if (csv) fclose(csv);
  return status;
}

/* World rank 0, after the run: the table, the best thresholds, the plot. Returns an exit status. */
static int fp_report(const fp_ctx *x) {
  const fp_opts *o = x->o;
  double tm[FP_MAXCFG + 1], ex[FP_MAXCFG + 1], mm[FP_MAXCFG + 1], mx[FP_MAXCFG + 1];
  int ref = 0; /* the threshold-0 config (main always adds one); starting at 0 keeps tm[ref] in bounds */
  for (int i = 0; i < x->ncfg; i++) {
    tm[i] = fp_median(x->meas + i * o->rounds, o->rounds);
    mm[i] = fp_median(x->model + i * o->rounds, o->rounds);
    ex[i] = tm[i] - x->compute_total_us;
    mx[i] = mm[i] - x->compute_total_us;
    if (ex[i] < 0) ex[i] = 0;
    if (mx[i] < 0) mx[i] = 0;
    if (!x->cfg_auto[i] && x->cfg_thr[i] == 0) ref = i;
  }
  if (o->autopick)
    printf("# auto: a = %.2f us, c = %.3g us/B (%s), S = %zu B, T_b = %.1f us -> threshold %.0f B\n", x->probe_a,
           x->probe_c, o->link_on ? "link model" : "probe of the backend", x->total_bytes, x->compute_total_us,
           x->auto_bytes);
  int best, bestm;
  int status = fp_print_rows(x, tm, ex, mm, mx, ref, &best, &bestm);
  if (best >= 0) {
    char s[48];
    fp_thr_str(s, sizeof s, x->cfg_thr[best], false);
    printf("# best swept (measured): %s, %.1f us, %.2fx against no fusion\n", s, tm[best], tm[ref] / tm[best]);
    if (o->link_on) {
      fp_thr_str(s, sizeof s, x->cfg_thr[bestm], false);
      printf("# best swept (modelled): %s, %.1f us, %.2fx against no fusion\n", s, mm[bestm], mm[ref] / mm[bestm]);
    }
    if (o->autopick) {
      int ai = x->ncfg - 1;
      printf("# auto (%zu B): measured %.1f us = %.3f x best swept", x->cfg_thr[ai], tm[ai], tm[ai] / tm[best]);
      if (o->link_on) printf("; modelled %.1f us = %.3f x best swept", mm[ai], mm[ai] / mm[bestm]);
      printf("\n");
    }
  }
  if (o->plot) fp_plot(x, tm, mm, ref);
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
    if (w) sk_world_destroy(w);
    free(x.t);
    return st;
  }
  x.meas = (double *)calloc((size_t)(x.ncfg * o.rounds), sizeof(double));
  x.model = (double *)calloc((size_t)(x.ncfg * o.rounds), sizeof(double));
  if (!x.meas || !x.model) {
    fprintf(stderr, "%s: out of memory\n", o.prog);
    sk_world_destroy(w);
    free(x.meas), free(x.model), free(x.t);
    return 1;
  }
  bool root = x.local0 == 0;
  if (root) fp_print_header(&x);
  sk_result r = sk_world_run(w, fp_device, &x);
  int status = 0;
  if (r != SK_OK) {
    fprintf(stderr, "%s: the run failed: %s: %s\n", o.prog, sk_result_name(r), sk_world_error_message(w));
    status = 1;
  }
  if (root && status == 0) status = fp_report(&x);
  sk_world_destroy(w);
  free(x.meas);
  free(x.model);
  free(x.t);
  return status;
}
