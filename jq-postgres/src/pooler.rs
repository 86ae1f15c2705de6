//! Statements behind a connection pooler in transaction mode (PgBouncer
//! `pool_mode = transaction`), where each transaction may run on another
//! server connection, so nothing may outlive a transaction:
//!
//! - no named prepared statements: every statement is unnamed
//!   (`persistent(false)`) and parsed where it runs. *sqlx names them
//!   `sqlx_s_1`, `sqlx_s_2`, ... per client connection, so two clients
//!   sharing a server connection clash ("prepared statement "sqlx_s_1"
//!   already exists"), or worse, one runs the other's statement. A
//!   statement cache of 0 does not help: sqlx still names them.*
//! - every statement in a transaction of its own, `BEGIN` to `COMMIT`.
//!   *sqlx parses a statement and binds it in two exchanges; between them
//!   the pooler may hand the connection to another client, whose own
//!   unnamed statement this one's parameters would then run.*
//! - no startup parameters the pooler refuses: no `extra_float_digits`
//!   (PgBouncer refuses it unless `ignore_startup_parameters` lists it),
//!   no `options`; a statement timeout is set per transaction (`SET
//!   LOCAL`), sent with the `BEGIN` in one exchange.
//! - no `LISTEN` through the pooler (a listen URL reaches PostgreSQL
//!   directly, or workers poll; `wake.rs`).
//!
//! Advisory locks are taken per transaction only (the migration's), which
//! a transaction pooler keeps.
//!
//! Direct connections keep named statements, each prepared once per
//! connection, and run single statements without `BEGIN`.

use std::time::Duration;

use sqlx::postgres::{PgArguments, PgQueryResult, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, PgPool, Postgres, Transaction};

/// A statement with its arguments bound.
pub(crate) type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// How a claim's transaction starts on a direct connection (`Db::begin_generic`).
const BEGIN_GENERIC: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan";

/// How each transaction starts behind a transaction pooler.
#[derive(Clone, Debug)]
pub(crate) struct Pooled {
    begin: String,
    /// `begin`, then generic plans for the transaction (`Db::begin_generic`).
    begin_generic: String,
    /// The timeout `begin` sets, if any.
    pub(crate) statement_timeout: Option<Duration>,
}

impl Pooled {
    /// With `statement_timeout`, set for each transaction.
    pub(crate) fn new(statement_timeout: Option<Duration>) -> Self {
        let begin = match statement_timeout {
            // A number of milliseconds: nothing to escape.
            Some(t) => format!("BEGIN; SET LOCAL statement_timeout = {}", t.as_millis().max(1)),
            None => "BEGIN".to_owned(),
        };
        let begin_generic = format!("{begin}; SET LOCAL plan_cache_mode = force_generic_plan");
        Pooled { begin, begin_generic, statement_timeout }
    }
}

/// Where single statements run: a pool, and whether each needs a
/// transaction of its own.
#[derive(Clone, Copy)]
pub(crate) struct Db<'a> {
    pub(crate) pool: &'a PgPool,
    pub(crate) pooled: Option<&'a Pooled>,
}

impl<'a> Db<'a> {
    /// A transaction on this pool (with the statement timeout behind a
    /// pooler).
    pub(crate) async fn begin(self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        match self.pooled {
            None => self.pool.begin().await,
            Some(pooled) => self.pool.begin_with(AssertSqlSafe(pooled.begin.clone())).await,
        }
    }

    /// A transaction as [`Db::begin`] whose statements, and those of the
    /// functions they call, run their generic plans (`SET LOCAL
    /// plan_cache_mode`, sent with the `BEGIN` in one exchange): for the
    /// claims of controlled or keyed queues (`control.rs`), as the claim
    /// statement's own connections do for it (`claim.rs`). *Left to choose,
    /// PostgreSQL plans the claim statement and each statement of the keyed
    /// claim's functions anew for the first five runs on every connection,
    /// and keeps planning the claim statement (a planning per claim) when its
    /// custom plans look cheaper.*
    pub(crate) async fn begin_generic(self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        match self.pooled {
            None => self.pool.begin_with(BEGIN_GENERIC).await,
            Some(pooled) => self.pool.begin_with(AssertSqlSafe(pooled.begin_generic.clone())).await,
        }
    }

    /// `query.fetch_all`.
    pub(crate) async fn fetch_all(self, query: PgQuery<'_>) -> Result<Vec<PgRow>, sqlx::Error> {
        match self.pooled {
            None => query.fetch_all(self.pool).await,
            Some(_) => {
                let mut tx = self.begin().await?;
                let rows = query.fetch_all(&mut *tx).await?;
                tx.commit().await?;
                Ok(rows)
            }
        }
    }

    /// `query.fetch_optional`.
    pub(crate) async fn fetch_optional(self, query: PgQuery<'_>) -> Result<Option<PgRow>, sqlx::Error> {
        match self.pooled {
            None => query.fetch_optional(self.pool).await,
            Some(_) => {
                let mut tx = self.begin().await?;
                let row = query.fetch_optional(&mut *tx).await?;
                tx.commit().await?;
                Ok(row)
            }
        }
    }

    /// `query.execute`.
    pub(crate) async fn execute(self, query: PgQuery<'_>) -> Result<PgQueryResult, sqlx::Error> {
        match self.pooled {
            None => query.execute(self.pool).await,
            Some(_) => {
                let mut tx = self.begin().await?;
                let done = query.execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(done)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_timeout_rides_the_begin() {
        assert_eq!(Pooled::new(None).begin, "BEGIN");
        assert_eq!(Pooled::new(Some(Duration::from_secs(5))).begin, "BEGIN; SET LOCAL statement_timeout = 5000");
    }
}
