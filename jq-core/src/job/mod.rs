//! The job: its names, payload and priority, a job as stored
//! ([`Job`]), a job to enqueue ([`NewJob`], [`JobBuilder`]), and typed
//! jobs ([`JobType`]), and the unique rules ([`UniqueRule`]).

mod name;
mod new;
mod payload;
mod priority;
mod stored;
mod typed;
mod unique;

pub(crate) use name::is_plain_name;
pub use name::{MAX_KEY_BYTES, MAX_NAME_BYTES, QueueName, check_key};
pub use new::{DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, JobBuilder, MAX_TIMEOUT, NewJob, check_timeout};
pub use payload::{DEFAULT_MAX_PAYLOAD_BYTES, Payload};
pub use priority::Priority;
pub use stored::{AttemptError, CancelRequest, Job, Lease, LeaseRef};
pub use typed::{IntoJob, JobType};
pub use unique::{Decision, Holder, MAX_UNIQUE_WINDOW, UniqueRule, decide};
