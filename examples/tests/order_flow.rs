//! Runs the order_flow example's own code on SQLite: the approval sent over
//! the HTTP API ships the first order, the second refunds when its window
//! passes, and each journal holds its steps once, in order.

#![allow(clippy::unwrap_used)] // tests may unwrap

#[path = "../examples/order_flow.rs"]
#[allow(dead_code)] // its `main` is the example's, not the test's
mod order_flow;

use order_flow::{Books, Outcome};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_over_http_ships_and_silence_refunds() {
    let dir = tempfile::tempdir().unwrap();
    let client = jq::connect(&format!("sqlite://{}", dir.path().join("orders.db").display())).await.unwrap();
    let report = order_flow::run(&client).await.unwrap();
    assert_eq!(report.approved, Outcome::Shipped { charge: "ch_1_1250".into(), approved_by: "manager".into() });
    assert_eq!(
        report.approved_journal,
        [r#"step "reserve""#, r#"step "charge""#, r#"wait for "approved""#, r#"step "ship""#]
    );
    assert_eq!(report.unapproved, Outcome::Refunded { charge: "ch_2_4200".into() });
    assert_eq!(
        report.unapproved_journal,
        [r#"step "reserve""#, r#"step "charge""#, r#"wait for "approved""#, r#"step "refund""#]
    );
    assert_eq!(
        report.books,
        Books { stock: 8, charged: vec![1, 2], shipped: vec![1], refunded: vec![2] },
        "each effect once"
    );
}
