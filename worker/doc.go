// Package worker holds the consumers toolgate runs itself rather than user
// code. The first is the Timer, the one owner of every deadline: approval
// timeouts (approvalTimeoutAt), scheduled starts (scheduledExecutionTime)
// and executor leases (lease.expiresAt).
//
// # How the Timer works
//
// The Timer keeps at most one deadline per entry (an entry is in one state,
// and each state has at most one deadline) in a min-heap in memory. It
// learns them from the relay's events on TOOL_EVENTS, each of which carries
// the entry as written, and, at start, from one read of the tool_calls
// bucket. It subscribes before that read, from a stream sequence, so that
// nothing written in between is missed; a revision no newer than one it
// has seen changes nothing, so the overlap is harmless. The heap is
// rebuilt at every start, and a deadline that passed while no timer ran is
// due at once.
//
// When a deadline falls due the Timer acts on the entry as it is then,
// never on the event that announced it: Expire (which reads the entry and
// checks the deadline inside its compare-and-set), or a read and then a
// work item on tool.work.<tool> with the relay's de-dup id for that
// revision (a scheduled start), or a requeue or AbandonLease (a lost
// lease). Heartbeats publish no event, so a lease deadline is where the
// Timer learns, by reading, that the lease was renewed, and moves on to
// the new expiry. Any number of Timers may run: each acts on every
// deadline, compare-and-set turns the second firing into a refused
// transition and Nats-Msg-Id de-duplication drops the second publish.
//
// # Why a heap and not JetStream message schedules
//
// nats-server 2.12 can fire a message at a time of our choosing (a
// Nats-Schedule "@at" header on a stream with AllowMsgSchedules), which
// would keep deadlines in the server across restarts. The heap needs no
// extra write per deadline and fires as soon as the deadline passes; the
// bucket is the source of truth anyway, and rebuilding from it is one read.
//
// The Timer's own limit is the store: each approval timeout is an Expire
// (two reads and one compare-and-set), and WithConcurrency of them run at
// once (default 32).
package worker
