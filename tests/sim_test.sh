#!/bin/sh
# Checks build/sk-sim from the outside on the shipped networks (examples/nets): each trains on
# one device and its loss falls within 20 steps; the operator-parallel network in f64 prints
# the losses of the hand-wired `operator_parallel --devices 1` (compared at that program's 7
# decimals; they agree to the last bit, see docs/training.md); f16 / bf16 / momentum runs go;
# the output lines keep the tutorial's exact format; bad input exits non-zero with a message.
# Run from anywhere; `make test` runs it after the unit tests.
set -u
cd "$(dirname "$0")/.."
BIN=build/sk-sim
[ -x "$BIN" ] || { echo "sim: $BIN is missing (run make first)"; echo "sim: 0 passed, 1 failed"; exit 1; }
. tests/check_lib.sh

# losses FILE: the printed losses, one per line
losses() { sed -n 's/^epoch: [0-9]* step: [0-9]*, loss is \([-0-9.eE+]*\)$/\1/p' "$1"; }
# first_mem FILE DEVICE COLUMN: the report's memory figure COLUMN (2 parameters .. 10 peak_acts,
# as the table's columns count with its name first) of the class whose first device is DEVICE
first_mem() {
  awk -v d="$2" -v j="$3" '/^class [0-9]+ \(devices / { r = $4; sub(/\).*/, "", r); if (r ~ "^" d "([-,]|$)") print $(NF - 10 + j) }' "$1"
}

# falls NAME ARGS...: exit 0, at least 2 loss lines, the last below the first
falls() {
  name=$1; shift
  "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  n=$(losses "$tmp/out" | wc -l)
  first=$(losses "$tmp/out" | head -1); last=$(losses "$tmp/out" | tail -1)
  if [ $rc -ne 0 ]; then bad "$name: exit $rc: $(cat "$tmp/err")"
  elif [ "$n" -lt 2 ]; then bad "$name: $n loss lines"
  elif ! awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then bad "$name: loss $first -> $last does not fall"
  else ok; fi
}

# --steps counts steps across epochs: the transformer's epoch is 64 steps
"$BIN" --net examples/nets/transformer.json --steps 70 >"$tmp/out" 2>&1
if grep -q '^epoch: 1 step: 0, loss' "$tmp/out" && grep -q '^# 1 device, f32, 70 steps' "$tmp/out"; then ok
else bad "--steps 70 over a 64-step epoch: $(tail -3 "$tmp/out")"; fi

for net in operator_parallel recursive_programming transformer attention dense_mutmul; do
  falls "$net f32" --net examples/nets/$net.json --steps 20
done
falls "operator_parallel f64" --net examples/nets/operator_parallel.json --steps 20 --dtype f64
falls "transformer bf16" --net examples/nets/transformer.json --steps 20 --dtype bf16
falls "operator_parallel f16 momentum" --net examples/nets/operator_parallel.json --steps 20 --dtype f16 --optimizer momentum

# every loss line in the tutorial's exact format, nothing after the number
"$BIN" --net examples/nets/operator_parallel.json --steps 11 --dtype f64 >"$tmp/out" 2>&1
grep '^epoch: ' "$tmp/out" | grep -v 'test accuracy' >"$tmp/lines"
if [ "$(wc -l <"$tmp/lines")" -eq 2 ] && ! grep -vqE '^epoch: 0 step: (0|10), loss is [0-9]\.[0-9]{16}$' "$tmp/lines"; then ok
else bad "loss lines: $(cat "$tmp/lines")"; fi
grep -qE '^epoch: 0 test accuracy: 0\.[0-9]{4}$' "$tmp/out" && ok || bad "no test accuracy line"

# the single-device reference equals the hand-wired demo on one device
if [ -x build/operator_parallel ]; then
  build/operator_parallel --devices 1 --steps 31 >"$tmp/demo" 2>&1
  "$BIN" --net examples/nets/operator_parallel.json --steps 31 --dtype f64 >"$tmp/sim" 2>&1
  losses "$tmp/demo" >"$tmp/a"; losses "$tmp/sim" | awk '{ printf "%.7f\n", $1 }' >"$tmp/b"
  if [ -s "$tmp/a" ] && cmp -s "$tmp/a" "$tmp/b"; then ok
  else bad "operator_parallel.json f64 losses differ from operator_parallel --devices 1"; paste "$tmp/a" "$tmp/b" | head; fi
else bad "build/operator_parallel is missing"; fi

# N devices train like one: --check over a few steps, every shipped network, f64 to 1e-12
# (only the order of summation differs) and f32 to 1e-5 (measured: ~6e-7 on the transformer)
checks() {
  name=$1; tol=$2; shift 2
  "$BIN" "$@" --check >"$tmp/out" 2>"$tmp/err"; rc=$?
  d=$(sed -n 's/^check: passed: max relative loss difference \([-0-9.eE+]*\) over [0-9]* steps (tolerance [^)]*)$/\1/p' "$tmp/out")
  if [ $rc -ne 0 ]; then bad "$name: exit $rc: $(cat "$tmp/err")"
  elif [ -z "$d" ]; then bad "$name: no check line: $(tail -2 "$tmp/out")"
  elif ! awk -v d="$d" -v t="$tol" 'BEGIN { exit !(d <= t) }'; then bad "$name: difference $d above $tol"
  else ok; fi
}
for net in operator_parallel recursive_programming transformer attention dense_mutmul megatron_block four_matmul; do
  checks "$net 8 devices f64" 1e-12 --net examples/nets/$net.json --devices 8 --steps 12 --dtype f64
done
# the run as a user first meets it: a whole epoch in f32 with the default tolerance (a loss that
# falls without bound would end in infinities here)
for net in megatron_block four_matmul; do
  checks "$net 8 devices, a whole epoch f32" 1e-4 --net examples/nets/$net.json --devices 8
done
checks "transformer 4 devices f32" 1e-5 --net examples/nets/transformer.json --devices 4 --steps 12
# bf16: 8 significant bits; the forward AllReduces sum in bf16 (MindSpore's default without
# fp32 communication), rounding each partial sum, so 12 steps drift by a few bf16 ulps (2^-8 each)
checks "transformer 8 devices bf16" 3e-2 --net examples/nets/transformer.json --devices 8 --steps 12 --dtype bf16
checks "transformer 8 devices, dataset strategy tuple" 1e-12 --net examples/nets/transformer.json --devices 8 --steps 12 --dtype f64 --dataset-strategy "((2,1),(2,))"
checks "operator_parallel 8 devices full batch" 1e-12 --net examples/nets/operator_parallel.json --devices 8 --steps 12 --dtype f64 --dataset-strategy full_batch
checks "operator_parallel 8 devices, dataset strategy as layouts" 1e-12 --net examples/nets/operator_parallel.json --devices 8 --steps 12 --dtype f64 \
  --dataset-strategy '(Layout((2,4),("dp","mp"))("dp","None","None","None"), Layout((4,),("dp",))("dp",))'
checks "operator_parallel 2 devices" 1e-12 --net examples/nets/operator_parallel.json --devices 2 --steps 12 --dtype f64
# layouts on every operator (tests/nets/layouts.json: layouts on a BatchMatMul, a ReLU and a
# LayerNorm, tuples of axes among them, and an output layout on a MatMul, moved after its
# AllReduce): 8 devices train like one, f64 and f32
checks "layouts 8 devices f64" 1e-12 --net tests/nets/layouts.json --devices 8 --steps 12 --dtype f64
checks "layouts 8 devices f32" 1e-4 --net tests/nets/layouts.json --devices 8 --steps 30
# issue 37's operators (tests/nets/ops37.json: SiLU, RmsNorm, Sigmoid, MAELoss with labels [32,1]
# broadcast against [32,10], _VirtualLoss as the loss, a strategy on each; ops37_layouts.json:
# layouts on each), fed from .npy files (build/data/tests/, written by make): 8 devices train like one
checks "ops37 strategies 8 devices f64" 1e-12 --net tests/nets/ops37.json --devices 8 --steps 12 --dtype f64
checks "ops37 layouts 8 devices f64" 1e-12 --net tests/nets/ops37_layouts.json --devices 8 --steps 12 --dtype f64
# number operands (tests/nets/operands.json: Mul(x, 0.5), Add(y, 1.0), Sub(0.25, z), each
# number's strategy tuple ()): 8 devices train like one
checks "operands 8 devices f64" 1e-12 --net tests/nets/operands.json --devices 8 --steps 12 --dtype f64
# MindSpore's parallel unit-test networks under NetWithLoss's VirtualLoss, with the tests'
# dataset_strategy full_batch, fed from build/data/ (make): attention.json (test_self_attention.py,
# test_self_attention_semi's strategies) and dense_mutmul.json (test_auto_parallel_transformer.py's
# DenseMutMulNet, no strategies: auto_parallel, searched; exhaustive stands in for MindSpore's
# dynamic_programming). 8 devices train like one over 20 steps. DenseMutMulNet's weights are the
# test's constant 0.01, which keeps every column equal: drawn ones (a copy of the file, its data
# given by --data) would also catch a column mix-up, over 10 steps (the ReLUs all die by step 12)
checks "attention 8 devices f64, full_batch" 1e-12 --net examples/nets/attention.json --devices 8 --steps 20 --dtype f64 \
  --dataset-strategy full_batch
for mode in exhaustive recursive_programming sharding_propagation; do
  checks "dense_mutmul 8 devices f64, full_batch, --mode $mode" 1e-12 --net examples/nets/dense_mutmul.json --devices 8 \
    --steps 20 --dtype f64 --dataset-strategy full_batch --mode $mode
done
sed 's/"kind": "constant"/"kind": "normal"/' examples/nets/dense_mutmul.json >"$tmp/dm_drawn.json"
[ "$(grep -c '"kind": "normal"' "$tmp/dm_drawn.json")" -eq 4 ] && ok || bad "dense_mutmul: not 4 constant weights to draw"
checks "dense_mutmul with drawn weights, 8 devices f64, --mode exhaustive" 1e-12 --net "$tmp/dm_drawn.json" \
  --data x=build/data/dense_mutmul/x.npy --devices 8 --steps 10 --dtype f64 --dataset-strategy full_batch --mode exhaustive
# a dead branch (tests/nets/dead_branch.json: the tutorial with an auxiliary head no operator
# reads) runs no backward anywhere: N devices train like one, with a pipeline, hsdp, a search
DEAD="--net tests/nets/dead_branch.json --steps 6 --dtype f64 --optimizer momentum"
for run in "2" "8" "8 --pipeline 2 --micro 2" "8 --hsdp -1,0" "8 --hsdp -1,0,level2 --pipeline 2 --micro 2" \
           "8 --mode sharding_propagation"; do
  checks "dead branch, --devices $run" 1e-12 $DEAD --devices $run
done
# frozen parameters (tests/nets/frozen.json: a mask and a position table with requires_grad
# false, read beside trained weights): no gradient, Mirror or update, N devices like one
FROZEN="--net tests/nets/frozen.json --steps 6 --dtype f64 --optimizer adam"
for run in "8" "8 --pipeline 2 --micro 2" "8 --hsdp -1,0" "8 --hsdp -1,0,level2 --pipeline 2 --micro 2"; do
  checks "frozen parameters, --devices $run" 1e-12 $FROZEN --devices $run
done
# parallel_mode: the recursive-programming network sets no strategy; every mode's plan trains
# like one device (f64: only the order of summation differs)
for mode in semi_auto sharding_propagation recursive_programming exhaustive; do
  checks "recursive_programming 8 devices --mode $mode" 1e-12 --net examples/nets/recursive_programming.json --devices 8 \
    --steps 4 --dtype f64 --mode $mode
done
# --print-strategies: one line per operator in MindSpore's tuple syntax, before the first step,
# then the search's "# <mode>: plan cost C bytes|us, searched in T ms"
TUPLE='\([0-9]+(, [0-9]+)*,?\)'
for mode in sharding_propagation recursive_programming exhaustive; do
  "$BIN" --net examples/nets/recursive_programming.json --devices 8 --steps 1 --mode $mode --print-strategies >"$tmp/out" 2>"$tmp/err"
  rc=$?
  sed '/^epoch: /,$d' "$tmp/out" >"$tmp/head"
  n=$(grep -cE "^(flatten|fc1|relu1|fc2|relu2|fc3|loss) \\($TUPLE(, $TUPLE)*,?\\)$" "$tmp/head")
  if [ $rc -eq 0 ] && [ "$n" -eq 7 ] && [ "$(wc -l <"$tmp/head")" -eq 8 ] &&
     grep -qE "^# $mode: plan cost [0-9.e+]+ bytes, searched in [0-9.]+ ms$" "$tmp/head"; then ok
  else bad "--mode $mode --print-strategies: exit $rc, $n strategy lines: $(cat "$tmp/head" "$tmp/err")"; fi
done
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --steps 1 --mode exhaustive --print-strategies \
  --link 5,25 --device-tflops 10 >"$tmp/out" 2>&1
grep -qE '^# exhaustive: plan cost [0-9.e+]+ us, searched in' "$tmp/out" && ok || bad "--link: the plan cost is not in us: $(grep '^#' "$tmp/out")"
# semi_auto prints the strategies but no search line
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --print-strategies >"$tmp/out" 2>&1
if grep -qx 'fc1 ((2, 4), (4, 1))' "$tmp/out" && ! grep -q 'plan cost' "$tmp/out"; then ok
else bad "semi_auto --print-strategies: $(sed -n 1,8p "$tmp/out")"; fi
# optimizer parallel at every level, with gradient accumulation (level2's sharded sums) and a
# partial shard_size: still one device's losses (f64; only the order of summation differs)
for lv in level1 level2 level3; do
  checks "operator_parallel 8 devices hsdp $lv, accumulation 3" 1e-12 --net examples/nets/operator_parallel.json --devices 8 \
    --steps 12 --dtype f64 --optimizer adam --hsdp -1,0,$lv --grad-accumulation-step 3
done
checks "operator_parallel 8 devices hsdp shard_size 2 (fc3's Mirror over 4)" 1e-12 --net examples/nets/operator_parallel.json --devices 8 --steps 12 --dtype f64 --hsdp 2,0
# --parameter-broadcast: each device draws its model from seed + rank, the broadcast gives every
# replica its owner's values, and --check's reference starts from the broadcast model: one
# device's losses again, data parallel and under hsdp (per shard, partial shard_size, level3)
checks "operator_parallel 8 devices parameter_broadcast" 1e-12 --net examples/nets/operator_parallel.json --devices 8 \
  --steps 12 --dtype f64 --parameter-broadcast
checks "transformer 8 devices parameter_broadcast, hsdp 2,0,level3" 1e-12 --net examples/nets/transformer.json --devices 8 \
  --steps 12 --dtype f64 --optimizer adam --parameter-broadcast --hsdp 2,0,level3
# ... and the broadcast model is not seed 1's: the first loss differs from a run without it
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --dtype f64 >"$tmp/nb" 2>&1
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --dtype f64 --parameter-broadcast >"$tmp/pb" 2>&1
l0=$(losses "$tmp/nb"); l1=$(losses "$tmp/pb")
if [ -n "$l0" ] && [ -n "$l1" ] && [ "$l0" != "$l1" ]; then ok
else bad "--parameter-broadcast: first loss '$l1', without it '$l0' (the devices should draw seed + rank)"; fi

# the report under hsdp: the ReduceScatters of the sharded gradients, and level3's lower peak
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 2 --hsdp -1,0 --report >"$tmp/h1" 2>&1
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 2 --hsdp -1,0,level3 --report >"$tmp/h3" 2>&1
p1=$(first_mem "$tmp/h1" 0 8); p3=$(first_mem "$tmp/h3" 0 8)
if grep -q '^reduce_scatter  *2 ' "$tmp/h1" && [ -n "$p1" ] && [ -n "$p3" ] && [ "$p3" -lt "$p1" ]; then ok
else bad "hsdp report: peak_params level1 '$p1' level3 '$p3': $(grep reduce_scatter "$tmp/h1")"; fi

# Parameter(..., parallel_optimizer=False) on fc1.weight: still one device's losses under hsdp,
# --print-strategies says it stays whole, and the report holds it whole (more parameter bytes)
sed 's/"name": "fc1.weight",/"name": "fc1.weight", "parallel_optimizer": false,/' examples/nets/operator_parallel.json >"$tmp/optout.json"
checks "operator_parallel 8 devices hsdp, fc1.weight parallel_optimizer=False" 1e-12 --net "$tmp/optout.json" --devices 8 \
  --steps 12 --dtype f64 --optimizer adam --hsdp -1,0
"$BIN" --net "$tmp/optout.json" --devices 8 --steps 2 --hsdp -1,0 --report --print-strategies >"$tmp/oo" 2>&1
q1=$(first_mem "$tmp/h1" 0 2); q0=$(first_mem "$tmp/oo" 0 2)
if grep -qx 'hsdp: fc1.weight: not sharded (parallel_optimizer=False)' "$tmp/oo" && grep -q '^hsdp: fc3.weight: shard ' "$tmp/oo" &&
  [ -n "$q0" ] && [ -n "$q1" ] && [ "$q0" -gt "$q1" ]; then ok
else bad "parallel_optimizer=False: parameters $q0 (all sharded: $q1): $(grep '^hsdp:' "$tmp/oo")"; fi

# the same program on MPI processes: 2 processes, rank 0 alone prints, the same check
if command -v mpirun.openmpi >/dev/null 2>&1; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun.openmpi --oversubscribe -np 2 \
    "$BIN" --net examples/nets/operator_parallel.json --devices 2 --steps 12 --dtype f64 --check >"$tmp/out" 2>"$tmp/err"
  rc=$?
  d=$(sed -n 's/^check: passed: max relative loss difference \([-0-9.eE+]*\) over 12 steps (tolerance [^)]*)$/\1/p' "$tmp/out")
  if [ $rc -eq 0 ] && [ -n "$d" ] && awk -v d="$d" 'BEGIN { exit !(d <= 1e-12) }' &&
     [ "$(grep -c '^check:' "$tmp/out")" -eq 1 ] && grep -q 'mpi backend' "$tmp/out"; then ok
  else bad "MPI: exit $rc: $(tail -3 "$tmp/out") $(cat "$tmp/err")"; fi
else bad "mpirun.openmpi is missing (make deps)"; fi

# --timeout bounds a hung peer: 4 processes train, and once rank 0 has printed a loss, rank 2 is
# stopped (SIGSTOP; each rank's pid comes from a wrapper); with --timeout 5 mpirun must exit
# non-zero within 15 s of the stop, a message naming world rank 2. The stopped rank is then
# continued and killed if anything is left of it. On threads, --timeout is taken as such.
if command -v mpirun.openmpi >/dev/null 2>&1; then
  mkdir "$tmp/hang"
  printf '#!/bin/sh\necho $$ >"$RANK_PIDS/rank$OMPI_COMM_WORLD_RANK.pid"\nexec "$@"\n' >"$tmp/hang/rankpid.sh"
  RANK_PIDS=$tmp/hang OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun.openmpi \
    --oversubscribe -np 4 -x RANK_PIDS sh "$tmp/hang/rankpid.sh" "$BIN" --net examples/nets/transformer.json --devices 4 \
    --steps 100000 --timeout 5 >"$tmp/hang/out" 2>"$tmp/err" &
  launcher=$!
  n=0 # until rank 0 has printed a loss (every rank trains) and rank 2's pid is known
  while [ $n -lt 300 ] && ! { grep -q 'loss is' "$tmp/hang/out" && [ -s "$tmp/hang/rank2.pid" ]; } 2>/dev/null; do
    sleep 0.2; n=$((n + 1))
  done
  victim=$(cat "$tmp/hang/rank2.pid" 2>/dev/null)
  [ -n "$victim" ] && kill -STOP "$victim"
  t0=$(date +%s.%N)
  wait "$launcher"; rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ -n "$victim" ] && grep -q sk-sim "/proc/$victim/cmdline" 2>/dev/null; then kill -CONT "$victim"; kill "$victim"; fi
  if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && awk -v s="$secs" 'BEGIN { exit !(s <= 15) }' &&
     grep -q '^sk-sim: .*timed out.*world rank 2\b' "$tmp/err"; then ok
  else bad "--timeout 5, rank 2 (pid ${victim:-none}) stopped: exit $rc after $secs s: $(grep -v 'instead' "$tmp/err" | head -4)"; fi
else bad "mpirun.openmpi is missing (make deps)"; fi
"$BIN" --net examples/nets/transformer.json --devices 2 --steps 2 --timeout 5 >"$tmp/out" 2>&1 && ok ||
  bad "--timeout 5 on threads: $(tail -2 "$tmp/out")"

# the report: a memory section with one row per device class (all 8 devices alike here), the
# communication, the modelled time
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 3 --report --link 5,25 --device-tflops 10 >"$tmp/out" 2>&1
if grep -q '^memory' "$tmp/out" && [ "$(grep -cE '^class [0-9]+ \(devices ' "$tmp/out")" -eq 1 ] &&
   grep -qE '^class 0 \(devices 0-7\) +[0-9]+ ' "$tmp/out" &&
   grep -q '^communication per step' "$tmp/out" && grep -qE '^modelled step time: [0-9.]+ ms' "$tmp/out"; then ok
else bad "report: $(cat "$tmp/out")"; fi

# --dry-run prints --report's sections of one step, equal to an executed step's (the memory table,
# the communication, the compute), without a world: under a pipeline with zero_bubble_v and
# recomputation; with 16-bit gradient sync, fusion, hsdp and recomputation; under gradient
# accumulation with hsdp level2; a search under a pipeline
TR6=embed,embed_pos,b0.ln1,b0.ln1_2d,b0.q,b0.q_4d
while read -r dry; do
  eval "set -- $dry"
  "$BIN" "$@" --steps 1 --report >"$tmp/run" 2>&1; r1=$?
  "$BIN" "$@" --dry-run >"$tmp/dry" 2>&1; r2=$?
  sed -n '/^memory/,/^compute per step/p' "$tmp/run" >"$tmp/run_s"
  sed -n '/^memory/,/^compute per step/p' "$tmp/dry" >"$tmp/dry_s"
  if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ -s "$tmp/dry_s" ] && cmp -s "$tmp/run_s" "$tmp/dry_s" && ! grep -q 'loss is' "$tmp/dry" &&
     head -1 "$tmp/dry" | grep -qE '^# dry run: [0-9]+ devices in [0-9]+ class(es)?, '; then ok
  else bad "--dry-run $*: exit $r2 (executed $r1), not the executed step's report: $(diff "$tmp/run_s" "$tmp/dry_s" | head -4)"; fi
done <<EOF
--net examples/nets/transformer.json --devices 8 --pipeline 2 --micro 4 --scheduler zero_bubble_v --recompute $TR6
--net examples/nets/operator_parallel.json --devices 8 --recompute fc1,relu1 --fusion size:1 --dtype bf16 --no-gradient-fp32-sync --hsdp 2,0
--net examples/nets/transformer.json --devices 8 --grad-accumulation-step 2 --hsdp 2,0,level2
--net examples/nets/transformer.json --devices 16 --pipeline 2 --micro 2 --mode recursive_programming
--net examples/nets/transformer.json --devices 8 --topology 2x4 --intra 2,150 --inter 10,25 --device-tflops 10
EOF
# the dry run's modelled step time: the executed step's line (tests/test_dryrun.c checks it to
# 1e-9), redistributions by peer access and hsdp under a pipeline included
while read -r cfg; do
  eval "set -- $cfg"
  "$BIN" "$@" --dry-run >"$tmp/dry" 2>"$tmp/err"; r1=$?
  "$BIN" "$@" --steps 1 --report >"$tmp/run" 2>&1; r2=$?
  want=$(grep '^modelled step time: ' "$tmp/run")
  if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ -n "$want" ] && [ "$(grep '^modelled step time: ' "$tmp/dry")" = "$want" ]; then ok
  else bad "--dry-run step time $*: exit $r1/$r2, '$(grep '^modelled' "$tmp/dry")' against '$want' $(cat "$tmp/err")"; fi
done <<EOF
--net examples/nets/recursive_programming.json --devices 8 --link 5,25 --device-tflops 10
--net examples/nets/transformer.json --devices 2 --link 5,25 --device-tflops 10
--net examples/nets/operator_parallel.json --devices 2 --topology 1x2 --intra 2,150 --inter 10,25 --device-tflops 10
--net examples/nets/operator_parallel.json --devices 8 --link 5,25 --device-tflops 10
--net examples/nets/transformer.json --devices 8 --topology 2x4 --intra 2,150 --inter 10,25 --device-tflops 10
--net examples/nets/transformer.json --devices 8 --pipeline 2 --micro 2 --hsdp 2,0 --link 5,25 --device-tflops 10
EOF

# a hierarchical cluster: the modelled step time names it; each row says the algorithm its calls
# take: the tensor-parallel AllReduce on 4 devices of one node rings over the fast link, the
# 8-device AllReduce across both nodes of this small gradient goes hierarchical (docs/cost-models.md)
"$BIN" --net examples/nets/transformer.json --devices 8 --steps 2 --report --topology 2x4 --intra 2,150 --inter 10,25 \
  --device-tflops 10 >"$tmp/out" 2>&1
if grep -qE '^modelled step time: [0-9.]+ ms \(topology 2x4, intra 2 us, 150 GB/s, inter 10 us, 25 GB/s; devices 10 TFLOPS\)$' "$tmp/out" &&
   grep -qE '^allreduce +4 .* g1 +ring$' "$tmp/out" && grep -qE '^allreduce +8 .* g0 +hierarchical$' "$tmp/out" &&
   grep -qE '^Redistribution .* p2p$' "$tmp/out"; then ok
else bad "--topology 2x4 report: $(tail -8 "$tmp/out")"; fi
for bad_topo in "--topology 2x4 --intra 2,150" "--topology 2x3 --intra 2,150 --inter 10,25 --device-tflops 1" \
  "--topology 2x4 --intra 2,150 --inter 10,25 --link 1,1 --device-tflops 1" "--topology 0x4 --intra 2,150 --inter 10,25 --device-tflops 1" \
  "--topology 2x4 --intra 2,150 --inter 10,25"; do
  eval "set -- $bad_topo"
  "$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 1 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq 2 ] && grep -qE -- '--topology|together' "$tmp/err"; then ok; else bad "$bad_topo: exit $rc: $(cat "$tmp/err")"; fi
done
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --topology 2x4 --intra 2,150 --inter 10,25 \
  --device-tflops 1 --mode sharding_propagation >"$tmp/out" 2>"$tmp/err"
# a search under a topology prices on it (the dry run's functions) and runs the plan
if [ $? -eq 0 ]; then ok; else bad "a search under --topology: $(cat "$tmp/err")"; fi
# ... and on far more devices than threads could run: 512, in 2 classes (the inputs' moves
# from the dataset strategy's cut send by rank)
"$BIN" --net examples/nets/transformer.json --devices 512 --dataset-strategy "((2,1),(2,))" --dry-run >"$tmp/out" 2>&1
if [ $? -eq 0 ] && head -1 "$tmp/out" | grep -q '^# dry run: 512 devices in 2 classes, ' &&
   [ "$(grep -cE '^class [0-9]+ \(devices ' "$tmp/out")" -eq 2 ] && grep -qE '^class 0 \(devices 0,2,4,\.\.\. \(256 devices\)\) ' "$tmp/out" &&
   grep -q '^allreduce  *512 ' "$tmp/out" && grep -q '^compute per step (device 0): ' "$tmp/out"; then ok
else bad "--dry-run on 512 devices: $(tail -3 "$tmp/out")"; fi

# device classes: devices with the same stage, group shapes and redistribution sends are one
# class, simulated once. dense_mutmul data parallel: one class of 8, flat or on 2 nodes of 4
# (every group spans both nodes alike); the transformer with its inputs cut 2 ways (the moves of
# those inputs send by rank): 2 classes on 8 devices, and under --pipeline 2 twice that, no class
# across the stages
for cl in "--link 5,25 --device-tflops 10" "--topology 2x4 --intra 2,150 --inter 10,25 --device-tflops 10"; do
  eval "set -- $cl"
  "$BIN" --net examples/nets/dense_mutmul.json --devices 8 --dry-run "$@" --report-json "$tmp/cl.json" >"$tmp/out" 2>&1
  if [ $? -eq 0 ] && head -1 "$tmp/out" | grep -q '^# dry run: 8 devices in 1 class, ' && grep -qE '^class 0 \(devices 0-7\) ' "$tmp/out" &&
     grep -q '"devices": 8,' "$tmp/cl.json" && [ "$(grep -c '"id"' "$tmp/cl.json")" -eq 1 ]; then ok
  else bad "dense_mutmul classes, $cl: $(head -4 "$tmp/out")"; fi
done
"$BIN" --net examples/nets/transformer.json --devices 8 --dataset-strategy "((2,1),(2,))" --dry-run >"$tmp/out" 2>&1
if [ $? -eq 0 ] && head -1 "$tmp/out" | grep -q '^# dry run: 8 devices in 2 classes, ' &&
   grep -qE '^class 0 \(devices 0,2,5,\.\.\. \(4 devices\)\) ' "$tmp/out" && grep -qE '^class 1 \(devices 1,3-4,6\) ' "$tmp/out"; then ok
else bad "transformer classes on 8: $(head -5 "$tmp/out")"; fi
if command -v python3 >/dev/null 2>&1; then
  "$BIN" --net examples/nets/transformer.json --devices 8 --pipeline 2 --micro 2 --topology 2x4 --intra 2,150 --inter 10,25 \
    --device-tflops 10 --dataset-strategy "((2,1),(2,))" --dry-run --report-json "$tmp/cl.json" >"$tmp/out" 2>&1
  if [ $? -eq 0 ] && python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(not (len(d["classes"]) == 4 and all(len({r // 4 for r in c["devices"]}) == 1 for c in d["classes"])))' "$tmp/cl.json"; then ok
  else bad "transformer classes under --pipeline 2: $(head -7 "$tmp/out")"; fi
fi

# a strategy needing more devices falls back to data parallel, and says so
"$BIN" --net examples/nets/operator_parallel.json --devices 4 --steps 2 >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] && grep -q "operator 'fc1'.*data parallel instead" "$tmp/err"; then ok
else bad "fallback on 4 devices: $(cat "$tmp/err")"; fi

# the transformer compiles for 4096 devices with a dataset strategy that fits its batch of 16
"$BIN" --net examples/nets/transformer.json --devices 4096 --dataset-strategy "((2,1),(2,))" --dump-program 4095 >"$tmp/out" 2>&1
if head -1 "$tmp/out" | grep -q '^# device 4095 of 4096' && grep -q '^# compiled for 4096 devices in' "$tmp/out"; then ok
else bad "4096 devices: $(tail -2 "$tmp/out")"; fi

# --dump-program prints device RANK's program and exits
# (the create section lists the states the optimizer keeps: Adam two, the network's SGD none)
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --optimizer adam --dump-program 4 >"$tmp/out" 2>&1
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --dump-program 4 >"$tmp/sgd" 2>&1
if head -1 "$tmp/out" | grep -q '^# device 4 of 8' && grep -q '^#[0-9]* Update parameters$' "$tmp/out" && ! grep -q 'loss is' "$tmp/out" &&
  grep -q '^# create: [0-9]* buffers' "$tmp/out" && grep -q '^#c[0-9]* Alloc fc1.weight buffer=state state=0 memory=optimizer bytes=[0-9]*$' "$tmp/out" &&
  grep -q '^#c[0-9]* Alloc fc1.weight buffer=state state=1 memory=optimizer bytes=[0-9]*$' "$tmp/out" &&
  grep -q '^# create: [0-9]* buffers' "$tmp/sgd" && ! grep -q 'buffer=state' "$tmp/sgd" &&
  seed=$(sed -n 's/^#\([0-9]*\) SeedLoss loss$/\1/p' "$tmp/out") && [ -n "$seed" ] && ! grep -q '^#e' "$tmp/out" &&
  grep -q "^# evaluation: the training steps #0..#$((seed - 1)) (the forward part)\$" "$tmp/out"; then ok
else bad "dump-program: $(head -3 "$tmp/out")"; fi

# ---- the AutoParallel knobs: each keeps --check holding and shows its effect ----
OP="--net examples/nets/operator_parallel.json --devices 8 --steps 12 --dtype f64"
"$BIN" $OP >"$tmp/default" 2>&1
# gradients_mean / loss_repeated_mean rescale gradients: the reference applies the same factors,
# and the losses move away from the default run's
for knob in --gradients-mean --no-loss-repeated-mean; do
  checks "operator_parallel $knob" 1e-12 $OP $knob
  "$BIN" $OP $knob >"$tmp/knob" 2>&1
  if [ "$(losses "$tmp/knob" | tail -1)" != "$(losses "$tmp/default" | tail -1)" ]; then ok
  else bad "$knob: the same last loss as the default run"; fi
done
checks "transformer --gradients-mean --no-loss-repeated-mean" 1e-12 --net examples/nets/transformer.json --devices 8 --steps 12 --dtype f64 --gradients-mean --no-loss-repeated-mean

# allreduce_bytes FILE: the report's AllReduce bytes per step, summed over groups
allreduce_bytes() { awk '$1 == "allreduce" { s += $4 } END { print s + 0 }' "$1"; }
allreduce_calls() { awk '$1 == "allreduce" { s += $3 } END { print s + 0 }' "$1"; }
# bf16: gradients AllReduce in f32 by default, in 16 bits without fp32 sync; fp32 communication
# puts the forward AllReduces in f32 too. The bytes move; the losses change; --check holds.
TR="--net examples/nets/transformer.json --devices 8 --steps 12 --dtype bf16"
"$BIN" $TR --report >"$tmp/b0" 2>&1
"$BIN" $TR --report --no-gradient-fp32-sync >"$tmp/b1" 2>&1
"$BIN" $TR --report --fp32-communication >"$tmp/b2" 2>&1
b0=$(allreduce_bytes "$tmp/b0"); b1=$(allreduce_bytes "$tmp/b1"); b2=$(allreduce_bytes "$tmp/b2")
if [ "$b1" -lt "$b0" ] && [ "$b0" -lt "$b2" ]; then ok
else bad "AllReduce bytes: default $b0, no fp32 sync $b1, fp32 communication $b2"; fi
# the losses show it where the gradient's 16-bit rounding reaches the stored parameters (Adam
# normalises the gradient; with SGD the rounding stays below a parameter's bf16 ulp)
AD="--net examples/nets/operator_parallel.json --devices 8 --steps 31 --dtype bf16 --optimizer adam"
"$BIN" $AD >"$tmp/a0" 2>&1
"$BIN" $AD --no-gradient-fp32-sync >"$tmp/a1" 2>&1
if [ -n "$(losses "$tmp/a0")" ] && [ "$(losses "$tmp/a1")" != "$(losses "$tmp/a0")" ]; then ok
else bad "16-bit gradient sync: the same losses as f32 sync"; fi
checks "transformer bf16 --no-gradient-fp32-sync" 3e-2 $TR --no-gradient-fp32-sync
checks "transformer bf16 --fp32-communication" 3e-2 $TR --fp32-communication
# under hsdp the sharded gradients' ReduceScatters and fc3's partial Mirror (over 4) are the
# gradient sync: f32 by default, bf16 without fp32 sync. The ReduceScatter bytes halve; the
# AllReduces over 4 (fc1's forward AllReduce, bf16 either way, and the partial Mirror) shrink.
HB="--net examples/nets/operator_parallel.json --devices 8 --steps 2 --dtype bf16 --hsdp 2,0 --report"
"$BIN" $HB >"$tmp/hb0" 2>&1
"$BIN" $HB --no-gradient-fp32-sync >"$tmp/hb1" 2>&1
rs_bytes() { awk '$1 == "reduce_scatter" { s += $4 } END { print s + 0 }' "$1"; }
ar4_bytes() { awk '$1 == "allreduce" && $2 == 4 { s += $4 } END { print s + 0 }' "$1"; }
r0=$(rs_bytes "$tmp/hb0"); r1=$(rs_bytes "$tmp/hb1"); a0=$(ar4_bytes "$tmp/hb0"); a1=$(ar4_bytes "$tmp/hb1")
if [ "$r1" -gt 0 ] && [ "$r0" -eq $((2 * r1)) ] && [ "$a1" -gt 0 ] && [ "$a1" -lt "$a0" ]; then ok
else bad "hsdp bf16 --no-gradient-fp32-sync: ReduceScatter bytes $r0 -> $r1, AllReduce over 4 $a0 -> $a1"; fi
checks "operator_parallel bf16 hsdp 2,0 --no-gradient-fp32-sync" 3e-2 --net examples/nets/operator_parallel.json \
  --devices 8 --steps 12 --dtype bf16 --hsdp 2,0 --no-gradient-fp32-sync

# comm_fusion: fusion changes the number of AllReduce calls, never the losses (the transformer's
# gradients share groups: auto fuses them, index:3,7 cuts the Mirrors in three segments)
FU="--net examples/nets/transformer.json --devices 8 --steps 2 --dtype f64 --report"
"$BIN" $FU --fusion none >"$tmp/f0" 2>&1
"$BIN" $FU --fusion allreduce=auto >"$tmp/f1" 2>&1
"$BIN" $FU --fusion allreduce=index:3,7 >"$tmp/f2" 2>&1
c0=$(allreduce_calls "$tmp/f0"); c1=$(allreduce_calls "$tmp/f1"); c2=$(allreduce_calls "$tmp/f2")
if awk -v a="$c0" -v b="$c1" -v c="$c2" 'BEGIN { exit !(b < c && c < a) }' &&
   [ -n "$(losses "$tmp/f0")" ] && [ "$(losses "$tmp/f0")" = "$(losses "$tmp/f1")" ]; then ok
else bad "fusion: AllReduce calls none $c0, auto $c1, index:3,7 $c2"; fi

# per-operator fusion ids (Cell.set_comm_fusion): 0 never fuses its Mirrors; another id keeps
# them out of the default id's buckets
sed 's/"type": "MatMul",/"type": "MatMul", "fusion": 0,/' examples/nets/transformer.json >"$tmp/tf0.json"
sed 's/"type": "MatMul",/"type": "MatMul", "fusion": 2,/' examples/nets/transformer.json >"$tmp/tf2.json"
"$BIN" --net "$tmp/tf0.json" --devices 8 --steps 2 --dtype f64 --report >"$tmp/i0" 2>&1
"$BIN" --net "$tmp/tf2.json" --devices 8 --steps 2 --dtype f64 --report >"$tmp/i2" 2>&1
i0=$(allreduce_calls "$tmp/i0"); i2=$(allreduce_calls "$tmp/i2")
if [ "$c1" -lt "$i2" ] && [ "$i2" -lt "$i0" ] && [ "$(losses "$tmp/i0")" = "$(losses "$tmp/f1")" ]; then ok
else bad "fusion ids: AllReduce calls default $c1, MatMuls id 2 $i2, MatMuls never $i0"; fi

# strategy files: a plan saved (a dataset tuple, fallbacks on 4 devices) and loaded into the
# bare network is the same program (the bare network's differs) and gives the same losses; a
# file that does not fit is refused naming the mismatch
TS="--net examples/nets/transformer.json --devices 4"
"$BIN" $TS --dataset-strategy "((2,1),(2,))" --save-strategy "$tmp/s.json" --dump-program 3 2>/dev/null | grep -v '^# compiled' >"$tmp/p0"
"$BIN" $TS --load-strategy "$tmp/s.json" --dump-program 3 2>/dev/null | grep -v '^# compiled' >"$tmp/p1"
"$BIN" $TS --dump-program 3 2>/dev/null | grep -v '^# compiled' >"$tmp/p2"
if [ -s "$tmp/p0" ] && cmp -s "$tmp/p0" "$tmp/p1" && ! cmp -s "$tmp/p0" "$tmp/p2"; then ok
else bad "strategy file: the loaded program differs from the saved one (or the bare one equals it)"; fi
"$BIN" $TS --steps 12 --dtype f64 --dataset-strategy "((2,1),(2,))" >"$tmp/s0" 2>&1
"$BIN" $TS --steps 12 --dtype f64 --load-strategy "$tmp/s.json" >"$tmp/s1" 2>&1
if [ -n "$(losses "$tmp/s0")" ] && [ "$(losses "$tmp/s1")" = "$(losses "$tmp/s0")" ]; then ok
else bad "strategy file: other losses: $(tail -2 "$tmp/s1")"; fi
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --save-strategy "$tmp/op.json" >/dev/null 2>&1
: >"$tmp/empty.json"

# under a pipeline (the reported pair): saved with --pipeline 2 --micro 4 and loaded with the same
# flags, the same program on both stages and the same losses; loaded with --micro 4 alone the
# file's 2 stages are taken, and with --hsdp saved, the file's hsdp (docs/strategy-files.md)
PP="--net examples/nets/operator_parallel.json --devices 8 --pipeline 2 --micro 4"
same_dumps=1
for rank in 0 7; do
  "$BIN" $PP --save-strategy "$tmp/pp.json" --dump-program $rank 2>/dev/null | grep -v '^# compiled' >"$tmp/q0"
  "$BIN" $PP --load-strategy "$tmp/pp.json" --dump-program $rank 2>/dev/null | grep -v '^# compiled' >"$tmp/q1"
  "$BIN" --net examples/nets/operator_parallel.json --devices 8 --micro 4 --load-strategy "$tmp/pp.json" \
    --dump-program $rank 2>/dev/null | grep -v '^# compiled' >"$tmp/q2"
  { [ -s "$tmp/q0" ] && cmp -s "$tmp/q0" "$tmp/q1" && cmp -s "$tmp/q0" "$tmp/q2"; } || same_dumps=0
done
if [ $same_dumps = 1 ]; then ok
else bad "pipeline strategy file: the loaded program differs: $(diff "$tmp/q0" "$tmp/q1" | head -3) $(head -2 "$tmp/q2")"; fi
"$BIN" $PP --steps 12 --dtype f64 >"$tmp/l0" 2>&1
"$BIN" $PP --steps 12 --dtype f64 --load-strategy "$tmp/pp.json" >"$tmp/l1" 2>&1
if [ -n "$(losses "$tmp/l0")" ] && [ "$(losses "$tmp/l1")" = "$(losses "$tmp/l0")" ]; then ok
else bad "pipeline strategy file: other losses: $(tail -2 "$tmp/l1")"; fi
"$BIN" $PP --hsdp -1,0,level2 --save-strategy "$tmp/ph.json" --dump-program 0 2>/dev/null | grep -v '^# compiled' >"$tmp/q0"
"$BIN" $PP --load-strategy "$tmp/ph.json" --dump-program 0 2>/dev/null | grep -v '^# compiled' >"$tmp/q1"
if grep -q ParamGather "$tmp/q0" && cmp -s "$tmp/q0" "$tmp/q1"; then ok
else bad "pipeline + hsdp strategy file: the loaded program differs"; fi

# transformer_opt (parallel_speed_up.json): the overlap options shardkit honours keep the losses;
# one it cannot honour is refused by name
printf '{"grad_computation_allreduce_overlap": true, "enable_communication_fusion": true, "recomputation_communication_overlap": false}\n' >"$tmp/speed.json"
checks "transformer with transformer_opt overlap and communication fusion" 1e-12 --net examples/nets/transformer.json --devices 8 --steps 12 --dtype f64 --transformer-opt "$tmp/speed.json"
printf '{"grad_fa_allgather_overlap": true}\n' >"$tmp/speed_bad.json"

# local norms: one line per step, device and parameter in the dump file, nothing printed
"$BIN" $OP --steps 3 --local-norm "dump:$tmp/norms" --device-local-norm >"$tmp/out" 2>&1
n=$(grep -cE '^[0-9]+ [0-7] [A-Za-z0-9_.]+ [0-9.eE+-]+$' "$tmp/norms" 2>/dev/null); n=${n:-0}
if [ "$n" -eq $((3 * 8 * 4)) ] && ! grep -qE '^[0-9]+ [0-7] ' "$tmp/out"; then ok
else bad "local norm dump: $n lines (want 3 steps x 8 devices x (3 parameters + device))"; fi
"$BIN" $OP --steps 2 --local-norm print >"$tmp/out" 2>&1
if [ "$(grep -cE '^[0-9]+ [0-7] fc[123]\.weight [0-9.eE+-]+$' "$tmp/out")" -eq $((2 * 8 * 3)) ]; then ok
else bad "local norm print: $(head -3 "$tmp/out")"; fi

# the knobs together: --check still holds (the reference applies the same gradient factors)
checks "operator_parallel, many knobs" 1e-12 $OP --steps 6 --load-strategy "$tmp/op.json" --gradients-mean \
  --no-loss-repeated-mean --fusion size:0.1 --local-norm "dump:$tmp/norms2" --device-local-norm
checks "transformer, many knobs" 1e-12 --net examples/nets/transformer.json --devices 8 --steps 6 --dtype f64 \
  --dataset-strategy "((2,1),(2,))" --gradients-mean --no-loss-repeated-mean --fusion allreduce=index:1,3 \
  --fusion allgather=size:0.01 --transformer-opt "$tmp/speed.json" --hsdp 2,0,level3
checks "recursive_programming, many knobs" 1e-12 --net examples/nets/recursive_programming.json --devices 8 --steps 6 \
  --dtype f64 --dataset-strategy full_batch --gradients-mean --no-loss-repeated-mean --fusion none --hsdp -1,0 \
  --grad-accumulation-step 2
checks "transformer bf16, many knobs" 3e-2 $TR --steps 6 --no-gradient-fp32-sync --fp32-communication --gradients-mean \
  --no-loss-repeated-mean --transformer-opt "$tmp/speed.json" --fusion reducescatter=size:0.01 --hsdp 2,0

# bad input: exit non-zero, one message naming the problem
# The verdict: a loss that is not finite stops the run at once, names the step and the side, and
# fails the check (exit 1) on 1 and 8 devices; a tolerance below what a run measures fails it;
# past 300 steps only the first 300 count.
DIV=tests/nets/diverging.json # the tutorial network with lr 1e30: the loss is nan from step 1
for run in 1 8; do
  "$BIN" --net $DIV --devices $run --steps 12 --check >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq 1 ] && grep -qx 'sk-sim: loss is not finite at step 1 (device 0)' "$tmp/err" &&
     grep -qx 'sk-sim: loss is not finite at step 1 (reference)' "$tmp/err" &&
     grep -qx 'check: FAILED: max relative loss difference nan (run and reference) over 2 steps (tolerance 1e-04 for f32)' "$tmp/out"
  then ok; else bad "a nan loss on $run devices: exit $rc: $(cat "$tmp/err"; tail -2 "$tmp/out")"; fi
done
"$BIN" --net $DIV --devices 8 --steps 12 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && [ "$(cat "$tmp/err")" = "sk-sim: loss is not finite at step 1 (device 0)" ] && ! grep -q 'step: 10' "$tmp/out" &&
  ok || bad "a nan loss without --check: exit $rc: $(cat "$tmp/err")"
"$BIN" --net examples/nets/operator_parallel.json --devices 2 --steps 4 --dtype f64 --check --check-tolerance 1e-30 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q '^check: FAILED: max relative loss difference [0-9.e+-]* over 4 steps (tolerance 1e-30 for f64)$' "$tmp/out" &&
  ok || bad "a tolerance below the measured difference: exit $rc: $(tail -1 "$tmp/out")"
"$BIN" --net examples/nets/operator_parallel.json --devices 2 --steps 302 --check >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q '^check: passed: max relative loss difference [0-9.e+-]* over 300 of 302 steps (tolerance 1e-04 for f32)$' "$tmp/out" &&
  ok || bad "past 300 steps: exit $rc: $(tail -1 "$tmp/out") $(cat "$tmp/err")"
"$BIN" --net examples/nets/operator_parallel.json --check-tolerance 1e-6 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'check-tolerance needs --check' "$tmp/err" && ok || bad "--check-tolerance alone: exit $rc"

# --hsdp --print-strategies names what optimizer parallel did with every parameter, and why not
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --hsdp --print-strategies --dump-program 0 >"$tmp/out" 2>"$tmp/err"
printf 'hsdp: fc1.weight: shard 2 of group 2\nhsdp: fc2.weight: not sharded (no replicas: the layout uses every device)\nhsdp: fc3.weight: not sharded (below 64 KB)\n' >"$tmp/want"
grep '^hsdp: ' "$tmp/out" | cmp -s - "$tmp/want" && ok || bad "--hsdp --print-strategies: $(grep '^hsdp' "$tmp/out")"

expect_fail() {
  name=$1; want=$2; shift 2
  "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq 0 ]; then bad "$name: exit 0"
  elif ! grep -q -- "$want" "$tmp/err"; then bad "$name: stderr lacks '$want': $(cat "$tmp/err")"
  else ok; fi
}
expect_fail "no --net" "--net" --steps 1
expect_fail "missing file" "nope.json" --net "$tmp/nope.json"
printf '{"format": "shardkit-network", "version": 1,\n "tensors": [}\n' >"$tmp/bad.json"
expect_fail "malformed file" "line 2" --net "$tmp/bad.json"
# refused_at_once NAME WANT CMD...: exits non-zero within 20 s (never the timeout's 124), stderr
# holding WANT: a file that never ends or blocks is refused by name, not read (sk_core.h)
refused_at_once() {
  name=$1; want=$2; shift 2
  timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then bad "$name: exit $rc"
  elif ! grep -q -- "$want" "$tmp/err"; then bad "$name: stderr lacks '$want': $(cat "$tmp/err")"
  else ok; fi
}
refused_at_once "--net /dev/zero" "/dev/zero: not a regular file (a character device)" "$BIN" --net /dev/zero --steps 1
mkfifo "$tmp/fifo.json"
refused_at_once "--net FIFO" "fifo.json: not a regular file (a FIFO)" "$BIN" --net "$tmp/fifo.json" --steps 1
expect_fail "dump of a rank past the devices" "below --devices" --net examples/nets/operator_parallel.json --devices 8 --dump-program 8
expect_fail "link without a device speed" "together" --net examples/nets/operator_parallel.json --devices 8 --link 5,25
printf '{"format": "shardkit-network", "version": 1}\n' >/dev/null
expect_fail "strict strategies on 4 devices" "strict" --net examples/nets/operator_parallel.json --devices 4 --strict-strategies --steps 1
expect_fail "bad dtype" "--dtype" --net examples/nets/operator_parallel.json --dtype i32
expect_fail "steps and epochs" "not both" --net examples/nets/operator_parallel.json --steps 2 --epochs 1
expect_fail "zero steps" "--steps takes a count of steps, 1\.\.2147483647: 0 (try --help)" --net examples/nets/operator_parallel.json --steps 0
expect_fail "dataset strategy of the wrong rank" "input 0's tuple has 2 entries" --net examples/nets/operator_parallel.json --devices 8 --dataset-strategy "((2,1),(2,))" --steps 1
expect_fail "malformed dataset strategy" "--dataset-strategy" --net examples/nets/operator_parallel.json --dataset-strategy "((2,1)"
# the wrong forms get AutoParallel.dataset_strategy's errors, in its words
OPD="--net examples/nets/operator_parallel.json --devices 8 --steps 1 --dataset-strategy"
expect_fail "a dataset strategy that is no name" "must be 'full_batch' or 'data_parallel', but got the value: batch" $OPD batch
expect_fail "a dataset strategy of ints" "the element of dataset_strategy must be tuple or Layout, but got '2'" $OPD "(2,1)"
expect_fail "a dataset strategy with a float" "the element of a dataset_strategy tuple must be int type, but got '2.5'" $OPD "((2.5,1,1,1),(2,))"
expect_fail "a dataset strategy with a name" "must be int type, but got 'a'" $OPD "((2,a,1,1),(2,))"
expect_fail "an empty dataset strategy tuple" "--dataset-strategy: tuple 0 is empty" $OPD "((),(2,))"
expect_fail "a negative dataset strategy value" "cut -2 ways" $OPD "((-2,1,1,1),(2,))"
expect_fail "bad optimizer" "--optimizer" --net examples/nets/operator_parallel.json --optimizer lamb
expect_fail "an unknown --mode" "--mode takes semi_auto, sharding_propagation, recursive_programming or exhaustive: bogus" --net examples/nets/recursive_programming.json --devices 8 --mode bogus
expect_fail "D-Rec's memory check" "the strategies need [0-9]* bytes per device, the device has 1000" --net examples/nets/recursive_programming.json --devices 8 --steps 1 --mode recursive_programming --device-memory 0.000001

# --report-json FILE: the report's figures as JSON with exactly the documented keys, after a dry
# run and after one executed step of the same configuration (memory, communication and FLOPs
# equal, host aside: the dry run does not model it; the pipeline's network has no test set, since
# an executed run's peaks also cover the evaluation, which the dry run does not walk); class 0's rows are the text report's
# communication table; algorithms: ring on a flat cluster, p2p for Send and redistribution;
# step_time_ms the report's modelled step time (null without --link, and dry), bubble the
# report's simulated bubble (null without a pipeline). Parsed with python3 where installed.
# json_check DRY RUN REPORT PIPELINE: the checks above (PIPELINE 1: a bubble is due)
json_check() {
  python3 - "$@" <<'EOF'
import json, re, sys
dry, run = (json.load(open(p)) for p in sys.argv[1:3])
report, piped = open(sys.argv[3]).read(), sys.argv[4] == "1"
def want(cond, what):
    if not cond: sys.exit(what)
KINDS = ["parameters", "gradients", "optimizer", "activations", "communication", "host", "peak_total"]
for d in (dry, run):
    want(list(d) == ["devices", "classes", "step_time_ms", "bubble"], "top keys %s" % list(d))
    # the classes partition the devices, each one's ranks ascending, numbered by first rank
    ranks = sorted(r for c in d["classes"] for r in c["devices"])
    want(ranks == list(range(d["devices"])), "the classes' devices %s" % ranks)
    want([c["devices"][0] for c in d["classes"]] == sorted(c["devices"][0] for c in d["classes"]), "classes by first rank")
    for i, c in enumerate(d["classes"]):
        want(list(c) == ["id", "devices", "memory", "communication", "flops_per_step"], "class keys %s" % list(c))
        want(c["id"] == i and c["devices"] == sorted(c["devices"]), "class %d: id %s devices %s" % (i, c["id"], c["devices"]))
        m = c["memory"]
        want(list(m) == KINDS and all(type(m[k]) is int and m[k] >= 0 for k in KINDS), "memory %s" % m)
        want(max(m[k] for k in KINDS[:5]) <= m["peak_total"] <= sum(m[k] for k in KINDS[:5]), "peak_total %s" % m)
        want(isinstance(c["flops_per_step"], (int, float)) and c["flops_per_step"] > 0, "flops %s" % c["flops_per_step"])
        for r in c["communication"]:
            want(list(r) == ["kind", "group_size", "calls", "bytes", "algorithm"], "row keys %s" % list(r))
            want(all(type(r[k]) is int for k in ("group_size", "calls", "bytes")), "row numbers %s" % r)
            p2p = r["kind"] in ("send", "recv") or (r["kind"] == "redistribution" and r["bytes"] > 0)
            algo = "local" if r["group_size"] == 1 or (r["kind"] == "redistribution" and r["bytes"] == 0) else "p2p" if p2p else "ring"
            want(r["algorithm"] == algo, "row %s: want %s" % (r, algo))
want(len(dry["classes"]) == len(run["classes"]), "classes: %d dry, %d executed" % (len(dry["classes"]), len(run["classes"])))
for a, b in zip(dry["classes"], run["classes"]):
    want(a["devices"] == b["devices"], "class %d devices: dry %s, executed %s" % (a["id"], a["devices"], b["devices"]))
    want({k: v for k, v in a["memory"].items() if k != "host"} == {k: v for k, v in b["memory"].items() if k != "host"},
         "class %d memory: dry %s, executed %s" % (a["id"], a["memory"], b["memory"]))
    want(a["memory"]["host"] == 0, "the dry run's host")
    want(a["communication"] == b["communication"] and a["flops_per_step"] == b["flops_per_step"], "class %d rows or flops differ" % a["id"])
table = report.split("communication per step (device 0)\n")[1].split("compute per step")[0].splitlines()[1:]
rows = [(k.lower(), int(g), round(float(c)), round(float(n)), al) for k, g, c, n, _, al in (l.split() for l in table if l != "(none)")]
want(rows == [(r["kind"], r["group_size"], r["calls"], r["bytes"], r["algorithm"]) for r in run["classes"][0]["communication"]], "rows: report %s" % rows)
t = re.search(r"^modelled step time: ([0-9.]+) ms", report, re.M)
# the dry run's step time: null where the run has none, else the executed step's to 1e-9
ds, rs = dry["step_time_ms"], run["step_time_ms"]
want(ds is None if rs is None else (ds is not None and abs(ds - rs) <= 1e-9 * rs), "dry step_time_ms %s, executed %s" % (ds, rs))
want((run["step_time_ms"] is None) if not t else ("%.3f" % run["step_time_ms"] == t.group(1)), "step_time_ms %s, report %s" % (run["step_time_ms"], t and t.group(1)))
s = re.search(r"^bubble: .*simulated ([0-9.]+)", report, re.M)
want(bool(s) == piped, "the report's bubble line")
for d in (dry, run):
    want((d["bubble"] is None) if not piped else ("%.4f" % d["bubble"] == s.group(1)), "bubble %s, report %s" % (d["bubble"], s and s.group(1)))
EOF
}
if command -v python3 >/dev/null 2>&1; then
  while read -r cfg; do
    eval "set -- $cfg"
    piped=0; case "$*" in *--pipeline*) piped=1 ;; esac
    "$BIN" "$@" --dry-run --report-json "$tmp/dry.json" >"$tmp/dry" 2>&1; r1=$?
    "$BIN" "$@" --steps 1 --report --report-json "$tmp/run.json" >"$tmp/run" 2>&1; r2=$?
    if [ $r1 -ne 0 ] || [ $r2 -ne 0 ]; then bad "--report-json $*: exit $r1 (dry), $r2: $(tail -2 "$tmp/dry" "$tmp/run")"
    elif why=$(json_check "$tmp/dry.json" "$tmp/run.json" "$tmp/run" $piped 2>&1); then ok
    else bad "--report-json $*: $why"; fi
  done <<EOF
--net examples/nets/operator_parallel.json --devices 8
--net examples/nets/operator_parallel.json --devices 8 --link 5,25 --device-tflops 10 --hsdp 2,0
--net examples/nets/recursive_programming.json --devices 8 --link 5,25 --device-tflops 10
--net tests/nets/npy.json --devices 8 --pipeline 2 --micro 2 --link 5,25 --device-tflops 10
--net examples/nets/operator_parallel.json
--net examples/nets/transformer.json --devices 16
--net examples/nets/transformer.json --devices 8 --topology 2x4 --intra 2,150 --inter 10,25 --device-tflops 10 --pipeline 2 --micro 2
EOF
else echo "skip the --report-json parse checks (no python3)"; fi
# a FILE that cannot be written: exit 1 naming it; with nothing run, refused at once
expect_fail "--report-json into a missing folder" "^sk-sim: --report-json $tmp/no/r.json: cannot write: No such file or directory\$" \
  --net examples/nets/operator_parallel.json --dry-run --report-json "$tmp/no/r.json"
[ $rc -eq 1 ] && ok || bad "--report-json into a missing folder: exit $rc, want 1"
expect_fail "--report-json with --dump-schedule" "--report-json needs a run or --dry-run" --net examples/nets/operator_parallel.json --dump-schedule --report-json "$tmp/r.json"
[ $rc -eq 2 ] && [ ! -e "$tmp/r.json" ] && ok || bad "--report-json with --dump-schedule: exit $rc, want 2 and no file"

# --device-memory GB: the fit check of every class's peak_total (here 1455192 bytes on each of the
# 8 devices, one class), dry or executed: too small exits 1 naming the class; above 90% warns;
# roomy says nothing; a value that is not a positive number is refused. The transformer on 32
# devices in 4 pipeline stages, its inputs cut 2 ways, has 6 classes: the first five are named,
# then how many more
OP8="--net examples/nets/operator_parallel.json --devices 8"
fit() { # fit NAME WANT_RC WANT_STDERR_FILE ARGS...
  name=$1; want_rc=$2; want=$3; shift 3
  "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq "$want_rc" ] && cmp -s "$want" "$tmp/err"; then ok
  else bad "$name: exit $rc (want $want_rc), stderr: $(diff "$want" "$tmp/err" | head -4)"; fi
}
: >"$tmp/fit_none"
echo "sk-sim: does not fit: class 0 (devices 0-7): peak 0.00145519 GB > 0.0014 GB (largest: gradients 0.000708772 GB)" >"$tmp/fit_over"
echo "sk-sim: warning: class 0 at 97.0% of --device-memory" >"$tmp/fit_near"
cat >"$tmp/fit_more" <<'EOF'
sk-sim: does not fit: class 0 (devices 0,2,5,... (4 devices)): peak 0.000358528 GB > 0.0001 GB (largest: gradients 0.00015744 GB)
sk-sim: does not fit: class 1 (devices 1,3-4,6): peak 0.000358528 GB > 0.0001 GB (largest: gradients 0.00015744 GB)
sk-sim: does not fit: class 2 (devices 8-15): peak 0.000311168 GB > 0.0001 GB (largest: gradients 0.000139136 GB)
sk-sim: does not fit: class 3 (devices 16-23): peak 0.000273792 GB > 0.0001 GB (largest: gradients 0.000120064 GB)
sk-sim: does not fit: class 4 (devices 24,26,29,... (4 devices)): peak 0.000157384 GB > 0.0001 GB (largest: gradients 6.234e-05 GB)
sk-sim: ... and 1 more classes do not fit
EOF
fit "--device-memory too small, dry" 1 "$tmp/fit_over" $OP8 --dry-run --device-memory 0.0014
fit "--device-memory too small, executed" 1 "$tmp/fit_over" $OP8 --steps 1 --device-memory 0.0014
fit "--device-memory at 97%, dry" 0 "$tmp/fit_near" $OP8 --dry-run --device-memory 0.0015
fit "--device-memory at 97%, executed" 0 "$tmp/fit_near" $OP8 --steps 1 --device-memory 0.0015
TF6="--net examples/nets/transformer.json --devices 32 --pipeline 4 --micro 4 --dataset-strategy ((2,1),(2,))"
fit "--device-memory, 6 classes, dry" 1 "$tmp/fit_more" $TF6 --dry-run --device-memory 0.0001
fit "--device-memory, 6 classes, executed" 1 "$tmp/fit_more" $TF6 --steps 1 --device-memory 0.0001
fit "--device-memory roomy, dry" 0 "$tmp/fit_none" $OP8 --dry-run --device-memory 0.0017
fit "--device-memory roomy, executed" 0 "$tmp/fit_none" $OP8 --steps 1 --device-memory 1
for v in 0 -1 abc nan inf 1e10; do
  expect_fail "--device-memory '$v'" "^sk-sim: --device-memory takes a positive number of GB (at most 1e9): $v (try --help)\$" $OP8 --dry-run --device-memory "$v"
done
# wide_net FILE K: K MatMuls reading one Flatten, summed by a chain of Adds: the exact search's
# frontier holds every MatMul until its Add (10 candidates each on 8 devices)
wide_net() {
  f=$1; k=$2
  {
    printf '{"format": "shardkit-network", "version": 1, "dataset": "fashion-mnist", "loss": "loss",\n "tensors": [\n'
    printf '  {"name": "image", "role": "input", "dtype": "f32", "shape": [32, 1, 28, 28]},\n'
    printf '  {"name": "label", "role": "input", "dtype": "i32", "shape": [32]}'
    i=1; while [ $i -le "$k" ]; do
      printf ',\n  {"name": "w%d", "role": "parameter", "dtype": "f32", "shape": [784, 16], "init": {"kind": "uniform", "value": 0.03}}' $i
      i=$((i + 1)); done
    printf '],\n "operators": [\n  {"name": "flatten", "type": "Flatten", "inputs": ["image"]}'
    i=1; while [ $i -le "$k" ]; do
      printf ',\n  {"name": "fc%d", "type": "MatMul", "inputs": ["flatten", "w%d"]}' $i $i
      i=$((i + 1)); done
    printf ',\n  {"name": "sum2", "type": "Add", "inputs": ["fc1", "fc2"]}'
    i=3; while [ $i -le "$k" ]; do
      printf ',\n  {"name": "sum%d", "type": "Add", "inputs": ["sum%d", "fc%d"]}' $i $((i - 1)) $i
      i=$((i + 1)); done
    printf ',\n  {"name": "loss", "type": "SoftmaxCrossEntropy", "inputs": ["sum%d", "label"]}]}\n' "$k"
  } >"$f"
}
wide_net "$tmp/wide3.json" 3
wide_net "$tmp/wide9.json" 9
checks "three MatMuls summed, --mode exhaustive" 1e-12 --net "$tmp/wide3.json" --devices 8 --steps 2 --dtype f64 --mode exhaustive
expect_fail "exhaustive on a frontier of 9 MatMuls" "exhaustive: the graph is too large to search exactly: at operator 'fc7'" --net "$tmp/wide9.json" --devices 8 --steps 1 --mode exhaustive
expect_fail "index fusion of AllGathers" "mode 'index' is AllReduce's only" --net examples/nets/operator_parallel.json --devices 8 --fusion allgather=index:1
expect_fail "a zero fusion size" "larger than 0 MB" --net examples/nets/operator_parallel.json --devices 8 --fusion size:0
expect_fail "bad fusion" "--fusion" --net examples/nets/operator_parallel.json --fusion allreduce=index:1,x
expect_fail "a dataset layout of the wrong rank" "layout 0 (input 'image')" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --dataset-strategy '(Layout((2,),("dp",))("dp","None"), Layout((2,),("dp",))("dp",))'
expect_fail "a dataset layout naming no axis" "'xp' is not an axis" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --dataset-strategy '(Layout((2,),("dp",))("xp",),)'
expect_fail "one dataset layout for two inputs" "1 layouts for the network's 2 inputs" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --dataset-strategy 'Layout((2,),("dp",))("dp","None","None","None")'
expect_fail "an empty strategy file" "empty.json" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --load-strategy "$tmp/empty.json"
expect_fail "another network's strategy file" "s.json: line" --net examples/nets/operator_parallel.json --devices 4 --steps 1 --load-strategy "$tmp/s.json"
expect_fail "a strategy file for 8 devices on 4" "op.json" --net examples/nets/operator_parallel.json --devices 4 --steps 1 --load-strategy "$tmp/op.json"
expect_fail "a strategy file's stages against --pipeline" "pp.json: line 5: stages: the file's plan has 2 pipeline stages, the configuration asks for 4" \
  --net examples/nets/operator_parallel.json --devices 8 --pipeline 4 --micro 4 --steps 1 --load-strategy "$tmp/pp.json"
expect_fail "a strategy file's hsdp against --hsdp" "ph.json: line 6: hsdp: the file's plan has hsdp(shard_size=-1, threshold=0, optimizer_level=level2), the configuration asks for hsdp(shard_size=-1, threshold=64, optimizer_level=level1)" \
  $PP --hsdp --steps 1 --load-strategy "$tmp/ph.json"
expect_fail "a transformer_opt option shardkit cannot honour" "grad_fa_allgather_overlap" --net examples/nets/operator_parallel.json --devices 8 --steps 1 --transformer-opt "$tmp/speed_bad.json"
expect_fail "bad local norm" "--local-norm" --net examples/nets/operator_parallel.json --local-norm file
expect_fail "hsdp shard_size 0" "shard_size must be -1 or a positive integer" --net examples/nets/operator_parallel.json --hsdp 0
expect_fail "hsdp unknown level" "optimizer_level" --net examples/nets/operator_parallel.json --hsdp -1,64,level4

# pipeline: --dump-schedule prints Megatron's 1F1B lists (p = 4, m = 8); the tutorial keeps its
# two annotated stages; other stage counts re-cut and say so; what MindSpore refuses is refused
"$BIN" --net examples/nets/transformer.json --devices 8 --pipeline 4 --micro 8 --dump-schedule >"$tmp/out" 2>"$tmp/err"
if [ "$(sed -n 1p "$tmp/out")" = "stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7" ] &&
   [ "$(sed -n 4p "$tmp/out")" = "stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7" ] && [ "$(wc -l <"$tmp/out")" -eq 4 ]; then ok
else bad "--dump-schedule 1f1b p4 m8: $(cat "$tmp/out" "$tmp/err")"; fi
"$BIN" --net examples/nets/transformer.json --devices 8 --pipeline 2 --micro 4 --scheduler zero_bubble_v --dump-schedule >"$tmp/out" 2>&1
if grep -q '^stage 0: F0.0 F1.0 F2.0 F0.1 B0.1 W0.1' "$tmp/out"; then ok; else bad "--dump-schedule zero_bubble_v: $(cat "$tmp/out")"; fi
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --dump-program 4 >"$tmp/out" 2>"$tmp/err"
# (relu1, flagged by the network, feeds the next stage: named, not recomputed)
if grep -q '^# device 4 of 8: stage 1 of 2 (ranks 4..7; chunks 1 of 2)' "$tmp/out" && ! grep -q ' fc1 op=Dense' "$tmp/out" &&
   grep -q '^#[0-9]* Forward fc2 op=Dense ' "$tmp/out" && ! grep -q '^#[0-9]* Recompute relu1 ' "$tmp/out" &&
   n=$(sed -n "s/^# evaluation: \([0-9]*\) steps, every micro-batch's forwards and their Score\$/\1/p" "$tmp/out") &&
   [ -n "$n" ] && [ "$(grep -c '^#e[0-9]* ' "$tmp/out")" -eq "$n" ] && grep -q '^#e[0-9]* Score micro=3 chunk=0$' "$tmp/out" &&
   grep -q '^#e[0-9]* Forward fc2 op=Dense ' "$tmp/out" &&
   [ "$(cat "$tmp/err")" = "sk-sim: operator 'relu1' is flagged for recomputation but its outputs are read by another pipeline chunk or are the loss: not recomputed" ]; then ok
else bad "--dump-program of stage 1: $(cat "$tmp/out" "$tmp/err")"; fi
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --pipeline 4 --micro 4 --dump-schedule >"$tmp/out" 2>"$tmp/err"
if grep -q 're-cut by FLOPs' "$tmp/err"; then ok; else bad "a re-cut is not said: $(cat "$tmp/err")"; fi
expect_fail "pipeline stages that do not divide the devices" "8 devices do not divide into 3 stages" --net examples/nets/operator_parallel.json --devices 8 --pipeline 3 --micro 3 --dump-schedule
expect_fail "1f1b with fewer micro-batches than stages" "micro_size 2 < stages 4" --net examples/nets/operator_parallel.json --devices 8 --pipeline 4 --micro 2 --dump-schedule
expect_fail "an unknown scheduler" "'seqpipe' is not one of" --net examples/nets/operator_parallel.json --pipeline 2 --scheduler seqpipe
expect_fail "recompute of an operator the network lacks" "no operator 'relu9'" --net examples/nets/operator_parallel.json --recompute relu1,relu9
# shard's arguments from the command line (--shard, --out-strategy): tuples or layouts on any
# operator, an output asked for in another layout (moved after the forward), MatMul's
# ReduceScatter output; 8 devices train like one, and --print-strategies says what was set
SHARDS="--shard relu1=(Layout((2,4),(\"dp\",\"mp\"))((\"dp\",\"mp\"),\"None\"),) --shard fc3=((4,2),(2,1))"
checks "--shard layouts and tuples, --out-strategy" 1e-12 --net examples/nets/operator_parallel.json --devices 8 --steps 12 \
  --dtype f64 $SHARDS --out-strategy 'fc3=((8,1),)' --out-strategy 'relu2=(Layout((8,),("a",))("None","a"),)'
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 1 $SHARDS --out-strategy 'fc3=((8,1),)' \
  --print-strategies >"$tmp/out" 2>&1
grep -q '^relu1 (layouts)$' "$tmp/out" && grep -q '^fc3 ((4, 2), (2, 1)) out ((8, 1),)$' "$tmp/out" && ok || \
  bad "--shard / --out-strategy with --print-strategies: $(head -8 "$tmp/out")"
expect_fail "--shard of an operator the network lacks" "--shard: the network has no operator 'fc9'" \
  --net examples/nets/operator_parallel.json --steps 1 --shard 'fc9=((1,1),(1,1))'
expect_fail "--shard without OP=" "--shard takes OP=STRATEGY" --net examples/nets/operator_parallel.json --steps 1 --shard '((1,1),)'
expect_fail "--shard, a layout a strategy operator cannot take" "Flatten: input 0 dim 0 is cut by several axes (b,a)" \
  --net examples/nets/operator_parallel.json --devices 8 --steps 1 --strict-strategies \
  --shard 'flatten=(Layout((2,4),("a","b"))(("b","a"),"None","None","None"),)'
expect_fail "--out-strategy, two tuples" "out_strategy as tuples is output 0's one tuple" \
  --net examples/nets/operator_parallel.json --steps 1 --out-strategy 'fc1=((8,1),(1,1))'
# training through stages equals one device (f64 to 1e-12: the micro-batches' mean gradient is
# the batch's, summed in another order): every scheduler at 2 and 4 stages, interleaved, on MPI
for sched in gpipe 1f1b zero_bubble_v; do
  checks "recursive_programming 2 stages $sched" 1e-12 --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --scheduler $sched --steps 6 --dtype f64
  checks "transformer 4 stages $sched" 1e-12 --net examples/nets/transformer.json --devices 8 --pipeline 4 --micro 4 --scheduler $sched --steps 4 --dtype f64
done
checks "operator_parallel 2 stages x 2 chunks" 1e-12 --net examples/nets/operator_parallel.json --devices 8 --pipeline 2 --micro 4 --interleave 2 --steps 6 --dtype f64
checks "operator_parallel 1f1b f32" 1e-5 --net examples/nets/operator_parallel.json --devices 4 --pipeline 2 --micro 2 --steps 6
# ... and on 4 MPI processes (2 stages x 2), the same check
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun.openmpi --oversubscribe -np 4 \
  "$BIN" --net examples/nets/operator_parallel.json --devices 4 --pipeline 2 --micro 4 --steps 4 --dtype f64 --check --backend mpi >"$tmp/out" 2>"$tmp/err"
d=$(sed -n 's/^check: passed: max relative loss difference \([-0-9.eE+]*\) over [0-9]* steps (tolerance [^)]*)$/\1/p' "$tmp/out")
if [ -n "$d" ] && awk -v d="$d" 'BEGIN { exit !(d <= 1e-12) }'; then ok; else bad "pipeline on 4 MPI processes: $(tail -3 "$tmp/out" "$tmp/err")"; fi
# pipeline + optimizer parallel (the strategy-search issue's setting): the tutorial network, 2
# stages x 4 devices, 4 micro-batches, its ReLUs recomputed (the network flags them), hsdp's
# defaults (level1: fc1 and fc2 sharded over their stage's replicas), then level2 and level3
# under other schedulers: one device's losses in f64; and on 8 MPI processes
checks "recursive_programming 2 stages, hsdp level1" 1e-12 --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --hsdp --steps 6 --dtype f64
checks "recursive_programming 2 stages zero_bubble_v, hsdp level2" 1e-12 --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --scheduler zero_bubble_v --hsdp -1,64,level2 --steps 6 --dtype f64
checks "recursive_programming 2 stages x 2 chunks gpipe, hsdp level3" 1e-12 --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --scheduler gpipe --interleave 2 --hsdp -1,64,level3 --steps 6 --dtype f64
# the recursive-programming tutorial as MindSpore runs it: strategies searched per stage, 2 stages
# x 4, 4 micro-batches, optimizer parallel, the ReLUs recomputed (the network file flags them)
for mode in recursive_programming sharding_propagation; do
  checks "recursive_programming tutorial: --mode $mode, 2 stages, hsdp" 1e-12 --net examples/nets/recursive_programming.json \
    --devices 8 --pipeline 2 --micro 4 --hsdp --mode $mode --steps 4 --dtype f64
done
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun.openmpi --oversubscribe -np 4 \
  "$BIN" --net examples/nets/operator_parallel.json --devices 4 --pipeline 2 --micro 4 --steps 4 --dtype f64 --hsdp -1,0,level2 --check --backend mpi >"$tmp/out" 2>"$tmp/err"
d=$(sed -n 's/^check: passed: max relative loss difference \([-0-9.eE+]*\) over [0-9]* steps (tolerance [^)]*)$/\1/p' "$tmp/out")
if [ -n "$d" ] && awk -v d="$d" 'BEGIN { exit !(d <= 1e-12) }'; then ok; else bad "pipeline + hsdp on 4 MPI processes: $(tail -3 "$tmp/out" "$tmp/err")"; fi
# ... and its report: every device keeps its shards between steps (fewer parameter bytes than
# without hsdp), and a step gathers and scatters the sharded parameters once each (level1)
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --steps 2 --report >"$tmp/out" 2>"$tmp/err"
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --steps 2 --hsdp --report >"$tmp/out2" 2>"$tmp/err"
p0=$(first_mem "$tmp/out" 0 2); p1=$(first_mem "$tmp/out2" 0 2)
q0=$(first_mem "$tmp/out" 4 2); q1=$(first_mem "$tmp/out2" 4 2)
if [ -n "$p0" ] && [ -n "$p1" ] && [ -n "$q0" ] && [ -n "$q1" ] && [ "$p1" -lt "$p0" ] && [ "$q1" -lt "$q0" ] &&
   grep -q '^allgather  *4  *1.00 ' "$tmp/out2" && grep -q '^reduce_scatter  *4  *1.00 ' "$tmp/out2"; then ok
else bad "pipeline + hsdp report: parameters on device 0 $p0 -> $p1, device 4 $q0 -> $q1: $(grep -E 'allgather|reduce_scatter' "$tmp/out2")"; fi
expect_fail "zero_bubble_v with 3 chunks" "interleave 3 is not 2" --net examples/nets/operator_parallel.json --devices 8 --pipeline 2 --micro 4 --scheduler zero_bubble_v --interleave 3 --steps 1
expect_fail "grad accumulation with a pipeline (MindSpore refuses it)" "grad_accumulation_step 2 with a pipeline is refused" --net examples/nets/operator_parallel.json --devices 8 --pipeline 2 --micro 4 --grad-accumulation-step 2 --steps 1
# local norms under a pipeline: each device reports the parameters of its stage (the tutorial at
# 2 stages: fc1 on devices 0..3, fc2 and fc3 on 4..7), then its device line; and
# --parameter-broadcast broadcasts within each stage: one device's losses again
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --pipeline 2 --micro 4 --local-norm print --device-local-norm --steps 1 >"$tmp/out" 2>"$tmp/err"
if [ "$(grep -cE '^1 [0-3] fc1\.weight [0-9.eE+-]+$' "$tmp/out")" -eq 4 ] && [ "$(grep -cE '^1 [4-7] fc[23]\.weight [0-9.eE+-]+$' "$tmp/out")" -eq 8 ] &&
   [ "$(grep -cE '^1 [0-7] device [0-9.eE+-]+$' "$tmp/out")" -eq 8 ] && [ "$(grep -cE '^1 [0-7] ' "$tmp/out")" -eq 20 ]; then ok
else bad "local norms under a pipeline: $(grep -E '^1 ' "$tmp/out" | head -12) $(cat "$tmp/err")"; fi
checks "operator_parallel 2 stages, parameter_broadcast and local norms" 1e-12 --net examples/nets/operator_parallel.json --devices 8 \
  --pipeline 2 --micro 4 --steps 6 --dtype f64 --parameter-broadcast --local-norm "dump:$tmp/pnorms" --device-local-norm --hsdp -1,0
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --steps 4 --report >"$tmp/out" 2>"$tmp/err"
g0=$(first_mem "$tmp/out" 0 10)
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4 --scheduler gpipe --steps 4 --report >"$tmp/out2" 2>"$tmp/err"
g1=$(first_mem "$tmp/out2" 0 10)
if grep -q '^pipeline: 2 stages x 4 devices, 4 micro-batches, 1f1b' "$tmp/out" && [ -n "$g0" ] && [ -n "$g1" ] && [ "$g1" -gt "$g0" ]; then ok
else bad "the pipeline report, or gpipe's stage-0 activations ($g1) above 1f1b's ($g0): $(grep -A3 pipeline: "$tmp/out")"; fi

# ---- recomputation without a pipeline ------------------------------------------------------------
# --recompute relu1,fc2 on 8 devices: the same losses to the last digit (f64 and f32; with hsdp
# level3 and a search mode too), a lower peak of activations in the report (relu1's and fc2's
# outputs are freed after their last forward use), nothing on stderr; a flagged loss is named
OP=examples/nets/operator_parallel.json
for extra in "--dtype f64" "--dtype f32" "--dtype f64 --hsdp -1,0,level3 --mode sharding_propagation"; do
  "$BIN" --net $OP --devices 8 --steps 12 --report $extra >"$tmp/out" 2>"$tmp/err"
  "$BIN" --net $OP --devices 8 --steps 12 --report $extra --recompute relu1,fc2 >"$tmp/out2" 2>"$tmp/err2"
  a0=$(first_mem "$tmp/out" 0 10); a1=$(first_mem "$tmp/out2" 0 10)
  losses "$tmp/out" >"$tmp/a"; losses "$tmp/out2" >"$tmp/b"
  if [ -s "$tmp/a" ] && cmp -s "$tmp/a" "$tmp/b" && [ -n "$a0" ] && [ -n "$a1" ] && [ "$a1" -lt "$a0" ] && [ ! -s "$tmp/err2" ]; then ok
  else bad "--recompute relu1,fc2 without a pipeline ($extra): peak activations $a0 -> $a1: $(paste "$tmp/a" "$tmp/b" | head -3) $(cat "$tmp/err2")"; fi
done
"$BIN" --net $OP --devices 8 --steps 1 --recompute loss,relu1 >"$tmp/out" 2>"$tmp/err"
if [ "$(cat "$tmp/err")" = "sk-sim: operator 'loss' is flagged for recomputation but its output is the loss: not recomputed" ]; then ok
else bad "a flagged loss is not named: $(cat "$tmp/err")"; fi
"$BIN" --net $OP --devices 8 --recompute loss,fc2 --dump-program 0 >"$tmp/out" 2>/dev/null
if grep -q '^#[0-9]* Forward fc2 op=MatMul out=.* recompute=yes$' "$tmp/out" && grep -q '^#[0-9]* Forward loss .* recompute=refused$' "$tmp/out" &&
   [ "$(grep -c recompute= "$tmp/out")" -eq 2 ]; then ok
else bad "--dump-program does not show what is recomputed: $(grep Forward "$tmp/out")"; fi
"$BIN" --net $OP --steps 1 --recompute relu1 >"$tmp/out" 2>"$tmp/err"
if grep -q "^sk-sim: operator 'relu1' is flagged for recomputation but one device runs the single-device trainer: not recomputed$" "$tmp/err"; then ok
else bad "recompute on one device is not named: $(cat "$tmp/err")"; fi

# ---- checkpoints (docs/checkpoints.md) -----------------------------------------------------------
# Saved by 8 devices at steps 5 and 10, resumed on 8 (bitwise the uninterrupted run's losses), 4
# and 1 (within 1e-12: the first steps ran on 8); a flipped byte makes the load and sk-ckpt verify
# fail naming the file; bad combinations are refused.
ck=$tmp/ck
TNET=examples/nets/transformer.json
"$BIN" --net $TNET --devices 8 --steps 21 --dtype f64 >"$tmp/full" 2>&1
"$BIN" --net $TNET --devices 8 --steps 10 --dtype f64 --save-checkpoint "$ck" --every 5 >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] && [ "$(cat "$ck/LATEST")" = ckpt-00000010 ] && [ -f "$ck/ckpt-00000005/MANIFEST" ] &&
   grep -q 'checkpoint .*ckpt-00000010 saved at step 10' "$tmp/err"; then ok
else bad "--save-checkpoint --every 5: $(cat "$tmp/err"; ls "$ck")"; fi
for d in 8 4 1; do
  "$BIN" --net $TNET --devices $d --steps 11 --dtype f64 --load-checkpoint "$ck" >"$tmp/out" 2>"$tmp/err"; rc=$?
  want=$(grep -E '^epoch: 0 step: (10|20),' "$tmp/full" | sed 's/.*loss is //')
  got=$(grep -E '^epoch: 0 step: (10|20),' "$tmp/out" | sed 's/.*loss is //')
  if [ $rc -ne 0 ] || [ "$(echo "$got" | wc -w)" -ne 2 ]; then bad "resume on $d devices: exit $rc: $(cat "$tmp/err")"
  elif [ $d -eq 8 ] && [ "$got" != "$want" ]; then bad "resume on 8 devices: losses $got, uninterrupted $want"
  elif ! printf '%s\n%s\n' "$got" "$want" | paste -s -d' ' | awk '{ for (i = 1; i <= 2; i++) { d = ($i - $(i+2)) / $(i+2); if (d < 0) d = -d; if (d > 1e-12) exit 1 } }'; then
    bad "resume on $d devices: losses $got, uninterrupted $want"
  else ok; fi
done
build/sk-ckpt verify "$ck" >"$tmp/out" 2>&1 && grep -q '^ok: ' "$tmp/out" && ok || bad "sk-ckpt verify of a good checkpoint: $(cat "$tmp/out")"
# sk-ckpt list: both checkpoints, the newest's slices as in its manifest
build/sk-ckpt list "$ck" >"$tmp/out" 2>&1
if grep -q '^checkpoints: ckpt-00000005 ckpt-00000010$' "$tmp/out" && grep -q 'step 10, position 10, saved by 8 devices' "$tmp/out" &&
   [ "$(grep -c '^slice ' "$tmp/out")" -eq "$(grep -c '^slice ' "$ck/ckpt-00000010/MANIFEST")" ]; then ok
else bad "sk-ckpt list: $(head -5 "$tmp/out")"; fi
# sk-ckpt merge: whole tensors written by one device, which verify and resume like the original
build/sk-ckpt merge "$ck" --out "$tmp/merged" >"$tmp/out" 2>&1 && build/sk-ckpt verify "$tmp/merged" >/dev/null 2>&1 &&
  ! build/sk-ckpt list "$tmp/merged" | grep '^slice ' | grep -v ' rank 0 ' | grep -q . && ok || bad "sk-ckpt merge: $(cat "$tmp/out")"
"$BIN" --net $TNET --devices 2 --steps 1 --dtype f64 --load-checkpoint "$tmp/merged" >"$tmp/out" 2>"$tmp/err"
got=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/out"); want=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/full")
if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= 1e-12) }'; then ok
else bad "resume from the merged checkpoint on 2 devices: $got, uninterrupted $want: $(cat "$tmp/err")"; fi
build/sk-ckpt nosuch "$ck" >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "sk-ckpt with an unknown command: exit status, want 2"
build/sk-ckpt verify "$tmp/none" >/dev/null 2>"$tmp/err"; [ $? -eq 1 ] && grep -q LATEST "$tmp/err" && ok || bad "sk-ckpt verify of no checkpoint: $(cat "$tmp/err")"
mkdir "$tmp/fifo-root" && mkfifo "$tmp/fifo-root/LATEST"
for cmd in list verify; do
  refused_at_once "sk-ckpt $cmd, LATEST a FIFO" "LATEST: not a regular file (a FIFO)" build/sk-ckpt $cmd "$tmp/fifo-root"
done
refused_at_once "--load-checkpoint, LATEST a FIFO" "LATEST: not a regular file (a FIFO)" "$BIN" --net $TNET --devices 2 --steps 1 --load-checkpoint "$tmp/fifo-root"
printf 'X' | dd of="$ck/ckpt-00000010/rank-0.bin" bs=1 seek=1000 conv=notrunc 2>/dev/null
expect_fail "a corrupt checkpoint" "rank-0.bin: block 0" --net $TNET --devices 4 --steps 1 --dtype f64 --load-checkpoint "$ck"
build/sk-ckpt verify "$ck" >"$tmp/out" 2>&1 && bad "sk-ckpt verify of a corrupt checkpoint: exit 0" || ok
# saved by 2 MPI processes, resumed on 4 threads: the step-10 loss within 1e-12 of the uninterrupted run's
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun.openmpi --oversubscribe -np 2 \
  "$BIN" --net $TNET --devices 2 --steps 10 --dtype f64 --backend mpi --save-checkpoint "$tmp/ckm" >"$tmp/out" 2>"$tmp/err"
"$BIN" --net $TNET --devices 4 --steps 1 --dtype f64 --load-checkpoint "$tmp/ckm" >"$tmp/out" 2>>"$tmp/err"
got=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/out"); want=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/full")
if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= 1e-12) }'; then ok
else bad "saved under MPI, resumed on threads: $got, uninterrupted $want: $(cat "$tmp/err")"; fi
expect_fail "no checkpoint there" "LATEST" --net $TNET --devices 2 --steps 1 --load-checkpoint "$tmp/none"
expect_fail "--every alone" "--every needs --save-checkpoint" --net $TNET --devices 2 --steps 1 --every 5
expect_fail "--every 0" "--every takes a positive count" --net $TNET --devices 2 --steps 1 --save-checkpoint "$ck" --every 0
expect_fail "--check with a load" "not with --load-checkpoint" --net $TNET --devices 2 --steps 1 --check --load-checkpoint "$ck"
# One writer per root: while another process holds ROOT/.lock, a save run exits 1 before its
# first step naming that process (threads, and 2 MPI processes: the other one ends too); then
# the root is free. A symlinked ckpt-<step> in the root is named, and its files survive.
hold_lock "$tmp/ckl"
"$BIN" --net $TNET --devices 2 --steps 2 --save-checkpoint "$tmp/ckl" >"$tmp/out" 2>"$tmp/err"; rc=$?
want="sk-sim: checkpoint root $tmp/ckl is being written by process $holder"
if [ $rc -eq 1 ] && [ "$(cat "$tmp/err")" = "$want" ] && ! grep -q loss "$tmp/out"; then ok
else bad "a second writer of a root: exit $rc: $(cat "$tmp/err"; head -3 "$tmp/out")"; fi
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun.openmpi --oversubscribe -np 2 \
  "$BIN" --net $TNET --devices 2 --steps 2 --backend mpi --save-checkpoint "$tmp/ckl" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^sk-sim: ' "$tmp/err")" -eq 1 ] && grep -qxF "$want" "$tmp/err" &&
   ! grep -q loss "$tmp/out"; then ok
else bad "a second writer of a root under MPI: exit $rc (124: a process waited): $(cat "$tmp/err")"; fi
release_lock
"$BIN" --net $TNET --devices 2 --steps 2 --save-checkpoint "$tmp/ckl" >"$tmp/out" 2>"$tmp/err" &&
  [ "$(cat "$tmp/ckl/LATEST")" = ckpt-00000002 ] && ok || bad "saving once the holder is gone: $(cat "$tmp/err")"
mkdir "$tmp/cks" "$tmp/victim"; echo a >"$tmp/victim/a"; echo b >"$tmp/victim/b"
ln -s "$tmp/victim" "$tmp/cks/ckpt-00000002"
"$BIN" --net $TNET --devices 2 --steps 2 --save-checkpoint "$tmp/cks" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 1 ] && grep -qF "$tmp/cks/ckpt-00000002 is a symbolic link, not a checkpoint directory" "$tmp/err" &&
   [ "$(cat "$tmp/victim/a" "$tmp/victim/b" | tr -d '\n')" = ab ]; then ok
else bad "saving over a symlinked ckpt-00000002: exit $rc: $(cat "$tmp/err"); left: $(ls "$tmp/victim")"; fi
# The optimizer a checkpoint was saved with: Adam's states do not load into a Momentum run (refused
# naming both, before any step); --load-checkpoint-params-only loads the parameters alone (its
# first loss is the saved parameters' loss: the uninterrupted Adam run's step 10, bitwise on the
# same 8 devices) and its own save records Momentum; a version-1 manifest (no optimizer line,
# its crc rewritten) loads only with the flag.
# crc32 FILE: zlib's crc32 of its bytes, lowercase hex (gzip's trailer holds it, little-endian)
crc32() { gzip -c <"$1" | tail -c 8 | head -c 4 | od -An -tx1 | awk '{ print $4 $3 $2 $1 }'; }
"$BIN" --net $TNET --devices 8 --steps 10 --dtype f64 --optimizer adam --save-checkpoint "$tmp/cka" >"$tmp/out" 2>"$tmp/err" &&
  grep -qx 'optimizer adam' "$tmp/cka/ckpt-00000010/MANIFEST" && build/sk-ckpt list "$tmp/cka" | grep -q 'devices, optimizer adam$' &&
  ok || bad "save with adam: the manifest's optimizer line: $(cat "$tmp/err"; head -8 "$tmp/cka/ckpt-00000010/MANIFEST")"
expect_fail "adam's checkpoint into a momentum run" \
  "checkpoint $tmp/cka/ckpt-00000010 was saved with adam; this run uses momentum (use --load-checkpoint-params-only" \
  --net $TNET --devices 8 --steps 1 --dtype f64 --optimizer momentum --load-checkpoint "$tmp/cka"
grep -q 'loss is' "$tmp/out" && bad "a refused load trained: $(cat "$tmp/out")" || ok
w10=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/full")
"$BIN" --net $TNET --devices 8 --steps 2 --dtype f64 --optimizer momentum --load-checkpoint "$tmp/cka" \
  --load-checkpoint-params-only --save-checkpoint "$tmp/ckb" >"$tmp/out" 2>"$tmp/err"; rc=$?
got=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/out")
if [ $rc -eq 0 ] && [ -n "$w10" ] && [ "$got" = "$w10" ] && grep -q 'parameters only: the optimizer starts afresh' "$tmp/err" &&
   grep -qx 'optimizer momentum' "$tmp/ckb/ckpt-00000012/MANIFEST"; then ok
else bad "--load-checkpoint-params-only: exit $rc, loss $got, the saved run's $w10: $(cat "$tmp/err")"; fi
"$BIN" --net $TNET --devices 4 --steps 1 --dtype f64 --optimizer momentum --load-checkpoint "$tmp/ckb" >"$tmp/out" 2>"$tmp/err" &&
  grep -q 'ckpt-00000012 loaded: step 12' "$tmp/err" && grep -q '^# 4 devices, f64, threads backend, 1 steps' "$tmp/out" &&
  ok || bad "resume from a params-only run's checkpoint: $(cat "$tmp/err")"
man=$tmp/cka/ckpt-00000010/MANIFEST
sed -e '1s/ 2$/ 1/' -e '/^optimizer /d' -e '/^crc /d' "$man" >"$tmp/v1" && printf 'crc %s\n' "$(crc32 "$tmp/v1")" >>"$tmp/v1" &&
  cp "$tmp/v1" "$man"
build/sk-ckpt list "$tmp/cka" | grep -q 'devices, optimizer not recorded$' && ok || bad "sk-ckpt list of a version-1 manifest: $(build/sk-ckpt list "$tmp/cka" 2>&1 | head -3)"
expect_fail "a version-1 checkpoint without the flag" "does not record its optimizer (version 1): only --load-checkpoint-params-only" \
  --net $TNET --devices 8 --steps 1 --dtype f64 --optimizer adam --load-checkpoint "$tmp/cka"
"$BIN" --net $TNET --devices 8 --steps 1 --dtype f64 --load-checkpoint "$tmp/cka" --load-checkpoint-params-only >"$tmp/out" 2>"$tmp/err"
got=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/out")
[ -n "$got" ] && [ "$got" = "$w10" ] && ok || bad "a version-1 checkpoint with the flag: loss $got, want $w10: $(cat "$tmp/err")"
expect_fail "--load-checkpoint-params-only alone" "needs --load-checkpoint DIR" --net $TNET --devices 2 --steps 1 --load-checkpoint-params-only
# Under a pipeline (2 stages x 4, searched strategies, Adam, optimizer parallel): each stage's
# devices write its parameters; resumed on the same pipeline (bitwise), another (2 x 2), none on 8,
# and 1 device (within 1e-12: the first steps ran in another summation order).
PNET="--net examples/nets/recursive_programming.json --mode recursive_programming --optimizer adam --dtype f64"
"$BIN" $PNET --devices 8 --pipeline 2 --micro 4 --hsdp --steps 11 >"$tmp/full" 2>&1
"$BIN" $PNET --devices 8 --pipeline 2 --micro 4 --hsdp --steps 5 --save-checkpoint "$tmp/ckp" >"$tmp/out" 2>"$tmp/err" &&
  build/sk-ckpt verify "$tmp/ckp" >/dev/null 2>&1 && ok || bad "save under a pipeline: $(cat "$tmp/err")"
want=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/full")
for run in "8 --pipeline 2 --micro 4 --hsdp" "4 --pipeline 2 --micro 2 --hsdp" "8" "1"; do
  "$BIN" $PNET --devices $run --steps 6 --load-checkpoint "$tmp/ckp" >"$tmp/out" 2>"$tmp/err"
  got=$(sed -n 's/^epoch: 0 step: 10, loss is //p' "$tmp/out")
  case "$run" in 8\ --pipeline*) tol=0 ;; *) tol=1e-12 ;; esac
  if [ -n "$got" ] && [ -n "$want" ] && awk -v a="$got" -v b="$want" -v t=$tol 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= t) }'; then ok
  else bad "saved under a pipeline, resumed on --devices $run: $got, uninterrupted $want: $(cat "$tmp/err")"; fi
done
# saved in f32, resumed in f64 (floating dtypes convert on load): the step-10 loss within 1e-6
# of the f32 run's (its f32 rounding), the step-20 loss as close to the f32 run's
"$BIN" --net $TNET --devices 4 --steps 21 >"$tmp/full" 2>&1
"$BIN" --net $TNET --devices 4 --steps 10 --save-checkpoint "$tmp/ck32" >"$tmp/out" 2>&1
"$BIN" --net $TNET --devices 2 --steps 11 --dtype f64 --load-checkpoint "$tmp/ck32" >"$tmp/out" 2>"$tmp/err"
got=$(grep -E '^epoch: 0 step: (10|20),' "$tmp/out" | sed 's/.*loss is //' | paste -s -d' ')
want=$(grep -E '^epoch: 0 step: (10|20),' "$tmp/full" | sed 's/.*loss is //' | paste -s -d' ')
if echo "$got $want" | awk 'NF == 4 { for (i = 1; i <= 2; i++) { d = ($i - $(i+2)) / $(i+2); if (d < 0) d = -d; if (d > 1e-6) exit 1 }; ok = 1 } END { exit !ok }'; then ok
else bad "saved in f32, resumed in f64: losses $got, the f32 run's $want: $(cat "$tmp/err")"; fi

# data sources (tests/nets/npy.json: two .npy files, written by make into build/data/npy/, which
# the network names relative to its own directory, and the four random kinds): N devices
# train like one on the same global batches (f64 to 1e-12), in the pipeline too; no test
# accuracy line (the sources have no test set); --data overrides a file, and refusals name it
NPYNET="--net tests/nets/npy.json --dtype f64"
if [ -x build/make_npy ] && [ -f build/data/npy/x.npy ] && [ -f build/data/npy/label.npy ]; then
  checks "npy.json 8 devices f64" 1e-12 $NPYNET --devices 8 --steps 12
  checks "npy.json 8 devices, pipeline 2 x 2" 1e-12 $NPYNET --devices 8 --steps 12 --pipeline 2 --micro 2
  "$BIN" $NPYNET --steps 12 >"$tmp/a" 2>&1; "$BIN" $NPYNET --steps 12 --seed 2 >"$tmp/b" 2>&1
  if [ "$(losses "$tmp/a" | wc -l)" -eq 6 ] && ! grep -q 'test accuracy' "$tmp/a" && ! cmp -s "$tmp/a" "$tmp/b"; then ok
  else bad "npy.json: 6 epochs of 2 batches, no test accuracy, --seed draws other random inputs: $(cat "$tmp/a")"; fi
  build/make_npy --out "$tmp/x.npy" --dtype f64 --shape 16,2,4 --fill uniform
  "$BIN" $NPYNET --steps 2 --data x="$tmp/x.npy" >"$tmp/c" 2>&1
  if [ "$(losses "$tmp/c")" != "$(losses "$tmp/a" | head -1)" ] && [ -n "$(losses "$tmp/c")" ]; then ok
  else bad "--data x=FILE: the same first loss as the network's own file: $(cat "$tmp/c")"; fi
  checks "npy.json --data x=f64 file, 4 devices" 1e-12 $NPYNET --devices 4 --steps 4 --data x="$tmp/x.npy"
  build/make_npy --out "$tmp/shape.npy" --dtype f32 --shape 40,8
  build/make_npy --out "$tmp/float.npy" --dtype f64 --shape 40
  build/make_npy --out "$tmp/cut.npy" --dtype f32 --shape 40,2,4 --truncate 5
  build/make_npy --out "$tmp/none.npy" --dtype f32 --shape 0,2,4
  expect_fail "--data of the wrong shape" "shape.npy: shape (40, 8) does not hold the input's samples: want (40, 2, 4)" \
    $NPYNET --steps 1 --data x="$tmp/shape.npy"
  expect_fail "--data of the wrong dtype" "float.npy: holds f64 values; input 'label' is i32" $NPYNET --steps 1 --data label="$tmp/float.npy"
  expect_fail "--data of a truncated file" "cut.npy: truncated: shape (40, 2, 4) of f32 needs 1280 bytes of data, the file has 1275" \
    $NPYNET --devices 8 --steps 1 --data x="$tmp/cut.npy"
  expect_fail "--data without samples" "none.npy: has no samples" $NPYNET --steps 1 --data x="$tmp/none.npy"
  expect_fail "--data of no input" "the network has no input 'nope'" $NPYNET --steps 1 --data nope="$tmp/x.npy"
  expect_fail "--data of a parameter" "'w1' is a parameter, not an input" $NPYNET --steps 1 --data w1="$tmp/x.npy"
  expect_fail "--data of a missing file" "missing.npy: cannot open" $NPYNET --steps 1 --data x="$tmp/missing.npy"
  sed 's/"random_int": \[0, 6\]/"random_int": [6, 0]/' tests/nets/npy.json >"$tmp/lohi.json"
  expect_fail "random_int lo >= hi" "data.ids.random_int: random_int's lo 6 is not below hi 0" --net "$tmp/lohi.json" --steps 1
  sed '/"x": {"npy"/d' tests/nets/npy.json >"$tmp/nox.json"
  expect_fail "an input without data" "input 'x' has no data" --net "$tmp/nox.json" --steps 1
else bad "build/make_npy or build/data/npy/ is missing (run make first)"; fi

# every option of --help has its row in docs/sk-sim.md
for flag in $("$BIN" --help | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p'); do
  if grep -q -E -- "^\|.*\`$flag[\` ]" docs/sk-sim.md; then ok
  else bad "docs/sk-sim.md has no row for $flag"; fi
done

# a dry run ends with one line: its wall time and the process's peak RSS; a --report-json FILE
# that cannot be written fails before anything runs (no step, no report), and the trial leaves
# no file behind where the run fails and an existing file untouched
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --dry-run --report-json "$tmp/cost.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^dry run: ' "$tmp/out")" -eq 1 ] && tail -1 "$tmp/out" | grep -qE '^dry run: [0-9]+\.[0-9]{3} s, peak RSS [1-9][0-9]* MiB$' &&
   [ -s "$tmp/cost.json" ]; then ok
else bad "the dry run's closing line: exit $rc: $(tail -2 "$tmp/out") $(cat "$tmp/err")"; fi
"$BIN" --net examples/nets/operator_parallel.json --devices 8 --steps 3 --report-json "$tmp/no/r.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 1 ] && [ ! -s "$tmp/out" ] && [ "$(cat "$tmp/err")" = "sk-sim: --report-json $tmp/no/r.json: cannot write: No such file or directory" ]; then ok
else bad "--report-json unwritable before a run: exit $rc, stdout $(head -2 "$tmp/out"), stderr $(cat "$tmp/err")"; fi
rm -f "$tmp/fresh.json"; echo kept >"$tmp/kept.json"
"$BIN" --net examples/nets/operator_parallel.json --devices 7 --dry-run --report-json "$tmp/fresh.json" >/dev/null 2>&1; r1=$?
"$BIN" --net examples/nets/operator_parallel.json --devices 7 --dry-run --report-json "$tmp/kept.json" >/dev/null 2>&1; r2=$?
if [ $r1 -eq 1 ] && [ $r2 -eq 1 ] && [ ! -e "$tmp/fresh.json" ] && [ "$(cat "$tmp/kept.json")" = kept ]; then ok
else bad "--report-json's trial on a failed compile: exit $r1/$r2, fresh.json $(ls "$tmp/fresh.json" 2>&1), kept.json '$(cat "$tmp/kept.json")'"; fi

# A search mode on a priced cluster keeps the cheapest finalist by the dry run and says so on
# one stderr line; --print-strategies ends with the kept plan's and data parallel's dry-run
# step times. The recursive_programming tutorial on 8 devices: the search's plan is dearer than
# data parallel (kept, and the executed run's modelled step is its price); on 2 devices the
# search's plan is the cheaper. Without a priced cluster nothing is weighed or said.
MS3='[0-9]+\.[0-9]{3}'
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --steps 1 --mode recursive_programming \
  --link 5,25 --device-tflops 10 --print-strategies --report >"$tmp/out" 2>"$tmp/err"; rc=$?
kept=$(sed -n 's/^search: kept data_parallel (\([0-9.]*\) ms) over recursive_programming ([0-9.]* ms)$/\1/p' "$tmp/err")
trailer=$(sed '/^epoch: /,$d' "$tmp/out" | tail -1)
if [ $rc -eq 0 ] && [ "$(grep -c '^search:' "$tmp/err")" -eq 1 ] &&
   grep -qE "^search: kept data_parallel \($MS3 ms\) over recursive_programming \($MS3 ms\)$" "$tmp/err" &&
   echo "$trailer" | grep -qE "^# recursive_programming: plan cost $kept ms \(dry run\), data parallel $kept ms, searched in [0-9.]+ ms$" &&
   grep -q "^modelled step time: $kept ms" "$tmp/out"; then ok
else bad "finalists, 8 devices: exit $rc: $(cat "$tmp/err"); trailer '$trailer'; $(grep '^modelled' "$tmp/out")"; fi
"$BIN" --net examples/nets/recursive_programming.json --devices 2 --steps 1 --mode sharding_propagation \
  --link 5,25 --device-tflops 10 --print-strategies >"$tmp/out" 2>"$tmp/err"; rc=$?
line=$(grep '^search:' "$tmp/err")
x=$(echo "$line" | sed -n 's/^search: kept sharding_propagation (\([0-9.]*\) ms) over data_parallel (\([0-9.]*\) ms)$/\1/p')
y=$(echo "$line" | sed -n 's/^search: kept sharding_propagation (\([0-9.]*\) ms) over data_parallel (\([0-9.]*\) ms)$/\2/p')
if [ $rc -eq 0 ] && [ "$(grep -c '^search:' "$tmp/err")" -eq 1 ] && echo "$line" | grep -qE "\($MS3 ms\) over data_parallel \($MS3 ms\)$" &&
   awk -v a="$x" -v b="$y" 'BEGIN { exit !(a < b) }' &&
   sed '/^epoch: /,$d' "$tmp/out" | tail -1 | grep -qE "^# sharding_propagation: plan cost $x ms \(dry run\), data parallel $y ms, searched in [0-9.]+ ms$"
then ok
else bad "finalists, 2 devices: exit $rc: $(cat "$tmp/err"); $(grep '^# sharding' "$tmp/out")"; fi
"$BIN" --net examples/nets/recursive_programming.json --devices 8 --steps 1 --mode recursive_programming --print-strategies \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 0 ] && ! grep -q '^search:' "$tmp/err" && grep -qE '^# recursive_programming: plan cost [0-9.e+]+ bytes, searched in' "$tmp/out"
then ok; else bad "finalists without a priced cluster: exit $rc: $(cat "$tmp/err") $(grep '^#' "$tmp/out")"; fi

summary sim
