//! cgroup v2 `memory.events`: the kernel raises a file-modified notification on it when a
//! counter changes (usage over memory.high, hitting memory.max, OOM, OOM kill). We watch it
//! with inotify `IN_MODIFY` (Documentation/admin-guide/cgroup-v2.rst, "memory.events":
//! "a value change in this file generates a file modified event"). Since 4.5; v2 only.
use std::collections::HashMap;
use std::path::PathBuf;

use futures_util::StreamExt;
use inotify::{Inotify, WatchMask};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Hook, WakeDetail, WakeSender, WakeSource};

/// Runs the source over the cgroup directories in `cgroups`, re-watching when the set
/// changes (pods come and go).
/// Every change is told to `hook` first (the hot path), which checks whether a hard
/// threshold's memory.high was crossed.
pub fn spawn(
    mut cgroups: watch::Receiver<Vec<PathBuf>>,
    wakes: WakeSender,
    hook: Hook,
) -> std::io::Result<JoinHandle<()>> {
    let inotify = Inotify::init()?;
    let mut stream = inotify.into_event_stream(vec![0u8; 4096])?;
    Ok(tokio::spawn(async move {
        let mut watched: HashMap<inotify::WatchDescriptor, PathBuf> = HashMap::new();
        loop {
            // (Re)arm: watch every listed cgroup's memory.events; drop the others.
            let wanted: Vec<PathBuf> = cgroups
                .borrow_and_update()
                .iter()
                .map(|dir| dir.join("memory.events"))
                .collect();
            let mut watches = stream.watches();
            watched.retain(|wd, file| {
                let keep = wanted.contains(file);
                if !keep {
                    let _ = watches.remove(wd.clone());
                }
                keep
            });
            for file in wanted {
                if watched.values().any(|f| *f == file) {
                    continue;
                }
                match watches.add(&file, WatchMask::MODIFY) {
                    Ok(wd) => {
                        watched.insert(wd, file);
                    }
                    Err(err) => tracing::warn!("cannot watch {}: {err}", file.display()),
                }
            }
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(event)) => {
                        if let Some(file) = watched.get(&event.wd) {
                            if let Some(hook) = &hook {
                                hook.hard_crossing(WakeSource::MemoryEvents);
                            }
                            wakes.wake(WakeSource::MemoryEvents, WakeDetail::MemoryEvents { file: file.clone() });
                        }
                    }
                    Some(Err(err)) => {
                        tracing::error!("inotify on memory.events failed, source stops: {err}");
                        return;
                    }
                    None => return,
                },
                changed = cgroups.changed() => if changed.is_err() { return },
            }
        }
    }))
}
