#!/usr/bin/env bash
# --data DATA.yaml as ultralytics' train.py / val.py take it: yolo-train packs the train and val
# splits at --img into the pack cache on first use and finds them afterwards; a changed label
# makes a new pack; two local ranks (--nproc-per-node 2) pack once; yolo-val --data packs its
# --task split and validates it; the usage errors.
# Usage: test_data_yaml.sh YOLO_TRAIN YOLO_VAL YOLO_SYNTH MODELS_DIR
set -u
train=$1 val=$2 synth=$3 models=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
check() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi
}
# run CODE DESC -- PROGRAM ARGS...: exit status CODE, no sanitizer report; output in $work/err
run() {
    local code=$1 desc=$2
    shift 3
    "$@" >"$work/err" 2>&1
    local rc=$?
    [ "$rc" = "$code" ] && ! grep -Eq "Sanitizer|runtime error" "$work/err"
    local ok=$?
    check $ok "$desc (exit $rc)"
    [ $ok = 0 ] || sed 's/^/# /' "$work/err"
}
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
[ "$(count "train: 8 images at 96, packed into")" = 1 ]
check $? "packed once for both ranks"

run 2 "--data with --records" -- "$train" --data "$y" --records x.ffr "${T[@]}" --name e
grep -q "give --data or --records" "$work/err"
check $? "... says to give one"
run 1 "--data on a missing yaml" -- "$train" --data "$work/none.yaml" "${T[@]}" --name f
grep -q "none.yaml" "$work/err"
check $? "... names the file"

ck=$work/runs/a/weights/last.ckpt
run 0 "yolo-val --data (task val)" -- "$val" --data "$y" --weights "$ck" --img 64 \
    --pack-dir "$work/packs" --project "$work/val" --noplots
grep -q "val: 4 images at 64, packed before" "$work/err" && grep -Eq "^ +all +4 " "$work/err"
check $? "the val pack yolo-train made is found and validated (4 images)"
run 1 "yolo-val --data --task test on a yaml without test" -- "$val" --data "$y" --task test \
    --weights "$ck" --img 64 --pack-dir "$work/packs" --project "$work/val"
grep -q "no test split" "$work/err"
check $? "... says there is no test split"
run 2 "yolo-val --data with --records" -- "$val" --data "$y" --records x.ffr --weights "$ck"
echo "1..$n"
[ "$failed" = 0 ]
