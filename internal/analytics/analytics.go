package analytics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/internal/consumer"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Bucket is the KV bucket the analytics keep their aggregates in.
const Bucket = wire.AnalyticsBucket

// metaKey holds the generation in force: the aggregates read and written
// are those under "g<generation>.", with its checkpoint (checkpointKey). A
// rebuild builds the next generation beside the current one and switches
// to it when it has caught up.
const metaKey = "meta"

type analyticsMeta struct {
	Generation uint64 `json:"generation"`
	RebuiltAt  int64  `json:"rebuiltAt,omitempty"`
}

// durableName is the durable consumer that fed gen before checkpoints: a
// process that finds one starts at its ack floor and removes it (resume).
func durableName(gen uint64) string { return fmt.Sprintf("toolgate-analytics-g%d", gen) }

func genPrefix(gen uint64) string { return fmt.Sprintf("g%d.", gen) }

// Config tunes Analytics.
type Config struct {
	// Replicas of the bucket, when Provision creates it (default 1).
	Replicas int
	// Events, when set, is the process's feed of TOOL_EVENTS, which Run
	// follows (the process runs it); otherwise Run reads the stream with
	// an ordered consumer of its own.
	Events *views.EventsFeed
	// BatchSize is how many events are folded into one round of KV writes
	// (default 256).
	BatchSize int
	// FillWait is how long a batch that is not full waits for more events
	// after its first before it is folded (default 50ms; negative: not at
	// all). Under a steady trickle of events, each round of KV writes then
	// takes in what arrived meanwhile, not one or two events; the
	// aggregates lag by as much.
	FillWait time.Duration
	Log      *slog.Logger
}

// Analytics keeps approval statistics in the tool_analytics bucket and
// reads them back as a Report.
//
// Run reads every event of TOOL_EVENTS in order, from the process's
// events feed (Config.Events: the events the process reads anyway, for
// the metrics exporter and event streams, so each costs the server no
// delivery and no acknowledgement of its own) or an ordered consumer of
// its own. Each batch of events (what arrived within Config.FillWait of
// its first, up to Config.BatchSize) is folded into the aggregates it
// touches (per tool, per team, per approver, per hour), one
// compare-and-set per aggregate; then the batch's last sequence is
// recorded as the generation's checkpoint, where a process starts. A
// process keeps the aggregates it last wrote, with their revisions: the
// next batch writes them at that revision with no read before, and reads
// only when another process wrote them meanwhile (the compare-and-set
// fails) or it does not hold them.
//
// Every process running Run reads every event. An aggregate must take
// each event in exactly once although two processes apply the same
// events, and a process that died after writing some aggregates and
// before its checkpoint applies its batch again when it restarts. So
// every aggregate records the stream sequences it has taken in (Applied)
// in the same write as the counts: an event whose sequence is already
// there is skipped, a batch that adds nothing writes nothing, and a
// compare-and-set that loses to another writer re-reads and re-checks.
// Order does not matter, since the aggregates are sums. The set stays
// small: it holds the sequences of every batch that wrote the aggregate,
// contiguous runs merge, and everything at or below the sequences this
// process has applied in order (hence written everywhere they belong)
// folds into one number.
type Analytics struct {
	conn  *bus.Conn
	store *stores.AnalyticsStore
	cfg   Config
	log   *slog.Logger
	now   func() time.Time

	// cache holds the aggregates this process last read or wrote, each
	// with its revision, so that the next batch writes them by
	// compare-and-set without reading them first (see update).
	mu    sync.Mutex
	cache map[string]cachedAggregate

	// afterApply, when set, is a failure point for tests: an error stops
	// Run after a batch is written and before its checkpoint, as a crash
	// would.
	afterApply func(seqs []uint64) error
}

// Open provisions the bucket (bus.ProvisionAnalytics) and returns the
// analytics over it, reading TOOL_EVENTS over conn.
func Open(ctx context.Context, conn *bus.Conn, cfg Config) (*Analytics, error) {
	kv, err := bus.ProvisionAnalytics(ctx, conn.JetStream(), cfg.Replicas)
	if err != nil {
		return nil, err
	}
	return New(conn, stores.NewAnalyticsStore(conn.JetStream(), kv), cfg), nil
}

// New returns the analytics over store, an existing bucket, reading
// TOOL_EVENTS over conn.
func New(conn *bus.Conn, store *stores.AnalyticsStore, cfg Config) *Analytics {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 256
	}
	if cfg.FillWait == 0 {
		cfg.FillWait = 50 * time.Millisecond
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Analytics{conn: conn, store: store, cfg: cfg, log: log, now: time.Now, cache: map[string]cachedAggregate{}}
}

// generation returns the generation in force and the meta key's revision,
// creating generation 1 if there is none.
func (a *Analytics) generation(ctx context.Context) (uint64, uint64, error) {
	var gen, rev uint64
	created, err := a.store.Update(ctx, metaKey, nil, func(value []byte, revision uint64) ([]byte, error) {
		if value == nil {
			gen = 1
			return json.Marshal(analyticsMeta{Generation: 1})
		}
		var m analyticsMeta
		if err := json.Unmarshal(value, &m); err != nil || m.Generation == 0 {
			return nil, fmt.Errorf("analytics: key %s of %s is not readable: %q", metaKey, Bucket, value)
		}
		gen, rev = m.Generation, revision
		return nil, nil // as it is
	})
	if err != nil {
		return 0, 0, err
	}
	if created != 0 {
		rev = created
	}
	return gen, rev, nil
}

// errGenerationChanged stops the consumer of a generation no longer in force.
var errGenerationChanged = errors.New("analytics: another generation is in force")

// crash is the error of a test failure point: Run returns it at once.
type crash struct{ err error }

func (c crash) Error() string { return c.err.Error() }
func (c crash) Unwrap() error { return c.err }

// Run consumes events into the aggregates of the generation in force until
// ctx ends, switching to a new generation as soon as a rebuild puts one in
// force. Failures of the bus are logged and retried (consumer.RunRestarting),
// not returned: the aggregates wait, and the consumer's lag says so.
func (a *Analytics) Run(ctx context.Context) error {
	return consumer.RunRestarting(ctx, a.log, "analytics", a.run)
}

// run consumes into one generation after another until ctx ends or
// something fails.
func (a *Analytics) run(ctx context.Context) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	updates, err := a.store.Watch(wctx, metaKey)
	if err != nil {
		return fmt.Errorf("analytics: %w", err)
	}
	for {
		gen, _, err := a.generation(ctx)
		if err != nil {
			return fmt.Errorf("analytics: reading the generation: %w", err)
		}
		err = a.runGeneration(ctx, gen, updates)
		var c crash
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &c):
			return consumer.Permanent(c.err)
		case errors.Is(err, errGenerationChanged):
			// A switch is no failure: on to the new one at once.
			a.log.Info("analytics: another generation is in force", "was", gen)
		default:
			return err
		}
	}
}

// runGeneration consumes into gen until ctx ends, consuming fails, or
// another generation is put in force (errGenerationChanged). It returns
// after consume has.
func (a *Analytics) runGeneration(ctx context.Context, gen uint64, updates <-chan []byte) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	wg.Go(func() { done <- a.consume(gctx, gen) })
	stopped, err := a.follow(ctx, gen, updates, done)
	switch {
	case ctx.Err() != nil:
		return nil
	case !stopped:
		return errGenerationChanged
	case err == nil:
		return fmt.Errorf("analytics: generation %d stopped", gen)
	}
	return err
}

// follow waits until consuming gen stops (stopped, with its error), ctx
// ends, or the meta key names another generation.
func (a *Analytics) follow(ctx context.Context, gen uint64, updates <-chan []byte, done <-chan error) (stopped bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case err := <-done:
			return true, err
		case value, ok := <-updates:
			if !ok {
				// The watch ended: Run restarts, and reads the meta key.
				return true, errors.New("analytics: the watch of the generation in force ended")
			}
			var m analyticsMeta
			if json.Unmarshal(value, &m) == nil && m.Generation != gen {
				return false, nil
			}
		}
	}
}

// streamed is one event of TOOL_EVENTS as the subscriber reads it.
type streamed struct {
	seq     uint64
	subject string
	data    []byte
}

// consume folds every event from gen's checkpoint on into gen's
// aggregates until ctx ends or a write fails. It follows the process's
// events feed when it has one (Config.Events), else the stream with an
// ordered consumer of its own; either hands it every event once, in
// order. After each batch it records the last sequence applied as gen's
// checkpoint.
func (a *Analytics) consume(ctx context.Context, gen uint64) error {
	cp, err := a.resume(ctx, gen)
	if err != nil {
		return err
	}
	from := cp.seq + 1
	ctx, cancel := context.WithCancel(ctx)
	// The follower stops before consume returns: cancel, then wait.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	evs := make(chan streamed, a.cfg.BatchSize)
	followed := make(chan error, 1)
	wg.Go(func() {
		fn := func(seq uint64, subject string, data []byte) {
			select {
			case evs <- streamed{seq, subject, data}:
			case <-ctx.Done():
			}
		}
		if a.cfg.Events != nil {
			followed <- a.cfg.Events.Follow(ctx, from, func() {}, fn)
		} else {
			followed <- views.FollowEvents(ctx, a.conn.JetStream(), from, func() {}, fn)
		}
	})
	// Every event below from is in every aggregate it belongs in: each
	// batch raises that floor to its last.
	floor := from - 1
	for {
		var batch []streamed
		select {
		case <-ctx.Done():
			return nil
		case err := <-followed:
			if err == nil {
				err = errors.New("stopped")
			}
			return fmt.Errorf("analytics: following %s: %w", wire.EventsStream, err)
		case ev := <-evs:
			batch = append(batch, ev)
		}
		batch = a.fill(ctx, evs, batch)
		seqs, err := a.apply(ctx, floor, gen, batch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// From the checkpoint again: what the batch wrote is skipped.
			return fmt.Errorf("analytics: applying %d events: %w", len(batch), err)
		}
		if a.afterApply != nil {
			if err := a.afterApply(seqs); err != nil {
				return crash{err}
			}
		}
		floor = batch[len(batch)-1].seq
		if err := a.raise(ctx, gen, &cp, floor); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// checkpointKey holds the last sequence of TOOL_EVENTS that gen's
// aggregates have taken in, with every one before it: where a process
// starts, and what Lag counts from. Every process raises it after each
// batch it applies, and none lowers it: one behind another would have
// Lag count events the aggregates hold.
func checkpointKey(gen uint64) string { return genPrefix(gen) + "applied" }

// checkpointAt is gen's checkpoint as a process last read or wrote it:
// the sequence, and the key's revision (0: no key).
type checkpointAt struct{ seq, rev uint64 }

// checkpoint reads gen's checkpoint.
func (a *Analytics) checkpoint(ctx context.Context, gen uint64) (checkpointAt, error) {
	value, rev, err := a.store.Get(ctx, checkpointKey(gen))
	if errors.Is(err, machine.ErrNotFound) {
		return checkpointAt{}, nil
	} else if err != nil {
		return checkpointAt{}, fmt.Errorf("analytics: checkpoint: %w", err)
	}
	return checkpointIn(gen, value, rev)
}

// checkpointIn is gen's checkpoint as value holds it, at rev.
func checkpointIn(gen uint64, value []byte, rev uint64) (checkpointAt, error) {
	n, err := strconv.ParseUint(string(value), 10, 64)
	if err != nil {
		return checkpointAt{}, fmt.Errorf("analytics: key %s of %s is not readable: %q", checkpointKey(gen), Bucket, value)
	}
	return checkpointAt{seq: n, rev: rev}, nil
}

// raise records seq as gen's checkpoint, by compare-and-set on cp, unless
// the key holds one as high; cp follows the key.
func (a *Analytics) raise(ctx context.Context, gen uint64, cp *checkpointAt, seq uint64) error {
	if cp.seq >= seq {
		return nil
	}
	held, read := cp.rev, false
	rev, err := a.store.Update(ctx, checkpointKey(gen), &held, func(value []byte, revision uint64) ([]byte, error) {
		if read {
			// Another process raised it: look again.
			*cp = checkpointAt{}
			if value != nil {
				var err error
				if *cp, err = checkpointIn(gen, value, revision); err != nil {
					return nil, err
				}
			}
		}
		read = true
		if cp.seq >= seq {
			return nil, nil
		}
		return []byte(strconv.FormatUint(seq, 10)), nil
	})
	if err != nil {
		return fmt.Errorf("analytics: checkpoint: %w", err)
	}
	if rev != 0 {
		*cp = checkpointAt{seq: seq, rev: rev}
	}
	return nil
}

// resume returns gen's checkpoint, where a process starts: the key's, or,
// for a generation kept by a durable consumer (as toolgate did before
// checkpoints), that consumer's ack floor, which then becomes the
// checkpoint and the consumer is removed; else none (the stream's start).
func (a *Analytics) resume(ctx context.Context, gen uint64) (checkpointAt, error) {
	cp, err := a.checkpoint(ctx, gen)
	if err != nil || cp.rev != 0 {
		return cp, err
	}
	p, ok, err := consumer.Durable(ctx, a.conn.JetStream(), wire.EventsStream, durableName(gen))
	if err != nil {
		return cp, fmt.Errorf("analytics: consumer %s: %w", durableName(gen), err)
	} else if !ok {
		return cp, nil
	}
	if err := a.raise(ctx, gen, &cp, p.AckFloor); err != nil {
		return cp, err
	}
	if err := consumer.Delete(ctx, a.conn.JetStream(), wire.EventsStream, durableName(gen)); err != nil {
		return cp, fmt.Errorf("analytics: removing consumer %s: %w", durableName(gen), err)
	}
	a.log.Info("analytics: the generation's durable consumer gave way to its checkpoint", "generation", gen, "checkpoint", cp.seq)
	return cp, nil
}

// fill adds to batch what arrives on evs within FillWait of now, until
// it holds BatchSize events.
func (a *Analytics) fill(ctx context.Context, evs <-chan streamed, batch []streamed) []streamed {
more:
	for len(batch) < a.cfg.BatchSize {
		select {
		case ev := <-evs:
			batch = append(batch, ev)
		default:
			break more
		}
	}
	if len(batch) >= a.cfg.BatchSize || a.cfg.FillWait <= 0 {
		return batch
	}
	t := time.NewTimer(a.cfg.FillWait)
	defer t.Stop()
	for len(batch) < a.cfg.BatchSize {
		select {
		case ev := <-evs:
			batch = append(batch, ev)
		case <-t.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

// touch is one aggregate a batch changes, and the events that change it.
type touch struct {
	id  aggregateID
	evs []event
}

// aggregateID says which aggregate a key holds, enough to make its empty
// value.
type aggregateID struct {
	kind byte // 't'ool, t'e'am, 'h'our, 'a'pprover
	name string
	hour int64 // epoch milliseconds, of an hour's
}

func (id aggregateID) fresh() aggregate {
	switch id.kind {
	case 't':
		return &toolStats{Stats{Name: id.name}}
	case 'e':
		return &Stats{Name: id.name}
	case 'h':
		return &HourStats{Hour: id.hour}
	default:
		return &ApproverStats{Name: id.name}
	}
}

// apply folds a batch into the aggregates of gen. It returns the batch's
// sequences.
func (a *Analytics) apply(ctx context.Context, floor uint64, gen uint64, batch []streamed) ([]uint64, error) {
	var (
		seqs    = make([]uint64, 0, len(batch))
		touches = map[string]*touch{}
		prefix  = genPrefix(gen)
	)
	for _, m := range batch {
		seqs = append(seqs, m.seq)
		ev, err := wire.DecodeEventHead(m.data)
		if err != nil || ev.Entry == nil {
			// Nothing can make it readable later: it counts as applied.
			a.log.Error("analytics: undecodable event", "seq", m.seq, "subject", m.subject, "err", err)
			continue
		}
		forKeys(prefix, ev, func(key string, id aggregateID) {
			t := touches[key]
			if t == nil {
				t = &touch{id: id}
				touches[key] = t
			}
			t.evs = append(t.evs, event{seq: m.seq, EventHead: ev})
		})
	}
	ranges := consumer.SeqRanges(seqs)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for key, t := range touches {
		g.Go(func() error { return a.update(gctx, key, t, ranges, floor) })
	}
	return seqs, g.Wait()
}

// forKeys calls f with each aggregate an event changes: its key (under
// prefix, its generation's) and what it holds.
func forKeys(prefix string, ev *wire.EventHead, f func(key string, id aggregateID)) {
	e := ev.Entry
	f(prefix+"tool."+machine.KeyToken(e.ToolName), aggregateID{kind: 't', name: e.ToolName})
	f(prefix+"team."+machine.KeyToken(e.Team), aggregateID{kind: 'e', name: e.Team})
	hour := time.UnixMilli(ev.At).UTC().Truncate(time.Hour)
	f(hourKey(prefix, hour), aggregateID{kind: 'h', hour: hour.UnixMilli()})
	if ev.Event == machine.EventApprove || ev.Event == machine.EventReject || ev.Event == machine.EventVote {
		by := e.ApprovedOrRejectedByUserID
		if by == "" || ev.Event == machine.EventVote {
			by = ev.Actor
		}
		f(prefix+"approver."+machine.KeyToken(by), aggregateID{kind: 'a', name: by})
	}
	for _, by := range reviewersOf(ev) {
		f(prefix+"approver."+machine.KeyToken(by), aggregateID{kind: 'a', name: by})
	}
}

// hourKey is the key of hour's aggregate under prefix, its generation's.
func hourKey(prefix string, hour time.Time) string {
	return prefix + "hour." + hour.UTC().Format("2006010215")
}

// cachedAggregate is an aggregate as this process last read or wrote it,
// at revision rev of its key.
type cachedAggregate struct {
	v   aggregate
	rev uint64
}

// maxCached bounds the aggregates a process keeps: past it, the cache
// starts again empty (an hour's key is not written again after its hour,
// so they would pile up).
const maxCached = 1024

// takeCached removes key's aggregate from the cache and returns it: the
// caller changes it, and puts it back only once it is written.
func (a *Analytics) takeCached(key string) (cachedAggregate, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.cache[key]
	delete(a.cache, key)
	return c, ok
}

func (a *Analytics) putCached(key string, c cachedAggregate) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCached {
		clear(a.cache)
	}
	a.cache[key] = c
}

// update applies the events of t not yet in the aggregate at key, by
// compare-and-set, and records the batch's sequences in it. It starts
// from the aggregate as this process last wrote or read it, if it holds
// it, with no read: a compare-and-set at that revision fails if anyone
// wrote the key since, and then it reads the key and checks again. So
// what it adds to is always the value at the revision it writes over.
func (a *Analytics) update(ctx context.Context, key string, t *touch, ranges [][2]uint64, floor uint64) error {
	c, cached := a.takeCached(key)
	var held *uint64
	if cached {
		held = &c.rev
	}
	read, changed := !cached, false
	rev, err := a.store.Update(ctx, key, held, func(value []byte, revision uint64) ([]byte, error) {
		if read {
			// Not held, or another process wrote it: what it holds,
			// re-checked against what it took in.
			c = cachedAggregate{v: t.id.fresh(), rev: revision}
			if value != nil {
				if err := json.Unmarshal(value, c.v); err != nil {
					return nil, fmt.Errorf("not readable: %w", err)
				}
			}
		}
		read = true
		applied := c.v.applied()
		applied.Raise(floor)
		changed = false
		for _, ev := range t.evs {
			if !applied.Has(ev.seq) {
				c.v.add(ev)
				changed = true
			}
		}
		if !changed {
			return nil, nil
		}
		applied.Add(ranges)
		return json.Marshal(c.v)
	})
	if err != nil {
		// Perhaps written, perhaps not: the next batch reads it.
		return fmt.Errorf("aggregate %s: %w", key, err)
	}
	if changed {
		c.rev = rev
	}
	// Unchanged, what it holds is what the key holds (all below the floor
	// is in every aggregate it belongs in).
	a.putCached(key, c)
	return nil
}

// Rebuild re-derives every aggregate from the start of TOOL_EVENTS (as far
// back as the stream keeps events) into a new generation, puts it in force
// once it has caught up, and removes the old one. Processes running Run
// meanwhile keep the old generation current until the switch, then carry
// on with the new one from its checkpoint; readers see the old numbers
// until the switch and the new ones after, never a half-built set. It
// returns the new generation.
func (a *Analytics) Rebuild(ctx context.Context) (uint64, error) {
	cur, rev, err := a.generation(ctx)
	if err != nil {
		return 0, err
	}
	next := cur + 1
	// What a rebuild that failed earlier may have left behind, its
	// checkpoint among the keys (and, from before checkpoints, a consumer
	// resume would take for the generation's).
	if err := consumer.Delete(ctx, a.conn.JetStream(), wire.EventsStream, durableName(next)); err != nil {
		return 0, fmt.Errorf("rebuild: %w", err)
	}
	if err := a.purgeGenerations(ctx, func(g uint64) bool { return g == next }); err != nil {
		return 0, err
	}

	// Whichever way Rebuild returns, consume has stopped and returned:
	// cancel runs before the wait.
	var wg sync.WaitGroup
	defer wg.Wait()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	wg.Go(func() { done <- a.consume(cctx, next) })
	for {
		lag, err := a.lag(ctx, next)
		if err != nil {
			return 0, fmt.Errorf("rebuild: %w", err)
		}
		if lag == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-done:
			if err == nil {
				err = ctx.Err()
			}
			return 0, fmt.Errorf("rebuild: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	data, _ := json.Marshal(analyticsMeta{Generation: next, RebuiltAt: a.now().UnixMilli()})
	_, err = a.store.Update(ctx, metaKey, &rev, func(_ []byte, revision uint64) ([]byte, error) {
		if revision != rev {
			return nil, fmt.Errorf("%w: the meta key is at revision %d, not %d", machine.ErrConflict, revision, rev)
		}
		return data, nil
	})
	cancel()
	<-done
	if err != nil {
		return 0, fmt.Errorf("rebuild: putting generation %d in force (did another rebuild run?): %w", next, err)
	}
	if err := consumer.Delete(ctx, a.conn.JetStream(), wire.EventsStream, durableName(cur)); err != nil {
		a.log.Warn("rebuild: deleting the old generation's consumer failed", "consumer", durableName(cur), "err", err)
	}
	// A process that had not yet seen the switch may still write a key of
	// the old generation after this: harmless, as nothing reads it, and the
	// next rebuild removes it.
	if err := a.purgeGenerations(ctx, func(g uint64) bool { return g != next }); err != nil {
		a.log.Warn("rebuild: removing old generations failed", "err", err)
	}
	return next, nil
}

// purgeGenerations removes every key of the generations doomed says.
func (a *Analytics) purgeGenerations(ctx context.Context, doomed func(uint64) bool) error {
	keys, err := a.store.Keys(ctx)
	if err != nil {
		return err
	}
	gens := map[uint64]bool{}
	for _, k := range keys {
		head, _, ok := strings.Cut(k, ".")
		if g, err := strconv.ParseUint(strings.TrimPrefix(head, "g"), 10, 64); ok && strings.HasPrefix(head, "g") && err == nil && doomed(g) {
			gens[g] = true
		}
	}
	if len(gens) == 0 {
		return nil
	}
	for g := range gens {
		if err := a.store.Purge(ctx, genPrefix(g)); err != nil {
			return fmt.Errorf("purge generation %d: %w", g, err)
		}
	}
	return nil
}

// Lag is how many events the analytics of the generation in force have yet
// to take in: those after its checkpoint. 0 means every event published
// before the call is in the aggregates.
func (a *Analytics) Lag(ctx context.Context) (uint64, error) {
	gen, _, err := a.generation(ctx)
	if err != nil {
		return 0, err
	}
	return a.lag(ctx, gen)
}

func (a *Analytics) lag(ctx context.Context, gen uint64) (uint64, error) {
	// The stream first: every event published before the call is at or
	// below its last sequence.
	first, last, err := consumer.Bounds(ctx, a.conn.JetStream(), wire.EventsStream)
	if err != nil {
		return 0, err
	}
	cp, err := a.checkpoint(ctx, gen)
	if err != nil {
		return 0, err
	}
	floor := cp.seq
	if first > 0 {
		floor = max(floor, first-1) // the stream let the rest go
	}
	if last > floor {
		return last - floor, nil
	}
	return 0, nil
}
