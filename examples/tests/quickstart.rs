//! Runs the quickstart's own code on every backend, each in a namespace of
//! its own, and checks what it prints about each job.

#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../examples/quickstart.rs"]
#[allow(dead_code)] // its `main` is the example's, not the test's
mod quickstart;

use jq::State;

/// The outcome the quickstart promises: two welcomes and the card charge
/// complete (the charge on its second attempt), the report ends Dead after
/// its three attempts with one error each.
async fn runs_as_promised(url: &str) -> jq::Client {
    let client = quickstart::open_fresh(url)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e}; run scripts/start-services.sh for PostgreSQL and Redis"));
    let jobs = quickstart::run(&client).await.unwrap();
    let outcome: Vec<(&str, State, u32, usize)> =
        jobs.iter().map(|j| (j.kind.as_str(), j.state, j.attempts, j.errors.len())).collect();
    assert_eq!(
        outcome,
        vec![
            ("send_welcome", State::Completed, 1, 0),
            ("send_welcome", State::Completed, 1, 0),
            ("charge_card", State::Completed, 2, 1),
            ("build_report", State::Dead, 3, 3),
        ]
    );
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    runs_as_promised(&format!("sqlite://{}", dir.path().join("quickstart.db").display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_on_postgres() {
    let Some(base) = jq_testkit::services::postgres() else { return };
    let schema = format!("jq_quickstart_{}", uuid::Uuid::new_v4().simple());
    let client = runs_as_promised(&format!("{base}?schema={schema}")).await;
    let pg = client.storage().as_postgres().unwrap();
    let drop = format!("DROP SCHEMA \"{schema}\" CASCADE");
    jq::postgres::sqlx::raw_sql(jq::postgres::sqlx::AssertSqlSafe(drop)).execute(pg.pool()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_on_redis() {
    let Some(base) = jq_testkit::services::redis() else { return };
    let prefix = format!("jq-quickstart-{}", uuid::Uuid::new_v4().simple());
    let client = runs_as_promised(&format!("{base}?prefix={prefix}")).await;
    client.storage().as_redis().unwrap().delete_all_keys().await.unwrap();
}
