//! Durable jobs' values and rules (the contract's "Durable jobs"): a job's
//! journal ([`Journal`], its [`Entry`]s), what a run asks the store to
//! record ([`Record`], [`Suspend`]) and the limits every backend checks
//! with the same function ([`check_append`]) on every path that grows a
//! journal.

use crate::capability::DurableLimit;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::job::Payload;

/// Most bytes of one step's result or one signal's payload (its JSON text).
pub const MAX_STEP_RESULT_BYTES: usize = 64 * 1024;
/// Most entries in one job's journal (steps, sleeps, waits, patches).
pub const MAX_STEPS: usize = 1_000;
/// Most bytes of one job's journal: the sum of [`Entry::bytes`].
pub const MAX_JOURNAL_BYTES: usize = 1024 * 1024;
/// Most signals one job holds that no wait has taken yet: a sender that
/// signals a job faster than its waits take them (a loop, a retried
/// webhook) is refused, not stored without bound.
pub const MAX_SIGNALS: usize = 1_000;
/// Most bytes of a step's, a signal's or a patch's name.
pub const MAX_STEP_NAME_BYTES: usize = 128;

/// What an entry of the journal records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A step's body ran and returned this result ([`Entry::value`]).
    Step,
    /// A durable sleep until [`Entry::until`].
    Sleep,
    /// A wait that took a signal: its payload is [`Entry::value`].
    Signal,
    /// A wait whose time ran out before a signal came.
    Timeout,
    /// A patch marker: the run went the patched way
    /// ([`DurableContext::patched`](crate::DurableContext::patched)).
    Patch,
}

impl EntryKind {
    /// Every kind.
    pub const ALL: [EntryKind; 5] =
        [EntryKind::Step, EntryKind::Sleep, EntryKind::Signal, EntryKind::Timeout, EntryKind::Patch];

    /// The stored name ("step", "sleep", "signal", "timeout", "patch").
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Step => "step",
            EntryKind::Sleep => "sleep",
            EntryKind::Signal => "signal",
            EntryKind::Timeout => "timeout",
            EntryKind::Patch => "patch",
        }
    }

    /// The kind of a stored name; `None` for anything else.
    pub fn parse(text: &str) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// True for the kinds that end a wait (a signal taken, a timeout).
    pub fn ends_a_wait(self) -> bool {
        matches!(self, EntryKind::Signal | EntryKind::Timeout)
    }
}

/// What a run asks the store to append to its job's journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its place in the journal, from 0: the number of entries before it.
    pub index: u32,
    /// The step's name (a sleep's is "sleep", a wait's the signal's name).
    pub name: String,
    /// What it records.
    pub kind: EntryKind,
    /// A step's result, a signal's payload; `None` otherwise.
    pub value: Option<Payload>,
    /// A sleep's wake-up instant; `None` otherwise.
    pub until: Option<Timestamp>,
}

impl Record {
    /// A step's result at `index`.
    pub fn step(index: u32, name: impl Into<String>, result: Payload) -> Record {
        Record { index, name: name.into(), kind: EntryKind::Step, value: Some(result), until: None }
    }

    /// A patch marker at `index`.
    pub fn patch(index: u32, name: impl Into<String>) -> Record {
        Record { index, name: name.into(), kind: EntryKind::Patch, value: None, until: None }
    }

    /// The bytes this record adds to its journal (name and value).
    pub fn bytes(&self) -> usize {
        self.name.len() + self.value.as_ref().map_or(0, Payload::len)
    }

    /// The entry it becomes, recorded at `at`.
    pub fn entry(&self, at: Timestamp) -> Entry {
        Entry {
            index: self.index,
            name: self.name.clone(),
            kind: self.kind,
            value: self.value.clone(),
            until: self.until,
            at,
        }
    }

    /// How errors name it: `step "charge"`, `sleep`, `wait for "approved"`,
    /// `patch "v2"`.
    pub fn describe(&self) -> String {
        describe(self.kind, &self.name)
    }
}

/// How errors and views name an entry of `kind` and `name`.
pub fn describe(kind: EntryKind, name: &str) -> String {
    match kind {
        EntryKind::Step => format!("step {name:?}"),
        EntryKind::Sleep => "sleep".to_owned(),
        EntryKind::Signal | EntryKind::Timeout => format!("wait for {name:?}"),
        EntryKind::Patch => format!("patch {name:?}"),
    }
}

/// One entry of a job's journal, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its place, from 0.
    pub index: u32,
    /// Its name ([`Record::name`]).
    pub name: String,
    /// What it records.
    pub kind: EntryKind,
    /// A step's result, a signal's payload.
    pub value: Option<Payload>,
    /// A sleep's wake-up instant.
    pub until: Option<Timestamp>,
    /// When the store recorded it (the storage's clock).
    pub at: Timestamp,
}

impl Entry {
    /// The bytes it counts in its journal (name and value).
    pub fn bytes(&self) -> usize {
        self.name.len() + self.value.as_ref().map_or(0, Payload::len)
    }

    /// True when `record` asks for this entry: same place, kind and name
    /// (a resend, or a replay's sleep that woke early).
    pub fn answers(&self, record: &Record) -> bool {
        self.index == record.index && self.kind == record.kind && self.name == record.name
    }

    /// How errors name it.
    pub fn describe(&self) -> String {
        describe(self.kind, &self.name)
    }
}

/// The wait a job is in: the signal it waits for and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The journal place the wait's outcome goes to.
    pub index: u32,
    /// The signal's name.
    pub name: String,
    /// When the wait times out; kept from the first suspend of this wait.
    pub until: Timestamp,
}

/// A signal stored on a job and not taken yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalInfo {
    /// Its name.
    pub name: String,
    /// When it was sent.
    pub sent_at: Timestamp,
}

/// A job's journal ([`DurableStorage::journal`](crate::storage::DurableStorage::journal)):
/// its entries in order, the wait it is in, and the signals sent to it
/// and not taken yet (oldest first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Journal {
    /// Every entry, by index (0, 1, 2, ...).
    pub entries: Vec<Entry>,
    /// The wait the job is in, if any.
    pub wait: Option<Wait>,
    /// Signals not taken yet, oldest first.
    pub signals: Vec<SignalInfo>,
}

impl Journal {
    /// The bytes of its entries ([`MAX_JOURNAL_BYTES`] bounds it).
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(Entry::bytes).sum()
    }
}

/// What a run asks the store when it stops to wait
/// ([`DurableStorage::suspend`](crate::storage::DurableStorage::suspend)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Suspend {
    /// A durable sleep at `index` until `until`.
    Sleep {
        /// Its place in the journal.
        index: u32,
        /// When the job runs again.
        until: Timestamp,
    },
    /// A wait at `index` for a signal `name`, timing out at `until` (the
    /// first suspend of a wait fixes it; later ones keep the stored one).
    Wait {
        /// Its place in the journal.
        index: u32,
        /// The signal's name.
        name: String,
        /// When it times out.
        until: Timestamp,
    },
}

impl Suspend {
    /// The record a sleep appends (a wait appends its outcome instead).
    pub fn sleep_record(index: u32, until: Timestamp) -> Record {
        Record { index, name: "sleep".to_owned(), kind: EntryKind::Sleep, value: None, until: Some(until) }
    }
}

/// The store's answer to a [`Suspend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Suspended {
    /// The job left Running: Scheduled until the sleep's end or the wait's
    /// timeout, its attempt given back, no lease. The run ends here.
    Waiting,
    /// A sleep whose instant has come: recorded, the run goes on.
    Due,
    /// The wait took this signal's payload (recorded): the run goes on.
    Signal(Payload),
    /// The wait's time ran out before a signal came (recorded): the run
    /// goes on.
    TimedOut,
}

/// [`Error::DurableLimit`] unless `size <= max`.
fn within(limit: DurableLimit, size: usize, max: usize) -> Result<()> {
    if size > max { Err(Error::DurableLimit { limit, size, max }) } else { Ok(()) }
}

/// Checks a name of a step, a signal or a patch: 1 to
/// [`MAX_STEP_NAME_BYTES`] bytes without a NUL or another control
/// character; [`Error::InvalidInput`] otherwise.
pub fn check_step_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_STEP_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "step name",
            format!("{name:?}: use 1 to {MAX_STEP_NAME_BYTES} bytes without control characters"),
        ));
    }
    Ok(())
}

/// Checks a signal's payload against [`MAX_STEP_RESULT_BYTES`] (a taken
/// signal becomes an entry of the journal).
pub fn check_signal(name: &str, payload: &Payload) -> Result<()> {
    check_step_name(name)?;
    within(DurableLimit::StepResultBytes, payload.len(), MAX_STEP_RESULT_BYTES)
}

/// Checks that a job holding `waiting` signals not taken yet may take one
/// more, against [`MAX_SIGNALS`]: the store's check at `signal`, in the
/// same atomic step as storing it.
pub fn check_signals(waiting: usize) -> Result<()> {
    within(DurableLimit::Signals, waiting + 1, MAX_SIGNALS)
}

/// The one check of every write that grows a journal, on every backend
/// and every path (checkpoint, sleep, a wait's outcome): the record's
/// name, its value against [`MAX_STEP_RESULT_BYTES`], the journal's
/// entries against [`MAX_STEPS`] and its bytes against
/// [`MAX_JOURNAL_BYTES`], given the journal's `entries` and `bytes`
/// before it.
pub fn check_append(entries: usize, bytes: usize, record: &Record) -> Result<()> {
    check_step_name(&record.name)?;
    within(DurableLimit::StepResultBytes, record.value.as_ref().map_or(0, Payload::len), MAX_STEP_RESULT_BYTES)?;
    within(DurableLimit::Steps, entries + 1, MAX_STEPS)?;
    within(DurableLimit::JournalBytes, bytes + record.bytes(), MAX_JOURNAL_BYTES)
}

/// What a store does with `record` given the entry at its place, if any:
/// `Ok(true)` to append it (the place is the journal's end), `Ok(false)`
/// when that entry is the same record (a resend: nothing changes), and
/// [`Error::JournalMismatch`] otherwise (`len` entries are stored).
pub fn place(id: crate::id::JobId, len: usize, at_place: Option<&Entry>, record: &Record) -> Result<bool> {
    match at_place {
        Some(entry) if entry.answers(record) => Ok(false),
        Some(entry) => Err(mismatch(id, record, Some(entry.describe()))),
        None if record.index as usize == len => Ok(true),
        None => Err(mismatch(id, record, None)),
    }
}

/// [`Error::JournalMismatch`] of `record` against what is stored.
pub fn mismatch(id: crate::id::JobId, record: &Record, recorded: Option<String>) -> Error {
    Error::JournalMismatch { id, index: record.index, asked: record.describe(), recorded }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_their_names() {
        for kind in EntryKind::ALL {
            assert_eq!(EntryKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(EntryKind::parse("other"), None);
    }

    #[test]
    fn each_limit_is_named() {
        let big = Payload::from_json(format!("\"{}\"", "x".repeat(MAX_STEP_RESULT_BYTES))).expect("json");
        let got = check_append(0, 0, &Record::step(0, "a", big));
        assert!(matches!(got, Err(Error::DurableLimit { limit: DurableLimit::StepResultBytes, .. })), "{got:?}");
        let small = Record::step(0, "a", Payload::of(&1).expect("json"));
        let got = check_append(MAX_STEPS, 0, &small);
        assert!(matches!(got, Err(Error::DurableLimit { limit: DurableLimit::Steps, .. })), "{got:?}");
        let got = check_append(1, MAX_JOURNAL_BYTES, &small);
        assert!(matches!(got, Err(Error::DurableLimit { limit: DurableLimit::JournalBytes, .. })), "{got:?}");
        assert!(check_append(MAX_STEPS - 1, MAX_JOURNAL_BYTES - small.bytes(), &small).is_ok());
        assert!(matches!(check_append(0, 0, &Record::patch(0, "")), Err(Error::InvalidInput { .. })));
    }
}
