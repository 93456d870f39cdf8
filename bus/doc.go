// Package bus is toolgate's contract on NATS JetStream, and its store of
// the calls: what a team needs to write its own consumer or run its own
// provisioning.
//
// Provision creates or updates the buckets and streams (Topology says
// how, Buckets is what it made): their names and subjects are wire's, and
// their configurations Provision's (ProvisionAnalytics for the analytics'
// bucket). Connect dials NATS servers as ConnConfig says, and a Conn is
// that connection as a process holds it, to publish, listen and request
// over. KVStore is machine.Store over the tool_calls bucket, one key per
// pendingId: every write a compare-and-set, each request bounded and
// asked again while unanswered, JetStream's errors turned into machine's
// (machine.ErrConflict, machine.ErrNotFound).
//
// toolgate's own feeds and stores over these are under internal/bus; the
// embedded server is internal/bus/embedded, so that what links bus need
// not link a NATS server.
package bus
