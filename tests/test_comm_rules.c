/* test_comm_rules.c -- the numeric rules of sk_comm.h, on the threads backend and in
   sk_reduce_local:
   - integer sums and products wrap (computed unsigned);
   - avg = sum / group size: integers truncate toward zero (negative values too), f16/bf16
     accumulate and divide in f32 and round once;
   - NaN propagates through min and max, whichever rank holds it, at any position;
   - determinism: the same f32 AllReduce gives the same bits on every run and equals the
     left-to-right reduction rank 0..N-1.
   Hand-written expected values; the reference of comm_test_util.h only where the inputs are
   generated. Device threads record, the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>

#include "shardkit.h"
#include "comm_test_util.h"

/* ---- hand-written vectors ----------------------------------------------------------------------- */

typedef struct vcase {
  const char *name;
  sk_dtype dt;
  sk_redop op;
  int n;
  size_t count;
  const void *in[5];
  const void *expect;
} vcase;

/* integer sums wrap */
static const int8_t i8s_0[] = {127, -128, 100, -100, 0, 1, -1}, i8s_1[] = {1, -1, 100, -100, 0, 127, -128};
static const int8_t i8s_x[] = {-128, 127, -56, 56, 0, -128, 127};
static const uint8_t u8s_0[] = {255, 200, 128, 0, 1}, u8s_1[] = {1, 100, 128, 0, 255}, u8s_x[] = {0, 44, 0, 0, 0};
static const int32_t i32s_0[] = {INT32_MAX, INT32_MIN, 2000000000, -5}, i32s_1[] = {1, -1, 2000000000, 5};
static const int32_t i32s_x[] = {INT32_MIN, INT32_MAX, -294967296, 0};
static const int64_t i64s_0[] = {INT64_MAX, INT64_MIN, 1, -3}, i64s_1[] = {1, -1, INT64_MAX, 3};
static const int64_t i64s_x[] = {INT64_MIN, INT64_MAX, INT64_MIN, 0};
/* three ranks: wrap happens in the middle of the left-to-right sum and unwraps again */
static const int8_t i8s3_0[] = {100, -100}, i8s3_1[] = {100, -100}, i8s3_2[] = {-100, 100}, i8s3_x[] = {100, -100};
static const uint8_t u8s3_0[] = {250, 5}, u8s3_1[] = {10, 0}, u8s3_2[] = {0, 255}, u8s3_x[] = {4, 4};

/* integer products wrap */
static const int8_t i8p_0[] = {64, -128, 16, -1, 127}, i8p_1[] = {2, -1, 16, -128, 127};
static const int8_t i8p_x[] = {-128, -128, 0, -128, 1};
static const uint8_t u8p_0[] = {16, 255, 3}, u8p_1[] = {16, 255, 86}, u8p_x[] = {0, 1, 2};
static const int32_t i32p_0[] = {65536, INT32_MIN, 46341, -3}, i32p_1[] = {65536, -1, 46341, 7};
static const int32_t i32p_x[] = {0, INT32_MIN, -2147479015, -21};
static const int64_t i64p_0[] = {INT64_MIN, 4294967296LL, 3037000500LL, -5}, i64p_1[] = {-1, 4294967296LL, 3037000500LL, 5};
static const int64_t i64p_x[] = {INT64_MIN, 0, -9223372036709301616LL, -25};

/* integer avg truncates toward zero, after the wrapping sum */
static const int32_t i32a_0[] = {-7, 7, -1, -3, 5, INT32_MAX, INT32_MIN}, i32a_1[] = {0, 0, 0, -4, 4, 1, -1};
static const int32_t i32a_x[] = {-3, 3, 0, -3, 4, -1073741824, 1073741823};
static const int8_t i8a_0[] = {-7, 100, -128, 7}, i8a_1[] = {0, 100, 0, -8}, i8a_x[] = {-3, -28, -64, 0};
static const uint8_t u8a_0[] = {255, 255, 7}, u8a_1[] = {0, 1, 0}, u8a_x[] = {127, 0, 3};
static const int64_t i64a_0[] = {-8, INT64_MAX, 5, -1, INT64_MIN}, i64a_1[] = {0, 0, 5, -1, 0},
                     i64a_2[] = {0, 0, 5, 0, 0};
static const int64_t i64a_x[] = {-2, 3074457345618258602LL, 5, 0, -3074457345618258602LL};
static const int8_t i8a3_0[] = {-7, -128, 127}, i8a3_1[] = {-1, -128, 127}, i8a3_2[] = {0, 0, 127};
static const int8_t i8a3_x[] = {-2, 0, 41};

/* f16 / bf16: accumulate in f32, round once. Values filled in by init_half() (need conversions). */
static uint16_t f16_3[3][3], f16_3x_sum[3], f16_3x_avg[3];
static uint16_t bf16_3[3][2], bf16_3x_sum[2], bf16_3x_avg[2];
static uint16_t f16_2[2][2], f16_2x_avg[2];

static void init_half(void) {
  /* element 0: 2048 + 1 + 1 = 2050 (exact in f16; rounding each step gives 2048), avg 683.33 -> 683.5
     element 1: 0.1 + 0.2 + 0.3 in f16 inputs; element 2: -1 + 0.000977 (2^-10) + 2^-11 */
  const float a[3][3] = {{2048.0f, 0.1f, -1.0f}, {1.0f, 0.2f, 0.0009765625f}, {1.0f, 0.3f, 0.00048828125f}};
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < 3; i++) f16_3[r][i] = sk_f32_to_f16(a[r][i]);
  for (int i = 0; i < 3; i++) {
    float s = sk_f16_to_f32(f16_3[0][i]) + sk_f16_to_f32(f16_3[1][i]) + sk_f16_to_f32(f16_3[2][i]);
    f16_3x_sum[i] = sk_f32_to_f16(s);
    f16_3x_avg[i] = sk_f32_to_f16(s / 3.0f);
  }
  /* bf16: 256 + 1 + 1 = 258 (exact in bf16; each-step rounding gives 256), avg 86;
     element 1: 1 + 2^-8 + 2^-8 = 1.0078125 (each step: 1) */
  const float b[3][2] = {{256.0f, 1.0f}, {1.0f, 0.00390625f}, {1.0f, 0.00390625f}};
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < 2; i++) bf16_3[r][i] = sk_f32_to_bf16(b[r][i]);
  bf16_3x_sum[0] = sk_f32_to_bf16(258.0f), bf16_3x_avg[0] = sk_f32_to_bf16(86.0f);
  bf16_3x_sum[1] = sk_f32_to_bf16(1.0078125f), bf16_3x_avg[1] = sk_f32_to_bf16(1.0078125f / 3.0f);
  /* f16 avg of 65504 and 65504: the f32 sum 131008 is fine, in f16 it would overflow to inf */
  f16_2[0][0] = f16_2[1][0] = sk_f32_to_f16(65504.0f);
  f16_2[0][1] = sk_f32_to_f16(-65504.0f), f16_2[1][1] = sk_f32_to_f16(-65504.0f);
  f16_2x_avg[0] = sk_f32_to_f16(65504.0f), f16_2x_avg[1] = sk_f32_to_f16(-65504.0f);
}

static vcase vcases[] = {
    {"i8 sum wraps", SK_I8, SK_SUM, 2, 7, {i8s_0, i8s_1}, i8s_x},
    {"u8 sum wraps", SK_U8, SK_SUM, 2, 5, {u8s_0, u8s_1}, u8s_x},
    {"i32 sum wraps", SK_I32, SK_SUM, 2, 4, {i32s_0, i32s_1}, i32s_x},
    {"i64 sum wraps (INT64_MAX + 1)", SK_I64, SK_SUM, 2, 4, {i64s_0, i64s_1}, i64s_x},
    {"i8 sum wraps mid-way (3 ranks)", SK_I8, SK_SUM, 3, 2, {i8s3_0, i8s3_1, i8s3_2}, i8s3_x},
    {"u8 sum wraps mid-way (3 ranks)", SK_U8, SK_SUM, 3, 2, {u8s3_0, u8s3_1, u8s3_2}, u8s3_x},
    {"i8 prod wraps", SK_I8, SK_PROD, 2, 5, {i8p_0, i8p_1}, i8p_x},
    {"u8 prod wraps", SK_U8, SK_PROD, 2, 3, {u8p_0, u8p_1}, u8p_x},
    {"i32 prod wraps", SK_I32, SK_PROD, 2, 4, {i32p_0, i32p_1}, i32p_x},
    {"i64 prod wraps (INT64_MIN * -1)", SK_I64, SK_PROD, 2, 4, {i64p_0, i64p_1}, i64p_x},
    {"i32 avg truncates toward zero", SK_I32, SK_AVG, 2, 7, {i32a_0, i32a_1}, i32a_x},
    {"i8 avg truncates toward zero (after wrapping)", SK_I8, SK_AVG, 2, 4, {i8a_0, i8a_1}, i8a_x},
    {"u8 avg", SK_U8, SK_AVG, 2, 3, {u8a_0, u8a_1}, u8a_x},
    {"i64 avg truncates toward zero (3 ranks)", SK_I64, SK_AVG, 3, 5, {i64a_0, i64a_1, i64a_2}, i64a_x},
    {"i8 avg (3 ranks, wrapping sum)", SK_I8, SK_AVG, 3, 3, {i8a3_0, i8a3_1, i8a3_2}, i8a3_x},
    {"f16 sum accumulates in f32", SK_F16, SK_SUM, 3, 3, {f16_3[0], f16_3[1], f16_3[2]}, f16_3x_sum},
    {"f16 avg accumulates and divides in f32, rounds once", SK_F16, SK_AVG, 3, 3, {f16_3[0], f16_3[1], f16_3[2]},
     f16_3x_avg},
    {"bf16 sum accumulates in f32", SK_BF16, SK_SUM, 3, 2, {bf16_3[0], bf16_3[1], bf16_3[2]}, bf16_3x_sum},
    {"bf16 avg accumulates and divides in f32, rounds once", SK_BF16, SK_AVG, 3, 2, {bf16_3[0], bf16_3[1], bf16_3[2]},
     bf16_3x_avg},
    {"f16 avg does not overflow in f16", SK_F16, SK_AVG, 2, 2, {f16_2[0], f16_2[1]}, f16_2x_avg},
};
#define NVCASES ((int)(sizeof vcases / sizeof vcases[0]))

/* The hand-written values themselves (f16 ones pinned to literal bits too). */
Test(comm_rules, vectors_agree_with_reference) {
  init_half();
  cr_assert_eq(f16_3x_sum[0], sk_f32_to_f16(2050.0f));
  cr_assert_eq(f16_3x_avg[0], sk_f32_to_f16(683.5f), "683.33 rounds to 683.5 in f16");
  cr_assert_eq(sk_f16_to_f32(f16_3x_avg[0]), 683.5f);
  cr_assert_eq(sk_bf16_to_f32(bf16_3x_sum[0]), 258.0f);
  cr_assert_eq(sk_bf16_to_f32(bf16_3x_avg[0]), 86.0f);
  for (int v = 0; v < NVCASES; v++) {
    const vcase *c = &vcases[v];
    unsigned char out[64];
    ct_ref_reduce(out, c->in, c->n, c->count, c->dt, c->op);
    cr_expect(memcmp(out, c->expect, c->count * sk_dtype_size(c->dt)) == 0, "reference disagrees on '%s'", c->name);
  }
}

typedef struct vec_arg {
  int n, cfg;
  ct_slot *slots;
} vec_arg;

enum { VAR_ALLREDUCE, VAR_ALLREDUCE_INPLACE, VAR_IALLREDUCE, VAR_REDUCE, VAR_REDUCE_SCATTER, VAR_COUNT };
static const char *const var_names[VAR_COUNT] = {"allreduce", "allreduce in-place", "iallreduce",
                                                 "reduce (root n-1)", "reduce_scatter"};

static sk_result vec_device(sk_comm *c, void *p) {
  vec_arg *a = (vec_arg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  for (int v = 0; v < NVCASES; v++) {
    const vcase *vc = &vcases[v];
    if (vc->n != n) continue;
    size_t es = sk_dtype_size(vc->dt), nb = vc->count * es;
    for (int var = 0; var < VAR_COUNT; var++) {
      char ctx[200];
      snprintf(ctx, sizeof ctx, "'%s' via %s, n=%d cfg=%s rank=%d dt=%s op=%s count=%zu", vc->name, var_names[var], n,
               ct_cfg_names[a->cfg], rank, sk_dtype_name(vc->dt), sk_redop_name(vc->op), vc->count);
      unsigned char send[8 * 64], recv[8 * 64];
      memset(recv, CT_JUNK_BYTE, sizeof recv);
      memcpy(send, vc->in[rank], nb);
      sk_result r;
      sk_request *req = NULL;
      switch (var) {
        case VAR_ALLREDUCE: r = sk_allreduce(c, send, recv, vc->count, vc->dt, vc->op, NULL); break;
        case VAR_ALLREDUCE_INPLACE:
          memcpy(recv, vc->in[rank], nb);
          r = sk_allreduce(c, recv, recv, vc->count, vc->dt, vc->op, NULL);
          break;
        case VAR_IALLREDUCE:
          r = sk_iallreduce(c, send, recv, vc->count, vc->dt, vc->op, &req, NULL);
          if (r == SK_OK) r = sk_wait(&req, NULL);
          break;
        case VAR_REDUCE: r = sk_reduce(c, send, recv, vc->count, vc->dt, vc->op, n - 1, NULL); break;
        default: /* every chunk j of send is this rank's vector: every rank's result is the vector result */
          for (int j = 0; j < n; j++) memcpy(send + (size_t)j * nb, vc->in[rank], nb);
          r = sk_reduce_scatter(c, send, recv, vc->count, vc->dt, vc->op, NULL);
          break;
      }
      if (!ct_rc(s, r, c, ctx)) return r;
      if (var != VAR_REDUCE || rank == n - 1) ct_cmp(s, ctx, "result", vc->dt, recv, vc->expect, vc->count);
    }
  }
  s->ran = 1;
  return SK_OK;
}

typedef struct param {
  int n, cfg;
} param;

ParameterizedTestParameters(comm_rules, vectors) {
  static param ps[] = {{2, CT_CFG_DEFAULT}, {3, CT_CFG_DEFAULT}, {2, CT_CFG_LARGE}, {3, CT_CFG_LARGE}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_rules, vectors, .timeout = 30) {
  init_half();
  vec_arg a = {p->n, p->cfg, ct_slots_new(p->n)};
  char lab[64];
  snprintf(lab, sizeof lab, "vectors n=%d cfg=%s", p->n, ct_cfg_names[p->cfg]);
  ct_run(p->n, p->cfg, vec_device, &a, lab);
  ct_expect_slots(a.slots, p->n, lab);
  free(a.slots);
}

/* ---- NaN through min and max ---------------------------------------------------------------------- */

static const sk_dtype float_dts[] = {SK_F32, SK_F64, SK_F16, SK_BF16};

static void store_nan(sk_dtype dt, void *p, bool negative) {
  switch (dt) {
    case SK_F32: { uint32_t u = negative ? 0xffc00000u : 0x7fc00000u; memcpy(p, &u, 4); break; }
    case SK_F64: { uint64_t u = negative ? 0xfff8000000000000ull : 0x7ff8000000000000ull; memcpy(p, &u, 8); break; }
    case SK_F16: { uint16_t u = negative ? 0xfe00u : 0x7e00u; memcpy(p, &u, 2); break; }
    default: { uint16_t u = negative ? 0xffc0u : 0x7fc0u; memcpy(p, &u, 2); break; }
  }
}

/* Input of rank r for the NaN cases: generated finite values (with +-inf at index 1 on some
   ranks), NaN at `pos` on rank `nan_rank` (and, when both_ends, also on the last rank at pos). */
static void nan_input(unsigned char *buf, sk_dtype dt, uint64_t seed, int rank, int n, size_t count, int nan_rank,
                      size_t pos, bool both_ends) {
  size_t es = sk_dtype_size(dt);
  ct_fill(dt, CT_PAT_MINMAX, seed, rank, 0, buf, count);
  if (count > 1 && rank % 2 == 1) ct_store_f(dt, buf + es, rank % 4 == 1 ? INFINITY : -INFINITY);
  if (rank == nan_rank || (both_ends && rank == n - 1)) store_nan(dt, buf + pos * es, (seed & 1) != 0);
}

typedef struct nan_arg {
  int n, cfg;
  ct_slot *slots;
} nan_arg;

static sk_result nan_device(sk_comm *c, void *p) {
  nan_arg *a = (nan_arg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  const size_t count = 7, positions[] = {0, 3, 6};
  if (n > 8) return SK_ERR_INTERNAL;
  uint64_t seed = 77;
  for (int d = 0; d < 4; d++)
    for (int o = 0; o < 2; o++)
      for (int nr = 0; nr < n; nr++)
        for (int pi = 0; pi < 3; pi++)
          for (int both = 0; both < 2; both++)
            for (int via = 0; via < 2; via++) { /* 0 allreduce, 1 reduce to root nr */
              sk_dtype dt = float_dts[d];
              sk_redop op = o ? SK_MAX : SK_MIN;
              size_t es = sk_dtype_size(dt), pos = positions[pi];
              seed++;
              unsigned char send[64], recv[64], exp[64], in[8][64];
              nan_input(send, dt, seed, rank, n, count, nr, pos, both);
              memset(recv, CT_JUNK_BYTE, sizeof recv);
              char ctx[200];
              snprintf(ctx, sizeof ctx, "%s n=%d cfg=%s rank=%d dt=%s op=%s count=7: NaN on rank %d%s at [%zu]",
                       via ? "reduce" : "allreduce", n, ct_cfg_names[a->cfg], rank, sk_dtype_name(dt),
                       sk_redop_name(op), nr, both ? " and the last rank" : "", pos);
              sk_result r = via ? sk_reduce(c, send, recv, count, dt, op, nr, NULL) : sk_allreduce(c, send, recv, count, dt, op, NULL);
              if (!ct_rc(s, r, c, ctx)) return r;
              if (via && rank != nr) continue;
              const void *src[CT_MAX_RANKS];
              for (int q = 0; q < n; q++) {
                nan_input(in[q], dt, seed, q, n, count, nr, pos, both);
                src[q] = in[q];
              }
              ct_ref_reduce(exp, src, n, count, dt, op);
              double got = ct_load_f(dt, recv + pos * es);
              ct_check(s, got != got, "%s: expected NaN at [%zu], got %g", ctx, pos, got);
              ct_cmp(s, ctx, "result", dt, recv, exp, count);
            }
  s->ran = 1;
  return SK_OK;
}

ParameterizedTestParameters(comm_rules, nan_min_max) {
  static param ps[] = {{1, CT_CFG_DEFAULT}, {2, CT_CFG_DEFAULT}, {3, CT_CFG_DEFAULT}, {5, CT_CFG_DEFAULT},
                       {2, CT_CFG_LARGE},   {3, CT_CFG_LARGE},   {5, CT_CFG_LARGE}};
  return cr_make_param_array(param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(param *p, comm_rules, nan_min_max, .timeout = 30) {
  nan_arg a = {p->n, p->cfg, ct_slots_new(p->n)};
  char lab[64];
  snprintf(lab, sizeof lab, "nan_min_max n=%d cfg=%s", p->n, ct_cfg_names[p->cfg]);
  ct_run(p->n, p->cfg, nan_device, &a, lab);
  ct_expect_slots(a.slots, p->n, lab);
  free(a.slots);
}

/* ---- determinism ---------------------------------------------------------------------------------- */

#define DET_RUNS 20
#define DET_COUNT 4099

typedef struct det_arg {
  int n, cfg;
  sk_dtype dt;
  sk_redop op;
  ct_slot *slots;
} det_arg;

static sk_result det_device(sk_comm *c, void *p) {
  det_arg *a = (det_arg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  size_t es = sk_dtype_size(a->dt), nb = DET_COUNT * es;
  unsigned char *send = ct_buf(nb), *recv = ct_buf(nb), *first = ct_buf(nb), *exp = ct_buf(nb);
  sk_result r = SK_OK;
  for (int run = 0; run < DET_RUNS; run++) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "determinism n=%d cfg=%s rank=%d dt=%s op=%s count=%d run %d", n, ct_cfg_names[a->cfg],
             rank, sk_dtype_name(a->dt), sk_redop_name(a->op), DET_COUNT, run);
    ct_fill(a->dt, CT_PAT_RAND, 4242, rank, 0, send, DET_COUNT);
    bool inplace = run % 4 == 3;
    if (inplace) memcpy(recv, send, nb);
    if (run % 5 == 4) { /* the non-blocking path must give the same bits */
      sk_request *req = NULL;
      r = sk_iallreduce(c, inplace ? recv : send, recv, DET_COUNT, a->dt, a->op, &req, NULL);
      if (r == SK_OK) r = sk_wait(&req, NULL);
    } else {
      r = sk_allreduce(c, inplace ? recv : send, recv, DET_COUNT, a->dt, a->op, NULL);
    }
    if (!ct_rc(s, r, c, ctx)) break;
    if (run == 0) {
      memcpy(first, recv, nb);
      ct_ref_gen(exp, a->dt, a->op, CT_PAT_RAND, 4242, n, 0, DET_COUNT);
      ct_cmp(s, ctx, "run 0 vs the left-to-right reduction rank 0..n-1", a->dt, recv, exp, DET_COUNT);
    } else {
      ct_check(s, memcmp(first, recv, nb) == 0, "%s: bits differ from run 0", ctx);
    }
  }
  free(send), free(recv), free(first), free(exp);
  if (r == SK_OK) s->ran = 1;
  return r;
}

typedef struct det_param {
  int n, cfg;
  sk_dtype dt;
  sk_redop op;
} det_param;

ParameterizedTestParameters(comm_rules, determinism) {
  static det_param ps[] = {
      {8, CT_CFG_DEFAULT, SK_F32, SK_SUM}, {8, CT_CFG_LARGE, SK_F32, SK_SUM}, {8, CT_CFG_SMALL4K, SK_F32, SK_SUM},
      {5, CT_CFG_DEFAULT, SK_F32, SK_SUM}, {3, CT_CFG_LARGE, SK_F32, SK_AVG}, {8, CT_CFG_DEFAULT, SK_F32, SK_PROD},
      {5, CT_CFG_DEFAULT, SK_F64, SK_SUM}, {8, CT_CFG_LARGE, SK_BF16, SK_SUM}, {5, CT_CFG_DEFAULT, SK_F16, SK_AVG},
      {16, CT_CFG_DEFAULT, SK_F32, SK_SUM}};
  return cr_make_param_array(det_param, ps, sizeof ps / sizeof ps[0]);
}
ParameterizedTest(det_param *p, comm_rules, determinism, .timeout = 30) {
  /* The inputs must make the order matter, or this test proves nothing: reversing the rank order
     changes some f32 sums. */
  if (p->dt == SK_F32 && p->op == SK_SUM) {
    int differ = 0;
    for (size_t i = 0; i < DET_COUNT; i++) {
      float fw = 0, bw = 0, v;
      for (int r = 0; r < p->n; r++) {
        ct_gen(SK_F32, CT_PAT_RAND, 4242, r, i, &v);
        fw = r ? fw + v : v;
      }
      for (int r = p->n - 1; r >= 0; r--) {
        ct_gen(SK_F32, CT_PAT_RAND, 4242, r, i, &v);
        bw = r == p->n - 1 ? v : bw + v;
      }
      differ += fw != bw;
    }
    cr_assert_gt(differ, 10, "test inputs are not order-sensitive (%d of %d sums differ)", differ, DET_COUNT);
  }
  det_arg a = {p->n, p->cfg, p->dt, p->op, ct_slots_new(p->n)};
  char lab[96];
  snprintf(lab, sizeof lab, "determinism n=%d cfg=%s dt=%s op=%s", p->n, ct_cfg_names[p->cfg], sk_dtype_name(p->dt),
           sk_redop_name(p->op));
  ct_run(p->n, p->cfg, det_device, &a, lab);
  ct_expect_slots(a.slots, p->n, lab);
  free(a.slots);
}

/* Same bits from separate worlds (fresh threads, different timing), and from ReduceScatter, whose
   slices must equal the AllReduce result's slices. */
typedef struct det2_arg {
  int n;
  unsigned char *out[8]; /* per rank: allreduce result, then its reduce_scatter slice */
  ct_slot *slots;
} det2_arg;

static sk_result det2_device(sk_comm *c, void *p) {
  det2_arg *a = (det2_arg *)p;
  int rank = sk_comm_rank(c), n = sk_comm_size(c);
  const size_t count = 3001; /* per-rank slice of the reduce_scatter */
  float *send = (float *)malloc(count * (size_t)n * sizeof(float));
  ct_fill(SK_F32, CT_PAT_RAND, 99, rank, 0, send, count * (size_t)n);
  sk_result r = sk_allreduce(c, send, a->out[rank], count * (size_t)n, SK_F32, SK_SUM, NULL);
  if (r == SK_OK)
    r = sk_reduce_scatter(c, send, a->out[rank] + count * (size_t)n * sizeof(float), count, SK_F32, SK_SUM, NULL);
  free(send);
  if (!ct_rc(&a->slots[rank], r, c, "det2")) return r;
  a->slots[rank].ran = 1;
  return SK_OK;
}

Test(comm_rules, determinism_across_worlds_and_collectives, .timeout = 30) {
  const int n = 8;
  const size_t count = 3001, tot = count * (size_t)n;
  size_t bytes = (tot + count) * sizeof(float);
  const size_t ref_bytes = tot * sizeof(float);
  unsigned char *ref = (unsigned char *)malloc(ref_bytes);
  ct_ref_gen(ref, SK_F32, SK_SUM, CT_PAT_RAND, 99, n, 0, tot);
  for (int world = 0; world < 4; world++) {
    det2_arg a;
    a.n = n;
    a.slots = ct_slots_new(n);
    for (int r = 0; r < n; r++) a.out[r] = (unsigned char *)malloc(bytes);
    int cfg = world % 2 ? CT_CFG_LARGE : CT_CFG_DEFAULT;
    ct_run(n, cfg, det2_device, &a, "determinism_across_worlds");
    ct_expect_slots(a.slots, n, "determinism_across_worlds");
    for (int r = 0; r < n; r++) {
      cr_expect(memcmp(a.out[r], ref, ref_bytes) == 0,
                "world %d cfg=%s rank %d: allreduce bits differ from the left-to-right reference", world,
                ct_cfg_names[cfg], r);
      cr_expect(memcmp(a.out[r] + tot * sizeof(float), ref + (size_t)r * count * sizeof(float),
                       count * sizeof(float)) == 0,
                "world %d cfg=%s rank %d: reduce_scatter slice differs from the allreduce/reference slice", world,
                ct_cfg_names[cfg], r);
      free(a.out[r]);
    }
    free(a.slots);
  }
  free(ref);
}

/* ---- sk_reduce_local ------------------------------------------------------------------------------ */

Test(comm_rules, reduce_local_matches_reference, .timeout = 30) {
  static const int ns[] = {1, 2, 3, 8, 64};
  static const size_t counts[] = {0, 1, 7, 1024, 1025, 3001};
  size_t maxc = 3001;
  for (int d = 0; d < CT_NDTYPES; d++)
    for (int o = 0; o < CT_NOPS; o++)
      for (int ni = 0; ni < 5; ni++)
        for (int ci = 0; ci < 6; ci++) {
          sk_dtype dt = ct_all_dtypes[d];
          sk_redop op = ct_all_ops[o];
          int n = ns[ni];
          size_t count = counts[ci], es = sk_dtype_size(dt);
          if (n == 64 && count > 1025) continue;
          int pat = (count == 1025 && sk_dtype_is_float(dt) && op != SK_PROD) ? CT_PAT_RAND : ct_pat_for(op);
          uint64_t seed = 31u * (uint64_t)(d * 1000 + o * 100 + ni * 10 + ci);
          unsigned char *bufs[64];
          const void *srcs[64];
          for (int r = 0; r < n; r++) {
            bufs[r] = ct_buf(maxc * es);
            ct_fill(dt, pat, seed, r, 0, bufs[r], count);
            srcs[r] = bufs[r];
          }
          unsigned char *dst = ct_buf(maxc * es), *exp = ct_buf(maxc * es);
          ct_ref_reduce(exp, srcs, n, count, dt, op);
          sk_result rc = sk_reduce_local(count ? dst : NULL, srcs, n, count, dt, op, NULL);
          cr_expect_eq(rc, SK_OK, "reduce_local n=%d dt=%s op=%s count=%zu: %s", n, sk_dtype_name(dt),
                       sk_redop_name(op), count, sk_result_name(rc));
          ct_slot s;
          memset(&s, 0, sizeof s);
          char ctx[96];
          snprintf(ctx, sizeof ctx, "reduce_local n=%d dt=%s op=%s count=%zu", n, sk_dtype_name(dt), sk_redop_name(op),
                   count);
          ct_cmp(&s, ctx, "dst", dt, dst, exp, count);
          cr_expect(ct_pad_ok(dst, maxc * es), "%s: wrote past dst", ctx);
          cr_expect(ct_all_bytes(dst + count * es, maxc * es - count * es, CT_JUNK_BYTE), "%s: wrote past count", ctx);
          /* dst may alias srcs[0] */
          if (count) {
            rc = sk_reduce_local(bufs[0], srcs, n, count, dt, op, NULL);
            cr_expect_eq(rc, SK_OK);
            ct_cmp(&s, ctx, "dst aliasing srcs[0]", dt, bufs[0], exp, count);
          }
          cr_expect_eq(s.nfail, 0, "%s", s.msg);
          for (int r = 0; r < n; r++) free(bufs[r]);
          free(dst), free(exp);
        }
}

Test(comm_rules, reduce_local_rules) {
  /* the hand-written vectors through sk_reduce_local */
  init_half();
  for (int v = 0; v < NVCASES; v++) {
    const vcase *c = &vcases[v];
    unsigned char out[64];
    cr_assert_eq(sk_reduce_local(out, c->in, c->n, c->count, c->dt, c->op, NULL), SK_OK, "%s", c->name);
    ct_slot s;
    memset(&s, 0, sizeof s);
    ct_cmp(&s, c->name, "sk_reduce_local", c->dt, out, c->expect, c->count);
    cr_expect_eq(s.nfail, 0, "%s", s.msg);
  }
  /* NaN in the last input, for every float type */
  for (int d = 0; d < 4; d++) {
    sk_dtype dt = float_dts[d];
    unsigned char a[8], b[8], c3[8], out[8];
    ct_store_f(dt, a, 1.0);
    ct_store_f(dt, b, -2.0);
    store_nan(dt, c3, false);
    const void *srcs[3] = {a, b, c3};
    for (int o = 0; o < 2; o++) {
      sk_redop op = o ? SK_MAX : SK_MIN;
      cr_assert_eq(sk_reduce_local(out, srcs, 3, 1, dt, op, NULL), SK_OK);
      double g = ct_load_f(dt, out);
      cr_expect(g != g, "reduce_local %s %s: NaN in the last input lost (got %g)", sk_dtype_name(dt), sk_redop_name(op),
                g);
    }
  }
  /* f32 sum is left to right: (1e8 + 1) - 1e8 == 0, but 1 + (1e8 - 1e8) would be 1 */
  float x[3] = {1e8f, 1.0f, -1e8f}, y;
  const void *sx[3] = {&x[0], &x[1], &x[2]};
  cr_assert_eq(sk_reduce_local(&y, sx, 3, 1, SK_F32, SK_SUM, NULL), SK_OK);
  cr_expect_eq(y, 0.0f, "f32 sum not left to right: got %g", (double)y);
}

Test(comm_rules, reduce_local_invalid_arguments) {
  float a = 1, b = 2, out = 0;
  const void *srcs[2] = {&a, &b};
  const void *bad[2] = {&a, NULL};
  cr_expect_eq(sk_reduce_local(&out, srcs, 2, 1, (sk_dtype)99, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce_local(&out, srcs, 2, 1, (sk_dtype)-1, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce_local(&out, srcs, 2, 1, SK_F32, (sk_redop)SK_REDOP_COUNT, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce_local(&out, srcs, 0, 1, SK_F32, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce_local(&out, NULL, 2, 1, SK_F32, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce_local(NULL, srcs, 2, 1, SK_F32, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_reduce_local(&out, bad, 2, 1, SK_F32, SK_SUM, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(out, 0.0f, "a failed call wrote dst");
  cr_expect_eq(sk_reduce_local(NULL, bad, 2, 0, SK_F32, SK_SUM, NULL), SK_OK, "count 0 needs no buffers");
}

/* Integer avg with many inputs: the divisor is the input count, not the count squeezed into the
   element type. 200 i8 inputs summing to 100 average to 0 (100 / 200), not 100 / (int8_t)200 = -1;
   256 u8 inputs must not divide by (uint8_t)256 == 0. (Worlds go up to 256 devices and more.) */
Test(comm_rules, reduce_local_int_avg_many_inputs, .timeout = 10) {
  int8_t in8[256];
  uint8_t inu[256];
  const void *s8[256], *su[256];
  for (int r = 0; r < 256; r++) {
    in8[r] = (int8_t)(r == 0 ? 100 : 0);
    inu[r] = (uint8_t)(r < 2 ? 128 : 0); /* sum 256 wraps to 0 */
    s8[r] = &in8[r], su[r] = &inu[r];
  }
  int8_t o8 = 55;
  cr_assert_eq(sk_reduce_local(&o8, s8, 200, 1, SK_I8, SK_AVG, NULL), SK_OK);
  cr_expect_eq(o8, 0, "i8 avg over 200 inputs summing to 100: expected 0, got %d", o8);
  int8_t e8;
  ct_ref_reduce1(&e8, s8, 200, SK_I8, SK_AVG);
  cr_expect_eq(e8, 0);
  inu[0] = 200, inu[1] = 0;
  uint8_t ou = 55;
  cr_assert_eq(sk_reduce_local(&ou, su, 256, 1, SK_U8, SK_AVG, NULL), SK_OK);
  cr_expect_eq(ou, 0, "u8 avg over 256 inputs summing to 200: expected 0, got %d", ou);
  int32_t in32[300];
  const void *s32[300];
  for (int r = 0; r < 300; r++) in32[r] = -1, s32[r] = &in32[r];
  int32_t o32 = 0;
  cr_assert_eq(sk_reduce_local(&o32, s32, 300, 1, SK_I32, SK_AVG, NULL), SK_OK);
  cr_expect_eq(o32, -1, "i32 avg over 300 inputs of -1: got %d", o32);
}
