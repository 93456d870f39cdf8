// Package worker holds the consumers toolgate runs itself rather than user
// code: the Timer, the owner of the deadlines that change a call
// (approval timeouts, reminders, escalations, the leases of last
// attempts, retention), and the Notifier, which tells humans
// that a call waits for them.
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
// checks the deadline inside its compare-and-set), Remind, Escalate, or a
// read and then AbandonLease (a lease lost on the call's last attempt; a
// scheduled start, and a lease lost with attempts left, are the request
// API's: it offers those calls to executors, bus.WorkQueue). Heartbeats
// publish no event, so a lease deadline is where the Timer learns, by
// reading, that the lease was renewed, and moves on to the new expiry.
// Any number of Timers may run: each acts on every deadline, and
// compare-and-set turns the second firing into a refused transition.
//
// # Why a heap and not JetStream message schedules
//
// nats-server 2.12 can fire a message at a time of our choosing (a
// Nats-Schedule "@at" header on a stream with AllowMsgSchedules), which
// would keep deadlines in the server, across restarts, with no rebuild.
// Both were measured (timer_bench_test.go) on a 2-core VM, one embedded
// server, 10,000 deadlines spread evenly over 5 s (2,000 a second), three
// to six runs each while the machine was otherwise nearly idle (load
// average under 2):
//
//	heap (BenchmarkTimer): deadline to the Expire write committed
//	    p50 0.86-1.9 ms, p99 4.4-24 ms, max 11-47 ms
//	schedules (BenchmarkMsgSchedules): deadline to the fired message
//	    received, before any action is taken
//	    p50 144-159 ms, p99 269-330 ms, max 292-354 ms
//	restart (BenchmarkTimerRestart): read a 10,000-entry bucket, rebuild
//	    the heap and expire all 10,000 overdue calls: 2.1-4.1 s
//	    (2,500-4,800 expiries a second)
//	raw KV compare-and-set on the same server, for scale: 27,000-40,000/s
//
// With other test suites sharing the two cores the heap's p99 rose to
// 15-85 ms, and to seconds when the load average passed 6 and the server
// managed fewer than 2,000 expiries a second; schedules stayed where they
// were, since their lateness is not load.
//
// Schedules are late by design, not by load: the server runs its schedule
// timer at most every 250 ms (MsgScheduling.resetTimer), so deadlines fire
// in batches, and the lateness above is before the Timer has done anything.
// They would also cost a stream write per deadline and per lease renewal
// (a renewal publishes no event, so the timer would still find it only by
// reading at the old expiry), and nats.go 1.55's StreamConfig cannot yet
// ask for AllowMsgSchedules. Their one advantage, surviving a restart
// without a rebuild, is small: the bucket is the source of truth anyway,
// and rebuilding from it is one read. The heap's cost is memory (one small
// struct per entry with a deadline) and that read at start.
//
// The Timer's own limit is the store: each approval timeout is an Expire
// (two reads and one compare-and-set), and WithConcurrency of them run at
// once (default 64: 8 could not keep up with 2,000 a second here, 32 and
// 128 were within the noise of each other; 64 leaves room for a cluster,
// where every write waits for its replicas).
package worker
