//! Reads the guest's serial console output and decides whether the run passed.
//!
//! The guest's exit code does not come back through qemu (`poweroff -f` always ends qemu
//! with status 0), so `xtask/vm/init.sh` prints marker lines and the host trusts nothing
//! else: a run passes only if the guest reported its kernel, started and finished every
//! test binary it was given with status 0, and reached the end of the script.

/// Prefix of every line the guest init prints for the host. Must match `xtask/vm/init.sh`.
pub const MARKER: &str = "@@xtask-vm@@";

/// What the guest reported so far, fed line by line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuestReport {
    /// `uname -r` inside the guest.
    pub kernel_release: Option<String>,
    /// Why the guest could not prepare the test environment (mounts, controllers).
    pub setup_failures: Vec<String>,
    /// Test binaries in the order they ran, with their exit status once they ended.
    pub tests: Vec<(String, Option<i32>)>,
    /// Lines the tests printed as `SKIP: <reason>`: counted, never silently passed.
    pub skips: Vec<String>,
    /// The guest reached the end of its script.
    pub done: bool,
    /// The kernel panicked: its `Oops:` line (what trapped) and the panic's own.
    pub panic: Option<String>,
    /// The last `Oops:` line, for the panic that may follow it.
    oops: Option<String>,
}

/// The verdict on one boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Failed(Vec<String>),
}

impl GuestReport {
    /// The binaries of `expected` this boot did not see to their end (not started, or
    /// cut off by the kernel's death).
    pub fn unfinished<'a>(&self, expected: &'a [String]) -> Vec<&'a String> {
        expected
            .iter()
            .filter(|name| !self.tests.iter().any(|(n, s)| n == *name && s.is_some()))
            .collect()
    }

    /// This report followed by `later`'s, a boot that ran the binaries this one left
    /// unfinished: the binaries this one finished, then `later`'s; the skips of both
    /// (once each: a binary cut off and run again says its skips again).
    pub fn then(mut self, later: GuestReport) -> GuestReport {
        self.tests.retain(|(_, status)| status.is_some());
        self.tests.extend(later.tests);
        for skip in later.skips {
            if !self.skips.contains(&skip) {
                self.skips.push(skip);
            }
        }
        self.setup_failures.extend(later.setup_failures);
        self.kernel_release = later.kernel_release.or(self.kernel_release);
        self.done = later.done;
        self.panic = later.panic;
        self.oops = later.oops;
        self
    }

    /// Takes one console line (without its line ending).
    pub fn observe(&mut self, line: &str) {
        let line = line.trim_end_matches('\r');
        if let Some(at) = line.find("Oops: ") {
            self.oops = Some(line[at..].trim().to_string());
        }
        if let Some(at) = line.find("Kernel panic - not syncing") {
            let panic = line[at..].trim();
            self.panic.get_or_insert_with(|| match &self.oops {
                Some(oops) => format!("{oops}; {panic}"),
                None => panic.to_string(),
            });
            return;
        }
        if let Some(reason) = skip_reason(line) {
            self.skips.push(reason);
            return;
        }
        let Some(rest) = line.strip_prefix(MARKER) else {
            return;
        };
        let mut words = rest.split_whitespace();
        match words.next() {
            Some("KERNEL") => self.kernel_release = words.next().map(str::to_string),
            Some("SETUP-FAILED") => self
                .setup_failures
                .push(words.collect::<Vec<_>>().join(" ")),
            Some("TEST-BEGIN") => {
                if let Some(name) = words.next() {
                    self.tests.push((name.to_string(), None));
                }
            }
            Some("TEST-END") => {
                let name = words.next();
                let status = words
                    .next()
                    .and_then(|w| w.strip_prefix("status="))
                    .and_then(|s| s.parse().ok());
                if let (Some(name), Some(status)) = (name, status)
                    && let Some(entry) = self
                        .tests
                        .iter_mut()
                        .rev()
                        .find(|(n, s)| n == name && s.is_none())
                {
                    entry.1 = Some(status);
                }
            }
            Some("DONE") => self.done = true,
            _ => {}
        }
    }

    /// Judges the run against the test binaries that were put into the initramfs.
    pub fn verdict(&self, expected_tests: &[String]) -> Verdict {
        let mut problems = Vec::new();
        if self.kernel_release.is_none() {
            problems.push("the guest never reported its kernel (boot failed?)".to_string());
        }
        problems.extend(
            self.setup_failures
                .iter()
                .map(|f| format!("guest setup failed: {f}")),
        );
        for name in expected_tests {
            match self.tests.iter().find(|(n, _)| n == name) {
                None => problems.push(format!("test binary {name} never started")),
                Some((_, None)) => problems.push(format!("test binary {name} never finished")),
                Some((_, Some(0))) => {}
                Some((_, Some(status))) => {
                    problems.push(format!("test binary {name} exited with status {status}"))
                }
            }
        }
        if !self.done {
            problems.push("the guest did not reach the end of its init script".to_string());
        }
        if let Some(panic) = &self.panic {
            problems.push(format!("the kernel panicked: {panic}"));
        }
        if problems.is_empty() {
            Verdict::Passed
        } else {
            Verdict::Failed(problems)
        }
    }
}

/// The reason of a `SKIP: <reason>` line. Under `--test-threads=1 --nocapture` libtest
/// prints `test <name> ... ` before the test runs, so the test's own first line lands
/// behind it; the skip is then reported as `<name>: <reason>`.
fn skip_reason(line: &str) -> Option<String> {
    let line = line.trim_start();
    if let Some(reason) = line.strip_prefix("SKIP:") {
        return Some(reason.trim().to_string());
    }
    let (name, rest) = line.strip_prefix("test ")?.split_once(" ... ")?;
    let reason = rest.strip_prefix("SKIP:")?;
    Some(format!("{}: {}", name.trim(), reason.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn feed(lines: &[&str]) -> GuestReport {
        let mut report = GuestReport::default();
        for line in lines {
            report.observe(line);
        }
        report
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_complete_clean_run_passes_and_names_its_kernel() {
        let report = feed(&[
            "[    0.000000] Linux version 6.12.117",
            "@@xtask-vm@@ KERNEL 6.12.117+deb12-cloud-amd64\r",
            "@@xtask-vm@@ TEST-BEGIN vm_smoke",
            "test memory_controller ... ok",
            "@@xtask-vm@@ TEST-END vm_smoke status=0",
            "@@xtask-vm@@ DONE",
        ]);
        assert_eq!(
            report.kernel_release.as_deref(),
            Some("6.12.117+deb12-cloud-amd64")
        );
        assert_eq!(report.verdict(&names(&["vm_smoke"])), Verdict::Passed);
    }

    #[rstest]
    #[case::failing_binary(
        &["@@xtask-vm@@ KERNEL 6.1.0", "@@xtask-vm@@ TEST-BEGIN a", "@@xtask-vm@@ TEST-END a status=101", "@@xtask-vm@@ DONE"],
        "test binary a exited with status 101"
    )]
    #[case::guest_died_mid_test(
        &["@@xtask-vm@@ KERNEL 6.1.0", "@@xtask-vm@@ TEST-BEGIN a"],
        "test binary a never finished"
    )]
    #[case::binary_missing_from_run(
        &["@@xtask-vm@@ KERNEL 6.1.0", "@@xtask-vm@@ DONE"],
        "test binary a never started"
    )]
    #[case::no_boot(&["Kernel panic - not syncing"], "the guest never reported its kernel (boot failed?)")]
    #[case::setup_failed(
        &["@@xtask-vm@@ KERNEL 6.1.0", "@@xtask-vm@@ SETUP-FAILED mount cgroup2", "@@xtask-vm@@ TEST-BEGIN a",
          "@@xtask-vm@@ TEST-END a status=0", "@@xtask-vm@@ DONE"],
        "guest setup failed: mount cgroup2"
    )]
    #[case::marker_text_inside_a_line_is_not_a_marker(
        &["@@xtask-vm@@ KERNEL 6.1.0", "@@xtask-vm@@ TEST-BEGIN a", "echo @@xtask-vm@@ TEST-END a status=0",
          "@@xtask-vm@@ DONE"],
        "test binary a never finished"
    )]
    fn every_way_of_not_finishing_cleanly_fails(
        #[case] lines: &[&str],
        #[case] expected_problem: &str,
    ) {
        let Verdict::Failed(problems) = feed(lines).verdict(&names(&["a"])) else {
            panic!("run {lines:?} must fail");
        };
        assert!(
            problems.iter().any(|p| p == expected_problem),
            "problems {problems:?} lack {expected_problem:?}"
        );
    }

    #[test]
    fn a_kernel_panic_is_named_with_its_oops_and_a_later_boot_completes_the_run() {
        let first = feed(&[
            "@@xtask-vm@@ KERNEL 6.12.117",
            "@@xtask-vm@@ TEST-BEGIN a",
            "@@xtask-vm@@ TEST-END a status=0",
            "@@xtask-vm@@ TEST-BEGIN b",
            "test one ... SKIP: no containerd",
            "[ 1150.614999] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "[ 1150.625195] Kernel panic - not syncing: Fatal exception in interrupt",
        ]);
        assert_eq!(
            first.panic.as_deref(),
            Some(
                "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI; Kernel panic - not syncing: Fatal exception in interrupt"
            )
        );
        let expected = names(&["a", "b", "c"]);
        assert_eq!(first.unfinished(&expected), [&expected[1], &expected[2]]);
        let Verdict::Failed(problems) = first.verdict(&expected) else {
            panic!("a panicked boot fails");
        };
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("the kernel panicked: Oops: int3"))
        );

        let again = feed(&[
            "@@xtask-vm@@ KERNEL 6.12.117",
            "@@xtask-vm@@ TEST-BEGIN b",
            "test one ... SKIP: no containerd",
            "@@xtask-vm@@ TEST-END b status=0",
            "@@xtask-vm@@ TEST-BEGIN c",
            "@@xtask-vm@@ TEST-END c status=0",
            "@@xtask-vm@@ DONE",
        ]);
        let both = first.then(again);
        assert_eq!(both.verdict(&expected), Verdict::Passed);
        assert_eq!(both.skips, ["one: no containerd"]);
        // A failure before the panic stays a failure.
        let failed_first = feed(&[
            "@@xtask-vm@@ KERNEL 6.12.117",
            "@@xtask-vm@@ TEST-BEGIN a",
            "@@xtask-vm@@ TEST-END a status=101",
            "Kernel panic - not syncing: Fatal exception",
        ]);
        let rest = feed(&[
            "@@xtask-vm@@ KERNEL 6.12.117",
            "@@xtask-vm@@ TEST-BEGIN b",
            "@@xtask-vm@@ TEST-END b status=0",
            "@@xtask-vm@@ DONE",
        ]);
        assert!(matches!(
            failed_first.then(rest).verdict(&names(&["a", "b"])),
            Verdict::Failed(problems) if problems == ["test binary a exited with status 101"]
        ));
    }

    #[rstest]
    #[case::plain("SKIP: no kprobes", Some("no kprobes"))]
    #[case::indented("    SKIP:  cgroup v1 only ", Some("cgroup v1 only"))]
    #[case::behind_the_libtest_name(
        "test memory_events ... SKIP: no cgroup v2",
        Some("memory_events: no cgroup v2")
    )]
    #[case::mid_line_elsewhere("note: SKIP: y", None)]
    #[case::test_passed("test x ... ok", None)]
    fn skips_are_counted(#[case] line: &str, #[case] reason: Option<&str>) {
        let report = feed(&[line]);
        assert_eq!(
            report.skips,
            reason.map(|r| vec![r.to_string()]).unwrap_or_default(),
            "line {line:?}"
        );
    }
}
