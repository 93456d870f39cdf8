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

// RecentStore is a Store that remembers some of the entries it wrote
// lately (bus.KVStore: the runnable ones), each at its revision: a
// command that names the revision it expects an entry at (ClaimAt)
// starts from the remembered one.
type RecentStore interface {
	Store
	// Recent returns the entry at revision if it is remembered, a copy
	// the caller may change.
	Recent(pendingID string, revision uint64) (*Entry, bool)
	// Latest returns the latest revision of the entry remembered, if
	// any: a copy, and its revision.
	Latest(pendingID string) (*Entry, uint64, bool)
}
