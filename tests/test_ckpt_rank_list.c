/* sk_ckpt_plan.h's sk_ckpt_infer_rank_list against MindSpore's own unit tests of
   _infer_rank_list: tests/ut/python/parallel/test_distribute_predict.py (mindspore-ai/mindspore at
   a54f841ed578), test_infer_rank_list1..5, each named beside its vector; then layouts those tests
   do not reach (a replicated axis in the middle, the similar layout's pick by rank) and every
   refusal. A layout is written as MindSpore writes it there: [dev_mat, tensor_map]. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sk_ckpt_plan.h"
#include "expect_bad.h"

/* [dev_mat, tensor_map] of a [32, 64] weight: mesh "a=4,b=8" style text and a numeric map. */
static sk_layout ms_layout(const char *mesh_text, const char *ms_map_text) {
  static const int64_t shape[2] = {32, 64};
  sk_mesh mesh;
  sk_dim_map map[SK_MAX_DIMS];
  int ndims = 0;
  sk_layout l;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_mesh_parse(&mesh, mesh_text, &e), SK_OK, "%s: %s", mesh_text, e.msg);
  cr_assert_eq(sk_ms_map_parse(ms_map_text, map, &ndims, &e), SK_OK, "%s: %s", ms_map_text, e.msg);
  cr_assert_eq(sk_layout_from_ms_map(&l, &mesh, ndims, shape, map, &e), SK_OK, "%s %s: %s", mesh_text, ms_map_text, e.msg);
  return l;
}

static void expect_ranks(const sk_layout *train, const sk_layout *predict, int rank, const int *want, int nwant,
                         bool want_as_saved, const char *what) {
  int ranks[64], n = -1;
  bool as_saved = !want_as_saved;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_infer_rank_list(train, predict, rank, ranks, 64, &n, &as_saved, &e), SK_OK, "%s: %s", what, e.msg);
  cr_assert_eq(n, nwant, "%s: %d ranks, want %d", what, n, nwant);
  for (int i = 0; i < n; i++) cr_expect_eq(ranks[i], want[i], "%s: ranks[%d] = %d, want %d", what, i, ranks[i], want[i]);
  cr_expect_eq(as_saved, want_as_saved, "%s: as_saved %d", what, as_saved);
}

static const int first8[8] = {0, 1, 2, 3, 4, 5, 6, 7};

Test(ckpt_rank_list, mindspore_standalone) { /* test_infer_rank_list1 */
  sk_layout train = ms_layout("a=4,b=8", "(-1,0)");
  expect_ranks(&train, NULL, 0, first8, 8, false, "test_infer_rank_list1");
}

Test(ckpt_rank_list, mindspore_similar_layout) { /* test_infer_rank_list2: gpt3 prediction mode */
  sk_layout train = ms_layout("a=4,b=8", "(-1,0)"), predict = ms_layout("b=8", "(-1,0)");
  const int want[1] = {0};
  expect_ranks(&train, &predict, 0, want, 1, true, "test_infer_rank_list2");
}

Test(ckpt_rank_list, mindspore_same_layout) { /* test_infer_rank_list3 */
  sk_layout train = ms_layout("a=4,b=8", "(-1,0)"), predict = ms_layout("a=4,b=8", "(-1,0)");
  const int want[1] = {0};
  expect_ranks(&train, &predict, 0, want, 1, true, "test_infer_rank_list3");
}

Test(ckpt_rank_list, mindspore_different_layout) { /* test_infer_rank_list4 */
  sk_layout train = ms_layout("a=4,b=8", "(-1,0)"), predict = ms_layout("a=2,b=2", "(1,0)");
  expect_ranks(&train, &predict, 0, first8, 8, false, "test_infer_rank_list4");
}

Test(ckpt_rank_list, mindspore_full_shape_checkpoint) { /* test_infer_rank_list5 */
  sk_layout train = ms_layout("a=8", "(-1,-1)"), predict = ms_layout("a=2,b=2", "(1,0)");
  const int want[1] = {0};
  expect_ranks(&train, &predict, 0, want, 1, false, "test_infer_rank_list5");
}

/* Beyond those tests, by the same rules: the distinct slices of a layout replicated along its
   middle axis are the ranks with coordinate 0 there; a similar layout with as many distinct
   slices as predict devices gives each device its own; the same layout gives the device itself. */
Test(ckpt_rank_list, rules_beyond_the_vectors) {
  sk_layout train = ms_layout("a=2,b=2,c=2", "(2,0)"); /* dim 0 by a, dim 1 by c; b replicates */
  const int distinct[4] = {0, 1, 4, 5};
  expect_ranks(&train, NULL, 0, distinct, 4, false, "b replicated");
  /* similar: the same numeric map, the used axes the same sizes; the replicated axis is size 1 */
  sk_layout similar = ms_layout("a=2,r=1,c=2", "(2,0)");
  const int picked[1] = {4};
  expect_ranks(&train, &similar, 2, picked, 1, true, "similar: rank 2 takes the third distinct slice");
  const int itself[1] = {6};
  expect_ranks(&train, &train, 6, itself, 1, true, "same layout: the device's own file");
  /* the same cuts on a 2x2 mesh are not similar in MindSpore's numbers ((1,0) against (2,0)) */
  sk_layout renumbered = ms_layout("a=2,c=2", "(1,0)");
  expect_ranks(&train, &renumbered, 0, distinct, 4, false, "numbers differ: every distinct slice, merged");
}

Test(ckpt_rank_list, bad_input) {
  sk_layout train = ms_layout("a=4,b=8", "(-1,0)"), predict = ms_layout("a=4,b=8", "(-1,0)");
  int ranks[8], n;
  bool as_saved;
  sk_error e;
  EXPECT_BAD(sk_ckpt_infer_rank_list(NULL, NULL, 0, ranks, 8, &n, &as_saved, &e), &e, "NULL argument");
  EXPECT_BAD(sk_ckpt_infer_rank_list(&train, NULL, 0, ranks, 0, &n, &as_saved, &e), &e, "cap < 1");
  EXPECT_BAD(sk_ckpt_infer_rank_list(&train, NULL, 0, ranks, 4, &n, &as_saved, &e), &e, "more than 4 ranks");
  EXPECT_BAD(sk_ckpt_infer_rank_list(&train, &predict, 32, ranks, 8, &n, &as_saved, &e), &e,
             "rank 32 is not one of the 32 predict devices");
}
