#!/bin/sh
# The dry run against an executed step on N devices (default 64, more than the suites run): for
# each configuration, `sk-sim --dry-run --report-json` and `sk-sim --steps 1 --report-json` on the
# same cluster model (5 us / 25 GB/s links, 10 TFLOPS devices), compared device by device: every
# memory kind and peak_total byte for byte (host aside: the dry run does not model the library's
# bookkeeping), every communication row, the FLOPs, and the modelled step time to a relative
# 1e-9.
# Prints one table row per configuration; exits 1 when a figure differs.
#   sh bench/dryrun_check.sh [N]
set -u
cd "$(dirname "$0")/.."
n=${1:-64}
SIM=build/sk-sim
[ -x "$SIM" ] || { echo "dryrun_check: $SIM is missing (run make)"; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "dryrun_check: needs python3 to read the JSON"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CLUSTER="--link 5,25 --device-tflops 10"

# compare DRY RUN: one verdict word and the step times, or the first difference
compare() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
dry, run = (json.load(open(p)) for p in sys.argv[1:3])
if dry["devices"] != run["devices"] or len(dry["classes"]) != len(run["classes"]):
    sys.exit("devices %s / %s" % (dry["devices"], run["devices"]))
for a, b in zip(dry["classes"], run["classes"]):
    for k in ("parameters", "gradients", "optimizer", "activations", "communication", "peak_total"):
        if a["memory"][k] != b["memory"][k]:
            sys.exit("device %d %s: dry %d, executed %d" % (a["id"], k, a["memory"][k], b["memory"][k]))
    if a["communication"] != b["communication"]:
        sys.exit("device %d communication rows differ" % a["id"])
    if a["flops_per_step"] != b["flops_per_step"]:
        sys.exit("device %d flops: dry %d, executed %d" % (a["id"], a["flops_per_step"], b["flops_per_step"]))
ds, rs = dry["step_time_ms"], run["step_time_ms"]
if ds is None or rs is None:
    sys.exit("step time: dry %s, executed %s (the cluster prices both)" % (ds, rs))
elif abs(ds - rs) > 1e-9 * rs:
    sys.exit("step time: dry %.12g ms, executed %.12g ms" % (ds, rs))
else:
    print("equal %.6f %.6f" % (ds, rs))
EOF
}

bad=0
echo "| configuration (N = $n) | memory, rows, FLOPs | dry step ms | executed step ms |"
echo "|---|---|---|---|"
while read -r cfg; do
  eval "set -- $cfg"
  "$SIM" "$@" $CLUSTER --dry-run --report-json "$tmp/dry.json" >"$tmp/dry" 2>"$tmp/dry.err" &&
    "$SIM" "$@" $CLUSTER --steps 1 --report-json "$tmp/run.json" >"$tmp/run" 2>"$tmp/run.err"
  if [ $? -ne 0 ]; then
    echo "| $* | FAILED to run: $(tail -1 "$tmp/dry.err" "$tmp/run.err" | grep sk-sim | head -1) | | |"; bad=1; continue
  fi
  if out=$(compare "$tmp/dry.json" "$tmp/run.json" 2>&1); then
    set -- $out
    echo "| $cfg | $1 | $2 | $3 |"
  else echo "| $cfg | DIFFERS: $out | | |"; bad=1; fi
done <<EOF
--net examples/nets/transformer.json --devices $n --dataset-strategy "((2,1),(2,))"
--net examples/nets/transformer.json --devices $n --dataset-strategy "((2,1),(2,))" --pipeline 2 --micro 2
--net examples/nets/transformer.json --devices $n --dataset-strategy "((2,1),(2,))" --hsdp 2,0
--net examples/nets/megatron_block.json --devices $n --dataset-strategy full_batch
--net examples/nets/recursive_programming.json --devices $n --dataset-strategy full_batch --mode recursive_programming
EOF
exit $bad
