/* sk_npy.h -- NumPy's .npy files, read row by row: the header (magic, version, dtype, order,
   shape) and then any run of rows, converted into the dtype the caller asks for. What feeds a
   network input from a file (docs/network-json.md's "data" object, sk-sim's --data).

   Do this in ONE .c file:   #define SK_IMPL  (or SK_NPY_IMPL)
                             #include "sk_npy.h"
   Needs only libc (and the POSIX file calls sk_core.h's text files use). Nothing is global; a
   reader holds one open file and a copy of its path, released by sk_npy_close.

   WHAT IS READ (docs/npy.md)
     The format of numpy.save: the magic "\x93NUMPY", version 1.0, 2.0 or 3.0 (a 2- or 4-byte
     little-endian header length), then a Python dict literal with exactly the keys 'descr',
     'fortran_order' and 'shape', in any order, padded with spaces to a newline. Read:
       descr          '<f4' '<f8' '<i4' '<i8' (f32 f64 i32 i64, little-endian)
       fortran_order  False (C order: a row, dim 0's entry, is contiguous)
       shape          a tuple of at most SK_NPY_MAX_DIMS non-negative integers; dim 0 counts the
                      samples (rows), which may be zero
     and the data, exactly as many bytes as the shape and dtype say, after the header. Refused,
     each with SK_ERR_INVALID_ARGUMENT and a message "PATH: what is wrong": a bad magic, an
     unknown version, a header that is not such a dict (naming the key or the character at
     fault), a big-endian ('>') or any other dtype, fortran_order True, a file shorter or longer
     than its header says ("truncated"), a scalar (no samples dim). A file that is not a regular
     one or cannot be read: as sk_core.h's TEXT FILES say (SK_ERR_SYSTEM when the system refuses).

   CONVERSIONS (sk_npy_read_rows)
     Into f32 or f64 from any of the four dtypes (f64 -> f32 rounds to nearest, integers become
     their value, rounded beyond 2^24 / 2^53); into i32 or i64 from i32 or i64 only, an i64 value
     outside i32's range refused naming the file, row and value. Floats into an integer
     destination are refused (they would truncate): sk_npy_convertible says so before reading.

   ROWS
     sk_npy_read_rows(first, count) reads rows first, first+1, ... taken modulo the file's row
     count: a source that is read batch after batch wraps around to its first row. A read moves
     the open file's offset: threads reading one file each open their own reader.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_NPY_IMPL)
#define SK_NPY_IMPL
#endif
#ifndef SK_NPY_H
#define SK_NPY_H

#include "sk_core.h"
#include "sk_layout.h" /* SK_MAX_DIMS */

SK_EXTERN_C_BEGIN

/* A file's dims: the samples, then up to SK_MAX_DIMS of an input's dims after its batch dim. */
#define SK_NPY_MAX_DIMS (SK_MAX_DIMS + 1)
/* The largest header read (numpy's own are a few hundred bytes). */
#define SK_NPY_MAX_HEADER 65536
/* Paths longer than this are cut in messages (the file is opened by the full path). */
#define SK_NPY_PATH_MAX 512

typedef struct sk_npy {
  char path[SK_NPY_PATH_MAX]; /* for messages */
  int fd;                     /* -1: closed */
  sk_dtype dtype;             /* SK_F32, SK_F64, SK_I32 or SK_I64 */
  int version;                /* 1, 2 or 3 */
  int ndims;
  int64_t shape[SK_NPY_MAX_DIMS];
  int64_t rows;      /* shape[0] */
  size_t row_bytes;  /* one row's bytes (the dtype's size times the dims after the first) */
  uint64_t offset;   /* where the data starts */
  sk_allocator allocator; /* what the reader's buffers come from (as opened; zero = the C library) */
} sk_npy;

/* Opens path and reads its header into *npy (the file stays open until sk_npy_close). On failure
   nothing stays open and *npy is closed. Its buffers (the header's, each read's) come from the
   C library; sk_npy_open_with takes them from `allocator` instead (NULL = the C library), which
   the reader keeps for its reads. */
SK_API sk_result sk_npy_open(const char *path, sk_npy *npy, sk_error *err);
SK_API sk_result sk_npy_open_with(const char *path, const sk_allocator *allocator, sk_npy *npy, sk_error *err);
SK_API void sk_npy_close(sk_npy *npy);
/* Whether rows of dtype `from` can be read into dtype `to` (see CONVERSIONS). */
SK_API bool sk_npy_convertible(sk_dtype from, sk_dtype to);
/* A file whose rows each hold a sample of `ndims` dims `shape` (an input's shape after its batch
   dim): refused naming the file, its shape and the shape wanted. */
SK_API sk_result sk_npy_check_rows(const sk_npy *npy, int ndims, const int64_t *shape, sk_error *err);
/* Rows first .. first+count-1 (modulo the row count) into dst, count * row elements of dtype dt
   (f32, f64, i32 or i64). Refused: no rows, a conversion sk_npy_convertible refuses, an i64
   value outside i32, a read the system refuses or a file that shrank. */
SK_API sk_result sk_npy_read_rows(sk_npy *npy, int64_t first, int64_t count, sk_dtype dt, void *dst,
                                  sk_error *err);
/* "(60000, 28, 28)", NumPy's way, into buf (cut to cap). */
SK_API void sk_npy_format_shape(int ndims, const int64_t *shape, char *buf, size_t cap);

SK_EXTERN_C_END
#endif /* SK_NPY_H */

#if defined(SK_NPY_IMPL) && !defined(SK_NPY_IMPL_DONE)
#define SK_NPY_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <limits.h>

SK_API void sk_npy_format_shape(int ndims, const int64_t *shape, char *buf, size_t cap) {
  size_t n = 0;
  if (!cap) return;
  buf[0] = 0;
  n += (size_t)snprintf(buf, cap, "(");
  for (int d = 0; d < ndims && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, ndims == 1 ? ",)" : ")");
}

/* ---- the header's dict ---- */

typedef struct sk__npy_parse {
  const char *s;
  size_t len, at;
  const char *path;
  sk_error *err;
} sk__npy_parse;

static void sk__npy_ws(sk__npy_parse *p) {
  while (p->at < p->len && (p->s[p->at] == ' ' || p->s[p->at] == '\t' || p->s[p->at] == '\n' || p->s[p->at] == '\r'))
    p->at++;
}

/* The refusal of the header at the current character, `what` saying what was expected. */
static sk_result sk__npy_expected(sk__npy_parse *p, const char *what) {
  if (p->at >= p->len) return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: expected %s, got its end", p->path, what);
  return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: expected %s at character %zu, got '%c'", p->path, what,
                  p->at, p->s[p->at] >= 0x20 && p->s[p->at] < 0x7f ? p->s[p->at] : '?');
}

/* A quoted string ('...' or "...", no escapes: numpy's keys and dtypes have none) into out. */
static sk_result sk__npy_string(sk__npy_parse *p, char *out, size_t cap, const char *what) {
  sk__npy_ws(p);
  char q = p->at < p->len ? p->s[p->at] : 0;
  if (q != '\'' && q != '"') return sk__npy_expected(p, what);
  size_t start = ++p->at;
  while (p->at < p->len && p->s[p->at] != q && p->s[p->at] != '\\') p->at++;
  if (p->at >= p->len || p->s[p->at] != q) return sk__npy_expected(p, "a closing quote");
  size_t n = p->at++ - start;
  if (n >= cap) return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: %s '%.20s...' is too long", p->path, what, p->s + start);
  memcpy(out, p->s + start, n), out[n] = 0;
  return SK_OK;
}

static bool sk__npy_word(sk__npy_parse *p, const char *word) {
  size_t n = strlen(word);
  if (p->at + n > p->len || memcmp(p->s + p->at, word, n)) return false;
  p->at += n;
  return true;
}

/* descr: a little-endian f4, f8, i4 or i8. */
static sk_result sk__npy_descr(sk__npy_parse *p, sk_npy *npy) {
  static const struct { const char *code; sk_dtype dt; } known[] = {{"f4", SK_F32}, {"f8", SK_F64}, {"i4", SK_I32}, {"i8", SK_I64}};
  char d[32];
  sk_result r = sk__npy_string(p, d, sizeof d, "descr as a dtype string such as '<f4'");
  if (r) return r;
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
    if (strcmp(d + (d[0] ? 1 : 0), known[k].code)) continue;
    if (d[0] == '<') return npy->dtype = known[k].dt, SK_OK;
    if (d[0] == '>')
      return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: dtype '%s' is big-endian: little-endian ('<%s') files are read "
                      "(numpy: a.astype('<%s'))", p->path, d, known[k].code, known[k].code);
  }
  return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: dtype '%s' is not read: '<f4' (f32), '<f8' (f64), '<i4' (i32) or "
                  "'<i8' (i64)", p->path, d);
}

/* One dim: a non-negative integer below 2^62. */
static sk_result sk__npy_dim(sk__npy_parse *p, int64_t *out) {
  sk__npy_ws(p);
  if (p->at >= p->len || p->s[p->at] < '0' || p->s[p->at] > '9') return sk__npy_expected(p, "a dim (an integer >= 0)");
  int64_t v = 0;
  while (p->at < p->len && p->s[p->at] >= '0' && p->s[p->at] <= '9') {
    if (v > (((int64_t)1 << 62) - 9) / 10)
      return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: a dim of the shape is 2^62 or more", p->path);
    v = v * 10 + (p->s[p->at++] - '0');
  }
  *out = v;
  return SK_OK;
}

/* shape: "()", "(n,)", "(n, m)", ... (a trailing comma allowed). */
static sk_result sk__npy_shape(sk__npy_parse *p, sk_npy *npy) {
  sk__npy_ws(p);
  if (p->at >= p->len || p->s[p->at] != '(') return sk__npy_expected(p, "shape as a tuple such as (60000, 784)");
  p->at++;
  npy->ndims = 0;
  for (;;) {
    sk__npy_ws(p);
    if (p->at < p->len && p->s[p->at] == ')') break;
    if (npy->ndims == SK_NPY_MAX_DIMS)
      return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: shape has more than %d dims", p->path, SK_NPY_MAX_DIMS);
    sk_result r = sk__npy_dim(p, &npy->shape[npy->ndims++]);
    if (r) return r;
    sk__npy_ws(p);
    if (p->at < p->len && p->s[p->at] == ',') p->at++;
    else if (p->at >= p->len || p->s[p->at] != ')') return sk__npy_expected(p, "',' or ')' in shape");
  }
  p->at++;
  return SK_OK;
}

/* One "key: value" of the dict; seen[] marks the keys read (a second one is refused). */
static sk_result sk__npy_member(sk__npy_parse *p, sk_npy *npy, bool seen[3]) {
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  char key[32];
  sk_result r = sk__npy_string(p, key, sizeof key, "a key ('descr', 'fortran_order' or 'shape')");
  int k = 0;
  while (!r && k < 3 && strcmp(key, keys[k])) k++;
  if (!r && k == 3) return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: unknown key '%s' ('descr', 'fortran_order' and 'shape' are read)", p->path, key);
  if (!r && seen[k]) return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: key '%s' appears twice", p->path, key);
  if (r) return r;
  seen[k] = true;
  sk__npy_ws(p);
  if (p->at >= p->len || p->s[p->at] != ':') return sk__npy_expected(p, "':' after a key");
  p->at++;
  sk__npy_ws(p);
  if (k == 0) return sk__npy_descr(p, npy);
  if (k == 2) return sk__npy_shape(p, npy);
  if (sk__npy_word(p, "False")) return SK_OK;
  if (sk__npy_word(p, "True"))
    return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: fortran_order is True: C-ordered files are read (numpy: "
                    "np.save(path, np.ascontiguousarray(a)))", p->path);
  return sk__npy_expected(p, "fortran_order as True or False");
}

static sk_result sk__npy_dict(sk__npy_parse *p, sk_npy *npy) {
  bool seen[3] = {false, false, false};
  sk__npy_ws(p);
  if (p->at >= p->len || p->s[p->at] != '{') return sk__npy_expected(p, "'{' (the header is a Python dict)");
  p->at++;
  for (;;) {
    sk__npy_ws(p);
    if (p->at < p->len && p->s[p->at] == '}') break;
    sk_result r = sk__npy_member(p, npy, seen);
    if (r) return r;
    sk__npy_ws(p);
    if (p->at < p->len && p->s[p->at] == ',') p->at++;
    else if (p->at >= p->len || p->s[p->at] != '}') return sk__npy_expected(p, "',' or '}' in the dict");
  }
  p->at++;
  sk__npy_ws(p);
  if (p->at != p->len) return sk__npy_expected(p, "only spaces after the dict");
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return sk__fail(p->err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: no '%s' key", p->path, keys[k]);
  return SK_OK;
}

/* ---- the file ---- */

/* Reads n bytes at offset off; short: the file ended first. */
static sk_result sk__npy_pread(sk_npy *npy, uint64_t off, void *buf, size_t n, size_t *got, sk_error *err) {
  *got = 0;
  if (off > (uint64_t)LLONG_MAX || lseek(npy->fd, (off_t)off, SEEK_SET) < 0)
    return sk__fail(err, SK_ERR_SYSTEM, "%s: cannot seek to byte %llu: %s", npy->path, (unsigned long long)off, strerror(errno));
  while (*got < n) {
    ssize_t k = read(npy->fd, (char *)buf + *got, n - *got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return sk__fail(err, SK_ERR_SYSTEM, "%s: cannot read: %s", npy->path, strerror(errno));
    if (k == 0) break;
    *got += (size_t)k;
  }
  return SK_OK;
}

/* The magic, version and header length: *len, the dict's bytes, start at *at. */
static sk_result sk__npy_preamble(sk_npy *npy, size_t *len, size_t *at, sk_error *err) {
  unsigned char b[12];
  size_t got = 0;
  sk_result r = sk__npy_pread(npy, 0, b, sizeof b, &got, err);
  if (r) return r;
  if (got < 8 || memcmp(b, "\x93NUMPY", 6))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: bad magic: not a NumPy .npy file (it starts \\x93NUMPY)", npy->path);
  if ((b[6] != 1 && b[6] != 2 && b[6] != 3) || b[7] != 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: format version %d.%d is not read (1.0, 2.0 or 3.0)", npy->path, b[6], b[7]);
  npy->version = b[6];
  *at = npy->version == 1 ? 10 : 12;
  if (got < *at) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: truncated: the file ends inside its header", npy->path);
  uint64_t n = (uint64_t)b[8] | (uint64_t)b[9] << 8;
  if (npy->version > 1) n |= (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
  if (n > SK_NPY_MAX_HEADER)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: bad header: %llu bytes long (at most %d are read)", npy->path,
                    (unsigned long long)n, SK_NPY_MAX_HEADER);
  *len = (size_t)n;
  return SK_OK;
}

static sk_result sk__npy_header(sk_npy *npy, sk_error *err) {
  size_t len = 0, at = 0, got = 0;
  sk_result r = sk__npy_preamble(npy, &len, &at, err);
  char *text = r ? NULL : (char *)sk__alloc(&npy->allocator, len + 1, 1);
  if (!r && !text) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "%s: out of memory reading the header", npy->path);
  if (!r) r = sk__npy_pread(npy, at, text, len, &got, err);
  if (!r && got < len) r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: truncated: the file ends inside its header", npy->path);
  if (!r) {
    sk__npy_parse p = {text, len, 0, npy->path, err};
    r = sk__npy_dict(&p, npy);
  }
  sk__free(&npy->allocator, text);
  npy->offset = (uint64_t)at + len;
  return r;
}

/* The data's size from the shape, checked against the file's: exactly as long as it says. */
static sk_result sk__npy_check_size(sk_npy *npy, uint64_t file_size, sk_error *err) {
  char shape[160];
  sk_npy_format_shape(npy->ndims, npy->shape, shape, sizeof shape);
  if (npy->ndims == 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: shape () is a scalar: dim 0 must count the samples", npy->path);
  uint64_t row = sk_dtype_size(npy->dtype), limit = (uint64_t)1 << 62, total;
  for (int d = 1; d < npy->ndims; d++) {
    if (npy->shape[d] && row > limit / (uint64_t)npy->shape[d])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: shape %s: a row of more than 2^62 bytes", npy->path, shape);
    row *= (uint64_t)npy->shape[d];
  }
  if (row && (uint64_t)npy->shape[0] > limit / row)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: shape %s: more than 2^62 bytes of data", npy->path, shape);
  total = row * (uint64_t)npy->shape[0];
  uint64_t have = file_size > npy->offset ? file_size - npy->offset : 0;
  if (have != total)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s: shape %s of %s needs %llu bytes of data, the file has %llu", npy->path,
                    have < total ? "truncated" : "longer than its header says", shape, sk_dtype_name(npy->dtype),
                    (unsigned long long)total, (unsigned long long)have);
  if (row > (uint64_t)SIZE_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: shape %s: a row does not fit in memory", npy->path, shape);
  npy->rows = npy->shape[0], npy->row_bytes = (size_t)row;
  return SK_OK;
}

SK_API void sk_npy_close(sk_npy *npy) {
  if (!npy) return;
  if (npy->fd >= 0) close(npy->fd);
  memset(npy, 0, sizeof *npy);
  npy->fd = -1;
}

SK_API sk_result sk_npy_open(const char *path, sk_npy *npy, sk_error *err) {
  return sk_npy_open_with(path, NULL, npy, err);
}

SK_API sk_result sk_npy_open_with(const char *path, const sk_allocator *allocator, sk_npy *npy, sk_error *err) {
  if (!npy) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "npy: NULL reader");
  memset(npy, 0, sizeof *npy);
  npy->fd = -1;
  if (!sk__allocator_ok(allocator)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "npy: allocator: set both alloc and free, or neither");
  if (allocator) npy->allocator = *allocator;
  if (!path || !*path) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "npy: no path");
  snprintf(npy->path, sizeof npy->path, "%s", path);
  size_t size = 0;
  sk_result r = sk__open_text_file(path, true, SIZE_MAX, &npy->fd, &size, err); /* a regular file */
  if (!r) r = sk__npy_header(npy, err);
  if (!r) r = sk__npy_check_size(npy, size, err);
  if (r) sk_npy_close(npy);
  return r;
}

SK_API bool sk_npy_convertible(sk_dtype from, sk_dtype to) {
  bool from_float = from == SK_F32 || from == SK_F64, from_int = from == SK_I32 || from == SK_I64;
  if (to == SK_F32 || to == SK_F64) return from_float || from_int;
  if (to == SK_I32 || to == SK_I64) return from_int;
  return false;
}

SK_API sk_result sk_npy_check_rows(const sk_npy *npy, int ndims, const int64_t *shape, sk_error *err) {
  if (!npy || npy->fd < 0 || ndims < 0 || (ndims && !shape)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "npy: NULL or closed reader");
  bool ok = npy->ndims == ndims + 1;
  for (int d = 0; ok && d < ndims; d++) ok = npy->shape[d + 1] == shape[d];
  if (ok) return SK_OK;
  char have[160], want[160];
  int64_t w[SK_NPY_MAX_DIMS];
  int nw = ndims < SK_NPY_MAX_DIMS ? ndims + 1 : SK_NPY_MAX_DIMS;
  w[0] = npy->rows;
  for (int d = 1; d < nw; d++) w[d] = shape[d - 1];
  sk_npy_format_shape(npy->ndims, npy->shape, have, sizeof have);
  sk_npy_format_shape(nw, w, want, sizeof want);
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: shape %s does not hold the input's samples: want %s (dim 0 counts "
                  "the samples, the rest is a sample's shape)", npy->path, have, want);
}

/* n values of the file's dtype at src into dst (dtype dt); row0 names the first row in messages. */
static sk_result sk__npy_convert(const sk_npy *npy, const unsigned char *src, size_t n, sk_dtype dt, void *dst,
                                 int64_t row0, sk_error *err) {
  size_t per_row = npy->row_bytes / sk_dtype_size(npy->dtype);
  for (size_t i = 0; i < n; i++) {
    double f = 0;
    int64_t v = 0;
    switch (npy->dtype) { /* little-endian on disk: assembled byte by byte, whatever the host */
      case SK_F32: { uint32_t u = 0; for (int b = 3; b >= 0; b--) u = u << 8 | src[4 * i + (size_t)b]; float x; memcpy(&x, &u, 4); f = x; break; }
      case SK_F64: { uint64_t u = 0; for (int b = 7; b >= 0; b--) u = u << 8 | src[8 * i + (size_t)b]; memcpy(&f, &u, 8); break; }
      case SK_I32: { uint32_t u = 0; for (int b = 3; b >= 0; b--) u = u << 8 | src[4 * i + (size_t)b]; v = (int32_t)u; f = (double)v; break; }
      default: { uint64_t u = 0; for (int b = 7; b >= 0; b--) u = u << 8 | src[8 * i + (size_t)b]; v = (int64_t)u; f = (double)v; break; }
    }
    switch (dt) {
      case SK_F32: ((float *)dst)[i] = (float)f; break;
      case SK_F64: ((double *)dst)[i] = f; break;
      case SK_I64: ((int64_t *)dst)[i] = v; break;
      default:
        if (v < INT32_MIN || v > INT32_MAX)
          return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: row %lld holds %lld, outside i32's range (the input is i32)",
                          npy->path, (long long)(row0 + (int64_t)(i / (per_row ? per_row : 1))), (long long)v);
        ((int32_t *)dst)[i] = (int32_t)v;
    }
  }
  return SK_OK;
}

/* A run of rows, first .. first+count-1, all inside the file, into dst. */
static sk_result sk__npy_run(sk_npy *npy, int64_t first, int64_t count, sk_dtype dt, unsigned char *dst,
                             sk_error *err) {
  enum { CHUNK = 1 << 16 };
  unsigned char *buf = (unsigned char *)sk__alloc(&npy->allocator, CHUNK, 64); /* off the stack: devices' threads may read */
  if (!buf) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "%s: out of memory reading rows", npy->path);
  sk_result r = SK_OK;
  size_t es = sk_dtype_size(npy->dtype), done = 0;
  if (!es) return sk__free(&npy->allocator, buf), sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: not an opened file", npy->path);
  size_t n = (size_t)count * (npy->row_bytes / es);
  uint64_t off = npy->offset + (uint64_t)first * npy->row_bytes;
  while (!r && done < n) {
    size_t k = n - done < CHUNK / es ? n - done : CHUNK / es, got = 0;
    r = sk__npy_pread(npy, off + done * es, buf, k * es, &got, err);
    if (!r && got < k * es) r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: truncated: the file shrank since it was opened", npy->path);
    if (!r) r = sk__npy_convert(npy, buf, k, dt, dst + done * sk_dtype_size(dt), first + (int64_t)(done * es / npy->row_bytes), err);
    done += k;
  }
  sk__free(&npy->allocator, buf);
  return r;
}

SK_API sk_result sk_npy_read_rows(sk_npy *npy, int64_t first, int64_t count, sk_dtype dt, void *dst,
                                  sk_error *err) {
  if (!npy || npy->fd < 0 || !dst || first < 0 || count < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "npy: read: NULL or closed reader, no buffer, or a negative row");
  if (!sk_npy_convertible(npy->dtype, dt))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: holds %s values, which are not read into %s (%s)", npy->path,
                    sk_dtype_name(npy->dtype), sk_dtype_name(dt),
                    dt == SK_I32 || dt == SK_I64 ? "floats would be truncated: save integers" : "f32, f64, i32, i64 are read");
  if (count && npy->rows == 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: has no samples (shape[0] is 0)", npy->path);
  size_t per_row = npy->row_bytes / sk_dtype_size(npy->dtype) * sk_dtype_size(dt);
  for (int64_t done = 0; done < count;) {
    int64_t at = (first + done) % npy->rows, k = count - done < npy->rows - at ? count - done : npy->rows - at;
    sk_result r = sk__npy_run(npy, at, k, dt, (unsigned char *)dst + (size_t)done * per_row, err);
    if (r) return r;
    done += k;
  }
  return SK_OK;
}

#endif /* SK_NPY_IMPL */
