package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// The OpenID AuthZEN Authorization API 1.0's HTTPS binding, over gate's
// Evaluate and Evaluations (docs/authzen.md). It differs from the rest of
// the API where the specification says so: a request's members toolgate
// does not know are ignored, not refused, and a request's X-Request-ID is
// answered in the response's.

// accessEvaluation answers POST /access/v1/evaluation.
func (s *Server) accessEvaluation(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.AccessEvaluationRequest
	if err := readAuthZEN(w, r, &req); err != nil {
		return err
	}
	d, err := s.cfg.Gate.Evaluate(r.Context(), u, req)
	if err != nil {
		return err
	}
	addLinks(r, d.Context)
	writeJSON(w, http.StatusOK, d)
	return nil
}

// accessEvaluations answers POST /access/v1/evaluations.
func (s *Server) accessEvaluations(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.AccessEvaluationsRequest
	if err := readAuthZEN(w, r, &req); err != nil {
		return err
	}
	reply, err := s.cfg.Gate.Evaluations(r.Context(), u, req)
	if err != nil {
		return err
	}
	addLinks(r, reply.Context)
	for _, d := range reply.Evaluations {
		addLinks(r, d.Context)
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

// authzenConfiguration answers GET /.well-known/authzen-configuration:
// the decision point is this server, as the request reached it.
func (s *Server) authzenConfiguration(w http.ResponseWriter, r *http.Request, _ User) error {
	base := origin(r)
	w.Header().Set("Cache-Control", "max-age=3600")
	writeJSON(w, http.StatusOK, wire.AuthZENConfiguration{
		PolicyDecisionPoint:       base,
		AccessEvaluationEndpoint:  base + wire.AuthZENEvaluationPath,
		AccessEvaluationsEndpoint: base + wire.AuthZENEvaluationsPath,
	})
	return nil
}

// readAuthZEN decodes an AuthZEN request body into v, ignoring members
// it does not know (the specification's forward compatibility), and
// checks its strings' bounds.
func readAuthZEN(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: request body: %v (want a JSON object)", machine.ErrInvalid, err)
	}
	return wire.CheckBounds(v)
}

// addLinks says, in a decision's context, where its call is: its entry
// in this API and its page in the inbox this server serves.
func addLinks(r *http.Request, c *wire.AccessContext) {
	if c == nil || c.Follow == nil || c.PendingID == "" {
		return
	}
	id := url.PathEscape(c.PendingID)
	c.Follow.Call = origin(r) + "/v1/tool-calls/" + id
	c.Follow.Inbox = origin(r) + "/#/calls/" + id
}

// origin is the scheme and host a request reached this server at.
func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// echoRequestID answers an AuthZEN request's X-Request-ID in the
// response's, as the specification asks of every answer, refusals too.
func echoRequestID(w http.ResponseWriter, r *http.Request, path string) {
	if id := r.Header.Get("X-Request-ID"); id != "" && (strings.HasPrefix(path, "/access/") || path == wire.AuthZENConfigurationPath) {
		w.Header().Set("X-Request-ID", id)
	}
}
