package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/machine"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/wire"
)

// receiptCmd is `toolgate receipt ID [--json]`.
func receiptCmd(out cliOutput) *cliCmd {
	c := newCLICmd("receipt", "receipt ID [--json] [flags]",
		"Print a call's signed receipts, one per transition: what happened, who did it and\n"+
			"when, the key that signed it and its hash, which the next receipt names. With --json,\n"+
			"the receipt chain as 'toolgate verify FILE' checks it offline (docs/receipts.md).", out).
		connFlags().jsonFlag("the receipt chain (what toolgate verify FILE reads)")
	c.run = callOn(c, "the call's ID (its pendingId)", (*client.Client).Receipts, func(ch *wire.ReceiptChain) error {
		if len(ch.Receipts) == 0 {
			fmt.Fprintf(out.stderr, "%s has no receipts (written before receipts, or by a toolgate without a receipt key)\n", ch.PendingID)
			return nil
		}
		return printReceipts(out.stdout, ch.Receipts)
	})
	return c
}

// printReceipts writes receipts as a table, one line each.
func printReceipts(w io.Writer, rs []machine.Receipt) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tEVENT\tFROM → TO\tACTOR\tTIME\tKEY\tHASH")
	for _, r := range rs {
		from := string(r.From)
		if from == "" {
			from = "(new)"
		}
		hash, err := machine.ReceiptHash(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%d\t%s\t%s → %s\t%s\t%s\t%s\t%s\n", r.Seq, r.Event, from, r.To, oneLine(r.Actor, 30),
			time.UnixMilli(r.At).UTC().Format("2006-01-02T15:04:05.000Z"), short(r.Key, 10), short(hash, 19))
	}
	return tw.Flush()
}

// short is s cut to n characters and an ellipsis.
func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// verifyCmd is `toolgate verify FILE|ID [--key PUB]`.
func verifyCmd(out cliOutput) *cliCmd {
	c := newCLICmd("verify", "verify FILE | ID [--key PUB]... [flags]",
		"Verify a call's receipt chain: every receipt signed by a trusted key and naming the\n"+
			"one before by its hash, and the call's entry saying what its receipts record (its\n"+
			"state, decision, arguments' digest, outcome). FILE is what 'toolgate receipt ID --json'\n"+
			"wrote (or an archived entry; - reads stdin), checked offline; ID fetches the chain\n"+
			"from toolgate. --key gives the trusted public keys (repeat it, or a comma-separated\n"+
			"list); without it, the keys toolgate publishes are trusted, and the output says so.\n"+
			"Prints OK and the signers, or where the chain fails, and exits 1.", out).connFlags()
	var keys []string
	c.fs.Func("key", "a trusted public receipt key, N… (repeatable, or comma-separated; default: the keys toolgate publishes)", func(v string) error {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k == "" {
				continue
			}
			if err := client.ValidReceiptKey(k); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return nil
	})
	c.run = func(ctx context.Context, args []string) error {
		pos, err := c.parse(args, 1, 1, "a receipt chain FILE (toolgate receipt ID --json; - for stdin) or a call's ID")
		if err != nil {
			return err
		}
		src := pos[0]
		ch, err := readChain(src)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		fetch := ch == nil
		if fetch && !machine.ValidPendingID(src) {
			return c.usagef("%q: no such file, nor a call's ID", src)
		}
		if fetch || len(keys) == 0 {
			err := c.withClient(ctx, func(ctx context.Context, cl *client.Client) (err error) {
				if fetch {
					if ch, err = cl.Receipts(ctx, src); err != nil {
						return err
					}
				}
				if len(keys) == 0 {
					published, err := cl.ReceiptKeys(ctx)
					if err != nil {
						return err
					}
					keys = published.Keys
					fmt.Fprintf(out.stderr, "trusting the receipt keys toolgate publishes (%s); give --key to check against keys you hold\n", strings.Join(keys, ", "))
					if len(keys) == 0 {
						return errors.New("toolgate publishes no receipt key: give --key")
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		signers, err := client.VerifyReceiptChain(ch, keys)
		if err != nil {
			return fmt.Errorf("FAILED: %s: %w", ch.PendingID, err)
		}
		fmt.Fprintf(out.stdout, "OK: %s of %s, signed by %s\n", counted(len(ch.Receipts), "receipt", "receipts"), ch.PendingID, strings.Join(signers, ", "))
		if ch.ArgumentsMasked {
			fmt.Fprintln(out.stdout, "the arguments are shown masked: checked by their digest only")
		}
		return nil
	}
	return c
}

// readChain reads a receipt chain from a file (- for stdin): what
// `receipt --json` writes, or an entry as the bucket, an archive or an
// event holds it. A file that is not there is fs.ErrNotExist.
func readChain(path string) (*wire.ReceiptChain, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("%s: not a receipt chain: %v", path, err)
	}
	if _, ok := fields["entry"]; ok {
		var ch wire.ReceiptChain
		if err := json.Unmarshal(data, &ch); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return &ch, nil
	}
	if _, ok := fields["status"]; !ok {
		return nil, fmt.Errorf("%s: neither a receipt chain (toolgate receipt ID --json) nor an entry", path)
	}
	var e machine.Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ch := &wire.ReceiptChain{PendingID: e.PendingID, Receipts: e.Receipts, Entry: &e}
	// An entry as an approver or viewer was shown it has its secrets
	// masked: its arguments are checked by their digest.
	ch.ArgumentsMasked = bytes.Contains(e.ToolArguments, []byte(policy.RedactedValue)) || bytes.Contains(e.OriginalArguments, []byte(policy.RedactedValue))
	e.Receipts = nil
	return ch, nil
}
