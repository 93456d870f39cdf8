package machine

import "fmt"

// Identity is who a person is at the OpenID provider that signed them in:
// the provider (Issuer) and its subject identifier for them (Subject),
// which together name the person for good, and the name and email the
// provider gave, for people to read. A decision made by a person signed
// in so records it beside the toolgate name they decided as (on the
// transition, its receipt and the entry), so an audit can tell two people
// a name was given to, or follow one whose name changed.
type Identity struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
	Name    string `json:"name,omitempty"`
	Email   string `json:"email,omitempty"`
}

// String is the identity as a person reads it: the name and email, and
// the provider's subject.
func (id *Identity) String() string {
	if id == nil {
		return "no identity"
	}
	who := id.Name
	switch {
	case who == "":
		who = id.Email
	case id.Email != "":
		who += " <" + id.Email + ">"
	}
	if who != "" {
		who += ", "
	}
	return fmt.Sprintf("%ssubject %s at %s", who, id.Subject, id.Issuer)
}

// sameIdentity reports whether a and b record the same identity, both
// absent included.
func sameIdentity(a, b *Identity) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
