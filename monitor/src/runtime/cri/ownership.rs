//! Which sandboxes, containers and logs of a shared container runtime are this agent's.
//!
//! One containerd may serve several agents (two nodes' worth of pods on one host, a test
//! beside a real agent) and other clients too. [`MANAGED_LABEL`](super::MANAGED_LABEL)
//! says "made by some monitor", not "made by this one", so everything this agent creates
//! also carries [`INSTANCE_LABEL`] with this agent's [`instance_id`], and container GC,
//! sandbox clean-up and log deletion act only on what [`Ownership`] says is ours.
//!
//! Image GC is the exception, on purpose: an image is removed only when no container in
//! the runtime uses it, whoever owns the container ([`images_held`]), so one agent never
//! pulls an image out from under another's containers.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use super::MANAGED_LABEL;
use super::api;

/// The label with the identity of the agent that created a sandbox or container (see
/// [`instance_id`]).
pub const INSTANCE_LABEL: &str = "monitor.instance";

/// The longest label value Kubernetes accepts (containerd itself does not check).
const MAX_VALUE: usize = 63;

/// This agent's identity in a shared container runtime: `<cgroup root>-<hash>`, where the
/// cgroup root is made label-safe (`monitor-test-12.node` for `monitor-test-12/node`) and
/// the hash is 64-bit FNV-1a of the cgroup root and the state directory, as 16 hex digits.
///
/// Why these two: the agent has no node name of its own to go by (the
/// KubeletConfiguration carries none), and they are what already makes an agent itself.
/// The same agent restarted reads the same configuration, so its identity is the same and
/// it goes on collecting what its earlier runs left. Two agents on one host cannot share
/// both: the cgroup root holds an agent's pods (two agents on one root would stop and
/// remove each other's pod cgroups), and the state directory holds its records. A value
/// that differs in either makes a different identity. The caller passes the state
/// directory as the filesystem resolves it (see [`Ownership::for_agent`]), so
/// `/var/lib/monitor`, `/var/lib/monitor/` and a symbolic link to it are one agent.
///
/// The value is a valid Kubernetes label value: at most 63 characters of `[A-Za-z0-9._-]`,
/// starting and ending with a letter or digit.
pub(crate) fn instance_id(cgroup_root: &str, state_dir: &Path) -> String {
    let root = cgroup_root.trim_matches('/');
    let mut hash = Fnv1a::new();
    hash.write(root.as_bytes());
    hash.write(&[0]);
    hash.write(state_dir.as_os_str().as_encoded_bytes());
    let suffix = format!("{:016x}", hash.0);
    let mut prefix: String = root
        .chars()
        .map(|c| match c {
            '/' => '.',
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' => c,
            _ => '_',
        })
        .collect();
    // Room for the dash and the hash.
    prefix.truncate(MAX_VALUE - suffix.len() - 1);
    let prefix = prefix.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if prefix.is_empty() {
        format!("monitor-{suffix}")
    } else {
        format!("{prefix}-{suffix}")
    }
}

/// 64-bit FNV-1a: stable across Rust releases and platforms, unlike `DefaultHasher`,
/// which an identity that must survive an upgrade of the agent cannot use.
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Who made a sandbox or container, by its labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Maker {
    /// This agent: its instance label is ours.
    This,
    /// A monitor older than instance labels: `monitor.managed=true` and no instance.
    Older,
    /// Anyone else: another agent (another instance label), or not a monitor at all.
    Other,
}

/// Who made what carries `labels`.
pub(crate) fn maker(labels: &HashMap<String, String>, instance: &str) -> Maker {
    if labels.get(MANAGED_LABEL).is_none_or(|v| v != "true") {
        return Maker::Other;
    }
    match labels.get(INSTANCE_LABEL) {
        Some(v) if v == instance => Maker::This,
        Some(_) => Maker::Other,
        None => Maker::Older,
    }
}

/// This agent's identity and log directory: what it labels and what it may remove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ownership {
    pub(crate) instance: String,
    /// The agent's pod log directory: the only place its log deletion reaches.
    pub(crate) log_dir: PathBuf,
}

impl Ownership {
    /// The identity of the agent with this cgroup root and state directory (resolved
    /// through the filesystem when it exists, else taken as written), and its log
    /// directory.
    pub(crate) fn for_agent(cgroup_root: &str, state_dir: &Path, log_dir: &Path) -> Ownership {
        let state_dir = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.into());
        Ownership {
            instance: instance_id(cgroup_root, &state_dir),
            log_dir: log_dir.to_path_buf(),
        }
    }

    /// The labels that mark a sandbox or container as this agent's.
    pub(crate) fn labels(&self) -> [(String, String); 2] {
        [
            (MANAGED_LABEL.to_string(), "true".to_string()),
            (INSTANCE_LABEL.to_string(), self.instance.clone()),
        ]
    }

    /// Whether a log file the runtime names may be deleted by this agent: a file below its
    /// own log directory, reached without `..` (the runtime reports what the sandbox was
    /// created with; a path of another agent's, or a crafted one, is left alone).
    pub(crate) fn log_is_ours(&self, log: &Path) -> bool {
        log.components().all(|c| !matches!(c, Component::ParentDir))
            && log.starts_with(&self.log_dir)
            && log != self.log_dir
    }
}

/// What the agent's own records say it ran on the runtime: sandbox id → pod uid.
///
/// This is how containers made by an older agent, which labelled them
/// `monitor.managed=true` only, are told apart. An unlabelled-instance sandbox or
/// container is this agent's only when one of its pod records names the sandbox (and,
/// for a container, the container carries that record's pod uid): the records are in
/// this agent's state directory, so it made them. Any other one may be another agent's
/// (every agent before instance labels wrote the same label) and is never removed; a
/// record that is gone (its pod was deleted) no longer proves anything, so what it named
/// is left to whoever removes it by hand.
pub(crate) type RecordedSandboxes = BTreeMap<String, String>;

/// The judge of what GC may touch: this agent's identity and its recorded sandboxes.
pub(crate) struct Judge<'a> {
    pub(crate) ownership: &'a Ownership,
    pub(crate) recorded: &'a RecordedSandboxes,
}

impl Judge<'_> {
    /// Whether a sandbox is this agent's to clean up.
    pub(crate) fn owns_sandbox(&self, sandbox: &api::PodSandbox) -> bool {
        match maker(&sandbox.labels, &self.ownership.instance) {
            Maker::This => true,
            Maker::Older => {
                let uid = sandbox.metadata.as_ref().map_or("", |m| m.uid.as_str());
                self.recorded.get(&sandbox.id).is_some_and(|r| r == uid)
            }
            Maker::Other => false,
        }
    }

    /// Whether a container (and its log) is this agent's to remove.
    pub(crate) fn owns_container(&self, container: &api::Container) -> bool {
        match maker(&container.labels, &self.ownership.instance) {
            Maker::This => true,
            Maker::Older => {
                let uid = container
                    .labels
                    .get(super::POD_UID_LABEL)
                    .map_or("", String::as_str);
                self.recorded
                    .get(&container.pod_sandbox_id)
                    .is_some_and(|r| r == uid)
            }
            Maker::Other => false,
        }
    }
}

/// The images the runtime's containers hold, running or dead, whoever made them (this
/// agent, another one, anyone): by the resolved reference and by the image asked for.
/// Image GC never removes one of these.
pub(crate) fn images_held(containers: &[api::Container]) -> BTreeSet<String> {
    let mut held: BTreeSet<String> = containers.iter().map(|c| c.image_ref.clone()).collect();
    held.extend(
        containers
            .iter()
            .filter_map(|c| c.image.as_ref().map(|i| i.image.clone())),
    );
    held.remove("");
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ours() -> Ownership {
        Ownership {
            instance: instance_id("monitor", Path::new("/var/lib/monitor")),
            log_dir: PathBuf::from("/var/log/pods"),
        }
    }

    fn container(id: &str, sandbox: &str, uid: &str, pairs: &[(&str, &str)]) -> api::Container {
        let mut labels = labels(pairs);
        labels.insert(super::super::POD_UID_LABEL.into(), uid.into());
        api::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            labels,
            ..api::Container::default()
        }
    }

    fn sandbox(id: &str, uid: &str, pairs: &[(&str, &str)]) -> api::PodSandbox {
        api::PodSandbox {
            id: id.into(),
            metadata: Some(api::PodSandboxMetadata {
                uid: uid.into(),
                ..api::PodSandboxMetadata::default()
            }),
            labels: labels(pairs),
            ..api::PodSandbox::default()
        }
    }

    #[test]
    fn the_identity_is_stable_and_differs_between_agents() {
        let a = instance_id("monitor", Path::new("/var/lib/monitor"));
        // Known value: a change of the hash would orphan every container of a running
        // agent at its upgrade.
        assert_eq!(a, "monitor-84b3f91a2b06adf0");
        assert_eq!(a, instance_id("/monitor/", Path::new("/var/lib/monitor")));
        // Either part differing makes another agent.
        assert_ne!(a, instance_id("monitor2", Path::new("/var/lib/monitor")));
        assert_ne!(a, instance_id("monitor", Path::new("/var/lib/monitor2")));
        // The separator keeps ("a/b", "c") and ("a", "b/c")-like splits apart.
        assert_ne!(
            instance_id("ab", Path::new("c")),
            instance_id("a", Path::new("bc"))
        );
    }

    #[test]
    fn the_identity_is_a_valid_label_value() {
        let long = "x/".repeat(100) + "y";
        for root in [
            "monitor",
            "monitor-test-12/node",
            "/system.slice/monitor.service",
            ".hidden/ünïcode root",
            &long,
            "_",
        ] {
            let id = instance_id(root, Path::new("/var/lib/monitor"));
            assert!(id.len() <= MAX_VALUE, "{id}: {} characters", id.len());
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                "{id}"
            );
            assert!(id.starts_with(|c: char| c.is_ascii_alphanumeric()), "{id}");
            assert!(id.ends_with(|c: char| c.is_ascii_alphanumeric()), "{id}");
        }
        assert!(
            instance_id("monitor-test-12/node", Path::new("/s"))
                .starts_with("monitor-test-12.node-")
        );
        assert!(instance_id("_", Path::new("/s")).starts_with("monitor-"));
    }

    #[test]
    fn a_state_dir_is_one_agent_however_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        let logs = Path::new("/logs");
        let plain = Ownership::for_agent("monitor", &state, logs);
        assert_eq!(
            plain,
            Ownership::for_agent("monitor", &state.join("."), logs)
        );
        assert_eq!(plain, Ownership::for_agent("monitor", &link, logs));
        assert_ne!(
            plain,
            Ownership::for_agent("monitor", &dir.path().join("other"), logs)
        );
    }

    #[test]
    fn the_maker_is_read_from_both_labels() {
        let me = ours();
        let mine = labels(&[("monitor.managed", "true"), (INSTANCE_LABEL, &me.instance)]);
        assert_eq!(maker(&mine, &me.instance), Maker::This);
        let other = labels(&[("monitor.managed", "true"), (INSTANCE_LABEL, "node-b-1")]);
        assert_eq!(maker(&other, &me.instance), Maker::Other);
        let older = labels(&[("monitor.managed", "true")]);
        assert_eq!(maker(&older, &me.instance), Maker::Older);
        // Without the managed label nothing is a monitor's, whatever else it says.
        for pairs in [
            vec![(INSTANCE_LABEL, me.instance.as_str())],
            vec![("monitor.managed", "false"), (INSTANCE_LABEL, &me.instance)],
            vec![],
        ] {
            assert_eq!(maker(&labels(&pairs), &me.instance), Maker::Other);
        }
        // Our own labels say This.
        let made: HashMap<String, String> = me.labels().into_iter().collect();
        assert_eq!(maker(&made, &me.instance), Maker::This);
    }

    #[test]
    fn gc_touches_this_agents_containers_and_recorded_older_ones_only() {
        let me = ours();
        let recorded: RecordedSandboxes = [("sb-old".to_string(), "uid-old".to_string())].into();
        let judge = Judge {
            ownership: &me,
            recorded: &recorded,
        };
        let managed = ("monitor.managed", "true");
        let mine = (INSTANCE_LABEL, me.instance.as_str());
        let theirs = (INSTANCE_LABEL, "monitor-b-0123456789abcdef");
        let cases = [
            (container("c1", "sb-any", "u1", &[managed, mine]), true),
            (container("c2", "sb-any", "u2", &[managed, theirs]), false),
            // Another agent's container in a sandbox our records name: still theirs.
            (
                container("c3", "sb-old", "uid-old", &[managed, theirs]),
                false,
            ),
            // An older agent's: ours only where our record names its sandbox and pod.
            (container("c4", "sb-old", "uid-old", &[managed]), true),
            (container("c5", "sb-else", "uid-old", &[managed]), false),
            (container("c6", "sb-old", "uid-other", &[managed]), false),
            // Not a monitor's at all.
            (container("c7", "sb-old", "uid-old", &[]), false),
            (container("c8", "sb-any", "u8", &[mine]), false),
        ];
        for (c, expected) in cases {
            assert_eq!(judge.owns_container(&c), expected, "{}", c.id);
        }
        let cases = [
            (sandbox("s1", "u1", &[managed, mine]), true),
            (sandbox("s2", "u2", &[managed, theirs]), false),
            (sandbox("sb-old", "uid-old", &[managed]), true),
            (sandbox("sb-old", "uid-other", &[managed]), false),
            (sandbox("sb-else", "uid-old", &[managed]), false),
            (sandbox("sb-old", "uid-old", &[managed, theirs]), false),
            (sandbox("sb-old", "uid-old", &[]), false),
        ];
        for (s, expected) in cases {
            assert_eq!(judge.owns_sandbox(&s), expected, "{}", s.id);
        }
        // Without records no older container is ours.
        let none = RecordedSandboxes::new();
        let judge = Judge {
            ownership: &me,
            recorded: &none,
        };
        assert!(!judge.owns_container(&container("c4", "sb-old", "uid-old", &[managed])));
        assert!(!judge.owns_sandbox(&sandbox("sb-old", "uid-old", &[managed])));
    }

    #[test]
    fn logs_are_deleted_only_below_the_agents_log_directory() {
        let me = ours();
        for (path, expected) in [
            ("/var/log/pods/demo_web_u1/main/0.log", true),
            ("/var/log/pods/demo_web_u1", true),
            ("/var/log/pods", false),
            ("/var/log/pods/../pods-b/demo_web_u2/main/0.log", false),
            ("/var/log/pods-b/demo_web_u2/main/0.log", false),
            ("/var/log/podsx/a.log", false),
            ("/etc/passwd", false),
            ("demo_web_u1/main/0.log", false),
            ("", false),
        ] {
            assert_eq!(me.log_is_ours(Path::new(path)), expected, "{path}");
        }
    }

    #[test]
    fn images_held_by_any_container_are_in_use_whoever_made_it() {
        let me = ours();
        let image = |reference: &str, asked: &str, pairs: &[(&str, &str)]| api::Container {
            image_ref: reference.into(),
            image: Some(api::ImageSpec {
                image: asked.into(),
                ..api::ImageSpec::default()
            }),
            labels: labels(pairs),
            ..api::Container::default()
        };
        let containers = [
            image(
                "sha256:mine",
                "localhost/mine:1",
                &[("monitor.managed", "true"), (INSTANCE_LABEL, &me.instance)],
            ),
            image(
                "sha256:theirs",
                "localhost/theirs:1",
                &[
                    ("monitor.managed", "true"),
                    (INSTANCE_LABEL, "another-agent"),
                ],
            ),
            image("sha256:older", "", &[("monitor.managed", "true")]),
            image("sha256:stranger", "docker.io/library/nginx:1", &[]),
        ];
        let held = images_held(&containers);
        let expected: BTreeSet<String> = [
            "sha256:mine",
            "localhost/mine:1",
            "sha256:theirs",
            "localhost/theirs:1",
            "sha256:older",
            "sha256:stranger",
            "docker.io/library/nginx:1",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(held, expected);
    }
}
