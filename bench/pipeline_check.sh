#!/bin/sh
# Pipeline parallel against one device: every scheduler, 2 stages x 4 devices and 4 stages x 2
# (micro-batches: twice the stages, so each stage's devices still cut the transformer's batch of
# 16), on the shipped networks, f64, --check over STEPS steps (default 300), threads backend; then the
# same on 8 MPI processes for the tutorial network; then the modelled bubble of each scheduler on
# bench/nets/identical_layers.json (4 stages of one device, 8 micro-batches, 5 us / 25 GB/s links,
# 0.01 TFLOPS devices) beside its formula. Prints one table row per run.
#   sh bench/pipeline_check.sh [STEPS]
set -u
cd "$(dirname "$0")/.."
steps=${1:-300}
SIM=build/sk-sim
[ -x "$SIM" ] || { echo "pipeline_check: $SIM is missing (run make)"; exit 1; }
check() { sed -n 's/^check: [A-Za-z]*: max relative loss difference \([^ ]*\) .*/\1/p'; }
echo "| network | stages x devices | scheduler | backend | steps | max relative loss difference |"
echo "|---|---|---|---|---|---|"
for net in operator_parallel recursive_programming transformer; do
  for cfg in "2 4" "4 2"; do
    set -- $cfg
    for sched in gpipe 1f1b zero_bubble_v; do
      d=$("$SIM" --net examples/nets/$net.json --devices 8 --pipeline "$1" --micro $((2 * $1)) --scheduler $sched \
          --steps "$steps" --dtype f64 --check 2>/dev/null | check)
      echo "| $net | $1 x $2 | $sched | threads | $steps | ${d:-FAILED} |"
    done
  done
done
for sched in gpipe 1f1b zero_bubble_v; do
  d=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --oversubscribe -np 8 "$SIM" \
      --net examples/nets/operator_parallel.json --devices 8 --pipeline 2 --micro 8 --scheduler $sched \
      --steps "$steps" --dtype f64 --check --backend mpi 2>/dev/null | check)
  echo "| operator_parallel | 2 x 4 | $sched | mpi | $steps | ${d:-FAILED} |"
done
echo
echo "| scheduler | chunks per stage | modelled bubble, stages 0..3 | formula |"
echo "|---|---|---|---|"
for run in "1f1b 1" "gpipe 1" "1f1b 2" "zero_bubble_v 2"; do
  set -- $run
  out=$("$SIM" --net bench/nets/identical_layers.json --devices 4 --pipeline 4 --micro 8 --scheduler "$1" --interleave "$2" \
        --steps 3 --report --link 5,25 --device-tflops 0.01 2>/dev/null)
  b=$(echo "$out" | awk '/^pipeline:/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { printf "%s%s", sep, $5; sep = " / " }')
  f=$(echo "$out" | sed -n 's/^bubble: formula \([0-9.]*\).*/\1/p')
  echo "| $1 | $2 | $b | $f |"
done
