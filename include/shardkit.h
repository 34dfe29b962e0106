/* shardkit.h -- umbrella header: includes every shardkit module.
   Define SK_IMPL in one .c file before including it to get every implementation.
   No include guard of its own on purpose: each module guards its declarations and its
   implementation separately, so including this again after defining SK_IMPL emits the code. */
#include "sk_core.h"
#include "sk_layout.h"
#include "sk_opt_shard.h" /* optimizer parallel (hsdp): which parameters shard, over which group */
#include "sk_layout_algebra.h" /* refining meshes and shapes, unifying two layouts (MindSpore's layout transfer) */
#include "sk_comm.h"
#include "sk_topology.h" /* a hierarchical cluster: each collective priced per algorithm (ring, tree, hierarchical), the cheapest chosen */
#include "sk_backend.h" /* the backend contract: sk_coll, sk_backend (for backend authors) */
#include "sk_threads.h"
#include "sk_ops.h"
#include "sk_optable.h" /* one row per operator: names, arity, rule, kernels, FLOPs, search candidates */
#include "sk_kernels.h" /* every operator's forward and backward on a device's slice */
#include "sk_optim.h"   /* SGD, Momentum, Adam as element-wise updates of a (sharded) buffer */
#include "sk_graph.h"   /* a network: inputs, parameters, operators wired by tensor, shapes */
#include "sk_npy.h"     /* NumPy .npy files read row by row: what feeds an input from a file */
#include "sk_exec.h"    /* one graph operator forward and backward on a device's buffers */
#include "sk_train.h"   /* trains a graph on one device: the reference run */
#include "sk_parallel.h" /* AutoParallel's compiler: a graph and a device count -> one program per device */
#include "sk_fusion.h"
#include "sk_redist.h" /* brings sk_redist_ms.h (MindSpore's operator sequence) with it */
#include "sk_runtime.h" /* AutoParallel's runtime: a compiled program trained on every device of a world */
#include "sk_search_cost.h" /* the strategy searches' cost model: candidates, communication, redistribution */
#include "sk_search.h" /* sharding_propagation, recursive_programming (D-Rec), the exact search */
#include "sk_pipeline.h" /* pipeline parallel: schedulers as action lists, chunk placement, the balanced cut, a simulator */
#include "sk_redundancy.h" /* redundancy groups, owners, parameter_broadcast (zero-then-AllReduce) */
#include "sk_ckpt_plan.h" /* checkpoint planning: boxes, owners, read plans, MindSpore's rank list (no zlib) */
#include "sk_dryrun.h" /* a plan's step with no data: memory, communication and FLOPs as the runtime counts them */
#include "sk_dryrun_clock.h" /* a plan's modelled step time with no data: every device's program on virtual clocks */
#include "sk_finalists.h" /* a search's plan against data parallel and the network's own strategies, the cheapest by the dry run kept */
