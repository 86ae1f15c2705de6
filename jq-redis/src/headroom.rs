//! Headroom: noticing, and saying, that the server has no connection left.
//!
//! A Redis whose `maxclients` are taken answers a new connection with an
//! error line, unasked, and closes it. The redis crate sends its setup
//! commands first and sees only the closed socket ("broken pipe",
//! "connection reset"). So after a call fails so, one plain TCP connection
//! of its own (at most one per [`LOOK_EVERY`] per storage) listens to what
//! the server says before anything is sent: a healthy server says
//! nothing, a full one refuses at once. While it refuses, the call's
//! error says so, the first refusal of an episode is a warning that says
//! jq retries, and a line says when connections are accepted again.
//!
//! The refusal is recognised by its behaviour (an error line before any
//! command), not by its text, which servers word their own way; the text
//! is quoted in the error.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, RedisError};
use tokio::io::AsyncReadExt;

/// The shortest time between two looks of one storage.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long a look listens for the server's refusal.
const LISTEN_FOR: Duration = Duration::from_millis(250);

/// What the last look found.
#[derive(Debug, Default)]
struct Seen {
    looked: Option<Instant>,
    /// Since when the server refuses new connections, and what it says.
    refused: Option<(Instant, String)>,
}

/// A storage's view of the server's connection slots.
#[derive(Debug)]
pub(crate) struct Headroom {
    /// host:port; `None` when it cannot be looked at in plain TCP (TLS, a
    /// Unix socket, a cluster).
    addr: Option<(String, u16)>,
    seen: Mutex<Seen>,
    /// `seen.refused.is_some()`, read without the lock on every call.
    refusing: AtomicBool,
    looking: tokio::sync::Mutex<()>,
}

impl Headroom {
    /// Looks at the server of `addr` (only plain TCP is looked at).
    pub(crate) fn new(addr: Option<&ConnectionAddr>) -> Headroom {
        let addr = match addr {
            Some(ConnectionAddr::Tcp(host, port)) => Some((host.clone(), *port)),
            _ => None,
        };
        Headroom {
            addr,
            seen: Mutex::new(Seen::default()),
            refusing: AtomicBool::new(false),
            looking: tokio::sync::Mutex::new(()),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a call's answer: a lost or refused connection makes it look
    /// (and the error say why, while the server refuses); a success during
    /// a refusal looks again, to say when connections are back.
    pub(crate) async fn answered<T>(&self, answer: redis::RedisResult<T>) -> redis::RedisResult<T> {
        match answer {
            Ok(value) => {
                if self.refusing.load(Ordering::Relaxed) {
                    self.look().await;
                }
                Ok(value)
            }
            Err(error) if error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal() => {
                self.look().await;
                let refused = self.seen().refused.as_ref().map(|(_, said)| said.clone());
                match (refused, &self.addr) {
                    (Some(said), Some((host, port))) => Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        format!(
                            "Redis at {host}:{port} has no connection left to give: it refuses new connections \
                             (\"{said}\"; its maxclients are taken by other clients); jq retries and goes on when \
                             one frees ({error})"
                        ),
                    ))),
                    _ => Err(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Listens to a new connection's first words, unless another look is
    /// under way or one began within [`LOOK_EVERY`].
    async fn look(&self) {
        let Some((host, port)) = &self.addr else { return };
        let Ok(_turn) = self.looking.try_lock() else { return };
        {
            let mut seen = self.seen();
            if seen.looked.is_some_and(|at| at.elapsed() < LOOK_EVERY) {
                return;
            }
            seen.looked = Some(Instant::now());
        }
        let heard = async {
            let mut stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await.ok()?;
            let mut buf = [0u8; 256];
            match tokio::time::timeout(LISTEN_FOR, stream.read(&mut buf)).await {
                // Silence: the server waits for a command, as it should.
                Err(_) => Some(None),
                Ok(Ok(n)) if n > 0 && buf[0] == b'-' => {
                    let line = String::from_utf8_lossy(&buf[1..n]);
                    Some(Some(line.lines().next().unwrap_or_default().trim().to_owned()))
                }
                // Closed or anything else: not this module's to say.
                Ok(_) => None,
            }
        };
        let Some(refused) = tokio::time::timeout(LISTEN_FOR * 4, heard).await.ok().flatten() else { return };
        let mut seen = self.seen();
        self.refusing.store(refused.is_some(), Ordering::Relaxed);
        match (refused, seen.refused.take()) {
            (Some(said), None) => {
                tracing::warn!(
                    server = format!("{host}:{port}"),
                    said,
                    "Redis has no connection left to give (it refuses new connections: its maxclients are \
                     taken): jq's calls retry until one frees"
                );
                seen.refused = Some((Instant::now(), said));
            }
            (Some(said), Some((since, _))) => seen.refused = Some((since, said)),
            (None, Some((since, _))) => {
                tracing::info!(server = format!("{host}:{port}"), without = ?since.elapsed(), "Redis accepts connections again")
            }
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that refuses at once, as a full Redis does, is heard; the
    /// call's error then says so and stays retryable.
    #[tokio::test]
    async fn a_refusal_before_any_command_is_heard() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut socket, _)) = listener.accept().await {
                let _ = socket.write_all(b"-ERR max number of clients reached\r\n").await;
            }
        });
        let slots = Headroom::new(Some(&ConnectionAddr::Tcp("127.0.0.1".into(), port)));
        let dropped = RedisError::from(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe"));
        let error = slots.answered::<()>(Err(dropped)).await.unwrap_err();
        assert!(crate::error::is_transient(&error), "{error}");
        assert!(error.to_string().contains("no connection left"), "{error}");
        assert!(error.to_string().contains("max number of clients reached"), "{error}");
    }

    /// A server that waits for a command, as a healthy one does, changes
    /// nothing.
    #[tokio::test]
    async fn silence_is_no_refusal() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let slots = Headroom::new(Some(&ConnectionAddr::Tcp("127.0.0.1".into(), port)));
        let dropped = RedisError::from(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe"));
        let error = slots.answered::<()>(Err(dropped)).await.unwrap_err();
        assert_eq!(error.to_string(), "broken pipe");
    }
}
