// Package backup takes and restores toolgate's state over JetStream's own
// snapshot API ($JS.API.STREAM.SNAPSHOT and $JS.API.STREAM.RESTORE): the
// stream of every bucket and stream toolgate provisions (bus.Streams),
// their consumers' positions with them, and the files of the trust chain
// that signed its credentials, in a directory with a manifest.
package backup
