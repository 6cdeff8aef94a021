//! Criterion benchmark of the eviction policy alone: `EvictionManager::decide` with
//! 10, 110 (the kubelet's default maxPods) and 1000 pods under a met hard memory threshold,
//! so the whole path runs: signal comparison, node conditions, ranking of every pod
//! (kubelet: pkg/kubelet/eviction/helpers.go rankMemoryPressure) and the choice of one
//! victim. `cargo xtask bench` measures the same with real cgroups end to end.
//!
//! Run: `cargo bench -p monitor --bench policy`.
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use monitor::policy::eviction::{EvictionConfig, EvictionManager, Step, SyncInput};
use monitor::policy::pod::{Container, Pod};
use monitor::policy::quantity::{parse_quantity, parse_quantity_or_percent};
use monitor::policy::signal::{Observations, Signal, SignalObservation, Threshold};
use monitor::policy::stats::{PodStats, PodWithStats};

const MI: u64 = 1 << 20;

/// A mix of QoS classes: every third pod guaranteed, every third burstable, the rest
/// best-effort; working sets spread so the ranking has real work to do.
fn pods(count: usize) -> Vec<PodWithStats> {
    (0..count)
        .map(|i| {
            let mut pod = Pod::default();
            pod.metadata.name = format!("pod-{i}");
            pod.metadata.namespace = "bench".to_string();
            pod.metadata.uid = format!("uid-{i}");
            let mut container = Container {
                name: "main".to_string(),
                ..Container::default()
            };
            let memory = parse_quantity("128Mi").ok();
            let cpu = parse_quantity("100m").ok();
            if let (Some(memory), Some(cpu)) = (memory, cpu) {
                let resources = &mut container.resources;
                match i % 3 {
                    0 => {
                        for list in [&mut resources.requests, &mut resources.limits] {
                            list.insert("memory".to_string(), memory);
                            list.insert("cpu".to_string(), cpu);
                        }
                    }
                    1 => {
                        resources.requests.insert("memory".to_string(), memory);
                    }
                    _ => {}
                }
            }
            pod.spec.containers.push(container);
            PodWithStats {
                pod: pod.into(),
                stats: PodStats {
                    memory_working_set_bytes: Some((i as u64 % 97 + 1) * 3 * MI),
                    process_count: Some(1),
                    ..PodStats::default()
                },
            }
        })
        .collect()
}

fn input(count: usize) -> SyncInput {
    let mut observations = Observations::new();
    // 10 GiB node, 100 MiB available: memory.available<500Mi is met.
    observations.insert(
        Signal::MemoryAvailable,
        SignalObservation {
            available: (100 * MI) as i64,
            capacity: (10 * 1024 * MI) as i64,
            time: Duration::from_secs(10),
        },
    );
    SyncInput {
        observations,
        pods: pods(count),
        fs_layout: monitor::policy::types::FsLayout::Shared,
    }
}

fn synchronize(c: &mut Criterion) {
    let Ok(value) = parse_quantity_or_percent("500Mi") else {
        return;
    };
    let mut group = c.benchmark_group("synchronize");
    for count in [10usize, 110, 1000] {
        let input = input(count);
        group.bench_with_input(BenchmarkId::from_parameter(count), &input, |b, input| {
            b.iter(|| {
                // A fresh manager each time: every pass sees the threshold first met.
                let mut manager = EvictionManager::new(EvictionConfig {
                    thresholds: vec![Threshold::hard(Signal::MemoryAvailable, value)],
                    ..EvictionConfig::default()
                });
                match manager.decide(input, Duration::from_secs(10)) {
                    Step::Done(outcome) => outcome,
                    // Memory has no node-level reclaim: never reached.
                    Step::Reclaim(pending) => pending.outcome().clone(),
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, synchronize);
criterion_main!(benches);
