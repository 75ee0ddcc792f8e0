//! A shared Redis connection for request-path use (the cache, and shared
//! state): connected lazily, every call bounded by the caller's timeout,
//! and dropped on the first error so that the next call after
//! [`RETRY_EVERY`] reconnects. While it is down, callers get `None` at once
//! and fall back to local state.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// The least time between two connection attempts.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A lazily connected, self-healing Redis connection.
pub struct RedisLink {
    client: redis::Client,
    state: Mutex<LinkState>,
}

struct LinkState {
    conn: Option<MultiplexedConnection>,
    next_try: Instant,
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLink").finish_non_exhaustive()
    }
}

impl RedisLink {
    pub fn new(client: redis::Client) -> Self {
        Self {
            client,
            state: Mutex::new(LinkState {
                conn: None,
                next_try: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A connection, or `None` while Redis is down (without waiting).
    pub async fn conn(&self) -> Option<MultiplexedConnection> {
        {
            let mut st = self.lock();
            if let Some(c) = &st.conn {
                return Some(c.clone());
            }
            if Instant::now() < st.next_try {
                return None;
            }
            st.next_try = Instant::now() + RETRY_EVERY;
        }
        let connected = tokio::time::timeout(
            CONNECT_TIMEOUT,
            self.client.get_multiplexed_async_connection(),
        )
        .await;
        match connected {
            Ok(Ok(conn)) => {
                self.lock().conn = Some(conn.clone());
                Some(conn)
            }
            _ => None,
        }
    }

    /// The connection failed: drop it so the next call reconnects.
    pub fn broken(&self) {
        let mut st = self.lock();
        if st.conn.take().is_some() {
            st.next_try = Instant::now() + RETRY_EVERY;
        }
    }
}
