/* sim_report.h -- what sk-sim prints with --report and --dump-program: each device's memory
   (MindSpore's "dry run": does the strategy fit?), the communication and FLOPs of a step as the
   runtime counted them, and, under a link model, the modelled step time. Everything printed is
   read off the run (sk_runtime_memory_get, sk_runtime_stats_get, the world's virtual clock),
   never estimated beside it. */
#ifndef SK_TOOLS_SIM_REPORT_H
#define SK_TOOLS_SIM_REPORT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"

/* One device's figures after training. */
typedef struct sim_device_figures {
  sk_runtime_memory mem;
  sk_runtime_stats stats;
} sim_device_figures;

/* Every device's figures into `all` on device 0 (collective; `all` is read only there). */
static sk_result sim_collect_figures(sk_comm *c, const sk_runtime *rt, sim_device_figures *all, sk_error *err) {
  sim_device_figures mine;
  memset(&mine, 0, sizeof mine);
  sk_runtime_memory_get(rt, &mine.mem);
  sk_runtime_stats_get(rt, &mine.stats);
  return sk_gather(c, &mine, sk_comm_rank(c) == 0 ? all : NULL, sizeof mine, SK_U8, 0, err);
}

static void sim_print_memory(FILE *f, const sim_device_figures *all, int n) {
  fprintf(f, "memory (bytes per device)\n");
  fprintf(f, "%6s %14s %14s %14s %14s %14s %14s %14s %14s %14s\n", "device", "parameters", "gradients", "optimizer",
          "activations", "communication", "total", "peak_params", "peak_total", "peak_acts");
  for (int d = 0; d < n; d++) {
    const sk_runtime_memory *m = &all[d].mem;
    unsigned long long total = m->parameters + m->gradients + m->optimizer_state + m->activations + m->communication;
    fprintf(f, "%6d %14llu %14llu %14llu %14llu %14llu %14llu %14llu %14llu %14llu\n", d, (unsigned long long)m->parameters,
            (unsigned long long)m->gradients, (unsigned long long)m->optimizer_state,
            (unsigned long long)m->activations, (unsigned long long)m->communication, total,
            (unsigned long long)m->peak_parameters, (unsigned long long)m->peak, (unsigned long long)m->peak_activations);
  }
}

static void sim_print_comm(FILE *f, const sk_runtime_stats *st) {
  double steps = st->steps ? (double)st->steps : 1;
  fprintf(f, "communication per step (device 0)\n");
  fprintf(f, "%-16s %6s %10s %14s %10s\n", "kind", "group", "calls", "bytes", "plan_group");
  for (int i = 0; i < st->nrows; i++) {
    const sk_runtime_comm_row *row = &st->rows[i];
    fprintf(f, "%-16s %6d %10.2f %14.0f %9s%d\n", row->kind == SK_COLL_NONE ? "Redistribution" : sk_coll_kind_name(row->kind),
            row->group, (double)row->calls / steps, (double)row->bytes / steps, "g", row->group_id);
  }
  if (!st->nrows) fprintf(f, "(none)\n");
}

/* Memory per device, device 0's communication and FLOPs per step: what --report and
   --dry-run print alike. */
static void sim_print_figures(FILE *f, const sim_device_figures *all, int n) {
  sim_print_memory(f, all, n);
  sim_print_comm(f, &all[0].stats);
  double steps = all[0].stats.steps ? (double)all[0].stats.steps : 1;
  fprintf(f, "compute per step (device 0): %.6g GFLOP\n", all[0].stats.flops / steps / 1e9);
}

/* The report: the figures, and the modelled step time when a link model ran (the runtime's
   step_us, the same on every device, per step). */
static void sim_print_report(FILE *f, const sim_device_figures *all, int n, const sk_cluster *cluster) {
  const sk_link_model *link = &cluster->link;
  sim_print_figures(f, all, n);
  double steps = all[0].stats.steps ? (double)all[0].stats.steps : 1;
  if (link->gbps > 0)
    fprintf(f, "modelled step time: %.3f ms (links %g us, %g GB/s; devices %g TFLOPS)\n", all[0].stats.step_us / steps / 1e3,
            link->alpha_us, link->gbps, cluster->device_flops * 1e-12);
}

/* A pipeline's time per device: its stage, the share of its steps' wall time spent in kernels
   (the rest waited: the bubble, measured), and under a link model the bubble on the virtual
   clocks (1 - compute / step span), beside the schedule's formula and its simulation with
   equal chunks and the measured F / B split. */
static void sim_print_pipeline(FILE *f, const sim_device_figures *all, int n, const sk_parallel_plan *plan, bool modelled) {
  sk_pipe_desc d = plan->desc.pipeline;
  fprintf(f, "pipeline: %d stages x %d devices, %d micro-batches, %s, %d chunk%s per stage\n", plan->stages,
          plan->desc.ndevices, plan->micro, sk_pipe_scheduler_name(d.scheduler), plan->schedule.chunks,
          plan->schedule.chunks > 1 ? "s" : "");
  fprintf(f, "%6s %6s %12s %12s %16s\n", "device", "stage", "busy_ms", "step_ms", modelled ? "modelled_bubble" : "");
  for (int i = 0; i < n; i++) {
    const sk_runtime_stats *st = &all[i].stats;
    double steps = st->steps ? (double)st->steps : 1;
    fprintf(f, "%6d %6d %12.3f %12.3f", i, sk_parallel_stage_of_rank(plan, i), st->busy_s * 1e3 / steps, st->step_s * 1e3 / steps);
    if (modelled) fprintf(f, " %16.4f", st->clock_us > 0 ? 1 - st->compute_us / st->clock_us : 0);
    fprintf(f, "\n");
  }
  sk_pipe_stats sim;
  sk_pipe_costs c = {1, 2, 0, 0};
  if (plan->schedule.split_backward) c.b = 1, c.w = 1;
  double formula = sk_pipe_bubble_formula(&d);
  if (!sk_pipe_simulate(&plan->schedule, &c, &sim, NULL))
    fprintf(f, "bubble: formula %s%.4f, simulated %.4f (equal chunks, backward = 2 x forward)\n", formula < 0 ? "n/a " : "",
            formula < 0 ? 0 : formula, sim.bubble_fraction);
}

/* --dump-program: device `rank`'s program. */
static void sim_print_program(FILE *f, const sk_parallel_plan *plan, int rank) {
  size_t n = sk_parallel_format_program(plan, rank, NULL, 0) + 1;
  char *buf = (char *)malloc(n);
  if (!buf) {
    fprintf(stderr, "out of memory printing the program\n");
    return;
  }
  sk_parallel_format_program(plan, rank, buf, n);
  fputs(buf, f);
  free(buf);
}

/* Room for the longest stage line of a schedule ("F12.1 " per action at most). */
static size_t sim_schedule_line_cap(const sk_pipe_schedule *s) {
  size_t most = 1;
  for (int st = 0; st < s->stages; st++)
    if (sk_pipe_format_stage(s, st, NULL, 0) + 1 > most) most = sk_pipe_format_stage(s, st, NULL, 0) + 1;
  return most;
}

#endif /* SK_TOOLS_SIM_REPORT_H */
