//! cgroup v2 `memory.events`: the kernel raises a file-modified notification on it when a
//! counter changes (usage over memory.high, hitting memory.max, OOM, OOM kill). We watch it
//! with inotify `IN_MODIFY` (Documentation/admin-guide/cgroup-v2.rst, "memory.events":
//! "a value change in this file generates a file modified event"). Since 4.5; v2 only.
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use inotify::{Inotify, WatchDescriptor, WatchMask};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Hook, WakeDetail, WakeSender, WakeSource, lock, realtime};

/// Name of the thread that reads the notifications.
pub(crate) const WAITER_THREAD: &str = "monitor-events";

/// Runs the source over the cgroup directories in `cgroups`, re-watching when the set
/// changes (pods come and go). The inotify descriptor is read by a real-time thread
/// ([`realtime::Waiter`]), which tells every change to `hook` first (the hot path, which
/// checks whether a hard threshold's memory.high was crossed); this task only adds and
/// removes watches. Returns the task and the thread's scheduling.
pub(crate) fn spawn(
    mut cgroups: watch::Receiver<Vec<PathBuf>>,
    wakes: WakeSender,
    hook: Hook,
) -> std::io::Result<(JoinHandle<()>, String)> {
    let mut inotify = Inotify::init()?;
    let mut watches = inotify.watches();
    // The thread owns the instance and reads it; epoll watches a duplicate descriptor.
    let polled = inotify.as_fd().try_clone_to_owned()?;
    let watched: Arc<Mutex<HashMap<WatchDescriptor, PathBuf>>> = Arc::default();
    let mut waiter = realtime::Waiter::start(WAITER_THREAD, Some(realtime::PRIORITY), {
        let watched = watched.clone();
        let mut buffer = vec![0u8; 4096];
        move |_| loop {
            let events = match inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(err) => {
                    tracing::error!("inotify on memory.events failed, source stops: {err}");
                    return false;
                }
            };
            let mut told = false;
            for event in events {
                let Some(file) = lock(&watched).get(&event.wd).cloned() else {
                    continue;
                };
                if let (false, Some(hook)) = (told, &hook) {
                    hook.hard_crossing(WakeSource::MemoryEvents);
                    told = true;
                }
                wakes.wake(WakeSource::MemoryEvents, WakeDetail::MemoryEvents { file });
            }
        }
    })?;
    waiter.watch(polled.as_fd(), 0, realtime::Trigger::Level)?;
    let scheduling = waiter.scheduling.clone();
    let task = tokio::spawn(async move {
        let _polled = polled;
        loop {
            // (Re)arm: watch every listed cgroup's memory.events; drop the others.
            let wanted: Vec<PathBuf> = cgroups
                .borrow_and_update()
                .iter()
                .map(|dir| dir.join("memory.events"))
                .collect();
            let known: Vec<PathBuf> = {
                let mut watched = lock(&watched);
                watched.retain(|wd, file| {
                    let keep = wanted.contains(file);
                    if !keep {
                        let _ = watches.remove(wd.clone());
                    }
                    keep
                });
                watched.values().cloned().collect()
            };
            for file in wanted.into_iter().filter(|f| !known.contains(f)) {
                match watches.add(&file, WatchMask::MODIFY) {
                    Ok(wd) => {
                        lock(&watched).insert(wd, file);
                    }
                    Err(err) => tracing::warn!("cannot watch {}: {err}", file.display()),
                }
            }
            tokio::select! {
                changed = cgroups.changed() => if changed.is_err() { return },
                () = waiter.ended() => return,
            }
        }
    });
    Ok((task, scheduling))
}
