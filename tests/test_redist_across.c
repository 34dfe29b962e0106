/* test_redist_across.c -- MindSpore mode across device matrices, reshapes and device counts
   (docs/redistribution-across.md), against the hand-derived rows of redist_across_vectors.h.

   - unified: sk_layout_unify on the two layouts (the smaller given the repeat axis on the left)
     gives each row's unified device matrix, shape and maps, or "not expandable" on the fallback
     rows; the planner starts from exactly these.
   - ops: every row's plan, enable_alltoall on and off, written in the vectors' syntax (names,
     dims, MindSpore axis numbers of the step's mesh, sizes, rank 0's groups; Reshape with the
     slice shape after it) equals the row's sequence. Read from the public step records: a
     step's dims and axis are where its from and to layouts differ.
   - execution: every row, both modes, on threads (as many as the larger device count): each
     rank starts from its source slice (the smaller layout replicated over the larger count) and
     must end with exactly its target slice, checked element by element against the flat index
     the test writes (a reshape keeps the row-major flat index).
   - sweeps: many more layout pairs across reshapes and device counts, executed and checked the
     same way, so that the Reshape steps' element mapping and the unified meshes' groups are
     exercised beyond the thirteen rows.
   - failures: a step failing on one rank takes the world down (the others do not wait for the
     timeout); element counts past 64 bits are refused, not wrapped; a communicator of the wrong
     size is refused with both meshes' device counts named.
   Device threads never assert: they record into per-rank slots; the test thread asserts. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include "shardkit.h"
#include "comm_test_util.h"
#include "redist_across_vectors.h"

/* ---- layouts from the rows --------------------------------------------------------------------- */

/* A layout from MindSpore numbers: mesh dims left to right (axes named m0, m1, ...), map values
   counted from the right. */
static sk_layout ra_layout(int ndev, const int64_t *dev, int nd, const int64_t *map, const int64_t *shape) {
  int dims[SK_MAX_AXES];
  static const char *const names[] = {"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"};
  const char *ptrs[SK_MAX_AXES];
  cr_assert(ndev <= 8 && ndev <= SK_MAX_AXES);
  for (int k = 0; k < ndev; k++) dims[k] = (int)dev[k], ptrs[k] = names[k];
  sk_mesh m;
  sk_error e;
  cr_assert_eq(sk_mesh_init(&m, ndev, dims, ptrs, &e), SK_OK, "%s", e.msg);
  sk_dim_map mm[SK_MAX_DIMS];
  memset(mm, 0, sizeof mm);
  for (int d = 0; d < nd; d++) mm[d].naxes = 1, mm[d].axes[0] = (int)map[d];
  sk_layout l;
  cr_assert_eq(sk_layout_from_ms_map(&l, &m, nd, shape, mm, &e), SK_OK, "%s", e.msg);
  return l;
}

static void ra_layouts(const sk_rav_vector *v, sk_layout *f, sk_layout *t) {
  *f = ra_layout(v->from_ndev, v->from_dev, v->from_nd, v->from_map, v->from_shape);
  *t = ra_layout(v->to_ndev, v->to_dev, v->to_nd, v->to_map, v->to_shape);
}

/* MindSpore's number of the single axis cutting dim d (-1: unsplit). */
static int64_t ra_ms_axis(const sk_layout *l, int d) {
  return l->map[d].naxes ? l->mesh.naxes - 1 - l->map[d].axes[0] : -1;
}

Test(redist_across, unified_layouts_are_the_rows, .timeout = 30) {
  for (size_t i = 0; i < sk_rav_count(); i++) {
    const sk_rav_vector *v = &sk_rav_vectors[i];
    sk_layout f, t, fp;
    ra_layouts(v, &f, &t);
    sk_error e;
    cr_assert_eq(sk_layout_to_devices(&f, t.mesh.size > f.mesh.size ? t.mesh.size : f.mesh.size, &fp, &e), SK_OK);
    cr_expect_eq(fp.mesh.size / f.mesh.size, v->from_pad, "%s: repeat factor", v->name);
    sk_layout_unified u;
    cr_assert_eq(sk_layout_unify(&f, &t, &u, &e), SK_OK, "%s: %s", v->name, e.msg);
    cr_assert_eq(u.expandable, !v->fallback, "%s: expandable %d (%s)", v->name, u.expandable, u.why);
    if (v->fallback) continue;
    cr_assert_eq(u.from.mesh.naxes, v->u_ndev, "%s: unified mesh has %d axes", v->name, u.from.mesh.naxes);
    for (int k = 0; k < v->u_ndev; k++) cr_expect_eq(u.from.mesh.dims[k], v->u_dev[k], "%s: mesh axis %d", v->name, k);
    cr_assert_eq(u.from.ndims, v->u_nd, "%s: unified shape has %d dims", v->name, u.from.ndims);
    for (int d = 0; d < v->u_nd; d++) {
      cr_expect_eq(u.from.shape[d], v->u_shape[d], "%s: unified dim %d", v->name, d);
      cr_expect_eq(ra_ms_axis(&u.from, d), v->u_from_map[d], "%s: unified from map, dim %d", v->name, d);
      cr_expect_eq(ra_ms_axis(&u.to, d), v->u_to_map[d], "%s: unified to map, dim %d", v->name, d);
    }
  }
}

/* ---- plans in the rows' syntax ----------------------------------------------------------------- */

typedef struct ra_text {
  char buf[1024];
  size_t len;
} ra_text;

static void ra_put(ra_text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
  cr_assert(t->len < sizeof t->buf);
}

static void ra_put_list(ra_text *t, const int64_t *v, int n) {
  for (int k = 0; k < n; k++) ra_put(t, "%s%lld", k ? "," : "[", (long long)v[k]);
  ra_put(t, "]");
}

/* The dims a step cuts (to has an axis from lacks or differs on) and uncuts (from has one to
   lacks): one each for AllToAll, one of them for StridedSlice and AllGather. */
static void ra_changed(const sk_redist_step_info *s, int *cut, int *uncut) {
  *cut = *uncut = -1;
  for (int d = 0; d < s->from->ndims; d++) {
    int64_t a = ra_ms_axis(s->from, d), b = ra_ms_axis(s->to, d);
    if (a == b) continue;
    if (b >= 0) *cut = d;
    if (a >= 0) *uncut = d;
  }
}

/* One step in the rows' syntax; Identity (the copy of a plan with nothing to do) is no op. */
static void ra_step_text(const sk_redist_step_info *s, ra_text *t) {
  if (!strcmp(s->name, "Identity")) return;
  if (t->len) ra_put(t, ";");
  if (!strcmp(s->name, "Reshape")) {
    int64_t sh[SK_MAX_DIMS];
    sk_layout_slice_shape(s->to, sh);
    ra_put(t, "Reshape(");
    ra_put_list(t, sh, s->to->ndims);
    ra_put(t, ")");
    return;
  }
  int cut, uncut;
  ra_changed(s, &cut, &uncut);
  const sk_layout *l = !strcmp(s->name, "AllGather") ? s->from : s->to;
  int dim = !strcmp(s->name, "AllGather") ? uncut : cut;
  cr_assert(dim >= 0, "step %s changes no dim", s->name);
  int axis = l->map[dim].axes[0];
  int64_t v = l->mesh.naxes - 1 - axis, n = l->mesh.dims[axis];
  int64_t grp[SK_MAX_DEVICES];
  int gr[SK_MAX_DEVICES], ng = 0;
  sk_mesh_group(&l->mesh, 0, 1u << axis, gr, SK_MAX_DEVICES, &ng, NULL);
  for (int k = 0; k < ng; k++) grp[k] = gr[k];
  if (!strcmp(s->name, "StridedSlice"))
    ra_put(t, "StridedSlice(dim=%d,axis=%lld,n=%lld)", dim, (long long)v, (long long)n);
  else if (!strcmp(s->name, "AllGather"))
    ra_put(t, "AllGather(dim=%d,axis=%lld,n=%lld,group=", dim, (long long)v, (long long)n);
  else
    ra_put(t, "AllToAll(split_dim=%d,concat_dim=%d,axis=%lld,n=%lld,group=", cut, uncut, (long long)v, (long long)n);
  if (strcmp(s->name, "StridedSlice")) ra_put_list(t, grp, ng), ra_put(t, ")");
}

/* The desc of f -> t in mode; a reshape is declared the one way every mode takes it: to_ndims
   and to_shape (to's shape). */
static sk_redist_desc ra_desc(const sk_layout *f, const sk_layout *t, sk_redist_mode mode) {
  sk_redist_desc d;
  memset(&d, 0, sizeof d);
  d.from = *f, d.to = *t, d.mode = mode;
  if (f->ndims != t->ndims || memcmp(f->shape, t->shape, sizeof(int64_t) * (size_t)f->ndims))
    d.to_ndims = t->ndims, memcpy(d.to_shape, t->shape, sizeof d.to_shape);
  return d;
}

static void ra_plan_text(const sk_layout *f, const sk_layout *t, sk_redist_mode mode, ra_text *out) {
  sk_redist_desc d = ra_desc(f, t, mode);
  sk_redist_plan *p = NULL;
  sk_error e;
  cr_assert_eq(sk_redist_plan_create(&d, 0, &p, &e), SK_OK, "plan: %s", e.msg);
  memset(out, 0, sizeof *out);
  for (int i = 0; i < sk_redist_plan_nsteps(p); i++) {
    sk_redist_step_info s;
    cr_assert_eq(sk_redist_plan_step(p, i, &s, NULL), SK_OK);
    ra_step_text(&s, out);
  }
  sk_redist_plan_destroy(p);
}

Test(redist_across, op_sequences_are_the_rows, .timeout = 30) {
  for (size_t i = 0; i < sk_rav_count(); i++) {
    const sk_rav_vector *v = &sk_rav_vectors[i];
    sk_layout f, t;
    ra_layouts(v, &f, &t);
    ra_text on, off;
    ra_plan_text(&f, &t, SK_REDIST_MINDSPORE, &on);
    ra_plan_text(&f, &t, SK_REDIST_MINDSPORE_NO_ALLTOALL, &off);
    cr_expect_str_eq(on.buf, v->ops, "%s (alltoall on):\n  got    %s\n  wanted %s", v->name, on.buf, v->ops);
    cr_expect_str_eq(off.buf, v->ops_no_alltoall, "%s (alltoall off):\n  got    %s\n  wanted %s", v->name, off.buf,
                     v->ops_no_alltoall);
  }
}

/* ---- execution --------------------------------------------------------------------------------- */

typedef struct ra_case {
  sk_layout from, to;
} ra_case;

typedef struct ra_run {
  const ra_case *cases;
  int ncases;
  sk_redist_mode mode;
  ct_slot *slots;
} ra_run;

/* Flat row-major index of element i of rank r's slice of l (l on fewer devices than the world:
   rank r holds rank r mod N's slice). */
static int64_t ra_flat(const sk_layout *l, int r, int64_t i) {
  sk_slice s;
  sk_layout_slice(l, r % l->mesh.size, &s, NULL);
  int64_t sub[SK_MAX_DIMS], x = 0;
  for (int d = l->ndims - 1; d >= 0; d--) {
    int64_t ext = s.stop[d] - s.start[d];
    sub[d] = i % ext, i /= ext;
  }
  for (int d = 0; d < l->ndims; d++) x = x * l->shape[d] + s.start[d] + sub[d];
  return x;
}

static int64_t ra_slice_elems(const sk_layout *l) {
  int64_t sh[SK_MAX_DIMS], n = 1;
  sk_layout_slice_shape(l, sh);
  for (int d = 0; d < l->ndims; d++) n *= sh[d];
  return n;
}

/* One case on this rank: the source slice holds its flat indices (exact in f32 below 2^24), the
   target slice must hold its own, nothing written past it. */
static void ra_one(sk_comm *comm, const ra_case *c, sk_redist_mode mode, ct_slot *s) {
  int r = sk_comm_rank(comm);
  int64_t nf = ra_slice_elems(&c->from), nt = ra_slice_elems(&c->to);
  float *src = malloc((size_t)nf * sizeof(float)), *dst = malloc((size_t)nt * sizeof(float) + CT_PAD);
  for (int64_t i = 0; i < nf; i++) src[i] = (float)ra_flat(&c->from, r, i);
  memset(dst, CT_JUNK_BYTE, (size_t)nt * sizeof(float));
  memset((char *)dst + (size_t)nt * sizeof(float), CT_PAD_BYTE, CT_PAD);
  sk_redist_desc d = ra_desc(&c->from, &c->to, mode);
  char fl[128], tl[128];
  sk_layout_format(&c->from, fl, sizeof fl);
  sk_layout_format(&c->to, tl, sizeof tl);
  sk_error e;
  sk_result rc = sk_redist(comm, &d, src, (size_t)nf, dst, (size_t)nt, &e);
  if (ct_check(s, rc == SK_OK, "\"%s\" -> \"%s\" (mode %d): %s: %s", fl, tl, (int)mode, sk_result_name(rc), e.msg)) {
    ct_check(s, ct_pad_ok((const unsigned char *)dst, (size_t)nt * sizeof(float)), "\"%s\" -> \"%s\": guard bytes overwritten", fl, tl);
    for (int64_t i = 0; i < nt; i++) {
      float want = (float)ra_flat(&c->to, r, i);
      if (!ct_check(s, dst[i] == want, "\"%s\" -> \"%s\" (mode %d): rank %d element %lld is %g, want %g", fl, tl,
                    (int)mode, r, (long long)i, (double)dst[i], (double)want))
        break;
    }
  }
  free(src), free(dst);
}

static sk_result ra_device(sk_comm *comm, void *arg) {
  ra_run *x = (ra_run *)arg;
  ct_slot *s = &x->slots[sk_comm_rank(comm)];
  for (int i = 0; i < x->ncases && !s->nfail; i++) ra_one(comm, &x->cases[i], x->mode, s);
  s->ran = 1;
  return SK_OK;
}

/* Runs the cases (all on `ndev` ranks) in both MindSpore modes. */
static void ra_execute(const ra_case *cases, int n, int ndev, const char *label) {
  const sk_redist_mode modes[] = {SK_REDIST_MINDSPORE, SK_REDIST_MINDSPORE_NO_ALLTOALL};
  for (int m = 0; m < 2; m++) {
    ra_run x = {cases, n, modes[m], ct_slots_new(ndev)};
    char lab[160];
    snprintf(lab, sizeof lab, "%s, alltoall %s", label, m ? "off" : "on");
    ct_run(ndev, CT_CFG_DEFAULT, ra_device, &x, lab);
    ct_expect_slots(x.slots, ndev, lab);
    free(x.slots);
  }
}

static int ra_devices(const ra_case *c) {
  return c->from.mesh.size > c->to.mesh.size ? c->from.mesh.size : c->to.mesh.size;
}

/* Each row on its own world (8 or 16 threads). */
Test(redist_across, rows_execute, .timeout = 30) {
  for (size_t i = 0; i < sk_rav_count(); i++) {
    ra_case c;
    ra_layouts(&sk_rav_vectors[i], &c.from, &c.to);
    ra_execute(&c, 1, ra_devices(&c), sk_rav_vectors[i].name);
  }
}

/* ---- sweeps ------------------------------------------------------------------------------------ */

/* Every single-axis map of an nd-dim shape on a mesh (each axis unused or on one dim, at most
   one axis per dim -- tuples are the same-matrix suite's business), into out; returns the count. */
static int ra_maps(const sk_mesh *m, int nd, const int64_t *shape, sk_layout *out, int cap) {
  int n = 0, total = 1;
  for (int k = 0; k < m->naxes; k++) total *= nd + 1;
  for (int code = 0; code < total; code++) {
    sk_dim_map map[SK_MAX_DIMS];
    memset(map, 0, sizeof map);
    bool ok = true;
    for (int k = 0, c = code; k < m->naxes; k++, c /= nd + 1) {
      int d = c % (nd + 1) - 1;
      if (d < 0) continue;
      if (map[d].naxes) ok = false;
      map[d].axes[map[d].naxes++] = k;
    }
    if (ok && n < cap && sk_layout_init(&out[n], m, nd, shape, map, NULL) == SK_OK) n++;
  }
  return n;
}

static sk_mesh ra_mesh(const char *text) {
  sk_mesh m;
  sk_error e;
  cr_assert_eq(sk_mesh_parse(&m, text, &e), SK_OK, "%s", e.msg);
  return m;
}

/* Every pair of single-axis layouts between (mesh a, shape sa) and (mesh b, shape sb), every
   `stride`-th kept, executed on the larger device count. */
static void ra_sweep(const char *ma, int nda, const int64_t *sa, const char *mb, int ndb, const int64_t *sb, int stride) {
  sk_mesh a = ra_mesh(ma), b = ra_mesh(mb);
  static sk_layout la[64], lb[64];
  int na = ra_maps(&a, nda, sa, la, 64), nb = ra_maps(&b, ndb, sb, lb, 64), n = 0;
  cr_assert(na > 0 && nb > 0, "%s, %s: no layouts", ma, mb);
  ra_case *cases = calloc((size_t)(na * nb), sizeof(ra_case));
  cr_assert_not_null(cases);
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb; j++)
      if ((i * nb + j) % stride == 0) cases[n].from = la[i], cases[n].to = lb[j], n++;
  char label[160];
  snprintf(label, sizeof label, "%s -> %s, %d cases", ma, mb, n);
  cr_log_info("%s", label);
  cr_assert(n > 0);
  ra_execute(cases, n, ra_devices(&cases[0]), label);
  free(cases);
}

static const int64_t ra_s84[] = {8, 4}, ra_s48[] = {4, 8}, ra_s282[] = {2, 8, 2}, ra_s16x2[] = {16, 2};

Test(redist_across, sweep_device_matrices_and_reshapes, .timeout = 120) {
  ra_sweep("a=2,b=4", 2, ra_s84, "x=4,y=2", 2, ra_s48, 1);
  ra_sweep("a=8", 2, ra_s84, "x=2,y=2,z=2", 3, ra_s282, 1);
  ra_sweep("a=2,b=2,c=2", 2, ra_s16x2, "x=4,y=2", 3, ra_s282, 1);
}

Test(redist_across, sweep_device_counts, .timeout = 120) {
  ra_sweep("a=2,b=2", 2, ra_s84, "x=2,y=4", 2, ra_s48, 1); /* 4 -> 8 devices */
  ra_sweep("a=4,b=2", 3, ra_s282, "x=2", 2, ra_s16x2, 1);  /* 8 -> 2 devices */
}

/* ---- a step that fails on one rank ------------------------------------------------------------- */

/* The threads backend as a device-memory backend (no shared address space: every step takes the
   message path and copies through the backend's hook), whose copies rank 0's device refuses. */
static sk_result ra_copy_refused_on_rank0(sk_comm *c, void *dst, const void *src, size_t bytes) {
  if (sk_comm_rank(c) == 0) return sk_comm_set_error(c, SK_ERR_BACKEND, "copy: rank 0's device refused");
  memcpy(dst, src, bytes);
  return SK_OK;
}

typedef struct ra_fail_run {
  sk_redist_desc desc;
  sk_result rc[4];
  atomic_int returned; /* ranks 1..3 back from sk_redist_execute */
} ra_fail_run;

/* Rank 0, once its execute failed, stays away from shardkit (as a caller handling its error
   would) until the others are back: they must not need it to come back. */
static sk_result ra_fail_device(sk_comm *comm, void *arg) {
  ra_fail_run *x = (ra_fail_run *)arg;
  int r = sk_comm_rank(comm);
  float src[8] = {0}, dst[8] = {0};
  sk_redist_executor *ex = NULL;
  x->rc[r] = sk_redist_executor_create(comm, &x->desc, &ex, NULL);
  if (x->rc[r] == SK_OK) x->rc[r] = sk_redist_execute(ex, src, 8, dst, 8, SK_F32, NULL);
  if (r) atomic_fetch_add(&x->returned, 1);
  while (r == 0 && atomic_load(&x->returned) < 3) nanosleep(&(struct timespec){0, 1000000}, NULL);
  sk_redist_executor_destroy(ex);
  return SK_OK;
}

/* Row B4 in MindSpore mode is Reshape, AllToAll, AllToAll, Reshape. Rank 0's Reshape copy
   fails while the others go on into the AllToAll: rank 0 must take the world down, so that they
   fail at once instead of waiting for the world's timeout in a collective rank 0 never joins
   (SK_ERR_TIMEOUT). */
Test(redist_across, a_failed_local_step_does_not_leave_the_others_waiting, .timeout = 60) {
  static const int64_t s28[] = {2, 8}, s44[] = {4, 4};
  sk_mesh m = ra_mesh("a=4");
  ra_fail_run x;
  memset(&x, 0, sizeof x);
  cr_assert_eq(sk_layout_parse(&x.desc.from, &m, "None,a", 2, s28, NULL), SK_OK);
  cr_assert_eq(sk_layout_parse(&x.desc.to, &m, "a,None", 2, s44, NULL), SK_OK);
  x.desc.to_ndims = 2, x.desc.to_shape[0] = 4, x.desc.to_shape[1] = 4;
  x.desc.mode = SK_REDIST_MINDSPORE;
  sk_redist_plan *p = NULL;
  cr_assert_eq(sk_redist_plan_create(&x.desc, 0, &p, NULL), SK_OK);
  sk_redist_step_info first, second;
  cr_assert_eq(sk_redist_plan_step(p, 0, &first, NULL), SK_OK);
  cr_assert_eq(sk_redist_plan_step(p, 1, &second, NULL), SK_OK);
  cr_assert_eq(first.op, SK_REDIST_RESHAPE, "step 1 is %s", first.name);
  cr_assert_eq(second.op, SK_REDIST_ALLTOALL, "step 2 is %s", second.name);
  sk_redist_plan_destroy(p);

  sk_backend b = *sk_threads_backend();
  b.name = "refusing-threads";
  b.copy = ra_copy_refused_on_rank0;
  b.peer_access = NULL, b.shared_address_space = 0;
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = 4, wd.backend = &b, wd.timeout_ms = CT_TIMEOUT_MS; /* far beyond a prompt failure */
  sk_world *w = NULL;
  sk_error e;
  cr_assert_eq(sk_world_create(&wd, &w, &e), SK_OK, "%s", e.msg);
  (void)sk_world_run(w, ra_fail_device, &x, NULL);
  sk_world_destroy(w, NULL);
  cr_expect_eq(x.rc[0], SK_ERR_BACKEND, "rank 0: %s, want the refused copy", sk_result_name(x.rc[0]));
  for (int r = 1; r < 4; r++) {
    cr_expect_neq(x.rc[r], SK_OK, "rank %d went through with rank 0 failed", r);
    cr_expect_neq(x.rc[r], SK_ERR_TIMEOUT, "rank %d waited for the timeout", r);
  }
}

/* ---- element counts beyond 64 bits ------------------------------------------------------------- */

/* [4, 2^62 + 1] holds 2^64 + 4 elements, 4 once wrapped to 64 bits: it is no reshape of [4]. */
Test(redist_across, element_counts_that_overflow_are_refused, .timeout = 30) {
  static const int64_t s4[] = {4}, huge[] = {4, 4611686018427387905LL}, fine[] = {2, 9223372036854775806LL};
  sk_mesh m = ra_mesh("a=2");
  sk_layout f, t, x;
  cr_assert_eq(sk_layout_parse(&f, &m, "a", 1, s4, NULL), SK_OK);
  cr_assert_eq(sk_layout_parse(&t, &m, "None,None", 2, huge, NULL), SK_OK);
  sk_layout_unified u;
  sk_error e;
  memset(&e, 0, sizeof e);
  cr_expect_eq(sk_layout_unify(&f, &t, &u, &e), SK_ERR_INVALID_ARGUMENT, "unify: %s", e.msg);
  cr_expect(strstr(e.msg, "to has more than") != NULL, "unify: %s", e.msg);
  /* 2 * (2^63 - 2) wraps to -4, which divides 4: still no refinement of [4] */
  memset(&e, 0, sizeof e);
  cr_expect_eq(sk_layout_expand_shape(&f, 2, fine, &x, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "does not refine") != NULL, "expand_shape: %s", e.msg);
}

/* ---- a communicator of the wrong size ---------------------------------------------------------- */

typedef struct ra_size_run {
  sk_redist_desc desc;
  ct_slot slots[4];
} ra_size_run;

static sk_result ra_size_device(sk_comm *comm, void *arg) {
  ra_size_run *x = (ra_size_run *)arg;
  ct_slot *s = &x->slots[sk_comm_rank(comm)];
  sk_redist_executor *ex = NULL;
  sk_error e;
  memset(&e, 0, sizeof e);
  sk_result r = sk_redist_executor_create(comm, &x->desc, &ex, &e);
  const char *want = "comm has 4 ranks but the redistribution covers 8 devices (the larger of the from mesh's 4 and "
                     "the to mesh's 8)";
  ct_check(s, r == SK_ERR_INVALID_ARGUMENT && !ex && strstr(e.msg, want), "%s: '%s'", sk_result_name(r), e.msg);
  sk_redist_executor_destroy(ex);
  s->ran = 1;
  return SK_OK;
}

/* 4 devices to 8 on a communicator of 4: the message names both meshes, since neither mesh alone
   is "the mesh" any more. */
Test(redist_across, a_comm_of_the_smaller_count_is_refused_by_name, .timeout = 30) {
  ra_size_run x;
  memset(&x, 0, sizeof x);
  sk_mesh m4 = ra_mesh("a=4"), m8 = ra_mesh("x=2,y=4");
  cr_assert_eq(sk_layout_parse(&x.desc.from, &m4, "a,None", 2, ra_s84, NULL), SK_OK);
  cr_assert_eq(sk_layout_parse(&x.desc.to, &m8, "None,y", 2, ra_s84, NULL), SK_OK);
  ct_run(4, CT_CFG_DEFAULT, ra_size_device, &x, "executor on 4 of 8 ranks");
  ct_expect_slots(x.slots, 4, "executor on 4 of 8 ranks");
}
