#!/usr/bin/env bash
# yolo-train --cache-dir on 2 "nodes" of 2 ranks each (4 processes on loopback with torchrun's
# variables, a cache directory per node), from an origin that `ffr serve` runs and that counts
# the bytes it sends: with peers (the default) the dataset leaves the origin about once, without
# (--peers off) once per node; both runs train to the same results, bit for bit.
# Usage: test_yolo_train_peers.sh YOLO_TRAIN YOLO_SYNTH YOLO_PACK FFR
set -u
train=$1 synth=$2 pack=$3 ffr=$4
work=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
. "$(dirname "$0")/loopback.sh"
pack_origin 24 5
check $? "a dataset packed in $(ls "$work/origin" | grep -c -- '-[0-9]*\.ffr$') shards"
data_bytes=$(cat "$work"/origin/* | wc -c)

# one job: 4 ranks, 2 per node; prints the origin's body bytes
job() {
    local name=$1; shift
    origin_start "$work/origin" "$work/$name.serve"
    local mport pids=() rc=0
    mport=$(free_port)
    for r in 0 1 2 3; do
        # --dist-timeout: a rank that cannot join (or dies) ends the job in a minute, not 30.
        RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 MASTER_ADDR=${maddr:-127.0.0.1} \
            MASTER_PORT=$mport OPENBLAS_NUM_THREADS=1 \
            "$train" --dist-timeout 60 --records "http://127.0.0.1:$port/ffr/train.ffr" --cache-dir "$work/$name-cache$((r / 2))" \
            --cfg yolov5n --img 96 --batch-size 4 --epochs 1 --threads 1 --workers 1 --seed 2 \
            --noval --nosave --project "$work/runs" --name "$name" "$@" >"$work/$name.$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $rc = 0 ] || tail -n 5 "$work/$name".?.log | sed 's/^/# /' >&2
    kill "$srv"
    wait "$srv" 2>/dev/null
    srv=
    sed -n 's/.* \([0-9]*\) body bytes.*/\1/p' "$work/$name.serve"
    return $rc
}
with=$(job peers)
check $? "4 ranks on 2 nodes train with peers"
grep -h "peers: " "$work"/peers.0.log | sed "s/^/# /"
[ "$(grep -c "peers: 2 nodes filled their caches" "$work"/peers.0.log)" = 1 ]
check $? "rank 0 says, once, what came from the other nodes and what from the origin"
without=$(job nopeers --peers off)
check $? "the same job with --peers off"
echo "# dataset $data_bytes bytes; origin sent $with with peers, $without without"
awk -v w="$with" -v d="$data_bytes" 'BEGIN { exit !(w > 0 && w <= 1.1 * d) }'
check $? "with peers the origin sent $(awk -v w="$with" -v d="$data_bytes" 'BEGIN { printf "%.2f", w / d }')x the dataset (<= 1.1)"
awk -v w="$without" -v d="$data_bytes" 'BEGIN { exit !(w >= 1.9 * d) }'
check $? "without, $(awk -v w="$without" -v d="$data_bytes" 'BEGIN { printf "%.2f", w / d }')x (each node fetched it)"
cmp -s "$work/runs/peers/results.csv" "$work/runs/nopeers/results.csv"
check $? "the same results, bit for bit"
diff -r <(cd "$work/peers-cache0" && ls | grep -v '^\.' | grep -v '^m' | sort) \
    <(cd "$work/peers-cache1" && ls | grep -v '^\.' | grep -v '^m' | sort) >/dev/null
check $? "both nodes' caches hold every shard"

# over IPv6: MASTER_ADDR ::1, so each node announces ::1 and the others reach its server there
if python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
    with6=$(maddr=::1 job peers6)
    check $? "the job with MASTER_ADDR=::1"
    grep -q "peers off" "$work"/peers6.?.log
    check $((!$?)) "no rank turned peers off"
    awk -v w="$with6" -v d="$data_bytes" 'BEGIN { exit !(w > 0 && w <= 1.1 * d) }'
    check $? "over IPv6 the origin sent $(awk -v w="$with6" -v d="$data_bytes" 'BEGIN { printf "%.2f", w / d }')x the dataset (<= 1.1)"
    cmp -s "$work/runs/peers/results.csv" "$work/runs/peers6/results.csv"
    check $? "and the same results, bit for bit"
else
    for k in 1 2 3 4; do n=$((n + 1)); echo "ok $n # SKIP no IPv6 loopback (::1) on this machine"; done
fi
echo "# $((n - failed)) passed, $failed failed"
tap_done
