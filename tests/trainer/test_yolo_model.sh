#!/usr/bin/env bash
# yolo-model: the summary ultralytics' Model(cfg) prints, at --img, and with --fuse the line
# val.py and detect.py print after "Fusing layers... " (numbers as ultralytics prints them for
# yolov5s and yolov5n: 214 -> 157 layers, 7235389 -> 7225885 parameters, 16.6 -> 16.4 GFLOPs).
# Usage: test_yolo_model.sh YOLO_MODEL MODELS_DIR
set -u
model=$1
export FFYOLO_MODELS_DIR=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_out=$work/out

expect 0 "yolo-model --cfg yolov5s --fuse" -- "$model" --cfg yolov5s --fuse
grep -qx "YOLOv5s summary: 214 layers, 7235389 parameters, 7235389 gradients, 16.6 GFLOPs" \
    "$work/out"
check $? "... Model(cfg)'s summary line"
grep -qx "Fusing layers... " "$work/out" &&
    grep -qx "YOLOv5s summary: 157 layers, 7225885 parameters, 229245 gradients, 16.4 GFLOPs" \
        "$work/out"
check $? "... the fused line: BN gone, Detect's 229245 parameters the only gradients"
expect 0 "yolo-model --cfg yolov5n --img 320 --fuse" -- "$model" --cfg yolov5n --img 320 --fuse
grep -q "^YOLOv5n summary: 214 layers, 1872157 parameters, 1872157 gradients, 1.1 GFLOPs$" \
    "$work/out" &&
    grep -q "^YOLOv5n summary: 157 layers, 1867405 parameters, [0-9]* gradients, 1.1 GFLOPs$" \
        "$work/out"
check $? "... GFLOPs at 320 (a quarter of 640's), parameters as at 640"
grep -c "^ *[0-9]* *-\?[0-9\[]" "$work/out" | grep -qx 25
check $? "... the 25-row layer table"
expect 2 "yolo-model --img 16 (below 32)" -- "$model" --cfg yolov5n --img 16
tap_done
