#!/usr/bin/env bash
# ffr bench as a user runs it: on a dataset packed by yolo-pack from a yolo-synth dataset, every
# engine and mode produces a JSON object with the documented keys and a non-zero rate, the JPEG
# baseline and the ratio appear together, a forced io_uring fallback is said once, and bad
# arguments exit 2. Usage: test_ffr_bench.sh FFR YOLO_SYNTH YOLO_PACK
set -u
ffr=$1 synth=$2 pack=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
check() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi; }

"$synth" "$work/s" --split train2017=24 --seed 5 >/dev/null 2>&1
"$pack" "$work/s" -o "$work/d.ffr" -q 2>/dev/null
check $? "a dataset to benchmark"

# json_ok JSON KEYS...: the output is one JSON object holding KEYS, with records_per_s > 0.
json_ok() {
    /usr/bin/python3 -c '
import json, sys
j = json.loads(sys.argv[1])
keys = sys.argv[2:]
missing = [k for k in keys if k not in j]
sys.exit(1 if missing or j.get("records_per_s", 1) <= 0 else 0)' "$@" 2>/dev/null
}
for io in uring pread mmap; do
    for mode in random seq; do
        out=$("$ffr" bench "$work/d.ffr" --io $io --mode $mode --seconds 0.3 --batch 8 --qd 4 \
              --verify --json 2>"$work/err")
        json_ok "$out" mb_per_s records_per_s p50_ms p99_ms io mode
        check $? "--io $io --mode $mode: JSON with mb_per_s, records_per_s, p50_ms, p99_ms"
    done
done
out=$("$ffr" bench "$work/d.ffr" --seconds 0.3 --pixels --buffered --json 2>/dev/null)
json_ok "$out" records_per_s pixels
check $? "--pixels --buffered decodes every record to pixels"
out=$("$ffr" bench "$work/d.ffr" --seconds 0.3 --jpeg-baseline "$work/s/images/train2017" --json 2>/dev/null)
json_ok "$out" records_per_s jpeg_baseline ratio
check $? "--jpeg-baseline adds the loose-JPEG rate and the ratio"
text=$("$ffr" bench "$work/d.ffr" --seconds 0.3 --jpeg-baseline "$work/s/images/train2017" 2>/dev/null)
[[ $text == *"ratio: ffr"* && $text == *"images/s"* && $text == *"MB/s"* ]]
check $? "text output prints MB/s, images/s and the ratio"
FFIO_FORCE_NO_URING=1 "$ffr" bench "$work/d.ffr" --seconds 0.3 --threads 2 >/dev/null 2>"$work/err"
[ "$(grep -c 'pread' "$work/err")" = 1 ]
check $? "forced fallback from io_uring is said once: $(head -c 200 "$work/err")"
"$ffr" bench "$work/d.ffr" --io floppy >/dev/null 2>&1
[ $? = 2 ]; check $? "unknown --io exits 2"
"$ffr" bench >/dev/null 2>&1
[ $? = 2 ]; check $? "no file and no baseline exits 2"
"$ffr" bench "$work/missing.ffr" --seconds 0.1 >/dev/null 2>&1
[ $? = 1 ]; check $? "a missing file exits 1"
echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
