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
echo "bench: $pass passed, $fail failed"
[ "$fail" = 0 ]
