//! The lock protocol as `stateright` models: [`single`] for one Redis
//! server (the queue, hand-overs, claims, renewals, restores), [`redlock`]
//! for a majority of independent masters; [`check`] checks them.

pub mod check;
pub mod redlock;
pub mod single;

/// The server's clock, in µs, at tick `now` (ticks are milliseconds): what
/// the scripts' `mint` reads.
fn micros(now: u64) -> u64 {
    now * 1000
}

/// The scripts' `mint`: the next fencing token after `counter`, and at
/// least the server's clock in µs.
fn mint(counter: u64, now: u64) -> u64 {
    (counter + 1).max(micros(now))
}

/// A client's lease deadline by its own clock: from when its request was
/// sent, for `length` (the TTL, or a claim), less the drift allowance.
fn deadline(sent: u64, length: u64, drift: u64) -> u64 {
    (sent + length).saturating_sub(drift)
}

/// Whether a key that expires at `expires` may go now, up to `skew` ticks
/// early (a server clock fast against the clients').
fn may_expire_early(expires: u64, now: u64, skew: u64) -> bool {
    expires > now && expires <= now + skew
}
