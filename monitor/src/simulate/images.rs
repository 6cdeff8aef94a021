//! The scenario's image model: the node's images (`images:` of the steps), tracked
//! across steps by the image GC policy, deleted by node-level reclaim and periodic GC.
use crate::policy::image_gc::Image;
use crate::policy::image_gc::{
    ImageGcPolicy, ImageGcState, free_all_eligible, garbage_collect, images_in_use,
};
use crate::policy::pod::Pod;
use crate::policy::types::Time;

use super::scenario::ImageSpec;

/// The images on the node and what the collector knows of them.
pub(crate) struct ImageModel {
    policy: ImageGcPolicy,
    images: Vec<Image>,
    state: ImageGcState,
    /// When collection started (the first step with images): images unused before then
    /// look never used, so the maximum-age rule waits that long (kubelet: freeOldImages).
    began_gc: Option<Time>,
}

impl ImageModel {
    pub(crate) fn new(policy: &ImageGcPolicy) -> Self {
        ImageModel {
            policy: *policy,
            images: Vec::new(),
            state: ImageGcState::new(),
            began_gc: None,
        }
    }

    /// Replaces the image list (a step's `images:`).
    pub(crate) fn set_images(&mut self, specs: Vec<ImageSpec>) {
        self.images = specs
            .into_iter()
            .map(|s| Image {
                id: s.id,
                repo_tags: s.repo_tags,
                size_bytes: s.size_bytes.value().max(0),
                pinned: s.pinned,
            })
            .collect();
    }

    /// Records which images exist and which running pods use them at `now`
    /// (kubelet: detectImages): first-detected and last-used times.
    pub(crate) fn detect(&mut self, pods: &[Pod], now: Time) {
        let in_use = images_in_use(pods, &self.images);
        self.state
            .detect(&self.images, &in_use, &Default::default(), now);
        self.began_gc.get_or_insert(now);
    }

    /// Node-level reclaim: deletes every eligible unused image (DeleteUnusedImages).
    /// Returns the deleted ids and the bytes freed.
    pub(crate) fn delete_unused(&mut self, now: Time) -> (Vec<String>, u64) {
        let plan = free_all_eligible(&self.policy, &self.state, now);
        self.remove(&plan.images);
        (plan.images, u64::try_from(plan.bytes_freed).unwrap_or(0))
    }

    /// The periodic collection on the image filesystem (`capacity`, `available` bytes):
    /// images past the maximum age, then by usage above the high threshold.
    pub(crate) fn garbage_collect(
        &mut self,
        capacity: i64,
        available: i64,
        now: Time,
    ) -> (Vec<String>, u64) {
        let began_gc = self.began_gc.unwrap_or(now);
        // A filesystem without capacity cannot be collected (the kubelet logs and skips).
        let Ok(collection) = garbage_collect(
            &self.policy,
            &self.state,
            capacity,
            available,
            now,
            began_gc,
        ) else {
            return (Vec::new(), 0);
        };
        let ids: Vec<String> = collection.images().cloned().collect();
        self.remove(&ids);
        (ids, u64::try_from(collection.bytes_freed()).unwrap_or(0))
    }

    /// Deleted images leave the node (and the state), until a later step lists them again.
    fn remove(&mut self, ids: &[String]) {
        self.state.remove(ids);
        self.images.retain(|image| !ids.contains(&image.id));
    }
}
