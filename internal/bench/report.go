package bench

import (
	"slices"
	"time"
)

// Report is what a run of the bench measured.
type Report struct {
	Agents int    `json:"agents"`
	Calls  int    `json:"calls"` // lifecycles a path
	Target string `json:"target"`
	// Sync is how an embedded toolgate's server synced its writes.
	Sync string `json:"sync,omitempty"`
	// CASPerSec is the raw KV compare-and-set rate of the same server, in
	// the same run, by as many writers as agents: the baseline, on a
	// bucket of CASReplicas replicas, as many as toolgate's calls have.
	CASPerSec   float64 `json:"casPerSec"`
	CASReplicas int     `json:"casReplicas"`
	Paths       []Path  `json:"paths"`
	Host        Host    `json:"host"`
}

// Host is the machine the bench ran on.
type Host struct {
	CPUs int    `json:"cpus"`
	Load string `json:"load,omitempty"` // /proc/loadavg at the start
}

// Path is one kind of lifecycle's figures.
type Path struct {
	Name          string       `json:"name"` // approval, auto
	PerSec        float64      `json:"lifecyclesPerSec"`
	Ratio         float64      `json:"ratioToCAS"` // PerSec / CASPerSec
	SubmitResult  Percentiles  `json:"submitToResultMs"`
	DecideHandler *Percentiles `json:"decisionToHandlerMs,omitempty"`
	// Hops splits decision→handler at the timestamps the NATS server gave
	// what each step stored (the approval path only).
	Hops []Hop `json:"decisionToHandlerHops,omitempty"`
	// CPUMs is the CPU time per lifecycle of the process measured: this
	// one when embedded (toolgate and the bench's clients), that of
	// Config.ServePID otherwise; 0 when neither.
	CPUMs float64 `json:"cpuMsPerLifecycle,omitempty"`
	// Messages is how many messages the NATS server took in and sent
	// out per lifecycle, over every connection (toolgate's, the
	// bench's; on a cluster, every server's, routes included); 0 when
	// the bench cannot read the servers' statistics.
	Messages float64 `json:"messagesPerLifecycle,omitempty"`
	// Consumers is how many JetStream consumers were created or deleted
	// per lifecycle (JetStream's advisories in toolgate's account): 0
	// when no call costs one, as none should.
	Consumers float64 `json:"consumersPerLifecycle"`
}

// Hop is one step of decision→handler, from what one stored to what
// the next did: the decision committed (the approval's revision in
// tool_calls), the call claimed (its EXECUTING revision: toolgate's work
// queue saw the approval and claimed it for an executor; the approval's
// own, when its write claimed the call for the executor waiting), the
// handler started.
type Hop struct {
	Name string `json:"name"`
	Percentiles
}

// Percentiles are a measure's median, 99th percentile and most, in
// milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Percentiles{P50: ms(ds[len(ds)/2]), P99: ms(ds[len(ds)*99/100]), Max: ms(ds[len(ds)-1])}
}
