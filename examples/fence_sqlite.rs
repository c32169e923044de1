//! Fencing a SQL database: a holder paused past its lease wakes up and
//! writes, and the database refuses the write by its fencing token.
//!
//! ```text
//! cargo run --example fence_sqlite
//! ```
//!
//! The table keeps, beside each row, the highest fencing token that wrote
//! it; every write is one statement that passes only with a token at least
//! that high:
//!
//! ```sql
//! UPDATE accounts SET balance = ?1, fence = ?2 WHERE id = ?3 AND fence <= ?2
//! ```
//!
//! An update count of 0 is a stale holder's write, refused. The check and
//! the write are one statement, so no pause can come between them.
//!
//! Uses `REDIS_URL` when set; otherwise Redis on 127.0.0.1:6379; otherwise
//! it starts a throw-away `redis-server` and says so. SQLite is built in
//! (rusqlite's `bundled` feature).

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::time::Duration;

use redmutex::Locker;
use rusqlite::{params, Connection};

const LOCK: &str = "fence-sqlite:account-1";

/// Sets account 1's balance under fencing token `token`: whether the
/// database took the write.
fn write_balance(db: &Connection, balance: i64, token: u64) -> Result<bool, Box<dyn Error>> {
    // SQLite's integers are signed: tokens (µs since 1970 and up) fit.
    let token = i64::try_from(token)?;
    let updated = db.execute(
        "UPDATE accounts SET balance = ?1, fence = ?2 WHERE id = 1 AND fence <= ?2",
        params![balance, token],
    )?;
    Ok(updated == 1)
}

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _server) = support::redis_url()?;
    let db = Connection::open_in_memory()?;
    db.execute_batch(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
                                fence INTEGER NOT NULL DEFAULT 0);
         INSERT INTO accounts (id, balance) VALUES (1, 100);",
    )?;

    // Two lockers with their own pools stand in for two machines. The first
    // is about to freeze (a GC pause, a suspended VM): a frozen process
    // renews nothing, so its locker runs no watchdog here.
    let frozen = Locker::builder(redmutex::pool(&url)?)
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .build()?;
    let other = Locker::open(&url)?;

    let paused = frozen.lock(LOCK)?;
    let balance: i64 = db.query_row("SELECT balance FROM accounts WHERE id = 1", [], |r| {
        r.get(0)
    })?;
    println!(
        "holder A: locked with fencing token {}, read balance {balance}; now it freezes",
        paused.fencing_token()
    );

    // While A is frozen its lease runs out, and B is granted the lock.
    let next = other.lock_timeout(LOCK, Duration::from_secs(10))?;
    println!(
        "holder B: locked after A's lease ran out, fencing token {}",
        next.fencing_token()
    );
    let took = write_balance(&db, balance - 30, next.fencing_token())?;
    println!(
        "holder B: withdraws 30, balance {} ({})",
        balance - 30,
        if took { "written" } else { "refused" }
    );
    next.unlock()?;

    // A wakes up, believing it still holds the lock, and writes what it
    // computed before the pause.
    println!("holder A: wakes up and withdraws 50 from the balance it read");
    if write_balance(&db, balance - 50, paused.fencing_token())? {
        return Err("a paused holder's write landed: this must never happen".into());
    }
    println!(
        "holder A: write refused by the database (token {} is below {})",
        paused.fencing_token(),
        db.query_row("SELECT fence FROM accounts WHERE id = 1", [], |r| r
            .get::<_, i64>(0))?
    );
    println!(
        "holder A: lease lost, as the guard says: {}",
        paused.is_lost()
    );

    let (balance, fence): (i64, i64) = db.query_row(
        "SELECT balance, fence FROM accounts WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    println!("account 1: balance {balance}, written last under token {fence}");
    Ok(())
}
