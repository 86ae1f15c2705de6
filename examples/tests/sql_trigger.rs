//! Runs the sql_trigger example's own code: two orders committed, one
//! rolled back; the trigger's two jobs run, and none for the rolled-back
//! order.

#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../examples/sql_trigger.rs"]
#[allow(dead_code)] // its `main` is the example's, not the test's
mod sql_trigger;

use jq::State;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_enqueues_in_the_inserting_transaction() {
    let Some(url) = jq_testkit::services::postgres() else { return };
    let url = format!("{url}?schema=jq_test_{}", uuid::Uuid::new_v4().simple());
    let client = sql_trigger::open_fresh(&url).await.unwrap();
    let jobs = sql_trigger::run(&client).await.unwrap();
    let mut seen: Vec<(String, State, serde_json::Value)> =
        jobs.iter().map(|j| (j.kind.clone(), j.state, serde_json::from_str(j.payload.as_str()).unwrap())).collect();
    seen.sort_by_key(|(_, _, p)| p["order_id"].as_i64());
    assert_eq!(
        seen,
        vec![
            ("order_placed".to_owned(), State::Completed, serde_json::json!({"order_id": 1, "cents": 1999})),
            ("order_placed".to_owned(), State::Completed, serde_json::json!({"order_id": 2, "cents": 500})),
        ],
        "one job per committed order, none for the rolled-back one"
    );
    let jq::Backend::Postgres(storage) = client.storage() else { unreachable!() };
    let drop = format!("DROP SCHEMA \"{}\" CASCADE", storage.schema());
    jq::postgres::sqlx::raw_sql(jq::postgres::sqlx::AssertSqlSafe(drop)).execute(storage.pool()).await.unwrap();
}
