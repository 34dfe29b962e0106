/* sk_core.h -- shardkit's shared types: results, dtypes, reduce ops, f16/bf16 conversion,
   allocator and logger hooks, version.

   Every other shardkit header includes this one; you rarely include it yourself.

   WHAT IT HOLDS
     sk_result       one X-macro list makes the enum and sk_result_string()
     sk_error        the detailed message a fallible call writes when the caller passes one
     sk_dtype        f32 f64 f16 bf16 i8 u8 i32 i64, with names and sizes
     sk_redop        sum prod min max avg
     f16 / bf16      exact conversions to and from f32 (round to nearest even; inf and NaN kept)
     sk_allocator    a user allocator (both functions or neither)
     sk_logger       a user log sink; zero means silent
     SK_API          extern, or static under SK_STATIC (define it globally, with SK_IMPL, to get a
                     private copy of every module in each translation unit that includes them)

   This header defines no out-of-line symbol, so it can never be defined twice. Its second part
   (behind SK__CORE_PRIVATE, which only module implementations define) holds static helpers that
   implementation sections share: error formatting, allocation, logging, reading a text file.

   TEXT FILES: SK_MAX_TEXT_FILE_BYTES (default 256 MiB) bounds every text shardkit reads: network
     JSON and parallel_speed_up.json (sk_json.h), strategy files (sk_strategy.h), a checkpoint's
     MANIFEST, LATEST and strategy.json (sk_ckpt.h). To change it, #define it before the first
     include in the translation unit holding the implementations (SK_IMPL): the loaders use the
     value they were compiled with. A file is opened without blocking and read only when it is a
     regular file (a FIFO, a device such as /dev/zero or a directory is refused by name) of at
     most the limit; a bigger one is refused before a byte is read, with
       PATH: N bytes exceeds the limit of L bytes
     and one that changes size while it is read is refused too. Paths the caller names (a network
     file, a strategy file) may be symbolic links; LATEST and MANIFEST, inside a checkpoint root,
     may not. Every *_parse_* call that takes a text and its length refuses a longer one the same
     way before reading the text, its own name in place of PATH ("sk_json_parse_network: N bytes
     exceeds ..."). These refusals are SK_ERR_INVALID_ARGUMENT; a file the system cannot open or
     read is SK_ERR_SYSTEM ("PATH: cannot open: No such file or directory").

   ERRORS
     Fallible calls return sk_result (SK_OK == 0). Calls that validate user input also take an
     `sk_error *err` (may be NULL), jansson style: on failure it receives the code and one line
     that names the offending argument ("dim 1 (784) is not divisible by 3 = sp*mp"). No message
     is ever kept in process-wide state. sk_error_set(err, code, fmt, ...) writes one the same
     way and returns the code, for the library and for programs that report as it does.

   License: MIT. */
#ifndef SK_CORE_H
#define SK_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h> /* sk_error_set */
#include <stdio.h>  /* snprintf in sk_last_error, vsnprintf in sk_error_set */
#include <string.h> /* memcpy in sk_error_set */

#define SK_VERSION_MAJOR 0
#define SK_VERSION_MINOR 1
#define SK_VERSION_PATCH 0
#define SK_VERSION (SK_VERSION_MAJOR * 10000 + SK_VERSION_MINOR * 100 + SK_VERSION_PATCH)

#ifdef __cplusplus
#define SK_EXTERN_C_BEGIN extern "C" {
#define SK_EXTERN_C_END }
#else
#define SK_EXTERN_C_BEGIN
#define SK_EXTERN_C_END
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SK__UNUSED __attribute__((unused))
#define SK__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define SK__UNUSED
#define SK__PRINTF(fmt, args)
#endif

/* SK_API: linkage of every public function. Set SK_STATIC globally (with SK_IMPL in the same
   translation unit) for a private static copy. */
#ifndef SK_API
#ifdef SK_STATIC
#define SK_API static SK__UNUSED
#else
#define SK_API extern
#endif
#endif
#define SK__INLINE static inline SK__UNUSED

/* The largest text file (or text given with its length) shardkit reads; see TEXT FILES above. */
#ifndef SK_MAX_TEXT_FILE_BYTES
#define SK_MAX_TEXT_FILE_BYTES ((size_t)256 << 20)
#endif

SK_EXTERN_C_BEGIN

/* ---- results ------------------------------------------------------------------------------ */

#define SK_RESULT_LIST(X)                                                                        \
  X(SK_OK, "success")                                                                          \
  X(SK_ERR_INVALID_ARGUMENT, "invalid argument (the detailed message names it)")               \
  X(SK_ERR_INVALID_USAGE, "invalid usage: a call made in the wrong state or order")            \
  X(SK_ERR_OUT_OF_MEMORY, "out of memory: the allocator returned NULL")                         \
  X(SK_ERR_SYSTEM, "system error: an OS call failed (the detailed message has errno)")         \
  X(SK_ERR_BACKEND, "backend error: a backend hook failed (see the detailed message)")         \
  X(SK_ERR_TIMEOUT, "timeout: peers did not arrive in time (the message names them)")          \
  X(SK_ERR_ABORTED, "aborted: a peer failed or the world was aborted")                         \
  X(SK_ERR_MISMATCH, "mismatch: members of a group made different calls at the same point")    \
  X(SK_ERR_UNSUPPORTED, "unsupported: not compiled in, or not available on this backend")      \
  X(SK_ERR_IN_PROGRESS, "in progress: the operation has not completed yet")                    \
  X(SK_ERR_INTERNAL, "internal error: a bug in shardkit; please report it")

typedef enum sk_result {
#define SK__RESULT_ENUM(name, text) name,
  SK_RESULT_LIST(SK__RESULT_ENUM)
#undef SK__RESULT_ENUM
  SK_RESULT_COUNT
} sk_result;

SK__INLINE const char *sk_result_string(sk_result r) {
  static const char *const texts[] = {
#define SK__RESULT_TEXT(name, text) text,
      SK_RESULT_LIST(SK__RESULT_TEXT)
#undef SK__RESULT_TEXT
  };
  if ((int)r < 0 || (int)r >= (int)SK_RESULT_COUNT) return "unknown sk_result";
  return texts[r];
}

SK__INLINE const char *sk_result_name(sk_result r) {
  static const char *const names[] = {
#define SK__RESULT_NAME(name, text) #name,
      SK_RESULT_LIST(SK__RESULT_NAME)
#undef SK__RESULT_NAME
  };
  if ((int)r < 0 || (int)r >= (int)SK_RESULT_COUNT) return "SK_ERR_UNKNOWN";
  return names[r];
}

#define SK_ERROR_MSG_MAX 256
/* Detailed error of one call. Zero-initialise it or not; a failing call overwrites it and a
   successful one leaves it untouched. */
typedef struct sk_error {
  sk_result code;
  char msg[SK_ERROR_MSG_MAX];
} sk_error;

/* sk_error_set's body. The message is formatted aside first: an argument may be err->msg itself
   (a comm's record passed as err to a call that words "...: %s" from the comm's message). */
SK__INLINE sk_result sk__error_vset(sk_error *err, sk_result code, const char *fmt, va_list ap) {
  if (!err) return code;
  char msg[SK_ERROR_MSG_MAX];
  vsnprintf(msg, sizeof msg, fmt, ap);
  memcpy(err->msg, msg, strlen(msg) + 1);
  err->code = code;
  return code;
}

/* Writes code and the printf-style message into *err (when err is not NULL; a message longer than
   SK_ERROR_MSG_MAX - 1 bytes is cut) and returns code, so that a fallible function reports in one
   line: `return sk_error_set(err, SK_ERR_OUT_OF_MEMORY, "out of memory gathering '%s'", name);`.
   shardkit's own calls write their messages with it; programs built on shardkit use it for theirs. */
SK__INLINE SK__PRINTF(3, 4) sk_result sk_error_set(sk_error *err, sk_result code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sk__error_vset(err, code, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- one way to read any failure ---------------------------------------------------------- */

/* Every object a call can fail on -- world, communicator, fusion scheduler, redistribution
   executor -- starts with this head, holding its last failure as an sk_error (a world: its root
   cause, once it failed). Every fallible call takes a trailing `sk_error *err` (NULL allowed),
   which receives the failure too; the object keeps it besides, so that sk_last_error(object,
   &err) reads it later: err.code and err.msg, whichever way it is read. sk_last_error returns the
   code (SK_OK and "" when none). The per-object functions (sk_comm_error_message,
   sk_world_error_message, sk_fusion_error_message) read the same record. */
#define SK_OBJECT_MAGIC 0x6f626b73u
typedef struct sk_object_head {
  uint32_t magic; /* SK_OBJECT_MAGIC */
  sk_error error; /* the last failure */
} sk_object_head;

SK__INLINE sk_result sk_last_error(const void *object, sk_error *out) {
  const sk_object_head *h = (const sk_object_head *)object;
  sk_result code = SK_ERR_INVALID_ARGUMENT;
  const char *msg = "object is NULL";
  if (h && h->magic != SK_OBJECT_MAGIC) msg = "not a shardkit object (world, communicator, fusion scheduler, executor)";
  if (h && h->magic == SK_OBJECT_MAGIC) code = h->error.code, msg = h->error.msg;
  if (out && (!h || out != &h->error)) {
    out->code = code;
    snprintf(out->msg, sizeof out->msg, "%.*s", (int)sizeof out->msg - 1, msg);
  }
  return code;
}

/* Writes an object's failure (modules' helper). */
SK__INLINE sk_result sk_object_set_error(sk_object_head *h, sk_result code, const char *msg) {
  if (!h) return code;
  h->magic = SK_OBJECT_MAGIC;
  h->error.code = code;
  if (msg != h->error.msg) /* truncates long text */
    snprintf(h->error.msg, sizeof h->error.msg, "%.*s", (int)sizeof h->error.msg - 1, msg ? msg : "");
  return code;
}

/* The end of every fallible call on an object (modules' helper): on failure, the object's record
   (which the call wrote) is copied into the caller's err, unless err is that record itself or
   NULL; on success err is untouched. A record holding another code (a failure the call did not
   describe) gives the code's sentence instead of a stale message. Returns r. */
SK__INLINE sk_result sk__report(const void *object, sk_result r, sk_error *err) {
  const sk_object_head *h = (const sk_object_head *)object;
  if (r == SK_OK || !err || (h && err == &h->error)) return r;
  if (!h)
    sk_error_set(err, r, "the object passed (communicator, world, fusion scheduler or executor) is NULL");
  else if (h->magic == SK_OBJECT_MAGIC && h->error.code == r && h->error.msg[0])
    sk_error_set(err, r, "%s", h->error.msg);
  else
    sk_error_set(err, r, "%s", sk_result_string(r));
  return r; /* plainly r: analyzers do not follow the variadic sk_error_set's result */
}

/* ---- dtypes ------------------------------------------------------------------------------- */

/* X(enum, short name, nccl-tests name, size in bytes) */
#define SK_DTYPE_LIST(X)                \
  X(SK_F32, "f32", "float", 4)          \
  X(SK_F64, "f64", "double", 8)         \
  X(SK_F16, "f16", "half", 2)           \
  X(SK_BF16, "bf16", "bfloat16", 2)     \
  X(SK_I8, "i8", "int8", 1)             \
  X(SK_U8, "u8", "uint8", 1)            \
  X(SK_I32, "i32", "int32", 4)          \
  X(SK_I64, "i64", "int64", 8)

typedef enum sk_dtype {
#define SK__DTYPE_ENUM(e, name, longname, size) e,
  SK_DTYPE_LIST(SK__DTYPE_ENUM)
#undef SK__DTYPE_ENUM
  SK_DTYPE_COUNT
} sk_dtype;

/* The range test, spelled once for sk_dtype_valid and sk_dtype_size so that the latter makes no
   call: the clang static analyzer stops following calls a few levels deep, and past that point
   it believed a dtype already checked could have size 0 (and reported divisions by it). */
#define SK__DTYPE_IN_RANGE(dt) ((int)(dt) >= 0 && (int)(dt) < (int)SK_DTYPE_COUNT)

SK__INLINE bool sk_dtype_valid(sk_dtype dt) { return SK__DTYPE_IN_RANGE(dt); }

/* Bytes per element; 0 for an invalid dtype. */
SK__INLINE size_t sk_dtype_size(sk_dtype dt) {
  static const unsigned char sizes[] = {
#define SK__DTYPE_SIZE(e, name, longname, size) size,
      SK_DTYPE_LIST(SK__DTYPE_SIZE)
#undef SK__DTYPE_SIZE
  };
  return SK__DTYPE_IN_RANGE(dt) ? sizes[dt] : 0;
}

/* Short name ("f32"); "invalid" for an invalid dtype. */
SK__INLINE const char *sk_dtype_name(sk_dtype dt) {
  static const char *const names[] = {
#define SK__DTYPE_NAME(e, name, longname, size) name,
      SK_DTYPE_LIST(SK__DTYPE_NAME)
#undef SK__DTYPE_NAME
  };
  return sk_dtype_valid(dt) ? names[dt] : "invalid";
}

/* nccl-tests name ("float", "half", "bfloat16", ...); "invalid" for an invalid dtype. */
SK__INLINE const char *sk_dtype_long_name(sk_dtype dt) {
  static const char *const names[] = {
#define SK__DTYPE_LNAME(e, name, longname, size) longname,
      SK_DTYPE_LIST(SK__DTYPE_LNAME)
#undef SK__DTYPE_LNAME
  };
  return sk_dtype_valid(dt) ? names[dt] : "invalid";
}

SK__INLINE bool sk_dtype_is_float(sk_dtype dt) {
  return dt == SK_F32 || dt == SK_F64 || dt == SK_F16 || dt == SK_BF16;
}

SK__INLINE bool sk__streq(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

/* Parses either name form ("f32" or "float"). Returns false for an unknown name or NULL. */
SK__INLINE bool sk_dtype_from_name(const char *name, sk_dtype *out) {
  if (!name || !out) return false;
  for (int i = 0; i < (int)SK_DTYPE_COUNT; i++) {
    if (sk__streq(name, sk_dtype_name((sk_dtype)i)) || sk__streq(name, sk_dtype_long_name((sk_dtype)i))) {
      *out = (sk_dtype)i;
      return true;
    }
  }
  return false;
}

/* ---- reduce ops --------------------------------------------------------------------------- */

/* avg = sum / group size; integers truncate toward zero; f16/bf16 accumulate in f32. */
#define SK_REDOP_LIST(X) X(SK_SUM, "sum") X(SK_PROD, "prod") X(SK_MIN, "min") X(SK_MAX, "max") X(SK_AVG, "avg")

typedef enum sk_redop {
#define SK__REDOP_ENUM(e, name) e,
  SK_REDOP_LIST(SK__REDOP_ENUM)
#undef SK__REDOP_ENUM
  SK_REDOP_COUNT
} sk_redop;

SK__INLINE bool sk_redop_valid(sk_redop op) { return (int)op >= 0 && (int)op < (int)SK_REDOP_COUNT; }

SK__INLINE const char *sk_redop_name(sk_redop op) {
  static const char *const names[] = {
#define SK__REDOP_NAME(e, name) name,
      SK_REDOP_LIST(SK__REDOP_NAME)
#undef SK__REDOP_NAME
  };
  return sk_redop_valid(op) ? names[op] : "invalid";
}

SK__INLINE bool sk_redop_from_name(const char *name, sk_redop *out) {
  if (!name || !out) return false;
  for (int i = 0; i < (int)SK_REDOP_COUNT; i++) {
    if (sk__streq(name, sk_redop_name((sk_redop)i))) {
      *out = (sk_redop)i;
      return true;
    }
  }
  return false;
}

/* ---- f16 / bf16 --------------------------------------------------------------------------- */

SK__INLINE uint32_t sk__f32_bits(float f) {
  uint32_t u;
#if defined(__GNUC__) || defined(__clang__)
  __builtin_memcpy(&u, &f, sizeof u);
#else
  union { float f; uint32_t u; } v;
  v.f = f;
  u = v.u;
#endif
  return u;
}

SK__INLINE float sk__f32_from_bits(uint32_t u) {
  float f;
#if defined(__GNUC__) || defined(__clang__)
  __builtin_memcpy(&f, &u, sizeof f);
#else
  union { float f; uint32_t u; } v;
  v.u = u;
  f = v.f;
#endif
  return f;
}

/* IEEE binary16, round to nearest even; overflow gives inf; NaN stays NaN (payload top bits kept,
   quiet bit set). */
SK__INLINE uint16_t sk_f32_to_f16(float f) {
  uint32_t x = sk__f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or NaN */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (ax < 0x38800000u) { /* below 2^-14: a binary16 subnormal or zero */
    if (ax <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: ties to even give 0 */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* m * 2^(e-150) in units of 2^-24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (ax - 0x38000000u) >> 13; /* rebias 127 -> 15 */
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return (uint16_t)(sign | r);
}

SK__INLINE float sk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t bits;
  if (e == 0x1fu) {
    bits = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      e = 113;
      while (!(m & 0x400u)) m <<= 1, e--;
      bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  return sk__f32_from_bits(bits);
}

/* bfloat16, round to nearest even; NaN stays a (quiet) NaN. */
SK__INLINE uint16_t sk_f32_to_bf16(float f) {
  uint32_t x = sk__f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

SK__INLINE float sk_bf16_to_f32(uint16_t b) { return sk__f32_from_bits((uint32_t)b << 16); }

/* ---- allocator and logger hooks ----------------------------------------------------------- */

/* A user allocator: set both functions or neither (zero = the C library's aligned_alloc/free).
   `align` is a power of two no larger than 4096. */
typedef struct sk_allocator {
  void *(*alloc)(void *user, size_t size, size_t align);
  void (*free)(void *user, void *ptr);
  void *user;
} sk_allocator;

typedef enum sk_log_level { SK_LOG_ERROR = 1, SK_LOG_WARN = 2, SK_LOG_INFO = 3, SK_LOG_DEBUG = 4 } sk_log_level;

/* What a log item is about: stable ids, so that programs (and tests) act on the id, never on
   the prose. Names are the ids as text; the text form of an item is "<name>: <message>". */
#define SK_LOG_ID_LIST(X)                                                                        \
  X(SK_LOG_WORLD_FAILED, "sk.world_failed") /* a world's first failure: its root cause; ERROR */ \
  X(SK_LOG_ABORT, "sk.abort")               /* a world was aborted (whatever the cause); WARN */ \
  X(SK_LOG_TIMEOUT, "sk.timeout")           /* a call gave up waiting; ERROR, per device */      \
  X(SK_LOG_MISMATCH, "sk.mismatch")         /* members called different things; ERROR, per device */ \
  X(SK_LOG_FUSION_PLAN, "sk.fusion_plan")   /* a fusion scheduler's buckets; INFO */              \
  X(SK_LOG_TEARDOWN, "sk.teardown")         /* a bounded teardown gave up (MPI); ERROR */

typedef enum sk_log_id {
  SK_LOG_NONE = 0,
#define SK__LOG_ENUM(e, name) e,
  SK_LOG_ID_LIST(SK__LOG_ENUM)
#undef SK__LOG_ENUM
  SK_LOG_ID_COUNT
} sk_log_id;

SK__INLINE const char *sk_log_id_name(sk_log_id id) {
  static const char *const names[] = {"sk.none",
#define SK__LOG_NAME(e, name) name,
                                      SK_LOG_ID_LIST(SK__LOG_NAME)
#undef SK__LOG_NAME
  };
  return (int)id >= 0 && (int)id < (int)SK_LOG_ID_COUNT ? names[id] : "sk.unknown";
}

/* One log item. world_rank: the device it concerns (-1: the whole world). */
typedef struct sk_log_item {
  sk_log_level level;
  sk_log_id id;
  int world_rank;
  const char *msg;
} sk_log_item;

/* A log sink. Zero = silent. `max_level` 0 means SK_LOG_WARN. Called from any device thread;
   the sink must be thread-safe. `item`, when set, receives each item whole (id included);
   otherwise `func` receives its text form, "<id name>: <message>". */
typedef struct sk_logger {
  void (*func)(void *user, sk_log_level level, const char *msg);
  void *user;
  sk_log_level max_level;
  void (*item)(void *user, const sk_log_item *item);
} sk_logger;

SK_EXTERN_C_END

#endif /* SK_CORE_H */

/* ==== private helpers shared by implementation sections (static: safe in every TU) ========= */
#if defined(SK__CORE_PRIVATE) && !defined(SK__CORE_PRIVATE_DONE)
#define SK__CORE_PRIVATE_DONE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SK__DEF(v, d) ((v) ? (v) : (d))

/* sk__fail(err, code, fmt, ...) is sk_error_set whose value is `code` itself rather than the
   call's result, so `return sk__fail(err, ...)`: the clang static analyzer neither steps into
   variadic calls nor, past a few nested calls, into small functions, so from a function's result
   it could not tell that a failure is not SK_OK, and would follow every failure path on as if it
   had succeeded. code is evaluated twice: pass a constant or a plain variable. As a statement,
   write (void)sk__fail(...). */
#define sk__fail(err, code, ...) ((void)sk_error_set((err), (code), __VA_ARGS__), (sk_result)(code))

static SK__UNUSED bool sk__allocator_ok(const sk_allocator *a) { return !a || (!a->alloc) == (!a->free); }

static SK__UNUSED void *sk__alloc(const sk_allocator *a, size_t size, size_t align) {
  if (size == 0) size = 1;
  if (align < sizeof(void *)) align = sizeof(void *);
  if (a && a->alloc) return a->alloc(a->user, size, align);
  size = (size + align - 1) / align * align; /* aligned_alloc wants a multiple */
  return aligned_alloc(align, size);
}

static SK__UNUSED void *sk__calloc(const sk_allocator *a, size_t size, size_t align) {
  void *p = sk__alloc(a, size, align);
  if (p) memset(p, 0, size);
  return p;
}

static SK__UNUSED void sk__free(const sk_allocator *a, void *p) {
  if (!p) return;
  if (a && a->free)
    a->free(a->user, p);
  else
    free(p);
}

/* ---- text files (TEXT FILES in the top comment) ---- */

/* Strict C11 (-std=c11) hides O_NOFOLLOW, O_CLOEXEC and O_DIRECTORY unless a feature macro came
   before the first system include, which a header cannot guarantee; glibc still defines its own
   names for them. A C library hiding both gets 0: symbolic links are then followed (lstat still
   tells a checkpoint's entries apart), and fstat still refuses anything but a regular file. */
#if defined(O_NOFOLLOW)
#define SK__O_NOFOLLOW O_NOFOLLOW
#elif defined(__O_NOFOLLOW)
#define SK__O_NOFOLLOW __O_NOFOLLOW
#else
#define SK__O_NOFOLLOW 0
#endif
#if defined(O_CLOEXEC)
#define SK__O_CLOEXEC O_CLOEXEC
#elif defined(__O_CLOEXEC)
#define SK__O_CLOEXEC __O_CLOEXEC
#else
#define SK__O_CLOEXEC 0
#endif
#if defined(O_DIRECTORY)
#define SK__O_DIRECTORY O_DIRECTORY
#elif defined(__O_DIRECTORY)
#define SK__O_DIRECTORY __O_DIRECTORY
#else
#define SK__O_DIRECTORY 0
#endif

/* The refusal of a text of n bytes over limit, `name` (a path, or the refusing function) naming
   it; the value is the code, as sk__fail's. */
#define sk__fail_too_long(err, name, n, limit)                                                               \
  sk__fail((err), SK_ERR_INVALID_ARGUMENT, "%s: %llu bytes exceeds the limit of %llu bytes", (name),          \
           (unsigned long long)(n), (unsigned long long)(limit))

/* What a file that is not a regular one is, for messages. */
static SK__UNUSED const char *sk__file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

/* Opens path for reading without blocking (a FIFO without a writer would block a plain open) into
   *fd and checks what it is: a regular file of at most limit bytes, its size in *size. On
   failure nothing stays open. */
static SK__UNUSED sk_result sk__open_text_file(const char *path, bool follow_links, size_t limit, int *fd, size_t *size,
                                               sk_error *err) {
  *fd = open(path, O_RDONLY | O_NONBLOCK | SK__O_CLOEXEC | (follow_links ? 0 : SK__O_NOFOLLOW));
  if (*fd < 0 && errno == ELOOP && !follow_links) /* O_NOFOLLOW's answer to a symbolic link */
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: not a regular file (a symbolic link, not followed here)", path);
  if (*fd < 0) return sk__fail(err, SK_ERR_SYSTEM, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  sk_result r = SK_OK;
  if (fstat(*fd, &st)) r = sk__fail(err, SK_ERR_SYSTEM, "%s: cannot stat: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: not a regular file (%s)", path, sk__file_kind(st.st_mode));
  else if ((unsigned long long)st.st_size > (unsigned long long)limit) r = sk__fail_too_long(err, path, st.st_size, limit);
  else *size = (size_t)st.st_size;
  if (r) close(*fd), *fd = -1;
  return r;
}

/* Reads the whole text file at path into *text (NUL-terminated, from a's allocator; with a NULL
   a the C library's, which free() releases) and its length into *len. It must be a regular file
   of at most limit bytes (sk__open_text_file). follow_links: whether path may be a symbolic link
   (yes for paths a user names; no inside a checkpoint root). The reading is bounded by the size
   fstat gave: a file that grows or shrinks meanwhile is refused, never read past its buffer. */
static SK__UNUSED sk_result sk__read_text_file(const sk_allocator *a, const char *path, bool follow_links, size_t limit,
                                               char **text, size_t *len, sk_error *err) {
  size_t size = 0, got = 0;
  int fd = -1;
  sk_result r = sk__open_text_file(path, follow_links, limit, &fd, &size, err);
  if (r) return r;
  char *p = (char *)sk__alloc(a, size + 1, 1);
  if (!p) return close(fd), sk__fail(err, SK_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, size);
  while (!r && got <= size) { /* up to one byte more than fstat said: growth shows as got > size */
    ssize_t k = read(fd, p + got, size + 1 - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) r = sk__fail(err, SK_ERR_SYSTEM, "%s: cannot read: %s", path, strerror(errno));
    else if (k == 0) break;
    else got += (size_t)k;
  }
  close(fd);
  if (!r && got != size)
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: changed while being read (%zu bytes when opened, %s%zu read)", path,
                 size, got > size ? "more than " : "", size < got ? size : got);
  if (r) return sk__free(a, p), r;
  p[size] = 0, *text = p, *len = size;
  return SK_OK;
}

/* Hands one item to the logger: whole to `item`, or as "<id name>: <message>" to `func`. */
static SK__UNUSED SK__PRINTF(5, 0) void sk__vlog(const sk_logger *l, sk_log_level level, sk_log_id id, int world_rank,
                                                 const char *fmt, va_list ap) {
  if (!l || (!l->func && !l->item) || level > (l->max_level ? l->max_level : SK_LOG_WARN)) return;
  char msg[512], text[560];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (l->item) {
    sk_log_item it = {level, id, world_rank, msg};
    l->item(l->user, &it);
    return;
  }
  snprintf(text, sizeof text, "%s: %s", sk_log_id_name(id), msg);
  l->func(l->user, level, text);
}

static SK__UNUSED SK__PRINTF(5, 6) void sk__log(const sk_logger *l, sk_log_level level, sk_log_id id, int world_rank,
                                                const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sk__vlog(l, level, id, world_rank, fmt, ap);
  va_end(ap);
}
#endif /* SK__CORE_PRIVATE */
