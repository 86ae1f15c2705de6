//! [`Transactional`]: the drivers' transactions that
//! [`Client::enqueue_tx`](crate::Client::enqueue_tx) enqueues in, so the one
//! method takes a `rusqlite::Transaction` on SQLite and a
//! `sqlx::Transaction<Postgres>` on PostgreSQL.
//!
//! Each driver keeps its own calling style: rusqlite is synchronous, so on
//! SQLite `enqueue_tx` returns the `Result` at once (it can run inside
//! `spawn_blocking`, next to the caller's other statements); sqlx is async,
//! so on PostgreSQL it returns a future to `.await`. Which one is decided
//! by the transaction's type, at compile time.

#[cfg(feature = "postgres")]
use std::future::Future;
#[cfg(feature = "postgres")]
use std::pin::Pin;

use jq_core::{JobId, NewJob, Result};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::backend::Backend;

/// A transaction of a database driver that jobs of a storage `S` can be
/// enqueued in: the jobs exist if and only if the transaction commits, and
/// the workers' wake-up is sent with the commit.
///
/// Implemented for `&rusqlite::Transaction` with [`jq_sqlite::SqliteStorage`]
/// (feature `sqlite`) and `&mut sqlx::Transaction<Postgres>` with
/// [`jq_postgres::PostgresStorage`] (feature `postgres`), and for both with
/// [`Backend`] (where a transaction of the other backend's driver is
/// [`jq_core::Error::InvalidInput`]). Use the driver versions jq re-exports,
/// `jq::sqlite::rusqlite` and `jq::postgres::sqlx`. A backend of your own
/// can implement it for its driver's transaction.
pub trait Transactional<S> {
    /// What enqueueing returns: `Result<T>` for a synchronous driver, a
    /// future of it for an async one.
    type Output<T: Send + 'static>;

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

#[cfg(feature = "sqlite")]
impl Transactional<jq_sqlite::SqliteStorage> for &jq_sqlite::rusqlite::Transaction<'_> {
    type Output<T: Send + 'static> = Result<T>;

    fn enqueue_in<T: Send + 'static>(
        self,
        storage: &jq_sqlite::SqliteStorage,
        jobs: Result<Vec<NewJob>>,
        then: fn(Vec<JobId>) -> Result<T>,
    ) -> Result<T> {
        then(storage.enqueue_tx(self, jobs?)?)
    }
}

#[cfg(feature = "sqlite")]
impl Transactional<Backend> for &jq_sqlite::rusqlite::Transaction<'_> {
    type Output<T: Send + 'static> = Result<T>;

    fn enqueue_in<T: Send + 'static>(
        self,
        storage: &Backend,
        jobs: Result<Vec<NewJob>>,
        then: fn(Vec<JobId>) -> Result<T>,
    ) -> Result<T> {
        match storage.as_sqlite() {
            Some(s) => self.enqueue_in(s, jobs, then),
            None => Err(wrong_driver("rusqlite", storage)),
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
