/* sk_dryrun_clock.h -- a compiled plan's modelled training-step time with no data: every device's
   program walked together on virtual clocks, as the runtime's world of devices runs it under a
   priced cluster (sk_comm.h's sk_link_model: the threads backend's virtual clocks).

   Part of sk_dryrun.h (which includes it; its implementation comes with SK_DRYRUN_IMPL).

   THE WALK (a discrete-event simulation of sk_runtime_step on every device at once)
     Each device has a cursor in its program (plan->programs[stage]) and a virtual clock, from 0
     (the runtime aligns every clock before the step); each communicator the runtime would use
     (a plan group's member set; the world and the stage are one without a pipeline) has the time
     its last collective ended (link_free). A device runs until it reaches a collective; a
     collective starts when every member has issued it and link_free has passed -- the latest of
     the members' clocks at the call and link_free -- lasts sk_cluster_coll_us's price for the
     call (kind, count in elements as the runtime passes it, dtype, the members' world ranks),
     and every member's clock moves to its end (never back). Compute: every Forward, Backward
     and recomputed Forward costs sk_exec_flops / device_flops * 1e6 us on its device's clock
     (zero_bubble_v's halves half a backward), the runtime's own sum. A redistribution costs its
     agreement AllReduce (3 x i64 over the stage) followed by its plan's steps: a collective on
     its plan group, or, for a Send/Recv exchange, a charge over the stage as the executor makes
     it (sk_comm_clock_charge of sk_redist_step_clock_us: a call whose length is the busiest
     rank's; the threads backend moves those by peer access, which no priced call covers).
     step_us = the latest clock at the end: the runtime's stats.step_us for the step.
     Fusion buckets (sk_fusion.h: the Mirrors' AllReduces, hsdp's ReduceScatters and gathers)
     are non-blocking: each scheduler launches its buckets in order, a bucket when its last
     member is ready (under grad_computation_allreduce_overlap at that member's step for the
     AllReduces and ReduceScatters, else at its Fused step), the launch is its issue, and the
     clock reaches each end at the kind's WaitFused. hsdp's unbucketed steps block: level3's
     ParamGather (an AllGather of the shard), ShardMirror (an AllReduce of it).
     Pipelines: each stage's devices walk its program; a Send is non-blocking, a Recv blocks,
     the pair moves once both have posted (from the later clock, for sk_cluster_p2p_us: no
     link_free; matched in posting order per sender, receiver and link), a WaitSend reaches its
     Send's end; after the program a device waits for its sends still in flight. hsdp under a
     pipeline: at level2 each micro-batch's GradReduceScatter blocks (a ReduceScatter of the
     slice in the Mirrors' wire); at level1 / level3 the micro-batches but the last only sum,
     the last one's is a bucket member.
     After the program (sk_runtime.h's train step): the update's local-norm gather when asked
     (print_local_norm / dump_local_norm: a Gather over the world to device 0 of one f64 per
     trainable parameter, plus one with device_local_norm), then under a pipeline the loss
     AllReduce over the world (1 x f64).
     grad_accumulation_step M: a window's M - 1 first micro-steps stop at GradsReady (no
     update, so no norms), the last runs the `last` steps too (hsdp level1 / level3's
     ReduceScatters among them); the figures are the window's mean per micro-step (the
     runtime's step_us / steps over whole windows).
   REFUSED (SK_ERR_UNSUPPORTED, naming what): a cluster that prices nothing (no clocks run).

   License: MIT. */
#ifndef SK_DRYRUN_CLOCK_H
#define SK_DRYRUN_CLOCK_H

#include "sk_dryrun.h"
#include "sk_program.h" /* sk_program_op_step */

SK_EXTERN_C_BEGIN

/* The modelled step time of a plan. span_us and busy_us are the caller's arrays of
   plan->world_devices entries, or NULL when not wanted. */
typedef struct sk_dryrun_time {
  double step_us; /* the step's makespan: the latest device clock at its end (stats.step_us) */
  double bubble;  /* 1 - the devices' mean compute time / step_us (0 when step_us is 0) */
  double *span_us; /* [world_devices]: each device's clock at the end of its program */
  double *busy_us; /* [world_devices]: each device's modelled compute */
} sk_dryrun_time;

/* One training step of `plan` on plan->desc.cluster's clocks into *out (its arrays, when set,
   filled). The executed run equals it when its world's cluster is the plan's. */
SK_API sk_result sk_dryrun_step_time(const sk_parallel_plan *plan, sk_dryrun_time *out, sk_error *err);

SK_EXTERN_C_END
#define SK_DRYRUN_CLOCK_DECLS
#endif /* SK_DRYRUN_CLOCK_H */

#if defined(SK_DRYRUN_IMPL) && defined(SK_DRYRUN_IMPL_DONE) && defined(SK_DRYRUN_CLOCK_DECLS) && \
    !defined(SK_DRYRUN_CLOCK_IMPL_DONE)
#define SK_DRYRUN_CLOCK_IMPL_DONE
#include "sk_topology.h"

SK_EXTERN_C_BEGIN

/* After a device's program (sk_runtime.h's train step): its sends still in flight waited for
   (a pipeline), the update's local-norm gather, the loss's AllReduce (a pipeline), done. */
enum { SK__DC_TAIL_SENDS = 0, SK__DC_TAIL_NORMS, SK__DC_TAIL_LOSS, SK__DC_TAIL_DONE };

/* One call on one communicator, gathered as its members post it: how many have, their latest
   clock at the call; once all have, when it ends. */
typedef struct sk__dc_rec {
  int comm, posted;
  bool done;
  double issue, end;
  sk_coll_kind kind; /* SK_COLL_NONE: a charge (sk_comm_clock_charge) of charge_us */
  size_t count;
  double charge_us;
  sk_dtype dt;
} sk__dc_rec;

/* A communicator of the run: its members (ascending world ranks), when its last collective
   ends, and its calls in issue order (indices into the walk's records). */
typedef struct sk__dc_comm {
  int *ranks, n;
  double link_free;
  int *recs, nrecs, cap;
} sk__dc_comm;

/* The fusion schedulers' kinds: the Mirrors' AllReduces, hsdp's ReduceScatters and gathers. */
enum { SK__DC_AR = 0, SK__DC_RS, SK__DC_AG, SK__DC_KINDS };

/* One scheduler's buckets: their Fused steps in launch order, each one's member steps, and per
   device the members marked ready (overlap) and the buckets in flight. */
typedef struct sk__dc_sched {
  int n, stride;  /* buckets; the per-device rows' length (largest bucket id + 2) */
  int *step;      /* [n]: each one's Fused step */
  int *members;   /* [n]: its member steps */
  int *of;        /* [stride]: the launch index of a bucket id */
  int *ready;     /* [ndev * stride] */
  int *reqs;      /* [ndev * stride]: records in flight */
} sk__dc_sched;

/* A Send and its Recv (a pipeline's activations or gradients between stages), matched in
   posting order per (link, sender, receiver) as the threads backend matches them. */
typedef struct sk__dc_p2p {
  int src, dst, link, step;    /* world ranks; 0 forward link, 1 backward; the Send's program step */
  size_t count;
  sk_dtype dt;
  bool has_send, has_recv, done, waited;
  double send_issue, recv_issue, end;
} sk__dc_p2p;

/* The messages of one (sender, receiver, link) in posting order: the n-th Send and the n-th
   Recv of the pair are the n-th record's two sides. */
typedef struct sk__dc_pq {
  int *recs, n, cap;  /* p2p records */
  int sends, recvs;   /* the sides posted so far */
} sk__dc_pq;

typedef struct sk__dc_dev {
  int stage;         /* its pipeline stage: its program */
  int pwait;         /* the Recv it is blocked in (a p2p record), or -1 */
  int tail;          /* after its program: SK__DC_TAIL_* */
  bool short_step;   /* its micro-step ended at GradsReady: no update */
  int pc;            /* the next program step */
  int sub;           /* the next call of that step (a move makes several) */
  int wait;          /* the record of the blocking call it is in, or -1 */
  int nreqs[SK__DC_KINDS];    /* its fusion buckets in flight, by kind (records in reqs) */
  int launched[SK__DC_KINDS]; /* buckets launched this step, by kind */
  double clock, busy;
} sk__dc_dev;

/* One collective call a program step makes: its kind, communicator slot, elements and dtype. */
typedef struct sk__dc_call {
  sk_coll_kind kind; /* SK_COLL_NONE: a charge of charge_us */
  int slot;
  size_t count;      /* elements as the call takes them, or in all (per_member) */
  bool per_member;   /* count is the whole array: the call takes count / group size */
  sk_dtype dt;
  double charge_us;  /* a charge's length: the largest any member passes */
} sk__dc_call;

/* A Send/Recv exchange's price, kept for the moves that repeat it: the same layouts, dtype and
   stage give the same plan and the same price (a network's repeated layers move alike). */
typedef struct sk__dc_xprice {
  sk_layout from, to;
  sk_dtype dt;
  int stage, step;
  double us;
} sk__dc_xprice;

typedef struct sk__dc {
  sk__dr d;                /* the FLOPs and dtypes (alike on every device of a stage) */
  const sk_parallel_plan *p;
  int ndev, nslots;        /* slots: the plan's groups, then the stage communicator */
  int nnorms;              /* the local norms each device gathers at the update (0: none) */
  bool last;               /* walking the last micro-step of a grad-accumulation window (or no window) */
  sk__dc_dev *dev;
  int *slot;               /* [ndev * nslots]: the device's communicator of each slot, -1 unknown */
  int *seq;                /* [ndev * nslots]: calls the device has posted on it */
  int *scratch;            /* [ndev]: a group's ranks as listed, before its communicator keeps them */
  sk__dc_comm *comms;
  int ncomms;
  sk__dc_rec *recs;
  int nrecs, caprecs;
  int *moff;               /* [stages + 1]: each stage's first entry in nmove */
  int *nmove;              /* [every stage's steps]: a move step's calls, -1 not yet known */
  sk__dc_call **move;      /* [that]: they (the agreement, then at most every step of its plan) */
  sk__dc_p2p *p2ps;
  int np2p, capp2p;
  sk__dc_pq *pq;           /* [ndev * stages * 2]: by sender, receiver's stage, link (sk__dc_pq_of) */
  sk__dc_sched *sched;     /* [stages * SK__DC_KINDS] */
  sk__dc_xprice *xp;       /* exchange prices met so far (sk__dc_exchange_us) */
  int nxp, capxp;
  sk_error *err;
} sk__dc;

static sk_result sk__dc_refuse(sk__dc *c, int i, const char *what) {
  return sk__fail(c->err, SK_ERR_UNSUPPORTED, "dry run step time: program step %d: %s is not modelled", i, what);
}

/* Plan-wide refusals, before any walk. */
static sk_result sk__dc_check(const sk_parallel_plan *p, sk_error *err) {
  const sk_autoparallel *pd = &p->desc;
  if (!sk_cluster_prices(&pd->cluster))
    return sk__fail(err, SK_ERR_UNSUPPORTED, "dry run step time: a cluster that prices no communication (no clock runs) is not modelled");
  const sk_topology *t = &pd->cluster.topology; /* as sk_world_create refuses it */
  if (t->nodes && (long long)t->nodes * t->per_node < p->world_devices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dry run step time: the topology's %d x %d devices are fewer than the plan's %d",
                    t->nodes, t->per_node, p->world_devices);
  return SK_OK;
}

/* The communicator slots past the plan's groups: the stage's, then the world's. */
static int sk__dc_stage_slot(const sk__dc *c) { return c->nslots - 2; }
static int sk__dc_world_slot(const sk__dc *c) { return c->p->stages > 1 ? c->nslots - 1 : c->nslots - 2; }

/* The slot of plan group id: the runtime's own communicators for the world and the stage (one
   without a pipeline), a split of its own for each other group. */
static int sk__dc_slot_of(const sk__dc *c, int id) {
  sk_plan_group_kind k = c->p->groups[id].kind;
  return k == SK_PGROUP_STAGE ? sk__dc_stage_slot(c) : k == SK_PGROUP_WORLD ? sk__dc_world_slot(c) : id;
}

static void sk__dc_sort(int *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      int t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
}

/* Device dev's communicator of `slot`, made on first use for every member at once. */
static sk_result sk__dc_comm_of(sk__dc *c, int dev, int slot, int *out) {
  int *at = &c->slot[(size_t)dev * (size_t)c->nslots + (size_t)slot];
  if (*at >= 0) return *out = *at, SK_OK;
  const sk_allocator *a = &c->p->desc.allocator;
  int *all = c->scratch, n = 0; /* a group is at most the world: listed there, then kept at its size */
  sk_result r = SK_OK;
  int nd = c->p->desc.ndevices, first = c->dev[dev].stage * nd;
  if (slot == sk__dc_stage_slot(c))
    for (n = 0; n < nd; n++) all[n] = first + n;
  else if (slot == c->nslots - 1)
    for (n = 0; n < c->ndev; n++) all[n] = n;
  else
    r = sk_parallel_group_ranks(c->p, slot, dev, all, c->ndev, &n, c->err);
  if (r) return r;
  int *ranks = (int *)sk__alloc(a, sizeof(int) * (size_t)(n > 0 ? n : 1), sizeof(int));
  if (!ranks) return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  memcpy(ranks, all, sizeof(int) * (size_t)n);
  sk__dc_sort(ranks, n);
  sk__dc_comm *m = &c->comms[c->ncomms];
  memset(m, 0, sizeof *m);
  m->ranks = ranks, m->n = n;
  for (int k = 0; k < n; k++) c->slot[(size_t)ranks[k] * (size_t)c->nslots + (size_t)slot] = c->ncomms;
  *out = c->ncomms++;
  return SK_OK;
}

static bool sk__dc_grow(const sk_allocator *a, void **arr, int n, int *cap, size_t es);

static bool sk__dc_layout_equal(const sk_layout *a, const sk_layout *b) {
  if (!sk_mesh_equal(&a->mesh, &b->mesh) || a->ndims != b->ndims) return false;
  for (int d = 0; d < a->ndims; d++) {
    if (a->shape[d] != b->shape[d] || a->map[d].naxes != b->map[d].naxes) return false;
    for (int x = 0; x < a->map[d].naxes; x++)
      if (a->map[d].axes[x] != b->map[d].axes[x]) return false;
  }
  return true;
}

/* The kept price of step k of an exchange like rp's on this stage, or NULL. */
static const sk__dc_xprice *sk__dc_xprice_of(const sk__dc *c, int stage, const sk_redist_plan *rp, int k) {
  const sk_redist_desc *rd = sk_redist_plan_desc(rp);
  for (int i = 0; i < c->nxp; i++) {
    const sk__dc_xprice *x = &c->xp[i];
    if (x->stage == stage && x->step == k && x->dt == rd->dtype && sk__dc_layout_equal(&x->from, &rd->from) &&
        sk__dc_layout_equal(&x->to, &rd->to))
      return x;
  }
  return NULL;
}

/* A Send/Recv exchange as the executor charges it over the stage (sk_redist_step_clock_us):
   one event as long as the busiest of the stage's ranks (sk_redist_step_busiest_us, which
   finds each rank's peers by interval arithmetic: O(devices * pieces per rank)). A model's
   layers repeat the same exchanges, so each distinct one is priced once and kept. */
static sk_result sk__dc_exchange_us(sk__dc *c, int stage, const sk_redist_plan *rp, int k, double *us) {
  const sk__dc_xprice *kept = sk__dc_xprice_of(c, stage, rp, k);
  if (kept) return *us = kept->us, SK_OK;
  if (!sk__dc_grow(&c->p->desc.allocator, (void **)&c->xp, c->nxp, &c->capxp, sizeof(sk__dc_xprice)))
    return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  int nd = c->p->desc.ndevices;
  int *world = (int *)sk__alloc(&c->p->desc.allocator, sizeof(int) * (size_t)nd, sizeof(int));
  if (!world) return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  for (int r = 0; r < nd; r++) world[r] = stage * nd + r;
  sk_result res = sk_redist_step_busiest_us(rp, k, &c->p->desc.cluster, world, us, c->err);
  sk__free(&c->p->desc.allocator, world);
  if (res) return res;
  const sk_redist_desc *rd = sk_redist_plan_desc(rp);
  sk__dc_xprice *x = &c->xp[c->nxp++];
  x->from = rd->from, x->to = rd->to, x->dt = rd->dtype, x->stage = stage, x->step = k, x->us = *us;
  return SK_OK;
}

/* Redistribution step k of move plan rp as a call (sk_redist.h's executor): an AllReduce,
   ReduceScatter, AllGather or AllToAll on the plan group along its axes (the last two priced
   alike whether they run as the collective or by peer access and a charge); a Send/Recv
   exchange as a charge over the stage. */
static sk_result sk__dc_move_step(sk__dc *c, int i, int stage, const sk_redist_plan *rp, int k, sk__dc_call *call,
                                  bool *has) {
  sk_redist_step_info si;
  sk_result r = sk_redist_plan_step(rp, k, &si, c->err);
  *has = false;
  memset(call, 0, sizeof *call);
  if (r || si.op == SK_REDIST_LOCAL || si.op == SK_REDIST_RESHAPE) return r;
  if (si.op == SK_REDIST_SENDRECV) {
    call->kind = SK_COLL_NONE, call->slot = sk__dc_stage_slot(c);
    r = sk__dc_exchange_us(c, stage, rp, k, &call->charge_us);
    return *has = !r, r;
  }
  sk_plan_group want;
  memset(&want, 0, sizeof want);
  want.kind = SK_PGROUP_MESH, want.mesh = si.from->mesh, want.axes = si.group_axes, want.tensor = -1;
  int id = sk_parallel_find_group(c->p, &want);
  if (id == -2) return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  if (id < 0) return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: program step %d: a redistribution's group is not the plan's", i);
  call->kind = si.op == SK_REDIST_ALLREDUCE        ? SK_COLL_ALLREDUCE
               : si.op == SK_REDIST_REDUCE_SCATTER ? SK_COLL_REDUCE_SCATTER
               : si.op == SK_REDIST_ALLGATHER      ? SK_COLL_ALLGATHER
                                                   : SK_COLL_ALLTOALL;
  call->slot = sk__dc_slot_of(c, id), call->count = si.count, call->per_member = false;
  call->dt = sk_redist_plan_desc(rp)->dtype;
  return *has = true, SK_OK;
}

/* Move step i's calls, made once (every rank's plan has the same steps: the executor's
   agreement checks their fingerprint): the agreement over the stage (3 x i64), then the steps. */
static sk_result sk__dc_move(sk__dc *c, int i, int stage, const sk_program_step *s, int move) {
  int gi = c->moff[stage] + i;
  if (c->nmove[gi] >= 0) return SK_OK;
  sk_redist_plan *rp = NULL;
  sk_result r = sk__dr_move_plan(&c->d, s->op, move, s->slot, &rp);
  int steps = r ? 0 : sk_redist_plan_nsteps(rp);
  size_t bytes = sizeof(sk__dc_call) * ((size_t)steps + 1);
  sk__dc_call *calls = r ? NULL : (sk__dc_call *)sk__calloc(&c->p->desc.allocator, bytes, sizeof(double));
  if (!r && !calls) r = sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  if (r) return sk_redist_plan_destroy(rp), r;
  c->move[gi] = calls;
  calls[0].kind = SK_COLL_ALLREDUCE, calls[0].slot = sk__dc_stage_slot(c), calls[0].count = 3, calls[0].dt = SK_I64;
  int n = 1;
  for (int k = 0; !r && k < steps; k++) {
    bool has = false;
    r = sk__dc_move_step(c, i, stage, rp, k, &calls[n], &has);
    n += has;
  }
  sk_redist_plan_destroy(rp);
  if (!r) c->nmove[gi] = n;
  return r;
}

/* A GradReduceScatter outside any bucket (a bucket's member is the scheduler's): under a
   pipeline at level2, each micro-batch's ReduceScatter of the whole slice at its step, in the
   Mirrors' wire (sk_rt_hsdp.h); at level1 / level3 the micro-batches but the last only sum
   (count 0). Without a pipeline every one is a member. */
static sk_result sk__dc_scatter_now(sk__dc *c, int i, const sk_program_step *s, sk__dc_call *call, bool *has) {
  if (s->count <= 0) return SK_OK;
  if (c->p->stages == 1 || c->p->desc.hsdp.level != SK_HSDP_LEVEL2)
    return sk__dc_refuse(c, i, "a GradReduceScatter outside any bucket");
  call->kind = SK_COLL_REDUCE_SCATTER, call->slot = sk__dc_slot_of(c, s->group), call->count = (size_t)s->count;
  call->per_member = true, call->dt = c->d.mirror_wire;
  return *has = true, SK_OK;
}

/* The collective program step i (plan step kind k) makes, if any (*has): its call as the
   runtime makes it (sk_rt_steps.h): a ReduceScatter's and an AllGather's count per member. */
static sk_result sk__dc_call_of(sk__dc *c, int stage, int i, int sub, const sk_program_step *s, sk_parallel_step_kind k,
                                sk__dc_call *call, bool *has) {
  const sk_parallel_plan *p = c->p;
  *has = false;
  int move = sk__dr_move_of(k), gi = c->moff[stage] + i;
  if (move >= 0) {
    sk_result r = sk__dc_move(c, i, stage, s, move);
    if (!r && sub < c->nmove[gi]) *call = c->move[gi][sub], *has = true;
    return r;
  }
  if (sub > 0) return SK_OK; /* the others make one call */
  if (k == SK_PSTEP_GRAD_REDUCE_SCATTER) return sk__dc_scatter_now(c, i, s, call, has);
  if (k == SK_PSTEP_PARAM_GATHER) { /* level3's, one AllGather of the shard into the slice (sk_rt_hsdp.h) */
    call->kind = SK_COLL_ALLGATHER, call->slot = sk__dc_slot_of(c, s->group), call->count = (size_t)s->count;
    call->per_member = true, call->dt = c->d.cdt;
    return *has = true, SK_OK;
  }
  bool comm = k == SK_PSTEP_FORWARD_COMM || k == SK_PSTEP_UNDO_COMM || k == SK_PSTEP_BACKWARD_COMM || k == SK_PSTEP_MIRROR;
  if (!comm) return SK_OK;
  if (s->bucket >= 0) return sk__dc_refuse(c, i, "a fusion bucket's member");
  if (s->count <= 0) return SK_OK; /* a packed BackwardComm's follower, a scaling UndoComm */
  int out0 = p->graph->ops[s->op].outputs[0];
  call->slot = sk__dc_slot_of(c, s->group), call->count = (size_t)s->count, call->kind = SK_COLL_ALLREDUCE;
  call->per_member = false;
  switch (k) {
    case SK_PSTEP_FORWARD_COMM:
      call->kind = p->steps[s->index].comm.kind, call->per_member = call->kind == SK_COLL_REDUCE_SCATTER;
      call->dt = sk_exec_is_float(p->graph->tensors[out0].dtype) ? c->d.wire : sk__dr_dtype(&c->d, out0);
      break;
    case SK_PSTEP_UNDO_COMM: call->kind = SK_COLL_ALLGATHER, call->per_member = true, call->dt = sk__dr_dtype(&c->d, out0); break;
    case SK_PSTEP_BACKWARD_COMM: call->dt = c->d.wire; break;
    default: call->dt = c->d.mirror_wire; break; /* a Mirror */
  }
  return *has = true, SK_OK;
}

/* Program step i's compute on device dev: the runtime's modelled kernel time. */
static void sk__dc_compute(sk__dc *c, sk__dc_dev *dev, const sk_program_step *s, sk_parallel_step_kind k) {
  double speed = c->p->desc.cluster.device_flops;
  if (speed <= 0) return;
  double us = sk__dr_flops(&c->d, s->op, k == SK_PSTEP_BACKWARD, s->half) / speed * 1e6;
  if (us > 0) dev->clock += us, dev->busy += us;
}

/* Appends one element of es bytes to *arr (n used, *cap held), growing it by doubling. */
static bool sk__dc_grow(const sk_allocator *a, void **arr, int n, int *cap, size_t es) {
  if (n < *cap) return true;
  int nc = *cap ? 2 * *cap : 16;
  void *g = sk__alloc(a, es * (size_t)nc, sizeof(double));
  if (!g) return false;
  if (*arr) memcpy(g, *arr, es * (size_t)n);
  sk__free(a, *arr);
  *arr = g, *cap = nc;
  return true;
}

/* Call `seq` of communicator m: made when its first member posts it. */
static sk_result sk__dc_rec_of(sk__dc *c, int m, int seq, int *out) {
  sk__dc_comm *g = &c->comms[m];
  const sk_allocator *a = &c->p->desc.allocator;
  if (seq < g->nrecs) return *out = g->recs[seq], SK_OK;
  void *rv = c->recs, *gv = g->recs;
  bool ok = sk__dc_grow(a, &rv, c->nrecs, &c->caprecs, sizeof(sk__dc_rec));
  c->recs = (sk__dc_rec *)rv;
  ok = ok && sk__dc_grow(a, &gv, g->nrecs, &g->cap, sizeof(int));
  g->recs = (int *)gv;
  if (!ok) return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  sk__dc_rec *x = &c->recs[c->nrecs];
  memset(x, 0, sizeof *x);
  x->comm = m;
  g->recs[g->nrecs++] = *out = c->nrecs++;
  return SK_OK;
}

/* Every member has posted call x: it runs from the latest of their clocks at the call and the
   communicator's link_free, for the cluster's price. A member blocked in it returns: its clock
   reaches the end. (A non-blocking member's clock reaches it when it waits.) */
static sk_result sk__dc_finish(sk__dc *c, int x) {
  sk__dc_rec *e = &c->recs[x];
  sk__dc_comm *g = &c->comms[e->comm];
  double start = g->link_free > e->issue ? g->link_free : e->issue, us = e->charge_us;
  sk_coll_algo algo;
  sk_result r = e->kind == SK_COLL_NONE ? SK_OK
                                        : sk_cluster_coll_us(&c->p->desc.cluster, e->kind, e->count, e->dt, g->n, g->ranks,
                                                             &algo, &us, c->err);
  if (r) return r;
  g->link_free = e->end = start + us, e->done = true;
  for (int k = 0; k < g->n; k++) {
    sk__dc_dev *v = &c->dev[g->ranks[k]];
    if (v->wait != x) continue;
    if (v->clock < e->end) v->clock = e->end;
    v->wait = -1, v->sub++;
  }
  return SK_OK;
}

/* Device dev issues `call` at its clock (its next call on that communicator); *x = its record.
   Blocking: the device waits in it (finish releases it). */
static sk_result sk__dc_post(sk__dc *c, int dev, const sk__dc_call *call, bool blocking, int *x) {
  int m = -1;
  sk_result r = sk__dc_comm_of(c, dev, call->slot, &m);
  int *seq = &c->seq[(size_t)dev * (size_t)c->nslots + (size_t)call->slot];
  if (!r) r = sk__dc_rec_of(c, m, *seq, x);
  if (r) return r;
  (*seq)++;
  int n = c->comms[m].n;
  sk__dc_rec *e = &c->recs[*x];
  if (call->per_member && (n < 1 || call->count % (size_t)n))
    return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: %s of %zu elements over %d ranks", sk_coll_kind_name(call->kind),
                    call->count, n);
  size_t count = call->per_member ? call->count / (size_t)n : call->count;
  if (e->posted && (e->kind != call->kind || e->count != count || e->dt != call->dt || e->charge_us != call->charge_us))
    return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: device %d calls %s, its group's members %s", dev,
                    sk_coll_kind_name(call->kind), sk_coll_kind_name(e->kind));
  e->kind = call->kind, e->count = count, e->dt = call->dt, e->charge_us = call->charge_us;
  if (!e->posted || c->dev[dev].clock > e->issue) e->issue = c->dev[dev].clock;
  if (blocking) c->dev[dev].wait = *x;
  return ++e->posted == n ? sk__dc_finish(c, *x) : SK_OK;
}

/* ---- fusion buckets: non-blocking collectives (sk_fusion.h) -------------------------------------
   Each scheduler launches its buckets strictly in bucket order, each when its last member is
   ready: the Mirrors' AllReduces and hsdp's ReduceScatters under
   grad_computation_allreduce_overlap at that member's step, else (and hsdp's gathers always) at
   the bucket's Fused step; all complete (the clock reaches their ends) at the kind's WaitFused. */

static int sk__dc_kind_of(sk_coll_kind k) {
  return k == SK_COLL_ALLREDUCE ? SK__DC_AR : k == SK_COLL_REDUCE_SCATTER ? SK__DC_RS : SK__DC_AG;
}

/* The scheduler a program step is a bucket member of (-1: none). */
static int sk__dc_member_kind(const sk__dc *c, const sk_program_step *s) {
  if (!sk_program_op_step(s) || s->bucket < 0) return -1;
  sk_parallel_step_kind k = c->p->steps[s->index].kind;
  return k == SK_PSTEP_MIRROR ? SK__DC_AR : k == SK_PSTEP_GRAD_REDUCE_SCATTER ? SK__DC_RS : k == SK_PSTEP_PARAM_GATHER ? SK__DC_AG : -1;
}

/* Launches device dev's buckets of scheduler b from the next one on while their members are
   all ready (at_fused: the next one's Fused step marks them). Gathers and ReduceScatters take
   their Fused step's count as the whole array (per member on the wire). */
static sk_result sk__dc_launch(sk__dc *c, int dev, int b, bool at_fused) {
  sk__dc_sched *q = &c->sched[c->dev[dev].stage * SK__DC_KINDS + b];
  sk__dc_dev *v = &c->dev[dev];
  size_t row = (size_t)dev * (size_t)q->stride;
  sk_result r = SK_OK;
  while (!r && v->launched[b] < q->n && (at_fused || q->ready[row + (size_t)v->launched[b]] == q->members[v->launched[b]])) {
    const sk_program_step *s = &c->p->programs[v->stage].steps[q->step[v->launched[b]]];
    sk__dc_call call = {s->coll, sk__dc_slot_of(c, s->group), (size_t)s->count, b != SK__DC_AR,
                        b == SK__DC_AG ? c->d.cdt : c->d.mirror_wire, 0};
    int x = -1;
    if (v->nreqs[b] == q->stride)
      return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: device %d has more than %d buckets in flight", dev, q->stride);
    r = sk__dc_post(c, dev, &call, false, &x);
    if (!r) q->reqs[row + (size_t)v->nreqs[b]++] = x;
    v->launched[b]++, at_fused = false;
  }
  return r;
}

/* Device dev's WaitFused of scheduler b; *stuck while a peer has not launched a bucket. */
static void sk__dc_wait_fused(sk__dc *c, int dev, int b, bool *stuck) {
  sk__dc_dev *v = &c->dev[dev];
  const sk__dc_sched *sq = &c->sched[v->stage * SK__DC_KINDS + b];
  const int *q = &sq->reqs[(size_t)dev * (size_t)sq->stride];
  for (int k = 0; k < v->nreqs[b]; k++)
    if (!c->recs[q[k]].done) {
      *stuck = true;
      return;
    }
  for (int k = 0; k < v->nreqs[b]; k++)
    if (v->clock < c->recs[q[k]].end) v->clock = c->recs[q[k]].end;
  v->nreqs[b] = 0;
}

/* A bucket step of device dev: a member, a Fused launch, the WaitFused. */
static sk_result sk__dc_bucket_step(sk__dc *c, int dev, int i, const sk_program_step *s, bool *stuck) {
  bool overlap = c->p->desc.transformer_opt.grad_computation_allreduce_overlap;
  if (s->kind == SK_PSTEP_WAIT_FUSED) return sk__dc_wait_fused(c, dev, sk__dc_kind_of(s->coll), stuck), SK_OK;
  if (s->kind == SK_PSTEP_FUSED) {
    int b = sk__dc_kind_of(s->coll);
    if (overlap && b != SK__DC_AG) return SK_OK;
    const sk__dc_sched *q = &c->sched[c->dev[dev].stage * SK__DC_KINDS + b];
    if (c->dev[dev].launched[b] >= q->n || q->step[c->dev[dev].launched[b]] != i)
      return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: program step %d launches a bucket out of order", i);
    return sk__dc_launch(c, dev, b, true);
  }
  int b = sk__dc_member_kind(c, s);
  if (!overlap || b == SK__DC_AG) return SK_OK; /* its Fused step launches it */
  sk__dc_sched *q = &c->sched[c->dev[dev].stage * SK__DC_KINDS + b];
  q->ready[(size_t)dev * (size_t)q->stride + (size_t)q->of[s->bucket]]++;
  return sk__dc_launch(c, dev, b, false);
}

/* ---- a pipeline's Send / Recv (sk_runtime.h: isend, a blocking recv, WaitSend) ------------------
   The message moves once both sides have posted: from the later of their clocks, for
   sk_cluster_p2p_us (no link_free: the threads backend prices each pair alone). */

/* The queue of the messages from world rank src to dst on link: a pipeline's peer is the
   device at the sender's place in another stage, so the receiver's stage names it. */
static sk_result sk__dc_pq_of(sk__dc *c, int src, int dst, int link, sk__dc_pq **q) {
  int nd = c->p->desc.ndevices;
  if (src < 0 || dst < 0 || src >= c->ndev || dst >= c->ndev || src % nd != dst % nd)
    return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: a message from rank %d to rank %d, not at its place", src, dst);
  *q = &c->pq[((size_t)src * (size_t)c->p->stages + (size_t)(dst / nd)) * 2 + (size_t)link];
  return SK_OK;
}

/* The record of this side's next message on queue q: the next the other side left, or a new one. */
static sk_result sk__dc_p2p_next(sk__dc *c, sk__dc_pq *q, bool send, int *k) {
  int *nth = send ? &q->sends : &q->recvs;
  if (*nth < q->n) return *k = q->recs[(*nth)++], SK_OK;
  const sk_allocator *a = &c->p->desc.allocator;
  void *pv = c->p2ps, *qv = q->recs;
  bool ok = sk__dc_grow(a, &pv, c->np2p, &c->capp2p, sizeof(sk__dc_p2p));
  c->p2ps = (sk__dc_p2p *)pv;
  ok = ok && sk__dc_grow(a, &qv, q->n, &q->cap, sizeof(int));
  q->recs = (int *)qv;
  if (!ok) return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  memset(&c->p2ps[c->np2p], 0, sizeof c->p2ps[c->np2p]);
  q->recs[q->n++] = *k = c->np2p++;
  (*nth)++;
  return SK_OK;
}

/* Device dev posts its side of a message to or from world rank `peer` on `link`; *x = the
   record. The pair completes when the second side posts; a Recv blocked in it then returns. */
static sk_result sk__dc_p2p_post(sk__dc *c, int dev, const sk_program_step *s, int peer, int i, int *x) {
  bool send = s->kind == SK_PSTEP_SEND;
  int src = send ? dev : peer, dst = send ? peer : dev, link = s->grad ? 1 : 0, k = 0;
  sk_dtype dt = sk__dr_dtype(&c->d, s->tensor);
  sk__dc_pq *q = NULL;
  sk_result res = sk__dc_pq_of(c, src, dst, link, &q);
  if (!res) res = sk__dc_p2p_next(c, q, send, &k);
  if (res) return res;
  if (!c->p2ps[k].has_send && !c->p2ps[k].has_recv) {
    sk__dc_p2p *n = &c->p2ps[k];
    n->src = src, n->dst = dst, n->link = link, n->count = (size_t)s->count, n->dt = dt;
  }
  sk__dc_p2p *m = &c->p2ps[k];
  if (m->count != (size_t)s->count || m->dt != dt)
    return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: rank %d sends %zu, rank %d receives %lld", src, m->count, dst,
                    (long long)s->count);
  if (send) m->has_send = true, m->send_issue = c->dev[dev].clock, m->step = i;
  else m->has_recv = true, m->recv_issue = c->dev[dev].clock, c->dev[dev].pwait = k;
  *x = k;
  if (!m->has_send || !m->has_recv) return SK_OK;
  double us = 0, start = m->send_issue > m->recv_issue ? m->send_issue : m->recv_issue;
  sk_result r = sk_cluster_p2p_us(&c->p->desc.cluster, src, dst, m->count, m->dt, &us, c->err);
  if (r) return r;
  m->end = start + us, m->done = true;
  sk__dc_dev *rv = &c->dev[dst];
  if (rv->pwait == k) rv->clock = rv->clock < m->end ? m->end : rv->clock, rv->pwait = -1, rv->pc++;
  return SK_OK;
}

/* Device dev waits for its Send at program step `step` (every one of its sends when step < 0);
   *stuck while one has no Recv yet. */
static void sk__dc_wait_sends(sk__dc *c, int dev, int step, bool *stuck) {
  sk__dc_dev *v = &c->dev[dev];
  for (int k = 0; k < c->np2p; k++) {
    const sk__dc_p2p *m = &c->p2ps[k];
    if (m->src == dev && m->has_send && !m->waited && (step < 0 || m->step == step) && !m->done) {
      *stuck = true;
      return;
    }
  }
  for (int k = 0; k < c->np2p; k++) {
    sk__dc_p2p *m = &c->p2ps[k];
    if (m->src != dev || !m->has_send || m->waited || (step >= 0 && m->step != step)) continue;
    if (v->clock < m->end) v->clock = m->end;
    m->waited = true;
  }
}

/* A pipeline step of device dev: Send (non-blocking), Recv (blocking), WaitSend. */
static sk_result sk__dc_pipe_step(sk__dc *c, int dev, int i, const sk_program_step *s, bool *stuck) {
  sk__dc_dev *v = &c->dev[dev];
  if (s->kind == SK_PSTEP_WAIT_SEND) {
    sk__dc_wait_sends(c, dev, s->send, stuck);
    return *stuck ? SK_OK : (v->pc++, SK_OK);
  }
  int nd = c->p->desc.ndevices, x = -1;
  sk_result r = sk__dc_p2p_post(c, dev, s, s->peer * nd + dev % nd, i, &x);
  if (!r && s->kind == SK_PSTEP_SEND) v->pc++;
  return r;
}

/* After its program device dev waits for its sends still in flight (a pipeline), gathers its
   local norms when asked (the update's: not on a micro-step that ended at GradsReady), then
   joins the loss's AllReduce over the world (a pipeline; 1 x f64: sk_runtime.h). */
static sk_result sk__dc_tail(sk__dc *c, int dev, bool *stuck) {
  sk__dc_dev *v = &c->dev[dev];
  int x = -1;
  if (v->tail == SK__DC_TAIL_SENDS) {
    if (c->p->stages > 1) sk__dc_wait_sends(c, dev, -1, stuck);
    if (*stuck) return SK_OK;
    v->tail = SK__DC_TAIL_NORMS;
  }
  if (v->tail == SK__DC_TAIL_NORMS) {
    v->tail = SK__DC_TAIL_LOSS;
    if (c->nnorms && !v->short_step) {
      sk__dc_call gather = {SK_COLL_GATHER, sk__dc_world_slot(c), (size_t)c->nnorms, false, SK_F64, 0};
      return sk__dc_post(c, dev, &gather, true, &x);
    }
  }
  v->tail = SK__DC_TAIL_DONE;
  if (c->p->stages == 1) return SK_OK;
  sk__dc_call call = {SK_COLL_ALLREDUCE, sk__dc_world_slot(c), 1, false, SK_F64, 0};
  return sk__dc_post(c, dev, &call, true, &x);
}

/* Device dev's next program step; *stuck when it cannot run it yet. A blocking call leaves the
   device waiting in it (dev.wait, dev.pwait). */
static sk_result sk__dc_advance(sk__dc *c, int dev, bool *stuck) {
  sk__dc_dev *v = &c->dev[dev];
  const sk_program *pg = &c->p->programs[v->stage];
  *stuck = false;
  if (v->pc >= pg->nsteps) return sk__dc_tail(c, dev, stuck);
  int i = v->pc;
  const sk_program_step *s = &pg->steps[i];
  if (s->last && !c->last) return v->pc++, SK_OK; /* the window's last micro-step's */
  if (s->kind == SK_PSTEP_GRADS_READY && !c->last) /* a micro-step ends here, without the update */
    return v->pc = pg->nsteps, v->short_step = true, SK_OK;
  if (s->kind == SK_PSTEP_SEND || s->kind == SK_PSTEP_RECV || s->kind == SK_PSTEP_WAIT_SEND)
    return sk__dc_pipe_step(c, dev, i, s, stuck);
  if (s->kind == SK_PSTEP_SHARD_MIRROR) { /* a partly sharded parameter's AllReduce over its other replicas */
    sk__dc_call call = {SK_COLL_ALLREDUCE, sk__dc_slot_of(c, s->group), (size_t)s->count, false, c->d.mirror_wire, 0};
    int x = -1;
    if (v->sub > 0) return v->pc++, v->sub = 0, SK_OK;
    return sk__dc_post(c, dev, &call, true, &x);
  }
  bool bucket = s->kind == SK_PSTEP_FUSED || s->kind == SK_PSTEP_WAIT_FUSED || sk__dc_member_kind(c, s) >= 0;
  if (bucket) {
    sk_result r = sk__dc_bucket_step(c, dev, i, s, stuck);
    return r || *stuck ? r : (v->pc++, SK_OK);
  }
  if (!sk_program_op_step(s)) return v->pc++, SK_OK;
  sk_parallel_step_kind k = c->p->steps[s->index].kind;
  if (k == SK_PSTEP_FORWARD || k == SK_PSTEP_BACKWARD) return sk__dc_compute(c, v, s, k), v->pc++, SK_OK;
  sk__dc_call call;
  memset(&call, 0, sizeof call);
  bool has = false;
  sk_result r = sk__dc_call_of(c, v->stage, i, v->sub, s, k, &call, &has);
  if (r || !has) return r ? r : (v->pc++, v->sub = 0, SK_OK);
  int x = -1;
  return sk__dc_post(c, dev, &call, true, &x);
}

/* Whether device dev has ended its step: its program, and under a pipeline the tail. */
static bool sk__dc_ended(const sk__dc *c, int dev) {
  const sk__dc_dev *v = &c->dev[dev];
  return v->pc >= c->p->programs[v->stage].nsteps && v->tail == SK__DC_TAIL_DONE;
}

/* Runs every device until each has ended its step; a round in which none moves while some have
   not ended is a wait no program can leave (a compiler fault). */
static sk_result sk__dc_walk(sk__dc *c) {
  for (bool moved = true; moved;) {
    moved = false;
    for (int d = 0; d < c->ndev; d++) {
      bool stuck = false;
      while (c->dev[d].wait < 0 && c->dev[d].pwait < 0 && !sk__dc_ended(c, d)) {
        sk_result r = sk__dc_advance(c, d, &stuck);
        if (r) return r;
        if (stuck) break;
        moved = true;
      }
    }
  }
  for (int d = 0; d < c->ndev; d++)
    if (!sk__dc_ended(c, d) || c->dev[d].wait >= 0 || c->dev[d].pwait >= 0)
      return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: device %d waits at program step %d forever", d, c->dev[d].pc);
  return SK_OK;
}

/* Adds a walked step, weighted w, to *out: its makespan, each device's span and compute;
   *busy sums the devices' compute. */
static void sk__dc_add(const sk__dc *c, double w, sk_dryrun_time *out, double *busy) {
  double most = 0;
  for (int d = 0; d < c->ndev; d++) {
    const sk__dc_dev *v = &c->dev[d];
    most = v->clock > most ? v->clock : most;
    *busy += w * v->busy;
    if (out->span_us) out->span_us[d] += w * v->clock;
    if (out->busy_us) out->busy_us[d] += w * v->busy;
  }
  out->step_us += w * most;
}

static void sk__dc_free(sk__dc *c) {
  const sk_allocator *a = &c->p->desc.allocator;
  for (int m = 0; c->comms && m < c->ncomms; m++) sk__free(a, c->comms[m].ranks), sk__free(a, c->comms[m].recs);
  sk__free(a, c->dev), sk__free(a, c->slot), sk__free(a, c->seq), sk__free(a, c->scratch), sk__free(a, c->comms);
  sk__free(a, c->recs), sk__free(a, c->d.flops);
  for (int i = 0; c->move && i <= c->moff[c->p->stages]; i++) sk__free(a, c->move[i]);
  sk__free(a, c->moff), sk__free(a, c->nmove), sk__free(a, c->move), sk__free(a, c->p2ps);
  for (int i = 0; c->pq && i < c->ndev * c->p->stages * 2; i++) sk__free(a, c->pq[i].recs);
  sk__free(a, c->pq);
  for (int b = 0; c->sched && b < c->p->stages * SK__DC_KINDS; b++) {
    sk__dc_sched *q = &c->sched[b];
    sk__free(a, q->step), sk__free(a, q->members), sk__free(a, q->of), sk__free(a, q->ready), sk__free(a, q->reqs);
  }
  sk__free(a, c->sched), sk__free(a, c->xp);
}

/* Stage st's scheduler b: the program's Fused steps of its kind in order, each one's members. */
static sk_result sk__dc_sched_init(sk__dc *c, int st, int b) {
  const sk_allocator *a = &c->p->desc.allocator;
  const sk_program *pg = &c->p->programs[st];
  sk__dc_sched *q = &c->sched[st * SK__DC_KINDS + b];
  int top = 0;
  for (int i = 0; i < pg->nsteps; i++) top = pg->steps[i].bucket > top ? pg->steps[i].bucket : top;
  size_t n = (size_t)top + 2, nd = (size_t)c->ndev;
  q->stride = top + 2;
  q->step = (int *)sk__calloc(a, sizeof(int) * n, sizeof(int));
  q->members = (int *)sk__calloc(a, sizeof(int) * n, sizeof(int));
  q->of = (int *)sk__calloc(a, sizeof(int) * n, sizeof(int));
  q->ready = (int *)sk__calloc(a, sizeof(int) * n * nd, sizeof(int));
  q->reqs = (int *)sk__calloc(a, sizeof(int) * n * nd, sizeof(int));
  if (!q->step || !q->members || !q->of || !q->ready || !q->reqs)
    return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  for (int i = 0; i < pg->nsteps; i++) {
    const sk_program_step *s = &pg->steps[i];
    if (s->kind != SK_PSTEP_FUSED || s->bucket < 0 || sk__dc_kind_of(s->coll) != b) continue;
    if (q->n == q->stride) /* each bucket id launches once a step */
      return sk__fail(c->err, SK_ERR_INTERNAL, "dry run step time: stage %d: more Fused steps than the %d bucket ids", st, q->stride);
    q->of[s->bucket] = q->n, q->step[q->n++] = i;
  }
  for (int i = 0; i < pg->nsteps; i++)
    if (sk__dc_member_kind(c, &pg->steps[i]) == b) q->members[q->of[pg->steps[i].bucket]]++;
  return SK_OK;
}

/* The per-stage tables: where each stage's steps start in the move cache, its schedulers. */
static sk_result sk__dc_stages(sk__dc *c) {
  const sk_allocator *a = &c->p->desc.allocator;
  int ns = c->p->stages;
  c->moff = (int *)sk__calloc(a, sizeof(int) * ((size_t)ns + 1), sizeof(int));
  c->pq = (sk__dc_pq *)sk__calloc(a, sizeof(sk__dc_pq) * (size_t)c->ndev * (size_t)ns * 2, sizeof(void *));
  c->sched = (sk__dc_sched *)sk__calloc(a, sizeof(sk__dc_sched) * (size_t)ns * SK__DC_KINDS, sizeof(double));
  if (!c->moff || !c->pq || !c->sched) return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  for (int st = 0; st < ns; st++) c->moff[st + 1] = c->moff[st] + c->p->programs[st].nsteps;
  size_t total = (size_t)c->moff[ns] + 1;
  c->nmove = (int *)sk__alloc(a, sizeof(int) * total, sizeof(int));
  c->move = (sk__dc_call **)sk__calloc(a, sizeof(sk__dc_call *) * total, sizeof(void *));
  if (!c->nmove || !c->move) return sk__fail(c->err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  for (size_t i = 0; i < total; i++) c->nmove[i] = -1;
  sk_result r = SK_OK;
  for (int b = 0; b < ns * SK__DC_KINDS && !r; b++) r = sk__dc_sched_init(c, b / SK__DC_KINDS, b % SK__DC_KINDS);
  return r;
}

/* Back to a step's start: clocks aligned at 0, every communicator idle (each step waits for
   all it issued, so link_free is at most the aligned start), nothing posted or in flight. */
static void sk__dc_reset(sk__dc *c) {
  memset(c->dev, 0, sizeof(sk__dc_dev) * (size_t)c->ndev);
  for (int d = 0; d < c->ndev; d++)
    c->dev[d].wait = c->dev[d].pwait = -1, c->dev[d].stage = sk_parallel_stage_of_rank(c->p, d);
  memset(c->seq, 0, sizeof(int) * (size_t)c->ndev * (size_t)c->nslots);
  for (int m = 0; m < c->ncomms; m++) c->comms[m].link_free = 0, c->comms[m].nrecs = 0;
  c->nrecs = c->np2p = 0;
  for (int i = 0; i < c->ndev * c->p->stages * 2; i++) c->pq[i].n = c->pq[i].sends = c->pq[i].recvs = 0;
  for (int b = 0; b < c->p->stages * SK__DC_KINDS; b++)
    memset(c->sched[b].ready, 0, sizeof(int) * (size_t)c->ndev * (size_t)c->sched[b].stride);
}

static sk_result sk__dc_init(sk__dc *c, const sk_parallel_plan *p, sk_error *err) {
  const sk_allocator *a = &p->desc.allocator;
  memset(c, 0, sizeof *c);
  c->p = p, c->err = err, c->ndev = p->world_devices, c->nslots = p->ngroups + 2;
  c->d.p = p, c->d.err = err;
  sk__dr_wires(&c->d);
  if (p->desc.print_local_norm || p->desc.dump_local_norm) { /* as sk_rt_setup.h counts them */
    for (int t = 0; t < p->graph->ntensors; t++) c->nnorms += sk_graph_trainable(p->graph, t);
    c->nnorms += p->desc.device_local_norm;
  }
  size_t ns = (size_t)c->ndev * (size_t)c->nslots;
  c->dev = (sk__dc_dev *)sk__calloc(a, sizeof(sk__dc_dev) * (size_t)c->ndev, sizeof(double));
  c->slot = (int *)sk__alloc(a, sizeof(int) * ns, sizeof(int));
  c->seq = (int *)sk__calloc(a, sizeof(int) * ns, sizeof(int));
  c->scratch = (int *)sk__alloc(a, sizeof(int) * (size_t)c->ndev, sizeof(int));
  c->comms = (sk__dc_comm *)sk__calloc(a, sizeof(sk__dc_comm) * (ns + 1), sizeof(double));
  c->d.flops = sk__dr_flops_table(a, p->graph->nops);
  if (!c->dev || !c->slot || !c->seq || !c->scratch || !c->comms || !c->d.flops)
    return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "dry run step time: out of memory");
  for (size_t i = 0; i < ns; i++) c->slot[i] = -1;
  sk_result r = sk__dc_stages(c);
  if (!r) sk__dc_reset(c);
  return r;
}

/* Under grad_accumulation_step M, a window's M micro-steps: M - 1 stop at GradsReady (each
   alike: every one starts aligned and idle), the last runs the `last` steps too; the figures are
   the window's mean per micro-step, as the runtime's step_us / steps over whole windows. */
static sk_result sk__dc_window(sk__dc *c, sk_dryrun_time *out) {
  int m = c->p->desc.grad_accumulation_step > 1 ? c->p->desc.grad_accumulation_step : 1;
  double busy = 0;
  out->step_us = 0;
  for (int d = 0; d < c->ndev; d++) {
    if (out->span_us) out->span_us[d] = 0;
    if (out->busy_us) out->busy_us[d] = 0;
  }
  sk_result r = SK_OK;
  if (m > 1) {
    c->last = false;
    if ((r = sk__dc_walk(c))) return r;
    sk__dc_add(c, (double)(m - 1) / m, out, &busy);
    sk__dc_reset(c);
  }
  c->last = true;
  if ((r = sk__dc_walk(c))) return r;
  sk__dc_add(c, 1.0 / m, out, &busy);
  out->bubble = out->step_us > 0 ? 1 - busy / c->ndev / out->step_us : 0;
  return SK_OK;
}

SK_API sk_result sk_dryrun_step_time(const sk_parallel_plan *p, sk_dryrun_time *out, sk_error *err) {
  if (!p || !out || !p->graph || !p->programs || !p->steps)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "dry run step time: NULL or uncompiled plan, or NULL output");
  sk_result r = sk__dc_check(p, err);
  if (r) return r;
  sk__dc c;
  r = sk__dc_init(&c, p, err);
  if (!r) r = sk__dc_window(&c, out);
  sk__dc_free(&c);
  return r;
}

SK_EXTERN_C_END
#endif /* SK_DRYRUN_CLOCK_IMPL */
