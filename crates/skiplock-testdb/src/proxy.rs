//! A TCP proxy between the code under test and PostgreSQL that injects network faults.
//!
//! [`FaultProxy::start`] listens on a loopback port and forwards every connection to the
//! server; [`FaultProxy::url`] rewrites a connection URL to go through it. While it runs, a
//! test changes what happens to the traffic of some or all connections (chosen by a
//! [`Select`] on the startup packet, which holds the `application_name`):
//!
//! - [`Flow::Pass`]: bytes are forwarded;
//! - [`Flow::Hold`]: nothing is read from that side any more, so nothing is forwarded and
//!   nothing answers (no RST, no FIN): a black hole for as long as it lasts. Held bytes wait
//!   in the kernel's buffers, as a partitioned network's retransmissions would, and arrive
//!   once the flow passes again;
//! - [`Flow::Drop`]: bytes are read and thrown away (a reply that never arrives);
//! - [`FaultProxy::reset`]: both sockets are closed with RST;
//! - [`FaultProxy::swallow_reply_after`]: the next connection whose client sends bytes that
//!   contain a pattern forwards them, drops everything the server answers from then on, and
//!   is reset after a delay: the reply to a statement the server ran (and committed) is lost.
//!
//! New connections get the flows set with [`FaultProxy::set_default`] (a partition
//! black-holes new connections too: their startup is never answered).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What happens to the bytes of one direction of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flow {
    /// Forwarded.
    #[default]
    Pass,
    /// Not read: nothing is forwarded or answered, and nothing is lost (a black hole that
    /// can heal).
    Hold,
    /// Read and thrown away.
    Drop,
}

/// The flows of both directions of a connection, and whether it is to be reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flows {
    /// Client to server.
    pub up: Flow,
    /// Server to client.
    pub down: Flow,
    reset: bool,
}

impl Flows {
    /// Both directions forwarded.
    pub const PASS: Flows = Flows {
        up: Flow::Pass,
        down: Flow::Pass,
        reset: false,
    };
    /// Both directions held: a partition, or a half-open connection whose peer is gone.
    pub const BLACK_HOLE: Flows = Flows {
        up: Flow::Hold,
        down: Flow::Hold,
        reset: false,
    };
}

/// Which connections a change applies to.
#[derive(Debug, Clone)]
pub enum Select {
    /// Every connection.
    All,
    /// Connections whose startup packet contains this text (an `application_name`).
    Startup(String),
    /// Connections whose startup packet does not contain this text.
    NotStartup(String),
    /// Connections held in both directions (to reset half-open connections left behind).
    Held,
}

impl Select {
    fn matches(&self, c: &Conn) -> bool {
        match self {
            Select::All => true,
            Select::Startup(s) => lock(&c.startup).contains(s.as_str()),
            Select::NotStartup(s) => !lock(&c.startup).contains(s.as_str()),
            Select::Held => {
                let f = *c.flows.borrow();
                f.up == Flow::Hold && f.down == Flow::Hold
            }
        }
    }
}

struct Conn {
    /// The first client bytes (an SSL request, then the startup packet), as text.
    startup: Mutex<String>,
    flows: watch::Sender<Flows>,
}

struct Arm {
    pattern: Vec<u8>,
    cut_after: Duration,
}

#[derive(Default)]
struct Shared {
    conns: Mutex<Vec<Arc<Conn>>>,
    default: Mutex<Flows>,
    arm: Mutex<Option<Arm>>,
    accepted: AtomicU64,
    swallowed: AtomicU64,
    resets: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The proxy; it stops accepting when dropped (connections already made run on until they
/// close).
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.reset(&Select::All);
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding to `server` (`host:port`), on the
    /// current tokio runtime.
    pub async fn start(server: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn(accept_loop(listener, server, shared.clone()));
        Ok(FaultProxy {
            addr,
            shared,
            accept,
        })
    }

    /// Starts a proxy in front of the server of `url` (a `postgres://` URL with one TCP
    /// host).
    pub async fn for_url(url: &str) -> std::io::Result<FaultProxy> {
        let (host, port) = host_port(url)?;
        let server = tokio::net::lookup_host((host.as_str(), port))
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{host} has no address")))?;
        Self::start(server).await
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` (a `postgres://` URL) with its host and port replaced by the proxy's.
    pub fn url(&self, url: &str) -> std::io::Result<String> {
        let (host, port) = host_port(url)?;
        let from = format!("@{host}:{port}");
        let to = format!("@{}", self.addr);
        if url.contains(&from) {
            return Ok(url.replacen(&from, &to, 1));
        }
        let from = format!("//{host}:{port}");
        if url.contains(&from) {
            return Ok(url.replacen(&from, &format!("//{}", self.addr), 1));
        }
        Err(std::io::Error::other(format!(
            "cannot find {host}:{port} in the URL to route it through the proxy"
        )))
    }

    /// Sets the flows of the open connections that `select` picks; returns how many.
    pub fn set(&self, select: &Select, up: Flow, down: Flow) -> usize {
        let conns = lock(&self.shared.conns);
        let mut n = 0;
        for c in conns.iter().filter(|c| select.matches(c)) {
            c.flows.send_modify(|f| {
                f.up = up;
                f.down = down;
            });
            n += 1;
        }
        n
    }

    /// The flows new connections start with (default: pass).
    pub fn set_default(&self, up: Flow, down: Flow) {
        let mut d = lock(&self.shared.default);
        d.up = up;
        d.down = down;
    }

    /// Black-holes every connection, open and new: a partition.
    pub fn partition(&self) {
        self.set_default(Flow::Hold, Flow::Hold);
        self.set(&Select::All, Flow::Hold, Flow::Hold);
    }

    /// Ends a partition: every connection, open and new, passes again.
    pub fn heal(&self) {
        self.set_default(Flow::Pass, Flow::Pass);
        self.set(&Select::All, Flow::Pass, Flow::Pass);
    }

    /// Closes the connections `select` picks with RST on both sides; returns how many.
    pub fn reset(&self, select: &Select) -> usize {
        let conns = lock(&self.shared.conns);
        let mut n = 0;
        for c in conns.iter().filter(|c| select.matches(c)) {
            c.flows.send_modify(|f| f.reset = true);
            n += 1;
        }
        n
    }

    /// Arms the reply loss: the next client bytes containing `pattern` are forwarded, every
    /// server byte of that connection after them is dropped, and the connection is reset
    /// `cut_after` later. Fires once; see [`FaultProxy::swallowed`].
    pub fn swallow_reply_after(&self, pattern: &[u8], cut_after: Duration) {
        *lock(&self.shared.arm) = Some(Arm {
            pattern: pattern.to_vec(),
            cut_after,
        });
    }

    /// Whether the reply loss is still armed (it has not fired).
    pub fn armed(&self) -> bool {
        lock(&self.shared.arm).is_some()
    }

    /// How many replies were swallowed so far.
    pub fn swallowed(&self) -> u64 {
        self.shared.swallowed.load(Ordering::Relaxed)
    }

    /// How many connections were accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// How many connections were closed with RST so far.
    pub fn resets(&self) -> u64 {
        self.shared.resets.load(Ordering::Relaxed)
    }

    /// The startup text of the open connections (each holds its `application_name`).
    pub fn open(&self) -> Vec<String> {
        lock(&self.shared.conns)
            .iter()
            .map(|c| lock(&c.startup).clone())
            .collect()
    }
}

/// The host and port of a `postgres://` URL (port 5432 if it names none).
fn host_port(url: &str) -> std::io::Result<(String, u16)> {
    let cfg: tokio_postgres::Config = url
        .parse()
        .map_err(|e| std::io::Error::other(format!("not a connection URL: {e}")))?;
    let host = match cfg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => return Err(std::io::Error::other("the URL names no TCP host")),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    Ok((host, port))
}

async fn accept_loop(listener: TcpListener, server: SocketAddr, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Ok(server) = TcpStream::connect(server).await {
                run_conn(client, server, shared).await;
            }
        });
    }
}

/// Forwards one connection under its flows until either side closes or it is reset.
async fn run_conn(mut client: TcpStream, mut server: TcpStream, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (flows_tx, mut flows) = watch::channel(*lock(&shared.default));
    let conn = Arc::new(Conn {
        startup: Mutex::new(String::new()),
        flows: flows_tx,
    });
    lock(&shared.conns).push(conn.clone());
    let mut up_buf = vec![0u8; 64 * 1024];
    let mut down_buf = vec![0u8; 64 * 1024];
    // The tail of the client's bytes, so that a pattern split across reads is found.
    let mut tail: Vec<u8> = Vec::new();
    let mut cut_at: Option<tokio::time::Instant> = None;
    let reset = {
        let (mut cr, mut cw) = client.split();
        let (mut sr, mut sw) = server.split();
        loop {
            let f = *flows.borrow_and_update();
            if f.reset {
                break true;
            }
            let cut = async {
                match cut_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = flows.changed() => if changed.is_err() { break true },
                () = cut => break true,
                r = cr.read(&mut up_buf), if f.up != Flow::Hold => {
                    let n = match r { Ok(0) | Err(_) => break false, Ok(n) => n };
                    let bytes = &up_buf[..n];
                    {
                        // The first bytes: an SSL request, then the startup packet.
                        let mut startup = lock(&conn.startup);
                        if startup.len() < 1024 {
                            startup.push_str(&String::from_utf8_lossy(bytes).replace('\0', " "));
                        }
                    }
                    tail.extend_from_slice(bytes);
                    if let Some(after) = fire(&shared, &tail) {
                        conn.flows.send_modify(|f| f.down = Flow::Drop);
                        shared.swallowed.fetch_add(1, Ordering::Relaxed);
                        cut_at = Some(tokio::time::Instant::now() + after);
                        // The arm is spent: keep it from firing here again.
                        tail.clear();
                    } else if tail.len() > 4096 {
                        let drop = tail.len() - 4096;
                        tail.drain(..drop);
                    }
                    if f.up == Flow::Pass && sw.write_all(bytes).await.is_err() {
                        break false;
                    }
                }
                r = sr.read(&mut down_buf), if f.down != Flow::Hold => {
                    let n = match r { Ok(0) | Err(_) => break false, Ok(n) => n };
                    let down = flows.borrow().down;
                    if down == Flow::Pass && cw.write_all(&down_buf[..n]).await.is_err() {
                        break false;
                    }
                }
            }
        }
    };
    lock(&shared.conns).retain(|x| !Arc::ptr_eq(x, &conn));
    if reset {
        shared.resets.fetch_add(1, Ordering::Relaxed);
        let _ = client.set_zero_linger();
        let _ = server.set_zero_linger();
    }
    drop(client);
    drop(server);
}

/// Whether the armed reply loss fires on these client bytes: if so it is disarmed and its
/// delay returned (it stays armed otherwise).
fn fire(shared: &Shared, tail: &[u8]) -> Option<Duration> {
    let mut arm = lock(&shared.arm);
    let hit = match arm.as_ref() {
        Some(a) if !a.pattern.is_empty() => tail.windows(a.pattern.len()).any(|w| w == a.pattern),
        _ => false,
    };
    if hit {
        arm.take().map(|a| a.cut_after)
    } else {
        None
    }
}
