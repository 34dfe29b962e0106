/* shipped_nets.h -- a shipped network (examples/nets/, each .json) loaded for the runtime
   harness (tests/runtime_harness.h's net): the graph, and the range each integer input draws its
   data from. Include after runtime_harness.h and sk_json.h. */
#ifndef SK_TESTS_SHIPPED_NETS_H
#define SK_TESTS_SHIPPED_NETS_H

/* The range an integer input draws from: a Gather's table rows when it indexes one (the
   transformer's tokens), else the classes of the logits (the labels). */
static inline int64_t shipped_int_range(const sk_graph *g, int t) {
  for (int o = 0; o < g->nops; o++) {
    const sk_graph_op *op = &g->ops[o];
    if (op->desc.kind == SK_OP_GATHER && op->ninputs > 1 && op->inputs[1] == t) return g->tensors[op->inputs[0]].shape[0];
  }
  cr_assert_geq(g->logits, 0, "integer input '%s' in a network without logits", g->tensors[t].name);
  const sk_graph_tensor *l = &g->tensors[g->logits];
  return l->shape[l->ndims - 1];
}

/* Loads path into n, with each input's data range. */
static inline void load_shipped_net(net *n, const char *path) {
  memset(n, 0, sizeof *n);
  sk_graph_init(&n->g);
  OK(sk_json_load_network(path, &n->g, E));
  for (int t = 0; t < n->g.ntensors; t++) {
    const sk_graph_tensor *x = &n->g.tensors[t];
    if (x->role != SK_TENSOR_INPUT) continue;
    cr_assert_lt(n->nin, MAXIN, "%s: more than %d inputs", path, MAXIN);
    bool integer = x->dtype == SK_I32 || x->dtype == SK_I64;
    n->range[n->nin++] = integer ? shipped_int_range(&n->g, t) : 0;
  }
}

#endif
