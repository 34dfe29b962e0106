/* sk_npy.h: .npy files this suite writes itself in /tmp (NumPy's layout byte by byte, no
   Python), read back row by row: the four dtypes, versions 1.0 / 2.0 / 3.0, either quote, keys in
   any order; rows that wrap; every conversion allowed and refused; every malformed header, a
   truncated and a too long file, big shapes (refused without reading), zero samples; and each
   refusal's message naming the file and the problem. Then what carries a file to an input: an
   input's data source in sk_graph.h (set, refused, resolved, kept by sk_graph_micro) and the
   network JSON's "data" object (sk_json.h), read and written back, each refusal with its key. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sk_graph.h"
#include "sk_json.h"
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

/* ==== data sources: sk_graph.h and the network JSON's "data" object ============================ */

/* x f32 [4, 3], label i32 [4], w [3, 2] and mm = MatMul(x, w). */
static void tiny(sk_graph *g) {
  static const int64_t xs[2] = {4, 3}, ls[1] = {4}, ws[2] = {3, 2};
  sk_init init = {SK_INIT_ONES, 0};
  sk_graph_init(g);
  cr_assert_eq(sk_graph_add_input(g, "x", SK_F32, 2, xs, NULL, NULL), SK_OK);
  cr_assert_eq(sk_graph_add_input(g, "label", SK_I32, 1, ls, NULL, NULL), SK_OK);
  cr_assert_eq(sk_graph_add_param(g, "w", SK_F32, 2, ws, init, NULL, NULL), SK_OK);
  sk_graph_op op;
  memset(&op, 0, sizeof op);
  strcpy(op.name, "mm");
  op.desc.kind = SK_OP_MATMUL, op.ninputs = 2, op.inputs[0] = 0, op.inputs[1] = 2;
  cr_assert_eq(sk_graph_add_op(g, &op, NULL, NULL), SK_OK);
}

static sk_data_source source(sk_data_kind kind, double a, double b, const char *path) {
  sk_data_source s;
  memset(&s, 0, sizeof s);
  s.kind = kind, s.a = a, s.b = b;
  if (path) snprintf(s.path, sizeof s.path, "%s", path);
  return s;
}

/* sk_graph_set_data refuses, naming the tensor and holding `word`; the tensor keeps its source. */
static void set_refused(sk_graph *g, int t, sk_data_source s, const char *word) {
  sk_error e = {SK_OK, ""};
  sk_data_source before = g->tensors[t].data;
  cr_assert_eq(sk_graph_set_data(g, t, &s, &e), SK_ERR_INVALID_ARGUMENT, "accepted; want '%s'", word);
  cr_assert(strstr(e.msg, g->tensors[t].name) && strstr(e.msg, word), "message '%s' lacks '%s'", e.msg, word);
  cr_assert_eq(memcmp(&before, &g->tensors[t].data, sizeof before), 0);
}

Test(data, set_and_refused) {
  sk_graph g;
  tiny(&g);
  sk_data_source s = source(SK_DATA_NPY, 0, 0, "images.npy");
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  cr_assert_eq(g.tensors[0].data.kind, SK_DATA_NPY);
  cr_assert_str_eq(g.tensors[0].data.path, "images.npy");
  s = source(SK_DATA_RANDOM_INT, 0, 10, NULL);
  cr_assert_eq(sk_graph_set_data(&g, 1, &s, NULL), SK_OK);
  s = source(SK_DATA_RANDOM_NORMAL, 0.5, 0, NULL); /* std 0: a constant */
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  s = source(SK_DATA_RANDOM_INT, -3, 4, NULL); /* integers into a float input: their values */
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  set_refused(&g, 2, source(SK_DATA_NPY, 0, 0, "w.npy"), "a parameter, not an input");
  set_refused(&g, 3, source(SK_DATA_NPY, 0, 0, "w.npy"), "an operator's output, not an input");
  set_refused(&g, 0, source((sk_data_kind)9, 0, 0, NULL), "unknown source kind 9");
  set_refused(&g, 0, source(SK_DATA_NPY, 0, 0, ""), "path is empty");
  set_refused(&g, 0, source(SK_DATA_NPY, 0, 0, "a\nb.npy"), "control character");
  set_refused(&g, 1, source(SK_DATA_RANDOM_INT, 0, 2.5, NULL), "whole numbers");
  set_refused(&g, 1, source(SK_DATA_RANDOM_INT, 0, 1e17, NULL), "within 2^53");
  set_refused(&g, 1, source(SK_DATA_RANDOM_INT, 0, 2147483649.0, NULL), "does not fit i32");
  set_refused(&g, 1, source(SK_DATA_RANDOM_INT, 5, 5, NULL), "lo 5 is not below hi 5");
  set_refused(&g, 1, source(SK_DATA_RANDOM_NORMAL, 0, 1, NULL), "draws floats, the input is i32");
  set_refused(&g, 1, source(SK_DATA_RANDOM_UNIFORM, 0, 1, NULL), "draws floats, the input is i32");
  set_refused(&g, 0, source(SK_DATA_RANDOM_NORMAL, 0, -1, NULL), "std -1 is negative");
  set_refused(&g, 0, source(SK_DATA_RANDOM_UNIFORM, 1, -1, NULL), "lo 1 is not below hi -1");
  set_refused(&g, 0, source(SK_DATA_RANDOM_UNIFORM, 0, INFINITY, NULL), "finite");
  s = source(SK_DATA_RANDOM_INT, 2147483647.0, 2147483648.0, NULL); /* i32's largest value alone */
  cr_assert_eq(sk_graph_set_data(&g, 1, &s, NULL), SK_OK);
  s = source(SK_DATA_NONE, 0, 0, NULL);
  cr_assert_eq(sk_graph_set_data(&g, 1, &s, NULL), SK_OK);
  cr_assert_eq(g.tensors[1].data.kind, SK_DATA_NONE);
  cr_assert_eq(sk_graph_set_data(&g, 99, &s, NULL), SK_ERR_INVALID_ARGUMENT);
  sk_graph_free(&g);
}

Test(data, paths_resolve_against_data_dir) {
  sk_graph g;
  tiny(&g);
  char out[64];
  sk_data_source s = source(SK_DATA_NPY, 0, 0, "x.npy");
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  cr_assert_eq(sk_graph_data_path(&g, 0, out, sizeof out, NULL), SK_OK);
  cr_assert_str_eq(out, "x.npy");
  strcpy(g.data_dir, "nets");
  cr_assert_eq(sk_graph_data_path(&g, 0, out, sizeof out, NULL), SK_OK);
  cr_assert_str_eq(out, "nets/x.npy");
  strcpy(g.data_dir, "/");
  cr_assert_eq(sk_graph_data_path(&g, 0, out, sizeof out, NULL), SK_OK);
  cr_assert_str_eq(out, "/x.npy");
  s = source(SK_DATA_NPY, 0, 0, "/data/x.npy");
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  cr_assert_eq(sk_graph_data_path(&g, 0, out, sizeof out, NULL), SK_OK);
  cr_assert_str_eq(out, "/data/x.npy");
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_graph_data_path(&g, 0, out, 5, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "'x'") && strstr(e.msg, "longer"), "%s", e.msg);
  cr_assert_eq(sk_graph_data_path(&g, 1, out, sizeof out, NULL), SK_ERR_INVALID_ARGUMENT); /* no .npy source */
  sk_graph_free(&g);
}

Test(data, micro_keeps_the_sources) {
  sk_graph g, m;
  tiny(&g);
  sk_data_source s = source(SK_DATA_RANDOM_NORMAL, 1, 2, NULL);
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  strcpy(g.data_dir, "here");
  cr_assert_eq(sk_graph_micro(&g, 2, &m, NULL), SK_OK);
  cr_assert_eq(m.tensors[0].data.kind, SK_DATA_RANDOM_NORMAL);
  cr_assert_eq(m.tensors[0].data.b, 2);
  cr_assert_str_eq(m.data_dir, "here");
  sk_graph_free(&m), sk_graph_free(&g);
}

/* Every kind written, read back field by field, and written again byte for byte. */
Test(data, json_round_trip) {
  sk_graph g, back;
  tiny(&g);
  sk_data_source s = source(SK_DATA_NPY, 0, 0, "data/x \"1\".npy");
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  s = source(SK_DATA_RANDOM_INT, -9007199254740992.0, 10, NULL);
  g.tensors[1].dtype = SK_I64;
  cr_assert_eq(sk_graph_set_data(&g, 1, &s, NULL), SK_OK);
  char *text = NULL, *again = NULL;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_format_network(&g, &text, &e), SK_OK, "%s", e.msg);
  cr_assert(strstr(text, "\"data\": {\n    \"x\": {\n      \"npy\": \"data/x \\\"1\\\".npy\""), "%s", text);
  cr_assert(strstr(text, "\"random_int\": [\n        -9007199254740992,\n        10\n"), "%s", text);
  cr_assert_eq(sk_json_parse_network(text, strlen(text), &back, &e), SK_OK, "%s", e.msg);
  cr_assert_str_eq(back.tensors[0].data.path, "data/x \"1\".npy");
  cr_assert_eq(back.tensors[1].data.a, -9007199254740992.0);
  cr_assert_str_eq(back.data_dir, "");
  cr_assert_eq(sk_json_format_network(&back, &again, &e), SK_OK, "%s", e.msg);
  cr_assert_str_eq(again, text);
  free(again), sk_graph_free(&back);
  s = source(SK_DATA_RANDOM_NORMAL, 0.1, 1.0 / 3, NULL);
  cr_assert_eq(sk_graph_set_data(&g, 0, &s, NULL), SK_OK);
  s = source(SK_DATA_RANDOM_UNIFORM, -1, 1, NULL);
  g.tensors[1].dtype = SK_F64;
  cr_assert_eq(sk_graph_set_data(&g, 1, &s, NULL), SK_OK);
  free(text);
  cr_assert_eq(sk_json_format_network(&g, &text, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_json_parse_network(text, strlen(text), &back, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(back.tensors[0].data.kind, SK_DATA_RANDOM_NORMAL);
  cr_assert_eq(back.tensors[0].data.b, 1.0 / 3);
  cr_assert_eq(back.tensors[1].data.kind, SK_DATA_RANDOM_UNIFORM);
  cr_assert_eq(back.tensors[1].data.a, -1);
  cr_assert_eq(sk_json_format_network(&back, &again, &e), SK_OK, "%s", e.msg);
  cr_assert_str_eq(again, text);
  free(again), free(text), sk_graph_free(&back);
  /* a source the graph would refuse is not written */
  g.tensors[0].data.b = -1;
  cr_assert_eq(sk_json_format_network(&g, &text, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, "json: graph: data for 'x'") && strstr(e.msg, "negative"), "%s", e.msg);
  cr_assert_null(text);
  sk_graph_free(&g);
}

static const char net_head[] =
    "{\"format\": \"shardkit-network\", \"version\": 1,\n"
    " \"tensors\": [{\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f32\", \"shape\": [4, 3]},\n"
    "  {\"name\": \"label\", \"role\": \"input\", \"dtype\": \"i32\", \"shape\": [4]},\n"
    "  {\"name\": \"w\", \"role\": \"parameter\", \"dtype\": \"f32\", \"shape\": [3, 2], \"init\": {\"kind\": \"ones\"}}],\n"
    " \"operators\": [{\"name\": \"mm\", \"type\": \"MatMul\", \"inputs\": [\"x\", \"w\"]}],\n";

/* The network with `data` as its "data" value: refused with the message holding `word`. */
static void json_refused(const char *data, const char *word) {
  char text[2048];
  snprintf(text, sizeof text, "%s \"data\": %s}\n", net_head, data);
  sk_graph g;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_parse_network(text, strlen(text), &g, &e), SK_ERR_INVALID_ARGUMENT, "accepted: %s", data);
  cr_assert(strstr(e.msg, word), "%s: message '%s' lacks '%s'", data, e.msg, word);
  cr_assert_eq(g.ntensors, 0);
}

Test(data, json_refusals_name_the_key) {
  json_refused("[]", "line 6: data: expected an object");
  json_refused("{\"nope\": {\"npy\": \"a.npy\"}}", "data.nope: no tensor \"nope\" in the network");
  json_refused("{\"w\": {\"npy\": \"a.npy\"}}", "data.w: \"w\" is a parameter, not an input");
  json_refused("{\"mm\": {\"npy\": \"a.npy\"}}", "data.mm: \"mm\" is an operator's output, not an input");
  json_refused("{\"x\": {\"csv\": \"a.csv\"}}", "data.x.csv: unknown source (npy, random_int");
  json_refused("{\"x\": {\"none\": 1}}", "data.x.none: unknown source");
  json_refused("{\"x\": {}}", "data.x: expected one source");
  json_refused("{\"x\": {\"npy\": \"a.npy\", \"random_int\": [0, 1]}}", "data.x: expected one source");
  json_refused("{\"x\": \"a.npy\"}", "data.x: expected one source");
  json_refused("{\"x\": {\"npy\": 3}}", "data.x.npy: expected a file name, got an integer");
  json_refused("{\"x\": {\"npy\": \"\"}}", "data.x.npy: the .npy path is empty");
  json_refused("{\"label\": {\"random_int\": [10, 0]}}", "data.label.random_int: random_int's lo 10 is not below hi 0");
  json_refused("{\"label\": {\"random_int\": [0.5, 2]}}", "data.label.random_int: expected a list of two integers");
  json_refused("{\"label\": {\"random_int\": [0, 1, 2]}}", "data.label.random_int: expected a list of two integers, got another list");
  json_refused("{\"label\": {\"random_normal\": [0, 1]}}", "data.label.random_normal: random_normal draws floats, the input is i32");
  json_refused("{\"x\": {\"random_normal\": [0, -0.5]}}", "data.x.random_normal: random_normal's std -0.5 is negative");
  json_refused("{\"x\": {\"random_uniform\": [2, 1]}}", "data.x.random_uniform: random_uniform's lo 2 is not below hi 1");
  json_refused("{\"x\": {\"random_uniform\": \"0,1\"}}", "data.x.random_uniform: expected a list of two numbers, got a string");
}

/* A file: the graph's data_dir is the file's directory, and relative paths resolve there. */
Test(data, load_sets_data_dir, .init = make_dir, .fini = remove_dir) {
  char text[2048], file[160], out[256];
  snprintf(text, sizeof text, "%s \"data\": {\"x\": {\"npy\": \"x.npy\"}, \"label\": {\"random_int\": [0, 2]}}}\n", net_head);
  snprintf(file, sizeof file, "%s/a.npy", dir); /* the suite's one file name, removed by fini */
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fputs(text, f), fclose(f);
  sk_graph g;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_load_network(file, &g, &e), SK_OK, "%s", e.msg);
  cr_assert_str_eq(g.data_dir, dir);
  cr_assert_eq(sk_graph_data_path(&g, 0, out, sizeof out, &e), SK_OK, "%s", e.msg);
  char want[256];
  snprintf(want, sizeof want, "%s/x.npy", dir);
  cr_assert_str_eq(out, want);
  cr_assert_eq(g.tensors[1].data.kind, SK_DATA_RANDOM_INT);
  char *saved = NULL;
  cr_assert_eq(sk_json_format_network(&g, &saved, &e), SK_OK, "%s", e.msg);
  cr_assert(strstr(saved, "\"npy\": \"x.npy\""), "the path is written as it was read: %s", saved);
  free(saved);
  sk_graph_free(&g);
}
