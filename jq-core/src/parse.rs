//! The text forms of the ground's values: [`FromStr`] for [`JobId`],
//! [`WorkflowId`] and [`State`]. Beside the ground rather than in `id.rs`
//! and `state.rs` because they fail with an [`Error`], which names those
//! types: the error sits above them, and these above the error.

use std::str::FromStr;

use uuid::Uuid;

use crate::error::{Error, Result};
use crate::id::{JobId, WorkflowId};
use crate::state::State;

impl FromStr for JobId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(JobId).map_err(|e| Error::invalid("job id", format!("{s:?} is not a UUID: {e}")))
    }
}

impl FromStr for WorkflowId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s)
            .map(WorkflowId)
            .map_err(|e| Error::invalid("workflow id", format!("{s:?} is not a UUID: {e}")))
    }
}

impl FromStr for State {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|st| st.as_str().eq_ignore_ascii_case(s)).ok_or_else(|| {
            Error::invalid(
                "state",
                format!("{s:?}: use waiting, scheduled, pending, running, completed, dead or cancelled"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_states_read_back_from_their_text() {
        let job = JobId::new();
        assert_eq!(job.to_string().parse::<JobId>().ok(), Some(job));
        let workflow = WorkflowId::new();
        assert_eq!(workflow.to_string().parse::<WorkflowId>().ok(), Some(workflow));
        assert!(matches!("x".parse::<JobId>(), Err(Error::InvalidInput { what: "job id", .. })));
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>().ok(), Some(s));
            assert_eq!(s.as_str().to_uppercase().parse::<State>().ok(), Some(s));
        }
        assert!(matches!("done".parse::<State>(), Err(Error::InvalidInput { what: "state", .. })));
    }
}
