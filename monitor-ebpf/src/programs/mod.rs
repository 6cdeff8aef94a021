//! One file per kernel program.
mod crossing;
mod direct_reclaim;
mod kill_signal;
mod kswapd_wake;
mod memcg_reclaim;
mod oom_victim;
