/* sk_ckpt.h's tiling check (sk__ckpt_check_tiling: sk_ckpt_save runs it on rank 0 before the
   commit, sk_ckpt_verify after the file sizes): manifests of 100,000 slices (one tensor in a
   grid, and 25,000 small tensors) checked within a test's timeout, where the scan of all pairs
   it replaced took minutes; the messages of that scan for overlaps, gaps and shapes that
   disagree, on boxes whose cuts line up and on boxes that split each other's cells; a box
   outside its shape; and, on random manifests, the grid of cells, the pair-by-pair fallback and
   a reference (the rule written out pair by pair) giving the same result and message.

   The implementation is compiled in tests/test_ckpt.c. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "sk_ckpt.h"

/* ---- manifests built in memory --------------------------------------------------------------- */

/* An empty manifest with room for cap entries (free it with sk_ckpt_manifest_free). */
static sk_ckpt_manifest manifest(int cap) {
  sk_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  m.block = SK_CKPT_BLOCK;
  m.entries = (sk_ckpt_entry *)calloc((size_t)cap + 1, sizeof *m.entries);
  cr_assert(m.entries, "out of memory for %d entries", cap);
  return m;
}

/* Appends a slice of tensor t: box lo[d]:hi[d] of shape sh (nd dims); its rank is its index. */
static sk_ckpt_entry *add(sk_ckpt_manifest *m, const char *t, sk_ckpt_kind kind, int nd, const int64_t *sh,
                          const int64_t *lo, const int64_t *hi) {
  sk_ckpt_entry *e = &m->entries[m->nentries];
  memset(e, 0, sizeof *e);
  snprintf(e->tensor, sizeof e->tensor, "%s", t);
  e->kind = kind, e->dtype = SK_F32, e->ndims = e->box.ndims = nd, e->rank = m->nentries++;
  for (int d = 0; d < nd; d++) e->shape[d] = sh[d], e->box.start[d] = lo[d], e->box.stop[d] = hi[d];
  return e;
}

/* 1-D and 2-D shorthands. */
static sk_ckpt_entry *add1(sk_ckpt_manifest *m, const char *t, int64_t n, int64_t a, int64_t b) {
  return add(m, t, SK_CKPT_PARAM, 1, (int64_t[]){n}, (int64_t[]){a}, (int64_t[]){b});
}
static sk_ckpt_entry *add2(sk_ckpt_manifest *m, const char *t, int64_t r, int64_t c, int64_t r0, int64_t r1, int64_t c0,
                           int64_t c1) {
  return add(m, t, SK_CKPT_PARAM, 2, (int64_t[]){r, c}, (int64_t[]){r0, c0}, (int64_t[]){r1, c1});
}

/* Tensor "w" [rows * 4, cols * 8] cut into a rows x cols grid, the slices in row-major order. */
static sk_ckpt_manifest grid(int rows, int cols) {
  sk_ckpt_manifest m = manifest(rows * cols);
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) add2(&m, "w", rows * 4, cols * 8, i * 4, i * 4 + 4, j * 8, j * 8 + 8);
  return m;
}

/* The check with each bound: every tensor on its grid (where the overlaps cost little to walk),
   the default, and every tensor pair by pair; all three must agree. The result, the message in
   msg. */
static sk_result tiling(const sk_ckpt_manifest *m, char *msg) {
  const int bounds[3] = {1 << 20, SK__CKPT_CELLS_PER_SLICE, 0};
  sk_result got[3];
  char text[3][SK_ERROR_MSG_MAX];
  for (int k = 0; k < 3; k++) {
    sk_error e = {SK_OK, ""};
    got[k] = sk__ckpt_check_tiling(m, bounds[k], &e);
    snprintf(text[k], sizeof text[k], "%s", got[k] ? e.msg : "");
  }
  for (int k = 1; k < 3; k++) {
    cr_assert_eq(got[k], got[0], "bound %d: %s ('%s'), bound %d: %s ('%s')", bounds[0], sk_result_name(got[0]), text[0],
                 bounds[k], sk_result_name(got[k]), text[k]);
    cr_assert_str_eq(text[k], text[0], "bound %d and bound %d disagree", bounds[k], bounds[0]);
  }
  strcpy(msg, text[0]);
  return got[0];
}

/* m fails the check (every bound, and sk_ckpt_verify: m has no files) with exactly `want`. */
static void expect(const sk_ckpt_manifest *m, const char *want) {
  char msg[SK_ERROR_MSG_MAX];
  cr_assert_eq(tiling(m, msg), SK_ERR_INVALID_ARGUMENT, "accepted; want '%s'", want);
  cr_assert_str_eq(msg, want);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_verify(m, SK_CKPT_IO_PLAIN, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(e.msg, want);
}

static void expect_ok(const sk_ckpt_manifest *m) {
  char msg[SK_ERROR_MSG_MAX];
  cr_assert_eq(tiling(m, msg), SK_OK, "%s", msg);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_verify(m, SK_CKPT_IO_PLAIN, &e), SK_OK, "%s", e.msg);
}

/* ---- 100,000 slices ------------------------------------------------------------------------------ */

/* A scan of all pairs took 9.4 s at 20,000 slices (quadratic: minutes here); sk_ckpt_verify takes
   the manifest without files, so no byte is read. */
Test(ckpt_tiling, a_grid_of_100000_slices, .timeout = 10) {
  sk_ckpt_manifest m = grid(1000, 100);
  cr_assert_eq(m.nentries, 100000);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, &e), SK_OK, "%s", e.msg);
  m.entries[99999].box.start[1] -= 1; /* into its left neighbour, the slice before it */
  cr_assert_eq(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(e.msg, "checkpoint: tensor 'w' param: slices of ranks 99998 and 99999 overlap");
  m.entries[99999].box.start[1] += 2; /* one column left out */
  cr_assert_eq(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(e.msg, "checkpoint: tensor 'w' param: a slice is missing (3199996 of 3200000 elements saved)");
  sk_ckpt_manifest_free(&m);
}

/* 25,000 tensors of 4 slices each (2 x 2), in the order a save gathers them: rank 0's slice of
   every tensor, then rank 1's, ... */
Test(ckpt_tiling, many_tensors_100000_slices, .timeout = 10) {
  enum { T = 25000 };
  sk_ckpt_manifest m = manifest(4 * T);
  char name[32];
  for (int r = 0; r < 4; r++)
    for (int t = 0; t < T; t++) {
      snprintf(name, sizeof name, "layer%d.w", t);
      int64_t r0 = r / 2 * 16, c0 = r % 2 * 8;
      sk_ckpt_entry *e = add2(&m, name, 32, 16, r0, r0 + 16, c0, c0 + 8);
      e->kind = (sk_ckpt_kind)(t % SK_CKPT_KINDS), e->rank = r;
    }
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, &e), SK_OK, "%s", e.msg);
  m.entries[3 * T + 7].box.start[1] = 7; /* rank 3's slice of layer7.w over rank 2's */
  cr_assert_eq(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(e.msg, "checkpoint: tensor 'layer7.w' state0: slices of ranks 2 and 3 overlap");
  sk_ckpt_manifest_free(&m);
}

/* ---- today's messages ------------------------------------------------------------------------- */

/* The first pair in manifest order names the ranks, whichever tensor it is; a shape that differs
   and an overlap, the one that comes first. */
Test(ckpt_tiling, overlaps_name_the_first_pair_in_manifest_order) {
  sk_ckpt_manifest m = manifest(8);
  add1(&m, "a", 8, 0, 4);
  add1(&m, "b", 8, 0, 4);
  add1(&m, "a", 8, 4, 8);
  add1(&m, "a", 8, 3, 5); /* overlaps 0 and 2 */
  add1(&m, "b", 8, 4, 8);
  add1(&m, "b", 8, 2, 6); /* overlaps 1 and 4 */
  expect(&m, "checkpoint: tensor 'a' param: slices of ranks 0 and 3 overlap");
  m.entries[3].kind = SK_CKPT_STATE0; /* another kind: a's param tiles, b's does not */
  expect(&m, "checkpoint: tensor 'b' param: slices of ranks 1 and 5 overlap");
  m.entries[4].shape[0] = 9; /* before its overlap with 5 */
  expect(&m, "checkpoint: tensor 'b' param: slices of ranks 1 and 4 disagree on its shape");
  m.entries[4].shape[0] = 8, m.entries[5].ndims = m.entries[5].box.ndims = 2, m.entries[5].box.stop[1] = 1,
  m.entries[5].shape[1] = 1;
  expect(&m, "checkpoint: tensor 'b' param: slices of ranks 1 and 5 disagree on its shape");
  sk_ckpt_manifest_free(&m);
}

/* Gaps: no overlap anywhere, the first tensor in manifest order that misses elements. */
Test(ckpt_tiling, gaps_name_the_first_tensor_short_of_elements) {
  sk_ckpt_manifest m = manifest(8);
  add1(&m, "c", 8, 0, 8);
  add2(&m, "b", 4, 6, 0, 2, 0, 6);
  add2(&m, "a", 4, 6, 0, 4, 0, 3);
  add2(&m, "b", 4, 6, 2, 4, 0, 5); /* b lacks [2:4, 5:6] */
  add2(&m, "a", 4, 6, 0, 3, 3, 6); /* a lacks [3:4, 3:6] */
  expect(&m, "checkpoint: tensor 'b' param: a slice is missing (22 of 24 elements saved)");
  m.entries[3].box.stop[1] = 6;
  expect(&m, "checkpoint: tensor 'a' param: a slice is missing (21 of 24 elements saved)");
  m.entries[4].box.stop[0] = 4;
  expect_ok(&m);
  m.entries[4].box.start[1] = 2; /* an overlap wins over a gap elsewhere */
  m.entries[0].box.stop[0] = 7;
  expect(&m, "checkpoint: tensor 'a' param: slices of ranks 2 and 4 overlap");
  sk_ckpt_manifest_free(&m);
}

/* Boxes whose cuts do not line up: each box spans several cells of the grid of everyone's cuts. */
Test(ckpt_tiling, boxes_that_split_each_others_cells) {
  sk_ckpt_manifest m = manifest(8);
  add2(&m, "w", 6, 6, 0, 3, 0, 4);
  add2(&m, "w", 6, 6, 0, 2, 4, 6);
  add2(&m, "w", 6, 6, 3, 6, 0, 1);
  add2(&m, "w", 6, 6, 2, 3, 4, 6);
  add2(&m, "w", 6, 6, 3, 6, 1, 6); /* a pinwheel of 5: cuts 0,2,3,6 and 0,1,4,6 */
  expect_ok(&m);
  m.entries[3].box.stop[0] = 4; /* one cell into the last */
  expect(&m, "checkpoint: tensor 'w' param: slices of ranks 3 and 4 overlap");
  m.entries[3].box.stop[0] = 3, m.entries[3].box.start[1] = 5;
  expect(&m, "checkpoint: tensor 'w' param: a slice is missing (35 of 36 elements saved)");
  m.entries[3].box.start[1] = 3; /* into the first one's last column: a cut of its own */
  expect(&m, "checkpoint: tensor 'w' param: slices of ranks 0 and 3 overlap");
  sk_ckpt_manifest_free(&m);
}

/* Scalars: one slice, one cell. */
Test(ckpt_tiling, scalars) {
  sk_ckpt_manifest m = manifest(4);
  add(&m, "step", SK_CKPT_PARAM, 0, NULL, NULL, NULL);
  add(&m, "lr", SK_CKPT_STATE0, 0, NULL, NULL, NULL);
  expect_ok(&m);
  add(&m, "step", SK_CKPT_PARAM, 0, NULL, NULL, NULL);
  expect(&m, "checkpoint: tensor 'step' param: slices of ranks 0 and 2 overlap");
  sk_ckpt_manifest_free(&m);
}

/* A scan of pairs passed [0:2] and [3:5] of 4 elements (4 elements saved); the manifest's parser
   and the save refuse such a box, the check does too. */
Test(ckpt_tiling, a_box_outside_its_shape) {
  sk_ckpt_manifest m = manifest(4);
  add1(&m, "w", 4, 0, 2);
  add1(&m, "w", 4, 3, 5);
  expect(&m, "checkpoint: tensor 'w' param: the slice of rank 1 lies outside its shape");
  m.entries[1].box.start[0] = 2, m.entries[1].box.stop[0] = 4;
  expect_ok(&m);
  m.entries[0].box.ndims = 2;
  expect(&m, "checkpoint: tensor 'w' param: the slice of rank 0 lies outside its shape");
  m.entries[0].box.ndims = 1, m.entries[0].box.start[0] = -1;
  expect(&m, "checkpoint: tensor 'w' param: the slice of rank 0 lies outside its shape");
  m.entries[0].box.start[0] = 2; /* empty */
  expect(&m, "checkpoint: tensor 'w' param: the slice of rank 0 lies outside its shape");
  sk_ckpt_manifest_free(&m);
}

/* A staircase: row i is cut at column i + 1, so the grid has 63 x 64 cells for 126 slices (more
   than SK__CKPT_CELLS_PER_SLICE each): the default goes pair by pair, and agrees (tiling()). */
Test(ckpt_tiling, a_grid_too_large_goes_pair_by_pair) {
  sk_ckpt_manifest m = manifest(130);
  for (int i = 0; i < 63; i++) {
    add2(&m, "w", 63, 64, i, i + 1, 0, i + 1);
    add2(&m, "w", 63, 64, i, i + 1, i + 1, 64);
  }
  expect_ok(&m);
  m.entries[80].box.stop[1] += 1;
  expect(&m, "checkpoint: tensor 'w' param: slices of ranks 80 and 81 overlap");
  m.entries[80].box.stop[1] -= 2;
  expect(&m, "checkpoint: tensor 'w' param: a slice is missing (4031 of 4032 elements saved)");
  sk_ckpt_manifest_free(&m);
}

/* 100 slices of one element and 10 of all 100: 1,100 cells to walk on a grid of 100, more than 8
   per slice; the walk stops there and the pairs are scanned. */
Test(ckpt_tiling, overlaps_too_costly_to_walk_go_pair_by_pair) {
  sk_ckpt_manifest m = manifest(110);
  for (int i = 0; i < 100; i++) add1(&m, "w", 100, i, i + 1);
  for (int i = 0; i < 10; i++) add1(&m, "w", 100, 0, 100);
  expect(&m, "checkpoint: tensor 'w' param: slices of ranks 0 and 100 overlap");
  sk_ckpt_manifest_free(&m);
}

/* ---- random manifests against the rule written out ---------------------------------------------- */

/* The rule as sk_ckpt_verify stated it, pair by pair: the first pair in manifest order of one
   tensor and kind that disagrees on the shape or overlaps, else the first tensor and kind in
   manifest order whose volumes do not add up to its shape's. */
static sk_result reference(const sk_ckpt_manifest *m, char *msg) {
  int n = m->nentries;
  const sk_ckpt_entry *E = m->entries;
  *msg = 0;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      if (strcmp(E[i].tensor, E[j].tensor) || E[i].kind != E[j].kind) continue;
      bool same = E[i].ndims == E[j].ndims, meet = true;
      for (int d = 0; same && d < E[i].ndims; d++) same = E[i].shape[d] == E[j].shape[d];
      for (int d = 0; d < E[i].ndims; d++)
        meet = meet && E[i].box.start[d] < E[j].box.stop[d] && E[j].box.start[d] < E[i].box.stop[d];
      if (!same || meet)
        return sprintf(msg, "checkpoint: tensor '%s' %s: slices of ranks %d and %d %s", E[i].tensor,
                       sk_ckpt_kind_name(E[i].kind), E[i].rank, E[j].rank, !same ? "disagree on its shape" : "overlap"),
               SK_ERR_INVALID_ARGUMENT;
    }
  for (int i = 0; i < n; i++) {
    int64_t sum = 0, whole = 1;
    bool first = true;
    for (int j = 0; j < n; j++) {
      if (strcmp(E[i].tensor, E[j].tensor) || E[i].kind != E[j].kind) continue;
      first = first && j >= i;
      int64_t v = 1;
      for (int d = 0; d < E[j].ndims; d++) v *= E[j].box.stop[d] - E[j].box.start[d];
      sum += v;
    }
    for (int d = 0; d < E[i].ndims; d++) whole *= E[i].shape[d];
    if (first && sum != whole)
      return sprintf(msg, "checkpoint: tensor '%s' %s: a slice is missing (%lld of %lld elements saved)", E[i].tensor,
                     sk_ckpt_kind_name(E[i].kind), (long long)sum, (long long)whole),
             SK_ERR_INVALID_ARGUMENT;
  }
  return SK_OK;
}

static unsigned next(unsigned *s) { return *s = *s * 1103515245u + 12345u, (*s >> 8) & 0xffffff; }

/* A tiling of shape sh (nd dims) into at most want boxes: a grid of random cuts (they line up)
   or random guillotine cuts (they do not). */
static int random_tiling(int nd, const int64_t *sh, int want, sk_slice *out, unsigned *s) {
  int n = 1;
  memset(out, 0, sizeof *out);
  out[0].ndims = nd;
  for (int d = 0; d < nd; d++) out[0].stop[d] = sh[d];
  bool aligned = next(s) % 2;
  for (int tries = 0; n < want && tries < 4 * want; tries++) {
    int d = nd ? (int)(next(s) % (unsigned)nd) : 0;
    if (!nd || sh[d] < 2) continue;
    int64_t at = 1 + (int64_t)(next(s) % (unsigned)(sh[d] - 1));
    int k = aligned ? n : 1 + (int)(next(s) % (unsigned)n);
    for (int b = aligned ? 0 : k - 1; b < k && n < want; b++) /* aligned: cut every box at `at` */
      if (out[b].start[d] < at && at < out[b].stop[d]) {
        out[n] = out[b], out[b].stop[d] = at, out[n++].start[d] = at;
      }
  }
  return n;
}

/* One random manifest of up to 4 tensors (1 to 3 dims, a kind each), each tiled then perhaps
   damaged (a slice dropped, doubled, grown, shrunk, or of another shape), the slices shuffled. */
static void random_manifest(sk_ckpt_manifest *m, unsigned *s) {
  static const char *const names[4] = {"a", "b", "c", "d"};
  sk_slice boxes[32];
  m->nentries = 0;
  for (int t = 0, nt = 1 + (int)(next(s) % 4); t < nt; t++) {
    int nd = 1 + (int)(next(s) % 3), n;
    int64_t sh[SK_MAX_DIMS];
    for (int d = 0; d < nd; d++) sh[d] = 1 + (int64_t)(next(s) % 7);
    n = random_tiling(nd, sh, 1 + (int)(next(s) % 24), boxes, s);
    int damage = (int)(next(s) % 8), victim = (int)(next(s) % (unsigned)n), d = (int)(next(s) % (unsigned)nd);
    sk_ckpt_kind kind = (sk_ckpt_kind)(next(s) % SK_CKPT_KINDS);
    if (damage == 1 && n > 1) boxes[victim] = boxes[--n];
    if (damage == 2) boxes[n++] = boxes[victim];
    if (damage == 3 && boxes[victim].stop[d] < sh[d]) boxes[victim].stop[d]++;
    if (damage == 4 && boxes[victim].start[d] > 0) boxes[victim].start[d]--;
    if (damage == 5 && boxes[victim].stop[d] - boxes[victim].start[d] > 1) boxes[victim].stop[d]--;
    for (int b = 0; b < n; b++) {
      sk_ckpt_entry *e = add(m, names[t], kind, nd, sh, boxes[b].start, boxes[b].stop);
      if (damage == 6 && b == victim) e->shape[d]++;
    }
  }
  for (int i = m->nentries - 1; i > 0; i--) { /* shuffled; the ranks follow the new order */
    int j = (int)(next(s) % (unsigned)(i + 1));
    sk_ckpt_entry x = m->entries[i];
    m->entries[i] = m->entries[j], m->entries[j] = x;
  }
  for (int i = 0; i < m->nentries; i++) m->entries[i].rank = i;
}

Test(ckpt_tiling, random_manifests_agree_with_the_rule) {
  sk_ckpt_manifest m = manifest(4 * 33);
  unsigned seed = 20261201u;
  int outcomes[4] = {0, 0, 0, 0}; /* ok, overlap, missing, shape */
  for (int run = 0; run < 3000; run++) {
    random_manifest(&m, &seed);
    char want[SK_ERROR_MSG_MAX], got[SK_ERROR_MSG_MAX];
    sk_result rw = reference(&m, want), rg = tiling(&m, got);
    cr_assert_eq(rg, rw, "run %d: %s ('%s'), the rule: %s ('%s')", run, sk_result_name(rg), got, sk_result_name(rw), want);
    cr_assert_str_eq(got, want, "run %d", run);
    outcomes[!rw ? 0 : strstr(want, "overlap") ? 1 : strstr(want, "missing") ? 2 : 3]++;
  }
  for (int k = 0; k < 4; k++) cr_assert_gt(outcomes[k], 100, "outcome %d seen %d times", k, outcomes[k]);
  sk_ckpt_manifest_free(&m);
}

/* ---- through sk_ckpt_save ------------------------------------------------------------------------ */

/* The pinwheel above saved by one device: committed; one box moved over another: refused with
   the check's message, nothing committed. */
Test(ckpt_tiling, a_save_checks_boxes_that_split_cells) {
  static const int64_t box[5][4] = {{0, 3, 0, 4}, {0, 2, 4, 6}, {3, 6, 0, 1}, {2, 3, 4, 6}, {3, 6, 1, 6}};
  static float data[36];
  sk_ckpt_slice s[5];
  memset(s, 0, sizeof s);
  for (int i = 0; i < 5; i++) {
    s[i].tensor = "w", s[i].dtype = SK_F32, s[i].ndims = s[i].box.ndims = 2, s[i].shape[0] = s[i].shape[1] = 6;
    s[i].box.start[0] = box[i][0], s[i].box.stop[0] = box[i][1], s[i].box.start[1] = box[i][2];
    s[i].box.stop[1] = box[i][3], s[i].data = data, s[i].write = true;
  }
  char root[64], cmd[128];
  snprintf(root, sizeof root, "/tmp/sk_ckpt_tiling.XXXXXX");
  cr_assert(mkdtemp(root));
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = 1;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_save(NULL, root, &d, 5, s, NULL, &e), SK_OK, "%s", e.msg);
  d.step = 2, s[3].box.stop[0] = 4;
  cr_assert_eq(sk_ckpt_save(NULL, root, &d, 5, s, NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(e.msg, "checkpoint: tensor 'w' param: slices of ranks 0 and 0 overlap");
  sk_ckpt_manifest m;
  cr_assert_eq(sk_ckpt_open(root, &m, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(m.step, 1);
  sk_ckpt_manifest_free(&m);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  cr_assert_eq(system(cmd), 0);
}

/* ---- out of memory ---------------------------------------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* Each of the check's allocations refused in turn (the address space limited a little more each
   time above what the process maps): SK_ERR_OUT_OF_MEMORY or SK_OK, and every byte freed. */
Test(ckpt_tiling, out_of_memory_frees_everything, .timeout = 30) {
#if defined(UNDER_ASAN) || !defined(__GLIBC__)
  cr_skip_test("ASan maps far beyond any address-space limit; mallinfo2 is glibc's");
#else
  sk_ckpt_manifest m = grid(500, 100); /* each allocation above malloc's mmap threshold */
  struct rlimit was;
  cr_assert_eq(getrlimit(RLIMIT_AS, &was), 0);
  int ok = 0, oom = 0;
  for (long step = 0; step < 64; step++) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert(f && fscanf(f, "%ld", &pages) == 1);
    fclose(f);
    size_t before = mallinfo2().uordblks + mallinfo2().hblkhd;
    struct rlimit lim = was;
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (rlim_t)step * (128 << 10);
    cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);
    sk_error e = {SK_OK, ""};
    sk_result r = sk__ckpt_check_tiling(&m, SK__CKPT_CELLS_PER_SLICE, &e);
    cr_assert_eq(setrlimit(RLIMIT_AS, &was), 0);
    cr_assert(r == SK_OK || (r == SK_ERR_OUT_OF_MEMORY && strstr(e.msg, "out of memory")), "step %ld: %s (%s)", step,
              sk_result_name(r), e.msg);
    cr_assert_eq(mallinfo2().uordblks + mallinfo2().hblkhd, before, "step %ld: %s left memory behind", step, sk_result_name(r));
    if (r) oom++;
    else ok++;
  }
  cr_assert(oom > 0 && ok > 0, "%d refused, %d passed", oom, ok);
  sk_ckpt_manifest_free(&m);
#endif
}
