#!/bin/busybox sh
# PID 1 of the throw-away VM that `cargo xtask vm` boots (xtask/src/vm/).
#
# Prepares what the privileged integration tests expect of a cgroup v2 node (cgroup2 at
# /sys/fs/cgroup with the memory, pids and cpu controllers enabled for children, bpffs,
# tracefs), runs every test binary in /tests one test at a time, and powers off.
# The host decides pass/fail from the "@@xtask-vm@@" marker lines only (xtask/src/vm/report.rs):
# qemu does not pass the guest's exit code back.
/bin/busybox --install -s /bin
export PATH=/bin:/tests HOME=/tmp RUST_BACKTRACE=1
M=@@xtask-vm@@

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
# Kernel messages would interleave with test output on the one serial console; the
# interesting ones are dumped after a failing test instead.
dmesg -n 1

setup() { "$@" || echo "$M SETUP-FAILED $*"; }
setup mount -t cgroup2 cgroup2 /sys/fs/cgroup
setup mount -t bpf bpf /sys/fs/bpf
setup mount -t tracefs tracefs /sys/kernel/tracing
# Modules the payload carries for this kernel (overlayfs, for containerd's snapshotter).
for module in /lib/modules/"$(uname -r)"/*.ko; do
    [ -e "$module" ] && setup insmod "$module"
done
for c in memory pids cpu; do
    echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control || echo "$M SETUP-FAILED enable +$c in cgroup.subtree_control"
done

# Loopback, as on any node: the image registry the CRI tests serve listens on 127.0.0.1.
setup ip link set lo up

# What a node's /etc has and containerd's CRI copies into every host-network sandbox.
echo "127.0.0.1 localhost" > /etc/hosts
: > /etc/resolv.conf
echo guest > /etc/hostname

# Tests that need cgroup v2 fail (instead of skipping) when they see this variable.
export MONITOR_TEST_VM="$(uname -r)"
echo "$M KERNEL $(uname -r)"
echo "$M INFO cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "$M INFO cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
echo "$M INFO memory: $(grep MemTotal /proc/meminfo) cpus: $(nproc) psi: $(test -r /proc/pressure/memory && echo yes || echo no)"

mark_test_start() { kernel_lines=$(dmesg | wc -l); }
show_failure() {
    echo "$M INFO kernel messages while $1 ran (last 60):"
    dmesg | tail -n +$((kernel_lines + 1)) | tail -n 60
}
. /etc/xtask-vm/run-tests.sh
run_tests /tests

echo "$M DONE"
sync
poweroff -f
