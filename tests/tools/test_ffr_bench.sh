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
# --- share: cached and remote reads ---
# A sharded pack, benchmarked locally against a node cache, then (with nginx) over HTTP.
mkdir -p "$work/sh"
"$pack" "$work/s" -o "$work/sh/d.ffr" --shard-size 64K -q 2>/dev/null
check $? "a sharded dataset to benchmark"
json_arms() {
    /usr/bin/python3 -c '
import json, sys
j = json.loads(sys.argv[1])
arms = sys.argv[3:]
good = all(a in j and j[a]["records_per_s"] > 0 and j[a]["errors"] == 0 for a in arms)
good = good and j["ratio"] > 0 and j["cache_fetched_shards"] == int(sys.argv[2])
sys.exit(0 if good else 1)' "$@" 2>/dev/null
}
shards=$(grep -c 'file:' "$work/sh/d.ffr")
out=$("$ffr" bench "$work/sh/d.ffr" --cache-dir "$work/cache" --seconds 0.3 --batch 8 --verify --json 2>"$work/err")
json_arms "$out" "$shards" local cached
check $? "--cache-dir: local and cached arms and the ratio; $shards shards fetched $(head -c 300 "$work/err")"
out=$("$ffr" bench "$work/sh/d.ffr" --cache-dir "$work/cache" --seconds 0.3 --batch 8 --json 2>/dev/null)
json_arms "$out" 0 local cached
check $? "a second run reuses every cached shard"
text=$("$ffr" bench "$work/sh/d.ffr" --cache-dir "$work/cache" --seconds 0.3 --batch 8 2>/dev/null)
[[ $text == *"ratio: cached"* && $text == *"local"* && $text == *"fill"* ]]
check $? "text output prints the local, fill and cached lines and the ratio"
nginx=
for x in /usr/sbin/nginx /usr/bin/nginx; do [ -x "$x" ] && nginx=$x; done
if [ -n "$nginx" ]; then
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    t="$work/ngx/tmp"
    chmod 755 "$work" # nginx started as root serves from worker processes that are not
    mkdir -p "$t"
    printf '%s\n' "daemon off;" "worker_processes 1;" "pid $work/ngx/nginx.pid;" \
        "error_log $work/ngx/error.log;" "events { worker_connections 64; }" \
        "http { access_log off; client_body_temp_path $t; proxy_temp_path $t;" \
        "  fastcgi_temp_path $t; uwsgi_temp_path $t; scgi_temp_path $t;" \
        "  server { listen 127.0.0.1:$port; root $work/sh; } }" >"$work/ngx/nginx.conf"
    "$nginx" -p "$work/ngx" -c "$work/ngx/nginx.conf" -e "$work/ngx/error.log" 2>/dev/null &
    ngx_pid=$!
    trap 'kill $ngx_pid 2>/dev/null; wait $ngx_pid 2>/dev/null; rm -rf "$work"' EXIT
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
        sleep 0.05
    done
    out=$("$ffr" bench "http://127.0.0.1:$port/d.ffr" --cache-dir "$work/cache2" --seconds 0.3 --batch 8 --json 2>"$work/err")
    json_arms "$out" "$shards" remote cached
    check $? "a URL over nginx: remote and cached arms $(head -c 300 "$work/err")"
    "$ffr" bench "http://127.0.0.1:$port/missing.ffr" --seconds 0.1 >/dev/null 2>"$work/err"
    [ $? = 1 ] && grep -q "missing.ffr" "$work/err"
    check $? "a missing URL exits 1 naming it: $(head -c 200 "$work/err")"
else
    echo "# nginx not installed: the remote arm is not tested here"
fi
# --- end share ---
echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
