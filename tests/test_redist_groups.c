/* test_redist_groups.c -- sk_redist.h's desc.group: an executor that takes the caller's group
   communicators instead of splitting its own (sk_redist.h, GROUPS).

   - Moves with collective steps (AllToAll, AllGather, ReduceScatter, AllReduce, two collectives
     in a row, a move across meshes on the unified mesh) run once by an executor that splits its
     own groups and once by one whose hook answers communicators this test split, from the
     (mesh, axes) the rank's plan names: both results equal each other bit for bit and the
     reference computed here from global indices. A backend wrapping the threads backend counts
     comm_split calls: the hooked executor's creation makes none (the splitting one's does, so
     the count can tell), the hook is asked once per (mesh, axes), and the test's communicators
     still work after the executor is destroyed (it never owned them).
   - A hook answering NULL, on every rank or on one, or answering a communicator of the wrong
     size: creation fails on every rank with SK_ERR_INVALID_ARGUMENT, the failing rank's message
     naming the mesh axes, the others' naming the failing rank; no rank hangs (a short world
     timeout would turn a hang into SK_ERR_TIMEOUT) and none is left holding an executor.
   - The compiler numbers every group a move's collectives use (sk_program.h): for shipped
     networks with and without a pipeline, each collective step of each move the runtime makes
     (Move, MoveBack, MoveOut, MoveOutBack) finds its plan group. A runtime on a plan with such
     moves splits exactly one communicator per group it does not already hold (the count of
     comm_split calls), i.e. its executors split nothing.
   Device threads never assert: they record into per-rank slots; the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "shardkit.h"
#include "sk_json.h"
#include "comm_test_util.h"

#define RG_N 8
#define RG_MAX_GROUPS 8

/* ---- a backend that counts splits ------------------------------------------------------------- */

static atomic_int rg_splits;

static sk_result rg_split(sk_comm *parent, int color, int key, sk_comm *child, void **state, int *rank, int *size) {
  atomic_fetch_add(&rg_splits, 1);
  return sk_threads_backend()->comm_split(parent, color, key, child, state, rank, size);
}

/* A world of RG_N devices on the threads backend with rg_split for its comm_split. */
static sk_world *rg_counting_world(void) {
  static sk_backend b; /* the world keeps the pointer: it must outlive the world */
  b = *sk_threads_backend();
  b.name = "split-counting-threads", b.comm_split = rg_split;
  sk_world_desc wd = {.ndevices = RG_N, .backend = &b, .timeout_ms = CT_TIMEOUT_MS};
  sk_world *w = NULL;
  sk_error e;
  cr_assert_eq(sk_world_create(&wd, &w, &e), SK_OK, "%s", e.msg);
  return w;
}

/* ---- the cases ---------------------------------------------------------------------------------- */

typedef struct rg_case {
  const char *from_mesh, *from_map, *to_mesh, *to_map;
  uint32_t partial;          /* from-mesh axes holding partial sums */
  int64_t from_shape[2], to_shape[2];
} rg_case;

/* dp is axis 0 (mask 1), mp axis 1 (mask 2) */
static const rg_case rg_cases[] = {
    {"dp=2,mp=4", "mp,None", "dp=2,mp=4", "None,mp", 0, {8, 16}, {8, 16}},     /* AllToAll over mp */
    {"dp=2,mp=4", "dp,mp", "dp=2,mp=4", "dp,None", 0, {8, 16}, {8, 16}},       /* AllGather over mp */
    {"dp=2,mp=4", "dp,None", "dp=2,mp=4", "dp,mp", 2, {8, 16}, {8, 16}},       /* ReduceScatter over mp */
    {"dp=2,mp=4", "None,mp", "dp=2,mp=4", "None,mp", 1, {8, 16}, {8, 16}},     /* AllReduce over dp */
    {"dp=2,mp=4", "None,mp", "dp=2,mp=4", "mp,dp", 1, {8, 16}, {8, 16}},       /* a reduction, then an exchange */
    {"dp=2,mp=4", "(dp,mp),None", "x=8", "None,x", 0, {8, 16}, {8, 16}},       /* across meshes */
};
#define RG_NCASES ((int)(sizeof rg_cases / sizeof rg_cases[0]))

static void rg_desc(const rg_case *c, sk_redist_desc *d) {
  sk_mesh fm, tm;
  memset(d, 0, sizeof *d);
  sk_mesh_parse(&fm, c->from_mesh, NULL);
  sk_mesh_parse(&tm, c->to_mesh, NULL);
  sk_layout_parse(&d->from, &fm, c->from_map, 2, c->from_shape, NULL);
  sk_layout_parse(&d->to, &tm, c->to_map, 2, c->to_shape, NULL);
  d->partial = c->partial, d->dtype = SK_F64;
}

/* Element i (row-major) of a slice: its flat index in the tensor. */
static int64_t rg_flat(const sk_layout *l, const sk_slice *s, int64_t i) {
  int64_t cols = s->stop[1] - s->start[1];
  return (s->start[0] + i / cols) * l->shape[1] + s->start[1] + i % cols;
}

static int64_t rg_count(const sk_slice *s) { return (s->stop[0] - s->start[0]) * (s->stop[1] - s->start[1]); }

/* This rank's position in its partial group (0..g-1), and g. */
static int rg_ppos(const sk_mesh *m, uint32_t partial, int rank, int *g) {
  int coords[SK_MAX_AXES], k = 0;
  sk_mesh_coords(m, rank, coords, NULL);
  *g = 1;
  for (int a = 0; a < m->naxes; a++)
    if (partial & (1u << a)) k = k * m->dims[a] + coords[a], *g *= m->dims[a];
  return k;
}

/* ---- the hook ------------------------------------------------------------------------------------ */

typedef enum { RG_ANSWER, RG_NULL, RG_WRONG } rg_mode;

typedef struct rg_groups {
  rg_mode mode;
  sk_comm *parent;                  /* RG_WRONG's answer: the whole world */
  int n, calls;
  sk_mesh mesh[RG_MAX_GROUPS];
  uint32_t axes[RG_MAX_GROUPS];
  sk_comm *comm[RG_MAX_GROUPS];
  int asked[RG_MAX_GROUPS];
} rg_groups;

static sk_comm *rg_hook(void *ctx, const sk_mesh *mesh, uint32_t axes) {
  rg_groups *t = (rg_groups *)ctx;
  t->calls++;
  if (t->mode == RG_NULL) return NULL;
  if (t->mode == RG_WRONG) return t->parent;
  for (int i = 0; i < t->n; i++)
    if (t->axes[i] == axes && sk_mesh_equal(&t->mesh[i], mesh)) return t->asked[i]++, t->comm[i];
  return NULL;
}

/* The test's own groups: one split per distinct (mesh, axes) of the plan's collective steps
   (collective: every rank plans the same steps). The number of collective steps, or -1. */
static int rg_split_groups(sk_comm *comm, const sk_redist_desc *d, rg_groups *t, ct_slot *s) {
  sk_redist_plan *p = NULL;
  sk_error e;
  if (!ct_check(s, sk_redist_plan_create(d, sk_comm_rank(comm), &p, &e) == SK_OK, "plan: %s", e.msg)) return -1;
  int ncoll = 0;
  for (int i = 0; i < sk_redist_plan_nsteps(p); i++) {
    sk_redist_step_info info;
    sk_redist_plan_step(p, i, &info, NULL);
    if (info.op == SK_REDIST_LOCAL || info.op == SK_REDIST_RESHAPE || info.op == SK_REDIST_SENDRECV) continue;
    ncoll++;
    int k = 0;
    while (k < t->n && !(t->axes[k] == info.group_axes && sk_mesh_equal(&t->mesh[k], &info.from->mesh))) k++;
    if (k < t->n) continue;
    t->mesh[k] = info.from->mesh, t->axes[k] = info.group_axes;
    if (!ct_rc(s, sk_comm_split_mesh(comm, &t->mesh[k], t->axes[k], &t->comm[k], NULL), comm, "split_mesh")) break;
    t->n++;
  }
  sk_redist_plan_destroy(p);
  return ncoll;
}

/* ---- the same results, the hook asked, nothing split ------------------------------------------ */

typedef struct rg_run {
  ct_slot slots[RG_N];
  int case_index;
} rg_run;

/* Executor creation between two barriers: the comm_split calls the whole world made meanwhile. */
static int rg_create_counted(sk_comm *comm, const sk_redist_desc *d, sk_redist_executor **ex, ct_slot *s) {
  sk_error e;
  sk_barrier(comm, NULL);
  int before = atomic_load(&rg_splits);
  sk_result r = sk_redist_executor_create(comm, d, ex, &e);
  ct_check(s, r == SK_OK, "executor_create (%s): %s: %s", d->group ? "hooked" : "splitting", sk_result_name(r), e.msg);
  sk_barrier(comm, NULL);
  return atomic_load(&rg_splits) - before;
}

/* dst against the reference: the source value of flat index f on partial position k is f + 1000 k. */
static void rg_check_values(const sk_redist_desc *d, const rg_case *c, int rank, const double *dst, ct_slot *s) {
  sk_slice ts;
  sk_layout_slice(&d->to, rank, &ts, NULL);
  int g = 1;
  (void)rg_ppos(&d->from.mesh, c->partial, rank, &g);
  for (int64_t i = 0; i < rg_count(&ts); i++) {
    double f = (double)rg_flat(&d->to, &ts, i), want = g * f + 1000.0 * g * (g - 1) / 2;
    if (!ct_check(s, dst[i] == want, "%s %s -> %s %s: rank %d element %lld = %g, want %g", c->from_mesh, c->from_map,
                  c->to_mesh, c->to_map, rank, (long long)i, dst[i], want))
      return;
  }
}

static void rg_case_on_rank(sk_comm *comm, const rg_case *c, ct_slot *s) {
  int r = sk_comm_rank(comm);
  sk_redist_desc own, hooked;
  rg_desc(c, &own);
  rg_groups t;
  memset(&t, 0, sizeof t);
  int ncoll = rg_split_groups(comm, &own, &t, s);
  ct_check(s, ncoll > 0, "%s -> %s: the plan has no collective step: the case tests nothing", c->from_map, c->to_map);
  hooked = own, hooked.group = rg_hook, hooked.group_ctx = &t;
  sk_slice fs, ts;
  sk_layout_slice(&own.from, r, &fs, NULL);
  sk_layout_slice(&own.to, r, &ts, NULL);
  int64_t nf = rg_count(&fs), nt = rg_count(&ts);
  double *src = (double *)malloc(sizeof(double) * (size_t)nf), *a = (double *)calloc((size_t)nt, sizeof(double)),
         *b = (double *)calloc((size_t)nt, sizeof(double));
  int g = 1, k = rg_ppos(&own.from.mesh, c->partial, r, &g);
  for (int64_t i = 0; i < nf; i++) src[i] = (double)rg_flat(&own.from, &fs, i) + 1000.0 * k;
  sk_redist_executor *ea = NULL, *eb = NULL;
  int split_a = rg_create_counted(comm, &own, &ea, s), split_b = rg_create_counted(comm, &hooked, &eb, s);
  ct_check(s, split_a > 0, "the splitting executor made no split: the count cannot tell");
  ct_check(s, split_b == 0, "the hooked executor's creation made %d comm_split calls", split_b);
  ct_check(s, t.calls == t.n, "the hook was asked %d times for %d distinct groups", t.calls, t.n);
  for (int i = 0; i < t.n; i++) ct_check(s, t.asked[i] == 1, "group %d asked %d times", i, t.asked[i]);
  if (ea && eb) {
    ct_rc(s, sk_redist_execute(ea, src, (size_t)nf, a, (size_t)nt, SK_F64, NULL), comm, "execute (splitting)");
    ct_rc(s, sk_redist_execute(eb, src, (size_t)nf, b, (size_t)nt, SK_F64, NULL), comm, "execute (hooked)");
    ct_check(s, !memcmp(a, b, sizeof(double) * (size_t)nt), "rank %d: the two executors' results differ", r);
    rg_check_values(&own, c, r, b, s);
  }
  sk_redist_executor_destroy(ea), sk_redist_executor_destroy(eb);
  for (int i = 0; i < t.n; i++) { /* still the test's: alive after the executor is gone */
    ct_rc(s, sk_barrier(t.comm[i], NULL), t.comm[i], "barrier on a hook's communicator after destroy");
    sk_comm_destroy(t.comm[i], NULL);
  }
  free(src), free(a), free(b);
}

static sk_result rg_same_device(sk_comm *comm, void *arg) {
  rg_run *x = (rg_run *)arg;
  ct_slot *s = &x->slots[sk_comm_rank(comm)];
  rg_case_on_rank(comm, &rg_cases[x->case_index], s);
  s->ran = 1;
  return SK_OK;
}

Test(redist_groups, hooked_executor_matches_the_splitting_one_and_splits_nothing, .timeout = 60) {
  for (int i = 0; i < RG_NCASES; i++) {
    const rg_case *c = &rg_cases[i];
    rg_run x;
    memset(&x, 0, sizeof x);
    x.case_index = i;
    sk_world *w = rg_counting_world();
    sk_result r = sk_world_run(w, rg_same_device, &x, NULL);
    cr_expect_eq(r, SK_OK, "case %d: world run: %s: %s", i, sk_result_name(r), sk_world_error_message(w));
    sk_world_destroy(w, NULL);
    char label[200];
    snprintf(label, sizeof label, "%s %s -> %s %s partial 0x%x", c->from_mesh, c->from_map, c->to_mesh, c->to_map,
             (unsigned)c->partial);
    ct_expect_slots(x.slots, RG_N, label);
  }
}

/* ---- a hook that fails ------------------------------------------------------------------------ */

/* One run's outcome on every rank (the failure tests', and the runtime's with plan set). */
typedef struct rg_ranks {
  rg_mode mode;
  int only;                 /* RG_NULL: the one rank that answers NULL (-1: all) */
  const sk_parallel_plan *plan;
  sk_result rc[RG_N];
  sk_error err[RG_N];
  bool got_ex[RG_N], ran[RG_N];
  int calls[RG_N];
} rg_ranks;

static sk_result rg_fail_device(sk_comm *comm, void *arg) {
  rg_ranks *x = (rg_ranks *)arg;
  int r = sk_comm_rank(comm);
  sk_redist_desc d;
  rg_desc(&rg_cases[1], &d); /* an AllGather over mp */
  rg_groups t;
  memset(&t, 0, sizeof t);
  t.parent = comm;
  t.mode = x->mode == RG_NULL && x->only >= 0 && x->only != r ? RG_ANSWER : x->mode;
  sk_comm *mine = NULL; /* the right group, split on every rank (collective) for those that answer */
  if (sk_comm_split_mesh(comm, &d.from.mesh, 2u, &mine, NULL) == SK_OK)
    t.n = 1, t.mesh[0] = d.from.mesh, t.axes[0] = 2u, t.comm[0] = mine;
  d.group = rg_hook, d.group_ctx = &t;
  sk_redist_executor *ex = NULL;
  x->rc[r] = sk_redist_executor_create(comm, &d, &ex, &x->err[r]);
  x->got_ex[r] = ex != NULL, x->calls[r] = t.calls;
  sk_redist_executor_destroy(ex);
  sk_comm_destroy(mine, NULL);
  x->ran[r] = true;
  return SK_OK;
}

static void rg_expect_failure(rg_mode mode, int only, const char *needle) {
  rg_ranks x;
  memset(&x, 0, sizeof x);
  x.mode = mode, x.only = only;
  sk_world *w = ct_world(RG_N, CT_CFG_DEFAULT, 5000);
  sk_result r = sk_world_run(w, rg_fail_device, &x, NULL);
  cr_expect_eq(r, SK_OK, "world run: %s: %s (a hang times out)", sk_result_name(r), sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  for (int i = 0; i < RG_N; i++) {
    bool failing = only < 0 || i == only;
    cr_expect(x.ran[i], "rank %d did not finish", i);
    cr_expect_eq(x.rc[i], SK_ERR_INVALID_ARGUMENT, "rank %d: %s: %s", i, sk_result_name(x.rc[i]), x.err[i].msg);
    cr_expect(!x.got_ex[i], "rank %d holds an executor after a failed creation", i);
    cr_expect_eq(x.calls[i], 1, "rank %d asked its hook %d times", i, x.calls[i]);
    if (failing)
      cr_expect(strstr(x.err[i].msg, needle) != NULL, "rank %d: message '%s' lacks '%s'", i, x.err[i].msg, needle);
    else
      cr_expect(strstr(x.err[i].msg, "rank 3") != NULL, "rank %d: message '%s' does not name rank 3", i, x.err[i].msg);
  }
}

Test(redist_groups, a_null_group_fails_creation_on_every_rank, .timeout = 30) {
  rg_expect_failure(RG_NULL, -1, "desc.group gave no communicator for axes mp of mesh (dp=2,mp=4)");
}

Test(redist_groups, a_null_group_on_one_rank_fails_creation_on_every_rank, .timeout = 30) {
  rg_expect_failure(RG_NULL, 3, "desc.group gave no communicator for axes mp of mesh (dp=2,mp=4)");
}

Test(redist_groups, a_group_of_the_wrong_size_fails_creation_on_every_rank, .timeout = 30) {
  rg_expect_failure(RG_WRONG, -1, "communicator for axes mp of mesh (dp=2,mp=4) has 8 ranks");
}

/* ---- the compiler numbers the moves' groups; the runtime splits one per group ------------------ */

static sk_parallel_plan rg_compile(const char *path, int stages, sk_graph *g) {
  sk_error e = {SK_OK, ""};
  sk_graph_init(g);
  cr_assert_eq(sk_json_load_network(path, g, &e), SK_OK, "%s: %s", path, e.msg);
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = RG_N;
  if (stages > 1) d.pipeline.stages = stages, d.pipeline.micro = 4;
  sk_parallel_plan p;
  cr_assert_eq(sk_parallel_compile(g, &d, &p, &e), SK_OK, "%s: %s", path, e.msg);
  return p;
}

/* The collective steps of the move from -> to; each must find its plan group. */
static int rg_move_groups_found(const sk_parallel_plan *p, const sk_layout *from, const sk_layout *to, const char *what) {
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  d.from = *from, d.to = *to;
  sk_redist_plan *rp = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(&d, 0, &rp, &e), SK_OK, "%s: %s", what, e.msg);
  int n = 0;
  for (int i = 0; i < sk_redist_plan_nsteps(rp); i++) {
    sk_redist_step_info info;
    sk_redist_plan_step(rp, i, &info, NULL);
    if (info.op == SK_REDIST_LOCAL || info.op == SK_REDIST_RESHAPE || info.op == SK_REDIST_SENDRECV) continue;
    sk_plan_group want;
    memset(&want, 0, sizeof want);
    want.kind = SK_PGROUP_MESH, want.mesh = info.from->mesh, want.axes = info.group_axes, want.tensor = -1;
    cr_expect_geq(sk_parallel_find_group(p, &want), 0, "%s: step %d (%s, axes 0x%x) has no plan group", what, i + 1,
                  info.name, (unsigned)info.group_axes);
    n++;
  }
  sk_redist_plan_destroy(rp);
  return n;
}

/* Every move of the plan, as the runtime makes them (back only where the tensor has a gradient). */
static int rg_plan_moves_found(const sk_parallel_plan *p, const char *net) {
  const sk_graph *g = p->graph;
  int n = 0;
  char what[300];
  for (int o = 0; o < g->nops; o++) {
    const sk_parallel_op *po = &p->ops[o];
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      const sk_parallel_tensor *t = &p->tensors[g->ops[o].inputs[k]];
      if (!po->moved[k]) continue;
      snprintf(what, sizeof what, "%s: %s input %d", net, g->ops[o].name, k);
      n += rg_move_groups_found(p, &t->layout, &po->kernel_in[k], what);
      if (t->needs_grad) n += rg_move_groups_found(p, &po->kernel_in[k], &t->layout, what);
    }
    for (int k = 0; k < g->ops[o].noutputs; k++) {
      const sk_parallel_tensor *t = &p->tensors[g->ops[o].outputs[k]];
      if (!po->out_moved[k]) continue;
      snprintf(what, sizeof what, "%s: %s output %d", net, g->ops[o].name, k);
      n += rg_move_groups_found(p, &po->plan.out[k], &t->layout, what);
      if (t->needs_grad) n += rg_move_groups_found(p, &t->layout, &po->plan.out[k], what);
    }
  }
  return n;
}

static const char *const rg_nets[] = {"examples/nets/operator_parallel.json", "examples/nets/attention.json",
                                      "examples/nets/transformer.json", "tests/nets/layouts.json",
                                      "tests/nets/frozen.json", "tests/nets/ops37.json"};

Test(redist_groups, every_collective_of_every_move_has_a_plan_group, .timeout = 60) {
  int total = 0;
  for (size_t i = 0; i < sizeof rg_nets / sizeof rg_nets[0]; i++)
    for (int stages = 1; stages <= 2; stages++) {
      sk_graph g;
      sk_parallel_plan p = rg_compile(rg_nets[i], stages, &g);
      total += rg_plan_moves_found(&p, rg_nets[i]);
      sk_parallel_free(&p);
      sk_graph_free(&g);
    }
  cr_expect_gt(total, 0, "no move with a collective step among the networks: the test checks nothing");
}

static sk_result rg_rt_device(sk_comm *comm, void *arg) {
  rg_ranks *x = (rg_ranks *)arg;
  int r = sk_comm_rank(comm);
  sk_runtime_desc d;
  memset(&d, 0, sizeof d);
  sk_runtime *rt = NULL;
  x->rc[r] = sk_runtime_create(comm, x->plan, &d, &rt, &x->err[r]);
  sk_runtime_destroy(rt);
  return SK_OK;
}

Test(redist_groups, the_runtime_splits_one_communicator_per_plan_group, .timeout = 60) {
  sk_graph g;
  sk_parallel_plan p = rg_compile("examples/nets/operator_parallel.json", 1, &g);
  cr_assert_gt(rg_plan_moves_found(&p, "operator_parallel"), 0, "the plan has no move with a collective step");
  int split = 0; /* the runtime's own groups: the world, the stage and the links it holds already */
  for (int i = 0; i < p.ngroups; i++) split += p.groups[i].kind > SK_PGROUP_LINK_BWD;
  sk_world *w = rg_counting_world();
  rg_ranks x;
  memset(&x, 0, sizeof x);
  x.plan = &p;
  atomic_store(&rg_splits, 0);
  cr_expect_eq(sk_world_run(w, rg_rt_device, &x, NULL), SK_OK, "%s", sk_world_error_message(w));
  sk_world_destroy(w, NULL);
  for (int i = 0; i < RG_N; i++) cr_expect_eq(x.rc[i], SK_OK, "rank %d: %s", i, x.err[i].msg);
  cr_expect_eq(atomic_load(&rg_splits), RG_N * split, "%d comm_split calls by %d devices for %d split groups",
               atomic_load(&rg_splits), RG_N, split);
  sk_parallel_free(&p);
  sk_graph_free(&g);
}
