//! Load shedding for creates: a bounded number work at once per process, and a create that
//! cannot get a slot soon is refused with 503 before it has made anything. Under a burst the
//! apiserver then spends its capacity on creates that finish, instead of starting creates that
//! would be abandoned at the deadline and leave objects for the reconciler.

use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

use super::StackError;

pub(crate) struct CreateSlots {
    slots: Semaphore,
    max_wait: Duration,
}

impl CreateSlots {
    pub(crate) fn new(slots: usize, max_wait: Duration) -> Self {
        Self {
            slots: Semaphore::new(slots),
            max_wait,
        }
    }

    /// A slot for one create, held until the permit drops; 503 after waiting `max_wait`.
    pub(crate) async fn enter(&self) -> Result<SemaphorePermit<'_>, StackError> {
        if let Ok(permit) = self.slots.try_acquire() {
            return Ok(permit);
        }
        match tokio::time::timeout(self.max_wait, self.slots.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(StackError::Unavailable(
                "cluster busy: too many creates in flight, retry".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_create_waits_for_a_slot_then_is_refused() {
        let slots = CreateSlots::new(2, Duration::from_millis(50));
        let first = slots.enter().await.unwrap();
        let _second = slots.enter().await.unwrap();
        let refused = slots.enter().await.unwrap_err();
        assert!(matches!(refused, StackError::Unavailable(_)), "{refused}");

        // A slot freed while waiting is taken.
        let waiting = slots.enter();
        drop(first);
        assert!(waiting.await.is_ok());
    }
}
