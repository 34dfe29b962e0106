#!/bin/sh
# search_steps.sh: every searched plan of the tutorial networks and the transformer, trained by
# build/sk-sim on 8 devices (threads, f32), next to the data-parallel plan (semi_auto on the same
# network with its strategies stripped): the measured median step time on this machine and the
# modelled step time under a link model (--link, --device-tflops, --report), plus the plan cost
# --print-strategies gives (a search's kept plan's dry-run price). The modes of one network run interleaved, their order rotated each round, so a
# drift of the shared machine falls on all of them; the table gives medians over the rounds and
# the median of each round's ratio to data parallel.
#   ROUNDS (5)  STEPS (50)  LINK (5,25)  TFLOPS (10)  NETS ("recursive_programming operator_parallel transformer")
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-50}
LINK=${LINK:-5,25}
TFLOPS=${TFLOPS:-10}
NETS=${NETS:-"recursive_programming operator_parallel transformer"}
MODES="semi_auto sharding_propagation recursive_programming exhaustive"
make -s build/sk-sim build/search_perf >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in $NETS; do build/search_perf --strip "examples/nets/$n.json" "$tmp/$n.json"; done
: >"$tmp/rows"
r=1
while [ "$r" -le "$ROUNDS" ]; do
  for n in $NETS; do
    # this round's order: MODES rotated by r
    order=$(echo $MODES | awk -v r="$r" '{ for (i = 0; i < NF; i++) printf "%s ", $(1 + (i + r) % NF) }')
    for m in $order; do
      if ! build/sk-sim --net "$tmp/$n.json" --devices 8 --steps "$STEPS" --mode "$m" --link "$LINK" \
             --device-tflops "$TFLOPS" --report --print-strategies >"$tmp/out" 2>&1; then
        echo "search_steps: sk-sim failed on $n $m:" >&2; tail -3 "$tmp/out" >&2; exit 1
      fi
      med=$(sed -n 's/^# .* median \([0-9.]*\) ms$/\1/p' "$tmp/out" | tail -1)
      model=$(sed -n 's/^modelled step time: \([0-9.]*\) ms.*/\1/p' "$tmp/out")
      cost=$(sed -n 's/^# [a-z_]*: plan cost \([0-9.e+-]*\) .*/\1/p' "$tmp/out")
      echo "$r $n $m $med $model ${cost:--}" >>"$tmp/rows"
    done
  done
  r=$((r + 1))
done
echo "# search_steps: 8 devices, f32, threads, $STEPS steps, $ROUNDS rounds interleaved; link $LINK, $TFLOPS TFLOPS"
echo "# measured: median over rounds of sk-sim's median step time; x_dp: median over rounds of that round's ratio to"
echo "# semi_auto (data parallel); modelled: device 0's virtual clock per step; plan_cost: the kept plan's dry-run price (ms;"
echo "# a search keeps the cheapest of its plan, data parallel and the network's own strategies), exhaustive's model (us)"
awk -v nets="$NETS" -v modes="$MODES" '
  function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { ms[$2, $3, $1] = $4; model[$2, $3] = $5; cost[$2, $3] = $6; if ($1 > R) R = $1 }
  END {
    printf "%-24s %-24s %12s %9s %13s %9s %12s\n", "# network", "mode", "measured_ms", "x_dp", "modelled_ms", "x_dp", "plan_cost"
    nn = split(nets, N, " "); nm = split(modes, M, " ")
    for (i = 1; i <= nn; i++) for (j = 1; j <= nm; j++) {
      n = N[i]; m = M[j]
      for (r = 1; r <= R; r++) { a[r] = ms[n, m, r]; q[r] = ms[n, m, r] / ms[n, "semi_auto", r] }
      printf "%-24s %-24s %12.3f %9.3f %13.3f %9.3f %12s\n", n, m, med(a, R), med(q, R), model[n, m],
             model[n, m] / model[n, "semi_auto"], cost[n, m]
    }
  }' "$tmp/rows"
