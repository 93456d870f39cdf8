package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/wire"
)

// eventsCmd is `toolgate events`.
func eventsCmd(out cliOutput) *cliCmd {
	c := newCLICmd("events", "events [--follow] [--since SEQ|DURATION] [--type T,…] [--conversation C] [--tool T] [--json] [flags]",
		"Toolgate's events, one line a transition: its sequence, time, call, tool, what happened,\n"+
			"who and why. --since resumes after an event's sequence (the first column), or starts\n"+
			"a while ago (10m); --follow prints each transition as it happens.", out).connFlags().jsonFlag("each event as it is published, one JSON line each: {seq, subject, event}")
	var follow bool
	var since, conv, tool, types string
	c.fs.BoolVar(&follow, "follow", false, "keep printing events as they happen")
	c.fs.StringVar(&since, "since", "", "after this event's sequence, or from this long ago (10m, 2h); default: the last hour")
	c.fs.StringVar(&types, "type", "", "only events of these types, comma-separated (approval_required,approval_granted,…)")
	c.fs.StringVar(&conv, "conversation", "", "only this conversation's calls")
	c.fs.StringVar(&tool, "tool", "", "only this tool's calls")
	c.run = func(ctx context.Context, args []string) error {
		if _, err := c.parse(args, 0, 0, ""); err != nil {
			return err
		}
		r := wire.EventsRequest{ConversationID: conv, ToolName: tool, Limit: 500}
		if types != "" {
			r.Types = strings.Split(types, ",")
		}
		switch seq, err := strconv.ParseUint(since, 10, 64); {
		case since == "":
			r.SinceMs = time.Now().Add(-time.Hour).UnixMilli()
		case err == nil:
			r.After = seq
		default:
			d, err := time.ParseDuration(since)
			if err != nil || d <= 0 {
				return c.usagef("--since: want an event's sequence or a duration such as 10m, got %q", since)
			}
			r.SinceMs = time.Now().Add(-d).UnixMilli()
		}
		return c.withClient(ctx, func(ctx context.Context, cl *client.Client) error {
			for {
				page, err := cl.Events(ctx, r)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				for _, ev := range page.Events {
					if err := printEvent(out, c.json, ev); err != nil {
						return err
					}
				}
				if !follow && len(page.Events) == 0 {
					return nil
				}
				if page.Last > 0 {
					r.After, r.SinceMs = page.Last, 0
				}
				if follow {
					r.WaitMs = 10_000
				}
			}
		})
	}
	return c
}

// printEvent prints one event: a JSON line, or a line for people.
func printEvent(out cliOutput, asJSON bool, ev wire.StreamEvent) error {
	if asJSON {
		return json.NewEncoder(out.stdout).Encode(ev)
	}
	var e wire.Event
	if err := json.Unmarshal(ev.Event, &e); err != nil || e.Entry == nil {
		_, err := fmt.Fprintf(out.stdout, "%d  %s  (not a toolgate event)\n", ev.Seq, ev.Subject)
		return err
	}
	line := fmt.Sprintf("%d  %s  %s  %s  %s", ev.Seq, time.UnixMilli(e.At).UTC().Format(time.RFC3339), e.Entry.PendingID, e.Entry.ToolName,
		strings.TrimPrefix(ev.Subject, "tool."))
	if e.Actor != "" {
		line += "  by " + e.Actor
	}
	if e.Reason != "" {
		line += "  “" + e.Reason + "”"
	}
	_, err := fmt.Fprintln(out.stdout, line)
	return err
}
