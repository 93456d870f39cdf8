// Package machine is toolgate's domain: the PendingToolCallEntry, its states
// and events, the one transition table that says what may follow what (and
// what each event is called outside, and whether humans hear of it), and
// Machine, whose commands (Submit, Decide, Claim, Complete, Fail, Cancel,
// Expire) move an entry through a Store by compare-and-set.
//
// Nothing here knows about NATS or HTTP; adapters implement Store.
package machine
