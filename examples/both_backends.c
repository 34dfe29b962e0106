/* both_backends.c -- one program, two backends: a data-parallel step (average the gradients
   with AllReduce, gather every device's loss, sum within mesh groups) on N threads or on N MPI
   processes, printing the same numbers bit for bit.

     build/both_backends --backend threads --devices 4
     mpirun.openmpi --oversubscribe -np 4 build/both_backends --backend mpi

   (--oversubscribe: Open MPI starts no more processes than cores without it; as root it also
   wants --allow-run-as-root.) Under an MPI launch of several processes --backend defaults to mpi.
   The MPI world runs in deterministic mode, so float reductions use the threads backend's
   order (rank 0..N-1) and the printed checksums match exactly. Built with mpicc.openmpi by the
   Makefile (one binary serves both). */
#define SK_IMPL
#include "shardkit.h"
#include "sk_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progs.h"

#define N_PARAMS 1000

static float grad_of(int rank, int i) { return (float)((rank * 131 + i * 17) % 97) / 7.0f - 3.0f; }

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static sk_result step(sk_comm *c, void *arg) {
  (void)arg;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  float g[N_PARAMS], loss = 1.0f / (float)(rank + 3);
  for (int i = 0; i < N_PARAMS; i++) g[i] = grad_of(rank, i);
  sk_result r = sk_allreduce(c, g, g, N_PARAMS, SK_F32, SK_AVG, NULL); /* data-parallel gradient mean */
  float *losses = (float *)malloc(sizeof(float) * (size_t)n);
  if (!losses) return SK_ERR_OUT_OF_MEMORY;
  if (r == SK_OK) r = sk_allgather(c, &loss, losses, 1, SK_F32, NULL);
  /* groups along the second axis of an (n/2 x 2) mesh (or 1 x n when n is odd) */
  sk_mesh mesh;
  int dims[2] = {n % 2 ? 1 : n / 2, n % 2 ? n : 2};
  const char *names[2] = {"dp", "mp"};
  sk_comm *mp = NULL;
  float part = g[rank % N_PARAMS], part_sum = 0;
  if (r == SK_OK) r = sk_mesh_init(&mesh, 2, dims, names, NULL);
  if (r == SK_OK) r = sk_comm_split_mesh(c, &mesh, 2u, &mp, NULL);
  if (r == SK_OK) r = sk_allreduce(mp, &part, &part_sum, 1, SK_F32, SK_SUM, NULL);
  if (r == SK_OK && rank == 0) {
    uint32_t h = 2166136261u; /* FNV-1a over the averaged gradient's bits */
    for (int i = 0; i < N_PARAMS; i++) h = (h ^ bits_of(g[i])) * 16777619u;
    float total = 0;
    for (int i = 0; i < n; i++) total += losses[i];
    printf("devices %d: mean gradient checksum %08x, g[0] = %.9g, losses summed = %.9g, mp group sum = %.9g\n", n,
           (unsigned)h, (double)g[0], (double)total, (double)part_sum);
  }
  if (mp) sk_comm_destroy(mp, NULL);
  free(losses);
  return r;
}

static void usage(FILE *f, const char *path) {
  fprintf(f,
          "Usage: %s [--backend threads|mpi] [--devices N]\n"
          "One data-parallel step (AllReduce of gradients, AllGather of losses, a mesh-group AllReduce)\n"
          "printed as checksums that are the same bit for bit on either backend.\n"
          "  --backend B   threads (N threads as devices) or mpi (one device per process). Default: threads,\n"
          "                or mpi when an MPI launcher started several processes\n"
          "  --devices N   threads backend: devices, 1..%d (default 4); with mpi, the launch's -np decides\n"
          "                (another N is refused)\n"
          "  -h,--help     this text\n"
          "On 4 MPI processes:  " PROG_MPIRUN " -np 4 %s --backend mpi\n" PROG_ROOT_NOTE,
          path, SK_MAX_DEVICES, path);
}

/* argv into *backend_asked and *devices (*devices_given: --devices was given). Returns 0 to run,
   1 after --help, 2 after a message. */
static int parse_args(int argc, char **argv, const char **backend_asked, int *devices, bool *devices_given) {
  for (int i = 1; i < argc; i += 2) { /* every option takes a value */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (prog_is_help(a)) {
      usage(stdout, argv[0]);
      return 1;
    }
    if (!v) return prog_bad_usage(argv[0], "unknown option or missing value", a);
    if (!strcmp(a, "--backend")) {
      if (strcmp(v, "threads") && strcmp(v, "mpi")) return prog_bad_usage(argv[0], "--backend takes threads or mpi", v);
      *backend_asked = v;
    } else if (!strcmp(a, "--devices")) {
      if (!prog_parse_int_in(v, 1, SK_MAX_DEVICES, devices)) return prog_bad_usage(argv[0], "--devices takes 1..4096", v);
      *devices_given = true;
    } else return prog_bad_usage(argv[0], "unknown option", a);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *asked = NULL, *backend;
  int devices = 4;
  bool devices_given = false;
  int pr = parse_args(argc, argv, &asked, &devices, &devices_given);
  if (pr) return pr == 1 ? 0 : 2;
  if (!(backend = prog_backend(argv[0], asked, "--backend"))) return 2;
  char count[16];
  snprintf(count, sizeof count, "%d", devices);
  if (devices_given && !strcmp(backend, "mpi") && devices != prog_launch_size()) /* it would be ignored */
    return prog_bad_usage(argv[0], "--devices is the threads backend's; with mpi the launch's -np decides", count);
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  sk_mpi_config mcfg;
  memset(&mcfg, 0, sizeof mcfg);
  if (!strcmp(backend, "mpi")) {
    mcfg.deterministic = true; /* bitwise the threads backend's results */
    d.backend = sk_mpi_backend(), d.backend_config = &mcfg;
  } else {
    d.backend = sk_threads_backend(), d.ndevices = devices;
  }
  sk_world *w;
  sk_error err;
  if (sk_world_create(&d, &w, &err) != SK_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], err.msg);
    return 1;
  }
  sk_result r = sk_world_run(w, step, NULL, NULL);
  if (r != SK_OK) fprintf(stderr, "%s: %s\n", argv[0], sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  return r != SK_OK;
}
