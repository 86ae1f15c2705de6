//! The user-facing `Client` and `connect`: typed enqueue with options on the
//! store's clock, batches, admin calls, the pool built from the client, and
//! enqueue inside the caller's transaction under one name on SQLite and
//! PostgreSQL.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use jq::SetupError;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use {
    common::Namespace,
    jq::{Error, JobType, State},
    serde::{Deserialize, Serialize},
};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct ShipOrder {
    order: u64,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl JobType for ShipOrder {
    const KIND: &'static str = "ship_order";
    const QUEUE: &'static str = "shipping";
    const MAX_ATTEMPTS: u32 = 7;
}

/// A fan-out and its callback: `pack` first, then `label` and `invoice`,
/// then `ship` after both.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn shipment(order: u64) -> jq::workflow::Workflow {
    use jq::workflow::{Step, Workflow};
    let job = |n: u64| jq::NewJob::typed(&ShipOrder { order: order * 10 + n }).build().unwrap();
    Workflow::new()
        .step(Step::new("pack", job(0)))
        .step(Step::new("label", job(1)).after(["pack"]))
        .step(Step::new("invoice", job(2)).after(["pack"]))
        .step(Step::new("ship", job(3)).after(["label", "invoice"]))
}

#[test]
fn bad_urls_are_refused_before_anything_is_opened() {
    jq_testkit::__private::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/jobs.db");
        for url in
            ["mysql://localhost/jobs".to_owned(), "sqlite://".to_owned(), format!("sqlite://{}", missing.display())]
        {
            let got = jq::connect(&url).await;
            assert!(matches!(got, Err(SetupError::InvalidUrl { .. })), "{url}: {got:?}");
        }
        assert!(!dir.path().join("no").exists(), "a refused URL created nothing");
    });
}

/// The password of a server URL never shows in what `connect` returns:
/// not in the error's message, not in its `Debug` (sources included), not
/// in the `Debug` of a storage that connected with one.
#[cfg(all(feature = "postgres", feature = "redis"))]
#[test]
fn passwords_stay_out_of_errors_and_debug_output() {
    jq_testkit::needs!(postgres);
    jq_testkit::__private::block_on(async {
        for url in [
            "redis://:s3cret-pw@127.0.0.1:1",
            "redis://app:s3cret-pw@127.0.0.1:1/0?prefix=x",
            "postgres://postgres:s3cret-pw@127.0.0.1:1/postgres",
            "postgres://postgres@127.0.0.1:1/postgres?password=s3cret-pw",
            "postgres://postgres:s3cret-pw@127.0.0.1:notaport/postgres",
            "mysql://app:s3cret-pw@db/jobs",
        ] {
            let err = jq::connect(url).await.unwrap_err();
            let mut shown = format!("{err} {err:?}");
            let mut source = std::error::Error::source(&err);
            while let Some(s) = source {
                shown.push_str(&format!(" {s} {s:?}"));
                source = s.source();
            }
            assert!(!shown.contains("s3cret"), "{url}: {shown}");
        }
        // PostgreSQL on 127.0.0.1 trusts: the password is ignored, the
        // connection made.
        let client = jq::connect("postgres://postgres:s3cret-pw@127.0.0.1:5432/postgres").await.unwrap();
        assert!(!format!("{client:?}").contains("s3cret"), "{client:?}");
        let config = jq::postgres::PostgresConfig::new("postgres://postgres:s3cret-pw@127.0.0.1/x")
            .listen_url("postgres://postgres:s3cret-pw@127.0.0.1/y");
        assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
        let options = jq::ConnectOptions::new().listen_url("postgres://postgres:s3cret-pw@127.0.0.1/y");
        assert!(!format!("{options:?}").contains("s3cret"), "{options:?}");
        let direct =
            jq::connect_with("postgres://postgres:s3cret-pw@127.0.0.1:5432/postgres?pooler=transaction", &options)
                .await
                .unwrap();
        assert!(!format!("{direct:?}").contains("s3cret"), "{direct:?}");
    });
}

/// An option the URL's backend has no use for is refused, never ignored:
/// an operator who set a pool size must not believe it applies to Redis.
#[cfg(feature = "sqlite")]
#[test]
fn an_option_of_another_backend_is_refused() {
    jq_testkit::__private::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
        for (options, named) in [
            (jq::ConnectOptions::new().max_connections(4), "max_connections"),
            (jq::ConnectOptions::new().acquire_timeout(std::time::Duration::from_secs(1)), "acquire_timeout"),
            (jq::ConnectOptions::new().listen_url("postgres://postgres@127.0.0.1/postgres"), "listen_url"),
        ] {
            let got = jq::connect_with(&url, &options).await;
            assert!(
                matches!(&got, Err(SetupError::InvalidOption { option, backend: "sqlite" }) if *option == named),
                "{named}: {got:?}"
            );
        }
        assert!(!dir.path().join("jobs.db").exists(), "a refused option opened nothing");
        jq::connect_with(&url, &jq::ConnectOptions::new().max_payload_bytes(1024)).await.expect("a shared option");
    });
}

/// In a build without a backend, its URL says which feature to enable (run
/// `cargo test -p jq-queue` with the default features to see it).
#[cfg(not(all(feature = "postgres", feature = "redis")))]
#[test]
fn a_backend_left_out_names_its_feature() {
    jq_testkit::__private::block_on(async {
        #[cfg(not(feature = "postgres"))]
        let (url, feature) = ("postgres://postgres@127.0.0.1:5432/postgres", "postgres");
        #[cfg(all(feature = "postgres", not(feature = "redis")))]
        let (url, feature) = ("redis://127.0.0.1:6379", "redis");
        match jq::connect(url).await {
            Err(e @ SetupError::NotCompiled { .. }) => {
                assert!(matches!(e, SetupError::NotCompiled { feature: f, .. } if f == feature));
                assert!(e.to_string().contains(&format!("features = [\"{feature}\"]")), "{e}");
            }
            other => panic!("{url}: {other:?}"),
        }
    });
}

/// A resent enqueue names the job's id (`JobBuilder::id`), as an HTTP
/// producer's `id` does: the second send stores nothing and answers the
/// stored job's id, whatever it sends with it.
async fn a_resent_enqueue_stores_one_job<S: jq::storage::Storage>(client: &jq::Client<S>) {
    use jq::{JobId, NewJob, Payload};
    let id = JobId::new();
    let first = NewJob::builder("ship", Payload::from_json(r#"{"order":1}"#).unwrap()).queue("resends").id(id);
    assert_eq!(client.enqueue(first).await.unwrap(), id);
    let resend = NewJob::builder("ship", Payload::from_json(r#"{"order":2}"#).unwrap()).queue("resends").id(id);
    assert_eq!(client.enqueue(resend).await.unwrap(), id, "the resend answers the stored id");
    let stored = client.get(id).await.unwrap();
    assert_eq!(stored.payload.as_str(), r#"{"order":1}"#, "the stored job is left as it is");
    assert_eq!(client.stats().await.unwrap().queues["resends"].total(), 1, "one job stored");
    let built = NewJob::builder("ship", Payload::from_json("{}").unwrap()).build().unwrap();
    assert_ne!(built.id, id, "without an id, each build makes a fresh one");
}

#[test]
fn a_resent_enqueue_stores_one_job_in_memory() {
    jq_testkit::__private::block_on(async {
        a_resent_enqueue_stores_one_job(&jq::Client::new(jq_testkit::MemoryStorage::new())).await;
    });
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::time::Duration;

    use jq::sqlite::rusqlite::{Connection, TransactionBehavior};
    use jq::storage::Storage;
    use jq::{Client, JobFilter, ManualClock, NewJob, Priority};

    use super::*;

    async fn client(ns: &Namespace, manual: &ManualClock) -> Client {
        ns.connect(manual.clock()).await
    }

    /// The application's own connection to the store's file, with a table
    /// of its own.
    fn app_connection(client: &Client) -> Connection {
        let path = client.storage().as_sqlite().unwrap().config().path().unwrap().to_owned();
        let app = Connection::open(path).unwrap();
        app.busy_timeout(Duration::from_secs(5)).unwrap();
        app.execute_batch("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)").unwrap();
        app
    }

    #[test]
    fn typed_enqueue_takes_options_and_the_store_clock() {
        jq_testkit::__private::block_on(async {
            let ns = Namespace::sqlite();
            let manual = ManualClock::new("2030-01-01T00:00:00Z".parse().unwrap());
            let client = client(&ns, &manual).await;

            let plain = client.get(client.enqueue(ShipOrder { order: 1 }).await.unwrap()).await.unwrap();
            assert_eq!((plain.kind.as_str(), plain.queue.as_str()), ("ship_order", "shipping"));
            assert_eq!((plain.max_attempts, plain.priority, plain.state), (7, Priority::Normal, State::Pending));
            assert_eq!(plain.payload.decode::<ShipOrder>().unwrap(), ShipOrder { order: 1 });

            let delayed = NewJob::typed(&ShipOrder { order: 2 })
                .priority(Priority::Critical)
                .queue("rush")
                .max_attempts(2)
                .unique_key("order-2")
                .delay(Duration::from_secs(90));
            let id = client.enqueue(delayed).await.unwrap();
            let job = client.get(id).await.unwrap();
            assert_eq!((job.queue.as_str(), job.priority, job.max_attempts), ("rush", Priority::Critical, 2));
            assert_eq!(job.state, State::Scheduled);
            // The delay counts from the store's clock, not the system's.
            assert_eq!(job.run_at, manual.now() + chrono::TimeDelta::seconds(90));
            let again = NewJob::typed(&ShipOrder { order: 2 }).queue("rush").unique_key("order-2");
            assert_eq!(client.enqueue(again).await.unwrap(), id, "a live job holds the key");

            let at = manual.now() + chrono::TimeDelta::seconds(5);
            let id = client.enqueue(NewJob::typed(&ShipOrder { order: 3 }).run_at(at)).await.unwrap();
            assert_eq!(client.get(id).await.unwrap().run_at, at);
            ns.cleanup().await;
        });
    }

    #[test]
    fn a_resent_enqueue_stores_one_job_on_sqlite() {
        jq_testkit::__private::block_on(async {
            let ns = Namespace::sqlite();
            a_resent_enqueue_stores_one_job(&client(&ns, &ManualClock::starting_now()).await).await;
            ns.cleanup().await;
        });
    }

    #[test]
    fn a_batch_is_all_or_none() {
        jq_testkit::__private::block_on(async {
            let ns = Namespace::sqlite();
            let client = client(&ns, &ManualClock::starting_now()).await;
            let ids = client.enqueue_many([ShipOrder { order: 1 }, ShipOrder { order: 2 }]).await.unwrap();
            assert_eq!(ids.len(), 2);
            let bad = [NewJob::typed(&ShipOrder { order: 3 }), NewJob::typed(&ShipOrder { order: 4 }).queue("a b")];
            assert!(matches!(client.enqueue_many(bad).await, Err(Error::InvalidQueue { .. })));
            assert_eq!(client.stats().await.unwrap().total(State::Pending), 2, "nothing of the bad batch");
            ns.cleanup().await;
        });
    }

    #[test]
    fn admin_calls_go_through() {
        jq_testkit::__private::block_on(async {
            let ns = Namespace::sqlite();
            let manual = ManualClock::starting_now();
            let client = client(&ns, &manual).await;
            let later =
                client.enqueue(NewJob::typed(&ShipOrder { order: 1 }).delay(Duration::from_secs(60))).await.unwrap();
            assert_eq!(client.cancel(later).await.unwrap(), jq::CancelAnswer::Cancelled);
            let doomed = client.enqueue(NewJob::typed(&ShipOrder { order: 2 }).max_attempts(1)).await.unwrap();
            // A worker fails it for good: Dead.
            let claimed = client
                .storage()
                .claim(&jq::storage::ClaimRequest::new(
                    vec![jq::QueueName::new("shipping").unwrap()],
                    1,
                    Duration::from_secs(30),
                    "w",
                ))
                .await
                .unwrap()
                .jobs;
            let lease = claimed[0].lease_ref().unwrap();
            jq::storage::StorageExt::bury(client.storage(), lease, "no such address").await.unwrap();
            assert_eq!(client.get(doomed).await.unwrap().state, State::Dead);
            let dead = JobFilter { state: Some(State::Dead), ..Default::default() };
            assert_eq!(client.list(&dead).await.unwrap().len(), 1);
            client.retry(doomed).await.unwrap();
            assert_eq!(client.get(doomed).await.unwrap().state, State::Pending);
            assert_eq!(
                client.cancel(later).await.unwrap(),
                jq::CancelAnswer::Finished(State::Cancelled),
                "a cancel sent again says it took effect"
            );
            manual.advance(Duration::from_secs(10));
            assert_eq!(client.purge(State::Cancelled, manual.now()).await.unwrap(), 1);
            assert!(matches!(client.get(later).await, Err(Error::NotFound { .. })));
            assert_eq!(client.migrate().await.unwrap(), 0, "SQLite migrates when it opens the file");
            ns.cleanup().await;
        });
    }

    #[test]
    fn the_pool_built_from_the_client_runs_its_jobs() {
        jq_testkit::__private::block_on(async {
            let ns = Namespace::sqlite();
            let client = client(&ns, &ManualClock::starting_now()).await;
            let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
            let pool = client
                .worker_pool()
                .register::<ShipOrder, _, _>(move |job, _ctx| {
                    let done = done.clone();
                    async move {
                        done.send(job.order).ok();
                        Ok(())
                    }
                })
                .start()
                .unwrap();
            let ids = client.enqueue_many((1..=3).map(|order| ShipOrder { order })).await.unwrap();
            let mut orders = Vec::new();
            while orders.len() < 3 {
                orders.push(tokio::time::timeout(Duration::from_secs(10), finished.recv()).await.unwrap().unwrap());
            }
            pool.shutdown().await.unwrap();
            orders.sort();
            assert_eq!(orders, vec![1, 2, 3]);
            for id in ids {
                assert_eq!(client.get(id).await.unwrap().state, State::Completed);
            }
            ns.cleanup().await;
        });
    }

    /// `enqueue_tx` with a rusqlite transaction: the same call as on
    /// PostgreSQL (`&mut tx`, awaited); the job exists and the workers wake
    /// only once the caller commits.
    #[test]
    fn enqueue_tx_rides_the_callers_commit() {
        jq_testkit::__private::block_on(async {
            let ns = Namespace::sqlite();
            let client = client(&ns, &ManualClock::starting_now()).await;
            let mut signal = client.storage().subscribe().unwrap();
            let mut app = app_connection(&client);

            let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
            tx.execute("INSERT INTO orders (id) VALUES (1)", []).unwrap();
            let kept = client.enqueue_tx(&mut tx, ShipOrder { order: 1 }).await.unwrap();
            // Synchronous code takes the result of the completed future.
            let batch =
                client.enqueue_many_tx(&mut tx, [ShipOrder { order: 2 }, ShipOrder { order: 3 }]).into_inner().unwrap();
            assert!(!signal.has_changed().unwrap(), "no wake-up before the commit");
            tx.commit().unwrap();
            assert!(signal.has_changed().unwrap(), "the commit woke the workers");
            signal.mark_unchanged();

            let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
            tx.execute("INSERT INTO orders (id) VALUES (2)", []).unwrap();
            let dropped = client.enqueue_tx(&mut tx, ShipOrder { order: 4 }).await.unwrap();
            tx.rollback().unwrap();
            assert!(!signal.has_changed().unwrap(), "a rollback wakes no one");

            for id in [kept, batch[0], batch[1]] {
                assert_eq!(client.get(id).await.unwrap().state, State::Pending);
            }
            assert!(matches!(client.get(dropped).await, Err(Error::NotFound { .. })));
            // A job that cannot be built stores nothing and leaves the
            // transaction usable.
            let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
            let bad = client.enqueue_tx(&mut tx, NewJob::typed(&ShipOrder { order: 5 }).queue("a b")).await;
            assert!(matches!(bad, Err(Error::InvalidQueue { .. })));
            tx.commit().unwrap();
            assert_eq!(client.stats().await.unwrap().total(State::Pending), 3);
            ns.cleanup().await;
        });
    }

    /// `enqueue_workflow_tx` with a rusqlite transaction: every step exists
    /// if and only if the caller commits; a rollback leaves nothing of the
    /// workflow, and a workflow that cannot be planned stores nothing.
    #[test]
    fn enqueue_workflow_tx_rides_the_callers_commit() {
        jq_testkit::__private::block_on(async {
            let ns = Namespace::sqlite();
            let client = client(&ns, &ManualClock::starting_now()).await;
            let signal = client.storage().subscribe().unwrap();
            let mut app = app_connection(&client);

            let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
            tx.execute("INSERT INTO orders (id) VALUES (1)", []).unwrap();
            let kept = client.enqueue_workflow_tx(&mut tx, shipment(1)).await.unwrap();
            assert!(!signal.has_changed().unwrap(), "no wake-up before the commit");
            tx.commit().unwrap();
            assert!(signal.has_changed().unwrap(), "the commit woke the workers");
            assert_eq!(client.get(kept.job("pack").unwrap()).await.unwrap().state, State::Pending);
            assert_eq!(client.get(kept.job("ship").unwrap()).await.unwrap().state, State::Waiting);
            let info = client.workflow(kept.id).await.unwrap();
            assert_eq!((info.counts.get(State::Pending), info.counts.get(State::Waiting)), (1, 3));

            let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
            // Synchronous code takes the result of the completed future.
            let dropped = client.enqueue_workflow_tx(&mut tx, shipment(2)).into_inner().unwrap();
            tx.rollback().unwrap();
            for (_, id) in &dropped.steps {
                assert!(matches!(client.get(*id).await, Err(Error::NotFound { .. })), "rolled back");
            }
            assert!(matches!(client.workflow(dropped.id).await, Err(Error::WorkflowNotFound { .. })));

            let mut tx = app.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
            let cycle = jq::workflow::Workflow::new().step(
                jq::workflow::Step::new("a", NewJob::typed(&ShipOrder { order: 9 }).build().unwrap()).after(["a"]),
            );
            let refused = client.enqueue_workflow_tx(&mut tx, cycle).await;
            assert!(matches!(refused, Err(Error::InvalidInput { .. })), "{refused:?}");
            tx.commit().unwrap();
            assert_eq!(client.stats().await.unwrap().total(State::Waiting), 3, "only the committed workflow");
            ns.cleanup().await;
        });
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use jq::Clock;
    use jq::postgres::sqlx;

    use super::*;

    /// Connecting does not migrate PostgreSQL; `migrate` does, once.
    #[test]
    fn connect_does_not_migrate_and_migrate_is_explicit() {
        jq_testkit::needs!(postgres);
        jq_testkit::__private::block_on(async {
            let ns = Namespace::postgres_unmigrated();
            let client = ns.connect(Clock::system()).await;
            let before = client.enqueue(ShipOrder { order: 1 }).await;
            assert!(before.is_err(), "no table before migrate: {before:?}");
            assert!(client.migrate().await.unwrap() > 0);
            assert_eq!(client.migrate().await.unwrap(), 0, "already up to date");
            client.enqueue(ShipOrder { order: 1 }).await.unwrap();
            ns.cleanup().await;
        });
    }

    /// `enqueue_tx` with a sqlx transaction: the same call as on SQLite; the
    /// job exists only once the caller commits.
    #[test]
    fn enqueue_tx_rides_the_callers_commit() {
        jq_testkit::needs!(postgres);
        jq_testkit::__private::block_on(async {
            let ns = Namespace::postgres().await;
            let client = ns.connect(Clock::system()).await;
            let observer = ns.connect(Clock::system()).await;
            let pool = client.storage().as_postgres().unwrap().pool().clone();

            let mut tx = pool.begin().await.unwrap();
            let kept = client.enqueue_tx(&mut tx, ShipOrder { order: 1 }).await.unwrap();
            let batch = client.enqueue_many_tx(&mut tx, [ShipOrder { order: 2 }]).await.unwrap();
            assert!(matches!(observer.get(kept).await, Err(Error::NotFound { .. })), "invisible before commit");
            tx.commit().await.unwrap();
            assert_eq!(observer.get(kept).await.unwrap().state, State::Pending);
            assert_eq!(observer.get(batch[0]).await.unwrap().state, State::Pending);

            let mut tx: sqlx::Transaction<'_, sqlx::Postgres> = pool.begin().await.unwrap();
            let dropped = client.enqueue_tx(&mut tx, ShipOrder { order: 3 }).await.unwrap();
            tx.rollback().await.unwrap();
            assert!(matches!(observer.get(dropped).await, Err(Error::NotFound { .. })));
            ns.cleanup().await;
        });
    }

    /// `enqueue_workflow_tx` with a sqlx transaction: the same call as on
    /// SQLite; the steps exist only once the caller commits, and a rollback
    /// leaves nothing of the workflow.
    #[test]
    fn enqueue_workflow_tx_rides_the_callers_commit() {
        jq_testkit::needs!(postgres);
        jq_testkit::__private::block_on(async {
            let ns = Namespace::postgres().await;
            let client = ns.connect(Clock::system()).await;
            let observer = ns.connect(Clock::system()).await;
            let pool = client.storage().as_postgres().unwrap().pool().clone();

            let mut tx = pool.begin().await.unwrap();
            let kept = client.enqueue_workflow_tx(&mut tx, shipment(1)).await.unwrap();
            let pack = kept.job("pack").unwrap();
            assert!(matches!(observer.get(pack).await, Err(Error::NotFound { .. })), "invisible before commit");
            assert!(matches!(observer.workflow(kept.id).await, Err(Error::WorkflowNotFound { .. })));
            tx.commit().await.unwrap();
            assert_eq!(observer.get(pack).await.unwrap().state, State::Pending);
            assert_eq!(observer.get(kept.job("ship").unwrap()).await.unwrap().state, State::Waiting);
            let info = observer.workflow(kept.id).await.unwrap();
            assert_eq!((info.counts.get(State::Pending), info.counts.get(State::Waiting)), (1, 3));

            let mut tx: sqlx::Transaction<'_, sqlx::Postgres> = pool.begin().await.unwrap();
            let batch = jq::workflow::Batch::new(
                [ShipOrder { order: 20 }, ShipOrder { order: 21 }]
                    .iter()
                    .map(|o| jq::NewJob::typed(o).build().unwrap()),
                jq::NewJob::typed(&ShipOrder { order: 22 }).build().unwrap(),
            );
            let dropped = client.enqueue_batch_tx(&mut tx, batch).await.unwrap();
            tx.rollback().await.unwrap();
            for (_, id) in &dropped.steps {
                assert!(matches!(observer.get(*id).await, Err(Error::NotFound { .. })), "rolled back");
            }
            assert!(matches!(observer.workflow(dropped.id).await, Err(Error::WorkflowNotFound { .. })));
            ns.cleanup().await;
        });
    }

    /// A transaction of the other backend's driver is refused, not run on
    /// the wrong database.
    #[cfg(feature = "sqlite")]
    #[test]
    fn a_transaction_of_another_driver_is_refused() {
        jq_testkit::needs!(postgres);
        jq_testkit::__private::block_on(async {
            let pg = Namespace::postgres().await;
            let pg_client = pg.connect(Clock::system()).await;
            let lite = Namespace::sqlite();
            let lite_client = lite.connect(Clock::system()).await;

            let mut conn = jq::sqlite::rusqlite::Connection::open_in_memory().unwrap();
            let mut tx = conn.transaction().unwrap();
            let got = pg_client.enqueue_tx(&mut tx, ShipOrder { order: 1 }).await;
            assert!(matches!(got, Err(Error::InvalidInput { what: "transaction", .. })), "{got:?}");

            let mut tx = pg_client.storage().as_postgres().unwrap().pool().begin().await.unwrap();
            let got = lite_client.enqueue_tx(&mut tx, ShipOrder { order: 1 }).await;
            assert!(matches!(got, Err(Error::InvalidInput { what: "transaction", .. })), "{got:?}");
            tx.rollback().await.unwrap();
            pg.cleanup().await;
            lite.cleanup().await;
        });
    }
}
