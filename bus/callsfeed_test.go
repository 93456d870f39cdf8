package bus_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/bus"
)

// A CallHead decodes what encoding/json decodes: names in another case,
// and an entry json/v2 refuses (invalid UTF-8, a name twice).
func TestDecodeCallHead_AsEncodingJSON(t *testing.T) {
	for _, data := range []string{
		`{"PENDINGID":"a.b","Status":"PENDING_APPROVAL","approvaltimeoutat":100,"toolArguments":{"x":[1,2,{"y":null}]}}`,
		"{\"pendingId\":\"a.b\",\"status\":\"PENDING_APPROVAL\",\"approvalTimeoutAt\":100,\"description\":\"\xff\"}",
		`{"pendingId":"a.b","status":"PENDING_APPROVAL","approvalTimeoutAt":50,"approvalTimeoutAt":100}`,
		`{"pendingId":"a.b","status":"EXECUTING","approvalTimeoutAt":100,"lease":{"holder":"x","expiresAt":7},"lastTransition":{"at":3,"event":"start"},"escalations":[{"at":5,"to":["bob"]}]}`,
	} {
		var want bus.CallHead
		require.NoError(t, json.Unmarshal([]byte(data), &want))
		got, err := bus.DecodeCallHead([]byte(data))
		require.NoError(t, err, data)
		assert.Equal(t, &want, got, data)
		assert.EqualValues(t, 100, got.ApprovalTimeoutAt, data)
	}
	_, err := bus.DecodeCallHead([]byte(`{"pendingId":`))
	assert.Error(t, err)
}
