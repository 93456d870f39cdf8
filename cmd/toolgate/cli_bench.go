package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/server"
)

// benchCmd is `toolgate bench`.
func benchCmd(out cliOutput) *cliCmd {
	c := newCLICmd("bench", "bench [--embedded [--roles ROLES] [--sync interval|always|both]] [--agents N] [--calls N] [--path approval|auto|both] [--cpuprofile FILE] [--json]",
		"Measure toolgate: lifecycles per second and their latencies, against the raw KV\n"+
			"compare-and-set rate of the same server measured in the same run (the ratio is the\n"+
			"figure comparable across machines). An approval lifecycle is an agent submitting a\n"+
			"call of "+bench.ApprovalTool+", an approver approving it, an executor running a handler that\n"+
			"does nothing and the agent getting the result; an auto-run one is the same for\n"+
			bench.AutoTool+", which the policy runs without asking. Each party holds its role's credential.\n\n"+
			"With --embedded, a toolgate of its own in a temporary directory, running the roles\n"+
			"--roles names (by default relay,intake,timer: what a lifecycle needs, the bench\n"+
			"hosting the executor; --roles all measures a whole serve, its http role on a free\n"+
			"port, its notifier, analytics and executor beside). Otherwise the\n"+
			"toolgate at --nats, whose --data holds the role credentials (run it where serve\n"+
			"runs), and whose policy must ask about "+bench.ApprovalTool+" and run "+bench.AutoTool+":\n\n"+
			"  "+strings.ReplaceAll(bench.Policy, "\n", "\n  "), out)
	c.connFlags()
	embedded := c.fs.Bool("embedded", false, "measure a toolgate of the bench's own, with its policy")
	agents := c.fs.Int("agents", 32, "agents submitting at once (and CAS writers)")
	calls := c.fs.Int("calls", 2000, "lifecycles a path")
	path := c.fs.String("path", "both", "approval, auto or both")
	roles := bench.LifecycleRoles()
	c.fs.Var(&roles, "roles", "with --embedded, the roles its toolgate runs: all, or a comma-separated list of "+strings.Join(server.RoleNames(), ","))
	servePID := c.fs.Int("serve-pid", 0, "process ID of a toolgate serve on this machine, whose CPU time to report per lifecycle")
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	syncMode := c.fs.String("sync", server.SyncInterval, "with --embedded, when its server's writes reach the disk: interval, always, or both (the bench twice, and the cost of always against interval)")
	cpuProfile := c.fs.String("cpuprofile", "", "write a CPU profile of the bench's process (with --embedded, toolgate's too) to this file, for go tool pprof")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		var paths []string
		switch *path {
		case "both":
			paths = []string{"approval", "auto"}
		case "approval", "auto":
			paths = []string{*path}
		default:
			return c.usagef("--path: approval, auto or both, got %q", *path)
		}
		if *agents < 1 || *calls < 1 {
			return c.usagef("--agents and --calls: at least 1")
		}
		// A running toolgate runs the roles it was started with: --roles is
		// for --embedded only (and TOOLGATE_ROLES, serve's, may be set).
		if need := bench.LifecycleRoles(); *embedded && slices.ContainsFunc(need, func(r string) bool { return !slices.Contains(roles.Resolve(), r) }) {
			return c.usagef("--roles: a lifecycle needs %s, got %s", strings.Join(need, ","), roles.String())
		}

		switch *syncMode {
		case server.SyncInterval, server.SyncAlways, "both":
		default:
			return c.usagef("--sync: interval, always or both, got %q", *syncMode)
		}
		syncs := []string{*syncMode}
		switch {
		case *syncMode == "both":
			syncs = []string{server.SyncInterval, server.SyncAlways}
		case !*embedded && *syncMode != server.SyncInterval:
			return c.usagef("--sync: with --embedded only (the servers at --nats sync as their own config says)")
		}

		var reports []*bench.Report
		for _, sync := range syncs {
			report, err := bench.Run(ctx, bench.Config{
				Agents: *agents, Calls: *calls, Paths: paths,
				Embedded: *embedded, Roles: roles, Sync: sync, Version: version,
				Conn: c.conn, Data: c.data, ServePID: *servePID,
			})
			if err != nil {
				return err
			}
			reports = append(reports, report)
		}
		if *asJSON {
			enc := json.NewEncoder(out.stdout)
			enc.SetIndent("", "  ")
			if len(reports) == 1 {
				return enc.Encode(reports[0])
			}
			return enc.Encode(reports)
		}
		for i, r := range reports {
			if i > 0 {
				fmt.Fprintln(out.stdout)
			}
			printBench(out.stdout, r)
		}
		if len(reports) == 2 {
			printSyncCost(out.stdout, reports[0], reports[1])
		}
		return nil
	}
	return c
}

// printBench writes a report as a table, and each path's steps.
func printBench(w io.Writer, r *bench.Report) {
	target := r.Target
	if r.Sync != "" {
		target += ", sync " + r.Sync
	}
	fmt.Fprintf(w, "toolgate bench: %s, %s, %s a path, %s, load %s\n\n", target, counted(r.Agents, "agent", "agents"),
		counted(r.Calls, "lifecycle", "lifecycles"), counted(r.Host.CPUs, "CPU", "CPUs"), r.Host.Load)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tPER SEC\tRATIO TO CAS\tSUBMIT→RESULT p50/p99\tDECISION→HANDLER p50/p99\tCPU/LIFECYCLE\tMESSAGES/LIFECYCLE\tCONSUMERS/LIFECYCLE")
	fmt.Fprintf(tw, "raw KV compare-and-set (R%d)\t%.0f\t1\t\t\t\t\t\n", r.CASReplicas, r.CASPerSec)
	for _, p := range r.Paths {
		dh, cpu, msgs := "", "", ""
		if p.DecideHandler != nil {
			dh = fmt.Sprintf("%.1f / %.1f ms", p.DecideHandler.P50, p.DecideHandler.P99)
		}
		if p.CPUMs > 0 {
			cpu = fmt.Sprintf("%.2f ms", p.CPUMs)
		}
		if p.Messages > 0 {
			msgs = fmt.Sprintf("%.0f", p.Messages)
		}
		fmt.Fprintf(tw, "%s lifecycles\t%.0f\t1/%.0f\t%.1f / %.1f ms\t%s\t%s\t%s\t%.2f\n", p.Name, p.PerSec, 1/p.Ratio, p.SubmitResult.P50, p.SubmitResult.P99, dh, cpu, msgs, p.Consumers)
	}
	tw.Flush()
	if r.CASReplicas > 1 && slices.ContainsFunc(r.Paths, func(p bench.Path) bool { return p.Messages > 0 }) {
		fmt.Fprintln(w, "\nmessages: every server's, so a message that crosses a route or is replicated counts on each, with the cluster's own traffic")
	}
	for _, p := range r.Paths {
		if len(p.Hops) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: decision→handler by step, p50 / p99 / max (the server's timestamps of what each stored)\n", p.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, h := range p.Hops {
			fmt.Fprintf(tw, "  %s\t%.2f / %.2f / %.1f ms\n", h.Name, h.P50, h.P99, h.Max)
		}
		tw.Flush()
	}
}

// printSyncCost says what syncing every write cost, always's figures
// against interval's, measured in the same run.
func printSyncCost(w io.Writer, interval, always *bench.Report) {
	fmt.Fprintln(w, "\nsync always against interval, in this run:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  raw KV compare-and-set\t%.2f× the rate\n", always.CASPerSec/interval.CASPerSec)
	for i, p := range always.Paths {
		q := interval.Paths[i]
		fmt.Fprintf(tw, "  %s lifecycles\t%.2f× the rate\tsubmit→result p50 %.2f×\n", p.Name, p.PerSec/q.PerSec, p.SubmitResult.P50/q.SubmitResult.P50)
	}
	tw.Flush()
}
