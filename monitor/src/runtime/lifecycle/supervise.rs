//! The supervisor: follows the manifest directory (reconciling on every change, and
//! every [`MANIFEST_RESYNC`]), handles container exits and runs due restarts.
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use inotify::{Inotify, WatchMask};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::admit::reconcile;
use super::exit::on_exit;
use super::launch::run_due_restarts;
use crate::events::EventReason;
use crate::runtime::shared::{Exit, Shared};

/// How often the supervisor looks again without a change event: a watch that was lost
/// (the directory deleted and made again) is set up again then, and a pod held back by a
/// cgroup that has since emptied starts.
pub(super) const MANIFEST_RESYNC: Duration = Duration::from_secs(10);

pub(super) type ManifestEvents = inotify::EventStream<Vec<u8>>;

/// What the manifest directory's watch reports.
pub(super) fn manifest_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// Whether an event says the watched directory itself is gone (deleted or moved away).
pub(super) fn directory_went(event: &std::io::Result<inotify::EventOwned>) -> bool {
    use inotify::EventMask;
    event.as_ref().is_ok_and(|e| {
        e.mask
            .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED)
    })
}

/// Watches the manifest directory; `None` (and a Warning) when it cannot be watched.
pub(super) fn watch_manifests(shared: &Shared) -> Option<ManifestEvents> {
    let dir = &shared.config.manifest_dir;
    let watched = Inotify::init().and_then(|i| {
        i.watches().add(dir, manifest_mask())?;
        i.into_event_stream(vec![0u8; 4096])
    });
    match watched {
        Ok(stream) => Some(stream),
        Err(err) => {
            shared.state.event(
                EventReason::ManifestDir { watched: false },
                &dir.display().to_string(),
                format!(
                    "not watched ({err}); read every {}s until it can be",
                    MANIFEST_RESYNC.as_secs()
                ),
            );
            None
        }
    }
}

/// The supervisor task: reconciles on manifest changes (and every [`MANIFEST_RESYNC`]),
/// handles container exits and due restarts.
pub(in crate::runtime) async fn supervise(
    shared: Arc<Shared>,
    mut exits: mpsc::UnboundedReceiver<Exit>,
    mut reconcile_requests: mpsc::UnboundedReceiver<()>,
) {
    let dir = shared.config.manifest_dir.clone();
    if let Err(err) = std::fs::create_dir_all(&dir) {
        shared.state.event(
            EventReason::ManifestDir { watched: false },
            &dir.display().to_string(),
            format!("cannot create: {err}"),
        );
    }
    let mut changes = watch_manifests(&shared);
    // The directory went away and its watch with it (the stream stays, for the new one).
    let mut watch_lost = changes.is_none();
    let mut resync = tokio::time::interval_at(Instant::now() + MANIFEST_RESYNC, MANIFEST_RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    reconcile(&shared);
    loop {
        let next_restart = next_restart(&shared);
        tokio::select! {
            Some(event) = async { match &mut changes { Some(s) => s.next().await, None => std::future::pending().await } } => {
                // Editors write in bursts: let the burst settle, then read the directory once
                // for every event the burst queued (a thousand manifests written at once
                // must cost one read of the directory, not a thousand). Each queued event is
                // taken with a zero timeout, so the stream is polled from this task and
                // wakes it again for the next one.
                let mut gone = directory_went(&event);
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Some(stream) = &mut changes {
                    while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, stream.next()).await {
                        gone |= directory_went(&event);
                    }
                }
                // The directory itself went (deleted or moved away), and its watch with it:
                // the resync sets one up again once the directory is back.
                if gone {
                    watch_lost = true;
                    shared.state.event(
                        EventReason::ManifestDir { watched: false },
                        &dir.display().to_string(),
                        format!("the directory went away; looked for every {}s and watched once it is back", MANIFEST_RESYNC.as_secs()),
                    );
                }
                reconcile(&shared);
            }
            _ = resync.tick() => {
                if watch_lost && dir.is_dir() {
                    let added = match &changes {
                        Some(stream) => stream.watches().add(&dir, manifest_mask()).is_ok(),
                        None => {
                            changes = watch_manifests(&shared);
                            changes.is_some()
                        }
                    };
                    if added {
                        watch_lost = false;
                        shared.state.event(
                            EventReason::ManifestDir { watched: true },
                            &dir.display().to_string(),
                            "watched again".to_string(),
                        );
                        // Manifests written before the watch was back raised no event.
                        reconcile(&shared);
                    }
                }
                // With a live watch every change arrives as an event (a queue overflow
                // too): a full read is needed only while unwatched or while a pod waits on
                // a cgroup to empty, so an idle agent does not parse every manifest.
                if watch_lost || !shared.lock().unmanaged.is_empty() {
                    reconcile(&shared);
                }
            }
            Some(()) = reconcile_requests.recv() => reconcile(&shared),
            Some(exit) = exits.recv() => on_exit(&shared, exit),
            _ = async { match next_restart { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                run_due_restarts(&shared);
            }
        }
    }
}

pub(super) fn next_restart(shared: &Shared) -> Option<Instant> {
    shared
        .lock()
        .pods
        .values()
        .flat_map(|p| p.restart_at.values().copied())
        .min()
}
