//! The pool's time source, read for grant timeouts and stall reports: [`Instant::now`] on a
//! device, the simulated fabric's ticks on the fabric, a clock the unit tests move.
use std::time::Instant;

/// What the pool reads the time from.
pub(super) struct Clock(Box<dyn Fn() -> Instant + Send>);

impl Clock {
    /// A clock that reads `now`.
    pub(super) fn new(now: impl Fn() -> Instant + Send + 'static) -> Self {
        Self(Box::new(now))
    }

    pub(super) fn now(&self) -> Instant {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}
