//! Where the kernel keeps what the detector reads: the offsets of `struct mem_cgroup`,
//! `struct page_counter`, `struct cgroup` and `struct kernfs_node` fields, from the
//! running kernel's BTF, and a cgroup directory's depth as the kernel counts it.
use std::path::{Path, PathBuf};

use btf_rs::{Btf, Type};
use monitor_common::MemcgLayout;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LayoutError {
    #[error("reading the kernel's BTF at {path}: {reason}")]
    Btf { path: String, reason: String },
    #[error("the kernel's BTF has no struct {0}")]
    NoStruct(String),
    #[error("the kernel's BTF has no field {field} in struct {structure}")]
    NoField { structure: String, field: String },
    #[error("field {field} of struct {structure} is a bitfield")]
    Bitfield { structure: String, field: String },
}

/// The kernel's own BTF.
pub(crate) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Reads the offsets the detector needs from the BTF file at `path`.
pub(crate) fn memcg_layout(path: &Path) -> Result<MemcgLayout, LayoutError> {
    // Mapping the file is quicker where the kernel allows it (recent kernels map
    // /sys/kernel/btf/vmlinux); older ones refuse (ENODEV): then it is read.
    let btf = Btf::from_file_with_backend(path, btf_rs::Backend::Mmap)
        .or_else(|_| Btf::from_file(path))
        .map_err(|e| LayoutError::Btf {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    let page_size = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u64;
    Ok(MemcgLayout {
        memcg_css_cgroup: offset_of(&btf, "mem_cgroup", &["css", "cgroup"])?,
        memcg_memory: offset_of(&btf, "mem_cgroup", &["memory"])?,
        counter_usage: offset_of(&btf, "page_counter", &["usage"])?,
        counter_parent: offset_of(&btf, "page_counter", &["parent"])?,
        cgroup_kn: offset_of(&btf, "cgroup", &["kn"])?,
        kn_id: offset_of(&btf, "kernfs_node", &["id"])?,
        page_shift: page_size.trailing_zeros(),
        cgroup_memory_css: memory_css_offset(&btf),
        // Without these the detector walks every ancestor.
        cgroup_level: offset_of(&btf, "cgroup", &["level"]).unwrap_or(0),
        cgroup_ancestors: offset_of(&btf, "cgroup", &["ancestors"]).unwrap_or(0),
    })
}

/// The inode of the initial cgroup namespace (the kernel's `PROC_CGROUP_INIT_INO`): in
/// it, cgroup paths and depths are the kernel's own.
const INIT_CGROUP_NAMESPACE: &str = "cgroup:[4026531835]";

/// How deep a cgroup directory sits below its hierarchy's root, as the kernel counts it
/// (`struct cgroup`'s `level`), told from the agent's mounts: known only under a mount
/// of a whole hierarchy (mountinfo's root "/") seen from the initial cgroup namespace.
/// Elsewhere (a cgroup namespace, a mounted subtree) a path's depth is not the kernel's,
/// and `depth` answers `None`.
#[derive(Clone, Debug, Default)]
pub(crate) struct CgroupDepths {
    /// Every cgroup mount point, and whether a whole hierarchy is mounted there.
    mounts: Vec<(PathBuf, bool)>,
}

impl CgroupDepths {
    pub(crate) fn of_this_process() -> CgroupDepths {
        let in_init_namespace = std::fs::read_link("/proc/self/ns/cgroup")
            .is_ok_and(|link| link.as_os_str() == INIT_CGROUP_NAMESPACE);
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        CgroupDepths::from_mountinfo(&mountinfo, in_init_namespace)
    }

    pub(crate) fn from_mountinfo(mountinfo: &str, in_init_namespace: bool) -> CgroupDepths {
        let mounts = if in_init_namespace {
            crate::observe::cgroup::cgroup_mounts(mountinfo)
                .into_iter()
                .map(|m| {
                    let whole = m.root == Path::new("/");
                    (m.mount_point, whole)
                })
                .collect()
        } else {
            Vec::new()
        };
        CgroupDepths { mounts }
    }

    /// The depth of `dir` (its hierarchy's root is 0), when the deepest cgroup mount
    /// holding it is of a whole hierarchy.
    pub(crate) fn depth(&self, dir: &Path) -> Option<u32> {
        let (relative, whole) = self
            .mounts
            .iter()
            .filter_map(|(point, whole)| Some((dir.strip_prefix(point).ok()?, *whole)))
            .min_by_key(|(rest, _)| rest.as_os_str().len())?;
        if !whole {
            return None;
        }
        let mut depth = 0u32;
        for component in relative.components() {
            match component {
                std::path::Component::Normal(_) => depth += 1,
                _ => return None,
            }
        }
        Some(depth)
    }
}

/// Offset of `subsys[memory_cgrp_id]` in `struct cgroup`, when the BTF gives it and a
/// memory cgroup's css is its first field (the pointer in `subsys` then equals the
/// memory cgroup's own); else 0, which leaves the page counter program idle.
fn memory_css_offset(btf: &Btf) -> u32 {
    let memory_id = btf
        .resolve_types_by_name("cgroup_subsys_id")
        .ok()
        .into_iter()
        .flatten()
        .find_map(|t| match t {
            Type::Enum(e) => e
                .members
                .iter()
                .find(|m| btf.resolve_name(*m).is_ok_and(|n| n == "memory_cgrp_id"))
                .map(|m| m.val()),
            _ => None,
        });
    let (Some(memory_id), Ok(0), Ok(subsys)) = (
        memory_id,
        offset_of(btf, "mem_cgroup", &["css"]),
        offset_of(btf, "cgroup", &["subsys"]),
    ) else {
        return 0;
    };
    subsys + memory_id * std::mem::size_of::<usize>() as u32
}

/// Byte offset of `path` (a chain of member names, through embedded structs) inside
/// `struct name`. Anonymous struct and union members are searched through.
pub(crate) fn offset_of(btf: &Btf, name: &str, path: &[&str]) -> Result<u32, LayoutError> {
    let mut current = btf
        .resolve_types_by_name(name)
        .ok()
        .and_then(|types| {
            types.into_iter().find_map(|t| match t {
                Type::Struct(s) if !s.members.is_empty() => Some(s),
                _ => None,
            })
        })
        .ok_or_else(|| LayoutError::NoStruct(name.to_string()))?;
    let mut bits = 0u32;
    for (depth, field) in path.iter().enumerate() {
        let no_field = || LayoutError::NoField {
            structure: name.to_string(),
            field: path[..=depth].join("."),
        };
        let (offset, ty) = find_member(btf, &current, field, 0).ok_or_else(no_field)?;
        bits += offset;
        if depth + 1 < path.len() {
            current = match strip(btf, ty) {
                Some(Type::Struct(s)) | Some(Type::Union(s)) => s,
                _ => return Err(no_field()),
            };
        }
    }
    if !bits.is_multiple_of(8) {
        return Err(LayoutError::Bitfield {
            structure: name.to_string(),
            field: path.join("."),
        });
    }
    Ok(bits / 8)
}

/// A member by name, searching anonymous members; (bit offset, its type).
fn find_member(btf: &Btf, within: &btf_rs::Struct, field: &str, depth: u32) -> Option<(u32, Type)> {
    if depth > 8 {
        return None;
    }
    for member in &within.members {
        let name = btf.resolve_name(member).unwrap_or_default();
        let ty = btf.resolve_chained_type(member).ok()?;
        if name == field {
            return Some((member.bit_offset(), ty));
        }
        if name.is_empty()
            && let Some(Type::Struct(inner) | Type::Union(inner)) = strip(btf, ty)
            && let Some((offset, ty)) = find_member(btf, &inner, field, depth + 1)
        {
            return Some((member.bit_offset() + offset, ty));
        }
    }
    None
}

/// Follows typedefs and qualifiers to the type they name.
fn strip(btf: &Btf, mut ty: Type) -> Option<Type> {
    for _ in 0..16 {
        ty = match ty {
            Type::Typedef(t) => btf.resolve_chained_type(&t).ok()?,
            Type::Const(t) | Type::Volatile(t) | Type::Restrict(t) => {
                btf.resolve_chained_type(&t).ok()?
            }
            Type::TypeTag(t) => btf.resolve_chained_type(&t).ok()?,
            other => return Some(other),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with cgroup v1's memory hierarchy, the unified one beside it, and a
    /// container's view (a subtree mounted as its root).
    const MOUNTINFO: &str = "\
25 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
35 25 0:30 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw
40 35 0:35 / /sys/fs/cgroup/memory rw shared:15 - cgroup cgroup rw,memory
41 35 0:36 /kubepods /sys/fs/cgroup/cpu rw shared:16 - cgroup cgroup rw,cpu
42 40 0:35 /kubepods/guaranteed /sys/fs/cgroup/memory/bound rw shared:17 - cgroup cgroup rw,memory
";

    #[rstest::rstest]
    #[case::hierarchy_root("/sys/fs/cgroup/memory", Some(0))]
    #[case::pods("/sys/fs/cgroup/memory/kubepods", Some(1))]
    #[case::container("/sys/fs/cgroup/memory/kubepods/burstable/pod1/c1", Some(4))]
    #[case::unified("/sys/fs/cgroup/unified/system.slice", Some(1))]
    #[case::mounted_subtree("/sys/fs/cgroup/cpu/burstable", None)]
    #[case::subtree_mounted_inside_the_whole("/sys/fs/cgroup/memory/bound/pod1", None)]
    #[case::not_a_cgroup("/sys/fs/cgroup", None)]
    #[case::dot_dot("/sys/fs/cgroup/memory/kubepods/../x", None)]
    fn a_cgroup_depth_is_counted_below_a_whole_hierarchy(
        #[case] dir: &str,
        #[case] depth: Option<u32>,
    ) {
        let depths = CgroupDepths::from_mountinfo(MOUNTINFO, true);
        assert_eq!(depths.depth(Path::new(dir)), depth);
    }

    #[test]
    fn in_a_cgroup_namespace_no_depth_is_known() {
        let depths = CgroupDepths::from_mountinfo(MOUNTINFO, false);
        assert_eq!(
            depths.depth(Path::new("/sys/fs/cgroup/memory/kubepods")),
            None
        );
    }

    #[test]
    fn layout_of_the_running_kernel_when_it_has_btf() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            println!("SKIP: no {VMLINUX_BTF} on this kernel");
            return;
        }
        let layout = memcg_layout(path).expect("offsets from the kernel's BTF");
        // struct mem_cgroup starts with its css, whose cgroup pointer comes before the
        // memory counter.
        assert!(layout.memcg_memory > layout.memcg_css_cgroup);
        assert!(layout.kn_id > 0);
        assert_eq!(layout.page_shift, 12);
        // Every kernel with the memory controller has the enum and the array.
        assert_ne!(layout.cgroup_memory_css, 0);
        // Kernels from 6.0 on index a cgroup's ancestors by depth (`ancestors[]`, the
        // struct's last field): the detector goes straight to the armed ones.
        let release = nix::sys::utsname::uname().expect("uname");
        let release = release.release().to_string_lossy().into_owned();
        let major: u32 = release
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if major >= 6 {
            assert!(layout.cgroup_level > 0, "cgroup.level on {release}");
            assert!(
                layout.cgroup_ancestors > layout.cgroup_level,
                "cgroup.ancestors on {release}"
            );
        }
    }

    #[test]
    fn a_missing_field_is_named() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            println!("SKIP: no {VMLINUX_BTF} on this kernel");
            return;
        }
        let btf = Btf::from_file(path).expect("btf");
        let err = offset_of(&btf, "page_counter", &["no_such_field"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the kernel's BTF has no field no_such_field in struct page_counter"
        );
        let err = offset_of(&btf, "no_such_struct_here", &["x"]).unwrap_err();
        assert!(err.to_string().contains("no struct no_such_struct_here"));
    }
}
