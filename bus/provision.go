package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Topology is how the buckets and streams are sized.
type Topology struct {
	Replicas     int           // 1 on one machine, 3 on a cluster
	EventsMaxAge time.Duration // how long TOOL_EVENTS keeps history; 0 keeps it for ever
	// ArchiveMaxAge is how long TOOL_ARCHIVE keeps a finished call once
	// it left tool_calls; 0 keeps it for ever.
	ArchiveMaxAge time.Duration
}

// DefaultEventsMaxAge is how long events are kept when not configured.
const DefaultEventsMaxAge = 30 * 24 * time.Hour

// MaxDecisionTokenLife bounds how long a decision token is good for,
// whatever its call's deadline: the bucket forgets tokens a day after.
const MaxDecisionTokenLife = 30 * 24 * time.Hour

// kvHistory is the number of revisions the bucket keeps per key. The relay
// reads every revision from the bucket's stream, so a revision must survive
// until it is relayed: an entry rarely sees more than a handful of writes,
// and 64 (JetStream's maximum) lets a relay lag far behind without losing one.
const kvHistory = 64

// duplicateWindow is how long a Nats-Msg-Id is remembered: a relay that
// crashed after publishing and before acking replays within it.
const duplicateWindow = 10 * time.Minute

// Buckets are the KV buckets toolgate keeps its state in.
type Buckets struct {
	Calls    jetstream.KeyValue // the entries
	Policies jetstream.KeyValue
	Grants   jetstream.KeyValue
	Budgets  jetstream.KeyValue
	// Identities records the NATS credentials toolgate issued and revoked.
	Identities jetstream.KeyValue
	// DecisionTokens holds the one-time decision tokens (DecisionTokenStore).
	DecisionTokens jetstream.KeyValue
	// RateLimits holds the rate rules' counters (RateCounters).
	RateLimits jetstream.KeyValue
	// Archive is TOOL_ARCHIVE, the finished calls that left Calls.
	Archive jetstream.Stream
	// ReceiptKeys holds the public receipt keys (ReceiptKeyStore).
	ReceiptKeys jetstream.KeyValue

	// Flows holds the marks of the policy's flows (FlowMarks).
	Flows jetstream.KeyValue
	// Shadow is TOOL_SHADOW, what submits compared against the shadow
	// policy (ShadowLog).
	Shadow jetstream.Stream
	// Reveals is TOOL_REVEALS, who was shown which call's arguments in
	// clear, and when (RevealLog).
	Reveals jetstream.Stream
}

// Provision creates or updates the buckets and streams toolgate needs. It
// is idempotent: every process calls it at start.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) (*Buckets, error) {
	if t.Replicas < 1 {
		t.Replicas = 1
	}
	var b Buckets
	dsts := map[string]*jetstream.KeyValue{
		wire.PoliciesBucket: &b.Policies, wire.GrantsBucket: &b.Grants, wire.BudgetsBucket: &b.Budgets,
		wire.IdentitiesBucket: &b.Identities, wire.DecisionTokensBucket: &b.DecisionTokens,
		wire.RateLimitsBucket: &b.RateLimits, wire.ReceiptKeysBucket: &b.ReceiptKeys, wire.FlowsBucket: &b.Flows,
	}
	for _, cfg := range bucketConfigs() {
		cfg.Storage = jetstream.FileStorage
		cfg.Replicas = t.Replicas
		bucket, err := jsio.Attempts(ctx, provisionAttempt, func(ctx context.Context) (jetstream.KeyValue, error) {
			return js.CreateOrUpdateKeyValue(ctx, cfg)
		})
		if err != nil {
			return nil, fmt.Errorf("provision bucket %s: %w", cfg.Bucket, err)
		}
		*dsts[cfg.Bucket] = bucket
	}
	calls, err := jsio.Attempts(ctx, provisionAttempt, func(ctx context.Context) (jetstream.KeyValue, error) { return provisionCalls(ctx, js, t) })
	if err != nil {
		return nil, fmt.Errorf("provision bucket %s: %w", wire.CallsBucket, err)
	}
	b.Calls = calls
	for _, cfg := range streamConfigs(t) {
		st, err := jsio.Attempts(ctx, provisionAttempt, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, cfg) })
		if err != nil {
			return nil, fmt.Errorf("provision stream %s: %w", cfg.Name, err)
		}
		switch cfg.Name {
		case wire.ArchiveStream:
			b.Archive = st
		case wire.ShadowStream:
			b.Shadow = st
		case wire.RevealsStream:
			b.Reveals = st
		}
	}
	// Executors took work from a stream of their own, TOOL_WORK, before
	// they asked the request API for it: what an older toolgate left there
	// nobody reads.
	if _, err := jsio.Attempts(ctx, provisionAttempt, func(ctx context.Context) (struct{}, error) {
		if err := js.DeleteStream(ctx, retiredWorkStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return struct{}{}, err
		}
		return struct{}{}, nil
	}); err != nil {
		return nil, fmt.Errorf("provision: delete stream %s: %w", retiredWorkStream, err)
	}
	return &b, nil
}

// bucketConfigs are the buckets Provision makes beside the calls', but
// for their storage and replicas.
func bucketConfigs() []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: wire.PoliciesBucket, Description: "toolgate policy document", History: 16},
		{Bucket: wire.GrantsBucket, Description: "toolgate session grants by conversation"},
		{Bucket: wire.BudgetsBucket, Description: "toolgate spending per team and day"},
		{Bucket: wire.IdentitiesBucket, Description: "toolgate credentials issued and revoked, by public key", History: 8},
		// A token lives at most MaxDecisionTokenLife; a day more keeps a
		// used one long enough to say it was used, not that it is unknown.
		{Bucket: wire.DecisionTokensBucket, Description: "toolgate one-time decision tokens, by SHA-256", TTL: MaxDecisionTokenLife + 24*time.Hour},
		// A window is at most policy.MaxRatePer long: a counter untouched
		// for longer counts nothing, and goes.
		{Bucket: wire.RateLimitsBucket, Description: "toolgate rate rules' counters: the slots taken in each window", TTL: policy.MaxRatePer + time.Hour},
		{Bucket: wire.ReceiptKeysBucket, Description: "toolgate public receipt keys, one per process that signs receipts"},
		// A flow's window is at most policy.MaxFlowWithin long: a mark
		// untouched for longer holds nothing back, and goes.
		{Bucket: wire.FlowsBucket, Description: "toolgate flows' marks: the latest completed call each flow's after matched, per conversation or caller", TTL: policy.MaxFlowWithin + time.Hour},
	}
}

// streamConfigs are the streams Provision makes.
func streamConfigs(t Topology) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{{
		Name:        wire.EventsStream,
		Description: "toolgate: one event per tool-call transition",
		Subjects:    wire.EventSubjects(),
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.EventsMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
		Duplicates:  duplicateWindow,
	}, {
		Name:        wire.NotifyStream,
		Description: "toolgate: notifications to deliver, one subject per channel",
		Subjects:    []string{wire.NotifySubject(">")},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
		Duplicates:  duplicateWindow,
		// Far beyond a delivery's last retry: only a channel nobody
		// delivers to keeps messages this long.
		MaxAge: 7 * 24 * time.Hour,
	}, {
		Name:        wire.DeadLetterStream,
		Description: "toolgate: messages a consumer gave up on",
		Subjects:    []string{wire.DeadLetterSubject(">")},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.EventsMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
	}, {
		Name:              wire.ArchiveStream,
		Description:       "toolgate: finished tool calls that left tool_calls, one subject per call",
		Subjects:          []string{wire.ArchiveSubject(">")},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxAge:            t.ArchiveMaxAge,
		Storage:           jetstream.FileStorage,
		Replicas:          t.Replicas,
		Duplicates:        duplicateWindow,
	}, {
		Name:        wire.ShadowStream,
		Description: "toolgate: what submits compared against the shadow policy, one tally per process and moment",
		Subjects:    []string{wire.ShadowSubject},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      wire.ShadowMaxAgeMs * time.Millisecond,
		MaxMsgs:     wire.ShadowMaxTallies,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
	}, {
		Name:        wire.RevealsStream,
		Description: "toolgate: who was shown a call's arguments in clear, one subject per call",
		Subjects:    []string{wire.RevealSubject(">")},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.EventsMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
	}}
}

// Streams are the JetStream streams of every bucket and stream toolgate
// provisions (Provision, ProvisionAnalytics), each bucket as its stream
// (KV_<bucket>): what holds all that toolgate keeps, and what a backup
// must take.
func Streams() []string {
	names := []string{"KV_" + wire.CallsBucket}
	for _, cfg := range bucketConfigs() {
		names = append(names, "KV_"+cfg.Bucket)
	}
	names = append(names, "KV_"+wire.AnalyticsBucket)
	for _, cfg := range streamConfigs(Topology{}) {
		names = append(names, cfg.Name)
	}
	return names
}

// retiredWorkStream is the stream older toolgates queued runnable calls on.
const retiredWorkStream = "TOOL_WORK"

// provisionCalls creates the entries' bucket with its final configuration
// and, when it exists, changes only what differs from it.
//
// Entries are read to validate a transition against the state the last
// write left. A direct get may be answered by a replica that has not seen
// that write yet (measured: 4 stale reads in 300 right after a write on 3
// replicas), and a stale state refuses a valid command — Complete right
// after Claim. So the bucket is read from its stream leader: direct gets
// are off from the moment it exists. CreateOrUpdateKeyValue cannot do
// that (it turns them on at every call), and a client that bound the
// bucket while they were on kept a handle whose every read then failed
// with "no responders": so this bucket's stream is managed here directly.
func provisionCalls(ctx context.Context, js jetstream.JetStream, t Topology) (jetstream.KeyValue, error) {
	want := jetstream.StreamConfig{
		Name:              "KV_" + wire.CallsBucket,
		Description:       "toolgate tool calls (PendingToolCallEntry by pendingId)",
		Subjects:          []string{"$KV." + wire.CallsBucket + ".>"},
		MaxMsgsPerSubject: kvHistory,
		MaxBytes:          -1,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           jetstream.FileStorage,
		Replicas:          t.Replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        2 * time.Minute,
		Discard:           jetstream.DiscardNew,
		AllowDirect:       false,
		// A call retired to the archive is purged with a marker that
		// expires (Retire), so neither its revisions nor the marker stay.
		AllowMsgTTL: true,
	}
	for {
		st, err := js.Stream(ctx, want.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, want)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				continue // another process created it first, maybe otherwise
			}
		} else if err == nil {
			cur := st.CachedInfo().Config
			if cur.MaxMsgsPerSubject != want.MaxMsgsPerSubject || cur.Replicas != want.Replicas || cur.AllowDirect || cur.Description != want.Description || !cur.AllowMsgTTL {
				cur.MaxMsgsPerSubject, cur.Replicas, cur.AllowDirect, cur.Description, cur.AllowMsgTTL = want.MaxMsgsPerSubject, want.Replicas, false, want.Description, true
				_, err = js.UpdateStream(ctx, cur)
			}
		}
		if err != nil {
			return nil, err
		}
		kv, err := js.KeyValue(ctx, wire.CallsBucket)
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return kv, err
		}
		// Created a moment ago (by another process, on a fresh cluster)
		// and not yet known to the server that answered: ask again.
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// provisionAttempt bounds one JetStream API call of provisioning. A
// cluster creating a stream does not answer other requests to create the
// same stream at all: they wait until their caller gives up (measured:
// four of five processes starting at once on a fresh 3-node cluster were
// still waiting after a minute, while the fifth was done in half a
// second). Asked again once it exists, it answers at once.
const provisionAttempt = 3 * time.Second

// ProvisionAnalytics creates the analytics' bucket, or updates it, with
// replicas (at least 1); it is idempotent.
func ProvisionAnalytics(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.AnalyticsBucket,
		Description: "toolgate analytics: aggregates per tool, team, approver and hour",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("provision bucket %s: %w", wire.AnalyticsBucket, err)
	}
	return kv, nil
}
