/* test_fusion.c -- the fusion scheduler (sk_fusion.h):
   - bucket plans of every mode against hand-computed expectations: none, size (bytes, <= rule,
     an op above the threshold alone), auto (64 MiB), index ({20,35} -> 21, 15, rest; positions
     per kind), MindSpore accounting (elements, 1 MB = 262144, the opening op consumes nothing),
     and the key rules (kind, group, dtype, op, fusion id; ids never merged; SK_FUSION_NEVER alone);
   - the plan printer; the closed-form threshold (docs/cost-models.md section 4's numbers);
   - results bitwise identical to unfused blocking collectives on the threads backend, with
     tensors marked ready in random orders that differ per rank, packed and zero-copy, over two
     steps (re-arming);
   - errors: bad arguments, ready twice, never ready (wait returns, earlier buckets done), a
     failing bucket surfacing at wait with bucket and tensor named.
   Plan tests run on the test thread with a 1-device world; device threads record into per-rank
   slots and the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <string.h>

#include "shardkit.h"
#include "comm_test_util.h"

#define TO .timeout = 30

/* ---- plans on one device ---------------------------------------------------------------------- */

typedef struct solo {
  sk_world *w;
  sk_comm *c;
} solo;

static solo solo_open(void) {
  solo s;
  s.w = ct_world(1, CT_CFG_DEFAULT, 0);
  sk_error err;
  sk_result r = sk_comm_init_rank(s.w, 0, &s.c, &err);
  cr_assert_eq(r, SK_OK, "init_rank: %s", err.msg);
  return s;
}

static void solo_close(solo *s) {
  sk_comm_destroy(s->c, NULL);
  sk_world_destroy(s->w, NULL);
}

/* Plans never touch buffers: every op points at this, and a claimed-huge workspace is never
   written before a step runs. */
static unsigned char g_dummy[64];

static sk_fusion *mkf(const sk_fusion_desc *d) {
  sk_fusion_desc dd = *d;
  dd.workspace = g_dummy;
  dd.workspace_bytes = SIZE_MAX / 2;
  sk_fusion *f = NULL;
  sk_error err;
  sk_result r = sk_fusion_create(&dd, &f, &err);
  cr_assert_eq(r, SK_OK, "create: %s", err.msg);
  return f;
}

static int add_ar(sk_fusion *f, sk_comm *c, size_t count, sk_dtype dt, sk_redop op, int id) {
  int h = -1;
  sk_result r = sk_fusion_add_allreduce(f, c, g_dummy, g_dummy, count, dt, op, id, NULL, &h, NULL);
  cr_assert_eq(r, SK_OK, "add: %s", sk_fusion_error_message(f));
  return h;
}

/* Expected buckets as a string "0,1|2,3|4": handles by bucket, buckets in order. */
static void expect_plan(sk_fusion *f, const char *want, const char *label) {
  char got[4096] = "";
  int nb = sk_fusion_bucket_count(f);
  cr_assert(nb >= 0, "%s: planning failed: %s", label, sk_fusion_error_message(f));
  for (int b = 0; b < nb; b++) {
    sk_fusion_bucket_info bi;
    cr_assert_eq(sk_fusion_get_bucket(f, b, &bi, NULL), SK_OK);
    if (b) strcat(got, "|");
    for (int j = 0; j < bi.ntensors; j++) {
      char num[16];
      snprintf(num, sizeof num, "%s%d", j ? "," : "", bi.tensors[j]);
      strcat(got, num);
      cr_assert_eq(sk_fusion_bucket_of(f, bi.tensors[j]), b);
    }
  }
  cr_assert_str_eq(got, want, "%s: plan %s, expected %s", label, got, want);
}

Test(fusion_plan, none, TO) {
  solo s = solo_open();
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_NONE;
  sk_fusion *f = mkf(&d);
  for (int i = 0; i < 5; i++) add_ar(f, s.c, 10, SK_F32, SK_SUM, 0);
  expect_plan(f, "0|1|2|3|4", "none");
  sk_fusion_bucket_info bi;
  sk_fusion_get_bucket(f, 2, &bi, NULL);
  cr_expect_eq(bi.pack, SK_FUSION_DIRECT);
  cr_expect_eq(bi.count, 10);
  cr_expect_eq(bi.bytes, 40);
  sk_fusion_destroy(f);
  solo_close(&s);
}

Test(fusion_plan, size_bytes, TO) {
  solo s = solo_open();
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_SIZE;
  d.allreduce.threshold_bytes = 1600;
  sk_fusion *f = mkf(&d);
  /* bytes 400 400 1200 200 2400 40 40: [400+400=800] [1200+200=1400] [2400 > T alone] [40+40] */
  static const size_t counts[] = {100, 100, 300, 50, 600, 10, 10};
  for (int i = 0; i < 7; i++) add_ar(f, s.c, counts[i], SK_F32, SK_SUM, 0);
  expect_plan(f, "0,1|2,3|4|5,6", "size 1600 B");
  sk_fusion_bucket_info bi;
  sk_fusion_get_bucket(f, 1, &bi, NULL);
  cr_expect_eq(bi.bytes, 1400);
  cr_expect_eq(bi.count, 350);
  cr_expect_eq(bi.pack, SK_FUSION_PACKED);
  sk_fusion_destroy(f);

  /* exactly at the threshold joins (<=); MiB form; inf */
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_SIZE;
  d.allreduce.threshold_mb = 1.0 / 1024; /* 1024 B */
  f = mkf(&d);
  add_ar(f, s.c, 128, SK_F32, SK_SUM, 0);
  add_ar(f, s.c, 128, SK_F32, SK_SUM, 0); /* 1024: joins */
  add_ar(f, s.c, 1, SK_F32, SK_SUM, 0);   /* 1028: opens */
  expect_plan(f, "0,1|2", "size 1 KiB via threshold_mb");
  sk_fusion_destroy(f);

  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_SIZE;
  d.allreduce.threshold_bytes = SK_FUSION_INF;
  f = mkf(&d);
  for (int i = 0; i < 6; i++) add_ar(f, s.c, (size_t)1 << 20, SK_F32, SK_SUM, 0);
  expect_plan(f, "0,1,2,3,4,5", "size inf");
  sk_fusion_destroy(f);
  solo_close(&s);
}

Test(fusion_plan, auto_is_64mib, TO) {
  solo s = solo_open();
  sk_fusion_desc d;
  memset(&d, 0, sizeof d); /* zero = auto */
  sk_fusion *f = mkf(&d);
  /* 16 MiB each: four fill 64 MiB exactly, the fifth opens a new bucket */
  for (int i = 0; i < 6; i++) add_ar(f, s.c, (size_t)4 << 20, SK_F32, SK_SUM, 0);
  expect_plan(f, "0,1,2,3|4,5", "auto");
  char buf[512];
  int len = sk_fusion_plan_format(f, buf, sizeof buf, false);
  cr_expect(len > 0 && strstr(buf, "allreduce=auto(67108864 B)"), "plan header: %s", buf);
  sk_fusion_destroy(f);
  solo_close(&s);
}

Test(fusion_plan, index_20_35, TO) {
  solo s = solo_open();
  static const int idx[] = {20, 35};
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_INDEX;
  d.allreduce.indices = idx;
  d.allreduce.nindices = 2;
  d.allgather.mode = SK_FUSION_SIZE;
  d.allgather.threshold_bytes = SK_FUSION_INF;
  sk_fusion *f = mkf(&d);
  /* 50 AllReduces with an AllGather after every tenth: positions count AllReduces only */
  int ar[50], ag[5], k = 0;
  for (int i = 0; i < 50; i++) {
    ar[i] = add_ar(f, s.c, 3, SK_F32, SK_SUM, 0);
    if (i % 10 == 9) cr_assert_eq(sk_fusion_add_allgather(f, s.c, g_dummy, g_dummy, 2, SK_F32, 0, "ag", &ag[k++], NULL), SK_OK);
  }
  cr_assert_eq(sk_fusion_bucket_count(f), 4);
  int sizes[4] = {0, 0, 0, 0};
  for (int b = 0; b < 4; b++) {
    sk_fusion_bucket_info bi;
    sk_fusion_get_bucket(f, b, &bi, NULL);
    sizes[b] = bi.ntensors;
  }
  /* order by first op: AR [0..20] (handle 0), AG (handle 10), AR [21..35], AR [36..49] */
  cr_expect(sizes[0] == 21 && sizes[1] == 5 && sizes[2] == 15 && sizes[3] == 14, "sizes %d %d %d %d", sizes[0], sizes[1],
            sizes[2], sizes[3]);
  cr_expect_eq(sk_fusion_bucket_of(f, ar[20]), 0);
  cr_expect_eq(sk_fusion_bucket_of(f, ar[21]), 2);
  cr_expect_eq(sk_fusion_bucket_of(f, ar[35]), 2);
  cr_expect_eq(sk_fusion_bucket_of(f, ar[36]), 3);
  cr_expect_eq(sk_fusion_bucket_of(f, ag[0]), 1);
  sk_fusion_destroy(f);

  /* indices past the end, and never-fuse ops keep their position */
  static const int idx2[] = {1, 100};
  d.allreduce.indices = idx2;
  f = mkf(&d);
  add_ar(f, s.c, 3, SK_F32, SK_SUM, 0);
  add_ar(f, s.c, 3, SK_F32, SK_SUM, SK_FUSION_NEVER);
  add_ar(f, s.c, 3, SK_F32, SK_SUM, 0);
  add_ar(f, s.c, 3, SK_F32, SK_SUM, 0);
  expect_plan(f, "0|1|2,3", "index {1,100} with a never-fuse op at position 1");
  sk_fusion_destroy(f);
  solo_close(&s);
}

Test(fusion_plan, mindspore_accounting, TO) {
  solo s = solo_open();
  static const size_t el[] = {200000, 100000, 50000, 300000, 10000, 262143, 1};
  /* T = 262144 elements:
     200000 first: joins, budget 62144 | 100000 !< 62144: opens seg 1, budget T (not consumed) |
     50000 < T: budget 212144 | 300000: opens seg 2 | 10000: budget 252144 | 262143 !< 252144: opens
     seg 3 | 1 < T: joins */
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_SIZE;
  d.allreduce.threshold_mb = 1;
  d.allreduce.mindspore_accounting = true;
  sk_fusion *f = mkf(&d);
  for (int i = 0; i < 7; i++) add_ar(f, s.c, el[i], SK_F32, SK_SUM, 0);
  expect_plan(f, "0|1,2|3,4|5,6", "mindspore 1 MB");
  sk_fusion_destroy(f);
  /* the byte rule at 1 MiB differs: 800000 | 400000+200000 | 1200000 | 40000 | 1048572+4 */
  d.allreduce.mindspore_accounting = false;
  f = mkf(&d);
  for (int i = 0; i < 7; i++) add_ar(f, s.c, el[i], SK_F32, SK_SUM, 0);
  expect_plan(f, "0|1,2|3|4|5,6", "bytes 1 MiB");
  sk_fusion_destroy(f);
  /* elements, not bytes: f64 ops of 100000 elements count 100000 each */
  d.allreduce.mindspore_accounting = true;
  f = mkf(&d);
  for (int i = 0; i < 4; i++) add_ar(f, s.c, 100000, SK_F64, SK_SUM, 0);
  /* 100000 first (budget 162144), 100000 < : 62144, 100000 !<: opens, 100000 < T: joins */
  expect_plan(f, "0,1|2,3", "mindspore f64 elements");
  sk_fusion_destroy(f);
  /* auto + mindspore: 64 * 262144 elements; the counter runs over every key, segments then split
     by key: f32 and f16 interleaved share segment boundaries */
  memset(&d, 0, sizeof d);
  d.allreduce.mindspore_accounting = true;
  f = mkf(&d);
  for (int i = 0; i < 6; i++) add_ar(f, s.c, (size_t)6 << 20, i % 2 ? SK_F16 : SK_F32, SK_SUM, 0);
  /* T = 16777216: 6291456 first (budget 10485760), 6291456 < : 4194304, then opens seg 1 (op 2),
     op 3 joins (budget 10485760), op 4 joins (4194304), op 5 opens seg 2 */
  expect_plan(f, "0|1|2,4|3|5", "mindspore auto, f32 and f16 interleaved");
  sk_fusion_destroy(f);
  solo_close(&s);
}

Test(fusion_plan, keys_and_ids, TO) {
  solo s = solo_open();
  sk_comm *c2 = NULL;
  cr_assert_eq(sk_comm_split(s.c, 0, 0, &c2, NULL), SK_OK);
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_SIZE;
  d.allreduce.threshold_bytes = SK_FUSION_INF;
  sk_fusion *f = mkf(&d);
  add_ar(f, s.c, 4, SK_F32, SK_SUM, 0);               /* 0: id 1 */
  add_ar(f, s.c, 4, SK_F32, SK_SUM, 1);               /* 1: id 1 (0 and 1 are the same id) */
  add_ar(f, s.c, 4, SK_F32, SK_SUM, 2);               /* 2: id 2 */
  add_ar(f, s.c, 4, SK_F32, SK_SUM, SK_FUSION_NEVER); /* 3: alone */
  add_ar(f, s.c, 4, SK_F32, SK_SUM, SK_FUSION_NEVER); /* 4: alone */
  add_ar(f, s.c, 4, SK_F16, SK_SUM, 0);               /* 5: other dtype */
  add_ar(f, s.c, 4, SK_F32, SK_MAX, 0);               /* 6: other op */
  add_ar(f, c2, 4, SK_F32, SK_SUM, 0);                /* 7: other group */
  add_ar(f, s.c, 4, SK_F32, SK_SUM, 2);               /* 8: id 2 */
  add_ar(f, s.c, 4, SK_F32, SK_SUM, 0);               /* 9: id 1 */
  add_ar(f, c2, 4, SK_F32, SK_SUM, 0);                /* 10: group 2 */
  add_ar(f, s.c, 4, SK_F16, SK_SUM, 0);               /* 11: f16 */
  int hg = -1, hr = -1;
  cr_assert_eq(sk_fusion_add_allgather(f, s.c, g_dummy, g_dummy, 4, SK_F32, 0, "g", &hg, NULL), SK_OK);       /* 12 */
  cr_assert_eq(sk_fusion_add_reduce_scatter(f, s.c, g_dummy, g_dummy, 4, SK_F32, SK_SUM, 0, "r", &hr, NULL), SK_OK); /* 13 */
  cr_expect_eq(hg, 12);
  cr_expect_eq(hr, 13);
  /* AllGather / ReduceScatter default to auto: alone here, and never merged with AllReduces */
  expect_plan(f, "0,1,9|2,8|3|4|5,11|6|7,10|12|13", "keys and ids");
  sk_fusion_bucket_info bi;
  sk_fusion_get_bucket(f, 1, &bi, NULL);
  cr_expect_eq(bi.fusion_id, 2);
  sk_fusion_get_bucket(f, 2, &bi, NULL);
  cr_expect_eq(bi.fusion_id, SK_FUSION_NEVER);
  sk_fusion_get_bucket(f, 0, &bi, NULL);
  cr_expect_eq(bi.fusion_id, 1);
  sk_fusion_destroy(f);

  /* ids never merge in the other modes either */
  static const int idx[] = {10};
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_INDEX;
  d.allreduce.indices = idx;
  d.allreduce.nindices = 1;
  f = mkf(&d);
  for (int i = 0; i < 4; i++) add_ar(f, s.c, 4, SK_F32, SK_SUM, i % 2 ? 7 : 0);
  expect_plan(f, "0,2|1,3", "index with two ids");
  sk_fusion_destroy(f);
  memset(&d, 0, sizeof d);
  d.allreduce.mindspore_accounting = true;
  f = mkf(&d);
  for (int i = 0; i < 4; i++) add_ar(f, s.c, 4, SK_F32, SK_SUM, i % 2 ? 7 : 0);
  expect_plan(f, "0,2|1,3", "mindspore auto with two ids");
  sk_fusion_destroy(f);
  sk_comm_destroy(c2, NULL);
  solo_close(&s);
}

Test(fusion_plan, format, TO) {
  solo s = solo_open();
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = SK_FUSION_SIZE;
  d.allreduce.threshold_bytes = 100;
  sk_fusion *f = mkf(&d);
  int h;
  cr_assert_eq(sk_fusion_add_allreduce(f, s.c, g_dummy, g_dummy, 10, SK_F32, SK_SUM, 0, "conv1.weight", &h, NULL), SK_OK);
  cr_assert_eq(sk_fusion_add_allreduce(f, s.c, g_dummy, g_dummy, 10, SK_F32, SK_SUM, 0, "conv1.bias", &h, NULL), SK_OK);
  cr_assert_eq(sk_fusion_add_allreduce(f, s.c, g_dummy, g_dummy, 30, SK_F32, SK_SUM, 0, NULL, &h, NULL), SK_OK);
  char buf[2048];
  int len = sk_fusion_plan_format(f, buf, sizeof buf, true);
  cr_assert(len > 0 && (size_t)len == strlen(buf), "len %d vs %zu", len, strlen(buf));
  cr_expect(strstr(buf, "3 ops -> 2 buckets"), "%s", buf);
  cr_expect(strstr(buf, "bucket 0: allreduce f32 sum id 1 group 0 (size 1): 2 tensors, 80 B, packed, 'conv1.weight' .. 'conv1.bias'"),
            "%s", buf);
  cr_expect(strstr(buf, "bucket 1: allreduce f32 sum id 1 group 0 (size 1): 1 tensor, 120 B, direct, '#2'"), "%s", buf);
  cr_expect(strstr(buf, "  [1] 'conv1.bias' count 10, 40 B, offset 10"), "%s", buf);
  /* snprintf semantics: a short buffer is truncated and terminated; the length is still full */
  char small[16];
  memset(small, 'x', sizeof small);
  int len2 = sk_fusion_plan_format(f, small, sizeof small, true);
  cr_expect_eq(len2, len);
  cr_expect_eq(strlen(small), sizeof small - 1);
  cr_expect_eq(sk_fusion_plan_format(f, NULL, 0, true), len);
  size_t ws = 0;
  cr_expect_eq(sk_fusion_workspace_bytes(f, &ws, NULL), SK_OK);
  cr_expect_eq(ws, 128); /* one packed bucket of 80 B, 64-aligned */
  sk_fusion_destroy(f);
  solo_close(&s);
}

Test(fusion_plan, pick_threshold, TO) {
  /* docs/cost-models.md section 4: p = 8, alpha = 10 us -> a = 140 us; S = 100 MB, T_b = 100 ms */
  double b1 = sk_fusion_pick_threshold(140, 2 * 7 / 8.0 / 10e3, 1e8, 1e5); /* 10 GB/s */
  cr_expect(b1 > 169.6e3 && b1 < 169.8e3, "compute-bound b* = %g", b1);
  double b2 = sk_fusion_pick_threshold(140, 2 * 7 / 8.0 / 1e3, 1e8, 1e5); /* 1 GB/s */
  cr_expect(b2 > 3.73e6 && b2 < 3.75e6, "comm-bound b* = %g", b2);
  cr_expect_eq(sk_fusion_pick_threshold(140, 1e-4, 1e6, 0), 1e6); /* no compute: one bucket */
  cr_expect_eq(sk_fusion_pick_threshold(1e9, 0, 1e6, 10), 1e6);   /* clamped */
}

Test(fusion_errors, bad_arguments, TO) {
  solo s = solo_open();
  sk_fusion *f = NULL;
  sk_error err;
  memset(&err, 0, sizeof err);
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  d.allreduce.mode = (sk_fusion_mode)42;
  cr_expect_eq(sk_fusion_create(&d, &f, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(err.msg, "desc.allreduce.mode"), "%s", err.msg);
  memset(&d, 0, sizeof d);
  static const int bad_idx[] = {5, 5};
  d.reduce_scatter.mode = SK_FUSION_INDEX;
  d.reduce_scatter.indices = bad_idx;
  d.reduce_scatter.nindices = 2;
  cr_expect_eq(sk_fusion_create(&d, &f, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(err.msg, "desc.reduce_scatter.indices[1]"), "%s", err.msg);
  memset(&d, 0, sizeof d);
  d.allgather.mode = SK_FUSION_SIZE;
  d.allgather.threshold_mb = -1;
  cr_expect_eq(sk_fusion_create(&d, &f, &err), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(err.msg, "desc.allgather.threshold_mb"), "%s", err.msg);
  cr_expect_eq(sk_fusion_create(NULL, NULL, &err), SK_ERR_INVALID_ARGUMENT);

  cr_assert_eq(sk_fusion_create(NULL, &f, &err), SK_OK); /* NULL desc = defaults */
  int h = 7;
  sk_fusion_op op;
  memset(&op, 0, sizeof op);
  op.comm = s.c, op.send = g_dummy, op.recv = g_dummy, op.count = 1, op.name = "w";
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_ARGUMENT); /* kind unset */
  cr_expect(strstr(sk_fusion_error_message(f), "kind"), "%s", sk_fusion_error_message(f));
  cr_expect_eq(h, -1);
  op.kind = SK_COLL_BROADCAST;
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_ARGUMENT);
  op.kind = SK_COLL_ALLREDUCE;
  op.comm = NULL;
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_fusion_error_message(f), "comm is NULL"), "%s", sk_fusion_error_message(f));
  op.comm = s.c;
  op.dtype = (sk_dtype)99;
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_fusion_error_message(f), "dtype"), "%s", sk_fusion_error_message(f));
  op.dtype = SK_F32;
  op.op = (sk_redop)77;
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_fusion_error_message(f), "reduce op"), "%s", sk_fusion_error_message(f));
  op.op = SK_SUM;
  op.fusion_id = -2;
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_fusion_error_message(f), "fusion_id -2"), "%s", sk_fusion_error_message(f));
  op.fusion_id = 0;
  op.send = NULL;
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_fusion_error_message(f), "send buffer is NULL"), "%s", sk_fusion_error_message(f));
  op.send = g_dummy;
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_OK);
  cr_expect_eq(h, 0);
  cr_expect_eq(sk_fusion_add(f, NULL, &h, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_fusion_ready(f, 1, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_fusion_error_message(f), "handle 1 out of range"), "%s", sk_fusion_error_message(f));
  cr_expect_eq(sk_fusion_add(f, &op, &h, NULL), SK_ERR_INVALID_USAGE); /* planned by the ready above */
  cr_expect_eq(sk_fusion_get_bucket(f, 5, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_fusion_wait(f, NULL), SK_ERR_INVALID_USAGE); /* tensor 'w' never ready */
  sk_fusion_destroy(f);
  /* a workspace too small */
  memset(&d, 0, sizeof d);
  d.workspace = g_dummy;
  d.workspace_bytes = 8;
  cr_assert_eq(sk_fusion_create(&d, &f, &err), SK_OK);
  sk_fusion_add_allreduce(f, s.c, g_dummy, g_dummy + 8, 4, SK_F32, SK_SUM, 0, "a", NULL, NULL);
  sk_fusion_add_allreduce(f, s.c, g_dummy, g_dummy + 8, 4, SK_F32, SK_SUM, 0, "b", NULL, NULL);
  cr_expect_eq(sk_fusion_plan(f, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(sk_fusion_error_message(f), "workspace_bytes 8"), "%s", sk_fusion_error_message(f));
  cr_expect_eq(sk_fusion_bucket_count(f), -1);
  sk_fusion_destroy(f);
  sk_fusion_destroy(NULL);
  solo_close(&s);
}

/* ---- runs on the threads backend ------------------------------------------------------------- */

#define RT_MAXT 48

typedef struct rt_tensor {
  sk_coll_kind kind;
  sk_dtype dt;
  sk_redop op;
  size_t count;
  int id;
  unsigned char *send, *recv, *ref;
  size_t selems, sbytes, rbytes; /* send elements; send and receive bytes */
  int h;
} rt_tensor;

typedef struct rt_arg {
  ct_slot *slots;
  int mode; /* 0 none, 1 size 1 KiB, 2 inf, 3 index, 4 zero-copy flat AllReduce, 5 mindspore 1 MB */
  int steps;
  bool missing;   /* every rank leaves one tensor of bucket 1 unready */
  bool ready_twice;
  bool mismatch;  /* rank 0 registers a different count for one tensor */
} rt_arg;

static uint64_t rt_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void rt_shuffle(int *p, int n, uint64_t seed) {
  for (int i = 0; i < n; i++) p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rt_rand(&seed) % (uint64_t)(i + 1));
    int t = p[i];
    p[i] = p[j], p[j] = t;
  }
}

/* The op mix every rank registers (same on every rank). */
static int rt_layout(rt_tensor *t, bool all_allreduce) {
  static const size_t counts[] = {1, 0, 37, 300, 5, 1000, 64, 3, 257, 2, 700, 11, 128, 9, 4099, 6, 90, 33, 1, 500};
  static const sk_dtype dts[] = {SK_F32, SK_F32, SK_F32, SK_F16, SK_I32, SK_F32, SK_BF16, SK_F64};
  static const sk_redop ops[] = {SK_SUM, SK_SUM, SK_AVG, SK_SUM, SK_MAX, SK_SUM, SK_MIN};
  int n = 0;
  for (int i = 0; i < 20; i++, n++) {
    memset(&t[n], 0, sizeof t[n]);
    t[n].kind = SK_COLL_ALLREDUCE;
    t[n].dt = all_allreduce ? SK_F32 : dts[i % 8];
    t[n].op = all_allreduce ? SK_SUM : ops[i % 7];
    t[n].count = counts[i];
    t[n].id = all_allreduce ? 0 : (i == 7 ? SK_FUSION_NEVER : i % 5 == 4 ? 3 : 0);
    if (!all_allreduce && i % 4 == 1) {
      n++;
      memset(&t[n], 0, sizeof t[n]);
      t[n].kind = (i / 4) % 2 ? SK_COLL_ALLGATHER : SK_COLL_REDUCE_SCATTER;
      t[n].dt = i % 3 ? SK_F32 : SK_I32;
      t[n].op = SK_SUM;
      t[n].count = counts[(i + 3) % 20] + 1;
      t[n].id = 0;
    }
  }
  return n;
}

static sk_result rt_device(sk_comm *c, void *argp) {
  rt_arg *a = (rt_arg *)argp;
  int rank = sk_comm_rank(c), N = sk_comm_size(c);
  ct_slot *s = &a->slots[rank];
  rt_tensor t[RT_MAXT];
  bool flat = a->mode == 4;
  int nt = rt_layout(t, flat);
  sk_fusion_desc d;
  memset(&d, 0, sizeof d);
  static const int idx[] = {3, 9, 10};
  sk_fusion_config cfg;
  memset(&cfg, 0, sizeof cfg);
  switch (a->mode) {
    case 0: cfg.mode = SK_FUSION_NONE; break;
    case 1: cfg.mode = SK_FUSION_SIZE, cfg.threshold_bytes = 1024; break;
    case 2: case 4: cfg.mode = SK_FUSION_SIZE, cfg.threshold_bytes = SK_FUSION_INF; break;
    case 3: cfg.mode = SK_FUSION_INDEX, cfg.indices = idx, cfg.nindices = 3; break;
    default: cfg.mode = SK_FUSION_SIZE, cfg.threshold_mb = 0.001, cfg.mindspore_accounting = true; break;
  }
  d.allreduce = d.allgather = d.reduce_scatter = cfg;
  if (a->mode == 3) d.allgather.mode = d.reduce_scatter.mode = SK_FUSION_AUTO;
  sk_fusion *f = NULL;
  sk_error err;
  sk_result r = sk_fusion_create(&d, &f, &err);
  if (!ct_rc(s, r, c, "create")) return r;
  /* buffers; the flat case puts every tensor in one in-place buffer, in order */
  size_t flat_elems = 0;
  for (int i = 0; i < nt; i++) flat_elems += t[i].count;
  unsigned char *flatbuf = flat ? ct_buf(flat_elems * 4) : NULL;
  size_t off = 0;
  for (int i = 0; i < nt; i++) {
    size_t es = sk_dtype_size(t[i].dt), n = (size_t)N;
    t[i].selems = t[i].count * (t[i].kind == SK_COLL_REDUCE_SCATTER ? n : 1);
    t[i].sbytes = t[i].selems * es;
    t[i].rbytes = t[i].count * es * (t[i].kind == SK_COLL_ALLGATHER ? n : 1);
    if (flat) {
      t[i].send = t[i].recv = flatbuf + off;
      off += t[i].sbytes;
    } else {
      t[i].send = ct_buf(t[i].sbytes);
      t[i].recv = ct_buf(t[i].rbytes);
    }
    t[i].ref = ct_buf(t[i].rbytes);
    size_t count = t[i].count;
    if (a->mismatch && rank == 0 && i == 5) count--;
    sk_fusion_op op;
    memset(&op, 0, sizeof op);
    op.kind = t[i].kind, op.comm = c, op.send = t[i].send, op.recv = t[i].recv, op.count = count;
    op.dtype = t[i].dt, op.op = t[i].op, op.fusion_id = t[i].id;
    char name[32];
    snprintf(name, sizeof name, "t%d", i);
    op.name = name;
    r = sk_fusion_add(f, &op, &t[i].h, NULL);
    if (!ct_check(s, r == SK_OK && t[i].h == i, "add %d: %s: %s", i, sk_result_name(r), sk_fusion_error_message(f))) goto out;
  }
  r = sk_fusion_plan(f, NULL);
  if (!ct_check(s, r == SK_OK, "plan: %s", sk_fusion_error_message(f))) goto out;
  if (flat) {
    sk_fusion_bucket_info bi;
    sk_fusion_get_bucket(f, 0, &bi, NULL);
    ct_check(s, sk_fusion_bucket_count(f) == 1 && bi.pack == SK_FUSION_ZERO_COPY, "flat: %d buckets, pack %d",
             sk_fusion_bucket_count(f), (int)bi.pack);
  }
  int missing = -1;
  if (a->missing) { /* the first tensor of bucket 1 */
    sk_fusion_bucket_info bi;
    sk_fusion_get_bucket(f, 1, &bi, NULL);
    missing = bi.tensors[0];
  }
  for (int step = 0; step < a->steps; step++) {
    uint64_t seed = 1000u + (uint64_t)step * 17u + (uint64_t)a->mode;
    for (int i = 0; i < nt; i++) {
      int pat = t[i].kind == SK_COLL_ALLGATHER ? CT_PAT_MOVE : ct_pat_for(t[i].op);
      ct_fill(t[i].dt, pat, seed + (uint64_t)i, rank, 0, t[i].send, t[i].selems);
      if (!flat) memset(t[i].recv, CT_JUNK_BYTE, t[i].rbytes);
    }
    /* references: the same ops unfused and blocking (flat: from a copy, as they are in place) */
    for (int i = 0; i < nt && !a->mismatch; i++) {
      unsigned char *in = t[i].send;
      unsigned char *tmp = NULL;
      if (flat) {
        tmp = ct_buf(t[i].sbytes);
        if (t[i].sbytes) memcpy(tmp, t[i].send, t[i].sbytes);
        in = tmp;
      }
      if (t[i].kind == SK_COLL_ALLREDUCE) r = sk_allreduce(c, in, t[i].ref, t[i].count, t[i].dt, t[i].op, NULL);
      else if (t[i].kind == SK_COLL_ALLGATHER) r = sk_allgather(c, in, t[i].ref, t[i].count, t[i].dt, NULL);
      else r = sk_reduce_scatter(c, in, t[i].ref, t[i].count, t[i].dt, t[i].op, NULL);
      free(tmp);
      if (!ct_rc(s, r, c, "reference")) goto out;
    }
    int perm[RT_MAXT];
    rt_shuffle(perm, nt, 77u + (uint64_t)rank * 1000003u + (uint64_t)step);
    for (int k = 0; k < nt; k++) {
      if (perm[k] == missing) continue;
      r = sk_fusion_ready(f, perm[k], NULL);
      if (!ct_check(s, r == SK_OK, "ready %d: %s: %s", perm[k], sk_result_name(r), sk_fusion_error_message(f))) goto out;
      if (a->ready_twice && k == 3) {
        r = sk_fusion_ready(f, perm[k], NULL);
        char want[64];
        snprintf(want, sizeof want, "tensor 't%d'", perm[k]);
        ct_check(s, r == SK_ERR_INVALID_USAGE && strstr(sk_fusion_error_message(f), want) &&
                        strstr(sk_fusion_error_message(f), "already marked ready"),
                 "ready twice: %s: %s", sk_result_name(r), sk_fusion_error_message(f));
      }
    }
    r = sk_fusion_wait(f, NULL);
    if (a->missing) {
      char want[64];
      snprintf(want, sizeof want, "tensor 't%d'", missing);
      ct_check(s, r == SK_ERR_INVALID_USAGE && strstr(sk_fusion_error_message(f), want) &&
                      strstr(sk_fusion_error_message(f), "never marked ready"),
               "missing: %s: %s", sk_result_name(r), sk_fusion_error_message(f));
      /* bucket 0 ran and was unpacked */
      sk_fusion_bucket_info bi;
      sk_fusion_get_bucket(f, 0, &bi, NULL);
      for (int j = 0; j < bi.ntensors; j++) {
        int i = bi.tensors[j];
        ct_check(s, t[i].rbytes == 0 || memcmp(t[i].recv, t[i].ref, t[i].rbytes) == 0, "missing: bucket 0 tensor %d wrong", i);
      }
      continue;
    }
    if (a->mismatch) {
      ct_check(s, r == SK_ERR_MISMATCH && strstr(sk_fusion_error_message(f), "bucket") &&
                      strstr(sk_fusion_error_message(f), "'t5'"),
               "mismatch: %s: %s", sk_result_name(r), sk_fusion_error_message(f));
      continue;
    }
    if (!ct_check(s, r == SK_OK, "wait: %s: %s", sk_result_name(r), sk_fusion_error_message(f))) goto out;
    for (int i = 0; i < nt; i++) {
      bool same = t[i].rbytes == 0 || memcmp(t[i].recv, t[i].ref, t[i].rbytes) == 0;
      ct_check(s, same, "mode %d step %d rank %d: tensor %d (%s %s %s count %zu, bucket %d) differs from the unfused result",
               a->mode, step, rank, i, sk_coll_kind_name(t[i].kind), sk_dtype_name(t[i].dt), sk_redop_name(t[i].op),
               t[i].count, sk_fusion_bucket_of(f, i));
    }
  }
out:
  sk_fusion_destroy(f);
  for (int i = 0; i < nt; i++) {
    if (!flat) free(t[i].send), free(t[i].recv);
    free(t[i].ref);
  }
  free(flatbuf);
  s->ran = 1;
  return SK_OK;
}

static void rt_run(int n, rt_arg *a, const char *label) {
  a->slots = ct_slots_new(n);
  ct_run(n, CT_CFG_DEFAULT, rt_device, a, label);
  ct_expect_slots(a->slots, n, label);
  free(a->slots);
}

Test(fusion_run, same_as_unfused, .timeout = 60) {
  static const int ns[] = {8, 3, 1};
  for (int k = 0; k < 3; k++)
    for (int mode = 0; mode <= 5; mode++) {
      rt_arg a;
      memset(&a, 0, sizeof a);
      a.mode = mode, a.steps = 2;
      char label[64];
      snprintf(label, sizeof label, "n=%d mode=%d", ns[k], mode);
      rt_run(ns[k], &a, label);
    }
}

Test(fusion_errors, ready_twice, TO) {
  rt_arg a;
  memset(&a, 0, sizeof a);
  a.mode = 1, a.steps = 1, a.ready_twice = true;
  rt_run(4, &a, "ready twice");
}

Test(fusion_errors, never_ready_then_rearm, TO) {
  rt_arg a;
  memset(&a, 0, sizeof a);
  a.mode = 1, a.steps = 1, a.missing = true;
  uint64_t t0 = sk_now_ns();
  rt_run(4, &a, "never ready");
  cr_expect(ct_ms_since(t0) < 5000, "took %.0f ms", ct_ms_since(t0));
}

Test(fusion_errors, failing_bucket_named_at_wait, TO) {
  rt_arg a;
  memset(&a, 0, sizeof a);
  a.mode = 0, a.steps = 1, a.mismatch = true;
  rt_run(3, &a, "mismatch");
}

/* sk_fusion_plan_keys, the compiler's planner: the same buckets as a scheduler given the same
   ops on one communicator, over every mode; ids that differ never share a bucket. */
static void plan_keys_string(const sk_fusion_desc *d, const sk_fusion_key_op *ops, int n, char *got, size_t cap) {
  int bucket[32], nb = -1;
  sk_error err;
  cr_assert_eq(sk_fusion_plan_keys(d, ops, n, bucket, &nb, &err), SK_OK, "plan_keys: %s", err.msg);
  got[0] = 0;
  for (int b = 0; b < nb; b++)
    for (int i = 0, first = 1; i < n; i++)
      if (bucket[i] == b) {
        size_t len = strlen(got);
        snprintf(got + len, cap - len, "%s%d", first ? (b ? "|" : "") : ",", i);
        first = 0;
      }
}

Test(fusion_plan, plan_keys_equal_the_schedulers, TO) {
  solo s = solo_open();
  static const size_t el[] = {200000, 100000, 50000, 300000, 10000, 262143, 1, 7};
  static const int ids[] = {0, 0, 2, 0, SK_FUSION_NEVER, 0, 2, 0};
  static const int split[] = {2, 5};
  sk_fusion_key_op ops[8];
  sk_fusion_desc d[4];
  memset(ops, 0, sizeof ops), memset(d, 0, sizeof d);
  d[0].allreduce.mode = SK_FUSION_SIZE, d[0].allreduce.threshold_mb = 1, d[0].allreduce.mindspore_accounting = true;
  d[1].allreduce.mode = SK_FUSION_SIZE, d[1].allreduce.threshold_mb = 1;
  d[2].allreduce.mode = SK_FUSION_INDEX, d[2].allreduce.indices = split, d[2].allreduce.nindices = 2;
  d[3].allreduce.mode = SK_FUSION_NONE;
  for (int i = 0; i < 8; i++) {
    ops[i].kind = i % 4 == 3 ? SK_COLL_ALLGATHER : SK_COLL_ALLREDUCE, ops[i].group = 0, ops[i].group_size = 1;
    ops[i].count = el[i], ops[i].dtype = SK_F32, ops[i].op = SK_SUM, ops[i].fusion_id = ids[i];
  }
  for (int c = 0; c < 4; c++) {
    sk_fusion *f = mkf(&d[c]);
    for (int i = 0; i < 8; i++) {
      sk_fusion_op o;
      memset(&o, 0, sizeof o);
      o.kind = ops[i].kind, o.comm = s.c, o.send = g_dummy, o.recv = g_dummy, o.count = el[i], o.dtype = SK_F32;
      o.op = SK_SUM, o.fusion_id = ids[i];
      cr_assert_eq(sk_fusion_add(f, &o, NULL, NULL), SK_OK, "%s", sk_fusion_error_message(f));
    }
    char want[256] = "", got[256];
    for (int b = 0, nb = sk_fusion_bucket_count(f); b < nb; b++) {
      sk_fusion_bucket_info bi;
      cr_assert_eq(sk_fusion_get_bucket(f, b, &bi, NULL), SK_OK);
      for (int j = 0; j < bi.ntensors; j++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", j ? "," : (b ? "|" : ""), bi.tensors[j]);
    }
    plan_keys_string(&d[c], ops, 8, got, sizeof got);
    cr_assert_str_eq(got, want, "config %d: plan_keys %s, the scheduler %s", c, got, want);
    sk_fusion_destroy(f);
  }
  for (int i = 0; i < 8; i++) ops[i].group = i % 2; /* two groups: never one bucket */
  char got[256];
  d[0].allreduce.mode = SK_FUSION_SIZE, d[0].allreduce.threshold_bytes = SK_FUSION_INF, d[0].allreduce.mindspore_accounting = false;
  plan_keys_string(&d[0], ops, 8, got, sizeof got);
  cr_assert_str_eq(got, "0|1,5|2,6|3,7|4", "two groups, ids 0 / 2 / never, one bucket a key: %s", got);
  ops[3].group_size = 0;
  sk_error err;
  int bucket[8];
  cr_assert_eq(sk_fusion_plan_keys(&d[0], ops, 8, bucket, NULL, &err), SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(err.msg, "op 3") && strstr(err.msg, "group_size 0"), "the message names the op: %s", err.msg);
  solo_close(&s);
}
