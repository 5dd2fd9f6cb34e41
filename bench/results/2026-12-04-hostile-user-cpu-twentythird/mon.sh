#!/bin/bash
# mon.sh LABEL SECONDS -> max VmRSS sampled every 0.25 s
P=$(cat /tmp/hostile2/gitmd.pid); end=$(( $(date +%s) + $2 )); max=0
while [ $(date +%s) -lt $end ]; do
  r=$(awk '/VmRSS/{print $2}' /proc/$P/status 2>/dev/null || echo DEAD); [ "$r" = DEAD ] && { echo "$1 GITMD GONE"; break; }
  [ "$r" -gt "$max" ] && max=$r; sleep 0.25
done
echo "$1 peak VmRSS ${max} kB" | tee -a /tmp/hostile2/rss.log
