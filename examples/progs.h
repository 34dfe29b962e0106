/* progs.h -- what the tools, example and benchmark programs share: -h/--help, what they do when an
   MPI launcher started them, and how they refuse a command line (prog_bad_usage and the strict
   number and path parsers, at the end). (Not part of the library: include/ holds that.)

   `mpirun -np 2 prog` starts prog twice. A program that then ran its threads backend would run
   two unrelated copies whose output interleaves, so, as nccl-tests built with MPI do, a program
   under a multi-process launch uses its MPI backend by default, refuses an explicit request for
   the threads backend, and a single-process program refuses to run at all -- each time saying
   what to type instead. The launch is recognised by the variables launchers put in every
   process's environment. shardkit itself reads no environment variable; only these programs do.

   The MPI commands the programs print are ones that work as pasted on a small machine: Open MPI
   refuses to start more processes than cores without --oversubscribe. As root it also wants
   --allow-run-as-root, which the texts name (PROG_ROOT_NOTE) rather than put in the command. */
#ifndef SK_EXAMPLES_PROGS_H
#define SK_EXAMPLES_PROGS_H

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every program answers -h and --help with a text whose first line starts "Usage:", on stdout,
   and exit status 0. */
static inline int prog_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

/* argv[0] without its directories, for messages. */
static inline const char *prog_name(const char *argv0) {
  const char *slash = strrchr(argv0, '/');
  return slash ? slash + 1 : argv0;
}

/* How the texts show an MPI launch, and the one flag it needs only as root. */
#define PROG_MPIRUN "mpirun.openmpi --oversubscribe"
#define PROG_ROOT_NOTE                                                                        \
  "--oversubscribe lets more processes than cores start; as root, Open MPI also needs\n"        \
  "--allow-run-as-root (or OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1).\n"

/* The number of processes of the MPI launch that started this one: 0 when no launcher did,
   -1 when one did but did not say how many (a PMIx launcher sets only the rank). Open MPI sets
   OMPI_COMM_WORLD_SIZE, MPICH's Hydra (and Slurm's PMI) PMI_SIZE, MVAPICH MV2_COMM_WORLD_SIZE. */
static inline int prog_launch_size(void) {
  static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
  for (size_t i = 0; i < sizeof size_vars / sizeof size_vars[0]; i++) {
    const char *v = getenv(size_vars[i]);
    if (v && *v) {
      int n = atoi(v);
      return n > 0 ? n : -1;
    }
  }
  return getenv("PMIX_RANK") || getenv("PMI_RANK") ? -1 : 0;
}

/* This process's rank in that launch (0 without one): a refusal is said once, by rank 0. */
static inline int prog_launch_rank(void) {
  static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0]; i++) {
    const char *v = getenv(rank_vars[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}

/* For a program with a threads and an MPI backend: the backend to use, "threads" or "mpi".
   `asked` is the value of the program's backend option `flag` (e.g. "-B"), NULL when not given.
   Not given: mpi under a launch of several processes (or of an unknown number), else threads.
   Returns NULL after saying why on stderr when the choice cannot work: threads under a launch of
   several processes, or mpi without a launcher (there is no other process to talk to). */
static inline const char *prog_backend(const char *argv0, const char *asked, const char *flag) {
  const char *name = prog_name(argv0);
  int n = prog_launch_size();
  if (!asked) return n > 1 || n < 0 ? "mpi" : "threads";
  if (strcmp(asked, "threads") == 0 && n > 1) {
    if (prog_launch_rank() == 0)
      fprintf(stderr,
              "%s: %s threads under an MPI launch of %d processes would run %d separate copies; leave out\n"
              "'%s threads' to use MPI (one device per process), or start it without mpirun\n",
              name, flag, n, n, flag);
    return NULL;
  }
  if (strcmp(asked, "mpi") == 0 && n == 0) {
    fprintf(stderr, "%s: %s mpi needs an MPI launcher, e.g.  " PROG_MPIRUN " -np 2 %s %s mpi\n" PROG_ROOT_NOTE, name,
            flag, argv0, flag);
    return NULL;
  }
  return asked;
}

/* For a program that runs in one process: nonzero, after saying why on stderr, when an MPI
   launch started several copies of it. */
static inline int prog_refuse_launch(const char *argv0) {
  int n = prog_launch_size();
  if (n <= 1) return 0;
  if (prog_launch_rank() == 0)
    fprintf(stderr,
            "%s: runs in one process; an MPI launch of %d processes would run %d separate copies of it:\n"
            "start it without mpirun\n",
            prog_name(argv0), n, n);
  return 1;
}

/* ---- refusing a command line before any work ---------------------------------------------------
   Every option is checked while the command line is read, before a world, a file or a step: a
   bad value is refused with one line "PROG: MESSAGE: ARG (try --help)" on stderr and exit status
   2, never found after a run. Numbers parse whole (no trailing text, no leading space, no
   overflow) and within the range the program can use. */

/* The refusal: one line, exit status 2 (returned). arg NULL: the message alone; "" shows as ''.
   Under an MPI launch every process meets the same command line: rank 0 says it. */
static inline int prog_bad_usage(const char *argv0, const char *msg, const char *arg) {
  if (prog_launch_rank() == 0)
    fprintf(stderr, "%s: %s%s%s (try --help)\n", prog_name(argv0), msg, arg ? ": " : "", !arg ? "" : *arg ? arg : "''");
  return 2;
}

/* s as a whole decimal integer in lo..hi into *out; false (and *out untouched) otherwise. */
static inline bool prog_parse_long_in(const char *s, long lo, long hi, long *out) {
  if (!s || !*s || isspace((unsigned char)*s)) return false;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* The same for an int in lo..hi. */
static inline bool prog_parse_int_in(const char *s, int lo, int hi, int *out) {
  long v = 0;
  if (!prog_parse_long_in(s, lo, hi, &v)) return false;
  *out = (int)v;
  return true;
}

/* s as a whole unsigned decimal integer in lo..hi (a seed: up to 2^64 - 1). strtoull alone takes
   "-1" for 2^64 - 1: a sign is refused here. */
static inline bool prog_parse_u64_in(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (!s || *s < '0' || *s > '9') return false;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = (uint64_t)v;
  return true;
}

/* s as a whole finite number in lo..hi (lo DBL_MIN: positive). */
static inline bool prog_parse_double_in(const char *s, double lo, double hi, double *out) {
  if (!s || !*s || isspace((unsigned char)*s)) return false;
  char *end = NULL;
  double v = strtod(s, &end); /* out of range: HUGE_VAL, which isfinite refuses, or a tiny value */
  if (*end || !isfinite(v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* What the kernel refuses in any path: longer than PATH_MAX with its NUL, or a component longer
   than NAME_MAX (ENAMETOOLONG, found only when the path is used). */
#ifdef PATH_MAX
#define PROG_PATH_MAX PATH_MAX
#else
#define PROG_PATH_MAX 4096
#endif
#ifdef NAME_MAX
#define PROG_NAME_MAX NAME_MAX
#else
#define PROG_NAME_MAX 255
#endif

/* NULL when `path` can name a file, room for `reserve` more bytes beneath it included (the names
   a program adds below a directory it is given); else what is wrong with it. Only the syntax:
   whether the path exists or can be written is the caller's to find out. */
static inline const char *prog_path_problem(const char *path, size_t reserve) {
  if (!path || !*path) return "an empty path";
  if (strlen(path) + reserve >= PROG_PATH_MAX)
    return reserve ? "a path too long for the names beneath it (PATH_MAX)" : "a path longer than PATH_MAX";
  for (const char *c = path; *c;) {
    size_t n = strcspn(c, "/");
    if (n > PROG_NAME_MAX) return "a path component longer than 255 bytes (NAME_MAX)";
    c += n + (c[n] == '/');
  }
  return NULL;
}

#endif /* SK_EXAMPLES_PROGS_H */
