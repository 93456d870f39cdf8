package httpapi

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// A one-time decision token is its own credential: POST
// /v1/decision-tokens/{token} decides, with no bearer token, in open and
// token mode alike. Like every POST it takes JSON only and refuses a
// browser's cross-origin request, so a page elsewhere cannot make a
// browser redeem a link it learnt. GET shows what the token would do and
// a button that POSTs it: a link preview bot (Slack's, a mail scanner's)
// that follows the link decides nothing.

func (s *Server) redeemDecisionToken(w http.ResponseWriter, r *http.Request, _ User) error {
	e, err := s.cfg.Gate.Links().Redeem(r.Context(), r.PathValue("token"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// decisionPage is the page a decision link shows: the call, what the
// button does, and the button, whose script POSTs the token as JSON.
var decisionPage = template.Must(template.New("decision").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>toolgate: {{.Title}}</title>
<style nonce="{{.Nonce}}">body{font:16px system-ui,sans-serif;max-width:32em;margin:2em auto;padding:0 1em}
dt{font-weight:600}dd{margin:0 0 .6em 0;word-break:break-word}button{font-size:1.1em;padding:.6em 1.4em}
.approve{background:#1a7f37;color:#fff}.reject{background:#cf222e;color:#fff}</style></head>
<body><h1>{{.Title}}</h1>
{{with .Entry}}<dl><dt>Tool</dt><dd>{{.ToolName}}</dd><dt>What</dt><dd>{{.Description}}</dd>
<dt>Caller</dt><dd>{{.CallerBotID}}</dd><dt>Conversation</dt><dd>{{.ConversationID}}</dd><dt>Status</dt><dd>{{.Status}}</dd></dl>{{end}}
<p id="msg">{{.Message}}</p>
{{if .Offer}}<button id="go" class="{{.Class}}">{{.Button}}</button>
<script nonce="{{.Nonce}}">
document.getElementById("go").addEventListener("click", async (ev) => {
  ev.target.disabled = true;
  const msg = document.getElementById("msg");
  try {
    const r = await fetch(location.pathname, {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}", credentials: "omit"});
    const b = await r.json();
    msg.textContent = r.ok ? "Done: the call is " + b.status + "." : "Refused: " + ((b.error && b.error.message) || r.status);
  } catch (e) { msg.textContent = "Failed: " + e; ev.target.disabled = false; }
});
</script>{{end}}
</body></html>
`))

type decisionPageData struct {
	Title, Message, Button, Class, Nonce string
	Offer                                bool
	Entry                                *machine.Entry
}

func (s *Server) showDecisionToken(w http.ResponseWriter, r *http.Request, _ User) error {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	d := decisionPageData{Nonce: base64.StdEncoding.EncodeToString(nonce)}
	status := http.StatusOK
	v, err := s.cfg.Gate.Links().View(r.Context(), r.PathValue("token"))
	switch {
	case errors.Is(err, machine.ErrNotFound):
		status, d.Title, d.Message = http.StatusNotFound, "Unknown link", "This decision link is not one toolgate issued, or it is too old."
	case err != nil:
		status, _ = wire.ErrorStatus(err)
		d.Title, d.Message = "Error", "toolgate could not read this link; try again."
		if status == http.StatusInternalServerError && s.cfg.Log != nil {
			s.cfg.Log.Error("request failed", "err", err)
		}
	default:
		d.Entry = v.Entry
		verb := "Reject"
		d.Class = "reject"
		if v.Approve {
			verb, d.Class = "Approve", "approve"
		}
		d.Title = verb + " " + v.Entry.ToolName + "?"
		switch {
		case v.Used:
			status, d.Message = http.StatusGone, "This link was used already."
		case v.Expired:
			status, d.Message = http.StatusGone, "This link expired at "+v.ExpiresAt.UTC().Format(time.RFC1123)+"."
		case v.Entry.Status != machine.StatePendingApproval:
			d.Message = "The call is no longer waiting for a decision."
		default:
			d.Offer, d.Button = true, verb+" as "+v.Approver
			d.Message = "Good once, until " + v.ExpiresAt.UTC().Format(time.RFC1123) + "."
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// The URL is a credential: no cache keeps it, no Referer carries it,
	// and no other site frames the button to have it clicked.
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+d.Nonce+"'; style-src 'nonce-"+d.Nonce+"'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	w.WriteHeader(status)
	return decisionPage.Execute(w, d)
}
