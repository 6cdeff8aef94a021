//! One file per kernel program.
mod direct_reclaim;
mod kswapd_wake;
mod memcg_reclaim;
mod oom_victim;
