#!/usr/bin/env bash
# A stopped rank ends the job within a minute (issue 44): two local ranks train, rank 1 is sent
# SIGSTOP mid-run, and with the default --dist-timeout (1800 s) the job still ends: rank 0's
# heartbeat thread hears nothing from rank 1 for 30 s, names it, and the launcher ends the rest.
# Usage: test_dist_stopped.sh YOLO_TRAIN YOLO_SYNTH MODELS_DIR
set -u
train=$1 synth=$2 models=$3
work=$(mktemp -d)
trap 'pkill -KILL -f "$work/ds/synth.yaml" 2>/dev/null; rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_out=$work/err
export FFYOLO_MODELS_DIR=$models
"$synth" "$work/ds" --split train2017=16 --seed 3 --format yolo >/dev/null 2>&1
check $? "a yolo-synth set of 16 images"

"$train" --data "$work/ds/synth.yaml" --cfg yolov5n --img 64 --batch-size 4 --epochs 1000 \
    --workers 1 --threads 1 --nproc-per-node 2 --project "$work/runs" --name hb --noval \
    --noplots --pack-dir "$work/packs" >"$work/err" 2>&1 &
job=$!
for _ in $(seq 300); do
    grep -q "Epoch" "$work/err" && break
    sleep 0.2
done
sleep 2
pid1=$(sed -n 's/.*started rank 1 of 2 (pid \([0-9]*\)).*/\1/p' "$work/err")
[ -n "$pid1" ] && kill -STOP "$pid1"
check $? "the job trains, and rank 1 (pid ${pid1:-?}) is stopped"
t0=$(date +%s)
for _ in $(seq 900); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
done
took=$(($(date +%s) - t0))
wait "$job"
rc=$?
[ $rc != 0 ] && [ "$took" -le 60 ]
check $? "the job ends, failing, $took s after the stop (at most 60; rc $rc)"
grep -q "rank 1 sent no heartbeat for 30 s" "$work/err"
check $? "... naming the silent rank: $(grep -m1 -o 'rank 1 sent no heartbeat[^:]*' "$work/err")"
tap_done
