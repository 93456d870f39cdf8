package wire

import "errors"

// ErrStorageFull refuses a write that JetStream would not store for want
// of room: the server's store at its limit (max_file_store), the
// account's JetStream storage limit, a stream at its maximum bytes, or a
// disk out of space. Nothing was written; once there is room again (the
// limit raised, data removed), the same request succeeds. Over the wire
// it is the code storage_full, status 507.
var ErrStorageFull = errors.New("storage full")

// ErrUnavailable refuses a request for what this toolgate cannot read
// now (the analytics, while their bucket cannot be read); the same
// request may succeed later. Over the wire it is the code unavailable,
// status 503.
var ErrUnavailable = errors.New("unavailable")
