//! `-v`: the library's log events on stderr.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `-v`: the library's log events on stderr, one line each, written by a
/// thread of their own from a bounded queue, so that a log call never
/// blocks: some come from the watchdog thread, and a stderr nobody reads
/// (a full pipe) must not hold up its renewals. A line that finds the queue
/// full is dropped, and the number dropped is said before the next line
/// written.
struct Stderr;

/// How many log lines wait to be written at most.
const LOG_QUEUE: usize = 256;
/// How long the end of a run waits for the queued log lines to be written.
const LOG_FLUSH: Duration = Duration::from_millis(500);

static LOG_LINES: OnceLock<SyncSender<String>> = OnceLock::new();
/// Lines queued and not yet written.
static LOG_PENDING: AtomicUsize = AtomicUsize::new(0);
/// Lines dropped since the last line written.
static LOG_DROPPED: AtomicU64 = AtomicU64::new(0);

impl log::Log for Stderr {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let Some(lines) = LOG_LINES.get() else {
            return;
        };
        let line = format!(
            "redmutex: {} {}: {}\n",
            record.level(),
            record.target(),
            record.args()
        );
        LOG_PENDING.fetch_add(1, Ordering::SeqCst);
        if lines.try_send(line).is_err() {
            LOG_PENDING.fetch_sub(1, Ordering::SeqCst);
            LOG_DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }
    /// Waits (up to 500 ms) for the queued lines to be written.
    fn flush(&self) {
        let end = Instant::now() + LOG_FLUSH;
        // Nothing else to wait for: a channel that never receives makes
        // the pause between two looks.
        let (_keep, pause) = mpsc::channel::<()>();
        while LOG_PENDING.load(Ordering::SeqCst) > 0 && Instant::now() < end {
            let _ = pause.recv_timeout(Duration::from_millis(5));
        }
    }
}

/// Starts the thread that writes the log lines; false when it cannot be
/// started (then `-v` prints nothing).
fn start_logging() -> bool {
    let (lines, queue) = mpsc::sync_channel::<String>(LOG_QUEUE);
    let writer = std::thread::Builder::new()
        .name("log".into())
        .spawn(move || {
            let mut stderr = std::io::stderr();
            for line in queue {
                let dropped = LOG_DROPPED.swap(0, Ordering::SeqCst);
                if dropped > 0 {
                    let _ = writeln!(
                        stderr,
                        "redmutex: {dropped} log lines dropped: stderr was not read in time"
                    );
                }
                let _ = stderr.write_all(line.as_bytes());
                LOG_PENDING.fetch_sub(1, Ordering::SeqCst);
            }
        });
    writer.is_ok() && LOG_LINES.set(lines).is_ok()
}

static STDERR: Stderr = Stderr;

/// Writes the library's log events on stderr from here on (nothing when
/// the writing thread cannot be started).
pub fn start() {
    if start_logging() && log::set_logger(&STDERR).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
}

/// Waits (up to 500 ms) for the queued lines to be written.
pub fn flush() {
    log::logger().flush();
}
