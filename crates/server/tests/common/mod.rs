//! Shared by the server's integration tests: the real server on a free
//! loopback port, stopped when the returned sender is dropped.

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use understudy_core::Engine;

/// Serves `engine` on `127.0.0.1:0`; returns its base URL and the sender
/// whose drop shuts it down.
pub async fn serve(engine: Engine) -> (String, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free loopback port");
    let url = format!("http://{}", listener.local_addr().expect("a bound address"));
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(understudy_server::serve(listener, engine, async move {
        let _ = stopped.await;
    }));
    (url, stop)
}
