//! Every storage operation, listed once: the list [`__storage_operations!`](crate::__storage_operations)
//! hands to a macro that writes something from it. From this one list come
//!
//! - the traits: [`Storage`](super::Storage) and the eight capability
//!   traits, with the contract of each operation (`core.rs`);
//! - the capability set a backend declares ([`Capabilities`](super::Capabilities)),
//!   and [`StorageExt`](super::StorageExt)'s `require_*` (`core.rs`);
//! - [`Operation`](super::Operation) and its capability, the
//!   [`Wrapper`](super::Wrapper) trait's forwarding, and its blanket
//!   implementations of every trait (`wrapper.rs`);
//! - [`forward_storage!`](crate::forward_storage)'s implementation
//!   (`forward.rs`).
//!
//! So a new operation is one entry below (its doc comment is its
//! contract), in the section of its trait, and every wrapper forwards it.
//! An entry reads `Variant => async fn name(&self, args..) -> Result<..>;`:
//! `Variant` names it in [`Operation`](super::Operation). The core's
//! operations with a default answer are under `provided`, with their body.
//! A capability's section opens with its [`Capability`](super::Capability)
//! variant, its trait, its field in [`Capabilities`](super::Capabilities)
//! and its `require_*` method. Types are written with `$crate::` paths,
//! since the implementations of `forward_storage!` are expanded in other
//! crates.

/// The list of every storage operation (see the module docs of
/// `jq-core/src/storage/operations.rs`): `__storage_operations!(then { .. })`
/// expands to `then! { { .. } core { .. } capabilities { .. } }`, the first
/// group passed through as it came. `then` is a path: a macro of the
/// calling module, or `$crate::name` from another exported macro.
#[doc(hidden)]
#[macro_export]
macro_rules! __storage_operations {
    ($($then:ident)::+ { $($pass:tt)* }) => {
        $($then)::+! {
            { $($pass)* }
            core {
                /// A job store: the core every backend implements (twelve operations on
                /// jobs and a clock), plus the optional [capabilities](Capability) it
                /// declares ([`Storage::capabilities`], none by default). Run
                /// `jq_testkit::conformance!` against an
                /// implementation to check it keeps the contract.
                ///
                /// Every operation is one atomic step as seen by other callers; concurrency
                /// and crash safety are the backend's job, not the caller's.
                Storage
                required {
                    /// Stores every job of the batch, or none (an error stores nothing).
                    ///
                    /// - Each job is checked first: its payload against the backend's size
                    ///   limit ([`Error::PayloadTooLarge`]).
                    /// - A backend that cannot store a batch over several queues in one
                    ///   atomic step refuses it with [`Error::BatchNotAtomic`] before
                    ///   storing anything (Redis Cluster, when the queues' keys live in
                    ///   different hash slots); every other backend takes any batch.
                    /// - `run_at` of `None` or `<= now` gives Pending, else Scheduled.
                    ///   `attempts` starts at 0, `created_at` is now.
                    /// - A job whose id is already stored is not stored again; its id is
                    ///   returned and the stored job is left as it is.
                    /// - A job whose `unique_key` matches a non-terminal job of the same
                    ///   queue (already stored, or earlier in the same batch) is not stored;
                    ///   the existing job's id is returned in its place. When several live
                    ///   jobs share the key (see [`Storage::retry`]), the smallest id.
                    /// - A job with a unique rule ([`NewJob::unique_rule`](crate::NewJob::unique_rule):
                    ///   debounce, unique for a period, replace) follows the contract's
                    ///   "Unique rules", decided by [`decide`](crate::storage::decide)
                    ///   with the storage's clock, in batch order; a waiting holder it
                    ///   updates answers its own id.
                    ///
                    /// Returns one id per input job, in input order.
                    Enqueue => async fn enqueue(&self, jobs: ::std::vec::Vec<$crate::NewJob>)
                        -> $crate::Result<::std::vec::Vec<$crate::JobId>>;
                    /// Atomically moves up to `limit` claimable jobs of the asked queues to
                    /// Running, each with a fresh lease (`attempts + 1`, the request's
                    /// token, `expires_at = now + lease`), and returns them.
                    ///
                    /// - Order: priority high to low, then `run_at`, then id.
                    /// - A job whose lease is held is never returned to a second claimer,
                    ///   however many claimers run at once; a claim never waits on jobs
                    ///   another claimer is taking.
                    /// - Never returns more than `limit` jobs; `limit` 0 returns none.
                    /// - With [`ControlStorage`]: takes nothing from a paused queue, and no
                    ///   more from a queue than its limits allow, checked in the same
                    ///   atomic step; a job held back is not changed.
                    /// - With [`KeyStorage`]: a keyed job is taken only when its key's
                    ///   limits allow it, and a queue's keys are taken in turn (the
                    ///   contract's "Keyed jobs"); jobs without a key keep the order above.
                    /// - A resend ([`ClaimRequest::resend`]) whose token already holds
                    ///   Running jobs returns exactly those and claims nothing.
                    /// - Everything taken is returned: a failure after jobs became Running
                    ///   under the token is logged, the jobs concerned stay Running for
                    ///   recover, and the others are returned. An error means nothing was
                    ///   claimed (or its answer was lost: resend with the same token).
                    /// - A claim that returns fewer than `limit` jobs while a claimable
                    ///   job of an asked, unpaused queue is left (held back by the
                    ///   queue's limits or its key's) says so in
                    ///   [`ClaimAnswer::limited`](crate::storage::ClaimAnswer::limited):
                    ///   [`Limited::Rate`](crate::storage::Limited::Rate) with the
                    ///   earliest instant a window lets one start when rate limits alone
                    ///   held them back, else [`Limited::Concurrency`](crate::storage::Limited::Concurrency).
                    ///   A drained or paused queue, or a full claim, reports `None`.
                    Claim => async fn claim(&self, request: &$crate::storage::ClaimRequest)
                        -> $crate::Result<$crate::storage::ClaimAnswer>;
                    /// Applies a batch of fenced outcomes (ack, nack, bury, release); see
                    /// [`Outcome`].
                    ///
                    /// Items apply in order, each fenced on its own: a later item on the
                    /// same job sees the earlier one's effect (`[Release, Ack]` on one lease
                    /// gives `Ok(Pending)` then `LeaseLost`). One stale token gives
                    /// `Err(LeaseLost)` at its place and does not stop the others. The
                    /// outer error is for the backend failing as a whole. Errors are
                    /// recorded with the job's current attempt number. A job whose
                    /// attempts reached `max_attempts` goes to Dead on a nack.
                    Settle => async fn settle(&self, batch: ::std::vec::Vec<$crate::storage::Settlement>)
                        -> $crate::Result<::std::vec::Vec<$crate::storage::Settled>>;
                    /// Extends each valid lease to `now + lease` and returns the ids whose
                    /// lease was lost (stale token, or job no longer Running) in
                    /// [`Beat::lost`], and, with [`CancelStorage`], the ids of extended jobs
                    /// holding a cancel request in [`Beat::cancel`] (a backend without it
                    /// answers [`Beat::lost`]).
                    Heartbeat => async fn heartbeat(&self, leases: &[$crate::storage::LeaseRef],
                        lease: ::std::time::Duration) -> $crate::Result<$crate::storage::Beat>;
                    /// Makes due Scheduled jobs (`run_at <= now`) Pending and returns how
                    /// many it moved. Idempotent; concurrent promoters move each job once.
                    Promote => async fn promote(&self) -> $crate::Result<u64>;
                    /// Running jobs whose lease expired (`expires_at <= now`) go back to
                    /// Pending, or to Dead when no attempt is left, with an error
                    /// "lease expired" recorded for the lost attempt; one holding a cancel
                    /// request ([`CancelStorage`]) goes to Cancelled instead, with no
                    /// error. Returns how many.
                    /// Idempotent, safe from many processes at once, and never overwrites a
                    /// job that a concurrent ack just finished. An expired job whose stored
                    /// fields recover cannot use goes to Dead with the reason (counted too),
                    /// and does not stop the others.
                    Recover => async fn recover(&self) -> $crate::Result<u64>;
                    /// One job, or [`Error::NotFound`].
                    Get => async fn get(&self, id: $crate::JobId) -> $crate::Result<$crate::Job>;
                    /// One page of jobs matching `filter`, by ascending id.
                    ///
                    /// A stored job that cannot be decoded is left out (logged at error
                    /// level with its id and the reason; [`Storage::get`] of it gives
                    /// [`Error::Corrupt`]) and the page is filled from the jobs after it:
                    /// a page shorter than its size still means there are no more.
                    List => async fn list(&self, filter: &$crate::JobFilter)
                        -> $crate::Result<::std::vec::Vec<$crate::Job>>;
                    /// Counts by queue and state; agrees with [`Storage::list`]. Jobs whose
                    /// stored queue or state cannot be read are left out and logged.
                    Stats => async fn stats(&self) -> $crate::Result<$crate::Stats>;
                    /// An operator's retry: Dead -> Pending (run_at now, lease cleared,
                    /// errors kept). The job gets one more attempt: `max_attempts` becomes
                    /// at least `attempts + 1`. Other states give [`Error::InvalidState`].
                    ///
                    /// Allowed even when a newer live job of the queue holds the job's
                    /// unique key: both then hold it, enqueue of the key answers with the
                    /// smaller id, and the key stays taken until the last of them is
                    /// terminal.
                    Retry => async fn retry(&self, id: $crate::JobId) -> $crate::Result<()>;
                    /// Scheduled or Pending -> Cancelled. Other states give
                    /// [`Error::InvalidState`]; an unknown id [`Error::NotFound`].
                    Cancel => async fn cancel(&self, id: $crate::JobId) -> $crate::Result<()>;
                    /// Deletes every job in the terminal `state` that finished before
                    /// `older_than`, and returns how many. A non-terminal state gives
                    /// [`Error::InvalidInput`]. Backends delete in bounded batches (a
                    /// statement or script per batch, looping until none is left) so no
                    /// single write holds locks or the WAL for long.
                    Purge => async fn purge(&self, state: $crate::State, older_than: $crate::Timestamp)
                        -> $crate::Result<u64>;
                }
                provided {
                    /// Creates or upgrades the backend's schema where it has one, and
                    /// returns how many migrations were applied; safe to call concurrently
                    /// and again. The default does nothing and returns 0 (a backend with
                    /// no schema, or one that migrates when it opens).
                    Migrate => async fn migrate(&self) -> $crate::Result<usize> { Ok(0) }
                }
            }
            capabilities {
                /// Named roles: a lease per role that one holder at a time takes and
                /// renews with its token, by the storage's clock ([`Capability::Roles`]).
                /// The worker pool elects its maintainer with it; without it every pool
                /// with maintenance on maintains (the operations are idempotent).
                Roles: RoleStorage, roles, require_roles {
                    /// Takes or renews the lease of `election.role`: when the role is free,
                    /// its lease expired (`expires_at <= now`), or it is held with
                    /// `election.token` already, it becomes held with that token until
                    /// `now + ttl` and the answer is `true`; when another token holds it
                    /// unexpired, nothing changes and the answer is `false`.
                    ///
                    /// Atomic: of concurrent contenders for a free role exactly one wins.
                    /// A holder whose lease expired and was taken over gets `false` on its
                    /// next renewal. [`Error::InvalidInput`] for a bad role or a zero ttl.
                    Elect => async fn elect(&self, election: &$crate::storage::Election) -> $crate::Result<bool>;
                    /// Frees `role` at once when it is held with `token`; does nothing
                    /// otherwise (another holder, or nobody).
                    Resign => async fn resign(&self, role: &str, token: $crate::storage::LeaseToken)
                        -> $crate::Result<()>;
                    /// Every role with a holder (expired or not), by role name.
                    Leaders => async fn leaders(&self) -> $crate::Result<::std::vec::Vec<$crate::storage::Leader>>;
                }
                /// Periodic jobs: a row per name holding its cursor, moved by a
                /// compare-and-set that stores the tick's jobs in the same atomic step
                /// ([`Capability::Periodic`]).
                Periodic: PeriodicStorage, periodic, require_periodic {
                    /// One step of a periodic job, atomically: when the stored row is the
                    /// one `fire` expects (no row for `expected: None`; else the cursor
                    /// equal to `expected` and the trigger equal to `expected_trigger`),
                    /// the row becomes [`Fire::applied`] (cursor moved, counters added,
                    /// trigger cleared, `declared_at` now) and the jobs are stored as
                    /// [`Storage::enqueue`](super::Storage::enqueue) stores them, in the same step, and the answer
                    /// is [`FireOutcome::Fired`] with their ids. Otherwise nothing changes
                    /// and the answer is [`FireOutcome::Moved`].
                    ///
                    /// This is what makes a tick's job exactly one, whatever the number of
                    /// pools: of concurrent steps from the same row, one wins; a step whose
                    /// answer was lost and is sent again finds the cursor moved.
                    /// [`Error::InvalidInput`] for a bad name or a job of another queue
                    /// than `fire.queue`; [`Error::PayloadTooLarge`] as for enqueue
                    /// (nothing stored either way).
                    Fire => async fn fire(&self, fire: &$crate::periodic::Fire)
                        -> $crate::Result<$crate::periodic::FireOutcome>;
                    /// Every stored periodic job, by name.
                    Periodic => async fn periodic(&self)
                        -> $crate::Result<::std::vec::Vec<$crate::periodic::PeriodicInfo>>;
                    /// Triggers one job of periodic job `name` now: sets its trigger to now
                    /// unless one is pending (triggers coalesce). The next pool that
                    /// declares it stores the job (only code can build it), with the
                    /// trigger's instant as its tick. [`Error::PeriodicNotFound`] when no
                    /// such periodic job is stored.
                    Trigger => async fn trigger(&self, name: &str) -> $crate::Result<()>;
                }
                /// Queue controls: pauses and limits stored in the backend and honoured
                /// inside every claim's atomic step ([`Capability::Controls`]).
                Controls: ControlStorage, controls, require_controls {
                    /// Pauses (`true`) or resumes (`false`) `queue`, stored in the backend
                    /// so that every claimer of every process honours it and it outlives
                    /// restarts. While paused, claims take none of its jobs; enqueue still
                    /// stores them and running jobs finish. Pausing a paused queue keeps its
                    /// `paused_at`; resuming wakes the claimers ([`Storage::subscribe`](super::Storage::subscribe)).
                    /// Works on a queue that holds no job yet.
                    SetPaused => async fn set_paused(&self, queue: &$crate::QueueName, paused: bool)
                        -> $crate::Result<()>;
                    /// Replaces `queue`'s limits ([`QueueLimits`]; `QueueLimits::none()`
                    /// lifts both), checked inside every claim's atomic step: at most
                    /// `concurrency` of its jobs Running (counted from their leases, so a
                    /// job whose lease expired keeps its slot until recover ends it), and
                    /// at most `rate.limit` starts in any window `(t - period, t]` of the
                    /// storage's clock, across every claimer. A job a limit holds back is
                    /// not touched. [`Error::InvalidInput`] when [`QueueLimits::check`]
                    /// fails.
                    SetLimits => async fn set_limits(&self, queue: &$crate::QueueName,
                        limits: &$crate::QueueLimits) -> $crate::Result<()>;
                    /// Every queue that holds a job or has a control, by name, with its
                    /// pause, its limits, and which claimers met its control
                    /// ([`QueueInfo::seen`]).
                    Queues => async fn queues(&self) -> $crate::Result<::std::vec::Vec<$crate::QueueInfo>>;
                }
                /// Finished jobs per queue and minute, read from an index of finished jobs
                /// ([`Capability::Throughput`]).
                Throughput: ThroughputStorage, throughput, require_throughput {
                    /// Jobs that reached Completed or Dead at or after the minute `since`
                    /// falls in, counted per queue and per minute of their `finished_at`
                    /// (UTC); one entry per (queue, minute) with any, ordered by queue then
                    /// minute. Cancelled jobs are not counted; a job retried after dying
                    /// counts where it finishes last; jobs already purged are gone. Reads
                    /// the finished-jobs index: its cost grows with the jobs finished in
                    /// the range, not with the store. [`Throughput::tally`] is the
                    /// reference.
                    Throughput => async fn throughput(&self, since: $crate::Timestamp)
                        -> $crate::Result<::std::vec::Vec<$crate::Throughput>>;
                }
                /// Cancelling running jobs, and their progress ([`Capability::Cancellation`](crate::storage::Capability::Cancellation)).
                Cancellation: CancelStorage, cancellation, require_cancellation {
                    /// Cancels job `id` whatever its state, atomically:
                    ///
                    /// - Scheduled or Pending: Cancelled now, as [`Storage::cancel`](super::Storage::cancel)
                    ///   does: [`CancelAnswer::Cancelled`].
                    /// - Running: a [`CancelRequest`](crate::job::CancelRequest) is stored
                    ///   on the job (now, `reason`) unless one is (a resend keeps the
                    ///   first): [`CancelAnswer::Requested`]. The job stays Running; every
                    ///   heartbeat of its lease reports it in [`Beat::cancel`](super::Beat::cancel)
                    ///   until it is settled, and recover ends it Cancelled instead of
                    ///   handing it on when its lease expires.
                    /// - Completed, Dead or Cancelled: nothing changes:
                    ///   [`CancelAnswer::Finished`] with the state (a cancel that came too
                    ///   late, or the resend of one that already took effect).
                    ///
                    /// [`Error::NotFound`] for an unknown id. `reason` goes through
                    /// [`cancel_reason`] first.
                    RequestCancel => async fn request_cancel(&self, id: $crate::JobId, reason: &str)
                        -> $crate::Result<$crate::storage::CancelAnswer>;
                    /// Stores each report's value as its job's `progress`, fenced like a
                    /// settlement: a report whose lease is stale (token not the job's, or
                    /// the job no longer Running) changes nothing and its id is returned.
                    /// Values go through [`check_progress`] first (the pool checks them
                    /// when the handler reports them).
                    Progress => async fn progress(&self, reports: &[$crate::storage::ProgressReport])
                        -> $crate::Result<::std::vec::Vec<$crate::JobId>>;
                }
                /// Results and dependencies ([`Capability::Workflows`](super::Capability::Workflows)).
                /// A backend that declares it also applies, inside its core operations,
                /// the rules of the repository's `docs/CONTRACT.md` ("Workflows"): an
                /// [`Outcome::AckWith`](super::Outcome::AckWith) stores the result with the
                /// ack; the step that makes a job Completed releases its children, and the
                /// step that makes it Dead or Cancelled cancels (or releases) them, in
                /// the same atomic step; [`Storage::retry`](super::Storage::retry) of a dead
                /// parent brings back the dependents its failure cancelled.
                Workflows: WorkflowStorage, workflows, require_workflows {
                    /// Stores every step of `plan` or none, in one atomic step: a step
                    /// without parents as [`Storage::enqueue`](super::Storage::enqueue)
                    /// stores a job (Pending or Scheduled), every other one Waiting with its
                    /// count of unfinished parents. A plan whose workflow id is stored
                    /// already stores nothing and returns the stored ids (a resend after a
                    /// lost answer). [`Error::InvalidInput`] when [`WorkflowPlan::check`]
                    /// fails or a step's job id is stored already outside this workflow;
                    /// [`Error::PayloadTooLarge`]; [`Error::BatchNotAtomic`] where the
                    /// backend cannot store the steps in one step (nothing stored).
                    /// Returns the ids in step order.
                    EnqueueWorkflow => async fn enqueue_workflow(&self, plan: &$crate::workflow::WorkflowPlan)
                        -> $crate::Result<::std::vec::Vec<$crate::JobId>>;
                    /// The result stored with the job's ack, `None` when it has none (not
                    /// completed, or completed without one); [`Error::NotFound`].
                    Result => async fn result(&self, id: $crate::JobId)
                        -> $crate::Result<::std::option::Option<$crate::Payload>>;
                    /// The job's workflow, parents and children; empty for a job enqueued
                    /// on its own. [`Error::NotFound`].
                    Links => async fn links(&self, id: $crate::JobId) -> $crate::Result<$crate::workflow::JobLinks>;
                    /// Each parent's step, state and result, in step order (what a
                    /// handler's [`JobContext::parent_results`](crate::JobContext::parent_results)
                    /// reads). [`Error::NotFound`] for an unknown job.
                    ParentResults => async fn parent_results(&self, id: $crate::JobId)
                        -> $crate::Result<::std::vec::Vec<$crate::workflow::ParentResult>>;
                    /// The workflow's counts per state, equal at every instant to the
                    /// states [`workflow_steps`](Self::workflow_steps) reads: from a
                    /// summary kept in the same atomic steps as its jobs' changes where the
                    /// backend keeps one (Redis), else counted over the workflow's own
                    /// steps through an index (never a scan of the store);
                    /// [`Error::WorkflowNotFound`].
                    Workflow => async fn workflow(&self, id: $crate::workflow::WorkflowId)
                        -> $crate::Result<$crate::workflow::WorkflowInfo>;
                    /// Every step of the workflow, in step order, for operators' views (reads
                    /// every job of the workflow). [`Error::WorkflowNotFound`].
                    WorkflowSteps => async fn workflow_steps(&self, id: $crate::workflow::WorkflowId)
                        -> $crate::Result<::std::vec::Vec<$crate::workflow::StepInfo>>;
                }
                /// Keyed jobs: per-key concurrency and rate limits, and claims that take
                /// a queue's keys in turn ([`Capability::Keys`]). A backend with it stores
                /// [`NewJob::key`] and keeps the contract's "Keyed jobs" in its claim; one
                /// without it refuses keyed jobs ([`refuse_keys`]).
                Keys: KeyStorage, keys, require_keys {
                    /// Sets the limits of one key of `queue` (`Some(key)`: its override),
                    /// or the queue's default that every key without an override follows
                    /// (`None`). An override of `QueueLimits::none()` makes the key
                    /// unlimited whatever the default; a default of `QueueLimits::none()`
                    /// lifts the default. Checked inside every claim's atomic step like
                    /// [`ControlStorage::set_limits`](super::ControlStorage::set_limits),
                    /// per key: at most `concurrency` Running jobs of the key (counted from
                    /// their leases), at most `rate.limit` starts of the key in any window
                    /// `(t - period, t]`. [`Error::InvalidInput`](crate::Error::InvalidInput)
                    /// when [`QueueLimits::check`] fails or the key is bad
                    /// ([`check_key`](super::check_key)). Works on a queue or key that
                    /// holds no job yet.
                    SetKeyLimits => async fn set_key_limits(&self, queue: &$crate::QueueName,
                        key: ::std::option::Option<&str>, limits: &$crate::QueueLimits) -> $crate::Result<()>;
                    /// Removes `key`'s override: the key follows the queue's default
                    /// again. Nothing changes when it has none.
                    ClearKeyLimits => async fn clear_key_limits(&self, queue: &$crate::QueueName, key: &str)
                        -> $crate::Result<()>;
                    /// `queue`'s default, its overrides (by key) and its `top` busiest keys
                    /// ([`KeyReport::busiest`]).
                    Keys => async fn keys(&self, queue: &$crate::QueueName, top: usize)
                        -> $crate::Result<$crate::KeyReport>;
                }
                /// Durable jobs: a journal per job of steps' results, durable sleeps,
                /// waits and the signals they take ([`Capability::Durable`](super::Capability::Durable)).
                /// The repository's `docs/CONTRACT.md` ("Durable jobs") has every rule
                /// with its reason; a plain job's operations are untouched by it.
                Durable: DurableStorage, durable, require_durable {
                    /// Appends `record` (a step's result or a patch marker) to the
                    /// job's journal, fenced by the lease like a settlement: a stale
                    /// token, or a job no longer Running, stores nothing
                    /// ([`Error::LeaseLost`](crate::Error::LeaseLost)). The record's
                    /// index must be the journal's length; an entry already at its place
                    /// that is the same record (index, kind, name) is a resend and changes
                    /// nothing; anything else is [`Error::JournalMismatch`](crate::Error::JournalMismatch).
                    /// The limits of [`check_append`](crate::durable::check_append) are
                    /// checked in the same atomic step ([`Error::DurableLimit`](crate::Error::DurableLimit));
                    /// a sleep, a signal or a timeout is [`Error::InvalidInput`](crate::Error::InvalidInput)
                    /// here (they go through [`suspend`](Self::suspend)).
                    Checkpoint => async fn checkpoint(&self, lease: $crate::storage::LeaseRef,
                        record: &$crate::durable::Record) -> $crate::Result<()>;
                    /// A run stops to sleep or to wait, in one atomic step fenced like
                    /// [`checkpoint`](Self::checkpoint):
                    ///
                    /// - [`Suspend::Sleep`](crate::durable::Suspend::Sleep): records the
                    ///   sleep at its place (unless that same sleep is there); then, when
                    ///   its instant is past, answers [`Suspended::Due`](crate::durable::Suspended::Due)
                    ///   and the job stays Running; else the job becomes Scheduled with
                    ///   `run_at` the instant, its attempt given back, its lease cleared:
                    ///   [`Suspended::Waiting`](crate::durable::Suspended::Waiting).
                    /// - [`Suspend::Wait`](crate::durable::Suspend::Wait): the oldest signal
                    ///   of that name not taken yet is taken (removed, its payload recorded
                    ///   at the wait's place): [`Suspended::Signal`](crate::durable::Suspended::Signal).
                    ///   Else, when the wait's timeout (the stored one if this wait was
                    ///   suspended before, else `until`) is past, a timeout is recorded:
                    ///   [`Suspended::TimedOut`](crate::durable::Suspended::TimedOut). Else the
                    ///   wait is stored, and the job becomes Scheduled until the timeout as
                    ///   for a sleep: [`Suspended::Waiting`](crate::durable::Suspended::Waiting).
                    ///   A wait whose outcome is already at its place answers it again.
                    ///
                    /// Places and limits as for [`checkpoint`](Self::checkpoint).
                    Suspend => async fn suspend(&self, lease: $crate::storage::LeaseRef,
                        suspend: &$crate::durable::Suspend) -> $crate::Result<$crate::durable::Suspended>;
                    /// Sends signal `name` with `payload` to job `id`: stored on the job
                    /// until a wait of that name takes it (each signal is taken once,
                    /// oldest first), whether the job waits already or not yet. A job
                    /// Scheduled in a wait for `name` becomes Pending (`run_at` now) in the
                    /// same atomic step. [`Error::NotFound`](crate::Error::NotFound) for an
                    /// unknown job, [`Error::InvalidState`](crate::Error::InvalidState) for
                    /// a terminal one, [`Error::DurableLimit`](crate::Error::DurableLimit)
                    /// for a payload over [`MAX_STEP_RESULT_BYTES`](crate::durable::MAX_STEP_RESULT_BYTES)
                    /// ([`check_signal`](crate::durable::check_signal)); nothing stored then.
                    Signal => async fn signal(&self, id: $crate::JobId, name: &str, payload: &$crate::Payload)
                        -> $crate::Result<()>;
                    /// The job's journal: its entries in order, the wait it is in and
                    /// its signals not taken yet; empty for a job that has none.
                    /// [`Error::NotFound`](crate::Error::NotFound) for an unknown job.
                    Journal => async fn journal(&self, id: $crate::JobId) -> $crate::Result<$crate::durable::Journal>;
                }
            }
        }
    };
}
