// Package views is what a toolgate process keeps in memory of tool_calls
// and TOOL_EVENTS, each following its stream.
//
// The process's one watch of tool_calls (CallsFeed) decodes each revision
// once, into a CallHead, for every view of the bucket the process keeps:
// the call index (CallIndex: a summary of every call, found by id in a
// table of slots, and the stored JSON of the open ones written last),
// the executors' work queue (WorkQueue) and the ids of the archived calls
// (ArchivedIDs, a Bloom filter of the pendingIds on TOOL_ARCHIVE). The
// process's one reader of TOOL_EVENTS (EventsFeed, or FollowEvents for
// one reader alone) serves those who follow the events in order without a
// durable consumer.
//
// A bus.KVStore given the index and the work queue reads the one and
// tells the other what it wrote.
package views
