// Package jsio is how toolgate's server reads and writes JetStream so
// that a lost stream leader, a slow server or a full store is answered
// rather than waited out: bounded requests asked again while they go
// unanswered (Attempts, Get, Write), the one compare-and-set loop of
// every read-modify-write (Update, UpdateHeld), following a bucket or a
// stream through an ordered consumer remade where it stopped
// (FollowBucket, FollowStream), and reading a bucket's current values
// (WatchValues) and its entries as stored (DecodeEntry).
//
// bus's KVStore and provisioning, and the feeds and stores under
// internal/bus, are built on it.
package jsio
