package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/backup"
	"github.com/toolgate/toolgate/internal/server"
)

// connectJetStream connects as the verbs do, but with toolgate's own
// credential where they would take the admin's: the buckets and streams
// are in toolgate's account, which only toolgate's identity reaches.
func (c *cliCmd) connectJetStream() (*nats.Conn, error) {
	cfg, err := c.credentials()
	if err != nil {
		return nil, err
	}
	if cfg.CredsFile == server.CredsPath(c.data, "admin") {
		cfg.CredsFile = server.CredsPath(c.data, auth.ServerUser)
	}
	cfg.Name = "toolgate " + c.verb
	nc, err := bus.Connect(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (is toolgate serving there? --nats says where, --nats-creds with toolgate's own credential)%s", err, c.credsFrom)
	}
	return nc, nil
}

// backupCmd is `toolgate backup DIR`.
func backupCmd(out cliOutput) *cliCmd {
	c := newCLICmd("backup", "backup DIR [flags]",
		"Back up everything toolgate keeps into DIR (new or empty): a snapshot of every\n"+
			"bucket and stream, with their consumers, taken by JetStream while toolgate\n"+
			"serves, the trust chain of --data (which signs every credential), and\n"+
			"manifest.json, written last. It connects with toolgate's own credential\n"+
			"(--nats-creds, or --data's). See docs/deploy.md.", out).connFlags()
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "DIR")
		if err != nil {
			return err
		}
		nc, err := c.connectJetStream()
		if err != nil {
			return err
		}
		defer nc.Close()
		m, err := backup.Take(ctx, nc, pos[0], server.TrustDir(c.data))
		if err != nil {
			return err
		}
		var msgs uint64
		var size int64
		for _, s := range m.Streams {
			fmt.Fprintf(out.stdout, "%-22s %10d messages %12d bytes\n", s.Name, s.Messages, s.Size)
			msgs, size = msgs+s.Messages, size+s.Size
		}
		trust := "no trust chain (none in --data: credentials will need one)"
		if len(m.Trust) > 0 {
			trust = "the trust chain of " + c.data
		}
		fmt.Fprintf(out.stdout, "backed up %d streams, %d messages, %d bytes, and %s, into %s in %s\n",
			len(m.Streams), msgs, size, trust, pos[0], time.Duration(m.Took)*time.Millisecond)
		return nil
	}
	return c
}

// restoreCmd is `toolgate restore DIR`.
func restoreCmd(out cliOutput) *cliCmd {
	c := newCLICmd("restore", "restore DIR [--replace] [--replicas N] [flags]",
		"Restore the backup in DIR before toolgate serves: its trust chain into --data,\n"+
			"and its buckets and streams into the NATS servers --nats names or, without\n"+
			"--nats, into --data's own (serve's embedded server, not running). Streams there\n"+
			"already refuse it, unless --replace deletes them first. Then start\n"+
			"toolgate serve on it. See docs/deploy.md.", out).connFlags()
	replace := c.fs.Bool("replace", false, "delete the streams the backup holds where the servers have them")
	replicas := c.fs.Int("replicas", 0, "replicas of every stream restored (default: as backed up)")
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "DIR")
		if err != nil {
			return err
		}
		if *replicas < 0 || *replicas > 5 {
			return c.usagef("--replicas: must be 1 to 5, got %d", *replicas)
		}
		dir := pos[0]
		if err := backup.RestoreTrust(dir, server.TrustDir(c.data)); err != nil {
			return err
		}
		var nc *nats.Conn
		if c.flagSet("nats") {
			nc, err = c.connectJetStream()
		} else {
			var closeStore func()
			nc, closeStore, err = server.OpenStore(c.data)
			if err == nil {
				defer closeStore()
			}
		}
		if err != nil {
			return err
		}
		defer nc.Close()
		start := time.Now()
		m, err := backup.Restore(ctx, nc, dir, backup.RestoreOptions{Replace: *replace, Replicas: *replicas})
		if err != nil {
			return err
		}
		var msgs uint64
		for _, s := range m.Streams {
			msgs += s.Messages
		}
		fmt.Fprintf(out.stdout, "restored %d streams, %d messages, backed up %s, in %s\n",
			len(m.Streams), msgs, m.Taken.Format(time.RFC3339), time.Since(start).Round(time.Millisecond))
		return nil
	}
	return c
}
