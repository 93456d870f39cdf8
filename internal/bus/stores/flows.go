package stores

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// FlowMarks keeps the flows' marks in KV, one key per flow's mark and
// conversation or caller, changed only by compare-and-set: of two
// completions racing, the later stays, on whichever process marks them.
// The bucket's TTL drops a mark a while after the longest window, so it
// does not grow without bound.
type FlowMarks struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

var _ policy.FlowMarks = (*FlowMarks)(nil)

// NewFlowMarks returns the marks over the flows bucket, kv of js.
func NewFlowMarks(js jetstream.JetStream, kv jetstream.KeyValue) *FlowMarks {
	return &FlowMarks{js: js, kv: kv}
}

// storedMark is a policy.FlowMark as kept in KV, with what it is about
// and a random nonce of the write that stored it (see jsio.Write).
type storedMark struct {
	Mark      string           `json:"mark"` // policy.FlowRule.MarkID
	Scope     policy.FlowScope `json:"scope"`
	Value     string           `json:"value"` // the conversation or caller
	ToolName  string           `json:"toolName"`
	PendingID string           `json:"pendingId"`
	At        int64            `json:"at"` // epoch milliseconds
	Write     string           `json:"write"`
}

// flowKey is <mark>.<token of scope:value>: whatever a caller named its
// conversation, the token is a valid key (base64, or a digest when long).
func flowKey(k policy.FlowKey) string {
	return k.Mark + "." + machine.KeyToken(string(k.Scope)+":"+k.Value)
}

// Mark implements policy.FlowMarks.
func (f *FlowMarks) Mark(ctx context.Context, key policy.FlowKey, m policy.FlowMark) error {
	_, err := jsio.Update(ctx, f.js, f.kv, flowKey(key), func(cur jetstream.KeyValueEntry) ([]byte, error) {
		if cur != nil {
			prev, err := markIn(cur)
			if err != nil {
				return nil, err
			}
			if prev.At > m.At.UnixMilli() {
				return nil, nil // a later completion is marked already
			}
		}
		return json.Marshal(storedMark{Mark: key.Mark, Scope: key.Scope, Value: key.Value,
			ToolName: m.ToolName, PendingID: m.PendingID, At: m.At.UnixMilli(), Write: rand.Text()})
	})
	if err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	return nil
}

// Last implements policy.FlowMarks.
func (f *FlowMarks) Last(ctx context.Context, key policy.FlowKey) (policy.FlowMark, bool, error) {
	kve, err := jsio.Get(ctx, f.kv, flowKey(key))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return policy.FlowMark{}, false, nil
	case err != nil:
		return policy.FlowMark{}, false, fmt.Errorf("flows: %w", err)
	}
	m, err := markIn(kve)
	if err != nil {
		return policy.FlowMark{}, false, err
	}
	return policy.FlowMark{ToolName: m.ToolName, PendingID: m.PendingID, At: time.UnixMilli(m.At).UTC()}, true, nil
}

// markIn is the mark kve holds.
func markIn(kve jetstream.KeyValueEntry) (storedMark, error) {
	var m storedMark
	if err := json.Unmarshal(kve.Value(), &m); err != nil {
		return storedMark{}, fmt.Errorf("flows: key %s: %w", kve.Key(), err)
	}
	return m, nil
}
