package httpapi

import (
	"net/http"

	"github.com/toolgate/toolgate/wire"
)

// receipts answers a call's signed receipt chain (docs/receipts.md), to
// whoever may read the call.
func (s *Server) receipts(w http.ResponseWriter, r *http.Request, u User) error {
	ch, err := s.cfg.Gate.Receipts(r.Context(), u, wire.GetRequest{PendingID: r.PathValue("pendingId")})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ch)
	return nil
}

// receiptKeys answers toolgate's public receipt keys, to anyone.
func (s *Server) receiptKeys(w http.ResponseWriter, r *http.Request, u User) error {
	k, err := s.cfg.Gate.ReceiptKeys(r.Context(), u, wire.ReceiptKeysRequest{})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, k)
	return nil
}
