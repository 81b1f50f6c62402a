#!/usr/bin/env bash
# TAP test of ffr-mini, the reader written from docs/format.md alone (style guide rule 21), and
# cross-check of it with the library: ffr_lines prints the same lines through ffr.h.
#
# usage: test_ffr_mini.sh FFR_MINI FFR_LINES DIR...
#
# For each DIR/NAME.ffr (manifests and their shard files alike):
#   NAME.expected  the file is valid: ffr-mini must exit 0 and print exactly this, and ffr_lines
#                  exactly what ffr-mini printed; then single bytes are flipped across the file,
#                  it is cut short and appended to, and both must refuse each damaged copy with
#                  a named error (no byte is unchecked);
#   NAME.err       the file breaks one rule: both must exit 1 naming this error code;
#   neither        (files the library's tests keep in tests/ffr/data) the file must be valid for
#                  both and their outputs identical.
# A missing DIR is skipped. The samples in tests/tools/data come from make_mini_samples.py.
set -u
mini=$1
lines=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
failed=0

# Where the library disagrees with docs/format.md: list a sample here as
# [NAME.ffr]="what differs" to turn its library check into a TAP TODO while the library is being
# fixed (it then shows without failing the suite). Empty: the two readers agree on every sample.
declare -A todo=()

check() { # check STATUS DESCRIPTION [TODO]: one TAP test point, passing when STATUS is 0
    n=$((n + 1))
    local directive=${3:+ # TODO $3}
    if [ "$1" = 0 ]; then
        echo "ok $n - $2$directive"
    else
        [ -n "${3:-}" ] || failed=$((failed + 1))
        echo "not ok $n - $2$directive"
    fi
}

# refused FILE WHAT: prints "WHAT: READER" for each reader that took FILE for valid; each must
# exit 1 with its own one-line diagnosis naming an error, not crash or leave a sanitizer report
# (which also exits 1). Bash builtins only here: this runs hundreds of times.
refused() {
    local prog msg
    for prog in "$mini" "$lines"; do
        "$prog" "$1" >/dev/null 2>"$work/err"
        if [ $? = 1 ]; then
            IFS= read -r -d '' msg <"$work/err"
            [[ $msg =~ ^ffr(-mini|_lines):\ [^$'\n']*\(FFR_E[A-Z]*\)$'\n' &&
                ! $msg =~ Sanitizer|runtime\ error ]] && continue
        fi
        echo "$2: ${prog##*/}"
    done
}

"$mini" --help >"$work/out"
check $? "--help exits 0"
"$mini" >/dev/null 2>&1
check $(($? != 2)) "no FILE: exit 2"

damage() { # damage FILE: flips, cuts and appends; prints what was not refused, and by whom
    local f=$1 c=$work/copy.ffr size k off x
    # Hundreds of runs: leak checks (half of a sanitized run's time) stay on for the samples.
    local -x ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    size=$(wc -c <"$f")
    local -a hex
    read -r -d '' -a hex < <(od -An -v -tx1 "$f")
    cp "$f" "$c"
    for ((k = 0; k < 16; k++)); do
        off=$((k * size / 16 + k % 7))
        ((off >= size)) && off=$((size - 1))
        printf -v x '%02x' $((0x${hex[off]} ^ (k % 255 + 1)))
        printf %b "\\x$x" | dd of="$c" bs=1 seek="$off" count=1 conv=notrunc status=none
        refused "$c" "flip@$off"
        printf %b "\\x${hex[off]}" | dd of="$c" bs=1 seek="$off" count=1 conv=notrunc status=none
    done
    for k in 0 7 63 $((size / 2)) $((size - 1536)) $((size - 512)) $((size - 1)); do
        ((k < 0)) && continue
        head -c "$k" "$f" >"$c"
        refused "$c" "cut@$k"
    done
    { cat "$f"; printf 'x'; } >"$c"
    refused "$c" append1
    { cat "$f"; head -c 512 /dev/zero; } >"$c"
    refused "$c" append512
}

# run PROGRAM FILE TAG: runs one reader, output in $work/TAG.out and .err; returns its status.
run() {
    "$1" "$2" >"$work/$3.out" 2>"$work/$3.err"
}

for dir in "$@"; do
    if [ ! -d "$dir" ]; then
        echo "# $dir: absent, skipped"
        continue
    fi
    for f in "$dir"/*.ffr; do
        [ -e "$f" ] || continue
        stem=${f%.ffr}
        name=${f##*/}
        run "$mini" "$f" mini
        mrc=$?
        run "$lines" "$f" lib
        lrc=$?
        if [ -f "$stem.err" ]; then
            want=$(cat "$stem.err")
            [ $mrc = 1 ] && grep -q "^ffr-mini: .*($want)\$" "$work/mini.err"
            check $? "$name: ffr-mini refuses it with $want"
            [ $mrc = 1 ] || echo "#   exit $mrc"
            sed 's/^/#   /' "$work/mini.err"
            [ $lrc = 1 ] && grep -q "^ffr_lines: .*($want)\$" "$work/lib.err"
            check $? "$name: the library refuses it with $want" "${todo[$name]:-}"
            [ $lrc = 1 ] || echo "#   exit $lrc"
            head -5 "$work/lib.err" | sed 's/^/#   /'
            continue
        fi
        if [ -f "$stem.expected" ]; then
            [ $mrc = 0 ] && cmp -s "$stem.expected" "$work/mini.out"
            check $? "$name: valid, ffr-mini prints the expected lines"
            diff "$stem.expected" "$work/mini.out" | head -20 | sed 's/^/#   /'
        else
            [ $mrc = 0 ] && tail -n 2 "$work/mini.out" | head -n 1 | grep -q '^records [0-9]*$' &&
                tail -n 1 "$work/mini.out" | grep -q '^metadata [0-9]* [0-9a-f]\{16\}$'
            check $? "$name: valid for ffr-mini"
        fi
        sed 's/^/#   /' "$work/mini.err"
        [ $lrc = 0 ] && [ $mrc = 0 ] && cmp -s "$work/mini.out" "$work/lib.out"
        check $? "$name: valid for the library, same lines as ffr-mini" "${todo[$name]:-}"
        head -5 "$work/lib.err" | sed 's/^/#   /'
        diff "$work/mini.out" "$work/lib.out" | head -20 | sed 's/^/#   /'
        if [ -f "$stem.expected" ] && ! head -c 14 "$f" | grep -aq '^# ffr manifest\|^ffr_manifest:'
        then
            damage "$f" >"$work/missed"
            [ ! -s "$work/missed" ]
            check $? "$name: every flipped byte, cut and append refused by both"
            head -20 "$work/missed" | sed 's/^/#   not refused: /'
        fi
    done
done

echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
