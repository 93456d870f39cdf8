package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"
)

// ReceiptKeyPath is where a toolgate process keeps, under its data
// directory, the seed of the key it signs receipts with: created at first
// start, readable by its owner only.
func ReceiptKeyPath(data string) string { return filepath.Join(authDir(data), "receipts.nk") }

// receiptKey loads the data directory's receipt key, creating it on
// first start. Every process that writes entries signs with the key of
// its own data directory; each receipt names the key that signed it.
func receiptKey(data string) (nkeys.KeyPair, error) {
	path := ReceiptKeyPath(data)
	seed, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		kp, err := nkeys.CreateServer()
		if err != nil {
			return nil, err
		}
		if seed, err = kp.Seed(); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("--data %s: receipt key: %w", data, err)
		}
		// Created once: of two processes starting on one data directory,
		// the second reads the first's.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return receiptKey(data)
		} else if err != nil {
			return nil, fmt.Errorf("--data %s: receipt key: %w", data, err)
		}
		_, werr := f.Write(append(seed, '\n'))
		if err := errors.Join(werr, f.Close()); err != nil {
			return nil, fmt.Errorf("--data %s: receipt key: %w", data, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("--data %s: receipt key: %w", data, err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, fmt.Errorf("receipt key %s: %w", path, err)
	}
	return kp, nil
}
