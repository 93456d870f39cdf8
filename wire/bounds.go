package wire

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/machine"
)

// MaxString is how long, in bytes, a string in a request may be unless its
// field says otherwise with a `max:"N"` tag: reasons (4 KiB), an
// executor's error (64 KiB), a policy document (1 MiB). A call's ids are
// bounded tighter (machine.MaxID), tool names to 128 characters; tool
// arguments and results are JSON, bounded by the request's size (NATS's
// max_payload, 1 MiB by default; the HTTP API's body limit).
const MaxString = 1024

// CheckBounds refuses a decoded request holding a string longer than its
// field allows (MaxString, or the field's `max` tag), naming the field by
// its JSON path. Every transport checks it right after decoding, so that
// no string a caller sends reaches a store, a subject or a header
// unbounded.
func CheckBounds(v any) error {
	return checkBounds(reflect.ValueOf(v), "request", MaxString)
}

// CheckRequest checks a request decoded from data, whichever transport
// brought it: the bounds of its strings (CheckBounds), then what its type
// asks of the JSON it came in (a decision says approved, true or false).
// Every transport calls it right after decoding, so that each refuses the
// same requests with the same error.
func CheckRequest(data []byte, v any) error {
	if err := CheckBounds(v); err != nil {
		return err
	}
	if c, ok := v.(jsonChecker); ok {
		return c.checkJSON(data)
	}
	return nil
}

// jsonChecker is a request with a rule its decoded value cannot show: a
// field that must be given even when it is false.
type jsonChecker interface {
	checkJSON(data []byte) error
}

// requireApproved refuses a request whose JSON gives no approved: a
// decision is never read into a field left out.
func requireApproved(data []byte, want string) error {
	var given struct {
		Approved *bool `json:"approved"`
	}
	if Unmarshal(data, &given) == nil && given.Approved != nil {
		return nil
	}
	return fmt.Errorf("%w: approved: required, %s", machine.ErrInvalid, want)
}

func checkBounds(v reflect.Value, path string, limit int) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return checkBounds(v.Elem(), path, limit)
	case reflect.String:
		if n := v.Len(); n > limit {
			return fmt.Errorf("%w: %s: at most %d bytes, got %d", machine.ErrInvalid, path, limit, n)
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // JSON (arguments, results) or bytes: bounded by the request's size
		}
		for i := range v.Len() {
			if err := checkBounds(v.Index(i), path+"["+strconv.Itoa(i)+"]", limit); err != nil {
				return err
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			if err := checkBounds(iter.Key(), path+" key", limit); err != nil {
				return err
			}
			if err := checkBounds(iter.Value(), path+"."+fmt.Sprint(iter.Key().Interface()), limit); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := name
			if f.Anonymous && f.Tag.Get("json") == "" {
				p = path // an embedded struct's fields are its parent's
			} else if path != "request" {
				p = path + "." + name
			}
			max := MaxString
			if tag := f.Tag.Get("max"); tag != "" {
				max, _ = strconv.Atoi(tag)
			}
			if err := checkBounds(v.Field(i), p, max); err != nil {
				return err
			}
		}
	}
	return nil
}
