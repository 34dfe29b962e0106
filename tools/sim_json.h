/* sim_json.h -- sk-sim --report-json FILE: the report's figures for programs to read, executed
   or dry (docs/sk-sim.md, "Report JSON"):
     {"devices": N, "classes": [{"id", "devices": [ranks], "memory": {...}, "communication":
      [{"kind", "group_size", "calls", "bytes", "algorithm"}], "flops_per_step"}],
      "step_time_ms", "bubble"}
   Every figure is read off sim_run_figures (the runtime's or the dry run's counts); the only
   thing added is each communication row's algorithm, priced on the plan's cluster model as the
   topology module picks one (sk_cluster_coll_us). Written with jansson, which sk-sim links to
   read networks already. */
#ifndef SK_TOOLS_SIM_JSON_H
#define SK_TOOLS_SIM_JSON_H

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shardkit.h"
#include "sim_report.h"

/* x / steps to the nearest whole: a per-step figure of an executed run over several steps (a
   mean under gradient accumulation, whose window's last micro-step also syncs). */
static json_t *sim_json_per_step(uint64_t x, int64_t steps) {
  uint64_t s = steps > 0 ? (uint64_t)steps : 1;
  return json_integer((json_int_t)((x + s / 2) / s));
}

/* Device `rank`'s rows per step. NULL with msg on failure (msg empty: out of memory). */
static json_t *sim_json_comm(const sk_parallel_plan *plan, int rank, const sk_runtime_stats *st, int *ranks, char *msg, size_t cap) {
  json_t *rows = json_array();
  for (int i = 0; rows && i < st->nrows; i++) {
    const sk_runtime_comm_row *row = &st->rows[i];
    const char *algo = sim_row_algorithm(plan, rank, row, row->calls ? row->bytes / row->calls : 0, ranks, msg, cap);
    json_t *o = algo ? json_pack("{s:s, s:i, s:o, s:o, s:s}", "kind", row->kind == SK_COLL_NONE ? "redistribution" : sk_coll_kind_name(row->kind),
                                 "group_size", row->group, "calls", sim_json_per_step(row->calls, st->steps), "bytes",
                                 sim_json_per_step(row->bytes, st->steps), "algorithm", algo)
                      : NULL;
    if (!o || json_array_append_new(rows, o)) json_decref(rows), rows = NULL;
  }
  return rows;
}

/* Class `c`: all its ranks, its memory peaks, its first device's rows, its FLOPs. */
static json_t *sim_json_class(const sim_run_figures *fig, int c, int *ranks, char *msg, size_t cap) {
  const sk_runtime_memory *m = &fig->dev[c].mem;
  const sk_runtime_stats *st = &fig->dev[c].stats;
  const sim_classes *k = fig->cls;
  json_t *devices = json_array(), *mem = json_object();
  for (int i = k->start[c]; devices && i < k->start[c + 1]; i++)
    if (json_array_append_new(devices, json_integer(k->order[i]))) json_decref(devices), devices = NULL;
  for (int i = 0; mem && i < SIM_DEVICE_KINDS; i++)
    if (json_object_set_new(mem, sim_kind_name(i), json_integer((json_int_t)sim_kind_peak(m, i)))) json_decref(mem), mem = NULL;
  if (mem && json_object_set_new(mem, "host", json_integer((json_int_t)m->peak_host))) json_decref(mem), mem = NULL;
  if (mem && json_object_set_new(mem, "peak_total", json_integer((json_int_t)m->peak))) json_decref(mem), mem = NULL;
  json_t *comm = mem && devices ? sim_json_comm(fig->plan, sim_class_first(k, c), st, ranks, msg, cap) : NULL;
  if (!comm) return json_decref(mem), json_decref(devices), (json_t *)NULL;
  double steps = st->steps > 0 ? (double)st->steps : 1;
  return json_pack("{s:i, s:o, s:o, s:o, s:f}", "id", c, "devices", devices, "memory", mem, "communication", comm,
                   "flops_per_step", st->flops / steps);
}

/* A figure, or null when there is none (NAN). */
static json_t *sim_json_maybe(double x) { return isnan(x) ? json_null() : json_real(x); }

/* The whole report as a JSON tree. NULL with msg on failure (msg empty: out of memory). */
static json_t *sim_json_report(const sim_run_figures *fig, char *msg, size_t cap) {
  int *ranks = (int *)malloc(sizeof(int) * (size_t)fig->plan->world_devices);
  json_t *classes = ranks ? json_array() : NULL;
  for (int c = 0; classes && c < fig->cls->n; c++) {
    json_t *one = sim_json_class(fig, c, ranks, msg, cap);
    if (!one || json_array_append_new(classes, one)) json_decref(classes), classes = NULL;
  }
  free(ranks);
  double bubble = NAN; /* stays so without a pipeline, or when its simulation refuses the schedule */
  if (fig->plan->vstage) (void)sim_simulated_bubble(fig->plan, &bubble);
  return classes ? json_pack("{s:i, s:o, s:o, s:o}", "devices", fig->n, "classes", classes, "step_time_ms",
                             sim_json_maybe(fig->step_time_ms), "bubble", sim_json_maybe(bubble))
                 : NULL;
}

/* Whether `path` can be written, tried before anything runs so that a long run cannot end in a
   report it has nowhere to put: opened for appending (an existing file keeps its bytes until the
   report replaces them), and removed again when the trial created it. 0, or -1 with msg in
   sim_json_write's words. */
static int sim_json_probe(const char *path, char *msg, size_t cap) {
  bool existed = access(path, F_OK) == 0;
  FILE *f = fopen(path, "a");
  int why = errno;
  if (!f || fclose(f)) return snprintf(msg, cap, "--report-json %s: cannot write: %s", path, strerror(f ? errno : why)), -1;
  if (!existed) remove(path);
  return 0;
}

/* Writes the report to `path` (created or truncated). 0, or -1 with msg naming the file. */
static int sim_json_write(const sim_run_figures *fig, const char *path, char *msg, size_t cap) {
  msg[0] = 0;
  json_t *root = sim_json_report(fig, msg, cap);
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  if (!text) return msg[0] ? -1 : (snprintf(msg, cap, "--report-json %s: out of memory formatting the report", path), -1);
  FILE *f = fopen(path, "w");
  bool good = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  int why = errno;
  if (f && fclose(f) && good) good = false, why = errno;
  free(text);
  if (!good) return snprintf(msg, cap, "--report-json %s: cannot write: %s", path, strerror(why)), -1;
  return 0;
}

#endif /* SK_TOOLS_SIM_JSON_H */
