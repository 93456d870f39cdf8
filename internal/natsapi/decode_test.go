package natsapi

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEndpoints_RequestsDecodeAsEncodingJSONWould: requests are decoded
// with wire.Unmarshal (json/v2 where it can), which decodes as
// encoding/json does a type with no embedded struct, no decoding methods
// of its own and no option json/v2 reads otherwise (",string", a
// time.Duration). A request type that takes one needs a test holding
// wire.Unmarshal to encoding/json for it, as wire's tests do for the
// entry and the event, before it is added here.
func TestEndpoints_RequestsDecodeAsEncodingJSONWould(t *testing.T) {
	type inner struct{ A int }
	for _, bad := range []reflect.Type{
		reflect.TypeFor[struct{ D []*time.Duration }](),
		reflect.TypeFor[struct{ inner }](),
		reflect.TypeFor[map[string]struct{ T time.Time }](),
		reflect.TypeFor[struct {
			N int `json:"n,string"`
		}](),
	} {
		if differs(bad, map[reflect.Type]bool{}) == "" {
			t.Errorf("%s passes", bad)
		}
	}
	for name, e := range (&Service{}).endpoints() {
		if why := differs(e.request, map[reflect.Type]bool{}); why != "" {
			t.Errorf("%s: request %s: %s", name, typeName(e.request), why)
		}
	}
}

var (
	rawMessage = reflect.TypeFor[json.RawMessage]()
	unmarshals = []reflect.Type{reflect.TypeFor[json.Unmarshaler](), reflect.TypeFor[encoding.TextUnmarshaler]()}
)

// differs says why json/v2 might decode t otherwise than encoding/json,
// or "".
func differs(t reflect.Type, seen map[reflect.Type]bool) string {
	if seen[t] || t == rawMessage {
		return ""
	}
	seen[t] = true
	for _, u := range unmarshals {
		if reflect.PointerTo(t).Implements(u) {
			return t.String() + " decodes itself"
		}
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return differs(t.Elem(), seen)
	case reflect.Map:
		return differs(t.Elem(), seen)
	case reflect.Int64:
		if t.String() == "time.Duration" {
			return "a time.Duration"
		}
	case reflect.Struct:
		for f := range t.Fields() {
			tag := f.Tag.Get("json")
			switch {
			case f.Anonymous:
				return t.String() + " embeds " + f.Type.String()
			case strings.Contains(tag, ",string"):
				return t.String() + "." + f.Name + " is ,string"
			}
			if why := differs(f.Type, seen); why != "" {
				return why
			}
		}
	}
	return ""
}
