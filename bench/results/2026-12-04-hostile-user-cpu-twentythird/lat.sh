#!/bin/bash
# usage: lat.sh LABEL  -> 5 root status calls, prints p50/max seconds
. /tmp/hostile2/env.sh
ts=()
for i in 1 2 3 4 5; do
  s=$(date +%s.%N); timeout 60 $ROOTCLI status >/dev/null 2>/tmp/hostile2/lat.err; rc=$?; e=$(date +%s.%N)
  ts+=($(echo "$e - $s" | bc)); [ $rc != 0 ] && echo "rc=$rc $(head -c 300 /tmp/hostile2/lat.err)"
done
sorted=$(printf "%s\n" "${ts[@]}" | sort -n)
echo "$1 lat: $(echo $sorted) p50=$(echo "$sorted" | sed -n 3p) max=$(echo "$sorted" | tail -1)" | tee -a /tmp/hostile2/lat.log
