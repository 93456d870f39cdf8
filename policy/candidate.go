package policy

import "errors"

// ParseCandidate reads a document to try rather than to put in force (a
// dry run): as Parse, except that secrets left as RedactedValue, as
// `policy get` shows the document to all but admins, are accepted. No
// secret decides a verdict, so such a document is evaluated without its
// notify and reviewers lists (which only the secrets were wrong in). Anything else
// wrong is refused as Parse refuses it, every field at fault named, the
// placeholders too.
func ParseCandidate(data []byte) (*Document, error) {
	doc, err := Decode(data)
	if err != nil {
		return nil, err
	}
	verr := doc.Validate()
	if verr == nil {
		return doc, nil
	}
	if !onlyPlaceholders(verr) {
		return nil, verr
	}
	muted := doc.Clone()
	for _, p := range muted.scopes() {
		p.Notify = nil
		p.Reviewers = nil
	}
	if muted.Validate() != nil {
		return nil, verr
	}
	return muted, nil
}

// scopes are the document's policies: the default, every team's and
// every conversation's.
func (d *Document) scopes() []*Policy {
	var all []*Policy
	if d.Default != nil {
		all = append(all, d.Default)
	}
	for _, m := range []map[string]*Policy{d.Teams, d.Conversations} {
		for _, p := range m {
			if p != nil {
				all = append(all, p)
			}
		}
	}
	return all
}

// onlyPlaceholders reports whether every problem err lists is a secret
// given as RedactedValue.
func onlyPlaceholders(err error) bool {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var fe *FieldError
		if !errors.As(e, &fe) || fe.Msg != redactedMsg {
			return false
		}
	}
	return len(errs) > 0
}
