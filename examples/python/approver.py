#!/usr/bin/env python3
"""An approver in Python: decides every call toolgate asks about by a rule.

It follows toolgate's event stream (GET /v1/events) and answers each
`tool.approval_required` event with POST /v1/tool-calls/{id}/decision:
calls of the tools --approve names are approved, every other is rejected
with a reason. It decides as the identity of its bearer token, which needs
the approver role (--tokens-data 'TOKEN NAME approver').

At start it decides what is already waiting (GET
/v1/tool-calls?status=PENDING_APPROVAL), then follows the stream from the
position that list was read at, so no call slips between the two. A lost
connection is resumed with Last-Event-ID. A 409 means someone decided
first (another approver, a human in the inbox) or the deadline passed: it
says so and carries on.

Each decision is one line on stdout; connections on stderr.

    TOOLGATE_TOKEN=... python3 approver.py --approve 'web_*,send_email'
"""

import argparse
import fnmatch
import os
import signal
import sys
import time

import toolgate

PREFIX = "approver"


def log(message):
    """Says message on stderr, with the program's name."""
    print("%s: %s" % (PREFIX, message), file=sys.stderr, flush=True)

# Pauses between attempts at a decision toolgate did not answer.
RETRY_PAUSES = [0.2, 0.5, 1.0, 2.0]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("TOOLGATE_URL", "http://127.0.0.1:8080"),
                   help="toolgate's HTTP API (env TOOLGATE_URL; default %(default)s)")
    p.add_argument("--token", default=os.environ.get("TOOLGATE_TOKEN"),
                   help="bearer token with the approver role (env TOOLGATE_TOKEN)")
    p.add_argument("--approve", action="append", default=[], metavar="PATTERNS",
                   help="tool names to approve, comma-separated shell patterns (web_*); repeatable")
    p.add_argument("--reason", default="{tool} is not on approver.py's list",
                   help="the reason a rejection gives; {tool} is the tool's name (default: %(default)r)")
    p.add_argument("--since", metavar="EVENT_ID",
                   help="skip the pending list and follow the stream after this event id")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say on stderr which event it reads, each one")
    p.add_argument("--idle-timeout", type=float, default=toolgate.DEFAULT_IDLE_TIMEOUT,
                   help="seconds without a byte (toolgate sends one every 15 s) before reconnecting")
    args = p.parse_args(argv)
    args.patterns = [x.strip() for a in args.approve for x in a.split(",") if x.strip()]
    return args


class Approver:
    def __init__(self, client, patterns, reason, verbose=False):
        self.client = client
        self.verbose = verbose
        self.patterns = patterns
        self.reason = reason
        self.me = None  # the token's user, from GET /v1/me
        # A call is decided once by this process, though it may appear
        # both in the list at start and in the stream after it.
        self.decided = toolgate.Seen()
        self.events = toolgate.Seen()

    def rule(self, tool):
        """(approve, reason) for a call of tool."""
        for pattern in self.patterns:
            if fnmatch.fnmatchcase(tool, pattern):
                return True, "%s matches approver.py's list (%s)" % (tool, pattern)
        return False, self.reason.format(tool=tool)

    def consider(self, entry):
        pending_id, tool = entry.pending_id, entry.tool_name
        if not self.decided.add(pending_id):
            return
        approve, reason = self.rule(tool)
        verb = "approved" if approve else "rejected"
        # A decision toolgate did not answer (it restarts, a connection
        # drops) is sent again a few times. One whose answer was lost may
        # have landed: the next attempt's 409 then names this approver.
        for attempt, pause in enumerate(RETRY_PAUSES + [None]):
            try:
                self.client.decide(pending_id, approve, reason)
                say("%s %s (%s): %s" % (verb, pending_id, tool, reason))
                return
            except toolgate.APIError as err:
                if err.status < 500:
                    self.refused(err, pending_id, tool, verb, reason, attempt > 0)
                    return
                failure = err
            except toolgate.UnreachableError as err:
                failure = err
            if pause is not None:
                log("deciding %s: %s; again in %.1fs" % (pending_id, failure, pause))
                time.sleep(pause)
        # Still pending: a restart (its list of waiting calls) tries again.
        self.decided.discard(pending_id)
        log("deciding %s failed: %s" % (pending_id, failure))

    def refused(self, err, pending_id, tool, verb, reason, retried):
        now = err.entry
        by = (now.approved_or_rejected_by_user_id if now else "") or "?"
        if err.status == 409 and err.code == "expired":
            say("expired %s (%s): %s" % (pending_id, tool, err.message))
        elif err.status == 409 and retried and by == self.me:
            say("%s %s (%s): %s (an earlier attempt landed)" % (verb, pending_id, tool, reason))
        elif err.status == 409:
            say("already decided %s (%s): %s by %s" % (pending_id, tool, now.status if now else "?", by))
        else:
            # 403: the call's policy names other approvers; 404: gone.
            # Nothing this process can do about either.
            say("skipped %s (%s): %s" % (pending_id, tool, err))

    def on_event(self, ev):
        envelope = ev.envelope
        if self.verbose:
            log("event %s %s %s" % (ev.id, ev.type, envelope.id if envelope else None))
        if envelope is None:
            log("event %s skipped: %s" % (ev.id, ev.unreadable))
            return
        if envelope.type != "tool.approval_required" or not self.events.add(envelope.id):
            return
        self.consider(envelope.entry)


def say(line):
    print(line, flush=True)


def main(argv):
    args = parse_args(argv)
    if not args.patterns:
        log("no --approve patterns: every call asked about is rejected")
    client = toolgate.Client(args.url, args.token)
    approver = Approver(client, args.patterns, args.reason, args.verbose)
    # SIGTERM ends the process as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        approver.me = client.me().id
        log("deciding as %s" % approver.me)
        since = args.since
        if since is None:
            entries, since = client.pending()
            log("%d calls waiting at start" % len(entries))
            for entry in entries:
                approver.consider(entry)
        for ev in toolgate.follow(client, since, args.idle_timeout, log=log):
            approver.on_event(ev)
    except (toolgate.APIError, toolgate.UnreachableError) as err:
        log("%s: %s" % (args.url, err))
        return 1
    except toolgate.FatalStreamError as err:
        log(str(err))
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
