#!/usr/bin/env python3
"""DBOS peer of jq's bench `--only durable` (the "durable jobs" row).

What it measures: 1,000 DBOS workflows of 10 trivial steps each (every step
returns a number), run on one DBOS queue with worker_concurrency 16 (DBOS's
idiomatic way to run many workflows with bounded concurrency; jq's drain
pool has concurrency 16). steps/s = 10,000 / the wall time from the first
enqueue until the last workflow's SUCCESS status is in the database; the
median of --runs runs, each on a freshly created database (`peer_dbos` by
default: dropped and recreated, no other database is touched). As in jq's
scenario the enqueues are inside the timed window; DBOS has no batch enqueue,
so they are 1,000 calls (jq's is one batch).

What DBOS does per step (dbos 3.4.0, seen in its code and in the tables
after a run): one transaction that looks the step up in
dbos.operation_outputs (for replay), then the step, then one transaction
that locks the workflow's dbos.workflow_status row (SELECT ... FOR NO KEY
UPDATE, the owner check) and inserts the step's output (pickled) as one
dbos.operation_outputs row, committed before the workflow goes on; per
workflow it also writes the dbos.workflow_status row at enqueue, updates it
when dequeued (ENQUEUED -> PENDING) and at the end (SUCCESS, with the
output). The script checks after every run that 1,000 workflows are SUCCESS
and 10,000 step outputs are stored, and fails otherwise.

DBOS's queue is polled: each queue worker looks for work every
polling_interval_sec (DBOS's default 1.0 s), and starts at most the free
worker slots per poll. --polling-interval sets it (e.g. 0.01) to see DBOS
without that wait; the final line says which was used.

--variant sync (threads, DBOS's default) or async (async def workflow and
steps, run on DBOS's event loop).

Run: scripts/peers/dbos-bench.sh [--runs 3] [--variant sync|async]
     [--polling-interval 1.0] (it makes a venv under /tmp with dbos in it).
Each run is its own child process, so DBOS starts from nothing every time.
Needs PostgreSQL at 127.0.0.1:5432 (trust, user postgres).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

WORKFLOWS = 1_000
STEPS = 10
CONCURRENCY = 16
QUEUE = "bench"
HOST = "127.0.0.1:5432"


def admin_url(database: str) -> str:
    """A psycopg conninfo for `database` as the trust user postgres."""
    return f"postgresql://postgres@{HOST}/{database}"


def recreate_database(name: str) -> None:
    """Drop and create `name` (the only database this script touches)."""
    import psycopg

    with psycopg.connect(admin_url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def one_run(database: str, variant: str, polling: float) -> dict:
    """One timed run in this (fresh) process; its figures."""
    import asyncio

    import psycopg
    from dbos import DBOS, DBOSConfig

    recreate_database(database)
    finished = 0
    lock = threading.Lock()
    all_returned = threading.Event()

    def count_one() -> None:
        # Why a counter: waiting on 1,000 handles would poll each one; the
        # counter says when to start checking the database for the end.
        nonlocal finished
        with lock:
            finished += 1
            if finished == WORKFLOWS:
                all_returned.set()

    if variant == "sync":

        @DBOS.step()
        def step(i: int) -> int:
            return i

        @DBOS.workflow()
        def stepped(n: int) -> int:
            total = sum(step(i) for i in range(STEPS))
            assert total == sum(range(STEPS))
            count_one()
            return n

    else:

        @DBOS.step()
        async def step(i: int) -> int:
            return i

        @DBOS.workflow()
        async def stepped(n: int) -> int:
            total = 0
            for i in range(STEPS):
                total += await step(i)
            assert total == sum(range(STEPS))
            count_one()
            return n

    config: DBOSConfig = {
        "name": "peer-dbos-bench",
        "system_database_url": admin_url(database),
        "log_level": "WARNING",
        # One executor; worker_concurrency counts per executor.
        "executor_id": "bench-1",
    }
    DBOS(config=config)
    DBOS.launch()
    queue = DBOS.register_queue(
        QUEUE, worker_concurrency=CONCURRENCY, polling_interval_sec=polling
    )

    start = time.perf_counter()
    if variant == "sync":
        for n in range(WORKFLOWS):
            queue.enqueue(stepped, n)
    else:

        async def enqueue_all() -> None:
            for n in range(WORKFLOWS):
                await queue.enqueue_async(stepped, n)

        asyncio.run(enqueue_all())
    if not all_returned.wait(timeout=3600):
        raise SystemExit(f"only {finished} of {WORKFLOWS} workflows returned")
    # The end: every workflow's SUCCESS durable, as jq's end is every
    # outcome written.
    with psycopg.connect(admin_url(database), autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
            ).fetchone()
            if row is not None and row[0] >= WORKFLOWS:
                break
            time.sleep(0.002)
        elapsed = time.perf_counter() - start
        succeeded = conn.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
        ).fetchone()
        outputs = conn.execute(
            "SELECT count(*) FROM dbos.operation_outputs WHERE output IS NOT NULL"
        ).fetchone()
    DBOS.destroy()
    if succeeded is None or succeeded[0] != WORKFLOWS:
        raise SystemExit(f"{succeeded} workflows SUCCESS, expected {WORKFLOWS}")
    if outputs is None or outputs[0] != WORKFLOWS * STEPS:
        raise SystemExit(f"{outputs} step outputs stored, expected {WORKFLOWS * STEPS}")
    return {"rate": WORKFLOWS * STEPS / elapsed, "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variant", choices=["sync", "async"], default="sync")
    parser.add_argument(
        "--polling-interval",
        type=float,
        default=1.0,
        help="the queue's polling_interval_sec (DBOS's default 1.0)",
    )
    parser.add_argument("--database", default="peer_dbos")
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one_run:
        print(json.dumps(one_run(args.database, args.variant, args.polling_interval)))
        return

    rates = []
    for run in range(1, args.runs + 1):
        child = [
            sys.executable,
            __file__,
            "--one-run",
            "--variant",
            args.variant,
            "--polling-interval",
            str(args.polling_interval),
            "--database",
            args.database,
        ]
        out = subprocess.run(child, capture_output=True, text=True)
        if out.returncode != 0:
            sys.stderr.write(out.stderr)
            raise SystemExit(f"dbos run {run}/{args.runs} failed ({out.returncode})")
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        rates.append(figures["rate"])
        print(
            f"dbos run {run}/{args.runs}: {figures['rate']:.0f} steps/s "
            f"({figures['seconds']:.2f} s)",
            file=sys.stderr,
        )
    runs = ", ".join(f"{r:.0f}" for r in rates)
    print(
        f"dbos durable ({args.variant}, queue polling {args.polling_interval:g} s): "
        f"{STEPS}-step workflows, {WORKFLOWS} runs, concurrency {CONCURRENCY}: "
        f"median {statistics.median(rates):.0f} steps/s (runs: {runs})"
    )


if __name__ == "__main__":
    main()
