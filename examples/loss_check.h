/* loss_check.h -- the verdict of --check (sk-sim, operator_parallel): a run's losses against the
   single-device reference's, step by step. (Not part of the library: include/ holds that.)

   The relative difference |run - reference| / |reference| (a reference of 0: the absolute
   difference) is taken over the first LOSS_CHECK_STEPS steps, where rounding drift is bounded:
   past them two runs that differ only in the order of their sums drift apart at the speed of the
   training itself, whatever the parallelism. A non-finite loss on either side fails the check at
   its step, and the difference then prints as nan or inf with the side it came from.

   The tolerances (loss_check_tolerance) are per dtype, a margin above what the tutorial network
   (examples/nets/operator_parallel.json) measures on 8 devices over 300 steps, as docs/sk-sim.md
   records: f64 1e-15, f32 4e-7, f16 1.7e-3, bf16 7.8e-3. f16 and bf16 store every value in 16
   bits, so a different order of a sum can round a parameter one 16-bit step apart, which the
   next steps carry on. A relative difference grows as the loss nears 0: a network that learns its
   data by heart (examples/nets/transformer.json: loss 0.003 by step 300) measures 2.2e-4 in f32
   and 0.2 in 16 bits, so exactness is checked in f64, where it agrees to 1e-12. */
#ifndef SK_EXAMPLES_LOSS_CHECK_H
#define SK_EXAMPLES_LOSS_CHECK_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "sk_core.h"

#define LOSS_CHECK_STEPS 300 /* the steps the tolerance applies to */

/* The default tolerance of the relative loss difference for a run in dtype dt. */
static inline double loss_check_tolerance(sk_dtype dt) {
  switch (dt) {
    case SK_F64: return 1e-9;
    case SK_F16: return 1e-2;
    case SK_BF16: return 3e-2;
    default: return 1e-4;
  }
}

typedef struct loss_verdict {
  double worst;   /* the largest relative difference (nan or inf when a loss was not finite) */
  long compared;  /* the steps compared (at most LOSS_CHECK_STEPS) */
  long steps;     /* the steps both sides ran */
  int side;       /* where a loss was not finite: 0 nowhere, 1 the run, 2 the reference, 3 both */
  bool passed;
} loss_verdict;

/* Compares n_run losses with n_ref reference losses against tolerance tol. */
static inline loss_verdict loss_check(const double *run, long n_run, const double *ref, long n_ref, double tol) {
  loss_verdict v = {0, 0, n_run < n_ref ? n_run : n_ref, 0, true};
  v.compared = v.steps < LOSS_CHECK_STEPS ? v.steps : LOSS_CHECK_STEPS;
  for (long i = 0; i < v.compared && !v.side; i++) {
    if (!isfinite(ref[i]) || !isfinite(run[i])) {
      v.side = (isfinite(run[i]) ? 0 : 1) | (isfinite(ref[i]) ? 0 : 2);
      v.worst = v.side == 2 ? ref[i] : run[i];
      v.worst = isnan(v.worst) ? NAN : INFINITY; /* -inf prints as inf: it is the size that failed */
      v.compared = i + 1;
      break;
    }
    double rel = fabs(run[i] - ref[i]) / (ref[i] != 0 ? fabs(ref[i]) : 1);
    v.worst = rel > v.worst ? rel : v.worst;
  }
  v.passed = !v.side && v.compared > 0 && v.worst <= tol;
  return v;
}

/* The verdict line: "check: passed: max relative loss difference X over N steps (tolerance T
   for DTYPE)", FAILED instead of passed, "over 300 of N steps" past 300, and after a non-finite
   X the side it came from: "(run)", "(reference)" or "(run and reference)". */
static inline void loss_check_print(FILE *f, const loss_verdict *v, double tol, sk_dtype dt) {
  fprintf(f, "check: %s: max relative loss difference %.3g", v->passed ? "passed" : "FAILED", v->worst);
  static const char *const sides[] = {"", "run", "reference", "run and reference"};
  if (v->side) fprintf(f, " (%s)", sides[v->side]);
  if (v->steps > v->compared && !v->side)
    fprintf(f, " over %ld of %ld steps", v->compared, v->steps);
  else
    fprintf(f, " over %ld steps", v->compared);
  fprintf(f, " (tolerance %.0e for %s)\n", tol, sk_dtype_name(dt));
}

#endif /* SK_EXAMPLES_LOSS_CHECK_H */
