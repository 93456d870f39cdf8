package jsio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/wire"
)

// Attempts runs f in attempts of at most per each, again while an attempt
// goes unanswered, with a growing, jittered pause between them, until ctx
// ends. f must be safe to repeat: an attempt that went unanswered may
// still have done its work.
//
// A JetStream request sent to a stream leader that has just died is never
// answered; one sent before a new leader is elected finds nobody. Asked
// again, each is answered as soon as there is a leader, where waiting out
// the caller's whole deadline would stall every write for its length. An
// attempt that ran out of time is followed by one allowed twice as long
// (up to 8 times per): a server that is only slow, under load, is not
// asked ever faster.
func Attempts[T any](ctx context.Context, per time.Duration, f func(context.Context) (T, error)) (T, error) {
	limit := 8 * per
	for wait := 25 * time.Millisecond; ; wait = min(2*wait, 400*time.Millisecond) {
		actx, cancel := context.WithTimeout(ctx, per)
		v, err := f(actx)
		timedOut := actx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || !unanswered(err) {
			return v, err
		}
		if timedOut {
			per = min(2*per, limit)
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait/2 + rand.N(wait)):
		}
	}
}

// unanswered reports whether err says a request got no answer (rather
// than an answer that refused it): nothing can be concluded from it, and
// asking again is the way to find out.
//
// A refusal for want of storage is an answer, though JetStream gives it
// the status of "temporarily unavailable": only one that write still
// asks again (storageFullError's again) counts as unanswered.
func unanswered(err error) bool {
	var apiErr *jetstream.APIError
	if full := (*storageFullError)(nil); errors.As(err, &full) {
		return full.again
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, errWriteInFlight) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		// JetStream's "temporarily unavailable" during an election.
		errors.As(err, &apiErr) && apiErr.Code == http.StatusServiceUnavailable
}

// StoreAttempt bounds one request of the store to JetStream, which
// answers in milliseconds when it has a stream leader: unanswered that
// long, the request is sent again (see Attempts), so writes resume soon
// after a new leader is elected.
const StoreAttempt = time.Second

// Get reads key from kv, in attempts of StoreAttempt.
func Get(ctx context.Context, kv jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error) {
	return Attempts(ctx, StoreAttempt, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return kv.Get(ctx, key) })
}

// Write stores data under key in kv if the key is still at revision (0:
// if it does not exist), in attempts of StoreAttempt. An attempt that
// went unanswered may have been stored all the same, and the next then
// finds the key moved on: if a later revision holds exactly data, that
// was this write, and it succeeded; the caller is never told "conflict"
// about its own write. So data must say which write it is: no other
// writer may store the same bytes (an entry's transition and a budget
// value carry a random id of their write). js is kv's JetStream, through
// which that is asked of the bucket's stream leader.
//
// A write JetStream refuses for want of storage is asked again for
// storageFullWait (a stream leader whose server's store is full steps
// down, and a member with room may take over), then refused with an
// error that matches wire.ErrStorageFull. So is one unanswered for
// storageFullWait since the bucket's last write was refused that way:
// when every member's store is full, the leader that refused steps down
// and no member takes its place, so nobody answers.
func Write(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, data []byte, revision uint64) (uint64, error) {
	unsure := false
	began := time.Now()
	var full time.Time // the first refusal for want of storage
	v, err := Attempts(ctx, StoreAttempt, func(ctx context.Context) (uint64, error) {
		var rev uint64
		var err error
		if revision == 0 {
			rev, err = kv.Create(ctx, key, data)
		} else {
			rev, err = kv.Update(ctx, key, data, revision)
		}
		switch {
		case err == nil:
			return rev, nil
		case storageFull(err):
			if full.IsZero() {
				full = time.Now()
			}
			lastFull.Store(kv, full)
			if time.Since(full) < storageFullWait {
				return 0, &storageFullError{err: err, again: true}
			}
			return 0, &storageFullError{err: err}
		case refusedInFlight(err):
			// Not a conflict: whichever write is in flight may yet be
			// refused, an earlier one of this caller's even.
			return 0, errWriteInFlight
		case unanswered(err):
			unsure = true
			if at, ok := lastFull.Load(kv); ok && time.Since(began) >= storageFullWait {
				return 0, &storageFullError{err: fmt.Errorf("no stream leader has answered since a write was refused for want of storage %s ago, so every member's store may be full: %w",
					time.Since(at.(time.Time)).Round(time.Second), err)}
			}
		case unsure && (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)):
			if rev, ok, lerr := storedAt(ctx, js, kv.Bucket(), key, data, revision); lerr != nil {
				return 0, lerr
			} else if ok {
				return rev, nil
			}
		}
		return 0, err
	})
	if err == nil {
		lastFull.Delete(kv)
	}
	return v, err
}

// lastFull holds, per bucket (its jetstream.KeyValue), when JetStream
// last refused a write of it for want of storage, until a write of it
// succeeds.
var lastFull sync.Map

// storageFullWait is how long Write asks again a write refused for want
// of storage: long enough for a full stream leader to hand over to a
// member with room, short enough that a caller hears of a full store in
// seconds rather than at its deadline.
const storageFullWait = 2 * time.Second

// storageFull reports whether err is JetStream refusing a write for want
// of storage: the server's store at its limit (insufficient resources,
// 10023), the account's storage limit (10002, 10047), or a stream that
// could not store the message for want of room (10077: maximum bytes
// exceeded, or the disk out of space).
func storageFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10002, 10023, 10047:
		return true
	case 10077:
		return strings.Contains(apiErr.Description, "maximum bytes") || strings.Contains(apiErr.Description, "no space left")
	}
	return false
}

// storageFullError is a write JetStream refused for want of storage. It
// matches wire.ErrStorageFull; again marks one refused within
// storageFullWait of the first, which Write asks again.
type storageFullError struct {
	err   error
	again bool
}

func (e *storageFullError) Error() string {
	return fmt.Sprintf("%v: JetStream refused the write (%v): make room in its store (raise the server's max_file_store or the account's storage limit, or free disk space)", wire.ErrStorageFull, e.err)
}

func (e *storageFullError) Unwrap() []error { return []error{wire.ErrStorageFull, e.err} }

// Update changes the value under key in kv by compare-and-set: it reads
// the key's entry (nil when there is none) with Get, asks f what to store
// instead, and writes that at the revision read with Write, so a write
// whose answer was lost is asked about again and never taken for
// another's. When another write came first, it reads again and asks f
// again, until ctx ends. An error of f stops it and is returned as it
// is: f decodes, validates and may refuse. f returning nil leaves the
// value as it is: nothing is written, and Update returns revision 0;
// else it returns the revision written.
//
// What f returns must say which write it is, as Write requires (a
// random nonce of the write), unless any two writers that store the same
// bytes want the same outcome: then either may be told it stored them.
func Update(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, f func(cur jetstream.KeyValueEntry) ([]byte, error)) (uint64, error) {
	return UpdateHeld(ctx, js, kv, key, nil, f)
}

// UpdateHeld is Update for a caller that may hold the key's value
// already, at revision *held (0: the key absent), as it last wrote or
// read it: then the first f is asked with no read, of an entry at that
// revision whose value is the caller's to fill in (nil when held is 0),
// and the key is read only when another write came first.
func UpdateHeld(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, held *uint64, f func(cur jetstream.KeyValueEntry) ([]byte, error)) (uint64, error) {
	for {
		var cur jetstream.KeyValueEntry
		var err error
		switch {
		case held != nil:
			if *held != 0 {
				cur = &entry{bucket: kv.Bucket(), key: key, meta: &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: *held}}}
			}
			held = nil
		default:
			cur, err = Get(ctx, kv, key)
		}
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			cur = nil
		case err != nil:
			return 0, err
		}
		next, err := f(cur)
		if err != nil || next == nil {
			return 0, err
		}
		var revision uint64
		if cur != nil {
			revision = cur.Revision()
		}
		rev, err := Write(ctx, js, kv, key, next, revision)
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another write came first: read it
		}
		return rev, err
	}
}

// storedAt finds the revision after the given one at which bucket's key
// holds exactly data. It asks the stream's leader: a replica, which
// answers direct gets and may serve a consumer, can still lack the write
// just after an election, and the write would be taken for another's.
func storedAt(ctx context.Context, js jetstream.JetStream, bucket, key string, data []byte, after uint64) (uint64, bool, error) {
	subject := "$KV." + bucket + "." + key
	for seq := after + 1; ; {
		msg, err := Attempts(ctx, StoreAttempt, func(ctx context.Context) (*storedMsg, error) {
			return nextMsg(ctx, js, "KV_"+bucket, subject, seq)
		})
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return 0, false, nil // another's write came first
		case err != nil:
			return 0, false, err
		}
		if bytes.Equal(msg.Data, data) {
			return msg.Seq, true, nil
		}
		seq = msg.Seq + 1
	}
}

// refusedInFlight reports whether err is a replicated stream's leader
// refusing a compare-and-set because another write of the key is still
// being replicated (JetStream's "wrong last sequence" without a
// sequence, code 10164): nothing is concluded about the key's revision.
// A conflict (code 10071) names the sequence stored.
func refusedInFlight(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// errWriteInFlight says that a compare-and-set was refused while another
// write of the key was being replicated. Asked again, it finds that one
// stored, or refused.
var errWriteInFlight = errors.New("refused while an earlier write of the key was in flight")

// storedMsg is a stream's message as its leader returns it.
type storedMsg struct {
	Seq  uint64 `json:"seq"`
	Data []byte `json:"data"`
}

// nextMsg asks stream's leader for its first message on subject from seq
// on (jetstream's Stream.GetMsg asks any replica of a stream that allows
// direct gets, as the buckets do).
func nextMsg(ctx context.Context, js jetstream.JetStream, stream, subject string, seq uint64) (*storedMsg, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{seq, subject})
	if err != nil {
		return nil, err
	}
	resp, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var r struct {
		Error   *jetstream.APIError `json:"error"`
		Message *storedMsg          `json:"message"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("%s: message get: %w", stream, err)
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case r.Error != nil:
		return nil, r.Error
	case r.Message == nil:
		return nil, fmt.Errorf("%s: message get: %w", stream, jetstream.ErrInvalidJetStreamResponse)
	}
	return r.Message, nil
}

// apiPrefix is the subject prefix of js's JetStream API requests.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
