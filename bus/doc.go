// Package bus is everything toolgate does with NATS: the embedded server,
// connecting to external ones, provisioning the KV bucket and streams, the
// KV-backed machine.Store, the relay that turns every stored revision into
// an event, and the durable consumer runner the other roles are built on.
package bus
