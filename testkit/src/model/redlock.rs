//! Redlock over three independent masters as a model (`Redlock`), checked
//! over every interleaving within bounds by `tests/model.rs`.
//!
//! What is modelled, as the library does it (`src/raw/`): an acquire runs the
//! acquire script on every master, each run one atomic step, in any order
//! and interleaved with other clients' steps; a majority that granted
//! within the TTL is a grant, anything else is released everywhere. A
//! grant then raises every master's counter to its token and takes the
//! masters where the lock is free (`RAISE_FENCE`), unless every master
//! granted and minted the same token (the attempt proposes one, a tick
//! ahead of its clock, which a master mints only up to its own clock plus
//! `bound`), which leaves them as that would; while another client
//! holds it on one of them, it tries again, at most `REPAIR_TRIES` times,
//! then gives the grant up (released everywhere), as it does when the
//! write-back ends after the lease's validity. A renewal extends the
//! keys that are ours and puts back the ones that are missing, and counts
//! on a majority; a release deletes ours everywhere. Each attempt has its
//! own owner token, as each of the library's Redlock attempts does. Keys
//! expire by the masters' clock; one master (master 0; the others are
//! alike) may lose its data once, by a flush or by a restore from an older
//! snapshot, or every master may restart without data, the TTL after the
//! crash. A client may die at any point, in the middle of a fan-out too.
//! Client 0's clock may run `fast` (its proposals lead by that much more).
//! Master 0 may miss one release (it hangs across an unlock): the library
//! sends it again when that master answers, which the model does before
//! master 0's next step.
//!
//! Properties:
//! - *exclusion*: at most one client believes it holds the lock, through
//!   one master's data loss;
//! - *fencing*: every grant's token is above every token granted before,
//!   through a restart of every master without data too, whatever client
//!   0's clock says;
//! - *no leftover*: no step on master 0 meets the key of a release it
//!   missed (once it answers again, that key is gone, not left for its TTL);
//! - and that a grant on a bare majority (a master held by a rival's
//!   attempt for a moment), a grant on every master with one token (no
//!   write-back) and a data loss after a grant each happen somewhere.
//!
//! Not modelled: Redlock has no waiters' queue, so no liveness is claimed
//! (two clients can split the masters between them, each release, and try
//! again: the library's backoff with jitter makes that unlikely, not
//! impossible); network failures (an unanswered step is one that has not
//! run yet).
//!
//! Clocks: a lease's validity is the client's, from when its acquire (or
//! renewal) was sent, for the TTL, less the drift allowance; each master's
//! key may expire up to `skew` ticks sooner than its TTL says (its clock
//! fast against the clients').

use stateright::{Model, Property};

/// The masters.
pub const MASTERS: usize = 3;
const QUORUM: u8 = 2;
/// How many times a grant tries to take the masters a rival held (the
/// library's `REPAIR_TRIES`).
pub const REPAIR_TRIES: u8 = 3;

/// A fault put back into the model, to show the checker finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flaw {
    /// A grant kept on a bare majority: the write-back raises the counters
    /// but does not take the masters where the lock is free, and the grant
    /// stands while a rival holds one for a moment.
    BareMajority,
    /// The write-back skipped for a majority that minted one token, not
    /// only when every master granted.
    OneTokenOnMajority,
    /// A proposal minted however far it leads the master's clock (the
    /// library before it bounded it): a fast client clock pushes every
    /// counter ahead, and tokens fall once every master lost its data.
    UnboundedProposal,
    /// A release a master missed is not sent again (the library before it
    /// did): the key stays there for its TTL, and every grant meets it.
    LostReleaseStays,
}

/// The data loss master 0 may suffer once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Loss {
    /// `FLUSHALL`, or a restart without persistence.
    Flush,
    /// A restart from a snapshot saved earlier.
    Restore,
    /// Every master crashes and restarts without data, the TTL later.
    All,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The owner token: one per attempt.
    pub owner: u8,
    pub fence: u64,
    pub expires: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Master {
    pub key: Option<Key>,
    pub counter: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    Acquire,
    /// `RAISE_FENCE`, after a majority granted.
    Raise,
    Renew,
    Release,
}

/// An operation on its way through the masters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Op {
    pub step: Step,
    /// When the acquire (or renewal) was sent: the lease counts from here.
    pub sent: u64,
    /// The masters that ran it (a bit each), and how many said yes.
    pub done: u8,
    pub yes: u8,
    /// The largest token minted (acquire), or the grant's token.
    pub fence: u64,
    /// Acquire: the masters that granted minted different tokens.
    pub apart: bool,
    pub tries: u8,
}

impl Op {
    /// How many of the masters that ran it said no.
    fn no(&self) -> u32 {
        self.done.count_ones() - u32::from(self.yes)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Believes it holds the lock with this token until this deadline.
    pub belief: Option<(u64, u64)>,
    pub op: Option<Op>,
    /// Attempts so far; the current attempt's owner token is derived from
    /// it.
    pub attempts: u8,
    pub dead: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub now: u64,
    pub masters: Vec<Master>,
    pub snapshot: Option<Master>,
    pub lost: bool,
    pub clients: Vec<Client>,
    pub deaths: u8,
    /// The owner token of a release master 0 missed, to send again before
    /// its next step.
    pub resend: Option<u8>,
    /// Ghosts: the owner token of a release master 0 missed (once), and
    /// whether a step there met its key.
    pub missed: Option<u8>,
    pub met_missed: bool,
    /// Ghosts: the largest token granted, whether grants' tokens rose, and
    /// whether the interesting cases were reached.
    pub last_fence: u64,
    pub fences_rise: bool,
    pub repaired: bool,
    pub lost_after_grant: bool,
    pub granted_as_one: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    /// Master `m`'s clock, fast against the clients', expires its key
    /// before its TTL says (at most `skew` ticks before).
    Expire(usize),
    /// Client starts an operation on every master.
    Begin(usize, Step),
    /// Master `m` runs client `c`'s operation.
    Run(usize, usize),
    Die(usize),
    Save,
    Lose,
    /// Master 0 misses client `c`'s release (it hangs across the unlock).
    MissRelease(usize),
}

/// The model and its bounds.
pub struct Redlock {
    /// Acquire attempts, for each client (so also how many clients).
    pub attempts: Vec<u8>,
    pub ttl: u64,
    pub horizon: u64,
    pub deaths: u8,
    pub loss: Option<Loss>,
    pub flaw: Option<Flaw>,
    /// The clients' drift allowance, and how much sooner than its TTL a
    /// master may expire its key. Exclusion holds while `skew <= drift`.
    pub drift: u64,
    pub skew: u64,
    /// How far client 0's clock runs fast, in ticks (0: not at all).
    pub fast: u64,
    /// How far a proposal may lead a master's own clock, in ticks (the
    /// library's `PROPOSAL_BOUND`; below the TTL, as it is there).
    pub bound: u64,
    /// Whether master 0 may miss one release.
    pub miss_release: bool,
}

const ALL: u8 = (1 << MASTERS) - 1;

impl Redlock {
    /// Client `c`'s owner token for its current attempt.
    fn token(c: usize, attempts: u8) -> u8 {
        // Clients and attempts are few (a bound): 16 attempts per client.
        u8::try_from(c).unwrap_or(u8::MAX) << 4 | attempts
    }

    /// The end of a lease whose acquire or renewal was sent at `sent`.
    fn validity(&self, sent: u64) -> u64 {
        super::deadline(sent, self.ttl, self.drift)
    }

    /// Mints on master `m`, at least `at_least` (the attempt's proposal),
    /// as far as it leads the master's clock by `bound` at most.
    fn mint(&self, s: &mut State, m: usize, at_least: u64) -> u64 {
        let at_least = if self.flaw == Some(Flaw::UnboundedProposal) {
            at_least
        } else {
            at_least.min(super::micros(s.now + self.bound))
        };
        let master = &mut s.masters[m];
        let fence = super::mint(master.counter, s.now).max(at_least);
        master.counter = fence;
        fence
    }

    /// Runs `op` of client `c` (owner token `token`) on master `m`; says
    /// whether the master said yes.
    fn run(&self, s: &mut State, c: usize, m: usize, op: &mut Op) -> bool {
        let now = s.now;
        let token = Self::token(c, s.clients[c].attempts);
        let master = &mut s.masters[m];
        if master.key.as_ref().is_some_and(|k| k.expires <= now) {
            master.key = None;
        }
        if m == 0 {
            // Answering again, master 0 first gets the release it missed.
            if let Some(owner) = s.resend.take() {
                if master.key.as_ref().is_some_and(|k| k.owner == owner) {
                    master.key = None;
                }
            }
            let missed = master.key.as_ref().map(|k| Some(k.owner));
            s.met_missed |= s.missed.is_some() && missed == Some(s.missed);
        }
        let ours = master.key.as_ref().is_some_and(|k| k.owner == token);
        let free = master.key.is_none();
        match op.step {
            Step::Acquire => {
                if !(ours || free) {
                    return false;
                }
                // The proposal: a tick ahead of the client's clock.
                let clock = op.sent + if c == 0 { self.fast } else { 0 };
                let fence = self.mint(s, m, super::micros(clock + 1));
                s.masters[m].key = Some(Key {
                    owner: token,
                    fence,
                    expires: now + self.ttl,
                });
                op.apart |= op.yes > 0 && fence != op.fence;
                op.fence = op.fence.max(fence);
                true
            }
            Step::Raise => {
                master.counter = master.counter.max(op.fence);
                if let Some(k) = master.key.as_mut().filter(|_| ours) {
                    k.fence = op.fence;
                    true
                } else if free {
                    if self.flaw != Some(Flaw::BareMajority) {
                        master.key = Some(Key {
                            owner: token,
                            fence: op.fence,
                            expires: now + self.ttl,
                        });
                    }
                    true
                } else {
                    self.flaw == Some(Flaw::BareMajority)
                }
            }
            Step::Renew => {
                if !(ours || free) {
                    return false;
                }
                let fence = master.key.as_ref().map_or(op.fence, |k| k.fence);
                master.key = Some(Key {
                    owner: token,
                    fence,
                    expires: now + self.ttl,
                });
                master.counter = master.counter.max(op.fence);
                true
            }
            Step::Release => {
                if ours {
                    master.key = None;
                }
                ours
            }
        }
    }

    /// All masters ran client `c`'s `op`: the client decides, as the
    /// library's `raw/` and `quorum.rs` do.
    fn decide(&self, s: &mut State, c: usize, op: Op) {
        let release = Op {
            step: Step::Release,
            sent: s.now,
            done: 0,
            yes: 0,
            fence: 0,
            apart: false,
            tries: 0,
        };
        let valid = s.now < self.validity(op.sent);
        let next = match op.step {
            // Every master minted the one token: nothing to write back.
            Step::Acquire if self.as_one(op) && valid => {
                s.granted_as_one = true;
                Self::keep(s, c, op, self.validity(op.sent));
                None
            }
            Step::Acquire if op.yes >= QUORUM && s.now < self.validity(op.sent) => Some(Op {
                step: Step::Raise,
                done: 0,
                yes: 0,
                ..op
            }),
            Step::Acquire => Some(release),
            // The write-back took what was left of the lease: no grant
            // (the library's check after `raise_fences`).
            Step::Raise if op.no() == 0 && s.now >= self.validity(op.sent) => Some(release),
            Step::Raise if op.no() == 0 => {
                s.repaired |= op.tries > 0;
                Self::keep(s, c, op, self.validity(op.sent));
                None
            }
            Step::Raise if op.tries + 1 < REPAIR_TRIES => Some(Op {
                done: 0,
                yes: 0,
                tries: op.tries + 1,
                ..op
            }),
            Step::Raise => Some(release),
            Step::Renew => {
                let client = &mut s.clients[c];
                match client.belief {
                    Some((fence, deadline)) if op.yes >= QUORUM && deadline > s.now => {
                        client.belief = Some((fence, deadline.max(self.validity(op.sent))));
                    }
                    _ if op.yes >= QUORUM || op.no() >= u32::from(QUORUM) => client.belief = None,
                    _ => {}
                }
                None
            }
            Step::Release => None,
        };
        s.clients[c].op = next;
    }
}

impl Redlock {
    /// Every master granted `op` and minted one token (any majority that
    /// did, with the flaw).
    fn as_one(&self, op: Op) -> bool {
        let enough = if self.flaw == Some(Flaw::OneTokenOnMajority) {
            op.yes >= QUORUM
        } else {
            u32::from(op.yes) == MASTERS as u32
        };
        enough && !op.apart
    }

    /// Client `c` keeps the grant of `op`, until `deadline`.
    fn keep(s: &mut State, c: usize, op: Op, deadline: u64) {
        s.fences_rise &= op.fence > s.last_fence;
        s.last_fence = s.last_fence.max(op.fence);
        s.clients[c].belief = Some((op.fence, deadline));
    }
}

impl Model for Redlock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 1,
            masters: vec![Master::default(); MASTERS],
            snapshot: None,
            lost: false,
            clients: vec![
                Client {
                    belief: None,
                    op: None,
                    attempts: 0,
                    dead: false,
                };
                self.attempts.len()
            ],
            deaths: 0,
            resend: None,
            missed: None,
            met_missed: false,
            last_fence: 0,
            fences_rise: true,
            repaired: false,
            lost_after_grant: false,
            granted_as_one: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        for (m, master) in s.masters.iter().enumerate() {
            if master
                .key
                .as_ref()
                .is_some_and(|k| super::may_expire_early(k.expires, s.now, self.skew))
            {
                actions.push(Action::Expire(m));
            }
        }
        if let Some(loss) = self.loss {
            if !s.lost {
                if loss == Loss::Restore && s.snapshot.is_none() {
                    actions.push(Action::Save);
                }
                if loss != Loss::Restore || s.snapshot.is_some() {
                    actions.push(Action::Lose);
                }
            }
        }
        for (c, client) in s.clients.iter().enumerate() {
            if client.dead {
                continue;
            }
            if s.deaths < self.deaths {
                actions.push(Action::Die(c));
            }
            if let Some(op) = client.op {
                let missable = op.step == Step::Release && op.done & 1 == 0;
                if self.miss_release && s.missed.is_none() && missable {
                    actions.push(Action::MissRelease(c));
                }
                for m in 0..MASTERS {
                    if op.done & (1 << m) == 0 {
                        actions.push(Action::Run(c, m));
                    }
                }
                continue;
            }
            match client.belief {
                None if client.attempts < self.attempts[c] => {
                    actions.push(Action::Begin(c, Step::Acquire));
                }
                Some((_, deadline)) => {
                    if deadline > s.now {
                        actions.push(Action::Begin(c, Step::Renew));
                    }
                    actions.push(Action::Begin(c, Step::Release));
                }
                None => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => s.now += 1,
            Action::Expire(m) => s.masters[m].key = None,
            Action::Save => s.snapshot = Some(s.masters[0].clone()),
            Action::Lose if self.loss == Some(Loss::All) => {
                s.masters = vec![Master::default(); MASTERS];
                s.lost = true;
                s.lost_after_grant = s.last_fence > 0;
                // They come back no sooner than the TTL after the crash.
                s.now += self.ttl;
            }
            Action::Lose => {
                s.masters[0] = s.snapshot.clone().unwrap_or_default();
                s.lost = true;
                s.lost_after_grant = s.last_fence > 0;
                // A restart takes a moment of the master's clock.
                s.now += 1;
            }
            Action::MissRelease(c) => {
                let mut op = s.clients[c].op?;
                let owner = Self::token(c, s.clients[c].attempts);
                s.missed = Some(owner);
                if self.flaw != Some(Flaw::LostReleaseStays) {
                    s.resend = Some(owner);
                }
                op.done |= 1;
                if op.done == ALL {
                    self.decide(&mut s, c, op);
                } else {
                    s.clients[c].op = Some(op);
                }
            }
            Action::Die(c) => {
                s.deaths += 1;
                let client = &mut s.clients[c];
                client.dead = true;
                client.belief = None;
                client.op = None;
            }
            Action::Begin(c, step) => {
                let client = &mut s.clients[c];
                let fence = client.belief.map_or(0, |(fence, _)| fence);
                if step == Step::Acquire {
                    client.attempts += 1;
                }
                if step == Step::Release {
                    // It stops believing the moment it lets go.
                    client.belief = None;
                }
                client.op = Some(Op {
                    step,
                    sent: s.now,
                    done: 0,
                    yes: 0,
                    fence,
                    apart: false,
                    tries: 0,
                });
            }
            Action::Run(c, m) => {
                let mut op = s.clients[c].op?;
                if self.run(&mut s, c, m, &mut op) {
                    op.yes += 1;
                }
                op.done |= 1 << m;
                if op.done == ALL {
                    self.decide(&mut s, c, op);
                } else {
                    s.clients[c].op = Some(op);
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("exclusion", |_, s: &State| {
                s.clients
                    .iter()
                    .filter(|c| c.belief.is_some_and(|(_, deadline)| deadline > s.now))
                    .count()
                    <= 1
            }),
            Property::always("fencing", |_, s: &State| s.fences_rise),
            Property::always("no leftover", |_, s: &State| !s.met_missed),
            Property::sometimes("a release missed", |m: &Redlock, s: &State| {
                !m.miss_release || s.missed.is_some()
            }),
            Property::sometimes("a grant repaired", |_, s: &State| s.repaired),
            Property::sometimes("a grant on every master with one token", |_, s: &State| {
                s.granted_as_one
            }),
            Property::sometimes("a data loss after a grant", |m: &Redlock, s: &State| {
                m.loss.is_none() || s.lost_after_grant
            }),
        ]
    }
}
