//! A TCP proxy between clients and a lock server, with faults (the fault
//! suite's), or with a fixed one-way delay (the benchmark's Redlock over
//! distant masters).
//!
//! - `Delay`: every chunk waits a while (40 ms, or the delay it was
//!   started with) before it is passed on.
//! - `Blackhole`: nothing passes either way, as in a partition; what was
//!   sent waits, as TCP would retransmit it, and arrives when it heals.
//! - `DropReplies`: requests reach the server and are applied, but a reply
//!   is thrown away and its connection cut, so the client never learns
//!   what happened to its last command.
//! - `StallReplies`: requests pass and are applied; replies wait, as on a
//!   link that lost one direction.
//! - `StallExisting`: the connections open when it was set stall both ways
//!   (half-open, as after a failover or a NAT that dropped their state),
//!   while new connections pass.
// A delay or a stall is the proxy sleeping: that is what it models. A
// failed spawn of its threads should fail the test that started it.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Pass = 0,
    Delay = 1,
    Blackhole = 2,
    DropReplies = 3,
    StallExisting = 4,
    StallReplies = 5,
}

/// The delay of `Mode::Delay` unless the proxy was started with its own.
const DELAY: Duration = Duration::from_millis(40);
/// How often a stalled pump looks at the mode again.
const STALL_TICK: Duration = Duration::from_millis(5);

pub struct Proxy {
    port: u16,
    mode: Arc<AtomicU8>,
    /// Connections accepted before this epoch stall in `StallExisting`.
    epoch: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target_port`.
    pub fn start(target_port: u16) -> Proxy {
        Proxy::started(target_port, Mode::Pass, DELAY)
    }

    /// As [`Proxy::start`], delaying every chunk both ways by `delay`
    /// (`Mode::Delay` from the start).
    pub fn with_delay(target_port: u16, delay: Duration) -> Proxy {
        Proxy::started(target_port, Mode::Delay, delay)
    }

    fn started(target_port: u16, mode: Mode, delay: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let mode = Arc::new(AtomicU8::new(mode as u8));
        let epoch = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, ep, st) = (Arc::clone(&mode), Arc::clone(&epoch), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if st.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    pump_pair(client, server, &m, &ep, delay);
                }
            })
            .expect("spawn the proxy");
        Proxy {
            port,
            mode,
            epoch,
            stop,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn set(&self, mode: Mode) {
        if mode == Mode::StallExisting {
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pump_pair(
    client: TcpStream,
    server: TcpStream,
    mode: &Arc<AtomicU8>,
    epoch: &Arc<AtomicU64>,
    delay: Duration,
) {
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let born = epoch.load(Ordering::SeqCst);
    let (m, e) = (Arc::clone(mode), Arc::clone(epoch));
    let _ = std::thread::Builder::new()
        .name("proxy-up".into())
        .spawn(move || pump(client, s2, &m, &e, born, false, delay));
    let (m, e) = (Arc::clone(mode), Arc::clone(epoch));
    let _ = std::thread::Builder::new()
        .name("proxy-down".into())
        .spawn(move || pump(server, c2, &m, &e, born, true, delay));
}

/// Copies `from` to `to` until either side closes; `replies` tells the
/// server-to-client direction.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    mode: &AtomicU8,
    epoch: &AtomicU64,
    born: u64,
    replies: bool,
    delay: Duration,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        loop {
            match mode.load(Ordering::SeqCst) {
                m if m == Mode::Blackhole as u8 => std::thread::sleep(STALL_TICK),
                m if m == Mode::StallExisting as u8 && born < epoch.load(Ordering::SeqCst) => {
                    std::thread::sleep(STALL_TICK);
                }
                m if m == Mode::StallReplies as u8 && replies => std::thread::sleep(STALL_TICK),
                m if m == Mode::Delay as u8 => {
                    std::thread::sleep(delay);
                    break;
                }
                m if m == Mode::DropReplies as u8 && replies => {
                    // The reply is lost and the connection with it.
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                    return;
                }
                _ => break,
            }
        }
        if to.write_all(buf.get(..n).unwrap_or_default()).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
