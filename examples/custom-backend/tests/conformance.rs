//! The user's first step with a new backend: the shared suites. Every
//! `connect` is a new handle on one store (its own clock), as a new
//! connection to a shared database would be.

#![allow(clippy::unwrap_used)] // tests may unwrap

use custom_backend::IndexedStorage;
use jq::Clock;

struct Harness {
    store: IndexedStorage,
}

#[async_trait::async_trait]
impl jq_testkit::Harness for Harness {
    type Storage = IndexedStorage;

    async fn connect(&self, clock: Clock) -> IndexedStorage {
        self.store.connect(clock)
    }

    async fn cleanup(&self) {
        // In-process: nothing outlives the test.
    }
}

async fn setup() -> Harness {
    Harness { store: IndexedStorage::default() }
}

jq_testkit::conformance!(setup; roles, periodic, controls, throughput, cancellation, workflows);
jq_testkit::properties!(setup; periodic, workflows);
