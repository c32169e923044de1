//! The signals a run takes over: while waiting, one calls the wait off;
//! once the command runs, each is forwarded to its process group.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use libc::{
    SIGALRM, SIGHUP, SIGINT, SIGIO, SIGPROF, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGVTALRM,
    SIGXCPU, SIGXFSZ,
};
use signal_hook::iterator::Signals;

/// Every catchable signal whose default action ends a process, other than
/// the fault signals (ABRT, BUS, FPE, ILL, SEGV, SYS, TRAP: the supervisor
/// itself failed, which its watcher covers as it covers SIGKILL) and the
/// real-time ones. While waiting, one calls the wait off; once the command
/// runs, each is forwarded to its process group. Listed in `--help`.
#[cfg(target_os = "linux")]
pub const FORWARDED: &[i32] = &[
    SIGHUP,
    SIGINT,
    SIGQUIT,
    SIGTERM,
    SIGUSR1,
    SIGUSR2,
    SIGALRM,
    SIGVTALRM,
    SIGPROF,
    SIGXCPU,
    SIGXFSZ,
    SIGIO,
    libc::SIGPWR,
];
/// As on Linux, without SIGPWR.
#[cfg(not(target_os = "linux"))]
pub const FORWARDED: &[i32] = &[
    SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU,
    SIGXFSZ, SIGIO,
];

/// From here on the signals in [`FORWARDED`] are ours: each sets `stop`
/// and is sent on the channel returned, by a thread of its own. `Err` when
/// they cannot be handled.
pub fn listen(stop: &Arc<AtomicBool>) -> io::Result<mpsc::Receiver<i32>> {
    let (tx, signals) = mpsc::channel();
    Signals::new(FORWARDED).and_then(|mut incoming| {
        let stop = Arc::clone(stop);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in incoming.forever() {
                    stop.store(true, Ordering::SeqCst);
                    if tx.send(signal).is_err() {
                        break;
                    }
                }
            })
    })?;
    Ok(signals)
}

/// The exit code after a signal called off the wait: 128 + its number.
pub fn signalled(signals: &mpsc::Receiver<i32>) -> std::process::ExitCode {
    let n = signals.try_recv().unwrap_or(SIGTERM);
    std::process::ExitCode::from(u8::try_from(128 + n).unwrap_or(255))
}
