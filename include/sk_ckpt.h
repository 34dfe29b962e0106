/* sk_ckpt.h -- sharded checkpoints: which device writes which slice, the manifest, an atomic
   commit under a checkpoint root, and loading any saved layout into any other (resharding).

   NEEDS ZLIB (-lz: crc32 and crc32_combine; Debian zlib1g-dev), and LIBURING (-luring; Debian
   liburing-dev) when built with SK_USE_URING. That is why shardkit.h does not include this
   header: include it yourself. Without SK_USE_URING every read and write is plain pread/pwrite.
   The planning calls (sk_ckpt_box, sk_ckpt_writes, sk_ckpt_read_plan, sk_ckpt_infer_rank_list)
   and the manifest's types are in sk_ckpt_plan.h, which needs neither and which this includes.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_CKPT_IMPL where the other modules'
                             [#define SK_USE_URING]       implementations come from elsewhere)
                             #include "sk_ckpt.h"

   WHAT A CHECKPOINT IS (docs/checkpoints.md)
     A root directory holds complete checkpoints, ckpt-<step> (8 digits), and LATEST, a small
     regular file whose one line names the newest. A checkpoint directory holds rank-<r>.bin (the
     slices device r wrote, each at a 4096-byte aligned offset, zero padding between), optionally
     strategy.json (the plan's strategy file) and MANIFEST, a line-based text:
       shardkit-checkpoint 2
       name ckpt-<step> / step S / position P / devices N / block B
       optimizer KIND                                       (sgd, momentum, adam; "-": not given)
       file NAME size BYTES crc HEX blocks HEX,HEX,...     (one per file but the manifest)
       slice TENSOR KIND DTYPE shape D0,D1 box a:b,c:d file F offset O length L rank R
       crc HEX                                              (crc32 of every byte above it)
     KIND is param, state0 or state1 (the optimizer's states). Checksums are zlib's crc32, per
     block of B = 1 MiB of each file (a partial read verifies the blocks it covers) and per file.
     The optimizer line says what the states are (Momentum's state0 is not Adam's): a loader
     compares it with its own before reading them. A version-1 manifest (no optimizer line)
     still parses, its optimizer unknown ("").

   WHO WRITES WHAT: each slice once, by its redundancy group's round-robin owner (MindSpore's
     remove_param_redundancy, sk_redundancy.h); an optimizer-sharded parameter's shards are
     distinct slices, each owned inside the devices holding that shard. A parameter's optimizer
     states go with it. sk_ckpt_box / sk_ckpt_writes compute this without any runtime.

   SAFETY (docs/checkpoints.md, "Safety rules")
     - Nothing inside a root is followed: a save (a merge's too) looks at ckpt-<step> and
       .tmp-ckpt-* with lstat and empties a stale one through unlinkat on its own O_NOFOLLOW
       descriptor; a load refuses LATEST naming a symlink. An entry that is a symlink, or not a
       directory where a checkpoint directory belongs, is named in the error and left alone. A
       root that is itself a symlink is the caller's path and is followed.
     - Every rank file (read, or its size checked) and every file a save writes is opened
       O_NONBLOCK | O_NOFOLLOW and fstat'd: anything but a regular file (a FIFO would block the
       open for ever) is an error naming it.
     - One writer per root: sk_ckpt_lock (flock on ROOT/.lock, the holder's pid in it) before a
       run saves; sk_ckpt_merge takes it on its output root.

   THE COMMIT (sk_ckpt_save; a crash at any point leaves LATEST's checkpoint loadable)
     1 rank 0 clears a stale ROOT/.tmp-ckpt-<step> and creates it;   2 every writer writes and
     fsyncs its rank file;   3 rank 0 writes strategy.json and MANIFEST, fsyncs them and the
     directory;   4 renames it to ROOT/ckpt-<step> and fsyncs ROOT;   5 writes LATEST.tmp, fsyncs,
     renames it to LATEST, fsyncs ROOT. Before step 3, every tensor saved must be tiled exactly
     once by the devices' slices (else nothing is committed; checked on the grid of the slices'
     cut points, in O(n log n) for the grids layouts make). Devices agree on failures (a small
     AllReduce over comm before step 1, after steps 1 and 2, and at the end): when one fails, the
     others return SK_ERR_ABORTED naming it.

   LOADING (sk_ckpt_open + sk_ckpt_load): any target boxes, on any device count. Each target box
     is tiled by the saved boxes of its tensor and kind that intersect it (every element exactly
     once, or the load fails naming the tensor, kind, rank and what is missing); each piece
     reads the byte range from its first to its last element of the saved slice, widened to
     whole blocks, whose crcs are checked before a byte is copied. A rank file shorter or longer
     than the manifest says is refused before anything is read.

   ERRORS: SK_ERR_INVALID_ARGUMENT for bad arguments and for a checkpoint that is corrupt,
     incomplete or does not fit the targets (the message names the file, the block, the tensor
     and the rank), or an entry of the wrong type; SK_ERR_INVALID_USAGE for a root another
     writer holds; SK_ERR_SYSTEM with the path and errno text when the OS refuses;
     SK_ERR_UNSUPPORTED when io_uring is demanded and not available; SK_ERR_ABORTED when the test
     hook stopped a save. Nothing leaks on any path; no process-wide state.

   TEXT FILES (sk_core.h): LATEST and MANIFEST are read only when each is a regular file, not a
     symbolic link, of at most SK_MAX_TEXT_FILE_BYTES (256 MiB unless defined otherwise), and so
     is strategy.json by sk_ckpt_read_strategy (its size as the manifest gives it); anything else
     is refused naming it, before a byte is read, and never blocks (a FIFO named LATEST).
     sk_ckpt_manifest_parse refuses a longer len the same way.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_CKPT_IMPL)
#define SK_CKPT_IMPL
#endif
#ifndef SK_CKPT_H
#define SK_CKPT_H

#include "sk_comm.h"
#include "sk_core.h"
#include "sk_layout.h"
#include "sk_optim.h" /* the optimizers' names: the manifest's optimizer line */
#include "sk_redundancy.h"
#include "sk_ckpt_plan.h" /* the manifest's types and the planning calls, which need no zlib */

SK_EXTERN_C_BEGIN

/* How bytes move. AUTO: io_uring when built with SK_USE_URING and the kernel accepts
   io_uring_queue_init, else plain pread/pwrite (the report says which ran); URING: io_uring or
   SK_ERR_UNSUPPORTED; PLAIN: pread/pwrite. */
typedef enum sk_ckpt_io { SK_CKPT_IO_AUTO = 0, SK_CKPT_IO_PLAIN, SK_CKPT_IO_URING } sk_ckpt_io;
SK_API const char *sk_ckpt_io_name(sk_ckpt_io io); /* "auto", "plain", "io_uring" */

/* Where a save stands when the test hook is asked (crash injection in tests). */
typedef enum sk_ckpt_stage {
  SK_CKPT_AT_DATA = 0,  /* the temporary directory exists, no rank file written yet */
  SK_CKPT_AT_HALF_DATA, /* a rank file is half written */
  SK_CKPT_AT_MANIFEST,  /* rank files fsync'd, the manifest not yet written */
  SK_CKPT_AT_RENAME,    /* everything fsync'd, the directory not yet renamed */
  SK_CKPT_AT_POINTER,   /* ckpt-<step> is in place, LATEST not yet moved */
  SK_CKPT_AT_POINTER_TMP, /* LATEST.tmp written, not yet renamed */
  SK_CKPT_STAGES
} sk_ckpt_stage;

/* Zero-initialise. strategy: optional text saved as strategy.json (len bytes). hook: called at
   each stage on each device; nonzero stops the save there (SK_ERR_ABORTED), as a crash would,
   leaving what is on disk (tests kill the process from it instead). */
typedef struct sk_ckpt_save_desc {
  int64_t step, position; /* the runtime's step count and the data position to resume from */
  const char *optimizer;  /* the run's optimizer kind, sk_optim_kind_name's spelling; NULL: not recorded */
  const char *strategy;
  size_t strategy_len;
  sk_ckpt_io io;
  int (*hook)(void *user, sk_ckpt_stage at, int rank);
  void *hook_user;
  sk_allocator allocator; /* every allocation of the save (zero = the C library) */
} sk_ckpt_save_desc;

/* What a save or load did on this device. */
typedef struct sk_ckpt_report {
  sk_ckpt_io used;      /* PLAIN or URING: the path that ran */
  uint64_t bytes;       /* bytes this device wrote or read */
  int slices;           /* slices it wrote, or pieces it read */
  char name[SK_CKPT_FILE_MAX]; /* the checkpoint */
} sk_ckpt_report;

/* ---- manifests ---------------------------------------------------------------------------- */

/* The manifest's text (from m->allocator: zero, malloc'd; NUL-terminated, ends with its crc line). */
SK_API sk_result sk_ckpt_manifest_format(const sk_ckpt_manifest *m, char **text, size_t *len, sk_error *err);
/* Reads len bytes of text into *m (overwritten; free it with sk_ckpt_manifest_free). The crc
   line must hold the text's crc; every reference (file index, box inside shape, offset and
   length inside the file) is checked. */
SK_API sk_result sk_ckpt_manifest_parse(const char *text, size_t len, sk_ckpt_manifest *m, sk_error *err);
SK_API void sk_ckpt_manifest_free(sk_ckpt_manifest *m);

/* ---- files -------------------------------------------------------------------------------- */

/* Collective over comm (NULL: this process is the only device, rank 0): the commit above. Each
   device passes its slices (write set on those it writes). */
SK_API sk_result sk_ckpt_save(sk_comm *comm, const char *root, const sk_ckpt_save_desc *desc, int n,
                              const sk_ckpt_slice *slices, sk_ckpt_report *report, sk_error *err);
/* The newest checkpoint of root (LATEST) into *m: its manifest read and checked, the rank files'
   sizes and strategy.json's bytes checked. */
SK_API sk_result sk_ckpt_open(const char *root, sk_ckpt_manifest *m, sk_error *err);
/* One checkpoint directory (not through LATEST). */
SK_API sk_result sk_ckpt_open_dir(const char *dir, sk_ckpt_manifest *m, sk_error *err);
/* sk_ckpt_open with every allocation (the open's, and later calls' on *m) from `allocator`,
   which *m keeps (NULL: the C library). */
SK_API sk_result sk_ckpt_open_with(const char *root, const sk_allocator *allocator, sk_ckpt_manifest *m, sk_error *err);
/* Fills each slice's data from the checkpoint (rank: named in messages). A slice saved in another
   floating dtype (f64, f32, f16, bf16) is converted, rounding to nearest even, as MindSpore's
   non-strict load does. */
SK_API sk_result sk_ckpt_load(const sk_ckpt_manifest *m, int rank, sk_ckpt_io io, int n, const sk_ckpt_slice *slices,
                              sk_ckpt_report *report, sk_error *err);
/* Every block of every file against its crc, every file's crc, and every tensor and kind tiled
   exactly once by its slices. */
SK_API sk_result sk_ckpt_verify(const sk_ckpt_manifest *m, sk_ckpt_io io, sk_error *err);
/* Internal (the tests and the fuzzer call it): the tiling check of sk_ckpt_verify and sk_ckpt_save
   alone, no file read. A tensor and kind whose slices' cut points make a grid of more than
   cells_per_slice cells per slice (those two: SK__CKPT_CELLS_PER_SLICE; 0: every one) is checked
   pair by pair rather than cell by cell, with the same outcome and message. */
#define SK__CKPT_CELLS_PER_SLICE 8
SK_API sk_result sk__ckpt_check_tiling(const sk_ckpt_manifest *m, int cells_per_slice, sk_error *err);
/* A checkpoint of m's tensors whole (every kind), as one device wrote them, under out_root
   (committed like any other: out_root/ckpt-<step> and out_root/LATEST), holding out_root's lock
   (sk_ckpt_lock) meanwhile. Each tensor and kind must be tiled by its saved slices, checked
   before a whole tensor is allocated: a gap is refused naming a box of it ("merge: tensor 'w':
   box [0:4, 0:8] is missing"). report (may be NULL): what the save wrote, its name included. */
SK_API sk_result sk_ckpt_merge(const sk_ckpt_manifest *m, const char *out_root, sk_ckpt_io io, sk_ckpt_report *report,
                               sk_error *err);
/* The contents of strategy.json in *text (from m->allocator: zero, malloc'd; NULL and 0 when the
   checkpoint has none). */
SK_API sk_result sk_ckpt_read_strategy(const sk_ckpt_manifest *m, char **text, size_t *len, sk_error *err);

/* ---- one writer per root ------------------------------------------------------------------ */

/* A checkpoint root taken for writing. */
typedef struct sk_ckpt_root_lock {
  int fd; /* ROOT/.lock, holding the flock */
  bool held;
} sk_ckpt_root_lock;
/* Takes root for writing, before anything is written there: creates root if missing (a root that
   is itself a symlink to a directory is the caller's path and is followed; entries inside a root
   never are), opens or creates ROOT/.lock (a regular file, never a symlink; never removed),
   takes flock(LOCK_EX | LOCK_NB) on it, writes this process's pid into it, then creates and
   removes ROOT/.probe. Held elsewhere (another process, or another lock in this one): fails at
   once with SK_ERR_INVALID_USAGE, "checkpoint root R is being written by process P". A root that
   cannot be created or written: SK_ERR_SYSTEM naming it. The lock lasts until sk_ckpt_unlock or
   the end of the process, however it ends (kill -9 never blocks a later save); a child forked
   meanwhile shares it until it exits (exec drops it). *lock is overwritten. */
SK_API sk_result sk_ckpt_lock(const char *root, sk_ckpt_root_lock *lock, sk_error *err);
/* Releases a lock sk_ckpt_lock took (anything else, zeroed included: nothing happens). */
SK_API void sk_ckpt_unlock(sk_ckpt_root_lock *lock);

SK_EXTERN_C_END
#endif /* SK_CKPT_H */

/* ==== implementation ======================================================================== */
#if defined(SK_CKPT_IMPL) && !defined(SK_CKPT_IMPL_DONE)
#define SK_CKPT_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>
#ifdef SK_USE_URING
#if !defined(__cplusplus) && !defined(_POSIX_C_SOURCE) && !defined(_DEFAULT_SOURCE) && !defined(_GNU_SOURCE)
/* liburing.h uses POSIX types (sigset_t, AT_FDCWD) that strict C11 hides */
#error "sk_ckpt.h with SK_USE_URING: define _POSIX_C_SOURCE 200809L (or -D_GNU_SOURCE) before the first include"
#endif
#include <liburing.h>
#endif

#if !defined(__cplusplus)
/* Strict C11 hides these unless a feature macro came before the first system include (see
   sk_comm.h): declared here, compatible with glibc's and musl's. */
extern ssize_t pread(int fd, void *buf, size_t n, off_t off);
extern ssize_t pwrite(int fd, const void *buf, size_t n, off_t off);
extern int lstat(const char *path, struct stat *st);
extern int unlinkat(int dirfd, const char *name, int flags);
extern DIR *fdopendir(int fd);
extern int ftruncate(int fd, off_t length);
#endif
/* SK__O_NOFOLLOW, SK__O_DIRECTORY and SK__O_CLOEXEC: sk_core.h's private part. */

SK_EXTERN_C_BEGIN

/* Row-major index inside box `in` of the global coordinates c. */
static int64_t sk__ckpt_index(const sk_slice *in, const int64_t *c) {
  int64_t i = 0;
  for (int d = 0; d < in->ndims; d++) i = i * (in->stop[d] - in->start[d]) + (c[d] - in->start[d]);
  return i;
}

SK_API const char *sk_ckpt_io_name(sk_ckpt_io io) {
  return io == SK_CKPT_IO_PLAIN ? "plain" : io == SK_CKPT_IO_URING ? "io_uring" : "auto";
}

/* ---- manifest text ---------------------------------------------------------------------------- */

typedef struct sk__ckpt_buf {
  char *p;
  size_t len, cap;
  bool oom;
  const sk_allocator *a; /* no realloc: growth is alloc + copy + free, doubling */
} sk__ckpt_buf;

static SK__PRINTF(2, 3) void sk__ckpt_put(sk__ckpt_buf *b, const char *fmt, ...) {
  for (int pass = 0; pass < 2 && !b->oom; pass++) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = true; return; }
    if (b->p && b->len + (size_t)k < b->cap) { b->len += (size_t)k; return; }
    size_t cap = (b->cap + (size_t)k + 1) * 2;
    char *p = (char *)sk__alloc(b->a, cap, 1);
    if (!p) { b->oom = true; return; }
    if (b->p) memcpy(p, b->p, b->len);
    sk__free(b->a, b->p);
    b->p = p, b->cap = cap;
  }
}

static void sk__ckpt_put_dims(sk__ckpt_buf *b, const char *key, int nd, const int64_t *a, const int64_t *z) {
  sk__ckpt_put(b, " %s ", key);
  for (int d = 0; d < nd; d++)
    if (z) sk__ckpt_put(b, "%s%lld:%lld", d ? "," : "", (long long)a[d], (long long)z[d]);
    else sk__ckpt_put(b, "%s%lld", d ? "," : "", (long long)a[d]);
  if (!nd) sk__ckpt_put(b, "-"); /* a scalar */
}

/* An optimizer kind's name as sk_optim_kind_name spells it (what the manifest's line may hold). */
static bool sk__ckpt_optimizer_known(const char *name) {
  sk_optim_kind kind;
  return sk_optim_kind_from_name(name, &kind);
}

SK_API sk_result sk_ckpt_manifest_format(const sk_ckpt_manifest *m, char **text, size_t *len, sk_error *err) {
  if (!m || !text) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_manifest_format: NULL argument");
  const char *opt = m->optimizer;
  if (!memchr(opt, 0, sizeof m->optimizer) || (*opt && !sk__ckpt_optimizer_known(opt)))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_manifest_format: optimizer '%.*s' is not sgd, momentum or adam",
                    (int)sizeof m->optimizer, opt);
  sk__ckpt_buf b = {NULL, 0, 0, false, &m->allocator};
  sk__ckpt_put(&b, "shardkit-checkpoint 2\nname %s\nstep %lld\nposition %lld\ndevices %d\nblock %u\noptimizer %s\n",
               m->name, (long long)m->step, (long long)m->position, m->devices, (unsigned)m->block, *opt ? opt : "-");
  for (int f = 0; f < m->nfiles; f++) {
    const sk_ckpt_file *F = &m->files[f];
    sk__ckpt_put(&b, "file %s size %llu crc %08x blocks ", F->name, (unsigned long long)F->size, (unsigned)F->crc);
    for (int k = 0; k < F->nblocks; k++) sk__ckpt_put(&b, "%s%08x", k ? "," : "", (unsigned)F->blocks[k]);
    sk__ckpt_put(&b, "%s\n", F->nblocks ? "" : "-");
  }
  for (int i = 0; i < m->nentries; i++) {
    const sk_ckpt_entry *e = &m->entries[i];
    sk__ckpt_put(&b, "slice %s %s %s", e->tensor, sk_ckpt_kind_name(e->kind), sk_dtype_name(e->dtype));
    sk__ckpt_put_dims(&b, "shape", e->ndims, e->shape, NULL);
    sk__ckpt_put_dims(&b, "box", e->ndims, e->box.start, e->box.stop);
    sk__ckpt_put(&b, " file %d offset %llu length %llu rank %d\n", e->file, (unsigned long long)e->offset,
                 (unsigned long long)e->length, e->rank);
  }
  uint32_t crc = b.oom ? 0 : (uint32_t)crc32(0L, (const Bytef *)b.p, (uInt)b.len);
  sk__ckpt_put(&b, "crc %08x\n", (unsigned)crc);
  if (b.oom) {
    sk__free(b.a, b.p);
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory formatting the manifest");
  }
  *text = b.p;
  if (len) *len = b.len;
  return SK_OK;
}

void sk_ckpt_manifest_free(sk_ckpt_manifest *m) {
  if (!m) return;
  const sk_allocator *a = &m->allocator;
  for (int f = 0; m->files && f < m->nfiles; f++) sk__free(a, m->files[f].blocks);
  sk__free(a, m->files), sk__free(a, m->entries);
  m->files = NULL, m->entries = NULL, m->nfiles = m->nentries = 0;
}

/* A parse cursor: one line at a time, the line number for messages. */
typedef struct sk__ckpt_cur {
  const char *at, *end;
  int line;
  const sk_allocator *a; /* the manifest's */
  char buf[8192];
} sk__ckpt_cur;

/* The next line into c->buf (NUL-terminated, without its newline); false at the end. Lines of
   block lists can be long: they are read by sk__ckpt_blocks from c->at directly. */
static bool sk__ckpt_line(sk__ckpt_cur *c, const char **start, size_t *n) {
  if (c->at >= c->end) return false;
  const char *nl = (const char *)memchr(c->at, '\n', (size_t)(c->end - c->at));
  *start = c->at, *n = nl ? (size_t)(nl - c->at) : (size_t)(c->end - c->at);
  c->at = nl ? nl + 1 : c->end;
  c->line++;
  return true;
}

/* "a,b,c" or "a:b,c:d" (range) of exactly nd numbers (pairs); "-" for none. */
static bool sk__ckpt_dims(const char *s, int *nd, int64_t *a, int64_t *z) {
  *nd = 0;
  if (!strcmp(s, "-")) return true;
  for (const char *p = s;;) {
    char *end;
    if (*nd == SK_MAX_DIMS) return false;
    a[*nd] = strtoll(p, &end, 10);
    if (end == p) return false;
    if (z) {
      if (*end != ':') return false;
      p = end + 1, z[*nd] = strtoll(p, &end, 10);
      if (end == p) return false;
    }
    (*nd)++;
    if (!*end) return true;
    if (*end != ',') return false;
    p = end + 1;
  }
}

static sk_result sk__ckpt_bad(sk_error *err, const sk__ckpt_cur *c, const char *what) {
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint manifest: line %d: %s", c->line, what);
}

/* Exactly 8 hex digits at p, all before end, into *v. Read by hand: strtoul would skip blanks,
   take a sign or 0x, and read past end (the text need not be NUL-terminated). */
static bool sk__ckpt_hex8(const char *p, const char *end, uint32_t *v) {
  if (end - p < 8) return false;
  *v = 0;
  for (int k = 0; k < 8; k++) {
    char ch = p[k];
    int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
    if (d < 0) return false;
    *v = *v << 4 | (uint32_t)d;
  }
  return true;
}

/* "file NAME size N crc HEX blocks HEX,..." */
static sk_result sk__ckpt_parse_file(sk__ckpt_cur *c, const char *s, size_t n, sk_ckpt_file *f, uint32_t block,
                                     sk_error *err) {
  char name[SK_CKPT_FILE_MAX];
  unsigned long long size = 0;
  unsigned crc = 0;
  int used = 0;
  size_t head = n < sizeof c->buf ? n : sizeof c->buf - 1; /* the head; blocks are read from s, up to s + n */
  memcpy(c->buf, s, head), c->buf[head] = 0;
  if (sscanf(c->buf, "file %63s size %llu crc %x blocks %n", name, &size, &crc, &used) != 3 || !used)
    return sk__ckpt_bad(err, c, "expected: file NAME size BYTES crc HEX blocks HEX,...");
  if (strchr(name, '/') || name[0] == '.') return sk__ckpt_bad(err, c, "a file name with a path");
  memcpy(f->name, name, sizeof name), f->size = size, f->crc = crc;
  /* k blocks take 9k - 1 characters: a size the line cannot list is refused before allocating */
  uint64_t nblocks = size / block + (size % block != 0);
  if (nblocks > (n - (size_t)used + 1) / 9 || nblocks > INT_MAX)
    return sk__ckpt_bad(err, c, "a block list that does not hold one crc per block of the file's size");
  f->nblocks = (int)nblocks;
  f->blocks = (uint32_t *)sk__calloc(c->a, ((size_t)f->nblocks + 1) * sizeof(uint32_t), 0);
  if (!f->blocks) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint manifest: out of memory");
  const char *p = s + used, *end = s + n;
  for (int k = 0; k < f->nblocks; k++) {
    bool last = k + 1 == f->nblocks;
    if (!sk__ckpt_hex8(p, end, &f->blocks[k]) || (last ? p + 8 != end : p + 8 == end || p[8] != ','))
      return sk__ckpt_bad(err, c, "a block list that does not hold one crc per block of the file's size");
    if (!last) p += 9;
  }
  if (!f->nblocks && (end - p != 1 || *p != '-')) return sk__ckpt_bad(err, c, "an empty file lists no blocks: '-'");
  return SK_OK;
}

/* "slice TENSOR KIND DTYPE shape ... box ... file F offset O length L rank R" */
static sk_result sk__ckpt_parse_slice(sk__ckpt_cur *c, sk_ckpt_entry *e, sk_error *err) {
  char kind[16], dt[16], shape[256], box[512];
  unsigned long long off = 0, len = 0;
  memset(e, 0, sizeof *e); /* the dims past the box's rank stay zero */
  if (sscanf(c->buf, "slice %127s %15s %15s shape %255s box %511s file %d offset %llu length %llu rank %d", e->tensor,
             kind, dt, shape, box, &e->file, &off, &len, &e->rank) != 9)
    return sk__ckpt_bad(err, c, "expected: slice TENSOR KIND DTYPE shape D,.. box A:B,.. file F offset O length L rank R");
  int k = 0, nd = 0, nb = 0;
  while (k < SK_CKPT_KINDS && strcmp(kind, sk_ckpt_kind_name((sk_ckpt_kind)k))) k++;
  if (k == SK_CKPT_KINDS) return sk__ckpt_bad(err, c, "a kind that is not param, state0 or state1");
  e->kind = (sk_ckpt_kind)k, e->offset = off, e->length = len;
  if (!sk_dtype_from_name(dt, &e->dtype)) return sk__ckpt_bad(err, c, "an unknown dtype");
  if (!sk__ckpt_dims(shape, &nd, e->shape, NULL) || !sk__ckpt_dims(box, &nb, e->box.start, e->box.stop) || nd != nb)
    return sk__ckpt_bad(err, c, "a shape or box that is not D,... / A:B,... of the same rank");
  e->ndims = e->box.ndims = nd;
  for (int d = 0; d < nd; d++)
    if (e->box.start[d] < 0 || e->box.start[d] >= e->box.stop[d] || e->box.stop[d] > e->shape[d])
      return sk__ckpt_bad(err, c, "a box outside its tensor's shape");
  /* the whole tensor's bytes fit in int64 in any dtype (8 bytes at most), so no box's volume or
     byte count (here, in loads, in sk_ckpt_verify's sums) can overflow */
  int64_t elems = 1;
  for (int d = 0; d < nd; d++) {
    if (e->shape[d] > INT64_MAX / 8 / elems) return sk__ckpt_bad(err, c, "a shape of 2^60 elements or more");
    elems *= e->shape[d];
  }
  if ((uint64_t)sk_slice_volume(&e->box) * sk_dtype_size(e->dtype) != e->length)
    return sk__ckpt_bad(err, c, "a length that is not the box's bytes");
  return SK_OK;
}

/* Counts lines starting with `key ` to size the arrays. */
static int sk__ckpt_count(const char *text, size_t len, const char *key) {
  int n = 0;
  size_t k = strlen(key);
  for (const char *p = text; p && p < text + len;) {
    if ((size_t)(text + len - p) > k && !memcmp(p, key, k)) n++;
    const char *nl = (const char *)memchr(p, '\n', (size_t)(text + len - p));
    p = nl ? nl + 1 : NULL;
  }
  return n;
}

/* Version 2's "optimizer KIND" line: exactly an optimizer's name, or "-" (the saver gave none). */
static sk_result sk__ckpt_parse_optimizer(sk__ckpt_cur *c, sk_ckpt_manifest *m, sk_error *err) {
  const char *s;
  size_t n;
  if (!sk__ckpt_line(c, &s, &n) || n < 10 || n >= 10 + sizeof m->optimizer || memcmp(s, "optimizer ", 10))
    return sk__ckpt_bad(err, c, "expected: optimizer sgd|momentum|adam|-");
  memcpy(c->buf, s + 10, n - 10), c->buf[n - 10] = 0;
  bool none = !strcmp(c->buf, "-");
  /* the length too: a NUL inside the line would end the name early */
  if (strlen(c->buf) != n - 10 || (!none && !sk__ckpt_optimizer_known(c->buf)))
    return sk__ckpt_bad(err, c, "an optimizer that is not sgd, momentum, adam or -");
  snprintf(m->optimizer, sizeof m->optimizer, "%.15s", none ? "" : c->buf); /* a name: 8 bytes at most */
  return SK_OK;
}

/* The header lines, in order; version 1 has no optimizer line. */
static sk_result sk__ckpt_parse_head(sk__ckpt_cur *c, sk_ckpt_manifest *m, sk_error *err) {
  static const char *const keys[5] = {"name", "step", "position", "devices", "block"};
  const char *s;
  size_t n;
  if (!sk__ckpt_line(c, &s, &n) || n != 21 || memcmp(s, "shardkit-checkpoint ", 20) || (s[20] != '1' && s[20] != '2'))
    return sk__ckpt_bad(err, c, "not a shardkit checkpoint manifest (version 1 or 2)");
  bool v2 = s[20] == '2';
  for (int k = 0; k < 5; k++) {
    long long v = 0;
    char fmt[32];
    if (!sk__ckpt_line(c, &s, &n) || n >= sizeof c->buf) return sk__ckpt_bad(err, c, "a header line is missing");
    memcpy(c->buf, s, n), c->buf[n] = 0;
    snprintf(fmt, sizeof fmt, k ? "%s %%lld" : "%s %%63s", keys[k]);
    bool ok = k ? sscanf(c->buf, fmt, &v) == 1 && v >= 0 : sscanf(c->buf, fmt, m->name) == 1;
    if (!ok) return sk__ckpt_bad(err, c, k ? "expected a header number (step, position, devices, block)" : "expected: name NAME");
    /* checked before narrowing: (int)4294967297 would read as 1 device */
    if (k == 3 && v > INT_MAX) return sk__ckpt_bad(err, c, "a device count out of range");
    if (k == 4 && v != SK_CKPT_BLOCK) return sk__ckpt_bad(err, c, "a block size other than 1 MiB");
    if (k == 1) m->step = v;
    if (k == 2) m->position = v;
    if (k == 3) m->devices = (int)v;
    if (k == 4) m->block = (uint32_t)v;
  }
  return v2 ? sk__ckpt_parse_optimizer(c, m, err) : SK_OK;
}

/* Every entry's file and byte range inside its file. */
static sk_result sk__ckpt_check_refs(const sk_ckpt_manifest *m, sk_error *err) {
  for (int i = 0; i < m->nentries; i++) {
    const sk_ckpt_entry *e = &m->entries[i];
    /* compared without adding: offset + length can wrap past 2^64 */
    if (e->file < 0 || e->file >= m->nfiles || e->offset > m->files[e->file].size ||
        e->length > m->files[e->file].size - e->offset)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint manifest: slice %d ('%s' %s) lies outside its file", i,
                      e->tensor, sk_ckpt_kind_name(e->kind));
  }
  return SK_OK;
}

/* The body: file and slice lines, then the crc line, which must be the last. */
static sk_result sk__ckpt_parse_body(sk__ckpt_cur *c, const char *text, sk_ckpt_manifest *m, sk_error *err) {
  const char *s;
  size_t n;
  while (sk__ckpt_line(c, &s, &n)) {
    sk_result r = SK_OK;
    if (n > 5 && !memcmp(s, "file ", 5)) r = sk__ckpt_parse_file(c, s, n, &m->files[m->nfiles++], m->block, err);
    else if (n > 6 && !memcmp(s, "slice ", 6) && n < sizeof c->buf) {
      memcpy(c->buf, s, n), c->buf[n] = 0;
      r = sk__ckpt_parse_slice(c, &m->entries[m->nentries++], err);
    } else if (n == 12 && !memcmp(s, "crc ", 4)) {
      char got[16]; /* compared as text: one spelling only (lowercase hex) */
      snprintf(got, sizeof got, "%08x", (unsigned)crc32(0L, (const Bytef *)text, (uInt)(s - text)));
      if (memcmp(got, s + 4, 8)) return sk__ckpt_bad(err, c, "the manifest's crc does not match its text (corrupt)");
      if (s + n == c->end) return sk__ckpt_bad(err, c, "the crc line has no newline (incomplete manifest)");
      if (c->at != c->end) return sk__ckpt_bad(err, c, "text after the crc line");
      return sk__ckpt_check_refs(m, err);
    } else r = sk__ckpt_bad(err, c, "expected a file, slice or crc line");
    if (r) return r;
  }
  return sk__ckpt_bad(err, c, "the crc line is missing (incomplete manifest)");
}

/* sk_ckpt_manifest_parse with *m's arrays from `a` (NULL: the C library), which *m keeps. */
static sk_result sk__ckpt_parse(const char *text, size_t len, const sk_allocator *a, sk_ckpt_manifest *m, sk_error *err) {
  if (!text || !m) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_manifest_parse: NULL argument");
  memset(m, 0, sizeof *m);
  if (a) m->allocator = *a;
  a = &m->allocator;
  if (len > SK_MAX_TEXT_FILE_BYTES) return sk__fail_too_long(err, "sk_ckpt_manifest_parse", len, SK_MAX_TEXT_FILE_BYTES);
  int nf = sk__ckpt_count(text, len, "file "), ns = sk__ckpt_count(text, len, "slice ");
  m->files = (sk_ckpt_file *)sk__calloc(a, ((size_t)nf + 1) * sizeof *m->files, 0);
  m->entries = (sk_ckpt_entry *)sk__calloc(a, ((size_t)ns + 1) * sizeof *m->entries, 0);
  sk__ckpt_cur *c = (sk__ckpt_cur *)sk__alloc(a, sizeof *c, 0);
  sk_result r = !m->files || !m->entries || !c ? sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint manifest: out of memory")
                                               : SK_OK;
  if (!r) {
    c->at = text, c->end = text + len, c->line = 0, c->a = a;
    r = sk__ckpt_parse_head(c, m, err);
  }
  if (!r) r = sk__ckpt_parse_body(c, text, m, err);
  sk__free(a, c);
  if (r) sk_ckpt_manifest_free(m);
  return r;
}

SK_API sk_result sk_ckpt_manifest_parse(const char *text, size_t len, sk_ckpt_manifest *m, sk_error *err) {
  return sk__ckpt_parse(text, len, NULL, m, err);
}

/* ---- I/O: io_uring or pread/pwrite ------------------------------------------------------------- */

typedef struct sk__ckpt_req {
  char *buf;
  size_t len;
  uint64_t off;
} sk__ckpt_req;

static sk_result sk__ckpt_sys(sk_error *err, const char *what, const char *path) {
  return sk__fail(err, SK_ERR_SYSTEM, "checkpoint: %s %s: %s", what, path, strerror(errno));
}

static sk_result sk__ckpt_plain(int fd, bool write, sk__ckpt_req *q, int n, const char *path, sk_error *err) {
  for (int i = 0; i < n; i++)
    while (q[i].len) {
      ssize_t k = write ? pwrite(fd, q[i].buf, q[i].len, (off_t)q[i].off) : pread(fd, q[i].buf, q[i].len, (off_t)q[i].off);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return sk__ckpt_sys(err, write ? "writing" : "reading", path);
      if (!k) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s ends early (truncated)", path);
      q[i].buf += k, q[i].len -= (size_t)k, q[i].off += (uint64_t)k;
    }
  return SK_OK;
}

#ifdef SK_USE_URING
#define SK__CKPT_DEPTH 32u
/* Queues request i (at most 1 GiB of it: one SQE's length is 32 bits). */
static void sk__ckpt_uring_prep(struct io_uring *ring, bool write, sk__ckpt_req *q, int i) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
  unsigned len = q[i].len > (1u << 30) ? 1u << 30 : (unsigned)q[i].len;
  if (write) io_uring_prep_write(sqe, -1, q[i].buf, len, q[i].off);
  else io_uring_prep_read(sqe, -1, q[i].buf, len, q[i].off);
  sqe->fd = 0, sqe->flags |= IOSQE_FIXED_FILE; /* the one registered file */
  io_uring_sqe_set_data(sqe, (void *)(intptr_t)i);
}

/* Every request through the ring, at most DEPTH in flight; a short transfer is queued again for
   the rest. */
static sk_result sk__ckpt_uring_run(struct io_uring *ring, bool write, sk__ckpt_req *q, int n, const char *path,
                                    sk_error *err) {
  int next = 0, inflight = 0;
  while (next < n || inflight) {
    while (next < n && inflight < (int)SK__CKPT_DEPTH) {
      if (!q[next].len) { next++; continue; }
      sk__ckpt_uring_prep(ring, write, q, next++), inflight++;
    }
    if (!inflight) break;
    io_uring_submit(ring);
    struct io_uring_cqe *cqe;
    int w = io_uring_wait_cqe(ring, &cqe);
    if (w < 0) return errno = -w, sk__ckpt_sys(err, "waiting for io_uring on", path);
    int i = (int)(intptr_t)io_uring_cqe_get_data(cqe), res = cqe->res;
    io_uring_cqe_seen(ring, cqe), inflight--;
    if (res < 0 && res != -EINTR && res != -EAGAIN) return errno = -res, sk__ckpt_sys(err, write ? "writing" : "reading", path);
    if (res == 0 && q[i].len) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s ends early (truncated)", path);
    if (res > 0) q[i].buf += res, q[i].len -= (size_t)res, q[i].off += (uint64_t)res;
    if (q[i].len) sk__ckpt_uring_prep(ring, write, q, i), inflight++;
  }
  return SK_OK;
}
#endif

/* The requests on fd by the path `want` asks for; *used: the one that ran. */
static sk_result sk__ckpt_io(int fd, bool write, sk__ckpt_req *q, int n, sk_ckpt_io want, sk_ckpt_io *used,
                             const char *path, sk_error *err) {
#ifdef SK_USE_URING
  if (want != SK_CKPT_IO_PLAIN) {
    struct io_uring ring;
    int e = io_uring_queue_init(SK__CKPT_DEPTH, &ring, 0);
    if (!e && (e = io_uring_register_files(&ring, &fd, 1)) < 0) io_uring_queue_exit(&ring);
    if (!e) {
      sk_result r = sk__ckpt_uring_run(&ring, write, q, n, path, err);
      io_uring_queue_exit(&ring);
      if (used) *used = SK_CKPT_IO_URING;
      return r;
    }
    if (want == SK_CKPT_IO_URING) /* refused (seccomp, an old kernel, io_uring_disabled) */
      return sk__fail(err, SK_ERR_UNSUPPORTED, "checkpoint: the kernel refused io_uring: %s", strerror(-e));
  }
#else
  if (want == SK_CKPT_IO_URING)
    return sk__fail(err, SK_ERR_UNSUPPORTED, "checkpoint: io_uring asked, but built without SK_USE_URING");
#endif
  if (used) *used = SK_CKPT_IO_PLAIN;
  return sk__ckpt_plain(fd, write, q, n, path, err);
}

/* ---- small files and directories ---------------------------------------------------------------- */

/* What a directory entry is, for messages. */
static const char *sk__ckpt_type_name(mode_t m) {
  return S_ISLNK(m) ? "a symbolic link" : S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISREG(m) ? "a regular file"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "a socket";
}

/* The error for path, which is not a regular file (its type from lstat: never followed). */
static sk_result sk__ckpt_not_regular(const char *path, sk_error *err) {
  struct stat st;
  const char *what = lstat(path, &st) ? "not a regular file" : sk__ckpt_type_name(st.st_mode);
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s is %s, not a regular file%s", path, what,
                  !strcmp(what, "a symbolic link") ? ": not followed" : "");
}

/* path opened with flags (O_RDONLY, or O_WRONLY | O_CREAT | O_TRUNC) when it is a regular file,
   *size its size (NULL: not wanted). Every rank file, LATEST.tmp, MANIFEST and strategy.json
   written, goes through here: O_NOFOLLOW refuses a symlink, O_NONBLOCK keeps a FIFO from
   blocking the open (for ever, without a writer), fstat names anything else. O_NONBLOCK is then
   cleared: io_uring honours it on some regular files. */
static sk_result sk__ckpt_open_file(const char *path, int flags, int *fd, uint64_t *size, sk_error *err) {
  bool write = flags != O_RDONLY;
  *fd = open(path, flags | O_NONBLOCK | SK__O_NOFOLLOW | SK__O_CLOEXEC, 0644);
  if (*fd < 0 && (errno == ELOOP || errno == ENXIO)) return sk__ckpt_not_regular(path, err);
  if (*fd < 0) return sk__ckpt_sys(err, write ? "creating" : errno == ENOENT ? "missing file" : "opening", path);
  struct stat st;
  int fl = fcntl(*fd, F_GETFL);
  sk_result r = fstat(*fd, &st) ? sk__ckpt_sys(err, "stat", path) : !S_ISREG(st.st_mode) ? sk__ckpt_not_regular(path, err) : SK_OK;
  if (!r && (fl < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK))) r = sk__ckpt_sys(err, "fcntl", path);
  if (r) return close(*fd), *fd = -1, r;
  if (size) *size = (uint64_t)st.st_size;
  return SK_OK;
}

/* A directory of ours (a checkpoint being committed, or the root) to fsync. */
static sk_result sk__ckpt_fsync_path(const char *path, sk_error *err) {
  int fd = open(path, O_RDONLY | SK__O_DIRECTORY | SK__O_CLOEXEC);
  if (fd < 0) return sk__ckpt_sys(err, "opening", path);
  int rc = fsync(fd);
  close(fd);
  return rc ? sk__ckpt_sys(err, "fsync", path) : SK_OK;
}

/* len bytes to path (created or truncated), fsync'd. */
static sk_result sk__ckpt_put_file(const char *path, const char *text, size_t len, sk_error *err) {
  int fd = -1;
  sk_result r = sk__ckpt_open_file(path, O_WRONLY | O_CREAT | O_TRUNC, &fd, NULL, err);
  if (r) return r;
  sk__ckpt_req q = {(char *)(uintptr_t)text, len, 0};
  r = sk__ckpt_plain(fd, true, &q, 1, path, err);
  if (!r && fsync(fd)) r = sk__ckpt_sys(err, "fsync", path);
  close(fd);
  return r;
}

/* A whole small text file inside a checkpoint root (malloc'd, NUL-terminated) into *text: a
   regular file, not a symbolic link, of at most SK_MAX_TEXT_FILE_BYTES (sk_core.h). */
static sk_result sk__ckpt_get_file(const sk_allocator *a, const char *path, char **text, size_t *len, sk_error *err) {
  return sk__read_text_file(a, path, false, SK_MAX_TEXT_FILE_BYTES, text, len, err);
}

/* Whether path, an entry of a checkpoint root, is there, looked at without following it: a
   directory (*exists) or nothing. Anything else is named and left alone: a symlink above all,
   which removing a stale checkpoint through would empty another directory. */
static sk_result sk__ckpt_check_dir(const char *path, bool *exists, sk_error *err) {
  struct stat st;
  *exists = !lstat(path, &st);
  if (!*exists) return errno == ENOENT ? SK_OK : sk__ckpt_sys(err, "stat", path);
  if (S_ISDIR(st.st_mode)) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s is %s, not a checkpoint directory: %sleft alone", path,
                  sk__ckpt_type_name(st.st_mode), S_ISLNK(st.st_mode) ? "not followed, " : "");
}

/* Removes directory path and the files in it (a stale temporary or a replaced checkpoint: no
   subdirectories). It is opened without following a symlink and its entries are unlinked
   relative to that descriptor (an entry that is a symlink loses the link, never its target):
   nothing outside it is removed. */
static sk_result sk__ckpt_rm_dir(const char *path, sk_error *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | SK__O_DIRECTORY | SK__O_NOFOLLOW | SK__O_CLOEXEC);
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  if (!d) {
    sk_result r = sk__ckpt_sys(err, "opening", path);
    if (fd >= 0) close(fd);
    return r;
  }
  sk_result r = SK_OK;
  for (struct dirent *e = readdir(d); !r && e; e = readdir(d))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && unlinkat(fd, e->d_name, 0))
      r = sk__fail(err, SK_ERR_SYSTEM, "checkpoint: removing %s/%s: %s", path, e->d_name, strerror(errno));
  closedir(d); /* closes fd */
  if (!r && rmdir(path)) r = sk__ckpt_sys(err, "removing", path);
  return r;
}

/* ---- checksums while writing ------------------------------------------------------------------ */

typedef struct sk__ckpt_crc {
  uint32_t *blocks;
  int nblocks;
  uint32_t in_block; /* bytes of the current block fed so far */
} sk__ckpt_crc;

/* Feeds len bytes (NULL: zeros) in file order. */
static void sk__ckpt_crc_feed(sk__ckpt_crc *c, const char *p, size_t len) {
  static const unsigned char zeros[SK_CKPT_ALIGN] = {0};
  while (len) {
    size_t room = SK_CKPT_BLOCK - c->in_block, k = len < room ? len : room;
    if (!p && k > sizeof zeros) k = sizeof zeros;
    if (!c->in_block) c->blocks[c->nblocks++] = (uint32_t)crc32(0L, Z_NULL, 0);
    uint32_t *b = &c->blocks[c->nblocks - 1];
    *b = (uint32_t)crc32(*b, p ? (const Bytef *)p : zeros, (uInt)k);
    c->in_block = (uint32_t)((c->in_block + k) % SK_CKPT_BLOCK);
    if (p) p += k;
    len -= k;
  }
}

/* The whole file's crc from its blocks'. */
static uint32_t sk__ckpt_crc_file(const uint32_t *blocks, int n, uint64_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int k = 0; k < n; k++) {
    uint64_t len = k + 1 < n ? SK_CKPT_BLOCK : size - (uint64_t)k * SK_CKPT_BLOCK;
    crc = crc32_combine(crc, blocks[k], (z_off_t)len);
  }
  return (uint32_t)crc;
}

static uint64_t sk__ckpt_slice_bytes(const sk_ckpt_slice *s) {
  return (uint64_t)sk_slice_volume(&s->box) * sk_dtype_size(s->dtype);
}

/* Where this device's written slices go in its rank file, in order; the file's size. */
static uint64_t sk__ckpt_offsets(int n, const sk_ckpt_slice *s, uint64_t *off) {
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (!s[i].write) continue;
    at = (at + SK_CKPT_ALIGN - 1) / SK_CKPT_ALIGN * SK_CKPT_ALIGN;
    off[i] = at, at += sk__ckpt_slice_bytes(&s[i]);
  }
  return at;
}

/* ---- saving -------------------------------------------------------------------------------- */

/* What one save carries between its steps. */
typedef struct sk__ckpt_save {
  sk_comm *comm;
  const char *root;
  const sk_ckpt_save_desc *desc;
  int rank, size, n;
  const sk_ckpt_slice *slices;
  char tmp[4096], final[4096], name[SK_CKPT_FILE_MAX];
  uint64_t *off, file_size;
  sk__ckpt_crc crc;
  sk_ckpt_report *rep;
  const sk_allocator *a; /* the desc's */
} sk__ckpt_save;

static sk_result sk__ckpt_hook(const sk__ckpt_save *S, sk_ckpt_stage at, sk_error *err) {
  if (S->desc->hook && S->desc->hook(S->desc->hook_user, at, S->rank))
    return sk__fail(err, SK_ERR_ABORTED, "checkpoint: save stopped by its hook at stage %d", (int)at);
  return SK_OK;
}

/* Every device learns whether any failed (MAX of the codes); a device that did not fail itself
   returns SK_ERR_ABORTED naming one that did (so a world's root cause stays the failure). */
static sk_result sk__ckpt_agree(const sk__ckpt_save *S, sk_result mine, sk_error *err) {
  if (!S->comm) return mine;
  int64_t v[2] = {(int64_t)mine, mine ? (int64_t)S->rank : -1}, all[2] = {0, 0};
  sk_result r = sk_allreduce(S->comm, v, all, 2, SK_I64, SK_MAX, NULL);
  if (r) return mine ? mine : sk__fail(err, r, "checkpoint: the devices could not agree: %s", sk_comm_error_message(S->comm));
  if (!mine && all[0])
    return sk__fail(err, SK_ERR_ABORTED, "checkpoint: device %lld failed (its message says why)", (long long)all[1]);
  return mine;
}

/* Writes and fsyncs this device's rank file; its block crcs into S->crc. */
static sk_result sk__ckpt_write_rank(sk__ckpt_save *S, sk_error *err) {
  char path[4096 + 64];
  snprintf(path, sizeof path, "%s/rank-%d.bin", S->tmp, S->rank);
  int fd = -1;
  sk_result r = sk__ckpt_open_file(path, O_WRONLY | O_CREAT | O_TRUNC, &fd, NULL, err);
  if (r) return r;
  sk__ckpt_req *q = (sk__ckpt_req *)sk__calloc(S->a, ((size_t)S->n + 1) * sizeof *q, 0);
  if (!q) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  int nq = 0;
  uint64_t at = 0;
  for (int i = 0; !r && i < S->n; i++) {
    if (!S->slices[i].write) continue;
    uint64_t len = sk__ckpt_slice_bytes(&S->slices[i]);
    sk__ckpt_crc_feed(&S->crc, NULL, (size_t)(S->off[i] - at)); /* the padding: holes read as zeros */
    sk__ckpt_crc_feed(&S->crc, (const char *)S->slices[i].data, (size_t)len);
    q[nq].buf = (char *)S->slices[i].data, q[nq].len = (size_t)len, q[nq].off = S->off[i], nq++;
    at = S->off[i] + len;
  }
  int half = nq / 2; /* the hook's "half written" point */
  if (!r) r = sk__ckpt_io(fd, true, q, half, S->desc->io, &S->rep->used, path, err);
  if (!r) r = sk__ckpt_hook(S, SK_CKPT_AT_HALF_DATA, err);
  if (!r) r = sk__ckpt_io(fd, true, q + half, nq - half, S->desc->io, &S->rep->used, path, err);
  if (!r && fsync(fd)) r = sk__ckpt_sys(err, "fsync", path);
  close(fd);
  sk__free(S->a, q);
  S->rep->bytes = at, S->rep->slices = nq;
  return r;
}

/* Whether the root's LATEST names this save's checkpoint (no readable LATEST: it does not; out
   of memory reading it is the save's failure). */
static sk_result sk__ckpt_is_latest(const sk__ckpt_save *S, bool *latest, sk_error *err) {
  char path[4096 + 16], *text = NULL;
  size_t len = 0;
  sk_error e = {SK_OK, ""};
  snprintf(path, sizeof path, "%s/LATEST", S->root);
  sk_result r = sk__ckpt_get_file(S->a, path, &text, &len, &e);
  *latest = !r && strcspn(text, "\n") == strlen(S->name) && !strncmp(text, S->name, strlen(S->name));
  sk__free(S->a, text);
  return r == SK_ERR_OUT_OF_MEMORY ? sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: %s", e.msg) : SK_OK;
}

/* What crashed saves left in root: temporary directories, never visible (one saver per root:
   sk_ckpt_lock). One that is not a directory is named and left alone, as sk__ckpt_check_dir says. */
static sk_result sk__ckpt_rm_stale(const char *root, sk_error *err) {
  DIR *d = opendir(root);
  if (!d) return sk__ckpt_sys(err, "reading", root);
  char path[4096 + 256];
  sk_result r = SK_OK;
  for (struct dirent *e = readdir(d); !r && e; e = readdir(d)) {
    if (strncmp(e->d_name, ".tmp-ckpt-", 10)) continue;
    snprintf(path, sizeof path, "%s/%s", root, e->d_name);
    bool exists = false;
    r = sk__ckpt_check_dir(path, &exists, err);
    if (!r && exists) r = sk__ckpt_rm_dir(path, err);
  }
  closedir(d);
  return r;
}

/* Rank 0: the temporary directory, fresh. A ckpt-<step> already there that LATEST does not name
   was renamed by a save that crashed before moving the pointer, or is an older one a resumed run
   saves again: it is replaced. The one LATEST names is never touched. Nothing is followed: an
   entry in the way that is a symlink or no directory fails the save, naming it. */
static sk_result sk__ckpt_make_tmp(sk__ckpt_save *S, sk_error *err) {
  if (mkdir(S->root, 0755) && errno != EEXIST) return sk__ckpt_sys(err, "creating", S->root);
  bool exists = false, latest = false;
  sk_result r = sk__ckpt_check_dir(S->final, &exists, err);
  if (!r && exists) r = sk__ckpt_is_latest(S, &latest, err);
  if (!r && latest)
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s already exists and is the newest", S->final);
  if (!r) r = sk__ckpt_rm_stale(S->root, err);
  if (!r && exists) r = sk__ckpt_rm_dir(S->final, err);
  if (!r && mkdir(S->tmp, 0755)) r = sk__ckpt_sys(err, "creating", S->tmp);
  return r;
}

/* Every device's rows of `width` elements of dt gathered in order (comm NULL: just ours). */
static sk_result sk__ckpt_allgather(const sk__ckpt_save *S, const void *mine, void *all, size_t width, sk_dtype dt,
                                    sk_error *err) {
  if (!S->comm) return memcpy(all, mine, width * sk_dtype_size(dt)), SK_OK;
  sk_result r = sk_allgather(S->comm, mine, all, width, dt, NULL);
  return r ? sk__fail(err, r, "checkpoint: gathering the manifest: %s", sk_comm_error_message(S->comm)) : SK_OK;
}

/* This device's entries (the slices it wrote), zeroed around the fields so they travel as bytes. */
static sk_ckpt_entry *sk__ckpt_my_entries(const sk__ckpt_save *S, int count) {
  sk_ckpt_entry *e = (sk_ckpt_entry *)sk__calloc(S->a, ((size_t)count + 1) * sizeof *e, 0);
  for (int i = 0, k = 0; e && i < S->n; i++) {
    const sk_ckpt_slice *s = &S->slices[i];
    if (!s->write) continue;
    snprintf(e[k].tensor, sizeof e[k].tensor, "%s", s->tensor);
    e[k].kind = s->kind, e[k].dtype = s->dtype, e[k].ndims = s->ndims, e[k].box = s->box;
    memcpy(e[k].shape, s->shape, sizeof s->shape);
    e[k].file = S->rank, e[k].offset = S->off[i], e[k].length = sk__ckpt_slice_bytes(s), e[k].rank = S->rank;
    k++;
  }
  return e;
}

/* Rank 0: the manifest's rank files (devices that wrote something, in rank order) and entries. */
static sk_result sk__ckpt_collect(const sk__ckpt_save *S, const int64_t *heads, const sk_ckpt_entry *alle, int maxe,
                                  const int64_t *allb, int maxb, sk_ckpt_manifest *m, sk_error *err) {
  int nf = 0, ne = 0;
  for (int d = 0; d < S->size; d++) nf += heads[4 * d] > 0, ne += (int)heads[4 * d];
  m->files = (sk_ckpt_file *)sk__calloc(S->a, ((size_t)nf + 2) * sizeof *m->files, 0); /* + strategy.json */
  m->entries = (sk_ckpt_entry *)sk__calloc(S->a, ((size_t)ne + 1) * sizeof *m->entries, 0);
  if (!m->files || !m->entries) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  for (int d = 0; d < S->size; d++) {
    const int64_t *h = heads + 4 * d;
    if (!h[0]) continue;
    sk_ckpt_file *f = &m->files[m->nfiles];
    snprintf(f->name, sizeof f->name, "rank-%d.bin", d);
    f->size = (uint64_t)h[1], f->crc = (uint32_t)h[2], f->nblocks = (int)h[3];
    if (!(f->blocks = (uint32_t *)sk__calloc(S->a, ((size_t)f->nblocks + 1) * sizeof(uint32_t), 0)))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    for (int k = 0; k < f->nblocks; k++) f->blocks[k] = (uint32_t)allb[(size_t)d * (size_t)maxb + (size_t)k];
    for (int k = 0; k < (int)h[0]; k++) {
      m->entries[m->nentries] = alle[(size_t)d * (size_t)maxe + (size_t)k];
      m->entries[m->nentries++].file = m->nfiles;
    }
    m->nfiles++;
  }
  return SK_OK;
}

/* Sizes first (entries, file size, crc, blocks per device), then the entries and block crcs,
   each padded to the largest device's count. Rank 0 gets them as manifest files and entries. */
static sk_result sk__ckpt_gather(sk__ckpt_save *S, int nmine, sk_ckpt_manifest *m, sk_error *err) {
  if (!S->crc.blocks) /* sk__ckpt_save_data allocates them whenever it succeeds */
    return sk__fail(err, SK_ERR_INVALID_USAGE, "checkpoint: the rank file's block checksums are missing");
  int64_t head[4] = {nmine, (int64_t)S->file_size, 0, S->crc.nblocks}, *heads;
  head[2] = sk__ckpt_crc_file(S->crc.blocks, S->crc.nblocks, S->file_size);
  heads = (int64_t *)sk__calloc(S->a, (size_t)S->size * 4 * sizeof *heads, 0);
  if (!heads) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  sk_result r = sk__ckpt_allgather(S, head, heads, 4, SK_I64, err);
  int64_t maxe = 1, maxb = 1;
  for (int d = 0; !r && d < S->size; d++) {
    maxe = heads[4 * d] > maxe ? heads[4 * d] : maxe;
    maxb = heads[4 * d + 3] > maxb ? heads[4 * d + 3] : maxb;
  }
  size_t ebytes = (size_t)maxe * sizeof(sk_ckpt_entry);
  sk_ckpt_entry *mine = r ? NULL : sk__ckpt_my_entries(S, (int)maxe);
  char *alle = mine ? (char *)sk__alloc(S->a, ebytes * (size_t)S->size, 0) : NULL;
  int64_t *myb = alle ? (int64_t *)sk__calloc(S->a, (size_t)maxb * sizeof *myb, 0) : NULL;
  int64_t *allb = myb ? (int64_t *)sk__alloc(S->a, (size_t)maxb * (size_t)S->size * sizeof *allb, 0) : NULL;
  if (!r && !allb) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  for (int k = 0; !r && k < S->crc.nblocks; k++) myb[k] = S->crc.blocks[k];
  if (!r) r = sk__ckpt_allgather(S, mine, alle, ebytes, SK_U8, err);
  if (!r) r = sk__ckpt_allgather(S, myb, allb, (size_t)maxb, SK_I64, err);
  if (!r && S->rank == 0) r = sk__ckpt_collect(S, heads, (const sk_ckpt_entry *)alle, (int)maxe, allb, (int)maxb, m, err);
  sk__free(S->a, heads), sk__free(S->a, mine), sk__free(S->a, alle), sk__free(S->a, myb), sk__free(S->a, allb);
  return r;
}

/* Rank 0: strategy.json (its crcs computed like a rank file's) into the manifest's files. */
static sk_result sk__ckpt_put_strategy(const sk__ckpt_save *S, sk_ckpt_manifest *m, sk_error *err) {
  char path[4096 + 64];
  snprintf(path, sizeof path, "%s/strategy.json", S->tmp);
  size_t len = S->desc->strategy_len;
  sk_ckpt_file *f = &m->files[m->nfiles];
  sk__ckpt_crc c = {(uint32_t *)sk__calloc(S->a, (len / SK_CKPT_BLOCK + 2) * sizeof(uint32_t), 0), 0, 0};
  if (!c.blocks) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  sk__ckpt_crc_feed(&c, S->desc->strategy, len);
  snprintf(f->name, sizeof f->name, "strategy.json");
  f->size = len, f->blocks = c.blocks, f->nblocks = c.nblocks, f->crc = sk__ckpt_crc_file(c.blocks, c.nblocks, len);
  m->nfiles++;
  return sk__ckpt_put_file(path, S->desc->strategy, len, err);
}

static sk_result sk__ckpt_verify_tiling(const sk_ckpt_manifest *m, sk_error *err);

/* Rank 0, steps 3 to 5 of the commit. A tensor the devices' slices do not tile (a saver passed
   the wrong `write` flags) is refused before anything becomes visible. */
static sk_result sk__ckpt_commit(const sk__ckpt_save *S, sk_ckpt_manifest *m, sk_error *err) {
  char path[4096 + 64], tmp[4096 + 64], *text = NULL;
  size_t len = 0;
  sk_result r = sk__ckpt_verify_tiling(m, err);
  if (!r && S->desc->strategy) r = sk__ckpt_put_strategy(S, m, err);
  if (!r) r = sk__ckpt_hook(S, SK_CKPT_AT_MANIFEST, err);
  if (!r) r = sk_ckpt_manifest_format(m, &text, &len, err);
  snprintf(path, sizeof path, "%s/MANIFEST", S->tmp);
  if (!r) r = sk__ckpt_put_file(path, text, len, err);
  sk__free(&m->allocator, text);
  if (!r) r = sk__ckpt_fsync_path(S->tmp, err);
  if (!r) r = sk__ckpt_hook(S, SK_CKPT_AT_RENAME, err);
  if (!r && rename(S->tmp, S->final)) r = sk__ckpt_sys(err, "renaming into", S->final);
  if (!r) r = sk__ckpt_fsync_path(S->root, err);
  if (!r) r = sk__ckpt_hook(S, SK_CKPT_AT_POINTER, err);
  snprintf(tmp, sizeof tmp, "%s/LATEST.tmp", S->root);
  snprintf(path, sizeof path, "%s\n", S->name);
  if (!r) r = sk__ckpt_put_file(tmp, path, strlen(path), err);
  if (!r) r = sk__ckpt_hook(S, SK_CKPT_AT_POINTER_TMP, err);
  snprintf(path, sizeof path, "%s/LATEST", S->root);
  if (!r && rename(tmp, path)) r = sk__ckpt_sys(err, "renaming into", path);
  if (!r) r = sk__ckpt_fsync_path(S->root, err);
  return r;
}

/* The arguments: names that fit the manifest, data where a slice is written. */
static sk_result sk__ckpt_check_slices(int n, const sk_ckpt_slice *s, sk_error *err) {
  for (int i = 0; i < n; i++) {
    const char *t = s[i].tensor;
    if (!t || !*t || strlen(t) >= SK_CKPT_NAME_MAX || strpbrk(t, " \t\n\r"))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: slice %d: a tensor name of 1..%d bytes without blanks", i,
                      SK_CKPT_NAME_MAX - 1);
    if ((int)s[i].kind < 0 || s[i].kind >= SK_CKPT_KINDS || !sk_dtype_valid(s[i].dtype) || s[i].ndims < 0 ||
        s[i].ndims > SK_MAX_DIMS || s[i].box.ndims != s[i].ndims || (s[i].write && !s[i].data))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: slice %d ('%s'): bad kind, dtype, dims or NULL data", i, t);
    for (int d = 0; d < s[i].ndims; d++)
      if (s[i].box.start[d] < 0 || s[i].box.start[d] >= s[i].box.stop[d] || s[i].box.stop[d] > s[i].shape[d])
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: slice %d ('%s'): dim %d's box is outside its shape", i, t, d);
  }
  return SK_OK;
}

/* Steps 1 and 2 on every device: the temporary directory (rank 0), then the rank files. */
static sk_result sk__ckpt_save_data(sk__ckpt_save *S, int *nmine, sk_error *err) {
  sk_result r = S->rank == 0 ? sk__ckpt_make_tmp(S, err) : SK_OK;
  if ((r = sk__ckpt_agree(S, r, err))) return r;
  r = sk__ckpt_hook(S, SK_CKPT_AT_DATA, err);
  S->off = (uint64_t *)sk__calloc(S->a, ((size_t)S->n + 1) * sizeof *S->off, 0);
  if (!r && !S->off) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  if (!r) S->file_size = sk__ckpt_offsets(S->n, S->slices, S->off);
  S->crc.blocks = r ? NULL : (uint32_t *)sk__calloc(S->a, ((size_t)(S->file_size / SK_CKPT_BLOCK) + 2) * sizeof(uint32_t), 0);
  if (!r && !S->crc.blocks) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  *nmine = 0;
  for (int i = 0; i < S->n; i++) *nmine += S->slices[i].write;
  if (!r && *nmine) r = sk__ckpt_write_rank(S, err);
  return sk__ckpt_agree(S, r, err);
}

SK_API sk_result sk_ckpt_save(sk_comm *comm, const char *root, const sk_ckpt_save_desc *desc, int n,
                              const sk_ckpt_slice *slices, sk_ckpt_report *report, sk_error *err) {
  if (!root || !*root || !desc || n < 0 || (n && !slices) || desc->step < 0 || (desc->strategy_len && !desc->strategy))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_save: NULL root, desc or slices, or a negative count");
  sk_ckpt_report rep;
  memset(&rep, 0, sizeof rep);
  sk__ckpt_save S;
  memset(&S, 0, sizeof S);
  S.comm = comm, S.root = root, S.desc = desc, S.n = n, S.slices = slices, S.rep = &rep, S.a = &desc->allocator;
  S.rank = comm ? sk_comm_rank(comm) : 0, S.size = comm ? sk_comm_size(comm) : 1;
  rep.used = desc->io == SK_CKPT_IO_URING ? SK_CKPT_IO_URING : SK_CKPT_IO_PLAIN;
  snprintf(S.name, sizeof S.name, "ckpt-%08lld", (long long)desc->step);
  snprintf(S.tmp, sizeof S.tmp, "%s/.tmp-%s", root, S.name);
  snprintf(S.final, sizeof S.final, "%s/%s", root, S.name);
  int nmine = 0;
  sk_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  m.allocator = desc->allocator;
  sk_result r = sk__ckpt_check_slices(n, slices, err);
  if (!r && !sk__allocator_ok(&desc->allocator))
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_save: allocator: set both alloc and free, or neither");
  if (!r && desc->optimizer && !sk__ckpt_optimizer_known(desc->optimizer))
    r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_save: optimizer '%.32s' is not sgd, momentum or adam",
                 desc->optimizer);
  r = sk__ckpt_agree(&S, r, err); /* before anything is written: a device refused, none saves */
  if (!r) r = sk__ckpt_save_data(&S, &nmine, err);
  if (!r) r = sk__ckpt_gather(&S, nmine, &m, err);
  if (!r && S.rank == 0) {
    snprintf(m.name, sizeof m.name, "%s", S.name);
    m.step = desc->step, m.position = desc->position, m.devices = S.size, m.block = SK_CKPT_BLOCK;
    snprintf(m.optimizer, sizeof m.optimizer, "%s", desc->optimizer ? desc->optimizer : "");
    r = sk__ckpt_commit(&S, &m, err);
  }
  r = sk__ckpt_agree(&S, r, err); /* every device learns of a failure */
  sk_ckpt_manifest_free(&m);
  sk__free(S.a, S.off), sk__free(S.a, S.crc.blocks);
  snprintf(rep.name, sizeof rep.name, "%s", S.name);
  if (report) *report = rep;
  return r;
}

/* ---- the root's lock ------------------------------------------------------------------------ */

/* The holder's pid from its lock file (fd), in the message; "another process" while it has not
   written it yet. */
static sk_result sk__ckpt_busy(int fd, const char *root, sk_error *err) {
  char text[32];
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  text[n > 0 ? n : 0] = 0;
  long pid = strtol(text, NULL, 10);
  if (pid > 0) return sk__fail(err, SK_ERR_INVALID_USAGE, "checkpoint root %s is being written by process %ld", root, pid);
  return sk__fail(err, SK_ERR_INVALID_USAGE, "checkpoint root %s is being written by another process", root);
}

/* This process's pid into its lock file. */
static sk_result sk__ckpt_put_pid(int fd, const char *path, sk_error *err) {
  char text[32];
  snprintf(text, sizeof text, "%ld\n", (long)getpid());
  sk__ckpt_req q = {text, strlen(text), 0};
  if (ftruncate(fd, 0)) return sk__ckpt_sys(err, "truncating", path);
  return sk__ckpt_plain(fd, true, &q, 1, path, err);
}

/* A file created and removed in root: a root we cannot write fails before the run, not at its
   first save. A probe a killed process left is removed first (unlink never follows a link). */
static sk_result sk__ckpt_probe(const char *root, sk_error *err) {
  char path[4096 + 16];
  snprintf(path, sizeof path, "%s/.probe", root);
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | SK__O_NOFOLLOW | SK__O_CLOEXEC, 0644);
  if (fd < 0 || close(fd) || unlink(path))
    return sk__fail(err, SK_ERR_SYSTEM, "checkpoint root %s is not writable: %s: %s", root, path, strerror(errno));
  return SK_OK;
}

SK_API sk_result sk_ckpt_lock(const char *root, sk_ckpt_root_lock *lock, sk_error *err) {
  if (!lock) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_lock: lock is NULL");
  if (!root || !*root || strlen(root) >= 4096)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_lock: root is %s", !root ? "NULL" : !*root ? "empty" : "4096 bytes or longer");
  lock->fd = -1, lock->held = false;
  char path[4096 + 16];
  snprintf(path, sizeof path, "%s/.lock", root);
  if (mkdir(root, 0755) && errno != EEXIST) return sk__ckpt_sys(err, "creating", root);
  /* no O_TRUNC: the holder's pid stays for the message until the lock is ours */
  int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | SK__O_NOFOLLOW | SK__O_CLOEXEC, 0644);
  if (fd < 0 && (errno == ELOOP || errno == ENXIO)) return sk__ckpt_not_regular(path, err);
  if (fd < 0) return sk__fail(err, SK_ERR_SYSTEM, "checkpoint root %s is not writable: %s: %s", root, path, strerror(errno));
  struct stat st;
  sk_result r = fstat(fd, &st) ? sk__ckpt_sys(err, "stat", path) : !S_ISREG(st.st_mode) ? sk__ckpt_not_regular(path, err) : SK_OK;
  if (!r && flock(fd, LOCK_EX | LOCK_NB)) r = errno == EWOULDBLOCK ? sk__ckpt_busy(fd, root, err) : sk__ckpt_sys(err, "locking", path);
  if (!r) r = sk__ckpt_put_pid(fd, path, err);
  if (!r) r = sk__ckpt_probe(root, err);
  if (r) return close(fd), r;
  lock->fd = fd, lock->held = true;
  return SK_OK;
}

SK_API void sk_ckpt_unlock(sk_ckpt_root_lock *lock) {
  if (!lock || !lock->held) return;
  close(lock->fd); /* drops the flock; .lock stays for the next writer */
  lock->fd = -1, lock->held = false;
}

/* ---- opening ------------------------------------------------------------------------------- */

/* Each listed file exists with the size the manifest gives (a truncated or grown rank file is
   refused before any read). */
static sk_result sk__ckpt_check_sizes(const sk_ckpt_manifest *m, sk_error *err) {
  char path[4096 + 128];
  for (int f = 0; f < m->nfiles; f++) {
    int fd = -1;
    uint64_t size = 0;
    snprintf(path, sizeof path, "%s/%s", m->dir, m->files[f].name);
    sk_result r = sk__ckpt_open_file(path, O_RDONLY, &fd, &size, err);
    if (r) return r;
    close(fd);
    if (size != m->files[f].size)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s holds %llu bytes, the manifest says %llu (incomplete)",
                      path, (unsigned long long)size, (unsigned long long)m->files[f].size);
  }
  return SK_OK;
}

/* sk_ckpt_open_dir from allocator a (NULL: the C library), which *m keeps. */
static sk_result sk__ckpt_open_dir(const char *dir, const sk_allocator *a, sk_ckpt_manifest *m, sk_error *err) {
  if (!dir || !m || strlen(dir) >= sizeof m->dir) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_open_dir: bad argument");
  if (!sk__allocator_ok(a)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_open: allocator: set both alloc and free, or neither");
  char path[4096 + 16], *text = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/MANIFEST", dir);
  sk_result r = sk__ckpt_get_file(a, path, &text, &len, err);
  if (!r) r = sk__ckpt_parse(text, len, a, m, err);
  sk__free(a, text);
  if (r) return r;
  snprintf(m->dir, sizeof m->dir, "%s", dir);
  if ((r = sk__ckpt_check_sizes(m, err))) sk_ckpt_manifest_free(m);
  return r;
}

SK_API sk_result sk_ckpt_open_dir(const char *dir, sk_ckpt_manifest *m, sk_error *err) {
  return sk__ckpt_open_dir(dir, NULL, m, err);
}

SK_API sk_result sk_ckpt_open(const char *root, sk_ckpt_manifest *m, sk_error *err) {
  return sk_ckpt_open_with(root, NULL, m, err);
}

SK_API sk_result sk_ckpt_open_with(const char *root, const sk_allocator *a, sk_ckpt_manifest *m, sk_error *err) {
  if (!root || !m) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_open: NULL argument");
  if (!sk__allocator_ok(a)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_open: allocator: set both alloc and free, or neither");
  char path[4096 + 16], dir[4096 + 80], *text = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/LATEST", root);
  sk_result r = sk__ckpt_get_file(a, path, &text, &len, err);
  if (r) return r;
  size_t n = strcspn(text, "\n");
  /* one name of this root, nothing else: never a path leading elsewhere */
  bool ok = n > 0 && n < SK_CKPT_FILE_MAX && n + 1 >= len && !memchr(text, '/', n) && text[0] != '.';
  if (ok) snprintf(dir, sizeof dir, "%s/%.*s", root, (int)n, text);
  sk__free(a, text);
  if (!ok) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s does not name one checkpoint directory", path);
  sk_error inner = {SK_OK, ""};
  bool exists = false; /* a symlink inside the root is not followed, for reading either */
  r = sk__ckpt_check_dir(dir, &exists, &inner);
  if (!r) r = sk__ckpt_open_dir(dir, a, m, &inner);
  if (r) return sk__fail(err, r, "LATEST names %s: %s", dir + strlen(root) + 1, inner.msg);
  return SK_OK;
}

/* ---- reading ------------------------------------------------------------------------------- */

/* Reads blocks [b0, b1) of file f into buf and checks each block's crc. */
static sk_result sk__ckpt_read_blocks(const sk_ckpt_manifest *m, int f, int b0, int b1, char *buf, sk_ckpt_io io,
                                      sk_ckpt_io *used, sk_error *err) {
  const sk_ckpt_file *F = &m->files[f];
  char path[4096 + 128];
  snprintf(path, sizeof path, "%s/%s", m->dir, F->name);
  uint64_t lo = (uint64_t)b0 * m->block, hi = (uint64_t)b1 * m->block;
  hi = hi < F->size ? hi : F->size;
  int fd = -1;
  sk_result r = sk__ckpt_open_file(path, O_RDONLY, &fd, NULL, err);
  if (r) return r;
  sk__ckpt_req q = {buf, (size_t)(hi - lo), lo};
  r = sk__ckpt_io(fd, false, &q, 1, io, used, path, err);
  close(fd);
  for (int b = b0; !r && b < b1; b++) {
    uint64_t at = (uint64_t)(b - b0) * m->block, len = hi - lo - at < m->block ? hi - lo - at : m->block;
    if ((uint32_t)crc32(0L, (const Bytef *)buf + at, (uInt)len) != F->blocks[b])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s: block %d (bytes %llu..%llu) fails its crc (corrupt)",
                      path, b, (unsigned long long)(lo + at), (unsigned long long)(lo + at + len));
  }
  return r;
}

/* Copies box x from a saved slice (its box `from`, its first byte at buf + base: base is negative
   when the blocks read start inside it) into a target (box `to`, dst):
   row by row along the last dim. */
/* n floating elements of dtype sf at src as dtype df at dst, through double (f16 and bf16 through
   float, their only exact path): a checkpoint saved in one precision loads into another. */
static void sk__ckpt_convert(void *dst, sk_dtype df, const void *src, sk_dtype sf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double v = 0;
    const char *s = (const char *)src + i * sk_dtype_size(sf);
    char *d = (char *)dst + i * sk_dtype_size(df);
    uint16_t h = 0;
    float f = 0;
    if (sf == SK_F64) memcpy(&v, s, sizeof v);
    else if (sf == SK_F32) memcpy(&f, s, sizeof f), v = f;
    else memcpy(&h, s, sizeof h), v = sf == SK_F16 ? sk_f16_to_f32(h) : sk_bf16_to_f32(h);
    if (df == SK_F64) memcpy(d, &v, sizeof v);
    else if (df == SK_F32) f = (float)v, memcpy(d, &f, sizeof f);
    else h = df == SK_F16 ? sk_f32_to_f16((float)v) : sk_f32_to_bf16((float)v), memcpy(d, &h, sizeof h);
  }
}

/* Box x of a saved slice (box `from`, dtype sf, at buf + base) into a target (box `to`, dtype df). */
static void sk__ckpt_copy(const sk_slice *x, const sk_slice *from, sk_dtype sf, const char *buf, int64_t base,
                          const sk_slice *to, sk_dtype df, char *dst) {
  int nd = x->ndims, last = nd - 1;
  size_t ss = sk_dtype_size(sf), ds = sk_dtype_size(df);
  int64_t c[SK_MAX_DIMS] = {0};
  for (int d = 0; d < nd; d++) c[d] = x->start[d];
  size_t row = nd ? (size_t)(x->stop[last] - x->start[last]) : 1;
  for (;;) {
    char *out = dst + (size_t)sk__ckpt_index(to, c) * ds;
    const char *in = buf + base + sk__ckpt_index(from, c) * (int64_t)ss;
    if (sf == df)
      memcpy(out, in, row * ss);
    else
      sk__ckpt_convert(out, df, in, sf, row);
    int d = last - 1;
    while (d >= 0 && ++c[d] == x->stop[d]) c[d] = x->start[d], d--;
    if (d < 0) return;
  }
}

/* One piece: the bytes from its first to its last element in the saved slice, widened to whole
   blocks, read, checked, copied. */
static sk_result sk__ckpt_read_piece(const sk_ckpt_manifest *m, const sk_ckpt_piece *p, const sk_ckpt_slice *t, int rank,
                                     sk_ckpt_io io, sk_ckpt_report *rep, sk_error *err) {
  const sk_ckpt_entry *e = &m->entries[p->entry];
  size_t es = sk_dtype_size(e->dtype);
  int64_t last[SK_MAX_DIMS] = {0};
  for (int d = 0; d < e->box.ndims; d++) last[d] = p->box.stop[d] - 1;
  uint64_t lo = e->offset + (uint64_t)sk__ckpt_index(&e->box, p->box.start) * es;
  uint64_t hi = e->offset + (uint64_t)(sk__ckpt_index(&e->box, last) + 1) * es;
  int b0 = (int)(lo / m->block), b1 = (int)((hi + m->block - 1) / m->block);
  char *buf = (char *)sk__alloc(&m->allocator, (size_t)(b1 - b0) * m->block, 64);
  if (!buf) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory reading '%s'", t->tensor);
  sk_result r = sk__ckpt_read_blocks(m, e->file, b0, b1, buf, io, &rep->used, err);
  if (r) {
    char msg[SK_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    sk__free(&m->allocator, buf);
    return sk__fail(err, r, "tensor '%s' %s (rank %d, saved by rank %d): %s", t->tensor, sk_ckpt_kind_name(t->kind), rank,
                    e->rank, msg);
  }
  int64_t base = (int64_t)e->offset - (int64_t)b0 * (int64_t)m->block;
  sk__ckpt_copy(&p->box, &e->box, e->dtype, buf, base, &t->box, t->dtype, (char *)t->data);
  uint64_t end = (uint64_t)b1 * m->block < m->files[e->file].size ? (uint64_t)b1 * m->block : m->files[e->file].size;
  rep->bytes += end - (uint64_t)b0 * m->block, rep->slices++;
  sk__free(&m->allocator, buf);
  return SK_OK;
}

SK_API sk_result sk_ckpt_load(const sk_ckpt_manifest *m, int rank, sk_ckpt_io io, int n, const sk_ckpt_slice *slices,
                              sk_ckpt_report *report, sk_error *err) {
  if (!m || n < 0 || (n && !slices)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_load: NULL argument");
  sk_ckpt_report rep;
  memset(&rep, 0, sizeof rep);
  rep.used = io == SK_CKPT_IO_URING ? SK_CKPT_IO_URING : SK_CKPT_IO_PLAIN;
  snprintf(rep.name, sizeof rep.name, "%s", m->name);
  int cap = m->nentries + 1;
  sk_ckpt_piece *pieces = (sk_ckpt_piece *)sk__alloc(&m->allocator, (size_t)cap * sizeof *pieces, 0);
  sk_result r = pieces ? sk__ckpt_check_slices(n, slices, err) : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  for (int i = 0; !r && i < n; i++) {
    int np = 0;
    if (!slices[i].data) r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_load: slice %d ('%s') has no data", i, slices[i].tensor);
    if (!r) r = sk_ckpt_read_plan(m, &slices[i], rank, pieces, cap, &np, err);
    for (int k = 0; !r && k < np; k++) r = sk__ckpt_read_piece(m, &pieces[k], &slices[i], rank, io, &rep, err);
  }
  sk__free(&m->allocator, pieces);
  if (report) *report = rep;
  return r;
}

/* Every block of file f (one block at a time) against the manifest; its size and file crc. */
static sk_result sk__ckpt_verify_file(const sk_ckpt_manifest *m, int f, char *buf, sk_ckpt_io io, sk_error *err) {
  const sk_ckpt_file *F = &m->files[f];
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int b = 0; b < F->nblocks; b++) {
    sk_result r = sk__ckpt_read_blocks(m, f, b, b + 1, buf, io, NULL, err);
    if (r) return r;
    uint64_t len = b + 1 < F->nblocks ? m->block : F->size - (uint64_t)b * m->block;
    crc = crc32_combine(crc, F->blocks[b], (z_off_t)len);
  }
  if ((uint32_t)crc != F->crc)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: %s/%s: the file's crc does not match its blocks'", m->dir, F->name);
  return SK_OK;
}

/* ---- tiling: every tensor and kind covered exactly once by its slices ------------------------ */

/* One entry of m, sorted with the others by (tensor, kind, index): a group is a run. */
typedef struct sk__ckpt_ref {
  const sk_ckpt_entry *e;
  int i; /* its index in m: messages name the first bad pair in manifest order, as pair scans do */
} sk__ckpt_ref;

/* Two slices of one tensor and kind that disagree on its shape or overlap (i < j; i < 0: none). */
typedef struct sk__ckpt_clash {
  int i, j;
  const char *what;
} sk__ckpt_clash;

static int sk__ckpt_ref_order(const void *pa, const void *pb) {
  const sk__ckpt_ref *a = (const sk__ckpt_ref *)pa, *b = (const sk__ckpt_ref *)pb;
  int c = strcmp(a->e->tensor, b->e->tensor);
  if (!c) c = ((int)a->e->kind > (int)b->e->kind) - ((int)a->e->kind < (int)b->e->kind);
  return c ? c : (a->i > b->i) - (a->i < b->i);
}

static int sk__ckpt_i64_order(const void *pa, const void *pb) {
  int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return (a > b) - (a < b);
}

/* Every box inside its shape, of its entry's rank (sk_ckpt_manifest_parse and sk_ckpt_save check
   this; a manifest built by hand may not hold to it). */
static sk_result sk__ckpt_check_boxes(const sk_ckpt_manifest *m, sk_error *err) {
  for (int i = 0; i < m->nentries; i++) {
    const sk_ckpt_entry *e = &m->entries[i];
    bool in = e->ndims >= 0 && e->ndims <= SK_MAX_DIMS && e->box.ndims == e->ndims;
    for (int d = 0; in && d < e->ndims; d++)
      in = e->box.start[d] >= 0 && e->box.start[d] < e->box.stop[d] && e->box.stop[d] <= e->shape[d];
    if (!in)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: tensor '%s' %s: the slice of rank %d lies outside its shape",
                      e->tensor, sk_ckpt_kind_name(e->kind), e->rank);
  }
  return SK_OK;
}

/* Pair by pair in manifest order, the first pair of group g (n slices, in index order) that
   disagrees on the shape or overlaps: quadratic, for the groups whose grid is too large. */
static void sk__ckpt_pairwise(const sk__ckpt_ref *g, int n, sk__ckpt_clash *c) {
  c->i = -1;
  for (int x = 0; x < n; x++)
    for (int y = x + 1; y < n; y++) {
      const sk_ckpt_entry *a = g[x].e, *b = g[y].e;
      bool same = a->ndims == b->ndims;
      for (int d = 0; same && d < a->ndims; d++) same = a->shape[d] == b->shape[d];
      sk_slice s;
      c->what = !same ? "disagree on its shape" : sk_slice_intersect(&a->box, &b->box, &s) ? "overlap" : NULL;
      if (c->what) {
        c->i = g[x].i, c->j = g[y].i;
        return;
      }
    }
}

/* A group's grid: per dim the sorted distinct cut points (0, the extent, every box's start and
   stop), so every box is a block of whole cells; owner: per cell (row-major) the first slice,
   in manifest order, that covers it (-1: none yet). */
typedef struct sk__ckpt_grid {
  int nd;
  int64_t *cuts;              /* one allocation: dim d's cut points at cut[d], ncut[d] of them */
  int64_t *cut[SK_MAX_DIMS];
  int64_t ncut[SK_MAX_DIMS];
  int64_t ncells;
  int *owner;
} sk__ckpt_grid;

/* g's cut points into G (its shapes agree); G->owner stays NULL when the grid has more than cap
   cells. */
static sk_result sk__ckpt_grid_make(const sk_allocator *a, const sk__ckpt_ref *g, int n, int64_t cap, sk__ckpt_grid *G,
                                    sk_error *err) {
  const sk_ckpt_entry *e0 = g[0].e;
  size_t per = 2 * (size_t)n + 2;
  memset(G, 0, sizeof *G);
  G->nd = e0->ndims, G->ncells = 1;
  if (!(G->cuts = (int64_t *)sk__alloc(a, per * (size_t)(G->nd ? G->nd : 1) * sizeof *G->cuts, 0)))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory checking the tiling");
  for (int d = 0; d < G->nd; d++) {
    int64_t *c = G->cut[d] = G->cuts + (size_t)d * per, k = 0;
    c[0] = 0, c[1] = e0->shape[d];
    for (int s = 0; s < n; s++) c[2 + 2 * s] = g[s].e->box.start[d], c[3 + 2 * s] = g[s].e->box.stop[d];
    qsort(c, per, sizeof *c, sk__ckpt_i64_order);
    for (size_t s = 1; s < per; s++)
      if (c[s] != c[k]) c[++k] = c[s];
    G->ncut[d] = k + 1;
    if (k == 0 || G->ncells > cap / k) return SK_OK; /* no cell (a dim of 0) or too many: pair by pair */
    G->ncells *= k;
  }
  if (G->ncells > cap) return SK_OK;
  if (!(G->owner = (int *)sk__alloc(a, (size_t)G->ncells * sizeof *G->owner, 0)))
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory checking the tiling");
  memset(G->owner, 0xff, (size_t)G->ncells * sizeof *G->owner); /* -1 */
  return SK_OK;
}

/* Where v is in the sorted distinct cuts c[0..n) (it is one of them). */
static int64_t sk__ckpt_cut_at(const int64_t *c, int64_t n, int64_t v) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (c[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Marks the cells slice r covers; a cell an earlier slice owns is a clash (owner, r). The
   earliest owner found in any cell, then the earliest r for it, is the first overlapping pair
   in manifest order. false when *budget cells were visited (overlaps: the caller goes pairwise). */
static bool sk__ckpt_grid_mark(sk__ckpt_grid *G, const sk__ckpt_ref *r, int64_t *budget, sk__ckpt_clash *c) {
  int64_t lo[SK_MAX_DIMS], hi[SK_MAX_DIMS], at[SK_MAX_DIMS];
  const int nd = G->nd; /* read once: the owner cells written below are ints too */
  if (nd < 0 || nd > SK_MAX_DIMS) return false; /* never (parse and save bound it): pair by pair */
  for (int d = 0; d < nd; d++) {
    at[d] = lo[d] = sk__ckpt_cut_at(G->cut[d], G->ncut[d], r->e->box.start[d]);
    hi[d] = sk__ckpt_cut_at(G->cut[d], G->ncut[d], r->e->box.stop[d]);
  }
  for (;;) {
    int64_t cell = 0;
    for (int d = 0; d < nd; d++) cell = cell * (G->ncut[d] - 1) + at[d];
    if (--*budget < 0) return false;
    int *owner = &G->owner[cell];
    if (*owner < 0) *owner = r->i;
    else if (c->i < 0 || *owner < c->i) c->i = *owner, c->j = r->i, c->what = "overlap";
    int d = nd - 1;
    while (d >= 0 && ++at[d] == hi[d]) at[d] = lo[d], d--;
    if (d < 0) return true;
  }
}

/* Group g's first clash cell by cell (its shapes agree); *done false when the grid has more
   than cap cells or the overlaps cost more than that to walk. */
static sk_result sk__ckpt_grid_clash(const sk_allocator *a, const sk__ckpt_ref *g, int n, int64_t cap, sk__ckpt_clash *c,
                                     bool *done, sk_error *err) {
  sk__ckpt_grid G;
  sk_result r = sk__ckpt_grid_make(a, g, n, cap, &G, err);
  int64_t budget = cap; /* disjoint slices visit each cell once at most */
  c->i = -1;
  *done = !r && G.owner;
  for (int s = 0; *done && s < n; s++) *done = sk__ckpt_grid_mark(&G, &g[s], &budget, c);
  sk__free(a, G.cuts), sk__free(a, G.owner);
  return r;
}

/* What the groups found: the first clash in manifest order, else the first tensor and kind (in
   manifest order) whose slices miss elements. */
typedef struct sk__ckpt_verdict {
  sk__ckpt_clash clash;
  int missing; /* that tensor's first entry (-1: none) */
  int64_t sum, whole;
} sk__ckpt_verdict;

static bool sk__ckpt_same_group(const sk_ckpt_entry *a, const sk_ckpt_entry *b) {
  return !strcmp(a->tensor, b->tensor) && a->kind == b->kind;
}

/* One tensor and kind, g[0..n) in manifest order, into *v. */
static sk_result sk__ckpt_check_group(const sk_allocator *a, const sk__ckpt_ref *g, int n, int cells_per_slice,
                                      sk__ckpt_verdict *v, sk_error *err) {
  const sk_ckpt_entry *e0 = g[0].e;
  bool same = true, done = n < 2;
  for (int s = 1; same && s < n; s++) {
    same = g[s].e->ndims == e0->ndims;
    for (int d = 0; same && d < e0->ndims; d++) same = g[s].e->shape[d] == e0->shape[d];
  }
  sk__ckpt_clash c = {-1, -1, NULL};
  /* shapes that disagree: the pair scan stops in its first row (the first slice clashes) */
  sk_result r = same && !done ? sk__ckpt_grid_clash(a, g, n, (int64_t)cells_per_slice * n, &c, &done, err) : SK_OK;
  if (r) return r;
  if (!done) sk__ckpt_pairwise(g, n, &c);
  if (c.i >= 0 && (v->clash.i < 0 || c.i < v->clash.i)) v->clash = c;
  if (c.i >= 0 || (v->missing >= 0 && v->missing < g[0].i)) return SK_OK;
  /* disjoint boxes inside one shape: the sum stays within its element count, which
     sk_ckpt_manifest_parse keeps within int64 */
  int64_t sum = 0, whole = 1;
  for (int s = 0; s < n; s++) sum += sk_slice_volume(&g[s].e->box);
  for (int d = 0; d < e0->ndims; d++) whole *= e0->shape[d];
  if (sum != whole) v->missing = g[0].i, v->sum = sum, v->whole = whole;
  return SK_OK;
}

/* Every tensor and kind tiled exactly once: every box inside its shape (refused first, naming
   the first such slice), the saved boxes of one tensor and kind pairwise disjoint and their
   volumes adding up to its shape's. The messages are those of a scan of all pairs: the first
   pair in manifest order that disagrees on the shape or overlaps, else the first tensor and kind
   that misses elements. The entries are grouped by sorting; a group's overlaps are found on its
   grid of cut points (one cell per slice for the grids layouts make), pair by pair when that grid
   has more than cells_per_slice cells per slice: O(n log n) for n slices in grids. */
SK_API sk_result sk__ckpt_check_tiling(const sk_ckpt_manifest *m, int cells_per_slice, sk_error *err) {
  if (!m || m->nentries < 0 || (m->nentries && !m->entries) || cells_per_slice < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk__ckpt_check_tiling: NULL manifest or a negative count");
  sk_result r = sk__ckpt_check_boxes(m, err);
  sk__ckpt_ref *refs = r ? NULL : (sk__ckpt_ref *)sk__alloc(&m->allocator, ((size_t)m->nentries + 1) * sizeof *refs, 0);
  if (!r && !refs) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory checking the tiling");
  for (int i = 0; !r && i < m->nentries; i++) refs[i].e = &m->entries[i], refs[i].i = i;
  if (!r) qsort(refs, (size_t)m->nentries, sizeof *refs, sk__ckpt_ref_order);
  sk__ckpt_verdict v = {{-1, -1, NULL}, -1, 0, 0};
  for (int s = 0, t = 0; !r && s < m->nentries; s = t) {
    for (t = s + 1; t < m->nentries && sk__ckpt_same_group(refs[s].e, refs[t].e); t++) {}
    r = sk__ckpt_check_group(&m->allocator, refs + s, t - s, cells_per_slice, &v, err);
  }
  sk__free(&m->allocator, refs);
  if (r) return r;
  if (v.clash.i >= 0) {
    const sk_ckpt_entry *a = &m->entries[v.clash.i], *b = &m->entries[v.clash.j];
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: tensor '%s' %s: slices of ranks %d and %d %s", a->tensor,
                    sk_ckpt_kind_name(a->kind), a->rank, b->rank, v.clash.what);
  }
  if (v.missing >= 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "checkpoint: tensor '%s' %s: a slice is missing (%lld of %lld elements saved)",
                    m->entries[v.missing].tensor, sk_ckpt_kind_name(m->entries[v.missing].kind), (long long)v.sum,
                    (long long)v.whole);
  return SK_OK;
}

/* The check sk_ckpt_save and sk_ckpt_verify run: the default bound. */
static sk_result sk__ckpt_verify_tiling(const sk_ckpt_manifest *m, sk_error *err) {
  return sk__ckpt_check_tiling(m, SK__CKPT_CELLS_PER_SLICE, err);
}

SK_API sk_result sk_ckpt_verify(const sk_ckpt_manifest *m, sk_ckpt_io io, sk_error *err) {
  if (!m) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_verify: NULL manifest");
  sk_result r = sk__ckpt_check_sizes(m, err);
  if (!r) r = sk__ckpt_verify_tiling(m, err);
  char *buf = r ? NULL : (char *)sk__alloc(&m->allocator, m->block, 64);
  if (!r && !buf) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  for (int f = 0; !r && f < m->nfiles; f++) r = sk__ckpt_verify_file(m, f, buf, io, err);
  sk__free(&m->allocator, buf);
  return r;
}

SK_API sk_result sk_ckpt_read_strategy(const sk_ckpt_manifest *m, char **text, size_t *len, sk_error *err) {
  if (!m || !text || !len) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_read_strategy: NULL argument");
  *text = NULL, *len = 0;
  for (int f = 0; f < m->nfiles; f++) {
    if (strcmp(m->files[f].name, "strategy.json")) continue;
    const sk_ckpt_file *F = &m->files[f];
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/strategy.json", m->dir);
    if (F->size > SK_MAX_TEXT_FILE_BYTES) return sk__fail_too_long(err, path, F->size, SK_MAX_TEXT_FILE_BYTES);
    char *buf = (char *)sk__alloc(&m->allocator, (size_t)F->nblocks * m->block + 1, 1);
    if (!buf) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
    sk_result r = F->nblocks ? sk__ckpt_read_blocks(m, f, 0, F->nblocks, buf, SK_CKPT_IO_PLAIN, NULL, err) : SK_OK;
    if (r) return sk__free(&m->allocator, buf), r;
    buf[F->size] = 0, *text = buf, *len = (size_t)F->size;
    return SK_OK; /* the manifest lists a name once (its text came from one writer) */
  }
  return SK_OK;
}

/* ---- merging -------------------------------------------------------------------------------- */

/* Whether box x meets no saved box of a's tensor and kind. */
static bool sk__ckpt_empty(const sk_ckpt_manifest *m, const sk_ckpt_entry *a, const sk_slice *x) {
  sk_slice y;
  for (int i = 0; i < m->nentries; i++)
    if (sk__ckpt_same_group(&m->entries[i], a) && sk_slice_intersect(&m->entries[i].box, x, &y)) return false;
  return true;
}

/* The edges along dim d of the saved boxes of a's tensor and kind, 0 and the shape's end among
   them, sorted and distinct (room: 2 per box + 2): the grid whose cells lie wholly inside or
   wholly outside each saved box. Their count. */
static int sk__ckpt_edges(const sk_ckpt_manifest *m, const sk_ckpt_entry *a, int d, int64_t *edge) {
  int n = 0, k = 0;
  edge[n++] = 0, edge[n++] = a->shape[d];
  for (int i = 0; i < m->nentries; i++)
    if (sk__ckpt_same_group(&m->entries[i], a)) edge[n++] = m->entries[i].box.start[d], edge[n++] = m->entries[i].box.stop[d];
  qsort(edge, (size_t)n, sizeof *edge, sk__ckpt_i64_order);
  for (int i = 0; i < n; i++)
    if (!k || edge[i] != edge[k - 1]) edge[k++] = edge[i];
  return k;
}

/* A box of a's tensor and kind that no saved box meets: the first empty cell of the edges' grid
   in row-major order, grown along each dim while the next cells are empty too. false when none
   is found within `cells` cells (the search stays bounded on any manifest). */
static bool sk__ckpt_find_gap(const sk_ckpt_manifest *m, const sk_ckpt_entry *a, int64_t *const *edge, const int *nedge,
                              long cells, sk_slice *gap) {
  int nd = a->ndims, at[SK_MAX_DIMS] = {0};
  gap->ndims = nd;
  for (long tried = 0; tried < cells; tried++) {
    for (int d = 0; d < nd; d++) gap->start[d] = edge[d][at[d]], gap->stop[d] = edge[d][at[d] + 1];
    if (sk__ckpt_empty(m, a, gap)) {
      for (int d = 0; d < nd; d++)
        for (int k = at[d] + 1; k + 1 < nedge[d]; k++) {
          sk_slice next = *gap;
          next.start[d] = edge[d][k], next.stop[d] = edge[d][k + 1];
          if (!sk__ckpt_empty(m, a, &next)) break;
          gap->stop[d] = next.stop[d];
        }
      return true;
    }
    int d = nd - 1;
    while (d >= 0 && ++at[d] == nedge[d] - 1) at[d] = 0, d--;
    if (d < 0) return false;
  }
  return false;
}

/* The error for a's tensor and kind, which its saved boxes (holding `saved` of its elements) do
   not cover: a box of the gap, or how much is missing when the search gives up. */
static sk_result sk__ckpt_gap_error(const sk_ckpt_manifest *m, const sk_ckpt_entry *a, int64_t saved, sk_error *err) {
  int nd = a->ndims, nedge[SK_MAX_DIMS] = {0}, count = 0;
  for (int i = 0; i < m->nentries; i++) count += sk__ckpt_same_group(&m->entries[i], a);
  int64_t *room = (int64_t *)sk__alloc(&m->allocator, (size_t)(nd ? nd : 1) * (size_t)(2 * count + 2) * sizeof(int64_t), 0);
  int64_t *edge[SK_MAX_DIMS];
  if (!room) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "merge: out of memory checking '%s'", a->tensor);
  for (int d = 0; d < nd; d++) edge[d] = room + (size_t)d * (size_t)(2 * count + 2), nedge[d] = sk__ckpt_edges(m, a, d, edge[d]);
  char kind[16] = "", box[SK_MAX_DIMS * 48] = "[";
  if (a->kind != SK_CKPT_PARAM) snprintf(kind, sizeof kind, " %s", sk_ckpt_kind_name(a->kind));
  sk_slice gap;
  bool found = nd > 0 && sk__ckpt_find_gap(m, a, edge, nedge, (1L << 24) / (m->nentries + 1) + 1, &gap);
  sk__free(&m->allocator, room);
  int64_t whole = 1;
  for (int d = 0; d < nd; d++) whole *= a->shape[d];
  if (!found)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "merge: tensor '%s'%s: %lld of its %lld elements are missing", a->tensor,
                    kind, (long long)(whole - saved), (long long)whole);
  for (int d = 0; d < nd; d++)
    snprintf(box + strlen(box), sizeof box - strlen(box), "%s%lld:%lld", d ? ", " : "", (long long)gap.start[d],
             (long long)gap.stop[d]);
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "merge: tensor '%s'%s: box %s] is missing", a->tensor, kind, box);
}

/* Before merge allocates a whole tensor: each tensor and kind is tiled by its saved slices (a gap
   named; then overlaps and shapes, as verify checks them). The allocations are then bounded by
   the bytes saved, whatever shape a manifest claims. */
static sk_result sk__ckpt_merge_check(const sk_ckpt_manifest *m, sk_error *err) {
  for (int i = 0; i < m->nentries; i++) {
    const sk_ckpt_entry *a = &m->entries[i];
    int64_t whole = 1, saved = 0;
    bool first = true, same_shape = true;
    for (int d = 0; d < a->ndims; d++) whole *= a->shape[d];
    for (int j = 0; j < m->nentries && first; j++) {
      const sk_ckpt_entry *b = &m->entries[j];
      if (!sk__ckpt_same_group(a, b)) continue;
      first = j >= i;
      same_shape = same_shape && b->ndims == a->ndims;
      for (int d = 0; same_shape && d < a->ndims; d++) same_shape = b->shape[d] == a->shape[d];
      if (saved < whole) saved += sk_slice_volume(&b->box); /* each below 2^60: no overflow */
    }
    if (first && same_shape && saved < whole) return sk__ckpt_gap_error(m, a, saved, err);
  }
  return sk__ckpt_verify_tiling(m, err);
}

/* The distinct (tensor, kind) pairs of m, as whole-tensor slices of one device (data
   allocated; the caller frees each). */
static sk_result sk__ckpt_whole(const sk_ckpt_manifest *m, sk_ckpt_slice *out, int *n, sk_error *err) {
  *n = 0;
  for (int i = 0; i < m->nentries; i++) {
    const sk_ckpt_entry *e = &m->entries[i];
    bool seen = false;
    for (int k = 0; k < *n; k++) seen = seen || (!strcmp(out[k].tensor, e->tensor) && out[k].kind == e->kind);
    if (seen) continue;
    sk_ckpt_slice *s = &out[(*n)++];
    memset(s, 0, sizeof *s);
    s->tensor = e->tensor, s->kind = e->kind, s->dtype = e->dtype, s->ndims = s->box.ndims = e->ndims, s->write = true;
    for (int d = 0; d < e->ndims; d++) s->shape[d] = s->box.stop[d] = e->shape[d];
    if (!(s->data = sk__alloc(&m->allocator, (size_t)sk_slice_volume(&s->box) * sk_dtype_size(e->dtype) + 1, 64)))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory merging '%s'", e->tensor);
  }
  return SK_OK;
}

SK_API sk_result sk_ckpt_merge(const sk_ckpt_manifest *m, const char *out_root, sk_ckpt_io io, sk_ckpt_report *report,
                               sk_error *err) {
  if (!m || !out_root) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "sk_ckpt_merge: NULL argument");
  sk_ckpt_root_lock lock;
  sk_result r = sk__ckpt_merge_check(m, err);
  if (!r) r = sk_ckpt_lock(out_root, &lock, err);
  if (r) return r;
  const sk_allocator *a = &m->allocator;
  sk_ckpt_slice *whole = (sk_ckpt_slice *)sk__calloc(a, ((size_t)m->nentries + 1) * sizeof *whole, 0);
  int n = 0;
  r = whole ? sk__ckpt_whole(m, whole, &n, err) : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "checkpoint: out of memory");
  if (!r) r = sk_ckpt_load(m, 0, io, n, whole, NULL, err);
  char *strategy = NULL;
  size_t slen = 0;
  if (!r) r = sk_ckpt_read_strategy(m, &strategy, &slen, err);
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = m->step, d.position = m->position, d.strategy = strategy, d.strategy_len = slen, d.io = io;
  d.optimizer = m->optimizer[0] ? m->optimizer : NULL; /* sk_ckpt_save checks it */
  d.allocator = m->allocator;
  if (!r) r = sk_ckpt_save(NULL, out_root, &d, n, whole, report, err);
  for (int k = 0; k < n; k++) sk__free(a, whole[k].data);
  sk__free(a, whole), sk__free(a, strategy);
  sk_ckpt_unlock(&lock);
  return r;
}

SK_EXTERN_C_END
#endif /* SK_CKPT_IMPL */
