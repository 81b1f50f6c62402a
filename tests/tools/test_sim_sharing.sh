#!/usr/bin/env bash
# yolo-sim-sharing (issue 43's simulation): its numbers against what must hold whatever the
# policy's details. One node reads every shard every epoch: the origin sends the dataset once
# and (epochs - 1) / epochs of the reads hit. With peers and room for everything each shard
# leaves the origin once; without, more; more cache never costs more egress; a cache smaller
# than one epoch's shards is refused; sticky shards need no peers to stay near 1x.
# Usage: test_sim_sharing.sh YOLO_SIM_SHARING
set -u
sim=$1
n=0 failed=0
check() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else failed=$((failed + 1)); echo "not ok $n - $2"; fi; }
# field NAME ROW: a column of a --tsv row
field() { awk -F'\t' -v name="$1" -v row="$2" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } NR == row + 1 { print $c[name] }'; }

one=$("$sim" --nodes 1 --nproc-per-node 4 --images 2000 --image-kb 100 --shard-gib 0.005 --epochs 7 --cache-max 0 --tsv)
check $? "one node, 7 epochs"
awk -F'\t' 'NR > 1 { if ($4 != "1.0000" || ($6 - 6 / 7) ^ 2 > 1e-8) bad = 1 } END { exit bad || NR != 3 }' <<<"$one"
check $? "one node: the origin sends the dataset once, 6 of 7 reads hit, with and without peers"

args=(--nodes 8 --nproc-per-node 2 --images 20000 --image-kb 100 --shard-gib 0.01 --epochs 6 --seed 3)
t=$("$sim" "${args[@]}" --cache-max 0,300M,450M,900M --tsv)
check $? "8 nodes, 6 epochs, four cache limits, with and without peers"
echo "$t" | sed 's/^/# /'
off_inf=$(field origin_x 1 <<<"$t") on_inf=$(field origin_x 5 <<<"$t")
awk -v x="$on_inf" 'BEGIN { exit !(x == 1) }'
check $? "peers, no limit: each shard leaves the origin exactly once ($on_inf)"
awk -v x="$off_inf" 'BEGIN { exit !(x > 1.5) }'
check $? "no peers, no limit: each node fetches what it reads ($off_inf x)"
for p in 0 4; do
    prev=1e9 mono=0
    for r in 2 3 4 1; do # 300M, 450M, 900M, no limit
        x=$(field origin_x $((r + p)) <<<"$t") okr=$(field ok $((r + p)) <<<"$t")
        [ "$okr" = 1 ] || mono=1
        awk -v a="$x" -v b="$prev" 'BEGIN { exit !(a <= b + 1e-9) }' || mono=1
        prev=$x
    done
    check $mono "peers $([ $p = 0 ] && echo off || echo on): a larger cache never costs more egress"
done
awk -F'\t' 'NR > 1 && $1 == "on" && $2 == 0 { exit !($5 > 0 && $7 >= $5 && $8 == 0) }' <<<"$t"
check $? "peers, no limit: peer traffic > 0, the busiest peer at least the mean, no 404s"

small=$("$sim" "${args[@]}" --cache-max 100M --tsv)
awk -F'\t' 'NR > 1 { if ($3 != 0) bad = 1 } END { exit bad || NR != 3 }' <<<"$small"
check $? "a cache smaller than one epoch's shards is reported, not simulated"
"$sim" "${args[@]}" --cache-max 100M | grep -q "too small: node"
check $? "the table says which node's epoch does not fit"

st=$("$sim" "${args[@]}" --cache-max 0 --peers off --sticky-shards --tsv)
sx=$(field origin_x 1 <<<"$st")
awk -v s="$sx" -v o="$off_inf" 'BEGIN { exit !(s < o && s < 1.5) }'
check $? "sticky shards without peers: $sx x (shuffled shards: $off_inf x)"

a=$("$sim" "${args[@]}" --cache-max 300M,0)
b=$("$sim" "${args[@]}" --cache-max 300M,0)
[ -n "$a" ] && [ "$a" = "$b" ]
check $? "the same flags print the same table"
"$sim" --cache-max 8X >/dev/null 2>&1
[ $? = 2 ]
check $? "a bad size is a usage error (exit 2)"

echo "1..$n"
echo "# $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
