/* Layouts on every operator (sk_ops.h, LAYOUTS and OUTPUTS): shard's in_strategy as layouts on
   any operator, and out_strategy (a tuple or layouts) on any output, through the rule, the
   compiler's output redistribution (sk_parallel.h: MoveOut, MoveOutBack) and the runtime.
     - a network with layouts on a ReLU, a BatchMatMul, a LayerNorm and an output layout on a
       MatMul trains on 8 devices as on one (f64);
     - every operator kind takes the layouts its default strategy gives and plans the same (as
       that strategy of its own: Reshape's leaves its output whole);
     - out_strategy as a tuple needs a 2-D MatMul family, as layouts any rank;
     - the operators MindSpore computes from layouts keep tuples of axes; the others refuse a
       layout that is not a strategy's, naming the operator and the input. */
#include <criterion/criterion.h>

#include "runtime_harness.h"

/* A layout from its texts: mesh "dp=2,mp=4", map "dp,None", on a shape. */
static sk_layout lay(const char *mesh, const char *map, int nd, const int64_t *shape) {
  sk_mesh m;
  sk_layout l;
  OK(sk_mesh_parse(&m, mesh, E));
  OK(sk_layout_parse(&l, &m, map, nd, shape, E));
  return l;
}

/* Input k of op takes the layout mesh / map (on the shape of the tensor it reads). */
static void in_layout(const net *n, sk_graph_op *op, int k, const char *mesh, const char *map) {
  const sk_graph_tensor *t = &n->g.tensors[op->inputs[k]];
  op->desc.has_layouts = true;
  op->desc.layouts[k] = lay(mesh, map, t->ndims, t->shape);
}

/* ---- the network: layouts on ReLU, BatchMatMul, LayerNorm; an output layout on MatMul ------ */

#define MESH8 "dp=2,sp=2,mp=2"

/* x [16,4,8] -> BatchMatMul by w1 [8,8] (x "(dp,sp),None,mp", w1 "mp,None": the contraction cut
   by mp, rows by a tuple) -> ReLU ("(dp,sp),mp,None") -> LayerNorm over the last dim (x
   "dp,(sp,mp),None") -> ReduceMean over the sequence -> MatMul by w2 [8,4] ((2,2),(2,2)) whose
   output is asked for rows cut 8 ways, columns whole (neither the AllReduce's nor the
   ReduceScatter's: a MoveOut) -> SoftmaxCrossEntropy. Returns the MatMul's index. */
static int build_layouts_net(net *n) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 3, SH3(16, 4, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w1 = add_param(n, "w1", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  int gamma = add_param(n, "gamma", 1, SH1(8), SK_INIT_UNIFORM, 0.5);
  int beta = add_param(n, "beta", 1, SH1(8), SK_INIT_UNIFORM, 0.5);
  int w2 = add_param(n, "w2", 2, SH2(8, 4), SK_INIT_XAVIER_UNIFORM, 0);
  sk_graph_op bmm = OP("bmm", SK_OP_BATCH_MATMUL, x, w1);
  in_layout(n, &bmm, 0, MESH8, "(dp,sp),None,mp"), in_layout(n, &bmm, 1, MESH8, "mp,None");
  sk_graph_op relu = OP("relu", SK_OP_RELU, add_op(n, bmm));
  in_layout(n, &relu, 0, MESH8, "(dp,sp),mp,None");
  sk_graph_op ln = OP("ln", SK_OP_LAYER_NORM, add_op(n, relu), gamma, beta);
  ln.desc.naxis = 1, ln.desc.axis[0] = 2, ln.epsilon = 1e-5;
  in_layout(n, &ln, 0, MESH8, "dp,(sp,mp),None"), in_layout(n, &ln, 1, MESH8, "None"), in_layout(n, &ln, 2, MESH8, "None");
  sk_graph_op mean = OP("mean", SK_OP_REDUCE_MEAN, add_op(n, ln));
  mean.desc.naxis = 1, mean.desc.axis[0] = 1;
  sk_graph_op mm = OP("fc", SK_OP_MATMUL, add_op(n, mean), w2);
  SHARD(mm, 0, 2, 2), SHARD(mm, 1, 2, 2);
  mm.desc.nout_layouts = 1;
  mm.desc.out_layouts[0] = lay(MESH8, "(dp,sp,mp),None", 2, SH2(16, 4));
  int at = -1;
  int z = add_op_at(n, &mm, &at);
  int loss = add_op(n, OP("loss", SK_OP_SOFTMAX_CE, z, y));
  OK(sk_graph_set_loss(&n->g, loss, E));
  OK(sk_graph_set_eval(&n->g, z, y, E));
  return at;
}

static int steps_of(const sk_parallel_plan *p, sk_parallel_step_kind kind, int op) {
  int k = 0;
  for (int i = 0; i < p->nsteps; i++) k += p->steps[i].kind == kind && p->steps[i].op == op;
  return k;
}

Test(layouts, network_trains_on_8_devices_as_on_one, .timeout = RT_TIMEOUT) {
  static net n;
  static run R;
  int fc = build_layouts_net(&n);
  run_init(&R, &n, 8, SK_F64, sgd(0.5), 6);
  cr_assert_eq(R.plan.nfallbacks, 0);
  const sk_parallel_op *po = &R.plan.ops[fc];
  cr_assert(po->out_moved[0], "fc's output is asked for in another layout");
  cr_assert_eq(po->plan.fwd.kind, SK_COLL_ALLREDUCE);
  cr_assert_eq(steps_of(&R.plan, SK_PSTEP_OUT_MOVE, fc), 1);
  cr_assert_eq(steps_of(&R.plan, SK_PSTEP_OUT_MOVE_BACK, fc), 1);
  /* the loss reads fc's output in the asked layout: rows cut 8 ways, no move of its own */
  int z = n.g.ops[fc].outputs[0];
  cr_assert_eq(sk_layout_split_count(&R.plan.tensors[z].layout, 0), 8);
  cr_assert_eq(sk_layout_split_count(&R.plan.tensors[z].layout, 1), 1);
  cr_assert(!R.plan.ops[fc + 1].moved[0], "the loss reads z as it is");
  /* the element-wise operators kept their tuples of axes */
  const sk_layout *relu_in = &R.plan.ops[1].plan.in[0];
  cr_assert_eq(relu_in->map[0].naxes, 2, "ReLU keeps (dp,sp)");
  cr_assert(sk_layout_same_slices(&R.plan.ops[1].plan.out[0], relu_in));
  errs m = run_against_trainer(&R, "layouts network");
  cr_assert(m.loss <= 1e-9, "relative loss difference %.3g", m.loss);
  cr_log_info("layouts network, 8 devices vs one, f64: losses within %.3g, parameters within %.3g", m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

/* ---- every kind: the layouts its default strategy gives plan as that strategy ---------------- */

static void set_in(sk_op_desc *d, int k, int nd, const int64_t *shape) {
  d->ndims[k] = nd;
  memcpy(d->shape[k], shape, sizeof(int64_t) * (size_t)nd);
  if (k >= d->ninputs) d->ninputs = k + 1;
}
#define IN(d, k, ...) set_in(d, k, (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__})

/* One small case per kind, valid on 8 devices with MindSpore's default strategy. A kind added
   to sk_op_kind without a case fails here. */
static sk_op_desc case_of(sk_op_kind kind) {
  sk_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = kind;
  switch (kind) {
    case SK_OP_MATMUL: IN(&d, 0, 16, 8), IN(&d, 1, 8, 4); break;
    case SK_OP_BATCH_MATMUL: IN(&d, 0, 8, 4, 8), IN(&d, 1, 8, 8, 4); break;
    case SK_OP_DENSE: IN(&d, 0, 16, 8), IN(&d, 1, 4, 8), IN(&d, 2, 4); break;
    case SK_OP_RELU: case SK_OP_GELU: case SK_OP_TANH: case SK_OP_CAST: case SK_OP_DROPOUT: case SK_OP_SOFTMAX:
    case SK_OP_LOG_SOFTMAX: IN(&d, 0, 16, 8); break;
    case SK_OP_L2_NORMALIZE: IN(&d, 0, 16, 8), d.naxis = 1, d.axis[0] = 1; break;
    case SK_OP_ADD: case SK_OP_SUB: case SK_OP_MUL: case SK_OP_DIV: case SK_OP_POW: IN(&d, 0, 16, 8), IN(&d, 1, 8); break;
    case SK_OP_BIAS_ADD: case SK_OP_PRELU: IN(&d, 0, 16, 8), IN(&d, 1, 8); break;
    case SK_OP_LAYER_NORM: IN(&d, 0, 16, 8), IN(&d, 1, 8), IN(&d, 2, 8); break;
    case SK_OP_SOFTMAX_CE: IN(&d, 0, 16, 4), IN(&d, 1, 16); break;
    case SK_OP_SOFTMAX_CE_LOGITS: case SK_OP_MAE_LOSS: IN(&d, 0, 16, 4), IN(&d, 1, 16, 4); break;
    case SK_OP_REDUCE_SUM: case SK_OP_REDUCE_MEAN: case SK_OP_REDUCE_MAX: IN(&d, 0, 16, 8), d.naxis = 1, d.axis[0] = 1; break;
    case SK_OP_FLATTEN: IN(&d, 0, 16, 2, 4); break;
    case SK_OP_TRANSPOSE: IN(&d, 0, 16, 8), d.perm[0] = 1, d.perm[1] = 0, d.has_perm = true; break;
    case SK_OP_RESHAPE:
      IN(&d, 0, 16, 8), d.noutputs = 1, d.out_ndims[0] = 3, d.out_shape[0][0] = 16, d.out_shape[0][1] = 2, d.out_shape[0][2] = 4;
      break;
    case SK_OP_EXPAND_DIMS: IN(&d, 0, 16, 8), d.naxis = 1, d.axis[0] = 1; break;
    case SK_OP_ONE_HOT: IN(&d, 0, 16), d.ninputs = 3, d.depth = 4; break; /* the on and off values: scalars */
    case SK_OP_GATHER: IN(&d, 0, 16, 8), IN(&d, 1, 16); break;
    case SK_OP_GET_NEXT:
      d.noutputs = 2, d.out_ndims[0] = 2, d.out_shape[0][0] = 16, d.out_shape[0][1] = 8;
      d.out_ndims[1] = 1, d.out_shape[1][0] = 16;
      break;
    case SK_OP_VIRTUAL_DATASET: IN(&d, 0, 16, 8), IN(&d, 1, 16); break;
    case SK_OP_TMP_IDENTITY: case SK_OP_SIGMOID: case SK_OP_SILU: case SK_OP_VIRTUAL_LOSS: IN(&d, 0, 16, 8); break;
    case SK_OP_RMS_NORM: IN(&d, 0, 16, 8), IN(&d, 1, 8); break;
    default: cr_assert_fail("no case for %s (kind %d): add one", sk_op_kind_name(kind), (int)kind);
  }
  return d;
}

static sk_op_plan plan8(const sk_op_desc *d, const char *what) {
  sk_op_plan p;
  sk_error e;
  memset(&e, 0, sizeof e);
  cr_assert_eq(sk_op_plan_make(d, 8, &p, &e), SK_OK, "%s: %s", what, e.msg);
  return p;
}

static void expect_same_plan(const sk_op_plan *a, const sk_op_plan *b, const char *what) {
  static char x[8192], y[8192];
  sk_op_plan_format(a, x, sizeof x), sk_op_plan_format(b, y, sizeof y);
  cr_assert_str_eq(x, y, "%s", what);
  cr_assert_eq(b->redistributed, 0u, "%s: nothing to redistribute", what);
}

/* d with the strategy its plan's input layouts read as (each dim's cut). */
static sk_op_desc with_strategy_of(const sk_op_desc *d, const sk_op_plan *p) {
  sk_op_desc s = *d;
  s.has_strategy = true;
  for (int i = 0; i < d->ninputs; i++)
    for (int k = 0; k < d->ndims[i]; k++) s.strategy[i][k] = sk_layout_split_count(&p->in[i], k);
  return s;
}

/* Layouts are an in_strategy of the operator's own: they plan as the strategy they read as,
   which is its default's, except for an operator that follows its input without one (Reshape:
   its own strategy leaves its output whole, master's ReshapeInfo). */
Test(layouts, every_kind_takes_its_default_strategys_layouts) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    sk_op_desc d = case_of((sk_op_kind)k);
    const char *name = sk_op_kind_name((sk_op_kind)k);
    sk_op_plan p = plan8(&d, name);
    sk_op_desc in = d, out = d;
    for (int i = 0; i < d.ninputs; i++) in.layouts[i] = p.in[i];
    in.has_layouts = d.ninputs > 0;
    out.nout_layouts = p.noutputs;
    for (int o = 0; o < p.noutputs; o++) out.out_layouts[o] = p.out[o];
    bool follows = (sk_op_row_of((sk_op_kind)k)->flags & SK_OPF_FOLLOWS_INPUT) != 0;
    sk_op_desc own = with_strategy_of(&d, &p);
    sk_op_plan as_own = follows ? plan8(&own, name) : p;
    if (in.has_layouts) expect_same_plan(&as_own, (sk_op_plan[]){plan8(&in, name)}, name);
    expect_same_plan(&p, (sk_op_plan[]){plan8(&out, name)}, name);
  }
}

/* An asked output the rule does not give is redistributed, for every kind. */
Test(layouts, every_kind_redistributes_an_output_asked_otherwise) {
  for (int k = 0; k < SK_OP_KIND_COUNT; k++) {
    sk_op_desc d = case_of((sk_op_kind)k);
    const char *name = sk_op_kind_name((sk_op_kind)k);
    sk_op_plan p = plan8(&d, name);
    d.nout_layouts = 1;
    sk_mesh m;
    OK(sk_mesh_parse(&m, "all=8", E));
    OK(sk_layout_init(&d.out_layouts[0], &m, p.out[0].ndims, p.out[0].shape, NULL, E)); /* whole on every device */
    sk_op_plan q = plan8(&d, name);
    bool whole = true;
    for (int i = 0; i < p.out[0].ndims; i++) whole = whole && sk_layout_split_count(&p.out[0], i) == 1;
    cr_assert_eq(q.redistributed, whole ? 0u : 1u, "%s: output 0 %s", name, whole ? "is whole already" : "moves");
    if (!whole) cr_assert(sk_layout_same_slices(&q.wanted[0], &d.out_layouts[0]), "%s: the asked layout", name);
  }
}

/* ---- what the layouts path refuses, by name ---------------------------------------------------- */

static void expect_refused(const sk_op_desc *d, const char *why, const char *a, const char *b) {
  sk_op_plan p;
  sk_error e;
  memset(&e, 0, sizeof e);
  cr_assert_eq(sk_op_plan_make(d, 8, &p, &e), SK_ERR_INVALID_ARGUMENT, "%s: accepted", why);
  cr_assert(strstr(e.msg, a) && strstr(e.msg, b), "%s: \"%s\" lacks \"%s\" or \"%s\"", why, e.msg, a, b);
  cr_assert(!strncmp(e.msg, sk_op_kind_name(d->kind), strlen(sk_op_kind_name(d->kind))), "%s: \"%s\" starts with the operator",
            why, e.msg);
}

static void give(sk_op_desc *d, int k, const char *mesh, const char *map) {
  d->has_layouts = true;
  d->layouts[k] = lay(mesh, map, d->ndims[k], d->shape[k]);
}

/* Reshape's layout is a strategy of its own: its output is whole, where without one it keeps
   the cut its input arrives with. */
Test(layouts, reshape_from_a_layout_leaves_its_output_whole) {
  sk_op_desc r = case_of(SK_OP_RESHAPE);
  cr_assert_eq(sk_layout_split_count(&plan8(&r, "Reshape").out[0], 0), 8, "no strategy: dim 0 stays cut");
  give(&r, 0, "a=8", "a,None");
  sk_op_plan p = plan8(&r, "Reshape a,None");
  cr_assert_eq(sk_layout_split_count(&p.in[0], 0), 8);
  cr_assert_eq(sk_layout_split_count(&p.out[0], 0), 1, "its own strategy: the output whole");
}

/* An operator computed from a strategy takes a layout that is one, and refuses the others by
   operator and input. */
Test(layouts, a_strategy_operator_takes_only_a_strategys_layout) {
  sk_op_desc d = case_of(SK_OP_REDUCE_SUM);
  give(&d, 0, "dp=2,mp=4", "dp,mp"); /* (2, 4): the strategy's layout */
  sk_op_plan p = plan8(&d, "ReduceSum dp,mp");
  cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE, "the reduced dim is cut: partial sums");
  give(&d, 0, "dp=2,mp=4", "(dp,mp),None"); /* a tuple whose slices are (8, 1)'s */
  cr_assert_eq(sk_layout_split_count(&plan8(&d, "ReduceSum (dp,mp)").in[0], 0), 8);
  give(&d, 0, "dp=2,mp=4", "(mp,dp),None");
  expect_refused(&d, "a tuple (8, 1) does not place", "input 0 dim 0 is cut by several axes", "(mp,dp)");
  give(&d, 0, "dp=2,mp=4", "mp,None"); /* (4, 1) cuts dim 0 by rank / 2, this layout by rank % 4 */
  expect_refused(&d, "another order of devices", "input 0's layout mp,None on dp=2,mp=4", "computes from a strategy");
}

Test(layouts, refused_forms) {
  sk_op_desc d = case_of(SK_OP_MATMUL);
  give(&d, 0, "dp=2,mp=4", "dp,mp"), give(&d, 1, "dp=4,mp=2", "mp,None");
  expect_refused(&d, "two device matrices", "input 1's device matrix dp=4,mp=2", "input 0's");
  give(&d, 1, "dp=2,mp=4", "None,mp");
  expect_refused(&d, "contraction cut apart", "x's contraction dim (dim 1) is cut by mp", "w's (dim 0) by None");
  give(&d, 1, "dp=2,mp=4", "mp,None");
  d.has_strategy = true;
  expect_refused(&d, "both forms", "in_strategy is given as tuples and as layouts", "MatMul");
  d.has_strategy = false;
  sk_mesh m;
  OK(sk_mesh_parse(&m, "dp=2,mp=4", E));
  OK(sk_layout_init(&d.layouts[1], &m, 1, (const int64_t[]){8}, NULL, E));
  expect_refused(&d, "a layout of another rank", "input 1's layout has 1 dims", "rank-2");
  give(&d, 1, "a=4", "a,None");
  expect_refused(&d, "another device count", "input 1's layout is on 4 devices", "on 8");
  give(&d, 1, "dp=2,mp=4", "mp,None");
  d.nout_layouts = 2;
  expect_refused(&d, "more output layouts than outputs", "2 output layouts", "1 output");
  d.nout_layouts = 1, d.out_layouts[0] = lay("dp=2,mp=4", "dp", 1, (const int64_t[]){16});
  expect_refused(&d, "an output layout of another rank", "output 0's layout has 1 dims", "rank-2");
  d.out_layouts[0] = lay("dp=2,mp=4", "dp,None", 2, (const int64_t[]){16, 4});
  d.has_out_strategy = true, d.out_strategy[0] = 8, d.out_strategy[1] = 1;
  expect_refused(&d, "out_strategy twice", "out_strategy is given as a tuple and as layouts", "give one");
}

/* The native rules: what MindSpore's CheckInputLayout of each refuses. */
Test(layouts, native_rules_refuse_what_mindspore_does) {
  sk_op_desc ln = case_of(SK_OP_LAYER_NORM);
  give(&ln, 0, "dp=2,mp=4", "dp,mp"), give(&ln, 1, "dp=2,mp=4", "mp"), give(&ln, 2, "dp=2,mp=4", "mp");
  expect_refused(&ln, "a normalised dim cut", "input 0 dim 1 is cut by its layout", "begin_norm_axis 1");
  give(&ln, 0, "dp=2,mp=4", "(dp,mp),None"), give(&ln, 1, "dp=2,mp=4", "None"), give(&ln, 2, "dp=2,mp=4", "None");
  sk_op_plan p = plan8(&ln, "LayerNorm (dp,mp)");
  cr_assert_eq(p.out[0].map[0].naxes, 2, "y keeps x's tuple");
  cr_assert_eq(p.out[1].shape[1], 1, "mean [16, 1]");
  ln.ndims[1] = ln.ndims[2] = 2; /* gamma and beta [16, 8]: over the rows too */
  memcpy(ln.shape[1], ln.shape[0], sizeof ln.shape[0]), memcpy(ln.shape[2], ln.shape[0], sizeof ln.shape[0]);
  give(&ln, 0, "dp=2,mp=4", "dp,None"), give(&ln, 1, "dp=2,mp=4", "dp,None"), give(&ln, 2, "dp=2,mp=4", "None,None");
  expect_refused(&ln, "beta cut apart from x", "input 2 dim 0 is cut by None but x's dim 0 by dp", "LayerNorm");

  sk_op_desc sm = case_of(SK_OP_SOFTMAX);
  give(&sm, 0, "dp=2,mp=4", "dp,mp");
  expect_refused(&sm, "the softmax axis cut", "input 0 dim 1 is cut 4 ways", "axis");
  give(&sm, 0, "dp=2,mp=4", "(mp,dp),None"); /* any tuple: the element-wise operators keep it */
  cr_assert_eq(plan8(&sm, "Softmax (mp,dp)").out[0].map[0].axes[0], 1);

  sk_op_desc add = case_of(SK_OP_ADD);
  give(&add, 0, "dp=2,mp=4", "dp,mp"), give(&add, 1, "dp=2,mp=4", "None");
  expect_refused(&add, "y's columns whole against x's cut", "input 1 dim 0 is cut by None but input 0 dim 1 by mp", "Add");
  give(&add, 1, "dp=2,mp=4", "mp");
  p = plan8(&add, "Add broadcast");
  cr_assert_eq(p.out[0].map[0].axes[0], 0, "the output takes x's maps");

  sk_op_desc ba = case_of(SK_OP_BIAS_ADD);
  give(&ba, 0, "dp=2,mp=4", "(mp,dp),None"), give(&ba, 1, "dp=2,mp=4", "mp");
  expect_refused(&ba, "the bias cut apart from the channels", "input 1 dim 0 is cut by mp but x's channels (dim 1) by None", "BiasAdd");
  give(&ba, 1, "dp=2,mp=4", "None");
  cr_assert_eq(plan8(&ba, "BiasAdd (mp,dp)").out[0].map[0].naxes, 2, "y keeps x's tuple");

  sk_op_desc tr = case_of(SK_OP_TRANSPOSE);
  give(&tr, 0, "dp=2,mp=4", "(mp,dp),None");
  p = plan8(&tr, "Transpose (mp,dp)");
  cr_assert(p.out[0].map[0].naxes == 0 && p.out[0].map[1].naxes == 2, "output dim 1 takes input dim 0's tuple");
  cr_assert_eq(p.mirror[0].kind, SK_COLL_NONE, "MindSpore's Transpose declares no Mirror");

  sk_op_desc bmm = case_of(SK_OP_BATCH_MATMUL);
  give(&bmm, 0, "dp=2,mp=4", "dp,None,mp"), give(&bmm, 1, "dp=2,mp=4", "None,mp,None");
  expect_refused(&bmm, "batches cut apart", "batch dim 0 is cut by dp in x but by None in w", "BatchMatMul");
  give(&bmm, 1, "dp=2,mp=4", "dp,mp,None");
  p = plan8(&bmm, "BatchMatMul");
  cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE);
  cr_assert_eq(sk_mesh_group_size(&p.mesh, p.fwd.axes), 4, "the contraction's partial sums over mp");
}

/* RmsNorm from layouts as master's test_layout_extend_rmsnorm.py (x [128,16,32], gamma [32], on
   8): test_layout_layernorm_base's (dp,sp,None),(None) and multi_shard's ((dp,mp),sp,None) (its
   mesh has a fourth axis vp=2 on 16 devices; here on dp,sp,mp) plan,
   y keeping x's layout (tuple too) and rstd [128,16,1]; test_layout_rmsnorm_split_norm_axis's
   (dp,sp,mp),(mp), which master computes through an AllReduce, is refused here (the normalised
   dim whole), and so is gamma cut apart from x (split_norm_axis_mismatch's question). Sigmoid and
   SiLU keep their input's layout, tuples too (ActivationBase). */
Test(layouts, rms_norm_sigmoid_silu_from_layouts) {
  sk_op_desc rn = case_of(SK_OP_RMS_NORM);
  rn.shape[0][0] = 128, rn.shape[0][1] = 16, rn.shape[0][2] = 32, rn.ndims[0] = 3, rn.shape[1][0] = 32;
  give(&rn, 0, MESH8, "dp,sp,None"), give(&rn, 1, MESH8, "None");
  sk_op_plan p = plan8(&rn, "RmsNorm base");
  cr_assert_eq(p.noutputs, 2, "y and rstd");
  cr_assert(sk_layout_same_slices(&p.out[0], &rn.layouts[0]), "y keeps x's layout");
  cr_assert(p.out[1].shape[0] == 128 && p.out[1].shape[1] == 16 && p.out[1].shape[2] == 1, "rstd [128,16,1]");
  cr_assert(sk_layout_split_count(&p.out[1], 0) == 2 && sk_layout_split_count(&p.out[1], 1) == 2, "rstd as x's rows");
  cr_assert_eq(p.fwd.kind, SK_COLL_NONE);
  sk_op_desc multi = rn;
  give(&multi, 0, "dp=2,sp=2,mp=2", "(dp,mp),sp,None"), give(&multi, 1, "dp=2,sp=2,mp=2", "None");
  cr_assert_eq(plan8(&multi, "RmsNorm (dp,mp)").out[0].map[0].naxes, 2, "y keeps x's tuple");
  give(&rn, 0, MESH8, "dp,sp,mp"), give(&rn, 1, MESH8, "mp");
  expect_refused(&rn, "the normalised dim cut", "input 0 dim 2 is cut by its layout", "RmsNorm");
  give(&rn, 0, MESH8, "dp,sp,None"), give(&rn, 1, MESH8, "mp");
  expect_refused(&rn, "gamma cut apart from x", "input 1 dim 0 is cut by mp but x's dim 2 by None", "RmsNorm");

  const sk_op_kind act[2] = {SK_OP_SIGMOID, SK_OP_SILU};
  for (int i = 0; i < 2; i++) {
    sk_op_desc a = case_of(act[i]);
    give(&a, 0, "dp=2,mp=4", "(mp,dp),None");
    p = plan8(&a, sk_op_kind_name(act[i]));
    cr_assert(p.out[0].map[0].naxes == 2 && p.out[0].map[0].axes[0] == 1, "%s keeps x's tuple", sk_op_kind_name(act[i]));
    cr_assert_eq(p.fwd.kind, SK_COLL_NONE);
  }
}

/* The MatMul family's ReduceScatter output, asked as a layout (MatMul::CheckOutputLayout extends
   the output's dim 0 map by x's contraction map), BatchMatMul's along its batch dim. */
Test(layouts, matmul_family_reduce_scatter_from_an_output_layout) {
  sk_op_desc d = case_of(SK_OP_MATMUL);
  give(&d, 0, "a=2,b=2,c=2", "a,b"), give(&d, 1, "a=2,b=2,c=2", "b,c");
  d.nout_layouts = 1, d.out_layouts[0] = lay("a=2,b=2,c=2", "(a,b),c", 2, (const int64_t[]){16, 4});
  sk_op_plan p = plan8(&d, "MatMul (a,b),c");
  cr_assert_eq(p.fwd.kind, SK_COLL_REDUCE_SCATTER);
  cr_assert_eq(p.redistributed, 0u);
  d.out_layouts[0] = lay("a=2,b=2,c=2", "(b,a),c", 2, (const int64_t[]){16, 4}); /* not the scatter's order */
  p = plan8(&d, "MatMul (b,a),c");
  cr_assert_eq(p.fwd.kind, SK_COLL_ALLREDUCE);
  cr_assert_eq(p.redistributed, 1u, "another order of rows: a redistribution after the AllReduce");
  sk_op_desc b = case_of(SK_OP_BATCH_MATMUL);
  give(&b, 0, "a=2,b=2,c=2", "a,None,b"), give(&b, 1, "a=2,b=2,c=2", "a,b,c");
  b.nout_layouts = 1, b.out_layouts[0] = lay("a=2,b=2,c=2", "(a,b),None,c", 3, (const int64_t[]){8, 4, 4});
  p = plan8(&b, "BatchMatMul (a,b),None,c");
  cr_assert_eq(p.fwd.kind, SK_COLL_REDUCE_SCATTER, "dim 0 cut by (a,b)");
  cr_assert_eq(p.redistributed, 0u);
  /* as a tuple, (4,1,2) places the same, but MatMul::CheckOutputStrategy takes a tuple for 2-D x
     and w only; MatMul of any rank is the same rule */
  b.nout_layouts = 0, b.has_out_strategy = true, b.out_strategy[0] = 4, b.out_strategy[1] = 1, b.out_strategy[2] = 2;
  expect_refused(&b, "a tuple with batch dims", "an output strategy (a tuple) needs 2-D x and w", "layouts");
  b.kind = SK_OP_MATMUL;
  expect_refused(&b, "MatMul's tuple with batch dims", "MatMul: an output strategy (a tuple) needs 2-D", "ranks 3 and 3");
  b.has_out_strategy = false, b.nout_layouts = 1;
  cr_assert_eq(plan8(&b, "MatMul of rank 3 from layouts").fwd.kind, SK_COLL_REDUCE_SCATTER);
}

/* ---- an output move through recomputation and pipelines ----------------------------------------- */

/* On N devices: fc = MatMul x [16,8] by w [8,8] ((2, N/2), (N/2, 1)) with its output asked for
   columns cut N ways (a MoveOut after the AllReduce), ReLU on a layout whose rows are a tuple
   "(b,a)" (an element-wise operator keeps it), then the data-parallel loss head. Stage
   annotations: fc on stage 0, the rest on stage 1. */
static void build_out_net(net *n, int N) {
  sk_graph_init(&n->g), n->nin = 0;
  int x = add_input(n, "x", SK_F32, 2, SH2(16, 8), 0), y = add_input(n, "y", SK_I32, 1, SH1(16), 4);
  int w = add_param(n, "w", 2, SH2(8, 8), SK_INIT_XAVIER_UNIFORM, 0);
  char rows[32], mesh[32];
  snprintf(rows, sizeof rows, "r=%d", N), snprintf(mesh, sizeof mesh, "a=2,b=%d", N / 2);
  sk_graph_op fc = OP("fc", SK_OP_MATMUL, x, w);
  SHARD(fc, 0, 2, N / 2), SHARD(fc, 1, N / 2, 1);
  fc.desc.nout_layouts = 1, fc.desc.out_layouts[0] = lay(rows, "None,r", 2, SH2(16, 8));
  sk_graph_op relu = OP("relu", SK_OP_RELU, add_op(n, fc));
  in_layout(n, &relu, 0, mesh, "(b,a),None");
  relu.stage = 1;
  loss_head(n, add_op(n, relu), y, "u", 8, 4);
  for (int o = 2; o < n->g.nops; o++) n->g.ops[o].stage = 1;
}

static void check_out_net(const run *R, int N) {
  cr_assert(R->plan.ops[0].out_moved[0], "%d devices: fc's output moves", N);
  cr_assert_eq(count_steps(&R->plan, SK_PSTEP_OUT_MOVE), 1);
}

Test(layouts, output_move_on_2_4_8_devices, .timeout = RT_TIMEOUT) {
  each_device_count("an asked MatMul output", build_out_net, check_out_net, sgd(0.5), 4);
}

static void build_out_net_recomputed(net *n, int N) {
  build_out_net(n, N);
  n->g.ops[0].recompute = n->g.ops[1].recompute = true;
}

static void check_out_net_recomputed(const run *R, int N) {
  check_out_net(R, N);
  cr_assert(sk_parallel_recomputed(&R->plan, R->plan.graph->ops[0].outputs[0]), "%d devices: fc's output is recomputed", N);
}

Test(layouts, output_move_recomputed, .timeout = RT_TIMEOUT) {
  each_device_count("an asked MatMul output, recomputed", build_out_net_recomputed, check_out_net_recomputed, sgd(0.5), 4);
}

static void pipelined(sk_pipe_scheduler sched, const char *what) {
  static net n;
  static run R;
  sk_autoparallel pd;
  memset(&pd, 0, sizeof pd);
  pd.pipeline.stages = 2, pd.pipeline.micro = 2, pd.pipeline.scheduler = sched, pd.output_broadcast = true;
  build_out_net(&n, 4);
  run_init_knobs(&R, &n, 8, SK_F64, sgd(0.5), 4, &pd);
  cr_assert_eq(R.plan.nfallbacks, 0, "%s", what);
  errs m = run_against_trainer(&R, what);
  cr_log_info("%s: losses within %.3g, parameters within %.3g", what, m.loss, m.param);
  run_free(&R);
  sk_graph_free(&n.g);
}

Test(layouts, output_move_under_1f1b, .timeout = RT_TIMEOUT) { pipelined(SK_PIPE_1F1B, "out move, 2 stages 1f1b"); }
Test(layouts, output_move_under_zero_bubble_v, .timeout = RT_TIMEOUT) {
  pipelined(SK_PIPE_ZERO_BUBBLE_V, "out move, 2 stages zero_bubble_v");
}
