#!/usr/bin/env bash
# yolo-train --cache-dir on 4 "nodes" of 1 rank (4 processes on loopback with torchrun's
# variables) with --dist-timeout 8, where one node's cache is cold and its origin slow: that
# node fills for longer than --dist-timeout while the others, whose caches are warm, wait for
# it. The wait is not a collective that --dist-timeout bounds: the job trains, with peers and
# with --peers off, to the results of a run whose caches were all filled at full speed.
# Usage: test_yolo_train_fill_wait.sh YOLO_TRAIN YOLO_SYNTH YOLO_PACK FFR
set -u
train=$1 synth=$2 pack=$3 ffr=$4
work=$(mktemp -d)
srv= thr=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; [ -n "$thr" ] && kill "$thr" 2>/dev/null; rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
. "$(dirname "$0")/loopback.sh"
pack_origin 64 3
check $? "a dataset packed in $(ls "$work/origin" | grep -c -- '-[0-9]*\.ffr$') shards"
data_bytes=$(cat "$work"/origin/* | wc -c)
timeout=8

# one job: 4 ranks, one per node, caches cache0..3; RATE (bytes/s, 0: none) throttles the origin
job() {
    local name=$1 rate=$2; shift 2
    origin_start "$work/origin" "$work/$name.serve"
    local url=$port mport pids=() rc=0
    if [ "$rate" != 0 ]; then
        throttle_start "$port" "$rate" "$work/$name.throttle"
        url=$tport
    fi
    mport=$(free_port)
    for r in 0 1 2 3; do
        RANK=$r WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$mport OPENBLAS_NUM_THREADS=1 \
            "$train" --dist-timeout $timeout --records "http://127.0.0.1:$url/ffr/train.ffr" \
            --cache-dir "$work/cache$r" --cfg yolov5n --img 96 --batch-size 8 --epochs 1 \
            --threads 1 --workers 1 --seed 2 --noval --nosave --project "$work/runs" \
            --name "$name" "$@" >"$work/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $rc = 0 ] || tail -n 4 "$work/$name".?.log | sed 's/^/# /' >&2
    [ -n "$thr" ] && kill "$thr" && wait "$thr" 2>/dev/null
    thr=
    kill "$srv"
    wait "$srv" 2>/dev/null
    srv=
    return $rc
}

job warm 0
check $? "4 nodes fill their caches at full speed and train"
# node 1 cold, its origin at a rate that makes its part of the fill last about 1.5 x the
# timeout: with peers it fetches about a quarter of the dataset from the origin, without the
# whole. The wait's own bound, the dataset at 64 KiB/s past the timeout, is above either.
echo "# dataset $data_bytes bytes; each wait may last $timeout + $((data_bytes / 65536)) s"
for mode in peers nopeers; do
    rm -rf "$work/cache1"
    if [ $mode = peers ]; then
        job $mode $((data_bytes / 4 / (timeout * 3 / 2)))
    else
        job $mode $((data_bytes / (timeout * 3 / 2))) --peers off
    fi
    check $? "node 1's cache cold and its origin slow ($mode): the job trains"
    if [ $mode = peers ]; then
        took=$(sed -n 's/.*peers: 4 nodes filled their caches in \([0-9.]*\) s.*/\1/p' "$work/$mode.0.log")
    else
        took=$(sed -n 's/.*cache: waited \([0-9.]*\) s for the other nodes.*/\1/p' "$work/$mode.0.log")
    fi
    grep -h "peers: 4 nodes\|cache: waited\|fetched into" "$work/$mode.0.log" "$work/$mode.1.log" | sed 's/^/# /'
    awk -v t="${took:-0}" -v d=$timeout 'BEGIN { exit !(t > d) }'
    check $? "... after node 0 waited ${took:-?} s for it, past --dist-timeout $timeout"
    cmp -s "$work/runs/warm/results.csv" "$work/runs/$mode/results.csv"
    check $? "... to the results of the run at full speed, bit for bit"
done
echo "# $((n - failed)) passed, $failed failed"
tap_done
