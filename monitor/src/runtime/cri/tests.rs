use std::collections::BTreeSet;

use super::*;
use crate::policy::image_gc::{self, Image};

fn owner(dir: &Path) -> Ownership {
    Ownership::for_agent("monitor", dir, &dir.join("logs"))
}

#[tokio::test]
async fn a_corrupt_image_records_file_is_set_aside_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("images.json");
    std::fs::write(&file, b"{\"beganGc\": ").unwrap();
    let socket = dir.path().join("no-runtime.sock");
    let (runtime, warning) = CriRuntime::new(
        &socket,
        dir.path(),
        ImageGcPolicy::default(),
        owner(dir.path()),
    )
    .unwrap();
    let warning = warning.expect("a warning");
    assert!(warning.contains("images.json"), "{warning}");
    assert!(dir.path().join("images.json.corrupt").exists());
    assert!(!file.exists());
    assert_eq!(runtime.lock_images().records().count(), 0);
    // The records written from now on are readable by the next run.
    runtime.save_images(&ImageGcState::new());
    let (_, warning) = CriRuntime::new(
        &socket,
        dir.path(),
        ImageGcPolicy::default(),
        owner(dir.path()),
    )
    .unwrap();
    assert_eq!(warning, None);
}

#[tokio::test]
async fn an_image_recorded_in_2100_counts_as_now_and_is_freed_by_age_and_pressure() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("images.json");
    let year_2100 = Duration::from_secs(4_102_444_800);
    let record = |id: &str, first_detected, last_used| ImageRecord {
        id: id.into(),
        repo_tags: vec![format!("{id}:latest")],
        size_bytes: 1 << 20,
        pinned: false,
        first_detected,
        last_used,
    };
    let recorded = ImagesFile {
        began_gc: year_2100,
        records: vec![
            record("future", year_2100, year_2100),
            record("past", Duration::from_secs(1000), Duration::ZERO),
        ],
    };
    std::fs::write(&file, serde_json::to_vec(&recorded).unwrap()).unwrap();
    let before = wall_now();
    let policy = ImageGcPolicy {
        max_age: Some(Duration::from_secs(3600)),
        ..ImageGcPolicy::default()
    };
    let socket = dir.path().join("no-runtime.sock");
    let (runtime, warning) =
        CriRuntime::new(&socket, dir.path(), policy, owner(dir.path())).unwrap();
    let after = wall_now();
    assert_eq!(warning, None);

    // The file now holds times at or before now; the past record is untouched.
    let rewritten: ImagesFile =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    assert!((before..=after).contains(&rewritten.began_gc));
    let times: BTreeMap<String, (Time, Time)> = rewritten
        .records
        .iter()
        .map(|r| (r.id.clone(), (r.first_detected, r.last_used)))
        .collect();
    let (detected, used) = times["future"];
    assert!((before..=after).contains(&detected), "{detected:?}");
    assert!((before..=after).contains(&used), "{used:?}");
    assert_eq!(times["past"], (Duration::from_secs(1000), Duration::ZERO));
    assert_eq!(runtime.began_gc, rewritten.began_gc);

    // Unused from now on, it ages as any other image.
    let mut state = runtime.lock_images().clone();
    let listed = [Image {
        id: "future".into(),
        repo_tags: vec!["future:latest".into()],
        size_bytes: 1 << 20,
        pinned: false,
    }];
    state.detect(&listed, &BTreeSet::new(), &BTreeSet::new(), after);
    let hour = Duration::from_secs(3600);
    let (gib, roomy) = (1 << 30, 1 << 29);
    let collect = |now: Time| {
        image_gc::garbage_collect(&policy, &state, gib, roomy, now, runtime.began_gc)
            .unwrap_or_else(|e| panic!("{e}"))
            .by_age
            .images
    };
    assert!(
        collect(after + hour / 2).is_empty(),
        "younger than imageMaximumGCAge"
    );
    assert_eq!(collect(after + hour + Duration::from_secs(1)), ["future"]);
    // And under disk pressure (node-level reclaim) once past imageMinimumGCAge.
    let reclaim = |now: Time| image_gc::free_all_eligible(&policy, &state, now).images;
    assert!(reclaim(after).is_empty(), "imageMinimumGCAge");
    assert_eq!(reclaim(after + policy.min_age), ["future"]);
}

#[test]
fn the_writable_layer_is_the_upperdir_of_the_root_overlay() {
    let mountinfo = "\
1620 1500 0:160 / / rw,relatime - overlay overlay rw,lowerdir=/c/snapshots/1/fs,upperdir=/c/snapshots/7/fs,workdir=/c/snapshots/7/work
1621 1620 0:161 / /proc rw,nosuid - proc proc rw
1622 1620 0:162 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k
";
    assert_eq!(
        root_upperdir(mountinfo),
        Some(PathBuf::from("/c/snapshots/7/fs"))
    );
    // Not an overlay at the root: no writable layer to measure.
    assert_eq!(root_upperdir("1 0 8:1 / / rw - ext4 /dev/vda1 rw\n"), None);
    assert_eq!(root_upperdir(""), None);
}

#[test]
fn memory_qos_values_go_in_the_unified_map_only_when_on() {
    use crate::policy::memory_qos::{MemoryQos, MemoryReservationPolicy, NodeMemoryQos};
    use crate::policy::qos::CgroupOptions;
    use crate::policy::testing::pod;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ownership = owner(dir.path());
    let burstable = pod("b", "memory=64Mi", "memory=128Mi");
    let spec = &burstable.spec.containers[0];
    let unified = |options: &CgroupOptions| {
        let resources =
            crate::policy::qos::pod_container_resource_config(&burstable, spec, options);
        container_config(&ownership, &resources, "uid", spec, 0)
            .linux
            .and_then(|l| l.resources)
            .map(|r| r.unified)
            .unwrap_or_default()
    };
    assert!(unified(&CgroupOptions::default()).is_empty());
    let on = CgroupOptions {
        memory_qos: Some(NodeMemoryQos {
            settings: MemoryQos {
                throttling_factor: 0.5,
                reservation_policy: MemoryReservationPolicy::TieredReservation,
            },
            allocatable_memory: 1 << 30,
        }),
        ..CgroupOptions::default()
    };
    let map = unified(&on);
    // 64Mi + 0.5 × 64Mi = 96Mi; Burstable: memory.low = the request.
    assert_eq!(
        map.get("memory.high").map(String::as_str),
        Some("100663296")
    );
    assert_eq!(map.get("memory.low").map(String::as_str), Some("67108864"));
    assert_eq!(map.get("memory.min").map(String::as_str), Some("0"));
    assert_eq!(map.get("memory.oom.group"), None);
    // The group OOM kill of cgroup v2 goes the same way, as the kubelet sends it.
    let group = unified(&CgroupOptions {
        oom_group: true,
        ..CgroupOptions::default()
    });
    assert_eq!(
        group.get("memory.oom.group").map(String::as_str),
        Some("1"),
        "{group:?}"
    );
}
