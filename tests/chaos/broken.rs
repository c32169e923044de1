//! The negative control: a locker with the classic mistakes, built here so
//! that the checker can be shown to catch them. It releases with a plain
//! `DEL` (deleting whoever holds the key), renews with a plain `PEXPIRE`
//! (extending whoever holds it), and never tells a holder anything.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::history::Unlock;
use crate::worker::{Held, Lock, PREFIX};

pub struct BrokenLocker {
    pool: r2d2::Pool<redis::Client>,
    ttl: Duration,
    id: u32,
}

impl BrokenLocker {
    pub fn new(pool: r2d2::Pool<redis::Client>, ttl: Duration, id: u32) -> BrokenLocker {
        BrokenLocker { pool, ttl, id }
    }
}

struct BrokenGuard {
    pool: r2d2::Pool<redis::Client>,
    key: String,
    token: u64,
    stop: Arc<AtomicBool>,
}

fn conn(pool: &r2d2::Pool<redis::Client>) -> Option<r2d2::PooledConnection<redis::Client>> {
    let c = pool.get_timeout(Duration::from_millis(500)).ok()?;
    c.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    Some(c)
}

impl Lock for BrokenLocker {
    fn lock(&self, key: &str, wait: Duration) -> Result<Box<dyn Held>, String> {
        let redis_key = format!("{PREFIX}:{key}");
        let ttl_ms = self.ttl.as_millis() as u64;
        let give_up = Instant::now() + wait;
        while Instant::now() < give_up {
            let Some(mut c) = conn(&self.pool) else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let token: u64 = match redis::cmd("INCR")
                .arg(format!("{PREFIX}:broken-fence"))
                .query(&mut *c)
            {
                Ok(t) => t,
                Err(_) => continue,
            };
            let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                .arg(&redis_key)
                .arg(format!("{token:032x}:{token}:w{}", self.id))
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query(&mut *c);
            if let Ok(Some(_)) = set {
                let stop = Arc::new(AtomicBool::new(false));
                let (pool, k, s) = (self.pool.clone(), redis_key.clone(), Arc::clone(&stop));
                // The "watchdog": PEXPIRE with no owner check.
                std::thread::spawn(move || {
                    while !s.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(ttl_ms / 3));
                        if s.load(Ordering::SeqCst) {
                            break;
                        }
                        if let Some(mut c) = conn(&pool) {
                            let _: redis::RedisResult<i64> =
                                redis::cmd("PEXPIRE").arg(&k).arg(ttl_ms).query(&mut *c);
                        }
                    }
                });
                return Ok(Box::new(BrokenGuard {
                    pool: self.pool.clone(),
                    key: redis_key,
                    token,
                    stop,
                }));
            }
            drop(c);
            std::thread::sleep(Duration::from_millis(2));
        }
        Err("timeout".to_owned())
    }
}

impl Held for BrokenGuard {
    fn token(&self) -> u64 {
        self.token
    }
    fn wait_lost(&self, d: Duration) -> bool {
        std::thread::sleep(d);
        false
    }
    fn is_lost(&self) -> bool {
        false
    }
    fn unlock(self: Box<Self>) -> Unlock {
        self.stop.store(true, Ordering::SeqCst);
        match conn(&self.pool) {
            Some(mut c) => {
                let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&self.key).query(&mut *c);
                Unlock::Ok
            }
            None => Unlock::Err,
        }
    }
}
