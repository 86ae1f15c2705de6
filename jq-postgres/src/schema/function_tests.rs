//! The functions as installed: every file's function is in the schema
//! under the signature [`FUNCTIONS`] lists, and nothing else is.

use super::{FUNCTIONS, quote};
use crate::{PostgresConfig, PostgresStorage};
use jq_core::storage::Storage;

#[tokio::test]
async fn the_schema_holds_exactly_the_listed_functions() {
    let Some(url) = jq_testkit::services::postgres() else { return };
    let schema = format!("jq_test_{}", uuid::Uuid::new_v4().simple());
    let storage = PostgresStorage::connect(PostgresConfig::new(url.clone()).schema(&schema).max_connections(1))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {url} ({e}): run scripts/start-services.sh"));
    storage.migrate().await.unwrap();
    let mut found: Vec<String> = sqlx::query_scalar(
        "SELECT substring(p.oid::regprocedure::text FROM length(n.nspname) + 2) FROM pg_proc AS p \
         JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = $1",
    )
    .bind(&schema)
    .fetch_all(storage.pool())
    .await
    .unwrap();
    found.sort();
    let mut listed: Vec<String> = FUNCTIONS.iter().map(|f| f.signature.to_owned()).collect();
    listed.sort();
    assert_eq!(found, listed, "the functions in the schema, by regprocedure, are those FUNCTIONS lists");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {} CASCADE", quote(&schema))))
        .execute(storage.pool())
        .await
        .unwrap();
    storage.close().await;
}
