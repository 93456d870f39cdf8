package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// Service serves the request API over a Machine.
type Service struct {
	nc  *nats.Conn
	m   *machine.Machine
	kv  jetstream.KeyValue
	log *slog.Logger
	// OnDecided, when set, runs after a decision stands, with the entry as
	// decided (grants for session and always scopes).
	OnDecided func(ctx context.Context, e *machine.Entry) error
}

// NewService returns the request API over m; kv is the entries' bucket,
// read to list entries across conversations.
func NewService(m *machine.Machine, kv jetstream.KeyValue, log *slog.Logger) *Service {
	return &Service{m: m, kv: kv, log: log}
}

// Run serves requests until ctx ends. Handlers run concurrently (up to
// 64 at once), since one slow write must not hold up the others.
func (s *Service) Run(ctx context.Context, nc *nats.Conn, version string) error {
	s.nc = nc
	svc, err := micro.AddService(nc, micro.Config{
		Name:        wire.ServiceName,
		Version:     semver(version),
		Description: "toolgate: submit tool calls, decide, cancel, report",
	})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	defer svc.Stop()
	slots := make(chan struct{}, 64)
	endpoints := map[string]func(context.Context, []byte) (any, error){
		wire.EndpointSubmit:             s.submit,
		wire.EndpointGet:                s.get,
		wire.EndpointList:               s.list,
		wire.EndpointDecide:             s.decide,
		wire.EndpointCancel:             s.cancel,
		wire.EndpointCancelConversation: s.cancelConversation,
		wire.EndpointStarted:            s.started,
		wire.EndpointHeartbeat:          s.heartbeat,
		wire.EndpointSucceeded:          s.report(s.m.Complete),
		wire.EndpointFailed:             s.report(s.m.Fail),
	}
	group := svc.AddGroup(wire.ServiceName)
	for name, h := range endpoints {
		handler := micro.HandlerFunc(func(req micro.Request) {
			slots <- struct{}{}
			go func() {
				defer func() { <-slots }()
				s.serve(ctx, req, h)
			}()
		})
		if err := group.AddEndpoint(name, handler); err != nil {
			return fmt.Errorf("service endpoint %s: %w", name, err)
		}
	}
	<-ctx.Done()
	return nil
}

func (s *Service) serve(ctx context.Context, req micro.Request, h func(context.Context, []byte) (any, error)) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := h(ctx, req.Data())
	if err != nil {
		status, code := wire.ErrorStatus(err)
		body := wire.ErrorBody{Error: wire.ErrorDetail{Code: code, Message: err.Error()}}
		if te := (*machine.TransitionError)(nil); errors.As(err, &te) {
			body.Error.Entry = te.Entry
		}
		if status == 500 {
			s.log.Error("request failed", "subject", req.Subject(), "err", err)
		}
		data, _ := json.Marshal(body)
		_ = req.Error(strconv.Itoa(status), err.Error(), data)
		return
	}
	if err := req.RespondJSON(v); err != nil {
		s.log.Warn("respond", "subject", req.Subject(), "err", err)
	}
}

// decode reads a request body, naming what is wrong with it.
func decode[T any](data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("%w: request body: %v", machine.ErrInvalid, err)
	}
	return v, nil
}

func required(field, value string) error {
	if value == "" {
		return fmt.Errorf("%w: %s: required", machine.ErrInvalid, field)
	}
	return nil
}

func (s *Service) submit(ctx context.Context, data []byte) (any, error) {
	c, err := decode[machine.Call](data)
	if err != nil {
		return nil, err
	}
	return s.m.Submit(ctx, c)
}

func (s *Service) get(ctx context.Context, data []byte) (any, error) {
	r, err := decode[wire.GetRequest](data)
	if err != nil {
		return nil, err
	}
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	return s.m.Get(ctx, r.PendingID)
}

func (s *Service) list(ctx context.Context, data []byte) (any, error) {
	r, err := decode[wire.ListRequest](data)
	if err != nil {
		return nil, err
	}
	if _, err := ListPage(nil, r); err != nil {
		return nil, err // a bad filter, before anything is read
	}
	var all []*machine.Entry
	if r.ConversationID != "" {
		all, err = s.m.ListConversation(ctx, r.ConversationID)
	} else {
		all, err = ListAll(ctx, s.kv)
	}
	if err != nil {
		return nil, err
	}
	return ListPage(all, r)
}

func (s *Service) decide(ctx context.Context, data []byte) (any, error) {
	r, err := decode[wire.DecideRequest](data)
	if err != nil {
		return nil, err
	}
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	e, err := s.m.Decide(ctx, r.PendingID, machine.Decision{
		Approve: r.Approved, By: r.By, Reason: r.Reason, Scope: r.Scope, Arguments: r.Arguments,
	})
	if err != nil {
		return nil, err
	}
	if s.OnDecided != nil {
		if err := s.OnDecided(ctx, e); err != nil {
			// The decision stands; only its reach beyond this call failed.
			s.log.Error("recording the decision's scope failed", "pendingId", e.PendingID, "scope", e.DecisionScope, "err", err)
		}
	}
	return e, nil
}

func (s *Service) cancel(ctx context.Context, data []byte) (any, error) {
	r, err := decode[wire.CancelRequest](data)
	if err != nil {
		return nil, err
	}
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	return s.m.Cancel(ctx, r.PendingID, r.By, r.Reason)
}

func (s *Service) cancelConversation(ctx context.Context, data []byte) (any, error) {
	r, err := decode[wire.CancelRequest](data)
	if err != nil {
		return nil, err
	}
	if err := required("conversationId", r.ConversationID); err != nil {
		return nil, err
	}
	return CancelConversation(ctx, s.nc, s.m, r.ConversationID, r.By, r.Reason)
}

// CancelConversation moves every entry of a conversation that has not
// started running to CANCELLED_BY_SYSTEM, reading only its keys, and
// announces the cancel on nc so executors stop the calls already running.
func CancelConversation(ctx context.Context, nc *nats.Conn, m *machine.Machine, conversationID, by, reason string) (*wire.CancelConversationReply, error) {
	reply, err := cancelConversation(ctx, m, conversationID, by, reason)
	if err != nil {
		return nil, err
	}
	if len(reply.Running) > 0 {
		data, _ := json.Marshal(reply)
		if err := nc.Publish(wire.CancelSubject, data); err != nil {
			return nil, fmt.Errorf("announce cancel of %s: %w", conversationID, err)
		}
	}
	return reply, nil
}

func cancelConversation(ctx context.Context, m *machine.Machine, conversationID, by, reason string) (*wire.CancelConversationReply, error) {
	entries, err := m.ListConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	reply := &wire.CancelConversationReply{Cancelled: []*machine.Entry{}, Running: []*machine.Entry{}}
	for _, e := range entries {
		if e.Status.Terminal() {
			continue
		}
		if e.Status == machine.StateExecuting {
			reply.Running = append(reply.Running, e)
			continue
		}
		got, err := m.Cancel(ctx, e.PendingID, by, reason)
		var te *machine.TransitionError
		switch {
		case errors.As(err, &te):
			// It moved on while we looked: running now, or finished.
			if te.Entry.Status == machine.StateExecuting {
				reply.Running = append(reply.Running, te.Entry)
			}
		case err != nil:
			return nil, err
		default:
			reply.Cancelled = append(reply.Cancelled, got)
		}
	}
	return reply, nil
}

func (s *Service) started(ctx context.Context, data []byte) (any, error) {
	r, lease, err := s.leaseRequest(data)
	if err != nil {
		return nil, err
	}
	return s.m.Claim(ctx, r.PendingID, r.By, lease)
}

// heartbeat renews the lease of an agent running a call itself, for tools
// that run longer than the lease started gave them.
func (s *Service) heartbeat(ctx context.Context, data []byte) (any, error) {
	r, lease, err := s.leaseRequest(data)
	if err != nil {
		return nil, err
	}
	return s.m.Heartbeat(ctx, r.PendingID, r.By, lease)
}

func (s *Service) leaseRequest(data []byte) (wire.ReportRequest, time.Duration, error) {
	r, err := decode[wire.ReportRequest](data)
	if err != nil {
		return r, 0, err
	}
	if err := required("pendingId", r.PendingID); err != nil {
		return r, 0, err
	}
	lease := time.Hour
	if r.LeaseMs > 0 {
		lease = time.Duration(r.LeaseMs) * time.Millisecond
	}
	return r, lease, nil
}

func (s *Service) report(finish func(context.Context, string, machine.Outcome) (*machine.Entry, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, data []byte) (any, error) {
		r, err := decode[wire.ReportRequest](data)
		if err != nil {
			return nil, err
		}
		if err := required("pendingId", r.PendingID); err != nil {
			return nil, err
		}
		return finish(ctx, r.PendingID, machine.Outcome{Holder: r.By, Result: r.Result, Error: r.Error, Cost: r.Cost})
	}
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
