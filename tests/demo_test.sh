#!/bin/sh
# The training demo (build/operator_parallel): a short run on 8 simulated devices equals the
# single-device run, in every variant (strategies, --layouts, full_batch); log format; bad input.
set -u
cd "$(dirname "$0")/.."
bin=build/operator_parallel
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
check_run() { # description, args...
  desc=$1; shift
  out=$($bin "$@" 2>&1); rc=$?
  [ $rc -eq 0 ] || { bad "$desc: exit $rc: $(echo "$out" | tail -3)"; return; }
  d=$(echo "$out" | sed -n 's/^check: passed: max relative loss difference \([^ ]*\) over \([0-9]*\) steps (tolerance [^)]*)$/\1/p')
  [ -n "$d" ] || { bad "$desc: no check line"; return; }
  awk -v d="$d" 'BEGIN { exit !(d + 0 <= 1e-9) }' && ok || bad "$desc: relative loss difference $d > 1e-9"
  echo "$out" | grep -Eq '^epoch: 0 step: 10, loss is [0-9]+\.[0-9]{7}$' && ok || bad "$desc: loss line format"
  first=$(echo "$out" | sed -n 's/^epoch: 0 step: 0, loss is //p')
  awk -v l="$first" 'BEGIN { exit !(l > 2.2 && l < 2.4) }' && ok || bad "$desc: first loss $first not near ln 10"
  echo "$out" | grep -Eq '^epoch: 0 test accuracy: 0\.[0-9]+$' && ok || bad "$desc: accuracy line"
}
check_run "8 devices, strategies" --steps 20 --check
check_run "8 devices, layouts" --steps 20 --check --layouts
check_run "8 devices, full_batch" --steps 20 --check --dataset-strategy full_batch
out=$($bin --devices 8 --steps 11 2>&1)
echo "$out" | grep -q 'fc1.weight dim 0' && ok || bad "parameter tables missing"
n=$(echo "$out" | grep -c '^epoch: 0 step: ')
[ "$n" -eq 2 ] && ok || bad "--steps 11 logs steps 0 and 10 (got $n lines)"
$bin --devices 3 >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "--devices 3 must exit 2"
$bin --bogus >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "unknown flag must exit 2"
out=$(DATA_PATH=/nonexistent $bin --steps 1 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q 'dataset-fashion-mnist' && ok || bad "missing data must name the package"
echo "demo: $pass passed, $fail failed"
[ $fail -eq 0 ]
