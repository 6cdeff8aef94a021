//! Node-level reclaim in the simulation, for the eviction pass's reclaim step: backed by
//! the scenario's image model when it has one, else by the step's `reclaim:` bytes.
use std::collections::BTreeMap;

use super::images::ImageModel;
use super::scenario::Filesystem;
use crate::policy::eviction::ReclaimResult;
use crate::policy::signal::Signal;
use crate::policy::types::{FsLayout, Resource, Time};

/// What one step's node-level reclaim can free.
pub(crate) struct StepReclaimer<'a> {
    /// The image model (when the scenario lists `images`): reclaim deletes every eligible
    /// unused image, as the kubelet's DeleteUnusedImages does on the eviction path.
    pub(crate) images: Option<&'a mut ImageModel>,
    /// The step's one-shot `reclaim:` bytes per filesystem, used when images are not modelled.
    pub(crate) bytes: &'a BTreeMap<Filesystem, u64>,
    pub(crate) layout: FsLayout,
    pub(crate) now: Time,
    /// Image ids removed by this reclaim, in removal order.
    pub(crate) removed: Vec<String>,
    /// Reclaim already ran at this step: `reclaim:` bytes are freed once, not per call.
    spent: bool,
}

impl<'a> StepReclaimer<'a> {
    pub(crate) fn new(
        images: Option<&'a mut ImageModel>,
        bytes: &'a BTreeMap<Filesystem, u64>,
        layout: FsLayout,
        now: Time,
    ) -> Self {
        StepReclaimer {
            images,
            bytes,
            layout,
            now,
            removed: Vec::new(),
            spent: false,
        }
    }

    /// The `reclaim:` bytes for the filesystem a signal is measured on. Without a dedicated
    /// imagefs there is one filesystem, so any key names it (nodefs first); with a split
    /// one, containerfs is the nodefs.
    fn bytes_for(&self, signal: Signal) -> u64 {
        let containerfs = matches!(
            signal,
            Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
        );
        let keys: &[Filesystem] = match signal {
            _ if !self.layout.has_imagefs() => &[
                Filesystem::NodeFs,
                Filesystem::ImageFs,
                Filesystem::ContainerFs,
            ],
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree
                if self.layout == FsLayout::SplitImageFs =>
            {
                &[Filesystem::NodeFs, Filesystem::ContainerFs]
            }
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => &[Filesystem::NodeFs],
            _ if containerfs && self.layout == FsLayout::SplitImageFs => {
                &[Filesystem::ContainerFs, Filesystem::NodeFs]
            }
            _ if containerfs => &[Filesystem::ContainerFs, Filesystem::ImageFs],
            _ => &[Filesystem::ImageFs, Filesystem::ContainerFs],
        };
        keys.iter()
            .find_map(|k| self.bytes.get(k).copied())
            .unwrap_or(0)
    }
}

impl StepReclaimer<'_> {
    /// Dead containers are not modelled (the Summary API does not list them), so reclaim is
    /// the image deletion step, or the scenario's stated bytes. Inodes freed are unknown
    /// and reported as 0, so inode pressure is never resolved by node-level reclaim here.
    pub(crate) fn reclaim(&mut self, _resource: Resource, signal: Signal) -> ReclaimResult {
        if self.spent {
            return ReclaimResult::default();
        }
        self.spent = true;
        // With a split imagefs only imagefs pressure deletes images; nodefs and containerfs
        // pressure collects dead containers, which are not modelled: the step's bytes.
        let images_help = self.layout != FsLayout::SplitImageFs
            || matches!(signal, Signal::ImageFsAvailable | Signal::ImageFsInodesFree);
        if let Some(images) = self.images.as_deref_mut().filter(|_| images_help) {
            let (ids, freed_bytes) = images.delete_unused(self.now);
            self.removed.extend(ids);
            return ReclaimResult {
                freed_bytes,
                freed_inodes: 0,
                released_later: false,
            };
        }
        ReclaimResult {
            freed_bytes: self.bytes_for(signal),
            freed_inodes: 0,
            released_later: false,
        }
    }
}
