#!/usr/bin/env bash
# yolo-train --cache-dir as a user runs it on a sharded dataset: the first run fetches every
# shard into the cache and trains from the copy, the second reuses it (nothing fetched), a
# damaged cached shard is fetched again, an unusable cache directory and a URL without
# --cache-dir are clear errors (exit 1).
# Usage: test_cache_dir.sh YOLO_TRAIN YOLO_SYNTH YOLO_PACK
set -u
train=$1 synth=$2 pack=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
check() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi; }
"$synth" "$work/s" --split train2017=16 --seed 3 --min-side 60 --max-side 120 >/dev/null 2>&1 &&
    "$pack" "$work/s" --split train2017 -o "$work/train.ffr" --size 64 --shard-size 100K -q 2>/dev/null
check $? "a sharded dataset packed"
shards=$(ls "$work"/train-*.ffr | wc -l)
[ "$shards" -ge 2 ]
check $? "it has $shards shards"
run() {
    OPENBLAS_NUM_THREADS=1 "$train" --records "$work/train.ffr" --cfg yolov5n --img 64 \
        --batch-size 4 --epochs 1 --threads 1 --workers 1 --project "$work/runs" \
        --cache-dir "$work/cache" "$@" >"$work/log" 2>&1
}
run
check $? "training from the cache runs"
grep -q "$shards shard(s) fetched into $work/cache" "$work/log"
check $? "the first run fetched every shard"
[ "$(ls "$work"/cache/*train-0000*.ffr | wc -l)" = "$shards" ]
check $? "the cache holds the shards"
run
check $? "the second run runs"
! grep -q "fetched" "$work/log"
check $? "the second run fetched nothing"
# The reuse check reads the size, header, trailer and index hash (record bytes are checked as
# they are read): damage the header.
victim=$(ls "$work"/cache/*train-00000.ffr)
printf 'garbage' | dd of="$victim" bs=1 seek=0 conv=notrunc status=none
run --cache-max 100M
check $? "after damage to a cached shard the run still trains"
grep -q "1 shard(s) fetched" "$work/log"
check $? "the damaged shard was fetched again"
# A damaged record passes the cheap reuse check (issue 20: it then failed every later run): the
# run that reads it evicts the shard and says so, and the next run fetches it again.
victim=$(ls "$work"/cache/*train-00001.ffr)
printf '\377\377\377\377' | dd of="$victim" bs=1 seek=4300 conv=notrunc status=none
run
check $? "a run over a cached shard with a damaged record still trains"
grep -q "fails its checksum: the shard is evicted from $work/cache" "$work/log"
check $? "it says the shard is evicted"
grep -q "fails its checksum: the shard is evicted" "$work/log" ||
    grep -E "cache:|bad record|checksum" "$work/log" | sed 's/^/# /' | tail -8
[ ! -e "$victim" ]
check $? "the damaged copy is gone from the cache"
run
check $? "the next run runs"
grep -q "1 shard(s) fetched into $work/cache, every byte verified" "$work/log" &&
    ! grep -q "bad record" "$work/log"
check $? "it fetched that shard again and read no bad record"
chmod 000 "$work/cache" 2>/dev/null
if [ "$(id -u)" != 0 ]; then
    run
    [ $? = 1 ] && grep -q -- "--cache-dir $work/cache" "$work/log"
    check $? "an unusable cache directory is an error naming it"
fi
chmod 755 "$work/cache"
OPENBLAS_NUM_THREADS=1 "$train" --records http://127.0.0.1:9/x.ffr --cfg yolov5n --img 64 \
    --project "$work/runs" >"$work/log" 2>&1
[ $? = 1 ] && grep -q "needs --cache-dir" "$work/log"
check $? "a URL without --cache-dir is refused"
"$train" --records "$work/train.ffr" --cfg yolov5n --cache-max 12Q >"$work/log" 2>&1
[ $? = 2 ]
check $? "a bad --cache-max is a usage error"
echo "1..$n"
[ "$failed" = 0 ]
