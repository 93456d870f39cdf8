// Command reviewer is a reference automated reviewer for toolgate: an
// HTTP endpoint that a policy's reviewers list names, which applies a
// few rules written the way a person would say them:
//
//   - never delete recursively (rm -rf): reject;
//   - anything touching a .env file is for a human: escalate, leaning
//     to reject;
//   - read-only git (git status, git diff, git log) is fine: approve;
//   - fetching documentation (a docs.* host) is fine: approve;
//   - anything else: abstain, and a human decides.
//
// toolgate signs each request as it signs webhook deliveries (Standard
// Webhooks: webhook-id, webhook-timestamp, webhook-signature); the
// reviewer refuses one whose signature its secret does not make. The
// reviewer proposes; toolgate disposes: an approval beyond the policy's
// mayApprove for the reviewer, or of a call a deny rule, a quorum or a
// high risk reserves for humans, is refused and left to them.
//
// Run it with the secret the policy gives the reviewer:
//
//	TOOLGATE_REVIEWER_SECRET=whsec_… go run ./examples/reviewer --listen 127.0.0.1:8099
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8099", "where to answer toolgate's POSTs (any path)")
	flag.Parse()
	secret := os.Getenv("TOOLGATE_REVIEWER_SECRET")
	h, err := newHandler(secret, time.Now)
	if err != nil {
		log.Fatalf("reviewer: TOOLGATE_REVIEWER_SECRET: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	log.Printf("reviewer: answering on http://%s", *listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// rule is one of the reviewer's rules: what it says, in words, and what
// it answers for a call it covers.
type rule struct {
	says   string
	answer wire.ReviewAnswer
	covers func(c *machine.Entry) bool
}

// readOnlyGit is a command line of one read-only git command, nothing
// chained, piped or redirected after it.
var readOnlyGit = regexp.MustCompile(`^git (status|diff|log)( [^;&|<>$` + "`" + `]*)?$`)

// rules are checked in order; the first that covers the call answers.
var rules = []rule{
	{
		says:   "never delete recursively",
		answer: wire.ReviewAnswer{Decision: machine.ReviewReject, Reason: "rm -rf deletes recursively"},
		covers: func(c *machine.Entry) bool { return c.ToolName == "Bash" && strings.Contains(command(c), "rm -rf") },
	},
	{
		says:   "anything touching a .env file is for a human",
		answer: wire.ReviewAnswer{Decision: machine.ReviewEscalate, Lean: machine.ReviewReject, Reason: "it touches a .env file"},
		covers: func(c *machine.Entry) bool { return strings.Contains(string(c.ToolArguments), ".env") },
	},
	{
		says:   "read-only git is fine",
		answer: wire.ReviewAnswer{Decision: machine.ReviewApprove, Reason: "read-only git"},
		covers: func(c *machine.Entry) bool { return c.ToolName == "Bash" && readOnlyGit.MatchString(command(c)) },
	},
	{
		says:   "fetching documentation is fine",
		answer: wire.ReviewAnswer{Decision: machine.ReviewApprove, Reason: "a documentation site"},
		covers: func(c *machine.Entry) bool {
			var args struct {
				URL string `json:"url"`
			}
			if c.ToolName != "WebFetch" || json.Unmarshal(c.ToolArguments, &args) != nil {
				return false
			}
			u, err := url.Parse(args.URL)
			return err == nil && u.Scheme == "https" && strings.HasPrefix(u.Hostname(), "docs.")
		},
	},
}

// command is a Bash call's command line, trimmed; "" for any other.
func command(c *machine.Entry) string {
	var args struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(c.ToolArguments, &args)
	return strings.TrimSpace(args.Command)
}

// review answers one call: the first rule that covers it, or abstain.
func review(c *machine.Entry) wire.ReviewAnswer {
	for _, r := range rules {
		if r.covers(c) {
			return r.answer
		}
	}
	return wire.ReviewAnswer{Decision: machine.ReviewAbstain, Reason: "no rule of mine covers it"}
}

// handler answers toolgate's signed requests.
type handler struct {
	key []byte
	now func() time.Time
}

// newHandler returns the reviewer's HTTP handler; secret is the whsec_
// secret the policy gives the reviewer.
func newHandler(secret string, now func() time.Time) (http.Handler, error) {
	enc, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New("want a whsec_ secret (toolgate webhook-secret makes one)")
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("the key after whsec_ is not base64: %v", err)
	}
	return &handler{key: key, now: now}, nil
}

// tolerance is how far a request's timestamp may be from now.
const tolerance = 5 * time.Minute

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST a review request", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	if err := h.verify(r.Header, body); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var req wire.ReviewRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Call == nil {
		http.Error(w, "not a review request", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review(req.Call))
}

// verify checks a request's Standard Webhooks signature and timestamp.
func (h *handler) verify(hd http.Header, body []byte) error {
	id, ts := hd.Get("webhook-id"), hd.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return errors.New("unsigned request")
	}
	if d := h.now().Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook-timestamp too far from now")
	}
	mac := hmac.New(sha256.New, h.key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(hd.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("webhook-signature does not match")
}
