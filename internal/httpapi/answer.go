package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/wire"
)

// useCase is a use case of gate as a route calls it: a method expression,
// (*gate.Service).Decide.
type useCase[T, R any] func(*gate.Service, context.Context, gate.Actor, T) (R, error)

// answer makes the handler of a route that is one use case: the use
// case's wire request is decoded from the body (a POST; an empty body is
// {}) or the query (a GET), the path's values are set into it by name
// ({pendingId} is pendingId: the path names the call, whatever the body
// says), and it is checked as every transport checks it
// (wire.CheckRequest); the use case is called as the caller and its
// reply encoded, or its error mapped (writeError).
func answer[T, R any](f useCase[T, R]) func(*Server, http.ResponseWriter, *http.Request, User) error {
	return func(s *Server, w http.ResponseWriter, r *http.Request, u User) error {
		var req T
		if err := decodeRequest(w, r, &req); err != nil {
			return err
		}
		reply, err := f(s.cfg.Gate, r.Context(), u, req)
		if err != nil {
			return err
		}
		if rw, ok := any(reply).(replyWriter); ok {
			rw.writeReply(w)
			return nil
		}
		writeJSON(w, http.StatusOK, reply)
		return nil
	}
}

// replyWriter is a reply that is answered otherwise than 200 and its JSON.
type replyWriter interface {
	writeReply(w http.ResponseWriter)
}

// submitted is a submit's entry, and whether this submit made it.
type submitted struct {
	entry   *machine.Entry
	created bool
}

// writeReply answers a new entry with 201 and where it is; a retry, with
// 200 and the entry an earlier submit made.
func (s submitted) writeReply(w http.ResponseWriter) {
	status := http.StatusOK
	if s.created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/v1/tool-calls/"+s.entry.PendingID)
	writeJSON(w, status, s.entry)
}

func submit(g *gate.Service, ctx context.Context, a gate.Actor, c machine.Call) (submitted, error) {
	e, created, err := g.SubmitOnce(ctx, a, c)
	return submitted{entry: e, created: created}, err
}

// uncached is a reply no cache keeps: the analytics change with every
// event.
type uncached json.RawMessage

func (u uncached) writeReply(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, json.RawMessage(u))
}

func analyticsReport(g *gate.Service, ctx context.Context, a gate.Actor, r wire.AnalyticsRequest) (uncached, error) {
	report, err := g.Analytics(ctx, a, r)
	return uncached(report), err
}

// cancelled is a cancel that names no reason as "cancelled", as the HTTP
// API's cancels always have.
func cancelled[R any](f useCase[wire.CancelRequest, R]) useCase[wire.CancelRequest, R] {
	return func(g *gate.Service, ctx context.Context, a gate.Actor, r wire.CancelRequest) (R, error) {
		r.Reason = cmp.Or(r.Reason, "cancelled")
		return f(g, ctx, a, r)
	}
}

// decodeRequest decodes a route's request into v, a pointer to a wire
// request: from the body of a POST, else from the query; then sets the
// path's values and checks it (wire.CheckRequest).
func decodeRequest(w http.ResponseWriter, r *http.Request, v any) error {
	data := []byte("{}")
	if r.Method == http.MethodPost {
		body, err := readBody(w, r)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(body)) > 0 {
			data = body
		}
		if err := decodeJSON(data, v); err != nil {
			return err
		}
	} else if err := decodeQuery(r.URL.Query(), v); err != nil {
		return err
	}
	if err := setPathValues(r, v); err != nil {
		return err
	}
	return wire.CheckRequest(data, v)
}

// decodeQuery sets the fields of v, a pointer to a struct, from the query
// parameters of their JSON names: strings as they are (a *string is set
// by a parameter given empty: ?team=), numbers and booleans parsed; an
// empty number is none. Parameters no field has are ignored.
func decodeQuery(q url.Values, v any) error {
	rv := reflect.ValueOf(v).Elem()
	for _, f := range reflect.VisibleFields(rv.Type()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		value := q.Get(name)
		if !f.IsExported() || f.Anonymous || name == "" || name == "-" || !q.Has(name) ||
			value == "" && f.Type.Kind() != reflect.String && f.Type.Kind() != reflect.Pointer {
			continue
		}
		fv := rv.FieldByIndex(f.Index)
		if fv.Kind() == reflect.Pointer {
			fv.Set(reflect.New(fv.Type().Elem()))
			fv = fv.Elem()
		}
		var err error
		switch fv.Kind() {
		case reflect.String:
			fv.SetString(value)
		case reflect.Int, reflect.Int64:
			var n int64
			n, err = strconv.ParseInt(value, 10, fv.Type().Bits())
			fv.SetInt(n)
		case reflect.Uint64:
			var n uint64
			n, err = strconv.ParseUint(value, 10, 64)
			fv.SetUint(n)
		case reflect.Bool:
			var b bool
			if b, err = strconv.ParseBool(value); err != nil {
				return fmt.Errorf("%w: %s: want true or false, got %q", machine.ErrInvalid, name, value)
			}
			fv.SetBool(b)
		default:
			return fmt.Errorf("query %s: a %s is not read from a query", name, fv.Type())
		}
		if err != nil {
			return fmt.Errorf("%w: %s: want a whole number, got %q", machine.ErrInvalid, name, value)
		}
	}
	return nil
}

// setPathValues sets the fields of v the route's path values name, by
// their JSON names, over what the body or the query said.
func setPathValues(r *http.Request, v any) error {
	rv := reflect.ValueOf(v).Elem()
	for _, seg := range strings.Split(r.Pattern, "/") {
		name, ok := strings.CutPrefix(seg, "{")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, "}")
		f, ok := fieldByJSONName(rv.Type(), name)
		if !ok || f.Type.Kind() != reflect.String {
			return fmt.Errorf("route %s: %s has no string field %s", r.Pattern, rv.Type(), name)
		}
		rv.FieldByIndex(f.Index).SetString(r.PathValue(name))
	}
	return nil
}

func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n == name && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// maxBody bounds a request body: tool arguments are small.
const maxBody = 1 << 20

// readBody reads a request's body, refusing one over maxBody.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return nil, httpErr(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body over %d bytes", maxBody))
		}
		return nil, fmt.Errorf("%w: request body: %v", machine.ErrInvalid, err)
	}
	return buf.Bytes(), nil
}

// decodeJSON decodes one JSON value into v, refusing unknown fields and
// trailing data.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %v", machine.ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: request body: more than one JSON value", machine.ErrInvalid)
	}
	return nil
}

// readJSON decodes a JSON request body into v, refusing bodies over
// maxBody, unknown fields and trailing data, and checks its strings'
// bounds.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := decodeJSON(data, v); err != nil {
		return err
	}
	return wire.CheckBounds(v)
}
