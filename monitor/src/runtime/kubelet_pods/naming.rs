//! Where a kubelet puts a pod's cgroup, in both cgroup drivers' naming, and the way back
//! from a directory name to the pod's UID.
//!
//! The kubelet names a pod's cgroup from the components `<cgroupRoot>`, `kubepods`, the
//! QoS class (none for Guaranteed) and `pod<uid>`:
//! - cgroupfs: the components joined by '/': `kubepods/burstable/pod<uid>`;
//! - systemd: one slice per component, each named by every component up to it joined
//!   by '-', with '-' inside a component written '_':
//!   `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
use crate::config::kubelet::CgroupDriver;
use crate::policy::types::QosClass;

/// The components of the kubelet's pods cgroup.
const KUBEPODS: &str = "kubepods";

/// A kubelet's cgroup tree: its driver and its `cgroupRoot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KubeletTree {
    driver: CgroupDriver,
    /// `cgroupRoot`'s components ("/" has none); under systemd without a trailing
    /// ".slice".
    root: Vec<String>,
}

impl KubeletTree {
    pub(crate) fn new(driver: CgroupDriver, cgroup_root: &str) -> KubeletTree {
        let root = cgroup_root
            .split('/')
            .filter(|c| !c.is_empty())
            .map(|c| match driver {
                CgroupDriver::Systemd => c.strip_suffix(".slice").unwrap_or(c).to_string(),
                CgroupDriver::Cgroupfs => c.to_string(),
            })
            .collect();
        KubeletTree { driver, root }
    }

    /// The pods cgroup (node allocatable), relative to a hierarchy's mount.
    pub(crate) fn pods_cgroup(&self) -> String {
        self.path(&[KUBEPODS])
    }

    /// The cgroup of the pods of class `qos` (Guaranteed pods sit in the pods cgroup).
    pub(crate) fn tier(&self, qos: QosClass) -> String {
        match tier_component(qos) {
            Some(tier) => self.path(&[KUBEPODS, tier]),
            None => self.pods_cgroup(),
        }
    }

    /// The cgroup of pod `uid` of class `qos`.
    pub(crate) fn pod(&self, qos: QosClass, uid: &str) -> String {
        let pod = format!("pod{uid}");
        match tier_component(qos) {
            Some(tier) => self.path(&[KUBEPODS, tier, &pod]),
            None => self.path(&[KUBEPODS, &pod]),
        }
    }

    /// The UID of the pod whose cgroup directory is named `name` (the last component of
    /// [`KubeletTree::pod`]); `None` for anything else (a QoS tier, a container).
    pub(crate) fn uid_of(&self, name: &str) -> Option<String> {
        let uid = match self.driver {
            CgroupDriver::Cgroupfs => name.strip_prefix("pod")?.to_string(),
            CgroupDriver::Systemd => {
                let stem = name.strip_suffix(".slice")?;
                let (_, uid) = stem.rsplit_once("-pod")?;
                uid.replace('_', "-")
            }
        };
        is_uid(&uid).then_some(uid)
    }

    fn path(&self, components: &[&str]) -> String {
        let all: Vec<&str> = self
            .root
            .iter()
            .map(String::as_str)
            .chain(components.iter().copied())
            .collect();
        match self.driver {
            CgroupDriver::Cgroupfs => all.join("/"),
            CgroupDriver::Systemd => {
                let escaped: Vec<String> = all.iter().map(|c| c.replace('-', "_")).collect();
                (1..=escaped.len())
                    .map(|n| format!("{}.slice", escaped[..n].join("-")))
                    .collect::<Vec<_>>()
                    .join("/")
            }
        }
    }
}

/// Whether `uid` is a pod UID as Kubernetes writes them (letters, digits, '-'): the only
/// names a pod's cgroup path is built from, so that none leads out of the tree.
pub(crate) fn is_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 128
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn tier_component(qos: QosClass) -> Option<&'static str> {
    match qos {
        QosClass::Guaranteed => None,
        QosClass::Burstable => Some("burstable"),
        QosClass::BestEffort => Some("besteffort"),
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    const UID: &str = "0b5e3c1a-7d2f-4e8b-9c6d-1a2b3c4d5e6f";

    #[rstest]
    #[case::cgroupfs_burstable(
        CgroupDriver::Cgroupfs,
        "/",
        QosClass::Burstable,
        "kubepods/burstable/pod0b5e3c1a-7d2f-4e8b-9c6d-1a2b3c4d5e6f"
    )]
    #[case::cgroupfs_guaranteed(
        CgroupDriver::Cgroupfs,
        "/",
        QosClass::Guaranteed,
        "kubepods/pod0b5e3c1a-7d2f-4e8b-9c6d-1a2b3c4d5e6f"
    )]
    #[case::cgroupfs_under_a_root(
        CgroupDriver::Cgroupfs,
        "/node-a/",
        QosClass::BestEffort,
        "node-a/kubepods/besteffort/pod0b5e3c1a-7d2f-4e8b-9c6d-1a2b3c4d5e6f"
    )]
    #[case::systemd_burstable(
        CgroupDriver::Systemd,
        "/",
        QosClass::Burstable,
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b5e3c1a_7d2f_4e8b_9c6d_1a2b3c4d5e6f.slice"
    )]
    #[case::systemd_guaranteed(
        CgroupDriver::Systemd,
        "/",
        QosClass::Guaranteed,
        "kubepods.slice/kubepods-pod0b5e3c1a_7d2f_4e8b_9c6d_1a2b3c4d5e6f.slice"
    )]
    #[case::systemd_under_a_slice(
        CgroupDriver::Systemd,
        "/node-a.slice",
        QosClass::BestEffort,
        "node_a.slice/node_a-kubepods.slice/node_a-kubepods-besteffort.slice/node_a-kubepods-besteffort-pod0b5e3c1a_7d2f_4e8b_9c6d_1a2b3c4d5e6f.slice"
    )]
    fn a_pod_cgroup_is_named_as_the_kubelet_names_it(
        #[case] driver: CgroupDriver,
        #[case] root: &str,
        #[case] qos: QosClass,
        #[case] expected: &str,
    ) {
        let tree = KubeletTree::new(driver, root);
        let path = tree.pod(qos, UID);
        assert_eq!(path, expected);
        let name = path.rsplit('/').next().unwrap();
        assert_eq!(tree.uid_of(name).as_deref(), Some(UID), "{name}");
        assert!(path.starts_with(&tree.tier(qos)), "{path}");
        assert!(tree.tier(qos).starts_with(&tree.pods_cgroup()));
    }

    #[rstest]
    #[case::cgroupfs_tier(CgroupDriver::Cgroupfs, "burstable")]
    #[case::cgroupfs_container(CgroupDriver::Cgroupfs, "4f9d1c2b")]
    #[case::cgroupfs_empty(CgroupDriver::Cgroupfs, "pod")]
    #[case::cgroupfs_odd(CgroupDriver::Cgroupfs, "pod../x")]
    #[case::systemd_tier(CgroupDriver::Systemd, "kubepods-burstable.slice")]
    #[case::systemd_container(CgroupDriver::Systemd, "cri-containerd-4f9d.scope")]
    fn other_directories_name_no_pod(#[case] driver: CgroupDriver, #[case] name: &str) {
        assert_eq!(KubeletTree::new(driver, "/").uid_of(name), None);
    }
}
