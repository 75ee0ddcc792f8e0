//! A real `redis-server` for tests: started from `PATH` on a free loopback
//! port, with no persistence, and stopped when dropped. A missing binary is
//! a loud failure that says how to install it — never a silent pass.

use std::io;
use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Its working directory: the append-only file lives here, so a
    /// server killed and restarted keeps what it had acknowledged.
    dir: std::path::PathBuf,
}

impl RedisServer {
    /// Starts a server, or fails with instructions when `redis-server` is
    /// not installed.
    pub fn start() -> io::Result<Self> {
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("understudy-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut server = Self {
            port,
            child: None,
            dir,
        };
        server.spawn()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (as if it crashed); [`Self::restart`] brings it back
    /// on the same port with the data it had acknowledged (append-only file,
    /// fsync on every write).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop();
        self.spawn()
    }

    fn spawn(&mut self) -> io::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot start redis-server ({e}): install it (Debian: `apt-get install redis-server`) \
                         so that `redis-server` is on PATH"
                    ),
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if ping(self.port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "redis-server did not answer PING within 10 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> io::Result<u16> {
    let listener = StdListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A raw RESP `PING`, so this helper needs no Redis client.
fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}
