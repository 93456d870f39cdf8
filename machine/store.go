package machine

import "context"

// Store keeps entries, each under its PendingID with a revision that every
// write bumps. Implementations: bus.KVStore (NATS JetStream KV).
type Store interface {
	// Create stores a new entry; ErrExists if its PendingID is taken.
	Create(ctx context.Context, e *Entry) (revision uint64, err error)
	// Get returns the entry and its revision; ErrNotFound if there is none.
	Get(ctx context.Context, pendingID string) (*Entry, uint64, error)
	// Update replaces the entry only if it is still at revision;
	// ErrConflict if another writer got there first.
	Update(ctx context.Context, e *Entry, revision uint64) (uint64, error)
	// ListConversation returns one conversation's entries without reading
	// any other conversation's.
	ListConversation(ctx context.Context, conversationID string) ([]*Entry, error)
}

// RecentStore is a Store that remembers some entries, each at its
// revision (bus.KVStore: the runnable ones it wrote lately, and with the
// index of the bucket every open one): a command that names the revision
// it expects an entry at (ClaimAt) starts from the remembered one, and
// the others from the latest remembered. A compare-and-set on that
// revision tells whether it is still the entry.
type RecentStore interface {
	Store
	// Recent returns the entry at revision if it is remembered, a copy
	// the caller may change.
	Recent(pendingID string, revision uint64) (*Entry, bool)
	// Latest returns the latest revision of the entry remembered, if
	// any: a copy, and its revision.
	Latest(pendingID string) (*Entry, uint64, bool)
}

// An AbsenceStore knows, of some pendingIds, without a read, that no
// entry holds them (bus.KVStore with the index of the bucket): a submit
// of a new call then writes it without reading first. It may not know
// of an entry written a moment ago; a submit of that call finds it when
// its create is refused.
type AbsenceStore interface {
	Absent(pendingID string) bool
}
