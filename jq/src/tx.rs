//! [`Transactional`]: the drivers' transactions that
//! [`Client::enqueue_tx`](crate::Client::enqueue_tx) enqueues in, so the one
//! method takes a `rusqlite::Transaction` on SQLite and a
//! `sqlx::Transaction<Postgres>` on PostgreSQL.
//!
//! The call has one shape on both: `client.enqueue_tx(&mut tx, job).await`.
//! rusqlite is synchronous, so on SQLite the work is done when the call
//! returns and the future it gives back is already complete
//! (`std::future::Ready`): `.await` it in async code, or take its result
//! with `.into_inner()` in synchronous code (inside `spawn_blocking`, next
//! to the caller's other statements). On PostgreSQL the future runs the
//! statement when awaited.

use std::future::Future;
#[cfg(feature = "postgres")]
use std::pin::Pin;

use jq_core::workflow::WorkflowPlan;
use jq_core::{JobId, NewJob, Result};

use crate::enqueued::EnqueuedWorkflow;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::backend::Backend;

/// A transaction of a database driver that jobs of a storage `S` can be
/// enqueued in: the jobs exist if and only if the transaction commits, and
/// the workers' wake-up is sent with the commit.
///
/// Implemented for `&mut rusqlite::Transaction` with [`jq_sqlite::SqliteStorage`]
/// (feature `sqlite`) and `&mut sqlx::Transaction<Postgres>` with
/// [`jq_postgres::PostgresStorage`] (feature `postgres`), and for both with
/// [`Backend`] (where a transaction of the other backend's driver is
/// [`jq_core::Error::InvalidInput`]). Use the driver versions jq re-exports,
/// `jq::sqlite::rusqlite` and `jq::postgres::sqlx`. A backend of your own
/// can implement it for its driver's transaction.
pub trait Transactional<S> {
    /// What enqueueing returns: a future of the ids (already complete for
    /// a synchronous driver).
    type Output<T: Send + 'static>: Future<Output = Result<T>>;

    /// Enqueues `jobs` (an `Err` is passed through: the jobs could not be
    /// built) in this transaction on `storage`, then maps the ids with
    /// `then`.
    fn enqueue_in<T: Send + 'static>(
        self,
        storage: &S,
        jobs: Result<Vec<NewJob>>,
        then: fn(Vec<JobId>) -> Result<T>,
    ) -> Self::Output<T>;
}

/// A [`Transactional`] transaction that a whole workflow can be stored in
/// too ([`Client::enqueue_workflow_tx`](crate::Client::enqueue_workflow_tx)):
/// its steps exist if and only if the transaction commits, as with
/// [`WorkflowStorage::enqueue_workflow`](jq_core::storage::WorkflowStorage::enqueue_workflow)
/// all of them or none, and the workers' wake-up is sent with the commit.
///
/// Implemented for the same transactions as [`Transactional`] on SQLite and
/// PostgreSQL (both keep workflows), and for both with [`Backend`]. A trait
/// of its own so that a backend of your own implementing [`Transactional`]
/// need not keep workflows.
pub trait TransactionalWorkflows<S>: Transactional<S> {
    /// Stores `plan` (an `Err` is passed through: the workflow could not be
    /// planned) in this transaction on `storage`.
    fn enqueue_workflow_in(self, storage: &S, plan: Result<WorkflowPlan>) -> Self::Output<EnqueuedWorkflow>;
}

#[cfg(feature = "sqlite")]
impl TransactionalWorkflows<jq_sqlite::SqliteStorage> for &mut jq_sqlite::rusqlite::Transaction<'_> {
    fn enqueue_workflow_in(
        self,
        storage: &jq_sqlite::SqliteStorage,
        plan: Result<WorkflowPlan>,
    ) -> Self::Output<EnqueuedWorkflow> {
        std::future::ready(plan.and_then(|plan| {
            let ids = storage.enqueue_workflow_tx(self, &plan).into_inner()?;
            Ok(EnqueuedWorkflow::of(plan, ids))
        }))
    }
}

#[cfg(feature = "sqlite")]
impl TransactionalWorkflows<Backend> for &mut jq_sqlite::rusqlite::Transaction<'_> {
    fn enqueue_workflow_in(self, storage: &Backend, plan: Result<WorkflowPlan>) -> Self::Output<EnqueuedWorkflow> {
        match storage.as_sqlite() {
            Some(s) => self.enqueue_workflow_in(s, plan),
            None => std::future::ready(Err(wrong_driver("rusqlite", storage))),
        }
    }
}

#[cfg(feature = "sqlite")]
impl Transactional<jq_sqlite::SqliteStorage> for &mut jq_sqlite::rusqlite::Transaction<'_> {
    type Output<T: Send + 'static> = std::future::Ready<Result<T>>;

    fn enqueue_in<T: Send + 'static>(
        self,
        storage: &jq_sqlite::SqliteStorage,
        jobs: Result<Vec<NewJob>>,
        then: fn(Vec<JobId>) -> Result<T>,
    ) -> Self::Output<T> {
        let ids = jobs.and_then(|jobs| storage.enqueue_tx(self, jobs).into_inner());
        std::future::ready(ids.and_then(then))
    }
}

#[cfg(feature = "sqlite")]
impl Transactional<Backend> for &mut jq_sqlite::rusqlite::Transaction<'_> {
    type Output<T: Send + 'static> = std::future::Ready<Result<T>>;

    fn enqueue_in<T: Send + 'static>(
        self,
        storage: &Backend,
        jobs: Result<Vec<NewJob>>,
        then: fn(Vec<JobId>) -> Result<T>,
    ) -> Self::Output<T> {
        match storage.as_sqlite() {
            Some(s) => self.enqueue_in(s, jobs, then),
            None => std::future::ready(Err(wrong_driver("rusqlite", storage))),
        }
    }
}

/// The future [`Client::enqueue_tx`](crate::Client::enqueue_tx) returns
/// with a sqlx transaction; it borrows the transaction for `'t`.
#[cfg(feature = "postgres")]
pub type TxFuture<'t, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 't>>;

#[cfg(feature = "postgres")]
impl<'t, 'c: 't> Transactional<jq_postgres::PostgresStorage>
    for &'t mut jq_postgres::sqlx::Transaction<'c, jq_postgres::sqlx::Postgres>
{
    type Output<T: Send + 'static> = TxFuture<'t, T>;

    fn enqueue_in<T: Send + 'static>(
        self,
        storage: &jq_postgres::PostgresStorage,
        jobs: Result<Vec<NewJob>>,
        then: fn(Vec<JobId>) -> Result<T>,
    ) -> TxFuture<'t, T> {
        let storage = storage.clone();
        Box::pin(async move { then(storage.enqueue_tx(self, jobs?).await?) })
    }
}

#[cfg(feature = "postgres")]
impl<'t, 'c: 't> Transactional<Backend> for &'t mut jq_postgres::sqlx::Transaction<'c, jq_postgres::sqlx::Postgres> {
    type Output<T: Send + 'static> = TxFuture<'t, T>;

    fn enqueue_in<T: Send + 'static>(
        self,
        storage: &Backend,
        jobs: Result<Vec<NewJob>>,
        then: fn(Vec<JobId>) -> Result<T>,
    ) -> TxFuture<'t, T> {
        match storage.as_postgres() {
            Some(s) => self.enqueue_in(s, jobs, then),
            None => {
                let error = wrong_driver("sqlx (PostgreSQL)", storage);
                Box::pin(async move { Err(error) })
            }
        }
    }
}

#[cfg(feature = "postgres")]
impl<'t, 'c: 't> TransactionalWorkflows<jq_postgres::PostgresStorage>
    for &'t mut jq_postgres::sqlx::Transaction<'c, jq_postgres::sqlx::Postgres>
{
    fn enqueue_workflow_in(
        self,
        storage: &jq_postgres::PostgresStorage,
        plan: Result<WorkflowPlan>,
    ) -> TxFuture<'t, EnqueuedWorkflow> {
        let storage = storage.clone();
        Box::pin(async move {
            let plan = plan?;
            let ids = storage.enqueue_workflow_tx(self, &plan).await?;
            Ok(EnqueuedWorkflow::of(plan, ids))
        })
    }
}

#[cfg(feature = "postgres")]
impl<'t, 'c: 't> TransactionalWorkflows<Backend>
    for &'t mut jq_postgres::sqlx::Transaction<'c, jq_postgres::sqlx::Postgres>
{
    fn enqueue_workflow_in(self, storage: &Backend, plan: Result<WorkflowPlan>) -> TxFuture<'t, EnqueuedWorkflow> {
        match storage.as_postgres() {
            Some(s) => self.enqueue_workflow_in(s, plan),
            None => {
                let error = wrong_driver("sqlx (PostgreSQL)", storage);
                Box::pin(async move { Err(error) })
            }
        }
    }
}

/// A transaction of one backend's driver given to a store of another.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn wrong_driver(driver: &str, storage: &Backend) -> jq_core::Error {
    jq_core::Error::invalid(
        "transaction",
        format!(
            "a {driver} transaction cannot enqueue into a {} store: open the transaction on the store's own database",
            storage.name()
        ),
    )
}
