package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// KVStore keeps entries in the tool_calls JetStream KV bucket, one key per
// pendingId, and maps JetStream's errors to the domain's.
type KVStore struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	recent recentEntries
	index  CallIndex // nil: none (WithIndex)
	work   WorkQueue // nil: none (WithWorkQueue)
	// blind, set only by a test (BlindWrites), has Update write
	// without its compare-and-set: the broken build the history checker
	// must catch.
	blind bool
}

var _ machine.RecentStore = (*KVStore)(nil)

// recentEntries are the runnable and running entries a KVStore wrote
// lately, each at its revision: the value a key holds at a revision never changes, so a
// remembered one is true of that revision for ever, and whether it is
// still the latest is for a compare-and-set on it to tell.
type recentEntries struct {
	mu sync.Mutex
	m  map[string]recentEntry
}

type recentEntry struct {
	rev uint64
	e   machine.Entry
}

// What a KVStore remembers: the runnable and running calls it wrote last
// (those a claim starts from, and those an executor reports on), each of at most
// maxRecentSize bytes of JSON, at most maxRecentEntries of them.
const (
	maxRecentEntries = 4096
	maxRecentSize    = 16 << 10
)

func (r *recentEntries) put(e *machine.Entry, rev uint64, size int) {
	switch {
	case size > maxRecentSize:
		return
	case e.Status != machine.StateApproved && e.Status != machine.StateScheduled && e.Status != machine.StateExecuting:
		// Finished, or pending a human: nothing claims or reports on
		// it. (A finished one leaves what it held.)
		r.mu.Lock()
		delete(r.m, e.PendingID)
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]recentEntry{}
	}
	if cur, ok := r.m[e.PendingID]; ok && cur.rev >= rev {
		return
	}
	if len(r.m) >= maxRecentEntries {
		for k := range r.m { // one out, whichever
			delete(r.m, k)
			break
		}
	}
	r.m[e.PendingID] = recentEntry{rev: rev, e: *e}
}

// Recent implements machine.RecentStore.
func (s *KVStore) Recent(pendingID string, revision uint64) (*machine.Entry, bool) {
	e, rev, ok := s.Latest(pendingID)
	return e, ok && rev == revision
}

// Latest implements machine.RecentStore: the later of the entry this
// store wrote last and the open one its index holds.
func (s *KVStore) Latest(pendingID string) (*machine.Entry, uint64, bool) {
	e, rev, ok := s.written(pendingID)
	if s.index != nil {
		if ie, irev, iok := s.index.Latest(pendingID, rev); iok {
			return ie, irev, true
		}
	}
	return e, rev, ok
}

// Absent implements machine.AbsenceStore: the index, synced, holds no
// call under pendingId.
func (s *KVStore) Absent(pendingID string) bool {
	return s.index != nil && s.index.Absent(pendingID)
}

// written is the entry this store wrote last under pendingId, if it
// remembers it.
func (s *KVStore) written(pendingID string) (*machine.Entry, uint64, bool) {
	s.recent.mu.Lock()
	defer s.recent.mu.Unlock()
	r, ok := s.recent.m[pendingID]
	if !ok {
		return nil, 0, false
	}
	e := r.e
	// Clipped, so that an append to the copy never writes into what
	// another copy of the same entry holds.
	e.Receipts, e.Votes, e.Approvers, e.Escalations = slices.Clip(e.Receipts), slices.Clip(e.Votes), slices.Clip(e.Approvers), slices.Clip(e.Escalations)
	return &e, r.rev, true
}

// NewKVStore returns a Store over kv, a bucket of js.
func NewKVStore(js jetstream.JetStream, kv jetstream.KeyValue) *KVStore {
	return &KVStore{js: js, kv: kv}
}

// CallIndex is what a KVStore asks of an index that follows its bucket
// (WithIndex): the open entry under pendingId it holds at a revision
// later than after, if any, and whether, in step with the bucket, it
// holds no call under pendingId.
type CallIndex interface {
	Latest(pendingID string, after uint64) (*machine.Entry, uint64, bool)
	Absent(pendingID string) bool
}

// WorkQueue is what a KVStore tells the executors' queue of calls
// (WithWorkQueue): each entry it wrote, at its revision.
type WorkQueue interface {
	Wrote(e *machine.Entry, rev uint64)
}

// WithIndex has s start commands on open calls from x's latest revision
// of them, and skip the read of a submit whose pendingId x does not hold,
// while x follows kv. It returns s.
func (s *KVStore) WithIndex(x CallIndex) *KVStore {
	s.index = x
	return s
}

// WithWorkQueue has s file in q each revision it writes, as soon as it
// is written: a call approved here is offered to the executors waiting
// on this process without waiting for the bucket's watch to bring the
// revision back. It returns s.
func (s *KVStore) WithWorkQueue(q WorkQueue) *KVStore {
	s.work = q
	return s
}

// wrote tells what s keeps of e, written at rev as data.
func (s *KVStore) wrote(e *machine.Entry, rev uint64, data []byte) {
	s.recent.put(e, rev, len(data))
	if s.work != nil {
		s.work.Wrote(e, rev)
	}
}

// Create implements machine.Store.
func (s *KVStore) Create(ctx context.Context, e *machine.Entry) (uint64, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	rev, err := jsio.Write(ctx, s.js, s.kv, e.PendingID, data, 0)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%s: %w", e.PendingID, machine.ErrExists)
	}
	if err == nil {
		s.wrote(e, rev, data)
	}
	return rev, err
}

// Get implements machine.Store.
func (s *KVStore) Get(ctx context.Context, pendingID string) (*machine.Entry, uint64, error) {
	if !machine.ValidPendingID(pendingID) {
		return nil, 0, fmt.Errorf("%w: pendingId %q is not a toolgate id", machine.ErrNotFound, pendingID)
	}
	kve, err := jsio.Get(ctx, s.kv, pendingID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("pendingId %s: %w", pendingID, machine.ErrNotFound)
	} else if err != nil {
		return nil, 0, err
	}
	e, err := jsio.DecodeEntry(kve.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("pendingId %s revision %d: %w", pendingID, kve.Revision(), err)
	}
	return e, kve.Revision(), nil
}

// Update implements machine.Store.
func (s *KVStore) Update(ctx context.Context, e *machine.Entry, revision uint64) (uint64, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return 0, err
	}
	var rev uint64
	if s.blind && revision != 0 {
		rev, err = s.kv.Put(ctx, e.PendingID, data)
	} else {
		rev, err = jsio.Write(ctx, s.js, s.kv, e.PendingID, data, revision)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%s at revision %d: %w", e.PendingID, revision, machine.ErrConflict)
	}
	if err == nil {
		s.wrote(e, rev, data)
	}
	return rev, err
}

// Retire removes an entry from the bucket, with every revision of it,
// if it is still at revision: a purge whose marker expires after
// markerTTL. (machine.Store has no such command: only a finished call,
// archived first, leaves; see gate.Timer.Retire.)
func (s *KVStore) Retire(ctx context.Context, pendingID string, revision uint64, markerTTL time.Duration) error {
	err := s.kv.Purge(ctx, pendingID, jetstream.LastRevision(revision), jetstream.PurgeTTL(markerTTL))
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%s at revision %d: %w", pendingID, revision, machine.ErrConflict)
	}
	return err
}

// ListConversation implements machine.Store. It watches only the
// conversation's keys, so the server reads nothing of other conversations.
func (s *KVStore) ListConversation(ctx context.Context, conversationID string) ([]*machine.Entry, error) {
	return jsio.WatchValues(ctx, s.kv, machine.ConversationKey(conversationID)+".*", jsio.DecodeEntry)
}

// ListAll reads every entry in the bucket: for listing across
// conversations, never on a path that serves one conversation.
func (s *KVStore) ListAll(ctx context.Context) ([]*machine.Entry, error) {
	return jsio.WatchValues(ctx, s.kv, ">", jsio.DecodeEntry)
}

// History returns the transitions an entry went through, oldest first,
// each with the revision that recorded it. Heartbeats, which only renew a
// lease and are published as no event, are left out.
func (s *KVStore) History(ctx context.Context, pendingID string) ([]wire.HistoryItem, error) {
	if !machine.ValidPendingID(pendingID) {
		return nil, fmt.Errorf("pendingId %s: %w", pendingID, machine.ErrNotFound)
	}
	revs, err := s.kv.History(ctx, pendingID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("pendingId %s: %w", pendingID, machine.ErrNotFound)
	} else if err != nil {
		return nil, err
	}
	items := []wire.HistoryItem{}
	for _, kve := range revs {
		var e machine.Entry
		if kve.Operation() != jetstream.KeyValuePut || json.Unmarshal(kve.Value(), &e) != nil {
			continue
		}
		for _, t := range e.Transitions() {
			if !t.Event.Silent() {
				items = append(items, wire.HistoryItem{Transition: *t, Revision: kve.Revision()})
			}
		}
	}
	return items, nil
}
