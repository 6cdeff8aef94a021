//! The mounted hierarchies a tree lives in, and the controllers it writes values of.
use std::path::PathBuf;

use crate::observe::{CgroupLayout, CgroupVersion};

/// The controllers whose values this tree writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Controller {
    Memory,
    Cpu,
    Pids,
}

impl Controller {
    pub(crate) const ALL: [Controller; 3] = [Controller::Memory, Controller::Cpu, Controller::Pids];

    /// The kernel's name (a v1 mount option, a v2 `cgroup.controllers` word).
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Pids => "pids",
        }
    }
}

/// One mounted hierarchy the tree lives in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount: PathBuf,
    pub version: CgroupVersion,
    /// Controllers this tree writes values of here; empty for the v1 host's unified mirror.
    pub controllers: Vec<Controller>,
}

impl Hierarchy {
    pub(super) fn has(&self, controller: Controller) -> bool {
        self.controllers.contains(&controller)
    }
}

/// The hierarchies of `layout`: on v2 the one tree, with the controllers its
/// `cgroup.controllers` (read by `controllers_of`) offers; on v1 those of
/// [`v1_hierarchies`].
pub(super) fn hierarchies(
    layout: &CgroupLayout,
    mountinfo: &str,
    controllers_of: impl Fn(&std::path::Path) -> String,
) -> Vec<Hierarchy> {
    match layout.version {
        CgroupVersion::V2 => {
            let available = controllers_of(&layout.memory_root);
            let controllers = Controller::ALL
                .into_iter()
                .filter(|c| available.split_whitespace().any(|w| w == c.name()))
                .collect();
            vec![Hierarchy {
                mount: layout.memory_root.clone(),
                version: CgroupVersion::V2,
                controllers,
            }]
        }
        CgroupVersion::V1 => v1_hierarchies(layout, mountinfo),
    }
}

/// The v1 hierarchies carrying memory (from the layout), cpu and pids (from mountinfo),
/// one entry per mount (co-mounted controllers share it), then the unified mirror.
fn v1_hierarchies(layout: &CgroupLayout, mountinfo: &str) -> Vec<Hierarchy> {
    let mut hierarchies = vec![Hierarchy {
        mount: layout.memory_root.clone(),
        version: CgroupVersion::V1,
        controllers: vec![Controller::Memory],
    }];
    for (mount, options) in v1_mounts(mountinfo) {
        for controller in [Controller::Cpu, Controller::Pids] {
            if !options.iter().any(|o| o == controller.name()) {
                continue;
            }
            if hierarchies.iter().any(|h| h.has(controller)) {
                continue;
            }
            match hierarchies.iter_mut().find(|h| h.mount == mount) {
                Some(h) => h.controllers.push(controller),
                None => hierarchies.push(Hierarchy {
                    mount: mount.clone(),
                    version: CgroupVersion::V1,
                    controllers: vec![controller],
                }),
            }
        }
    }
    if let Some(unified) = &layout.unified_root {
        hierarchies.push(Hierarchy {
            mount: unified.clone(),
            version: CgroupVersion::V2,
            controllers: Vec::new(),
        });
    }
    hierarchies
}

/// Mount points and super options of the cgroup v1 mounts in mountinfo text.
fn v1_mounts(mountinfo: &str) -> Vec<(PathBuf, Vec<String>)> {
    crate::observe::cgroup::cgroup_mounts(mountinfo)
        .into_iter()
        .filter(|m| !m.v2)
        .map(|m| (m.mount_point, m.options))
        .collect()
}
