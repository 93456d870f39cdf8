package machine_test

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/machine"
)

var keyTokenRE = regexp.MustCompile(`^[A-Za-z0-9_=-]{1,512}$`)

// FuzzKeyToken: whatever an id holds, however long, its token is one
// token of a KV key and a subject, at most 512 characters, and tells
// different ids apart: plain ones as they are, others encoded (read back
// as they were) or, past the bound, hashed.
func FuzzKeyToken(f *testing.F) {
	for _, s := range []string{"bot", "a.b", "x y", "=", "==", "é", strings.Repeat("c", 256), strings.Repeat("c", 10_000), strings.Repeat(".", 384), strings.Repeat(".", 385)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, tb := machine.KeyToken(a), machine.KeyToken(b)
		if a != "" && !keyTokenRE.MatchString(ta) {
			t.Fatalf("KeyToken(%d bytes) = %q: not one key token of at most 512 characters", len(a), ta)
		}
		if a != b && ta == tb {
			t.Fatalf("%q and %q share the token %q", a, b, ta)
		}
		switch {
		case strings.HasPrefix(ta, "=="):
			if len(a) <= 256 {
				t.Fatalf("an id of %d bytes (at most machine.MaxID) was hashed: %q", len(a), ta)
			}
		case strings.HasPrefix(ta, "="):
			if raw, err := base64.RawURLEncoding.DecodeString(ta[1:]); err != nil || string(raw) != a {
				t.Fatalf("KeyToken(%q) = %q does not read back", a, ta)
			}
		case ta != a:
			t.Fatalf("the plain %q became %q", a, ta)
		}
	})
}

// An id of at most machine.MaxID bytes makes a pending id that
// ValidPendingID takes; a longer conversation id, hashed, never does.
func TestPendingID_BoundedIDsAreValid(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", machine.MaxID/2)
	if id := machine.PendingID(long, long); !machine.ValidPendingID(id) {
		t.Errorf("PendingID of two %d-byte ids (%d characters) is not valid", len(long), len(id))
	}
	if id := machine.PendingID(strings.Repeat("é", 10_000), "x"); machine.ValidPendingID(id) {
		t.Errorf("PendingID of an over-long conversation id is valid: %q", id)
	}
}
