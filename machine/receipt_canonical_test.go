package machine_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
)

// generalCanonical is RFC 8785 over any JSON document of strings,
// integers, objects and arrays, the way a verifier in another language
// would compute it: the receipt's JSON decoded and written again.
func generalCanonical(t *testing.T, r machine.Receipt) []byte {
	data, err := json.Marshal(r)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	var b bytes.Buffer
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case string:
			b.WriteByte('"')
			for _, c := range v {
				switch {
				case c == '"' || c == '\\':
					b.WriteByte('\\')
					b.WriteRune(c)
				case c == '\b':
					b.WriteString(`\b`)
				case c == '\t':
					b.WriteString(`\t`)
				case c == '\n':
					b.WriteString(`\n`)
				case c == '\f':
					b.WriteString(`\f`)
				case c == '\r':
					b.WriteString(`\r`)
				case c < 0x20:
					fmt.Fprintf(&b, `\u%04x`, c)
				default:
					b.WriteRune(c)
				}
			}
			b.WriteByte('"')
		case json.Number:
			n, err := strconv.ParseInt(string(v), 10, 64)
			require.NoError(t, err)
			b.WriteString(strconv.FormatInt(n, 10))
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			b.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					b.WriteByte(',')
				}
				write(k)
				b.WriteByte(':')
				write(v[k])
			}
			b.WriteByte('}')
		default:
			t.Fatalf("unexpected %T", v)
		}
	}
	write(v)
	return b.Bytes()
}

// The canonical form toolgate writes directly is RFC 8785 of the
// receipt's JSON, with every field present or absent.
func TestReceipts_CanonicalFormIsRFC8785OfTheJSON(t *testing.T) {
	t.Parallel()
	full := machine.Receipt{Seq: 12, PendingID: "=YQ.c_1", ToolName: "Bash", Caller: "bot\u00e9", Event: machine.EventSucceed,
		From: machine.StateExecuting, To: machine.StateCompletedSuccess, Actor: "exec/worker-2", At: 1795478400123,
		Reason: "tab\there \"q\" \\ <&> \x1f \u2028 😀", Scope: machine.ScopeSession, ArgumentsDigest: "sha256:ab",
		ResultDigest: "sha256:cd", Prev: "sha256:ef", Key: "NABC", Sig: "c2ln", Vote: "approve", ViaGroup: "payments \"leads\""}
	full.Identity = &machine.Identity{Issuer: "https://id.example.com/realms/x", Subject: "f:1\"2", Name: "Alice Ö", Email: "alice@example.com"}
	signedIn := machine.Receipt{Seq: 2, Event: machine.EventApprove, Actor: "alice", Identity: &machine.Identity{Issuer: "https://id", Subject: "42"}}
	for _, r := range []machine.Receipt{full, signedIn, {Seq: 1, Event: machine.EventAsk, To: machine.StatePendingApproval}, {}} {
		got, err := machine.ReceiptCanonical(r)
		require.NoError(t, err)
		r.Sig = ""
		assert.Equal(t, string(generalCanonical(t, r)), string(got), "what is signed: the receipt without sig")
		hash, err := machine.ReceiptHash(r)
		require.NoError(t, err)
		assert.Equal(t, "sha256:"+sha256Hex(generalCanonical(t, r)), hash)
	}
	withSig, err := machine.ReceiptHash(full)
	require.NoError(t, err)
	sum := sha256Hex(generalCanonical(t, full))
	assert.Equal(t, "sha256:"+sum, withSig, "the hash covers the receipt with its sig")
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
