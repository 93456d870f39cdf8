package backup

import "testing"

func TestRevision_OfEveryEventIDTheRelayMakes(t *testing.T) {
	for _, c := range []struct {
		id   string
		want uint64
		ok   bool
	}{
		{"conv.call:42", 42, true},
		{"conv.call:42.approve", 42, true},
		{"a:b.c:7", 7, true}, // a pendingId with a colon in it
		{"no-revision", 0, false},
		{"conv.call:x", 0, false},
	} {
		got, ok := revision(c.id)
		if got != c.want || ok != c.ok {
			t.Errorf("revision(%q) = %d, %v; want %d, %v", c.id, got, ok, c.want, c.ok)
		}
	}
}
