# check_lib.sh -- what the tests/*_test.sh scripts share: a scratch folder removed on exit, the
# pass and fail counts, and the summary line "NAME: N passed, M failed" whose status is the
# script's. Sourced from the project root: `. tests/check_lib.sh`.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
# summary NAME: the last command of a script, so that its status is the script's
summary() { echo "$1: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
# hold_lock ROOT: another process holds ROOT's checkpoint lock as sk_ckpt_lock leaves it (flock
# on ROOT/.lock, its pid inside) until release_lock; $holder is that pid
hold_lock() {
  mkdir -p "$1"
  sh -c 'exec 9>>"$1/.lock"; flock 9; echo $$ >"$1/.lock"; exec sleep 60' _ "$1" & holder=$!
  n=0; while [ $n -lt 100 ] && [ "$(cat "$1/.lock" 2>/dev/null)" != "$holder" ]; do sleep 0.1; n=$((n + 1)); done
}
release_lock() { kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; }
