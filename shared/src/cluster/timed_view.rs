//! The last read of something the cluster holds, with when it was made, shared by a
//! process's concurrent calls: each call says how old a read it accepts, and one read at a
//! time refreshes it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(super) struct TimedView<T: ?Sized> {
    last: Mutex<Option<(Arc<T>, Instant)>>,
    /// One read at a time: callers that find the view stale wait for the read under way.
    pub(super) refresh: tokio::sync::Mutex<()>,
}

impl<T: ?Sized> Default for TimedView<T> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T: ?Sized> TimedView<T> {
    /// What was read at most `max_age` before `now` (or after it).
    pub(super) fn get(&self, max_age: Duration, now: Instant) -> Option<Arc<T>> {
        let last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        last.as_ref()
            .filter(|(_, read_at)| now.saturating_duration_since(*read_at) <= max_age)
            .map(|(value, _)| Arc::clone(value))
    }

    /// Keeps `value`, as read at `read_at`, unless a later read is already kept; returns what
    /// is kept.
    pub(super) fn replace(&self, value: Arc<T>, read_at: Instant) -> Arc<T> {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match last.as_ref() {
            Some((newer, at)) if *at > read_at => Arc::clone(newer),
            _ => {
                *last = Some((Arc::clone(&value), read_at));
                value
            }
        }
    }
}
