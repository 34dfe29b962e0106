#!/bin/sh
# Every program `make` puts directly in build/ answers --help and -h with a text whose first line
# starts "Usage:", on stdout, and exit status 0, and refuses an unknown option with a message on
# stderr and a non-zero status. Then, when Open MPI is installed, a benchmark started by
# mpirun.openmpi without -B runs one MPI benchmark (not one threads benchmark per process), and
# programs that cannot use MPI say so instead of running once per process.
# Run from anywhere; `make test` runs it after building everything.
set -u
cd "$(dirname "$0")/.."
. tests/check_lib.sh

# help PROGRAM FLAG: exit 0, a first line "Usage: ..." on stdout
help() {
  timeout 20 "$1" "$2" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -ne 0 ]; then bad "$1 $2: exit $rc, want 0: $(head -2 "$tmp/err")"
  elif ! head -1 "$tmp/out" | grep -q '^Usage: '; then bad "$1 $2: stdout does not start with 'Usage: ': $(head -1 "$tmp/out")"
  else ok; fi
}

# unknown PROGRAM: an unknown option exits non-zero with a message on stderr
unknown() {
  timeout 20 "$1" --no-such-option >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -eq 0 ]; then bad "$1 --no-such-option: exit 0, want non-zero"
  elif [ ! -s "$tmp/err" ]; then bad "$1 --no-such-option: exit $rc but nothing on stderr"
  else ok; fi
}

progs=0
for p in build/*; do
  [ -f "$p" ] && [ -x "$p" ] || continue
  progs=$((progs + 1))
  help "$p" --help
  help "$p" -h
  unknown "$p"
done
[ $progs -gt 0 ] || bad "no program in build/ (run make first)"

# ---- under an MPI launcher ---------------------------------------------------------------------
# --oversubscribe: more processes than cores on a small machine; the two variables let Open MPI
# run as root (a container's build user), and are ignored otherwise.
mpirun_2() {
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun.openmpi --oversubscribe -np 2 "$@"
}
if ! command -v mpirun.openmpi >/dev/null 2>&1; then
  echo "skip the MPI launch checks (no mpirun.openmpi: make deps installs openmpi-bin)"
elif [ ! -x build/all_reduce_perf ]; then
  bad "build/all_reduce_perf is missing (run make first)"
else
  # without -B: one MPI world of 2 devices, so one table (one header, one footer), all correct
  mpirun_2 build/all_reduce_perf -b 1K -e 4K -f 4 -n 1 -w 0 -c 1 >"$tmp/out" 2>"$tmp/err"; rc=$?
  heads=$(grep -c '^# shardkit .*backend: mpi$' "$tmp/out")
  feet=$(grep -c '^# Out of bounds values : 0 OK' "$tmp/out")
  if [ $rc -ne 0 ] || [ "$heads" != 1 ] || [ "$feet" != 1 ] || ! grep -q 'nGpus 2 ' "$tmp/out"; then
    bad "mpirun -np 2 all_reduce_perf without -B: exit $rc, $heads mpi headers and $feet OK footers, want 0, 1, 1"
    head -5 "$tmp/err" | sed 's/^/    /'
  else ok; fi
  # -B threads under the launch: refused, once, saying what to do
  mpirun_2 build/all_reduce_perf -B threads -b 1K -e 1K >"$tmp/out" 2>"$tmp/err"; rc=$?
  n=$(grep -c 'all_reduce_perf: -B threads under an MPI launch of 2 processes' "$tmp/err")
  if [ $rc -eq 0 ] || [ "$n" != 1 ] || grep -q '^ ' "$tmp/out"; then
    bad "mpirun -np 2 all_reduce_perf -B threads: exit $rc, $n refusals, want non-zero and 1"
  else ok; fi
  # a program that runs in one process refuses the launch
  if [ -x build/quickstart ]; then
    mpirun_2 build/quickstart >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ $rc -eq 0 ] || ! grep -q 'start it without mpirun' "$tmp/err"; then
      bad "mpirun -np 2 quickstart: exit $rc, want non-zero and a message"
    else ok; fi
  fi
fi

summary help
