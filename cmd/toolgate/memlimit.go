package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimit is serve's soft limit on the Go runtime's memory
// (debug.SetMemoryLimit) when GOMEMLIMIT is not set: a share of the
// memory limit of the process's cgroup (a container's), a size, or none.
//
// With Go's defaults the heap grows to about twice what is live between
// collections; in a container whose memory is limited, a process whose
// live heap fits would then be killed for memory it could have
// collected. Under a soft limit the collector runs more often as the
// heap nears it instead (at most about half the CPU, Go's own bound, so
// a live heap over the limit slows the process rather than stopping it).
// Without a cgroup limit (or with GOMEMLIMIT set) the percentage does nothing:
// serve cannot know what else the machine runs.
type memoryLimit struct {
	Percent float64 // of the cgroup's limit, in (0, 100]; 0 with Bytes or none
	Bytes   int64   // a size; 0 with Percent or none
}

// defaultMemoryLimit is 90% of the cgroup's memory limit, the rest left
// to what is not the Go heap (the binary, stacks, the kernel's buffers of
// the embedded server's files).
var defaultMemoryLimit = memoryLimit{Percent: 90}

// String implements flag.Value.
func (l *memoryLimit) String() string {
	switch {
	case l.Percent > 0:
		return strconv.FormatFloat(l.Percent, 'f', -1, 64) + "%"
	case l.Bytes > 0:
		return strconv.FormatInt(l.Bytes, 10)
	}
	return "off"
}

// Set implements flag.Value: "off" (or 0), a percentage of the cgroup's
// limit ("90%"), or a size in bytes with an optional unit, as GOMEMLIMIT
// takes them ("900MiB", "2GiB").
func (l *memoryLimit) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "off" || s == "0" {
		*l = memoryLimit{}
		return nil
	}
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(pct, 64)
		if err != nil || v <= 0 || v > 100 {
			return fmt.Errorf("%q: a percentage from 0 to 100 of the cgroup's memory limit", s)
		}
		*l = memoryLimit{Percent: v}
		return nil
	}
	units := []struct {
		suffix string
		scale  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	num, scale := s, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, scale = n, u.scale
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64/scale {
		return fmt.Errorf("%q: off, a percentage of the cgroup's memory limit (90%%) or a size (900MiB, 2GiB)", s)
	}
	*l = memoryLimit{Bytes: v * scale}
	return nil
}

// apply sets the soft memory limit, unless GOMEMLIMIT is set, and logs
// what it set.
func (l memoryLimit) apply(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("memory limit: GOMEMLIMIT's", "bytes", debug.SetMemoryLimit(-1))
		return
	}
	bytes := l.Bytes
	if l.Percent > 0 {
		max, ok := cgroupMemoryMax("/")
		if !ok {
			return // no container's limit to take a share of
		}
		bytes = int64(float64(max) * l.Percent / 100)
	}
	if bytes <= 0 {
		return
	}
	debug.SetMemoryLimit(bytes)
	log.Info("memory limit", "bytes", bytes, "from", l.String())
}

// cgroupMemoryMax is the memory limit of the process's cgroup, v2 or v1,
// read under root ("/" but in tests), and false when there is none.
func cgroupMemoryMax(root string) (int64, bool) {
	f, err := os.Open(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var files []string
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		// hierarchy-ID:controllers:path; v2's is "0::/path".
		parts := strings.SplitN(lines.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = append(files, filepath.Join("sys/fs/cgroup", parts[2], "memory.max"), "sys/fs/cgroup/memory.max")
		case strings.Contains(","+parts[1]+",", ",memory,"):
			files = append(files, filepath.Join("sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"), "sys/fs/cgroup/memory/memory.limit_in_bytes")
		}
	}
	// The process's own cgroup's file; in a container, whose cgroup
	// namespace may not show the path, the root's.
	for _, name := range files {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 { // "max", or v1's no limit (a huge number)
			return 0, false
		}
		return v, true
	}
	return 0, false
}
