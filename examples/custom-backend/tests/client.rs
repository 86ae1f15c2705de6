//! Once the suites pass, the rest of jq works on the backend: the client,
//! typed enqueue and the worker pool.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Duration;

use custom_backend::IndexedStorage;
use jq::{Client, JobType, State};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Resize {
    image: String,
}

impl JobType for Resize {
    const KIND: &'static str = "resize";
    const QUEUE: &'static str = "images";
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_the_pool_run_on_it() {
    let client = Client::new(IndexedStorage::default());
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    let pool = client
        .worker_pool()
        .register::<Resize, _, _>(move |job, _ctx| {
            let done = done.clone();
            async move {
                done.send(job.image).ok();
                Ok(())
            }
        })
        .start()
        .unwrap();
    let ids = client.enqueue_many(["a.png", "b.png"].map(|image| Resize { image: image.into() })).await.unwrap();
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(10), finished.recv()).await.unwrap().unwrap();
    }
    pool.shutdown().await.unwrap();
    for id in ids {
        assert_eq!(client.get(id).await.unwrap().state, State::Completed);
    }
}
