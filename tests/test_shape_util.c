/* MindSpore's shape helpers (sk_layout_algebra.h, >>shape_util). Each vector is one of MindSpore's
   own unit tests, tests/ut/cpp/parallel/tensor_layout/shape_util_test.cc (mindspore-ai/mindspore
   at 1546d803eb67ba779b2ca99ab7e4d3175b6e08f7), named beside it; then the rules those tests do
   not reach (master's size-1 rule in ExpandAccumulateProduct, at 74e1f3ea86a9's shape_util.cc)
   and every class of bad input. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sk_layout_algebra.h"
#include "expect_bad.h"

/* A list from a literal: L(2, 8, 32). */
#define L(...) list_of((const int64_t[]){__VA_ARGS__}, (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

static sk_int_list list_of(const int64_t *v, int n) {
  sk_int_list l;
  memset(&l, 0, sizeof l);
  l.n = n;
  memcpy(l.v, v, (size_t)n * sizeof *v);
  return l;
}

static void expect_list(const sk_int_list *got, sk_int_list want, const char *what) {
  cr_assert_eq(got->n, want.n, "%s: %d values, want %d", what, got->n, want.n);
  for (int k = 0; k < want.n; k++)
    cr_expect_eq(got->v[k], want.v[k], "%s: value %d is %lld, want %lld", what, k, (long long)got->v[k],
                 (long long)want.v[k]);
}

typedef sk_result (*unary_fn)(const sk_int_list *, sk_int_list *, sk_error *);
typedef sk_result (*binary_fn)(const sk_int_list *, const sk_int_list *, sk_int_list *, sk_error *);

static void check_unary(unary_fn fn, sk_int_list in, sk_int_list want, const char *what) {
  sk_int_list out;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(fn(&in, &out, &e), SK_OK, "%s: %s", what, e.msg);
  expect_list(&out, want, what);
}

static void check_binary(binary_fn fn, sk_int_list a, sk_int_list b, sk_int_list want, const char *what) {
  sk_int_list out;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(fn(&a, &b, &out, &e), SK_OK, "%s: %s", what, e.msg);
  expect_list(&out, want, what);
}

Test(shape_util, mindspore_shape_to_accumulate_product) { /* ShapeUtilTest.ShapeToAccumulateProduct */
  check_unary(sk_shape_to_accumulate_product, L(2, 8, 32), L(2, 2 * 8, 2 * 8 * 32), "ShapeToAccumulateProduct");
}

Test(shape_util, mindspore_shape_to_accumulate_product_reverse) { /* ShapeUtilTest.ShapeToAccumulateProductReverse */
  check_unary(sk_shape_to_accumulate_product_reverse, L(2, 8, 32), L(2 * 8 * 32, 8 * 32, 32),
              "ShapeToAccumulateProductReverse");
}

Test(shape_util, mindspore_accumulate_product_to_shape) { /* ShapeUtilTest.AccumulateProductToShape */
  check_unary(sk_accumulate_product_to_shape, L(2, 2 * 8, 2 * 8 * 32), L(2, 8, 32), "AccumulateProductToShape");
}

Test(shape_util, mindspore_accumulate_product_reverse_to_shape) { /* ShapeUtilTest.AccumulateProductReverseToShape */
  check_unary(sk_accumulate_product_reverse_to_shape, L(2 * 8 * 32, 8 * 32, 32), L(2, 8, 32),
              "AccumulateProductReverseToShape");
}

Test(shape_util, mindspore_unify_accumulate_product) { /* ShapeUtilTest.UnifyAccumulateProduct */
  check_binary(sk_unify_accumulate_product, L(2, 8), L(4, 8), L(2, 4, 8), "UnifyAccumulateProduct");
  /* the second example of shape_util.cc's comment */
  check_binary(sk_unify_accumulate_product, L(2, 4, 16), L(8, 16), L(2, 4, 8, 16), "UnifyAccumulateProduct");
}

Test(shape_util, mindspore_unify_shape) { /* ShapeUtilTest.UnifyShape1, UnifyShape2 */
  check_binary(sk_unify_shape, L(2, 4), L(4, 2), L(2, 2, 2), "UnifyShape1");
  check_binary(sk_unify_shape, L(8, 4), L(2, 16), L(2, 4, 4), "UnifyShape2");
}

Test(shape_util, mindspore_expand_accumulate_product) { /* ShapeUtilTest.ExpandAccumulateProduct1..4 */
  check_binary(sk_expand_accumulate_product, L(2 * 8 * 32, 8 * 32, 32), L(2 * 8 * 32, 8 * 32, 32),
               L(2 * 8 * 32, 8 * 32, 32), "ExpandAccumulateProduct1");
  check_binary(sk_expand_accumulate_product, L(2 * 8 * 32, 8 * 32, 32), L(2 * 8 * 32, 8 * 32, 32, 8),
               L(2 * 8 * 32, 8 * 32, 32, 8), "ExpandAccumulateProduct2");
  check_binary(sk_expand_accumulate_product, L(2 * 8 * 32, 8 * 32, 32), L(2 * 8 * 32, 32, 8),
               L(2 * 8 * 32, 8 * 32, 32, 8), "ExpandAccumulateProduct3");
  check_binary(sk_expand_accumulate_product, L(512 * 1024, 1024), L(128 * 4096, 4096), L(128 * 4 * 1024, 4 * 1024, 1024),
               "ExpandAccumulateProduct4");
}

Test(shape_util, mindspore_expand_shape) { /* ShapeUtilTest.ExpandShape1, ExpandShape2 */
  check_binary(sk_expand_shape, L(2, 8, 32), L(16, 4, 8), L(2, 8, 4, 8), "ExpandShape1");
  check_binary(sk_expand_shape, L(2, 8, 32), L(2, 4, 8), L(2, 4, 2, 4, 8), "ExpandShape2");
}

/* Master's rule: once the input is used up, an expand value equal to the one after it (a
   leading size-1 dim of expand) is dropped. [1,8] refines [8] as [8]; size-1 dims elsewhere are
   kept, as every helper here keeps them. */
Test(shape_util, size_one_dims) {
  check_binary(sk_expand_shape, L(8), L(1, 8), L(8), "ExpandShape [8] by [1,8]");
  check_binary(sk_expand_shape, L(8), L(8, 1), L(8, 1), "ExpandShape [8] by [8,1]");
  check_unary(sk_shape_to_accumulate_product, L(2, 1, 4), L(2, 2, 8), "a size-1 dim keeps its place");
  check_unary(sk_accumulate_product_to_shape, L(4, 4), L(4, 1), "equal products are a size-1 dim");
}

Test(shape_util, empty_lists) {
  sk_int_list none = {0, {0}};
  check_unary(sk_shape_to_accumulate_product_reverse, none, none, "an empty shape");
  check_binary(sk_unify_shape, none, none, none, "two empty shapes");
  check_binary(sk_expand_shape, L(4, 2), none, L(4, 2), "nothing to expand by");
}

Test(shape_util, bad_input) {
  sk_int_list out, big;
  sk_error e;
  memset(&big, 0, sizeof big);
  big.n = SK_INT_LIST_MAX + 1;
  sk_int_list zero = L(2, 0, 4), neg = L(-2), odd = L(2, 5), a = L(2, 8), b = L(4, 16), in = L(8), ex = L(16, 8);
  EXPECT_BAD(sk_shape_to_accumulate_product(&zero, &out, &e), &e, "value 1 is 0");
  EXPECT_BAD(sk_shape_to_accumulate_product_reverse(&neg, &out, &e), &e, "must be > 0");
  EXPECT_BAD(sk_shape_to_accumulate_product(&big, &out, &e), &e, "33 values; allowed 0..32");
  EXPECT_BAD(sk_shape_to_accumulate_product(NULL, &out, &e), &e, "shape is NULL");
  EXPECT_BAD(sk_shape_to_accumulate_product(&a, NULL, &e), &e, "out is NULL");
  EXPECT_BAD(sk_accumulate_product_to_shape(&odd, &out, &e), &e, "5 is not a multiple of 2");
  EXPECT_BAD(sk_accumulate_product_reverse_to_shape(&a, &out, &e), &e, "2 is not a multiple of 8");
  EXPECT_BAD(sk_unify_accumulate_product(&a, &b, &out, &e), &e, "last values of in1 and in2 must be equal (8, 16)");
  EXPECT_BAD(sk_unify_shape(&a, &odd, &out, &e), &e, "last values"); /* 16 elements against 10 */
  EXPECT_BAD(sk_expand_accumulate_product(&in, &ex, &out, &e), &e, "expand: 16 is beyond the input's 8 elements");
  sk_int_list huge = L(INT64_MAX / 2, 3);
  EXPECT_BAD(sk_shape_to_accumulate_product(&huge, &out, &e), &e, "overflows 64 bits");
}

/* A result longer than a list holds is refused, not cut: powers of two and three times the powers
   of two, both ending on 3 * 2^20, merge to 41 values. */
Test(shape_util, result_too_long) {
  sk_int_list twos, threes, out;
  sk_error e;
  twos.n = threes.n = 21;
  for (int k = 0; k < 21; k++) twos.v[k] = (int64_t)2 << k, threes.v[k] = (int64_t)3 << k;
  twos.v[20] = threes.v[20];
  EXPECT_BAD(sk_unify_accumulate_product(&twos, &threes, &out, &e), &e, "more than 32 values");
}
