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

# ---- bad arguments: refused before any work ------------------------------------------------------
# refused PROGRAM ARG...: exit 2 at once, nothing on stdout, one stderr line
# "PROGRAM: MESSAGE[: ARG] (try --help)", and nothing created under $tmp/work, where the
# vectors below point every output (a run that was not refused would train for minutes: the
# timeout turns it into a failure).
refused() {
  prog=$1; shift
  rm -rf "$tmp/work"; mkdir "$tmp/work"
  timeout 20 "build/$prog" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ $rc -ne 2 ]; then bad "$prog $*: exit $rc, want 2: $(head -2 "$tmp/err")"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q "^$prog: .* (try --help)\$" "$tmp/err"; then
    bad "$prog $*: want one line '$prog: ... (try --help)': $(head -3 "$tmp/err")"
  elif [ -s "$tmp/out" ]; then bad "$prog $*: wrote to stdout: $(head -2 "$tmp/out")"
  elif [ -n "$(ls -A "$tmp/work")" ]; then bad "$prog $*: created $(ls -A "$tmp/work")"
  else ok; fi
}
long=$(printf 'a%.0s' $(seq 300))             # a component over NAME_MAX
deep=$(printf '/%0200d' $(seq 20) | tr 0 d)     # 4020 bytes: no room under PATH_MAX for what goes beneath
# One vector per line: a program, then its arguments, eval'd (quotes and \$tmp work as typed).
# Every sk-sim vector would train the transformer on 4 devices for 100000 steps into
# $tmp/work/ck if it were not refused.
SIM="--net examples/nets/transformer.json --devices 4 --steps 100000 --save-checkpoint \$tmp/work/ck"
while read -r prog vector; do
  if [ ! -x "build/$prog" ]; then echo "skip the bad-argument checks of $prog (not built)"; continue; fi
  eval "set -- $vector"
  refused "$prog" "$@"
done <<EOF
sk-sim $SIM --save-checkpoint ''
sk-sim $SIM --save-checkpoint \$tmp/work/$long
sk-sim $SIM --save-checkpoint \$tmp/work$deep
sk-sim $SIM --load-checkpoint ''
sk-sim $SIM --every 0
sk-sim $SIM --every 99999999999999999999
sk-sim $SIM --every 3 --grad-accumulation-step 2
sk-sim $SIM --checkpoint-io fast
sk-sim $SIM --check --load-checkpoint \$tmp/work/ck
sk-sim $SIM --dump-program -1
sk-sim $SIM --dump-program 4
sk-sim $SIM --dry-run
sk-sim --net examples/nets/transformer.json --dry-run --check
sk-sim $SIM --grad-accumulation-step 0
sk-sim $SIM --pipeline 0
sk-sim $SIM --pipeline 3 --micro 3
sk-sim $SIM --pipeline 2 --micro 4 --grad-accumulation-step 2
sk-sim $SIM --pipeline 2 --micro 1
sk-sim $SIM --micro 0
sk-sim $SIM --interleave 0
sk-sim $SIM --pipeline 2 --micro 4 --scheduler zero_bubble_v --interleave 3
sk-sim $SIM --scheduler seqpipe
sk-sim $SIM --recompute ''
sk-sim $SIM --recompute a,,b
sk-sim $SIM --seed -1
sk-sim $SIM --seed 18446744073709551616
sk-sim $SIM --seed 0
sk-sim $SIM --devices 0
sk-sim $SIM --devices 4097
sk-sim $SIM --devices 4x
sk-sim $SIM --steps 0
sk-sim $SIM --steps 1e3
sk-sim --net examples/nets/transformer.json --epochs 0
sk-sim $SIM --epochs 1
sk-sim $SIM --link 5,25
sk-sim $SIM --link 5,25x --device-tflops 10
sk-sim $SIM --link 5 --device-tflops 10
sk-sim $SIM --link 5,25 --device-tflops 0
sk-sim $SIM --device-memory nan
sk-sim $SIM --fusion size:0
sk-sim $SIM --fusion index:3,1
sk-sim $SIM --fusion allgather=index:1
sk-sim $SIM --local-norm dump:
sk-sim $SIM --local-norm both
sk-sim $SIM --optimizer lamb
sk-sim $SIM --dtype i32
sk-sim $SIM --mode auto
sk-sim $SIM --backend nccl
sk-sim $SIM --hsdp 0
sk-sim $SIM --dataset-strategy '((2,1)'
sk-sim $SIM --dataset-strategy '(Layout((2,2),("dp","mp"))("xx",),)'
sk-sim $SIM --net ''
sk-sim $SIM --save-strategy ''
sk-sim $SIM --load-strategy ''
sk-sim $SIM --transformer-opt ''
sk-sim $SIM --bogus 1
sk-sim $SIM --data x.npy
sk-sim $SIM --data =x.npy
sk-sim $SIM --data tokens=
sk-sim $SIM --data tokens=\$tmp/work/$long
sk-sim $SIM --data tokens=a.npy --data tokens=b.npy
sk-sim $SIM --data
sk-sim --devices 2
sk-ckpt list
sk-ckpt nosuch \$tmp/work
sk-ckpt list ''
sk-ckpt list \$tmp/work/$long
sk-ckpt verify \$tmp/work/ck --out \$tmp/work/m
sk-ckpt merge \$tmp/work/ck --out ''
sk-ckpt merge \$tmp/work/ck --out \$tmp/work$deep
sk-ckpt merge \$tmp/work/ck --out \$tmp/work/m --io fast
sk-ckpt merge \$tmp/work/ck --out \$tmp/work/m --io
sk-ckpt merge \$tmp/work/ck --bogus 1
operator_parallel --devices 3
operator_parallel --devices 8x
operator_parallel --epochs 0
operator_parallel --epochs 1001
operator_parallel --steps -1
operator_parallel --dataset-strategy both
operator_parallel --backend nccl
operator_parallel --devices
both_backends --devices 0
both_backends --devices 4097
both_backends --devices ''
both_backends --backend nccl
both_backends --bogus 1
openmp_devices --devices 0
openmp_devices --devices 65
openmp_devices --devices 2x
openmp_devices --bogus
quickstart extra
make_npy --dtype f32 --shape 4
make_npy --out \$tmp/work/a.npy --dtype f16 --shape 4
make_npy --out \$tmp/work/a.npy --dtype f32 --shape 4,0
make_npy --out \$tmp/work/a.npy --dtype f32 --shape 1,1,1,1,1,1,1,1,1,1
make_npy --out \$tmp/work/a.npy --dtype f32 --shape 4 --fill classes:0
make_npy --out \$tmp/work/a.npy --dtype i32 --shape 4 --fill normal
make_npy --out \$tmp/work/a.npy --dtype f32 --shape 4 --truncate 0
make_npy --out \$tmp/work/a.npy --dtype f32 --shape 4 --truncate 1000
make_npy --out '' --dtype f32 --shape 4
EOF

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
