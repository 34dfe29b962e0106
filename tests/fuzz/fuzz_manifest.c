/* libFuzzer harness: sk_ckpt_manifest_parse (checkpoint MANIFEST text, tests/fuzz/README.md).

   Each input is parsed twice: as given (the parser must not read past len: the text is not
   NUL-terminated), and with its crc line replaced by the right one, so that mutations reach
   what lies behind the crc check (the references, and the manifest's later users). An accepted
   manifest is formatted and parsed again (the round trip must hold), its slices checked for
   tiling as sk_ckpt_verify does (on the grid of cut points and pair by pair, which must agree)
   and planned for loading as sk_ckpt_load does. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS (fuzz_guard.h) */
/* A limit the fuzzer's inputs reach (make fuzz passes -max_len above it; every seed is below it):
   the refusal of a text over SK_MAX_TEXT_FILE_BYTES is fuzzed too (sk_core.h's TEXT FILES). */
#define SK_MAX_TEXT_FILE_BYTES ((size_t)64 << 10)
#define SK_IMPL
#include "shardkit.h"
#include "sk_ckpt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_guard.h"

/* What the loaders do with an accepted manifest: whole-tensor plans, the tiling check. */
static void use(const sk_ckpt_manifest *m) {
  sk_ckpt_piece pieces[64];
  for (int i = 0; i < m->nentries && i < 8; i++) {
    const sk_ckpt_entry *e = &m->entries[i];
    sk_ckpt_slice t;
    memset(&t, 0, sizeof t);
    t.tensor = e->tensor, t.kind = e->kind, t.dtype = e->dtype, t.ndims = e->ndims;
    memcpy(t.shape, e->shape, sizeof t.shape);
    t.box = e->box;
    int n = 0;
    (void)sk_ckpt_read_plan(m, &t, 0, pieces, 64, &n, NULL);
  }
  /* the tiling check cell by cell where it can, and pair by pair: the same outcome and message */
  sk_error grid = {SK_OK, ""}, pairs = {SK_OK, ""};
  sk_result rg = sk__ckpt_check_tiling(m, SK__CKPT_CELLS_PER_SLICE, &grid);
  sk_result rp = sk__ckpt_check_tiling(m, 0, &pairs);
  if (rg != rp || (rg && strcmp(grid.msg, pairs.msg))) {
    fprintf(stderr, "tiling: on the grid %d '%s', pair by pair %d '%s'\n", (int)rg, grid.msg, (int)rp, pairs.msg);
    abort();
  }
  char *text = NULL;
  size_t len = 0;
  /* (a canonical text over the limit is refused, as a user's) */
  if (sk_ckpt_manifest_format(m, &text, &len, NULL) == SK_OK && len <= SK_MAX_TEXT_FILE_BYTES) {
    sk_ckpt_manifest back;
    sk_error e = {SK_OK, ""};
    if (sk_ckpt_manifest_parse(text, len, &back, &e) != SK_OK) {
      fprintf(stderr, "round trip refused: %s\n%s", e.msg, text);
      abort();
    }
    sk_ckpt_manifest_free(&back);
  }
  free(text);
}

static void parse(const uint8_t *data, size_t len) {
  fuzz_guarded g;
  if (!fuzz_guard(&g, data, len, 0)) return;
  const char *text = g.text;
  sk_ckpt_manifest m;
  sk_error e = {SK_OK, ""};
  sk_result r = sk_ckpt_manifest_parse(text, len, &m, &e);
  fuzz_check_limit(len, r == SK_OK, e.msg);
  if (r != SK_OK) {
    if (!e.msg[0]) abort(); /* a refusal always says why */
  } else {
    use(&m);
    sk_ckpt_manifest_free(&m);
  }
  fuzz_unguard(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  parse(data, size);
  /* the text up to its last "crc " line (or all of it) and the crc line it should end with */
  size_t body = size;
  for (size_t i = size; i-- > 0;)
    if ((i == 0 || text[i - 1] == '\n') && size - i >= 4 && !memcmp(text + i, "crc ", 4)) {
      body = i;
      break;
    }
  char *fixed = (char *)malloc(body + 16);
  if (fixed) {
    memcpy(fixed, text, body);
    int k = snprintf(fixed + body, 16, "crc %08x\n", (unsigned)crc32(0L, (const Bytef *)text, (uInt)body));
    parse((const uint8_t *)fixed, body + (size_t)k);
    free(fixed);
  }
  return 0;
}
