// Package bustest is what toolgate's tests of NATS share. It starts real
// embedded NATS JetStream servers (a single node or a 3-node cluster:
// Start, Server, Cluster), shut down when the test ends, and connects to
// them; runs a relay or an events feed for a test; writes fixtures
// straight into the calls bucket or any stream (PutRaw, PublishRaw) and
// follows them with an index (FollowCalls); cuts a client off the
// network (Proxy) or moves a stream's leader (MoveStreamLeader). And it
// holds the tests' helpers: Eventually, a wait whose failure says what it
// awaited and what it last saw; SameFields, which holds a reader's slim
// struct to the whole event or entry; FreePort; CPUTime, the process's
// CPU that benchmarks report per operation.
package bustest
