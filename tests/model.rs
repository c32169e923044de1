//! The single-instance lock protocol as a model, checked over every
//! interleaving within bounds with `stateright`.
//!
//! What is modelled: clients that acquire (and queue when the lock is
//! busy), are handed the lock by a release, take a hand-over up, hold,
//! renew, release, give up waiting, and die; each request is sent at one
//! moment, runs on the server as one atomic step (a script) some time
//! later, and its reply arrives later still, so a lease counts from when
//! its request was sent, as the library's does. The server's lock key
//! expires by its own clock (lazily, as Redis expires a key when it is
//! read); the fencing counter is minted as the scripts mint it; the server
//! can save a snapshot and be restored from it (a restart from an older
//! RDB file, a failover to a lagging replica). A paused client is one that
//! takes no step: its belief ends at its lease's deadline, as the guard's.
//! Time is logical: one tick is a millisecond of the server's clock, and
//! client clocks run at the same rate (the drift allowance is zero here).
//!
//! Properties, over every state within the bounds:
//! - *exclusion*: at most one client believes it holds the lock (its lease
//!   deadline not passed);
//! - *fencing*: every grant's token is above every token granted before,
//!   restores included;
//! - *claim*: a lock handed to a waiter that is gone (and so never takes
//!   it up) lasts at most the claim window (the waiter's stay), never the
//!   TTL;
//! - and, as a check that the bounds reach the interesting states, that a
//!   hand-over, a restore and a take-up each happen somewhere.
//!
//! Not modelled: several keys, Redlock, the release announcements being
//! lost (a waiter that misses one retries, which the model lets it do at
//! any time), and liveness under fair scheduling.
//!
//! `REDMUTEX_MODEL=long` checks wider bounds.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use stateright::{Checker, Model, Property};

/// A fault put back into the model, to show the checker finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Flaw {
    /// The old `mint`: reseed the counter from the clock only when it is
    /// missing, else add one (tokens repeat after a restore).
    OldMint,
    /// The old hand-over: a waiter is handed the lock for the whole TTL, so
    /// a dead waiter keeps it from everyone that long.
    NoClaim,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Lock {
    owner: usize,
    fence: u64,
    /// Server time at which the key expires.
    expires: u64,
    /// Handed over and not taken up yet (a claim).
    claimed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Server {
    lock: Option<Lock>,
    /// The fencing counter; 0 when missing.
    counter: u64,
    /// Waiters in arrival order, each with the server time it stays until.
    queue: Vec<(usize, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Req {
    Acquire,
    Renew,
    Release,
    /// A waiter that gives up leaves the queue (and frees a lock handed to
    /// it meanwhile).
    Dequeue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Reply {
    Granted(u64),
    /// Refused, with the counter as it stood (the floor below which no
    /// hand-over is newer than this attempt).
    Busy(u64),
    Renewed,
    NotOurs,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    /// Refused; waits for a hand-over or tries again.
    Waiting {
        sent: u64,
        floor: u64,
    },
    /// Believes it holds the lock until `deadline` (its own clock).
    Holding {
        fence: u64,
        deadline: u64,
    },
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Client {
    phase: Phase,
    /// A request sent (and when), not run on the server yet.
    sent: Option<(Req, u64)>,
    /// A reply on its way back, to the request sent at that time.
    reply: Option<(Reply, u64)>,
    /// A hand-over announcement on its way: the fence it was handed.
    handed: Option<u64>,
    /// Grants this client had (a bound).
    grants: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    now: u64,
    server: Server,
    snapshot: Option<Server>,
    restored: bool,
    clients: Vec<Client>,
    /// Ghost: the largest token granted so far, and whether every grant
    /// rose above the one before.
    last_fence: u64,
    fences_rise: bool,
    /// Ghost: whether a hand-over and a take-up happened.
    handed_over: bool,
    taken_up: bool,
    /// Deaths and give-ups so far (each bounded, to keep the state space
    /// small).
    deaths: u8,
    give_ups: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Send(usize, Req),
    Run(usize),
    Receive(usize),
    /// A waiter hears of a hand-over and takes it as granted.
    Hear(usize),
    Die(usize),
    Save,
    Restore,
}

/// The model and its bounds.
struct Protocol {
    clients: usize,
    ttl: u64,
    /// How long a waiter stays queued after an attempt (its backoff plus
    /// an I/O timeout, in the library); the claim is the smaller of the
    /// two.
    stay: u64,
    /// Time does not go past this.
    horizon: u64,
    /// Grants per client.
    grants: u8,
    /// How many clients may die, and how many may give up waiting (each
    /// bounded, to keep the state space small).
    leavers: u8,
    /// Whether the server may be restored from a snapshot. A restore takes
    /// locks away (a documented limit: the holder is told at its next
    /// renewal), so exclusion is checked without it and fencing with it.
    restores: bool,
    flaw: Option<Flaw>,
}

/// Server ticks are milliseconds; the clock that `mint` reads is in µs.
const MICROS: u64 = 1000;

impl Protocol {
    fn claim(&self) -> u64 {
        self.stay.min(self.ttl)
    }

    fn mint(&self, s: &mut State) -> u64 {
        let clock = s.now * MICROS;
        let fence = match self.flaw {
            Some(Flaw::OldMint) if s.server.counter != 0 => s.server.counter + 1,
            Some(Flaw::OldMint) => clock,
            _ => (s.server.counter + 1).max(clock),
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
                if ours || (s.server.lock.is_none() && head.is_none_or(|h| h == c)) {
                    s.server.queue.retain(|&(w, _)| w != c);
                    let fence = self.mint(s);
                    s.server.lock = Some(Lock {
                        owner: c,
                        fence,
                        expires: s.now + self.ttl,
                        claimed: false,
                    });
                    Reply::Granted(fence)
                } else {
                    let until = s.now + self.stay;
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
                    Reply::Renewed
                } else {
                    Reply::NotOurs
                }
            }
            Req::Release => {
                if ours {
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
        };
        // A release's or a dequeue's reply changes nothing for its client.
        if reply != Reply::Done {
            s.clients[c].reply = Some((reply, sent));
        }
    }

    /// Client `c` reads the reply to its request sent at `sent`.
    fn receive(&self, s: &mut State, c: usize, reply: Reply, sent: u64) {
        let client = &mut s.clients[c];
        client.phase = match (client.phase, reply) {
            (Phase::Dead, _) => Phase::Dead,
            (_, Reply::Granted(fence)) => {
                client.grants += 1;
                client.handed = None;
                Phase::Holding {
                    fence,
                    deadline: sent + self.ttl,
                }
            }
            (_, Reply::Busy(floor)) => Phase::Waiting { sent, floor },
            (Phase::Holding { fence, deadline }, Reply::Renewed) => Phase::Holding {
                fence,
                deadline: deadline.max(sent + self.ttl),
            },
            (Phase::Holding { .. }, Reply::NotOurs) => Phase::Idle,
            (phase, _) => phase,
        };
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
                };
                self.clients
            ],
            last_fence: 0,
            fences_rise: true,
            handed_over: false,
            taken_up: false,
            deaths: 0,
            give_ups: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
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
                Phase::Holding { deadline, .. } if deadline > s.now => {
                    actions.push(Action::Send(c, Req::Renew));
                    actions.push(Action::Send(c, Req::Release));
                }
                Phase::Holding { .. } => {
                    // Lost by its deadline: it releases (owner-checked).
                    actions.push(Action::Send(c, Req::Release));
                }
                _ => {}
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
                let Phase::Waiting { sent, floor } = s.clients[c].phase else {
                    return None;
                };
                // Taken as granted only when newer than its last refused
                // attempt, and early in the claim; else it asks again.
                if fence > floor && (s.now - sent) * 3 < self.claim() {
                    s.clients[c].phase = Phase::Holding {
                        fence,
                        deadline: sent + self.claim(),
                    };
                    s.clients[c].grants += 1;
                }
            }
            Action::Die(c) => {
                s.deaths += 1;
                let client = &mut s.clients[c];
                client.phase = Phase::Dead;
                client.reply = None;
                client.handed = None;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("exclusion", |m: &Protocol, s: &State| {
                m.restores
                    || s.clients
                    .iter()
                    .filter(|c| matches!(c.phase, Phase::Holding { deadline, .. } if deadline > s.now))
                    .count()
                    <= 1
            }),
            Property::always("fencing", |_, s: &State| s.fences_rise),
            Property::always("claim", |m: &Protocol, s: &State| {
                s.server.lock.as_ref().is_none_or(|l| {
                    !l.claimed
                        || s.clients[l.owner].phase != Phase::Dead
                        || l.expires <= s.now + m.claim()
                })
            }),
            Property::sometimes("a hand-over", |_, s: &State| s.handed_over),
            Property::sometimes("a take-up", |_, s: &State| s.taken_up),
            Property::sometimes("a restore after a grant", |m: &Protocol, s: &State| {
                !m.restores || (s.restored && s.last_fence > 0)
            }),
        ]
    }
}

/// The bounds: (clients, grants per client, horizon in ticks). A restore
/// can come at any point, which multiplies the states: that variant gets a
/// tick less.
fn bounds(restores: bool) -> (usize, u8, u64) {
    // A debug build (the README's `cargo test`) checks about ten times
    // fewer states per second: it gets one tick less.
    let long = std::env::var("REDMUTEX_MODEL").is_ok_and(|v| v == "long");
    let horizon = if long {
        6
    } else if cfg!(debug_assertions) {
        4
    } else {
        5
    };
    (2, 2, if restores { horizon - 1 } else { horizon })
}

fn protocol(restores: bool, flaw: Option<Flaw>) -> Protocol {
    let (clients, grants, horizon) = bounds(restores);
    Protocol {
        clients,
        ttl: 3,
        stay: 2,
        horizon,
        grants,
        // With restores, only fencing is checked: nobody dies or gives up.
        leavers: u8::from(!restores),
        restores,
        flaw,
    }
}

#[test]
fn the_protocol_keeps_its_properties_in_every_interleaving() {
    for restores in [false, true] {
        let started = std::time::Instant::now();
        let model = protocol(restores, None);
        let (clients, grants, horizon) = (model.clients, model.grants, model.horizon);
        let checker = model.checker().spawn_dfs().join();
        eprintln!(
            "model{}: {clients} clients, {grants} grants each, {horizon} ms, TTL 3 ms, stay 2 ms: \
             {} states ({} unique) in {:.1?}",
            if restores { " with a restore" } else { "" },
            checker.state_count(),
            checker.unique_state_count(),
            started.elapsed()
        );
        checker.assert_properties();
    }
}

/// Each old hole, put back, is found, with the path that shows it.
#[test]
fn the_old_holes_are_found() {
    for (flaw, restores, property) in [
        (Flaw::OldMint, true, "fencing"),
        (Flaw::NoClaim, false, "claim"),
    ] {
        // Breadth first: the shortest counterexample.
        let checker = protocol(restores, Some(flaw)).checker().spawn_bfs().join();
        let path = checker
            .discovery(property)
            .unwrap_or_else(|| panic!("{flaw:?}: the checker found no counterexample"));
        eprintln!("{flaw:?} breaks {property}:");
        for action in path.into_actions() {
            eprintln!("  {action:?}");
        }
    }
}
