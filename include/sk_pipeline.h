/* sk_pipeline.h -- pipeline parallel's planning math: the schedulers as action lists, the
   placement of model chunks on stages, a balanced cut of an operator sequence into chunks, and a
   dependency simulator that gives a schedule's makespan, per-stage busy time, bubble and peak
   in-flight activations under per-action costs.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_PIPELINE_IMPL)   #include "sk_pipeline.h"
   Needs only libc. Pure: no world, no buffers, no graph; a runtime that brings its own model can
   use it as it is (docs/pipeline.md).

   WORDS
     p stages, m micro-batches, v chunks per stage (1 unless interleaved or zero_bubble_v). The
     model is cut into p*v chunks in order, the VIRTUAL stages 0 .. p*v-1; stage s holds v of
     them (sk_pipe_virtual_stage). An action is F (forward), B (backward; with zero_bubble_v only
     the input gradient) or W (zero_bubble_v: the weight gradient) of one micro-batch on one of the
     stage's chunks. Written "F3", "B0", "W1", and "F3.1" (chunk 1) when a stage holds several.

   THE SCHEDULERS (each stage's list; docs/pipeline.md derives them)
     gpipe           every forward, then every backward. Chunks breadth first: all micro-batches
                     of chunk 0, then chunk 1, ...; the backward in reverse chunk order.
     1f1b, v = 1     Megatron's PipeDream-flush: stage s runs min(p-s-1, m) warm-up forwards,
                     then alternates one forward and one backward, then drains the backwards.
                     MindSpore requires m >= p.
     1f1b, v > 1     Megatron's interleaved 1F1B: micro-batches in groups of p; the forward order
                     walks each group through chunk 0, 1, ..., v-1; the backward order is the same
                     with the chunks reversed. Stage s warms up with 2(p-s-1) + (v-1)p forwards
                     (at most m*v), then alternates, then drains. Needs m a multiple of p.
     zero_bubble_v   the ZB-V schedule (Qi et al., ICLR 2024, section 6), two chunks per stage in
                     a V: stage s holds virtual stages s and 2p-1-s, so the loss is on stage 0.
                     Warm-up: 2(p-s)-1 forwards of chunk 0, s pairs (F chunk 1, F chunk 0), p-s
                     triples (F, B, W of chunk 1); steady: F chunk 0 (while any is left), B and
                     W chunk 0, F, B and W chunk 1; cool-down: s pairs (B chunk 0, B chunk 1), p-s
                     pairs (B chunk 0, the oldest W of chunk 0), then the W of chunk 1 left, then
                     of chunk 0. Built for max(m, 2p-1) micro-batches with the surplus actions
                     dropped, so any m >= 1 works.

   THE SIMULATOR: F(v, i) waits for F(v-1, i); B(v, i) for B(v+1, i) (the last virtual stage: for
     its own F(v, i)); W(v, i) for B(v, i); each stage runs its list in order, one action at a
     time; a crossing between two stages costs `comm`. A list that can never finish (a schedule
     broken by hand) is reported, not looped on. Live activations: a micro-batch's chunk counts
     from its F until its B (until its W where W is separate).

   THE CUT: sk_pipe_partition cuts n items with weights (an operator sequence and its FLOPs) into
     k contiguous parts, minimising the heaviest part; parts may be empty when k > n.

   ERRORS: NULL, p < 1 or above SK_PIPE_MAX_STAGES, m < 1, v < 1, an unknown scheduler, 1f1b with
     m < p, interleaved 1F1B with m not a multiple of p, zero_bubble_v with v other than 0 or 2,
     negative costs: SK_ERR_INVALID_ARGUMENT, the message naming the value. Allocation
     failures: SK_ERR_OUT_OF_MEMORY (nothing leaks).

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_PIPELINE_IMPL)
#define SK_PIPELINE_IMPL
#endif
#ifndef SK_PIPELINE_H
#define SK_PIPELINE_H

#include "sk_layout.h" /* SK_MAX_DEVICES */

SK_EXTERN_C_BEGIN

/* AutoParallel.pipeline(scheduler=...). Zero: MindSpore's default, 1f1b. */
typedef enum sk_pipe_scheduler {
  SK_PIPE_1F1B = 0,
  SK_PIPE_GPIPE,
  SK_PIPE_ZERO_BUBBLE_V,
  SK_PIPE_SCHEDULER_COUNT
} sk_pipe_scheduler;

/* The most stages a schedule has: far beyond any real pipeline (MindSpore's are a handful), and
   it keeps sk_pipe_stats a plain struct. */
#define SK_PIPE_MAX_STAGES 512

typedef enum sk_pipe_kind { SK_PIPE_F = 0, SK_PIPE_B, SK_PIPE_W } sk_pipe_kind;

typedef struct sk_pipe_action {
  sk_pipe_kind kind;
  int micro; /* 0-based micro-batch */
  int chunk; /* the stage's chunk (0 .. chunks-1) */
} sk_pipe_action;

/* pipeline(stages, interleave, scheduler) with micro_size. Zero fields: one stage, one
   micro-batch, 1f1b, one chunk per stage (zero_bubble_v: always two). */
typedef struct sk_pipe_desc {
  int stages;
  int micro;
  sk_pipe_scheduler scheduler;
  int interleave; /* chunks per stage (0 or 1: one) */
  sk_allocator allocator; /* the schedule's lists and the simulator's scratch (zero = the C library) */
} sk_pipe_desc;

typedef struct sk_pipe_schedule {
  int stages, micro, chunks;
  sk_pipe_scheduler scheduler;
  bool split_backward;      /* W actions are separate (zero_bubble_v) */
  int *count;               /* [stages]: actions of each stage */
  sk_pipe_action **actions; /* [stages][count[s]] */
  sk_allocator allocator;   /* the desc's: what the lists were made with (and sk_pipe_simulate uses) */
} sk_pipe_schedule;

/* Per-action costs of ONE chunk (time units of the caller's choice). Where the backward is not
   split, a B costs b + w. */
typedef struct sk_pipe_costs {
  double f, b, w;
  double comm; /* an activation or its gradient crossing between two stages */
} sk_pipe_costs;

typedef struct sk_pipe_stats {
  double makespan;           /* the last action's end */
  double ideal;              /* one stage's work: m * v * (f + b + w) */
  double bubble_fraction;    /* (makespan - ideal) / makespan: the idle share of the busiest stage */
  double busy[SK_PIPE_MAX_STAGES];  /* each stage's compute time */
  int peak_live[SK_PIPE_MAX_STAGES]; /* each stage's most chunk-activations held at once */
} sk_pipe_stats;

SK_API const char *sk_pipe_scheduler_name(sk_pipe_scheduler s); /* "1f1b", "gpipe", "zero_bubble_v" */
/* "1f1b" | "gpipe" | "zero_bubble_v" (MindSpore's spelling). */
SK_API sk_result sk_pipe_scheduler_parse(const char *text, sk_pipe_scheduler *out, sk_error *err);
/* The checks MindSpore and Megatron make on the configuration. */
SK_API sk_result sk_pipe_check(const sk_pipe_desc *desc, sk_error *err);
/* Every stage's action list (free with sk_pipe_schedule_free). */
SK_API sk_result sk_pipe_schedule_make(const sk_pipe_desc *desc, sk_pipe_schedule *out, sk_error *err);
SK_API void sk_pipe_schedule_free(sk_pipe_schedule *s);
/* The virtual stage (the model chunk's place in order) of `chunk` on `stage`; -1 if out of range. */
SK_API int sk_pipe_virtual_stage(const sk_pipe_schedule *s, int stage, int chunk);
/* The stage holding virtual stage `vstage` (and its chunk there); -1 if out of range. */
SK_API int sk_pipe_stage_of(const sk_pipe_schedule *s, int vstage, int *chunk);
/* One stage's list as text, "F0 F1 B0 ..."; snprintf convention. */
SK_API size_t sk_pipe_format_stage(const sk_pipe_schedule *s, int stage, char *buf, size_t cap);
/* Runs the lists on virtual clocks (see THE SIMULATOR). SK_ERR_INVALID_ARGUMENT names the first
   stuck action of a schedule that cannot finish, or one that is not a permutation of the work. */
SK_API sk_result sk_pipe_simulate(const sk_pipe_schedule *s, const sk_pipe_costs *costs, sk_pipe_stats *out,
                                  sk_error *err);
/* The bubble fraction of the configuration as a share of the total time, with equal stages:
   (p-1)/(v*m+p-1) for gpipe and 1f1b (v = 1: the classic (p-1)/(m+p-1); v chunks per stage
   shrink the fill v times). zero_bubble_v, with f = b = w per chunk and m >= 2p-1: only the
   fill, p-1 chunk forwards, is idle: (p-1)/(6m+p-1); -1 when m < 2p-1 (no closed form: the
   simulator gives it). -1 for a desc sk_pipe_check refuses. */
SK_API double sk_pipe_bubble_formula(const sk_pipe_desc *desc);
/* Cuts weights[0..n) into k contiguous parts minimising the heaviest; part_of[i] is item i's
   part, non-decreasing, and no part is empty while items remain for it (k > n leaves the last
   k - n parts empty). */
SK_API sk_result sk_pipe_partition(const double *weights, int n, int k, int *part_of, sk_error *err);

/* ---- stage queries, without a network ---------------------------------------------------------
   MindSpore's DeviceManager: a device list (global ranks in order; NULL: 0..ndevices-1) cut in
   order into nstages stages, stage s holding stage_sizes[s] devices (NULL: ndevices / nstages
   each, which must divide, as pipeline_stages must divide device_num). */
typedef struct sk_stage_map {
  int ndevices;
  const int *devices;
  int nstages;
  const int *stage_sizes;
} sk_stage_map;

/* GetDeviceListByStageId: the devices of `stage` into out[0..cap), their count in *n. */
SK_API sk_result sk_stage_devices(const sk_stage_map *map, int stage, int *out, int cap, int *n, sk_error *err);
/* The stage holding `device` (a value of the list) and its position in that stage (index may be
   NULL). */
SK_API sk_result sk_stage_of_device(const sk_stage_map *map, int device, int *stage, int *index, sk_error *err);
/* The pipeline Send/Recv peers of `device`: the device at its position in the next stage and in
   the previous one (-1 past either end). MindSpore's pipeline transformer sends to
   dest_rank = rank + (stage' - stage) * per_stage_rank_num, so every stage must hold the same
   number of devices; on a device list that is the same position one stage on. */
SK_API sk_result sk_stage_peers(const sk_stage_map *map, int device, int *next, int *prev, sk_error *err);

SK_EXTERN_C_END
#endif /* SK_PIPELINE_H */

#if defined(SK_PIPELINE_IMPL) && !defined(SK_PIPELINE_IMPL_DONE)
#define SK_PIPELINE_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SK_EXTERN_C_BEGIN

SK_API const char *sk_pipe_scheduler_name(sk_pipe_scheduler s) {
  switch (s) {
  case SK_PIPE_1F1B: return "1f1b";
  case SK_PIPE_GPIPE: return "gpipe";
  case SK_PIPE_ZERO_BUBBLE_V: return "zero_bubble_v";
  default: return "?";
  }
}

SK_API sk_result sk_pipe_scheduler_parse(const char *text, sk_pipe_scheduler *out, sk_error *err) {
  if (!text || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: NULL scheduler text or output");
  for (int s = 0; s < (int)SK_PIPE_SCHEDULER_COUNT; s++)
    if (strcmp(text, sk_pipe_scheduler_name((sk_pipe_scheduler)s)) == 0) return *out = (sk_pipe_scheduler)s, SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                  "pipeline: scheduler '%.40s' is not one of 1f1b, gpipe, zero_bubble_v (seqpipe, seqvpp and "
                  "seqsmartvpp are not built)",
                  text);
}

/* The chunk count a checked desc runs with. */
static int sk__pipe_chunks(const sk_pipe_desc *d) {
  if (d->scheduler == SK_PIPE_ZERO_BUBBLE_V) return 2;
  return d->interleave > 1 ? d->interleave : 1;
}

SK_API sk_result sk_pipe_check(const sk_pipe_desc *d, sk_error *err) {
  if (!d) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: NULL desc");
  int p = SK__DEF(d->stages, 1), m = SK__DEF(d->micro, 1);
  if (p < 1 || p > SK_PIPE_MAX_STAGES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: stages %d outside 1..%d", p, SK_PIPE_MAX_STAGES);
  if (m < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: micro_size %d must be >= 1", m);
  if (!sk__allocator_ok(&d->allocator))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: allocator: set both alloc and free, or neither");
  if (d->interleave < 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: interleave %d must be >= 1", d->interleave);
  if ((unsigned)d->scheduler >= (unsigned)SK_PIPE_SCHEDULER_COUNT)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: unknown scheduler %d", (int)d->scheduler);
  if ((int64_t)m * sk__pipe_chunks(d) > 1 << 24)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: micro_size %d x %d chunks is too many actions", m,
                    sk__pipe_chunks(d));
  if (d->scheduler == SK_PIPE_ZERO_BUBBLE_V && d->interleave > 1 && d->interleave != 2)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "pipeline: zero_bubble_v places 2 chunks per stage; interleave %d is not 2", d->interleave);
  if (d->scheduler == SK_PIPE_1F1B && m < p)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "pipeline: the 1f1b scheduler needs micro_size >= stages; micro_size %d < stages %d", m, p);
  if (d->scheduler == SK_PIPE_1F1B && d->interleave > 1 && m % p != 0)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                    "pipeline: interleaved 1f1b needs micro_size a multiple of stages; %d is not a multiple of %d", m,
                    p);
  return SK_OK;
}

/* ---- building the lists ------------------------------------------------------------------- */

typedef struct sk__pipe_list {
  sk_pipe_action *a;
  int n, cap;
  int limit; /* actions of micro-batches >= limit are dropped (zero_bubble_v's padding) */
} sk__pipe_list;

static void sk__pipe_push(sk__pipe_list *l, sk_pipe_kind kind, int micro, int chunk) {
  if (micro >= l->limit || l->n >= l->cap) return;
  sk_pipe_action act = {kind, micro, chunk};
  l->a[l->n++] = act;
}

static void sk__pipe_gpipe(sk__pipe_list *l, int m, int v) {
  for (int c = 0; c < v; c++)
    for (int i = 0; i < m; i++) sk__pipe_push(l, SK_PIPE_F, i, c);
  for (int c = v - 1; c >= 0; c--)
    for (int i = 0; i < m; i++) sk__pipe_push(l, SK_PIPE_B, i, c);
}

/* Megatron's k-th forward (backward: reversed chunk) of an interleaved schedule: groups of g
   micro-batches walk through the chunks in order. */
static sk_pipe_action sk__pipe_interleaved_at(int k, int g, int v, bool backward) {
  int group = k / (g * v), within = k % (g * v);
  int chunk = within / g, micro = group * g + within % g;
  sk_pipe_action a = {backward ? SK_PIPE_B : SK_PIPE_F, micro, backward ? v - 1 - chunk : chunk};
  return a;
}

/* 1f1b for one stage s: warm-up forwards, then one forward and one backward, then the drain. */
static void sk__pipe_1f1b(sk__pipe_list *l, int p, int m, int v, int s) {
  int total = m * v;
  int warm = v == 1 ? p - s - 1 : 2 * (p - s - 1) + (v - 1) * p;
  if (warm > total) warm = total;
  int f = 0, b = 0;
  for (; f < warm; f++) {
    sk_pipe_action a = sk__pipe_interleaved_at(f, p, v, false);
    sk__pipe_push(l, a.kind, a.micro, a.chunk);
  }
  for (; f < total; f++, b++) {
    sk_pipe_action a = sk__pipe_interleaved_at(f, p, v, false), z = sk__pipe_interleaved_at(b, p, v, true);
    sk__pipe_push(l, a.kind, a.micro, a.chunk);
    sk__pipe_push(l, z.kind, z.micro, z.chunk);
  }
  for (; b < total; b++) {
    sk_pipe_action z = sk__pipe_interleaved_at(b, p, v, true);
    sk__pipe_push(l, z.kind, z.micro, z.chunk);
  }
}

/* zero_bubble_v for stage s over n >= 2p-1 micro-batches (see the header's description);
   counters f[c], b[c], w[c] are the next micro-batch of each kind on chunk c. */
static void sk__pipe_zbv(sk__pipe_list *l, int p, int n, int s) {
  int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
#define SK__ZB(kind, c, ctr) sk__pipe_push(l, kind, ctr[c]++, c)
  for (int k = 0; k < 2 * (p - s) - 1; k++) SK__ZB(SK_PIPE_F, 0, f);
  for (int k = 0; k < s; k++) SK__ZB(SK_PIPE_F, 1, f), SK__ZB(SK_PIPE_F, 0, f);
  for (int k = 0; k < p - s; k++) SK__ZB(SK_PIPE_F, 1, f), SK__ZB(SK_PIPE_B, 1, b), SK__ZB(SK_PIPE_W, 1, w);
  while (f[1] < f[0] || f[0] < n) {
    if (f[0] < n) SK__ZB(SK_PIPE_F, 0, f);
    SK__ZB(SK_PIPE_B, 0, b), SK__ZB(SK_PIPE_W, 0, w);
    SK__ZB(SK_PIPE_F, 1, f), SK__ZB(SK_PIPE_B, 1, b), SK__ZB(SK_PIPE_W, 1, w);
  }
  for (int k = 0; k < s; k++) SK__ZB(SK_PIPE_B, 0, b), SK__ZB(SK_PIPE_B, 1, b);
  for (int k = 0; k < p - s; k++) SK__ZB(SK_PIPE_B, 0, b), SK__ZB(SK_PIPE_W, 0, w);
  while (w[1] < b[1]) SK__ZB(SK_PIPE_W, 1, w);
  while (w[0] < b[0]) SK__ZB(SK_PIPE_W, 0, w);
#undef SK__ZB
}

SK_API void sk_pipe_schedule_free(sk_pipe_schedule *s) {
  if (!s) return;
  const sk_allocator *a = &s->allocator;
  if (s->actions)
    for (int i = 0; i < s->stages; i++) sk__free(a, s->actions[i]);
  sk__free(a, s->actions);
  sk__free(a, s->count);
  memset(s, 0, sizeof *s);
}

SK_API sk_result sk_pipe_schedule_make(const sk_pipe_desc *d, sk_pipe_schedule *out, sk_error *err) {
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: NULL schedule");
  memset(out, 0, sizeof *out);
  sk_result r = sk_pipe_check(d, err);
  if (r) return r;
  int p = SK__DEF(d->stages, 1), m = SK__DEF(d->micro, 1), v = sk__pipe_chunks(d);
  out->stages = p, out->micro = m, out->chunks = v, out->scheduler = d->scheduler;
  out->split_backward = d->scheduler == SK_PIPE_ZERO_BUBBLE_V;
  out->allocator = d->allocator;
  const sk_allocator *a = &out->allocator;
  int per_stage = m * v * (out->split_backward ? 3 : 2);
  out->count = (int *)sk__calloc(a, (size_t)p * sizeof(int), 0);
  out->actions = (sk_pipe_action **)sk__calloc(a, (size_t)p * sizeof(sk_pipe_action *), 0);
  for (int s = 0; out->count && out->actions && s < p; s++) {
    sk__pipe_list l = {(sk_pipe_action *)sk__calloc(a, (size_t)per_stage * sizeof(sk_pipe_action), 0), 0, per_stage, m};
    if (!l.a) break;
    if (d->scheduler == SK_PIPE_GPIPE) sk__pipe_gpipe(&l, m, v);
    else if (d->scheduler == SK_PIPE_1F1B) sk__pipe_1f1b(&l, p, m, v, s);
    else sk__pipe_zbv(&l, p, m > 2 * p - 1 ? m : 2 * p - 1, s);
    out->actions[s] = l.a, out->count[s] = l.n;
  }
  for (int s = 0; s < p; s++)
    if (!out->count || !out->actions || !out->actions[s]) {
      sk_pipe_schedule_free(out);
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "pipeline: out of memory for %d stages' action lists", p);
    }
  return SK_OK;
}

SK_API int sk_pipe_virtual_stage(const sk_pipe_schedule *s, int stage, int chunk) {
  if (!s || stage < 0 || stage >= s->stages || chunk < 0 || chunk >= s->chunks) return -1;
  if (s->scheduler == SK_PIPE_ZERO_BUBBLE_V) return chunk == 0 ? stage : 2 * s->stages - 1 - stage;
  return chunk * s->stages + stage;
}

SK_API int sk_pipe_stage_of(const sk_pipe_schedule *s, int vstage, int *chunk) {
  if (!s || vstage < 0 || vstage >= s->stages * s->chunks) return -1;
  int p = s->stages, c = vstage / p, stage = vstage % p;
  if (s->scheduler == SK_PIPE_ZERO_BUBBLE_V && c == 1) stage = 2 * p - 1 - vstage;
  if (chunk) *chunk = c;
  return stage;
}

/* "F3", or "F3.1" where stages hold several chunks. */
static int sk__pipe_action_text(const sk_pipe_schedule *s, const sk_pipe_action *a, char *buf, size_t cap) {
  char kind = (unsigned)a->kind <= (unsigned)SK_PIPE_W ? "FBW"[a->kind] : '?';
  if (s->chunks > 1) return snprintf(buf, cap, "%c%d.%d", kind, a->micro, a->chunk);
  return snprintf(buf, cap, "%c%d", kind, a->micro);
}

SK_API size_t sk_pipe_format_stage(const sk_pipe_schedule *s, int stage, char *buf, size_t cap) {
  if (!s || stage < 0 || stage >= s->stages) return 0;
  size_t n = 0;
  for (int k = 0; k < s->count[stage]; k++) {
    char one[40];
    sk__pipe_action_text(s, &s->actions[stage][k], one, sizeof one);
    n += (size_t)snprintf(buf && n < cap ? buf + n : NULL, buf && n < cap ? cap - n : 0, "%s%s", k ? " " : "", one);
  }
  if (buf && cap && s->count[stage] == 0) buf[0] = '\0';
  return n;
}

/* ---- the simulator ------------------------------------------------------------------------- */

/* End times of every (kind, virtual stage, micro) action; < 0: not run yet. */
typedef struct sk__pipe_clock {
  double *end; /* [3][V][m] */
  int V, m;
} sk__pipe_clock;

static double *sk__pipe_end(const sk__pipe_clock *c, sk_pipe_kind k, int vs, int i) {
  return &c->end[((size_t)k * (size_t)c->V + (size_t)vs) * (size_t)c->m + (size_t)i];
}

/* When action a (at virtual stage vs) may start, or -1 while something it waits for has not run.
   `comm` is paid when the producer sits on another stage. */
static double sk__pipe_ready(const sk_pipe_schedule *s, const sk__pipe_clock *c, const sk_pipe_action *a, int vs,
                             double comm) {
  int stage = sk_pipe_stage_of(s, vs, NULL), from = -1;
  sk_pipe_kind dep = a->kind;
  if (a->kind == SK_PIPE_F && vs > 0) from = vs - 1;
  else if (a->kind == SK_PIPE_B) from = vs + 1 < c->V ? vs + 1 : vs, dep = vs + 1 < c->V ? SK_PIPE_B : SK_PIPE_F;
  else if (a->kind == SK_PIPE_W) from = vs, dep = SK_PIPE_B;
  if (from < 0) return 0;
  double t = *sk__pipe_end(c, dep, from, a->micro);
  if (t < 0) return -1;
  return sk_pipe_stage_of(s, from, NULL) == stage ? t : t + comm;
}

static double sk__pipe_cost(const sk_pipe_schedule *s, const sk_pipe_costs *k, sk_pipe_kind kind) {
  if (kind == SK_PIPE_F) return k->f;
  if (kind == SK_PIPE_B) return s->split_backward ? k->b : k->b + k->w;
  return k->w;
}

/* Every stage's list is the work exactly once: F and B (and W when split) of every micro-batch
   on every chunk. */
static sk_result sk__pipe_check_lists(const sk_pipe_schedule *s, sk__pipe_clock *c, sk_error *err) {
  for (int st = 0; st < s->stages; st++)
    for (int k = 0; k < s->count[st]; k++) {
      const sk_pipe_action *a = &s->actions[st][k];
      int vs = sk_pipe_virtual_stage(s, st, a->chunk);
      if (vs < 0 || a->micro < 0 || a->micro >= s->micro || (unsigned)a->kind > (unsigned)SK_PIPE_W ||
          (a->kind == SK_PIPE_W && !s->split_backward))
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: stage %d action %d is not an action of this schedule",
                        st, k);
      double *e = sk__pipe_end(c, a->kind, vs, a->micro);
      char text[32];
      sk__pipe_action_text(s, a, text, sizeof text);
      if (*e == 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: stage %d runs %s twice", st, text);
      *e = 0;
    }
  size_t total = (size_t)3 * (size_t)c->V * (size_t)c->m;
  for (size_t i = 0; i < total; i++) {
    bool needed = i < (size_t)(s->split_backward ? 3 : 2) * (size_t)c->V * (size_t)c->m;
    if (needed && c->end[i] != 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: the lists miss an action (%s of virtual stage %d, micro-batch %d)",
                      i / ((size_t)c->V * (size_t)c->m) == 0 ? "F" : i / ((size_t)c->V * (size_t)c->m) == 1 ? "B" : "W",
                      (int)(i / (size_t)c->m % (size_t)c->V), (int)(i % (size_t)c->m));
    c->end[i] = -1;
  }
  return SK_OK;
}

/* Advances stage st through every action whose inputs are ready; returns how many ran. */
static int sk__pipe_advance(const sk_pipe_schedule *s, const sk_pipe_costs *k, sk__pipe_clock *c, int st, int *next,
                            double *now, int *live, sk_pipe_stats *out) {
  int ran = 0;
  while (next[st] < s->count[st]) {
    const sk_pipe_action *a = &s->actions[st][next[st]];
    int vs = sk_pipe_virtual_stage(s, st, a->chunk);
    double ready = sk__pipe_ready(s, c, a, vs, k->comm);
    if (ready < 0) break;
    double start = ready > now[st] ? ready : now[st], cost = sk__pipe_cost(s, k, a->kind);
    now[st] = start + cost, out->busy[st] += cost;
    *sk__pipe_end(c, a->kind, vs, a->micro) = now[st];
    bool frees = a->kind == (s->split_backward ? SK_PIPE_W : SK_PIPE_B);
    live[st] += a->kind == SK_PIPE_F ? 1 : frees ? -1 : 0;
    if (live[st] > out->peak_live[st]) out->peak_live[st] = live[st];
    next[st]++, ran++;
  }
  return ran;
}

SK_API sk_result sk_pipe_simulate(const sk_pipe_schedule *s, const sk_pipe_costs *k, sk_pipe_stats *out, sk_error *err) {
  if (!s || !k || !out || !s->count || !s->actions || s->stages < 1 || s->stages > SK_PIPE_MAX_STAGES || s->micro < 1 ||
      s->chunks < 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: NULL or empty schedule, costs or stats");
  if (!(k->f >= 0 && k->b >= 0 && k->w >= 0 && k->comm >= 0))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: costs f %g, b %g, w %g, comm %g must be >= 0", k->f, k->b,
                    k->w, k->comm);
  memset(out, 0, sizeof *out);
  int p = s->stages;
  sk__pipe_clock c = {NULL, p * s->chunks, s->micro};
  const sk_allocator *a = &s->allocator;
  c.end = (double *)sk__alloc(a, (size_t)3 * (size_t)c.V * (size_t)c.m * sizeof(double), 0);
  int *next = (int *)sk__calloc(a, (size_t)p * sizeof(int), 0), *live = (int *)sk__calloc(a, (size_t)p * sizeof(int), 0);
  double *now = (double *)sk__calloc(a, (size_t)p * sizeof(double), 0);
  sk_result r = c.end && next && live && now ? SK_OK
                                             : sk__fail(err, SK_ERR_OUT_OF_MEMORY, "pipeline: out of memory simulating");
  if (!r) {
    for (size_t i = 0; i < (size_t)3 * (size_t)c.V * (size_t)c.m; i++) c.end[i] = 1;
    r = sk__pipe_check_lists(s, &c, err);
  }
  for (int ran = 1; !r && ran;) {
    ran = 0;
    for (int st = 0; st < p; st++) ran += sk__pipe_advance(s, k, &c, st, next, now, live, out);
  }
  for (int st = 0; !r && st < p; st++) {
    if (next[st] < s->count[st]) {
      char text[32];
      sk__pipe_action_text(s, &s->actions[st][next[st]], text, sizeof text);
      r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: stage %d is stuck at %s: what it waits for never runs", st,
                   text);
    }
    if (now[st] > out->makespan) out->makespan = now[st];
  }
  out->ideal = (double)s->micro * s->chunks * (k->f + k->b + k->w);
  out->bubble_fraction = !r && out->makespan > 0 ? (out->makespan - out->ideal) / out->makespan : 0;
  sk__free(a, c.end), sk__free(a, next), sk__free(a, live), sk__free(a, now);
  return r;
}

SK_API double sk_pipe_bubble_formula(const sk_pipe_desc *d) {
  if (!d || sk_pipe_check(d, NULL)) return -1;
  double p = SK__DEF(d->stages, 1), m = SK__DEF(d->micro, 1), v = sk__pipe_chunks(d);
  if (d->scheduler == SK_PIPE_ZERO_BUBBLE_V) return m >= 2 * p - 1 ? (p - 1) / (6 * m + p - 1) : -1;
  return (p - 1) / (v * m + p - 1);
}

/* ---- the balanced cut ---------------------------------------------------------------------- */

/* Whether weights fit into k parts of at most `cap` each (greedy, left to right); fills part_of.
   A part also closes when the items left are no more than the parts left, so that no part is
   empty while there are items for it (closing early never raises the heaviest part). */
static bool sk__pipe_fits(const double *w, int n, int k, double cap, int *part_of) {
  int part = 0, in_part = 0;
  double load = 0;
  for (int i = 0; i < n; i++) {
    if (in_part > 0 && (load + w[i] > cap || n - i <= k - 1 - part)) part++, load = 0, in_part = 0;
    if (part >= k || w[i] > cap) return false;
    load += w[i], in_part++;
    if (part_of) part_of[i] = part;
  }
  return true;
}

SK_API sk_result sk_pipe_partition(const double *w, int n, int k, int *part_of, sk_error *err) {
  if (!w || !part_of || n < 0 || k < 1)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: partition needs weights, an output and k >= 1 (n %d, k %d)",
                    n, k);
  double total = 0, most = 0;
  for (int i = 0; i < n; i++) {
    if (!(w[i] >= 0)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "pipeline: weight %d (%g) must be >= 0", i, w[i]);
    total += w[i], most = w[i] > most ? w[i] : most;
  }
  /* The lightest heaviest part lies in [most, total]: bisect on it (the greedy fill decides a
     cap exactly), then fill with the cap found. 100 halvings reach a double's resolution. */
  double lo = most, hi = total;
  for (int it = 0; it < 100 && hi > lo; it++) {
    double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (sk__pipe_fits(w, n, k, mid, NULL)) hi = mid;
    else lo = mid;
  }
  double cap = sk__pipe_fits(w, n, k, lo, NULL) ? lo : hi;
  (void)sk__pipe_fits(w, n, k, cap, part_of);
  return SK_OK;
}

/* ---- stage queries ------------------------------------------------------------------------- */

/* The map checked, and the first device position of every stage in first[0..nstages]. */
static sk_result sk__stage_layout(const sk_stage_map *m, int *first, sk_error *err) {
  if (!m) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: the stage map is NULL");
  if (m->ndevices < 1 || m->ndevices > SK_MAX_DEVICES)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: %d devices; allowed 1..%d", m->ndevices, SK_MAX_DEVICES);
  if (m->nstages < 1 || m->nstages > SK_PIPE_MAX_STAGES || m->nstages > m->ndevices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: %d stages for %d devices; allowed 1..%d", m->nstages,
                    m->ndevices, m->ndevices < SK_PIPE_MAX_STAGES ? m->ndevices : SK_PIPE_MAX_STAGES);
  if (!m->stage_sizes && m->ndevices % m->nstages)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: %d devices are not divisible by %d stages", m->ndevices,
                    m->nstages);
  first[0] = 0;
  for (int s = 0; s < m->nstages; s++) {
    int size = m->stage_sizes ? m->stage_sizes[s] : m->ndevices / m->nstages;
    if (size < 1 || size > m->ndevices - first[s])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: stage %d holds %d devices; %d are left for it", s, size,
                      m->ndevices - first[s]);
    first[s + 1] = first[s] + size;
  }
  if (first[m->nstages] != m->ndevices)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: the stage sizes add up to %d, not the %d devices",
                    first[m->nstages], m->ndevices);
  for (int i = 0; m->devices && i < m->ndevices; i++)
    for (int j = 0; j < i; j++)
      if (m->devices[j] == m->devices[i])
        return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: device %d is listed twice", m->devices[i]);
  return SK_OK;
}

SK_API sk_result sk_stage_devices(const sk_stage_map *m, int stage, int *out, int cap, int *n, sk_error *err) {
  int first[SK_PIPE_MAX_STAGES + 1];
  sk_result r = sk__stage_layout(m, first, err);
  if (r) return r;
  if (!out || !n) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: out and n are required");
  if (stage < 0 || stage >= m->nstages)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: stage %d of %d stages", stage, m->nstages);
  int count = first[stage + 1] - first[stage];
  if (count > cap) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: stage %d holds %d devices; out holds %d", stage, count, cap);
  for (int i = 0; i < count; i++) out[i] = m->devices ? m->devices[first[stage] + i] : first[stage] + i;
  *n = count;
  return SK_OK;
}

SK_API sk_result sk_stage_of_device(const sk_stage_map *m, int device, int *stage, int *index, sk_error *err) {
  int first[SK_PIPE_MAX_STAGES + 1];
  sk_result r = sk__stage_layout(m, first, err);
  if (r) return r;
  if (!stage) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: stage (the output) is NULL");
  int pos = m->devices ? -1 : (device >= 0 && device < m->ndevices ? device : -1);
  for (int i = 0; m->devices && i < m->ndevices && pos < 0; i++)
    if (m->devices[i] == device) pos = i;
  if (pos < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: device %d is not in the device list", device);
  int s = 0;
  while (s + 1 < m->nstages && first[s + 1] <= pos) s++;
  *stage = s;
  if (index) *index = pos - first[s];
  return SK_OK;
}

SK_API sk_result sk_stage_peers(const sk_stage_map *m, int device, int *next, int *prev, sk_error *err) {
  int stage, index, first[SK_PIPE_MAX_STAGES + 1];
  sk_result r = sk_stage_of_device(m, device, &stage, &index, err);
  if (r) return r;
  (void)sk__stage_layout(m, first, NULL);
  if (!next || !prev) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "stages: next and prev are required");
  for (int s = 1; s < m->nstages; s++)
    if (first[s + 1] - first[s] != first[1])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "stages: stage %d holds %d devices and stage 0 %d; pipeline peers need equal stages", s,
                      first[s + 1] - first[s], first[1]);
  int at_next = stage + 1 < m->nstages ? first[stage + 1] + index : -1;
  int at_prev = stage > 0 ? first[stage - 1] + index : -1;
  *next = at_next < 0 ? -1 : m->devices ? m->devices[at_next] : at_next;
  *prev = at_prev < 0 ? -1 : m->devices ? m->devices[at_prev] : at_prev;
  return SK_OK;
}

SK_EXTERN_C_END
#endif /* SK_PIPELINE_IMPL */
