// Package worker holds the loops toolgate's server runs beside its
// request API: the Timer, the owner of the deadlines that change a call
// (approval timeouts, reminders, escalations, the leases of last
// attempts, retention); the Notifier, which tells humans that a call
// waits for them; the Reviewer, which sends an asked call to the
// policy's automated reviewers; and the BudgetSettler, which settles in
// tool_budgets what each finished call cost. The Notifier, the Reviewer
// and the BudgetSettler are durable consumers (package consumer's
// runners, whose handlers take a consumer.Msg) of TOOL_EVENTS; the Timer
// follows the tool_calls bucket. Each is built over a bus.Conn, and none
// imports nats.go. All change a call only through the application layer
// (package gate), if at all.
//
// # How the Timer works
//
// The Timer follows the tool_calls bucket through a watch (the process's
// views.CallsFeed, WithFeed, or one of its own): every entry at start, then
// every revision, heartbeats' included. It keeps at most one deadline per
// open call (a call is in one state, and each state has at most one
// deadline) in a min-heap in memory (deadlines.go), and the finished
// calls apart, in a queue of retirements in the order they finished
// (retirements.go). A revision no newer than one it has seen changes
// nothing, so a watch that starts again after a failure, and repeats
// what it knows, is harmless. Both are rebuilt at every start, and a
// deadline that passed while no timer ran is due at once.
//
// When a deadline falls due the Timer acts on the entry as it is then,
// never on the revision that announced it: Expire (which reads the entry
// and checks the deadline inside its compare-and-set), or a read and then
// Remind, Escalate or AbandonLease (a lease lost on the call's last
// attempt; a scheduled start, and a lease lost with attempts left, are
// the request API's: it offers those calls to executors, views.WorkQueue).
// A finished call whose retention has passed is retired through
// gate.Timer.Retire (WithRetention). Any number of Timers may run: each
// acts on every deadline, and compare-and-set turns the second firing
// into a refused transition.
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
// They would also cost a stream write per deadline and per lease renewal,
// and nats.go 1.55's StreamConfig cannot yet
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
