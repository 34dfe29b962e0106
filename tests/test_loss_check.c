/* --check's verdict (examples/loss_check.h): a loss that is not finite on either side fails it,
   names its side and ends the comparison there; only the first LOSS_CHECK_STEPS steps count; the
   line's exact form. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/loss_check.h"

/* The verdict line for v, as printed. */
static void line_of(const loss_verdict *v, double tol, sk_dtype dt, char *buf, size_t cap) {
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  loss_check_print(f, v, tol, dt);
  rewind(f);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
  fclose(f);
}

Test(loss_check, equal_runs_pass) {
  double a[3] = {2.3, 1.5, 0.9};
  loss_verdict v = loss_check(a, 3, a, 3, 1e-9);
  cr_expect(v.passed);
  cr_expect_eq(v.worst, 0);
  cr_expect_eq(v.compared, 3);
  char line[256];
  line_of(&v, 1e-9, SK_F64, line, sizeof line);
  cr_expect_str_eq(line, "check: passed: max relative loss difference 0 over 3 steps (tolerance 1e-09 for f64)\n");
}

Test(loss_check, a_difference_above_the_tolerance_fails) {
  double ref[2] = {2.0, 1.0}, run[2] = {2.0, 1.001};
  loss_verdict v = loss_check(run, 2, ref, 2, 1e-4);
  cr_expect_not(v.passed);
  cr_expect(fabs(v.worst - 1e-3) < 1e-12, "worst %g", v.worst);
  char line[256];
  line_of(&v, 1e-4, SK_F32, line, sizeof line);
  cr_expect_str_eq(line, "check: FAILED: max relative loss difference 0.001 over 2 steps (tolerance 1e-04 for f32)\n");
  cr_expect(loss_check(run, 2, ref, 2, 1e-3 + 1e-12).passed, "the tolerance itself passes");
}

/* The case that once passed: a diverging run against a finite reference. */
Test(loss_check, a_run_that_diverges_fails_naming_the_run) {
  double ref[4] = {2.3, 2.0, 1.8, 1.7}, run[3] = {2.3, 2.0, NAN};
  loss_verdict v = loss_check(run, 3, ref, 4, 1e-4);
  cr_expect_not(v.passed);
  cr_expect(isnan(v.worst));
  cr_expect_eq(v.side, 1);
  cr_expect_eq(v.compared, 3, "compared up to the step that was not finite: %ld", v.compared);
  char line[256];
  line_of(&v, 1e-4, SK_F32, line, sizeof line);
  cr_expect_str_eq(line, "check: FAILED: max relative loss difference nan (run) over 3 steps (tolerance 1e-04 for f32)\n");
}

Test(loss_check, a_reference_that_diverges_fails_naming_it) {
  double ref[2] = {2.3, -INFINITY}, run[2] = {2.3, 2.1};
  loss_verdict v = loss_check(run, 2, ref, 2, 1e-4);
  cr_expect_not(v.passed);
  cr_expect_eq(v.side, 2);
  char line[256];
  line_of(&v, 1e-4, SK_BF16, line, sizeof line);
  cr_expect_str_eq(line, "check: FAILED: max relative loss difference inf (reference) over 2 steps (tolerance 1e-04 for bf16)\n");
  double both[2] = {2.3, NAN};
  v = loss_check(both, 2, both, 2, 1e-4);
  cr_expect_eq(v.side, 3);
  cr_expect_not(v.passed, "two runs equally nan are not equal");
}

/* Past LOSS_CHECK_STEPS, steps do not count (a large difference there passes) and the line says
   how many ran. */
Test(loss_check, only_the_first_300_steps_count) {
  enum { N = LOSS_CHECK_STEPS + 5 };
  double *ref = (double *)malloc(sizeof(double) * N), *run = (double *)malloc(sizeof(double) * N);
  cr_assert(ref && run);
  for (int i = 0; i < N; i++) ref[i] = run[i] = 1.0 + i;
  run[N - 1] *= 2;
  loss_verdict v = loss_check(run, N, ref, N, 1e-9);
  cr_expect(v.passed);
  cr_expect_eq(v.compared, LOSS_CHECK_STEPS);
  cr_expect_eq(v.steps, N);
  char line[256];
  line_of(&v, 1e-9, SK_F64, line, sizeof line);
  cr_expect_str_eq(line, "check: passed: max relative loss difference 0 over 300 of 305 steps (tolerance 1e-09 for f64)\n");
  run[LOSS_CHECK_STEPS - 1] = NAN; /* the last step that counts */
  cr_expect_not(loss_check(run, N, ref, N, 1e-9).passed);
  free(ref), free(run);
}

Test(loss_check, nothing_compared_is_not_a_pass) {
  double a[1] = {1};
  cr_expect_not(loss_check(a, 0, a, 1, 1).passed);
}

Test(loss_check, tolerances_by_dtype) {
  cr_expect_eq(loss_check_tolerance(SK_F64), 1e-9);
  cr_expect_eq(loss_check_tolerance(SK_F32), 1e-4);
  cr_expect_gt(loss_check_tolerance(SK_F16), loss_check_tolerance(SK_F32));
  cr_expect_gt(loss_check_tolerance(SK_BF16), loss_check_tolerance(SK_F16), "bf16 keeps 8 bits of mantissa, f16 11");
}
