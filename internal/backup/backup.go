package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/wire"
)

// Version is the version of the backup's layout its manifest records.
const Version = 1

// ManifestFile is the manifest's name in a backup's directory, written
// last: a directory without one holds no complete backup.
const ManifestFile = "manifest.json"

// trustDir is where a backup keeps the trust chain's files.
const trustDir = "trust"

// Manifest says what a backup holds.
type Manifest struct {
	Version int       `json:"version"`
	Taken   time.Time `json:"taken"` // when it started
	// Took is how long it took, in milliseconds.
	Took    int64    `json:"tookMs"`
	Streams []Stream `json:"streams"`
	// Trust are the files of the trust chain it holds, under trust/.
	Trust []string `json:"trust,omitempty"`
}

// Stream is one stream's snapshot in a backup.
type Stream struct {
	Name     string `json:"name"`
	File     string `json:"file"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"` // the stream's, as stored
	Size     int64  `json:"size"`  // the snapshot's, compressed
	// Config and State are what JetStream said of the stream at its
	// snapshot, and what a restore gives it back.
	Config json.RawMessage `json:"config"`
	State  json.RawMessage `json:"state"`
}

// order is the order a backup takes the streams in. No two snapshots are
// taken at one instant, and what one stream derives from another must
// not be missing from the backup: the calls' bucket first (with the
// relay's position in it), then the streams (the events, what the relay
// made of those calls and more; the archive, where a call goes before it
// leaves the bucket), then the other buckets (the budgets, settled from
// the events). What a later snapshot holds beyond an earlier one's is
// taken up on restore (Restore) or harmless: an event of a revision the
// bucket's snapshot lacks is dropped and made again by the relay; a
// call both in the bucket and in the archive is archived again, the
// same; a budget counts a call that ended while the backup was taken,
// which the events then settle once more (over, never under, its limit).
func order(names []string) []string {
	rank := func(name string) int {
		switch {
		case name == "KV_"+wire.CallsBucket:
			return 0
		case !strings.HasPrefix(name, "KV_"):
			return 1
		}
		return 2
	}
	names = slices.Clone(names)
	slices.SortStableFunc(names, func(a, b string) int { return rank(a) - rank(b) })
	return names
}

// Take backs up every stream bus.Streams names that nc's account has,
// and the files in trust (a data directory's trust chain, if it has
// one), into dir, which must be empty or absent.
func Take(ctx context.Context, nc *nats.Conn, dir, trust string) (*Manifest, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("backup: %s is not empty: a backup goes into a directory of its own", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	m := &Manifest{Version: Version, Taken: time.Now().UTC()}
	for _, name := range order(bus.Streams()) {
		s, err := takeStream(ctx, nc, dir, name)
		var apiErr *apiError
		if errors.As(err, &apiErr) && apiErr.ErrCode == errStreamNotFound {
			continue // never provisioned here (analytics without the role)
		}
		if err != nil {
			return nil, fmt.Errorf("backup: stream %s: %w", name, err)
		}
		m.Streams = append(m.Streams, s)
	}
	files, err := copyFiles(trust, filepath.Join(dir, trustDir))
	if err != nil {
		return nil, fmt.Errorf("backup: trust chain: %w", err)
	}
	m.Trust = files
	m.Took = time.Since(m.Taken).Milliseconds()
	data, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFile(filepath.Join(dir, ManifestFile), data); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return m, nil
}

func takeStream(ctx context.Context, nc *nats.Conn, dir, name string) (Stream, error) {
	s := Stream{Name: name, File: name + ".snapshot"}
	f, err := os.OpenFile(filepath.Join(dir, s.File), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return s, err
	}
	defer f.Close()
	if s.Config, s.State, err = snapshot(ctx, nc, name, f); err != nil {
		return s, err
	}
	if err := f.Sync(); err != nil {
		return s, err
	}
	var state struct {
		Messages uint64 `json:"messages"`
		Bytes    uint64 `json:"bytes"`
	}
	if err := json.Unmarshal(s.State, &state); err != nil {
		return s, err
	}
	s.Messages, s.Bytes = state.Messages, state.Bytes
	info, err := f.Stat()
	if err != nil {
		return s, err
	}
	s.Size = info.Size()
	return s, f.Close()
}

// ReadManifest reads the manifest of the backup in dir.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no complete backup: no %s", dir, ManifestFile)
	} else if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("%s: a backup of version %d; this toolgate restores version %d", dir, m.Version, Version)
	}
	return &m, nil
}

// RestoreOptions say how to restore.
type RestoreOptions struct {
	// Replace deletes the streams the backup holds where the server has
	// them already; without it, any there refuses the restore.
	Replace bool
	// Replicas, when not 0, is the replicas of every stream restored, in
	// place of the backup's.
	Replicas int
}

// Restore creates the streams of the backup in dir on nc's account, with
// their consumers, as they were when it was taken. The events the relay
// had not yet taken as published are dropped and the relay is set back
// to the first revision it had not acknowledged, so that it makes them
// again from the calls as restored: every revision's events once, none
// of a revision the backup does not hold.
func Restore(ctx context.Context, nc *nats.Conn, dir string, opts RestoreOptions) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var there []string
	for _, s := range m.Streams {
		if _, err := js.Stream(ctx, s.Name); err == nil {
			there = append(there, s.Name)
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("restore: stream %s: %w", s.Name, err)
		}
	}
	if len(there) > 0 && !opts.Replace {
		return nil, fmt.Errorf("restore: the server has %s already: restore into a new server, or delete them first (--replace)", strings.Join(there, ", "))
	}
	for _, name := range there {
		if err := js.DeleteStream(ctx, name); err != nil {
			return nil, fmt.Errorf("restore: delete stream %s: %w", name, err)
		}
	}
	for _, s := range m.Streams {
		if err := restoreStream(ctx, nc, dir, s, opts.Replicas); err != nil {
			return nil, fmt.Errorf("restore: stream %s: %w", s.Name, err)
		}
	}
	if err := rewindRelay(ctx, nc, js); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return m, nil
}

func restoreStream(ctx context.Context, nc *nats.Conn, dir string, s Stream, replicas int) error {
	config := s.Config
	if replicas > 0 {
		var cfg map[string]json.RawMessage
		if err := json.Unmarshal(config, &cfg); err != nil {
			return err
		}
		cfg["num_replicas"], _ = json.Marshal(replicas)
		config, _ = json.Marshal(cfg)
	}
	f, err := os.Open(filepath.Join(dir, s.File))
	if err != nil {
		return err
	}
	defer f.Close()
	return restore(ctx, nc, s.Name, config, s.State, f)
}

// RestoreTrust puts the trust chain's files of the backup in dir into
// trust (a data directory's), where there are none yet; a different one
// there already refuses it, as credentials issued by either would then
// not work.
func RestoreTrust(dir, trust string) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	for _, name := range m.Trust {
		want, err := os.ReadFile(filepath.Join(dir, trustDir, name))
		if err != nil {
			return err
		}
		path := filepath.Join(trust, name)
		have, err := os.ReadFile(path)
		switch {
		case err == nil && bytes.Equal(have, want):
			continue
		case err == nil:
			return fmt.Errorf("restore: %s differs from the backup's: restore into a data directory of its own", path)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		if err := os.MkdirAll(trust, 0o700); err != nil {
			return err
		}
		if err := writeFile(path, want); err != nil {
			return err
		}
	}
	return nil
}

// copyFiles copies the regular files of from (none when it does not
// exist) into to, and returns their names.
func copyFiles(from, to string) ([]string, error) {
	entries, err := os.ReadDir(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(to, 0o700); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(to, e.Name()), data); err != nil {
			return nil, err
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// writeFile writes a file only its owner may read, synced, all or
// nothing.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err := errors.Join(err, f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
