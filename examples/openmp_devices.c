/* openmp_devices -- OpenMP threads as shardkit devices (bring your own threads).

   A threads-backend world of N devices is created first; then
   `#pragma omp parallel num_threads(N)` starts a team, and each team member joins the world as
   device omp_get_thread_num() with sk_comm_init_rank. Every device holds a shard of a vector and
   a batch of training samples, and the team does real collective work with them:

     allgather  each device's shard -> the whole vector on every device
     allreduce  the sum of the vector (int64), and 20 data-parallel SGD steps of a linear model
                whose gradients are averaged by AllReduce (f64)

   After the parallel region the main thread checks every device's results against values it
   computes itself, without shardkit's collectives: the vector from its formula, the sum
   serially, the training run on one thread over all N batches (the model's MatMul is
   sk_kernels.h's on both sides: the check is of the collectives, not of the math). Exit 0 when everything matches, 1 on any wrong value or
   error, 2 on bad arguments.

   Built without OpenMP (no -fopenmp, so no _OPENMP), the same devices run on POSIX threads and
   must give the same results: the bring-your-own-threads path is the same, only who starts the
   threads differs, so the program stays a working example and test either way.

     make build/openmp_devices && build/openmp_devices --devices 8 */
#define SK_IMPL
#include "shardkit.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progs.h"

#ifdef _OPENMP
#include <omp.h>
#else
#include <pthread.h>
#endif

#define MAX_DEVICES 64 /* every device is a thread of this process: keep the team modest */
#define SHARD 1000     /* vector elements per device */
#define DIM 16         /* weights of the linear model */
#define BATCH 32       /* training samples per device */
#define STEPS 20
#define LR 0.5

/* One device's results, written only by its own thread and read by main after the join. */
typedef struct dev_slot {
  bool done;            /* reached the end without an error */
  char msg[256];        /* the first error, if any */
  size_t gather_wrong;  /* elements of the gathered vector that differ from the formula */
  int64_t sum;          /* the AllReduce'd sum of the vector */
  double loss0, loss1;  /* mean squared error before and after training (AllReduce'd) */
  double w[DIM];        /* the weights after training */
} dev_slot;

typedef struct run_state {
  sk_world *world;
  int n;
  int team;  /* threads the runtime actually started */
  dev_slot *slots;
} run_state;

/* The vector's element g: small integers, so float holds them exactly and sums are exact. */
static float vec_value(size_t g) { return (float)((long)(g * 7u % 251u) - 125); }

/* A deterministic sample stream: sample s of the whole data set is the same whichever device
   (or the single-threaded reference) generates it. */
static double sample_coord(size_t s, int j) {
  uint64_t x = (uint64_t)s * 0x9E3779B97F4A7C15ull + (uint64_t)j * 0xBF58476D1CE4E5B9ull + 1;
  x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
  return (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
}

static double true_weight(int j) { return (double)(j % 5 - 2) + 0.25 * j; }

/* Mean squared error *loss and its gradient over device `rank`'s batch (samples rank*BATCH
   ...). The model's product pred = x w and its gradient x^T dpred are sk_kernels.h's MatMul;
   the loss is written out here because sk_kernels.h has no MSELoss (only MAELoss). */
static sk_result batch_grad(const double *w, int rank, double *grad, double *loss, sk_error *err) {
  static const int64_t sx[2] = {BATCH, DIM}, sw[2] = {DIM, 1};
  double x[BATCH][DIM], y[BATCH], pred[BATCH], dpred[BATCH], sum = 0;
  for (int b = 0; b < BATCH; b++) { /* the samples and their labels from the true weights */
    size_t s = (size_t)rank * BATCH + (size_t)b;
    y[b] = 0.01 * sample_coord(s, DIM); /* a little label noise */
    for (int j = 0; j < DIM; j++) {
      x[b][j] = sample_coord(s, j);
      y[b] += true_weight(j) * x[b][j];
    }
  }
  sk_result r = sk_kern_matmul(NULL, SK_F64, false, false, 2, sx, x, 2, sw, w, pred, err);
  for (int b = 0; b < BATCH && r == SK_OK; b++) {
    double e = pred[b] - y[b];
    sum += e * e;
    dpred[b] = 2.0 * e / BATCH; /* d mean(e^2) / d pred */
  }
  if (r == SK_OK) r = sk_kern_matmul_bwd(NULL, SK_F64, false, false, 2, sx, x, 2, sw, w, dpred, NULL, grad, err);
  *loss = sum / BATCH;
  return r;
}

/* Records the device's first error and aborts the world, so that peers blocked in a collective
   return at once with SK_ERR_ABORTED instead of waiting out the world's timeout. */
static void fail(run_state *st, int rank, const char *fmt, ...) {
  dev_slot *s = &st->slots[rank];
  if (!s->msg[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
  }
  sk_world_abort(st->world);
}

static bool coll_ok(run_state *st, int rank, sk_comm *c, sk_result r, const char *what) {
  if (r == SK_OK) return true;
  fail(st, rank, "device %d: %s: %s (%s)", rank, what, sk_result_name(r), sk_comm_error_message(c));
  return false;
}

/* AllGather the shards into the whole vector, check it here, then AllReduce its sum. */
static bool gather_and_sum(run_state *st, int rank, sk_comm *c) {
  dev_slot *s = &st->slots[rank];
  size_t n = (size_t)st->n;
  float *shard = (float *)malloc(SHARD * sizeof(float)), *all = (float *)malloc(n * SHARD * sizeof(float));
  bool ok = shard && all;
  if (!ok) fail(st, rank, "device %d: out of memory", rank);
  int64_t local = 0;
  for (size_t i = 0; ok && i < SHARD; i++) {
    shard[i] = vec_value((size_t)rank * SHARD + i);
    local += (int64_t)shard[i];
  }
  ok = ok && coll_ok(st, rank, c, sk_allgather(c, shard, all, SHARD, SK_F32, NULL), "allgather");
  for (size_t g = 0; ok && g < n * SHARD; g++) s->gather_wrong += all[g] != vec_value(g);
  ok = ok && coll_ok(st, rank, c, sk_allreduce(c, &local, &s->sum, 1, SK_I64, SK_SUM, NULL), "allreduce of the sum");
  free(shard), free(all);
  return ok;
}

/* Data parallelism: every device computes the gradient of its own batch; AllReduce(avg) makes
   it the full-batch gradient on every device, so every replica takes the same step. */
static bool train(run_state *st, int rank, sk_comm *c) {
  dev_slot *s = &st->slots[rank];
  double grad[DIM], loss = 0;
  sk_error err;
  memset(s->w, 0, sizeof s->w);
  for (int step = 0; step <= STEPS; step++) {
    if (batch_grad(s->w, rank, grad, &loss, &err) != SK_OK) {
      fail(st, rank, "device %d: %s", rank, err.msg);
      return false;
    }
    if (!coll_ok(st, rank, c, sk_allreduce(c, &loss, &loss, 1, SK_F64, SK_AVG, NULL), "allreduce of the loss")) return false;
    if (step == 0) s->loss0 = loss;
    if (step == STEPS) break; /* the last pass only measures the trained model's loss */
    if (!coll_ok(st, rank, c, sk_allreduce(c, grad, grad, DIM, SK_F64, SK_AVG, NULL), "allreduce of the gradient"))
      return false;
    for (int j = 0; j < DIM; j++) s->w[j] -= LR * grad[j];
  }
  s->loss1 = loss;
  return true;
}

/* What each thread of the team runs: join as device `rank`, work, leave. */
static void device_main(run_state *st, int rank) {
  sk_comm *c = NULL;
  sk_error err;
  memset(&err, 0, sizeof err);
  sk_result r = sk_comm_init_rank(st->world, rank, &c, &err);
  if (r != SK_OK) {
    fail(st, rank, "device %d: sk_comm_init_rank: %s (%s)", rank, sk_result_name(r), err.msg);
    return;
  }
  bool ok = gather_and_sum(st, rank, c) && train(st, rank, c);
  r = sk_comm_destroy(c, NULL);
  if (ok && r != SK_OK) fail(st, rank, "device %d: sk_comm_destroy: %s", rank, sk_result_name(r)), ok = false;
  st->slots[rank].done = ok;
}

#ifdef _OPENMP
static const char *thread_kind = "an OpenMP thread (omp parallel num_threads)";

/* The runtime may start fewer threads than asked (OMP_THREAD_LIMIT, nested regions, dynamic
   adjustment). Every member of the team sees the same omp_get_num_threads(), so all of them
   agree to stay out of the world: nobody waits for a device that does not exist. */
static void run_devices(run_state *st) {
  omp_set_dynamic(0); /* ask for exactly n threads; the check below still guards */
  int n = st->n;
#pragma omp parallel num_threads(n) default(none) shared(st, n)
  {
    int team = omp_get_num_threads();
    if (omp_get_thread_num() == 0) st->team = team; /* read by main after the region's barrier */
    if (team == n) device_main(st, omp_get_thread_num());
  }
}
#else
static const char *thread_kind = "a POSIX thread (built without OpenMP)";

typedef struct thread_arg {
  run_state *st;
  int rank;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = (thread_arg *)p;
  device_main(a->st, a->rank);
  return NULL;
}

/* The same devices on POSIX threads; a thread that cannot be started shrinks the team, which
   is then reported like an OpenMP runtime that gave too few threads. */
static void run_devices(run_state *st) {
  pthread_t th[MAX_DEVICES];
  thread_arg args[MAX_DEVICES];
  int started = 0;
  for (; started < st->n; started++) {
    args[started] = (thread_arg){st, started};
    if (pthread_create(&th[started], NULL, thread_main, &args[started]) != 0) break;
  }
  if (started < st->n) sk_world_abort(st->world); /* the started ones must not wait for the rest */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  st->team = started;
}
#endif

/* The single-threaded reference: the same batches, the per-device gradients summed in device
   order and divided by n, the same steps. Returns false (with the message in err) if a kernel
   failed. */
static bool reference_train(int n, double *w, double *loss0, double *loss1, sk_error *err) {
  double grad[DIM], sum[DIM];
  memset(w, 0, DIM * sizeof *w);
  for (int step = 0; step <= STEPS; step++) {
    double loss = 0;
    memset(sum, 0, sizeof sum);
    for (int r = 0; r < n; r++) {
      double l = 0;
      if (batch_grad(w, r, grad, &l, err) != SK_OK) return false;
      loss += l;
      for (int j = 0; j < DIM; j++) sum[j] += grad[j];
    }
    loss /= n;
    if (step == 0) *loss0 = loss;
    if (step == STEPS) *loss1 = loss;
    else
      for (int j = 0; j < DIM; j++) w[j] -= LR * sum[j] / n;
  }
  return true;
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-12 * (1.0 + fabs(b)); }

/* Compares every device's results with the reference and prints what was checked; returns the
   number of failed checks. */
static int check(const run_state *st) {
  int n = st->n, bad_sum = 0, bad_train = 0;
  size_t gwrong = 0;
  int64_t expect_sum = 0;
  for (size_t g = 0; g < (size_t)n * SHARD; g++) expect_sum += (int64_t)vec_value(g);
  double w[DIM], loss0 = 0, loss1 = 0, maxdiff = 0;
  sk_error err;
  if (!reference_train(n, w, &loss0, &loss1, &err)) {
    fprintf(stderr, "openmp_devices: error: the single-threaded run: %s\n", err.msg);
    return 1;
  }
  for (int r = 0; r < n; r++) {
    const dev_slot *s = &st->slots[r];
    gwrong += s->gather_wrong;
    if (s->sum != expect_sum) {
      bad_sum++;
      fprintf(stderr, "openmp_devices: error: device %d: sum %lld, expected %lld\n", r, (long long)s->sum,
              (long long)expect_sum);
    }
    bool same = close_to(s->loss0, loss0) && close_to(s->loss1, loss1);
    for (int j = 0; j < DIM; j++) {
      same = same && close_to(s->w[j], w[j]);
      if (fabs(s->w[j] - w[j]) > maxdiff) maxdiff = fabs(s->w[j] - w[j]);
    }
    if (!same) {
      bad_train++;
      fprintf(stderr, "openmp_devices: error: device %d: weights or losses differ from the single-threaded run\n", r);
    }
  }
  bool converged = loss1 < loss0 / 100;
  if (!converged) fprintf(stderr, "openmp_devices: error: training did not converge (loss %g -> %g)\n", loss0, loss1);
  printf("allgather: %d shard%s of %d floats -> %d on every device, %zu wrong: %s\n", n, n == 1 ? "" : "s", SHARD,
         n * SHARD, gwrong,
         gwrong ? "FAIL" : "ok");
  printf("allreduce: the vector's sum on every device is %lld (expected %lld): %s\n", (long long)st->slots[0].sum,
         (long long)expect_sum, bad_sum ? "FAIL" : "ok");
  printf("train: %d data-parallel SGD steps over %dx%d samples, loss %.6f -> %.6f, every device's weights match a "
         "single-threaded run (max difference %.3g): %s\n",
         STEPS, n, BATCH, loss0, loss1, maxdiff, bad_train || !converged ? "FAIL" : "ok");
  return (gwrong != 0) + bad_sum + bad_train + !converged;
}

static void usage(FILE *f, const char *argv0) {
  fprintf(f, "Usage: %s [--devices N]   N threads (OpenMP when built with it) join one world as its devices; "
             "N = 1..%d, default 4\n", argv0, MAX_DEVICES);
}

/* Returns 0 to go on, -1 after --help, 2 on a bad argument. */
static int parse_args(int argc, char **argv, int *n) {
  for (int i = 1; i < argc; i += 2) { /* --devices N is the one option: pairs */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (prog_is_help(a)) {
      usage(stdout, argv[0]);
      return -1;
    }
    if (strcmp(a, "--devices") || !v) return prog_bad_usage(argv[0], "unknown option or missing value", a);
    if (!prog_parse_int_in(v, 1, MAX_DEVICES, n)) return prog_bad_usage(argv[0], "--devices takes 1..64", v);
  }
  return 0;
}

/* The first device error that is not merely another device's abort reaching it. */
static const char *first_error(const run_state *st) {
  const char *any = NULL;
  for (int r = 0; r < st->n; r++) {
    const char *m = st->slots[r].msg;
    if (m[0] && !strstr(m, "SK_ERR_ABORTED")) return m;
    if (m[0] && !any) any = m;
    if (!m[0] && !st->slots[r].done && !any) any = "a device stopped without reporting why";
  }
  return any;
}

int main(int argc, char **argv) {
  run_state st;
  memset(&st, 0, sizeof st);
  st.n = 4;
  int pr = parse_args(argc, argv, &st.n);
  if (pr) return pr < 0 ? 0 : pr;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = st.n;
  d.backend = sk_threads_backend();
  d.timeout_ms = 30000; /* a backstop only: failures abort the world and wake every waiter at once */
  sk_error err;
  st.slots = (dev_slot *)calloc((size_t)st.n, sizeof *st.slots);
  if (!st.slots || sk_world_create(&d, &st.world, &err) != SK_OK) {
    fprintf(stderr, "openmp_devices: error: %s\n", st.slots ? err.msg : "out of memory");
    free(st.slots);
    return 1;
  }
  printf("openmp_devices: %d device%s, each %s joined with sk_comm_init_rank\n", st.n, st.n == 1 ? "" : "s",
         thread_kind);
  run_devices(&st);
  int failed = 0;
  if (st.team != st.n) {
    fprintf(stderr, "openmp_devices: error: asked for %d threads, the runtime started %d: no device joined\n", st.n,
            st.team);
    failed = 1;
  } else if (first_error(&st)) {
    fprintf(stderr, "openmp_devices: error: %s\n", first_error(&st));
    failed = 1;
  } else {
    failed = check(&st) != 0;
  }
  sk_result r = sk_world_destroy(st.world, NULL);
  if (r != SK_OK) fprintf(stderr, "openmp_devices: error: sk_world_destroy: %s\n", sk_result_name(r)), failed = 1;
  free(st.slots);
  puts(failed ? "openmp_devices: FAILED" : "openmp_devices: ok");
  return failed;
}
