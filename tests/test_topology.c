/* The hierarchical cluster model (sk_topology in sk_cluster) and its per-algorithm collective
   costs (sk_topology.h): each formula against costs worked by hand in the comments, the
   chooser's pick and its ties, uneven groups, the flat cluster's exact sk_link_cost_us values,
   and every refusal, the world's included. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "shardkit.h"
#include "expect_bad.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1); }

/* NODES x PER nodes; intra 1 us, 100 GB/s (1e5 bytes/us); inter 10 us, 10 GB/s (1e4 bytes/us). */
static sk_cluster two_level(int nodes, int per) {
  sk_cluster c;
  memset(&c, 0, sizeof c);
  c.topology.nodes = nodes, c.topology.per_node = per;
  c.topology.intra.alpha_us = 1, c.topology.intra.gbps = 100;
  c.topology.inter.alpha_us = 10, c.topology.inter.gbps = 10;
  return c;
}

static double algo_us(const sk_cluster *c, sk_coll_algo a, sk_coll_kind k, size_t count, int n, const int *ranks) {
  double us = -1;
  sk_error err;
  sk_result r = sk_cluster_algo_us(c, a, k, count, SK_F32, n, ranks, &us, &err);
  cr_assert_eq(r, SK_OK, "%s %s: %s", sk_coll_algo_name(a), sk_coll_kind_name(k), err.msg);
  return us;
}

/* Asserts the chooser picks `want` at cost `cost`. */
static void expect_pick(const sk_cluster *c, sk_coll_kind k, size_t count, int n, const int *ranks, sk_coll_algo want,
                        double cost) {
  sk_coll_algo got = SK_ALGO_COUNT;
  double us = -1;
  sk_error err;
  cr_assert_eq(sk_cluster_coll_us(c, k, count, SK_F32, n, ranks, &got, &us, &err), SK_OK, "%s", err.msg);
  cr_expect_eq(got, want, "%s: picked %s, want %s", sk_coll_kind_name(k), sk_coll_algo_name(got),
               sk_coll_algo_name(want));
  cr_expect(near(us, cost), "%s: cost %.9g, want %.9g", sk_coll_kind_name(k), us, cost);
}

static const int all8[8] = {0, 1, 2, 3, 4, 5, 6, 7};
#define MB 250000 /* f32 elements: n = 1e6 bytes */

Test(topology, allreduce_each_algorithm) {
  sk_cluster c = two_level(2, 4); /* the whole 2x4: p 8, m 2, k = k0 = 4; n = 1e6 bytes */
  /* ring over the inter link (the slower here): 2*7*10 + 2*7/8 * 1e6/1e4 = 140 + 175 = 315
     (its intra price, 2*7*1 + 1.75 * 1e6/1e5 = 31.5, is the smaller) */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, MB, 8, all8), 315));
  /* tree: 2*((4-1)*1 + log2(2)*10) + 2 * 1e6/1e4 = 26 + 200 = 226 */
  cr_expect(near(algo_us(&c, SK_ALGO_TREE, SK_COLL_ALLREDUCE, MB, 8, all8), 226));
  /* hierarchical: intra RS + AG 2*(3*1 + 3/4 * 1e6/1e5) = 21; inter AR of 1e6/4 bytes on 2
     nodes 2*1*10 + 2*1/2 * 2.5e5/1e4 = 20 + 25 = 45; total 66 */
  cr_expect(near(algo_us(&c, SK_ALGO_HIERARCHICAL, SK_COLL_ALLREDUCE, MB, 8, all8), 66));
  expect_pick(&c, SK_COLL_ALLREDUCE, MB, 8, all8, SK_ALGO_HIERARCHICAL, 66);
}

Test(topology, tree_wins_when_latency_bound) {
  sk_cluster c = two_level(8, 2); /* 16 devices: p 16, m 8, k = k0 = 2; 25 f32 = 100 bytes */
  int all16[16];
  for (int i = 0; i < 16; i++) all16[i] = i;
  /* ring: inter 2*15*10 + 2*15/16 * 100/1e4 = 300 + 0.01875 */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 25, 16, all16), 300.01875));
  /* tree: 2*(1*1 + floor(log2 8)=3 * 10) + 2 * 100/1e4 = 62 + 0.02 */
  cr_expect(near(algo_us(&c, SK_ALGO_TREE, SK_COLL_ALLREDUCE, 25, 16, all16), 62.02));
  /* hierarchical: 2*(1*1 + 1/2 * 100/1e5) = 2.001; inter 2*7*10 + 2*7/8 * 50/1e4 = 140.00875 */
  cr_expect(near(algo_us(&c, SK_ALGO_HIERARCHICAL, SK_COLL_ALLREDUCE, 25, 16, all16), 142.00975));
  expect_pick(&c, SK_COLL_ALLREDUCE, 25, 16, all16, SK_ALGO_TREE, 62.02);
  /* tree depth is floor(log2 m): 3 nodes (ranks 0, 2, 4, one each) are a root and two leaves:
     2*(0 + 1*10) + 2 * 100/1e4 = 20.02 */
  const int three[3] = {0, 2, 4};
  cr_expect(near(algo_us(&c, SK_ALGO_TREE, SK_COLL_ALLREDUCE, 25, 3, three), 20.02));
}

Test(topology, hierarchical_forms_of_the_other_kinds) {
  sk_cluster c = two_level(2, 4); /* p 8, m 2, k = k0 = 4; count MB: n = 1e6 bytes */
  /* AllGather (n per rank, 8e6 gathered): ring inter 7*10 + 7 * 1e6/1e4 = 770; hierarchical:
     inter AG 1*10 + (8-4)/4 * 1e6/1e4 = 110, then intra AG 3*1 + 3/4 * 8e6/1e5 = 63: 173 */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_ALLGATHER, MB, 8, all8), 770));
  expect_pick(&c, SK_COLL_ALLGATHER, MB, 8, all8, SK_ALGO_HIERARCHICAL, 173);
  /* ReduceScatter: the mirror, the same numbers */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_REDUCE_SCATTER, MB, 8, all8), 770));
  expect_pick(&c, SK_COLL_REDUCE_SCATTER, MB, 8, all8, SK_ALGO_HIERARCHICAL, 173);
  /* Broadcast: ring (a pipelined chain) inter 7*10 + 1e6/1e4 = 170; hierarchical: intra
     scatter + AG 2*(3 + 3/4 * 1e6/1e5) = 21, inter broadcast of 1e6/4: 10 + 25 = 35: 56 */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_BROADCAST, MB, 8, all8), 170));
  expect_pick(&c, SK_COLL_BROADCAST, MB, 8, all8, SK_ALGO_HIERARCHICAL, 56);
  /* Reduce: Broadcast's mirror */
  expect_pick(&c, SK_COLL_REDUCE, MB, 8, all8, SK_ALGO_HIERARCHICAL, 56);
  /* AllToAll (n per peer): ring 770; hierarchical: intra 3 + 3/4 * 8e6/1e5 = 63, inter
     1*10 + (8-4) * 1e6/1e4 = 410: 473 */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_ALLTOALL, MB, 8, all8), 770));
  expect_pick(&c, SK_COLL_ALLTOALL, MB, 8, all8, SK_ALGO_HIERARCHICAL, 473);
  /* ring only: Gather (770 as AllGather's ring) and Barrier (7*10) */
  expect_pick(&c, SK_COLL_GATHER, MB, 8, all8, SK_ALGO_RING, 770);
  expect_pick(&c, SK_COLL_BARRIER, 0, 8, all8, SK_ALGO_RING, 70);
}

Test(topology, uneven_group_rings_over_its_slowest_link) {
  sk_cluster c = two_level(2, 4);
  const int inside[4] = {0, 1, 2, 3}, spread[4] = {0, 1, 2, 4}; /* spread: m 2, k 3, k0 1 */
  /* inside one node: 2*3*1 + 2*3/4 * 1e6/1e5 = 6 + 15 = 21 */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, MB, 4, inside), 21));
  /* one member on the other node: every ring step waits for the inter hop:
     2*3*10 + 1.5 * 1e6/1e4 = 60 + 150 = 210 */
  cr_expect(near(algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, MB, 4, spread), 210));
  /* tree: 2*((3-1)*1 + 1*10) + 2 * 1e6/1e4 = 24 + 200 = 224 */
  cr_expect(near(algo_us(&c, SK_ALGO_TREE, SK_COLL_ALLREDUCE, MB, 4, spread), 224));
  /* hierarchical: intra over the fullest node (k 3): 2*(2*1 + 2/3 * 1e6/1e5) = 4 + 40/3;
     inter carries the emptiest node's share (k0 1, all 1e6 bytes): 2*10 + 1e6/1e4 = 120 */
  double hier = 4 + 40.0 / 3 + 120;
  cr_expect(near(algo_us(&c, SK_ALGO_HIERARCHICAL, SK_COLL_ALLREDUCE, MB, 4, spread), hier));
  expect_pick(&c, SK_COLL_ALLREDUCE, MB, 4, spread, SK_ALGO_HIERARCHICAL, hier);
  /* AllGather, uneven: inter 10 + (4-1)/1 * 1e6/1e4 = 310; intra 2*1 + 2/3 * 4e6/1e5 = 2 + 80/3 */
  cr_expect(near(algo_us(&c, SK_ALGO_HIERARCHICAL, SK_COLL_ALLGATHER, MB, 4, spread), 312 + 80.0 / 3));
}

Test(topology, ties_go_to_the_first_algorithm) {
  sk_cluster c = two_level(2, 4);
  /* inside one node hierarchical is the ring's ReduceScatter + AllGather: 21 both, a tie */
  const int inside[4] = {0, 1, 2, 3}, one_each[2] = {3, 4};
  cr_expect(near(algo_us(&c, SK_ALGO_HIERARCHICAL, SK_COLL_ALLREDUCE, MB, 4, inside), 21));
  expect_pick(&c, SK_COLL_ALLREDUCE, MB, 4, inside, SK_ALGO_RING, 21);
  /* one member per node: hierarchical is the inter ring, 2*10 + 1e6/1e4 = 120, a tie again */
  cr_expect(near(algo_us(&c, SK_ALGO_HIERARCHICAL, SK_COLL_ALLREDUCE, MB, 2, one_each), 120));
  expect_pick(&c, SK_COLL_ALLREDUCE, MB, 2, one_each, SK_ALGO_RING, 120);
  /* one rank: everything costs 0, ring */
  expect_pick(&c, SK_COLL_ALLREDUCE, MB, 1, one_each, SK_ALGO_RING, 0);
  cr_expect_eq(algo_us(&c, SK_ALGO_TREE, SK_COLL_ALLREDUCE, MB, 1, one_each), 0.0);
}

Test(topology, send_recv_by_node) {
  sk_cluster c = two_level(2, 4);
  double us = -1;
  /* same node: 1 + 1e6/1e5 = 11; across: 10 + 1e6/1e4 = 110 */
  cr_assert_eq(sk_cluster_p2p_us(&c, 0, 3, MB, SK_F32, &us, NULL), SK_OK);
  cr_expect(near(us, 11), "intra %g", us);
  cr_assert_eq(sk_cluster_p2p_us(&c, 3, 4, MB, SK_F32, &us, NULL), SK_OK);
  cr_expect(near(us, 110), "inter %g", us);
  cr_assert_eq(sk_cluster_p2p_us(&c, 7, 0, MB, SK_F32, &us, NULL), SK_OK);
  cr_expect(near(us, 110), "inter %g", us);
}

Test(topology, flat_cluster_keeps_the_link_formulas) {
  sk_cluster c;
  memset(&c, 0, sizeof c);
  c.link.alpha_us = 2, c.link.gbps = 8;
  int ranks[5] = {0, 3, 9, 10, 4000};
  for (int k = SK_COLL_NONE + 1; k < (int)SK_COLL_KIND_COUNT; k++) {
    if (sk_coll_p2p((sk_coll_kind)k)) continue;
    for (int n = 1; n <= 5; n++) {
      sk_coll_algo a = SK_ALGO_COUNT;
      double us = -1;
      cr_assert_eq(sk_cluster_coll_us(&c, (sk_coll_kind)k, 8000, SK_F64, n, ranks, &a, &us, NULL), SK_OK);
      cr_expect_eq(a, SK_ALGO_RING);
      cr_expect_eq(us, sk_link_cost_us(&c.link, (sk_coll_kind)k, 8000, SK_F64, n), "%s on %d: %.17g",
                   sk_coll_kind_name((sk_coll_kind)k), n, us);
    }
  }
  double us = -1;
  cr_assert_eq(sk_cluster_p2p_us(&c, 0, 4000, 8000, SK_F64, &us, NULL), SK_OK);
  cr_expect_eq(us, sk_link_cost_us(&c.link, SK_COLL_SEND, 8000, SK_F64, 2));
  sk_error err;
  memset(&err, 0, sizeof err);
  cr_expect_eq(sk_cluster_algo_us(&c, SK_ALGO_TREE, SK_COLL_ALLREDUCE, 1, SK_F32, 2, ranks, &us, &err),
               SK_ERR_UNSUPPORTED);
  cr_expect(strstr(err.msg, "flat cluster") != NULL, "%s", err.msg);
}

Test(topology, names_and_applicability) {
  const char *names[] = {"ring", "tree", "hierarchical"};
  for (int a = 0; a < (int)SK_ALGO_COUNT; a++) {
    sk_coll_algo back = SK_ALGO_COUNT;
    cr_expect_str_eq(sk_coll_algo_name((sk_coll_algo)a), names[a]);
    cr_expect(sk_coll_algo_from_name(names[a], &back) && back == (sk_coll_algo)a);
  }
  sk_coll_algo back = SK_ALGO_RING;
  cr_expect(!sk_coll_algo_from_name("nvls", &back));
  cr_expect(!sk_coll_algo_from_name(NULL, &back));
  cr_expect_str_eq(sk_coll_algo_name(SK_ALGO_COUNT), "invalid");
  cr_expect_str_eq(sk_coll_algo_name((sk_coll_algo)-1), "invalid");
  cr_expect(sk_coll_algo_applies(SK_ALGO_TREE, SK_COLL_ALLREDUCE));
  cr_expect(!sk_coll_algo_applies(SK_ALGO_TREE, SK_COLL_BROADCAST));
  cr_expect(sk_coll_algo_applies(SK_ALGO_HIERARCHICAL, SK_COLL_ALLTOALL));
  cr_expect(!sk_coll_algo_applies(SK_ALGO_HIERARCHICAL, SK_COLL_ALLTOALLV));
  cr_expect(sk_coll_algo_applies(SK_ALGO_RING, SK_COLL_BARRIER));
  cr_expect(!sk_coll_algo_applies(SK_ALGO_RING, SK_COLL_SEND));
  cr_expect(!sk_coll_algo_applies(SK_ALGO_RING, SK_COLL_NONE));
}

/* sk_cluster_check on topologies: each bad field named. */
Test(topology, bad_topologies_refused) {
  sk_error err;
  sk_cluster c = two_level(2, 4);
  cr_expect_eq(sk_cluster_check(&c, "desc.cluster", NULL), SK_OK);
  c.topology.nodes = 0; /* the rest still set */
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "desc.cluster.topology: nodes 0");
  c = two_level(2, -1);
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "per_node -1");
  c = two_level(1 << 13, 1 << 12); /* 2^25 devices */
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "at most");
  c = two_level(2, 4), c.topology.intra.gbps = 0;
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "desc.cluster.topology.intra");
  c = two_level(2, 4), c.topology.inter.alpha_us = -1;
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "desc.cluster.topology.inter");
  c = two_level(2, 4), c.topology.inter.gbps = NAN;
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "desc.cluster.topology.inter");
  c = two_level(2, 4), c.topology.inter.alpha_us = INFINITY;
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "desc.cluster.topology.inter");
  memset(&c, 0, sizeof c), c.topology.intra.alpha_us = 1; /* only a link of a topology */
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "desc.cluster.topology: nodes 0");
  c = two_level(2, 4), c.link.gbps = 25; /* both flat and hierarchical */
  EXPECT_BAD(sk_cluster_check(&c, "desc.cluster", &err), &err, "desc.cluster.link");
}

/* The world takes a topology that holds its devices (the clocks' pricing:
   tests/test_comm_topology.c) and refuses a smaller one, naming both counts. */
Test(topology, world_needs_a_topology_holding_its_devices) {
  sk_world_desc d = {0};
  d.ndevices = 8;
  d.backend = sk_threads_backend();
  d.cluster = two_level(2, 4);
  sk_world *w = NULL;
  sk_error err;
  cr_assert_eq(sk_world_create(&d, &w, &err), SK_OK, "%s", err.msg);
  cr_expect_eq(sk_world_cluster(w).topology.per_node, 4);
  sk_world_destroy(w, NULL);
  d.ndevices = 6; /* room to spare: fine */
  cr_assert_eq(sk_world_create(&d, &w, &err), SK_OK, "%s", err.msg);
  sk_world_destroy(w, NULL);
  w = NULL;
  d.ndevices = 9;
  EXPECT_BAD(sk_world_create(&d, &w, &err), &err, "2 nodes x 4 per node = 8 devices, fewer than the world's 9");
  cr_expect_null(w);
}

Test(topology, bad_calls_refused) {
  sk_cluster c = two_level(2, 4), bad = two_level(0, 4);
  const int unsorted[2] = {1, 0}, twice[2] = {2, 2}, past[2] = {0, 8}, neg[2] = {-1, 0};
  double us;
  sk_coll_algo a;
  sk_error err;
  EXPECT_BAD(sk_cluster_algo_us(NULL, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 8, all8, &us, &err), &err, "NULL");
  EXPECT_BAD(sk_cluster_algo_us(&bad, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 8, all8, &us, &err), &err, "nodes 0");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_NONE, 1, SK_F32, 8, all8, &us, &err), &err, "kind 0");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_SEND, 1, SK_F32, 2, all8, &us, &err), &err,
             "sk_cluster_p2p_us");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, (sk_coll_kind)999, 1, SK_F32, 8, all8, &us, &err), &err, "kind 999");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, (sk_dtype)99, 8, all8, &us, &err), &err,
             "dtype 99");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 8, all8, NULL, &err), &err, "us");
  EXPECT_BAD(sk_cluster_algo_us(&c, (sk_coll_algo)7, SK_COLL_ALLREDUCE, 1, SK_F32, 8, all8, &us, &err), &err,
             "algo 7");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 0, all8, &us, &err), &err, "n 0");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 9, all8, &us, &err), &err, "n 9");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 2, NULL, &us, &err), &err, "want 1..8");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 2, unsorted, &us, &err), &err,
             "ranks[1] = 0");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 2, twice, &us, &err), &err,
             "ranks[1] = 2");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 2, past, &us, &err), &err,
             "ranks[1] = 8");
  EXPECT_BAD(sk_cluster_algo_us(&c, SK_ALGO_RING, SK_COLL_ALLREDUCE, 1, SK_F32, 2, neg, &us, &err), &err,
             "ranks[0] = -1");
  EXPECT_BAD(sk_cluster_coll_us(&c, SK_COLL_ALLREDUCE, 1, SK_F32, 8, all8, NULL, &us, &err), &err, "algo");
  EXPECT_BAD(sk_cluster_coll_us(&c, SK_COLL_RECV, 1, SK_F32, 2, all8, &a, &us, &err), &err, "sk_cluster_p2p_us");
  EXPECT_BAD(sk_cluster_p2p_us(&c, 0, 8, 1, SK_F32, &us, &err), &err, "dst 8");
  EXPECT_BAD(sk_cluster_p2p_us(&c, -2, 0, 1, SK_F32, &us, &err), &err, "src -2");
  EXPECT_BAD(sk_cluster_p2p_us(&c, 0, 1, 1, (sk_dtype)99, &us, &err), &err, "dtype 99");
  EXPECT_BAD(sk_cluster_p2p_us(&c, 0, 1, 1, SK_F32, NULL, &err), &err, "us");
  EXPECT_BAD(sk_cluster_p2p_us(&bad, 0, 1, 1, SK_F32, &us, &err), &err, "nodes 0");
  /* tree on a kind it does not run: unsupported, named */
  memset(&err, 0, sizeof err);
  cr_expect_eq(sk_cluster_algo_us(&c, SK_ALGO_TREE, SK_COLL_ALLGATHER, 1, SK_F32, 8, all8, &us, &err),
               SK_ERR_UNSUPPORTED);
  cr_expect(strstr(err.msg, "tree does not run allgather") != NULL, "%s", err.msg);
  memset(&err, 0, sizeof err);
  cr_expect_eq(sk_cluster_algo_us(&c, SK_ALGO_HIERARCHICAL, SK_COLL_GATHER, 1, SK_F32, 8, all8, &us, &err),
               SK_ERR_UNSUPPORTED);
  cr_expect(strstr(err.msg, "hierarchical does not run gather") != NULL, "%s", err.msg);
}

/* A mesh axis's groups all make the call at once: the price is the dearest group's. On 2 nodes
   of 3, the size-2 groups of the minor axis are {0,1}, {2,3}, {4,5}: {2,3} crosses nodes. */
Test(topology, mesh_groups_priced_by_the_dearest) {
  sk_cluster c = two_level(2, 3);
  sk_mesh mesh;
  sk_error err;
  const char *names[2] = {"a", "b"};
  cr_assert_eq(sk_mesh_init(&mesh, 2, (const int[]){3, 2}, names, &err), SK_OK, "%s", err.msg);
  double us = -1, across = 0, inside = 0;
  cr_assert_eq(sk_cluster_mesh_coll_us(&c, SK_COLL_ALLREDUCE, MB, SK_F32, &mesh, 2u, 0, &us, &err), SK_OK, "%s", err.msg);
  sk_coll_algo algo;
  cr_assert_eq(sk_cluster_coll_us(&c, SK_COLL_ALLREDUCE, MB, SK_F32, 2, (const int[]){2, 3}, &algo, &across, &err), SK_OK);
  cr_assert_eq(sk_cluster_coll_us(&c, SK_COLL_ALLREDUCE, MB, SK_F32, 2, (const int[]){0, 1}, &algo, &inside, &err), SK_OK);
  cr_expect(across > inside, "the group across nodes costs more: %.9g vs %.9g", across, inside);
  cr_expect(near(us, across), "mesh price %.9g, want the crossing group's %.9g", us, across);
  /* the major axis: {0,2,4}, {1,3,5}, both on two nodes, alike */
  double major = -1, want = 0;
  cr_assert_eq(sk_cluster_mesh_coll_us(&c, SK_COLL_ALLGATHER, MB, SK_F32, &mesh, 1u, 0, &major, &err), SK_OK);
  cr_assert_eq(sk_cluster_coll_us(&c, SK_COLL_ALLGATHER, MB, SK_F32, 3, (const int[]){1, 3, 5}, &algo, &want, &err), SK_OK);
  cr_expect(near(major, want), "major axis %.9g, want %.9g", major, want);
  /* no axis: one device, nothing to pay */
  cr_expect_eq(sk_cluster_mesh_coll_us(&c, SK_COLL_ALLREDUCE, MB, SK_F32, &mesh, 0u, 0, &us, &err), SK_OK);
  cr_expect_eq(us, 0);
  /* a flat cluster prices one group: sk_link_cost_us on its size */
  sk_cluster flat;
  memset(&flat, 0, sizeof flat);
  flat.link.alpha_us = 5, flat.link.gbps = 10;
  cr_assert_eq(sk_cluster_mesh_coll_us(&flat, SK_COLL_ALLREDUCE, MB, SK_F32, &mesh, 3u, 0, &us, &err), SK_OK);
  cr_expect(near(us, sk_link_cost_us(&flat.link, SK_COLL_ALLREDUCE, MB, SK_F32, 6)), "flat %.9g", us);
  EXPECT_BAD(sk_cluster_mesh_coll_us(&c, SK_COLL_ALLREDUCE, MB, SK_F32, &mesh, 4u, 0, &us, &err), &err, "axes 0x4");
  EXPECT_BAD(sk_cluster_mesh_coll_us(&c, SK_COLL_ALLREDUCE, MB, SK_F32, NULL, 1u, 0, &us, &err), &err, "mesh");
  /* past the topology's devices: the group's check names the rank */
  EXPECT_BAD(sk_cluster_mesh_coll_us(&c, SK_COLL_ALLREDUCE, MB, SK_F32, &mesh, 1u, 4, &us, &err), &err, "ranks");
}
