/* libFuzzer harness: sk_json_parse_network, the network JSON sk-sim reads (and
   sk_json_parse_transformer_opt, the same text as MindSpore's parallel_speed_up.json);
   tests/fuzz/README.md.

   An accepted network is formatted, parsed again and formatted again: loading then saving is
   documented to give the canonical text back byte for byte, and formatting refuses only what
   the reader cannot produce, so any refusal or difference is a bug. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS (fuzz_guard.h) */
/* A limit the fuzzer's inputs reach (make fuzz passes -max_len above it; every seed is below it):
   the refusal of a text over SK_MAX_TEXT_FILE_BYTES is fuzzed too (sk_core.h's TEXT FILES). */
#define SK_MAX_TEXT_FILE_BYTES ((size_t)64 << 10)
#define SK_IMPL
#include "shardkit.h"
#include "sk_json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_guard.h"

static void round_trip(const sk_graph *g) {
  char *text = NULL, *again = NULL;
  sk_error e = {SK_OK, ""};
  if (sk_json_format_network(g, &text, &e) != SK_OK) {
    fprintf(stderr, "an accepted network cannot be formatted: %s\n", e.msg);
    abort();
  }
  if (strlen(text) > SK_MAX_TEXT_FILE_BYTES) { /* indented, the text outgrew the limit: refused, as a user's */
    free(text);
    return;
  }
  sk_graph back;
  if (sk_json_parse_network(text, strlen(text), &back, &e) != SK_OK) {
    fprintf(stderr, "the canonical text is refused: %s\n%s", e.msg, text);
    abort();
  }
  if (sk_json_format_network(&back, &again, &e) != SK_OK || strcmp(text, again)) {
    fprintf(stderr, "formatting twice differs (%s)\n%s\n----\n%s", e.msg, text, again ? again : "");
    abort();
  }
  sk_graph_free(&back);
  free(text), free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_guarded in;
  if (!fuzz_guard(&in, data, size, 0)) return 0;
  sk_graph g;
  sk_error e = {SK_OK, ""};
  sk_result r = sk_json_parse_network(in.text, size, &g, &e);
  fuzz_check_limit(size, r == SK_OK, e.msg);
  if (r == SK_OK) {
    round_trip(&g);
    sk_graph_free(&g);
  } else if (!e.msg[0]) {
    abort(); /* a refusal always says why */
  }
  sk_transformer_opt o;
  e.msg[0] = 0;
  r = sk_json_parse_transformer_opt(in.text, size, &o, &e);
  fuzz_check_limit(size, r == SK_OK, e.msg);
  fuzz_unguard(&in);
  return 0;
}
