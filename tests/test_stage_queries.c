/* sk_pipeline.h's stage queries, without a network: MindSpore's device-manager unit test and its
   pipeline transformer's rank rules, an exhaustive check of the default map against the compiled
   plan's sk_parallel_stage_of_rank, and every refusal. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sk_pipeline.h"
#include "sk_parallel.h"
#include "expect_bad.h"

/* tests/ut/cpp/parallel/device_manager_test.cc, TestDeviceManager.test_dm_init_AND_get_device_list
   (mindspore-ai/mindspore at 19e45ccdb1bc): dev_list {5, 3, 1, 0}, stage_map {2, 2} ->
   GetDeviceListByStageId(0) = {5, 3}, (1) = {1, 0}, two devices per stage. */
Test(stage_queries, mindspore_device_manager) {
  const int devices[] = {5, 3, 1, 0}, sizes[] = {2, 2};
  sk_stage_map map = {4, devices, 2, sizes};
  int out[4], n = 0;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_stage_devices(&map, 0, out, 4, &n, &e), SK_OK, "%s", e.msg);
  cr_expect_eq(n, 2);
  cr_expect(out[0] == 5 && out[1] == 3, "stage 0: %d %d", out[0], out[1]);
  cr_assert_eq(sk_stage_devices(&map, 1, out, 4, &n, &e), SK_OK, "%s", e.msg);
  cr_expect_eq(n, 2);
  cr_expect(out[0] == 1 && out[1] == 0, "stage 1: %d %d", out[0], out[1]);
  int stage = -1, index = -1;
  cr_assert_eq(sk_stage_of_device(&map, 1, &stage, &index, &e), SK_OK, "%s", e.msg);
  cr_expect(stage == 1 && index == 0, "device 1: stage %d index %d", stage, index);
  int next = 0, prev = 0;
  cr_assert_eq(sk_stage_peers(&map, 3, &next, &prev, &e), SK_OK, "%s", e.msg);
  cr_expect(next == 0 && prev == -1, "device 3: next %d prev %d", next, prev);
}

/* pipeline_transformer.cc: stage s's ranks are s * per_stage_rank_num + i, and a Send from a
   node on stage s to a user on stage s' goes to global_rank + (s' - s) * per_stage_rank_num.
   16 devices, 4 stages: rank 6 is stage 1, sends on to 10, back to 2. */
Test(stage_queries, mindspore_pipeline_ranks) {
  sk_stage_map map = {16, NULL, 4, NULL};
  sk_error e = {SK_OK, ""};
  for (int s = 0; s < 4; s++) {
    int out[16], n = 0;
    cr_assert_eq(sk_stage_devices(&map, s, out, 16, &n, &e), SK_OK, "%s", e.msg);
    cr_assert_eq(n, 4);
    for (int i = 0; i < 4; i++) cr_expect_eq(out[i], s * 4 + i, "stage %d device %d", s, i);
  }
  for (int rank = 0; rank < 16; rank++) {
    int stage = -1, next = 0, prev = 0;
    cr_assert_eq(sk_stage_of_device(&map, rank, &stage, NULL, &e), SK_OK, "%s", e.msg);
    cr_expect_eq(stage, rank / 4);
    cr_assert_eq(sk_stage_peers(&map, rank, &next, &prev, &e), SK_OK, "%s", e.msg);
    cr_expect_eq(next, stage < 3 ? rank + 4 : -1, "rank %d next", rank);
    cr_expect_eq(prev, stage > 0 ? rank - 4 : -1, "rank %d prev", rank);
  }
}

/* Unequal stages (MindSpore's stage_map allows them): lists and stages work, peers are refused. */
Test(stage_queries, unequal_stages) {
  const int sizes[] = {1, 3};
  sk_stage_map map = {4, NULL, 2, sizes};
  sk_error e;
  int stage = -1, index = -1, next, prev;
  cr_assert_eq(sk_stage_of_device(&map, 3, &stage, &index, &e), SK_OK, "%s", e.msg);
  cr_expect(stage == 1 && index == 2, "device 3: stage %d index %d", stage, index);
  EXPECT_BAD(sk_stage_peers(&map, 0, &next, &prev, &e), &e, "stage 1 holds 3 devices and stage 0 1");
}

/* The compiled plan's stage of a rank is the query's (one rule): every world of up to 64 devices
   and every stage count dividing it. */
Test(stage_queries, plan_agrees) {
  for (int world = 1; world <= 64; world++)
    for (int stages = 2; stages <= world; stages++) {
      if (world % stages) continue;
      sk_parallel_plan plan;
      memset(&plan, 0, sizeof plan);
      plan.stages = stages, plan.desc.ndevices = world / stages;
      sk_stage_map map = {world, NULL, stages, NULL};
      for (int rank = 0; rank < world; rank++) {
        int stage = -1;
        cr_assert_eq(sk_stage_of_device(&map, rank, &stage, NULL, NULL), SK_OK);
        cr_assert_eq(sk_parallel_stage_of_rank(&plan, rank), stage, "world %d, %d stages, rank %d", world, stages, rank);
      }
    }
}

Test(stage_queries, bad_input) {
  const int twice[] = {0, 1, 1, 2}, sizes[] = {2, 1}, big[] = {2, 3};
  sk_stage_map ok = {4, NULL, 2, NULL}, odd = {6, NULL, 4, NULL}, dup = {4, twice, 2, NULL};
  sk_stage_map short_sizes = {4, NULL, 2, sizes}, long_sizes = {4, NULL, 2, big}, none = {0, NULL, 1, NULL};
  sk_stage_map many = {4, NULL, 5, NULL};
  sk_error e;
  int out[4], n, stage, next, prev;
  EXPECT_BAD(sk_stage_devices(NULL, 0, out, 4, &n, &e), &e, "the stage map is NULL");
  EXPECT_BAD(sk_stage_devices(&none, 0, out, 4, &n, &e), &e, "0 devices; allowed 1..4096");
  EXPECT_BAD(sk_stage_devices(&many, 0, out, 4, &n, &e), &e, "5 stages for 4 devices");
  EXPECT_BAD(sk_stage_devices(&odd, 0, out, 4, &n, &e), &e, "6 devices are not divisible by 4 stages");
  EXPECT_BAD(sk_stage_devices(&dup, 0, out, 4, &n, &e), &e, "device 1 is listed twice");
  EXPECT_BAD(sk_stage_devices(&short_sizes, 0, out, 4, &n, &e), &e, "add up to 3, not the 4 devices");
  EXPECT_BAD(sk_stage_devices(&long_sizes, 0, out, 4, &n, &e), &e, "stage 1 holds 3 devices; 2 are left");
  EXPECT_BAD(sk_stage_devices(&ok, 2, out, 4, &n, &e), &e, "stage 2 of 2 stages");
  EXPECT_BAD(sk_stage_devices(&ok, 0, out, 1, &n, &e), &e, "stage 0 holds 2 devices; out holds 1");
  EXPECT_BAD(sk_stage_of_device(&ok, 4, &stage, NULL, &e), &e, "device 4 is not in the device list");
  EXPECT_BAD(sk_stage_of_device(&ok, 0, NULL, NULL, &e), &e, "stage (the output) is NULL");
  EXPECT_BAD(sk_stage_peers(&ok, -1, &next, &prev, &e), &e, "device -1 is not in the device list");
  EXPECT_BAD(sk_stage_peers(&ok, 0, NULL, &prev, &e), &e, "next and prev are required");
}
