//! The schema: embedded migrations, the functions installed after them,
//! and the SQL of every operation with the configured schema name filled in.
//!
//! Two things are versioned apart:
//!
//! - **Migrations** (`migrations/NNNN_*.sql`): tables, indexes, types,
//!   constraints; never a function. Each is applied once, in order, and
//!   recorded in `jq_migrations` with its checksum; a released one is never
//!   edited (a test holds each checksum, and [`migrate`] refuses a schema
//!   whose recorded checksum differs from the file's). A change of the
//!   schema is a new migration and a new [`SCHEMA_VERSION`].
//! - **Functions** (`src/functions/*.sql`, one per file): installed with
//!   `CREATE OR REPLACE` after the migrations, in the same transaction,
//!   whenever the schema's recorded *generation* is older than this build's
//!   [`FUNCTIONS_VERSION`], and recorded in `jq_functions` with the checksum
//!   of their texts and their signatures. A faster claim ships as a new
//!   generation, without a migration. A test holds the checksum of each
//!   generation, so a function's text cannot change without a new one.
//!
//! A migration never calls one of jq's functions: on a new schema there
//! are none yet, and on an older one they are the older generation's.
//!
//! A schema ahead of this build in either (a newer migration, a newer
//! generation) is refused with [`PostgresError::TooNew`], and nothing is
//! changed: an old worker's `migrate` neither downgrades the functions a
//! newer one installed nor runs against tables it does not know. A
//! generation is installed while workers of the previous one may still run
//! (a rolling upgrade), so a new generation keeps every function the
//! previous one's statements call, with its signature and meaning.

use sqlx::migrate::{Migration, MigrationType};
use sqlx::{AssertSqlSafe, PgPool, SqlSafeStr};

use crate::error::{PostgresError, SchemaPart};

#[cfg(test)]
mod function_tests;
#[cfg(test)]
mod plan_tests;

/// The migrations, in order; version = position + 1. Never edit a released
/// one: add a new file (`released_migrations_are_never_edited` holds their
/// checksums).
const MIGRATIONS: &[(&str, &str)] = &[
    ("baseline", include_str!("../migrations/0001_baseline.sql")),
    ("durable", include_str!("../migrations/0002_durable.sql")),
    ("unique_created", include_str!("../migrations/0003_unique_created.sql")),
];

/// The newest schema version this build knows: how many migrations
/// (`jq-postgres/migrations/`) it has. `migrate` refuses a schema recording
/// a newer one ([`PostgresError::TooNew`]).
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// One of jq's functions: its signature (name and argument types, without
/// the schema, as `regprocedure` reads it) and its file, a `CREATE OR
/// REPLACE FUNCTION` (and its `COMMENT`) with `{schema}` for the schema.
struct Function {
    signature: &'static str,
    text: &'static str,
}

/// Every function this build installs, in the order it creates them.
/// Editing one's text (or adding, removing, reordering one) changes the
/// functions' checksum: bump [`FUNCTIONS_VERSION`] with it
/// (`function_texts_change_only_with_their_generation` says so). A function
/// whose signature changes gets its new signature here; the installer drops
/// the signatures the schema's older generation recorded and this list no
/// longer has. `CREATE OR REPLACE` cannot change a function's result type,
/// its arguments' names or remove their defaults: such a change is a new
/// function (a new name, or new argument types), and the old one is
/// dropped as retired.
const FUNCTIONS: &[Function] = &[
    Function {
        signature: "enqueue(text,json,text,text,timestamp with time zone,integer,text,uuid,text)",
        text: include_str!("functions/enqueue.sql"),
    },
    Function {
        signature: "jq_workflow_count(uuid[],text[],text[])",
        text: include_str!("functions/jq_workflow_count.sql"),
    },
    Function {
        signature: "jq_flow_finished(uuid[],text[],timestamp with time zone,text)",
        text: include_str!("functions/jq_flow_finished.sql"),
    },
    Function { signature: "jq_flow_revived(uuid[])", text: include_str!("functions/jq_flow_revived.sql") },
    Function {
        signature: "jq_flow_moved(uuid[],text[],text[],smallint[],timestamp with time zone,text)",
        text: include_str!("functions/jq_flow_moved.sql"),
    },
    Function {
        signature: "jq_key_turns(text,smallint,integer,timestamp with time zone,text[])",
        text: include_str!("functions/jq_key_turns.sql"),
    },
    Function {
        signature: "jq_claim_keyed(text[],integer[],integer,timestamp with time zone,text[])",
        text: include_str!("functions/jq_claim_keyed.sql"),
    },
    Function {
        signature: "jq_claim_keyed_take(text[],integer,timestamp with time zone,text,timestamp with time zone,uuid)",
        text: include_str!("functions/jq_claim_keyed_take.sql"),
    },
];

/// The generation of jq's PostgreSQL functions (`enqueue`, the keyed
/// claim, the workflow rules: the files of `jq-postgres/src/functions/`)
/// this build installs. `migrate` installs them over a schema recording an
/// older generation (or none); a schema recording a newer one is
/// [`PostgresError::TooNew`], one recording this generation with other
/// texts [`PostgresError::FunctionsChanged`].
pub const FUNCTIONS_VERSION: i32 = 1;

/// sqlx's migrator's checksum of a text (SHA-384), for migrations and
/// functions alike.
fn checksum(text: &str) -> Vec<u8> {
    let text = AssertSqlSafe(text.to_owned()).into_sql_str();
    Migration::new(0, "".into(), MigrationType::Simple, text, false).checksum.into_owned()
}

/// The checksum of every function's text, in [`FUNCTIONS`]' order.
fn functions_checksum() -> Vec<u8> {
    checksum(&FUNCTIONS.iter().map(|f| f.text).collect::<Vec<_>>().concat())
}

/// Lower-case hex, for the errors and the tests.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

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
    pub enqueue_exists: Sql1,
    pub enqueue_rule_lock: Sql1,
    pub enqueue_holders: Sql1,
    pub enqueue_update: Sql1,
    pub enqueue_rule_insert: Sql1,
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
    pub durable_leased: Sql1,
    pub durable_lock: Sql1,
    pub durable_mark: Sql1,
    pub durable_size: Sql1,
    pub durable_entry: Sql1,
    pub durable_entries: Sql1,
    pub durable_append: Sql1,
    pub durable_checkpoint: Sql1,
    pub durable_flow: Sql1,
    pub durable_wait_get: Sql1,
    pub durable_wait_put: Sql1,
    pub durable_wait_clear: Sql1,
    pub durable_signal_peek: Sql1,
    pub durable_signal_take: Sql1,
    pub durable_signal_put: Sql1,
    pub durable_signal_count: Sql1,
    pub durable_signals: Sql1,
    pub durable_park: Sql1,
    pub durable_wake: Sql1,
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
            enqueue_exists: s(include_str!("sql/enqueue_exists.sql")),
            enqueue_rule_lock: s(include_str!("sql/enqueue_rule_lock.sql")),
            enqueue_holders: s(include_str!("sql/enqueue_holders.sql")),
            enqueue_update: s(include_str!("sql/enqueue_update.sql")),
            enqueue_rule_insert: s(include_str!("sql/enqueue_rule_insert.sql")),
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
            durable_leased: s(include_str!("sql/durable_leased.sql")),
            durable_lock: s(include_str!("sql/durable_lock.sql")),
            durable_mark: s(include_str!("sql/durable_mark.sql")),
            durable_size: s(include_str!("sql/durable_size.sql")),
            durable_entry: s(include_str!("sql/durable_entry.sql")),
            durable_entries: s(include_str!("sql/durable_entries.sql")),
            durable_append: s(include_str!("sql/durable_append.sql")),
            durable_checkpoint: s(include_str!("sql/durable_checkpoint.sql")),
            durable_flow: s(include_str!("sql/durable_flow.sql")),
            durable_wait_get: s(include_str!("sql/durable_wait_get.sql")),
            durable_wait_put: s(include_str!("sql/durable_wait_put.sql")),
            durable_wait_clear: s(include_str!("sql/durable_wait_clear.sql")),
            durable_signal_peek: s(include_str!("sql/durable_signal_peek.sql")),
            durable_signal_take: s(include_str!("sql/durable_signal_take.sql")),
            durable_signal_put: s(include_str!("sql/durable_signal_put.sql")),
            durable_signal_count: s(include_str!("sql/durable_signal_count.sql")),
            durable_signals: s(include_str!("sql/durable_signals.sql")),
            durable_park: s(include_str!("sql/durable_park.sql")),
            durable_wake: s(include_str!("sql/durable_wake.sql")),
        }
    }
}

/// Applies the missing migrations to `schema`, creating it if needed, then
/// installs this build's functions when the schema's are an older
/// generation, all in one transaction under a transaction-level advisory
/// lock keyed on the schema name: concurrent calls (several processes
/// starting at once) serialise, and the later ones find nothing to do.
/// Returns the number of migrations applied. `persistent` false behind a
/// transaction pooler (`pooler.rs`): the statements are then unnamed.
///
/// Refuses, changing nothing: a schema whose recorded migrations or
/// functions are newer than this build's ([`PostgresError::TooNew`]); one
/// where a migration this build has was applied with another checksum
/// ([`PostgresError::MigrationChanged`]: the file was edited after its
/// release, or the schema was made before the 0.1 baseline); one whose
/// functions are this build's generation with other texts
/// ([`PostgresError::FunctionsChanged`]).
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
             checksum bytea NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now()); \
         CREATE TABLE IF NOT EXISTS {q}.jq_functions ( \
             generation integer PRIMARY KEY, \
             checksum bytea NOT NULL, \
             signatures text[] NOT NULL, \
             installed_at timestamptz NOT NULL DEFAULT now())"
    )))
    .execute(&mut *tx)
    .await
    .map_err(fail(0))?;

    let applied: Vec<(i32, String, Vec<u8>)> = match sqlx::query_as(AssertSqlSafe(format!(
        "SELECT version, name, checksum FROM {q}.jq_migrations ORDER BY version"
    )))
    .persistent(persistent)
    .fetch_all(&mut *tx)
    .await
    {
        Ok(rows) => rows,
        // A jq_migrations without checksums: made by a build before the
        // baseline, whose version 1 was another migration.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42703") => {
            return Err(PostgresError::MigrationChanged {
                schema: schema.to_owned(),
                version: 1,
                name: MIGRATIONS[0].0.to_owned(),
                found: None,
                known: hex(&checksum(MIGRATIONS[0].1)),
            });
        }
        Err(e) => return Err(fail(0)(e)),
    };
    for (version, name, recorded) in &applied {
        let Some((_, text)) = usize::try_from(*version - 1).ok().and_then(|i| MIGRATIONS.get(i)) else { continue };
        let known = checksum(text);
        if *recorded != known {
            return Err(PostgresError::MigrationChanged {
                schema: schema.to_owned(),
                version: *version,
                name: name.clone(),
                found: Some(hex(recorded)),
                known: hex(&known),
            });
        }
    }
    let newest = applied.last().map_or(0, |(version, _, _)| *version);
    if newest > SCHEMA_VERSION {
        return Err(PostgresError::TooNew {
            schema: schema.to_owned(),
            part: SchemaPart::Migrations,
            found: newest,
            known: SCHEMA_VERSION,
        });
    }
    let mut count = 0;
    for (version, (name, text)) in (1..).zip(MIGRATIONS) {
        if version <= newest {
            continue;
        }
        sqlx::raw_sql(AssertSqlSafe(text.replace("{schema}", &q))).execute(&mut *tx).await.map_err(fail(version))?;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {q}.jq_migrations (version, name, checksum) VALUES ($1, $2, $3)"
        )))
        .persistent(persistent)
        .bind(version)
        .bind(*name)
        .bind(checksum(text))
        .execute(&mut *tx)
        .await
        .map_err(fail(version))?;
        tracing::info!(schema, version, name, "applied jq migration");
        count += 1;
    }

    install_functions(&mut tx, schema, persistent).await?;
    tx.commit().await.map_err(fail(SCHEMA_VERSION))?;
    Ok(count)
}

/// Installs [`FUNCTIONS`] when the schema's recorded generation is older
/// than [`FUNCTIONS_VERSION`] (or none), in the migration's transaction;
/// refuses a newer one, or this one with other texts.
async fn install_functions(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    schema: &str,
    persistent: bool,
) -> Result<(), PostgresError> {
    let fail = |source| PostgresError::Functions { schema: schema.to_owned(), generation: FUNCTIONS_VERSION, source };
    let q = quote(schema);
    let known = functions_checksum();
    let recorded: Option<(i32, Vec<u8>, Vec<String>)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT generation, checksum, signatures FROM {q}.jq_functions ORDER BY generation DESC LIMIT 1"
    )))
    .persistent(persistent)
    .fetch_optional(&mut **tx)
    .await
    .map_err(fail)?;
    let mut retired = Vec::new();
    if let Some((generation, found, signatures)) = recorded {
        if generation > FUNCTIONS_VERSION {
            return Err(PostgresError::TooNew {
                schema: schema.to_owned(),
                part: SchemaPart::Functions,
                found: generation,
                known: FUNCTIONS_VERSION,
            });
        }
        if generation == FUNCTIONS_VERSION {
            if found == known {
                return Ok(());
            }
            return Err(PostgresError::FunctionsChanged {
                schema: schema.to_owned(),
                generation,
                found: hex(&found),
                known: hex(&known),
            });
        }
        retired = signatures.into_iter().filter(|s| FUNCTIONS.iter().all(|f| f.signature != s)).collect();
    }
    // What the older generation had and this one has not: dropped first, so
    // a signature it replaces leaves no overload behind.
    for signature in &retired {
        sqlx::raw_sql(AssertSqlSafe(format!("DROP FUNCTION IF EXISTS {q}.{signature}")))
            .execute(&mut **tx)
            .await
            .map_err(fail)?;
    }
    for function in FUNCTIONS {
        sqlx::raw_sql(AssertSqlSafe(function.text.replace("{schema}", &q))).execute(&mut **tx).await.map_err(fail)?;
    }
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {q}.jq_functions (generation, checksum, signatures) VALUES ($1, $2, $3)"
    )))
    .persistent(persistent)
    .bind(FUNCTIONS_VERSION)
    .bind(&known)
    .bind(FUNCTIONS.iter().map(|f| f.signature).collect::<Vec<_>>())
    .execute(&mut **tx)
    .await
    .map_err(fail)?;
    tracing::info!(schema, generation = FUNCTIONS_VERSION, dropped = retired.len(), "installed jq functions");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each released migration's checksum (sqlx's, SHA-384 of the file:
    /// `sha384sum migrations/0001_baseline.sql`), by version and name. A new
    /// migration adds its line; a line never changes: a schema that applied
    /// the old text would be refused.
    const RELEASED: &[(i32, &str, &str)] = &[
        (
            1,
            "baseline",
            "b304995533c6eb2397dbe610c4f259a9c617189807686996728e5646e7fd8ae7dd5ab54f1a62039626393b7f6bf70eb2",
        ),
        (
            2,
            "durable",
            "05ae1173756e2e6fd0e511f45f5a0727dd825de29998a59d9110748563c6c6d0079ba8d541a48db455dd73bc6e067e9b",
        ),
        (
            3,
            "unique_created",
            "c28b7c4b441e8cbcc432393106d9f1c4e8f6356bd127284d85878e0dd09037b329fae2f448ae1db9b151daa03afe8983",
        ),
    ];

    #[test]
    fn released_migrations_are_never_edited() {
        let found: Vec<(i32, &str, String)> =
            (1..).zip(MIGRATIONS).map(|(version, (name, text))| (version, *name, hex(&checksum(text)))).collect();
        let released: Vec<(i32, &str, String)> = RELEASED.iter().map(|(v, n, c)| (*v, *n, (*c).to_owned())).collect();
        assert_eq!(
            found, released,
            "a released migration was edited, or a new one has no line in RELEASED: a change of the schema is a \
             new migration, with its checksum added here"
        );
    }

    /// Each generation's checksum of the functions' texts (SHA-384 of the
    /// files concatenated in FUNCTIONS' order). The last is
    /// [`FUNCTIONS_VERSION`]'s; a line never changes.
    const GENERATIONS: &[(i32, &str)] =
        &[(1, "a9f7d4989336f66f418a2b9e1622c27d809155310bcbfcde2503dd26695b4738c80563504bd3a9d89061589a27e830d8")];

    #[test]
    fn function_texts_change_only_with_their_generation() {
        let (generation, hash) = *GENERATIONS.last().unwrap_or(&(0, ""));
        assert_eq!(generation, FUNCTIONS_VERSION, "GENERATIONS' last line is not FUNCTIONS_VERSION's");
        assert_eq!(
            hex(&functions_checksum()),
            hash,
            "a function's text changed without a new generation: bump FUNCTIONS_VERSION and add its line to \
             GENERATIONS (a schema with generation {generation}'s functions would be refused)"
        );
        let generations: Vec<i32> = GENERATIONS.iter().map(|(g, _)| *g).collect();
        assert_eq!(generations, (1..=FUNCTIONS_VERSION).collect::<Vec<_>>(), "one line per generation, in order");
    }

    #[test]
    fn every_function_file_creates_the_function_it_is_listed_as() {
        for f in FUNCTIONS {
            let name = f.signature.split('(').next().unwrap_or_default();
            assert!(
                f.text.contains(&format!("CREATE OR REPLACE FUNCTION {{schema}}.{name}(")),
                "{}: its file does not create it",
                f.signature
            );
            assert_eq!(
                f.text.matches("CREATE OR REPLACE FUNCTION").count(),
                1,
                "{}: one function per file",
                f.signature
            );
            assert!(f.text.starts_with("-- {schema}."), "{}: a header comment first", f.signature);
        }
    }
}
