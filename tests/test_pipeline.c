/* sk_pipeline.h: the schedulers' action lists against published vectors (Megatron's 1F1B and
   interleaved 1F1B for p = 4, m = 8), ZB-V's shape and metrics, the simulator's makespans, bubbles
   and peak activations against the formulas, the chunk placement, the balanced cut, and every
   refusal. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sk_pipeline.h"
#include "expect_bad.h"

static sk_pipe_schedule make(int p, int m, sk_pipe_scheduler sched, int v) {
  sk_pipe_desc d = {.stages = p, .micro = m, .scheduler = sched, .interleave = v};
  sk_pipe_schedule s;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_pipe_schedule_make(&d, &s, &e), SK_OK, "p %d m %d: %s", p, m, e.msg);
  return s;
}

static void expect_stage(const sk_pipe_schedule *s, int stage, const char *want) {
  char buf[2048];
  size_t n = sk_pipe_format_stage(s, stage, buf, sizeof buf);
  cr_assert_lt(n, sizeof buf);
  cr_expect_str_eq(buf, want, "stage %d", stage);
}

static sk_pipe_stats simulate(const sk_pipe_schedule *s, double f, double b, double w, double comm) {
  sk_pipe_costs c = {f, b, w, comm};
  sk_pipe_stats st;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_pipe_simulate(s, &c, &st, &e), SK_OK, "%s", e.msg);
  return st;
}

/* ---- the vectors ---------------------------------------------------------------------------- */

Test(pipeline, one_f_one_b_p4_m8) {
  sk_pipe_schedule s = make(4, 8, SK_PIPE_1F1B, 0);
  expect_stage(&s, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  expect_stage(&s, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  expect_stage(&s, 2, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  expect_stage(&s, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  /* t_f = 1, t_b = 2: bubble (p-1)(t_f+t_b) = 9 on 24 of work; 1F1B holds p - r micro-batches. */
  sk_pipe_stats st = simulate(&s, 1, 2, 0, 0);
  cr_expect_float_eq(st.makespan, 33, 1e-12);
  cr_expect_float_eq(st.ideal, 24, 1e-12);
  for (int r = 0; r < 4; r++) cr_expect_eq(st.peak_live[r], 4 - r, "stage %d peak %d", r, st.peak_live[r]);
  sk_pipe_desc d = {.stages = 4, .micro = 8, .scheduler = SK_PIPE_1F1B, .interleave = 0};
  cr_expect_float_eq(st.bubble_fraction, sk_pipe_bubble_formula(&d), 1e-12);
  cr_expect_float_eq(sk_pipe_bubble_formula(&d), 3.0 / 11, 1e-12);
  sk_pipe_schedule_free(&s);
}

Test(pipeline, interleaved_p4_v2_m8) {
  sk_pipe_schedule s = make(4, 8, SK_PIPE_1F1B, 2);
  expect_stage(&s, 0,
               "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 "
               "B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  expect_stage(&s, 1,
               "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 F4.1 B0.0 F5.1 B1.0 F6.1 "
               "B2.0 F7.1 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  expect_stage(&s, 2,
               "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 F4.0 B2.1 F5.0 B3.1 F6.0 B0.0 F7.0 B1.0 F4.1 B2.0 F5.1 "
               "B3.0 F6.1 B4.1 F7.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  expect_stage(&s, 3,
               "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 F4.1 "
               "B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  /* Each chunk costs 1/v of a stage: makespan 28.5, bubble (p-1)/(v*m+p-1); peak chunk
     activations 11/9/7/5. */
  sk_pipe_stats st = simulate(&s, 0.5, 1, 0, 0);
  cr_expect_float_eq(st.makespan, 28.5, 1e-12);
  int peaks[4] = {11, 9, 7, 5};
  for (int r = 0; r < 4; r++) cr_expect_eq(st.peak_live[r], peaks[r], "stage %d peak %d", r, st.peak_live[r]);
  sk_pipe_desc d = {.stages = 4, .micro = 8, .scheduler = SK_PIPE_1F1B, .interleave = 2};
  cr_expect_float_eq(st.bubble_fraction, sk_pipe_bubble_formula(&d), 1e-12);
  /* Chunk c of stage r is virtual stage c*p + r. */
  cr_expect_eq(sk_pipe_virtual_stage(&s, 1, 1), 5);
  int chunk = -1;
  cr_expect_eq(sk_pipe_stage_of(&s, 6, &chunk), 2);
  cr_expect_eq(chunk, 1);
  sk_pipe_schedule_free(&s);
}

Test(pipeline, gpipe_holds_every_micro_batch) {
  sk_pipe_schedule s = make(4, 8, SK_PIPE_GPIPE, 0);
  for (int r = 0; r < 4; r++) expect_stage(&s, r, "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
  sk_pipe_stats st = simulate(&s, 1, 2, 0, 0);
  cr_expect_float_eq(st.makespan, 33, 1e-12); /* the same bubble as 1F1B ... */
  for (int r = 0; r < 4; r++) cr_expect_eq(st.peak_live[r], 8); /* ... but m micro-batches held */
  sk_pipe_schedule_free(&s);
  /* gpipe needs neither m >= p nor interleave for chunks: breadth first, backward reversed. */
  s = make(2, 1, SK_PIPE_GPIPE, 2);
  expect_stage(&s, 0, "F0.0 F0.1 B0.1 B0.0");
  st = simulate(&s, 1, 1, 0, 0);
  cr_expect_float_eq(st.makespan, 8, 1e-12); /* one micro-batch is a chain through 4 chunks and back */
  sk_pipe_schedule_free(&s);
}

/* ---- zero_bubble_v ---------------------------------------------------------------------------- */

Test(pipeline, zero_bubble_v_places_chunks_in_a_v) {
  sk_pipe_schedule s = make(4, 8, SK_PIPE_ZERO_BUBBLE_V, 0);
  cr_expect_eq(s.chunks, 2);
  cr_expect(s.split_backward);
  /* MindSpore's zero_bubble_v mapping, 8 chunks on 4 stages: stage0 {0,7}, stage1 {1,6}, ... */
  int want[4][2] = {{0, 7}, {1, 6}, {2, 5}, {3, 4}};
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 2; c++) {
      cr_expect_eq(sk_pipe_virtual_stage(&s, r, c), want[r][c], "stage %d chunk %d", r, c);
      int back = -1;
      cr_expect_eq(sk_pipe_stage_of(&s, want[r][c], &back), r);
      cr_expect_eq(back, c);
    }
  /* Stage 0 warms up with 2p-1 forwards of chunk 0, then, holding the loss, F B W of chunk 1. */
  char buf[2048];
  sk_pipe_format_stage(&s, 0, buf, sizeof buf);
  cr_expect(strncmp(buf, "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F0.1 B0.1 W0.1 F1.1", 54) == 0, "%s", buf);
  sk_pipe_format_stage(&s, 3, buf, sizeof buf);
  cr_expect(strncmp(buf, "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 B0.1 W0.1 F4.0", 54) == 0, "%s", buf);
  sk_pipe_schedule_free(&s);
}

Test(pipeline, zero_bubble_v_bubble_and_memory) {
  /* f = b = w per chunk: only the fill is idle, (p-1)/(6m+p-1), far below 1F1B's; every stage
     holds 2p chunk activations: p micro-batches, 1F1B's stage-0 memory. */
  for (int p = 2; p <= 6; p++)
    for (int m = 2 * p - 1; m <= 3 * p; m++) {
      sk_pipe_schedule s = make(p, m, SK_PIPE_ZERO_BUBBLE_V, 2);
      sk_pipe_stats st = simulate(&s, 1, 1, 1, 0);
      sk_pipe_desc d = {.stages = p, .micro = m, .scheduler = SK_PIPE_ZERO_BUBBLE_V, .interleave = 0},
                   one = {.stages = p, .micro = m, .scheduler = SK_PIPE_1F1B, .interleave = 0};
      cr_expect_float_eq(st.bubble_fraction, sk_pipe_bubble_formula(&d), 1e-12, "p %d m %d: %g", p, m,
                         st.bubble_fraction);
      cr_expect_lt(st.bubble_fraction, sk_pipe_bubble_formula(&one));
      for (int r = 0; r < p; r++) cr_expect_leq(st.peak_live[r], 2 * p, "p %d m %d stage %d", p, m, r);
      sk_pipe_schedule_free(&s);
    }
}

Test(pipeline, zero_bubble_v_fewer_micro_batches_than_2p_minus_1) {
  /* The surplus micro-batches' actions are dropped: the lists still hold every action once and
     finish (the simulator checks both). */
  for (int p = 1; p <= 5; p++)
    for (int m = 1; m < 2 * p - 1; m++) {
      sk_pipe_schedule s = make(p, m, SK_PIPE_ZERO_BUBBLE_V, 0);
      for (int r = 0; r < p; r++) cr_expect_eq(s.count[r], 6 * m, "p %d m %d stage %d", p, m, r);
      sk_pipe_stats st = simulate(&s, 1, 1, 1, 0.25);
      cr_expect_gt(st.makespan, 0);
      sk_pipe_desc d = {.stages = p, .micro = m, .scheduler = SK_PIPE_ZERO_BUBBLE_V, .interleave = 0};
      cr_expect_eq(sk_pipe_bubble_formula(&d), -1);
      sk_pipe_schedule_free(&s);
    }
}

/* ---- every scheduler, many shapes: a complete, runnable list ------------------------------------ */

Test(pipeline, every_schedule_is_complete_and_finishes) {
  sk_pipe_scheduler scheds[3] = {SK_PIPE_GPIPE, SK_PIPE_1F1B, SK_PIPE_ZERO_BUBBLE_V};
  for (int k = 0; k < 3; k++)
    for (int p = 1; p <= 6; p++)
      for (int v = 1; v <= 3; v++)
        for (int m = p; m <= 3 * p; m += p) {
          sk_pipe_schedule s = make(p, m, scheds[k], scheds[k] == SK_PIPE_ZERO_BUBBLE_V ? 0 : v);
          sk_pipe_stats st = simulate(&s, 1, 2, 1, 0.1);
          /* No schedule beats the work, and none idles more than a fill and a drain. */
          cr_expect_geq(st.makespan, st.ideal - 1e-9);
          cr_expect_leq(st.makespan, st.ideal + 2 * p * (4 + 0.1) * s.chunks, "%s p %d v %d m %d: %g",
                        sk_pipe_scheduler_name(scheds[k]), p, v, m, st.makespan);
          sk_pipe_schedule_free(&s);
        }
}

Test(pipeline, link_cost_delays_the_pipeline) {
  /* One micro-batch on two stages is a chain: F, link, F, B, link, B. */
  sk_pipe_schedule s = make(2, 2, SK_PIPE_GPIPE, 0);
  sk_pipe_schedule_free(&s);
  s = make(2, 1, SK_PIPE_GPIPE, 0);
  sk_pipe_stats st = simulate(&s, 1, 2, 0, 0.5);
  cr_expect_float_eq(st.makespan, 1 + 0.5 + 1 + 2 + 0.5 + 2, 1e-12);
  sk_pipe_schedule_free(&s);
  /* 1F1B: the fill and the drain each cross p-1 links at least; the work is unchanged. */
  s = make(4, 8, SK_PIPE_1F1B, 0);
  sk_pipe_stats free_link = simulate(&s, 1, 2, 0, 0), slow = simulate(&s, 1, 2, 0, 0.5);
  cr_expect_geq(slow.makespan, free_link.makespan + 2 * 3 * 0.5);
  for (int r = 0; r < 4; r++) cr_expect_float_eq(slow.busy[r], 24, 1e-12);
  sk_pipe_schedule_free(&s);
  /* zero_bubble_v's two chunks on one stage meet without a link: stage p-1 runs chunk 1 of a
     micro-batch right after its chunk 0 (p = 1: the whole model on one stage, no link at all). */
  s = make(1, 1, SK_PIPE_ZERO_BUBBLE_V, 0);
  st = simulate(&s, 1, 1, 1, 100);
  cr_expect_float_eq(st.makespan, 6, 1e-12);
  sk_pipe_schedule_free(&s);
}

/* ---- broken lists ------------------------------------------------------------------------------- */

Test(pipeline, a_broken_list_is_reported_not_looped_on) {
  sk_pipe_schedule s = make(2, 2, SK_PIPE_1F1B, 0);
  sk_pipe_costs c = {1, 1, 0, 0};
  sk_pipe_stats st;
  sk_error e;
  /* Stage 1 waits for B0 before running F0: a deadlock. */
  sk_pipe_action a0 = s.actions[1][0];
  s.actions[1][0] = s.actions[1][1], s.actions[1][1] = a0;
  EXPECT_BAD(sk_pipe_simulate(&s, &c, &st, &e), &e, "stage 0 is stuck at B0: what it waits for never runs");
  s.actions[1][1] = s.actions[1][0], s.actions[1][0] = a0;
  /* An action twice, and then one missing. */
  sk_pipe_action keep = s.actions[0][1];
  s.actions[0][1] = s.actions[0][0];
  EXPECT_BAD(sk_pipe_simulate(&s, &c, &st, &e), &e, "runs F0 twice");
  s.actions[0][1] = keep;
  s.count[0]--;
  EXPECT_BAD(sk_pipe_simulate(&s, &c, &st, &e), &e, "miss an action (B of virtual stage 0, micro-batch 1)");
  s.count[0]++;
  s.actions[0][0].kind = SK_PIPE_W; /* W in a schedule whose backward is whole */
  EXPECT_BAD(sk_pipe_simulate(&s, &c, &st, &e), &e, "stage 0 action 0 is not an action");
  s.actions[0][0].kind = SK_PIPE_F;
  c.f = -1;
  EXPECT_BAD(sk_pipe_simulate(&s, &c, &st, &e), &e, "must be >= 0");
  EXPECT_BAD(sk_pipe_simulate(NULL, &c, &st, &e), &e, "NULL");
  sk_pipe_schedule_free(&s);
  sk_pipe_schedule_free(NULL);
}

/* ---- the configuration's refusals ------------------------------------------------------------ */

Test(pipeline, bad_configurations) {
  sk_pipe_schedule s;
  sk_error e;
  sk_pipe_desc d = {.stages = 4, .micro = 2, .scheduler = SK_PIPE_1F1B, .interleave = 0};
  EXPECT_BAD(sk_pipe_schedule_make(&d, &s, &e), &e, "micro_size >= stages; micro_size 2 < stages 4");
  cr_expect_null(s.count);
  d = (sk_pipe_desc){.stages = 4, .micro = 6, .scheduler = SK_PIPE_1F1B, .interleave = 2};
  EXPECT_BAD(sk_pipe_check(&d, &e), &e, "6 is not a multiple of 4");
  d = (sk_pipe_desc){.stages = 2, .micro = 4, .scheduler = SK_PIPE_ZERO_BUBBLE_V, .interleave = 3};
  EXPECT_BAD(sk_pipe_check(&d, &e), &e, "interleave 3 is not 2");
  d = (sk_pipe_desc){.stages = -1, .micro = 4, .scheduler = SK_PIPE_GPIPE, .interleave = 0};
  EXPECT_BAD(sk_pipe_check(&d, &e), &e, "stages -1 outside 1..512");
  d = (sk_pipe_desc){.stages = 2, .micro = -3, .scheduler = SK_PIPE_GPIPE, .interleave = 0};
  EXPECT_BAD(sk_pipe_check(&d, &e), &e, "micro_size -3");
  d = (sk_pipe_desc){.stages = 2, .micro = 4, .scheduler = SK_PIPE_GPIPE, .interleave = -2};
  EXPECT_BAD(sk_pipe_check(&d, &e), &e, "interleave -2");
  d = (sk_pipe_desc){.stages = 2, .micro = 4, .scheduler = (sk_pipe_scheduler)7, .interleave = 0};
  EXPECT_BAD(sk_pipe_check(&d, &e), &e, "unknown scheduler 7");
  cr_expect_eq(sk_pipe_bubble_formula(&d), -1);
  EXPECT_BAD(sk_pipe_check(NULL, &e), &e, "NULL");
  EXPECT_BAD(sk_pipe_schedule_make(&d, NULL, &e), &e, "NULL");
  /* A zero desc is one stage, one micro-batch. */
  d = (sk_pipe_desc){.stages = 0, .micro = 0, .scheduler = SK_PIPE_1F1B, .interleave = 0};
  s = make(0, 0, SK_PIPE_1F1B, 0);
  expect_stage(&s, 0, "F0 B0");
  sk_pipe_schedule_free(&s);
}

Test(pipeline, scheduler_names) {
  sk_pipe_scheduler k;
  sk_error e;
  for (int i = 0; i < (int)SK_PIPE_SCHEDULER_COUNT; i++) {
    cr_assert_eq(sk_pipe_scheduler_parse(sk_pipe_scheduler_name((sk_pipe_scheduler)i), &k, &e), SK_OK);
    cr_expect_eq((int)k, i);
  }
  cr_expect_str_eq(sk_pipe_scheduler_name(SK_PIPE_1F1B), "1f1b");
  EXPECT_BAD(sk_pipe_scheduler_parse("seqpipe", &k, &e), &e, "'seqpipe' is not one of 1f1b, gpipe, zero_bubble_v");
  EXPECT_BAD(sk_pipe_scheduler_parse(NULL, &k, &e), &e, "NULL");
  cr_expect_str_eq(sk_pipe_scheduler_name((sk_pipe_scheduler)9), "?");
}

Test(pipeline, format_truncates_like_snprintf) {
  sk_pipe_schedule s = make(2, 2, SK_PIPE_GPIPE, 0);
  char small[6];
  size_t n = sk_pipe_format_stage(&s, 0, small, sizeof small);
  cr_expect_eq(n, strlen("F0 F1 B0 B1"));
  cr_expect_str_eq(small, "F0 F1");
  cr_expect_eq(sk_pipe_format_stage(&s, 0, NULL, 0), n);
  cr_expect_eq(sk_pipe_format_stage(&s, 2, small, sizeof small), 0);
  cr_expect_eq(sk_pipe_virtual_stage(&s, 2, 0), -1);
  cr_expect_eq(sk_pipe_stage_of(&s, 2, NULL), -1);
  sk_pipe_schedule_free(&s);
}

/* ---- the balanced cut ---------------------------------------------------------------------- */

/* The heaviest part of the best cut, by trying every cut (small n). */
static double best_by_brute_force(const double *w, int n, int k, int i, int part, double heaviest) {
  if (i == n) return part <= k ? heaviest : 1e300;
  if (part >= k) return 1e300;
  double best = 1e300, load = 0;
  for (int j = i; j < n; j++) {
    load += w[j];
    double h = load > heaviest ? load : heaviest;
    double r = best_by_brute_force(w, n, k, j + 1, part + 1, h);
    best = r < best ? r : best;
  }
  return best;
}

Test(pipeline, partition_is_optimal_and_fills_every_part) {
  unsigned seed = 7;
  for (int trial = 0; trial < 400; trial++) {
    int n = 1 + trial % 9, k = 1 + (trial / 9) % 5, part[16];
    double w[16];
    for (int i = 0; i < n; i++) seed = seed * 1103515245u + 12345u, w[i] = (double)(seed >> 16 & 63);
    cr_assert_eq(sk_pipe_partition(w, n, k, part, NULL), SK_OK);
    double load[16] = {0}, heaviest = 0;
    for (int i = 0; i < n; i++) {
      cr_assert(part[i] >= 0 && part[i] < k && (i == 0 || part[i] >= part[i - 1]), "trial %d: not contiguous", trial);
      load[part[i]] += w[i];
    }
    for (int j = 0; j < k; j++) heaviest = load[j] > heaviest ? load[j] : heaviest;
    double want = best_by_brute_force(w, n, k < n ? k : n, 0, 0, 0);
    cr_expect_float_eq(heaviest, want, 1e-9, "trial %d: n %d k %d heaviest %g, best %g", trial, n, k, heaviest, want);
    /* Every part holds an item while there are items enough. */
    int used = part[n - 1] + 1;
    cr_expect_eq(used, k < n ? k : n, "trial %d: %d parts used of %d", trial, used, k);
  }
}

Test(pipeline, partition_refusals) {
  double w[2] = {1, -1};
  int part[2];
  sk_error e;
  EXPECT_BAD(sk_pipe_partition(w, 2, 2, part, &e), &e, "weight 1 (-1) must be >= 0");
  EXPECT_BAD(sk_pipe_partition(w, 2, 0, part, &e), &e, "k >= 1");
  EXPECT_BAD(sk_pipe_partition(NULL, 2, 1, part, &e), &e, "needs weights");
  cr_expect_eq(sk_pipe_partition(w, 0, 3, part, &e), SK_OK); /* nothing to cut */
}
