use super::*;

#[test]
fn unescapes_mountinfo() {
    assert_eq!(unescape_mountinfo(r"/tmp/a\040b"), "/tmp/a b");
    assert_eq!(unescape_mountinfo(r"/tmp/plain"), "/tmp/plain");
    assert_eq!(unescape_mountinfo(r"/tmp/x\"), r"/tmp/x\");
}

#[test]
fn checks_cgroup_paths() {
    assert_eq!(checked_cgroup_path("a/b/").as_deref(), Some("a/b"));
    assert_eq!(checked_cgroup_path("/a"), None);
    assert_eq!(checked_cgroup_path("a/../b"), None);
    assert_eq!(checked_cgroup_path(""), None);
    assert_eq!(checked_cgroup_path("a//b"), None);
}

#[test]
fn finds_settings_in_their_section() {
    let lines: Vec<String> = [
        "root = \"/x\"",
        "[grpc]",
        "  address = \"/a\"",
        "[ttrpc]",
        "  address = \"/b\"",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(find_setting(&lines, None, "root = \"/x\""), Some(0));
    assert_eq!(
        find_setting(&lines, Some("[grpc]"), "address = \"/a\""),
        Some(2)
    );
    assert_eq!(
        find_setting(&lines, Some("[ttrpc]"), "address = \"/a\""),
        None
    );
    assert_eq!(find_setting(&lines, None, "address = \"/a\""), None);
}

#[test]
fn tells_static_from_dynamic() {
    // A 64-bit little-endian ELF header with one program header of type `kind` (what
    // is on this machine's /bin differs: dash on Debian, static busybox in the VM).
    let elf = |kind: u32| {
        let mut bytes = vec![0u8; 64 + 56];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        bytes[64..68].copy_from_slice(&kind.to_le_bytes());
        bytes
    };
    assert!(has_interpreter(&elf(3)), "PT_INTERP: dynamically linked");
    assert!(!has_interpreter(&elf(1)), "PT_LOAD only: static");
    assert!(!has_interpreter(&elf(3)[..66]), "truncated program headers");
    assert!(!has_interpreter(b"not an elf"));
}
