/* libFuzzer harness: the Python literals sk-layout reads (tools/pyliteral.h) and MindSpore's
   Layout literals (tools/pylayout.h); tests/fuzz/README.md.

   The input is one flag's value (NUL-terminated). It is parsed, then read every way the programs
   read a value: as an integer tuple, a bool, a map text for 1..3 dims, a Layout (its mesh, its
   map, the axes checked), and as a tuple of layouts whose maps are then laid over shapes of
   their own rank by sk_layout_parse. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS (fuzz_guard.h) */
#define SK_IMPL
#include "shardkit.h"

#include "pylayout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_guard.h"

/* Every reading of the parsed value at doc->root; each may fail, none may crash. */
static void read_value(pylit_doc *doc) {
  long long v[SK_MAX_DIMS];
  int b = 0;
  char map[PYLAYOUT_MAP_MAX];
  (void)pylit_int_tuple(doc, doc->root, 1, 1LL << 50, "a positive integer", v, SK_MAX_DIMS);
  (void)pylit_bool(doc, doc->root, &b);
  for (int nd = 1; nd <= 3; nd++) (void)pylayout_map_text(doc, doc->root, nd, map, sizeof map);
  sk_mesh mesh;
  int call = -1;
  if (doc->nodes[doc->root].kind == PYLIT_CALL && pylayout_mesh(doc, doc->root, &mesh, &call) == 0 && call >= 0 &&
      pylayout_map_text(doc, call, 0, map, sizeof map) == 0)
    (void)pylayout_check_axes(doc, call, &mesh);
}

/* As a dataset strategy: a tuple of layouts, each map laid over a shape of its dims. */
static void read_layouts(const char *text) {
  enum { MAX = 4 };
  static sk_mesh meshes[MAX];
  static char maps[MAX][PYLAYOUT_MAP_MAX];
  char err[256];
  int n = 0;
  (void)pylayout_is_layout_text(text);
  if (pylayout_tuple("--fuzz", text, MAX, meshes, maps, &n, err, sizeof err)) return;
  for (int i = 0; i < n; i++) {
    int nd = 1, depth = 0;
    for (const char *c = maps[i]; *c; c++) { /* the commas outside ( ) */
      depth += *c == '(' ? 1 : *c == ')' ? -1 : 0;
      nd += *c == ',' && depth == 0;
    }
    int64_t shape[SK_MAX_DIMS];
    for (int d = 0; d < SK_MAX_DIMS; d++) shape[d] = 64;
    sk_layout l;
    sk_error e;
    if (nd <= SK_MAX_DIMS) (void)sk_layout_parse(&l, &meshes[i], maps[i], nd, shape, &e);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096 || memchr(data, 0, size)) return 0; /* a command-line value: one C string */
  fuzz_guarded in;
  if (!fuzz_guard(&in, data, size, 1)) return 0;
  static pylit_doc doc;
  if (pylit_parse(&doc, "--fuzz", in.text) == 0) read_value(&doc);
  else if (!doc.error[0]) abort(); /* a refusal always says why */
  read_layouts(in.text);
  fuzz_unguard(&in);
  return 0;
}
