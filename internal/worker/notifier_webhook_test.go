package worker_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/machine"
	tgpolicy "github.com/toolgate/toolgate/policy"
)

// These tests check toolgate's webhook signatures with the Standard
// Webhooks project's own Go library, as a receiver would: what it accepts,
// every receiver written against the spec accepts.

// swVerifier is the library's verifier of secret, a whsec_ secret.
func swVerifier(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	return wh
}

// swHook is a receiver of one webhook channel whose policy is the channel
// given (YAML flow mapping without the url), with a notifier running.
func swHook(t *testing.T, channel string, opts ...worker.NotifierOption) (*ntReceiver, *machine.Machine, *tgpolicy.Engine) {
	t.Helper()
	hook := ntListen(t, nil)
	env, engine, m := ntEnv(t, fmt.Sprintf("default:\n  notify:\n    - {type: webhook, url: %q, %s}\n", hook.URL+"/hook", channel))
	ntStart(t, env, engine, nil, append(ntFast(3), opts...)...)
	return hook, m, engine
}

// TestNotifier_WebhookVerifiesWithEachRotatedSecret: a webhook with two
// secrets carries a signature by each, and the Standard Webhooks library
// accepts the delivery with either secret alone, so a receiver can move
// from one to the other while both are in the policy; once the old one is
// removed, only the new one verifies.
func TestNotifier_WebhookVerifiesWithEachRotatedSecret(t *testing.T) {
	t.Parallel()
	old, next, other := tgpolicy.NewWebhookSecret(), tgpolicy.NewWebhookSecret(), tgpolicy.NewWebhookSecret()
	hook, m, engine := swHook(t, fmt.Sprintf("secrets: [%q, %q]", old, next))

	ntSubmit(t, m, machine.Call{ToolCallID: "during"})
	got := hook.next(t, "the delivery during the rotation")
	sigs := strings.Fields(got.Header.Get(worker.HeaderWebhookSignature))
	require.Len(t, sigs, 2, "one signature per secret: %q", sigs)
	for _, s := range sigs {
		assert.True(t, strings.HasPrefix(s, "v1,"), "%q: the spec's version 1 (HMAC-SHA256)", s)
	}
	assert.NoError(t, swVerifier(t, old).Verify(got.Body, got.Header), "the old secret verifies")
	assert.NoError(t, swVerifier(t, next).Verify(got.Body, got.Header), "the new secret verifies")
	assert.ErrorIs(t, swVerifier(t, other).Verify(got.Body, got.Header), standardwebhooks.ErrNoMatchingSignature, "a secret not in the policy does not")
	assert.Empty(t, got.Header.Get(worker.HeaderSignature), "no legacy signature unless legacySignature is set")
	assert.Empty(t, got.Header.Get(worker.HeaderTimestamp))

	// The old secret removed from the policy: the next delivery is signed
	// with the new one only.
	d, err := tgpolicy.Parse(fmt.Appendf(nil, "default:\n  notify:\n    - {type: webhook, url: %q, secrets: [%q]}\n", hook.URL+"/hook", next))
	require.NoError(t, err)
	require.NoError(t, engine.SetDocument(d))
	ntSubmit(t, m, machine.Call{ToolCallID: "after"})
	got = hook.next(t, "the delivery after the rotation")
	assert.Len(t, strings.Fields(got.Header.Get(worker.HeaderWebhookSignature)), 1)
	assert.NoError(t, swVerifier(t, next).Verify(got.Body, got.Header), "the new secret verifies")
	assert.ErrorIs(t, swVerifier(t, old).Verify(got.Body, got.Header), standardwebhooks.ErrNoMatchingSignature, "the old one no longer does")
}

// TestNotifier_WebhookSignatureIsStandardWebhooks: the signature, checked
// from scratch as the spec defines it (base64 HMAC-SHA256 of
// "id.timestamp.body"), the id being the event's, and the timestamp the
// attempt's.
func TestNotifier_WebhookSignatureIsStandardWebhooks(t *testing.T) {
	t.Parallel()
	secret := tgpolicy.NewWebhookSecret()
	hook, m, _ := swHook(t, fmt.Sprintf("secret: %q", secret))
	before := time.Now().Unix()
	e := ntSubmit(t, m, machine.Call{})
	got := hook.next(t, "the delivery")

	id := got.Header.Get(worker.HeaderWebhookID)
	assert.True(t, strings.HasPrefix(id, e.PendingID+":"), "webhook-id %q is the event's id, <pendingId>:<revision>", id)
	assert.Equal(t, id, got.Header.Get(worker.HeaderDelivery))
	ts, err := strconv.ParseInt(got.Header.Get(worker.HeaderWebhookTimestamp), 10, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ts, before)
	assert.LessOrEqual(t, ts, time.Now().Unix())

	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	want := worker.SignWebhook([][]byte{key}, id, ts, got.Body)
	assert.Equal(t, want, got.Header.Get(worker.HeaderWebhookSignature))
	wh, err := standardwebhooks.NewWebhookRaw(key)
	require.NoError(t, err)
	lib, err := wh.Sign(id, time.Unix(ts, 0), got.Body)
	require.NoError(t, err)
	assert.Equal(t, lib, want, "the library signs alike")
}

// TestNotifier_WebhookTamperedOrStaleIsRefused: the library refuses a
// delivery whose body, id or timestamp was changed after signing, and one
// whose timestamp is outside its tolerance (five minutes either way), old
// or from the future, though its signature holds.
func TestNotifier_WebhookTamperedOrStaleIsRefused(t *testing.T) {
	t.Parallel()
	secret := tgpolicy.NewWebhookSecret()

	t.Run("tampered", func(t *testing.T) {
		t.Parallel()
		hook, m, _ := swHook(t, fmt.Sprintf("secret: %q", secret))
		ntSubmit(t, m, machine.Call{})
		got := hook.next(t, "the delivery")
		wh := swVerifier(t, secret)
		require.NoError(t, wh.Verify(got.Body, got.Header), "as sent, it verifies")

		body := []byte(strings.Replace(string(got.Body), `"send_email"`, `"drop_table"`, 1))
		require.NotEqual(t, string(got.Body), string(body))
		assert.ErrorIs(t, wh.Verify(body, got.Header), standardwebhooks.ErrNoMatchingSignature, "another body")
		assert.ErrorIs(t, wh.Verify(append(got.Body, ' '), got.Header), standardwebhooks.ErrNoMatchingSignature, "a byte more")

		h := got.Header.Clone()
		h.Set(worker.HeaderWebhookID, h.Get(worker.HeaderWebhookID)+"0")
		assert.ErrorIs(t, wh.Verify(got.Body, h), standardwebhooks.ErrNoMatchingSignature, "another id")

		h = got.Header.Clone()
		ts, err := strconv.ParseInt(h.Get(worker.HeaderWebhookTimestamp), 10, 64)
		require.NoError(t, err)
		h.Set(worker.HeaderWebhookTimestamp, strconv.FormatInt(ts+1, 10))
		assert.ErrorIs(t, wh.Verify(got.Body, h), standardwebhooks.ErrNoMatchingSignature, "a replay with a fresh timestamp")

		h = got.Header.Clone()
		h.Del(worker.HeaderWebhookSignature)
		assert.ErrorIs(t, wh.Verify(got.Body, h), standardwebhooks.ErrRequiredHeaders, "no signature")
	})

	for _, tt := range []struct {
		name string
		skew time.Duration
		want error
	}{
		{"too old", -10 * time.Minute, standardwebhooks.ErrMessageTooOld},
		{"too new", 10 * time.Minute, standardwebhooks.ErrMessageTooNew},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := worker.WithNotifierClock(func() time.Time { return time.Now().Add(tt.skew) })
			hook, m, _ := swHook(t, fmt.Sprintf("secret: %q", secret), clock)
			ntSubmit(t, m, machine.Call{})
			got := hook.next(t, "the delivery")
			wh := swVerifier(t, secret)
			assert.ErrorIs(t, wh.Verify(got.Body, got.Header), tt.want, "webhook-timestamp %s", got.Header.Get(worker.HeaderWebhookTimestamp))
			assert.NoError(t, wh.VerifyIgnoringTimestamp(got.Body, got.Header), "only the timestamp is at fault")
		})
	}
}

// TestNotifier_LegacySignatureOnlyWhenAsked: a channel with
// legacySignature gets X-Toolgate-Signature too, keyed with its first
// secret as written, beside the Standard Webhooks signature of every
// secret; a secret without the whsec_ prefix (toolgate's before) signs
// with its bytes as the key, which the library takes as a raw key.
func TestNotifier_LegacySignatureOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	next := tgpolicy.NewWebhookSecret()
	hook, m, _ := swHook(t, fmt.Sprintf("secret: s3cr3t, secrets: [%q], legacySignature: true", next))
	ntSubmit(t, m, machine.Call{})
	got := hook.next(t, "the delivery")

	assert.NoError(t, worker.VerifyLegacyWebhook("s3cr3t", got.Header, got.Body, time.Now(), time.Minute), "the legacy header, as before")
	assert.Equal(t, got.Header.Get(worker.HeaderWebhookTimestamp), got.Header.Get(worker.HeaderTimestamp))
	raw, err := standardwebhooks.NewWebhookRaw([]byte("s3cr3t"))
	require.NoError(t, err)
	assert.NoError(t, raw.Verify(got.Body, got.Header), "the old secret, as a raw key")
	assert.NoError(t, swVerifier(t, next).Verify(got.Body, got.Header), "the new one")
}

func TestVerifyLegacyWebhook(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"c.t:1"}`)
	now := time.Unix(1_700_000_000, 0)
	h := http.Header{}
	h.Set(worker.HeaderTimestamp, "1700000000")
	h.Set(worker.HeaderSignature, worker.SignLegacyWebhook("k", "1700000000", body))
	assert.NoError(t, worker.VerifyLegacyWebhook("k", h, body, now.Add(30*time.Second), time.Minute))
	assert.ErrorContains(t, worker.VerifyLegacyWebhook("k", h, body, now.Add(2*time.Minute), time.Minute), "X-Toolgate-Timestamp")
	assert.NoError(t, worker.VerifyLegacyWebhook("k", h, body, now.Add(time.Hour), 0), "no tolerance: no age check")
	h.Set(worker.HeaderTimestamp, "1700000001")
	assert.ErrorContains(t, worker.VerifyLegacyWebhook("k", h, body, now, time.Minute), "does not match", "the timestamp is signed")
}
