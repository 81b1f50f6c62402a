#!/usr/bin/env bash
# yolo-export as a user runs it: on our checkpoint from a one-epoch yolo-train run on a
# yolo-synth dataset (class names into the ONNX metadata), on a plain state dict with --cfg
# (re-exported byte for byte), default output names, and the errors: usage exits 2, missing
# weights and unwritable outputs exit 1 naming the file.
# Usage: test_export_cli.sh YOLO_EXPORT YOLO_TRAIN YOLO_SYNTH YOLO_PACK TINY_NET_YAML
set -u
export_=$1 train=$2 synth=$3 pack=$4 cfg=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
check() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi
}
# expect CODE PATTERN DESC -- CMD...: exit status CODE and PATTERN (grep -E) on stderr, and no
# sanitizer report there (the ASan build exits 1 too).
expect() {
    local code=$1 pat=$2 desc=$3
    shift 4
    "$@" >"$work/out" 2>"$work/err"
    local rc=$?
    [ "$rc" = "$code" ] && grep -Eq -- "$pat" "$work/err" &&
        ! grep -Eq "Sanitizer|runtime error" "$work/err"
    local ok=$?
    check $ok "$desc (exit $rc)"
    [ $ok = 0 ] || sed 's/^/# /' "$work/err"
}

"$synth" "$work/s" --split train2017=8 --seed 1 >/dev/null 2>&1 &&
    "$pack" "$work/s/synth.yaml" --split train -o "$work/t.ffr" -q --size 64 >/dev/null 2>&1 &&
    "$train" --records "$work/t.ffr" --img 64 --batch-size 4 --epochs 1 --cfg "$cfg" \
        --workers 1 --threads 2 --project "$work/runs" --name a >"$work/log" 2>&1
check $? "one epoch of yolo-train on yolo-synth data"
ckpt="$work/runs/a/weights/best.ckpt"

"$export_" --weights "$ckpt" --include onnx,pt --img 64 >"$work/out" 2>&1
check $? "--include onnx,pt on best.ckpt"
[ -s "$work/runs/a/weights/best.onnx" ] && [ -s "$work/runs/a/weights/best_state_dict.pt" ]
check $? "default outputs beside the weights: best.onnx, best_state_dict.pt"
grep -aq "{0: 'rectangle', 1: 'ellipse'" "$work/runs/a/weights/best.onnx"
check $? "the checkpoint's class names in the ONNX metadata"
grep -q "^ONNX: .*opset 17, fp32, input 1x3x64x64" "$work/out"
check $? "reports the ONNX file: $(head -1 "$work/out")"

"$export_" --weights "$work/runs/a/weights/best_state_dict.pt" --cfg "$cfg" --include pt \
    -o "$work/again.pt" >/dev/null 2>&1 &&
    cmp -s "$work/again.pt" "$work/runs/a/weights/best_state_dict.pt"
check $? "a state dict re-exported with --cfg gives the same bytes"
"$export_" --weights "$ckpt" --include onnx --img 50 60 -o "$work/odd.onnx" >/dev/null \
    2>"$work/err"
[ $? = 0 ] && grep -q "updating to 64x64" "$work/err"
check $? "--img 50 60 is rounded up to the stride with a warning"

expect 2 "--include: 'tflite'" "unknown --include exits 2" -- \
    "$export_" --weights "$ckpt" --include tflite
expect 2 "--include onnx\|pt is required" "no --include exits 2" -- "$export_" --weights "$ckpt"
expect 2 "--weights W is required" "no --weights exits 2" -- "$export_" --include onnx
expect 2 "unknown option '--bogus'" "unknown option exits 2" -- \
    "$export_" --weights "$ckpt" --include onnx --bogus 1
expect 2 "--img: 'big'" "bad --img exits 2" -- "$export_" --weights "$ckpt" --include onnx --img big
expect 2 "-o names one file" "-o with two formats exits 2" -- \
    "$export_" --weights "$ckpt" --include onnx,pt -o "$work/x"
expect 2 "--opset: '9'" "opset 9 exits 2" -- "$export_" --weights "$ckpt" --include onnx --opset 9
expect 1 "$work/none.ckpt: No such file" "missing weights exit 1 naming the file" -- \
    "$export_" --weights "$work/none.ckpt" --include onnx
printf 'not a checkpoint' >"$work/junk.pt"
expect 1 "junk.pt" "a file that is no checkpoint exits 1 naming it" -- \
    "$export_" --weights "$work/junk.pt" --include onnx
expect 1 "needs --cfg" "a plain state dict without --cfg exits 1 with a hint" -- \
    "$export_" --weights "$work/again.pt" --include onnx
expect 1 "$work/no/dir/x.onnx: cannot create: No such file" "unwritable output exits 1" -- \
    "$export_" --weights "$ckpt" --include onnx -o "$work/no/dir/x.onnx"
expect 1 "would overwrite the weights" "refuses to overwrite the weights" -- \
    "$export_" --weights "$work/again.pt" --cfg "$cfg" --include pt -o "$work/again.pt"
ls "$work"/no "$work"/*.tmp* >/dev/null 2>&1
[ $? != 0 ]
check $? "no temporary or partial files left"

echo "1..$n"
[ "$failed" = 0 ]
