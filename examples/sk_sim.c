/* sk-sim -- trains a network described in JSON (docs/network-json.md) and prints its losses in
   MindSpore's tutorial format.

     build/sk-sim --net examples/nets/operator_parallel.json --steps 100 --dtype f64

   Today it runs the single-device reference (sk_train.h): the run every distributed run of the
   same network is checked against. --devices N > 1 needs the AutoParallel compiler, which is
   not built yet: sk-sim says so and exits 2 rather than pretend.

   Output: "epoch: E step: S, loss is L" every 10 steps (S counts within the epoch; L with 17
   significant digits in f64, 9 in f32 / f16 / bf16: enough to read the value back exactly),
   "epoch: E test accuracy: A" after each epoch where the data has a test set, and a summary
   line starting "# " with the step time (the mean over the run's steps, the median step, and the
   median step's CPU time). Data: the network's "dataset" (examples/datasets.h);
   Fashion-MNIST from DATA_PATH or Debian's dataset-fashion-mnist. */
#define _POSIX_C_SOURCE 200809L
#define SK_IMPL
#include "shardkit.h"
#include "sk_json.h"
#include "sk_train.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "datasets.h"
#include "progs.h"

typedef struct options {
  const char *net;
  int devices;
  long steps;  /* 0: whole epochs */
  int epochs;  /* default 1 */
  sk_dtype dtype;
  const char *optimizer; /* NULL: the network's */
  uint64_t seed;
} options;

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "Usage: %s --net FILE.json [--devices 1] [--steps S | --epochs E] [--dtype f16|bf16|f32|f64]\n"
          "          [--optimizer sgd|momentum|adam] [--seed K]\n"
          "Trains the network in FILE.json on one device (the reference run) and prints\n"
          "\"epoch: E step: S, loss is L\" every 10 steps, the test accuracy per epoch, and a summary.\n"
          "  --devices N     devices to simulate; only 1 today (the AutoParallel compiler comes next)\n"
          "  --steps S       stop after S steps (default: whole epochs)\n"
          "  --epochs E      epochs to run (default 1)\n"
          "  --dtype D       the float dtype of the run (default f32; f16/bf16 store, compute f32)\n"
          "  --optimizer O   override the network's optimizer (its hyper-parameters stay)\n"
          "  --seed K        initial parameters, dropout and synthetic data (default 1)\n"
          "Fashion-MNIST is read from DATA_PATH or %s.\n",
          prog_name(argv0), MNIST_DEFAULT_DIR);
}

static int bad_usage(const char *argv0, const char *msg, const char *arg) {
  fprintf(stderr, "%s: %s%s%s (try --help)\n", prog_name(argv0), msg, arg ? ": " : "", arg ? arg : "");
  return 2;
}

/* 0: go on; 1: --help printed; 2: bad usage. */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->devices = 1, o->epochs = 1, o->seed = 1, o->dtype = SK_F32;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (prog_is_help(a)) return usage(stdout, argv[0]), 1;
    if (!v) return bad_usage(argv[0], "unknown option or missing value", a);
    if (!strcmp(a, "--net")) o->net = v;
    else if (!strcmp(a, "--devices")) o->devices = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--steps")) o->steps = strtol(v, &end, 10);
    else if (!strcmp(a, "--epochs")) o->epochs = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, &end, 10);
    else if (!strcmp(a, "--optimizer")) o->optimizer = v;
    else if (!strcmp(a, "--dtype")) {
      if (!sk_dtype_from_name(v, &o->dtype) || !(o->dtype == SK_F32 || o->dtype == SK_F64 || o->dtype == SK_F16 ||
                                                 o->dtype == SK_BF16))
        return bad_usage(argv[0], "--dtype takes f16, bf16, f32 or f64", v);
    } else return bad_usage(argv[0], "unknown option", a);
    if (end && (*end || end == v)) return bad_usage(argv[0], "not a number", v);
    i++;
  }
  if (!o->net) return bad_usage(argv[0], "--net FILE.json is required", NULL);
  if (o->devices < 1 || o->steps < 0 || o->epochs < 1) return bad_usage(argv[0], "counts must be positive", NULL);
  return 0;
}

static sk_result blas_gemm(void *user, sk_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                           int64_t ldc) {
  (void)user;
  int64_t dims[] = {m, n, k, lda, ldb, ldc};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if ((int64_t)(blasint)dims[i] != dims[i]) return SK_ERR_INVALID_ARGUMENT;
  CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if (dt == SK_F64)
    cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, alpha, (const double *)a, (blasint)lda,
                (const double *)b, (blasint)ldb, beta, (double *)c, (blasint)ldc);
  else if (dt == SK_F32)
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, (float)alpha, (const float *)a,
                (blasint)lda, (const float *)b, (blasint)ldb, (float)beta, (float *)c, (blasint)ldc);
  else
    return SK_ERR_INVALID_ARGUMENT;
  return SK_OK;
}

static const sk_kernel_ctx BLAS = {blas_gemm, NULL};

typedef struct run {
  const options *o;
  const sk_graph *g;
  dataset data;
  sk_trainer *t;
  void *x, *y; /* one batch */
  bool y_float;
  double *step_s, *cpu_s; /* each training step's wall and CPU seconds (feed + step), for the medians */
  long nstep_s, cap_s;
} run;

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* The process's CPU time: on a shared machine a step's wall time also counts the time another
   process held the core; its CPU time does not. */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static sk_result feed(run *R, bool test, long b, sk_error *e) {
  const dataset *d = &R->data;
  dataset_batch(d, test, b, R->x, R->y, R->y_float);
  sk_result r = sk_trainer_feed(R->t, d->x, d->kind ? SK_I32 : SK_F32, R->x, (size_t)(d->batch * d->per_sample_x), e);
  if (!r) r = sk_trainer_feed(R->t, d->y, R->y_float ? SK_F32 : SK_I32, R->y, (size_t)(d->batch * d->per_sample_y), e);
  return r;
}

static sk_result test_accuracy(run *R, double *acc, sk_error *e) {
  int64_t good = 0, rows = 0;
  for (long b = 0; b < R->data.test_batches; b++) {
    int64_t c, n;
    sk_result r = feed(R, true, b, e);
    if (!r) r = sk_trainer_evaluate(R->t, &c, &n, e);
    if (r) return r;
    good += c, rows += n;
  }
  *acc = rows ? (double)good / (double)rows : 0;
  return SK_OK;
}

/* Keeps one step's time; -1 when out of memory. */
static int record_step(run *R, double wall, double cpu) {
  if (R->nstep_s == R->cap_s) {
    long cap = R->cap_s ? 2 * R->cap_s : 1024;
    double *p = (double *)realloc(R->step_s, sizeof(double) * (size_t)cap);
    if (!p) return -1;
    R->step_s = p;
    if (!(p = (double *)realloc(R->cpu_s, sizeof(double) * (size_t)cap))) return -1;
    R->cpu_s = p, R->cap_s = cap;
  }
  R->step_s[R->nstep_s] = wall, R->cpu_s[R->nstep_s++] = cpu;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median step in ms: the mean counts the first steps (cold caches, OpenBLAS's first
   buffers) and any step the shared machine slowed; the median is what a step costs. */
static double median_ms(double *s, long n) {
  if (!n) return 0;
  qsort(s, (size_t)n, sizeof(double), cmp_double);
  return (n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) * 1e3;
}

/* The epochs; prints as it goes. */
static sk_result train(run *R, long *done, double *seconds, sk_error *e) {
  const options *o = R->o;
  bool f64 = o->dtype == SK_F64;
  *done = 0, *seconds = 0;
  for (int ep = 0; ep < o->epochs; ep++) {
    double t0 = now_s(); /* training steps only: evaluation is not a step */
    for (long s = 0; s < R->data.train_batches && (!o->steps || *done < o->steps); s++, (*done)++) {
      double loss, t1 = now_s(), c1 = cpu_s();
      sk_result r = feed(R, false, s, e);
      if (!r) r = sk_trainer_step(R->t, &loss, e);
      if (r) return r;
      if (record_step(R, now_s() - t1, cpu_s() - c1)) return sk__fail(e, SK_ERR_OUT_OF_MEMORY, "out of memory");
      if (s % 10 == 0) printf(f64 ? "epoch: %d step: %ld, loss is %.17g\n" : "epoch: %d step: %ld, loss is %.9g\n", ep, s, loss);
    }
    *seconds += now_s() - t0;
    if (R->g->logits >= 0) {
      double acc;
      sk_result r = test_accuracy(R, &acc, e);
      if (r) return r;
      printf("epoch: %d test accuracy: %.4f\n", ep, acc);
    }
    fflush(stdout);
    if (o->steps && *done >= o->steps) break;
  }
  return SK_OK;
}

static int setup(run *R, sk_graph *g, char *msg, size_t cap) {
  const options *o = R->o;
  sk_error e;
  if (sk_json_load_network(o->net, g, &e)) return snprintf(msg, cap, "%s", e.msg), -1;
  R->g = g;
  const char *dir = getenv("DATA_PATH"); /* as in the tutorial; the library itself reads none */
  if (dataset_open(g, dir && *dir ? dir : MNIST_DEFAULT_DIR, o->seed, &R->data, msg, cap)) return -1;
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = o->dtype, d.optim = g->optim, d.seed = o->seed, d.kernels = &BLAS;
  if (o->optimizer && !sk_optim_kind_from_name(o->optimizer, &d.optim.kind))
    return snprintf(msg, cap, "--optimizer takes sgd, momentum or adam, not '%s'", o->optimizer), -1;
  if (sk_trainer_create(g, &d, &R->t, &e)) return snprintf(msg, cap, "%s", e.msg), -1;
  R->y_float = g->tensors[R->data.y].dtype == SK_F32 || g->tensors[R->data.y].dtype == SK_F64;
  R->x = malloc(sizeof(double) * (size_t)(R->data.batch * R->data.per_sample_x));
  R->y = malloc(sizeof(double) * (size_t)(R->data.batch * R->data.per_sample_y));
  if (!R->x || !R->y) return snprintf(msg, cap, "out of memory"), -1;
  return 0;
}

int main(int argc, char **argv) {
  options o;
  int code = parse_options(argc, argv, &o);
  if (code) return code == 1 ? 0 : code;
  if (o.devices > 1) {
    fprintf(stderr,
            "%s: --devices %d: running a network on several devices needs the AutoParallel compiler, which this "
            "build does not have yet; --devices 1 runs the single-device reference\n",
            prog_name(argv[0]), o.devices);
    return 2;
  }
  openblas_set_num_threads(1); /* one device, one core: the reference is timed as a device */
  sk_graph g;
  sk_graph_init(&g);
  run R;
  memset(&R, 0, sizeof R);
  R.o = &o;
  char msg[1024];
  sk_error e;
  long done = 0;
  double seconds = 0;
  int rc = 0;
  if (setup(&R, &g, msg, sizeof msg)) fprintf(stderr, "%s: %s\n", prog_name(argv[0]), msg), rc = 1;
  else if (train(&R, &done, &seconds, &e)) fprintf(stderr, "%s: %s\n", prog_name(argv[0]), e.msg), rc = 1;
  else
    printf("# 1 device, %s, %ld steps, %.3f ms per step, median %.3f ms, median cpu %.3f ms\n",
           sk_dtype_name(o.dtype), done, done ? seconds * 1e3 / (double)done : 0.0, median_ms(R.step_s, R.nstep_s),
           median_ms(R.cpu_s, R.nstep_s));
  free(R.x), free(R.y), free(R.step_s), free(R.cpu_s);
  sk_trainer_destroy(R.t);
  dataset_close(&R.data);
  sk_graph_free(&g);
  return rc;
}
