/* sim_dryrun.h -- sk-sim --dry-run: the compiled plan's step on every device with no data, no
   world and no threads (sk_dryrun.h), printed in --report's sections (sim_report.h): memory per
   device after one step, device 0's communication and compute per step. Any device count the
   compiler accepts: nothing runs on the devices. The modelled step time is not part of it yet
   (docs/sk-sim.md, "Dry run"). */
#ifndef SK_TOOLS_SIM_DRYRUN_H
#define SK_TOOLS_SIM_DRYRUN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "shardkit.h"
#include "sim_report.h"

/* Every device of `plan` dry-run and the report printed to f; *fig holds the figures (fig->dev
   is the caller's to free, also on failure). 0, or -1 with msg written. */
static int sim_dry_run(FILE *f, const sk_parallel_plan *plan, double compile_ms, sim_run_figures *fig, char *msg, size_t cap) {
  int n = plan->world_devices;
  sim_device_figures *all = (sim_device_figures *)calloc((size_t)n, sizeof *all);
  sk_dryrun_device *dev = (sk_dryrun_device *)malloc(sizeof *dev);
  int rc = all && dev ? 0 : (snprintf(msg, cap, "dry run: out of memory for %d devices", n), -1);
  for (int d = 0; d < n && !rc; d++) {
    sk_error e;
    if (sk_dryrun_device_run(plan, d, dev, &e)) rc = (snprintf(msg, cap, "device %d: %s", d, e.msg), -1);
    else all[d].mem = dev->after, all[d].stats = dev->stats;
  }
  fig->dev = all, fig->n = n, fig->plan = plan;
  fig->step_time_ms = NAN; /* the dry run's modelled step time: not modelled yet (null) */
  if (!rc) {
    fprintf(f, "# dry run: %d device%s, %s, compiled in %.3f ms; one training step, nothing executed\n", n, n > 1 ? "s" : "",
            sk_dtype_name(plan->desc.dtype), compile_ms);
    rc = sim_print_figures(f, plan, all, n, msg, cap);
  }
  free(dev);
  return rc;
}

#endif /* SK_TOOLS_SIM_DRYRUN_H */
