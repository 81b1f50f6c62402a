#!/usr/bin/env bash
# The packer's decode memory does not grow with -j (issue 44): four 16000 x 16000 PNGs of 275 KB
# each (768 MB decoded) are refused at the default pixel limit by name, with the flag that
# raises it; three 6000 x 6000 PNGs (108 MB decoded each) at -j 3 under --max-pixels 40000000
# are decoded one at a time (one budget of 7 bytes a pixel of the limit) and their buffers let
# go, so the run's peak RSS is that of one image (about 120 MB; 330 MB when all three decoded at
# once and each worker kept its buffers). Peak RSS is measured with Python's getrusage.
# Usage: test_decode_budget.sh YOLO_PACK
set -u
# ASan's quarantine would hold the freed buffers whose release is the point: keep it small
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16"
pack=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_out=$work/err
gen=$(dirname "$0")/make_big_png.py
rss() { python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], "w"))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$work/err" "$@"; }

mkdir -p "$work/big" "$work/mid"
python3 "$gen" "$work/big/b1.png" 16000 16000 && python3 "$gen" "$work/mid/m1.png" 6000 6000
check $? "a 16000 x 16000 PNG and a 6000 x 6000 one"
for k in 2 3 4; do ln "$work/big/b1.png" "$work/big/b$k.png"; done
for k in 2 3; do cp "$work/mid/m1.png" "$work/mid/m$k.png"; done

kb=$(rss "$pack" "$work/big" -o "$work/big.ffr" -j 4 -q)
rc=$?
[ $rc = 1 ] && [ "$kb" -lt 262144 ] &&
    [ "$(grep -c "b[1-4].png: corrupt image: PNG dimensions above the decoder limits (size 16000x16000 is above the limit (32768 per side, 67108864 pixels)); skipped (yolo-pack --max-pixels raises the limit)" "$work/err")" = 4 ]
check $? "four 768 MB images at -j 4: each refused by name with the flag, exit $rc, peak RSS $kb KB"

kb=$(rss "$pack" "$work/mid" -o "$work/mid.ffr" -j 3 -q --max-pixels 40000000)
rc=$?
[ $rc = 0 ] && [ "$kb" -lt 200000 ] && grep -q "3 found, 3 packed" "$work/err"
check $? "three 108 MB images at -j 3 under --max-pixels 40000000: packed, peak RSS $kb KB (one image's)"
tap_done
