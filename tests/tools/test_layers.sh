#!/usr/bin/env bash
# scripts/check-layers: the tree as it is passes, and copies of it with a forbidden include
# (upward between trainer layers, a priv/ header from another folder, the trainer from a lower
# library, ffr including det, a "../" climb) each fail with a line naming the file and the header;
# copies where a file outside det/ looks up a dataset metadata key itself fail naming the file
# and the key; copies that name an executor outside its choice fail naming the file and the name.
# Usage: test_layers.sh SOURCE_ROOT
set -u
src=$1
check=$src/scripts/check-layers
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }

out=$("$check" "$src" 2>&1) && ok "the tree passes: $out" || { notok "the tree fails"; echo "$out" | sed 's/^/# /'; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a copy of the tree in $tmp/t with LINE appended to FILE (relative)
copy_with() {
  rm -rf "$tmp/t"
  mkdir -p "$tmp/t/tests"
  cp -r "$src/ffr" "$src/det" "$src/io" "$src/kernels" "$src/pack" "$src/trainer" "$src/tools" "$src/scripts" "$tmp/t/"
  printf '%s\n' "$2" >>"$tmp/t/$1"
}
# one case: FILE gets LINE appended; the check must fail with a line that names FILE and says SAYS.
fails_saying() {
  local file=$1 line=$2 says=$3 what=$4
  copy_with "$file" "$line"
  local o
  if o=$("$tmp/t/scripts/check-layers" "$tmp/t" 2>&1); then
    notok "$what: not detected"
  elif echo "$o" | grep -F "$file" | grep -qF "$says"; then
    ok "$what: $o"
  else
    notok "$what: wrong message"
    echo "$o" | sed 's/^/# /'
  fi
}
# an include that breaks a rule: the message names the file and the header
case_fails() { fails_saying "$1" "$2" "includes \"$3\"" "$4"; }
case_fails trainer/core/hyp.c '#include "train.h"' train.h "upward include core -> train"
case_fails trainer/model/net.c '#include "loader.h"' loader.h "upward include model -> data"
case_fails tools/yolo_train.c '#include "priv/model_internal.h"' priv/model_internal.h "a program includes a private header"
case_fails trainer/weights/weights.c '#include "priv/dist_internal.h"' priv/dist_internal.h "another layer's private header"
case_fails ffr/reader.c '#include "model.h"' model.h "a lower library includes the trainer"
case_fails trainer/train/train.c '#include "../core/hyp.h"' ../core/hyp.h "a ../ climb"
case_fails trainer/eval/nms.c '#include "packer.h"' packer.h "the trainer includes pack/"
case_fails ffr/reader.c '#include "det.h"' det.h "ffr includes det, the dataset above it"
# a dataset metadata lookup outside det/: the message names the file and the key
meta_fails() { fails_saying "$1" "$2" "looks up the dataset metadata key \"$3\"" "$4"; }
meta_fails trainer/data/loader.c 'static int is_det(const char *m, size_t n) { return memmem(m, n, "ffr-det-1", 9) != 0; }' \
  ffr-det-1 "the loader finds the encoding with memmem"
meta_fails trainer/eval/nms.c 'static int ceil_round(const char *m, size_t n) { return memmem(m, n, "resize_round: ceil", 18) != 0; }' \
  resize_round "a file that never reads metadata looks up resize_round"
meta_fails tools/yolo_val.c 'static void nm(const char *m, size_t n, char *d) { trn_meta_value(m, n, "names", d, 8); }' \
  names "a program that reads a dataset's metadata looks up names itself"
# an executor chosen outside exec_choose: the message names the file and what it named
exec_fails() { fails_saying "$1" "$2" "names the $3" "$4"; }
exec_fails trainer/model/net.c 'static int f(struct trn_dnn *d, const float *x) { return trn_dnn_run(d, x); }' \
  "oneDNN executor's trn_dnn_run" "net.c runs oneDNN itself"
exec_fails trainer/model/net.c 'static bool is_walk(const struct trn_net *n) { return n->ex[1].x == &trn_net_exec_walk; }' \
  "executor table trn_net_exec_walk" "net.c branches on the executor outside exec_choose"
exec_fails trainer/train/train.c 'static const void *x = &trn_net_exec_onednn;' \
  "executor table trn_net_exec_onednn" "the trainer picks an executor"
# a circle among trainer/train's files: the message names the file and the circle
circle_fails() { fails_saying "$1" "$2" "calls in a circle" "$3"; }
circle_fails trainer/train/run_files.c 'static int dl(struct run *R) { return run_resident_download(R, NULL, 0); }' \
  "the job's file calls the device's, which logs through it"
circle_fails trainer/train/step_host.c 'static char f(void) { return run_step_graph.name[0]; }' \
  "the host step names the graph step, which calls the host step's helpers"
# a comment may name a key: the tree with one added still passes
copy_with trainer/data/loader.c '/* memmem(meta, n, "ffr-det-1", 9) was how this was done */'
o=$("$tmp/t/scripts/check-layers" "$tmp/t" 2>&1) && ok "a comment naming a key passes" || { notok "a comment naming a key fails"; echo "$o" | sed 's/^/# /'; }
echo "1..$n"
exit $((fails > 0))
