package bustest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SameFields checks a slim struct a reader decodes an event or an entry
// into against the whole one it was decoded from: every field of slim, at
// any depth, has the JSON key of full's field of the same name, is set
// (the fixture covers it; a bool may be false) and equals that field.
func SameFields(t testing.TB, slim, full any) {
	t.Helper()
	sameFields(t, reflect.TypeOf(slim).String(), reflect.ValueOf(slim), reflect.ValueOf(full))
}

func sameFields(t testing.TB, path string, slim, full reflect.Value) {
	t.Helper()
	for slim.Kind() == reflect.Pointer {
		require.False(t, slim.IsNil(), "%s: decoded as nil", path)
		require.False(t, full.IsNil(), "%s: nil in the whole", path)
		slim, full = slim.Elem(), full.Elem()
	}
	switch slim.Kind() {
	case reflect.Struct:
		for i := range slim.NumField() {
			f := slim.Type().Field(i)
			ff, ok := full.Type().FieldByName(f.Name)
			require.True(t, ok, "%s.%s: no such field in %s", path, f.Name, full.Type())
			assert.Equal(t, strings.TrimSuffix(ff.Tag.Get("json"), ",omitempty"), strings.TrimSuffix(f.Tag.Get("json"), ",omitempty"),
				"%s.%s: JSON key", path, f.Name)
			sameFields(t, path+"."+f.Name, slim.Field(i), full.FieldByIndex(ff.Index))
		}
	case reflect.Slice:
		require.Positive(t, slim.Len(), "%s: the fixture sets it", path)
		require.Equal(t, full.Len(), slim.Len(), path)
		for i := range slim.Len() {
			sameFields(t, path, slim.Index(i), full.Index(i))
		}
	default:
		if slim.Kind() != reflect.Bool {
			assert.False(t, slim.IsZero(), "%s: the fixture sets it", path)
		}
		assert.Equal(t, full.Interface(), slim.Interface(), path)
	}
}
