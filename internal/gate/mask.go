package gate

import (
	"encoding/json"
	"errors"

	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
)

// masker is a policy that says how a call's arguments are masked.
type masker interface {
	Masker(team, conversationID string) policy.Masker
}

// mask returns the masked view of e, the one view of a call every person
// reads, whatever the transport (the events, the list, get, history, the
// CLI, notifications): a copy whose arguments (and the agent's original
// ones, if an approver edited them) have their secrets masked (the
// built-in secret names and shapes, and the redact patterns of the call's
// policy), marked SecretsMasked when anything was. The description was
// rendered from the same view when the call was submitted.
func (s *Service) mask(e *machine.Entry) *machine.Entry {
	c, _ := s.masked(e)
	return c
}

// masked is mask, and whether it masked anything.
func (s *Service) masked(e *machine.Entry) (*machine.Entry, bool) {
	m := s.maskerFor(e.Team, e.ConversationID)
	c := *e
	var args, original bool
	c.ToolArguments, args = m.Mask(e.ToolArguments)
	if len(e.OriginalArguments) > 0 {
		c.OriginalArguments, original = m.Mask(e.OriginalArguments)
	}
	c.SecretsMasked = args || original
	return &c, c.SecretsMasked
}

// maskText is text with the secrets a call of team and conversationID
// would have masked in its arguments' strings.
func (s *Service) maskText(team, conversationID, text string) string {
	in, _ := json.Marshal([]string{text})
	out, _ := s.maskerFor(team, conversationID).Mask(in)
	var masked []string
	if json.Unmarshal(out, &masked) != nil || len(masked) != 1 {
		return text
	}
	return masked[0]
}

// maskerFor is the masker of a call of team and conversationID: without
// a policy, the built-in names and shapes only.
func (s *Service) maskerFor(team, conversationID string) policy.Masker {
	if s.masker == nil {
		return policy.Masker{}
	}
	return s.masker.Masker(team, conversationID)
}

// shown is e as a may see it: its secrets masked unless a may see them,
// and without its receipts, which the receipts use case answers
// (Receipts): a chain grows with every transition, and nobody who reads
// a call to act on it needs it.
func (s *Service) shown(a Actor, e *machine.Entry) *machine.Entry {
	switch {
	case e == nil:
		return nil
	case !a.seesSecrets(e):
		e = s.mask(e)
	case len(e.Receipts) > 0:
		c := *e
		e = &c
	}
	e.Receipts = nil
	return e
}

// answer is the reply of a command of a's: the entry it wrote, as a may
// see it.
func (s *Service) answer(a Actor) func(*machine.Entry, error) (*machine.Entry, error) {
	return func(e *machine.Entry, err error) (*machine.Entry, error) {
		return s.shown(a, e), err
	}
}

// shownErr is err with the entry a refusal carries (a TransitionError's)
// as a may see it.
func (s *Service) shownErr(a Actor, err error) error {
	var te *machine.TransitionError
	if errors.As(err, &te) && te.Entry != nil && !a.seesSecrets(te.Entry) {
		te.Entry = s.mask(te.Entry)
	}
	return err
}

// shownAll is shown for each of entries, in place.
func (s *Service) shownAll(a Actor, entries []*machine.Entry) {
	for i, e := range entries {
		entries[i] = s.shown(a, e)
	}
}
