#!/usr/bin/env bash
# yolo-import -o: the official yolov5n.pt written as our checkpoint gives the same validation
# (every metric of --json, on 8 coco128 images) as the .pt itself, loads in yolo-detect, carries
# COCO's names, refuses --resume; a write that cannot happen names the file and leaves an
# existing one intact. Skips without ../shared's yolov5n.pt.
# Usage: test_yolo_import.sh YOLO_IMPORT YOLO_VAL YOLO_DETECT YOLO_TRAIN YOLO_PACK SHARED COCO128_YAML
set -u
imp=$1 val=$2 det=$3 train=$4 pack=$5 shared=$6 yaml=$7
pt=$shared/weights/yolov5n.pt
if [ ! -f "$pt" ]; then
    echo "1..0 # SKIP $pt is absent (../shared)"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_out=$work/out

expect 0 "yolo-import yolov5n.pt -o n.ckpt" -- "$imp" "$pt" -o "$work/n.ckpt"
grep -q "^wrote $work/n.ckpt" "$work/out" && [ -s "$work/n.ckpt" ]
check $? "... says it wrote the checkpoint"

ls "$shared"/datasets/coco128/images/train2017/*.jpg | head -8 >"$work/list.txt"
"$pack" "$work/list.txt" -o "$work/v.ffr" -q --size 160 --interp val --names "$yaml" >/dev/null 2>&1
check $? "8 coco128 images packed at 160"
"$val" --records "$work/v.ffr" --weights "$pt" --img 160 --json --project "$work/r" \
    --no-plots >"$work/a.json" 2>"$work/out" &&
    "$val" --records "$work/v.ffr" --weights "$work/n.ckpt" --img 160 --json --project "$work/r" \
        --no-plots >"$work/b.json" 2>>"$work/out"
check $? "yolo-val with the .pt and with n.ckpt"
grep -qx "YOLOv5n summary: 157 layers, 1867405 parameters, 0 gradients, 4.5 GFLOPs" "$work/out"
check $? "... val.py's 'Fusing layers...' summary line"
# the same weights: the same detections, so the same metrics to the last digit
same=0
for k in precision recall map50 map50_95 instances; do
    a=$(grep -o "\"$k\": *[0-9.e+-]*" "$work/a.json") b=$(grep -o "\"$k\": *[0-9.e+-]*" "$work/b.json")
    [ -n "$a" ] && [ "$a" = "$b" ] && same=$((same + 1))
done
[ "$same" = 5 ]
check $? "... the same precision, recall, mAP50, mAP50-95 and label count ($same of 5)"

mkdir -p "$work/img"
cp "$shared"/datasets/coco128/images/train2017/000000000009.jpg "$work/img/" 2>/dev/null
expect 0 "yolo-detect --weights n.ckpt" -- "$det" --weights "$work/n.ckpt" --source "$work/img" \
    --img 320 --project "$work/d" --save-txt
grep -Eq "bowl|broccoli|orange|pizza|person" "$work/out"
check $? "... names COCO's classes (the checkpoint carries them)"

expect 1 "yolo-train --resume n.ckpt (no optimizer state)" -- "$train" --resume "$work/n.ckpt" \
    --workers 1
expect 1 "yolo-import -o into a missing directory" -- "$imp" "$pt" -o "$work/none/n.ckpt"
grep -q "$work/none" "$work/out"
check $? "... names the path"
cp "$work/n.ckpt" "$work/keep.ckpt"
chmod a-w "$work"
if [ "$(id -u)" != 0 ]; then
    expect 1 "yolo-import -o over a file in a read-only directory" -- "$imp" "$pt" \
        -o "$work/keep.ckpt"
    cmp -s "$work/n.ckpt" "$work/keep.ckpt"
    check $? "... the existing file is intact"
else
    skip "read-only directory: running as root"
fi
chmod u+w "$work"
tap_done
