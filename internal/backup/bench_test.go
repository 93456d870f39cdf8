package backup_test

import (
	"encoding/base64"
	"flag"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/internal/backup"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

var benchCalls = flag.Int("calls", 10_000, "calls in the bucket BenchmarkRestore backs up and restores")

// BenchmarkRestore measures a restore of -calls finished calls, each an
// entry of 2 KiB (arguments, result and receipts, as random as
// signatures: they do not compress), into a new server: calls restored a
// second.
//
//	go test ./internal/backup -run - -bench Restore -benchtime 1x -calls 100000
func BenchmarkRestore(b *testing.B) {
	env := bustest.Start(b, bustest.Topologies[0])
	ctx := b.Context()
	noise, random := make([]byte, 1536), rand.New(rand.NewSource(1))
	for i := range *benchCalls {
		id := fmt.Sprintf("bench.%d", i)
		_, _ = random.Read(noise)
		entry := fmt.Appendf(nil, `{"pendingId":%q,"status":"COMPLETED_SUCCESS","receipts":%q}`, id, base64.StdEncoding.EncodeToString(noise))
		if _, err := env.JS.PublishAsync("$KV."+wire.CallsBucket+"."+id, entry); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			<-env.JS.PublishAsyncComplete()
		}
	}
	<-env.JS.PublishAsyncComplete()
	dir := filepath.Join(b.TempDir(), "backup")
	m, err := backup.Take(ctx, env.NC, dir, "")
	require.NoError(b, err)
	var size int64
	for _, s := range m.Streams {
		size += s.Size
	}
	b.ResetTimer()
	var took time.Duration
	for range b.N {
		fresh := bustest.Server(b)
		nc, _ := bustest.Connect(b, fresh.ClientURL())
		start := time.Now()
		_, err := backup.Restore(ctx, nc, dir, backup.RestoreOptions{})
		took += time.Since(start)
		require.NoError(b, err)
		js, _ := jetstream.New(nc)
		st, err := js.Stream(ctx, "KV_"+wire.CallsBucket)
		require.NoError(b, err)
		require.Equal(b, uint64(*benchCalls), st.CachedInfo().State.Msgs)
	}
	b.ReportMetric(float64(*benchCalls)*float64(b.N)/took.Seconds(), "calls/s")
	b.ReportMetric(float64(size)/float64(1<<20), "backup-MiB")
	b.ReportMetric(float64(m.Took)/1000, "backup-s")
}
