// Package natsapi serves toolgate's request API on NATS: it decodes each
// request, calls the application layer (package gate) and encodes what it
// returns. Agents, executors and the CLI reach toolgate through it.
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
	"golang.org/x/sync/semaphore"
)

// Service serves the request API: a NATS micro service named "toolgate"
// (so `nats micro ls` finds it) with one endpoint per use case, each on
// toolgate.<name>. Requests and replies are JSON; a refusal is a reply
// with the Nats-Service-Error-Code header set to an HTTP-like status and
// an ErrorBody naming the problem.
type Service struct {
	gate *gate.Service
	log  *slog.Logger
}

// New returns the request API over g.
func New(g *gate.Service, log *slog.Logger) *Service {
	return &Service{gate: g, log: log}
}

// Instances is how many instances of the service Run adds on one
// connection. Each answers its requests one at a time, as micro's stats
// assume (`nats micro stats toolgate` counts the time to the answer, and
// the refusals as errors); requests are shared among the instances of
// every process by the endpoints' queue group, so this is how many
// requests to one endpoint a process serves at once.
const Instances = 16

// stopping is the weight Run acquires at its end to wait for the requests
// in flight: more than Instances × endpoints could ever hold.
const stopping = 1 << 30

// Run serves requests until ctx ends, then waits for the requests in
// flight to be answered.
func (s *Service) Run(ctx context.Context, nc *nats.Conn, version string) error {
	inflight := semaphore.NewWeighted(stopping)
	defer inflight.Acquire(context.Background(), stopping) //nolint:errcheck // cannot fail without a context to end
	for range Instances {
		svc, err := micro.AddService(nc, micro.Config{
			Name:        wire.ServiceName,
			Version:     semver(version),
			Description: "toolgate: submit tool calls, decide, cancel, report",
		})
		if err != nil {
			return fmt.Errorf("service: %w", err)
		}
		defer svc.Stop() // first: no new requests while the last are answered
		group := svc.AddGroup(wire.ServiceName)
		for name, e := range s.endpoints() {
			handler := micro.HandlerFunc(func(req micro.Request) {
				if !inflight.TryAcquire(1) {
					_ = req.Error("503", "toolgate is stopping: ask again", nil)
					return
				}
				if e.waits {
					// Answered when there is something to answer, or
					// its wait is over: not in the instance's turn.
					go func() {
						defer inflight.Release(1)
						s.serve(ctx, req, e.handle)
					}()
					return
				}
				defer inflight.Release(1)
				s.serve(ctx, req, e.handle)
			})
			md := map[string]string{"request": typeName(e.request), "reply": typeName(e.reply)}
			if err := group.AddEndpoint(name, handler, micro.WithEndpointMetadata(md)); err != nil {
				return fmt.Errorf("service endpoint %s: %w", name, err)
			}
		}
	}
	<-ctx.Done()
	return nil
}

// WaitReady waits until toolgate's request API serves every endpoint on
// nc's servers. A ping is not enough: the service answers pings as soon
// as it is added, before its endpoints subscribe, and a request sent in
// between gets "no responders".
func WaitReady(ctx context.Context, nc *nats.Conn) error {
	want := len((&Service{}).endpoints())
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		msg, err := nc.RequestWithContext(rctx, "$SRV.INFO."+wire.ServiceName, nil)
		cancel()
		var info micro.Info
		if err == nil && json.Unmarshal(msg.Data, &info) == nil && len(info.Endpoints) >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// reply is what a handler answers: a value to encode as JSON, and headers.
type reply struct {
	v      any
	header micro.Headers
}

type handler func(context.Context, gate.Actor, []byte) (reply, error)

// endpoint is a handler and the Go types of what it reads and answers,
// which its metadata names.
type endpoint struct {
	handle         handler
	request, reply reflect.Type
	// waits is set for a request that may wait (long-poll): it is
	// answered on a goroutine of its own.
	waits bool
}

// typeName names a request's or reply's type as the wire contract spells
// it: "machine.Call", "machine.Entry".
func typeName(t reflect.Type) string {
	return strings.TrimLeft(t.String(), "*[]")
}

// answer makes an endpoint of a use case that answers one value.
func answer[T, R any](f func(context.Context, gate.Actor, T) (R, error)) endpoint {
	return endpoint{
		handle: func(ctx context.Context, a gate.Actor, data []byte) (reply, error) {
			var req T
			if err := decode(data, &req); err != nil {
				return reply{}, err
			}
			v, err := f(ctx, a, req)
			return reply{v: v}, err
		},
		request: reflect.TypeFor[T](), reply: reflect.TypeFor[R](),
	}
}

// decode decodes a request and checks it as every transport does
// (wire.CheckRequest).
func decode(data []byte, v any) error {
	if err := wire.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: request body: %v", machine.ErrInvalid, err)
	}
	return wire.CheckRequest(data, v)
}

// waiting marks e as a request that may wait.
func waiting(e endpoint) endpoint {
	e.waits = true
	return e
}

func (s *Service) endpoints() map[string]endpoint {
	g := s.gate // nil for WaitReady, which only counts them
	return map[string]endpoint{
		wire.EndpointSubmit:             answer(g.Submit),
		wire.EndpointGet:                {handle: s.get, request: reflect.TypeFor[wire.GetRequest](), reply: reflect.TypeFor[machine.Entry]()},
		wire.EndpointList:               answer(g.List),
		wire.EndpointDecide:             answer(g.Decide),
		wire.EndpointDecideMatching:     answer(g.DecideMatching),
		wire.EndpointGrantsList:         answer(g.Grants),
		wire.EndpointGrantsRevoke:       answer(g.RevokeGrant),
		wire.EndpointGrantsPreview:      answer(g.GrantPreview),
		wire.EndpointCancel:             answer(g.Cancel),
		wire.EndpointCancelConversation: answer(g.CancelConversation),
		wire.EndpointStarted:            answer(g.ClaimAt),
		wire.EndpointHeartbeat:          answer(g.Heartbeat),
		wire.EndpointRetry:              answer(g.Retry),
		wire.EndpointBudgets:            answer(g.Budgets),
		wire.EndpointRateLimits:         answer(g.RateLimits),
		wire.EndpointAnalytics:          answer(g.Analytics),
		wire.EndpointPolicyGet:          answer(g.Policy),
		wire.EndpointPolicySet:          answer(g.SetPolicy),
		wire.EndpointDeniedTools:        answer(g.DeniedTools),
		wire.EndpointWork:               waiting(answer(g.TakeWork)),
		wire.EndpointCredsAdd:           answer(g.IssueCredential),
		wire.EndpointCredsList:          answer(g.Credentials),
		wire.EndpointCredsRevoke:        answer(g.RevokeCredential),
		wire.EndpointReceipts:           answer(g.Receipts),
		wire.EndpointReveal:             answer(g.Reveal),
		wire.EndpointRerun:              answer(g.Rerun),
		wire.EndpointEvents:             waiting(answer(g.Events)),
		wire.EndpointReceiptsKey:        answer(g.ReceiptKeys),
		wire.EndpointSucceeded:          answer(g.Complete),
		wire.EndpointFailed:             answer(g.Fail),
		wire.EndpointPolicyDryRun:       answer(g.PolicyDryRun),
		wire.EndpointPolicyExplain:      answer(g.PolicyExplain),
		wire.EndpointRecheck:            answer(g.Recheck),
		// The shadow policy.
		wire.EndpointPolicyShadowGet:     answer(g.PolicyShadow),
		wire.EndpointPolicyShadowSet:     answer(g.SetPolicyShadow),
		wire.EndpointPolicyShadowClear:   answer(g.ClearPolicyShadow),
		wire.EndpointPolicyShadowPromote: answer(g.PromotePolicyShadow),
		wire.EndpointPolicyShadowReport:  answer(g.PolicyShadowReport),
	}
}

// get answers an entry with its revision in a header, by which Await
// orders it among the revisions announced on the entry's subject.
func (s *Service) get(ctx context.Context, a gate.Actor, data []byte) (reply, error) {
	var r wire.GetRequest
	if err := decode(data, &r); err != nil {
		return reply{}, err
	}
	e, rev, err := s.gate.Read(ctx, a, r)
	if err != nil {
		return reply{}, err
	}
	return reply{v: e, header: micro.Headers{wire.RevisionHeader: {strconv.FormatUint(rev, 10)}}}, nil
}

// serve answers one request: as the caller's actor, h's reply, or a
// refusal as micro's own Error makes it (status and description in
// headers, which hold no line breaks; the ErrorBody beside them), which
// micro counts as an error.
func (s *Service) serve(ctx context.Context, req micro.Request, h handler) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var r reply
	a, err := actorOf(req.Headers())
	if err == nil {
		err = s.gate.Authenticate(ctx, a)
	}
	if err == nil {
		r, err = h(ctx, a, req.Data())
	}
	if err == nil {
		var data []byte
		if data, err = json.Marshal(r.v); err != nil {
			s.log.Error("encode reply", "subject", req.Subject(), "err", err)
			return
		}
		err = req.Respond(data, micro.WithHeaders(r.header))
	} else {
		status, code := wire.ErrorStatus(err)
		body := wire.ErrorBody{Error: wire.ErrorDetail{Code: code, Message: err.Error()}}
		if te := (*machine.TransitionError)(nil); errors.As(err, &te) {
			body.Error.Entry = te.Entry
		}
		if status == 500 {
			s.log.Error("request failed", "subject", req.Subject(), "err", err)
		}
		data, _ := json.Marshal(body)
		err = req.Error(strconv.Itoa(status), headerText(err.Error()), data)
	}
	if err != nil {
		s.log.Warn("respond", "subject", req.Subject(), "err", err)
	}
}

// maxDescription bounds the refusal's description header; the body
// holds the whole message.
const maxDescription = 512

// headerText is msg on one line, cut to maxDescription bytes (at a rune).
func headerText(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) <= maxDescription {
		return msg
	}
	cut := maxDescription - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// semver makes a build's version acceptable to micro, which takes only
// SemVer: "v1.2.3" loses its v; anything else (a git describe) becomes a
// pre-release of 0.0.0 rather than stopping the service.
func semver(v string) string {
	v = strings.TrimPrefix(v, "v")
	if semverRE.MatchString(v) {
		return v
	}
	return "0.0.0-" + strings.Trim(regexp.MustCompile(`[^0-9A-Za-z-]+`).ReplaceAllString(v, "."), ".")
}
