// Package consumer runs handlers over durable JetStream consumers: acks
// after the handler succeeds, redelivery with backoff when it fails, dead
// letters after the last delivery, and restarts after JetStream errors.
// Every consumer of toolgate's, in its server and in executors, is one.
package consumer
