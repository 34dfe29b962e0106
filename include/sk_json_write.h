/* sk_json_write.h -- the one JSON writing layer of sk_json.h (network files) and sk_strategy.h
   (strategy files): building values with jansson while noting what failed, the layout form both
   formats write ({"mesh", "<list>": [maps]}), and turning the built tree into the canonical
   text and the file. So both write the same way, and a failure reads the same in both.

   NEEDS JANSSON: link with -ljansson (Debian: libjansson-dev; `pkg-config --cflags --libs
   jansson`). Private to those two headers: it declares nothing public, and their
   implementations include it (SK__JSON_WRITE_PRIVATE); shardkit.h does not.

   FAILURES
     jansson's constructors return NULL when out of memory, and its setters take NULL safely;
     the writer notes the failure (sk__jw.failed) or a name that is not UTF-8 (sk__jw.bad_utf8)
     and goes on building, so that one check at the end (sk__jw_text) reports it:
       <who>: name '<name>' is not UTF-8                    SK_ERR_INVALID_ARGUMENT
       <who>: out of memory formatting <what>              SK_ERR_OUT_OF_MEMORY
     The text handed back comes from the C library (free() releases it): both modules' public
     format calls promise that to their callers.

   License: MIT. */
#ifndef SK_JSON_WRITE_H
#define SK_JSON_WRITE_H
#include "sk_core.h" /* no declarations of its own: everything here is the writers' private section */
#endif
#if defined(SK_IMPL) && !defined(SK__JSON_WRITE_PRIVATE)
#define SK__JSON_WRITE_PRIVATE
#endif
#if defined(SK__JSON_WRITE_PRIVATE) && !defined(SK__JSON_WRITE_PRIVATE_DONE)
#define SK__JSON_WRITE_PRIVATE_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include "sk_layout.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

SK_EXTERN_C_BEGIN

/* A writing: what went wrong so far. */
typedef struct sk__jw {
  bool failed;          /* jansson could not allocate */
  const char *bad_utf8; /* a name jansson refused as not UTF-8 */
} sk__jw;

/* Sets obj[key] = v, noting a failure (jansson returns NULL values and -1 when out of memory;
   both calls take NULL safely and release v on failure). */
static SK__UNUSED void sk__jw_set(sk__jw *w, json_t *obj, const char *key, json_t *v) {
  if (json_object_set_new(obj, key, v)) w->failed = true;
}

static SK__UNUSED void sk__jw_append(sk__jw *w, json_t *list, json_t *v) {
  if (json_array_append_new(list, v)) w->failed = true;
}

/* A name as a JSON string; JSON text is UTF-8, so another encoding is refused (told apart from
   running out of memory by jansson's unchecked constructor). */
static SK__UNUSED json_t *sk__jw_name(sk__jw *w, const char *name) {
  json_t *s = json_string(name), *raw;
  if (!s && (raw = json_string_nocheck(name)) != NULL) w->bad_utf8 = name, json_decref(raw);
  return s;
}

static SK__UNUSED json_t *sk__jw_i64s(sk__jw *w, const int64_t *v, int n) {
  json_t *list = json_array();
  for (int k = 0; k < n; k++) sk__jw_append(w, list, json_integer((json_int_t)v[k]));
  return list;
}

static SK__UNUSED json_t *sk__jw_ints(sk__jw *w, const int *v, int n) {
  json_t *list = json_array();
  for (int k = 0; k < n; k++) sk__jw_append(w, list, json_integer(v[k]));
  return list;
}

/* Room for a mesh's or a layout's text (sk_mesh_format, sk_layout_format). */
#define SK__JW_LAYOUT_TEXT (SK_MAX_DIMS * (SK_MAX_AXES * SK_AXIS_NAME_MAX + 4) + 1)

/* {"mesh": l's mesh, map_key: maps}; with maps NULL, map_key holds l's own map ("" for a
   scalar). */
static SK__UNUSED json_t *sk__jw_layout(sk__jw *w, const sk_layout *l, const char *map_key, json_t *maps) {
  char text[SK__JW_LAYOUT_TEXT];
  json_t *o = json_object();
  sk_mesh_format(&l->mesh, text, sizeof text);
  sk__jw_set(w, o, "mesh", json_string(text));
  if (l->ndims) sk_layout_format(l, text, sizeof text);
  else text[0] = 0;
  sk__jw_set(w, o, map_key, maps ? maps : json_string(text));
  return o;
}

/* n layouts on one mesh (the caller made sure they share it): {"mesh", list: [maps]}. */
static SK__UNUSED json_t *sk__jw_layouts(sk__jw *w, const sk_layout *ls, int n, const char *list) {
  char text[SK__JW_LAYOUT_TEXT];
  json_t *maps = json_array();
  for (int k = 0; k < n; k++) sk_layout_format(&ls[k], text, sizeof text), sk__jw_append(w, maps, json_string(text));
  return sk__jw_layout(w, &ls[0], list, maps);
}

/* The text of root (dumped with jansson's `flags`, then a final newline, as a text file ends)
   into *text from the C library, which the public format calls promise; root is released.
   Refuses what the writing noted: who ("json") and what ("the network") name it. */
static SK__UNUSED sk_result sk__jw_text(const sk__jw *w, json_t *root, size_t flags, const char *who,
                                        const char *what, char **text, sk_error *err) {
  /* json_dumpb into a buffer of ours, so that the caller frees it with free() whatever
     allocator jansson was given */
  size_t n = root && !w->failed && !w->bad_utf8 ? json_dumpb(root, NULL, 0, flags) : 0;
  char *buf = n ? (char *)sk__alloc(NULL, n + 2, 1) : NULL;
  if (buf && json_dumpb(root, buf, n, flags) != n) sk__free(NULL, buf), buf = NULL;
  json_decref(root);
  if (w->bad_utf8) return sk__free(NULL, buf), sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: name '%.63s' is not UTF-8", who, w->bad_utf8);
  if (!buf) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "%s: out of memory formatting %s", who, what);
  buf[n] = '\n', buf[n + 1] = 0;
  *text = buf;
  return SK_OK;
}

/* Writes text (sk__jw_text's, released here whatever happens) to path, created or truncated. */
static SK__UNUSED sk_result sk__jw_save(char *text, const char *path, const char *who, sk_error *err) {
  FILE *f = fopen(path, "wb");
  int e = errno; /* before free, which may change it */
  if (!f) return sk__free(NULL, text), sk__fail(err, SK_ERR_SYSTEM, "%s: cannot create '%s': %s", who, path, strerror(e));
  size_t len = strlen(text);
  bool ok = fwrite(text, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok; /* fclose flushes: a full disk shows here */
  e = errno;
  sk__free(NULL, text);
  if (!ok) return sk__fail(err, SK_ERR_SYSTEM, "%s: cannot write '%s': %s", who, path, strerror(e));
  return SK_OK;
}

SK_EXTERN_C_END
#endif /* SK__JSON_WRITE_PRIVATE */
