/* progs.h -- what the example and benchmark programs share: -h/--help, and what they do when an
   MPI launcher started them. (Not part of the library: include/ holds that.)

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

#endif /* SK_EXAMPLES_PROGS_H */
