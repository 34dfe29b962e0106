/* redist_perf: sk_redist.h on the threads backend.
   1. Throughput of representative moves of a 16 MiB float tensor over 8 devices, as %bound of
      the memory traffic the move must cause: every rank writes its target slice once and reads
      each element of it once from wherever it lives (partial sources: every contribution once),
      min_bytes = sum over ranks of (read + write). t_min = min_bytes / B, with B the read+write
      bandwidth of an in-place x += 0 kernel over the same buffers (every device's source and
      target slice), probed right before each move with min(devices, cores) threads, best of 5.
      %bound = 100 * t_min / t, t = mean time of one sk_redist_execute (max over ranks).
      Every move is checked element by element once (the "check" column).
   2. Planning time on a 4096-device mesh (dp=8,sp=8,mp=8,pp=8): sk_redist_plan_create for one
      rank, median and max over 64 ranks spread over the mesh (target: <= 1 ms per rank).
   3. A Send/Recv step priced over all 4096 ranks on a topology (sk_redist_step_busiest_us)
      against the rank-by-rank max of sk_redist_step_clock_us: the time of each, and equality.
   Usage: build/redist_perf [-g 8] [-b BYTES] [-n ITERS] [-w WARMUP]   (-h: the flags) */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h" /* SK_IMPL + shardkit.h, and the bandwidth probe's kernel bench__rw */

typedef struct move {
  const char *label, *mesh, *from, *to, *partial;
  sk_redist_mode mode;
} move;

/* Tensor [R, C] with R*C*4 = bytes; meshes of 8 devices. */
static const move moves[] = {
    {"rows-by-8 -> cols-by-8", "dp=8", "dp,None", "None,dp", NULL, SK_REDIST_MINIMAL},
    {"  same, MindSpore alltoall off", "dp=8", "dp,None", "None,dp", NULL, SK_REDIST_MINDSPORE_NO_ALLTOALL},
    {"rows-by-8 -> replicated", "dp=8", "dp,None", "None,None", NULL, SK_REDIST_MINIMAL},
    {"MatMul out -> ReLU in (local)", "a=2,b=4", "a,None", "(a,b),None", NULL, SK_REDIST_MINIMAL},
    {"tuple reorder (2,2,2)", "dp=2,sp=2,mp=2", "mp,(sp,dp)", "(dp,sp),mp", NULL, SK_REDIST_MINIMAL},
    {"partial over b -> rows by b", "a=2,b=4", "None,None", "b,None", "b", SK_REDIST_MINIMAL},
    {"partial over b -> replicated", "a=2,b=4", "a,None", "a,None", "b", SK_REDIST_MINIMAL},
};
#define NMOVES ((int)(sizeof moves / sizeof moves[0]))

typedef struct ctx {
  int n, iters, warmup, probe_threads;
  sk_redist_desc desc;
  float **src, **dst;
  size_t *nsrc, *ndst;
  double t_iter, t_probe; /* results (max over ranks) */
  int64_t wrong;
} ctx;


static int64_t gidx(const sk_layout *l, const sk_slice *s, int64_t i) {
  int64_t sub[SK_MAX_DIMS] = {0}, x = 0;
  for (int d = l->ndims - 1; d >= 0; d--) {
    int64_t e = s->stop[d] - s->start[d];
    sub[d] = i % e, i /= e;
  }
  for (int d = 0; d < l->ndims; d++) x = x * l->shape[d] + s->start[d] + sub[d];
  return x;
}

static int ppos(const sk_mesh *m, uint32_t partial, int rank) {
  int c[SK_MAX_AXES], k = 0;
  if (sk_mesh_coords(m, rank, c, NULL) != SK_OK) return 0; /* never: the ranks come from the world */
  for (int a = 0; a < m->naxes; a++)
    if (partial & (1u << a)) k = k * m->dims[a] + c[a];
  return k;
}

static float val(int64_t x, int k) { return (float)((x * 7 + k * 13) % 15 - 7); }

static sk_result device(sk_comm *c, void *arg) {
  ctx *x = (ctx *)arg;
  int r = sk_comm_rank(c);
  const sk_redist_desc *d = &x->desc;
  sk_slice fs, ts;
  memset(&fs, 0, sizeof fs), memset(&ts, 0, sizeof ts); /* the analyzer cannot see every dim written */
  sk_error *e = sk_comm_error(c); /* a failure is described where sk_world_run looks */
  sk_result rc = sk_layout_slice(&d->from, r, &fs, e);
  if (rc == SK_OK) rc = sk_layout_slice(&d->to, r, &ts, e);
  if (rc) return rc;
  int k = ppos(&d->from.mesh, d->partial, r), g = 1;
  for (int a = 0; a < d->from.mesh.naxes; a++)
    if (d->partial & (1u << a)) g *= d->from.mesh.dims[a];
  for (size_t i = 0; i < x->nsrc[r]; i++) x->src[r][i] = val(gidx(&d->from, &fs, (int64_t)i), d->partial ? k : 0);
  memset(x->dst[r], 0, x->ndst[r] * 4);
  sk_redist_executor *ex;
  rc = sk_redist_executor_create(c, d, &ex, e);
  if (rc) return rc;
  /* check once */
  rc = sk_redist_execute(ex, x->src[r], x->nsrc[r], x->dst[r], x->ndst[r], SK_F32, NULL);
  int64_t wrong = 0;
  for (size_t i = 0; rc == SK_OK && i < x->ndst[r]; i++) {
    int64_t gi = gidx(&d->to, &ts, (int64_t)i);
    float want = 0;
    if (d->partial)
      for (int j = 0; j < g; j++) want += val(gi, j);
    else
      want = val(gi, 0);
    wrong += x->dst[r][i] != want;
  }
  /* probe: min(devices, cores) threads sweep every device's src and dst */
  double best = 1e30;
  for (int rep = 0; rep < 5 && rc == SK_OK; rep++) {
    rc = sk_barrier(c, NULL);
    uint64_t t0 = sk_now_ns();
    if (r < x->probe_threads)
      for (int dv = r; dv < x->n; dv += x->probe_threads) {
        bench__rw((unsigned char *)x->src[dv], x->nsrc[dv] * 4, bench__zero);
        bench__rw((unsigned char *)x->dst[dv], x->ndst[dv] * 4, bench__zero);
      }
    double t = (double)(sk_now_ns() - t0) * 1e-9, tmax = 0;
    if (rc == SK_OK) rc = sk_allreduce(c, &t, &tmax, 1, SK_F64, SK_MAX, NULL);
    if (tmax < best) best = tmax;
  }
  for (int i = 0; i < x->warmup && rc == SK_OK; i++)
    rc = sk_redist_execute(ex, x->src[r], x->nsrc[r], x->dst[r], x->ndst[r], SK_F32, NULL);
  if (rc == SK_OK) rc = sk_barrier(c, NULL);
  uint64_t t0 = sk_now_ns();
  for (int i = 0; i < x->iters && rc == SK_OK; i++)
    rc = sk_redist_execute(ex, x->src[r], x->nsrc[r], x->dst[r], x->ndst[r], SK_F32, NULL);
  double t = (double)(sk_now_ns() - t0) * 1e-9 / x->iters, tmax = 0;
  int64_t wsum = 0;
  if (rc == SK_OK) rc = sk_allreduce(c, &t, &tmax, 1, SK_F64, SK_MAX, NULL);
  if (rc == SK_OK) rc = sk_allreduce(c, &wrong, &wsum, 1, SK_I64, SK_SUM, NULL);
  if (r == 0) x->t_iter = tmax, x->t_probe = best, x->wrong = wsum;
  sk_redist_executor_destroy(ex);
  return rc;
}

static double now_ns(void) { return (double)sk_now_ns(); }

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void die(const char *what, const sk_error *e) {
  fprintf(stderr, "redist_perf: %s: %s\n", what, e ? e->msg : "");
  exit(1);
}

typedef struct opts {
  int ndev, iters, warmup;
  size_t bytes;
} opts;

static void usage(FILE *f, const char *path) {
  fprintf(f,
          "Usage: %s [-g 8] [-b BYTES] [-n ITERS] [-w WARMUP]\n"
          "Times sk_redist.h's moves of a float tensor [BYTES/4096, 1024] between layouts over 8 devices (threads)\n"
          "as %%bound of the memory traffic they must cause, checks each once, then times planning on 4096 devices\n"
          "and the pricing of a Send/Recv step over 4096 ranks.\n"
          "  -g N        devices: 8, the mesh the moves are written for (default 8)\n"
          "  -b BYTES    tensor size, K/M/G suffixes = powers of 2, a multiple of 32K (default 16M)\n"
          "  -n ITERS    timed executions per move, >= 1 (default 10)\n"
          "  -w WARMUP   warm-up executions per move, >= 0 (default 3)\n"
          "  -h,--help   this text\n"
          "Exit status: 0 = every move correct, 1 = a wrong element or a failed call, 2 = bad flags.\n",
          path);
}

/* argv into *o. Returns 0 to run, 1 after -h, 2 after a message. */
static int parse_args(int argc, char **argv, opts *o) {
  o->ndev = 8, o->iters = 10, o->warmup = 3, o->bytes = 16u << 20;
  static const struct option lo[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *prog = prog_name(argv[0]);
  long v;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":g:b:n:w:h", lo, NULL)) != -1) {
    switch (c) {
      case 'g':
        if (!prog_parse_long_in(optarg, 8, 8, &v)) return bench__bad(prog, "-g: '%s': the moves are written for 8 devices", optarg);
        break;
      case 'b':
        if (!bench__parse_size(optarg, &o->bytes) || o->bytes == 0 || o->bytes % (32u << 10))
          return bench__bad(prog, "-b: bad size '%s' (a multiple of 32K: 8 row blocks of 1024 floats)", optarg);
        break;
      case 'n':
        if (!prog_parse_long_in(optarg, 1, INT_MAX, &v)) return bench__bad(prog, "-n: bad iteration count '%s' (>= 1)", optarg);
        o->iters = (int)v;
        break;
      case 'w':
        if (!prog_parse_long_in(optarg, 0, INT_MAX, &v)) return bench__bad(prog, "-w: bad warm-up count '%s' (>= 0)", optarg);
        o->warmup = (int)v;
        break;
      case 'h': usage(stdout, argv[0]); return 1;
      default: return bench__bad_flag(prog, c, argv);
    }
  }
  if (optind < argc) return bench__bad(prog, "unexpected argument '%s'", argv[optind]);
  return 0;
}

/* Sets up x->desc for move mv on tensor `shape` and prints nothing; returns the plan's name in
   plan, its bytes (every step's target slices written, sources read) in *planb, the largest
   bytes one rank receives in *rmax and the least traffic any plan causes in *minb. */
static void plan_move(ctx *x, const move *mv, const int64_t shape[2], size_t bytes, char plan[64], double *planb,
                      uint64_t *rmax, double *minb) {
  sk_mesh m;
  sk_error e;
  memset(&x->desc, 0, sizeof x->desc);
  if (sk_mesh_parse(&m, mv->mesh, &e) || sk_layout_parse(&x->desc.from, &m, mv->from, 2, shape, &e) ||
      sk_layout_parse(&x->desc.to, &m, mv->to, 2, shape, &e) ||
      (mv->partial && sk_mesh_axis_mask(&m, mv->partial, &x->desc.partial, &e)))
    die(mv->label, &e);
  x->desc.mode = mv->mode;
  sk_redist_plan *p;
  if (sk_redist_plan_create(&x->desc, SK_REDIST_ALL_RANKS, &p, &e)) die(mv->label, &e);
  plan[0] = 0, *planb = 0;
  for (int i = 0; i < sk_redist_plan_nsteps(p); i++) {
    sk_redist_step_info s;
    if (sk_redist_plan_step(p, i, &s, &e)) die(mv->label, &e);
    snprintf(plan + strlen(plan), 64 - strlen(plan), "%s%s", i ? "+" : "", s.name);
    int64_t sh[SK_MAX_DIMS] = {0}, v = 1; /* slice_shape leaves sh alone on a bad layout */
    sk_layout_slice_shape(s.to, sh);
    for (int k = 0; k < s.to->ndims; k++) v *= sh[k];
    *planb += (double)v * 4 * x->n * (1 + (s.from_partial ? s.group_size : 1));
  }
  int g = 1;
  for (int a = 0; a < m.naxes; a++)
    if (x->desc.partial & (1u << a)) g *= m.dims[a];
  *rmax = 0, *minb = 0;
  for (int r = 0; r < x->n; r++) {
    uint64_t rv, sv;
    if (sk_redist_plan_bytes(p, -1, r, &rv, &sv, &e)) die(mv->label, &e);
    if (rv > *rmax) *rmax = rv;
    int64_t fshape[SK_MAX_DIMS] = {0}, tshape[SK_MAX_DIMS] = {0};
    sk_layout_slice_shape(&x->desc.from, fshape);
    sk_layout_slice_shape(&x->desc.to, tshape);
    x->nsrc[r] = (size_t)(fshape[0] * fshape[1]);
    x->ndst[r] = (size_t)(tshape[0] * tshape[1]);
    *minb += (double)x->ndst[r] * 4; /* every target slice written once */
  }
  *minb += (double)g * (double)bytes; /* the tensor read once (every contribution when partial) */
  sk_redist_plan_destroy(p);
}

/* Part 1: every move timed and checked on the threads world. Returns the number of wrong moves. */
static int run_moves(const opts *o) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int ndev = o->ndev;
  int64_t C = 1024, R = (int64_t)(o->bytes / 4) / C;
  int64_t shape[2] = {R, C};
  printf("# redist_perf: %d devices (threads), tensor [%lld,%lld] float = %zu bytes, %d iters, %d warm-up, "
         "probe threads %ld\n",
         ndev, (long long)R, (long long)C, o->bytes, o->iters, o->warmup, cores < ndev ? cores : ndev);
  printf("# %-32s %-24s %11s %9s %11s %11s %8s %7s %6s %6s\n", "move", "plan", "recv B/rank", "time(us)", "min bytes",
         "plan bytes", "B(GB/s)", "%bound", "%plan", "check");
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = ndev;
  wd.backend = sk_threads_backend();
  sk_world *w;
  sk_error e;
  if (sk_world_create(&wd, &w, &e)) die("world", &e);
  ctx x;
  memset(&x, 0, sizeof x);
  x.n = ndev, x.iters = o->iters, x.warmup = o->warmup;
  x.probe_threads = (int)(cores < ndev ? cores : ndev);
  x.src = calloc((size_t)ndev, sizeof(float *)), x.dst = calloc((size_t)ndev, sizeof(float *));
  x.nsrc = calloc((size_t)ndev, sizeof(size_t)), x.ndst = calloc((size_t)ndev, sizeof(size_t));
  if (!x.src || !x.dst || !x.nsrc || !x.ndst) die("out of memory", NULL);
  int bad = 0;
  for (int mi = 0; mi < NMOVES; mi++) {
    const move *mv = &moves[mi];
    char plan[64];
    double planb, minb;
    uint64_t rmax;
    plan_move(&x, mv, shape, o->bytes, plan, &planb, &rmax, &minb);
    for (int r = 0; r < ndev; r++) {
      x.src[r] = aligned_alloc(4096, (x.nsrc[r] * 4 + 4095) / 4096 * 4096);
      x.dst[r] = aligned_alloc(4096, (x.ndst[r] * 4 + 4095) / 4096 * 4096);
      if (!x.src[r] || !x.dst[r]) die("out of memory", NULL);
    }
    if (sk_world_run(w, device, &x, NULL)) {
      fprintf(stderr, "redist_perf: %s: %s\n", mv->label, sk_world_error_message(w));
      exit(1);
    }
    double foot = 0;
    for (int r = 0; r < ndev; r++) foot += (double)(x.nsrc[r] + x.ndst[r]) * 4;
    double B = 2 * foot / x.t_probe; /* read + write per byte */
    double tmin = minb / B;
    printf("  %-32s %-24s %11llu %9.1f %11.0f %11.0f %8.2f %7.1f %6.1f %6s\n", mv->label, plan,
           (unsigned long long)rmax, x.t_iter * 1e6, minb, planb, B / 1e9, 100 * tmin / x.t_iter,
           100 * planb / B / x.t_iter, x.wrong ? "WRONG" : "ok");
    bad += x.wrong != 0;
    for (int r = 0; r < ndev; r++) free(x.src[r]), free(x.dst[r]);
  }
  sk_world_destroy(w, NULL);
  free(x.src), free(x.dst), free(x.nsrc), free(x.ndst);
  return bad;
}

/* Part 2: planning time per rank on 4096 devices. */
static void plan_times(void) {
  static const struct {
    const char *label, *from, *to, *partial;
    sk_redist_mode mode;
  } pcases[] = {
      {"AllToAll (dp,sp)-rows -> (dp,sp)-cols", "(dp,sp),None,mp,None", "None,(dp,sp),mp,None", NULL, SK_REDIST_MINIMAL},
      {"AllGather of 512-way rows", "(dp,sp,mp),None,None,None", "None,None,None,None", NULL, SK_REDIST_MINIMAL},
      {"SendRecv tuple reorder, 4096-way", "(dp,sp),(mp,pp),None,None", "(pp,mp),(sp,dp),None,None", NULL,
       SK_REDIST_MINIMAL},
      {"partial over pp -> ReduceScatter", "(dp,sp),None,mp,None", "(dp,sp),pp,mp,None", "pp", SK_REDIST_MINIMAL},
      {"MindSpore mode, alltoall on", "(dp,sp),None,mp,None", "None,(dp,sp),mp,None", NULL, SK_REDIST_MINDSPORE},
  };
  sk_mesh bm;
  sk_error e;
  if (sk_mesh_parse(&bm, "dp=8,sp=8,mp=8,pp=8", &e)) die("mesh", &e);
  static const int64_t bshape[4] = {4096, 4096, 64, 64};
  printf("\n# planning time per rank, mesh dp=8,sp=8,mp=8,pp=8 (4096 devices), x[4096,4096,64,64] float,\n"
         "# sk_redist_plan_create(desc, rank) for 64 ranks (every 64th), best of 5 each; median and max, target <= 1 ms\n");
  printf("# %-40s %-24s %12s %12s %5s\n", "move", "plan", "median(ms)", "max(ms)", "met");
  for (size_t ci = 0; ci < sizeof pcases / sizeof pcases[0]; ci++) {
    sk_redist_desc d;
    memset(&d, 0, sizeof d);
    if (sk_layout_parse(&d.from, &bm, pcases[ci].from, 4, bshape, &e) ||
        sk_layout_parse(&d.to, &bm, pcases[ci].to, 4, bshape, &e) ||
        (pcases[ci].partial && sk_mesh_axis_mask(&bm, pcases[ci].partial, &d.partial, &e)))
      die(pcases[ci].label, &e);
    d.mode = pcases[ci].mode;
    double t[64];
    char plan[64] = "";
    for (int i = 0; i < 64; i++) {
      sk_redist_plan *p;
      t[i] = 1e30;
      for (int rep = 0; rep < 5; rep++) { /* best of 5 per rank: the host is shared */
        double t0 = now_ns();
        if (sk_redist_plan_create(&d, i * 64 + (i % 7), &p, &e)) die(pcases[ci].label, &e);
        double ms = (now_ns() - t0) / 1e6;
        if (ms < t[i]) t[i] = ms;
        if (rep < 4) sk_redist_plan_destroy(p);
      }
      if (i == 0)
        for (int k = 0; k < sk_redist_plan_nsteps(p); k++) {
          sk_redist_step_info s;
          sk_redist_plan_step(p, k, &s, NULL);
          snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "%s%s", k ? "+" : "", sk_redist_op_name(s.op));
        }
      sk_redist_plan_destroy(p);
    }
    qsort(t, 64, sizeof t[0], cmpd);
    double med = 0.5 * (t[31] + t[32]), mx = t[63];
    printf("  %-40s %-24s %12.3f %12.3f %5s\n", pcases[ci].label, plan, med, mx, mx <= 1.0 ? "yes" : "NO");
  }
}

/* Part 3: a Send/Recv exchange priced over all 4096 ranks on 512 nodes of 8: sk_redist_step_busiest_us
   (median of 20 calls) against the rank-by-rank max of sk_redist_step_clock_us (once), which
   must be the same double. */
static void busiest_times(void) {
  static const struct {
    const char *label, *from_mesh, *from, *to_mesh, *to;
  } bcases[] = {
      {"rows by 4096 -> (cols 64) x (rows 64)", "x=4096", "x,None", "a=64,b=64", "b,a"},
      {"rows by 4096 -> (rows 64) x (cols 64)", "x=4096", "x,None", "a=64,b=64", "a,b"},
      {"64 x 64 transpose", "a=64,b=64", "a,b", "a=64,b=64", "b,a"},
      {"(dp,sp)x(mp,pp) -> (pp,mp)x(sp,dp)", "dp=8,sp=8,mp=8,pp=8", "(dp,sp),(mp,pp)", "dp=8,sp=8,mp=8,pp=8",
       "(pp,mp),(sp,dp)"},
  };
  static const int64_t shape[2] = {8192, 8192};
  sk_cluster cl;
  memset(&cl, 0, sizeof cl);
  cl.topology = (sk_topology){512, 8, {2, 150}, {10, 25}};
  printf("\n# a Send/Recv step priced over 4096 ranks (512 nodes of 8; intra 2 us 150 GB/s, inter 10 us 25 GB/s),\n"
         "# x[8192,8192] float: sk_redist_step_busiest_us (median of 20) and the rank-by-rank max of\n"
         "# sk_redist_step_clock_us (once); the two prices must be equal\n");
  printf("# %-40s %14s %12s %16s %5s\n", "move", "price(us)", "busiest(ms)", "rank by rank(ms)", "equal");
  for (size_t ci = 0; ci < sizeof bcases / sizeof bcases[0]; ci++) {
    sk_redist_desc d;
    sk_mesh mf, mt;
    sk_error e;
    memset(&d, 0, sizeof d);
    if (sk_mesh_parse(&mf, bcases[ci].from_mesh, &e) || sk_mesh_parse(&mt, bcases[ci].to_mesh, &e) ||
        sk_layout_parse(&d.from, &mf, bcases[ci].from, 2, shape, &e) ||
        sk_layout_parse(&d.to, &mt, bcases[ci].to, 2, shape, &e))
      die(bcases[ci].label, &e);
    sk_redist_plan *p;
    if (sk_redist_plan_create(&d, 0, &p, &e)) die(bcases[ci].label, &e);
    double t[20], fast = 0, slow = 0;
    for (int i = 0; i < 20; i++) {
      double t0 = now_ns();
      if (sk_redist_step_busiest_us(p, 0, &cl, NULL, &fast, &e)) die(bcases[ci].label, &e);
      t[i] = (now_ns() - t0) / 1e6;
    }
    qsort(t, 20, sizeof t[0], cmpd);
    double t0 = now_ns();
    for (int r = 0; r < 4096; r++) {
      double us = 0;
      if (sk_redist_step_clock_us(p, 0, r, &cl, NULL, &us, &e)) die(bcases[ci].label, &e);
      if (us > slow) slow = us;
    }
    double slow_ms = (now_ns() - t0) / 1e6;
    printf("  %-40s %14.6f %12.3f %16.1f %5s\n", bcases[ci].label, fast, 0.5 * (t[9] + t[10]), slow_ms,
           fast == slow ? "yes" : "NO");
    sk_redist_plan_destroy(p);
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  opts o;
  int pr = parse_args(argc, argv, &o);
  if (pr) return pr == 1 ? 0 : 2;
  if (prog_refuse_launch(argv[0])) return 2;
  int bad = run_moves(&o);
  plan_times();
  busiest_times();
  if (bad) fprintf(stderr, "redist_perf: %d move%s gave wrong elements\n", bad, bad == 1 ? "" : "s");
  return bad != 0;
}
