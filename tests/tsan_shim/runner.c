/* Runs the tests registered through the Criterion stand-in (criterion/criterion.h here), one
   after another in this process, for `make tsan`. Each test gets a watchdog from its .timeout
   (default 60 s): a hang ends the run with a failure instead of blocking CI. `--filter PATTERN`
   (or --filter=PATTERN) runs only the tests whose "suite/name" matches the glob, as Criterion's
   does; other arguments (--jobs N) are accepted and ignored. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fnmatch.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static sk_shim_test *tests;
static jmp_buf test_jmp;
static int test_failed, test_skipped;
static const char *current = "";

void sk_shim_register(sk_shim_test *t) {
  t->next = tests;
  tests = t;
}

void sk_shim_fail(int fatal, const char *file, int line, const char *expr, const char *fmt, ...) {
  printf("[----] %s:%d: %s failed: %s\n[----]   ", file, line, fatal ? "assertion" : "expectation", expr);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  test_failed = 1;
  if (fatal) longjmp(test_jmp, 1);
}

void sk_shim_skip(const char *fmt, ...) {
  (void)fmt;
  test_skipped = 1;
  longjmp(test_jmp, 1);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "[FAIL] a test exceeded its timeout (see the last [RUN] line)\n";
  if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(2);
}

static int run_one(sk_shim_test *t, void *param) {
  test_failed = test_skipped = 0;
  double to = t->extra->timeout > 0 ? t->extra->timeout : 60;
  alarm((unsigned)(to * 10 + 1)); /* TSan runs ~10x slower than the suites' own budgets */
  if (setjmp(test_jmp) == 0) {
    if (param)
      t->pfn(param);
    else
      t->fn();
  }
  alarm(0);
  return test_failed;
}

/* The --filter argument, or NULL. */
static const char *filter_of(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--filter=", 9) == 0) return argv[i] + 9;
    if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) return argv[i + 1];
  }
  return NULL;
}

static int selected(const sk_shim_test *t, const char *filter) {
  char full[512];
  snprintf(full, sizeof full, "%s/%s", t->suite, t->name);
  return !filter || fnmatch(filter, full, 0) == 0;
}

int main(int argc, char **argv) {
  const char *filter = filter_of(argc, argv);
  signal(SIGALRM, on_alarm);
  setvbuf(stdout, NULL, _IOLBF, 0);
  int passed = 0, failed = 0, skipped = 0;
  for (sk_shim_test *t = tests; t; t = t->next) {
    if (t->extra->disabled || !selected(t, filter)) continue;
    size_t n = 1;
    struct criterion_test_params p = {0, NULL, 0};
    if (t->pfn) p = t->params(), n = p.length;
    for (size_t i = 0; i < n; i++) {
      current = t->name;
      printf("[RUN ] %s::%s%s\n", t->suite, t->name, t->pfn ? " (parameterized)" : "");
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      int f = run_one(t, t->pfn ? (char *)p.params + i * p.size : NULL);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
      if (s > 20) printf("[SLOW] %s::%s took %.1f s\n", t->suite, t->name, s); /* where CI's time goes */
      if (test_skipped)
        skipped++;
      else if (f)
        failed++, printf("[FAIL] %s::%s\n", t->suite, t->name);
      else
        passed++;
    }
  }
  printf("tsan: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
