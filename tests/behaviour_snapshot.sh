#!/bin/bash
# behaviour_snapshot.sh -- records what a tree's programs print, one file per case, so that a
# refactor that must not change behaviour can be checked bit for bit against its base. A
# developer tool, not part of `make test`.
#
#   tests/behaviour_snapshot.sh OUTDIR
#       builds build/sk-layout, build/sk-sim, build/operator_parallel and the networks' .npy files
#       (make data) of the tree this script is in and writes the cases into OUTDIR (which must
#       be missing or empty)
#   tests/behaviour_snapshot.sh --compare REV [OUTDIR]
#       checks REV out into a temporary git worktree (removed on exit), snapshots it and this
#       tree as it is (uncommitted changes included) with this script's cases, into OUTDIR/rev
#       and OUTDIR/tree (default: a temporary folder, kept only when they differ), and prints
#       `behaviour: N cases, M differ` and the differing cases; exit 0 when identical, else 1
#
# The cases (file names under OUTDIR):
#   layout/KIND.VARIANT  sk-layout --op KIND ... --json for every operator kind of sk_ops.h: the
#                        default strategy and cut ones (contraction, batch, repeat axis, ...);
#                        layout/error.* are rejected strategies and usage errors, text and JSON.
#                        (sk-layout --op takes no MatMul layouts: sk-sim's runs cover those.)
#   dump/NET.dN.CONFIG.rR  sk-sim --dump-program R (ranks 0 and N-1) on N = 1, 2, 4, 8 devices
#                        for every network of examples/nets, tests/nets and bench/nets (sk-sim has
#                        no built-in ones), under each of dump_configs below; a refused one is
#                        recorded with its message and exit status like any other
#   schedule/NET.dN.*    sk-sim --dump-schedule of two pipeline schedulers
#   f64/NET.*            11 steps in f64 on 4 devices with --check and --report; but for
#                        bench/nets (time: see sim_f64), also on 1 device, on 4 with --pipeline 2
#                        --micro 2 (and --report) and with --hsdp ,0, and on 8 under --mode
#                        recursive_programming, all with --check but the one-device run (nothing to
#                        compare with). All but the pipeline add --local-norm print (each step's
#                        gradient norms, 9 digits; sk-sim prints none under a pipeline). sk-sim
#                        prints the loss every 10 steps (steps 0 and 10 here) with 17 digits in
#                        f64, its full precision, and the check line's difference with 3 digits,
#                        its only form
#   example/operator_parallel.*  the hand-wired tutorial program, 11 steps
# Each file holds the command line, the exit status, stdout and stderr. Nothing is stripped but
# what varies from run to run (see normalise): the timings -- sk-sim's summary line ("# 4 devices,
# ..., X ms per step, median cpu X ms, median X ms"), --dump-program's "# compiled for N devices
# in X ms", --print-strategies' "searched in X ms", the busy_ms and step_ms columns of --report's
# pipeline table, operator_parallel's "X s per epoch". (Memory peaks are kept: a pipeline
# stage's send copies are freed at their program's WaitSend steps, so its peaks are the same run
# after run; a tree before that change differs there under --pipeline.)
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
# a case that runs longer than this is recorded as timed out (exit 124) instead of hanging; the
# case runs under timeout --foreground, in the script's process group, so that ^C stops it too
case_timeout=300

usage() {
  echo "usage: tests/behaviour_snapshot.sh OUTDIR | --compare REV [OUTDIR]" >&2
  exit 2
}

# ---- recording -----------------------------------------------------------------------------

# normalise: stdin to stdout with the run-to-run timings replaced by <t> (listed at the top)
normalise() {
  sed -E -e '/^# .* ms per step/ s/[0-9]+(\.[0-9]+)? ms/<t> ms/g' \
         -e 's/^(# compiled for .* in )[0-9.]+ ms$/\1<t> ms/' \
         -e 's/searched in [0-9.]+(e[-+]?[0-9]+)? ms/searched in <t> ms/' \
         -e 's/[0-9]+(\.[0-9]+)? s per epoch/<t> s per epoch/' |
    awk '
      $1 ~ /^[0-9]+$/ && busy { $3 = "<t>"; $4 = "<t>"; print; next }
      { busy = $1 == "device" && $3 == "busy_ms" && $4 == "step_ms"; print }'
}

# run_case NAME PROGRAM ARGS...: runs it in $tree and writes $snap/NAME
run_case() {
  local name=$1 rc=0
  shift
  mkdir -p "$(dirname "$snap/$name")"
  (cd "$tree" && timeout --foreground "$case_timeout" "$@") >"$scratch/out" 2>"$scratch/err" </dev/null || rc=$?
  {
    printf '$'; printf ' %q' "$@"; printf '\n'
    echo "exit $rc"
    echo "--- stdout"; normalise <"$scratch/out"
    echo "--- stderr"; normalise <"$scratch/err"
  } >"$snap/$name"
  ncases=$((ncases + 1))
}

# ---- sk-layout --op: every operator kind ---------------------------------------------------

# op NAME ARGS...: one --json query
op() {
  local name=$1
  shift
  run_case "layout/$name" build/sk-layout --op "$@" --json
}

layout_matmuls() {
  local mm="((32,784),(784,512))"
  op MatMul.default MatMul --shapes "$mm" --devices 8
  op MatMul.split_k MatMul --shapes "$mm" --shard "((2,4),(4,1))" --devices 8 --params 1
  op MatMul.split_k.rank5 MatMul --shapes "$mm" --shard "((2,4),(4,1))" --devices 8 --params 1 --rank 5
  op MatMul.repeat MatMul --shapes "$mm" --shard "((2,2),(2,1))" --devices 8 --params 1
  op MatMul.repeat.mean MatMul --shapes "$mm" --shard "((2,2),(2,1))" --devices 8 --params 1 --attr gradients_mean=True
  op MatMul.activation_w MatMul --shapes "$mm" --shard "((2,1),(1,4))" --devices 8
  op MatMul.transpose_b MatMul --shapes "((32,512),(1024,512))" --shard "((2,1),(4,1))" --devices 8 --params 1 --attr transpose_b=True
  op MatMul.transpose_a MatMul --shapes "((784,32),(784,512))" --shard "((4,2),(4,1))" --devices 8 --params 1 --attr transpose_a=True
  op MatMul.out_strategy MatMul --shapes "$mm" --shard "((2,4),(4,1))" --devices 8 --params 1 --attr "out_strategy=((8,1),)"
  op BatchMatMul.default BatchMatMul --shapes "((8,32,64),(8,64,16))" --devices 8
  op BatchMatMul.default_small_batch BatchMatMul --shapes "((4,32,64),(4,64,16))" --devices 8
  op BatchMatMul.split_k BatchMatMul --shapes "((4,32,64),(4,64,16))" --shard "((2,2,2),(2,2,1))" --devices 8 --params 1
  op BatchMatMul.split_batch BatchMatMul --shapes "((4,32,64),(4,64,16))" --shard "((4,2,1),(4,1,1))" --devices 8
  op BatchMatMul.repeat BatchMatMul --shapes "((4,32,64),(4,64,16))" --shard "((2,1,1),(2,1,1))" --devices 8 --params 1
  op BatchMatMul.broadcast BatchMatMul --shapes "((4,32,64),(64,16))" --shard "((2,2,2),(2,1))" --devices 8 --params 1
  op BatchMatMul.size1_batch BatchMatMul --shapes "((4,32,64),(1,64,16))" --shard "((4,1,2),(1,2,1))" --devices 8
  op Dense.default Dense --shapes "((32,64),(128,64),(128,))" --devices 8
  op Dense.split_k Dense --shapes "((32,64),(128,64),(128,))" --shard "((2,4),(1,4),(1,))" --devices 8 --params "(1,2)"
  op Dense.split_rows Dense --shapes "((32,64),(128,64),(128,))" --shard "((2,1),(4,1),(4,))" --devices 8 --params "(1,2)"
  op Dense.no_bias.repeat Dense --shapes "((32,64),(128,64))" --shard "((2,2),(1,2))" --devices 8 --params 1
}

layout_elementwise() {
  local k
  for k in ReLU GeLU Tanh Cast; do
    op "$k.default" "$k" --shapes "(16,512)" --devices 8
    op "$k.split" "$k" --shapes "(16,512)" --shard "(4,2)" --devices 8
    op "$k.repeat" "$k" --shapes "(16,512)" --shard "(2,1)" --devices 8 --params 0
  done
  op Dropout.default Dropout --shapes "(16,512)" --devices 8 --attr keep_prob=0.9
  op Dropout.split Dropout --shapes "(16,512)" --shard "(4,2)" --devices 8
  op Dropout.repeat Dropout --shapes "(16,512)" --shard "(2,1)" --devices 8
  for k in Add Sub Mul Div Pow; do
    op "$k.default" "$k" --shapes "((16,32),(16,32))" --devices 8
    op "$k.split" "$k" --shapes "((16,32),(16,32))" --shard "((2,4),(2,4))" --devices 8 --params 1
    op "$k.broadcast" "$k" --shapes "((1,48),(48,1))" --shard "((1,8),(4,1))" --devices 32
    op "$k.scalar" "$k" --shapes "((16,8),())" --shard "((2,4),())" --devices 8
  done
  op TensorAdd.repeat TensorAdd --shapes "((48,16),(48,1))" --shard "((2,1),(2,1))" --devices 8 --params 1
  op RealDiv.rank1_broadcast RealDiv --shapes "((16,32),(32,))" --shard "((2,4),(4,))" --devices 8
  op BiasAdd.default BiasAdd --shapes "((16,32),(32,))" --devices 8
  op BiasAdd.split BiasAdd --shapes "((16,32),(32,))" --shard "((2,4),(4,))" --devices 8 --params 1
  op BiasAdd.repeat_nchw BiasAdd --shapes "((16,8,4,4),(8,))" --shard "((2,2,1,1),(2,))" --devices 8 --params 1
  op PReLU.default PReLU --shapes "((16,8,4),(8,))" --devices 8
  op PReLU.split PReLU --shapes "((16,8,4),(8,))" --shard "((2,4,1),(4,))" --devices 8 --params 1
  op PReLU.w1 PReLU --shapes "((16,8,4),(1,))" --shard "((2,4,1),(1,))" --devices 8 --params 1
}

layout_normalisations() {
  op Softmax.default Softmax --shapes "((32,16),)" --devices 8
  op Softmax.axis_last Softmax --shapes "((32,16),)" --shard "((8,1),)" --devices 8 --attr axis=-1
  op Softmax.axis0 Softmax --shapes "((32,16),)" --shard "((1,4),)" --devices 8 --attr "axis=(0,)"
  op LogSoftmax.default LogSoftmax --shapes "((32,16),)" --devices 8
  op LogSoftmax.axis0 LogSoftmax --shapes "((32,16),)" --shard "((1,8),)" --devices 8 --attr axis=0
  op L2Normalize.default L2Normalize --shapes "((32,16),)" --shard "((1,8),)" --devices 8
  op L2Normalize.axis1 L2Normalize --shapes "((32,16),)" --shard "((4,1),)" --devices 8 --attr axis=1
  op LayerNorm.default LayerNorm --shapes "((16,8,32),(8,32),(8,32))" --devices 8
  op LayerNorm.split LayerNorm --shapes "((16,8,32),(32,),(32,))" --shard "((2,4,1),(1,),(1,))" --devices 8 --attr begin_norm_axis=2 --params "(1,2)"
  op LayerNorm.axis_neg LayerNorm --shapes "((16,8,32),(32,),(32,))" --shard "((2,2,1),(1,),(1,))" --devices 8 --attr begin_norm_axis=-1 --params "(1,2)"
  op SoftmaxCrossEntropy.default SoftmaxCrossEntropy --shapes "((32,10),(32,))" --devices 8
  op SoftmaxCrossEntropy.dense_labels SoftmaxCrossEntropy --shapes "((32,10),(32,10))" --shard "((4,1),(4,1))" --devices 8
  op SoftmaxCrossEntropyWithLogits.default SoftmaxCrossEntropyWithLogits --shapes "((32,10),(32,10))" --devices 8
  op SoftmaxCrossEntropyWithLogits.repeat SoftmaxCrossEntropyWithLogits --shapes "((32,10),(32,10))" --shard "((4,1),(4,1))" --devices 8
  op MAELoss.default MAELoss --shapes "((32,16),(32,16))" --devices 8
  op MAELoss.split MAELoss --shapes "((32,16),(32,16))" --shard "((2,4),(2,4))" --devices 8
  op MAELoss.repeat MAELoss --shapes "((32,16),(32,16))" --shard "((2,2),(2,2))" --devices 8
}

layout_reductions_and_moves() {
  local k
  for k in ReduceSum ReduceMean ReduceMax; do
    op "$k.default" "$k" --shapes "((16,32),)" --devices 8
    op "$k.all" "$k" --shapes "((16,32),)" --shard "((2,4),)" --devices 8 --attr "axis=(0,1)" --attr keep_dims=False
    op "$k.axis1_keep" "$k" --shapes "((16,32),)" --shard "((1,8),)" --devices 8 --attr axis=1 --attr keep_dims=True
    op "$k.repeat" "$k" --shapes "((16,32),)" --shard "((2,1),)" --devices 8 --attr axis=0
  done
  op Flatten.default Flatten --shapes "((32,4,7,7),)" --devices 8
  op Flatten.batch Flatten --shapes "((32,4,7,7),)" --shard "((4,1,1,1),)" --devices 8
  op Transpose.split Transpose --shapes "((4,8),)" --shard "((2,4),)" --devices 8 --attr "perm=(1,0)"
  op Transpose.3d_repeat Transpose --shapes "((4,8,16),)" --shard "((2,1,2),)" --devices 8 --attr "perm=(2,0,1)"
  op Reshape.default Reshape --shapes "((32,512,7,7),)" --devices 8 --attr "shape=(32,25088)"
  op Reshape.repeat Reshape --shapes "((32,512,7,7),)" --shard "((4,1,1,1),)" --devices 32 --attr "shape=(32,25088)"
  op Reshape.split_inner Reshape --shapes "((8,16),)" --shard "((2,4),)" --devices 8 --attr "shape=(8,4,4)"
  op ExpandDims.default ExpandDims --shapes "((16,32),)" --devices 8 --attr axis=1
  op ExpandDims.repeat ExpandDims --shapes "((16,32),)" --shard "((4,2),)" --devices 16 --attr axis=1
  op ExpandDims.axis_neg ExpandDims --shapes "((16,32),)" --shard "((2,4),)" --devices 8 --attr axis=-1
}

layout_lookups() {
  op OneHot.default OneHot --shapes "((64,),(),())" --devices 8 --attr depth=10
  op OneHot.batch OneHot --shapes "((64,),(),())" --shard "((8,1),(),())" --devices 8 --attr depth=10 --attr axis=-1
  op OneHot.depth_split OneHot --shapes "((64,),(),())" --shard "((4,2),(),())" --devices 8 --attr depth=10
  op OneHot.repeat OneHot --shapes "((64,),(),())" --shard "((4,1),(),())" --devices 8 --attr depth=10
  op OneHot.axis0 OneHot --shapes "((64,),(),())" --shard "((2,4),(),())" --devices 8 --attr depth=16 --attr axis=0
  op Gather.default Gather --shapes "((64,32),(16,8))" --devices 8 --params 0
  op Gather.row_split Gather --shapes "((64,32),(16,8))" --shard "((8,1),(1,1))" --devices 16 --rank 9 --params 0
  op Gather.row_split.allreduce Gather --shapes "((64,32),(6,8))" --shard "((8,1),(1,1))" --devices 8 --params 0
  op Gather.column_split Gather --shapes "((64,32),(16,8))" --shard "((1,4),(2,2))" --devices 16 --params 0
  op Gather.batch_and_axis Gather --shapes "((64,32),(16,8))" --shard "((2,1),(4,1))" --devices 8 --attr axis=0 --rank 5 --params 0
  op Gather.axis1 Gather --shapes "((64,32),(16,))" --shard "((2,4),(1,))" --devices 8 --attr axis=1 --params 0
  op GatherV2.rank1_table GatherV2 --shapes "((64,),(16,8))" --shard "((1,),(2,4))" --devices 8
  op GetNext.two_outputs GetNext --shapes "()" --shard "()" --devices 8 --attr "shapes=((64,32),(64,))" --attr "types=('float32','int32')" --attr output_num=2
  op GetNext.default GetNext --shapes "()" --devices 8 --attr "shapes=((64,32),)"
  op VirtualDataset.default VirtualDataset --shapes "((32,16),(32,))" --devices 8
  op VirtualDataset.dim1 VirtualDataset --shapes "((32,16),(16,))" --shard "((1,4),(4,))" --devices 8
  op VirtualDataset.repeat_left VirtualDataset --shapes "((32,16),(32,))" --shard "((2,1),(2,))" --devices 8
}

# layout_error NAME ARGS...: a rejected query, in both forms (text on stderr, and --json)
layout_error() {
  local name=$1
  shift
  run_case "layout/error.$name.text" build/sk-layout --op "$@"
  run_case "layout/error.$name.json" build/sk-layout --op "$@" --json
}

layout_errors() {
  local mm="((32,784),(784,512))"
  layout_error matmul_k_disagree MatMul --shapes "$mm" --shard "((2,4),(2,1))" --devices 8
  layout_error matmul_not_divide MatMul --shapes "$mm" --shard "((4,4),(4,1))" --devices 8
  layout_error matmul_not_power_of_two MatMul --shapes "((48,784),(784,512))" --shard "((3,2),(2,1))" --devices 8
  layout_error matmul_tuple_count MatMul --shapes "$mm" --shard "((2,4),)" --devices 8
  layout_error relu_tuple_length ReLU --shapes "((16,512),)" --shard "((4,1,1),)" --devices 8
  layout_error softmax_axis_cut Softmax --shapes "((32,16),)" --shard "((4,2),)" --devices 8 --attr axis=-1
  layout_error layernorm_norm_dim_cut LayerNorm --shapes "((16,8,32),(32,),(32,))" --shard "((2,1,4),(4,),(4,))" --devices 8 --attr begin_norm_axis=2
  layout_error gather_row_split_indices_cut Gather --shapes "((64,32),(16,8))" --shard "((2,1),(2,1))" --devices 8 --attr axis=0
  layout_error flatten_inner_cut Flatten --shapes "((32,4,7,7),)" --shard "((2,4,1,1),)" --devices 8
  layout_error transpose_no_perm Transpose --shapes "((4,8),)" --shard "((2,1),)" --devices 8
  layout_error onehot_one_entry OneHot --shapes "((64,),(),())" --shard "((8,),(),())" --devices 8 --attr depth=10
  layout_error reshape_count Reshape --shapes "((8,16),)" --devices 8 --attr "shape=(8,3)"
  layout_error unknown_op MatMal --shapes "((2,2),(2,2))" --devices 8
  layout_error unknown_attr ReLU --shapes "(16,)" --devices 8 --attr bogus=1
  layout_error bad_literal MatMul --shapes "$mm" --shard "((2,4),(4,1)" --devices 8
  layout_error no_devices ReLU --shapes "(16,)"
}

# ---- sk-sim --------------------------------------------------------------------------------

# The networks: every shipped one, named by folder and file (examples.transformer, ...), but
# bench/nets/transformer96.json: a dry-run subject at 4,096 devices, far too big to train here
nets() {
  local f
  for f in examples/nets/*.json tests/nets/*.json bench/nets/*.json; do
    case $f in bench/nets/transformer96.json) continue ;; esac
    if [ -f "$tree/$f" ]; then echo "$f"; fi
  done
}

net_name() {
  local dir=${1%/nets/*}
  local base=${1##*/}
  echo "$dir.${base%.json}"
}

# recompute_ops NET: the network's second and third operators (the first is often a Flatten or a
# lookup; the last the loss), comma-separated: the "name" keys after "operators" in its JSON (the
# shipped files have one key a line)
recompute_ops() {
  awk '/"operators"/ { ops = 1 } ops && /"name":/ { sub(/^[^:]*: *"/, ""); sub(/".*/, ""); print }' "$tree/$1" |
    sed -n '2p;3p' | paste -sd, -
}

# the configurations of the program dumps; "recompute" takes its operators from the network
dump_configs="default sharding_propagation recursive_programming rp_link exhaustive pipeline2 hsdp recompute gradacc fp32comm full_batch"

config_flags() {
  case $1 in
    default) ;;
    sharding_propagation) echo "--mode sharding_propagation --print-strategies" ;;
    recursive_programming) echo "--mode recursive_programming --print-strategies" ;;
    rp_link) echo "--mode recursive_programming --link 5,25 --device-tflops 10 --print-strategies" ;;
    exhaustive) echo "--mode exhaustive --print-strategies" ;;
    pipeline2) echo "--pipeline 2 --micro 2 --print-strategies" ;;
    hsdp) echo "--hsdp ,0 --print-strategies" ;;
    gradacc) echo "--grad-accumulation-step 2" ;;
    fp32comm) echo "--dtype bf16 --fp32-communication" ;;
    full_batch) echo "--dataset-strategy full_batch" ;;
  esac
}

sim_dumps() {
  local net name n config rank ranks ops
  for net in $(nets); do
    name=$(net_name "$net")
    ops=$(recompute_ops "$net")
    for n in 1 2 4 8; do
      ranks=0
      [ "$n" -eq 1 ] || ranks="0 $((n - 1))"
      for config in $dump_configs; do
        for rank in $ranks; do
          if [ "$config" = recompute ]; then
            run_case "dump/$name.d$n.$config.r$rank" build/sk-sim --net "$net" --devices "$n" --recompute "$ops" --dump-program "$rank"
          else
            # shellcheck disable=SC2046 # the flags are words
            run_case "dump/$name.d$n.$config.r$rank" build/sk-sim --net "$net" --devices "$n" $(config_flags "$config") --dump-program "$rank"
          fi
        done
      done
    done
    run_case "schedule/$name.d4.1f1b" build/sk-sim --net "$net" --devices 4 --pipeline 2 --micro 4 --dump-schedule
    run_case "schedule/$name.d8.zero_bubble_v" build/sk-sim --net "$net" --devices 8 --pipeline 2 --micro 4 --scheduler zero_bubble_v --dump-schedule
  done
}

sim_f64() {
  local net name f64="--dtype f64 --steps 11 --local-norm print"
  for net in $(nets); do
    name=$(net_name "$net")
    # shellcheck disable=SC2086 # the flags are words
    run_case "f64/$name.d4" build/sk-sim --net "$net" --devices 4 $f64 --device-local-norm --check --report
    # The benchmark's network runs only the case above, for time: every run ends with a
    # test-accuracy pass, which on its eight 784x784 layers costs 20 to 50 s on two busy cores
    # (over a minute under --hsdp, which gathers every layer for each test batch).
    case $net in bench/*) continue ;; esac
    # shellcheck disable=SC2086
    run_case "f64/$name.d1" build/sk-sim --net "$net" --devices 1 $f64
    # sk-sim prints no local norms under a pipeline
    run_case "f64/$name.d4.pipeline2" build/sk-sim --net "$net" --devices 4 --pipeline 2 --micro 2 --dtype f64 --steps 11 --check --report
    # shellcheck disable=SC2086
    run_case "f64/$name.d4.hsdp" build/sk-sim --net "$net" --devices 4 --hsdp ,0 $f64 --check
    # shellcheck disable=SC2086
    run_case "f64/$name.d8.recursive_programming" build/sk-sim --net "$net" --devices 8 --mode recursive_programming $f64 --check
  done
}

example_runs() {
  run_case example/operator_parallel.d8.check build/operator_parallel --steps 11 --check
  run_case example/operator_parallel.d8.layouts build/operator_parallel --steps 11 --layouts --dataset-strategy full_batch
  run_case example/operator_parallel.d1 build/operator_parallel --devices 1 --steps 11
}

# ---- a whole snapshot ----------------------------------------------------------------------

build_tree() {
  # and the .npy files the networks read, in a tree whose Makefile writes them (make data)
  local data=""
  if grep -q '^data:' "$1/Makefile"; then data=data; fi
  if ! make -C "$1" -j2 build/sk-layout build/sk-sim build/operator_parallel $data >"$scratch/make.log" 2>&1; then
    echo "behaviour: the build of $1 failed:" >&2
    tail -20 "$scratch/make.log" >&2
    exit 2
  fi
}

# snapshot TREE OUTDIR: builds TREE and writes every case into OUTDIR; says how many
snapshot() {
  tree=$1 snap=$2 ncases=0
  mkdir -p "$snap"
  if [ -n "$(ls -A "$snap")" ]; then echo "behaviour: $snap is not empty" >&2; exit 2; fi
  build_tree "$tree"
  layout_matmuls
  layout_elementwise
  layout_normalisations
  layout_reductions_and_moves
  layout_lookups
  layout_errors
  sim_dumps
  sim_f64
  example_runs
  echo "behaviour: $ncases cases of $tree in $snap"
}

# ---- --compare -----------------------------------------------------------------------------

cleanup() {
  if [ -n "${rev_tree:-}" ] && [ -d "$rev_tree" ]; then
    git -C "$here" worktree remove --force "$rev_tree" >/dev/null 2>&1 || true
    rm -rf "$rev_tree"
    git -C "$here" worktree prune
  fi
  rm -rf "$scratch"
}

# case_list A B: every case file under A or B (absolute folders), once, relative to them
case_list() {
  (cd "$1" && find . -type f; cd "$2" && find . -type f) | sed 's|^\./||' | sort -u
}

# differing_cases A B: the cases missing from one of A and B or differing between them
differing_cases() {
  local f
  case_list "$1" "$2" | while read -r f; do
    cmp -s "$1/$f" "$2/$f" 2>/dev/null || echo "$f"
  done
}

compare() {
  local rev=$1 out=${2:-} keep=yes sha total ndiff
  sha=$(git -C "$here" rev-parse --verify --quiet "$rev^{commit}") || { echo "behaviour: no commit '$rev'" >&2; exit 2; }
  if [ -z "$out" ]; then out=$(mktemp -d); keep=no; else out=$(mkdir -p "$out" && cd "$out" && pwd); fi
  rev_tree=$(mktemp -d)
  git -C "$here" worktree add --detach "$rev_tree" "$sha" >/dev/null 2>&1
  snapshot "$rev_tree" "$out/rev"
  snapshot "$here" "$out/tree"
  diff -r "$out/rev" "$out/tree" >"$out/diff" || true
  total=$(case_list "$out/rev" "$out/tree" | wc -l)
  differing_cases "$out/rev" "$out/tree" >"$out/differing"
  ndiff=$(wc -l <"$out/differing")
  echo "behaviour: $total cases, $ndiff differ"
  if [ "$ndiff" -eq 0 ]; then
    [ "$keep" = yes ] || rm -rf "$out"
    return 0
  fi
  sed 's/^/  /' "$out/differing"
  echo "behaviour: the first lines of the diff:"
  head -20 "$out/diff" | sed 's/^/  /'
  echo "behaviour: the snapshots are in $out (rev: $rev = $sha, tree: $here; diff -r in $out/diff)"
  return 1
}

# ---- main ----------------------------------------------------------------------------------

[ $# -ge 1 ] || usage
scratch=$(mktemp -d)
rev_tree=
trap cleanup EXIT
trap 'exit 130' INT TERM
case $1 in
  --compare)
    if [ $# -lt 2 ] || [ $# -gt 3 ]; then usage; fi
    compare "$2" "${3:-}"
    ;;
  -*) usage ;;
  *)
    [ $# -eq 1 ] || usage
    snapshot "$here" "$(mkdir -p "$1" && cd "$1" && pwd)"
    ;;
esac
