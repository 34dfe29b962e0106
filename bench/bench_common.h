/* bench_common.h -- the shared driver of shardkit's nccl-tests-style benchmarks.

   The idea of nccl-tests' common.cu, in C: each program (all_reduce_perf.c, ...) describes one
   collective in a bench_coll (name, count conventions, bus-bandwidth factor, minimum memory
   traffic, how to run it, fill its inputs and check its outputs) and calls bench_main(). This
   file parses the flags, creates the world, sweeps the sizes, times, probes memory bandwidth for
   %bound, checks every element, and prints the nccl-tests table.

   Per size, on every device (inside sk_world_run), for out-of-place then in-place:
     [out-of-place, reducing collectives: the ceiling kernel] -> fill inputs ->
     [out-of-place only: bandwidth probe] -> `-w` warm-up iterations -> barrier ->
     `-n` timed iterations of `-m` calls, waited for as `-z` says (time = mean per call; the row
     shows the maximum over ranks, or what `-a` asks) ->
     `-c` check runs (fresh inputs, one run, every element compared; #wrong = sum over ranks).
   A collective without an in-place form (bench_coll.in_place) either re-times the out-of-place
   form there (SendRecv, as nccl-tests) or skips it and prints N/A (AllToAllV).

   Sizes, counts and bandwidths follow nccl-tests: for a swept size B and element size es,
   count = B / es is handed to the collective's `counts` hook (nccl-tests' getCollByteCount),
   the "size" column is max(send bytes, recv bytes) of one rank, "count" is the count passed to
   the call, algbw = (that size) / time and busbw = algbw * factor.

   %bound = 100 * t_min / t(out-of-place), t_min = min_bytes / B. B is probed right before each
   size is timed: an in-place read+write kernel (x += z over 64-bit lanes, z an opaque zero, so
   data is unchanged) over exactly the buffers the out-of-place collective touches (its
   footprint: every send and receive buffer of every device it reads or writes), with
   P = min(devices in this process, online cores) threads, bytes counted as read + write, best of
   a few repeats. min_bytes per collective is derived in each program and in bench/README.md.

   %ceil (AllReduce, ReduceScatter, Reduce: bench_coll.ceil) = 100 * (min_bytes / t(out-of-place))
   / C, C the bytes read + written per second of bench_ceiling.h's kernel in the collective's
   shape (k into k, or k into 1), timed right before each size's fill over the device buffers
   (bench__ceiling).

   Backends: `-B threads` (`-g` devices as threads) and `-B mpi` (one device per process under
   mpirun.openmpi, when built with SK_BENCH_MPI as the Makefile does; see bench_world_mpi()).
   Without -B a program uses threads, or mpi when an MPI launcher started several processes
   (examples/progs.h: the launcher's variables tell).
   Everything else is backend-neutral: all cross-device results travel through sk_allreduce, and
   work shared between the devices of one process -- the probe and the expected-value table -- is
   split over the process's local devices only; the probe's footprint is summed over processes. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../examples/progs.h" /* -h/--help, the MPI launch: shared with the examples */
#include "bench_ceiling.h"     /* the reduction kernel of %ceil, shared with reduce_ceiling */

#define SK_IMPL
#include "shardkit.h"
#if defined(SK_BENCH_MPI) /* on when the Makefile builds the benchmarks with mpicc.openmpi */
#include "sk_mpi.h"
#endif

#define BENCH_FN static __attribute__((unused))

/* ---- what a program describes ------------------------------------------------------------- */

/* Element counts of one rank for one swept size (nccl-tests' getCollByteCount). */
typedef struct bench_counts {
  size_t send, recv;         /* elements in this rank's send and receive buffer */
  size_t param;              /* the count passed to the call */
  size_t send_ip, recv_ip;   /* in-place: send = recvbuf + send_ip*rank, recv = recvbuf + recv_ip*rank */
} bench_counts;

/* What fill and check see: one device, one size, one placement. */
typedef struct bench_io {
  int rank, n, root, rep;
  sk_dtype dt;
  sk_redop op;
  bool in_place;
  size_t es;                 /* element size */
  size_t count;              /* the count passed to the call */
  bench_counts cnt;
  void *send, *recv;         /* the pointers the call gets (in-place forms applied) */
  unsigned char *sendbuf, *recvbuf; /* this device's whole buffers */
  const unsigned char *expected;    /* the shared expected table (when the program uses one) */
  /* Vector collectives (bench_coll.peer_counts set; NULL otherwise): this rank's per-peer
     counts, n entries each in elements, with displacements packed in rank order. */
  const size_t *send_counts, *send_displs, *recv_counts, *recv_displs;
} bench_io;

/* What the in-place columns show. */
typedef enum bench_in_place {
  BENCH_IN_PLACE_NCCL,     /* NCCL's in-place form (bench_counts.send_ip, recv_ip), timed and checked */
  BENCH_IN_PLACE_RETIMED,  /* none, but nccl-tests prints the columns anyway (SendRecv): they re-time
                              the out-of-place form, #wrong N/A */
  BENCH_IN_PLACE_NONE      /* none (AllToAllV): not run; time, algbw, busbw and #wrong print N/A */
} bench_in_place;

/* Which ceiling %ceil divides by (bench_ceiling.h's kernel over this run's device buffers): the
   shape of the reduction the collective performs. */
typedef enum bench_ceil_shape {
  BENCH_CEIL_NONE,         /* not a reduction: no %ceil column */
  BENCH_CEIL_INTO_ALL,     /* k into k: every device's input summed into every device's output (AllReduce) */
  BENCH_CEIL_INTO_ROOT,    /* k into 1: into the root's output (Reduce) */
  BENCH_CEIL_INTO_BLOCKS   /* k into 1, the output in N blocks, block j in device j's output (ReduceScatter) */
} bench_ceil_shape;

/* Programs fill it with designated initializers: hooks a program does not need stay NULL. */
typedef struct bench_coll {
  const char *name;          /* nccl-tests' name, e.g. "AllReduce" */
  bool has_op;               /* the redop column names the op (else "none") */
  bool has_root;             /* the root column shows the root (else -1) */
  bool loops_ops;            /* `-o all` loops over ops (nccl-tests: reducing collectives and SendRecv) */
  bench_in_place in_place;
  bench_ceil_shape ceil;     /* the %ceil column's kernel shape; NONE (the default) prints no column */
  const char *usage_notes;   /* printed after the common -h text (optional): conventions of this program */
  double (*bus_factor)(int n);
  void (*counts)(size_t count, int n, bench_counts *out);
  /* Optional, for vector collectives: what `rank` sends to and receives from each of the n
     peers for the count column's `count` (bench_counts.param); the driver packs the
     displacements. `counts` must size send and recv for the largest totals of any rank. */
  void (*peer_counts)(int rank, int n, size_t count, size_t *send_counts, size_t *recv_counts);
  /* Bytes every input read once plus every output written once, S = the size column. */
  double (*min_bytes)(double S, int n);
  /* Which of this rank's buffers the out-of-place form touches: bit 0 send, bit 1 recv. */
  unsigned (*touches)(int rank, int n, int root);
  /* One call of the collective on io->send, io->recv (and io's counts, dtype, op, root). */
  sk_result (*run)(sk_comm *c, const bench_io *io);
  /* Optional: the same call started non-blocking, its requests (at most BENCH_REQS_PER_CALL) in
     req[0..]; the slots it does not use stay NULL. Without it `-m` calls run one after another. */
  sk_result (*start)(sk_comm *c, const bench_io *io, sk_request **req);
  void (*fill)(const bench_io *io);
  /* Optional shared expected table: elements and element j (computed by the local devices together). */
  size_t (*expected_elems)(int n, size_t count);
  void (*expected)(const bench_io *io, size_t j, void *out);
  int64_t (*check)(const bench_io *io);
} bench_coll;

/* The most requests one started call leaves (SendRecv: a send and a receive). */
#define BENCH_REQS_PER_CALL 2

BENCH_FN int bench_main(int argc, char **argv, const bench_coll *coll);

/* ---- input pattern and references ---------------------------------------------------------- */

BENCH_FN uint64_t bench__mix(int rank, size_t idx, int rep) {
  uint64_t x = (uint64_t)idx * 0x9E3779B97F4A7C15ull + (uint64_t)(rank + 1) * 0xBF58476D1CE4E5B9ull +
               (uint64_t)rep * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 29;
  return x;
}

/* Floats: +-(1 + f) with f a 20-bit (f64: 52-bit) fraction, so sums depend on the order, and
   neither sums nor products (|x| >= 1, granularity >= 2^-20) reach subnormals, which would slow
   the in-place timing loops that feed results back as inputs. */
BENCH_FN float bench__f32(uint64_t x) {
  float f = 1.0f + (float)(x >> 44) * (1.0f / 1048576.0f);
  return (x & 1) ? -f : f;
}
BENCH_FN double bench__f64(uint64_t x) {
  double f = 1.0 + (double)(x >> 12) * (1.0 / 4503599627370496.0);
  return (x & 1) ? -f : f;
}

/* Stores the input value of (rank, idx) into element `pos` of buf. */
BENCH_FN void bench_value(sk_dtype dt, void *buf, size_t pos, int rank, size_t idx, int rep) {
  uint64_t x = bench__mix(rank, idx, rep);
  switch (dt) {
    case SK_F32: ((float *)buf)[pos] = bench__f32(x); break;
    case SK_F64: ((double *)buf)[pos] = bench__f64(x); break;
    case SK_F16: ((uint16_t *)buf)[pos] = sk_f32_to_f16(bench__f32(x)); break;
    case SK_BF16: ((uint16_t *)buf)[pos] = sk_f32_to_bf16(bench__f32(x)); break;
    case SK_I8: case SK_U8: ((uint8_t *)buf)[pos] = (uint8_t)x; break;
    case SK_I32: ((uint32_t *)buf)[pos] = (uint32_t)x; break;
    default: ((uint64_t *)buf)[pos] = x; break;
  }
}

/* buf[i] = value(rank, idx0 + i), i < n */
BENCH_FN void bench_fill_values(sk_dtype dt, void *buf, size_t n, int rank, size_t idx0, int rep) {
  for (size_t i = 0; i < n; i++) bench_value(dt, buf, i, rank, idx0 + i, rep);
}

/* A pattern no correct output holds by accident (float: a normal value far from the inputs). */
BENCH_FN void bench_poison(void *buf, size_t bytes) { memset(buf, 0xA5, bytes); }

#define BENCH__FOLD(a, b, op)                                                                   \
  ((op) == SK_PROD ? (a) * (b) : (op) == SK_MIN ? ((b) < (a) ? (b) : (a))                        \
                               : (op) == SK_MAX ? ((b) > (a) ? (b) : (a)) : (a) + (b))

/* The reference: op over value(0, idx), value(1, idx), ..., value(n-1, idx), left to right, with
   sk_comm.h's numeric rules (integer sum/prod wrap in the unsigned type, min/max compare signed,
   avg = sum / n truncated toward zero; f16/bf16 accumulate in f32 and round once). Written
   independently of sk_reduce_local. Result stored into element 0 of out. */
BENCH_FN void bench_reduce_value(sk_dtype dt, sk_redop op, int n, size_t idx, int rep, void *out) {
  unsigned char tmp[8];
  switch (dt) {
    case SK_F32: case SK_F16: case SK_BF16: {
      float acc = 0;
      for (int r = 0; r < n; r++) {
        bench_value(dt, tmp, 0, r, idx, rep);
        float v = dt == SK_F32 ? ((float *)tmp)[0]
                  : dt == SK_F16 ? sk_f16_to_f32(((uint16_t *)tmp)[0]) : sk_bf16_to_f32(((uint16_t *)tmp)[0]);
        acc = r == 0 ? v : BENCH__FOLD(acc, v, op);
      }
      if (op == SK_AVG) acc = acc / (float)n;
      if (dt == SK_F32) ((float *)out)[0] = acc;
      else ((uint16_t *)out)[0] = dt == SK_F16 ? sk_f32_to_f16(acc) : sk_f32_to_bf16(acc);
      return;
    }
    case SK_F64: {
      double acc = 0;
      for (int r = 0; r < n; r++) {
        bench_value(dt, tmp, 0, r, idx, rep);
        double v = ((double *)tmp)[0];
        acc = r == 0 ? v : BENCH__FOLD(acc, v, op);
      }
      if (op == SK_AVG) acc = acc / (double)n;
      ((double *)out)[0] = acc;
      return;
    }
    default: break;
  }
  /* integers: U = unsigned of the width, T = signed or unsigned as the dtype */
#define BENCH__INT_REDUCE(T, U)                                                                  \
  do {                                                                                           \
    U acc = 0;                                                                                   \
    T m = 0;                                                                                     \
    for (int r = 0; r < n; r++) {                                                                \
      bench_value(dt, tmp, 0, r, idx, rep);                                                      \
      U u;                                                                                       \
      memcpy(&u, tmp, sizeof u);                                                                 \
      T t;                                                                                       \
      memcpy(&t, tmp, sizeof t);                                                                 \
      if (r == 0) acc = u, m = t;                                                                \
      else if (op == SK_PROD) acc = (U)((unsigned long long)acc * (unsigned long long)u);       \
      else if (op == SK_MIN) m = t < m ? t : m;                                                  \
      else if (op == SK_MAX) m = t > m ? t : m;                                                  \
      else acc = (U)(acc + u);                                                                   \
    }                                                                                            \
    T res;                                                                                       \
    if (op == SK_MIN || op == SK_MAX) res = m;                                                   \
    else {                                                                                       \
      memcpy(&res, &acc, sizeof res);                                                            \
      if (op == SK_AVG) res = (T)(res / (T)n);                                                   \
    }                                                                                            \
    memcpy(out, &res, sizeof res);                                                               \
  } while (0)
  switch (dt) {
    case SK_I8: BENCH__INT_REDUCE(int8_t, uint8_t); break;
    case SK_U8: BENCH__INT_REDUCE(uint8_t, uint8_t); break;
    case SK_I32: BENCH__INT_REDUCE(int32_t, uint32_t); break;
    default: BENCH__INT_REDUCE(int64_t, uint64_t); break;
  }
#undef BENCH__INT_REDUCE
}

/* Elements of got[0..n) that differ bitwise from want[0..n). */
BENCH_FN int64_t bench_count_wrong(size_t es, const void *got, const void *want, size_t n) {
  int64_t bad = 0;
  const unsigned char *g = (const unsigned char *)got, *w = (const unsigned char *)want;
  if (memcmp(g, w, n * es) == 0) return 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(g + i * es, w + i * es, es) != 0;
  return bad;
}

/* Elements of got[i] != value(rank, idx0 + i), i < n. */
BENCH_FN int64_t bench_count_wrong_values(sk_dtype dt, const void *got, size_t n, int rank, size_t idx0, int rep) {
  size_t es = sk_dtype_size(dt);
  unsigned char want[8];
  int64_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    bench_value(dt, want, 0, rank, idx0 + i, rep);
    bad += memcmp((const unsigned char *)got + i * es, want, es) != 0;
  }
  return bad;
}

/* Gathered buffers (AllGather, Gather): rank j contributes value(j, j*count + i), i < count,
   and the gathered buffer holds the blocks in rank order, so its element k is value(k / count, k). */

/* The fill hook of a gathering collective: this rank's input, and poison over the part of the
   gathered buffer it does not supply itself: all of it out of place; in place
   (send = recv + rank*count) every block but its own. */
BENCH_FN void bench_fill_gathered(const bench_io *io) {
  size_t block = io->count * io->es;
  unsigned char *recv = (unsigned char *)io->recv;
  if (!io->in_place) {
    bench_poison(recv, block * (size_t)io->n);
  } else {
    bench_poison(recv, block * (size_t)io->rank);
    bench_poison(recv + block * (size_t)(io->rank + 1), block * (size_t)(io->n - io->rank - 1));
  }
  bench_fill_values(io->dt, io->send, io->count, io->rank, (size_t)io->rank * io->count, io->rep);
}

/* Wrong elements of this rank's gathered buffer (io->recv). */
BENCH_FN int64_t bench_count_wrong_gathered(const bench_io *io) {
  int64_t bad = 0;
  for (int j = 0; j < io->n; j++)
    bad += bench_count_wrong_values(io->dt, (unsigned char *)io->recv + (size_t)j * io->count * io->es, io->count, j,
                                    (size_t)j * io->count, io->rep);
  return bad;
}

/* ---- options -------------------------------------------------------------------------------- */

typedef struct bench_opts {
  const char *prog;
  size_t minbytes, maxbytes;
  long factor;
  size_t stepbytes;           /* -i: add this many bytes per step; 0 = multiply by factor */
  int iters, warmup, check;
  int agg;                    /* -m: calls per timed iteration (time = total / (iters * agg)) */
  int blocking;               /* -z: 0..3, see bench__iteration */
  int average;                /* -a: the rows' time over ranks: 0 rank 0, 1 mean, 2 min, 3 max */
  int cycles;                 /* -N: sweeps of the sizes; 0 = until interrupted */
  long timeout_s;             /* -T: the bound of every wait, seconds; 0 = the world's default */
  const char *json;           /* -J: path of the JSON report; NULL = none */
  int ndtypes, nops;
  sk_dtype dtypes[SK_DTYPE_COUNT];
  sk_redop ops[SK_REDOP_COUNT];
  int root;                   /* -1 = every root */
  int ngpus;                  /* 0 = not given; after the world is made: the world size */
  int nthreads;               /* -t; 0 = not given (one) */
  const char *backend;        /* "threads" or "mpi" (bench_main settles it) */
  const char *backend_asked;  /* -B's value, NULL when not given */
  const char *path;           /* argv[0], for commands the texts show */
  char cmdline[1024];
} bench_opts;

#define BENCH_DEFAULT_GPUS 8
#define BENCH_MAX_AGG 1024

BENCH_FN void bench__usage(FILE *f, const char *path, const char *usage_notes) {
  fprintf(f,
          "Usage: %s [flags]   (shardkit's nccl-tests-style benchmark)\n"
          "  -b,--minbytes <size>     smallest size: bytes, K/M/G = powers of 2, fractions allowed when\n"
          "                           they give whole bytes (1.5M = 1572864) (default 32M)\n"
          "  -e,--maxbytes <size>     largest size (default 32M)\n"
          "  -f,--stepfactor <n>      multiply the size by n each step, n >= 2 (default 2)\n"
          "  -i,--stepbytes <size>    add <size> each step instead (fixed step; not together with -f)\n"
          "  -n,--iters <n>           timed iterations per size, >= 1 (default 20)\n"
          "  -m,--agg_iters <n>       calls per timed iteration, 1..%d; time = total / (iters * n) (default 1)\n"
          "  -w,--warmup_iters <n>    untimed iterations before each size and placement (default 5)\n"
          "  -N,--run_cycles <n>      sweep the sizes n times, printing every row (default 1; 0 = until\n"
          "                           interrupted)\n"
          "  -z,--blocking <0-3>      0: an iteration's -m calls start non-blocking, then are waited for\n"
          "                           together (one call: the blocking call); 1: every call blocks, then a\n"
          "                           barrier; 2: every call blocks; 3: as 0, then a barrier, not timed (default 0)\n"
          "  -a,--average <0-3>       the time a row shows over ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 3)\n"
          "  -c,--check <n>           check runs per size: every element compared (default 1; 0 = off)\n"
          "  -d,--datatype <type>     float half bfloat16 double int8 uint8 int32 int64, or all (default float)\n"
          "  -o,--op <op>             sum prod min max avg, or all (default sum)\n"
          "  -r,--root <rank>         root of Broadcast/Reduce; -1 = every root (default 0)\n"
          "  -g,--ngpus <n>           devices. threads: threads acting as devices, per -t thread (default %d,\n"
          "                           or 1 with -t; nccl-tests' default is 1). mpi: the number of processes\n"
          "  -t,--nthreads <n>        threads: -t n -g g runs n*g devices (as nccl-tests' threads x GPUs).\n"
          "                           mpi: 1 only (one device per process)\n"
          "  -T,--timeout <s>         a wait longer than s seconds ends the run with an error, exit 1\n"
          "                           (default 0: the world's bound, 300 s)\n"
          "  -J,--output_file <file>  also write the parameters and every row as JSON to <file>\n"
          "  -B,--backend <name>      threads, or mpi (one device per process). Default: threads, or mpi\n"
          "                           when an MPI launcher started several processes (-B threads is then refused)\n"
          "  -h,--help                this text\n"
          "Columns as nccl-tests (size count type redop root, then time algbw busbw #wrong out-of-place\n"
          "and in-place) plus %%bound = 100 * t_min / t(out-of-place), and for reducing collectives\n"
          "%%ceil = 100 * (bytes read + written per second) / (the reduction kernel's, measured in the run);\n"
          "see bench/README.md.\n"
          "Exit status: 0 = all rows correct, 1 = wrong elements or a failed call, 2 = bad flags.\n"
          "On 4 MPI processes:  " PROG_MPIRUN " -np 4 %s -b 1M -e 16M -f 4\n" PROG_ROOT_NOTE,
          path, BENCH_MAX_AGG, BENCH_DEFAULT_GPUS, path);
  if (usage_notes) fputs(usage_notes, f);
}

BENCH_FN int bench__bad(const char *prog, const char *fmt, const char *arg) {
  fprintf(stderr, "%s: ", prog);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see %s -h)\n", prog);
  return 2;
}

/* "8", "64K", "1.5M", "2G", an optional trailing B; K/M/G are powers of 2 (as nccl-tests), at
   most 1 TiB. A fraction must give a whole number of bytes: "1.5M" = 1572864, but "1.3" or
   "1.1K" is refused rather than rounded, so the size swept is the size asked for. Computed in
   integers: the fraction has at most 9 digits, so frac << 30 stays below 2^60. */
BENCH_FN bool bench__parse_size(const char *s, size_t *out) {
  if (!s || *s < '0' || *s > '9') return false;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return false;
  uint64_t frac = 0, scale = 1; /* the fraction is frac / scale, scale = 10^digits */
  if (*end == '.') {
    if (*++end < '0' || *end > '9') return false;
    for (; *end >= '0' && *end <= '9'; end++) {
      if (scale >= 1000000000u) return false;
      frac = frac * 10 + (uint64_t)(*end - '0'), scale *= 10;
    }
  }
  unsigned shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10, end++; break;
    case 'm': case 'M': shift = 20, end++; break;
    case 'g': case 'G': shift = 30, end++; break;
    default: break;
  }
  if (*end == 'b' || *end == 'B') end++;
  if (*end || v > (1ull << 40) >> shift || (frac << shift) % scale) return false;
  uint64_t total = ((uint64_t)v << shift) + (frac << shift) / scale;
  if (total > 1ull << 40) return false;
  *out = (size_t)total;
  return true;
}

/* getopt_long's complaint (opterr = 0, optstring starting ':'): c is ':' for a flag without its
   value, '?' for an unknown one. Returns 2 after the message. */
BENCH_FN int bench__bad_flag(const char *prog, int c, char **argv) {
  char opt[3] = {'-', (char)optopt, 0};
  const char *last = argv[optind - 1]; /* a long option's own spelling is clearer than its letter */
  const char *name = optopt && strncmp(last, "--", 2) != 0 ? opt : last;
  return bench__bad(prog, c == ':' ? "option %s needs a value" : "unknown option '%s'", name);
}

/* -d: one dtype or "all" (nccl-tests' order). */
BENCH_FN bool bench__parse_dtypes(const char *arg, bench_opts *o) {
  static const sk_dtype all[] = {SK_I8, SK_U8, SK_I32, SK_I64, SK_F16, SK_F32, SK_F64, SK_BF16};
  sk_dtype dt;
  if (strcmp(arg, "all") == 0) {
    o->ndtypes = (int)(sizeof all / sizeof all[0]);
    memcpy(o->dtypes, all, sizeof all);
  } else if (sk_dtype_from_name(arg, &dt)) {
    o->ndtypes = 1, o->dtypes[0] = dt;
  } else {
    return false;
  }
  return true;
}

/* -o: one op or "all". */
BENCH_FN bool bench__parse_ops(const char *arg, bench_opts *o) {
  sk_redop op;
  if (strcmp(arg, "all") == 0) {
    o->nops = (int)SK_REDOP_COUNT;
    for (int i = 0; i < (int)SK_REDOP_COUNT; i++) o->ops[i] = (sk_redop)i;
  } else if (sk_redop_from_name(arg, &op)) {
    o->nops = 1, o->ops[0] = op;
  } else {
    return false;
  }
  return true;
}

#define BENCH__SIZE_HINT "a positive whole number of bytes with an optional K, M or G suffix, e.g. 64K or 1.5M"

/* The sweep's flags (-b -e -f -i). Returns 0, 2 after a message, or -1 for another flag. */
BENCH_FN int bench__parse_sweep(int c, const char *arg, bench_opts *o) {
  long v;
  switch (c) {
    case 'b':
      if (!bench__parse_size(arg, &o->minbytes) || o->minbytes == 0)
        return bench__bad(o->prog, "-b: bad size '%s' (" BENCH__SIZE_HINT ")", arg);
      return 0;
    case 'e':
      if (!bench__parse_size(arg, &o->maxbytes) || o->maxbytes == 0)
        return bench__bad(o->prog, "-e: bad size '%s' (" BENCH__SIZE_HINT ")", arg);
      return 0;
    case 'i':
      if (!bench__parse_size(arg, &o->stepbytes) || o->stepbytes == 0)
        return bench__bad(o->prog, "-i: bad step '%s' (" BENCH__SIZE_HINT ")", arg);
      return 0;
    case 'f':
      if (!prog_parse_long_in(arg, 2, 1 << 20, &v)) return bench__bad(o->prog, "-f: bad factor '%s' (an integer >= 2)", arg);
      o->factor = v;
      return 0;
    default: return -1;
  }
}

/* The timing loop's flags (-n -w -m -z -a -N -T). Returns as bench__parse_sweep. */
BENCH_FN int bench__parse_timing(int c, const char *arg, bench_opts *o) {
  long v;
  switch (c) {
    case 'n':
      if (!prog_parse_long_in(arg, 1, INT_MAX, &v)) return bench__bad(o->prog, "-n: bad iteration count '%s' (>= 1)", arg);
      return o->iters = (int)v, 0;
    case 'w':
      if (!prog_parse_long_in(arg, 0, INT_MAX, &v)) return bench__bad(o->prog, "-w: bad warm-up count '%s' (>= 0)", arg);
      return o->warmup = (int)v, 0;
    case 'm':
      if (!prog_parse_long_in(arg, 1, BENCH_MAX_AGG, &v))
        return bench__bad(o->prog, "-m: bad aggregation count '%s' (1..1024)", arg);
      return o->agg = (int)v, 0;
    case 'z':
      if (!prog_parse_long_in(arg, 0, 3, &v)) return bench__bad(o->prog, "-z: bad blocking mode '%s' (0, 1, 2 or 3)", arg);
      return o->blocking = (int)v, 0;
    case 'a':
      if (!prog_parse_long_in(arg, 0, 3, &v))
        return bench__bad(o->prog, "-a: bad mode '%s' (0 rank 0, 1 mean, 2 min, 3 max)", arg);
      return o->average = (int)v, 0;
    case 'N':
      if (!prog_parse_long_in(arg, 0, INT_MAX, &v)) return bench__bad(o->prog, "-N: bad cycle count '%s' (>= 0; 0 = until interrupted)", arg);
      return o->cycles = (int)v, 0;
    case 'T':
      if (!prog_parse_long_in(arg, 0, 86400, &v)) return bench__bad(o->prog, "-T: bad timeout '%s' (seconds, 0..86400)", arg);
      return o->timeout_s = v, 0;
    default: return -1;
  }
}

/* What runs and where (-c -d -o -r -g -t -B -J). Returns as bench__parse_sweep. */
BENCH_FN int bench__parse_setup(int c, const char *arg, bench_opts *o) {
  long v;
  switch (c) {
    case 'c':
      if (!prog_parse_long_in(arg, 0, 1000, &v)) return bench__bad(o->prog, "-c: bad check count '%s' (0..1000)", arg);
      return o->check = (int)v, 0;
    case 'd':
      if (!bench__parse_dtypes(arg, o))
        return bench__bad(o->prog, "-d: unknown type '%s' (float half bfloat16 double int8 uint8 int32 int64 all)", arg);
      return 0;
    case 'o':
      if (!bench__parse_ops(arg, o)) return bench__bad(o->prog, "-o: unknown op '%s' (sum prod min max avg all)", arg);
      return 0;
    case 'r':
      if (!prog_parse_long_in(arg, -1, SK_MAX_DEVICES - 1, &v)) return bench__bad(o->prog, "-r: bad root '%s' (-1 or a rank)", arg);
      return o->root = (int)v, 0;
    case 'g':
      if (!prog_parse_long_in(arg, 1, SK_MAX_DEVICES, &v)) return bench__bad(o->prog, "-g: bad device count '%s' (1..4096)", arg);
      return o->ngpus = (int)v, 0;
    case 't':
      if (!prog_parse_long_in(arg, 1, SK_MAX_DEVICES, &v)) return bench__bad(o->prog, "-t: bad thread count '%s' (1..4096)", arg);
      return o->nthreads = (int)v, 0;
    case 'B':
      if (strcmp(arg, "threads") != 0 && strcmp(arg, "mpi") != 0)
        return bench__bad(o->prog, "-B: unknown backend '%s' (threads or mpi)", arg);
      o->backend_asked = strcmp(arg, "mpi") == 0 ? "mpi" : "threads";
      return 0;
    case 'J':
      if (!*arg) return bench__bad(o->prog, "-J: empty file name%s", "");
      return o->json = arg, 0;
    default: return -1;
  }
}

/* The rules between flags, after all were read. Returns 0 or 2 after a message. */
BENCH_FN int bench__check_opts(bench_opts *o, bool factor_given) {
  char buf[64];
  if (o->maxbytes < o->minbytes) {
    snprintf(buf, sizeof buf, "%zu < %zu", o->maxbytes, o->minbytes);
    return bench__bad(o->prog, "-e is below -b (%s)", buf);
  }
  /* nccl-tests lets -f win silently; naming both is more likely a mistake than a wish */
  if (o->stepbytes && factor_given) return bench__bad(o->prog, "%s", "-i (a fixed step) and -f (a factor) exclude each other");
  if (o->nthreads && o->ngpus && (long)o->nthreads * o->ngpus > SK_MAX_DEVICES) {
    snprintf(buf, sizeof buf, "%d x %d", o->nthreads, o->ngpus);
    return bench__bad(o->prog, "-t x -g: %s devices, more than 4096", buf);
  }
  return 0;
}

/* Returns 0 to run, 1 after -h (the common text, then usage_notes), 2 on a bad flag (message printed). */
BENCH_FN int bench__parse(int argc, char **argv, bench_opts *o, const char *usage_notes) {
  memset(o, 0, sizeof *o);
  o->prog = prog_name(argv[0]), o->path = argv[0];
  o->minbytes = o->maxbytes = 32u << 20;
  o->factor = 2, o->iters = 20, o->warmup = 5, o->check = 1, o->root = 0;
  o->agg = 1, o->average = 3, o->cycles = 1;
  o->ndtypes = 1, o->dtypes[0] = SK_F32, o->nops = 1, o->ops[0] = SK_SUM;
  size_t len = 0;
  for (int i = 0; i < argc && len + 2 < sizeof o->cmdline; i++)
    len += (size_t)snprintf(o->cmdline + len, sizeof o->cmdline - len, "%s%s", i ? " " : "", argv[i]);
  static const struct option longopts[] = {
      {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
      {"stepfactor", required_argument, 0, 'f'}, {"stepbytes", required_argument, 0, 'i'},
      {"iters", required_argument, 0, 'n'}, {"warmup_iters", required_argument, 0, 'w'},
      {"agg_iters", required_argument, 0, 'm'}, {"blocking", required_argument, 0, 'z'},
      {"average", required_argument, 0, 'a'}, {"run_cycles", required_argument, 0, 'N'},
      {"timeout", required_argument, 0, 'T'}, {"check", required_argument, 0, 'c'},
      {"datatype", required_argument, 0, 'd'}, {"op", required_argument, 0, 'o'},
      {"root", required_argument, 0, 'r'}, {"ngpus", required_argument, 0, 'g'},
      {"nthreads", required_argument, 0, 't'}, {"backend", required_argument, 0, 'B'},
      {"output_file", required_argument, 0, 'J'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  bool factor_given = false;
  for (;;) {
    int c = getopt_long(argc, argv, ":b:e:f:i:n:w:m:z:a:N:T:c:d:o:r:g:t:B:J:h", longopts, NULL);
    if (c == -1) break;
    if (c == 'h') {
      bench__usage(stdout, o->path, usage_notes);
      return 1;
    }
    factor_given |= c == 'f';
    int st = bench__parse_sweep(c, optarg, o);
    if (st < 0) st = bench__parse_timing(c, optarg, o);
    if (st < 0) st = bench__parse_setup(c, optarg, o);
    if (st < 0) return bench__bad_flag(o->prog, c, argv);
    if (st) return st;
  }
  if (optind < argc) return bench__bad(o->prog, "unexpected argument '%s'", argv[optind]);
  return bench__check_opts(o, factor_given);
}

/* The size after b in the sweep (-f or -i); false when b was the last one (the next would pass
   -e, or overflow). The only place that steps a sweep. */
BENCH_FN bool bench__next_size(const bench_opts *o, size_t b, size_t *next) {
  if (o->stepbytes) {
    if (o->maxbytes < o->stepbytes || b > o->maxbytes - o->stepbytes) return false;
    *next = b + o->stepbytes;
  } else {
    if (b > o->maxbytes / (size_t)o->factor) return false;
    *next = b * (size_t)o->factor;
  }
  return true;
}

/* ---- the run context ------------------------------------------------------------------------- */

typedef struct bench_region {
  unsigned char *p;
  size_t bytes;
} bench_region;

typedef struct bench_dev {
  bench_region reg[2]; /* what the out-of-place form touches, for the probe */
  unsigned char *send, *recv; /* the device's whole buffers, for the ceiling kernel */
} bench_dev;

/* Shared by the devices of this process. */
typedef struct bench_ctx {
  const bench_opts *o;
  const bench_coll *coll;
  int n;                     /* world size */
  int local0, nlocal;        /* world ranks [local0, local0 + nlocal) live in this process */
  int cores;                 /* online cores */
  int probe_threads;         /* min(nlocal, cores) */
  bench_dev *dev;            /* nlocal entries */
  unsigned char *expected;   /* shared expected table */
  size_t expected_cap;       /* bytes */
  size_t maxbuf;             /* bytes of each device buffer */
  /* rank 0's results */
  double bw_sum;
  int bw_count;
  int64_t wrong_total;
  int rows;
  char probe_log[64][112];   /* first 64 sizes' probe figures, printed after the table */
  int probe_rows;
  FILE *json;                /* -J's report (world rank 0), NULL without -J */
  int json_rows;
} bench_ctx;

/* The probe: x += z over 64-bit lanes (z is zero at run time, unknown to the compiler), so each
   byte is read and written and data is unchanged. AVX2 when the CPU has it. */
static volatile uint64_t bench__zero = 0;
typedef uint64_t bench__v4 __attribute__((vector_size(32), may_alias, aligned(32)));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
BENCH_FN void bench__rw(unsigned char *p, size_t n, uint64_t z) {
  while (n && ((uintptr_t)p & 31)) *p = (unsigned char)(*p + (unsigned char)z), p++, n--;
  bench__v4 *v = (bench__v4 *)(void *)p;
  bench__v4 zz = {z, z, z, z};
  size_t nv = n / 32, i = 0;
  for (; i + 4 <= nv; i += 4) {
    v[i] += zz;
    v[i + 1] += zz;
    v[i + 2] += zz;
    v[i + 3] += zz;
  }
  for (; i < nv; i++) v[i] += zz;
  p += nv * 32, n -= nv * 32;
  while (n) *p = (unsigned char)(*p + (unsigned char)z), p++, n--;
}

/* Runs on every device. Returns the best time of one pass over the whole footprint (seconds;
   the maximum over the probing threads, each timing its share) and the footprint bytes. */
BENCH_FN sk_result bench__probe(sk_comm *c, bench_ctx *x, int lrank, double *t_pass, size_t *footprint) {
  sk_result r = sk_barrier(c, NULL); /* every device registered its regions */
  if (r != SK_OK) return r;
  size_t F = 0;
  for (int d = 0; d < x->nlocal; d++) F += x->dev[d].reg[0].bytes + x->dev[d].reg[1].bytes;
  size_t F_local = F;
  int P = x->probe_threads;
  double mine = 0;
  int maxseg = 2 * x->nlocal + 2, nseg = 0;
  bench_region *seg = (bench_region *)malloc(sizeof *seg * (size_t)maxseg);
  if (!seg) return sk_error_set(sk_comm_error(c), SK_ERR_OUT_OF_MEMORY, "probe: allocating %d segments", maxseg);
  size_t share = 0;
  if (lrank < P && F) {
    size_t lo = F / (size_t)P * (size_t)lrank / 64 * 64, hi = lrank == P - 1 ? F : F / (size_t)P * (size_t)(lrank + 1) / 64 * 64;
    size_t off = 0;
    for (int d = 0; d < x->nlocal; d++)
      for (int k = 0; k < 2; k++) {
        bench_region g = x->dev[d].reg[k];
        size_t a = off > lo ? off : lo, b = off + g.bytes < hi ? off + g.bytes : hi;
        if (a < b && nseg < maxseg) {
          seg[nseg].p = g.p + (a - off), seg[nseg].bytes = b - a;
          share += b - a, nseg++;
        }
        off += g.bytes;
      }
  }
  /* Each sample moves at least ~2 MiB per thread (repeated passes over small shares) so the
     barrier skew is small against it; best of 5 (3 above 64 MiB). */
  size_t inner = share ? (1u << 20) / share + 1 : 1;
  int samples = F > (64u << 20) ? 3 : 5;
  double best = 1e30;
  for (int s = 0; s < samples; s++) {
    r = sk_barrier(c, NULL);
    if (r != SK_OK) break;
    if (!nseg) continue;
    uint64_t z = bench__zero;
    uint64_t t0 = sk_now_ns();
    for (size_t it = 0; it < inner; it++)
      for (int k = 0; k < nseg; k++) bench__rw(seg[k].p, seg[k].bytes, z);
    uint64_t t1 = sk_now_ns();
    double t = (double)(t1 - t0) * 1e-9 / (double)inner;
    if (t < best) best = t;
  }
  free(seg);
  if (r != SK_OK) return r;
  if (nseg) mine = best;
  r = sk_allreduce(c, &mine, t_pass, 1, SK_F64, SK_MAX, NULL);
  /* Every process probed its own devices at the same time: the footprint is the sum over
     processes (one contribution per process; the threads backend has one process). */
  int64_t fl = lrank == 0 ? (int64_t)F_local : 0, ft = 0;
  if (r == SK_OK) r = sk_allreduce(c, &fl, &ft, 1, SK_I64, SK_SUM, NULL);
  *footprint = (size_t)ft;
  return r;
}

/* Page-touched, 64-byte aligned (2 MiB and transparent huge pages when large). */
BENCH_FN unsigned char *bench__alloc(size_t bytes) {
  size_t align = bytes >= (2u << 20) ? (2u << 20) : 4096;
  size_t sz = (bytes + align - 1) / align * align;
  if (sz == 0) sz = align;
  unsigned char *p = (unsigned char *)aligned_alloc(align, sz);
  if (!p) return NULL;
#ifdef MADV_HUGEPAGE
  if (align == (2u << 20)) madvise(p, sz, MADV_HUGEPAGE);
#endif
  memset(p, 0, sz);
  return p;
}

typedef struct bench_dev_state {
  sk_comm *c;
  bench_ctx *x;
  int rank, lrank;
  unsigned char *sendbuf, *recvbuf;
  size_t *peer_layout;       /* vector collectives: 4n entries behind bench_io's four per-peer arrays */
  sk_request **reqs;         /* BENCH_REQS_PER_CALL * -m slots: one iteration's started calls */
} bench_dev_state;

/* Vector collectives: the program's per-peer counts for this rank, displacements packed in rank
   order. Totals beyond the buffers bench_counts sized would be a program's bug: it aborts. */
BENCH_FN void bench__setup_peers(bench_dev_state *s, bench_io *io) {
  size_t n = (size_t)io->n;
  size_t *send_counts = s->peer_layout, *send_displs = send_counts + n;
  size_t *recv_counts = send_displs + n, *recv_displs = recv_counts + n;
  s->x->coll->peer_counts(io->rank, io->n, io->count, send_counts, recv_counts);
  size_t sent = 0, received = 0;
  for (size_t j = 0; j < n; j++) {
    send_displs[j] = sent, recv_displs[j] = received;
    sent += send_counts[j], received += recv_counts[j];
  }
  if (sent > io->cnt.send || received > io->cnt.recv) {
    fprintf(stderr, "%s: rank %d: per-peer counts total %zu sent, %zu received; the buffers hold %zu, %zu\n",
            s->x->o->prog, io->rank, sent, received, io->cnt.send, io->cnt.recv);
    abort();
  }
  io->send_counts = send_counts, io->send_displs = send_displs;
  io->recv_counts = recv_counts, io->recv_displs = recv_displs;
}

BENCH_FN void bench__setup_io(bench_dev_state *s, bench_io *io, sk_dtype dt, sk_redop op, int root, size_t bytes,
                            bool in_place, int rep) {
  const bench_coll *coll = s->x->coll;
  memset(io, 0, sizeof *io);
  io->rank = s->rank, io->n = s->x->n, io->root = root, io->rep = rep, io->dt = dt, io->op = op;
  io->in_place = in_place;
  io->es = sk_dtype_size(dt);
  coll->counts(bytes / io->es, io->n, &io->cnt);
  io->count = io->cnt.param;
  io->sendbuf = s->sendbuf, io->recvbuf = s->recvbuf;
  if (in_place && coll->in_place == BENCH_IN_PLACE_NCCL) {
    io->send = s->recvbuf + io->cnt.send_ip * io->es * (size_t)s->rank;
    io->recv = s->recvbuf + io->cnt.recv_ip * io->es * (size_t)s->rank;
  } else {
    io->send = s->sendbuf, io->recv = s->recvbuf;
  }
  io->expected = s->x->expected;
  if (coll->peer_counts) bench__setup_peers(s, io);
}

/* A failed call's message. Aborted: the failing rank says why. Unsupported: a backend without
   this collective refuses it on every rank, and bench_main says so once. */
BENCH_FN sk_result bench__said(bench_dev_state *s, sk_result r) {
  if (r != SK_OK && r != SK_ERR_ABORTED && r != SK_ERR_UNSUPPORTED)
    fprintf(stderr, "%s: rank %d: %s failed: %s: %s\n", s->x->o->prog, s->rank, s->x->coll->name, sk_result_name(r),
            sk_comm_error_message(s->c));
  return r;
}

BENCH_FN sk_result bench__call(bench_dev_state *s, const bench_io *io) { return bench__said(s, s->x->coll->run(s->c, io)); }

/* One call started non-blocking into req[0..BENCH_REQS_PER_CALL); a program without a start hook
   runs the blocking call instead (done on return, no request). */
BENCH_FN sk_result bench__start(bench_dev_state *s, const bench_io *io, sk_request **req) {
  if (!s->x->coll->start) return bench__call(s, io);
  return bench__said(s, s->x->coll->start(s->c, io, req));
}

/* One timed iteration: -m calls as -z says (nccl-tests' startColl + completeColl). Adds the time
   the calls took to *coll_s (so -z 3 can leave its barrier out).
     0, 3: every call started non-blocking, then all waited for together; one call alone is the
           blocking call, which is the backend's own start + wait. 3 then adds a barrier.
     1: each call blocks, then a barrier.   2: each call blocks. */
BENCH_FN sk_result bench__iteration(bench_dev_state *s, const bench_io *io, double *coll_s) {
  const bench_opts *o = s->x->o;
  sk_result r = SK_OK;
  uint64_t t0 = sk_now_ns();
  if (o->blocking == 1 || o->blocking == 2 || o->agg == 1) {
    for (int k = 0; r == SK_OK && k < o->agg; k++) {
      r = bench__call(s, io);
      if (r == SK_OK && o->blocking == 1) r = sk_barrier(s->c, NULL);
    }
  } else {
    int nreq = BENCH_REQS_PER_CALL * o->agg;
    for (int k = 0; r == SK_OK && k < o->agg; k++) r = bench__start(s, io, s->reqs + BENCH_REQS_PER_CALL * k);
    sk_result w = bench__said(s, sk_waitall(nreq, s->reqs, NULL)); /* also after a failed start: frees what began */
    if (r == SK_OK) r = w;
  }
  *coll_s += (double)(sk_now_ns() - t0) * 1e-9;
  if (r == SK_OK && o->blocking == 3) r = sk_barrier(s->c, NULL);
  return r;
}

/* -a: one time per rank to the time of the row, on every rank: rank 0's, the mean, the minimum or
   the maximum (nccl-tests reduces its times across threads and processes the same way). */
BENCH_FN sk_result bench__over_ranks(sk_comm *c, int mode, double mine, double *out) {
  if (mode == 0) return sk_broadcast(c, &mine, out, 1, SK_F64, 0, NULL);
  sk_result r = sk_allreduce(c, &mine, out, 1, SK_F64, mode == 1 ? SK_SUM : mode == 2 ? SK_MIN : SK_MAX, NULL);
  if (r == SK_OK && mode == 1) *out /= sk_comm_size(c);
  return r;
}

/* Times one placement: -w untimed iterations, a barrier, -n timed ones; *t = seconds per call
   (total / (iters * agg)), over ranks as -a says. */
BENCH_FN sk_result bench__time(bench_dev_state *s, const bench_io *io, double *t) {
  const bench_opts *o = s->x->o;
  sk_result r = SK_OK;
  double coll_s = 0;
  for (int i = 0; r == SK_OK && i < o->warmup; i++) r = bench__iteration(s, io, &coll_s);
  if (r == SK_OK) r = sk_barrier(s->c, NULL);
  if (r != SK_OK) return r;
  coll_s = 0;
  uint64_t t0 = sk_now_ns();
  for (int i = 0; r == SK_OK && i < o->iters; i++) r = bench__iteration(s, io, &coll_s);
  if (r != SK_OK) return r;
  double total = o->blocking == 3 ? coll_s : (double)(sk_now_ns() - t0) * 1e-9;
  return bench__over_ranks(s->c, o->average, total / ((double)o->iters * o->agg), t);
}

/* -c check runs of one placement; *wrong = sum over ranks (stops at the first failing run). */
BENCH_FN sk_result bench__check(bench_dev_state *s, sk_dtype dt, sk_redop op, int root, size_t bytes, bool in_place,
                              int64_t *wrong) {
  bench_ctx *x = s->x;
  const bench_coll *coll = x->coll;
  *wrong = 0;
  for (int k = 0; k < x->o->check; k++) {
    bench_io io;
    bench__setup_io(s, &io, dt, op, root, bytes, in_place, 100 + k);
    coll->fill(&io);
    if (coll->expected_elems) { /* the local devices build the table together */
      size_t m = coll->expected_elems(io.n, io.count);
      size_t lo = m * (size_t)s->lrank / (size_t)x->nlocal, hi = m * (size_t)(s->lrank + 1) / (size_t)x->nlocal;
      for (size_t j = lo; j < hi; j++) coll->expected(&io, j, x->expected + j * io.es);
    }
    sk_result r = sk_barrier(s->c, NULL);
    if (r != SK_OK) return r;
    if ((r = bench__call(s, &io)) != SK_OK) return r;
    int64_t mine = coll->check(&io), sum = 0;
    /* also the synchronisation before the next run rewrites the shared table */
    if ((r = sk_allreduce(s->c, &mine, &sum, 1, SK_I64, SK_SUM, NULL)) != SK_OK) return r;
    *wrong = sum;
    if (sum) break;
  }
  return SK_OK;
}

BENCH_FN void bench__time_str(char *buf, size_t cap, double us) {
  if (us >= 10000.0) snprintf(buf, cap, "%7.0f", us);
  else if (us >= 100.0) snprintf(buf, cap, "%7.1f", us);
  else snprintf(buf, cap, "%7.2f", us);
}

BENCH_FN void bench__wrong_str(char *buf, size_t cap, bool report, int64_t wrong) {
  if (report) snprintf(buf, cap, "%5lld", (long long)wrong);
  else snprintf(buf, cap, "%5s", "N/A");
}

/* One row's measurements (time: over ranks as -a says; #wrong: sum over ranks). */
typedef struct bench_row {
  size_t size;               /* the size column: max(send, recv bytes) of one rank */
  size_t count;              /* the count column */
  double t_oop, t_ip;        /* seconds per call */
  int64_t wrong_oop, wrong_ip;
  double t_pass;             /* the probe's best pass over the footprint (seconds) */
  double ceil_bps;           /* the ceiling kernel's bytes read + written per second; 0 = not measured */
  size_t footprint;          /* bytes, summed over processes */
  long long cycle;           /* -N: which sweep, from 0 */
} bench_row;

/* ---- the JSON report (-J) ------------------------------------------------------------------- */
/* Written by hand, as the table is: one object with the parameters, the environment the header
   prints, every row as it is printed, and the footer's figures. Only world rank 0 writes it. */

/* Length of the valid UTF-8 sequence at p (1-4), or 0 when it is not one. */
BENCH_FN int bench__utf8_len(const unsigned char *p) {
  int len = p[0] < 0x80 ? 1 : p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
          : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
  for (int i = 1; i < len; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  return len;
}

/* A JSON string: quote, backslash and control characters escaped; valid UTF-8 kept as it is; any
   other byte (a host name or argument in another encoding) escaped as the code point of that
   byte, so the file always parses. */
BENCH_FN void bench__json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    int len = bench__utf8_len(p);
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7F || len == 0) fprintf(f, "\\u%04x", *p);
    else fwrite(p, 1, (size_t)len, f);
    p += len > 1 ? len : 1;
  }
  fputc('"', f);
}

/* "key": value pairs; JSON has no NaN or infinity, so they are null. */
BENCH_FN void bench__json_key(FILE *f, const char *key) {
  bench__json_str(f, key);
  fputs(": ", f);
}
BENCH_FN void bench__json_num(FILE *f, const char *key, double v) {
  bench__json_key(f, key);
  if (isfinite(v)) fprintf(f, "%.9g", v);
  else fputs("null", f);
}
BENCH_FN void bench__json_int(FILE *f, const char *key, long long v) {
  bench__json_key(f, key);
  fprintf(f, "%lld", v);
}
BENCH_FN void bench__json_text(FILE *f, const char *key, const char *v) {
  bench__json_key(f, key);
  if (v) bench__json_str(f, v);
  else fputs("null", f);
}

static const char *const bench__average_names[] = {"rank0", "mean", "min", "max"};

/* The head: who ran what, where, with which flags; then the rows list opens. */
BENCH_FN void bench__json_head(const bench_ctx *x) {
  FILE *f = x->json;
  const bench_opts *o = x->o;
  char host[256] = "?", version[32];
  gethostname(host, sizeof host - 1);
  snprintf(version, sizeof version, "%d.%d.%d", SK_VERSION_MAJOR, SK_VERSION_MINOR, SK_VERSION_PATCH);
  int nthr = o->nthreads ? o->nthreads : 1;
  fputs("{\n  ", f), bench__json_text(f, "program", o->prog);
  fputs(",\n  ", f), bench__json_text(f, "collective", x->coll->name);
  fputs(",\n  ", f), bench__json_text(f, "shardkit_version", version);
  fputs(",\n  ", f), bench__json_text(f, "backend", o->backend);
  fputs(",\n  ", f), bench__json_text(f, "command", o->cmdline);
  fputs(",\n  \"environment\": {", f), bench__json_text(f, "host", host);
  fputs(", ", f), bench__json_int(f, "pid", (long long)getpid());
  fputs(", ", f), bench__json_int(f, "devices", x->n);
  fputs(", ", f), bench__json_int(f, "online_cores", x->cores);
  fputs(", ", f), bench__json_int(f, "probe_threads", x->probe_threads);
  fputs("},\n  \"parameters\": {", f), bench__json_int(f, "nthreads", nthr);
  fputs(", ", f), bench__json_int(f, "ngpus", x->n / nthr);
  fputs(", ", f), bench__json_int(f, "minbytes", (long long)o->minbytes);
  fputs(", ", f), bench__json_int(f, "maxbytes", (long long)o->maxbytes);
  fputs(", ", f), bench__json_int(f, "stepfactor", o->stepbytes ? 0 : o->factor);
  fputs(", ", f), bench__json_int(f, "stepbytes", (long long)o->stepbytes);
  fputs(", ", f), bench__json_int(f, "iters", o->iters);
  fputs(", ", f), bench__json_int(f, "warmup_iters", o->warmup);
  fputs(", ", f), bench__json_int(f, "agg_iters", o->agg);
  fputs(", ", f), bench__json_int(f, "run_cycles", o->cycles);
  fputs(", ", f), bench__json_int(f, "blocking", o->blocking);
  fputs(", ", f), bench__json_text(f, "average", bench__average_names[o->average]);
  fputs(", ", f), bench__json_int(f, "check", o->check);
  fputs(", ", f), bench__json_int(f, "root", o->root);
  fputs(", ", f), bench__json_int(f, "timeout_s", o->timeout_s);
  fputs("},\n  \"rows\": [", f);
}

/* One placement's cells: null where the table prints N/A. */
BENCH_FN void bench__json_placement(FILE *f, const char *key, bool ran, bool checked, double t, double S, double factor,
                                    int64_t wrong) {
  double algbw = ran && t > 0 ? S / 1e9 / t : NAN;
  bench__json_key(f, key);
  fputs("{", f), bench__json_num(f, "time_us", ran ? t * 1e6 : NAN);
  fputs(", ", f), bench__json_num(f, "algbw_gbps", algbw);
  fputs(", ", f), bench__json_num(f, "busbw_gbps", algbw * factor);
  fputs(", ", f), bench__json_key(f, "wrong");
  if (checked) fprintf(f, "%lld}", (long long)wrong);
  else fputs("null}", f);
}

/* One row, with every column of the table (the times in us, as printed, but unrounded), the
   probe's figures behind %bound and, for a reducing collective, the ceiling's behind %ceil. */
BENCH_FN void bench__json_row(bench_ctx *x, sk_dtype dt, sk_redop op, int root, const bench_row *row, double bound,
                              double B, double t_min, double ceil) {
  FILE *f = x->json;
  const bench_coll *coll = x->coll;
  bool ran_ip = coll->in_place != BENCH_IN_PLACE_NONE, checked = x->o->check > 0;
  double factor = coll->bus_factor(x->n), S = (double)row->size;
  fputs(x->json_rows++ ? ",\n    {" : "\n    {", f);
  bench__json_int(f, "cycle", row->cycle);
  fputs(", ", f), bench__json_int(f, "size", (long long)row->size);
  fputs(", ", f), bench__json_int(f, "count", (long long)row->count);
  fputs(", ", f), bench__json_text(f, "type", sk_dtype_long_name(dt));
  fputs(", ", f), bench__json_text(f, "redop", coll->has_op ? sk_redop_name(op) : "none");
  fputs(", ", f), bench__json_int(f, "root", coll->has_root ? root : -1);
  fputs(",\n     ", f), bench__json_placement(f, "out_of_place", true, checked, row->t_oop, S, factor, row->wrong_oop);
  fputs(",\n     ", f);
  bench__json_placement(f, "in_place", ran_ip, checked && coll->in_place == BENCH_IN_PLACE_NCCL, row->t_ip, S, factor,
                        row->wrong_ip);
  fputs(",\n     ", f), bench__json_num(f, "bound_pct", bound);
  fputs(", \"probe\": {", f), bench__json_int(f, "footprint_bytes", (long long)row->footprint);
  fputs(", ", f), bench__json_num(f, "bandwidth_gbps", B / 1e9);
  fputs(", ", f), bench__json_num(f, "t_min_us", t_min * 1e6);
  fputs("}", f);
  if (coll->ceil != BENCH_CEIL_NONE) { /* reducing collectives only, as the table's column */
    fputs(",\n     ", f), bench__json_num(f, "ceil_pct", ceil);
    fputs(", \"ceiling\": {", f);
    bench__json_text(f, "shape", coll->ceil == BENCH_CEIL_INTO_ALL ? "k-into-k" : "k-into-1");
    fputs(", ", f), bench__json_num(f, "bandwidth_gbps", row->ceil_bps > 0 ? row->ceil_bps / 1e9 : NAN);
    fputs("}", f);
  }
  fputs("}", f);
}

/* The footer's figures and how the run ended (error: NULL, or why it failed); closes the object.
   Returns false when the file could not be written. */
BENCH_FN bool bench__json_foot(bench_ctx *x, const char *error) {
  FILE *f = x->json;
  fputs(x->json_rows ? "\n  ],\n  " : "],\n  ", f);
  bench__json_int(f, "out_of_bounds", x->wrong_total);
  fprintf(f, ",\n  \"ok\": %s,\n  ", x->wrong_total || error ? "false" : "true");
  bench__json_num(f, "avg_busbw_gbps", x->bw_count ? x->bw_sum / x->bw_count : 0.0);
  fputs(",\n  ", f), bench__json_text(f, "error", error);
  fputs("\n}\n", f);
  bool ok = !ferror(f);
  return fclose(f) == 0 && ok;
}


/* ---- the ceiling (%ceil) -------------------------------------------------------------------- */

/* One pass of this thread's share of the ceiling kernel: floats [lo, hi) of each of the nblk
   blocks of q floats. Inputs: every device's send buffer from j*q on; outputs as the shape says.
   in and out have room for N pointers. */
BENCH_FN void bench__ceil_pass(const bench_ctx *x, int root, size_t q, size_t lo, size_t hi, bool stream, float **in,
                               float **out) {
  bench_ceil_shape shape = x->coll->ceil;
  int k = x->n, nblk = shape == BENCH_CEIL_INTO_BLOCKS ? k : 1, nout = shape == BENCH_CEIL_INTO_ALL ? k : 1;
  for (int j = 0; j < nblk; j++) {
    for (int r = 0; r < k; r++) in[r] = (float *)(void *)x->dev[r].send + (size_t)j * q + lo;
    for (int o = 0; o < nout; o++) {
      int d = shape == BENCH_CEIL_INTO_ALL ? o : shape == BENCH_CEIL_INTO_ROOT ? root : j;
      out[o] = (float *)(void *)x->dev[d].recv + lo;
    }
    bench_ceil_sum(in, k, out, nout, hi - lo, stream);
  }
}

/* Best seconds per pass of this thread's share, non-temporal stores (best[1]) and ordinary ones
   (best[0]): each is the faster kind somewhere (beyond the caches / within them), and the
   ceiling is the best kernel. Samples alternate the kinds, each starting at a barrier and making
   at least ~1 MiB of passes, as the probe's; 0 for a thread without a share. */
BENCH_FN sk_result bench__ceil_time(bench_dev_state *s, int root, size_t q, size_t total, double best[2]) {
  bench_ctx *x = s->x;
  int P = x->probe_threads, nout = x->coll->ceil == BENCH_CEIL_INTO_ALL ? x->n : 1;
  size_t lo = 0, hi = 0; /* 16-float (64-byte) slices, so the split keeps the outputs' alignment */
  if (s->lrank < P) {
    lo = q / (size_t)P * (size_t)s->lrank / 16 * 16;
    hi = s->lrank == P - 1 ? q : q / (size_t)P * (size_t)(s->lrank + 1) / 16 * 16;
  }
  size_t nblk = x->coll->ceil == BENCH_CEIL_INTO_BLOCKS ? (size_t)x->n : 1;
  size_t share = (hi - lo) * nblk * (size_t)(x->n + nout) * sizeof(float);
  size_t inner = share ? (1u << 20) / share + 1 : 1;
  int samples = total > (64u << 20) ? 3 : 5;
  float **ptr = (float **)malloc(sizeof *ptr * 2 * (size_t)x->n);
  if (!ptr) return sk_error_set(sk_comm_error(s->c), SK_ERR_OUT_OF_MEMORY, "ceiling: %d stream pointers", 2 * x->n);
  sk_result r = SK_OK;
  best[0] = best[1] = 1e30;
  for (int k = 0; k < 2 * samples && r == SK_OK; k++) {
    bool stream = k & 1;
    if ((r = sk_barrier(s->c, NULL)) != SK_OK || !share) continue;
    uint64_t t0 = sk_now_ns();
    for (size_t it = 0; it < inner; it++) bench__ceil_pass(x, root, q, lo, hi, stream, ptr, ptr + x->n);
    double t = (double)(sk_now_ns() - t0) * 1e-9 / (double)inner;
    if (t < best[stream]) best[stream] = t;
  }
  free(ptr);
  if (!share) best[0] = best[1] = 0;
  return r;
}

/* Runs on every device, before the out-of-place fill: the ceiling kernel of the collective's
   shape over this run's own device buffers at this row's size, with the probe's threads, into
   row->ceil_bps (bytes read + written per second). Needs every device's buffers in this
   process, so under MPI with several processes it leaves ceil_bps 0 (N/A); so does a row with
   less than one float per block. */
BENCH_FN sk_result bench__ceiling(bench_dev_state *s, const bench_io *io, bench_row *row) {
  bench_ctx *x = s->x;
  bench_ceil_shape shape = x->coll->ceil;
  if (shape == BENCH_CEIL_NONE || x->nlocal != x->n) return SK_OK;
  size_t q = (shape == BENCH_CEIL_INTO_BLOCKS ? io->cnt.recv : io->cnt.send) * io->es / sizeof(float);
  if (q == 0) return SK_OK; /* the same on every device: none waits in a barrier alone */
  size_t nblk = shape == BENCH_CEIL_INTO_BLOCKS ? (size_t)x->n : 1, nout = shape == BENCH_CEIL_INTO_ALL ? (size_t)x->n : 1;
  /* normal floats in: the buffers may hold any bit pattern, and subnormals or NaNs could slow
     the adds; the fill that follows overwrites them */
  float *mine = (float *)(void *)s->sendbuf;
  for (size_t i = 0; i < q * nblk; i++) mine[i] = 1.0f;
  x->dev[s->lrank].send = s->sendbuf, x->dev[s->lrank].recv = s->recvbuf;
  sk_result r = sk_barrier(s->c, NULL); /* every device's inputs and pointers are in place */
  size_t total = q * nblk * ((size_t)x->n + nout) * sizeof(float);
  double best[2], t[2];
  if (r == SK_OK) r = bench__ceil_time(s, io->root, q, total, best);
  if (r == SK_OK) r = sk_allreduce(s->c, best, t, 2, SK_F64, SK_MAX, NULL); /* the slowest thread's */
  double tmin = t[0] < t[1] ? t[0] : t[1];
  if (r == SK_OK && tmin > 0) row->ceil_bps = (double)total / tmin;
  return r;
}

/* Out of place: the ceiling, fill, register the footprint, probe, time, check. */
BENCH_FN sk_result bench__run_out_of_place(bench_dev_state *s, sk_dtype dt, sk_redop op, int root, size_t bytes,
                                           bench_row *row) {
  bench_ctx *x = s->x;
  bench_io io;
  sk_result r;
  bench__setup_io(s, &io, dt, op, root, bytes, false, 1);
  size_t sbytes = io.cnt.send * io.es, rbytes = io.cnt.recv * io.es;
  row->size = sbytes > rbytes ? sbytes : rbytes;
  row->count = io.count;
  if ((r = bench__ceiling(s, &io, row)) != SK_OK) return r;
  x->coll->fill(&io);
  unsigned t = x->coll->touches(s->rank, x->n, root);
  bench_dev *d = &x->dev[s->lrank];
  d->reg[0].p = s->sendbuf, d->reg[0].bytes = (t & 1) ? sbytes : 0;
  d->reg[1].p = s->recvbuf, d->reg[1].bytes = (t & 2) ? rbytes : 0;
  if ((r = bench__probe(s->c, x, s->lrank, &row->t_pass, &row->footprint)) != SK_OK) return r;
  if ((r = bench__time(s, &io, &row->t_oop)) != SK_OK) return r;
  if (x->o->check && (r = bench__check(s, dt, op, root, bytes, false, &row->wrong_oop)) != SK_OK) return r;
  return SK_OK;
}

/* In place: fill, time, check. SendRecv (RETIMED) times the out-of-place form again and does not
   check it, as nccl-tests reports no in-place check; AllToAllV (NONE) runs nothing. */
BENCH_FN sk_result bench__run_in_place(bench_dev_state *s, sk_dtype dt, sk_redop op, int root, size_t bytes,
                                       bench_row *row) {
  const bench_coll *coll = s->x->coll;
  if (coll->in_place == BENCH_IN_PLACE_NONE) return SK_OK;
  bench_io io;
  sk_result r;
  bench__setup_io(s, &io, dt, op, root, bytes, true, 2);
  coll->fill(&io);
  if ((r = bench__time(s, &io, &row->t_ip)) != SK_OK) return r;
  if (s->x->o->check && coll->in_place == BENCH_IN_PLACE_NCCL &&
      (r = bench__check(s, dt, op, root, bytes, true, &row->wrong_ip)) != SK_OK)
    return r;
  return SK_OK;
}

/* The time, algbw and busbw cells of one placement, right-aligned; "N/A" when it did not run. */
BENCH_FN void bench__bw_cells(char time_cell[32], char alg_cell[32], char bus_cell[32], bool ran, double t, double S,
                              double factor) {
  if (!ran) {
    snprintf(time_cell, 32, "%7s", "N/A");
    snprintf(alg_cell, 32, "%6s", "N/A");
    snprintf(bus_cell, 32, "%6s", "N/A");
    return;
  }
  double algbw = t > 0 ? S / 1e9 / t : 0;
  bench__time_str(time_cell, 32, t * 1e6);
  snprintf(alg_cell, 32, "%6.2f", algbw);
  snprintf(bus_cell, 32, "%6.2f", algbw * factor);
}

/* Rank 0: prints the row and adds it to the footer's totals and the probe log. */
BENCH_FN void bench__print_row(bench_ctx *x, sk_dtype dt, sk_redop op, int root, const bench_row *row) {
  const bench_coll *coll = x->coll;
  bool ran_ip = coll->in_place != BENCH_IN_PLACE_NONE, checked_ip = coll->in_place == BENCH_IN_PLACE_NCCL;
  double factor = coll->bus_factor(x->n), S = (double)row->size;
  char t1[32], alg1[32], bus1[32], w1[32], t2[32], alg2[32], bus2[32], w2[32];
  bench__bw_cells(t1, alg1, bus1, true, row->t_oop, S, factor);
  bench__bw_cells(t2, alg2, bus2, ran_ip, row->t_ip, S, factor);
  bench__wrong_str(w1, sizeof w1, x->o->check > 0, row->wrong_oop);
  bench__wrong_str(w2, sizeof w2, x->o->check > 0 && checked_ip, row->wrong_ip);
  /* the probe moved 2F bytes (read + write) per pass: B = 2F / t_pass */
  double B = row->t_pass > 0 ? 2.0 * (double)row->footprint / row->t_pass : 0;
  double t_min = B > 0 ? coll->min_bytes(S, x->n) / B : 0;
  double bound = row->t_oop > 0 ? 100.0 * t_min / row->t_oop : 0;
  /* %ceil: the collective's min_bytes per second over the ceiling kernel's bytes per second */
  double ceil = row->ceil_bps > 0 && row->t_oop > 0 ? 100.0 * coll->min_bytes(S, x->n) / row->t_oop / row->ceil_bps : NAN;
  char ceil_cell[32] = "";
  if (coll->ceil != BENCH_CEIL_NONE) {
    if (isfinite(ceil)) snprintf(ceil_cell, sizeof ceil_cell, "  %6.1f", ceil);
    else snprintf(ceil_cell, sizeof ceil_cell, "  %6s", "N/A");
  }
  printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %6.1f%s\n", row->size, row->count,
         sk_dtype_long_name(dt), coll->has_op ? sk_redop_name(op) : "none", coll->has_root ? root : -1, t1, alg1, bus1,
         w1, t2, alg2, bus2, w2, bound, ceil_cell);
  fflush(stdout);
  if (x->json) bench__json_row(x, dt, op, root, row, bound, B, t_min, ceil);
  /* the footer's average covers the placements that ran */
  double alg_oop = row->t_oop > 0 ? S / 1e9 / row->t_oop : 0, alg_ip = row->t_ip > 0 ? S / 1e9 / row->t_ip : 0;
  x->bw_sum += alg_oop * factor + (ran_ip ? alg_ip * factor : 0);
  x->bw_count += ran_ip ? 2 : 1;
  x->wrong_total += row->wrong_oop + row->wrong_ip;
  if (x->probe_rows < 64) {
    int len = snprintf(x->probe_log[x->probe_rows], sizeof x->probe_log[0], "#  %12zu  %8s  %12zu  %9.2f  %11.2f",
                       row->size, sk_dtype_long_name(dt), row->footprint, B / 1e9, t_min * 1e6);
    if (coll->ceil != BENCH_CEIL_NONE && len > 0 && (size_t)len < sizeof x->probe_log[0])
      snprintf(x->probe_log[x->probe_rows] + len, sizeof x->probe_log[0] - (size_t)len, "  %11.2f", row->ceil_bps / 1e9);
    x->probe_rows++;
  }
}

BENCH_FN sk_result bench__one_size(bench_dev_state *s, sk_dtype dt, sk_redop op, int root, size_t bytes,
                                   long long cycle) {
  bench_row row;
  memset(&row, 0, sizeof row);
  row.cycle = cycle;
  sk_result r = bench__run_out_of_place(s, dt, op, root, bytes, &row);
  if (r == SK_OK) r = bench__run_in_place(s, dt, op, root, bytes, &row);
  if (r == SK_OK && s->rank == 0) bench__print_row(s->x, dt, op, root, &row);
  return r;
}

/* Every device allocates and first-touches its own buffers. */
BENCH_FN sk_result bench__alloc_device(bench_dev_state *s) {
  bench_ctx *x = s->x;
  s->sendbuf = bench__alloc(x->maxbuf);
  s->recvbuf = bench__alloc(x->maxbuf);
  if (!s->sendbuf || !s->recvbuf) {
    fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", x->o->prog, s->rank, x->maxbuf);
    return SK_ERR_OUT_OF_MEMORY;
  }
  if (x->coll->peer_counts && !(s->peer_layout = (size_t *)calloc(4 * (size_t)x->n, sizeof(size_t)))) {
    fprintf(stderr, "%s: rank %d: cannot allocate the per-peer counts\n", x->o->prog, s->rank);
    return SK_ERR_OUT_OF_MEMORY;
  }
  if (!(s->reqs = (sk_request **)calloc(BENCH_REQS_PER_CALL * (size_t)x->o->agg, sizeof *s->reqs))) {
    fprintf(stderr, "%s: rank %d: cannot allocate the request slots\n", x->o->prog, s->rank);
    return SK_ERR_OUT_OF_MEMORY;
  }
  return SK_OK;
}

/* One sweep of the sizes (-b, -e, -f or -i) for one dtype, op and root. */
BENCH_FN sk_result bench__sweep(bench_dev_state *s, sk_dtype dt, sk_redop op, int root, long long cycle) {
  const bench_opts *o = s->x->o;
  sk_result r = SK_OK;
  size_t b = o->minbytes;
  do r = bench__one_size(s, dt, op, root, b, cycle);
  while (r == SK_OK && bench__next_size(o, b, &b));
  return r;
}

BENCH_FN sk_result bench__device(sk_comm *c, void *arg) {
  bench_ctx *x = (bench_ctx *)arg;
  bench_dev_state s;
  memset(&s, 0, sizeof s);
  s.c = c, s.x = x, s.rank = sk_comm_rank(c), s.lrank = s.rank - x->local0;
  sk_result r = bench__alloc_device(&s);
  const bench_opts *o = x->o;
  const bench_coll *coll = x->coll;
  bool ops = coll->has_op || coll->loops_ops;
  int root_lo = coll->has_root ? (o->root < 0 ? 0 : o->root) : -1;
  int root_hi = coll->has_root ? (o->root < 0 ? x->n - 1 : o->root) : -1;
  /* -N repeats each sweep, as nccl-tests repeats it per type, op and root; 0 = until interrupted */
  for (int ti = 0; r == SK_OK && ti < o->ndtypes; ti++)
    for (int oi = 0; r == SK_OK && oi < (ops ? o->nops : 1); oi++)
      for (int root = root_lo; r == SK_OK && root <= root_hi; root++)
        for (long long cy = 0; r == SK_OK && (o->cycles == 0 || cy < o->cycles); cy++)
          r = bench__sweep(&s, o->dtypes[ti], ops ? o->ops[oi] : SK_SUM, root < 0 ? 0 : root, cy);
  free(s.sendbuf);
  free(s.recvbuf);
  free(s.peer_layout);
  free(s.reqs);
  return r;
}

/* ---- worlds ---------------------------------------------------------------------------------- */

#if defined(SK_BENCH_MPI)
static sk_result bench__who(sk_comm *c, void *arg) {
  *(int *)arg = sk_comm_rank(c);
  return SK_OK;
}
/* This process's rank: a first run of the world that only asks. */
BENCH_FN int bench__mpi_rank(sk_world *w) {
  int rank = -1;
  return sk_world_run(w, bench__who, &rank, NULL) == SK_OK ? rank : -1;
}
#endif

/* -T: every wait of the world is bounded by it (0: the world's default). */
BENCH_FN uint32_t bench__timeout_ms(const bench_opts *o) { return (uint32_t)o->timeout_s * 1000u; }

/* -B threads: devices as threads in this process: -g of them, or -t x -g (-g then defaults to 1,
   so nccl-tests' `-t 4` is 4 devices as there). Returns 0 or an exit status. */
BENCH_FN int bench_world_threads(bench_opts *o, sk_world **w, int *nlocal, int *local0) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = o->nthreads ? o->nthreads * (o->ngpus ? o->ngpus : 1) : o->ngpus ? o->ngpus : BENCH_DEFAULT_GPUS;
  d.timeout_ms = bench__timeout_ms(o);
  d.backend = sk_threads_backend();
  sk_error err;
  if (sk_world_create(&d, w, &err) != SK_OK) {
    fprintf(stderr, "%s: cannot create the threads world: %s\n", o->prog, err.msg);
    return 1;
  }
  o->ngpus = d.ndevices;
  *nlocal = d.ndevices, *local0 = 0;
  return 0;
}

/* -B mpi: one device per MPI process, under an MPI launcher (prog_backend made sure there is
   one). -g, if given, must equal the world size, and -t be 1; if not, it says so and exits 2.
   Only world rank 0 prints (bench_main prints when *local0 == 0). */
BENCH_FN int bench_world_mpi(bench_opts *o, sk_world **w, int *nlocal, int *local0) {
  if (o->nthreads > 1) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", o->nthreads);
    return bench__bad(o->prog, "-t %s: the MPI backend runs one device per process (start more processes: "
                      PROG_MPIRUN " -np N)", buf);
  }
#if defined(SK_BENCH_MPI)
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.timeout_ms = bench__timeout_ms(o);
  d.backend = sk_mpi_backend();
  sk_error err;
  if (sk_world_create(&d, w, &err) != SK_OK) {
    fprintf(stderr, "%s: cannot create the MPI world: %s\n", o->prog, err.msg);
    return 1;
  }
  int size = sk_world_size(*w);
  if (o->ngpus && o->ngpus != size) {
    fprintf(stderr, "%s: -g %d but the MPI world has %d process%s (one device per process: " PROG_MPIRUN " -np %d)\n",
            o->prog, o->ngpus, size, size == 1 ? "" : "es", o->ngpus);
    sk_world_destroy(*w, NULL);
    *w = NULL;
    return 2;
  }
  o->ngpus = size;
  *nlocal = 1;
  *local0 = bench__mpi_rank(*w);
  return 0;
#else
  (void)w, (void)nlocal, (void)local0;
  fprintf(stderr, "%s: built without MPI (install Open MPI, e.g. make deps, and rebuild: make then builds the benchmarks with mpicc.openmpi)\n", o->prog);
  return 2;
#endif
}

BENCH_FN size_t bench__max_buf(const bench_coll *coll, const bench_opts *o, int n, size_t *expected_bytes) {
  size_t maxbuf = 64, exp = 0;
  for (int ti = 0; ti < o->ndtypes; ti++) {
    size_t es = sk_dtype_size(o->dtypes[ti]);
    if (es == 0) continue; /* not a dtype: bench__parse only lets valid ones through */
    for (size_t b = o->minbytes; b <= o->maxbytes;) {
      bench_counts k;
      coll->counts(b / es, n, &k);
      size_t m = (k.send > k.recv ? k.send : k.recv) * es;
      if (m > maxbuf) maxbuf = m;
      if (coll->expected_elems) {
        size_t e = coll->expected_elems(n, k.param) * es;
        if (e > exp) exp = e;
      }
      if (!bench__next_size(o, b, &b)) break;
    }
  }
  *expected_bytes = exp;
  return maxbuf;
}

/* The table's head, as nccl-tests prints it (world rank 0). */
BENCH_FN void bench__print_header(const bench_ctx *x) {
  const bench_opts *o = x->o;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  printf("# shardkit %d.%d.%d  %s (%s)  backend: %s\n", SK_VERSION_MAJOR, SK_VERSION_MINOR, SK_VERSION_PATCH, o->prog,
         x->coll->name, o->backend);
  printf("# Command: %s\n", o->cmdline);
  int nthr = o->nthreads ? o->nthreads : 1;
  char step[48];
  if (o->stepbytes) snprintf(step, sizeof step, "%zu(bytes)", o->stepbytes);
  else snprintf(step, sizeof step, "%ld(factor)", o->factor);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: %d "
         "validation: %d graph: 0\n",
         nthr, x->n / nthr, o->minbytes, o->maxbytes, step, o->warmup, o->iters, o->agg, o->check);
  printf("# blocking: %d  average: %d (%s over ranks)  run cycles: %d  timeout: %ld s%s\n", o->blocking, o->average,
         bench__average_names[o->average], o->cycles, o->timeout_s ? o->timeout_s : (long)(SK_DEFAULT_TIMEOUT_MS / 1000),
         o->timeout_s ? "" : " (default)");
  printf("#\n# Using devices\n");
  for (int i = 0; i < x->n; i++)
    printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [thread %d] shardkit %s backend\n", i, (int)getpid(), host,
           i, i, o->backend);
  printf("#  online cores %d; %%bound probe threads %d\n", x->cores, x->probe_threads);
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
         "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  printf("  %7s  %6s  %6s %6s", "time", "algbw", "busbw", "#wrong");
  bool ceil = x->coll->ceil != BENCH_CEIL_NONE; /* reducing collectives: %ceil after %bound */
  printf("  %7s  %6s  %6s %6s  %6s%s\n", "time", "algbw", "busbw", "#wrong", "%bound", ceil ? "   %ceil" : "");
  printf("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  printf("  %7s  %6s  %6s  %5s", "(us)", "(GB/s)", "(GB/s)", "");
  printf("  %7s  %6s  %6s  %5s  %6s%s\n", "(us)", "(GB/s)", "(GB/s)", "", "(%)", ceil ? "     (%)" : "");
  fflush(stdout);
}

/* The probe log and nccl-tests' footer (world rank 0). */
BENCH_FN void bench__print_footer(const bench_ctx *x) {
  if (x->probe_rows) {
    printf("#\n# %%bound probe (in-place read+write over the out-of-place footprint, %d thread%s, best of 3-5):\n",
           x->probe_threads, x->probe_threads == 1 ? "" : "s");
    printf("#  %12s  %8s  %12s  %9s  %11s%s\n", "size (B)", "type", "footprint(B)", "B (GB/s)", "t_min (us)",
           x->coll->ceil != BENCH_CEIL_NONE ? "  ceil (GB/s)" : "");
    for (int i = 0; i < x->probe_rows; i++) printf("%s\n", x->probe_log[i]);
    printf("#\n");
  }
  printf("# Out of bounds values : %lld %s\n", (long long)x->wrong_total, x->wrong_total ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", x->bw_count ? x->bw_sum / x->bw_count : 0.0);
  printf("#\n");
}

/* The world -B asks for, checked against -g and -r. Returns 0 or an exit status (no world then). */
BENCH_FN int bench__make_world(bench_opts *o, const bench_coll *coll, sk_world **w, int *nlocal, int *local0) {
  int st = strcmp(o->backend, "mpi") == 0 ? bench_world_mpi(o, w, nlocal, local0) : bench_world_threads(o, w, nlocal, local0);
  if (st) return st;
  if (o->ngpus < 1) { /* both world makers set it; the counts divide by it */
    fprintf(stderr, "%s: the world has no device\n", o->prog);
    st = 1;
  } else if (coll->has_root && o->root >= o->ngpus) {
    char buf[64];
    snprintf(buf, sizeof buf, "%d", o->root);
    st = bench__bad(o->prog, "-r: root %s is not a rank of the world", buf);
  }
  if (st) sk_world_destroy(*w, NULL), *w = NULL;
  return st;
}

#if defined(SK_BENCH_MPI)
static sk_result bench__agree_fn(sk_comm *c, void *arg) {
  int mine = *(int *)arg, all = 0;
  sk_result r = sk_allreduce(c, &mine, &all, 1, SK_I32, SK_MIN, NULL);
  *(int *)arg = all;
  return r;
}
#endif

/* -J: world rank 0 opens the report and writes its head. Under MPI every process learns whether
   that worked (one device per process, so the flag has one writer), so none starts a sweep rank 0
   will not join. Returns 0, or 2 after the message. */
BENCH_FN int bench__open_json(bench_ctx *x, sk_world *w) {
  int ok = 1;
  if (x->o->json && x->local0 == 0) {
    if ((x->json = fopen(x->o->json, "w"))) bench__json_head(x);
    else ok = 0, fprintf(stderr, "%s: -J: cannot write '%s': %s\n", x->o->prog, x->o->json, strerror(errno));
  }
#if defined(SK_BENCH_MPI)
  if (x->o->json && strcmp(x->o->backend, "mpi") == 0 && sk_world_run(w, bench__agree_fn, &ok, NULL) != SK_OK) ok = 0;
#else
  (void)w;
#endif
  return ok ? 0 : 2;
}

/* Everything the devices share; returns 0 or an exit status (then nothing to free). */
BENCH_FN int bench__setup_ctx(bench_ctx *x, bench_opts *o, const bench_coll *coll, int nlocal, int local0) {
  memset(x, 0, sizeof *x);
  x->o = o, x->coll = coll, x->n = o->ngpus, x->local0 = local0, x->nlocal = nlocal;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  x->cores = cores > 0 ? (int)cores : 1;
  x->probe_threads = nlocal < x->cores ? nlocal : x->cores;
  if (x->probe_threads > 64) x->probe_threads = 64;
  x->maxbuf = bench__max_buf(coll, o, x->n, &x->expected_cap);
  x->dev = (bench_dev *)calloc((size_t)nlocal, sizeof *x->dev);
  x->expected = x->expected_cap ? bench__alloc(x->expected_cap) : NULL;
  if (!x->dev || (x->expected_cap && !x->expected)) {
    fprintf(stderr, "%s: out of memory\n", o->prog);
    free(x->dev), free(x->expected);
    return 1;
  }
  return 0;
}

/* After the run: why it failed (if it did), the footer and the JSON foot. Returns the exit status. */
BENCH_FN int bench__finish(bench_ctx *x, sk_world *w, sk_result r) {
  const bench_opts *o = x->o;
  char why[512] = "";
  if (r == SK_ERR_UNSUPPORTED) {
    snprintf(why, sizeof why, "the %s backend does not support %s: %s", o->backend, x->coll->name, sk_world_error_message(w));
    if (x->local0 != 0) why[0] = 0; /* every process would say it: rank 0 does */
  } else if (r == SK_ERR_TIMEOUT) {
    snprintf(why, sizeof why, "timed out: a wait passed %ld s (-T%s): %s",
             o->timeout_s ? o->timeout_s : (long)(SK_DEFAULT_TIMEOUT_MS / 1000), o->timeout_s ? "" : "'s default",
             sk_world_error_message(w));
  } else if (r != SK_OK) {
    snprintf(why, sizeof why, "the run failed: %s: %s", sk_result_name(r), sk_world_error_message(w));
  }
  if (why[0]) fprintf(stderr, "%s: %s\n", o->prog, why);
  int status = r != SK_OK || x->wrong_total ? 1 : 0;
  if (x->local0 == 0) bench__print_footer(x);
  if (x->json && !bench__json_foot(x, r != SK_OK ? (why[0] ? why : sk_result_name(r)) : NULL)) {
    fprintf(stderr, "%s: -J: writing '%s' failed\n", o->prog, o->json);
    status = 1;
  }
  return status;
}

BENCH_FN int bench_main(int argc, char **argv, const bench_coll *coll) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  bench_opts o;
  int pr = bench__parse(argc, argv, &o, coll->usage_notes);
  if (pr) return pr == 1 ? 0 : 2;
  if (!(o.backend = prog_backend(o.path, o.backend_asked, "-B"))) return 2;
  sk_world *w = NULL;
  int nlocal = 0, local0 = 0;
  int st = bench__make_world(&o, coll, &w, &nlocal, &local0);
  if (st) return st;
  bench_ctx x;
  if ((st = bench__setup_ctx(&x, &o, coll, nlocal, local0)) != 0) {
    sk_world_destroy(w, NULL);
    return st;
  }
  if ((st = bench__open_json(&x, w)) == 0) {
    if (local0 == 0) bench__print_header(&x);
    st = bench__finish(&x, w, sk_world_run(w, bench__device, &x, NULL));
  } else if (x.json) {
    fclose(x.json);
  }
  sk_world_destroy(w, NULL);
  free(x.dev);
  free(x.expected);
  return st;
}

#endif /* BENCH_COMMON_H */
