package stores_test

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/policy"
)

// BenchmarkBudgetReserve is a reservation on one team's day, a read and a
// compare-and-set of the ledger's value (jsio.Update), on a single node:
// "alone" is one reserver, each write the first to land; "racing" is
// bustest.BenchParallelism reservers per core on the same day, so that writes
// conflict and are read and made again. The embedded server shares the
// cores, so "cpu-µs/op", the process's CPU per reservation (the server's
// too), is steadier than ns/op on a busy machine.
func BenchmarkBudgetReserve(b *testing.B) {
	const day = "2026-11-27"
	amount, limit := policy.MicrosOf(0.001), policy.MicrosOf(1e9)
	reserve := func(b *testing.B, l *stores.BudgetLedger) bool {
		ok, err := l.Reserve(context.Background(), "support", day, amount, limit)
		if err != nil || !ok {
			b.Errorf("reserve: %v, %v", ok, err)
			return false
		}
		return true
	}
	cpuPerOp := func(b *testing.B, f func()) {
		cpu0 := bustest.CPUTime()
		f()
		b.ReportMetric(float64((bustest.CPUTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	b.Run("alone", func(b *testing.B) {
		env := bustest.Start(b, bustest.Topologies[0])
		l := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)
		b.ResetTimer()
		cpuPerOp(b, func() {
			for range b.N {
				if !reserve(b, l) {
					return
				}
			}
		})
	})
	b.Run("racing", func(b *testing.B) {
		env := bustest.Start(b, bustest.Topologies[0])
		l := stores.NewBudgetLedger(env.JS, env.Buckets.Budgets)
		b.SetParallelism(bustest.BenchParallelism)
		b.ResetTimer()
		cpuPerOp(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !reserve(b, l) {
						return
					}
				}
			})
		})
	})
}
