//! [`Proxy`]: a TCP proxy on a free loopback port that can make the
//! network misbehave the way real deployments do, for tests of a backend's
//! connection handling.
//!
//! A peer that vanishes behind a NAT or a failover sends neither FIN nor
//! RST: its connections stay open and nothing arrives on them any more.
//! [`Proxy::silence`] does that to every connection (a black hole: bytes
//! are neither forwarded nor refused, no socket is closed, new connections
//! are accepted and held the same way) until [`Proxy::resume`];
//! [`Proxy::strand`] does it for good to the connections open now while
//! new ones pass (a NAT that lost its table, a failover to a new address);
//! [`Proxy::reset`] closes every connection with an RST;
//! [`Proxy::retarget`] sends new connections to another server and leaves
//! the open ones where they are (a virtual IP or an HAProxy moved to a new
//! primary after a failover).
//!
//! One task per connection forwards both directions; a silenced direction
//! stops reading, so the sender's kernel buffers fill as they would
//! against a dead peer, and what it had read is held, not lost, until
//! the connection flows again.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let proxy = jq_testkit::proxy::Proxy::start("127.0.0.1:5432".parse().unwrap()).await?;
//! let url = format!("postgres://postgres@{}/postgres", proxy.addr());
//! // ... connect through `url`, then:
//! proxy.strand(); // the open connections go silent; new ones pass
//! # let _ = url; Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What one connection does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Bytes pass both ways.
    Open,
    /// Nothing passes; both sockets stay open.
    Silent,
    /// Close both sockets with an RST.
    Reset,
}

/// A fault-injecting TCP proxy; see the [module docs](self). Dropping it
/// stops accepting and resets every connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    target: Mutex<SocketAddr>,
    state: Mutex<State>,
    accepted: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// How new connections start.
    new: Flow,
    /// The connections that [`Proxy::silence`], [`Proxy::resume`] and
    /// [`Proxy::reset`] act on (stranded ones only get reset).
    links: Vec<Link>,
}

#[derive(Debug)]
struct Link {
    flow: watch::Sender<Flow>,
    stranded: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection
    /// to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            state: Mutex::new(State { new: Flow::Open, links: Vec::new() }),
            accepted: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept(listener, shared.clone()));
        Ok(Proxy { addr, shared, accept })
    }

    /// The address to connect to instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards new connections to.
    pub fn target(&self) -> SocketAddr {
        *self.shared.target.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New connections go to `target` from now on; the open ones stay
    /// with the server they reached.
    pub fn retarget(&self, target: SocketAddr) {
        *self.shared.target.lock().unwrap_or_else(|e| e.into_inner()) = target;
    }

    /// Every connection, open or new, goes silent: nothing is forwarded
    /// either way and no socket is closed, until [`Proxy::resume`].
    pub fn silence(&self) {
        let mut state = self.shared.lock();
        state.new = Flow::Silent;
        for link in state.links.iter().filter(|l| !l.stranded) {
            link.flow.send_replace(Flow::Silent);
        }
    }

    /// Forwarding resumes on every connection [`Proxy::silence`] held
    /// (what it held is delivered, in order) and for new ones; stranded
    /// connections stay silent.
    pub fn resume(&self) {
        let mut state = self.shared.lock();
        state.new = Flow::Open;
        for link in state.links.iter().filter(|l| !l.stranded) {
            link.flow.send_replace(Flow::Open);
        }
    }

    /// The connections open now go silent for good (until
    /// [`Proxy::reset`]); new connections pass. What a client sees when
    /// its server fails over, or a NAT between them forgets them.
    pub fn strand(&self) {
        let mut state = self.shared.lock();
        state.new = Flow::Open;
        for link in &mut state.links {
            link.stranded = true;
            link.flow.send_replace(Flow::Silent);
        }
    }

    /// Closes every open connection, stranded ones included, with an RST
    /// on both sides. New connections are not affected.
    pub fn reset(&self) {
        let mut state = self.shared.lock();
        for link in state.links.drain(..) {
            link.flow.send_replace(Flow::Reset);
        }
    }

    /// How many connections are open through the proxy now.
    pub fn open_connections(&self) -> usize {
        let mut state = self.shared.lock();
        state.links.retain(|l| !l.flow.is_closed());
        state.links.len()
    }

    /// How many connections the proxy has accepted since it started.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(error) => {
                tracing::warn!(%error, "test proxy: accept failed");
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        let (flow, watch) = {
            let mut state = shared.lock();
            state.links.retain(|l| !l.flow.is_closed());
            let (flow, watch) = watch::channel(state.new);
            state.links.push(Link { flow: flow.clone(), stranded: false });
            (flow, watch)
        };
        let target = *shared.target.lock().unwrap_or_else(|e| e.into_inner());
        tokio::spawn(async move {
            // The sender lives in the proxy's list; this one keeps the
            // channel open for as long as the link runs.
            let _flow = flow;
            let server = match TcpStream::connect(target).await {
                Ok(server) => server,
                Err(error) => {
                    tracing::warn!(%error, %target, "test proxy: cannot reach the target; closing the client");
                    return;
                }
            };
            link(client, server, watch).await;
        });
    }
}

/// Forwards both ways until both directions end or the link is reset.
async fn link(mut client: TcpStream, mut server: TcpStream, flow: watch::Receiver<Flow>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let reset = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let (up, down) = tokio::join!(
            pump(&mut client_read, &mut server_write, flow.clone()),
            pump(&mut server_read, &mut client_write, flow),
        );
        up || down
    };
    if reset {
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}

/// Copies one direction while the flow is open; returns true when the link
/// was reset, false when the direction ended (EOF, passed on, or an error).
async fn pump(
    from: &mut tokio::net::tcp::ReadHalf<'_>,
    to: &mut tokio::net::tcp::WriteHalf<'_>,
    mut flow: watch::Receiver<Flow>,
) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match wait_open(&mut flow).await {
            Flow::Reset => return true,
            Flow::Open | Flow::Silent => {}
        }
        // Reading is cancel safe: a change of flow mid-read loses nothing.
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return false;
                }
                Ok(n) => n,
            },
            _ = flow.changed() => continue,
        };
        // Silenced between the read and the write: hold the bytes.
        if wait_open(&mut flow).await == Flow::Reset {
            return true;
        }
        tokio::select! {
            written = to.write_all(&buf[..n]) => if written.is_err() { return false },
            _ = wait_reset(flow.clone()) => return true,
        }
    }
}

/// Waits until the flow is Open or Reset, and returns which.
async fn wait_open(flow: &mut watch::Receiver<Flow>) -> Flow {
    match flow.wait_for(|f| *f != Flow::Silent).await {
        Ok(f) => *f,
        Err(_) => Flow::Reset, // the proxy is gone
    }
}

async fn wait_reset(mut flow: watch::Receiver<Flow>) {
    let _ = flow.wait_for(|f| *f == Flow::Reset).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An echo server on a free port.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).await.unwrap();
        let mut got = vec![0; msg.len()];
        s.read_exact(&mut got).await.unwrap();
        got
    }

    /// Waits for `what` with a deadline (never a sleep to synchronise).
    async fn eventually(what: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !what() {
            assert!(tokio::time::Instant::now() < deadline, "condition not reached within 10 s");
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn forwards_both_ways() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
        assert_eq!(proxy.accepted(), 1);
        assert_eq!(proxy.open_connections(), 1);
        drop(s);
        eventually(|| proxy.open_connections() == 0).await;
    }

    #[tokio::test]
    async fn silence_holds_bytes_without_closing_and_resume_delivers_them() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"a").await, b"a");
        proxy.silence();
        s.write_all(b"held").await.unwrap();
        let mut got = [0u8; 4];
        // A window in which nothing may arrive, and the socket must not close.
        let read = tokio::time::timeout(Duration::from_millis(200), s.read(&mut got)).await;
        assert!(read.is_err(), "nothing passes a silent proxy: {read:?}");
        // New connections are held too.
        let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
        late.write_all(b"x").await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(100), late.read(&mut got)).await.is_err());
        proxy.resume();
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"held", "what was held is delivered");
        let mut one = [0u8; 1];
        late.read_exact(&mut one).await.unwrap();
        assert_eq!(&one, b"x");
        assert_eq!(roundtrip(&mut s, b"after").await, b"after");
    }

    #[tokio::test]
    async fn strand_silences_open_connections_for_good_and_lets_new_ones_pass_even_after_a_silence() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut old, b"a").await, b"a");
        proxy.silence();
        proxy.strand();
        old.write_all(b"b").await.unwrap();
        let mut got = [0u8; 1];
        assert!(tokio::time::timeout(Duration::from_millis(200), old.read(&mut got)).await.is_err());
        let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut new, b"c").await, b"c");
        proxy.resume();
        assert!(
            tokio::time::timeout(Duration::from_millis(100), old.read(&mut got)).await.is_err(),
            "resume does not revive a stranded connection"
        );
        assert_eq!(proxy.open_connections(), 2);
    }

    #[tokio::test]
    async fn reset_closes_every_connection_and_new_ones_pass() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut a, b"a").await, b"a");
        let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut b, b"b").await, b"b");
        proxy.strand();
        proxy.reset();
        for s in [&mut a, &mut b] {
            let mut got = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut got)).await.unwrap();
            assert!(matches!(read, Ok(0) | Err(_)), "a reset connection ends: {read:?}");
        }
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut c, b"c").await, b"c");
    }
}
