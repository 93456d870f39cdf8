package views

import (
	"context"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus/jsio"
	"github.com/toolgate/toolgate/wire"
)

// ArchivedIDs is what a process knows of which calls TOOL_ARCHIVE holds,
// so that a submit asks the archive only about a call it may hold, not
// about every new one (a lookup a submit: a tenth of the lifecycles a
// second; docs/performance.md). It keeps every archived pendingId in a
// Bloom filter of a fixed 4 MiB (archivedBloom), read from the stream's
// subjects (headers only: no call is sent) and followed, so its memory
// does not grow with the archive; an id it wrongly may hold only costs
// a lookup.
//
// A call is archived, then purged from tool_calls. A process whose watch
// of the bucket (View) shows a call purged before its follow of the
// archive (Follow) shows it archived holds it as retired meanwhile, so a
// retry submitted in between is looked up too.
type ArchivedIDs struct {
	js   jetstream.JetStream
	seed maphash.Seed

	mu sync.Mutex
	// ids holds the archived pendingIds, nil while the follow has not
	// read the stream to its end.
	ids archivedBloom
	// retired are the calls the bucket's watch showed purged that the
	// follow has not shown archived yet, with when.
	retired map[string]time.Time
	pruned  time.Time // when retired last lost those held too long
}

// NewArchivedIDs returns the ids of js's archive, none known until Follow
// has read them.
func NewArchivedIDs(js jetstream.JetStream) *ArchivedIDs {
	return &ArchivedIDs{js: js, seed: maphash.MakeSeed(), retired: map[string]time.Time{}}
}

// MayHold reports whether the archive may hold pendingID: false only when
// it certainly does not.
func (a *ArchivedIDs) MayHold(pendingID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		return true
	}
	_, retired := a.retired[pendingID]
	return retired || a.ids.has(maphash.String(a.seed, pendingID))
}

// Follow reads the archive's ids and follows it until ctx ends, again
// after a failure (MayHold says true meanwhile).
func (a *ArchivedIDs) Follow(ctx context.Context, log *slog.Logger) error {
	prefix := wire.ArchiveSubject("")
	unsync := func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ids = nil
	}
	cfg := jetstream.OrderedConsumerConfig{HeadersOnly: true}
	return jsio.FollowStream(ctx, log, "archived ids", a.js, wire.ArchiveStream, cfg, unsync, func() (func(jetstream.Msg, *jetstream.MsgMetadata), func()) {
		ids, synced := newArchivedBloom(), false
		apply := func(msg jetstream.Msg, _ *jetstream.MsgMetadata) {
			id, ok := strings.CutPrefix(msg.Subject(), prefix)
			if !ok {
				return
			}
			h := maphash.String(a.seed, id)
			if !synced {
				ids.add(h)
				return
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			ids.add(h)
			delete(a.retired, id)
		}
		loaded := func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.ids, synced = ids, true
			for id := range a.retired {
				if ids.has(maphash.String(a.seed, id)) {
					delete(a.retired, id)
				}
			}
		}
		return apply, loaded
	})
}

// retiredFor is how long a call purged from the bucket is held as retired
// at most, should its archiving never show (a purge toolgate did not
// make, or a call the archive let age out): far beyond the follow's lag,
// which a stalled consumer ends within seconds, by nats.go remaking it
// or by the follow failing and saying every call may be held. An hour of
// retirements is a few thousand ids.
const retiredFor = time.Hour

// View is the watch of tool_calls that tells the ids of the calls purged
// from it (retired) before the follow shows them archived.
func (a *ArchivedIDs) View() CallsView {
	return CallsView{Start: func() (func(CallRevision), func()) {
		apply := func(r CallRevision) {
			if !r.Removed {
				return
			}
			now := time.Now()
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.ids != nil && a.ids.has(maphash.String(a.seed, r.Key)) {
				return
			}
			if now.Sub(a.pruned) > retiredFor {
				for id, at := range a.retired {
					if now.Sub(at) > retiredFor {
						delete(a.retired, id)
					}
				}
				a.pruned = now
			}
			a.retired[r.Key] = now
		}
		return apply, func() {}
	}}
}

// archivedBloom is a Bloom filter of archivedBloomBits bits, each id set
// in archivedBloomHashes of them (double hashing of its 64-bit hash): it
// may wrongly hold an id about 1 time in 6,000 with a million ids in it,
// 1 in 4 with ten million, whatever its memory.
type archivedBloom []uint64

const (
	archivedBloomBits   = 1 << 25 // 4 MiB
	archivedBloomHashes = 4
)

func newArchivedBloom() archivedBloom { return make(archivedBloom, archivedBloomBits/64) }

func (b archivedBloom) add(h uint64) {
	for i := range uint64(archivedBloomHashes) {
		bit := bloomBit(h, i)
		b[bit/64] |= 1 << (bit % 64)
	}
}

func (b archivedBloom) has(h uint64) bool {
	for i := range uint64(archivedBloomHashes) {
		if bit := bloomBit(h, i); b[bit/64]&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

// bloomBit is h's i-th bit: (h1 + i·h2) mod the filter's size, h1 and h2
// the halves of h.
func bloomBit(h, i uint64) uint64 {
	return ((h & 0xffffffff) + i*(h>>32)) % archivedBloomBits
}
