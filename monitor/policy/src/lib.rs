//! The eviction policy: pure functions of plain data and an explicit `now`. No I/O, no
//! clock reads, no globals: everything the kubelet's eviction, preemption, images, qos
//! and cm packages decide, reproduced here so it can be tested and simulated offline.

pub mod admission;
pub mod condition;
pub mod container_gc;
pub mod contention;
pub mod eviction;
pub mod explain;
pub mod image_gc;
pub mod memory_qos;
pub mod pod;
pub mod preemption;
pub mod qos;
pub mod quantity;
pub mod rank;
pub mod relief;
pub mod signal;
pub mod stall;
pub mod stats;
pub mod summary;
pub mod threshold;
pub mod types;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
