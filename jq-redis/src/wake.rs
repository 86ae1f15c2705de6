//! Wake-up: one pub/sub connection per storage handle, started by the first
//! `subscribe()`, bumps a watch channel on every message of `<prefix>:wake`.
//! On Redis Cluster it is a plain connection to one node (PUBLISH is
//! broadcast to every node of a cluster).
//!
//! After the response timeout without a message it pings the server, and
//! it reconnects when the ping gets no answer within the response timeout
//! either: a listening connection that went silent is replaced within
//! twice the response timeout (20 s by default); the pool polls meanwhile.

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
        // Every step is bounded: a server that accepts and never answers,
        // or a connection that goes silent, must not hold the listener.
        let timeout = inner.config.response_timeout;
        match tokio::time::timeout(timeout, client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => {
                let (mut sink, mut messages) = pubsub.split();
                match tokio::time::timeout(timeout, sink.subscribe(&channel)).await {
                    Ok(Ok(())) => {
                        backoff = Duration::from_millis(50);
                        // Work may have arrived while we were not listening.
                        inner.wake.send_modify(|n| *n = n.wrapping_add(1));
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
                                // Nothing heard for a while: is anyone there?
                                () = tokio::time::sleep(timeout) => {
                                    match tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await {
                                        Ok(Ok(_)) => {}
                                        Ok(Err(e)) => {
                                            tracing::warn!(error = %e, "redis pub/sub ping failed; reconnecting");
                                            break;
                                        }
                                        Err(_) => {
                                            tracing::warn!(?timeout, "redis pub/sub connection silent; reconnecting");
                                            break;
                                        }
                                    }
                                }
                            }
                        }
                        tracing::warn!("redis pub/sub connection dropped; reconnecting");
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "redis SUBSCRIBE failed; retrying"),
                    Err(_) => tracing::warn!(?timeout, "redis SUBSCRIBE got no answer; retrying"),
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "redis pub/sub connect failed; retrying"),
            Err(_) => tracing::warn!(?timeout, "redis pub/sub connect got no answer; retrying"),
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
