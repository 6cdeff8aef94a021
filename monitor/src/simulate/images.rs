//! The scenario's image model (placeholder until the image GC policy lands).
use crate::config::kubelet::ImageGcSettings;
use crate::policy::pod::Pod;
use crate::policy::types::Time;

use super::scenario::ImageSpec;

pub struct ImageModel {
    images: Vec<ImageSpec>,
}

impl ImageModel {
    pub fn new(_settings: &ImageGcSettings) -> Self {
        ImageModel { images: Vec::new() }
    }

    pub fn set_images(&mut self, images: Vec<ImageSpec>) {
        self.images = images;
    }

    pub fn detect(&mut self, _pods: &[Pod], _now: Time) {}

    pub fn delete_unused(&mut self, _now: Time) -> (Vec<String>, u64) {
        (Vec::new(), 0)
    }

    pub fn garbage_collect(
        &mut self,
        _capacity: i64,
        _available: i64,
        _now: Time,
    ) -> (Vec<String>, u64) {
        (Vec::new(), 0)
    }
}
