use rstest::rstest;

use super::*;
use crate::quantity::parse_quantity;
use crate::testing::container;

/// Trimmed from real `kubectl get pods -A -o json` output: a Deployment's pod with
/// status, a pod with an init container and a sidecar, and a static pod's mirror.
const KUBECTL_JSON: &str = r#"{
  "apiVersion": "v1",
  "kind": "List",
  "items": [
    {
      "apiVersion": "v1",
      "kind": "Pod",
      "metadata": {
        "creationTimestamp": "2026-11-20T09:14:02Z",
        "generateName": "web-7d9c6b8f4-",
        "labels": { "app": "web", "pod-template-hash": "7d9c6b8f4" },
        "name": "web-7d9c6b8f4-x2k8p",
        "namespace": "shop",
        "ownerReferences": [
          { "apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true,
            "kind": "ReplicaSet", "name": "web-7d9c6b8f4", "uid": "5e0c2b1a-0000-4000-8000-000000000001" }
        ],
        "resourceVersion": "48213",
        "uid": "9a1f7c3e-0000-4000-8000-000000000002"
      },
      "spec": {
        "containers": [
          {
            "name": "nginx",
            "image": "nginx:1.27",
            "imagePullPolicy": "IfNotPresent",
            "command": ["nginx"],
            "args": ["-g", "daemon off;"],
            "env": [ { "name": "MODE", "value": "prod" }, { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } } ],
            "ports": [ { "containerPort": 80, "protocol": "TCP" } ],
            "resources": {
              "limits": { "cpu": "500m", "memory": "256Mi" },
              "requests": { "cpu": "500m", "memory": "256Mi" }
            },
            "terminationMessagePath": "/dev/termination-log",
            "volumeMounts": [ { "mountPath": "/cache", "name": "cache" } ]
          }
        ],
        "dnsPolicy": "ClusterFirst",
        "nodeName": "node-1",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 45,
        "tolerations": [
          { "effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300 }
        ],
        "volumes": [ { "name": "cache", "emptyDir": { "medium": "Memory", "sizeLimit": "64Mi" } } ]
      },
      "status": {
        "conditions": [ { "type": "Ready", "status": "True" } ],
        "containerStatuses": [
          {
            "containerID": "containerd://4b1d",
            "image": "docker.io/library/nginx:1.27",
            "imageID": "docker.io/library/nginx@sha256:abc123",
            "lastState": {},
            "name": "nginx",
            "ready": true,
            "restartCount": 2,
            "started": true,
            "state": { "running": { "startedAt": "2026-11-20T09:14:05Z" } }
          }
        ],
        "hostIP": "10.0.0.11",
        "phase": "Running",
        "podIP": "10.244.1.7",
        "qosClass": "Guaranteed",
        "startTime": "2026-11-20T09:14:02Z"
      }
    },
    {
      "apiVersion": "v1",
      "kind": "Pod",
      "metadata": { "name": "batch-0", "uid": "u-2", "annotations": { "team": "data" } },
      "spec": {
        "initContainers": [
          { "name": "fetch", "image": "busybox:1.36", "resources": { "requests": { "cpu": "2", "memory": "1Gi" } } },
          { "name": "proxy", "image": "envoy:1.31", "restartPolicy": "Always",
            "resources": { "requests": { "cpu": "100m", "memory": "64Mi" } } }
        ],
        "containers": [
          { "name": "work", "image": "batch:3", "workingDir": "/data",
            "resources": { "requests": { "cpu": "1", "memory": "512Mi" }, "limits": { "memory": "1Gi" } } }
        ],
        "priorityClassName": "batch-low",
        "priority": -10
      },
      "status": { "phase": "Pending", "qosClass": "Burstable" }
    },
    {
      "apiVersion": "v1",
      "kind": "Pod",
      "metadata": {
        "name": "etcd-node-1",
        "namespace": "kube-system",
        "annotations": {
          "kubernetes.io/config.hash": "f00d",
          "kubernetes.io/config.mirror": "f00d",
          "kubernetes.io/config.seen": "2026-11-20T09:00:00Z",
          "kubernetes.io/config.source": "file"
        },
        "ownerReferences": [ { "apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "n-1", "controller": true } ]
      },
      "spec": {
        "containers": [ { "name": "etcd", "image": "registry.k8s.io/etcd:3.5.15-0", "command": ["etcd"] } ],
        "priority": 2000001000,
        "priorityClassName": "system-node-critical"
      },
      "status": null
    }
  ],
  "metadata": { "resourceVersion": "" }
}"#;

/// A static pod manifest as written in /etc/kubernetes/manifests (limits only: requests
/// are defaulted from them).
const MANIFEST_YAML: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: agent
  namespace: kube-system
  creationTimestamp: null
  labels:
    tier: node
spec:
  priorityClassName: system-node-critical
  priority: 2000001000
  containers:
  - name: agent
    image: monitor:0.1
    args: [--config, /etc/monitor.yaml]
    env:
    - name: RUST_LOG
      value: info
    resources:
      limits:
        cpu: 0.5
        memory: 128Mi
  volumes:
  - name: scratch
    emptyDir: {}
status: {}
";

fn pods() -> Vec<Pod> {
    parse_pod_list(KUBECTL_JSON, "pods.json").unwrap_or_else(|e| panic!("fixture must parse: {e}"))
}

fn q(text: &str) -> Quantity {
    parse_quantity(text).unwrap_or_else(|e| panic!("bad test quantity {text}: {e}"))
}

#[test]
fn kubectl_json_reads_every_field_the_policy_uses() {
    let pods = pods();
    assert_eq!(pods.len(), 3);
    let web = &pods[0];
    assert_eq!(web.key(), "shop/web-7d9c6b8f4-x2k8p");
    assert_eq!(web.metadata.uid, "9a1f7c3e-0000-4000-8000-000000000002");
    assert_eq!(
        web.metadata.labels.get("app").map(String::as_str),
        Some("web")
    );
    assert_eq!(web.metadata.owner_references[0].kind, "ReplicaSet");
    assert_eq!(web.metadata.owner_references[0].name, "web-7d9c6b8f4");
    assert_eq!(
        web.metadata.creation_timestamp.as_deref(),
        Some("2026-11-20T09:14:02Z")
    );
    assert_eq!(web.termination_grace_period_seconds(), 45);
    assert_eq!(web.spec.node_name.as_deref(), Some("node-1"));
    assert_eq!(web.spec.restart_policy.as_deref(), Some("Always"));
    let nginx = &web.spec.containers[0];
    assert_eq!(nginx.args, ["-g", "daemon off;"]);
    assert_eq!(nginx.env[0].value.as_deref(), Some("prod"));
    assert_eq!(nginx.env[1].value, None, "valueFrom is not a value");
    assert_eq!(nginx.resources.limits["memory"], q("256Mi"));
    let cache = web.spec.volumes[0]
        .empty_dir
        .as_ref()
        .expect("cache is an emptyDir");
    assert_eq!(
        (cache.medium.as_str(), cache.size_limit),
        ("Memory", Some(q("64Mi")))
    );
    assert_eq!(web.spec.tolerations[0].toleration_seconds, Some(300));
    assert_eq!(web.status.phase.as_deref(), Some("Running"));
    assert_eq!(
        web.status.container_statuses[0].image_id,
        "docker.io/library/nginx@sha256:abc123"
    );
    assert_eq!(web.status.container_statuses[0].restart_count, 2);

    let batch = &pods[1];
    assert_eq!(batch.namespace(), "default");
    assert_eq!(batch.priority(), -10);
    assert_eq!(batch.termination_grace_period_seconds(), 30, "API default");
    assert!(batch.spec.init_containers[1].is_restartable_init());
    assert_eq!(
        batch.spec.containers[0].working_dir.as_deref(),
        Some("/data")
    );

    let etcd = &pods[2];
    assert_eq!(
        etcd.status,
        PodStatus::default(),
        "status: null reads as empty"
    );
}

#[test]
fn json_round_trips_through_yaml_and_json() {
    let original = pods();
    let list = PodList {
        items: original.clone(),
    };
    let yaml = serde_yaml_ng::to_string(&list).expect("serializes to YAML");
    let from_yaml = parse_pod_list(&yaml, "pods.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(from_yaml, original);
    let json = serde_json::to_string_pretty(&list).expect("serializes to JSON");
    let from_json = parse_pod_list(&json, "pods.json").unwrap_or_else(|e| panic!("{e}\n{json}"));
    assert_eq!(from_json, original);
}

#[test]
fn yaml_manifest_round_trips_and_gets_requests_defaulted() {
    let pod = parse_pod(MANIFEST_YAML, "agent.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pod.key(), "kube-system/agent");
    assert_eq!(
        pod.spec.containers[0].args,
        ["--config", "/etc/monitor.yaml"]
    );
    assert_eq!(
        pod.spec.containers[0].resources.requests["cpu"],
        q("500m"),
        "request defaulted from limit"
    );
    assert_eq!(
        pod.spec.volumes[0].empty_dir,
        Some(EmptyDirVolumeSource::default())
    );
    assert_eq!(pod.qos_class(), QosClass::Guaranteed);
    let again = parse_pod(
        &serde_yaml_ng::to_string(&pod).expect("serializes"),
        "again.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, pod);
    let again = parse_pod(
        &serde_json::to_string(&pod).expect("serializes"),
        "again.json",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, pod);
}

#[rstest]
#[case::single_pod_json(r#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}]}}"#, &["default/a"])]
#[case::podlist_without_kind(r#"{"items":[{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}]}}]}"#, &["default/a"])]
#[case::empty_list("kind: PodList\nitems: []\n", &[])]
#[case::null_items("kind: List\nitems: null\n", &[])]
#[case::multi_document_yaml(
    "metadata: {name: a}\nspec: {containers: [{name: c}]}\n---\n---\nkind: List\nitems:\n- metadata: {name: b, namespace: x}\n  spec: {containers: [{name: c}]}\n",
    &["default/a", "x/b"]
)]
fn parse_pod_list_accepts(#[case] text: &str, #[case] keys: &[&str]) {
    let pods = parse_pod_list(text, "in").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pods.iter().map(Pod::key).collect::<Vec<_>>(), keys);
}

const C: &str = r#"{"name":"c"}"#;

fn list_of(items: &[String]) -> String {
    format!(r#"{{"kind":"PodList","items":[{}]}}"#, items.join(","))
}

fn pod_json(name: &str, containers: &str) -> String {
    format!(r#"{{"metadata":{{"name":"{name}"}},"spec":{{"containers":[{containers}]}}}}"#)
}

#[rstest]
#[case::missing_name(list_of(&[pod_json("a", C), pod_json("b", C), pod_json("", C)]),
    "pods.json: items[2].metadata.name: missing")]
#[case::no_metadata(list_of(&[r#"{"spec":{"containers":[{"name":"c"}]}}"#.to_string()]),
    "pods.json: items[0].metadata.name: missing")]
#[case::no_containers(
    pod_json("a", ""),
    "pods.json: spec.containers: at least one container is required"
)]
#[case::no_spec(r#"{"metadata":{"name":"a"}}"#.to_string(), "pods.json: spec.containers: at least one container is required")]
#[case::unnamed_container(
    pod_json("a", r#"{"name":"c"},{"image":"x"}"#),
    "pods.json: spec.containers[1].name: missing"
)]
#[case::duplicate_container(
    pod_json("a", r#"{"name":"c"},{"name":"c"}"#),
    "pods.json: spec.containers[1].name: duplicate name \"c\""
)]
#[case::init_shares_a_name(
    r#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}],"initContainers":[{"name":"c"}]}}"#.to_string(),
    "pods.json: spec.initContainers[0].name: duplicate name \"c\"")]
#[case::bad_quantity(list_of(&[pod_json("a", r#"{"name":"c"},{"name":"d","resources":{"limits":{"memory":"12Qi"}}}"#)]),
    "pods.json: items[0].spec.containers[1].resources.limits.memory: \"12Qi\" has an unknown suffix \"Qi\"")]
#[case::quantity_of_wrong_type(
    pod_json("a", r#"{"name":"c","resources":{"requests":{"cpu":true}}}"#),
    "pods.json: spec.containers[0].resources.requests.cpu: expected a quantity, found a boolean"
)]
#[case::negative_request(
    pod_json("a", r#"{"name":"c","resources":{"requests":{"memory":"-1Mi"}}}"#),
    "pods.json: spec.containers[0].resources.requests.memory: \"-1Mi\" must be greater than or equal to 0"
)]
#[case::negative_init_limit(
    r#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}],"initContainers":[{"name":"i","resources":{"limits":{"cpu":-1}}}]}}"#.to_string(),
    "pods.json: spec.initContainers[0].resources.limits.cpu: -1 must be greater than or equal to 0")]
#[case::request_above_limit(
    pod_json(
        "a",
        r#"{"name":"c","resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}}"#
    ),
    "pods.json: spec.containers[0].resources.requests.cpu: 2 must be less than or equal to the cpu limit of 1"
)]
#[case::bad_size_limit(
    r#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}],"volumes":[{"name":"v","emptyDir":{"sizeLimit":"lots"}}]}}"#.to_string(),
    "pods.json: spec.volumes[0].emptyDir.sizeLimit: \"lots\" is not a quantity")]
#[case::ports_not_a_list(
    pod_json("a", r#"{"name":"c","ports":{"containerPort":80}}"#),
    "pods.json: spec.containers[0].ports: expected a list of ports, found an object"
)]
#[case::port_not_an_object(
    pod_json("a", r#"{"name":"c","ports":[80]}"#),
    "pods.json: spec.containers[0].ports[0]: expected a port object, found a number"
)]
#[case::container_port_missing(
    pod_json("a", r#"{"name":"c","ports":[{"hostPort":80}]}"#),
    "pods.json: spec.containers[0].ports[0].containerPort: missing"
)]
#[case::container_port_zero(
    pod_json("a", r#"{"name":"c","ports":[{"containerPort":0}]}"#),
    "pods.json: spec.containers[0].ports[0].containerPort: 0 is not a port number from 1 to 65535"
)]
#[case::host_port_too_big(
    pod_json(
        "a",
        r#"{"name":"c","ports":[{"containerPort":80},{"containerPort":81,"hostPort":65536}]}"#
    ),
    "pods.json: spec.containers[0].ports[1].hostPort: 65536 is not a port number from 0 to 65535"
)]
#[case::host_port_negative(
    pod_json("a", r#"{"name":"c","ports":[{"containerPort":80,"hostPort":-1}]}"#),
    "pods.json: spec.containers[0].ports[0].hostPort: -1 is not a port number from 0 to 65535"
)]
#[case::host_port_a_string(
    pod_json(
        "a",
        r#"{"name":"c","ports":[{"containerPort":80,"hostPort":"http"}]}"#
    ),
    "pods.json: spec.containers[0].ports[0].hostPort: expected a port number, found \"http\""
)]
#[case::bad_protocol(
    pod_json("a", r#"{"name":"c","ports":[{"containerPort":80,"protocol":"tcp"}]}"#),
    "pods.json: spec.containers[0].ports[0].protocol: \"tcp\" is not one of TCP, UDP, SCTP"
)]
#[case::bad_host_ip(
    pod_json(
        "a",
        r#"{"name":"c","ports":[{"containerPort":80,"hostPort":80,"hostIP":"localhost"}]}"#
    ),
    "pods.json: spec.containers[0].ports[0].hostIP: \"localhost\" is not an IP address"
)]
#[case::init_port_checked_too(
    r#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c"}],"initContainers":[{"name":"i","ports":[{"containerPort":99999}]}]}}"#.to_string(),
    "pods.json: spec.initContainers[0].ports[0].containerPort: 99999 is not a port number from 1 to 65535")]
#[case::host_network_port_mismatch(
    r#"{"metadata":{"name":"a"},"spec":{"hostNetwork":true,"containers":[{"name":"c","ports":[{"containerPort":80,"hostPort":8080}]}]}}"#.to_string(),
    "pods.json: spec.containers[0].ports[0].hostPort: 8080 must match containerPort 80 when hostNetwork is true")]
#[case::os_without_name(
    r#"{"metadata":{"name":"a"},"spec":{"os":{},"containers":[{"name":"c"}]}}"#.to_string(),
    "pods.json: spec.os.name: missing")]
#[case::os_unknown(
    r#"{"metadata":{"name":"a"},"spec":{"os":{"name":"plan9"},"containers":[{"name":"c"}]}}"#.to_string(),
    "pods.json: spec.os.name: \"plan9\" is not one of linux, windows")]
#[case::os_a_string(
    r#"{"metadata":{"name":"a"},"spec":{"os":"linux","containers":[{"name":"c"}]}}"#.to_string(),
    "pods.json: spec.os: expected an object with a name, found a string")]
#[case::other_kind(r#"{"kind":"Deployment","metadata":{"name":"a"}}"#.to_string(),
    "pods.json: kind: \"Deployment\" is not Pod, PodList or List")]
#[case::non_pod_in_list(r#"{"kind":"List","items":[{"kind":"Service","metadata":{"name":"s"}}]}"#.to_string(),
    "pods.json: items[0].kind: \"Service\" is not a Pod")]
#[case::items_not_a_list(r#"{"kind":"PodList","items":{}}"#.to_string(),
    "pods.json: items: expected a list of pods, found an object")]
#[case::top_level_array("[1, 2]".to_string(), "pods.json: (document): expected a Pod, PodList or List object, found a list")]
#[case::empty_text("".to_string(), "pods.json: no pod found")]
#[case::only_comments("# nothing here\n".to_string(), "pods.json: no pod found")]
#[case::syntax_json("{\n  \"metadata\": {\"name\": \"a\",\n}".to_string(), "pods.json:3:1: trailing comma")]
#[case::syntax_yaml("metadata:\n  name: a\n spec: x\n".to_string(), "pods.json:3:")]
#[case::wrong_type_json("{\n\"metadata\":{\"name\":\"a\"},\n\"spec\":{\"priority\":\"high\",\"containers\":[{\"name\":\"c\"}]}}".to_string(),
    "pods.json:3:")]
#[case::wrong_type_yaml("metadata:\n  name: a\nspec:\n  containers: [{name: c}]\n  terminationGracePeriodSeconds: soon\n".to_string(),
    "pods.json:5:")]
#[case::second_document_invalid(
    "metadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nmetadata: {name: b}\n".to_string(),
    "pods.json: documents[1].spec.containers: at least one container is required")]
fn parse_pod_list_rejects(#[case] text: String, #[case] expected: &str) {
    let err = match parse_pod_list(&text, "pods.json") {
        Ok(pods) => panic!("{text:?} parsed to {pods:?}, expected {expected:?}"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with(expected),
        "error {err:?} should start with {expected:?}"
    );
}

#[rstest]
#[case::a_list(list_of(&[pod_json("a", C)]), "p: kind: expected a single Pod, found a list of pods")]
#[case::two_documents(format!("# two manifests\n{}\n---\n{}", pod_json("a", C), pod_json("b", C)),
    "p: expected one Pod, found 2 documents")]
fn parse_pod_rejects_lists(#[case] text: String, #[case] expected: &str) {
    match parse_pod(&text, "p") {
        Ok(pod) => panic!("parsed {pod:?}"),
        Err(e) => assert_eq!(e.to_string(), expected),
    }
}

#[test]
fn garbage_never_panics() {
    let inputs = [
        "\u{0}\u{1}",
        "{",
        "[",
        "]]",
        "---\n---\n",
        "*a",
        "&a [*a]",
        "!!binary x",
        "{\"items\": [null]}",
        "kind: 5",
        "metadata: []",
        "spec: {containers: 7}",
        "spec: {containers: [7]}",
        "{\"spec\":{\"containers\":[{\"resources\":{\"limits\":[]}}]}}",
        "items: [[]]",
        "metadata: {name: a}\nspec: {containers: [{name: c, resources: {requests: {cpu: 1e400}}}]}",
        "metadata: {name: a}\nspec: {containers: [{name: c, resources: {requests: {cpu: 99999999999999999999}}}]}",
    ];
    for text in inputs {
        let _ = parse_pod_list(text, "fuzz");
        let _ = parse_pod(text, "fuzz");
    }
}

#[test]
fn ports_and_os_are_read_and_defaulted() {
    let text = "metadata: {name: a}
spec:
  os: {name: windows}
  containers:
    - name: c
      ports:
        - {containerPort: 80}
        - {containerPort: 53, hostPort: 5353, protocol: UDP, hostIP: 10.0.0.1}
";
    let pod = parse_pod(text, "p").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        pod.spec.os,
        Some(PodOs {
            name: "windows".into()
        })
    );
    let ports = &pod.spec.containers[0].ports;
    // The protocol defaults to TCP; off the host network an unset hostPort stays 0.
    assert_eq!(
        (
            ports[0].container_port,
            ports[0].host_port,
            ports[0].protocol.as_str()
        ),
        (80, 0, "TCP")
    );
    assert_eq!(
        (
            ports[1].host_port,
            ports[1].protocol.as_str(),
            ports[1].host_ip.as_str()
        ),
        (5353, "UDP", "10.0.0.1")
    );
    let claimed: Vec<i32> = pod.host_ports().map(|p| p.host_port).collect();
    assert_eq!(claimed, [5353], "a containerPort alone claims no host port");
}

#[test]
fn on_the_host_network_an_unset_host_port_is_the_container_port() {
    // SetDefaults_PodSpec / defaultHostNetworkPorts, for init containers too.
    let text = "metadata: {name: a}
spec:
  hostNetwork: true
  initContainers:
    - {name: s, restartPolicy: Always, ports: [{containerPort: 9090}]}
  containers:
    - {name: c, ports: [{containerPort: 80}, {containerPort: 443, hostPort: 443}]}
";
    let pod = parse_pod(text, "p").unwrap_or_else(|e| panic!("{e}"));
    let claimed: Vec<i32> = pod.host_ports().map(|p| p.host_port).collect();
    assert_eq!(claimed, [9090, 80, 443]);
}

fn with_ports(host_ports: &[i32]) -> Container {
    Container {
        ports: host_ports
            .iter()
            .map(|&host_port| ContainerPort {
                container_port: 8000,
                host_port,
                ..Default::default()
            })
            .collect(),
        ..container("c", "", "")
    }
}

// The scheduler's GetHostPorts (and the kubelet's TestGetContainerPorts in nodeports):
// ports with a hostPort, of sidecars and then regular containers; ordinary init
// containers have finished by the time the pod runs and claim nothing.
#[rstest]
#[case::regular_containers(vec![with_ports(&[8001, 8002]), with_ports(&[8003, 0])], vec![], vec![8001, 8002, 8003])]
#[case::no_host_port(vec![with_ports(&[0])], vec![], vec![])]
#[case::sidecar_first(vec![with_ports(&[8001])],
    vec![Container { restart_policy: Some("Always".into()), ..with_ports(&[9001]) }], vec![9001, 8001])]
#[case::plain_init_container_ignored(vec![with_ports(&[8001])],
    vec![Container { name: "i".into(), ..with_ports(&[9001]) }], vec![8001])]
fn host_ports_follow_get_host_ports(
    #[case] containers: Vec<Container>,
    #[case] init: Vec<Container>,
    #[case] expected: Vec<i32>,
) {
    let pod = pod_with(containers, init);
    let got: Vec<i32> = pod.host_ports().map(|p| p.host_port).collect();
    assert_eq!(got, expected);
}

fn pod_with(containers: Vec<Container>, init: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: "p".into(),
            ..Default::default()
        },
        spec: PodSpec {
            containers,
            init_containers: init,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn sidecar(name: &str, requests: &str) -> Container {
    Container {
        restart_policy: Some("Always".into()),
        ..container(name, requests, "")
    }
}

// The cases of the kubelet's qos_test.go TestGetPodQOS, with init containers.
#[rstest]
#[case::guaranteed(vec![container("a", "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi")], vec![], QosClass::Guaranteed)]
#[case::guaranteed_two_containers(
    vec![container("a", "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi"), container("b", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")],
    vec![], QosClass::Guaranteed)]
#[case::guaranteed_with_extended_resources(
    vec![container("a", "cpu=100m,memory=100Mi,nvidia.com/gpu=1", "cpu=100m,memory=100Mi,nvidia.com/gpu=2")],
    vec![], QosClass::Guaranteed)]
#[case::best_effort_nothing_set(vec![container("a", "", ""), container("b", "", "")], vec![], QosClass::BestEffort)]
#[case::best_effort_zero_values(vec![container("a", "cpu=0,memory=0", "cpu=0,memory=0")], vec![], QosClass::BestEffort)]
#[case::best_effort_only_extended(vec![container("a", "nvidia.com/gpu=1", "nvidia.com/gpu=1")], vec![], QosClass::BestEffort)]
#[case::burstable_one_best_effort_container(
    vec![container("a", "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi"), container("b", "", "")],
    vec![], QosClass::Burstable)]
#[case::burstable_requests_below_limits(vec![container("a", "cpu=100m,memory=100Mi", "cpu=200m,memory=100Mi")], vec![], QosClass::Burstable)]
#[case::burstable_no_cpu_limit(vec![container("a", "cpu=100m,memory=100Mi", "memory=100Mi")], vec![], QosClass::Burstable)]
#[case::burstable_requests_only(vec![container("a", "memory=100Mi", "")], vec![], QosClass::Burstable)]
#[case::burstable_limits_only_undefaulted(vec![container("a", "", "cpu=1,memory=1Gi")], vec![], QosClass::Burstable)]
#[case::burstable_best_effort_init(
    vec![container("a", "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi")], vec![container("i", "", "")], QosClass::Burstable)]
#[case::guaranteed_with_guaranteed_init(
    vec![container("a", "cpu=100m,memory=100Mi", "cpu=100m,memory=100Mi")],
    vec![container("i", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")], QosClass::Guaranteed)]
#[case::burstable_from_init_only(vec![container("a", "", "")], vec![container("i", "cpu=1", "")], QosClass::Burstable)]
fn qos_class_follows_get_pod_qos(
    #[case] containers: Vec<Container>,
    #[case] init: Vec<Container>,
    #[case] expected: QosClass,
) {
    assert_eq!(pod_with(containers, init).qos_class(), expected);
}

#[test]
fn qos_class_ignores_the_status_field() {
    let mut pod = pod_with(vec![container("a", "", "")], vec![]);
    pod.status.qos_class = Some("Guaranteed".into());
    assert_eq!(pod.qos_class(), QosClass::BestEffort);
}

fn annotated(namespace: &str, annotations: &[(&str, &str)], priority: Option<i32>) -> Pod {
    let mut pod = pod_with(vec![container("a", "", "")], vec![]);
    pod.metadata.namespace = namespace.into();
    pod.metadata.annotations = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    pod.spec.priority = priority;
    pod
}

#[rstest]
#[case::plain_api_pod(annotated("default", &[(CONFIG_SOURCE_ANNOTATION, "api")], None), false, false, false)]
#[case::no_source_annotation(annotated("kube-system", &[], Some(1000)), false, false, false)]
#[case::static_file_pod(annotated("kube-system", &[(CONFIG_SOURCE_ANNOTATION, "file")], None), true, false, true)]
#[case::static_http_pod(annotated("default", &[(CONFIG_SOURCE_ANNOTATION, "http")], None), true, false, true)]
#[case::mirror_pod(annotated("kube-system", &[(CONFIG_SOURCE_ANNOTATION, "api"), (CONFIG_MIRROR_ANNOTATION, "h")], None), false, true, true)]
#[case::system_cluster_critical_priority(annotated("kube-system", &[], Some(2_000_000_000)), false, false, true)]
#[case::system_node_critical_priority(annotated("kube-system", &[], Some(2_000_001_000)), false, false, true)]
#[case::just_below_critical(annotated("kube-system", &[], Some(1_999_999_999)), false, false, false)]
#[case::old_critical_annotation_no_longer_counts(
    annotated("kube-system", &[("scheduler.alpha.kubernetes.io/critical-pod", "")], None), false, false, false)]
fn criticality(
    #[case] pod: Pod,
    #[case] is_static: bool,
    #[case] is_mirror: bool,
    #[case] critical: bool,
) {
    assert_eq!(pod.is_static(), is_static, "is_static");
    assert_eq!(pod.is_mirror(), is_mirror, "is_mirror");
    assert_eq!(pod.is_critical(), critical, "is_critical");
}

#[test]
fn node_critical_needs_the_class_name() {
    let pods = pods();
    assert!(
        pods[2].is_node_critical(),
        "mirror etcd with system-node-critical"
    );
    assert!(!pods[0].is_node_critical());
}

#[rstest]
#[case::containers_sum(vec![container("a", "cpu=100m", ""), container("b", "cpu=250m", "")], vec![], "cpu", "350m")]
#[case::init_larger_than_sum(vec![container("a", "memory=1Gi", "")], vec![container("i", "memory=3Gi", "")], "memory", "3Gi")]
#[case::sum_larger_than_init(
    vec![container("a", "memory=1Gi", ""), container("b", "memory=1Gi", "")], vec![container("i", "memory=1536Mi", "")], "memory", "2Gi")]
#[case::max_of_init_containers(
    vec![container("a", "cpu=100m", "")], vec![container("i", "cpu=1", ""), container("j", "cpu=2", ""), container("k", "cpu=500m", "")], "cpu", "2")]
#[case::sidecar_adds_to_steady_state(vec![container("a", "cpu=1", "")], vec![sidecar("s", "cpu=500m")], "cpu", "1500m")]
#[case::sidecar_counts_during_later_init(
    vec![container("a", "cpu=100m", "")], vec![sidecar("s", "cpu=500m"), container("i", "cpu=2", "")], "cpu", "2500m")]
#[case::sidecar_after_init_does_not(
    vec![container("a", "cpu=100m", "")], vec![container("i", "cpu=2", ""), sidecar("s", "cpu=500m")], "cpu", "2")]
#[case::unset_is_zero(vec![container("a", "cpu=1", "")], vec![], "memory", "0")]
#[case::extended_resource(vec![container("a", "nvidia.com/gpu=1", "")], vec![], "nvidia.com/gpu", "1")]
fn requests_follow_pod_requests(
    #[case] containers: Vec<Container>,
    #[case] init: Vec<Container>,
    #[case] resource: &str,
    #[case] expected: &str,
) {
    assert_eq!(pod_with(containers, init).requests(resource), q(expected));
}

#[test]
fn requests_of_the_fixture() {
    let pods = pods();
    // batch-0: steady = work 1 + proxy 100m; init peak = fetch 2 (before the sidecar).
    assert_eq!(pods[1].requests("cpu"), q("2"));
    // memory: steady 512Mi + 64Mi = 576Mi; fetch 1Gi alone beats it.
    assert_eq!(pods[1].requests("memory"), q("1Gi"));
    assert_eq!(pods[0].requests("memory"), q("256Mi"));
}

#[rstest]
#[case::all_limited(vec![container("a", "", "memory=1Gi"), container("b", "", "memory=1Gi")], vec![], "memory", Some("2Gi"))]
#[case::one_unlimited(vec![container("a", "", "memory=1Gi"), container("b", "", "")], vec![], "memory", None)]
#[case::zero_is_unlimited(vec![container("a", "", "cpu=0")], vec![], "cpu", None)]
#[case::unlimited_init_container(vec![container("a", "", "memory=1Gi")], vec![container("i", "", "")], "memory", None)]
#[case::init_limit_dominates(vec![container("a", "", "memory=1Gi")], vec![container("i", "", "memory=4Gi")], "memory", Some("4Gi"))]
fn limits_need_every_container(
    #[case] containers: Vec<Container>,
    #[case] init: Vec<Container>,
    #[case] resource: &str,
    #[case] expected: Option<&str>,
) {
    assert_eq!(pod_with(containers, init).limits(resource), expected.map(q));
}

#[rstest]
#[case::status_image_id("docker.io/library/nginx@sha256:abc123", true)]
#[case::status_image("docker.io/library/nginx:1.27", true)]
#[case::spec_image("nginx:1.27", true)]
#[case::other_image("nginx:1.26", false)]
#[case::empty_never_matches("", false)]
fn uses_image_matches_status_and_spec(#[case] image: &str, #[case] expected: bool) {
    assert_eq!(pods()[0].uses_image(image), expected);
}

#[rstest]
#[case::exists_any_key(Toleration { operator: "Exists".into(), ..Default::default() }, true)]
#[case::exists_key(Toleration { key: "node.kubernetes.io/memory-pressure".into(), operator: "Exists".into(), ..Default::default() }, true)]
#[case::exists_other_key(Toleration { key: "other".into(), operator: "Exists".into(), ..Default::default() }, false)]
#[case::equal_value(Toleration { key: "node.kubernetes.io/memory-pressure".into(), value: "".into(), effect: "NoSchedule".into(), ..Default::default() }, true)]
#[case::wrong_effect(Toleration { key: "node.kubernetes.io/memory-pressure".into(), operator: "Exists".into(), effect: "NoExecute".into(), ..Default::default() }, false)]
#[case::wrong_value(Toleration { key: "node.kubernetes.io/memory-pressure".into(), value: "x".into(), ..Default::default() }, false)]
fn toleration_matches_taint(#[case] toleration: Toleration, #[case] expected: bool) {
    assert_eq!(
        toleration.tolerates("node.kubernetes.io/memory-pressure", "", "NoSchedule"),
        expected
    );
}

/// A pod parsed from `spec` (JSON), defaulted as the API server would.
fn pod_spec(spec: &str) -> Pod {
    parse_pod(
        &format!(r#"{{"metadata":{{"name":"p"}},"spec":{spec}}}"#),
        "p.json",
    )
    .unwrap_or_else(|e| panic!("{spec}: {e}"))
}

// kubelet: qos_test.go TestComputePodQOSWithPodLevelResources: with `spec.resources`
// the pod-level values alone decide, whatever the containers say.
#[rstest]
#[case::guaranteed_at_pod_level_best_effort_containers(
    r#"{"resources":{"requests":{"cpu":"1","memory":"1Gi"},"limits":{"cpu":"1","memory":"1Gi"}},"containers":[{"name":"c"}]}"#,
    QosClass::Guaranteed
)]
#[case::burstable_at_pod_level_guaranteed_containers(
    r#"{"resources":{"limits":{"memory":"2Gi"}},"containers":[{"name":"c","resources":{"limits":{"cpu":"1","memory":"1Gi"}}}]}"#,
    QosClass::Burstable
)]
#[case::limits_only_default_requests_to_limits(
    r#"{"resources":{"limits":{"cpu":"500m","memory":"256Mi"}},"containers":[{"name":"c"}]}"#,
    QosClass::Guaranteed
)]
#[case::memory_only_is_burstable(
    r#"{"resources":{"requests":{"memory":"256Mi"},"limits":{"memory":"256Mi"}},"containers":[{"name":"c"}]}"#,
    QosClass::Burstable
)]
#[case::empty_pod_level_resources_are_best_effort(
    r#"{"resources":{},"containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}}]}"#,
    QosClass::BestEffort
)]
fn pod_level_resources_decide_the_qos_class(#[case] spec: &str, #[case] expected: QosClass) {
    assert_eq!(pod_spec(spec).qos_class(), expected, "{spec}");
}

#[test]
fn pod_level_requests_default_from_containers_then_from_limits() {
    // kubelet: defaults_test.go TestPodLevelResourcesDefaults (defaultPodRequests): memory
    // is requested by a container, so the pod requests the containers' aggregate; cpu is
    // requested by nobody, so the pod requests its cpu limit.
    let pod = pod_spec(
        r#"{"resources":{"limits":{"cpu":"2","memory":"4Gi"}},"containers":[{"name":"a","resources":{"requests":{"memory":"1Gi"}}},{"name":"b","resources":{"requests":{"memory":"512Mi"}}}]}"#,
    );
    let resources = pod.spec.resources.as_ref().expect("pod-level resources");
    assert_eq!(resources.requests["memory"], q("1536Mi"));
    assert_eq!(resources.requests["cpu"], q("2"));
    // defaultPodLimits: pod-level requests without limits take the containers' aggregate
    // limit when every container sets one (memory), and stay unlimited otherwise (cpu).
    let pod = pod_spec(
        r#"{"resources":{"requests":{"cpu":"1","memory":"1Gi"}},"containers":[{"name":"a","resources":{"limits":{"cpu":"1","memory":"2Gi"}}},{"name":"b","resources":{"limits":{"memory":"1Gi"}}}]}"#,
    );
    let resources = pod.spec.resources.as_ref().expect("pod-level resources");
    assert_eq!(resources.limits.get("memory"), Some(&q("3Gi")));
    assert_eq!(resources.limits.get("cpu"), None);
}

// component-helpers helpers_test.go TestPodRequests "pod-level resources" and "pod overhead":
// admission counts the pod-level request where set, the containers' aggregate elsewhere,
// plus the overhead.
#[test]
fn admission_requests_use_pod_level_values_and_add_the_overhead() {
    let pod = pod_spec(
        r#"{"resources":{"requests":{"memory":"1Gi"},"limits":{"memory":"1Gi"}},"overhead":{"memory":"100Mi","cpu":"250m"},"containers":[{"name":"a","resources":{"requests":{"cpu":"500m","memory":"128Mi","ephemeral-storage":"1Gi"}}}]}"#,
    );
    assert_eq!(
        pod.requests("memory"),
        q("1124Mi"),
        "pod-level 1Gi + overhead"
    );
    assert_eq!(pod.requests("cpu"), q("750m"), "containers' cpu + overhead");
    assert_eq!(
        pod.requests("ephemeral-storage"),
        q("1Gi"),
        "not a pod-level resource"
    );
    assert_eq!(
        pod.limits("memory"),
        Some(q("1124Mi")),
        "pod-level limit + overhead"
    );
    assert_eq!(pod.limits("cpu"), None);
}

// kubelet: pkg/api/v1/resource helpers_test.go TestGetResourceRequest, pod-level and
// overhead cases: ranking counts only pod-level requests when the pod has them (so
// ephemeral-storage requests of containers drop out), and adds the overhead only to a
// request that is not zero.
#[test]
fn ranking_requests_follow_get_resource_request_quantity() {
    let pod_level = pod_spec(
        r#"{"resources":{"requests":{"memory":"1Gi"},"limits":{"memory":"1Gi"}},"overhead":{"memory":"100Mi","ephemeral-storage":"1Mi"},"containers":[{"name":"a","resources":{"requests":{"memory":"128Mi","ephemeral-storage":"1Gi"}}}]}"#,
    );
    assert_eq!(pod_level.ranking_request("memory"), q("1124Mi"));
    assert_eq!(
        pod_level.ranking_request("ephemeral-storage"),
        Quantity::ZERO
    );
    let containers_only = pod_spec(
        r#"{"overhead":{"memory":"100Mi","cpu":"1"},"containers":[{"name":"a","resources":{"requests":{"memory":"128Mi"}}}]}"#,
    );
    assert_eq!(containers_only.ranking_request("memory"), q("228Mi"));
    assert_eq!(
        containers_only.ranking_request("cpu"),
        Quantity::ZERO,
        "no overhead on a zero request"
    );
    assert_eq!(
        containers_only.requests("cpu"),
        q("1"),
        "admission adds it anyway"
    );
    // Without pod-level resources or overhead nothing changes.
    let plain =
        pod_spec(r#"{"containers":[{"name":"a","resources":{"requests":{"memory":"128Mi"}}}]}"#);
    assert_eq!(plain.ranking_request("memory"), plain.requests("memory"));
}

#[rstest]
#[case::pod_level_request_above_limit(
    r#"{"resources":{"requests":{"memory":"2Gi"},"limits":{"memory":"1Gi"}},"containers":[{"name":"c"}]}"#,
    "p.json: spec.resources.requests.memory"
)]
#[case::negative_overhead(
    r#"{"overhead":{"memory":"-1Mi"},"containers":[{"name":"c"}]}"#,
    "p.json: spec.overhead.memory"
)]
#[case::malformed_pod_level_limit(
    r#"{"resources":{"limits":{"cpu":"lots"}},"containers":[{"name":"c"}]}"#,
    "p.json: spec.resources.limits.cpu"
)]
fn bad_pod_level_resources_name_the_field(#[case] spec: &str, #[case] expected: &str) {
    let text = format!(r#"{{"metadata":{{"name":"p"}},"spec":{spec}}}"#);
    let err = parse_pod(&text, "p.json").expect_err(spec).to_string();
    assert!(err.contains(expected), "{err}");
}

// The API server's name rules (apimachinery validation IsDNS1123Subdomain / IsDNS1123Label):
// names become paths, so one that could climb out of them must be refused with its field.
#[rstest]
#[case::pod_name_with_a_slash(
    r#"{"metadata":{"name":"../x"},"spec":{"containers":[{"name":"c"}]}}"#,
    "p.json: metadata.name"
)]
#[case::pod_name_uppercase(
    r#"{"metadata":{"name":"Web"},"spec":{"containers":[{"name":"c"}]}}"#,
    "p.json: metadata.name"
)]
#[case::namespace_with_a_slash(
    r#"{"metadata":{"name":"a","namespace":"x/y"},"spec":{"containers":[{"name":"c"}]}}"#,
    "p.json: metadata.namespace"
)]
#[case::namespace_dotted(
    r#"{"metadata":{"name":"a","namespace":"a.b"},"spec":{"containers":[{"name":"c"}]}}"#,
    "p.json: metadata.namespace"
)]
#[case::container_dotdot(
    r#"{"metadata":{"name":"a"},"spec":{"containers":[{"name":".."}]}}"#,
    "p.json: spec.containers[0].name"
)]
#[case::uid_path(
    r#"{"metadata":{"name":"a","uid":"../../etc/x"},"spec":{"containers":[{"name":"c"}]}}"#,
    "p.json: metadata.uid"
)]
fn unsafe_names_are_refused_with_their_field(#[case] text: &str, #[case] expected: &str) {
    let err = parse_pod(text, "p.json").expect_err(text).to_string();
    assert!(err.contains(expected), "{err}");
}

// The restart policies the kubelet knows; anything else would run as Always.
#[rstest]
#[case::always(r#""restartPolicy":"Always","#, None)]
#[case::on_failure(r#""restartPolicy":"OnFailure","#, None)]
#[case::never(r#""restartPolicy":"Never","#, None)]
#[case::unset("", None)]
#[case::empty_is_unset(r#""restartPolicy":"","#, None)]
#[case::sometimes(
    r#""restartPolicy":"Sometimes","#,
    Some(r#"p.yaml: spec.restartPolicy: "Sometimes" is not one of Always, OnFailure, Never"#)
)]
#[case::lowercase(
    r#""restartPolicy":"always","#,
    Some(r#"p.yaml: spec.restartPolicy: "always" is not one of"#)
)]
#[case::sidecar_typo(
    r#""initContainers":[{"name":"proxy","restartPolicy":"Allways"}],"#,
    Some(r#"p.yaml: spec.initContainers[0].restartPolicy: "Allways" is not one of"#)
)]
fn restart_policies_outside_the_three_are_refused_with_file_and_field(
    #[case] field: &str,
    #[case] expected: Option<&str>,
) {
    let text =
        format!(r#"{{"metadata":{{"name":"p"}},"spec":{{{field}"containers":[{{"name":"c"}}]}}}}"#);
    match (parse_pod(&text, "p.yaml"), expected) {
        (Ok(_), None) => {}
        (Err(err), Some(expected)) => {
            assert!(err.to_string().starts_with(expected), "{err}");
        }
        (result, expected) => panic!("{text}: {result:?}, expected {expected:?}"),
    }
}

#[test]
fn kubernetes_names_pass() {
    let pod = parse_pod(
        r#"{"metadata":{"name":"web-7d9c6b8f4-x2k8p.v1","namespace":"kube-system","uid":"9a1f7c3e-0000-4000-8000-000000000002"},"spec":{"containers":[{"name":"app-1"}]}}"#,
        "p.json",
    )
    .expect("valid names");
    assert_eq!(pod.key(), "kube-system/web-7d9c6b8f4-x2k8p.v1");
}

#[rstest]
#[case::latest("busybox:latest", None, "Always")]
#[case::untagged("registry.local/app", None, "Always")]
#[case::registry_port_is_no_tag("registry.local:5000/app", None, "Always")]
#[case::tagged("registry.local:5000/app:v1", None, "IfNotPresent")]
#[case::digest("app@sha256:0123abcd", None, "IfNotPresent")]
#[case::tag_and_digest("app:latest@sha256:0123abcd", None, "IfNotPresent")]
#[case::explicit("busybox:latest", Some("Never"), "Never")]
fn the_pull_policy_defaults_as_the_api_server_does(
    #[case] image: &str,
    #[case] explicit: Option<&str>,
    #[case] expected: &str,
) {
    let mut c = container("c", "", "");
    c.image = image.into();
    c.image_pull_policy = explicit.map(str::to_string);
    assert_eq!(c.pull_policy(), expected);
}
