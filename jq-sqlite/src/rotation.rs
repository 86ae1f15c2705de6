//! The rotation of one queue's keyed jobs during one claim (the
//! contract's "Keyed jobs"): at each priority, from the cursor (the key
//! served last), the first eligible key after it in byte order, wrapping
//! around to the smallest key and last to the cursor's own; its head
//! (run_at, id) is the next job. A walk of `jobs_keyed_waiting` from
//! the cursor, a page of keys at a time (keys_page.sql): each
//! key's first row is its head, read whole (with the key's own limits
//! when the queue has such, keys_page_limits.sql), its later rows are
//! stepped over, a few per head at most, and the next page seeks past
//! the last key read. Nothing is kept per key between claims but its
//! limits and its start log; the cursors are one row per (queue,
//! priority).
//!
//! claim.rs asks [`Rotation::peek`] for the next job, merges it with the
//! plain jobs and the other queues' rotations, and when it takes it calls
//! [`Rotation::served`] and takes the row at once, so that a later page
//! no longer finds it. On the writer, inside the claim's transaction.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use jq_core::storage::{Limited, allowance, from_micros, held_by};
use jq_core::{Job, Priority, QueueLimits, QueueName, Result, State};
use rusqlite::types::ValueRef;
use rusqlite::{CachedStatement, Connection, OptionalExtension, params};

use crate::control;
use crate::counts::WorkflowKey;
use crate::error::db;
use crate::keyed::{self, DEFAULT_KEY};
use crate::row::{self, COLUMN_COUNT};

const PAGE: &str = include_str!("sql/keys_page.sql");
const PAGE_LIMITS: &str = include_str!("sql/keys_page_limits.sql");
const DEFAULTS: &str = include_str!("sql/keys_defaults.sql");
const RUNNING: &str = include_str!("sql/keys_running.sql");
const FORGET: &str = include_str!("sql/keys_forget.sql");
const STARTED: &str = include_str!("sql/keys_started.sql");
const START: &str = include_str!("sql/keys_start.sql");
const CURSOR_GET: &str = include_str!("sql/keys_cursor_get.sql");
const CURSOR_PUT: &str = include_str!("sql/keys_cursor_put.sql");

/// Where a page's row (keys_page.sql) holds what follows the job's columns.
const FLOW: usize = COLUMN_COUNT;
const SEQ: usize = COLUMN_COUNT + 1;
const WORKFLOW: usize = COLUMN_COUNT + 2;
/// Whether the key has limits of its own, then its concurrency,
/// rate_limit and rate_period.
const OVERRIDE: usize = COLUMN_COUNT + 3;
/// The key (row.rs's column order).
const KEY: usize = 21;
/// Rows a page reads at most per head it may keep: a key with many jobs
/// costs a page these steps over its rows, then the next page seeks past
/// it.
const ROWS_PER_HEAD: usize = 4;
/// Heads a page keeps at most, whatever the claim's size.
const MAX_HEADS: usize = 64;
/// The claim's maps of keys are made this large at most before they
/// fill: each key of a claim is hashed again at every doubling of a map
/// created empty.
const MAX_PRESIZED: usize = 256;

/// The heads read ahead at one priority: those of every key after `from`
/// (in byte order) up to the last one kept, or of every key after `from`
/// when `complete`. Valid for the rest of the claim: only the claim's own
/// takes change these rows, and it takes a key's head only once the
/// rotation has passed it (then `from` is that key).
struct Page {
    priority: Priority,
    from: Rc<str>,
    heads: VecDeque<Head>,
    complete: bool,
}

impl Page {
    /// Whether this page knows the first head after `after` at `priority`.
    fn covers(&self, priority: Priority, after: &str) -> bool {
        self.priority == priority
            && &*self.from <= after
            && (self.complete || self.heads.back().and_then(|h| h.key.as_deref()).is_some_and(|last| after < last))
    }
}

/// A rotation's next job: a key's head at a priority.
pub(crate) struct Head {
    pub(crate) priority: Priority,
    /// `None` when the stored key is not text (a corrupt row): served
    /// without limits nor cursor, and buried by its take. Shared (the
    /// page, the cursor and the key's load hold the same key), where each
    /// of them held a copy of its own.
    key: Option<Rc<str>>,
    pub(crate) seq: i64,
    pub(crate) id: [u8; 16],
    pub(crate) run_at: i64,
    /// Pending or Scheduled (for the counts of a workflow step).
    pub(crate) from: State,
    /// The row as the page read it (the job before its take, or why it
    /// does not decode) and its flow: a head taken is not read again.
    pub(crate) read: Option<(Result<Job>, Option<i64>)>,
    /// A step's workflow, read with the row.
    pub(crate) workflow: Option<WorkflowKey>,
    /// The key's own limits (an override), `None` without one: read with
    /// the row.
    limits: Option<QueueLimits>,
}

/// What a claim knows of one key: its limits, its Running jobs and its
/// starts in the window, counting what the claim took.
#[derive(Clone, Copy, Debug)]
struct Load {
    limits: QueueLimits,
    running: u64,
    started: u64,
    /// The oldest start in the window (when a full window has room
    /// again), read with `started`.
    oldest: Option<i64>,
}

/// One queue's rotation during one claim.
pub(crate) struct Rotation<'c> {
    queue: QueueName,
    /// The page statement, prepared at the first page and kept for the claim:
    /// looking a statement up in the cache hashes its text, which cost
    /// a seek about a third as much as the seek itself.
    next_stmt: Option<CachedStatement<'c>>,
    /// The heads read ahead (keys_page.sql reads a page of them in one
    /// statement, not one seek per key).
    page: Option<Page>,
    /// Jobs the claim may still take of this queue: a page keeps one head
    /// more (and one more per head skipped so far), up to [`MAX_HEADS`].
    /// *Pages of the claim's whole size left heads unused at its end,
    /// read and decoded: a sixth of the heads of the bench's keyed drain.*
    left: usize,
    /// Heads this claim met and could not take (held back, not due): a
    /// queue whose keys are busy gets larger pages, so fewer seeks.
    skipped: usize,
    /// The queue's default key limits, read when first needed.
    default: Option<QueueLimits>,
    /// Whether some key of the queue has limits of its own, read with
    /// the default at the first page (keys_defaults.sql): which page
    /// statement reads them.
    overrides: Option<bool>,
    /// The queue's Running keyed jobs per key, read when a key with a
    /// concurrency limit is first met (keys_running.sql).
    running: Option<HashMap<String, u64>>,
    /// Each key met so far (sized for the claim: see [`MAX_PRESIZED`]).
    loads: HashMap<Rc<str>, Load>,
    /// Per priority (index = stored value): `None` until read; then the
    /// cursor, `Some(None)` when there is none.
    cursors: [Option<Option<Rc<str>>>; 4],
    /// Per priority: the cursor moved in this claim (written at the end).
    moved: [bool; 4],
    /// Per priority: no eligible key is left in this claim. Within one
    /// claim a key only loses eligibility (its load grows, its jobs are
    /// taken), so a priority found empty stays empty.
    exhausted: [bool; 4],
    /// Per priority: the latest effective run_at yielded in this claim
    /// (the running maximum of the merge).
    yielded: [Option<i64>; 4],
    /// The next job, once looked for: `Some(None)` when there is none.
    next: Option<Option<Head>>,
    /// Starts of rate-limited keys taken in this claim, to record.
    starts: BTreeMap<String, i64>,
    /// What held back the keys passed over for their limits with a
    /// claimable job ([`Rotation::held`]).
    held: Option<Limited>,
    /// A take that changed nothing stops the rotation (never expected: the
    /// row was found in this transaction).
    stopped: bool,
}

/// The head a page's row `r` holds, at `priority`.
fn head(r: &rusqlite::Row<'_>, priority: Priority) -> rusqlite::Result<Head> {
    let key = match r.get_ref(KEY)? {
        ValueRef::Text(t) => std::str::from_utf8(t).ok().map(Rc::from),
        _ => None,
    };
    let mut id = [0u8; 16];
    if let ValueRef::Blob(b) = r.get_ref(0)? {
        let n = b.len().min(16);
        id[..n].copy_from_slice(&b[..n]);
    }
    let from = match r.get_ref(5)? {
        ValueRef::Text(b"scheduled") => State::Scheduled,
        _ => State::Pending,
    };
    // Lenient, as the plain walk: a corrupt row is buried by its take.
    // The integers are read as references (`get_ref`), which spares the
    // typed `get`'s conversion and error wrapping at every head.
    let int = |i: usize| r.get_ref(i).ok().and_then(|v| v.as_i64().ok());
    let limits = match int(OVERRIDE) {
        Some(n) if n != 0 => Some(control::limits(
            r.get(OVERRIDE + 1).ok().flatten(),
            r.get(OVERRIDE + 2).ok().flatten(),
            r.get(OVERRIDE + 3).ok().flatten(),
        )),
        _ => None,
    };
    Ok(Head {
        priority,
        key,
        seq: r.get(SEQ)?,
        id,
        run_at: int(8).unwrap_or(i64::MIN),
        from,
        read: Some((row::decode(r), int(FLOW))),
        workflow: r.get::<_, Option<WorkflowKey>>(WORKFLOW).ok().flatten(),
        limits,
    })
}

/// Queue `queue`'s Running keyed jobs per key (keys_running.sql, a row
/// per job): a key already counted is looked up by its bytes, so only a
/// key's first job allocates. `expected` sizes the map (about as many
/// keyed jobs run as a claim takes), so that it is not rehashed as it
/// grows. Out of line, as [`Rotation::read_page`], so that callgrind
/// counts the two reads apart.
#[inline(never)]
fn read_running(conn: &Connection, queue: &str, expected: usize) -> Result<HashMap<String, u64>> {
    let mut per_key: HashMap<String, u64> = HashMap::with_capacity(expected);
    let mut read = conn.prepare_cached(RUNNING).map_err(db)?;
    let mut rows = read.query(params![queue]).map_err(db)?;
    while let Some(r) = rows.next().map_err(db)? {
        // A key that is not text (a corrupt row) holds no slot of a real key.
        let ValueRef::Text(t) = r.get_ref(0).map_err(db)? else { continue };
        let Ok(key) = std::str::from_utf8(t) else { continue };
        match per_key.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                per_key.insert(key.to_owned(), 1);
            }
        }
    }
    Ok(per_key)
}

fn slot(priority: Priority) -> usize {
    usize::try_from(priority.as_i16()).unwrap_or(0).min(3)
}

impl<'c> Rotation<'c> {
    /// The rotation of `queue`, read lazily; `top` is the highest
    /// priority at which the queue holds a keyed job waiting (read with
    /// its control): those above are not looked at.
    pub(crate) fn new(queue: &QueueName, top: Priority, want: usize) -> Self {
        let mut exhausted = [false; 4];
        for priority in Priority::ALL.into_iter().filter(|p| p.as_i16() > top.as_i16()) {
            exhausted[slot(priority)] = true;
        }
        Rotation {
            queue: queue.clone(),
            next_stmt: None,
            page: None,
            left: want,
            skipped: 0,
            default: None,
            overrides: None,
            running: None,
            loads: HashMap::with_capacity(want.min(MAX_PRESIZED)),
            cursors: Default::default(),
            moved: [false; 4],
            exhausted,
            yielded: [None; 4],
            next: None,
            starts: BTreeMap::new(),
            held: None,
            stopped: false,
        }
    }

    /// The next job and its effective run_at (the latest run_at this
    /// rotation yielded at its priority in this claim, or its own).
    pub(crate) fn peek(&mut self, conn: &'c Connection, now_us: i64) -> Result<Option<(&Head, i64)>> {
        if self.stopped {
            return Ok(None);
        }
        if self.next.is_none() {
            let found = self.find(conn, now_us)?;
            self.next = Some(found);
        }
        let yielded = &self.yielded;
        Ok(self.next.as_ref().and_then(Option::as_ref).map(|head| {
            let run_at = yielded[slot(head.priority)].map_or(head.run_at, |y| y.max(head.run_at));
            (head, run_at)
        }))
    }

    /// The job [`Rotation::peek`] answered is served: its key takes the
    /// cursor and one more slot and start. Returns it; the caller takes it
    /// now, before the next peek.
    pub(crate) fn served(&mut self) -> Option<Head> {
        let head = self.next.take().flatten()?;
        self.left = self.left.saturating_sub(1);
        let p = slot(head.priority);
        let run_at = self.yielded[p].map_or(head.run_at, |y| y.max(head.run_at));
        self.yielded[p] = Some(run_at);
        if let Some(key) = &head.key {
            self.cursors[p] = Some(Some(Rc::clone(key)));
            self.moved[p] = true;
            if let Some(load) = self.loads.get_mut(key) {
                load.running += 1;
                if load.limits.rate.is_some() {
                    load.started += 1;
                    *self.starts.entry(key.to_string()).or_default() += 1;
                }
            }
        }
        Some(head)
    }

    /// The last served job's take changed nothing: this rotation gives no
    /// more jobs in this claim (it would find the same row again).
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
        self.next = Some(None);
    }

    /// What held back the keys this rotation passed over for their limits
    /// while they had a claimable job, `None` when it passed over none.
    pub(crate) fn held(&self) -> Option<Limited> {
        self.held
    }

    /// Writes the moved cursors and the rate-limited keys' starts at
    /// `now_us`.
    pub(crate) fn finish(self, conn: &Connection, now_us: i64) -> Result<()> {
        let queue = self.queue.as_str();
        for priority in Priority::ALL {
            let p = slot(priority);
            if let (true, Some(Some(key))) = (self.moved[p], &self.cursors[p]) {
                conn.prepare_cached(CURSOR_PUT)
                    .map_err(db)?
                    .execute(params![queue, priority.as_i16(), &**key])
                    .map_err(db)?;
            }
        }
        for (key, n) in &self.starts {
            conn.prepare_cached(START).map_err(db)?.execute(params![queue, key, now_us, n]).map_err(db)?;
        }
        Ok(())
    }

    /// The next job: from the highest priority with an eligible key, the
    /// first such key after the cursor (wrapping around), its head.
    fn find(&mut self, conn: &'c Connection, now_us: i64) -> Result<Option<Head>> {
        for priority in Priority::ALL.iter().rev().copied() {
            let p = slot(priority);
            if self.exhausted[p] {
                continue;
            }
            let cursor = self.cursor(conn, priority)?;
            // '' is before every key (a key is never empty). With no
            // cursor, the first pass covers every key.
            let mut after: Rc<str> = cursor.clone().unwrap_or_else(|| Rc::from(""));
            let mut wrapped = cursor.is_none();
            loop {
                let Some(head) = self.next_head(conn, priority, &after)? else {
                    if wrapped {
                        break;
                    }
                    wrapped = true;
                    after = Rc::from("");
                    continue;
                };
                let Some(key) = head.key.as_ref().map(Rc::clone) else {
                    // Not text: take it, so that it is buried.
                    return Ok(Some(head));
                };
                if wrapped && cursor.as_ref().is_some_and(|c| key > *c) {
                    break;
                }
                // Claimable: Pending, or Scheduled and due (a Pending
                // job's run_at is never after now, unless a clock went
                // back).
                let claimable = head.from == State::Pending || head.run_at <= now_us;
                if claimable {
                    if self.eligible(conn, &key, head.limits, now_us)? {
                        return Ok(Some(head));
                    }
                    // Held back by its limits: a short claim says so.
                    let held = self.loads.get(&key).and_then(|l| {
                        held_by(&l.limits, l.running, l.started, l.oldest.or(Some(now_us)).map(from_micros))
                    });
                    self.held = Limited::merge(self.held, held);
                }
                self.skipped += 1;
                after = key;
            }
            self.exhausted[p] = true;
        }
        Ok(None)
    }

    /// The first keyed job at `priority` whose key is after `after`: from
    /// the page read ahead when it knows it, else from a new page. The head
    /// is handed over (the page keeps the heads after it).
    fn next_head(&mut self, conn: &'c Connection, priority: Priority, after: &str) -> Result<Option<Head>> {
        if !self.page.as_ref().is_some_and(|page| page.covers(priority, after)) {
            self.page = Some(self.read_page(conn, priority, after)?);
        }
        let Some(page) = self.page.as_mut() else { return Ok(None) };
        while let Some(Head { key: Some(key), .. }) = page.heads.front() {
            if &**key > after {
                break;
            }
            page.from = Rc::clone(key);
            page.heads.pop_front();
        }
        let head = page.heads.pop_front();
        if let Some(Head { key: Some(key), .. }) = &head {
            page.from = Rc::clone(key);
        }
        Ok(head)
    }

    /// Reads the heads of the keys after `after` at `priority`, at most
    /// one more than the claim may still take and has skipped (up to
    /// [`MAX_HEADS`]), stepping over each key's later jobs (not decoded)
    /// for at most [`ROWS_PER_HEAD`] rows per head. Out of line: see
    /// [`read_running`].
    #[inline(never)]
    fn read_page(&mut self, conn: &'c Connection, priority: Priority, after: &str) -> Result<Page> {
        let overrides = match self.overrides {
            Some(overrides) => overrides,
            None => {
                let (default, overrides) = conn
                    .prepare_cached(DEFAULTS)
                    .map_err(db)?
                    .query_row(params![self.queue.as_str()], |r| {
                        Ok((control::limits(r.get(0)?, r.get(1)?, r.get(2)?), r.get::<_, bool>(3)?))
                    })
                    .map_err(db)?;
                self.default = Some(default);
                self.overrides = Some(overrides);
                overrides
            }
        };
        let stmt = match &mut self.next_stmt {
            Some(stmt) => stmt,
            None => self.next_stmt.insert(conn.prepare_cached(if overrides { PAGE_LIMITS } else { PAGE }).map_err(db)?),
        };
        let mut rows = stmt.query(params![self.queue.as_str(), priority.as_i16(), after]).map_err(db)?;
        let wanted = self.left.saturating_add(1).saturating_add(self.skipped).min(MAX_HEADS);
        let budget = wanted * ROWS_PER_HEAD;
        let mut heads: VecDeque<Head> = VecDeque::with_capacity(wanted);
        let (mut complete, mut read) = (true, 0);
        while let Some(r) = rows.next().map_err(db)? {
            read += 1;
            let same = match (r.get_ref(KEY).map_err(db)?, heads.back()) {
                (ValueRef::Text(t), Some(Head { key: Some(last), .. })) => t == last.as_bytes(),
                _ => false,
            };
            if !same {
                heads.push_back(head(r, priority).map_err(db)?);
            }
            if heads.len() >= wanted || read >= budget {
                complete = false;
                break;
            }
        }
        Ok(Page { priority, from: Rc::from(after), heads, complete })
    }

    /// Whether `key`'s limits allow one more job, counting this claim's;
    /// `own` is its override as its head's page read it.
    fn eligible(&mut self, conn: &Connection, key: &Rc<str>, own: Option<QueueLimits>, now_us: i64) -> Result<bool> {
        let load = match self.loads.get(key) {
            Some(load) => *load,
            None => {
                let load = self.load(conn, key, own, now_us)?;
                self.loads.insert(Rc::clone(key), load);
                load
            }
        };
        Ok(allowance(false, &load.limits, load.running, load.started, 1) > 0)
    }

    /// `key`'s limits (its override `own`, else the default, read once per
    /// claim) and, for those it has, its Running jobs and its starts in the
    /// window.
    fn load(&mut self, conn: &Connection, key: &str, own: Option<QueueLimits>, now_us: i64) -> Result<Load> {
        let queue = self.queue.as_str();
        let limits = match own {
            Some(limits) => limits,
            None => match self.default {
                Some(limits) => limits,
                None => {
                    let limits = keyed::stored(conn, queue, DEFAULT_KEY)?.unwrap_or_default();
                    self.default = Some(limits);
                    limits
                }
            },
        };
        let running: i64 = match limits.concurrency {
            Some(_) => {
                if self.running.is_none() {
                    self.running = Some(read_running(conn, queue, self.left.min(MAX_PRESIZED))?);
                }
                self.running.as_ref().and_then(|m| m.get(key)).map_or(0, |n| i64::try_from(*n).unwrap_or(i64::MAX))
            }
            None => 0,
        };
        let (started, oldest): (i64, Option<i64>) = match limits.rate {
            Some(rate) => {
                let after = rate.window_after(from_micros(now_us)).timestamp_micros();
                conn.prepare_cached(FORGET).map_err(db)?.execute(params![queue, key, after]).map_err(db)?;
                conn.prepare_cached(STARTED)
                    .map_err(db)?
                    .query_row(params![queue, key, after], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(db)?
            }
            None => (0, None),
        };
        Ok(Load { limits, running: running.max(0) as u64, started: started.max(0) as u64, oldest })
    }

    /// The cursor at `priority`, read once per claim.
    fn cursor(&mut self, conn: &Connection, priority: Priority) -> Result<Option<Rc<str>>> {
        let p = slot(priority);
        if let Some(cursor) = &self.cursors[p] {
            return Ok(cursor.clone());
        }
        let cursor: Option<String> = conn
            .prepare_cached(CURSOR_GET)
            .map_err(db)?
            .query_row(params![self.queue.as_str(), priority.as_i16()], |r| r.get(0))
            .optional()
            .map_err(db)?;
        let cursor: Option<Rc<str>> = cursor.map(Rc::from);
        self.cursors[p] = Some(cursor.clone());
        Ok(cursor)
    }
}
