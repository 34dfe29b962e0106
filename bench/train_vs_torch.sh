#!/bin/sh
# Single-device training step time, shardkit (build/sk-sim) against PyTorch (bench/torch_train.py),
# on the operator-parallel tutorial network in f64, batch 32, SGD.
#
#   sh bench/train_vs_torch.sh [ROUNDS] [STEPS]      (defaults 7 and 300; after make build/sk-sim)
#
# SK_SIM=path times another sk-sim build instead of build/sk-sim; SK_SIM_BEFORE=path adds a
# second one (an older build, say) to every round, with its own row and ratio.
#
# Each round runs every program once, rotating which goes first, so a drift of the shared
# machine's speed hits all alike. Each program reports its own median step (feed of the batch +
# forward + backward + SGD update, measured inside the process, so Python's import and the data
# loading are not counted; sk-sim's median is over all its steps, the first ones included,
# torch's over the steps after 20 untimed ones), in wall time and in the process's CPU time.
# The CPU time leaves out the time another process held the core, which on this 2-core shared
# machine can double a step's wall time for a whole run. The tables give, for each measure, the
# median over rounds of each program, and the median over rounds of the per-round ratio to
# torch (with its range).
#
# One core each: OPENBLAS_NUM_THREADS=1 for all (sk-sim also calls openblas_set_num_threads(1);
# torch.set_num_threads(1) does not reach the OpenBLAS that torch calls through libblas.so.3),
# OMP_NUM_THREADS=1 for torch's OpenMP. The torch side needs Debian's python3-torch: a
# bench-only dependency, not one of the project's build packages.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-7}
STEPS=${2:-300}
NET=examples/nets/operator_parallel.json
PY=${PYTHON:-/usr/bin/python3}
SIM=${SK_SIM:-build/sk-sim}
BEFORE=${SK_SIM_BEFORE:-}
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OPENBLAS_NUM_THREADS OMP_NUM_THREADS
for b in "$SIM" $BEFORE; do [ -x "$b" ] || { echo "$b is missing (make build/sk-sim)" >&2; exit 1; }; done
"$PY" -c 'import torch' 2>/dev/null || { echo "$PY cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# sk BINARY: "WALL,CPU", its median step in ms, from the summary line
# "# 1 device, f64, N steps, M ms per step, median cpu Y ms, median X ms"
sk() {
  "$1" --net "$NET" --steps "$STEPS" --dtype f64 >"$tmp/sk.out"
  sed -n 's/^# 1 device, f64, .* median cpu \([0-9.]*\) ms, median \([0-9.]*\) ms$/\2,\1/p' "$tmp/sk.out"
}
th() {
  "$PY" bench/torch_train.py --net "$NET" --steps "$STEPS" --dtype f64 >"$tmp/th.out"
  grep -q ' threads=1$' "$tmp/th.out" || { echo "torch did not run on 1 thread: $(cat "$tmp/th.out")" >&2; exit 1; }
  sed -n 's/^median_step_ms=\([0-9.]*\) median_cpu_ms=\([0-9.]*\) .*/\1,\2/p' "$tmp/th.out"
}

: >"$tmp/rows"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  a= b= c=-,-
  case $((r % 3)) in
    1) a=$(sk "$SIM"); b=$(th); [ -z "$BEFORE" ] || c=$(sk "$BEFORE") ;;
    2) b=$(th); [ -z "$BEFORE" ] || c=$(sk "$BEFORE"); a=$(sk "$SIM") ;;
    0) [ -z "$BEFORE" ] || c=$(sk "$BEFORE"); a=$(sk "$SIM"); b=$(th) ;;
  esac
  [ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] || { echo "round $r: a step time did not parse" >&2; exit 1; }
  echo "$a $b $c" | tr ',' ' ' >>"$tmp/rows"
  echo "round $r (wall,cpu ms): shardkit $a, torch $b${BEFORE:+, shardkit before $c}" >&2
  r=$((r + 1))
done
grep -h '^torch:' "$tmp/th.out" >&2

# rows: shardkit wall, cpu; torch wall, cpu; before wall, cpu ("-" when absent)
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# row LABEL COLUMN TORCH_COLUMN: median of the column, median and range of its ratio to torch's
row() {
  m=$(cut -d' ' -f"$2" "$tmp/rows" | med)
  awk -v k="$2" -v t="$3" '{ print $k / $t }' "$tmp/rows" | sort -g >"$tmp/ratio"
  printf '| %s | %.3f | **%.3f** (%.3f-%.3f) |\n' "$1" "$m" "$(med <"$tmp/ratio")" "$(head -1 "$tmp/ratio")" \
    "$(tail -1 "$tmp/ratio")"
}
version=$("$PY" -c 'import torch; print(torch.__version__)')
for measure in wall cpu; do
  if [ $measure = wall ]; then s=1 t=3 b=5; else s=2 t=4 b=6; fi
  echo
  echo "| program (f64, 1 thread) | median step, $measure time (ms) | ratio to torch, median of $ROUNDS rounds (range) |"
  echo "|---|---:|---:|"
  [ -z "$BEFORE" ] || row "shardkit before (\`$BEFORE\`)" $b $t
  row "shardkit (\`$SIM\`)" $s $t
  printf '| PyTorch %s | %.3f | 1 |\n' "$version" "$(cut -d' ' -f$t "$tmp/rows" | med)"
done
