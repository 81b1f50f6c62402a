# TAP for the shell tests (source it): check STATUS DESC prints "ok N - DESC" or "not ok N - DESC"
# and counts; skip DESC prints a skipped point; tap_done prints the plan and returns the verdict.
n=0 failed=0
check() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi
}
skip() {
    n=$((n + 1))
    echo "ok $n # SKIP $1"
}
tap_done() {
    echo "1..$n"
    [ "$failed" = 0 ]
}
