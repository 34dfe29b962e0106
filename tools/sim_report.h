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
#include "sim_classes.h"

/* One device's figures after training. */
typedef struct sim_device_figures {
  sk_runtime_memory mem;
  sk_runtime_stats stats;
} sim_device_figures;

/* What the report, --report-json and --device-memory's fit check read, executed or dry: each
   device class's figures (its first device's; sim_classes.h) and the plan they ran. */
typedef struct sim_run_figures {
  sim_device_figures *dev; /* [cls->n]: class by class */
  int n;                   /* devices */
  const sim_classes *cls;
  const sk_parallel_plan *plan;
  /* The modelled step time in ms, NAN when there is none (JSON null): an executed run's
     stats.step_us per step under a cluster that prices communication; the dry run's is set in
     sim_dry_run, the one place to fill once the dry run models time. */
  double step_time_ms;
} sim_run_figures;

/* The kinds of device memory by their report names, and a device's peak of each: what
   peak_total is the peak of the sum of (host, the library's bookkeeping, is held apart). */
#define SIM_DEVICE_KINDS 5
static const char *sim_kind_name(int k) {
  static const char *const names[SIM_DEVICE_KINDS] = {"parameters", "gradients", "optimizer", "activations", "communication"};
  return names[k];
}
static uint64_t sim_kind_peak(const sk_runtime_memory *m, int k) {
  const uint64_t peaks[SIM_DEVICE_KINDS] = {m->peak_parameters, m->peak_gradients, m->peak_optimizer_state, m->peak_activations,
                                            m->peak_communication};
  return peaks[k];
}

/* Every device's figures into `all` on device 0 (collective; `all` is read only there). */
static sk_result sim_collect_figures(sk_comm *c, const sk_runtime *rt, sim_device_figures *all, sk_error *err) {
  sim_device_figures mine;
  memset(&mine, 0, sizeof mine);
  sk_runtime_memory_get(rt, &mine.mem);
  sk_runtime_stats_get(rt, &mine.stats);
  return sk_gather(c, &mine, sk_comm_rank(c) == 0 ? all : NULL, sizeof mine, SK_U8, 0, err);
}

/* Whether two devices' figures agree in all that a class reports: every memory counter and
   peak, the FLOPs, the steps and the communication rows (not the wall or virtual times). */
static bool sim_figures_equal(const sim_device_figures *a, const sim_device_figures *b) {
  const sk_runtime_stats *x = &a->stats, *y = &b->stats;
  if (memcmp(&a->mem, &b->mem, sizeof a->mem) || x->steps != y->steps || x->flops != y->flops || x->nrows != y->nrows) return false;
  for (int i = 0; i < x->nrows; i++) {
    const sk_runtime_comm_row *p = &x->rows[i], *q = &y->rows[i];
    if (p->kind != q->kind || p->group != q->group || p->group_id != q->group_id || p->calls != q->calls || p->bytes != q->bytes)
      return false;
  }
  return true;
}

/* An executed run's class figures: each class's first device's, after checking that every
   member's equal them (a class is equal by construction; a member that is not is a bug in the
   classes' key, said rather than hidden). per_class[cls->n] is the caller's. 0, or -1 with msg. */
static int sim_class_figures(const sim_classes *k, const sim_device_figures *all, sim_device_figures *per_class, char *msg,
                             size_t cap) {
  for (int c = 0; c < k->n; c++) {
    int first = sim_class_first(k, c);
    per_class[c] = all[first];
    for (int i = k->start[c] + 1; i < k->start[c + 1]; i++)
      if (!sim_figures_equal(&all[first], &all[k->order[i]]))
        return snprintf(msg, cap, "report: device %d's figures differ from device %d's, the first of its class %d", k->order[i],
                        first, c),
               -1;
  }
  return 0;
}

/* One row per class, named "class C (devices R)" (R: sim_class_ranks_text). */
static void sim_print_memory(FILE *f, const sim_run_figures *fig) {
  fprintf(f, "memory (bytes per device, one row per device class)\n");
  fprintf(f, "%-32s %14s %14s %14s %14s %14s %14s %14s %14s %14s\n", "class", "parameters", "gradients", "optimizer",
          "activations", "communication", "total", "peak_params", "peak_total", "peak_acts");
  for (int c = 0; c < fig->cls->n; c++) {
    const sk_runtime_memory *m = &fig->dev[c].mem;
    unsigned long long total = m->parameters + m->gradients + m->optimizer_state + m->activations + m->communication;
    char ranks[64], name[96];
    sim_class_ranks_text(fig->cls, c, ranks, sizeof ranks);
    snprintf(name, sizeof name, "class %d (devices %s)", c, ranks);
    fprintf(f, "%-32s %14llu %14llu %14llu %14llu %14llu %14llu %14llu %14llu %14llu\n", name, (unsigned long long)m->parameters,
            (unsigned long long)m->gradients, (unsigned long long)m->optimizer_state,
            (unsigned long long)m->activations, (unsigned long long)m->communication, total,
            (unsigned long long)m->peak_parameters, (unsigned long long)m->peak, (unsigned long long)m->peak_activations);
  }
}

static int sim_int_ascending(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* A row's algorithm: "p2p" for Send/Recv (a pipeline's transfers are Sends); a redistribution's
   moves are this device's sends to its peers, counted as bytes sent rather than as one
   collective's buffer, so "p2p" too; "local" for a group of one or a row that sent nothing (every
   move a local slice); a collective otherwise is priced on its group's ranks (ascending) and
   the cheapest algorithm named (a flat cluster, or none: ring). NULL with msg on failure. */
static const char *sim_row_algorithm(const sk_parallel_plan *plan, int rank, const sk_runtime_comm_row *row, uint64_t per_call,
                                     int *ranks, char *msg, size_t cap) {
  if (row->kind != SK_COLL_NONE && sk_coll_p2p(row->kind)) return "p2p";
  if (row->group <= 1 || (row->kind == SK_COLL_NONE && row->bytes == 0)) return "local";
  if (row->kind == SK_COLL_NONE) return "p2p";
  int n = 0;
  sk_coll_algo algo = SK_ALGO_RING;
  double us = 0;
  sk_error e;
  /* a row counts the whole buffer; AllGather's and ReduceScatter's call counts one member's part */
  if (row->kind == SK_COLL_ALLGATHER || row->kind == SK_COLL_REDUCE_SCATTER) per_call /= (uint64_t)row->group;
  bool listed = !sk_parallel_group_ranks(plan, row->group_id, rank, ranks, plan->world_devices, &n, &e);
  if (listed) qsort(ranks, (size_t)n, sizeof *ranks, sim_int_ascending); /* the pricing takes them ascending */
  if (!listed || sk_cluster_coll_us(&plan->desc.cluster, row->kind, (size_t)per_call, SK_U8, n, ranks, &algo, &us, &e))
    return snprintf(msg, cap, "report: device %d, %s on group g%d: %s", rank, sk_coll_kind_name(row->kind), row->group_id,
                    e.msg), (const char *)NULL;
  return sk_coll_algo_name(algo);
}

/* Device 0's rows, each with the algorithm its calls take on the plan's cluster. 0, or -1 with
   msg written. */
static int sim_print_comm(FILE *f, const sk_parallel_plan *plan, const sk_runtime_stats *st, char *msg, size_t cap) {
  double steps = st->steps ? (double)st->steps : 1;
  int *ranks = (int *)malloc(sizeof(int) * (size_t)plan->world_devices);
  if (!ranks) return snprintf(msg, cap, "report: out of memory for %d ranks", plan->world_devices), -1;
  fprintf(f, "communication per step (device 0)\n");
  fprintf(f, "%-16s %6s %10s %14s %10s %12s\n", "kind", "group", "calls", "bytes", "plan_group", "algorithm");
  for (int i = 0; i < st->nrows; i++) {
    const sk_runtime_comm_row *row = &st->rows[i];
    const char *algo = sim_row_algorithm(plan, 0, row, row->calls ? row->bytes / row->calls : 0, ranks, msg, cap);
    if (!algo) return free(ranks), -1;
    fprintf(f, "%-16s %6d %10.2f %14.0f %9s%d %12s\n", row->kind == SK_COLL_NONE ? "Redistribution" : sk_coll_kind_name(row->kind),
            row->group, (double)row->calls / steps, (double)row->bytes / steps, "g", row->group_id, algo);
  }
  if (!st->nrows) fprintf(f, "(none)\n");
  free(ranks);
  return 0;
}

/* Memory per class, device 0's (class 0's first) communication and FLOPs per step: what
   --report and --dry-run print alike. */
static int sim_print_figures(FILE *f, const sim_run_figures *fig, char *msg, size_t cap) {
  sim_print_memory(f, fig);
  const sk_runtime_stats *st = &fig->dev[0].stats;
  if (sim_print_comm(f, fig->plan, st, msg, cap)) return -1;
  double steps = st->steps ? (double)st->steps : 1;
  fprintf(f, "compute per step (device 0): %.6g GFLOP\n", st->flops / steps / 1e9);
  return 0;
}

/* "modelled step time: X ms (the cluster)": scripts parse the line up to "ms". */
static void sim_print_step_time(FILE *f, double step_us, const sk_cluster *cluster) {
  const sk_link_model *link = &cluster->link;
  const sk_topology *t = &cluster->topology;
  fprintf(f, "modelled step time: %.3f ms (", step_us / 1e3);
  if (t->nodes)
    fprintf(f, "topology %dx%d, intra %g us, %g GB/s, inter %g us, %g GB/s", t->nodes, t->per_node, t->intra.alpha_us,
            t->intra.gbps, t->inter.alpha_us, t->inter.gbps);
  else
    fprintf(f, "links %g us, %g GB/s", link->alpha_us, link->gbps);
  fprintf(f, "; devices %g TFLOPS)\n", cluster->device_flops * 1e-12);
}

/* The report: the figures, and the modelled step time when a link model ran (the runtime's
   step_us, the same on every device, per step). */
static int sim_print_report(FILE *f, const sim_run_figures *fig, char *msg, size_t cap) {
  if (sim_print_figures(f, fig, msg, cap)) return -1;
  const sk_runtime_stats *st = &fig->dev[0].stats;
  double steps = st->steps ? (double)st->steps : 1;
  if (sk_cluster_prices(&fig->plan->desc.cluster)) sim_print_step_time(f, st->step_us / steps, &fig->plan->desc.cluster);
  return 0;
}

/* The schedule's bubble simulated with equal chunks (backward = 2 x forward; zero_bubble_v's B
   and W one each): the pipeline's one bubble figure, which --report prints and --report-json
   gives, the same executed or dry (it reads the schedule, not the clocks). false when the
   simulation refuses the schedule. */
static bool sim_simulated_bubble(const sk_parallel_plan *plan, double *bubble) {
  sk_pipe_stats sim;
  sk_pipe_costs c = {1, 2, 0, 0};
  if (plan->schedule.split_backward) c.b = 1, c.w = 1;
  if (sk_pipe_simulate(&plan->schedule, &c, &sim, NULL)) return false;
  *bubble = sim.bubble_fraction;
  return true;
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
  double formula = sk_pipe_bubble_formula(&d), simulated = 0;
  if (sim_simulated_bubble(plan, &simulated))
    fprintf(f, "bubble: formula %s%.4f, simulated %.4f (equal chunks, backward = 2 x forward)\n", formula < 0 ? "n/a " : "",
            formula < 0 ? 0 : formula, simulated);
}

/* --device-memory's fit check of every class against `limit` bytes, on f (stderr): a class whose
   peak_total is above it "does not fit" (with its largest kind), one above 90% of it is warned
   of; the first few of each, then how many more. A class's devices are named as the report's
   memory rows name them ("A-B" when contiguous). GB are 1e9 bytes, printed with 6 significant
   digits so that a test network's MBs still show; the share with one decimal. true when every
   class fits. */
#define SIM_FIT_LINES 5
static bool sim_fit_check(FILE *f, const sim_run_figures *fig, double limit) {
  int over = 0, near = 0;
  char ranks[64];
  for (int c = 0; c < fig->cls->n; c++) {
    const sk_runtime_memory *m = &fig->dev[c].mem;
    double peak = (double)m->peak;
    if (peak > limit && over++ < SIM_FIT_LINES) {
      int big = 0;
      for (int k = 1; k < SIM_DEVICE_KINDS; k++)
        if (sim_kind_peak(m, k) > sim_kind_peak(m, big)) big = k;
      sim_class_ranks_text(fig->cls, c, ranks, sizeof ranks);
      fprintf(f, "sk-sim: does not fit: class %d (devices %s): peak %.6g GB > %.6g GB (largest: %s %.6g GB)\n", c, ranks,
              peak / 1e9, limit / 1e9, sim_kind_name(big), (double)sim_kind_peak(m, big) / 1e9);
    } else if (peak <= limit && peak > 0.9 * limit && near++ < SIM_FIT_LINES)
      fprintf(f, "sk-sim: warning: class %d at %.1f%% of --device-memory\n", c, 100 * peak / limit);
  }
  if (over > SIM_FIT_LINES) fprintf(f, "sk-sim: ... and %d more classes do not fit\n", over - SIM_FIT_LINES);
  if (near > SIM_FIT_LINES) fprintf(f, "sk-sim: ... and %d more classes above 90%% of --device-memory\n", near - SIM_FIT_LINES);
  return over == 0;
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
