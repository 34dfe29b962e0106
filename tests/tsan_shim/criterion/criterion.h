/* A minimal stand-in for Criterion, used only by `make tsan`.

   Why: Criterion cannot start under ThreadSanitizer (its inheritable arena collides with TSan's
   address-space layout: "Could not initialize inheritable arena", Snaipe/Criterion issue #274).
   So the threaded suites are compiled a second time against this header, which implements the
   subset of Criterion they use (Test, ParameterizedTest, cr_assert*, cr_expect*), and run in one
   process by runner.c. Assertions keep Criterion's meaning: cr_assert* ends the test, cr_expect*
   records the failure and continues. */
#ifndef SK_TSAN_SHIM_CRITERION_H
#define SK_TSAN_SHIM_CRITERION_H
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct criterion_test_params {
  size_t size;
  void *params;
  size_t length;
};

struct sk_shim_extra {
  int dummy;
  double timeout;
  const char *description;
  int disabled;
  int exit_code;
  int signal;
};

typedef struct sk_shim_test {
  const char *suite, *name;
  void (*fn)(void);                                /* plain test */
  void (*pfn)(void *param);                        /* parameterized test */
  struct criterion_test_params (*params)(void);
  struct sk_shim_extra *extra;
  struct sk_shim_test *next;
} sk_shim_test;

void sk_shim_register(sk_shim_test *t);
void sk_shim_fail(int fatal, const char *file, int line, const char *expr, const char *fmt, ...);
void sk_shim_skip(const char *fmt, ...);

#define SK_SHIM_REG(suite, name, f, pf, pp)                                                        \
  static struct sk_shim_extra suite##_##name##_extra;                                              \
  static sk_shim_test suite##_##name##_entry = {#suite, #name, f, pf, pp, &suite##_##name##_extra, 0}; \
  __attribute__((constructor)) static void suite##_##name##_register(void) {                       \
    sk_shim_register(&suite##_##name##_entry);                                                     \
  }

#define Test(suite, name, ...)                                                                     \
  static void suite##_##name##_fn(void);                                                           \
  SK_SHIM_REG(suite, name, suite##_##name##_fn, 0, 0)                                              \
  static struct sk_shim_extra suite##_##name##_extra = {.dummy = 0, __VA_ARGS__};                  \
  static void suite##_##name##_fn(void)

#define ParameterizedTestParameters(suite, name) static struct criterion_test_params suite##_##name##_params(void)

#define ParameterizedTest(param_decl, suite, name, ...)                                            \
  static struct criterion_test_params suite##_##name##_params(void);                               \
  static void suite##_##name##_pfn(param_decl);                                                    \
  static void suite##_##name##_call(void *p) { suite##_##name##_pfn(p); }                          \
  SK_SHIM_REG(suite, name, 0, suite##_##name##_call, suite##_##name##_params)                      \
  static struct sk_shim_extra suite##_##name##_extra = {.dummy = 0, __VA_ARGS__};                  \
  static void suite##_##name##_pfn(param_decl)

#define cr_make_param_array(type, arr, len, ...) \
  ((struct criterion_test_params){sizeof(type), (void *)(arr), (size_t)(len)})

#define SK_SHIM_CHECK(fatal, cond, ...) \
  do {                                  \
    if (!(cond)) sk_shim_fail(fatal, __FILE__, __LINE__, #cond, "" __VA_ARGS__); \
  } while (0)

#define cr_assert(cond, ...) SK_SHIM_CHECK(1, cond, __VA_ARGS__)
#define cr_expect(cond, ...) SK_SHIM_CHECK(0, cond, __VA_ARGS__)
#define cr_assert_eq(a, b, ...) SK_SHIM_CHECK(1, (a) == (b), __VA_ARGS__)
#define cr_expect_eq(a, b, ...) SK_SHIM_CHECK(0, (a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) SK_SHIM_CHECK(1, (a) != (b), __VA_ARGS__)
#define cr_expect_neq(a, b, ...) SK_SHIM_CHECK(0, (a) != (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) SK_SHIM_CHECK(1, (a) > (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) SK_SHIM_CHECK(1, (a) < (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) SK_SHIM_CHECK(1, (a) >= (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) SK_SHIM_CHECK(1, (a) <= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) SK_SHIM_CHECK(1, (p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) SK_SHIM_CHECK(1, (p) != NULL, __VA_ARGS__)
#define cr_expect_not_null(p, ...) SK_SHIM_CHECK(0, (p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) SK_SHIM_CHECK(1, strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...) SK_SHIM_CHECK(0, strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) SK_SHIM_CHECK(1, strcmp((a), (b)) != 0, __VA_ARGS__)
#define cr_expect_gt(a, b, ...) SK_SHIM_CHECK(0, (a) > (b), __VA_ARGS__)
#define cr_expect_lt(a, b, ...) SK_SHIM_CHECK(0, (a) < (b), __VA_ARGS__)
#define cr_expect_geq(a, b, ...) SK_SHIM_CHECK(0, (a) >= (b), __VA_ARGS__)
#define cr_expect_leq(a, b, ...) SK_SHIM_CHECK(0, (a) <= (b), __VA_ARGS__)
#define cr_expect_null(p, ...) SK_SHIM_CHECK(0, (p) == NULL, __VA_ARGS__)
#define cr_expect_str_neq(a, b, ...) SK_SHIM_CHECK(0, strcmp((a), (b)) != 0, __VA_ARGS__)
/* Criterion's form: |actual - expected| <= epsilon. */
#define cr_expect_float_eq(a, b, eps, ...) SK_SHIM_CHECK(0, fabs((double)(a) - (double)(b)) <= (eps), __VA_ARGS__)
#define cr_assert_float_eq(a, b, eps, ...) SK_SHIM_CHECK(1, fabs((double)(a) - (double)(b)) <= (eps), __VA_ARGS__)
#define cr_expect_fail(...) sk_shim_fail(0, __FILE__, __LINE__, "cr_expect_fail", "" __VA_ARGS__)
#define cr_assert_fail(...) sk_shim_fail(1, __FILE__, __LINE__, "cr_assert_fail", "" __VA_ARGS__)
#define cr_skip_test(...) sk_shim_skip("" __VA_ARGS__)
#define cr_log_info(...) (printf(__VA_ARGS__), putchar('\n'))
#define cr_log_warn(...) (printf(__VA_ARGS__), putchar('\n'))

#endif
