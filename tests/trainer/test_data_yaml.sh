#!/usr/bin/env bash
# --data DATA.yaml as ultralytics' train.py / val.py take it: yolo-train packs the train and val
# splits at --img into the pack cache on first use and finds them afterwards; a changed label
# makes a new pack; two local ranks (--nproc-per-node 2) pack once; yolo-val --data packs its
# --task split and validates it; the usage errors; a resume checks that it reads the records it
# trained on (another dataset refused, naming both, unless --resume-other-data), and packs them
# again from the checkpoint's --data when its pack is gone.
# Usage: test_data_yaml.sh YOLO_TRAIN YOLO_VAL YOLO_SYNTH MODELS_DIR
set -u
train=$1 val=$2 synth=$3 models=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_out=$work/err
run() { expect "$@"; } # run CODE DESC -- PROGRAM ARGS...
count() { grep -c -- "$1" "$work/err"; }

export FFYOLO_MODELS_DIR=$models
"$synth" "$work/s" --split train2017=8 --split val2017=4 --seed 5 --format yolo >/dev/null 2>&1
check $? "a yolo-synth set with a dataset yaml (train, val)"
y=$work/s/synth.yaml
T=(--cfg yolov5n --img 64 --batch-size 4 --epochs 1 --stop-after-steps 1 --workers 1
    --threads 2 --project "$work/runs" --pack-dir "$work/packs")

run 0 "yolo-train --data, first use" -- "$train" --data "$y" "${T[@]}" --name a
[ "$(count "train: 8 images at 64, packed into")" = 1 ] &&
    [ "$(count "val: 4 images at 64, packed into")" = 1 ]
check $? "both splits packed at --img into the pack cache"
ls "$work"/packs/synth-*/train-64-*.ffr "$work"/packs/synth-*/val-64-*.ffr >/dev/null 2>&1
check $? "... as PACK_DIR/synth-HASH/{train,val}-64-KEY.ffr"
grep -q "Training: 2 batches of 4" "$work/err"
check $? "training reads the train pack (8 images)"

grep -q "^hyperparameters: lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=0.0005, warmup_epochs=3.0," "$work/err" &&
    grep -q "^optimizer: SGD(lr=0.01) with parameter groups 57 weight(decay=0.0), 60 weight(decay=0.0005), 60 bias" "$work/err" &&
    grep -Eq "^YOLOv5n summary: 214 layers, [0-9]+ parameters, [0-9]+ gradients" "$work/err" &&
    grep -q "^AutoAnchor: " "$work/err"
check $? "train.py's start: hyperparameters, the model summary, AutoAnchor, the optimizer groups"

run 0 "yolo-train --data, second use" -- "$train" --data "$y" "${T[@]}" --name b
[ "$(count "packed before:")" = 2 ] && [ "$(count "packed into")" = 0 ]
check $? "both packs found again, none made"

touch -d '+1 hour' "$(ls "$work"/s/labels/train2017/*.txt | head -1)"
run 0 "after touching a train label" -- "$train" --data "$y" "${T[@]}" --name c
[ "$(count "train: 8 images at 64, packed into")" = 1 ] && [ "$(count "val: 4 images at 64, packed before")" = 1 ]
check $? "train packed again, val found"
[ "$(ls "$work"/packs/synth-*/train-64-*.ffr | wc -l)" = 1 ]
check $? "the older train pack removed"

run 0 "two local ranks, a new size" -- "$train" --data "$y" "${T[@]}" --img 96 --batch-size 8 \
    --nproc-per-node 2 --name d
[ "$(count "train: 8 images at 96, packed into")" = 1 ] && [ "$(count "packed before:")" = 0 ]
check $? "packed once for both ranks, which get the packs and do not look again"
grep -a -q "^data: \"\?$y" "$work/runs/d/weights/last.ckpt"
check $? "... and rank 0's checkpoint still names the --data they came from"

run 2 "--data with --records" -- "$train" --data "$y" --records x.ffr "${T[@]}" --name e
grep -q "give --data or --records" "$work/err"
check $? "... says to give one"
run 1 "--data on a missing yaml" -- "$train" --data "$work/none.yaml" "${T[@]}" --name f
grep -q "none.yaml" "$work/err"
check $? "... names the file"

# the bar: one line per epoch in a log, redrawn after every batch on a terminal
P=(--cfg yolov5n --img 64 --batch-size 4 --epochs 2 --workers 1 --threads 2 --noautoanchor
    --project "$work/runs" --pack-dir "$work/packs" --noval)
run 0 "two epochs, output to a file" -- "$train" --data "$y" "${P[@]}" --name p
[ "$(grep -Ec '^ +[01]/1 +0G( +[0-9.e-]+){5}: 100%\|█{10}\| 2/2 \[[0-9:]+<00:00, +[0-9.]+(it/s|s/it), [0-9.]+img/s\]$' "$work/err")" = 2 ] &&
    [ "$(grep -c ' 1/2 \[' "$work/err")" = 0 ]
check $? "a log gets one tqdm line per epoch (epoch, GPU_mem 0G on the CPU, losses, 100%|...| 2/2)"
[ -s "$work/runs/p/train_batch0.jpg" ] && [ -s "$work/runs/p/train_batch1.jpg" ] &&
    [ ! -e "$work/runs/p/train_batch2.jpg" ]
check $? "train_batch0.jpg and train_batch1.jpg (the epoch's 2 batches) in the run directory"
grep -Eq '^[0-9]+ batches, [0-9.]+ img/s training \([0-9.]+ img/s with validation and saving\)' "$work/err"
check $? "the last line says what its rates cover"
if command -v script >/dev/null; then
    script -qec "$(printf '%q ' "$train" --data "$y" "${P[@]}" --name q --noplots)" /dev/null \
        >"$work/tty" 2>&1
    [ "$(grep -o $'\r' "$work/tty" | wc -l)" -ge 4 ] && grep -q ' 1/2 \[' "$work/tty"
    check $? "a terminal gets the bar redrawn after every batch (1/2, then 2/2)"
    ! ls "$work"/runs/q/*.jpg "$work"/runs/q/*.png >/dev/null 2>&1 && [ -s "$work/runs/q/results.csv" ]
    check $? "--noplots: no pictures (train batches, results.png, the final validation's)"
else
    skip "no script(1) for a pseudo-terminal"
fi

ck=$work/runs/a/weights/last.ckpt
run 0 "yolo-val --data (task val)" -- "$val" --data "$y" --weights "$ck" --img 64 \
    --pack-dir "$work/packs" --project "$work/val" --noplots
grep -q "val: 4 images at 64, packed before" "$work/err" && grep -Eq "^ +all +4 " "$work/err" &&
    grep -Eq "^ +Class +Images +Instances +P +R +mAP50 +mAP50-95: 100%\|█{10}\| 1/1 \[" "$work/err"
check $? "the val pack yolo-train made is found and validated (4 images), val.py's bar ending as the header"
run 1 "yolo-val --data --task test on a yaml without test" -- "$val" --data "$y" --task test \
    --weights "$ck" --img 64 --pack-dir "$work/packs" --project "$work/val"
grep -q "no test split" "$work/err"
check $? "... says there is no test split"
run 2 "yolo-val --data with --records" -- "$val" --data "$y" --records x.ffr --weights "$ck"

# --resume and the data: the checkpoint names its --data and the content of its records
R=(--cfg yolov5n --img 64 --batch-size 4 --epochs 2 --workers 1 --threads 2 --noautoanchor
    --noval --project "$work/runs" --pack-dir "$work/packs")
run 0 "a run stopped after one step" -- "$train" --data "$y" "${R[@]}" --stop-after-steps 1 --name r
rk=$work/runs/r/weights/last.ckpt
was=$(grep -o '/[^ ]*/train-64-[0-9a-f]*\.ffr' "$work/err" | head -1)
"$synth" "$work/s2" --split train2017=12 --split val2017=4 --seed 6 --format yolo >/dev/null 2>&1
run 1 "--resume --data on another dataset" -- "$train" --resume "$work/runs/r" --data "$work/s2/synth.yaml" \
    --pack-dir "$work/packs" --workers 1 --threads 2
grep -q "holds other records than $rk was trained on (content [0-9a-f]\{16\}, the checkpoint's [0-9a-f]\{16\})" "$work/err" &&
    grep -q "give --resume-other-data" "$work/err"
check $? "... refused, naming the records, the checkpoint, both contents and the way out"
cp -r "$work/runs/r" "$work/runs/r2"
run 0 "--resume --data on another dataset, --resume-other-data" -- "$train" --resume "$work/runs/r2" \
    --data "$work/s2/synth.yaml" --resume-other-data --pack-dir "$work/packs" --workers 1 --threads 2
grep -q "WARNING: .* holds other records than .* continuing on them (--resume-other-data)" "$work/err" &&
    grep -q "3 batches of 4 per epoch" "$work/err"
check $? "... continues on the 12 images, saying so"
touch -d '+2 hours' "$(ls "$work"/s/labels/train2017/*.txt | head -1)"
run 0 "a newer pack of the dataset (a label touched)" -- "$train" --data "$y" "${T[@]}" --name t2
[ -n "$was" ] && [ ! -e "$was" ]
check $? "... replaced the pack the stopped run read (no job holds it): $was"
run 0 "--resume with its pack gone" -- "$train" --resume "$work/runs/r" --pack-dir "$work/packs" \
    --workers 1 --threads 2
grep -q "is gone; packing it again from $y" "$work/err" && grep -q "train: 8 images at 64, packed before" "$work/err"
check $? "... packs it again from the checkpoint's --data (here: the pack is there) and trains on"
tap_done
