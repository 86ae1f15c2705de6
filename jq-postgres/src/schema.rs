//! The schema: embedded migrations, and the SQL of every operation with the
//! configured schema name filled in.

use sqlx::{AssertSqlSafe, PgPool};

use crate::error::PostgresError;

#[cfg(test)]
mod plan_tests;

/// The migrations, in order; version = position + 1. Never edit a released
/// one: add a new file.
const MIGRATIONS: &[(&str, &str)] = &[
    ("jobs", include_str!("../migrations/0001_jobs.sql")),
    ("unique_slots", include_str!("../migrations/0002_unique_slots.sql")),
    ("partial_indexes", include_str!("../migrations/0003_partial_indexes.sql")),
    ("leaders", include_str!("../migrations/0004_leaders.sql")),
    ("schedules", include_str!("../migrations/0005_schedules.sql")),
    ("queue_controls", include_str!("../migrations/0006_queue_controls.sql")),
    ("trace", include_str!("../migrations/0007_trace.sql")),
    ("job_counts", include_str!("../migrations/0008_job_counts.sql")),
    ("claim_index_state", include_str!("../migrations/0009_claim_index_state.sql")),
    ("enqueue_function", include_str!("../migrations/0010_enqueue_function.sql")),
    ("cancel", include_str!("../migrations/0011_cancel.sql")),
    ("workflows", include_str!("../migrations/0012_workflows.sql")),
    ("flow_in_statements", include_str!("../migrations/0013_flow_in_statements.sql")),
    ("workflow_counts", include_str!("../migrations/0014_workflow_counts.sql")),
    ("keys", include_str!("../migrations/0015_keys.sql")),
    ("keyed_claim_sets", include_str!("../migrations/0016_keyed_claim_sets.sql")),
    ("keyed_claim_costs", include_str!("../migrations/0017_keyed_claim_costs.sql")),
    ("keyed_pages", include_str!("../migrations/0018_keyed_pages.sql")),
    ("keyed_one_statement", include_str!("../migrations/0019_keyed_one_statement.sql")),
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The columns of a job, in the order `row.rs` decodes them; the table is
/// always aliased `j`.
const COLUMNS: &str = "j.id, j.queue, j.kind, j.payload, j.priority, j.state, j.attempts, j.max_attempts, \
                       j.run_at, j.created_at, j.finished_at, j.lease_token, j.lease_worker, j.lease_expires_at, \
                       j.errors::text, j.unique_key, j.trace, j.timeout_ms, j.cancel_requested_at, \
                       j.cancel_reason, j.progress, j.key";

/// `"name"`: a quoted identifier. The name was checked to be letters,
/// digits and `_` (see `PostgresConfig::check`), so no escaping is needed.
pub(crate) fn quote(ident: &str) -> String {
    format!("\"{ident}\"")
}

/// The NOTIFY channel of a schema: one per schema, so two applications in
/// one database do not wake each other.
pub(crate) fn channel(schema: &str) -> String {
    format!("jq_wake_{schema}")
}

/// Every statement, with the schema filled in. `Arc<str>` so a statement is
/// handed to sqlx without copying; sqlx prepares each once per connection
/// and caches it, except behind a transaction pooler (`pooler.rs`), where
/// every statement is unnamed.
#[derive(Debug)]
pub(crate) struct Sql {
    pub enqueue: Sql1,
    pub enqueue_one: Sql1,
    pub enqueue_keyed: Sql1,
    pub claim: Sql1,
    pub claim_earlier: Sql1,
    pub bury: Sql1,
    pub settle: Sql1,
    pub heartbeat: Sql1,
    pub promote: Sql1,
    pub recover: Sql1,
    pub purge: Sql1,
    pub get: Sql1,
    pub list: Sql1,
    pub list_waiting: Sql1,
    pub list_waiting_kind: Sql1,
    pub stats: Sql1,
    pub throughput: Sql1,
    pub retry: Sql1,
    pub cancel: Sql1,
    pub cancel_request: Sql1,
    pub progress: Sql1,
    pub state: Sql1,
    pub elect: Sql1,
    pub resign: Sql1,
    pub leaders: Sql1,
    pub periodic_create: Sql1,
    pub periodic_advance: Sql1,
    pub periodic_last_job: Sql1,
    pub periodic_list: Sql1,
    pub periodic_trigger: Sql1,
    pub claim_controlled: Sql1,
    pub claim_keyed: Sql1,
    pub control_lock: Sql1,
    pub control_pause: Sql1,
    pub control_limits: Sql1,
    pub control_tidy: Sql1,
    pub control_list: Sql1,
    pub control_seen: Sql1,
    pub settle_results: Sql1,
    pub workflow_enqueue: Sql1,
    pub workflow_ids: Sql1,
    pub workflow_result: Sql1,
    pub workflow_links: Sql1,
    pub workflow_parents: Sql1,
    pub workflow_edges: Sql1,
    pub workflow_children: Sql1,
    pub workflow_counts: Sql1,
    pub workflow_steps: Sql1,
    pub key_limits_set: Sql1,
    pub key_limits_clear: Sql1,
    pub key_limits_list: Sql1,
    pub key_busiest: Sql1,
}

/// One statement's text, and whether sqlx may prepare it as a named
/// statement (not behind a transaction pooler).
#[derive(Clone, Debug)]
pub(crate) struct Sql1 {
    text: std::sync::Arc<str>,
    persistent: bool,
}

impl Sql1 {
    fn new(template: &str, schema: &str, persistent: bool) -> Self {
        Sql1 { text: template.replace("{schema}", &quote(schema)).replace("{columns}", COLUMNS).into(), persistent }
    }

    /// The text for `sqlx::query`. The only dynamic part is the checked
    /// schema name, so the text is safe.
    pub fn q(&self) -> AssertSqlSafe<std::sync::Arc<str>> {
        AssertSqlSafe(self.text.clone())
    }

    /// The statement, named or not as the connection allows.
    pub fn query<'q>(&self) -> crate::pooler::PgQuery<'q> {
        sqlx::query(self.q()).persistent(self.persistent)
    }
}

impl Sql {
    /// The statements on `schema`; `persistent` false behind a transaction
    /// pooler.
    pub(crate) fn new(schema: &str, persistent: bool) -> Self {
        let s = |t: &str| Sql1::new(t, schema, persistent);
        Sql {
            enqueue: s(include_str!("sql/enqueue.sql")),
            enqueue_one: s(include_str!("sql/enqueue_one.sql")),
            enqueue_keyed: s(include_str!("sql/enqueue_keyed.sql")),
            claim: s(include_str!("sql/claim.sql")),
            claim_earlier: s(include_str!("sql/claim_earlier.sql")),
            bury: s(include_str!("sql/bury.sql")),
            settle: s(include_str!("sql/settle.sql")),
            heartbeat: s(include_str!("sql/heartbeat.sql")),
            promote: s(include_str!("sql/promote.sql")),
            recover: s(include_str!("sql/recover.sql")),
            purge: s(include_str!("sql/purge.sql")),
            get: s(include_str!("sql/get.sql")),
            list: s(include_str!("sql/list.sql")),
            list_waiting: s(include_str!("sql/list_waiting.sql")),
            list_waiting_kind: s(include_str!("sql/list_waiting_kind.sql")),
            stats: s(include_str!("sql/stats.sql")),
            throughput: s(include_str!("sql/throughput.sql")),
            retry: s(include_str!("sql/retry.sql")),
            cancel: s(include_str!("sql/cancel.sql")),
            cancel_request: s(include_str!("sql/cancel_request.sql")),
            progress: s(include_str!("sql/progress.sql")),
            state: s(include_str!("sql/state.sql")),
            elect: s(include_str!("sql/elect.sql")),
            resign: s(include_str!("sql/resign.sql")),
            leaders: s(include_str!("sql/leaders.sql")),
            periodic_create: s(include_str!("sql/periodic_create.sql")),
            periodic_advance: s(include_str!("sql/periodic_advance.sql")),
            periodic_last_job: s(include_str!("sql/periodic_last_job.sql")),
            periodic_list: s(include_str!("sql/periodic_list.sql")),
            periodic_trigger: s(include_str!("sql/periodic_trigger.sql")),
            claim_controlled: s(include_str!("sql/claim_controlled.sql")),
            claim_keyed: s(include_str!("sql/claim_keyed.sql")),
            control_lock: s(include_str!("sql/control_lock.sql")),
            control_pause: s(include_str!("sql/control_pause.sql")),
            control_limits: s(include_str!("sql/control_limits.sql")),
            control_tidy: s(include_str!("sql/control_tidy.sql")),
            control_list: s(include_str!("sql/control_list.sql")),
            control_seen: s(include_str!("sql/control_seen.sql")),
            settle_results: s(include_str!("sql/settle_results.sql")),
            workflow_enqueue: s(include_str!("sql/workflow_enqueue.sql")),
            workflow_ids: s(include_str!("sql/workflow_ids.sql")),
            workflow_result: s(include_str!("sql/workflow_result.sql")),
            workflow_links: s(include_str!("sql/workflow_links.sql")),
            workflow_parents: s(include_str!("sql/workflow_parents.sql")),
            workflow_edges: s(include_str!("sql/workflow_edges.sql")),
            workflow_children: s(include_str!("sql/workflow_children.sql")),
            workflow_counts: s(include_str!("sql/workflow_counts.sql")),
            workflow_steps: s(include_str!("sql/workflow_steps.sql")),
            key_limits_set: s(include_str!("sql/key_limits_set.sql")),
            key_limits_clear: s(include_str!("sql/key_limits_clear.sql")),
            key_limits_list: s(include_str!("sql/key_limits_list.sql")),
            key_busiest: s(include_str!("sql/key_busiest.sql")),
        }
    }
}

/// Applies the missing migrations to `schema`, creating it if needed, in
/// one transaction under a transaction-level advisory lock keyed on the
/// schema name: concurrent calls (several processes starting at once)
/// serialise, and the later ones find nothing to do. Returns the number of
/// migrations applied. `persistent` false behind a transaction pooler
/// (`pooler.rs`): the statements are then unnamed.
pub(crate) async fn migrate(pool: &PgPool, schema: &str, persistent: bool) -> Result<usize, PostgresError> {
    let fail = |version: i32| move |source| PostgresError::Migrate { schema: schema.to_owned(), version, source };
    let q = quote(schema);
    let mut tx = pool.begin().await.map_err(fail(0))?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('jq-migrate:' || $1))")
        .persistent(persistent)
        .bind(schema)
        .execute(&mut *tx)
        .await
        .map_err(fail(0))?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE SCHEMA IF NOT EXISTS {q}; \
         CREATE TABLE IF NOT EXISTS {q}.jq_migrations ( \
             version integer PRIMARY KEY, \
             name text NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())"
    )))
    .execute(&mut *tx)
    .await
    .map_err(fail(0))?;
    let applied: Option<i32> = sqlx::query_scalar(AssertSqlSafe(format!("SELECT max(version) FROM {q}.jq_migrations")))
        .persistent(persistent)
        .fetch_one(&mut *tx)
        .await
        .map_err(fail(0))?;
    let applied = applied.unwrap_or(0);
    if applied > SCHEMA_VERSION {
        return Err(PostgresError::TooNew { schema: schema.to_owned(), found: applied, known: SCHEMA_VERSION });
    }
    let mut count = 0;
    for (version, (name, text)) in (1..).zip(MIGRATIONS) {
        if version <= applied {
            continue;
        }
        sqlx::raw_sql(AssertSqlSafe(text.replace("{schema}", &q))).execute(&mut *tx).await.map_err(fail(version))?;
        sqlx::query(AssertSqlSafe(format!("INSERT INTO {q}.jq_migrations (version, name) VALUES ($1, $2)")))
            .persistent(persistent)
            .bind(version)
            .bind(*name)
            .execute(&mut *tx)
            .await
            .map_err(fail(version))?;
        tracing::info!(schema, version, name, "applied jq migration");
        count += 1;
    }
    tx.commit().await.map_err(fail(SCHEMA_VERSION))?;
    Ok(count)
}
