#!/bin/sh
# Checks the sk-layout explainer (build/sk-layout) from the outside: exact output of the
# tutorial layout and the strategy examples, exit status 2 plus one error line for bad input.
# Also that no program in tools/, examples/ or bench/ uses a private sk__ name.
# Run from anywhere; `make test` runs it after the unit tests.
set -u
cd "$(dirname "$0")/.."
BIN=build/sk-layout
[ -x "$BIN" ] || { echo "tools: $BIN is missing (run make first)"; echo "tools: 0 passed, 1 failed"; exit 1; }
. tests/check_lib.sh
tab=$(printf '\t')

# expect_out NAME EXPECTED-STDOUT ARGS...: exit 0, exact stdout, empty stderr
expect_out() {
  name=$1; want=$2; shift 2
  "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  printf '%s\n' "$want" >"$tmp/want"
  if [ $rc -ne 0 ]; then bad "$name: exit $rc, stderr: $(cat "$tmp/err")"
  elif ! cmp -s "$tmp/out" "$tmp/want"; then bad "$name: output differs"; diff "$tmp/want" "$tmp/out" | sed 's/^/    /' | head -20
  elif [ -s "$tmp/err" ]; then bad "$name: unexpected stderr: $(cat "$tmp/err")"
  else ok; fi
}

# expect_err NAME SUBSTRING ARGS...: exit 2, nothing on stdout, exactly one line
# "sk-layout: error: ..." on stderr containing SUBSTRING
expect_err() {
  name=$1; want=$2; shift 2
  "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  lines=$(wc -l <"$tmp/err")
  if [ $rc -ne 2 ]; then bad "$name: exit $rc, want 2"
  elif [ "$lines" -ne 1 ]; then bad "$name: $lines stderr lines, want 1: $(cat "$tmp/err")"
  elif ! grep -q '^sk-layout: error: ' "$tmp/err"; then bad "$name: stderr lacks 'sk-layout: error: ': $(cat "$tmp/err")"
  elif ! grep -qF -- "$want" "$tmp/err"; then bad "$name: stderr lacks '$want': $(cat "$tmp/err")"
  elif [ -s "$tmp/out" ]; then bad "$name: stdout not empty"
  else ok; fi
}

# ---- the tutorial's x[16,784] under layout("mp",("sp","dp")) (docs/semantics.md section 3) ---
expect_out "tutorial x tsv" "rank${tab}coords${tab}slices
0${tab}0,0,0${tab}0:8,0:196
1${tab}0,0,1${tab}8:16,0:196
2${tab}0,1,0${tab}0:8,392:588
3${tab}0,1,1${tab}8:16,392:588
4${tab}1,0,0${tab}0:8,196:392
5${tab}1,0,1${tab}8:16,196:392
6${tab}1,1,0${tab}0:8,588:784
7${tab}1,1,1${tab}8:16,588:784" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --tsv

# the same through the numeric tensor_map, and with whitespace in the layout text
"$BIN" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --tsv >"$tmp/a" 2>&1
"$BIN" --mesh dp=2,sp=2,mp=2 --shape 16,784 --ms-map "(0,(1,2))" --tsv >"$tmp/b" 2>&1
"$BIN" --mesh "dp=2, sp=2, mp=2" --shape 16,784 --map " mp , ( sp , dp ) " --tsv >"$tmp/c" 2>&1
if cmp -s "$tmp/a" "$tmp/b" && cmp -s "$tmp/a" "$tmp/c"; then ok; else bad "--ms-map / whitespace give a different tsv"; fi

expect_out "tutorial W tsv" "rank${tab}coords${tab}slices
0${tab}0,0,0${tab}0:196,0:512
1${tab}0,0,1${tab}0:196,0:512
2${tab}0,1,0${tab}392:588,0:512
3${tab}0,1,1${tab}392:588,0:512
4${tab}1,0,0${tab}196:392,0:512
5${tab}1,0,1${tab}196:392,0:512
6${tab}1,1,0${tab}588:784,0:512
7${tab}1,1,1${tab}588:784,0:512" --mesh dp=2,sp=2,mp=2 --shape 784,512 --map "(sp,dp),None" --tsv

expect_out "tutorial W groups" "0,1
2,3
4,5
6,7" --mesh dp=2,sp=2,mp=2 --shape 784,512 --map "(sp,dp),None" --groups

# ---- strategies: ReLU ((4,1),) on 8 devices, the repeat axis on either side --------------------
expect_out "strategy 4,1 groups (right)" "0,1
2,3
4,5
6,7" --devices 8 --strategy 4,1 --shape 16,512 --groups
expect_out "strategy 4,1 groups (--repeat right)" "0,1
2,3
4,5
6,7" --devices 8 --strategy 4,1 --shape 16,512 --repeat right --groups
expect_out "strategy 4,1 groups (--repeat left)" "0,4
1,5
2,6
3,7" --devices 8 --strategy 4,1 --shape 16,512 --repeat left --groups
expect_out "strategy 4,1 tsv: coords over [4,1,2]" "rank${tab}coords${tab}slices
0${tab}0,0,0${tab}0:4,0:512
1${tab}0,0,1${tab}0:4,0:512
2${tab}1,0,0${tab}4:8,0:512
3${tab}1,0,1${tab}4:8,0:512
4${tab}2,0,0${tab}8:12,0:512
5${tab}2,0,1${tab}8:12,0:512
6${tab}3,0,0${tab}12:16,0:512
7${tab}3,0,1${tab}12:16,0:512" --devices 8 --strategy 4,1 --shape 16,512 --tsv
# MatMul's x by (2,4) on 8 devices: product 8, no repeat axis, so no two ranks share a slice
expect_out "fully split: every rank alone" "0
1
2
3
4
5
6
7" --devices 8 --strategy 2,4 --shape 16,784 --groups
expect_out "standard form of the tutorial x" "mesh        dp=2,sp=2,mp=2
dev_matrix  [2,2,2]
shape       [16,2,392]
layout      mp,sp,dp
tensor_map  (0,1,2)" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --standard
expect_out "standard form drops size-1 axes" "mesh        d0=4,rep=2
dev_matrix  [4,2]
shape       [16,512]
layout      d0,None
tensor_map  (1,-1)" --devices 8 --strategy 4,1 --shape 16,512 --standard

# ---- the default table, help, and valid variants exit 0 --------------------------------------
"$BIN" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --name x >"$tmp/out" 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/out")" -eq 10 ] && grep -q 'mp,(sp,dp)' "$tmp/out" &&
   grep -q '^   6  (1,1,0)     \[0,8)    \[588,784)  \[8,196\]$' "$tmp/out"; then ok
else bad "default table"; sed 's/^/    /' "$tmp/out"; fi
"$BIN" --help >"$tmp/out" 2>&1 && grep -q '^Usage: sk-layout' "$tmp/out" && ok || bad "--help"
"$BIN" -h >/dev/null 2>&1 && ok || bad "-h"
"$BIN" --mesh=dp=4 --shape=8 --map=dp --tsv >/dev/null 2>&1 && ok || bad "--flag=value form"
"$BIN" --mesh dp=4 --shape 8 --tsv >/dev/null 2>&1 && ok || bad "no --map means unsplit"
"$BIN" --strategy 2,2 --shape 4,4 --groups >/dev/null 2>&1 && ok || bad "--strategy without --devices"

# ---- bad input: exit 2, one error line naming the problem -------------------------------------
expect_err "unknown flag" "unknown option '--bogus'" --bogus
expect_err "missing value" "--mesh needs a value" --shape 16 --mesh
expect_err "missing --shape" "--shape is required" --mesh dp=2
expect_err "no mesh, no strategy" "give --mesh" --shape 16
expect_err "unknown axis" "unknown axis 'xp' in layout \"mp,(xp,dp)\"" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(xp,dp)"
expect_err "axis twice" "axis 'dp' used twice" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "dp,(sp,dp)"
expect_err "not divisible" "dim 1 (784) is not divisible by 3 = sp*mp" --mesh dp=2,sp=3,mp=1 --shape 16,784 --map "dp,(sp,mp)"
expect_err "unbalanced parens" "--map: expected ')' at column 10 in 'mp,(sp,dp'" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp"
expect_err "nested tuple" "--map: nested tuple in a map dim at column 2" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "((mp,sp),dp),None"
expect_err "two commas" "--map: expected a value, found ',' at column 4 in 'mp,,'" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,,"
expect_err "dims mismatch" "has 1 dims; the shape has 2" --mesh dp=2 --shape 16,784 --map "dp"
expect_err "too many devices" "mesh has 8192 devices; allowed 1..4096" --mesh dp=2,sp=2,mp=2048 --shape 16 --map None
expect_err "bad shape" "--shape: expected a positive integer, found a name at column 4 in '16,x'" --mesh dp=2 --shape 16,x --map dp,None
expect_err "zero in shape" "--shape" --mesh dp=2 --shape 0 --map dp
expect_err "strategy not dividing devices" "8 devices are not divisible by the strategy product 3" --devices 8 --strategy 3 --shape 9
expect_err "bad --repeat" "--repeat takes right or left" --devices 8 --strategy 4,1 --shape 16,512 --repeat middle
expect_err "strategy/shape mismatch" "--strategy has 1 values; --shape has 2" --devices 8 --strategy 4 --shape 16,512
expect_err "--map with --strategy" "not --strategy" --devices 8 --strategy 4 --shape 16 --map d0
expect_err "two outputs" "choose one of" --mesh dp=2 --shape 16 --map dp --tsv --groups
expect_err "bad ms-map" "-1 inside a tuple" --mesh dp=2,sp=2 --shape 16 --ms-map "((0,-1),)"
expect_err "ms-map dims mismatch" "--ms-map \"(0,1)\" has 2 dims; --shape has 1" --mesh dp=2,sp=2 --shape 16 --ms-map "(0,1)"
expect_err "flag twice" "--shape given twice" --mesh dp=2 --shape 16 --shape 16
expect_err "empty --name" "--name takes a label for the table, not ''" --mesh dp=2 --shape 16 --map dp --name ""

# ---- Python forms: what a user pastes from a MindSpore script ---------------------------------
"$BIN" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --tsv >"$tmp/a" 2>&1
"$BIN" --mesh dp=2,sp=2,mp=2 --shape "(16,784)" --map '("mp",("sp","dp"))' --tsv >"$tmp/b" 2>&1
"$BIN" --mesh dp=2,sp=2,mp=2 --shape "[16, 784]" --map "('mp', ('sp', 'dp'),)" --tsv >"$tmp/c" 2>&1
"$BIN" --layout 'Layout((2,2,2),("dp","sp","mp"))("mp",("sp","dp"))' --shape 16,784 --tsv >"$tmp/d" 2>&1
"$BIN" --layout 'Layout((2,2,2),("dp","sp","mp"))' --shape 16,784 --map "mp,(sp,dp)" --tsv >"$tmp/e" 2>&1
"$BIN" --layout 'mindspore.Layout(device_matrix=(2, 2, 2), alias_name=("dp", "sp", "mp"))("mp", ("sp", "dp"))' \
  --shape 16,784 --tsv >"$tmp/f" 2>&1
"$BIN" --mesh dp=2,sp=2,mp=2 --shape 16,784 --ms-map "[0, [1, 2]]" --tsv >"$tmp/g" 2>&1
for f in b c d e f g; do
  if cmp -s "$tmp/a" "$tmp/$f"; then ok; else bad "Python form $f of the tutorial x differs"; sed 's/^/    /' "$tmp/$f" | head -3; fi
done
expect_out "quoted None and a 1-tuple map" "mesh        dp=2,sp=2
dev_matrix  [2,2]
shape       [16,2,4]
layout      None,sp,dp
tensor_map  (-1,0,1)" --mesh dp=2,sp=2 --shape "(16,8)" --map '("None",("sp","dp"))' --standard
expect_out "a 1-dim map written (sp,dp) is one dim" "mesh        dp=2,sp=2
dev_matrix  [2,2]
shape       [2,8]
layout      sp,dp
tensor_map  (0,1)" --mesh dp=2,sp=2 --shape "(16,)" --map '("sp","dp")' --standard
# --shape-util: MindSpore's shape helpers, vectors of its shape_util_test.cc (UnifyShape2,
# ExpandShape2, ExpandAccumulateProduct4, ShapeToAccumulateProductReverse)
expect_out "shape-util UnifyShape" "[2, 4, 4]" --shape-util UnifyShape "(8,4)" "(2,16)"
expect_out "shape-util ExpandShape" "[2, 4, 2, 4, 8]" --shape-util ExpandShape 2,8,32 2,4,8
expect_out "shape-util ExpandAccumulateProduct" "[524288, 4096, 1024]" --shape-util ExpandAccumulateProduct 524288,1024 524288,4096
expect_out "shape-util ShapeToAccumulateProductReverse" "[512, 256, 32]" --shape-util ShapeToAccumulateProductReverse "[2,8,32]"
expect_err "shape-util unknown function" "unknown function 'Unify'" --shape-util Unify 2,8
expect_err "shape-util one list short" "UnifyShape takes 2 lists, got 1" --shape-util UnifyShape 2,8
expect_err "shape-util different ends" "last values of in1 and in2 must be equal (8, 16)" --shape-util UnifyAccumulateProduct 2,8 4,16

# --dev-list: MindSpore's DeviceMatrix on a list of device ids (sk_device_matrix). The random-order
# list and its groups are device_matrix_test.cc's TestGetDeviceByTensorMapRandomOrderSliceOne.
expect_out "dev-list stage groups" "dim 0: [9, 11]
dim 1: [8, 9]" --dev-list 8,9,10,11 --dev-shape 2,2 --rank 9
expect_out "dev-list tensor map" "[8, 9]" --dev-list "(8,9,10,11)" --dev-shape "(2,2)" --rank 9 --tensor-map "(1,-1)"
expect_out "dev-list random order" "[3, 9, 100, 0]" --dev-list 10,3,2,9,11,100,1,0 --dev-shape 4,2 --rank 0 --tensor-map "(-1,0)"
expect_err "dev-list rank not listed" "rank 7 is not in the device list" --dev-list 8,9,10,11 --dev-shape 2,2 --rank 7
expect_err "dev-list shape against list" "not the device list's 3 entries" --dev-list 8,9,10 --dev-shape 2,2 --rank 9
expect_err "dev-list twice" "device 9 is listed twice" --dev-list 8,9,9,11 --dev-shape 4 --rank 8
expect_err "dev-list map value" "tensor map value 2 (dim 0) is outside" --dev-list 8,9,10,11 --dev-shape 2,2 --rank 9 --tensor-map "(2,)"
expect_err "dev-list other flag" "not '--mesh'" --dev-list 8,9 --dev-shape 2 --rank 8 --mesh dp=2
expect_err "dev-list needs rank" "needs --dev-shape and --rank" --dev-list 8,9 --dev-shape 2

expect_out "strategy (4,) on 8 devices" "0,1
2,3
4,5
6,7" --devices 8 --strategy "(4,)" --shape "(16,)" --groups
"$BIN" --devices 8 --strategy "(4, 1)" --shape "(16, 512)" --tsv >"$tmp/a" 2>&1
"$BIN" --devices 8 --strategy 4,1 --shape 16,512 --tsv >"$tmp/b" 2>&1
if cmp -s "$tmp/a" "$tmp/b"; then ok; else bad "--strategy (4, 1) differs from 4,1"; fi
"$BIN" --mesh a=2,b=4 --shape 16,512 --map None,None --partial '("b",)' --to '("b", None)' --tsv >"$tmp/a" 2>&1
"$BIN" --mesh a=2,b=4 --shape 16,512 --map None,None --partial b --to b,None --tsv >"$tmp/b" 2>&1
if cmp -s "$tmp/a" "$tmp/b"; then ok; else bad "--partial / --to in Python form differ"; fi
expect_err "strategy: unclosed tuple" "--strategy: expected ')' at column 5 in '(4,1'" --devices 8 --strategy "(4,1" --shape 16,512
expect_err "map: a number for an axis" "--map: expected an axis name or None, found an integer at column 8" --mesh dp=2 --shape 16,8 --map '("dp", 3)'
expect_err "map: unterminated string" "--map: unterminated string (opened at column 2)" --mesh dp=2 --shape 16 --map '("dp)'
expect_err "layout: not a Layout" "--layout: expected Layout(device_matrix, alias_name) at column 1" --layout 'Mesh((2,),("dp",))' --shape 16
expect_err "layout: names and dims" "--layout: alias_name has 1 names for 2 device matrix dims" --layout 'Layout((2,2),("dp",))' --shape 16
expect_err "layout: rank_list" "rank_list is not supported" --layout 'Layout((2,2),("dp","mp"),rank_list=(3,2,1,0))' --shape 16
expect_err "layout: map twice" "--layout already has the map" --layout 'Layout((2,),("dp",))("dp",)' --shape 16 --map dp
# the Layout reading shared with sk-sim (tools/pylayout.h): its messages, as sk-layout prints them
expect_out "layout: keywords in either order, a 1-dim map of two axes" "mesh        dp=2,mp=4
dev_matrix  [2,4]
shape       [2,32]
layout      dp,mp
tensor_map  (1,0)" --layout 'Layout(alias_name=("dp","mp"), device_matrix=(2,4), rank_list=None)(("dp","mp"))' --shape 64 --standard
expect_err "layout: empty map" "--layout: the map has no dims in 'Layout((2,4),(\"dp\",\"mp\"))()'" --layout 'Layout((2,4),("dp","mp"))()' --shape 16
expect_err "layout: keyword in the map" "--layout: a map takes no keyword 'x' at column 29" --layout 'Layout((2,4),("dp","mp"))(x="dp")' --shape 16
expect_err "layout: not an axis name" "--layout: 'd p' is not an axis name at column 27" --layout 'Layout((2,4),("dp","mp"))("d p","mp")' --shape 16,8
expect_err "layout: alias_name twice" "sk-layout: error: axis name 'dp' appears twice in the mesh (axes 0 and 1)" --layout 'Layout((2,2),("dp","dp"))' --shape 16
long=$(printf 'a_name_of_thirty_characters_%.0s,' $(seq 1 40))
expect_err "map: longer than its buffer" "sk-layout: error: a tensor map longer than 1023 characters" --mesh a=2 --shape 16 --map "${long%,}"

# ---- the operator explainer: --op (sk_ops.h) ---------------------------------------------------
# expect_json NAME EXPECTED-LINE ARGS...: exit 0, stdout exactly one line, valid JSON
expect_json() {
  name=$1; want=$2; shift 2
  "$BIN" "$@" --json >"$tmp/out" 2>"$tmp/err"; rc=$?
  printf '%s\n' "$want" >"$tmp/want"
  if [ $rc -ne 0 ]; then bad "$name: exit $rc: $(cat "$tmp/out" "$tmp/err")"
  elif ! cmp -s "$tmp/out" "$tmp/want"; then bad "$name: JSON differs"; diff "$tmp/want" "$tmp/out" | sed 's/^/    /'
  elif [ -s "$tmp/err" ]; then bad "$name: unexpected stderr: $(cat "$tmp/err")"
  elif ! valid_json "$tmp/out"; then bad "$name: not valid JSON"
  else ok; fi
}
# expect_rejected NAME SUBSTRING ARGS...: the rules reject the strategy: exit 2, one JSON line
# {"ok": false, "error": "...SUBSTRING..."}, nothing on stderr; and without --json, the error
# on stderr with nothing on stdout
expect_rejected() {
  name=$1; want=$2; shift 2
  "$BIN" "$@" --json >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -ne 2 ]; then bad "$name: exit $rc, want 2"
  elif [ -s "$tmp/err" ]; then bad "$name: unexpected stderr: $(cat "$tmp/err")"
  elif [ "$(wc -l <"$tmp/out")" -ne 1 ] || ! grep -q '^{"ok": false, "error": ".*"}$' "$tmp/out"; then bad "$name: not an ok:false line: $(cat "$tmp/out")"
  elif ! grep -qF -- "$want" "$tmp/out"; then bad "$name: error lacks '$want': $(cat "$tmp/out")"
  elif ! valid_json "$tmp/out"; then bad "$name: not valid JSON"
  else ok; fi
  expect_err "$name (text)" "$want" "$@"
}
# valid_json FILE: parses as JSON (checked where python3 is installed)
valid_json() {
  ! command -v python3 >/dev/null 2>&1 || python3 -c 'import json,sys; json.load(sys.stdin)' <"$1" 2>/dev/null
}
# same_error JSON-FILE STDERR-FILE: the JSON is exactly {"ok": false, "error": M}, M the stderr
# line's message (checked where python3 is installed)
same_error() {
  ! command -v python3 >/dev/null 2>&1 || python3 -c '
import json, sys
line = open(sys.argv[2]).read().rstrip("\n")
sys.exit(json.load(open(sys.argv[1])) != {"ok": False, "error": line[len("sk-layout: error: "):]})' "$1" "$2" 2>/dev/null
}
# expect_usage_json NAME SUBSTRING ARGS...: a usage error of the --op form under --json (added
# last, so an error in an earlier flag is covered): exit 2, the one stderr line containing
# SUBSTRING, and on stdout one line {"ok": false, "error": <that message>}; without --json,
# expect_err
expect_usage_json() {
  name=$1; want=$2; shift 2
  "$BIN" "$@" --json >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -ne 2 ]; then bad "$name: exit $rc, want 2"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^sk-layout: error: ' "$tmp/err"; then bad "$name: want one error line on stderr: $(cat "$tmp/err")"
  elif ! grep -qF -- "$want" "$tmp/err"; then bad "$name: stderr lacks '$want': $(cat "$tmp/err")"
  elif [ "$(wc -l <"$tmp/out")" -ne 1 ] || ! grep -q '^{"ok": false, "error": ".*"}$' "$tmp/out"; then bad "$name: not an ok:false line: $(cat "$tmp/out")"
  elif ! valid_json "$tmp/out"; then bad "$name: not valid JSON: $(cat "$tmp/out")"
  elif ! same_error "$tmp/out" "$tmp/err"; then bad "$name: the JSON error is not the stderr message: $(cat "$tmp/out")"
  else ok; fi
  expect_err "$name (text)" "$want" "$@"
}
MM="--op MatMul --shapes ((32,784),(784,512)) --shard ((2,4),(4,1)) --params 1"

# MatMul ((2,4),(4,1)) on 8: device matrix [a,b,c] = [2,4,1]; x [32,784] by (a,b): map [2,1],
# slice [16,196]; w by (b,c): [1,0], [196,512]; out by (a,c): [2,0], [16,512]; the split
# contraction dim leaves partial sums, summed by AllReduce along b: ranks 0..3 (b has stride 1);
# x's Mirror would run along c (size 1): none; w's along a: [0,4]. w is a parameter (--params 1),
# so its partial gradient (along a) is summed by its Mirror, not by a backward AllReduce
expect_out "MatMul on 8: text" "MatMul on 8 devices; groups are rank 0's
dev_matrix   [2, 4, 1]  (d0=2,d1=4,d2=1)
input 0      shape [32, 784]  tensor_map [2, 1]  slice_shape [16, 196]
input 1      shape [784, 512]  tensor_map [1, 0]  slice_shape [196, 512]
output 0     shape [32, 512]  tensor_map [2, 0]  slice_shape [16, 512]
forward      AllReduce over d1, group [0, 1, 2, 3]
backward 0   none
backward 1   none
mirror 0     none
mirror 1     _MirrorOperator (AllReduce) over d0, group [0, 4]" $MM --devices 8
expect_json "MatMul on 8: JSON" '{"ok": true, "dev_matrix": [2, 4, 1], "inputs": [{"shape": [32, 784], "tensor_map": [2, 1], "slice_shape": [16, 196]}, {"shape": [784, 512], "tensor_map": [1, 0], "slice_shape": [196, 512]}], "outputs": [{"shape": [32, 512], "tensor_map": [2, 0], "slice_shape": [16, 512]}], "forward_ops": [{"op": "AllReduce", "group": [0, 1, 2, 3]}], "backward_ops": [], "mirror_ops": [null, {"op": "_MirrorOperator", "group": [0, 4]}]}' $MM --devices 8
# on 32: a repeat axis of 4 on the right, [2,4,1,4]: maps shift up by one; b's stride is now 4
# (c is 1 and rep 4), so the AllReduce group is 0,4,8,12; x's Mirror runs along rep: 0..3;
# w's along a and rep: 0..3 and 16..19
expect_json "MatMul on 32: JSON" '{"ok": true, "dev_matrix": [2, 4, 1, 4], "inputs": [{"shape": [32, 784], "tensor_map": [3, 2], "slice_shape": [16, 196]}, {"shape": [784, 512], "tensor_map": [2, 1], "slice_shape": [196, 512]}], "outputs": [{"shape": [32, 512], "tensor_map": [3, 1], "slice_shape": [16, 512]}], "forward_ops": [{"op": "AllReduce", "group": [0, 4, 8, 12]}], "backward_ops": [], "mirror_ops": [{"op": "_MirrorOperator", "group": [0, 1, 2, 3]}, {"op": "_MirrorOperator", "group": [0, 1, 2, 3, 16, 17, 18, 19]}]}' $MM --devices 32
"$BIN" $MM --devices 32 --rank 5 --json >"$tmp/out" 2>&1
grep -qF '"forward_ops": [{"op": "AllReduce", "group": [1, 5, 9, 13]}]' "$tmp/out" && ok || bad "MatMul on 32, rank 5's AllReduce group: $(cat "$tmp/out")"
# Add [1,48] + [48,1] by ((1,8),(4,1)) on 32: each dim takes the cut of the input that does not
# broadcast it: [4,8]; x maps only dim 1, y only dim 0; each gradient sums over the axis its
# input broadcasts along
expect_json "Add broadcasting both ways on 32: JSON" '{"ok": true, "dev_matrix": [4, 8], "inputs": [{"shape": [1, 48], "tensor_map": [-1, 0], "slice_shape": [1, 6]}, {"shape": [48, 1], "tensor_map": [1, -1], "slice_shape": [12, 1]}], "outputs": [{"shape": [48, 48], "tensor_map": [1, 0], "slice_shape": [12, 6]}], "forward_ops": [], "backward_ops": [{"op": "AllReduce", "group": [0, 8, 16, 24], "input": 0}, {"op": "AllReduce", "group": [0, 1, 2, 3, 4, 5, 6, 7], "input": 1}], "mirror_ops": [{"op": "_MirrorOperator", "group": [0, 8, 16, 24]}, {"op": "_MirrorOperator", "group": [0, 1, 2, 3, 4, 5, 6, 7]}]}' \
  --op Add --shapes "((1,48),(48,1))" --shard "((1,8),(4,1))" --devices 32
# ReLU ((4,1),) on 8: [4,1,2] with the repeat axis; one input's flat form "(16,512)" too
expect_json "ReLU on 8: JSON" '{"ok": true, "dev_matrix": [4, 1, 2], "inputs": [{"shape": [16, 512], "tensor_map": [2, 1], "slice_shape": [4, 512]}], "outputs": [{"shape": [16, 512], "tensor_map": [2, 1], "slice_shape": [4, 512]}], "forward_ops": [], "backward_ops": [], "mirror_ops": [{"op": "_MirrorOperator", "group": [0, 1]}]}' \
  --op ReLU --shapes "((16,512),)" --shard "((4,1),)" --devices 8
"$BIN" --op ReLU --shapes "(16,512)" --shard "(4,1)" --devices 8 --json >"$tmp/a" 2>&1
"$BIN" --op ReLU --shapes "((16,512),)" --shard "((4,1),)" --devices 8 --json >"$tmp/b" 2>&1
if cmp -s "$tmp/a" "$tmp/b"; then ok; else bad "ReLU: the flat one-input form differs"; fi
# ... and with the repeat axis on the left: the Mirror pairs rank r with r + 4
"$BIN" --op ReLU --shapes "((16,512),)" --shard "((4,1),)" --devices 8 --attr repeated_num_in_dev_matrix_right=False --json >"$tmp/out" 2>&1
grep -qF '"dev_matrix": [2, 4, 1]' "$tmp/out" && grep -qF '"mirror_ops": [{"op": "_MirrorOperator", "group": [0, 4]}]' "$tmp/out" && ok ||
  bad "ReLU, repeat axis left: $(cat "$tmp/out")"
# MatMul with transpose_b: w [1024,512] is [n,k]; by (4,1) its n is cut: out slice [16,256];
# dx sums over n's 4 pieces; attributes that leave the rule alone are accepted
"$BIN" --op MatMul --shapes "((32,512),(1024,512))" --shard "((2,1),(4,1))" --devices 8 --params 1 --attr transpose_b=True \
  --attr is_grad=False --attr "data_format='NCHW'" --attr keep_prob=0.9 --json >"$tmp/out" 2>&1
grep -qF '"outputs": [{"shape": [32, 1024], "tensor_map": [2, 0], "slice_shape": [16, 256]}], "forward_ops": [], "backward_ops": [{"op": "AllReduce", "group": [0, 1, 2, 3], "input": 0}]' "$tmp/out" && ok ||
  bad "MatMul transpose_b: $(cat "$tmp/out")"
# a parameter under gradients_mean: its Mirror carries MindSpore's mean flag
"$BIN" $MM --devices 8 --attr gradients_mean=True --json >"$tmp/out" 2>&1
grep -qF '{"op": "_MirrorOperator", "group": [0, 4], "mean": true}' "$tmp/out" && ok || bad "gradients_mean: $(cat "$tmp/out")"
# no --shard: MindSpore's default, data parallel: x's rows by all 8
"$BIN" --op MatMul --shapes "((32,784),(784,512))" --devices 8 --json >"$tmp/out" 2>&1
grep -qF '"dev_matrix": [8, 1, 1]' "$tmp/out" && ok || bad "MatMul without --shard: $(cat "$tmp/out")"
# w as an activation (no --params): its gradient, partial along x's row axis, is AllReduced there
"$BIN" --op MatMul --shapes "((32,784),(784,512))" --shard "((2,4),(4,1))" --devices 8 --json >"$tmp/out" 2>&1
grep -qF '"backward_ops": [{"op": "AllReduce", "group": [0, 4], "input": 1}]' "$tmp/out" && ok || bad "MatMul, w an activation: $(cat "$tmp/out")"
# () for a tensor input: dim 0 by the devices -- Add's y [48,1] by (8,1), like x's (8,1)
"$BIN" --op Add --shapes "((48,16),(48,1))" --shard "((8,1),())" --devices 8 --json >"$tmp/out" 2>&1
grep -qF '{"shape": [48, 1], "tensor_map": [1, 0], "slice_shape": [6, 1]}' "$tmp/out" && ok || bad "() for a tensor input: $(cat "$tmp/out")"

# strategies the rules reject: ok false, exit 2
expect_rejected "MatMul: one tuple for two inputs" "MatMul: strategy has 1 tuple for 2 inputs" --op MatMul --shapes "((32,784),(784,512))" --shard "((2,4),)" --devices 8
expect_rejected "MatMul: a 3-entry tuple" "MatMul: input 1's tuple has 3 entries for a rank-2 tensor" \
  --op MatMul --shapes "((32,784),(784,512))" --shard "((2,4),(4,1,1))" --devices 8
expect_rejected "MatMul: 16 devices in 8" "does not divide the 8 devices" --op MatMul --shapes "((32,784),(784,512))" --shard "((4,4),(4,1))" --devices 8
expect_rejected "MatMul: 3 on 8 devices" "must be a power of two" --op MatMul --shapes "((48,784),(784,512))" --shard "((3,2),(2,1))" --devices 8
expect_rejected "MatMul: contraction cuts differ" "the contraction dim is cut 4 ways in x but 2 in w" \
  --op MatMul --shapes "((32,784),(784,512))" --shard "((2,4),(2,1))" --devices 8
expect_rejected "ReLU: two tuples for one input" "ReLU: strategy has 2 tuples for 1 input" --op ReLU --shapes "((16,512),)" --shard "((4,1),(4,1))" --devices 8
expect_rejected "ReLU: an empty strategy" "ReLU: strategy has 0 tuples for 1 input" --op ReLU --shapes "((16,512),)" --shard "()" --devices 8
# usage errors of the --op form: exit 2 and the one stderr line; with --json also the JSON line
# {"ok": false, "error": ...} on stdout, so that a script always gets JSON; without, nothing
expect_usage_json "unknown op" "--op: unknown operator 'MatMal'" --op MatMal --shapes "((2,2),(2,2))" --devices 8
expect_usage_json "unknown attribute" "--attr: unknown attribute 'transpose_c'" $MM --devices 8 --attr transpose_c=True
expect_usage_json "attribute not a bool" "--attr transpose_b: expected True or False, found a string at column 1 in '\"yes\"'" $MM --devices 8 --attr 'transpose_b="yes"'
expect_usage_json "attribute without =" "--attr takes NAME=VALUE, e.g. transpose_b=True; not 'transpose_b'" $MM --devices 8 --attr transpose_b
expect_usage_json "bad Python literal in --shard" "--shard: expected ')' at column 13 in '((2,4),(4,1)'" --op MatMul --shapes "((32,784),(784,512))" --shard "((2,4),(4,1)" --devices 8
expect_usage_json "bad Python literal in --shapes" "--shapes: expected the end, found ')' at column 9 in '((32,),)),'" --op ReLU --shapes "((32,),)),"  --devices 8
expect_usage_json "a shape that is not a tuple" "--shapes: expected a shape tuple, found an integer at column 12" --op Add --shapes "((32,784), 5)" --devices 8
expect_usage_json "--op without --devices" "--op needs --devices" --op ReLU --shapes "(16,)"
expect_usage_json "--rank out of range" "--rank 8; allowed 0..7" $MM --devices 8 --rank 8
expect_usage_json "--op with a layout flag" "not the layout flags" $MM --devices 8 --mesh dp=8
# an error in a flag before --json is still JSON: every flag is read before the error is told
expect_usage_json "unknown option before --json" "unknown option '--bogus'" --op ReLU --bogus --shapes "(16,)" --devices 8
expect_usage_json "a flag given twice" "--devices given twice" --op ReLU --shapes "(16,)" --devices 8 --devices 4
expect_err "--shapes without --op" "go with --op" --mesh dp=8 --shape 16 --shapes "(16,)"

# ---- the other operator families -----------------------------------------------------------------
# query NAME ARGS...: the --json answer of ARGS in $tmp/out
query() { shift; "$BIN" "$@" --json >"$tmp/out" 2>&1; }
query "Softmax" --op Softmax --shapes "((32,10),)" --shard "((8,1),)" --devices 8 --attr axis=-1
grep -qF '{"ok": true, "dev_matrix": [8, 1], "inputs": [{"shape": [32, 10], "tensor_map": [1, 0], "slice_shape": [4, 10]}]' "$tmp/out" && ok || bad "Softmax: $(cat "$tmp/out")"
expect_rejected "Softmax: its axis cut" "Softmax: input 0 dim 1 is cut 2 ways" --op Softmax --shapes "((32,10),)" --shard "((4,2),)" --devices 8 --attr axis=-1
query "ReduceSum" --op ReduceSum --shapes "((16,32),)" --shard "((2,4),)" --devices 8 --attr "axis=(0,1)" --attr keep_dims=False
grep -qF '"forward_ops": [{"op": "AllReduce", "group": [0, 1, 2, 3, 4, 5, 6, 7]}]' "$tmp/out" && ok || bad "ReduceSum: $(cat "$tmp/out")"
query "ReduceMax" --op ReduceMax --shapes "((16,32),)" --shard "((1,8),)" --devices 8 --attr axis=1
grep -qF '"forward_ops": [{"op": "AllReduce", "group": [0, 1, 2, 3, 4, 5, 6, 7], "reduce": "max"}]' "$tmp/out" && ok || bad "ReduceMax: $(cat "$tmp/out")"
# Reshape from its own strategy, as master's ReshapeInfo (reshape_info.cc): the strategy as the
# device matrix, the input cut by it, the output whole, no forward operator
query "Reshape" --op Reshape --shapes "((32,512,7,7),)" --shard "((8,1,1,1),)" --devices 8 --attr "shape=(32,25088)"
grep -qF '"dev_matrix": [8, 1, 1, 1], "inputs": [{"shape": [32, 512, 7, 7], "tensor_map": [3, 2, 1, 0], "slice_shape": [4, 512, 7, 7]}], "outputs": [{"shape": [32, 25088], "tensor_map": [-1, -1], "slice_shape": [32, 25088]}], "forward_ops": []' "$tmp/out" && ok || bad "Reshape: $(cat "$tmp/out")"
# Reshape without one: data parallel, the input's batch cut carried over to the output's dim 0
query "Reshape" --op Reshape --shapes "((32,512,7,7),)" --devices 8 --attr "shape=(32,25088)"
grep -qF '"dev_matrix": [8], "inputs": [{"shape": [32, 512, 7, 7], "tensor_map": [0, -1, -1, -1], "slice_shape": [4, 512, 7, 7]}], "outputs": [{"shape": [32, 25088], "tensor_map": [0, -1], "slice_shape": [4, 25088]}], "forward_ops": []' "$tmp/out" && ok || bad "Reshape without a strategy: $(cat "$tmp/out")"
# OneHot: the strategy is written over the output [64, depth]; the two values are scalars
query "OneHot" --op OneHot --shapes "((64,),(),())" --shard "((8,1),(),())" --devices 8 --attr depth=10 --attr axis=-1
grep -qF '{"ok": true, "dev_matrix": [8, 1], "inputs": [{"shape": [64], "tensor_map": [1], "slice_shape": [8]}, {"shape": [], "tensor_map": [], "slice_shape": []}, {"shape": [], "tensor_map": [], "slice_shape": []}], "outputs": [{"shape": [64, 10], "tensor_map": [1, 0], "slice_shape": [8, 10]}]' "$tmp/out" && ok || bad "OneHot: $(cat "$tmp/out")"
# OneHot axis 0: the device matrix reversed, the batch still on the left axis
query "OneHot axis 0" --op OneHot --shapes "((64,),(),())" --shard "((2,4),(),())" --devices 8 --attr depth=16 --attr axis=0
grep -qF '"dev_matrix": [4, 2]' "$tmp/out" && grep -qF '"outputs": [{"shape": [16, 64], "tensor_map": [0, 1], "slice_shape": [8, 16]}]' "$tmp/out" && ok || bad "OneHot axis 0: $(cat "$tmp/out")"
query "GetNext" --op GetNext --shapes "()" --shard "()" --devices 8 --attr "shapes=((64,32),(64,))" --attr "types=('float32','int32')" --attr output_num=2
grep -qF '"dev_matrix": [8, 1], "inputs": [], "outputs": [{"shape": [64, 32], "tensor_map": [1, -1], "slice_shape": [8, 32]}, {"shape": [64], "tensor_map": [1], "slice_shape": [8]}]' "$tmp/out" && ok || bad "GetNext: $(cat "$tmp/out")"
query "Mul by a scalar" --op Mul --shapes "((16,8),())" --shard "((2,4),())" --devices 8
grep -qF '{"shape": [], "tensor_map": [], "slice_shape": []}' "$tmp/out" && grep -qF '"dev_matrix": [2, 4]' "$tmp/out" && ok || bad "Mul by a scalar: $(cat "$tmp/out")"
# Gather, a row split with a repeat: the repeat axis on the left, a ReduceScatter along the rows
query "Gather rows" --op Gather --shapes "((64,32),(16,8))" --shard "((8,1),(1,1))" --devices 16 --rank 9
grep -qF '"dev_matrix": [2, 8, 1]' "$tmp/out" && grep -qF '"forward_ops": [{"op": "ReduceScatter", "group": [8, 9, 10, 11, 12, 13, 14, 15]}]' "$tmp/out" && ok || bad "Gather rows: $(cat "$tmp/out")"
# Gather, "shard batch and axis": the table's rows cut 2 ways and the indices' rows 4 ways on 8;
# device matrix [4, 2], an AllReduce along the rows' axis, the table's Mirror along the batch's
query "Gather batch and axis" --op Gather --shapes "((64,32),(16,8))" --shard "((2,1),(4,1))" --devices 8 --attr axis=0
grep -qF '"dev_matrix": [4, 2], "inputs": [{"shape": [64, 32], "tensor_map": [0, -1], "slice_shape": [32, 32]}, {"shape": [16, 8], "tensor_map": [1, -1], "slice_shape": [4, 8]}], "outputs": [{"shape": [16, 8, 32], "tensor_map": [1, -1, -1], "slice_shape": [4, 8, 32]}], "forward_ops": [{"op": "AllReduce", "group": [0, 1]}]' "$tmp/out" &&
  grep -qF '"mirror_ops": [{"op": "_MirrorOperator", "group": [0, 2, 4, 6]}, null]' "$tmp/out" && ok || bad "Gather batch and axis: $(cat "$tmp/out")"
expect_rejected "Gather: rows cut with a repeat, indices cut" "so the indices must be whole" --op Gather --shapes "((64,32),(16,8))" --shard "((2,1),(2,1))" --devices 8 --attr axis=0
# OneHot declares no Mirror, even when its indices are replicated over a repeat axis
query "OneHot repeat" --op OneHot --shapes "((64,),(),())" --shard "((4,1),(),())" --devices 8 --attr depth=10
grep -qF '"dev_matrix": [4, 1, 2]' "$tmp/out" && grep -qF '"mirror_ops": [null, null, null]' "$tmp/out" && ok || bad "OneHot repeat: $(cat "$tmp/out")"
# Transpose without perm says so
expect_rejected "Transpose without perm" "Transpose: perm is missing" --op Transpose --shapes "((4,8),)" --shard "((2,1),)" --devices 8
# ... and a given all-zero perm is no permutation, not a missing one; rank 1's (0) is fine
expect_rejected "Transpose perm=(0,0)" "Transpose: perm is not a permutation of 0..1 (entry 1 is 0)" \
  --op Transpose --shapes "((4,8),)" --shard "((2,1),)" --devices 8 --attr "perm=(0,0)"
query "Transpose perm=(0,)" --op Transpose --shapes "((8,),)" --shard "((2,),)" --devices 8 --attr "perm=(0,)"
grep -qF '"outputs": [{"shape": [8], "tensor_map": [1], "slice_shape": [4]}]' "$tmp/out" && ok || bad "Transpose perm=(0,): $(cat "$tmp/out")"
# VirtualDataset: the one cut dim may be any dim; every input's cut maps to one axis
query "VirtualDataset dim 1" --op VirtualDataset --shapes "((32,16),(16,))" --shard "((1,4),(4,))" --devices 8
grep -qF '"dev_matrix": [2, 1, 4], "inputs": [{"shape": [32, 16], "tensor_map": [-1, 0], "slice_shape": [32, 4]}, {"shape": [16], "tensor_map": [0], "slice_shape": [4]}]' "$tmp/out" && ok || bad "VirtualDataset dim 1: $(cat "$tmp/out")"

# shard's layouts on any operator (sk_ops.h, LAYOUTS): ReLU keeps a tuple of axes; an output
# asked for in another layout is redistributed after the forward; MatMul's (a*b, c) output is its
# ReduceScatter; an operator computed from a strategy refuses a layout that is not one, by name
L24='Layout((2,4),("dp","mp"))'
expect_json "ReLU from a layout, its output moved" '{"ok": true, "dev_matrix": [2, 4], "inputs": [{"shape": [32, 512], "tensor_map": [[1, 0], -1], "slice_shape": [4, 512]}], "outputs": [{"shape": [32, 512], "tensor_map": [[1, 0], -1], "slice_shape": [4, 512]}], "redistributed_outputs": [{"output": 0, "dev_matrix": [8], "layout": {"shape": [32, 512], "tensor_map": [-1, 0], "slice_shape": [32, 64]}}], "forward_ops": [], "backward_ops": [], "mirror_ops": [null]}' \
  --op ReLU --shapes "((32,512),)" --shard "($L24((\"dp\",\"mp\"),\"None\"),)" --devices 8 --attr 'out_strategy=(Layout((8,),("a",))("None","a"),)'
query "MatMul out_strategy (a*b, c)" $MM --devices 8 --attr "out_strategy=((8,1),)"
grep -qF '"outputs": [{"shape": [32, 512], "tensor_map": [[2, 1], 0], "slice_shape": [4, 512]}], "forward_ops": [{"op": "ReduceScatter", "group": [0, 1, 2, 3]}]' "$tmp/out" && ok || bad "MatMul out_strategy: $(cat "$tmp/out")"
expect_rejected "ReduceSum: a layout that is not its strategy's" "ReduceSum: input 0's layout mp,None on dp=2,mp=4 is not one its strategy gives" \
  --op ReduceSum --shapes "((32,512),)" --shard "($L24(\"mp\",\"None\"),)" --devices 8
expect_rejected "MatMul: layouts on two device matrices" "MatMul: input 1's device matrix dp=4,mp=2 is not input 0's dp=2,mp=4" \
  --op MatMul --shapes "((32,512),(512,64))" --shard "($L24(\"dp\",\"mp\"), Layout((4,2),(\"dp\",\"mp\"))(\"mp\",\"None\"))" --devices 8
expect_usage_json "out_strategy of two tuples" "--attr out_strategy: 2 tuples" $MM --devices 8 --attr "out_strategy=((8,1),(1,1))"
# MatMul of any rank (master's one MatMul class) takes out_strategy as a tuple with 2-D x and w
# only (MatMul::CheckOutputStrategy); with batch dims it takes layouts
expect_rejected "MatMul with batch dims: an out_strategy tuple" "MatMul: an output strategy (a tuple) needs 2-D x and w, got ranks 3 and 3" \
  --op MatMul --shapes "((2,64,32),(2,32,16))" --shard "((1,2,4),(1,4,1))" --devices 8 --attr "out_strategy=((1,8,1),)"

# ---- redistribution plans (docs/semantics.md section 9) ------------------------------------------------------------
expect_out "rows-by-8 -> cols-by-8 plan: one AllToAll" "redistribution of [16,784] float, 8 devices, minimal
  from  mesh dp=8  layout \"dp,None\"
  to    mesh dp=8  layout \"None,dp\"
step 1  AllToAll: group dp (8 ranks), count 196 per peer
        \"dp,None\" -> \"None,dp\"
        recv 5488 B, send 5488 B per rank, cost 70.55 us
total   1 step, recv 5488 B, send 5488 B per rank, cost 70.55 us" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --plan
"$BIN" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp >"$tmp/a" 2>&1
"$BIN" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --plan >"$tmp/b" 2>&1
if cmp -s "$tmp/a" "$tmp/b"; then ok; else bad "--to without an output flag prints the plan"; fi
expect_out "tsv of rows -> cols, bytes of half" "rank${tab}recv_bytes${tab}send_bytes
0${tab}2744${tab}2744
1${tab}2744${tab}2744
2${tab}2744${tab}2744
3${tab}2744${tab}2744
4${tab}2744${tab}2744
5${tab}2744${tab}2744
6${tab}2744${tab}2744
7${tab}2744${tab}2744" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --tsv --dtype half
# the tutorial x to a tuple-reordered layout: each rank gets only what it lacks
expect_out "tsv of a tuple move" "rank${tab}recv_bytes${tab}send_bytes
0${tab}3136${tab}3136
1${tab}6272${tab}6272
2${tab}6272${tab}6272
3${tab}6272${tab}6272
4${tab}6272${tab}6272
5${tab}6272${tab}6272
6${tab}6272${tab}6272
7${tab}3136${tab}3136" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --to "(dp,sp),mp" --tsv
# MatMul out (rows by a, replicated on b) -> ReLU in (rows by (a,b)): no communication
expect_out "matmul -> relu tsv: nothing moves" "rank${tab}recv_bytes${tab}send_bytes
0${tab}0${tab}0
1${tab}0${tab}0
2${tab}0${tab}0
3${tab}0${tab}0" --mesh a=2,b=2 --shape 16,512 --map a,None --to "(a,b),None" --tsv
# partial sums over b, target split by b: one ReduceScatter; every peer contribution counts
expect_out "partial tsv: ReduceScatter contributions" "rank${tab}recv_bytes${tab}send_bytes
0${tab}12288${tab}12288
1${tab}12288${tab}12288
2${tab}12288${tab}12288
3${tab}12288${tab}12288
4${tab}12288${tab}12288
5${tab}12288${tab}12288
6${tab}12288${tab}12288
7${tab}12288${tab}12288" --mesh a=2,b=4 --shape 16,512 --map None,None --partial b --to b,None --tsv --dtype bfloat16
"$BIN" --mesh a=2,b=4 --shape 16,512 --map None,None --partial b --to b,None --plan >"$tmp/out" 2>&1
grep -q '^step 1  ReduceScatter: sum of partials over b (4 ranks' "$tmp/out" && ok || bad "partial plan is one ReduceScatter"
"$BIN" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --mindspore >"$tmp/out" 2>&1
grep -q '^step 1  AllToAll: split_count 8, split_dim 1, concat_dim 0' "$tmp/out" &&
  grep -q 'forward_comm 3136, backward_comm 3136, comm 6272, computation 3136, memory 3136$' "$tmp/out" && ok ||
  { bad "--mindspore (alltoall on)"; sed 's/^/    /' "$tmp/out"; }
"$BIN" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --mindspore --alltoall off >"$tmp/out" 2>&1
grep -q '^step 1  AllGather: concat dim 0' "$tmp/out" && grep -q '^step 2  StridedSlice' "$tmp/out" &&
  grep -q 'forward_comm 6272, backward_comm 784, comm 7056, computation 15680, memory 26656$' "$tmp/out" && ok ||
  { bad "--mindspore --alltoall off"; sed 's/^/    /' "$tmp/out"; }
# --exec: generated data, every element checked
expect_out "exec rows -> cols" "ok" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --exec
expect_out "exec partial, int32" "ok" --mesh a=2,b=4 --shape 16,512 --map a,None --partial b --to None,b --exec --dtype int32
expect_out "exec tuple move, half" "ok" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --to "(dp,sp),mp" --exec --dtype half
expect_out "exec mindspore off" "ok" --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --to "(dp,sp),mp" --mindspore --alltoall off --exec
expect_out "exec a 2x3 mesh" "ok" --mesh a=2,b=3 --shape 12,6 --map a,b --to b,a --exec --dtype int8
"$BIN" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --plan --exec >"$tmp/out" 2>&1
[ "$(tail -1 "$tmp/out")" = ok ] && grep -q AllToAll "$tmp/out" && ok || bad "--plan --exec"
# bad redistribution input
expect_err "partial axis used by the source" "partial axis 'dp' also splits the source" --mesh dp=8 --shape 16,784 --map dp,None --partial dp --to None,dp
expect_err "unknown partial axis" "unknown axis 'zz'" --mesh dp=8 --shape 16,784 --map dp,None --partial zz --to None,dp
expect_err "--alltoall without --mindspore" "--alltoall needs --mindspore" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --alltoall on
expect_err "bad --alltoall" "--alltoall takes on or off" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --mindspore --alltoall maybe
expect_err "--mindspore with partial sums" "non-partial sources only" --mesh a=2,b=4 --shape 16,512 --map None,None --partial b --to b,None --mindspore
expect_err "bad --dtype" "--dtype: unknown type 'quad'" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --dtype quad
expect_err "--to not divisible" "dim 1 (784) is not divisible by 3" --mesh a=2,b=3 --shape 12,784 --map a,None --to None,b
expect_err "--plan without --to" "--plan needs --to" --mesh dp=8 --shape 16,784 --map dp,None --plan
expect_err "--exec without --to" "--exec needs --to" --mesh dp=8 --shape 16,784 --map dp,None --exec
expect_err "--to with --groups" "not with --to" --mesh dp=8 --shape 16,784 --map dp,None --to None,dp --groups

# ---- optimizer parallel: --hsdp (sk_opt_shard.h) -------------------------------------------------
# MindSpore's fc1_weight [784,512] f32 under MatMul ((2,4),(4,1)) on 8: dim 0 by the axis of 4, so
# each [196,512] slice has 2 replicas, r and r + 4; 1.53 MB is over 64 KB: each keeps [98,512],
# rank 0 rows [0,98), rank 4 [98,196); fully sharded, so no Mirror
FC1="--mesh a=2,b=4 --shape 784,512 --map b,None --hsdp -1,64"
expect_json "hsdp fc1 rank 0" '{"dev_matrix": [2, 4], "shape": [784, 512], "tensor_map": [0, -1], "dtype": "f32", "bytes": 1605632, "rank": 0, "hsdp": {"shard_size": -1, "threshold_kb": 64, "optimizer_level": "level1"}, "slice_shape": [196, 512], "replica_group": [0, 4], "opt_shard": {"size": 2, "group": [0, 4], "slice_shape": [98, 512], "rows": [0, 98], "sharded": true, "replicas": 2, "index": 0, "mirror_group": [], "why": ""}}' $FC1
expect_json "hsdp fc1 rank 4" '{"dev_matrix": [2, 4], "shape": [784, 512], "tensor_map": [0, -1], "dtype": "f32", "bytes": 1605632, "rank": 4, "hsdp": {"shard_size": -1, "threshold_kb": 64, "optimizer_level": "level1"}, "slice_shape": [196, 512], "replica_group": [0, 4], "opt_shard": {"size": 2, "group": [0, 4], "slice_shape": [98, 512], "rows": [98, 196], "sharded": true, "replicas": 2, "index": 1, "mirror_group": [], "why": ""}}' $FC1 --rank 4
# the same layout through --ms-map and a level: the level does not change the explanation
"$BIN" --mesh a=2,b=4 --shape 784,512 --ms-map "(0,-1)" --hsdp -1,64,level3 --rank 4 --json >"$tmp/out" 2>&1
grep -qF '"opt_shard": {"size": 2, "group": [0, 4], "slice_shape": [98, 512], "rows": [98, 196],' "$tmp/out" &&
  grep -qF '"optimizer_level": "level3"' "$tmp/out" && ok || bad "hsdp via --ms-map, level3: $(cat "$tmp/out")"
expect_out "hsdp fc1 rank 4: text" "fc1 [784, 512] f32 (1605632 bytes) on 8 devices (a=2,b=4); rank 4
hsdp         shard_size -1, threshold 64 KB, level1
model slice  [196, 512], rows [0, 196), 2 replicas [0, 4]
opt shard    2 ways: keeps [98, 512], rows [98, 196) (chunk 1)
allgather    [0, 4] (forward AllGather, backward ReduceScatter)
mirror       none (nothing left to sum)" $FC1 --rank 4 --name fc1
# not sharded: the bias [512] in f16 is 1 KB, under 64 KB: size 0, no group, the model slice
expect_json "hsdp under the threshold" '{"dev_matrix": [2, 4], "shape": [512], "tensor_map": [-1], "dtype": "f16", "bytes": 1024, "rank": 3, "hsdp": {"shard_size": -1, "threshold_kb": 64, "optimizer_level": "level1"}, "slice_shape": [512], "replica_group": [0, 1, 2, 3, 4, 5, 6, 7], "opt_shard": {"size": 0, "group": [], "slice_shape": [512], "rows": [0, 512], "sharded": false, "replicas": 8, "index": 0, "mirror_group": [0, 1, 2, 3, 4, 5, 6, 7], "why": "smaller than the threshold"}}' --mesh a=2,b=4 --shape 512 --hsdp "" --dtype f16 --rank 3
# a layout using every device: a replica group of one, size 0 whatever the threshold
"$BIN" --mesh a=2,b=4 --shape 784,512 --map a,b --hsdp -1,0 --rank 5 --json >"$tmp/out" 2>&1
grep -qF '"opt_shard": {"size": 0, "group": [], "slice_shape": [392, 128], "rows": [392, 784], "sharded": false, "replicas": 1,' "$tmp/out" &&
  grep -qF '"mirror_group": [], "why": "no replicas: the layout uses every device"}}' "$tmp/out" && ok || bad "hsdp, replica group of one: $(cat "$tmp/out")"
# shard_size 2 of a replica group of 4 on 32: consecutive gather pairs, a Mirror over the rest
"$BIN" --mesh a=4,b=8 --shape 64,8 --map None,b --hsdp 2,0 --rank 16 --json >"$tmp/out" 2>&1
grep -qF '"opt_shard": {"size": 2, "group": [16, 24], "slice_shape": [32, 1], "rows": [0, 32], "sharded": true, "replicas": 4, "index": 0, "mirror_group": [0, 16], "why": ""}}' "$tmp/out" &&
  ok || bad "hsdp shard_size 2 of 4: $(cat "$tmp/out")"
# bad input
expect_err "hsdp: bad shard_size" "hsdp: shard_size must be -1 or a positive integer, got 0" --mesh a=2,b=4 --shape 784,512 --map b,None --hsdp 0
expect_err "hsdp: not a number" "hsdp: shard_size 'x' is not an integer" --mesh a=2,b=4 --shape 784,512 --hsdp x,64 --json
expect_err "hsdp: bad level" "got 'level9'" --mesh a=2,b=4 --shape 784,512 --hsdp 2,64,level9
expect_err "hsdp without a layout" "--hsdp needs the parameter's layout" --hsdp 2,64 --json
expect_err "hsdp: rank outside the mesh" "--rank 8; allowed 0..7" $FC1 --rank 8
expect_err "hsdp with --to" "not with --to" $FC1 --to None,b
expect_err "hsdp with --op" "not with --op" $MM --devices 8 --hsdp 2,64
expect_err "--json without --op or --hsdp" "--json goes with --op or --hsdp" --mesh a=2,b=4 --shape 784,512 --json

# ---- sk-ckpt: the safety rules (docs/checkpoints.md) -------------------------------------------
# A checkpoint of 8 devices (fc1.weight in four row blocks): merge never follows a symlink in its
# output root, refuses a root another process writes, prints the path it wrote and names a
# missing box; a FIFO where a rank file belongs is refused by name, not waited for.
if [ -x build/sk-ckpt ] && [ -x build/sk-sim ]; then
  ck=$tmp/ck; out=$tmp/merged
  mkdir "$tmp/victim" "$out"; echo a >"$tmp/victim/a"; echo b >"$tmp/victim/b"
  build/sk-sim --net examples/nets/operator_parallel.json --devices 8 --steps 2 --save-checkpoint "$ck" >/dev/null 2>"$tmp/err" ||
    bad "sk-ckpt: saving a checkpoint to check: $(cat "$tmp/err")"
  ln -s "$tmp/victim" "$out/ckpt-00000002"
  build/sk-ckpt merge "$ck" --out "$out" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq 1 ] && grep -qF "sk-ckpt: checkpoint: $out/ckpt-00000002 is a symbolic link" "$tmp/err" &&
     [ "$(cat "$tmp/victim/a" "$tmp/victim/b" | tr -d '\n')" = ab ]; then ok
  else bad "sk-ckpt merge, OUT/ckpt-00000002 a symlink: exit $rc: $(cat "$tmp/err"); left: $(ls "$tmp/victim")"; fi
  rm "$out/ckpt-00000002"
  hold_lock "$out"
  build/sk-ckpt merge "$ck" --out "$out" >"$tmp/out" 2>"$tmp/err"; rc=$?
  release_lock
  if [ $rc -eq 1 ] && [ "$(cat "$tmp/err")" = "sk-ckpt: checkpoint root $out is being written by process $holder" ]; then ok
  else bad "sk-ckpt merge into a root another process holds: exit $rc: $(cat "$tmp/err")"; fi
  build/sk-ckpt merge "$ck" --out "$out" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq 0 ] && [ "$(cat "$tmp/out")" = "merged into $out/ckpt-00000002" ]; then ok
  else bad "sk-ckpt merge: exit $rc, said '$(cat "$tmp/out")': $(cat "$tmp/err")"; fi
  if command -v python3 >/dev/null 2>&1; then # the manifest without one slice, its crc made right
    cp -r "$ck" "$tmp/gap"
    python3 -c '
import sys, zlib
p = sys.argv[1]
body = "".join(l for l in open(p) if not l.startswith("crc ") and " box 0:196,0:512 " not in l)
open(p, "w").write(body + "crc %08x\n" % zlib.crc32(body.encode()))' "$tmp/gap/ckpt-00000002/MANIFEST"
    build/sk-ckpt merge "$tmp/gap" >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ $rc -eq 1 ] && [ "$(cat "$tmp/err")" = "sk-ckpt: merge: tensor 'fc1.weight': box [0:196, 0:512] is missing" ]; then ok
    else bad "sk-ckpt merge of a checkpoint missing a slice: exit $rc: $(cat "$tmp/err")"; fi
  fi
  rm "$ck/ckpt-00000002/rank-1.bin"; mkfifo "$ck/ckpt-00000002/rank-1.bin"
  for cmd in list verify; do
    timeout 20 build/sk-ckpt $cmd "$ck" >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ $rc -eq 1 ] && grep -qF "$ck/ckpt-00000002/rank-1.bin is a FIFO, not a regular file" "$tmp/err"; then ok
    else bad "sk-ckpt $cmd, rank-1.bin a FIFO: exit $rc (124: it waited): $(cat "$tmp/err")"; fi
  done
else bad "build/sk-ckpt or build/sk-sim is missing (make first)"; fi

# ---- the programs use the public API only --------------------------------------------------------
# sk__ names are the headers' private helpers, free to change with any release: a program in tools/,
# examples/ or bench/ that used one would show users something they cannot rely on. Comments
# included, so that none points a reader at them.
grep -rn --include='*.c' --include='*.h' --include='*.cc' 'sk__' tools examples bench >"$tmp/private"
if [ -s "$tmp/private" ]; then bad "programs use shardkit's private sk__ names:"; head -20 "$tmp/private" | sed 's/^/    /'
else ok; fi

summary tools
