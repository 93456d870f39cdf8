// Package consumer runs handlers over durable JetStream consumers: acks
// after the handler succeeds, redelivery with backoff when it fails (or
// after the delay a RetryAfter error asks for), dead letters after the
// last delivery, and restarts after JetStream errors (RunRestarting, which
// every other long-running loop over JetStream uses too). Every consumer
// of toolgate's, in its server and in executors, is one.
package consumer
