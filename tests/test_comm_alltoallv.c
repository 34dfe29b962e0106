/* test_comm_alltoallv.c -- AllToAllV on the threads backend: what the shared collective grid
   (tests/coll_grid.h, run by test_comm_coll.c and the MPI driver) does not cover: mismatched
   counts, bad arguments and the link model's cost. Device threads record into their own slots;
   the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "shardkit.h"
#include "comm_test_util.h"

/* ---- mismatch and bad arguments ----------------------------------------------------------- */

typedef struct bad_arg {
  int n, mode;
  sk_result rc[8];
  char msg[8][SK_ERROR_MSG_MAX];
} bad_arg;

enum { BAD_COUNTS, BAD_NULL_COUNTS, BAD_OVERLAP, BAD_RECV_OVERLAP, BAD_NULL_BUF };

static sk_result bad_device(sk_comm *c, void *p) {
  bad_arg *a = (bad_arg *)p;
  int me = sk_comm_rank(c);
  size_t sc[8], rc[8], rd[8];
  float buf[64] = {0}, out[64];
  for (int j = 0; j < a->n; j++) sc[j] = rc[j] = 2, rd[j] = 4 * (size_t)j;
  if (a->mode == BAD_COUNTS && me == 1) rc[0] = 3; /* rank 0 sends 2 to rank 1, which expects 3 */
  if (a->mode == BAD_RECV_OVERLAP && me == 0) rd[1] = 1; /* block 0 is [0, 2), block 1 [1, 3) */
  sk_result r;
  if (a->mode == BAD_NULL_COUNTS)
    r = sk_alltoallv(c, buf, me == 0 ? NULL : sc, NULL, out, rc, NULL, SK_F32, NULL);
  else if (a->mode == BAD_OVERLAP)
    r = sk_alltoallv(c, buf, sc, NULL, buf + 1, rc, NULL, SK_F32, NULL);
  else if (a->mode == BAD_NULL_BUF)
    r = sk_alltoallv(c, NULL, sc, NULL, out, rc, NULL, SK_F32, NULL);
  else
    r = sk_alltoallv(c, buf, sc, NULL, out, rc, rd, SK_F32, NULL);
  a->rc[me] = r;
  snprintf(a->msg[me], sizeof a->msg[me], "%s", sk_comm_error_message(c));
  return SK_OK; /* report, do not abort: the checks below read every rank's result */
}

static bad_arg *run_bad(int n, int mode) {
  static bad_arg a;
  memset(&a, 0, sizeof a);
  a.n = n, a.mode = mode;
  sk_world *w = ct_world(n, 0, 2000);
  sk_result r = sk_world_run(w, bad_device, &a, NULL);
  sk_world_destroy(w, NULL);
  cr_assert(r == SK_OK || r == SK_ERR_MISMATCH || r == SK_ERR_INVALID_ARGUMENT, "world_run: %s", sk_result_name(r));
  return &a;
}

Test(comm_alltoallv, mismatched_counts_fail_on_every_rank, .timeout = 30) {
  bad_arg *a = run_bad(3, BAD_COUNTS);
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(a->rc[i], SK_ERR_MISMATCH, "rank %d: %s", i, sk_result_name(a->rc[i]));
    cr_expect(strstr(a->msg[i], "rank 0 sends 2 elements to rank 1, which expects 3"), "rank %d: %s", i, a->msg[i]);
  }
}

Test(comm_alltoallv, bad_arguments_name_what_is_wrong, .timeout = 30) {
  /* Only rank 0's arguments are bad in these: it fails alone (peers then time out or see it
     leave); what matters is rank 0's result and message. */
  bad_arg *a = run_bad(2, BAD_NULL_COUNTS);
  cr_expect_eq(a->rc[0], SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(a->msg[0], "send_counts is NULL"), "%s", a->msg[0]);
  a = run_bad(2, BAD_RECV_OVERLAP);
  cr_expect_eq(a->rc[0], SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(a->msg[0], "recv blocks of ranks 0 and 1 overlap"), "%s", a->msg[0]);
  a = run_bad(2, BAD_OVERLAP);
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(a->rc[i], SK_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(a->msg[i], "no in-place form"), "%s", a->msg[i]);
  }
  a = run_bad(2, BAD_NULL_BUF);
  cr_expect(strstr(a->msg[0], "send buffer is NULL"), "%s", a->msg[0]);
}

/* ---- link model ------------------------------------------------------------------------------ */

typedef struct link_arg {
  double end[4];
} link_arg;

/* Rank 0 sends 1000 f32 to each peer, the others send nothing: the busiest member moves 1000
   elements per peer, so every member's clock ends at the SPREAD cost of count 1000. */
static sk_result link_device(sk_comm *c, void *p) {
  link_arg *a = (link_arg *)p;
  int me = sk_comm_rank(c);
  size_t sc[4] = {0}, rc[4] = {0};
  static float src[4][4000], dst[4][4000];
  for (int j = 0; j < 4; j++) sc[j] = me == 0 && j != 0 ? 1000 : 0, rc[j] = me != 0 && j == 0 ? 1000 : 0;
  sk_result r = sk_alltoallv(c, src[me], sc, NULL, dst[me], rc, NULL, SK_F32, NULL);
  a->end[me] = sk_comm_clock_us(c);
  return r;
}

Test(comm_alltoallv, link_model_charges_the_busiest_member, .timeout = 30) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 4, d.backend = sk_threads_backend(), d.cluster.link.alpha_us = 5, d.cluster.link.gbps = 10;
  sk_world *w;
  sk_error e;
  cr_assert_eq(sk_world_create(&d, &w, &e), SK_OK, "%s", e.msg);
  link_arg a;
  memset(&a, 0, sizeof a);
  cr_assert_eq(sk_world_run(w, link_device, &a, NULL), SK_OK, "%s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  double want = 3 * 5 + 3 * 1000 * 4 * 1e-3 / 10; /* (p-1)a + (p-1) * per-peer bytes / B */
  cr_expect_float_eq(want, sk_link_cost_us(&d.cluster.link, SK_COLL_ALLTOALLV, 1000, SK_F32, 4), 1e-9);
  for (int i = 0; i < 4; i++) cr_expect_float_eq(a.end[i], want, 1e-9, "rank %d ends at %g us, want %g", i, a.end[i], want);
}
