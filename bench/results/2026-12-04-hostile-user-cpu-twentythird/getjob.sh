. /tmp/hostile2/env.sh; ts=()
for i in 1 2 3 4 5; do s=$(date +%s.%N); timeout 60 $ROOTCLI job $1 >/dev/null 2>>/tmp/hostile2/gj.err || echo "rc=$?"; ts+=($(echo "$(date +%s.%N) - $s"|bc)); done
sorted=$(printf "%s\n" "${ts[@]}" | sort -n); echo "$2 GetJob: $(echo $sorted) p50=$(echo "$sorted"|sed -n 3p) max=$(echo "$sorted"|tail -1)" | tee -a /tmp/hostile2/lat.log
