#!/bin/sh
# The test run of the systemd node VM (xtask/src/vm/node.rs): started by systemd as
# xtask-vm-test.service once the node has booted, it runs every test binary in
# /xtask-vm/tests one test at a time and powers the node off. It speaks the same
# "@@xtask-vm@@" marker lines as the busybox VM's init (xtask/vm/init.sh), through the
# same test loop (xtask/vm/run-tests.sh), on the serial console, and the host judges the
# run from them alone.
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

mark_test_start() { since=$(date +%s); }
show_failure() {
    echo "$M INFO the journal while $1 ran (last 80 lines):"
    journalctl --no-pager -o short-monotonic --since "@$since" | tail -n 80
}
. /etc/xtask-vm/run-tests.sh
run_tests /xtask-vm/tests

echo "$M DONE"
sync
systemctl poweroff --force --force
