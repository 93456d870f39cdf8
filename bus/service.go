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
)

// The request API: a NATS micro service named "toolgate" (so `nats micro
// ls` finds it) with one endpoint per command, each on toolgate.<name>.
// Requests and replies are JSON; a refusal is a reply with the
// Nats-Service-Error-Code header set to an HTTP-like status and an
// ErrorBody naming the problem.
const (
	ServiceName = "toolgate"

	EndpointSubmit             = "submit"
	EndpointGet                = "get"
	EndpointList               = "list"
	EndpointDecide             = "decide"
	EndpointCancel             = "cancel"
	EndpointCancelConversation = "cancel_conversation"
	EndpointStarted            = "started"
	EndpointHeartbeat          = "heartbeat"
	EndpointSucceeded          = "succeeded"
	EndpointFailed             = "failed"
)

// APISubject is the subject of an endpoint.
func APISubject(endpoint string) string { return ServiceName + "." + endpoint }

// GetRequest asks for one entry.
type GetRequest struct {
	PendingID string `json:"pendingId"`
}

// ListRequest filters entries; every field is optional. With a
// conversation only its keys are read; without one, every entry is. The
// reply is a page (ListReply): Limit entries at most (default 200, at most
// 1000), fewer when they are large, and a cursor for the next.
type ListRequest struct {
	ConversationID string        `json:"conversationId,omitempty"`
	ToolName       string        `json:"toolName,omitempty"`
	CallerBotID    string        `json:"callerBotId,omitempty"`
	Status         machine.State `json:"status,omitempty"`
	Limit          int           `json:"limit,omitempty"`
	Cursor         string        `json:"cursor,omitempty"`
}

// DecideRequest approves or rejects a pending call.
type DecideRequest struct {
	PendingID string          `json:"pendingId"`
	Approved  bool            `json:"approved"`
	By        string          `json:"by"`
	Reason    string          `json:"reason,omitempty"`
	Scope     machine.Scope   `json:"scope,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// CancelRequest cancels one call (PendingID) or every call of a
// conversation that has not started running (ConversationID).
type CancelRequest struct {
	PendingID      string `json:"pendingId,omitempty"`
	ConversationID string `json:"conversationId,omitempty"`
	By             string `json:"by,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// CancelConversationReply says what a conversation's cancel did.
type CancelConversationReply struct {
	Cancelled []*machine.Entry `json:"cancelled"`
	// Running calls cannot be cancelled; their executors see the
	// conversation's cancel and stop them.
	Running []*machine.Entry `json:"running"`
}

// ReportRequest is an agent reporting on a call it runs itself: started
// (claims it), succeeded or failed.
type ReportRequest struct {
	PendingID string          `json:"pendingId"`
	By        string          `json:"by"`
	LeaseMs   int64           `json:"leaseMs,omitempty"` // started, heartbeat: default 1 hour
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	Cost      float64         `json:"cost,omitempty"`
}

// ErrorBody is the body of a refusal.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names a refusal: a code (invalid, not_found, conflict,
// forbidden, internal), what was wrong, and the entry as it is now when
// the refusal is a conflict with it.
type ErrorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Entry   *machine.Entry `json:"entry,omitempty"`
}

// ErrorStatus maps a domain error to an HTTP-like status and a code.
func ErrorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, machine.ErrInvalid):
		return 400, "invalid"
	case errors.Is(err, machine.ErrForbidden):
		return 403, "forbidden"
	case errors.Is(err, machine.ErrNotFound):
		return 404, "not_found"
	case errors.Is(err, machine.ErrConflict), errors.Is(err, machine.ErrExists):
		return 409, "conflict"
	default:
		return 500, "internal"
	}
}

// codeErrors maps a refusal's code back to the domain error, so that a
// client's errors.Is works across the wire.
var codeErrors = map[string]error{
	"invalid":   machine.ErrInvalid,
	"forbidden": machine.ErrForbidden,
	"not_found": machine.ErrNotFound,
	"conflict":  machine.ErrConflict,
}

// APIError is a refusal received from the service.
type APIError struct {
	Status int
	ErrorDetail
}

func (e *APIError) Error() string { return e.Message }

// Unwrap returns the domain error the code stands for.
func (e *APIError) Unwrap() error { return codeErrors[e.Code] }

// DecodeReply reads a reply into v, or returns the *APIError it carries.
func DecodeReply(msg *nats.Msg, v any) error {
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		status, _ := strconv.Atoi(code)
		var body ErrorBody
		if err := json.Unmarshal(msg.Data, &body); err != nil || body.Error.Message == "" {
			body.Error = ErrorDetail{Code: "internal", Message: msg.Header.Get(micro.ErrorHeader)}
		}
		return &APIError{Status: status, ErrorDetail: body.Error}
	}
	if err := json.Unmarshal(msg.Data, v); err != nil {
		return fmt.Errorf("decode reply: %w", err)
	}
	return nil
}

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
		Name:        ServiceName,
		Version:     semver(version),
		Description: "toolgate: submit tool calls, decide, cancel, report",
	})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	defer svc.Stop()
	slots := make(chan struct{}, 64)
	endpoints := map[string]func(context.Context, []byte) (any, error){
		EndpointSubmit:             s.submit,
		EndpointGet:                s.get,
		EndpointList:               s.list,
		EndpointDecide:             s.decide,
		EndpointCancel:             s.cancel,
		EndpointCancelConversation: s.cancelConversation,
		EndpointStarted:            s.started,
		EndpointHeartbeat:          s.heartbeat,
		EndpointSucceeded:          s.report(s.m.Complete),
		EndpointFailed:             s.report(s.m.Fail),
	}
	group := svc.AddGroup(ServiceName)
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
		status, code := ErrorStatus(err)
		body := ErrorBody{Error: ErrorDetail{Code: code, Message: err.Error()}}
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
	r, err := decode[GetRequest](data)
	if err != nil {
		return nil, err
	}
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	return s.m.Get(ctx, r.PendingID)
}

func (s *Service) list(ctx context.Context, data []byte) (any, error) {
	r, err := decode[ListRequest](data)
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
	r, err := decode[DecideRequest](data)
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
	r, err := decode[CancelRequest](data)
	if err != nil {
		return nil, err
	}
	if err := required("pendingId", r.PendingID); err != nil {
		return nil, err
	}
	return s.m.Cancel(ctx, r.PendingID, r.By, r.Reason)
}

func (s *Service) cancelConversation(ctx context.Context, data []byte) (any, error) {
	r, err := decode[CancelRequest](data)
	if err != nil {
		return nil, err
	}
	if err := required("conversationId", r.ConversationID); err != nil {
		return nil, err
	}
	return CancelConversation(ctx, s.nc, s.m, r.ConversationID, r.By, r.Reason)
}

// CancelSubject is where a conversation's cancel is announced (core NATS,
// a CancelConversationReply) so that executors stop its running calls,
// which no transition can cancel.
const CancelSubject = "toolgate.control.cancel"

// CancelConversation moves every entry of a conversation that has not
// started running to CANCELLED_BY_SYSTEM, reading only its keys, and
// announces the cancel on nc so executors stop the calls already running.
func CancelConversation(ctx context.Context, nc *nats.Conn, m *machine.Machine, conversationID, by, reason string) (*CancelConversationReply, error) {
	reply, err := cancelConversation(ctx, m, conversationID, by, reason)
	if err != nil {
		return nil, err
	}
	if len(reply.Running) > 0 {
		data, _ := json.Marshal(reply)
		if err := nc.Publish(CancelSubject, data); err != nil {
			return nil, fmt.Errorf("announce cancel of %s: %w", conversationID, err)
		}
	}
	return reply, nil
}

func cancelConversation(ctx context.Context, m *machine.Machine, conversationID, by, reason string) (*CancelConversationReply, error) {
	entries, err := m.ListConversation(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	reply := &CancelConversationReply{Cancelled: []*machine.Entry{}, Running: []*machine.Entry{}}
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

func (s *Service) leaseRequest(data []byte) (ReportRequest, time.Duration, error) {
	r, err := decode[ReportRequest](data)
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
		r, err := decode[ReportRequest](data)
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
