/* test_oom_nets.c -- the allocation-failure sweep of the shipped networks (examples/nets/, each .json):
   each compiled for 4 devices, every device allocating through a counting allocator
   (tests/runtime_harness.h), and allocation k of device k % 4 refused once, counted from the
   start of sk_runtime_create through the feeds and the first sk_runtime_step. Every device then
   returns SK_OK or an error (the refused one SK_ERR_OUT_OF_MEMORY), none by the world's timeout,
   and nothing stays allocated on any device after sk_runtime_destroy.

   Every k up to OOM_NETS_DENSE, then every OOM_NETS_STRIDE-th, so the suite stays within `make
   test`'s time; compiled with -DSK_OOM_FULL (`make oom-full`) every k. A sweep stops when the
   refusing device's allocation came after its last one twice in a row. */
#include <criterion/criterion.h>

#include "runtime_harness.h"
#include "sk_json.h"
#include "shipped_nets.h"

#define OOM_NETS_NDEV 4
#define OOM_NETS_DENSE 500
#define OOM_NETS_STRIDE 37
#define OOM_NETS_TIMEOUT 600

/* One device: create with the counting allocator (call R->fail_at refused on R->fail_rank),
   feed the first step's data, one step, destroy. */
static sk_result oom_device(sk_comm *comm, void *arg) {
  run *R = (run *)arg;
  int rank = sk_comm_rank(comm);
  dev_out *o = &R->dev[rank];
  sk_error e;
  memset(&e, 0, sizeof e);
  o->ran = true;
  if (rank == R->fail_rank) o->cnt.fail_at = R->fail_at;
  sk_runtime_desc d = R->desc;
  d.alloc.alloc = count_alloc, d.alloc.free = count_free, d.alloc.user = &o->cnt;
  sk_runtime *rt = NULL;
  sk_result r = note(o, "create", sk_runtime_create(comm, &R->plan, &d, &rt, &e), &e);
  o->created = !r;
  for (int i = 0; !r && i < R->n->nin; i++)
    r = note(o, "feed", sk_runtime_feed(rt, R->in_t[i], R->in_dt[i], R->data[0][i], (size_t)R->in_n[i], &e), &e);
  if (!r) r = note(o, "step", sk_runtime_step(rt, &o->loss[0], &e), &e);
  if (!r) o->steps++;
  sk_runtime_destroy(rt);
  o->out_after = o->cnt.outstanding, o->blocks_after = o->cnt.blocks;
  return r;
}

/* The checks of one refused allocation (k): nothing outstanding anywhere, no device timed out,
   the refused one out of memory; returns whether the refusal happened at all. */
static bool judge(const run *R, long k, const char *what) {
  const dev_out *f = &R->dev[R->fail_rank];
  for (int d = 0; d < R->ndev; d++) {
    const dev_out *o = &R->dev[d];
    cr_assert(o->out_after == 0 && o->blocks_after == 0, "%s: k = %ld, device %d: %zu bytes in %ld blocks outstanding (%s in %s: %s)",
              what, k, d, o->out_after, o->blocks_after, sk_result_name(o->rc), o->where, o->msg);
    cr_assert_neq(o->rc, SK_ERR_TIMEOUT, "%s: k = %ld: device %d waited out the timeout in %s: %s", what, k, d, o->where, o->msg);
  }
  if (!f->cnt.refused) {
    expect_all_ok(R, what);
    return false;
  }
  cr_assert_eq(f->rc, SK_ERR_OUT_OF_MEMORY, "%s: k = %ld, device %d: %s in %s (%s)", what, k, R->fail_rank, sk_result_name(f->rc),
               f->where, f->msg);
  return true;
}

static long next_k(long k) {
#ifdef SK_OOM_FULL
  return k + 1;
#else
  return k < OOM_NETS_DENSE ? k + 1 : k + OOM_NETS_STRIDE;
#endif
}

static void sweep_net(const char *path) {
  static net n;
  static run R;
  load_shipped_net(&n, path);
  run_init_knobs(&R, &n, OOM_NETS_NDEV, SK_F32, n.g.optim, 1, NULL);
  run_world_with(&R, oom_device); /* no refusal: the allocations to sweep */
  expect_all_ok(&R, path);
  long calls[OOM_NETS_NDEV];
  for (int d = 0; d < OOM_NETS_NDEV; d++) calls[d] = R.dev[d].cnt.calls;
  int done_in_a_row = 0;
  long k = 1, tried = 0;
  for (; done_in_a_row < 2; k = next_k(k), tried++) {
    R.fail_rank = (int)(k % OOM_NETS_NDEV), R.fail_at = k;
    run_world_with(&R, oom_device);
    done_in_a_row = judge(&R, k, path) ? 0 : done_in_a_row + 1;
  }
  for (int d = 0; d < OOM_NETS_NDEV; d++)
    cr_assert_geq(k, calls[d], "%s: the sweep stopped at k = %ld before device %d's last allocation (%ld)", path, k, d, calls[d]);
  fprintf(stderr, "oom_nets %s: %ld %ld %ld %ld allocations (create + step), %ld refusals tried\n", path, calls[0], calls[1],
          calls[2], calls[3], tried);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(oom_nets, transformer, .timeout = OOM_NETS_TIMEOUT) { sweep_net("examples/nets/transformer.json"); }
Test(oom_nets, operator_parallel, .timeout = OOM_NETS_TIMEOUT) { sweep_net("examples/nets/operator_parallel.json"); }
Test(oom_nets, recursive_programming, .timeout = OOM_NETS_TIMEOUT) { sweep_net("examples/nets/recursive_programming.json"); }
Test(oom_nets, attention, .timeout = OOM_NETS_TIMEOUT) { sweep_net("examples/nets/attention.json"); }
Test(oom_nets, dense_mutmul, .timeout = OOM_NETS_TIMEOUT) { sweep_net("examples/nets/dense_mutmul.json"); }
