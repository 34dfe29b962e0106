/* test_comm_backend.c -- the backend contract (sk_backend.h) from a backend author's side, the
   one way to read failures (sk_last_error) and the logger's stable ids.

   A wrapping backend reuses the threads backend's hooks but declares no shared address space
   and copies through its own counting hook: redistribution must then take its message path and
   copy through the backend, never memcpy. Device threads record; the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "shardkit.h"
#include "comm_test_util.h"

/* ---- a wrapping backend ----------------------------------------------------------------------- */

static atomic_int copies, fail_copies, destroy_result;

static sk_result counting_copy(sk_comm *c, void *dst, const void *src, size_t bytes) {
  atomic_fetch_add(&copies, 1);
  if (atomic_load(&fail_copies)) return sk_comm_set_error(c, SK_ERR_BACKEND, "copy: the device refused");
  memcpy(dst, src, bytes);
  return SK_OK;
}

static sk_result wrapped_destroy(sk_world *w, void *state) {
  sk_result r = sk_threads_backend()->world_destroy(w, state);
  return r != SK_OK ? r : (sk_result)atomic_load(&destroy_result);
}

static sk_backend wrapped(void) {
  sk_backend b = *sk_threads_backend();
  b.name = "wrapped-threads";
  b.copy = counting_copy;
  b.world_destroy = wrapped_destroy;
  b.peer_access = NULL, b.shared_address_space = 0; /* as a device-memory backend */
  return b;
}

static sk_world *wrapped_world(const sk_backend *b, int n, uint32_t timeout_ms) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = n, d.backend = b, d.timeout_ms = timeout_ms;
  sk_world *w = NULL;
  sk_error e;
  cr_assert_eq(sk_world_create(&d, &w, &e), SK_OK, "%s", e.msg);
  return w;
}

typedef struct redist_arg {
  ct_slot slots[4];
  sk_result rc[4];
  sk_error err[4];
} redist_arg;

/* A [8, 8] float tensor from rows split over 4 devices to columns split: every element checked. */
static sk_result redist_device(sk_comm *c, void *p) {
  redist_arg *a = (redist_arg *)p;
  int r = sk_comm_rank(c);
  static const int64_t shape[] = {8, 8};
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  sk_mesh m;
  sk_mesh_parse(&m, "dp=4", NULL);
  sk_layout_parse(&d.from, &m, "dp,None", 2, shape, NULL);
  sk_layout_parse(&d.to, &m, "None,dp", 2, shape, NULL);
  d.dtype = SK_F32;
  float src[16], dst[16];
  for (int i = 0; i < 16; i++) src[i] = (float)(r * 16 + i), dst[i] = -1; /* row-major: rows 2r, 2r+1 */
  sk_redist_executor *ex = NULL;
  a->rc[r] = sk_redist_executor_create(c, &d, &ex, &a->err[r]);
  if (a->rc[r] == SK_OK) {
    a->rc[r] = sk_redist_execute(ex, src, 16, dst, 16, SK_F32, NULL);
    sk_last_error(ex, &a->err[r]);
    sk_redist_executor_destroy(ex);
  }
  if (a->rc[r] == SK_OK)
    for (int i = 0; i < 16; i++) { /* dst: all 8 rows of columns 2r, 2r+1 */
      int row = i / 2, col = 2 * r + i % 2;
      ct_check(&a->slots[r], dst[i] == (float)(row * 8 + col), "rank %d: dst[%d] = %g, want %d", r, i, (double)dst[i],
               row * 8 + col);
    }
  a->slots[r].ran = 1;
  return SK_OK;
}

/* The redistribution on 4 devices of the wrapped backend, its copy hook failing or not: the
   run's result; a holds every rank's outcome. */
static sk_result run_wrapped_redist(bool failing_copy, uint32_t timeout_ms, redist_arg *a) {
  sk_backend b = wrapped();
  atomic_store(&copies, 0), atomic_store(&fail_copies, failing_copy), atomic_store(&destroy_result, SK_OK);
  sk_world *w = wrapped_world(&b, 4, timeout_ms);
  memset(a, 0, sizeof *a);
  sk_result r = sk_world_run(w, redist_device, a, NULL);
  cr_expect_eq(sk_world_destroy(w, NULL), SK_OK);
  return r;
}

Test(comm_backend, redistribution_copies_through_the_backend, .timeout = 30) {
  redist_arg a;
  cr_assert_eq(run_wrapped_redist(false, 10000, &a), SK_OK, "the run failed: rank 0: %s", a.err[0].msg);
  ct_expect_slots(a.slots, 4, "redist through the wrapped backend");
  for (int i = 0; i < 4; i++) cr_expect_eq(a.rc[i], SK_OK, "rank %d: %s", i, a.err[i].msg);
  cr_expect_gt(atomic_load(&copies), 0, "no copy went through the backend's hook");
}

Test(comm_backend, a_failing_copy_fails_the_redistribution, .timeout = 30) {
  redist_arg a;
  cr_expect_neq(run_wrapped_redist(true, 5000, &a), SK_OK, "the run succeeded with a failing copy hook");
  int refused = 0;
  for (int i = 0; i < 4; i++) {
    cr_expect_neq(a.rc[i], SK_OK, "rank %d succeeded with a failing copy hook", i);
    if (a.rc[i] == SK_ERR_BACKEND) {
      refused++;
      cr_expect(strstr(a.err[i].msg, "the device refused"), "rank %d: sk_last_error(executor): %s", i, a.err[i].msg);
    }
  }
  cr_expect_gt(refused, 0, "no rank reported the backend's copy failure");
}

Test(comm_backend, world_destroy_returns_the_backend_result, .timeout = 30) {
  sk_backend b = wrapped();
  atomic_store(&destroy_result, SK_ERR_TIMEOUT);
  sk_world *w = wrapped_world(&b, 2, 1000);
  sk_error e = {SK_OK, ""};
  cr_expect_eq(sk_world_destroy(w, &e), SK_ERR_TIMEOUT);
  cr_expect_eq(e.code, SK_ERR_TIMEOUT);
  cr_expect(strstr(e.msg, "wrapped-threads"), "the message names the backend: %s", e.msg);
  atomic_store(&destroy_result, SK_OK);
}

Test(comm_backend, another_table_version_is_refused_by_name) {
  sk_backend b = *sk_threads_backend();
  b.version = 1;
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 2, d.backend = &b;
  sk_world *w = NULL;
  sk_error e;
  cr_expect_eq(sk_world_create(&d, &w, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "backend 'threads' has hook table version 1; this build needs 2"), "%s", e.msg);
  cr_expect_null(w);
}

/* ---- sk_last_error and the logger --------------------------------------------------------------- */

typedef struct log_rec {
  atomic_int by_id[SK_LOG_ID_COUNT];
  atomic_int ranks_mismatch; /* bit per world rank that logged a mismatch */
  char text[256];           /* the first text-form line */
  atomic_int have_text;
} log_rec;

static void on_item(void *user, const sk_log_item *it) {
  log_rec *l = (log_rec *)user;
  if ((int)it->id > 0 && it->id < SK_LOG_ID_COUNT) atomic_fetch_add(&l->by_id[it->id], 1);
  if (it->id == SK_LOG_MISMATCH && it->world_rank >= 0 && it->world_rank < 30)
    atomic_fetch_or(&l->ranks_mismatch, 1 << it->world_rank);
}

static void on_text(void *user, sk_log_level level, const char *msg) {
  log_rec *l = (log_rec *)user;
  (void)level;
  int no = 0;
  if (atomic_compare_exchange_strong(&l->have_text, &no, 1)) snprintf(l->text, sizeof l->text, "%s", msg);
}

typedef struct mm_arg {
  sk_error err[3];
} mm_arg;

/* Every rank calls AllReduce, rank 2 with another count: a mismatch on all three. */
static sk_result mismatch_device(sk_comm *c, void *p) {
  mm_arg *a = (mm_arg *)p;
  int r = sk_comm_rank(c);
  float x[8] = {0}, y[8];
  sk_result rc = sk_allreduce(c, x, y, r == 2 ? 5 : 4, SK_F32, SK_SUM, NULL);
  sk_last_error(c, &a->err[r]);
  return rc;
}

static sk_world *logged_world(log_rec *l, bool items, sk_log_level level) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 3, d.backend = sk_threads_backend(), d.timeout_ms = 5000;
  d.logger.user = l, d.logger.max_level = level;
  if (items)
    d.logger.item = on_item;
  else
    d.logger.func = on_text;
  sk_world *w = NULL;
  sk_error e;
  cr_assert_eq(sk_world_create(&d, &w, &e), SK_OK, "%s", e.msg);
  return w;
}

Test(comm_backend, a_mismatch_is_logged_by_id_and_read_by_sk_last_error, .timeout = 30) {
  static log_rec l;
  memset(&l, 0, sizeof l);
  sk_world *w = logged_world(&l, true, SK_LOG_INFO);
  mm_arg a;
  memset(&a, 0, sizeof a);
  cr_expect_eq(sk_world_run(w, mismatch_device, &a, NULL), SK_ERR_MISMATCH);
  sk_error we;
  cr_expect_eq(sk_last_error(w, &we), SK_ERR_MISMATCH);
  cr_expect(strstr(we.msg, "mismatch: rank 0 called allreduce(count 4"), "world: %s", we.msg);
  sk_world_destroy(w, NULL);
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(a.err[i].code, SK_ERR_MISMATCH, "rank %d: %s", i, a.err[i].msg);
    cr_expect(strstr(a.err[i].msg, "but rank 2 called allreduce(count 5"), "rank %d: %s", i, a.err[i].msg);
  }
  cr_expect_eq(atomic_load(&l.ranks_mismatch), 7, "ranks that logged sk.mismatch: mask %d", atomic_load(&l.ranks_mismatch));
  cr_expect_eq(atomic_load(&l.by_id[SK_LOG_WORLD_FAILED]), 1);
  cr_expect_eq(atomic_load(&l.by_id[SK_LOG_ABORT]), 1);
  cr_expect_eq(atomic_load(&l.by_id[SK_LOG_TIMEOUT]), 0);
}

Test(comm_backend, the_text_form_starts_with_the_id, .timeout = 30) {
  static log_rec l;
  memset(&l, 0, sizeof l);
  sk_world *w = logged_world(&l, false, SK_LOG_ERROR);
  mm_arg a;
  sk_world_run(w, mismatch_device, &a, NULL);
  sk_world_destroy(w, NULL);
  cr_expect(strncmp(l.text, "sk.mismatch: ", 13) == 0 || strncmp(l.text, "sk.world_failed: ", 17) == 0, "%s", l.text);
}

/* Rank 1 never calls: the others time out. */
static sk_result timeout_device(sk_comm *c, void *p) {
  (void)p;
  if (sk_comm_rank(c) == 1) {
    ct_sleep_ms(600);
    return SK_OK;
  }
  return sk_barrier(c, NULL);
}

Test(comm_backend, a_timeout_is_logged_by_id, .timeout = 30) {
  static log_rec l;
  memset(&l, 0, sizeof l);
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 2, d.backend = sk_threads_backend(), d.timeout_ms = 200;
  d.logger.user = &l, d.logger.item = on_item;
  sk_world *w = NULL;
  cr_assert_eq(sk_world_create(&d, &w, NULL), SK_OK);
  cr_expect_eq(sk_world_run(w, timeout_device, NULL, NULL), SK_ERR_TIMEOUT);
  sk_world_destroy(w, NULL);
  cr_expect_eq(atomic_load(&l.by_id[SK_LOG_TIMEOUT]), 1);
  cr_expect_eq(atomic_load(&l.by_id[SK_LOG_WORLD_FAILED]), 1);
}

Test(comm_backend, sk_last_error_on_every_kind_of_object) {
  sk_error e;
  cr_expect_eq(sk_last_error(NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_str_eq(e.msg, "object is NULL");
  int not_an_object[80] = {0};
  cr_expect_eq(sk_last_error(not_an_object, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "not a shardkit object"), "%s", e.msg);
  sk_world *w = ct_world(2, 0, 2000);
  cr_expect_eq(sk_last_error(w, &e), SK_OK);
  cr_expect_str_eq(e.msg, "");
  cr_expect_eq(sk_world_run(w, NULL, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_last_error(w, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_str_eq(e.msg, "world_run: fn is NULL");
  sk_world_destroy(w, NULL);
  sk_fusion_desc fd;
  memset(&fd, 0, sizeof fd);
  sk_fusion *f = NULL;
  cr_assert_eq(sk_fusion_create(&fd, &f, &e), SK_OK, "%s", e.msg);
  cr_expect_eq(sk_fusion_add(f, NULL, NULL, NULL), SK_ERR_INVALID_ARGUMENT);
  cr_expect_eq(sk_last_error(f, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect_str_eq(e.msg, sk_fusion_error_message(f));
  sk_fusion_destroy(f);
}

/* sk_comm_copy on the threads backend: plain memcpy, arguments checked. */
static sk_result copy_device(sk_comm *c, void *p) {
  ct_slot *s = (ct_slot *)p + sk_comm_rank(c);
  char a[8] = "abcdefg", b[8] = {0};
  ct_check(s, sk_comm_copy(c, b, a, 8, NULL) == SK_OK && memcmp(a, b, 8) == 0, "copy");
  ct_check(s, sk_comm_copy(c, NULL, a, 8, NULL) == SK_ERR_INVALID_ARGUMENT, "NULL dst");
  ct_check(s, strstr(sk_comm_error_message(c), "copy: dst is NULL with 8 bytes") != NULL, "%s", sk_comm_error_message(c));
  ct_check(s, sk_comm_copy(c, NULL, NULL, 0, NULL) == SK_OK, "0 bytes");
  s->ran = 1;
  return SK_OK;
}

Test(comm_backend, comm_copy, .timeout = 30) {
  ct_slot *s = ct_slots_new(2);
  ct_run(2, 0, copy_device, s, "comm_copy");
  ct_expect_slots(s, 2, "comm_copy");
  free(s);
}

/* ---- one error convention: a trailing sk_error *err on every fallible call -------------------- */

typedef struct err_arg {
  ct_slot slots[2];
} err_arg;

static const sk_error untouched = {SK_ERR_TIMEOUT, "untouched"};

static bool err_is(const sk_error *e, sk_result code, const char *part) {
  return e->code == code && strstr(e->msg, part) != NULL;
}

/* Every rank: a failing collective fills the caller's err with the comm's message; NULL err is
   fine; success leaves err alone; the comm's own record as err keeps the message. */
static sk_result err_device(sk_comm *c, void *p) {
  ct_slot *s = ((err_arg *)p)->slots + sk_comm_rank(c);
  float a[4] = {1, 2, 3, 4}, b[4];
  sk_error e = untouched;
  sk_result r = sk_allreduce(c, a, b, 4, SK_F32, (sk_redop)99, &e);
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT && err_is(&e, r, "invalid reduce op 99"), "failing call: %s", e.msg);
  ct_check(s, !strcmp(e.msg, sk_comm_error_message(c)), "err '%s' is not the comm's '%s'", e.msg, sk_comm_error_message(c));
  ct_check(s, sk_allreduce(c, a, b, 4, SK_F32, (sk_redop)98, NULL) == SK_ERR_INVALID_ARGUMENT, "NULL err");
  ct_check(s, strstr(sk_comm_error_message(c), "invalid reduce op 98") != NULL, "the comm keeps it: %s",
           sk_comm_error_message(c));
  e = untouched;
  ct_check(s, sk_allreduce(c, a, b, 4, SK_F32, SK_SUM, &e) == SK_OK, "a good allreduce failed");
  ct_check(s, err_is(&e, SK_ERR_TIMEOUT, "untouched") && !strcmp(e.msg, "untouched"), "success wrote err: %s", e.msg);
  ct_check(s, sk_barrier(c, sk_comm_error(c)) == SK_OK, "barrier");
  r = sk_broadcast(c, a, b, 4, SK_F32, 7, sk_comm_error(c));
  sk_error last;
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT && sk_last_error(c, &last) == r && strstr(last.msg, "root 7 out of range"),
           "err == sk_comm_error(c): %s", last.msg);
  sk_request *req = NULL;
  e = untouched;
  ct_check(s, sk_isend(c, a, 4, SK_F32, 5, &req, &e) == SK_ERR_INVALID_ARGUMENT && err_is(&e, e.code, "peer 5"),
           "isend: %s", e.msg);
  e = untouched;
  ct_check(s, sk_wait(NULL, &e) == SK_ERR_INVALID_ARGUMENT && err_is(&e, e.code, "wait: req is NULL"), "wait: %s", e.msg);
  e = untouched;
  ct_check(s, sk_comm_split(c, -5, 0, &(sk_comm *){NULL}, &e) == SK_ERR_INVALID_ARGUMENT && err_is(&e, e.code, "color -5"),
           "split: %s", e.msg);
  s->ran = 1;
  return SK_OK;
}

Test(comm_backend, a_failing_call_fills_err_and_success_leaves_it, .timeout = 30) {
  err_arg a;
  memset(&a, 0, sizeof a);
  ct_run(2, 0, err_device, &a, "err convention");
  ct_expect_slots(a.slots, 2, "err convention");
}

/* Rank 1 fails through a library call given its comm's record as err; rank 0 waits in a
   barrier and is aborted. */
static sk_result root_cause_device(sk_comm *c, void *p) {
  (void)p;
  if (sk_comm_rank(c) == 0) return sk_barrier(c, NULL);
  sk_mesh m;
  return sk_mesh_parse(&m, "dp=oops", sk_comm_error(c));
}

/* Rank 1 writes its own failure into its comm's record. */
static sk_result own_failure_device(sk_comm *c, void *p) {
  (void)p;
  if (sk_comm_rank(c) == 0) return sk_barrier(c, NULL);
  return sk_error_set(sk_comm_error(c), SK_ERR_OUT_OF_MEMORY, "allocating %d staging buffers", 3);
}

static void expect_root_cause(sk_device_fn fn, sk_result code, const char *part) {
  sk_world *w = ct_world(2, 0, 5000);
  sk_error e = untouched;
  cr_expect_eq(sk_world_run(w, fn, NULL, &e), code, "%s", sk_world_error_message(w));
  cr_expect(strstr(sk_world_error_message(w), "device 1 returned") && strstr(sk_world_error_message(w), part),
            "root cause: %s", sk_world_error_message(w));
  cr_expect(e.code == code && !strcmp(e.msg, sk_world_error_message(w)), "world_run's err: %s", e.msg);
  sk_world_destroy(w, NULL);
}

Test(comm_backend, a_device_writing_its_comm_record_is_the_root_cause, .timeout = 30) {
  expect_root_cause(root_cause_device, SK_ERR_INVALID_ARGUMENT, "dp=oops");
  expect_root_cause(own_failure_device, SK_ERR_OUT_OF_MEMORY, "allocating 3 staging buffers");
}

/* Calls without a communicator: the fusion scheduler's record, the local reduction's own words. */
Test(comm_backend, err_from_a_scheduler_and_the_local_reduction) {
  sk_fusion_desc fd;
  memset(&fd, 0, sizeof fd);
  sk_fusion *f = NULL;
  sk_error e = untouched;
  cr_assert_eq(sk_fusion_create(&fd, &f, &e), SK_OK, "%s", e.msg);
  cr_expect_eq(sk_fusion_ready(f, 3, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(err_is(&e, SK_ERR_INVALID_ARGUMENT, "ready: handle 3 out of range"), "%s", e.msg);
  cr_expect_str_eq(e.msg, sk_fusion_error_message(f));
  e = untouched;
  cr_expect_eq(sk_fusion_wait(f, &e), SK_OK);
  cr_expect_str_eq(e.msg, "untouched");
  sk_fusion_destroy(f);
  cr_expect_eq(sk_fusion_plan(NULL, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "is NULL"), "%s", e.msg);
  float x[2] = {1, 2}, y[2];
  const void *srcs[2] = {x, NULL};
  e = untouched;
  cr_expect_eq(sk_reduce_local(y, srcs, 2, 2, SK_F32, SK_SUM, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(err_is(&e, SK_ERR_INVALID_ARGUMENT, "srcs[1] is NULL"), "%s", e.msg);
  srcs[1] = x;
  e = untouched;
  cr_expect_eq(sk_reduce_local(y, srcs, 2, 2, SK_F32, SK_SUM, &e), SK_OK);
  cr_expect(y[0] == 2 && y[1] == 4 && !strcmp(e.msg, "untouched"));
}

/* A group's buffer total (what the threads backend's streaming decision reads) is the sum of the
   ranks' own buffers, for every fixed-size buffer class, group size and root. */
Test(comm_backend, group_buffer_elements_are_the_sum_over_ranks) {
  for (int kind = SK_COLL_NONE + 1; kind < SK_COLL_KIND_COUNT; kind++) {
    sk_coll_info info = sk_coll_info_of((sk_coll_kind)kind);
    const sk_coll_buf bufs[2] = {info.send, info.recv};
    for (int b = 0; b < 2; b++) {
      if (bufs[b] == SK_COLLB_VEC) continue;
      for (int k = 1; k <= 9; k++)
        for (int root = 0; root < k; root++) {
          size_t sum = 0;
          for (int r = 0; r < k; r++) sum += sk_coll_buf_elems(bufs[b], 5, k, r, root);
          cr_expect_eq(sk_coll_buf_group_elems(bufs[b], 5, k, root), sum, "%s %s k=%d root=%d", info.name,
                       b ? "recv" : "send", k, root);
        }
    }
  }
  /* by hand: 4 ranks, count 3 */
  cr_expect_eq(sk_coll_buf_group_elems(SK_COLLB_ALL, 3, 4, 0), 48u);      /* AllToAll: 4 x 12 */
  cr_expect_eq(sk_coll_buf_group_elems(SK_COLLB_ROOT_ALL, 3, 4, 2), 12u); /* Gather's recv */
  cr_expect_eq(sk_coll_buf_group_elems(SK_COLLB_ROOT_ONE, 3, 4, 1), 3u);  /* Broadcast's send */
  cr_expect_eq(sk_coll_buf_group_elems(SK_COLLB_ONE, 3, 4, 0), 12u);
  cr_expect_eq(sk_coll_buf_group_elems(SK_COLLB_NONE, 3, 4, 0), 0u);
}
