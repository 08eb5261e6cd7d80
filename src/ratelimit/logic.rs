//! The rate-limit arithmetic, shared by the memory and table paths. All
//! times are microseconds.

/// A fixed window: it opens at the first request after the previous one ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_us: i64,
    pub length_us: i64,
    pub count: i32,
    pub max_requests: i32,
}

impl Window {
    pub fn end_us(&self) -> i64 {
        self.start_us.saturating_add(self.length_us)
    }

    pub fn is_open_at(&self, now_us: i64) -> bool {
        now_us < self.end_us()
    }
}

/// Admits one request against `current`; returns whether it is allowed and
/// the window to store (None: leave the stored state as it is).
pub fn admit(current: Option<Window>, now_us: i64, max_requests: i32, length_us: i64) -> (bool, Option<Window>) {
    match current {
        Some(w) if w.is_open_at(now_us) => {
            if w.count < max_requests {
                (true, Some(Window { count: w.count + 1, max_requests, ..w }))
            } else {
                (false, None)
            }
        }
        _ => (true, Some(Window { start_us: now_us, length_us, count: 1, max_requests })),
    }
}

/// GCRA parameters in redis-cell's terms.
#[derive(Debug, Clone, Copy)]
pub struct Gcra {
    pub max_burst: i32,
    pub count_per_period: i32,
    pub period_us: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub limit: i32,
    pub remaining: i32,
    /// -1 when allowed (or when the request can never be allowed).
    pub retry_after_us: i64,
    pub reset_after_us: i64,
    /// The theoretical arrival time to store; None when denied.
    pub new_tat_us: Option<i64>,
}

impl Gcra {
    fn emission_interval_us(&self) -> i64 {
        (self.period_us / self.count_per_period as i64).max(1)
    }

    /// redis-cell's CL.THROTTLE: `tat` is the stored theoretical arrival
    /// time (None for a new key); `quantity` 0 only looks.
    pub fn throttle(&self, tat: Option<i64>, now_us: i64, quantity: i32) -> Verdict {
        let limit = self.max_burst.saturating_add(1);
        let interval = self.emission_interval_us();
        let tolerance = interval.saturating_mul(limit as i64);
        let increment = interval.saturating_mul(quantity as i64);
        let tat = tat.unwrap_or(now_us);
        let new_tat = tat.max(now_us).saturating_add(increment);
        let allow_at = new_tat.saturating_sub(tolerance);
        let diff = now_us - allow_at;
        if diff < 0 {
            return Verdict {
                allowed: false,
                limit,
                remaining: 0,
                retry_after_us: if increment <= tolerance { -diff } else { -1 },
                reset_after_us: (tat - now_us).max(0),
                new_tat_us: None,
            };
        }
        let ttl = new_tat - now_us;
        let next = tolerance - ttl;
        let remaining = if next > -interval { (next / interval).clamp(0, i32::MAX as i64) as i32 } else { 0 };
        Verdict { allowed: true, limit, remaining, retry_after_us: -1, reset_after_us: ttl, new_tat_us: Some(new_tat) }
    }
}
