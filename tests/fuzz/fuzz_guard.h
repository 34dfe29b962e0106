/* The fuzzers' input copy: the bytes end exactly at a page that cannot be read, so that a parser
   reading past len faults even inside libc (strtoul, sscanf), where ASan's redzones do not look.
   And the check of the text size limit the harnesses share. (tests/fuzz/README.md) Include it
   after shardkit's headers. */
#ifndef SK_FUZZ_GUARD_H
#define SK_FUZZ_GUARD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct fuzz_guarded {
  char *map, *text; /* text: the copy, its last byte just before the guard page */
  size_t maplen;
} fuzz_guarded;

/* Copies size bytes (plus `nul` terminating zero bytes, 0 or 1) against the guard; false when
   mmap fails. */
static int fuzz_guard(fuzz_guarded *g, const uint8_t *data, size_t size, int nul) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), n = size + (size_t)nul;
  g->maplen = (n + page - 1) / page * page + page;
  g->map = (char *)mmap(NULL, g->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g->map == MAP_FAILED) return 0;
  if (mprotect(g->map + g->maplen - page, page, PROT_NONE)) return munmap(g->map, g->maplen), 0;
  g->text = g->map + g->maplen - page - n;
  if (size) memcpy(g->text, data, size);
  if (nul) g->text[size] = 0;
  return 1;
}

static void fuzz_unguard(fuzz_guarded *g) { munmap(g->map, g->maplen); }

/* A text of size bytes over SK_MAX_TEXT_FILE_BYTES must have been refused for its length: abort
   otherwise. */
static inline void fuzz_check_limit(size_t size, int accepted, const char *msg) {
  if (size <= SK_MAX_TEXT_FILE_BYTES) return;
  if (accepted || !strstr(msg, " exceeds the limit of ")) {
    fprintf(stderr, "%zu bytes, over the limit of %zu: %s\n", size, (size_t)SK_MAX_TEXT_FILE_BYTES,
            accepted ? "accepted" : msg);
    abort();
  }
}

#endif
