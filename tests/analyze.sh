#!/bin/sh
# Clang static analyzer over the project's own code: each header as its own translation unit
# with SK_IMPL (so its implementation section is analysed once, as the main file), then every
# example, tool, benchmark and test source. Prints each report once (a header's report reached
# through many TUs is the same bug) with its path notes, and fails on any report in our files;
# system headers and Criterion are not ours and the analyzer already keeps quiet about them.
#
# Usage: sh tests/analyze.sh [FILE...]   (default: everything)   ANALYZE_JOBS=N (default 2)
set -u
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
clang=${CLANG:-clang}
command -v "$clang" >/dev/null 2>&1 || { echo "analyze: $clang not found (make deps)"; exit 1; }
mpi=$(mpicc.openmpi --showme:compile 2>/dev/null) || { echo "analyze: mpicc.openmpi not found (make deps)"; exit 1; }

# Warnings as the build has them, minus -Werror: a report must reach the filter below, not stop
# the TU. Core checkers plus the Unix API ones (malloc(0), open flags); -fno-caret-diagnostics
# keeps a path to one line per step.
flags="-std=c11 -Wall -Wextra -pedantic -Iinclude -fno-caret-diagnostics -fno-color-diagnostics \
  -Xclang -analyzer-output=text -Xclang -analyzer-checker=optin.portability.UnixAPI"

# One line per TU: source, then its extra flags. Headers go in as the main file (-x c), since
# the analyzer starts paths only in the main file; their callers' TUs reach them inlined.
units() {
  for h in include/*.h; do
    if grep -q '<mpi.h>' "$h"; then echo "$h -x c -DSK_IMPL $mpi"; else echo "$h -x c -DSK_IMPL"; fi
  done
  for f in tools/*.c examples/*.c; do echo "$f $mpi"; done
  # The suites in the analyzer's shallow mode (less inlining, fewer paths per function): their
  # code also runs whole under ASan, UBSan and TSan, and deep mode spent half the analysis time
  # on their many assertions' branches.
  for f in tests/test_*.c; do echo "$f -Xclang -analyzer-config -Xclang mode=shallow $mpi"; done
  for f in bench/*.c; do echo "$f -DSK_BENCH_MPI $mpi"; done
  echo "tests/mpi/mpi_driver.c -Itests/mpi $mpi"
}

list=$tmp/units
if [ $# -gt 0 ]; then
  for f in "$@"; do units | grep "^$f " || { echo "analyze: $f is not a unit"; exit 1; }; done >"$list"
else
  units >"$list"
fi

# Each TU writes its own log; a TU that does not compile is a failure of its own.
n=0
while read -r src extra; do
  n=$((n + 1)); echo "$n $src $extra"
done <"$list" >"$tmp/jobs"
start=$(date +%s)
# shellcheck disable=SC2016
xargs -P "${ANALYZE_JOBS:-2}" -L 1 sh -c '
  i=$1; src=$2; shift 2; t0=$(date +%s)
  '"$clang"' --analyze '"$flags"' "$@" "$src" -o /dev/null >"'"$tmp"'/$i.log" 2>&1 || echo "$src" >>"'"$tmp"'/broken"
  echo "$(( $(date +%s) - t0 ))s $src" >>"'"$tmp"'/times"
' sh <"$tmp/jobs"
echo "analyze: $n translation units in $(( $(date +%s) - start ))s; the slowest:"
sort -rn "$tmp/times" | head -5 | sed 's/^/    /'
if [ -s "$tmp/broken" ]; then
  echo "analyze: clang could not compile:"; sed 's/^/    /' "$tmp/broken"
  for i in $(seq 1 "$n"); do grep -q 'error:' "$tmp/$i.log" && sed 's/^/    /' "$tmp/$i.log" | head -20; done
  exit 1
fi

# Split logs into reports: a warning line starts one, its notes follow. Keep reports whose
# warning lies in a project file (relative path), first occurrence of each location+message.
for i in $(seq 1 "$n"); do cat "$tmp/$i.log"; done | awk -v out="$tmp/reports" '
  / warning: / { keep = ($0 !~ /^\//) && !seen[$0]++; if (keep) { nrep++; print "" >> out; print >> out }; next }
  / note: / { if (keep) print "    " $0 >> out; next }
  { keep = 0 }
  END { print nrep + 0 }' >"$tmp/count"

# Every report fails the run: the project keeps zero.
new=0
if [ -s "$tmp/reports" ]; then
  while IFS= read -r l; do
    case $l in
      *" warning: "*) new=$((new + 1)); echo; echo "$l" ;;
      "") ;;
      *) echo "$l" ;;
    esac
  done <"$tmp/reports"
fi
echo "analyze: $new report(s) in the project's own files"
[ "$new" -eq 0 ]
