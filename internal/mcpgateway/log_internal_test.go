package mcpgateway

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The SDK warns when a list_changed notification finds no stream to go
// on, which every HTTP session whose client has not opened one does: at
// info level it is not logged; the SDK's other warnings are.
func TestSDKLog_ListChangedWithoutAStreamIsNotAWarning(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(sdkHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})})
	log.Warn("calling notifications/tools/list_changed: stream not connected or already closed")
	assert.Empty(t, buf.String())
	log.Info("something the SDK says at info level")
	assert.Empty(t, buf.String())
	log.Warn("failed to connect: boom")
	assert.Contains(t, buf.String(), "level=WARN msg=\"failed to connect: boom\"")

	buf.Reset()
	debug := slog.New(sdkHandler{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})})
	debug.Warn("calling notifications/tools/list_changed: stream not connected or already closed")
	assert.Contains(t, buf.String(), "level=DEBUG", "kept at debug level")
}
