package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// Topology is how the buckets and streams are sized.
type Topology struct {
	Replicas     int           // 1 on one machine, 3 on a cluster
	EventsMaxAge time.Duration // how long TOOL_EVENTS keeps history; 0 keeps it for ever
}

// DefaultEventsMaxAge is how long events are kept when not configured.
const DefaultEventsMaxAge = 30 * 24 * time.Hour

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
}

// Provision creates or updates the buckets and streams toolgate needs. It
// is idempotent: every process calls it at start.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) (*Buckets, error) {
	if t.Replicas < 1 {
		t.Replicas = 1
	}
	var b Buckets
	for _, kv := range []struct {
		dst *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{
		{&b.Calls, jetstream.KeyValueConfig{Bucket: wire.CallsBucket, Description: "toolgate tool calls (PendingToolCallEntry by pendingId)", History: kvHistory}},
		{&b.Policies, jetstream.KeyValueConfig{Bucket: wire.PoliciesBucket, Description: "toolgate policy document", History: 16}},
		{&b.Grants, jetstream.KeyValueConfig{Bucket: wire.GrantsBucket, Description: "toolgate session grants by conversation"}},
		{&b.Budgets, jetstream.KeyValueConfig{Bucket: wire.BudgetsBucket, Description: "toolgate spending per team and day"}},
	} {
		kv.cfg.Storage = jetstream.FileStorage
		kv.cfg.Replicas = t.Replicas
		bucket, err := js.CreateOrUpdateKeyValue(ctx, kv.cfg)
		if err != nil {
			return nil, fmt.Errorf("provision bucket %s: %w", kv.cfg.Bucket, err)
		}
		*kv.dst = bucket
	}
	// Entries are read to validate a transition against the state the last
	// write left. A direct get may be answered by a replica that has not
	// seen that write yet (measured: 4 stale reads in 300 right after a
	// write on 3 replicas), and a stale state refuses a valid command —
	// Complete right after Claim. So the entries' bucket is read from its
	// stream leader.
	if err := readFromLeader(ctx, js, "KV_"+wire.CallsBucket); err != nil {
		return nil, err
	}
	calls, err := js.KeyValue(ctx, wire.CallsBucket) // bound again: it looks at AllowDirect when bound
	if err != nil {
		return nil, fmt.Errorf("provision bucket %s: %w", wire.CallsBucket, err)
	}
	b.Calls = calls
	streams := []jetstream.StreamConfig{{
		Name:        wire.EventsStream,
		Description: "toolgate: one event per tool-call transition",
		Subjects:    wire.EventSubjects(),
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      t.EventsMaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
		Duplicates:  duplicateWindow,
	}, {
		Name:        wire.WorkStream,
		Description: "toolgate: runnable tool calls, one queue per tool",
		Subjects:    []string{wire.WorkSubject(">")},
		Retention:   jetstream.WorkQueuePolicy,
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
	}}
	for _, cfg := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("provision stream %s: %w", cfg.Name, err)
		}
	}
	return &b, nil
}

// readFromLeader turns off direct gets on a stream, so every read is
// answered by its leader and sees every acknowledged write.
func readFromLeader(ctx context.Context, js jetstream.JetStream, stream string) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("provision stream %s: %w", stream, err)
	}
	cfg := st.CachedInfo().Config
	if !cfg.AllowDirect {
		return nil
	}
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("provision stream %s: read from the leader: %w", stream, err)
	}
	return nil
}
