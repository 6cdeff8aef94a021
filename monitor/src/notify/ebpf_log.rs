//! The eBPF programs' own log. The programs write records with aya-log-ebpf into its
//! `AYA_LOGS` ring buffer, only on rare paths (a record dropped on a full ring buffer, a
//! failed map insert, a failed read), paced per CPU; aya-log decodes them and they go
//! into `tracing` under the program's target (`monitor_ebpf::<program>`, from
//! [`monitor_common::LOG_TARGETS`]).
//!
//! A task sleeps on the ring buffer's descriptor (epoll through tokio, no timeout): an
//! idle agent is not woken by it. Log statements above tracing's most verbose level are
//! switched off in the kernel at load ([`kernel_level`]), before anything is reserved.
use std::fmt;
use std::panic::AssertUnwindSafe;

use aya::Ebpf;
use aya::maps::Map;
use aya_log::EbpfLogger;
use monitor_common::LOG_TARGETS;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tracing::level_filters::LevelFilter;

/// The ring buffer aya-log-ebpf writes (its name is private to aya-log).
const LOG_MAP: &str = "AYA_LOGS";

/// The target of a record whose program is not one of [`LOG_TARGETS`] (an object built
/// from other sources); the record's own target goes in a `program` field.
const OTHER_TARGET: &str = "monitor_ebpf";

/// The forwarding of the programs' log, for as long as the programs run.
pub struct KernelLog {
    state: State,
}

enum State {
    /// The task that forwards records; aborted on drop.
    Forwarding(tokio::task::JoinHandle<()>),
    /// Not forwarded; the logger is kept because it owns the map's descriptor, which the
    /// programs' instructions name until they are loaded (closing it early would fail
    /// their load, or hand them whatever file reuses the number).
    Held {
        _logger: Box<EbpfLogger<TracingLog>>,
    },
    /// The object has no log ring buffer (no program logs).
    Absent,
}

impl Drop for KernelLog {
    fn drop(&mut self) {
        if let State::Forwarding(task) = &self.state {
            task.abort();
        }
    }
}

impl KernelLog {
    /// Whether records reach tracing.
    pub fn forwarding(&self) -> bool {
        matches!(self.state, State::Forwarding(_))
    }
}

/// Takes the log ring buffer out of `ebpf` (before its programs load) and starts the task
/// that forwards it, on the current tokio runtime. Never fails the source: the second
/// value says why nothing is forwarded, for a warning.
pub(crate) fn start(ebpf: &mut Ebpf) -> (KernelLog, Option<String>) {
    match ebpf.map(LOG_MAP) {
        None => {
            return (
                KernelLog {
                    state: State::Absent,
                },
                Some(format!("no {LOG_MAP} map in the object (no program logs)")),
            );
        }
        // Checked first: aya-log would drop (close) a map of another type.
        Some(Map::RingBuf(_)) => {}
        Some(_) => {
            return (
                KernelLog {
                    state: State::Absent,
                },
                Some(format!("{LOG_MAP} in the object is not a ring buffer")),
            );
        }
    }
    let logger = match EbpfLogger::init_with_logger(ebpf, TracingLog) {
        Ok(logger) => logger,
        Err(err) => {
            return (
                KernelLog {
                    state: State::Absent,
                },
                Some(format!("aya-log: {err}")),
            );
        }
    };
    let held = |logger, why: String| {
        (
            KernelLog {
                state: State::Held {
                    _logger: Box::new(logger),
                },
            },
            Some(why),
        )
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return held(logger, "no tokio runtime to read it on".into());
    };
    let _entered = runtime.enter();
    // SAFETY: the logger owns the ring buffer's descriptor, open and unchanged until the
    // logger (then owned by the AsyncFd) drops.
    let fd = match unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) } {
        Ok(fd) => fd,
        Err(err) => {
            let (logger, err) = err.into_parts();
            return held(logger, format!("registering {LOG_MAP} with tokio: {err}"));
        }
    };
    let task = runtime.spawn(forward(fd));
    (
        KernelLog {
            state: State::Forwarding(task),
        },
        None,
    )
}

async fn forward(mut fd: AsyncFd<EbpfLogger<TracingLog>>) {
    loop {
        let mut guard = match fd.readable_mut().await {
            Ok(guard) => guard,
            Err(err) => {
                tracing::warn!(
                    "eBPF programs' log: waiting on {LOG_MAP} failed, no more records forwarded: {err}"
                );
                return;
            }
        };
        let logger = guard.get_inner_mut();
        // aya-log unwraps the decoding of each record; one it cannot decode (an object
        // built against another aya-log-ebpf) stops the forwarding, not the agent.
        if std::panic::catch_unwind(AssertUnwindSafe(|| logger.flush())).is_err() {
            tracing::warn!(
                "eBPF programs' log: a record in {LOG_MAP} could not be decoded, no more records forwarded"
            );
            return;
        }
        guard.clear_ready();
    }
}

/// The level to hand the programs (aya-log-ebpf's `AYA_LOG_LEVEL`): tracing's most
/// verbose enabled level at load.
pub(crate) fn kernel_level() -> u8 {
    kernel_level_for(LevelFilter::current())
}

fn kernel_level_for(filter: LevelFilter) -> u8 {
    use aya_log::Level;
    let level = match filter.into_level() {
        None => return 0,
        Some(level) if level == tracing::Level::ERROR => Level::Error,
        Some(level) if level == tracing::Level::WARN => Level::Warn,
        Some(level) if level == tracing::Level::INFO => Level::Info,
        Some(level) if level == tracing::Level::DEBUG => Level::Debug,
        Some(_) => Level::Trace,
    };
    level as u8
}

/// The `log::Log` aya-log writes decoded records to: each becomes a tracing event.
pub(crate) struct TracingLog;

impl log::Log for TracingLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        event(record.target(), record.level(), record.args());
    }

    fn flush(&self) {}
}

// `event` matches each of the known targets by index.
const _: () = assert!(LOG_TARGETS.len() == 8, "add the new target to `event`");

/// One record as a tracing event under its program's target. tracing takes its target
/// at compile time, so the known ones are matched one by one.
fn event(target: &str, level: log::Level, message: &fmt::Arguments<'_>) {
    macro_rules! at {
        ($target:expr $(, $field:ident = $value:expr)?) => {
            match level {
                log::Level::Error => tracing::error!(target: $target, $($field = $value,)? "{message}"),
                log::Level::Warn => tracing::warn!(target: $target, $($field = $value,)? "{message}"),
                log::Level::Info => tracing::info!(target: $target, $($field = $value,)? "{message}"),
                log::Level::Debug => tracing::debug!(target: $target, $($field = $value,)? "{message}"),
                log::Level::Trace => tracing::trace!(target: $target, $($field = $value,)? "{message}"),
            }
        };
    }
    match LOG_TARGETS.iter().position(|known| *known == target) {
        Some(0) => at!(LOG_TARGETS[0]),
        Some(1) => at!(LOG_TARGETS[1]),
        Some(2) => at!(LOG_TARGETS[2]),
        Some(3) => at!(LOG_TARGETS[3]),
        Some(4) => at!(LOG_TARGETS[4]),
        Some(5) => at!(LOG_TARGETS[5]),
        Some(6) => at!(LOG_TARGETS[6]),
        Some(7) => at!(LOG_TARGETS[7]),
        _ => at!(OTHER_TARGET, program = target),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Log as _;
    use std::sync::{Arc, Mutex};

    /// Runs `f` with a subscriber (at `filter`) that writes into the returned text.
    fn captured(filter: &str, f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buffer.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn log(target: &str, level: log::Level, message: &str) {
        TracingLog.log(
            &log::Record::builder()
                .target(target)
                .level(level)
                .args(format_args!("{message}"))
                .build(),
        );
    }

    #[test]
    fn a_record_goes_to_tracing_under_its_programs_target_and_level() {
        let out = captured("info", || {
            log(
                "monitor_ebpf::kill_signal",
                log::Level::Warn,
                "ring buffer full (1 so far)",
            );
            log(
                "monitor_ebpf::crossing_lruvec",
                log::Level::Error,
                "read failed",
            );
        });
        assert!(
            out.contains("WARN monitor_ebpf::kill_signal: ring buffer full (1 so far)"),
            "{out}"
        );
        assert!(
            out.contains("ERROR monitor_ebpf::crossing_lruvec: read failed"),
            "{out}"
        );
    }

    #[test]
    fn the_filter_selects_by_program_and_level() {
        let out = captured("warn,monitor_ebpf::oom_victim=debug", || {
            log("monitor_ebpf::oom_victim", log::Level::Debug, "kept");
            log(
                "monitor_ebpf::kswapd_wake",
                log::Level::Debug,
                "filtered out",
            );
            log(
                "monitor_ebpf::kswapd_wake",
                log::Level::Info,
                "filtered out too",
            );
        });
        assert!(
            out.contains("DEBUG monitor_ebpf::oom_victim: kept"),
            "{out}"
        );
        assert!(!out.contains("filtered out"), "{out}");
    }

    #[test]
    fn an_unknown_program_keeps_its_name_in_a_field() {
        let out = captured("info", || {
            log("somewhere::else", log::Level::Info, "hello");
        });
        assert!(
            out.contains("INFO monitor_ebpf: hello program=\"somewhere::else\""),
            "{out}"
        );
    }

    #[test]
    fn the_kernel_level_follows_tracings_most_verbose_level() {
        assert_eq!(kernel_level_for(LevelFilter::OFF), 0);
        assert_eq!(kernel_level_for(LevelFilter::ERROR), 1);
        assert_eq!(kernel_level_for(LevelFilter::WARN), 2);
        assert_eq!(kernel_level_for(LevelFilter::INFO), 3);
        assert_eq!(kernel_level_for(LevelFilter::DEBUG), 4);
        assert_eq!(kernel_level_for(LevelFilter::TRACE), 5);
    }
}
