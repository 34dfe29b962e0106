/* The world's virtual clocks under a hierarchical topology (sk_cluster.topology) on the threads
   backend: on 8 devices as 2 nodes of 4 and as 4 nodes of 2, each collective on the world, on
   an intra-node and on a cross-node sub-communicator advances the clocks by the cheapest
   algorithm's cost, and Send/Recv by the link between the two devices' nodes. Every expected
   value is worked by hand from docs/cost-models.md section 2.1. Device threads record clock
   advances; the test thread asserts. */
#include <criterion/criterion.h>
#include <math.h>

#include "shardkit.h"

#define N 8          /* devices */
#define COUNT 25000  /* f32 per call: n = 1e5 bytes */
#define KINDS 6      /* AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll, AllToAllV */
#define COMMS 3      /* the world, the device's node, the devices with its place on other nodes */

/* The links: intra 1 us, 100 GB/s; inter 10 us, 10 GB/s. With n = 1e5 bytes a call's n crosses
   the intra link in NI = 1 us and the inter link in NE = 10 us. */
#define AI 1.0
#define NI 1.0
#define AE 10.0
#define NE 10.0

static sk_world *topo_world(int nodes, int per_node) {
  sk_world_desc d = {0};
  d.ndevices = N;
  d.backend = sk_threads_backend();
  d.timeout_ms = 20000;
  d.cluster.topology.nodes = nodes, d.cluster.topology.per_node = per_node;
  d.cluster.topology.intra.alpha_us = AI, d.cluster.topology.intra.gbps = 100;
  d.cluster.topology.inter.alpha_us = AE, d.cluster.topology.inter.gbps = 10;
  sk_world *w = NULL;
  sk_error err;
  cr_assert_eq(sk_world_create(&d, &w, &err), SK_OK, "world %dx%d: %s", nodes, per_node, err.msg);
  return w;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1); }

static float sendb[N][N * COUNT], recvb[N][N * COUNT];

typedef struct run_arg {
  int per_node;
  double took[N][COMMS][KINDS]; /* world rank, communicator, kind: how far the call moved the clock */
  sk_result rc[N];
} run_arg;

/* AllToAllV with every block COUNT: the busiest member moves (p-1) COUNT, COUNT per peer. */
static sk_result uniform_alltoallv(sk_comm *c, int r) {
  size_t counts[N], displs[N];
  for (int j = 0; j < sk_comm_size(c); j++) counts[j] = COUNT, displs[j] = (size_t)j * COUNT;
  return sk_alltoallv(c, sendb[r], counts, displs, recvb[r], counts, displs, SK_F32, NULL);
}

static sk_result one_call(sk_comm *c, int kind, int r) {
  switch (kind) {
    case 0: return sk_allreduce(c, sendb[r], recvb[r], COUNT, SK_F32, SK_SUM, NULL);
    case 1: return sk_allgather(c, sendb[r], recvb[r], COUNT, SK_F32, NULL);
    case 2: return sk_reduce_scatter(c, sendb[r], recvb[r], COUNT, SK_F32, SK_SUM, NULL);
    case 3: return sk_broadcast(c, sendb[r], recvb[r], COUNT, SK_F32, 0, NULL);
    case 4: return sk_alltoall(c, sendb[r], recvb[r], COUNT, SK_F32, NULL);
    default: return uniform_alltoallv(c, r);
  }
}

/* The cross-node communicator is ranked by descending world rank (key -rank): the clocks must
   price the group by its members, not by their order in the communicator. */
static sk_result split_both(sk_comm *world, int per_node, sk_comm **intra, sk_comm **cross) {
  int r = sk_comm_rank(world);
  sk_result rc = sk_comm_split(world, r / per_node, r, intra, NULL);
  return rc != SK_OK ? rc : sk_comm_split(world, r % per_node, -r, cross, NULL);
}

static sk_result every_kind_on_every_comm(sk_comm *world, void *arg) {
  run_arg *a = (run_arg *)arg;
  int r = sk_comm_rank(world);
  sk_comm *comms[COMMS] = {world, NULL, NULL};
  sk_result rc = split_both(world, a->per_node, &comms[1], &comms[2]);
  for (int c = 0; c < COMMS && rc == SK_OK; c++)
    for (int k = 0; k < KINDS && rc == SK_OK; k++) {
      double before = sk_comm_clock_us(world);
      rc = one_call(comms[c], k, r);
      a->took[r][c][k] = sk_comm_clock_us(world) - before;
    }
  sk_comm_destroy(comms[1], NULL);
  sk_comm_destroy(comms[2], NULL);
  a->rc[r] = rc;
  return rc;
}

static const char *const comm_names[COMMS] = {"world", "intra-node", "cross-node"};
static const char *const kind_names[KINDS] = {"allreduce", "allgather", "reduce_scatter",
                                              "broadcast", "alltoall",  "alltoallv"};

static void run_and_check(int nodes, int per_node, const double want[COMMS][KINDS]) {
  sk_world *w = topo_world(nodes, per_node);
  static run_arg a;
  memset(&a, 0, sizeof a);
  a.per_node = per_node;
  cr_assert_eq(sk_world_run(w, every_kind_on_every_comm, &a, NULL), SK_OK, "%s", sk_world_error_message(w));
  for (int r = 0; r < N; r++)
    for (int c = 0; c < COMMS; c++)
      for (int k = 0; k < KINDS; k++)
        cr_expect(near(a.took[r][c][k], want[c][k]), "%dx%d, rank %d, %s on the %s communicator: %.9g us, want %.9g",
                  nodes, per_node, r, kind_names[k], comm_names[c], a.took[r][c][k], want[c][k]);
  sk_world_destroy(w, NULL);
}

/* 2 nodes of 4. Ring costs are docs section 2's on p ranks over the slowest link crossed. */
Test(comm_topology, collectives_on_2x4, .timeout = 60) {
  const double want[COMMS][KINDS] = {
      /* world: p 8, m 2, k = k0 = 4; hierarchical wins every kind it runs */
      {/* ring 2*7*AE + 2*7/8*NE = 157.5; tree 2*(3*AI + 1*AE) + 2*NE = 46 */
       2 * (3 * AI + 3.0 / 4 * NI) + 2 * 1 * AE + 2.0 * 1 / 2 * NE / 4,            /* 30 */
       /* ring 7*AE + 7*NE = 140 */
       1 * AE + (8 - 4) / 4.0 * NE + 3 * AI + 3.0 / 4 * 8 * NI,                      /* 29 */
       1 * AE + (8 - 4) / 4.0 * NE + 3 * AI + 3.0 / 4 * 8 * NI,                      /* 29 */
       /* ring 7*AE + NE = 80 */
       2 * (3 * AI + 3.0 / 4 * NI) + 1 * AE + NE / 4,                                /* 20 */
       /* ring 140 */
       3 * AI + 3.0 / 4 * 8 * NI + 1 * AE + (8 - 4) * NE,                            /* 59 */
       /* AllToAllV: ring only, COUNT per peer */
       7 * AE + 7 * NE},                                                             /* 140 */
      /* intra-node: p 4 on one node; the ring on the intra link (hierarchical ties, tree 8) */
      {2 * 3 * AI + 2 * 3.0 / 4 * NI, 3 * AI + 3 * NI, 3 * AI + 3 * NI, 3 * AI + NI, 3 * AI + 3 * NI,
       3 * AI + 3 * NI},
      /* cross-node: p 2, one per node; the ring on the inter link (hierarchical ties, tree 40) */
      {2 * AE + NE, AE + NE, AE + NE, AE + NE, AE + NE, AE + NE}};
  run_and_check(2, 4, want);
}

/* 4 nodes of 2. */
Test(comm_topology, collectives_on_4x2, .timeout = 60) {
  const double want[COMMS][KINDS] = {
      /* world: p 8, m 4, k = k0 = 2 */
      {/* tree: 2*(1*AI + floor(log2 4)*AE) + 2*NE = 62; ring 157.5; hierarchical
          2*(AI + NI/2) + 2*3*AE + 2*3/4*NE/2 = 70.5 */
       2 * (1 * AI + 2 * AE) + 2 * NE,
       /* hierarchical: 3*AE + (8-2)/2*NE + AI + 1/2*8*NI = 65; ring 140 */
       3 * AE + (8 - 2) / 2.0 * NE + AI + 8 * NI / 2, 3 * AE + (8 - 2) / 2.0 * NE + AI + 8 * NI / 2,
       /* hierarchical: 2*(AI + NI/2) + 3*AE + NE/2 = 38; ring 80 */
       2 * (AI + NI / 2) + 3 * AE + NE / 2,
       /* hierarchical: AI + 1/2*8*NI + 3*AE + (8-2)*NE = 95; ring 140 */
       AI + 8 * NI / 2 + 3 * AE + (8 - 2) * NE,
       /* AllToAllV: ring only */
       7 * AE + 7 * NE},
      /* intra-node: p 2 on one node: the ring on the intra link */
      {2 * AI + NI, AI + NI, AI + NI, AI + NI, AI + NI, AI + NI},
      /* cross-node: p 4, one per node. AllReduce: tree 2*(0 + 2*AE) + 2*NE = 60 beats the ring's
         2*3*AE + 2*3/4*NE = 75; the rest ring on the inter link (hierarchical ties) */
      {2 * 2 * AE + 2 * NE, 3 * AE + 3 * NE, 3 * AE + 3 * NE, 3 * AE + NE, 3 * AE + 3 * NE, 3 * AE + 3 * NE}};
  run_and_check(4, 2, want);
}

/* Send/Recv: AI + NI inside a node, AE + NE across nodes. Each step's pairs start with every
   clock aligned; devices outside the pairs do not move. */
#define STEPS 4

typedef struct p2p_arg {
  int per_node;
  double took[N][STEPS];
  sk_result rc[N];
} p2p_arg;

static sk_result one_pair(sk_comm *c, sk_comm *world, int from, int to, double *took) {
  int r = sk_comm_rank(c), wr = sk_comm_rank(world);
  double before = sk_comm_clock_us(world);
  sk_result rc = SK_OK;
  if (r == from) rc = sk_send(c, sendb[wr], COUNT, SK_F32, to, NULL);
  if (r == to) rc = sk_recv(c, recvb[wr], COUNT, SK_F32, from, NULL);
  *took = sk_comm_clock_us(world) - before;
  return rc != SK_OK ? rc : sk_comm_clock_align(world, NULL);
}

static sk_result pairs(sk_comm *world, void *arg) {
  p2p_arg *a = (p2p_arg *)arg;
  int r = sk_comm_rank(world), per = a->per_node;
  sk_comm *intra = NULL, *cross = NULL;
  sk_result rc = split_both(world, per, &intra, &cross);
  if (rc == SK_OK) rc = one_pair(world, world, 0, per - 1, &a->took[r][0]);   /* node 0 inside */
  if (rc == SK_OK) rc = one_pair(world, world, per - 1, per, &a->took[r][1]); /* node 0 to node 1 */
  if (rc == SK_OK) rc = one_pair(cross, world, 0, 1, &a->took[r][2]);         /* the two highest nodes */
  if (rc == SK_OK) rc = one_pair(intra, world, 1, 0, &a->took[r][3]);         /* inside every node */
  sk_comm_destroy(intra, NULL);
  sk_comm_destroy(cross, NULL);
  a->rc[r] = rc;
  return rc;
}

static void check_pairs(int nodes, int per) {
  sk_world *w = topo_world(nodes, per);
  static p2p_arg a;
  memset(&a, 0, sizeof a);
  a.per_node = per;
  cr_assert_eq(sk_world_run(w, pairs, &a, NULL), SK_OK, "%s", sk_world_error_message(w));
  for (int r = 0; r < N; r++) {
    int node = r / per, place = r % per;
    bool first = node == 0 && (place == 0 || place == per - 1);                      /* 0 -> per-1 */
    bool second = (node == 0 && place == per - 1) || (node == 1 && place == 0);      /* per-1 -> per */
    /* the cross communicator's members 0 and 1 are its two highest world ranks: the last two nodes */
    double want[STEPS] = {first ? AI + NI : 0, second ? AE + NE : 0, node >= nodes - 2 ? AE + NE : 0,
                          place <= 1 ? AI + NI : 0};
    for (int s = 0; s < STEPS; s++)
      cr_expect(near(a.took[r][s], want[s]), "%dx%d, step %d: rank %d's clock moved %.9g us, want %.9g", nodes, per,
                s, r, a.took[r][s], want[s]);
  }
  sk_world_destroy(w, NULL);
}

Test(comm_topology, send_recv_by_node, .timeout = 60) {
  check_pairs(2, 4);
  check_pairs(4, 2);
}
