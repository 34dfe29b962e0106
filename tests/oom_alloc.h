/* oom_alloc.h -- a counting sk_allocator for single-threaded allocation-failure sweeps
   (tests/test_oom_more.c).

   It numbers every allocation asked of it (1, 2, ...) and fails the k-th: once, or the k-th and
   every later one (persistent); k = 0 fails none. It counts the blocks still live, so a sweep
   can check that everything a call took was given back. Allocations come from aligned_alloc at
   the alignment asked for (the size rounded up to a multiple of it, as aligned_alloc wants).
   Not thread-safe: the calls it serves run on the test's thread. */
#ifndef OOM_ALLOC_H
#define OOM_ALLOC_H

#include <stdbool.h>
#include <stdlib.h>

#include "sk_core.h"

typedef struct oom_alloc {
  long calls;      /* allocations asked for so far */
  long fail_at;    /* the allocation that fails (0: none) */
  bool persistent; /* and every one after it */
  long failed;     /* allocations failed so far */
  long live;       /* blocks allocated and not freed */
} oom_alloc;

static inline void *oom_alloc_take(void *user, size_t size, size_t align) {
  oom_alloc *o = (oom_alloc *)user;
  long n = ++o->calls;
  if (o->fail_at > 0 && (n == o->fail_at || (o->persistent && n > o->fail_at))) {
    o->failed++;
    return NULL;
  }
  void *p = aligned_alloc(align, (size + align - 1) / align * align);
  if (p) o->live++;
  return p;
}

static inline void oom_alloc_give(void *user, void *p) {
  oom_alloc *o = (oom_alloc *)user;
  if (p) o->live--, free(p);
}

/* Counters cleared; the k-th allocation fails from now (k = 0: none). */
static inline void oom_alloc_arm(oom_alloc *o, long k, bool persistent) {
  o->calls = o->failed = o->live = 0;
  o->fail_at = k, o->persistent = persistent;
}

static inline sk_allocator oom_alloc_hook(oom_alloc *o) {
  sk_allocator a = {oom_alloc_take, oom_alloc_give, o};
  return a;
}

#endif /* OOM_ALLOC_H */
