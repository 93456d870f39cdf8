package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// shadowPolicy answers the shadow policy and its revision, its secrets
// redacted (404 when none is set).
func (s *Server) shadowPolicy(w http.ResponseWriter, r *http.Request, u User) error {
	reply, err := s.cfg.Gate.PolicyShadow(r.Context(), u, wire.PolicyGetRequest{})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

// setShadowPolicy stores the shadow policy (body: wire.PolicyDocument).
func (s *Server) setShadowPolicy(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.PolicyDocument
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	reply, err := s.cfg.Gate.SetPolicyShadow(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

// clearShadowPolicy drops the shadow policy (body: {}).
func (s *Server) clearShadowPolicy(w http.ResponseWriter, r *http.Request, u User) error {
	var req struct{}
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	reply, err := s.cfg.Gate.ClearPolicyShadow(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

// promoteShadowPolicy puts the shadow policy in force and drops it (body:
// wire.PolicyShadowPromoteRequest).
func (s *Server) promoteShadowPolicy(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.PolicyShadowPromoteRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	reply, err := s.cfg.Gate.PromotePolicyShadow(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}

// shadowPolicyReport answers what the shadow policy would have changed
// (query: since, revision, examples: wire.PolicyShadowReportRequest).
func (s *Server) shadowPolicyReport(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.PolicyShadowReportRequest
	q := r.URL.Query()
	for _, p := range []struct {
		name string
		set  func(v string) error
	}{
		{"since", func(v string) (err error) { req.Since, err = strconv.ParseInt(v, 10, 64); return }},
		{"revision", func(v string) (err error) { req.Revision, err = strconv.ParseUint(v, 10, 64); return }},
		{"examples", func(v string) (err error) { req.Examples, err = strconv.Atoi(v); return }},
	} {
		if v := q.Get(p.name); v != "" {
			if err := p.set(v); err != nil {
				return fmt.Errorf("%w: %s: want a whole number, got %q", machine.ErrInvalid, p.name, v)
			}
		}
	}
	reply, err := s.cfg.Gate.PolicyShadowReport(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}
