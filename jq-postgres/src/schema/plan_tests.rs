//! The generic plan of every statement that finds jobs by id or in bounded
//! batches, on a table whose statistics were gathered while every job was
//! completed (the usual case for a queue): each must look its rows up by
//! primary key or walk the one index meant for it, never another partial
//! index or the whole heap. sqlx prepares each statement once per
//! connection, and PostgreSQL switches to the generic plan after five runs;
//! a plan that walks a partial index whose state the statistics say is
//! empty costs the size of that state per call (see the index design in
//! migrations/0001_baseline.sql).

use super::{Sql, Sql1, quote};
use crate::{PostgresConfig, PostgresStorage};
use jq_core::storage::Storage;

/// The indexes a plan reads (one entry per scan node), and "Seq Scan on
/// TABLE" for each sequential scan of a table.
fn scans(plan: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in plan.lines() {
        let line = line.trim_start().trim_start_matches("->").trim_start();
        for prefix in ["Index Scan using ", "Index Only Scan using ", "Bitmap Index Scan on "] {
            if let Some(rest) = line.strip_prefix(prefix) {
                found.push(rest.split_whitespace().next().unwrap_or_default().to_owned());
            }
        }
        if let Some(rest) = line.strip_prefix("Seq Scan on ") {
            found.push(format!("Seq Scan on {}", rest.split_whitespace().next().unwrap_or_default()));
        }
    }
    found.sort();
    found
}

#[tokio::test]
async fn every_statement_finds_its_rows_by_key_whatever_the_statistics() {
    let Some(url) = jq_testkit::services::postgres() else { return };
    let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
    let storage = PostgresStorage::connect(PostgresConfig::new(url.clone()).schema(&schema).max_connections(1))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {url} ({e}): run scripts/start-services.sh"));
    storage.migrate().await.unwrap();
    let q = quote(&schema);
    let row = |state: &str, n: u32, extra: &str| {
        format!(
            "INSERT INTO {q}.jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, \
                                   created_at, finished_at, lease_token, lease_worker, lease_expires_at) \
             SELECT gen_random_uuid(), 'q', 'k', '{{}}', 1, '{state}', 1, 25, now() - interval '1 s', now(), {extra} \
             FROM generate_series(1, {n});"
        )
    };
    let setup = [
        row("completed", 20_000, "now() - interval '1 hour', NULL, NULL, NULL"),
        format!("ANALYZE {q}.jobs;"),
        row("pending", 2_000, "NULL, NULL, NULL, NULL"),
        row("scheduled", 2_000, "NULL, NULL, NULL, NULL"),
        row("running", 2_000, "NULL, gen_random_uuid(), 'w', now() - interval '1 s'"),
        row("dead", 2_000, "now() - interval '1 hour', NULL, NULL, NULL"),
    ];
    let mut conn = storage.pool().acquire().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(setup.concat())).execute(&mut *conn).await.unwrap();
    let id_in = |state: &'static str| {
        format!("SELECT id::text, coalesce(lease_token::text, '') FROM {q}.jobs WHERE state = '{state}' LIMIT 1")
    };
    let mut one = async |state: &'static str| -> (String, String) {
        sqlx::query_as(sqlx::AssertSqlSafe(id_in(state))).fetch_one(&mut *conn).await.unwrap()
    };
    let (pending, _) = one("pending").await;
    let (running, token) = one("running").await;
    let (dead, _) = one("dead").await;

    let sql = Sql::new(&schema, true);
    let cases: Vec<(&str, &Sql1, &str, String, &[&str])> = vec![
        (
            "claim",
            &sql.claim,
            "text[], int4, timestamptz, text, timestamptz, uuid, timestamptz[], uuid[]",
            "(ARRAY['q'], 50, now(), 'w', now() + interval '30 s', gen_random_uuid(), \
              ARRAY[NULL, NULL, now(), NULL]::timestamptz[], ARRAY[NULL, NULL, gen_random_uuid(), NULL]::uuid[])"
                .to_owned(),
            // The controls' lookup and the keyed jobs' probe (one per queue)
            // gate the walks (a one-time filter).
            &["jobs_claim", "jobs_claim", "jobs_claim", "jobs_keyed", "jobs_pkey", "queue_controls_pkey"],
        ),
        (
            "claim_controlled",
            &sql.claim_controlled,
            "text[], int4, timestamptz, text, timestamptz, uuid, timestamptz, text[]",
            "(ARRAY['q'], 50, now(), 'w', now() + interval '30 s', gen_random_uuid(), now() - interval '1 day', \
              '{}'::text[])"
                .to_owned(),
            // The concurrency count walks the Running jobs (jobs_lease_expiry),
            // only for a queue with a control; forgetting old claimers walks
            // the asked queues' rows of queue_seen_pkey. A short claim's
            // report probes jobs_claim and jobs_keyed once per queue and
            // reads the rate window (queue_starts_window).
            &[
                "jobs_claim",
                "jobs_claim",
                "jobs_keyed",
                "jobs_lease_expiry",
                "jobs_pkey",
                "queue_controls_pkey",
                "queue_seen_pkey",
                "queue_starts_window",
                "queue_starts_window",
                "queue_starts_window",
            ],
        ),
        // The controls, then one probe of jobs_keyed per queue.
        (
            "control_lock",
            &sql.control_lock,
            "text[]",
            "(ARRAY['q'])".to_owned(),
            &["jobs_keyed", "queue_controls_pkey"],
        ),
        ("claim_earlier", &sql.claim_earlier, "uuid", format!("('{token}')"), &["jobs_lease_expiry"]),
        (
            "settle",
            &sql.settle,
            "uuid[], uuid[], int2[], text[], timestamptz[], text[], timestamptz, text, text",
            format!(
                "(ARRAY['{running}']::uuid[], ARRAY['{token}']::uuid[], ARRAY[0]::int2[], ARRAY[NULL]::text[], ARRAY[now()], ARRAY['pending'], now(), 'x', 'c')"
            ),
            &["jobs_pkey"],
        ),
        (
            "heartbeat",
            &sql.heartbeat,
            "uuid[], uuid[], timestamptz",
            format!("(ARRAY['{running}']::uuid[], ARRAY['{token}']::uuid[], now())"),
            &["jobs_pkey"],
        ),
        (
            "bury",
            &sql.bury,
            "uuid, timestamptz, text, text, text",
            format!("('{running}', now(), 'x', 'y', 'c')"),
            &["jobs_pkey"],
        ),
        // Locked by key for the state it leaves, then changed by key.
        (
            "cancel",
            &sql.cancel,
            "uuid, timestamptz, text",
            format!("('{pending}', now(), 'c')"),
            &["jobs_pkey", "jobs_pkey"],
        ),
        // Locked by key for the state it leaves, then changed by key.
        (
            "cancel_request",
            &sql.cancel_request,
            "uuid, timestamptz, text, text",
            format!("('{pending}', now(), 'r', 'c')"),
            &["jobs_pkey", "jobs_pkey"],
        ),
        (
            "retry",
            &sql.retry,
            "uuid, timestamptz, text",
            format!("('{dead}', now(), 'c')"),
            &["jobs_pkey", "jobs_unique"],
        ),
        ("promote", &sql.promote, "timestamptz, int4", "(now(), 100)".to_owned(), &["jobs_scheduled"]),
        (
            "recover",
            &sql.recover,
            "timestamptz, int4, text, timestamptz, text",
            "(now(), 100, 'x', now() - interval '1 minute', 'c')".to_owned(),
            &["jobs_lease_expiry"],
        ),
        (
            "purge",
            &sql.purge,
            "text, timestamptz, int4",
            "('dead', now(), 100)".to_owned(),
            &["job_nodes_pkey", "job_results_pkey", "jobs_finished", "journal_pkey", "signals_pkey", "waits_pkey"],
        ),
        // Durable jobs: the job's row and its journal, by key.
        ("durable_signal_count", &sql.durable_signal_count, "uuid", format!("('{dead}')"), &["signals_pkey"]),
        ("durable_flow", &sql.durable_flow, "uuid", format!("('{dead}')"), &["jobs_pkey"]),
        ("durable_leased", &sql.durable_leased, "uuid, uuid", format!("('{dead}', gen_random_uuid())"), &["jobs_pkey"]),
        ("durable_entry", &sql.durable_entry, "uuid, int4", format!("('{dead}', 0)"), &["journal_pkey"]),
        ("durable_size", &sql.durable_size, "uuid", format!("('{dead}')"), &["journal_pkey"]),
        (
            "durable_checkpoint",
            &sql.durable_checkpoint,
            "uuid, uuid, int4, text, text, text, timestamptz, timestamptz, int4, int8, int8",
            format!("('{dead}', gen_random_uuid(), 0, 's', 'step', '1', NULL, now(), 10, 1000, 1048576)"),
            // The lock under the lease, then the mark of what was appended.
            &["jobs_pkey", "jobs_pkey", "journal_pkey"],
        ),
        ("throughput", &sql.throughput, "timestamptz", "(now() - interval '1 hour')".to_owned(), &["jobs_finished"]),
        // Finished jobs are counted from job_counts (a handful of rows,
        // read whole), live ones from the indexes that hold only them.
        (
            "stats",
            &sql.stats,
            "",
            String::new(),
            &["Seq Scan on job_counts", "jobs_claim", "jobs_keyed", "jobs_lease_expiry", "jobs_waiting_on_parents"],
        ),
        (
            "list_waiting",
            &sql.list_waiting,
            "text, text, uuid, int8",
            "('q', 'pending', NULL, 10)".to_owned(),
            &["jobs_claim", "jobs_keyed", "jobs_pkey"],
        ),
        (
            "list_waiting_kind",
            &sql.list_waiting_kind,
            "text, text, text, uuid, int8",
            "('q', 'pending', 'k', NULL, 10)".to_owned(),
            &["jobs_claim", "jobs_keyed"],
        ),
        (
            "control_list",
            &sql.control_list,
            "",
            String::new(),
            &[
                "Seq Scan on job_counts",
                "Seq Scan on queue_controls",
                "Seq Scan on queue_controls",
                "jobs_claim",
                "jobs_keyed",
                "jobs_lease_expiry",
                "jobs_waiting_on_parents",
            ],
        ),
        // Keyed jobs: the limits by key, the busiest keys from the live
        // keyed jobs only.
        ("key_limits_list", &sql.key_limits_list, "text", "('q')".to_owned(), &["key_limits_pkey"]),
        (
            "key_limits_clear",
            &sql.key_limits_clear,
            "text, text, text",
            "('q', 'k', 'c')".to_owned(),
            &["key_limits_pkey", "key_limits_pkey", "key_starts_window"],
        ),
        // Lifting the default's rate forgets the queue's start logs.
        (
            "key_limits_set",
            &sql.key_limits_set,
            "text, text, int4, int4, int8, text",
            "('q', '', 1, NULL, NULL, 'c')".to_owned(),
            &["key_limits_pkey", "key_starts_window"],
        ),
        ("key_busiest", &sql.key_busiest, "text, int8", "('q', 10)".to_owned(), &["jobs_key_running", "jobs_keyed"]),
        ("get", &sql.get, "uuid", format!("('{dead}')"), &["jobs_pkey"]),
        // A workflow's counts: its summary rows, and its Running steps
        // among the leased jobs (each looked up by key), never its steps.
        (
            "workflow_counts",
            &sql.workflow_counts,
            "uuid",
            "(gen_random_uuid())".to_owned(),
            &["job_nodes_pkey", "jobs_lease_expiry", "workflow_counts_pkey", "workflows_pkey"],
        ),
        ("state", &sql.state, "uuid", format!("('{dead}')"), &["jobs_pkey"]),
    ];
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan").execute(&mut *conn).await.unwrap();
    let mut wrong = Vec::new();
    for (name, statement, types, args, expected) in cases {
        let types = if types.is_empty() { String::new() } else { format!("({types})") };
        let prepare = format!("PREPARE p {types} AS {}", statement.text);
        sqlx::raw_sql(sqlx::AssertSqlSafe(prepare)).execute(&mut *conn).await.unwrap();
        let plan: Vec<String> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN (COSTS OFF) EXECUTE p {args}")))
                .fetch_all(&mut *conn)
                .await
                .unwrap();
        sqlx::raw_sql("DEALLOCATE p").execute(&mut *conn).await.unwrap();
        let plan = plan.join("\n");
        if scans(&plan) != expected {
            wrong.push(format!("{name}: expected {expected:?}, got {:?}\n{plan}", scans(&plan)));
        }
        // These count or sort every waiting job of a queue: from the index
        // alone (its included state), never from the rows.
        if ["stats", "list_waiting", "control_list"].contains(&name) {
            for index in ["jobs_claim", "jobs_keyed"] {
                if !plan.contains(&format!("Index Only Scan using {index}")) {
                    wrong.push(format!("{name}: {index} is not scanned index-only\n{plan}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {q} CASCADE"))).execute(&mut *conn).await.unwrap();
    drop(conn);
    storage.close().await;
}
