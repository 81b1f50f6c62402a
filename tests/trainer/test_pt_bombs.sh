#!/usr/bin/env bash
# .pt deflate bombs (issue 44): storages declaring 2^28 floats stored as deflated zeros
# (make_pt_bomb.py, no torch). yolo-import --table refuses each bomb by name at the inflate
# budget, and yolo-val --weights refuses the file as another model's, without inflating; every
# run stays under 256 MB of peak RSS (one bomb used to cost 1.07 GB, six 6.3 GB).
# Usage: test_pt_bombs.sh YOLO_IMPORT YOLO_VAL YOLO_SYNTH MODELS_DIR
set -u
# ASan's quarantine would hold the freed buffers whose release is the point: keep it small
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16"
imp=$1 val=$2 synth=$3 models=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/../tap.sh"
tap_out=$work/err
export FFYOLO_MODELS_DIR=$models
gen=$(dirname "$0")/make_pt_bomb.py
# peak RSS (KB) of a command, its status kept: Python's getrusage of the child
rss() { python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], "w"))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$work/err" "$@"; }

python3 "$gen" "$work/one.pt" 1 --view whole && python3 "$gen" "$work/six.pt" 6
check $? "a bomb whose tensor views all 2^28 floats, and a file of six under 4-float views"

kb=$(rss "$imp" "$work/one.pt" --table)
rc=$?
[ $rc = 1 ] && [ "$kb" -lt 262144 ] &&
    grep -q "one.pt: bomb0: storage b0: inflating it passes the reader's budget for deflated storages (192 MiB in all)" "$work/err"
check $? "yolo-import --table: the bomb refused by name, exit $rc, peak RSS $kb KB"

kb=$(rss "$imp" "$work/six.pt" --table)
rc=$?
[ $rc = 1 ] && [ "$kb" -lt 262144 ] && [ "$(grep -c "storage b[0-5]: inflating it passes" "$work/err")" = 6 ]
check $? "yolo-import --table: six bombs under small views, each refused, exit $rc, peak RSS $kb KB"

"$synth" "$work/s" --split train2017=2 --split val2017=2 --format yolo --max-side 96 --min-side 64 >/dev/null 2>&1
kb=$(rss "$val" --weights "$work/one.pt" --cfg yolov5n --data "$work/s/synth.yaml" --img 64 \
    --pack-dir "$work/packs" --project "$work/v")
rc=$?
[ $rc != 0 ] && [ "$kb" -lt 262144 ] && grep -q "does not match the model" "$work/err"
check $? "yolo-val --weights: not this model's, refused without inflating, exit $rc, peak RSS $kb KB"
tap_done
