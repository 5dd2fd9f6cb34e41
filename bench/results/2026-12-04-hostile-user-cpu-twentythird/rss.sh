#!/bin/bash
# rss.sh LABEL -> VmRSS/VmHWM of gitmd
P=$(cat /tmp/hostile2/gitmd.pid)
echo "$1 rss: $(grep -E 'VmRSS|VmHWM' /proc/$P/status | tr -s ' \t' ' ' | tr '\n' ' ')" | tee -a /tmp/hostile2/rss.log
