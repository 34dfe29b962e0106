/* sk_core.h: f16/bf16 conversion (edge cases, every f16 pattern, a stride over all f32 patterns
   against a reference computed here in double arithmetic), dtype and redop names, result
   strings, sk_error_set. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "sk_core.h"

static float f32_of(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}
static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Nearest representable value, ties to even, in a binary format with `mant` stored mantissa bits,
   minimum normal exponent emin and largest finite value maxv; returns the encoding's bits
   without the sign. a is finite and >= 0. Works on the value in double: every f32 is exact
   there and dividing by a power of two is exact. */
static uint32_t ref_round(double a, int mant, int emin, double maxv) {
  double halfway_up = maxv + ldexp(1.0, (int)floor(log2(maxv)) - mant - 1); /* ties go to inf (even) */
  int bias = 1 - emin;
  if (a >= halfway_up) return (uint32_t)(2 * bias + 1) << mant; /* inf: exponent all ones */
  int e;
  frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) -> unbiased exponent e-1 */
  int ue = a == 0 ? emin : e - 1;
  if (ue < emin) ue = emin; /* subnormal range: fixed quantum */
  double q = ldexp(1.0, ue - mant);
  double n = a / q, fl = floor(n), diff = n - fl;
  if (diff > 0.5 || (diff == 0.5 && fmod(fl, 2.0) != 0.0)) fl += 1.0;
  /* normal: ((ue + bias - 1) << mant) + fl covers the carry into the next binade too */
  if (a < ldexp(1.0, emin)) return (uint32_t)fl;
  return ((uint32_t)(ue + bias - 1) << mant) + (uint32_t)fl;
}

static uint16_t ref_f16(float f) {
  uint32_t sign = (bits_of(f) >> 16) & 0x8000u;
  return (uint16_t)(sign | ref_round(fabs((double)f), 10, -14, 65504.0));
}
static uint16_t ref_bf16(float f) {
  uint32_t sign = (bits_of(f) >> 16) & 0x8000u;
  return (uint16_t)(sign | ref_round(fabs((double)f), 7, -126, ldexp(255.0 / 128.0, 127)));
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }
static bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }

Test(core_f16, edge_cases) {
  cr_assert_eq(sk_f32_to_f16(65504.0f), 0x7bffu, "max half");
  cr_assert_eq(sk_f32_to_f16(65519.99f), 0x7bffu, "just below the halfway point rounds down");
  cr_assert_eq(sk_f32_to_f16(65520.0f), 0x7c00u, "halfway to 2^16 rounds to inf");
  cr_assert_eq(sk_f32_to_f16(-65520.0f), 0xfc00u);
  cr_assert_eq(sk_f32_to_f16(1e10f), 0x7c00u);
  cr_assert_eq(sk_f32_to_f16(ldexpf(1.0f, -24)), 0x0001u, "smallest subnormal");
  cr_assert_eq(sk_f32_to_f16(ldexpf(1.0f, -25)), 0x0000u, "2^-25 ties to even: 0");
  cr_assert_eq(sk_f32_to_f16(-ldexpf(1.0f, -25)), 0x8000u, "-2^-25 -> -0");
  cr_assert_eq(sk_f32_to_f16(3.0f * ldexpf(1.0f, -26)), 0x0001u, "0.75 quantum rounds up");
  cr_assert_eq(sk_f32_to_f16(3.0f * ldexpf(1.0f, -25)), 0x0002u, "1.5 quanta ties to even 2");
  cr_assert_eq(sk_f32_to_f16(5.0f * ldexpf(1.0f, -25)), 0x0002u, "2.5 quanta ties to even 2");
  cr_assert_eq(sk_f32_to_f16(ldexpf(1.0f, -14)), 0x0400u, "smallest normal");
  cr_assert_eq(sk_f32_to_f16(ldexpf(1.0f, -14) - ldexpf(1.0f, -25)), 0x0400u, "rounds up into the normals");
  cr_assert_eq(sk_f32_to_f16(0.0f), 0x0000u);
  cr_assert_eq(sk_f32_to_f16(-0.0f), 0x8000u, "negative zero keeps its sign");
  cr_assert_eq(sk_f32_to_f16(1.0f), 0x3c00u);
  cr_assert_eq(sk_f32_to_f16(-2.0f), 0xc000u);
  cr_assert_eq(sk_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00u, "tie between 1 and 1+2^-10 -> even (1)");
  cr_assert_eq(sk_f32_to_f16(1.0f + 3.0f * ldexpf(1.0f, -11)), 0x3c02u, "tie -> even (1+2^-9)");
  cr_assert_eq(sk_f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01u, "above the tie rounds up");
  cr_assert_eq(sk_f32_to_f16(2048.0f + 1.0f), 0x6800u, "2049 ties to 2048");
  cr_assert_eq(sk_f32_to_f16(2048.0f + 3.0f), 0x6802u, "2051 ties to 2052");
  cr_assert_eq(sk_f32_to_f16(INFINITY), 0x7c00u);
  cr_assert_eq(sk_f32_to_f16(-INFINITY), 0xfc00u);
  cr_assert(f16_is_nan(sk_f32_to_f16(NAN)), "NaN stays NaN");
  cr_assert(f16_is_nan(sk_f32_to_f16(f32_of(0x7f800001u))), "NaN with only a low payload bit stays NaN");
  cr_assert(f16_is_nan(sk_f32_to_f16(f32_of(0xffc00000u))));
  /* back to f32 */
  cr_assert_eq(sk_f16_to_f32(0x7bffu), 65504.0f);
  cr_assert_eq(sk_f16_to_f32(0x0001u), ldexpf(1.0f, -24));
  cr_assert_eq(sk_f16_to_f32(0x03ffu), ldexpf(1023.0f, -24), "largest subnormal");
  cr_assert_eq(bits_of(sk_f16_to_f32(0x8000u)), 0x80000000u, "-0");
  cr_assert(isinf(sk_f16_to_f32(0x7c00u)) && sk_f16_to_f32(0x7c00u) > 0);
  cr_assert(isinf(sk_f16_to_f32(0xfc00u)) && sk_f16_to_f32(0xfc00u) < 0);
  cr_assert(isnan(sk_f16_to_f32(0x7e00u)));
  cr_assert(isnan(sk_f16_to_f32(0x7c01u)));
}

Test(core_bf16, edge_cases) {
  cr_assert_eq(sk_f32_to_bf16(1.0f), 0x3f80u);
  cr_assert_eq(sk_f32_to_bf16(-0.0f), 0x8000u);
  cr_assert_eq(sk_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80u, "tie -> even (1)");
  cr_assert_eq(sk_f32_to_bf16(1.0f + 3.0f * ldexpf(1.0f, -8)), 0x3f82u, "tie -> even");
  cr_assert_eq(sk_f32_to_bf16(1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -20)), 0x3f81u);
  cr_assert_eq(sk_f32_to_bf16(FLT_MAX), 0x7f80u, "FLT_MAX is past bf16's halfway point: inf");
  cr_assert_eq(sk_f32_to_bf16(f32_of(0x7f7f7fffu)), 0x7f7fu, "largest value rounding down to bf16 max");
  cr_assert_eq(sk_f32_to_bf16(f32_of(0x7f7f8000u)), 0x7f80u, "halfway to 2^128 -> inf");
  cr_assert_eq(sk_f32_to_bf16(INFINITY), 0x7f80u);
  cr_assert_eq(sk_f32_to_bf16(-INFINITY), 0xff80u);
  cr_assert(bf16_is_nan(sk_f32_to_bf16(NAN)));
  cr_assert(bf16_is_nan(sk_f32_to_bf16(f32_of(0x7f800001u))), "low-payload NaN must not become inf");
  cr_assert_eq(sk_f32_to_bf16(f32_of(0x00000001u)), 0x0000u, "f32 denormal below half a bf16 quantum");
  cr_assert_eq(sk_f32_to_bf16(f32_of(0x00008000u)), 0x0000u, "tie -> even 0");
  cr_assert_eq(sk_f32_to_bf16(f32_of(0x00018000u)), 0x0002u, "tie -> even 2");
  cr_assert_eq(sk_bf16_to_f32(0x3f80u), 1.0f);
  cr_assert(isnan(sk_bf16_to_f32(0x7fc0u)));
}

Test(core_f16, every_f16_pattern_round_trips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = sk_f16_to_f32((uint16_t)h);
    uint16_t back = sk_f32_to_f16(f);
    if (f16_is_nan((uint16_t)h)) {
      cr_assert(isnan(f), "0x%04x -> f32 must be NaN", h);
      cr_assert(f16_is_nan(back), "0x%04x NaN round trip gave 0x%04x", h, back);
      continue;
    }
    cr_assert_eq(back, h, "0x%04x -> %a -> 0x%04x", h, (double)f, back);
    /* the value itself, decoded independently */
    int e = (int)((h >> 10) & 0x1f), m = (int)(h & 0x3ff);
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    if (h & 0x8000u) v = -v;
    cr_assert_eq((double)f, v, "0x%04x decodes to %a, want %a", h, (double)f, v);
  }
}

Test(core_bf16, every_bf16_pattern_round_trips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = sk_bf16_to_f32((uint16_t)h);
    uint16_t back = sk_f32_to_bf16(f);
    if (bf16_is_nan((uint16_t)h))
      cr_assert(isnan(f) && bf16_is_nan(back), "0x%04x", h);
    else
      cr_assert_eq(back, h, "0x%04x -> 0x%04x", h, back);
  }
}

/* A stride over all 2^32 f32 patterns (an odd stride, so every exponent and mantissa region is
   visited), against the double-arithmetic reference. */
Test(core_f16, f32_stride_matches_double_reference, .timeout = 120) {
  const uint32_t stride = 1021; /* ~4.2 million patterns */
  long n = 0;
  for (uint64_t i = 7; i < (1ull << 32); i += stride) {
    uint32_t bits = (uint32_t)i;
    float f = f32_of(bits);
    uint16_t h = sk_f32_to_f16(f), b = sk_f32_to_bf16(f);
    if (isnan(f)) {
      cr_assert(f16_is_nan(h), "f16 of NaN 0x%08x gave 0x%04x", bits, h);
      cr_assert(bf16_is_nan(b), "bf16 of NaN 0x%08x gave 0x%04x", bits, b);
    } else if (isinf(f)) {
      cr_assert_eq(h, (bits >> 16 & 0x8000u) | 0x7c00u);
    } else {
      uint16_t rh = ref_f16(f), rb = ref_bf16(f);
      if (h != rh) cr_assert_fail("f16 of 0x%08x (%a): got 0x%04x, want 0x%04x", bits, (double)f, h, rh);
      if (b != rb) cr_assert_fail("bf16 of 0x%08x (%a): got 0x%04x, want 0x%04x", bits, (double)f, b, rb);
    }
    n++;
  }
  cr_assert_gt(n, 4000000);
}

Test(core_f16, reference_agrees_on_known_points) {
  /* the reference itself must be right, or the stride test proves nothing */
  cr_assert_eq(ref_f16(65504.0f), 0x7bffu);
  cr_assert_eq(ref_f16(65520.0f), 0x7c00u);
  cr_assert_eq(ref_f16(ldexpf(1.0f, -25)), 0x0000u);
  cr_assert_eq(ref_f16(3.0f * ldexpf(1.0f, -26)), 0x0001u);
  cr_assert_eq(ref_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00u);
  cr_assert_eq(ref_f16(ldexpf(1.0f, -14)), 0x0400u);
  cr_assert_eq(ref_bf16(1.0f), 0x3f80u);
  cr_assert_eq(ref_bf16(f32_of(0x7f7f8000u)), 0x7f80u);
  cr_assert_eq(ref_bf16(f32_of(0x00018000u)), 0x0002u);
}

Test(core_dtype, names_sizes_and_parsing) {
  static const struct {
    sk_dtype dt;
    const char *name, *longname;
    size_t size;
  } want[] = {{SK_F32, "f32", "float", 4},    {SK_F64, "f64", "double", 8}, {SK_F16, "f16", "half", 2},
              {SK_BF16, "bf16", "bfloat16", 2}, {SK_I8, "i8", "int8", 1},     {SK_U8, "u8", "uint8", 1},
              {SK_I32, "i32", "int32", 4},    {SK_I64, "i64", "int64", 8}};
  cr_assert_eq(SK_DTYPE_COUNT, 8);
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    cr_assert_str_eq(sk_dtype_name(want[i].dt), want[i].name);
    cr_assert_str_eq(sk_dtype_long_name(want[i].dt), want[i].longname);
    cr_assert_eq(sk_dtype_size(want[i].dt), want[i].size);
    sk_dtype got = SK_I64;
    cr_assert(sk_dtype_from_name(want[i].name, &got) && got == want[i].dt, "%s", want[i].name);
    got = SK_I64;
    cr_assert(sk_dtype_from_name(want[i].longname, &got) && got == want[i].dt, "%s", want[i].longname);
  }
  sk_dtype dt = SK_F32;
  cr_assert(!sk_dtype_from_name("f33", &dt));
  cr_assert(!sk_dtype_from_name("", &dt));
  cr_assert(!sk_dtype_from_name("f3", &dt), "a prefix is not a name");
  cr_assert(!sk_dtype_from_name("f322", &dt));
  cr_assert(!sk_dtype_from_name(NULL, &dt));
  cr_assert(!sk_dtype_from_name("f32", NULL));
  cr_assert_eq(sk_dtype_size((sk_dtype)99), 0u);
  cr_assert_eq(sk_dtype_size((sk_dtype)-1), 0u);
  cr_assert_str_eq(sk_dtype_name((sk_dtype)99), "invalid");
  cr_assert(sk_dtype_is_float(SK_BF16) && sk_dtype_is_float(SK_F64) && !sk_dtype_is_float(SK_I32));
}

Test(core_redop, names_and_parsing) {
  static const char *names[] = {"sum", "prod", "min", "max", "avg"};
  cr_assert_eq(SK_REDOP_COUNT, 5);
  for (int i = 0; i < 5; i++) {
    cr_assert_str_eq(sk_redop_name((sk_redop)i), names[i]);
    sk_redop op = SK_SUM;
    cr_assert(sk_redop_from_name(names[i], &op) && op == (sk_redop)i);
  }
  sk_redop op;
  cr_assert(!sk_redop_from_name("mean", &op));
  cr_assert(!sk_redop_from_name(NULL, &op));
  cr_assert_str_eq(sk_redop_name((sk_redop)5), "invalid");
  cr_assert(!sk_redop_valid((sk_redop)-1));
}

Test(core_result, every_code_has_a_string_and_name) {
  cr_assert_eq(SK_OK, 0);
  for (int i = 0; i < (int)SK_RESULT_COUNT; i++) {
    const char *s = sk_result_string((sk_result)i), *n = sk_result_name((sk_result)i);
    cr_assert(s && *s && strcmp(s, "unknown sk_result") != 0, "code %d", i);
    cr_assert(strncmp(n, "SK_", 3) == 0, "code %d: %s", i, n);
    for (int j = 0; j < i; j++) cr_assert_str_neq(s, sk_result_string((sk_result)j), "codes %d and %d", i, j);
  }
  cr_assert_str_eq(sk_result_string(SK_OK), "success");
  cr_assert_str_eq(sk_result_name(SK_ERR_INVALID_ARGUMENT), "SK_ERR_INVALID_ARGUMENT");
  cr_assert(strstr(sk_result_string(SK_ERR_TIMEOUT), "timeout") != NULL);
  cr_assert_str_eq(sk_result_string(SK_RESULT_COUNT), "unknown sk_result");
  cr_assert_str_eq(sk_result_string((sk_result)-1), "unknown sk_result");
  cr_assert_str_eq(sk_result_string((sk_result)1000), "unknown sk_result");
  cr_assert_str_eq(sk_result_name((sk_result)-5), "SK_ERR_UNKNOWN");
}

/* sk_error_set: the code and the formatted message land in the sk_error, the code comes back
   whatever err is, and a message longer than the buffer is cut inside it, NUL-terminated. */
Test(core_error, set_formats_truncates_and_takes_null) {
  sk_error e;
  memset(&e, 0x5a, sizeof e); /* not zeroed: sk_error_set must write every byte it relies on */
  cr_assert_eq(sk_error_set(&e, SK_ERR_INVALID_ARGUMENT, "dim %d (%lld) is not divisible by %s", 1, 784LL, "3"),
               SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(e.code, SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(e.msg, "dim 1 (784) is not divisible by 3");

  /* a second call replaces both, with no trace of the longer first message */
  cr_assert_eq(sk_error_set(&e, SK_ERR_OUT_OF_MEMORY, "%s", "oom"), SK_ERR_OUT_OF_MEMORY);
  cr_assert_eq(e.code, SK_ERR_OUT_OF_MEMORY);
  cr_assert_str_eq(e.msg, "oom");

  /* the message may quote the record it replaces (a comm's record passed as err to a call that
     words "...: %s" from the comm's message) */
  cr_assert_eq(sk_error_set(&e, SK_ERR_TIMEOUT, "runtime: step 3: %s", e.msg), SK_ERR_TIMEOUT);
  cr_assert_str_eq(e.msg, "runtime: step 3: oom");

  /* NULL err: nothing written, the code still returned */
  cr_assert_eq(sk_error_set(NULL, SK_ERR_SYSTEM, "cannot open '%s'", "x"), SK_ERR_SYSTEM);

  /* a message of 3 * SK_ERROR_MSG_MAX characters: the first SK_ERROR_MSG_MAX - 1 kept, then NUL;
     the bytes around the record stay untouched (no write past msg) */
  struct {
    sk_error e;
    char after[16];
  } guard;
  char long_name[3 * SK_ERROR_MSG_MAX + 1];
  for (size_t i = 0; i < sizeof long_name - 1; i++) long_name[i] = (char)('a' + i % 26);
  long_name[sizeof long_name - 1] = 0;
  memset(&guard, 0x5a, sizeof guard);
  cr_assert_eq(sk_error_set(&guard.e, SK_ERR_INVALID_ARGUMENT, "name '%s'", long_name), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(guard.e.code, SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(strlen(guard.e.msg), SK_ERROR_MSG_MAX - 1);
  cr_assert_eq(strncmp(guard.e.msg, "name '", 6), 0);
  cr_assert_eq(memcmp(guard.e.msg + 6, long_name, SK_ERROR_MSG_MAX - 1 - 6), 0);
  for (size_t i = 0; i < sizeof guard.after; i++) cr_assert_eq((unsigned char)guard.after[i], 0x5a, "byte %zu past msg written", i);

  /* the empty message is a valid one */
  cr_assert_eq(sk_error_set(&e, SK_ERR_SYSTEM, "%s", ""), SK_ERR_SYSTEM);
  cr_assert_eq(e.code, SK_ERR_SYSTEM);
  cr_assert_str_eq(e.msg, "");
}
