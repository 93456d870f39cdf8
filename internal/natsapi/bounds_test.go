package natsapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/gate"
	"github.com/toolgate/toolgate/machine"
)

// Every endpoint refuses a request any of whose strings is longer than any
// bound (1 MiB), before its use case sees it, naming the field.
func TestEndpoints_RefuseOverLongStrings(t *testing.T) {
	t.Parallel()
	for name, e := range (&Service{}).endpoints() {
		for _, field := range stringFields(e.request) {
			data, _ := json.Marshal(map[string]string{field: strings.Repeat("x", 1<<20+1)})
			_, err := e.handle(t.Context(), gate.Actor{}, data) // a nil gate: reaching the use case panics
			if err == nil || !strings.Contains(err.Error(), field+": at most") {
				t.Errorf("%s: an over-long %s: %v", name, field, err)
			}
		}
	}
}

// stringFields lists the JSON names of t's top-level string fields.
func stringFields(t reflect.Type) []string {
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() == reflect.String && name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// FuzzDecode: no request body, however malformed, panics a decoder; a
// refused one is refused as invalid.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"callerBotId":"` + strings.Repeat("c", 10_000) + `"}`))
	f.Add([]byte(`{"ids":["a",1],"reason":"\u0000"}`))
	f.Add([]byte(`{"team":null,"document":"x","toolArguments":{"a":[{}]}}`))
	types := map[reflect.Type]bool{}
	for _, e := range (&Service{}).endpoints() {
		types[e.request] = true
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for typ := range types {
			if err := decode(data, reflect.New(typ).Interface()); err != nil && !strings.HasPrefix(err.Error(), machine.ErrInvalid.Error()) {
				t.Fatalf("%s: %v", typ, err)
			}
		}
	})
}
