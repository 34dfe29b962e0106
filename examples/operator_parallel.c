/* operator_parallel -- MindSpore's operator-parallel tutorial network, written in C, trained on N
   simulated devices in one process (or N MPI processes), matching a single-device run.

     flatten -> MatMul 784x512 ((2,4),(4,1)) -> ReLU ((4,1),) -> MatMul 512x512 ((1,8),(8,1))
     -> ReLU ((8,1),) -> MatMul 512x10 (data parallel) -> softmax cross-entropy (batch mean)

   What a user writes is build_network: the tensors, their initialisers, the operators and their
   shard strategies (or the tutorial's higher-order layouts), as with sk_graph.h. The rest is the
   library's: AutoParallel's compiler (sk_parallel.h) turns the network and the device count into
   one program per device (every operator's layouts and collectives, the moves between them, the
   gradients' Mirror AllReduces), and its runtime (sk_runtime.h) runs that program on every device
   of a world. examples/nets/operator_parallel.json is the same network as data (sk-sim).
   The math runs in double precision. In float32, cutting a GEMM into pieces changes its
   rounding, and over 300 SGD steps the sharded and single-device losses drift apart by ~6e-4
   relative (measured); in double they agree to ~1e-15, which makes the check a check of the
   sharding rather than of rounding.
   Weights are drawn once on the full tensors from a seeded RNG and then sliced, so every device
   count starts from the same model. Data: Fashion-MNIST (DATA_PATH, or Debian's
   dataset-fashion-mnist).

   Usage: operator_parallel [--devices N] [--layouts] [--epochs E] [--steps S]
                            [--dataset-strategy data_parallel|full_batch] [--check]
                            [--backend threads|mpi]
   N is 8 (the tutorial's strategies) or 1 (the single-device baseline); --help explains the rest.
   On 8 MPI processes: mpirun.openmpi --oversubscribe -np 8 build/operator_parallel --backend mpi
   (--oversubscribe: Open MPI starts no more processes than cores without it; as root it also
   wants --allow-run-as-root). Under an MPI launch of several processes --backend defaults to mpi. */
#define _GNU_SOURCE
#define SK_IMPL
#include "shardkit.h"
#include "sk_mpi.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fashion_mnist.h"
#include "blas_gemm.h"
#include "progs.h"
#include "loss_check.h"

#define BATCH 32
#define IN 784
#define HID 512
#define CLASSES 10
#define SEED 1u
#define MAX_EPOCHS 1000 /* every loss is kept: 1875 steps an epoch, two doubles each (the reference's) */

typedef struct options {
  int devices;
  bool layouts, full_batch, check, mpi;
  int epochs;
  long steps; /* 0 = whole epochs */
  const char *backend_asked; /* --backend's value, NULL when not given */
} options;

/* ---- the network, as a user writes it ------------------------------------------------------ */

/* An operator reading tensor a (and b, when b >= 0); its strategy is set by the caller. */
static void op_init(sk_graph_op *op, const char *name, sk_op_kind kind, int a, int b) {
  memset(op, 0, sizeof *op);
  snprintf(op->name, sizeof op->name, "%s", name);
  op->desc.kind = kind, op->ninputs = b < 0 ? 1 : 2, op->inputs[0] = a, op->inputs[1] = b;
}

/* MindSpore's shard(((s00, s01), (s10, s11))): one tuple per input. */
static void shard(sk_graph_op *op, const int s[][2]) {
  op->desc.has_strategy = true;
  for (int k = 0; k < op->ninputs; k++) op->desc.strategy[k][0] = s[k][0], op->desc.strategy[k][1] = s[k][1];
}

/* MindSpore's higher-order layouts for a MatMul: x's and w's tensor maps on one device mesh. */
static sk_result shard_layouts(const sk_graph *g, sk_graph_op *op, const char *mesh_text, const char *x_map,
                               const char *w_map, sk_error *err) {
  const char *maps[2] = {x_map, w_map};
  sk_mesh mesh;
  sk_result r = sk_mesh_parse(&mesh, mesh_text, err);
  for (int k = 0; k < 2 && r == SK_OK; k++) {
    const sk_graph_tensor *t = &g->tensors[op->inputs[k]];
    r = sk_layout_parse(&op->desc.layouts[k], &mesh, maps[k], t->ndims, t->shape, err);
  }
  op->desc.has_layouts = r == SK_OK;
  return r;
}

/* Adds op to g; *out is its output tensor. */
static sk_result add(sk_graph *g, const sk_graph_op *op, int *out, sk_error *err) {
  int i = 0;
  sk_result r = sk_graph_add_op(g, op, &i, err);
  if (r == SK_OK) *out = g->ops[i].outputs[0];
  return r;
}

/* The tutorial's network. Strategies are written for 8 devices; on 1 device the compiler
   replaces each with data parallel over that one device (whole tensors): the baseline. */
static sk_result build_network(sk_graph *g, bool layouts, sk_error *err) {
  const int64_t image[4] = {BATCH, 1, 28, 28}, label[1] = {BATCH};
  const int64_t w1[2] = {IN, HID}, w2[2] = {HID, HID}, w3[2] = {HID, CLASSES};
  /* The tutorial's HeUniform(negative_slope=sqrt(5)) on MindSpore's [out, in] weight is
     U(+-1/sqrt(in)); the weights here are [in, out], so the bound is given as a plain uniform. */
  const sk_init u_in = {SK_INIT_UNIFORM, 1 / sqrt(IN)}, u_hid = {SK_INIT_UNIFORM, 1 / sqrt(HID)};
  int x, y, p1, p2, p3, t;
  sk_graph_op op;
  sk_result r;
  if ((r = sk_graph_add_input(g, "image", SK_F32, 4, image, &x, err)) ||
      (r = sk_graph_add_input(g, "label", SK_I32, 1, label, &y, err)) ||
      (r = sk_graph_add_param(g, "fc1.weight", SK_F32, 2, w1, u_in, &p1, err)) ||
      (r = sk_graph_add_param(g, "fc2.weight", SK_F32, 2, w2, u_hid, &p2, err)) ||
      (r = sk_graph_add_param(g, "fc3.weight", SK_F32, 2, w3, u_hid, &p3, err)))
    return r;
  op_init(&op, "flatten", SK_OP_FLATTEN, x, -1);
  if ((r = add(g, &op, &t, err))) return r;
  op_init(&op, "fc1", SK_OP_MATMUL, t, p1);
  if (!layouts) shard(&op, (const int[][2]){{2, 4}, {4, 1}});
  else if ((r = shard_layouts(g, &op, "dp=2,sp=2,mp=2", "mp,(sp,dp)", "(sp,dp),None", err))) return r;
  if ((r = add(g, &op, &t, err))) return r;
  op_init(&op, "relu1", SK_OP_RELU, t, -1);
  shard(&op, (const int[][2]){{4, 1}});
  if ((r = add(g, &op, &t, err))) return r;
  op_init(&op, "fc2", SK_OP_MATMUL, t, p2);
  if (!layouts) shard(&op, (const int[][2]){{1, 8}, {8, 1}});
  else if ((r = shard_layouts(g, &op, "tp=8", "None,tp", "tp,None", err))) return r;
  if ((r = add(g, &op, &t, err))) return r;
  op_init(&op, "relu2", SK_OP_RELU, t, -1);
  shard(&op, (const int[][2]){{8, 1}});
  if ((r = add(g, &op, &t, err))) return r;
  op_init(&op, "fc3", SK_OP_MATMUL, t, p3); /* no strategy: MindSpore's default, data parallel */
  int logits;
  if ((r = add(g, &op, &logits, err))) return r;
  op_init(&op, "loss", SK_OP_SOFTMAX_CE, logits, y);
  if ((r = add(g, &op, &t, err)) || (r = sk_graph_set_loss(g, t, err)) || (r = sk_graph_set_eval(g, logits, y, err)))
    return r;
  g->optim.kind = SK_OPTIM_SGD, g->optim.lr = 0.01;
  return SK_OK;
}

/* ---- training ------------------------------------------------------------------------------- */

/* What a run produced: every loss, and seconds per epoch from the steps timed so far (fewer
   than an epoch: extrapolated). */
typedef struct results {
  double *losses;
  long nlosses;
  double seconds;
  long timed_steps;
} results;

typedef struct job { /* what every device reads */
  const options *o;
  const sk_graph *g;
  int image, label; /* its input tensors */
  sk_parallel_plan plan;
  mnist_set train, test;
  results res; /* written by device 0 */
} job;

/* One device's run: the runtime on a world, or (--check's silent reference) the trainer. */
typedef struct run {
  job *J;
  sk_runtime *rt;
  sk_trainer *t;
  bool lead, quiet;
  results *out;
} run;

/* The network's inputs from rows [row, row + BATCH) of set m (the global batch: each device
   keeps its slice). */
static sk_result feed(run *R, const mnist_set *m, long row, sk_error *e) {
  const float *x = m->images + (size_t)row * IN;
  const int32_t *y = m->labels + row;
  if (R->rt) {
    sk_result r = sk_runtime_feed(R->rt, R->J->image, SK_F32, x, (size_t)BATCH * IN, e);
    return r ? r : sk_runtime_feed(R->rt, R->J->label, SK_I32, y, BATCH, e);
  }
  sk_result r = sk_trainer_feed(R->t, R->J->image, SK_F32, x, (size_t)BATCH * IN, e);
  return r ? r : sk_trainer_feed(R->t, R->J->label, SK_I32, y, BATCH, e);
}

/* One training step on the fed batch: the runtime's (collective) or the trainer's. */
static sk_result step(run *R, double *loss, sk_error *e) {
  return R->rt ? sk_runtime_step(R->rt, loss, e) : sk_trainer_step(R->t, loss, e);
}

static int argmax(const double *z) {
  int best = 0;
  for (int j = 1; j < CLASSES; j++) best = z[j] > z[best] ? j : best;
  return best;
}

/* Accuracy on the whole test set. 10000 is no multiple of the batch: the last batch is the last
   BATCH images, and of it only the rows no batch before scored are scored, from the gathered
   logits (by arg max, as sk_runtime_evaluate scores). */
static sk_result test_accuracy(run *R, double *acc, sk_error *e) {
  const mnist_set *m = &R->J->test;
  int64_t good = 0, c = 0, rows = 0;
  double z[BATCH * CLASSES];
  for (long b = 0; b < m->n; b += BATCH) {
    long row = b + BATCH <= m->n ? b : m->n - BATCH;
    sk_result r = feed(R, m, row, e);
    if (!r) r = sk_runtime_evaluate(R->rt, &c, &rows, e);
    if (!r && row < b) r = sk_runtime_gather(R->rt, R->J->g->logits, z, e);
    if (r) return r;
    if (row == b) good += c;
    else
      for (long i = b - row; i < BATCH; i++) good += argmax(z + i * CLASSES) == m->labels[row + i];
  }
  *acc = (double)good / m->n;
  return SK_OK;
}

/* The epochs: device 0 logs every 10th step's loss and, after each epoch, the test accuracy. */
static sk_result train(run *R, sk_error *e) {
  const options *o = R->J->o;
  long per_epoch = R->J->train.n / BATCH, done = 0;
  double seconds = 0;
  for (int ep = 0; ep < o->epochs && !(o->steps && done >= o->steps); ep++) {
    uint64_t t0 = sk_now_ns();
    for (long s = 0; s < per_epoch && !(o->steps && done >= o->steps); s++, done++) {
      double loss = 0;
      sk_result r = feed(R, &R->J->train, s * BATCH, e);
      if (!r) r = step(R, &loss, e);
      if (r) return r;
      if (R->lead) R->out->losses[done] = loss;
      if (R->lead && !R->quiet && s % 10 == 0) printf("epoch: %d step: %ld, loss is %.7f\n", ep, s, loss);
    }
    seconds += (double)(sk_now_ns() - t0) / 1e9; /* training steps only: evaluation is no step */
    if (R->lead && done) R->out->seconds = seconds / (double)done * (double)per_epoch, R->out->timed_steps = done;
    double acc = 0;
    sk_result r = R->quiet ? SK_OK : test_accuracy(R, &acc, e);
    if (r) return r;
    if (R->lead && !R->quiet) printf("epoch: %d test accuracy: %.4f\n", ep, acc), fflush(stdout);
  }
  if (R->lead) R->out->nlosses = done;
  return SK_OK;
}

/* One device of the world (every device runs it). */
static sk_result device_main(sk_comm *c, void *arg) {
  job *J = (job *)arg;
  run R = {J, NULL, NULL, sk_comm_rank(c) == 0, false, &J->res};
  sk_runtime_desc d;
  memset(&d, 0, sizeof d);
  d.kernels = &BLAS;
  sk_error *e = sk_comm_error(c); /* a failure is described where sk_world_run looks */
  sk_result r = sk_runtime_create(c, &J->plan, &d, &R.rt, e);
  if (!r) r = train(&R, e);
  sk_runtime_destroy(R.rt);
  return r;
}

/* --check's reference: the same network, data and seed on the single-device trainer. */
static sk_result run_reference(job *J, results *out, char *msg, size_t cap) {
  run R = {J, NULL, NULL, true, true, out};
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = SK_F64, d.optim = J->g->optim, d.seed = SEED, d.kernels = &BLAS;
  sk_error e = {SK_OK, ""};
  sk_result r = sk_trainer_create(J->g, &d, &R.t, &e);
  if (!r) r = train(&R, &e);
  if (r) snprintf(msg, cap, "the single-device reference: %s", e.msg);
  sk_trainer_destroy(R.t);
  return r;
}

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(FILE *f, const char *path) {
  fprintf(f,
          "Usage: %s [--devices 1|8] [--layouts] [--epochs E] [--steps S]\n"
          "       [--dataset-strategy data_parallel|full_batch] [--check] [--backend threads|mpi]\n"
          "Trains MindSpore's operator-parallel tutorial network on Fashion-MNIST (from $DATA_PATH, else\n"
          "%s: Debian's dataset-fashion-mnist) on 8 devices, or 1.\n"
          "  --devices N    8: the tutorial's shard strategies (default); 1: the single-device baseline\n"
          "  --layouts      the tutorial's higher-order layouts instead of the strategies\n"
          "  --epochs E     epochs, 1..1000 (default 3)\n"
          "  --steps S      stop after S steps in all (default 0: whole epochs); the time per epoch is then\n"
          "                 extrapolated from the steps run, and says so\n"
          "  --dataset-strategy data_parallel|full_batch   how the batch is split (default data_parallel)\n"
          "  --check        also train on one device (f64 both) and print the verdict: \"check: passed|FAILED: max\n"
          "                 relative loss difference X over N steps (tolerance 1e-09 for f64)\"; exit 1 if FAILED\n"
          "  --backend B    threads (the devices are threads) or mpi (one device per process, 8 processes).\n"
          "                 Default: threads, or mpi when an MPI launcher started several processes\n"
          "  -h,--help      this text\n"
          "On 8 MPI processes:  " PROG_MPIRUN " -np 8 %s --backend mpi\n" PROG_ROOT_NOTE,
          path, MNIST_DEFAULT_DIR, path);
}

/* What the options allow together, once read: --devices N on N MPI processes (when the launcher
   says how many; make_world checks the world otherwise). 0, or 2 after a usage error. */
static int check_launch(const char *argv0, const options *o) {
  int launched = prog_launch_size();
  char msg[160];
  snprintf(msg, sizeof msg, "--devices %d, but the MPI launch has %d processes: " PROG_MPIRUN " -np %d", o->devices,
           launched, o->devices);
  return o->mpi && launched > 0 && launched != o->devices ? prog_bad_usage(argv0, msg, NULL) : 0;
}

/* Parses argv into *o. Returns 0 to run, 1 after --help, 2 after a usage error. */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->devices = 8, o->epochs = 3;
  /* argv[i] is non-NULL below argc; the explicit test tells the static analyzer so */
  for (int i = 1; i < argc && argv[i]; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (prog_is_help(a)) {
      usage(stdout, argv[0]);
      return 1;
    }
    if (!strcmp(a, "--layouts")) {
      o->layouts = true;
      continue;
    }
    if (!strcmp(a, "--check")) {
      o->check = true;
      continue;
    }
    if (!v) return prog_bad_usage(argv[0], "unknown option or missing value", a);
    if (!strcmp(a, "--devices")) {
      if (!prog_parse_int_in(v, 1, 8, &o->devices) || (o->devices != 1 && o->devices != 8))
        return prog_bad_usage(argv[0], "--devices takes 8 (the tutorial's strategies) or 1 (the baseline)", v);
    } else if (!strcmp(a, "--epochs")) {
      if (!prog_parse_int_in(v, 1, MAX_EPOCHS, &o->epochs)) return prog_bad_usage(argv[0], "--epochs takes 1..1000", v);
    } else if (!strcmp(a, "--steps")) {
      if (!prog_parse_long_in(v, 0, INT_MAX, &o->steps)) return prog_bad_usage(argv[0], "--steps takes 0..2147483647", v);
    } else if (!strcmp(a, "--dataset-strategy")) {
      if (!strcmp(v, "full_batch")) o->full_batch = true;
      else if (strcmp(v, "data_parallel")) return prog_bad_usage(argv[0], "--dataset-strategy takes data_parallel or full_batch", v);
    } else if (!strcmp(a, "--backend")) {
      if (strcmp(v, "mpi") && strcmp(v, "threads")) return prog_bad_usage(argv[0], "--backend takes threads or mpi", v);
      o->backend_asked = v;
    } else return prog_bad_usage(argv[0], "unknown option", a);
    i++;
  }
  const char *backend = prog_backend(argv[0], o->backend_asked, "--backend");
  if (!backend) return 2;
  o->mpi = !strcmp(backend, "mpi");
  return check_launch(argv[0], o);
}

static sk_result make_world(int devices, bool mpi, sk_world **w, char *msg, size_t cap) {
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  static sk_mpi_config mc; /* read by sk_world_create only */
  memset(&mc, 0, sizeof mc);
  mc.deterministic = true; /* the same reduction order as the threads backend */
  wd.ndevices = mpi ? 0 : devices;
  wd.backend = mpi ? sk_mpi_backend() : sk_threads_backend();
  wd.backend_config = mpi ? (void *)&mc : NULL;
  sk_error err;
  sk_result r = sk_world_create(&wd, w, &err);
  if (r != SK_OK) {
    snprintf(msg, cap, "%s", err.msg);
    return r;
  }
  if (sk_world_size(*w) != devices) {
    snprintf(msg, cap, "--backend mpi needs %d processes: " PROG_MPIRUN " -np %d (this world has %d)", devices, devices,
             sk_world_size(*w));
    sk_world_destroy(*w, NULL);
    *w = NULL;
    return SK_ERR_INVALID_ARGUMENT;
  }
  return SK_OK;
}

/* The network compiled for the device count, the data loaded, room for every loss (the
   reference's in *base). Returns 0, or -1 with a message. */
static int setup(job *J, sk_graph *g, double **base, char *msg, size_t cap) {
  sk_error e = {SK_OK, ""};
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = J->o->devices, pd.dataset = J->o->full_batch ? SK_DATASET_FULL_BATCH : SK_DATASET_DATA_PARALLEL;
  pd.dtype = SK_F64, pd.seed = SEED;
  if (build_network(g, J->o->layouts, &e)) return snprintf(msg, cap, "%s", e.msg), -1;
  pd.optim = g->optim; /* the network's optimizer */
  if (sk_parallel_compile(g, &pd, &J->plan, &e)) return snprintf(msg, cap, "%s", e.msg), -1;
  J->g = g, J->image = sk_graph_find(g, "image"), J->label = g->labels;
  const char *dir = getenv("DATA_PATH"); /* as in the tutorial; the library itself reads none */
  if (!dir || !*dir) dir = MNIST_DEFAULT_DIR;
  if (mnist_load(dir, "train", &J->train, msg, cap) || mnist_load(dir, "t10k", &J->test, msg, cap)) return -1;
  if (J->train.n < BATCH || J->test.n < BATCH)
    return snprintf(msg, cap, "%s: fewer than %d train or test images", dir, BATCH), -1;
  long total = (long)J->o->epochs * (J->train.n / BATCH);
  if (J->o->steps && J->o->steps < total) total = J->o->steps;
  J->res.losses = (double *)calloc((size_t)total + 1, sizeof(double));
  *base = (double *)calloc((size_t)total + 1, sizeof(double));
  return J->res.losses && *base ? 0 : (snprintf(msg, cap, "out of memory"), -1);
}

/* Every parameter's layout, as device 0 prints it before training. */
static void print_tables(const job *J) {
  char buf[8192];
  for (int t = 0; t < J->g->ntensors; t++)
    if (J->g->tensors[t].role == SK_TENSOR_PARAM) {
      sk_layout_format_table(&J->plan.tensors[t].layout, J->g->tensors[t].name, buf, sizeof buf);
      printf("%s\n", buf);
    }
  fflush(stdout);
}

/* "11.900 s per epoch (of 1875 steps), extrapolated from 300 steps": a time per epoch says whether
   it was measured over whole epochs or scaled up from fewer steps. */
static void epoch_time(char *buf, size_t cap, const results *t, long per_epoch) {
  int n = snprintf(buf, cap, "%.3f s per epoch (of %ld steps)", t->seconds, per_epoch);
  if (n > 0 && (size_t)n < cap && t->timed_steps % per_epoch)
    snprintf(buf + n, cap - (size_t)n, ", extrapolated from %ld steps", t->timed_steps);
}

/* The summary; false when --check FAILED (the verdict line says so). */
static bool print_summary(const job *J, const results *base) {
  const options *o = J->o;
  long per_epoch = J->train.n / BATCH;
  char t[128];
  epoch_time(t, sizeof t, &J->res, per_epoch);
  printf("# %d device(s), %s backend, %s\n", o->devices, o->mpi ? "mpi" : "threads", t);
  if (!o->check || o->devices == 1) return true;
  epoch_time(t, sizeof t, base, per_epoch);
  printf("# single device: %s\n", t);
  double tol = loss_check_tolerance(SK_F64); /* both run in f64 */
  loss_verdict v = loss_check(J->res.losses, J->res.nlosses, base->losses, base->nlosses, tol);
  loss_check_print(stdout, &v, tol, SK_F64);
  return v.passed;
}

/* The world's run, after --check's reference (in process 0 only: it prints the summary). */
static sk_result run_all(job *J, results *base, char *msg, size_t cap, bool *quiet, bool *failed) {
  sk_world *w = NULL;
  int process = 0;
  sk_result r = make_world(J->o->devices, J->o->mpi, &w, msg, cap);
  /* every process of an MPI launch finds the same wrong world size: one says so */
  *quiet = r != SK_OK && J->o->mpi && prog_launch_rank() != 0;
  if (r == SK_OK && J->o->mpi) MPI_Comm_rank(MPI_COMM_WORLD, &process);
  if (r == SK_OK && process == 0) print_tables(J);
  if (r == SK_OK && J->o->check && J->o->devices != 1 && process == 0) r = run_reference(J, base, msg, cap);
  if (r == SK_OK && (r = sk_world_run(w, device_main, J, NULL)) != SK_OK) snprintf(msg, cap, "%s", sk_world_error_message(w));
  if (w) sk_world_destroy(w, NULL);
  if (r == SK_OK && process == 0) *failed = !print_summary(J, base);
  return r;
}

int main(int argc, char **argv) {
  options o;
  int code = parse_options(argc, argv, &o);
  if (code) return code == 1 ? 0 : code;
  openblas_set_num_threads(1); /* the devices are the threads */
  job J;
  memset(&J, 0, sizeof J);
  J.o = &o;
  sk_graph g;
  sk_graph_init(&g);
  results base = {NULL, 0, 0, 0};
  char msg[1024] = "";
  bool quiet = false, failed = false;
  sk_result r = SK_OK;
  if (setup(&J, &g, &base.losses, msg, sizeof msg)) code = 1, fprintf(stderr, "operator_parallel: %s\n", msg);
  else if ((r = run_all(&J, &base, msg, sizeof msg, &quiet, &failed)) != SK_OK || failed) code = 1;
  if (r != SK_OK && !quiet) fprintf(stderr, "operator_parallel: %s: %s\n", sk_result_name(r), msg);
  free(J.res.losses), free(base.losses);
  mnist_free(&J.train), mnist_free(&J.test);
  sk_parallel_free(&J.plan);
  sk_graph_free(&g);
  return code;
}
