package httpapi

import (
	"net/http"

	"github.com/toolgate/toolgate/wire"
)

// policyExplain evaluates one call through the policy in force, dry, and
// answers which rules matched it and why (body: wire.PolicyExplainRequest).
// Nothing is written.
func (s *Server) policyExplain(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.PolicyExplainRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	reply, err := s.cfg.Gate.PolicyExplain(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}
