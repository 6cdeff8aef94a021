//! Raw bytes on an API connection: HTTP/1.1 requests (pipelined, with bodies, or
//! malformed) read by the agent's own connection handler, as a client on the socket
//! sends them.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use monitor::api::{Scope, serve_connection};
use monitor::events::EventReason;
use monitor::state::SharedState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fn state() -> &'static SharedState {
    static STATE: OnceLock<SharedState> = OnceLock::new();
    STATE.get_or_init(|| {
        let shared = SharedState::default();
        for i in 0..3 {
            shared.event(EventReason::Started, "node", format!("event {i}"));
        }
        shared
    })
}

fuzz_target!(|data: &[u8]| {
    let input = data.to_vec();
    runtime().block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let serve = serve_connection(server, state().clone(), Scope::Full);
        // The client sends everything and closes its side while it reads every answer:
        // the server then sees the end of the stream and the connection ends.
        let (mut reader, mut writer) = tokio::io::split(client);
        let send = async move {
            let _ = writer.write_all(&input).await;
            let _ = writer.shutdown().await;
        };
        let receive = async move {
            let mut answers = Vec::new();
            let _ = reader.read_to_end(&mut answers).await;
        };
        tokio::join!(serve, send, receive);
    });
});
