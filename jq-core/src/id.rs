//! The ids jq makes on the client: a job's ([`JobId`]), a workflow's
//! ([`WorkflowId`]) and a claim's lease token ([`LeaseToken`]). Part of the
//! ground: it depends on no other module, so the error type can name them
//! (their text forms, which fail with that error, are in `parse.rs`).

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A job's id: a UUID v7 made by the client, so ids sort by creation time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub Uuid);

impl JobId {
    /// A fresh, time-ordered id.
    pub fn new() -> Self {
        JobId(Uuid::now_v7())
    }
}

impl Default for JobId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The token of one claim of one job. Made fresh (random) at every claim and
/// never repeated, so a worker holding an old token can never touch the job
/// again once someone else has claimed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseToken(pub Uuid);

impl LeaseToken {
    /// A fresh random token.
    pub fn new() -> Self {
        LeaseToken(Uuid::new_v4())
    }
}

impl Default for LeaseToken {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A workflow's id: a UUID v7 made by the client, like a job's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkflowId(pub Uuid);

impl WorkflowId {
    /// A fresh, time-ordered id.
    pub fn new() -> Self {
        WorkflowId(Uuid::now_v7())
    }
}

impl Default for WorkflowId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
