//! Writes that outlive the caller who gave up on them. A create abandoned at its deadline
//! drops its future; a request cut off in flight may still land at the apiserver, after the
//! create's undo looked for what to delete, and outlive the failed request. So pod creates
//! and deletes run to their answer in a task of their own, and a pod create whose caller gave
//! up deletes what it made.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use super::ClusterError;

/// Runs `write` in a task of its own, to its answer whether or not the caller still waits.
pub(super) async fn to_completion<T: Send + 'static>(
    operation: &'static str,
    write: impl Future<Output = Result<T, ClusterError>> + Send + 'static,
) -> Result<T, ClusterError> {
    tokio::spawn(write)
        .await
        .map_err(|source| ClusterError::Interrupted { operation, source })?
}

/// The pod creates of one stack create, and whether its caller gave up on them.
#[derive(Debug, Clone, Default)]
pub(crate) struct PodCreates {
    given_up: Arc<AtomicBool>,
    /// Read-held by each create until its answer.
    in_flight: Arc<RwLock<()>>,
}

/// One create in flight: [`PodCreates::give_up`] waits for its answer.
pub(super) struct InFlight {
    given_up: Arc<AtomicBool>,
    _held: OwnedRwLockReadGuard<()>,
}

impl PodCreates {
    pub(super) async fn start(&self) -> InFlight {
        InFlight {
            given_up: Arc::clone(&self.given_up),
            _held: Arc::clone(&self.in_flight).read_owned().await,
        }
    }

    /// Gives up on the creates and returns once each sent has its answer: what landed before is
    /// there for the caller's delete, what lands after deletes itself.
    pub(crate) async fn give_up(&self) {
        self.given_up.store(true, Ordering::SeqCst);
        drop(self.in_flight.write().await);
    }
}

impl InFlight {
    /// Whether the caller gave up before the answer (read before the hold is released, so
    /// that either this create or the caller's delete removes what landed).
    pub(super) fn given_up(&self) -> bool {
        self.given_up.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn giving_up_waits_for_the_creates_in_flight_and_they_see_it() {
        let creates = PodCreates::default();
        let in_flight = creates.start().await;
        assert!(!in_flight.given_up());
        let give_up = tokio::spawn({
            let creates = creates.clone();
            async move { creates.give_up().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!give_up.is_finished(), "returned before the create's answer");
        assert!(in_flight.given_up(), "the create in flight does not see it");
        drop(in_flight);
        tokio::time::timeout(Duration::from_secs(1), give_up)
            .await
            .expect("still waiting after the answer")
            .expect("task");
    }

    #[tokio::test]
    async fn a_write_finishes_after_its_caller_gave_up() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let write = to_completion("test", async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(());
            Ok(())
        });
        assert!(tokio::time::timeout(Duration::from_millis(1), write).await.is_err());
        tokio::time::timeout(Duration::from_secs(1), rx)
            .await
            .expect("the write was cut off with its caller")
            .expect("sent");
    }
}
