#!/bin/sh
# Single-device training step time, shardkit (build/sk-sim) against PyTorch (bench/torch_train.py),
# on the operator-parallel tutorial network in f64, batch 32, SGD.
#
#   sh bench/train_vs_torch.sh [ROUNDS] [STEPS]      (defaults 7 and 300; after make build/sk-sim)
#
# Each round runs both programs once, alternating which goes first, so a drift of the shared
# machine's speed hits both alike. Each program reports its own median step time (feed of the
# batch + forward + backward + SGD update, measured inside the process, so Python's import and
# the data loading are not counted); the table gives the median over rounds of each, and the
# median over rounds of the per-round ratio.
#
# One core each: OPENBLAS_NUM_THREADS=1 for both (sk-sim also calls openblas_set_num_threads(1);
# torch.set_num_threads(1) does not reach the OpenBLAS that torch calls through libblas.so.3),
# OMP_NUM_THREADS=1 for torch's OpenMP. The torch side needs Debian's python3-torch: it is a
# bench-only dependency, not one of the project's build packages.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-7}
STEPS=${2:-300}
NET=examples/nets/operator_parallel.json
PY=${PYTHON:-/usr/bin/python3}
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OPENBLAS_NUM_THREADS OMP_NUM_THREADS
[ -x build/sk-sim ] || { echo "build/sk-sim is missing: make build/sk-sim" >&2; exit 1; }
"$PY" -c 'import torch' 2>/dev/null || { echo "$PY cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sk() {
  build/sk-sim --net "$NET" --steps "$STEPS" --dtype f64 >"$tmp/sk.out"
  # "# 1 device, f64, N steps, M ms per step, median X ms"
  sed -n 's/^# 1 device, f64, .* median \([0-9.]*\) ms$/\1/p' "$tmp/sk.out"
}
th() {
  "$PY" bench/torch_train.py --net "$NET" --steps "$STEPS" --dtype f64 >"$tmp/th.out"
  grep -q ' threads=1$' "$tmp/th.out" || { echo "torch did not run on 1 thread: $(cat "$tmp/th.out")" >&2; exit 1; }
  sed -n 's/^median_step_ms=\([0-9.]*\) .*/\1/p' "$tmp/th.out"
}

: >"$tmp/rows"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  if [ $((r % 2)) -eq 1 ]; then a=$(sk); b=$(th); else b=$(th); a=$(sk); fi
  [ -n "$a" ] && [ -n "$b" ] || { echo "round $r: no step time parsed (sk '$a', torch '$b')" >&2; exit 1; }
  echo "$a $b" >>"$tmp/rows"
  echo "round $r: shardkit $a ms, torch $b ms" >&2
  r=$((r + 1))
done
grep -h '^torch:' "$tmp/th.out" >&2

med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ska=$(cut -d' ' -f1 "$tmp/rows" | med)
thb=$(cut -d' ' -f2 "$tmp/rows" | med)
ratio=$(awk '{ print $1 / $2 }' "$tmp/rows" | med)
lo=$(awk '{ print $1 / $2 }' "$tmp/rows" | sort -g | head -1)
hi=$(awk '{ print $1 / $2 }' "$tmp/rows" | sort -g | tail -1)
echo "| program | median step (ms) |"
echo "|---|---:|"
printf '| shardkit `build/sk-sim` (f64, OpenBLAS, 1 thread) | %.3f |\n' "$ska"
printf '| PyTorch %s (f64, 1 thread) | %.3f |\n' "$("$PY" -c 'import torch; print(torch.__version__)')" "$thb"
printf '| **ratio shardkit / torch** (median of %d rounds; range) | **%.3f** (%.3f-%.3f) |\n' "$ROUNDS" "$ratio" "$lo" "$hi"
