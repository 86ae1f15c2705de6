#!/usr/bin/env python3
"""A producer in Python (standard library only) handing jobs to jq's Rust
workers through the HTTP API (docs/http-api.md).

    python3 examples/python/producer.py --url http://127.0.0.1:8080 --jobs 10

It enqueues one job alone and the rest in one batch (all or none), each
with an id chosen here, so that a request resent after a lost answer
stores nothing twice; then it waits for every job to finish and prints a
JSON summary. The token, when the server wants one, comes from JQ_API_TOKEN.
Exits 1 when a job did not complete.
"""

import argparse
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
import uuid


class ApiError(Exception):
    """A 4xx or 5xx answer: its status and JSON error body."""

    def __init__(self, status, body):
        super().__init__(f"{status}: {body.get('message')} (field: {body.get('field')})")
        self.status = status
        self.body = body


def uuid7():
    """A UUIDv7 (time-ordered, like the ids jq makes)."""
    ms = time.time_ns() // 1_000_000
    value = (ms & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


class Jobs:
    """The few calls a producer needs."""

    def __init__(self, url, token=None, attempts=3):
        self.url = url.rstrip("/") + "/api/v1"
        self.token = token
        self.attempts = attempts

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in range(1, self.attempts + 1):
            request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return json.load(response)
            except urllib.error.HTTPError as error:
                raise ApiError(error.code, json.load(error)) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                # The answer was lost: resending is safe, the ids are ours.
                if attempt == self.attempts:
                    raise
                time.sleep(0.2 * attempt)
        raise AssertionError("unreachable")

    def enqueue(self, kind, payload, **options):
        """Stores one job; returns its id."""
        job = {"kind": kind, "payload": payload, "id": uuid7(), **options}
        return self.call("POST", "/jobs", job)["id"]

    def enqueue_batch(self, jobs):
        """Stores every job or none; returns their ids in order."""
        jobs = [{"id": uuid7(), **job} for job in jobs]
        return self.call("POST", "/jobs/batch", {"jobs": jobs})["ids"]

    def wait(self, job_id, timeout_ms=10_000):
        """The job once finished, or as it is at the timeout."""
        return self.call("GET", f"/jobs/{job_id}/wait?timeout_ms={timeout_ms}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds to wait for the jobs")
    args = parser.parse_args()
    api = Jobs(args.url, os.environ.get("JQ_API_TOKEN"))

    first = api.enqueue("thumbnail", {"image": "cat-0.png", "width": 64}, queue="images", priority="high")
    rest = api.enqueue_batch(
        [{"kind": "thumbnail", "payload": {"image": f"cat-{i}.png", "width": 64}, "queue": "images"}
         for i in range(1, args.jobs)]
    )
    try:
        api.enqueue("thumbnail", {"image": "x.png", "width": 64}, queue="not a queue")
        refused = None
    except ApiError as error:
        refused = {"status": error.status, "field": error.body.get("field")}

    deadline = time.monotonic() + args.deadline
    states = {}
    for job_id in [first, *rest]:
        while True:
            left = int(max(0.0, deadline - time.monotonic()) * 1000)
            answer = api.wait(job_id, timeout_ms=min(left, 10_000))
            if answer["finished"] or left == 0:
                states[job_id] = answer["job"]["state"]
                break
    print(json.dumps({"ids": [first, *rest], "states": states, "refused": refused}))
    return 0 if all(state == "completed" for state in states.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
