package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// The shadow policy is a candidate stored beside the policy in force
// (stores.PolicyStore's shadow key). Every submit this process creates an
// entry for is evaluated again, after it is recorded, through the policy
// in force and through the shadow, both dry (no grant consulted, no
// budget counted, no rate slot taken), as `policy dry-run` evaluates
// recorded calls: the shadow enforces nothing and writes nothing but its
// counts. Each comparison is counted at once (metrics.ShadowComparison)
// and, once a second, recorded in TOOL_SHADOW as one tally per shadow
// revision (Runtime.FollowShadow), which PolicyShadowReport sums.

// shadowFlushEvery is how often a process records what it compared.
const shadowFlushEvery = time.Second

// maxShadowReason bounds an example's reasons, in runes.
const maxShadowReason = 400

// shadow is a Service's view of the shadow policy and what it compared
// since its last flush.
type shadow struct {
	// inForce evaluates the policy in force dry; nil (a Service built
	// without a policy engine): nothing is compared.
	inForce machine.EditChecker
	log     *stores.ShadowLog // nil: nothing is recorded
	// opts are the shadow engine's: the flows' marks, shared with the
	// policy in force, and the Service's clock.
	opts    []policy.EngineOption
	cur     atomic.Pointer[shadowEngine]
	mu      sync.Mutex
	pending map[uint64]*shadowTally // by shadow revision
	// exampled counts the examples kept of each change since
	// exampledSince, at most wire.ShadowExamplesPerMinute a minute.
	exampled      map[pair]int
	exampledSince time.Time
}

// shadowEngine is the shadow policy stored at rev; engine nil: none set.
type shadowEngine struct {
	engine *policy.Engine
	rev    uint64
}

// shadowKey is what a tally counts calls by.
type shadowKey struct {
	tool, team string
	pair
}

// shadowTally is what a process compared against one shadow revision
// since its last flush.
type shadowTally struct {
	counts   map[shadowKey]int
	examples map[pair][]wire.DryRunExample
	skipped  int
}

func newShadow(cfg Config) *shadow {
	sh := &shadow{pending: map[uint64]*shadowTally{}}
	sh.inForce, _ = cfg.Policy.(machine.EditChecker)
	if cfg.Conn != nil && cfg.Buckets.Shadow != nil {
		sh.log = stores.NewShadowLog(cfg.Conn.JetStream(), cfg.Buckets.Shadow)
	}
	if cfg.Conn != nil {
		if fm := newFlowMarks(cfg); fm != nil {
			sh.opts = append(sh.opts, policy.WithFlowMarks(fm))
		}
	}
	if cfg.Clock != nil {
		sh.opts = append(sh.opts, policy.WithClock(cfg.Clock))
	}
	return sh
}

// set makes doc, stored at revision (nil: cleared), the shadow policy
// this process compares against, unless it already follows a later one.
// A document that does not compile is passed over: SetShadow validated
// it, so it could only be stored by hand.
func (sh *shadow) set(doc *policy.Document, revision uint64) error {
	next := &shadowEngine{rev: revision}
	if doc != nil {
		e, err := policy.NewEngine(doc, nil, nil, sh.opts...)
		if err != nil {
			return err
		}
		next.engine = e
	}
	for {
		cur := sh.cur.Load()
		if cur != nil && cur.rev > revision {
			return nil
		}
		if sh.cur.CompareAndSwap(cur, next) {
			return nil
		}
	}
}

// compareShadow evaluates the call of e, an entry a submit just created,
// through the policy in force and the shadow, both dry, and counts the
// pair of verdicts. It changes nothing of the call and returns nothing:
// whatever goes wrong here, the submit's answer is the same.
func (s *Service) compareShadow(ctx context.Context, e *machine.Entry) {
	sh := s.shadow
	cur := sh.cur.Load()
	if cur == nil || cur.engine == nil || sh.inForce == nil {
		return
	}
	c := e.Call()
	was, werr := sh.inForce.EvaluateDry(ctx, c)
	will, cerr := cur.engine.EvaluateDry(ctx, c)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.pending[cur.rev]
	if t == nil {
		t = &shadowTally{counts: map[shadowKey]int{}, examples: map[pair][]wire.DryRunExample{}}
		sh.pending[cur.rev] = t
	}
	if cmp.Or(werr, cerr) != nil {
		t.skipped++
		return
	}
	p := pair{verdictOf(was.Action), verdictOf(will.Action)}
	t.counts[shadowKey{e.ToolName, e.Team, p}]++
	if s.mx != nil {
		s.mx.ShadowComparison(p.from, p.to)
	}
	if now := s.now(); now.Sub(sh.exampledSince) >= time.Minute || now.Before(sh.exampledSince) {
		sh.exampled, sh.exampledSince = map[pair]int{}, now
	}
	if p.from != p.to && sh.exampled[p] < wire.ShadowExamplesPerMinute {
		sh.exampled[p]++
		t.examples[p] = append(t.examples[p], wire.DryRunExample{
			From: p.from, To: p.to, PendingID: e.PendingID, ToolName: e.ToolName, Team: e.Team,
			CallerBotID: e.CallerBotID, RequestedAt: e.RequestedAt, Description: clip(e.Description, maxExampleDescription),
			CurrentReason: clip(was.Reason, maxShadowReason), CandidateReason: clip(will.Reason, maxShadowReason),
		})
	}
}

// markShadowFlows marks the call pendingID, about to be recorded
// completed, for the shadow policy's flows, as markFlows does for the
// flows in force, so that the shadow's flows see what completed as a dry
// run's replay does. A mark is a flow's (its after and scope, in its
// scope), so a flow in force reads only the marks it writes itself: these
// change nothing in force. Failing, it is logged and the call completes
// as it would without a shadow.
func (s *Service) markShadowFlows(ctx context.Context, pendingID string) {
	cur := s.shadow.cur.Load()
	if cur == nil || cur.engine == nil || !cur.engine.HasFlows() {
		return
	}
	e, err := s.latest(ctx, pendingID)
	if err != nil {
		s.log.Warn("marking a completed call for the shadow policy's flows failed", "pendingId", pendingID, "err", err)
		return
	}
	if e.Status.Terminal() {
		return
	}
	if err := cur.engine.MarkCompleted(ctx, e.Call(), e.PendingID); err != nil {
		s.log.Warn("marking a completed call for the shadow policy's flows failed", "pendingId", pendingID, "err", err)
	}
}

// flush records in TOOL_SHADOW what was compared since the last flush,
// one tally per shadow revision. What it could not record is kept for the
// next.
func (s *Service) flushShadow(ctx context.Context, log *slog.Logger) {
	sh := s.shadow
	sh.mu.Lock()
	pending := sh.pending
	sh.pending = map[uint64]*shadowTally{}
	sh.mu.Unlock()
	if sh.log == nil {
		return
	}
	for rev, t := range pending {
		rec := wire.ShadowTally{ShadowRevision: rev, At: s.now().UnixMilli(), Skipped: t.skipped, Counts: []wire.ShadowCount{}}
		for k, n := range t.counts {
			rec.Counts = append(rec.Counts, wire.ShadowCount{Tool: k.tool, Team: k.team, From: k.from, To: k.to, Calls: n})
		}
		for _, p := range slices.SortedFunc(maps.Keys(t.examples), func(x, y pair) int {
			return cmp.Or(strings.Compare(x.from, y.from), strings.Compare(x.to, y.to))
		}) {
			rec.Examples = append(rec.Examples, t.examples[p]...)
		}
		if err := sh.log.Append(ctx, rec); err != nil {
			log.Warn("recording the shadow policy's comparisons failed; keeping them for the next try", "shadowRevision", rev, "err", err)
			sh.keep(rev, t)
		}
	}
}

// keep adds t, a tally that could not be recorded, back to what is
// pending for rev.
func (sh *shadow) keep(rev uint64, t *shadowTally) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	cur := sh.pending[rev]
	if cur == nil {
		sh.pending[rev] = t
		return
	}
	for k, n := range t.counts {
		cur.counts[k] += n
	}
	for p, ex := range t.examples {
		cur.examples[p] = append(ex, cur.examples[p]...)
	}
	cur.skipped += t.skipped
}

// FollowShadow keeps this process's shadow policy the stored one, and
// records what its submits compared against it once a second, until ctx
// ends (then once more). A process that serves submits runs it.
func (r Runtime) FollowShadow(ctx context.Context, log *slog.Logger) error {
	s := r.s
	followed := make(chan error, 1)
	go func() {
		followed <- s.policies.FollowShadow(ctx, func(doc *policy.Document, revision uint64) {
			if err := s.shadow.set(doc, revision); err != nil {
				log.Error("stored shadow policy is invalid; passing it over", "revision", revision, "err", err)
			}
		}, log)
	}()
	tick := time.NewTicker(shadowFlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.flushShadow(fctx, log)
			cancel()
			return <-followed
		case <-tick.C:
			s.flushShadow(ctx, log)
		}
	}
}

// errNoShadow answers a request about a shadow policy when none is set.
var errNoShadow = fmt.Errorf("%w: no shadow policy is set: `toolgate policy shadow set FILE` sets one", machine.ErrNotFound)

// PolicyShadow returns the shadow policy and its revision, its secrets
// redacted unless r asks to see them, which only an admin may: as Policy
// shows the policy in force, to whoever may read that.
func (s *Service) PolicyShadow(ctx context.Context, a Actor, r wire.PolicyGetRequest) (wire.PolicyDocument, error) {
	if err := a.require("read the shadow policy", wire.RoleViewer, wire.RoleApprover); err != nil {
		return wire.PolicyDocument{}, err
	}
	if r.ShowSecrets {
		if err := a.require("show the shadow policy's secrets", wire.RoleAdmin); err != nil {
			return wire.PolicyDocument{}, err
		}
	}
	doc, rev, err := s.policies.GetShadow(ctx)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	if doc == nil {
		return wire.PolicyDocument{}, errNoShadow
	}
	return shownPolicy(doc, rev, r.ShowSecrets)
}

// shownPolicy is doc stored at rev as a reply shows it: its secrets
// redacted unless showSecrets.
func shownPolicy(doc *policy.Document, rev uint64, showSecrets bool) (wire.PolicyDocument, error) {
	if !showSecrets {
		doc = policy.Redacted(doc)
	}
	data, err := policy.Marshal(doc)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	return wire.PolicyDocument{Document: string(data), Revision: rev}, nil
}

// SetPolicyShadow stores a shadow policy (admins only, as SetPolicy): a
// document refused by SetPolicy is refused here the same way, and the
// shadow stays as it was. From the reply on, this process compares its
// submits against it; the others as soon as their watch of the policies
// bucket brings it. The reply is the shadow stored, redacted, with its
// revision.
func (s *Service) SetPolicyShadow(ctx context.Context, a Actor, r wire.PolicyDocument) (wire.PolicyDocument, error) {
	if err := a.require("set the shadow policy", wire.RoleAdmin); err != nil {
		return wire.PolicyDocument{}, err
	}
	doc, err := policy.Parse([]byte(r.Document))
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	rev, err := s.policies.SetShadow(ctx, doc)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	if err := s.shadow.set(doc, rev); err != nil {
		return wire.PolicyDocument{}, err
	}
	return shownPolicy(doc, rev, false)
}

// ClearPolicyShadow drops the shadow policy (admins only). What it
// recorded stays in TOOL_SHADOW for PolicyShadowReport. Clearing when
// none is set answers revision 0.
func (s *Service) ClearPolicyShadow(ctx context.Context, a Actor, _ struct{}) (wire.PolicyShadowCleared, error) {
	if err := a.require("clear the shadow policy", wire.RoleAdmin); err != nil {
		return wire.PolicyShadowCleared{}, err
	}
	for {
		doc, rev, err := s.policies.GetShadow(ctx)
		if err != nil || doc == nil {
			return wire.PolicyShadowCleared{}, err
		}
		err = s.policies.ClearShadow(ctx, rev)
		if errors.Is(err, machine.ErrConflict) {
			continue // set again meanwhile: clear that one
		}
		if err != nil {
			return wire.PolicyShadowCleared{}, err
		}
		_ = s.shadow.set(nil, rev)
		return wire.PolicyShadowCleared{Revision: rev}, nil
	}
}

// PromotePolicyShadow puts the shadow policy stored at r.Revision in
// force, through SetPolicy (admins only), then drops it. A shadow set
// again since r.Revision is not promoted (machine.ErrConflict, naming the
// revision it is at); one set again between the promotion and the drop
// stays.
func (s *Service) PromotePolicyShadow(ctx context.Context, a Actor, r wire.PolicyShadowPromoteRequest) (wire.PolicyDocument, error) {
	if err := a.require("promote the shadow policy", wire.RoleAdmin); err != nil {
		return wire.PolicyDocument{}, err
	}
	if r.Revision == 0 {
		return wire.PolicyDocument{}, fmt.Errorf("%w: revision: required: the shadow policy's revision, as `toolgate policy shadow get` shows it", machine.ErrInvalid)
	}
	doc, rev, err := s.policies.GetShadow(ctx)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	if doc == nil {
		return wire.PolicyDocument{}, errNoShadow
	}
	if rev != r.Revision {
		return wire.PolicyDocument{}, fmt.Errorf("%w: revision: the shadow policy is at revision %d now, not %d: read it again (`toolgate policy shadow get`) and promote that one",
			machine.ErrConflict, rev, r.Revision)
	}
	data, err := policy.Marshal(doc)
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	inForce, err := s.SetPolicy(ctx, a, wire.PolicyDocument{Document: string(data)})
	if err != nil {
		return wire.PolicyDocument{}, err
	}
	switch err := s.policies.ClearShadow(ctx, rev); {
	case errors.Is(err, machine.ErrConflict):
		// Set again meanwhile: that one is another candidate, left as it is.
	case err != nil:
		return wire.PolicyDocument{}, fmt.Errorf("the shadow policy is in force (revision %d), but clearing it failed: %w", inForce.Revision, err)
	default:
		_ = s.shadow.set(nil, rev)
	}
	return inForce, nil
}

// PolicyShadowReport sums what every process recorded of its submits
// against one shadow policy (r.Revision; by default the one set now, or
// with none, the last recorded) from r.Since on: the calls per pair of
// verdicts, overall, per tool and per team, and examples of each change,
// in a dry run's terms. Viewers and approvers, as for the policy. The
// last second's comparisons of each process are recorded a moment later.
func (s *Service) PolicyShadowReport(ctx context.Context, a Actor, r wire.PolicyShadowReportRequest) (*wire.PolicyShadowReport, error) {
	if err := a.require("read the shadow policy's report", wire.RoleViewer, wire.RoleApprover); err != nil {
		return nil, err
	}
	until, since := s.now().UnixMilli(), r.Since
	examples, err := reportBounds(since, until, r.Examples)
	if err != nil {
		return nil, err
	}
	if s.shadow.log == nil {
		return nil, fmt.Errorf("%s is not provisioned", wire.ShadowStream)
	}
	_, setRev, err := s.policies.GetShadow(ctx)
	if err != nil {
		return nil, err
	}
	var from time.Time
	if since > 0 {
		from = time.UnixMilli(since)
	}
	tallies, err := s.shadow.log.Since(ctx, from)
	if err != nil {
		return nil, err
	}
	rev := cmp.Or(r.Revision, setRev)
	if rev == 0 {
		for _, t := range tallies {
			rev = max(rev, t.ShadowRevision)
		}
	}
	d := newDryRun(examples)
	var skipped int
	for _, t := range tallies {
		if t.ShadowRevision != rev {
			continue
		}
		skipped += t.Skipped
		for _, c := range t.Counts {
			d.count(pair{c.From, c.To}, c.Tool, c.Team, c.Calls)
		}
		for _, ex := range t.Examples {
			p := pair{ex.From, ex.To}
			d.examples[p] = append(d.examples[p], ex)
		}
	}
	if since == 0 {
		since = until - wire.ShadowMaxAgeMs
	}
	reply := &wire.PolicyShadowReport{Since: since, Until: until, ShadowRevision: rev, Set: rev != 0 && rev == setRev, Skipped: skipped,
		Calls: d.all.calls, Changed: d.all.changed, Verdicts: d.all.counts(), ByTool: groups(d.tools), ByTeam: groups(d.teams)}
	reply.Examples = d.examplesOf(reply.Verdicts)
	return reply, nil
}
