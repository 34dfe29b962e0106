/* Recomputation without a pipeline (sk_runtime.h, sk_parallel_recomputed): the outputs of the
   operators flagged `recompute` are freed after their last forward use and computed again, by
   their operators' forward steps, before the backward uses them.

   Each case runs a network twice on N device threads, flagged and not, and checks that
   - the losses are bitwise the same, and the flagged run matches the single-device trainer
     within the suites' f64 tolerance (tests/runtime_harness.h);
   - the peak activation bytes (sk_runtime_memory) drop by what the plan says: a recomputed
     output is held only from its operator's Forward to its last forward use (and again around
     the backward steps that use it), so the peak loses every flagged output but the most held
     at once. On the tutorial's chain, relu1's output reaches fc2 through a move (fc2's own
     buffer), so relu1's and fc2's outputs are never held together: the saving is the smaller of
     the two. Where fc2 reads relu1's output in place (no strategies: one device), both are
     held during fc2's Forward and the peak cannot drop;
   - nothing leaks (a counting allocator);
   - Dropout recomputed draws the same mask (the same seed, operator and step);
   - a flagged operator that recomputes nothing says why (sk_parallel_recompute_refusal). */
#include <criterion/criterion.h>

#include "runtime_harness.h"

static int op_named(const sk_graph *g, const char *name) {
  for (int o = 0; o < g->nops; o++)
    if (!strcmp(g->ops[o].name, name)) return o;
  cr_assert_fail("no operator '%s'", name);
  return -1;
}

static uint64_t out_bytes(const run *R, int o) { /* f64 runs: 8 bytes an element */
  return (uint64_t)sk_parallel_slice_count(&R->plan, R->n->g.ops[o].outputs[0]) * 8;
}

/* The tutorial's chain on N >= 2; on one device the same chain without strategies. */
static void build_chain(net *n, int N) {
  if (N >= 2) build_mlp(n, N);
  else build_dp(n, N);
}

/* Runs the network build(N) makes, with the operators of `flags` (NULL-terminated) flagged,
   into *R (the plan's knobs: `knobs`, NULL: the defaults; counting, checked against the trainer). */
static void run_flagged_knobs(run *R, net *n, build_fn build, int N, sk_dtype dt, const char *const *flags,
                              const sk_autoparallel *knobs, const char *what) {
  build(n, N);
  for (int i = 0; flags && flags[i]; i++) n->g.ops[op_named(&n->g, flags[i])].recompute = true;
  run_init_knobs(R, n, N, dt, sgd(0.5), 4, knobs);
  R->counting = true;
  run_world(R);
  expect_all_ok(R, what);
  against_trainer(R, dt == SK_F64 ? TOL64 : F32_TOL, what);
  for (int d = 0; d < N; d++) cr_assert_eq(R->dev[d].blocks_after, 0, "%s: device %d leaked %ld blocks", what, d, R->dev[d].blocks_after);
}

static void run_flagged(run *R, net *n, build_fn build, int N, sk_dtype dt, const char *const *flags, const char *what) {
  run_flagged_knobs(R, n, build, N, dt, flags, NULL, what);
}

static void expect_same_losses(const run *A, const run *B, const char *what) {
  for (int d = 0; d < A->ndev; d++)
    for (int s = 0; s < A->nsteps; s++)
      cr_assert(!memcmp(&A->dev[d].loss[s], &B->dev[d].loss[s], sizeof(double)), "%s: device %d step %d: loss %.17g, flagged %.17g",
                what, d, s, A->dev[d].loss[s], B->dev[d].loss[s]);
}

Test(recompute, chain_peak_and_losses, .timeout = RT_TIMEOUT) {
  static const char *const flags[] = {"relu1", "fc2", NULL};
  static const int counts[3] = {1, 2, 8};
  for (int c = 0; c < 3; c++) {
    int N = counts[c];
    static net n0, n1;
    static run plain, flagged;
    run_flagged(&plain, &n0, build_chain, N, SK_F64, NULL, "the chain");
    run_flagged(&flagged, &n1, build_chain, N, SK_F64, flags, "the chain, relu1 and fc2 recomputed");
    expect_same_losses(&plain, &flagged, "relu1 and fc2 recomputed");
    int relu1 = op_named(&n1.g, "relu1"), fc2 = op_named(&n1.g, "fc2");
    cr_assert(sk_parallel_recomputed(&flagged.plan, n1.g.ops[relu1].outputs[0]) &&
              sk_parallel_recomputed(&flagged.plan, n1.g.ops[fc2].outputs[0]));
    uint64_t a = out_bytes(&flagged, relu1), b = out_bytes(&flagged, fc2);
    bool apart = flagged.plan.ops[fc2].moved[0]; /* fc2 reads relu1's output through a move */
    cr_assert_eq(apart, N > 1);
    uint64_t saving = apart ? (a < b ? a : b) : 0;
    for (int d = 0; d < N; d++) {
      uint64_t p0 = plain.dev[d].mem_end.peak_activations, p1 = flagged.dev[d].mem_end.peak_activations;
      cr_assert_eq(p1 + saving, p0, "%d devices, device %d: peak activations %llu, flagged %llu (relu1 %llu, fc2 %llu bytes)", N, d,
                   (unsigned long long)p0, (unsigned long long)p1, (unsigned long long)a, (unsigned long long)b);
      if (N > 1) cr_assert_lt(p1, p0);
      /* between steps the flagged outputs hold nothing */
      cr_assert_eq(flagged.dev[d].mem_end.activations + a + b, plain.dev[d].mem_end.activations);
    }
    run_free(&plain), run_free(&flagged);
    sk_graph_free(&n0.g), sk_graph_free(&n1.g);
  }
}

/* One device: relu1 and relu2 are never held together (fc2's output lies between). */
/* The logits' operator flagged: evaluation scores the logits its forward has just computed
   (held until evaluate returns), as many correct rows as the single-device trainer counts. */
Test(recompute, logits_evaluated, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  const char *const flags[] = {"z", "relu2", NULL};
  run_flagged(&R, &n, build_mlp, 4, SK_F64, flags, "z and relu2 recomputed");
  cr_assert(R.evaluate && sk_parallel_recomputed(&R.plan, n.g.logits), "the logits are not recomputed");
  for (int d = 0; d < R.ndev; d++) cr_assert_eq(R.dev[d].rows, 16, "device %d evaluated %lld rows", d, (long long)R.dev[d].rows);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(recompute, one_device_apart, .timeout = RT_TIMEOUT) {
  static const char *const flags[] = {"relu1", "relu2", NULL};
  static net n0, n1;
  static run plain, flagged;
  run_flagged(&plain, &n0, build_dp, 1, SK_F64, NULL, "data parallel chain");
  run_flagged(&flagged, &n1, build_dp, 1, SK_F64, flags, "data parallel chain, ReLUs recomputed");
  expect_same_losses(&plain, &flagged, "ReLUs recomputed");
  uint64_t a = out_bytes(&flagged, op_named(&n1.g, "relu1")), b = out_bytes(&flagged, op_named(&n1.g, "relu2"));
  cr_assert_eq(flagged.dev[0].mem_end.peak_activations + (a < b ? a : b), plain.dev[0].mem_end.peak_activations);
  run_free(&plain), run_free(&flagged);
  sk_graph_free(&n0.g), sk_graph_free(&n1.g);
}

/* f32, 8 devices: the same bits too. */
Test(recompute, f32_same_bits, .timeout = RT_TIMEOUT) {
  static const char *const flags[] = {"relu1", "fc2", "relu2", NULL};
  static net n0, n1;
  static run plain, flagged;
  run_flagged(&plain, &n0, build_mlp, 8, SK_F32, NULL, "the chain, f32");
  run_flagged(&flagged, &n1, build_mlp, 8, SK_F32, flags, "the chain, f32, recomputed");
  expect_same_losses(&plain, &flagged, "f32, recomputed");
  run_free(&plain), run_free(&flagged);
  sk_graph_free(&n0.g), sk_graph_free(&n1.g);
}

/* Dropout recomputed draws its mask again: the same mask (same seed, operator and step). */
Test(recompute, dropout_same_mask, .timeout = RT_TIMEOUT) {
  static const char *const flags[] = {"h", "drop", NULL};
  for (int N = 2; N <= 8; N *= 4) {
    static net n0, n1;
    static run plain, flagged;
    run_flagged(&plain, &n0, build_dropout, N, SK_F64, NULL, "dropout");
    run_flagged(&flagged, &n1, build_dropout, N, SK_F64, flags, "dropout recomputed");
    expect_same_losses(&plain, &flagged, "dropout recomputed");
    run_free(&plain), run_free(&flagged);
    sk_graph_free(&n0.g), sk_graph_free(&n1.g);
  }
}

/* Optimizer parallel level3 (every threshold: w1 and w2 sharded): a recomputed MatMul's forward
   gathers its weight again and releases it, but not the weight its backward has gathered. */
Test(recompute, hsdp_level3, .timeout = RT_TIMEOUT) {
  static const char *const flags[] = {"fc1", "relu1", "fc2", NULL};
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  sk_hsdp h = SK_HSDP_DEFAULTS;
  pd.hsdp = h, pd.hsdp.threshold_kb = 0, pd.hsdp.level = SK_HSDP_LEVEL3;
  static net n0, n1;
  static run plain, flagged;
  run_flagged_knobs(&plain, &n0, build_mlp, 8, SK_F64, NULL, &pd, "hsdp level3");
  run_flagged_knobs(&flagged, &n1, build_mlp, 8, SK_F64, flags, &pd, "hsdp level3, recomputed");
  expect_same_losses(&plain, &flagged, "hsdp level3, recomputed");
  run_free(&plain), run_free(&flagged);
  sk_graph_free(&n0.g), sk_graph_free(&n1.g);
}

/* Every allocation of the first step failing in turn on one device (the recomputed outputs'
   buffers among them): that device fails with SK_ERR_OUT_OF_MEMORY in the step, the others
   with it, and nothing stays allocated. */
Test(recompute, step_allocation_failures, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  build_mlp(&n, 2);
  n.g.ops[op_named(&n.g, "relu1")].recompute = n.g.ops[op_named(&n.g, "fc2")].recompute = true;
  run_init(&R, &n, 2, SK_F64, sgd(0.5), 2);
  R.counting = true, R.evaluate = false, R.fail_phase = FAIL_IN_STEP, R.fail_rank = 1;
  bool recomputing = false;
  long k = 1;
  for (;; k++) {
    R.fail_at = k;
    run_world(&R);
    const dev_out *f = &R.dev[1];
    if (!f->cnt.refused) break;
    cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "k = %ld: %s in %s (%s)", k, sk_result_name(f->rc), f->where, f->msg);
    cr_assert_str_eq(f->where, "step", "k = %ld: %s", k, f->msg);
    recomputing |= strstr(f->msg, "out of memory for 'relu1'") != NULL;
    expect_all_failed_clean(&R, k, "recomputed chain");
  }
  expect_all_ok(&R, "a step allocating fewer");
  cr_assert(recomputing, "the sweep should reach the recomputed outputs' buffers (k up to %ld)", k);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* The loss's operator flagged: nothing to recompute, and the plan says why; training is as
   unflagged. An operator not flagged, or one that recomputes, has no refusal. */
Test(recompute, refusal, .timeout = RT_TIMEOUT) {
  static const char *const flags[] = {"loss", "relu1", NULL};
  static net n0, n1;
  static run plain, flagged;
  run_flagged(&plain, &n0, build_mlp, 2, SK_F64, NULL, "the chain");
  run_flagged(&flagged, &n1, build_mlp, 2, SK_F64, flags, "the chain, loss flagged");
  expect_same_losses(&plain, &flagged, "loss flagged");
  const char *why = sk_parallel_recompute_refusal(&flagged.plan, op_named(&n1.g, "loss"));
  cr_assert(why && !strcmp(why, "its output is the loss"), "refusal: %s", why ? why : "(none)");
  cr_assert_null(sk_parallel_recompute_refusal(&flagged.plan, op_named(&n1.g, "relu1")));
  cr_assert_null(sk_parallel_recompute_refusal(&flagged.plan, op_named(&n1.g, "fc2")));
  cr_assert_not(sk_parallel_recomputed(&flagged.plan, n1.g.loss));
  cr_assert_null(sk_parallel_recompute_refusal(NULL, 0));
  static char text[1 << 16]; /* the program says so on the operators' Forward */
  sk_parallel_format_program(&flagged.plan, 0, text, sizeof text);
  cr_assert(strstr(text, " Forward loss op=SoftmaxCrossEntropy out=[0:1] recompute=refused\n"), "%s", text);
  cr_assert(strstr(text, " Forward relu1 op=ReLU out=[0:16,0:16] recompute=yes\n"), "%s", text);
  cr_assert_not(sk_parallel_recomputed(&flagged.plan, -1));
  run_free(&plain), run_free(&flagged);
  sk_graph_free(&n0.g), sk_graph_free(&n1.g);
}
