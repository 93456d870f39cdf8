package server

import (
	"context"
	"log/slog"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/natsapi"
)

// builtinTools are the tools serve can host itself (--tools).
var builtinTools = map[string]func() client.Handler{
	"http": func() client.Handler { return client.HTTPTool(nil) },
	"exec": client.ExecTool,
}

// runExecutor hosts the built-in tools named by --tools. With none named
// it has nothing to do: executors are usually the agents' own processes
// (client.Executor), and this role is for the tools toolgate ships.
func runExecutor(ctx context.Context, d *deps, log *slog.Logger) error {
	if len(d.cfg.Tools) == 0 {
		log.Debug("no built-in tools to host (--tools)")
		<-ctx.Done()
		return nil
	}
	c, err := client.New(d.nc)
	if err != nil {
		return err
	}
	x, err := c.NewExecutor(client.ExecutorOptions{Lease: d.cfg.Lease, Log: log})
	if err != nil {
		return err
	}
	for _, t := range d.cfg.Tools {
		x.Handle(t, builtinTools[t]())
	}
	// Work comes from the request API: wait until it answers (this
	// process's intake role, or another process's, starting meanwhile)
	// rather than warn every second that it does not.
	if err := natsapi.WaitReady(ctx, d.nc); err != nil {
		return err
	}
	log.Info("hosting built-in tools", "tools", d.cfg.Tools)
	return x.Run(ctx)
}
