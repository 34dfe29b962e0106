/* sk_topology.h -- what a collective costs on a hierarchical cluster (sk_topology in sk_cluster:
   nodes of devices, an intra-node and an inter-node link), per algorithm, and which algorithm
   is cheapest, as NCCL's tuner picks one per call.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_TOPOLOGY_IMPL)   #include "sk_topology.h"
   Needs libc and sk_comm.h (the cluster model, the table of collectives, sk_link_cost_us).
   Pure functions: nothing allocated, no state. The threads backend's virtual clocks
   (sk_threads.h) price every call with sk_cluster_coll_us and sk_cluster_p2p_us. A separate header because it builds on
   sk_comm.h's declarations (sk_coll_kind, sk_link_cost_us) while sk_comm.h itself only holds
   the model's fields and their check; sk_comm.h including it back would be a cycle.

   A GROUP is given as its members' world ranks in ascending order. The model's cost depends on
   which devices take part, not on their order in the communicator; ascending order lets one
   scan find duplicates and the group's shape without allocating:
     p   members;   m   nodes it touches;   k   most members on one of them;
     k0  fewest members on one of them (k0 == k: an even group).
   A FLAT cluster (zero topology) keeps sk_link_cost_us's ring formulas and prices ring only;
   algorithm choice applies under a topology. Every formula: docs/cost-models.md, section 2.1.

   ALGORITHMS (sk_coll_algo, named "ring", "tree", "hierarchical" in reports and JSON)
     ring          every collective but Send/Recv: sk_link_cost_us on p ranks over the slowest
                   link the ring crosses (the intra link when some node holds two members, the
                   inter link when it spans two nodes; both: the larger cost, since every ring
                   step waits for its slowest hop).
     tree          AllReduce only (NCCL's double binary tree runs AllReduce alone): a chain
                   inside each node, a binary tree across nodes, NCCL's cost formula.
     hierarchical  AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll: an
                   intra-node stage, an inter-node stage between the members with the same place
                   on their nodes (each with its own NIC), an intra-node stage.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_TOPOLOGY_IMPL)
#define SK_TOPOLOGY_IMPL
#endif
#ifndef SK_TOPOLOGY_H
#define SK_TOPOLOGY_H

#include "sk_core.h"
#include "sk_comm.h"

SK_EXTERN_C_BEGIN

typedef enum sk_coll_algo { SK_ALGO_RING, SK_ALGO_TREE, SK_ALGO_HIERARCHICAL, SK_ALGO_COUNT } sk_coll_algo;

/* "ring", "tree", "hierarchical"; "invalid" for any other value. */
SK_API const char *sk_coll_algo_name(sk_coll_algo algo);
/* The algorithm named `name` (as sk_coll_algo_name spells it); false when none is. */
SK_API bool sk_coll_algo_from_name(const char *name, sk_coll_algo *algo);
/* Whether `algo` runs collective `kind` (the list above); false for Send/Recv and invalid values. */
SK_API bool sk_coll_algo_applies(sk_coll_algo algo, sk_coll_kind kind);

/* Modelled duration (us) of one `kind` call of `count` elements of `dt` (count as in the call,
   NCCL conventions) on the group ranks[0..n-1] (ascending world ranks), run with `algo`, into
   *us. SK_ERR_UNSUPPORTED when the algorithm does not run that kind, or is not ring on a flat
   cluster; SK_ERR_INVALID_ARGUMENT for a bad cluster (sk_cluster_check), kind (Send/Recv: see
   sk_cluster_p2p_us), dtype, n, or a rank out of order or past the topology's devices. */
SK_API sk_result sk_cluster_algo_us(const sk_cluster *cluster, sk_coll_algo algo, sk_coll_kind kind, size_t count,
                                    sk_dtype dt, int n, const int *ranks, double *us, sk_error *err);

/* The cheapest algorithm for the call and its cost, as NCCL's tuner picks: every algorithm that
   runs `kind` is priced; costs within one part in 1e9 of each other tie, and a tie goes to the
   first of ring, tree, hierarchical. A flat cluster gives ring and sk_link_cost_us's value.
   Arguments and refusals as sk_cluster_algo_us's. */
SK_API sk_result sk_cluster_coll_us(const sk_cluster *cluster, sk_coll_kind kind, size_t count, sk_dtype dt, int n,
                                    const int *ranks, sk_coll_algo *algo, double *us, sk_error *err);

/* The dearest of the groups mesh axes `axes` cut `mesh` into, for one `kind` call of `count`
   elements of `dt` on each (as sk_cluster_coll_us prices it, its cheapest algorithm): the mesh's
   rank r is world rank first_rank + r (a stage's devices in row-major order), a group the ranks
   that differ only along `axes`. A group of one device costs 0. The searches (sk_search_cost.h)
   price an operator's collectives with it: every group of a mesh axis makes the call at once,
   and the step waits for the slowest. On a flat cluster every group costs the same and one is
   priced. Arguments and refusals as sk_cluster_coll_us's, and SK_ERR_INVALID_ARGUMENT for a NULL
   mesh, axes past its axes, or devices past the topology's. */
SK_API sk_result sk_cluster_mesh_coll_us(const sk_cluster *cluster, sk_coll_kind kind, size_t count, sk_dtype dt,
                                         const sk_mesh *mesh, uint32_t axes, int first_rank, double *us,
                                         sk_error *err);

/* Send/Recv of `count` elements of `dt` from world rank src to world rank dst: alpha + bytes / B
   over the intra link when both sit on one node, the inter link otherwise (a flat cluster: its
   link, as sk_link_cost_us). SK_ERR_INVALID_ARGUMENT for a bad cluster, dtype, or rank. */
SK_API sk_result sk_cluster_p2p_us(const sk_cluster *cluster, int src, int dst, size_t count, sk_dtype dt,
                                   double *us, sk_error *err);

SK_EXTERN_C_END

#endif /* SK_TOPOLOGY_H */

/* ==== implementation ======================================================================== */
#if defined(SK_TOPOLOGY_IMPL) && !defined(SK_TOPOLOGY_IMPL_DONE)
#define SK_TOPOLOGY_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <string.h>

SK_EXTERN_C_BEGIN

static const char *const sk__algo_names[SK_ALGO_COUNT] = {"ring", "tree", "hierarchical"};

SK_API const char *sk_coll_algo_name(sk_coll_algo algo) {
  return (int)algo >= 0 && algo < SK_ALGO_COUNT ? sk__algo_names[algo] : "invalid";
}

SK_API bool sk_coll_algo_from_name(const char *name, sk_coll_algo *algo) {
  for (int a = 0; name && algo && a < (int)SK_ALGO_COUNT; a++)
    if (!strcmp(name, sk__algo_names[a])) return *algo = (sk_coll_algo)a, true;
  return false;
}

SK_API bool sk_coll_algo_applies(sk_coll_algo algo, sk_coll_kind kind) {
  if ((int)kind <= (int)SK_COLL_NONE || kind >= SK_COLL_KIND_COUNT || sk_coll_p2p(kind)) return false;
  switch (algo) {
    case SK_ALGO_RING: return true;
    case SK_ALGO_TREE: return kind == SK_COLL_ALLREDUCE;
    case SK_ALGO_HIERARCHICAL:
      return kind == SK_COLL_ALLREDUCE || kind == SK_COLL_ALLGATHER || kind == SK_COLL_REDUCE_SCATTER ||
             kind == SK_COLL_BROADCAST || kind == SK_COLL_REDUCE || kind == SK_COLL_ALLTOALL;
    default: return false;
  }
}

/* The group's shape on the topology (see the header): p, m, k, k0. */
typedef struct sk__group_shape {
  int p, m, k, k0;
} sk__group_shape;

/* Checks ranks (ascending, in the topology's devices; flat: >= 0) and, under a topology, scans
   out the shape: ascending ranks put each node's members next to each other. */
static sk_result sk__group_shape_of(const sk_topology *t, int n, const int *ranks, sk__group_shape *s, sk_error *err) {
  int devices = t->nodes ? t->nodes * t->per_node : SK_TOPOLOGY_MAX_DEVICES;
  if (n < 1 || n > devices || !ranks)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "group: n %d ranks at %p; want 1..%d ranks", n, (const void *)ranks,
                    devices);
  memset(s, 0, sizeof *s);
  s->p = n, s->k0 = n;
  for (int i = 0, run = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= devices || (i > 0 && ranks[i] <= ranks[i - 1]))
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "group: ranks[%d] = %d; want ascending world ranks in 0..%d, each once", i, ranks[i],
                      devices - 1);
    if (!t->nodes) continue;
    bool new_node = i == 0 || ranks[i] / t->per_node != ranks[i - 1] / t->per_node;
    run = new_node ? 1 : run + 1;
    if (new_node) s->m++;
    if (run > s->k) s->k = run;
    /* a node's run is complete at the group's end or where the next rank is on another node */
    if ((i == n - 1 || ranks[i + 1] / t->per_node != ranks[i] / t->per_node) && run < s->k0) s->k0 = run;
  }
  return SK_OK;
}

/* msgs latencies and `bytes` on the wire over one link: the alpha-beta term every stage is. */
static double sk__hop_us(const sk_link_model *l, double msgs, double bytes) {
  return msgs * l->alpha_us + bytes * (1e-3 / l->gbps); /* 1 GB/s = 1e3 bytes per us */
}

/* Ring over the slowest link it crosses: each link's sk_link_cost_us, the larger one. */
static double sk__ring_us(const sk_topology *t, const sk__group_shape *s, sk_coll_kind kind, size_t count,
                          sk_dtype dt) {
  double us = s->k >= 2 ? sk_link_cost_us(&t->intra, kind, count, dt, s->p) : 0;
  double inter = s->m >= 2 ? sk_link_cost_us(&t->inter, kind, count, dt, s->p) : 0;
  return inter > us ? inter : us;
}

/* NCCL's tree AllReduce: 2((k-1) a_intra + floor(log2 m) a_inter) + 2 n / B, B the slower
   bandwidth of the links the tree uses (up the tree and back down, each byte crosses it twice). */
static double sk__tree_us(const sk_topology *t, const sk__group_shape *s, double bytes) {
  if (s->p == 1) return 0;
  int depth = 0;
  for (int v = s->m; v > 1; v >>= 1) depth++;
  double gbps = s->m >= 2 ? t->inter.gbps : t->intra.gbps;
  if (s->m >= 2 && s->k >= 2 && t->intra.gbps < gbps) gbps = t->intra.gbps;
  return 2 * ((s->k - 1) * t->intra.alpha_us + depth * t->inter.alpha_us) + 2 * bytes * (1e-3 / gbps);
}

/* Hierarchical: intra stage(s) over the fullest node (k members), the inter stage over m nodes
   carrying the emptiest node's share (each of its k0 members holds 1/k0 of the node's data). */
static double sk__hier_us(const sk_topology *t, const sk__group_shape *s, sk_coll_kind kind, double bytes) {
  double p = s->p, m = s->m, k = s->k, k0 = s->k0;
  double in_frac = (k - 1) / k; /* of the node's data, what one member exchanges inside it */
  switch (kind) {
    case SK_COLL_ALLREDUCE: /* ReduceScatter, AllReduce of n/k0 across nodes, AllGather */
      return 2 * sk__hop_us(&t->intra, k - 1, in_frac * bytes) +
             sk__hop_us(&t->inter, 2 * (m - 1), 2 * (m - 1) / m * bytes / k0);
    case SK_COLL_BROADCAST: /* Scatter, Broadcast of n/k0 across nodes, AllGather */
    case SK_COLL_REDUCE:    /* its mirror: ReduceScatter, Reduce across nodes, Gather */
      return 2 * sk__hop_us(&t->intra, k - 1, in_frac * bytes) + sk__hop_us(&t->inter, m - 1, bytes / k0);
    case SK_COLL_ALLGATHER:      /* AllGather across nodes, then inside them */
    case SK_COLL_REDUCE_SCATTER: /* its mirror: inside nodes, then across them */
      return sk__hop_us(&t->intra, k - 1, in_frac * p * bytes) + sk__hop_us(&t->inter, m - 1, (p - k0) / k0 * bytes);
    case SK_COLL_ALLTOALL: /* regroup inside the node by destination place, then across nodes */
      return sk__hop_us(&t->intra, k - 1, in_frac * p * bytes) + sk__hop_us(&t->inter, m - 1, (p - k0) * bytes);
    default: return 0; /* not reached: sk_coll_algo_applies guards */
  }
}

/* The checks every collective price shares: cluster, kind, dtype, output, and the group. */
static sk_result sk__coll_args(const sk_cluster *c, sk_coll_kind kind, sk_dtype dt, int n, const int *ranks,
                               const double *us, sk__group_shape *s, sk_error *err) {
  sk_result r = sk_cluster_check(c, "cluster", err);
  if (r) return r;
  if ((int)kind <= (int)SK_COLL_NONE || kind >= SK_COLL_KIND_COUNT || sk_coll_p2p(kind))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "kind %d (%s): want a collective (Send/Recv: sk_cluster_p2p_us)",
                    (int)kind, sk_coll_kind_name(kind));
  if (!sk_dtype_valid(dt)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dtype %d is not a dtype", (int)dt);
  if (!us) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "us (the output) is NULL");
  return sk__group_shape_of(&c->topology, n, ranks, s, err);
}

SK_API sk_result sk_cluster_algo_us(const sk_cluster *c, sk_coll_algo algo, sk_coll_kind kind, size_t count,
                                    sk_dtype dt, int n, const int *ranks, double *us, sk_error *err) {
  sk__group_shape s;
  sk_result r = sk__coll_args(c, kind, dt, n, ranks, us, &s, err);
  if (r) return r;
  if ((int)algo < 0 || algo >= SK_ALGO_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "algo %d: want ring, tree or hierarchical", (int)algo);
  if (!sk_coll_algo_applies(algo, kind) || (!c->topology.nodes && algo != SK_ALGO_RING))
    return sk__fail(err, SK_ERR_UNSUPPORTED, "%s does not run %s%s", sk_coll_algo_name(algo), sk_coll_kind_name(kind),
                    c->topology.nodes ? "" : " on a flat cluster (no topology: ring only)");
  double bytes = (double)count * (double)sk_dtype_size(dt);
  if (!c->topology.nodes) *us = sk_link_cost_us(&c->link, kind, count, dt, n);
  else if (algo == SK_ALGO_RING) *us = sk__ring_us(&c->topology, &s, kind, count, dt);
  else if (algo == SK_ALGO_TREE) *us = sk__tree_us(&c->topology, &s, bytes);
  else *us = sk__hier_us(&c->topology, &s, kind, bytes);
  return SK_OK;
}

SK_API sk_result sk_cluster_coll_us(const sk_cluster *c, sk_coll_kind kind, size_t count, sk_dtype dt, int n,
                                    const int *ranks, sk_coll_algo *algo, double *us, sk_error *err) {
  if (!algo) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "algo (the output) is NULL");
  sk_result r = sk_cluster_algo_us(c, SK_ALGO_RING, kind, count, dt, n, ranks, us, err);
  if (r) return r;
  *algo = SK_ALGO_RING;
  if (!c->topology.nodes) return SK_OK; /* flat: ring only */
  for (int a = SK_ALGO_RING + 1; a < (int)SK_ALGO_COUNT; a++) {
    double cost = 0;
    if (!sk_coll_algo_applies((sk_coll_algo)a, kind)) continue;
    if ((r = sk_cluster_algo_us(c, (sk_coll_algo)a, kind, count, dt, n, ranks, &cost, err))) return r;
    /* strictly cheaper beyond rounding: equal formulas summed in another order must tie */
    if (cost < *us * (1 - 1e-9)) *us = cost, *algo = (sk_coll_algo)a;
  }
  return SK_OK;
}

/* The world ranks of the group of `axes` holding mesh rank `base` (whose coordinates along
   `axes` are 0), ascending: row-major ranks, so the minor axis is spread first and each major
   one copies the members so far past them. */
static int sk__mesh_group_of(const sk_mesh *mesh, uint32_t axes, int base, int first_rank, int *ranks) {
  int n = 1, stride = 1;
  ranks[0] = first_rank + base;
  for (int a = mesh->naxes - 1; a >= 0; stride *= mesh->dims[a], a--) {
    if (!(axes >> a & 1u)) continue;
    int had = n;
    for (int c = 1; c < mesh->dims[a]; c++)
      for (int i = 0; i < had; i++) ranks[n++] = ranks[i] + c * stride;
  }
  return n;
}

SK_API sk_result sk_cluster_mesh_coll_us(const sk_cluster *c, sk_coll_kind kind, size_t count, sk_dtype dt,
                                         const sk_mesh *mesh, uint32_t axes, int first_rank, double *us,
                                         sk_error *err) {
  if (!mesh || !us || mesh->naxes < 1 || mesh->naxes > SK_MAX_AXES || mesh->size < 1 || mesh->size > SK_MAX_DEVICES ||
      first_rank < 0 || axes >> mesh->naxes)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "mesh group price: mesh %p, axes 0x%x, first rank %d, us %p",
                    (const void *)mesh, (unsigned)axes, first_rank, (const void *)us);
  int p = 1, stride[SK_MAX_AXES], rest[SK_MAX_AXES], nrest = 0;
  for (int a = mesh->naxes - 1, s = 1; a >= 0; s *= mesh->dims[a], a--) {
    stride[a] = s;
    if (axes >> a & 1u) p *= mesh->dims[a];
    else rest[nrest++] = a;
  }
  int ranks[SK_MAX_DEVICES];
  sk_coll_algo algo;
  if (!c || !c->topology.nodes || p <= 1) { /* flat (every group alike) or one device */
    sk__group_shape s;
    ranks[0] = first_rank; /* checked as one member: a flat price needs the group's size alone */
    sk_result r = sk__coll_args(c, kind, dt, 1, ranks, us, &s, err);
    if (!r) *us = p <= 1 ? 0 : sk_link_cost_us(&c->link, kind, count, dt, p); /* sk_cluster_algo_us's ring */
    return r;
  }
  /* a group's shape on the nodes depends only on where its first rank sits on its node: each
     such place priced once */
  const int per = c->topology.per_node;
  bool seen[SK_MAX_DEVICES];
  memset(seen, 0, sizeof seen);
  *us = 0;
  int coord[SK_MAX_AXES] = {0};
  for (;;) {
    int base = 0;
    for (int i = 0; i < nrest; i++) base += coord[i] * stride[rest[i]];
    int place = (first_rank + base) % per;
    if (place >= SK_MAX_DEVICES || !seen[place]) {
      if (place < SK_MAX_DEVICES) seen[place] = true;
      int n = sk__mesh_group_of(mesh, axes, base, first_rank, ranks);
      double cost = 0;
      sk_result r = sk_cluster_coll_us(c, kind, count, dt, n, ranks, &algo, &cost, err);
      if (r) return r;
      if (cost > *us) *us = cost;
    }
    int i = 0; /* the next leader: count over the other axes, the minor one first */
    while (i < nrest && ++coord[i] == mesh->dims[rest[i]]) coord[i++] = 0;
    if (i == nrest) break;
  }
  return SK_OK;
}

SK_API sk_result sk_cluster_p2p_us(const sk_cluster *c, int src, int dst, size_t count, sk_dtype dt, double *us,
                                   sk_error *err) {
  sk_result r = sk_cluster_check(c, "cluster", err);
  if (r) return r;
  const sk_topology *t = &c->topology;
  int devices = t->nodes ? t->nodes * t->per_node : SK_TOPOLOGY_MAX_DEVICES;
  if (src < 0 || src >= devices || dst < 0 || dst >= devices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "p2p: src %d, dst %d; want world ranks in 0..%d", src, dst,
                    devices - 1);
  if (!sk_dtype_valid(dt)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dtype %d is not a dtype", (int)dt);
  if (!us) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "us (the output) is NULL");
  const sk_link_model *l = !t->nodes ? &c->link : src / t->per_node == dst / t->per_node ? &t->intra : &t->inter;
  *us = sk_link_cost_us(l, SK_COLL_SEND, count, dt, 2);
  return SK_OK;
}

SK_EXTERN_C_END

#endif /* SK_TOPOLOGY_IMPL */
