//! Keys of any string type: `String`, `&String`, `&str`, `Cow<str>`, and
//! lists of them as slices, vectors, arrays or iterators.

mod common;

use std::borrow::Cow;
use std::time::Duration;

use common::{key, Server};

#[test]
fn single_keys_of_any_string_type() {
    let server = Server::start();
    let locker = server.locker();
    let owned: String = key("owned");
    let guard = locker.lock(owned.clone()).unwrap();
    assert!(locker.holder(&owned).unwrap().is_some());
    assert!(common::elsewhere(|| locker
        .try_lock(&owned)
        .unwrap()
        .is_none()));
    drop(guard);
    let cow: Cow<'_, str> = Cow::Owned(key("cow"));
    let guard = locker.lock_timeout(cow, Duration::from_secs(5)).unwrap();
    drop(guard);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let guard = locker.lock_or_stop(key("stop"), None, &stop).unwrap();
    drop(guard);
    let sem = locker.semaphore(key("sem"), 2).unwrap();
    drop(sem.try_acquire().unwrap());
    let rw = locker.rwlock(key("rw")).unwrap();
    drop(rw.try_read().unwrap());
}

#[test]
fn key_lists_of_any_string_type() {
    let server = Server::start();
    let locker = server.locker();
    let names: Vec<String> = vec![key("a"), key("b")];
    let guard = locker.lock_all(&names).unwrap();
    assert_eq!(guard.keys(), names.as_slice());
    assert!(common::elsewhere(|| locker
        .try_lock_all(names.iter())
        .unwrap()
        .is_none()));
    drop(guard);
    let guard = locker
        .lock_all_timeout(names.clone(), Duration::from_secs(5))
        .unwrap();
    drop(guard);
    let guard = locker
        .try_lock_all(["c", "d"].map(key))
        .unwrap()
        .expect("free");
    drop(guard);
    // The slices of `&str` of before still work.
    let guard = locker.lock_all(&["e", "f"]).unwrap();
    drop(guard);
    // An empty list is refused, whatever its type.
    let none: Vec<String> = Vec::new();
    assert!(matches!(
        locker.lock_all(none),
        Err(redmutex::Error::InvalidInput(_))
    ));
}
