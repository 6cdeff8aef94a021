//! The API's routing of one request: method and request target (path and query string),
//! on the unix socket (every route) and on the TCP metrics listener. The first line of
//! the input is `METHOD TARGET`, as in a request line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::api::{Scope, respond};
use monitor::events::EventReason;
use monitor::state::{AgentState, SharedState};

/// A state with a few events, so that paging and rendering have something to show.
fn state() -> AgentState {
    let shared = SharedState::default();
    for i in 0..5 {
        shared.event(EventReason::Started, "node", format!("event {i}"));
    }
    shared.event(EventReason::Evicted, "default/web", "memory.available<100Mi");
    let mut state = shared.read();
    state.events.pop_front();
    state.events_dropped = 1;
    state.conditions = vec!["MemoryPressure".to_string()];
    state
}

fuzz_target!(|data: &[u8]| {
    // The server hands the routes the method and target as text: hyper accepts no
    // request line that is not.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let line = text.split('\n').next().unwrap_or_default();
    let (method, target) = line.split_once(' ').unwrap_or((line, "/"));
    let state = state();
    for scope in [Scope::Full, Scope::MetricsOnly] {
        let reply = respond(&state, scope, method, target);
        assert!(
            (200..600).contains(&reply.status),
            "{method} {target}: status {}",
            reply.status
        );
    }
});
