// Package wire is toolgate's contract with everything outside its server:
// the names of its buckets and streams, the subjects of its events and
// request endpoints, the event envelope, the requests and replies of the
// request API, and the codes its refusals carry. It imports only machine,
// so an agent or executor links the contract and nothing of the server.
package wire
