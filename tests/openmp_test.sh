#!/bin/sh
# OpenMP threads as devices (build/openmp_devices, built with -fopenmp by `make`): each device
# count must join, pass every check and print it; the program built without OpenMP must fall
# back to POSIX threads with the very same results; a runtime that grants fewer threads than
# asked must fail fast with a message, never hang; bad arguments exit 2 with a message.
set -u
cd "$(dirname "$0")/.."
bin=build/openmp_devices
[ -x "$bin" ] || make -s "$bin" >/dev/null || { echo "openmp: cannot build $bin"; exit 1; }
. tests/check_lib.sh

# run_ok <program> <devices> <thread kind>: exit 0, the header names the kind, every check ok.
run_ok() {
  prog=$1 n=$2 kind=$3
  if ! timeout 60 "$prog" --devices "$n" >"$tmp/out" 2>"$tmp/err"; then
    bad "$prog --devices $n: exit status $?: $(tail -3 "$tmp/err")"; return
  fi
  plural=s; [ "$n" -eq 1 ] && plural=
  grep -q "^openmp_devices: $n device$plural, each $kind" "$tmp/out" || { bad "$prog --devices $n: header line"; return; }
  for what in allgather allreduce train; do
    grep -q "^$what: .*: ok\$" "$tmp/out" || { bad "$prog --devices $n: no '$what: ... ok' line"; return; }
  done
  grep -qx 'openmp_devices: ok' "$tmp/out" || { bad "$prog --devices $n: no final ok"; return; }
  [ -s "$tmp/err" ] && { bad "$prog --devices $n: wrote to stderr: $(head -2 "$tmp/err")"; return; }
  ok
}

for n in 1 2 4 8; do run_ok "$bin" "$n" "an OpenMP thread"; done

# no arguments: 4 devices
timeout 60 "$bin" >"$tmp/out" 2>&1 && grep -q '^openmp_devices: 4 devices, ' "$tmp/out" && ok ||
  bad "no arguments: not 4 devices or non-zero exit"

# the results do not depend on who starts the threads: the build without OpenMP agrees line by line
grep -v '^openmp_devices: ' "$tmp/out" >"$tmp/omp_lines"
if ${CC:-gcc} -Iinclude -std=c11 -Wall -Wextra -Werror -pedantic -O2 -o "$tmp/plain" examples/openmp_devices.c \
     -lpthread -lm 2>"$tmp/cc"; then
  ok
  run_ok "$tmp/plain" 4 "a POSIX thread (built without OpenMP)"
  timeout 60 "$tmp/plain" >"$tmp/out" 2>&1
  grep -v '^openmp_devices: ' "$tmp/out" | cmp -s - "$tmp/omp_lines" && ok ||
    bad "the build without OpenMP printed other results than the OpenMP build"
else
  bad "the build without OpenMP does not compile warning-free: $(head -3 "$tmp/cc")"
fi

# a runtime that starts fewer threads than devices: a clean error, at once (no device may wait)
OMP_THREAD_LIMIT=2 timeout 20 "$bin" --devices 4 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 1 ] && grep -q '^openmp_devices: error: asked for 4 threads, the runtime started 2' "$tmp/err" && ok ||
  bad "OMP_THREAD_LIMIT=2 --devices 4: want exit 1 and an error line, got exit $rc: $(cat "$tmp/err")"

# help and bad arguments
"$bin" --help >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && head -1 "$tmp/out" | grep -q '^Usage: ' && ok || bad "--help: exit $rc, or no Usage: line on stdout"
"$bin" -h >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q '^Usage: ' "$tmp/out" && ok || bad "-h: exit $rc"
for v in 0 -1 65 abc 4x ''; do
  "$bin" --devices "$v" >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ $rc -eq 2 ] && grep -q '^openmp_devices: --devices takes 1\.\.64: .* (try --help)$' "$tmp/err" && ok ||
    bad "--devices '$v': want exit 2 and an error line, got exit $rc"
done
for a in --bogus --devices; do
  "$bin" $a >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "^openmp_devices: .*: $a (try --help)\$" "$tmp/err" && ok || bad "'$a': want exit 2, got $rc"
done

summary openmp
