#!/usr/bin/env bash
# Fine-tuning as an ultralytics user does it (train.py --weights X.pt --data own.yaml): --weights
# alone builds the model from the checkpoint's own yaml with the dataset's classes, and every
# tensor whose name and shape fit is transferred, with train.py's two lines. On our checkpoint
# (from a one-batch yolov5n run on an 8-class yolo-synth set) and, when ../shared has it, on the
# official yolov5n.pt (80 classes onto 8: 343 of 349, the Detect convs' 6 tensors stay fresh).
# Also the train.py flags that need a run: --label-smoothing, --single-cls, --image-weights,
# --evolve, --rect, --multi-scale, --freeze, --batch-size -1, and labels.jpg.
# Usage: test_finetune.sh YOLO_TRAIN YOLO_SYNTH YOLO_PACK MODELS_DIR SHARED_DIR
set -u
train=$1 synth=$2 pack=$3 models=$4 shared=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
# run CODE DESC -- yolo-train ARGS...: one batch at 64 px; exit status CODE, no sanitizer report
tap_out=$work/err
run() {
    local code=$1 desc=$2
    shift 3
    expect "$code" "$desc" -- "$train" --records "$work/t.ffr" --img 64 --batch-size 4 --epochs 1 \
        --stop-after-steps 1 --workers 1 --threads 2 --project "$work/runs" "$@"
}
has() { grep -Fq -- "$1" "$work/err"; }

export FFYOLO_MODELS_DIR=$models
"$synth" "$work/s" --split train2017=8 --seed 3 --format yolo >/dev/null 2>&1 &&
    "$pack" "$work/s/synth.yaml" --split train -o "$work/t.ffr" -q --size 64 >/dev/null 2>&1
check $? "an 8-class yolo-synth set packed at 64"

run 0 "yolov5n from its yaml, one batch" -- --cfg yolov5n --name a
ckpt=$work/runs/a/weights/last.ckpt
has "Plotting labels to $work/runs/a/labels.jpg" && [ -s "$work/runs/a/labels.jpg" ] &&
    [ -s "$work/runs/a/labels_correlogram.jpg" ]
check $? "labels.jpg and labels_correlogram.jpg written, with train.py's line"
! has "Transferred"
check $? "no transfer line without --weights"

run 0 "--weights our checkpoint alone (no --cfg)" -- --weights "$ckpt" --name b
has "Transferred 349/349 items from $ckpt"
check $? "same classes: every one of the 349 items transferred"
! has "Overriding"
check $? "... and no nc override line"

run 0 "--weights our checkpoint --nc 12" -- --weights "$ckpt" --nc 12 --name c
has "Overriding model.yaml nc=8 with nc=12" && has "Transferred 343/349 items from $ckpt"
check $? "other classes: nc overridden, 343/349 (the Detect convs' 6 tensors stay fresh)"

run 0 "--weights with --cfg yolov5s" -- --weights "$ckpt" --cfg yolov5s --name d
grep -Eq "^Transferred [0-9]+/349 items" "$work/err" && ! has "Transferred 349/349"
check $? "another architecture: only what fits moves, the anchors stay the yaml's"

run 1 "--weights on a missing file" -- --weights "$work/none.pt" --name e
has "$work/none.pt"
check $? "... names the file"
run 1 "--weights on a dataset yaml" -- --weights "$work/s/synth.yaml" --name f
has "$work/s/synth.yaml"
check $? "... names the file"
run 2 "neither --cfg nor --weights nor --resume" -- --name g
has "--weights"
check $? "... the usage error names --weights"

run 0 "--label-smoothing 0.1" -- --cfg yolov5n --label-smoothing 0.1 --name ls
grep -qx "label_smoothing: 0.1" "$work/runs/ls/opt.yaml"
check $? "... recorded in opt.yaml as train.py writes it"
run 2 "--label-smoothing 1.5 (outside [0, 1))" -- --cfg yolov5n --label-smoothing 1.5 --name ls2

run 0 "--single-cls on 8 classes" -- --cfg yolov5n --single-cls --name sc
has "Overriding model.yaml nc=80 with nc=1" && grep -qx "single_cls: true" "$work/runs/sc/opt.yaml"
check $? "... one class (nc=1), recorded in opt.yaml"

run 0 "--cache (ram)" -- --cfg yolov5n --cache --noplots --name cr
has "caching decoded images in RAM" && grep -qx "cache: ram" "$work/runs/cr/opt.yaml" &&
    grep -qx "cache: null" "$work/runs/a/opt.yaml"
check $? "... says so, recorded in opt.yaml as train.py writes it (null without)"
run 2 "--cache tape" -- --cfg yolov5n --cache tape --name cr2

run 0 "--image-weights" -- --cfg yolov5n --image-weights --noplots --name iw
grep -qx "image_weights: true" "$work/runs/iw/opt.yaml" && [ ! -e "$work/runs/iw/labels.jpg" ]
check $? "... recorded in opt.yaml; --noplots writes no labels.jpg"

run 0 "--evolve 2 (two generations of one epoch)" -- --cfg yolov5n --evolve 2 --name ev \
    --stop-after-steps 1000
ev=$work/runs/ev
[ "$(grep -c . "$ev/evolve.csv")" -eq 3 ] && grep -q "^# Best generation: [01]$" "$ev/hyp_evolve.yaml" &&
    [ -s "$ev/evolve.png" ] && [ ! -e "$ev/weights/last.ckpt" ] &&
    has "evolve: 2 generations finished" && has "Hyperparameter evolution finished 2 generations"
check $? "... evolve.csv (header and 2 rows), hyp_evolve.yaml, evolve.png; no checkpoints"
run 2 "--evolve 0" -- --cfg yolov5n --evolve 0 --name ev0

run 0 "--rect --multi-scale, 3 epochs" -- --cfg yolov5n --rect --multi-scale --epochs 3 \
    --stop-after-steps 1000 --name rm
sizes=$(grep -E '^ +[0-9]+/2 ' "$work/err" | awk '{sub(":", "", $7); print $7}' | sort -u | tr '\n' ' ')
grep -qx "rect: true" "$work/runs/rm/opt.yaml" && grep -qx "multi_scale: true" "$work/runs/rm/opt.yaml" &&
    has "--rect is incompatible with DataLoader shuffle, setting shuffle=False" &&
    [ "$(echo "$sizes" | wc -w)" -ge 2 ] && ! echo "$sizes" | grep -qvE '^((32|64|96) )+$'
check $? "... recorded in opt.yaml, train.py's warning, batch sizes from {32, 64, 96}: $sizes"
run 0 "--rect --multi-scale on the resident step (--device-path)" -- --cfg yolov5n --rect \
    --multi-scale --device-path --epochs 3 --stop-after-steps 1000 --name rmd

run 0 "--img 32 from the 64 pack" -- --cfg yolov5n --img 32 --name small
has "8 of 8 records are packed larger than --img 32: resizing them on load" &&
    grep -q "^imgsz: 32$" "$work/runs/small/opt.yaml"
check $? "... each record shrunk on load, said once"
run 1 "--img 96 from the 64 pack" -- --cfg yolov5n --img 96 --name big
has "smaller than long side 96 (--img): pack at --size 96 or larger"
check $? "... refused, naming the size to pack at"

run 0 "--freeze 10 (the backbone)" -- --weights "$ckpt" --freeze 10 --name fz
[ "$(grep -c '^freezing model\.[0-9]\.' "$work/err")" -gt 50 ] &&
    ! grep -Eq '^freezing model\.[1-9][0-9]\.' "$work/err"
check $? "... each parameter of rows 0-9 said frozen, none of the head's"
run 2 "--freeze 600 (no such row)" -- --cfg yolov5n --freeze 600 --name fz2

run 0 "--batch-size -1 (AutoBatch) on the CPU" -- --cfg yolov5n --batch-size -1 --name ab
has "AutoBatch: CUDA not detected, using default CPU batch-size 16" && has "Training: 1 batches of 16"
check $? "... train.py's message and its default 16"
run 2 "--batch-size 0" -- --cfg yolov5n --batch-size 0 --name ab0

pt=$shared/weights/yolov5n.pt
if [ -f "$pt" ]; then
    run 0 "--weights yolov5n.pt on 8 classes" -- --weights "$pt" --name h
    has "Overriding model.yaml nc=80 with nc=8" && has "Transferred 343/349 items from $pt"
    check $? "the official yolov5n.pt: nc 80 -> 8, Transferred 343/349 (train.py's numbers)"
else
    skip "$pt is absent (../shared)"
fi
tap_done
