package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/natsapi"
	"github.com/toolgate/toolgate/worker"
)

// knownRoles are the roles a toolgate process can run, each on its own or
// with any others, in any number of processes at once.
var knownRoles = []string{"relay", "intake", "timer", "executor", "notifier", "analytics", "http"}

// roles are the roles this build runs: `--roles all` starts every one.
var roles = map[string]func(ctx context.Context, d *deps, log *slog.Logger) error{
	"relay":  runRelay,
	"intake": runIntake,
	"timer":  runTimer,
	"http":   runHTTP,
}

// roleList is the value of --roles.
type roleList []string

func (r *roleList) String() string { return strings.Join(*r, ",") }

func (r *roleList) Set(v string) error {
	*r = nil
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" && !slices.Contains(*r, name) {
			*r = append(*r, name)
		}
	}
	return r.validate()
}

func (r roleList) validate() error {
	if len(r) == 0 {
		return errors.New("no role given")
	}
	for _, name := range r {
		switch {
		case name == "all" && len(r) > 1:
			return errors.New(`"all" stands alone`)
		case name == "all":
		case !slices.Contains(knownRoles, name):
			return fmt.Errorf("unknown role %q: want all, or any of %s", name, strings.Join(knownRoles, ","))
		case roles[name] == nil:
			return fmt.Errorf("role %q is not in this build yet", name)
		}
	}
	return nil
}

// resolve lists the roles to run, in the order of knownRoles; none given
// means all.
func (r roleList) resolve() []string {
	all := len(r) == 0 || r[0] == "all"
	var names []string
	for _, name := range knownRoles {
		if roles[name] != nil && (all || slices.Contains(r, name)) {
			names = append(names, name)
		}
	}
	return names
}

func runRelay(ctx context.Context, d *deps, log *slog.Logger) error {
	return bus.NewRelay(d.js, bus.RelayConfig{AckWait: d.cfg.RelayAckWait}, log).Run(ctx)
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
		settled <- worker.NewBudgetSettler(d.js, bus.NewBudgetLedger(d.buckets.Budgets), log).Run(ctx)
	}()
	err := svc.Run(ctx, d.nc, version)
	cancel() // the service failed or stopped: stop following and settling too
	return errors.Join(err, <-errc, <-settled)
}
