package httpapi

import (
	"net/http"

	"github.com/toolgate/toolgate/wire"
)

// rateLimits serves the policy's rate rules and their counters.
func (s *Server) rateLimits(w http.ResponseWriter, r *http.Request, u User) error {
	reply, err := s.cfg.Gate.RateLimits(r.Context(), u, wire.RateLimitsRequest{})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}
