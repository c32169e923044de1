//! The single-instance lock protocol as a model (`Protocol`), checked
//! over every interleaving within bounds with `stateright` by
//! `tests/model.rs`, and run step by step against the real scripts by the
//! library's unit tests.
//!
//! What is modelled: clients that acquire (and queue when the lock is
//! busy), are handed the lock by a release, take a hand-over up, hold,
//! renew, release, give up waiting, and die, and holders that write
//! through a guarded write (`Guard::run_if_held`: the write lands only
//! while the server's key is the writer's), paused or not; each request is sent at one
//! moment, runs on the server as one atomic step (a script) some time
//! later, and its reply arrives later still, so a lease counts from when
//! its request was sent, as the library's does. The server's lock key
//! expires by its own clock (lazily, as Redis expires a key when it is
//! read); the fencing counter is minted as the scripts mint it; the server
//! can save a snapshot and be restored from it (a restart from an older
//! RDB file, a failover to a lagging replica). A paused client is one that
//! takes no step: its belief ends at its lease's deadline, as the guard's.
//! Time is logical: one tick is a millisecond of the server's clock. Each
//! client's lease deadline is its own clock's: the moment its request was
//! sent, plus the TTL (or the claim), minus the drift allowance. The
//! clocks' difference in rate is modelled where it can hurt: the server's
//! key may expire up to `skew` ticks sooner than its TTL says, as it does
//! when the server's clock (or timer) runs fast against the client's. A
//! client's clock running fast only ends its belief sooner.
//!
//! Properties, over every state within the bounds:
//! - *exclusion*: at most one client believes it holds the lock (its lease
//!   deadline not passed);
//! - *fencing*: every grant's token is above every token granted before,
//!   restores included;
//! - *guarded writes*: a guarded write lands only in a state where its
//!   client holds the lock on the server, so the writes that land carry
//!   rising tokens: once a newer holder wrote, no older one's write lands,
//!   however long it paused (without restores, which give an old holder
//!   its key back: a documented limit);
//! - *claim*: a lock handed to a waiter that is gone (and so never takes
//!   it up) lasts at most the claim window (the waiter's stay), never the
//!   TTL;
//! - *claim believed within it*: a waiter that hears of a hand-over holds
//!   (its `lock` returns) at once, before its watchdog's take-up is
//!   confirmed; until then it believes it holds only up to the claim's
//!   deadline (counted from its last attempt), within the server's claim
//!   even when the key goes early, and no renewal of it is overdue (the
//!   library's `Lease::claimed`): never `Held` past that deadline;
//! - *stay*: while the lock is free, a dead waiter's place in the queue
//!   (which refuses the lock to those behind it) ends within its stay,
//!   which is bounded whatever the backoff;
//! - *lock-delay*: a fresh grant (not a hand-over) comes no sooner than
//!   `delay` after the deadline of any other client that still believes
//!   it holds the lock (one paused past its lease: its late writes land
//!   within `delay` of its deadline), as long as that client took its
//!   lease up (with a lock-delay, a claim is taken up before `lock`
//!   returns: one not taken up is never returned to its user); with a
//!   delay of 0 this is exclusion at the moment of the grant, claims
//!   included;
//! - *liveness*, under fair scheduling (see [`Fair`]): a waiter that stays
//!   is granted within a bound;
//! - *in doubt*: a holder whose lease is in doubt (its renewal timed out,
//!   or is overdue: no renewal confirmed by half the lease after the last
//!   confirmed request was sent) never believes it holds past its deadline,
//!   and exclusion counts it as holding until then; a holder that believes
//!   its lease held is never overdue;
//! - and, as a check that the bounds reach the interesting states, that a
//!   hand-over, a restore, a take-up and a return from doubt each happen
//!   somewhere.
//!
//! Not modelled: several keys, the release announcements being lost (a
//! waiter that misses one retries, which the model lets it do at any
//! time). Redlock has its own model, in `redlock.rs`.

use stateright::{Model, Property};

/// A fault put back into the model, to show the checker finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flaw {
    /// The old `mint`: reseed the counter from the clock only when it is
    /// missing, else add one (tokens repeat after a restore).
    OldMint,
    /// The old hand-over: a waiter is handed the lock for the whole TTL, so
    /// a dead waiter keeps it from everyone that long.
    NoClaim,
    /// The old stay: taken from the backoff as given, unbounded (here, past
    /// the horizon), so a dead waiter's place keeps a free lock from
    /// everyone queued behind it.
    UnboundedStay,
    /// A lease in doubt leaves doubt only on a renewal's answer, never by
    /// the clock: a holder whose renewals never come back keeps believing
    /// it may hold, past its deadline.
    DoubtOutlivesDeadline,
    /// A write checked only by the writer's own belief (`ensure_held`,
    /// then a plain write): it lands whoever holds the lock by then.
    UnguardedWrite,
    /// An acquire that ignores the lock-delay mark.
    IgnoresDelay,
    /// A hand-over's guard, returned before its take-up is confirmed,
    /// believed for the whole TTL from the waiter's last attempt, as if the
    /// take-up had been.
    TrustedClaim,
}

/// What a holder believes of its lease: the library's `LeaseState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Belief {
    /// Its last renewal (or the grant) was confirmed, and the next is not
    /// overdue.
    Held,
    /// A renewal timed out, or is overdue, and the deadline has not passed.
    InDoubt,
    /// The deadline passed: final.
    Lost,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lock {
    pub owner: usize,
    pub fence: u64,
    /// Server time at which the key expires.
    pub expires: u64,
    /// Handed over and not taken up yet (a claim).
    pub claimed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Server {
    pub lock: Option<Lock>,
    /// The fencing counter; 0 when missing.
    pub counter: u64,
    /// Waiters in arrival order, each with the server time it stays until.
    pub queue: Vec<(usize, u64)>,
    /// The lock-delay mark: nobody is granted the key (while it is
    /// missing) before this server time. Written by a grant and a renewal
    /// (the lease's end plus the delay), deleted by a clean release.
    pub mark: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Req {
    Acquire,
    Renew,
    Release,
    /// A waiter that gives up leaves the queue (and frees a lock handed to
    /// it meanwhile).
    Dequeue,
    /// A guarded write by a holder of the grant with this token.
    Write(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    Granted(u64),
    /// Refused, with the counter as it stood (the floor below which no
    /// hand-over is newer than this attempt).
    Busy(u64),
    Renewed,
    NotOurs,
    /// A guarded write landed.
    Written,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// Refused; waits for a hand-over or tries again.
    Waiting {
        sent: u64,
        floor: u64,
        /// When it began to wait (a ghost, for liveness).
        since: u64,
        /// It heard of a hand-over it could not take as it was: it asks
        /// again at once (what fair scheduling requires of it).
        again: bool,
    },
    /// Believes it holds the lock until `deadline` (its own clock), while
    /// `belief` is not `Lost`.
    Holding {
        fence: u64,
        deadline: u64,
        /// When it was granted (a ghost, for liveness).
        since: u64,
        /// When the renewal it expects is overdue: half the lease after
        /// the last confirmed request was sent, or the deadline if sooner.
        overdue: u64,
        belief: Belief,
    },
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    /// A request sent (and when), not run on the server yet.
    pub sent: Option<(Req, u64)>,
    /// A reply on its way back, to the request sent at that time.
    pub reply: Option<(Reply, u64)>,
    /// A hand-over announcement on its way: the fence it was handed.
    pub handed: Option<u64>,
    /// Grants this client had (a bound).
    pub grants: u8,
    /// Guarded writes this client sent (a bound).
    pub writes: u8,
    /// Ghost: it holds a claim it has not taken up (renewed) yet: its
    /// `lock` returned it, and its watchdog's take-up is not confirmed (with
    /// a lock-delay, `lock` has not returned yet).
    pub claim: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub now: u64,
    pub server: Server,
    pub snapshot: Option<Server>,
    pub restored: bool,
    pub clients: Vec<Client>,
    /// Ghost: the largest token granted so far, and whether every grant
    /// rose above the one before.
    pub last_fence: u64,
    pub fences_rise: bool,
    /// Ghost: whether a hand-over and a take-up happened, and a holder in
    /// doubt was confirmed again.
    pub handed_over: bool,
    pub taken_up: bool,
    pub recovered: bool,
    /// Deaths and give-ups so far (each bounded, to keep the state space
    /// small).
    pub deaths: u8,
    pub give_ups: u8,
    /// Ghost: guarded writes that landed, the largest token among them,
    /// whether each landed with a token at least that of every write
    /// before it, whether each landed while the server's key was its
    /// writer's, and whether one was refused.
    pub written: u8,
    pub last_write: u64,
    pub writes_rise: bool,
    pub writes_held: bool,
    pub write_refused: bool,
    /// Ghost: whether every fresh grant kept the lock-delay, and whether an
    /// attempt was refused by one.
    pub delay_kept: bool,
    pub delayed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// The server's clock, fast against the clients', expires the key
    /// before its TTL says (at most `skew` ticks before).
    Expire,
    Send(usize, Req),
    Run(usize),
    Receive(usize),
    /// A waiter hears of a hand-over and takes it as granted.
    Hear(usize),
    /// A holder gives up waiting for the reply to its renewal (a timeout):
    /// the reply is thrown away unread, and the lease is in doubt.
    TimeOut(usize),
    Die(usize),
    Save,
    Restore,
}

/// The model and its bounds.
pub struct Protocol {
    pub clients: usize,
    pub ttl: u64,
    /// How long a waiter stays queued after an attempt (in the library,
    /// `waiter_stay`: its longest pause, at most 1 s, plus its checkout and
    /// I/O timeouts, at most 2 s; a queued waiter calls at least every
    /// second whatever its backoff, which is what the fair schedule's
    /// "asks again before its stay runs out" stands for); the claim is the
    /// smaller of the stay and the TTL.
    pub stay: u64,
    /// Time does not go past this.
    pub horizon: u64,
    /// Grants per client.
    pub grants: u8,
    /// Guarded writes per client (0: none, as in the checks that predate
    /// them).
    pub writes: u8,
    /// How many clients may die, and how many may give up waiting (each
    /// bounded, to keep the state space small).
    pub leavers: u8,
    /// Whether the server may be restored from a snapshot. A restore takes
    /// locks away (a documented limit: the holder is told at its next
    /// renewal), so exclusion is checked without it and fencing with it.
    pub restores: bool,
    pub flaw: Option<Flaw>,
    /// The clients' drift allowance, taken off every lease (the library's
    /// `drift`), and how much sooner than its TTL the server may expire
    /// the key. Exclusion holds while `skew <= drift`.
    pub drift: u64,
    pub skew: u64,
    /// Fair scheduling, for the liveness check: `None` lets every step
    /// wait forever.
    pub fair: Option<Fair>,
    /// Whether a holder may give up waiting for a renewal's reply
    /// (`Action::TimeOut`, which puts its lease in doubt), and the return
    /// from doubt is looked for. The other changes of belief (overdue,
    /// deadline) are made and checked in every model: they follow from
    /// the clock, and add no states.
    pub doubt: bool,
    /// The lock-delay (`Builder::lock_delay`), in ticks; 0: none.
    pub delay: u64,
}

/// Fair scheduling: time does not pass while a step is due. Every request
/// runs, every reply and announcement arrives, within the millisecond it
/// was sent; a waiter asks again before its stay runs out, and at once
/// when it heard of a hand-over too late to take it; a holder renews
/// before its deadline and releases within `hold` of its grant. Under it,
/// *liveness* is checked as a bound: no client waits longer than `bound`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fair {
    pub hold: u64,
    pub bound: u64,
}

impl Protocol {
    fn claim(&self) -> u64 {
        self.stay.min(self.ttl)
    }

    fn deadline(&self, sent: u64, length: u64) -> u64 {
        super::deadline(sent, length, self.drift)
    }

    /// A holder whose request sent at `sent` was confirmed for `length`.
    fn holding(&self, fence: u64, sent: u64, length: u64, since: u64) -> Phase {
        let deadline = self.deadline(sent, length);
        Phase::Holding {
            fence,
            deadline,
            since,
            overdue: (sent + length / 2).min(deadline),
            belief: Belief::Held,
        }
    }

    /// The changes time alone makes to each holder's belief, as the
    /// library's `Lease` makes them when it is read: overdue, then the
    /// deadline (which `DoubtOutlivesDeadline` only applies to a lease
    /// believed held).
    fn refresh(&self, s: &mut State) {
        let now = s.now;
        for client in &mut s.clients {
            let Phase::Holding {
                deadline,
                overdue,
                ref mut belief,
                ..
            } = client.phase
            else {
                continue;
            };
            if *belief == Belief::Held && now >= overdue {
                *belief = Belief::InDoubt;
            }
            let lapses = match self.flaw {
                Some(Flaw::DoubtOutlivesDeadline) => *belief == Belief::Held,
                _ => *belief != Belief::Lost,
            };
            if lapses && now >= deadline {
                *belief = Belief::Lost;
            }
        }
    }

    fn mint(&self, s: &mut State) -> u64 {
        let fence = match self.flaw {
            Some(Flaw::OldMint) if s.server.counter != 0 => s.server.counter + 1,
            Some(Flaw::OldMint) => super::micros(s.now),
            _ => super::mint(s.server.counter, s.now),
        };
        s.server.counter = fence;
        s.fences_rise &= fence > s.last_fence;
        s.last_fence = s.last_fence.max(fence);
        fence
    }

    /// The key as the server sees it now (an expired key is gone).
    fn expire(s: &mut State) {
        if s.server.lock.as_ref().is_some_and(|l| l.expires <= s.now) {
            s.server.lock = None;
        }
    }

    /// The first waiter that has not left, dropping those that have.
    fn live_head(s: &mut State) -> Option<usize> {
        while let Some(&(c, until)) = s.server.queue.first() {
            if until >= s.now {
                return Some(c);
            }
            s.server.queue.remove(0);
        }
        None
    }

    /// Records a lease of the key ending at `expires`: its lock-delay mark.
    fn mark(&self, s: &mut State, expires: u64) {
        if self.delay > 0 {
            s.server.mark = Some(expires + self.delay);
        }
    }

    /// Whether the lock-delay keeps the (missing) key from everyone now.
    fn delays(&self, s: &State) -> bool {
        self.flaw != Some(Flaw::IgnoresDelay) && s.server.mark.is_some_and(|till| till > s.now)
    }

    /// A waiter that heard of a hand-over at `now`, after its attempt sent
    /// at `sent`: it holds the claim, believed until the claim's deadline,
    /// with no renewal overdue before its take-up (the watchdog sends that
    /// at once; the library's `Lease::claimed`).
    fn claimed(&self, fence: u64, sent: u64, now: u64) -> Phase {
        let length = match self.flaw {
            Some(Flaw::TrustedClaim) => self.ttl,
            _ => self.claim(),
        };
        let deadline = self.deadline(sent, length);
        Phase::Holding {
            fence,
            deadline,
            since: now,
            overdue: deadline,
            belief: Belief::Held,
        }
    }

    /// The ghost check at a fresh grant: every other client that believes
    /// it holds the lock (its lease taken up; without a lock-delay, a claim
    /// too, returned before its take-up) has its deadline at least the
    /// delay behind.
    fn check_delay(&self, s: &mut State, c: usize) {
        let now = s.now;
        s.delay_kept &= s.clients.iter().enumerate().all(|(i, cl)| {
            i == c
                || (cl.claim && self.delay > 0)
                || !matches!(cl.phase, Phase::Holding { deadline, .. } if deadline + self.delay > now)
        });
    }

    /// A release: hands the lock to the first live waiter (a claim), or
    /// deletes it.
    fn free(&self, s: &mut State) {
        s.server.lock = None;
        if let Some(head) = Self::live_head(s) {
            s.server.queue.remove(0);
            let fence = self.mint(s);
            let window = match self.flaw {
                Some(Flaw::NoClaim) => self.ttl,
                _ => self.claim(),
            };
            s.server.lock = Some(Lock {
                owner: head,
                fence,
                expires: s.now + window,
                claimed: true,
            });
            s.handed_over = true;
            s.clients[head].handed = Some(fence);
        }
    }

    /// Runs client `c`'s request on the server, as its script would.
    fn run(&self, s: &mut State, c: usize, req: Req, sent: u64) {
        Self::expire(s);
        let ours = s.server.lock.as_ref().is_some_and(|l| l.owner == c);
        let reply = match req {
            Req::Acquire => {
                let head = Self::live_head(s);
                let delayed = s.server.lock.is_none() && self.delays(s);
                s.delayed |= delayed;
                if ours || (s.server.lock.is_none() && !delayed && head.is_none_or(|h| h == c)) {
                    if !ours {
                        self.check_delay(s, c);
                    }
                    s.server.queue.retain(|&(w, _)| w != c);
                    let fence = self.mint(s);
                    s.server.lock = Some(Lock {
                        owner: c,
                        fence,
                        expires: s.now + self.ttl,
                        claimed: false,
                    });
                    self.mark(s, s.now + self.ttl);
                    Reply::Granted(fence)
                } else {
                    let until = s.now
                        + match self.flaw {
                            Some(Flaw::UnboundedStay) => self.horizon + self.stay,
                            _ => self.stay,
                        };
                    match s.server.queue.iter_mut().find(|(w, _)| *w == c) {
                        Some(entry) => entry.1 = until,
                        None => s.server.queue.push((c, until)),
                    }
                    Reply::Busy(s.server.counter)
                }
            }
            Req::Renew => {
                if ours {
                    let now = s.now;
                    let lock = s.server.lock.as_mut().unwrap();
                    lock.expires = now + self.ttl;
                    if lock.claimed {
                        lock.claimed = false;
                        s.taken_up = true;
                    }
                    self.mark(s, now + self.ttl);
                    Reply::Renewed
                } else {
                    Reply::NotOurs
                }
            }
            Req::Release => {
                if ours {
                    // A clean release: no lock-delay after it.
                    s.server.mark = None;
                    self.free(s);
                }
                Reply::Done
            }
            Req::Dequeue => {
                s.server.queue.retain(|&(w, _)| w != c);
                if ours {
                    self.free(s);
                }
                Reply::Done
            }
            Req::Write(fence) => {
                if ours || self.flaw == Some(Flaw::UnguardedWrite) {
                    // Guarded, it carries the key's token (the writer's own).
                    let fence = s
                        .server
                        .lock
                        .as_ref()
                        .filter(|_| ours)
                        .map_or(fence, |l| l.fence);
                    s.written += 1;
                    s.writes_rise &= fence >= s.last_write;
                    s.writes_held &= ours;
                    s.last_write = s.last_write.max(fence);
                    Reply::Written
                } else {
                    s.write_refused = true;
                    Reply::NotOurs
                }
            }
        };
        // A release's or a dequeue's reply changes nothing for its client.
        if reply != Reply::Done {
            s.clients[c].reply = Some((reply, sent));
        }
    }

    /// Under fair scheduling: whether a step is due before time may pass.
    fn due(&self, s: &State) -> bool {
        let Some(fair) = self.fair else {
            return false;
        };
        s.clients.iter().any(|c| {
            c.sent.is_some()
                || (c.phase != Phase::Dead && c.reply.is_some())
                || match c.phase {
                    Phase::Waiting { sent, again, .. } => {
                        again || c.handed.is_some() || sent + self.stay <= s.now
                    }
                    Phase::Holding {
                        deadline, since, ..
                    } => deadline <= s.now + 1 || since + fair.hold <= s.now,
                    _ => false,
                }
        })
    }

    /// Client `c` reads the reply to its request sent at `sent`.
    fn receive(&self, s: &mut State, c: usize, reply: Reply, sent: u64) {
        let now = s.now;
        let was_in_doubt = matches!(
            s.clients[c].phase,
            Phase::Holding {
                belief: Belief::InDoubt,
                ..
            }
        );
        let mut recovered = false;
        let client = &mut s.clients[c];
        client.phase = match (client.phase, reply) {
            (Phase::Dead, _) => Phase::Dead,
            (_, Reply::Granted(fence)) => {
                client.grants += 1;
                client.handed = None;
                client.claim = false;
                self.holding(fence, sent, self.ttl, now)
            }
            (Phase::Waiting { since, .. }, Reply::Busy(floor)) => Phase::Waiting {
                sent,
                floor,
                since,
                again: false,
            },
            (_, Reply::Busy(floor)) => Phase::Waiting {
                sent,
                floor,
                since: sent,
                again: false,
            },
            // A lost lease stays lost (the library's `confirm` refuses).
            (
                Phase::Holding {
                    belief: Belief::Lost,
                    ..
                },
                Reply::Renewed,
            ) => client.phase,
            (
                Phase::Holding {
                    fence,
                    deadline,
                    since,
                    belief,
                    ..
                },
                Reply::Renewed,
            ) => {
                client.claim = false;
                let deadline = deadline.max(self.deadline(sent, self.ttl));
                let overdue = (sent + self.ttl / 2).min(deadline);
                // Held again, unless the next renewal is overdue already
                // (the library's `confirm` does the same).
                let belief = if now < overdue { Belief::Held } else { belief };
                recovered = belief == Belief::Held;
                Phase::Holding {
                    fence,
                    deadline,
                    since,
                    overdue,
                    belief,
                }
            }
            (Phase::Holding { .. }, Reply::NotOurs) => Phase::Idle,
            (phase, _) => phase,
        };
        // A ghost, kept only where it is looked for (it doubles the states).
        s.recovered |= self.doubt && was_in_doubt && recovered;
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 1,
            server: Server::default(),
            snapshot: None,
            restored: false,
            clients: vec![
                Client {
                    phase: Phase::Idle,
                    sent: None,
                    reply: None,
                    handed: None,
                    grants: 0,
                    writes: 0,
                    claim: false,
                };
                self.clients
            ],
            last_fence: 0,
            fences_rise: true,
            handed_over: false,
            taken_up: false,
            recovered: false,
            deaths: 0,
            give_ups: 0,
            written: 0,
            last_write: 0,
            writes_rise: true,
            writes_held: true,
            write_refused: false,
            delay_kept: true,
            delayed: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon && !self.due(s) {
            actions.push(Action::Tick);
        }
        if s.server
            .lock
            .as_ref()
            .is_some_and(|l| super::may_expire_early(l.expires, s.now, self.skew))
        {
            actions.push(Action::Expire);
        }
        if self.restores {
            if s.snapshot.is_none() {
                actions.push(Action::Save);
            } else if !s.restored {
                actions.push(Action::Restore);
            }
        }
        for (c, client) in s.clients.iter().enumerate() {
            if client.sent.is_some() {
                // A request on its way runs even if its client died.
                actions.push(Action::Run(c));
                continue;
            }
            if client.phase == Phase::Dead {
                continue;
            }
            let may_die = s.deaths < self.leavers;
            if client.reply.is_some() {
                actions.push(Action::Receive(c));
                // Under fair scheduling every reply arrives in time.
                let holds =
                    matches!(client.phase, Phase::Holding { belief, .. } if belief != Belief::Lost);
                if holds && self.doubt && self.fair.is_none() {
                    actions.push(Action::TimeOut(c));
                }
                if may_die {
                    actions.push(Action::Die(c));
                }
                continue;
            }
            match client.phase {
                Phase::Idle if client.grants < self.grants => {
                    actions.push(Action::Send(c, Req::Acquire));
                }
                Phase::Waiting { .. } => {
                    actions.push(Action::Send(c, Req::Acquire));
                    if s.give_ups < self.leavers {
                        actions.push(Action::Send(c, Req::Dequeue));
                    }
                    if client.handed.is_some() {
                        actions.push(Action::Hear(c));
                    }
                }
                Phase::Holding { belief, .. } if belief != Belief::Lost => {
                    actions.push(Action::Send(c, Req::Renew));
                    actions.push(Action::Send(c, Req::Release));
                }
                Phase::Holding { .. } => {
                    // Lost (by its deadline): it releases (owner-checked).
                    actions.push(Action::Send(c, Req::Release));
                }
                _ => {}
            }
            // A holder writes, believing in its lease or not: a paused one
            // wakes up past its deadline and writes before it looks.
            if let Phase::Holding { fence, .. } = client.phase {
                if client.writes < self.writes {
                    actions.push(Action::Send(c, Req::Write(fence)));
                }
            }
            if may_die {
                actions.push(Action::Die(c));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => s.now += 1,
            Action::Expire => s.server.lock = None,
            Action::Save => s.snapshot = Some(s.server.clone()),
            Action::Restore => {
                // A restart takes a moment of the server's clock.
                s.server = s.snapshot.clone()?;
                s.restored = true;
                s.now += 1;
            }
            Action::Send(c, req) => {
                if req == Req::Dequeue {
                    s.give_ups += 1;
                }
                if let Req::Write(_) = req {
                    s.clients[c].writes += 1;
                }
                let client = &mut s.clients[c];
                if req == Req::Release || req == Req::Dequeue {
                    // It stops believing (or waiting) the moment it lets go.
                    client.phase = Phase::Idle;
                }
                client.sent = Some((req, s.now));
            }
            Action::Run(c) => {
                let (req, sent) = s.clients[c].sent.take()?;
                self.run(&mut s, c, req, sent);
            }
            Action::Receive(c) => {
                let (reply, sent) = s.clients[c].reply.take()?;
                self.receive(&mut s, c, reply, sent);
            }
            Action::Hear(c) => {
                let fence = s.clients[c].handed.take()?;
                let Phase::Waiting {
                    sent, floor, since, ..
                } = s.clients[c].phase
                else {
                    return None;
                };
                // Taken as granted only when newer than its last refused
                // attempt, and early in the claim; else it asks again.
                s.clients[c].phase = if fence > floor && (s.now - sent) * 3 < self.claim() {
                    s.clients[c].grants += 1;
                    s.clients[c].claim = true;
                    self.claimed(fence, sent, s.now)
                } else {
                    Phase::Waiting {
                        sent,
                        floor,
                        since,
                        again: true,
                    }
                };
            }
            Action::Die(c) => {
                s.deaths += 1;
                let client = &mut s.clients[c];
                client.phase = Phase::Dead;
                client.reply = None;
                client.handed = None;
            }
            Action::TimeOut(c) => {
                let client = &mut s.clients[c];
                client.reply.take()?;
                if let Phase::Holding { ref mut belief, .. } = client.phase {
                    if *belief == Belief::Held {
                        *belief = Belief::InDoubt;
                    }
                }
            }
        }
        self.refresh(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("exclusion", |m: &Protocol, s: &State| {
                m.restores
                    || s.clients
                    .iter()
                    .filter(|c| matches!(c.phase, Phase::Holding { belief, .. } if belief != Belief::Lost))
                    .count()
                    <= 1
            }),
            Property::always("fencing", |_, s: &State| s.fences_rise),
            Property::always("in doubt", |_, s: &State| {
                // Held or in doubt, it may believe it holds: only before
                // its deadline.
                s.clients.iter().all(|c| match c.phase {
                    Phase::Holding {
                        deadline, belief, ..
                    } => belief == Belief::Lost || s.now < deadline,
                    _ => true,
                })
            }),
            Property::always("held is confirmed", |_, s: &State| {
                s.clients.iter().all(|c| match c.phase {
                    Phase::Holding {
                        overdue, belief, ..
                    } => belief != Belief::Held || s.now < overdue,
                    _ => true,
                })
            }),
            Property::always("claim believed within it", |m: &Protocol, s: &State| {
                // A claim believed, not taken up yet: the server's key
                // is its own, and cannot go (early or not) before the
                // believer's deadline.
                m.restores
                    || s.clients.iter().enumerate().all(|(c, cl)| match cl.phase {
                        Phase::Holding {
                            deadline, belief, ..
                        } if cl.claim && belief != Belief::Lost => s
                            .server
                            .lock
                            .as_ref()
                            .is_some_and(|l| l.owner == c && deadline + m.skew <= l.expires),
                        _ => true,
                    })
            }),
            Property::always("guarded writes held", |m: &Protocol, s: &State| {
                m.restores || s.writes_held
            }),
            Property::always(
                "guarded writes in token order",
                |m: &Protocol, s: &State| m.restores || s.writes_rise,
            ),
            Property::always("lock-delay", |m: &Protocol, s: &State| {
                m.restores || s.delay_kept
            }),
            Property::always("liveness", |m: &Protocol, s: &State| {
                m.fair.is_none_or(|fair| {
                    s.clients.iter().all(|c| match c.phase {
                        Phase::Waiting { since, .. } => s.now - since <= fair.bound,
                        _ => true,
                    })
                })
            }),
            Property::always("claim", |m: &Protocol, s: &State| {
                s.server.lock.as_ref().is_none_or(|l| {
                    !l.claimed
                        || s.clients[l.owner].phase != Phase::Dead
                        || l.expires <= s.now + m.claim()
                })
            }),
            Property::always("stay", |m: &Protocol, s: &State| {
                // A free lock is refused to those behind a dead waiter's
                // place for at most the stay (bounded whatever the backoff).
                let free = s.server.lock.as_ref().is_none_or(|l| l.expires <= s.now);
                !free
                    || s.server.queue.iter().all(|&(w, until)| {
                        s.clients[w].phase != Phase::Dead || until <= s.now + m.stay
                    })
            }),
            Property::sometimes("a hand-over", |_, s: &State| s.handed_over),
            Property::sometimes("a take-up", |_, s: &State| s.taken_up),
            Property::sometimes("a return from doubt", |m: &Protocol, s: &State| {
                !m.doubt || s.recovered
            }),
            Property::sometimes("a guarded write refused", |m: &Protocol, s: &State| {
                m.writes == 0 || s.write_refused
            }),
            Property::sometimes("a lock-delay refusal", |m: &Protocol, s: &State| {
                m.delay == 0 || s.delayed
            }),
            Property::sometimes("a restore after a grant", |m: &Protocol, s: &State| {
                !m.restores || (s.restored && s.last_fence > 0)
            }),
        ]
    }
}
