#!/usr/bin/env bash
# yolo-train --cache ram with 2 ranks on one node, as a user runs it: one copy in shared memory
# for both (the log says so, once), training to the same losses, bit for bit, as a copy per
# rank (--cache-share rank, train.py's way), and nothing left in /dev/shm afterwards.
# Usage: test_cache_share.sh YOLO_TRAIN YOLO_SYNTH YOLO_PACK
set -u
train=$1 synth=$2 pack=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
check() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi; }
"$synth" "$work/s" --split train2017=16 --seed 5 --min-side 60 --max-side 120 >/dev/null 2>&1 &&
    "$pack" "$work/s" --split train2017 -o "$work/train.ffr" --size 64 -q 2>/dev/null
check $? "a dataset packed"
before=$(ls /dev/shm | grep -c '^ffyolo-ram-')
run() {
    OPENBLAS_NUM_THREADS=1 "$train" --records "$work/train.ffr" --cfg yolov5n --img 64 \
        --batch-size 4 --epochs 2 --threads 1 --workers 1 --seed 2 --noval --nosave \
        --project "$work/runs" --name "$1" --cache ram --cache-share "$1" --nproc-per-node 2 \
        >"$work/$1.log" 2>&1
}
run node
check $? "2 ranks train with one shared copy"
[ "$(grep -c "once for this node's 2 ranks" "$work/node.log")" = 1 ]
check $? "the log says one copy for the node's 2 ranks, once"
run rank
check $? "2 ranks train with a copy each"
[ "$(grep -c "caching decoded images in RAM (" "$work/rank.log")" = 2 ]
check $? "the log says a copy per rank, from each"
cmp -s "$work/runs/node/results.csv" "$work/runs/rank/results.csv"
check $? "the losses are the same, bit for bit: $(tail -1 "$work/runs/node/results.csv" | tr -s ' ' | cut -c1-80)"
[ "$(ls /dev/shm | grep -c '^ffyolo-ram-')" = "$before" ]
check $? "nothing is left in /dev/shm"
echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
