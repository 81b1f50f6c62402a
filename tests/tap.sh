# TAP for the shell tests (source it): check STATUS DESC prints "ok N - DESC" or "not ok N - DESC"
# and counts; expect runs a command and checks its exit status; skip DESC prints a skipped point;
# tap_done prints the plan and returns the verdict.
n=0 failed=0
check() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi
}
# expect CODE DESC -- CMD...: CMD exits CODE with no sanitizer report; its output goes to
# $tap_out (set it first) and is shown as a diagnostic when the point fails.
expect() {
    local code=$1 desc=$2
    shift 3
    "$@" >"$tap_out" 2>&1
    local rc=$?
    [ "$rc" = "$code" ] && ! grep -Eq "Sanitizer|runtime error" "$tap_out"
    local ok=$?
    check $ok "$desc (exit $rc)"
    [ $ok = 0 ] || sed 's/^/# /' "$tap_out"
}
skip() {
    n=$((n + 1))
    echo "ok $n # SKIP $1"
}
tap_done() {
    echo "1..$n"
    [ "$failed" = 0 ]
}
