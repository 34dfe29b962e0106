/* test_mpi.c -- the MPI backend's suites, launched through mpirun.openmpi.

   Criterion runs each test in a child process and MPI cannot be initialised twice in one
   process, so nothing here calls MPI: each test runs `mpirun.openmpi --oversubscribe --mca btl
   self,vader -np N <program>` (built by the Makefile before the tests run) and asserts on its
   exit status and output. What is checked lives in tests/mpi/mpi_driver.c (every collective x
   dtype x op x count x placement, sub-communicators, non-blocking, chunked counts, and
   deterministic mode equal to the threads backend bit for bit; faults, tests/mpi/faults.h;
   teardown of the last world after a fault), plus the benchmark's and
   the example's MPI modes. Open MPI refuses to run as root unless told; the permission is given
   to the launched job only (setenv in this test process, not in the user's shell).

   When build/tests/mpi_driver is missing (Open MPI not installed) the tests skip. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MPIRUN "mpirun.openmpi --oversubscribe --mca btl self,vader"
#define OUT_MAX (1 << 16)

/* Runs cmd (stderr merged); returns the exit status, output in out. */
static int run(const char *cmd, char *out, size_t cap) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  char full[1024];
  snprintf(full, sizeof full, "timeout 240 %s 2>&1", cmd);
  FILE *p = popen(full, "r");
  cr_assert_not_null(p, "popen %s", cmd);
  size_t len = 0, got;
  while (len + 1 < cap && (got = fread(out + len, 1, cap - 1 - len, p)) > 0) len += got;
  char sink[4096];
  while (fread(sink, 1, sizeof sink, p) > 0) {
  }
  out[len] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void need(const char *path) {
  if (access(path, X_OK) != 0) cr_skip_test("%s is not built (make test builds it)", path);
}

static char out[OUT_MAX];

/* Every suite reports "suite <name> np=<n>: ... 0 failures". */
static void driver(int np) {
  need("build/tests/mpi_driver");
  char cmd[256];
  snprintf(cmd, sizeof cmd, MPIRUN " -np %d build/tests/mpi_driver coll groups async chunk det alltoallv", np);
  int st = run(cmd, out, sizeof out);
  cr_expect_eq(st, 0, "exit status %d:\n%s", st, out);
  static const char *const suites[] = {"coll", "groups", "async", "chunk", "det", "alltoallv"};
  for (int i = 0; i < 6; i++) {
    char want[64];
    snprintf(want, sizeof want, "suite %s np=%d: ", suites[i], np);
    const char *line = strstr(out, want);
    cr_expect_not_null(line, "no report from suite %s:\n%s", suites[i], out);
    if (line) cr_expect(strstr(line, " 0 failures") && strstr(line, " 0 failures") < strchr(line, '\n'),
                        "suite %s failed:\n%s", suites[i], out);
  }
}

Test(mpi, collectives_np2, .timeout = 300) { driver(2); }
Test(mpi, collectives_np3, .timeout = 300) { driver(3); }
Test(mpi, collectives_np8, .timeout = 300) { driver(8); }

static void faults(int np) {
  need("build/tests/mpi_driver");
  char cmd[256];
  snprintf(cmd, sizeof cmd, MPIRUN " -np %d build/tests/mpi_driver faults", np);
  int st = run(cmd, out, sizeof out);
  cr_expect_eq(st, 0, "exit status %d:\n%s", st, out);
  cr_expect(strstr(out, "faults rank 0 ") && !strstr(out, "FAIL"), "fault checks failed:\n%s", out);
}

Test(mpi, faults_np2, .timeout = 300) { faults(2); }
Test(mpi, faults_np3, .timeout = 300) { faults(3); }
Test(mpi, faults_np8, .timeout = 300) { faults(8); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The process's last world, destroyed after a fault (tests/mpi/faults.h, teardown). hang: the
   last rank sleeps 60 s instead of calling; the others must report it and return from destroy
   within the bound instead of blocking in MPI_Finalize, then exit without finalising, so mpirun
   ends the sleeper and the job (non-zero status by design) well before the 60 s. left: rank 1
   leaves at once; after rank 0's timeout every process finalises cleanly (status 0). */
static void teardown(const char *mode, int np) {
  need("build/tests/mpi_driver");
  bool hang = strcmp(mode, "teardown-hang") == 0;
  char cmd[256];
  snprintf(cmd, sizeof cmd, MPIRUN " -np %d build/tests/mpi_driver %s", np, mode);
  double t0 = now_s();
  int st = run(cmd, out, sizeof out);
  double s = now_s() - t0;
  cr_expect(hang ? st != 0 : st == 0, "exit status %d:\n%s", st, out);
  cr_expect(s < 30.0, "the job took %.1f s (the sleeper was not ended):\n%s", s, out);
  cr_expect(!strstr(out, "FAIL"), "teardown checks failed:\n%s", out);
  for (int r = 0; r < (hang ? np - 1 : np); r++) {
    char want[64];
    snprintf(want, sizeof want, "%s rank %d np=%d: ", mode, r, np);
    const char *line = strstr(out, want);
    cr_expect(line && strstr(line, " 0 failures") && strstr(line, " 0 failures") < strchr(line, '\n'),
              "no clean report from rank %d:\n%s", r, out);
  }
}

Test(mpi, teardown_after_hang_np2, .timeout = 300) { teardown("teardown-hang", 2); }
Test(mpi, teardown_after_hang_np3, .timeout = 300) { teardown("teardown-hang", 3); }
Test(mpi, teardown_after_leave_np3, .timeout = 300) { teardown("teardown-left", 3); }

/* The benchmark's -B mpi: every row right, and the launcher rules. */
Test(mpi, bench, .timeout = 300) {
  need("build/all_reduce_perf");
  static const char *const progs[] = {"all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
                                      "reduce_perf",     "alltoall_perf",   "sendrecv_perf"};
  char cmd[512];
  for (int i = 0; i < 7; i++) {
    snprintf(cmd, sizeof cmd, MPIRUN " -np 3 build/%s -B mpi -b 7 -e 100K -f 17 -w 1 -n 2 -c 1 -d all -r -1", progs[i]);
    int st = run(cmd, out, sizeof out);
    cr_expect(st == 0 && strstr(out, "# Out of bounds values : 0 OK"), "%s: exit %d:\n%s", cmd, st, out);
  }
  snprintf(cmd, sizeof cmd, MPIRUN " -np 2 build/all_reduce_perf -B mpi -g 2 -b 8 -e 64K -f 8 -o all -d all -w 1 -n 2");
  int st = run(cmd, out, sizeof out);
  cr_expect(st == 0 && strstr(out, "# Out of bounds values : 0 OK") && strstr(out, "backend: mpi"), "%s: exit %d:\n%s",
            cmd, st, out);
  /* -g must equal the world size */
  st = run(MPIRUN " -np 2 build/all_reduce_perf -B mpi -g 4", out, sizeof out);
  cr_expect(st != 0 && strstr(out, "-g 4 but the MPI world has 2 processes"), "-g 4 under -np 2: exit %d:\n%s", st, out);
  /* outside mpirun */
  st = run("build/all_reduce_perf -B mpi", out, sizeof out);
  cr_expect(st == 2 && strstr(out, "needs an MPI launcher"), "outside mpirun: exit %d:\n%s", st, out);
}

/* The example prints the same line under both backends (deterministic mode). */
Test(mpi, example_same_under_both_backends, .timeout = 300) {
  need("build/both_backends");
  static char other[OUT_MAX];
  for (int n = 2; n <= 8; n += 3) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "build/both_backends --backend threads --devices %d", n);
    int st = run(cmd, other, sizeof other);
    cr_expect_eq(st, 0, "%s: exit %d: %s", cmd, st, other);
    snprintf(cmd, sizeof cmd, MPIRUN " -np %d build/both_backends --backend mpi", n);
    st = run(cmd, out, sizeof out);
    cr_expect_eq(st, 0, "%s: exit %d: %s", cmd, st, out);
    cr_expect_str_eq(out, other, "threads and MPI differ at %d devices", n);
  }
  int st = run("build/both_backends --backend mpi", out, sizeof out);
  cr_expect(st == 2 && strstr(out, "needs an MPI launcher"), "outside mpirun: exit %d: %s", st, out);
}
