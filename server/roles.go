package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/natsapi"
	"github.com/toolgate/toolgate/worker"
)

// role is one thing a toolgate process can run.
type role struct {
	name string
	run  func(ctx context.Context, d *deps, log *slog.Logger) error
	// prepare, when set, runs before any role runs: it builds what the
	// role keeps a view of tool_calls with, on d.feed.
	prepare func(d *deps, log *slog.Logger) error
}

// roles are every role, in the order a process starts them. One explicit
// table, so that what a build can run is read in one place rather than
// gathered from init functions.
var roles = []role{
	{"relay", runRelay, nil},
	{"intake", runIntake, prepareIntake},
	{"timer", runTimer, prepareTimer},
	{"executor", runExecutor, nil},
	{"notifier", runNotifier, nil},
	{"analytics", runAnalytics, prepareAnalytics},
	{"http", runHTTP, nil},
}

// RoleNames are the roles a toolgate process can run, each on its own or
// with any others, in any number of processes at once.
func RoleNames() []string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = r.name
	}
	return names
}

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
func (r Roles) Resolve() []string {
	all := len(r) == 0 || r[0] == "all"
	var names []string
	for _, ro := range roles {
		if all || slices.Contains(r, ro.name) {
			names = append(names, ro.name)
		}
	}
	return names
}

// runRelay publishes every revision's event with the call's secrets
// masked (the policy's redact patterns, which the intake role keeps
// current; in a process without intake the relay follows the stored
// policy itself).
func runRelay(ctx context.Context, d *deps, log *slog.Logger) error {
	relay := bus.NewRelay(d.js, bus.RelayConfig{AckWait: d.cfg.RelayAckWait, Mask: d.gate.MaskedOrNil}, log)
	if slices.Contains(d.roles, "intake") {
		return relay.Run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan error, 1)
	go func() { followed <- d.policies.Follow(ctx, d.engine, log) }()
	err := relay.Run(ctx)
	cancel()
	return errors.Join(err, <-followed)
}

// prepareIntake exports how many calls wait for an executor in the work
// queue the process keeps for the request API.
func prepareIntake(d *deps, _ *slog.Logger) error {
	return d.registry.Register(metrics.NewRunnableCalls(d.gate.RunnableCalls))
}

// runIntake serves the request API, evaluating calls against the policy
// kept in KV, and settles the budgets the policy reserves when the calls
// end.
func runIntake(ctx context.Context, d *deps, log *slog.Logger) error {
	svc := natsapi.New(d.gate, log)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- d.policies.Follow(ctx, d.engine, log) }()
	settled := make(chan error, 1)
	go func() {
		settled <- worker.NewBudgetSettler(d.js, bus.NewBudgetLedger(d.js, d.buckets.Budgets), log).Run(ctx)
	}()
	// An executor withdraws its requests for work through any process
	// that serves them: hear of those made through the others.
	withdrawals := make(chan error, 1)
	go func() { withdrawals <- d.gate.FollowWithdrawals(ctx) }()
	err := svc.Run(ctx, d.nc, d.version)
	cancel() // the service failed or stopped: stop following and settling too
	return errors.Join(err, <-errc, <-settled, <-withdrawals)
}
