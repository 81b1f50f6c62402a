#!/usr/bin/env bash
# yolo-plot as a user runs it on a dataset made by yolo-synth and yolo-pack: three train
# pictures and a val picture of the sizes ultralytics' plot_images gives, bad arguments exit 2,
# a missing file exits 1. Usage: test_yolo_plot.sh YOLO_PLOT YOLO_SYNTH YOLO_PACK
set -u
plot=$1 synth=$2 pack=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
check() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi; }
# jpeg_size FILE: "W H" from the JPEG's SOF marker (bash + od only).
jpeg_size() {
    /usr/bin/python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
i = 2
while i < len(b):
    m = b[i + 1]
    if m in (0xC0, 0xC1, 0xC2):
        h, w = struct.unpack(">HH", b[i + 5:i + 9]); print(w, h); break
    i += 2 + struct.unpack(">H", b[i + 2:i + 4])[0]
PY
}
"$synth" "$work/s" --split train2017=40 --split val2017=6 --seed 2 >/dev/null 2>&1
"$pack" "$work/s/synth.yaml" --split train -o "$work/t.ffr" -q 2>/dev/null &&
    "$pack" "$work/s/synth.yaml" --split val -o "$work/v.ffr" -q 2>/dev/null
check $? "datasets packed"
"$plot" --records "$work/t.ffr" -o "$work/out" >"$work/log" 2>&1
check $? "yolo-plot writes the train pictures"
for k in 0 1 2; do
    [ "$(jpeg_size "$work/out/train_batch$k.jpg")" = "1920 1920" ]
    check $? "train_batch$k.jpg is a 1920x1920 JPEG (16 images of 640 on a 4x4 grid)"
done
"$plot" --records "$work/v.ffr" -o "$work/out" --val --batch-size 4 --batches 5 >"$work/log" 2>&1
check $? "yolo-plot --val"
[ -f "$work/out/val_batch0.jpg" ] && [ -f "$work/out/val_batch1.jpg" ] && [ ! -f "$work/out/val_batch2.jpg" ]
check $? "6 val images in batches of 4: two pictures, no more"
"$plot" >/dev/null 2>&1; [ $? = 2 ]; check $? "no --records exits 2"
"$plot" --records "$work/t.ffr" --img 12 >/dev/null 2>&1; [ $? = 2 ]; check $? "bad --img exits 2"
"$plot" --records "$work/none.ffr" -o "$work/out" >/dev/null 2>&1; [ $? = 1 ]; check $? "missing file exits 1"
echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
