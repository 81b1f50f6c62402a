#!/usr/bin/env bash
# yolo-train's bf16 step fed by the GPU augmentation in the stem's space-to-depth layout (net.h
# THE STEM'S INPUT), on the device data path of a CPU context (what a GPU runs, checkable here):
# the log says the batches come in that layout; two epochs with a short last batch give the
# checkpoint state of --host-aug (float32 batches cast in the step) bit for bit, the CUDA-graph
# step too, in NHWC and NCHW; the first batch's picture is the same JPEG.
# Usage: test_yolo_train_s2d.sh YOLO_TRAIN YOLO_SYNTH YOLO_PACK FFR
set -u
train=$1 synth=$2 pack=$3 ffr=$4
. "$(dirname "$0")/../tap.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tap_out=$work/out
"$synth" "$work/s" --split train2017=16 --seed 3 --format yolo >/dev/null 2>&1 &&
    "$pack" "$work/s/synth.yaml" --split train -o "$work/t.ffr" --size 128 -q 2>/dev/null
check $? "a 16-image dataset packed at 128"
# state NAME: the sha256 of the checkpoint records that hold the state (weights, buffers,
# counters, EMA) of run NAME
state() {
    local k line=""
    for k in 0 1 2 3; do line="$line $("$ffr" cat "$work/runs/$1/weights/last.ckpt" $k | sha256sum | cut -c1-16)"; done
    echo "$line"
}
# run NAME ACTIVATIONS [FLAGS...]: 2 epochs of 4 batches of 5, 5, 5 and 1 images
run() {
    local name=$1 act=$2
    shift 2
    expect 0 "$name: yolo-train --activations $act $*" -- "$train" --records "$work/t.ffr" \
        --cfg yolov5n --img 128 --batch-size 5 --epochs 2 --workers 2 --seed 0 --device cpu \
        --amp bf16 --activations "$act" --cpu-engine reference --device-path --noval \
        --project "$work/runs" --name "$name" "$@"
    cp "$tap_out" "$work/$name.log"
}
for act in bf16-nhwc bf16-nchw; do
    lay=$(echo "${act#bf16-}" | tr a-z A-Z)
    run "s2d-$act" "$act"
    grep -q "writing the batch tensor in bf16 as the stem's $lay space-to-depth input" "$work/s2d-$act.log"
    check $? "$act: the log says the batches come as the stem's $lay space-to-depth input"
    run "host-$act" "$act" --host-aug
    ! grep -q "space-to-depth" "$work/host-$act.log"
    check $? "$act --host-aug: float32 batches from the host"
    a=$(state "s2d-$act") b=$(state "host-$act")
    [ -n "$a" ] && [ "$a" = "$b" ]
    check $? "$act: the state after 8 steps equals --host-aug's bit for bit:$a"
    run "graph-$act" "$act" --cuda-graph
    grep -q "replayed" "$work/graph-$act.log" && [ "$(state "graph-$act")" = "$a" ]
    check $? "$act --cuda-graph: replayed steps, the same state"
done
a=$(state s2d-bf16-nhwc) b=$(state s2d-bf16-nchw)
[ "$a" = "$b" ]
check $? "NHWC and NCHW give the same state"
cmp -s "$work/runs/s2d-bf16-nhwc/train_batch0.jpg" "$work/runs/host-bf16-nhwc/train_batch0.jpg" &&
    cmp -s "$work/runs/s2d-bf16-nchw/train_batch1.jpg" "$work/runs/host-bf16-nchw/train_batch1.jpg"
check $? "train_batch0.jpg and train_batch1.jpg drawn from the space-to-depth batches are the host's JPEGs"
tap_done
