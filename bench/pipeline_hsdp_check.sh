#!/bin/sh
# Pipeline parallel with optimizer parallel (hsdp) against one device: the tutorial network
# (examples/nets/recursive_programming.json, its ReLUs flagged for recomputation) on 8 devices,
# 2 stages x 4, 4 micro-batches, every scheduler x level1 / level2 / level3 (hsdp's defaults
# otherwise: shard over the stage's replicas, 64 KB threshold), f64, --check over STEPS steps
# (default 300), threads backend; then each device's memory (`--report`) without and with hsdp,
# with the network's SGD and with Adam. Prints markdown table rows.
#   sh bench/pipeline_hsdp_check.sh [STEPS]
set -u
cd "$(dirname "$0")/.."
steps=${1:-300}
SIM=build/sk-sim
NET="--net examples/nets/recursive_programming.json --devices 8 --pipeline 2 --micro 4"
[ -x "$SIM" ] || { echo "pipeline_hsdp_check: $SIM is missing (run make)"; exit 1; }
check() { sed -n 's/^check: [A-Za-z]*: max relative loss difference \([^ ]*\) .*/\1/p'; }
echo "| scheduler | hsdp | steps | max relative loss difference |"
echo "|---|---|---|---|"
for sched in gpipe 1f1b "1f1b --interleave 2" "gpipe --interleave 2" zero_bubble_v; do
  for lv in level1 level2 level3; do
    # shellcheck disable=SC2086
    d=$("$SIM" $NET --scheduler $sched --hsdp -1,64,$lv --steps "$steps" --dtype f64 --check 2>/dev/null | check)
    echo "| $sched | $lv | $steps | ${d:-FAILED} |"
  done
done
echo
echo "| optimizer | hsdp | device | parameters | gradients | optimizer state | peak parameters | peak total |"
echo "|---|---|---|---|---|---|---|---|"
for opt in sgd adam; do
  for h in "" "--hsdp" "--hsdp -1,64,level2" "--hsdp -1,64,level3"; do
    # shellcheck disable=SC2086
    "$SIM" $NET --optimizer $opt $h --steps 4 --dtype f64 --report 2>/dev/null |
      awk -v o="$opt" -v h="${h:-off}" '$1 ~ /^[04]$/ && NF == 10 { printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", o, h, $1, $2, $3, $4, $8, $9 }'
  done
done
