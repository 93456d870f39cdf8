//go:build soak

package faultsuite

// The soak: the partition rig for an hour, a network fault each round,
// with every role's memory and goroutines sampled between rounds. Not in
// the default suite; docs/faults.md gives its command and its figures.

import (
	"bufio"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// soakFor is how long the soak runs: TOOLGATE_SOAK, or an hour.
func soakFor(t *testing.T) time.Duration {
	v := os.Getenv("TOOLGATE_SOAK")
	if v == "" {
		return time.Hour
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "TOOLGATE_SOAK: want a duration such as 1h, got %q", v)
	return d
}

// soakSample is what one role's process uses after a round.
type soakSample struct {
	rss        float64 // bytes resident
	goroutines float64
}

// TestSoak runs a scenario drawn at random from the partition scenarios,
// round after round (each with partitionCalls calls, its history
// checked), until TOOLGATE_SOAK has passed, and samples every role's
// resident memory and goroutines after each round. It fails if the last
// rounds' figures have grown past the early rounds' by more than noise
// allows, or if calls are left open.
func TestSoak(t *testing.T) {
	d, n := soakFor(t), partitionCalls(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TOOLGATE_SOAK_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "TOOLGATE_SOAK_SEED: want a number, got %q", v)
	}
	t.Logf("soak: %s, %d calls a round, TOOLGATE_SOAK_SEED=%d", d, n, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	rig := startPartitionRig(t, n)
	samples := map[string][]soakSample{}
	sample := func() {
		for name, addr := range rig.metrics {
			s, err := scrape(addr)
			require.NoError(t, err, "%s's /metrics", name)
			samples[name] = append(samples[name], s)
		}
	}
	sample()
	js := rig.admin[rig.c.servers[0].Name].js
	start := time.Now()
	for round := 1; time.Since(start) < d; round++ {
		sc := partitionScenarios[rng.IntN(len(partitionScenarios))]
		rig.run(t, fmt.Sprintf("%d %s", round, sc.name), fmt.Sprintf("%s%d", sc.slug, round), n, sc.fault)
		if t.Failed() {
			return
		}
		sample()
		rig.mark(t, "round %d done; %d calls open", round, len(unsettledCalls(t, js)))
	}
	require.Empty(t, unsettledCalls(t, js), "calls left open after the soak")

	for _, name := range slices.Sorted(maps.Keys(samples)) {
		s := samples[name]
		early, late := settled(s[:len(s)/2]), settled(s[len(s)/2:])
		t.Logf("figure: soak: %s: RSS %.0f MiB early, %.0f MiB late (max %.0f MiB); goroutines %.0f early, %.0f late",
			name, early.rss/(1<<20), late.rss/(1<<20), slices.MaxFunc(s, func(a, b soakSample) int { return int(a.rss - b.rss) }).rss/(1<<20),
			early.goroutines, late.goroutines)
		if late.rss > 1.5*early.rss+32<<20 {
			t.Errorf("%s: resident memory grew from %.0f MiB to %.0f MiB over the soak", name, early.rss/(1<<20), late.rss/(1<<20))
		}
		if late.goroutines > 1.25*early.goroutines+20 {
			t.Errorf("%s: goroutines grew from %.0f to %.0f over the soak", name, early.goroutines, late.goroutines)
		}
	}
}

// settled is the median of samples, each figure on its own.
func settled(s []soakSample) soakSample {
	if len(s) == 0 {
		return soakSample{}
	}
	median := func(f func(soakSample) float64) float64 {
		v := make([]float64, len(s))
		for i, x := range s {
			v[i] = f(x)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return soakSample{
		rss:        median(func(x soakSample) float64 { return x.rss }),
		goroutines: median(func(x soakSample) float64 { return x.goroutines }),
	}
}

// scrape reads a process's resident memory and goroutines off /metrics.
func scrape(addr string) (soakSample, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return soakSample{}, err
	}
	defer resp.Body.Close()
	var s soakSample
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var into *float64
		switch name {
		case "process_resident_memory_bytes":
			into = &s.rss
		case "go_goroutines":
			into = &s.goroutines
		default:
			continue
		}
		if *into, err = strconv.ParseFloat(value, 64); err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
		found++
	}
	if found != 2 {
		return s, fmt.Errorf("want process_resident_memory_bytes and go_goroutines, found %d of them", found)
	}
	return s, sc.Err()
}
