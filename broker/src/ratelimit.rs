//! Per-destination connection rate limit: a token bucket per `host:port` key holding up to
//! `per_minute` tokens and refilling at `per_minute / 60` tokens a second.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::time::Instant;

/// Buckets are pruned (full ones dropped) once the map grows past this, then past twice
/// the size that survived.
const PRUNE_FLOOR: usize = 1024;

struct Bucket {
    tokens: f64,
    last: Instant,
}

struct State {
    buckets: HashMap<String, Bucket>,
    prune_at: usize,
}

/// A set of token buckets keyed by destination.
pub struct RateLimiter {
    capacity: f64,
    per_sec: f64,
    state: Mutex<State>,
}

impl RateLimiter {
    /// Up to `per_minute` connections per key per minute (0 is taken as 1).
    pub fn new(per_minute: u32) -> Self {
        let capacity = f64::from(per_minute.max(1));
        RateLimiter {
            capacity,
            per_sec: capacity / 60.0,
            state: Mutex::new(State {
                buckets: HashMap::new(),
                prune_at: PRUNE_FLOOR,
            }),
        }
    }

    /// Take one token for `key`; false if the bucket is empty.
    pub fn try_acquire(&self, key: &str) -> bool {
        let now = Instant::now();
        // A poisoned lock only means another connection panicked mid-update of plain
        // numbers; the map is still usable.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (capacity, per_sec) = (self.capacity, self.per_sec);
        let refilled = |b: &Bucket| {
            (b.tokens + now.duration_since(b.last).as_secs_f64() * per_sec).min(capacity)
        };
        if state.buckets.len() >= state.prune_at {
            state.buckets.retain(|_, b| refilled(b) < capacity);
            state.prune_at = PRUNE_FLOOR.max(state.buckets.len() * 2);
        }
        let bucket = state.buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: capacity,
            last: now,
        });
        bucket.tokens = refilled(bucket);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn bucket_empties_per_key() {
        let rl = RateLimiter::new(3);
        assert!(rl.try_acquire("a.example:443"));
        assert!(rl.try_acquire("a.example:443"));
        assert!(rl.try_acquire("a.example:443"));
        assert!(!rl.try_acquire("a.example:443"));
        assert!(rl.try_acquire("a.example:22"));
        assert!(rl.try_acquire("b.example:443"));
    }

    #[test]
    fn pruning_keeps_partial_buckets() {
        let rl = RateLimiter::new(1);
        for i in 0..PRUNE_FLOOR + 10 {
            assert!(rl.try_acquire(&format!("h{i}:443")));
        }
        // Every bucket is empty (not refilled within the test), so none was pruned and
        // the limit still holds for the first key.
        assert!(!rl.try_acquire("h0:443"));
    }
}
