/* make_npy -- writes NumPy .npy files (version 1.0, C order, little-endian) without Python: the
   data the networks read through their "data" object (docs/network-json.md), which `make`
   writes under build/data/ (the Makefile's NPY_DATA), e.g. tests/nets/npy.json's:

     build/make_npy --out build/data/npy/x.npy --dtype f32 --shape 40,2,4 --fill normal --seed 3
     build/make_npy --out build/data/npy/label.npy --dtype i64 --shape 40 --fill classes:4 --seed 3

   Fills: iota (0, 1, 2, ... in row-major order), normal (N(0, 1)), uniform ([0, 1)),
   classes:K (integers uniform in [0, K)); each a function of --seed and the element's index
   (splitmix64), so a file is the same on every machine. --truncate N drops the file's last N
   bytes (a damaged file, for testing the readers' refusals). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progs.h"
#include "sk_core.h"

typedef struct options {
  const char *out;
  sk_dtype dtype;
  int ndims;
  long long shape[9];
  const char *fill;
  long classes;
  uint64_t seed;
  long truncate;
} options;

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "Usage: %s --out FILE.npy --dtype f32|f64|i32|i64 --shape N[,D...] [--fill iota|normal|uniform|classes:K]\n"
          "          [--seed K] [--truncate BYTES]\n"
          "Writes a NumPy .npy file (version 1.0, C order, little-endian) of that dtype and shape.\n"
          "  --shape N,D,...   dim 0 counts the samples (0 allowed), at most 9 dims\n"
          "  --fill F          iota (default), normal, uniform or classes:K (integers in [0, K))\n"
          "  --seed K          the random fills' seed (default 1)\n"
          "  --truncate BYTES  drop the last BYTES bytes (a damaged file, for testing readers)\n",
          prog_name(argv0));
}

static uint64_t mix(uint64_t z) { /* splitmix64 */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double unit(uint64_t seed, uint64_t i) { return (double)(mix(mix(seed) + i) >> 11) / 9007199254740992.0; }

/* Element i's value. */
static double value(const options *o, uint64_t i) {
  if (!strcmp(o->fill, "iota")) return (double)i;
  if (!strcmp(o->fill, "uniform")) return unit(o->seed, i);
  if (!strcmp(o->fill, "normal"))
    return sqrt(-2.0 * log(1.0 - unit(o->seed, 2 * i))) * cos(6.283185307179586 * unit(o->seed, 2 * i + 1));
  return o->classes > 0 ? (double)(mix(mix(o->seed) + i) % (uint64_t)o->classes) : 0; /* classes: checked > 0 */
}

/* The file's bytes go through here: at most `left` more are written (--truncate). */
typedef struct writer {
  FILE *f;
  uint64_t left;
  bool failed;
} writer;

static void emit(writer *w, const void *b, size_t n) {
  size_t k = n < w->left ? n : (size_t)w->left;
  if (k && fwrite(b, 1, k, w->f) != k) w->failed = true;
  w->left -= k;
}

/* One element in the file's dtype, little-endian whatever the host. */
static void put(writer *w, sk_dtype dt, double v) {
  unsigned char b[8];
  uint64_t u = 0;
  size_t n = sk_dtype_size(dt);
  if (dt == SK_F32) { float x = (float)v; uint32_t word; memcpy(&word, &x, 4); u = word; }
  else if (dt == SK_F64) memcpy(&u, &v, 8);
  else if (dt == SK_I32) u = (uint32_t)(int32_t)v;
  else u = (uint64_t)(int64_t)v;
  for (size_t k = 0; k < n; k++) b[k] = (unsigned char)(u >> (8 * k));
  emit(w, b, n);
}

/* The header into h (*len bytes): magic, version 1.0, its length, the dict padded with spaces
   and a newline so that the data starts at a multiple of 64 bytes, as numpy.save writes it. */
static void header(const options *o, unsigned char *h, size_t *len) {
  static const char *const descr[] = {[SK_F32] = "<f4", [SK_F64] = "<f8", [SK_I32] = "<i4", [SK_I64] = "<i8"};
  char *dict = (char *)h + 10;
  int n = snprintf(dict, 400, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr[o->dtype]);
  for (int d = 0; d < o->ndims; d++) n += snprintf(dict + n, 400 - (size_t)n, "%s%lld", d ? ", " : "", o->shape[d]);
  n += snprintf(dict + n, 400 - (size_t)n, "%s), }", o->ndims == 1 ? "," : "");
  size_t dl = (size_t)n + 1;
  while ((10 + dl) % 64) dl++;
  memset(dict + n, ' ', dl - (size_t)n - 1), dict[dl - 1] = '\n';
  memcpy(h, "\x93NUMPY\x01\x00", 8), h[8] = (unsigned char)(dl & 0xff), h[9] = (unsigned char)(dl >> 8);
  *len = 10 + dl;
}

/* --shape N,D,...: at most 9 dims, each 0..2^31 (dim 0) or 1..2^31, 2^31 elements in all. */
static int parse_shape(const char *v, options *o) {
  long double total = 1;
  for (const char *at = v;;) {
    char tok[24];
    size_t n = strcspn(at, ",");
    long x = 0;
    if (o->ndims == 9 || n == 0 || n >= sizeof tok) return -1;
    memcpy(tok, at, n), tok[n] = 0;
    if (!prog_parse_long_in(tok, o->ndims ? 1 : 0, 1L << 31, &x)) return -1;
    o->shape[o->ndims++] = x, total *= x;
    if (!at[n]) break;
    at += n + 1;
  }
  return total <= 2147483648.0L ? 0 : -1;
}

static int parse_fill(const char *v, options *o) {
  if (!strcmp(v, "iota") || !strcmp(v, "normal") || !strcmp(v, "uniform")) return o->fill = v, 0;
  if (strncmp(v, "classes:", 8) || !prog_parse_long_in(v + 8, 1, 1L << 31, &o->classes)) return -1;
  o->fill = "classes";
  return 0;
}

/* One option with its value: 0, 2 after a usage error, -1 when unknown. */
static int parse_one(const char *argv0, const char *a, const char *v, options *o) {
  if (!strcmp(a, "--out")) {
    const char *why = prog_path_problem(v, 0);
    if (why) return prog_bad_usage(argv0, why, v);
    o->out = v;
  } else if (!strcmp(a, "--dtype")) {
    if (!sk_dtype_from_name(v, &o->dtype) || (o->dtype != SK_F32 && o->dtype != SK_F64 && o->dtype != SK_I32 && o->dtype != SK_I64))
      return prog_bad_usage(argv0, "--dtype takes f32, f64, i32 or i64", v);
  } else if (!strcmp(a, "--shape")) {
    if (parse_shape(v, o)) return prog_bad_usage(argv0, "--shape takes N,D,... (at most 9 dims >= 1, dim 0 >= 0, 2^31 elements)", v);
  } else if (!strcmp(a, "--fill")) {
    if (parse_fill(v, o)) return prog_bad_usage(argv0, "--fill takes iota, normal, uniform or classes:K", v);
  } else if (!strcmp(a, "--seed")) {
    if (!prog_parse_u64_in(v, 0, UINT64_MAX, &o->seed)) return prog_bad_usage(argv0, "--seed takes 0..18446744073709551615", v);
  } else if (!strcmp(a, "--truncate")) {
    if (!prog_parse_long_in(v, 1, 1L << 40, &o->truncate)) return prog_bad_usage(argv0, "--truncate takes a byte count >= 1", v);
  } else return -1;
  return 0;
}

/* 0: go on; 1: --help printed; 2: bad usage. */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->dtype = SK_BF16, o->fill = "iota", o->seed = 1; /* bf16: no --dtype given */
  for (int i = 1; i < argc; i += 2) { /* every option takes a value */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (prog_is_help(a)) return usage(stdout, argv[0]), 1;
    int rc = v ? parse_one(argv[0], a, v, o) : -1;
    if (rc < 0) return prog_bad_usage(argv[0], v ? "unknown option" : "unknown option or missing value", a);
    if (rc) return rc;
  }
  if (!o->out || o->dtype == SK_BF16 || !o->ndims) return prog_bad_usage(argv[0], "--out, --dtype and --shape are required", NULL);
  if ((o->dtype == SK_I32 || o->dtype == SK_I64) && strcmp(o->fill, "iota") && strcmp(o->fill, "classes"))
    return prog_bad_usage(argv[0], "an integer file takes --fill iota or classes:K", o->fill);
  return 0;
}

int main(int argc, char **argv) {
  options o;
  int code = parse_options(argc, argv, &o);
  if (code) return code == 1 ? 0 : code;
  unsigned char h[512];
  size_t hlen = 0;
  header(&o, h, &hlen);
  uint64_t n = 1;
  for (int d = 0; d < o.ndims; d++) n *= (uint64_t)o.shape[d];
  uint64_t size = hlen + n * sk_dtype_size(o.dtype);
  if ((uint64_t)o.truncate > size) {
    char msg[96];
    snprintf(msg, sizeof msg, "--truncate: the file has %llu bytes", (unsigned long long)size);
    return prog_bad_usage(argv[0], msg, NULL);
  }
  writer w = {fopen(o.out, "wb"), size - (uint64_t)o.truncate, false};
  if (!w.f) return fprintf(stderr, "%s: %s: cannot create\n", prog_name(argv[0]), o.out), 1;
  emit(&w, h, hlen);
  for (uint64_t i = 0; !w.failed && w.left && i < n; i++) put(&w, o.dtype, value(&o, i));
  if ((fclose(w.f) != 0) | w.failed) return fprintf(stderr, "%s: %s: cannot write\n", prog_name(argv[0]), o.out), 1;
  return 0;
}
