//! The agent beside a kubelet whose pods run on containerd: the test plays the kubelet,
//! creating each pod's cgroup in the cgroupfs driver's naming and running its sandbox and
//! container through containerd's CRI with that cgroup as the sandbox's cgroup parent
//! (as the kubelet does), then lists the pods in a PodList file. In act mode the agent
//! kills the hog's cgroup and nothing else; in shadow mode it reports the kill and the
//! hog runs on to the kernel's OOM killer. Run as root, with a private containerd.
use std::time::Duration;

use monitor::runtime::cri::{CriClient, api};
use monitor_tests::containerd::{BUSYBOX_IMAGE, Containerd};
use monitor_tests::kubelet_laid::KubeletNode;
use monitor_tests::oci::OciImage;
use monitor_tests::{Feature, parent_name, require, wait_until};

const EVICTION: &str =
    "evictionHard: {allocatableMemory.available: 150Mi}\nhousekeepingInterval: 1s";

/// Calls containerd's CRI from the test.
fn cri<T>(
    containerd: &Containerd,
    call: impl AsyncFnOnce(CriClient) -> Result<T, monitor::runtime::cri::CriError>,
) -> T {
    let socket = containerd.socket().to_path_buf();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move { call(CriClient::new(&socket)?).await })
        .unwrap_or_else(|e| panic!("CRI: {e}"))
}

/// Runs pod `index` of `node` as the kubelet would: its sandbox with the pod's cgroup as
/// the cgroup parent, one container running `script` (busybox sh), the test's directory
/// mounted at /trigger. Returns the container's id.
fn run_pod(node: &KubeletNode, containerd: &Containerd, index: usize, script: &str) -> String {
    let pod = &node.pods[index];
    let logs = node.dir.path().join("logs").join(&pod.uid);
    std::fs::create_dir_all(&logs).unwrap();
    let sandbox = monitor_tests::containerd::host_network_sandbox(
        &pod.name,
        &pod.uid,
        "shop",
        &logs,
        &pod.relative,
        Default::default(),
    );
    let container = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: BUSYBOX_IMAGE.into(),
            ..api::ImageSpec::default()
        }),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        mounts: vec![api::Mount {
            container_path: "/trigger".into(),
            host_path: node.dir.path().display().to_string(),
            readonly: true,
            ..api::Mount::default()
        }],
        log_path: "app.log".into(),
        ..api::ContainerConfig::default()
    };
    cri(containerd, async move |client| {
        let sandbox_id = client.run_pod_sandbox(sandbox.clone()).await?;
        let id = client
            .create_container(&sandbox_id, container, sandbox)
            .await?;
        client.start_container(&id).await?;
        Ok(id)
    })
}

/// Whether container `id` is running.
fn running(containerd: &Containerd, id: &str) -> bool {
    let id = id.to_string();
    cri(containerd, async move |client| {
        Ok(client
            .list_containers()
            .await?
            .iter()
            .any(|c| c.id == id && c.state == api::ContainerState::ContainerRunning as i32))
    })
}

/// A Guaranteed service and a BestEffort hog (busybox dd with an 800 MiB block, at kernel
/// speed once /trigger/go exists) on containerd, under a 512 MiB `kubepods`.
fn laid(containerd: &Containerd) -> (KubeletNode, String, String) {
    containerd
        .import(&OciImage::busybox(BUSYBOX_IMAGE))
        .unwrap_or_else(|e| panic!("importing busybox: {e:#}"));
    containerd.track_cgroup_parent(&parent_name());
    let mut node = KubeletNode::new(512);
    let db = node.pod("db", "Guaranteed", true, true);
    let batch = node.pod("batch", "BestEffort", true, true);
    node.write_pod_list();
    let db_id = run_pod(&node, containerd, db, "exec sleep 3600");
    let batch_id = run_pod(
        &node,
        containerd,
        batch,
        "while [ ! -e /trigger/go ]; do sleep 0.05; done; exec dd if=/dev/zero of=/dev/null bs=800M count=1",
    );
    wait_until("both containers run", Duration::from_secs(30), || {
        running(containerd, &db_id) && running(containerd, &batch_id)
    });
    (node, db_id, batch_id)
}

fn start(test: &str) -> Option<Containerd> {
    if !require(test, &[Feature::Root, Feature::Containerd]) {
        return None;
    }
    Some(Containerd::start().unwrap_or_else(|e| panic!("starting a private containerd: {e:#}")))
}

#[test]
fn an_acting_agent_kills_the_hog_container_of_a_kubelet_pod_on_containerd() {
    let Some(containerd) = start("an_acting_agent_kills_the_hog_container_of_a_kubelet_pod") else {
        return;
    };
    let (node, db_id, batch_id) = laid(&containerd);
    let before = node.settings();
    let agent = node.race(EVICTION, "", &[], &node.dir.path().join("go"));
    wait_until("the hog container ends", Duration::from_secs(60), || {
        !running(&containerd, &batch_id)
    });
    let log = node.log();
    assert!(
        log.lines()
            .any(|l| l.contains("hot path: cgroup.kill written") && l.contains("pod=shop/batch")),
        "the hot path killed the hog's pod through its cgroup\n{log}"
    );
    assert_eq!(
        node.oom_kills(),
        0,
        "the agent killed before the kernel\n{log}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        running(&containerd, &db_id),
        "the service runs on\n{}",
        node.log()
    );
    assert_eq!(node.settings(), before, "no cgroup setting written");
    drop(agent);
    stop_all(&containerd);
}

#[test]
fn a_shadow_agent_beside_containerd_pods_reports_the_kill_and_touches_nothing() {
    let Some(containerd) = start("a_shadow_agent_beside_containerd_pods") else {
        return;
    };
    let (node, db_id, batch_id) = laid(&containerd);
    let before = node.settings();
    let agent = node.race(EVICTION, "", &["--shadow"], &node.dir.path().join("go"));
    wait_until("the hog container ends", Duration::from_secs(60), || {
        !running(&containerd, &batch_id)
    });
    wait_until(
        "the would-be kill is booked",
        Duration::from_secs(10),
        || node.log().contains("WouldKill"),
    );
    let log = node.log();
    assert!(node.oom_kills() >= 1, "the hog ran to its limit\n{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("hot path (shadow): would kill") && l.contains("pod=shop/batch")),
        "{log}"
    );
    assert!(!log.contains("cgroup.kill written"), "{log}");
    assert!(running(&containerd, &db_id), "the service runs on");
    assert_eq!(node.settings(), before, "no cgroup setting written");
    drop(agent);
    stop_all(&containerd);
}

/// Stops and removes the sandboxes before the tree goes (the fixture removes the rest).
fn stop_all(containerd: &Containerd) {
    cri(containerd, async |client| {
        for sandbox in client.list_pod_sandboxes().await? {
            client.stop_pod_sandbox(&sandbox.id).await?;
        }
        Ok(())
    });
}
