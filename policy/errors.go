package policy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/machine"
)

// FieldError says what is wrong with one field of a policy document, or with
// the document as a whole when Path is empty. It matches machine.ErrInvalid
// with errors.Is, so transports map it to "bad request" without knowing this
// package; errors.As gives an editor the path to point at.
type FieldError struct {
	Path string // e.g. `teams.finance.toolSpecificDelays["web_search"]`; empty for the whole document
	Msg  string
}

// Error reads "policy: <path>: <what is wrong>".
func (e *FieldError) Error() string {
	if e.Path == "" {
		return "policy: " + e.Msg
	}
	return "policy: " + e.Path + ": " + e.Msg
}

// Unwrap makes errors.Is(err, machine.ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return machine.ErrInvalid }

func fieldErrorf(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// malformed reports a document that is not YAML (or JSON) at all, or not in
// the shape of a policy document, where no field can be blamed.
func malformed(format string, args ...any) *FieldError {
	return &FieldError{Msg: "malformed document: " + fmt.Sprintf(format, args...)}
}

// child names key under path: a dot for a plain key, brackets and quotes for
// anything a reader could mistake for more path (dots, spaces, quotes).
func child(path, key string) string {
	if !plainKey(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// index names a map entry keyed by a tool or user, always in brackets, as in
// toolSpecificDelays["web_search"].
func index(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }

func plainKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// errorList collects the problems of a whole document, so that its author
// can fix them all in one go.
type errorList []error

func (l *errorList) add(path, format string, args ...any) {
	*l = append(*l, fieldErrorf(path, format, args...))
}

func (l errorList) err() error {
	switch len(l) {
	case 0:
		return nil
	case 1:
		return l[0]
	}
	return joinedErrors(l)
}

// joinedErrors is errors.Join with a count up front, so a long list reads
// as one answer.
type joinedErrors []error

func (j joinedErrors) Error() string {
	s := fmt.Sprintf("policy: %d problems:", len(j))
	for _, e := range j {
		s += "\n\t" + strings.TrimPrefix(e.Error(), "policy: ")
	}
	return s
}

func (j joinedErrors) Unwrap() []error { return j }
