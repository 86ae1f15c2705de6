//! [`WorkflowStorage`]: results of completed jobs and jobs that wait for
//! other jobs ([`Capability::Workflows`](super::Capability::Workflows)).

use crate::error::Error;
use crate::workflow::WorkflowId;

/// [`Error::WorkflowNotFound`] for `id`.
pub fn workflow_not_found(id: WorkflowId) -> Error {
    Error::WorkflowNotFound { id }
}
