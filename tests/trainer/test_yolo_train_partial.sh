#!/usr/bin/env bash
# yolo-train --cache-dir with a --cache-max below the dataset, on 4 "nodes" of 1 rank each (4
# processes on loopback with torchrun's variables, a cache directory per node), from an origin
# that `ffr serve` runs and that counts the bytes it sends. Each node caches the shards it reads
# in an epoch, before the epoch, from the other nodes first; the others stay skeletons (their
# index). Checked: a limit below one epoch's shards, or below them and the skeletons, is
# refused naming what it needs; the runs with and without peers train to the same results, bit
# for bit, with no bad record; part of each later epoch's shards is prefetched while the epoch
# before trains; each node's cache stays under the limit on disk; peers save origin egress.
# Usage: test_yolo_train_partial.sh YOLO_TRAIN YOLO_SYNTH YOLO_PACK FFR
set -u
train=$1 synth=$2 pack=$3 ffr=$4
work=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
. "$(dirname "$0")/loopback.sh"
pack_origin 64 7
rc=$?
shards=$(ls "$work/origin" | grep -c -- '-[0-9]*\.ffr$')
check $rc "a dataset packed in $shards shards"
data_bytes=$(cat "$work"/origin/*-*.ffr | wc -c)

# one job: 4 ranks, one per node, 3 epochs; prints the origin's body bytes
job() {
    local name=$1 max=$2; shift 2
    origin_start "$work/origin" "$work/$name.serve"
    local mport pids=() rc=0
    mport=$(free_port)
    for r in 0 1 2 3; do
        RANK=$r WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$mport OPENBLAS_NUM_THREADS=1 \
            "$train" --dist-timeout 60 --records "http://127.0.0.1:$port/ffr/train.ffr" \
            --cache-dir "$work/$name-cache$r" --cache-max "$max" \
            --cfg yolov5n --img 96 --batch-size 8 --epochs 3 --threads 1 --workers 1 --seed 2 \
            --noval --nosave --project "$work/runs" --name "$name" "$@" >"$work/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    kill "$srv"
    wait "$srv" 2>/dev/null
    srv=
    sed -n 's/.* \([0-9]*\) body bytes.*/\1/p' "$work/$name.serve"
    return $rc
}

# 1. too small: refused before training, naming the bytes one epoch's shards need
job small 20000 >/dev/null
rc=$?
need=$(sed -n 's/.* (\([0-9]*\) bytes) of shards node.*/\1/p' "$work"/small.*.log | sort -n | tail -1)
[ $rc != 0 ] && [ -n "$need" ] && ! grep -q "Epoch" "$work"/small.0.log
check $? "--cache-max 20000 is refused: one epoch's shards need ${need:-?} bytes"
grep -h "cannot hold" "$work"/small.0.log | head -1 | sed "s/^/# /"
# just above it: the skeletons (every shard's index, never evicted) leave too little beside them
job tight $(( ${need:-0} + 4096 )) >/dev/null
rc=$?
[ $rc != 0 ] && grep -q "beside the shards' skeletons" "$work"/tight.0.log && ! grep -q "Epoch" "$work"/tight.0.log
check $? "--cache-max of one epoch's shards + 4 kB is refused: the skeletons take room too"
grep -h "beside the shards" "$work"/tight.0.log | head -1 | sed "s/^/# /"
# 2. a limit of 1.5x that, below the dataset
max=$(( ${need:-0} * 3 / 2 ))
[ "$max" -gt 0 ] && [ "$max" -lt "$data_bytes" ]
check $? "--cache-max $max is below the dataset's $data_bytes bytes"
with=$(job peers "$max")
check $? "4 nodes train 3 epochs with peers, each caching one epoch's shards"
[ $? = 0 ] || tail -n 5 "$work"/peers.?.log | sed 's/^/# /'
grep -h "cache: epoch\|above --cache-max" "$work"/peers.0.log | sed "s/^/# /"
[ "$(grep -c "cache: epoch [0-9]: the nodes' shards" "$work"/peers.0.log)" = 3 ]
check $? "rank 0 reports each epoch's fill"
# epochs 1 and 2: part of each fill came while the epoch before trained (the cache's room
# allows about half an epoch's shards beside the current one's)
pre=$(sed -n "s/.*cache: epoch [12]: .*, \([0-9]*\) of them during the epoch before.*/\1/p" "$work"/peers.0.log | tr '\n' ' ')
[ "$(echo $pre | wc -w)" = 2 ] && ! echo " $pre" | grep -q " 0"
check $? "shards of epochs 1 and 2 were prefetched during the epoch before (${pre:-none})"
without=$(job nopeers "$max" --peers off)
check $? "the same job with --peers off"
[ $? = 0 ] || tail -n 5 "$work"/nopeers.?.log | sed 's/^/# /'
cmp -s "$work/runs/peers/results.csv" "$work/runs/nopeers/results.csv"
check $? "the same results, bit for bit"
! grep -qi "bad record\|checksum\|record [0-9]* (" "$work"/peers.?.log "$work"/nopeers.?.log
check $? "no record was bad in either run"
echo "# dataset $data_bytes bytes; origin sent $with with peers, $without without (3 epochs)"
awk -v w="$with" -v o="$without" 'BEGIN { exit !(w > 0 && w < o) }'
check $? "peers save origin egress ($(awk -v w="$with" -v d="$data_bytes" 'BEGIN { printf "%.2f", w / d }')x against $(awk -v w="$without" -v d="$data_bytes" 'BEGIN { printf "%.2f", w / d }')x)"
# As the cache counts: each file's size, a (sparse) skeleton's allocated blocks.
ok=0
for r in 0 1 2 3; do
    [ -d "$work/peers-cache$r" ] || { ok=1; continue; }
    used=$(find "$work/peers-cache$r" -type f -printf '%s %b %f\n' |
        awk '{ t += ($3 ~ /^\.skel-/) ? $2 * 512 : $1 } END { print t + 0 }')
    skel=$(find "$work/peers-cache$r" -type f -name '.skel-*' -printf '%b\n' | awk '{ t += $1 * 512 } END { print t + 0 }')
    echo "# node $r: $used bytes in the cache (skeletons $skel), limit $max"
    [ "$used" -le "$max" ] || ok=1
done
check $ok "every node's cache stays under --cache-max"
[ "$(ls -a "$work/peers-cache0" | grep -c '^\.skel-')" = "$shards" ]
check $? "each node keeps a skeleton of every shard"
echo "# $((n - failed)) passed, $failed failed"
tap_done
