/* sim_classes.h -- sk-sim's device classes: devices whose figures are the same by construction,
   so that the report and the dry run speak of (and simulate) each class once. Two devices are
   of one class when they have
     - the same program (pipeline stage),
     - the same shape of every plan group: under --topology how the group's members spread
       over nodes (how many nodes, members on each), on a flat link or none the size alone,
     - the same redistribution send bytes in every move of their program.
   Classes are numbered by their first rank, ascending (docs/sk-sim.md, "Device classes"). */
#ifndef SK_TOOLS_SIM_CLASSES_H
#define SK_TOOLS_SIM_CLASSES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"

typedef struct sim_classes {
  int n;       /* classes */
  int devices; /* world ranks */
  int *of;     /* [devices]: each rank's class */
  int *order;  /* [devices]: the ranks class by class, ascending within one */
  int *start;  /* [n + 1]: class c's ranks are order[start[c] .. start[c + 1]) */
} sim_classes;

static void sim_classes_free(sim_classes *k) {
  free(k->of), free(k->order), free(k->start);
  memset(k, 0, sizeof *k);
}

static int sim_class_first(const sim_classes *k, int c) { return k->order[k->start[c]]; }
static int sim_class_size(const sim_classes *k, int c) { return k->start[c + 1] - k->start[c]; }

/* The per-rank key under construction: `width` words a rank, word 0 its stage. */
typedef struct sim_keys {
  const sk_parallel_plan *plan;
  int width;
  uint64_t *key;  /* [devices * width] */
  int *ranks;     /* scratch: one group's members */
  int *per_node;  /* scratch: members on each node */
  uint64_t *shapes; /* interned shapes, each SIM_SHAPE_WORDS words */
  int nshapes;
} sim_keys;

/* A shape: members, nodes spanned, then the fewest and most members on one node (with an even
   spread those say it all; an uneven group's pricing reads its slowest link, which the node
   count and the extremes decide) and a hash of the sorted per-node counts for the rest. */
#define SIM_SHAPE_WORDS 5

/* The shape of a group's members `ranks` (n of them) on the plan's cluster into w. */
static void sim_group_shape(sim_keys *s, const int *ranks, int n, uint64_t *w) {
  const sk_topology *t = &s->plan->desc.cluster.topology;
  memset(w, 0, sizeof(uint64_t) * SIM_SHAPE_WORDS);
  w[0] = (uint64_t)n;
  if (!t->nodes || t->per_node < 1) return; /* flat: the size alone */
  int nodes = 0, lo = n, hi = 0;
  for (int i = 0; i < n; i++) s->per_node[ranks[i] / t->per_node]++;
  uint64_t h = 1469598103934665603ull; /* a sum of mixed counts: the same whatever the nodes' order */
  for (int i = 0; i < n; i++) {
    int node = ranks[i] / t->per_node, c = s->per_node[node];
    if (!c) continue;
    nodes++, lo = c < lo ? c : lo, hi = c > hi ? c : hi;
    h += ((uint64_t)c * 1099511628211ull) ^ ((uint64_t)c << 32);
    s->per_node[node] = 0; /* counted once, and the scratch left zero */
  }
  w[1] = (uint64_t)nodes, w[2] = (uint64_t)lo, w[3] = (uint64_t)hi, w[4] = h;
}

/* The interned id of shape w in the table *shapes of *n (added when new). -1 when out of memory. */
static int sim_shape_id(uint64_t **shapes, int *n, const uint64_t *w) {
  for (int i = 0; i < *n; i++)
    if (!memcmp(&(*shapes)[(size_t)i * SIM_SHAPE_WORDS], w, sizeof(uint64_t) * SIM_SHAPE_WORDS)) return i;
  uint64_t *more = (uint64_t *)realloc(*shapes, sizeof(uint64_t) * SIM_SHAPE_WORDS * (size_t)(*n + 1));
  if (!more) return -1;
  *shapes = more;
  for (int i = 0; i < SIM_SHAPE_WORDS; i++) more[(size_t)*n * SIM_SHAPE_WORDS + (size_t)i] = w[i];
  return (*n)++;
}

/* Word 1 + g of every rank: the shape of plan group g's instance it belongs to. Each instance
   is listed once (its members all get its shape), so the cost is one listing per instance. */
static int sim_keys_group(sim_keys *s, int g, char *msg, size_t cap) {
  int devices = s->plan->world_devices, n = 0;
  uint64_t w[SIM_SHAPE_WORDS], unset = UINT64_MAX;
  for (int r = 0; r < devices; r++) s->key[(size_t)r * (size_t)s->width + 1 + (size_t)g] = unset;
  for (int r = 0; r < devices; r++) {
    if (s->key[(size_t)r * (size_t)s->width + 1 + (size_t)g] != unset) continue;
    sk_error e;
    if (sk_parallel_group_ranks(s->plan, g, r, s->ranks, devices, &n, &e))
      return snprintf(msg, cap, "device classes: group g%d of device %d: %s", g, r, e.msg), -1;
    sim_group_shape(s, s->ranks, n, w);
    int id = sim_shape_id(&s->shapes, &s->nshapes, w);
    if (id < 0) return snprintf(msg, cap, "device classes: out of memory"), -1;
    for (int i = 0; i < n; i++) s->key[(size_t)s->ranks[i] * (size_t)s->width + 1 + (size_t)g] = (uint64_t)id;
  }
  return 0;
}

/* The move of program step s (running plan step kind k), which = 0 MOVE, 1 MOVE_BACK,
   2 OUT_MOVE, 3 OUT_MOVE_BACK, -1 none. */
static int sim_move_of(sk_parallel_step_kind k) {
  return k == SK_PSTEP_MOVE ? 0 : k == SK_PSTEP_MOVE_BACK ? 1 : k == SK_PSTEP_OUT_MOVE ? 2 : k == SK_PSTEP_OUT_MOVE_BACK ? 3 : -1;
}

/* The bytes each stage-local rank sends in the move `which` of operator o's slot k, rank
   `local`'s into sends[local * stride]: the redistribution the runtime plans for it (the
   tensor's layout to the operator's and back, as the dry run's walk prices it), in the graph's
   dtype (a constant factor for every rank, so equal in one dtype is equal in the run's). One
   all-ranks plan, whose exchanges count every rank's pieces in one walk (sk_redist.h). */
static int sim_move_sends(const sk_parallel_plan *p, int o, int which, int k, uint64_t *sends, size_t stride,
                          char *msg, size_t cap) {
  const sk_parallel_op *po = &p->ops[o];
  bool in = which <= 1, back = which == 1 || which == 3;
  int t = in ? p->graph->ops[o].inputs[k] : p->graph->ops[o].outputs[k];
  const sk_layout *tensor = &p->tensors[t].layout, *kernel = in ? &po->kernel_in[k] : &po->plan.out[k];
  bool to_kernel = in != back;
  sk_redist_desc rd;
  memset(&rd, 0, sizeof rd);
  rd.from = to_kernel ? *tensor : *kernel, rd.to = to_kernel ? *kernel : *tensor;
  rd.dtype = p->graph->tensors[t].dtype, rd.allocator = p->desc.allocator;
  sk_redist_plan *rp = NULL;
  uint64_t recv = 0;
  sk_error e;
  sk_result r = sk_redist_plan_create(&rd, SK_REDIST_ALL_RANKS, &rp, &e);
  for (int local = 0; !r && local < p->desc.ndevices; local++)
    r = sk_redist_plan_bytes(rp, -1, local, &recv, &sends[(size_t)local * stride], &e);
  sk_redist_plan_destroy(rp);
  return r ? (snprintf(msg, cap, "device classes: the move of operator '%s' slot %d: %s", p->graph->ops[o].name, k, e.msg), -1)
           : 0;
}

/* A stage's moves once each (the first micro-batch's: the others repeat them), as the dry run
   counts them (a bucket's members are its fused step's). *n their count; with `ranks` set, the
   send bytes of each of the stage's ranks into their keys from word `at` on. */
static int sim_keys_moves(sim_keys *s, int stage, int at, int *n, char *msg, size_t cap) {
  const sk_parallel_plan *p = s->plan;
  const sk_program *pg = &p->programs[stage];
  int per = p->desc.ndevices, m = 0;
  for (int i = 0; i < pg->nsteps; i++) {
    const sk_program_step *st = &pg->steps[i];
    if (!sk_program_op_step(st) || st->bucket >= 0 || st->micro > 0) continue;
    int which = sim_move_of(p->steps[st->index].kind);
    if (which < 0) continue;
    uint64_t *w = s->key ? &s->key[(size_t)stage * (size_t)per * (size_t)s->width + (size_t)at + (size_t)m] : NULL;
    if (w && sim_move_sends(p, st->op, which, st->slot, w, (size_t)s->width, msg, cap)) return -1;
    m++;
  }
  *n = m;
  return 0;
}

/* Every rank's key: the stage, each group's shape id, each move's send bytes (0-padded). */
static int sim_keys_fill(sim_keys *s, char *msg, size_t cap) {
  const sk_parallel_plan *p = s->plan;
  int stages = p->stages > 0 ? p->stages : 1, most = 0, n = 0;
  uint64_t *key = s->key;
  s->key = NULL; /* counting only */
  for (int st = 0; st < stages; st++) {
    if (sim_keys_moves(s, st, 0, &n, msg, cap)) return s->key = key, -1;
    most = n > most ? n : most;
  }
  s->key = key;
  s->width = 1 + p->ngroups + most;
  size_t words = (size_t)p->world_devices * (size_t)s->width;
  s->key = (uint64_t *)calloc(words + (size_t)s->width, sizeof(uint64_t)); /* a spare row: never calloc(0) */
  if (!s->key) return snprintf(msg, cap, "device classes: out of memory for %d devices", p->world_devices), -1;
  for (int r = 0; r < p->world_devices; r++) s->key[(size_t)r * (size_t)s->width] = (uint64_t)sk_parallel_stage_of_rank(p, r);
  for (int g = 0; g < p->ngroups; g++)
    if (sim_keys_group(s, g, msg, cap)) return -1;
  for (int st = 0; st < stages; st++)
    if (sim_keys_moves(s, st, 1 + p->ngroups, &n, msg, cap)) return -1;
  return 0;
}

/* Ranks with equal keys into one class, numbered by first rank. */
static int sim_classes_group(const sim_keys *s, sim_classes *k, char *msg, size_t cap) {
  int devices = s->plan->world_devices;
  size_t bytes = sizeof(uint64_t) * (size_t)s->width;
  int *firsts = (int *)malloc(sizeof(int) * (size_t)devices), *count = (int *)calloc((size_t)devices + 1, sizeof(int));
  k->of = (int *)malloc(sizeof(int) * (size_t)devices), k->order = (int *)malloc(sizeof(int) * (size_t)devices);
  if (!firsts || !count || !k->of || !k->order)
    return free(firsts), free(count), snprintf(msg, cap, "device classes: out of memory for %d devices", devices), -1;
  k->devices = devices, k->n = 0;
  for (int r = 0; r < devices; r++) {
    const uint64_t *mine = &s->key[(size_t)r * (size_t)s->width];
    int c = k->n - 1; /* the newest class first: a stage's ranks are contiguous */
    while (c >= 0 && memcmp(&s->key[(size_t)firsts[c] * (size_t)s->width], mine, bytes)) c--;
    if (c < 0) c = k->n, firsts[k->n++] = r;
    k->of[r] = c, count[c + 1]++;
  }
  for (int c = 0; c < k->n; c++) count[c + 1] += count[c];
  k->start = count;
  int *next = firsts; /* reused: where each class's next rank goes */
  for (int c = 0; c < k->n; c++) next[c] = k->start[c];
  for (int r = 0; r < devices; r++) k->order[next[k->of[r]]++] = r;
  free(firsts);
  return 0;
}

/* plan's device classes into *k (sim_classes_free it, also on failure). 0, or -1 with msg. */
static int sim_classes_build(const sk_parallel_plan *plan, sim_classes *k, char *msg, size_t cap) {
  memset(k, 0, sizeof *k);
  sim_keys s;
  memset(&s, 0, sizeof s);
  s.plan = plan;
  int devices = plan->world_devices, nodes = plan->desc.cluster.topology.nodes;
  if (devices < 1) return snprintf(msg, cap, "device classes: the plan has %d devices", devices), -1;
  s.ranks = (int *)malloc(sizeof(int) * (size_t)devices + 1);
  s.per_node = (int *)calloc((size_t)(nodes > devices ? nodes : devices) + 1, sizeof(int));
  int rc = s.ranks && s.per_node ? 0 : (snprintf(msg, cap, "device classes: out of memory for %d devices", devices), -1);
  if (!rc) rc = sim_keys_fill(&s, msg, cap);
  if (!rc) rc = sim_classes_group(&s, k, msg, cap);
  free(s.key), free(s.ranks), free(s.per_node), free(s.shapes);
  return rc;
}

/* Class c's ranks as text into buf: "A-B" when contiguous (its first and last rank; "A-A" for
   one device), else its ranges ("A-B", or "A" alone) joined by commas, up to three, and
   "... (N devices)" past them: "0,2,5,... (4 devices)", "0-3,8-11". */
#define SIM_CLASS_RANGES 3
static void sim_class_ranks_text(const sim_classes *k, int c, char *buf, size_t cap) {
  const int *r = &k->order[k->start[c]];
  int n = sim_class_size(k, c), ranges = 0;
  size_t used = 0;
  buf[0] = 0;
  if (r[n - 1] - r[0] == n - 1) { /* contiguous: the ranks ascend within a class */
    snprintf(buf, cap, "%d-%d", r[0], r[n - 1]);
    return;
  }
  for (int i = 0; i < n && used < cap;) {
    int j = i;
    while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
    if (ranges++ == SIM_CLASS_RANGES) {
      snprintf(buf + used, cap - used, ",... (%d devices)", n);
      return;
    }
    int w = j > i ? snprintf(buf + used, cap - used, "%s%d-%d", i ? "," : "", r[i], r[j])
                  : snprintf(buf + used, cap - used, "%s%d", i ? "," : "", r[i]);
    used += w > 0 ? (size_t)w : 0;
    i = j + 1;
  }
}

#endif /* SK_TOOLS_SIM_CLASSES_H */
