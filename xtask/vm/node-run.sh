#!/bin/sh
# The test run of the systemd node VM (xtask/src/vm/node.rs): started by systemd as
# xtask-vm-test.service once the node has booted, it runs every test binary in
# /xtask-vm/tests one test at a time and powers the node off. It speaks the same
# "@@xtask-vm@@" marker lines as the busybox VM's init (xtask/vm/init.sh), on the serial
# console, and the host judges the run from them alone.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/xtask-vm/tests HOME=/root RUST_BACKTRACE=1
M=@@xtask-vm@@

# Tests that need cgroup v2 fail (instead of skipping) when they see this variable; the
# systemd node test runs only where it sees the second.
export MONITOR_TEST_VM="$(uname -r)" MONITOR_TEST_SYSTEMD_NODE=1
echo "$M KERNEL $(uname -r)"
echo "$M INFO init: $(cat /proc/1/comm), $(systemctl --version | head -n 1)"
echo "$M INFO cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "$M INFO cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
echo "$M INFO memory: $(grep MemTotal /proc/meminfo) cpus: $(nproc) failed units: $(systemctl --failed --no-legend | wc -l)"

if [ -r /etc/xtask-vm/env ]; then
    while IFS= read -r variable; do export "$variable"; done < /etc/xtask-vm/env
fi
set --
if [ -r /etc/xtask-vm/test-args ]; then
    while IFS= read -r arg; do set -- "$@" "$arg"; done < /etc/xtask-vm/test-args
fi

for t in /xtask-vm/tests/*; do
    [ -x "$t" ] || continue
    name=${t##*/}
    since=$(date +%s)
    echo "$M TEST-BEGIN $name"
    mkdir -p "/tmp/$name" && cd "/tmp/$name" && "$t" --test-threads=1 --nocapture "$@"
    status=$?
    cd /
    if [ "$status" -ne 0 ]; then
        echo "$M INFO the journal while $name ran (last 80 lines):"
        journalctl --no-pager -o short-monotonic --since "@$since" | tail -n 80
    fi
    echo "$M TEST-END $name status=$status"
done

echo "$M DONE"
sync
systemctl poweroff --force --force
