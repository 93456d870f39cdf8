package faultsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// revision is one write of an entry, as the bucket's stream holds it.
type revision struct {
	seq   uint64
	entry *machine.Entry
}

// readStream reads every message a stream holds now, through an ordered
// consumer (one request per message would take seconds for a long run),
// starting again while the cluster fails a read (a restarted member
// catching up can leave a consumer without responders for a moment).
func readStream(t *testing.T, js jetstream.JetStream, stream string) []jetstream.Msg {
	t.Helper()
	var msgs []jetstream.Msg
	var err error
	waitEvery(t, 2*time.Minute, time.Second, func() (bool, string) {
		msgs, err = tryReadStream(t.Context(), js, stream)
		return err == nil, fmt.Sprint(err)
	}, "%s: cannot read the stream", stream)
	return msgs
}

func tryReadStream(ctx context.Context, js jetstream.JetStream, stream string) ([]jetstream.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			msgs = append(msgs, m)
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			if meta.Sequence.Stream >= info.State.LastSeq {
				return msgs, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read %d of %d messages: %w", len(msgs), info.State.Msgs, err)
		}
	}
}

// callRevisions returns every stored write of the calls' bucket, by
// pendingId, in order.
func callRevisions(t *testing.T, js jetstream.JetStream) map[string][]revision {
	t.Helper()
	revs := map[string][]revision{}
	for _, m := range readStream(t, js, "KV_"+wire.CallsBucket) {
		if op := m.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			continue
		}
		meta, err := m.Metadata()
		require.NoError(t, err)
		var e machine.Entry
		require.NoError(t, json.Unmarshal(m.Data(), &e), "revision %d", meta.Sequence.Stream)
		revs[e.PendingID] = append(revs[e.PendingID], revision{seq: meta.Sequence.Stream, entry: &e})
	}
	return revs
}

// allEventIDs counts the events in TOOL_EVENTS by id.
func allEventIDs(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ids := map[string]int{}
	for _, m := range readStream(t, js, wire.EventsStream) {
		var ev wire.Event
		require.NoError(t, json.Unmarshal(m.Data(), &ev))
		ids[ev.ID]++
	}
	return ids
}

// once are the transitions an entry makes at most once: a second one is a
// decision or an outcome applied twice. (Heartbeats, overdue reminders
// and reclaims after a lost lease may repeat.)
var once = map[machine.Event]bool{
	machine.EventAsk: true, machine.EventSchedule: true, machine.EventDeny: true,
	machine.EventApprove: true, machine.EventReject: true, machine.EventTimeout: true,
	machine.EventCancel: true, machine.EventStart: true, machine.EventSucceed: true, machine.EventFail: true,
}

// doubledTransitions lists, per entry, each transition recorded at more
// than one revision.
func doubledTransitions(revs map[string][]revision) []string {
	var out []string
	for id, rs := range revs {
		seen := map[machine.Event][]uint64{}
		for _, r := range rs {
			for _, tr := range r.entry.Transitions() {
				if once[tr.Event] {
					seen[tr.Event] = append(seen[tr.Event], r.seq)
				}
			}
		}
		for ev, seqs := range seen {
			if len(seqs) > 1 {
				out = append(out, fmt.Sprintf("%s: %s at revisions %v", id, ev, seqs))
			}
		}
	}
	slices.Sort(out)
	return out
}

// eventGaps compares the events with the revisions: every transition a
// revision records with an event (a renewed lease has none) has exactly
// one, with its id (wire.EventsOf), and there is no other.
func eventGaps(revs map[string][]revision, events map[string]int) (missing, doubled []string) {
	want := map[string]bool{}
	for _, rs := range revs {
		for _, r := range rs {
			for _, ev := range wire.EventsOf(r.entry, r.seq) {
				want[ev.ID] = true
				if events[ev.ID] == 0 {
					missing = append(missing, ev.ID)
				}
			}
		}
	}
	for id, n := range events {
		switch {
		case !want[id]:
			doubled = append(doubled, fmt.Sprintf("%s: %d events for no revision that has one", id, n))
		case n > 1:
			doubled = append(doubled, fmt.Sprintf("%s: %d events", id, n))
		}
	}
	slices.Sort(missing)
	slices.Sort(doubled)
	return missing, doubled
}

// toolRun is one run of the exec tool, as its runs log says: the call's
// toolCallId and the pid of the executor process that ran it (the shell's
// parent).
type toolRun struct {
	toolCallID string
	executor   int
	ended      bool
}

// readRuns reads the runs log: "start|end <toolCallId> <executor pid>"
// lines, in the order they were written. Runs are returned in the order
// they started.
func readRuns(t *testing.T, path string) []*toolRun {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var runs []*toolRun
	open := map[string]*toolRun{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var what, id string
		var pid int
		if n, _ := fmt.Sscanf(sc.Text(), "%s %s %d", &what, &id, &pid); n != 3 {
			continue // a line being written
		}
		key := fmt.Sprint(id, " ", pid)
		switch what {
		case "start":
			r := &toolRun{toolCallID: id, executor: pid}
			runs = append(runs, r)
			open[key] = r
		case "end":
			if r := open[key]; r != nil {
				r.ended = true
				delete(open, key)
			}
		}
	}
	require.NoError(t, sc.Err())
	return runs
}

// openRunBy reports whether the runs log shows a run by the executor pid
// that has not ended.
func openRunBy(t *testing.T, path string, pid int) bool {
	for _, r := range readRuns(t, path) {
		if r.executor == pid && !r.ended {
			return true
		}
	}
	return false
}

// faultCounts is the table the fault-injection test prints and checks.
type faultCounts struct {
	rows []faultRow
}

type faultRow struct {
	name     string
	n        int
	examples []string // the first few, for the log
	must0    bool
}

func (c *faultCounts) add(name string, must0 bool, items []string) {
	c.rows = append(c.rows, faultRow{name: name, n: len(items), examples: items, must0: must0})
}

func (c *faultCounts) figure(name string, n int) {
	c.rows = append(c.rows, faultRow{name: name, n: n})
}

func (c *faultCounts) String() string {
	var b strings.Builder
	for _, r := range c.rows {
		want := ""
		if r.must0 {
			want = "(must be 0)"
		}
		fmt.Fprintf(&b, "  %-45s %6d %s\n", r.name, r.n, want)
		for i, e := range r.examples {
			if i == 10 {
				fmt.Fprintf(&b, "      … and %d more\n", len(r.examples)-10)
				break
			}
			fmt.Fprintf(&b, "      %s\n", e)
		}
	}
	return b.String()
}

// claimDelays says how long runnable calls waited for an executor's
// claim: from the revision that made each runnable (approve, schedule) to
// the one that claimed it (start).
func claimDelays(revs map[string][]revision) string {
	type wait struct {
		id string
		d  time.Duration
	}
	var waits []wait
	for id, rs := range revs {
		var runnable, started int64
		for _, r := range rs {
			for _, tr := range r.entry.Transitions() {
				switch {
				case (tr.Event == machine.EventApprove || tr.Event == machine.EventSchedule) && runnable == 0:
					runnable = tr.At
				case tr.Event == machine.EventStart && started == 0:
					started = tr.At
				}
			}
		}
		if runnable != 0 && started != 0 {
			waits = append(waits, wait{id, time.Duration(started-runnable) * time.Millisecond})
		}
	}
	if len(waits) == 0 {
		return "no call ran"
	}
	slices.SortFunc(waits, func(a, b wait) int { return int(a.d - b.d) })
	pct := func(p int) time.Duration { return waits[min(len(waits)*p/100, len(waits)-1)].d }
	var slow []string
	for i := len(waits) - 1; i >= max(len(waits)-5, 0); i-- {
		slow = append(slow, fmt.Sprintf("%s %s", waits[i].id, waits[i].d))
	}
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s; slowest %s", pct(50), pct(90), pct(99), strings.Join(slow, ", "))
}
