/* test_comm_bind.c -- where the threads backend runs sk_world_run's device threads
   (sk_threads_config.bind): auto gives each device thread its own share of the CPUs the caller
   may use when 2 or more devices fit in them; never (-1), a single device, and auto with more
   devices than CPUs leave the caller's CPU set; always (1) goes round robin beyond the CPUs;
   the caller's own set is never changed; a spin or bind outside -1..1 is refused by name.
   Device threads read their CPU sets; the test thread asserts. Where the test process may use
   a single CPU, binding is skipped and the tests check that nothing was bound. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <sched.h>

#include "shardkit.h"
#include "comm_test_util.h"

#define B_MAX 16

typedef struct bind_seen {
  cpu_set_t set[B_MAX];
  int ok[B_MAX];
} bind_seen;

static sk_result b_device(sk_comm *c, void *arg) {
  bind_seen *s = (bind_seen *)arg;
  int r = sk_comm_rank(c);
  s->ok[r] = sched_getaffinity(0, sizeof s->set[r], &s->set[r]) == 0;
  return sk_barrier(c, NULL); /* every device is running at once */
}

/* Runs n devices with bind = `bind` and returns what each saw; asserts the caller's set stayed. */
static void b_run(int n, int bind, bind_seen *s, const cpu_set_t *mine) {
  sk_threads_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.bind = bind;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = n, d.timeout_ms = CT_TIMEOUT_MS, d.backend = sk_threads_backend(), d.backend_config = &cfg;
  sk_world *w = NULL;
  sk_error err;
  memset(&err, 0, sizeof err);
  cr_assert_eq(sk_world_create(&d, &w, &err), SK_OK, "world of %d: %s", n, err.msg);
  memset(s, 0, sizeof *s);
  sk_result r = sk_world_run(w, b_device, s, NULL);
  cr_assert_eq(r, SK_OK, "bind %d, %d devices: %s", bind, n, sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  cpu_set_t after;
  cr_assert_eq(sched_getaffinity(0, sizeof after, &after), 0);
  cr_assert(CPU_EQUAL(&after, mine), "bind %d, %d devices: the caller's CPU set changed", bind, n);
  for (int i = 0; i < n; i++) cr_assert(s->ok[i], "device %d could not read its CPU set", i);
}

/* The i-th CPU of set (ascending), or -1. */
static int b_nth(const cpu_set_t *set, int i) {
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, set) && i-- == 0) return c;
  return -1;
}

static void b_expect_unbound(const bind_seen *s, int n, const cpu_set_t *mine, const char *label) {
  for (int i = 0; i < n; i++) cr_expect(CPU_EQUAL(&s->set[i], mine), "%s: device %d was bound", label, i);
}

/* Device i of n runs on CPUs [i * C / n, (i + 1) * C / n) of the caller's C (n <= C), or, with
   more devices than CPUs, on the (i mod C)-th alone. */
static void b_expect_shares(const bind_seen *s, int n, const cpu_set_t *mine, const char *label) {
  int ncpu = CPU_COUNT(mine);
  for (int i = 0; i < n; i++) {
    int lo = n <= ncpu ? i * ncpu / n : i % ncpu, hi = n <= ncpu ? (i + 1) * ncpu / n : lo + 1;
    cr_expect_eq(CPU_COUNT(&s->set[i]), hi - lo, "%s: device %d may run on %d CPUs, want %d", label, i,
                 CPU_COUNT(&s->set[i]), hi - lo);
    for (int k = lo; k < hi; k++)
      cr_expect(CPU_ISSET(b_nth(mine, k), &s->set[i]), "%s: device %d may not run on CPU %d", label, i, b_nth(mine, k));
  }
}

static int b_cpus(cpu_set_t *mine) {
  cr_assert_eq(sched_getaffinity(0, sizeof *mine, mine), 0);
  return CPU_COUNT(mine);
}

Test(comm_bind, auto_gives_each_device_its_own_cpus_when_they_fit, .timeout = 30) {
  cpu_set_t mine;
  int ncpu = b_cpus(&mine);
  int counts[2] = {2, ncpu > B_MAX ? B_MAX : ncpu}; /* two devices (a share each), and one per CPU */
  for (int c = 0; c < 2; c++) {
    int n = counts[c] < 2 ? 2 : counts[c];
    bind_seen s;
    b_run(n, 0, &s, &mine);
    if (ncpu < 2) {
      b_expect_unbound(&s, n, &mine, "one CPU");
      continue;
    }
    b_expect_shares(&s, n, &mine, "auto");
    for (int i = 0; i < n; i++) /* disjoint shares */
      for (int j = 0; j < i; j++) {
        cpu_set_t both;
        CPU_AND(&both, &s.set[i], &s.set[j]);
        cr_expect_eq(CPU_COUNT(&both), 0, "auto, %d devices: devices %d and %d share a CPU", n, i, j);
      }
  }
}

Test(comm_bind, a_single_device_is_not_bound, .timeout = 30) {
  cpu_set_t mine;
  b_cpus(&mine);
  bind_seen s;
  b_run(1, 0, &s, &mine);
  b_expect_unbound(&s, 1, &mine, "one device, auto");
  b_run(1, 1, &s, &mine);
  b_expect_unbound(&s, 1, &mine, "one device, always");
}

Test(comm_bind, auto_leaves_more_devices_than_cpus_unbound, .timeout = 30) {
  cpu_set_t mine;
  int ncpu = b_cpus(&mine);
  if (ncpu + 1 > B_MAX) return; /* a machine this large is not oversubscribed by B_MAX devices */
  bind_seen s;
  b_run(ncpu + 1, 0, &s, &mine);
  b_expect_unbound(&s, ncpu + 1, &mine, "auto, one device more than CPUs");
}

Test(comm_bind, never_binds, .timeout = 30) {
  cpu_set_t mine;
  int ncpu = b_cpus(&mine), n = ncpu < 2 ? 2 : ncpu > B_MAX ? B_MAX : ncpu;
  bind_seen s;
  b_run(n, -1, &s, &mine);
  b_expect_unbound(&s, n, &mine, "never");
}

Test(comm_bind, always_goes_round_robin, .timeout = 30) {
  cpu_set_t mine;
  int ncpu = b_cpus(&mine), n = 2 * ncpu + 1 > B_MAX ? B_MAX : 2 * ncpu + 1;
  bind_seen s;
  b_run(n, 1, &s, &mine);
  if (ncpu < 2)
    b_expect_unbound(&s, n, &mine, "always on one CPU");
  else
    b_expect_shares(&s, n, &mine, "always");
}

/* A bind or spin outside -1..1 is refused by name when the world is created. */
Test(comm_bind, out_of_range_knobs_are_refused, .timeout = 30) {
  const struct {
    int spin, bind;
    const char *field;
  } bad[] = {{0, 2, "bind = 2"}, {0, -2, "bind = -2"}, {3, 0, "spin = 3"}, {-5, 0, "spin = -5"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sk_threads_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.spin = bad[i].spin, cfg.bind = bad[i].bind;
    sk_world_desc d;
    memset(&d, 0, sizeof d);
    d.ndevices = 2, d.timeout_ms = CT_TIMEOUT_MS, d.backend = sk_threads_backend(), d.backend_config = &cfg;
    sk_world *w = NULL;
    sk_error err;
    memset(&err, 0, sizeof err);
    cr_expect_eq(sk_world_create(&d, &w, &err), SK_ERR_INVALID_ARGUMENT, "%s accepted", bad[i].field);
    cr_expect(strstr(err.msg, bad[i].field) != NULL, "%s: message '%s' does not name it", bad[i].field, err.msg);
    cr_expect_null(w);
  }
}
