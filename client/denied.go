package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/machine"
)

// denials lets a request that the NATS server refused to forward (the
// credential may not publish there: an agent's asking to decide) fail at
// once, saying so, instead of waiting out its timeout. The server says it
// only asynchronously, as a connection error naming the subject.
type denials struct {
	mu      sync.Mutex
	waiting map[string]map[*context.CancelCauseFunc]struct{} // by subject
}

var deniedSubject = regexp.MustCompile(`Permissions Violation for Publish to "([^"]+)"`)

// watch makes nc's asynchronous errors reach d, and still whatever
// handler nc had.
func (d *denials) watch(nc *nats.Conn) {
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if m := deniedSubject.FindStringSubmatch(err.Error()); m != nil && errors.Is(err, nats.ErrPermissionViolation) {
			d.deny(m[1], err)
		}
		if prev != nil {
			prev(nc, sub, err)
		}
	})
}

// during returns a context that ends with a *forbidden* cause if the
// server refuses a publish to subject while it lasts, and its release.
func (d *denials) during(ctx context.Context, subject string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	d.mu.Lock()
	if d.waiting == nil {
		d.waiting = map[string]map[*context.CancelCauseFunc]struct{}{}
	}
	if d.waiting[subject] == nil {
		d.waiting[subject] = map[*context.CancelCauseFunc]struct{}{}
	}
	d.waiting[subject][&cancel] = struct{}{}
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		delete(d.waiting[subject], &cancel)
		if len(d.waiting[subject]) == 0 {
			delete(d.waiting, subject)
		}
		d.mu.Unlock()
		cancel(nil)
	}
}

func (d *denials) deny(subject string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for cancel := range d.waiting[subject] {
		(*cancel)(fmt.Errorf("%w: this credential may not publish to %s (%v): its role does not allow it", machine.ErrForbidden, subject, err))
	}
}

// deniedCause is the refusal that ended ctx, if one did.
func deniedCause(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, machine.ErrForbidden) {
		return cause
	}
	return nil
}
