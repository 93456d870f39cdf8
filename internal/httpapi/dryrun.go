package httpapi

import (
	"net/http"

	"github.com/toolgate/toolgate/wire"
)

// policyDryRun replays the recorded calls of a window through a candidate
// policy beside the one in force and answers what would change (body:
// wire.PolicyDryRunRequest). Nothing is written.
func (s *Server) policyDryRun(w http.ResponseWriter, r *http.Request, u User) error {
	var req wire.PolicyDryRunRequest
	if err := readJSON(w, r, &req); err != nil {
		return err
	}
	reply, err := s.cfg.Gate.PolicyDryRun(r.Context(), u, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}
