package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/analytics"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/wire"
)

// statsCmd is `toolgate stats`: it prints the analytics, what GET
// /v1/analytics serves, as tables.
func statsCmd(out cliOutput) *cliCmd {
	c := newCLICmd("stats", "stats [--json] [--hours N] [flags]",
		"Show the approval analytics kept by the analytics role: calls, approval and\n"+
			"timeout rates and time to decide per tool, team and approver; activity per\n"+
			"hour; recommended policy changes with their evidence; and the policy's rate\n"+
			"rules with the slots each team, conversation or caller holds now.", out).connFlags().jsonFlag("the report")
	hours := c.fs.Int("hours", analytics.DefaultSeriesHours, "hours of activity to show, ending now")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if *hours < 1 || *hours > analytics.MaxSeriesHours {
			return c.usagef("--hours: must be 1 to %d, got %d", analytics.MaxSeriesHours, *hours)
		}
		// The rate rules' counters come through the request API, which any
		// credential that may read them can use, so they are shown even when
		// the analytics cannot be; asked once: a toolgate that does not answer
		// leaves them out.
		return call(ctx, c, func(ctx context.Context, cl *client.Client) (statsReport, error) {
			rates, ratesErr := cl.RateLimits(ctx)
			rep, err := statsAnalytics(ctx, cl, *hours)
			if err != nil {
				if ratesErr == nil && !c.json {
					_ = printRateLimits(out.stdout, rates.Items, time.Now())
				}
				return statsReport{}, err
			}
			if ratesErr != nil {
				fmt.Fprintf(out.stderr, "toolgate stats: rate limits left out: %v\n", ratesErr)
			}
			return statsReport{Report: rep, RateLimits: rates.Items}, nil
		}, func(r statsReport) error {
			if err := printStats(out.stdout, r.Report); err != nil {
				return err
			}
			return printRateLimits(out.stdout, r.RateLimits, time.Now())
		}, client.WithUnavailableWait(0))
	}
	return c
}

// statsAnalytics asks toolgate for the analytics report, through the
// request API: a credential may read it without reading toolgate's
// buckets.
func statsAnalytics(ctx context.Context, cl *client.Client, hours int) (*analytics.Report, error) {
	data, err := cl.Analytics(ctx, hours)
	if err != nil {
		return nil, err
	}
	var rep analytics.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("analytics report: %w", err)
	}
	return &rep, nil
}

// statsReport is what stats --json prints: the analytics report, and the
// rate rules with their counters.
type statsReport struct {
	*analytics.Report
	RateLimits []wire.RateLimit `json:"rateLimits,omitempty"`
}

// printRateLimits writes the rate rules and the slots held in each window.
func printRateLimits(w io.Writer, items []wire.RateLimit, now time.Time) error {
	fmt.Fprintln(w, "\nRATE LIMITS")
	if len(items) == 0 {
		fmt.Fprintln(w, "(no rateLimits in the policy)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tLIMIT\tTHEN\tCOUNTS\tHELD\tNEXT FREED IN")
	for _, r := range items {
		limit := fmt.Sprintf("%d per %s", r.Max, r.Per)
		if len(r.Counters) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(r.Rule, 60), limit, r.Then, r.Scope, "-", "-")
		}
		for _, n := range r.Counters {
			who := string(r.Scope) + " " + statsName(n.Value)
			if r.Scope == "all" {
				who = "all calls"
			}
			in := time.UnixMilli(n.FreesAt).Sub(now).Round(time.Second)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d of %d\t%s\n", oneLine(r.Rule, 60), limit, r.Then, who, n.Count, r.Max, max(in, 0))
		}
	}
	return tw.Flush()
}

func statsConnect(c *cliCmd) (jetstream.JetStream, func(), error) {
	nc, _, err := c.connect(nil)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// analyticsRebuildCmd is `toolgate analytics rebuild`.
func analyticsRebuildCmd(out cliOutput) *cliCmd {
	c := newCLICmd("analytics rebuild", "analytics rebuild [flags]",
		"Re-derive every analytics aggregate from the start of TOOL_EVENTS (as far back as\n"+
			"the stream keeps events) into a new generation, and put it in force once it has\n"+
			"caught up. Running analytics roles go on meanwhile and switch to it; readers see\n"+
			"the old numbers until then.", out).connFlags()
	replicas := c.fs.Int("replicas", 1, "replicas of the analytics bucket, if it has to be created")
	timeout := c.fs.Duration("timeout", 10*time.Minute, "give up after this long")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		if *replicas < 1 || *replicas > 5 {
			return c.usagef("--replicas: must be 1 to 5, got %d", *replicas)
		}
		if *timeout <= 0 {
			return c.usagef("--timeout: must be positive, got %s", *timeout)
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		js, closeConn, err := statsConnect(c)
		if err != nil {
			return err
		}
		defer closeConn()
		events, err := js.Stream(ctx, wire.EventsStream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("no %s stream: is toolgate serving there?", wire.EventsStream)
		} else if err != nil {
			return err
		}
		// Bind the bucket as it is; create it only if there is none, so that a
		// cluster's replicas are never changed from here.
		kv, err := js.KeyValue(ctx, analytics.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = bus.ProvisionAnalytics(ctx, js, *replicas)
		}
		if err != nil {
			return fmt.Errorf("bind %s bucket: %w", analytics.Bucket, err)
		}
		start := time.Now()
		gen, err := analytics.New(bus.NewConn(js), stores.NewAnalyticsStore(js, kv), analytics.Config{}).Rebuild(ctx)
		if err != nil {
			return err
		}
		n := uint64(0)
		if info, err := events.Info(ctx); err == nil {
			n = info.State.Msgs
		}
		fmt.Fprintf(out.stdout, "analytics rebuilt from the %s in %s: generation %d in force (%s)\n",
			counted(n, "event", "events"), wire.EventsStream, gen, time.Since(start).Round(time.Millisecond))
		return nil
	}
	return c
}

// printStats writes a report as tables.
func printStats(w io.Writer, r *analytics.Report) error {
	fmt.Fprintf(w, "Analytics, generation %d", r.Generation)
	if r.Lag > 0 {
		fmt.Fprintf(w, " (catching up: %s not yet counted)", counted(r.Lag, "event", "events"))
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	statsCallTable(tw, "TOOL", append(r.Tools, r.Totals))
	fmt.Fprintln(tw)
	statsCallTable(tw, "TEAM", r.Teams)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "APPROVER\tDECISIONS\tAPPROVED\tREJECTED\tAPPROVAL\tRESPONSE MEAN\tP50\tP90\tMOST REJECTED")
	for _, a := range r.Approvers {
		var most []string
		for _, t := range a.MostRejectedTools {
			most = append(most, fmt.Sprintf("%s (%d)", t.Name, t.Count))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", statsName(a.Name), a.Decisions, a.Approved, a.Rejected,
			statsPercent(a.ApprovalRate, a.Decisions), statsMs(a.ResponseTime.MeanMs), statsMs(a.ResponseTime.P50Ms),
			statsMs(a.ResponseTime.P90Ms), strings.Join(most, ", "))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "HOUR (UTC)\tCALLS\tASKED\tDECISIONS\tAPPROVED\tREJECTED\tTIMED OUT\tRESPONSE MEAN\tP90")
	active := 0
	for _, p := range r.Series.Points {
		if p.Calls == 0 && p.Decisions == 0 && p.TimedOut == 0 {
			continue
		}
		active++
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", time.UnixMilli(p.T).UTC().Format("2006-01-02 15:04"),
			p.Calls, p.Asked, p.Decisions, p.Approved, p.Rejected, p.TimedOut, statsMs(p.MeanResponseMs), statsMs(p.P90ResponseMs))
	}
	if active == 0 {
		fmt.Fprintf(tw, "(nothing in the last %s)\n", counted(len(r.Series.Points), "hour", "hours"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nRECOMMENDATIONS")
	if len(r.Recommendations) == 0 {
		fmt.Fprintln(w, "(none)")
	}
	for i, rec := range r.Recommendations {
		fmt.Fprintf(w, "%d. [%s] %s\n", i+1, rec.Kind, rec.Summary)
		if rec.Rule != "" {
			fmt.Fprintf(w, "   rule: %s in %s\n", rec.Rule, rec.Scope)
		}
		if rec.Policy != "" {
			fmt.Fprintln(w, "   merge into the policy (toolgate policy get > p.yaml, edit, toolgate policy set p.yaml):")
			for _, line := range strings.Split(strings.TrimRight(rec.Policy, "\n"), "\n") {
				fmt.Fprintf(w, "     %s\n", line)
			}
		}
	}
	return nil
}

func statsCallTable(tw io.Writer, kind string, rows []analytics.ToolReport) {
	fmt.Fprintf(tw, "%s\tCALLS\tASKED\tAPPROVED\tREJECTED\tTIMED OUT\tAPPROVAL\tTIMEOUTS\tDECIDE MEAN\tP50\tP90\tFAILED\tCOST\tTOP REJECTION\n", kind)
	for _, t := range rows {
		topReason := ""
		if len(t.TopRejectionReasons) > 0 {
			topReason = fmt.Sprintf("%s (%d)", oneLine(t.TopRejectionReasons[0].Name, 40), t.TopRejectionReasons[0].Count)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", statsName(t.Name),
			t.Calls, t.Asked, t.Approved, t.Rejected, t.TimedOut+t.Overdue,
			statsPercent(t.ApprovalRate, t.Decided), statsPercent(t.TimeoutRate, t.Asked),
			statsMs(t.TimeToDecide.MeanMs), statsMs(t.TimeToDecide.P50Ms), statsMs(t.TimeToDecide.P90Ms),
			t.Failed, formatMoney(t.Cost), topReason)
	}
}

func statsName(s string) string {
	if s == "" {
		return "(none)"
	}
	return oneLine(s, 40)
}

// statsPercent shows a rate, or "-" when there was nothing to rate.
func statsPercent(f float64, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

// statsMs shows milliseconds as a short duration, or "-" for none.
func statsMs(ms float64) string {
	if ms <= 0 {
		return "-"
	}
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
