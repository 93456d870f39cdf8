package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/bus/stores"
	"github.com/toolgate/toolgate/internal/bus/views"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/metrics"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// Config is what a Service is built from.
type Config struct {
	// Conn is the connection the stores are built over, through which a
	// conversation's cancel is announced to the executors running its
	// calls and a withdrawal to the other processes.
	Conn    *bus.Conn
	Buckets *bus.Buckets
	// Policy decides what a submitted call needs (default: ask a human
	// about every call).
	Policy machine.Evaluator
	// Metrics, when set, counts the commands refused because their entry
	// had moved on.
	Metrics *metrics.Metrics
	// Grants, when set, is the grant store the policy matches calls
	// against, so that a grant this Service records is matched at once
	// (default: a store of its own over Buckets.Grants).
	Grants *stores.GrantStore
	// Issue, when set, signs new NATS credentials: only a toolgate that
	// holds the trust chain's keys can.
	Issue Issuer
	// Analytics, when set, reports the analytics (package analytics'
	// Report as JSON, over the window of a request the Analytics use case
	// checked); an error is analytics it cannot read now.
	Analytics func(ctx context.Context, r wire.AnalyticsRequest) (json.RawMessage, error)
	// Events, when set, says how far TOOL_EVENTS goes, for a page of
	// calls a client then follows the events after (Page):
	// *views.EventsFeed.
	Events EventsPosition
	// Signer, when set, signs the receipt every transition appends
	// (receipts.go); without one, entries get none.
	Signer machine.Signer
	// Clock replaces time.Now, for tests.
	Clock func() time.Time
	Log   *slog.Logger
}

// Service is every use case of toolgate, in one file per resource (see the
// package doc) over the stores it holds here; what no authenticated actor
// asks for it hands out on types of their own (Timer, Links, Slack,
// Runtime) over the same stores. It holds no state of its own
// beyond its stores, so any number of Services in any number of processes
// serve the same buckets; compare-and-set makes each transition happen
// once.
type Service struct {
	m           *machine.Machine
	calls       *bus.KVStore
	index       *views.CallIndex // lists read it while it follows the bucket (Runtime.CallsView)
	work        *views.WorkQueue // executors take work from it while it follows the bucket (Runtime.WorkView)
	takers      takers           // the requests for work that wait, which their executor may withdraw
	policies    *stores.PolicyStore
	grants      *stores.GrantStore
	budgets     *stores.BudgetLedger
	rates       *stores.RateCounters
	identities  *stores.IdentityStore
	tokens      *stores.DecisionTokenStore
	archive     *stores.Archive    // nil: finished calls are never retired
	archivedIDs *views.ArchivedIDs // which calls the archive may hold, while it follows it (Runtime.FollowArchive)
	analytics   func(ctx context.Context, r wire.AnalyticsRequest) (json.RawMessage, error)
	events      EventsPosition
	issue       Issuer
	clock       func() time.Time
	conn        *bus.Conn
	limits      limits
	masker      masker
	mx          *metrics.Metrics
	log         *slog.Logger
	// signer signs receipts; receiptKeys publishes the keys.
	signer      machine.Signer
	receiptKeys *stores.ReceiptKeyStore

	// flows marks completed calls for the policy's flows (flows.go);
	// nil when the policy is not an Engine. flowMarks reads the marks,
	// for explaining a call.
	flows     flowMarker
	flowMarks *stores.FlowMarks
	// shadow is the shadow policy submits are compared against (shadow.go).
	shadow *shadow
	// reveals records who was shown a call's arguments in clear (Reveal).
	reveals *stores.RevealLog
}

// EventsPosition says how far TOOL_EVENTS goes (LastSeq: the sequence
// of its last event, 0 when none yet), and reads it a page at a time.
type EventsPosition interface {
	LastSeq(ctx context.Context) (uint64, error)
	// Page reads up to limit events in order from sequence from (0: from
	// since, or those to come), waiting up to wait for the first, and
	// says the sequence to read from next (views.EventsFeed.Page).
	Page(ctx context.Context, from uint64, since time.Time, limit int, wait time.Duration) ([]wire.StreamEvent, uint64, error)
}

// limits is what of the policy Budgets shows, DeniedTools asks and
// grants are made under:
// *policy.Engine has it.
type limits interface {
	Resolve(team, conversationID string) policy.Resolved
	DeniedTools(team, conversationID, permissionMode string, tools []string) (map[string]string, error)
	UnreadableTools(team, conversationID string, tools []string) map[string]string
	GrantTerms(c machine.Call, risk machine.Risk) policy.GrantTerms
}

// New returns the Service over cfg's buckets.
func New(cfg Config) *Service {
	js := cfg.Conn.JetStream()
	index := views.NewCallIndex(js, cfg.Buckets.Calls)
	work := views.NewWorkQueue()
	calls := bus.NewKVStore(js, cfg.Buckets.Calls).WithIndex(index).WithWorkQueue(work)
	opts := []machine.Option{}
	if cfg.Policy != nil {
		opts = append(opts, machine.WithEvaluator(withClassifier(cfg.Policy)))
	}
	if cfg.Clock != nil {
		opts = append(opts, machine.WithClock(cfg.Clock))
	}
	if cfg.Signer != nil {
		opts = append(opts, machine.WithSigner(cfg.Signer))
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lim, _ := cfg.Policy.(limits)
	mk, _ := cfg.Policy.(masker)
	fm, _ := cfg.Policy.(flowMarker)
	grants := cfg.Grants
	if grants == nil {
		grants = stores.NewGrantStore(js, cfg.Buckets.Grants)
	}
	return &Service{
		limits:      lim,
		masker:      mk,
		m:           machine.New(calls, opts...),
		calls:       calls,
		index:       index,
		work:        work,
		policies:    stores.NewPolicyStore(js, cfg.Buckets.Policies),
		grants:      grants,
		budgets:     stores.NewBudgetLedger(js, cfg.Buckets.Budgets),
		rates:       stores.NewRateCounters(js, cfg.Buckets.RateLimits),
		identities:  stores.NewIdentityStore(js, cfg.Buckets.Identities),
		tokens:      stores.NewDecisionTokenStore(js, cfg.Buckets.DecisionTokens),
		archive:     newArchive(cfg),
		archivedIDs: views.NewArchivedIDs(js),
		analytics:   cfg.Analytics,
		events:      cfg.Events,
		issue:       cfg.Issue,
		clock:       cfg.Clock,
		conn:        cfg.Conn,
		mx:          cfg.Metrics,
		log:         log,

		signer:      cfg.Signer,
		receiptKeys: newReceiptKeyStore(cfg.Buckets),
		flows:       fm,
		flowMarks:   newFlowMarks(cfg),
		shadow:      newShadow(cfg),
		reveals:     newRevealLog(cfg),
	}
}

// observe counts a refused transition, once, here: every command of every
// transport comes through the Service.
func (s *Service) observe(e *machine.Entry, err error) (*machine.Entry, error) {
	if err != nil && s.mx != nil {
		s.mx.ObserveError(err)
	}
	return e, err
}

// required refuses a request that leaves field empty.
func required(field, value string) error {
	if value == "" {
		return fmt.Errorf("%w: %s: required", machine.ErrInvalid, field)
	}
	return nil
}

// now is the time on the Service's clock (Config.Clock, else time.Now).
func (s *Service) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}
