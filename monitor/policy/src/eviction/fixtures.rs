//! Test builders for pods with stats, shared by the eviction and ranking tests.
use crate::pod::{Container, EmptyDirVolumeSource, Pod, Volume};
use crate::quantity::{Quantity, parse_quantity};
use crate::stats::{ContainerStats, PodStats, PodWithStats, VolumeStats};

pub const MI: u64 = 1 << 20;
pub const GI: u64 = 1 << 30;

pub fn qty(text: &str) -> Quantity {
    parse_quantity(text).unwrap_or_else(|e| panic!("test quantity {text}: {e}"))
}

/// A pod named `name` in "default" with one container "main" and empty (but present) stats.
pub fn pod(name: &str) -> PodBuilder {
    let mut pod = Pod::default();
    pod.metadata.name = name.to_string();
    pod.metadata.namespace = "default".to_string();
    pod.metadata.uid = format!("uid-{name}");
    pod.spec.containers.push(Container {
        name: "main".to_string(),
        ..Container::default()
    });
    PodBuilder {
        pod,
        stats: PodStats {
            process_count: Some(0),
            ..PodStats::default()
        },
    }
}

pub struct PodBuilder {
    pub pod: Pod,
    pub stats: PodStats,
}

impl PodBuilder {
    pub fn priority(mut self, priority: i32) -> Self {
        self.pod.spec.priority = Some(priority);
        self
    }

    pub fn grace(mut self, seconds: i64) -> Self {
        self.pod.spec.termination_grace_period_seconds = Some(seconds);
        self
    }

    /// A static pod (from a file): critical, never evicted.
    pub fn static_pod(mut self) -> Self {
        self.pod.metadata.annotations.insert(
            "kubernetes.io/config.source".to_string(),
            "file".to_string(),
        );
        self
    }

    pub fn request(mut self, resource: &str, quantity: &str) -> Self {
        self.pod.spec.containers[0]
            .resources
            .requests
            .insert(resource.to_string(), qty(quantity));
        self
    }

    pub fn limit(mut self, resource: &str, quantity: &str) -> Self {
        self.pod.spec.containers[0]
            .resources
            .limits
            .insert(resource.to_string(), qty(quantity));
        self
    }

    /// The pod's working set, which is also that of its one container "main" (as in a
    /// real summary, which reports both).
    pub fn working_set(mut self, bytes: u64) -> Self {
        self.stats.memory_working_set_bytes = Some(bytes);
        self.main_stats().memory_working_set_bytes = Some(bytes);
        self
    }

    /// The stats entry of container "main", created on first use.
    fn main_stats(&mut self) -> &mut ContainerStats {
        let at = match self.stats.containers.iter().position(|c| c.name == "main") {
            Some(at) => at,
            None => {
                self.stats.containers.push(ContainerStats {
                    name: "main".to_string(),
                    ..ContainerStats::default()
                });
                self.stats.containers.len() - 1
            }
        };
        &mut self.stats.containers[at]
    }

    pub fn processes(mut self, count: u64) -> Self {
        self.stats.process_count = Some(count);
        self
    }

    /// Stats of container "main": writable layer and logs, bytes and inodes.
    pub fn container_fs(
        mut self,
        rootfs: u64,
        logs: u64,
        rootfs_inodes: u64,
        logs_inodes: u64,
    ) -> Self {
        let main = self.main_stats();
        main.rootfs_used_bytes = Some(rootfs);
        main.rootfs_inodes_used = Some(rootfs_inodes);
        main.logs_used_bytes = Some(logs);
        main.logs_inodes_used = Some(logs_inodes);
        self
    }

    /// An emptyDir on disk with an optional size limit and its usage.
    pub fn empty_dir(
        mut self,
        name: &str,
        size_limit: Option<&str>,
        used: u64,
        inodes: u64,
    ) -> Self {
        let empty_dir = EmptyDirVolumeSource {
            size_limit: size_limit.map(qty),
            ..Default::default()
        };
        // `..Default::default()` keeps this building if the pod model grows volume sources.
        #[expect(
            clippy::needless_update,
            reason = "keeps building if the pod model grows volume sources"
        )]
        let volume = Volume {
            name: name.to_string(),
            empty_dir: Some(empty_dir),
            ..Default::default()
        };
        self.pod.spec.volumes.push(volume);
        self.stats.volumes.push(VolumeStats {
            name: name.to_string(),
            used_bytes: Some(used),
            inodes_used: Some(inodes),
        });
        self
    }

    pub fn ephemeral_used(mut self, bytes: u64) -> Self {
        self.stats.ephemeral_storage_used_bytes = Some(bytes);
        self
    }

    /// The summary had no entry for this pod.
    pub fn no_stats(mut self) -> Self {
        self.stats = PodStats::default();
        self
    }

    pub fn build(self) -> PodWithStats {
        PodWithStats {
            pod: self.pod.into(),
            stats: self.stats,
        }
    }
}
