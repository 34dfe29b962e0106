#!/bin/sh
# Asks build/sk-layout every question of tests/ms_cases.txt (MindSpore's operator unit tests:
# device matrix, tensor maps, slice shapes, forward collective, strategy accepted or not) and
# compares its --json answer with what the MindSpore test asserts. One line per case: ok, FAIL
# with what was expected and what came back, or skip (the operator is not in shardkit yet); then
# "ms_cases: N passed, M failed, K skipped", and exit 1 if any failed.
# Usage: sh tests/ms_cases_test.sh [CASES-FILE]   (run from anywhere; POSIX sh and awk only)
set -u
set -f # attributes are split on spaces, never globbed
cases=${1:-}
case $cases in '' | /*) ;; *) cases=$(pwd)/$cases ;; esac
cd "$(dirname "$0")/.." || exit 1
[ -n "$cases" ] || cases=tests/ms_cases.txt
BIN=build/sk-layout
[ -x "$BIN" ] || { echo "ms_cases: $BIN is missing (run make first)"; echo "ms_cases: 0 passed, 1 failed, 0 skipped"; exit 1; }
[ -r "$cases" ] || { echo "ms_cases: cannot read $cases"; echo "ms_cases: 0 passed, 1 failed, 0 skipped"; exit 1; }
. tests/check_lib.sh
skipped=0
skip() { echo "skip $1"; skipped=$((skipped + 1)); }

# compare_json EXPECT DEV IN_MAPS OUT_MAPS IN_SLICES OUT_SLICES FORWARD < JSON-LINE: prints one
# line per difference between the case's expected fields and sk-layout's --json answer (nothing
# when they agree). Lists are compared with spaces removed, tensor by tensor; "*" matches any
# tensor, "-" is a field the MindSpore test does not assert.
compare_json() {
  awk -v expect="$1" -v dev="$2" -v in_maps="$3" -v out_maps="$4" -v in_slices="$5" \
      -v out_slices="$6" -v forward="$7" '
    # the [...] that opens at position start of s, brackets balanced
    function balanced(s, start,    i, depth, c) {
      depth = 0
      for (i = start; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "[") depth++
        else if (c == "]" && --depth == 0) return substr(s, start, i - start + 1)
      }
      return ""
    }
    # the list value of the first "key" in s ("" when absent)
    function list_after(s, key,    i) {
      i = index(s, "\"" key "\": [")
      return i ? balanced(s, i + length(key) + 4) : ""
    }
    # "[v0,v1,...]": the value of every "key" inside the tensor list s, spaces removed
    function per_tensor(s, key,    out, i, v, n) {
      out = ""; n = 0
      while ((i = index(s, "\"" key "\": [")) > 0) {
        v = balanced(s, i + length(key) + 4)
        out = out (n++ ? "," : "") v
        s = substr(s, i + length(key) + 4 + length(v))
      }
      gsub(/ /, "", out)
      return "[" out "]"
    }
    # splits the top level of "[a,[b,c],*]" into items[1..n]; returns n
    function items_of(list, items,    n, i, c, depth, start) {
      n = 0; depth = 0; start = 2
      if (list == "[]") return 0
      for (i = 2; i <= length(list); i++) {
        c = substr(list, i, 1)
        if (c == "[") depth++
        else if (c == "]") depth--
        if ((c == "," && depth == 0) || (c == "]" && depth < 0)) {
          items[++n] = substr(list, start, i - start); start = i + 1
        }
      }
      return n
    }
    function check_list(name, want, got,    w, g, nw, ng, i) {
      if (want == "-") return
      nw = items_of(want, w); ng = items_of(got, g)
      if (nw != ng) { differ(name, want, got); return }
      for (i = 1; i <= nw; i++)
        if (w[i] != "*" && w[i] != g[i]) { differ(name, want, got); return }
    }
    function differ(name, want, got) { printf "%s: master %s, sk-layout %s\n", name, want, got }
    # the forward operators as "none" or "Op[:reduce],..." (a reduction is a sum unless said)
    function forward_ops(s, with_reduce,    list, out, n, chunk, op, red) {
      list = list_after(s, "forward_ops"); out = ""; n = 0
      while (match(list, /\{[^}]*\}/)) {
        chunk = substr(list, RSTART, RLENGTH); list = substr(list, RSTART + RLENGTH)
        op = chunk; sub(/.*"op": "/, "", op); sub(/".*/, "", op)
        red = "sum"
        if (index(chunk, "\"reduce\": \"")) { red = chunk; sub(/.*"reduce": "/, "", red); sub(/".*/, "", red) }
        out = out (n++ ? "," : "") op (with_reduce ? ":" red : "")
      }
      return n ? out : "none"
    }
    {
      accepted = index($0, "\"ok\": true") > 0
      if (expect == "reject") { if (accepted) print "strategy: master rejects it, sk-layout accepts it"; next }
      if (!accepted) { err = $0; sub(/.*"error": "/, "", err); sub(/"}$/, "", err); print "strategy: master accepts it, sk-layout rejects it: " err; next }
      got_dev = list_after($0, "dev_matrix"); gsub(/ /, "", got_dev)
      if (dev != "-" && dev != got_dev) differ("dev_matrix", dev, got_dev)
      ins = list_after($0, "inputs"); outs = list_after($0, "outputs")
      check_list("input tensor_maps", in_maps, per_tensor(ins, "tensor_map"))
      check_list("output tensor_maps", out_maps, per_tensor(outs, "tensor_map"))
      check_list("input slice_shapes", in_slices, per_tensor(ins, "slice_shape"))
      check_list("output slice_shapes", out_slices, per_tensor(outs, "slice_shape"))
      if (forward != "-") {
        got_fwd = forward_ops($0, index(forward, ":") > 0)
        if (forward != got_fwd) differ("forward_ops", forward, got_fwd)
      }
    }'
}

# run_case FIELDS...: the 16 fields of one line of the cases file
run_case() {
  file=$1 test=$2 where=$3 op=$4 sk=$5 shapes=$6 strategy=$7 devices=$8 attrs=$9
  expect=${10} dev=${11} in_maps=${12} out_maps=${13} in_slices=${14} out_slices=${15} forward=${16}
  label="$file $test"
  [ "$where" = master ] || label="$label [$where]"
  set -- --op "$op" --shapes "$shapes" --shard "$strategy" --devices "$devices" --json
  for a in $attrs; do [ "$a" = - ] || set -- "$@" --attr "$a"; done
  "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if grep -q "unknown operator" "$tmp/err"; then
    case $sk in
      yes) bad "$label: sk-layout does not know $op, which the cases file says it has" ;;
      alias=*) skip "$label: no operator $op in shardkit yet (its rule is there as ${sk#alias=})" ;;
      *) skip "$label: no operator $op in shardkit yet" ;;
    esac
    return
  fi
  [ "$sk" = yes ] || echo "note $label: sk-layout knows $op now; the cases file's field 5 says '$sk'"
  if [ $rc -ne 0 ] && [ $rc -ne 2 ]; then bad "$label: sk-layout exit $rc: $(cat "$tmp/err")"; return; fi
  if [ -s "$tmp/err" ]; then bad "$label: usage error: $(cat "$tmp/err")"; return; fi
  compare_json "$expect" "$dev" "$in_maps" "$out_maps" "$in_slices" "$out_slices" "$forward" <"$tmp/out" >"$tmp/diff"
  if [ -s "$tmp/diff" ]; then
    bad "$label ($op $shapes, strategy $strategy, $devices devices)"
    sed 's/^/    /' "$tmp/diff"
  else
    echo "ok   $label"; ok
  fi
}

while IFS='|' read -r f1 f2 f3 f4 f5 f6 f7 f8 f9 f10 f11 f12 f13 f14 f15 f16 rest; do
  case $f1 in '' | '#'*) continue ;; esac
  if [ -z "$f16" ] || [ -n "$rest" ]; then bad "$cases: not 16 fields: $f1|$f2|..."; continue; fi
  run_case "$f1" "$f2" "$f3" "$f4" "$f5" "$f6" "$f7" "$f8" "$f9" "$f10" "$f11" "$f12" "$f13" "$f14" "$f15" "$f16"
done <"$cases"

echo "ms_cases: $pass passed, $fail failed, $skipped skipped"
[ "$fail" -eq 0 ]
