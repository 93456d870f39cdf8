// Command swarm is a small multi-agent swarm driven through toolgate: three
// agents submit tool calls through the Go SDK, an executor hosts the tools,
// and an auto-approver stands in for a human on the tools the policy asks
// about. It ends with a summary of what became of every call.
//
//	go run ./cmd/toolgate serve --policy examples/swarm/policy.yaml
//	go run ./examples/swarm
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "swarm:", err)
		os.Exit(1)
	}
}

// agent is one member of the swarm and the calls it makes.
type agent struct {
	name  string
	calls func(i int) (tool string, args map[string]any)
}

var agents = []agent{
	{"researcher", func(i int) (string, map[string]any) {
		if i%2 == 0 {
			return "web_search", map[string]any{"query": fmt.Sprintf("nats jetstream kv cas #%d", i)}
		}
		return "summarize", map[string]any{"url": fmt.Sprintf("https://example.com/article/%d", i)}
	}},
	{"mailer", func(i int) (string, map[string]any) {
		to := "team@example.com"
		if i%3 == 2 {
			to = "someone@outside.test" // the approver rejects mail leaving the company
		}
		return "send_email", map[string]any{"to": to, "subject": fmt.Sprintf("Weekly report %d", i)}
	}},
	{"treasurer", func(i int) (string, map[string]any) {
		return "transfer_funds", map[string]any{"to": "acme", "amount": 40 * (i + 1), "currency": "EUR"}
	}},
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("swarm", flag.ContinueOnError)
	url := fs.String("nats", "nats://127.0.0.1:4222", "NATS URL of a running toolgate serve")
	data := fs.String("data", "toolgate-data", "data directory of that toolgate, where the credentials it issued are")
	perAgent := fs.Int("calls", 6, "calls per agent")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The agents and the executor share the admin's credential, which may
	// submit for any agent; the auto-approver decides with the approver's,
	// as whom the policy names.
	nc, c, err := connect(*url, filepath.Join(*data, "creds", "admin.creds"))
	if err != nil {
		return err
	}
	defer nc.Close()
	anc, approver, err := connect(*url, filepath.Join(*data, "creds", "approver.creds"))
	if err != nil {
		return err
	}
	defer anc.Close()
	conversation := fmt.Sprintf("swarm-%d", time.Now().UnixNano())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var background errgroup.Group
	defer background.Wait()
	defer cancel()

	// The executor hosts every tool of the swarm.
	x, err := c.NewExecutor(client.ExecutorOptions{ID: "swarm-executor", Lease: 10 * time.Second})
	if err != nil {
		return err
	}
	for _, tool := range []string{"web_search", "summarize", "send_email", "transfer_funds"} {
		x.Handle(tool, fakeTool)
	}
	background.Go(func() error { return ignoreCancel(x.Run(ctx)) })

	// The auto-approver decides the calls the policy asks about.
	sub, err := anc.Subscribe(wire.SubjectApprovalRequired, func(m *nats.Msg) { autoApprove(ctx, approver, conversation, m) })
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	// Events are not stored for a subscriber that is not yet there: the
	// subscription must be known to the server before the first call.
	if err := anc.Flush(); err != nil {
		return err
	}

	// The agents submit their calls at once and wait for each to finish.
	results := make(chan result)
	var agentsDone errgroup.Group
	for _, a := range agents {
		for i := range *perAgent {
			agentsDone.Go(func() error {
				tool, toolArgs := a.calls(i)
				data, _ := json.Marshal(toolArgs)
				start := time.Now()
				o, err := c.Request(ctx, machine.Call{
					ToolCallID: fmt.Sprintf("%s-%d", a.name, i), ToolName: tool, Arguments: data,
					CallerBotID: a.name, ConversationID: conversation, EstimatedCost: 0.01,
				}, client.UntilFinished())
				results <- result{agent: a.name, tool: tool, outcome: o, err: err, took: time.Since(start)}
				return nil
			})
		}
	}
	go func() { _ = agentsDone.Wait(); close(results) }()
	var all []result
	for r := range results {
		all = append(all, r)
	}
	return summarize(ctx, c, conversation, all, stdout)
}

// connect connects with a credential toolgate issued.
func connect(url, creds string) (*nats.Conn, *client.Client, error) {
	opts, err := client.Credentials(creds)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (run the swarm where toolgate serve runs, or give --data)", err)
	}
	nc, err := nats.Connect(url, append(opts, nats.Name("toolgate-swarm"))...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w (is `toolgate serve` running?)", url, err)
	}
	c, err := client.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

type result struct {
	agent, tool string
	outcome     client.Outcome
	err         error
	took        time.Duration
}

// fakeTool stands in for a real tool: a little work, then a result.
func fakeTool(ctx context.Context, call client.Call) (client.Result, error) {
	select {
	case <-ctx.Done():
		return client.Result{}, ctx.Err()
	case <-time.After(time.Duration(20+rand.IntN(60)) * time.Millisecond):
	}
	out, _ := json.Marshal(map[string]any{"tool": call.ToolName, "ok": true, "idempotencyKey": call.ToolCallID})
	return client.Result{Output: out, Cost: 0.01}, nil
}

// autoApprove decides like a careful human would: mail only inside the
// company, and transfers only up to 150.
func autoApprove(ctx context.Context, c *client.Client, conversation string, m *nats.Msg) {
	var ev wire.Event
	if json.Unmarshal(m.Data, &ev) != nil || ev.Entry.ConversationID != conversation {
		return
	}
	var args struct {
		To     string  `json:"to"`
		Amount float64 `json:"amount"`
	}
	_ = json.Unmarshal(ev.Entry.ToolArguments, &args)
	d := wire.DecideRequest{Approved: true, Reason: "within policy"}
	switch {
	case ev.Entry.ToolName == "send_email" && !strings.HasSuffix(args.To, "@example.com"):
		d = wire.DecideRequest{Reason: "mail to " + args.To + " leaves the company"}
	case ev.Entry.ToolName == "transfer_funds" && args.Amount > 150:
		d = wire.DecideRequest{Reason: fmt.Sprintf("%.0f EUR is over the 150 EUR limit", args.Amount)}
	}
	time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) // a human takes a moment
	d.PendingID = ev.Entry.PendingID
	if _, err := c.Decide(ctx, d); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "auto-approver:", err)
	}
}

// summarize prints what became of every call and fails if any did not end.
func summarize(ctx context.Context, c *client.Client, conversation string, all []result, w io.Writer) error {
	entries, err := c.List(ctx, wire.ListRequest{ConversationID: conversation})
	if err != nil {
		return err
	}
	byState := map[machine.State]int{}
	var decideTimes []time.Duration
	var unfinished []string
	for _, e := range entries {
		byState[e.Status]++
		if !e.Status.Terminal() {
			unfinished = append(unfinished, e.PendingID+" "+string(e.Status))
		}
		if e.DecisionTime > 0 && e.ApprovalTimeoutAt > 0 {
			decideTimes = append(decideTimes, time.Duration(e.DecisionTime-e.RequestedAt)*time.Millisecond)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "AGENT\tTOOL\tOUTCOME\tTOOK\n")
	sort.Slice(all, func(i, j int) bool { return all[i].agent+all[i].tool < all[j].agent+all[j].tool })
	for _, r := range all {
		outcome := string(r.outcome.Kind)
		var rej *client.RejectedError
		if errors.As(r.err, &rej) {
			outcome = string(rej.Kind) + ": " + rej.Reason
		} else if r.err != nil {
			outcome = "error: " + r.err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.agent, r.tool, outcome, r.took.Round(time.Millisecond))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d calls:", len(entries))
	states := make([]machine.State, 0, len(byState))
	for s := range byState {
		states = append(states, s)
	}
	slices.Sort(states)
	for _, s := range states {
		fmt.Fprintf(w, " %s %d", s, byState[s])
	}
	fmt.Fprintln(w)
	if len(decideTimes) > 0 {
		slices.Sort(decideTimes)
		var sum time.Duration
		for _, d := range decideTimes {
			sum += d
		}
		fmt.Fprintf(w, "time to decide: mean %s, p50 %s, max %s over %d asked calls\n",
			(sum / time.Duration(len(decideTimes))).Round(time.Millisecond), decideTimes[len(decideTimes)/2], decideTimes[len(decideTimes)-1], len(decideTimes))
	}
	if len(unfinished) > 0 {
		return fmt.Errorf("%d calls did not finish: %s", len(unfinished), strings.Join(unfinished, ", "))
	}
	fmt.Fprintln(w, "every call is terminal")
	return nil
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
