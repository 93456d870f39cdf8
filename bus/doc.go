// Package bus is everything toolgate does with NATS: connecting,
// provisioning the buckets and streams, the KV-backed machine.Store, the
// relay that turns every stored revision into an event, the durable
// consumer runner the other roles are built on, and the request API. The
// embedded server is in bus/embedded, so that agents linking the client
// do not link a NATS server.
package bus
