// Package consumer runs handlers over durable JetStream consumers
// (Runner; a Handler takes a Msg, what of the message it reads): acks
// after the handler succeeds, redelivery with backoff when it fails (or
// after the delay a RetryAfter error asks for), dead letters after the
// last delivery (at once for a Permanent error), and restarts after
// JetStream errors. The notifier's fan-out and deliveries, the reviewer
// and the budget settler are Runners.
//
// Its other pieces serve every long-running loop of toolgate's server
// over JetStream, Runner or not: RunRestarting runs one again after a
// failure (the relay, the feeds of tool_calls and TOOL_EVENTS, the
// analytics, the metrics exporter), WatchStall ends a run whose durable
// consumer stalls (a Runner's, the relay's: stall.go), Retry retries a
// step at start, and
// Applied is the set of stream sequences an aggregate has taken in, which
// makes a consumer idempotent. Durables, Durable, Delete, Consumers,
// Bounds and Publish are what the workers, the metrics and the analytics
// ask of JetStream beside a Runner, so that they import no nats.go.
//
// Only toolgate's server runs consumers: executors take their work
// through the request API (toolgate.work), and agents await their calls
// on core NATS subjects.
package consumer
