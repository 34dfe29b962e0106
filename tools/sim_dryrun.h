/* sim_dryrun.h -- sk-sim --dry-run: the compiled plan's step on each device class's first device
   with no data, no world and no threads (sk_dryrun.h), printed in --report's sections
   (sim_report.h): memory per class after one step, device 0's communication and compute per step. Any device count the
   compiler accepts: nothing runs on the devices. Under a cluster model, the modelled step time
   of every device's program walked together on virtual clocks (sk_dryrun_step_time), or a
   warning naming what it cannot model yet (docs/sk-sim.md, "Dry run"). */
#ifndef SK_TOOLS_SIM_DRYRUN_H
#define SK_TOOLS_SIM_DRYRUN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "shardkit.h"
#include "sim_report.h"

/* The modelled step time's line (a priced cluster's), into fig too. 0, or -1 with msg written. */
static int sim_dry_step_time(FILE *f, const sk_parallel_plan *plan, sim_run_figures *fig, char *msg, size_t cap) {
  sk_dryrun_time t = {0, 0, NULL, NULL};
  sk_error e;
  sk_result r = sk_dryrun_step_time(plan, &t, &e);
  if (r) return snprintf(msg, cap, "dry run's step time: %s", e.msg), -1;
  fig->step_time_ms = t.step_us / 1e3;
  sim_print_step_time(f, t.step_us, &plan->desc.cluster);
  return 0;
}

/* Each class's first device dry-run into per_class[c]; classes whose first ranks follow one
   another are walked in one call (sk_dryrun_devices_run shares its FLOPs table over a call). */
static int sim_dry_classes(const sk_parallel_plan *plan, const sim_classes *k, sim_device_figures *per_class, char *msg,
                           size_t cap) {
  sk_dryrun_device *dev = (sk_dryrun_device *)malloc(sizeof *dev * ((size_t)k->n + 1));
  if (!dev) return snprintf(msg, cap, "dry run: out of memory for %d classes", k->n), -1;
  sk_error e;
  int rc = 0;
  for (int c = 0; c < k->n && !rc;) {
    int run = 1; /* classes are numbered by first rank: a run of consecutive first ranks */
    while (c + run < k->n && sim_class_first(k, c + run) == sim_class_first(k, c) + run) run++;
    if (sk_dryrun_devices_run(plan, sim_class_first(k, c), run, &dev[c], &e)) rc = (snprintf(msg, cap, "%s", e.msg), -1);
    c += run;
  }
  for (int c = 0; c < k->n && !rc; c++) per_class[c].mem = dev[c].after, per_class[c].stats = dev[c].stats;
  free(dev);
  return rc;
}

/* `plan` dry-run, each device class once (sim_classes.h; *cls is the caller's to free), and the
   report printed to f; *fig holds the figures (fig->dev is the caller's to free, also on
   failure). 0, or -1 with msg written. */
static int sim_dry_run(FILE *f, const sk_parallel_plan *plan, double compile_ms, sim_classes *cls, sim_run_figures *fig,
                       char *msg, size_t cap) {
  int n = plan->world_devices;
  fig->dev = NULL, fig->n = n, fig->cls = cls, fig->plan = plan;
  fig->step_time_ms = NAN; /* JSON null until the step time is modelled below */
  int rc = sim_classes_build(plan, cls, msg, cap);
  if (!rc && !(fig->dev = (sim_device_figures *)calloc((size_t)cls->n + 1, sizeof *fig->dev)))
    rc = (snprintf(msg, cap, "dry run: out of memory for %d classes", cls->n), -1);
  if (!rc) rc = sim_dry_classes(plan, cls, fig->dev, msg, cap);
  if (!rc) {
    fprintf(f, "# dry run: %d device%s in %d class%s, %s, compiled in %.3f ms; one training step, nothing executed\n", n,
            n > 1 ? "s" : "", cls->n, cls->n > 1 ? "es" : "", sk_dtype_name(plan->desc.dtype), compile_ms);
    rc = sim_print_figures(f, fig, msg, cap);
  }
  if (!rc && sk_cluster_prices(&plan->desc.cluster)) rc = sim_dry_step_time(f, plan, fig, msg, cap);
  return rc;
}

/* The dry run's last line: `seconds` of wall time and the process's peak resident set
   (getrusage's ru_maxrss, KiB on Linux) in whole MiB, so a large world's cost shows at a glance. */
static void sim_dry_summary(FILE *f, double seconds) {
  struct rusage ru;
  long mib = getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_maxrss / 1024;
  fprintf(f, "dry run: %.3f s, peak RSS %ld MiB\n", seconds, mib);
}

#endif /* SK_TOOLS_SIM_DRYRUN_H */
