#!/bin/sh
# Quick test of the benchmark programs (bench/): every program with -c 1 on odd sizes and odd
# device counts, every dtype (and every op where it reduces); every row must show #wrong 0 (N/A
# for SendRecv's in-place column, as nccl-tests; AllToAllV, without an in-place form, must show
# N/A in all four in-place columns) and the exit status must be 0. Bad flags must exit 2 with a
# message. Runs in well under 60 s on the 2-core machine.
set -u
cd "$(dirname "$0")/.."
PROGS="all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf reduce_perf alltoall_perf sendrecv_perf gather_perf
       scatter_perf alltoallv_perf"
for p in $PROGS; do
  [ -x "build/$p" ] || make -s "build/$p" >/dev/null || { echo "bench: cannot build build/$p"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
FAST="-w 1 -n 2 -c 1"
no_in_place=

# run <program> <args...>: exit 0, at least one row, every #wrong 0 (or N/A), footer OK.
run() {
  prog=$1; shift
  if ! timeout 30 "build/$prog" "$@" >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL: $prog $* (exit $?)"; tail -5 "$tmp/err" "$tmp/out" | sed 's/^/    /'; fail=$((fail + 1)); return
  fi
  bad=$(awk -v no_in_place="$no_in_place" '
         /^ / { rows++; if ($9 != "0" || ($13 != "0" && $13 != "N/A")) bad++
                if (no_in_place && ($10 != "N/A" || $11 != "N/A" || $12 != "N/A" || $13 != "N/A")) in_place++ }
         END { if (!rows) print "no rows"; else if (bad) print bad " rows with wrong elements"
               else if (in_place) print in_place " rows with in-place figures" }' "$tmp/out")
  if [ -n "$bad" ] || ! grep -q '^# Out of bounds values : 0 OK' "$tmp/out"; then
    echo "FAIL: $prog $*: ${bad:-no OK footer}"; grep -v '^#' "$tmp/out" | head -5 | sed 's/^/    /'
    fail=$((fail + 1)); return
  fi
  pass=$((pass + 1))
}

# run_no_in_place <program> <args...>: as run, for a collective without an in-place form: every
# row's in-place time, algbw, busbw and #wrong must read N/A.
run_no_in_place() {
  no_in_place=1
  run "$@"
  no_in_place=
}

# bad <program> <args...>: exit 2 and a message on stderr naming the program.
bad() {
  prog=$1; shift
  timeout 10 "build/$prog" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ "$rc" != 2 ] || ! grep -q "^$prog: " "$tmp/err"; then
    echo "FAIL: $prog $*: want exit 2 and a message, got exit $rc: $(head -1 "$tmp/err")"; fail=$((fail + 1)); return
  fi
  pass=$((pass + 1))
}

for p in $PROGS; do
  check=run
  [ "$p" = alltoallv_perf ] && check=run_no_in_place
  $check "$p" $FAST -g 3 -b 7 -e 1000 -f 3 -d all -r -1
  $check "$p" $FAST -g 5 -b 1000 -e 200K -f 13 -r 4
  $check "$p" $FAST -g 1 -b 8 -e 4K -f 8
  $check "$p" $FAST -g 8 -b 4 -e 300K -f 37 -d int8 -r 7
done
# every dtype and op, below and above the small-message path, on odd groups
run all_reduce_perf $FAST -g 3 -b 2 -e 3000 -f 5 -d all -o all
run all_reduce_perf $FAST -g 7 -b 3 -e 1100 -f 6 -d all -o all
run all_reduce_perf $FAST -g 2 -b 1 -e 64K -f 4 -d all -o all
run reduce_scatter_perf $FAST -g 3 -b 9 -e 2000 -f 7 -d all -o all
run reduce_perf $FAST -g 5 -b 9 -e 2000 -f 7 -d all -o all -r -1
run all_reduce_perf -w 0 -n 1 -c 3 -g 4 -b 1K -e 1M -f 32
run all_reduce_perf $FAST -g 2 -b 100 -e 100 -f 2 -d half -o avg
run sendrecv_perf $FAST -g 2 -b 8 -e 64K -f 16 -o all
# AllToAllV's per-peer counts on even and odd groups, from c = 0 and 1 (zero-length blocks) up
run_no_in_place alltoallv_perf $FAST -g 4 -b 16 -e 64K -f 4 -d all
run_no_in_place alltoallv_perf $FAST -g 7 -b 28 -e 100K -f 11 -d half
run_no_in_place alltoallv_perf $FAST -g 2 -b 1 -e 1M -f 32 -d double
run_no_in_place alltoallv_perf -w 0 -n 1 -c 3 -g 6 -b 1K -e 1M -f 32 -d bfloat16

# flags
bad all_reduce_perf -x
bad all_reduce_perf -b
bad all_reduce_perf -b 1Q
bad all_reduce_perf -b 0
bad all_reduce_perf -b 1M -e 1K
bad all_reduce_perf -e -5
bad all_reduce_perf -f 1
bad all_reduce_perf -n 0
bad all_reduce_perf -w -1
bad all_reduce_perf -c x
bad all_reduce_perf -d uint32
bad all_reduce_perf -o xor
bad all_reduce_perf -g 0
bad all_reduce_perf -g 99999
bad all_reduce_perf -B nccl
bad all_reduce_perf extra
bad broadcast_perf -g 4 -r 4
bad reduce_perf -g 2 -r -2
bad alltoallv_perf -d uint32
bad alltoallv_perf -g 0
bad all_reduce_perf -B mpi
if build/all_reduce_perf -B mpi 2>&1 | grep -q '^all_reduce_perf: -B mpi needs an MPI launcher'; then
  pass=$((pass + 1))
else
  echo "FAIL: -B mpi message"; fail=$((fail + 1))
fi
if build/alltoall_perf -h | grep -q 'default 8' && build/alltoall_perf --help >/dev/null; then
  pass=$((pass + 1))
else
  echo "FAIL: -h"; fail=$((fail + 1))
fi
# alltoallv_perf's help states its count pattern
if build/alltoallv_perf --help | grep -q '2c - floor(c/2)' && build/alltoallv_perf -h | grep -q 'count = c'; then
  pass=$((pass + 1))
else
  echo "FAIL: alltoallv_perf --help: the per-peer count pattern"; fail=$((fail + 1))
fi

# ---- the nccl-tests flags: -i -m -z -a -N -t -T -J, sizes with fractions --------------------
# ok_if <description> <command...>: a check that passes when the command succeeds.
ok_if() {
  what=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi
}
# sizes <file>: the size column of the rows, space-separated
sizes() { awk '/^ / { printf "%s%s", sep, $1; sep = " " }' "$1"; }
# -i: a fixed step, fractions in sizes; -m and every -z on every program (odd group, all dtypes)
run all_reduce_perf $FAST -g 3 -b 1.5K -e 6K -i 1.5K
ok_if "-b 1.5K -i 1.5K: sizes 1536 3072 4608 6144" [ "$(sizes "$tmp/out")" = "1536 3072 4608 6144" ]
ok_if "-i: the header names the step in bytes" grep -q 'step: 1536(bytes)' "$tmp/out"
run all_reduce_perf $FAST -g 2 -b 0.5K -e 1.25K -i 256
ok_if "-b 0.5K -e 1.25K -i 256: sizes 512 768 1024 1280" [ "$(sizes "$tmp/out")" = "512 768 1024 1280" ]
for p in $PROGS; do
  check=run
  [ "$p" = alltoallv_perf ] && check=run_no_in_place
  for z in 0 1 2 3; do $check "$p" $FAST -g 3 -b 7 -e 20K -f 11 -d all -r -1 -m 3 -z $z; done
done
run sendrecv_perf $FAST -g 1 -b 8 -e 1K -f 8 -m 4
ok_if "-m 4: the header's agg iters" grep -q 'agg iters: 4 ' "$tmp/out"
# -a: every mode runs and is named in the header
for a in 0 1 2 3; do run reduce_perf $FAST -g 4 -b 1K -e 4K -f 4 -a $a; done
ok_if "-a 3: the header says max" grep -q 'average: 3 (max over ranks)' "$tmp/out"
# -N 3: every row three times, in the same order
run broadcast_perf $FAST -g 3 -b 64 -e 4K -f 8 -N 3
ok_if "-N 3: the sweep three times" [ "$(sizes "$tmp/out")" = "64 512 4096 64 512 4096 64 512 4096" ]
# -t: threads x devices; -t alone means one device per thread, as nccl-tests
run all_gather_perf $FAST -t 2 -g 3 -b 1K -e 1K
ok_if "-t 2 -g 3: the header" grep -q '^# nThread 2 nGpus 3 ' "$tmp/out"
ok_if "-t 2 -g 3: 6 devices" [ "$(grep -c '^#  Rank ' "$tmp/out")" = 6 ]
run all_gather_perf $FAST -t 3 -b 1K -e 1K
ok_if "-t 3: 3 devices" [ "$(grep -c '^#  Rank ' "$tmp/out")" = 3 ]
# -T: the header shows the bound
run all_reduce_perf $FAST -g 2 -b 1K -e 1K -T 5
ok_if "-T 5: the header's timeout" grep -q 'timeout: 5 s$' "$tmp/out"
# -J: a JSON report with every row and column; checked by shape (one row object per table row,
# the footer's figures) and, where python3 is installed, parsed
json_check() { # json_check <file> <rows>
  [ -s "$1" ] && [ "$(grep -c '"cycle": ' "$1")" = "$2" ] && grep -q '"bound_pct": ' "$1" &&
    grep -q '"out_of_bounds": 0,' "$1" && grep -q '"ok": true,' "$1" && grep -q '"error": null' "$1" &&
    [ "$(tail -1 "$1")" = "}" ] &&
    { ! command -v python3 >/dev/null 2>&1 || python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert len(rows) == int(sys.argv[2]) and d["ok"] and d["parameters"]["agg_iters"] >= 1
for r in rows:
    assert r["out_of_place"]["wrong"] == 0 and r["bound_pct"] is not None and r["probe"]["footprint_bytes"] > 0
' "$1" "$2"; }
}
run all_reduce_perf $FAST -g 3 -b 1K -e 16K -f 4 -d all -J "$tmp/r.json" -N 2
ok_if "-J: a JSON report of 8 types x 3 sizes x 2 cycles" json_check "$tmp/r.json" 48
run_no_in_place alltoallv_perf $FAST -g 2 -b 64 -e 64 -J "$tmp/v.json"
ok_if "-J: null in-place cells where the table says N/A" grep -q '"in_place": {"time_us": null' "$tmp/v.json"
# escaping: a quote, a backslash and a tab in the command line (the report's own name)
odd=$(printf '%s/a"b\\c\td.json' "$tmp")
run all_reduce_perf $FAST -g 2 -b 1K -e 1K -J "$odd"
ok_if "-J: a report with odd characters in the command" json_check "$odd" 1
ok_if "-J: escapes quote, backslash and tab" grep -qF 'a\"b\\c\u0009d.json' "$odd"
# %ceil: the reducing collectives print it after %bound (JSON ceil_pct), a number on every row
# with at least one float per block; the others print neither. ceil_rows <file> <fields>: every
# row has <fields> fields and, with 15, a last one that is a number, > 0 from 4 KiB (a 24-byte
# row's latency-bound rate can print as 0.0 on a fast machine; the JSON keeps it > 0); N/A:
# "na" as a third argument wants it.
ceil_rows() {
  awk -v nf="$2" -v na="${3:-}" '/^ / { rows++; if (NF != nf) { bad++; next }
                                       if (nf != 15) next
                                       if (na) { bad += $15 != "N/A"; next }
                                       if ($15 !~ /^[0-9]+([.][0-9]+)?$/ || ($1 + 0 >= 4096 && !($15 + 0 > 0))) bad++ }
                                  END { exit !(rows > 0 && !bad) }' "$1"
}
ceil_head() { grep -q '#wrong  %bound   %ceil$' "$1" && grep -q '(%)     (%)$' "$1"; }
ceil_json() { # ceil_json <file> <rows>: every row's ceil_pct a number > 0
  [ "$(grep -c '"ceil_pct": [0-9]' "$1")" = "$2" ] && ! grep -q '"ceil_pct": 0,' "$1" &&
    { ! command -v python3 >/dev/null 2>&1 || python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == int(sys.argv[2])
for r in rows:
    assert r["ceil_pct"] > 0 and r["ceiling"]["bandwidth_gbps"] > 0 and r["ceiling"]["shape"] in ("k-into-k", "k-into-1")
' "$1" "$2"; }
}
for p in all_reduce_perf:k-into-k reduce_scatter_perf:k-into-1 reduce_perf:k-into-1; do
  shape=${p#*:} p=${p%:*}
  # from 24 B: a float per block for every type (ReduceScatter's blocks are size / 3)
  run $p $FAST -g 3 -b 24 -e 200K -f 13 -d all -J "$tmp/c.json"
  ok_if "$p: %ceil after %bound in the header" ceil_head "$tmp/out"
  ok_if "$p: %ceil > 0 on every row" ceil_rows "$tmp/out" 15
  ok_if "$p: ceil_pct > 0 in every JSON row" ceil_json "$tmp/c.json" "$(grep -c '^ ' "$tmp/out")"
  ok_if "$p: the $shape ceiling" grep -q "\"shape\": \"$shape\"" "$tmp/c.json"
done
run reduce_perf $FAST -g 8 -b 1M -e 1M -r 5 -J "$tmp/c.json"
ok_if "reduce_perf -g 8 -r 5: %ceil > 0" ceil_rows "$tmp/out" 15
ok_if "reduce_perf: k-into-1" grep -q '"shape": "k-into-1"' "$tmp/c.json"
run all_reduce_perf $FAST -g 2 -b 2 -e 2 -d int8 -J "$tmp/c.json"
ok_if "less than a float per device: %ceil N/A" ceil_rows "$tmp/out" 15 na
ok_if "less than a float per device: ceil_pct null" grep -q '"ceil_pct": null' "$tmp/c.json"
for p in all_gather_perf broadcast_perf alltoall_perf sendrecv_perf; do
  run $p $FAST -g 3 -b 1K -e 64K -f 8 -J "$tmp/c.json"
  ok_if "$p: no %ceil column" ceil_rows "$tmp/out" 14
  ok_if "$p: no %ceil in the header, no ceil_pct" sh -c '! grep -q "%ceil" "$1" && ! grep -q ceil_pct "$2"' _ "$tmp/out" "$tmp/c.json"
done
[ -x build/reduce_ceiling ] || make -s build/reduce_ceiling >/dev/null || { echo "bench: cannot build build/reduce_ceiling"; exit 1; }
timeout 60 build/reduce_ceiling 1 3 >"$tmp/out" 2>&1 || echo "reduce_ceiling: exit $?" >>"$tmp/out"
ok_if "reduce_ceiling: the k-into-1 rows as before, then the k-into-k rows" awk '
  /^# AllReduce shape:/ { kk = 1; next } /^#/ { next }
  !kk && NF == 3 && $1 + 0 >= 1 && $3 > 0 { one++ } kk && NF == 3 && $1 ~ /^[0-9]+->[0-9]+$/ && $3 > 0 { many++ }
  END { exit !(one == 2 && many == 2) }' "$tmp/out"
# bad values of the new flags
for args in "-i 0" "-i x" "-i 1K -f 2" "-m 0" "-m 1025" "-m x" "-z 4" "-z -1" "-a 4" "-a x" "-N -1" "-N x" \
            "-T -1" "-T 86401" "-T x" "-t 0" "-t x" "-t 64 -g 65" "-b 1.3" "-b 1.1K" "-b 1.5.5M" "-b .5M" "-b 1.M" \
            "-b 1.5X" "-e 2.0000000001G" "-J /nonexistent-dir/r.json"; do
  bad all_reduce_perf -b 1K -e 1K -n 1 -w 0 $args
done
bad all_reduce_perf -b 1K -e 1K -J ""
bad all_reduce_perf -J
# -h names every new flag
build/all_reduce_perf -h >"$tmp/help"
for f in -i,--stepbytes -m,--agg_iters -z,--blocking -a,--average -N,--run_cycles -t,--nthreads -T,--timeout \
         -J,--output_file; do
  ok_if "-h names $f" grep -q -- "$f" "$tmp/help"
done

# Under MPI (when Open MPI is installed): -a, -m and -J across processes, -t refused, an
# unwritable -J ends every process, and -T ends a hang: one rank is stopped, and the other's
# wait must give up within -T with exit status 1, a message, and the reason in the report.
mpirun_2() {
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun.openmpi --oversubscribe -np 2 "$@"
}
if command -v mpirun.openmpi >/dev/null 2>&1; then
  mpirun_2 build/all_reduce_perf -B mpi -b 1K -e 4K -f 4 -w 1 -n 2 -a 1 -m 2 -J "$tmp/m.json" >"$tmp/out" 2>&1
  ok_if "mpi: -a 1 -m 2 -J: all rows right" grep -q '^# Out of bounds values : 0 OK' "$tmp/out"
  ok_if "mpi: the -J report" json_check "$tmp/m.json" 2
  mpirun_2 build/all_reduce_perf -B mpi -t 2 -b 1K -e 1K >"$tmp/out" 2>"$tmp/err"
  ok_if "mpi: -t 2 refused" grep -q 'all_reduce_perf: -t 2: the MPI backend runs one device per process' "$tmp/err"
  mpirun_2 build/all_reduce_perf -B mpi -b 1K -e 1K -J /nonexistent-dir/r.json >"$tmp/out" 2>"$tmp/err"; rc=$?
  ok_if "mpi: an unwritable -J ends every process (exit $rc)" test "$rc" != 0 -a "$rc" != 124
  # many cycles of a tiny size, so the run is still going when a rank is stopped (the launcher's
  # descendants, found through /proc: the subshell -> timeout -> mpirun -> the ranks)
  mpirun_2 build/all_reduce_perf -B mpi -b 1K -e 1K -w 0 -n 1 -c 0 -N 200000 -T 2 -J "$tmp/t.json" \
    >"$tmp/out" 2>"$tmp/err" &
  launcher=$!
  sleep 2
  victim= level=$launcher
  for _ in 1 2 3 4; do
    next=
    for p in $level; do next="$next $(cat /proc/[0-9]*/stat 2>/dev/null | awk -v p="$p" '$4 == p { print $1 }')"; done
    for p in $next; do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = all_reduce_perf ] && victim=$p; done
    [ -n "$victim" ] && break
    level=$next
  done
  [ -n "$victim" ] && kill -STOP "$victim"
  wait "$launcher"; rc=$?
  ok_if "mpi: -T 2 ends a hang with a failure (rank stopped: ${victim:-none}, exit $rc)" \
    test -n "$victim" -a "$rc" != 0 -a "$rc" != 124
  ok_if "mpi: -T 2: the message" grep -q 'all_reduce_perf: timed out: a wait passed 2 s (-T)' "$tmp/err"
  ok_if "mpi: -T 2: the report's error" grep -q '"error": "timed out' "$tmp/t.json"
else
  echo "skip the MPI checks of -a, -J, -t and -T (no mpirun.openmpi)"
fi

# fusion_perf: a quick sweep runs, prints its table and CSV; bad flags exit 2
tmpcsv=$(mktemp)
if build/fusion_perf --model small -g 3 --thresholds 0,inf -n 1 -w 0 --csv "$tmpcsv" >/dev/null 2>&1 &&
   head -1 "$tmpcsv" | grep -q '^threshold_bytes,buckets,time_us,exposed_us,speedup' && [ "$(wc -l < "$tmpcsv")" -eq 3 ]; then
  pass=$((pass + 1))
else
  echo "FAIL: fusion_perf quick sweep / csv"; fail=$((fail + 1))
fi
rm -f "$tmpcsv"
build/fusion_perf --model nosuch -g 2 --thresholds 0 >/dev/null 2>&1
if [ $? -eq 2 ]; then pass=$((pass + 1)); else echo "FAIL: fusion_perf bad model must exit 2"; fail=$((fail + 1)); fi
# ckpt_perf --tiling: the tiling check of a manifest built in memory (no disk), N a multiple of 128
# slices and not (the last tensor and kind in rows); one row of figures; bad values exit 2
[ -x build/ckpt_perf ] || make -s build/ckpt_perf >/dev/null || { echo "bench: cannot build build/ckpt_perf"; exit 1; }
for n in 1280 1000; do
  timeout 30 build/ckpt_perf --tiling $n -n 3 >"$tmp/out" 2>"$tmp/err"; rc=$?
  ok_if "ckpt_perf --tiling $n: exit $rc, a row of wall min <= median <= max, CPU min <= median ($(head -1 "$tmp/err"))" \
    awk -v n=$n -v rc=$rc '$1 == n && NF == 6 && $2 > 0 && $2 <= $3 && $3 <= $4 && $5 <= $6 { row++ }
                           END { exit !(rc == 0 && row == 1) }' "$tmp/out"
done
for args in "--tiling 0" "--tiling x" "--tiling 10 -n 0" "--tiling 10 --dir $tmp"; do bad ckpt_perf $args; done
ok_if "ckpt_perf --help names --tiling" sh -c 'build/ckpt_perf --help | grep -q -- "--tiling N"'
# search_perf --scale L --write-net FILE: the scale transformer as network JSON (28 operators a
# block and 6 around them: 2,694 at 96 layers), loaded back by the project's own reader (--strip
# reads it with sk_json_load_network); the 96-layer file equals the shipped bench/nets one; bad
# layer counts, --write-net without --scale, and a path that cannot be written are refused.
[ -x build/search_perf ] || make -s build/search_perf >/dev/null || { echo "bench: cannot build build/search_perf"; exit 1; }
# ops FILE: the operators in a network file (each has one "type" key; tensors have none)
ops() { awk '/"operators"/ { on = 1 } on && /"type":/ { n++ } END { print n + 0 }' "$1"; }
# wrote RC FILE N OUT: exit 0, N operators in FILE and the count said in OUT
wrote() { [ "$1" = 0 ] && [ "$(ops "$2")" = "$3" ] && grep -q "$3 operators" "$4"; }
# refused RC ERR TEXT: exit 1 and TEXT starting a line of ERR
refused() { [ "$1" = 1 ] && grep -q "^$3" "$2"; }
for l in 2 96; do
  timeout 30 build/search_perf --scale $l --write-net "$tmp/t$l.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
  ok_if "search_perf --scale $l --write-net: exit $rc, $(ops "$tmp/t$l.json") operators, want $((28 * l + 6)) ($(head -1 "$tmp/err"))" \
    wrote $rc "$tmp/t$l.json" $((28 * l + 6)) "$tmp/out"
  ok_if "search_perf --scale $l: the written network loads (--strip)" \
    timeout 30 build/search_perf --strip "$tmp/t$l.json" "$tmp/s$l.json"
done
ok_if "bench/nets/transformer96.json is what --scale 96 --write-net writes" cmp -s "$tmp/t96.json" bench/nets/transformer96.json
for args in "--scale 0 --write-net $tmp/x.json" "--scale 5x --write-net $tmp/x.json" "--scale 1001 --write-net $tmp/x.json" \
            "--write-net $tmp/x.json" "--scale 2 --write-net"; do
  bad search_perf $args
done
timeout 30 build/search_perf --scale 2 --write-net "$tmp/no/such/dir/x.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
ok_if "search_perf --write-net to a missing folder: exit 1 naming the path, got exit $rc: $(head -1 "$tmp/err")" \
  refused $rc "$tmp/err" "search_perf: --write-net $tmp/no/such/dir/x.json: "
ok_if "search_perf --help names --write-net" sh -c 'build/search_perf --help | grep -q -- "--write-net FILE"'
# search_perf --dry-run-prices on 2 MLPs (15 quality rows: 2 MLPs, 2 tutorials and the block on
# 2, 4, 8 devices) and the 5 named networks: both summaries, every row priced (no nan), and no
# kept plan dearer than data parallel (data parallel is one of the finalists it is kept from);
# exhaustive referees every row.
timeout 60 build/search_perf --dry-run-prices --mlps 2 --link 5,25 --device-tflops 300 >"$tmp/out" 2>"$tmp/err"; rc=$?
ok_if "search_perf --dry-run-prices: exit $rc, 15 + 5 priced rows, 4 summary lines each with 0 kept plans dearer than data parallel ($(head -1 "$tmp/err"))" \
  awk -v rc=$rc '!/^#/ && NF >= 15 { rows++; if ($0 ~ /nan/) bad++ }
                 /^# quality set: 15 rows, referee exhaustive on 15,/ { q++ } /^# named networks: 5 rows, referee exhaustive on 5,/ { n++ }
                 /kept geomean/ && /kept dearer than data parallel on 0 rows/ { zero++ }
                 END { exit !(rc == 0 && rows == 20 && !bad && q == 1 && n == 1 && zero == 4) }' "$tmp/out"
bad search_perf --dry-run-prices --link 0,0
# gloo, bench/compare's peer (built only where libgloo-dev is installed): every row checked.
if [ -x build/gloo_allreduce ]; then
  if timeout 60 build/gloo_allreduce -g 2 -b 8 -e 64K -f 8 $FAST >"$tmp/out" 2>"$tmp/err" &&
     awk '/^ / { rows++; if ($9 != "0") bad++ } END { exit !(rows > 0 && !bad) }' "$tmp/out"; then
    pass=$((pass + 1))
  else
    echo "FAIL: gloo_allreduce -g 2: a failed run or wrong elements"; tail -5 "$tmp/err" "$tmp/out" | sed 's/^/    /'
    fail=$((fail + 1))
  fi
fi
# bench/compare -q on 2 devices against Open MPI (when mpirun is installed): every target line
# present, its median inside its IQR, and the in-place %ceil line beside the out-of-place one;
# the busbw target's bound line (the ceiling against MPI) too.
if command -v mpirun.openmpi >/dev/null 2>&1; then
  timeout 120 bench/compare -q -r 3 -g 2 -p mpi >"$tmp/out" 2>"$tmp/err"; rc=$?
  bad=$(awk -v rc=$rc '
    /^target: / { n++; if (!match($0, /= [0-9.]+ \(IQR [0-9.]+-[0-9.]+; want (>=|<=) [0-9.]+\): (MET|MISSED)$/) &&
                          !match($0, /median [0-9.]+ \(IQR [0-9.]+-[0-9.]+; want >= 90\): (MET|MISSED)$/)) { print "malformed: " $0; next }
                  s = substr($0, RSTART); gsub(/[^0-9.]/, " ", s); split(s, v, " ")
                  if (v[2] > v[1] || v[1] > v[3]) print "median outside its IQR: " $0 }
    /^bound: / { nb++; if (!match($0, /busbw, 2 devices: ceiling\/MPI = [0-9.]+ \(IQR [0-9.]+-[0-9.]+\)$/)) { print "malformed: " $0; next }
                 s = substr($0, index($0, "= ")); gsub(/[^0-9.]/, " ", s); split(s, v, " ")
                 if (v[1] <= 0 || v[2] > v[1] || v[1] > v[3]) print "bound outside its IQR or not positive: " $0 }
    /^target: .*busbw, 2 devices/ { bw = 1 } /latency, 2 devices/ { lat = 1 } /, in place: %ceil/ { ip = 1 } /, out of place: %ceil/ { oop = 1 }
    END { if (rc) print "exit " rc; if (n != 4 || !bw || !lat || !ip || !oop) print n " target lines, not the four expected"
          if (nb != 1) print nb " bound lines, not the one expected" }' "$tmp/out")
  if [ -z "$bad" ]; then pass=$((pass + 1)); else
    echo "FAIL: bench/compare -q -r 3 -g 2 -p mpi: $bad"; tail -n 8 "$tmp/out" "$tmp/err" | sed 's/^/    /'; fail=$((fail + 1))
  fi
fi
echo "bench: $pass passed, $fail failed"
[ "$fail" = 0 ]
