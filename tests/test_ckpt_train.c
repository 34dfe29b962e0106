/* Training resumed from a sharded checkpoint (sk_ckpt.h through sk-sim's glue, tools/sim_ckpt.h):
   saved by 8 device threads, loaded by 8 (the same strategy, and another: every operator data
   parallel), 4, 2 and 1 device, with and without optimizer sharding, on the tutorial network and
   the transformer block (examples/nets). The resumed run's losses are compared in f64 with an
   uninterrupted run on the loading layout: bitwise where both runs compute the same sums (8 ->
   8, the same strategy); within 1e-12 relative otherwise -- the first steps then ran on another
   device count, whose reduction order rounds differently (measured: below 1e-15, see
   docs/checkpoints.md). Also refused: a checkpoint with a slice missing, named by tensor and
   rank, on every device. Inputs are synthetic (each batch a function of its index), so the
   suite needs no dataset. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardkit.h"
#include "sk_json.h"
#include "../tools/sim_ckpt.h"

#define TUTORIAL "examples/nets/operator_parallel.json"
#define TRANSFORMER "examples/nets/transformer.json"
#define K 3 /* steps before the save, and after the load */
/* A hang guard, not a speed check: the sharded transformer resume takes ~72 s under ASan on a
   quiet 2-core machine (-j2 runs another suite beside it), 8 s without. */
#define TIMEOUT 300

typedef struct job {
  sk_graph *g;
  sk_parallel_plan plan;
  int ndev;
  long steps;
  sim_ckpt_opts ck; /* save and load roots */
  double losses[2 * K];
  sk_result r[8];
  char msg[8][SK_ERROR_MSG_MAX];
} job;

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Batch b of every input: floats in [0, 1), integers below the logits' last dim (classes, vocab). */
static sk_result feed(sk_runtime *rt, const sk_graph *g, long b, sk_error *e) {
  int64_t range = g->tensors[g->logits].shape[g->tensors[g->logits].ndims - 1];
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_INPUT) continue;
    size_t n = (size_t)sk_graph_numel(g, t);
    bool flt = g->tensors[t].dtype == SK_F32 || g->tensors[t].dtype == SK_F64;
    void *buf = malloc(n * 8);
    if (!buf) return SK_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n; i++) {
      uint64_t h = mix(((uint64_t)b << 32) ^ ((uint64_t)t << 24) ^ i);
      if (flt) ((double *)buf)[i] = (double)(h >> 11) / 9007199254740992.0;
      else ((int32_t *)buf)[i] = (int32_t)(h % (uint64_t)range);
    }
    sk_result r = sk_runtime_feed(rt, t, flt ? SK_F64 : SK_I32, buf, n, e);
    free(buf);
    if (r) return r;
  }
  return SK_OK;
}

/* One device: load (when asked), J->steps steps from the data position, save (when asked). */
static sk_result device(sk_comm *c, void *arg) {
  job *J = (job *)arg;
  int rank = sk_comm_rank(c);
  sk_runtime_desc d;
  memset(&d, 0, sizeof d);
  sk_runtime *rt = NULL;
  sk_error e = {SK_OK, ""};
  long pos = 0;
  sk_result r = sk_runtime_create(c, &J->plan, &d, &rt, &e);
  if (!r && J->ck.load) r = sim_ckpt_load(c, rt, &J->plan, J->plan.desc.optim.kind, &J->ck, &pos, false, &e);
  for (long s = pos; !r && s < pos + J->steps; s++) {
    double loss = 0;
    r = feed(rt, J->g, s, &e);
    if (!r) r = sk_runtime_step(rt, &loss, &e);
    if (!r && rank == 0) J->losses[s] = loss;
  }
  if (!r && J->ck.save) r = sim_ckpt_save(c, rt, &J->plan, J->plan.desc.optim.kind, &J->ck, pos + J->steps, false, &e);
  J->r[rank] = r;
  snprintf(J->msg[rank], sizeof J->msg[rank], "%s", e.msg);
  sk_runtime_destroy(rt);
  return r;
}

/* Compiles g for ndev devices (dp: every operator's strategy dropped, data parallel; shard > 0:
   optimizer parallel over that many) and runs `steps` steps. Returns the first device's result. */
static sk_result run(job *J, sk_graph *g, int ndev, bool dp, int shard, long steps) {
  J->g = g, J->ndev = ndev, J->steps = steps;
  sk_graph_op *saved = (sk_graph_op *)malloc(sizeof(sk_graph_op) * (size_t)g->nops);
  cr_assert(saved);
  memcpy(saved, g->ops, sizeof(sk_graph_op) * (size_t)g->nops);
  for (int o = 0; dp && o < g->nops; o++) g->ops[o].desc.has_strategy = false;
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.ndevices = ndev, pd.dtype = SK_F64, pd.optim = g->optim, pd.seed = 1;
  if (shard) pd.hsdp.enabled = true, pd.hsdp.shard_size = shard, pd.hsdp.threshold_kb = 0;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_parallel_compile(g, &pd, &J->plan, &e), SK_OK, "compile: %s", e.msg);
  sk_world_desc wd;
  memset(&wd, 0, sizeof wd);
  wd.ndevices = ndev, wd.backend = sk_threads_backend(), wd.timeout_ms = 60000;
  sk_world *w = NULL;
  cr_assert_eq(sk_world_create(&wd, &w, &e), SK_OK, "%s", e.msg);
  sk_world_run(w, device, J, NULL);
  sk_world_destroy(w, NULL);
  sk_parallel_free(&J->plan);
  memcpy(g->ops, saved, sizeof(sk_graph_op) * (size_t)g->nops);
  free(saved);
  return J->r[0];
}

static void expect_ok(const job *J, const char *what) {
  for (int d = 0; d < J->ndev; d++) cr_assert_eq(J->r[d], SK_OK, "%s: device %d: %s", what, d, J->msg[d]);
}

/* Saves after K steps on 8 devices (shard8: with optimizer sharding), then for each target
   layout compares K resumed steps with steps K..2K-1 of an uninterrupted run on that layout. */
static void resume_everywhere(const char *net, int shard8, const char *optimizer) {
  sk_graph g;
  sk_graph_init(&g);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_load_network(net, &g, &e), SK_OK, "%s", e.msg);
  if (optimizer) cr_assert(sk_optim_kind_from_name(optimizer, &g.optim.kind));
  char root[64];
  snprintf(root, sizeof root, "/tmp/sk_ckpt_train.XXXXXX");
  cr_assert(mkdtemp(root));
  static job save, full, part;
  memset(&save, 0, sizeof save);
  save.ck.save = root;
  run(&save, &g, 8, false, shard8, K);
  expect_ok(&save, "save");
  struct { int ndev; bool dp; int shard; } to[6] = {{8, false, shard8}, {8, true, 0}, {8, false, shard8 ? 0 : 2}, {4, false, 2}, {2, false, 0}, {1, false, 0}};
  for (int i = 0; i < 6; i++) {
    memset(&full, 0, sizeof full), memset(&part, 0, sizeof part);
    run(&full, &g, to[i].ndev, to[i].dp, to[i].shard, 2 * K);
    expect_ok(&full, "uninterrupted");
    part.ck.load = root;
    run(&part, &g, to[i].ndev, to[i].dp, to[i].shard, K);
    expect_ok(&part, "resumed");
    bool same = to[i].ndev == 8 && !to[i].dp && to[i].shard == shard8;
    for (int s = K; s < 2 * K; s++) {
      double a = part.losses[s], b = full.losses[s], rel = fabs(a - b) / fabs(b);
      cr_assert(isfinite(a) && a > 0, "%s: step %d: loss %g", net, s, a);
      if (same) cr_assert_eq(a, b, "%s 8 -> 8: step %d: %.17g, uninterrupted %.17g", net, s, a, b);
      else cr_assert_leq(rel, 1e-12, "%s 8 -> %d%s (shard %d): step %d: %.17g, uninterrupted %.17g", net, to[i].ndev,
                         to[i].dp ? " data parallel" : "", to[i].shard, s, a, b);
    }
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  cr_assert_eq(system(cmd), 0);
  sk_graph_free(&g);
}

Test(ckpt_train, tutorial_resumes_on_any_layout, .timeout = TIMEOUT) { resume_everywhere(TUTORIAL, 0, "adam"); }
Test(ckpt_train, tutorial_sharded_resumes_on_any_layout, .timeout = TIMEOUT) { resume_everywhere(TUTORIAL, 2, "momentum"); }
Test(ckpt_train, transformer_resumes_on_any_layout, .timeout = TIMEOUT) { resume_everywhere(TRANSFORMER, 0, NULL); }
Test(ckpt_train, transformer_sharded_resumes_on_any_layout, .timeout = TIMEOUT) { resume_everywhere(TRANSFORMER, 4, NULL); }

/* Rank 3's slices dropped from the newest checkpoint's manifest (its crc line rewritten, so
   only the tiling is wrong): every device's load fails, those that needed a dropped slice
   naming the tensor and their rank, the others the device that failed; nothing trains. */
Test(ckpt_train, a_missing_slice_is_refused_on_every_device, .timeout = TIMEOUT) {
  sk_graph g;
  sk_graph_init(&g);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_load_network(TUTORIAL, &g, &e), SK_OK, "%s", e.msg);
  char root[64], path[4200];
  snprintf(root, sizeof root, "/tmp/sk_ckpt_train.XXXXXX");
  cr_assert(mkdtemp(root));
  static job save, part;
  memset(&save, 0, sizeof save), memset(&part, 0, sizeof part);
  save.ck.save = root;
  run(&save, &g, 8, false, 0, 1);
  expect_ok(&save, "save");
  sk_ckpt_manifest m;
  cr_assert_eq(sk_ckpt_open(root, &m, &e), SK_OK, "%s", e.msg);
  int kept = 0;
  for (int i = 0; i < m.nentries; i++)
    if (m.entries[i].rank != 3) m.entries[kept++] = m.entries[i];
  cr_assert_lt(kept, m.nentries, "rank 3 wrote nothing");
  m.nentries = kept;
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sk_ckpt_manifest_format(&m, &text, &len, &e), SK_OK);
  snprintf(path, sizeof path, "%s/MANIFEST", m.dir);
  FILE *f = fopen(path, "w");
  cr_assert(f && fwrite(text, 1, len, f) == len);
  fclose(f), free(text);
  sk_ckpt_manifest_free(&m);
  part.ck.load = root;
  run(&part, &g, 4, false, 0, 1);
  int named = 0;
  for (int d = 0; d < 4; d++) {
    cr_assert_neq(part.r[d], SK_OK, "device %d loaded a checkpoint with slices missing", d);
    char want[64];
    snprintf(want, sizeof want, "(rank %d): slice missing", d);
    if (strstr(part.msg[d], want) && strstr(part.msg[d], "tensor '")) named++;
    else cr_assert(strstr(part.msg[d], "could not load"), "device %d: %s", d, part.msg[d]);
  }
  cr_assert_geq(named, 1, "no device named the missing slice");
  for (int s = 0; s < 2; s++) cr_assert_eq(part.losses[s], 0.0, "a step ran after a failed load");
  snprintf(path, sizeof path, "rm -rf '%s'", root);
  cr_assert_eq(system(path), 0);
  sk_graph_free(&g);
}
