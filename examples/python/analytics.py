#!/usr/bin/env python3
"""An analytics subscriber in Python: running counts from toolgate's events.

It follows toolgate's event stream (GET /v1/events, resumed with
Last-Event-ID after a lost connection) and keeps, from the envelope alone
(docs/events.md):

- how many events of each type (`type`, the subject) it saw;
- per tool, how many calls ended in each outcome (the terminal state in
  `to`: COMPLETED_SUCCESS, REJECTED_BY_USER, …);
- per tool, the time to decide: from `entry.requestedAt` to
  `entry.decisionTime` of each approval or rejection, and who decided.

It reads an envelope only if its `v` (the schema version) is 1, and counts
each transition once: an envelope whose `id` it has already seen (a
replay) is dropped. A running line goes out as each call finishes or is
decided; at the end (after --max-events, --duration or Ctrl-C) a summary,
in JSON with --json. Any token that may read events will do (viewer,
approver or agent; an agent sees only its own calls).

    TOOLGATE_TOKEN=... python3 analytics.py --duration 60 --json
"""

import argparse
import json
import os
import queue
import signal
import sys
import threading
import time

import toolgate

PREFIX = "analytics"


def log(message):
    """Says message on stderr, with the program's name."""
    print("%s: %s" % (PREFIX, message), file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("TOOLGATE_URL", "http://127.0.0.1:8080"),
                   help="toolgate's HTTP API (env TOOLGATE_URL; default %(default)s)")
    p.add_argument("--token", default=os.environ.get("TOOLGATE_TOKEN"),
                   help="bearer token that may read events (env TOOLGATE_TOKEN)")
    p.add_argument("--since", default="0", metavar="EVENT_ID",
                   help="count events after this event id: 0 (the default) is all the stream holds, "
                        "'now' only what happens from now on")
    p.add_argument("--max-events", type=int, default=0, metavar="N",
                   help="stop after N events (0: no limit)")
    p.add_argument("--duration", type=float, default=0, metavar="SECONDS",
                   help="stop after this long (0: no limit)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON on stdout (the running lines go to stderr)")
    p.add_argument("--idle-timeout", type=float, default=toolgate.DEFAULT_IDLE_TIMEOUT,
                   help="seconds without a byte (toolgate sends one every 15 s) before reconnecting")
    return p.parse_args(argv)


class Timing:
    """Times to decide one tool's calls, in milliseconds."""

    def __init__(self):
        self.count = 0
        self.total = 0
        self.min = None
        self.max = None
        self.approved = 0
        self.rejected = 0

    def add(self, ms, approved):
        self.count += 1
        self.total += ms
        self.min = ms if self.min is None else min(self.min, ms)
        self.max = ms if self.max is None else max(self.max, ms)
        if approved:
            self.approved += 1
        else:
            self.rejected += 1

    def mean(self):
        return self.total / self.count if self.count else 0.0

    def as_dict(self):
        return {"count": self.count, "approved": self.approved, "rejected": self.rejected,
                "meanMs": round(self.mean(), 1), "minMs": self.min, "maxMs": self.max}


class Analytics:
    def __init__(self, running):
        self.running = running  # where the running lines go
        self.seen = toolgate.Seen()
        self.events = 0
        self.duplicates = 0
        self.skipped = {}  # why -> count
        self.last_event_id = None
        self.by_type = {}
        self.outcomes = {}  # tool -> terminal state -> calls
        self.decisions = {}  # tool -> Timing
        self.decided_by = {}  # actor -> decisions

    def add(self, ev):
        """Counts one server-sent event; returns whether it was new."""
        self.last_event_id = ev.id
        envelope = ev.envelope
        if envelope is None:
            why = ev.unreadable
            self.skipped[why] = self.skipped.get(why, 0) + 1
            if self.skipped[why] == 1:
                log("event %s skipped: %s" % (ev.id, why))
            return False
        if not self.seen.add(envelope.id):
            self.duplicates += 1
            return False
        self.events += 1
        kind, entry = envelope.type, envelope.entry
        tool = entry.tool_name or "?"
        self.by_type[kind] = self.by_type.get(kind, 0) + 1
        if kind in ("tool.approval_granted", "tool.approval_rejected"):
            approved = kind == "tool.approval_granted"
            decided = entry.decision_time or envelope.at
            ms = max(decided - (entry.requested_at or decided), 0)
            t = self.decisions.setdefault(tool, Timing())
            t.add(ms, approved)
            actor = envelope.actor or entry.approved_or_rejected_by_user_id or "?"
            self.decided_by[actor] = self.decided_by.get(actor, 0) + 1
            self.line("decided  %-16s %-8s in %6d ms by %s  (mean %.0f ms over %d)" % (
                tool, "approved" if approved else "rejected", ms, actor, t.mean(), t.count))
        to = envelope.to
        if to in toolgate.TERMINAL_STATES:
            per_tool = self.outcomes.setdefault(tool, {})
            per_tool[to] = per_tool.get(to, 0) + 1
            finished = sum(sum(o.values()) for o in self.outcomes.values())
            self.line("outcome  %-16s %-20s %4d  (%d calls finished, %d events)" % (
                tool, to, per_tool[to], finished, self.events))
        return True

    def line(self, text):
        print(text, file=self.running, flush=True)

    def summary(self):
        return {
            "events": self.events,
            "duplicates": self.duplicates,
            "skipped": dict(self.skipped),
            "lastEventId": self.last_event_id,
            "byType": dict(sorted(self.by_type.items())),
            "outcomes": {tool: dict(sorted(o.items())) for tool, o in sorted(self.outcomes.items())},
            "decisions": {tool: t.as_dict() for tool, t in sorted(self.decisions.items())},
            "decidedBy": dict(sorted(self.decided_by.items())),
        }


def print_text(s, out):
    skipped = sum(s["skipped"].values())
    print("%d events (%d duplicates dropped, %d skipped), up to event %s" % (
        s["events"], s["duplicates"], skipped, s["lastEventId"]), file=out)
    print("\n%-28s %6s" % ("event", "count"), file=out)
    for kind, n in s["byType"].items():
        print("%-28s %6d" % (kind, n), file=out)
    print("\n%-16s %-20s %6s" % ("tool", "outcome", "calls"), file=out)
    for tool, outcomes in s["outcomes"].items():
        for state, n in outcomes.items():
            print("%-16s %-20s %6d" % (tool, state, n), file=out)
    print("\n%-16s %9s %9s %9s %9s %9s %9s" % ("tool", "decided", "approved", "rejected", "mean ms", "min ms", "max ms"),
          file=out)
    for tool, d in s["decisions"].items():
        print("%-16s %9d %9d %9d %9.0f %9d %9d" % (
            tool, d["count"], d["approved"], d["rejected"], d["meanMs"], d["minMs"], d["maxMs"]), file=out)
    out.flush()


def read_events(client, since, idle_timeout, q):
    """Runs in a thread of its own, so the main one can stop at a deadline
    whatever the stream is doing."""
    try:
        for ev in toolgate.follow(client, since, idle_timeout, log=log):
            q.put(ev)
    except toolgate.FatalStreamError as err:
        q.put(err)


def main(argv):
    args = parse_args(argv)
    client = toolgate.Client(args.url, args.token)
    since = None if args.since == "now" else args.since
    analytics = Analytics(sys.stderr if args.json else sys.stdout)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    q = queue.Queue()
    threading.Thread(target=read_events, args=(client, since, args.idle_timeout, q), daemon=True).start()
    deadline = time.monotonic() + args.duration if args.duration > 0 else None
    status = 0
    try:
        while not args.max_events or analytics.events < args.max_events:
            timeout = None
            if deadline is not None:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
            try:
                item = q.get(timeout=timeout)
            except queue.Empty:
                break
            if isinstance(item, Exception):
                log(str(item))
                status = 1
                break
            analytics.add(item)
    except (KeyboardInterrupt, SystemExit):
        pass
    if args.json:
        json.dump(analytics.summary(), sys.stdout, indent=2)
        print(flush=True)
    else:
        print_text(analytics.summary(), sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
