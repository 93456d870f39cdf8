// Package faultsuite holds toolgate's fault tests: they build the toolgate
// binary once, run `toolgate serve` and its roles as real processes (on
// an embedded server, or on a cluster of real nats-server processes) and
// break them while agents, approvers and executors work: SIGKILLed
// processes (crash_test.go, agents_crash_test.go, executor_crash_test.go,
// timer_test.go), killed roles, followers and leaders (TestFaults),
// network partitions (TestPartitions), a full disk, a whole cluster
// restarted and JetStream's limits reached (TestResource_), a long soak
// (build tag soak), and the restart benchmark. Each then checks what
// toolgate promises: no call lost, no transition applied twice, every
// event once, no tool run twice or unapproved, every agent answered.
// docs/faults.md says how to run the long versions and what they measured.
//
// The package has no code of its own: it is its tests, apart from the
// CLI's, so that `go test ./...` runs the two side by side.
package faultsuite
