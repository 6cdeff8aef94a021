# The test loop of both VM runners, sourced from /etc/xtask-vm/run-tests.sh by the busybox
# VM's init (init.sh) and by the systemd node's runner (node-run.sh). A runner sets M to
# the marker prefix and defines two hooks before calling `run_tests DIR`:
#   mark_test_start       before each test binary starts
#   show_failure NAME     after NAME failed: what the node logged since mark_test_start
# POSIX sh: busybox's on the first, dash on the second.

# Environment the host passed with --env, one NAME=VALUE per line (checked on the host).
if [ -r /etc/xtask-vm/env ]; then
    while IFS= read -r variable; do export "$variable"; done < /etc/xtask-vm/env
fi

# Runs every executable in DIR, one binary after the other, each with the host's test
# filter, between TEST-BEGIN and TEST-END marker lines.
run_tests() {
    dir=$1
    # The test filter passed after `--` on the host, one argument per line.
    set --
    if [ -r /etc/xtask-vm/test-args ]; then
        while IFS= read -r arg; do set -- "$@" "$arg"; done < /etc/xtask-vm/test-args
    fi
    for t in "$dir"/*; do
        [ -x "$t" ] || continue
        name=${t##*/}
        mark_test_start
        echo "$M TEST-BEGIN $name"
        # Each binary starts in a fresh scratch directory; --test-threads=1 because the
        # tests share one kernel (cgroups, eBPF programs, memory); --nocapture so output
        # streams live and the host can count "SKIP:" lines.
        mkdir -p "/tmp/$name" && cd "/tmp/$name" && "$t" --test-threads=1 --nocapture "$@"
        status=$?
        cd /
        [ "$status" -ne 0 ] && show_failure "$name"
        echo "$M TEST-END $name status=$status"
    done
}
