package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolgate/toolgate/bus"
	"github.com/toolgate/toolgate/internal/server"
)

func host() Host {
	h := Host{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return h
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time process pid has used, from /proc (0 where
// there is none).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses:
	// utime and stime are the 14th and 15th of the line, in clock ticks.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks
}

// serverMessages returns a counter of the messages the NATS servers of
// cfg took in and sent, all of them together ($SYS.REQ.SERVER.PING.VARZ),
// asked with a system account credential made from data's keys.
func serverMessages(cfg bus.ConnConfig, data string) (count func() int64, closeCount func(), err error) {
	creds, err := server.SystemCreds(data)
	if err != nil {
		return nil, nil, err
	}
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return nil, nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(creds)
	if err != nil {
		return nil, nil, err
	}
	seed, _ := kp.Seed()
	cc := bus.ConnConfig{URLs: cfg.URLs, TLSCA: cfg.TLSCA, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, Name: "toolgate bench: server statistics"}
	nc, err := bus.Connect(cc, nats.UserJWTAndSeed(token, string(seed)))
	if err != nil {
		return nil, nil, err
	}
	count = func() int64 {
		replies := make(chan *nats.Msg, 16)
		inbox := nats.NewInbox()
		sub, err := nc.ChanSubscribe(inbox, replies)
		if err != nil {
			return 0
		}
		defer sub.Unsubscribe() //nolint:errcheck // a read's end
		if nc.PublishRequest("$SYS.REQ.SERVER.PING.VARZ", inbox, nil) != nil {
			return 0
		}
		// Every server answers: the first within a second, the others
		// soon after it.
		var total int64
		wait := time.NewTimer(time.Second)
		defer wait.Stop()
		for {
			select {
			case m := <-replies:
				var r struct {
					Data struct {
						InMsgs  int64 `json:"in_msgs"`
						OutMsgs int64 `json:"out_msgs"`
					} `json:"data"`
				}
				if json.Unmarshal(m.Data, &r) == nil {
					total += r.Data.InMsgs + r.Data.OutMsgs
				}
				wait.Reset(100 * time.Millisecond)
			case <-wait.C:
				return total
			}
		}
	}
	return count, nc.Close, nil
}
