# check_lib.sh -- what the tests/*_test.sh scripts share: a scratch folder removed on exit, the
# pass and fail counts, and the summary line "NAME: N passed, M failed" whose status is the
# script's. Sourced from the project root: `. tests/check_lib.sh`.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
# summary NAME: the last command of a script, so that its status is the script's
summary() { echo "$1: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
