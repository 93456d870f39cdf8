package views

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/machine"
)

// CallIndex is a process's view of the tool_calls bucket, kept by a
// watch of it (Follow, or the process's CallsFeed: View), so that listing calls across conversations reads
// memory rather than every entry in the bucket. It holds a small summary
// of every call (what lists filter and sort on) and the stored JSON of
// the open calls written last (maxOpenJSON bytes of them), decoded when a
// page or a command asks for it; any other call's entry is read from the
// bucket when a page shows it. So its memory is a summary a call, however
// many calls are open. It only reads: gate is the bucket's one writer.
//
// A bus.KVStore given the index (WithIndex) starts commands on open calls
// from the index's latest revision (Latest) and knows, without a read,
// that a pendingId holds no entry yet (Absent).
//
// Its answers are as fresh as the caller's own writes: Current waits
// until the index has applied everything the bucket's stream held when
// it was asked. While it does not follow the bucket (starting, or
// watching again after a failure), it says so, and callers read the
// bucket as they did without it.
type CallIndex struct {
	kv jetstream.KeyValue
	js jetstream.JetStream // nil: no gap checks (see Current)

	mu sync.RWMutex
	// st is the bucket as of st.applied while synced (Follow has read the
	// bucket and is watching it), nil otherwise.
	st *indexState
	// wake, when not nil, is closed at the next change of st: the waiters
	// of Current wait on it.
	wake chan struct{}

	streamMu sync.Mutex
	stream   jetstream.Stream // looked up at the first gap check
}

// indexState is the index's copy of the bucket.
type indexState struct {
	// applied is the stream sequence of the last message applied.
	applied uint64
	// calls holds the summaries, each call at a slot of its own: byID
	// finds a call's slot, order holds the slots by requestedAt, then
	// pendingId, those of keys gone too (removed), until there are enough
	// to compact; then their slots are free for new calls.
	calls   []callSummary
	free    []uint32
	byID    idTable
	order   []uint32
	removed int
	// names interns the states, tool names and callers summaries hold,
	// so that 100k summaries of a few tools hold a few strings.
	names names
	// loading: the bucket is being read; order is sorted once it is.
	loading bool
	// open holds the JSON of the open calls written last, by slot, at
	// most maxOpenJSON bytes of it (openBytes); openQueue the slots that
	// took some, oldest first, each at the revision it took it at (a
	// later revision leaves a stale reference behind).
	open      map[uint32][]byte
	openQueue []openRef
	openBytes int
}

func newIndexState(loading bool) *indexState {
	return &indexState{byID: newIDTable(), open: map[uint32][]byte{}, names: names{ix: map[string]uint32{}}, loading: loading}
}

// openRef is a slot that took an open call's JSON at rev.
type openRef struct {
	slot uint32
	rev  uint64
}

// maxOpenJSON bounds the bytes of open calls' JSON the index holds:
// about 14,000 entries of 1.2 KB, those written last, which decisions
// and lists of recent calls start from.
const maxOpenJSON = 16 << 20

// callSummary is what the index keeps of a call, all a list filters and
// sorts on, in 48 bytes: its id (the key, whose string the index shares
// with the message it came in), when it was requested, its latest
// revision, and its state, tool and caller as indexes of the interned
// names.
type callSummary struct {
	id                      string
	requestedAt             int64
	rev                     uint64
	status, tool, callerBot uint32
	hasOpen                 bool // its JSON at rev is in indexState.open
	removed                 bool
}

// names interns strings, each given an index for ever.
type names struct {
	list []string
	ix   map[string]uint32
}

func (n *names) intern(s string) uint32 {
	if i, ok := n.ix[s]; ok {
		return i
	}
	i := uint32(len(n.list))
	n.list = append(n.list, s)
	n.ix[s] = i
	return i
}

// matcher is a filter's value as an index of names: any matches every
// call, and a string never interned matches none.
type matcher struct {
	any, none bool
	i         uint32
}

func (n *names) matcher(s string) matcher {
	if s == "" {
		return matcher{any: true}
	}
	i, ok := n.ix[s]
	return matcher{none: !ok, i: i}
}

func (m matcher) match(i uint32) bool { return m.any || !m.none && m.i == i }

// NewCallIndex returns an index of the calls in kv, empty and not synced
// until Follow reads the bucket. js finds the bucket's stream (see
// Current); it may be nil.
func NewCallIndex(js jetstream.JetStream, kv jetstream.KeyValue) *CallIndex {
	return &CallIndex{js: js, kv: kv}
}

// Follow keeps the index current until ctx ends, from a watch of its
// own (a process with other views of the bucket shares one: View),
// watching the bucket again after a failure; meanwhile the index is not
// synced.
func (x *CallIndex) Follow(ctx context.Context, log *slog.Logger) error {
	f := NewCallsFeed(x.js, x.kv)
	f.Add(x.View(log))
	return f.Run(ctx, log)
}

// View is the index as a view of a CallsFeed.
func (x *CallIndex) View(log *slog.Logger) CallsView {
	return CallsView{Unsync: x.unsync, Start: func() (func(CallRevision), func()) {
		// Built aside while the bucket is read, swapped in when it is.
		loading := newIndexState(true)
		apply := func(r CallRevision) {
			if loading != nil {
				if loading.applied == 0 {
					loading.reserve(int(r.Remaining) + 1)
				}
				loading.apply(r, log)
				return
			}
			x.mu.Lock()
			x.st.apply(r, log)
			x.wakeLocked()
			x.mu.Unlock()
		}
		loaded := func() {
			loading.loaded()
			x.mu.Lock()
			x.st = loading
			x.wakeLocked()
			x.mu.Unlock()
			loading = nil
		}
		return apply, loaded
	}}
}

func (x *CallIndex) unsync() {
	x.mu.Lock()
	x.st = nil
	x.wakeLocked()
	x.mu.Unlock()
}

// wakeLocked wakes the waiters of Current. x.mu is held.
func (x *CallIndex) wakeLocked() {
	if x.wake != nil {
		close(x.wake)
		x.wake = nil
	}
}

// Synced reports whether the index follows the bucket.
func (x *CallIndex) Synced() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.st != nil
}

// apply records one message of the bucket's stream.
func (st *indexState) apply(r CallRevision, log *slog.Logger) {
	st.applied = max(st.applied, r.Revision)
	key := r.Key
	slot, known := st.byID.find(st.calls, key)
	if r.Removed {
		// Deleted or purged (a retired call): gone from lists.
		if known {
			st.remove(slot)
		}
		return
	}
	head := r.Head
	if head == nil {
		log.Warn("call index: unreadable entry, left out", "key", key, "revision", r.Revision, "err", r.Err)
		if known {
			st.remove(slot)
		}
		return
	}
	var open []byte
	if !head.Status.Terminal() {
		// Kept as stored, decoded when asked for: most revisions of an
		// open call are followed by the next before anyone lists or
		// decides it, and the JSON is a third of the decoded entry's size.
		open = r.Value
	}
	if known && st.calls[slot].requestedAt != head.RequestedAt {
		st.remove(slot) // its place in the order moved (never, as entries are written)
		known = false
	}
	if !known {
		// The key is the pendingId (bus.KVStore writes an entry under it).
		slot = st.add(callSummary{id: key, requestedAt: head.RequestedAt})
	}
	c := &st.calls[slot]
	c.status = st.names.intern(string(head.Status))
	c.tool = st.names.intern(head.ToolName)
	c.callerBot = st.names.intern(head.CallerBotID)
	st.setOpen(slot, r.Revision, open)
}

// reserve makes room for n calls more.
func (st *indexState) reserve(n int) {
	st.calls = slices.Grow(st.calls, n)
	st.order = slices.Grow(st.order, n)
	st.byID.reserve(st.calls, st.byID.n+n)
}

// add puts c in a free slot, or a new one, and in the order.
func (st *indexState) add(c callSummary) uint32 {
	var slot uint32
	if n := len(st.free); n > 0 {
		slot = st.free[n-1]
		st.free = st.free[:n-1]
		st.calls[slot] = c
	} else {
		slot = uint32(len(st.calls))
		st.calls = append(st.calls, c)
	}
	st.byID.add(st.calls, slot)
	st.insert(slot)
	return slot
}

// setOpen records the latest revision of the call at slot and the open
// call's JSON at it (nil: finished), and lets go of the oldest JSON
// beyond maxOpenJSON.
func (st *indexState) setOpen(slot uint32, rev uint64, open []byte) {
	st.letGo(slot)
	c := &st.calls[slot]
	c.rev = rev
	if open == nil {
		return
	}
	c.hasOpen = true
	st.open[slot] = open
	st.openBytes += len(open)
	st.openQueue = append(st.openQueue, openRef{slot: slot, rev: rev})
	for st.openBytes > maxOpenJSON && len(st.openQueue) > 0 {
		ref := st.openQueue[0]
		st.openQueue = st.openQueue[1:]
		if st.holds(ref) {
			st.letGo(ref.slot)
		}
	}
	if len(st.openQueue) > 1024 && len(st.openQueue) > 2*len(st.open) {
		// Mostly stale references: keep the live ones.
		st.openQueue = slices.DeleteFunc(slices.Clone(st.openQueue), func(ref openRef) bool { return !st.holds(ref) })
	}
}

// holds reports whether ref's slot holds JSON taken at ref's revision (a
// slot's revisions only grow, and a slot taken by another call has a
// revision of its own).
func (st *indexState) holds(ref openRef) bool {
	c := &st.calls[ref.slot]
	return c.hasOpen && c.rev == ref.rev
}

// letGo drops the JSON the call at slot holds, if any.
func (st *indexState) letGo(slot uint32) {
	if c := &st.calls[slot]; c.hasOpen {
		st.openBytes -= len(st.open[slot])
		delete(st.open, slot)
		c.hasOpen = false
	}
}

// before orders summaries as lists do: oldest first, then by id.
func before(at int64, id string, c *callSummary) int {
	return cmp.Or(cmp.Compare(at, c.requestedAt), strings.Compare(id, c.id))
}

func (st *indexState) insert(slot uint32) {
	if st.loading {
		st.order = append(st.order, slot) // sorted once loaded
		return
	}
	// Mostly at the end: calls are submitted in time order.
	c := &st.calls[slot]
	i := len(st.order)
	if i > 0 && before(c.requestedAt, c.id, &st.calls[st.order[i-1]]) < 0 {
		i, _ = slices.BinarySearchFunc(st.order, c, func(o uint32, c *callSummary) int { return -before(c.requestedAt, c.id, &st.calls[o]) })
	}
	st.order = slices.Insert(st.order, i, slot)
}

// remove drops the call at slot: from byID at once, from order (its slot
// freed) at the next compaction.
func (st *indexState) remove(slot uint32) {
	c := &st.calls[slot]
	st.byID.remove(st.calls, c.id)
	st.setOpen(slot, c.rev, nil)
	c.removed = true
	st.removed++
	if st.removed > 1024 && st.removed > len(st.order)/4 {
		st.compact()
	}
}

func (st *indexState) compact() {
	st.order = slices.DeleteFunc(st.order, func(slot uint32) bool {
		if !st.calls[slot].removed {
			return false
		}
		st.calls[slot] = callSummary{}
		st.free = append(st.free, slot)
		return true
	})
	st.removed = 0
}

// loaded sorts what the bucket held.
func (st *indexState) loaded() {
	st.loading = false
	st.compact()
	slices.SortFunc(st.order, func(a, b uint32) int { return before(st.calls[a].requestedAt, st.calls[a].id, &st.calls[b]) })
}

// CallFilter says which calls a page holds: those after the cursor
// (requestedAt, then pendingId, as lists order them) with the status,
// tool and caller given ("" matches any).
type CallFilter struct {
	Status      machine.State
	ToolName    string
	CallerBotID string
	// ConversationID selects a conversation's calls: those whose
	// pendingId starts with its key (machine.PendingID).
	ConversationID string
	// After, when set, is the cursor: the page starts past
	// (AfterAt, AfterID).
	After   bool
	AfterAt int64
	AfterID string
}

// IndexedCall is one call of a page: its id, and its entry when the
// index holds it (an open call written lately; without its receipts,
// which lists leave out). Any other call's entry is the bucket's.
type IndexedCall struct {
	PendingID string
	Entry     *machine.Entry
}

// Page returns the first n calls f selects, in list order, and false
// when the index is not synced.
func (x *CallIndex) Page(f CallFilter, n int) ([]IndexedCall, bool) {
	page, open, ok := x.page(f, n)
	for i, data := range open {
		if data == nil {
			continue
		}
		if e, err := jsio.DecodeEntry(data); err == nil {
			e.Receipts = nil // lists answer without them (gate.Service.shown)
			page[i].Entry = e
		}
	}
	return page, ok
}

// page cuts a page under the lock, with the JSON of each open call on it,
// for Page to decode without the lock.
func (x *CallIndex) page(f CallFilter, n int) (page []IndexedCall, open [][]byte, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	st := x.st
	if st == nil {
		return nil, nil, false
	}
	i := 0
	if f.After {
		i, _ = slices.BinarySearchFunc(st.order, f, func(slot uint32, f CallFilter) int {
			if before(f.AfterAt, f.AfterID, &st.calls[slot]) >= 0 {
				return -1 // at or before the cursor
			}
			return 1
		})
	}
	status, tool, caller := st.names.matcher(string(f.Status)), st.names.matcher(f.ToolName), st.names.matcher(f.CallerBotID)
	conversation := ""
	if f.ConversationID != "" {
		conversation = machine.ConversationKey(f.ConversationID) + "."
	}
	page = []IndexedCall{}
	for _, slot := range st.order[i:] {
		if len(page) == n {
			break
		}
		c := &st.calls[slot]
		if c.removed || !status.match(c.status) || !tool.match(c.tool) || !caller.match(c.callerBot) || !strings.HasPrefix(c.id, conversation) {
			continue
		}
		page = append(page, IndexedCall{PendingID: c.id})
		var data []byte
		if c.hasOpen {
			data = st.open[slot]
		}
		open = append(open, data)
	}
	return page, open, true
}

// Latest returns the latest revision of an open call the index holds, as
// stored (receipts and all), if it is after the revision given, and false
// when it holds none: the call is finished, not written lately, unknown,
// or the index is not synced. It may be behind the bucket; a
// compare-and-set on the revision tells.
func (x *CallIndex) Latest(pendingID string, after uint64) (*machine.Entry, uint64, bool) {
	x.mu.RLock()
	var (
		data []byte
		rev  uint64
	)
	if x.st != nil {
		if slot, ok := x.st.byID.find(x.st.calls, pendingID); ok {
			data, rev = x.st.open[slot], x.st.calls[slot].rev
		}
	}
	x.mu.RUnlock()
	if data == nil || rev <= after {
		return nil, 0, false
	}
	e, err := jsio.DecodeEntry(data)
	if err != nil {
		return nil, 0, false
	}
	return e, rev, true
}

// Absent reports whether the index, synced, holds no call under
// pendingId: none was written up to what the index has applied, or it
// was retired. A call written a moment ago may not be in it yet.
func (x *CallIndex) Absent(pendingID string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.st == nil {
		return false
	}
	_, ok := x.st.byID.find(x.st.calls, pendingID)
	return !ok
}

// Len returns how many calls the index holds, and false when it is not
// synced.
func (x *CallIndex) Len() (int, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.st == nil {
		return 0, false
	}
	return x.st.byID.Len(), true
}

// Current waits until the index holds every write the bucket held when
// it was called (a caller that has just submitted or decided, then
// lists, sees its own write), and reports whether it does: false when
// the index is not synced, or did not catch up within catchUp, or the
// bucket's state could not be read; the caller then reads the bucket.
// It returns ctx's error when ctx ends first.
//
// The bucket's last stream sequence is read with one request. A message
// the watch will never deliver (a retired call's purge marker that
// expired, the stream's last) would have the index wait for nothing:
// when a short wait does not see the index reach the sequence, it asks
// the stream whether any message is left between the two.
func (x *CallIndex) Current(ctx context.Context) (bool, error) {
	if !x.Synced() {
		return false, nil
	}
	sctx, cancel := context.WithTimeout(ctx, catchUp)
	status, err := jsio.Attempts(sctx, jsio.StoreAttempt, func(ctx context.Context) (jetstream.KeyValueStatus, error) { return x.kv.Status(ctx) })
	cancel()
	if err != nil {
		return false, ctx.Err() // the bucket, out of reach: the caller's read says how
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return false, nil
	}
	target := bs.StreamInfo().State.LastSeq
	deadline := time.Now().Add(catchUp)
	for {
		x.mu.Lock()
		if x.st == nil {
			x.mu.Unlock()
			return false, nil
		}
		applied := x.st.applied
		if applied >= target {
			x.mu.Unlock()
			return true, nil
		}
		if x.wake == nil {
			x.wake = make(chan struct{})
		}
		wake := x.wake
		x.mu.Unlock()

		step := time.NewTimer(min(gapCheck, time.Until(deadline)))
		select {
		case <-ctx.Done():
			step.Stop()
			return false, ctx.Err()
		case <-wake:
			step.Stop()
			continue
		case <-step.C:
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
		// Is anything left to deliver up to target?
		next, err := x.nextSeq(ctx, applied+1)
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, nil
		}
		if next == 0 || next > target {
			return true, nil // nothing: target was a message since removed
		}
	}
}

// catchUp bounds how long Current waits for the watch to deliver what
// the bucket holds (milliseconds, normally); gapCheck is how long it
// waits before asking the stream whether anything is left to deliver.
const (
	catchUp  = 2 * time.Second
	gapCheck = 100 * time.Millisecond
)

// nextSeq is the sequence of the first message of the bucket at or after
// seq, 0 when there is none.
func (x *CallIndex) nextSeq(ctx context.Context, seq uint64) (uint64, error) {
	if x.js == nil {
		return 0, errors.New("call index: no stream to ask")
	}
	x.streamMu.Lock()
	stream := x.stream
	x.streamMu.Unlock()
	if stream == nil {
		s, err := jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (jetstream.Stream, error) {
			return x.js.Stream(ctx, "KV_"+x.kv.Bucket())
		})
		if err != nil {
			return 0, err
		}
		x.streamMu.Lock()
		x.stream, stream = s, s
		x.streamMu.Unlock()
	}
	subject := fmt.Sprintf("$KV.%s.>", x.kv.Bucket())
	msg, err := jsio.Attempts(ctx, jsio.StoreAttempt, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	return msg.Sequence, nil
}
