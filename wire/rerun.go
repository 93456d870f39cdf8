package wire

// EndpointRerun runs again, once, a call whose outcome is unknown (its
// executor was lost while the tool may have run): a person who may
// decide the call asks (RerunRequest), and the reply is the new call, an
// entry whose rerunOf names the first.
const EndpointRerun = "rerun"

// RerunRequest asks for the call PendingID, whose outcome is unknown, to
// run once more, for Reason.
type RerunRequest struct {
	PendingID string `json:"pendingId,omitempty"`
	By        string `json:"by,omitempty"`
	Reason    string `json:"reason,omitempty" max:"4096"`
}
