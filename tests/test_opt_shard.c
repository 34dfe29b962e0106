/* sk_opt_shard.h: optimizer parallel (hsdp) for one parameter -- MindSpore's fc1 example, the
   partial shard_size groups, the threshold edge, every reason a parameter stays whole, the bad
   configurations, the "[SHARD_SIZE][,THRESHOLD_KB][,LEVEL]" text, and a property check over
   small random layouts against a replica group computed here by comparing slices. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_layout.h"
#include "sk_opt_shard.h"
#include "expect_bad.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static sk_layout layout_of(const char *mesh, const char *map, int ndims, const int64_t *shape) {
  sk_mesh m;
  sk_layout l;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_mesh_parse(&m, mesh, &e), SK_OK, "mesh \"%s\": %s", mesh, e.msg);
  cr_assert_eq(sk_layout_parse(&l, &m, map, ndims, shape, &e), SK_OK, "layout \"%s\" on \"%s\": %s", map, mesh, e.msg);
  return l;
}

static sk_hsdp hsdp_of(int shard_size, int64_t threshold_kb) {
  sk_hsdp h = SK_HSDP_DEFAULTS;
  h.shard_size = shard_size, h.threshold_kb = threshold_kb;
  return h;
}

static sk_opt_shard shard_of(const sk_layout *l, sk_dtype dt, const sk_hsdp *h, int rank) {
  sk_opt_shard os;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_opt_shard_of(l, dt, h, rank, &os, &e), SK_OK, "rank %d: %s", rank, e.msg);
  return os;
}

/* A rank's AllGather and Mirror groups. */
typedef struct groups {
  int gather[SK_MAX_DEVICES], ngather, mirror[SK_MAX_DEVICES], nmirror;
} groups;

static groups groups_of(const sk_layout *l, sk_dtype dt, const sk_hsdp *h, int rank) {
  static groups g; /* SK_MAX_DEVICES ranks twice: too much for a test's stack frame */
  sk_error e = {SK_OK, ""};
  memset(&g, 0, sizeof g);
  cr_assert_eq(sk_opt_shard_groups(l, dt, h, rank, g.gather, &g.ngather, g.mirror, &g.nmirror, SK_MAX_DEVICES, &e),
               SK_OK, "rank %d: %s", rank, e.msg);
  return g;
}

static void expect_ranks(const int *got, int n, const int *want, int nwant, const char *what, int rank) {
  cr_assert_eq(n, nwant, "rank %d: %s has %d ranks, want %d", rank, what, n, nwant);
  for (int i = 0; i < n; i++) cr_expect_eq(got[i], want[i], "rank %d: %s[%d] = %d, want %d", rank, what, i, got[i], want[i]);
}

/* ---- MindSpore's example: fc1_weight [784,512] f32, MatMul ((2,4),(4,1)) on 8 devices ------- */

/* The weight's strategy (4,1) on the device matrix (2,4): dim 0 by the axis of 4, the axis of 2
   unused -- each model-parallel slice [196,512] is held by 2 devices, r and r + 4. */
static sk_layout fc1_weight(void) {
  static const int64_t shape[2] = {784, 512};
  return layout_of("a=2,b=4", "b,None", 2, shape);
}

Test(opt_shard, fc1_default_hsdp_halves_the_slice_over_the_pair) {
  sk_layout l = fc1_weight();
  sk_hsdp h = SK_HSDP_DEFAULTS; /* 784*512*4 bytes = 1.53 MB, over 64 KB */
  for (int rank = 0; rank < 8; rank++) {
    sk_opt_shard os = shard_of(&l, SK_F32, &h, rank);
    cr_assert_eq(os.size, 2, "rank %d", rank);
    cr_expect_eq(os.replicas, 2);
    cr_expect_eq(os.mirror, 1, "fully sharded: no Mirror");
    cr_expect_eq(os.index, rank / 4, "rank %d", rank);
    cr_expect_eq(os.ndims, 2);
    cr_expect(os.slice_shape[0] == 98 && os.slice_shape[1] == 512, "rank %d stores [98,512]", rank);
    cr_expect_str_eq(os.why, "");
    /* the model-parallel slice of rank r starts at 196 * (r % 4); r < 4 keeps its first half */
    int64_t base = 196 * (rank % 4) + 98 * (rank / 4);
    cr_expect(os.rows_start == base && os.rows_stop == base + 98, "rank %d rows [%lld,%lld)", rank,
              (long long)os.rows_start, (long long)os.rows_stop);
  }
  sk_opt_shard r0 = shard_of(&l, SK_F32, &h, 0), r4 = shard_of(&l, SK_F32, &h, 4);
  cr_expect(r0.rows_start == 0 && r0.rows_stop == 98);
  cr_expect(r4.rows_start == 98 && r4.rows_stop == 196);
}

Test(opt_shard, fc1_gather_groups_are_the_pairs_and_no_mirror) {
  sk_layout l = fc1_weight();
  sk_hsdp h = SK_HSDP_DEFAULTS;
  for (int rank = 0; rank < 8; rank++) {
    groups g = groups_of(&l, SK_F32, &h, rank);
    const int pair[2] = {rank % 4, rank % 4 + 4};
    expect_ranks(g.gather, g.ngather, pair, 2, "AllGather group", rank);
    /* the Mirror group of a fully sharded parameter is the rank alone: nothing to sum */
    expect_ranks(g.mirror, g.nmirror, &rank, 1, "Mirror group", rank);
  }
}

Test(opt_shard, fc1_off_leaves_it_whole) {
  sk_layout l = fc1_weight();
  sk_hsdp off;
  memset(&off, 0, sizeof off);
  sk_opt_shard os = shard_of(&l, SK_F32, &off, 4);
  cr_expect_eq(os.size, 0);
  cr_expect_eq(os.mirror, 0);
  cr_expect_eq(os.replicas, 2);
  cr_expect(os.slice_shape[0] == 196 && os.slice_shape[1] == 512, "the model-parallel slice");
  cr_expect(os.rows_start == 0 && os.rows_stop == 196);
  cr_expect_str_eq(os.why, "optimizer parallel is off");
  groups g = groups_of(&l, SK_F32, &off, 4);
  const int pair[2] = {0, 4};
  cr_expect_eq(g.ngather, 0);
  expect_ranks(g.mirror, g.nmirror, pair, 2, "Mirror group (the replica group)", 4);
}

/* ---- shard_size smaller than the replica group: consecutive gather groups plus a Mirror ------ */

/* [64,8] with dim 1 cut by b=8 on 32 devices: a holds copies, so rank r's replica group is the
   4 ranks r % 8 + {0, 8, 16, 24}. */
static sk_layout replicated_over_a(void) {
  static const int64_t shape[2] = {64, 8};
  return layout_of("a=4,b=8", "None,b", 2, shape);
}

Test(opt_shard, partial_shard_size_2_of_4) {
  sk_layout l = replicated_over_a();
  sk_hsdp h = hsdp_of(2, 0);
  static const int gather[4][2] = {{0, 8}, {0, 8}, {16, 24}, {16, 24}};
  static const int mirror[4][2] = {{0, 16}, {8, 24}, {0, 16}, {8, 24}};
  for (int i = 0; i < 4; i++) {
    int rank = 8 * i;
    sk_opt_shard os = shard_of(&l, SK_F32, &h, rank);
    cr_assert_eq(os.size, 2, "rank %d", rank);
    cr_expect_eq(os.replicas, 4);
    cr_expect_eq(os.mirror, 2);
    cr_expect_eq(os.index, i % 2);
    cr_expect(os.slice_shape[0] == 32 && os.slice_shape[1] == 1, "rank %d", rank);
    cr_expect(os.rows_start == 32 * (i % 2) && os.rows_stop == 32 * (i % 2) + 32, "rank %d", rank);
    groups g = groups_of(&l, SK_F32, &h, rank);
    expect_ranks(g.gather, g.ngather, gather[i], 2, "AllGather group", rank);
    expect_ranks(g.mirror, g.nmirror, mirror[i], 2, "Mirror group", rank);
  }
  /* another column of the mesh: the same pattern shifted by its b coordinate */
  groups g = groups_of(&l, SK_F32, &h, 21); /* replica group [5,13,21,29], position 2 */
  expect_ranks(g.gather, g.ngather, (const int[]){21, 29}, 2, "AllGather group", 21);
  expect_ranks(g.mirror, g.nmirror, (const int[]){5, 21}, 2, "Mirror group", 21);
  g = groups_of(&l, SK_F32, &h, 5);
  expect_ranks(g.gather, g.ngather, (const int[]){5, 13}, 2, "AllGather group", 5);
  g = groups_of(&l, SK_F32, &h, 29);
  expect_ranks(g.mirror, g.nmirror, (const int[]){13, 29}, 2, "Mirror group", 29);
}

Test(opt_shard, partial_shard_size_larger_than_the_group_is_clamped) {
  sk_layout l = replicated_over_a();
  for (int k = 4; k <= 64; k *= 2) {
    sk_hsdp h = hsdp_of(k, 0);
    sk_opt_shard os = shard_of(&l, SK_F32, &h, 16);
    cr_expect_eq(os.size, 4, "shard_size %d", k);
    cr_expect_eq(os.mirror, 1, "shard_size %d", k);
    cr_expect_eq(os.index, 2);
    cr_expect(os.rows_start == 32 && os.rows_stop == 48, "shard_size %d", k);
    groups g = groups_of(&l, SK_F32, &h, 16);
    expect_ranks(g.gather, g.ngather, (const int[]){0, 8, 16, 24}, 4, "AllGather group", 16);
  }
  sk_hsdp whole = hsdp_of(-1, 0);
  cr_expect_eq(shard_of(&l, SK_F32, &whole, 16).size, 4, "-1: the whole group");
}

Test(opt_shard, partial_shard_size_not_dividing_the_group_leaves_it_whole) {
  sk_layout l = replicated_over_a();
  sk_hsdp h = hsdp_of(3, 0);
  sk_opt_shard os = shard_of(&l, SK_F32, &h, 0);
  cr_expect_eq(os.size, 0);
  cr_expect_eq(os.index, 0);
  cr_expect_eq(os.mirror, 0);
  cr_expect_str_eq(os.why, "shard_size does not divide the replica group");
  cr_expect(os.slice_shape[0] == 64 && os.rows_start == 0 && os.rows_stop == 64);
  groups g = groups_of(&l, SK_F32, &h, 8);
  cr_expect_eq(g.ngather, 0);
  expect_ranks(g.mirror, g.nmirror, (const int[]){0, 8, 16, 24}, 4, "Mirror group (the replica group)", 8);
}

/* ---- the threshold: the whole parameter's bytes against threshold_kb * 1024 ------------------ */

static int size_of_vector(int64_t n, sk_dtype dt, int64_t threshold_kb) {
  const int64_t shape[1] = {n};
  sk_layout l = layout_of("dp=2", "None", 1, shape);
  sk_hsdp h = hsdp_of(-1, threshold_kb);
  return shard_of(&l, dt, &h, 1).size;
}

Test(opt_shard, threshold_exactly_the_threshold_is_sharded_one_element_less_is_not) {
  cr_expect_eq(size_of_vector(256, SK_F32, 1), 2, "1024 bytes, threshold 1 KB");
  cr_expect_eq(size_of_vector(254, SK_F32, 1), 0, "1016 bytes");
  cr_expect_eq(size_of_vector(16384, SK_F32, 64), 2, "64 KB, the default threshold");
  cr_expect_eq(size_of_vector(16382, SK_F32, 64), 0, "just under 64 KB");
  /* one element fewer on an odd dim 0 would fail divisibility instead: check the reason */
  const int64_t shape[1] = {255};
  sk_layout l = layout_of("dp=2", "None", 1, shape);
  sk_hsdp h = hsdp_of(-1, 1);
  sk_opt_shard os = shard_of(&l, SK_F32, &h, 0);
  cr_expect_eq(os.size, 0);
  cr_expect_str_eq(os.why, "smaller than the threshold");
}

Test(opt_shard, threshold_zero_shards_everything) {
  cr_expect_eq(size_of_vector(2, SK_F32, 0), 2);
  cr_expect_eq(size_of_vector(2, SK_I8, 0), 2);
}

Test(opt_shard, threshold_dtype_bytes_count) {
  cr_expect_eq(size_of_vector(512, SK_F16, 1), 2, "512 halves are 1 KB");
  cr_expect_eq(size_of_vector(510, SK_F16, 1), 0);
  cr_expect_eq(size_of_vector(512, SK_BF16, 1), 2);
  cr_expect_eq(size_of_vector(256, SK_F16, 1), 0, "256 floats are 1 KB, 256 halves are not");
  cr_expect_eq(size_of_vector(256, SK_F32, 1), 2);
  cr_expect_eq(size_of_vector(128, SK_F64, 1), 2);
  cr_expect_eq(size_of_vector(126, SK_F64, 1), 0);
}

/* ---- reasons a parameter stays whole ---------------------------------------------------------- */

Test(opt_shard, whole_replica_group_of_one) {
  static const int64_t shape[2] = {64, 64};
  sk_layout l = layout_of("dp=2,mp=4", "dp,mp", 2, shape);
  sk_hsdp h = hsdp_of(-1, 0);
  sk_opt_shard os = shard_of(&l, SK_F32, &h, 5);
  cr_expect_eq(os.size, 0);
  cr_expect_eq(os.replicas, 1);
  cr_expect_str_eq(os.why, "no replicas: the layout uses every device");
  cr_expect(os.slice_shape[0] == 32 && os.slice_shape[1] == 16);
  cr_expect(os.rows_start == 32 && os.rows_stop == 64, "rank 5's model-parallel rows");
  groups g = groups_of(&l, SK_F32, &h, 5);
  cr_expect_eq(g.ngather, 0);
  expect_ranks(g.mirror, g.nmirror, (const int[]){5}, 1, "Mirror group", 5);
}

Test(opt_shard, whole_dim0_of_the_slice_not_divisible) {
  static const int64_t shape[2] = {6, 4};
  sk_layout l = layout_of("dp=4", "None,None", 2, shape);
  sk_hsdp h = hsdp_of(-1, 0);
  sk_opt_shard os = shard_of(&l, SK_F32, &h, 3);
  cr_expect_eq(os.size, 0);
  cr_expect_eq(os.replicas, 4);
  cr_expect_str_eq(os.why, "dim 0 of the slice does not divide by the shard count");
  cr_expect(os.slice_shape[0] == 6 && os.rows_start == 0 && os.rows_stop == 6);
  /* shard_size 2 divides both the group and the 6 rows */
  sk_hsdp two = hsdp_of(2, 0);
  os = shard_of(&l, SK_F32, &two, 3);
  cr_expect_eq(os.size, 2);
  cr_expect(os.slice_shape[0] == 3 && os.rows_start == 3 && os.rows_stop == 6, "rank 3: position 3, chunk 1");
}

Test(opt_shard, whole_dim0_divides_the_tensor_but_not_the_slice) {
  /* 16 rows by mp=4 leave 4 per slice; 8 replicas cannot cut 4 rows */
  static const int64_t shape[1] = {16};
  sk_layout l = layout_of("dp=8,mp=4", "mp", 1, shape);
  sk_hsdp h = hsdp_of(-1, 0);
  sk_opt_shard os = shard_of(&l, SK_F32, &h, 0);
  cr_expect_eq(os.replicas, 8);
  cr_expect_eq(os.size, 0);
  cr_expect_str_eq(os.why, "dim 0 of the slice does not divide by the shard count");
  sk_hsdp four = hsdp_of(4, 0);
  os = shard_of(&l, SK_F32, &four, 4 * 5 + 1); /* dp 5, mp 1: replica position 5 */
  cr_expect_eq(os.size, 4);
  cr_expect_eq(os.index, 1);
  cr_expect(os.rows_start == 5 && os.rows_stop == 6, "mp 1's rows [4,8), chunk 1: [%lld,%lld)",
            (long long)os.rows_start, (long long)os.rows_stop);
}

Test(opt_shard, whole_scalar) {
  /* The compiler lays a scalar parameter out with no dims, whole on every device: it stays
     whole (no dim 0 to cut), its Mirror group the whole mesh. */
  static const int64_t shape[1] = {4};
  sk_layout l = layout_of("dp=4", "None", 1, shape);
  l.ndims = 0;
  sk_hsdp h = hsdp_of(-1, 0);
  sk_opt_shard os;
  sk_error e;
  int g[4], ng, mg[4], nm;
  cr_assert_eq(sk_opt_shard_of(&l, SK_F32, &h, 2, &os, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(os.size, 0);
  cr_assert_eq(os.replicas, 4);
  cr_assert(strstr(os.why, "scalar"), "why: %s", os.why);
  cr_assert_eq(sk_opt_shard_groups(&l, SK_F32, &h, 2, g, &ng, mg, &nm, 4, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(ng, 0);
  cr_assert_eq(nm, 4);
  cr_assert_eq(mg[3], 3);
}

/* ---- bad configurations and arguments --------------------------------------------------------- */

Test(opt_shard, errors_bad_hsdp) {
  sk_layout l = fc1_weight();
  sk_opt_shard os;
  sk_error e;
  sk_hsdp h = hsdp_of(0, 64);
  EXPECT_BAD(sk_hsdp_check(&h, &e), &e, "shard_size must be -1 or a positive integer, got 0");
  EXPECT_BAD(sk_opt_shard_of(&l, SK_F32, &h, 0, &os, &e), &e, "shard_size");
  h = hsdp_of(-2, 64);
  EXPECT_BAD(sk_hsdp_check(&h, &e), &e, "got -2");
  h = hsdp_of(-1, -1);
  EXPECT_BAD(sk_hsdp_check(&h, &e), &e, "threshold must be 0 or a positive number of KB, got -1");
  EXPECT_BAD(sk_opt_shard_of(&l, SK_F32, &h, 0, &os, &e), &e, "threshold");
  h = hsdp_of(-1, 64);
  h.level = (sk_hsdp_level)5;
  EXPECT_BAD(sk_hsdp_check(&h, &e), &e, "optimizer_level");
  int g[8], ng, mg[8], nm;
  EXPECT_BAD(sk_opt_shard_groups(&l, SK_F32, &h, 0, g, &ng, mg, &nm, 8, &e), &e, "optimizer_level");
  EXPECT_BAD(sk_hsdp_check(NULL, &e), &e, "NULL");
  cr_expect_str_eq(sk_hsdp_level_name(SK_HSDP_LEVEL2), "level2");
  cr_expect_str_eq(sk_hsdp_level_name((sk_hsdp_level)5), "?");
  /* a disabled configuration is not checked: its fields are not used */
  memset(&h, 0, sizeof h);
  h.shard_size = -7;
  cr_expect_eq(sk_hsdp_check(&h, &e), SK_OK);
}

Test(opt_shard, errors_bad_rank_null_and_uninitialised) {
  sk_layout l = fc1_weight();
  sk_hsdp h = SK_HSDP_DEFAULTS;
  sk_opt_shard os;
  sk_error e;
  EXPECT_BAD(sk_opt_shard_of(&l, SK_F32, &h, 8, &os, &e), &e, "rank 8 is not on the layout's 8 devices");
  EXPECT_BAD(sk_opt_shard_of(&l, SK_F32, &h, -1, &os, &e), &e, "rank -1");
  EXPECT_BAD(sk_opt_shard_of(NULL, SK_F32, &h, 0, &os, &e), &e, "NULL");
  EXPECT_BAD(sk_opt_shard_of(&l, SK_F32, NULL, 0, &os, &e), &e, "NULL");
  EXPECT_BAD(sk_opt_shard_of(&l, SK_F32, &h, 0, NULL, &e), &e, "NULL");
  sk_layout zero;
  memset(&zero, 0, sizeof zero);
  EXPECT_BAD(sk_opt_shard_of(&zero, SK_F32, &h, 0, &os, &e), &e, "rank 0");
  int g[8], ng, mg[8], nm;
  EXPECT_BAD(sk_opt_shard_groups(&l, SK_F32, &h, 0, NULL, &ng, mg, &nm, 8, &e), &e, "NULL");
  EXPECT_BAD(sk_opt_shard_groups(&l, SK_F32, &h, 0, g, &ng, mg, NULL, 8, &e), &e, "NULL");
  EXPECT_BAD(sk_opt_shard_groups(&l, SK_F32, &h, 9, g, &ng, mg, &nm, 8, &e), &e, "rank 9");
  /* room for fewer ranks than the group has */
  EXPECT_BAD(sk_opt_shard_groups(&l, SK_F32, &h, 0, g, &ng, mg, &nm, 1, &e), &e, "do not fit in 1");
}

/* ---- sk_hsdp_parse ------------------------------------------------------------------------------ */

static sk_hsdp parsed(const char *text) {
  sk_hsdp h;
  sk_error e = {SK_OK, ""};
  memset(&h, 0x5A, sizeof h);
  cr_assert_eq(sk_hsdp_parse(text, &h, &e), SK_OK, "\"%s\": %s", text, e.msg);
  cr_expect(h.enabled, "\"%s\" enables optimizer parallel", text);
  return h;
}

Test(opt_shard, parse_forms) {
  sk_hsdp h = parsed("");
  cr_expect(h.shard_size == -1 && h.threshold_kb == 64 && h.level == SK_HSDP_LEVEL1, "\"\" is hsdp()");
  h = parsed("8");
  cr_expect(h.shard_size == 8 && h.threshold_kb == 64 && h.level == SK_HSDP_LEVEL1);
  h = parsed("-1,0");
  cr_expect(h.shard_size == -1 && h.threshold_kb == 0 && h.level == SK_HSDP_LEVEL1);
  h = parsed(",,level3");
  cr_expect(h.shard_size == -1 && h.threshold_kb == 64 && h.level == SK_HSDP_LEVEL3);
  h = parsed("2,64,level2");
  cr_expect(h.shard_size == 2 && h.threshold_kb == 64 && h.level == SK_HSDP_LEVEL2);
  h = parsed(",128");
  cr_expect(h.shard_size == -1 && h.threshold_kb == 128);
  h = parsed("4,");
  cr_expect(h.shard_size == 4 && h.threshold_kb == 64);
}

Test(opt_shard, parse_bad_forms) {
  sk_hsdp h = SK_HSDP_DEFAULTS, before;
  h.shard_size = 3;
  before = h;
  sk_error e;
  EXPECT_BAD(sk_hsdp_parse("x", &h, &e), &e, "shard_size 'x' is not an integer");
  EXPECT_BAD(sk_hsdp_parse("1,y", &h, &e), &e, "threshold 'y' is not an integer");
  EXPECT_BAD(sk_hsdp_parse("1,2,3,4", &h, &e), &e, "hsdp:");
  EXPECT_BAD(sk_hsdp_parse("1,2,level1,4", &h, &e), &e, "at most three parts");
  EXPECT_BAD(sk_hsdp_parse("1,2,level9", &h, &e), &e, "optimizer_level must be 'level1', 'level2' or 'level3', got 'level9'");
  EXPECT_BAD(sk_hsdp_parse("0", &h, &e), &e, "shard_size must be -1 or a positive integer, got 0");
  EXPECT_BAD(sk_hsdp_parse("-2", &h, &e), &e, "got -2");
  EXPECT_BAD(sk_hsdp_parse("2,-1", &h, &e), &e, "threshold must be 0");
  EXPECT_BAD(sk_hsdp_parse("99999999999", &h, &e), &e, "not an integer");
  EXPECT_BAD(sk_hsdp_parse(NULL, &h, &e), &e, "NULL");
  EXPECT_BAD(sk_hsdp_parse("8", NULL, &e), &e, "NULL");
  cr_expect(memcmp(&h, &before, sizeof h) == 0, "a failed parse leaves *out as it was");
}

/* ---- property: over small random layouts, the chunks tile the slice and the groups cover G ---- */

/* Rank r's replica group by definition: the ranks holding the same slice, ascending. */
static int same_slice_ranks(const sk_layout *l, int rank, int *out) {
  sk_slice mine, other;
  int n = 0;
  cr_assert_eq(sk_layout_slice(l, rank, &mine, NULL), SK_OK);
  for (int r = 0; r < l->mesh.size; r++) {
    cr_assert_eq(sk_layout_slice(l, r, &other, NULL), SK_OK);
    bool same = true;
    for (int d = 0; d < l->ndims; d++) same = same && mine.start[d] == other.start[d] && mine.stop[d] == other.stop[d];
    if (same) out[n++] = r;
  }
  return n;
}

static unsigned rng_next(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (*s >> 16) & 0x7fff;
}

/* A random mesh of 1..3 axes of sizes 1..4, a 1..3-dim tensor, each dim unsplit or cut by one
   unused axis; dim sizes a multiple of their cut times 1, 2, 4 or 6 (so dim 0 sometimes does
   not divide by the shard count). */
static sk_layout random_layout(unsigned *seed) {
  static const char *const names[3] = {"a", "b", "c"};
  static const int mult[4] = {1, 2, 4, 6};
  int naxes = 1 + (int)(rng_next(seed) % 3), dims[3], ndims = 1 + (int)(rng_next(seed) % 3);
  char mesh[64] = "", map[64] = "";
  bool used[3] = {false, false, false};
  int64_t shape[3];
  for (int a = 0; a < naxes; a++) {
    dims[a] = 1 + (int)(rng_next(seed) % 4);
    snprintf(mesh + strlen(mesh), sizeof mesh - strlen(mesh), "%s%s=%d", a ? "," : "", names[a], dims[a]);
  }
  for (int d = 0; d < ndims; d++) {
    int a = (int)(rng_next(seed) % (unsigned)(naxes + 1)) - 1; /* -1: unsplit */
    if (a >= 0 && used[a]) a = -1;
    if (a >= 0) used[a] = true;
    shape[d] = (a >= 0 ? dims[a] : 1) * mult[rng_next(seed) % 4];
    snprintf(map + strlen(map), sizeof map - strlen(map), "%s%s", d ? "," : "", a >= 0 ? names[a] : "None");
  }
  return layout_of(mesh, map, ndims, shape);
}

/* One sharded rank: its AllGather group's chunks tile its model-parallel rows in group order,
   and the gather groups of its Mirror group's ranks partition its replica group. */
static void check_sharded_rank(const sk_layout *l, const sk_hsdp *h, int rank, const sk_opt_shard *os,
                               const int *g, int ng) {
  groups mine = groups_of(l, SK_F32, h, rank);
  sk_slice s;
  cr_assert_eq(sk_layout_slice(l, rank, &s, NULL), SK_OK);
  cr_assert_eq(mine.ngather, os->size);
  cr_assert_eq(mine.nmirror, os->mirror);
  cr_assert_eq(os->size * os->mirror, ng, "S * mirror = |G|");
  int64_t at = s.start[0];
  for (int i = 0; i < mine.ngather; i++) {
    sk_opt_shard peer = shard_of(l, SK_F32, h, mine.gather[i]);
    cr_assert_eq(peer.index, i, "rank %d: member %d of the gather group has index %d", rank, i, peer.index);
    cr_assert_eq(peer.rows_start, at, "rank %d: chunk %d starts at %lld, want %lld", rank, i, (long long)peer.rows_start,
                 (long long)at);
    at = peer.rows_stop;
  }
  cr_assert_eq(at, s.stop[0], "rank %d: the chunks end at %lld, the slice at %lld", rank, (long long)at, (long long)s.stop[0]);
  int seen[SK_MAX_DEVICES] = {0}, covered = 0;
  for (int j = 0; j < mine.nmirror; j++) {
    groups other = groups_of(l, SK_F32, h, mine.mirror[j]);
    cr_assert_eq(shard_of(l, SK_F32, h, mine.mirror[j]).index, os->index, "a Mirror peer keeps the same chunk");
    for (int i = 0; i < other.ngather; i++) {
      int r = other.gather[i];
      bool in_g = false;
      for (int k = 0; k < ng; k++) in_g = in_g || g[k] == r;
      cr_assert(in_g, "rank %d: rank %d is outside the replica group", rank, r);
      cr_assert(!seen[r], "rank %d: rank %d is in two gather groups", rank, r);
      seen[r] = 1, covered++;
    }
  }
  cr_assert_eq(covered, ng, "rank %d: Mirror x gather covers %d of %d replicas", rank, covered, ng);
}

Test(opt_shard, property_chunks_tile_the_slice_and_groups_cover_the_replicas, .timeout = 120) {
  static const int shard_sizes[] = {-1, 1, 2, 3, 4, 8};
  unsigned seed = 20240611u;
  int sharded = 0, whole = 0;
  for (int trial = 0; trial < 150; trial++) {
    sk_layout l = random_layout(&seed);
    for (size_t k = 0; k < sizeof shard_sizes / sizeof *shard_sizes; k++) {
      sk_hsdp h = hsdp_of(shard_sizes[k], 0);
      for (int rank = 0; rank < l.mesh.size; rank++) {
        int g[SK_MAX_DEVICES];
        int ng = same_slice_ranks(&l, rank, g);
        sk_opt_shard os = shard_of(&l, SK_F32, &h, rank);
        cr_assert_eq(os.replicas, ng, "rank %d: %d replicas, by the slices %d", rank, os.replicas, ng);
        if (os.size) {
          check_sharded_rank(&l, &h, rank, &os, g, ng);
          sharded++;
          continue;
        }
        whole++;
        cr_assert_neq(os.why[0], '\0', "a whole parameter says why");
        groups mine = groups_of(&l, SK_F32, &h, rank);
        cr_assert_eq(mine.ngather, 0);
        expect_ranks(mine.mirror, mine.nmirror, g, ng, "Mirror group of a whole parameter", rank);
      }
    }
  }
  cr_expect(sharded > 100 && whole > 100, "both cases exercised: %d sharded, %d whole", sharded, whole);
}
