//! The names a tree gives its cgroups, and what it accepts as a pod uid or a container
//! name before one becomes a path.
use super::CgroupError;

pub(super) fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}/{child}")
    }
}

/// One path component of our own: never empty, ".", "..", nor containing '/' or NUL.
pub(super) fn validate_component(field: &'static str, value: &str) -> Result<(), CgroupError> {
    let reason = if value.is_empty() {
        Some("empty")
    } else if value == "." || value == ".." {
        Some("a relative directory")
    } else if value.contains(['/', '\0']) {
        Some("contains '/' or NUL")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CgroupError::InvalidName {
            field,
            value: value.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Pod UIDs are UUIDs (API pods) or hex hashes (static pods): letters, digits, '-', '_'.
pub(super) fn validate_uid(uid: &str) -> Result<(), CgroupError> {
    validate_component("pod uid", uid)?;
    let ok = uid.len() <= 128
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidName {
            field: "pod uid",
            value: uid.to_string(),
            reason: "not 1-128 letters, digits, '-' or '_'",
        })
    }
}

/// Container names are DNS-1123 labels (the API's rule), which also keeps them apart
/// from every cgroup control file (those all contain '.').
pub(super) fn validate_container_name(name: &str) -> Result<(), CgroupError> {
    validate_component("container name", name)?;
    let bytes = name.as_bytes();
    let edge_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let ok = name.len() <= 63
        && edge_ok(bytes.first())
        && edge_ok(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidName {
            field: "container name",
            value: name.to_string(),
            reason: "not a DNS-1123 label (1-63 of a-z, 0-9, '-', alphanumeric at both ends)",
        })
    }
}
