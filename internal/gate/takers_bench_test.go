package gate

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkTakersReserve is what a command that makes a call runnable
// pays to find a request for work of its tool waiting, when 1,000
// executors each keep 16 waiting for tools of their own and one serves
// the call's: a reservation and its release.
func BenchmarkTakersReserve(b *testing.B) {
	var ts takers
	for x := range 1000 {
		for range 16 {
			ts.wait(ts.add(fmt.Sprint("exec/", x), []string{fmt.Sprint("tool-", x)}, time.Minute), true)
		}
	}
	for range 16 {
		ts.wait(ts.add("exec/deployer", []string{"deploy"}, time.Minute), true)
	}
	for b.Loop() {
		t := ts.reserve("deploy")
		if t == nil {
			b.Fatal("no request of deploy waits")
		}
		ts.handOver(t, nil)
	}
}
