package machine

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Receipt is a signed record of one transition of an entry: what happened
// (the event, from and to which state), to which call (its tool, caller
// and the digest of its arguments), who did it and when, and the hash of
// the receipt before it. An entry's receipts form a chain, appended in the
// same write as the transition each records, so there is never a
// transition without its receipt. A heartbeat, which changes nothing
// anyone watches, has none.
//
// The field names are a public contract (docs/receipts.md): a verifier in
// any language rebuilds the signed bytes from them (ReceiptCanonical).
type Receipt struct {
	// Seq is the receipt's place in its entry's chain, from 1.
	Seq       int    `json:"seq"`
	PendingID string `json:"pendingId"`
	ToolName  string `json:"toolName"`
	Caller    string `json:"caller"`
	Event     Event  `json:"event"`
	// From is absent on the receipt of the entry's creation.
	From  State  `json:"from,omitempty"`
	To    State  `json:"to"`
	Actor string `json:"actor"`
	// At is when, in epoch milliseconds.
	At     int64  `json:"at"`
	Reason string `json:"reason,omitempty"`
	// DecidedBy is what decided, on a receipt of a decision
	// (Transition.DecidedBy).
	DecidedBy Decider `json:"decidedBy,omitempty"`
	// Scope is an approval's.
	Scope Scope `json:"scope,omitempty"`
	// ArgumentsDigest is the call's after the transition: an approval
	// that edited the arguments records the edited ones'.
	ArgumentsDigest string `json:"argumentsDigest"`
	// ResultDigest is an outcome's (succeed, fail): OutcomeDigest of the
	// result, the error and the cost recorded.
	ResultDigest string `json:"resultDigest,omitempty"`
	// Prev is the hash (ReceiptHash) of the receipt before, absent on the
	// first.
	Prev string `json:"prev,omitempty"`
	// Key is the public key of the signer (an Ed25519 key, as toolgate's
	// Signer spells it: an nkey).
	Key string `json:"key"`
	// Sig is the Ed25519 signature of ReceiptCanonical, in unpadded
	// base64url.
	Sig string `json:"sig,omitempty"`
	// Vote is a vote's say (event vote, under a quorum): "approve" or
	// "reject".
	Vote string `json:"vote,omitempty"`
	// Identity is who Actor is at the OpenID provider that signed them
	// in (Transition.Identity), on a decision or vote made signed in so.
	Identity *Identity `json:"identity,omitempty"`
	// ViaGroup is the group that let Actor decide or vote
	// (Transition.ViaGroup), when no name of the call's approvers did.
	ViaGroup string `json:"viaGroup,omitempty"`
}

// Signer signs receipts: toolgate's receipt key.
type Signer interface {
	// PublicKey is the key's public half as receipts name it.
	PublicKey() string
	// Sign returns the Ed25519 signature of msg.
	Sign(msg []byte) ([]byte, error)
}

// WithSigner has the Machine append a receipt signed by s to every entry
// it writes for a transition that is not silent. Without one, it appends
// none.
func WithSigner(s Signer) Option { return func(m *Machine) { m.signer = s } }

// seal appends to e the receipt of its LastTransition, signed, just before
// e is written: in the same write.
func (m *Machine) seal(e *Entry) error {
	t := e.LastTransition
	if m.signer == nil || t == nil || t.Event.Silent() {
		return nil
	}
	r := Receipt{
		Seq: len(e.Receipts) + 1, PendingID: e.PendingID, ToolName: e.ToolName, Caller: e.CallerBotID,
		Event: t.Event, From: t.From, To: t.To, Actor: t.Actor, At: t.At, Reason: t.Reason, DecidedBy: t.DecidedBy,
		ArgumentsDigest: e.ArgumentsDigest, Key: m.signer.PublicKey(), Identity: t.Identity, ViaGroup: t.ViaGroup,
	}
	if t.Event == EventApprove {
		r.Scope = e.DecisionScope
	}
	if n := len(e.Votes); t.Event == EventVote && n > 0 {
		r.Vote = voteWord(e.Votes[n-1].Approve)
	}
	if t.Event == EventSucceed || t.Event == EventFail || t.Event == EventRespond {
		r.ResultDigest = OutcomeDigest(e.Result, e.Error, e.Cost)
	}
	if n := len(e.Receipts); n > 0 {
		prev, err := ReceiptHash(e.Receipts[n-1])
		if err != nil {
			return fmt.Errorf("receipt: %w", err)
		}
		r.Prev = prev
	}
	msg, err := ReceiptCanonical(r)
	if err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	sig, err := m.signer.Sign(msg)
	if err != nil {
		return fmt.Errorf("receipt: sign: %w", err)
	}
	r.Sig = base64.RawURLEncoding.EncodeToString(sig)
	// Clipped: the entry read shares its receipts with e.
	e.Receipts = append(slices.Clip(e.Receipts), r)
	return nil
}

// OutcomeDigest is the digest (as ArgumentsDigest makes it) of the object
// {"cost": cost, "error": errText, "result": result} that an outcome
// receipt binds to; an absent result is null.
func OutcomeDigest(result json.RawMessage, errText string, cost float64) string {
	r := result
	if len(r) == 0 {
		r = json.RawMessage("null")
	}
	data, _ := json.Marshal(struct {
		Cost   float64         `json:"cost"`
		Error  string          `json:"error"`
		Result json.RawMessage `json:"result"`
	}{cost, errText, r})
	return ArgumentsDigest(data)
}

// ReceiptCanonical is what a receipt's signature signs: the receipt as a
// JSON object without "sig", in the JSON Canonicalization Scheme (RFC
// 8785): members sorted by name, no whitespace, integers in decimal,
// strings escaping only '"', '\\' and the control characters (\b \t \n
// \f \r, the others as \u00xx), everything else as UTF-8.
func ReceiptCanonical(r Receipt) ([]byte, error) {
	r.Sig = ""
	return canonicalReceipt(r)
}

// ReceiptHash is what the next receipt's Prev names: "sha256:" and the hex
// SHA-256 of the receipt's canonical form with its signature.
func ReceiptHash(r Receipt) (string, error) {
	b, err := canonicalReceipt(r)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// canonicalReceipt writes r in RFC 8785's form directly, its members in
// the order of their names (a test holds it to a general canonicalizer).
// Seq and At are integers well within ±2^53.
func canonicalReceipt(r Receipt) ([]byte, error) {
	if r.At > 1<<53 || r.At < -(1<<53) {
		return nil, fmt.Errorf("at %d: receipts hold only integers within ±2^53", r.At)
	}
	var b bytes.Buffer
	b.Grow(512)
	first := true
	field := func(name string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteByte('"')
		b.WriteString(name)
		b.WriteString(`":`)
	}
	str := func(name, v string, omitEmpty bool) {
		if v == "" && omitEmpty {
			return
		}
		field(name)
		canonicalString(&b, v)
	}
	b.WriteByte('{')
	str("actor", r.Actor, false)
	str("argumentsDigest", r.ArgumentsDigest, false)
	field("at")
	b.WriteString(strconv.FormatInt(r.At, 10))
	str("caller", r.Caller, false)
	str("decidedBy", string(r.DecidedBy), true)
	str("event", string(r.Event), false)
	str("from", string(r.From), true)
	if id := r.Identity; id != nil {
		// An object of its own, its members in the order of their
		// names too; name and email absent when empty, as in its JSON.
		field("identity")
		b.WriteByte('{')
		first = true
		str("email", id.Email, true)
		str("iss", id.Issuer, false)
		str("name", id.Name, true)
		str("sub", id.Subject, false)
		b.WriteByte('}')
		first = false
	}
	str("key", r.Key, false)
	str("pendingId", r.PendingID, false)
	str("prev", r.Prev, true)
	str("reason", r.Reason, true)
	str("resultDigest", r.ResultDigest, true)
	str("scope", string(r.Scope), true)
	field("seq")
	b.WriteString(strconv.Itoa(r.Seq))
	str("sig", r.Sig, true)
	str("to", string(r.To), false)
	str("toolName", r.ToolName, false)
	str("viaGroup", r.ViaGroup, true)
	str("vote", r.Vote, true)
	b.WriteByte('}')
	return b.Bytes(), nil
}

func canonicalString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, c := range strings.ToValidUTF8(s, string(utf8.RuneError)) {
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 {
				fmt.Fprintf(b, `\u%04x`, c)
			} else {
				b.WriteRune(c)
			}
		}
	}
	b.WriteByte('"')
}

// ReceiptCheck is what VerifyReceipts checks a chain against.
type ReceiptCheck struct {
	// Verify reports whether sig is key's Ed25519 signature of msg, key
	// as receipts name it.
	Verify func(key string, msg, sig []byte) bool
	// Trusted are the keys whose receipts are believed: at least one.
	Trusted []string
	// ArgumentsMasked says the entry's arguments are shown with their
	// secrets masked: they are checked by their digest only.
	ArgumentsMasked bool
}

// ReceiptError says where a chain fails verification: at a receipt (Seq,
// from 1), or in the entry (Seq 0) where it disagrees with its receipts.
type ReceiptError struct {
	Seq     int
	Receipt *Receipt // the receipt at fault or, for the entry, the one it disagrees with
	Problem string
}

func (e *ReceiptError) Error() string {
	if e.Seq == 0 {
		return "entry: " + e.Problem
	}
	return e.Receipt.String() + ": " + e.Problem
}

// String names a receipt as an error or a table does: "receipt 3 (approve
// by alice at 2025-01-02T03:04:05Z)".
func (r *Receipt) String() string {
	return fmt.Sprintf("receipt %d (%s by %s at %s)", r.Seq, r.Event, r.Actor, time.UnixMilli(r.At).UTC().Format(time.RFC3339))
}

// VerifyReceipts checks e's receipts and e against them: each receipt is
// signed by a trusted key, names the one before by its hash, follows the
// one before by a move the transition table allows, and is about e's
// call; and e says what its last receipts record (its state, arguments,
// decision and outcome). It returns the keys that signed, in order of
// first use, or a *ReceiptError naming the first receipt (or field of e)
// at fault.
//
// A chain cut short after a receipt verifies as the shorter history, with
// the entry made to match it: compare its length or last hash with a copy
// kept elsewhere (each event carries the receipt of its transition).
func VerifyReceipts(e *Entry, c ReceiptCheck) ([]string, error) {
	if c.Verify == nil || len(c.Trusted) == 0 {
		return nil, errors.New("verify receipts: no trusted key")
	}
	rs := e.Receipts
	if len(rs) == 0 {
		return nil, &ReceiptError{Problem: "no receipts (written before receipts, or by a toolgate without a receipt key)"}
	}
	var signers []string
	for i := range rs {
		r := &rs[i]
		fail := func(format string, args ...any) error {
			return &ReceiptError{Seq: i + 1, Receipt: r, Problem: fmt.Sprintf(format, args...)}
		}
		if r.Seq != i+1 {
			return nil, fail("seq says %d: receipts missing, added or reordered", r.Seq)
		}
		if !slices.Contains(c.Trusted, r.Key) {
			return nil, fail("signed by %s, not a trusted key (trusted: %s)", r.Key, strings.Join(c.Trusted, ", "))
		}
		msg, err := ReceiptCanonical(*r)
		if err != nil {
			return nil, fail("%v", err)
		}
		sig, err := base64.RawURLEncoding.DecodeString(r.Sig)
		if err != nil || !c.Verify(r.Key, msg, sig) {
			return nil, fail("signature does not verify: the receipt was changed after it was signed")
		}
		if !slices.Contains(signers, r.Key) {
			signers = append(signers, r.Key)
		}
		if i == 0 {
			if r.Prev != "" {
				return nil, fail("prev names a receipt before the first")
			}
		} else {
			want, err := ReceiptHash(rs[i-1])
			if err != nil {
				return nil, fail("%v", err)
			}
			if r.Prev != want {
				return nil, fail("prev does not match the hash of receipt %d: receipt %d was changed or replaced", i, i)
			}
			if r.From != rs[i-1].To {
				return nil, fail("moves from %s, but receipt %d left the call in %s", cmpState(r.From), i, rs[i-1].To)
			}
		}
		if row := r.Event.row(); row == nil || row.To != r.To || !slices.Contains(row.From, r.From) {
			return nil, fail("%s from %s to %s is no transition of the table", r.Event, cmpState(r.From), r.To)
		}
		switch {
		case r.PendingID != e.PendingID:
			return nil, fail("is about call %s, not %s", r.PendingID, e.PendingID)
		case r.ToolName != e.ToolName:
			return nil, fail("records tool %s, but the entry says %s", r.ToolName, e.ToolName)
		case r.Caller != e.CallerBotID:
			return nil, fail("records caller %s, but the entry says %s", r.Caller, e.CallerBotID)
		}
	}
	if err := entryMatchesReceipts(e, c); err != nil {
		return nil, err
	}
	return signers, nil
}

func cmpState(s State) string {
	if s == stateNone {
		return "nothing (a creation)"
	}
	return string(s)
}

// entryMatchesReceipts checks that e says what its receipts record.
func entryMatchesReceipts(e *Entry, c ReceiptCheck) error {
	rs := e.Receipts
	last := &rs[len(rs)-1]
	fail := func(r *Receipt, format string, args ...any) error {
		return &ReceiptError{Receipt: r, Problem: fmt.Sprintf(format, args...)}
	}
	if e.Status != last.To {
		return fail(last, "status is %s, but the last receipt, %s, records %s", e.Status, last, last.To)
	}
	if e.ArgumentsDigest != last.ArgumentsDigest {
		return fail(last, "argumentsDigest is %s, but the last receipt, %s, records %s", e.ArgumentsDigest, last, last.ArgumentsDigest)
	}
	if len(e.ToolArguments) > 0 && ArgumentsDigest(e.ToolArguments) != e.ArgumentsDigest && !c.ArgumentsMasked {
		return fail(last, "toolArguments do not match the argumentsDigest the receipts record (%s)", e.ArgumentsDigest)
	}
	if len(e.OriginalArguments) > 0 && !c.ArgumentsMasked && ArgumentsDigest(e.OriginalArguments) != rs[0].ArgumentsDigest {
		return fail(&rs[0], "originalArguments do not match the arguments %s records (%s)", &rs[0], rs[0].ArgumentsDigest)
	}
	// The decision: the last receipt that decided the call.
	var decided, byUser *Receipt
	for i := range rs {
		switch {
		case rs[i].DecidedBy == DecidedByTimeout || rs[i].Event == EventDeny:
			// The timer's decision (a timeout's reject, cancel or
			// approval), or the policy's.
			decided = &rs[i]
		case rs[i].Event == EventApprove || rs[i].Event == EventReject || rs[i].Event == EventRespond,
			rs[i].Event == EventSchedule && rs[i].DecidedBy == DecidedByHuman: // a run again a person asked for (Rerun)
			decided, byUser = &rs[i], &rs[i]
		}
	}
	switch {
	case byUser == nil && e.ApprovedOrRejectedByUserID != "":
		return fail(nil, "says %s decided the call, but no receipt records a decision by anyone", e.ApprovedOrRejectedByUserID)
	case byUser != nil && e.ApprovedOrRejectedByUserID != byUser.Actor:
		return fail(byUser, "says %q decided the call, but %s records the decision", e.ApprovedOrRejectedByUserID, byUser)
	case byUser != nil && !sameIdentity(e.DeciderIdentity, byUser.Identity):
		return fail(byUser, "deciderIdentity is %v, but %s records %v", e.DeciderIdentity, byUser, byUser.Identity)
	case byUser == nil && e.DeciderIdentity != nil:
		return fail(nil, "has a deciderIdentity, but no receipt records a decision by anyone")
	case byUser != nil && e.DeciderViaGroup != byUser.ViaGroup:
		return fail(byUser, "deciderViaGroup is %q, but %s records %q", e.DeciderViaGroup, byUser, byUser.ViaGroup)
	case byUser == nil && e.DeciderViaGroup != "":
		return fail(nil, "has a deciderViaGroup, but no receipt records a decision by anyone")
	case byUser != nil && byUser.Event == EventApprove && e.DecisionScope != byUser.Scope:
		return fail(byUser, "decisionScope is %q, but %s records %q", e.DecisionScope, byUser, byUser.Scope)
	case decided == nil && e.DecisionTime != 0:
		return fail(nil, "has a decisionTime, but no receipt records a decision")
	case decided != nil && e.DecisionTime != decided.At:
		return fail(decided, "decisionTime is %d, but %s records %d", e.DecisionTime, decided, decided.At)
	}
	// A quorum's votes: each one a receipt records, saying the same.
	for _, v := range e.Votes {
		said := func(r Receipt) bool {
			switch r.Event {
			case EventVote:
				return r.Vote == voteWord(v.Approve)
			case EventApprove, EventReject:
				return (r.Event == EventApprove) == v.Approve
			}
			return false
		}
		if !slices.ContainsFunc(rs, func(r Receipt) bool { return r.Actor == v.By && r.At == v.At && r.ViaGroup == v.ViaGroup && said(r) }) {
			return fail(nil, "records that %s %s at %d, which no receipt records", v.By, map[bool]string{true: "approved", false: "rejected"}[v.Approve], v.At)
		}
	}
	// The outcome.
	if last.Event == EventSucceed || last.Event == EventFail || last.Event == EventRespond {
		if d := OutcomeDigest(e.Result, e.Error, e.Cost); d != last.ResultDigest {
			return fail(last, "result, error or cost do not match the outcome %s records", last)
		}
	} else if len(e.Result) > 0 || e.Error != "" || e.Cost != 0 {
		return fail(last, "has a result, error or cost, but the last receipt, %s, records no outcome", last)
	}
	return nil
}

// voteWord is a vote's say as a receipt records it.
func voteWord(approve bool) string {
	if approve {
		return "approve"
	}
	return "reject"
}
