#!/usr/bin/env bash
# ffr on s3:// URLs as a user runs it, against moto_server (tests/io/s3_moto.py; it checks every
# SigV4 signature), with the keys and endpoint in the AWS environment variables: `ffr info` and
# `ffr ls` of a sharded dataset by its manifest's URL print what they print for the local copy
# (shards named by URL), `ffr verify` fetches and checks every byte and the detection pass, a
# shard with one flipped byte fails verify naming that shard, and a wrong secret or a missing key
# exit 1 naming the S3 code, bucket and key. yolo-pack -o s3:// (with and without shards) uploads
# what lists as the local pack does; a re-pack replaces it and deletes the old shards; a refused
# one exits 1 and leaves the dataset and no staging directory. Skips without moto.
# Usage: test_ffr_s3.sh FFR YOLO_SYNTH YOLO_PACK S3_MOTO_PY
set -u
ffr=$1 synth=$2 pack=$3 moto=$4
work=$(mktemp -d)
helper=
cleanup() { [ -n "$helper" ] && exec 9>&- ; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
n=0 failed=0
check() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi; }

"$synth" "$work/s" --split train2017=30 --seed 9 >/dev/null 2>&1
mkdir -p "$work/up/good" "$work/up/bad"
"$pack" "$work/s" -o "$work/up/good/d.ffr" --shard-size 64K -q 2>/dev/null
check $? "a sharded detection dataset"
cp "$work/up/good/"* "$work/up/bad/"
# one byte of shard 1's first record flipped (past the 4 KiB header, inside the record)
/usr/bin/python3 -c '
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read()); b[4096 + 100] ^= 0x40; open(p, "wb").write(b)' \
    "$(ls "$work/up/bad/"*-00001.ffr)"

# The helper serves until its stdin closes: fd 9 is that pipe.
exec 9> >(exec /usr/bin/env python3 "$moto" ffr-test "$work/up" ds >"$work/moto.json" 2>"$work/moto.err")
helper=1
for _ in $(seq 1 300); do [ -s "$work/moto.json" ] && break; sleep 0.1; done
if ! grep -q '"port"' "$work/moto.json" 2>/dev/null; then
    echo "# SKIP the s3 part: $(head -c 300 "$work/moto.json" "$work/moto.err" 2>/dev/null | tr '\n' ' ')"
    echo "1..$n"
    echo "# $((n - failed)) passed, $failed failed"
    [ $failed = 0 ]
    exit
fi
eval "$(/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
k, s, p = d["key"], d["secret"], d["port"]
print(f"export AWS_ACCESS_KEY_ID={k} AWS_SECRET_ACCESS_KEY={s} AWS_ENDPOINT_URL=http://127.0.0.1:{p}")' \
    "$work/moto.json")"
export AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_CONFIG_FILE=/nonexistent AWS_REGION=us-east-1
export TMPDIR=$work
url=s3://ffr-test/ds/good/d.ffr

local_info=$("$ffr" info "$work/up/good/d.ffr" 2>&1)
remote_info=$("$ffr" info "$url" 2>&1)
check $? "ffr info s3://: $(echo "$remote_info" | head -c 200)"
strip() { sed -e 's#s3://ffr-test/ds/good/##' -e "s#$work/up/good/##" | grep -v -E '^(file|bytes):'; }
[ "$(echo "$local_info" | strip)" = "$(echo "$remote_info" | strip)" ]
check $? "ffr info prints the same as for the local copy (file, manifest bytes aside)"
echo "$remote_info" | grep -q "s3://ffr-test/ds/good/d-00001.ffr"
check $? "shards are named by their URLs"
[ "$("$ffr" ls "$work/up/good/d.ffr" 2>&1)" = "$("$ffr" ls "$url" 2>&1)" ]
check $? "ffr ls s3:// lists what the local ls lists (each record read over S3)"
out=$("$ffr" verify "$url" 2>&1)
check $? "ffr verify s3://: $(echo "$out" | tail -1)"
[[ $out == *"fetched"* && $out == *"every byte checked"* ]]
check $? "verify says it fetched the files and checked every byte"
[ -z "$(ls -d "$work"/ffr-verify-* 2>/dev/null)" ]
check $? "verify removes its temporary copy"
out=$("$ffr" verify s3://ffr-test/ds/bad/d.ffr 2>&1)
rc=$?
[ $rc = 1 ] && [[ $out == *"s3://ffr-test/ds/bad/d-00001.ffr"* ]]
check $? "a flipped byte in shard 1 fails verify naming it (exit $rc): $(echo "$out" | head -c 300)"
out=$(AWS_SECRET_ACCESS_KEY=wrong "$ffr" info "$url" 2>&1)
rc=$?
[ $rc = 1 ] && [[ $out == *SignatureDoesNotMatch* && $out == *"bucket ffr-test"* ]]
check $? "a wrong secret exits 1 naming SignatureDoesNotMatch and the bucket"
out=$("$ffr" ls s3://ffr-test/ds/none.ffr 2>&1)
rc=$?
[ $rc = 1 ] && [[ $out == *NoSuchKey* && $out == *"key ds/none.ffr"* ]]
check $? "a missing key exits 1 naming NoSuchKey and the key"

# yolo-pack -o s3://: the same records as the local pack, a re-pack replacing it, a failed one
# leaving it as it was
up=s3://ffr-test/packs/d.ffr
out=$("$pack" "$work/s" -o "$up" --shard-size 64K -q 2>&1)
check $? "yolo-pack -o s3:// with shards: $(echo "$out" | grep uploaded | head -c 200)"
[ "$("$ffr" ls "$work/up/good/d.ffr" 2>&1)" = "$("$ffr" ls "$up" 2>&1)" ]
check $? "ffr ls of the upload lists what the local pack's ls lists"
out=$("$ffr" verify "$up" 2>&1)
check $? "ffr verify of the upload: $(echo "$out" | tail -1)"
out=$("$pack" "$work/s" -o "$up" --shard-size 128K -q 2>&1)
rc=$?
[ $rc = 0 ] && [[ $out == *"of the replaced dataset deleted"* ]]
check $? "a re-pack to the same URL replaces it and deletes the old shards: $(echo "$out" | grep uploaded | head -c 250)"
"$ffr" verify "$up" >/dev/null 2>&1 && [ "$("$ffr" ls "$work/up/good/d.ffr" 2>&1)" = "$("$ffr" ls "$up" 2>&1)" ]
check $? "the re-packed upload verifies and lists the same records"
before=$("$ffr" info "$up" 2>&1)
out=$(AWS_SECRET_ACCESS_KEY=wrong "$pack" "$work/s" -o "$up" --shard-size 64K -q 2>&1)
rc=$?
[ $rc = 1 ] && [[ $out == *SignatureDoesNotMatch* ]] && [ "$("$ffr" info "$up" 2>&1)" = "$before" ]
check $? "a pack refused by S3 exits 1, named, and the dataset there is as it was (exit $rc)"
[ -z "$(ls -d "$work"/yolo-pack-* 2>/dev/null)" ]
check $? "no staging directory is left behind"
out=$("$pack" "$work/s" -o "$up" --stage-dir "$work/none" -q 2>&1)
rc=$?
[ $rc = 1 ] && [[ $out == *"staging directory"*"$work/none"* ]]
check $? "a staging directory that cannot be made is named (exit $rc)"
out=$("$pack" "$work/s" -o s3://ffr-test/packs/single.ffr -q 2>&1)
check $? "yolo-pack -o s3:// without shards uploads one file"
"$pack" "$work/s" -o "$work/single.ffr" -q 2>/dev/null
[ "$("$ffr" ls "$work/single.ffr" 2>&1)" = "$("$ffr" ls s3://ffr-test/packs/single.ffr 2>&1)" ]
check $? "and it lists the same records"
echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
