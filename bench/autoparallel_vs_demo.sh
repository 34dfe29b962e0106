#!/bin/sh
# Step time of the operator-parallel tutorial network, f64, side by side in interleaved rounds (the
# 2-core machine is shared and noisy): sk-sim on 1 device (the single-device trainer), sk-sim on 8
# devices (AutoParallel's compiler and runtime), and the hand-wired demo on 8 devices.
# Prints a Markdown table: the median over the rounds of each run's median step (ms), and ratios.
# Usage: sh bench/autoparallel_vs_demo.sh [ROUNDS] [STEPS]   (default 5 rounds of 200 steps)
set -u
cd "$(dirname "$0")/.."
rounds=${1:-5} steps=${2:-200}
net=examples/nets/operator_parallel.json
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for b in build/sk-sim build/operator_parallel; do [ -x "$b" ] || { echo "missing $b (run make)"; exit 1; }; done
for r in $(seq "$rounds"); do
  build/sk-sim --net $net --steps "$steps" --dtype f64 | sed -n 's/.*median \([0-9.]*\) ms$/\1/p' >>"$tmp/one"
  build/sk-sim --net $net --devices 8 --steps "$steps" --dtype f64 | sed -n 's/.*median \([0-9.]*\) ms$/\1/p' >>"$tmp/eight"
  # the demo prints seconds per epoch of 1875 steps (extrapolated from the steps run)
  build/operator_parallel --steps "$steps" --epochs 1 2>&1 |
    sed -n 's/^# 8 device(s), threads backend, \([0-9.]*\) s per epoch (of \([0-9]*\) steps).*/\1 \2/p' |
    awk '{ printf "%.3f\n", $1 * 1000 / $2 }' >>"$tmp/demo"
done
med() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
one=$(med "$tmp/one") eight=$(med "$tmp/eight") demo=$(med "$tmp/demo")
echo "| run | step (ms, median of $rounds rounds) | / 1 device |"
echo "|---|---:|---:|"
echo "| sk-sim, 1 device (trainer) | $one | 1.00 |"
awk -v a="$eight" -v b="$one" 'BEGIN { printf "| sk-sim, 8 devices (AutoParallel) | %s | %.2f |\n", a, a / b }'
awk -v a="$demo" -v b="$one" 'BEGIN { printf "| operator_parallel, 8 devices (hand-wired; mean step) | %s | %.2f |\n", a, a / b }'
