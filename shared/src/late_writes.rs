//! Writes that outlive the caller who gave up on them. A create abandoned at its deadline
//! drops its future; a request cut off in flight may still land (at the apiserver, in
//! DynamoDB) after the create's undo looked for what to delete, and outlive the failed
//! request. So the create's writes and the undo's deletes run to their answer in a task of
//! their own, the undo deletes what a write made once the write has its answer, and a write
//! answered after its caller gave up removes what it made itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tokio::task::JoinError;

/// Runs `write` in a task of its own, to its answer whether or not the caller still waits
/// (a `JoinError` only if it panicked or the runtime stopped).
pub(crate) async fn to_completion<T: Send + 'static>(
    write: impl Future<Output = T> + Send + 'static,
) -> Result<T, JoinError> {
    tokio::spawn(write).await
}

/// The writes of one kind (pod creates, the record's put) of one stack create, and whether its
/// caller gave up on them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Writes {
    given_up: Arc<AtomicBool>,
    /// Read-held by each write until its answer.
    in_flight: Arc<RwLock<()>>,
}

/// One write in flight: [`Writes::give_up`] waits for its answer.
struct InFlight {
    given_up: Arc<AtomicBool>,
    _held: OwnedRwLockReadGuard<()>,
}

impl Writes {
    /// Runs `write` as one of these writes: in a task of its own, to its answer whether or not
    /// the caller still waits (a `JoinError` only if it panicked or the runtime stopped). If
    /// the caller gave up before that answer, `landed_late` says what the write made (`Some`
    /// of the undo that removes it), and that undo runs before [`give_up`](Self::give_up)
    /// returns: either it or the caller's own delete removes what the write made.
    pub(crate) async fn run<T, U>(
        &self,
        write: impl Future<Output = T> + Send + 'static,
        landed_late: impl FnOnce(&T) -> Option<U> + Send + 'static,
    ) -> Result<T, JoinError>
    where
        T: Send + 'static,
        U: Future<Output = ()> + Send,
    {
        let in_flight = self.start().await;
        to_completion(async move {
            let answer = write.await;
            if in_flight.given_up()
                && let Some(undo) = landed_late(&answer)
            {
                undo.await;
            }
            answer
        })
        .await
    }

    async fn start(&self) -> InFlight {
        InFlight {
            given_up: Arc::clone(&self.given_up),
            _held: Arc::clone(&self.in_flight).read_owned().await,
        }
    }

    /// Gives up on the writes and returns once each sent has its answer: what landed before is
    /// there for the caller's delete, what lands after removes itself.
    pub(crate) async fn give_up(&self) {
        self.given_up.store(true, Ordering::SeqCst);
        drop(self.in_flight.write().await);
    }
}

impl InFlight {
    /// Whether the caller gave up before the answer (read before the hold is released, so
    /// that either this write or the caller's delete removes what it made).
    fn given_up(&self) -> bool {
        self.given_up.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn giving_up_waits_for_the_creates_in_flight_and_they_see_it() {
        let creates = Writes::default();
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
    async fn a_write_that_lands_after_its_caller_gave_up_is_undone_before_give_up_returns() {
        let writes = Writes::default();
        let undone = Arc::new(AtomicBool::new(false));
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let write = tokio::spawn({
            let (writes, undone) = (writes.clone(), Arc::clone(&undone));
            async move {
                let landed = async move { answered.await.is_ok() };
                writes
                    .run(landed, move |landed| {
                        landed.then_some(async move { undone.store(true, Ordering::SeqCst) })
                    })
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let give_up = tokio::spawn({
            let writes = writes.clone();
            async move { writes.give_up().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!give_up.is_finished(), "returned before the write's answer");
        answer.send(()).expect("the write waits");
        tokio::time::timeout(Duration::from_secs(1), give_up)
            .await
            .expect("still waiting after the answer")
            .expect("task");
        assert!(undone.load(Ordering::SeqCst), "the late write was not undone");
        assert!(write.await.expect("task").expect("run"), "the caller gets the answer");
    }

    #[tokio::test]
    async fn a_write_answered_before_its_caller_gave_up_is_kept() {
        let writes = Writes::default();
        let undone = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&undone);
        let landed = writes
            .run(async { true }, move |landed| {
                landed.then_some(async move { flag.store(true, Ordering::SeqCst) })
            })
            .await
            .expect("run");
        writes.give_up().await;
        assert!(landed);
        assert!(!undone.load(Ordering::SeqCst), "a write answered in time was undone");
    }

    #[tokio::test]
    async fn a_write_finishes_after_its_caller_gave_up() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let write = to_completion(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(());
        });
        assert!(tokio::time::timeout(Duration::from_millis(1), write).await.is_err());
        tokio::time::timeout(Duration::from_secs(1), rx)
            .await
            .expect("the write was cut off with its caller")
            .expect("sent");
    }
}
