package wire_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Every string a request holds is bounded, however deep, and the refusal
// names the field by its JSON path and says the bound.
func TestCheckBounds_NamesTheFieldTooLong(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", wire.MaxString+1)
	for name, c := range map[string]struct {
		req  any
		want string
	}{
		"a call's caller":     {machine.Call{CallerBotID: strings.Repeat("c", 10_000)}, "callerBotId: at most 256 bytes, got 10000"},
		"a reason":            {wire.DecideRequest{Reason: strings.Repeat("r", 4097)}, "reason: at most 4096 bytes, got 4097"},
		"an element":          {wire.DecideMatchingRequest{IDs: []string{"a", long}}, "ids[1]: at most 1024 bytes"},
		"a map's value":       {wire.DeniedToolsReply{Denied: map[string]string{"t": long}}, "denied.t: at most 1024 bytes"},
		"a map's key":         {wire.DeniedToolsReply{Denied: map[string]string{long: "t"}}, "denied key: at most 1024 bytes"},
		"behind a pointer":    {&wire.PolicyDryRunRequest{Team: &long}, "team: at most 1024 bytes"},
		"a named string type": {wire.GrantPreviewRequest{Scope: machine.Scope(long)}, "scope: at most 1024 bytes"},
	} {
		err := wire.CheckBounds(c.req)
		require.ErrorIs(t, err, machine.ErrInvalid, name)
		assert.ErrorContains(t, err, c.want, name)
	}
	ok := wire.ReportRequest{Error: strings.Repeat("e", 65536), Result: []byte(`"` + long + `"`)}
	assert.NoError(t, wire.CheckBounds(ok), "an executor's error may be 64 KiB; a result is bounded by the request's size")
}

// A decision and a response say approved, true or false, whatever
// transport brings them: one that leaves it out is refused, not taken as
// a rejection; a decision answering the call with a result needs none.
func TestCheckRequest_ADecisionSaysApproved(t *testing.T) {
	t.Parallel()
	check := func(data string, v any) error {
		require.NoError(t, wire.Unmarshal([]byte(data), v), data)
		return wire.CheckRequest([]byte(data), v)
	}
	for _, data := range []string{`{"pendingId":"p"}`, `{"pendingId":"p","approved":null}`, `{"reason":"no"}`} {
		err := check(data, &wire.DecideRequest{})
		require.ErrorIs(t, err, machine.ErrInvalid, data)
		assert.ErrorContains(t, err, "approved: required, true or false (or a result, to answer the call with it)", data)
		assert.ErrorContains(t, check(data, &wire.RespondRequest{}), "approved: required, true or false", data)
	}
	for _, data := range []string{`{"approved":false}`, `{"approved":true}`, `{"result":{"hits":3}}`} {
		assert.NoError(t, check(data, &wire.DecideRequest{}), data)
	}
	assert.NoError(t, check(`{"approved":false}`, &wire.RespondRequest{}))
	err := check(`{"requestId":"`+strings.Repeat("r", 65)+`","approved":true}`, &wire.DecideRequest{})
	assert.ErrorContains(t, err, "requestId: at most 64 bytes, got 65", "the bounds first")
	assert.NoError(t, check(`{}`, &wire.CancelRequest{}), "a request without rules of its own")
}

// FuzzEntrySubject: a caller's announcement subject stays far below
// NATS's control line (4 KiB) whatever the caller id, for every pending id
// that the bounded ids make.
func FuzzEntrySubject(f *testing.F) {
	f.Add("bot", "conv", "call")
	f.Add(strings.Repeat("c", 10_000), strings.Repeat("é", 128), strings.Repeat(" ", 256))
	f.Fuzz(func(t *testing.T, caller, conv, call string) {
		conv, call = conv[:min(len(conv), machine.MaxID)], call[:min(len(call), machine.MaxID)]
		if s := wire.EntrySubject(caller, machine.PendingID(conv, call)); len(s) > 2048 {
			t.Fatalf("a subject of %d bytes for a caller of %d", len(s), len(caller))
		}
	})
}
