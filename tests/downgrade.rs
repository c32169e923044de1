//! `Guard::downgrade`: a write hold of a read-write lock becomes a read
//! hold in one step (no writer in between, a higher fencing token, the
//! lease renewed on), queued writers stay queued and readers queued before
//! them come in, a lost write hold is told lost, and any other guard comes
//! back in the error, still held.
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{key, Cluster, Server};
use redmutex::{Error, Locker};

/// The read-write lock's queue of `name` (no prefix, one server).
fn rw_queued(server: &Server, name: &str) -> u64 {
    common::queued_in(server, &format!("__redmutex__:rw-queue:{name}"))
}

#[test]
fn no_writer_comes_in_between_a_downgrade_under_contention() {
    let server = Server::start();
    let name = key("hammered");
    let register = format!("{name}:register");
    let stop = Arc::new(AtomicBool::new(false));
    // Four writers over two lockers hammer the lock: each, under its write
    // hold, writes its own mark to the register.
    let lockers = [server.locker(), server.locker()];
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let rw = lockers[w % 2].rwlock(&name).unwrap();
            let (stop, register, url) = (Arc::clone(&stop), register.clone(), server.url());
            std::thread::Builder::new()
                .spawn(move || {
                    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                    let mut writes = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let g = rw.write_timeout(Duration::from_secs(30)).unwrap();
                        let _: () = redis::cmd("SET")
                            .arg(&register)
                            .arg(format!("writer {w}"))
                            .query(&mut c)
                            .unwrap();
                        g.unlock().unwrap();
                        writes += 1;
                    }
                    writes
                })
                .unwrap()
        })
        .collect();
    let me = server.locker().rwlock(&name).unwrap();
    let mut c = server.conn();
    for round in 0..40 {
        let write = me.write_timeout(Duration::from_secs(30)).unwrap();
        let mine = format!("downgrader {round}");
        let _: () = redis::cmd("SET")
            .arg(&register)
            .arg(&mine)
            .query(&mut c)
            .unwrap();
        let written = write.fencing_token();
        let read = write.downgrade().unwrap();
        assert!(read.fencing_token() > written, "round {round}");
        // While the read hold lasts (a few round trips, writers queued and
        // retrying meanwhile), the register is what we wrote.
        for _ in 0..5 {
            let now: String = redis::cmd("GET").arg(&register).query(&mut c).unwrap();
            assert_eq!(now, mine, "a writer came in under the downgraded hold");
        }
        read.ensure_held().unwrap();
        read.unlock().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let writes: u64 = writers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(writes > 0, "the writers never got in: no contention");
}

#[test]
fn queued_writers_stay_queued_and_readers_queued_before_them_come_in() {
    let server = Server::start();
    let name = key("fair");
    let holder = server.locker().rwlock(&name).unwrap();
    let write = holder.write().unwrap();
    // Waiters on another locker, woken by the announcements alone (a
    // minute of backoff): a reader, then a writer, then a reader.
    let waiters = server.slow_locker();
    let rw = waiters.rwlock(&name).unwrap();
    let wait = Duration::from_secs(30);
    let (r1, w1, r2) = (rw.clone(), rw.clone(), rw.clone());
    let first_reader = std::thread::spawn(move || r1.read_timeout(wait));
    common::wait_until("the first reader queued", wait, || {
        rw_queued(&server, &name) == 1 && server.release_subscribers() >= 1
    });
    let (w_tx, w_rx) = std::sync::mpsc::channel();
    let (w_go_tx, w_go_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let g = w1.write_timeout(wait).unwrap();
        w_tx.send(g.fencing_token()).unwrap();
        w_go_rx.recv().unwrap();
        g.unlock().unwrap();
    });
    common::wait_until("the writer queued", wait, || rw_queued(&server, &name) == 2);
    let second_reader = std::thread::spawn(move || r2.read_timeout(wait));
    common::wait_until("the second reader queued", wait, || {
        rw_queued(&server, &name) == 3
    });

    let read = write.downgrade().unwrap();
    // The reader queued before the writer comes in at once, beside us.
    let r1 = first_reader.join().unwrap().unwrap();
    // The writer and the reader behind it wait: the writer for both read
    // holds, the reader for the writer.
    assert!(w_rx.try_recv().is_err(), "a writer beside the read holds");
    assert!(!second_reader.is_finished(), "a reader jumped the writer");
    assert_eq!(
        rw_queued(&server, &name),
        2,
        "the writer and the reader behind it"
    );
    let read_token = read.fencing_token();
    read.unlock().unwrap();
    assert!(w_rx.try_recv().is_err(), "a writer beside a read hold");
    r1.unlock().unwrap();
    // The last read hold's release hands the lock to the writer.
    let written = w_rx.recv_timeout(Duration::from_secs(15)).unwrap();
    assert!(written > read_token);
    assert!(!second_reader.is_finished(), "a reader beside the writer");
    w_go_tx.send(()).unwrap();
    writer.join().unwrap();
    let r2 = second_reader.join().unwrap().unwrap();
    assert!(r2.fencing_token() > written);
}

#[test]
fn any_other_guard_comes_back_in_the_error_still_held() {
    let server = Server::start();
    let locker = server.locker();
    let other = server.locker();
    let k = key("not-a-writer");
    let sem = locker.semaphore(key("sem"), 1).unwrap();
    let rw = locker.rwlock(key("rw")).unwrap();
    let guards = [
        locker.lock(&k).unwrap(),
        locker.lock_all(&[key("a"), key("b")]).unwrap(),
        sem.acquire().unwrap(),
        rw.read().unwrap(),
    ];
    for guard in guards {
        let keys = guard.keys().to_vec();
        let token = guard.fencing_token();
        let e = guard.downgrade().unwrap_err();
        assert!(matches!(e.error(), Error::InvalidInput(_)), "{e:?}");
        let guard = e.into_guard().expect("handed back");
        assert_eq!((guard.keys(), guard.fencing_token()), (&keys[..], token));
        guard.ensure_held().unwrap();
        guard.unlock().unwrap();
    }
    // Held all along: nobody else got them meanwhile, and now they are free.
    assert!(other.try_lock(&k).unwrap().is_some());
    // As an `Error`, through `?`.
    let as_error = || -> Result<(), Error> {
        let _read = locker.lock(&k)?.downgrade()?;
        Ok(())
    };
    assert!(matches!(as_error(), Err(Error::InvalidInput(_))));
}

#[test]
fn a_lost_write_hold_is_told_lost_and_nothing_changes() {
    let server = Server::start();
    let locker = server.slow_locker();
    let name = key("lost");
    let rw = locker.rwlock(&name).unwrap();
    // Its key deleted.
    let write = rw.write().unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("__redmutex__:rw-write:{name}"))
        .query(&mut server.conn())
        .unwrap();
    let e = write.downgrade().unwrap_err();
    assert!(matches!(e.error(), Error::Lost { .. }), "{e:?}");
    assert!(e.into_guard().is_none());
    // No read hold was made: a writer gets in at once.
    let other = server.locker().rwlock(&name).unwrap();
    other.try_write().unwrap().unwrap().unlock().unwrap();
    // Broken by an operator: told as a break.
    let write = rw.write().unwrap();
    let broken = locker.break_lock(format!("__redmutex__:rw-write:{name}"), "test");
    assert!(broken.unwrap().is_some());
    let e = write.downgrade().unwrap_err();
    assert!(matches!(e.error(), Error::Lost { .. }), "{e:?}");
    let s = locker.stats();
    assert_eq!((s.losses_not_ours(), s.losses_broken()), (1, 1), "{s:?}");
}

#[test]
fn the_read_hold_renews_on_and_the_stats_and_audit_tell_the_downgrade() {
    let server = Server::start();
    let locker = server
        .builder()
        .ttl(Duration::from_millis(900))
        .audit(true)
        .build()
        .unwrap();
    let name = key("renewed");
    let rw = locker.rwlock(&name).unwrap();
    let write = rw.write().unwrap();
    let read = write.downgrade().unwrap();
    // Renewed past three TTLs by its own watchdog.
    assert!(!read.wait_lost(Duration::from_millis(2700)));
    read.ensure_confirmed().unwrap();
    assert!(
        common::elsewhere(|| rw.try_write().unwrap().is_none()),
        "a writer beside the reader"
    );
    assert!(rw.try_read().unwrap().is_some(), "readers share");
    let token = read.fencing_token();
    read.unlock().unwrap();
    let s = locker.stats();
    // write, downgraded read, the other read
    assert_eq!(
        (s.grants(), s.hold().count(), s.losses()),
        (3, 3, 0),
        "{s:?}"
    );
    let mine: Vec<(String, String)> = locker
        .audit(None)
        .unwrap()
        .into_iter()
        .filter(|e| e.fencing_token() <= token)
        .map(|e| (e.action().to_owned(), e.kind().as_str().to_owned()))
        .collect();
    let want = [
        ("grant", "write"),
        ("downgrade", "write"),
        ("grant", "read"),
        ("release", "read"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, k)| ((*a).to_owned(), (*k).to_owned()))
        .collect();
    assert_eq!(mine, want);
}

#[test]
fn a_lock_delay_follows_the_read_hold() {
    let server = Server::start();
    let locker = server
        .builder()
        .lock_delay(Duration::from_secs(30))
        .build()
        .unwrap();
    let name = key("delayed");
    let read = locker
        .rwlock(&name)
        .unwrap()
        .write()
        .unwrap()
        .downgrade()
        .unwrap();
    let marks: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("__redmutex__:rw-delay:{name}"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert!(
        marks[0].contains(":rw-read:"),
        "the read hold's mark: {marks:?}"
    );
    read.unlock().unwrap();
    // A clean release: no delay for the next writer.
    let other = server.locker().rwlock(&name).unwrap();
    assert!(other.try_write().unwrap().is_some());
}

#[test]
fn a_downgrade_works_on_a_cluster() {
    let cluster = Cluster::start();
    let locker = Locker::builder(cluster.pool()).build().unwrap();
    let rw = locker.rwlock("{downgrade}:config").unwrap();
    let write = rw.write().unwrap();
    let written = write.fencing_token();
    let read = write.downgrade().unwrap();
    assert!(read.fencing_token() > written);
    assert!(common::elsewhere(|| rw.try_write().unwrap().is_none()));
    assert!(rw.try_read().unwrap().is_some());
    read.unlock().unwrap();
    assert!(rw.try_write().unwrap().is_some());
}
