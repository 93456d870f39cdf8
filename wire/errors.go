package wire

import "errors"

// ErrStorageFull refuses a write that JetStream would not store for want
// of room: the server's store at its limit (max_file_store), the
// account's JetStream storage limit, a stream at its maximum bytes, or a
// disk out of space. Nothing was written; once there is room again (the
// limit raised, data removed), the same request succeeds. Over the wire
// it is the code storage_full, status 507.
var ErrStorageFull = errors.New("storage full")
