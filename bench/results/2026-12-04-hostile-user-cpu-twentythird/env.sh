SOCK=/tmp/hostile2/top/var/run/gitmd.sock
ROOTCLI="/work/main/.venv/bin/python -m gitmctl --socket $SOCK"
M="setpriv --reuid=mallory --regid=$(id -g mallory) --clear-groups --inh-caps=-all env HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/work/main:/work/main/.venv/lib/python3.11/site-packages"
MPY="$M /usr/bin/python3"
MCLI="$MPY -m gitmctl --socket $SOCK"
T='setpriv --reuid=trent --regid=1002 --clear-groups --inh-caps=-all env HOME=/tmp PYTHONPATH=/work/main:/work/main/.venv/lib/python3.11/site-packages /usr/bin/python3 -m gitmctl --socket /tmp/hostile2/top/var/run/gitmd.sock'
