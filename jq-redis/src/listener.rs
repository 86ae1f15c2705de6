//! Wake-up: one pub/sub connection per storage handle, started by the first
//! `subscribe()`, bumps a watch channel on every message of `<prefix>:wake`.
//! On Redis Cluster it is a plain connection to one node (PUBLISH is
//! broadcast to every node of a cluster).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use jq_core::storage::WorkSignal;

use crate::Inner;

pub(crate) fn subscribe(inner: &Arc<Inner>) -> Option<WorkSignal> {
    let rx = inner.wake.subscribe();
    if !inner.listening.swap(true, Ordering::SeqCst) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(listen(inner.clone()));
            }
            Err(_) => {
                // No runtime to run the listener on: the pool polls.
                inner.listening.store(false, Ordering::SeqCst);
                return None;
            }
        }
    }
    Some(rx)
}

/// Runs until every receiver is dropped; reconnects with backoff. On Redis
/// Cluster a `PUBLISH` reaches every node, so one node's plain pub/sub
/// connection hears every wake-up; when that node fails, the next seed node
/// is tried.
async fn listen(inner: Arc<Inner>) {
    let channel = inner.keys.channel();
    let mut backoff = Duration::from_millis(50);
    let mut attempt = 0usize;
    loop {
        let client = if inner.config.is_cluster() {
            let nodes = &inner.config.cluster_nodes;
            redis::Client::open(nodes[attempt % nodes.len()].as_str()).unwrap_or_else(|_| inner.client.clone())
        } else {
            inner.client.clone()
        };
        attempt = attempt.wrapping_add(1);
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    backoff = Duration::from_millis(50);
                    // Work may have arrived while we were not listening.
                    inner.wake.send_modify(|n| *n = n.wrapping_add(1));
                    let mut messages = pubsub.on_message();
                    loop {
                        tokio::select! {
                            msg = messages.next() => match msg {
                                Some(_) => inner.wake.send_modify(|n| *n = n.wrapping_add(1)),
                                None => break,
                            },
                            () = inner.wake.closed() => {
                                inner.listening.store(false, Ordering::SeqCst);
                                return;
                            }
                        }
                    }
                    tracing::warn!("redis pub/sub connection dropped; reconnecting");
                }
                Err(e) => tracing::warn!(error = %e, "redis SUBSCRIBE failed; retrying"),
            },
            Err(e) => tracing::warn!(error = %e, "redis pub/sub connect failed; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = inner.wake.closed() => {
                inner.listening.store(false, Ordering::SeqCst);
                return;
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
