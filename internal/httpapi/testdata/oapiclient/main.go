// Command oapiclient drives toolgate through the client oapi-codegen
// generates from api/openapi.json (client.gen.go, made by the test
// TestOpenAPI_GeneratedClientWorks; go.mod pins oapi-codegen and its
// runtime). It lists a conversation's calls, approves the first, reads its
// history and a call that is not there, and prints what it saw as JSON.
//
// The int64 variables below are the point: they compile only while the
// document says format int64 for epoch milliseconds and sequences.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
)

func main() {
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Seen is what the program prints.
type Seen struct {
	RequestedAt  int64  `json:"requestedAt"`
	EventsSeq    int64  `json:"eventsSeq"`
	DecisionTime int64  `json:"decisionTime"`
	Status       string `json:"status"`
	DecidedBy    string `json:"decidedBy"`
	HistoryAt    int64  `json:"historyAt"`
	Revision     int64  `json:"revision"`
	NotFound     string `json:"notFound"`
}

func run(server, token, conversation string) error {
	ctx := context.Background()
	c, err := NewClientWithResponses(server, WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		return err
	}
	var seen Seen

	list, err := c.ListToolCallsWithResponse(ctx, &ListToolCallsParams{ConversationId: &conversation})
	if err != nil {
		return err
	}
	if list.JSON200 == nil || len(list.JSON200.Items) == 0 {
		return fmt.Errorf("list: %d %s", list.StatusCode(), list.Body)
	}
	call := list.JSON200.Items[0]
	var requestedAt int64 = call.RequestedAt
	var eventsSeq int64 = list.JSON200.EventsSeq
	seen.RequestedAt, seen.EventsSeq = requestedAt, eventsSeq

	reason := "approved by a generated client"
	decided, err := c.DecideToolCallWithResponse(ctx, call.PendingId, DecideToolCallJSONRequestBody{Approved: true, Reason: &reason})
	if err != nil {
		return err
	}
	if decided.JSON200 == nil {
		return fmt.Errorf("decide: %d %s", decided.StatusCode(), decided.Body)
	}
	var decisionTime *int64 = decided.JSON200.DecisionTime
	if decisionTime != nil {
		seen.DecisionTime = *decisionTime
	}
	seen.Status = string(decided.JSON200.Status)
	if by := decided.JSON200.ApprovedOrRejectedByUserId; by != nil {
		seen.DecidedBy = *by
	}

	history, err := c.GetToolCallHistoryWithResponse(ctx, call.PendingId)
	if err != nil {
		return err
	}
	if history.JSON200 == nil || len(*history.JSON200) == 0 {
		return fmt.Errorf("history: %d %s", history.StatusCode(), history.Body)
	}
	last := (*history.JSON200)[len(*history.JSON200)-1]
	var at, revision int64 = last.At, last.Revision
	seen.HistoryAt, seen.Revision = at, revision

	missing, err := c.GetToolCallWithResponse(ctx, conversation+".nope")
	if err != nil {
		return err
	}
	if missing.JSON404 == nil {
		return fmt.Errorf("get a call that is not there: %d %s", missing.StatusCode(), missing.Body)
	}
	seen.NotFound = missing.JSON404.Error.Code

	return json.NewEncoder(os.Stdout).Encode(seen)
}
