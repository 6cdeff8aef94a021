//! Configuration: the kubelet's KubeletConfiguration (in `kubelet`) plus the agent's own
//! settings (event sources, paths) under the `monitor:` key of the same file.
pub mod kubelet;
