package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// JSON is YAML, nearly: yaml.v3 rejects two string escapes that JSON
// allows, "\/" and UTF-16 surrogate pairs ("\ud83d\ude00"), and Python's
// json.dumps writes the second by default. jsonForYAML rewrites valid JSON
// token by token with Go's escapes, which YAML reads. It keeps key order and
// duplicate keys, so the strict decoder still sees what was written.
func jsonForYAML(data []byte) ([]byte, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out bytes.Buffer
	type frame struct {
		object bool
		n      int // tokens written in this object or array
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return out.Bytes(), true
		}
		if err != nil {
			return nil, false
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			out.WriteByte(byte(d))
			stack = stack[:len(stack)-1]
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			switch {
			case top.object && top.n%2 == 1:
				out.WriteByte(':')
			case top.n > 0:
				out.WriteByte(',')
			}
			top.n++
		}
		switch v := tok.(type) {
		case json.Delim:
			out.WriteByte(byte(v))
			stack = append(stack, frame{object: v == '{'})
		case string:
			b, _ := json.Marshal(v)
			out.Write(b)
		case json.Number:
			out.WriteString(v.String())
		case bool:
			if v {
				out.WriteString("true")
			} else {
				out.WriteString("false")
			}
		case nil:
			out.WriteString("null")
		}
	}
}
