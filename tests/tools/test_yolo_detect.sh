#!/usr/bin/env bash
# yolo-detect as a user runs it. Synthetic part (always): a yolo-synth dataset, a checkpoint from
# one epoch of yolo-train on it, then detection on a directory, a list file with a corrupt image,
# the output files (annotated JPEGs, labels/*.txt, predictions.json) checked against the printed
# per-image counts, the json boxes against the txt rows, the filters (--max-det, --classes,
# --nosave), --augment, an ensemble of one checkpoint twice (same detections as once), list entries
# relative to the list's folder, the skipped-count line, run directory numbering and bad
# arguments. Shared part (when ../shared is there): the official yolov5n.pt on coco128 images
# finds the labelled objects (same class, IoU > 0.5 with a label), also with --augment, and an
# ensemble of it with the 3-class checkpoint is refused; one image as JPEG, PNG, BMP and lossless
# WebP gives the same detections, a glob, --save-crop, --imgsz H W, --agnostic-nms,
# --line-thickness, --device, --half, and yolo-export's state dict with --cfg.
# Usage: test_yolo_detect.sh YOLO_DETECT YOLO_SYNTH YOLO_PACK YOLO_TRAIN SHARED_DIR
set -u
detect=$(realpath "$1") synth=$(realpath "$2") pack=$(realpath "$3") train=$(realpath "$4")
shared=$5
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
check() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then echo "ok $n - $2"; else
        failed=$((failed + 1))
        echo "not ok $n - $2"
    fi
}
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }

# --- a tiny trained checkpoint -------------------------------------------------------------
"$synth" "$work/s" --split train2017=6 --classes 3 --seed 7 --format yolo --min-side 64 \
    --max-side 160 >/dev/null 2>&1 &&
    "$pack" "$work/s/synth.yaml" -o "$work/s.ffr" --size 64 -q >/dev/null 2>&1 &&
    "$train" --records "$work/s.ffr" --cfg yolov5n --epochs 1 --img 64 --batch-size 3 \
        --device cpu --noval --project "$work/tr" --name t >"$work/train.log" 2>&1
check $? "yolo-synth + yolo-pack + yolo-train --epochs 1 give a checkpoint"
ckpt=$work/tr/t/weights/last.ckpt
imgs=$work/s/images/train2017

# check_run DIR LOG NC: every printed "image i/N path: HxW counts" line agrees with the run's
# labels/<stem>.txt rows (count per class, 5 + conf fields, normalised) and with predictions.json.
check_run() {
    $py - "$@" <<'EOF'
import json, os, re, sys
d, log, nc = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = [l for l in open(log) if l.startswith("image ")]
if not lines: sys.exit("no image lines")
names = {}
rows_total = 0
for l in lines:
    m = re.match(r"image (\d+)/(\d+) (\S+): (\d+)x(\d+) (.*), ([0-9.]+)ms$", l.strip())
    if not m: sys.exit("bad line: " + l)
    path, counts = m.group(3), m.group(6)
    stem = os.path.splitext(os.path.basename(path))[0]
    want = {} if counts == "(no detections)" else {
        re.sub(r"s$", "", c.split(" ", 1)[1]): int(c.split(" ", 1)[0]) for c in counts.split(", ")}
    if not os.path.exists(os.path.join(d, stem + ".jpg")): sys.exit("no image for " + stem)
    with open(os.path.join(d, stem + ".jpg"), "rb") as f:
        if f.read(3) != b"\xff\xd8\xff": sys.exit("not a JPEG: " + stem)
    t = os.path.join(d, "labels", stem + ".txt")
    rows = [r.split() for r in open(t)] if os.path.exists(t) else []
    if sum(want.values()) != len(rows): sys.exit("%s: %d printed, %d rows" % (stem, sum(want.values()), len(rows)))
    got = {}
    for r in rows:
        if len(r) != 6: sys.exit("row without conf: %r" % r)
        c, v = int(r[0]), [float(x) for x in r[1:]]
        if not 0 <= c < nc or not all(0 <= x <= 1 for x in v) or v[4] <= 0: sys.exit("bad row %r" % r)
        got[c] = got.get(c, 0) + 1
    if sorted(got.values()) != sorted(want.values()): sys.exit("%s: class counts differ" % stem)
    rows_total += len(rows)
j = json.load(open(os.path.join(d, "predictions.json")))
if len(j) != rows_total: sys.exit("json %d entries, txt %d rows" % (len(j), rows_total))
for e in j:
    if not isinstance(e["image_id"], int) or len(e["bbox"]) != 4 or not 0 < e["score"] <= 1:
        sys.exit("bad json entry %r" % e)
    if not 0 <= e["category_id"] < nc or e["bbox"][2] < 0 or e["bbox"][3] < 0:
        sys.exit("bad json entry %r" % e)
EOF
}

# check_json_txt DIR IMAGES_DIR: every predictions.json box (xywh, original pixels) is a
# labels/<stem>.txt row (normalised centre xywh) of the same image, class and score, within
# rounding (json: 3 decimals; txt: %g of float32). Image sizes from the JPEG SOF header.
check_json_txt() {
    $py - "$@" <<'EOF'
import json, os, struct, sys
d, imgs = sys.argv[1], sys.argv[2]
def jpeg_size(p):
    b = open(p, "rb").read()
    i = 2
    while i + 9 < len(b):
        if b[i] != 0xFF: i += 1; continue
        m = b[i + 1]
        if m in (0xC0, 0xC1, 0xC2):
            h, w = struct.unpack(">HH", b[i + 5:i + 9])
            return w, h
        i += 2 + struct.unpack(">H", b[i + 2:i + 4])[0]
    sys.exit("no SOF in " + p)
rows = {}
for f in os.listdir(os.path.join(d, "labels")):
    stem = f[:-4]
    w, h = jpeg_size(os.path.join(imgs, stem + ".jpg"))
    for r in open(os.path.join(d, "labels", f)):
        c, x, y, bw, bh, conf = [float(v) for v in r.split()]
        rows.setdefault(int(stem), []).append(
            (int(c), (x - bw / 2) * w, (y - bh / 2) * h, bw * w, bh * h, conf))
j = json.load(open(os.path.join(d, "predictions.json")))
for e in j:
    cand = rows.get(e["image_id"], [])
    if not any(c == e["category_id"] and abs(conf - e["score"]) < 1e-4 and
               all(abs(u - v) < 0.02 + 1e-4 * abs(v) for u, v in zip(e["bbox"], (x, y, bw, bh)))
               for c, x, y, bw, bh, conf in cand):
        sys.exit("json box %r has no txt row (image %d has %d)" % (e, e["image_id"], len(cand)))
n = sum(len(v) for v in rows.values())
if len(j) != n or n == 0: sys.exit("json %d boxes, txt %d rows" % (len(j), n))
EOF
}

# --- a directory -----------------------------------------------------------------------------
"$detect" --weights "$ckpt" --source "$imgs" --img 64 --conf-thres 0.0001 --max-det 6 \
    --save-txt --save-conf --save-json --project "$work/d" --name e >"$work/e.log" 2>"$work/e.err"
check $? "directory of 6 images exits 0 ($(head -c 200 "$work/e.err"))"
[ "$(grep -c '^image [1-6]/6 ' "$work/e.log")" = 6 ] && grep -q '^Results saved to .*/d/e$' "$work/e.log"
check $? "one 'image i/6' line per image and 'Results saved to'"
grep -Eq 'rectangles?|ellipses?|triangles?' "$work/e.log"
check $? "class names come from the checkpoint"
err=$(check_run "$work/d/e" "$work/e.log" 3 2>&1)
check $? "annotated JPEGs, txt rows and json agree with the printed counts $err"
ok=0
for f in "$work"/d/e/labels/*.txt; do [ "$(wc -l <"$f")" -le 6 ] || ok=1; done
check $ok "--max-det 6 keeps at most 6 rows per image"
err=$(check_json_txt "$work/d/e" "$imgs" 2>&1)
check $? "every json box (original pixels) is a txt row of its image, class and score $err"

# --- --augment and ensembles -------------------------------------------------------------------
"$detect" --weights "$ckpt" --source "$imgs" --img 64 --conf-thres 0.0001 --max-det 6 --augment \
    --save-txt --save-conf --save-json --project "$work/d" --name aug >"$work/a.log" 2>"$work/a.err"
check $? "--augment exits 0 ($(head -c 200 "$work/a.err"))"
err=$(check_run "$work/d/aug" "$work/a.log" 3 2>&1) && err=$(check_json_txt "$work/d/aug" "$imgs" 2>&1)
check $? "--augment: annotated images, txt rows and json agree $err"
! diff -r "$work/d/e/labels" "$work/d/aug/labels" >/dev/null
check $? "--augment changes the detections"
"$detect" --weights "$ckpt" --source "$imgs" --img 64 --conf-thres 0.0001 --max-det 6 \
    --save-txt --save-conf --nosave --project "$work/d" --name once >/dev/null 2>&1 &&
    "$detect" --weights "$ckpt" "$ckpt" --source "$imgs" --img 64 --conf-thres 0.0001 \
        --max-det 6 --save-txt --save-conf --nosave --project "$work/d" --name twice \
        >"$work/t.log" 2>"$work/t.err"
check $? "--weights CKPT CKPT (an ensemble) exits 0 ($(head -c 200 "$work/t.err"))"
grep -q "Ensemble created with $ckpt $ckpt" "$work/t.err" &&
    [ "$(ls "$work"/d/once/labels | wc -l)" -gt 0 ] &&
    diff -r "$work/d/once/labels" "$work/d/twice/labels" >/dev/null
check $? "the same checkpoint twice gives exactly the detections of once (after NMS)"
"$detect" --weights "$ckpt" "$ckpt" --source "$imgs" --img 64 --conf-thres 0.0001 --augment \
    --nosave --save-txt --project "$work/d" --name twiceaug >/dev/null 2>&1 &&
    [ "$(ls "$work"/d/twiceaug/labels | wc -l)" -gt 0 ]
check $? "an ensemble with --augment runs"

# --- filters, numbering, --nosave --------------------------------------------------------------
"$detect" --weights "$ckpt" --source "$imgs" --img 64 --conf-thres 0.0001 --classes 1 \
    --save-txt --project "$work/d" --name e >"$work/c.log" 2>&1
check $? "--classes 1 exits 0"
[ -d "$work/d/e2/labels" ] && ! cut -d' ' -f1 "$work"/d/e2/labels/*.txt | grep -qv '^1$' &&
    [ "$(cat "$work"/d/e2/labels/*.txt | wc -l)" -gt 0 ]
check $? "a taken --name gives e2, and --classes 1 writes only class 1"
"$detect" --weights "$ckpt" --source "$imgs/000000000001.jpg" --img 64 --nosave --hide-labels \
    --project "$work/d" --name e --exist-ok >/dev/null 2>&1
check $? "--exist-ok --nosave on one file exits 0"
[ ! -d "$work/d/e3" ] && [ "$(ls "$work"/d/e/*.jpg | wc -l)" = 6 ]
check $? "--exist-ok reuses e; --nosave adds no image"
"$detect" --cfg yolov5n --source "$imgs/000000000002.jpg" --img 64 --conf-thres 0.0001 \
    --project "$work/d" --name init >"$work/i.log" 2>&1 && [ -f "$work/d/init/000000000002.jpg" ]
check $? "--cfg without --weights: the initial model runs end to end"

# --- a list file with a corrupt image ----------------------------------------------------------
head -c 300 "$imgs/000000000003.jpg" >"$work/cut.jpg"
printf 'not a jpeg at all\n' >"$work/text.jpg"
printf '%s\n%s\n\n%s\n%s\n' "$imgs/000000000001.jpg" "$work/text.jpg" "$work/cut.jpg" \
    "$imgs/000000000004.jpg" >"$work/list.txt"
"$detect" --weights "$ckpt" --source "$work/list.txt" --img 64 --conf-thres 0.0001 \
    --project "$work/d" --name list >"$work/l.log" 2>"$work/l.err"
rc=$?
[ $rc = 1 ]
check $? "a corrupt image in a list file: exit 1 (got $rc)"
grep -q 'text.jpg' "$work/l.err" && grep -q 'cut.jpg' "$work/l.err"
check $? "both bad files are named on stderr: $(tr '\n' '|' <"$work/l.err" | head -c 300)"
[ -f "$work/d/list/000000000001.jpg" ] && [ -f "$work/d/list/000000000004.jpg" ] &&
    grep -q '^image 4/4 ' "$work/l.log"
check $? "the good images before and after it are still processed"
grep -q '2 of 4 images detected; skipped: 2 unreadable images, 0 missing' "$work/l.err"
check $? "the skipped count is printed: $(grep -o 'images detected.*' "$work/l.err" | head -c 200)"
# a JPEG cut inside its scan data: decoded as cv2.imread does (the rest filled), and said
sz=$(stat -c %s "$imgs/000000000005.jpg")
head -c $((sz / 2)) "$imgs/000000000005.jpg" >"$work/half.jpg"
"$detect" --weights "$ckpt" --source "$work/half.jpg" --img 64 --project "$work/d" --name half \
    >"$work/h.log" 2>"$work/h.err"
rc=$?
[ $rc = 0 ] && [ -f "$work/d/half/half.jpg" ] &&
    grep -q "warning: image 1/1 .*half.jpg: corrupt JPEG data (.*): decoded with the missing part filled, as cv2.imread does (yolo-pack skips such an image" "$work/h.err"
check $? "a JPEG cut in its scan data: detected as cv2.imread reads it, with a warning (rc $rc: $(head -c 300 "$work/h.err"))"

# list entries relative to the list's folder; a missing one is named with its line and skipped
mkdir -p "$work/lists/sub" "$work/elsewhere"
cp "$imgs/000000000002.jpg" "$work/lists/sub/two.jpg"
printf 'sub/two.jpg\n../s/images/train2017/000000000005.jpg\nsub/nothing.jpg\n%s\n' \
    "$imgs/000000000006.jpg" >"$work/lists/rel.txt"
(cd "$work/elsewhere" && "$detect" --weights "$ckpt" --source ../lists/rel.txt --img 64 \
    --project "$work/d" --name rel >"$work/r.log" 2>"$work/r.err")
rc=$?
[ $rc = 1 ] && grep -q '^image 3/3 ' "$work/r.log" && [ -f "$work/d/rel/two.jpg" ] &&
    [ -f "$work/d/rel/000000000005.jpg" ] && [ -f "$work/d/rel/000000000006.jpg" ]
check $? "list entries relative to the list's folder are found from another directory (rc $rc)"
grep -q 'rel.txt:3: sub/nothing.jpg' "$work/r.err" &&
    grep -q '3 of 3 images detected; skipped: 0 unreadable images, 1 missing' "$work/r.err"
check $? "a missing list entry is named (list:line) and counted: $(tr '\n' '|' <"$work/r.err" | head -c 300)"

# --- bad arguments and files -------------------------------------------------------------------
expect() {
    local want=$1
    shift
    (cd "$work" && "$detect" "$@" >/dev/null 2>&1)
    local rc=$?
    [ $rc = "$want" ]
    check $? "exit $want: $* (got $rc)"
}
expect 2 --weights "$ckpt"
expect 2 --source "$imgs"
expect 2 --weights "$ckpt" --source "$imgs" --conf-thres 1.5
expect 2 --weights "$ckpt" --source "$imgs" --iou-thres x
expect 2 --weights "$ckpt" --source "$imgs" --max-det 0
expect 2 --weights "$ckpt" --source "$imgs" --classes
expect 2 --weights "$ckpt" --source "$imgs" --classes cat
expect 2 --weights "$ckpt" --source "$imgs" --frobnicate
expect 2 --weights "$ckpt" --source
expect 2 --weights --source "$imgs"
expect 1 --weights "$ckpt" "$work/missing.pt" --source "$imgs"
expect 1 --weights "$work/missing.pt" --source "$imgs"
expect 1 --weights "$work/list.txt" --source "$imgs"
expect 1 --weights "$ckpt" --source "$work/missing-dir"
expect 1 --weights "$ckpt" --source "$work/tr"

# --- the official yolov5n.pt on coco128 ----------------------------------------------------------
pt=$shared/weights/yolov5n.pt
coco=$shared/datasets/coco128
if [ -f "$pt" ] && [ -d "$coco/images/train2017" ]; then
    list=$work/coco.txt
    for s in 000000000438 000000000597 000000000634 000000000532; do
        echo "$coco/images/train2017/$s.jpg"
    done >"$list"
    "$detect" --weights "$pt" --source "$list" --save-txt --save-conf --save-json \
        --project "$work/d" --name coco >"$work/coco.log" 2>"$work/coco.err"
    check $? "yolov5n.pt on 4 coco128 images exits 0 ($(head -c 200 "$work/coco.err"))"
    err=$(check_run "$work/d/coco" "$work/coco.log" 80 2>&1)
    # check_run's json test wants category ids < nc: here they are COCO's 91 ids, tested below
    case $err in *"bad json entry"* | "") err= ;; esac
    [ -z "$err" ]
    check $? "coco128: txt rows agree with the printed counts $err"
    grep -Eq '^image 1/4 .*: 480x640 [0-9]+ donuts, ' "$work/coco.log"
    check $? "COCO names for the .pt model: $(grep -o 'image 1/4.*' "$work/coco.log" | head -c 200)"
    $py - "$work/d/coco" "$coco/labels/train2017" <<'EOF'
import json, os, sys
d, L = sys.argv[1], sys.argv[2]
# image -> classes that must be found (their labels are large and clear)
need = {"000000000438": [54], "000000000597": [20], "000000000634": [0, 36], "000000000532": [0, 5]}
def xyxy(r): return (r[0] - r[2] / 2, r[1] - r[3] / 2, r[0] + r[2] / 2, r[1] + r[3] / 2)
def iou(a, b):
    a, b = xyxy(a), xyxy(b)
    iw = max(0, min(a[2], b[2]) - max(a[0], b[0])); ih = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    i = iw * ih
    return i / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - i)
bad = []
for s, classes in need.items():
    dets = [[float(x) for x in l.split()] for l in open(os.path.join(d, "labels", s + ".txt"))]
    labs = [[float(x) for x in l.split()] for l in open(os.path.join(L, s + ".txt"))]
    strong = [r for r in dets if r[5] > 0.5]
    match = [r for r in strong if any(int(l[0]) == int(r[0]) and iou(r[1:5], l[1:5]) > 0.5 for l in labs)]
    for c in classes:
        if not any(int(r[0]) == c for r in match): bad.append("%s: class %d not found" % (s, c))
    if len(match) < 0.8 * len(strong): bad.append("%s: %d of %d confident boxes match" % (s, len(match), len(strong)))
ids = {int(s) for s in need}
j = json.load(open(os.path.join(d, "predictions.json")))
coco91 = {1,2,3,4,5,6,7,8,9,10,11,13,14,15,16,17,18,19,20,21,22,23,24,25,27,28,31,32,33,34,35,36,37,38,39,40,41,42,43,44,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,67,70,72,73,74,75,76,77,78,79,80,81,82,84,85,86,87,88,89,90}
if {e["image_id"] for e in j} != ids: bad.append("json image ids %r" % sorted({e["image_id"] for e in j}))
if any(e["category_id"] not in coco91 for e in j): bad.append("json category ids not COCO's")
if not any(e["image_id"] == 438 and e["category_id"] == 60 for e in j): bad.append("no donut (60) in 438's json")
print("".join("# " + b + "\n" for b in bad), end=""); sys.exit(1 if bad else 0)
EOF
    check $? "known objects found: donuts, elephant, person + skateboard, person + bus (IoU > 0.5)"
    "$detect" --weights "$pt" --source "$list" --augment --save-txt --save-conf \
        --project "$work/d" --name cocoaug >"$work/ca.log" 2>"$work/ca.err" &&
        grep -Eq '^image 1/4 .*: 480x640 [0-9]+ donuts, ' "$work/ca.log"
    check $? "yolov5n.pt --augment finds the donuts: $(grep -o 'image 1/4.*' "$work/ca.log" | head -c 200)"
    "$detect" --weights "$pt" "$ckpt" --source "$list" --project "$work/d" --name mix \
        >/dev/null 2>"$work/mix.err"
    rc=$?
    [ $rc = 1 ] && grep -q 'different class counts' "$work/mix.err"
    check $? "an ensemble of 80- and 3-class models is refused (rc $rc): $(tr '\n' '|' <"$work/mix.err" | head -c 200)"

    # --- formats, globs and the other flags, on one coco128 image ---
    f=$work/fmt
    mkdir -p "$f"
    cp "$coco/images/train2017/000000000009.jpg" "$f/a.jpg"
    $py -c "import cv2, sys; im = cv2.imread(sys.argv[1]); cv2.imwrite(sys.argv[2] + '/b.png', im); cv2.imwrite(sys.argv[2] + '/c.bmp', im); cv2.imwrite(sys.argv[2] + '/d.webp', im, [cv2.IMWRITE_WEBP_QUALITY, 101])" "$f/a.jpg" "$f"
    "$detect" --weights "$pt" --source "$f" --project "$work/d" --name fmt --save-txt \
        --save-conf --save-crop >"$work/fmt.log" 2>&1
    rc=$?
    same=0
    for k in b c d; do cmp -s "$work/d/fmt/labels/a.txt" "$work/d/fmt/labels/$k.txt" && same=$((same + 1)); done
    [ $rc = 0 ] && [ "$(grep -c '^image ' "$work/fmt.log")" = 4 ] && [ $same = 3 ] &&
        [ -s "$work/d/fmt/b.png" ] && head -c 8 "$work/d/fmt/b.png" | grep -q PNG
    check $? "a folder of JPEG, PNG, BMP and WebP (lossless): 4 images, the same detections from the decoded pixels ($same of 3), a PNG saved as PNG"
    ncrops=$(find "$work/d/fmt/crops" -name '*.jpg' | wc -l)
    [ "$ncrops" = "$(cat "$work"/d/fmt/labels/*.txt | wc -l)" ] && [ -n "$(find "$work/d/fmt/crops" -name 'a2.jpg' -o -name 'a.jpg')" ]
    check $? "--save-crop: one crop per detection ($ncrops) under crops/<class>/<stem>[N].jpg"
    "$detect" --weights "$pt" --source "$f/*.png" --project "$work/d" --name glob --nosave >"$work/g.log" 2>&1 &&
        [ "$(grep -c '^image ' "$work/g.log")" = 1 ] && grep -q '^image 1/1 .*b.png' "$work/g.log"
    check $? "a glob ('dir/*.png'): the one PNG"
    "$detect" --weights "$pt" --source "$f/a.jpg" --project "$work/d" --name hw --nosave \
        --imgsz 320 480 --agnostic-nms --line-thickness 1 --device cpu >"$work/hw.log" 2>&1 &&
        grep -q '^image 1/1 .*: 320x448 ' "$work/hw.log" && grep -q 'at shape (1, 3, 320, 480)' "$work/hw.log"
    check $? "--imgsz 320 480, --agnostic-nms, --line-thickness, --device cpu: $(grep -o 'image 1/1.*' "$work/hw.log" | head -c 120)"
    "$detect" --weights "$pt" --source "$f/a.jpg" --project "$work/d" --name half --nosave --half \
        >"$work/half.log" 2>&1 && grep -q '^image 1/1 .*bowl' "$work/half.log"
    check $? "--half: fp16 convolutions find the bowl: $(grep -o 'image 1/1.*' "$work/half.log" | head -c 120)"
    cp "$pt" "$work/n.pt"
    "$(dirname "$detect")/yolo-export" --weights "$work/n.pt" --include pt >/dev/null 2>&1 &&
        "$detect" --weights "$work/n_state_dict.pt" --cfg yolov5n --source "$f/a.jpg" \
            --project "$work/d" --name sd --save-txt --save-conf --nosave >/dev/null 2>&1 &&
        cmp -s "$work/d/sd/labels/a.txt" "$work/d/fmt/labels/a.txt"
    check $? "a state dict from yolo-export --include pt, with --cfg: the .pt's detections"
else
    skip "no $pt or $coco (../shared)"
fi

echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
