/* sk_search_cost.h, sk_search.h and the search modes of sk_parallel.h: the candidate strategies
   (MatMul's factorisations, Softmax's axis, configured operators, too-small dims, 6 and 12
   devices) against an independent enumeration; the redistribution cost against hand-derived
   bytes and an element-by-element brute force; the exact search against a brute force over
   every combination of candidates on seeded random MLPs (and its refusal); propagation and D-Rec
   never below that optimum, configured operators kept, D-Rec on 4096 devices and its memory
   check; plan memory by hand; every search mode compiled from examples/nets/
   recursive_programming.json and trained on 8 thread devices against one device (f64); the
   strategies printed; the refused arguments. The runs that need no JSON are in
   tests/test_search_runtime.c (also under TSan); the helpers both share, tests/search_nets.h. */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_harness.h" /* OK, E, net, OP, SHARD, runs against the single-device trainer */
#include "search_nets.h"     /* BAD, random MLPs, the brute force */
#include "shardkit.h"
#include "sk_json.h"
#include "sk_strategy.h" /* implemented in tests/test_strategy.c */
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------------ */

#define RP_NET "examples/nets/recursive_programming.json"

/* x [b, k] (input) MatMul w [k, n] (parameter) -> the softmax loss against y [b]; the loss
   configured whole on every device when whole_loss. */
static void matmul_net(net *n, int64_t b, int64_t k, int64_t nn, bool whole_loss) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(b, k), 0);
  int y = add_input(n, "y", SK_I32, 1, SH1(b), nn);
  int w = add_param(n, "w", 2, SH2(k, nn), SK_INIT_XAVIER_UNIFORM, 0);
  int z = add_op(n, OP("mm", SK_OP_MATMUL, x, w));
  sk_graph_op loss = OP("loss", SK_OP_SOFTMAX_CE, z, y);
  if (whole_loss) SHARD(loss, 0, 1, 1), SHARD(loss, 1, 1);
  OK(sk_graph_set_loss(&n->g, add_op(n, loss), E));
}

/* ---- 1. candidates ------------------------------------------------------------------------ */

/* Every (i, k, j) with i * k * j = N, each dividing its dim: the expected candidate set. */
static int factorisations3(int N, int64_t a, int64_t b, int64_t c, int (*out)[3]) {
  int n = 0;
  for (int i = 1; i <= N; i++)
    for (int k = 1; k <= N; k++)
      for (int j = 1; j <= N; j++)
        if (i * k * j == N && a % i == 0 && b % k == 0 && c % j == 0) out[n][0] = i, out[n][1] = k, out[n][2] = j, n++;
  return n;
}

static void assert_matmul_candidates(int N, int64_t b, int64_t k, int64_t nn) {
  static net n;
  matmul_net(&n, b, k, nn, true);
  sk_search_desc d = sdesc(N);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int mm = op_named(&n.g, "mm"), want[512][3];
  int nwant = factorisations3(N, b, k, nn, want);
  cr_assert_eq(m.ncands[mm], nwant, "MatMul [%lld,%lld]x[%lld,%lld] on %d: %d candidates, want %d", (long long)b,
               (long long)k, (long long)k, (long long)nn, N, m.ncands[mm], nwant);
  cr_assert_eq(m.njoint[mm], 3);
  cr_assert(m.joint_size[mm][0] == b && m.joint_size[mm][1] == k && m.joint_size[mm][2] == nn);
  for (int w = 0; w < nwant; w++) {
    int found = 0;
    for (int c = 0; c < m.ncands[mm]; c++) {
      const sk_search_cand *s = &m.cands[mm][c];
      if (s->joint[0] == want[w][0] && s->joint[1] == want[w][1] && s->joint[2] == want[w][2]) {
        found++;
        cr_assert_eq(s->kind, SK_SEARCH_CAND_STRATEGY);
        cr_assert_eq(s->devices, N);
        cr_assert_eq(s->ntuples, 2);
        /* x (i, k), w (k, j) */
        cr_assert(s->strategy[0][0] == want[w][0] && s->strategy[0][1] == want[w][1] && s->strategy[1][0] == want[w][1] &&
                  s->strategy[1][1] == want[w][2], "candidate %d: ((%d,%d),(%d,%d))", c, s->strategy[0][0],
                  s->strategy[0][1], s->strategy[1][0], s->strategy[1][1]);
      }
    }
    cr_assert_eq(found, 1, "(%d,%d,%d) found %d times", want[w][0], want[w][1], want[w][2], found);
  }
  /* data parallel, the batch cut, comes first */
  cr_assert_eq(m.cands[mm][0].joint[0], b % N == 0 ? N : m.cands[mm][0].joint[0]);
  /* the configured loss: one candidate, its own */
  int loss = op_named(&n.g, "loss");
  cr_assert(m.configured[loss]);
  cr_assert_eq(m.ncands[loss], 1);
  cr_assert_eq(m.cands[loss][0].kind, SK_SEARCH_CAND_CONFIGURED);
  cr_assert(!m.configured[mm]);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

Test(search, matmul_candidates_are_the_factorisations_of_8) {
  /* 2^3 over three dims: C(5, 2) = 10 ways, all dividing 16, 32, 64 */
  int want[64][3];
  cr_assert_eq(factorisations3(8, 16, 32, 64, want), 10);
  assert_matmul_candidates(8, 16, 32, 64);
}

Test(search, matmul_candidates_on_6_and_12_devices) {
  int want[512][3];
  cr_assert_eq(factorisations3(6, 12, 18, 24, want), 9); /* the 2 and the 3 each in one of 3 dims */
  assert_matmul_candidates(6, 12, 18, 24);
  assert_matmul_candidates(12, 12, 18, 24);
  assert_matmul_candidates(12, 4, 9, 8); /* k = 9 takes no 2, only k takes a 3 */
  cr_assert_eq(factorisations3(12, 4, 9, 8, want), 3); /* the 3 on k, the 4 over i and j */
}

Test(search, matmul_candidates_on_2_and_4_devices) {
  assert_matmul_candidates(2, 16, 32, 64);
  assert_matmul_candidates(4, 16, 32, 64);
  assert_matmul_candidates(1, 16, 32, 64);
}

/* A Softmax over its last axis: never cut there. */
Test(search, softmax_never_cuts_its_axis) {
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int x = add_input(&n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(&n, "y", SK_I32, 1, SH1(16), 8);
  int w = add_param(&n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int h = add_op(&n, OP("mm", SK_OP_MATMUL, x, w));
  int s = add_op(&n, OP("softmax", SK_OP_SOFTMAX, h));
  OK(sk_graph_set_loss(&n.g, add_op(&n, OP("loss", SK_OP_SOFTMAX_CE, s, y)), E));
  for (int N = 2; N <= 8; N *= 2) {
    sk_search_desc d = sdesc(N);
    sk_search_model m;
    build_model(&n.g, &d, &m);
    int o = op_named(&n.g, "softmax");
    cr_assert_eq(m.njoint[o], 2);
    /* cuts of (16, 8) with product N, the last dim whole: (N, 1) alone */
    cr_assert_eq(m.ncands[o], 1, "%d devices: %d Softmax candidates", N, m.ncands[o]);
    cr_assert_eq(m.cands[o][0].strategy[0][0], N);
    cr_assert_eq(m.cands[o][0].strategy[0][1], 1);
    for (int c = 0; c < m.ncands[o]; c++) cr_assert_eq(m.cands[o][c].joint[1], 1);
    sk_search_model_free(&m);
  }
  sk_graph_free(&n.g);
}

/* Dims too small for every device: the largest device count that has a cut stands in. */
Test(search, too_small_dims_fall_back_to_the_largest_product) {
  static net n;
  matmul_net(&n, 2, 2, 2, true);
  sk_search_desc d = sdesc(16);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int mm = op_named(&n.g, "mm");
  /* 16 has no cut of (2, 2, 2); 8 has exactly one: (2, 2, 2) */
  cr_assert_eq(m.ncands[mm], 1);
  cr_assert_eq(m.cands[mm][0].devices, 8);
  cr_assert(m.cands[mm][0].joint[0] == 2 && m.cands[mm][0].joint[1] == 2 && m.cands[mm][0].joint[2] == 2);
  sk_search_model_free(&m);
  /* on 12 devices: 12 and 6 have no cut of (2,2,2) (a 3 divides nothing), 4 has three */
  d = sdesc(12);
  build_model(&n.g, &d, &m);
  cr_assert_eq(m.ncands[mm], 3);
  for (int c = 0; c < 3; c++) cr_assert_eq(m.cands[mm][c].devices, 4);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* own() by hand: MatMul x [16,32] (an input: no gradient) by w [32,64] (a parameter) on 2
   devices, in bytes (a ring AllReduce of n bytes on 2 sends n) and under a link of 5 us, 10 GB/s
   (an AllReduce on 2: 2 alpha + n / bandwidth; a Mirror by its bandwidth alone, the fusion
   scheduler sharing its latency):
     (2,1,1) data parallel: w's Mirror, 32 x 64 f32 = 8192 bytes;
     (1,2,1) the contraction cut: the forward AllReduce of the partial [16,64] = 4096 bytes (w is
             cut over both devices: no Mirror; x needs no gradient);
     (1,1,2) the columns cut: nothing (x's gradient AllReduce is skipped: x needs none). */
static double own_of(const sk_search_model *m, int o, int i, int k, int j) {
  for (int c = 0; c < m->ncands[o]; c++)
    if (m->cands[o][c].joint[0] == i && m->cands[o][c].joint[1] == k && m->cands[o][c].joint[2] == j) return m->cands[o][c].own;
  cr_assert_fail("no candidate (%d,%d,%d)", i, k, j);
  return -1;
}

Test(search, own_costs_by_hand) {
  static net n;
  matmul_net(&n, 16, 32, 64, true);
  int mm = op_named(&n.g, "mm");
  sk_search_desc d = sdesc(2);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  cr_assert_float_eq(own_of(&m, mm, 2, 1, 1), 8192, 1e-9);
  cr_assert_float_eq(own_of(&m, mm, 1, 2, 1), 4096, 1e-9);
  cr_assert_float_eq(own_of(&m, mm, 1, 1, 2), 0, 1e-9);
  for (int c = 0; c < m.ncands[mm]; c++) cr_assert_float_eq(m.cands[mm][c].own, m.cands[mm][c].own_bytes, 1e-9);
  sk_search_model_free(&m);
  d.cluster.link.alpha_us = 5, d.cluster.link.gbps = 10;
  build_model(&n.g, &d, &m);
  cr_assert_float_eq(own_of(&m, mm, 2, 1, 1), 8192e-4, 1e-12); /* the Mirror: no latency */
  cr_assert_float_eq(own_of(&m, mm, 1, 2, 1), 10 + 4096e-4, 1e-12);
  cr_assert_float_eq(own_of(&m, mm, 1, 1, 2), 0, 1e-12);
  for (int c = 0; c < m.ncands[mm]; c++) /* own_bytes stays in bytes */
    if (m.cands[mm][c].joint[0] == 2) cr_assert_float_eq(m.cands[mm][c].own_bytes, 8192, 1e-9);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* ---- 2. redistribution --------------------------------------------------------------------- */

static sk_search_sig sig2(int c0, int s0, int c1, int s1) {
  sk_search_sig s;
  memset(&s, 0, sizeof s);
  s.ndims = 2, s.dim[0].count = c0, s.dim[0].stride = c0 > 1 ? s0 : 0, s.dim[1].count = c1, s.dim[1].stride = c1 > 1 ? s1 : 0;
  return s;
}

/* A model on N devices (the redistribution cost needs only the device count and the link). */
static void tiny_model(int N, sk_link_model link, sk_search_model *m, net *n) {
  matmul_net(n, 16, 16, 16, false);
  sk_search_desc d = sdesc(N);
  d.cluster.link = link;
  build_model(&n->g, &d, m);
}

/* The bytes the busiest device receives, element by element: on each rank, the elements of its
   target block its source block lacks. */
static double brute_redist(const sk_search_sig *from, const sk_search_sig *to, int64_t r0, int64_t r1, int N, size_t es) {
  int64_t worst = 0;
  for (int r = 0; r < N; r++) {
    int64_t missing = 0;
    for (int64_t i = 0; i < r0; i++)
      for (int64_t j = 0; j < r1; j++) {
        int64_t at[2] = {i, j}, ext[2] = {r0, r1};
        bool in_to = true, in_from = true;
        for (int d = 0; d < 2; d++) {
          int ct = to->dim[d].count, cs = from->dim[d].count;
          int64_t bt = ct > 1 ? (r / to->dim[d].stride) % ct : 0, bs = cs > 1 ? (r / from->dim[d].stride) % cs : 0;
          in_to = in_to && at[d] / (ext[d] / ct) == bt;
          in_from = in_from && at[d] / (ext[d] / cs) == bs;
        }
        missing += in_to && !in_from;
      }
    worst = missing > worst ? missing : worst;
  }
  return (double)worst * (double)es;
}

Test(search, redistribution_identical_cuts_cost_nothing) {
  static net n;
  sk_search_model m;
  sk_link_model none = {0, 0};
  tiny_model(2, none, &m, &n);
  sk_search_sig a = sig2(2, 1, 1, 0);
  double bytes = -1;
  cr_assert_eq(sk_search_redist_cost(&m, &a, &a, 64, SK_F32, &bytes), 0);
  cr_assert_eq(bytes, 0);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

Test(search, redistribution_bytes_by_hand) {
  static net n;
  sk_search_model m;
  sk_link_model none = {0, 0};
  tiny_model(2, none, &m, &n);
  /* [8, 8] f32 (256 bytes) on 2 devices */
  sk_search_sig rows = sig2(2, 1, 1, 0), whole = sig2(1, 0, 1, 0), cols = sig2(1, 0, 2, 1);
  double bytes = -1;
  /* (2,1) -> (1,1): the whole tensor wanted, half held: 128 bytes */
  cr_assert_float_eq(sk_search_redist_cost(&m, &rows, &whole, 64, SK_F32, &bytes), 128, 1e-9);
  cr_assert_float_eq(bytes, 128, 1e-9);
  /* (1,1) -> (2,1): a slice of the whole, nothing to receive */
  cr_assert_float_eq(sk_search_redist_cost(&m, &whole, &rows, 64, SK_F32, &bytes), 0, 1e-9);
  /* (2,1) -> (1,2) (AllToAll): the target [8,4] (128 bytes), half of it held: 64 bytes */
  cr_assert_float_eq(sk_search_redist_cost(&m, &rows, &cols, 64, SK_F32, &bytes), 64, 1e-9);
  cr_assert_float_eq(sk_search_redist_cost(&m, &cols, &rows, 64, SK_F64, &bytes), 128, 1e-9); /* f64: twice */
  /* a different number of dims: no cost (not comparable) */
  sk_search_sig one = rows;
  one.ndims = 1;
  cr_assert_eq(sk_search_redist_cost(&m, &rows, &one, 64, SK_F32, NULL), 0);
  cr_assert_eq(sk_search_redist_cost(NULL, &rows, &cols, 64, SK_F32, NULL), 0);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* The same counts in the transposed device order: (2 on stride 2, 2 on stride 1) against
   (2 on stride 1, 2 on stride 2) on 4 devices. Rank 1 holds block (0, 1) and wants (1, 0):
   its whole target slice, [4, 4] f32 = 64 bytes. */
Test(search, redistribution_transposed_device_order_costs) {
  static net n;
  sk_search_model m;
  sk_link_model none = {0, 0};
  tiny_model(4, none, &m, &n);
  sk_search_sig a = sig2(2, 2, 2, 1), b = sig2(2, 1, 2, 2);
  double bytes = -1;
  cr_assert_float_eq(sk_search_redist_cost(&m, &a, &b, 64, SK_F32, &bytes), 64, 1e-9);
  cr_assert_float_eq(bytes, brute_redist(&a, &b, 8, 8, 4, 4), 1e-9);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* A 2-D tensor of r0 x r1 on a mesh of three axes of `mesh` (named a, b, c): dim 0 on axis ax0,
   dim 1 on ax1 (-1: whole). */
static sk_layout mesh_layout(const int *mesh, int ax0, int ax1, int64_t r0, int64_t r1) {
  static const char *const names[3] = {"a", "b", "c"};
  sk_mesh mh;
  sk_layout l;
  sk_dim_map map[2];
  memset(map, 0, sizeof map);
  if (ax0 >= 0) map[0].naxes = 1, map[0].axes[0] = ax0;
  if (ax1 >= 0) map[1].naxes = 1, map[1].axes[0] = ax1;
  OK(sk_mesh_init(&mh, 3, mesh, names, E));
  OK(sk_layout_init(&l, &mh, 2, (const int64_t[]){r0, r1}, map, E));
  return l;
}

/* The dearest group along `axes` of mesh: every rank's group (sk_mesh_group), priced. */
static double dearest_group_us(const sk_cluster *c, sk_coll_kind kind, size_t count, sk_dtype dt, const sk_mesh *mesh,
                               uint32_t axes) {
  double worst = 0;
  for (int r = 0; r < mesh->size; r++) {
    int ranks[SK_MAX_DEVICES], n = 0;
    OK(sk_mesh_group(mesh, r, axes, ranks, SK_MAX_DEVICES, &n, E));
    for (int i = 1; i < n; i++) /* ascending, as the clocks take a group */
      for (int j = i; j > 0 && ranks[j - 1] > ranks[j]; j--) {
        int t = ranks[j];
        ranks[j] = ranks[j - 1], ranks[j - 1] = t;
      }
    sk_coll_algo algo;
    double us = 0;
    OK(sk_cluster_coll_us(c, kind, count, dt, n, ranks, &algo, &us, E));
    worst = us > worst ? us : worst;
  }
  return worst;
}

/* What the dry run charges a Move from `from` to `to` (sk_dryrun_clock.h), worked out here from
   the layouts themselves: the agreement (AllReduce of 3 x i64 over the devices), then each step
   of the redistribution plan -- a collective on its dearest group, a Send/Recv exchange at its
   busiest rank. */
static double dryrun_move_us(const sk_layout *from, const sk_layout *to, const sk_cluster *c) {
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = *from, rd.to = *to, rd.dtype = SK_F32;
  sk_mesh all;
  int n = from->mesh.size;
  OK(sk_mesh_init(&all, 1, &n, (const char *const[]){"all"}, E));
  double us = dearest_group_us(c, SK_COLL_ALLREDUCE, 3, SK_I64, &all, 1u);
  sk_redist_plan *rp = NULL;
  OK(sk_redist_plan_create(&rd, SK_REDIST_ALL_RANKS, &rp, E));
  for (int k = 0; k < sk_redist_plan_nsteps(rp); k++) {
    sk_redist_step_info si;
    OK(sk_redist_plan_step(rp, k, &si, E));
    double worst = 0;
    if (si.op == SK_REDIST_SENDRECV)
      for (int r = 0; r < n; r++) {
        double t = 0;
        OK(sk_redist_step_clock_us(rp, k, r, c, NULL, &t, E));
        worst = t > worst ? t : worst;
      }
    else if (si.op != SK_REDIST_LOCAL && si.op != SK_REDIST_RESHAPE)
      worst = dearest_group_us(c,
                               si.op == SK_REDIST_ALLREDUCE        ? SK_COLL_ALLREDUCE
                               : si.op == SK_REDIST_REDUCE_SCATTER ? SK_COLL_REDUCE_SCATTER
                               : si.op == SK_REDIST_ALLGATHER      ? SK_COLL_ALLGATHER
                                                                   : SK_COLL_ALLTOALL,
                               si.count, SK_F32, &si.from->mesh, si.group_axes);
    us += worst;
  }
  sk_redist_plan_destroy(rp);
  return us;
}

/* Link mode: the dry run's price of the Move -- its agreement, then its plan's collectives. On
   2 devices rows -> whole is one AllGather of the 32 elements a device holds. */
Test(search, redistribution_link_mode) {
  static net n;
  sk_search_model m;
  sk_link_model link = {5, 10}; /* 5 us, 10 GB/s = 1e4 bytes per us */
  tiny_model(2, link, &m, &n);
  sk_search_sig rows = sig2(2, 1, 1, 0), whole = sig2(1, 0, 1, 0), cols = sig2(1, 0, 2, 1);
  double bytes = -1;
  double agreement = sk_link_cost_us(&link, SK_COLL_ALLREDUCE, 3, SK_I64, 2);
  cr_assert_float_eq(sk_search_redist_cost(&m, &rows, &whole, 64, SK_F32, &bytes),
                     agreement + sk_link_cost_us(&link, SK_COLL_ALLGATHER, 32, SK_F32, 2), 1e-12);
  cr_assert_float_eq(bytes, 128, 1e-9);
  sk_cluster flat;
  memset(&flat, 0, sizeof flat);
  flat.link = link;
  static const int mesh[3] = {2, 1, 1};
  sk_layout r = mesh_layout(mesh, 0, -1, 8, 8), c = mesh_layout(mesh, -1, 0, 8, 8);
  cr_assert_float_eq(sk_search_redist_cost(&m, &rows, &cols, 64, SK_F32, &bytes), dryrun_move_us(&r, &c, &flat), 1e-12);
  cr_assert_float_eq(bytes, 64, 1e-9);
  /* to a part of what a device holds: no data moves, the agreement remains */
  cr_assert_float_eq(sk_search_redist_cost(&m, &whole, &rows, 64, SK_F32, &bytes), agreement, 1e-12);
  cr_assert_eq(bytes, 0);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* Random valid cut pairs on 8 devices (a mesh of factors, each tensor dim on one axis or none)
   against the element-by-element count. */
Test(search, redistribution_matches_brute_force) {
  static net n;
  sk_search_model m;
  sk_link_model none = {0, 0};
  tiny_model(8, none, &m, &n);
  static const int meshes[][3] = {{2, 2, 2}, {2, 4, 1}, {4, 2, 1}, {8, 1, 1}, {1, 8, 1}, {2, 1, 4}};
  uint64_t s = 12345;
  for (int trial = 0; trial < 400; trial++) {
    sk_search_sig sg[2];
    for (int k = 0; k < 2; k++) {
      s = mix(s);
      const int *mesh = meshes[s % 6];
      int stride[3] = {mesh[1] * mesh[2], mesh[2], 1};
      int ax0 = (int)((s >> 8) % 4) - 1, ax1 = (int)((s >> 16) % 4) - 1; /* -1: whole */
      if (ax1 == ax0) ax1 = -1;
      sg[k] = sig2(ax0 >= 0 ? mesh[ax0] : 1, ax0 >= 0 ? stride[ax0] : 0, ax1 >= 0 ? mesh[ax1] : 1, ax1 >= 0 ? stride[ax1] : 0);
    }
    double bytes = -1;
    sk_search_redist_cost(&m, &sg[0], &sg[1], 8 * 16, SK_F32, &bytes);
    double want = memcmp(&sg[0], &sg[1], sizeof sg[0]) ? brute_redist(&sg[0], &sg[1], 8, 16, 8, 4) : 0;
    cr_assert_float_eq(bytes, want, 1e-9, "trial %d: (%d/%d, %d/%d) -> (%d/%d, %d/%d): %g bytes, brute force %g", trial,
                       sg[0].dim[0].count, sg[0].dim[0].stride, sg[0].dim[1].count, sg[0].dim[1].stride, sg[1].dim[0].count,
                       sg[1].dim[0].stride, sg[1].dim[1].count, sg[1].dim[1].stride, bytes, want);
  }
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* Link mode against the dry run's Move worked out from the layouts themselves (on meshes the
   model never builds: three axes, some of size 1), flat and on a topology of 2 nodes. */
Test(search, redistribution_link_mode_matches_brute_force) {
  static net n;
  sk_search_model m[2];
  sk_link_model link = {3, 20};
  tiny_model(8, link, &m[0], &n);
  sk_search_desc td = sdesc(8);
  td.cluster.topology = (sk_topology){2, 4, {1, 100}, {10, 10}};
  build_model(&n.g, &td, &m[1]);
  sk_cluster cl[2];
  memset(cl, 0, sizeof cl);
  cl[0].link = link, cl[1] = td.cluster;
  static const int meshes[][3] = {{2, 2, 2}, {2, 4, 1}, {4, 2, 1}, {8, 1, 1}, {1, 8, 1}, {2, 1, 4}, {1, 2, 4}, {4, 1, 2}};
  uint64_t s = 777;
  int moved = 0;
  for (int trial = 0; trial < 400; trial++) {
    sk_search_sig sg[2];
    sk_layout l[2];
    for (int k = 0; k < 2; k++) {
      s = mix(s);
      const int *mesh = meshes[s % 8];
      int stride[3] = {mesh[1] * mesh[2], mesh[2], 1};
      int ax0 = (int)((s >> 8) % 4) - 1, ax1 = (int)((s >> 16) % 4) - 1;
      if (ax1 == ax0) ax1 = -1;
      sg[k] = sig2(ax0 >= 0 ? mesh[ax0] : 1, ax0 >= 0 ? stride[ax0] : 0, ax1 >= 0 ? mesh[ax1] : 1, ax1 >= 0 ? stride[ax1] : 0);
      l[k] = mesh_layout(mesh, ax0, ax1, 16, 16);
    }
    if (!memcmp(&sg[0], &sg[1], sizeof sg[0])) continue;
    for (int c = 0; c < 2; c++) {
      double want = dryrun_move_us(&l[0], &l[1], &cl[c]);
      double got = sk_search_redist_cost(&m[c], &sg[0], &sg[1], 256, SK_F32, NULL);
      cr_assert_float_eq(got, want, 1e-9 * want, "trial %d, %s: (%d/%d, %d/%d) -> (%d/%d, %d/%d): %.12g us, dry run %.12g",
                         trial, c ? "topology" : "flat", sg[0].dim[0].count, sg[0].dim[0].stride, sg[0].dim[1].count,
                         sg[0].dim[1].stride, sg[1].dim[0].count, sg[1].dim[0].stride, sg[1].dim[1].count,
                         sg[1].dim[1].stride, got, want);
    }
    moved += brute_redist(&sg[0], &sg[1], 16, 16, 8, 4) > 0;
  }
  cr_assert_gt(moved, 100);
  sk_search_model_free(&m[1]);
  sk_search_model_free(&m[0]);
  sk_graph_free(&n.g);
}

/* ---- 3. random MLPs: exhaustive against brute force; propagation and D-Rec above it -------- */

static void random_round(sk_link_model link, double tflops) {
  static const int counts[4] = {2, 4, 6, 8};
  int nets = 0, prop_opt = 0, drec_opt = 0;
  for (int ci = 0; ci < 4; ci++)
    for (uint64_t seed = 1; seed <= 6; seed++) {
      static net n;
      random_mlp(&n, seed * 7919 + (uint64_t)counts[ci], counts[ci], NULL, NULL);
      sk_search_desc d = sdesc(counts[ci]);
      d.cluster.link = link, d.cluster.device_flops = tflops * 1e12;
      sk_search_model m;
      build_model(&n.g, &d, &m);
      char what[512], buf[400];
      snprintf(what, sizeof what, "%d devices, seed %llu (%s)", counts[ci], (unsigned long long)seed, describe(&n.g, buf, sizeof buf));
      search_costs sc = check_searches(&m, what);
      nets++, prop_opt += relerr(sc.prop, sc.opt) <= 1e-12, drec_opt += relerr(sc.drec, sc.opt) <= 1e-12;
      sk_search_model_free(&m);
      sk_graph_free(&n.g);
    }
  cr_log_info("random MLPs (link %g us, %g GB/s, %g TFLOPS): %d networks; propagation optimal on %d, D-Rec on %d", link.alpha_us,
              link.gbps, tflops, nets, prop_opt, drec_opt);
}

Test(search, exhaustive_equals_brute_force_bytes, .timeout = 120) {
  sk_link_model none = {0, 0};
  random_round(none, 0);
}

Test(search, exhaustive_equals_brute_force_link, .timeout = 120) {
  sk_link_model link = {5, 25};
  random_round(link, 10);
}

/* A seeded random DAG: activations [B, D] all, each operator a MatMul (of a fresh or an already
   used weight: parameter edges), ReLU, Add or Mul of random earlier activations; every
   activation no operator read is summed into the loss's input. Frontiers of several operators,
   parameters shared across the graph. */
static void random_dag(net *n, uint64_t seed, int64_t B, int64_t D, int nops) {
  sk_graph_init(&n->g), n->nin = 0;
  uint64_t s = seed;
  int act[32], nact = 0, wts[8], nw = 0;
  bool used[32] = {false};
  act[nact++] = add_input(n, "x", SK_F32, 2, SH2(B, D), 0);
  int y = add_input(n, "y", SK_I32, 1, SH1(B), D);
  char name[32];
  for (int l = 0; l < nops; l++) {
    int kind = l == 0 ? 0 : pick(&s, 4), a = pick(&s, nact), b = pick(&s, nact);
    snprintf(name, sizeof name, "op%d", l);
    sk_graph_op op;
    if (kind == 0) {
      int w;
      if (nw > 0 && pick(&s, 3) == 0) w = wts[pick(&s, nw)];
      else {
        char wn[16];
        snprintf(wn, sizeof wn, "w%d", nw);
        w = wts[nw++] = add_param(n, wn, 2, SH2(D, D), SK_INIT_XAVIER_UNIFORM, 0);
      }
      op = OP(name, SK_OP_MATMUL, act[a], w);
    } else if (kind == 1) op = OP(name, SK_OP_RELU, act[a]);
    else op = OP(name, kind == 2 ? SK_OP_ADD : SK_OP_MUL, act[a], act[b]), used[b] = true;
    used[a] = true;
    act[nact++] = add_op(n, op);
  }
  int h = act[nact - 1], k = 0;
  for (int i = 1; i < nact - 1; i++) /* the loose ends, summed in */
    if (!used[i]) {
      snprintf(name, sizeof name, "end%d", k++);
      h = add_op(n, OP(name, SK_OP_ADD, h, act[i]));
    }
  OK(sk_graph_set_loss(&n->g, add_op(n, OP("loss", SK_OP_SOFTMAX_CE, h, y)), E));
}

Test(search, exhaustive_equals_brute_force_random_dags, .timeout = 120) {
  int nets = 0, widest = 0;
  for (uint64_t seed = 1; seed <= 40; seed++) {
    static net n;
    int N = seed % 3 == 0 ? 4 : 2;
    random_dag(&n, seed * 1009, 16, 8, N == 2 ? 7 : 5);
    for (int linked = 0; linked < 2; linked++) {
      sk_search_desc d = sdesc(N);
      if (linked) d.cluster.link.alpha_us = 3, d.cluster.link.gbps = 12, d.cluster.device_flops = 5e12;
      sk_search_model m;
      build_model(&n.g, &d, &m);
      double combos = 1;
      for (int o = 0; o < n.g.nops; o++) combos *= m.ncands[o];
      if (combos <= 2e6) {
        char what[700], buf[600];
        snprintf(what, sizeof what, "DAG seed %llu on %d%s (%s)", (unsigned long long)seed, N, linked ? ", link" : "",
                 describe(&n.g, buf, sizeof buf));
        check_searches(&m, what);
        nets++;
      }
      /* the widest frontier: operators decided with a neighbour still to come */
      for (int v = 0; v < n.g.nops; v++) {
        int wide = 0;
        for (int u = 0; u <= v; u++) {
          bool later = false;
          for (int i = 0; i < m.nadj[u]; i++) {
            const sk_search_edge *e = &m.edges[m.adj[u][i]];
            later = later || (e->src == u ? e->dst : e->src) > v;
          }
          wide += later;
        }
        widest = wide > widest ? wide : widest;
      }
      sk_search_model_free(&m);
    }
    sk_graph_free(&n.g);
  }
  cr_assert_geq(nets, 40);
  cr_assert_geq(widest, 3, "the DAGs should hold frontiers of several operators");
  cr_log_info("random DAGs: %d models, the widest frontier %d operators", nets, widest);
}

Test(search, exhaustive_refuses_naming_the_operator) {
  static net n;
  random_mlp(&n, 99, 8, NULL, NULL);
  sk_search_desc d = sdesc(8);
  d.exhaustive_limit = 1;
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int choice[16];
  char want[SK_GRAPH_NAME_MAX + 32];
  snprintf(want, sizeof want, "at operator '%s'", n.g.ops[0].name);
  BAD(want, sk_search_exhaustive(&m, choice, E));
  BAD("too large to search exactly", sk_search_exhaustive(&m, choice, E));
  /* the default limit (2e8 steps) passes */
  m.desc.exhaustive_limit = 0;
  OK(sk_search_exhaustive(&m, choice, E));
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* Configured operators keep their one candidate through every search, and the exact search
   still equals the brute force around them. */
Test(search, configured_operators_keep_their_strategies) {
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int x = add_input(&n, "x", SK_F32, 2, SH2(16, 16), 0), y = add_input(&n, "y", SK_I32, 1, SH1(16), 8);
  int w1 = add_param(&n, "w1", 2, SH2(16, 32), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(&n, "w2", 2, SH2(32, 8), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op fc1 = OP("fc1", SK_OP_MATMUL, x, w1);
  SHARD(fc1, 0, 2, 2), SHARD(fc1, 1, 2, 2);
  int h = add_op(&n, OP("relu", SK_OP_RELU, add_op(&n, fc1)));
  int z = add_op(&n, OP("fc2", SK_OP_MATMUL, h, w2));
  OK(sk_graph_set_loss(&n.g, add_op(&n, OP("loss", SK_OP_SOFTMAX_CE, z, y)), E));
  sk_search_desc d = sdesc(8);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int o = op_named(&n.g, "fc1");
  cr_assert(m.configured[o]);
  cr_assert_eq(m.ncands[o], 1);
  cr_assert_eq(m.cands[o][0].kind, SK_SEARCH_CAND_CONFIGURED);
  char buf[64];
  sk_search_format_strategy(&m, o, &m.cands[o][0], buf, sizeof buf);
  cr_assert_str_eq(buf, "((2, 2), (2, 2))");
  check_searches(&m, "fc1 configured ((2,2),(2,2))");
  sk_search_model_free(&m);
  /* through the compiler, in every search mode: fc1 as written, the others searched */
  for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++) {
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.ndevices = 8, pd.mode = (sk_parallel_mode)mode;
    sk_parallel_plan p;
    OK(sk_parallel_compile(&n.g, &pd, &p, E));
    cr_assert_not_null(p.searched);
    cr_assert(!p.searched[o]);
    cr_assert(p.searched[op_named(p.graph, "fc2")] && p.searched[op_named(p.graph, "relu")]);
    const sk_op_desc *pdesc = &p.ops[o].desc;
    cr_assert(pdesc->has_strategy && pdesc->strategy[0][0] == 2 && pdesc->strategy[0][1] == 2 && pdesc->strategy[1][0] == 2 &&
              pdesc->strategy[1][1] == 2);
    cr_assert_neq(p.graph, &n.g, "a search mode plans its own copy of the network");
    cr_assert(!n.g.ops[op_named(&n.g, "fc2")].desc.has_strategy, "the caller's network is left as it was");
    cr_assert_eq(p.nfallbacks, 0);
    sk_parallel_free(&p);
  }
  sk_graph_free(&n.g);
}

/* The optimum's strategy on the heaviest operator as the network's own: the exact search then
   finds the same optimum, and propagation from that anchor is never below it. */
Test(search, propagation_from_the_optimums_anchor, .timeout = 60) {
  for (uint64_t seed = 1; seed <= 8; seed++) {
    static net n;
    int N = seed % 2 ? 8 : 4;
    random_mlp(&n, seed * 31 + 5, N, NULL, NULL);
    sk_search_desc d = sdesc(N);
    sk_search_model m;
    build_model(&n.g, &d, &m);
    int ex[16];
    OK(sk_search_exhaustive(&m, ex, E));
    double opt = sk_search_plan_cost(&m, ex);
    /* the heaviest: the most multiply-adds among the MatMuls and Denses */
    int heavy = -1;
    double most = -1;
    for (int o = 0; o < n.g.nops; o++) {
      sk_op_kind k = n.g.ops[o].desc.kind;
      if (k != SK_OP_MATMUL && k != SK_OP_DENSE) continue;
      double f = (double)m.joint_size[o][0] * (double)m.joint_size[o][1] * (double)m.joint_size[o][2];
      if (f > most) most = f, heavy = o;
    }
    cr_assert_geq(heavy, 0);
    sk_search_cand anchor = m.cands[heavy][ex[heavy]];
    char name[SK_GRAPH_NAME_MAX];
    snprintf(name, sizeof name, "%s", n.g.ops[heavy].name);
    sk_search_model_free(&m);
    sk_graph_free(&n.g);
    if (!strcmp(name, "head")) continue; /* the head is not one random_mlp can anchor */
    random_mlp(&n, seed * 31 + 5, N, name, &anchor);
    build_model(&n.g, &d, &m);
    int a = op_named(&n.g, name), pr[16], ex2[16];
    cr_assert(m.configured[a]);
    OK(sk_search_exhaustive(&m, ex2, E));
    double opt2 = sk_search_plan_cost(&m, ex2);
    cr_assert(relerr(opt2, opt) <= 1e-12, "seed %llu: anchored at the optimum's %s, the optimum moved: %.17g, was %.17g",
              (unsigned long long)seed, name, opt2, opt);
    OK(sk_search_propagate(&m, pr, E));
    cr_assert_eq(pr[a], 0);
    double prop = sk_search_plan_cost(&m, pr);
    cr_assert(prop >= opt * (1 - 1e-12));
    cr_log_info("seed %llu on %d: anchored at %s, propagation %.6g, optimum %.6g", (unsigned long long)seed, N, name, prop, opt);
    sk_search_model_free(&m);
    sk_graph_free(&n.g);
  }
}

/* D-Rec on 4096 devices: every operator's cuts use them all, or no joint dim takes another
   factor its rule accepts. */
Test(search, recursive_on_4096_devices, .timeout = 120) {
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int x = add_input(&n, "x", SK_F32, 2, SH2(64, 128), 0), y = add_input(&n, "y", SK_I32, 1, SH1(64), 16);
  int w1 = add_param(&n, "w1", 2, SH2(128, 256), SK_INIT_XAVIER_UNIFORM, 0);
  int w2 = add_param(&n, "w2", 2, SH2(256, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int h = add_op(&n, OP("relu", SK_OP_RELU, add_op(&n, OP("fc1", SK_OP_MATMUL, x, w1))));
  int z = add_op(&n, OP("fc2", SK_OP_MATMUL, h, w2));
  OK(sk_graph_set_loss(&n.g, add_op(&n, OP("loss", SK_OP_SOFTMAX_CE, z, y)), E));
  sk_search_desc d = sdesc(4096);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int choice[8];
  OK(sk_search_recursive(&m, choice, E));
  int full = 0;
  for (int o = 0; o < n.g.nops; o++) {
    const sk_search_cand *c = &m.cands[o][choice[o]];
    cr_assert_eq(4096 % c->devices, 0, "%s: %d devices", n.g.ops[o].name, c->devices);
    int prod = 1;
    for (int e = 0; e < m.njoint[o]; e++) prod *= c->joint[e];
    cr_assert_eq(prod, c->devices);
    if (c->devices == 4096) {
      full++;
      continue;
    }
    for (int e = 0; e < m.njoint[o]; e++) { /* exhausted: no dim takes another 2 */
      if ((m.joint_size[o][e] / c->joint[e]) % 2) continue;
      int joint[SK_SEARCH_MAX_JOINT];
      memcpy(joint, c->joint, sizeof joint);
      joint[e] *= 2;
      sk_search_cand t;
      sk_error e2;
      cr_assert_neq(sk_search_eval(&m, o, joint, &t, &e2), SK_OK, "%s: %d devices, but joint dim %d takes another 2",
                    n.g.ops[o].name, c->devices, e);
    }
  }
  /* fc1 (64 x 128 x 256 = 2^21 cuts) and relu (64 x 256) can use every device */
  cr_assert_eq(m.cands[op_named(&n.g, "fc1")][choice[op_named(&n.g, "fc1")]].devices, 4096);
  cr_assert_eq(m.cands[op_named(&n.g, "relu")][choice[op_named(&n.g, "relu")]].devices, 4096);
  cr_assert_geq(full, 2);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* D-Rec on 12 devices: a round of 3, then two of 2. MatMul [12,18]x[18,24] takes all three
   (12 devices, a strategy of the candidate list: nothing appended); on [16,16]x[16,16] the 3
   divides nothing and the plan uses 4 devices, again one of the candidates (the largest
   feasible count). */
Test(search, recursive_rounds_on_12_devices) {
  static const int64_t dims[2][3] = {{12, 18, 24}, {16, 16, 16}};
  static const int want[2] = {12, 4};
  for (int t = 0; t < 2; t++) {
    static net n;
    matmul_net(&n, dims[t][0], dims[t][1], dims[t][2], true);
    sk_search_desc d = sdesc(12);
    sk_search_model m;
    build_model(&n.g, &d, &m);
    int mm = op_named(&n.g, "mm"), before = m.ncands[mm], choice[2];
    OK(sk_search_recursive(&m, choice, E));
    const sk_search_cand *c = &m.cands[mm][choice[mm]];
    cr_assert_eq(c->devices, want[t], "[%lld,%lld]x[%lld,%lld]: %d devices", (long long)dims[t][0], (long long)dims[t][1],
                 (long long)dims[t][1], (long long)dims[t][2], c->devices);
    cr_assert_eq(m.ncands[mm], before, "D-Rec's strategy is a candidate: nothing appended");
    for (int e = 0; e < 3; e++) cr_assert_eq(dims[t][e] % c->joint[e], 0);
    sk_search_model_free(&m);
    sk_graph_free(&n.g);
  }
}

/* D-Rec's memory check names the bytes the plan needs and the device's. */
Test(search, recursive_memory_check_refuses) {
  static net n;
  matmul_net(&n, 16, 32, 64, false);
  sk_search_desc d = sdesc(8);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int choice[4];
  OK(sk_search_recursive(&m, choice, E));
  double need = sk_search_plan_memory(&m, choice);
  cr_assert_gt(need, 0);
  sk_search_model_free(&m);
  d.cluster.device_memory = need - 1;
  build_model(&n.g, &d, &m);
  char want[160];
  snprintf(want, sizeof want, "the strategies need %.0f bytes per device, the device has %.0f", need, need - 1);
  BAD(want, sk_search_recursive(&m, choice, E));
  sk_search_model_free(&m);
  d.cluster.device_memory = need; /* exactly enough */
  build_model(&n.g, &d, &m);
  OK(sk_search_recursive(&m, choice, E));
  sk_search_model_free(&m);
  /* through the compiler */
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = 8, pd.mode = SK_PARALLEL_RECURSIVE_PROGRAMMING, pd.cluster.device_memory = 1;
  sk_parallel_plan p;
  BAD("out of memory", sk_parallel_compile(&n.g, &pd, &p, E));
  sk_graph_free(&n.g);
}

/* Plan memory by hand: MatMul x [16,32] w [32,64] -> [16,64] and the loss, data parallel on 8
   (the first candidates), f32. The MatMul's output slice [2,64] = 512 bytes, w whole 8192, plus
   the loss's outputs (as the model gives them); the loss reads no parameter. */
Test(search, plan_memory_by_hand) {
  static net n;
  matmul_net(&n, 16, 32, 64, true);
  sk_search_desc d = sdesc(8);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int mm = op_named(&n.g, "mm"), loss = op_named(&n.g, "loss"), choice[2] = {0, 0};
  cr_assert(m.cands[mm][0].joint[0] == 8 && m.cands[mm][0].joint[1] == 1 && m.cands[mm][0].joint[2] == 1);
  double loss_out = m.cands[loss][0].out_bytes;
  cr_assert_float_eq(m.cands[mm][0].out_bytes, 2 * 64 * 4, 1e-9);
  cr_assert_float_eq(sk_search_plan_memory(&m, choice), 2 * 64 * 4 + 32 * 64 * 4 + loss_out, 1e-9);
  /* (1, 8, 1): w cut by rows, [4, 64]; the output partial, whole [16, 64] */
  for (int c = 0; c < m.ncands[mm]; c++)
    if (m.cands[mm][c].joint[1] == 8) {
      choice[mm] = c;
      cr_assert_float_eq(sk_search_plan_memory(&m, choice), 16 * 64 * 4 + 4 * 64 * 4 + loss_out, 1e-9);
      cr_assert_float_eq(m.cands[mm][c].memory, (16 * 4 + 4 * 64 + 16 * 64) * 4.0, 1e-9);
    }
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* A parameter an operator reads twice (Mul(w, w)) is stored once: on one device, the outputs
   sq [16,16], fc [16,16], z [16,8] (f32) and the loss's, plus w [16,16] and u [16,8] once each.
   Before the fix w was counted once per slot (1024 bytes more), so D-Rec's memory check refused
   plans that fit. */
Test(search, plan_memory_parameter_read_twice_counted_once) {
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int x = add_input(&n, "x", SK_F32, 2, SH2(16, 16), 0), y = add_input(&n, "y", SK_I32, 1, SH1(16), 8);
  int w = add_param(&n, "w", 2, SH2(16, 16), SK_INIT_XAVIER_UNIFORM, 0);
  int ww = add_op(&n, OP("sq", SK_OP_MUL, w, w));
  loss_head(&n, add_op(&n, OP("fc", SK_OP_MATMUL, x, ww)), y, "u", 16, 8);
  sk_search_desc d = sdesc(1);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int choice[4] = {0, 0, 0, 0}, loss = op_named(&n.g, "loss");
  double want = 1024 + 1024 + 512 + m.cands[loss][0].out_bytes + 1024 + 512;
  cr_assert_float_eq(sk_search_plan_memory(&m, choice), want, 1e-9, "plan memory %.0f, want %.0f",
                     sk_search_plan_memory(&m, choice), want);
  sk_search_model_free(&m);
  /* on 2 devices, data parallel: every slice halves (w's rows cut by sq's (2, 1)) */
  d = sdesc(2);
  build_model(&n.g, &d, &m);
  int sq = op_named(&n.g, "sq"), z = op_named(&n.g, "z");
  cr_assert(m.cands[sq][0].in[0].dim[0].count == 2 && m.cands[z][0].in[1].dim[0].count == 1);
  want = 512 + 512 + 256 + m.cands[loss][0].out_bytes + 512 + 512; /* u whole: z's data parallel */
  cr_assert_float_eq(sk_search_plan_memory(&m, choice), want, 1e-9, "plan memory %.0f, want %.0f",
                     sk_search_plan_memory(&m, choice), want);
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* ---- 4. compile in every mode, train on 8 thread devices against one ---------------------- */

static void load_rp(net *n) {
  sk_graph_init(&n->g);
  OK(sk_json_load_network(RP_NET, &n->g, E));
  n->nin = 2, n->range[0] = 0, n->range[1] = 0; /* image, label: both f32 */
}

/* Writes op o's strategy as the plan holds it, independently of the library's printer. */
static void expected_line(const sk_parallel_plan *p, int o, char *buf, size_t cap) {
  const sk_op_desc *d = &p->ops[o].desc;
  size_t at = (size_t)snprintf(buf, cap, "%s (", p->graph->ops[o].name);
  int nt = d->has_strategy && d->nstrategies ? d->nstrategies : p->graph->ops[o].ninputs;
  for (int k = 0; k < nt; k++) {
    int len = d->has_strategy ? (d->strategy_len[k] ? d->strategy_len[k] : d->ndims[k]) : p->ops[o].plan.in[k].ndims;
    at += (size_t)snprintf(buf + at, cap - at, "%s(", k ? ", " : "");
    for (int e = 0; e < len; e++)
      at += (size_t)snprintf(buf + at, cap - at, "%s%d", e ? ", " : "",
                             d->has_strategy ? d->strategy[k][e] : sk_layout_split_count(&p->ops[o].plan.in[k], e));
    at += (size_t)snprintf(buf + at, cap - at, "%s)", len == 1 ? "," : "");
  }
  snprintf(buf + at, cap - at, "%s)\n", nt == 1 ? "," : "");
}

static void assert_format_strategies(const sk_parallel_plan *p, const char *what) {
  char text[4096], line[256], *at = text;
  size_t len = sk_parallel_format_strategies(p, text, sizeof text);
  cr_assert_lt(len, sizeof text);
  cr_assert_eq(len, strlen(text));
  cr_assert_eq(sk_parallel_format_strategies(p, NULL, 0), len, "snprintf convention");
  for (int o = 0; o < p->graph->nops; o++) {
    expected_line(p, o, line, sizeof line);
    cr_assert(!strncmp(at, line, strlen(line)), "%s: line %d is '%.*s', want '%s'", what, o, (int)strcspn(at, "\n"), at, line);
    at += strlen(line);
  }
  cr_assert_eq(*at, 0, "%s: more lines than operators: '%s'", what, at);
}

static void train_mode(sk_parallel_mode mode) {
  static net n;
  static run R;
  load_rp(&n);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.mode = mode;
  run_init_knobs(&R, &n, 8, SK_F64, sgd(0.01), 5, &pd);
  const char *what = sk_parallel_mode_name(mode);
  cr_assert_eq(R.plan.nfallbacks, 0, "%s: %d fell back", what, R.plan.nfallbacks);
  int searched = 0;
  for (int o = 0; mode != SK_PARALLEL_SEMI_AUTO && o < R.plan.graph->nops; o++) {
    bool getnext = R.plan.graph->ops[o].desc.kind == SK_OP_GET_NEXT || R.plan.graph->ops[o].desc.kind == SK_OP_VIRTUAL_DATASET;
    cr_assert(R.plan.searched[o] || getnext, "%s: '%s' not searched", what, R.plan.graph->ops[o].name);
    searched += R.plan.searched[o];
    if (R.plan.searched[o]) cr_assert(R.plan.ops[o].desc.has_strategy, "%s: '%s' searched without a strategy", what, R.plan.graph->ops[o].name);
  }
  if (mode != SK_PARALLEL_SEMI_AUTO) cr_assert(R.plan.search_cost > 0 && R.plan.search_ms >= 0);
  else cr_assert_null(R.plan.searched);
  assert_format_strategies(&R.plan, what);
  char text[4096];
  sk_parallel_format_strategies(&R.plan, text, sizeof text);
  cr_log_info("%s on 8 devices (cost %g, %d searched):\n%s", what, R.plan.search_cost, searched, text);
  run_world(&R);
  expect_all_ok(&R, what);
  errs m = against_trainer(&R, TOL64, what);
  cr_log_info("%s: 8 devices vs one, 5 steps f64: losses within %.3g, parameters within %.3g", what, m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(search, train_semi_auto_rp_net, .timeout = RT_TIMEOUT) { train_mode(SK_PARALLEL_SEMI_AUTO); }
Test(search, train_sharding_propagation_rp_net, .timeout = RT_TIMEOUT) { train_mode(SK_PARALLEL_SHARDING_PROPAGATION); }
Test(search, train_recursive_programming_rp_net, .timeout = RT_TIMEOUT) { train_mode(SK_PARALLEL_RECURSIVE_PROGRAMMING); }
Test(search, train_exhaustive_rp_net, .timeout = RT_TIMEOUT) { train_mode(SK_PARALLEL_EXHAUSTIVE); }

/* The exhaustive plan of the network is the least of the three modes' costs. */
Test(search, modes_costs_on_rp_net, .timeout = 120) {
  static net n;
  load_rp(&n);
  double cost[4] = {0};
  for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++) {
    sk_autoparallel pd;
    memset(&pd, 0, sizeof pd);
    pd.ndevices = 8, pd.mode = (sk_parallel_mode)mode;
    sk_parallel_plan p;
    OK(sk_parallel_compile(&n.g, &pd, &p, E));
    cost[mode] = p.search_cost;
    sk_parallel_free(&p);
  }
  cr_assert(cost[SK_PARALLEL_EXHAUSTIVE] <= cost[SK_PARALLEL_SHARDING_PROPAGATION] * (1 + 1e-12));
  cr_assert(cost[SK_PARALLEL_EXHAUSTIVE] <= cost[SK_PARALLEL_RECURSIVE_PROGRAMMING] * (1 + 1e-12));
  cr_log_info("rp net on 8: propagation %g, D-Rec %g, exhaustive %g", cost[1], cost[2], cost[3]);
  sk_graph_free(&n.g);
}

/* sk_search_apply writes what the search chose: the compiled network (its strategies now set,
   every operator configured) modelled again costs exactly plan.search_cost. */
static void assert_applied_cost(const sk_graph *g, int N, sk_parallel_mode mode, const char *what) {
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = N, pd.mode = mode;
  sk_parallel_plan p;
  OK(sk_parallel_compile(g, &pd, &p, E));
  sk_search_desc d = sdesc(N);
  sk_search_model m;
  build_model(p.graph, &d, &m);
  int *zero = (int *)calloc((size_t)p.graph->nops, sizeof(int));
  cr_assert_not_null(zero);
  for (int o = 0; o < p.graph->nops; o++) cr_assert(m.configured[o] && m.ncands[o] == 1, "%s: '%s' left unset", what, p.graph->ops[o].name);
  double again = sk_search_plan_cost(&m, zero);
  cr_assert(relerr(again, p.search_cost) <= 1e-12, "%s (%s): the applied strategies cost %.17g, the search reported %.17g", what,
            sk_parallel_mode_name(mode), again, p.search_cost);
  free(zero);
  sk_search_model_free(&m);
  sk_parallel_free(&p);
}

Test(search, applied_strategies_cost_what_the_search_reported, .timeout = 60) {
  static net n;
  load_rp(&n);
  for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++)
    assert_applied_cost(&n.g, 8, (sk_parallel_mode)mode, "recursive_programming.json");
  sk_graph_free(&n.g);
  static const int counts[4] = {2, 4, 6, 8};
  for (int ci = 0; ci < 4; ci++)
    for (uint64_t seed = 1; seed <= 4; seed++) {
      random_mlp(&n, seed * 7919 + (uint64_t)counts[ci], counts[ci], NULL, NULL);
      for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++)
        assert_applied_cost(&n.g, counts[ci], (sk_parallel_mode)mode, "random MLP");
      sk_graph_free(&n.g);
    }
}

/* A searched plan saved as an operator strategy file (sk_strategy.h) and loaded in semi_auto
   compiles to the same strategies. */
Test(search, searched_strategies_saved_and_loaded) {
  static net n;
  load_rp(&n);
  char path[64];
  snprintf(path, sizeof path, "/tmp/sk_test_search_%d.json", (int)getpid());
  for (int mode = SK_PARALLEL_SHARDING_PROPAGATION; mode <= SK_PARALLEL_EXHAUSTIVE; mode++) {
    sk_autoparallel d;
    memset(&d, 0, sizeof d);
    d.ndevices = 8, d.mode = (sk_parallel_mode)mode, d.save_operator_strategy_file = path;
    d.strategy_io = sk_strategy_io();
    sk_parallel_plan p, q;
    OK(sk_parallel_compile(&n.g, &d, &p, E));
    memset(&d, 0, sizeof d);
    d.ndevices = 8, d.load_operator_strategy_file = path, d.strategy_io = sk_strategy_io();
    OK(sk_parallel_compile(&n.g, &d, &q, E));
    char a[2048], b[2048];
    sk_parallel_format_strategies(&p, a, sizeof a), sk_parallel_format_strategies(&q, b, sizeof b);
    cr_assert_str_eq(a, b, "%s: searched\n%s\nloaded from its file\n%s", sk_parallel_mode_name((sk_parallel_mode)mode), a, b);
    cr_assert_null(q.searched);
    sk_parallel_free(&p), sk_parallel_free(&q);
  }
  remove(path);
  sk_graph_free(&n.g);
}

/* Compiling from a strategy file writes the loaded strategies into the plan's own copy of the
   network: the caller's network stays byte for byte as it was, and the loaded plan trains as the
   searched plan did (the same losses and parameters on every device). */
Test(search, a_loaded_file_trains_as_searched_and_leaves_the_network_alone, .timeout = 60) {
  static net n;
  load_rp(&n);
  char path[64];
  snprintf(path, sizeof path, "/tmp/sk_test_search_load_%d.json", (int)getpid());
  sk_autoparallel save, again;
  memset(&save, 0, sizeof save), memset(&again, 0, sizeof again);
  save.mode = SK_PARALLEL_SHARDING_PROPAGATION, save.save_operator_strategy_file = path;
  save.strategy_io = again.strategy_io = sk_strategy_io();
  again.load_operator_strategy_file = path;
  static run A, B;
  run_knobs(&A, &n, 8, SK_F64, sgd(0.01), 4, &save, "searched");
  size_t ops_bytes = (size_t)n.g.nops * sizeof *n.g.ops, tensors_bytes = (size_t)n.g.ntensors * sizeof *n.g.tensors;
  void *ops = malloc(ops_bytes), *tensors = malloc(tensors_bytes);
  cr_assert(ops && tensors);
  memcpy(ops, n.g.ops, ops_bytes), memcpy(tensors, n.g.tensors, tensors_bytes);
  run_knobs(&B, &n, 8, SK_F64, sgd(0.01), 4, &again, "loaded");
  cr_assert(!memcmp(ops, n.g.ops, ops_bytes), "the caller's operators changed");
  cr_assert(!memcmp(tensors, n.g.tensors, tensors_bytes), "the caller's tensors changed");
  cr_assert(B.plan.graph != &n.g && B.plan.graph == B.plan.micro_graph, "the plan compiles its own copy");
  int loaded = 0;
  for (int o = 0; o < n.g.nops; o++) loaded += B.plan.graph->ops[o].desc.has_strategy && !n.g.ops[o].desc.has_strategy;
  cr_assert_gt(loaded, 0, "the copy holds strategies the caller's network lacks");
  for (int d = 0; d < 8; d++) {
    for (int s = 0; s < 4; s++) cr_assert_eq(A.dev[d].loss[s], B.dev[d].loss[s], "device %d step %d: the loss", d, s);
    cr_assert(!memcmp(A.dev[d].params, B.dev[d].params, A.params_bytes), "device %d: the parameters", d);
  }
  free(ops), free(tensors);
  run_free(&A), run_free(&B);
  remove(path);
  sk_graph_free(&n.g);
}

Test(search, format_strategies_exact_lines) {
  static net n;
  sk_graph_init(&n.g), n.nin = 0;
  int x = add_input(&n, "x", SK_F32, 2, SH2(16, 32), 0), y = add_input(&n, "y", SK_I32, 1, SH1(16), 8);
  int w = add_param(&n, "w", 2, SH2(32, 8), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op mm = OP("mm", SK_OP_MATMUL, x, w);
  SHARD(mm, 0, 2, 4), SHARD(mm, 1, 4, 1);
  OK(sk_graph_set_loss(&n.g, add_op(&n, OP("loss", SK_OP_SOFTMAX_CE, add_op(&n, mm), y)), E));
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = 8;
  sk_parallel_plan p;
  OK(sk_parallel_compile(&n.g, &pd, &p, E));
  char text[256];
  cr_assert_eq(sk_parallel_format_strategies(&p, text, sizeof text), strlen("mm ((2, 4), (4, 1))\nloss ((8, 1), (8,))\n"));
  cr_assert_str_eq(text, "mm ((2, 4), (4, 1))\nloss ((8, 1), (8,))\n");
  char small[8];
  cr_assert_eq(sk_parallel_format_strategies(&p, small, sizeof small), strlen(text));
  cr_assert_str_eq(small, "mm ((2,");
  sk_parallel_free(&p);
  cr_assert_eq(sk_parallel_format_strategies(NULL, text, sizeof text), 0);
  cr_assert_str_eq(text, "");
  sk_graph_free(&n.g);
}

/* ---- 6. errors and names ------------------------------------------------------------------ */

Test(search, null_and_bad_arguments) {
  static net n;
  matmul_net(&n, 16, 32, 64, false);
  sk_search_desc d = sdesc(8);
  sk_search_model m;
  int choice[4];
  BAD("NULL", sk_search_model_build(NULL, &d, &m, E));
  BAD("NULL", sk_search_model_build(&n.g, NULL, &m, E));
  BAD("NULL", sk_search_model_build(&n.g, &d, NULL, E));
  d.ndevices = 0;
  BAD("0 devices", sk_search_model_build(&n.g, &d, &m, E));
  d.ndevices = SK_MAX_DEVICES + 1;
  BAD("devices", sk_search_model_build(&n.g, &d, &m, E));
  d = sdesc(8), d.cluster.link.gbps = -1;
  BAD("cluster.link", sk_search_model_build(&n.g, &d, &m, E));
  d = sdesc(8), d.cluster.device_memory = -1;
  BAD("device_memory", sk_search_model_build(&n.g, &d, &m, E));
  d = sdesc(8), d.cluster.topology = (sk_topology){2, 4, {2, 150}, {10, 25}};
  /* a topology is priced (the groups' real ranks), not refused */
  OK(sk_search_model_build(&n.g, &d, &m, E));
  sk_search_model_free(&m);
  BAD("NULL", sk_search_propagate(NULL, choice, E));
  BAD("NULL", sk_search_recursive(NULL, choice, E));
  BAD("NULL", sk_search_exhaustive(NULL, choice, E));
  d = sdesc(8);
  build_model(&n.g, &d, &m);
  BAD("NULL", sk_search_propagate(&m, NULL, E));
  BAD("NULL", sk_search_recursive(&m, NULL, E));
  BAD("NULL", sk_search_exhaustive(&m, NULL, E));
  sk_search_cand c;
  int joint[SK_SEARCH_MAX_JOINT] = {1, 1, 1};
  BAD("out of range", sk_search_eval(&m, 5, joint, &c, E));
  BAD("out of range", sk_search_eval(&m, -1, joint, &c, E));
  BAD("out of range", sk_search_apply(&m, 9, &m.cands[0][0], &n.g.ops[0].desc, E));
  joint[0] = 3; /* 3 does not divide 16 on 8 devices */
  cr_assert_neq(sk_search_eval(&m, 0, joint, &c, NULL), SK_OK);
  cr_assert_eq(sk_search_edge_cost(&m, -1, 0, 0), 0);
  cr_assert_eq(sk_search_edge_cost(&m, 0, 999, 0), 0);
  cr_assert_eq(sk_search_input_cost(&m, 99, 0), 0);
  cr_assert_eq(sk_search_plan_cost(&m, NULL), 0);
  cr_assert_eq(sk_search_plan_memory(NULL, choice), 0);
  char buf[8] = "x";
  cr_assert_eq(sk_search_format_strategy(&m, 99, &m.cands[0][0], buf, sizeof buf), 0);
  cr_assert_str_eq(buf, "");
  sk_search_model_free(&m);
  sk_search_model_free(&m); /* twice: zeroed */
  sk_search_model_free(NULL);
  /* the compiler: an unknown mode, an exhaustive refusal (the plan left empty) */
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = 8, pd.mode = (sk_parallel_mode)7;
  sk_parallel_plan p;
  BAD("unknown parallel_mode 7", sk_parallel_compile(&n.g, &pd, &p, E));
  pd.mode = (sk_parallel_mode)-1;
  BAD("unknown parallel_mode", sk_parallel_compile(&n.g, &pd, &p, E));
  pd.mode = SK_PARALLEL_EXHAUSTIVE, pd.exhaustive_limit = 1;
  BAD("at operator 'mm'", sk_parallel_compile(&n.g, &pd, &p, E));
  cr_assert(!p.ops && !p.searched && !p.micro_graph, "a refused compile leaves the plan empty");
  pd.exhaustive_limit = 0;
  OK(sk_parallel_compile(&n.g, &pd, &p, E));
  sk_parallel_free(&p);
  cr_assert_str_eq(sk_parallel_mode_name(SK_PARALLEL_SEMI_AUTO), "semi_auto");
  cr_assert_str_eq(sk_parallel_mode_name(SK_PARALLEL_SHARDING_PROPAGATION), "sharding_propagation");
  cr_assert_str_eq(sk_parallel_mode_name(SK_PARALLEL_RECURSIVE_PROGRAMMING), "recursive_programming");
  cr_assert_str_eq(sk_parallel_mode_name(SK_PARALLEL_EXHAUSTIVE), "exhaustive");
  cr_assert_str_eq(sk_parallel_mode_name((sk_parallel_mode)4), "?");
  sk_graph_free(&n.g);
}

/* sk_search_format_strategy: tuple syntax, one-entry tuples with a comma, DEFAULT "None". */
Test(search, format_strategy_tuples) {
  static net n;
  matmul_net(&n, 16, 32, 64, false);
  sk_search_desc d = sdesc(8);
  sk_search_model m;
  build_model(&n.g, &d, &m);
  int mm = op_named(&n.g, "mm"), loss = op_named(&n.g, "loss");
  char buf[64];
  cr_assert_eq(sk_search_format_strategy(&m, mm, &m.cands[mm][0], buf, sizeof buf), strlen("((8, 1), (1, 1))"));
  cr_assert_str_eq(buf, "((8, 1), (1, 1))");
  sk_search_format_strategy(&m, loss, &m.cands[loss][0], buf, sizeof buf);
  cr_assert_str_eq(buf, "((8, 1), (8,))");
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}


/* ---- the model's readers: sk_search_sig_of, sk_search_cached_pairs ------------------------- */

/* Every rank's slice of l against its cuts: dim d's block on rank r is (r / stride) % count. */
static void assert_sig_matches_slices(const sk_layout *l, const sk_search_sig *s, const char *what) {
  cr_assert_eq(s->ndims, l->ndims, "%s: %d dims", what, s->ndims);
  for (int r = 0; r < l->mesh.size; r++) {
    sk_slice sl;
    OK(sk_layout_slice(l, r, &sl, E));
    for (int d = 0; d < l->ndims; d++) {
      int count = s->dim[d].count;
      int64_t block = count > 1 ? (r / s->dim[d].stride) % count : 0;
      cr_assert_eq(sl.start[d], block * (l->shape[d] / count), "%s: rank %d dim %d starts at %lld", what, r, d,
                   (long long)sl.start[d]);
    }
  }
}

static sk_search_sig sig_checked(const sk_layout *l, const char *what) {
  sk_search_sig s = sk_search_sig_of(l);
  assert_sig_matches_slices(l, &s, what);
  return s;
}

static sk_search_sig parsed_sig(const sk_mesh *mesh, const char *map) {
  sk_layout l;
  OK(sk_layout_parse(&l, mesh, map, 2, SH2(8, 16), E));
  return sig_checked(&l, map);
}

static bool same_sig(sk_search_sig a, sk_search_sig b) { return !memcmp(&a, &b, sizeof a); }

Test(search, sig_of_cuts_by_hand) {
  sk_mesh dm, flat;
  OK(sk_mesh_parse(&dm, "dp=2,mp=4", E));
  OK(sk_mesh_parse(&flat, "r=8", E));
  /* by hand on dp=2,mp=4 (rank = 4 dp + mp): dp is (r / 4) % 2, mp is r % 4, both is r % 8 */
  sk_search_sig sigs[4] = {parsed_sig(&dm, "dp,mp"), parsed_sig(&dm, "mp,dp"), parsed_sig(&dm, "(dp,mp),None"),
                           parsed_sig(&dm, "None,None")};
  cr_assert(same_sig(sigs[0], sig2(2, 4, 4, 1)));
  cr_assert(same_sig(sigs[1], sig2(4, 1, 2, 4)));
  cr_assert(same_sig(sigs[2], sig2(8, 1, 1, 0)));
  cr_assert(same_sig(sigs[3], sig2(1, 0, 1, 0)));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < i; j++) cr_assert(!same_sig(sigs[i], sigs[j]), "layouts %d and %d: one signature", i, j);
  /* equal layouts, however reached: parsed again, on a one-axis mesh of the same size, from a
     strategy tuple */
  cr_assert(same_sig(parsed_sig(&dm, "dp,mp"), sigs[0]));
  cr_assert(same_sig(parsed_sig(&flat, "r,None"), sigs[2]));
  sk_layout l;
  OK(sk_layout_from_strategy(&l, 8, 2, SH2(8, 16), (const int[]){2, 4}, SK_REPEAT_RIGHT, E));
  cr_assert(same_sig(sig_checked(&l, "strategy (2, 4)"), sigs[0]));
  /* a repeated strategy: the repeat axis placed right (replicas adjacent) or left cuts alike but
     hands the blocks to other ranks */
  OK(sk_layout_from_strategy(&l, 8, 2, SH2(8, 16), (const int[]){2, 1}, SK_REPEAT_RIGHT, E));
  sk_search_sig right = sig_checked(&l, "strategy (2, 1) repeated right");
  OK(sk_layout_from_strategy(&l, 8, 2, SH2(8, 16), (const int[]){2, 1}, SK_REPEAT_LEFT, E));
  sk_search_sig left = sig_checked(&l, "strategy (2, 1) repeated left");
  cr_assert(same_sig(right, sig2(2, 4, 1, 0)) && same_sig(left, sig2(2, 1, 1, 0)));
  cr_assert_eq(sk_search_sig_of(NULL).ndims, 0);
}

/* The candidates' recorded cuts are their layouts' signatures: MatMul's x [16, 16] cut (i, k)
   with the repeat axis right, as the rule lays a strategy out. */
Test(search, sig_of_agrees_with_the_candidates) {
  static net n;
  sk_search_model m;
  matmul_net(&n, 16, 16, 16, false);
  sk_search_desc d = sdesc(8);
  build_model(&n.g, &d, &m);
  int mm = op_named(&n.g, "mm");
  cr_assert_gt(m.ncands[mm], 1);
  for (int c = 0; c < m.ncands[mm]; c++) {
    const sk_search_cand *k = &m.cands[mm][c];
    sk_layout l;
    OK(sk_layout_from_strategy(&l, 8, 2, SH2(16, 16), k->strategy[0], SK_REPEAT_RIGHT, E));
    cr_assert(same_sig(sk_search_sig_of(&l), k->in[0]), "candidate %d: x's cuts differ from its layout's", c);
  }
  sk_search_model_free(&m);
  sk_graph_free(&n.g);
}

/* A signature of 4 dims: no tensor of matmul_net has 4, so the pair cannot be cached already. */
static sk_search_sig sig4(int at) {
  sk_search_sig s;
  memset(&s, 0, sizeof s);
  s.ndims = 4;
  for (int d = 0; d < 4; d++) s.dim[d].count = d == at ? 4 : 1, s.dim[d].stride = d == at ? 1 : 0;
  return s;
}

Test(search, cached_pairs_count_the_measured_moves) {
  static net n;
  sk_search_model m;
  memset(&m, 0, sizeof m);
  cr_assert_eq(sk_search_cached_pairs(NULL), 0);
  cr_assert_eq(sk_search_cached_pairs(&m), 0, "a model not built");
  matmul_net(&n, 16, 16, 16, false);
  sk_search_desc d = sdesc(4);
  build_model(&n.g, &d, &m);
  size_t built = sk_search_cached_pairs(&m);
  int choice[8];
  OK(sk_search_exhaustive(&m, choice, E));
  size_t searched = sk_search_cached_pairs(&m);
  cr_assert_gt(searched, built, "the exact search prices every edge's pairs of cuts");
  OK(sk_search_exhaustive(&m, choice, E));
  cr_assert_eq(sk_search_cached_pairs(&m), searched, "searched again: every pair already measured");
  /* one new pair: one more; the same again, or a move to the same cuts: none; reversed: a pair */
  sk_search_sig a = sig4(0), b = sig4(3);
  double first = sk_search_redist_cost(&m, &a, &b, 256, SK_F32, NULL);
  cr_assert_eq(sk_search_cached_pairs(&m), searched + 1);
  cr_assert_eq(sk_search_redist_cost(&m, &a, &b, 256, SK_F32, NULL), first);
  cr_assert_gt(first, 0);
  sk_search_redist_cost(&m, &a, &a, 256, SK_F32, NULL);
  cr_assert_eq(sk_search_cached_pairs(&m), searched + 1);
  sk_search_redist_cost(&m, &b, &a, 256, SK_F32, NULL);
  cr_assert_eq(sk_search_cached_pairs(&m), searched + 2);
  sk_search_model_free(&m);
  cr_assert_eq(sk_search_cached_pairs(&m), 0, "freed");
  sk_graph_free(&n.g);
}
