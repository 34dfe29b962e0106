/* sk-sim -- trains a network described in JSON (docs/network-json.md) on N simulated devices
   (threads in this process, or MPI processes) and prints its losses in MindSpore's tutorial
   format; --check compares every loss with the single-device reference.

     build/sk-sim --net examples/nets/operator_parallel.json --devices 8 --steps 100 --check

   One device is the single-device trainer (sk_train.h): the reference. N devices compile the
   network with AutoParallel's compiler (sk_parallel.h) and run the program on every device
   (sk_runtime.h). A strategy that needs more devices than there are falls back to data parallel
   and sk-sim says so on stderr (--strict-strategies refuses instead).

   Output: "epoch: E step: S, loss is L" every 10 steps (S counts within the epoch; L with 17
   significant digits in f64, 9 otherwise), "epoch: E test accuracy: A" after each epoch where
   the data has a test set, a summary line starting "# " (the mean step; the median step's CPU
   time, then its wall time), with --check
   "check: passed|FAILED: max relative loss difference X over N steps (tolerance T for DTYPE)"
   (examples/loss_check.h; exit 1 when FAILED), and with --report the per-device-class
   report (docs/sk-sim.md); --report-json writes its figures as JSON, and --device-memory
   checks that every device class's peak fits (exit 1 when one does not). Under MPI only world rank 0 prints. Data: the network's "dataset"
   (tools/datasets.h); Fashion-MNIST from DATA_PATH or Debian's dataset-fashion-mnist; its
   "data" sources and --data NAME=FILE.npy over them (tools/data_sources.h). A loss
   that is not finite stops the training at once: "sk-sim: loss is not finite at step S (device
   D)" on stderr, exit 1. */
#define _POSIX_C_SOURCE 200809L
#define SK_IMPL
#include "shardkit.h"
#include "sk_json.h"
#include "sk_mpi.h"
#include "sk_strategy.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "datasets.h"
#include "data_sources.h"
#include "../examples/blas_gemm.h"
#include "../examples/progs.h"
#include "pylayout.h"
#include "pyshard.h"
#include "sim_report.h"
#include "sim_dryrun.h"
#include "sim_json.h"
#include "sim_ckpt.h"
#include "../examples/loss_check.h"

typedef struct options {
  const char *net;
  int devices;
  long steps; /* 0: whole epochs */
  int epochs; /* default 1 */
  sk_dtype dtype;
  const char *optimizer; /* NULL: the network's */
  sk_optim_kind optim_kind; /* --optimizer's */
  uint64_t seed;
  bool check, report, strict, mpi;
  bool dry_run; /* --dry-run: the plan's step on each device class's first device with no data (tools/sim_dryrun.h) */
  const char *report_json; /* --report-json FILE: the figures as JSON (tools/sim_json.h) */
  bool broadcast; /* --parameter-broadcast: device r draws its model from seed + r, then parameter_broadcast */
  bool distributed; /* the runtime on a world (even of one device: --report, --link) */
  int dump_rank; /* -1: none */
  sim_ckpt_opts ckpt;          /* --save-checkpoint, --every, --load-checkpoint[-params-only], --checkpoint-io */
  const char *backend_asked;
  sk_autoparallel pd;       /* the parallel configuration the flags set (ndevices: --devices) */
  int fusion_index[64];      /* --fusion index:I,J,...: pd.comm_fusion.allreduce.indices points here */
  const char *dataset_layouts; /* --dataset-strategy as a tuple of layouts: read once the inputs' shapes are known */
  const char *transformer_opt; /* --transformer-opt FILE (parallel_speed_up.json) */
  const char *recompute;       /* --recompute OP,...: the operators flagged for recomputation */
  /* --shard OP=S and --out-strategy OP=S, in order: shard(in_strategy=S) / (out_strategy=S) of OP */
  struct { const char *arg; bool out; } shards[64];
  int nshards;
  bool dump_schedule;          /* --dump-schedule: print each pipeline stage's action list and exit */
  bool print_strategies;       /* --print-strategies: every operator's strategy, before training */
  int timeout_s;               /* --timeout: the world's bound on every wait (0: its default) */
  double check_tolerance;      /* --check-tolerance (0: loss_check_tolerance of the dtype) */
  data_override data[DATA_MAX_INPUTS]; /* --data NAME=FILE.npy, in order */
  int ndata;
} options;

/* --help, by section (each string within ISO C's 4095 characters). */
static void usage_synopsis(FILE *f, const char *argv0) {
  fprintf(f,
          "Usage: %s --net FILE.json [--devices N] [--steps S | --epochs E] [--check [--check-tolerance T]] [--report]\n"
          "          [--dump-program RANK] [--backend threads|mpi] [--timeout SECONDS]\n"
          "          [--link ALPHA_US,GBPS | --topology NODESxPER_NODE --intra ALPHA_US,GBPS --inter ALPHA_US,GBPS]\n"
          "          [--device-tflops T]\n"
          "          [--dtype f16|bf16|f32|f64] [--optimizer sgd|momentum|adam] [--seed K] [--strict-strategies]\n"
          "          [--dataset-strategy data_parallel|full_batch|((2,1),(2,))] \n"
          "          [--mode semi_auto|sharding_propagation|recursive_programming|exhaustive] [--print-strategies]\n"
          "          [--device-memory GB] [--report-json FILE]\n"
          "          [--gradients-mean] [--no-loss-repeated-mean] [--no-gradient-fp32-sync] [--fp32-communication]\n"
          "          [--local-norm print|dump:FILE] [--device-local-norm] [--fusion [KIND=]none|auto|size:MB|index:I,J,...]\n"
          "          [--save-strategy FILE] [--load-strategy FILE] [--transformer-opt FILE]\n"
          "          [--hsdp [SHARD_SIZE][,THRESHOLD_KB][,LEVEL]] [--grad-accumulation-step M] [--parameter-broadcast]\n"
          "          [--pipeline STAGES --micro M [--scheduler gpipe|1f1b|zero_bubble_v] [--interleave V]\n"
          "           [--recompute OP,...] [--dump-schedule]]\n"
          "          [--shard OP=STRATEGY ...] [--out-strategy OP=STRATEGY ...] [--data NAME=FILE.npy ...]\n" SIM_CKPT_USAGE_LINE
          "Trains the network in FILE.json on N simulated devices and prints \"epoch: E step: S, loss is L\"\n"
          "every 10 steps, the test accuracy per epoch, and a summary.\n"
          , prog_name(argv0));
}

static void usage_run(FILE *f) {
  fputs(
          "  --devices N          devices (default 1: the single-device reference); MPI: the world size\n"
          "  --steps S            run S steps, as many epochs as they take (default: whole epochs)\n"
          "  --epochs E           epochs to run (default 1)\n"
          "  --check              also train on one device and compare the losses: \"check: passed|FAILED: max\n"
          "                       relative loss difference X over N steps (tolerance T for DTYPE)\", exit 1\n"
          "                       when FAILED; the first 300 steps count (tolerance f64 1e-9, f32 1e-4, f16\n"
          "                       1e-2, bf16 3e-2); exactness is checked in f64 (--dtype f64)\n"
          "  --check-tolerance T  the largest relative loss difference --check passes\n"
          "  --report             print each device's memory, the communication, FLOPs and step times\n"
          "  --dump-program RANK  print device RANK's compiled program and exit\n"
          "  --backend B          threads (default) or mpi (one device per process, under mpirun)\n"
          "  --timeout SECONDS    a wait of the world longer than SECONDS (1..86400, default 300) fails the\n"
          "                       run; under MPI every process then exits, naming the rank it waited for\n"
          "  --link A,G           model links of A us latency and G GB/s (with --device-tflops T: the\n"
          "                       device's speed) and report the modelled step time of that cluster\n"
          "  --topology NxP       a hierarchical cluster instead: N nodes of P devices (N x P = --devices, ranks\n"
          "                       node by node); --intra A,G and --inter A,G its links within and between\n"
          "                       nodes; each collective priced by its cheapest algorithm (ring, tree,\n"
          "                       hierarchical); the searches (--mode) price their candidates on it\n", f);
}

static void usage(FILE *f, const char *argv0) {
  usage_synopsis(f, argv0);
  usage_run(f);
  fprintf(f,
          "  --dtype D            the float dtype (default f32; f16/bf16 store in that format, compute f32)\n"
          "  --optimizer O        override the network's optimizer (its hyper-parameters stay)\n"
          "  --seed K             initial parameters, dropout, synthetic and random data (default 1)\n"
          "  --strict-strategies  refuse a strategy that needs more devices instead of using data parallel\n"
          "  --dataset-strategy S how inputs are cut: data_parallel (default), full_batch, or one strategy\n"
          "                       per input as MindSpore's tuple, e.g. \"((2,1),(2,))\" (repeat axis on the left),\n"
          "                       or one MindSpore layout per input: '(Layout((2,4),(\"dp\",\"mp\"))(\"dp\",\"None\"), ...)'\n"
          "  --mode M             parallel_mode: semi_auto (the network's strategies, data parallel where it\n"
          "                       has none); sharding_propagation or recursive_programming search a strategy\n"
          "                       for every operator without one; exhaustive: the exact optimum of the same\n"
          "                       cost model (small networks). The cost unit: time under --link (and\n"
          "                       --device-tflops), else bytes\n"
          "  --print-strategies   print every operator's strategy (\"name ((2, 1), (1, 4))\") before training\n");
  fprintf(f, "  --device-memory GB   the bytes a device holds (1 GB = 1e9): a run or --dry-run whose peak does not\n"
             "                       fit exits 1, one above 90%% warns; recursive_programming's search checks it\n"
             "  --dry-run            compile and print --report's memory, communication and compute of one step\n"
             "                       on every device, executing nothing (no world, no threads: any --devices)\n"
             "  --report-json FILE   write the report's figures as JSON after a run or --dry-run: memory peaks,\n"
             "                       communication (with its algorithm), FLOPs, step time, pipeline bubble\n");
  fprintf(f, /* ISO C's 4095 characters a string: three of them */
          "  --shard OP=S         shard(in_strategy=S) of operator OP, replacing the network's (repeatable):\n"
          "                       MindSpore's tuples \"((2,1),(1,4))\" or layouts, one per input:\n"
          "                       '(Layout((2,4),(\"dp\",\"mp\"))(\"dp\",\"None\"), Layout((2,4),(\"dp\",\"mp\"))(\"None\",\"mp\"))'\n"
          "  --out-strategy OP=S  shard(out_strategy=S) of operator OP: one tuple (output 0's) or layouts of its\n"
          "                       first outputs; an output asked for in another layout than the rule gives\n"
          "                       is redistributed after the forward (MatMul's (a*b, c): its ReduceScatter)\n"
          "  --data NAME=FILE.npy feed input NAME from a NumPy file, over the network's \"data\" and \"dataset\"\n"
          "                       (repeatable): samples first, in order, wrapping; f32 f64 i32 i64\n");
  fprintf(f,
          "  --gradients-mean     enable_gradients_mean: each gradient AllReduce divides by its group size\n"
          "  --no-loss-repeated-mean  disable_loss_repeated_mean: a repeated loss's gradient is not divided\n"
          "  --no-gradient-fp32-sync  disable_gradient_fp32_sync: f16/bf16 gradients sync in 16 bits (AllReduce,\n"
          "                       and under --hsdp the ReduceScatters)\n"
          "  --fp32-communication enable_fp32_communication: every AllReduce and ReduceScatter in f32\n"
          "  --local-norm W       each parameter's local gradient norm per step and device: print, or dump:FILE\n"
          "  --device-local-norm  enable_device_local_norm: also each device's norm over its parameters\n"
          "                       (under --pipeline a device reports its stage's parameters)\n"
          "  --fusion F           comm_fusion: none (openstate False), auto, size:MB or index:I,J,... for every\n"
          "                       kind, or one kind with allreduce=, allgather= or reducescatter= (repeatable)\n"
          "  --save-strategy FILE write every operator's strategy and every parameter's layout (JSON)\n"
          "  --load-strategy FILE compile with the strategies FILE saved (the same plan, the same losses),\n"
          "                       its stages and hsdp too (a --pipeline or --hsdp saying otherwise is refused)\n"
          "  --transformer-opt F  MindSpore's parallel_speed_up.json: the overlap options shardkit honours\n"
          "  --hsdp [S][,KB][,L]  optimizer parallel: shard_size (-1: the replica group), threshold in KB,\n"
          "                       level1|level2|level3 (defaults -1, 64, level1)\n"
          "  --grad-accumulation-step M  each step is a micro-step: the optimizer runs on every M-th with\n"
          "                       the gradients' mean over the M (level2 keeps that sum sharded); not with\n"
          "                       --pipeline, as in MindSpore: --micro accumulates there\n"
          "  --parameter-broadcast each device draws its model from seed + rank, then MindSpore's\n"
          "                       parameter_broadcast(net, layout, rank, 0) gives every replica its owner's\n"
          "                       values (--check: the reference starts from the broadcast model); under\n"
          "                       --pipeline each stage's, with its first rank for 0\n"
          "  --pipeline S         pipeline stages: each holds --devices / S devices and a contiguous part of\n"
          "                       the network (its stage annotations when they count S, else cut by FLOPs)\n"
          "  --micro M            micro_size: the batch goes through the pipeline in M micro-batches\n"
          "  --scheduler K        1f1b (default), gpipe or zero_bubble_v (two chunks per stage in a V)\n"
          "  --interleave V       V chunks per stage (interleaved 1f1b; gpipe takes it too)\n"
          "  --recompute OP,...   flag these operators for recomputation: their outputs are freed after the\n"
          "                       forward and computed again before the backward (one that cannot be is named)\n"
          "  --dump-schedule      print each stage's actions (F<i>, B<i>, W<i>; .c: chunk) and exit\n" SIM_CKPT_USAGE
          "Fashion-MNIST is read from DATA_PATH or %s.\n"
          "On 8 MPI processes:  " PROG_MPIRUN " -np 8 %s --net FILE.json --devices 8 --backend mpi\n" PROG_ROOT_NOTE,
          MNIST_DEFAULT_DIR, argv0);
}

static int bad_usage(const char *argv0, const char *msg, const char *arg) { return prog_bad_usage(argv0, msg, arg); }

/* A wrong --dataset-strategy is told in AutoParallel.dataset_strategy's words (its ValueError and
   TypeErrors), which a MindSpore user knows, quoting the token as written; -1. */
static int dataset_error(char *msg, size_t cap, const char *what, const char *tok, size_t len) {
  snprintf(msg, cap, "%s, but got '%.*s'", what, (int)len, tok);
  return -1;
}

/* Tuple n of a dataset strategy, "(2,1)" at *at, into pd's row n; *at moves past its ')'. */
static int parse_dataset_tuple(const char **at, sk_autoparallel *pd, int n, char *msg, size_t cap) {
  const char *c = *at + 1;
  int len = 0;
  while (*(c += strspn(c, " ")) != ')') {
    size_t tl = strcspn(c, ",) ");
    char *end;
    long x = strtol(c, &end, 10);
    if (!*c) return snprintf(msg, cap, "tuple %d is never closed", n), -1;
    if (!tl || end != c + tl) return dataset_error(msg, cap, "the element of a dataset_strategy tuple must be int type", c, tl ? tl : 1);
    if (x < -4096 || x > 4096) return snprintf(msg, cap, "%.*s is out of range", (int)tl, c), -1;
    if (len == SK_MAX_DIMS) return snprintf(msg, cap, "tuple %d has more than %d values", n, SK_MAX_DIMS), -1;
    pd->dataset_strategy[n][len++] = (int)x;
    c += tl + strspn(c + tl, " ");
    if (*c == ',') c++;
    else if (*c && *c != ')') return dataset_error(msg, cap, "expected ',' or ')' in a tuple", c, 1);
  }
  /* an empty tuple would read as "the input's rank" (dataset_strategy_len 0): refuse it here */
  if (!len) return snprintf(msg, cap, "tuple %d is empty", n), -1;
  pd->dataset_strategy_len[n] = len;
  *at = c + 1;
  return 0;
}

/* A tuple of layouts well formed (what their shapes allow is known once the network is read).
   0, or -1 with msg. */
static int check_layouts(const char *v, char *msg, size_t cap) {
  static sk_mesh meshes[SK_OP_MAX_INPUTS];
  static char maps[SK_OP_MAX_INPUTS][PYLAYOUT_MAP_MAX]; /* 8 KiB: off the stack */
  static const char flag[] = "--dataset-strategy";
  char why[512];
  int n = 0;
  if (!pylayout_tuple(flag, v, SK_OP_MAX_INPUTS, meshes, maps, &n, why, sizeof why)) return 0;
  bool named = !strncmp(why, flag, sizeof flag - 1) && !strncmp(why + sizeof flag - 1, ": ", 2);
  snprintf(msg, cap, "%s", named ? why + sizeof flag + 1 : why); /* bad_usage names the flag */
  return -1;
}

/* --dataset-strategy: data_parallel, full_batch, MindSpore's tuple "((2,1),(2,))", or a tuple of
   layouts (read once the inputs' shapes are known). 0 on success; -1 with msg saying what is wrong. */
static int parse_dataset(const char *v, options *o, char *msg, size_t cap) {
  sk_autoparallel *pd = &o->pd;
  if (pylayout_is_layout_text(v)) return o->dataset_layouts = v, check_layouts(v, msg, cap);
  if (!strcmp(v, "data_parallel")) return pd->dataset = SK_DATASET_DATA_PARALLEL, 0;
  if (!strcmp(v, "full_batch")) return pd->dataset = SK_DATASET_FULL_BATCH, 0;
  const char *c = v + strspn(v, " ");
  if (*c != '(')
    return snprintf(msg, cap, "dataset_strategy must be 'full_batch' or 'data_parallel', but got the value: %s", v), -1;
  int n = 0;
  for (c++; *(c += strspn(c, " ")) != ')'; n++) {
    if (!*c) return snprintf(msg, cap, "the outer tuple is never closed"), -1;
    if (*c != '(') return dataset_error(msg, cap, "the element of dataset_strategy must be tuple or Layout", c, strcspn(c, ",)"));
    if (n == SK_OP_MAX_INPUTS) return snprintf(msg, cap, "more than %d tuples", SK_OP_MAX_INPUTS), -1;
    if (parse_dataset_tuple(&c, pd, n, msg, cap)) return -1;
    c += strspn(c, " ");
    if (*c == ',') c++;
    else if (*c && *c != ')') return dataset_error(msg, cap, "expected ',' or ')' after a tuple", c, 1);
  }
  c += 1 + strspn(c + 1, " ");
  if (*c) return dataset_error(msg, cap, "text after the closing parenthesis", c, strlen(c));
  if (!n) return snprintf(msg, cap, "an empty tuple (one strategy per network input)"), -1;
  pd->ndataset = n;
  return 0;
}

/* --fusion index:I,J,...: at most 64 positions, each above the one before (>= 0), as the fusion
   scheduler requires them. 0: done. */
static int parse_fusion_index(const char *list, options *o, sk_fusion_config *c) {
  for (const char *at = list;;) {
    size_t n = strcspn(at, ",");
    char tok[16];
    long x;
    if (n >= sizeof tok || c->nindices == 64) return -1;
    memcpy(tok, at, n), tok[n] = 0;
    if (!prog_parse_long_in(tok, c->nindices ? o->fusion_index[c->nindices - 1] + 1L : 0, INT_MAX, &x)) return -1;
    o->fusion_index[c->nindices++] = (int)x;
    if (!at[n]) return 0;
    at += n + 1;
  }
}

/* One --fusion value: [allreduce=|allgather=|reducescatter=](none|auto|size:MB|index:I,J,...).
   Without a kind, none is openstate False, auto and size set every kind, index AllReduce's.
   Index for AllGather and a size of 0 MB (which MindSpore refuses) are refused by the compile's
   checks, in MindSpore's words, before any work; a size is at most 1e11 MB (the fusion scheduler
   takes less than 1e12). 0: done. */
static int parse_fusion(const char *v, options *o) {
  sk_comm_fusion *cf = &o->pd.comm_fusion;
  sk_fusion_config *kinds[3] = {&cf->allreduce, &cf->allgather, &cf->reducescatter}, *one = NULL;
  const char *names[3] = {"allreduce=", "allgather=", "reducescatter="};
  for (int k = 0; k < 3; k++)
    if (!strncmp(v, names[k], strlen(names[k]))) one = kinds[k], v += strlen(names[k]);
  sk_fusion_config c;
  memset(&c, 0, sizeof c);
  if (!strcmp(v, "none")) {
    if (!one) return cf->closed = true, 0;
    c.mode = SK_FUSION_NONE;
  } else if (!strcmp(v, "auto")) c.mode = SK_FUSION_AUTO;
  else if (!strncmp(v, "size:", 5)) {
    c.mode = SK_FUSION_SIZE;
    if (!prog_parse_double_in(v + 5, 0, 1e11, &c.threshold_mb)) return -1;
  } else if (!strncmp(v, "index:", 6)) {
    c.mode = SK_FUSION_INDEX, c.indices = o->fusion_index, one = one ? one : &cf->allreduce;
    if (parse_fusion_index(v + 6, o, &c)) return -1;
  } else return -1;
  for (int k = 0; k < 3; k++)
    if (!one || one == kinds[k]) *kinds[k] = c;
  return 0;
}

/* --local-norm print | dump:FILE (a path that can name a file) */
static int parse_local_norm(const char *v, options *o) {
  if (!strcmp(v, "print")) return o->pd.print_local_norm = true, 0;
  if (!strncmp(v, "dump:", 5) && !prog_path_problem(v + 5, 0)) return o->pd.dump_local_norm = v + 5, 0;
  return -1;
}

/* --mode: MindSpore's parallel_mode names, and exhaustive. */
static int parse_mode(const char *v, options *o) {
  for (int m = 0; m <= SK_PARALLEL_EXHAUSTIVE; m++)
    if (!strcmp(v, sk_parallel_mode_name((sk_parallel_mode)m))) return o->pd.mode = (sk_parallel_mode)m, 0;
  return -1;
}

/* Options that take no value; 1 when `a` was one. */
static int parse_flag(const char *a, options *o) {
  if (!strcmp(a, "--check")) return o->check = true, 1;
  if (!strcmp(a, "--report")) return o->report = true, 1;
  if (!strcmp(a, "--dry-run")) return o->dry_run = true, 1;
  if (!strcmp(a, "--strict-strategies")) return o->strict = true, 1;
  if (!strcmp(a, "--gradients-mean")) return o->pd.gradients_mean = true, 1;
  if (!strcmp(a, "--no-loss-repeated-mean")) return o->pd.no_loss_repeated_mean = true, 1;
  if (!strcmp(a, "--no-gradient-fp32-sync")) return o->pd.no_gradient_fp32_sync = true, 1;
  if (!strcmp(a, "--fp32-communication")) return o->pd.fp32_communication = true, 1;
  if (!strcmp(a, "--device-local-norm")) return o->pd.device_local_norm = true, 1;
  if (!strcmp(a, "--parameter-broadcast")) return o->broadcast = true, 1;
  if (!strcmp(a, "--dump-schedule")) return o->dump_schedule = true, 1;
  if (!strcmp(a, "--print-strategies")) return o->print_strategies = true, 1;
  if (sim_ckpt_flag(a, &o->ckpt)) return 1;
  return 0;
}

/* A count option `a` (--steps aside): its value whole and in the range its use allows. 0 when
   handled, 2 after a usage error, -1 when `a` is not one. */
static int parse_count(const char *argv0, const char *a, const char *v, options *o) {
  const struct {
    const char *flag;
    int *to;
    long lo, hi;
    const char *what;
  } counts[] = {
      {"--devices", &o->devices, 1, SK_MAX_DEVICES, "a device count"},
      {"--epochs", &o->epochs, 1, INT_MAX, "a count of epochs"},
      {"--dump-program", &o->dump_rank, 0, SK_MAX_DEVICES - 1, "a device rank"}, /* below --devices: checked after */
      {"--grad-accumulation-step", &o->pd.grad_accumulation_step, 1, INT_MAX, "a count of micro-steps"},
      {"--pipeline", &o->pd.pipeline.stages, 1, SK_PIPE_MAX_STAGES, "a count of stages"},
      {"--micro", &o->pd.pipeline.micro, 1, 1 << 24, "a count of micro-batches"}, /* the pipeline's action cap */
      {"--interleave", &o->pd.pipeline.interleave, 1, 1 << 24, "a count of chunks"},
      {"--timeout", &o->timeout_s, 1, 86400, "seconds"}, /* as the benchmarks' -T */
  };
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    if (strcmp(a, counts[k].flag)) continue;
    char msg[128];
    long x = 0;
    snprintf(msg, sizeof msg, "%s takes %s, %ld..%ld", a, counts[k].what, counts[k].lo, counts[k].hi);
    if (!prog_parse_long_in(v, counts[k].lo, counts[k].hi, &x)) return bad_usage(argv0, msg, v);
    *counts[k].to = (int)x;
    return 0;
  }
  return -1;
}

/* "ALPHA_US,GBPS" into *l: latency >= 0, bandwidth > 0. */
static bool parse_link(const char *v, sk_link_model *l) {
  char alpha[64];
  size_t n = strcspn(v, ",");
  if (n >= sizeof alpha || v[n] != ',') return false;
  memcpy(alpha, v, n), alpha[n] = 0;
  return prog_parse_double_in(alpha, 0, 1e9, &l->alpha_us) && prog_parse_double_in(v + n + 1, DBL_MIN, 1e9, &l->gbps);
}

/* "NODESxPER_NODE" into *nodes, *per_node: each 1..SK_MAX_DEVICES. */
static bool parse_topology(const char *v, int *nodes, int *per_node) {
  char first[32];
  size_t n = strcspn(v, "x");
  if (n >= sizeof first || v[n] != 'x') return false;
  memcpy(first, v, n), first[n] = 0;
  long a = 0, b = 0;
  if (!prog_parse_long_in(first, 1, SK_MAX_DEVICES, &a) || !prog_parse_long_in(v + n + 1, 1, SK_MAX_DEVICES, &b)) return false;
  *nodes = (int)a, *per_node = (int)b;
  return true;
}

/* The other numbers: --steps, --seed, --device-tflops, --device-memory, --link, --topology, --intra, --inter,
   --check-tolerance. 0 when handled,
   2 after a usage error, -1 when `a` is not one. */
static int parse_number(const char *argv0, const char *a, const char *v, options *o, bool *steps) {
  if (!strcmp(a, "--steps")) {
    *steps = true;
    if (!prog_parse_long_in(v, 1, INT_MAX, &o->steps)) return bad_usage(argv0, "--steps takes a count of steps, 1..2147483647", v);
  } else if (!strcmp(a, "--seed")) {
    /* 0 is refused: the trainer and the runtime read a seed of 0 as 1, the data would not */
    if (!prog_parse_u64_in(v, 1, UINT64_MAX, &o->seed)) return bad_usage(argv0, "--seed takes 1..18446744073709551615", v);
  } else if (!strcmp(a, "--device-tflops")) {
    double tflops = 0;
    if (!prog_parse_double_in(v, DBL_MIN, 1e9, &tflops))
      return bad_usage(argv0, "--device-tflops takes a positive number of TFLOPS (at most 1e9)", v);
    o->pd.cluster.device_flops = tflops * 1e12;
  } else if (!strcmp(a, "--check-tolerance")) {
    if (!prog_parse_double_in(v, DBL_MIN, 1e9, &o->check_tolerance))
      return bad_usage(argv0, "--check-tolerance takes a positive relative difference (e.g. 1e-6)", v);
  } else if (!strcmp(a, "--device-memory")) {
    double gb = 0;
    if (!prog_parse_double_in(v, DBL_MIN, 1e9, &gb)) return bad_usage(argv0, "--device-memory takes a positive number of GB (at most 1e9)", v);
    o->pd.cluster.device_memory = gb * 1e9;
  } else if (!strcmp(a, "--link") || !strcmp(a, "--intra") || !strcmp(a, "--inter")) {
    sk_topology *t = &o->pd.cluster.topology;
    sk_link_model *l = !strcmp(a, "--link") ? &o->pd.cluster.link : !strcmp(a, "--intra") ? &t->intra : &t->inter;
    char what[96];
    snprintf(what, sizeof what, "%s takes ALPHA_US,GBPS (e.g. 5,25; latency >= 0, bandwidth > 0)", a);
    if (!parse_link(v, l)) return bad_usage(argv0, what, v);
  } else if (!strcmp(a, "--topology")) {
    sk_topology *t = &o->pd.cluster.topology;
    if (!parse_topology(v, &t->nodes, &t->per_node))
      return bad_usage(argv0, "--topology takes NODESxPER_NODE (e.g. 512x8; each >= 1)", v);
  } else return -1;
  return 0;
}

/* --recompute OP,...: names, none empty (which operators exist is the network's to say). */
static bool list_well_formed(const char *v) {
  size_t n = strlen(v);
  return n && v[0] != ',' && v[n - 1] != ',' && !strstr(v, ",,");
}

/* A file option's value: a path that can name a file (what it holds is read at start-up). 0, or
   2 after a usage error. */
static int check_file(const char *argv0, const char *a, const char *v) {
  const char *why = prog_path_problem(v, 0);
  char msg[128];
  snprintf(msg, sizeof msg, "%s FILE: %s", a, why ? why : "");
  return why ? bad_usage(argv0, msg, v) : 0;
}

/* --data NAME=FILE.npy: a name, a path that can name a file, each name once (which inputs
   exist, and what the file holds, is read at start-up). 0, or 2 after a usage error. */
static int parse_data(const char *argv0, const char *v, options *o) {
  const char *eq = strchr(v, '=');
  if (!eq || eq == v || !eq[1]) return bad_usage(argv0, "--data takes NAME=FILE.npy", v);
  if ((size_t)(eq - v) >= SK_GRAPH_NAME_MAX) return bad_usage(argv0, "--data: the input name is too long", v);
  for (int k = 0; k < o->ndata; k++)
    if (!strncmp(o->data[k].arg, v, (size_t)(eq - v) + 1)) return bad_usage(argv0, "--data: that input is given twice", v);
  if (o->ndata == DATA_MAX_INPUTS) return bad_usage(argv0, "at most 64 --data", v);
  o->data[o->ndata++].arg = v;
  return check_file(argv0, "--data", eq + 1);
}

/* Options with a value; 0 when handled, 2 after a usage error, -1 when `a` is unknown. */
static int parse_valued(const char *argv0, const char *a, const char *v, options *o, bool *steps, bool *epochs) {
  char msg[640];
  int ck = sim_ckpt_parse(a, v, &o->ckpt);
  if (ck >= 0) return ck ? bad_usage(argv0, sim_ckpt_bad_value(a, v, msg, sizeof msg), v) : 0;
  if (!strcmp(a, "--epochs")) *epochs = true;
  int rc = parse_count(argv0, a, v, o);
  if (rc < 0) rc = parse_number(argv0, a, v, o, steps);
  if (rc >= 0) return rc;
  bool file = false;
  if (!strcmp(a, "--net")) o->net = v, file = true;
  else if (!strcmp(a, "--save-strategy")) o->pd.save_param_strategy_file = o->pd.save_operator_strategy_file = v, file = true;
  else if (!strcmp(a, "--load-strategy")) o->pd.load_param_strategy_file = o->pd.load_operator_strategy_file = v, file = true;
  else if (!strcmp(a, "--transformer-opt")) o->transformer_opt = v, file = true;
  else if (!strcmp(a, "--report-json")) o->report_json = v, file = true;
  else if (!strcmp(a, "--optimizer")) {
    if (!sk_optim_kind_from_name(v, &o->optim_kind)) return bad_usage(argv0, "--optimizer takes sgd, momentum or adam", v);
    o->optimizer = v;
  } else if (!strcmp(a, "--recompute")) {
    if (!list_well_formed(v)) return bad_usage(argv0, "--recompute takes operator names: OP,...", v);
    o->recompute = v;
  } else if (!strcmp(a, "--shard") || !strcmp(a, "--out-strategy")) {
    const char *eq = strchr(v, '=');
    if (!eq || eq == v) return bad_usage(argv0, !strcmp(a, "--shard") ? "--shard takes OP=STRATEGY" : "--out-strategy takes OP=STRATEGY", v);
    if (o->nshards == (int)(sizeof o->shards / sizeof o->shards[0])) return bad_usage(argv0, "at most 64 --shard and --out-strategy", v);
    o->shards[o->nshards].arg = v, o->shards[o->nshards++].out = !strcmp(a, "--out-strategy");
  } else if (!strcmp(a, "--data")) {
    return parse_data(argv0, v, o);
  } else if (!strcmp(a, "--scheduler")) {
    sk_error e;
    if (sk_pipe_scheduler_parse(v, &o->pd.pipeline.scheduler, &e)) return bad_usage(argv0, e.msg, NULL);
  } else if (!strcmp(a, "--dataset-strategy")) {
    if (parse_dataset(v, o, msg, sizeof msg)) return bad_usage(argv0, "--dataset-strategy", msg);
  } else if (!strcmp(a, "--fusion")) {
    if (parse_fusion(v, o))
      return bad_usage(argv0, "--fusion takes [allreduce=|allgather=|reducescatter=]none, auto, size:MB or index:I,J,... (increasing)", v);
  } else if (!strcmp(a, "--local-norm")) {
    if (parse_local_norm(v, o)) return bad_usage(argv0, "--local-norm takes print or dump:FILE", v);
  } else if (!strcmp(a, "--mode")) {
    if (parse_mode(v, o))
      return bad_usage(argv0, "--mode takes semi_auto, sharding_propagation, recursive_programming or exhaustive", v);
  } else if (!strcmp(a, "--backend")) {
    if (strcmp(v, "threads") && strcmp(v, "mpi")) return bad_usage(argv0, "--backend takes threads or mpi", v);
    o->backend_asked = v;
  } else if (!strcmp(a, "--dtype")) {
    if (!sk_dtype_from_name(v, &o->dtype) || !(o->dtype == SK_F32 || o->dtype == SK_F64 || o->dtype == SK_F16 ||
                                               o->dtype == SK_BF16))
      return bad_usage(argv0, "--dtype takes f16, bf16, f32 or f64", v);
  } else return -1;
  return file ? check_file(argv0, a, v) : 0;
}

/* Some but not all of --topology, --intra, --inter given. */
static bool topology_incomplete(const sk_topology *t) {
  int given = (t->nodes > 0) + (t->intra.gbps > 0) + (t->inter.gbps > 0);
  return given > 0 && given < 3;
}

/* What the options allow together, before any work: the combinations the compile, the world or
   the checkpoints would refuse later. 0, or 2 after a usage error. */
static int check_combinations(const char *argv0, const options *o, bool steps, bool epochs) {
  char msg[160], arg[32];
  if (!o->net) return bad_usage(argv0, "--net FILE.json is required", NULL);
  if (steps && epochs) return bad_usage(argv0, "give --steps or --epochs, not both", NULL);
  snprintf(msg, sizeof msg, "--dump-program takes a rank below --devices %d", o->devices);
  snprintf(arg, sizeof arg, "%d", o->dump_rank);
  if (o->dump_rank >= o->devices) return bad_usage(argv0, msg, arg);
  if (topology_incomplete(&o->pd.cluster.topology))
    return bad_usage(argv0, "--topology, --intra and --inter go together", NULL);
  if (o->pd.cluster.topology.nodes && o->pd.cluster.link.gbps > 0)
    return bad_usage(argv0, "give the flat --link or --topology with --intra and --inter, not both", NULL);
  if (o->pd.cluster.topology.nodes && (long long)o->pd.cluster.topology.nodes * o->pd.cluster.topology.per_node != o->devices) {
    snprintf(msg, sizeof msg, "--topology holds %lld devices; --devices is %d",
             (long long)o->pd.cluster.topology.nodes * o->pd.cluster.topology.per_node, o->devices);
    return bad_usage(argv0, msg, NULL);
  }
  if (sk_cluster_prices(&o->pd.cluster) != (o->pd.cluster.device_flops > 0))
    return bad_usage(argv0, "--link (or --topology) and --device-tflops go together", NULL);
  if (o->check_tolerance > 0 && !o->check) return bad_usage(argv0, "--check-tolerance needs --check", NULL);
  if (o->dry_run && (o->check || o->dump_rank >= 0 || o->dump_schedule || o->ckpt.save || o->ckpt.load))
    return bad_usage(argv0, "--dry-run executes nothing: not with --check, --dump-program, --dump-schedule or checkpoints", NULL);
  if (o->report_json && (o->dump_rank >= 0 || o->dump_schedule))
    return bad_usage(argv0, "--report-json needs a run or --dry-run: not with --dump-program or --dump-schedule", NULL);
  const char *ck = sim_ckpt_conflict(&o->ckpt, o->check, o->pd.grad_accumulation_step);
  if (ck) return bad_usage(argv0, ck, NULL);
  sk_autoparallel pd = o->pd; /* the strategy files are read by the compile, later */
  pd.ndevices = o->devices;
  pd.save_param_strategy_file = pd.save_operator_strategy_file = NULL;
  pd.load_param_strategy_file = pd.load_operator_strategy_file = NULL;
  sk_error e;
  return sk_parallel_check(&pd, &e) ? bad_usage(argv0, e.msg, NULL) : 0;
}

/* Under MPI, --devices is the launch's process count (when the launcher says it; make_world
   checks the world otherwise). 0, or 2 after a usage error. */
static int check_launch(const char *argv0, const options *o) {
  int launched = prog_launch_size();
  char msg[160];
  snprintf(msg, sizeof msg, "--devices %d, but the MPI launch has %d processes: " PROG_MPIRUN " -np %d", o->devices,
           launched, o->devices);
  return o->mpi && launched > 0 && launched != o->devices ? bad_usage(argv0, msg, NULL) : 0;
}

/* What --report, --report-json and --device-memory's fit check read: every device's figures,
   which only the runtime counts (so even one device runs it on a world). */
static bool wants_figures(const options *o) { return o->report || o->report_json || o->pd.cluster.device_memory > 0; }

/* 0: go on; 1: --help printed; 2: bad usage. */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->devices = 1, o->epochs = 1, o->seed = 1, o->dtype = SK_F32, o->dump_rank = -1;
  bool steps = false, epochs = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (prog_is_help(a)) return usage(stdout, argv[0]), 1;
    if (parse_flag(a, o)) continue;
    if (!strcmp(a, "--hsdp")) { /* its value is optional: hsdp() with MindSpore's defaults */
      bool valued = v && strncmp(v, "--", 2);
      sk_error e;
      if (sk_hsdp_parse(valued ? v : "", &o->pd.hsdp, &e)) return bad_usage(argv[0], e.msg, v);
      i += valued;
      continue;
    }
    int rc = v ? parse_valued(argv[0], a, v, o, &steps, &epochs) : -1;
    if (rc < 0) return bad_usage(argv[0], v ? "unknown option" : "unknown option or missing value", a);
    if (rc) return rc;
    i++;
  }
  if (check_combinations(argv[0], o, steps, epochs)) return 2;
  /* else the trainer runs alone (parameter_broadcast and checkpoints are the runtime's) */
  o->distributed = o->devices > 1 || wants_figures(o) || sk_cluster_prices(&o->pd.cluster) || o->broadcast || o->ckpt.save || o->ckpt.load;
  const char *backend = prog_backend(argv[0], o->backend_asked, "--backend");
  if (!backend) return 2;
  o->mpi = !strcmp(backend, "mpi");
  return check_launch(argv[0], o);
}

/* What every device reads (never writes) and what the lead device writes back. */
typedef struct job {
  const options *o;
  const sk_graph *g;
  sk_optim_desc optim;
  dataset data;
  data_sources src; /* the inputs fed from a data source, over the dataset */
  sk_parallel_plan plan;
  sk_finalists fin; /* a search mode on a priced cluster: what each finalist cost (sk_finalists.h) */
  /* written by the lead device (rank 0) */
  double *losses;
  long nlosses, cap_losses;
  double *step_s, *cpu_s; /* each step's wall and CPU seconds */
  long nstep_s;
  double seconds, compile_ms;
  sim_device_figures *figures; /* per device, for --report */
  sim_classes classes;         /* the devices' classes (after the run, world rank 0) */
  sim_run_figures fig;         /* ... and each class's figures: what the report, JSON and fit check read */
  void **init; /* --parameter-broadcast --check: per tensor, the broadcast model gathered (the lead's) */
  bool diverged; /* a loss was not finite: training stopped there (the run exits 1) */
  char mpi_error[SK_ERROR_MSG_MAX]; /* MPI: this process's device's failure (the world keeps only a root
                                       cause, which another process may hold) */
} job;

/* One device's run: the trainer (one device) or its runtime. */
typedef struct run {
  job *J;
  sk_trainer *t;
  sk_runtime *rt;
  sk_comm *comm;
  bool lead, quiet; /* quiet: --check's reference prints nothing */
  bool stopped;     /* the loss was not finite: no further step */
  long start, saved; /* the batches consumed before the first step (a loaded checkpoint's position), and at the last save */
  void *x, *y;
  bool y_float;
  data_readers rd; /* this device's own open files */
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

static sk_result feed_input(run *R, int t, sk_dtype dt, const void *v, size_t n, sk_error *e) {
  return R->rt ? sk_runtime_feed(R->rt, t, dt, v, n, e) : sk_trainer_feed(R->t, t, dt, v, n, e);
}

/* Batch b: the dataset's inputs (those without a source), then every source's. */
static sk_result feed(run *R, bool test, long b, sk_error *e) {
  const dataset *d = &R->J->data;
  const data_sources *ds = &R->J->src;
  sk_result r = SK_OK;
  if (d->kind >= 0) {
    dataset_batch(d, test, b, R->x, R->y, R->y_float);
    size_t nx = (size_t)(d->batch * d->per_sample_x), ny = (size_t)(d->batch * d->per_sample_y);
    sk_dtype dx = d->kind ? SK_I32 : SK_F32, dy = R->y_float ? SK_F32 : SK_I32;
    if (!data_source_of(ds, d->x)) r = feed_input(R, d->x, dx, R->x, nx, e);
    if (!r && !data_source_of(ds, d->y)) r = feed_input(R, d->y, dy, R->y, ny, e);
  }
  for (int k = 0; !r && k < ds->n; k++) {
    r = data_batch(ds, &R->rd, k, b, e);
    if (!r) r = feed_input(R, ds->in[k].tensor, ds->in[k].read_dt, R->rd.buf, (size_t)ds->in[k].numel, e);
  }
  return r;
}

static sk_result step(run *R, double *loss, sk_error *e) {
  return R->rt ? sk_runtime_step(R->rt, loss, e) : sk_trainer_step(R->t, loss, e);
}

static sk_result test_accuracy(run *R, double *acc, sk_error *e) {
  int64_t good = 0, rows = 0;
  for (long b = 0; b < R->J->data.test_batches; b++) {
    int64_t c = 0, n = 0;
    sk_result r = feed(R, true, b, e);
    if (!r) r = R->rt ? sk_runtime_evaluate(R->rt, &c, &n, e) : sk_trainer_evaluate(R->t, &c, &n, e);
    if (r) return r;
    good += c, rows += n;
  }
  *acc = rows ? (double)good / (double)rows : 0;
  return SK_OK;
}

/* The lead device keeps every loss (for --check) and every step's wall and CPU seconds (the
   medians). */
static int record(job *J, long i, double loss, double seconds, double cpu) {
  if (i >= J->cap_losses) {
    long cap = J->cap_losses ? 2 * J->cap_losses : 1024;
    double *l = (double *)realloc(J->losses, sizeof(double) * (size_t)cap);
    if (l) J->losses = l;
    double *s = l ? (double *)realloc(J->step_s, sizeof(double) * (size_t)cap) : NULL;
    if (s) J->step_s = s;
    double *c = s ? (double *)realloc(J->cpu_s, sizeof(double) * (size_t)cap) : NULL;
    if (c) J->cpu_s = c;
    if (!l || !s || !c) return -1;
    J->cap_losses = cap;
  }
  J->losses[i] = loss, J->step_s[i] = seconds, J->cpu_s[i] = cpu, J->nlosses = J->nstep_s = i + 1;
  return 0;
}

static void print_loss(const run *R, int ep, long s, double loss) {
  if (!R->lead || R->quiet || s % 10) return;
  printf(R->J->o->dtype == SK_F64 ? "epoch: %d step: %ld, loss is %.17g\n" : "epoch: %d step: %ld, loss is %.9g\n", ep,
         s, loss);
}

/* A loss that is not finite ends the training at once (the same step on every device, whose
   losses are the same): the lead says so at once, the run exits 1. */
static void not_finite(run *R, long step) {
  R->stopped = true;
  if (!R->lead) return;
  R->J->diverged = true;
  if (R->quiet)
    fprintf(stderr, "sk-sim: loss is not finite at step %ld (reference)\n", step);
  else
    fprintf(stderr, "sk-sim: loss is not finite at step %ld (device %d)\n", step, R->comm ? sk_comm_rank(R->comm) : 0);
}

/* One epoch's training steps; *done counts every step of the run. */
static sk_result train_epoch(run *R, int ep, long *done, sk_error *e) {
  job *J = R->J;
  const options *o = J->o;
  long stop = R->start + o->steps; /* --steps S: S more steps */
  for (long s = *done - ep * J->data.train_batches; s < J->data.train_batches && (!o->steps || *done < stop) && !R->stopped;
       s++, (*done)++) {
    double loss = 0, t1 = now_s(), p1 = cpu_s();
    sk_result r = feed(R, false, s, e);
    if (!r) r = step(R, &loss, e);
    if (r) return r;
    if (R->lead && record(J, *done - R->start, loss, now_s() - t1, cpu_s() - p1)) return sk_error_set(e, SK_ERR_OUT_OF_MEMORY, "out of memory");
    print_loss(R, ep, s, loss);
    if (!isfinite(loss)) return not_finite(R, *done), SK_OK; /* the same loss on every device: all stop here */
    if (o->ckpt.every && (*done + 1) % o->ckpt.every == 0 &&
        (r = sim_ckpt_save(R->comm, R->rt, &J->plan, J->optim.kind, &o->ckpt, *done + 1, R->lead, e)))
      return r;
    if (o->ckpt.every && (*done + 1) % o->ckpt.every == 0) R->saved = *done + 1;
  }
  return SK_OK;
}

/* The epochs; the lead prints as it goes. */
static sk_result train(run *R, sk_error *e) {
  job *J = R->J;
  const options *o = J->o;
  long done = R->start;
  for (int ep = (int)(done / J->data.train_batches); o->steps ? done < R->start + o->steps : ep < o->epochs; ep++) { /* --steps S: S steps, epochs wrap */
    double t0 = now_s(); /* training steps only: evaluation is not a step */
    sk_result r = train_epoch(R, ep, &done, e);
    if (r) return r;
    if (R->lead) J->seconds += now_s() - t0;
    if (R->stopped) return SK_OK; /* nothing more to learn from it: no evaluation, no save */
    if (J->g->logits >= 0 && !R->quiet && J->data.test_batches > 0) { /* none: data sources (no test set) */
      double acc;
      if ((r = test_accuracy(R, &acc, e))) return r;
      if (R->lead) printf("epoch: %d test accuracy: %.4f\n", ep, acc);
    }
    if (R->lead) fflush(stdout);
  }
  if (o->ckpt.save && R->saved != done)
    return sim_ckpt_save(R->comm, R->rt, &J->plan, J->optim.kind, &o->ckpt, done, R->lead, e);
  return SK_OK;
}

/* The dataset's batch buffers and the device's own readers of the sources. */
static sk_result run_buffers(run *R, sk_error *e) {
  const dataset *d = &R->J->data;
  sk_result r = data_readers_open(&R->J->src, &R->rd, e);
  if (r || d->kind < 0) return r;
  R->y_float = R->J->g->tensors[d->y].dtype == SK_F32 || R->J->g->tensors[d->y].dtype == SK_F64;
  R->x = malloc(sizeof(double) * (size_t)(d->batch * d->per_sample_x));
  R->y = malloc(sizeof(double) * (size_t)(d->batch * d->per_sample_y));
  return R->x && R->y ? SK_OK : sk_error_set(e, SK_ERR_OUT_OF_MEMORY, "out of memory");
}

/* --parameter-broadcast: the reference starts from the model the devices hold after the
   broadcast (gathered in the run's dtype, which is the trainer's), not from its seed's. */
static void start_from(sk_trainer *t, const job *J) {
  size_t es = sk_dtype_size(sk_trainer_dtype(t));
  for (int p = 0; p < J->g->ntensors; p++)
    if (J->init[p]) memcpy(sk_trainer_values(t, p), J->init[p], (size_t)sk_graph_numel(J->g, p) * es);
}

/* The single-device reference: the trainer. */
static sk_result run_reference(job *J, bool quiet, sk_error *e) {
  run R;
  memset(&R, 0, sizeof R);
  R.J = J, R.lead = true, R.quiet = quiet;
  sk_train_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = J->o->dtype, d.optim = J->optim, d.seed = J->o->seed, d.kernels = &BLAS;
  d.grad_accumulation_step = J->o->pd.grad_accumulation_step;
  /* the factors the plan's knobs put on gradients (gradients_mean, loss_repeated_mean), so that
     --check compares like with like */
  double *scales = (double *)malloc(sizeof(double) * (size_t)(J->g->nops * SK_OP_MAX_INPUTS + 1));
  if (scales) sk_parallel_grad_scales(&J->plan, scales);
  d.grad_scales = scales;
  sk_result r = !scales ? sk_error_set(e, SK_ERR_OUT_OF_MEMORY, "out of memory") : run_buffers(&R, e);
  if (!r) r = sk_trainer_create(J->g, &d, &R.t, e);
  if (!r && J->init) start_from(R.t, J);
  if (!r) r = train(&R, e);
  free(R.x), free(R.y), free(scales);
  data_readers_close(&R.rd);
  sk_trainer_destroy(R.t);
  return r;
}

/* --check after --parameter-broadcast under a pipeline: the lead, on the first stage, needs
   every stage's parameters. Each one travels over the world from the first device of its stage
   as MindSpore's broadcast itself moves values: every other device sends zeros, the sum is the
   holder's (x + 0 == x). */
static sk_result share_stage_param(run *R, int p, bool held, void *full, size_t n, sk_error *e) {
  const sk_parallel_plan *plan = &R->J->plan;
  int rank = sk_comm_rank(R->comm);
  bool sender = held && rank % plan->desc.ndevices == 0; /* its stage's first device */
  sk_dtype dt = R->J->o->dtype == SK_F64 ? SK_F64 : SK_F32;
  if (!sender) memset(full, 0, n * sk_dtype_size(dt));
  sk_result r = sk_allreduce(R->comm, full, full, n, dt, SK_SUM, NULL);
  return r ? sk_error_set(e, r, "sharing '%s' after the broadcast: %s", R->J->g->tensors[p].name, sk_comm_error_message(R->comm))
           : SK_OK;
}

/* --parameter-broadcast after create: every device drew its own model (seed + rank), so the
   replicas differ until MindSpore's parameter_broadcast(net, layout, rank, initial_rank) gives
   each its redundancy group owner's values; initial_rank is 0, or under a pipeline the first
   rank of the device's stage (each stage broadcasts its own parameters, as MindSpore calls it
   per stage). With --check every device gathers the result (collective; under a pipeline each
   stage its own parameters, then shared) and the lead keeps it for the reference. */
static sk_result broadcast(run *R, sk_error *e) {
  job *J = R->J;
  const sk_graph *g = J->g;
  int rank = sk_comm_rank(R->comm), first = J->plan.vstage ? rank - rank % J->plan.desc.ndevices : 0;
  sk_result r = sk_runtime_parameter_broadcast(R->rt, rank, first, e);
  for (int p = 0; !r && J->o->check && p < g->ntensors; p++) {
    if (g->tensors[p].role != SK_TENSOR_PARAM) continue;
    size_t n = (size_t)sk_graph_numel(g, p);
    sk_runtime_slice mine;
    r = sk_runtime_param_slice(R->rt, p, SK_RUNTIME_VALUES, &mine, e);
    bool held = !r && mine.data; /* under a pipeline: its stage's */
    void *full = r ? NULL : malloc(n * sk_dtype_size(J->o->dtype == SK_F64 ? SK_F64 : SK_F32));
    if (!r && !full) r = sk_error_set(e, SK_ERR_OUT_OF_MEMORY, "out of memory gathering '%s'", g->tensors[p].name);
    if (!r && held) r = sk_runtime_gather(R->rt, p, full, e);
    if (!r && J->plan.vstage) r = share_stage_param(R, p, held, full, n, e);
    if (!r && R->lead) J->init[p] = full, full = NULL;
    free(full);
  }
  return r;
}

/* One device of the distributed run (every device runs it). */
static sk_result device_main(sk_comm *c, void *arg) {
  job *J = (job *)arg;
  run R;
  memset(&R, 0, sizeof R);
  R.J = J, R.comm = c, R.lead = sk_comm_rank(c) == 0;
  sk_runtime_desc d;
  memset(&d, 0, sizeof d);
  d.kernels = &BLAS;
  sk_error *e = sk_comm_error(c); /* a failure is described where sk_world_run looks */
  sk_result r = run_buffers(&R, e);
  if (!r) r = sk_runtime_create(c, &J->plan, &d, &R.rt, e);
  if (!r && J->o->broadcast) r = broadcast(&R, e);
  if (!r && J->o->ckpt.load) r = sim_ckpt_load(c, R.rt, &J->plan, J->optim.kind, &J->o->ckpt, &R.start, R.lead, e);
  R.saved = R.start;
  if (!r) r = train(&R, e);
  if (!r && wants_figures(J->o)) r = sim_collect_figures(c, R.rt, J->figures, e);
  if (r && J->o->mpi) snprintf(J->mpi_error, sizeof J->mpi_error, "%s", e->msg); /* the process's one device */
  free(R.x), free(R.y);
  data_readers_close(&R.rd);
  sk_runtime_destroy(R.rt);
  return r;
}

static sk_result make_world(const options *o, sk_world **w, char *msg, size_t cap) {
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  static sk_mpi_config mc; /* read by sk_world_create only */
  memset(&mc, 0, sizeof mc);
  mc.deterministic = true; /* the threads backend's reduction order: the same losses */
  wd.ndevices = o->mpi ? 0 : o->devices;
  wd.backend = o->mpi ? sk_mpi_backend() : sk_threads_backend();
  wd.backend_config = o->mpi ? (void *)&mc : NULL;
  wd.cluster = o->pd.cluster; /* the plan's cluster model: the clocks read its link */
  wd.timeout_ms = (uint32_t)o->timeout_s * 1000u; /* --timeout; 0: the world's default */
  sk_error err;
  sk_result r = sk_world_create(&wd, w, &err);
  if (r) return snprintf(msg, cap, "%s", err.msg), r;
  if (sk_world_size(*w) != o->devices) {
    snprintf(msg, cap, "--devices %d, but the MPI world has %d processes: " PROG_MPIRUN " -np %d", o->devices,
             sk_world_size(*w), o->devices);
    sk_world_destroy(*w, NULL);
    *w = NULL;
    return SK_ERR_INVALID_ARGUMENT;
  }
  return SK_OK;
}

/* Says which strategies fell back to data parallel (the first few, then how many more). */
static void say_fallbacks(const job *J, const char *argv0) {
  int said = 0;
  for (int i = 0; i < J->g->nops && said < 5; i++)
    if (J->plan.ops[i].fell_back)
      fprintf(stderr, "%s: operator '%s': its strategy needs more than %d devices: data parallel instead\n",
              prog_name(argv0), J->g->ops[i].name, J->plan.desc.ndevices), said++; /* a pipeline stage's */
  if (J->plan.nfallbacks > said)
    fprintf(stderr, "%s: ... and %d more operators: data parallel instead (--strict-strategies refuses)\n",
            prog_name(argv0), J->plan.nfallbacks - said);
}

/* --dataset-strategy's tuple of layouts, one per network input in order, on those inputs' shapes. */
static int dataset_layouts(const options *o, const sk_graph *g, sk_autoparallel *pd, char *msg, size_t cap) {
  sk_mesh meshes[SK_OP_MAX_INPUTS];
  static char maps[SK_OP_MAX_INPUTS][PYLAYOUT_MAP_MAX]; /* 8 KiB: off the stack */
  int n = 0;
  if (pylayout_tuple("--dataset-strategy", o->dataset_layouts, SK_OP_MAX_INPUTS, meshes, maps, &n, msg, cap)) return -1;
  pd->ndataset_layouts = n;
  for (int t = 0, i = 0; t < g->ntensors && i < n; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    sk_error e;
    if (sk_layout_parse(&pd->dataset_layouts[i], &meshes[i], maps[i], g->tensors[t].ndims, g->tensors[t].shape, &e))
      return snprintf(msg, cap, "--dataset-strategy: layout %d (input '%s'): %s", i, g->tensors[t].name, e.msg), -1;
    i++;
  }
  return 0;
}

/* --recompute OP,...: each named operator is flagged (an unknown name is refused). */
static int flag_recompute(const char *list, sk_graph *g, char *msg, size_t cap) {
  for (const char *at = list; at && *at;) {
    size_t n = strcspn(at, ",");
    int found = 0;
    for (int i = 0; i < g->nops; i++)
      if (strlen(g->ops[i].name) == n && !strncmp(g->ops[i].name, at, n)) g->ops[i].recompute = true, found = 1;
    if (!found) return snprintf(msg, cap, "--recompute: the network has no operator '%.*s'", (int)n, at), -1;
    at += n + (at[n] == ',');
  }
  return 0;
}

/* --shard OP=S / --out-strategy OP=S: the operator's shard arguments (pyshard.h), replacing the
   network's; an unknown operator and an empty tuple for a tensor input are refused by name. */
static int apply_shards(const options *o, sk_graph *g, char *msg, size_t cap) {
  for (int i = 0; i < o->nshards; i++) {
    const char *arg = o->shards[i].arg, *eq = strchr(arg, '='), *flag = o->shards[i].out ? "--out-strategy" : "--shard";
    int at = -1;
    for (int k = 0; k < g->nops; k++)
      if (strlen(g->ops[k].name) == (size_t)(eq - arg) && !strncmp(g->ops[k].name, arg, (size_t)(eq - arg))) at = k;
    if (at < 0) return snprintf(msg, cap, "%s: the network has no operator '%.*s'", flag, (int)(eq - arg), arg), -1;
    sk_graph_op *op = &g->ops[at];
    if (!o->shards[i].out) {
      if (pyshard_in_strategy(flag, eq + 1, &op->desc, msg, cap)) return -1;
      for (int k = 0; op->desc.has_strategy && k < op->ninputs && k < op->desc.nstrategies; k++)
        if (!op->desc.strategy_len[k] && op->desc.ndims[k] > 0)
          return snprintf(msg, cap, "%s: operator '%s': tuple %d is empty; write the rank-%d input's tuple", flag, op->name, k,
                          op->desc.ndims[k]), -1;
      continue;
    }
    int nd[SK_OP_MAX_OUTPUTS];
    int64_t shapes[SK_OP_MAX_OUTPUTS][SK_MAX_DIMS];
    for (int k = 0; k < op->noutputs; k++) {
      const sk_graph_tensor *t = &g->tensors[op->outputs[k]];
      nd[k] = t->ndims, memcpy(shapes[k], t->shape, sizeof shapes[k]);
    }
    if (pyshard_out_strategy(flag, eq + 1, &op->desc, op->noutputs, nd, (const int64_t(*)[SK_MAX_DIMS])shapes, msg, cap))
      return -1;
  }
  return 0;
}

/* Every flagged operator that recomputes nothing, named: the single-device trainer recomputes
   nothing; the runtime, what sk_parallel_recomputed says (never the loss, nor what another
   pipeline chunk reads). */
static void say_not_recomputed(const job *J) {
  for (int i = 0; i < J->g->nops; i++) {
    const char *why = J->o->distributed ? sk_parallel_recompute_refusal(&J->plan, i)
                                        : (J->g->ops[i].recompute ? "one device runs the single-device trainer" : NULL);
    if (why) fprintf(stderr, "sk-sim: operator '%s' is flagged for recomputation but %s: not recomputed\n", J->g->ops[i].name, why);
  }
}

/* --hsdp with --print-strategies: what optimizer parallel did with every parameter, "hsdp: w1:
   shard 4 of group 8" or "hsdp: b1: not sharded (below 64 KB)" (sk_opt_shard.h's reason). */
static void print_hsdp(const sk_parallel_plan *plan) {
  const sk_graph *g = plan->graph;
  for (int t = 0; t < g->ntensors; t++) {
    const sk_parallel_tensor *pt = &plan->tensors[t];
    if (g->tensors[t].role != SK_TENSOR_PARAM) continue;
    if (pt->opt_size > 0)
      printf("hsdp: %s: shard %d of group %d\n", g->tensors[t].name, pt->opt_size, pt->opt_size * pt->opt_mirror);
    else if (!strcmp(pt->opt_why, "smaller than the threshold"))
      printf("hsdp: %s: not sharded (below %lld KB)\n", g->tensors[t].name, (long long)plan->desc.hsdp.threshold_kb);
    else
      printf("hsdp: %s: not sharded (%s)\n", g->tensors[t].name, pt->opt_why);
  }
}

/* A finalist's price for the reports: "12.345 ms", or why the dry run gave none. */
static void finalist_price(const sk_finalist *f, char *buf, size_t cap) {
  if (f->priced) snprintf(buf, cap, "%.3f ms", f->step_us / 1e3);
  else snprintf(buf, cap, "not priced: %s", f->why[0] ? f->why : "not compiled");
}

/* --print-strategies' last line after the finalists were weighed: the kept plan's and data
   parallel's step times by the dry run, and the search's own time. */
static void print_finalists_trailer(const sk_finalists *fin) {
  char kept[sizeof fin->f[0].why + 32], dp[sizeof kept];
  finalist_price(&fin->f[fin->kept], kept, sizeof kept);
  finalist_price(&fin->f[SK_FINALIST_DATA_PARALLEL], dp, sizeof dp);
  printf("# %s: plan cost %s (dry run), data parallel %s, searched in %.3f ms\n", sk_parallel_mode_name(fin->mode), kept, dp,
         fin->search_ms);
}

/* The one stderr line saying which finalist was kept, over which, and any the dry run refused. */
static void say_finalists(const sk_finalists *fin) {
  sk_parallel_mode mode = fin->mode;
  char kept[sizeof fin->f[0].why + 32], other[sizeof kept];
  int up = sk_finalist_runner_up(fin);
  finalist_price(&fin->f[fin->kept], kept, sizeof kept);
  fprintf(stderr, "search: kept %s (%s)", sk_finalist_name(fin->kept, mode), kept);
  if (up >= 0) finalist_price(&fin->f[up], other, sizeof other);
  if (up >= 0) fprintf(stderr, " over %s (%s)", sk_finalist_name((sk_finalist_kind)up, mode), other);
  for (int k = 0; k < SK_FINALIST_COUNT; k++)
    if (k != (int)fin->kept && !fin->f[k].priced && fin->f[k].why[0])
      fprintf(stderr, "; %s not priced: %s", sk_finalist_name((sk_finalist_kind)k, mode), fin->f[k].why);
  fputc('\n', stderr);
}

/* Under sharding_propagation or recursive_programming on a priced cluster the plan is the
   cheapest finalist by the dry run (sk_finalists.h); exhaustive's, the searches' referee, and
   every other mode's is the compiler's. Under MPI only the lead saves strategy files, and a
   desc naming one is not weighed: the options decide, so every process compiles the same plan. */
static sk_result compile_plan(job *J, const sk_autoparallel *pd, sk_error *e) {
  memset(&J->fin, 0, sizeof J->fin);
  bool saves = J->o->pd.save_param_strategy_file || J->o->pd.save_operator_strategy_file;
  if ((pd->mode != SK_PARALLEL_SHARDING_PROPAGATION && pd->mode != SK_PARALLEL_RECURSIVE_PROGRAMMING) ||
      !sk_cluster_prices(&pd->cluster) || saves)
    return sk_parallel_compile(J->g, pd, &J->plan, e);
  sk_result r = sk_finalists_compile(J->g, pd, &J->plan, &J->fin, e);
  if (!r && J->fin.weighed && (!J->o->mpi || prog_launch_rank() == 0)) say_finalists(&J->fin);
  return r;
}

/* --print-strategies: one line per operator, what the search found (if one ran), and under
   --hsdp every parameter's optimizer shard. */
static void print_strategies(const sk_parallel_plan *plan, const sk_finalists *fin) {
  size_t n = sk_parallel_format_strategies(plan, NULL, 0) + 1;
  char *text = (char *)malloc(n);
  if (text) sk_parallel_format_strategies(plan, text, n), fputs(text, stdout);
  free(text);
  if (fin->weighed) print_finalists_trailer(fin);
  else if (plan->searched)
    printf("# %s: plan cost %.6g %s, searched in %.3f ms\n", sk_parallel_mode_name(plan->desc.mode), plan->search_cost,
           sk_cluster_prices(&plan->desc.cluster) ? "us" : "bytes", plan->search_ms);
  if (plan->desc.hsdp.enabled) print_hsdp(plan);
}

static int setup(job *J, sk_graph *g, char *msg, size_t cap) {
  const options *o = J->o;
  sk_error e;
  if (sk_json_load_network(o->net, g, &e)) return snprintf(msg, cap, "%s", e.msg), -1;
  if (o->recompute && flag_recompute(o->recompute, g, msg, cap)) return -1;
  if (apply_shards(o, g, msg, cap)) return -1;
  J->g = g, J->optim = g->optim;
  if (o->optimizer) J->optim.kind = o->optim_kind;
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd = o->pd;
  pd.ndevices = o->devices, pd.strict_strategies = o->strict;
  pd.dtype = o->dtype, pd.optim = J->optim, pd.seed = o->seed, pd.seed_by_rank = o->broadcast;
  pd.output_broadcast = true; /* device 0, on the first stage, prints the last stage's test accuracy */
  if (o->dataset_layouts && dataset_layouts(o, g, &pd, msg, cap)) return -1;
  if (o->transformer_opt && sk_json_load_transformer_opt(o->transformer_opt, &pd.transformer_opt, &e))
    return snprintf(msg, cap, "%s", e.msg), -1;
  if (o->mpi && prog_launch_rank() != 0) /* every process compiles the same plan: one writes it */
    pd.save_param_strategy_file = pd.save_operator_strategy_file = NULL;
  double t0 = now_s();
  pd.strategy_io = sk_strategy_io();
  if (compile_plan(J, &pd, &e)) return snprintf(msg, cap, "%s", e.msg), -1;
  J->compile_ms = (now_s() - t0) * 1e3;
  if (J->plan.recut && (!o->mpi || prog_launch_rank() == 0))
    fprintf(stderr, "sk-sim: the network's stage annotations are not used (%d stages x %d chunks): the operators are re-cut by FLOPs\n",
            J->plan.stages, J->plan.schedule.chunks);
  if (!o->mpi || prog_launch_rank() == 0) say_not_recomputed(J);
  if (o->print_strategies && (!o->mpi || prog_launch_rank() == 0)) print_strategies(&J->plan, &J->fin);
  if (o->dump_rank >= 0 || o->dump_schedule || o->dry_run) return 0;
  const char *dir = getenv("DATA_PATH"); /* as in the tutorial; the library itself reads none */
  if (dataset_open(g, dir && *dir ? dir : MNIST_DEFAULT_DIR, o->seed, &J->data, msg, cap)) return -1;
  if (data_sources_open(g, o->data, o->ndata, J->data.kind >= 0, o->seed, &J->src, msg, cap)) return -1;
  if (J->data.kind < 0) J->data.train_batches = J->src.batches;
  if (J->src.n) J->data.test_batches = 0; /* the sources are training data: no test set (docs/sk-sim.md) */
  J->figures = (sim_device_figures *)calloc((size_t)o->devices, sizeof *J->figures);
  if (o->broadcast && o->check) J->init = (void **)calloc((size_t)g->ntensors + 1, sizeof *J->init);
  return J->figures && (J->init || !(o->broadcast && o->check)) ? 0 : (snprintf(msg, cap, "out of memory"), -1);
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

/* The summary; false when --check FAILED. */
static bool print_summary(job *J, const double *base, long nbase) {
  const options *o = J->o;
  long n = J->nlosses;
  char backend[32] = ""; /* the single-device reference runs on no world */
  if (o->distributed) snprintf(backend, sizeof backend, ", %s backend", o->mpi ? "mpi" : "threads");
  /* the wall median stays last: scripts read "median X ms" at the end of the line */
  printf("# %d device%s, %s%s, %ld steps, %.3f ms per step, median cpu %.3f ms, median %.3f ms\n", o->devices,
         o->devices > 1 ? "s" : "", sk_dtype_name(o->dtype), backend, n, n ? J->seconds * 1e3 / (double)n : 0.0,
         median_ms(J->cpu_s, J->nstep_s), median_ms(J->step_s, J->nstep_s));
  char msg[SK_ERROR_MSG_MAX];
  if (o->report && sim_print_report(stdout, &J->fig, msg, sizeof msg))
    return fprintf(stderr, "sk-sim: %s\n", msg), false;
  if (o->report && J->plan.vstage) sim_print_pipeline(stdout, J->figures, o->devices, &J->plan, sk_cluster_prices(&o->pd.cluster));
  if (!o->check) return true;
  double tol = o->check_tolerance > 0 ? o->check_tolerance : loss_check_tolerance(o->dtype);
  loss_verdict v = loss_check(J->losses, n, base, nbase, tol);
  loss_check_print(stdout, &v, tol, o->dtype);
  return v.passed;
}

/* --check: the reference's losses, taken from a silent single-device run. */
static int reference_losses(job *J, double **base, long *nbase, char *msg, size_t cap) {
  job R = *J;
  R.losses = NULL, R.step_s = NULL, R.cpu_s = NULL, R.nlosses = R.nstep_s = R.cap_losses = 0, R.seconds = 0;
  sk_error e;
  sk_result r = run_reference(&R, true, &e);
  free(R.step_s), free(R.cpu_s);
  *base = R.losses, *nbase = R.nlosses;
  return r ? (snprintf(msg, cap, "the single-device reference: %s", e.msg), -1) : 0;
}

/* --report-json and --device-memory's fit check on a run's figures, executed or dry (world rank
   0). The JSON first: it says what does not fit. 0; 1 when a class does not fit (said on
   stderr); -1 with msg. */
static int report_figures(const options *o, const sim_run_figures *fig, char *msg, size_t cap) {
  if (o->report_json && sim_json_write(fig, o->report_json, msg, cap)) return -1;
  double limit = o->pd.cluster.device_memory;
  return limit > 0 && !sim_fit_check(stderr, fig, limit) ? 1 : 0;
}

/* The executed run's figures (J->fig), class by class: the classes from the plan as the dry run
   forms them, each one's figures its first device's after checking every member's equal them;
   the modelled step time is the runtime's step_us per step, the same on every device (none when
   the cluster prices nothing). 0, or -1 with msg. */
static int executed_figures(job *J, char *msg, size_t cap) {
  sim_run_figures fig = {NULL, J->o->devices, &J->classes, &J->plan, NAN};
  const sk_runtime_stats *st = &J->figures[0].stats;
  if (sk_cluster_prices(&J->plan.desc.cluster)) fig.step_time_ms = st->step_us / (double)(st->steps ? st->steps : 1) / 1e3;
  J->fig = fig;
  if (sim_classes_build(&J->plan, &J->classes, msg, cap)) return -1;
  J->fig.dev = (sim_device_figures *)calloc((size_t)J->classes.n + 1, sizeof *J->fig.dev); /* + 1: never calloc(0) */
  if (!J->fig.dev) return snprintf(msg, cap, "report: out of memory for %d classes", J->classes.n), -1;
  return sim_class_figures(&J->classes, J->figures, J->fig.dev, msg, cap);
}

static int run_all(job *J, const char *argv0, char *msg, size_t cap) {
  const options *o = J->o;
  double *base = NULL;
  long nbase = 0;
  int process = 0, rc = 0;
  sk_world *w = NULL;
  sk_ckpt_root_lock lock = {-1, false}; /* --save-checkpoint's root, held until the end */
  if (o->distributed && make_world(o, &w, msg, cap)) return -1;
  if (o->mpi) MPI_Comm_rank(MPI_COMM_WORLD, &process);
  int locked = sim_ckpt_lock(w, &o->ckpt, &lock, prog_name(argv0), msg, cap);
  if (locked) rc = locked > 0 ? 1 : -1; /* 1: said already */
  if (!rc && process == 0 && J->plan.nfallbacks && o->devices > 1) say_fallbacks(J, argv0);
  /* the reference runs first unless it starts from what the broadcast leaves */
  bool after = o->broadcast;
  if (!rc && o->check && process == 0 && !after && reference_losses(J, &base, &nbase, msg, cap)) rc = -1;
  if (!rc && !o->distributed) {
    sk_error e;
    if (run_reference(J, false, &e)) snprintf(msg, cap, "%s", e.msg), rc = -1;
  } else if (!rc && sk_world_run(w, device_main, J, NULL)) {
    const char *why = sk_world_error_message(w);
    snprintf(msg, cap, "%s", *why ? why : J->mpi_error), rc = -1;
    /* each process fails its own way (a timeout names whom it waited for, and process 0 may be
       the one that hangs): every one says it, as the benchmarks do */
    if (process != 0) fprintf(stderr, "%s: world rank %d: %s\n", prog_name(argv0), process, msg);
  }
  if (!rc && o->check && process == 0 && after && reference_losses(J, &base, &nbase, msg, cap)) rc = -1;
  if (!rc && process == 0 && wants_figures(o) && executed_figures(J, msg, cap)) rc = -1;
  if (!rc && process == 0 && !print_summary(J, base, nbase)) rc = 1; /* said: the verdict line */
  if (!rc && J->diverged) rc = 1;                                      /* said: the not-finite line */
  if (!rc && process == 0 && wants_figures(o)) rc = report_figures(o, &J->fig, msg, cap);
  if (w) sk_world_destroy(w, NULL);
  sk_ckpt_unlock(&lock);
  free(base);
  return rc;
}

/* --dry-run: the report printed, then --report-json and the fit check on its figures, then its
   wall time (the compile's without the strategy search's, which --print-strategies reports) and
   peak RSS. 0; 1 when a class does not fit (said); -1 with msg. */
static int dry_run(const job *J, char *msg, size_t cap) {
  double t0 = now_s();
  sim_run_figures fig = {NULL, 0, NULL, &J->plan, NAN};
  sim_classes classes;
  int rc = sim_dry_run(stdout, &J->plan, J->compile_ms, &classes, &fig, msg, cap);
  if (!rc) rc = report_figures(J->o, &fig, msg, cap);
  free(fig.dev), sim_classes_free(&classes);
  double search_s = J->plan.searched ? J->plan.search_ms / 1e3 : 0;
  if (rc >= 0) sim_dry_summary(stdout, J->compile_ms / 1e3 - search_s + now_s() - t0);
  return rc;
}

int main(int argc, char **argv) {
  options o;
  int code = parse_options(argc, argv, &o);
  if (code) return code == 1 ? 0 : code;
  openblas_set_num_threads(1); /* the devices are the threads: one core each */
  sk_graph g;
  sk_graph_init(&g);
  job J;
  memset(&J, 0, sizeof J);
  J.o = &o;
  char msg[1024] = "";
  int rc = 0;
  if (o.report_json && sim_json_probe(o.report_json, msg, sizeof msg)) rc = 1; /* before a long run, not after it */
  else if (setup(&J, &g, msg, sizeof msg)) rc = 1;
  else if (o.dump_schedule) {
    char *line = (char *)malloc(sim_schedule_line_cap(&J.plan.schedule));
    for (int st = 0; line && st < J.plan.schedule.stages; st++) {
      sk_pipe_format_stage(&J.plan.schedule, st, line, sim_schedule_line_cap(&J.plan.schedule));
      printf("stage %d: %s\n", st, line);
    }
    if (!J.plan.vstage) printf("stage 0: (no pipeline: --pipeline S or --micro M)\n");
    free(line);
  } else if (o.dump_rank >= 0) {
    sim_print_program(stdout, &J.plan, o.dump_rank);
    printf("# compiled for %d devices in %.3f ms\n", o.devices, J.compile_ms);
  }
  else if (o.dry_run) {
    if ((!o.mpi || prog_launch_rank() == 0) && (code = dry_run(&J, msg, sizeof msg))) rc = 1;
  }
  else if ((code = run_all(&J, argv[0], msg, sizeof msg))) rc = 1;
  /* every process meets the same error: one says it; a failed check or a loss that is not
     finite was said already (code 1) */
  bool quiet = (o.mpi && prog_launch_rank() != 0) || code > 0;
  if (rc && !quiet) fprintf(stderr, "%s: %s\n", prog_name(argv[0]), msg);
  for (int p = 0; J.init && p < g.ntensors; p++) free(J.init[p]);
  free(J.losses), free(J.step_s), free(J.cpu_s), free(J.figures), free(J.init), free(J.fig.dev);
  sim_classes_free(&J.classes);
  sk_parallel_free(&J.plan);
  dataset_close(&J.data);
  sk_graph_free(&g);
  return rc;
}
