/* ckpt_perf -- write and read throughput of a sharded checkpoint (sk_ckpt.h): G device threads
   each hold SIZE / G bytes of f64 parameters in 8 slices, save them as one checkpoint (every
   rank file written and fsync'd, the manifest, the commit) and load them back into the same
   boxes (every block's crc checked), through io_uring or pread/pwrite.

     build/ckpt_perf --dir /var/tmp/ck --size 1G -g 8 --io io_uring -n 3

   Before each load the rank files are dropped from the page cache (posix_fadvise DONTNEED on
   the fsync'd files), so reads come from the disk as a fresh process's would; --warm keeps
   them. Prints one line per run: the io path that ran, the bytes, the save's and the load's
   seconds and GB/s (10^9 bytes per second; the time of the collective call, slowest device).
   Compare with dd writing and reading the same bytes (bench/RESULTS.md).

     build/ckpt_perf --tiling 100000

   times the check that every tensor is tiled exactly once (which each save runs on rank 0 while
   the others wait) on a manifest of N slices built in memory, as 128 devices' save gathers it:
   sk_ckpt_verify of a manifest without files, so no byte is read or written. Prints the fastest,
   the median and the slowest of the runs (default 7), wall time, and the fastest and the median
   CPU time (what the check costs on a shared machine). */
#define _POSIX_C_SOURCE 200809L
#define SK_IMPL
#include "shardkit.h"
#include "sk_ckpt.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../examples/progs.h"

typedef struct opts {
  const char *dir;
  uint64_t size;
  int devices, runs;
  long tiling; /* --tiling N: slices (-1: not asked) */
  bool runs_given;
  sk_ckpt_io io;
  bool warm;
} opts;

typedef struct job {
  const opts *o;
  int run;
  double save_s, load_s;
  sk_ckpt_io used;
} job;

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "Usage: %s --dir DIR [--size BYTES[K|M|G]] [-g DEVICES] [--io auto|plain|io_uring] [-n RUNS] [--warm]\n"
          "       %s --tiling N [-n RUNS]\n"
          "Saves and loads a sharded checkpoint of SIZE bytes (default 1G) held by DEVICES threads (default 8)\n"
          "under DIR (each run a new step; the root is left for the caller to remove) and prints each run's\n"
          "save and load throughput (RUNS default 3). --warm: leave the files in the page cache before loading.\n"
          "--tiling N: times the check that every tensor is tiled exactly once, which each save runs, on a\n"
          "manifest of N slices built in memory (tensors [4096, 2048] in 16 x 8 grids of slices, in three\n"
          "kinds, as 128 devices save them; no disk I/O) and prints the fastest, the median and the slowest\n"
          "of RUNS (default 7) in wall time, and the fastest and the median CPU time.\n",
          prog_name(argv0), prog_name(argv0));
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The 8 row slices of device `rank`'s tensor "w<rank>" [rows, 1024] f64, data in one buffer. */
static int slices_of(int rank, int64_t rows, double *data, sk_ckpt_slice *s, char names[8][32]) {
  for (int k = 0; k < 8; k++) {
    memset(&s[k], 0, sizeof s[k]);
    snprintf(names[k], sizeof names[k], "w%d.%d", rank, k);
    s[k].tensor = names[k], s[k].kind = SK_CKPT_PARAM, s[k].dtype = SK_F64, s[k].ndims = s[k].box.ndims = 2;
    s[k].shape[0] = rows, s[k].shape[1] = 1024, s[k].box.stop[0] = rows, s[k].box.stop[1] = 1024;
    s[k].data = data + (size_t)k * (size_t)rows * 1024, s[k].write = true;
  }
  return 8;
}

/* Drops rank's file of checkpoint `name` from the page cache (clean pages after the fsync). */
static void drop_cache(const char *dir, const char *name, int rank) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s/rank-%d.bin", dir, name, rank);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

static sk_result device(sk_comm *c, void *arg) {
  job *J = (job *)arg;
  int rank = sk_comm_rank(c);
  int64_t rows = (int64_t)(J->o->size / (uint64_t)J->o->devices / 8 / 8192); /* 8 slices of rows x 1024 f64 */
  double *data = (double *)malloc((size_t)rows * 8 * 8192 + 1);
  sk_ckpt_slice s[8];
  char names[8][32];
  if (!data) return SK_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < rows * 8 * 1024; i++) data[i] = (double)(i ^ rank);
  int n = slices_of(rank, rows, data, s, names);
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = J->run + 1, d.io = J->o->io;
  sk_ckpt_report rep;
  sk_error *e = sk_comm_error(c); /* a failure is described where sk_world_run looks */
  sk_result r = sk_barrier(c, e);
  double t0 = now_s();
  if (!r) r = sk_ckpt_save(c, J->o->dir, &d, n, s, &rep, e);
  if (!r) r = sk_barrier(c, e);
  double t1 = now_s();
  if (!r && !J->o->warm) drop_cache(J->o->dir, rep.name, rank);
  sk_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  if (!r) r = sk_ckpt_open(J->o->dir, &m, e);
  if (!r) r = sk_barrier(c, e);
  double t2 = now_s();
  for (int k = 0; !r && k < n; k++) s[k].write = false;
  if (!r) r = sk_ckpt_load(&m, rank, J->o->io, n, s, &rep, e);
  if (!r) r = sk_barrier(c, e);
  double t3 = now_s();
  for (int64_t i = 0; !r && i < rows * 8 * 1024; i++)
    if (data[i] != (double)(i ^ rank)) r = sk_error_set(e, SK_ERR_INTERNAL, "device %d: element %lld differs", rank, (long long)i);
  if (!r && rank == 0) J->save_s = t1 - t0, J->load_s = t3 - t2, J->used = rep.used;
  sk_ckpt_manifest_free(&m);
  free(data);
  return r;
}

/* --tiling: n slices as a save on 128 devices gathers them (rank 0's slices of every tensor
   and kind first): tensors "layer<t>.w" [4096, 2048] f32 in param, state0 and state1, each cut
   into a 16 x 8 grid with rank r holding cell r; when 128 does not divide n, the last tensor and
   kind is cut into rows, one per remaining slice. */
static int tiling_manifest(long n, sk_ckpt_manifest *m) {
  memset(m, 0, sizeof *m);
  m->block = SK_CKPT_BLOCK;
  if (!(m->entries = (sk_ckpt_entry *)calloc((size_t)n, sizeof *m->entries))) return -1;
  long groups = (n + 127) / 128, last = n - (groups - 1) * 128; /* the last group's slices */
  for (int r = 0; r < 128; r++)
    for (long g = 0; g < groups; g++) {
      bool rows = g == groups - 1 && last < 128;
      if (g == groups - 1 && r >= last) continue;
      sk_ckpt_entry *e = &m->entries[m->nentries++];
      snprintf(e->tensor, sizeof e->tensor, "layer%ld.w", g / SK_CKPT_KINDS);
      e->kind = (sk_ckpt_kind)(g % SK_CKPT_KINDS), e->dtype = SK_F32, e->ndims = e->box.ndims = 2, e->rank = r;
      e->shape[0] = rows ? last : 4096, e->shape[1] = 2048;
      e->box.start[0] = rows ? r : r / 8 * 256, e->box.stop[0] = e->box.start[0] + (rows ? 1 : 256);
      e->box.start[1] = rows ? 0 : r % 8 * 256, e->box.stop[1] = e->box.start[1] + (rows ? 2048 : 256);
      e->length = (uint64_t)(e->box.stop[0] - e->box.start[0]) * (uint64_t)(e->box.stop[1] - e->box.start[1]) * 4;
    }
  return 0;
}

/* This process's CPU time (the --tiling check runs on one thread). */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* --tiling: sk_ckpt_verify of the manifest above, which has no files: the tiling check alone. */
static int run_tiling(const opts *o, const char *argv0) {
  sk_ckpt_manifest m;
  double *t = (double *)calloc(2 * (size_t)o->runs, sizeof *t), *cpu = t + o->runs; /* wall, CPU */
  if (!t || tiling_manifest(o->tiling, &m)) return free(t), fprintf(stderr, "%s: out of memory\n", prog_name(argv0)), 1;
  long groups = (o->tiling + 127) / 128;
  printf("# tiling check (sk_ckpt_verify, a manifest without files): %ld slices, %ld tensors x kinds, %d runs\n",
         o->tiling, groups, o->runs);
  sk_error e = {SK_OK, ""};
  sk_result r = SK_OK;
  for (int k = 0; !r && k < o->runs; k++) {
    double t0 = now_s(), c0 = cpu_s();
    r = sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, &e);
    t[k] = now_s() - t0, cpu[k] = cpu_s() - c0;
  }
  if (r) fprintf(stderr, "%s: %s\n", prog_name(argv0), e.msg);
  qsort(t, (size_t)o->runs, sizeof *t, cmp_double);
  qsort(cpu, (size_t)o->runs, sizeof *cpu, cmp_double);
  int mid = o->runs / 2;
  if (!r) printf("%-9s %10s %10s %10s %10s %10s\n%-9ld %10.6f %10.6f %10.6f %10.6f %10.6f\n", "slices", "min_s", "median_s",
                 "max_s", "cpu_min_s", "cpu_med_s", o->tiling, t[0], t[mid], t[o->runs - 1], cpu[0], cpu[mid]);
  free(t);
  sk_ckpt_manifest_free(&m);
  return r ? 1 : 0;
}

static int parse(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->size = (uint64_t)1 << 30, o->devices = 8, o->tiling = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (prog_is_help(a)) return usage(stdout, argv[0]), 1;
    if (!strcmp(a, "--warm")) { o->warm = true; continue; }
    if (!v) break;
    if (!strcmp(a, "--dir")) o->dir = v;
    else if (!strcmp(a, "-g")) o->devices = (int)strtol(v, &end, 10);
    else if (!strcmp(a, "-n")) o->runs = (int)strtol(v, &end, 10), o->runs_given = true;
    else if (!strcmp(a, "--tiling")) o->tiling = strtol(v, &end, 10);
    else if (!strcmp(a, "--size")) {
      o->size = strtoull(v, &end, 10);
      if (*end == 'K' || *end == 'M' || *end == 'G') o->size <<= *end == 'K' ? 10 : *end == 'M' ? 20 : 30, end++;
    } else if (!strcmp(a, "--io")) {
      if (!strcmp(v, "auto")) o->io = SK_CKPT_IO_AUTO;
      else if (!strcmp(v, "plain")) o->io = SK_CKPT_IO_PLAIN;
      else if (!strcmp(v, "io_uring")) o->io = SK_CKPT_IO_URING;
      else return fprintf(stderr, "%s: --io takes auto, plain or io_uring\n", prog_name(argv[0])), 2;
    } else return fprintf(stderr, "%s: unknown option %s (try --help)\n", prog_name(argv[0]), a), 2;
    if (end && *end) return fprintf(stderr, "%s: not a number: %s\n", prog_name(argv[0]), v), 2;
    i++;
  }
  if (!o->runs_given) o->runs = o->tiling == -1 ? 3 : 7;
  if (o->tiling != -1)
    return o->tiling < 1 || o->tiling > 10000000 || o->runs < 1 || o->dir
               ? fprintf(stderr, "%s: --tiling takes 1..10000000 slices, -n >= 1 and no --dir (try --help)\n",
                         prog_name(argv[0])), 2
               : 0;
  if (!o->dir || o->devices < 1 || o->devices > 64 || o->runs < 1 || o->size < (uint64_t)o->devices * 8 * 8192)
    return fprintf(stderr, "%s: --dir DIR is required; -g 1..64, -n >= 1, --size at least 64 KiB per device (try --help)\n",
                   prog_name(argv[0])), 2;
  return 0;
}

int main(int argc, char **argv) {
  opts o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc == 1 ? 0 : rc;
  if (o.tiling != -1) return run_tiling(&o, argv[0]);
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = o.devices, wd.backend = sk_threads_backend();
  sk_world *w = NULL;
  sk_error e;
  if (sk_world_create(&wd, &w, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
  uint64_t bytes = (o.size / (uint64_t)o.devices / 8 / 8192) * 8192 * 8 * (uint64_t)o.devices;
  printf("# %d devices, %llu bytes, %s, %s reads\n", o.devices, (unsigned long long)bytes, sk_ckpt_io_name(o.io),
         o.warm ? "page-cache" : "cold");
  printf("%-4s %-9s %12s %9s %9s %9s %9s\n", "run", "io", "bytes", "save_s", "save_GB/s", "load_s", "load_GB/s");
  for (int run = 0; run < o.runs && !rc; run++) {
    job J;
    memset(&J, 0, sizeof J);
    J.o = &o, J.run = run;
    if (sk_world_run(w, device, &J, NULL)) {
      fprintf(stderr, "%s: %s\n", prog_name(argv[0]), sk_world_error_message(w));
      rc = 1;
      break;
    }
    printf("%-4d %-9s %12llu %9.3f %9.3f %9.3f %9.3f\n", run, sk_ckpt_io_name(J.used), (unsigned long long)bytes,
           J.save_s, (double)bytes / J.save_s / 1e9, J.load_s, (double)bytes / J.load_s / 1e9);
    fflush(stdout);
  }
  sk_world_destroy(w, NULL);
  return rc;
}
