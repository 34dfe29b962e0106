/* Gradient memory per device with and without a pipeline, on the tutorial network
   (examples/nets/operator_parallel.json, 8 devices, f32 as `sk-sim --report` runs it): the
   runtime's count of gradient bytes after training (sk_runtime_memory.gradients) is exactly
   what the plan says a device needs, derived here from the plan alone:
   - the gradient of every tensor that has one and whose buffer the device keeps: every tensor
     without a pipeline; under one, its stage's parameters (activations' gradients live in the
     micro-batch slots, closed after each B);
   - the gradient of each input an operator here reads in another layout (the kernel's layout);
   - the whole gradient beside an output a forward ReduceScatter cut;
   - the scratch: per input slot k, the largest second gradient an operator here writes at slot
     k (a tensor several operators read; under a pipeline of several micro-batches a parameter,
     whose micro-batches' gradients sum), in the tensor's layout or the kernel's.
   So 2 stages x 4 devices with 2 or 8 micro-batches hold twice their stage's parameters (a sum
   and one scratch: one parameter per MatMul, at slot 1), and one micro-batch once; before, each
   of the SK_OP_MAX_INPUTS scratch slots was as large as the largest gradient any stage needed
   (5x the parameters on stage 0).

   Device threads never assert (the harness records, the test's thread asserts); every threaded
   test has a timeout. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_json.h"
#include "runtime_harness.h"

#define MEM_TIMEOUT (4 * RT_TIMEOUT)

static void load_tutorial(net *n) {
  sk_graph_init(&n->g), n->nin = 0;
  OK(sk_json_load_network("examples/nets/operator_parallel.json", &n->g, E));
  for (int t = 0; t < n->g.ntensors; t++) {
    if (n->g.tensors[t].role != SK_TENSOR_INPUT) continue;
    sk_dtype dt = n->g.tensors[t].dtype;
    n->range[n->nin++] = dt == SK_I32 || dt == SK_I64 ? 10 : 0;
  }
}

static uint64_t layout_bytes(const sk_layout *l, size_t es) {
  int64_t s[SK_MAX_DIMS] = {0}, n = 1;
  sk_layout_slice_shape(l, s);
  for (int d = 0; d < l->ndims; d++) n *= s[d];
  return (uint64_t)n * es;
}

static int readers(const sk_graph *g, int t) {
  int n = 0;
  for (int o = 0; o < g->nops; o++)
    for (int k = 0; k < g->ops[o].ninputs; k++) n += g->ops[o].inputs[k] == t;
  return n;
}

static bool backward_runs(const sk_parallel_plan *p, int o) {
  for (int i = 0; i < p->nsteps; i++)
    if (p->steps[i].kind == SK_PSTEP_BACKWARD && p->steps[i].op == o) return true;
  return false;
}

/* The gradient bytes a device of `stage` holds between steps, from the plan (f32: 4 bytes). */
static uint64_t expected_gradients(const sk_parallel_plan *p, int stage) {
  const sk_graph *g = p->graph;
  const size_t es = 4;
  uint64_t total = 0, scratch[SK_OP_MAX_INPUTS] = {0};
  for (int t = 0; t < g->ntensors; t++) {
    bool here = !p->vstage;
    for (int o = 0; o < g->nops && !here; o++)
      for (int k = 0; k < g->ops[o].ninputs; k++) here |= g->ops[o].inputs[k] == t && sk_parallel_op_on_stage(p, o, stage);
    if (p->tensors[t].needs_grad && here && (!p->vstage || g->tensors[t].role == SK_TENSOR_PARAM))
      total += layout_bytes(&p->tensors[t].layout, es);
  }
  for (int o = 0; o < g->nops; o++) {
    if (!sk_parallel_op_on_stage(p, o, stage)) continue;
    const sk_parallel_op *po = &p->ops[o];
    if (po->plan.fwd.kind == SK_COLL_REDUCE_SCATTER)
      total += layout_bytes(&po->plan.out[0], es) * (uint64_t)sk_mesh_group_size(&po->plan.mesh, po->plan.fwd.axes);
    for (int k = 0; k < g->ops[o].ninputs; k++) {
      int t = g->ops[o].inputs[k];
      if (!p->tensors[t].needs_grad || !sk_exec_differentiable(&g->ops[o], k)) continue;
      uint64_t kernel = layout_bytes(&po->kernel_in[k], es), whole = layout_bytes(&p->tensors[t].layout, es);
      if (po->moved[k]) total += kernel;
      bool param = g->tensors[t].role == SK_TENSOR_PARAM;
      cr_assert(!(p->vstage && !param && readers(g, t) > 1), "the derivation leaves out a pipeline's received gradients");
      bool second = readers(g, t) > 1 || (p->vstage && p->micro > 1 && param);
      if (!second || !backward_runs(p, o)) continue;
      scratch[k] = kernel > scratch[k] ? kernel : scratch[k], scratch[k] = whole > scratch[k] ? whole : scratch[k];
    }
  }
  for (int k = 0; k < SK_OP_MAX_INPUTS; k++) total += scratch[k];
  return total;
}

/* The parameter bytes a device of `stage` holds (f32). */
static uint64_t stage_parameters(const sk_parallel_plan *p, int stage) {
  const sk_graph *g = p->graph;
  uint64_t total = 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (g->tensors[t].role != SK_TENSOR_PARAM) continue;
    bool here = false;
    for (int o = 0; o < g->nops; o++)
      for (int k = 0; k < g->ops[o].ninputs; k++) here |= g->ops[o].inputs[k] == t && sk_parallel_op_on_stage(p, o, stage);
    if (here) total += layout_bytes(&p->tensors[t].layout, 4);
  }
  return total;
}

/* Runs the tutorial on 8 devices with the knobs and checks every device's gradient bytes;
   returns device 0's and its parameters' through *params. */
static uint64_t gradients_on_8(int stages, int micro, sk_pipe_scheduler sched, uint64_t *params) {
  static net n;
  static run R;
  load_tutorial(&n);
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = stages, pd.pipeline.micro = micro, pd.pipeline.scheduler = sched;
  char what[96];
  snprintf(what, sizeof what, "tutorial, 8 devices, %d stages, %d micro-batches", stages, micro);
  run_knobs(&R, &n, 8, SK_F32, n.g.optim, 2, &pd, what);
  for (int d = 0; d < 8; d++) {
    int stage = sk_parallel_stage_of_rank(&R.plan, d);
    uint64_t want = expected_gradients(&R.plan, stage), got = R.dev[d].mem_end.gradients;
    cr_assert_eq(got, want, "%s: device %d (stage %d) holds %llu gradient bytes, the plan needs %llu (parameters %llu)", what, d,
                 stage, (unsigned long long)got, (unsigned long long)want, (unsigned long long)stage_parameters(&R.plan, stage));
    cr_assert_eq(R.dev[d].mem_end.parameters, stage_parameters(&R.plan, stage));
  }
  uint64_t g0 = R.dev[0].mem_end.gradients;
  *params = R.dev[0].mem_end.parameters;
  cr_log_info("%s: device 0 holds %llu parameter and %llu gradient bytes", what, (unsigned long long)*params,
              (unsigned long long)g0);
  run_free(&R);
  sk_graph_free(&n.g);
  return g0;
}

Test(pipeline_memory, gradients_without_a_pipeline, .timeout = MEM_TIMEOUT) {
  uint64_t params = 0;
  uint64_t g = gradients_on_8(0, 0, SK_PIPE_1F1B, &params);
  cr_assert_gt(g, params, "the activations' gradients are kept too");
}

/* With a pipeline: the stage's parameters' gradients and one scratch per weight slot, twice the
   parameters; with one micro-batch, no second gradient and no scratch. */
Test(pipeline_memory, gradients_with_a_pipeline, .timeout = MEM_TIMEOUT) {
  uint64_t params = 0;
  for (int m = 2; m <= 8; m *= 4) {
    uint64_t g = gradients_on_8(2, m, SK_PIPE_1F1B, &params);
    cr_assert_eq(g, 2 * params, "%d micro-batches: stage 0 holds %llu gradient bytes for %llu of parameters", m,
                 (unsigned long long)g, (unsigned long long)params);
  }
  uint64_t g = gradients_on_8(2, 1, SK_PIPE_GPIPE, &params);
  cr_assert_eq(g, params, "one micro-batch: %llu gradient bytes for %llu of parameters", (unsigned long long)g,
               (unsigned long long)params);
}
