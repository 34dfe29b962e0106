/* Names as MindSpore spells them: the collectives (sk_coll_kind_ms_name, sk_coll_kind_from_name)
   beside shardkit's own spelling, which stays what every report prints. */
#include <criterion/criterion.h>
#include <string.h>

#include "shardkit.h"

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
