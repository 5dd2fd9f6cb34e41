#!/bin/bash
# run.sh LABEL DUR "attack command" -> rss before/peak/after, root status latency during
. /tmp/hostile2/env.sh
L=$1; D=$2; shift 2
cd /tmp/hostile2
./rss.sh "$L before"
./mon.sh "$L" $((D+3)) > /dev/null &
MON=$!
s=$(date +%s.%N)
bash -c "$*" > out/$L.out 2>&1 &
A=$!
sleep 4; ./lat.sh "$L during"
sleep $((D/2 - 4 > 0 ? D/2 - 4 : 0)); ./lat.sh "$L during2"
wait $A; echo "attack rc=$? took $(echo "$(date +%s.%N) - $s" | bc) s" >> out/$L.out
wait $MON; sleep 2; ./rss.sh "$L after"
tail -5 out/$L.out
