// Package machine is toolgate's domain: the PendingToolCallEntry, its states
// and events, the one transition table that says what may follow what (and
// what each event is called outside, and whether humans hear of it), and
// Machine, whose commands (Submit, Decide, Escalate, Remind, Claim,
// Heartbeat, Retry, Complete, Fail, Cancel, Expire, AbandonLease) move an
// entry through a Store by compare-and-set; with a Signer (WithSigner),
// every transition but a heartbeat appends a signed receipt in the same
// write (VerifyReceipts checks a chain).
//
// Nothing here knows about NATS or HTTP; adapters implement Store.
package machine
