//! Keyed jobs ([`Capability::Keys`]): per-key limits stored in the
//! backend and honoured inside every claim's atomic step, and the fair
//! rotation between a queue's keys.

use super::capability::{Capability, unsupported};
use crate::error::Result;
use crate::job::NewJob;

/// [`Error::Unsupported`](crate::Error::Unsupported) naming
/// [`Capability::Keys`] when any of `jobs` has a key: what a backend
/// without the capability calls on every job it is given (enqueue, a
/// workflow's steps, a periodic job's tick) before storing any, so that a
/// key is never silently dropped.
pub fn refuse_keys<'a>(jobs: impl IntoIterator<Item = &'a NewJob>) -> Result<()> {
    if jobs.into_iter().any(|job| job.key.is_some()) {
        return Err(unsupported(Capability::Keys));
    }
    Ok(())
}
