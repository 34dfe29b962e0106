/* comm_test_util.h -- helpers shared by the collective suites (tests/test_comm_*.c).

   The rules the suites follow:
   - Device (worker) threads never call cr_assert. Each rank records into its own ct_slot (a
     failure count, the first failure's text, the first non-OK result); the test's own thread
     asserts with ct_expect_slots() after sk_world_run returns or the threads are joined.
   - Expected values come from the reference reductions below, written independently of the
     library: every rank's input is a pure function of (seed, rank, index), so any rank can compute
     what a collective must produce without looking at its peers' buffers. The library's
     sk_reduce_local is never the oracle for a collective.
   - Reference numeric rules (sk_comm.h): reduce rank 0, 1, ..., n-1 left to right; integer sum
     and prod wrap (computed unsigned); avg = sum / n, for integers the wrapped sum (as the signed
     or unsigned type) divided by n with truncation toward zero; f16/bf16 accumulate in f32 and
     are rounded once (avg divides in f32 before that rounding); NaN propagates through min/max.

   Static inline helpers only: every test file includes this header. A program that is not a
   Criterion suite (the MPI driver, tests/mpi/mpi_driver.c) defines CT_NO_CRITERION first: it
   keeps the slots, patterns, reference and comparisons, and drops the few helpers that assert. */
#ifndef COMM_TEST_UTIL_H
#define COMM_TEST_UTIL_H

#ifndef CT_NO_CRITERION
#include <criterion/criterion.h>
#endif
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shardkit.h"
#include "sk_comm.h"    /* already in shardkit.h; harmless, and keeps these helpers standalone */
#include "sk_threads.h"

#define CT_MAX_RANKS 256
#define CT_MSG 400
#define CT_PAD 64 /* guard bytes after every buffer, checked after each collective */
#define CT_PAD_BYTE 0xA5
#define CT_JUNK_BYTE 0x5A /* fills output buffers before a collective */
#define CT_TIMEOUT_MS 10000u /* world timeout in the suites: a hang becomes SK_ERR_TIMEOUT fast */

#if defined(__GNUC__) || defined(__clang__)
#define CT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CT_PRINTF(a, b)
#endif

/* ---- per-rank result slots ------------------------------------------------------------------ */

typedef struct ct_slot {
  int ran;        /* the device function reached its end */
  int nfail;      /* failed checks */
  long nchecks;   /* checks made (so a test can tell it actually checked something) */
  sk_result rc;   /* first non-OK result a call returned */
  char msg[CT_MSG]; /* the first failure */
} ct_slot;

static inline CT_PRINTF(2, 3) void ct_fail(ct_slot *s, const char *fmt, ...) {
  if (s->nfail++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
  }
}

/* Records a check: true when ok. */
static inline CT_PRINTF(3, 4) bool ct_check(ct_slot *s, bool ok, const char *fmt, ...) {
  s->nchecks++;
  if (!ok && s->nfail++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
  }
  return ok;
}

/* Records a call's result; true when SK_OK. */
static inline bool ct_rc(ct_slot *s, sk_result r, const sk_comm *c, const char *what) {
  s->nchecks++;
  if (r == SK_OK) return true;
  if (s->rc == SK_OK) s->rc = r;
  ct_fail(s, "%s returned %s: %s", what, sk_result_name(r), c ? sk_comm_error_message(c) : "");
  return false;
}

#ifndef CT_NO_CRITERION
static inline ct_slot *ct_slots_new(int n) {
  ct_slot *s = (ct_slot *)calloc((size_t)n, sizeof(ct_slot));
  cr_assert_not_null(s, "calloc of %d slots", n);
  return s;
}

/* Test-thread side: every rank ran to the end, with no failure and no error. */
static inline void ct_expect_slots(const ct_slot *s, int n, const char *label) {
  for (int r = 0; r < n; r++) {
    cr_expect(s[r].nfail == 0 && s[r].rc == SK_OK, "%s: rank %d: %d failed checks (rc %s); first: %s", label, r,
              s[r].nfail, sk_result_name(s[r].rc), s[r].msg);
    cr_expect(s[r].ran, "%s: rank %d did not reach the end of its device function", label, r);
  }
}
#endif /* CT_NO_CRITERION */

/* ---- worlds --------------------------------------------------------------------------------- */

/* STREAM: force_large with a 1-byte cache, so every collective writes with streaming stores */
enum { CT_CFG_DEFAULT = 0, CT_CFG_LARGE = 1, CT_CFG_SMALL4K = 2, CT_CFG_STREAM = 3, CT_NCFG = 4 };
static const char *const ct_cfg_names[CT_NCFG] = {"default", "force_large", "small_bytes=4096", "stream"};

static inline sk_threads_config *ct_cfg(int which) {
  static sk_threads_config cfgs[CT_NCFG];
  memset(&cfgs[which], 0, sizeof cfgs[which]);
  if (which == CT_CFG_LARGE) cfgs[which].force_large = true;
  if (which == CT_CFG_SMALL4K) cfgs[which].small_bytes = 4096;
  if (which == CT_CFG_STREAM) cfgs[which].force_large = true, cfgs[which].cache_bytes = 1;
  return &cfgs[which];
}

#ifndef CT_NO_CRITERION
/* A threads world of n devices (asserts on the test thread that creation worked). */
static inline sk_world *ct_world(int n, int cfg, uint32_t timeout_ms) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = n;
  d.timeout_ms = timeout_ms ? timeout_ms : CT_TIMEOUT_MS;
  d.backend = sk_threads_backend();
  d.backend_config = cfg == CT_CFG_DEFAULT ? NULL : ct_cfg(cfg);
  sk_world *w = NULL;
  sk_error err;
  memset(&err, 0, sizeof err);
  sk_result r = sk_world_create(&d, &w, &err);
  cr_assert_eq(r, SK_OK, "sk_world_create(n=%d, cfg=%s): %s: %s", n, ct_cfg_names[cfg], sk_result_name(r), err.msg);
  cr_assert_not_null(w);
  return w;
}

/* Runs fn on a fresh world and asserts (test thread) that sk_world_run returned SK_OK. */
static inline void ct_run(int n, int cfg, sk_device_fn fn, void *arg, const char *label) {
  sk_world *w = ct_world(n, cfg, 0);
  cr_assert_eq(sk_world_size(w), n);
  sk_result r = sk_world_run(w, fn, arg, NULL);
  cr_expect_eq(r, SK_OK, "%s: sk_world_run returned %s: %s", label, sk_result_name(r), sk_world_error_message(w));
  sk_world_destroy(w, NULL);
}
#endif /* CT_NO_CRITERION */

static inline void ct_sleep_ms(unsigned ms) {
  uint64_t end = sk_now_ns() + (uint64_t)ms * 1000000u;
  while (sk_now_ns() < end) {
#if defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 199309L
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
#endif
  }
}

/* sk_test where "not done yet" may come back as SK_OK or SK_ERR_IN_PROGRESS (sk_comm.h does not
   pin the code; the threads backend returns SK_ERR_IN_PROGRESS): both mean keep polling. */
static inline sk_result ct_test(sk_request **req, bool *done) {
  *done = false;
  sk_result r = sk_test(req, done, NULL);
  if (!*done && r == SK_ERR_IN_PROGRESS) r = SK_OK;
  return r;
}

static inline double ct_ms_since(uint64_t t0) { return (double)(sk_now_ns() - t0) / 1e6; }

/* ---- deterministic input patterns ----------------------------------------------------------- */

static inline uint64_t ct_mix(uint64_t x) { /* splitmix64 */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline uint64_t ct_hash(uint64_t seed, int rank, size_t i) {
  return ct_mix(ct_mix(seed) ^ ct_mix(((uint64_t)(unsigned)rank << 40) ^ (uint64_t)i));
}

/* Patterns: which values a rank contributes. */
enum {
  CT_PAT_SUM = 0, /* floats: random sign, a full random mantissa of the type's own precision and
                     exponents spread so widely that the f32 (f64) accumulation rounds: the sum
                     depends on the order, so only rank 0..N-1 left to right matches */
  CT_PAT_PROD,    /* floats: from {1, -1, 2, 0.5, 1.25, -0.75, 1.5, -2} (no zeros) */
  CT_PAT_MINMAX,  /* floats: m * 2^e, |m| <= 15, e in -6..6 (ties between ranks happen) */
  CT_PAT_MOVE,    /* floats: m * 2^e, |m| <= 1000, e in -4..4 (many distinct values) */
  CT_PAT_RAND,    /* floats: random sign, full 24-bit f32 mantissa, 2^-10..2^20 (sums round) */
  CT_PAT_EXACT    /* floats: +-2^k, k in [-2, 2], and a NaN now and then (1 in 97). A sum of up
                     to 16 of them is a multiple of 1/4 no larger than 64 and a product is +-2^K,
                     |K| <= 32: exact in f32 and f64 whatever the order (f16 and bf16 accumulate
                     in f32 and round once), so a backend that reduces in its own order (MPI's
                     default mode) must still match the reference bit for bit */
};
/* Integers always take the full range of their type: sums and products wrap. */

static inline int ct_pat_for(sk_redop op) {
  return op == SK_PROD ? CT_PAT_PROD : (op == SK_MIN || op == SK_MAX) ? CT_PAT_MINMAX : CT_PAT_SUM;
}

/* 2^e, exact for every e the patterns use (ldexp scales by a power of two without rounding). */
static inline double ct_pow2(int e) { return ldexp(1.0, e); }

/* Stores a double as dt (floats; f16/bf16 via the library's exact round-to-nearest-even). */
static inline void ct_store_f(sk_dtype dt, void *out, double v) {
  switch (dt) {
    case SK_F32: { float f = (float)v; memcpy(out, &f, 4); break; }
    case SK_F64: memcpy(out, &v, 8); break;
    case SK_F16: { uint16_t h = sk_f32_to_f16((float)v); memcpy(out, &h, 2); break; }
    case SK_BF16: { uint16_t h = sk_f32_to_bf16((float)v); memcpy(out, &h, 2); break; }
    default: break;
  }
}

/* Stores an integer value (wrapped to dt's width). */
static inline void ct_store_i(sk_dtype dt, void *out, uint64_t u) {
  switch (dt) {
    case SK_I8: case SK_U8: { uint8_t x = (uint8_t)u; memcpy(out, &x, 1); break; }
    case SK_I32: { uint32_t x = (uint32_t)u; memcpy(out, &x, 4); break; }
    case SK_I64: memcpy(out, &u, 8); break;
    default: break;
  }
}

/* Loads any dtype as a double (for messages and float references). */
static inline double ct_load_f(sk_dtype dt, const void *p) {
  switch (dt) {
    case SK_F32: { float f; memcpy(&f, p, 4); return f; }
    case SK_F64: { double d; memcpy(&d, p, 8); return d; }
    case SK_F16: { uint16_t h; memcpy(&h, p, 2); return sk_f16_to_f32(h); }
    case SK_BF16: { uint16_t h; memcpy(&h, p, 2); return sk_bf16_to_f32(h); }
    case SK_I8: { int8_t x; memcpy(&x, p, 1); return x; }
    case SK_U8: { uint8_t x; memcpy(&x, p, 1); return x; }
    case SK_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case SK_I64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    default: return 0;
  }
}

/* One element of rank's input at index i. */
static inline void ct_gen(sk_dtype dt, int pat, uint64_t seed, int rank, size_t i, void *out) {
  uint64_t h = ct_hash(seed, rank, i);
  if (!sk_dtype_is_float(dt)) {
    ct_store_i(dt, out, h);
    return;
  }
  double v;
  switch (pat) {
    case CT_PAT_PROD: {
      static const double t[8] = {1, -1, 2, 0.5, 1.25, -0.75, 1.5, -2};
      v = t[h & 7u];
      break;
    }
    case CT_PAT_MOVE: v = (double)((int)(h % 2001u) - 1000) * ct_pow2((int)((h >> 16) % 9u) - 4); break;
    case CT_PAT_RAND:
      v = (double)((h >> 40) | 0x800000u) * ct_pow2((int)((h >> 8) % 31u) - 10 - 23) * ((h & 1u) ? -1.0 : 1.0);
      break;
    case CT_PAT_MINMAX: v = (double)((int)(h % 31u) - 15) * ct_pow2((int)((h >> 8) % 13u) - 6); break;
    case CT_PAT_EXACT: v = h % 97u == 5u ? NAN : ((h >> 7) & 1u ? -1.0 : 1.0) * ct_pow2((int)((h >> 9) % 5u) - 2); break;
    default: { /* CT_PAT_SUM: mantissa bits p, exponent in [lo, lo + span) */
      int p = dt == SK_F64 ? 53 : dt == SK_F32 ? 24 : dt == SK_F16 ? 11 : 8;
      int lo = dt == SK_F16 ? -14 : -20, span = dt == SK_F16 ? 23 : 41; /* f16: |sum of 64| < 65504 */
      uint64_t mant = (ct_mix(h) >> (64 - p)) | (1ull << (p - 1));
      v = (double)mant * ct_pow2((int)((h >> 8) % (uint64_t)span) + lo - (p - 1)) * ((h & 1u) ? -1.0 : 1.0);
      break;
    }
  }
  ct_store_f(dt, out, v);
}

static inline void ct_fill(sk_dtype dt, int pat, uint64_t seed, int rank, size_t first_index, void *buf, size_t n) {
  size_t es = sk_dtype_size(dt);
  for (size_t i = 0; i < n; i++) ct_gen(dt, pat, seed, rank, first_index + i, (char *)buf + i * es);
}

/* ---- the reference reduction (independent of sk_reduce_local) -------------------------------- */

#define CT_ISNAN(x) ((x) != (x))

static inline float ct_fop32(float a, float b, sk_redop op) {
  switch (op) {
    case SK_PROD: return a * b;
    case SK_MIN: return CT_ISNAN(a) ? a : CT_ISNAN(b) ? b : (b < a ? b : a);
    case SK_MAX: return CT_ISNAN(a) ? a : CT_ISNAN(b) ? b : (b > a ? b : a);
    default: return a + b;
  }
}
static inline double ct_fop64(double a, double b, sk_redop op) {
  switch (op) {
    case SK_PROD: return a * b;
    case SK_MIN: return CT_ISNAN(a) ? a : CT_ISNAN(b) ? b : (b < a ? b : a);
    case SK_MAX: return CT_ISNAN(a) ? a : CT_ISNAN(b) ? b : (b > a ? b : a);
    default: return a + b;
  }
}

/* Integers: sum/prod in uint64_t (wrapping; the low bits equal the narrow type's wrap), min/max
   compared as the signed or unsigned value; avg = (wrapped sum as the type) / n, truncated. */
#define CT_REF_INT(T, U)                                                                          \
  do {                                                                                            \
    T v0;                                                                                         \
    memcpy(&v0, src[0], sizeof v0);                                                               \
    uint64_t acc = (uint64_t)(U)v0;                                                               \
    T m = v0;                                                                                     \
    for (int r = 1; r < n; r++) {                                                                 \
      T v;                                                                                        \
      memcpy(&v, src[r], sizeof v);                                                               \
      uint64_t b = (uint64_t)(U)v;                                                                \
      if (op == SK_PROD) acc = acc * b;                                                           \
      else acc = acc + b;                                                                         \
      if (op == SK_MIN && v < m) m = v;                                                           \
      if (op == SK_MAX && v > m) m = v;                                                           \
    }                                                                                             \
    T res;                                                                                        \
    if (op == SK_MIN || op == SK_MAX) res = m;                                                    \
    else if (op == SK_AVG) {                                                                      \
      T s = (T)(U)acc;                                                                            \
      res = (T)((int64_t)s / (int64_t)n); /* C division truncates toward zero */                 \
    } else res = (T)(U)acc;                                                                       \
    memcpy(dst, &res, sizeof res);                                                                \
  } while (0)

/* dst = op over src[0..n-1] (one element each), left to right, with the numeric rules. */
static inline void ct_ref_reduce1(void *dst, const void *const *src, int n, sk_dtype dt, sk_redop op) {
  switch (dt) {
    case SK_F32: {
      float a, b;
      memcpy(&a, src[0], 4);
      for (int r = 1; r < n; r++) {
        memcpy(&b, src[r], 4);
        a = ct_fop32(a, b, op);
      }
      if (op == SK_AVG) a = a / (float)n;
      memcpy(dst, &a, 4);
      break;
    }
    case SK_F64: {
      double a, b;
      memcpy(&a, src[0], 8);
      for (int r = 1; r < n; r++) {
        memcpy(&b, src[r], 8);
        a = ct_fop64(a, b, op);
      }
      if (op == SK_AVG) a = a / (double)n;
      memcpy(dst, &a, 8);
      break;
    }
    case SK_F16:
    case SK_BF16: {
      uint16_t h;
      memcpy(&h, src[0], 2);
      float a = dt == SK_F16 ? sk_f16_to_f32(h) : sk_bf16_to_f32(h);
      for (int r = 1; r < n; r++) {
        memcpy(&h, src[r], 2);
        a = ct_fop32(a, dt == SK_F16 ? sk_f16_to_f32(h) : sk_bf16_to_f32(h), op);
      }
      if (op == SK_AVG) a = a / (float)n;
      h = dt == SK_F16 ? sk_f32_to_f16(a) : sk_f32_to_bf16(a); /* rounded once */
      memcpy(dst, &h, 2);
      break;
    }
    case SK_I8: CT_REF_INT(int8_t, uint8_t); break;
    case SK_U8: CT_REF_INT(uint8_t, uint8_t); break;
    case SK_I32: CT_REF_INT(int32_t, uint32_t); break;
    case SK_I64: CT_REF_INT(int64_t, uint64_t); break;
    default: break;
  }
}

/* Reference over whole buffers: dst[i] = op over bufs[r][i]. */
static inline void ct_ref_reduce(void *dst, const void *const *bufs, int n, size_t count, sk_dtype dt, sk_redop op) {
  size_t es = sk_dtype_size(dt);
  const void *src[CT_MAX_RANKS];
  for (size_t i = 0; i < count; i++) {
    for (int r = 0; r < n; r++) src[r] = (const char *)bufs[r] + i * es;
    ct_ref_reduce1((char *)dst + i * es, src, n, dt, op);
  }
}

/* Expected reduction of the generated inputs: out[k] = op over ranks of gen(r, first_index + k). */
static inline void ct_ref_gen(void *out, sk_dtype dt, sk_redop op, int pat, uint64_t seed, int n, size_t first_index,
                              size_t count) {
  size_t es = sk_dtype_size(dt);
  unsigned char elems[CT_MAX_RANKS][8];
  const void *src[CT_MAX_RANKS];
  for (int r = 0; r < n; r++) src[r] = elems[r];
  for (size_t k = 0; k < count; k++) {
    for (int r = 0; r < n; r++) ct_gen(dt, pat, seed, r, first_index + k, elems[r]);
    ct_ref_reduce1((char *)out + k * es, src, n, dt, op);
  }
}

/* ---- comparing ------------------------------------------------------------------------------- */

/* Bitwise equality, except that any NaN equals any NaN (payloads are not part of the contract). */
static inline bool ct_elem_eq(sk_dtype dt, const void *a, const void *b) {
  size_t es = sk_dtype_size(dt);
  if (memcmp(a, b, es) == 0) return true;
  if (sk_dtype_is_float(dt)) {
    double x = ct_load_f(dt, a), y = ct_load_f(dt, b);
    return CT_ISNAN(x) && CT_ISNAN(y);
  }
  return false;
}

static inline void ct_elem_str(sk_dtype dt, const void *p, char *buf, size_t cap) {
  switch (dt) {
    case SK_F32: { uint32_t u; memcpy(&u, p, 4); snprintf(buf, cap, "%.9g [0x%08x]", ct_load_f(dt, p), (unsigned)u); break; }
    case SK_F64: { uint64_t u; memcpy(&u, p, 8); snprintf(buf, cap, "%.17g [0x%016llx]", ct_load_f(dt, p), (unsigned long long)u); break; }
    case SK_F16: case SK_BF16: { uint16_t u; memcpy(&u, p, 2); snprintf(buf, cap, "%.6g [0x%04x]", ct_load_f(dt, p), (unsigned)u); break; }
    case SK_I64: { int64_t x; memcpy(&x, p, 8); snprintf(buf, cap, "%lld", (long long)x); break; }
    default: snprintf(buf, cap, "%.0f", ct_load_f(dt, p)); break;
  }
}

/* Compares n elements; on mismatch records "<ctx>: <what>: k/n wrong, first [i] expected X got Y".
   Returns true when all match. */
static inline bool ct_cmp(ct_slot *s, const char *ctx, const char *what, sk_dtype dt, const void *got,
                          const void *expected, size_t n) {
  size_t es = sk_dtype_size(dt), bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!ct_elem_eq(dt, (const char *)got + i * es, (const char *)expected + i * es)) {
      if (bad++ == 0) first = i;
    }
  s->nchecks++;
  if (bad) {
    char e[64], g[64];
    ct_elem_str(dt, (const char *)expected + first * es, e, sizeof e);
    ct_elem_str(dt, (const char *)got + first * es, g, sizeof g);
    ct_fail(s, "%s: %s: %zu/%zu elements wrong, first [%zu] expected %s got %s", ctx, what, bad, n, first, e, g);
  }
  return bad == 0;
}

/* ---- buffers with guard bytes ------------------------------------------------------------------ */

/* nbytes + CT_PAD guard bytes (CT_PAD_BYTE); the body is filled with CT_JUNK_BYTE. */
static inline unsigned char *ct_buf(size_t nbytes) {
  unsigned char *p = (unsigned char *)malloc(nbytes + CT_PAD);
  if (!p) return NULL;
  memset(p, CT_JUNK_BYTE, nbytes);
  memset(p + nbytes, CT_PAD_BYTE, CT_PAD);
  return p;
}

static inline bool ct_pad_ok(const unsigned char *p, size_t nbytes) {
  for (size_t i = 0; i < CT_PAD; i++)
    if (p[nbytes + i] != CT_PAD_BYTE) return false;
  return true;
}

static inline bool ct_all_bytes(const unsigned char *p, size_t nbytes, unsigned char v) {
  for (size_t i = 0; i < nbytes; i++)
    if (p[i] != v) return false;
  return true;
}

static const sk_dtype ct_all_dtypes[] = {SK_F32, SK_F64, SK_F16, SK_BF16, SK_I8, SK_U8, SK_I32, SK_I64};
static const sk_redop ct_all_ops[] = {SK_SUM, SK_PROD, SK_MIN, SK_MAX, SK_AVG};
#define CT_NDTYPES ((int)(sizeof ct_all_dtypes / sizeof ct_all_dtypes[0]))
#define CT_NOPS ((int)(sizeof ct_all_ops / sizeof ct_all_ops[0]))

#endif /* COMM_TEST_UTIL_H */
