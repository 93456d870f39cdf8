package worker

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// waitingTests is how many of this package's tests run at once unless
// -parallel says: they mostly wait (for deadlines, leases and retries
// due a second or two away) rather than compute, and two at a time
// (GOMAXPROCS on two cores, go test's default) left the cores idle while
// the package ran last in the suite (28 s; 19 s four at a time).
const waitingTests = 4

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if p := flag.Lookup("test.parallel"); !set && p != nil {
		if n, _ := strconv.Atoi(p.Value.String()); n < waitingTests {
			_ = p.Value.Set(strconv.Itoa(waitingTests))
		}
	}
	os.Exit(m.Run())
}
