package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/bus/relay"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/natsapi"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/metrics"
)

// role is one thing a toolgate process can run, and what running it
// needs from the process around it. Main asks the rows of the roles it
// runs (running's needs methods), never their names: what a role implies
// is said once, in its row.
type role struct {
	name string
	// evaluates: the role submits calls, which the policy decides. The
	// process then follows the grants, to match calls against them in
	// memory, and which calls the archive holds, to ask it whether a call
	// was retired only when it may hold it.
	evaluates bool
	// servesReport: the role serves the analytics report, which the
	// process then opens for it.
	servesReport bool
	// views are the views of tool_calls the role keeps in memory, fed by
	// the process's one watch of the bucket (deps.feed).
	views []callsView
	// readsEvents: the role reads TOOL_EVENTS through the process's one
	// reader of the stream (deps.events).
	readsEvents bool
	// servesRequests: the role serves the request API. A process with it
	// is serving once the API answers, so that nobody who waits for it
	// gets "no responders".
	servesRequests bool
	// check, when set, says what is wrong with the Config for the role,
	// naming the flag.
	check func(c Config) error
	// listen, when set, runs once the process has its deps, before it
	// starts anything, so that whoever waits for Main to be ready can use
	// what it opens; log is the process's.
	listen func(d *deps, log *slog.Logger) error
	// prepare, when set, runs before the views of tool_calls join the
	// feed and before any role runs.
	prepare func(d *deps, log *slog.Logger) error
	run     func(ctx context.Context, d *deps, log *slog.Logger) error
}

// prepareWait bounds what a role's prepare asks of NATS (creating a
// consumer): a process that cannot has it refused, and does not serve.
const prepareWait = 30 * time.Second

// roles are every role, in the order a process starts them. One explicit
// table, so that what a build can run, and what each role needs, is read
// in one place rather than gathered from init functions.
var roles = []role{
	{name: "relay", run: runRelay},
	{
		name: "intake", evaluates: true, servesReport: true, servesRequests: true,
		views:   []callsView{retiredView, indexView, workView},
		prepare: prepareIntake, run: runIntake,
	},
	{name: "timer", views: []callsView{deadlinesView, indexView}, run: runTimer},
	{name: "executor", run: runExecutor},
	{name: "notifier", prepare: prepareNotifier, run: runNotifier},
	{name: "reviewer", prepare: prepareReviewer, run: runReviewer},
	{name: "analytics", views: []callsView{pendingView}, readsEvents: true, run: runAnalytics},
	{
		name: "http", evaluates: true, servesReport: true, readsEvents: true,
		views: []callsView{retiredView, indexView},
		check: checkHTTP, listen: listenHTTP, run: runHTTP,
	},
}

// callsView is a view of tool_calls a process keeps in memory. The
// constants are in the order the views join the process's feed, which is
// the order the feed tells them that it has read the bucket.
type callsView int

const (
	// deadlinesView is the timer's deadlines, the first thing a restart
	// must know: first told that the bucket is read.
	deadlinesView callsView = iota
	// pendingView is the exporter's gauge of the calls waiting for a
	// human.
	pendingView
	// retiredView is which calls the archive holds.
	retiredView
	// indexView is the index of the calls: lists page through it, and a
	// transition starts from its revision of the call instead of reading
	// it first (at load, a timer reading before each Expire fired twice
	// as late: docs/performance.md).
	indexView
	// workView is the calls executors may claim through the request API.
	// After the index, so that a claim finds the entry it starts from
	// there.
	workView
	callsViews // how many views there are
)

// join builds v and adds it to d.feed; log is the process's.
func (v callsView) join(d *deps, log *slog.Logger) error {
	switch v {
	case deadlinesView:
		return buildRoleView(d, log, "timer", prepareTimer)
	case pendingView:
		return buildRoleView(d, log, "analytics", prepareAnalytics)
	case retiredView:
		d.feed.Add(d.gate.Runtime().RetiredView())
	case indexView:
		d.feed.Add(d.gate.Runtime().CallsView(log))
	case workView:
		d.feed.Add(d.gate.Runtime().WorkView())
	default:
		return fmt.Errorf("no view of tool_calls numbered %d", v)
	}
	return nil
}

// buildRoleView builds a view of tool_calls that the named role builds
// itself, with build, logging as the role and naming it in its error.
func buildRoleView(d *deps, log *slog.Logger, name string, build func(d *deps, log *slog.Logger) error) error {
	if err := build(d, log.With("role", name)); err != nil {
		return fmt.Errorf("role %s: %w", name, err)
	}
	return nil
}

// running is the rows of the roles a process runs, in the table's order.
type running []role

// names are the roles' names.
func (rs running) names() []string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.name
	}
	return names
}

// any says whether a role of rs has what f looks for.
func (rs running) any(f func(r role) bool) bool { return slices.ContainsFunc(rs, f) }

// needsEvaluation says whether a role submits calls (role.evaluates).
func (rs running) needsEvaluation() bool { return rs.any(func(r role) bool { return r.evaluates }) }

// needsReport says whether a role serves the analytics report.
func (rs running) needsReport() bool { return rs.any(func(r role) bool { return r.servesReport }) }

// needsView says whether a role keeps v.
func (rs running) needsView(v callsView) bool {
	return rs.any(func(r role) bool { return slices.Contains(r.views, v) })
}

// needsEvents says whether a role reads TOOL_EVENTS (role.readsEvents).
func (rs running) needsEvents() bool { return rs.any(func(r role) bool { return r.readsEvents }) }

// needsRequestAPI says whether a role serves the request API.
func (rs running) needsRequestAPI() bool {
	return rs.any(func(r role) bool { return r.servesRequests })
}

// RoleNames are the roles a toolgate process can run, each on its own or
// with any others, in any number of processes at once.
func RoleNames() []string { return running(roles).names() }

// Roles is the roles a process runs: "all", or any of RoleNames. It is a
// flag.Value, the value of --roles.
type Roles []string

// String implements flag.Value.
func (r *Roles) String() string { return strings.Join(*r, ",") }

// Set implements flag.Value: a comma-separated list.
func (r *Roles) Set(v string) error {
	*r = nil
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" && !slices.Contains(*r, name) {
			*r = append(*r, name)
		}
	}
	return r.Validate()
}

// Validate says what is wrong with r, if anything.
func (r Roles) Validate() error {
	if len(r) == 0 {
		return errors.New("no role given")
	}
	for _, name := range r {
		switch {
		case name == "all" && len(r) > 1:
			return errors.New(`"all" stands alone`)
		case name == "all":
		case !slices.Contains(RoleNames(), name):
			return fmt.Errorf("unknown role %q: want all, or any of %s", name, strings.Join(RoleNames(), ","))
		}
	}
	return nil
}

// Resolve lists the roles to run, in the table's order; none given means
// all.
func (r Roles) Resolve() []string { return r.rows().names() }

// rows are the table's rows of the roles to run, in its order; none given
// means all.
func (r Roles) rows() running {
	all := len(r) == 0 || r[0] == "all"
	var rows running
	for _, ro := range roles {
		if all || slices.Contains(r, ro.name) {
			rows = append(rows, ro)
		}
	}
	return rows
}

// runRelay publishes every revision's event with the call's secrets
// masked (the policy's redact patterns).
func runRelay(ctx context.Context, d *deps, log *slog.Logger) error {
	return relay.NewRelay(d.js, relay.RelayConfig{AckWait: d.cfg.RelayAckWait, Mask: d.gate.Runtime().MaskedOrNil}, log).Run(ctx)
}

// prepareIntake exports how many calls wait for an executor in the work
// queue the process keeps for the request API.
func prepareIntake(d *deps, _ *slog.Logger) error {
	return d.registry.Register(metrics.NewRunnableCalls(d.gate.Runtime().RunnableCalls))
}

// runIntake serves the request API, evaluating calls against the policy
// in force, and settles the budgets the policy reserves when the calls
// end.
func runIntake(ctx context.Context, d *deps, log *slog.Logger) error {
	svc := natsapi.New(d.gate, log)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	settled := make(chan error, 1)
	go func() {
		settled <- worker.NewBudgetSettler(d.conn, stores.NewBudgetLedger(d.js, d.buckets.Budgets), log).Run(ctx)
	}()
	// An executor withdraws its requests for work through any process
	// that serves them: hear of those made through the others.
	withdrawals := make(chan error, 1)
	go func() { withdrawals <- d.gate.Runtime().FollowWithdrawals(ctx) }()
	err := svc.Run(ctx, d.nc, d.version)
	cancel() // the service failed or stopped: stop settling too
	return errors.Join(err, <-settled, <-withdrawals)
}
