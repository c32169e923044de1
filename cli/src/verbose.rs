//! `-v`: the library's log events on stderr, each distinct line once.

use std::collections::HashMap;
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
/// written. A line already written is not written again for a while (see
/// [`Repeats`]): it is counted, and the count said.
struct Stderr;

/// How many log lines wait to be written at most.
const LOG_QUEUE: usize = 256;
/// How long the end of a run waits for the queued log lines to be written.
const LOG_FLUSH: Duration = Duration::from_millis(500);
/// How long a line written is not written again, only counted.
const REPEAT_WINDOW: Duration = Duration::from_secs(60);
/// How many distinct lines are remembered at most (then their counts are
/// said, and they are forgotten).
const MAX_DISTINCT: usize = 1024;

/// What the writing thread is given.
enum Entry {
    /// A line to write, unless it was written lately.
    Line(String),
    /// The end of the run: say how many times each line came again.
    Counts,
}

static LOG_LINES: OnceLock<SyncSender<Entry>> = OnceLock::new();
/// Entries queued and not yet written.
static LOG_PENDING: AtomicUsize = AtomicUsize::new(0);
/// Lines dropped since the last line written.
static LOG_DROPPED: AtomicU64 = AtomicU64::new(0);

impl log::Log for Stderr {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = format!(
            "redmutex: {} {}: {}",
            record.level(),
            record.target(),
            record.args()
        );
        if !queue(Entry::Line(line)) {
            LOG_DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }
    /// Waits (up to 500 ms in all) for the queued lines to be written,
    /// then for the counts of the lines that came again.
    fn flush(&self) {
        let end = Instant::now() + LOG_FLUSH;
        written_by(end);
        if queue(Entry::Counts) {
            written_by(end);
        }
    }
}

/// Queues `entry` for the writing thread, never waiting; false when the
/// queue is full (or there is no thread).
fn queue(entry: Entry) -> bool {
    let Some(lines) = LOG_LINES.get() else {
        return false;
    };
    LOG_PENDING.fetch_add(1, Ordering::SeqCst);
    if lines.try_send(entry).is_err() {
        LOG_PENDING.fetch_sub(1, Ordering::SeqCst);
        return false;
    }
    true
}

/// Waits until every queued entry is written, or `end`.
fn written_by(end: Instant) {
    // Nothing else to wait for: a channel that never receives makes the
    // pause between two looks.
    let (_keep, pause) = mpsc::channel::<()>();
    while LOG_PENDING.load(Ordering::SeqCst) > 0 && Instant::now() < end {
        let _ = pause.recv_timeout(Duration::from_millis(5));
    }
}

/// The lines written lately, by their text: a line that comes again
/// within [`REPEAT_WINDOW`] of being written is counted instead; when it
/// comes after that, or at the end of the run, it is written once more
/// with the count (`... [17 more times]`). So an outage that makes r2d2
/// log each failed connection says it once a minute, not ten times a
/// second.
#[derive(Default)]
struct Repeats {
    lines: HashMap<String, Seen>,
    /// The lines in the order first written, for the counts at the end.
    order: Vec<String>,
}

/// A line written: when, and how many times it came since.
struct Seen {
    written_at: Instant,
    more: u64,
}

impl Repeats {
    /// What to write for `line`, come `now`: the line itself the first
    /// time, nothing while it is counted, the line with its count once
    /// the window has passed.
    fn note(&mut self, line: String, now: Instant) -> Vec<String> {
        if let Some(seen) = self.lines.get_mut(&line) {
            seen.more += 1;
            if now.saturating_duration_since(seen.written_at) < REPEAT_WINDOW {
                return Vec::new();
            }
            let counted = with_count(&line, seen.more);
            *seen = Seen {
                written_at: now,
                more: 0,
            };
            return vec![counted];
        }
        let mut out = Vec::new();
        if self.lines.len() >= MAX_DISTINCT {
            out = self.counts();
            self.lines.clear();
            self.order.clear();
        }
        self.lines.insert(
            line.clone(),
            Seen {
                written_at: now,
                more: 0,
            },
        );
        self.order.push(line.clone());
        out.push(line);
        out
    }

    /// The lines that came again since they were last written, with their
    /// counts, in the order first written; the counts start over.
    fn counts(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for line in &self.order {
            if let Some(seen) = self.lines.get_mut(line) {
                if seen.more > 0 {
                    out.push(with_count(line, seen.more));
                    seen.more = 0;
                }
            }
        }
        out
    }
}

/// `line` with how many more times it came.
fn with_count(line: &str, more: u64) -> String {
    let times = if more == 1 { "time" } else { "times" };
    format!("{line} [{more} more {times}]")
}

/// Starts the thread that writes the log lines; false when it cannot be
/// started (then `-v` prints nothing).
fn start_logging() -> bool {
    let (lines, queue) = mpsc::sync_channel::<Entry>(LOG_QUEUE);
    let writer = std::thread::Builder::new()
        .name("log".into())
        .spawn(move || {
            let mut stderr = std::io::stderr();
            let mut repeats = Repeats::default();
            for entry in queue {
                let dropped = LOG_DROPPED.swap(0, Ordering::SeqCst);
                if dropped > 0 {
                    let _ = writeln!(
                        stderr,
                        "redmutex: {dropped} log lines dropped: stderr was not read in time"
                    );
                }
                let out = match entry {
                    Entry::Line(line) => repeats.note(line, Instant::now()),
                    Entry::Counts => repeats.counts(),
                };
                for line in out {
                    let _ = writeln!(stderr, "{line}");
                }
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

/// Waits (up to 500 ms) for the queued lines to be written, and the
/// counts of those that came again.
pub fn flush() {
    log::logger().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_written_once_then_counted() {
        let mut r = Repeats::default();
        let t = Instant::now();
        assert_eq!(r.note("a".into(), t), ["a"]);
        assert!(r.note("a".into(), t).is_empty());
        assert_eq!(r.note("b".into(), t), ["b"]);
        assert!(r.note("a".into(), t).is_empty());
        assert_eq!(r.counts(), ["a [2 more times]"]);
        assert!(r.counts().is_empty());
        // Past the window it is written again, with what came meanwhile.
        assert!(r.note("b".into(), t).is_empty());
        let later = t + REPEAT_WINDOW;
        assert_eq!(r.note("b".into(), later), ["b [2 more times]"]);
        assert!(r.note("b".into(), later).is_empty());
        assert_eq!(r.counts(), ["b [1 more time]"]);
    }
}
