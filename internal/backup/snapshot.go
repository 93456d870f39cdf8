package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
)

// chunkSize is the size of the chunks a snapshot travels in, both ways:
// JetStream's default for a snapshot, and its largest message by default
// is 1 MiB.
const chunkSize = 128 * 1024

// defaultWindow is how much of a snapshot JetStream sends at most
// before the receiver has acknowledged it.
const defaultWindow = 8 << 20

// idle bounds the wait for the next chunk of a snapshot: the server
// gives up on a receiver that does not acknowledge within 5 s, and sends
// the end of the snapshot then, so a longer silence is a lost server.
const idle = 30 * time.Second

// apiError is an error JetStream's API answered with.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (%d)", e.Description, e.ErrCode) }

// errStreamNotFound is JetStream's error code for a stream it does not have.
const errStreamNotFound = 10059

// request sends req to JetStream's API subject and decodes its answer
// into resp, whose error it returns.
func request(ctx context.Context, nc *nats.Conn, subject string, req any, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return err
	}
	return decode(msg.Data, resp)
}

// decode decodes an answer of JetStream's API into resp, and returns
// the error it carries, if any.
func decode(data []byte, resp any) error {
	var e struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("JetStream's answer %q: %w", data, err)
	}
	if e.Error != nil {
		return e.Error
	}
	if resp == nil {
		return nil
	}
	return json.Unmarshal(data, resp)
}

// snapshot writes stream's snapshot, its consumers included, to w, and
// returns the stream's configuration and state at the snapshot, as
// JetStream gave them (what a restore hands back to it).
//
// JetStream sends the chunks to an inbox, each with a subject to
// acknowledge it on but the last, and holds back once a window of them
// waits unacknowledged; an empty message ends them, with a status when
// the snapshot failed.
func snapshot(ctx context.Context, nc *nats.Conn, stream string, w io.Writer) (config, state json.RawMessage, err error) {
	inbox := nc.NewInbox()
	// Room for every chunk of JetStream's window (8 MiB) and more: none
	// is dropped for want of it.
	chunks := make(chan *nats.Msg, 2*defaultWindow/chunkSize)
	sub, err := nc.ChanSubscribe(inbox, chunks)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	var resp struct {
		Config json.RawMessage `json:"config"`
		State  json.RawMessage `json:"state"`
	}
	err = request(ctx, nc, "$JS.API.STREAM.SNAPSHOT."+stream, map[string]any{"deliver_subject": inbox, "chunk_size": chunkSize, "window_size": defaultWindow}, &resp)
	if err != nil {
		return nil, nil, err
	}
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-timer.C:
			return nil, nil, fmt.Errorf("no chunk of the snapshot for %s", idle)
		case m := <-chunks:
			timer.Reset(idle)
			if len(m.Data) == 0 {
				// JetStream says 204 at the end of a snapshot longer
				// than a chunk, nothing at the end of a shorter one.
				if status := m.Header.Get("Status"); status != "" && status != "204" {
					return nil, nil, fmt.Errorf("the server ended the snapshot: %s %s", status, m.Header.Get("Description"))
				}
				return resp.Config, resp.State, nil
			}
			if _, err := w.Write(m.Data); err != nil {
				return nil, nil, err
			}
			if m.Reply == "" {
				continue // the last chunk: nothing more to ask for
			}
			if err := m.Respond(nil); err != nil {
				return nil, nil, err
			}
		}
	}
}

// restore creates a stream from a snapshot read from r, with the
// configuration and state the snapshot was taken with (config may
// differ in what JetStream lets a stream's configuration change, such
// as its replicas). JetStream names a subject to send the chunks to,
// acknowledges each, and answers an empty one, the end, once the stream
// is restored.
func restore(ctx context.Context, nc *nats.Conn, name string, config, state json.RawMessage, r io.Reader) error {
	var resp struct {
		DeliverSubject string `json:"deliver_subject"`
	}
	err := request(ctx, nc, "$JS.API.STREAM.RESTORE."+name, map[string]json.RawMessage{"config": config, "state": state}, &resp)
	if err != nil {
		return err
	}
	buf := make([]byte, chunkSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			ack, rerr := nc.RequestWithContext(ctx, resp.DeliverSubject, buf[:n])
			if rerr != nil {
				return rerr
			}
			if len(ack.Data) > 0 {
				if derr := decode(ack.Data, nil); derr != nil {
					return derr
				}
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		} else if err != nil {
			return err
		}
	}
	done, err := nc.RequestWithContext(ctx, resp.DeliverSubject, nil)
	if err != nil {
		return err
	}
	return decode(done.Data, nil)
}
