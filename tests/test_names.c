/* Names as MindSpore spells them: the collectives (sk_coll_kind_ms_name, sk_coll_kind_from_name)
   beside shardkit's own spelling; the operators _VirtualDataset, identity_info (TmpIdentity) and
   Activation (its activation_type picks the kind) in sk_op_kind_from_name, sk_op_kind_parse and the
   network files, which write shardkit's names back. What shardkit prints does not change. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_json.h"

/* MindSpore's primitives (mindspore/ops/operations/comm_ops.py; ops_utils.h's ALL_REDUCE, ...). */
static const struct {
  sk_coll_kind kind;
  const char *name, *ms_name;
} colls[] = {
    {SK_COLL_ALLREDUCE, "allreduce", "AllReduce"},
    {SK_COLL_ALLGATHER, "allgather", "AllGather"},
    {SK_COLL_REDUCE_SCATTER, "reduce_scatter", "ReduceScatter"},
    {SK_COLL_BROADCAST, "broadcast", "Broadcast"},
    {SK_COLL_REDUCE, "reduce", "Reduce"},
    {SK_COLL_ALLTOALL, "alltoall", "AlltoAll"},
    {SK_COLL_BARRIER, "barrier", "Barrier"},
    {SK_COLL_SEND, "send", "Send"},
    {SK_COLL_RECV, "recv", "Receive"},
    {SK_COLL_GATHER, "gather", "CollectiveGather"},
    {SK_COLL_SCATTER, "scatter", "CollectiveScatter"},
    {SK_COLL_ALLTOALLV, "alltoallv", "AlltoAllV"},
};

Test(names, every_collective_has_both_spellings) {
  cr_assert_eq(sizeof colls / sizeof colls[0], (size_t)SK_COLL_KIND_COUNT - 1, "a collective without a line here");
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
    cr_assert_str_eq(sk_coll_kind_name(colls[i].kind), colls[i].name);
    cr_assert_str_eq(sk_coll_kind_ms_name(colls[i].kind), colls[i].ms_name);
    sk_coll_kind got = SK_COLL_NONE;
    cr_assert(sk_coll_kind_from_name(colls[i].name, &got) && got == colls[i].kind, "%s", colls[i].name);
    got = SK_COLL_NONE;
    cr_assert(sk_coll_kind_from_name(colls[i].ms_name, &got) && got == colls[i].kind, "%s", colls[i].ms_name);
  }
}

Test(names, collective_names_outside_the_table) {
  cr_assert_str_eq(sk_coll_kind_ms_name(SK_COLL_NONE), "invalid");
  cr_assert_str_eq(sk_coll_kind_ms_name(SK_COLL_KIND_COUNT), "invalid");
  cr_assert_str_eq(sk_coll_kind_ms_name((sk_coll_kind)-1), "invalid");
  sk_coll_kind got = SK_COLL_BARRIER;
  const char *bad[] = {"none", "invalid", "", "allReduce", "ALLREDUCE", "AllToAll", "Recv", "Gather"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert(!sk_coll_kind_from_name(bad[i], &got), "'%s' names no collective", bad[i]);
  cr_assert(!sk_coll_kind_from_name(NULL, &got));
  cr_assert(!sk_coll_kind_from_name("AllReduce", NULL));
  cr_assert_eq(got, SK_COLL_BARRIER, "a failed lookup writes nothing");
}

/* ---- operators ------------------------------------------------------------------------------ */

static sk_op_kind kind_of(const char *name) {
  sk_op_kind kind = SK_OP_KIND_COUNT;
  cr_assert(sk_op_kind_from_name(name, &kind), "%s is not found", name);
  return kind;
}

/* MindSpore's _VirtualDataset (VIRTUAL_DATA_SET in ops_utils.h) and TmpIdentityInfo's operator
   name identity_info are read; what shardkit prints stays VirtualDataset, and TmpIdentity for the
   new kind, as its class is named. */
Test(names, mindspore_operator_names) {
  cr_assert_eq(kind_of("_VirtualDataset"), SK_OP_VIRTUAL_DATASET);
  cr_assert_eq(kind_of("VirtualDataset"), SK_OP_VIRTUAL_DATASET);
  cr_assert_str_eq(sk_op_kind_name(SK_OP_VIRTUAL_DATASET), "VirtualDataset");
  cr_assert_eq(kind_of("identity_info"), SK_OP_TMP_IDENTITY);
  cr_assert_eq(kind_of("TmpIdentity"), SK_OP_TMP_IDENTITY);
  cr_assert_str_eq(sk_op_kind_name(SK_OP_TMP_IDENTITY), "TmpIdentity");
  cr_assert_eq(SK_OP_TMP_IDENTITY, SK_OP_VIRTUAL_DATASET + 1, "added last: the older kinds keep their numbers");
  sk_op_kind kind = SK_OP_ADD;
  cr_assert(!sk_op_kind_from_name("Activation", &kind), "Activation needs its activation_type");
  cr_assert_eq(kind, SK_OP_ADD);
}

/* Issue 37's kinds, after TmpIdentity in that order (strategy files keep the older numbers):
   Sigmoid and SiLU as master's primitives (sigmoid_op.yaml, silu_op.yaml's class SiLU), RmsNorm
   (rms_norm_op.yaml) also as RMSNorm, and the test primitive VirtualLoss (test_math_ops.py) also
   as _VirtualLoss; shardkit prints the first spelling. Names are case-sensitive: "Silu" and
   "rmsnorm" are no operators. */
Test(names, issue_37_operator_names) {
  const struct {
    const char *name;
    sk_op_kind kind;
  } t[] = {{"Sigmoid", SK_OP_SIGMOID}, {"SiLU", SK_OP_SILU},         {"RmsNorm", SK_OP_RMS_NORM},
           {"RMSNorm", SK_OP_RMS_NORM}, {"VirtualLoss", SK_OP_VIRTUAL_LOSS}, {"_VirtualLoss", SK_OP_VIRTUAL_LOSS}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) cr_assert_eq(kind_of(t[i].name), t[i].kind, "%s", t[i].name);
  cr_assert_str_eq(sk_op_kind_name(SK_OP_RMS_NORM), "RmsNorm");
  cr_assert_str_eq(sk_op_kind_name(SK_OP_VIRTUAL_LOSS), "VirtualLoss");
  cr_assert_str_eq(sk_op_kind_name(SK_OP_SILU), "SiLU");
  cr_assert_eq(SK_OP_SIGMOID, SK_OP_TMP_IDENTITY + 1);
  cr_assert_eq(SK_OP_SILU, SK_OP_TMP_IDENTITY + 2);
  cr_assert_eq(SK_OP_RMS_NORM, SK_OP_TMP_IDENTITY + 3);
  cr_assert_eq(SK_OP_VIRTUAL_LOSS, SK_OP_TMP_IDENTITY + 4);
  sk_op_kind kind = SK_OP_ADD;
  const char *not_names[] = {"Silu", "rmsnorm", "RMSnorm", "sigmoid", "Virtual_Loss"};
  for (size_t i = 0; i < sizeof not_names / sizeof not_names[0]; i++)
    cr_assert(!sk_op_kind_from_name(not_names[i], &kind), "'%s' names no operator", not_names[i]);
  cr_assert_eq(kind, SK_OP_ADD);
}

static void parse_refused(const char *name, const char *type, const char *want) {
  sk_op_kind kind = SK_OP_ADD;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_op_kind_parse(name, type, &kind, &e), SK_ERR_INVALID_ARGUMENT, "%s %s", name, type ? type : "");
  cr_assert(strstr(e.msg, want), "%s %s: '%s' lacks '%s'", name, type ? type : "", e.msg, want);
  cr_assert_eq(kind, SK_OP_ADD, "a refusal writes nothing");
}

/* ActivationInfo::GetAttrs: activation_type relu, relu6 or sigmoid; shardkit has relu and
   sigmoid. */
Test(names, activation_is_the_kind_its_type_names) {
  sk_op_kind kind = SK_OP_KIND_COUNT;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_op_kind_parse("Activation", "relu", &kind, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(kind, SK_OP_RELU);
  cr_assert_eq(sk_op_kind_parse("Activation", "sigmoid", &kind, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(kind, SK_OP_SIGMOID);
  cr_assert_eq(sk_op_kind_parse("RMSNorm", NULL, &kind, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(kind, SK_OP_RMS_NORM);
  cr_assert_eq(sk_op_kind_parse("GatherV2", NULL, &kind, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(kind, SK_OP_GATHER);
  cr_assert_eq(sk_op_kind_parse("_VirtualDataset", NULL, &kind, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(kind, SK_OP_VIRTUAL_DATASET);
  parse_refused("Activation", "relu6",
                "Activation: activation_type \"relu6\" has no kernel in shardkit, which has relu, sigmoid");
  parse_refused("Activation", "Sigmoid", "\"Sigmoid\" has no kernel");
  parse_refused("Activation", "ReLU", "\"ReLU\" has no kernel");
  parse_refused("Activation", NULL, "Activation: needs activation_type (relu, sigmoid)");
  parse_refused("Sigmoid", "sigmoid", "Sigmoid: activation_type is an attribute of Activation only");
  parse_refused("ReLU", "relu", "ReLU: activation_type is an attribute of Activation only");
  parse_refused("Relu6", NULL, "unknown operator type \"Relu6\" (MindSpore's primitive names)");
  parse_refused(NULL, "relu", "NULL");
  cr_assert_eq(sk_op_kind_parse("ReLU", NULL, NULL, &e), SK_ERR_INVALID_ARGUMENT);
}

Test(names, the_kinds_a_name_can_spell) {
  cr_assert_eq(sk_op_kinds_named("Activation"), ((uint64_t)1 << SK_OP_RELU) | ((uint64_t)1 << SK_OP_SIGMOID));
  cr_assert_eq(sk_op_kinds_named("_VirtualLoss"), (uint64_t)1 << SK_OP_VIRTUAL_LOSS);
  cr_assert_eq(sk_op_kinds_named("ReLU"), (uint64_t)1 << SK_OP_RELU);
  cr_assert_eq(sk_op_kinds_named("TensorAdd"), (uint64_t)1 << SK_OP_ADD);
  cr_assert_eq(sk_op_kinds_named("identity_info"), (uint64_t)1 << SK_OP_TMP_IDENTITY);
  cr_assert_eq(sk_op_kinds_named("Relu6"), 0u);
  cr_assert_eq(sk_op_kinds_named(""), 0u);
  cr_assert_eq(sk_op_kinds_named(NULL), 0u);
}

/* ---- network files -------------------------------------------------------------------------- */

/* x -> _VirtualDataset; w -> identity_info; MatMul; Activation (relu); the mean. `act` is the
   Activation's attributes (after its inputs). */
static int net_text(char *buf, size_t cap, const char *act) {
  int n = snprintf(buf, cap,
                   "{\"format\": \"shardkit-network\", \"version\": 1,\n"
                   " \"tensors\": [\n"
                   "  {\"name\": \"x\", \"role\": \"input\", \"dtype\": \"f64\", \"shape\": [8, 4]},\n"
                   "  {\"name\": \"w\", \"role\": \"parameter\", \"dtype\": \"f64\", \"shape\": [4, 4],"
                   " \"init\": {\"kind\": \"ones\"}}],\n"
                   " \"operators\": [\n"
                   "  {\"name\": \"vd\", \"type\": \"_VirtualDataset\", \"inputs\": [\"x\"]},\n"
                   "  {\"name\": \"t\", \"type\": \"identity_info\", \"inputs\": [\"w\"], \"shard\": [[2, 1]]},\n"
                   "  {\"name\": \"mm\", \"type\": \"MatMul\", \"inputs\": [\"vd\", \"t\"]},\n"
                   "  {\"name\": \"act\", \"type\": \"Activation\", \"inputs\": [\"mm\"]%s},\n"
                   "  {\"name\": \"loss\", \"type\": \"ReduceMean\", \"inputs\": [\"act\"]}],\n"
                   " \"loss\": \"loss\"}\n",
                   act);
  cr_assert(n > 0 && (size_t)n < cap);
  return n;
}

Test(names, networks_read_mindspore_names_and_write_shardkits) {
  char text[2048], *out = NULL;
  int n = net_text(text, sizeof text, ", \"activation_type\": \"relu\"");
  sk_graph g;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_parse_network(text, (size_t)n, &g, &e), SK_OK, "%s", e.msg);
  const sk_op_kind want[5] = {SK_OP_VIRTUAL_DATASET, SK_OP_TMP_IDENTITY, SK_OP_MATMUL, SK_OP_RELU, SK_OP_REDUCE_MEAN};
  cr_assert_eq(g.nops, 5);
  for (int o = 0; o < 5; o++) cr_assert_eq(g.ops[o].desc.kind, want[o], "operator %d: %s", o, sk_op_kind_name(g.ops[o].desc.kind));
  cr_assert_eq(sk_json_format_network(&g, &out, &e), SK_OK, "%s", e.msg);
  cr_assert(strstr(out, "\"type\": \"VirtualDataset\"") && strstr(out, "\"type\": \"TmpIdentity\"") &&
                strstr(out, "\"type\": \"ReLU\""),
            "%s", out);
  cr_assert(!strstr(out, "Activation") && !strstr(out, "activation_type") && !strstr(out, "identity_info"), "%s", out);
  free(out);
  sk_graph_free(&g);
}

/* Activation with activation_type sigmoid is Sigmoid, written back as "Sigmoid". */
Test(names, networks_read_activation_sigmoid) {
  char text[2048], *out = NULL;
  int n = net_text(text, sizeof text, ", \"activation_type\": \"sigmoid\"");
  sk_graph g;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_parse_network(text, (size_t)n, &g, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(g.ops[3].desc.kind, SK_OP_SIGMOID, "%s", sk_op_kind_name(g.ops[3].desc.kind));
  cr_assert_eq(sk_json_format_network(&g, &out, &e), SK_OK, "%s", e.msg);
  cr_assert(strstr(out, "\"type\": \"Sigmoid\"") && !strstr(out, "activation_type"), "%s", out);
  free(out);
  sk_graph_free(&g);
}

static void net_refused(const char *act, const char *want) {
  char text[2048];
  int n = net_text(text, sizeof text, act);
  sk_graph g;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_parse_network(text, (size_t)n, &g, &e), SK_ERR_INVALID_ARGUMENT, "%s", act);
  cr_assert(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
}

Test(names, networks_refuse_an_activation_shardkit_lacks) {
  net_refused(", \"activation_type\": \"relu6\"",
              "line 9: operators[3] (\"act\").activation_type: Activation: activation_type \"relu6\" has no kernel");
  net_refused("", "line 9: operators[3] (\"act\").type: Activation: needs activation_type (relu, sigmoid)");
  net_refused(", \"activation_type\": 1", "operators[3] (\"act\").activation_type: expected a string, got");
}
