/* sk_npy.h: .npy files this suite writes itself in /tmp (NumPy's layout byte by byte, no
   Python), read back row by row: the four dtypes, versions 1.0 / 2.0 / 3.0, either quote, keys in
   any order; rows that wrap; every conversion allowed and refused; every malformed header, a
   truncated and a too long file, big shapes (refused without reading), zero samples; and each
   refusal's message naming the file and the problem. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sk_npy.h"

static char dir[64];
static char path[128];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/sk_npy_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/a.npy", dir);
}

static void remove_dir(void) {
  unlink(path);
  rmdir(dir);
}

TestSuite(npy, .init = make_dir, .fini = remove_dir, .timeout = 30);

/* Writes `path`: the magic, version major.0, the header text padded with spaces and a newline
   to a multiple of 64 (as numpy.save does), then n bytes of data. */
static void write_npy(int major, const char *header, const void *data, size_t n) {
  size_t pre = major == 1 ? 10 : 12, len = strlen(header) + 1;
  while ((pre + len) % 64) len++;
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  unsigned char p[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0,
                         (unsigned char)(len & 0xff), (unsigned char)(len >> 8 & 0xff), (unsigned char)(len >> 16 & 0xff), 0};
  cr_assert_eq(fwrite(p, 1, pre, f), pre);
  fputs(header, f);
  for (size_t k = strlen(header); k + 1 < len; k++) fputc(' ', f);
  fputc('\n', f);
  if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

/* Writes raw bytes as the whole file. */
static void write_raw(const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(bytes, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

/* Opening fails with SK_ERR_INVALID_ARGUMENT, the message naming the file and holding `word`. */
static void refused(const char *word) {
  sk_npy npy;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_npy_open(path, &npy, &e), SK_ERR_INVALID_ARGUMENT, "opened; want '%s'", word);
  cr_assert(strstr(e.msg, path) == e.msg, "message '%s' does not start with the file", e.msg);
  cr_assert(strstr(e.msg, word), "message '%s' does not hold '%s'", e.msg, word);
  cr_assert_eq(npy.fd, -1, "left open");
}

static void open_ok(sk_npy *npy) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_npy_open(path, npy, &e), SK_OK, "%s", e.msg);
}

/* ---- well-formed files ---- */

Test(npy, f32_rows_read_back_exactly) {
  float v[12];
  for (int i = 0; i < 12; i++) v[i] = (float)i * 0.25f - 1.5f;
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", v, sizeof v);
  sk_npy npy;
  open_ok(&npy);
  cr_assert_eq(npy.dtype, SK_F32);
  cr_assert_eq(npy.version, 1);
  cr_assert_eq(npy.ndims, 2);
  cr_assert_eq(npy.rows, 3);
  cr_assert_eq(npy.shape[1], 4);
  cr_assert_eq(npy.row_bytes, 16);
  cr_assert_eq(npy.offset % 64, 0);
  float got[12];
  sk_error e;
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 3, SK_F32, got, &e), SK_OK, "%s", e.msg);
  cr_assert_arr_eq(got, v, sizeof v);
  double d[4];
  cr_assert_eq(sk_npy_read_rows(&npy, 2, 1, SK_F64, d, &e), SK_OK, "%s", e.msg);
  for (int k = 0; k < 4; k++) cr_assert_eq(d[k], (double)v[8 + k]);
  sk_npy_close(&npy);
  cr_assert_eq(npy.fd, -1);
  sk_npy_close(&npy); /* twice is harmless */
}

Test(npy, rows_wrap_around) {
  int32_t v[3] = {7, 8, 9}, got[8];
  write_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", v, sizeof v);
  sk_npy npy;
  open_ok(&npy);
  cr_assert_eq(npy.ndims, 1);
  cr_assert_eq(sk_npy_read_rows(&npy, 2, 8, SK_I32, got, NULL), SK_OK);
  const int32_t want[8] = {9, 7, 8, 9, 7, 8, 9, 7};
  cr_assert_arr_eq(got, want, sizeof want);
  cr_assert_eq(sk_npy_read_rows(&npy, 3000000001LL, 2, SK_I32, got, NULL), SK_OK); /* batch b of a long run */
  cr_assert_eq(got[0], 8); /* 3000000001 % 3 == 1 */
  cr_assert_eq(got[1], 9);
  sk_npy_close(&npy);
}

Test(npy, versions_quotes_and_key_order) {
  int64_t v[4] = {-5, 0, 1LL << 40, 3};
  const char *headers[3] = {"{\"shape\": (2, 2), \"fortran_order\": False, \"descr\": \"<i8\"}",
                            "{'fortran_order':False,'descr':'<i8','shape':(2,2)}",
                            "{ 'descr' : '<i8' , 'shape' : ( 2 , 2 , ) , 'fortran_order' : False , }"};
  for (int major = 1; major <= 3; major++) {
    write_npy(major, headers[major - 1], v, sizeof v);
    sk_npy npy;
    open_ok(&npy);
    cr_assert_eq(npy.version, major);
    cr_assert_eq(npy.dtype, SK_I64);
    int64_t got[4];
    cr_assert_eq(sk_npy_read_rows(&npy, 0, 2, SK_I64, got, NULL), SK_OK);
    cr_assert_arr_eq(got, v, sizeof v);
    sk_npy_close(&npy);
  }
}

Test(npy, f64_and_conversions) {
  double v[3] = {0.1, -2.5e300, 1.0 / 3};
  write_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 1), }", v, sizeof v);
  sk_npy npy;
  open_ok(&npy);
  double d[3];
  float f[3];
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 3, SK_F64, d, NULL), SK_OK);
  cr_assert_arr_eq(d, v, sizeof v);
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 3, SK_F32, f, NULL), SK_OK);
  cr_assert_eq(f[0], (float)0.1);
  cr_assert_eq(f[2], (float)(1.0 / 3));
  int32_t i[3];
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 3, SK_I32, i, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, path) && strstr(e.msg, "f64") && strstr(e.msg, "truncated"), "%s", e.msg);
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 3, SK_U8, i, &e), SK_ERR_INVALID_ARGUMENT);
  sk_npy_close(&npy);
  cr_assert(sk_npy_convertible(SK_F32, SK_F64) && sk_npy_convertible(SK_F64, SK_F32));
  cr_assert(sk_npy_convertible(SK_I32, SK_F32) && sk_npy_convertible(SK_I64, SK_F64));
  cr_assert(sk_npy_convertible(SK_I32, SK_I64) && sk_npy_convertible(SK_I64, SK_I32));
  cr_assert(!sk_npy_convertible(SK_F32, SK_I32) && !sk_npy_convertible(SK_F64, SK_I64));
  cr_assert(!sk_npy_convertible(SK_F16, SK_F32) && !sk_npy_convertible(SK_F32, SK_BF16));
}

Test(npy, i64_into_i32_checks_the_range) {
  int64_t v[3] = {2147483647LL, -2147483648LL, 2147483648LL};
  write_npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", v, sizeof v);
  sk_npy npy;
  open_ok(&npy);
  int32_t got[3];
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 2, SK_I32, got, NULL), SK_OK);
  cr_assert_eq(got[0], INT32_MAX);
  cr_assert_eq(got[1], INT32_MIN);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 3, SK_I32, got, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, path) && strstr(e.msg, "row 2 holds 2147483648"), "%s", e.msg);
  double d[3];
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 3, SK_F64, d, NULL), SK_OK);
  cr_assert_eq(d[2], 2147483648.0);
  sk_npy_close(&npy);
}

/* A file bigger than one read chunk (64 KiB), read across the chunk boundary and wrapped. */
Test(npy, many_rows_across_chunks) {
  enum { ROWS = 3000, COLS = 7 };
  float *v = malloc(sizeof(float) * ROWS * COLS), *got = malloc(sizeof(float) * 500 * COLS);
  cr_assert(v && got);
  for (int i = 0; i < ROWS * COLS; i++) v[i] = (float)i;
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3000, 7), }", v, sizeof(float) * ROWS * COLS);
  sk_npy npy;
  open_ok(&npy);
  cr_assert_eq(sk_npy_read_rows(&npy, 2800, 500, SK_F32, got, NULL), SK_OK);
  for (int r = 0; r < 500; r++)
    for (int c = 0; c < COLS; c++) cr_assert_eq(got[r * COLS + c], v[((2800 + r) % ROWS) * COLS + c], "row %d", r);
  sk_npy_close(&npy);
  free(v), free(got);
}

Test(npy, sample_shape_checked) {
  float v[24] = {0};
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", v, sizeof v);
  sk_npy npy;
  open_ok(&npy);
  const int64_t good[2] = {3, 4}, bad[2] = {4, 3}, flat[1] = {12};
  cr_assert_eq(sk_npy_check_rows(&npy, 2, good, NULL), SK_OK);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_npy_check_rows(&npy, 2, bad, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, path) && strstr(e.msg, "shape (2, 3, 4)") && strstr(e.msg, "want (2, 4, 3)"), "%s", e.msg);
  cr_assert_eq(sk_npy_check_rows(&npy, 1, flat, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "want (2, 12)"), "%s", e.msg);
  cr_assert_eq(sk_npy_check_rows(&npy, 0, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "want (2,)"), "%s", e.msg);
  sk_npy_close(&npy);
}

Test(npy, zero_samples) {
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", NULL, 0);
  sk_npy npy;
  open_ok(&npy);
  cr_assert_eq(npy.rows, 0);
  float got[5];
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 0, SK_F32, got, NULL), SK_OK); /* nothing asked, nothing read */
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 1, SK_F32, got, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, path) && strstr(e.msg, "no samples"), "%s", e.msg);
  sk_npy_close(&npy);
}

Test(npy, format_shape) {
  char b[64];
  const int64_t s[3] = {60000, 28, 28};
  sk_npy_format_shape(3, s, b, sizeof b);
  cr_assert_str_eq(b, "(60000, 28, 28)");
  sk_npy_format_shape(1, s, b, sizeof b);
  cr_assert_str_eq(b, "(60000,)");
  sk_npy_format_shape(0, s, b, sizeof b);
  cr_assert_str_eq(b, "()");
  sk_npy_format_shape(3, s, b, 5);
  cr_assert_str_eq(b, "(600");
}

/* ---- refusals ---- */

Test(npy, bad_magic_and_version) {
  write_raw("PK\x03\x04 not numpy at all", 20);
  refused("bad magic");
  write_raw("\x93NUMP", 5);
  refused("bad magic");
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "abcd", 4);
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  fseek(f, 6, SEEK_SET), fputc(4, f), fclose(f);
  refused("version 4.0 is not read");
  write_raw("\x93NUMPY\x02\x00\x10", 9);
  refused("truncated: the file ends inside its header");
}

Test(npy, header_refusals) {
  static const struct { const char *header, *word; } cases[] = {
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "big-endian"},
      {"{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", "big-endian"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", "dtype '|u1' is not read"},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", "dtype '<f2' is not read"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "descr as a dtype string"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "fortran_order is True"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", "fortran_order as True or False"},
      {"{'descr': '<f4', 'fortran_order': False}", "no 'shape' key"},
      {"{'fortran_order': False, 'shape': (1,)}", "no 'descr' key"},
      {"{'descr': '<f4', 'shape': (1,)}", "no 'fortran_order' key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "unknown key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "'descr' appears twice"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "shape as a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "a dim (an integer >= 0)"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}", "',' or ')' in shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1)}", "more than 9 dims"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "2^62 or more"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "only spaces after the dict"},
      {"{'descr': '<f4' 'fortran_order': False}", "',' or '}' in the dict"},
      {"{'descr' '<f4'}", "':' after a key"},
      {"['descr', '<f4']", "'{' (the header is a Python dict)"},
      {"{descr: '<f4'}", "a key ('descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "',' or '}' in the dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': ()}", "shape () is a scalar"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    write_npy(1, cases[k].header, "abcd", 4);
    refused(cases[k].word);
  }
}

Test(npy, truncated_and_too_long) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v, 20);
  refused("truncated: shape (2, 3) of f32 needs 24 bytes of data, the file has 20");
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v, 0);
  refused("truncated");
  write_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }", v, 24);
  refused("longer than its header says: shape (1, 3) of f32 needs 12 bytes of data, the file has 24");
}

/* Shapes whose data would be terabytes: refused from the header and the file's size, nothing
   allocated or read. */
Test(npy, big_shapes) {
  write_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 784), }", "abcd", 4);
  refused("truncated: shape (1099511627776, 784) of f32 needs 3448068464705536 bytes");
  write_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1099511627776, 1099511627776), }", NULL, 0);
  refused("a row of more than 2^62 bytes");
  write_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976, 8), }", NULL, 0);
  refused("more than 2^62 bytes of data");
}

Test(npy, header_length_limit) {
  unsigned char b[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0x10, 0}; /* 1 MiB of header */
  write_raw(b, sizeof b);
  refused("bad header: 1048576 bytes long");
}

Test(npy, not_a_file) {
  sk_npy npy;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_npy_open(dir, &npy, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, dir) && strstr(e.msg, "a directory"), "%s", e.msg);
  char missing[160];
  snprintf(missing, sizeof missing, "%s/none.npy", dir);
  cr_assert_eq(sk_npy_open(missing, &npy, &e), SK_ERR_SYSTEM);
  cr_assert(strstr(e.msg, "none.npy") && strstr(e.msg, "cannot open"), "%s", e.msg);
  cr_assert_eq(sk_npy_open("", &npy, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_npy_open(path, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_eq(sk_npy_read_rows(&npy, 0, 1, SK_F32, &e, &e), SK_ERR_INVALID_ARGUMENT); /* closed */
}
